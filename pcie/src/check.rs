//! Can this device be given to a VM? Each precondition is one named check.
//!
//! [`taken_from_host`] is the one rule deciding what binding a device takes from
//! the host; [`assess`] reports it as the `taken_from_host` check and
//! [`crate::bind::plan_bind`] refuses on it, so `vmgpu check` and `vmgpu bind`
//! always agree: a device is assignable exactly when a bind without `--force`
//! would go ahead.

use std::fmt;
use std::path::Path;

use crate::address::PciAddress;
use crate::bar::{format_size, BarKind};
use crate::class::ClassCode;
use crate::device::is_boot_display;
use crate::device::PciDevice;
use crate::error::Result;
use crate::host::{Host, VfioPciModule};
use crate::iommu::{viability_blockers, Blocker, InterruptRemapping, VFIO_SAFE_DRIVERS};
use crate::sysfs::{list_dir, read_optional_attr};

/// OVMF's default 64-bit PCI MMIO aperture. BARs beyond it need the VMM to enlarge
/// the window (`-fw_cfg name=opt/ovmf/X-PciMmio64Mb,...` in QEMU).
pub const DEFAULT_GUEST_MMIO64_WINDOW: u64 = 32 << 30;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "snake_case")]
/// The verdict of one check.
pub enum CheckStatus {
    /// Fine.
    Pass,
    /// Worth knowing; does not stop an assignment.
    Warn,
    /// The device cannot be assigned (or, for the checks `--force` overrides, not
    /// without taking something from the host).
    Fail,
}

impl fmt::Display for CheckStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Pass => "pass",
            Self::Warn => "warn",
            Self::Fail => "fail",
        })
    }
}

/// One precondition and what was found.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Check {
    /// Its name, e.g. `iommu_group`.
    pub name: &'static str,
    /// The verdict.
    pub status: CheckStatus,
    /// What was found, for people.
    pub detail: String,
}

/// How a group member relates to the device being checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum MemberRole {
    /// The device itself.
    Target,
    /// Another function of the same multi-function device (a GPU's audio or USB
    /// function). SR-IOV VFs are never companions.
    Companion,
    /// A bridge or port: ignored by the group rule.
    Bridge,
    /// An unrelated endpoint that shares the group.
    Other,
}

impl MemberRole {
    /// How `member` relates to `target`.
    pub fn of(member: &PciDevice, target: &PciDevice) -> Self {
        if member.address == target.address {
            Self::Target
        } else if member.is_bridge() {
            Self::Bridge
        } else if member.address.same_slot(&target.address)
            && !member.is_virtual_function()
            && !target.is_virtual_function()
        {
            Self::Companion
        } else {
            Self::Other
        }
    }
}

impl fmt::Display for MemberRole {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Target => "target",
            Self::Companion => "companion",
            Self::Bridge => "bridge",
            Self::Other => "other",
        })
    }
}

/// One member of the device's IOMMU group.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct GroupMember {
    /// Its address.
    pub address: PciAddress,
    /// How it relates to the device checked.
    pub role: MemberRole,
    /// Its driver now.
    pub driver: Option<String>,
    /// True when this member's current driver keeps the group from being viable.
    pub blocks_now: bool,
}

/// The verdict of `vmgpu check`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Assessment {
    /// The device checked.
    pub device: PciAddress,
    /// No check failed: `vmgpu bind` without `--force` goes ahead.
    pub assignable: bool,
    /// Its IOMMU group, `None` with the IOMMU off.
    pub iommu_group: Option<u32>,
    /// The group is viable right now, as the kernel would judge it.
    pub group_viable_now: bool,
    /// Every member of the group, bridges included.
    pub group: Vec<GroupMember>,
    /// Other functions of the same slot, in the group or not.
    pub companions: Vec<PciAddress>,
    /// Endpoints outside the device's slot that share its group under a host driver.
    pub blockers: Vec<Blocker>,
    /// What binding would take that the host needs (see [`taken_from_host`]).
    pub taken_from_host: Vec<HostNeed>,
    /// Every check, in a fixed order.
    pub checks: Vec<Check>,
}

impl Assessment {
    /// The check named `name`, if it was run.
    pub fn check(&self, name: &str) -> Option<&Check> {
        self.checks.iter().find(|c| c.name == name)
    }

    /// The failed checks that `--force` does not override (see [`FORCEABLE_CHECKS`]):
    /// `bind` refuses while there is one, whatever the flag.
    pub fn unforceable_failures(&self) -> impl Iterator<Item = &Check> {
        self.checks
            .iter()
            .filter(|c| c.status == CheckStatus::Fail && !FORCEABLE_CHECKS.contains(&c.name))
    }
}

fn check(name: &'static str, status: CheckStatus, detail: impl Into<String>) -> Check {
    Check {
        name,
        status,
        detail: detail.into(),
    }
}

/// Checks whose failure `--force` overrides: they only say that binding takes
/// something the host needs.
pub const FORCEABLE_CHECKS: [&str; 3] = ["iommu_group", "boot_display", "taken_from_host"];

/// A function the host needs that binding would take.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct HostNeed {
    /// The function.
    pub address: PciAddress,
    /// Why the host needs it, e.g. "SATA controller on ahci".
    pub reason: String,
}

/// The one rule deciding what binding `target` takes from the host. Binding moves
/// every endpoint of the group to vfio-pci; of those not on vfio-pci or pci-stub
/// already, the host needs (and `bind` refuses without `--force`):
///
/// 1. the host's boot display (`boot_vga` 1);
/// 2. an SR-IOV physical function with VFs enabled: unbinding its driver removes
///    them from the host;
/// 3. a storage controller bound to a driver;
/// 4. a network function with an interface up;
/// 5. any endpoint that is neither the target nor one of its functions (another
///    GPU or controller sharing the group behind a switch without ACS) while a
///    host driver holds it: it is a separate device the user did not name.
///
/// The target and its companions are checked by rules 1-4 like any member. Members
/// without a driver are taken without a word; bridges are never bound.
pub fn taken_from_host(
    host: &Host,
    target: &PciDevice,
    members: &[PciDevice],
) -> Result<Vec<HostNeed>> {
    let mut needs = Vec::new();
    for member in members.iter().filter(|m| !m.is_bridge()) {
        if let Some(reason) = host_need(host, member, target)? {
            needs.push(HostNeed {
                address: member.address,
                reason,
            });
        }
    }
    Ok(needs)
}

fn host_need(host: &Host, member: &PciDevice, target: &PciDevice) -> Result<Option<String>> {
    let driver = member.driver.as_deref();
    if driver.is_some_and(|d| VFIO_SAFE_DRIVERS.contains(&d)) {
        return Ok(None);
    }
    if is_boot_display(host.sysfs(), &member.address)? {
        return Ok(Some("the host's boot display".into()));
    }
    let Some(driver) = driver else {
        return Ok(None);
    };
    if member.enabled_vfs() > 0 {
        let vfs: Vec<String> = host
            .virtual_functions(member.address)?
            .iter()
            .map(|a| a.to_string())
            .collect();
        return Ok(Some(format!(
            "SR-IOV physical function on {driver} with {} VF(s) enabled ({}): unbinding it removes them from the host",
            member.enabled_vfs(),
            if vfs.is_empty() { "not listed".to_string() } else { vfs.join(", ") }
        )));
    }
    let what = member.class_name.unwrap_or("device");
    match member.class.base() {
        ClassCode::STORAGE => return Ok(Some(format!("{what} on {driver}"))),
        ClassCode::NETWORK => {
            let up = interfaces_up(&PciDevice::sysfs_dir(host.sysfs(), &member.address))?;
            if !up.is_empty() {
                return Ok(Some(format!("network interface {} is up", up.join(", "))));
            }
        }
        _ => {}
    }
    if MemberRole::of(member, target) == MemberRole::Other {
        return Ok(Some(format!(
            "{what} on {driver}: a separate device sharing the IOMMU group, not a function of {}",
            target.address
        )));
    }
    Ok(None)
}

fn interfaces_up(device_dir: &Path) -> Result<Vec<String>> {
    let net = device_dir.join("net");
    let mut up = Vec::new();
    for iface in list_dir(&net)? {
        if read_optional_attr(&net.join(&iface).join("operstate"))?.as_deref() == Some("up") {
            up.push(iface);
        }
    }
    Ok(up)
}

/// Runs every check for `address`.
pub fn assess(host: &Host, address: PciAddress) -> Result<Assessment> {
    let device = host.device(address)?;
    let iommu = host.iommu()?;
    let companions = host.companions(address)?;
    let members = match device.iommu_group {
        Some(id) => host.group_members(id)?,
        None => vec![device.clone()],
    };
    let taken = taken_from_host(host, &device, &members)?;

    let mut checks = Vec::new();
    checks.push(if iommu.enabled() {
        check(
            "iommu",
            CheckStatus::Pass,
            format!(
                "IOMMU on ({}), {} groups",
                if iommu.units.is_empty() { "units not listed".to_string() } else { iommu.units.join(", ") },
                iommu.group_count
            ),
        )
    } else {
        check(
            "iommu",
            CheckStatus::Fail,
            "no IOMMU groups: the IOMMU is off or absent (enable VT-d/AMD-Vi in firmware; boot with intel_iommu=on on Intel)",
        )
    });
    checks.push(remapping_check(
        iommu.interrupt_remapping,
        iommu.allow_unsafe_interrupts,
    ));
    if device.is_bridge() {
        checks.push(check(
            "endpoint",
            CheckStatus::Fail,
            format!(
                "{address} is a {}: bridges and ports are not assignable; assign the devices behind it",
                device.class_name.unwrap_or("bridge")
            ),
        ));
    }

    let (group, blockers, group_viable_now, group_check) = match device.iommu_group {
        Some(id) => {
            let (group, blockers, viable_now) = classify_members(&device, &members);
            let status = if blockers.is_empty() {
                CheckStatus::Pass
            } else {
                CheckStatus::Fail
            };
            let detail = group_detail(id, &group, &blockers);
            (
                group,
                blockers,
                viable_now,
                check("iommu_group", status, detail),
            )
        }
        None => (
            Vec::new(),
            Vec::new(),
            false,
            check(
                "iommu_group",
                CheckStatus::Fail,
                format!("{address} is in no IOMMU group"),
            ),
        ),
    };
    checks.push(group_check);
    checks.push(companion_check(host, &companions, &group)?);
    checks.push(driver_check(&device));
    checks.push(reset_check(&device));
    checks.push(vfio_module_check(host.vfio_pci_module()?));
    checks.push(bar_check(&device));
    if let Some(c) = boot_display_check(host, &device)? {
        checks.push(c);
    }
    checks.push(taken_check(&members, &device, &taken));

    Ok(Assessment {
        device: address,
        assignable: checks.iter().all(|c| c.status != CheckStatus::Fail),
        iommu_group: device.iommu_group,
        group_viable_now,
        group,
        companions,
        blockers,
        taken_from_host: taken,
        checks,
    })
}

fn taken_check(members: &[PciDevice], device: &PciDevice, taken: &[HostNeed]) -> Check {
    if taken.is_empty() {
        let moved: Vec<String> = members
            .iter()
            .filter(|m| !m.is_bridge())
            .filter(|m| m.driver.as_deref() != Some(crate::bind::VFIO_PCI))
            .map(|m| format!("{} ({})", m.address, MemberRole::of(m, device)))
            .collect();
        let detail = if moved.is_empty() {
            "nothing to take: the group is on vfio-pci already".to_string()
        } else {
            format!("bind moves {}: nothing the host needs", moved.join(", "))
        };
        return check("taken_from_host", CheckStatus::Pass, detail);
    }
    let needs: Vec<String> = taken
        .iter()
        .map(|n| format!("{} ({})", n.address, n.reason))
        .collect();
    check(
        "taken_from_host",
        CheckStatus::Fail,
        format!(
            "binding takes what the host needs: {}; `vmgpu bind` refuses without --force",
            needs.join("; ")
        ),
    )
}

fn remapping_check(state: InterruptRemapping, allow_unsafe: Option<bool>) -> Check {
    match (state, allow_unsafe) {
        (InterruptRemapping::Enabled, _) => check(
            "interrupt_remapping",
            CheckStatus::Pass,
            "MSI interrupts are remapped by the IOMMU",
        ),
        (InterruptRemapping::Disabled, Some(true)) => check(
            "interrupt_remapping",
            CheckStatus::Warn,
            "off, but vfio_iommu_type1.allow_unsafe_interrupts=Y: a guest can forge host interrupts",
        ),
        (InterruptRemapping::Disabled, _) => check(
            "interrupt_remapping",
            CheckStatus::Fail,
            "off: VFIO refuses the device unless vfio_iommu_type1.allow_unsafe_interrupts=1",
        ),
        (InterruptRemapping::Unknown, _) => check(
            "interrupt_remapping",
            CheckStatus::Warn,
            "cannot tell from sysfs (no MSI irq in use and no VT-d capability to read)",
        ),
    }
}

fn classify_members(
    device: &PciDevice,
    members: &[PciDevice],
) -> (Vec<GroupMember>, Vec<Blocker>, bool) {
    let now = viability_blockers(members);
    let group: Vec<GroupMember> = members
        .iter()
        .map(|m| GroupMember {
            address: m.address,
            role: MemberRole::of(m, device),
            driver: m.driver.clone(),
            blocks_now: now.iter().any(|b| b.address == m.address),
        })
        .collect();
    // The device and its companions get bound together; anything else on a host
    // driver would have to be taken from the host.
    let blockers = now
        .iter()
        .filter(|b| {
            group
                .iter()
                .any(|m| m.address == b.address && m.role == MemberRole::Other)
        })
        .cloned()
        .collect();
    (group, blockers, now.is_empty())
}

fn group_detail(id: u32, group: &[GroupMember], blockers: &[Blocker]) -> String {
    let endpoints = group
        .iter()
        .filter(|m| m.role != MemberRole::Bridge)
        .count();
    let bridges = group.len() - endpoints;
    if blockers.is_empty() {
        format!("group {id}: {endpoints} endpoint(s) to bind together, {bridges} bridge(s) ignored")
    } else {
        let names: Vec<String> = blockers.iter().map(|b| b.to_string()).collect();
        format!(
            "group {id} also holds {}: the whole group goes to the VM, so these would leave the host",
            names.join(", ")
        )
    }
}

fn companion_check(host: &Host, companions: &[PciAddress], group: &[GroupMember]) -> Result<Check> {
    if companions.is_empty() {
        return Ok(check(
            "companions",
            CheckStatus::Pass,
            "no other functions in this slot",
        ));
    }
    let mut parts = Vec::new();
    for address in companions {
        let companion = host.device(*address)?;
        let kind = companion
            .nvidia
            .map(|n| n.function.to_string())
            .or_else(|| companion.class_name.map(str::to_string))
            .unwrap_or_else(|| format!("class {}", companion.class));
        let in_group = group.iter().any(|m| m.address == *address);
        parts.push(format!(
            "{address} {kind} ({}){}",
            companion.driver.as_deref().unwrap_or("no driver"),
            if in_group {
                ", same group: bound with it"
            } else {
                ", own group: stays with the host"
            }
        ));
    }
    Ok(check("companions", CheckStatus::Pass, parts.join("; ")))
}

fn driver_check(device: &PciDevice) -> Check {
    match device.driver.as_deref() {
        Some(d) if VFIO_SAFE_DRIVERS.contains(&d) => {
            check("driver", CheckStatus::Pass, format!("bound to {d}"))
        }
        Some(d) => check(
            "driver",
            CheckStatus::Pass,
            format!("bound to {d}; `vmgpu bind` moves it to vfio-pci"),
        ),
        None => check(
            "driver",
            CheckStatus::Pass,
            "no driver; `vmgpu bind` binds vfio-pci",
        ),
    }
}

fn reset_check(device: &PciDevice) -> Check {
    match &device.reset_methods {
        Some(methods) if !methods.is_empty() => check(
            "reset",
            CheckStatus::Pass,
            format!("reset methods: {}", methods.join(" ")),
        ),
        Some(_) => check(
            "reset",
            CheckStatus::Warn,
            "no reset method: device state can leak from one VM to the next",
        ),
        None => check(
            "reset",
            CheckStatus::Warn,
            "the kernel can reset it but does not say how (reset_method needs Linux 5.15)",
        ),
    }
}

fn vfio_module_check(module: VfioPciModule) -> Check {
    match module {
        VfioPciModule::Loaded => check("vfio_pci", CheckStatus::Pass, "vfio-pci loaded"),
        VfioPciModule::BuiltIn => check(
            "vfio_pci",
            CheckStatus::Pass,
            "vfio-pci built into the kernel",
        ),
        VfioPciModule::Available { path } => check(
            "vfio_pci",
            CheckStatus::Pass,
            format!("vfio-pci not loaded; module at {}", path.display()),
        ),
        VfioPciModule::Missing { modules_dir } => check(
            "vfio_pci",
            CheckStatus::Fail,
            format!("vfio-pci neither loaded nor in {}", modules_dir.display()),
        ),
        VfioPciModule::Unknown => check(
            "vfio_pci",
            CheckStatus::Warn,
            "vfio-pci not loaded and no modules directory to look in",
        ),
    }
}

fn bar_check(device: &PciDevice) -> Check {
    let mmio64: u64 = device
        .bars
        .iter()
        .filter(|b| b.kind == BarKind::Mem64)
        .map(|b| b.size)
        .sum();
    let list: Vec<String> = device
        .bars
        .iter()
        .map(|b| {
            let kind = match b.kind {
                BarKind::Io => "io",
                BarKind::Mem32 => "32-bit",
                BarKind::Mem64 => "64-bit",
            };
            let pref = if b.prefetchable { " prefetchable" } else { "" };
            format!("BAR{} {} {kind}{pref}", b.index, format_size(b.size))
        })
        .collect();
    let listing = if list.is_empty() {
        "no BARs".to_string()
    } else {
        list.join(", ")
    };
    if mmio64 > DEFAULT_GUEST_MMIO64_WINDOW {
        check(
            "bars",
            CheckStatus::Warn,
            format!(
                "{listing}; the guest needs a 64-bit MMIO window of at least {} (OVMF's default is {})",
                format_size(mmio64.next_power_of_two()),
                format_size(DEFAULT_GUEST_MMIO64_WINDOW)
            ),
        )
    } else {
        check("bars", CheckStatus::Pass, listing)
    }
}

fn boot_display_check(host: &Host, device: &PciDevice) -> Result<Option<Check>> {
    if !is_boot_display(host.sysfs(), &device.address)? {
        return Ok(None);
    }
    let released = device
        .driver
        .as_deref()
        .is_some_and(|d| VFIO_SAFE_DRIVERS.contains(&d));
    Ok(Some(if released {
        check(
            "boot_display",
            CheckStatus::Warn,
            "the host's boot display, already given up by the host",
        )
    } else {
        check(
            "boot_display",
            CheckStatus::Fail,
            "the host's boot display: its console goes dark when the device leaves; `vmgpu bind` refuses without --force",
        )
    }))
}
