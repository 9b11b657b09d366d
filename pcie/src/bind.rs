//! Binding a device and the rest of its IOMMU group to vfio-pci, and restoring the
//! drivers they had.
//!
//! Bind state is never lost:
//! - everything happens under a lock on the state directory, the plan included,
//!   so two binds at once cannot record each other's vfio-pci as an "original"
//!   driver;
//! - a bind of a group that a record already holds is refused, and a record is
//!   never overwritten;
//! - the record (each function's driver and `driver_override`, and whether this
//!   bind loads vfio-pci) is written before the first change, so whatever step a
//!   crash interrupts, [`unbind`] puts the host back from it;
//! - a failure at any step rolls back what was done so far.
//!
//! vfio-pci goes as it came: the unbind of the last group vmgpu holds unloads it
//! when a vmgpu bind loaded it (and no device uses it), whatever the order of the
//! unbinds; vfio-pci that was loaded before any vmgpu bind is never unloaded.
//! The fact "a vmgpu bind loaded vfio-pci" is the `loaded_vfio_pci` of that bind's
//! record; when that record goes while other records remain, an unbind hands the
//! fact on to a marker, [`vfio_pci_marker_path`], written under the same lock
//! before the record is removed, and the last unbind unloads vfio-pci before it
//! removes the marker and then its record. So a crash between any two steps leaves
//! the fact in a file that the next `unbind` reads. A marker outlives no record: one
//! found without any record (records removed by hand) is stale and removed.

use std::error::Error as _;
use std::fs;
use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::address::PciAddress;
use crate::check::{assess, Check, MemberRole};
use crate::device::{read_driver, read_driver_override, PciDevice};
use crate::host::Host;
use crate::kernel::Kernel;
use crate::sysfs::{exists, list_dir};

pub use crate::check::HostNeed;

/// The name of the VFIO PCI driver.
pub const VFIO_PCI: &str = "vfio-pci";
/// Default directory for bind records: tmpfs, so records vanish with the boot
/// that made them, as the bindings do.
pub const DEFAULT_STATE_DIR: &str = "/run/vmgpu";

/// Why a bind or unbind did not happen, or did not finish.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BindError {
    /// Reading sysfs failed.
    #[error(transparent)]
    Sysfs(#[from] crate::Error),

    /// The device is in no IOMMU group.
    #[error("{address} is in no IOMMU group: the IOMMU is off, so VFIO cannot isolate it")]
    NoIommuGroup {
        /// The device.
        address: PciAddress,
    },

    /// A check that `--force` does not override failed (the device is a bridge,
    /// vfio-pci is missing, interrupts are not remapped).
    #[error("{address} cannot be assigned to a VM: {}", checks(.failed))]
    NotAssignable {
        /// The device.
        address: PciAddress,
        /// The failed checks, as `vmgpu check` shows them.
        failed: Vec<Check>,
    },

    /// Binding would take functions the host needs, and `force` was not given.
    #[error("binding {address} (IOMMU group {group}) takes what the host needs: {}; pass --force to take it anyway", needs(.needed))]
    HostNeedsGroupMember {
        /// The device.
        address: PciAddress,
        /// Its group.
        group: u32,
        /// What the host needs, by the rule of [`crate::check::taken_from_host`].
        needed: Vec<HostNeed>,
    },

    /// A bind record already holds the group (or one of its functions).
    #[error("IOMMU group {group} of {address} is already bound by vmgpu (record {}, for {device}): run `vmgpu unbind {device}` first", .record.display())]
    AlreadyBound {
        /// The device asked for.
        address: PciAddress,
        /// Its group.
        group: u32,
        /// The device the existing record was made for.
        device: PciAddress,
        /// The existing record.
        record: PathBuf,
    },

    /// `modprobe` failed.
    #[error("loading module {module}")]
    ModuleLoad {
        /// The module.
        module: &'static str,
        /// Why.
        #[source]
        source: io::Error,
    },

    /// The module loaded but its driver did not register.
    #[error("module {module} loaded but {path} did not appear")]
    DriverMissing {
        /// The module.
        module: &'static str,
        /// The driver directory expected.
        path: PathBuf,
    },

    /// A sysfs write failed.
    #[error("writing {value:?} to {path}")]
    Write {
        /// The attribute.
        path: PathBuf,
        /// What was written.
        value: String,
        /// Why it failed.
        #[source]
        source: io::Error,
    },

    /// Unloading a module this bind loaded failed.
    #[error("unloading module {module}")]
    ModuleUnload {
        /// The module.
        module: &'static str,
        /// Why.
        #[source]
        source: io::Error,
    },

    /// A device did not end up on the driver it should have.
    #[error("{address} is on {} after binding, expected {expected}", .actual.as_deref().unwrap_or("no driver"))]
    NotBound {
        /// The device.
        address: PciAddress,
        /// The driver wanted.
        expected: String,
        /// The driver it is on.
        actual: Option<String>,
    },

    /// Reading or writing the state directory failed.
    #[error("state file {path}")]
    State {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: io::Error,
    },

    /// A record is not valid JSON of the expected shape.
    #[error("state file {path}")]
    StateFormat {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: serde_json::Error,
    },

    /// No record names the device.
    #[error("no bind record for {address} in {}: it was not bound by vmgpu (or the record was removed)", .state_dir.display())]
    NoRecord {
        /// The device asked for.
        address: PciAddress,
        /// Where records were looked for.
        state_dir: PathBuf,
    },

    /// A bind failed and undoing it failed too; the record is kept for `unbind`.
    #[error("binding {address} failed, and rolling back did not finish: {}; the record {} is kept: run `vmgpu unbind {address}`", chains(.failures), .record.display())]
    RollbackIncomplete {
        /// The device.
        address: PciAddress,
        /// The record kept.
        record: PathBuf,
        /// What could not be undone.
        failures: Vec<BindError>,
        /// The failure that started the rollback.
        #[source]
        cause: Box<BindError>,
    },

    /// An unbind could not restore everything; the record is kept so it can be
    /// retried.
    #[error("restoring the drivers of {address} failed: {} (record kept in {})", chains(.failures), .record.display())]
    RestoreIncomplete {
        /// The device the record was made for.
        address: PciAddress,
        /// What could not be restored.
        failures: Vec<BindError>,
        /// The record kept.
        record: PathBuf,
    },
}

fn needs(needed: &[HostNeed]) -> String {
    needed
        .iter()
        .map(|n| format!("{} ({})", n.address, n.reason))
        .collect::<Vec<_>>()
        .join(", ")
}

fn checks(failed: &[Check]) -> String {
    failed
        .iter()
        .map(|c| format!("{}: {}", c.name, c.detail))
        .collect::<Vec<_>>()
        .join("; ")
}

/// An error and its sources, `A: B: C`.
fn chain(error: &BindError) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(e) = source {
        text.push_str(": ");
        text.push_str(&e.to_string());
        source = e.source();
    }
    text
}

fn chains(errors: &[BindError]) -> String {
    errors.iter().map(chain).collect::<Vec<_>>().join("; ")
}

/// One function that `bind` will move to vfio-pci.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PlannedFunction {
    /// The function.
    pub address: PciAddress,
    /// How it relates to the device asked for.
    pub role: MemberRole,
    /// Its driver now.
    pub driver: Option<String>,
    /// False when it is on vfio-pci already.
    pub rebind: bool,
}

/// What `bind` would do: the dry run shows exactly this.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct BindPlan {
    /// The device asked for.
    pub device: PciAddress,
    /// Its IOMMU group.
    pub iommu_group: u32,
    /// vfio-pci is not registered yet and will be loaded.
    pub load_vfio_pci: bool,
    /// Every endpoint of the group.
    pub functions: Vec<PlannedFunction>,
    /// Members the host needs; non-empty only when forced.
    pub taken_from_host: Vec<HostNeed>,
}

impl BindPlan {
    /// True when the whole group is on vfio-pci already.
    pub fn nothing_to_do(&self) -> bool {
        !self.load_vfio_pci && self.functions.iter().all(|f| !f.rebind)
    }
}

/// What a function had before `bind`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FunctionRecord {
    /// The function.
    pub address: PciAddress,
    /// Its driver before the bind.
    pub driver: Option<String>,
    /// Its `driver_override` before the bind.
    pub driver_override: Option<String>,
}

/// The state file: enough to put the host back as it was. Written before the
/// first change, so it also describes a bind that a crash interrupted.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BindRecord {
    /// The device `bind` was called with.
    pub device: PciAddress,
    /// Its IOMMU group.
    pub iommu_group: u32,
    /// This bind loads vfio-pci. The unbind of the last group vmgpu holds unloads
    /// it (when no device uses it), this one's or a later one's: when this record
    /// goes first, the fact moves to the state directory's marker
    /// ([`vfio_pci_marker_path`]).
    pub loaded_vfio_pci: bool,
    /// Every function the bind moves, with what it had before.
    pub functions: Vec<FunctionRecord>,
}

/// Decides what binding `address` takes. Refuses what `vmgpu check` fails: always
/// for a device that cannot be assigned, and, unless `force`, when the group holds
/// something the host needs ([`crate::check::taken_from_host`]).
pub fn plan_bind(host: &Host, address: PciAddress, force: bool) -> Result<BindPlan, BindError> {
    let assessment = assess(host, address)?;
    let group = assessment
        .iommu_group
        .ok_or(BindError::NoIommuGroup { address })?;
    let failed: Vec<Check> = assessment.unforceable_failures().cloned().collect();
    if !failed.is_empty() {
        return Err(BindError::NotAssignable { address, failed });
    }
    if !assessment.taken_from_host.is_empty() && !force {
        return Err(BindError::HostNeedsGroupMember {
            address,
            group,
            needed: assessment.taken_from_host,
        });
    }
    let functions = assessment
        .group
        .iter()
        .filter(|m| m.role != MemberRole::Bridge)
        .map(|m| PlannedFunction {
            address: m.address,
            role: m.role,
            driver: m.driver.clone(),
            rebind: m.driver.as_deref() != Some(VFIO_PCI),
        })
        .collect();
    Ok(BindPlan {
        device: address,
        iommu_group: group,
        load_vfio_pci: !vfio_pci_registered(host),
        functions,
        taken_from_host: assessment.taken_from_host,
    })
}

fn vfio_pci_registered(host: &Host) -> bool {
    host.sysfs().pci_driver(VFIO_PCI).is_dir()
}

/// What [`bind`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BindOutcome {
    /// The plan, made under the lock.
    pub plan: BindPlan,
    /// The record written; `None` when the group was on vfio-pci already and
    /// nothing was changed.
    pub record: Option<BindRecord>,
}

/// Binds `address` and the rest of its group to vfio-pci: under the state lock,
/// plans (refusing as [`plan_bind`] does, and when a record already holds the
/// group), records the original drivers in `state_dir`, loads vfio-pci if needed,
/// then moves every function. On failure everything done is undone before the
/// error is returned.
pub fn bind(
    host: &Host,
    kernel: &dyn Kernel,
    address: PciAddress,
    force: bool,
    state_dir: &Path,
) -> Result<BindOutcome, BindError> {
    let lock = StateLock::acquire(state_dir)?;
    let result = bind_locked(host, kernel, address, force, state_dir);
    lock.release();
    result
}

fn bind_locked(
    host: &Host,
    kernel: &dyn Kernel,
    address: PciAddress,
    force: bool,
    state_dir: &Path,
) -> Result<BindOutcome, BindError> {
    let plan = plan_bind(host, address, force)?;
    check_no_record_holds(state_dir, &plan)?;
    if plan.nothing_to_do() {
        log::info!(
            "{}: group {} already on vfio-pci",
            plan.device,
            plan.iommu_group
        );
        return Ok(BindOutcome { plan, record: None });
    }
    let sysfs = host.sysfs();
    let mut record = BindRecord {
        device: plan.device,
        iommu_group: plan.iommu_group,
        loaded_vfio_pci: plan.load_vfio_pci,
        functions: Vec::new(),
    };
    for f in &plan.functions {
        record.functions.push(FunctionRecord {
            address: f.address,
            // As the plan read it, a moment ago under the same lock.
            driver: f.driver.clone(),
            driver_override: read_driver_override(sysfs, &f.address)?,
        });
    }
    // The intent, before the first change.
    let record_path = record_path(state_dir, plan.device);
    create_record(&record_path, &record)?;

    let result = (|| {
        if plan.load_vfio_pci {
            kernel
                .load_module(VFIO_PCI)
                .map_err(|source| BindError::ModuleLoad {
                    module: VFIO_PCI,
                    source,
                })?;
        }
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
    })();
    match result {
        Ok(()) => Ok(BindOutcome {
            plan,
            record: Some(record),
        }),
        Err(cause) => {
            let failures = roll_back(host, kernel, &record);
            if failures.is_empty() {
                fs::remove_file(&record_path).map_err(|source| BindError::State {
                    path: record_path.clone(),
                    source,
                })?;
                Err(cause)
            } else {
                Err(BindError::RollbackIncomplete {
                    address: plan.device,
                    record: record_path,
                    failures,
                    cause: Box::new(cause),
                })
            }
        }
    }
}

/// Fails with [`BindError::AlreadyBound`] when a record in `state_dir` holds the
/// plan's group or one of its functions. [`bind`] calls it under the lock; a dry
/// run calls it to say what the bind would say.
pub fn check_no_record_holds(state_dir: &Path, plan: &BindPlan) -> Result<(), BindError> {
    for (path, record) in records(state_dir)? {
        let holds = record.iommu_group == plan.iommu_group
            || record
                .functions
                .iter()
                .any(|f| plan.functions.iter().any(|p| p.address == f.address));
        if holds {
            return Err(BindError::AlreadyBound {
                address: plan.device,
                group: plan.iommu_group,
                device: record.device,
                record: path,
            });
        }
    }
    Ok(())
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

/// Undoes a bind that failed: puts every function of `record` back, and unloads
/// vfio-pci if this bind loaded it and no device uses it (it was not registered
/// when the bind planned, under the lock, so no other bind holds it). Returns what
/// could not be undone; an empty list means the host is as it was.
fn roll_back(host: &Host, kernel: &dyn Kernel, record: &BindRecord) -> Vec<BindError> {
    let mut failures = restore_functions(host, kernel, record);
    if record.loaded_vfio_pci {
        if let Err(e) = unload_vfio_pci_if_unused(host, kernel) {
            failures.push(e);
        }
    }
    failures
}

/// Puts every function of `record` back on its original driver and override, from
/// any state a bind can leave, finished or interrupted. Returns what could not be
/// restored.
fn restore_functions(host: &Host, kernel: &dyn Kernel, record: &BindRecord) -> Vec<BindError> {
    record
        .functions
        .iter()
        .rev()
        .filter_map(|f| restore_function(host, kernel, f).err())
        .collect()
}

/// The devices bound to vfio-pci.
fn vfio_pci_users(host: &Host) -> Result<Vec<PciAddress>, BindError> {
    Ok(list_dir(&host.sysfs().pci_driver(VFIO_PCI))?
        .iter()
        .filter_map(|n| n.parse().ok())
        .collect())
}

/// Unloads vfio-pci unless it is not loaded or a device is bound to it.
fn unload_vfio_pci_if_unused(
    host: &Host,
    kernel: &dyn Kernel,
) -> Result<VfioPciRelease, BindError> {
    if !vfio_pci_registered(host) {
        return Ok(VfioPciRelease::NotLoaded);
    }
    let devices = vfio_pci_users(host)?;
    if !devices.is_empty() {
        log::info!(
            "{VFIO_PCI} stays loaded: {} not bound by vmgpu use it",
            list(&devices)
        );
        return Ok(VfioPciRelease::InUse { devices });
    }
    match kernel.unload_module(VFIO_PCI) {
        Ok(()) => {}
        // busybox's `modprobe -r` also tries the module's dependencies and fails
        // when one is still in use (vfio, held by vfio_iommu_type1), even though
        // vfio-pci itself went: what counts is that it is gone.
        Err(e) if !vfio_pci_registered(host) => {
            log::info!("{VFIO_PCI} unloaded ({e})");
        }
        Err(source) => {
            return Err(BindError::ModuleUnload {
                module: VFIO_PCI,
                source,
            })
        }
    }
    Ok(VfioPciRelease::Unloaded)
}

fn list(devices: &[PciAddress]) -> String {
    devices
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}

/// Restores one function, whatever state it is in: detaches it from a driver that
/// is not its original one, clears an override that would keep the original
/// driver from binding, binds the original driver, and only then writes the
/// recorded override back (an override set before the bind, e.g. `vfio-pci` on a
/// GPU still on `nvidia`, would otherwise make the original driver refuse it).
fn restore_function(host: &Host, kernel: &dyn Kernel, f: &FunctionRecord) -> Result<(), BindError> {
    let sysfs = host.sysfs();
    let bdf = f.address.to_string();
    let override_path = PciDevice::sysfs_dir(sysfs, &f.address).join("driver_override");
    // A lone newline clears the override.
    let write_override =
        |value: Option<&str>| write(kernel, override_path.clone(), value.unwrap_or("\n"));
    if let Some(current) = read_driver(sysfs, &f.address)? {
        if Some(&current) != f.driver.as_ref() {
            write(kernel, sysfs.pci_driver(&current).join("unbind"), &bdf)?;
        }
    }
    if let Some(original) = &f.driver {
        if read_driver(sysfs, &f.address)?.as_ref() != Some(original) {
            let current_override = read_driver_override(sysfs, &f.address)?;
            if current_override.is_some() && current_override.as_ref() != Some(original) {
                write_override(None)?;
            }
            let bind_path = sysfs.pci_driver(original).join("bind");
            if let Err(e) = write(kernel, bind_path, &bdf) {
                log::warn!("{}; asking the bus to probe {bdf} instead", chain(&e));
                write(kernel, sysfs.pci_bus().join("drivers_probe"), &bdf)?;
            }
            let actual = read_driver(sysfs, &f.address)?;
            if actual.as_ref() != Some(original) {
                return Err(BindError::NotBound {
                    address: f.address,
                    expected: original.clone(),
                    actual,
                });
            }
        }
    }
    if read_driver_override(sysfs, &f.address)? != f.driver_override {
        write_override(f.driver_override.as_deref())?;
    }
    log::info!(
        "{}: restored to {}",
        f.address,
        f.driver.as_deref().unwrap_or("no driver")
    );
    Ok(())
}

/// What became of vfio-pci in an [`unbind`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum VfioPciRelease {
    /// vfio-pci is not loaded.
    NotLoaded,
    /// vfio-pci stays loaded: no vmgpu bind loaded it (it was loaded before any).
    NotOurs,
    /// A vmgpu bind loaded vfio-pci and other vmgpu binds hold groups: it stays
    /// loaded, and the last of their unbinds unloads it.
    HeldByOtherBinds {
        /// The devices of the other records.
        devices: Vec<PciAddress>,
    },
    /// This was the last vmgpu bind, and a vmgpu bind loaded vfio-pci, but devices
    /// vmgpu did not bind use it: it stays loaded, and no unbind will unload it.
    InUse {
        /// The devices on vfio-pci.
        devices: Vec<PciAddress>,
    },
    /// This was the last vmgpu bind, and vfio-pci, which a vmgpu bind loaded, was
    /// unloaded.
    Unloaded,
}

/// What [`unbind`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnbindOutcome {
    /// The record restored (and removed).
    pub record: BindRecord,
    /// What became of vfio-pci.
    pub vfio_pci: VfioPciRelease,
}

/// Restores what `bind` recorded for `address` (the device it was called with, or
/// any function bound along with it) and removes the record. Also finishes a bind
/// that a crash interrupted at any step, and an unbind that a crash interrupted.
/// A call that finds no record changes nothing and leaves nothing behind.
///
/// vfio-pci: when a vmgpu bind loaded it (this record's `loaded_vfio_pci`, or the
/// marker of an earlier unbind) and this is the last record, it is unloaded
/// unless a device uses it; while other records remain it stays, and the fact is
/// handed to the marker before this record goes.
pub fn unbind(
    host: &Host,
    kernel: &dyn Kernel,
    address: PciAddress,
    state_dir: &Path,
) -> Result<UnbindOutcome, BindError> {
    if !exists(state_dir)? {
        return Err(BindError::NoRecord {
            address,
            state_dir: state_dir.to_path_buf(),
        });
    }
    let lock = StateLock::acquire(state_dir)?;
    let result = unbind_locked(host, kernel, address, state_dir);
    lock.release();
    result
}

fn unbind_locked(
    host: &Host,
    kernel: &dyn Kernel,
    address: PciAddress,
    state_dir: &Path,
) -> Result<UnbindOutcome, BindError> {
    let (path, record) = find_record(state_dir, address)?;
    let incomplete = |failures| BindError::RestoreIncomplete {
        address: record.device,
        failures,
        record: path.clone(),
    };
    let failures = restore_functions(host, kernel, &record);
    if !failures.is_empty() {
        return Err(incomplete(failures));
    }
    let others = other_records(state_dir, &path)?;
    let marker = vfio_pci_marker_path(state_dir);
    let marked = exists(&marker)?;
    let vfio_pci = if !vfio_pci_registered(host) {
        // Whoever loaded it, that vfio-pci is gone: nothing is owed any more.
        VfioPciRelease::NotLoaded
    } else if !others.is_empty() {
        if record.loaded_vfio_pci && !marked {
            // Hand the fact on before the record that carries it goes.
            write_marker(&marker, &record)?;
        }
        if record.loaded_vfio_pci || marked || others.iter().any(|o| o.loaded_vfio_pci) {
            VfioPciRelease::HeldByOtherBinds {
                devices: others.iter().filter_map(|o| o.device).collect(),
            }
        } else {
            VfioPciRelease::NotOurs
        }
    } else if record.loaded_vfio_pci || marked {
        unload_vfio_pci_if_unused(host, kernel).map_err(|e| incomplete(vec![e]))?
    } else {
        VfioPciRelease::NotOurs
    };
    // The marker goes after the unload it asks for, and before the last record.
    if marked && (others.is_empty() || vfio_pci == VfioPciRelease::NotLoaded) {
        fs::remove_file(&marker).map_err(|source| BindError::State {
            path: marker.clone(),
            source,
        })?;
    }
    fs::remove_file(&path).map_err(|source| BindError::State {
        path: path.clone(),
        source,
    })?;
    Ok(UnbindOutcome { record, vfio_pci })
}

/// A record other than the one being unbound, as far as the unbind needs it.
struct OtherRecord {
    /// Its device, from its content or else its name.
    device: Option<PciAddress>,
    loaded_vfio_pci: bool,
}

/// The records in `state_dir` other than `own`. Each one counts, readable or not
/// (as for the lock, which stays while one exists): a record that does not parse
/// must not keep this unbind from restoring its own group, nor make it the last.
fn other_records(state_dir: &Path, own: &Path) -> Result<Vec<OtherRecord>, BindError> {
    let mut out = Vec::new();
    for name in list_dir(state_dir)?.iter().filter(|n| is_record_name(n)) {
        let path = state_dir.join(name);
        if path == own {
            continue;
        }
        out.push(match load_record(&path) {
            Ok(r) => OtherRecord {
                device: Some(r.device),
                loaded_vfio_pci: r.loaded_vfio_pci,
            },
            Err(e) => {
                log::warn!("{}", chain(&e));
                OtherRecord {
                    device: name.trim_end_matches(".json").parse().ok(),
                    loaded_vfio_pci: false,
                }
            }
        });
    }
    Ok(out)
}

/// The marker that says vfio-pci was loaded by a vmgpu bind whose record is gone
/// while other records remain: the unbind of the last record unloads it. Its
/// presence is the fact; its text names the bind that loaded vfio-pci.
pub fn vfio_pci_marker_path(state_dir: &Path) -> PathBuf {
    state_dir.join("vfio-pci.loaded")
}

fn write_marker(path: &Path, record: &BindRecord) -> Result<(), BindError> {
    let text = format!(
        "{VFIO_PCI} was loaded by the vmgpu bind of {}; the unbind of the last vmgpu record unloads it\n",
        record.device
    );
    fs::write(path, text).map_err(|source| BindError::State {
        path: path.to_path_buf(),
        source,
    })
}

fn is_record_name(name: &str) -> bool {
    name.ends_with(".json")
}

/// The state directory's lock: serialises binds and unbinds on one host. Once
/// held, a vfio-pci marker without any record (records removed by hand) is
/// removed: it is stale, and a bind must not adopt it. On release the lock file
/// (and a state directory this lock created) is removed when no record remains,
/// so a command that changed nothing leaves nothing.
struct StateLock {
    file: Option<fs::File>,
    dir: PathBuf,
    path: PathBuf,
    created_dir: bool,
}

impl StateLock {
    fn acquire(state_dir: &Path) -> Result<Self, BindError> {
        let path = state_dir.join("lock");
        let state_error = |source| BindError::State {
            path: path.clone(),
            source,
        };
        let created_dir = !exists(state_dir)?;
        loop {
            fs::create_dir_all(state_dir).map_err(state_error)?;
            let file = match fs::OpenOptions::new()
                .create(true)
                .truncate(false)
                .write(true)
                .open(&path)
            {
                Ok(f) => f,
                // Removed by a holder releasing it between create_dir_all and open.
                Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
                Err(e) => return Err(state_error(e)),
            };
            file.lock().map_err(state_error)?;
            // A holder may have removed the file while we waited: then we hold a
            // lock on a file no one else will ever open. Start over.
            let held = file.metadata().map_err(state_error)?;
            match fs::metadata(&path) {
                Ok(now) if now.dev() == held.dev() && now.ino() == held.ino() => {
                    let lock = Self {
                        file: Some(file),
                        dir: state_dir.to_path_buf(),
                        path,
                        created_dir,
                    };
                    lock.forget_stale_marker()?;
                    return Ok(lock);
                }
                Ok(_) => continue,
                Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
                Err(e) => return Err(state_error(e)),
            }
        }
    }

    fn forget_stale_marker(&self) -> Result<(), BindError> {
        let names = list_dir(&self.dir)?;
        let marker = vfio_pci_marker_path(&self.dir);
        let marker_name = marker.file_name().and_then(|n| n.to_str());
        let stale = names.iter().any(|n| Some(n.as_str()) == marker_name)
            && !names.iter().any(|n| is_record_name(n));
        if stale {
            log::warn!(
                "{} without any bind record: removed (vmgpu will not unload {VFIO_PCI} for it)",
                marker.display()
            );
            fs::remove_file(&marker).map_err(|source| BindError::State {
                path: marker.clone(),
                source,
            })?;
        }
        Ok(())
    }

    fn release(mut self) {
        self.cleanup();
    }

    fn cleanup(&mut self) {
        let Some(file) = self.file.take() else {
            return;
        };
        let no_records = list_dir(&self.dir)
            .map(|names| !names.iter().any(|n| is_record_name(n)))
            .unwrap_or(false);
        if no_records {
            // Still holding the lock: waiters see the file gone and start over.
            let _ = fs::remove_file(&self.path);
            if self.created_dir {
                let _ = fs::remove_dir(&self.dir);
            }
        }
        drop(file);
    }
}

impl Drop for StateLock {
    fn drop(&mut self) {
        self.cleanup();
    }
}

/// Where the record of a bind of `device` is kept.
pub fn record_path(state_dir: &Path, device: PciAddress) -> PathBuf {
    state_dir.join(format!("{device}.json"))
}

/// Writes a new record; fails rather than overwrite one.
fn create_record(path: &Path, record: &BindRecord) -> Result<(), BindError> {
    let state_error = |source| BindError::State {
        path: path.to_path_buf(),
        source,
    };
    let text = serde_json::to_string_pretty(record).map_err(|source| BindError::StateFormat {
        path: path.to_path_buf(),
        source,
    })?;
    // Written whole under another name, then linked in place: a crash never leaves
    // half a record, and the link fails if a record is there.
    let tmp = path.with_extension("json.tmp");
    fs::write(&tmp, text + "\n").map_err(state_error)?;
    let linked = fs::hard_link(&tmp, path);
    let _ = fs::remove_file(&tmp);
    linked.map_err(state_error)
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

/// Every record in `state_dir`, by path.
fn records(state_dir: &Path) -> Result<Vec<(PathBuf, BindRecord)>, BindError> {
    let mut out = Vec::new();
    for name in list_dir(state_dir)?.iter().filter(|n| is_record_name(n)) {
        let path = state_dir.join(name);
        let record = load_record(&path)?;
        out.push((path, record));
    }
    Ok(out)
}

/// The record for `address`: its own, or the one of the device it was bound with.
pub fn find_record(
    state_dir: &Path,
    address: PciAddress,
) -> Result<(PathBuf, BindRecord), BindError> {
    let own = record_path(state_dir, address);
    if exists(&own)? {
        let record = load_record(&own)?;
        return Ok((own, record));
    }
    records(state_dir)?
        .into_iter()
        .find(|(_, r)| r.functions.iter().any(|f| f.address == address))
        .ok_or_else(|| BindError::NoRecord {
            address,
            state_dir: state_dir.to_path_buf(),
        })
}
