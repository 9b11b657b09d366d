//! [`KernelVfio`]: the [`VfioBackend`] of a real device bound to vfio-pci, and [`KernelDma`]: the
//! [`DmaBackend`] of a kernel VFIO container (legacy container/group with the type1v2 IOMMU, or
//! iommufd).
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
use vfio_ioctls::{VfioContainer, VfioDevice, VfioDeviceFd, VfioError, VfioOps, VfioRegionInfoCap};
use vmm_sys_util::eventfd::EventFd;
use vmm_sys_util::ioctl::{ioctl, ioctl_with_mut_ref, ioctl_with_ptr};

use crate::vfio::backend::{
    DeviceInfo, DmaBackend, IrqInfo, MmapArea, RegionFlags, RegionInfo, SparseMmapArea,
    VfioBackend, CONFIG_REGION_INDEX,
};
use crate::vfio::container::{Container, ContainerSlot};
use crate::vfio::device::AssignedDevice;
use crate::vfio::error::{AssignError, Result};

vmm_sys_util::ioctl_io_nr!(VFIO_DEVICE_GET_INFO, VFIO_TYPE as u32, VFIO_BASE + 7);
vmm_sys_util::ioctl_io_nr!(VFIO_DEVICE_SET_IRQS, VFIO_TYPE as u32, VFIO_BASE + 10);
vmm_sys_util::ioctl_io_nr!(VFIO_DEVICE_RESET, VFIO_TYPE as u32, VFIO_BASE + 11);

/// The IOMMU side of a kernel VFIO container: a legacy container (`/dev/vfio/vfio`, type1v2
/// IOMMU) or an iommufd IOAS, optionally registered with a KVM VFIO device.
pub struct KernelDma {
    ops: Arc<dyn VfioOps>,
    iommufd: bool,
}

impl KernelDma {
    /// Whether devices open through their cdev bound to an iommufd IOAS (else through their
    /// group in a legacy container).
    pub fn is_iommufd(&self) -> bool {
        self.iommufd
    }

    fn legacy(kvm_device: Option<Arc<VfioDeviceFd>>) -> std::result::Result<Self, VfioError> {
        Ok(KernelDma {
            ops: Arc::new(VfioContainer::new(kvm_device)?),
            iommufd: false,
        })
    }

    #[cfg(feature = "iommufd")]
    fn iommufd(kvm_device: Option<Arc<VfioDeviceFd>>) -> std::result::Result<Self, VfioError> {
        let iommufd = iommufd_ioctls::IommuFd::new().map_err(VfioError::NewVfioIommufd)?;
        let vfio_iommufd = vfio_ioctls::VfioIommufd::new(Arc::new(iommufd), None, kvm_device)?;
        Ok(KernelDma {
            ops: Arc::new(vfio_iommufd),
            iommufd: true,
        })
    }
}

impl DmaBackend for KernelDma {
    unsafe fn dma_map(&self, iova: u64, size: u64, host_addr: *mut u8) -> io::Result<()> {
        let size =
            usize::try_from(size).map_err(|_| io::Error::from_raw_os_error(libc::EOVERFLOW))?;
        // SAFETY: the caller upholds `DmaBackend::dma_map`'s contract, which is the contract
        // of `VfioOps::vfio_dma_map`.
        unsafe { self.ops.vfio_dma_map(iova, size, host_addr) }.map_err(dma_errno)
    }

    fn dma_unmap(&self, iova: u64, size: u64) -> io::Result<()> {
        let size =
            usize::try_from(size).map_err(|_| io::Error::from_raw_os_error(libc::EOVERFLOW))?;
        self.ops.vfio_dma_unmap(iova, size).map_err(dma_errno)
    }
}

/// The KVM VFIO pseudo-device of `vm` (`KVM_CREATE_DEVICE` with `KVM_DEV_TYPE_VFIO`), in the form
/// vfio-ioctls registers groups (`KVM_DEV_VFIO_GROUP_ADD`) and cdevs with.
#[cfg(feature = "kvm")]
fn kvm_vfio_device(vm: &kvm_ioctls::VmFd) -> Result<Arc<VfioDeviceFd>> {
    let mut device = kvm_bindings::kvm_create_device {
        type_: kvm_bindings::kvm_device_type_KVM_DEV_TYPE_VFIO,
        fd: 0,
        flags: 0,
    };
    let fd = vm
        .create_device(&mut device)
        .map_err(|source| AssignError::KvmVfioDevice { source })?;
    log::debug!("KVM VFIO device created");
    Ok(Arc::new(VfioDeviceFd::new_from_kvm(fd)))
}

impl Container<KernelDma> {
    /// A new legacy VFIO container (`/dev/vfio/vfio`); its type1v2 IOMMU is set up when the first
    /// group joins.
    pub fn new() -> Result<Self> {
        let dma = KernelDma::legacy(None).map_err(|source| AssignError::Container { source })?;
        Ok(Container::with_dma_backend(dma))
    }

    /// A new legacy VFIO container whose groups are registered with a KVM VFIO device created on
    /// `vm` (`KVM_DEV_VFIO_GROUP_ADD` as each group joins), as a VMM on KVM needs: KVM then
    /// knows the VM's DMA may be non-coherent, and the devices' drivers may use the VM.
    #[cfg(feature = "kvm")]
    pub fn with_kvm_device(vm: &kvm_ioctls::VmFd) -> Result<Self> {
        let dma = KernelDma::legacy(Some(kvm_vfio_device(vm)?))
            .map_err(|source| AssignError::Container { source })?;
        Ok(Container::with_dma_backend(dma))
    }

    /// A new iommufd with one IOAS; devices open in it through their VFIO cdev.
    #[cfg(feature = "iommufd")]
    pub fn new_iommufd() -> Result<Self> {
        let dma = KernelDma::iommufd(None).map_err(|source| AssignError::Container { source })?;
        Ok(Container::with_dma_backend(dma))
    }

    /// Like [`Container::new_iommufd`], with the devices' cdevs registered with a KVM VFIO device
    /// created on `vm`.
    #[cfg(all(feature = "iommufd", feature = "kvm"))]
    pub fn iommufd_with_kvm_device(vm: &kvm_ioctls::VmFd) -> Result<Self> {
        let dma = KernelDma::iommufd(Some(kvm_vfio_device(vm)?))
            .map_err(|source| AssignError::Container { source })?;
        Ok(Container::with_dma_backend(dma))
    }
}

/// A device bound to vfio-pci, opened through the kernel in a [`Container`].
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
        Ok(AssignedDevice::new(
            address,
            KernelVfio::open_in(container, host, address)?,
        ))
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
        Ok(AssignedDevice::new(
            address,
            KernelVfio::open_group_in(container, host, address, iommu_group)?,
        ))
    }

    /// Opens `address` in a legacy container of its own: for a device alone in its IOMMU group
    /// and alone in its VM. Its container is [`AssignedDevice::container`].
    pub fn open(host: &Host, address: PciAddress) -> Result<Self> {
        Ok(AssignedDevice::new(
            address,
            KernelVfio::open(host, address)?,
        ))
    }

    /// Like [`AssignedDevice::open`], but only if the device is in IOMMU group `iommu_group`; see
    /// [`AssignedDevice::open_group_in`].
    pub fn open_group(host: &Host, address: PciAddress, iommu_group: u32) -> Result<Self> {
        Ok(AssignedDevice::new(
            address,
            KernelVfio::open_group(host, address, iommu_group)?,
        ))
    }

    /// Opens `address` through its VFIO device cdev bound to an iommufd/IOAS of its own.
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
fn open_error(address: PciAddress, group: u32, source: VfioError) -> AssignError {
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
    type Dma = KernelDma;

    fn container(&self) -> &Container<KernelDma> {
        self.slot.container()
    }

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
                matches!(err, AssignError::Open { address, group: 19, .. } if address == gpu),
                "{err:?}"
            );
        }
    }

    /// VFIO interface that maps nothing: a container that can be made without `/dev/vfio`.
    struct NoVfio;

    impl VfioOps for NoVfio {
        fn as_any(&self) -> &dyn std::any::Any {
            self
        }
    }

    fn container_without_vfio() -> Container<KernelDma> {
        Container::with_dma_backend(KernelDma {
            ops: Arc::new(NoVfio),
            iommufd: false,
        })
    }

    #[test]
    fn a_device_open_in_the_container_is_refused_before_vfio() {
        let host = fixture("dgx-h100");
        let gpu = address("0000:1b:00.0");
        let container = container_without_vfio();
        let held = container.join(gpu, 19).unwrap();
        for err in [
            open_error(AssignedDevice::open_in(&container, &host, gpu)),
            open_error(AssignedDevice::open_group_in(&container, &host, gpu, 19)),
        ] {
            assert!(
                matches!(err, AssignError::AlreadyOpen { address, group: 19 } if address == gpu),
                "{err:?}"
            );
        }
        // A wrong group is refused before the container is looked at.
        let err = open_error(AssignedDevice::open_group_in(&container, &host, gpu, 3));
        assert!(
            matches!(
                err,
                AssignError::IommuGroupMismatch {
                    expected: 3,
                    actual: 19,
                    ..
                }
            ),
            "{err:?}"
        );
        drop(held);
        // Free again: the open reaches VFIO, fails there, and leaves the container empty.
        let err = open_error(AssignedDevice::open_in(&container, &host, gpu));
        assert!(
            matches!(
                &err,
                AssignError::Open {
                    address,
                    group: 19,
                    source: VfioError::DowncastVfioOps,
                } if *address == gpu
            ),
            "{err:?}"
        );
        assert!(container.members().0.is_empty());
        assert!(container.groups().is_empty());
    }

    #[test]
    fn a_busy_group_file_is_reported_as_such() {
        let edu = address("0000:01:02.0");
        let busy = VfioError::OpenGroup(io::Error::from_raw_os_error(libc::EBUSY), "1".into());
        let err = super::open_error(edu, 1, busy);
        assert!(
            matches!(&err, AssignError::GroupBusy { address, group: 1, source }
                if *address == edu && source.raw_os_error() == Some(libc::EBUSY)),
            "{err:?}"
        );
        assert_eq!(
            err.to_string(),
            "0000:01:02.0: IOMMU group 1 is in use by another VFIO container or process \
             (/dev/vfio/1: Device or resource busy (os error 16)); \
             open all devices of a group in one container"
        );
        // Other failures to open the group file stay plain open errors.
        let missing = VfioError::OpenGroup(io::Error::from_raw_os_error(libc::ENOENT), "1".into());
        assert!(matches!(
            super::open_error(edu, 1, missing),
            AssignError::Open {
                group: 1,
                source: VfioError::OpenGroup(..),
                ..
            }
        ));
    }

    #[test]
    fn a_new_container_is_empty_or_names_dev_vfio() {
        // Whether `/dev/vfio/vfio` exists depends on the host (the vfio module); both outcomes
        // are checked for what they must hold.
        match Container::new() {
            Ok(container) => {
                assert!(container.members().0.is_empty());
                assert!(!container.dma_backend().is_iommufd());
                let memory = vm_memory::GuestMemoryMmap::from_ranges(&[(
                    vm_memory::GuestAddress(0),
                    0x1000,
                )])
                .unwrap();
                assert!(matches!(
                    container.map_guest_memory(&memory).map(|_| ()),
                    Err(AssignError::EmptyContainer)
                ));
            }
            Err(AssignError::Container {
                source: VfioError::OpenContainer(e),
            }) => assert_eq!(e.kind(), io::ErrorKind::NotFound, "{e}"),
            Err(other) => panic!("unexpected {other:?}"),
        }
    }

    /// A VM of this host's KVM. Needs `/dev/kvm` (this project's machines and CI have it) and
    /// fails rather than skip without it.
    #[cfg(feature = "kvm")]
    fn vm() -> kvm_ioctls::VmFd {
        kvm_ioctls::Kvm::new()
            .unwrap_or_else(|e| {
                panic!("KVM container test needs KVM: opening /dev/kvm failed: {e}")
            })
            .create_vm()
            .unwrap_or_else(|e| panic!("KVM_CREATE_VM failed: {e}"))
    }

    #[cfg(feature = "kvm")]
    #[test]
    fn kvm_container_creates_the_kvm_vfio_device() {
        let vm = vm();
        // The KVM VFIO device is created first; the container itself needs `/dev/vfio/vfio`,
        // which depends on the host.
        match Container::with_kvm_device(&vm) {
            Ok(container) => assert!(container.members().0.is_empty()),
            Err(AssignError::Container {
                source: VfioError::OpenContainer(e),
            }) => assert_eq!(e.kind(), io::ErrorKind::NotFound, "{e}"),
            Err(other) => panic!("unexpected {other:?}"),
        }
        // KVM allows one VFIO device per VM: with one held, creating the container's fails,
        // and the error says which step.
        let mut device = kvm_bindings::kvm_create_device {
            type_: kvm_bindings::kvm_device_type_KVM_DEV_TYPE_VFIO,
            fd: 0,
            flags: 0,
        };
        let _held = vm.create_device(&mut device).unwrap();
        let err = Container::with_kvm_device(&vm).unwrap_err();
        match &err {
            AssignError::KvmVfioDevice { source } => assert_eq!(source.errno(), libc::EBUSY),
            other => panic!("unexpected {other:?}"),
        }
        assert!(
            err.to_string().starts_with(
                "creating the KVM VFIO device (KVM_CREATE_DEVICE, KVM_DEV_TYPE_VFIO) failed: "
            ),
            "{err}"
        );
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
