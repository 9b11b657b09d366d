//! What binding takes from the host: one rule, shared by `check` and `bind`.

use std::path::{Path, PathBuf};

use pcie::bind::{self, BindError};
use pcie::check::{assess, CheckStatus, MemberRole};
use pcie::{Host, PciAddress};

fn fixture(name: &str) -> Host {
    let root: PathBuf = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../fixtures/sysfs")
        .join(name);
    Host::new(root)
}

fn addr(s: &str) -> PciAddress {
    s.parse().unwrap()
}

const FIXTURES: [&str; 5] = [
    "dgx-h100",
    "workstation",
    "no-iommu",
    "shared-group",
    "switch-a100",
];

#[test]
fn check_and_bind_agree_on_every_function_of_every_fixture() {
    let mut assignable = 0;
    let mut refused = 0;
    for name in FIXTURES {
        let host = fixture(name);
        for a in host.addresses().unwrap() {
            let verdict = assess(&host, a).unwrap();
            let plan = bind::plan_bind(&host, a, false);
            assert_eq!(
                verdict.assignable,
                plan.is_ok(),
                "{name} {a}: check says assignable={}, bind --dry-run says {plan:?}; checks {:?}",
                verdict.assignable,
                verdict.checks
            );
            if let Ok(plan) = plan {
                assert!(plan.taken_from_host.is_empty(), "{name} {a}");
                assignable += 1;
            } else {
                refused += 1;
            }
        }
    }
    // Both outcomes occur, so the comparison means something.
    assert!(assignable >= 10 && refused >= 10, "{assignable} {refused}");
}

#[test]
fn a_bridge_is_not_assignable_for_either_command() {
    let dgx = fixture("dgx-h100");
    let port = addr("0000:02:00.0"); // a switch downstream port, alone in group 4
    let a = assess(&dgx, port).unwrap();
    assert!(!a.assignable);
    assert_eq!(a.iommu_group, Some(4));
    let endpoint = a.check("endpoint").unwrap();
    assert_eq!(endpoint.status, CheckStatus::Fail);
    assert!(
        endpoint.detail.contains("not assignable"),
        "{}",
        endpoint.detail
    );
    // --force does not make a bridge assignable.
    for force in [false, true] {
        match bind::plan_bind(&dgx, port, force) {
            Err(BindError::NotAssignable { address, failed }) => {
                assert_eq!(address, port);
                let names: Vec<&str> = failed.iter().map(|c| c.name).collect();
                assert_eq!(names, ["endpoint"]);
            }
            other => panic!("expected NotAssignable, got {other:?}"),
        }
    }
}

#[test]
fn the_boot_display_fails_check_as_bind_refuses_it() {
    let ws = fixture("workstation");
    let igpu = addr("0000:00:02.0"); // i915, boot_vga 1, alone in its group
    let a = assess(&ws, igpu).unwrap();
    assert_eq!(a.check("boot_display").unwrap().status, CheckStatus::Fail);
    assert!(!a.assignable);
    match bind::plan_bind(&ws, igpu, false) {
        Err(BindError::HostNeedsGroupMember { needed, .. }) => {
            assert_eq!(needed.len(), 1);
            assert_eq!(
                (needed[0].address, needed[0].reason.as_str()),
                (igpu, "the host's boot display")
            );
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
    let forced = bind::plan_bind(&ws, igpu, true).unwrap();
    assert_eq!(forced.taken_from_host.len(), 1);
}

#[test]
fn two_gpus_in_one_group_need_force_and_the_peer_is_reported() {
    let host = fixture("switch-a100");
    let (gpu, peer) = (addr("0000:03:00.0"), addr("0000:04:00.0"));
    let a = assess(&host, gpu).unwrap();
    assert!(!a.assignable);
    assert_eq!(a.iommu_group, Some(1));
    assert_eq!(
        a.group
            .iter()
            .map(|m| (m.address.to_string(), m.role))
            .collect::<Vec<_>>(),
        [
            ("0000:00:01.0".to_string(), MemberRole::Bridge),
            ("0000:01:00.0".to_string(), MemberRole::Bridge),
            ("0000:02:08.0".to_string(), MemberRole::Bridge),
            ("0000:02:10.0".to_string(), MemberRole::Bridge),
            ("0000:03:00.0".to_string(), MemberRole::Target),
            ("0000:04:00.0".to_string(), MemberRole::Other),
        ]
    );
    let reason = "3D controller on nvidia: a separate device sharing the IOMMU group, not a function of 0000:03:00.0";
    let taken = a.check("taken_from_host").unwrap();
    assert_eq!(taken.status, CheckStatus::Fail);
    assert!(taken.detail.contains(reason), "{}", taken.detail);
    match bind::plan_bind(&host, gpu, false) {
        Err(e @ BindError::HostNeedsGroupMember { .. }) => {
            let BindError::HostNeedsGroupMember { group, needed, .. } = &e else {
                unreachable!()
            };
            assert_eq!(*group, 1);
            assert_eq!(needed.len(), 1);
            assert_eq!(
                (needed[0].address, needed[0].reason.as_str()),
                (peer, reason)
            );
            assert!(e.to_string().contains("--force"), "{e}");
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
    let plan = bind::plan_bind(&host, gpu, true).unwrap();
    let functions: Vec<(String, MemberRole, bool)> = plan
        .functions
        .iter()
        .map(|f| (f.address.to_string(), f.role, f.rebind))
        .collect();
    assert_eq!(
        functions,
        [
            ("0000:03:00.0".to_string(), MemberRole::Target, true),
            ("0000:04:00.0".to_string(), MemberRole::Other, true),
        ]
    );
    assert_eq!(plan.taken_from_host.len(), 1);
    assert_eq!(plan.taken_from_host[0].address, peer);
}

#[test]
fn the_target_itself_is_checked() {
    let dgx = fixture("dgx-h100");
    let nvme = addr("0000:07:00.0");
    match bind::plan_bind(&dgx, nvme, false) {
        Err(BindError::HostNeedsGroupMember { needed, .. }) => {
            assert_eq!(needed.len(), 1);
            assert_eq!(needed[0].address, nvme);
            assert_eq!(needed[0].reason, "Non-Volatile memory controller on nvme");
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
    assert!(!assess(&dgx, nvme).unwrap().assignable);
}

#[test]
fn a_pf_with_enabled_vfs_is_refused_and_vfs_are_not_companions() {
    let host = fixture("switch-a100");
    let (pf, vf0, vf1) = (
        addr("0000:06:00.0"),
        addr("0000:06:00.1"),
        addr("0000:06:00.2"),
    );
    assert_eq!(host.virtual_functions(pf).unwrap(), [vf0, vf1]);
    assert_eq!(host.virtual_functions(vf0).unwrap(), []);
    for a in [pf, vf0, vf1] {
        assert_eq!(host.companions(a).unwrap(), [], "{a}");
    }
    let d = host.device(vf1).unwrap();
    assert_eq!(d.physical_function, Some(pf));
    assert_eq!(host.device(pf).unwrap().physical_function, None);

    let a = assess(&host, pf).unwrap();
    assert!(!a.assignable);
    assert_eq!(a.companions, []);
    let taken = a.check("taken_from_host").unwrap();
    assert_eq!(taken.status, CheckStatus::Fail);
    let reason = "SR-IOV physical function on mlx5_core with 2 VF(s) enabled (0000:06:00.1, 0000:06:00.2): unbinding it removes them from the host";
    assert!(taken.detail.contains(reason), "{}", taken.detail);
    match bind::plan_bind(&host, pf, false) {
        Err(BindError::HostNeedsGroupMember { needed, .. }) => {
            assert_eq!(needed.len(), 1);
            assert_eq!((needed[0].address, needed[0].reason.as_str()), (pf, reason));
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
    // A VF alone in its group is what SR-IOV is for: assignable.
    let a = assess(&host, vf0).unwrap();
    assert!(a.assignable, "{:?}", a.checks);
    let plan = bind::plan_bind(&host, vf0, false).unwrap();
    assert_eq!(plan.functions.len(), 1);
    assert_eq!(plan.functions[0].address, vf0);
}

#[test]
fn a_multi_function_gpu_takes_its_functions_without_force() {
    let host = fixture("switch-a100");
    let gpu = addr("0000:05:00.0");
    let a = assess(&host, gpu).unwrap();
    assert!(a.assignable, "{:?}", a.checks);
    assert_eq!(
        a.companions,
        [
            addr("0000:05:00.1"),
            addr("0000:05:00.2"),
            addr("0000:05:00.3")
        ]
    );
    let reset = a.check("reset").unwrap();
    assert_eq!(
        (reset.status, reset.detail.as_str()),
        (
            CheckStatus::Warn,
            "no reset method: device state can leak from one VM to the next"
        )
    );
    let plan = bind::plan_bind(&host, gpu, false).unwrap();
    assert_eq!(plan.functions.len(), 4);
    assert!(plan
        .functions
        .iter()
        .skip(1)
        .all(|f| f.role == MemberRole::Companion));
    assert!(plan.load_vfio_pci);
}
