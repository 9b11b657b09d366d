//! Our enumeration agrees with Debian's lspci reading the same sysfs tree: every
//! fixture and the machine's own /sys.

use std::path::Path;

use pcie::BarKind;
use pcie::Host;
use vmgpu_tests::{bracket_id, fixture_trees, lspci_details, lspci_records, LspciDetail};

/// Compares one tree; returns the mismatches, one line each.
fn compare(root: &Path) -> (usize, Vec<String>) {
    let ours = Host::new(root)
        .devices()
        .unwrap_or_else(|e| panic!("{}: {e}", root.display()));
    let theirs = lspci_records(root);
    let mut errors = Vec::new();
    let our_slots: Vec<String> = ours.iter().map(|d| d.address.to_string()).collect();
    let their_slots: Vec<String> = theirs.keys().cloned().collect();
    if our_slots != their_slots {
        errors.push(format!(
            "slots differ: ours {our_slots:?}, lspci {their_slots:?}"
        ));
    }
    for d in &ours {
        let slot = d.address.to_string();
        let Some(r) = theirs.get(&slot) else { continue };
        let field = |name: &str| r.get(name).map(String::as_str);
        let id = |name: &str| field(name).and_then(bracket_id).map(str::to_string);
        let mut expect = |what: &str, ours: Option<String>, theirs: Option<String>| {
            if ours != theirs {
                errors.push(format!("{slot} {what}: ours {ours:?}, lspci {theirs:?}"));
            }
        };
        expect(
            "class",
            Some(format!("{:04x}", d.class.0 >> 8)),
            id("Class"),
        );
        expect(
            "prog-if",
            Some(format!("{:02x}", d.class.prog_if())),
            field("ProgIf").map(str::to_string),
        );
        expect("vendor", Some(format!("{:04x}", d.vendor_id)), id("Vendor"));
        expect("device", Some(format!("{:04x}", d.device_id)), id("Device"));
        // lspci leaves out an all-zero subsystem and a zero revision.
        let has_subsystem = d.subsystem_vendor_id != 0 || d.subsystem_device_id != 0;
        let subsystem = |v: u16| has_subsystem.then(|| format!("{v:04x}"));
        expect(
            "subsystem vendor",
            subsystem(d.subsystem_vendor_id),
            id("SVendor"),
        );
        expect(
            "subsystem device",
            subsystem(d.subsystem_device_id),
            id("SDevice"),
        );
        expect(
            "revision",
            (d.revision != 0).then(|| format!("{:02x}", d.revision)),
            field("Rev").map(str::to_string),
        );
        expect(
            "driver",
            d.driver.clone(),
            field("Driver").map(str::to_string),
        );
        expect(
            "numa node",
            d.numa_node.map(|n| n.to_string()),
            field("NUMANode").map(str::to_string),
        );
        expect(
            "iommu group",
            d.iommu_group.map(|g| g.to_string()),
            field("IOMMUGroup").map(str::to_string),
        );
    }
    errors.extend(compare_details(root, &ours));
    (ours.len(), errors)
}

/// Regions and link state against `lspci -vv`, which reads them from config space.
fn compare_details(root: &Path, ours: &[pcie::PciDevice]) -> Vec<String> {
    let theirs = lspci_details(root);
    let mut errors = Vec::new();
    for d in ours {
        let slot = d.address.to_string();
        let Some(t) = theirs.get(&slot) else { continue };
        let regions: Vec<(u8, String)> = d
            .bars
            .iter()
            .map(|b| {
                let kind = match b.kind {
                    BarKind::Io => "I/O".to_string(),
                    BarKind::Mem32 | BarKind::Mem64 => format!(
                        "Memory {}{}",
                        if b.is_64bit() { "64-bit" } else { "32-bit" },
                        if b.prefetchable { " prefetchable" } else { "" }
                    ),
                };
                (b.index, format!("{kind} {}", lspci_size(b.size)))
            })
            .collect();
        let link = |speed: Option<pcie::LinkSpeed>, width: Option<u8>| Some((speed?.gts(), width?));
        let ours_detail = LspciDetail {
            regions,
            link_cap: d.link.and_then(|l| link(l.max_speed, l.max_width)),
            link_sta: d.link.and_then(|l| link(l.current_speed, l.current_width)),
        };
        if &ours_detail != t {
            errors.push(format!("{slot} -vv: ours {ours_detail:?}, lspci {t:?}"));
        }
    }
    errors
}

/// lspci's size notation: the largest unit that divides exactly.
fn lspci_size(mut size: u64) -> String {
    let mut unit = 0;
    while unit < 4 && size.is_multiple_of(1024) {
        size /= 1024;
        unit += 1;
    }
    format!("{size}{}", ["", "K", "M", "G", "T"][unit])
}

#[test]
fn every_fixture_matches_lspci() {
    let trees = fixture_trees();
    assert!(
        trees.len() >= 4,
        "expected at least 4 fixture trees, found {trees:?}"
    );
    let mut failures = Vec::new();
    for (name, root) in &trees {
        let (count, errors) = compare(root);
        assert!(count > 0, "{name}: no devices");
        eprintln!(
            "{name}: {count} devices compared with lspci, {} mismatches",
            errors.len()
        );
        failures.extend(errors.into_iter().map(|e| format!("{name}: {e}")));
    }
    assert!(failures.is_empty(), "mismatches:\n{}", failures.join("\n"));
}

#[test]
fn real_sysfs_matches_lspci() {
    let root = Path::new("/sys");
    assert!(
        root.join("bus/pci/devices").is_dir(),
        "this machine has no /sys/bus/pci"
    );
    let (count, errors) = compare(root);
    eprintln!("/sys: {count} devices compared with lspci");
    assert!(count > 0, "no PCI devices in /sys");
    assert!(errors.is_empty(), "mismatches:\n{}", errors.join("\n"));
}
