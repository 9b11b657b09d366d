//! IOMMU state and IOMMU groups.

use std::fmt;

use crate::address::PciAddress;
use crate::device::PciDevice;
use crate::error::{Error, Result};
use crate::sysfs::{self, list_dir, read_optional_attr, Sysfs};

/// Drivers that leave a device harmless to the rest of its group: the kernel
/// lets a group be used through VFIO when every endpoint is on one of these or
/// has no driver.
pub const VFIO_SAFE_DRIVERS: [&str; 2] = ["vfio-pci", "pci-stub"];

/// Whether MSI/MSI-X writes from devices are remapped by the IOMMU. Without it a
/// guest-controlled device can inject arbitrary interrupts into the host.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum InterruptRemapping {
    /// MSI irq chips carry the `IR-` prefix.
    Enabled,
    /// The host has MSI irq chips, none remapped, or the IOMMU lacks the feature.
    Disabled,
    /// Nothing in sysfs tells.
    Unknown,
}

/// The host's IOMMU as sysfs shows it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct IommuState {
    /// IOMMU units under `class/iommu` (`dmar0`, `ivhd0`, ...).
    pub units: Vec<String>,
    /// Number of IOMMU groups under `kernel/iommu_groups`.
    pub group_count: usize,
    /// Whether MSIs are remapped.
    pub interrupt_remapping: InterruptRemapping,
    /// `vfio_iommu_type1.allow_unsafe_interrupts`, when the module is loaded.
    pub allow_unsafe_interrupts: Option<bool>,
}

impl IommuState {
    /// Translation is on when the kernel has formed groups: with `iommu=off` or no
    /// IOMMU unit there are none.
    pub fn enabled(&self) -> bool {
        self.group_count > 0
    }

    /// Reads the IOMMU state of the tree.
    pub fn read(sysfs: &Sysfs) -> Result<Self> {
        let units = list_dir(&sysfs.path("class/iommu"))?;
        let group_count = list_dir(&sysfs.path("kernel/iommu_groups"))?.len();
        let allow_path = sysfs.path("module/vfio_iommu_type1/parameters/allow_unsafe_interrupts");
        let allow_unsafe_interrupts = read_optional_attr(&allow_path)?
            .map(|v| match v.as_str() {
                "Y" | "1" => Ok(true),
                "N" | "0" => Ok(false),
                _ => Err(Error::parse(&allow_path, &v, "Y or N")),
            })
            .transpose()?;
        Ok(Self {
            interrupt_remapping: read_interrupt_remapping(sysfs, &units)?,
            units,
            group_count,
            allow_unsafe_interrupts,
        })
    }
}

/// Intel VT-d extended capability bit 3: interrupt remapping supported.
const INTEL_ECAP_IR: u64 = 1 << 3;

fn read_interrupt_remapping(sysfs: &Sysfs, units: &[String]) -> Result<InterruptRemapping> {
    // The irq chip names show what the kernel actually does: "IR-PCI-MSIX-..." when
    // remapped, "PCI-MSIX-..." when not.
    let irq_dir = sysfs.path("kernel/irq");
    let mut saw_msi = false;
    for irq in list_dir(&irq_dir)? {
        let path = irq_dir.join(&irq).join("chip_name");
        let Some(chip) = read_optional_attr(&path)? else {
            continue;
        };
        if chip.starts_with("IR-") {
            return Ok(InterruptRemapping::Enabled);
        }
        saw_msi |= chip.contains("MSI");
    }
    if saw_msi {
        return Ok(InterruptRemapping::Disabled);
    }
    // No MSI in use yet: fall back to what the hardware offers.
    for unit in units {
        let path = sysfs
            .path("class/iommu")
            .join(unit)
            .join("intel-iommu/ecap");
        if let Some(value) = read_optional_attr(&path)? {
            let ecap = u64::from_str_radix(value.trim_start_matches("0x"), 16).map_err(|_| {
                Error::parse(&path, &value, "a hex VT-d extended capability register")
            })?;
            if ecap & INTEL_ECAP_IR == 0 {
                return Ok(InterruptRemapping::Disabled);
            }
        }
    }
    Ok(InterruptRemapping::Unknown)
}

/// One IOMMU group: the smallest set of devices the IOMMU can isolate.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct IommuGroup {
    /// The group number.
    pub id: u32,
    /// Its members, bridges included, sorted.
    pub devices: Vec<PciAddress>,
}

impl IommuGroup {
    /// Reads group `id`.
    pub fn read(sysfs: &Sysfs, id: u32) -> Result<Self> {
        let dir = sysfs.path(format!("kernel/iommu_groups/{id}"));
        if !sysfs::exists(&dir)? {
            return Err(Error::GroupNotFound {
                group: id,
                path: dir,
            });
        }
        let devices_dir = dir.join("devices");
        let mut devices = Vec::new();
        for name in list_dir(&devices_dir)? {
            let path = devices_dir.join(&name);
            let address = name.parse().map_err(|source| Error::BadAddress {
                path: path.clone(),
                source,
            })?;
            // The entries are links to device directories; a dangling one means the
            // device vanished under us.
            sysfs::link_name(&path)?;
            devices.push(address);
        }
        devices.sort();
        Ok(Self { id, devices })
    }
}

/// Why a group member keeps the group from being used through VFIO.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Blocker {
    /// The endpoint.
    pub address: PciAddress,
    /// The host driver holding it.
    pub driver: String,
}

impl fmt::Display for Blocker {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} (driver {})", self.address, self.driver)
    }
}

/// The kernel's viability rule for a group: every endpoint is bound to vfio-pci or
/// pci-stub, or to no driver; bridges don't count. Returns the endpoints that
/// break the rule; an empty list means the group is viable.
pub fn viability_blockers(members: &[PciDevice]) -> Vec<Blocker> {
    members
        .iter()
        .filter(|d| !d.is_bridge())
        .filter_map(|d| {
            let driver = d.driver.as_deref()?;
            (!VFIO_SAFE_DRIVERS.contains(&driver)).then(|| Blocker {
                address: d.address,
                driver: driver.to_string(),
            })
        })
        .collect()
}
