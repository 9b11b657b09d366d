//! The error type of the assignment API: every variant names the device by its PCI address (and
//! IOMMU group), or the container by its devices and groups, and the resource (region, IOVA
//! range, interrupt kind) involved, and keeps the underlying error (errno, sysfs error) as its
//! source.

use std::fmt;
use std::io;

use pcie::PciAddress;

use crate::vfio::types::{ContainerMembers, IrqKind};

/// Why an operation on an assigned device failed.
///
/// The message names what failed (device, group, region, IOVA range); the underlying error is
/// its [`std::error::Error::source`], not repeated in the message, so print the chain (each
/// source after `: `) to see the errno.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AssignError {
    /// The device could not be read from sysfs (unknown address, unreadable attribute,
    /// malformed `iommu_group` link, ...).
    #[error("{address}: reading the device from sysfs failed")]
    Sysfs {
        /// The device.
        address: PciAddress,
        /// What the `pcie` crate reported; it names the file.
        #[source]
        source: pcie::Error,
    },
    /// The device has no `iommu_group` link: the IOMMU is off (or does not cover the device),
    /// and VFIO cannot assign a device without one.
    #[error("{address}: the device has no IOMMU group (is the IOMMU enabled?); VFIO needs one")]
    NoIommuGroup {
        /// The device.
        address: PciAddress,
    },
    /// The caller's IOMMU group number is not the device's.
    #[error("{address}: device is in IOMMU group {actual}, not in group {expected}")]
    IommuGroupMismatch {
        /// The device.
        address: PciAddress,
        /// The group the caller named.
        expected: u32,
        /// The group sysfs reports.
        actual: u32,
    },
    /// Opening a VFIO container (`/dev/vfio/vfio`, or an iommufd and its IOAS) failed.
    #[error("opening a VFIO container failed")]
    Container {
        /// What vfio-ioctls reported.
        #[source]
        source: vfio_ioctls::VfioError,
    },
    /// Creating the KVM VFIO pseudo-device failed.
    #[cfg(feature = "kvm")]
    #[error("creating the KVM VFIO device (KVM_CREATE_DEVICE, KVM_DEV_TYPE_VFIO) failed")]
    KvmVfioDevice {
        /// The KVM error (errno).
        #[source]
        source: kvm_ioctls::Error,
    },
    /// The device is open in this container already.
    #[error(
        "{address}: already open in this container (IOMMU group {group}); \
         a device is opened once per container"
    )]
    AlreadyOpen {
        /// The device.
        address: PciAddress,
        /// Its IOMMU group.
        group: u32,
    },
    /// The device's IOMMU group is held by another VFIO container or process: the kernel lets a
    /// group be opened once.
    #[error(
        "{address}: IOMMU group {group} is in use by another VFIO container or process \
         (/dev/vfio/{group}); open all devices of a group in one container"
    )]
    GroupBusy {
        /// The device.
        address: PciAddress,
        /// Its IOMMU group.
        group: u32,
        /// The OS error (`EBUSY`).
        #[source]
        source: io::Error,
    },
    /// Opening the device through VFIO (group or cdev) failed.
    #[error("{address}: opening the device through VFIO (IOMMU group {group}) failed")]
    Open {
        /// The device.
        address: PciAddress,
        /// Its IOMMU group.
        group: u32,
        /// What vfio-ioctls reported.
        #[source]
        source: vfio_ioctls::VfioError,
    },
    /// Guest memory cannot be mapped in a container without devices: VFIO sets its IOMMU up
    /// when the first group joins.
    #[error("no device is open in the VFIO container: open one before mapping guest memory")]
    EmptyContainer,
    /// `VFIO_DEVICE_GET_INFO` failed.
    #[error("{address}: VFIO_DEVICE_GET_INFO failed")]
    DeviceInfo {
        /// The device.
        address: PciAddress,
        /// The OS error.
        #[source]
        source: io::Error,
    },
    /// The device has no region with this index.
    #[error("{address}: the device has no region {index}")]
    NoSuchRegion {
        /// The device.
        address: PciAddress,
        /// The region index asked for.
        index: u32,
    },
    /// The region index does not name a BAR (0-5).
    #[error("{address}: region {index} is not a BAR")]
    NotABar {
        /// The device.
        address: PciAddress,
        /// The region index asked for.
        index: u32,
    },
    /// An access reaches outside its region.
    #[error(
        "{address}: region {index}: {len} bytes at {offset:#x} lie outside its {size:#x} bytes"
    )]
    RegionOutOfBounds {
        /// The device.
        address: PciAddress,
        /// The region index.
        index: u32,
        /// Offset of the access within the region.
        offset: u64,
        /// Length of the access.
        len: u64,
        /// Size of the region.
        size: u64,
    },
    /// A register access is not naturally aligned.
    #[error("{address}: region {index}: {width}-byte access at {offset:#x} is not aligned")]
    MisalignedAccess {
        /// The device.
        address: PciAddress,
        /// The region index.
        index: u32,
        /// Offset of the access within the region.
        offset: u64,
        /// Width of the access in bytes.
        width: u64,
    },
    /// The region does not allow this kind of access.
    #[error("{address}: region {index} is not {access}")]
    RegionAccessDenied {
        /// The device.
        address: PciAddress,
        /// The region index.
        index: u32,
        /// `"readable"` or `"writable"`.
        access: &'static str,
    },
    /// `pread`/`pwrite` on the device file failed.
    #[error("{address}: region {index}: {op} of {len} bytes at {offset:#x} failed")]
    RegionIo {
        /// The device.
        address: PciAddress,
        /// The region index.
        index: u32,
        /// `"read"` or `"write"`.
        op: &'static str,
        /// Offset within the region.
        offset: u64,
        /// Length of the access.
        len: u64,
        /// The OS error.
        #[source]
        source: io::Error,
    },
    /// `mmap` of a region area failed.
    #[error("{address}: region {index}: mmap of {len:#x} bytes at {offset:#x} failed")]
    RegionMmap {
        /// The device.
        address: PciAddress,
        /// The region index.
        index: u32,
        /// Offset within the region.
        offset: u64,
        /// Length of the mapping.
        len: u64,
        /// The OS error.
        #[source]
        source: io::Error,
    },
    /// A guest memory region could not be mapped for DMA.
    #[error("{container}: DMA map of IOVA {iova:#x} (+{size:#x}) failed")]
    DmaMap {
        /// The container whose IOMMU domain was targeted.
        container: ContainerMembers,
        /// Start of the IOVA range (= guest physical address).
        iova: u64,
        /// Length of the range.
        size: u64,
        /// The OS error (`EEXIST` for an overlap, `EINVAL` for a misaligned range, ...).
        #[source]
        source: io::Error,
    },
    /// A DMA mapping could not be removed.
    #[error("{container}: DMA unmap of IOVA {iova:#x} (+{size:#x}) failed")]
    DmaUnmap {
        /// The container whose IOMMU domain was targeted.
        container: ContainerMembers,
        /// Start of the IOVA range.
        iova: u64,
        /// Length of the range.
        size: u64,
        /// The OS error.
        #[source]
        source: io::Error,
    },
    /// A guest memory region has no host address to map.
    #[error("{container}: guest memory at {gpa:#x} has no host mapping")]
    GuestMemory {
        /// The container the memory was to be mapped in.
        container: ContainerMembers,
        /// Guest physical address of the region.
        gpa: u64,
        /// What vm-memory reported.
        #[source]
        source: vm_memory::GuestMemoryError,
    },
    /// The device does not support this kind of interrupt.
    #[error("{address}: the device has no {kind} interrupts")]
    IrqUnsupported {
        /// The device.
        address: PciAddress,
        /// The interrupt kind.
        kind: IrqKind,
    },
    /// More (or no) eventfds than the device has vectors.
    #[error("{address}: {kind} has {available} vector(s); {requested} eventfd(s) given")]
    IrqVectorCount {
        /// The device.
        address: PciAddress,
        /// The interrupt kind.
        kind: IrqKind,
        /// Number of eventfds passed.
        requested: usize,
        /// Number of vectors the device has.
        available: u32,
    },
    /// `VFIO_DEVICE_SET_IRQS` failed.
    #[error("{address}: {action} of {kind} interrupts failed")]
    SetIrqs {
        /// The device.
        address: PciAddress,
        /// The interrupt kind.
        kind: IrqKind,
        /// `"enable"`, `"disable"` or `"unmask"`.
        action: &'static str,
        /// The OS error.
        #[source]
        source: io::Error,
    },
    /// The device cannot be reset through VFIO (`VFIO_DEVICE_FLAGS_RESET` is clear).
    #[error("{address}: the device does not support reset (no FLR, PM or bus reset available)")]
    ResetNotSupported {
        /// The device.
        address: PciAddress,
    },
    /// `VFIO_DEVICE_RESET` failed.
    #[error("{address}: VFIO_DEVICE_RESET failed")]
    Reset {
        /// The device.
        address: PciAddress,
        /// The OS error.
        #[source]
        source: io::Error,
    },
    /// Registering an eventfd as a KVM irqfd failed.
    #[cfg(feature = "kvm")]
    #[error("registering an eventfd as KVM irqfd for GSI {gsi} failed")]
    Irqfd {
        /// The guest interrupt line.
        gsi: u32,
        /// The KVM error (errno).
        #[source]
        source: kvm_ioctls::Error,
    },
}

impl AssignError {
    /// [`AssignError::RegionIo`]: `op` (`"read"`/`"write"`) of `len` bytes at `offset` of
    /// region `index` of device `address` failed with `source`.
    pub(crate) fn region_io(
        address: PciAddress,
        index: u32,
        op: &'static str,
        offset: u64,
        len: usize,
        source: io::Error,
    ) -> Self {
        AssignError::RegionIo {
            address,
            index,
            op,
            offset,
            len: len as u64,
            source,
        }
    }
}

/// Result of the assignment API.
pub type Result<T> = std::result::Result<T, AssignError>;

/// Displays an error with its chain of sources, each once: `message: source: source's source`.
///
/// A source whose message already ends the text so far is skipped: some dependencies (e.g.
/// vfio-ioctls) repeat their source in their own message as well.
///
/// ```
/// # use vm_passthrough::vfio::{AssignError, ErrorChain};
/// let error = AssignError::EmptyContainer;
/// assert_eq!(ErrorChain(&error).to_string(), error.to_string());
/// ```
#[derive(Clone, Copy, Debug)]
pub struct ErrorChain<'a>(pub &'a (dyn std::error::Error + 'static));

impl fmt::Display for ErrorChain<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut text = self.0.to_string();
        let mut source = self.0.source();
        while let Some(error) = source {
            let message = error.to_string();
            if !text.ends_with(&message) {
                text.push_str(": ");
                text.push_str(&message);
            }
            source = error.source();
        }
        f.write_str(&text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn io_error(code: i32) -> io::Error {
        io::Error::from_raw_os_error(code)
    }

    /// One error of each variant that has a source.
    fn with_sources() -> Vec<AssignError> {
        let address: PciAddress = "0000:01:00.0".parse().unwrap();
        let container = ContainerMembers(vec![(address, 5)]);
        vec![
            AssignError::Sysfs {
                address,
                source: pcie::Error::DeviceNotFound {
                    address,
                    path: "/sys/bus/pci/devices/0000:01:00.0".into(),
                },
            },
            AssignError::Container {
                source: vfio_ioctls::VfioError::OpenContainer(io_error(libc::ENOENT)),
            },
            AssignError::GroupBusy {
                address,
                group: 5,
                source: io_error(libc::EBUSY),
            },
            AssignError::Open {
                address,
                group: 5,
                source: vfio_ioctls::VfioError::OpenGroup(io_error(libc::EACCES), "5".into()),
            },
            AssignError::DeviceInfo {
                address,
                source: io_error(libc::ENOTTY),
            },
            AssignError::region_io(address, 0, "read", 0x10, 4, io_error(libc::EIO)),
            AssignError::RegionMmap {
                address,
                index: 2,
                offset: 0,
                len: 0x1000,
                source: io_error(libc::EINVAL),
            },
            AssignError::DmaMap {
                container: container.clone(),
                iova: 0x10_0000,
                size: 0x1000,
                source: io_error(libc::EEXIST),
            },
            AssignError::DmaUnmap {
                container,
                iova: 0x10_0000,
                size: 0x1000,
                source: io_error(libc::EINVAL),
            },
            AssignError::SetIrqs {
                address,
                kind: IrqKind::Msi,
                action: "enable",
                source: io_error(libc::EINVAL),
            },
            AssignError::Reset {
                address,
                source: io_error(libc::EIO),
            },
        ]
    }

    #[test]
    fn no_message_repeats_its_source() {
        for error in with_sources() {
            let source = std::error::Error::source(&error)
                .expect("a source")
                .to_string();
            let message = error.to_string();
            assert!(
                !message.contains(&source),
                "{error:?}: message {message:?} repeats its source {source:?}"
            );
            // The chain has both, the source once.
            let chain = ErrorChain(&error).to_string();
            assert!(chain.starts_with(&message), "{chain}");
            assert_eq!(chain.matches(&source).count(), 1, "{chain}");
        }
    }

    #[test]
    fn the_chain_prints_every_errno_once() {
        // vfio-ioctls repeats its own source in its message: printed once all the same.
        let error = AssignError::Container {
            source: vfio_ioctls::VfioError::OpenContainer(io_error(libc::ENOENT)),
        };
        assert_eq!(
            ErrorChain(&error).to_string(),
            "opening a VFIO container failed: failed to open /dev/vfio/vfio container: \
             No such file or directory (os error 2)"
        );
        let address: PciAddress = "0000:01:00.0".parse().unwrap();
        let error = AssignError::region_io(address, 0, "read", 0x10, 4, io_error(libc::EIO));
        assert_eq!(
            ErrorChain(&error).to_string(),
            "0000:01:00.0: region 0: read of 4 bytes at 0x10 failed: \
             Input/output error (os error 5)"
        );
    }
}
