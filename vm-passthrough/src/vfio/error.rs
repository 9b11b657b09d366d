//! The error type of the assignment API: every variant names the device and the resource
//! (region, IOVA range, interrupt kind) involved, and keeps the OS error (errno) as its source.

use std::io;
use std::path::PathBuf;

use crate::vfio::irq::IrqKind;

/// Why an operation on an assigned device failed.
#[derive(Debug, thiserror::Error)]
pub enum AssignError {
    /// The PCI address is not of the form `DDDD:BB:DD.F`.
    #[error("invalid PCI address {bdf:?}: expected DDDD:BB:DD.F (hexadecimal)")]
    InvalidBdf {
        /// The rejected address.
        bdf: String,
    },
    /// The device's `iommu_group` link in sysfs could not be read.
    #[error("{bdf}: cannot read IOMMU group link {}: {source}", path.display())]
    IommuGroupLookup {
        /// The device.
        bdf: String,
        /// The link that was read.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: io::Error,
    },
    /// The `iommu_group` link does not end in a group number.
    #[error("{bdf}: IOMMU group link {} does not point at a numbered group", path.display())]
    IommuGroupMalformed {
        /// The device.
        bdf: String,
        /// The link that was read.
        path: PathBuf,
    },
    /// The caller's IOMMU group number is not the device's.
    #[error("{bdf}: device is in IOMMU group {actual}, not in group {expected}")]
    IommuGroupMismatch {
        /// The device.
        bdf: String,
        /// The group the caller named.
        expected: u32,
        /// The group sysfs reports.
        actual: u32,
    },
    /// Opening the device through VFIO (container, group or cdev) failed.
    #[error("{bdf}: opening the device through VFIO failed: {source}")]
    Open {
        /// The device.
        bdf: String,
        /// What vfio-ioctls reported.
        #[source]
        source: vfio_ioctls::VfioError,
    },
    /// `VFIO_DEVICE_GET_INFO` failed.
    #[error("{bdf}: VFIO_DEVICE_GET_INFO failed: {source}")]
    DeviceInfo {
        /// The device.
        bdf: String,
        /// The OS error.
        #[source]
        source: io::Error,
    },
    /// The device has no region with this index.
    #[error("{bdf}: the device has no region {index}")]
    NoSuchRegion {
        /// The device.
        bdf: String,
        /// The region index asked for.
        index: u32,
    },
    /// The region index does not name a BAR (0-5).
    #[error("{bdf}: region {index} is not a BAR")]
    NotABar {
        /// The device.
        bdf: String,
        /// The region index asked for.
        index: u32,
    },
    /// An access reaches outside its region.
    #[error("{bdf}: region {index}: {len} bytes at {offset:#x} lie outside its {size:#x} bytes")]
    RegionOutOfBounds {
        /// The device.
        bdf: String,
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
    #[error("{bdf}: region {index}: {width}-byte access at {offset:#x} is not aligned")]
    MisalignedAccess {
        /// The device.
        bdf: String,
        /// The region index.
        index: u32,
        /// Offset of the access within the region.
        offset: u64,
        /// Width of the access in bytes.
        width: u64,
    },
    /// The region does not allow this kind of access.
    #[error("{bdf}: region {index} is not {access}")]
    RegionAccessDenied {
        /// The device.
        bdf: String,
        /// The region index.
        index: u32,
        /// `"readable"` or `"writable"`.
        access: &'static str,
    },
    /// `pread`/`pwrite` on the device file failed.
    #[error("{bdf}: region {index}: {op} of {len} bytes at {offset:#x} failed: {source}")]
    RegionIo {
        /// The device.
        bdf: String,
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
    #[error("{bdf}: region {index}: mmap of {len:#x} bytes at {offset:#x} failed: {source}")]
    RegionMmap {
        /// The device.
        bdf: String,
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
    #[error("{bdf}: DMA map of IOVA {iova:#x} (+{size:#x}) failed: {source}")]
    DmaMap {
        /// The device whose IOMMU domain was targeted.
        bdf: String,
        /// Start of the IOVA range (= guest physical address).
        iova: u64,
        /// Length of the range.
        size: u64,
        /// The OS error (`EEXIST` for an overlap, `EINVAL` for a misaligned range, ...).
        #[source]
        source: io::Error,
    },
    /// A DMA mapping could not be removed.
    #[error("{bdf}: DMA unmap of IOVA {iova:#x} (+{size:#x}) failed: {source}")]
    DmaUnmap {
        /// The device whose IOMMU domain was targeted.
        bdf: String,
        /// Start of the IOVA range.
        iova: u64,
        /// Length of the range.
        size: u64,
        /// The OS error.
        #[source]
        source: io::Error,
    },
    /// A guest memory region has no host address to map.
    #[error("{bdf}: guest memory at {gpa:#x} has no host mapping: {source}")]
    GuestMemory {
        /// The device.
        bdf: String,
        /// Guest physical address of the region.
        gpa: u64,
        /// What vm-memory reported.
        #[source]
        source: vm_memory::GuestMemoryError,
    },
    /// The device does not support this kind of interrupt.
    #[error("{bdf}: the device has no {kind} interrupts")]
    IrqUnsupported {
        /// The device.
        bdf: String,
        /// The interrupt kind.
        kind: IrqKind,
    },
    /// More (or no) eventfds than the device has vectors.
    #[error("{bdf}: {kind} has {available} vector(s); {requested} eventfd(s) given")]
    IrqVectorCount {
        /// The device.
        bdf: String,
        /// The interrupt kind.
        kind: IrqKind,
        /// Number of eventfds passed.
        requested: usize,
        /// Number of vectors the device has.
        available: u32,
    },
    /// `VFIO_DEVICE_SET_IRQS` failed.
    #[error("{bdf}: {action} of {kind} interrupts failed: {source}")]
    SetIrqs {
        /// The device.
        bdf: String,
        /// The interrupt kind.
        kind: IrqKind,
        /// `"enable"`, `"disable"` or `"unmask"`.
        action: &'static str,
        /// The OS error.
        #[source]
        source: io::Error,
    },
    /// The device cannot be reset through VFIO (`VFIO_DEVICE_FLAGS_RESET` is clear).
    #[error("{bdf}: the device does not support reset (no FLR, PM or bus reset available)")]
    ResetNotSupported {
        /// The device.
        bdf: String,
    },
    /// `VFIO_DEVICE_RESET` failed.
    #[error("{bdf}: VFIO_DEVICE_RESET failed: {source}")]
    Reset {
        /// The device.
        bdf: String,
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

/// Result of the assignment API.
pub type Result<T> = std::result::Result<T, AssignError>;
