//! Dynamic parallelism (CUDA's device runtime, CDP2): kernels launching kernels.
//!
//! nvcc compiles `kernel<<<g, b, s, stream>>>(args)` in device code to
//! `__cudaCDP2GetParameterBufferV2(kernel, g, b, s)` (a buffer the arguments are written
//! to) and `__cudaCDP2LaunchDeviceV2(buffer, stream)`; libcudadevrt's PTX defines these
//! over the GPU driver's private system calls, so the simulator answers them itself, as
//! it answers `vprintf` and `malloc` ([`vmgpu_ptx::linked::DEVICE_RUNTIME`] names them
//! for the linker).
//!
//! A launched grid is queued with the launching grid's and runs when that grid ends,
//! its own children right after it (depth first): a grid is complete only when its
//! children are, and grids launched into one stream run in order, so a child that
//! starts after an earlier sibling sees everything that sibling's descendants wrote.
//! This is one of the orders a GPU may take (CDP2 has no device-side wait for a child).

use crate::LaunchConfig;

/// A device-runtime call the simulator answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Call {
    /// `(kernel, grid dim3, block dim3, shared bytes) -> buffer`.
    ParamBuffer,
    /// `(buffer, stream) -> cudaError_t`.
    Launch,
    /// `(cudaStream_t*, flags) -> cudaError_t`.
    StreamCreate,
    /// `(stream) -> cudaError_t`.
    StreamDestroy,
    /// `() -> cudaError_t`, clearing it.
    GetLastError,
    /// `() -> cudaError_t`.
    PeekAtLastError,
    /// `(cudaError_t) -> const char*`.
    ErrorString,
    /// `(cudaError_t) -> const char*`.
    ErrorName,
    /// `(dst, src, bytes, kind, stream) -> cudaError_t`, queued as launches are.
    MemcpyAsync,
    /// `(void**, bytes) -> cudaError_t`, from the device heap.
    Malloc,
    /// `(void*) -> cudaError_t`.
    Free,
    /// `cudaGraphSetConditional(handle, value)`: a conditional handle is the device
    /// address of its 32-bit value (libcuda's graphs read it when the node runs).
    GraphSetConditional,
}

impl Call {
    /// The call a device-runtime function's name is, with its number of arguments and
    /// the size of its result (bytes).
    pub(crate) fn of(name: &str) -> Option<(Call, usize, u8)> {
        if name == "cudaGraphSetConditional" {
            return Some((Call::GraphSetConditional, 2, 0));
        }
        let base = name.strip_suffix("_ptsz").unwrap_or(name);
        // `__cudaCDP2X` (nvcc 12 and later) or the public `cudaX` (libcudadevrt's).
        let call = base
            .strip_prefix("__cudaCDP2")
            .or_else(|| base.strip_prefix("cuda"))?;
        Some(match call {
            "GetParameterBufferV2" => (Call::ParamBuffer, 4, 8),
            "LaunchDeviceV2" => (Call::Launch, 2, 4),
            "StreamCreateWithFlags" => (Call::StreamCreate, 2, 4),
            "StreamDestroy" => (Call::StreamDestroy, 1, 4),
            "GetLastError" => (Call::GetLastError, 0, 4),
            "PeekAtLastError" => (Call::PeekAtLastError, 0, 4),
            "GetErrorString" => (Call::ErrorString, 1, 8),
            "GetErrorName" => (Call::ErrorName, 1, 8),
            "MemcpyAsync" => (Call::MemcpyAsync, 5, 4),
            "Malloc" => (Call::Malloc, 2, 4),
            "Free" => (Call::Free, 1, 4),
            _ => return None,
        })
    }
}

/// `cudaSuccess`.
pub(crate) const SUCCESS: u32 = 0;
/// `cudaErrorMemoryAllocation`.
pub(crate) const MEMORY_ALLOCATION: u32 = 2;
/// `cudaErrorInvalidConfiguration`.
pub(crate) const INVALID_CONFIGURATION: u32 = 9;
/// `cudaErrorLaunchMaxDepthExceeded`.
pub(crate) const LAUNCH_MAX_DEPTH_EXCEEDED: u32 = 65;
/// `cudaErrorInvalidDeviceFunction`.
pub(crate) const INVALID_DEVICE_FUNCTION: u32 = 98;
/// `cudaErrorInvalidResourceHandle`.
pub(crate) const INVALID_RESOURCE_HANDLE: u32 = 400;

/// The name and text of the errors these calls give.
pub(crate) fn error_text(e: u32) -> (&'static str, &'static str) {
    match e {
        SUCCESS => ("cudaSuccess", "no error"),
        MEMORY_ALLOCATION => ("cudaErrorMemoryAllocation", "out of memory"),
        INVALID_CONFIGURATION => (
            "cudaErrorInvalidConfiguration",
            "invalid configuration argument",
        ),
        LAUNCH_MAX_DEPTH_EXCEEDED => (
            "cudaErrorLaunchMaxDepthExceeded",
            "launch would exceed maximum depth of nested launches",
        ),
        INVALID_DEVICE_FUNCTION => ("cudaErrorInvalidDeviceFunction", "invalid device function"),
        INVALID_RESOURCE_HANDLE => ("cudaErrorInvalidResourceHandle", "invalid resource handle"),
        _ => ("cudaErrorUnknown", "unknown error"),
    }
}

/// The deepest nesting of launches from device code (CUDA's limit): a grid this deep
/// launches nothing (`cudaErrorLaunchMaxDepthExceeded`).
pub(crate) const MAX_DEPTH: u32 = 24;

/// What a grid queued to run when it ends, in the order its threads made them.
#[derive(Debug, Clone)]
pub(crate) enum Child {
    /// A grid of `kernel`, its parameters in the device-heap buffer at `params`
    /// (`size` bytes), freed once it has been read.
    Launch {
        kernel: String,
        cfg: LaunchConfig,
        params: u64,
        size: u32,
    },
    /// `bytes` from `src` to `dst`.
    Copy { dst: u64, src: u64, bytes: u64 },
}

/// Whether a device-side launch's geometry is one a GPU takes (else
/// `cudaErrorInvalidConfiguration`).
pub(crate) fn config_ok(cfg: &LaunchConfig, shared_static: u32) -> bool {
    let threads: u64 = cfg.block.iter().map(|&x| x as u64).product();
    (1..=1024).contains(&threads)
        && cfg.grid.iter().all(|&g| g >= 1)
        && cfg.block[2] <= 64
        && cfg.grid[1] <= 65535
        && cfg.grid[2] <= 65535
        && shared_static as u64 + cfg.shared_bytes as u64 <= 228 * 1024
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_name_the_linker_leaves_to_the_device_runtime_is_answered() {
        for name in vmgpu_ptx::linked::DEVICE_RUNTIME {
            let served = matches!(*name, "vprintf" | "__assertfail" | "malloc" | "free")
                || Call::of(name).is_some();
            assert!(served, "{name}");
        }
        assert_eq!(
            Call::of("__cudaCDP2LaunchDeviceV2_ptsz").unwrap().0,
            Call::Launch
        );
        assert!(Call::of("__cudaCDP2StreamWaitEvent").is_none());
        // The public names NVVM IR calls are the same calls.
        for (public, cdp2) in [
            ("cudaGetParameterBufferV2", "__cudaCDP2GetParameterBufferV2"),
            ("cudaLaunchDeviceV2", "__cudaCDP2LaunchDeviceV2"),
            ("cudaMalloc", "__cudaCDP2Malloc"),
            ("cudaMemcpyAsync_ptsz", "__cudaCDP2MemcpyAsync_ptsz"),
        ] {
            assert_eq!(Call::of(public), Call::of(cdp2), "{public}");
            assert!(Call::of(public).is_some());
            assert!(crate::ptx::linked::DEVICE_RUNTIME.contains(&public.trim_end_matches("_ptsz")));
        }
        assert_eq!(
            Call::of("cudaGraphSetConditional"),
            Some((Call::GraphSetConditional, 2, 0))
        );
        assert!(Call::of("cudaStreamWaitEvent").is_none());
    }
}
