//! The error type of the assignment API: every variant names the device by its PCI address (and
//! IOMMU group), or the container by its devices and groups, and the resource (region, IOVA
//! range, interrupt kind) involved, and keeps the underlying error (errno, sysfs error) as its
//! source.

use std::io;

use pcie::PciAddress;

use crate::vfio::container::ContainerMembers;
use crate::vfio::irq::IrqKind;

/// Why an operation on an assigned device failed.
#[derive(Debug, thiserror::Error)]
pub enum AssignError {
    /// The device could not be read from sysfs (unknown address, unreadable attribute,
    /// malformed `iommu_group` link, ...).
    #[error("{address}: reading the device from sysfs failed: {source}")]
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
    #[error("opening a VFIO container failed: {source}")]
    Container {
        /// What vfio-ioctls reported.
        #[source]
        source: vfio_ioctls::VfioError,
    },
    /// Creating the KVM VFIO pseudo-device failed.
    #[cfg(feature = "kvm")]
    #[error(
        "creating the KVM VFIO device (KVM_CREATE_DEVICE, KVM_DEV_TYPE_VFIO) failed: {source}"
    )]
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
         (/dev/vfio/{group}: {source}); open all devices of a group in one container"
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
    #[error("{address}: opening the device through VFIO (IOMMU group {group}) failed: {source}")]
    Open {
        /// The device.
        address: PciAddress,
        /// Its IOMMU group.
        group: u32,
        /// What vfio-ioctls reported.
        #[source]
        source: vfio_ioctls::VfioError,
    },
    /// The fake backend could not set its device up (the memory behind an emulated BAR).
    #[cfg(any(test, feature = "fake"))]
    #[error("{address}: setting up the fake device failed: {source}")]
    FakeSetup {
        /// The device.
        address: PciAddress,
        /// The OS error.
        #[source]
        source: io::Error,
    },
    /// Guest memory cannot be mapped in a container without devices: VFIO sets its IOMMU up
    /// when the first group joins.
    #[error("no device is open in the VFIO container: open one before mapping guest memory")]
    EmptyContainer,
    /// `VFIO_DEVICE_GET_INFO` failed.
    #[error("{address}: VFIO_DEVICE_GET_INFO failed: {source}")]
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
    #[error("{address}: region {index}: {op} of {len} bytes at {offset:#x} failed: {source}")]
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
    #[error("{address}: region {index}: mmap of {len:#x} bytes at {offset:#x} failed: {source}")]
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
    #[error("{container}: DMA map of IOVA {iova:#x} (+{size:#x}) failed: {source}")]
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
    #[error("{container}: DMA unmap of IOVA {iova:#x} (+{size:#x}) failed: {source}")]
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
    #[error("{container}: guest memory at {gpa:#x} has no host mapping: {source}")]
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
    #[error("{address}: {action} of {kind} interrupts failed: {source}")]
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
    #[error("{address}: VFIO_DEVICE_RESET failed: {source}")]
    Reset {
        /// The device.
        address: PciAddress,
        /// The OS error.
        #[source]
        source: io::Error,
    },
    /// Registering an eventfd as a KVM irqfd failed.
    #[cfg(feature = "kvm")]
    #[error("registering an eventfd as KVM irqfd for GSI {gsi} failed: {source}")]
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
