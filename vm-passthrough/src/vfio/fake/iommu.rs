//! An IOMMU that translates only IOVAs that are currently mapped, with the map/unmap rules of
//! the kernel's type1 backend (page granular, no overlaps, no partial unmaps).

use std::collections::BTreeMap;
use std::io;

use vm_memory::VolatileSlice;

use crate::vfio::util::errno;

const IOMMU_PAGE_SIZE: u64 = 4096;

#[derive(Clone, Copy)]
struct Mapping {
    size: u64,
    host_addr: *mut u8,
}

// SAFETY: a Mapping is only the address of memory that `FakeIommu::map`'s caller keeps alive
// while mapped; it is dereferenced only under the fake's lock, through volatile copies.
unsafe impl Send for Mapping {}

/// IOVA → host address translations, keyed by first IOVA.
#[derive(Default)]
pub(crate) struct FakeIommu {
    mappings: BTreeMap<u64, Mapping>,
}

impl FakeIommu {
    /// Adds `[iova, iova + size)` → `host_addr`.
    ///
    /// # Safety
    ///
    /// `[host_addr, host_addr + size)` must stay allocated, and free of Rust references, until
    /// it is unmapped: [`Self::dma_read`]/[`Self::dma_write`] access it.
    pub(crate) unsafe fn map(
        &mut self,
        iova: u64,
        size: u64,
        host_addr: *mut u8,
    ) -> io::Result<()> {
        let end = iova.checked_add(size).ok_or_else(|| errno(libc::EINVAL))?;
        if size == 0
            || !iova.is_multiple_of(IOMMU_PAGE_SIZE)
            || !size.is_multiple_of(IOMMU_PAGE_SIZE)
            || host_addr.is_null()
        {
            return Err(errno(libc::EINVAL));
        }
        let overlaps = self
            .mappings
            .range(..end)
            .next_back()
            .is_some_and(|(start, m)| start + m.size > iova);
        if overlaps {
            return Err(errno(libc::EEXIST));
        }
        self.mappings.insert(iova, Mapping { size, host_addr });
        Ok(())
    }

    /// Removes the mappings inside `[iova, iova + size)`; like type1v2, refuses (EINVAL) to cut
    /// a mapping in two and treats a range that covers no mapping as an error.
    pub(crate) fn unmap(&mut self, iova: u64, size: u64) -> io::Result<()> {
        let end = iova.checked_add(size).ok_or_else(|| errno(libc::EINVAL))?;
        let bisects = |(start, m): (&u64, &Mapping)| {
            *start < iova && start + m.size > iova || *start < end && start + m.size > end
        };
        if self.mappings.iter().any(bisects) {
            return Err(errno(libc::EINVAL));
        }
        let inside: Vec<u64> = self
            .mappings
            .range(iova..end)
            .map(|(start, _)| *start)
            .collect();
        if inside.is_empty() {
            return Err(errno(libc::EINVAL));
        }
        for start in inside {
            self.mappings.remove(&start);
        }
        Ok(())
    }

    /// The mapped ranges as `(iova, size)`, in IOVA order.
    pub(crate) fn mappings(&self) -> Vec<(u64, u64)> {
        self.mappings
            .iter()
            .map(|(iova, m)| (*iova, m.size))
            .collect()
    }

    /// Host memory behind `[iova, iova + len)`, piece by piece; `Err(first untranslatable IOVA)`
    /// if any byte is unmapped.
    fn translate(&self, iova: u64, len: u64) -> Result<Vec<VolatileSlice<'_>>, u64> {
        let mut pieces = Vec::new();
        let mut at = iova;
        let end = iova.checked_add(len).ok_or(iova)?;
        while at < end {
            let (start, m) = self.mappings.range(..=at).next_back().ok_or(at)?;
            let within = at - start;
            if within >= m.size {
                return Err(at);
            }
            let piece = (m.size - within).min(end - at);
            // SAFETY: `within + piece <= m.size`, and `map`'s contract keeps the mapped host
            // range allocated and reference-free while it is in the table; the slice does not
            // outlive `&self`, and the table cannot change while `&self` is borrowed.
            pieces.push(unsafe {
                VolatileSlice::new(m.host_addr.add(within as usize), piece as usize)
            });
            at += piece;
        }
        Ok(pieces)
    }

    /// Device read of `buf.len()` bytes at `iova`; nothing is read unless all of it is mapped.
    pub(crate) fn dma_read(&self, iova: u64, buf: &mut [u8]) -> Result<(), u64> {
        let mut done = 0;
        for piece in self.translate(iova, buf.len() as u64)? {
            done += piece.copy_to(&mut buf[done..]);
        }
        Ok(())
    }

    /// Device write of `data` at `iova`; nothing is written unless all of it is mapped.
    pub(crate) fn dma_write(&self, iova: u64, data: &[u8]) -> Result<(), u64> {
        let mut done = 0;
        for piece in self.translate(iova, data.len() as u64)? {
            let len = piece.len();
            piece.copy_from(&data[done..done + len]);
            done += len;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn map_rules_follow_type1() {
        let mut memory = vec![0u8; 0x3000];
        let host = memory.as_mut_ptr();
        let mut iommu = FakeIommu::default();
        // SAFETY: `memory` outlives `iommu` and is not referenced while mapped.
        unsafe {
            iommu.map(0x10000, 0x2000, host).unwrap();
            assert_eq!(
                iommu.map(0x11000, 0x1000, host).unwrap_err().raw_os_error(),
                Some(libc::EEXIST)
            );
            assert_eq!(
                iommu.map(0xf000, 0x2000, host).unwrap_err().raw_os_error(),
                Some(libc::EEXIST)
            );
            assert_eq!(
                iommu.map(0x20800, 0x1000, host).unwrap_err().raw_os_error(),
                Some(libc::EINVAL)
            );
            iommu.map(0x12000, 0x1000, host.add(0x2000)).unwrap();
        }
        assert_eq!(
            iommu.unmap(0x11000, 0x1000).unwrap_err().raw_os_error(),
            Some(libc::EINVAL)
        );
        assert_eq!(
            iommu.unmap(0x40000, 0x1000).unwrap_err().raw_os_error(),
            Some(libc::EINVAL)
        );
        // A read spanning both mappings works; one byte past the end faults at that IOVA.
        let mut buf = [0u8; 0x2000];
        assert_eq!(iommu.dma_read(0x11000, &mut buf), Ok(()));
        assert_eq!(iommu.dma_read(0x12800, &mut buf), Err(0x13000));
        iommu.unmap(0x10000, 0x3000).unwrap();
        assert!(iommu.mappings().is_empty());
        drop(memory);
    }
}
