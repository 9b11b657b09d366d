//! The native loader's error paths against a fake `libcuda.so` compiled from
//! `tests/fake-libcuda/fake_cuda.c` at test time (needs `cc`; no GPU): a missing
//! library, missing entry points, a failing `cuInit`, no device. Each is a typed
//! error, never a panic.

use std::path::{Path, PathBuf};
use std::process::Command;

use cuda_guest::driver::loader::{Driver, ENTRY_POINTS};
use cuda_guest::driver::{
    Backend, Device, DevicePciAddress, DriverError, LoadOptions, NativeBackend, Resolution,
};

/// Entry points the fake implements itself when exported by name.
const CORE: &[&str] = &[
    "cuInit",
    "cuDriverGetVersion",
    "cuDeviceGetCount",
    "cuDeviceGet",
    "cuGetErrorName",
    "cuGetErrorString",
];

struct Fake {
    _dir: tempfile::TempDir,
    path: PathBuf,
}

fn build_fake(defines: &[&str], extra_c: Option<&str>) -> Fake {
    let dir = tempfile::tempdir().expect("temporary directory");
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fake-libcuda/fake_cuda.c");
    let path = dir.path().join("libcuda.so.1");
    let mut cc = Command::new(std::env::var("CC").unwrap_or_else(|_| "cc".into()));
    cc.args(["-shared", "-fPIC", "-O1", "-o"])
        .arg(&path)
        .arg(&src);
    if let Some(extra) = extra_c {
        let extra_path = dir.path().join("exports.c");
        std::fs::write(&extra_path, extra).expect("write generated C");
        cc.arg(extra_path);
    }
    for d in defines {
        cc.arg(format!("-D{d}"));
    }
    let out = cc
        .output()
        .expect("run cc (a C compiler is needed for these tests)");
    assert!(
        out.status.success(),
        "cc failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Fake { _dir: dir, path }
}

fn options(path: &Path) -> LoadOptions {
    LoadOptions {
        path: Some(path.to_path_buf()),
        ..LoadOptions::default()
    }
}

fn backend(fake: &Fake) -> Result<NativeBackend, DriverError> {
    NativeBackend::with_options(&options(&fake.path))
}

/// Every versioned name but the core ones, as stubs returning NOT_SUPPORTED.
fn versioned_exports() -> String {
    let mut c = String::new();
    for (name, versioned) in ENTRY_POINTS {
        if !CORE.contains(name) {
            c.push_str(&format!("int {versioned}(void) {{ return 801; }}\n"));
        }
    }
    c
}

#[test]
fn missing_library_is_a_typed_error() {
    let err = NativeBackend::with_options(&LoadOptions {
        path: Some("/nonexistent/vmgpu/libcuda.so.1".into()),
        ..LoadOptions::default()
    })
    .unwrap_err();
    match &err {
        DriverError::LibraryNotFound {
            library,
            path,
            reason,
            ..
        } => {
            assert_eq!(*library, "CUDA driver");
            assert_eq!(path, "/nonexistent/vmgpu/libcuda.so.1");
            assert!(!reason.is_empty());
        }
        other => panic!("expected LibraryNotFound, got {other:?}"),
    }
    let msg = err.to_string();
    assert!(msg.contains("/nonexistent/vmgpu/libcuda.so.1"), "{msg}");
    assert!(msg.contains("VMGPU_LIBCUDA"), "{msg}");
}

#[test]
fn library_without_any_entry_point_is_a_typed_error() {
    // Neither cuGetProcAddress_v2 nor the versioned names: not a CUDA driver.
    let fake = build_fake(&[], None);
    let err = backend(&fake).unwrap_err();
    match &err {
        DriverError::SymbolMissing { symbol, reason, .. } => {
            assert_eq!(symbol, "cuInit");
            assert!(reason.contains("no cuGetProcAddress_v2"), "{reason}");
        }
        other => panic!("expected SymbolMissing, got {other:?}"),
    }
}

#[test]
fn entry_point_missing_through_get_proc_address_is_named() {
    let fake = build_fake(&["WITH_GPA", "MISSING=\"cuLaunchKernel\""], None);
    let err = backend(&fake).unwrap_err();
    match &err {
        DriverError::SymbolMissing {
            symbol,
            reason,
            path,
            ..
        } => {
            assert_eq!(symbol, "cuLaunchKernel");
            assert!(reason.contains("symbol not found"), "{reason}");
            assert!(reason.contains("version 12000"), "{reason}");
            assert_eq!(Path::new(path), fake.path);
        }
        other => panic!("expected SymbolMissing, got {other:?}"),
    }
}

#[test]
fn failing_cu_init_is_a_cuda_error_with_name_description_and_hint() {
    let fake = build_fake(&["WITH_GPA", "INIT_RESULT=100"], None);
    let err = backend(&fake).unwrap_err();
    assert_eq!(err.code(), Some(100));
    let cuda = err.as_cuda().expect("a CUDA error");
    assert_eq!(cuda.operation, "cuInit(0)");
    // Name from the built-in table (the fake's cuGetErrorName fails), description from
    // the library's cuGetErrorString.
    assert_eq!(cuda.name, "CUDA_ERROR_NO_DEVICE");
    assert_eq!(
        cuda.description,
        "fake driver: no CUDA-capable device is detected"
    );
    assert!(cuda.hint().is_some_and(|h| h.contains("nvidia-smi")));
    let msg = err.to_string();
    assert!(
        msg.contains("cuInit(0) failed: CUDA_ERROR_NO_DEVICE (100)"),
        "{msg}"
    );
}

#[test]
fn cu_init_returning_stub_library_gets_its_hint() {
    let fake = build_fake(&["WITH_GPA", "INIT_RESULT=34"], None);
    let err = backend(&fake).unwrap_err();
    let cuda = err.as_cuda().expect("a CUDA error");
    assert_eq!(cuda.name, "CUDA_ERROR_STUB_LIBRARY");
    assert!(err.to_string().contains("VMGPU_LIBCUDA"), "{err}");
}

#[test]
fn zero_devices_is_no_device() {
    let fake = build_fake(&["WITH_GPA", "DEVICE_COUNT=0"], None);
    let err = backend(&fake).unwrap_err();
    match err {
        DriverError::NoDevice { driver_version } => assert_eq!(driver_version, 13000),
        other => panic!("expected NoDevice, got {other:?}"),
    }
}

#[test]
fn entry_points_are_requested_for_cuda_12_0_with_explicit_stream_flags() {
    let fake = build_fake(&["WITH_GPA"], None);
    let cuda = backend(&fake).expect("the fake has one device");
    assert_eq!(
        cuda.driver().resolution(),
        Resolution::ProcAddress {
            cuda_version: 12000,
            flags: 1
        }
    );
    // Read what the fake was asked, through the same loaded library.
    // SAFETY: the fake's accessors take no arguments and return plain integers.
    let (version, flags, lookups) = unsafe {
        let lib = libloading::Library::new(&fake.path).expect("reopen the fake");
        let v = lib
            .get::<unsafe extern "C" fn() -> i32>(b"fake_last_version\0")
            .unwrap();
        let f = lib
            .get::<unsafe extern "C" fn() -> u64>(b"fake_last_flags\0")
            .unwrap();
        let n = lib
            .get::<unsafe extern "C" fn() -> i32>(b"fake_lookups\0")
            .unwrap();
        (v(), f(), n())
    };
    assert_eq!(version, 12000);
    assert_eq!(flags, 1, "CU_GET_PROC_ADDRESS_LEGACY_STREAM");
    assert_eq!(lookups as usize, ENTRY_POINTS.len());

    let per_thread = Driver::load(&LoadOptions {
        per_thread_default_stream: true,
        ..options(&fake.path)
    })
    .expect("load");
    assert_eq!(
        per_thread.resolution(),
        Resolution::ProcAddress {
            cuda_version: 12000,
            flags: 2
        }
    );
}

#[test]
fn failing_calls_are_typed_errors_naming_the_operation() {
    let fake = build_fake(&["WITH_GPA", "DEVICE_COUNT=2"], None);
    let cuda = backend(&fake).expect("the fake has two devices");
    assert_eq!(cuda.device_count().unwrap(), 2);
    assert_eq!(cuda.driver_version().unwrap(), 13000);
    let err = cuda.mem_alloc(4096).unwrap_err();
    let e = err.as_cuda().expect("a CUDA error");
    assert_eq!(e.code, 801);
    assert_eq!(e.name, "CUDA_ERROR_NOT_SUPPORTED");
    assert_eq!(e.description, "fake driver: operation not supported");
    assert_eq!(e.operation, "cuMemAlloc_v2(4096 bytes)");
    assert_eq!(cuda.device_name(Device::new(1)).unwrap(), "Fake GPU 1");
    assert_eq!(
        cuda.device_pci_bus_id(Device::new(1)).unwrap(),
        "0000:1c:00.0"
    );
    let addr = cuda.device_pci_address(Device::new(0)).unwrap();
    assert_eq!(addr, "0000:1b:00.0".parse::<pcie::PciAddress>().unwrap());
    let err = cuda.device_uuid(Device::new(1)).unwrap_err();
    assert_eq!(err.as_cuda().unwrap().device, Some(1));
    assert_eq!(err.as_cuda().unwrap().operation, "cuDeviceGetUuid_v2");
    // An ordinal past the count never reaches the driver.
    let err = cuda.device_name(Device::new(7)).unwrap_err();
    assert_eq!(err.cuda_name(), Some("CUDA_ERROR_INVALID_DEVICE"));
}

#[test]
fn primary_context_references_are_counted_and_given_back() {
    let fake = build_fake(&["WITH_GPA"], None);
    // SAFETY: the fake's accessor takes no arguments and returns a plain integer.
    let refs = || unsafe {
        let lib = libloading::Library::new(&fake.path).expect("reopen the fake");
        let f = lib
            .get::<unsafe extern "C" fn() -> i32>(b"fake_ctx_refs\0")
            .unwrap();
        f()
    };
    let cuda = backend(&fake).expect("one device");
    let dev = Device::new(0);
    let a = cuda.primary_context_retain(dev).unwrap();
    // The backend's own reference plus the caller's.
    assert_eq!(refs(), 2);
    let b = cuda.primary_context_retain(dev).unwrap();
    assert_eq!(refs(), 3);
    assert_eq!(a, b);
    cuda.context_set_current(&a).unwrap();
    cuda.primary_context_release(a).unwrap();
    cuda.primary_context_release(b).unwrap();
    assert_eq!(refs(), 1, "the backend keeps its own reference");
    // `Context` is Copy: releasing once more than retained is refused, so the backend's
    // own reference (which keeps every stream and buffer valid) cannot be given away.
    let err = cuda.primary_context_release(a).unwrap_err();
    assert!(err.to_string().contains("released more often"), "{err}");
    assert_eq!(refs(), 1);
    // A handle of another backend is refused.
    let other = backend(&fake).expect("one device");
    let c = other.primary_context_retain(dev).unwrap();
    assert!(cuda.context_set_current(&c).is_err());
    assert!(cuda.primary_context_release(c).is_err());
    // Dropping a backend gives back its own reference and the ones its callers kept.
    let _kept = cuda.primary_context_retain(dev).unwrap();
    assert_eq!(refs(), 4);
    drop(cuda);
    assert_eq!(refs(), 2);
    drop(other);
    assert_eq!(refs(), 0);
}

#[test]
fn a_reset_recovers_the_context_when_no_sticky_error_remains() {
    let fake = build_fake(&["WITH_GPA"], None);
    let cuda = backend(&fake).expect("one device");
    let dev = Device::new(0);
    let ctx = cuda.primary_context_retain(dev).unwrap();
    // SAFETY: nothing was made in the context.
    unsafe { cuda.primary_context_reset(dev) }.unwrap();
    cuda.context_set_current(&ctx).unwrap();
    cuda.primary_context_release(ctx).unwrap();
}

#[test]
fn a_sticky_error_that_survives_the_reset_says_to_restart_the_process() {
    // As on an H100 with CUDA 13 after CUDA_ERROR_ILLEGAL_ADDRESS: the reset returns
    // success, the retain that re-initialises the context fails with the sticky error.
    let fake = build_fake(&["WITH_GPA", "STICKY=700"], None);
    let cuda = backend(&fake).expect("one device");
    let dev = Device::new(0);
    let _ctx = cuda.primary_context_retain(dev).unwrap();
    // SAFETY: nothing was made in the context.
    let err = unsafe { cuda.primary_context_reset(dev) }.unwrap_err();
    let e = err.as_cuda().expect("a CUDA error");
    assert_eq!(
        (e.code, e.name.as_str()),
        (700, "CUDA_ERROR_ILLEGAL_ADDRESS")
    );
    assert!(e.is_sticky());
    assert_eq!(e.device, Some(0));
    assert!(
        e.operation.starts_with("cuDevicePrimaryCtxReset_v2"),
        "{}",
        e.operation
    );
    let detail = e.detail.as_deref().unwrap_or_default();
    assert!(
        detail.contains("survives cuDevicePrimaryCtxReset_v2")
            && detail.contains("restart the process"),
        "{detail}"
    );
    let text = err.to_string();
    assert!(text.contains("must be restarted"), "{text}");
    // A non-sticky failure of the same step carries no such detail.
    let fake = build_fake(&["WITH_GPA", "STICKY=2"], None);
    let cuda = backend(&fake).expect("one device");
    let _ctx = cuda.primary_context_retain(dev).unwrap();
    // SAFETY: nothing was made in the context.
    let err = unsafe { cuda.primary_context_reset(dev) }.unwrap_err();
    assert_eq!(err.cuda_name(), Some("CUDA_ERROR_OUT_OF_MEMORY"), "{err}");
    assert_eq!(err.as_cuda().unwrap().detail, None, "{err}");
}

#[test]
fn old_driver_without_get_proc_address_falls_back_to_versioned_names() {
    let fake = build_fake(&["WITH_CORE"], Some(&versioned_exports()));
    let cuda = backend(&fake).expect("every versioned name is exported");
    assert_eq!(cuda.driver().resolution(), Resolution::Dlsym);
    // The fallback resolved the versioned symbols, e.g. cuMemAlloc_v2.
    assert!(cuda.driver().dlsym_address("cuMemAlloc_v2").is_some());
    let err = cuda.mem_alloc(1).unwrap_err();
    assert_eq!(err.code(), Some(801));
}

#[test]
fn fallback_names_the_missing_versioned_symbol() {
    let exports: String = versioned_exports()
        .lines()
        .filter(|l| !l.contains(" cuMemcpyDtoD_v2("))
        .map(|l| format!("{l}\n"))
        .collect();
    let fake = build_fake(&["WITH_CORE"], Some(&exports));
    match backend(&fake).unwrap_err() {
        DriverError::SymbolMissing { symbol, .. } => assert_eq!(symbol, "cuMemcpyDtoD_v2"),
        other => panic!("expected SymbolMissing, got {other:?}"),
    }
}

#[test]
fn auto_selection_falls_back_to_the_simulator_on_a_driver_without_devices() {
    use cuda_guest::accel::{Accelerator, Choice};
    use cuda_guest::driver::BackendKind;
    let fake = build_fake(&["WITH_GPA", "DEVICE_COUNT=0"], None);
    let acc = Accelerator::builder()
        .backend(Choice::Auto)
        .libcuda(&fake.path)
        .build()
        .expect("auto never fails for want of a GPU");
    assert_eq!(acc.kind(), BackendKind::Simulator);
    assert!(
        acc.selection().reason.contains("no device"),
        "{}",
        acc.selection()
    );
    let err = Accelerator::builder()
        .backend(Choice::Native)
        .libcuda(&fake.path)
        .build()
        .unwrap_err();
    assert!(matches!(err, DriverError::NoBackend { .. }), "{err}");
    assert!(err.to_string().contains("no device"), "{err}");
    // A driver that reports a device is taken by auto.
    let one = build_fake(&["WITH_GPA", "DEVICE_COUNT=1"], None);
    let acc = Accelerator::builder()
        .backend(Choice::Auto)
        .libcuda(&one.path)
        .build()
        .unwrap();
    assert_eq!(acc.kind(), BackendKind::Native);
    assert!(
        acc.selection().reason.contains("1 device(s)"),
        "{}",
        acc.selection()
    );
}
