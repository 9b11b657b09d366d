//! The accelerator's shared suite on `NativeBackend` loaded from this shim in forward
//! mode, against a `cuda_guest::service` (simulator backend) on a Unix socket: the
//! driver API as a program sees it, end to end through the protocol (pipelined
//! launches and copies, deferred errors, futures on completion threads, several
//! threads on one connection). Every test of the suite but
//! `dynamic_shared_memory_launch`, which needs `cuFuncSetAttribute` (no opcode in the
//! protocol).

mod support;

#[macro_use]
#[path = "../../tests/accel_common/mod.rs"]
mod accel_common;

use std::path::PathBuf;
use std::sync::OnceLock;

/// The service for this test process (never stopped: the process ends with the tests).
fn server() -> &'static PathBuf {
    static SERVER: OnceLock<support::Server> = OnceLock::new();
    &SERVER
        .get_or_init(|| {
            let server = support::Server::start();
            std::env::set_var("VMGPU_LIBCUDA", support::shim_path());
            std::env::set_var("VMGPU_CUDA_SERVER", server.env());
            std::env::remove_var("VMGPU_CUDA_MODE");
            std::env::remove_var("VMGPU_CUDA_BACKEND");
            server
        })
        .path
}

/// The native backend on the shim, forwarding to the service.
fn forward() -> accel_common::Fixture {
    server();
    accel_common::native()
}

accel_suite!(@each forward, [],
    device_queries,
    sync_copies_and_views,
    d2d_chain_on_two_streams_with_events,
    raw_async_copies_with_pinned_memory,
    checked_launch_and_argument_errors,
    bad_launch_geometry_is_refused,
    jit_error_carries_the_log,
    out_of_memory,
    stream_query_events_and_elapsed_time,
    registered_host_memory,
    futures_on_a_current_thread_runtime_do_not_block_it,
    futures_on_a_multi_thread_runtime,
    concurrent_use_from_several_threads,
);
// The service's simulator clears a sticky fault on reset: no child process needed.
accel_suite!(@faulting forward, accel_common::Faults::InProcess, [],
    out_of_bounds_kernel_is_sticky,
    a_faulting_kernel_fails_its_future,
);
