//! The driver API's conformance suite (`conformance/mod.rs`) on `RemoteBackend`
//! (`vmgpu_cuda_proto::client`) directly, forwarding to a `cuda_guest::service` on the
//! simulator over a Unix socket: each check with a backend, and so a session (a
//! simulator instance of its own on the server), of its own.

#[macro_use]
mod conformance;
mod service_support;

use std::sync::{Arc, OnceLock};

use cuda_guest::proto::client::RemoteBackend;
use cuda_guest::service::{BackendChoice, ServiceConfig};
use cuda_guest::sim::SimConfig;

/// The service of this test process (never stopped: the process ends with the tests).
fn server() -> &'static service_support::Server {
    static SERVER: OnceLock<service_support::Server> = OnceLock::new();
    SERVER.get_or_init(|| {
        service_support::Server::start_with(
            BackendChoice::Simulator(SimConfig {
                threads: 2,
                ..SimConfig::default()
            }),
            ServiceConfig::default(),
        )
    })
}

/// A `RemoteBackend` on the service, after `cuInit(0)`.
fn remote() -> conformance::Fixture {
    let address = format!("unix:{}", server().path.display());
    let backend = RemoteBackend::new(&address)
        .unwrap_or_else(|e| panic!("RemoteBackend::new({address}): {e}"));
    backend.set_init_flags(0);
    conformance::Fixture::new(Arc::new(backend), None)
}

// The service's simulator clears a sticky fault when the session resets its context.
conformance_suite!(remote, conformance::Faults::InProcess);
