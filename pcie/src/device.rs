//! One PCI function as sysfs describes it.

use std::path::{Path, PathBuf};

use crate::address::PciAddress;
use crate::bar::{parse_resource, Bar};
use crate::class::{self, ClassCode};
use crate::error::{Error, Result};
use crate::link::{parse_width, Link, LinkSpeed};
use crate::nvidia::NvidiaInfo;
use crate::sysfs::{self, link_name, read_hex, read_optional_attr, Sysfs};

/// SR-IOV capability state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct Sriov {
    pub total_vfs: u32,
    pub num_vfs: u32,
}

/// Everything sysfs tells about one PCI function.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct PciDevice {
    pub address: PciAddress,
    #[serde(serialize_with = "hex4")]
    pub vendor_id: u16,
    #[serde(serialize_with = "hex4")]
    pub device_id: u16,
    #[serde(serialize_with = "hex4")]
    pub subsystem_vendor_id: u16,
    #[serde(serialize_with = "hex4")]
    pub subsystem_device_id: u16,
    pub class: ClassCode,
    pub revision: u8,
    pub vendor_name: Option<&'static str>,
    pub device_name: Option<&'static str>,
    pub subsystem_name: Option<&'static str>,
    pub class_name: Option<&'static str>,
    /// The bound driver, `None` when unbound.
    pub driver: Option<String>,
    /// `driver_override`; the kernel's `(null)` is `None`.
    pub driver_override: Option<String>,
    /// `None` when the IOMMU is off (no `iommu_group` link).
    pub iommu_group: Option<u32>,
    /// `None` on hosts without NUMA information (`-1`).
    pub numa_node: Option<u32>,
    pub local_cpulist: Option<String>,
    /// `None` for conventional PCI devices, which have no link attributes.
    pub link: Option<Link>,
    pub bars: Vec<Bar>,
    /// The kernel's reset methods in order of preference (`flr`, `bus`, ...). `None`
    /// when the kernel predates `reset_method` (5.15); empty when it has none.
    pub reset_methods: Option<Vec<String>>,
    pub sriov: Option<Sriov>,
    /// Set for NVIDIA functions only.
    pub nvidia: Option<NvidiaInfo>,
}

fn hex4<S: serde::Serializer>(v: &u16, s: S) -> std::result::Result<S::Ok, S::Error> {
    s.collect_str(&format_args!("{v:04x}"))
}

impl PciDevice {
    /// Directory of `address` below `bus/pci/devices`.
    pub fn sysfs_dir(sysfs: &Sysfs, address: &PciAddress) -> PathBuf {
        sysfs.pci_bus().join("devices").join(address.to_string())
    }

    /// Reads one device. Attributes every device has are required; those that only
    /// some kernels or devices expose are optional.
    pub fn read(sysfs: &Sysfs, address: PciAddress) -> Result<Self> {
        let dir = Self::sysfs_dir(sysfs, &address);
        if !dir.exists() {
            return Err(Error::DeviceNotFound { address, path: dir });
        }
        let attr = |name: &str| dir.join(name);
        let id16 = |name: &str, what| read_hex(&attr(name), 0xffff, what).map(|v| v as u16);

        let vendor_id = id16("vendor", "a 16-bit vendor id")?;
        let device_id = id16("device", "a 16-bit device id")?;
        let subsystem_vendor_id = id16("subsystem_vendor", "a 16-bit subsystem vendor id")?;
        let subsystem_device_id = id16("subsystem_device", "a 16-bit subsystem device id")?;
        let class = ClassCode(read_hex(&attr("class"), 0xff_ffff, "a 24-bit class code")?);
        let revision = read_hex(&attr("revision"), 0xff, "an 8-bit revision")? as u8;

        let iommu_group = link_name(&attr("iommu_group"))?
            .map(|name| sysfs::parse_decimal(&attr("iommu_group"), &name, "an IOMMU group number"))
            .transpose()?;

        Ok(Self {
            address,
            vendor_id,
            device_id,
            subsystem_vendor_id,
            subsystem_device_id,
            class,
            revision,
            vendor_name: class::vendor_name(vendor_id),
            device_name: class::device_name(vendor_id, device_id),
            subsystem_name: class::subsystem_name(
                vendor_id,
                device_id,
                subsystem_vendor_id,
                subsystem_device_id,
            ),
            class_name: class.name(),
            driver: link_name(&attr("driver"))?,
            driver_override: read_driver_override(sysfs, &address)?,
            iommu_group,
            numa_node: read_numa_node(&attr("numa_node"))?,
            local_cpulist: read_optional_attr(&attr("local_cpulist"))?,
            link: read_link(&dir)?,
            bars: match read_optional_attr(&attr("resource"))? {
                Some(text) => parse_resource(&attr("resource"), &text)?,
                None => Vec::new(),
            },
            reset_methods: read_optional_attr(&attr("reset_method"))?
                .map(|v| v.split_whitespace().map(str::to_string).collect()),
            sriov: read_sriov(&dir)?,
            nvidia: NvidiaInfo::identify(vendor_id, device_id, class),
        })
    }

    /// PCI-PCI bridges and host bridges: not endpoints for the VFIO group rule.
    pub fn is_bridge(&self) -> bool {
        self.class.is_pci_bridge() || self.class.is_host_bridge()
    }

    /// Largest BAR, in bytes (0 without BARs).
    pub fn largest_bar(&self) -> u64 {
        self.bars.iter().map(|b| b.size).max().unwrap_or(0)
    }

    /// A one-line human name: `NVIDIA Corporation GH100 [H100 SXM5 80GB]`.
    pub fn display_name(&self) -> String {
        let vendor = self
            .vendor_name
            .map_or_else(|| format!("vendor {:04x}", self.vendor_id), str::to_string);
        let device = self
            .device_name
            .map_or_else(|| format!("device {:04x}", self.device_id), str::to_string);
        format!("{vendor} {device}")
    }
}

fn read_numa_node(path: &Path) -> Result<Option<u32>> {
    let Some(value) = read_optional_attr(path)? else {
        return Ok(None);
    };
    let node: i64 = sysfs::parse_decimal(path, &value, "a NUMA node number or -1")?;
    match node {
        -1 => Ok(None),
        n => u32::try_from(n).map(Some).map_err(|_| Error::Parse {
            path: path.to_path_buf(),
            value,
            expected: "a NUMA node number or -1",
        }),
    }
}

fn read_link(dir: &Path) -> Result<Option<Link>> {
    let speed = |name: &str| -> Result<Option<Option<LinkSpeed>>> {
        let path = dir.join(name);
        read_optional_attr(&path)?
            .map(|v| LinkSpeed::parse(&path, &v))
            .transpose()
    };
    let width = |name: &str| -> Result<Option<Option<u8>>> {
        let path = dir.join(name);
        read_optional_attr(&path)?
            .map(|v| parse_width(&path, &v))
            .transpose()
    };
    let (current_speed, max_speed) = (speed("current_link_speed")?, speed("max_link_speed")?);
    let (current_width, max_width) = (width("current_link_width")?, width("max_link_width")?);
    if [
        current_speed.is_none(),
        max_speed.is_none(),
        current_width.is_none(),
        max_width.is_none(),
    ]
    .iter()
    .all(|absent| *absent)
    {
        return Ok(None);
    }
    Ok(Some(Link {
        current_speed: current_speed.flatten(),
        current_width: current_width.flatten(),
        max_speed: max_speed.flatten(),
        max_width: max_width.flatten(),
    }))
}

fn read_sriov(dir: &Path) -> Result<Option<Sriov>> {
    let count = |name: &str| -> Result<Option<u32>> {
        let path = dir.join(name);
        read_optional_attr(&path)?
            .map(|v| sysfs::parse_decimal(&path, &v, "a VF count"))
            .transpose()
    };
    match (count("sriov_totalvfs")?, count("sriov_numvfs")?) {
        (Some(total_vfs), num_vfs) => Ok(Some(Sriov {
            total_vfs,
            num_vfs: num_vfs.unwrap_or(0),
        })),
        (None, _) => Ok(None),
    }
}

/// Reads just the driver of a device: cheaper than [`PciDevice::read`] where only
/// binding state matters.
pub fn read_driver(sysfs: &Sysfs, address: &PciAddress) -> Result<Option<String>> {
    link_name(&PciDevice::sysfs_dir(sysfs, address).join("driver"))
}

/// Reads `driver_override`; the kernel's `(null)` (and an empty value) is `None`.
pub fn read_driver_override(sysfs: &Sysfs, address: &PciAddress) -> Result<Option<String>> {
    let path = PciDevice::sysfs_dir(sysfs, address).join("driver_override");
    Ok(read_optional_attr(&path)?.filter(|v| v != "(null)" && !v.is_empty()))
}

/// True when the device is the host's boot display (`boot_vga` is `1`).
pub fn is_boot_display(sysfs: &Sysfs, address: &PciAddress) -> Result<bool> {
    let path = PciDevice::sysfs_dir(sysfs, address).join("boot_vga");
    Ok(read_optional_attr(&path)?.as_deref() == Some("1"))
}
