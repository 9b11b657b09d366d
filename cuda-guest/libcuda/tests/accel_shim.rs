//! The accelerator's shared suite (`cuda-guest/tests/accel_common`) on the native
//! backend (`cuda_guest::driver::NativeBackend`) pointed at this shim
//! (`VMGPU_LIBCUDA=<dir>/libcuda.so.1`) in simulator mode: the native code path —
//! loading the library, resolving every entry point through `cuGetProcAddress_v2`,
//! error mapping, JIT logs, sticky faults and resets — runs on every change, without a
//! GPU.

mod support;

#[macro_use]
#[path = "../../tests/accel_common/mod.rs"]
mod accel_common;

use std::sync::Once;

use cuda_guest::driver::{Backend, LoadOptions, NativeBackend, Resolution};

/// Points the native backend at the shim (once per process, before any test reads the
/// environment).
fn environment() {
    static ENV: Once = Once::new();
    ENV.call_once(|| {
        std::env::set_var("VMGPU_LIBCUDA", support::shim_path());
        std::env::set_var("VMGPU_CUDA_MODE", "sim");
        std::env::set_var("VMGPU_SIM_THREADS", "2");
        std::env::remove_var("VMGPU_CUDA_SERVER");
        std::env::remove_var("VMGPU_CUDA_BACKEND");
    });
}

/// The native backend on the shim, device 0 (serialised: the tests share the shim's
/// primary context, which the fault tests reset).
fn shim() -> accel_common::Fixture {
    environment();
    accel_common::native()
}

// The shim runs the simulator in-process: a reset clears a sticky fault there, so the
// faulting tests need no child process.
accel_suite!(shim, accel_common::Faults::InProcess);

#[test]
fn entry_points_resolve_through_cu_get_proc_address_to_the_versioned_symbols() {
    environment();
    let native = NativeBackend::with_options(&LoadOptions {
        path: Some(support::shim_path()),
        ..LoadOptions::default()
    })
    .expect("the native backend loads the shim");
    let driver = native.driver();
    assert!(
        matches!(
            driver.resolution(),
            Resolution::ProcAddress { flags: 1, .. }
        ),
        "{:?}",
        driver.resolution()
    );
    let mut checked = 0;
    for (name, versioned, address) in driver.api().addresses() {
        // "cuCtxCreate" at 12000 is `cuCtxCreate_v3` (introduced in 11.4): the loader's
        // prototype is that variant's, as the driver's version rules select it.
        let exported = driver
            .dlsym_address(versioned)
            .unwrap_or_else(|| panic!("{versioned} is not exported"));
        assert_eq!(
            address, exported,
            "{name}: cuGetProcAddress_v2 vs dlsym({versioned})"
        );
        checked += 1;
    }
    assert_eq!(checked, cuda_guest::driver::loader::ENTRY_POINTS.len());
    assert_eq!(native.driver_version().unwrap(), 13000);
    assert_eq!(
        native
            .device_name(cuda_guest::driver::Device::new(0))
            .unwrap(),
        "vmgpu PTX simulator (virtual sm_80)"
    );
}

#[test]
fn the_per_thread_default_stream_variants_resolve_too() {
    environment();
    let native = NativeBackend::with_options(&LoadOptions {
        path: Some(support::shim_path()),
        per_thread_default_stream: true,
        ..LoadOptions::default()
    })
    .expect("the native backend loads the shim with per-thread streams");
    let driver = native.driver();
    let by_name: std::collections::HashMap<_, _> = driver
        .api()
        .addresses()
        .into_iter()
        .map(|(n, _, a)| (n, a))
        .collect();
    for (name, symbol) in [
        ("cuLaunchKernel", "cuLaunchKernel_ptsz"),
        ("cuMemcpyHtoD", "cuMemcpyHtoD_v2_ptds"),
        ("cuMemcpyDtoHAsync", "cuMemcpyDtoHAsync_v2_ptsz"),
        ("cuMemsetD8Async", "cuMemsetD8Async_ptsz"),
        ("cuStreamSynchronize", "cuStreamSynchronize_ptsz"),
        ("cuEventRecord", "cuEventRecord_ptsz"),
        ("cuMemAlloc", "cuMemAlloc_v2"),
    ] {
        assert_eq!(
            Some(by_name[name]),
            driver.dlsym_address(symbol),
            "{name} with the per-thread flag is {symbol}"
        );
    }
}

/// A context of its own (`cuCtxCreate` as resolved for CUDA 12.0, i.e. `_v3` with no
/// affinity parameters) works through the native backend: its memory is its own and it
/// is gone after `context_destroy`.
#[test]
fn a_created_context_has_its_own_memory_and_is_destroyed() {
    environment();
    let native = NativeBackend::with_options(&LoadOptions {
        path: Some(support::shim_path()),
        ..LoadOptions::default()
    })
    .expect("the native backend loads the shim");
    let dev = cuda_guest::driver::Device::new(0);
    let ctx = native.context_create(dev).expect("cuCtxCreate_v3");
    native.context_set_current(&ctx).unwrap();
    let p = native.mem_alloc(16).unwrap();
    // SAFETY: `p` is a live 16-byte allocation of the current context.
    unsafe { native.memcpy_htod(p, &[7u8; 16]).unwrap() };
    let mut back = [0u8; 16];
    // SAFETY: as above.
    unsafe { native.memcpy_dtoh(&mut back, p).unwrap() };
    assert_eq!(back, [7u8; 16]);
    native.mem_free(p).unwrap();
    // SAFETY: nothing made in `ctx` is used after this.
    unsafe { native.context_destroy(ctx).expect("cuCtxDestroy_v2") };
}
