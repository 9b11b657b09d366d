//! CUDA accelerator for guests of a VMM.
//!
//! [`driver`]: the boundary at the level of the CUDA driver API, with the native
//! backend (the NVIDIA driver loaded at run time). The PTX simulator and the guest
//! protocol arrive with their own issues.

pub mod driver;
