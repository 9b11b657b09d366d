//! `libcudart.so.13`: [`vmgpu_libcudart_core`]'s runtime (every entry point whose ABI
//! CUDA 12 and 13 share, exported from this library as from an upstream crate) with the
//! soname and symbol version `libcudart.so.13` (`build.rs`, `libcudart.map`) and the
//! entry points whose prototype or struct is CUDA 13's.

use std::ffi::{c_int, c_uint, c_void};

use vmgpu_libcudart_core::driver::{Handle, MemLocation};
use vmgpu_libcudart_core::errors::CudaError;
use vmgpu_libcudart_core::props::DeviceProp13;
use vmgpu_libcudart_core::{
    get_device_properties, get_driver_entry_point, graph_add_dependencies, graph_add_node,
    graph_node_edges, mem_advise, mem_prefetch_async, per_thread, runtime_get_version,
    stream_get_capture_info, stream_update_capture_dependencies, GraphNodeParams,
};

/// The CUDA version this library implements (13.0).
pub const RUNTIME_VERSION: c_int = 13000;

/// `cudaRuntimeGetVersion`: 13.0.
///
/// # Safety
/// `v` is null or the program's int.
#[no_mangle]
pub unsafe extern "C" fn cudaRuntimeGetVersion(v: *mut c_int) -> CudaError {
    // SAFETY: the caller's int.
    unsafe { runtime_get_version(v, RUNTIME_VERSION) }
}

macro_rules! node_edges {
    ($( $name:ident, $dependents:expr; )*) => {$(
        #[doc = concat!("`", stringify!($name), "` (CUDA 13: with edge data, all default).")]
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

/// `cudaGetDeviceProperties` (CUDA 13's `struct cudaDeviceProp`).
///
/// # Safety
/// `prop` is null or the program's `struct cudaDeviceProp`.
#[no_mangle]
pub unsafe extern "C" fn cudaGetDeviceProperties(prop: *mut DeviceProp13, d: c_int) -> CudaError {
    // SAFETY: the caller's struct.
    unsafe { get_device_properties("cudaGetDeviceProperties", prop, d) }
}

/// `cudaMemPrefetchAsync` (CUDA 13: a `cudaMemLocation`).
///
/// # Safety
/// The arguments are what `cuda_runtime_api.h` 13 describes.
#[no_mangle]
pub unsafe extern "C" fn cudaMemPrefetchAsync(
    p: *const c_void,
    n: usize,
    location: MemLocation,
    flags: c_uint,
    s: Handle,
) -> CudaError {
    // SAFETY: the caller's arguments.
    unsafe { mem_prefetch_async("cudaMemPrefetchAsync", p, n, location, flags, s) }
}

/// `cudaMemPrefetchAsync_ptsz`: on the per-thread default stream.
///
/// # Safety
/// As `cudaMemPrefetchAsync`.
#[no_mangle]
pub unsafe extern "C" fn cudaMemPrefetchAsync_ptsz(
    p: *const c_void,
    n: usize,
    location: MemLocation,
    flags: c_uint,
    s: Handle,
) -> CudaError {
    // SAFETY: the caller's arguments.
    unsafe {
        mem_prefetch_async(
            "cudaMemPrefetchAsync_ptsz",
            p,
            n,
            location,
            flags,
            per_thread(s),
        )
    }
}

/// `cudaMemAdvise` (CUDA 13: a `cudaMemLocation`).
///
/// # Safety
/// The arguments are what `cuda_runtime_api.h` 13 describes.
#[no_mangle]
pub unsafe extern "C" fn cudaMemAdvise(
    p: *const c_void,
    n: usize,
    advice: c_int,
    location: MemLocation,
) -> CudaError {
    // SAFETY: the caller's arguments.
    unsafe { mem_advise("cudaMemAdvise", p, n, advice, location) }
}

/// `cudaGraphAddDependencies` (CUDA 13: edge data, which must be the default).
///
/// # Safety
/// `from` and `to` are null or `n` node handles each; `edges` is null or `n` edge data.
#[no_mangle]
pub unsafe extern "C" fn cudaGraphAddDependencies(
    g: Handle,
    from: *const Handle,
    to: *const Handle,
    edges: *const u64,
    n: usize,
) -> CudaError {
    // SAFETY: the caller's arrays.
    unsafe { graph_add_dependencies("cudaGraphAddDependencies", g, from, to, edges, n) }
}

/// `cudaGraphAddNode` (CUDA 13: edge data, which must be the default).
///
/// # Safety
/// As `cuda_runtime_api.h` 13 describes.
#[no_mangle]
pub unsafe extern "C" fn cudaGraphAddNode(
    node: *mut Handle,
    g: Handle,
    deps: *const Handle,
    edges: *const c_void,
    n: usize,
    p: *mut GraphNodeParams,
) -> CudaError {
    // SAFETY: the caller's arguments.
    unsafe { graph_add_node("cudaGraphAddNode", node, g, deps, edges, n, p) }
}

/// The `cudaStreamGetCaptureInfo` exports (CUDA 13: the graph, dependencies and edge
/// data): the legacy default stream's and the per-thread one's.
macro_rules! capture_info {
    ($( $name:ident, $stream:expr; )*) => {$(
        #[doc = concat!("`", stringify!($name), "` (CUDA 13's form).")]
        ///
        /// # Safety
        /// Each pointer is null or writable for its type.
        #[no_mangle]
        pub unsafe extern "C" fn $name(
            s: Handle,
            status: *mut c_int,
            id: *mut u64,
            g: *mut Handle,
            deps: *mut *const Handle,
            edges: *mut *const c_void,
            n: *mut usize,
        ) -> CudaError {
            // SAFETY: the caller's arguments.
            unsafe { stream_get_capture_info(stringify!($name), $stream(s), status, id, g, deps, edges, n) }
        }
    )*};
}

capture_info! {
    cudaStreamGetCaptureInfo, std::convert::identity;
    cudaStreamGetCaptureInfo_ptsz, per_thread;
}

/// The `cudaStreamUpdateCaptureDependencies` exports (CUDA 13: edge data).
macro_rules! update_capture_deps {
    ($( $name:ident, $stream:expr; )*) => {$(
        #[doc = concat!("`", stringify!($name), "` (CUDA 13's form).")]
        ///
        /// # Safety
        /// `deps` is null or `n` node handles; `edges` null or `n` edge data.
        #[no_mangle]
        pub unsafe extern "C" fn $name(
            s: Handle,
            deps: *const Handle,
            edges: *const c_void,
            n: usize,
            flags: c_uint,
        ) -> CudaError {
            // SAFETY: the caller's arguments.
            unsafe { stream_update_capture_dependencies(stringify!($name), $stream(s), deps, edges, n, flags) }
        }
    )*};
}

update_capture_deps! {
    cudaStreamUpdateCaptureDependencies, std::convert::identity;
    cudaStreamUpdateCaptureDependencies_ptsz, per_thread;
}
