//! [`KernelVfio`]: the [`VfioBackend`] of a real device bound to vfio-pci.
//!
//! Opening (container, group, iommufd), region info with its capabilities and DMA map/unmap
//! come from `vfio-ioctls`. Region I/O, `SET_IRQS`, `GET_INFO` and `RESET` are issued here
//! directly because `vfio-ioctls` drops their errno (or, for reset, the result altogether).

use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};
use std::os::unix::fs::FileExt;
use std::sync::Arc;

use pcie::{Host, PciAddress, PciDevice};
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
    /// Opens `address` (already bound to vfio-pci) through the legacy container/group
    /// interface, in the IOMMU group that `host`'s sysfs reports for it.
    ///
    /// Fails with [`AssignError::Sysfs`] when the device cannot be read from sysfs (e.g. no such
    /// device) and with [`AssignError::NoIommuGroup`] when it has no IOMMU group (IOMMU off).
    pub fn open(host: &Host, address: PciAddress) -> Result<Self> {
        Ok(AssignedDevice::new(
            address,
            KernelVfio::open(host, address)?,
        ))
    }

    /// Like [`AssignedDevice::open`], but only if the device is in IOMMU group `iommu_group`
    /// (e.g. the group recorded when it was bound); fails with
    /// [`AssignError::IommuGroupMismatch`] before anything is opened when it is not.
    pub fn open_group(host: &Host, address: PciAddress, iommu_group: u32) -> Result<Self> {
        Ok(AssignedDevice::new(
            address,
            KernelVfio::open_group(host, address, iommu_group)?,
        ))
    }

    /// Opens `address` through its VFIO device cdev bound to a fresh iommufd/IOAS.
    #[cfg(feature = "iommufd")]
    pub fn open_iommufd(host: &Host, address: PciAddress) -> Result<Self> {
        Ok(AssignedDevice::new(
            address,
            KernelVfio::open_iommufd(host, address)?,
        ))
    }
}

/// The IOMMU group of `address` as `host`'s sysfs reports it.
fn read_iommu_group(host: &Host, address: PciAddress) -> Result<u32> {
    host.device(address)
        .map_err(|source| AssignError::Sysfs { address, source })?
        .iommu_group
        .ok_or(AssignError::NoIommuGroup { address })
}

impl KernelVfio {
    /// Opens `address` through a new VFIO container with the type1v2 IOMMU; see
    /// [`AssignedDevice::open`].
    pub fn open(host: &Host, address: PciAddress) -> Result<Self> {
        let group = read_iommu_group(host, address)?;
        Self::open_container(host, address, group)
    }

    /// Opens `address` if it is in IOMMU group `iommu_group`; see
    /// [`AssignedDevice::open_group`].
    pub fn open_group(host: &Host, address: PciAddress, iommu_group: u32) -> Result<Self> {
        let actual = read_iommu_group(host, address)?;
        if actual != iommu_group {
            return Err(AssignError::IommuGroupMismatch {
                address,
                expected: iommu_group,
                actual,
            });
        }
        Self::open_container(host, address, actual)
    }

    fn open_container(host: &Host, address: PciAddress, group: u32) -> Result<Self> {
        let container =
            VfioContainer::new(None).map_err(|source| AssignError::Open { address, source })?;
        let vfio = Self::open_device(host, address, Arc::new(container), false)?;
        log::info!("{address}: opened through VFIO group {group}");
        Ok(vfio)
    }

    /// Opens `address` through `/dev/vfio/devices/vfioN` bound to a new iommufd and IOAS.
    #[cfg(feature = "iommufd")]
    pub fn open_iommufd(host: &Host, address: PciAddress) -> Result<Self> {
        use vfio_ioctls::VfioIommufd;
        let open_error = |source| AssignError::Open { address, source };
        let iommufd =
            iommufd_ioctls::IommuFd::new().map_err(|e| open_error(VfioError::NewVfioIommufd(e)))?;
        let vfio_iommufd = VfioIommufd::new(Arc::new(iommufd), None, None).map_err(open_error)?;
        let vfio = Self::open_device(host, address, Arc::new(vfio_iommufd), true)?;
        log::info!("{address}: opened through iommufd");
        Ok(vfio)
    }

    /// Opens the device file of `address` (through its group, or its cdev when `cdev`) with
    /// `dma` as the IOMMU interface its DMA mappings go to.
    fn open_device(
        host: &Host,
        address: PciAddress,
        dma: Arc<dyn VfioOps>,
        cdev: bool,
    ) -> Result<Self> {
        let device = VfioDevice::new(
            &PciDevice::sysfs_dir(host.sysfs(), &address),
            Arc::clone(&dma),
            cdev,
        )
        .map_err(|source| AssignError::Open { address, source })?;
        Self::from_device(address, device, dma)
    }

    fn from_device(address: PciAddress, device: VfioDevice, dma: Arc<dyn VfioOps>) -> Result<Self> {
        let info_error = |source| AssignError::DeviceInfo { address, source };
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

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;

    fn fixture(name: &str) -> Host {
        Host::new(
            Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../fixtures/sysfs")
                .join(name),
        )
    }

    fn address(text: &str) -> PciAddress {
        text.parse().unwrap()
    }

    /// The error of an open that must fail (`AssignedDevice<KernelVfio>` is not `Debug`).
    fn open_error(result: Result<AssignedDevice<KernelVfio>>) -> AssignError {
        result.err().expect("opening succeeded")
    }

    /// A sysfs tree holding one edu-like device at `address`, whose `iommu_group` link points
    /// at `kernel/iommu_groups/<group>`.
    fn one_device_tree(address: PciAddress, group: &str) -> tempfile::TempDir {
        let root = tempfile::tempdir().unwrap();
        let dev = root
            .path()
            .join("bus/pci/devices")
            .join(address.to_string());
        std::fs::create_dir_all(&dev).unwrap();
        for (name, value) in [
            ("vendor", "0x1234"),
            ("device", "0x11e8"),
            ("subsystem_vendor", "0x1af4"),
            ("subsystem_device", "0x1100"),
            ("class", "0x00ff00"),
            ("revision", "0x10"),
        ] {
            std::fs::write(dev.join(name), format!("{value}\n")).unwrap();
        }
        std::fs::create_dir_all(root.path().join("kernel/iommu_groups").join(group)).unwrap();
        std::os::unix::fs::symlink(
            format!("../../../../kernel/iommu_groups/{group}"),
            dev.join("iommu_group"),
        )
        .unwrap();
        root
    }

    #[test]
    fn device_without_iommu_group_is_refused_naming_it() {
        let host = fixture("no-iommu");
        let a100 = address("0000:18:00.0");
        for err in [
            open_error(AssignedDevice::open(&host, a100)),
            open_error(AssignedDevice::open_group(&host, a100, 0)),
        ] {
            assert!(
                matches!(err, AssignError::NoIommuGroup { address } if address == a100),
                "{err:?}"
            );
            let message = err.to_string();
            assert!(message.starts_with("0000:18:00.0: "), "{message}");
            assert!(message.contains("no IOMMU group"), "{message}");
        }
    }

    #[test]
    fn unknown_device_reports_the_sysfs_path() {
        let host = fixture("dgx-h100");
        let missing = address("0000:00:1f.7");
        match open_error(AssignedDevice::open(&host, missing)) {
            AssignError::Sysfs {
                address,
                source:
                    pcie::Error::DeviceNotFound {
                        address: inner,
                        path,
                    },
            } => {
                assert_eq!((address, inner), (missing, missing));
                assert!(
                    path.ends_with("bus/pci/devices/0000:00:1f.7"),
                    "{}",
                    path.display()
                );
            }
            other => panic!("unexpected error {other:?}"),
        }
    }

    #[test]
    fn group_number_comes_from_the_link_target() {
        let gpu = address("0000:1b:00.0");
        let err = open_error(AssignedDevice::open_group(&fixture("dgx-h100"), gpu, 40));
        match &err {
            AssignError::IommuGroupMismatch {
                address,
                expected,
                actual,
            } => assert_eq!((*address, *expected, *actual), (gpu, 40, 19)),
            other => panic!("unexpected error {other:?}"),
        }
        assert_eq!(
            err.to_string(),
            "0000:1b:00.0: device is in IOMMU group 19, not in group 40"
        );
    }

    #[test]
    fn the_right_group_gets_as_far_as_vfio() {
        // Past the sysfs checks the next step is VFIO itself (`/dev/vfio/vfio`, then the
        // group file), which cannot open a fixture's device.
        let host = fixture("dgx-h100");
        let gpu = address("0000:1b:00.0");
        for err in [
            open_error(AssignedDevice::open(&host, gpu)),
            open_error(AssignedDevice::open_group(&host, gpu, 19)),
        ] {
            assert!(
                matches!(err, AssignError::Open { address, .. } if address == gpu),
                "{err:?}"
            );
        }
    }

    #[test]
    fn non_numeric_group_is_rejected() {
        let edu = address("0000:00:03.0");
        let root = one_device_tree(edu, "abc");
        match open_error(AssignedDevice::open(&Host::new(root.path()), edu)) {
            AssignError::Sysfs {
                address,
                source: pcie::Error::Parse { path, value, .. },
            } => {
                assert_eq!(address, edu);
                assert!(
                    path.ends_with("bus/pci/devices/0000:00:03.0/iommu_group"),
                    "{}",
                    path.display()
                );
                assert_eq!(value, "abc");
            }
            other => panic!("unexpected error {other:?}"),
        }
    }

    #[test]
    fn numeric_group_of_a_minimal_tree_is_read() {
        let edu = address("0000:00:03.0");
        let root = one_device_tree(edu, "7");
        let err = open_error(AssignedDevice::open_group(&Host::new(root.path()), edu, 8));
        assert!(
            matches!(
                err,
                AssignError::IommuGroupMismatch {
                    expected: 8,
                    actual: 7,
                    ..
                }
            ),
            "{err:?}"
        );
    }
}
