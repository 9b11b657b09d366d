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
}
