//! `libcudart.so.13` for guests and machines without a GPU: the CUDA runtime API that
//! programs built with `nvcc -cudart shared` call, so they run unchanged on vmgpu.
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

mod api;
pub mod driver;
pub mod errors;
pub mod fatbin;
mod log;
mod props;
mod state;
mod units;
mod unsupported;
