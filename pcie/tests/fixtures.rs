//! The reader against the fixture hosts: what an operator would read off each one.

use std::path::{Path, PathBuf};

use pcie::iommu::viability_blockers;
use pcie::{GpuArchitecture, Host, InterruptRemapping, NvidiaFunction, VfioPciModule};

fn host(name: &str) -> Host {
    let root: PathBuf = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../fixtures/sysfs")
        .join(name);
    Host::new(root)
}

fn count(host: &Host, function: NvidiaFunction) -> usize {
    host.devices()
        .unwrap()
        .iter()
        .filter(|d| d.nvidia.map(|n| n.function) == Some(function))
        .count()
}

#[test]
fn dgx_h100_inventory() {
    let dgx = host("dgx-h100");
    let devices = dgx.devices().unwrap();
    assert_eq!(devices.len(), 72);
    assert_eq!(count(&dgx, NvidiaFunction::Gpu), 8);
    assert_eq!(count(&dgx, NvidiaFunction::NvSwitch), 4);
    let gpus: Vec<_> = devices
        .iter()
        .filter(|d| d.nvidia.map(|n| n.function) == Some(NvidiaFunction::Gpu))
        .collect();
    for gpu in &gpus {
        assert_eq!(
            gpu.nvidia.unwrap().architecture,
            Some(GpuArchitecture::Hopper)
        );
        assert_eq!(gpu.largest_bar(), 128 << 30);
        let link = gpu.link.unwrap();
        assert_eq!(
            (link.current_speed.unwrap().generation(), link.current_width),
            (Some(5), Some(16))
        );
        assert!(!link.is_degraded());
    }
    let node = |n| {
        gpus.iter()
            .filter(|g| g.numa_node == Some(n))
            .map(|g| g.address.to_string())
            .collect::<Vec<_>>()
    };
    assert_eq!(
        node(0),
        [
            "0000:1b:00.0",
            "0000:43:00.0",
            "0000:52:00.0",
            "0000:61:00.0"
        ]
    );
    assert_eq!(
        node(1),
        [
            "0000:9d:00.0",
            "0000:c3:00.0",
            "0000:d1:00.0",
            "0000:df:00.0"
        ]
    );
    let nics: Vec<_> = devices.iter().filter(|d| d.vendor_id == 0x15b3).collect();
    assert_eq!(nics.len(), 8);
    assert!(nics.iter().all(|n| n.sriov
        == Some(pcie::Sriov {
            total_vfs: 16,
            num_vfs: 0
        })));

    let iommu = dgx.iommu().unwrap();
    assert!(iommu.enabled());
    assert_eq!(iommu.units.len(), 10);
    assert_eq!(iommu.interrupt_remapping, InterruptRemapping::Enabled);
    assert_eq!(iommu.allow_unsafe_interrupts, Some(false));
    assert_eq!(dgx.vfio_pci_module().unwrap(), VfioPciModule::Loaded);
}

#[test]
fn group_viability_follows_the_kernel_rule() {
    let dgx = host("dgx-h100");
    // The pre-bound GPU's group is viable; a GPU on nvidia is not, and names itself.
    assert!(viability_blockers(&dgx.group_members(40).unwrap()).is_empty());
    let blockers = viability_blockers(&dgx.group_members(19).unwrap());
    assert_eq!(blockers.len(), 1);
    assert_eq!(
        (blockers[0].address.to_string(), blockers[0].driver.as_str()),
        ("0000:1b:00.0".into(), "nvidia")
    );

    // Workstation group 1: the root port (pcieport) is ignored, both endpoints block.
    let ws = host("workstation");
    let members = ws.group_members(1).unwrap();
    assert_eq!(
        members
            .iter()
            .map(|m| m.address.to_string())
            .collect::<Vec<_>>(),
        ["0000:00:01.0", "0000:01:00.0", "0000:01:00.1"]
    );
    let blocking: Vec<String> = viability_blockers(&members)
        .iter()
        .map(|b| b.to_string())
        .collect();
    assert_eq!(
        blocking,
        [
            "0000:01:00.0 (driver nvidia)",
            "0000:01:00.1 (driver snd_hda_intel)"
        ]
    );

    // Shared group: bridges and the dummy host bridge are ignored, five endpoints block.
    let shared = host("shared-group");
    let blocking: Vec<String> = viability_blockers(&shared.group_members(1).unwrap())
        .iter()
        .map(|b| b.address.to_string())
        .collect();
    assert_eq!(
        blocking,
        [
            "0000:04:00.0",
            "0000:05:00.0",
            "0000:06:00.0",
            "0000:06:00.1",
            "0000:07:00.0"
        ]
    );
}

#[test]
fn workstation_gpu_details() {
    let ws = host("workstation");
    let gpu = ws.device("0000:01:00.0".parse().unwrap()).unwrap();
    assert_eq!(gpu.nvidia.unwrap().architecture, Some(GpuArchitecture::Ada));
    assert_eq!(gpu.subsystem_vendor_id, 0x1043);
    assert_eq!(gpu.numa_node, None);
    assert!(
        gpu.link.unwrap().is_degraded(),
        "idles at 2.5 GT/s of 16 GT/s"
    );
    assert_eq!(gpu.reset_methods.as_deref(), Some(&["bus".to_string()][..]));
    let kinds: Vec<(u8, pcie::BarKind, bool)> = gpu
        .bars
        .iter()
        .map(|b| (b.index, b.kind, b.prefetchable))
        .collect();
    use pcie::BarKind::*;
    assert_eq!(
        kinds,
        [
            (0, Mem32, false),
            (1, Mem64, true),
            (3, Mem64, true),
            (5, Io, false)
        ]
    );
    let audio = ws.device("0000:01:00.1".parse().unwrap()).unwrap();
    assert_eq!(audio.nvidia.unwrap().function, NvidiaFunction::Audio);
    let igpu = ws.device("0000:00:02.0".parse().unwrap()).unwrap();
    assert_eq!(
        (igpu.vendor_id, igpu.driver.as_deref(), igpu.nvidia),
        (0x8086, Some("i915"), None)
    );
    assert_eq!(ws.vfio_pci_module().unwrap(), VfioPciModule::Unknown);
}

#[test]
fn hosts_without_iommu_or_with_amd_iommu() {
    let bare = host("no-iommu");
    let iommu = bare.iommu().unwrap();
    assert!(!iommu.enabled());
    assert_eq!(iommu.interrupt_remapping, InterruptRemapping::Disabled);
    assert!(bare
        .devices()
        .unwrap()
        .iter()
        .all(|d| d.iommu_group.is_none()));
    let archs: Vec<_> = bare
        .devices()
        .unwrap()
        .iter()
        .filter_map(|d| d.nvidia?.architecture)
        .collect();
    assert_eq!(archs, [GpuArchitecture::Ampere, GpuArchitecture::Turing]);

    let amd = host("shared-group");
    let iommu = amd.iommu().unwrap();
    assert_eq!(iommu.units, ["ivhd0"]);
    assert_eq!(iommu.interrupt_remapping, InterruptRemapping::Enabled);
    let p4 = amd.device("0000:01:00.0".parse().unwrap()).unwrap();
    assert_eq!(
        p4.nvidia.unwrap().architecture,
        Some(GpuArchitecture::Pascal)
    );
    let a2000 = amd.device("0000:06:00.0".parse().unwrap()).unwrap();
    assert_eq!(a2000.reset_methods, Some(vec![]));
}

#[test]
fn switch_a100_functions_resets_and_vfs() {
    let host = host("switch-a100");
    let dev = |s: &str| host.device(s.parse().unwrap()).unwrap();
    // A board's audio, USB and UCSI functions take the GPU's architecture.
    let kinds: Vec<(String, NvidiaFunction, Option<GpuArchitecture>)> = [
        "0000:05:00.0",
        "0000:05:00.1",
        "0000:05:00.2",
        "0000:05:00.3",
    ]
    .iter()
    .map(|a| {
        let n = dev(a).nvidia.unwrap();
        (a.to_string(), n.function, n.architecture)
    })
    .collect();
    use NvidiaFunction::*;
    let t = Some(GpuArchitecture::Turing);
    assert_eq!(
        kinds,
        [
            ("0000:05:00.0".to_string(), Gpu, t),
            ("0000:05:00.1".to_string(), Audio, t),
            ("0000:05:00.2".to_string(), Usb, t),
            ("0000:05:00.3".to_string(), SerialBus, t),
        ]
    );
    // The workstation's RTX 4090 audio function (10de:22ba) too.
    let ws_audio = crate::host("workstation")
        .device("0000:01:00.1".parse().unwrap())
        .unwrap();
    assert_eq!(
        ws_audio.nvidia.unwrap().architecture,
        Some(GpuArchitecture::Ada)
    );
    // Linux 5.15+ hides reset_method (and reset) when there is no reset method.
    assert!(!host
        .sysfs()
        .root()
        .join("bus/pci/devices/0000:05:00.0/reset_method")
        .exists());
    assert_eq!(dev("0000:05:00.0").reset_methods, Some(vec![]));
    assert_eq!(
        dev("0000:05:00.1").reset_methods,
        Some(vec!["flr".to_string()])
    );
    assert_eq!(dev("0000:00:00.0").reset_methods, Some(vec![]));
    // The pre-set override on a GPU still on nvidia.
    let gpu = dev("0000:05:00.0");
    assert_eq!(
        (gpu.driver.as_deref(), gpu.driver_override.as_deref()),
        (Some("nvidia"), Some("vfio-pci"))
    );
    // SR-IOV: the PF reports its enabled VFs, each VF its PF.
    assert_eq!(
        dev("0000:06:00.0").sriov,
        Some(pcie::Sriov {
            total_vfs: 8,
            num_vfs: 2
        })
    );
    let vf = dev("0000:06:00.2");
    assert_eq!(
        (vf.device_id, vf.physical_function.map(|a| a.to_string())),
        (0x101e, Some("0000:06:00.0".to_string()))
    );
    assert_eq!(vf.sriov, None);
    // Two A100s share group 1 with the switch ports.
    let members: Vec<String> = host
        .group(1)
        .unwrap()
        .devices
        .iter()
        .map(|a| a.to_string())
        .collect();
    assert_eq!(
        members,
        [
            "0000:00:01.0",
            "0000:01:00.0",
            "0000:02:08.0",
            "0000:02:10.0",
            "0000:03:00.0",
            "0000:04:00.0"
        ]
    );
}
