//! [`AssignedDevice`]: one PCI function opened through VFIO, and its region accesses and reset.
//! Configuration space, BARs, DMA and interrupts add their methods in their own modules.

use std::sync::Arc;

use pcie::PciAddress;

use crate::vfio::backend::VfioBackend;
use crate::vfio::container::Container;
use crate::vfio::error::{AssignError, Result};
use crate::vfio::types::{DeviceInfo, RegionInfo};
use crate::vfio::util::in_bounds;

/// A PCI function assigned through VFIO, driven by a [`VfioBackend`] (the kernel's VFIO in
/// production, an emulated device in tests), open in a [`Container`].
///
/// Mappings made from it ([`crate::vfio::MappedBar`]) and the DMA mappings of its container made
/// while it is open ([`crate::vfio::DmaMappings`]) share the backend, so the device file stays
/// open until the last of them is gone.
pub struct AssignedDevice<B: VfioBackend> {
    pub(crate) address: PciAddress,
    pub(crate) backend: Arc<B>,
    container: Container<B::Dma>,
    info: DeviceInfo,
}

impl<B: VfioBackend> std::fmt::Debug for AssignedDevice<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AssignedDevice")
            .field("address", &self.address)
            .field("container", &self.container)
            .field("info", &self.info)
            .finish_non_exhaustive()
    }
}

impl<B: VfioBackend> AssignedDevice<B> {
    /// Wraps an already opened backend, which joined `container` at `address`
    /// ([`Container::join`]); `address` names the device in errors and logs.
    pub fn new(container: &Container<B::Dma>, address: PciAddress, backend: B) -> Self {
        let info = backend.device_info();
        log::debug!("{address}: assigned, {info:?}");
        let backend = Arc::new(backend);
        let handle: std::sync::Weak<B> = Arc::downgrade(&backend);
        container.set_device(address, handle);
        AssignedDevice {
            address,
            backend,
            container: container.clone(),
            info,
        }
    }

    /// The container the device is open in: its DMA mappings
    /// ([`Container::map_guest_memory`]) are those of every device in it.
    pub fn container(&self) -> &Container<B::Dma> {
        &self.container
    }

    /// The device's PCI address.
    pub fn address(&self) -> PciAddress {
        self.address
    }

    /// The backend, for backend-specific inspection (e.g. the fake's IOMMU fault log).
    pub fn backend(&self) -> &B {
        &self.backend
    }

    /// What `VFIO_DEVICE_GET_INFO` reported when the device was opened.
    pub fn device_info(&self) -> DeviceInfo {
        self.info
    }

    /// Size, file offset, permissions and mmappable areas of region `index`.
    pub fn region_info(&self, index: u32) -> Result<RegionInfo> {
        self.backend
            .region_info(index)
            .ok_or(AssignError::NoSuchRegion {
                address: self.address,
                index,
            })
    }

    /// Reads `buf.len()` bytes at `offset` of region `index` through the device file (trapped,
    /// never through a mapping).
    pub fn read_region(&self, index: u32, offset: u64, buf: &mut [u8]) -> Result<()> {
        let info = self.checked_region(index, offset, buf.len() as u64)?;
        if !info.flags.read {
            return Err(self.access_denied(index, "readable"));
        }
        self.backend
            .region_read(index, offset, buf)
            .map_err(|source| {
                AssignError::region_io(self.address, index, "read", offset, buf.len(), source)
            })
    }

    /// Writes `data` at `offset` of region `index` through the device file.
    pub fn write_region(&self, index: u32, offset: u64, data: &[u8]) -> Result<()> {
        let info = self.checked_region(index, offset, data.len() as u64)?;
        if !info.flags.write {
            return Err(self.access_denied(index, "writable"));
        }
        self.backend
            .region_write(index, offset, data)
            .map_err(|source| {
                AssignError::region_io(self.address, index, "write", offset, data.len(), source)
            })
    }

    /// Resets the device with `VFIO_DEVICE_RESET`.
    ///
    /// Fails with [`AssignError::ResetNotSupported`] without touching the device when it has no
    /// reset method, and with [`AssignError::Reset`] (carrying the errno) when the reset failed.
    pub fn reset(&self) -> Result<()> {
        if !self.info.reset_supported {
            return Err(AssignError::ResetNotSupported {
                address: self.address,
            });
        }
        self.backend.reset().map_err(|source| AssignError::Reset {
            address: self.address,
            source,
        })?;
        log::info!("{}: device reset", self.address);
        Ok(())
    }

    /// The region's info, after checking that `[offset, offset + len)` lies inside it.
    pub(crate) fn checked_region(&self, index: u32, offset: u64, len: u64) -> Result<RegionInfo> {
        let info = self.region_info(index)?;
        if in_bounds(offset, len, info.size) {
            Ok(info)
        } else {
            Err(AssignError::RegionOutOfBounds {
                address: self.address,
                index,
                offset,
                len,
                size: info.size,
            })
        }
    }

    fn access_denied(&self, index: u32, access: &'static str) -> AssignError {
        AssignError::RegionAccessDenied {
            address: self.address,
            index,
            access,
        }
    }
}
