//! [`Container`]: the unit VFIO assigns devices in. All devices of an IOMMU group, and all groups
//! of one VM, are opened in one container: the kernel lets a group be opened once
//! (`/dev/vfio/N` a second time fails with `EBUSY`), and the container's IOMMU domain holds the
//! DMA mappings every device in it uses, so guest memory is mapped once per container
//! ([`Container::map_guest_memory`]), not once per device.

use std::any::Any;
use std::collections::BTreeMap;
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard, Weak};

use pcie::PciAddress;

use crate::vfio::backend::DmaBackend;
use crate::vfio::error::{AssignError, Result};
use crate::vfio::types::ContainerMembers;
use crate::vfio::util::lock;

/// A VFIO container: one IOMMU domain ([`DmaBackend`]) and the devices opened in it.
///
/// Cloning gives another handle on the same container. Devices opened in it
/// ([`crate::vfio::AssignedDevice::open_in`]) and mappings made from it
/// ([`crate::vfio::DmaMappings`]) hold a handle too, so it lives until the last of them is gone.
pub struct Container<D: DmaBackend> {
    inner: Arc<Inner<D>>,
}

struct Inner<D> {
    dma: D,
    members: Mutex<BTreeMap<PciAddress, Member>>,
}

struct Member {
    group: u32,
    /// The device's backend once it is wrapped in an `AssignedDevice`: DMA mappings keep the
    /// devices open, because the IOMMU domain goes away with the last group that leaves.
    device: Option<Weak<dyn Any + Send + Sync>>,
}

impl<D: DmaBackend> Clone for Container<D> {
    fn clone(&self) -> Self {
        Container {
            inner: Arc::clone(&self.inner),
        }
    }
}

impl<D: DmaBackend> fmt::Debug for Container<D> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Container")
            .field("members", &self.members())
            .finish_non_exhaustive()
    }
}

impl<D: DmaBackend> Container<D> {
    /// An empty container over the IOMMU domain `dma`. The kernel's and the fake's containers
    /// have their own constructors ([`Container::new`], `Container::fake`); this one is for other
    /// backends.
    pub fn with_dma_backend(dma: D) -> Self {
        Container {
            inner: Arc::new(Inner {
                dma,
                members: Mutex::new(BTreeMap::new()),
            }),
        }
    }

    /// The IOMMU domain, for backend-specific inspection (e.g. the fake's mapped ranges).
    pub fn dma_backend(&self) -> &D {
        &self.inner.dma
    }

    /// The devices open in the container with their IOMMU groups, in address order.
    pub fn members(&self) -> ContainerMembers {
        ContainerMembers(
            self.lock()
                .iter()
                .map(|(address, member)| (*address, member.group))
                .collect(),
        )
    }

    /// The IOMMU groups attached to the container, ascending.
    pub fn groups(&self) -> Vec<u32> {
        let mut groups: Vec<u32> = self.lock().values().map(|m| m.group).collect();
        groups.sort_unstable();
        groups.dedup();
        groups
    }

    /// Whether `other` is a handle on this same container.
    pub fn same_as(&self, other: &Container<D>) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }

    /// Reserves `address` (in IOMMU group `group`) in the container, before a backend opens the
    /// device. The reservation lasts as long as the returned slot, which the backend keeps until
    /// it is dropped.
    ///
    /// Fails with [`AssignError::AlreadyOpen`] when the device is open in this container already
    /// (possibly kept open only by [`crate::vfio::DmaMappings`] made while it was).
    pub fn join(&self, address: PciAddress, group: u32) -> Result<ContainerSlot<D>> {
        let mut members = self.lock();
        if let Some(member) = members.get(&address) {
            return Err(AssignError::AlreadyOpen {
                address,
                group: member.group,
            });
        }
        members.insert(
            address,
            Member {
                group,
                device: None,
            },
        );
        Ok(ContainerSlot {
            container: self.clone(),
            address,
            group,
        })
    }

    /// Records the backend of the device at `address`, so that DMA mappings can keep it open.
    pub(crate) fn set_device(&self, address: PciAddress, device: Weak<dyn Any + Send + Sync>) {
        match self.lock().get_mut(&address) {
            Some(member) => member.device = Some(device),
            None => log::warn!("{address}: backend did not join its container"),
        }
    }

    /// Strong handles on the devices open in the container.
    pub(crate) fn open_devices(&self) -> Vec<Arc<dyn Any + Send + Sync>> {
        self.lock()
            .values()
            .filter_map(|m| m.device.as_ref().and_then(Weak::upgrade))
            .collect()
    }

    fn lock(&self) -> MutexGuard<'_, BTreeMap<PciAddress, Member>> {
        lock(&self.inner.members)
    }
}

/// A device's place in a [`Container`], held by its backend; leaving it (on drop) frees the
/// address for another open.
pub struct ContainerSlot<D: DmaBackend> {
    container: Container<D>,
    address: PciAddress,
    group: u32,
}

impl<D: DmaBackend> fmt::Debug for ContainerSlot<D> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ContainerSlot")
            .field("address", &self.address)
            .field("group", &self.group)
            .finish_non_exhaustive()
    }
}

impl<D: DmaBackend> ContainerSlot<D> {
    /// The container.
    pub fn container(&self) -> &Container<D> {
        &self.container
    }

    /// The device's PCI address.
    pub fn address(&self) -> PciAddress {
        self.address
    }

    /// The device's IOMMU group.
    pub fn group(&self) -> u32 {
        self.group
    }
}

impl<D: DmaBackend> Drop for ContainerSlot<D> {
    fn drop(&mut self) {
        self.container.lock().remove(&self.address);
        log::debug!(
            "{}: left its VFIO container (group {})",
            self.address,
            self.group
        );
    }
}
