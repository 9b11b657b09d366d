//! The VFIO boundary: the ioctl-level operations the assignment code needs, as two traits —
//! [`VfioBackend`] for one device, [`DmaBackend`] for the IOMMU domain of the container the
//! devices are opened in.
//!
//! [`crate::vfio::KernelVfio`] and [`crate::vfio::KernelDma`] implement them with the kernel's
//! VFIO; the `fake` module implements them with emulated devices behind one emulated IOMMU, so
//! the same [`crate::vfio::AssignedDevice`] and [`crate::vfio::Container`] code runs against
//! both. The traits know nothing of containers: a backend joins one when it is opened, and the
//! [`crate::vfio::AssignedDevice`] wrapping it holds the container. Errors at
//! this boundary are plain [`std::io::Error`]s because every operation is one system call that
//! fails with an errno; the assignment layer adds the context (BDF, group, region index, IOVA)
//! when it turns them into [`crate::vfio::AssignError`].

use std::io;
use std::ptr::NonNull;

use vmm_sys_util::eventfd::EventFd;

use crate::vfio::types::{DeviceInfo, IrqInfo, RegionInfo};
use crate::vfio::util::errno;

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
        let offset = libc::off_t::try_from(file_offset).map_err(|_| errno(libc::EOVERFLOW))?;
        if len == 0 {
            return Err(errno(libc::EINVAL));
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
        let addr = NonNull::new(addr.cast::<u8>()).ok_or_else(|| errno(libc::ENOMEM))?;
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

/// The ioctl-level VFIO operations on one device, opened in a container whose [`DmaBackend`]
/// (`Self::Dma`) its DMA goes through.
///
/// Implementations must keep the semantics of the kernel interface: region accesses are bounded
/// by the region, and an interrupt index only signals the eventfds most recently set for it.
/// A backend joins its container ([`crate::vfio::Container::join`]) before it touches the device
/// and holds the returned [`crate::vfio::ContainerSlot`] until it is dropped.
pub trait VfioBackend: Send + Sync + 'static {
    /// The IOMMU interface of the containers the device can be open in.
    type Dma: DmaBackend;
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
