//! The library's log on standard error, as `libcuda.so.1`'s: `VMGPU_CUDA_LOG` sets the
//! level (`off`, `warn` (the default), `info`, `debug`).

use std::sync::OnceLock;

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
        Ok("off") => Level::Off,
        Ok("info") => Level::Info,
        Ok("debug") => Level::Debug,
        _ => Level::Warn,
    })
}

fn emit(l: Level, tag: &str, msg: &str) {
    if level() >= l {
        eprintln!("vmgpu libcudart: {tag}: {msg}");
    }
}

/// A warning.
pub fn warn(msg: &str) {
    emit(Level::Warn, "warning", msg);
}

/// A warning about `key`, the first time only.
pub fn warn_once(key: &str, msg: &str) {
    static SEEN: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());
    let mut seen = SEEN.lock().unwrap_or_else(|e| e.into_inner());
    if !seen.iter().any(|k| k == key) {
        seen.push(key.to_string());
        drop(seen);
        warn(msg);
    }
}

/// Debugging detail (a failed call and why).
pub fn debug(msg: &str) {
    emit(Level::Debug, "debug", msg);
}
