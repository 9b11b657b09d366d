//! Guest memory made reachable by device DMA: each region of a [`GuestMemoryMmap`] is mapped in
//! the IOMMU domain of a [`Container`] at IOVA = guest physical address, for every device in the
//! container at once, tracked, and unmapped explicitly or on drop.

use std::any::Any;
use std::mem::ManuallyDrop;
use std::sync::Arc;

use vm_memory::{
    Address, GuestMemoryBackend, GuestMemoryMmap, GuestMemoryRegion, MemoryRegionAddress,
};

use crate::vfio::backend::DmaBackend;
use crate::vfio::container::Container;
use crate::vfio::error::{AssignError, Result};

/// One IOVA range mapped for DMA.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DmaRange {
    /// First IOVA (= guest physical address).
    pub iova: u64,
    /// Length in bytes.
    pub size: u64,
}

/// The IOMMU mappings of one guest memory in one container, used by every device in it.
/// Dropping it unmaps whatever is still mapped.
///
/// It holds a clone of the guest memory (the regions are reference counted), so the host
/// memory the devices may DMA into cannot be freed while it is still mapped. It also keeps the
/// devices that were open in the container when it was made open (their files stay open until
/// it is gone), because the kernel tears the IOMMU domain down with the last group that leaves
/// the container, and the mappings must be removed from it first.
pub struct DmaMappings<D: DmaBackend> {
    container: Container<D>,
    mapped: Vec<DmaRange>,
    // Released in `Drop::drop` only once nothing is mapped any more.
    memory: ManuallyDrop<GuestMemoryMmap>,
    // Dropped after `Drop::drop` has unmapped everything.
    _devices: Vec<Arc<dyn Any + Send + Sync>>,
}

impl<D: DmaBackend> std::fmt::Debug for DmaMappings<D> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DmaMappings")
            .field("container", &self.container)
            .field("mapped", &self.mapped)
            .finish_non_exhaustive()
    }
}

impl<D: DmaBackend> Container<D> {
    /// Maps every region of `memory` for DMA at IOVA = guest physical address, once for all the
    /// devices of the container (and any opened in it later).
    ///
    /// Fails with [`AssignError::EmptyContainer`] before any device is open in the container
    /// (VFIO sets the IOMMU up when the first group joins). All or nothing: if one region fails
    /// (overlap with an existing mapping → `EEXIST`, ...), the regions mapped so far are unmapped
    /// again and the error names the container and the failing range.
    pub fn map_guest_memory(&self, memory: &GuestMemoryMmap) -> Result<DmaMappings<D>> {
        let devices = self.open_devices();
        if devices.is_empty() {
            return Err(AssignError::EmptyContainer);
        }
        let mut mappings = DmaMappings {
            container: self.clone(),
            mapped: Vec::new(),
            memory: ManuallyDrop::new(memory.clone()),
            _devices: devices,
        };
        for region in memory.iter() {
            let iova = region.start_addr().raw_value();
            let size = region.len();
            let host_addr = region
                .get_host_address(MemoryRegionAddress(0))
                .map_err(|source| AssignError::GuestMemory {
                    container: self.members(),
                    gpa: iova,
                    source,
                })?;
            // On error, dropping `mappings` unmaps the regions mapped so far (all or nothing).
            // SAFETY: the region belongs to `mappings.memory`, a clone holding a reference on
            // the region's mmap, so the host range stays allocated until `mappings` is dropped,
            // and `DmaMappings::drop` unmaps it from the IOMMU before that clone goes away.
            // vm-memory never hands out Rust references to guest memory (only volatile slices),
            // so device writes cannot alias a live reference.
            unsafe { self.dma_backend().dma_map(iova, size, host_addr) }.map_err(|source| {
                AssignError::DmaMap {
                    container: self.members(),
                    iova,
                    size,
                    source,
                }
            })?;
            log::debug!(
                "{}: DMA mapped IOVA {iova:#x} (+{size:#x}) -> {host_addr:p}",
                self.members()
            );
            mappings.mapped.push(DmaRange { iova, size });
        }
        Ok(mappings)
    }
}

impl<D: DmaBackend> DmaMappings<D> {
    /// The container the memory is mapped in.
    pub fn container(&self) -> &Container<D> {
        &self.container
    }

    /// The ranges currently mapped.
    pub fn ranges(&self) -> &[DmaRange] {
        &self.mapped
    }

    /// Unmaps everything, reporting the first failure (the remaining ranges are still tried;
    /// ranges that failed are retried once more on drop).
    pub fn unmap(mut self) -> Result<()> {
        self.unmap_all()
    }

    fn unmap_all(&mut self) -> Result<()> {
        let mut first_error = None;
        let mut still_mapped = Vec::new();
        for range in std::mem::take(&mut self.mapped) {
            match self
                .container
                .dma_backend()
                .dma_unmap(range.iova, range.size)
            {
                Ok(()) => log::debug!(
                    "{}: DMA unmapped IOVA {:#x} (+{:#x})",
                    self.container.members(),
                    range.iova,
                    range.size
                ),
                Err(source) => {
                    still_mapped.push(range);
                    first_error.get_or_insert(AssignError::DmaUnmap {
                        container: self.container.members(),
                        iova: range.iova,
                        size: range.size,
                        source,
                    });
                }
            }
        }
        self.mapped = still_mapped;
        first_error.map_or(Ok(()), Err)
    }
}

impl<D: DmaBackend> Drop for DmaMappings<D> {
    fn drop(&mut self) {
        match self.unmap_all() {
            // SAFETY: nothing is mapped any more, so the device can no longer reach the memory
            // and our reference to it may go; `memory` is not used after this.
            Ok(()) => unsafe { ManuallyDrop::drop(&mut self.memory) },
            Err(e) => {
                // The device may still reach these pages: leak our reference rather than let
                // the memory be freed under a live IOMMU mapping.
                log::error!(
                    "{e}; leaking the guest memory of {} range(s) still mapped",
                    self.mapped.len()
                );
            }
        }
    }
}
