//! Forward mode: the client side of `docs/protocol.md` over a Unix socket, AF_VSOCK or
//! a virtio-serial port.

use crate::engine::{Engine, Fail, R};
use crate::ffi::*;

/// A session with a vmgpu CUDA service.
#[derive(Debug)]
pub struct Remote;

/// Connects to `server` and shakes hands.
pub fn connect(server: &str) -> R<Box<dyn Engine>> {
    {
        Err(Fail::new(CUDA_ERROR_NOT_SUPPORTED, format!("forward mode to {server}: not built yet")))
    }
}
