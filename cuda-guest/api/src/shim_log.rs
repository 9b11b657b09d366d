//! The log of the C-ABI libraries (`libcuda.so.1`, `libcudart.so.13`) on standard error,
//! written once here: `VMGPU_CUDA_LOG` sets the level (`off`, `warn` (the default),
//! `info`, `debug`), each line names the library.

use std::collections::HashSet;
use std::sync::{Mutex, OnceLock};

/// A level of [`ShimLog`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Level {
    /// Nothing.
    Off,
    /// Unsupported calls (once each) and internal failures.
    Warn,
    /// Also the mode chosen and connections.
    Info,
    /// Also every failing call.
    Debug,
}

/// The level `VMGPU_CUDA_LOG` sets (read once).
pub fn level() -> Level {
    static LEVEL: OnceLock<Level> = OnceLock::new();
    *LEVEL.get_or_init(|| match std::env::var("VMGPU_CUDA_LOG").as_deref() {
        Ok("off") | Ok("0") | Ok("none") => Level::Off,
        Ok("info") => Level::Info,
        Ok("debug") | Ok("trace") | Ok("1") => Level::Debug,
        _ => Level::Warn,
    })
}

/// The log of one library: its lines start `vmgpu <name>: `.
#[derive(Debug, Clone, Copy)]
pub struct ShimLog {
    name: &'static str,
}

impl ShimLog {
    /// The log of library `name` (`libcuda`).
    pub const fn new(name: &'static str) -> ShimLog {
        ShimLog { name }
    }

    /// Writes `msg` at level `l` with `tag`.
    pub fn emit(&self, l: Level, tag: &str, msg: &str) {
        if level() >= l {
            use std::io::Write;
            // Never `eprintln!`: it panics when stderr is closed, and these calls run at
            // the C boundary.
            let _ = writeln!(
                std::io::stderr().lock(),
                "vmgpu {}: {tag}: {msg}",
                self.name
            );
        }
    }

    /// A warning.
    pub fn warn(&self, msg: &str) {
        self.emit(Level::Warn, "warning", msg);
    }

    /// A warning logged once per process for each `key`: for what a program may call in
    /// a loop, such as an unsupported entry point.
    pub fn warn_once(&self, key: &str, msg: &str) {
        static SEEN: Mutex<Option<HashSet<String>>> = Mutex::new(None);
        if level() < Level::Warn {
            return;
        }
        let first = SEEN
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get_or_insert_with(HashSet::new)
            .insert(format!("{}:{key}", self.name));
        if first {
            self.warn(msg);
        }
    }

    /// Information.
    pub fn info(&self, msg: &str) {
        self.emit(Level::Info, "info", msg);
    }

    /// Debugging detail.
    pub fn debug(&self, msg: &str) {
        self.emit(Level::Debug, "debug", msg);
    }

    /// Whether debug messages are shown (to skip formatting them otherwise).
    pub fn debug_enabled(&self) -> bool {
        level() >= Level::Debug
    }
}
