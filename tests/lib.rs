//! Helpers shared by the end-to-end suites.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The repository's `fixtures/` directory.
pub fn fixtures_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures")
}

/// Every fixture sysfs tree, by host name.
pub fn fixture_trees() -> Vec<(String, PathBuf)> {
    let dir = fixtures_dir().join("sysfs");
    let mut trees: Vec<(String, PathBuf)> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .filter_map(|e| e.ok())
        .filter(|e| e.path().join("bus/pci/devices").is_dir())
        .map(|e| (e.file_name().to_string_lossy().into_owned(), e.path()))
        .collect();
    trees.sort();
    trees
}

/// One device as `lspci -vmm` prints it: field name to value.
pub type LspciRecord = BTreeMap<String, String>;

/// Runs Debian's lspci on the sysfs tree at `root` in machine-readable verbose
/// mode and returns its records keyed by slot.
pub fn lspci_records(root: &Path) -> BTreeMap<String, LspciRecord> {
    let path = root.join("bus/pci");
    let out = Command::new("lspci")
        .args(["-A", "linux-sysfs", "-O"])
        .arg(format!("sysfs.path={}", path.display()))
        .args(["-D", "-nn", "-k", "-vmm"])
        .output()
        .expect("lspci (Debian's pciutils) must be installed: the test script installs it");
    assert!(
        out.status.success(),
        "lspci failed on {}: {}",
        root.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    parse_lspci_vmm(&String::from_utf8_lossy(&out.stdout))
}

/// Parses `lspci -vmm` output: blank-line separated records of `Field:\tvalue`.
pub fn parse_lspci_vmm(text: &str) -> BTreeMap<String, LspciRecord> {
    let mut records = BTreeMap::new();
    for block in text.split("\n\n") {
        let record: LspciRecord = block
            .lines()
            .filter_map(|l| l.split_once(":\t"))
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        if let Some(slot) = record.get("Slot") {
            records.insert(slot.clone(), record);
        }
    }
    records
}

/// The bracketed id at the end of an `-nn` field: `NVIDIA Corporation [10de]` -> `10de`.
pub fn bracket_id(value: &str) -> Option<&str> {
    let start = value.rfind('[')?;
    value[start + 1..].strip_suffix(']')
}

/// What `lspci -vv` shows of one device that we compare: regions and link lines.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct LspciDetail {
    /// `Region N: ... [size=16M]` lines as `(N, description)`, e.g.
    /// `(1, "Memory 64-bit prefetchable 128G")`.
    pub regions: Vec<(u8, String)>,
    /// `LnkCap` speed (GT/s) and width.
    pub link_cap: Option<(f64, u8)>,
    /// `LnkSta` speed (GT/s) and width.
    pub link_sta: Option<(f64, u8)>,
}

/// Runs `lspci -vv` on the tree at `root`, keyed by slot.
pub fn lspci_details(root: &Path) -> BTreeMap<String, LspciDetail> {
    let out = Command::new("lspci")
        .args(["-A", "linux-sysfs", "-O"])
        .arg(format!("sysfs.path={}", root.join("bus/pci").display()))
        .args(["-D", "-vv"])
        .output()
        .expect("lspci must be installed");
    assert!(
        out.status.success(),
        "lspci -vv failed on {}",
        root.display()
    );
    parse_lspci_vv(&String::from_utf8_lossy(&out.stdout))
}

/// Parses the parts of `lspci -vv` that [`LspciDetail`] holds.
pub fn parse_lspci_vv(text: &str) -> BTreeMap<String, LspciDetail> {
    let mut details = BTreeMap::new();
    let mut current: Option<(String, LspciDetail)> = None;
    for line in text.lines() {
        if !line.starts_with(char::is_whitespace) && !line.is_empty() {
            if let Some((slot, d)) = current.take() {
                details.insert(slot, d);
            }
            let slot = line
                .split_whitespace()
                .next()
                .unwrap_or_default()
                .to_string();
            current = Some((slot, LspciDetail::default()));
            continue;
        }
        let Some((_, d)) = current.as_mut() else {
            continue;
        };
        let line = line.trim();
        if let Some(rest) = line.strip_prefix("Region ") {
            if let Some(region) = parse_region(rest) {
                d.regions.push(region);
            }
        } else if let Some(rest) = line.strip_prefix("LnkCap:") {
            d.link_cap = parse_speed_width(rest);
        } else if let Some(rest) = line.strip_prefix("LnkSta:") {
            d.link_sta = parse_speed_width(rest);
        }
    }
    if let Some((slot, d)) = current {
        details.insert(slot, d);
    }
    details
}

fn parse_region(rest: &str) -> Option<(u8, String)> {
    let (index, body) = rest.split_once(':')?;
    let size = body.split("[size=").nth(1)?.split(']').next()?;
    let kind = if body.contains("I/O ports") {
        "I/O".to_string()
    } else {
        let bits = if body.contains("64-bit") {
            "64-bit"
        } else {
            "32-bit"
        };
        let pref = if body.contains(", prefetchable") {
            " prefetchable"
        } else {
            ""
        };
        format!("Memory {bits}{pref}")
    };
    Some((index.trim().parse().ok()?, format!("{kind} {size}")))
}

fn parse_speed_width(rest: &str) -> Option<(f64, u8)> {
    let speed = rest
        .split("Speed ")
        .nth(1)?
        .split("GT/s")
        .next()?
        .trim()
        .parse()
        .ok()?;
    let width = rest.split("Width x").nth(1)?;
    let width = width
        .split(|c: char| !c.is_ascii_digit())
        .next()?
        .parse()
        .ok()?;
    Some((speed, width))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_vmm_records_and_ids() {
        let text = "Slot:\t0000:1b:00.0\nClass:\t3D controller [0302]\nVendor:\tNVIDIA Corporation [10de]\n\
                    Device:\tGH100 [H100 SXM5 80GB] [2330]\nRev:\ta1\nDriver:\tnvidia\n\n\
                    Slot:\t0000:00:00.0\nClass:\tHost bridge [0600]\n";
        let r = parse_lspci_vmm(text);
        assert_eq!(r.len(), 2);
        let gpu = &r["0000:1b:00.0"];
        assert_eq!(bracket_id(&gpu["Device"]), Some("2330"));
        assert_eq!(gpu["Driver"], "nvidia");
        assert_eq!(bracket_id("no id"), None);
    }

    #[test]
    fn parses_vv_regions_and_links() {
        let text = "0000:1b:00.0 3D controller: NVIDIA Corporation GH100 (rev a1)\n\
                    \tRegion 0: Memory at 9c000000 (32-bit, non-prefetchable) [size=16M]\n\
                    \tRegion 1: Memory at 200000000000 (64-bit, prefetchable) [size=128G]\n\
                    \tRegion 5: I/O ports at 3000 [size=128]\n\
                    \t\tLnkCap:\tPort #0, Speed 32GT/s, Width x16, ASPM not supported\n\
                    \t\tLnkSta:\tSpeed 2.5GT/s (downgraded), Width x16 (ok)\n\
                    0000:00:00.0 Host bridge: Intel Corporation Device 0d57\n";
        let d = parse_lspci_vv(text);
        let gpu = &d["0000:1b:00.0"];
        assert_eq!(
            gpu.regions,
            [
                (0, "Memory 32-bit 16M".to_string()),
                (1, "Memory 64-bit prefetchable 128G".to_string()),
                (5, "I/O 128".to_string())
            ]
        );
        assert_eq!(gpu.link_cap, Some((32.0, 16)));
        assert_eq!(gpu.link_sta, Some((2.5, 16)));
        assert_eq!(d["0000:00:00.0"], LspciDetail::default());
    }
}
