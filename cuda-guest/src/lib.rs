//! CUDA accelerator for guests of a VMM.
//!
//! The driver API loader and the PTX simulator arrive with their own issues.

/// The wire protocol between a guest's `libcuda.so.1` and the VMM's CUDA service:
/// handshake, frames, one request per driver call, replies; pure and synchronous.
pub mod proto;
