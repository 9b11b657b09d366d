//! The types shared by the whole `vfio` module: what VFIO reports about a device (regions,
//! interrupts, device flags), the interrupt kinds, and the name of a container in messages.
//! A leaf: it uses nothing else of the crate, so every other module (the backend traits, the
//! error type, the container, the devices) can use it without an import cycle.

use std::collections::BTreeMap;
use std::fmt;

use pcie::PciAddress;
use vfio_bindings::bindings::vfio::{
    VFIO_PCI_INTX_IRQ_INDEX, VFIO_PCI_MSIX_IRQ_INDEX, VFIO_PCI_MSI_IRQ_INDEX,
};

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

/// The PCI interrupt mechanisms VFIO can forward. Only one can be enabled at a time.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum IrqKind {
    /// Legacy level-triggered INTx; VFIO masks it after each delivery until unmasked.
    Intx,
    /// Message Signalled Interrupts.
    Msi,
    /// MSI-X.
    Msix,
}

impl IrqKind {
    /// The VFIO interrupt index of this kind.
    pub fn vfio_index(self) -> u32 {
        match self {
            IrqKind::Intx => VFIO_PCI_INTX_IRQ_INDEX,
            IrqKind::Msi => VFIO_PCI_MSI_IRQ_INDEX,
            IrqKind::Msix => VFIO_PCI_MSIX_IRQ_INDEX,
        }
    }
}

impl fmt::Display for IrqKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            IrqKind::Intx => "INTx",
            IrqKind::Msi => "MSI",
            IrqKind::Msix => "MSI-X",
        })
    }
}

/// The devices of a container and their IOMMU groups, in address order; errors about the
/// container's DMA mappings name it by them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ContainerMembers(pub Vec<(PciAddress, u32)>);

impl ContainerMembers {
    /// The devices' addresses.
    pub fn addresses(&self) -> Vec<PciAddress> {
        self.0.iter().map(|(address, _)| *address).collect()
    }
}

impl fmt::Display for ContainerMembers {
    /// `VFIO container of group 5 (0000:01:01.0, 0000:01:02.0)`,
    /// `VFIO container of groups 5 (0000:01:01.0), 7 (0000:02:00.0)`, or
    /// `empty VFIO container`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut groups: BTreeMap<u32, Vec<String>> = BTreeMap::new();
        for (address, group) in &self.0 {
            groups.entry(*group).or_default().push(address.to_string());
        }
        if groups.is_empty() {
            return f.write_str("empty VFIO container");
        }
        let plural = if groups.len() == 1 { "" } else { "s" };
        let list: Vec<String> = groups
            .iter()
            .map(|(group, devices)| format!("{group} ({})", devices.join(", ")))
            .collect();
        write!(f, "VFIO container of group{plural} {}", list.join(", "))
    }
}
