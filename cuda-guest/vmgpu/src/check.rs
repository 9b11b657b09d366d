//! `vmgpu check BDF`

use std::process::ExitCode;

use clap::Args;
use pcie::check::{assess, CheckStatus};
use pcie::{Host, PciAddress};

use crate::Out;

#[derive(Args)]
pub struct CheckArgs {
    /// PCI address, e.g. 0000:1b:00.0
    #[arg(value_parser = crate::parse_address)]
    bdf: PciAddress,
    /// Print JSON
    #[arg(long)]
    json: bool,
}

pub fn run(host: &Host, args: &CheckArgs, out: &mut Out) -> anyhow::Result<ExitCode> {
    let assessment = assess(host, args.bdf)?;
    if args.json {
        crate::print_json(out, &assessment)?;
    } else {
        for c in &assessment.checks {
            let mark = match c.status {
                CheckStatus::Pass => "ok  ",
                CheckStatus::Warn => "warn",
                CheckStatus::Fail => "FAIL",
            };
            outln!(out, "{mark}  {:<20} {}", c.name, c.detail);
        }
        let only_forceable = assessment.unforceable_failures().next().is_none();
        outln!(
            out,
            "{}: {}",
            assessment.device,
            if assessment.assignable {
                "can be assigned to a VM"
            } else if only_forceable {
                "cannot be assigned to a VM without taking what the host needs (`vmgpu bind --force` would take it)"
            } else {
                "cannot be assigned to a VM"
            }
        );
    }
    Ok(if assessment.assignable {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}
