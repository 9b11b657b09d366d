//! The library's log on standard error, as `libcuda.so.1`'s
//! ([`vmgpu_cuda_api::shim_log`]): `VMGPU_CUDA_LOG` sets the level.

use vmgpu_cuda_api::shim_log::ShimLog;

/// This library's log.
const LOG: ShimLog = ShimLog::new("libcudart");

/// A warning.
pub fn warn(msg: &str) {
    LOG.warn(msg);
}

/// A warning about `key`, the first time only.
pub fn warn_once(key: &str, msg: &str) {
    LOG.warn_once(key, msg);
}

/// Debugging detail (a failed call and why).
pub fn debug(msg: &str) {
    LOG.debug(msg);
}

/// An error that ends the program, written whatever the level (`Level::Off` is the
/// lowest, so every level includes it).
pub fn fatal(msg: &str) {
    LOG.emit(vmgpu_cuda_api::shim_log::Level::Off, "error", msg);
}
