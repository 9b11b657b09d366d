//! A runnable CUDA service for guests on a Unix socket (what `vmgpu cuda serve` runs):
//!
//! `cargo run -p cuda-guest --example serve -- SOCKET [sim|native|auto] [MEMORY_BYTES]`
//!
//! Ctrl-C (or SIGTERM) drains the sessions and exits. `RUST_LOG=info` shows a line per
//! guest on connect, quota hit and teardown.

use cuda_guest::service::{serve_unix_until_signal, BackendChoice, Quota, Service, ServiceConfig};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let filter = format!("info,{}", cuda_guest::sim::QUIET_DEPENDENCIES);
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or(filter)).init();
    let mut args = std::env::args().skip(1);
    let path = args
        .next()
        .ok_or("usage: serve SOCKET [sim|native|auto] [MEMORY_BYTES]")?;
    let backend = BackendChoice::from_name(&args.next().unwrap_or_else(|| "auto".into()))?;
    let mut quota = Quota::default();
    if let Some(m) = args.next() {
        quota.device_memory = m.parse()?;
    }
    let service = Service::new(
        backend,
        ServiceConfig {
            quota,
            ..ServiceConfig::default()
        },
    )?;
    serve_unix_until_signal(service, path.as_ref(), "guest")?;
    Ok(())
}
