//! `libcuda.so.1` for guests: the CUDA driver API (the subset real programs use) as a
//! shared library with the driver's soname, so unmodified programs linked with `-lcuda`
//! — and loaders that `dlopen("libcuda.so.1")` and resolve entry points by name or
//! through `cuGetProcAddress` — run on it.
//!
//! # Modes
//!
//! | `VMGPU_CUDA_MODE` | what the calls do |
//! | --- | --- |
//! | `sim` (the default when `VMGPU_CUDA_SERVER` is unset) | run in-process on the PTX simulator ([`vmgpu_cuda_sim::SimBackend`]): no GPU needed |
//! | `forward` (the default when `VMGPU_CUDA_SERVER` is set) | go to a vmgpu CUDA service over the protocol of `docs/protocol.md` |
//!
//! `VMGPU_CUDA_SERVER` names the service: `unix:/path/to/socket`, `vsock:CID:PORT`, or
//! `port:/dev/vport0p1` (a virtio-serial port; any character device or FIFO path
//! works). Forward mode connects at the first call that needs the service, not at
//! `cuInit`, so a process that only loads the library (NVRTC does while it compiles)
//! opens no session. `VMGPU_CUDA_LOG` sets the log level on standard error (`off`,
//! `warn`, `info`, `debug`). The simulator reads `VMGPU_SIM_THREADS` and
//! `VMGPU_SIM_MEMORY`.
//!
//! See the crate's README for the exported entry points and how to build the library.

mod api;
mod engine;
mod ffi;
mod local;
mod log;
mod procaddr;
mod remote;

use engine::{Engine, Fail};

/// Starts the engine the environment asks for.
pub(crate) fn start_engine() -> Result<Box<dyn Engine>, Fail> {
    let server = std::env::var("VMGPU_CUDA_SERVER")
        .ok()
        .filter(|s| !s.is_empty());
    let mode = std::env::var("VMGPU_CUDA_MODE").ok();
    match (mode.as_deref(), server) {
        (Some("sim") | Some("simulator"), _) | (None | Some(""), None) => {
            Ok(Box::new(local::Local::new()?))
        }
        (Some("forward") | Some("remote") | None | Some(""), Some(server)) => {
            remote::engine(&server)
        }
        (Some("forward") | Some("remote"), None) => Err(Fail::new(
            ffi::CUDA_ERROR_NOT_INITIALIZED,
            "VMGPU_CUDA_MODE=forward needs VMGPU_CUDA_SERVER (unix:PATH, vsock:CID:PORT or port:PATH)",
        )),
        (Some(other), _) => Err(Fail::new(
            ffi::CUDA_ERROR_NOT_INITIALIZED,
            format!("VMGPU_CUDA_MODE={other:?}: expected sim or forward"),
        )),
    }
}
