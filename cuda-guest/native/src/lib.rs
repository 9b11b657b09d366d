//! The NVIDIA driver as a [`vmgpu_cuda_api::Backend`]: `libcuda.so.1` opened at run
//! time ([`loader`]; never linked), its entry points resolved through
//! `cuGetProcAddress_v2` ([`NativeBackend`]); and NVRTC loaded the same way ([`nvrtc`]).
//! Host-side only: a guest's libraries never depend on this crate.

pub mod loader;
mod native;
pub mod nvrtc;

pub use loader::{Driver, LoadOptions, Resolution};
pub use native::NativeBackend;
