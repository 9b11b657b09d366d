//! Binding a device and the rest of its IOMMU group to vfio-pci, and restoring the
//! drivers they had.
//!
//! Every original driver is written to a state file before anything changes, so
//! `unbind` restores exactly what was there, even after a crash. A failure at any
//! step rolls back what was done so far.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::address::PciAddress;
use crate::check::MemberRole;
use crate::class::ClassCode;
use crate::device::{is_boot_display, read_driver, read_driver_override, PciDevice};
use crate::host::Host;
use crate::iommu::VFIO_SAFE_DRIVERS;
use crate::kernel::Kernel;
use crate::sysfs::{list_dir, read_optional_attr};

pub const VFIO_PCI: &str = "vfio-pci";
/// Default directory for bind records: tmpfs, so records vanish with the boot
/// that made them, as the bindings do.
pub const DEFAULT_STATE_DIR: &str = "/run/vmgpu";

#[derive(Debug, thiserror::Error)]
pub enum BindError {
    #[error(transparent)]
    Sysfs(#[from] crate::Error),
    #[error("{address} is in no IOMMU group: the IOMMU is off, so VFIO cannot isolate it")]
    NoIommuGroup { address: PciAddress },
    #[error("IOMMU group {group} of {address} holds devices the host needs: {}; pass --force to take them anyway", list(.needed))]
    HostNeedsGroupMember {
        address: PciAddress,
        group: u32,
        needed: Vec<HostNeed>,
    },
    #[error("loading module {module}: {source}")]
    ModuleLoad {
        module: &'static str,
        #[source]
        source: io::Error,
    },
    #[error("module {module} loaded but {path} did not appear")]
    DriverMissing { module: &'static str, path: PathBuf },
    #[error("writing {value:?} to {path}: {source}")]
    Write {
        path: PathBuf,
        value: String,
        #[source]
        source: io::Error,
    },
    #[error("{address} is on {} after binding, expected {expected}", .actual.as_deref().unwrap_or("no driver"))]
    NotBound {
        address: PciAddress,
        expected: String,
        actual: Option<String>,
    },
    #[error("state file {path}: {source}")]
    State {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("state file {path}: {source}")]
    StateFormat {
        path: PathBuf,
        #[source]
        source: serde_json::Error,
    },
    #[error("no bind record for {address} in {state_dir}: it was not bound by vmgpu (or the record was removed)")]
    NoRecord {
        address: PciAddress,
        state_dir: PathBuf,
    },
    #[error("{cause}; rolling back also failed: {}", .failures.join("; "))]
    RollbackIncomplete {
        cause: Box<BindError>,
        failures: Vec<String>,
    },
    #[error("restoring the drivers of {address} failed: {} (record kept in {record})", .failures.join("; "))]
    RestoreIncomplete {
        address: PciAddress,
        failures: Vec<String>,
        record: PathBuf,
    },
}

fn list(needed: &[HostNeed]) -> String {
    needed
        .iter()
        .map(|n| format!("{} ({})", n.address, n.reason))
        .collect::<Vec<_>>()
        .join(", ")
}

/// A group member the host relies on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct HostNeed {
    pub address: PciAddress,
    pub reason: String,
}

/// One function that `bind` will move to vfio-pci.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PlannedFunction {
    pub address: PciAddress,
    pub role: MemberRole,
    pub driver: Option<String>,
    /// False when it is on vfio-pci already.
    pub rebind: bool,
}

/// What `bind` would do: the dry run shows exactly this.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct BindPlan {
    pub device: PciAddress,
    pub iommu_group: u32,
    pub load_vfio_pci: bool,
    pub functions: Vec<PlannedFunction>,
    /// Members the host needs; non-empty only when forced.
    pub taken_from_host: Vec<HostNeed>,
}

impl BindPlan {
    pub fn nothing_to_do(&self) -> bool {
        !self.load_vfio_pci && self.functions.iter().all(|f| !f.rebind)
    }
}

/// What a function had before `bind`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FunctionRecord {
    pub address: PciAddress,
    pub driver: Option<String>,
    pub driver_override: Option<String>,
}

/// The state file: enough to put the host back as it was.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BindRecord {
    pub device: PciAddress,
    pub iommu_group: u32,
    /// vfio-pci was loaded by this bind.
    pub loaded_vfio_pci: bool,
    pub functions: Vec<FunctionRecord>,
}

/// Decides what binding `address` takes, refusing (unless `force`) when its group
/// holds a device the host needs.
pub fn plan_bind(host: &Host, address: PciAddress, force: bool) -> Result<BindPlan, BindError> {
    let device = host.device(address)?;
    let group = device
        .iommu_group
        .ok_or(BindError::NoIommuGroup { address })?;
    let members = host.group_members(group)?;
    let mut needed = Vec::new();
    let mut functions = Vec::new();
    for member in members.iter().filter(|m| !m.is_bridge()) {
        if let Some(reason) = host_need(host, member, address)? {
            needed.push(HostNeed {
                address: member.address,
                reason,
            });
        }
        functions.push(PlannedFunction {
            address: member.address,
            role: MemberRole::of(member, address),
            driver: member.driver.clone(),
            rebind: member.driver.as_deref() != Some(VFIO_PCI),
        });
    }
    if !needed.is_empty() && !force {
        return Err(BindError::HostNeedsGroupMember {
            address,
            group,
            needed,
        });
    }
    Ok(BindPlan {
        device: address,
        iommu_group: group,
        load_vfio_pci: !vfio_pci_registered(host),
        functions,
        taken_from_host: needed,
    })
}

fn vfio_pci_registered(host: &Host) -> bool {
    host.sysfs().pci_driver(VFIO_PCI).is_dir()
}

/// Why the host needs `member`, if it does: storage, a network interface that is
/// up, a display the host drives, or the boot display.
fn host_need(host: &Host, member: &PciDevice, target: PciAddress) -> crate::Result<Option<String>> {
    if is_boot_display(host.sysfs(), &member.address)? {
        return Ok(Some("the host's boot display".into()));
    }
    let Some(driver) = member.driver.as_deref() else {
        return Ok(None);
    };
    if VFIO_SAFE_DRIVERS.contains(&driver) || member.address.same_slot(&target) {
        return Ok(None);
    }
    let what = member.class_name.unwrap_or("device");
    Ok(match member.class.base() {
        ClassCode::STORAGE => Some(format!("{what} on {driver}")),
        ClassCode::DISPLAY => Some(format!("{what} driven by {driver}")),
        ClassCode::NETWORK => {
            let up = interfaces_up(&PciDevice::sysfs_dir(host.sysfs(), &member.address))?;
            (!up.is_empty()).then(|| format!("network interface {} is up", up.join(", ")))
        }
        _ => None,
    })
}

fn interfaces_up(device_dir: &Path) -> crate::Result<Vec<String>> {
    let net = device_dir.join("net");
    let mut up = Vec::new();
    for iface in list_dir(&net)? {
        if read_optional_attr(&net.join(&iface).join("operstate"))?.as_deref() == Some("up") {
            up.push(iface);
        }
    }
    Ok(up)
}

/// Carries out `plan`: loads vfio-pci if needed, records the original drivers in
/// `state_dir`, then moves every function to vfio-pci. On failure, everything done
/// is undone before the error is returned.
pub fn bind(
    host: &Host,
    kernel: &dyn Kernel,
    plan: &BindPlan,
    state_dir: &Path,
) -> Result<BindRecord, BindError> {
    let _lock = lock_state_dir(state_dir)?;
    let sysfs = host.sysfs();
    let mut record = BindRecord {
        device: plan.device,
        iommu_group: plan.iommu_group,
        loaded_vfio_pci: false,
        functions: Vec::new(),
    };
    if plan.nothing_to_do() {
        log::info!(
            "{}: group {} already on vfio-pci",
            plan.device,
            plan.iommu_group
        );
        return Ok(record);
    }
    for f in &plan.functions {
        record.functions.push(FunctionRecord {
            address: f.address,
            driver: read_driver(sysfs, &f.address)?,
            driver_override: read_driver_override(sysfs, &f.address)?,
        });
    }
    let record_path = record_path(state_dir, plan.device);
    if plan.load_vfio_pci {
        kernel
            .load_module(VFIO_PCI)
            .map_err(|source| BindError::ModuleLoad {
                module: VFIO_PCI,
                source,
            })?;
        record.loaded_vfio_pci = true;
    }
    let result = save_record(&record_path, &record).and_then(|()| {
        if !vfio_pci_registered(host) {
            return Err(BindError::DriverMissing {
                module: VFIO_PCI,
                path: sysfs.pci_driver(VFIO_PCI),
            });
        }
        for f in plan.functions.iter().filter(|f| f.rebind) {
            move_to_vfio(host, kernel, f.address)?;
        }
        Ok(())
    });
    match result {
        Ok(()) => Ok(record),
        Err(cause) => {
            let failures = restore(host, kernel, &record);
            if failures.is_empty() {
                let _ = fs::remove_file(&record_path);
                Err(cause)
            } else {
                Err(BindError::RollbackIncomplete {
                    cause: Box::new(cause),
                    failures,
                })
            }
        }
    }
}

fn write(kernel: &dyn Kernel, path: PathBuf, value: &str) -> Result<(), BindError> {
    kernel
        .write(&path, value)
        .map_err(|source| BindError::Write {
            path,
            value: value.to_string(),
            source,
        })
}

/// The kernel's recipe: set driver_override, detach the current driver, ask the
/// bus to probe, then check where the device landed.
fn move_to_vfio(host: &Host, kernel: &dyn Kernel, address: PciAddress) -> Result<(), BindError> {
    let sysfs = host.sysfs();
    let bdf = address.to_string();
    write(
        kernel,
        PciDevice::sysfs_dir(sysfs, &address).join("driver_override"),
        VFIO_PCI,
    )?;
    if let Some(driver) = read_driver(sysfs, &address)? {
        if driver != VFIO_PCI {
            write(kernel, sysfs.pci_driver(&driver).join("unbind"), &bdf)?;
        }
    }
    write(kernel, sysfs.pci_bus().join("drivers_probe"), &bdf)?;
    let actual = read_driver(sysfs, &address)?;
    if actual.as_deref() != Some(VFIO_PCI) {
        return Err(BindError::NotBound {
            address,
            expected: VFIO_PCI.to_string(),
            actual,
        });
    }
    log::info!("{address}: bound to vfio-pci");
    Ok(())
}

/// Puts every function of `record` back on its original driver and override, and
/// unloads vfio-pci if the bind loaded it and nothing else uses it. Returns what
/// could not be restored; an empty list means the host is as it was.
fn restore(host: &Host, kernel: &dyn Kernel, record: &BindRecord) -> Vec<String> {
    let mut failures: Vec<String> = record
        .functions
        .iter()
        .rev()
        .filter_map(|f| {
            restore_function(host, kernel, f)
                .err()
                .map(|e| e.to_string())
        })
        .collect();
    if record.loaded_vfio_pci && vfio_pci_registered(host) {
        let in_use = list_dir(&host.sysfs().pci_driver(VFIO_PCI))
            .map(|names| names.iter().any(|n| n.parse::<PciAddress>().is_ok()))
            .unwrap_or(true);
        if !in_use {
            match kernel.unload_module(VFIO_PCI) {
                Ok(()) => {}
                // busybox's `modprobe -r` also tries the module's dependencies and
                // fails when one is still in use (vfio, held by vfio_iommu_type1),
                // even though vfio-pci itself went: what counts is that it is gone.
                Err(e) if !vfio_pci_registered(host) => {
                    log::info!("{VFIO_PCI} unloaded ({e})");
                }
                Err(e) => failures.push(format!("unloading {VFIO_PCI}: {e}")),
            }
        }
    }
    failures
}

fn restore_function(host: &Host, kernel: &dyn Kernel, f: &FunctionRecord) -> Result<(), BindError> {
    let sysfs = host.sysfs();
    let bdf = f.address.to_string();
    let dir = PciDevice::sysfs_dir(sysfs, &f.address);
    let current = read_driver(sysfs, &f.address)?;
    if current.is_some() && current != f.driver {
        let driver = current.unwrap_or_default();
        write(kernel, sysfs.pci_driver(&driver).join("unbind"), &bdf)?;
    }
    if read_driver_override(sysfs, &f.address)? != f.driver_override {
        // A lone newline clears the override.
        let value = f
            .driver_override
            .clone()
            .unwrap_or_else(|| "\n".to_string());
        write(kernel, dir.join("driver_override"), &value)?;
    }
    let Some(original) = &f.driver else {
        return Ok(());
    };
    if read_driver(sysfs, &f.address)?.as_ref() != Some(original) {
        let bind_path = sysfs.pci_driver(original).join("bind");
        if let Err(e) = write(kernel, bind_path, &bdf) {
            log::warn!("{e}; asking the bus to probe {bdf} instead");
            write(kernel, sysfs.pci_bus().join("drivers_probe"), &bdf)?;
        }
    }
    let actual = read_driver(sysfs, &f.address)?;
    if actual.as_ref() != Some(original) {
        return Err(BindError::NotBound {
            address: f.address,
            expected: original.clone(),
            actual,
        });
    }
    log::info!("{}: restored to {original}", f.address);
    Ok(())
}

/// Restores what `bind` recorded for `address` (the device it was called with, or
/// any function bound along with it) and removes the record.
pub fn unbind(
    host: &Host,
    kernel: &dyn Kernel,
    address: PciAddress,
    state_dir: &Path,
) -> Result<BindRecord, BindError> {
    let _lock = lock_state_dir(state_dir)?;
    let (path, record) = find_record(state_dir, address)?;
    let failures = restore(host, kernel, &record);
    if !failures.is_empty() {
        return Err(BindError::RestoreIncomplete {
            address: record.device,
            failures,
            record: path,
        });
    }
    fs::remove_file(&path).map_err(|source| BindError::State { path, source })?;
    Ok(record)
}

/// Serialises binds and unbinds on one host: two at once could each record the
/// other's vfio-pci as an "original" driver. Released when the file is dropped.
fn lock_state_dir(state_dir: &Path) -> Result<fs::File, BindError> {
    let path = state_dir.join("lock");
    let state_error = |source| BindError::State {
        path: path.clone(),
        source,
    };
    fs::create_dir_all(state_dir).map_err(state_error)?;
    let file = fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .map_err(state_error)?;
    file.lock().map_err(state_error)?;
    Ok(file)
}

pub fn record_path(state_dir: &Path, device: PciAddress) -> PathBuf {
    state_dir.join(format!("{device}.json"))
}

fn save_record(path: &Path, record: &BindRecord) -> Result<(), BindError> {
    let state_error = |source| BindError::State {
        path: path.to_path_buf(),
        source,
    };
    if let Some(dir) = path.parent() {
        fs::create_dir_all(dir).map_err(state_error)?;
    }
    // Write then rename, so a crash never leaves half a record.
    let tmp = path.with_extension("json.tmp");
    let text = serde_json::to_string_pretty(record).map_err(|source| BindError::StateFormat {
        path: path.to_path_buf(),
        source,
    })?;
    fs::write(&tmp, text + "\n").map_err(state_error)?;
    fs::rename(&tmp, path).map_err(state_error)
}

fn load_record(path: &Path) -> Result<BindRecord, BindError> {
    let text = fs::read_to_string(path).map_err(|source| BindError::State {
        path: path.to_path_buf(),
        source,
    })?;
    serde_json::from_str(&text).map_err(|source| BindError::StateFormat {
        path: path.to_path_buf(),
        source,
    })
}

/// The record for `address`: its own, or the one of the device it was bound with.
pub fn find_record(
    state_dir: &Path,
    address: PciAddress,
) -> Result<(PathBuf, BindRecord), BindError> {
    let own = record_path(state_dir, address);
    if own.exists() {
        let record = load_record(&own)?;
        return Ok((own, record));
    }
    for name in list_dir(state_dir)?.iter().filter(|n| n.ends_with(".json")) {
        let path = state_dir.join(name);
        let record = load_record(&path)?;
        if record.functions.iter().any(|f| f.address == address) {
            return Ok((path, record));
        }
    }
    Err(BindError::NoRecord {
        address,
        state_dir: state_dir.to_path_buf(),
    })
}
