//! The driver API's conformance suite on vmgpu's `libcuda.so.1` in forward mode, against
//! a `cuda_guest::service` on the simulator (Unix socket): the Rust suite
//! (`cuda-guest/tests/conformance`) through `NativeBackend` loaded from the library, and
//! the C program `tests/c/conformance.c` forwarded to the same service.

mod support;

#[macro_use]
#[path = "../../tests/conformance/mod.rs"]
mod conformance;

#[macro_use]
mod c_conformance;

use std::sync::OnceLock;

use cuda_guest::driver::LoadOptions;

/// The service of this test process (never stopped: the process ends with the tests);
/// `VMGPU_CUDA_SERVER` names it.
fn server() -> &'static support::Server {
    static SERVER: OnceLock<support::Server> = OnceLock::new();
    SERVER.get_or_init(|| {
        let server = support::Server::start();
        std::env::set_var("VMGPU_CUDA_SERVER", server.env());
        std::env::remove_var("VMGPU_CUDA_MODE");
        std::env::remove_var("VMGPU_CUDA_BACKEND");
        server
    })
}

/// `NativeBackend` on the library, forwarding to the service (serialised).
fn forward() -> conformance::Fixture {
    server();
    conformance::native_with(&LoadOptions {
        path: Some(support::shim_path()),
        ..LoadOptions::default()
    })
}

// The service's simulator clears a sticky fault when the session resets its context.
conformance_suite!(forward, conformance::Faults::InProcess);

fn forwarded() -> c_conformance::Target {
    c_conformance::Target::Forward(server().env())
}

c_conformance!(forwarded);
