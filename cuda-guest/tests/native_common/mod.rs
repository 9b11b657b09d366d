//! Shared by the native test binaries (`mod native_common;`): the backend under test,
//! the PTX kernels, and page-aligned host memory.

#![allow(dead_code)]

use std::sync::Arc;

use cuda_guest::driver::safe::Gpu;
use cuda_guest::driver::{Backend, Device, NativeBackend};

/// The kernels (generated from native-ptx/kernels.cu by native-ptx/gen.py).
pub const KERNELS_PTX: &str = include_str!("../native-ptx/kernels.ptx");

/// The native backend and device 0 with its primary context current on this thread.
pub fn native_gpu() -> (Arc<NativeBackend>, Gpu) {
    let native = match NativeBackend::new() {
        Ok(n) => Arc::new(n),
        Err(e) => panic!("the native backend did not load: {e}"),
    };
    let backend: Arc<dyn Backend> = native.clone();
    let gpu = Gpu::new(backend, Device::new(0)).expect("retain device 0's primary context");
    (native, gpu)
}

/// Little-endian bytes of a slice of `f32`.
pub fn f32_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// `f32`s from little-endian bytes.
pub fn bytes_f32(b: &[u8]) -> Vec<f32> {
    b.chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

/// `u32`s from little-endian bytes.
pub fn bytes_u32(b: &[u8]) -> Vec<u32> {
    b.chunks_exact(4)
        .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

/// Page-aligned, zeroed host memory (for cuMemHostRegister).
#[derive(Debug)]
pub struct Aligned {
    ptr: *mut u8,
    layout: std::alloc::Layout,
}

impl Aligned {
    /// `len` zeroed bytes aligned to 4 KiB.
    pub fn new(len: usize) -> Aligned {
        let layout = std::alloc::Layout::from_size_align(len.max(1), 4096).expect("layout");
        // SAFETY: the layout has a non-zero size.
        let ptr = unsafe { std::alloc::alloc_zeroed(layout) };
        assert!(!ptr.is_null(), "out of host memory");
        Aligned { ptr, layout }
    }
    /// Its start.
    pub fn as_ptr(&self) -> *mut u8 {
        self.ptr
    }
    /// Its length.
    pub fn len(&self) -> usize {
        self.layout.size()
    }
    /// Its bytes.
    pub fn as_slice(&self) -> &[u8] {
        // SAFETY: `ptr` holds `len` initialised bytes owned by `self`.
        unsafe { std::slice::from_raw_parts(self.ptr, self.layout.size()) }
    }
    /// Its bytes, writable.
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: as above, borrowed exclusively.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.layout.size()) }
    }
}

impl Drop for Aligned {
    fn drop(&mut self) {
        // SAFETY: allocated in `new` with this layout.
        unsafe { std::alloc::dealloc(self.ptr, self.layout) }
    }
}
