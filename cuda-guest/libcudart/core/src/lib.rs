//! The CUDA runtime API for guests and machines without a GPU, that programs built with
//! `nvcc -cudart shared` (or clang) call, so they run unchanged on vmgpu: the code of
//! `libcudart.so.13` and `libcudart.so.12`. This crate exports every entry point whose
//! ABI is the same in both; the two shared libraries are the thin crates
//! `vmgpu-libcudart` (`libcudart.so.13`, the folder above) and `vmgpu-libcudart12`
//! (`../so12`), each with its soname, symbol version and the entry points of its version
//! only (`struct cudaDeviceProp`, `cudaMemPrefetchAsync`, `cudaMemAdvise`,
//! `cudaRuntimeGetVersion`, and 12's older names), written with the functions this crate
//! gives them.
//!
//! The runtime is a layer over the driver API, as NVIDIA's is: it finds `libcuda.so.1`
//! with the dynamic loader and calls its `cu*` entry points ([`driver`]). With vmgpu's
//! `libcuda.so.1` that is the PTX simulator in-process or the vmgpu CUDA service
//! (`VMGPU_CUDA_MODE`, `VMGPU_CUDA_SERVER` and the simulator's variables are the
//! driver's); the runtime and the driver API of one process share the primary contexts,
//! as with NVIDIA's libraries.
//!
//! What it adds to the driver: the registration of the program's fatbins, kernels and
//! variables by nvcc's generated constructors (the PTX entries of each fatbin are read,
//! decompressed, and loaded as a module per device when first needed: [`fatbin`]),
//! `<<<...>>>` launches, the implicit primary context of the thread's device, the
//! thread's last error, and `cudaError_t` ([`errors`]).

#![recursion_limit = "256"]

mod api;
pub mod driver;
pub mod errors;
pub use vmgpu_ptx::fatbin;
mod log;
pub mod props;
mod state;
mod units;
#[doc(hidden)]
pub mod unsupported;

pub use api::{
    device_location, get_device_properties, get_driver_entry_point, graph_add_dependencies,
    graph_add_node, graph_node_edges, mem_advise, mem_prefetch_async, per_thread,
    runtime_get_version, stream_get_capture_info, stream_update_capture_dependencies,
    GraphNodeParams,
};
/// The entry points the thin crates also export under CUDA 12's older names.
pub mod legacy {
    pub use crate::api::{
        cudaDeviceGetLimit, cudaDeviceReset, cudaDeviceSetCacheConfig, cudaDeviceSetLimit,
        cudaDeviceSynchronize, cudaEventElapsedTime,
    };
}
