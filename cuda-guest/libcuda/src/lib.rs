//! `libcuda.so.1` for guests: the CUDA driver API (the subset real programs use) as a
//! shared library with the driver's soname, so unmodified programs linked with `-lcuda`
//! — and loaders that `dlopen("libcuda.so.1")` and resolve entry points by name or
//! through `cuGetProcAddress` — run on it.
//!
//! # Modes
//!
//! | `VMGPU_CUDA_MODE` | what the calls do |
//! | --- | --- |
//! | `sim` (the default when `VMGPU_CUDA_SERVER` is unset) | run in-process on the PTX simulator ([`vmgpu_cuda_sim::SimBackend`], through the driver state of `src/driver.rs`): no GPU needed |
//! | `forward` (the default when `VMGPU_CUDA_SERVER` is set) | go to a vmgpu CUDA service over the protocol of `docs/protocol.md` |
//!
//! `VMGPU_CUDA_SERVER` names the service: `unix:/path/to/socket`, `vsock:CID:PORT`, or
//! `port:/dev/vport0p1` (a virtio-serial port; any character device or FIFO path
//! works). Forward mode connects at the first call that needs the service, not at
//! `cuInit`, so a process that only loads the library (NVRTC does while it compiles)
//! opens no session. `VMGPU_CUDA_LOG` sets the log level on standard error (`off`,
//! `warn`, `info`, `debug`). The simulator runs a launch's blocks on every core unless
//! `VMGPU_SIM_THREADS` sets how many threads (1: in order, repeatable to the fault); it
//! reads `VMGPU_SIM_TIMEOUT`, `VMGPU_SIM_MEMORY` and `VMGPU_SIM_DEVICES` too.
//!
//! See the crate's README for the exported entry points and how to build the library.

mod api;
mod capture;
mod driver;
mod fail;
mod ffi;
mod holds;
mod link;
mod log;
mod procaddr;

use std::sync::Arc;

use driver::Driver;
use fail::Fail;
use vmgpu_cuda_proto::client::RemoteBackend;
use vmgpu_cuda_sim::{SimBackend, SimConfig};

/// The simulator's settings from the environment: `VMGPU_SIM_THREADS` (threads per
/// launch; every core without it), `VMGPU_SIM_TIMEOUT` (seconds a launch may run; 0:
/// no limit), `VMGPU_SIM_MEMORY` (each device's memory in bytes) and `VMGPU_SIM_DEVICES`
/// (how many devices, 1 to 16).
fn sim_config_from_env() -> SimConfig {
    // Threads: every core, or VMGPU_SIM_THREADS (SimConfig::default_threads).
    let mut config = SimConfig::default();
    if let Some(m) = std::env::var("VMGPU_SIM_MEMORY")
        .ok()
        .and_then(|v| v.parse::<u64>().ok())
    {
        config.memory_limit = m;
    }
    // Seconds a launch may run (0: no limit), for programs slower on the simulator
    // than its default minute allows.
    if let Ok(v) = std::env::var("VMGPU_SIM_TIMEOUT") {
        match v.trim().parse::<f64>() {
            Ok(s) if s.is_finite() && s >= 0.0 => {
                config.time_limit =
                    (s > 0.0).then(|| std::time::Duration::from_secs_f64(s.min(1e9)))
            }
            _ => crate::log::warn(&format!(
                "VMGPU_SIM_TIMEOUT={v:?} is not a number of seconds (0 for none): the launch limit stays {:?}",
                config.time_limit
            )),
        }
    }
    if let Some(n) = std::env::var("VMGPU_SIM_DEVICES")
        .ok()
        .and_then(|v| v.parse::<u32>().ok())
    {
        config.devices = n.clamp(1, vmgpu_cuda_sim::backend::SIM_MAX_DEVICES);
    }
    config.output = c_stdio();
    config
}

/// A kernel's `printf` and assertion lines, written where the C program's own output
/// goes and after it: C's buffered streams are flushed first, then the bytes go to
/// file descriptor 1 or 2 (as NVIDIA's driver prints a kernel's output in order with
/// the program's).
fn c_stdio() -> vmgpu_cuda_sim::Output {
    vmgpu_cuda_sim::Output(Arc::new(|stream, bytes| {
        let fd = match stream {
            vmgpu_cuda_sim::OutputStream::Stdout => 1,
            vmgpu_cuda_sim::OutputStream::Stderr => 2,
        };
        // SAFETY: fflush(NULL) flushes every C output stream; no pointer is passed.
        unsafe { libc::fflush(std::ptr::null_mut()) };
        let mut rest = bytes;
        while !rest.is_empty() {
            // SAFETY: `rest` is a live slice: write reads at most `rest.len()` bytes of it.
            let n = unsafe { libc::write(fd, rest.as_ptr().cast(), rest.len()) };
            if n <= 0 {
                // A closed or failing stream: the kernel's result stands, as on a GPU.
                break;
            }
            rest = &rest[n as usize..];
        }
    }))
}

/// The driver over the backend the environment asks for: the simulator in this process,
/// or the vmgpu CUDA service (connected at the first call that needs it).
pub(crate) fn start_driver() -> Result<Driver, Fail> {
    log::install();
    let server = std::env::var("VMGPU_CUDA_SERVER")
        .ok()
        .filter(|s| !s.is_empty());
    let mode = std::env::var("VMGPU_CUDA_MODE").ok();
    match (mode.as_deref(), server) {
        (Some("sim") | Some("simulator"), _) | (None | Some(""), None) => {
            let config = sim_config_from_env();
            let describe = format!(
                "in-process PTX simulator ({} thread(s) per launch, {} bytes of device memory)",
                config.threads, config.memory_limit
            );
            let backend = SimBackend::new(config)?;
            Ok(Driver::new(Arc::new(backend), describe, None))
        }
        (Some("forward") | Some("remote") | None | Some(""), Some(server)) => {
            let remote = Arc::new(RemoteBackend::new(&server)?);
            let describe = format!(
                "forwarding to the vmgpu CUDA service at {server} (connecting at the first call that needs it)"
            );
            let on_init = {
                let remote = remote.clone();
                Box::new(move |flags| remote.set_init_flags(flags)) as driver::OnInit
            };
            Ok(Driver::new(remote, describe, Some(on_init)))
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
