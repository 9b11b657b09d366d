//! The shim's log on standard error. `VMGPU_CUDA_LOG` sets the level: `off`, `warn`
//! (the default: unsupported entry points and attributes, once each, and internal
//! failures), `info` (also the mode chosen at `cuInit` and the connection to the
//! service), `debug` (also every failing call, and the export-table probes of NVRTC and
//! the CUDA runtime). The library's crates (the simulator, the protocol client) log
//! through the `log` crate; [`install`] routes that to the same place, at the same level.

use std::collections::HashSet;
use std::sync::{Mutex, OnceLock};

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Level {
    Off,
    Warn,
    Info,
    Debug,
}

fn level() -> Level {
    static LEVEL: OnceLock<Level> = OnceLock::new();
    *LEVEL.get_or_init(|| match std::env::var("VMGPU_CUDA_LOG").as_deref() {
        Ok("off") | Ok("0") | Ok("none") => Level::Off,
        Ok("info") => Level::Info,
        Ok("debug") | Ok("trace") | Ok("1") => Level::Debug,
        _ => Level::Warn,
    })
}

fn emit(l: Level, tag: &str, msg: &str) {
    if level() >= l {
        use std::io::Write;
        // Never `eprintln!`: it panics when stderr is closed, and these calls run at
        // the C boundary.
        let _ = writeln!(std::io::stderr().lock(), "vmgpu libcuda: {tag}: {msg}");
    }
}

/// A warning.
pub fn warn(msg: &str) {
    emit(Level::Warn, "warning", msg);
}

/// A warning logged once per process for each `key` (later ones with the same key are
/// dropped): for what a program may call in a loop, such as an unsupported entry point
/// or attribute.
pub fn warn_once(key: &str, msg: &str) {
    static SEEN: Mutex<Option<HashSet<String>>> = Mutex::new(None);
    if level() < Level::Warn {
        return;
    }
    let first = crate::fail::lock(&SEEN)
        .get_or_insert_with(HashSet::new)
        .insert(key.to_string());
    if first {
        warn(msg);
    }
}

/// Information.
pub fn info(msg: &str) {
    emit(Level::Info, "info", msg);
}

/// Debugging detail.
pub fn debug(msg: &str) {
    emit(Level::Debug, "debug", msg);
}

/// Whether debug messages are shown (to skip formatting them otherwise).
pub fn debug_enabled() -> bool {
    level() >= Level::Debug
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
