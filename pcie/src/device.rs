//! One PCI function as sysfs describes it.

use std::path::{Path, PathBuf};

use crate::address::PciAddress;
use crate::bar::{parse_resource, Bar};
use crate::class::{self, ClassCode};
use crate::error::{Error, Result};
use crate::link::{parse_width, Link, LinkSpeed};
use crate::nvidia::{NvidiaFunction, NvidiaInfo, NVIDIA_VENDOR_ID};
use crate::sysfs::{self, exists, link_name, read_hex, read_optional_attr, Sysfs};

/// SR-IOV capability state of a physical function.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct Sriov {
    /// VFs the device supports (`sriov_totalvfs`).
    pub total_vfs: u32,
    /// VFs enabled now (`sriov_numvfs`).
    pub num_vfs: u32,
}

/// Everything sysfs tells about one PCI function.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct PciDevice {
    /// Its address.
    pub address: PciAddress,
    /// Vendor id.
    #[serde(serialize_with = "hex4")]
    pub vendor_id: u16,
    /// Device id.
    #[serde(serialize_with = "hex4")]
    pub device_id: u16,
    /// Subsystem (board) vendor id.
    #[serde(serialize_with = "hex4")]
    pub subsystem_vendor_id: u16,
    /// Subsystem (board) id.
    #[serde(serialize_with = "hex4")]
    pub subsystem_device_id: u16,
    /// Class code.
    pub class: ClassCode,
    /// Revision id.
    pub revision: u8,
    /// Vendor name from the PCI ID database.
    pub vendor_name: Option<&'static str>,
    /// Device name from the PCI ID database.
    pub device_name: Option<&'static str>,
    /// Subsystem name from the PCI ID database.
    pub subsystem_name: Option<&'static str>,
    /// Class name from the PCI ID database.
    pub class_name: Option<&'static str>,
    /// The bound driver, `None` when unbound.
    pub driver: Option<String>,
    /// `driver_override`; the kernel's `(null)` is `None`.
    pub driver_override: Option<String>,
    /// `None` when the IOMMU is off (no `iommu_group` link).
    pub iommu_group: Option<u32>,
    /// `None` on hosts without NUMA information (`-1`).
    pub numa_node: Option<u32>,
    /// CPUs close to the device, e.g. `0-55,112-167`.
    pub local_cpulist: Option<String>,
    /// `None` for conventional PCI devices, which have no link attributes.
    pub link: Option<Link>,
    /// Assigned BARs.
    pub bars: Vec<Bar>,
    /// The kernel's reset methods in order of preference (`flr`, `bus`, ...). Empty
    /// when the function has none: Linux 5.15+ then hides `reset_method`, and every
    /// kernel hides `reset`. `None` when the kernel can reset the function (`reset`
    /// exists) but predates `reset_method` (5.15), so it does not say how.
    pub reset_methods: Option<Vec<String>>,
    /// SR-IOV state, for physical functions.
    pub sriov: Option<Sriov>,
    /// For an SR-IOV virtual function, its physical function (`physfn`).
    pub physical_function: Option<PciAddress>,
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
        if !exists(&dir)? {
            // Say what is wrong with a bad root rather than "no such device".
            sysfs.verify()?;
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
            reset_methods: read_reset_methods(&dir)?,
            sriov: read_sriov(&dir)?,
            physical_function: read_physfn(&dir)?,
            nvidia: identify_nvidia(sysfs, address, vendor_id, device_id, class)?,
        })
    }

    /// True for an SR-IOV virtual function.
    pub fn is_virtual_function(&self) -> bool {
        self.physical_function.is_some()
    }

    /// Enabled VFs of a physical function (0 for anything else).
    pub fn enabled_vfs(&self) -> u32 {
        self.sriov.map_or(0, |s| s.num_vfs)
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

/// `reset_method` when present. When it is not, `reset` tells: every kernel
/// creates `reset` only for functions it can reset, so without it there is no
/// reset method (Linux 5.15+ also hides `reset_method` then); with it, the kernel
/// predates `reset_method` and does not say which method it would use.
fn read_reset_methods(dir: &Path) -> Result<Option<Vec<String>>> {
    if let Some(v) = read_optional_attr(&dir.join("reset_method"))? {
        return Ok(Some(v.split_whitespace().map(str::to_string).collect()));
    }
    if exists(&dir.join("reset"))? {
        Ok(None)
    } else {
        Ok(Some(Vec::new()))
    }
}

/// The PF of a VF, from its `physfn` link.
fn read_physfn(dir: &Path) -> Result<Option<PciAddress>> {
    let path = dir.join("physfn");
    link_name(&path)?
        .map(|name| {
            name.parse()
                .map_err(|source| Error::BadAddress { path, source })
        })
        .transpose()
}

/// NVIDIA identification; a board's audio, USB and UCSI functions take the
/// architecture of the GPU function in the same slot.
fn identify_nvidia(
    sysfs: &Sysfs,
    address: PciAddress,
    vendor_id: u16,
    device_id: u16,
    class: ClassCode,
) -> Result<Option<NvidiaInfo>> {
    let Some(mut info) = NvidiaInfo::identify(vendor_id, device_id, class) else {
        return Ok(None);
    };
    if info.function == NvidiaFunction::Gpu || info.function == NvidiaFunction::NvSwitch {
        return Ok(Some(info));
    }
    for function in 0..=PciAddress::MAX_FUNCTION {
        let Ok(sibling) = PciAddress::new(address.domain, address.bus, address.device, function)
        else {
            continue;
        };
        let dir = PciDevice::sysfs_dir(sysfs, &sibling);
        if sibling == address || !exists(&dir)? {
            continue;
        }
        let id = |name: &str| -> Result<Option<u32>> {
            read_optional_attr(&dir.join(name))?
                .map(|v| sysfs::parse_hex(&dir.join(name), &v, "a hex id"))
                .transpose()
        };
        let (Some(vendor), Some(device), Some(class)) =
            (id("vendor")?, id("device")?, id("class")?)
        else {
            continue;
        };
        if vendor != u32::from(NVIDIA_VENDOR_ID) {
            continue;
        }
        let (Ok(vendor), Ok(device)) = (u16::try_from(vendor), u16::try_from(device)) else {
            continue;
        };
        if let Some(gpu) = NvidiaInfo::identify(vendor, device, ClassCode(class)) {
            if gpu.function == NvidiaFunction::Gpu && gpu.architecture.is_some() {
                info.architecture = gpu.architecture;
                break;
            }
        }
    }
    Ok(Some(info))
}

fn read_numa_node(path: &Path) -> Result<Option<u32>> {
    let Some(value) = read_optional_attr(path)? else {
        return Ok(None);
    };
    let node: i64 = sysfs::parse_decimal(path, &value, "a NUMA node number or -1")?;
    match node {
        -1 => Ok(None),
        n => u32::try_from(n)
            .map(Some)
            .map_err(|_| Error::parse(path, &value, "a NUMA node number or -1")),
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
pub(crate) fn read_driver(sysfs: &Sysfs, address: &PciAddress) -> Result<Option<String>> {
    link_name(&PciDevice::sysfs_dir(sysfs, address).join("driver"))
}

/// Reads `driver_override`; the kernel's `(null)` (and an empty value) is `None`.
pub(crate) fn read_driver_override(sysfs: &Sysfs, address: &PciAddress) -> Result<Option<String>> {
    let path = PciDevice::sysfs_dir(sysfs, address).join("driver_override");
    Ok(read_optional_attr(&path)?.filter(|v| v != "(null)" && !v.is_empty()))
}

/// True when the device is the host's boot display (`boot_vga` is `1`).
pub(crate) fn is_boot_display(sysfs: &Sysfs, address: &PciAddress) -> Result<bool> {
    let path = PciDevice::sysfs_dir(sysfs, address).join("boot_vga");
    Ok(read_optional_attr(&path)?.as_deref() == Some("1"))
}
