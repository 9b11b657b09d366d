//! A fake VFIO backend: QEMU's `edu` devices behind an IOMMU, all emulated in process.
//!
//! It is a real implementation of [`VfioBackend`] and [`DmaBackend`], not a stub:
//! - A fake container ([`Container::fake`]) is one IOMMU domain ([`FakeDma`]) that any number of
//!   fake devices open in ([`FakeEduBuilder::open_in`]), like a VFIO container: a mapping made
//!   once through [`Container::map_guest_memory`] is what every device in it translates through,
//!   and a device is opened once per container.
//! - BAR0 holds edu's registers ([`edu`]: ID, liveness, factorial, interrupt raise/ack, DMA). It
//!   is reported without the mmap flag so that every access is trapped and takes effect at once
//!   (a trapped BAR is also what VFIO gives for BARs it will not map).
//! - DMA goes through the container's fake IOMMU, which translates only currently mapped IOVAs,
//!   with the kernel's type1 rules (`EEXIST` on overlap, `EINVAL` on partial unmap). A transfer
//!   to or from an unmapped IOVA, or while bus mastering is off, is blocked and logged as a
//!   [`DmaFault`] of the device that tried it — memory is left untouched, as with a real IOMMU
//!   fault.
//! - Interrupts follow vfio-pci: one kind enabled at a time, eventfds signalled on raise,
//!   INTx masked on delivery until unmasked and re-delivered if still asserted.
//! - Optionally ([`FakeEduBuilder::msix`]) an MSI-X capability with its table and PBA in an
//!   mmappable 64 KiB BAR2 backed by shared memory, with or without a sparse-mmap capability.
//! - Reset is either unsupported (like the real edu) or restores the power-on state.

pub mod edu;
mod iommu;

use std::fs::File;
use std::io;
use std::os::fd::{FromRawFd, OwnedFd};
use std::os::unix::fs::FileExt;
use std::sync::{Mutex, MutexGuard, OnceLock};

use pcie::PciAddress;

use vfio_bindings::bindings::vfio::{
    VFIO_IRQ_INFO_AUTOMASKED, VFIO_IRQ_INFO_EVENTFD, VFIO_IRQ_INFO_MASKABLE,
    VFIO_IRQ_INFO_NORESIZE, VFIO_PCI_INTX_IRQ_INDEX, VFIO_PCI_MSIX_IRQ_INDEX,
    VFIO_PCI_MSI_IRQ_INDEX, VFIO_PCI_NUM_IRQS, VFIO_PCI_NUM_REGIONS,
};
use vmm_sys_util::eventfd::EventFd;

use edu::{DeviceBus, Edu, BAR0_SIZE, EDU_DEVICE_ID, EDU_VENDOR_ID};
use iommu::FakeIommu;

use crate::vfio::backend::{DmaBackend, MmapArea, VfioBackend};
use crate::vfio::config::{PCI_COMMAND, PCI_COMMAND_MASTER};
use crate::vfio::container::{Container, ContainerSlot};
use crate::vfio::device::AssignedDevice;
use crate::vfio::error::Result;
use crate::vfio::types::{
    DeviceInfo, IrqInfo, RegionFlags, RegionInfo, SparseMmapArea, BAR0_REGION_INDEX,
    CONFIG_REGION_INDEX,
};
use crate::vfio::util::{errno, in_bounds, lock};

/// Region index of the optional MSI-X BAR.
pub const MSIX_BAR_REGION_INDEX: u32 = BAR0_REGION_INDEX + 2;
/// Size of the optional MSI-X BAR.
pub const MSIX_BAR_SIZE: u64 = 0x10000;
/// Offset of the MSI-X table in BAR2.
pub const MSIX_TABLE_OFFSET: u64 = 0x8000;
/// Offset of the MSI-X PBA in BAR2.
pub const MSIX_PBA_OFFSET: u64 = 0x9000;
/// The sparse-mmap areas reported for BAR2 when enabled: besides the MSI-X pages the kernel
/// also keeps [0x4000, 0x5000) trapped, so a plan that uses the capability is distinguishable
/// from one computed from config space.
pub const MSIX_BAR_SPARSE_AREAS: [SparseMmapArea; 3] = [
    SparseMmapArea {
        offset: 0,
        size: 0x4000,
    },
    SparseMmapArea {
        offset: 0x5000,
        size: 0x3000,
    },
    SparseMmapArea {
        offset: 0xa000,
        size: 0x6000,
    },
];

const CONFIG_SIZE: usize = 256;
const MSI_CAP_OFFSET: usize = 0x40;
const MSIX_CAP_OFFSET: usize = 0x50;
const COMMAND_WRITABLE: u16 = 0x0407; // I/O, memory, bus master, INTx disable

/// A DMA the fake refused, in the order they happened.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DmaFault {
    /// The IOMMU had no translation for `iova` (the first unmapped byte of the transfer).
    IommuUnmapped {
        /// First IOVA without a mapping.
        iova: u64,
        /// Whether the device was writing to memory.
        write: bool,
    },
    /// The device tried to DMA while the bus-master bit was clear.
    BusMasterDisabled,
    /// The transfer's device-side range left the 4 KiB DMA buffer.
    DeviceBufferOutOfRange {
        /// Device-side address.
        addr: u64,
        /// Transfer length.
        len: u64,
    },
}

/// Options for a [`FakeVfio`] edu device.
#[derive(Clone, Copy, Debug, Default)]
pub struct FakeEduBuilder {
    reset_supported: bool,
    msix_vectors: Option<u16>,
    sparse_mmap: bool,
}

impl FakeEduBuilder {
    /// Whether the device advertises `VFIO_DEVICE_FLAGS_RESET` (the real edu does not).
    pub fn reset_supported(mut self, supported: bool) -> Self {
        self.reset_supported = supported;
        self
    }

    /// Adds an MSI-X capability with `vectors` vectors (1-64) in BAR2; `sparse_mmap` makes the
    /// region report [`MSIX_BAR_SPARSE_AREAS`].
    pub fn msix(mut self, vectors: u16, sparse_mmap: bool) -> Self {
        self.msix_vectors = Some(vectors.clamp(1, 64));
        self.sparse_mmap = sparse_mmap;
        self
    }

    /// Opens the device at `address`, in IOMMU group `group`, in the fake `container`, whose
    /// IOMMU its DMA goes through. Fails with [`crate::vfio::AssignError::AlreadyOpen`] when `address` is open
    /// in the container already.
    pub fn open_in(
        self,
        container: &Container<FakeDma>,
        address: PciAddress,
        group: u32,
    ) -> Result<AssignedDevice<FakeVfio>> {
        let slot = container.join(address, group)?;
        let device = FakeVfio {
            options: self,
            msix_bar: self.msix_vectors.map(|_| OnceLock::new()),
            state: Mutex::new(FakeState {
                config: initial_config(self.msix_vectors),
                edu: Edu::default(),
                irqs: FakeInterrupts::default(),
                faults: Vec::new(),
                reset_count: 0,
                msix_table_traps: 0,
            }),
            slot,
        };
        Ok(AssignedDevice::new(container, address, device))
    }

    /// Opens the device at `address` in a fake container of its own (IOMMU group 0).
    pub fn open(self, address: PciAddress) -> Result<AssignedDevice<FakeVfio>> {
        self.open_in(&Container::fake(), address, 0)
    }
}

/// The IOMMU domain of a fake container: one type1-like IOMMU that every fake device opened in
/// the container translates its DMA through.
#[derive(Default)]
pub struct FakeDma {
    iommu: Mutex<FakeIommu>,
}

impl std::fmt::Debug for FakeDma {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FakeDma")
            .field("mappings", &self.mappings())
            .finish()
    }
}

impl FakeDma {
    /// The IOVA ranges currently mapped, as `(iova, size)`.
    pub fn mappings(&self) -> Vec<(u64, u64)> {
        self.lock().mappings()
    }

    fn lock(&self) -> MutexGuard<'_, FakeIommu> {
        lock(&self.iommu)
    }
}

impl DmaBackend for FakeDma {
    unsafe fn dma_map(&self, iova: u64, size: u64, host_addr: *mut u8) -> io::Result<()> {
        // SAFETY: the caller upholds `DmaBackend::dma_map`'s contract, which is
        // `FakeIommu::map`'s.
        unsafe { self.lock().map(iova, size, host_addr) }
    }

    fn dma_unmap(&self, iova: u64, size: u64) -> io::Result<()> {
        self.lock().unmap(iova, size)
    }
}

impl Container<FakeDma> {
    /// An empty fake container: a fresh fake IOMMU, no devices.
    pub fn fake() -> Self {
        Container::with_dma_backend(FakeDma::default())
    }

    /// The IOVA ranges its IOMMU currently maps, as `(iova, size)`.
    pub fn iommu_mappings(&self) -> Vec<(u64, u64)> {
        self.dma_backend().mappings()
    }
}

/// The fake device; see the module documentation.
pub struct FakeVfio {
    options: FakeEduBuilder,
    /// The MSI-X BAR's memory when the device has one, created at its first access.
    msix_bar: Option<OnceLock<File>>,
    state: Mutex<FakeState>,
    slot: ContainerSlot<FakeDma>,
}

impl std::fmt::Debug for FakeVfio {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FakeVfio")
            .field("options", &self.options)
            .field("address", &self.slot.address())
            .field("group", &self.slot.group())
            .finish_non_exhaustive()
    }
}

struct FakeState {
    config: [u8; CONFIG_SIZE],
    edu: Edu,
    irqs: FakeInterrupts,
    faults: Vec<DmaFault>,
    reset_count: u32,
    msix_table_traps: u32,
}

/// Which interrupt kind is enabled, its eventfds, and the INTx line/mask state.
#[derive(Default)]
struct FakeInterrupts {
    enabled: Option<(u32, Vec<EventFd>)>,
    intx_asserted: bool,
    intx_masked: bool,
}

impl FakeInterrupts {
    fn signal(eventfd: &EventFd) {
        if let Err(e) = eventfd.write(1) {
            log::error!("fake VFIO: signalling eventfd failed: {e}");
        }
    }

    fn raise(&mut self) {
        match &self.enabled {
            Some((index, fds)) if *index != VFIO_PCI_INTX_IRQ_INDEX => Self::signal(&fds[0]),
            _ => {
                self.intx_asserted = true;
                self.deliver_intx();
            }
        }
    }

    /// Delivers a pending INTx unless masked, and masks it (vfio-pci's automasking).
    fn deliver_intx(&mut self) {
        if let Some((VFIO_PCI_INTX_IRQ_INDEX, fds)) = &self.enabled {
            if self.intx_asserted && !self.intx_masked {
                Self::signal(&fds[0]);
                self.intx_masked = true;
            }
        }
    }
}

/// The device's view of its bus while it handles one access.
struct Bus<'a> {
    bus_master: bool,
    iommu: &'a FakeDma,
    irqs: &'a mut FakeInterrupts,
    faults: &'a mut Vec<DmaFault>,
}

impl Bus<'_> {
    fn blocked(&mut self, result: std::result::Result<(), u64>, write: bool) -> bool {
        match result {
            Ok(()) => true,
            Err(iova) => {
                log::warn!(
                    "fake IOMMU: DMA {} unmapped IOVA {iova:#x} blocked",
                    if write { "write to" } else { "read from" }
                );
                self.faults.push(DmaFault::IommuUnmapped { iova, write });
                false
            }
        }
    }
}

impl DeviceBus for Bus<'_> {
    fn dma_read(&mut self, iova: u64, buf: &mut [u8]) -> bool {
        if !self.bus_master {
            self.faults.push(DmaFault::BusMasterDisabled);
            return false;
        }
        let result = self.iommu.lock().dma_read(iova, buf);
        self.blocked(result, false)
    }

    fn dma_write(&mut self, iova: u64, data: &[u8]) -> bool {
        if !self.bus_master {
            self.faults.push(DmaFault::BusMasterDisabled);
            return false;
        }
        let result = self.iommu.lock().dma_write(iova, data);
        self.blocked(result, true)
    }

    fn raise_irq(&mut self) {
        self.irqs.raise();
    }

    fn lower_irq(&mut self) {
        self.irqs.intx_asserted = false;
    }

    fn device_error(&mut self, addr: u64, len: u64) {
        self.faults
            .push(DmaFault::DeviceBufferOutOfRange { addr, len });
    }
}

impl FakeState {
    fn command(&self) -> u16 {
        u16::from_le_bytes([
            self.config[PCI_COMMAND as usize],
            self.config[PCI_COMMAND as usize + 1],
        ])
    }

    fn bus<'a>(&'a mut self, iommu: &'a FakeDma) -> (&'a mut Edu, Bus<'a>) {
        let bus_master = self.command() & PCI_COMMAND_MASTER != 0;
        let bus = Bus {
            bus_master,
            iommu,
            irqs: &mut self.irqs,
            faults: &mut self.faults,
        };
        (&mut self.edu, bus)
    }

    fn config_write(&mut self, offset: usize, data: &[u8]) {
        for (i, byte) in data.iter().enumerate() {
            let at = offset + i;
            // Only the command register is writable; everything else is read-only here.
            let writable = match at {
                0x04 => COMMAND_WRITABLE as u8,
                0x05 => (COMMAND_WRITABLE >> 8) as u8,
                _ => 0,
            };
            self.config[at] = (self.config[at] & !writable) | (byte & writable);
        }
    }
}

impl FakeVfio {
    /// Options for the device; by default an edu device as QEMU emulates it: no reset, MSI and
    /// INTx, no MSI-X. Open it with [`FakeEduBuilder::open_in`] or [`FakeEduBuilder::open`].
    pub fn builder() -> FakeEduBuilder {
        FakeEduBuilder::default()
    }

    /// The DMAs blocked so far.
    pub fn dma_faults(&self) -> Vec<DmaFault> {
        self.lock().faults.clone()
    }

    /// How many times the device was reset.
    pub fn reset_count(&self) -> u32 {
        self.lock().reset_count
    }

    /// How many trapped accesses hit the MSI-X table or PBA.
    pub fn msix_table_traps(&self) -> u32 {
        self.lock().msix_table_traps
    }

    fn lock(&self) -> MutexGuard<'_, FakeState> {
        lock(&self.state)
    }

    fn region_size(&self, index: u32) -> Option<u64> {
        match index {
            BAR0_REGION_INDEX => Some(BAR0_SIZE),
            MSIX_BAR_REGION_INDEX if self.msix_bar.is_some() => Some(MSIX_BAR_SIZE),
            1..=6 => Some(0),
            CONFIG_REGION_INDEX => Some(CONFIG_SIZE as u64),
            _ => None,
        }
    }

    /// Bounds check shared by all region accesses, as the kernel does it.
    fn check_range(&self, index: u32, offset: u64, len: usize) -> io::Result<()> {
        let size = self.region_size(index).ok_or_else(|| errno(libc::EINVAL))?;
        if in_bounds(offset, len as u64, size) {
            Ok(())
        } else {
            Err(errno(libc::EINVAL))
        }
    }

    /// The MSI-X BAR's backing memory, for a trapped access of `len` bytes at `offset`; counts
    /// the access when it touches the MSI-X table or PBA.
    fn trapped_msix_bar(
        &self,
        state: &mut FakeState,
        offset: u64,
        len: usize,
    ) -> io::Result<&File> {
        let msix_end = MSIX_PBA_OFFSET + 8;
        if offset < msix_end && offset + len as u64 > MSIX_TABLE_OFFSET {
            state.msix_table_traps += 1;
        }
        self.msix_bar_file()
    }

    /// The MSI-X BAR's memory, created at its first use: failing to create it is the error of
    /// the access (or mmap) that needed it.
    fn msix_bar_file(&self) -> io::Result<&File> {
        let cell = self.msix_bar.as_ref().ok_or_else(|| errno(libc::EINVAL))?;
        if let Some(file) = cell.get() {
            return Ok(file);
        }
        let file = shared_memory_file(MSIX_BAR_SIZE)?;
        // Under a race the other thread's file wins and this one is closed: both are empty.
        Ok(cell.get_or_init(|| file))
    }
}

/// An anonymous shared-memory file of `size` bytes (device memory that can be mmapped).
fn shared_memory_file(size: u64) -> io::Result<File> {
    // SAFETY: the name is a NUL-terminated string literal; the result is checked before use.
    let fd = unsafe { libc::memfd_create(c"fake-vfio-bar".as_ptr(), libc::MFD_CLOEXEC) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: memfd_create just returned this fd and nothing else owns it.
    let file = File::from(unsafe { OwnedFd::from_raw_fd(fd) });
    file.set_len(size)?;
    Ok(file)
}

/// edu's configuration space: IDs, class, BAR0, INTA, a 64-bit MSI capability, and optionally
/// an MSI-X capability whose table and PBA live in BAR2.
fn initial_config(msix_vectors: Option<u16>) -> [u8; CONFIG_SIZE] {
    let mut config = [0u8; CONFIG_SIZE];
    let mut put =
        |offset: usize, bytes: &[u8]| config[offset..offset + bytes.len()].copy_from_slice(bytes);
    put(0x00, &EDU_VENDOR_ID.to_le_bytes());
    put(0x02, &EDU_DEVICE_ID.to_le_bytes());
    put(0x06, &0x0010u16.to_le_bytes()); // status: capability list
    put(0x08, &[0x10, 0x00, 0xff, 0x00]); // revision 0x10, class 0x00ff00
    put(0x10, &0u32.to_le_bytes()); // BAR0: 32-bit non-prefetchable memory
    put(0x34, &[MSI_CAP_OFFSET as u8]);
    put(0x3d, &[0x01]); // interrupt pin INTA
    let next = if msix_vectors.is_some() {
        MSIX_CAP_OFFSET as u8
    } else {
        0
    };
    put(MSI_CAP_OFFSET, &[0x05, next, 0x80, 0x00]); // MSI, 64-bit, 1 vector
    if let Some(vectors) = msix_vectors {
        let bir = MSIX_BAR_REGION_INDEX - BAR0_REGION_INDEX;
        put(MSIX_CAP_OFFSET, &[0x11, 0x00]);
        put(MSIX_CAP_OFFSET + 2, &(vectors - 1).to_le_bytes());
        put(
            MSIX_CAP_OFFSET + 4,
            &(MSIX_TABLE_OFFSET as u32 | bir).to_le_bytes(),
        );
        put(
            MSIX_CAP_OFFSET + 8,
            &(MSIX_PBA_OFFSET as u32 | bir).to_le_bytes(),
        );
    }
    config
}

impl VfioBackend for FakeVfio {
    type Dma = FakeDma;

    fn device_info(&self) -> DeviceInfo {
        DeviceInfo {
            reset_supported: self.options.reset_supported,
            num_regions: VFIO_PCI_NUM_REGIONS,
            num_irqs: VFIO_PCI_NUM_IRQS,
        }
    }

    fn region_info(&self, index: u32) -> Option<RegionInfo> {
        let size = self.region_size(index)?;
        let is_msix_bar = index == MSIX_BAR_REGION_INDEX && size > 0;
        let implemented = size > 0;
        Some(RegionInfo {
            index,
            size,
            file_offset: u64::from(index) << 40,
            flags: RegionFlags {
                read: implemented,
                write: implemented,
                mmap: is_msix_bar,
            },
            sparse_mmap: (is_msix_bar && self.options.sparse_mmap)
                .then(|| MSIX_BAR_SPARSE_AREAS.to_vec()),
            msix_mappable: is_msix_bar && !self.options.sparse_mmap,
        })
    }

    fn region_read(&self, index: u32, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        self.check_range(index, offset, buf.len())?;
        let mut state = self.lock();
        match index {
            BAR0_REGION_INDEX => {
                let value = state.edu.mmio_read(offset, buf.len()).to_le_bytes();
                let len = buf.len().min(value.len());
                buf[..len].copy_from_slice(&value[..len]);
                buf[len..].fill(0xff);
            }
            CONFIG_REGION_INDEX => {
                buf.copy_from_slice(&state.config[offset as usize..offset as usize + buf.len()])
            }
            MSIX_BAR_REGION_INDEX => self
                .trapped_msix_bar(&mut state, offset, buf.len())?
                .read_exact_at(buf, offset)?,
            _ => return Err(errno(libc::EINVAL)),
        }
        Ok(())
    }

    fn region_write(&self, index: u32, offset: u64, data: &[u8]) -> io::Result<()> {
        self.check_range(index, offset, data.len())?;
        let mut state = self.lock();
        match index {
            BAR0_REGION_INDEX => {
                let mut value = [0u8; 8];
                let len = data.len().min(value.len());
                value[..len].copy_from_slice(&data[..len]);
                let (edu, mut bus) = state.bus(self.slot.container().dma_backend());
                edu.mmio_write(offset, data.len(), u64::from_le_bytes(value), &mut bus);
            }
            CONFIG_REGION_INDEX => state.config_write(offset as usize, data),
            MSIX_BAR_REGION_INDEX => self
                .trapped_msix_bar(&mut state, offset, data.len())?
                .write_all_at(data, offset)?,
            _ => return Err(errno(libc::EINVAL)),
        }
        Ok(())
    }

    fn region_mmap(&self, index: u32, offset: u64, len: usize) -> io::Result<MmapArea> {
        self.check_range(index, offset, len)?;
        let Some(info) = self.region_info(index) else {
            return Err(errno(libc::EINVAL));
        };
        if !info.flags.mmap || !offset.is_multiple_of(4096) {
            return Err(errno(libc::EINVAL));
        }
        if let Some(areas) = &info.sparse_mmap {
            let end = offset + len as u64;
            if !areas
                .iter()
                .any(|a| a.offset <= offset && end <= a.offset + a.size)
            {
                return Err(errno(libc::EINVAL));
            }
        }
        MmapArea::map_shared(self.msix_bar_file()?, offset, len)
    }

    fn irq_info(&self, index: u32) -> Option<IrqInfo> {
        let count = match index {
            VFIO_PCI_INTX_IRQ_INDEX | VFIO_PCI_MSI_IRQ_INDEX => 1,
            VFIO_PCI_MSIX_IRQ_INDEX => u32::from(self.options.msix_vectors.unwrap_or(0)),
            i if i < VFIO_PCI_NUM_IRQS => 0,
            _ => return None,
        };
        let flags = match index {
            VFIO_PCI_INTX_IRQ_INDEX => {
                VFIO_IRQ_INFO_EVENTFD | VFIO_IRQ_INFO_MASKABLE | VFIO_IRQ_INFO_AUTOMASKED
            }
            _ => VFIO_IRQ_INFO_EVENTFD | VFIO_IRQ_INFO_NORESIZE,
        };
        Some(IrqInfo {
            index,
            count,
            flags,
        })
    }

    fn irq_set_eventfds(&self, index: u32, eventfds: &[&EventFd]) -> io::Result<()> {
        let count = self.irq_info(index).map_or(0, |info| info.count) as usize;
        if eventfds.is_empty() || eventfds.len() > count {
            return Err(errno(libc::EINVAL));
        }
        let mut state = self.lock();
        // vfio-pci allows one interrupt kind at a time.
        if matches!(&state.irqs.enabled, Some((enabled, _)) if *enabled != index) {
            return Err(errno(libc::EINVAL));
        }
        let fds = eventfds
            .iter()
            .map(|fd| fd.try_clone())
            .collect::<io::Result<Vec<_>>>()?;
        state.irqs.enabled = Some((index, fds));
        if index == VFIO_PCI_INTX_IRQ_INDEX {
            state.irqs.intx_masked = false;
            state.irqs.deliver_intx();
        }
        Ok(())
    }

    fn irq_disable(&self, index: u32) -> io::Result<()> {
        let mut state = self.lock();
        match &state.irqs.enabled {
            Some((enabled, _)) if *enabled == index => {
                state.irqs.enabled = None;
                Ok(())
            }
            _ => Err(errno(libc::EINVAL)),
        }
    }

    fn irq_unmask(&self, index: u32) -> io::Result<()> {
        let mut state = self.lock();
        match &state.irqs.enabled {
            Some((VFIO_PCI_INTX_IRQ_INDEX, _)) if index == VFIO_PCI_INTX_IRQ_INDEX => {
                state.irqs.intx_masked = false;
                state.irqs.deliver_intx();
                Ok(())
            }
            _ => Err(errno(libc::EINVAL)),
        }
    }

    fn reset(&self) -> io::Result<()> {
        if !self.options.reset_supported {
            return Err(errno(libc::EINVAL));
        }
        let mut state = self.lock();
        state.edu = Edu::default();
        state.config = initial_config(self.options.msix_vectors);
        state.irqs.intx_asserted = false;
        state.reset_count += 1;
        Ok(())
    }
}

#[cfg(test)]
mod tests;
