//! PCI configuration space through the VFIO config region: typed accessors, bus mastering and
//! the MSI-X capability (where the MSI-X table and PBA live, so BAR mappings can avoid them).

use crate::vfio::backend::VfioBackend;
use crate::vfio::device::AssignedDevice;
use crate::vfio::error::Result;
use crate::vfio::types::{BAR_COUNT, CONFIG_REGION_INDEX};

/// Offset of the command register.
pub const PCI_COMMAND: u16 = 0x04;
/// Command register bit that lets the device initiate DMA. vfio-pci leaves it clear: the user
/// must set it before the device can reach the IOMMU-mapped memory.
pub const PCI_COMMAND_MASTER: u16 = 0x4;
const PCI_STATUS: u16 = 0x06;
const PCI_STATUS_CAP_LIST: u16 = 0x10;
const PCI_CAPABILITY_LIST: u16 = 0x34;
const PCI_CAP_ID_MSIX: u8 = 0x11;
/// Standard capabilities live in the first 256 bytes; each takes at least 4, so a longer chain
/// is a loop in broken or hostile config space.
const MAX_CAPABILITIES: usize = 48;

/// Where one MSI-X structure (table or PBA) lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MsixStructure {
    /// Region index of the BAR that holds it.
    pub bar: u32,
    /// Offset within that BAR.
    pub offset: u64,
    /// Size in bytes.
    pub size: u64,
}

/// The device's MSI-X capability, decoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MsixCapability {
    /// Offset of the capability in config space.
    pub cap_offset: u16,
    /// Number of vectors (table entries).
    pub vectors: u16,
    /// The vector table (16 bytes per entry).
    pub table: MsixStructure,
    /// The pending bit array (one bit per vector, in 64-bit words).
    pub pba: MsixStructure,
}

impl MsixCapability {
    /// Decodes the capability from its message control word and table/PBA dwords.
    fn decode(cap_offset: u16, control: u16, table: u32, pba: u32) -> Option<Self> {
        let vectors = (control & 0x7ff) + 1;
        let structure = |dword: u32, size: u64| {
            let bar = dword & 0x7;
            (bar < BAR_COUNT).then_some(MsixStructure {
                bar,
                offset: u64::from(dword & !0x7),
                size,
            })
        };
        Some(MsixCapability {
            cap_offset,
            vectors,
            table: structure(table, u64::from(vectors) * 16)?,
            pba: structure(pba, u64::from(vectors).div_ceil(64) * 8)?,
        })
    }
}

impl<B: VfioBackend> AssignedDevice<B> {
    /// Reads the config byte at `offset`.
    pub fn config_read_u8(&self, offset: u16) -> Result<u8> {
        Ok(self.config_read::<1>(offset)?[0])
    }

    /// Reads the little-endian config word at `offset`.
    pub fn config_read_u16(&self, offset: u16) -> Result<u16> {
        Ok(u16::from_le_bytes(self.config_read(offset)?))
    }

    /// Reads the little-endian config dword at `offset`.
    pub fn config_read_u32(&self, offset: u16) -> Result<u32> {
        Ok(u32::from_le_bytes(self.config_read(offset)?))
    }

    /// Writes the config byte at `offset`.
    pub fn config_write_u8(&self, offset: u16, value: u8) -> Result<()> {
        self.write_region(CONFIG_REGION_INDEX, u64::from(offset), &[value])
    }

    /// Writes the little-endian config word at `offset`.
    pub fn config_write_u16(&self, offset: u16, value: u16) -> Result<()> {
        self.write_region(CONFIG_REGION_INDEX, u64::from(offset), &value.to_le_bytes())
    }

    /// Writes the little-endian config dword at `offset`.
    pub fn config_write_u32(&self, offset: u16, value: u32) -> Result<()> {
        self.write_region(CONFIG_REGION_INDEX, u64::from(offset), &value.to_le_bytes())
    }

    /// Sets the bus-master bit in the command register so the device may DMA.
    pub fn enable_bus_master(&self) -> Result<()> {
        let command = self.config_read_u16(PCI_COMMAND)?;
        if command & PCI_COMMAND_MASTER == 0 {
            self.config_write_u16(PCI_COMMAND, command | PCI_COMMAND_MASTER)?;
            log::debug!("{}: bus mastering enabled", self.address);
        }
        Ok(())
    }

    /// Finds and decodes the MSI-X capability; `None` when the device has none (or its
    /// capability names a BAR that does not exist).
    pub fn msix_capability(&self) -> Result<Option<MsixCapability>> {
        let Some(cap_offset) = self.find_capability(PCI_CAP_ID_MSIX)? else {
            return Ok(None);
        };
        let control = self.config_read_u16(cap_offset + 2)?;
        let table = self.config_read_u32(cap_offset + 4)?;
        let pba = self.config_read_u32(cap_offset + 8)?;
        Ok(MsixCapability::decode(cap_offset, control, table, pba))
    }

    /// Walks the standard capability list; bounded so a malformed list cannot loop forever.
    fn find_capability(&self, wanted: u8) -> Result<Option<u16>> {
        if self.config_read_u16(PCI_STATUS)? & PCI_STATUS_CAP_LIST == 0 {
            return Ok(None);
        }
        let mut pointer = self.config_read_u8(PCI_CAPABILITY_LIST)? & !0x3;
        for _ in 0..MAX_CAPABILITIES {
            if pointer < 0x40 {
                break;
            }
            let offset = u16::from(pointer);
            if self.config_read_u8(offset)? == wanted {
                return Ok(Some(offset));
            }
            pointer = self.config_read_u8(offset + 1)? & !0x3;
        }
        Ok(None)
    }

    fn config_read<const N: usize>(&self, offset: u16) -> Result<[u8; N]> {
        let mut bytes = [0u8; N];
        self.read_region(CONFIG_REGION_INDEX, u64::from(offset), &mut bytes)?;
        Ok(bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn msix_decode_splits_bir_and_offset() {
        let cap = MsixCapability::decode(0x50, 0x0007, 0x0000_8002, 0x0000_9002).unwrap();
        assert_eq!(cap.vectors, 8);
        assert_eq!(
            cap.table,
            MsixStructure {
                bar: 2,
                offset: 0x8000,
                size: 128
            }
        );
        assert_eq!(
            cap.pba,
            MsixStructure {
                bar: 2,
                offset: 0x9000,
                size: 8
            }
        );
    }

    #[test]
    fn msix_decode_rejects_bir_beyond_bar5() {
        assert_eq!(
            MsixCapability::decode(0x50, 0, 0x0000_1006, 0x0000_2000),
            None
        );
    }
}
