//! What the exported entry points call: one [`Engine`] per process, in-process on the
//! simulator ([`crate::local`]) or forwarded to a vmgpu CUDA service
//! ([`crate::remote`]). Handles are the `u64` values the C program sees.

use std::sync::{Mutex, MutexGuard};
use vmgpu_cuda_api::DriverError;

/// Locks `m`, taking it as it is when a panic on another thread poisoned it (both
/// engines' locks).
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// A failed call: the `CUresult` to return, what went wrong (logged), and a JIT log for
/// failed module loads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fail {
    /// The `CUresult`.
    pub code: i32,
    /// Why (for the log).
    pub detail: String,
    /// The JIT error log of a module load.
    pub jit_log: Option<String>,
}

impl Fail {
    /// A failure with `code` and a reason.
    pub fn new(code: i32, detail: impl Into<String>) -> Fail {
        Fail {
            code,
            detail: detail.into(),
            jit_log: None,
        }
    }
}

impl From<DriverError> for Fail {
    fn from(e: DriverError) -> Fail {
        let code = e.status().0 as i32;
        let jit_log = e.as_cuda().and_then(|c| c.jit_log.clone());
        Fail {
            code,
            detail: e.to_string(),
            jit_log,
        }
    }
}

/// Results of the engine.
pub type R<T> = Result<T, Fail>;

/// `CU_STREAM_PER_THREAD`. Stream handles up to it are the default streams: 0 (the
/// null stream), 1 (`CU_STREAM_LEGACY`) and this one.
pub const STREAM_PER_THREAD: u64 = 2;

/// A kernel's parameter layout: (offset, size) of each parameter in the packed buffer,
/// or `None` when the engine does not know it.
pub type Layout = Option<Vec<(u32, u32)>>;

/// Grid, block and dynamic shared memory of a launch.
#[derive(Debug, Clone, Copy)]
pub struct Geometry {
    /// Blocks.
    pub grid: [u32; 3],
    /// Threads per block.
    pub block: [u32; 3],
    /// Dynamic shared memory bytes.
    pub shared: u32,
}

/// The CUDA driver at the level of the C API, with the program's handle values. Calls
/// that work in a context take the context current on the calling thread (`ctx`);
/// streams and events carry their own.
pub trait Engine: Send + Sync + std::fmt::Debug {
    /// Which mode this is, for logs.
    fn describe(&self) -> String;
    /// `cuInit(flags)` succeeded in the program: calls that need the driver may follow.
    /// Neither engine does anything slow here (forward mode connects at the first call
    /// that needs the service, and sends `Init` with these flags first).
    fn init(&self, flags: u32) -> R<()>;
    /// `cuDriverGetVersion`.
    fn driver_version(&self) -> R<i32>;
    /// `cuDeviceGetCount`.
    fn device_count(&self) -> R<u32>;
    /// `cuDeviceGetName`.
    fn device_name(&self, dev: u32) -> R<String>;
    /// `cuDeviceGetUuid`.
    fn device_uuid(&self, dev: u32) -> R<[u8; 16]>;
    /// `cuDeviceGetPCIBusId`.
    fn device_pci_bus_id(&self, dev: u32) -> R<String>;
    /// `cuDeviceGetAttribute`.
    fn device_attribute(&self, dev: u32, attr: i32) -> R<i32>;
    /// `cuDeviceTotalMem_v2`.
    fn device_total_mem(&self, dev: u32) -> R<u64>;

    /// `cuDevicePrimaryCtxRetain`: the primary context's handle.
    fn primary_retain(&self, dev: u32) -> R<u64>;
    /// `cuDevicePrimaryCtxRelease_v2`.
    fn primary_release(&self, dev: u32) -> R<()>;
    /// `cuDevicePrimaryCtxReset_v2`.
    fn primary_reset(&self, dev: u32) -> R<()>;
    /// `cuDevicePrimaryCtxGetState`: (flags, active).
    fn primary_state(&self, dev: u32) -> R<(u32, bool)>;
    /// `cuDevicePrimaryCtxSetFlags_v2`.
    fn primary_set_flags(&self, dev: u32, flags: u32) -> R<()>;
    /// `cuCtxCreate`: a new context of its own.
    fn ctx_create(&self, dev: u32, flags: u32) -> R<u64>;
    /// `cuCtxDestroy_v2`.
    fn ctx_destroy(&self, ctx: u64) -> R<()>;
    /// The device of a context (also checks that it exists).
    fn ctx_device(&self, ctx: u64) -> R<u32>;
    /// `cuCtxSynchronize`.
    fn ctx_synchronize(&self, ctx: u64) -> R<()>;
    /// `cuMemGetInfo_v2`: (free, total).
    fn mem_get_info(&self, ctx: u64) -> R<(u64, u64)>;

    /// `cuModuleLoadData[Ex]` of an image (PTX text, without its NUL).
    fn module_load(&self, ctx: u64, image: &[u8]) -> R<u64>;
    /// `cuModuleUnload`.
    fn module_unload(&self, ctx: u64, module: u64) -> R<()>;
    /// `cuModuleGetFunction`.
    fn module_get_function(&self, ctx: u64, module: u64, name: &str) -> R<u64>;
    /// `cuModuleGetGlobal_v2`: (address, bytes).
    fn module_get_global(&self, ctx: u64, module: u64, name: &str) -> R<(u64, u64)>;
    /// The parameter layout of a function.
    fn function_layout(&self, function: u64) -> R<Layout>;
    /// `cuFuncSetAttribute(CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES)`.
    fn function_set_max_dynamic_shared(&self, ctx: u64, function: u64, bytes: u32) -> R<()>;
    /// `cuLaunchKernel` with each parameter's bytes.
    fn launch(
        &self,
        ctx: u64,
        function: u64,
        geometry: Geometry,
        stream: u64,
        args: &[&[u8]],
    ) -> R<()>;

    /// `cuMemAlloc_v2`.
    fn mem_alloc(&self, ctx: u64, bytes: u64) -> R<u64>;
    /// `cuMemFree_v2`.
    fn mem_free(&self, ctx: u64, ptr: u64) -> R<()>;
    /// `cuMemsetD8/16/32` (`width` 1, 2, 4; `count` elements), on `stream` when `Some`.
    fn memset(
        &self,
        ctx: u64,
        dst: u64,
        value: u32,
        width: u32,
        count: u64,
        stream: Option<u64>,
    ) -> R<()>;
    /// `cuMemcpyHtoD[Async]_v2`. `pinned`: the source is page-locked (from
    /// `cuMemHostAlloc` or registered); an asynchronous copy from pageable memory takes
    /// the bytes before it returns, as the driver's does.
    ///
    /// # Safety
    /// `src..src+bytes` is readable host memory; for an asynchronous copy from pinned
    /// memory it stays so until the stream has passed the copy.
    unsafe fn memcpy_htod(
        &self,
        ctx: u64,
        dst: u64,
        src: *const u8,
        bytes: usize,
        stream: Option<u64>,
        pinned: bool,
    ) -> R<()>;
    /// `cuMemcpyDtoH[Async]_v2`. `pinned`: the destination is page-locked; an
    /// asynchronous copy to pageable memory returns when the copy is done, as the
    /// driver's does.
    ///
    /// # Safety
    /// `dst..dst+bytes` is writable host memory nothing else uses; for an asynchronous
    /// copy to pinned memory it stays so until the stream has passed the copy.
    unsafe fn memcpy_dtoh(
        &self,
        ctx: u64,
        dst: *mut u8,
        src: u64,
        bytes: usize,
        stream: Option<u64>,
        pinned: bool,
    ) -> R<()>;
    /// `cuMemcpyDtoD[Async]_v2`.
    fn memcpy_dtod(&self, ctx: u64, dst: u64, src: u64, bytes: u64, stream: Option<u64>) -> R<()>;

    /// `cuMemHostAlloc` / `cuMemAllocHost_v2`: page-locked host memory.
    fn host_alloc(&self, ctx: u64, bytes: usize, flags: u32) -> R<*mut u8>;
    /// `cuMemFreeHost`.
    ///
    /// # Safety
    /// Nothing uses the memory afterwards.
    unsafe fn host_free(&self, ptr: *mut u8) -> R<()>;
    /// `cuMemHostRegister_v2`.
    ///
    /// # Safety
    /// The range is host memory of the process that stays mapped until unregistered.
    unsafe fn host_register(&self, ctx: u64, ptr: *mut u8, bytes: usize, flags: u32) -> R<()>;
    /// `cuMemHostUnregister`.
    ///
    /// # Safety
    /// No pending operation uses the range.
    unsafe fn host_unregister(&self, ctx: u64, ptr: *mut u8) -> R<()>;

    /// `cuStreamCreate[WithPriority]`.
    fn stream_create(&self, ctx: u64, flags: u32, priority: i32) -> R<u64>;
    /// `cuStreamDestroy_v2`.
    fn stream_destroy(&self, ctx: u64, stream: u64) -> R<()>;
    /// `cuStreamSynchronize`.
    fn stream_synchronize(&self, ctx: u64, stream: u64) -> R<()>;
    /// `cuStreamQuery`: `true` when done.
    fn stream_query(&self, ctx: u64, stream: u64) -> R<bool>;
    /// `cuStreamWaitEvent`.
    fn stream_wait_event(&self, ctx: u64, stream: u64, event: u64, flags: u32) -> R<()>;
    /// `cuEventCreate`.
    fn event_create(&self, ctx: u64, flags: u32) -> R<u64>;
    /// `cuEventRecord`.
    fn event_record(&self, ctx: u64, event: u64, stream: u64) -> R<()>;
    /// `cuEventSynchronize`.
    fn event_synchronize(&self, ctx: u64, event: u64) -> R<()>;
    /// `cuEventQuery`: `true` when reached.
    fn event_query(&self, ctx: u64, event: u64) -> R<bool>;
    /// `cuEventElapsedTime`.
    fn event_elapsed(&self, ctx: u64, start: u64, end: u64) -> R<f32>;
    /// `cuEventDestroy_v2`.
    fn event_destroy(&self, ctx: u64, event: u64) -> R<()>;
}
