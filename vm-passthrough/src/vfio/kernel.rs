//! [`KernelVfio`]: the [`VfioBackend`] of a real device bound to vfio-pci.
//!
//! Opening (container, group, iommufd), region info with its capabilities and DMA map/unmap
//! come from `vfio-ioctls`. Region I/O, `SET_IRQS`, `GET_INFO` and `RESET` are issued here
//! directly because `vfio-ioctls` drops their errno (or, for reset, the result altogether).

use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::Arc;

use vfio_bindings::bindings::vfio::{
    vfio_device_info, VFIO_BASE, VFIO_DEVICE_FLAGS_RESET, VFIO_IRQ_SET_ACTION_TRIGGER,
    VFIO_IRQ_SET_ACTION_UNMASK, VFIO_IRQ_SET_DATA_EVENTFD, VFIO_IRQ_SET_DATA_NONE,
    VFIO_REGION_INFO_FLAG_MMAP, VFIO_REGION_INFO_FLAG_READ, VFIO_REGION_INFO_FLAG_WRITE, VFIO_TYPE,
};
use vfio_ioctls::{VfioContainer, VfioDevice, VfioError, VfioOps, VfioRegionInfoCap};
use vmm_sys_util::eventfd::EventFd;
use vmm_sys_util::ioctl::{ioctl, ioctl_with_mut_ref, ioctl_with_ptr};

use crate::vfio::backend::{
    DeviceInfo, IrqInfo, MmapArea, RegionFlags, RegionInfo, SparseMmapArea, VfioBackend,
    CONFIG_REGION_INDEX,
};
use crate::vfio::device::AssignedDevice;
use crate::vfio::error::{AssignError, Result};
use crate::vfio::sysfs;

vmm_sys_util::ioctl_io_nr!(VFIO_DEVICE_GET_INFO, VFIO_TYPE as u32, VFIO_BASE + 7);
vmm_sys_util::ioctl_io_nr!(VFIO_DEVICE_SET_IRQS, VFIO_TYPE as u32, VFIO_BASE + 10);
vmm_sys_util::ioctl_io_nr!(VFIO_DEVICE_RESET, VFIO_TYPE as u32, VFIO_BASE + 11);

/// A device bound to vfio-pci, opened through the kernel.
pub struct KernelVfio {
    // Declared before `device` so it is closed first: vfio-ioctls detaches the group from the
    // container when `device` drops, which the kernel refuses while a device fd is still open.
    /// A duplicate of the device fd, for `pread`/`pwrite`/`mmap`/ioctls with proper errors.
    device_file: File,
    device: VfioDevice,
    dma: Arc<dyn VfioOps>,
    info: DeviceInfo,
}

impl AssignedDevice<KernelVfio> {
    /// Opens `bdf` (already bound to vfio-pci) through the legacy container/group interface.
    /// `iommu_group` is the group number the caller read from sysfs; it is checked against
    /// `/sys/bus/pci/devices/<bdf>/iommu_group`.
    pub fn open(bdf: &str, iommu_group: u32) -> Result<Self> {
        Ok(AssignedDevice::new(
            bdf,
            KernelVfio::open(bdf, iommu_group)?,
        ))
    }

    /// Opens `bdf` through its VFIO device cdev bound to a fresh iommufd/IOAS.
    #[cfg(feature = "iommufd")]
    pub fn open_iommufd(bdf: &str) -> Result<Self> {
        Ok(AssignedDevice::new(bdf, KernelVfio::open_iommufd(bdf)?))
    }
}

impl KernelVfio {
    /// Opens `bdf` through a new VFIO container with the type1v2 IOMMU; see
    /// [`AssignedDevice::open`].
    pub fn open(bdf: &str, iommu_group: u32) -> Result<Self> {
        let sysfs_root = Path::new("/sys");
        let actual = sysfs::iommu_group(sysfs_root, bdf)?;
        if actual != iommu_group {
            return Err(AssignError::IommuGroupMismatch {
                bdf: bdf.to_owned(),
                expected: iommu_group,
                actual,
            });
        }
        let open_error = |source| AssignError::Open {
            bdf: bdf.to_owned(),
            source,
        };
        let container = Arc::new(VfioContainer::new(None).map_err(open_error)?);
        let device_dir = sysfs::pci_device_dir(sysfs_root, bdf);
        let device = VfioDevice::new(
            &device_dir,
            Arc::clone(&container) as Arc<dyn VfioOps>,
            false,
        )
        .map_err(open_error)?;
        log::info!("{bdf}: opened through VFIO group {iommu_group}");
        Self::from_device(bdf, device, container)
    }

    /// Opens `bdf` through `/dev/vfio/devices/vfioN` bound to a new iommufd and IOAS.
    #[cfg(feature = "iommufd")]
    pub fn open_iommufd(bdf: &str) -> Result<Self> {
        use vfio_ioctls::VfioIommufd;
        sysfs::validate_bdf(bdf)?;
        let open_error = |source| AssignError::Open {
            bdf: bdf.to_owned(),
            source,
        };
        let iommufd =
            iommufd_ioctls::IommuFd::new().map_err(|e| open_error(VfioError::NewVfioIommufd(e)))?;
        let vfio_iommufd =
            Arc::new(VfioIommufd::new(Arc::new(iommufd), None, None).map_err(open_error)?);
        let device_dir = sysfs::pci_device_dir(Path::new("/sys"), bdf);
        let device = VfioDevice::new(
            &device_dir,
            Arc::clone(&vfio_iommufd) as Arc<dyn VfioOps>,
            true,
        )
        .map_err(open_error)?;
        log::info!("{bdf}: opened through iommufd");
        Self::from_device(bdf, device, vfio_iommufd)
    }

    fn from_device(bdf: &str, device: VfioDevice, dma: Arc<dyn VfioOps>) -> Result<Self> {
        let info_error = |source| AssignError::DeviceInfo {
            bdf: bdf.to_owned(),
            source,
        };
        // SAFETY: `device` owns this fd and outlives the borrow, which only lasts for the dup.
        let device_fd = unsafe { BorrowedFd::borrow_raw(device.as_raw_fd()) };
        let device_file = File::from(device_fd.try_clone_to_owned().map_err(info_error)?);
        let info = query_device_info(&device_file).map_err(info_error)?;
        Ok(KernelVfio {
            device_file,
            device,
            dma,
            info,
        })
    }

    fn region_file_offset(&self, index: u32, offset: u64, len: u64) -> io::Result<u64> {
        let info = self
            .region_info(index)
            .ok_or_else(|| io::Error::from_raw_os_error(libc::EINVAL))?;
        match offset.checked_add(len) {
            Some(end) if end <= info.size => Ok(info.file_offset + offset),
            _ => Err(io::Error::from_raw_os_error(libc::EINVAL)),
        }
    }

    fn set_irqs(
        &self,
        flags: u32,
        index: u32,
        start: u32,
        count: u32,
        eventfds: &[&EventFd],
    ) -> io::Result<()> {
        // struct vfio_irq_set { argsz, flags, index, start, count; data[] }: five u32 header
        // fields followed by one s32 fd per vector, built as one u32 buffer so it is aligned.
        let mut set: Vec<u32> = vec![0, flags, index, start, count];
        set.extend(eventfds.iter().map(|fd| fd.as_raw_fd() as u32));
        set[0] = (set.len() * std::mem::size_of::<u32>()) as u32;
        // SAFETY: the buffer is a complete vfio_irq_set whose argsz covers exactly the header
        // plus `eventfds.len()` fds, all of which are open for the duration of the call; the
        // kernel only reads it. The fd is the VFIO device this ioctl belongs to.
        let rc = unsafe { ioctl_with_ptr(&self.device_file, VFIO_DEVICE_SET_IRQS(), set.as_ptr()) };
        if rc < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }
}

fn query_device_info(device: &File) -> io::Result<DeviceInfo> {
    let mut info = vfio_device_info {
        argsz: std::mem::size_of::<vfio_device_info>() as u32,
        ..Default::default()
    };
    // SAFETY: `info` is a correctly sized vfio_device_info the kernel fills in (argsz says how
    // much it may write); the fd is a VFIO device.
    let rc = unsafe { ioctl_with_mut_ref(device, VFIO_DEVICE_GET_INFO(), &mut info) };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(DeviceInfo {
        reset_supported: info.flags & VFIO_DEVICE_FLAGS_RESET != 0,
        num_regions: info.num_regions,
        num_irqs: info.num_irqs,
    })
}

/// The errno behind a DMA map/unmap failure, whichever IOMMU interface reported it.
fn dma_errno(error: VfioError) -> io::Error {
    match error {
        VfioError::IommuDmaMap(e) | VfioError::IommuDmaUnmap(e) => {
            io::Error::from_raw_os_error(e.errno())
        }
        #[cfg(feature = "iommufd")]
        VfioError::IommufdIoctlError(
            iommufd_ioctls::IommufdError::IommuIoasMap(e)
            | iommufd_ioctls::IommufdError::IommuIoasUnmap(e),
        ) => io::Error::from_raw_os_error(e.errno()),
        // The kernel unmapped a different length than asked: the range bisects a mapping
        // or covers none.
        VfioError::InvalidDmaUnmapSize => io::Error::from_raw_os_error(libc::EINVAL),
        other => io::Error::other(other),
    }
}

impl VfioBackend for KernelVfio {
    fn device_info(&self) -> DeviceInfo {
        self.info
    }

    fn region_info(&self, index: u32) -> Option<RegionInfo> {
        // vfio-ioctls keeps the regions it could query in a list, not by index; the standard
        // PCI regions (BARs, ROM, config) always exist, so up to the config region the list
        // position is the index. Device-specific regions are not supported yet.
        if index > CONFIG_REGION_INDEX || index >= self.info.num_regions {
            return None;
        }
        let flags = self.device.get_region_flags(index);
        let caps = self.device.get_region_caps(index);
        let sparse_mmap = caps.iter().find_map(|cap| match cap {
            VfioRegionInfoCap::SparseMmap(sparse) => Some(
                sparse
                    .areas
                    .iter()
                    .map(|a| SparseMmapArea {
                        offset: a.offset,
                        size: a.size,
                    })
                    .collect(),
            ),
            _ => None,
        });
        Some(RegionInfo {
            index,
            size: self.device.get_region_size(index),
            file_offset: self.device.get_region_offset(index),
            flags: RegionFlags {
                read: flags & VFIO_REGION_INFO_FLAG_READ != 0,
                write: flags & VFIO_REGION_INFO_FLAG_WRITE != 0,
                mmap: flags & VFIO_REGION_INFO_FLAG_MMAP != 0,
            },
            sparse_mmap,
            msix_mappable: caps.contains(&VfioRegionInfoCap::MsixMappable),
        })
    }

    fn region_read(&self, index: u32, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        let at = self.region_file_offset(index, offset, buf.len() as u64)?;
        self.device_file.read_exact_at(buf, at)
    }

    fn region_write(&self, index: u32, offset: u64, data: &[u8]) -> io::Result<()> {
        let at = self.region_file_offset(index, offset, data.len() as u64)?;
        self.device_file.write_all_at(data, at)
    }

    fn region_mmap(&self, index: u32, offset: u64, len: usize) -> io::Result<MmapArea> {
        let at = self.region_file_offset(index, offset, len as u64)?;
        MmapArea::map_shared(&self.device_file, at, len)
    }

    fn irq_info(&self, index: u32) -> Option<IrqInfo> {
        self.device.get_irq_info(index).map(|irq| IrqInfo {
            index: irq.index,
            count: irq.count,
            flags: irq.flags,
        })
    }

    fn irq_set_eventfds(&self, index: u32, eventfds: &[&EventFd]) -> io::Result<()> {
        let flags = VFIO_IRQ_SET_DATA_EVENTFD | VFIO_IRQ_SET_ACTION_TRIGGER;
        self.set_irqs(flags, index, 0, eventfds.len() as u32, eventfds)
    }

    fn irq_disable(&self, index: u32) -> io::Result<()> {
        self.set_irqs(
            VFIO_IRQ_SET_DATA_NONE | VFIO_IRQ_SET_ACTION_TRIGGER,
            index,
            0,
            0,
            &[],
        )
    }

    fn irq_unmask(&self, index: u32) -> io::Result<()> {
        self.set_irqs(
            VFIO_IRQ_SET_DATA_NONE | VFIO_IRQ_SET_ACTION_UNMASK,
            index,
            0,
            1,
            &[],
        )
    }

    fn reset(&self) -> io::Result<()> {
        // SAFETY: VFIO_DEVICE_RESET takes no argument; the fd is a VFIO device.
        let rc = unsafe { ioctl(&self.device_file, VFIO_DEVICE_RESET()) };
        if rc < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    unsafe fn dma_map(&self, iova: u64, size: u64, host_addr: *mut u8) -> io::Result<()> {
        let size =
            usize::try_from(size).map_err(|_| io::Error::from_raw_os_error(libc::EOVERFLOW))?;
        // SAFETY: the caller upholds `VfioBackend::dma_map`'s contract, which is the contract
        // of `VfioOps::vfio_dma_map`.
        unsafe { self.dma.vfio_dma_map(iova, size, host_addr) }.map_err(dma_errno)
    }

    fn dma_unmap(&self, iova: u64, size: u64) -> io::Result<()> {
        let size =
            usize::try_from(size).map_err(|_| io::Error::from_raw_os_error(libc::EOVERFLOW))?;
        self.dma.vfio_dma_unmap(iova, size).map_err(dma_errno)
    }
}
