//! The accelerator's test suite, written once over the safe API and instantiated per
//! backend by [`accel_suite!`]: `accel_sim.rs` on the simulator (runs everywhere),
//! `accel_native.rs` on the NVIDIA driver (ignored without a GPU).

#![allow(dead_code)]

use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use cuda_guest::accel::{Accelerator, Choice};
use cuda_guest::driver::safe::{DeviceBuffer, Gpu, KernelArg};
use cuda_guest::driver::{
    BackendKind, DriverError, EventFlags, HostAllocFlags, HostRegisterFlags, LaunchConfig,
    StreamFlags,
};
use cuda_guest::kernel_args;
use cuda_guest::sim::SimConfig;

/// The kernels (NVRTC output of native-ptx/kernels.cu, verified on an H100).
pub const KERNELS_PTX: &str = include_str!("../native-ptx/kernels.ptx");

/// A device under test; on the native backend it also serialises the tests (they share
/// the process's primary context, which the fault test resets).
#[derive(Debug)]
pub struct Fixture {
    pub acc: Accelerator,
    pub gpu: Gpu,
    _serial: Option<MutexGuard<'static, ()>>,
}

static NATIVE: Mutex<()> = Mutex::new(());

/// The simulator with two threads.
pub fn sim() -> Fixture {
    let acc = Accelerator::builder()
        .backend(Choice::Sim)
        .sim_config(SimConfig {
            threads: 2,
            ..SimConfig::default()
        })
        .build()
        .expect("the simulator starts");
    let gpu = acc.gpu(0).expect("device 0");
    Fixture {
        acc,
        gpu,
        _serial: None,
    }
}

/// The native driver, device 0.
pub fn native() -> Fixture {
    let serial = NATIVE.lock().unwrap_or_else(|e| e.into_inner());
    let acc = Accelerator::builder()
        .backend(Choice::Native)
        .build()
        .unwrap_or_else(|e| panic!("the native backend did not load: {e}"));
    let gpu = acc.gpu(0).expect("device 0");
    Fixture {
        acc,
        gpu,
        _serial: Some(serial),
    }
}

/// How an instantiation runs the tests that provoke a sticky fault
/// (`CUDA_ERROR_ILLEGAL_ADDRESS`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Faults {
    /// In the test's own thread, like every other test: the simulator's device is the
    /// fixture's own and a reset recovers it.
    InProcess,
    /// Each in a child process (this test binary run again for that one test): on the
    /// native driver a sticky error poisons the whole process (a reset does not clear
    /// it), so a fault in-process would fail every later test.
    ChildProcess,
}

/// Set, to the test's name, in the child process that runs one faulting test.
pub const FAULT_CHILD_ENV: &str = "VMGPU_ACCEL_FAULT_CHILD";

/// Runs the faulting test `name` (`body` over `setup()`) as `faults` says. In a child
/// process the parent asserts that the child ran exactly that test and that it passed;
/// the child's output is printed (shown with `--nocapture` or on failure).
pub fn faulting(name: &str, faults: Faults, setup: fn() -> Fixture, body: fn(&Fixture)) {
    if faults == Faults::InProcess || std::env::var(FAULT_CHILD_ENV).as_deref() == Ok(name) {
        return body(&setup());
    }
    // One GPU test at a time, the child's included.
    let _serial = NATIVE.lock().unwrap_or_else(|e| e.into_inner());
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
    // With --nocapture the test's own output may stand between "test NAME ..." and
    // its "ok": check the start of that line and the harness's closing count.
    assert!(
        stdout.contains(&format!("test {name} ... "))
            && stdout.contains("test result: ok. 1 passed; 0 failed"),
        "the child process did not run {name} (exactly once): {stdout}"
    );
}

/// Instantiates every test of the suite with `$setup` (a `fn() -> Fixture`) and
/// `$faults` (a [`Faults`]: how the tests that provoke a sticky fault run), each with the
/// given attributes (e.g. `#[ignore = "..."]`).
#[macro_export]
macro_rules! accel_suite {
    ($setup:path, $faults:expr $(, #[$attr:meta])*) => {
        accel_suite!(@each $setup, [$(#[$attr])*],
            device_queries,
            sync_copies_and_views,
            d2d_chain_on_two_streams_with_events,
            raw_async_copies_with_pinned_memory,
            checked_launch_and_argument_errors,
            dynamic_shared_memory_launch,
            bad_launch_geometry_is_refused,
            jit_error_carries_the_log,
            out_of_memory,
            stream_query_events_and_elapsed_time,
            registered_host_memory,
            futures_on_a_current_thread_runtime_do_not_block_it,
            futures_on_a_multi_thread_runtime,
            concurrent_use_from_several_threads,
        );
        // These leave a sticky error behind.
        accel_suite!(@faulting $setup, $faults, [$(#[$attr])*],
            out_of_bounds_kernel_is_sticky,
            a_faulting_kernel_fails_its_future,
        );
    };
    (@each $setup:path, [$($attr:tt)*], $name:ident $(, $rest:ident)* $(,)?) => {
        #[test]
        $($attr)*
        fn $name() {
            let f = $setup();
            accel_common::$name(&f);
        }
        accel_suite!(@each $setup, [$($attr)*] $(, $rest)*);
    };
    (@each $setup:path, [$($attr:tt)*] $(,)?) => {};
    (@faulting $setup:path, $faults:expr, [$($attr:tt)*], $name:ident $(, $rest:ident)* $(,)?) => {
        #[test]
        $($attr)*
        fn $name() {
            accel_common::faulting(stringify!($name), $faults, $setup, accel_common::$name);
        }
        accel_suite!(@faulting $setup, $faults, [$($attr)*] $(, $rest)*);
    };
    (@faulting $setup:path, $faults:expr, [$($attr:tt)*] $(,)?) => {};
}

/// After a sticky error `sticky` (a CUDA name), resets the device and checks what each
/// backend really does; the backends differ here on purpose (see the crate's backends
/// section).
///
/// - Simulator: the reset clears the error and the device works again.
/// - Native driver: the reset cannot clear it (NVIDIA: the process must be terminated
///   and relaunched). `Gpu::reset` returns the sticky error with a detail telling to
///   restart the process, and the whole process stays poisoned: a new accelerator
///   cannot even retain the primary context.
///
/// Objects made before the reset refuse to work on both (the safe API's generation).
fn reset_after_sticky(gpu: &Gpu, sticky: &str, stale: &DeviceBuffer<u32>) {
    // SAFETY: no raw handle or address of this device is used after the reset.
    let reset = unsafe { gpu.reset() };
    let before = stale.to_vec().unwrap_err();
    assert_eq!(
        before.cuda_name(),
        Some("CUDA_ERROR_CONTEXT_IS_DESTROYED"),
        "{before}"
    );
    // The simulator's semantics hold wherever the simulator runs: directly, or behind
    // vmgpu's libcuda.so.1 (which the native backend may load) in either of its modes.
    let simulated = gpu.kind() == BackendKind::Simulator
        || gpu
            .name()
            .is_ok_and(|n| n == cuda_guest::driver::sim::SIM_DEVICE_NAME);
    match simulated {
        true => {
            reset.unwrap();
            let fresh = gpu.htod(&[4u32, 5, 6]).unwrap();
            assert_eq!(fresh.to_vec().unwrap(), [4, 5, 6]);
            gpu.synchronize().unwrap();
        }
        false => {
            let err = reset.expect_err("a reset cannot clear a sticky error natively");
            println!("reset after the fault: {err}");
            assert_eq!(err.cuda_name(), Some(sticky), "{err}");
            let e = err.as_cuda().unwrap();
            assert!(
                e.operation.starts_with("cuDevicePrimaryCtxReset_v2"),
                "{err}"
            );
            assert!(
                e.detail
                    .as_deref()
                    .is_some_and(|d| d.contains("restart the process")),
                "{err}"
            );
            assert!(err.to_string().contains("must be restarted"), "{err}");
            let after = gpu.htod(&[4u32, 5, 6]);
            println!("an upload after the failed reset: {after:?}");
            assert!(after.is_err(), "the process stays poisoned");
            // Process-wide: a new accelerator cannot retain the primary context.
            let acc = Accelerator::builder()
                .backend(Choice::Native)
                .build()
                .expect("the driver still loads");
            let err = acc.gpu(0).expect_err("the process stays poisoned");
            assert_eq!(err.cuda_name(), Some(sticky), "{err}");
        }
    }
}

fn cuda_code(e: &DriverError) -> i32 {
    e.code().unwrap_or_else(|| panic!("not a CUDA error: {e}"))
}

pub fn device_queries(f: &Fixture) {
    let gpu = &f.gpu;
    assert!(f.acc.device_count().unwrap() >= 1);
    let p = gpu.properties().unwrap();
    println!("{p}");
    assert!(!p.name.is_empty());
    assert_ne!(p.uuid, [0; 16]);
    assert!(p.compute_capability >= (5, 0), "{:?}", p.compute_capability);
    assert_eq!(p.warp_size, 32);
    assert_eq!(p.max_threads_per_block, 1024);
    assert_eq!(p.max_block, [1024, 1024, 64]);
    assert_eq!(p.max_grid, [i32::MAX as u32, 65535, 65535]);
    assert!(p.multiprocessors > 0);
    assert!(p.shared_memory_per_block >= 48 * 1024);
    assert!(p.shared_memory_per_block_optin >= p.shared_memory_per_block);
    assert!(p.clock_khz > 0 && p.l2_cache_bytes > 0);
    assert!(p.unified_addressing);
    assert!(p.total_memory > 0);
    let bus_id = gpu.backend().device_pci_bus_id(gpu.device()).unwrap();
    assert_eq!(p.pci_address.to_string(), bus_id);
    let info = gpu.mem_info().unwrap();
    assert!(info.free <= info.total && info.total <= p.total_memory);
    assert_eq!(
        f.acc.devices().unwrap()[0].name,
        p.name,
        "Accelerator::devices agrees"
    );
}

pub fn sync_copies_and_views(f: &Fixture) {
    let gpu = &f.gpu;
    let data: Vec<u32> = (0..1000).collect();
    let mut a = gpu.htod(&data).unwrap();
    assert_eq!(a.len(), 1000);
    assert_eq!(a.byte_len(), 4000);
    assert_eq!(a.to_vec().unwrap(), data);
    assert_eq!(
        a.slice(10..15).unwrap().to_vec().unwrap(),
        [10, 11, 12, 13, 14]
    );
    assert_eq!(
        a.slice(..).unwrap().slice(998..).unwrap().to_vec().unwrap(),
        [998, 999]
    );
    a.slice_mut(0..3)
        .unwrap()
        .copy_from_host(&[7, 8, 9])
        .unwrap();
    assert_eq!(a.slice(0..4).unwrap().to_vec().unwrap(), [7, 8, 9, 3]);
    assert!(a.slice(900..1001).is_err(), "out of range");
    assert!(a.copy_from_host(&[1, 2]).is_err(), "length mismatch");

    let mut b = gpu.alloc_zeroed::<u32>(1000).unwrap();
    assert!(b.to_vec().unwrap().iter().all(|&x| x == 0));
    b.copy_from_device(&a).unwrap();
    gpu.synchronize().unwrap();
    assert_eq!(b.to_vec().unwrap()[..4], [7, 8, 9, 3]);
    b.slice_mut(500..).unwrap().memset_u32(0xdead_beef).unwrap();
    b.slice_mut(0..2).unwrap().memset(0x01).unwrap();
    let out = b.to_vec().unwrap();
    assert_eq!(out[0], 0x0101_0101);
    assert_eq!(out[2], 9);
    assert_eq!(out[499], 499);
    assert!(out[500..].iter().all(|&x| x == 0xdead_beef));

    let mut host = vec![0u32; 5];
    a.slice(995..).unwrap().copy_to_host(&mut host).unwrap();
    assert_eq!(host, [995, 996, 997, 998, 999]);
    let empty = gpu.htod::<u32>(&[]).unwrap();
    assert!(empty.is_empty() && empty.to_vec().unwrap().is_empty());
    let mut none = gpu.alloc_zeroed::<u64>(0).unwrap();
    none.memset(3).unwrap();
    none.copy_from_host(&[]).unwrap();
    let floats = gpu.htod(&[1.5f64, -2.25]).unwrap();
    assert_eq!(floats.to_vec().unwrap(), [1.5, -2.25]);
}

pub fn d2d_chain_on_two_streams_with_events(f: &Fixture) {
    let gpu = &f.gpu;
    let n = 1 << 20;
    let s1 = gpu.stream(StreamFlags { non_blocking: true }).unwrap();
    let s2 = gpu.stream(StreamFlags { non_blocking: true }).unwrap();
    let (start, mid, end) = (
        gpu.event(EventFlags::default()).unwrap(),
        gpu.event(EventFlags::default()).unwrap(),
        gpu.event(EventFlags::default()).unwrap(),
    );
    let mut pinned = gpu.pinned(n * 4, HostAllocFlags::default()).unwrap();
    for (i, c) in pinned.as_mut_slice().chunks_exact_mut(4).enumerate() {
        c.copy_from_slice(&(i as u32 ^ 0x5a5a).to_le_bytes());
    }
    let mut a = gpu.alloc_zeroed::<u32>(n).unwrap();
    let mut b = gpu.alloc_zeroed::<u32>(n).unwrap();
    let mut c = gpu.alloc_zeroed::<u32>(n).unwrap();
    let mut d = gpu.alloc_zeroed::<u32>(n).unwrap();
    start.record(&s1).unwrap();
    let uploaded = s1.upload(&mut a.as_mut_slice(), pinned).unwrap();
    b.copy_from_device_async(&a, &s1).unwrap();
    mid.record(&s1).unwrap();
    // s2 continues the chain after s1's part.
    s2.wait(&mid).unwrap();
    c.copy_from_device_async(&b, &s2).unwrap();
    d.slice_mut(..n / 2)
        .unwrap()
        .copy_from_device_async(&c.slice(n / 2..).unwrap(), &s2)
        .unwrap();
    end.record(&s2).unwrap();
    let back = s2.download(&d.as_slice(), vec![0u32; n]).unwrap();
    let out = back.wait().unwrap();
    let pinned = uploaded.wait().unwrap();
    assert_eq!(pinned.len(), n * 4, "the upload gives its buffer back");
    for i in [0, 1, n / 2 - 1] {
        assert_eq!(out[i], (n / 2 + i) as u32 ^ 0x5a5a, "element {i}");
    }
    assert!(out[n / 2..].iter().all(|&x| x == 0));
    assert_eq!(c.to_vec().unwrap()[12345], 12345 ^ 0x5a5a);
    end.synchronize().unwrap();
    assert!(end.query().unwrap() && s1.query().unwrap() && s2.query().unwrap());
    let total = end.elapsed_since(&start).unwrap();
    let first = mid.elapsed_since(&start).unwrap();
    assert!(total >= first && first >= 0.0, "{first} ms, {total} ms");
}

pub fn raw_async_copies_with_pinned_memory(f: &Fixture) {
    let gpu = &f.gpu;
    let n = 64 << 10;
    let mut src = gpu.pinned(n, HostAllocFlags::default()).unwrap();
    for (i, b) in src.as_mut_slice().iter_mut().enumerate() {
        *b = (i * 7 % 251) as u8;
    }
    let mut dst = gpu.pinned(n, HostAllocFlags::default()).unwrap();
    let mut dev = gpu.alloc_zeroed::<u8>(n).unwrap();
    let stream = gpu.stream(StreamFlags { non_blocking: true }).unwrap();
    // SAFETY: `src` and `dst` are neither touched nor dropped until the stream is
    // synchronised below.
    unsafe {
        stream
            .copy_htod_async(&mut dev.as_mut_slice(), src.as_slice())
            .unwrap();
        dev.slice_mut(..16)
            .unwrap()
            .memset_async(0xee, &stream)
            .unwrap();
        stream
            .copy_dtoh_async(dst.as_mut_slice(), &dev.as_slice())
            .unwrap();
    }
    stream.synchronize().unwrap();
    assert!(dst.as_slice()[..16].iter().all(|&b| b == 0xee));
    assert_eq!(dst.as_slice()[16..], src.as_slice()[16..]);
    let mut short = vec![0u8; 3];
    // SAFETY: refused (lengths differ) before anything is queued.
    assert!(unsafe { stream.copy_dtoh_async(&mut short, &dev.as_slice()) }.is_err());
}

pub fn checked_launch_and_argument_errors(f: &Fixture) {
    let gpu = &f.gpu;
    let module = gpu.load_ptx(KERNELS_PTX).unwrap();
    let add = module.function("vector_add").unwrap();
    let params = add.params().unwrap();
    assert_eq!(params.len(), 4);
    assert_eq!(params[3].name, "vector_add_param_3");
    let n = 1000u32; // leaves a partial block
    let a: Vec<f32> = (0..n).map(|i| i as f32).collect();
    let b: Vec<f32> = (0..n).map(|i| 0.5 * i as f32).collect();
    let (da, db) = (gpu.htod(&a).unwrap(), gpu.htod(&b).unwrap());
    let mut dc = gpu.alloc_zeroed::<f32>(n as usize).unwrap();
    let stream = gpu.stream(StreamFlags::default()).unwrap();
    let cfg = LaunchConfig::for_elements(n, 256);

    // Wrong count, size and kind: refused before the launch, naming the parameter.
    let wrong: [Vec<KernelArg>; 4] = [
        kernel_args![&da, &db, &dc].to_vec(),
        kernel_args![&da, &db, &dc, n as u64].to_vec(),
        kernel_args![1.0f32, &db, &dc, n].to_vec(),
        kernel_args![&da, &db, &dc, 2.0f32].to_vec(),
    ];
    let expect = [
        (3, "vector_add_param_3"),
        (3, "vector_add_param_3"),
        (0, "vector_add_param_0"),
        (3, "vector_add_param_3"),
    ];
    for (args, (index, param)) in wrong.iter().zip(expect) {
        // SAFETY: refused before reaching the device.
        let err = unsafe { add.launch(&stream, cfg, args) }.unwrap_err();
        match &err {
            DriverError::BadKernelArgument {
                kernel,
                index: i,
                param: p,
                ..
            } => {
                assert_eq!(
                    (kernel.as_str(), *i, p.as_str()),
                    ("vector_add", index, param),
                    "{err}"
                )
            }
            other => panic!("expected BadKernelArgument, got {other}"),
        }
    }
    let extra = kernel_args![&da, &db, &dc, n, n];
    assert!(add.check_args(&extra).is_err());
    assert_eq!(dc.to_vec().unwrap(), vec![0.0; n as usize], "nothing ran");

    // SAFETY: vector_add reads a and b and writes c within n elements.
    unsafe { add.launch(&stream, cfg, &kernel_args![&da, &db, &mut dc, n]) }.unwrap();
    stream.synchronize().unwrap();
    let c = dc.to_vec().unwrap();
    for i in 0..n as usize {
        assert_eq!(c[i], a[i] + b[i], "element {i}");
    }
    // Views as arguments: the second half only.
    let mut dc2 = gpu.alloc_zeroed::<f32>(500).unwrap();
    let (ha, hb) = (da.slice(500..).unwrap(), db.slice(500..).unwrap());
    // SAFETY: as above, over 500 elements of each view.
    unsafe {
        add.launch(
            &gpu.default_stream(),
            LaunchConfig::for_elements(500, 128),
            &kernel_args![&ha, &hb, &mut dc2, 500u32],
        )
    }
    .unwrap();
    assert_eq!(dc2.to_vec().unwrap()[0], 500.0 + 250.0);
    let err = module.function("no_such_kernel").unwrap_err();
    assert_eq!(cuda_code(&err), 500, "{err}");
}

pub fn dynamic_shared_memory_launch(f: &Fixture) {
    let gpu = &f.gpu;
    let module = gpu.load_ptx(KERNELS_PTX).unwrap();
    let sum = module.function("block_sum").unwrap();
    let n = 1000u32;
    let input: Vec<u32> = (0..n).map(|i| i * 3 + 1).collect();
    let din = gpu.htod(&input).unwrap();
    let blocks = n.div_ceil(128);
    let mut dout = gpu.alloc_zeroed::<u32>(blocks as usize).unwrap();
    let stream = gpu.stream(StreamFlags::default()).unwrap();
    let cfg = LaunchConfig {
        shared_bytes: 128 * 4,
        ..LaunchConfig::linear(blocks, 128)
    };
    // SAFETY: block_sum reads n inputs and writes one output per block.
    unsafe { sum.launch(&stream, cfg, &kernel_args![&din, &mut dout, n]) }.unwrap();
    stream.synchronize().unwrap();
    let out = dout.to_vec().unwrap();
    for (b, got) in out.iter().enumerate() {
        let want: u32 = input.iter().skip(b * 128).take(128).sum();
        assert_eq!(*got, want, "block {b}");
    }
    // More than 48 KiB needs the kernel's opt-in first.
    let big = LaunchConfig {
        shared_bytes: 64 << 10,
        ..cfg
    };
    dout.memset(0).unwrap();
    // SAFETY: as above.
    let err = unsafe { sum.launch(&stream, big, &kernel_args![&din, &mut dout, n]) }.unwrap_err();
    // Per backend: the simulator answers CUDA_ERROR_INVALID_VALUE; the driver documents
    // no code for it and answers INVALID_VALUE or LAUNCH_OUT_OF_RESOURCES.
    if gpu.kind() == BackendKind::Simulator {
        assert_eq!(cuda_code(&err), 1, "{err}");
    } else {
        assert!([1, 701].contains(&cuda_code(&err)), "{err}");
    }
    sum.set_max_dynamic_shared_memory(64 << 10).unwrap();
    // SAFETY: as above.
    unsafe { sum.launch(&stream, big, &kernel_args![&din, &mut dout, n]) }.unwrap();
    stream.synchronize().unwrap();
    assert_eq!(dout.to_vec().unwrap(), out);
    let optin = gpu.properties().unwrap().shared_memory_per_block_optin;
    assert!(sum.set_max_dynamic_shared_memory(optin + 1).is_err());
}

pub fn bad_launch_geometry_is_refused(f: &Fixture) {
    let gpu = &f.gpu;
    let module = gpu.load_ptx(KERNELS_PTX).unwrap();
    let empty = module.function("empty").unwrap();
    let stream = gpu.stream(StreamFlags::default()).unwrap();
    for cfg in [LaunchConfig::linear(1, 2048), LaunchConfig::linear(0, 32)] {
        // SAFETY: `empty` touches no memory.
        let err = unsafe { empty.launch(&stream, cfg, &[]) }.unwrap_err();
        assert_eq!(cuda_code(&err), 1, "{err}");
    }
    // The context is fine afterwards.
    // SAFETY: as above.
    unsafe { empty.launch(&stream, LaunchConfig::linear(4, 64), &[]) }.unwrap();
    stream.synchronize().unwrap();
}

pub fn jit_error_carries_the_log(f: &Fixture) {
    let gpu = &f.gpu;
    let bad = ".version 7.0\n.target sm_80\n.address_size 64\n\
               .visible .entry k(.param .u64 p)\n{\n    frobnicate.u32 %r1, 3;\n    ret;\n}\n";
    let err = gpu.load_ptx(bad).unwrap_err();
    let e = err
        .as_cuda()
        .unwrap_or_else(|| panic!("a CUDA error: {err}"));
    assert_eq!(e.name, "CUDA_ERROR_INVALID_PTX", "{err}");
    let log = e.jit_log.as_deref().unwrap_or_default();
    assert!(log.contains("error"), "{log}");
    assert!(err.to_string().contains("JIT log"), "{err}");
    println!("{err}");
    // A syntax error too.
    let err = gpu
        .load_ptx(".version 7.0\n.target sm_80\n.entry k( {\n")
        .unwrap_err();
    assert_eq!(err.cuda_name(), Some("CUDA_ERROR_INVALID_PTX"), "{err}");
    assert!(err.as_cuda().unwrap().jit_log.is_some(), "{err}");
    // The context is fine afterwards.
    assert!(gpu.load_ptx(KERNELS_PTX).is_ok());
    let missing = gpu.load_ptx_file("/nonexistent/k.ptx").unwrap_err();
    assert!(
        missing.to_string().contains("/nonexistent/k.ptx"),
        "{missing}"
    );
}

/// A kernel's illegal address: the launch succeeds, the next synchronising call fails
/// with `CUDA_ERROR_ILLEGAL_ADDRESS`, and every later call of the context too (sticky).
/// What a reset does then differs per backend ([`reset_after_sticky`]); on the native
/// driver this test runs in a child process of its own ([`Faults::ChildProcess`]).
pub fn out_of_bounds_kernel_is_sticky(f: &Fixture) {
    let gpu = &f.gpu;
    let module = gpu.load_ptx(KERNELS_PTX).unwrap();
    let oob = module.function("oob_write").unwrap();
    let mut buf = gpu.htod(&[1u32; 1024]).unwrap();
    let stream = gpu.stream(StreamFlags::default()).unwrap();
    // SAFETY: oob_write writes one terabyte past the buffer, far beyond any allocation
    // granularity, where nothing is mapped in the device's address space: the device
    // faults (the point of the test) on both backends.
    let launched = unsafe {
        oob.launch(
            &stream,
            LaunchConfig::linear(1, 32),
            &kernel_args![&mut buf],
        )
    };
    assert!(launched.is_ok(), "the launch itself succeeds: {launched:?}");
    let err = stream.synchronize().unwrap_err();
    let e = err.as_cuda().expect("a CUDA error");
    assert_eq!(
        (e.name.as_str(), e.code),
        ("CUDA_ERROR_ILLEGAL_ADDRESS", 700),
        "{err}"
    );
    assert!(e.is_sticky());
    assert_eq!(e.device, Some(0));
    assert!(err.to_string().contains("sticky"), "{err}");
    if gpu.kind() == BackendKind::Simulator {
        // The simulator's precise report travels with the error (the driver has none).
        let fault = e.fault.as_ref().expect("the fault report");
        assert!(fault.write && fault.at.kernel == "oob_write", "{fault}");
        assert!(
            e.detail.as_deref().unwrap().contains("out-of-bounds write"),
            "{err}"
        );
    }
    println!("{err}");
    // Sticky: every later call of the context fails the same way.
    for err in [
        gpu.synchronize().unwrap_err(),
        gpu.alloc_zeroed::<u8>(16).unwrap_err(),
        buf.to_vec().unwrap_err(),
    ] {
        assert_eq!(err.cuda_name(), Some("CUDA_ERROR_ILLEGAL_ADDRESS"), "{err}");
    }
    // Refused while a pinned buffer lives (the safe API's check, before the backend).
    let pinned = gpu.pinned(16, HostAllocFlags::default());
    if let Ok(p) = pinned {
        // SAFETY: nothing raw is used after the reset.
        let refused = unsafe { gpu.reset() }.unwrap_err();
        assert!(refused.to_string().contains("pinned"), "{refused}");
        drop(p);
    }
    reset_after_sticky(gpu, "CUDA_ERROR_ILLEGAL_ADDRESS", &buf);
    drop((buf, stream, oob, module));
}

pub fn out_of_memory(f: &Fixture) {
    let gpu = &f.gpu;
    let total = gpu.properties().unwrap().total_memory;
    let before = gpu.mem_info().unwrap();
    let err = gpu
        .alloc_zeroed::<u8>((total + (1 << 30)) as usize)
        .unwrap_err();
    assert_eq!(err.cuda_name(), Some("CUDA_ERROR_OUT_OF_MEMORY"), "{err}");
    assert!(err.to_string().contains("hint"), "{err}");
    let big = gpu.alloc_zeroed::<u8>(64 << 20).unwrap();
    let during = gpu.mem_info().unwrap();
    // Per backend: the simulator counts the bytes allocated; a GPU maps whole pages of
    // its allocation granularity (2 MiB on an H100), so free memory drops by at least
    // the size asked for (other processes on the GPU aside).
    let used = before.free.saturating_sub(during.free);
    if gpu.kind() == BackendKind::Simulator {
        assert_eq!(used, 64 << 20, "{before:?} {during:?}");
    } else {
        assert!(used >= 64 << 20, "{before:?} {during:?}");
    }
    drop(big);
    // Not sticky: the context goes on.
    gpu.synchronize().unwrap();
}

pub fn stream_query_events_and_elapsed_time(f: &Fixture) {
    let gpu = &f.gpu;
    let module = gpu.load_ptx(KERNELS_PTX).unwrap();
    let spin = module.function("spin").unwrap();
    let mut flag = gpu.alloc_zeroed::<u32>(1).unwrap();
    let stream = gpu.stream(StreamFlags::default()).unwrap();
    let (start, end) = (
        gpu.event(EventFlags::default()).unwrap(),
        gpu.event(EventFlags::default()).unwrap(),
    );
    assert!(stream.query().unwrap(), "an idle stream is ready");
    start.record(&stream).unwrap();
    // About 0.2 s on the simulator (its clock counts nanoseconds), 0.1 s on a GPU.
    let cycles: i64 = 200_000_000;
    // SAFETY: spin writes one u32 to its flag buffer.
    unsafe {
        spin.launch(
            &stream,
            LaunchConfig::linear(1, 32),
            &kernel_args![cycles, &mut flag, 42u32],
        )
    }
    .unwrap();
    end.record(&stream).unwrap();
    assert!(!stream.query().unwrap(), "not ready while the kernel runs");
    assert!(!end.query().unwrap(), "the event is not reached yet");
    let not_ready = end.elapsed_since(&start).unwrap_err();
    assert_eq!(not_ready.cuda_name(), Some("CUDA_ERROR_NOT_READY"));
    end.synchronize().unwrap();
    assert!(end.query().unwrap() && stream.query().unwrap());
    let ms = end.elapsed_since(&start).unwrap();
    assert!((20.0..60_000.0).contains(&ms), "{ms} ms");
    assert_eq!(flag.to_vec().unwrap(), [42]);
    let untimed = gpu
        .event(EventFlags {
            disable_timing: true,
            ..EventFlags::default()
        })
        .unwrap();
    untimed.record(&stream).unwrap();
    untimed.synchronize().unwrap();
    assert!(untimed.elapsed_since(&start).is_err(), "no timing");
}

pub fn registered_host_memory(f: &Fixture) {
    let gpu = &f.gpu;
    let n = 1 << 16;
    let host: Vec<u32> = (0..n as u32)
        .map(|i| i.wrapping_mul(2_654_435_761))
        .collect();
    let registered = gpu
        .register(host.clone(), HostRegisterFlags::default())
        .unwrap();
    assert_eq!(registered[7], host[7]);
    let mut dev = gpu.alloc_zeroed::<u32>(n).unwrap();
    let stream = gpu.stream(StreamFlags::default()).unwrap();
    let registered = stream
        .upload(&mut dev.as_mut_slice(), registered)
        .unwrap()
        .wait()
        .unwrap();
    assert_eq!(dev.to_vec().unwrap(), host);
    let mut back = stream
        .download(&dev.slice(..).unwrap(), registered)
        .unwrap()
        .wait()
        .unwrap();
    back[0] = 99;
    let v = back.into_vec();
    assert_eq!((v[0], v[1]), (99, host[1]));
    assert!(gpu
        .register(Vec::<u8>::new(), HostRegisterFlags::default())
        .is_err());
}

pub fn futures_on_a_current_thread_runtime_do_not_block_it(f: &Fixture) {
    let gpu = f.gpu.clone();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    rt.block_on(async move {
        let module = gpu.load_ptx(KERNELS_PTX).unwrap();
        let spin = module.function("spin").unwrap();
        let mut flag = gpu.alloc_zeroed::<u32>(1).unwrap();
        let stream = gpu.stream(StreamFlags::default()).unwrap();
        // SAFETY: spin writes one u32 to its flag buffer.
        let running = unsafe {
            spin.launch_future(
                &stream,
                LaunchConfig::linear(1, 32),
                &kernel_args![200_000_000i64, &mut flag, 7u32],
            )
        }
        .unwrap();
        // One runtime thread: if awaiting the kernel blocked it, this timer could not
        // fire before the kernel is done.
        let ticker = tokio::spawn(async {
            tokio::time::sleep(Duration::from_millis(5)).await;
            std::time::Instant::now()
        });
        running.await.unwrap();
        let kernel_done = std::time::Instant::now();
        let ticked = ticker.await.unwrap();
        assert!(ticked < kernel_done, "the timer fired while the kernel ran");
        assert_eq!(flag.to_vec().unwrap(), [7]);
    });
}

pub fn futures_on_a_multi_thread_runtime(f: &Fixture) {
    let gpu = f.gpu.clone();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_time()
        .build()
        .unwrap();
    rt.block_on(async move {
        let module = gpu.load_ptx(KERNELS_PTX).unwrap();
        let add = module.function("vector_add").unwrap();
        let n = 4097usize;
        let a: Vec<f32> = (0..n).map(|i| i as f32).collect();
        let (mut da, mut db) = (
            gpu.alloc_zeroed::<f32>(n).unwrap(),
            gpu.alloc_zeroed::<f32>(n).unwrap(),
        );
        let mut dc = gpu.alloc_zeroed::<f32>(n).unwrap();
        let s1 = gpu.stream(StreamFlags { non_blocking: true }).unwrap();
        let s2 = gpu.stream(StreamFlags { non_blocking: true }).unwrap();
        let up_a = s1.upload(&mut da.as_mut_slice(), a.clone()).unwrap();
        let up_b = s2.upload(&mut db.as_mut_slice(), a.clone()).unwrap();
        let (ra, rb) = tokio::join!(up_a, up_b);
        assert_eq!(ra.unwrap(), a, "the upload gives its vector back");
        rb.unwrap();
        // SAFETY: vector_add stays within n elements of each buffer.
        let launched = unsafe {
            add.launch_future(
                &s1,
                LaunchConfig::for_elements(n as u32, 256),
                &kernel_args![&da, &db, &mut dc, n as u32],
            )
        }
        .unwrap();
        launched.await.unwrap();
        let out = s1
            .download(&dc.as_slice(), vec![0f32; n])
            .unwrap()
            .await
            .unwrap();
        assert_eq!(out[n - 1], 2.0 * (n - 1) as f32);
        let mut e = gpu.alloc_zeroed::<f32>(n).unwrap();
        s2.copy_dtod_future(&mut e.as_mut_slice(), &dc.as_slice())
            .unwrap()
            .await
            .unwrap();
        // A future dropped before completion keeps its buffer until the device is done.
        drop(s2.download(&e.as_slice(), vec![0f32; n]).unwrap());
        s2.done().unwrap().await.unwrap();
        assert_eq!(e.to_vec().unwrap()[1], 2.0);
    });
}

pub fn concurrent_use_from_several_threads(f: &Fixture) {
    let module = f.gpu.load_ptx(KERNELS_PTX).unwrap();
    let add = module.function("vector_add").unwrap();
    std::thread::scope(|scope| {
        let workers: Vec<_> = (0..4u32)
            .map(|t| {
                // Each thread binds the context itself (the safe API does, per call).
                let gpu = f.gpu.clone();
                let add = add.clone();
                scope.spawn(move || {
                    let stream = gpu.stream(StreamFlags { non_blocking: true }).unwrap();
                    for round in 0..5u32 {
                        let n = 1000 + 37 * t + round;
                        let a: Vec<f32> = (0..n).map(|i| (i + t) as f32).collect();
                        let da = gpu.htod(&a).unwrap();
                        let mut dc = gpu.alloc_zeroed::<f32>(n as usize).unwrap();
                        // SAFETY: vector_add stays within n elements of each buffer.
                        unsafe {
                            add.launch(
                                &stream,
                                LaunchConfig::for_elements(n, 128),
                                &kernel_args![&da, &da, &mut dc, n],
                            )
                        }
                        .unwrap();
                        stream.synchronize().unwrap();
                        let c = dc.to_vec().unwrap();
                        assert_eq!(c.len(), n as usize);
                        assert_eq!(c[n as usize - 1], 2.0 * a[n as usize - 1], "thread {t}");
                    }
                })
            })
            .collect();
        for w in workers {
            w.join().unwrap();
        }
    });
}

/// A faulting kernel's future fails with `CUDA_ERROR_ILLEGAL_ADDRESS`, and so does work
/// queued behind it; then [`reset_after_sticky`] (per backend). On the native driver this
/// test runs in a child process of its own ([`Faults::ChildProcess`]).
pub fn a_faulting_kernel_fails_its_future(f: &Fixture) {
    let gpu = f.gpu.clone();
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let buf = rt.block_on(async {
        let module = gpu.load_ptx(KERNELS_PTX).unwrap();
        let oob = module.function("oob_write").unwrap();
        let mut buf = gpu.alloc_zeroed::<u32>(32).unwrap();
        let stream = gpu.stream(StreamFlags::default()).unwrap();
        // SAFETY: oob_write writes one terabyte past the buffer, where nothing is mapped
        // in the device's address space: the device faults.
        let launched = unsafe {
            oob.launch_future(
                &stream,
                LaunchConfig::linear(1, 32),
                &kernel_args![&mut buf],
            )
        };
        // The fault surfaces when the future is awaited, or already when launch_future
        // records its completion event if the kernel faulted that fast (a race on both
        // backends; CUDA reports an asynchronous error at the next call).
        let err = match launched {
            Ok(fut) => fut.await.unwrap_err(),
            Err(err) => err,
        };
        assert_eq!(err.cuda_name(), Some("CUDA_ERROR_ILLEGAL_ADDRESS"), "{err}");
        // A download queued behind it fails too (at once or when awaited), and gives
        // nothing back.
        match stream.download(&buf.as_slice(), vec![0u32; 32]) {
            Ok(fut) => {
                let err = fut.await.unwrap_err();
                assert_eq!(err.cuda_name(), Some("CUDA_ERROR_ILLEGAL_ADDRESS"), "{err}");
            }
            Err(err) => {
                assert_eq!(err.cuda_name(), Some("CUDA_ERROR_ILLEGAL_ADDRESS"), "{err}")
            }
        }
        buf
    });
    reset_after_sticky(&gpu, "CUDA_ERROR_ILLEGAL_ADDRESS", &buf);
}
