//! Binding on fixture trees through the simulated kernel: the group moves to
//! vfio-pci, unbind restores exactly what was there, and a failure at any step
//! leaves the host as it was.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

use pcie::bind::{self, BindError, BindRecord, VfioPciRelease};
use pcie::kernel::{copy_tree, Kernel, SimulatedCrash, SimulatedKernel};
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
    assert_eq!(restored.record, record);
    assert_eq!(restored.vfio_pci, VfioPciRelease::Unloaded);
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
    assert_eq!(
        restored.record.functions[0].driver.as_deref(),
        Some("nvidia")
    );
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

// Issue 12, point 8: the unbind of the last vmgpu-bound group unloads the vfio-pci
// that a vmgpu bind loaded, whichever bind loaded it and whatever the unbind order.

const NVME: &str = "0000:02:00.0"; // workstation, group 8: host storage, needs --force
const IGC: &str = "0000:03:00.0"; // workstation, group 9

fn vfio_pci_loaded(root: &Path) -> bool {
    root.join("bus/pci/drivers/vfio-pci").is_dir()
}

/// Binds `bdf`, forcing only the NVMe (the host's storage).
fn bind_ok(host: &Host, kernel: &SimulatedKernel, bdf: &str, state: &Path) -> BindRecord {
    bind::bind(host, kernel, addr(bdf), bdf == NVME, state)
        .unwrap_or_else(|e| panic!("bind {bdf}: {}", chain(&e)))
        .record
        .unwrap()
}

fn unbind_ok(host: &Host, kernel: &SimulatedKernel, bdf: &str, state: &Path) {
    if let Err(e) = bind::unbind(host, kernel, addr(bdf), state) {
        panic!("unbind {bdf}: {}", chain(&e));
    }
}

#[test]
fn the_last_unbind_unloads_vfio_pci_in_either_order() {
    for order in [[NVME, RTX4090], [RTX4090, NVME]] {
        let s = scratch("workstation");
        let before = snapshot(&s.root);
        assert!(!vfio_pci_loaded(&s.root));
        let host = Host::new(&s.root);
        let kernel = SimulatedKernel::new(&s.root).unwrap();
        // The forced bind loads vfio-pci; the second finds it loaded.
        assert!(bind_ok(&host, &kernel, NVME, &s.state).loaded_vfio_pci);
        assert!(!bind_ok(&host, &kernel, RTX4090, &s.state).loaded_vfio_pci);

        unbind_ok(&host, &kernel, order[0], &s.state);
        assert!(vfio_pci_loaded(&s.root), "{order:?}: unloaded under a bind");
        assert_eq!(driver(&s.root, order[1]).as_deref(), Some("vfio-pci"));
        // A group no record holds is refused and changes nothing.
        let middle = snapshot(&s.root);
        assert!(matches!(
            bind::unbind(&host, &kernel, addr(IGC), &s.state),
            Err(BindError::NoRecord { .. })
        ));
        assert_eq!(snapshot(&s.root), middle);

        unbind_ok(&host, &kernel, order[1], &s.state);
        assert_eq!(
            snapshot(&s.root),
            before,
            "{order:?}: the host is not as before both binds"
        );
        assert!(state_is_clean(&s.state), "{order:?}");
    }
}

/// Every order of `items`.
fn permutations(items: &[&'static str]) -> Vec<Vec<&'static str>> {
    if items.len() <= 1 {
        return vec![items.to_vec()];
    }
    let mut out = Vec::new();
    for (i, first) in items.iter().enumerate() {
        let mut rest = items.to_vec();
        rest.remove(i);
        for mut tail in permutations(&rest) {
            tail.insert(0, first);
            out.push(tail);
        }
    }
    out
}

#[test]
fn three_binds_are_undone_in_every_order() {
    for order in permutations(&[NVME, RTX4090, IGC]) {
        let s = scratch("workstation");
        let before = snapshot(&s.root);
        let host = Host::new(&s.root);
        let kernel = SimulatedKernel::new(&s.root).unwrap();
        let loaded: Vec<bool> = [NVME, RTX4090, IGC]
            .iter()
            .map(|bdf| bind_ok(&host, &kernel, bdf, &s.state).loaded_vfio_pci)
            .collect();
        assert_eq!(loaded, [true, false, false]);
        for (i, bdf) in order.iter().enumerate() {
            unbind_ok(&host, &kernel, bdf, &s.state);
            let last = i + 1 == order.len();
            assert_eq!(
                vfio_pci_loaded(&s.root),
                !last,
                "{order:?}: after unbinding {bdf}"
            );
        }
        assert_eq!(snapshot(&s.root), before, "{order:?}");
        assert!(state_is_clean(&s.state), "{order:?}");
    }
}

/// Runs `steps` (bind or unbind of a device) until the simulated crash; returns
/// whether it crashed.
fn run_until_crash(
    host: &Host,
    kernel: &SimulatedKernel,
    steps: &[(bool, &str)],
    state: &Path,
) -> bool {
    use std::panic::{catch_unwind, AssertUnwindSafe};
    for &(is_bind, bdf) in steps {
        let result = catch_unwind(AssertUnwindSafe(|| {
            if is_bind {
                bind_ok(host, kernel, bdf, state);
            } else {
                unbind_ok(host, kernel, bdf, state);
            }
        }));
        if let Err(payload) = result {
            assert!(
                payload.downcast_ref::<SimulatedCrash>().is_some(),
                "a real panic: {:?}",
                payload.downcast_ref::<String>()
            );
            return true;
        }
    }
    false
}

#[test]
fn unbind_after_a_crash_at_every_step_of_two_binds_undone_restores_the_host() {
    // After the bind that loads vfio-pci: the second bind, then both unbinds, in
    // either order. A crash before any kernel operation of these; then `unbind` of
    // every group still recorded, in either order, puts the host back exactly.
    for order in [[NVME, RTX4090], [RTX4090, NVME]] {
        let sequence = [(true, RTX4090), (false, order[0]), (false, order[1])];
        let total = {
            let s = scratch("workstation");
            let host = Host::new(&s.root);
            let kernel = SimulatedKernel::new(&s.root).unwrap();
            bind_ok(&host, &kernel, NVME, &s.state);
            kernel.fail_operation(usize::MAX);
            assert!(!run_until_crash(&host, &kernel, &sequence, &s.state));
            kernel.operations()
        };
        // bind: 2 functions x 3; unbinds: detach + bind for 3 functions, one unload
        assert!(total >= 12, "{total}");
        for step in 0..total {
            for recover_reversed in [false, true] {
                let s = scratch("workstation");
                let before = snapshot(&s.root);
                let host = Host::new(&s.root);
                let kernel = SimulatedKernel::new(&s.root).unwrap();
                bind_ok(&host, &kernel, NVME, &s.state);
                kernel.crash_at(step);
                assert!(
                    run_until_crash(&host, &kernel, &sequence, &s.state),
                    "{order:?} step {step}: no crash"
                );
                kernel.fail_operation(usize::MAX);
                let mut recorded: Vec<&str> = [NVME, RTX4090]
                    .into_iter()
                    .filter(|bdf| bind::find_record(&s.state, addr(bdf)).is_ok())
                    .collect();
                if recover_reversed {
                    recorded.reverse();
                }
                for bdf in &recorded {
                    bind::unbind(&host, &kernel, addr(bdf), &s.state).unwrap_or_else(|e| {
                        panic!("{order:?} step {step} {recorded:?}: {}", chain(&e))
                    });
                }
                assert_eq!(
                    snapshot(&s.root),
                    before,
                    "{order:?} step {step}, then unbind {recorded:?}: host not restored"
                );
                assert!(
                    state_is_clean(&s.state),
                    "{order:?} step {step} {recorded:?}"
                );
            }
        }
    }
}

#[test]
fn vfio_pci_loaded_before_any_vmgpu_bind_stays_loaded() {
    for order in [[NVME, RTX4090], [RTX4090, NVME]] {
        let s = scratch("workstation");
        let host = Host::new(&s.root);
        let kernel = SimulatedKernel::new(&s.root).unwrap();
        // The operator loads it.
        kernel.load_module("vfio-pci").unwrap();
        let before = snapshot(&s.root);
        for bdf in [NVME, RTX4090] {
            assert!(!bind_ok(&host, &kernel, bdf, &s.state).loaded_vfio_pci);
        }
        for bdf in order {
            unbind_ok(&host, &kernel, bdf, &s.state);
            assert!(vfio_pci_loaded(&s.root), "{order:?}: after unbinding {bdf}");
        }
        assert_eq!(snapshot(&s.root), before, "{order:?}");
        assert!(state_is_clean(&s.state));
    }
}

fn unbind_outcome(
    host: &Host,
    kernel: &SimulatedKernel,
    bdf: &str,
    state: &Path,
) -> VfioPciRelease {
    bind::unbind(host, kernel, addr(bdf), state)
        .unwrap_or_else(|e| panic!("unbind {bdf}: {}", chain(&e)))
        .vfio_pci
}

#[test]
fn unbind_says_what_became_of_vfio_pci_and_where_the_fact_lives() {
    let marker_after_first = [(NVME, RTX4090, true), (RTX4090, NVME, false)];
    for (first, second, marker) in marker_after_first {
        let s = scratch("workstation");
        let host = Host::new(&s.root);
        let kernel = SimulatedKernel::new(&s.root).unwrap();
        bind_ok(&host, &kernel, NVME, &s.state);
        bind_ok(&host, &kernel, RTX4090, &s.state);
        assert!(!bind::vfio_pci_marker_path(&s.state).exists());
        assert_eq!(
            unbind_outcome(&host, &kernel, first, &s.state),
            VfioPciRelease::HeldByOtherBinds {
                devices: vec![addr(second)]
            }
        );
        // Handed on to the marker only when the record that carried it went.
        assert_eq!(
            bind::vfio_pci_marker_path(&s.state).exists(),
            marker,
            "after unbinding {first}"
        );
        assert_eq!(
            unbind_outcome(&host, &kernel, second, &s.state),
            VfioPciRelease::Unloaded
        );
        assert!(state_is_clean(&s.state));
    }

    // Loaded by the operator: vmgpu says nothing about it, and leaves it.
    let s = scratch("workstation");
    let host = Host::new(&s.root);
    let kernel = SimulatedKernel::new(&s.root).unwrap();
    kernel.load_module("vfio-pci").unwrap();
    bind_ok(&host, &kernel, NVME, &s.state);
    bind_ok(&host, &kernel, RTX4090, &s.state);
    for bdf in [NVME, RTX4090] {
        assert_eq!(
            unbind_outcome(&host, &kernel, bdf, &s.state),
            VfioPciRelease::NotOurs
        );
        assert!(!bind::vfio_pci_marker_path(&s.state).exists());
    }
}

#[test]
fn unbind_after_a_crash_between_its_state_file_steps_restores_the_host() {
    // The kernel operations are crash points of SimulatedKernel; the state files
    // are not, so the states a crash between them leaves are made by hand here.
    let setup = |s: &Scratch| {
        let host = Host::new(&s.root);
        let kernel = SimulatedKernel::new(&s.root).unwrap();
        bind_ok(&host, &kernel, NVME, &s.state);
        bind_ok(&host, &kernel, RTX4090, &s.state);
        let text = |bdf| fs::read_to_string(bind::record_path(&s.state, addr(bdf))).unwrap();
        (host, kernel, text(NVME), text(RTX4090))
    };
    // 1. Unbinding the NVMe first: the marker written, its record not yet removed.
    for recover in [[NVME, RTX4090], [RTX4090, NVME]] {
        let s = scratch("workstation");
        let before = snapshot(&s.root);
        let (host, kernel, nvme_record, _) = setup(&s);
        unbind_ok(&host, &kernel, NVME, &s.state);
        fs::write(bind::record_path(&s.state, addr(NVME)), nvme_record).unwrap();
        assert!(bind::vfio_pci_marker_path(&s.state).exists());
        for bdf in recover {
            unbind_ok(&host, &kernel, bdf, &s.state);
        }
        assert_eq!(snapshot(&s.root), before, "recovering {recover:?}");
        assert!(state_is_clean(&s.state), "recovering {recover:?}");
    }
    // 2. The last unbind (of the GPU, whose record does not carry the fact):
    // vfio-pci unloaded, then (a) nothing removed, (b) only the marker removed.
    for marker_removed in [false, true] {
        let s = scratch("workstation");
        let before = snapshot(&s.root);
        let (host, kernel, _, gpu_record) = setup(&s);
        unbind_ok(&host, &kernel, NVME, &s.state);
        let marker_text = fs::read_to_string(bind::vfio_pci_marker_path(&s.state)).unwrap();
        unbind_ok(&host, &kernel, RTX4090, &s.state);
        assert_eq!(snapshot(&s.root), before);
        fs::create_dir_all(&s.state).unwrap();
        fs::write(bind::record_path(&s.state, addr(RTX4090)), gpu_record).unwrap();
        if !marker_removed {
            fs::write(bind::vfio_pci_marker_path(&s.state), marker_text).unwrap();
        }
        assert_eq!(
            unbind_outcome(&host, &kernel, RTX4090, &s.state),
            VfioPciRelease::NotLoaded
        );
        assert_eq!(
            snapshot(&s.root),
            before,
            "marker removed: {marker_removed}"
        );
        assert!(state_is_clean(&s.state), "marker removed: {marker_removed}");
    }
}

#[test]
fn the_last_unbind_leaves_vfio_pci_to_a_device_vmgpu_did_not_bind() {
    let s = scratch("workstation");
    let host = Host::new(&s.root);
    let kernel = SimulatedKernel::new(&s.root).unwrap();
    bind_ok(&host, &kernel, NVME, &s.state);
    bind_ok(&host, &kernel, RTX4090, &s.state);
    // The operator moves the NIC to vfio-pci by hand: no record holds it.
    let bus = s.root.join("bus/pci");
    let nic_override = bus.join("devices").join(IGC).join("driver_override");
    kernel.write(&nic_override, "vfio-pci").unwrap();
    kernel.write(&bus.join("drivers/igc/unbind"), IGC).unwrap();
    kernel.write(&bus.join("drivers_probe"), IGC).unwrap();
    assert_eq!(driver(&s.root, IGC).as_deref(), Some("vfio-pci"));

    unbind_ok(&host, &kernel, NVME, &s.state);
    assert_eq!(
        unbind_outcome(&host, &kernel, RTX4090, &s.state),
        VfioPciRelease::InUse {
            devices: vec![addr(IGC)]
        }
    );
    assert!(vfio_pci_loaded(&s.root));
    assert_eq!(driver(&s.root, IGC).as_deref(), Some("vfio-pci"));
    assert!(
        state_is_clean(&s.state),
        "the fact outlived the last record"
    );

    // vmgpu's obligation ended with its last record: a later bind and unbind
    // leave vfio-pci to its new user even when the NIC is back on igc.
    kernel.write(&nic_override, "\n").unwrap();
    kernel
        .write(&bus.join("drivers/vfio-pci/unbind"), IGC)
        .unwrap();
    kernel.write(&bus.join("drivers_probe"), IGC).unwrap();
    assert_eq!(driver(&s.root, IGC).as_deref(), Some("igc"));
    assert!(!bind_ok(&host, &kernel, RTX4090, &s.state).loaded_vfio_pci);
    assert_eq!(
        unbind_outcome(&host, &kernel, RTX4090, &s.state),
        VfioPciRelease::NotOurs
    );
    assert!(vfio_pci_loaded(&s.root));
}

#[test]
fn a_marker_without_a_record_is_stale_and_never_unloads_vfio_pci() {
    // Records removed by hand left the marker; then the operator loaded vfio-pci.
    let s = scratch("workstation");
    let host = Host::new(&s.root);
    let kernel = SimulatedKernel::new(&s.root).unwrap();
    kernel.load_module("vfio-pci").unwrap();
    let before = snapshot(&s.root);
    fs::create_dir_all(&s.state).unwrap();
    fs::write(bind::vfio_pci_marker_path(&s.state), "left over\n").unwrap();
    assert!(!bind_ok(&host, &kernel, RTX4090, &s.state).loaded_vfio_pci);
    assert!(!bind::vfio_pci_marker_path(&s.state).exists());
    assert_eq!(
        unbind_outcome(&host, &kernel, RTX4090, &s.state),
        VfioPciRelease::NotOurs
    );
    assert_eq!(snapshot(&s.root), before);
    assert!(state_is_clean(&s.state));
    // An unbind without a record clears it too, and leaves nothing.
    fs::write(bind::vfio_pci_marker_path(&s.state), "left over\n").unwrap();
    assert!(matches!(
        bind::unbind(&host, &kernel, addr(RTX4090), &s.state),
        Err(BindError::NoRecord { .. })
    ));
    assert!(state_is_clean(&s.state));
}

#[test]
fn a_record_that_does_not_parse_still_holds_vfio_pci() {
    let s = scratch("workstation");
    let before = snapshot(&s.root);
    let host = Host::new(&s.root);
    let kernel = SimulatedKernel::new(&s.root).unwrap();
    bind_ok(&host, &kernel, NVME, &s.state);
    bind_ok(&host, &kernel, RTX4090, &s.state);
    let gpu_record = bind::record_path(&s.state, addr(RTX4090));
    let text = fs::read_to_string(&gpu_record).unwrap();
    fs::write(&gpu_record, "not json\n").unwrap();
    // The NVMe's own record is read, so its group is restored; the other record
    // counts as a holder though unreadable.
    assert_eq!(
        unbind_outcome(&host, &kernel, NVME, &s.state),
        VfioPciRelease::HeldByOtherBinds {
            devices: vec![addr(RTX4090)]
        }
    );
    assert!(bind::vfio_pci_marker_path(&s.state).exists());
    fs::write(&gpu_record, text).unwrap();
    assert_eq!(
        unbind_outcome(&host, &kernel, RTX4090, &s.state),
        VfioPciRelease::Unloaded
    );
    assert_eq!(snapshot(&s.root), before);
    assert!(state_is_clean(&s.state));
}
