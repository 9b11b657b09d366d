//! The driver API's conformance suite on vmgpu's `libcuda.so.1` in simulator mode
//! (`VMGPU_CUDA_MODE=sim`): the Rust suite (`cuda-guest/tests/conformance`) through
//! `NativeBackend` loaded from the library, and the C program `tests/c/conformance.c`
//! (the entry points the trait does not reach) linked with it.

mod support;

#[macro_use]
#[path = "../../tests/conformance/mod.rs"]
mod conformance;

#[macro_use]
mod c_conformance;

use std::sync::Once;

use cuda_guest::driver::LoadOptions;

/// Simulator mode for the library this process loads (once, before any test reads the
/// environment).
fn environment() {
    static ENV: Once = Once::new();
    ENV.call_once(|| {
        std::env::set_var("VMGPU_CUDA_MODE", "sim");
        std::env::set_var("VMGPU_SIM_THREADS", "2");
        std::env::remove_var("VMGPU_CUDA_SERVER");
        std::env::remove_var("VMGPU_CUDA_BACKEND");
    });
}

/// `NativeBackend` on the library (serialised: the tests share its primary context).
fn shim() -> conformance::Fixture {
    environment();
    conformance::native_with(&LoadOptions {
        path: Some(support::shim_path()),
        ..LoadOptions::default()
    })
}

// The library runs the simulator in-process, whose reset clears a sticky fault.
conformance_suite!(shim, conformance::Faults::InProcess);

fn sim() -> c_conformance::Target {
    c_conformance::Target::Sim
}

c_conformance!(sim);
