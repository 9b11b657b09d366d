//! The `vmgpu` command on the fixture hosts: output, JSON fields and exit codes.

use std::path::PathBuf;
use std::process::{Command, Output};

use serde_json::Value;

fn fixture(host: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../fixtures/sysfs")
        .join(host)
}

/// A state directory no test binds into: binds here are dry runs or refusals.
fn state_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("vmgpu-cli-state")
}

fn vmgpu(host: &str, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_vmgpu"))
        .arg("--sysfs")
        .arg(fixture(host))
        .args(args)
        .env_remove("VMGPU_SYSFS")
        .env_remove("VMGPU_MODULES")
        .env("VMGPU_STATE_DIR", state_dir())
        .output()
        .unwrap()
}

fn json(host: &str, args: &[&str]) -> Value {
    let out = vmgpu(host, args);
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// The entry of `check --json` output named `name`.
fn check_named<'a>(v: &'a Value, name: &str) -> &'a Value {
    v["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == name)
        .unwrap_or_else(|| panic!("no check named {name} in {v}"))
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn list_json_describes_the_dgx() {
    let v = json("dgx-h100", &["list", "--json"]);
    assert_eq!(v["demo"], false);
    let devices = v["devices"].as_array().unwrap();
    let of_kind = |kind: &str| {
        devices
            .iter()
            .filter(|d| d["nvidia"]["function"] == kind)
            .count()
    };
    assert_eq!(of_kind("gpu"), 8);
    assert_eq!(of_kind("nvswitch"), 4);
    assert_eq!(
        devices.len(),
        12,
        "without --all only NVIDIA functions are listed"
    );
    let gpus: Vec<&Value> = devices
        .iter()
        .filter(|d| d["nvidia"]["function"] == "gpu")
        .collect();
    for g in &gpus {
        assert_eq!(g["vendor_id"], "10de");
        assert_eq!(g["device_id"], "2330");
        assert_eq!(g["class"], "030200");
        assert_eq!(g["nvidia"]["architecture"], "hopper");
        assert_eq!(g["link"]["current_speed"], 32.0);
        assert_eq!(g["link"]["max_width"], 16);
        assert!(g["iommu_group"].is_u64());
    }
    let on_node = |n: u64| gpus.iter().filter(|g| g["numa_node"] == n).count();
    assert_eq!((on_node(0), on_node(1)), (4, 4));
    let bar1 = gpus[0]["bars"]
        .as_array()
        .unwrap()
        .iter()
        .find(|b| b["index"] == 1)
        .unwrap();
    assert_eq!(bar1["size"], 128u64 << 30);
    assert_eq!(
        (bar1["kind"].as_str(), bar1["prefetchable"].as_bool()),
        (Some("mem64"), Some(true))
    );
    assert_eq!(gpus.iter().filter(|g| g["driver"] == "vfio-pci").count(), 1);
}

#[test]
fn list_all_includes_other_vendors_and_table_has_a_row_per_device() {
    let all = json("dgx-h100", &["list", "--all", "--json"]);
    let devices = all["devices"].as_array().unwrap();
    assert!(
        devices.iter().any(|d| d["vendor_id"] == "15b3"),
        "ConnectX NICs are listed with --all"
    );
    let out = vmgpu("dgx-h100", &["list", "--all"]);
    assert!(out.status.success());
    let text = stdout(&out);
    assert_eq!(text.lines().count(), devices.len() + 1, "{text}");
    assert!(text.lines().next().unwrap().starts_with("BDF"));
}

#[test]
fn show_workstation_gpu() {
    let v = json("workstation", &["show", "0000:01:00.0", "--json"]);
    assert_eq!(v["address"], "0000:01:00.0");
    assert_eq!(v["nvidia"]["architecture"], "ada");
    assert_eq!(v["driver"], "nvidia");
    assert_eq!(v["numa_node"], Value::Null);
    assert_eq!(v["companions"], serde_json::json!(["0000:01:00.1"]));
    assert!(v["group_peers"]
        .as_array()
        .unwrap()
        .contains(&Value::from("0000:01:00.1")));
    assert_eq!(v["link"]["current_speed"], 2.5);
    assert_eq!(v["link"]["max_speed"], 16.0);
    let text = stdout(&vmgpu("workstation", &["show", "01:00.0"]));
    assert!(text.contains("reset_methods    bus"), "{text}");
    assert!(text.contains("companions       0000:01:00.1"), "{text}");
}

#[test]
fn check_exit_codes() {
    let ok = vmgpu("workstation", &["check", "0000:01:00.0"]);
    assert_eq!(ok.status.code(), Some(0), "{}", stdout(&ok));
    assert!(stdout(&ok).contains("can be assigned"));

    let shared = vmgpu("shared-group", &["check", "0000:06:00.0"]);
    assert_eq!(shared.status.code(), Some(1), "{}", stdout(&shared));
    assert!(
        stdout(&shared).contains("0000:07:00.0 (driver ahci)"),
        "{}",
        stdout(&shared)
    );

    let no_iommu = json_status("no-iommu");
    assert_eq!(no_iommu, Some(1));

    for bad in [
        vec!["check"],
        vec!["check", "01:00"],
        vec!["check", "0000:01:20.0"],
        vec!["bogus"],
    ] {
        let out = vmgpu("workstation", &bad);
        assert_eq!(out.status.code(), Some(2), "{bad:?}: {}", stderr(&out));
    }
    let missing = vmgpu("workstation", &["check", "0000:42:00.0"]);
    assert_eq!(missing.status.code(), Some(2));
    assert!(
        stderr(&missing).contains("0000:42:00.0"),
        "{}",
        stderr(&missing)
    );
}

fn json_status(host: &str) -> Option<i32> {
    let list = json(host, &["list", "--json"]);
    let gpu = list["devices"][0]["address"].as_str().unwrap().to_string();
    let out = vmgpu(host, &["check", &gpu, "--json"]);
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["assignable"], false);
    assert_eq!(check_named(&v, "iommu")["status"], "fail");
    out.status.code()
}

#[test]
fn check_json_lists_group_roles_and_blockers() {
    let out = vmgpu("shared-group", &["check", "0000:06:00.0", "--json"]);
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["assignable"], false);
    // The A2000 sits behind the chipset with its NIC, USB and SATA controllers.
    assert_eq!(
        v["blockers"],
        serde_json::json!([
            {"address": "0000:04:00.0", "driver": "igb"},
            {"address": "0000:05:00.0", "driver": "xhci_hcd"},
            {"address": "0000:07:00.0", "driver": "ahci"},
        ])
    );
    assert_eq!(check_named(&v, "iommu_group")["status"], "fail");
    // `bind` refuses the boot display without --force, so `check` fails it (it
    // was a warning while bind refused: defect 3).
    assert_eq!(check_named(&v, "boot_display")["status"], "fail");
    assert_eq!(check_named(&v, "taken_from_host")["status"], "fail");
    let role = |bdf: &str| {
        v["group"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["address"] == bdf)
            .map(|m| m["role"].clone())
    };
    assert_eq!(role("0000:06:00.0"), Some("target".into()));
    assert_eq!(role("0000:06:00.1"), Some("companion".into()));
    assert_eq!(role("0000:07:00.0"), Some("other".into()));

    let dgx = json("dgx-h100", &["list", "--json"]);
    let gpu = dgx["devices"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["driver"] == "nvidia" && d["nvidia"]["function"] == "gpu")
        .unwrap();
    let v = json(
        "dgx-h100",
        &["check", gpu["address"].as_str().unwrap(), "--json"],
    );
    assert_eq!(v["assignable"], true);
    assert_eq!(check_named(&v, "interrupt_remapping")["status"], "pass");
    assert_eq!(check_named(&v, "vfio_pci")["status"], "pass");
    assert_eq!(
        check_named(&v, "bars")["status"],
        "warn",
        "128 GiB BAR1 exceeds OVMF's default 64-bit window"
    );
}

#[test]
fn bind_dry_run_and_refusal() {
    let v = json(
        "workstation",
        &["bind", "0000:01:00.0", "--dry-run", "--json"],
    );
    assert_eq!(v["dry_run"], true);
    assert_eq!(v["plan"]["load_vfio_pci"], true);
    let functions: Vec<&str> = v["plan"]["functions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["address"].as_str().unwrap())
        .collect();
    assert_eq!(functions, ["0000:01:00.0", "0000:01:00.1"]);
    assert_eq!(v["record"], Value::Null);

    let refused = vmgpu("shared-group", &["bind", "0000:06:00.0", "--dry-run"]);
    assert_eq!(refused.status.code(), Some(1));
    let err = stderr(&refused);
    assert!(
        err.contains("0000:07:00.0") && err.contains("--force"),
        "{err}"
    );

    let forced = json(
        "shared-group",
        &["bind", "0000:06:00.0", "--dry-run", "--force", "--json"],
    );
    let taken: Vec<&str> = forced["plan"]["taken_from_host"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["address"].as_str().unwrap())
        .collect();
    // The NIC and USB controller are separate devices on host drivers: they are
    // taken from the host too, and reported (they went silently before).
    assert_eq!(
        taken,
        ["0000:04:00.0", "0000:05:00.0", "0000:06:00.0", "0000:07:00.0"]
    );
}

#[test]
fn unbind_without_record_names_device_and_state_dir() {
    let out = vmgpu("workstation", &["unbind", "0000:01:00.0"]);
    assert_eq!(out.status.code(), Some(1));
    let err = stderr(&out);
    assert!(
        err.contains("0000:01:00.0") && err.contains(state_dir().to_str().unwrap()),
        "{err}"
    );
}

#[test]
fn check_looks_for_vfio_pci_in_the_modules_dir() {
    let modules = tempfile::tempdir().unwrap();
    let dir = modules.path().to_str().unwrap();
    let status_of = |out: &Output| -> (Option<i32>, Value) {
        let v: Value = serde_json::from_slice(&out.stdout).unwrap();
        (out.status.code(), check_named(&v, "vfio_pci").clone())
    };

    let (code, check) = status_of(&vmgpu(
        "workstation",
        &["--modules", dir, "check", "01:00.0", "--json"],
    ));
    assert_eq!((code, check["status"].as_str()), (Some(1), Some("fail")));
    assert!(check["detail"].as_str().unwrap().contains(dir));

    std::fs::write(
        modules.path().join("modules.dep"),
        "kernel/drivers/vfio/pci/vfio-pci.ko.xz: kernel/drivers/vfio/pci/vfio-pci-core.ko.xz kernel/drivers/vfio/vfio.ko.xz\n",
    )
    .unwrap();
    let (code, check) = status_of(&vmgpu(
        "workstation",
        &["--modules", dir, "check", "01:00.0", "--json"],
    ));
    assert_eq!((code, check["status"].as_str()), (Some(0), Some("pass")));
    assert!(check["detail"]
        .as_str()
        .unwrap()
        .ends_with("kernel/drivers/vfio/pci/vfio-pci.ko.xz"));
}

#[test]
fn list_without_a_tree_falls_back_to_the_demo_host_only_without_nvidia() {
    let out = Command::new(env!("CARGO_BIN_EXE_vmgpu"))
        .args(["list", "--json"])
        .env_remove("VMGPU_SYSFS")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let host_has_nvidia = pcie::Host::new("/sys")
        .devices()
        .unwrap()
        .iter()
        .any(|d| d.nvidia.is_some());
    assert_eq!(v["demo"], !host_has_nvidia);
    if host_has_nvidia {
        assert_eq!(v["sysfs_root"], "/sys");
    } else {
        assert!(v["sysfs_root"]
            .as_str()
            .unwrap()
            .ends_with("fixtures/sysfs/dgx-h100"));
        assert_eq!(v["devices"].as_array().unwrap().len(), 12);
        assert!(
            stderr(&out).contains("no NVIDIA device under /sys"),
            "{}",
            stderr(&out)
        );
    }
}
