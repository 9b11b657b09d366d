//! A kernel's illegal address surfaces as `CUDA_ERROR_ILLEGAL_ADDRESS` at the next
//! synchronising call and stays (sticky). Its own test binary: the fault spoils the
//! process's primary context.

mod native_common;

use cuda_guest::driver::{LaunchConfig, StreamFlags};
use native_common::*;

#[test]
#[ignore = "needs an NVIDIA GPU (run with --ignored)"]
fn out_of_bounds_kernel_surfaces_illegal_address_at_the_next_sync() {
    let (_native, gpu) = native_gpu();
    let cuda = gpu.backend().clone();
    let module = cuda.module_load_ptx(KERNELS_PTX).unwrap();
    let oob = cuda.module_get_function(&module, "oob_write").unwrap();
    let buf = gpu.alloc_zeroed::<u8>(4096).unwrap();
    let stream = gpu.stream(StreamFlags::default()).unwrap();
    let args: [&[u8]; 1] = [&buf.ptr().0.to_le_bytes()];
    // SAFETY: oob_write(unsigned*) takes one pointer; it writes 1 TiB past the buffer,
    // an address that no host memory is mapped at in the device's address space (the
    // point of the test), so the device faults instead of writing.
    let launched = unsafe { cuda.launch(&oob, &LaunchConfig::linear(1, 32), stream.raw(), &args) };
    assert!(launched.is_ok(), "the launch itself succeeds: {launched:?}");
    let err = stream.synchronize().unwrap_err();
    let e = err.as_cuda().expect("a CUDA error");
    assert_eq!(e.name, "CUDA_ERROR_ILLEGAL_ADDRESS", "{err}");
    assert_eq!(e.code, 700);
    assert_eq!(e.stream, Some(stream.raw().raw()));
    assert_eq!(e.device, Some(0));
    assert!(err.to_string().contains("sticky"), "{err}");
    println!("{err}");
    // Sticky: the context stays failed.
    let err = gpu.synchronize().unwrap_err();
    assert_eq!(err.cuda_name(), Some("CUDA_ERROR_ILLEGAL_ADDRESS"));
    let err = cuda.mem_alloc(16).unwrap_err();
    assert_eq!(err.cuda_name(), Some("CUDA_ERROR_ILLEGAL_ADDRESS"));
}
