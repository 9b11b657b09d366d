//! `vmgpu cuda`: the CUDA accelerator from the command line, on the native driver or
//! on the PTX simulator (`--backend`, `VMGPU_CUDA_BACKEND`).

mod args;
mod bench;
mod devices;
mod run;

use std::fmt;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Subcommand};
use cuda_guest::accel::{Accelerator, Choice, BACKEND_ENV};
use cuda_guest::sim::SimConfig;
use serde::Serialize;

use crate::Out;

#[derive(Args)]
pub struct CudaArgs {
    #[command(subcommand)]
    command: CudaCommand,
}

#[derive(Subcommand)]
enum CudaCommand {
    /// Every CUDA device of the chosen backend with its properties
    Devices(devices::DevicesArgs),
    /// Load a PTX (or CUDA C++) module and launch one kernel with typed arguments (exit 0: ok,
    /// 1: the module, the launch or the kernel failed, 2: usage)
    Run(run::RunArgs),
    /// Benchmark the backend against plain baselines measured in the same run
    Bench(bench::BenchArgs),
    /// Serve guests' CUDA driver calls (their libcuda.so.1 in forward mode) on a Unix
    /// socket (also hybrid vsock) until SIGINT or SIGTERM, one session per connection
    Serve(crate::cuda_serve::ServeArgs),
    /// One guest's session on the socket given as stdin; `cuda serve` starts one per guest
    /// on the native driver, so that a sticky fault ends only that guest's process
    #[command(hide = true)]
    Worker(crate::cuda_serve::WorkerArgs),
}

/// Whether this is `cuda serve` (which logs per-guest lines at info level by default).
pub fn is_serve(command: &crate::Command) -> bool {
    matches!(
        command,
        crate::Command::Cuda(CudaArgs {
            command: CudaCommand::Serve(_) | CudaCommand::Worker(_)
        })
    )
}

/// `--backend`, shared by every `cuda` command.
#[derive(Args, Clone, Copy)]
pub struct BackendArgs {
    /// Backend: auto (the native driver when it loads and reports a device, else the
    /// simulator), native, or sim [default: $VMGPU_CUDA_BACKEND, else auto]
    #[arg(long, value_name = "auto|native|sim", value_parser = parse_choice)]
    backend: Option<Choice>,
}

fn parse_choice(s: &str) -> Result<Choice, String> {
    s.parse::<Choice>().map_err(|e| e.to_string())
}

/// A mistake in the command line or in what it names (exit status 2).
#[derive(Debug)]
pub struct UsageError(pub String);

impl fmt::Display for UsageError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for UsageError {}

/// An error that is the command line's fault.
pub fn usage(msg: impl Into<String>) -> anyhow::Error {
    anyhow::Error::new(UsageError(msg.into()))
}

/// The backend chosen and why, as every `cuda` command prints it.
#[derive(Serialize, Clone)]
pub struct BackendInfo {
    /// `native` or `sim`.
    kind: &'static str,
    /// `auto`, `native` or `sim`.
    requested: String,
    /// `--backend`, `VMGPU_CUDA_BACKEND` or `default`.
    source: &'static str,
    /// Why this backend, in words.
    reason: String,
    /// The CUDA version the backend reports (`cuDriverGetVersion`).
    driver_version: Option<i32>,
}

impl BackendInfo {
    fn line(&self) -> String {
        format!(
            "backend: {} (requested {} by {}): {}",
            self.kind, self.requested, self.source, self.reason
        )
    }
}

/// Chooses the backend as `--backend`, else `VMGPU_CUDA_BACKEND`, else auto says.
pub fn accelerator(
    args: &BackendArgs,
    sim_config: SimConfig,
) -> anyhow::Result<(Accelerator, BackendInfo)> {
    let (choice, source) = match args.backend {
        Some(c) => (c, "--backend"),
        None => match std::env::var(BACKEND_ENV) {
            Ok(v) => match v.parse::<Choice>() {
                Ok(c) => (c, BACKEND_ENV),
                Err(_) => {
                    return Err(usage(format!(
                        "{BACKEND_ENV}={v:?} is not a backend (expected auto, native or sim)"
                    )))
                }
            },
            Err(_) => (Choice::Auto, "default"),
        },
    };
    let acc = Accelerator::builder()
        .backend(choice)
        .sim_config(sim_config)
        .build()
        .map_err(|e| anyhow::Error::new(e).context("choosing the CUDA backend"))?;
    let sel = acc.selection();
    let info = BackendInfo {
        kind: acc.kind().name(),
        requested: choice.to_string(),
        source,
        reason: sel.reason.clone(),
        driver_version: acc.backend().driver_version().ok(),
    };
    log::info!("{}", info.line());
    Ok((acc, info))
}

/// The simulator's settings for a command: `threads` host threads (by default every
/// core, or `VMGPU_SIM_THREADS`), launches stopped after `time_limit`.
pub fn sim_config(threads: Option<usize>, time_limit: Option<Duration>) -> SimConfig {
    let mut config = SimConfig {
        time_limit,
        ..SimConfig::default()
    };
    if let Some(t) = threads {
        config.threads = t.max(1);
    }
    config
}

pub fn run(args: &CudaArgs, out: &mut Out) -> anyhow::Result<ExitCode> {
    match &args.command {
        CudaCommand::Devices(a) => devices::run(a, out),
        CudaCommand::Run(a) => run::run(a, out),
        CudaCommand::Bench(a) => bench::run(a, out),
        CudaCommand::Serve(a) => crate::cuda_serve::run(a).map(|()| ExitCode::SUCCESS),
        CudaCommand::Worker(a) => crate::cuda_serve::worker(a).map(|()| ExitCode::SUCCESS),
    }
}

/// Bytes for people: exact units where they divide, else one decimal of MiB.
pub fn human_bytes(b: u64) -> String {
    if b >= 1 << 30 && b.is_multiple_of(1 << 30) {
        format!("{} GiB", b >> 30)
    } else if b >= 1 << 20 && b.is_multiple_of(1 << 20) {
        format!("{} MiB", b >> 20)
    } else if b >= 1 << 20 {
        format!("{:.1} MiB", b as f64 / (1 << 20) as f64)
    } else if b >= 1 << 10 && b.is_multiple_of(1 << 10) {
        format!("{} KiB", b >> 10)
    } else {
        format!("{b} bytes")
    }
}
