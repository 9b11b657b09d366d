//! A guest's worker process for the service's process isolation
//! (`Isolation::Process`): serves one guest session on the socket the service gives it
//! as stdin, on the backend named by its argument.
//!
//! `cuda_worker [sim|native|auto]` — the worker (what the service starts);
//! `cuda_worker --mem-info [ORDINAL]` — prints `FREE TOTAL` device memory from a
//! context of its own and exits (a probe that keeps the caller's process free of CUDA
//! contexts).

use cuda_guest::service::{worker, BackendChoice};

fn main() -> std::process::ExitCode {
    let filter = format!("info,{}", cuda_guest::sim::QUIET_DEPENDENCIES);
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or(filter)).init();
    let args: Vec<String> = std::env::args().skip(1).collect();
    let r = match args.first().map(String::as_str) {
        Some("--mem-info") => {
            let ordinal = args.get(1).and_then(|a| a.parse().ok()).unwrap_or(0);
            worker::device_memory(ordinal).map(|(free, total)| println!("{free} {total}"))
        }
        name => BackendChoice::from_name(name.unwrap_or("sim")).and_then(worker::run_stdio),
    };
    match r {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("cuda_worker: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}
