//! Broken sysfs trees give typed errors that name the file; nothing panics.

use std::fs;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};

use pcie::check::assess;
use pcie::{Error, Host, PciAddress};

const BDF: &str = "0000:01:00.0";

/// A minimal, valid one-device tree: an H100 in IOMMU group 7.
fn tree() -> (tempfile::TempDir, PathBuf) {
    let root = tempfile::tempdir().unwrap();
    let dev = root
        .path()
        .join("devices/pci0000:00/0000:00:01.0")
        .join(BDF);
    fs::create_dir_all(&dev).unwrap();
    for (name, value) in [
        ("vendor", "0x10de"),
        ("device", "0x2330"),
        ("subsystem_vendor", "0x10de"),
        ("subsystem_device", "0x16c1"),
        ("class", "0x030200"),
        ("revision", "0xa1"),
        ("numa_node", "1"),
        ("driver_override", "(null)"),
        ("current_link_speed", "32.0 GT/s PCIe"),
        ("max_link_speed", "32.0 GT/s PCIe"),
        ("current_link_width", "16"),
        ("max_link_width", "16"),
        ("reset_method", "bus"),
        // Every kernel creates `reset` for a function it can reset.
        ("reset", ""),
        (
            "resource",
            "0x000000009c000000 0x000000009cffffff 0x0000000000040200\n\
             0x0000000000000000 0x0000000000000000 0x0000000000000000",
        ),
    ] {
        fs::write(dev.join(name), format!("{value}\n")).unwrap();
    }
    let bus = root.path().join("bus/pci/devices");
    fs::create_dir_all(&bus).unwrap();
    symlink(
        format!("../../../devices/pci0000:00/0000:00:01.0/{BDF}"),
        bus.join(BDF),
    )
    .unwrap();
    let group = root.path().join("kernel/iommu_groups/7/devices");
    fs::create_dir_all(&group).unwrap();
    symlink(
        format!("../../../../devices/pci0000:00/0000:00:01.0/{BDF}"),
        group.join(BDF),
    )
    .unwrap();
    symlink("../../../../kernel/iommu_groups/7", dev.join("iommu_group")).unwrap();
    (root, dev)
}

fn address() -> PciAddress {
    BDF.parse().unwrap()
}

fn read(root: &Path) -> Result<pcie::PciDevice, Error> {
    Host::new(root).device(address())
}

#[test]
fn valid_tree_reads() {
    let (root, _) = tree();
    let d = read(root.path()).unwrap();
    assert_eq!(
        (d.vendor_id, d.device_id, d.iommu_group, d.numa_node),
        (0x10de, 0x2330, Some(7), Some(1))
    );
    assert_eq!(d.bars.len(), 1);
}

#[test]
fn missing_required_attribute_names_the_file() {
    for name in ["vendor", "device", "class", "revision", "subsystem_vendor"] {
        let (root, dev) = tree();
        fs::remove_file(dev.join(name)).unwrap();
        match read(root.path()) {
            Err(Error::Missing { path }) => {
                assert!(path.ends_with(format!("{BDF}/{name}")), "{path:?}")
            }
            other => panic!("{name}: expected Missing, got {other:?}"),
        }
    }
}

#[test]
fn optional_attributes_may_be_absent() {
    let (root, dev) = tree();
    for name in [
        "numa_node",
        "current_link_speed",
        "max_link_speed",
        "current_link_width",
        "max_link_width",
        "reset_method",
        "resource",
        "driver_override",
    ] {
        fs::remove_file(dev.join(name)).unwrap();
    }
    let d = read(root.path()).unwrap();
    // With `reset` but no `reset_method`, the kernel predates 5.15: it can reset
    // the function and does not say how.
    assert_eq!(
        (d.numa_node, d.link, d.reset_methods.clone(), d.bars.len()),
        (None, None, None, 0)
    );
}

#[test]
fn hidden_reset_method_means_no_reset_method() {
    // Linux 5.15+ hides both `reset_method` and `reset` for a function it cannot
    // reset (and older kernels never create `reset` for one): no reset method, not
    // "kernel too old".
    let (root, dev) = tree();
    fs::remove_file(dev.join("reset_method")).unwrap();
    fs::remove_file(dev.join("reset")).unwrap();
    assert_eq!(read(root.path()).unwrap().reset_methods, Some(vec![]));
    let a = assess(&Host::new(root.path()), address()).unwrap();
    let reset = a.check("reset").unwrap();
    assert_eq!(reset.status, pcie::check::CheckStatus::Warn);
    assert!(
        reset.detail.starts_with("no reset method"),
        "{}",
        reset.detail
    );
}

#[test]
fn huge_garbage_is_quoted_briefly() {
    let (root, dev) = tree();
    // 10 MB of garbage in one line, then in many.
    for garbage in ["x".repeat(10 << 20), "0x1 0x2 0x3 junk\n".repeat(600_000)] {
        fs::write(dev.join("resource"), &garbage).unwrap();
        let err = read(root.path()).unwrap_err();
        let text = err.to_string();
        assert!(matches!(err, Error::Parse { .. }), "{err:?}");
        assert!(text.len() < 400, "{} bytes: {}", text.len(), &text[..400]);
        assert!(text.contains("resource"), "{text}");
    }
}

#[test]
fn garbage_values_are_parse_errors_naming_path_and_value() {
    let cases = [
        ("vendor", "nvidia"),
        ("vendor", "0x10de0"),
        ("class", "0x1030200"),
        ("revision", "0x100"),
        ("numa_node", "-2"),
        ("numa_node", "one"),
        ("current_link_speed", "fast"),
        ("max_link_width", "x16"),
        ("resource", "0x0 0x1"),
        ("resource", "0x2000 0x1000 0x200"),
        ("sriov_totalvfs", "many"),
    ];
    for (name, value) in cases {
        let (root, dev) = tree();
        fs::write(dev.join(name), format!("{value}\n")).unwrap();
        match read(root.path()) {
            Err(Error::Parse {
                path, value: got, ..
            }) => {
                assert!(path.ends_with(format!("{BDF}/{name}")), "{path:?}");
                assert!(
                    got.contains(value),
                    "{name}: {got:?} does not show {value:?}"
                );
            }
            other => panic!("{name}={value}: expected Parse, got {other:?}"),
        }
    }
}

#[test]
fn binary_junk_is_a_parse_error() {
    let (root, dev) = tree();
    fs::write(dev.join("device"), [0xff, 0xfe, 0x00, 0x41]).unwrap();
    assert!(
        matches!(read(root.path()), Err(Error::Parse { path, .. }) if path.ends_with("device"))
    );
}

#[test]
fn dangling_links_are_reported() {
    let (root, dev) = tree();
    symlink("../../../../bus/pci/drivers/nvidia", dev.join("driver")).unwrap();
    match read(root.path()) {
        Err(Error::DanglingLink { path, target }) => {
            assert!(path.ends_with(format!("{BDF}/driver")));
            assert!(target.ends_with("drivers/nvidia"));
        }
        other => panic!("expected DanglingLink, got {other:?}"),
    }

    let (root, dev) = tree();
    fs::remove_file(dev.join("iommu_group")).unwrap();
    symlink(
        "../../../../kernel/iommu_groups/99",
        dev.join("iommu_group"),
    )
    .unwrap();
    assert!(matches!(read(root.path()), Err(Error::DanglingLink { .. })));

    // A bus entry pointing nowhere.
    let (root, _) = tree();
    let bus = root.path().join("bus/pci/devices/0000:02:00.0");
    symlink("../../../devices/pci0000:00/gone", &bus).unwrap();
    match Host::new(root.path()).devices() {
        Err(Error::DeviceNotFound { address, .. }) => {
            assert_eq!(address.to_string(), "0000:02:00.0")
        }
        other => panic!("expected DeviceNotFound, got {other:?}"),
    }
}

#[test]
fn bad_names_in_directories_are_reported() {
    let (root, _) = tree();
    symlink("nowhere", root.path().join("bus/pci/devices/not-a-bdf")).unwrap();
    match Host::new(root.path()).addresses() {
        Err(Error::BadAddress { path, .. }) => assert!(path.ends_with("not-a-bdf")),
        other => panic!("expected BadAddress, got {other:?}"),
    }
    let (root, _) = tree();
    fs::create_dir_all(root.path().join("kernel/iommu_groups/7/devices/garbage")).unwrap();
    match Host::new(root.path()).group(7) {
        Err(Error::BadAddress { path, .. }) => assert!(path.ends_with("7/devices/garbage")),
        other => panic!("expected BadAddress, got {other:?}"),
    }
}

#[test]
fn missing_tree_and_device_are_clear() {
    let empty = tempfile::tempdir().unwrap();
    let any: PciAddress = "0000:01:00.0".parse().unwrap();
    // A root without a PCI bus, for listing and for one device.
    match Host::new(empty.path()).devices() {
        Err(Error::NoPciBus { root, path }) => {
            assert_eq!(root, empty.path());
            assert!(path.ends_with("bus/pci/devices"));
        }
        other => panic!("expected NoPciBus, got {other:?}"),
    }
    assert!(matches!(
        Host::new(empty.path()).device(any),
        Err(Error::NoPciBus { .. })
    ));
    // A root that does not exist.
    let gone = empty.path().join("nonexistent");
    for result in [
        Host::new(&gone).devices().map(|_| ()),
        Host::new(&gone).device(any).map(|_| ()),
        Host::new(&gone).verify(),
    ] {
        match result {
            Err(Error::NoSysfsRoot { root }) => assert_eq!(root, gone),
            other => panic!("expected NoSysfsRoot, got {other:?}"),
        }
    }
    let text = Host::new(&gone).verify().unwrap_err().to_string();
    assert!(text.contains("does not exist"), "{text}");
    let (root, _) = tree();
    let err = Host::new(root.path())
        .device("0000:05:00.0".parse().unwrap())
        .unwrap_err();
    assert!(err.to_string().contains("0000:05:00.0"), "{err}");
    assert!(matches!(
        Host::new(root.path()).group(3),
        Err(Error::GroupNotFound { group: 3, .. })
    ));
}

#[test]
fn symlink_loops_are_reported_as_loops() {
    // The root is a loop.
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (dir.path().join("a"), dir.path().join("b"));
    symlink(&b, &a).unwrap();
    symlink(&a, &b).unwrap();
    match Host::new(&a).devices() {
        Err(Error::SymlinkLoop { path }) => assert_eq!(path, a),
        other => panic!("expected SymlinkLoop, got {other:?}"),
    }
    // A device entry is a loop.
    let (root, _) = tree();
    let bus = root.path().join("bus/pci/devices");
    symlink("0000:03:00.0", bus.join("0000:02:00.0")).unwrap();
    symlink("0000:02:00.0", bus.join("0000:03:00.0")).unwrap();
    match Host::new(root.path()).device("0000:02:00.0".parse().unwrap()) {
        Err(Error::SymlinkLoop { path }) => assert!(path.ends_with("0000:02:00.0")),
        other => panic!("expected SymlinkLoop, got {other:?}"),
    }
    // A `driver` link into a loop.
    let (root, dev) = tree();
    symlink("driver", dev.join("driver")).unwrap();
    match read(root.path()) {
        Err(Error::SymlinkLoop { path }) => assert!(path.ends_with("driver")),
        other => panic!("expected SymlinkLoop, got {other:?}"),
    }
}

#[test]
fn check_reports_broken_iommu_parameter() {
    let (root, _) = tree();
    let param = root.path().join("module/vfio_iommu_type1/parameters");
    fs::create_dir_all(&param).unwrap();
    fs::write(param.join("allow_unsafe_interrupts"), "maybe\n").unwrap();
    match assess(&Host::new(root.path()), address()) {
        Err(Error::Parse { path, .. }) => assert!(path.ends_with("allow_unsafe_interrupts")),
        other => panic!("expected Parse, got {other:?}"),
    }
}
