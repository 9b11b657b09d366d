//! Tests of opening devices and making containers: everything up to the point where the
//! kernel's VFIO is needed, on sysfs fixtures.

use std::io;
use std::path::Path;
use std::sync::Arc;

use pcie::{Host, PciAddress};
use vfio_ioctls::{VfioError, VfioOps};

use super::{KernelDma, KernelVfio};
use crate::vfio::container::Container;
use crate::vfio::device::AssignedDevice;
use crate::vfio::error::{AssignError, ErrorChain, Result};

fn fixture(name: &str) -> Host {
    Host::new(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../fixtures/sysfs")
            .join(name),
    )
}

fn address(text: &str) -> PciAddress {
    text.parse().unwrap()
}

/// The error of an open that must fail.
fn open_error(result: Result<AssignedDevice<KernelVfio>>) -> AssignError {
    result.expect_err("opening succeeded")
}

/// A sysfs tree holding one edu-like device at `address`, whose `iommu_group` link points
/// at `kernel/iommu_groups/<group>`.
fn one_device_tree(address: PciAddress, group: &str) -> tempfile::TempDir {
    let root = tempfile::tempdir().unwrap();
    let dev = root
        .path()
        .join("bus/pci/devices")
        .join(address.to_string());
    std::fs::create_dir_all(&dev).unwrap();
    for (name, value) in [
        ("vendor", "0x1234"),
        ("device", "0x11e8"),
        ("subsystem_vendor", "0x1af4"),
        ("subsystem_device", "0x1100"),
        ("class", "0x00ff00"),
        ("revision", "0x10"),
    ] {
        std::fs::write(dev.join(name), format!("{value}\n")).unwrap();
    }
    std::fs::create_dir_all(root.path().join("kernel/iommu_groups").join(group)).unwrap();
    std::os::unix::fs::symlink(
        format!("../../../../kernel/iommu_groups/{group}"),
        dev.join("iommu_group"),
    )
    .unwrap();
    root
}

#[test]
fn device_without_iommu_group_is_refused_naming_it() {
    let host = fixture("no-iommu");
    let a100 = address("0000:18:00.0");
    for err in [
        open_error(AssignedDevice::open(&host, a100)),
        open_error(AssignedDevice::open_group(&host, a100, 0)),
    ] {
        assert!(
            matches!(err, AssignError::NoIommuGroup { address } if address == a100),
            "{err:?}"
        );
        let message = err.to_string();
        assert!(message.starts_with("0000:18:00.0: "), "{message}");
        assert!(message.contains("no IOMMU group"), "{message}");
    }
}

#[test]
fn unknown_device_reports_the_sysfs_path() {
    let host = fixture("dgx-h100");
    let missing = address("0000:00:1f.7");
    match open_error(AssignedDevice::open(&host, missing)) {
        AssignError::Sysfs {
            address,
            source:
                pcie::Error::DeviceNotFound {
                    address: inner,
                    path,
                },
        } => {
            assert_eq!((address, inner), (missing, missing));
            assert!(
                path.ends_with("bus/pci/devices/0000:00:1f.7"),
                "{}",
                path.display()
            );
        }
        other => panic!("unexpected error {other:?}"),
    }
}

#[test]
fn group_number_comes_from_the_link_target() {
    let gpu = address("0000:1b:00.0");
    let err = open_error(AssignedDevice::open_group(&fixture("dgx-h100"), gpu, 40));
    match &err {
        AssignError::IommuGroupMismatch {
            address,
            expected,
            actual,
        } => assert_eq!((*address, *expected, *actual), (gpu, 40, 19)),
        other => panic!("unexpected error {other:?}"),
    }
    assert_eq!(
        err.to_string(),
        "0000:1b:00.0: device is in IOMMU group 19, not in group 40"
    );
}

#[test]
fn the_right_group_gets_as_far_as_vfio() {
    // Past the sysfs checks the next step is VFIO itself (`/dev/vfio/vfio`, then the
    // group file), which cannot open a fixture's device.
    let host = fixture("dgx-h100");
    let gpu = address("0000:1b:00.0");
    for err in [
        open_error(AssignedDevice::open(&host, gpu)),
        open_error(AssignedDevice::open_group(&host, gpu, 19)),
    ] {
        assert!(
            matches!(err, AssignError::Open { address, group: 19, .. } if address == gpu),
            "{err:?}"
        );
    }
}

/// VFIO interface that maps nothing: a container that can be made without `/dev/vfio`.
struct NoVfio;

impl VfioOps for NoVfio {
    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
}

fn container_without_vfio() -> Container<KernelDma> {
    Container::with_dma_backend(KernelDma {
        ops: Arc::new(NoVfio),
        iommufd: false,
    })
}

#[test]
fn a_device_open_in_the_container_is_refused_before_vfio() {
    let host = fixture("dgx-h100");
    let gpu = address("0000:1b:00.0");
    let container = container_without_vfio();
    let held = container.join(gpu, 19).unwrap();
    for err in [
        open_error(AssignedDevice::open_in(&container, &host, gpu)),
        open_error(AssignedDevice::open_group_in(&container, &host, gpu, 19)),
    ] {
        assert!(
            matches!(err, AssignError::AlreadyOpen { address, group: 19 } if address == gpu),
            "{err:?}"
        );
    }
    // A wrong group is refused before the container is looked at.
    let err = open_error(AssignedDevice::open_group_in(&container, &host, gpu, 3));
    assert!(
        matches!(
            err,
            AssignError::IommuGroupMismatch {
                expected: 3,
                actual: 19,
                ..
            }
        ),
        "{err:?}"
    );
    drop(held);
    // Free again: the open reaches VFIO, fails there, and leaves the container empty.
    let err = open_error(AssignedDevice::open_in(&container, &host, gpu));
    assert!(
        matches!(
            &err,
            AssignError::Open {
                address,
                group: 19,
                source: VfioError::DowncastVfioOps,
            } if *address == gpu
        ),
        "{err:?}"
    );
    assert!(container.members().0.is_empty());
    assert!(container.groups().is_empty());
}

#[test]
fn a_busy_group_file_is_reported_as_such() {
    let edu = address("0000:01:02.0");
    let busy = VfioError::OpenGroup(io::Error::from_raw_os_error(libc::EBUSY), "1".into());
    let err = super::open::open_error(edu, 1, busy);
    assert!(
        matches!(&err, AssignError::GroupBusy { address, group: 1, source }
            if *address == edu && source.raw_os_error() == Some(libc::EBUSY)),
        "{err:?}"
    );
    assert_eq!(
        ErrorChain(&err).to_string(),
        "0000:01:02.0: IOMMU group 1 is in use by another VFIO container or process \
         (/dev/vfio/1); open all devices of a group in one container: \
         Device or resource busy (os error 16)"
    );
    // Other failures to open the group file stay plain open errors.
    let missing = VfioError::OpenGroup(io::Error::from_raw_os_error(libc::ENOENT), "1".into());
    assert!(matches!(
        super::open::open_error(edu, 1, missing),
        AssignError::Open {
            group: 1,
            source: VfioError::OpenGroup(..),
            ..
        }
    ));
}

#[test]
fn a_new_container_is_empty_or_names_dev_vfio() {
    // Whether `/dev/vfio/vfio` exists depends on the host (the vfio module); both outcomes
    // are checked for what they must hold.
    match Container::new() {
        Ok(container) => {
            assert!(container.members().0.is_empty());
            assert!(!container.dma_backend().is_iommufd());
            let memory =
                vm_memory::GuestMemoryMmap::from_ranges(&[(vm_memory::GuestAddress(0), 0x1000)])
                    .unwrap();
            assert!(matches!(
                container.map_guest_memory(&memory).map(|_| ()),
                Err(AssignError::EmptyContainer)
            ));
        }
        Err(AssignError::Container {
            source: VfioError::OpenContainer(e),
        }) => assert_eq!(e.kind(), io::ErrorKind::NotFound, "{e}"),
        Err(other) => panic!("unexpected {other:?}"),
    }
}

/// A VM of this host's KVM. Needs `/dev/kvm` (this project's machines and CI have it) and
/// fails rather than skip without it.
#[cfg(feature = "kvm")]
fn vm() -> kvm_ioctls::VmFd {
    kvm_ioctls::Kvm::new()
        .unwrap_or_else(|e| panic!("KVM container test needs KVM: opening /dev/kvm failed: {e}"))
        .create_vm()
        .unwrap_or_else(|e| panic!("KVM_CREATE_VM failed: {e}"))
}

#[cfg(feature = "kvm")]
#[test]
fn kvm_container_creates_the_kvm_vfio_device() {
    let vm = vm();
    // The KVM VFIO device is created first; the container itself needs `/dev/vfio/vfio`,
    // which depends on the host.
    match Container::with_kvm_device(&vm) {
        Ok(container) => assert!(container.members().0.is_empty()),
        Err(AssignError::Container {
            source: VfioError::OpenContainer(e),
        }) => assert_eq!(e.kind(), io::ErrorKind::NotFound, "{e}"),
        Err(other) => panic!("unexpected {other:?}"),
    }
    // KVM allows one VFIO device per VM: with one held, creating the container's fails,
    // and the error says which step.
    let mut device = kvm_bindings::kvm_create_device {
        type_: kvm_bindings::kvm_device_type_KVM_DEV_TYPE_VFIO,
        fd: 0,
        flags: 0,
    };
    let _held = vm.create_device(&mut device).unwrap();
    let err = Container::with_kvm_device(&vm).unwrap_err();
    match &err {
        AssignError::KvmVfioDevice { source } => assert_eq!(source.errno(), libc::EBUSY),
        other => panic!("unexpected {other:?}"),
    }
    assert_eq!(
        err.to_string(),
        "creating the KVM VFIO device (KVM_CREATE_DEVICE, KVM_DEV_TYPE_VFIO) failed"
    );
    assert_eq!(
        ErrorChain(&err).to_string(),
        format!(
            "creating the KVM VFIO device (KVM_CREATE_DEVICE, KVM_DEV_TYPE_VFIO) failed: {}",
            io::Error::from_raw_os_error(libc::EBUSY)
        )
    );
}

#[test]
fn non_numeric_group_is_rejected() {
    let edu = address("0000:00:03.0");
    let root = one_device_tree(edu, "abc");
    match open_error(AssignedDevice::open(&Host::new(root.path()), edu)) {
        AssignError::Sysfs {
            address,
            source: pcie::Error::Parse { path, value, .. },
        } => {
            assert_eq!(address, edu);
            assert!(
                path.ends_with("bus/pci/devices/0000:00:03.0/iommu_group"),
                "{}",
                path.display()
            );
            assert_eq!(value, "abc");
        }
        other => panic!("unexpected error {other:?}"),
    }
}

#[test]
fn numeric_group_of_a_minimal_tree_is_read() {
    let edu = address("0000:00:03.0");
    let root = one_device_tree(edu, "7");
    let err = open_error(AssignedDevice::open_group(&Host::new(root.path()), edu, 8));
    assert!(
        matches!(
            err,
            AssignError::IommuGroupMismatch {
                expected: 8,
                actual: 7,
                ..
            }
        ),
        "{err:?}"
    );
}
