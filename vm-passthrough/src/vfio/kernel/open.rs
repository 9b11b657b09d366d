//! Opening a device bound to vfio-pci: its IOMMU group from sysfs, checked against the one the
//! caller expects, then its device file through the group (or cdev) in a container.

use std::fs::File;
use std::os::fd::{AsRawFd, BorrowedFd};
use std::sync::Arc;

use pcie::{Host, PciAddress, PciDevice};
use vfio_ioctls::{VfioDevice, VfioError};

use super::ioctl::query_device_info;
use super::{KernelDma, KernelVfio};
use crate::vfio::container::Container;
use crate::vfio::device::AssignedDevice;
use crate::vfio::error::{AssignError, Result};

impl AssignedDevice<KernelVfio> {
    /// Opens `address` (already bound to vfio-pci) in `container`, in the IOMMU group that
    /// `host`'s sysfs reports for it. Every device of a group, and every group of one VM, is
    /// opened in one container; the container's DMA mappings serve them all.
    ///
    /// Fails with [`AssignError::Sysfs`] when the device cannot be read from sysfs (e.g. no such
    /// device), with [`AssignError::NoIommuGroup`] when it has no IOMMU group (IOMMU off), with
    /// [`AssignError::AlreadyOpen`] when it is open in `container` already, with
    /// [`AssignError::GroupBusy`] when its group is held by another container or process, and
    /// with [`AssignError::Open`] when VFIO refuses it otherwise.
    pub fn open_in(
        container: &Container<KernelDma>,
        host: &Host,
        address: PciAddress,
    ) -> Result<Self> {
        let device = KernelVfio::open_in(container, host, address)?;
        Ok(AssignedDevice::new(container, address, device))
    }

    /// Like [`AssignedDevice::open_in`], but only if the device is in IOMMU group `iommu_group`
    /// (e.g. the group recorded when it was bound); fails with
    /// [`AssignError::IommuGroupMismatch`] before anything is opened when it is not.
    pub fn open_group_in(
        container: &Container<KernelDma>,
        host: &Host,
        address: PciAddress,
        iommu_group: u32,
    ) -> Result<Self> {
        let device = KernelVfio::open_group_in(container, host, address, iommu_group)?;
        Ok(AssignedDevice::new(container, address, device))
    }

    /// Opens `address` in a legacy container of its own: for a device alone in its IOMMU group
    /// and alone in its VM. Its container is [`AssignedDevice::container`].
    pub fn open(host: &Host, address: PciAddress) -> Result<Self> {
        let device = KernelVfio::open(host, address)?;
        let container = device.slot.container().clone();
        Ok(AssignedDevice::new(&container, address, device))
    }

    /// Like [`AssignedDevice::open`], but only if the device is in IOMMU group `iommu_group`; see
    /// [`AssignedDevice::open_group_in`].
    pub fn open_group(host: &Host, address: PciAddress, iommu_group: u32) -> Result<Self> {
        let device = KernelVfio::open_group(host, address, iommu_group)?;
        let container = device.slot.container().clone();
        Ok(AssignedDevice::new(&container, address, device))
    }

    /// Opens `address` through its VFIO device cdev bound to an iommufd/IOAS of its own.
    #[cfg(feature = "iommufd")]
    pub fn open_iommufd(host: &Host, address: PciAddress) -> Result<Self> {
        let device = KernelVfio::open_iommufd(host, address)?;
        let container = device.slot.container().clone();
        Ok(AssignedDevice::new(&container, address, device))
    }
}

/// The IOMMU group of `address` as `host`'s sysfs reports it.
fn read_iommu_group(host: &Host, address: PciAddress) -> Result<u32> {
    host.device(address)
        .map_err(|source| AssignError::Sysfs { address, source })?
        .iommu_group
        .ok_or(AssignError::NoIommuGroup { address })
}

/// The IOMMU group of `address`, if it is `expected`.
fn expect_iommu_group(host: &Host, address: PciAddress, expected: u32) -> Result<u32> {
    let actual = read_iommu_group(host, address)?;
    if actual != expected {
        return Err(AssignError::IommuGroupMismatch {
            address,
            expected,
            actual,
        });
    }
    Ok(actual)
}

/// The error of opening `address` (group `group`): [`AssignError::GroupBusy`] when the group
/// file is held elsewhere, [`AssignError::Open`] otherwise.
pub(super) fn open_error(address: PciAddress, group: u32, source: VfioError) -> AssignError {
    match source {
        VfioError::OpenGroup(e, _) if e.raw_os_error() == Some(libc::EBUSY) => {
            AssignError::GroupBusy {
                address,
                group,
                source: e,
            }
        }
        source => AssignError::Open {
            address,
            group,
            source,
        },
    }
}

impl KernelVfio {
    /// Opens `address` in `container`; see [`AssignedDevice::open_in`].
    pub fn open_in(
        container: &Container<KernelDma>,
        host: &Host,
        address: PciAddress,
    ) -> Result<Self> {
        let group = read_iommu_group(host, address)?;
        Self::open_device(container, host, address, group)
    }

    /// Opens `address` in `container` if it is in IOMMU group `iommu_group`; see
    /// [`AssignedDevice::open_group_in`].
    pub fn open_group_in(
        container: &Container<KernelDma>,
        host: &Host,
        address: PciAddress,
        iommu_group: u32,
    ) -> Result<Self> {
        let group = expect_iommu_group(host, address, iommu_group)?;
        Self::open_device(container, host, address, group)
    }

    /// Opens `address` in a new legacy container; see [`AssignedDevice::open`].
    pub fn open(host: &Host, address: PciAddress) -> Result<Self> {
        let group = read_iommu_group(host, address)?;
        Self::open_alone(host, address, group)
    }

    /// Opens `address` in a new legacy container if it is in IOMMU group `iommu_group`; see
    /// [`AssignedDevice::open_group`].
    pub fn open_group(host: &Host, address: PciAddress, iommu_group: u32) -> Result<Self> {
        let group = expect_iommu_group(host, address, iommu_group)?;
        Self::open_alone(host, address, group)
    }

    /// Opens `address` through `/dev/vfio/devices/vfioN` bound to a new iommufd and IOAS.
    #[cfg(feature = "iommufd")]
    pub fn open_iommufd(host: &Host, address: PciAddress) -> Result<Self> {
        let group = read_iommu_group(host, address)?;
        let dma = KernelDma::iommufd(None).map_err(|e| open_error(address, group, e))?;
        Self::open_device(&Container::with_dma_backend(dma), host, address, group)
    }

    fn open_alone(host: &Host, address: PciAddress, group: u32) -> Result<Self> {
        // The container's failure is this device's: name it.
        let dma = KernelDma::legacy(None).map_err(|e| open_error(address, group, e))?;
        Self::open_device(&Container::with_dma_backend(dma), host, address, group)
    }

    /// Opens the device file of `address` (through its group, or its cdev with iommufd) in
    /// `container`.
    fn open_device(
        container: &Container<KernelDma>,
        host: &Host,
        address: PciAddress,
        group: u32,
    ) -> Result<Self> {
        // Refused here, before VFIO is asked: the kernel would hand out a second device fd.
        let slot = container.join(address, group)?;
        let dma = container.dma_backend();
        let device = VfioDevice::new(
            &PciDevice::sysfs_dir(host.sysfs(), &address),
            Arc::clone(&dma.ops),
            dma.iommufd,
        )
        .map_err(|e| open_error(address, group, e))?;
        let info_error = |source| AssignError::DeviceInfo { address, source };
        // SAFETY: `device` owns this fd and outlives the borrow, which only lasts for the dup.
        let device_fd = unsafe { BorrowedFd::borrow_raw(device.as_raw_fd()) };
        let device_file = File::from(device_fd.try_clone_to_owned().map_err(info_error)?);
        let info = query_device_info(&device_file).map_err(info_error)?;
        let how = if dma.iommufd {
            "its cdev and iommufd".to_owned()
        } else {
            format!("VFIO group {group}")
        };
        log::info!("{address}: opened through {how}");
        Ok(KernelVfio {
            device_file,
            device,
            info,
            slot,
        })
    }
}
