//! The driver API's conformance suite where a GPU is needed (ignored without one, as
//! `cuda-guest/tests/accel_native.rs`; `cargo test -p vmgpu-libcuda --test
//! conformance_forward_native -- --ignored` on a machine with one):
//!
//! - vmgpu's `libcuda.so.1` forwarding to a `cuda_guest::service` whose backend is
//!   `BackendChoice::Shared(NativeBackend)` on NVIDIA's driver: the Rust suite
//!   (`cuda-guest/tests/conformance`) through `NativeBackend` loaded from the library,
//!   and the C program `tests/c/conformance.c` forwarded to the same service;
//! - the C program on NVIDIA's driver itself (module `driver`): the reference the other
//!   paths' C checks are compared with.
//!
//! The service's backend loads NVIDIA's `libcuda.so.1` (or `VMGPU_LIBCUDA`) before the
//! client's `NativeBackend` loads vmgpu's library by its path. The check that provokes a
//! sticky fault runs in a child process: on the driver a sticky error poisons the
//! process (the service's included).

mod support;

#[macro_use]
#[path = "../../tests/conformance/mod.rs"]
mod conformance;

#[macro_use]
mod c_conformance;

use std::path::PathBuf;
use std::sync::{Arc, OnceLock};

use cuda_guest::driver::{LoadOptions, NativeBackend};
use cuda_guest::service::{BackendChoice, BackgroundServer, Service, ServiceConfig};

/// A service on NVIDIA's driver, on a Unix socket.
struct NativeServer {
    path: PathBuf,
    _server: BackgroundServer,
    _dir: tempfile::TempDir,
}

/// The service of this test process (started once, never stopped).
fn server() -> &'static NativeServer {
    static SERVER: OnceLock<NativeServer> = OnceLock::new();
    SERVER.get_or_init(|| {
        let native = NativeBackend::with_options(&LoadOptions::default())
            .unwrap_or_else(|e| panic!("NVIDIA's driver did not load: {e}"));
        let service = Service::new(
            BackendChoice::Shared(Arc::new(native)),
            ServiceConfig::default(),
        )
        .expect("the service starts");
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("vmgpu.sock");
        let server = BackgroundServer::start(service, &path, "conformance-native")
            .expect("the server starts");
        std::env::set_var("VMGPU_CUDA_SERVER", format!("unix:{}", path.display()));
        std::env::remove_var("VMGPU_CUDA_MODE");
        std::env::remove_var("VMGPU_CUDA_BACKEND");
        NativeServer {
            path,
            _server: server,
            _dir: dir,
        }
    })
}

/// `NativeBackend` on vmgpu's library, forwarding to the service on the GPU.
fn forward_native() -> conformance::Fixture {
    server();
    conformance::native_with(&LoadOptions {
        path: Some(support::shim_path()),
        ..LoadOptions::default()
    })
}

conformance_suite!(
    forward_native,
    conformance::Faults::ChildProcess,
    #[ignore = "needs an NVIDIA GPU"]
);

fn forwarded() -> c_conformance::Target {
    c_conformance::Target::Forward(format!("unix:{}", server().path.display()))
}

c_conformance!(forwarded, #[ignore = "needs an NVIDIA GPU"]);

/// The C program on NVIDIA's driver itself.
mod driver {
    use crate::{c_conformance, conformance};

    fn driver() -> c_conformance::Target {
        c_conformance::Target::Driver
    }

    c_conformance!(driver, #[ignore = "needs an NVIDIA GPU"]);
}
