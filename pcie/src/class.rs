//! PCI class codes and the names the `pci-ids` database gives them.

use std::fmt;

use pci_ids::FromId;

/// The 24-bit class code: base class, subclass, programming interface.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ClassCode(pub u32);

impl ClassCode {
    /// Base class: display controllers (GPUs).
    pub const DISPLAY: u8 = 0x03;
    /// Base class: mass storage controllers.
    pub const STORAGE: u8 = 0x01;
    /// Base class: network controllers.
    pub const NETWORK: u8 = 0x02;
    /// Base class: multimedia controllers (audio).
    pub const MULTIMEDIA: u8 = 0x04;
    /// Base class: bridges.
    pub const BRIDGE: u8 = 0x06;
    /// Base class: serial bus controllers (USB, SMBus, UCSI).
    pub const SERIAL_BUS: u8 = 0x0c;

    /// The base class (top byte).
    pub fn base(&self) -> u8 {
        (self.0 >> 16) as u8
    }
    /// The subclass (middle byte).
    pub fn sub(&self) -> u8 {
        (self.0 >> 8) as u8
    }
    /// The programming interface (low byte).
    pub fn prog_if(&self) -> u8 {
        self.0 as u8
    }

    /// PCI-to-PCI bridges and root/switch ports: the kernel's VFIO group rule ignores them.
    pub fn is_pci_bridge(&self) -> bool {
        self.base() == Self::BRIDGE && matches!(self.sub(), 0x04 | 0x09)
    }

    /// Host bridges are not endpoints either; no driver ever claims them for I/O.
    pub fn is_host_bridge(&self) -> bool {
        self.base() == Self::BRIDGE && self.sub() == 0x00
    }

    /// Name of the subclass (or base class) from the PCI ID database.
    pub fn name(&self) -> Option<&'static str> {
        pci_ids::Subclass::from_cid_sid(self.base(), self.sub())
            .map(|s| s.name())
            .or_else(|| pci_ids::Class::from_id(self.base()).map(|c| c.name()))
    }
}

impl fmt::Display for ClassCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:06x}", self.0)
    }
}

impl serde::Serialize for ClassCode {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

/// The vendor's name from the PCI ID database.
pub fn vendor_name(vendor: u16) -> Option<&'static str> {
    pci_ids::Vendor::from_id(vendor).map(|v| v.name())
}

/// The device's name from the PCI ID database.
pub fn device_name(vendor: u16, device: u16) -> Option<&'static str> {
    pci_ids::Device::from_vid_pid(vendor, device).map(|d| d.name())
}

/// The subsystem's name from the PCI ID database.
pub fn subsystem_name(
    vendor: u16,
    device: u16,
    subsystem_vendor: u16,
    subsystem_device: u16,
) -> Option<&'static str> {
    pci_ids::Device::from_vid_pid(vendor, device)?
        .subsystems()
        .find(|s| s.subvendor() == subsystem_vendor && s.subdevice() == subsystem_device)
        .map(|s| s.name())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_and_names_classes() {
        let c = ClassCode(0x030200);
        assert_eq!((c.base(), c.sub(), c.prog_if()), (3, 2, 0));
        assert_eq!(c.name(), Some("3D controller"));
        assert_eq!(c.to_string(), "030200");
        assert!(ClassCode(0x060400).is_pci_bridge());
        assert!(!ClassCode(0x068000).is_pci_bridge());
        assert!(ClassCode(0x060000).is_host_bridge());
    }

    #[test]
    fn names_from_database() {
        assert_eq!(vendor_name(0x10de), Some("NVIDIA Corporation"));
        assert!(device_name(0x10de, 0x2330).unwrap().contains("H100"));
        assert_eq!(vendor_name(0x0000), None);
    }
}
