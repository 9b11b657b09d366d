//! Binding on fixture trees through the simulated kernel: the group moves to
//! vfio-pci, unbind restores exactly what was there, and a failure at any step
//! leaves the host as it was.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

use pcie::bind::{self, BindError, BindRecord};
use pcie::kernel::{copy_tree, SimulatedCrash, SimulatedKernel};
use pcie::{Host, PciAddress};

const RTX4090: &str = "0000:01:00.0";
const RTX4090_AUDIO: &str = "0000:01:00.1";
const A2000: &str = "0000:06:00.0";
const SATA_IN_A2000_GROUP: &str = "0000:07:00.0";

struct Scratch {
    _dir: tempfile::TempDir,
    root: PathBuf,
    state: PathBuf,
}

/// A writable copy of a fixture host, plus a state directory.
fn scratch(host: &str) -> Scratch {
    // On tmpfs when there is one, as sysfs is in memory: copying a tree is tens of
    // times faster there, and these tests copy one per step.
    let dir = tempfile::Builder::new()
        .prefix("pcie-bind-")
        .tempdir_in("/dev/shm")
        .or_else(|_| tempfile::tempdir())
        .unwrap();
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../fixtures/sysfs")
        .join(host);
    let root = dir.path().join("sys");
    copy_tree(&fixture, &root).unwrap();
    let state = dir.path().join("state");
    Scratch {
        _dir: dir,
        root,
        state,
    }
}

fn addr(s: &str) -> PciAddress {
    s.parse().unwrap()
}

/// What binding can change: each device's driver and override, and which drivers
/// and modules exist.
fn snapshot(root: &Path) -> BTreeMap<String, String> {
    let host = Host::new(root);
    let mut snap = BTreeMap::new();
    for d in host.devices().unwrap() {
        snap.insert(
            d.address.to_string(),
            format!("driver={:?} override={:?}", d.driver, d.driver_override),
        );
    }
    for dir in ["bus/pci/drivers", "module"] {
        let mut names: Vec<String> = fs::read_dir(root.join(dir))
            .map(|e| {
                e.filter_map(|e| e.ok())
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default();
        names.sort();
        snap.insert(dir.to_string(), names.join(","));
    }
    snap
}

/// An error and its sources, `A: B: C`, as `vmgpu` prints it.
fn chain(err: &dyn std::error::Error) -> String {
    let mut text = err.to_string();
    let mut source = err.source();
    while let Some(e) = source {
        text += &format!(": {e}");
        source = e.source();
    }
    text
}

fn driver(root: &Path, bdf: &str) -> Option<String> {
    Host::new(root).device(addr(bdf)).unwrap().driver
}

#[test]
fn binds_gpu_with_its_audio_function_and_restores_them() {
    let s = scratch("workstation");
    let before = snapshot(&s.root);
    let host = Host::new(&s.root);
    let kernel = SimulatedKernel::new(&s.root).unwrap();

    let plan = bind::plan_bind(&host, addr(RTX4090), false).unwrap();
    assert!(
        plan.load_vfio_pci,
        "vfio-pci is not loaded on the workstation fixture"
    );
    let planned: Vec<(String, bool)> = plan
        .functions
        .iter()
        .map(|f| (f.address.to_string(), f.rebind))
        .collect();
    assert_eq!(
        planned,
        [
            (RTX4090.to_string(), true),
            (RTX4090_AUDIO.to_string(), true)
        ]
    );

    let outcome = bind::bind(&host, &kernel, addr(RTX4090), false, &s.state).unwrap();
    assert_eq!(outcome.plan, plan);
    let record = outcome.record.unwrap();
    assert_eq!(driver(&s.root, RTX4090).as_deref(), Some("vfio-pci"));
    assert_eq!(driver(&s.root, RTX4090_AUDIO).as_deref(), Some("vfio-pci"));
    assert!(record.loaded_vfio_pci);
    let originals: Vec<Option<&str>> = record
        .functions
        .iter()
        .map(|f| f.driver.as_deref())
        .collect();
    assert_eq!(originals, [Some("nvidia"), Some("snd_hda_intel")]);
    let on_disk: BindRecord = serde_json::from_str(
        &fs::read_to_string(bind::record_path(&s.state, addr(RTX4090))).unwrap(),
    )
    .unwrap();
    assert_eq!(on_disk, record);
    assert_ne!(snapshot(&s.root), before);

    // Unbind through the companion's address finds the same record.
    let restored = bind::unbind(&host, &kernel, addr(RTX4090_AUDIO), &s.state).unwrap();
    assert_eq!(restored, record);
    assert_eq!(
        snapshot(&s.root),
        before,
        "unbind must restore the host exactly"
    );
    assert!(!bind::record_path(&s.state, addr(RTX4090)).exists());
}

#[test]
fn failure_at_every_step_rolls_back_to_the_original_host() {
    let s = scratch("workstation");
    let host = Host::new(&s.root);
    let kernel = SimulatedKernel::new(&s.root).unwrap();
    kernel.fail_operation(usize::MAX);
    bind::bind(&host, &kernel, addr(RTX4090), false, &s.state).unwrap();
    let steps = kernel.operations();
    // load module + (override, unbind, probe) for each of the two functions
    assert_eq!(steps, 7);

    for step in 0..steps {
        let s = scratch("workstation");
        let before = snapshot(&s.root);
        let host = Host::new(&s.root);
        let kernel = SimulatedKernel::new(&s.root).unwrap();
        kernel.fail_operation(step);
        let err = bind::bind(&host, &kernel, addr(RTX4090), false, &s.state).unwrap_err();
        let text = chain(&err);
        assert!(text.contains("injected failure"), "step {step}: {text}");
        assert!(
            !matches!(err, BindError::RollbackIncomplete { .. }),
            "step {step}: {text}"
        );
        assert_eq!(snapshot(&s.root), before, "step {step}: host not restored");
        assert!(
            !bind::record_path(&s.state, addr(RTX4090)).exists(),
            "step {step}: record left behind"
        );
    }
}

#[test]
fn failed_restore_keeps_the_record_and_names_the_device() {
    let s = scratch("workstation");
    let host = Host::new(&s.root);
    let kernel = SimulatedKernel::new(&s.root).unwrap();
    bind::bind(&host, &kernel, addr(RTX4090), false, &s.state).unwrap();
    kernel.fail_operation(0);
    match bind::unbind(&host, &kernel, addr(RTX4090), &s.state) {
        Err(BindError::RestoreIncomplete {
            address,
            failures,
            record,
        }) => {
            assert_eq!(address, addr(RTX4090));
            assert!(
                failures
                    .iter()
                    .any(|f| chain(f).contains("injected failure")),
                "{failures:?}"
            );
            assert!(record.exists());
        }
        other => panic!("expected RestoreIncomplete, got {other:?}"),
    }
    // A second attempt finishes the job.
    bind::unbind(&host, &kernel, addr(RTX4090), &s.state).unwrap();
    assert_eq!(driver(&s.root, RTX4090).as_deref(), Some("nvidia"));
    assert_eq!(
        driver(&s.root, RTX4090_AUDIO).as_deref(),
        Some("snd_hda_intel")
    );
}

#[test]
fn refuses_group_with_host_storage_unless_forced() {
    let s = scratch("shared-group");
    let host = Host::new(&s.root);
    match bind::plan_bind(&host, addr(A2000), false) {
        Err(BindError::HostNeedsGroupMember { needed, .. }) => {
            let who: Vec<(String, &str)> = needed
                .iter()
                .map(|n| (n.address.to_string(), n.reason.as_str()))
                .collect();
            // The NIC and the USB controller are separate devices on host drivers:
            // taking them needs --force too (they were taken silently before).
            assert_eq!(
                who,
                [
                    (
                        "0000:04:00.0".to_string(),
                        "Ethernet controller on igb: a separate device sharing the IOMMU group, not a function of 0000:06:00.0"
                    ),
                    (
                        "0000:05:00.0".to_string(),
                        "USB controller on xhci_hcd: a separate device sharing the IOMMU group, not a function of 0000:06:00.0"
                    ),
                    (A2000.to_string(), "the host's boot display"),
                    (SATA_IN_A2000_GROUP.to_string(), "SATA controller on ahci"),
                ]
            );
        }
        other => panic!("expected a refusal, got {other:?}"),
    }

    let before = snapshot(&s.root);
    let kernel = SimulatedKernel::new(&s.root).unwrap();
    let plan = bind::bind(&host, &kernel, addr(A2000), true, &s.state)
        .unwrap()
        .plan;
    assert_eq!(plan.taken_from_host.len(), 4);
    // Every endpoint of the chipset group goes: NIC, USB, GPU, its audio, SATA.
    assert_eq!(plan.functions.len(), 5);
    for f in &plan.functions {
        assert_eq!(
            driver(&s.root, &f.address.to_string()).as_deref(),
            Some("vfio-pci")
        );
    }
    bind::unbind(&host, &kernel, addr(A2000), &s.state).unwrap();
    assert_eq!(
        driver(&s.root, SATA_IN_A2000_GROUP).as_deref(),
        Some("ahci")
    );
    assert_eq!(snapshot(&s.root), before);
}

#[test]
fn no_iommu_means_no_binding() {
    let s = scratch("no-iommu");
    let host = Host::new(&s.root);
    let gpu = host
        .devices()
        .unwrap()
        .into_iter()
        .find(|d| d.nvidia.is_some())
        .unwrap();
    assert!(matches!(
        bind::plan_bind(&host, gpu.address, true),
        Err(BindError::NoIommuGroup { address }) if address == gpu.address
    ));
}

#[test]
fn already_bound_gpu_is_left_alone_and_unbind_without_record_is_clear() {
    let s = scratch("dgx-h100");
    let host = Host::new(&s.root);
    let bound = host
        .devices()
        .unwrap()
        .into_iter()
        .find(|d| d.driver.as_deref() == Some("vfio-pci"))
        .expect("the dgx-h100 fixture has one GPU on vfio-pci");
    let before = snapshot(&s.root);
    let kernel = SimulatedKernel::new(&s.root).unwrap();
    let outcome = bind::bind(&host, &kernel, bound.address, false, &s.state).unwrap();
    assert!(outcome.plan.nothing_to_do());
    assert_eq!(outcome.record, None);
    assert_eq!(kernel.operations(), 0);
    assert_eq!(snapshot(&s.root), before);
    // A bind that changed nothing leaves no lock, no record, no state directory.
    assert!(!s.state.exists(), "{:?} left behind", s.state);
    match bind::unbind(&host, &kernel, bound.address, &s.state) {
        Err(BindError::NoRecord { address, .. }) => assert_eq!(address, bound.address),
        other => panic!("expected NoRecord, got {other:?}"),
    }
    assert!(!s.state.exists());
}

#[test]
fn unbind_keeps_vfio_pci_loaded_while_another_device_uses_it() {
    let s = scratch("dgx-h100");
    let host = Host::new(&s.root);
    let gpu = host
        .devices()
        .unwrap()
        .into_iter()
        .find(|d| d.driver.as_deref() == Some("nvidia"))
        .unwrap();
    let kernel = SimulatedKernel::new(&s.root).unwrap();
    let plan = bind::plan_bind(&host, gpu.address, false).unwrap();
    assert!(!plan.load_vfio_pci);
    let before = snapshot(&s.root);
    bind::bind(&host, &kernel, gpu.address, false, &s.state).unwrap();
    bind::unbind(&host, &kernel, gpu.address, &s.state).unwrap();
    assert_eq!(snapshot(&s.root), before);
    assert!(s.root.join("bus/pci/drivers/vfio-pci").is_dir());
}

const TURING: &str = "0000:05:00.0"; // switch-a100: nvidia with driver_override=vfio-pci

/// Binds `bdf` with a crash (no rollback) before kernel operation `step`; returns
/// whether the crash happened (false: the bind needs fewer operations).
fn crash_bind(host: &Host, kernel: &SimulatedKernel, bdf: &str, force: bool, state: &Path) -> bool {
    use std::panic::{catch_unwind, AssertUnwindSafe};
    match catch_unwind(AssertUnwindSafe(|| {
        bind::bind(host, kernel, addr(bdf), force, state)
    })) {
        Ok(result) => {
            result.unwrap();
            false
        }
        Err(payload) => {
            assert!(
                payload.downcast_ref::<SimulatedCrash>().is_some(),
                "a real panic"
            );
            true
        }
    }
}

/// No record and no lock left in `state` (the directory itself may stay).
fn state_is_clean(state: &Path) -> bool {
    fs::read_dir(state).map_or(true, |entries| entries.count() == 0)
}

#[test]
fn a_preset_override_is_restored_after_failure_at_every_step_and_after_unbind() {
    // Full bind then unbind: driver first, then the recorded override.
    let s = scratch("switch-a100");
    let before = snapshot(&s.root);
    assert_eq!(
        before[TURING],
        r#"driver=Some("nvidia") override=Some("vfio-pci")"#
    );
    let host = Host::new(&s.root);
    let kernel = SimulatedKernel::new(&s.root).unwrap();
    kernel.fail_operation(usize::MAX);
    let record = bind::bind(&host, &kernel, addr(TURING), false, &s.state)
        .unwrap()
        .record
        .unwrap();
    let steps = kernel.operations();
    // load vfio-pci + (override, unbind, probe) for each of the four functions
    assert_eq!(steps, 13);
    assert_eq!(
        record.functions[0].driver_override.as_deref(),
        Some("vfio-pci")
    );
    assert!(record.loaded_vfio_pci);
    bind::unbind(&host, &kernel, addr(TURING), &s.state).unwrap();
    assert_eq!(snapshot(&s.root), before);
    assert!(state_is_clean(&s.state));

    for step in 0..steps {
        let s = scratch("switch-a100");
        let host = Host::new(&s.root);
        let kernel = SimulatedKernel::new(&s.root).unwrap();
        kernel.fail_operation(step);
        let err = bind::bind(&host, &kernel, addr(TURING), false, &s.state).unwrap_err();
        assert!(
            !matches!(err, BindError::RollbackIncomplete { .. }),
            "step {step}: {}",
            chain(&err)
        );
        assert!(chain(&err).contains("injected failure"), "step {step}");
        assert_eq!(snapshot(&s.root), before, "step {step}: host not restored");
        assert!(state_is_clean(&s.state), "step {step}: state left behind");
    }
}

#[test]
fn unbind_after_a_crash_at_every_step_restores_the_host() {
    // (fixture, device, force): one that loads vfio-pci, one with a pre-set override
    // that also loads it, one where vfio-pci is loaded already, two GPUs in a group.
    let cases = [
        ("workstation", RTX4090, false),
        ("switch-a100", TURING, false),
        ("dgx-h100", "0000:1b:00.0", false),
        ("switch-a100", "0000:03:00.0", true),
    ];
    for (fixture, bdf, force) in cases {
        let mut crashed = 0;
        for step in 0.. {
            let s = scratch(fixture);
            let before = snapshot(&s.root);
            let host = Host::new(&s.root);
            let kernel = SimulatedKernel::new(&s.root).unwrap();
            kernel.crash_at(step);
            if !crash_bind(&host, &kernel, bdf, force, &s.state) {
                break;
            }
            crashed += 1;
            // The intent was recorded before the first change.
            assert!(
                bind::find_record(&s.state, addr(bdf)).is_ok(),
                "{fixture} {bdf} step {step}: no record after the crash"
            );
            // A new bind of the group is refused while the record holds it.
            kernel.fail_operation(usize::MAX);
            assert!(matches!(
                bind::bind(&host, &kernel, addr(bdf), force, &s.state),
                Err(BindError::AlreadyBound { .. })
            ));
            bind::unbind(&host, &kernel, addr(bdf), &s.state)
                .unwrap_or_else(|e| panic!("{fixture} {bdf} step {step}: {}", chain(&e)));
            assert_eq!(
                snapshot(&s.root),
                before,
                "{fixture} {bdf} step {step}: host not restored"
            );
            assert!(state_is_clean(&s.state), "{fixture} {bdf} step {step}");
        }
        assert!(crashed >= 3, "{fixture} {bdf}: only {crashed} steps");
    }
}

#[test]
fn unbind_after_a_crash_during_unbind_finishes_the_job() {
    let s = scratch("switch-a100");
    let before = snapshot(&s.root);
    let host = Host::new(&s.root);
    let kernel = SimulatedKernel::new(&s.root).unwrap();
    bind::bind(&host, &kernel, addr(TURING), false, &s.state).unwrap();
    let bound = snapshot(&s.root);
    kernel.fail_operation(usize::MAX);
    bind::unbind(&host, &kernel, addr(TURING), &s.state).unwrap();
    let steps = kernel.operations();
    assert!(steps >= 8, "{steps}");
    for step in 0..steps {
        let s = scratch("switch-a100");
        let host = Host::new(&s.root);
        let kernel = SimulatedKernel::new(&s.root).unwrap();
        bind::bind(&host, &kernel, addr(TURING), false, &s.state).unwrap();
        assert_eq!(snapshot(&s.root), bound);
        kernel.crash_at(step);
        let crashed = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            bind::unbind(&host, &kernel, addr(TURING), &s.state)
        }));
        assert!(crashed.is_err(), "step {step}: no crash");
        kernel.fail_operation(usize::MAX);
        bind::unbind(&host, &kernel, addr(TURING), &s.state)
            .unwrap_or_else(|e| panic!("step {step}: {}", chain(&e)));
        assert_eq!(snapshot(&s.root), before, "step {step}");
    }
}

#[test]
fn concurrent_binds_of_one_group_keep_the_original_drivers() {
    // Of one device, and of two devices of one group.
    for pair in [[RTX4090, RTX4090], [RTX4090, RTX4090_AUDIO]]
        .iter()
        .cycle()
        .take(4)
    {
        let s = scratch("workstation");
        let before = snapshot(&s.root);
        let host = Host::new(&s.root);
        // One kernel per "process", both made before either bind starts.
        let kernels = [
            SimulatedKernel::new(&s.root).unwrap(),
            SimulatedKernel::new(&s.root).unwrap(),
        ];
        let results: Vec<Result<bind::BindOutcome, BindError>> = std::thread::scope(|scope| {
            let handles: Vec<_> = kernels
                .into_iter()
                .zip(pair.iter().copied())
                .map(|(kernel, bdf)| {
                    let (host, state) = (host.clone(), s.state.clone());
                    scope.spawn(move || bind::bind(&host, &kernel, addr(bdf), false, &state))
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        let ok: Vec<&bind::BindOutcome> = results.iter().filter_map(|r| r.as_ref().ok()).collect();
        assert_eq!(ok.len(), 1, "{results:?}");
        let refused = results.iter().find_map(|r| r.as_ref().err()).unwrap();
        match refused {
            BindError::AlreadyBound { group, record, .. } => {
                assert_eq!(*group, 1);
                assert!(record.exists());
            }
            other => panic!("expected AlreadyBound, got {other:?}"),
        }
        let record = ok[0].record.clone().unwrap();
        let originals: Vec<Option<&str>> = record
            .functions
            .iter()
            .map(|f| f.driver.as_deref())
            .collect();
        assert_eq!(originals, [Some("nvidia"), Some("snd_hda_intel")]);
        let kernel = SimulatedKernel::new(&s.root).unwrap();
        bind::unbind(&host, &kernel, addr(RTX4090_AUDIO), &s.state).unwrap();
        let mut after = snapshot(&s.root);
        // The fresh kernel's own native-driver table does not matter here: the
        // record put each function back on its original driver.
        after.remove("module");
        let mut want = before.clone();
        want.remove("module");
        assert_eq!(after, want);
    }
}

#[test]
fn a_record_is_never_overwritten() {
    let s = scratch("workstation");
    let host = Host::new(&s.root);
    let kernel = SimulatedKernel::new(&s.root).unwrap();
    bind::bind(&host, &kernel, addr(RTX4090), false, &s.state).unwrap();
    let path = bind::record_path(&s.state, addr(RTX4090));
    let text = fs::read_to_string(&path).unwrap();
    // Again, with the group now on vfio-pci: refused, not re-recorded with
    // vfio-pci as the "original" driver.
    for bdf in [RTX4090, RTX4090_AUDIO] {
        match bind::bind(&host, &kernel, addr(bdf), true, &s.state) {
            Err(e @ BindError::AlreadyBound { .. }) => {
                let msg = e.to_string();
                assert!(
                    msg.contains("vmgpu unbind 0000:01:00.0") && msg.contains("already bound"),
                    "{msg}"
                );
            }
            other => panic!("{bdf}: expected AlreadyBound, got {other:?}"),
        }
        assert_eq!(fs::read_to_string(&path).unwrap(), text);
    }
    let restored = bind::unbind(&host, &kernel, addr(RTX4090), &s.state).unwrap();
    assert_eq!(restored.functions[0].driver.as_deref(), Some("nvidia"));
}

#[test]
fn unbind_without_a_record_leaves_nothing() {
    let s = scratch("workstation");
    let host = Host::new(&s.root);
    let kernel = SimulatedKernel::new(&s.root).unwrap();
    // No state directory: none is created.
    assert!(matches!(
        bind::unbind(&host, &kernel, addr(RTX4090), &s.state),
        Err(BindError::NoRecord { .. })
    ));
    assert!(!s.state.exists());
    // An existing, empty state directory: no lock file is left in it.
    fs::create_dir_all(&s.state).unwrap();
    assert!(matches!(
        bind::unbind(&host, &kernel, addr(RTX4090), &s.state),
        Err(BindError::NoRecord { .. })
    ));
    assert!(state_is_clean(&s.state));
    assert!(s.state.exists());
    // A refused bind leaves nothing either.
    assert!(bind::bind(&host, &kernel, addr("0000:00:02.0"), false, &s.state).is_err());
    assert!(state_is_clean(&s.state));
}
