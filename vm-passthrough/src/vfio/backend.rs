//! The VFIO boundary: the ioctl-level operations the assignment code needs, as two traits —
//! [`VfioBackend`] for one device, [`DmaBackend`] for the IOMMU domain of the container the
//! devices are opened in.
//!
//! [`crate::vfio::KernelVfio`] and [`crate::vfio::KernelDma`] implement them with the kernel's
//! VFIO; the `fake` module implements them with emulated devices behind one emulated IOMMU, so
//! the same [`crate::vfio::AssignedDevice`] and [`Container`] code runs against both. Errors at
//! this boundary are plain [`std::io::Error`]s because every operation is one system call that
//! fails with an errno; the assignment layer adds the context (BDF, group, region index, IOVA)
//! when it turns them into [`crate::vfio::AssignError`].

use std::io;
use std::ptr::NonNull;

use vmm_sys_util::eventfd::EventFd;

use crate::vfio::container::Container;

/// VFIO region index of BAR 0; BAR n is `BAR0_REGION_INDEX + n`.
pub const BAR0_REGION_INDEX: u32 = vfio_bindings::bindings::vfio::VFIO_PCI_BAR0_REGION_INDEX;
/// VFIO region index of the expansion ROM.
pub const ROM_REGION_INDEX: u32 = vfio_bindings::bindings::vfio::VFIO_PCI_ROM_REGION_INDEX;
/// VFIO region index of PCI configuration space.
pub const CONFIG_REGION_INDEX: u32 = vfio_bindings::bindings::vfio::VFIO_PCI_CONFIG_REGION_INDEX;
/// Number of BARs of a type-0 PCI function.
pub const BAR_COUNT: u32 = 6;

/// Access rights of a device region, as reported by `VFIO_DEVICE_GET_REGION_INFO`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RegionFlags {
    /// The region can be read with `pread` on the device file.
    pub read: bool,
    /// The region can be written with `pwrite` on the device file.
    pub write: bool,
    /// (Parts of) the region can be `mmap`ed from the device file.
    pub mmap: bool,
}

/// One part of a region that the kernel allows to be mmapped (`VFIO_REGION_INFO_CAP_SPARSE_MMAP`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SparseMmapArea {
    /// Offset of the area from the start of the region.
    pub offset: u64,
    /// Length of the area in bytes.
    pub size: u64,
}

/// What the kernel reports about one device region.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RegionInfo {
    /// VFIO region index (BARs 0-5, ROM 6, config 7, VGA 8).
    pub index: u32,
    /// Size in bytes; 0 for an unimplemented BAR.
    pub size: u64,
    /// Offset of the region within the device file (for `pread`/`pwrite`/`mmap`).
    pub file_offset: u64,
    /// Read/write/mmap permissions.
    pub flags: RegionFlags,
    /// The only mmappable areas, when the kernel restricts mmap to parts of the region.
    /// `None` means the whole region may be mapped (if `flags.mmap`).
    pub sparse_mmap: Option<Vec<SparseMmapArea>>,
    /// The kernel allows mmap over the MSI-X table (`VFIO_REGION_INFO_CAP_MSIX_MAPPABLE`).
    /// The table is still kept out of our mappings: it must stay trapped for the VMM.
    pub msix_mappable: bool,
}

/// What the kernel reports about one interrupt index (INTx, MSI, MSI-X, ...).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IrqInfo {
    /// VFIO interrupt index.
    pub index: u32,
    /// Number of vectors; 0 when the device does not support this kind of interrupt.
    pub count: u32,
    /// Raw `VFIO_IRQ_INFO_*` flags (eventfd, maskable, automasked, noresize).
    pub flags: u32,
}

/// The `VFIO_DEVICE_GET_INFO` answer that the assignment code needs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DeviceInfo {
    /// The device supports `VFIO_DEVICE_RESET` (`VFIO_DEVICE_FLAGS_RESET`).
    pub reset_supported: bool,
    /// Number of regions the device exposes.
    pub num_regions: u32,
    /// Number of interrupt indexes the device exposes.
    pub num_irqs: u32,
}

/// A shared memory mapping of (part of) a device region; unmapped when dropped.
#[derive(Debug)]
pub struct MmapArea {
    addr: NonNull<u8>,
    len: usize,
}

// SAFETY: an MmapArea is an exclusively owned address range; the mapping itself is not tied to
// the thread that created it, and all access goes through volatile raw-pointer operations.
unsafe impl Send for MmapArea {}
// SAFETY: shared references only hand out the raw address; no Rust references into the mapping
// are ever created, so concurrent use from several threads cannot alias Rust-owned memory.
unsafe impl Sync for MmapArea {}

impl MmapArea {
    /// `mmap`s `len` bytes of `file` at `file_offset`, shared and read/write.
    pub fn map_shared(
        file: &impl std::os::fd::AsRawFd,
        file_offset: u64,
        len: usize,
    ) -> io::Result<Self> {
        let offset = libc::off_t::try_from(file_offset)
            .map_err(|_| io::Error::from_raw_os_error(libc::EOVERFLOW))?;
        if len == 0 {
            return Err(io::Error::from_raw_os_error(libc::EINVAL));
        }
        // SAFETY: a fresh mapping chosen by the kernel (addr = NULL) cannot overlap any existing
        // Rust object; the result is checked for MAP_FAILED before it is used.
        let addr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                file.as_raw_fd(),
                offset,
            )
        };
        if addr == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let addr = NonNull::new(addr.cast::<u8>())
            .ok_or_else(|| io::Error::from_raw_os_error(libc::ENOMEM))?;
        Ok(MmapArea { addr, len })
    }

    /// Start address of the mapping.
    pub fn as_ptr(&self) -> *mut u8 {
        self.addr.as_ptr()
    }

    /// Length of the mapping in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Always false: empty mappings cannot be created.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl Drop for MmapArea {
    fn drop(&mut self) {
        // SAFETY: addr/len describe a mapping this value created and exclusively owns; no Rust
        // reference into it exists (only raw pointers), so unmapping cannot invalidate one.
        let rc = unsafe { libc::munmap(self.addr.as_ptr().cast(), self.len) };
        if rc != 0 {
            log::error!(
                "munmap of device mapping at {:p} (+{:#x}) failed: {}",
                self.addr,
                self.len,
                io::Error::last_os_error()
            );
        }
    }
}

/// The IOMMU domain of a VFIO container: DMA map/unmap of host memory at IOVAs, shared by every
/// device opened in the container (a legacy VFIO container with the type1 IOMMU, an iommufd IOAS,
/// or the fake's IOMMU).
///
/// Implementations must keep the semantics of the kernel interface: DMA map refuses overlapping
/// IOVA ranges (`EEXIST`) and DMA unmap removes whole mappings.
pub trait DmaBackend: Send + Sync + 'static {
    /// Maps `[host_addr, host_addr + size)` for device DMA at `[iova, iova + size)`.
    ///
    /// # Safety
    ///
    /// The host range must stay allocated until it is unmapped with [`Self::dma_unmap`], and
    /// while it is mapped no Rust reference to it may exist: the devices read and write it at
    /// any time, so it may only be accessed through raw pointers / volatile operations.
    unsafe fn dma_map(&self, iova: u64, size: u64, host_addr: *mut u8) -> io::Result<()>;
    /// Removes the mapping(s) that exactly cover `[iova, iova + size)`.
    fn dma_unmap(&self, iova: u64, size: u64) -> io::Result<()>;
}

/// The ioctl-level VFIO operations on one device, opened in a [`Container`] whose
/// [`DmaBackend`] its DMA goes through.
///
/// Implementations must keep the semantics of the kernel interface: region accesses are bounded
/// by the region, and an interrupt index only signals the eventfds most recently set for it.
/// A backend joins its container ([`Container::join`]) before it touches the device and holds the
/// returned [`crate::vfio::ContainerSlot`] until it is dropped.
pub trait VfioBackend: Send + Sync + 'static {
    /// The IOMMU interface of the container the device is open in.
    type Dma: DmaBackend;
    /// The container the device is open in.
    fn container(&self) -> &Container<Self::Dma>;
    /// `VFIO_DEVICE_GET_INFO`.
    fn device_info(&self) -> DeviceInfo;
    /// `VFIO_DEVICE_GET_REGION_INFO`; `None` when the device has no region `index`.
    fn region_info(&self, index: u32) -> Option<RegionInfo>;
    /// `pread` of `buf.len()` bytes at `offset` within region `index`.
    fn region_read(&self, index: u32, offset: u64, buf: &mut [u8]) -> io::Result<()>;
    /// `pwrite` of `data` at `offset` within region `index`.
    fn region_write(&self, index: u32, offset: u64, data: &[u8]) -> io::Result<()>;
    /// `mmap` of `len` bytes at `offset` within region `index`.
    fn region_mmap(&self, index: u32, offset: u64, len: usize) -> io::Result<MmapArea>;
    /// `VFIO_DEVICE_GET_IRQ_INFO`; `None` when the device has no interrupt index `index`.
    fn irq_info(&self, index: u32) -> Option<IrqInfo>;
    /// `VFIO_DEVICE_SET_IRQS` with `DATA_EVENTFD | ACTION_TRIGGER`: vector `i` signals `eventfds[i]`.
    fn irq_set_eventfds(&self, index: u32, eventfds: &[&EventFd]) -> io::Result<()>;
    /// `VFIO_DEVICE_SET_IRQS` with `DATA_NONE | ACTION_TRIGGER`, count 0: disables the index.
    fn irq_disable(&self, index: u32) -> io::Result<()>;
    /// `VFIO_DEVICE_SET_IRQS` with `DATA_NONE | ACTION_UNMASK` for vector 0 (INTx).
    fn irq_unmask(&self, index: u32) -> io::Result<()>;
    /// `VFIO_DEVICE_RESET`.
    fn reset(&self) -> io::Result<()>;
}
