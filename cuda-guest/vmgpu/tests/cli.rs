//! The `vmgpu` command on the fixture hosts: output, JSON fields and exit codes.

use std::path::PathBuf;
use std::process::{Command, Output};

use serde_json::Value;

fn fixture(host: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../fixtures/sysfs")
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
        [
            "0000:04:00.0",
            "0000:05:00.0",
            "0000:06:00.0",
            "0000:07:00.0"
        ]
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
        let root = v["sysfs_root"].as_str().unwrap();
        assert!(root.ends_with("fixtures/sysfs/dgx-h100"), "{root}");
        // Normalised: no `vmgpu/../` in the path shown.
        assert!(!root.contains("/../"), "{root}");
        assert_eq!(
            Some(PathBuf::from(root)),
            std::fs::canonicalize(fixture("dgx-h100")).ok(),
        );
        assert!(!stderr(&out).contains("/../"), "{}", stderr(&out));
        assert_eq!(v["devices"].as_array().unwrap().len(), 12);
        assert!(
            stderr(&out).contains("no NVIDIA device under /sys"),
            "{}",
            stderr(&out)
        );
    }
}

/// Runs vmgpu on an arbitrary root with a given state directory.
fn vmgpu_at(root: &std::path::Path, state: &std::path::Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_vmgpu"))
        .arg("--sysfs")
        .arg(root)
        .args(args)
        .env_remove("VMGPU_SYSFS")
        .env_remove("VMGPU_MODULES")
        .env("VMGPU_STATE_DIR", state)
        .output()
        .unwrap()
}

#[test]
fn a_closed_pipe_ends_the_command_quietly() {
    for args in [
        vec!["list", "--all"],
        vec!["list", "--all", "--json"],
        vec!["show", "0000:1b:00.0"],
        vec!["check", "0000:1b:00.0"],
        vec!["--help"],
    ] {
        // A pipe whose reader is gone before vmgpu writes: every write is EPIPE.
        let (reader, writer) = std::io::pipe().unwrap();
        drop(reader);
        let out = Command::new(env!("CARGO_BIN_EXE_vmgpu"))
            .arg("--sysfs")
            .arg(fixture("dgx-h100"))
            .args(&args)
            .stdout(writer)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0), "{args:?}: {}", stderr(&out));
        assert_eq!(stderr(&out), "", "{args:?}");
    }
}

#[test]
fn a_missing_or_empty_root_is_named_for_every_command() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let gone = dir.path().join("nonexistent");
    let empty = dir.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    for (root, says) in [(&gone, "does not exist"), (&empty, "holds no PCI bus")] {
        for args in [
            vec!["list"],
            vec!["list", "--all", "--json"],
            vec!["show", "0000:01:00.0"],
            vec!["check", "0000:01:00.0"],
            vec!["bind", "0000:01:00.0", "--dry-run"],
            vec!["bind", "0000:01:00.0"],
            vec!["unbind", "0000:01:00.0"],
        ] {
            let out = vmgpu_at(root, &state, &args);
            assert_eq!(
                out.status.code(),
                Some(1),
                "{root:?} {args:?}: {}",
                stderr(&out)
            );
            let err = stderr(&out);
            assert!(
                err.contains(says) && err.contains(root.to_str().unwrap()),
                "{args:?}: {err}"
            );
            assert!(!err.contains("not found"), "{args:?}: {err}");
        }
    }
    assert!(!state.exists(), "a refused command left {state:?}");
    // A refused bind on a real tree leaves no state directory either.
    let out = vmgpu_at(&fixture("shared-group"), &state, &["bind", "0000:06:00.0"]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(stderr(&out).contains("--force"), "{}", stderr(&out));
    assert!(!state.exists(), "a refused bind left {state:?}");
}

#[test]
fn errors_print_their_chain_once() {
    let dir = tempfile::tempdir().unwrap();
    let dev = dir.path().join("bus/pci/devices/0000:01:00.0");
    std::fs::create_dir_all(dev.join("vendor")).unwrap();
    let out = vmgpu_at(dir.path(), &dir.path().join("state"), &["list", "--all"]);
    assert_eq!(out.status.code(), Some(1));
    let err = stderr(&out);
    assert_eq!(
        err.trim_end(),
        format!(
            "vmgpu: error: {}: Is a directory (os error 21)",
            dev.join("vendor").display()
        )
    );
}

#[test]
fn a_bad_value_is_quoted_briefly() {
    let dir = tempfile::tempdir().unwrap();
    let dev = dir.path().join("bus/pci/devices/0000:01:00.0");
    std::fs::create_dir_all(&dev).unwrap();
    std::fs::write(dev.join("vendor"), "z".repeat(10 << 20)).unwrap();
    let out = vmgpu_at(dir.path(), &dir.path().join("state"), &["list", "--all"]);
    assert_eq!(out.status.code(), Some(1));
    let err = stderr(&out);
    assert!(err.len() < 500, "{} bytes of error", err.len());
    assert!(err.contains("vendor"), "{err}");
}

#[test]
fn unbind_without_a_record_leaves_no_lock() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let out = vmgpu_at(&fixture("workstation"), &state, &["unbind", "0000:01:00.0"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("no bind record"), "{}", stderr(&out));
    assert!(!state.exists());
    std::fs::create_dir(&state).unwrap();
    let out = vmgpu_at(&fixture("workstation"), &state, &["unbind", "0000:01:00.0"]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        std::fs::read_dir(&state).unwrap().count(),
        0,
        "lock left behind"
    );
}

#[test]
fn check_and_bind_agree_on_bridges_and_the_boot_display() {
    // A switch port (group 4 of the DGX): neither command calls it assignable.
    let check = vmgpu("dgx-h100", &["check", "0000:02:00.0"]);
    assert_eq!(check.status.code(), Some(1), "{}", stdout(&check));
    assert!(
        stdout(&check).contains("FAIL  endpoint"),
        "{}",
        stdout(&check)
    );
    let bind = vmgpu("dgx-h100", &["bind", "0000:02:00.0", "--dry-run"]);
    assert_eq!(bind.status.code(), Some(1), "{}", stdout(&bind));
    assert!(
        stderr(&bind).contains("bridges and ports are not assignable"),
        "{}",
        stderr(&bind)
    );
    // The boot display: check fails as bind refuses.
    let check = vmgpu("workstation", &["check", "0000:00:02.0", "--json"]);
    assert_eq!(check.status.code(), Some(1));
    let v: Value = serde_json::from_slice(&check.stdout).unwrap();
    assert_eq!(check_named(&v, "boot_display")["status"], "fail");
    assert_eq!(
        v["taken_from_host"],
        serde_json::json!([{"address": "0000:00:02.0", "reason": "the host's boot display"}])
    );
    let bind = vmgpu("workstation", &["bind", "0000:00:02.0", "--dry-run"]);
    assert_eq!(bind.status.code(), Some(1));
    assert!(stderr(&bind).contains("boot display"), "{}", stderr(&bind));
    // An NVMe target: refused by both.
    assert_eq!(
        vmgpu("dgx-h100", &["check", "0000:07:00.0"]).status.code(),
        Some(1)
    );
    let bind = vmgpu("dgx-h100", &["bind", "0000:07:00.0", "--dry-run"]);
    assert_eq!(bind.status.code(), Some(1));
    assert!(
        stderr(&bind).contains("0000:07:00.0 (Non-Volatile memory controller on nvme)"),
        "{}",
        stderr(&bind)
    );
}

#[test]
fn two_gpus_in_a_group_and_sr_iov_on_the_switch_host() {
    let check = vmgpu("switch-a100", &["check", "0000:03:00.0"]);
    assert_eq!(check.status.code(), Some(1));
    assert!(
        stdout(&check).ends_with(
            "0000:03:00.0: cannot be assigned to a VM without taking what the host needs (`vmgpu bind --force` would take it)\n"
        ),
        "{}",
        stdout(&check)
    );
    assert!(
        stdout(&check).contains("0000:04:00.0 (3D controller on nvidia"),
        "{}",
        stdout(&check)
    );
    let forced = json(
        "switch-a100",
        &["bind", "0000:03:00.0", "--dry-run", "--force", "--json"],
    );
    assert_eq!(
        forced["plan"]["taken_from_host"][0]["address"],
        "0000:04:00.0"
    );
    assert_eq!(forced["plan"]["functions"][1]["role"], "other");

    let pf = vmgpu("switch-a100", &["bind", "0000:06:00.0", "--dry-run"]);
    assert_eq!(pf.status.code(), Some(1));
    assert!(stderr(&pf).contains("2 VF(s) enabled"), "{}", stderr(&pf));
    let vf = json("switch-a100", &["show", "0000:06:00.1", "--json"]);
    assert_eq!(vf["physical_function"], "0000:06:00.0");
    assert_eq!(vf["companions"], serde_json::json!([]));
    let pf = json("switch-a100", &["show", "0000:06:00.0", "--json"]);
    assert_eq!(pf["companions"], serde_json::json!([]));
    assert_eq!(
        pf["virtual_functions"],
        serde_json::json!(["0000:06:00.1", "0000:06:00.2"])
    );
    let text = stdout(&vmgpu("switch-a100", &["show", "0000:06:00.0"]));
    assert!(
        text.contains("virtual_fns      0000:06:00.1 0000:06:00.2"),
        "{text}"
    );
    let text = stdout(&vmgpu("switch-a100", &["show", "0000:06:00.2"]));
    assert!(text.contains("physical_fn      0000:06:00.0"), "{text}");
    assert_eq!(
        pf["sriov"],
        serde_json::json!({"total_vfs": 8, "num_vfs": 2})
    );
}

#[test]
fn hidden_reset_method_and_companion_architecture() {
    let check = vmgpu("switch-a100", &["check", "0000:05:00.0"]);
    assert_eq!(check.status.code(), Some(0), "{}", stdout(&check));
    assert!(
        stdout(&check).contains("warn  reset                no reset method"),
        "{}",
        stdout(&check)
    );
    let show = stdout(&vmgpu("switch-a100", &["show", "0000:05:00.2"]));
    assert!(show.contains("reset_methods    none"), "{show}");
    let list = json("switch-a100", &["list", "--json"]);
    let archs: Vec<(&str, &str, &str)> = list["devices"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|d| d["address"].as_str().unwrap().starts_with("0000:05:"))
        .map(|d| {
            (
                d["address"].as_str().unwrap(),
                d["nvidia"]["function"].as_str().unwrap(),
                d["nvidia"]["architecture"].as_str().unwrap_or("null"),
            )
        })
        .collect();
    assert_eq!(
        archs,
        [
            ("0000:05:00.0", "gpu", "turing"),
            ("0000:05:00.1", "audio", "turing"),
            ("0000:05:00.2", "usb", "turing"),
            ("0000:05:00.3", "serial-bus", "turing"),
        ]
    );
}

#[test]
fn a_dry_run_says_when_a_record_holds_the_group() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    std::fs::create_dir(&state).unwrap();
    let record = r#"{"device": "0000:01:00.0", "iommu_group": 1, "loaded_vfio_pci": true,
        "functions": [{"address": "0000:01:00.0", "driver": "nvidia", "driver_override": null},
                      {"address": "0000:01:00.1", "driver": "snd_hda_intel", "driver_override": null}]}"#;
    std::fs::write(state.join("0000:01:00.0.json"), record).unwrap();
    for bdf in ["0000:01:00.0", "0000:01:00.1"] {
        let out = vmgpu_at(&fixture("workstation"), &state, &["bind", bdf, "--dry-run"]);
        assert_eq!(out.status.code(), Some(1));
        let err = stderr(&out);
        assert!(
            err.contains("already bound by vmgpu") && err.contains("vmgpu unbind 0000:01:00.0"),
            "{err}"
        );
    }
    assert_eq!(
        std::fs::read_to_string(state.join("0000:01:00.0.json")).unwrap(),
        record
    );
}

#[test]
fn every_function_check_agrees_with_bind_dry_run_and_nothing_panics() {
    let mut agreed = 0;
    for host in ["workstation", "shared-group", "switch-a100", "no-iommu"] {
        let list = json(host, &["list", "--all", "--json"]);
        for d in list["devices"].as_array().unwrap() {
            let bdf = d["address"].as_str().unwrap();
            let show = vmgpu(host, &["show", bdf]);
            assert_eq!(show.status.code(), Some(0), "{host} show {bdf}");
            let check = vmgpu(host, &["check", bdf]);
            let bind = vmgpu(host, &["bind", bdf, "--dry-run"]);
            let (c, b) = (check.status.code(), bind.status.code());
            assert!(matches!(c, Some(0 | 1)), "{host} check {bdf}: {c:?}");
            assert_eq!(
                c,
                b,
                "{host} {bdf}: check and bind --dry-run disagree\n{}\n{}",
                stdout(&check),
                stderr(&bind)
            );
            agreed += 1;
        }
    }
    assert!(agreed > 60, "{agreed}");
}

#[test]
fn unbind_says_which_bind_holds_vfio_pci_in_either_order() {
    // Two records in the state a crash right after writing them leaves (every
    // function still on its recorded driver, so unbind writes nothing): the first
    // bind loaded vfio-pci, the second found it loaded. On a copy of the DGX, whose
    // vfio-pci a device not bound by vmgpu uses, so nothing is ever unloaded.
    let gpu = |bdf: &str, group: u32, loaded: bool| {
        format!(
            r#"{{"device": "{bdf}", "iommu_group": {group}, "loaded_vfio_pci": {loaded},
                "functions": [{{"address": "{bdf}", "driver": "nvidia", "driver_override": null}}]}}"#
        )
    };
    let (loader, other) = ("0000:1b:00.0", "0000:43:00.0");
    for (first, second, marker) in [(loader, other, true), (other, loader, false)] {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("sys");
        let copied = Command::new("cp")
            .arg("-a")
            .arg(fixture("dgx-h100"))
            .arg(&root)
            .status()
            .unwrap();
        assert!(copied.success());
        let state = dir.path().join("state");
        std::fs::create_dir(&state).unwrap();
        std::fs::write(state.join(format!("{loader}.json")), gpu(loader, 19, true)).unwrap();
        std::fs::write(state.join(format!("{other}.json")), gpu(other, 26, false)).unwrap();

        let out = vmgpu_at(&root, &state, &["unbind", first]);
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
        assert_eq!(
            stdout(&out),
            format!(
                "restored {first} -> nvidia\n\
                 vfio-pci stays loaded while vmgpu holds {second}: the last unbind unloads it\n"
            )
        );
        // The fact moves to the marker when the record that carried it goes.
        assert_eq!(state.join("vfio-pci.loaded").exists(), marker, "{first}");

        let out = vmgpu_at(&root, &state, &["unbind", second]);
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
        assert_eq!(
            stdout(&out),
            format!(
                "restored {second} -> nvidia\n\
                 vfio-pci stays loaded, in use by 0000:61:00.0 (not bound by vmgpu)\n"
            )
        );
        assert_eq!(
            std::fs::read_dir(&state).unwrap().count(),
            0,
            "state left behind"
        );
    }
}
