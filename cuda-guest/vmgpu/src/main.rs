//! `vmgpu`: inspect the host's GPUs and IOMMU, and prepare devices for VMs.

// The doc comments of the clap types are the command's help text, written for a terminal
// (`--grid X[,Y,Z]`), not rustdoc links.
#![allow(rustdoc::broken_intra_doc_links)]

/// Appends a line to an [`Out`].
macro_rules! outln {
    ($out:expr) => {
        $out.push('\n')
    };
    ($out:expr, $($arg:tt)*) => {{
        $out.push_str(&format!($($arg)*));
        $out.push('\n');
    }};
}

mod bind;
mod check;
mod cuda;
mod cuda_serve;
mod list;
mod show;

use std::io::{self, Write};
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};
use pcie::{Host, PciAddress};

#[derive(Parser)]
#[command(
    name = "vmgpu",
    version,
    about = "Give virtual machines GPUs: inspect, check and bind PCI devices"
)]
struct Cli {
    #[command(flatten)]
    host: HostArgs,
    #[command(subcommand)]
    command: Command,
}

#[derive(Args)]
struct HostArgs {
    /// Root of the sysfs tree to read (a fixture tree in tests).
    #[arg(long, global = true, env = "VMGPU_SYSFS", value_name = "DIR")]
    sysfs: Option<PathBuf>,
    /// Kernel modules directory searched for vfio-pci [default: /lib/modules/$(uname -r) with /sys]
    #[arg(long, global = true, env = "VMGPU_MODULES", value_name = "DIR")]
    modules: Option<PathBuf>,
}

impl HostArgs {
    fn host(&self) -> Host {
        let host = match &self.sysfs {
            Some(root) => Host::new(root),
            None => Host::local(),
        };
        match &self.modules {
            Some(dir) => host.with_modules_dir(dir),
            None => host,
        }
    }
}

#[derive(Subcommand)]
enum Command {
    /// List NVIDIA PCI functions (all functions with --all)
    List(list::ListArgs),
    /// Show everything known about one device
    Show(show::ShowArgs),
    /// Tell whether a device can be assigned to a VM (exit 0: yes, 1: no, 2: usage error)
    Check(check::CheckArgs),
    /// Bind a device and the rest of its IOMMU group to vfio-pci
    Bind(bind::BindArgs),
    /// Give the functions bound by `bind` back to their original drivers (the last
    /// unbind unloads the vfio-pci a bind loaded)
    Unbind(bind::UnbindArgs),
    /// The CUDA accelerator: devices, running a PTX kernel, benchmarks (native driver
    /// or simulator)
    Cuda(cuda::CudaArgs),
}

/// Exit status for bad invocations, the same that clap uses.
const EXIT_USAGE: u8 = 2;

/// What a command prints on stdout. Commands write here and `main` prints it at
/// the end, so a reader that goes away (`vmgpu list | head -n1`) costs nothing but
/// the output: the command's work and exit status stand.
pub type Out = String;

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            // Help and version go to stdout, errors to stderr; neither may panic on
            // a closed pipe.
            let _ = e.print();
            return if e.use_stderr() {
                ExitCode::from(EXIT_USAGE)
            } else {
                ExitCode::SUCCESS
            };
        }
    };
    // `cuda serve` logs each guest's connect, quota hits and teardown (info) by default.
    let default_log = if cuda::is_serve(&cli.command) {
        "info"
    } else {
        "warn"
    };
    let default_log = format!("{default_log},{}", cuda_guest::sim::QUIET_DEPENDENCIES);
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or(default_log)).init();
    let host = cli.host.host();
    let mut out = Out::new();
    // A wrong --sysfs is named as such, for every command. Only a plain `list` on
    // the default /sys goes on without a PCI bus: it shows the demo host.
    let plain_list = matches!(&cli.command, Command::List(a) if !a.all) && cli.host.sysfs.is_none();
    // `cuda` reads no sysfs.
    let cuda = matches!(&cli.command, Command::Cuda(_));
    let verified = if plain_list || cuda {
        Ok(())
    } else {
        host.verify()
    };
    let result = verified
        .map_err(anyhow::Error::from)
        .and_then(|()| match &cli.command {
            Command::List(args) => list::run(&host, cli.host.sysfs.is_some(), args, &mut out),
            Command::Show(args) => show::run(&host, args, &mut out),
            Command::Check(args) => check::run(&host, args, &mut out),
            Command::Bind(args) => bind::run_bind(&host, args, &mut out),
            Command::Unbind(args) => bind::run_unbind(&host, args, &mut out),
            Command::Cuda(args) => cuda::run(args, &mut out),
        });
    let code = match result {
        Ok(code) => code,
        Err(err) => {
            // `{:#}` prints the chain once: each message, then its source's.
            let _ = writeln!(io::stderr(), "vmgpu: error: {err:#}");
            let not_found = |e: &pcie::Error| matches!(e, pcie::Error::DeviceNotFound { .. });
            let usage = err.downcast_ref::<cuda::UsageError>().is_some()
                || err.downcast_ref::<pcie::Error>().is_some_and(not_found)
                || matches!(
                    err.downcast_ref::<pcie::bind::BindError>(),
                    Some(pcie::bind::BindError::Sysfs(e)) if not_found(e)
                );
            if usage {
                ExitCode::from(EXIT_USAGE)
            } else {
                ExitCode::FAILURE
            }
        }
    };
    let mut stdout = io::stdout().lock();
    match stdout
        .write_all(out.as_bytes())
        .and_then(|()| stdout.flush())
    {
        Ok(()) => code,
        // The reader went away: end quietly, like lspci.
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => code,
        Err(e) => {
            let _ = writeln!(io::stderr(), "vmgpu: error: writing the output: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Parses a BDF argument, so a typo is a usage error with clap's exit status.
fn parse_address(s: &str) -> Result<PciAddress, String> {
    s.parse::<PciAddress>().map_err(|e| e.to_string())
}

/// Appends a value as pretty JSON.
fn print_json<T: serde::Serialize>(out: &mut Out, value: &T) -> anyhow::Result<()> {
    outln!(out, "{}", serde_json::to_string_pretty(value)?);
    Ok(())
}
