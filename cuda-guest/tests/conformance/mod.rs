//! The driver API's conformance suite: the behaviour of every `Backend` method, written
//! once over `Arc<dyn Backend>` with the values NVIDIA's driver gives, and run against
//! every path by [`conformance_suite!`]:
//!
//! - `cuda-guest/tests/conformance_sim.rs`: `SimBackend` directly;
//! - `cuda-guest/tests/conformance_remote.rs`: `RemoteBackend` (`vmgpu_cuda_proto::client`)
//!   directly, forwarding to a `cuda_guest::service` on the simulator;
//! - `cuda-guest/libcuda/tests/conformance_shim.rs`: `NativeBackend` on vmgpu's
//!   `libcuda.so.1` in simulator mode;
//! - `cuda-guest/libcuda/tests/conformance_forward.rs`: the same library forwarding to a
//!   `cuda_guest::service` on the simulator;
//! - `cuda-guest/tests/conformance_native.rs` and
//!   `cuda-guest/libcuda/tests/conformance_forward_native.rs`: NVIDIA's driver directly,
//!   and the library forwarding to a service on it (ignored without a GPU).
//!
//! A check that fails on one path and passes on another is a difference between the
//! paths: a defect. Where the simulator's virtual device differs from a GPU in figures
//! (name, memory size, SM count) the checks test relations, not numbers. The checks that
//! fail today are listed, with the reason, in `KNOWN_FAILING` beside this file.
//!
//! Every expected `CUresult` is compared exactly through `DriverError::status()` (what a
//! C program of `libcuda.so.1` would get).

#![allow(dead_code)]

use std::sync::{Arc, Mutex, MutexGuard};

use cuda_guest::driver::sim::SIM_DEVICE_NAME;
use cuda_guest::driver::{
    Backend, BackendKind, Context, Device, DeviceAttribute, DevicePtr, DriverError, Event,
    EventFlags, Function, HostAllocFlags, HostRegisterFlags, LaunchConfig, LoadOptions, Module,
    NativeBackend, ParamLayout, Result, SimBackend, Status, Stream, StreamFlags,
};
use cuda_guest::sim::SimConfig;

/// `fixtures/ptx/vector_add.nvrtc.ptx`: `vector_add(const float *a, const float *b,
/// float *c, int n)`.
pub const VECTOR_ADD_PTX: &str = include_str!("../../../fixtures/ptx/vector_add.nvrtc.ptx");
/// `fixtures/ptx/oob_write.nvrtc.ptx`: `oob_write(float *out, int n)` writes `out[i]`
/// for every `i <= n`.
pub const OOB_WRITE_PTX: &str = include_str!("../../../fixtures/ptx/oob_write.nvrtc.ptx");
/// The native tests' kernels (`spin`, `block_sum`, `register_hog`; verified on an H100).
pub const KERNELS_PTX: &str = include_str!("../native-ptx/kernels.ptx");

/// A PTX module that does not compile (an unknown instruction on line 6).
pub const BAD_PTX: &str = ".version 7.0\n.target sm_80\n.address_size 64\n\
     .visible .entry k(.param .u64 p)\n{\n    frobnicate.u32 %r1, 3;\n    ret;\n}\n";

/// `spin`'s busy time in SM clock cycles: about 0.2 s on the simulator (whose clock
/// counts nanoseconds), 0.1 s on a 2 GHz GPU.
pub const SPIN_CYCLES: i64 = 200_000_000;

/// The device under test: a backend, device 0 and its primary context, retained and
/// current on the thread that made the fixture (released when it is dropped).
#[derive(Debug)]
pub struct Fixture {
    /// The path under test.
    pub backend: Arc<dyn Backend>,
    /// Device 0.
    pub dev: Device,
    /// Device 0's primary context, retained by the fixture.
    pub ctx: Context,
    /// Whether the device is vmgpu's simulator (directly, or behind vmgpu's
    /// `libcuda.so.1`): memory figures are then exact, and a reset clears a sticky
    /// error.
    pub simulated: bool,
    // Last: the next test starts once this one's backend is gone.
    _serial: Option<MutexGuard<'static, ()>>,
}

impl Fixture {
    /// Retains device 0's primary context on `backend` and makes it current.
    pub fn new(backend: Arc<dyn Backend>, serial: Option<MutexGuard<'static, ()>>) -> Fixture {
        let dev = Device::new(0);
        let ctx = backend
            .primary_context_retain(dev)
            .unwrap_or_else(|e| panic!("cuDevicePrimaryCtxRetain(0): {e}"));
        backend
            .context_set_current(&ctx)
            .unwrap_or_else(|e| panic!("cuCtxSetCurrent(primary): {e}"));
        let simulated = backend.kind() == BackendKind::Simulator
            || backend.device_name(dev).is_ok_and(|n| n == SIM_DEVICE_NAME);
        Fixture {
            backend,
            dev,
            ctx,
            simulated,
            _serial: serial,
        }
    }

    /// The backend.
    pub fn b(&self) -> &dyn Backend {
        &*self.backend
    }

    /// Makes the primary context current on the calling thread.
    pub fn bind(&self) {
        self.backend
            .context_set_current(&self.ctx)
            .unwrap_or_else(|e| panic!("cuCtxSetCurrent(primary): {e}"));
    }
}

impl Drop for Fixture {
    fn drop(&mut self) {
        // Errors are the test's business (a sticky one, on the native driver).
        let _ = self.backend.context_set_current(&self.ctx);
        let _ = self.backend.primary_context_release(self.ctx);
    }
}

/// Serialises the tests that share one process-wide driver (the native backend on a
/// GPU or on vmgpu's `libcuda.so.1`): its primary context, its memory figures and a
/// sticky fault are the process's.
static SERIAL: Mutex<()> = Mutex::new(());

/// One test at a time on a process-wide driver.
pub fn serial() -> MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// `SimBackend` with two threads: a device of its own for each test.
pub fn sim() -> Fixture {
    let sim = SimBackend::new(SimConfig {
        threads: 2,
        ..SimConfig::default()
    })
    .expect("the simulator starts");
    Fixture::new(Arc::new(sim), None)
}

/// `NativeBackend` loaded as `options` say (serialised).
pub fn native_with(options: &LoadOptions) -> Fixture {
    let serial = serial();
    let native = NativeBackend::with_options(options)
        .unwrap_or_else(|e| panic!("the native backend did not load: {e}"));
    Fixture::new(Arc::new(native), Some(serial))
}

/// `NativeBackend` on the library `VMGPU_LIBCUDA` names, else `libcuda.so.1`.
pub fn native() -> Fixture {
    native_with(&LoadOptions::default())
}

/// How an instantiation runs the tests that leave a sticky error behind.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Faults {
    /// In the test's own thread: the simulator's device is the fixture's own, or a
    /// reset (which the simulator honours) recovers the shared one.
    InProcess,
    /// Each in a child process (this test binary run again for that one test): on the
    /// native driver a sticky error poisons the whole process, and a reset does not
    /// clear it.
    ChildProcess,
}

/// Set, to the test's name, in the child process that runs one faulting test.
pub const FAULT_CHILD_ENV: &str = "VMGPU_CONFORMANCE_FAULT_CHILD";

/// Runs the faulting test `name` (`body` over `setup()`) as `faults` says; in a child
/// process, the parent asserts that the child ran exactly that test and that it passed.
pub fn faulting(name: &str, faults: Faults, setup: fn() -> Fixture, body: fn(&Fixture)) {
    if faults == Faults::InProcess || std::env::var(FAULT_CHILD_ENV).as_deref() == Ok(name) {
        return body(&setup());
    }
    // One test at a time, the child's included.
    let _serial = serial();
    let exe = std::env::current_exe().expect("the test binary's path");
    let out = std::process::Command::new(&exe)
        .args([
            name,
            "--exact",
            "--include-ignored",
            "--test-threads=1",
            "--nocapture",
        ])
        .env(FAULT_CHILD_ENV, name)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {} for {name}: {e}", exe.display()));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    println!(
        "--- child process for {name}: {} ---\n{stdout}{stderr}--- end of child ---",
        out.status
    );
    assert!(
        out.status.success(),
        "{name} failed in its child process ({})",
        out.status
    );
    assert!(
        stdout.contains(&format!("test {name} ... "))
            && stdout.contains("test result: ok. 1 passed; 0 failed"),
        "the child process did not run {name} (exactly once): {stdout}"
    );
}

/// Instantiates every check of the suite with `$setup` (a `fn() -> Fixture`) and
/// `$faults` (a [`Faults`]), each a `#[test]` with the given attributes (e.g.
/// `#[ignore = "..."]`). The including file names this module `conformance`.
#[macro_export]
macro_rules! conformance_suite {
    ($setup:path, $faults:expr $(, #[$attr:meta])*) => {
        conformance_suite!(@each $setup, [$(#[$attr])*],
            driver_version_is_a_cuda_version,
            device_ordinals_beyond_the_count_are_invalid_device,
            device_name_and_uuid_are_stable,
            pci_bus_id_is_formatted_from_the_pci_attributes,
            device_attributes_are_the_drivers,
            every_defined_device_attribute_answers,
            unknown_device_attribute_is_invalid_value,
            total_memory_and_mem_get_info_agree,
            primary_context_retain_is_reference_counted,
            primary_context_reset_frees_its_allocations,
            calls_without_a_current_context_are_invalid_context,
            the_current_context_is_per_thread,
            a_created_context_is_a_context_of_its_own,
            destroying_a_created_context_frees_its_memory,
            a_created_contexts_memory_is_device_memory,
            an_event_cannot_be_recorded_on_a_stream_of_another_context,
            mem_get_info_follows_allocations,
            mem_alloc_of_zero_bytes_is_invalid_value,
            mem_free_of_a_non_allocation_is_invalid_value,
            out_of_memory_is_not_sticky,
            memset_d8_d16_d32,
            memset_async_d8_d16_d32,
            misaligned_memsets_are_invalid_value,
            sync_copies_and_partial_ranges,
            out_of_range_copies_are_invalid_value,
            async_copies_with_pageable_memory,
            async_copies_with_pinned_memory,
            async_copies_with_registered_memory,
            host_registration_errors,
            host_alloc_flags,
            module_load_and_get_function,
            unknown_kernel_is_not_found,
            invalid_ptx_is_invalid_ptx_with_a_jit_log,
            newer_ptx_isa_is_unsupported_ptx_version,
            function_params_where_known,
            dynamic_shared_memory_needs_the_opt_in,
            stream_create_flags_and_idle_query,
            stream_query_before_and_after_work,
            stream_wait_event_orders_two_streams,
            an_idle_streams_event_is_not_held_behind_another_streams_kernel,
            stream_destroy_lets_pending_work_finish,
            event_query_and_synchronize,
            event_elapsed_time,
            elapsed_time_of_unrecorded_or_untimed_events_is_invalid_handle,
            vector_add_computes,
            bad_launch_geometry_is_invalid_value,
            launch_beyond_the_register_file_is_out_of_resources,
            a_cooperative_launch_computes,
        );
        // These leave a sticky error behind.
        conformance_suite!(@faulting $setup, $faults, [$(#[$attr])*],
            faulting_kernel_is_a_sticky_illegal_address,
        );
    };
    (@each $setup:path, [$($attr:tt)*], $name:ident $(, $rest:ident)* $(,)?) => {
        #[test]
        $($attr)*
        fn $name() {
            conformance::check(module_path!(), stringify!($name), || {
                let f = $setup();
                conformance::$name(&f);
            });
        }
        conformance_suite!(@each $setup, [$($attr)*] $(, $rest)*);
    };
    (@each $setup:path, [$($attr:tt)*] $(,)?) => {};
    (@faulting $setup:path, $faults:expr, [$($attr:tt)*], $name:ident $(, $rest:ident)* $(,)?) => {
        #[test]
        $($attr)*
        fn $name() {
            conformance::check(module_path!(), stringify!($name), || {
                conformance::faulting(stringify!($name), $faults, $setup, conformance::$name);
            });
        }
        conformance_suite!(@faulting $setup, $faults, [$($attr)*] $(, $rest)*);
    };
    (@faulting $setup:path, $faults:expr, [$($attr:tt)*] $(,)?) => {};
}

// ---------------------------------------------------------------------------------------
// Known differences.

/// `KNOWN_FAILING` (beside this file): the checks a path still fails, each with what it
/// observes and what NVIDIA's driver does.
const KNOWN_FAILING: &str = include_str!("KNOWN_FAILING");

/// Why `path::name` is a known difference, if it is listed in [`KNOWN_FAILING`].
pub fn known_difference(path: &str, name: &str) -> Option<&'static str> {
    let key = format!("{path}::{name}");
    KNOWN_FAILING.lines().find_map(|line| {
        let (test, why) = line.split_once('#').unwrap_or((line, ""));
        (test.trim() == key).then_some(why.trim())
    })
}

/// Runs check `name` on `path`. A check listed in `KNOWN_FAILING` must still fail there
/// (it is reported with its reason); once it passes, the test fails until the line is
/// removed, so the list is always exactly what differs. Any other check must pass.
pub fn check(path: &str, name: &str, body: impl FnOnce() + std::panic::UnwindSafe) {
    match known_difference(path, name) {
        None => body(),
        Some(why) => match std::panic::catch_unwind(body) {
            Err(_) => println!("known difference {path}::{name}: {why}"),
            Ok(()) => panic!(
                "{path}::{name} now behaves as NVIDIA's driver: remove it from \
                 cuda-guest/tests/conformance/KNOWN_FAILING"
            ),
        },
    }
}

// ---------------------------------------------------------------------------------------
// Helpers.

/// The error of `r`, which must be `want` (compared as `CUresult`s).
#[track_caller]
pub fn expect_status<T: std::fmt::Debug>(r: Result<T>, want: Status, what: &str) -> DriverError {
    match r {
        Ok(v) => panic!("{what}: succeeded ({v:?}); expected {want}"),
        Err(e) => {
            assert_eq!(
                e.status(),
                want,
                "{what}: got {} ({e}); expected {want}",
                e.status()
            );
            e
        }
    }
}

/// `r`'s value, with `what` in the panic message.
#[track_caller]
pub fn ok<T>(r: Result<T>, what: &str) -> T {
    r.unwrap_or_else(|e| panic!("{what}: {e}"))
}

/// Device memory holding `data`.
#[track_caller]
pub fn upload(f: &Fixture, data: &[u8]) -> DevicePtr {
    let p = ok(f.b().mem_alloc(data.len().max(1)), "cuMemAlloc");
    // SAFETY: `p` is a live device allocation of at least `data.len()` bytes.
    ok(unsafe { f.b().memcpy_htod(p, data) }, "cuMemcpyHtoD");
    p
}

/// `n` bytes of device memory at `p`.
#[track_caller]
pub fn download(f: &Fixture, p: DevicePtr, n: usize) -> Vec<u8> {
    let mut out = vec![0u8; n];
    // SAFETY: the callers name ranges of their own live device allocations.
    ok(unsafe { f.b().memcpy_dtoh(&mut out, p) }, "cuMemcpyDtoH");
    out
}

fn u32s(bytes: &[u8]) -> Vec<u32> {
    bytes
        .chunks_exact(4)
        .map(|c| u32::from_le_bytes(c.try_into().unwrap()))
        .collect()
}

fn f32s(bytes: &[u8]) -> Vec<f32> {
    bytes
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .collect()
}

fn f32_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// A pattern of `n` bytes, different at every offset of a small period.
fn pattern(n: usize, seed: u8) -> Vec<u8> {
    (0..n)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

/// A kernel of a freshly loaded module.
#[track_caller]
pub fn kernel(f: &Fixture, ptx: &str, name: &str) -> (Module, Function) {
    let m = ok(f.b().module_load_ptx(ptx), "cuModuleLoadData");
    let k = ok(
        f.b().module_get_function(&m, name),
        &format!("cuModuleGetFunction({name})"),
    );
    (m, k)
}

/// Launches `spin` (busy for [`SPIN_CYCLES`], then `*flag = value`) on `stream`.
#[track_caller]
pub fn launch_spin(f: &Fixture, spin: &Function, stream: &Stream, flag: DevicePtr, value: u32) {
    let args: [&[u8]; 3] = [
        &SPIN_CYCLES.to_le_bytes(),
        &flag.0.to_le_bytes(),
        &value.to_le_bytes(),
    ];
    // SAFETY: spin(long long, unsigned *, unsigned) writes one u32 at `flag`, a live
    // allocation of the caller.
    ok(
        unsafe {
            f.b()
                .launch(spin, &LaunchConfig::linear(1, 32), stream, &args)
        },
        "cuLaunchKernel(spin)",
    );
}

/// Launches `vector_add(a, b, c, n)` of the fixture PTX.
///
/// # Safety
/// `a`, `b` and `c` hold at least `n` floats each.
pub unsafe fn launch_vector_add(
    f: &Fixture,
    k: &Function,
    cfg: &LaunchConfig,
    stream: &Stream,
    (a, b, c, n): (DevicePtr, DevicePtr, DevicePtr, i32),
) -> Result<()> {
    let args: [&[u8]; 4] = [
        &a.0.to_le_bytes(),
        &b.0.to_le_bytes(),
        &c.0.to_le_bytes(),
        &n.to_le_bytes(),
    ];
    // SAFETY: the caller guarantees the three buffers hold n floats; vector_add reads a
    // and b and writes c below n.
    unsafe { f.b().launch(k, cfg, stream, &args) }
}

/// Host memory aligned to a page, for registration.
#[derive(Debug)]
pub struct PageBuf {
    ptr: *mut u8,
    len: usize,
}

impl PageBuf {
    /// `len` zeroed bytes.
    pub fn new(len: usize) -> PageBuf {
        assert!(len > 0);
        let layout = std::alloc::Layout::from_size_align(len, 4096).unwrap();
        // SAFETY: the layout has a non-zero size (asserted).
        let ptr = unsafe { std::alloc::alloc_zeroed(layout) };
        assert!(!ptr.is_null(), "out of host memory");
        PageBuf { ptr, len }
    }
    /// Its bytes.
    pub fn as_slice(&self) -> &[u8] {
        // SAFETY: `ptr` is a live allocation of `len` initialised bytes, borrowed
        // immutably with `self`.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }
    /// Its bytes, mutably.
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: as above, borrowed mutably with `self`.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }
}

impl Drop for PageBuf {
    fn drop(&mut self) {
        let layout = std::alloc::Layout::from_size_align(self.len, 4096).unwrap();
        // SAFETY: allocated in `new` with this layout, freed once.
        unsafe { std::alloc::dealloc(self.ptr, layout) };
    }
}

// ---------------------------------------------------------------------------------------
// Devices.

/// `cuDriverGetVersion`: a CUDA version (`1000 * major + 10 * minor`), 12.0 or newer
/// (the ABI every path is asked for).
pub fn driver_version_is_a_cuda_version(f: &Fixture) {
    let v = ok(f.b().driver_version(), "cuDriverGetVersion");
    assert!(v >= 12000, "driver version {v}");
    assert_eq!(
        v % 10,
        0,
        "driver version {v} is not 1000 * major + 10 * minor"
    );
}

/// Every device query of an ordinal at or beyond `cuDeviceGetCount` is
/// `CUDA_ERROR_INVALID_DEVICE`.
pub fn device_ordinals_beyond_the_count_are_invalid_device(f: &Fixture) {
    let b = f.b();
    let n = ok(b.device_count(), "cuDeviceGetCount");
    assert!(n >= 1, "{n} devices");
    let bad = Device::new(n);
    let want = Status::ERROR_INVALID_DEVICE;
    expect_status(b.device_name(bad), want, "cuDeviceGetName(count)");
    expect_status(b.device_uuid(bad), want, "cuDeviceGetUuid(count)");
    expect_status(b.device_pci_bus_id(bad), want, "cuDeviceGetPCIBusId(count)");
    expect_status(
        b.device_attribute(bad, DeviceAttribute::WarpSize),
        want,
        "cuDeviceGetAttribute(WARP_SIZE, count)",
    );
    expect_status(b.device_total_mem(bad), want, "cuDeviceTotalMem(count)");
    expect_status(
        b.primary_context_retain(bad),
        want,
        "cuDevicePrimaryCtxRetain(count)",
    );
}

/// `cuDeviceGetName` and `cuDeviceGetUuid`: a printable name, a non-zero UUID, the same
/// at every call.
pub fn device_name_and_uuid_are_stable(f: &Fixture) {
    let b = f.b();
    let name = ok(b.device_name(f.dev), "cuDeviceGetName");
    assert!(!name.is_empty() && name.len() < 256, "{name:?}");
    assert!(
        name.chars().all(|c| !c.is_control()),
        "control characters in {name:?}"
    );
    assert_eq!(ok(b.device_name(f.dev), "cuDeviceGetName"), name);
    let uuid = ok(b.device_uuid(f.dev), "cuDeviceGetUuid");
    assert_ne!(uuid, [0u8; 16]);
    assert_eq!(ok(b.device_uuid(f.dev), "cuDeviceGetUuid"), uuid);
}

/// `cuDeviceGetPCIBusId` is `DDDD:BB:DD.0` in lowercase hex, from the PCI domain, bus and
/// device attributes.
pub fn pci_bus_id_is_formatted_from_the_pci_attributes(f: &Fixture) {
    let b = f.b();
    let id = ok(b.device_pci_bus_id(f.dev), "cuDeviceGetPCIBusId");
    let attr = |a| {
        ok(
            b.device_attribute(f.dev, a),
            &format!("cuDeviceGetAttribute({a:?})"),
        )
    };
    let (domain, bus, device) = (
        attr(DeviceAttribute::PciDomainId),
        attr(DeviceAttribute::PciBusId),
        attr(DeviceAttribute::PciDeviceId),
    );
    assert!(
        (0..=0xffff).contains(&domain) && (0..=0xff).contains(&bus) && (0..32).contains(&device),
        "domain {domain}, bus {bus}, device {device}"
    );
    assert_eq!(id, format!("{domain:04x}:{bus:02x}:{device:02x}.0"));
}

/// `cuDeviceGetAttribute`: the values every CUDA device of compute capability 5.0 or
/// newer reports, and relations between the others.
pub fn device_attributes_are_the_drivers(f: &Fixture) {
    use DeviceAttribute as A;
    let b = f.b();
    let attr = |a| {
        ok(
            b.device_attribute(f.dev, a),
            &format!("cuDeviceGetAttribute({a:?})"),
        )
    };
    for (a, want) in [
        (A::MaxThreadsPerBlock, 1024),
        (A::MaxBlockDimX, 1024),
        (A::MaxBlockDimY, 1024),
        (A::MaxBlockDimZ, 64),
        (A::MaxGridDimX, i32::MAX),
        (A::MaxGridDimY, 65535),
        (A::MaxGridDimZ, 65535),
        (A::WarpSize, 32),
        (A::MaxSharedMemoryPerBlock, 48 << 10),
        (A::TotalConstantMemory, 64 << 10),
        (A::MaxRegistersPerBlock, 64 << 10),
        (A::UnifiedAddressing, 1),
        (A::HostRegisterSupported, 1),
    ] {
        assert_eq!(attr(a), want, "{a:?}");
        // The same attribute by number.
        assert_eq!(attr(A::Raw(a.code())), want, "{a:?} by number {}", a.code());
    }
    let (major, minor) = (
        attr(A::ComputeCapabilityMajor),
        attr(A::ComputeCapabilityMinor),
    );
    assert!(major >= 5 && (0..10).contains(&minor), "{major}.{minor}");
    assert_eq!(
        ok(b.compute_capability(f.dev), "compute capability"),
        (major as u32, minor as u32)
    );
    let optin = attr(A::MaxSharedMemoryPerBlockOptin);
    assert!(optin >= 48 << 10, "opt-in shared memory {optin}");
    assert!(
        attr(A::MaxSharedMemoryPerMultiprocessor) >= optin,
        "shared memory per SM below the per-block opt-in"
    );
    let per_sm = attr(A::MaxThreadsPerMultiprocessor);
    assert!(
        per_sm >= 1024 && per_sm % 32 == 0,
        "{per_sm} threads per SM"
    );
    for a in [
        A::MultiprocessorCount,
        A::ClockRate,
        A::MemoryClockRate,
        A::GlobalMemoryBusWidth,
        A::L2CacheSize,
    ] {
        assert!(attr(a) > 0, "{a:?} = {}", attr(a));
    }
    for a in [
        A::EccEnabled,
        A::Integrated,
        A::CanMapHostMemory,
        A::ConcurrentKernels,
        A::ManagedMemory,
    ] {
        assert!(
            (0..=1).contains(&attr(a)),
            "{a:?} = {} is not a flag",
            attr(a)
        );
    }
}

/// Every attribute number `cuda.h` defines answers (a program asks for any of them;
/// the driver answers each, with 0 for a feature the device lacks).
pub fn every_defined_device_attribute_answers(f: &Fixture) {
    for n in 1..cuda_guest::driver::sys::CU_DEVICE_ATTRIBUTE_MAX {
        ok(
            f.b().device_attribute(f.dev, DeviceAttribute::Raw(n)),
            &format!("cuDeviceGetAttribute({n})"),
        );
    }
}

/// An attribute number the driver does not define is `CUDA_ERROR_INVALID_VALUE`.
pub fn unknown_device_attribute_is_invalid_value(f: &Fixture) {
    for n in [9999, -1] {
        expect_status(
            f.b().device_attribute(f.dev, DeviceAttribute::Raw(n)),
            Status::ERROR_INVALID_VALUE,
            &format!("cuDeviceGetAttribute({n})"),
        );
    }
}

/// `cuDeviceTotalMem` and `cuMemGetInfo`: free ≤ total ≤ the device's memory (the
/// driver keeps a little for itself).
pub fn total_memory_and_mem_get_info_agree(f: &Fixture) {
    let total = ok(f.b().device_total_mem(f.dev), "cuDeviceTotalMem");
    let info = ok(f.b().mem_get_info(), "cuMemGetInfo");
    assert!(total > 0);
    assert!(
        info.total <= total && info.total >= total / 10 * 9,
        "{info:?} of {total}"
    );
    assert!(info.free > 0 && info.free <= info.total, "{info:?}");
}

// ---------------------------------------------------------------------------------------
// Contexts.

/// `cuDevicePrimaryCtxRetain` hands out the same context every time; each retain is
/// given back by one release, and the context stays usable while one is held.
pub fn primary_context_retain_is_reference_counted(f: &Fixture) {
    let b = f.b();
    let again = ok(b.primary_context_retain(f.dev), "cuDevicePrimaryCtxRetain");
    let third = ok(b.primary_context_retain(f.dev), "cuDevicePrimaryCtxRetain");
    assert_eq!(
        again.raw(),
        f.ctx.raw(),
        "the primary context is one context"
    );
    assert_eq!(third.raw(), f.ctx.raw());
    ok(
        b.primary_context_release(again),
        "cuDevicePrimaryCtxRelease",
    );
    ok(
        b.primary_context_release(third),
        "cuDevicePrimaryCtxRelease",
    );
    // Still held by the fixture: still usable, with its allocations.
    f.bind();
    let p = upload(f, &[1, 2, 3, 4]);
    assert_eq!(download(f, p, 4), [1, 2, 3, 4]);
    ok(b.mem_free(p), "cuMemFree");
}

/// `cuDevicePrimaryCtxReset` destroys what was allocated in the primary context (free
/// memory comes back); the context keeps its references and handle, and works again.
pub fn primary_context_reset_frees_its_allocations(f: &Fixture) {
    let b = f.b();
    const SIZE: usize = 256 << 20;
    let before = ok(b.mem_get_info(), "cuMemGetInfo (before)");
    let _p = ok(b.mem_alloc(SIZE), "cuMemAlloc");
    let during = ok(b.mem_get_info(), "cuMemGetInfo (during)");
    assert!(
        during.free + SIZE as u64 <= before.free,
        "{before:?} {during:?}"
    );
    // SAFETY: nothing allocated or made before the reset is used afterwards.
    ok(
        unsafe { b.primary_context_reset(f.dev) },
        "cuDevicePrimaryCtxReset",
    );
    f.bind();
    let after = ok(b.mem_get_info(), "cuMemGetInfo (after the reset)");
    if f.simulated {
        assert_eq!(after.free, before.free, "{before:?} {after:?}");
    } else {
        assert!(
            after.free + (SIZE as u64) / 2 >= before.free,
            "{before:?} {after:?}"
        );
    }
    let p = upload(f, &[8; 16]);
    assert_eq!(download(f, p, 16), [8; 16]);
    ok(b.mem_free(p), "cuMemFree");
}

/// On a thread where no context is current, every call that works in a context is
/// `CUDA_ERROR_INVALID_CONTEXT`; once the primary context is made current there, they
/// work.
pub fn calls_without_a_current_context_are_invalid_context(f: &Fixture) {
    let backend = f.backend.clone();
    let ctx = f.ctx;
    std::thread::spawn(move || {
        let b = &*backend;
        let want = Status::ERROR_INVALID_CONTEXT;
        expect_status(b.mem_alloc(16), want, "cuMemAlloc without a context");
        expect_status(b.mem_get_info(), want, "cuMemGetInfo without a context");
        expect_status(
            b.context_synchronize(),
            want,
            "cuCtxSynchronize without a context",
        );
        expect_status(
            b.stream_create(StreamFlags::default()),
            want,
            "cuStreamCreate without a context",
        );
        expect_status(
            b.event_create(EventFlags::default()),
            want,
            "cuEventCreate without a context",
        );
        expect_status(
            b.module_load_ptx(VECTOR_ADD_PTX),
            want,
            "cuModuleLoadData without a context",
        );
        expect_status(
            b.host_alloc(4096, HostAllocFlags::default()),
            want,
            "cuMemHostAlloc without a context",
        );
        // Device queries need none.
        ok(b.device_name(Device::new(0)), "cuDeviceGetName");
        ok(b.context_set_current(&ctx), "cuCtxSetCurrent");
        let p = ok(b.mem_alloc(16), "cuMemAlloc");
        ok(b.mem_free(p), "cuMemFree");
        ok(b.context_synchronize(), "cuCtxSynchronize");
    })
    .join()
    .unwrap_or_else(|e| std::panic::resume_unwind(e));
}

/// A context current on two threads is one context: memory allocated on one thread is
/// read and freed on the other.
pub fn the_current_context_is_per_thread(f: &Fixture) {
    let backend = f.backend.clone();
    let ctx = f.ctx;
    let p = std::thread::spawn(move || {
        ok(backend.context_set_current(&ctx), "cuCtxSetCurrent");
        let p = ok(backend.mem_alloc(8), "cuMemAlloc");
        // SAFETY: `p` is a live 8-byte allocation.
        ok(
            unsafe { backend.memcpy_htod(p, &[9, 8, 7, 6, 5, 4, 3, 2]) },
            "cuMemcpyHtoD",
        );
        p
    })
    .join()
    .unwrap_or_else(|e| std::panic::resume_unwind(e));
    assert_eq!(download(f, p, 8), [9, 8, 7, 6, 5, 4, 3, 2]);
    ok(
        f.b().mem_free(p),
        "cuMemFree (of the other thread's allocation)",
    );
}

/// `cuCtxCreate`: a new context, distinct from the primary one and current on the
/// calling thread afterwards; with unified addressing, its allocations never overlap the
/// primary context's. `cuCtxDestroy` of it succeeds.
pub fn a_created_context_is_a_context_of_its_own(f: &Fixture) {
    let b = f.b();
    let in_primary = ok(b.mem_alloc(1 << 20), "cuMemAlloc (primary)");
    let c = ok(b.context_create(f.dev), "cuCtxCreate");
    assert_ne!(
        c.raw(),
        f.ctx.raw(),
        "cuCtxCreate returned the primary context"
    );
    // Current after creation, without cuCtxSetCurrent.
    let in_created = ok(b.mem_alloc(1 << 20), "cuMemAlloc (created context)");
    let (a0, a1) = (in_primary.0, in_primary.0 + (1 << 20));
    let (c0, c1) = (in_created.0, in_created.0 + (1 << 20));
    assert!(
        c1 <= a0 || a1 <= c0,
        "allocations of two contexts overlap: {a0:#x}..{a1:#x} and {c0:#x}..{c1:#x}"
    );
    ok(b.mem_free(in_created), "cuMemFree (created context)");
    f.bind();
    // SAFETY: nothing made in `c` is used afterwards.
    ok(unsafe { b.context_destroy(c) }, "cuCtxDestroy");
    ok(b.mem_free(in_primary), "cuMemFree (primary)");
    ok(b.context_synchronize(), "cuCtxSynchronize (primary)");
}

/// `cuCtxDestroy` frees what was allocated in the context: the free memory the
/// primary context sees is back to what it was before the context was created. (Using
/// the destroyed context's addresses afterwards is undefined behaviour, documented: only
/// the figures tell.)
pub fn destroying_a_created_context_frees_its_memory(f: &Fixture) {
    let b = f.b();
    const SIZE: usize = 256 << 20;
    let before = ok(b.mem_get_info(), "cuMemGetInfo (primary, before)");
    let c = ok(b.context_create(f.dev), "cuCtxCreate");
    let in_c_before = ok(b.mem_get_info(), "cuMemGetInfo (created, before)");
    let _p = ok(b.mem_alloc(SIZE), "cuMemAlloc (created context)");
    let in_c_after = ok(b.mem_get_info(), "cuMemGetInfo (created, after)");
    let used = in_c_before.free.saturating_sub(in_c_after.free);
    if f.simulated {
        assert_eq!(used, SIZE as u64, "{in_c_before:?} {in_c_after:?}");
    } else {
        assert!(used >= SIZE as u64, "{in_c_before:?} {in_c_after:?}");
    }
    f.bind();
    // SAFETY: nothing made in `c` is used afterwards (its allocation is left to the
    // destroy).
    ok(unsafe { b.context_destroy(c) }, "cuCtxDestroy");
    // The primary context stays current (its own check is the C program's); bound again
    // so that this check is about the memory only.
    f.bind();
    let after = ok(
        b.mem_get_info(),
        "cuMemGetInfo (primary, after the destroy)",
    );
    if f.simulated {
        assert_eq!(
            after.free, before.free,
            "free memory before the context and after its destroy"
        );
    } else {
        // A GPU's figures move with other processes and the driver's own use.
        assert!(
            after.free + (SIZE as u64) / 2 >= before.free,
            "{} bytes free before the context, {} after its destroy",
            before.free,
            after.free
        );
    }
}

/// Device memory is the device's: what a created context allocates is not free for the
/// primary context either (`cuMemGetInfo` in the primary context sees it).
pub fn a_created_contexts_memory_is_device_memory(f: &Fixture) {
    let b = f.b();
    const SIZE: usize = 256 << 20;
    let before = ok(b.mem_get_info(), "cuMemGetInfo (primary, before)");
    let c = ok(b.context_create(f.dev), "cuCtxCreate");
    let p = ok(b.mem_alloc(SIZE), "cuMemAlloc (created context)");
    f.bind();
    let during = ok(b.mem_get_info(), "cuMemGetInfo (primary, during)");
    assert!(
        during.free + SIZE as u64 <= before.free,
        "{} bytes free in the primary context before another context allocated {SIZE}, {} \
         after",
        before.free,
        during.free
    );
    ok(b.context_set_current(&c), "cuCtxSetCurrent (created)");
    ok(b.mem_free(p), "cuMemFree (created context)");
    f.bind();
    // SAFETY: nothing made in `c` is used afterwards.
    ok(unsafe { b.context_destroy(c) }, "cuCtxDestroy");
}

/// `cuEventRecord` of an event on a stream of another context is
/// `CUDA_ERROR_INVALID_HANDLE` (the driver's documentation: "hEvent and hStream must be
/// from the same context").
pub fn an_event_cannot_be_recorded_on_a_stream_of_another_context(f: &Fixture) {
    let b = f.b();
    let e = ok(
        b.event_create(EventFlags::default()),
        "cuEventCreate (primary)",
    );
    let c = ok(b.context_create(f.dev), "cuCtxCreate");
    let s = ok(
        b.stream_create(StreamFlags::default()),
        "cuStreamCreate (created context)",
    );
    expect_status(
        b.event_record(&e, &s),
        Status::ERROR_INVALID_HANDLE,
        "cuEventRecord(primary event, stream of another context)",
    );
    ok(b.stream_destroy(s), "cuStreamDestroy");
    f.bind();
    ok(
        b.event_record(&e, &Stream::DEFAULT),
        "cuEventRecord (primary)",
    );
    ok(b.event_synchronize(&e), "cuEventSynchronize");
    ok(b.event_destroy(e), "cuEventDestroy");
    // SAFETY: nothing made in `c` is used afterwards.
    ok(unsafe { b.context_destroy(c) }, "cuCtxDestroy");
}

// ---------------------------------------------------------------------------------------
// Device memory.

/// `cuMemGetInfo`: free memory drops by at least an allocation's size (exactly, on the
/// simulator) and comes back when it is freed; the total does not move.
pub fn mem_get_info_follows_allocations(f: &Fixture) {
    let b = f.b();
    const SIZE: usize = 64 << 20;
    let before = ok(b.mem_get_info(), "cuMemGetInfo");
    let p = ok(b.mem_alloc(SIZE), "cuMemAlloc");
    let during = ok(b.mem_get_info(), "cuMemGetInfo");
    ok(b.mem_free(p), "cuMemFree");
    let after = ok(b.mem_get_info(), "cuMemGetInfo");
    assert_eq!((before.total, during.total), (after.total, after.total));
    let used = before.free.saturating_sub(during.free);
    if f.simulated {
        assert_eq!(used, SIZE as u64, "{before:?} {during:?}");
        assert_eq!(after.free, before.free, "{before:?} {after:?}");
    } else {
        // A GPU maps whole pages of its allocation granularity.
        assert!(used >= SIZE as u64, "{before:?} {during:?}");
        assert!(
            after.free + (SIZE as u64) / 2 >= before.free,
            "{before:?} {after:?}"
        );
    }
}

/// `cuMemAlloc` of 0 bytes is `CUDA_ERROR_INVALID_VALUE` (documented).
pub fn mem_alloc_of_zero_bytes_is_invalid_value(f: &Fixture) {
    expect_status(
        f.b().mem_alloc(0),
        Status::ERROR_INVALID_VALUE,
        "cuMemAlloc(0)",
    );
}

/// `cuMemFree` of an address inside an allocation, of a freed one (a double free) and
/// of one never allocated is `CUDA_ERROR_INVALID_VALUE`; the allocation is untouched by
/// the refused free of its interior.
pub fn mem_free_of_a_non_allocation_is_invalid_value(f: &Fixture) {
    let b = f.b();
    let p = upload(f, &pattern(4096, 1));
    let want = Status::ERROR_INVALID_VALUE;
    expect_status(b.mem_free(p.offset(256)), want, "cuMemFree(interior)");
    assert_eq!(download(f, p, 4096), pattern(4096, 1), "still allocated");
    ok(b.mem_free(p), "cuMemFree");
    expect_status(b.mem_free(p), want, "cuMemFree (double free)");
    expect_status(
        b.mem_free(DevicePtr(0x1234_5000)),
        want,
        "cuMemFree(never allocated)",
    );
    ok(b.context_synchronize(), "cuCtxSynchronize (not sticky)");
}

/// An allocation beyond the device's memory is `CUDA_ERROR_OUT_OF_MEMORY`, and the
/// context goes on.
pub fn out_of_memory_is_not_sticky(f: &Fixture) {
    let b = f.b();
    let total = ok(b.device_total_mem(f.dev), "cuDeviceTotalMem");
    let want = Status::ERROR_OUT_OF_MEMORY;
    expect_status(
        b.mem_alloc((total + (1 << 30)) as usize),
        want,
        "cuMemAlloc(total + 1 GiB)",
    );
    expect_status(b.mem_alloc(1 << 50), want, "cuMemAlloc(1 PiB)");
    ok(b.context_synchronize(), "cuCtxSynchronize");
    let p = upload(f, &[5; 64]);
    assert_eq!(download(f, p, 64), [5; 64]);
    ok(b.mem_free(p), "cuMemFree");
}

/// `cuMemsetD8/D16/D32`: the values land, in the range given only.
pub fn memset_d8_d16_d32(f: &Fixture) {
    let b = f.b();
    let p = ok(b.mem_alloc(4096), "cuMemAlloc");
    // SAFETY: every range below lies in the 4096-byte allocation `p`.
    unsafe {
        ok(b.memset_d8(p, 0xab, 4096), "cuMemsetD8");
        ok(b.memset_d8(p.offset(100), 0x11, 50), "cuMemsetD8 (partial)");
        ok(b.memset_d16(p.offset(1000), 0xbeef, 10), "cuMemsetD16");
        ok(b.memset_d32(p.offset(2000), 0xdead_beef, 8), "cuMemsetD32");
    }
    let out = download(f, p, 4096);
    let mut want = vec![0xabu8; 4096];
    want[100..150].fill(0x11);
    for i in 0..10 {
        want[1000 + 2 * i..1002 + 2 * i].copy_from_slice(&0xbeefu16.to_le_bytes());
    }
    for i in 0..8 {
        want[2000 + 4 * i..2004 + 4 * i].copy_from_slice(&0xdead_beefu32.to_le_bytes());
    }
    assert_eq!(out, want);
    ok(b.mem_free(p), "cuMemFree");
}

/// `cuMemsetD8/D16/D32Async` on a stream: the values land by the stream's
/// synchronisation.
pub fn memset_async_d8_d16_d32(f: &Fixture) {
    let b = f.b();
    let p = ok(b.mem_alloc(4096), "cuMemAlloc");
    let s = ok(b.stream_create(StreamFlags::default()), "cuStreamCreate");
    // SAFETY: every range below lies in the 4096-byte allocation `p`.
    unsafe {
        ok(b.memset_d8_async(p, 0x5a, 4096, &s), "cuMemsetD8Async");
        ok(
            b.memset_d16_async(p.offset(64), 0x1234, 32, &s),
            "cuMemsetD16Async",
        );
        ok(
            b.memset_d32_async(p.offset(1024), 0xcafe_f00d, 256, &s),
            "cuMemsetD32Async",
        );
        ok(
            b.memset_d8_async(p.offset(4000), 0, 96, &s),
            "cuMemsetD8Async",
        );
    }
    ok(b.stream_synchronize(&s), "cuStreamSynchronize");
    let out = download(f, p, 4096);
    let mut want = vec![0x5au8; 4096];
    for i in 0..32 {
        want[64 + 2 * i..66 + 2 * i].copy_from_slice(&0x1234u16.to_le_bytes());
    }
    for i in 0..256 {
        want[1024 + 4 * i..1028 + 4 * i].copy_from_slice(&0xcafe_f00du32.to_le_bytes());
    }
    want[4000..].fill(0);
    assert_eq!(out, want);
    ok(b.stream_destroy(s), "cuStreamDestroy");
    ok(b.mem_free(p), "cuMemFree");
}

/// A 16-bit memset to an odd address and a 32-bit one to an address not a multiple of
/// 4 are `CUDA_ERROR_INVALID_VALUE`, synchronous or not; nothing is written.
pub fn misaligned_memsets_are_invalid_value(f: &Fixture) {
    let b = f.b();
    let p = upload(f, &[0u8; 256]);
    let s = ok(b.stream_create(StreamFlags::default()), "cuStreamCreate");
    let want = Status::ERROR_INVALID_VALUE;
    // SAFETY: every range lies in the 256-byte allocation (and each is refused).
    unsafe {
        expect_status(b.memset_d16(p.offset(1), 7, 4), want, "cuMemsetD16(odd)");
        expect_status(b.memset_d32(p.offset(2), 7, 4), want, "cuMemsetD32(+2)");
        expect_status(b.memset_d32(p.offset(1), 7, 4), want, "cuMemsetD32(+1)");
        expect_status(
            b.memset_d16_async(p.offset(3), 7, 4, &s),
            want,
            "cuMemsetD16Async(odd)",
        );
        expect_status(
            b.memset_d32_async(p.offset(6), 7, 4, &s),
            want,
            "cuMemsetD32Async(+6)",
        );
    }
    ok(b.stream_synchronize(&s), "cuStreamSynchronize (not sticky)");
    assert_eq!(download(f, p, 256), [0u8; 256], "nothing was written");
    ok(b.stream_destroy(s), "cuStreamDestroy");
    ok(b.mem_free(p), "cuMemFree");
}

/// `cuMemcpyHtoD/DtoH/DtoD` round trips, of whole allocations and of ranges at offsets.
pub fn sync_copies_and_partial_ranges(f: &Fixture) {
    let b = f.b();
    let data = pattern(10_000, 7);
    let a = upload(f, &data);
    let c = ok(b.mem_alloc(10_000), "cuMemAlloc");
    // SAFETY: every range below lies in the 10000-byte allocations `a` and `c`.
    unsafe {
        ok(b.memset_d8(c, 0, 10_000), "cuMemsetD8");
        ok(b.memcpy_dtod(c, a, 10_000), "cuMemcpyDtoD");
        ok(
            b.memcpy_dtod(c.offset(5000), a.offset(100), 1000),
            "cuMemcpyDtoD (ranges)",
        );
        ok(
            b.memcpy_htod(c.offset(9000), &[0xee; 999]),
            "cuMemcpyHtoD (range)",
        );
    }
    let mut want = data.clone();
    want[5000..6000].copy_from_slice(&data[100..1100]);
    want[9000..9999].fill(0xee);
    assert_eq!(download(f, c, 10_000), want);
    // A range read back, and a copy to the last byte.
    assert_eq!(download(f, c.offset(5000), 10), &data[100..110]);
    assert_eq!(download(f, c.offset(9999), 1), &data[9999..]);
    ok(b.mem_free(a), "cuMemFree");
    ok(b.mem_free(c), "cuMemFree");
}

/// A copy reaching past the end of its allocation is `CUDA_ERROR_INVALID_VALUE`, in
/// either direction and on the device, and copies nothing.
pub fn out_of_range_copies_are_invalid_value(f: &Fixture) {
    let b = f.b();
    let a = upload(f, &[1u8; 4096]);
    let c = upload(f, &[2u8; 4096]);
    let want = Status::ERROR_INVALID_VALUE;
    let mut big = vec![0u8; 4097];
    // SAFETY: each copy reaches one byte past an allocation: the driver refuses it (the
    // point of the test); the host buffers are large enough for the lengths given.
    unsafe {
        expect_status(
            b.memcpy_htod(a.offset(4000), &[9u8; 97]),
            want,
            "cuMemcpyHtoD past the end",
        );
        expect_status(
            b.memcpy_dtoh(&mut big, a),
            want,
            "cuMemcpyDtoH past the end",
        );
        expect_status(
            b.memcpy_dtod(c, a.offset(1), 4096),
            want,
            "cuMemcpyDtoD, source past the end",
        );
        expect_status(
            b.memcpy_dtod(c.offset(1), a, 4096),
            want,
            "cuMemcpyDtoD, destination past the end",
        );
    }
    ok(b.context_synchronize(), "cuCtxSynchronize (not sticky)");
    assert_eq!(download(f, a, 4096), [1u8; 4096]);
    assert_eq!(download(f, c, 4096), [2u8; 4096]);
    ok(b.mem_free(a), "cuMemFree");
    ok(b.mem_free(c), "cuMemFree");
}

/// `cuMemcpyHtoDAsync/DtoHAsync/DtoDAsync` from and to pageable memory (a `Vec`), with
/// ranges at offsets.
pub fn async_copies_with_pageable_memory(f: &Fixture) {
    let b = f.b();
    let n = 1 << 16;
    let src = pattern(n, 3);
    let mut back = vec![0u8; n];
    let d = ok(b.mem_alloc(n), "cuMemAlloc");
    let e = ok(b.mem_alloc(n), "cuMemAlloc");
    let s = ok(
        b.stream_create(StreamFlags { non_blocking: true }),
        "cuStreamCreate",
    );
    // SAFETY: `src` and `back` stay alive and untouched until the stream is synchronised
    // below; every device range lies in `d` or `e` (n bytes each).
    unsafe {
        ok(
            b.memcpy_htod_async(d, src.as_ptr(), n, &s),
            "cuMemcpyHtoDAsync",
        );
        ok(b.memcpy_dtod_async(e, d, n, &s), "cuMemcpyDtoDAsync");
        ok(
            b.memcpy_dtod_async(e.offset(16), d.offset(1024), 512, &s),
            "cuMemcpyDtoDAsync (ranges)",
        );
        ok(
            b.memcpy_dtoh_async(back.as_mut_ptr(), e, n, &s),
            "cuMemcpyDtoHAsync",
        );
    }
    ok(b.stream_synchronize(&s), "cuStreamSynchronize");
    let mut want = src.clone();
    want[16..528].copy_from_slice(&src[1024..1536]);
    assert_eq!(back, want);
    ok(b.stream_destroy(s), "cuStreamDestroy");
    ok(b.mem_free(d), "cuMemFree");
    ok(b.mem_free(e), "cuMemFree");
}

/// The same through page-locked memory from `cuMemHostAlloc`.
pub fn async_copies_with_pinned_memory(f: &Fixture) {
    let b = f.b();
    let n = 1 << 16;
    let src = ok(b.host_alloc(n, HostAllocFlags::default()), "cuMemHostAlloc");
    let dst = ok(b.host_alloc(n, HostAllocFlags::default()), "cuMemHostAlloc");
    assert_eq!((src.len(), dst.len()), (n, n));
    let data = pattern(n, 11);
    // SAFETY: `src` is a live pinned allocation of n bytes, written before any copy.
    unsafe { std::slice::from_raw_parts_mut(src.as_ptr(), n) }.copy_from_slice(&data);
    let d = ok(b.mem_alloc(n), "cuMemAlloc");
    let s = ok(b.stream_create(StreamFlags::default()), "cuStreamCreate");
    // SAFETY: `src` and `dst` stay allocated and untouched until the stream is
    // synchronised below; device ranges lie in `d` (n bytes).
    unsafe {
        ok(
            b.memcpy_htod_async(d, src.as_ptr(), n, &s),
            "cuMemcpyHtoDAsync",
        );
        ok(
            b.memcpy_htod_async(d.offset(100), src.as_ptr().add(5000), 300, &s),
            "cuMemcpyHtoDAsync (ranges)",
        );
        ok(
            b.memcpy_dtoh_async(dst.as_ptr(), d, n, &s),
            "cuMemcpyDtoHAsync",
        );
    }
    ok(b.stream_synchronize(&s), "cuStreamSynchronize");
    let mut want = data.clone();
    want[100..400].copy_from_slice(&data[5000..5300]);
    // SAFETY: `dst` is a live pinned allocation of n bytes; the stream has passed the
    // copy into it.
    let got = unsafe { std::slice::from_raw_parts(dst.as_ptr(), n) };
    assert_eq!(got, &want[..]);
    ok(b.stream_destroy(s), "cuStreamDestroy");
    ok(b.mem_free(d), "cuMemFree");
    // SAFETY: no pending operation uses them (the stream was synchronised).
    unsafe {
        ok(b.host_free(src), "cuMemFreeHost");
        ok(b.host_free(dst), "cuMemFreeHost");
    }
}

/// The same through registered (`cuMemHostRegister`) pageable memory.
pub fn async_copies_with_registered_memory(f: &Fixture) {
    let b = f.b();
    let n = 1 << 16;
    let mut host = PageBuf::new(n);
    host.as_mut_slice().copy_from_slice(&pattern(n, 13));
    let want = host.as_slice().to_vec();
    // SAFETY: `host` stays allocated until after the unregistration below.
    ok(
        unsafe { b.host_register(host.ptr, n, HostRegisterFlags::default()) },
        "cuMemHostRegister",
    );
    let d = ok(b.mem_alloc(n), "cuMemAlloc");
    let s = ok(b.stream_create(StreamFlags::default()), "cuStreamCreate");
    // SAFETY: `host` is registered, alive and untouched until each synchronisation.
    ok(
        unsafe { b.memcpy_htod_async(d, host.ptr, n, &s) },
        "cuMemcpyHtoDAsync",
    );
    ok(b.stream_synchronize(&s), "cuStreamSynchronize");
    host.as_mut_slice().fill(0);
    // SAFETY: as above.
    ok(
        unsafe { b.memcpy_dtoh_async(host.ptr, d, n, &s) },
        "cuMemcpyDtoHAsync",
    );
    ok(b.stream_synchronize(&s), "cuStreamSynchronize");
    assert_eq!(host.as_slice(), &want[..]);
    // SAFETY: no operation on the range is pending.
    ok(
        unsafe { b.host_unregister(host.ptr) },
        "cuMemHostUnregister",
    );
    ok(b.stream_destroy(s), "cuStreamDestroy");
    ok(b.mem_free(d), "cuMemFree");
}

/// Registering a range twice is `CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED`;
/// unregistering what is not registered is `CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED`
/// (both seen on an H100).
pub fn host_registration_errors(f: &Fixture) {
    let b = f.b();
    let host = PageBuf::new(8192);
    // SAFETY: `host` outlives its registration, undone below.
    unsafe {
        ok(
            b.host_register(host.ptr, 8192, HostRegisterFlags::default()),
            "cuMemHostRegister",
        );
        expect_status(
            b.host_register(host.ptr, 8192, HostRegisterFlags::default()),
            Status::ERROR_HOST_MEMORY_ALREADY_REGISTERED,
            "cuMemHostRegister of a registered range",
        );
        ok(b.host_unregister(host.ptr), "cuMemHostUnregister");
        expect_status(
            b.host_unregister(host.ptr),
            Status::ERROR_HOST_MEMORY_NOT_REGISTERED,
            "cuMemHostUnregister of an unregistered range",
        );
    }
}

/// `cuMemHostAlloc` with each flag gives usable page-locked memory.
pub fn host_alloc_flags(f: &Fixture) {
    let b = f.b();
    let d = ok(b.mem_alloc(4096), "cuMemAlloc");
    for flags in [
        HostAllocFlags::default(),
        HostAllocFlags {
            portable: true,
            ..HostAllocFlags::default()
        },
        HostAllocFlags {
            device_map: true,
            ..HostAllocFlags::default()
        },
        HostAllocFlags {
            write_combined: true,
            ..HostAllocFlags::default()
        },
    ] {
        let h = ok(
            b.host_alloc(4096, flags),
            &format!("cuMemHostAlloc({flags:?})"),
        );
        assert!(!h.as_ptr().is_null() && h.len() == 4096, "{flags:?}");
        let data = pattern(4096, flags.bits() as u8);
        // SAFETY: `h` is a live pinned allocation of 4096 bytes.
        unsafe {
            std::slice::from_raw_parts_mut(h.as_ptr(), 4096).copy_from_slice(&data);
            ok(
                b.memcpy_htod_async(d, h.as_ptr(), 4096, &Stream::DEFAULT),
                "cuMemcpyHtoDAsync",
            );
        }
        ok(
            b.stream_synchronize(&Stream::DEFAULT),
            "cuStreamSynchronize",
        );
        assert_eq!(download(f, d, 4096), data, "{flags:?}");
        // SAFETY: the copy from it is done.
        ok(unsafe { b.host_free(h) }, "cuMemFreeHost");
    }
    ok(b.mem_free(d), "cuMemFree");
}

// ---------------------------------------------------------------------------------------
// Modules.

/// `cuModuleLoadData` of PTX, `cuModuleGetFunction` of its kernel, `cuModuleUnload`;
/// two loads of one text are two modules.
pub fn module_load_and_get_function(f: &Fixture) {
    let b = f.b();
    let m = ok(b.module_load_ptx(VECTOR_ADD_PTX), "cuModuleLoadData");
    let k = ok(
        b.module_get_function(&m, "vector_add"),
        "cuModuleGetFunction",
    );
    assert_ne!(k.raw(), 0, "a null CUfunction");
    if b.kind() == BackendKind::Simulator {
        // The simulator counts the decoded kernels against a guest's quota.
        let bytes = b.module_host_bytes(&m);
        assert!(bytes.is_some_and(|n| n > 0), "{bytes:?}");
    }
    // Under a name (which only the simulator's messages use), the same module.
    let named = ok(
        b.module_load_ptx_named("fixtures/ptx/vector_add.nvrtc.ptx", VECTOR_ADD_PTX),
        "cuModuleLoadData (named)",
    );
    ok(
        b.module_get_function(&named, "vector_add"),
        "cuModuleGetFunction (named module)",
    );
    // Two loads are two modules.
    let m2 = ok(b.module_load_ptx(VECTOR_ADD_PTX), "cuModuleLoadData");
    assert_ne!(m.raw(), m2.raw());
    // SAFETY: nothing of either module was launched.
    unsafe {
        ok(b.module_unload(m), "cuModuleUnload");
        ok(b.module_unload(m2), "cuModuleUnload");
        ok(b.module_unload(named), "cuModuleUnload");
    }
}

/// `cuModuleGetFunction` of a name the module lacks is `CUDA_ERROR_NOT_FOUND`.
pub fn unknown_kernel_is_not_found(f: &Fixture) {
    let b = f.b();
    let m = ok(b.module_load_ptx(VECTOR_ADD_PTX), "cuModuleLoadData");
    expect_status(
        b.module_get_function(&m, "no_such_kernel"),
        Status::ERROR_NOT_FOUND,
        "cuModuleGetFunction(no_such_kernel)",
    );
    expect_status(
        b.module_get_function(&m, "vector_ad"),
        Status::ERROR_NOT_FOUND,
        "cuModuleGetFunction(a prefix)",
    );
    // SAFETY: nothing of it was launched.
    ok(unsafe { b.module_unload(m) }, "cuModuleUnload");
}

/// PTX that does not compile is `CUDA_ERROR_INVALID_PTX` with the JIT's error log; the
/// context goes on.
pub fn invalid_ptx_is_invalid_ptx_with_a_jit_log(f: &Fixture) {
    let b = f.b();
    for (what, ptx) in [
        ("an unknown instruction", BAD_PTX),
        (
            "a syntax error",
            ".version 7.0\n.target sm_80\n.entry k( {\n",
        ),
    ] {
        let err = expect_status(
            b.module_load_ptx(ptx),
            Status::ERROR_INVALID_PTX,
            &format!("cuModuleLoadData ({what})"),
        );
        let log = err
            .as_cuda()
            .and_then(|e| e.jit_log.clone())
            .unwrap_or_default();
        assert!(log.contains("error"), "{what}: JIT log {log:?}");
    }
    let m = ok(
        b.module_load_ptx(VECTOR_ADD_PTX),
        "cuModuleLoadData (after)",
    );
    // SAFETY: nothing of it was launched.
    ok(unsafe { b.module_unload(m) }, "cuModuleUnload");
}

/// PTX of an ISA version newer than the JIT knows is
/// `CUDA_ERROR_UNSUPPORTED_PTX_VERSION` (an H100 on CUDA 13.0: "Unsupported .version
/// 99.9").
pub fn newer_ptx_isa_is_unsupported_ptx_version(f: &Fixture) {
    let future = ".version 99.9\n.target sm_52\n.address_size 64\n\
                  .visible .entry e()\n{\n    ret;\n}\n";
    expect_status(
        f.b().module_load_ptx(future),
        Status::ERROR_UNSUPPORTED_PTX_VERSION,
        "cuModuleLoadData(.version 99.9)",
    );
}

/// Where a path knows a kernel's parameter layout, it is the PTX's: offset and size of
/// each parameter, in order.
pub fn function_params_where_known(f: &Fixture) {
    let (m, k) = kernel(f, VECTOR_ADD_PTX, "vector_add");
    match ok(f.b().function_params(&k), "function_params") {
        // The native backend does not ask (the driver does not tell).
        None => assert_ne!(
            f.b().kind(),
            BackendKind::Simulator,
            "the simulator knows it"
        ),
        Some(layout) => assert_eq!(
            layout,
            [(0, 8), (8, 8), (16, 8), (24, 4)].map(|(offset, size)| ParamLayout { offset, size })
        ),
    }
    // SAFETY: nothing of it was launched.
    ok(unsafe { f.b().module_unload(m) }, "cuModuleUnload");
}

/// `block_sum` over 1024 inputs `i * k + c` (8 blocks of 128 threads, one sum a
/// block): the kernel, its inputs and the device buffers.
struct BlockSum {
    module: Module,
    function: Function,
    input: Vec<u32>,
    din: DevicePtr,
    dout: DevicePtr,
}

impl BlockSum {
    fn new(f: &Fixture, k: u32, c: u32) -> Self {
        let (module, function) = kernel(f, KERNELS_PTX, "block_sum");
        let input: Vec<u32> = (0..1024).map(|i| i * k + c).collect();
        let bytes: Vec<u8> = input.iter().flat_map(|x| x.to_le_bytes()).collect();
        let din = upload(f, &bytes);
        let dout = ok(f.b().mem_alloc(8 * 4), "cuMemAlloc");
        BlockSum {
            module,
            function,
            input,
            din,
            dout,
        }
    }

    /// The launch's argument bytes: in, out, n.
    fn arg_bytes(&self) -> ([u8; 8], [u8; 8], [u8; 4]) {
        (
            self.din.0.to_le_bytes(),
            self.dout.0.to_le_bytes(),
            (self.input.len() as u32).to_le_bytes(),
        )
    }

    /// Each block's sum is the sum of its 128 inputs.
    fn check(&self, f: &Fixture) {
        let out = u32s(&download(f, self.dout, 32));
        for (blk, got) in out.iter().enumerate() {
            let want: u32 = self.input[blk * 128..(blk + 1) * 128].iter().sum();
            assert_eq!(*got, want, "block {blk}");
        }
    }

    /// Frees the buffers and unloads the module (its launches are done).
    fn release(self, f: &Fixture) {
        ok(f.b().mem_free(self.din), "cuMemFree");
        ok(f.b().mem_free(self.dout), "cuMemFree");
        // SAFETY: the caller synchronised after its launches.
        ok(
            unsafe { f.b().module_unload(self.module) },
            "cuModuleUnload",
        );
    }
}

/// Without the kernel's opt-in a launch may use 48 KiB of dynamic shared memory; more is
/// `CUDA_ERROR_INVALID_VALUE`. `cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES)` up to
/// the device's opt-in maximum allows it; beyond is `CUDA_ERROR_INVALID_VALUE`.
pub fn dynamic_shared_memory_needs_the_opt_in(f: &Fixture) {
    let b = f.b();
    let bs = BlockSum::new(f, 3, 1);
    let (din, dout, n) = bs.arg_bytes();
    let args: [&[u8]; 3] = [&din, &dout, &n];
    let sum = &bs.function;
    let big = LaunchConfig {
        shared_bytes: 64 << 10,
        ..LaunchConfig::linear(8, 128)
    };
    // SAFETY: block_sum(in, out, n) reads n inputs and writes one output per block (8).
    let refused = unsafe { b.launch(sum, &big, &Stream::DEFAULT, &args) };
    expect_status(
        refused,
        Status::ERROR_INVALID_VALUE,
        "cuLaunchKernel with 64 KiB of dynamic shared memory, no opt-in",
    );
    ok(
        b.function_set_max_dynamic_shared(sum, 64 << 10),
        "cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES, 64 KiB)",
    );
    // SAFETY: as above.
    ok(
        unsafe { b.launch(sum, &big, &Stream::DEFAULT, &args) },
        "cuLaunchKernel with 64 KiB after the opt-in",
    );
    ok(b.context_synchronize(), "cuCtxSynchronize");
    bs.check(f);
    let optin = ok(
        b.device_attribute(f.dev, DeviceAttribute::MaxSharedMemoryPerBlockOptin),
        "cuDeviceGetAttribute(MAX_SHARED_MEMORY_PER_BLOCK_OPTIN)",
    ) as u32;
    ok(
        b.function_set_max_dynamic_shared(sum, optin),
        "cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES, opt-in maximum)",
    );
    expect_status(
        b.function_set_max_dynamic_shared(sum, optin + 1),
        Status::ERROR_INVALID_VALUE,
        "cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES, opt-in maximum + 1)",
    );
    bs.release(f);
}

// ---------------------------------------------------------------------------------------
// Streams and events.

/// `cuStreamCreate` with each flag; a new stream is idle (`cuStreamQuery` succeeds),
/// and so is the default stream.
pub fn stream_create_flags_and_idle_query(f: &Fixture) {
    let b = f.b();
    let s1 = ok(b.stream_create(StreamFlags::default()), "cuStreamCreate(0)");
    let s2 = ok(
        b.stream_create(StreamFlags { non_blocking: true }),
        "cuStreamCreate(NON_BLOCKING)",
    );
    assert_ne!(s1.raw(), s2.raw());
    assert_ne!(s1.raw(), 0, "a created stream is not the null stream");
    assert!(ok(b.stream_query(&s1), "cuStreamQuery"));
    assert!(ok(b.stream_query(&s2), "cuStreamQuery"));
    assert!(ok(b.stream_query(&Stream::DEFAULT), "cuStreamQuery(0)"));
    ok(b.stream_synchronize(&s1), "cuStreamSynchronize (idle)");
    ok(b.stream_destroy(s1), "cuStreamDestroy");
    ok(b.stream_destroy(s2), "cuStreamDestroy");
}

/// `cuStreamQuery` is `CUDA_ERROR_NOT_READY` (here: `false`) while a kernel runs, and
/// succeeds after `cuStreamSynchronize`, when the kernel's write has landed.
pub fn stream_query_before_and_after_work(f: &Fixture) {
    let b = f.b();
    let (m, spin) = kernel(f, KERNELS_PTX, "spin");
    let flag = upload(f, &[0u8; 4]);
    let s = ok(b.stream_create(StreamFlags::default()), "cuStreamCreate");
    launch_spin(f, &spin, &s, flag, 42);
    assert!(
        !ok(b.stream_query(&s), "cuStreamQuery"),
        "ready while spinning"
    );
    ok(b.stream_synchronize(&s), "cuStreamSynchronize");
    assert!(
        ok(b.stream_query(&s), "cuStreamQuery"),
        "busy after synchronising"
    );
    assert_eq!(u32s(&download(f, flag, 4)), [42]);
    ok(b.stream_destroy(s), "cuStreamDestroy");
    ok(b.mem_free(flag), "cuMemFree");
    // SAFETY: its launches are done.
    ok(unsafe { b.module_unload(m) }, "cuModuleUnload");
}

/// `cuStreamWaitEvent`: work on stream B queued after waiting for an event recorded on
/// stream A runs after A's work before the record.
pub fn stream_wait_event_orders_two_streams(f: &Fixture) {
    let b = f.b();
    let (m, spin) = kernel(f, KERNELS_PTX, "spin");
    let flag = upload(f, &[0u8; 4]);
    let copy = upload(f, &[0u8; 4]);
    let sa = ok(
        b.stream_create(StreamFlags { non_blocking: true }),
        "cuStreamCreate",
    );
    let sb = ok(
        b.stream_create(StreamFlags { non_blocking: true }),
        "cuStreamCreate",
    );
    let done = ok(b.event_create(EventFlags::default()), "cuEventCreate");
    launch_spin(f, &spin, &sa, flag, 0x5eed);
    ok(b.event_record(&done, &sa), "cuEventRecord");
    ok(b.stream_wait_event(&sb, &done), "cuStreamWaitEvent");
    // SAFETY: both are live 4-byte allocations.
    ok(
        unsafe { b.memcpy_dtod_async(copy, flag, 4, &sb) },
        "cuMemcpyDtoDAsync",
    );
    assert!(
        !ok(b.stream_query(&sb), "cuStreamQuery(B)"),
        "B does not wait"
    );
    ok(b.stream_synchronize(&sb), "cuStreamSynchronize(B)");
    assert!(ok(b.event_query(&done), "cuEventQuery"), "A's event passed");
    assert_eq!(
        u32s(&download(f, copy, 4)),
        [0x5eed],
        "B copied before A wrote"
    );
    ok(b.event_destroy(done), "cuEventDestroy");
    ok(b.stream_destroy(sa), "cuStreamDestroy");
    ok(b.stream_destroy(sb), "cuStreamDestroy");
    ok(b.mem_free(flag), "cuMemFree");
    ok(b.mem_free(copy), "cuMemFree");
    // SAFETY: its launches are done.
    ok(unsafe { b.module_unload(m) }, "cuModuleUnload");
}

/// An event recorded in an idle stream is reached no later than the end of a kernel
/// another stream submitted before it (cudarc's multi-stream tests measure this); a
/// stream that waits for the kernel's event, and the legacy default stream behind a
/// blocking stream, reach their records only after the kernel.
pub fn an_idle_streams_event_is_not_held_behind_another_streams_kernel(f: &Fixture) {
    let b = f.b();
    let (m, spin) = kernel(f, KERNELS_PTX, "spin");
    let flag = upload(f, &[0u8; 4]);
    let non_blocking = StreamFlags { non_blocking: true };
    let sa = ok(b.stream_create(StreamFlags::default()), "cuStreamCreate(A)");
    let sb = ok(b.stream_create(non_blocking), "cuStreamCreate(B)");
    let sc = ok(b.stream_create(non_blocking), "cuStreamCreate(C)");
    let ev = || ok(b.event_create(EventFlags::default()), "cuEventCreate");
    let (end_a, start_b, after_c, legacy) = (ev(), ev(), ev(), ev());
    launch_spin(f, &spin, &sa, flag, 9);
    ok(b.event_record(&end_a, &sa), "cuEventRecord(A)");
    ok(b.event_record(&start_b, &sb), "cuEventRecord(B)");
    ok(b.stream_wait_event(&sc, &end_a), "cuStreamWaitEvent(C, A)");
    ok(b.event_record(&after_c, &sc), "cuEventRecord(C)");
    ok(
        b.event_record(&legacy, &Stream::DEFAULT),
        "cuEventRecord(legacy)",
    );
    ok(b.context_synchronize(), "cuCtxSynchronize");
    let ms = |a: &Event, z: &Event| ok(b.event_elapsed_ms(a, z), "cuEventElapsedTime");
    let idle = ms(&start_b, &end_a);
    assert!(
        idle >= 20.0,
        "B's record {idle} ms before A's kernel ended (~0.1 s kernel)"
    );
    let waited = ms(&end_a, &after_c);
    assert!(waited >= 0.0, "C waited for A: {waited} ms after A's end");
    let behind = ms(&end_a, &legacy);
    assert!(
        behind >= 0.0,
        "the legacy stream follows A: {behind} ms after A's end"
    );
    for e in [end_a, start_b, after_c, legacy] {
        ok(b.event_destroy(e), "cuEventDestroy");
    }
    for s in [sa, sb, sc] {
        ok(b.stream_destroy(s), "cuStreamDestroy");
    }
    ok(b.mem_free(flag), "cuMemFree");
    // SAFETY: its launches are done.
    ok(unsafe { b.module_unload(m) }, "cuModuleUnload");
}

/// `cuStreamDestroy` of a busy stream returns at once; its work still completes.
pub fn stream_destroy_lets_pending_work_finish(f: &Fixture) {
    let b = f.b();
    let (m, spin) = kernel(f, KERNELS_PTX, "spin");
    let flag = upload(f, &[0u8; 4]);
    let s = ok(b.stream_create(StreamFlags::default()), "cuStreamCreate");
    launch_spin(f, &spin, &s, flag, 77);
    ok(b.stream_destroy(s), "cuStreamDestroy (busy)");
    ok(b.context_synchronize(), "cuCtxSynchronize");
    assert_eq!(u32s(&download(f, flag, 4)), [77]);
    ok(b.mem_free(flag), "cuMemFree");
    // SAFETY: its launches are done.
    ok(unsafe { b.module_unload(m) }, "cuModuleUnload");
}

/// An event never recorded is complete (`cuEventQuery` and `cuEventSynchronize`
/// succeed); recorded behind a running kernel it is not, until the kernel is done.
pub fn event_query_and_synchronize(f: &Fixture) {
    let b = f.b();
    let e = ok(b.event_create(EventFlags::default()), "cuEventCreate");
    assert!(ok(b.event_query(&e), "cuEventQuery (never recorded)"));
    ok(
        b.event_synchronize(&e),
        "cuEventSynchronize (never recorded)",
    );
    let (m, spin) = kernel(f, KERNELS_PTX, "spin");
    let flag = upload(f, &[0u8; 4]);
    let s = ok(b.stream_create(StreamFlags::default()), "cuStreamCreate");
    launch_spin(f, &spin, &s, flag, 1);
    ok(b.event_record(&e, &s), "cuEventRecord");
    assert!(
        !ok(b.event_query(&e), "cuEventQuery"),
        "reached while spinning"
    );
    ok(b.event_synchronize(&e), "cuEventSynchronize");
    assert!(ok(b.event_query(&e), "cuEventQuery (after synchronising)"));
    assert_eq!(
        u32s(&download(f, flag, 4)),
        [1],
        "the kernel before the event"
    );
    // Blocking-sync events work the same.
    let blocking = ok(
        b.event_create(EventFlags {
            blocking_sync: true,
            ..EventFlags::default()
        }),
        "cuEventCreate(BLOCKING_SYNC)",
    );
    ok(b.event_record(&blocking, &Stream::DEFAULT), "cuEventRecord");
    ok(b.event_synchronize(&blocking), "cuEventSynchronize");
    ok(b.event_destroy(blocking), "cuEventDestroy");
    ok(b.event_destroy(e), "cuEventDestroy");
    ok(b.stream_destroy(s), "cuStreamDestroy");
    ok(b.mem_free(flag), "cuMemFree");
    // SAFETY: its launches are done.
    ok(unsafe { b.module_unload(m) }, "cuModuleUnload");
}

/// `cuEventElapsedTime`: `CUDA_ERROR_NOT_READY` while the end event is not reached;
/// then the time between the records, which covers the kernel between them, and is 0
/// or more for records in order.
pub fn event_elapsed_time(f: &Fixture) {
    let b = f.b();
    let (m, spin) = kernel(f, KERNELS_PTX, "spin");
    let flag = upload(f, &[0u8; 4]);
    let s = ok(b.stream_create(StreamFlags::default()), "cuStreamCreate");
    let (start, end) = (
        ok(b.event_create(EventFlags::default()), "cuEventCreate"),
        ok(b.event_create(EventFlags::default()), "cuEventCreate"),
    );
    ok(b.event_record(&start, &s), "cuEventRecord(start)");
    launch_spin(f, &spin, &s, flag, 3);
    ok(b.event_record(&end, &s), "cuEventRecord(end)");
    expect_status(
        b.event_elapsed_ms(&start, &end),
        Status::ERROR_NOT_READY,
        "cuEventElapsedTime before the end is reached",
    );
    ok(b.event_synchronize(&end), "cuEventSynchronize");
    let ms = ok(b.event_elapsed_ms(&start, &end), "cuEventElapsedTime");
    assert!(
        (20.0..60_000.0).contains(&ms),
        "{ms} ms around a ~0.1 s kernel"
    );
    // Two records of the same point.
    let again = ok(b.event_create(EventFlags::default()), "cuEventCreate");
    ok(b.event_record(&again, &s), "cuEventRecord");
    ok(b.event_synchronize(&again), "cuEventSynchronize");
    let after = ok(b.event_elapsed_ms(&end, &again), "cuEventElapsedTime");
    assert!(after >= 0.0, "{after} ms between records in order");
    for e in [start, end, again] {
        ok(b.event_destroy(e), "cuEventDestroy");
    }
    ok(b.stream_destroy(s), "cuStreamDestroy");
    ok(b.mem_free(flag), "cuMemFree");
    // SAFETY: its launches are done.
    ok(unsafe { b.module_unload(m) }, "cuModuleUnload");
}

/// `cuEventElapsedTime` with an event never recorded, or one created with
/// `CU_EVENT_DISABLE_TIMING`, is `CUDA_ERROR_INVALID_HANDLE` (documented).
pub fn elapsed_time_of_unrecorded_or_untimed_events_is_invalid_handle(f: &Fixture) {
    let b = f.b();
    let recorded = ok(b.event_create(EventFlags::default()), "cuEventCreate");
    let never = ok(b.event_create(EventFlags::default()), "cuEventCreate");
    let untimed = ok(
        b.event_create(EventFlags {
            disable_timing: true,
            ..EventFlags::default()
        }),
        "cuEventCreate(DISABLE_TIMING)",
    );
    ok(b.event_record(&recorded, &Stream::DEFAULT), "cuEventRecord");
    ok(b.event_record(&untimed, &Stream::DEFAULT), "cuEventRecord");
    ok(b.event_synchronize(&recorded), "cuEventSynchronize");
    ok(b.event_synchronize(&untimed), "cuEventSynchronize");
    let want = Status::ERROR_INVALID_HANDLE;
    expect_status(
        b.event_elapsed_ms(&never, &never),
        want,
        "cuEventElapsedTime(never recorded, never recorded)",
    );
    expect_status(
        b.event_elapsed_ms(&recorded, &never),
        want,
        "cuEventElapsedTime(recorded, never recorded)",
    );
    expect_status(
        b.event_elapsed_ms(&never, &recorded),
        want,
        "cuEventElapsedTime(never recorded, recorded)",
    );
    expect_status(
        b.event_elapsed_ms(&recorded, &untimed),
        want,
        "cuEventElapsedTime(recorded, DISABLE_TIMING)",
    );
    expect_status(
        b.event_elapsed_ms(&untimed, &recorded),
        want,
        "cuEventElapsedTime(DISABLE_TIMING, recorded)",
    );
    for e in [recorded, never, untimed] {
        ok(b.event_destroy(e), "cuEventDestroy");
    }
}

// ---------------------------------------------------------------------------------------
// Launches.

/// `fixtures/ptx/vector_add`: `c = a + b` over 1000 floats (a partial last block), on a
/// stream and on the default stream, exactly.
pub fn vector_add_computes(f: &Fixture) {
    let b = f.b();
    let (m, k) = kernel(f, VECTOR_ADD_PTX, "vector_add");
    let n = 1000usize;
    let a: Vec<f32> = (0..n).map(|i| i as f32 * 0.5).collect();
    let c: Vec<f32> = (0..n).map(|i| 1000.0 - i as f32).collect();
    let (da, dc) = (upload(f, &f32_bytes(&a)), upload(f, &f32_bytes(&c)));
    let out = upload(f, &vec![0u8; 4 * n]);
    let s = ok(b.stream_create(StreamFlags::default()), "cuStreamCreate");
    // SAFETY: the three buffers hold n floats.
    ok(
        unsafe {
            launch_vector_add(
                f,
                &k,
                &LaunchConfig::for_elements(n as u32, 256),
                &s,
                (da, dc, out, n as i32),
            )
        },
        "cuLaunchKernel(vector_add)",
    );
    ok(b.stream_synchronize(&s), "cuStreamSynchronize");
    let got = f32s(&download(f, out, 4 * n));
    for i in 0..n {
        assert_eq!(got[i].to_bits(), (a[i] + c[i]).to_bits(), "element {i}");
    }
    // Half of it again, on the default stream, into a zeroed buffer: the rest stays 0.
    // SAFETY: as above (n / 2 elements).
    unsafe {
        ok(b.memset_d32(out, 0, n), "cuMemsetD32");
        ok(
            launch_vector_add(
                f,
                &k,
                &LaunchConfig::linear(4, 125),
                &Stream::DEFAULT,
                (da, da, out, (n / 2) as i32),
            ),
            "cuLaunchKernel(vector_add) on the default stream",
        );
    }
    let got = f32s(&download(f, out, 4 * n));
    for i in 0..n {
        let want = if i < n / 2 { a[i] + a[i] } else { 0.0 };
        assert_eq!(got[i].to_bits(), want.to_bits(), "element {i}");
    }
    ok(b.stream_destroy(s), "cuStreamDestroy");
    for p in [da, dc, out] {
        ok(b.mem_free(p), "cuMemFree");
    }
    // SAFETY: its launches are done.
    ok(unsafe { b.module_unload(m) }, "cuModuleUnload");
}

/// A launch with a zero dimension, a block of more than 1024 threads, or a block or grid
/// dimension beyond the device's maxima is `CUDA_ERROR_INVALID_VALUE` at the call;
/// nothing runs and the context goes on.
pub fn bad_launch_geometry_is_invalid_value(f: &Fixture) {
    let b = f.b();
    let (m, k) = kernel(f, VECTOR_ADD_PTX, "vector_add");
    let buf = upload(f, &[0u8; 4 * 64]);
    let cfg = |grid: [u32; 3], block: [u32; 3]| LaunchConfig {
        grid,
        block,
        shared_bytes: 0,
    };
    for (what, c) in [
        ("grid x 0", cfg([0, 1, 1], [32, 1, 1])),
        ("grid z 0", cfg([1, 1, 0], [32, 1, 1])),
        ("block x 0", cfg([1, 1, 1], [0, 1, 1])),
        ("block of 1025 threads", cfg([1, 1, 1], [1025, 1, 1])),
        ("block of 32x32x2 threads", cfg([1, 1, 1], [32, 32, 2])),
        ("block z 65", cfg([1, 1, 1], [1, 1, 65])),
        ("grid y 65536", cfg([1, 65536, 1], [32, 1, 1])),
        ("grid z 65536", cfg([1, 1, 65536], [32, 1, 1])),
    ] {
        // SAFETY: refused before anything runs; a valid launch would touch at most 64
        // floats (n = 0: nothing).
        let r = unsafe { launch_vector_add(f, &k, &c, &Stream::DEFAULT, (buf, buf, buf, 0)) };
        expect_status(
            r,
            Status::ERROR_INVALID_VALUE,
            &format!("cuLaunchKernel ({what})"),
        );
    }
    ok(b.context_synchronize(), "cuCtxSynchronize (not sticky)");
    // The largest valid block runs.
    // SAFETY: n = 64 floats in `buf`.
    ok(
        unsafe {
            launch_vector_add(
                f,
                &k,
                &cfg([1, 1, 1], [16, 16, 4]),
                &Stream::DEFAULT,
                (buf, buf, buf, 64),
            )
        },
        "cuLaunchKernel (16x16x4)",
    );
    ok(b.context_synchronize(), "cuCtxSynchronize");
    ok(b.mem_free(buf), "cuMemFree");
    // SAFETY: its launches are done.
    ok(unsafe { b.module_unload(m) }, "cuModuleUnload");
}

/// `cuLaunchCooperativeKernel` (every block at once) computes as a plain launch does.
pub fn a_cooperative_launch_computes(f: &Fixture) {
    let b = f.b();
    let bs = BlockSum::new(f, 5, 2);
    let (din, dout, n) = bs.arg_bytes();
    let args: [&[u8]; 3] = [&din, &dout, &n];
    let cfg = LaunchConfig {
        shared_bytes: 512,
        ..LaunchConfig::linear(8, 128)
    };
    // SAFETY: block_sum(in, out, n) reads n inputs and writes one output per block (8).
    ok(
        unsafe { b.launch_cooperative(&bs.function, &cfg, &Stream::DEFAULT, &args) },
        "cuLaunchCooperativeKernel",
    );
    ok(b.context_synchronize(), "cuCtxSynchronize");
    bs.check(f);
    bs.release(f);
}

/// A block whose threads need more registers than an SM has is
/// `CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES` at the call (`register_hog`, about 100
/// registers a thread, in 1024-thread blocks; seen on an H100); a smaller block runs.
pub fn launch_beyond_the_register_file_is_out_of_resources(f: &Fixture) {
    let b = f.b();
    let (m, hog) = kernel(f, KERNELS_PTX, "register_hog");
    let p = upload(f, &f32_bytes(&[1.0; 1024]));
    let n = 1i32;
    let args: [&[u8]; 2] = [&p.0.to_le_bytes(), &n.to_le_bytes()];
    // SAFETY: register_hog(float *p, int n) touches p[0..1024] at most.
    let r = unsafe {
        b.launch(
            &hog,
            &LaunchConfig::linear(1, 1024),
            &Stream::DEFAULT,
            &args,
        )
    };
    expect_status(
        r,
        Status::ERROR_LAUNCH_OUT_OF_RESOURCES,
        "cuLaunchKernel(register_hog, 1024 threads)",
    );
    // SAFETY: as above.
    ok(
        unsafe { b.launch(&hog, &LaunchConfig::linear(1, 128), &Stream::DEFAULT, &args) },
        "cuLaunchKernel(register_hog, 128 threads)",
    );
    ok(b.context_synchronize(), "cuCtxSynchronize");
    ok(b.mem_free(p), "cuMemFree");
    // SAFETY: its launches are done.
    ok(unsafe { b.module_unload(m) }, "cuModuleUnload");
}

// ---------------------------------------------------------------------------------------
// Faults (they leave a sticky error behind: see `Faults`).

/// `fixtures/ptx/oob_write` storing one terabyte past an allocation (nothing is mapped
/// there on a GPU either): the launch succeeds; the next synchronisation is
/// `CUDA_ERROR_ILLEGAL_ADDRESS`, and so is every later call of the context (sticky)
/// while device queries still work. On the simulator's paths a reset then recovers the
/// context (on the native driver nothing does: the test runs in a child process there).
pub fn faulting_kernel_is_a_sticky_illegal_address(f: &Fixture) {
    let b = f.b();
    let (_m, k) = kernel(f, OOB_WRITE_PTX, "oob_write");
    let buf = upload(f, &[0u8; 1024]);
    let far = buf.offset(1 << 40);
    let n = 0i32;
    let s = ok(b.stream_create(StreamFlags::default()), "cuStreamCreate");
    let args: [&[u8]; 2] = [&far.0.to_le_bytes(), &n.to_le_bytes()];
    // SAFETY: thread 0 stores 4 bytes one terabyte past `buf`, where nothing is mapped in
    // the device's address space: the device faults (the point of the test); no host
    // memory is reachable there.
    ok(
        unsafe { b.launch(&k, &LaunchConfig::linear(1, 32), &s, &args) },
        "cuLaunchKernel(oob_write): the launch itself succeeds",
    );
    let want = Status::ERROR_ILLEGAL_ADDRESS;
    expect_status(
        b.stream_synchronize(&s),
        want,
        "cuStreamSynchronize after the fault",
    );
    // Sticky: the context's later calls fail the same way.
    expect_status(b.context_synchronize(), want, "cuCtxSynchronize (sticky)");
    expect_status(b.mem_alloc(16), want, "cuMemAlloc (sticky)");
    let mut out = [0u8; 4];
    // SAFETY: `buf` is a live 1024-byte allocation.
    expect_status(
        unsafe { b.memcpy_dtoh(&mut out, buf) },
        want,
        "cuMemcpyDtoH (sticky)",
    );
    expect_status(
        b.stream_synchronize(&Stream::DEFAULT),
        want,
        "cuStreamSynchronize(0) (sticky)",
    );
    // Device queries are not the context's.
    ok(b.device_name(f.dev), "cuDeviceGetName after the fault");
    if f.simulated {
        // vmgpu's documented difference: a reset clears the sticky error.
        // SAFETY: nothing made before the reset is used afterwards.
        ok(
            unsafe { b.primary_context_reset(f.dev) },
            "cuDevicePrimaryCtxReset",
        );
        f.bind();
        let p = upload(f, &[6; 8]);
        assert_eq!(download(f, p, 8), [6; 8]);
        ok(b.mem_free(p), "cuMemFree");
    }
    // The stream (like the module and `buf`) is not destroyed: on the simulator's paths
    // the reset destroyed them; on the native driver the process is poisoned.
    let _ = s;
}
