//! `vmgpu cuda serve`: the CUDA service for guests on a Unix socket (also the
//! hybrid-vsock socket of Firecracker or Cloud Hypervisor), until SIGINT or SIGTERM.
//! Declared in `main.rs`; `cuda/mod.rs` calls [`run`] for `vmgpu cuda serve`.

use std::path::PathBuf;

use anyhow::Context as _;
use cuda_guest::service::{self, BackendChoice, Isolation, Quota, Service, ServiceConfig};

/// Options of `vmgpu cuda serve`.
#[derive(Debug, Clone, clap::Args)]
pub struct ServeArgs {
    /// The Unix socket to listen on (a stale socket file there is replaced).
    #[arg(long, value_name = "PATH")]
    pub socket: PathBuf,
    /// The backend: `native` (the NVIDIA driver), `sim` (the PTX simulator) or `auto`.
    #[arg(long, default_value = "auto", env = "VMGPU_CUDA_BACKEND")]
    pub backend: String,
    /// Device memory each guest may allocate, in bytes.
    #[arg(long, default_value_t = 1 << 30)]
    pub memory: u64,
    /// Live objects (allocations, modules, functions, streams, events) per guest.
    #[arg(long, default_value_t = 4096)]
    pub max_objects: u32,
    /// Largest PTX module per guest, in bytes.
    #[arg(long, default_value_t = 16 << 20)]
    pub max_module_bytes: u32,
    /// Host memory the service may hold for each guest's loaded modules (their decoded
    /// kernels on the simulator), in bytes.
    #[arg(long, default_value_t = 256 << 20)]
    pub module_host_memory: u64,
    /// Kernel launches per second per guest (unlimited when absent). Launches over the
    /// rate wait; they do not fail.
    #[arg(long)]
    pub launches_per_sec: Option<u32>,
    /// Launches a guest that was idle may make at once above the rate (default: one
    /// second's worth). A session starts with one, so its first second obeys the rate.
    #[arg(long, requires = "launches_per_sec")]
    pub launch_burst: Option<u32>,
    /// Most guest sessions at once.
    #[arg(long, default_value_t = 64)]
    pub max_sessions: usize,
    /// The host device given to the guests.
    #[arg(long, default_value_t = 0)]
    pub device: u32,
    /// Seconds a new connection may take to send its hello before it is closed. A VMM's
    /// virtio-serial port connects when the VM starts and stays idle until a guest process
    /// opens the port (and again after each session): give those a long timeout.
    #[arg(long, value_name = "SECS", default_value_t = 5)]
    pub handshake_timeout: u64,
    /// Name of the guests in logs (`NAME#n`).
    #[arg(long, default_value = "guest")]
    pub guest_name: String,
    /// Where each guest runs: `process` (a `vmgpu cuda worker` process of its own) or
    /// `in-process`. Default: `process` on the native driver, where a sticky fault
    /// poisons every context of a process; `in-process` on the simulator.
    #[arg(long, value_name = "process|in-process")]
    pub isolation: Option<IsolationArg>,
}

/// Where each guest's session runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum IsolationArg {
    /// A worker process per guest.
    Process,
    /// A thread of the service per guest.
    InProcess,
}

/// Options of the hidden `vmgpu cuda worker` (started by `serve`, never by hand).
#[derive(Debug, Clone, clap::Args)]
pub struct WorkerArgs {
    /// The backend the worker runs its guest on.
    #[arg(long, default_value = "native")]
    pub backend: String,
}

/// One guest's session on the socket given as stdin (see `service::worker`).
pub fn worker(args: &WorkerArgs) -> anyhow::Result<()> {
    let backend = BackendChoice::from_name(&args.backend).context("choosing the CUDA backend")?;
    service::worker::run_stdio(backend).context("serving the guest")?;
    Ok(())
}

/// Runs the service until SIGINT or SIGTERM.
pub fn run(args: &ServeArgs) -> anyhow::Result<()> {
    let backend = BackendChoice::from_name(&args.backend).context("choosing the CUDA backend")?;
    let native = matches!(backend, BackendChoice::Shared(_));
    let process = match args.isolation {
        Some(i) => i == IsolationArg::Process,
        None => native,
    };
    let isolation = if process {
        let worker_backend = if native { "native" } else { "sim" };
        Isolation::this_executable(vec![
            "cuda".into(),
            "worker".into(),
            "--backend".into(),
            worker_backend.into(),
        ])
        .context("finding the worker executable")?
    } else {
        Isolation::InProcess
    };
    log::info!(
        "guests run {}",
        if process {
            "in worker processes of their own"
        } else {
            "in this process"
        }
    );
    let config = ServiceConfig {
        isolation,
        quota: Quota {
            device_memory: args.memory,
            max_objects: args.max_objects,
            max_module_bytes: args.max_module_bytes,
            module_host_memory: args.module_host_memory,
            launches_per_sec: args.launches_per_sec,
            launch_burst: args.launch_burst,
        },
        device: cuda_guest::driver::Device::new(args.device),
        max_sessions: args.max_sessions,
        handshake_timeout: std::time::Duration::from_secs(args.handshake_timeout.max(1)),
        ..ServiceConfig::default()
    };
    let svc = Service::new(backend, config).context("starting the CUDA service")?;
    service::serve_unix_until_signal(svc, &args.socket, &args.guest_name)
        .with_context(|| format!("serving guests on {}", args.socket.display()))?;
    Ok(())
}
