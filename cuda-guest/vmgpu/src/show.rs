//! `vmgpu show BDF`

use std::process::ExitCode;

use clap::Args;
use pcie::bar::format_size;
use pcie::{BarKind, Host, PciAddress, PciDevice};
use serde::Serialize;

use crate::Out;

#[derive(Args)]
pub struct ShowArgs {
    /// PCI address, e.g. 0000:1b:00.0
    #[arg(value_parser = crate::parse_address)]
    bdf: PciAddress,
    /// Print JSON
    #[arg(long)]
    json: bool,
}

#[derive(Serialize)]
struct Shown {
    #[serde(flatten)]
    device: PciDevice,
    /// Other members of the IOMMU group.
    group_peers: Vec<PciAddress>,
    /// Other functions of the same slot.
    companions: Vec<PciAddress>,
    /// Enabled SR-IOV virtual functions (of a PF).
    virtual_functions: Vec<PciAddress>,
}

pub fn run(host: &Host, args: &ShowArgs, out: &mut Out) -> anyhow::Result<ExitCode> {
    let device = host.device(args.bdf)?;
    let group_peers = match device.iommu_group {
        Some(id) => host
            .group(id)?
            .devices
            .into_iter()
            .filter(|a| *a != args.bdf)
            .collect(),
        None => Vec::new(),
    };
    let companions = host.companions(args.bdf)?;
    let virtual_functions = host.virtual_functions(args.bdf)?;
    let shown = Shown {
        device,
        group_peers,
        companions,
        virtual_functions,
    };
    if args.json {
        crate::print_json(out, &shown)?;
    } else {
        print_text(&shown, out);
    }
    Ok(ExitCode::SUCCESS)
}

fn print_text(s: &Shown, out: &mut Out) {
    let d = &s.device;
    let or_none = |v: Option<String>| v.unwrap_or_else(|| "none".to_string());
    let list = |v: &[PciAddress]| {
        if v.is_empty() {
            "none".to_string()
        } else {
            v.iter()
                .map(|a| a.to_string())
                .collect::<Vec<_>>()
                .join(" ")
        }
    };
    outln!(out, "{}  {}", d.address, d.display_name());
    let mut field = |k: &str, v: String| outln!(out, "  {k:<16} {v}");
    field(
        "ids",
        format!(
            "{:04x}:{:04x} subsystem {:04x}:{:04x} rev {:02x}",
            d.vendor_id, d.device_id, d.subsystem_vendor_id, d.subsystem_device_id, d.revision
        ),
    );
    field(
        "class",
        format!("{} {}", d.class, d.class_name.unwrap_or("")),
    );
    if let Some(sub) = d.subsystem_name {
        field("subsystem", sub.to_string());
    }
    if let Some(n) = &d.nvidia {
        let arch = n.architecture.map_or(String::new(), |a| format!(", {a}"));
        field("nvidia", format!("{}{arch}", n.function));
    }
    field("driver", or_none(d.driver.clone()));
    field("driver_override", or_none(d.driver_override.clone()));
    field("iommu_group", or_none(d.iommu_group.map(|g| g.to_string())));
    field("group_peers", list(&s.group_peers));
    field("companions", list(&s.companions));
    field("numa_node", or_none(d.numa_node.map(|n| n.to_string())));
    field("local_cpus", or_none(d.local_cpulist.clone()));
    field("link", or_none(d.link.map(|l| l.to_string())));
    field(
        "reset_methods",
        match &d.reset_methods {
            Some(m) if m.is_empty() => "none".to_string(),
            Some(m) => m.join(" "),
            None => "not reported by this kernel (reset_method needs Linux 5.15)".to_string(),
        },
    );
    if let Some(sriov) = d.sriov {
        field(
            "sriov",
            format!("{} of {} VFs enabled", sriov.num_vfs, sriov.total_vfs),
        );
    }
    if !s.virtual_functions.is_empty() {
        field("virtual_fns", list(&s.virtual_functions));
    }
    if let Some(pf) = d.physical_function {
        field(
            "physical_fn",
            format!("{pf} (this is an SR-IOV virtual function)"),
        );
    }
    for bar in &d.bars {
        let kind = match bar.kind {
            BarKind::Io => "io",
            BarKind::Mem32 => "mem 32-bit",
            BarKind::Mem64 => "mem 64-bit",
        };
        let pref = if bar.prefetchable {
            " prefetchable"
        } else {
            ""
        };
        field(
            &format!("bar{}", bar.index),
            format!("{:#x} {} {kind}{pref}", bar.start, format_size(bar.size)),
        );
    }
}
