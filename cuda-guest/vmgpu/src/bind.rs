//! `vmgpu bind BDF` and `vmgpu unbind BDF`

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;
use pcie::bind::{self, BindPlan, BindRecord, VfioPciRelease, DEFAULT_STATE_DIR};
use pcie::kernel::SysfsKernel;
use pcie::{Host, PciAddress};
use serde::Serialize;

use crate::Out;

#[derive(Args)]
pub struct BindArgs {
    /// PCI address, e.g. 0000:1b:00.0
    #[arg(value_parser = crate::parse_address)]
    bdf: PciAddress,
    /// Show what would be done, change nothing
    #[arg(long)]
    dry_run: bool,
    /// Take group members the host needs (storage, an active NIC, a display)
    #[arg(long)]
    force: bool,
    /// Print JSON
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    state: StateDir,
}

#[derive(Args)]
pub struct UnbindArgs {
    /// PCI address given to `bind`, or any function bound along with it
    #[arg(value_parser = crate::parse_address)]
    bdf: PciAddress,
    /// Print JSON
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    state: StateDir,
}

#[derive(Args)]
struct StateDir {
    /// Where bind records (the original drivers) are kept
    #[arg(long, env = "VMGPU_STATE_DIR", default_value = DEFAULT_STATE_DIR, value_name = "DIR")]
    state_dir: PathBuf,
}

#[derive(Serialize)]
struct BindOutput<'a> {
    dry_run: bool,
    plan: &'a BindPlan,
    /// Absent on a dry run.
    #[serde(skip_serializing_if = "Option::is_none")]
    record: Option<&'a BindRecord>,
}

pub fn run_bind(host: &Host, args: &BindArgs, out: &mut Out) -> anyhow::Result<ExitCode> {
    let (plan, record) = if args.dry_run {
        let plan = bind::plan_bind(host, args.bdf, args.force)?;
        bind::check_no_record_holds(&args.state.state_dir, &plan)?;
        (plan, None)
    } else {
        let outcome = bind::bind(
            host,
            &SysfsKernel,
            args.bdf,
            args.force,
            &args.state.state_dir,
        )?;
        (outcome.plan, outcome.record)
    };
    if args.json {
        crate::print_json(
            out,
            &BindOutput {
                dry_run: args.dry_run,
                plan: &plan,
                record: record.as_ref(),
            },
        )?;
        return Ok(ExitCode::SUCCESS);
    }
    let verb = if args.dry_run { "would bind" } else { "bound" };
    if plan.nothing_to_do() {
        outln!(
            out,
            "{}: IOMMU group {} is already on vfio-pci",
            plan.device,
            plan.iommu_group
        );
        return Ok(ExitCode::SUCCESS);
    }
    if plan.load_vfio_pci {
        outln!(
            out,
            "{} load vfio-pci",
            if args.dry_run { "would" } else { "did" }
        );
    }
    for f in &plan.functions {
        let from = f.driver.as_deref().unwrap_or("no driver");
        if f.rebind {
            outln!(out, "{verb} {} ({}) {from} -> vfio-pci", f.address, f.role);
        } else {
            outln!(out, "{} already on vfio-pci", f.address);
        }
    }
    for need in &plan.taken_from_host {
        outln!(
            out,
            "warning: {} taken from the host: {}",
            need.address,
            need.reason
        );
    }
    if record.is_some() {
        outln!(
            out,
            "record: {}",
            bind::record_path(&args.state.state_dir, plan.device).display()
        );
    }
    Ok(ExitCode::SUCCESS)
}

pub fn run_unbind(host: &Host, args: &UnbindArgs, out: &mut Out) -> anyhow::Result<ExitCode> {
    let outcome = bind::unbind(host, &SysfsKernel, args.bdf, &args.state.state_dir)?;
    if args.json {
        crate::print_json(out, &outcome.record)?;
        return Ok(ExitCode::SUCCESS);
    }
    for f in &outcome.record.functions {
        let to = f.driver.as_deref().unwrap_or("no driver");
        outln!(out, "restored {} -> {to}", f.address);
    }
    let list = |devices: &[PciAddress]| match devices {
        // Only records that do not parse, under names that are no address.
        [] => "other groups".to_string(),
        _ => devices
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join(", "),
    };
    match &outcome.vfio_pci {
        VfioPciRelease::Unloaded => outln!(out, "unloaded vfio-pci"),
        VfioPciRelease::HeldByOtherBinds { devices } => outln!(
            out,
            "vfio-pci stays loaded while vmgpu holds {}: the last unbind unloads it",
            list(devices)
        ),
        VfioPciRelease::InUse { devices } => outln!(
            out,
            "vfio-pci stays loaded, in use by {} (not bound by vmgpu)",
            list(devices)
        ),
        // Not loaded, or loaded before vmgpu: nothing to say.
        _ => {}
    }
    Ok(ExitCode::SUCCESS)
}
