//! `vmgpu list`

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::Args;
use pcie::{Host, PciDevice};
use serde::Serialize;

use crate::Out;

#[derive(Args)]
pub struct ListArgs {
    /// List every PCI function, not only NVIDIA ones
    #[arg(long)]
    pub all: bool,
    /// Print JSON instead of a table
    #[arg(long)]
    json: bool,
}

/// The tree `vmgpu list` shows when it was not told where to look and the host has
/// no NVIDIA function: so a first run on a laptop or CI box shows what the tool does.
/// Normalised, so it prints as `.../fixtures/sysfs/dgx-h100`.
fn demo_tree() -> PathBuf {
    let tree = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/sysfs/dgx-h100");
    std::fs::canonicalize(&tree).unwrap_or_else(|_| normalise(&tree))
}

/// `path` with `.` and `..` components folded away, without touching the disk.
fn normalise(path: &Path) -> PathBuf {
    use std::path::Component;
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir => {
                if !out.pop() {
                    out.push("..");
                }
            }
            other => out.push(other),
        }
    }
    out
}

#[derive(Serialize)]
struct Listing<'a> {
    sysfs_root: &'a Path,
    /// True when the host had no NVIDIA device and the bundled demo tree is shown.
    demo: bool,
    devices: Vec<PciDevice>,
}

pub fn run(
    host: &Host,
    root_given: bool,
    args: &ListArgs,
    out: &mut Out,
) -> anyhow::Result<ExitCode> {
    let fallback_allowed = !root_given && !args.all;
    let mut devices = match host.devices() {
        // No PCI bus at all (a container): the demo host below says what vmgpu does.
        Err(pcie::Error::NoPciBus { .. } | pcie::Error::NoSysfsRoot { .. })
            if fallback_allowed && demo_tree().is_dir() =>
        {
            Vec::new()
        }
        other => other?,
    };
    let mut shown_host = host.clone();
    let mut demo = false;
    if fallback_allowed && !devices.iter().any(|d| d.nvidia.is_some()) {
        let tree = demo_tree();
        if tree.is_dir() {
            let _ = writeln!(
                std::io::stderr(),
                "vmgpu: no NVIDIA device under {}; showing the bundled demo host {} (use --sysfs to choose a tree)",
                host.sysfs().root().display(),
                tree.display()
            );
            shown_host = Host::new(&tree);
            devices = shown_host.devices()?;
            demo = true;
        }
    }
    if !args.all {
        devices.retain(|d| d.nvidia.is_some());
    }
    if args.json {
        crate::print_json(
            out,
            &Listing {
                sysfs_root: shown_host.sysfs().root(),
                demo,
                devices,
            },
        )?;
    } else {
        print_table(&devices, out);
    }
    Ok(ExitCode::SUCCESS)
}

fn print_table(devices: &[PciDevice], out: &mut Out) {
    let header = [
        "BDF", "KIND", "ARCH", "ID", "DRIVER", "GROUP", "NUMA", "LINK", "NAME",
    ];
    let rows: Vec<[String; 9]> = devices.iter().map(row).collect();
    let mut widths = header.map(str::len);
    for r in &rows {
        for (w, cell) in widths.iter_mut().zip(r.iter()) {
            *w = (*w).max(cell.len());
        }
    }
    let mut print = |cells: &[String]| {
        let line: Vec<String> = cells
            .iter()
            .zip(widths.iter())
            .enumerate()
            .map(|(i, (c, w))| {
                if i + 1 == cells.len() {
                    c.clone()
                } else {
                    format!("{c:<w$}")
                }
            })
            .collect();
        outln!(out, "{}", line.join("  ").trim_end());
    };
    print(&header.map(str::to_string));
    for r in &rows {
        print(r);
    }
    if devices.is_empty() {
        print(&["(no devices)".to_string()]);
    }
}

fn row(d: &PciDevice) -> [String; 9] {
    let dash = || "-".to_string();
    let kind = match &d.nvidia {
        Some(n) => n.function.to_string(),
        None => d
            .class_name
            .map_or_else(|| d.class.to_string(), str::to_string),
    };
    let link = d
        .link
        .and_then(|l| Some(format!("{} x{}", l.current_speed?, l.current_width?)));
    [
        d.address.to_string(),
        kind,
        d.nvidia
            .and_then(|n| n.architecture)
            .map_or_else(dash, |a| a.to_string()),
        format!("{:04x}:{:04x}", d.vendor_id, d.device_id),
        d.driver.clone().unwrap_or_else(dash),
        d.iommu_group.map_or_else(dash, |g| g.to_string()),
        d.numa_node.map_or_else(dash, |n| n.to_string()),
        link.unwrap_or_else(dash),
        d.device_name
            .map_or_else(|| d.display_name(), str::to_string),
    ]
}
