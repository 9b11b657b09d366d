//! What the exported entry points and the driver state share: the failure of a call
//! ([`Fail`], a `CUresult` and why), the lock helper, and the launch geometry as the C
//! ABI gives it.

use std::sync::{Mutex, MutexGuard};
use vmgpu_cuda_api::DriverError;

/// Locks `m`, taking it as it is when a panic on another thread poisoned it (both
/// driver state's locks).
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// A failed call: the `CUresult` to return, what went wrong (logged), and a JIT log for
/// failed module loads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fail {
    /// The `CUresult`.
    pub code: i32,
    /// Why (for the log).
    pub detail: String,
    /// The JIT error log of a module load.
    pub jit_log: Option<String>,
}

impl Fail {
    /// A failure with `code` and a reason.
    pub fn new(code: i32, detail: impl Into<String>) -> Fail {
        Fail {
            code,
            detail: detail.into(),
            jit_log: None,
        }
    }
}

impl From<DriverError> for Fail {
    fn from(e: DriverError) -> Fail {
        let code = e.status().0 as i32;
        let jit_log = e.as_cuda().and_then(|c| c.jit_log.clone());
        Fail {
            code,
            detail: e.to_string(),
            jit_log,
        }
    }
}

/// Results of the driver state.
pub type R<T> = Result<T, Fail>;

/// `CU_STREAM_PER_THREAD`. Stream handles up to it are the default streams: 0 (the
/// null stream), 1 (`CU_STREAM_LEGACY`) and this one.
pub const STREAM_PER_THREAD: u64 = 2;
