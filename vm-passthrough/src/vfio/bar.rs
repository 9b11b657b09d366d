//! BAR access: the mmappable parts of a BAR are mapped (fast path), everything else — the MSI-X
//! table and PBA above all, which the VMM must keep trapped — goes through the device file.

use std::ops::Range;
use std::sync::Arc;

use pcie::PciAddress;
use vm_memory::ByteValued;

use crate::vfio::backend::{MmapArea, VfioBackend};
use crate::vfio::config::MsixCapability;
use crate::vfio::device::AssignedDevice;
use crate::vfio::error::{AssignError, Result};
use crate::vfio::types::{RegionInfo, BAR0_REGION_INDEX, BAR_COUNT};
use crate::vfio::util::{errno, in_bounds};

/// The host page size, the granularity of mmap.
pub(crate) fn page_size() -> u64 {
    // SAFETY: sysconf has no memory-safety preconditions.
    let size = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    u64::try_from(size)
        .ok()
        .filter(|s| s.is_power_of_two())
        .unwrap_or(4096)
}

/// The ranges of a BAR to mmap: the kernel's sparse areas (or the whole BAR) minus the pages
/// holding MSI-X structures, so that accesses to those stay trapped.
pub fn mmap_plan(
    info: &RegionInfo,
    msix: Option<&MsixCapability>,
    page_size: u64,
) -> Vec<Range<u64>> {
    if !info.flags.mmap || info.size == 0 {
        return Vec::new();
    }
    let mut areas: Vec<Range<u64>> = match &info.sparse_mmap {
        Some(sparse) => sparse
            .iter()
            .filter_map(|a| {
                let end = a.offset.checked_add(a.size)?.min(info.size);
                (a.offset < end).then_some(a.offset..end)
            })
            .collect(),
        None => std::iter::once(0..info.size).collect(),
    };
    let holes = msix
        .into_iter()
        .flat_map(|cap| [cap.table, cap.pba])
        .filter(|s| s.bar == info.index && s.size > 0)
        .map(|s| {
            let start = s.offset & !(page_size - 1);
            let end = s
                .offset
                .saturating_add(s.size)
                .saturating_add(page_size - 1)
                & !(page_size - 1);
            start..end
        });
    for hole in holes {
        areas = areas
            .into_iter()
            .flat_map(|a| {
                let below = a.start..a.end.min(hole.start);
                let above = a.start.max(hole.end)..a.end;
                [below, above]
            })
            .filter(|a| a.start < a.end)
            .collect();
    }
    areas
}

/// A BAR of an assigned device, with its mappable parts mapped. Mappings are removed on drop.
pub struct MappedBar<B: VfioBackend> {
    address: PciAddress,
    backend: Arc<B>,
    index: u32,
    size: u64,
    areas: Vec<(u64, MmapArea)>,
}

impl<B: VfioBackend> std::fmt::Debug for MappedBar<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MappedBar")
            .field("address", &self.address)
            .field("index", &self.index)
            .field("size", &self.size)
            .field("mapped", &self.mapped_ranges())
            .finish_non_exhaustive()
    }
}

impl<B: VfioBackend> AssignedDevice<B> {
    /// Maps BAR `bar` (0-5), keeping the MSI-X table and PBA pages unmapped.
    ///
    /// Uses the kernel's sparse-mmap areas when it reports them, and the MSI-X capability in
    /// config space to find the table either way. A BAR the kernel does not allow to be mapped
    /// yields a [`MappedBar`] whose accesses are all trapped.
    pub fn map_bar(&self, bar: u32) -> Result<MappedBar<B>> {
        if bar >= BAR_COUNT {
            return Err(AssignError::NotABar {
                address: self.address,
                index: bar,
            });
        }
        let index = BAR0_REGION_INDEX + bar;
        let info = self.region_info(index)?;
        let msix = self.msix_capability()?;
        let mut areas = Vec::new();
        for range in mmap_plan(&info, msix.as_ref(), page_size()) {
            let len = range.end - range.start;
            let mapping = usize::try_from(len)
                .map_err(|_| errno(libc::EOVERFLOW))
                .and_then(|len| self.backend.region_mmap(index, range.start, len))
                .map_err(|source| AssignError::RegionMmap {
                    address: self.address,
                    index,
                    offset: range.start,
                    len,
                    source,
                })?;
            areas.push((range.start, mapping));
        }
        log::debug!(
            "{}: BAR{bar} ({:#x} bytes) mapped at {:?}",
            self.address,
            info.size,
            areas
                .iter()
                .map(|(o, m)| *o..*o + m.len() as u64)
                .collect::<Vec<_>>()
        );
        Ok(MappedBar {
            address: self.address,
            backend: Arc::clone(&self.backend),
            index,
            size: info.size,
            areas,
        })
    }
}

impl<B: VfioBackend> MappedBar<B> {
    /// VFIO region index of this BAR.
    pub fn region_index(&self) -> u32 {
        self.index
    }

    /// Size of the BAR in bytes.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// The BAR offsets that are mapped; accesses elsewhere are trapped.
    pub fn mapped_ranges(&self) -> Vec<Range<u64>> {
        self.areas
            .iter()
            .map(|(offset, m)| *offset..*offset + m.len() as u64)
            .collect()
    }

    /// Whether `[offset, offset + len)` is served by a mapping rather than trapped.
    pub fn is_mapped(&self, offset: u64, len: u64) -> bool {
        self.mapping_for(offset, len).is_some()
    }

    /// Reads the 32-bit register at `offset` (4-byte aligned).
    pub fn read_u32(&self, offset: u64) -> Result<u32> {
        self.read_raw::<u32>(offset).map(u32::from_le)
    }

    /// Writes the 32-bit register at `offset` (4-byte aligned).
    pub fn write_u32(&self, offset: u64, value: u32) -> Result<()> {
        self.write_raw(offset, value.to_le())
    }

    /// Reads the 64-bit register at `offset` (8-byte aligned).
    pub fn read_u64(&self, offset: u64) -> Result<u64> {
        self.read_raw::<u64>(offset).map(u64::from_le)
    }

    /// Writes the 64-bit register at `offset` (8-byte aligned).
    pub fn write_u64(&self, offset: u64, value: u64) -> Result<()> {
        self.write_raw(offset, value.to_le())
    }

    /// Reads a register in device byte order (the caller converts from little endian).
    fn read_raw<T: ByteValued + Default>(&self, offset: u64) -> Result<T> {
        let width = std::mem::size_of::<T>();
        self.check_access(offset, width as u64)?;
        if let Some(ptr) = self.mapping_for(offset, width as u64) {
            // SAFETY: `mapping_for` guarantees `width` bytes at `ptr` lie inside a live shared
            // mapping owned by `self`; `check_access` made the offset width-aligned and mappings
            // start page aligned, so `ptr` is aligned for T. No Rust reference into the mapping
            // exists, and one volatile access is exactly one MMIO access of the register width.
            return Ok(unsafe { std::ptr::read_volatile(ptr.cast::<T>()) });
        }
        let mut value = T::default();
        self.backend
            .region_read(self.index, offset, value.as_mut_slice())
            .map_err(|source| {
                AssignError::region_io(self.address, self.index, "read", offset, width, source)
            })?;
        Ok(value)
    }

    /// Writes a register already in device byte order.
    fn write_raw<T: ByteValued>(&self, offset: u64, value: T) -> Result<()> {
        let width = std::mem::size_of::<T>();
        self.check_access(offset, width as u64)?;
        if let Some(ptr) = self.mapping_for(offset, width as u64) {
            // SAFETY: as in `read_raw`: in bounds of a live mapping owned by `self`, aligned,
            // and only ever accessed through raw pointers.
            unsafe { std::ptr::write_volatile(ptr.cast::<T>(), value) };
            return Ok(());
        }
        self.backend
            .region_write(self.index, offset, value.as_slice())
            .map_err(|source| {
                AssignError::region_io(self.address, self.index, "write", offset, width, source)
            })
    }

    fn check_access(&self, offset: u64, width: u64) -> Result<()> {
        if !offset.is_multiple_of(width) {
            return Err(AssignError::MisalignedAccess {
                address: self.address,
                index: self.index,
                offset,
                width,
            });
        }
        if in_bounds(offset, width, self.size) {
            Ok(())
        } else {
            Err(AssignError::RegionOutOfBounds {
                address: self.address,
                index: self.index,
                offset,
                len: width,
                size: self.size,
            })
        }
    }

    /// The host address of `[offset, offset + len)` if one mapping covers all of it.
    fn mapping_for(&self, offset: u64, len: u64) -> Option<*mut u8> {
        self.areas.iter().find_map(|(start, mapping)| {
            let within = offset.checked_sub(*start)?;
            // `wrapping_add` stays in bounds here: `within + len <= mapping.len()`.
            in_bounds(within, len, mapping.len() as u64)
                .then(|| mapping.as_ptr().wrapping_add(within as usize))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::vfio::config::MsixStructure;
    use crate::vfio::types::{RegionFlags, SparseMmapArea};

    fn bar(size: u64, mmap: bool, sparse: Option<Vec<SparseMmapArea>>) -> RegionInfo {
        RegionInfo {
            index: 0,
            size,
            file_offset: 0,
            flags: RegionFlags {
                read: true,
                write: true,
                mmap,
            },
            sparse_mmap: sparse,
            msix_mappable: false,
        }
    }

    fn msix(table_bar: u32, table: u64, pba: u64) -> MsixCapability {
        MsixCapability {
            cap_offset: 0x50,
            vectors: 4,
            table: MsixStructure {
                bar: table_bar,
                offset: table,
                size: 64,
            },
            pba: MsixStructure {
                bar: table_bar,
                offset: pba,
                size: 8,
            },
        }
    }

    #[test]
    fn table_and_pba_sharing_a_page_leave_one_hole() {
        let plan = mmap_plan(
            &bar(0x4000, true, None),
            Some(&msix(0, 0x2000, 0x2800)),
            4096,
        );
        assert_eq!(plan, vec![0..0x2000, 0x3000..0x4000]);
    }

    #[test]
    fn msix_in_another_bar_leaves_this_one_whole() {
        let plan = mmap_plan(
            &bar(0x4000, true, None),
            Some(&msix(2, 0x2000, 0x2800)),
            4096,
        );
        assert_eq!(plan.as_slice(), std::slice::from_ref(&(0..0x4000)));
    }

    #[test]
    fn unmappable_or_empty_bars_map_nothing() {
        assert!(mmap_plan(&bar(0x4000, false, None), None, 4096).is_empty());
        assert!(mmap_plan(&bar(0, true, None), None, 4096).is_empty());
    }

    #[test]
    fn sparse_areas_are_clamped_to_the_region() {
        let sparse = vec![
            SparseMmapArea {
                offset: 0x3000,
                size: 0x4000,
            },
            SparseMmapArea {
                offset: u64::MAX,
                size: 2,
            },
        ];
        assert_eq!(
            mmap_plan(&bar(0x4000, true, Some(sparse)), None, 4096),
            vec![0x3000..0x4000]
        );
    }
}
