//! The shim's log on standard error. `VMGPU_CUDA_LOG` sets the level: `off`, `warn`
//! (the default: unsupported entry points and attributes, once each, and internal
//! failures), `info` (also the mode chosen at `cuInit` and the connection to the
//! service), `debug` (also every failing call, and the export-table probes of NVRTC and
//! the CUDA runtime). The library's crates (the simulator, the protocol client) log
//! through the `log` crate; [`install`] routes that to the same place, at the same level.

use vmgpu_cuda_api::shim_log::{level, Level, ShimLog};

/// This library's log.
const LOG: ShimLog = ShimLog::new("libcuda");

fn emit(l: Level, tag: &str, msg: &str) {
    LOG.emit(l, tag, msg);
}

/// A warning.
pub fn warn(msg: &str) {
    LOG.warn(msg);
}

/// A warning logged once per process for each `key`.
pub fn warn_once(key: &str, msg: &str) {
    LOG.warn_once(key, msg);
}

/// Information.
pub fn info(msg: &str) {
    LOG.info(msg);
}

/// Debugging detail.
pub fn debug(msg: &str) {
    LOG.debug(msg);
}

/// Whether debug messages are shown (to skip formatting them otherwise).
pub fn debug_enabled() -> bool {
    LOG.debug_enabled()
}

/// Routes the `log` crate's records (of the simulator and the protocol client) to this
/// log, at its level.
struct Bridge;

impl log::Log for Bridge {
    fn enabled(&self, m: &log::Metadata<'_>) -> bool {
        level() >= of(m.level())
    }

    fn log(&self, r: &log::Record<'_>) {
        let l = of(r.level());
        let tag = match l {
            Level::Warn => "warning",
            Level::Info => "info",
            _ => "debug",
        };
        emit(l, tag, &format!("{}: {}", r.target(), r.args()));
    }

    fn flush(&self) {}
}

fn of(l: log::Level) -> Level {
    match l {
        log::Level::Error | log::Level::Warn => Level::Warn,
        log::Level::Info => Level::Info,
        log::Level::Debug | log::Level::Trace => Level::Debug,
    }
}

/// Installs the bridge (once; a process that has a logger of its own keeps it).
pub fn install() {
    static BRIDGE: Bridge = Bridge;
    if log::set_logger(&BRIDGE).is_ok() {
        log::set_max_level(match level() {
            Level::Off => log::LevelFilter::Off,
            Level::Warn => log::LevelFilter::Warn,
            Level::Info => log::LevelFilter::Info,
            Level::Debug => log::LevelFilter::Debug,
        });
    }
}
