//! Raw C types and constants of the CUDA driver API, written by hand from the stock
//! `cuda.h` (CUDA 12.x; the ABI of entry points requested with
//! [`REQUESTED_CUDA_VERSION`]).
//!
//! Only what the native backend uses is here. Nothing in this module is linked: the
//! entry points are function-pointer types filled in at run time by
//! the native backend's loader (`vmgpu-cuda-native`).

#![allow(non_camel_case_types)]

use std::ffi::{c_char, c_int, c_uint, c_void};

/// The CUDA version whose ABI every entry point is requested for through
/// `cuGetProcAddress_v2` (12.0): a newer driver hands back the variant of each entry
/// point that CUDA 12.0 headers name (`cuMemAlloc` gives `cuMemAlloc_v2`, ...).
pub const REQUESTED_CUDA_VERSION: c_int = 12000;

/// `CUresult`: the status every driver entry point returns.
pub type CUresult = c_int;
/// `CUdevice`: a device handle (an ordinal in practice).
pub type CUdevice = c_int;
/// `CUdeviceptr` (`CUdeviceptr_v2`): a device address, 64 bits on every 64-bit host.
pub type CUdeviceptr = u64;
/// `CUdevice_attribute`.
pub type CUdevice_attribute = c_int;
/// `CUjit_option`.
pub type CUjit_option = c_int;

/// Opaque struct behind `CUcontext`.
#[repr(C)]
#[derive(Debug)]
pub struct CUctx_st {
    _private: [u8; 0],
}
/// Opaque struct behind `CUmodule`.
#[repr(C)]
#[derive(Debug)]
pub struct CUmod_st {
    _private: [u8; 0],
}
/// Opaque struct behind `CUfunction`.
#[repr(C)]
#[derive(Debug)]
pub struct CUfunc_st {
    _private: [u8; 0],
}
/// Opaque struct behind `CUstream`.
#[repr(C)]
#[derive(Debug)]
pub struct CUstream_st {
    _private: [u8; 0],
}
/// Opaque struct behind `CUevent`.
#[repr(C)]
#[derive(Debug)]
pub struct CUevent_st {
    _private: [u8; 0],
}

/// `CUcontext`.
pub type CUcontext = *mut CUctx_st;
/// `CUmodule`.
pub type CUmodule = *mut CUmod_st;
/// `CUfunction`.
pub type CUfunction = *mut CUfunc_st;
/// `CUstream`; null is the legacy default stream.
pub type CUstream = *mut CUstream_st;
/// `CUevent`.
pub type CUevent = *mut CUevent_st;

/// `CUuuid`: 16 bytes.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct CUuuid {
    /// The bytes, as the driver writes them.
    pub bytes: [c_char; 16],
}

// CUresult values (the subset the error table and the code name directly).
// The `CUresult` values, from the one table (`crate::status`).
pub use crate::status::codes::*;

/// `CU_DEVICE_ATTRIBUTE_MAX` (cuda.h 12.9): every attribute number below it exists.
pub const CU_DEVICE_ATTRIBUTE_MAX: c_int = 144;

// cuGetProcAddress flags and results.
/// `CU_GET_PROC_ADDRESS_DEFAULT`.
pub const CU_GET_PROC_ADDRESS_DEFAULT: u64 = 0;
/// `CU_GET_PROC_ADDRESS_LEGACY_STREAM`: the legacy-default-stream variants.
pub const CU_GET_PROC_ADDRESS_LEGACY_STREAM: u64 = 1;
/// `CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM`: the `_ptds`/`_ptsz` variants.
pub const CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM: u64 = 2;
/// `CU_GET_PROC_ADDRESS_SUCCESS`.
pub const CU_GET_PROC_ADDRESS_SUCCESS: c_int = 0;
/// `CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND`.
pub const CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND: c_int = 1;
/// `CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT`.
pub const CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT: c_int = 2;

// JIT options.
/// `CU_JIT_INFO_LOG_BUFFER`.
pub const CU_JIT_INFO_LOG_BUFFER: CUjit_option = 3;
/// `CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES`.
pub const CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES: CUjit_option = 4;
/// `CU_JIT_ERROR_LOG_BUFFER`.
pub const CU_JIT_ERROR_LOG_BUFFER: CUjit_option = 5;
/// `CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES`.
pub const CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES: CUjit_option = 6;
/// `CU_JIT_LOG_VERBOSE`.
pub const CU_JIT_LOG_VERBOSE: CUjit_option = 12;

// Flags.
/// `CU_STREAM_DEFAULT`.
pub const CU_STREAM_DEFAULT: c_uint = 0;
/// `CU_STREAM_NON_BLOCKING`.
pub const CU_STREAM_NON_BLOCKING: c_uint = 1;
/// `CU_EVENT_DEFAULT`.
pub const CU_EVENT_DEFAULT: c_uint = 0;
/// `CU_EVENT_BLOCKING_SYNC`.
pub const CU_EVENT_BLOCKING_SYNC: c_uint = 1;
/// `CU_EVENT_DISABLE_TIMING`.
pub const CU_EVENT_DISABLE_TIMING: c_uint = 2;
/// `CU_MEMHOSTALLOC_PORTABLE`.
pub const CU_MEMHOSTALLOC_PORTABLE: c_uint = 1;
/// `CU_MEMHOSTALLOC_DEVICEMAP`.
pub const CU_MEMHOSTALLOC_DEVICEMAP: c_uint = 2;
/// `CU_MEMHOSTALLOC_WRITECOMBINED`.
pub const CU_MEMHOSTALLOC_WRITECOMBINED: c_uint = 4;
/// `CU_MEMHOSTREGISTER_PORTABLE`.
pub const CU_MEMHOSTREGISTER_PORTABLE: c_uint = 1;
/// `CU_MEMHOSTREGISTER_DEVICEMAP`.
pub const CU_MEMHOSTREGISTER_DEVICEMAP: c_uint = 2;
/// `CU_MEMHOSTREGISTER_READ_ONLY`.
pub const CU_MEMHOSTREGISTER_READ_ONLY: c_uint = 8;

// Device attributes (CUdevice_attribute).

// Entry-point types, in the ABI of CUDA 12.0.
/// `cuGetProcAddress_v2`.
pub type cuGetProcAddress_v2 = unsafe extern "C" fn(
    symbol: *const c_char,
    pfn: *mut *mut c_void,
    cuda_version: c_int,
    flags: u64,
    symbol_status: *mut c_int,
) -> CUresult;
/// `cuGetProcAddress` (CUDA 11.3 to 11.8, no status argument).
pub type cuGetProcAddress_v1 = unsafe extern "C" fn(
    symbol: *const c_char,
    pfn: *mut *mut c_void,
    cuda_version: c_int,
    flags: u64,
) -> CUresult;
/// `cuInit`.
pub type cuInit = unsafe extern "C" fn(flags: c_uint) -> CUresult;
/// `cuDriverGetVersion`.
pub type cuDriverGetVersion = unsafe extern "C" fn(version: *mut c_int) -> CUresult;
/// `cuGetErrorName` and `cuGetErrorString`.
pub type cuGetErrorText =
    unsafe extern "C" fn(error: CUresult, text: *mut *const c_char) -> CUresult;
/// `cuDeviceGetCount`.
pub type cuDeviceGetCount = unsafe extern "C" fn(count: *mut c_int) -> CUresult;
/// `cuDeviceGet`.
pub type cuDeviceGet = unsafe extern "C" fn(device: *mut CUdevice, ordinal: c_int) -> CUresult;
/// `cuDeviceGetName`.
pub type cuDeviceGetName =
    unsafe extern "C" fn(name: *mut c_char, len: c_int, dev: CUdevice) -> CUresult;
/// `cuDeviceGetUuid_v2`.
pub type cuDeviceGetUuid = unsafe extern "C" fn(uuid: *mut CUuuid, dev: CUdevice) -> CUresult;
/// `cuDeviceGetPCIBusId`.
pub type cuDeviceGetPCIBusId =
    unsafe extern "C" fn(bus_id: *mut c_char, len: c_int, dev: CUdevice) -> CUresult;
/// `cuDeviceGetAttribute`.
pub type cuDeviceGetAttribute =
    unsafe extern "C" fn(value: *mut c_int, attrib: CUdevice_attribute, dev: CUdevice) -> CUresult;
/// `cuDeviceTotalMem_v2`.
pub type cuDeviceTotalMem = unsafe extern "C" fn(bytes: *mut usize, dev: CUdevice) -> CUresult;
/// `cuDevicePrimaryCtxRetain`.
pub type cuDevicePrimaryCtxRetain =
    unsafe extern "C" fn(ctx: *mut CUcontext, dev: CUdevice) -> CUresult;
/// `cuDevicePrimaryCtxRelease_v2`.
pub type cuDevicePrimaryCtxRelease = unsafe extern "C" fn(dev: CUdevice) -> CUresult;
/// `cuCtxSetCurrent`.
pub type cuCtxSetCurrent = unsafe extern "C" fn(ctx: CUcontext) -> CUresult;
/// `cuCtxGetCurrent`.
pub type cuCtxGetCurrent = unsafe extern "C" fn(ctx: *mut CUcontext) -> CUresult;
/// `cuCtxSynchronize`.
pub type cuCtxSynchronize = unsafe extern "C" fn() -> CUresult;
/// `cuMemGetInfo_v2`.
pub type cuMemGetInfo = unsafe extern "C" fn(free: *mut usize, total: *mut usize) -> CUresult;
/// `cuModuleLoadDataEx`.
pub type cuModuleLoadDataEx = unsafe extern "C" fn(
    module: *mut CUmodule,
    image: *const c_void,
    num_options: c_uint,
    options: *mut CUjit_option,
    option_values: *mut *mut c_void,
) -> CUresult;
/// `cuModuleUnload`.
pub type cuModuleUnload = unsafe extern "C" fn(module: CUmodule) -> CUresult;
/// `cuModuleGetFunction`.
pub type cuModuleGetFunction =
    unsafe extern "C" fn(func: *mut CUfunction, module: CUmodule, name: *const c_char) -> CUresult;
/// `cuMemAlloc_v2`.
pub type cuMemAlloc = unsafe extern "C" fn(dptr: *mut CUdeviceptr, bytes: usize) -> CUresult;
/// `cuMemFree_v2`.
pub type cuMemFree = unsafe extern "C" fn(dptr: CUdeviceptr) -> CUresult;
/// `cuMemsetD8_v2`.
pub type cuMemsetD8 = unsafe extern "C" fn(dst: CUdeviceptr, value: u8, count: usize) -> CUresult;
/// `cuMemsetD32_v2`.
pub type cuMemsetD32 =
    unsafe extern "C" fn(dst: CUdeviceptr, value: c_uint, count: usize) -> CUresult;
/// `cuMemsetD16_v2`.
pub type cuMemsetD16 = unsafe extern "C" fn(dst: CUdeviceptr, value: u16, count: usize) -> CUresult;
/// `cuMemsetD16Async`.
pub type cuMemsetD16Async =
    unsafe extern "C" fn(dst: CUdeviceptr, value: u16, count: usize, stream: CUstream) -> CUresult;
/// `cuCtxCreate_v3`. Resolved for CUDA 12.0, `cuGetProcAddress` answers `cuCtxCreate` with the variant of
/// that version, `cuCtxCreate_v3` (CUDA 11.4's, with execution-affinity parameters), so
/// this is `_v3`'s prototype; `params` may be null with `num_params` 0.
pub type cuCtxCreate = unsafe extern "C" fn(
    ctx: *mut CUcontext,
    params: *mut c_void,
    num_params: c_int,
    flags: c_uint,
    dev: CUdevice,
) -> CUresult;
/// `cuCtxDestroy_v2`.
pub type cuCtxDestroy = unsafe extern "C" fn(ctx: CUcontext) -> CUresult;
/// `cuMemsetD8Async`.
pub type cuMemsetD8Async =
    unsafe extern "C" fn(dst: CUdeviceptr, value: u8, count: usize, stream: CUstream) -> CUresult;
/// `cuMemsetD32Async`.
pub type cuMemsetD32Async = unsafe extern "C" fn(
    dst: CUdeviceptr,
    value: c_uint,
    count: usize,
    stream: CUstream,
) -> CUresult;
/// `cuMemcpyHtoD_v2`.
pub type cuMemcpyHtoD =
    unsafe extern "C" fn(dst: CUdeviceptr, src: *const c_void, bytes: usize) -> CUresult;
/// `cuMemcpyDtoH_v2`.
pub type cuMemcpyDtoH =
    unsafe extern "C" fn(dst: *mut c_void, src: CUdeviceptr, bytes: usize) -> CUresult;
/// `cuMemcpyDtoD_v2`.
pub type cuMemcpyDtoD =
    unsafe extern "C" fn(dst: CUdeviceptr, src: CUdeviceptr, bytes: usize) -> CUresult;
/// `cuMemcpyHtoDAsync_v2`.
pub type cuMemcpyHtoDAsync = unsafe extern "C" fn(
    dst: CUdeviceptr,
    src: *const c_void,
    bytes: usize,
    stream: CUstream,
) -> CUresult;
/// `cuMemcpyDtoHAsync_v2`.
pub type cuMemcpyDtoHAsync = unsafe extern "C" fn(
    dst: *mut c_void,
    src: CUdeviceptr,
    bytes: usize,
    stream: CUstream,
) -> CUresult;
/// `cuMemcpyDtoDAsync_v2`.
pub type cuMemcpyDtoDAsync = unsafe extern "C" fn(
    dst: CUdeviceptr,
    src: CUdeviceptr,
    bytes: usize,
    stream: CUstream,
) -> CUresult;
/// `cuMemHostAlloc`.
pub type cuMemHostAlloc =
    unsafe extern "C" fn(pp: *mut *mut c_void, bytes: usize, flags: c_uint) -> CUresult;
/// `cuMemFreeHost`.
pub type cuMemFreeHost = unsafe extern "C" fn(p: *mut c_void) -> CUresult;
/// `cuMemHostRegister_v2`.
pub type cuMemHostRegister =
    unsafe extern "C" fn(p: *mut c_void, bytes: usize, flags: c_uint) -> CUresult;
/// `cuMemHostUnregister`.
pub type cuMemHostUnregister = unsafe extern "C" fn(p: *mut c_void) -> CUresult;
/// `cuStreamCreate`.
pub type cuStreamCreate = unsafe extern "C" fn(stream: *mut CUstream, flags: c_uint) -> CUresult;
/// `cuStreamSynchronize`, `cuStreamQuery` and `cuStreamDestroy_v2`.
pub type cuStreamOp = unsafe extern "C" fn(stream: CUstream) -> CUresult;
/// `cuStreamWaitEvent`.
pub type cuStreamWaitEvent =
    unsafe extern "C" fn(stream: CUstream, event: CUevent, flags: c_uint) -> CUresult;
/// `cuEventCreate`.
pub type cuEventCreate = unsafe extern "C" fn(event: *mut CUevent, flags: c_uint) -> CUresult;
/// `cuEventRecord`.
pub type cuEventRecord = unsafe extern "C" fn(event: CUevent, stream: CUstream) -> CUresult;
/// `cuEventSynchronize`, `cuEventQuery` and `cuEventDestroy_v2`.
pub type cuEventOp = unsafe extern "C" fn(event: CUevent) -> CUresult;
/// `cuEventElapsedTime`.
pub type cuEventElapsedTime =
    unsafe extern "C" fn(ms: *mut f32, start: CUevent, end: CUevent) -> CUresult;
/// `cuFuncSetAttribute`.
pub type cuFuncSetAttribute =
    unsafe extern "C" fn(func: CUfunction, attrib: c_int, value: c_int) -> CUresult;
/// `cuFuncGetAttribute`.
pub type cuFuncGetAttribute =
    unsafe extern "C" fn(value: *mut c_int, attrib: c_int, func: CUfunction) -> CUresult;
/// `cuModuleGetGlobal_v2`.
pub type cuModuleGetGlobal = unsafe extern "C" fn(
    dptr: *mut CUdeviceptr,
    bytes: *mut usize,
    module: CUmodule,
    name: *const c_char,
) -> CUresult;
/// `cuLaunchCooperativeKernel` (`cuLaunchKernel`'s arguments but `extra`).
pub type cuLaunchCooperativeKernel = unsafe extern "C" fn(
    f: CUfunction,
    grid_x: c_uint,
    grid_y: c_uint,
    grid_z: c_uint,
    block_x: c_uint,
    block_y: c_uint,
    block_z: c_uint,
    shared_bytes: c_uint,
    stream: CUstream,
    params: *mut *mut c_void,
) -> CUresult;
/// `cuLaunchKernel`.
pub type cuLaunchKernel = unsafe extern "C" fn(
    f: CUfunction,
    grid_x: c_uint,
    grid_y: c_uint,
    grid_z: c_uint,
    block_x: c_uint,
    block_y: c_uint,
    block_z: c_uint,
    shared_bytes: c_uint,
    stream: CUstream,
    params: *mut *mut c_void,
    extra: *mut *mut c_void,
) -> CUresult;
