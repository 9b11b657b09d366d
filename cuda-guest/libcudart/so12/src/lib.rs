//! `libcudart.so.12`: [`vmgpu_libcudart_core`]'s runtime (every entry point whose ABI CUDA 12
//! and 13 share, exported from this library as from an upstream crate) with the soname
//! and symbol version `libcudart.so.12` (`../build.rs`, `libcudart.map`) and the entry points whose
//! prototype or struct is CUDA 12's: each converts to CUDA 13's form and calls the shared
//! implementation. `../abi-diff.py` lists the differences between the 12.9 and 13.0
//! headers.

use std::ffi::{c_int, c_uint, c_void};

use vmgpu_libcudart_core::driver::{Handle, MemLocation};
use vmgpu_libcudart_core::errors::CudaError;
use vmgpu_libcudart_core::legacy::*;
use vmgpu_libcudart_core::props::DeviceProp12;
use vmgpu_libcudart_core::{
    device_location, get_device_properties, get_driver_entry_point, graph_add_dependencies,
    graph_node_edges, mem_advise, mem_prefetch_async, per_thread, runtime_get_version,
};

/// The CUDA version this library implements (12.9, the headers its entry points follow).
pub const RUNTIME_VERSION: c_int = 12090;

/// `cudaRuntimeGetVersion`: 12.9.
///
/// # Safety
/// `v` is null or the program's int.
#[no_mangle]
pub unsafe extern "C" fn cudaRuntimeGetVersion(v: *mut c_int) -> CudaError {
    // SAFETY: the caller's int.
    unsafe { runtime_get_version(v, RUNTIME_VERSION) }
}

/// `cudaGetDriverEntryPoint`: the driver's entry point `symbol` as this runtime's CUDA
/// version would have it.
///
/// # Safety
/// The arguments are the program's, as `cuda_runtime_api.h` describes them.
#[no_mangle]
pub unsafe extern "C" fn cudaGetDriverEntryPoint(
    symbol: *const std::ffi::c_char,
    p: *mut *mut c_void,
    flags: u64,
    status: *mut c_int,
) -> CudaError {
    // SAFETY: the caller's arguments.
    unsafe {
        get_driver_entry_point(
            "cudaGetDriverEntryPoint",
            symbol,
            p,
            RUNTIME_VERSION,
            flags,
            status,
        )
    }
}

/// `cudaGetDeviceProperties_v2`, what CUDA 12's header calls `cudaGetDeviceProperties`
/// (12's `struct cudaDeviceProp`, 1,032 bytes).
///
/// # Safety
/// `prop` is null or the program's `struct cudaDeviceProp` of CUDA 12.
#[no_mangle]
pub unsafe extern "C" fn cudaGetDeviceProperties_v2(
    prop: *mut DeviceProp12,
    d: c_int,
) -> CudaError {
    // SAFETY: the caller's struct.
    unsafe { get_device_properties("cudaGetDeviceProperties_v2", prop, d) }
}

/// `cudaGetDeviceProperties`, the name no CUDA 12 header declares (NVIDIA's library keeps
/// it for callers that look it up by name): 12's struct too.
///
/// # Safety
/// As `cudaGetDeviceProperties_v2`.
#[no_mangle]
pub unsafe extern "C" fn cudaGetDeviceProperties(prop: *mut DeviceProp12, d: c_int) -> CudaError {
    // SAFETY: the caller's struct.
    unsafe { get_device_properties("cudaGetDeviceProperties", prop, d) }
}

/// `cudaMemPrefetchAsync` (CUDA 12: a device number, `cudaCpuDeviceId` for the host).
///
/// # Safety
/// The arguments are what `cuda_runtime_api.h` 12 describes.
#[no_mangle]
pub unsafe extern "C" fn cudaMemPrefetchAsync(
    p: *const c_void,
    n: usize,
    device: c_int,
    s: Handle,
) -> CudaError {
    let at = device_location(device);
    // SAFETY: the caller's arguments.
    unsafe { mem_prefetch_async("cudaMemPrefetchAsync", p, n, at, 0, s) }
}

/// `cudaMemPrefetchAsync_ptsz` (CUDA 12's form) on the per-thread default stream.
///
/// # Safety
/// As `cudaMemPrefetchAsync`.
#[no_mangle]
pub unsafe extern "C" fn cudaMemPrefetchAsync_ptsz(
    p: *const c_void,
    n: usize,
    device: c_int,
    s: Handle,
) -> CudaError {
    let (at, s) = (device_location(device), per_thread(s));
    // SAFETY: the caller's arguments.
    unsafe { mem_prefetch_async("cudaMemPrefetchAsync_ptsz", p, n, at, 0, s) }
}

/// `cudaMemPrefetchAsync_v2` (CUDA 13's `cudaMemPrefetchAsync`).
///
/// # Safety
/// The arguments are what `cuda_runtime_api.h` 12 describes.
#[no_mangle]
pub unsafe extern "C" fn cudaMemPrefetchAsync_v2(
    p: *const c_void,
    n: usize,
    location: MemLocation,
    flags: c_uint,
    s: Handle,
) -> CudaError {
    // SAFETY: the caller's arguments.
    unsafe { mem_prefetch_async("cudaMemPrefetchAsync_v2", p, n, location, flags, s) }
}

/// `cudaMemPrefetchAsync_v2_ptsz`.
///
/// # Safety
/// As `cudaMemPrefetchAsync_v2`.
#[no_mangle]
pub unsafe extern "C" fn cudaMemPrefetchAsync_v2_ptsz(
    p: *const c_void,
    n: usize,
    location: MemLocation,
    flags: c_uint,
    s: Handle,
) -> CudaError {
    let s = per_thread(s);
    // SAFETY: the caller's arguments.
    unsafe { mem_prefetch_async("cudaMemPrefetchAsync_v2_ptsz", p, n, location, flags, s) }
}

/// `cudaMemAdvise` (CUDA 12: a device number, `cudaCpuDeviceId` for the host).
///
/// # Safety
/// The arguments are what `cuda_runtime_api.h` 12 describes.
#[no_mangle]
pub unsafe extern "C" fn cudaMemAdvise(
    p: *const c_void,
    n: usize,
    advice: c_int,
    device: c_int,
) -> CudaError {
    let at = device_location(device);
    // SAFETY: the caller's arguments.
    unsafe { mem_advise("cudaMemAdvise", p, n, advice, at) }
}

/// `cudaMemAdvise_v2` (CUDA 13's `cudaMemAdvise`).
///
/// # Safety
/// The arguments are what `cuda_runtime_api.h` 12 describes.
#[no_mangle]
pub unsafe extern "C" fn cudaMemAdvise_v2(
    p: *const c_void,
    n: usize,
    advice: c_int,
    location: MemLocation,
) -> CudaError {
    // SAFETY: the caller's arguments.
    unsafe { mem_advise("cudaMemAdvise_v2", p, n, advice, location) }
}

/// Names CUDA 13 removed, each another name of an entry point both versions have.
macro_rules! aliases {
    ($($name:ident => $base:ident($($arg:ident: $ty:ty),*);)*) => {$(
        #[doc = concat!("`", stringify!($name), "`: `", stringify!($base), "`.")]
        ///
        /// # Safety
        #[doc = concat!("As `", stringify!($base), "`.")]
        #[no_mangle]
        pub unsafe extern "C" fn $name($($arg: $ty),*) -> CudaError {
            // SAFETY: the caller's arguments, as the base entry point takes them.
            unsafe { $base($($arg),*) }
        }
    )*};
}

aliases! {
    cudaEventElapsedTime_v2 => cudaEventElapsedTime(ms: *mut f32, a: Handle, b: Handle);
    cudaThreadSynchronize => cudaDeviceSynchronize();
    cudaThreadExit => cudaDeviceReset();
    cudaThreadGetLimit => cudaDeviceGetLimit(v: *mut usize, limit: c_int);
    cudaThreadSetLimit => cudaDeviceSetLimit(limit: c_int, v: usize);
    cudaThreadSetCacheConfig => cudaDeviceSetCacheConfig(config: c_int);
}

/// `cudaGraphAddDependencies` (CUDA 12: no edge data).
///
/// # Safety
/// `from` and `to` are null or `n` node handles each.
#[no_mangle]
pub unsafe extern "C" fn cudaGraphAddDependencies(
    g: Handle,
    from: *const Handle,
    to: *const Handle,
    n: usize,
) -> CudaError {
    // SAFETY: the caller's arrays.
    unsafe { graph_add_dependencies("cudaGraphAddDependencies", g, from, to, std::ptr::null(), n) }
}

/// `cudaGraphAddDependencies_v2` (CUDA 13's form: edge data, which must be the default).
///
/// # Safety
/// As `cudaGraphAddDependencies`; `edges` is null or `n` edge data.
#[no_mangle]
pub unsafe extern "C" fn cudaGraphAddDependencies_v2(
    g: Handle,
    from: *const Handle,
    to: *const Handle,
    edges: *const u64,
    n: usize,
) -> CudaError {
    // SAFETY: the caller's arrays.
    unsafe { graph_add_dependencies("cudaGraphAddDependencies_v2", g, from, to, edges, n) }
}

macro_rules! node_edges {
    ($( $name:ident, $dependents:expr; )*) => {$(
        #[doc = concat!("`", stringify!($name), "` (CUDA 12: no edge data).")]
        ///
        /// # Safety
        /// `count` is null or a `size_t`; `nodes` is null or holds `*count` entries.
        #[no_mangle]
        pub unsafe extern "C" fn $name(node: Handle, nodes: *mut Handle, count: *mut usize) -> CudaError {
            // SAFETY: the caller's arrays.
            unsafe { graph_node_edges(stringify!($name), node, $dependents, nodes, std::ptr::null_mut(), count) }
        }
    )*};
    ($( v2 $name:ident, $dependents:expr; )*) => {$(
        #[doc = concat!("`", stringify!($name), "` (CUDA 13's form: edge data, all default).")]
        ///
        /// # Safety
        /// `count` is null or a `size_t`; `nodes` and `edges` are null or hold `*count` entries.
        #[no_mangle]
        pub unsafe extern "C" fn $name(node: Handle, nodes: *mut Handle, edges: *mut u64, count: *mut usize) -> CudaError {
            // SAFETY: the caller's arrays.
            unsafe { graph_node_edges(stringify!($name), node, $dependents, nodes, edges, count) }
        }
    )*};
}

node_edges! {
    cudaGraphNodeGetDependencies, false;
    cudaGraphNodeGetDependentNodes, true;
}
node_edges! {
    v2 cudaGraphNodeGetDependencies_v2, false;
    v2 cudaGraphNodeGetDependentNodes_v2, true;
}

// Generated by ../gen-unsupported.sh (NVIDIA's libcudart.so.12 against this library).
vmgpu_libcudart_core::unsupported! {
    cudaGraphAddNode,
    cudaGraphAddNode_v2,
    cudaGraphGetEdges_v2,
    cudaGraphRemoveDependencies_v2,
    cudaLaunchCooperativeKernelMultiDevice,
    cudaSetDoubleForDevice,
    cudaSetDoubleForHost,
    cudaSignalExternalSemaphoresAsync_v2,
    cudaSignalExternalSemaphoresAsync_v2_ptsz,
    cudaStreamGetCaptureInfo,
    cudaStreamGetCaptureInfo_ptsz,
    cudaStreamGetCaptureInfo_v2,
    cudaStreamGetCaptureInfo_v2_ptsz,
    cudaStreamGetCaptureInfo_v3,
    cudaStreamGetCaptureInfo_v3_ptsz,
    cudaStreamUpdateCaptureDependencies,
    cudaStreamUpdateCaptureDependencies_ptsz,
    cudaStreamUpdateCaptureDependencies_v2,
    cudaStreamUpdateCaptureDependencies_v2_ptsz,
    cudaThreadGetCacheConfig,
    cudaWaitExternalSemaphoresAsync_v2,
    cudaWaitExternalSemaphoresAsync_v2_ptsz,
}
