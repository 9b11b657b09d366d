//! [`KernelVfio`]: the [`crate::vfio::VfioBackend`] of a real device bound to vfio-pci, and
//! [`KernelDma`]: the [`crate::vfio::DmaBackend`] of a kernel VFIO container (legacy
//! container/group with the type1v2 IOMMU, or iommufd).
//!
//! Opening (container, group, iommufd, KVM VFIO device registration), region info with its
//! capabilities and DMA map/unmap come from `vfio-ioctls`. Region I/O, `SET_IRQS`, `GET_INFO` and
//! `RESET` are issued here directly because `vfio-ioctls` drops their errno (or, for reset, the
//! result altogether).
//!
//! `vfio-ioctls` 0.10 keeps one group file per container and hands it to the devices of the
//! group, so several devices of a group open fine in one container. It releases a group when
//! *any* of its devices is closed, though (it assumes one device per group): the kernel refuses
//! to detach the group from the container while another of its devices is open (logged by
//! vfio-ioctls as "Could not unbind VFIO group"), so that device keeps working and the group
//! stays attached until the container is dropped — but with a KVM VFIO device the group is
//! unregistered from KVM at that first close. Close the devices of a group together.
//!
//! The module is split by job: [`container`] (the IOMMU side: containers, KVM registration, DMA
//! map/unmap), [`open`] (finding a device's group and opening it in a container) and [`ioctl`]
//! (the device's [`crate::vfio::VfioBackend`]: region I/O, interrupts, reset).

use std::fs::File;

use vfio_ioctls::VfioDevice;

use crate::vfio::container::ContainerSlot;
use crate::vfio::types::DeviceInfo;

mod container;
mod ioctl;
mod open;
#[cfg(test)]
mod tests;

pub use container::KernelDma;

/// A device bound to vfio-pci, opened through the kernel in a [`crate::vfio::Container`].
pub struct KernelVfio {
    // Declared before `device` so it is closed first: vfio-ioctls detaches the group from the
    // container when `device` drops, which the kernel refuses while a device fd is still open.
    /// A duplicate of the device fd, for `pread`/`pwrite`/`mmap`/ioctls with proper errors.
    device_file: File,
    device: VfioDevice,
    info: DeviceInfo,
    // Last: the address is free for another open only once the device is closed.
    slot: ContainerSlot<KernelDma>,
}

impl std::fmt::Debug for KernelVfio {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KernelVfio")
            .field("address", &self.slot.address())
            .field("group", &self.slot.group())
            .field("info", &self.info)
            .finish_non_exhaustive()
    }
}
