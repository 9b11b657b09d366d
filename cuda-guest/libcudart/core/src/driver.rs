//! The driver API the runtime is a layer over: `libcuda.so.1` found by the dynamic
//! loader (vmgpu's in a guest or on a machine without a GPU, so the simulator and
//! forward modes and their environment variables are the driver's; NVIDIA's where that
//! is the one installed). Each entry point used is named once, in the `driver_api!` table below.

use std::ffi::{c_char, c_int, c_uint, c_void, CStr};

/// `CUresult`.
pub type CUresult = c_int;
/// `CUdeviceptr`.
pub type CUdeviceptr = u64;
/// An opaque driver handle (`CUcontext`, `CUmodule`, `CUfunction`, `CUstream`,
/// `CUevent`).
pub type Handle = *mut c_void;

macro_rules! driver_api {
    ($($name:ident($($arg:ident: $ty:ty),*);)*) => {
        /// The driver's entry points this library calls.
        #[allow(non_snake_case)]
        #[derive(Debug)]
        pub struct Driver {
            $(
                #[doc = concat!("`", stringify!($name), "`.")]
                pub $name: unsafe extern "C" fn($($ty),*) -> CUresult,
            )*
        }

        impl Driver {
            /// Resolves every entry point in `lib` (a `dlopen` handle).
            ///
            /// # Safety
            /// `lib` is a live handle of a library whose symbols of these names have
            /// these C prototypes (cuda.h's).
            unsafe fn resolve(lib: *mut c_void) -> Result<Driver, String> {
                Ok(Driver {
                    $($name: {
                        let name = concat!(stringify!($name), "\0");
                        // SAFETY: a live handle and a NUL-terminated name.
                        let p = unsafe { libc::dlsym(lib, name.as_ptr().cast()) };
                        if p.is_null() {
                            return Err(format!("libcuda.so.1 has no {}", stringify!($name)));
                        }
                        // SAFETY: the symbol is the driver's function of this prototype
                        // (the caller's guarantee); function and data pointers have the
                        // same size here.
                        unsafe {
                            std::mem::transmute::<*mut c_void, unsafe extern "C" fn($($ty),*) -> CUresult>(p)
                        }
                    },)*
                })
            }
        }
    };
}

driver_api! {
    cuInit(flags: c_uint);
    cuDriverGetVersion(v: *mut c_int);
    cuDeviceGetCount(n: *mut c_int);
    cuDeviceGet(d: *mut c_int, ordinal: c_int);
    cuDeviceGetName(name: *mut c_char, len: c_int, d: c_int);
    cuDeviceGetUuid(uuid: *mut u8, d: c_int);
    cuDeviceGetAttribute(v: *mut c_int, attr: c_int, d: c_int);
    cuDeviceTotalMem_v2(bytes: *mut usize, d: c_int);
    cuDevicePrimaryCtxRetain(ctx: *mut Handle, d: c_int);
    cuDevicePrimaryCtxReset_v2(d: c_int);
    cuCtxSetCurrent(ctx: Handle);
    cuCtxGetCurrent(ctx: *mut Handle);
    cuCtxSynchronize();
    cuMemGetInfo_v2(free: *mut usize, total: *mut usize);
    cuModuleLoadData(m: *mut Handle, image: *const c_void);
    cuModuleLoadDataEx(m: *mut Handle, image: *const c_void, n: c_uint, options: *mut c_int, values: *mut *mut c_void);
    cuModuleGetFunction(f: *mut Handle, m: Handle, name: *const c_char);
    cuModuleGetGlobal_v2(p: *mut CUdeviceptr, bytes: *mut usize, m: Handle, name: *const c_char);
    cuFuncGetAttribute(v: *mut c_int, attr: c_int, f: Handle);
    cuFuncSetAttribute(f: Handle, attr: c_int, v: c_int);
    cuLaunchKernel(f: Handle, gx: c_uint, gy: c_uint, gz: c_uint, bx: c_uint, by: c_uint, bz: c_uint, shared: c_uint, s: Handle, params: *mut *mut c_void, extra: *mut *mut c_void);
    cuLaunchCooperativeKernel(f: Handle, gx: c_uint, gy: c_uint, gz: c_uint, bx: c_uint, by: c_uint, bz: c_uint, shared: c_uint, s: Handle, params: *mut *mut c_void);
    cuMemAlloc_v2(p: *mut CUdeviceptr, bytes: usize);
    cuMemFree_v2(p: CUdeviceptr);
    cuMemAllocHost_v2(p: *mut *mut c_void, bytes: usize);
    cuMemHostAlloc(p: *mut *mut c_void, bytes: usize, flags: c_uint);
    cuMemFreeHost(p: *mut c_void);
    cuMemHostGetDevicePointer_v2(d: *mut CUdeviceptr, p: *mut c_void, flags: c_uint);
    cuMemHostRegister_v2(p: *mut c_void, bytes: usize, flags: c_uint);
    cuMemHostUnregister(p: *mut c_void);
    cuMemAllocManaged(p: *mut CUdeviceptr, bytes: usize, flags: c_uint);
    cuMemcpyHtoD_v2(dst: CUdeviceptr, src: *const c_void, n: usize);
    cuMemcpyDtoH_v2(dst: *mut c_void, src: CUdeviceptr, n: usize);
    cuMemcpyDtoD_v2(dst: CUdeviceptr, src: CUdeviceptr, n: usize);
    cuMemcpyHtoDAsync_v2(dst: CUdeviceptr, src: *const c_void, n: usize, s: Handle);
    cuMemcpyDtoHAsync_v2(dst: *mut c_void, src: CUdeviceptr, n: usize, s: Handle);
    cuMemcpyDtoDAsync_v2(dst: CUdeviceptr, src: CUdeviceptr, n: usize, s: Handle);
    cuMemsetD8_v2(dst: CUdeviceptr, v: u8, n: usize);
    cuMemsetD8Async(dst: CUdeviceptr, v: u8, n: usize, s: Handle);
    cuMemAllocPitch_v2(p: *mut CUdeviceptr, pitch: *mut usize, width: usize, height: usize, element: c_uint);
    cuMemcpy3D_v2(p: *const c_void);
    cuMemcpy3DAsync_v2(p: *const c_void, s: Handle);
    cuMemsetD2D8_v2(dst: CUdeviceptr, pitch: usize, v: u8, width: usize, height: usize);
    cuMemsetD2D8Async(dst: CUdeviceptr, pitch: usize, v: u8, width: usize, height: usize, s: Handle);
    cuPointerGetAttribute(data: *mut c_void, attr: c_int, p: CUdeviceptr);
    cuStreamCreate(s: *mut Handle, flags: c_uint);
    cuStreamDestroy_v2(s: Handle);
    cuStreamSynchronize(s: Handle);
    cuStreamQuery(s: Handle);
    cuStreamWaitEvent(s: Handle, e: Handle, flags: c_uint);
    cuEventCreate(e: *mut Handle, flags: c_uint);
    cuEventRecord(e: Handle, s: Handle);
    cuEventSynchronize(e: Handle);
    cuEventQuery(e: Handle);
    cuEventElapsedTime(ms: *mut f32, a: Handle, b: Handle);
    cuEventDestroy_v2(e: Handle);
    cuLaunchHostFunc(s: Handle, f: Option<unsafe extern "C" fn(*mut c_void)>, data: *mut c_void);
    cuStreamAddCallback(s: Handle, cb: Option<unsafe extern "C" fn(Handle, CUresult, *mut c_void)>, data: *mut c_void, flags: c_uint);
    cuStreamCreateWithPriority(s: *mut Handle, flags: c_uint, priority: c_int);
    cuCtxGetStreamPriorityRange(least: *mut c_int, greatest: *mut c_int);
    cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(n: *mut c_int, f: Handle, block: c_int, shared: usize, flags: c_uint);
    cuMemAllocAsync(p: *mut CUdeviceptr, bytes: usize, s: Handle);
    cuMemFreeAsync(p: CUdeviceptr, s: Handle);
    cuEventRecordWithFlags(e: Handle, s: Handle, flags: c_uint);
    cuStreamBeginCapture_v2(s: Handle, mode: c_int);
    cuStreamEndCapture(s: Handle, g: *mut Handle);
    cuStreamIsCapturing(s: Handle, status: *mut c_int);
    cuStreamSetAttribute(s: Handle, attr: c_int, v: *const c_void);
    cuStreamGetAttribute(s: Handle, attr: c_int, v: *mut c_void);
    cuStreamCopyAttributes(dst: Handle, src: Handle);
    cuCtxResetPersistingL2Cache();
    cuGraphAddChildGraphNode(node: *mut Handle, g: Handle, deps: *const Handle, n: usize, child: Handle);
    cuGraphChildGraphNodeGetGraph(node: Handle, g: *mut Handle);
    cuGraphAddEventRecordNode(node: *mut Handle, g: Handle, deps: *const Handle, n: usize, e: Handle);
    cuGraphAddEventWaitNode(node: *mut Handle, g: Handle, deps: *const Handle, n: usize, e: Handle);
    cuGraphEventRecordNodeGetEvent(node: Handle, e: *mut Handle);
    cuGraphEventRecordNodeSetEvent(node: Handle, e: Handle);
    cuGraphEventWaitNodeGetEvent(node: Handle, e: *mut Handle);
    cuGraphEventWaitNodeSetEvent(node: Handle, e: Handle);
    cuGraphExecEventRecordNodeSetEvent(x: Handle, node: Handle, e: Handle);
    cuGraphExecEventWaitNodeSetEvent(x: Handle, node: Handle, e: Handle);
    cuGraphInstantiateWithFlags(x: *mut Handle, g: Handle, flags: u64);
    cuGraphLaunch(x: Handle, s: Handle);
    cuGraphExecDestroy(x: Handle);
    cuGraphDestroy(g: Handle);
    cuGraphCreate(g: *mut Handle, flags: c_uint);
    cuGraphAddKernelNode(node: *mut Handle, g: Handle, deps: *const Handle, n: usize, p: *const c_void);
    cuGraphAddMemcpyNode(node: *mut Handle, g: Handle, deps: *const Handle, n: usize, p: *const c_void, ctx: Handle);
    cuGraphAddMemsetNode(node: *mut Handle, g: Handle, deps: *const Handle, n: usize, p: *const c_void, ctx: Handle);
    cuGraphAddHostNode(node: *mut Handle, g: Handle, deps: *const Handle, n: usize, p: *const c_void);
    cuGraphAddEmptyNode(node: *mut Handle, g: Handle, deps: *const Handle, n: usize);
    cuGraphAddNode_v2(node: *mut Handle, g: Handle, deps: *const Handle, edges: *const c_void, n: usize, p: *mut c_void);
    cuGraphConditionalHandleCreate(h: *mut u64, g: Handle, ctx: Handle, default: c_uint, flags: c_uint);
    cuStreamBeginCaptureToGraph(s: Handle, g: Handle, deps: *const Handle, edges: *const c_void, n: usize, mode: c_int);
    cuStreamGetCaptureInfo_v3(s: Handle, status: *mut c_int, id: *mut u64, g: *mut Handle, deps: *mut *const Handle, edges: *mut *const c_void, n: *mut usize);
    cuStreamUpdateCaptureDependencies_v2(s: Handle, deps: *const Handle, edges: *const c_void, n: usize, flags: c_uint);
    cuGraphAddMemAllocNode(node: *mut Handle, g: Handle, deps: *const Handle, n: usize, p: *mut c_void);
    cuGraphAddMemFreeNode(node: *mut Handle, g: Handle, deps: *const Handle, n: usize, dptr: CUdeviceptr);
    cuGraphMemAllocNodeGetParams(node: Handle, p: *mut c_void);
    cuGraphMemFreeNodeGetParams(node: Handle, dptr: *mut CUdeviceptr);
    cuDeviceGetGraphMemAttribute(d: c_int, attr: c_int, v: *mut c_void);
    cuDeviceSetGraphMemAttribute(d: c_int, attr: c_int, v: *mut c_void);
    cuDeviceGraphMemTrim(d: c_int);
    cuGraphAddDependencies_v2(g: Handle, from: *const Handle, to: *const Handle, edges: *const u64, n: usize);
    cuGraphGetNodes(g: Handle, nodes: *mut Handle, count: *mut usize);
    cuGraphGetRootNodes(g: Handle, nodes: *mut Handle, count: *mut usize);
    cuGraphNodeGetType(node: Handle, t: *mut c_int);
    cuGraphClone(c: *mut Handle, g: Handle);
    cuCtxGetLimit(v: *mut usize, limit: c_int);
    cuCtxSetLimit(limit: c_int, v: usize);
    cuGetProcAddress_v2(symbol: *const c_char, p: *mut *mut c_void, version: c_int, flags: u64, status: *mut c_int);
    cuThreadExchangeStreamCaptureMode(mode: *mut c_int);
    cuStreamGetFlags(s: Handle, flags: *mut c_uint);
    cuStreamGetPriority(s: Handle, priority: *mut c_int);
    cuStreamGetId(s: Handle, id: *mut u64);
    cuStreamGetDevice(s: Handle, d: *mut c_int);
    cuStreamAttachMemAsync(s: Handle, p: CUdeviceptr, n: usize, flags: c_uint);
    cuUserObjectCreate(o: *mut Handle, p: *mut c_void, destroy: Option<unsafe extern "C" fn(*mut c_void)>, refs: c_uint, flags: c_uint);
    cuUserObjectRetain(o: Handle, n: c_uint);
    cuUserObjectRelease(o: Handle, n: c_uint);
    cuGraphRetainUserObject(g: Handle, o: Handle, n: c_uint, flags: c_uint);
    cuGraphReleaseUserObject(g: Handle, o: Handle, n: c_uint);
    cuGraphUpload(x: Handle, s: Handle);
    cuOccupancyAvailableDynamicSMemPerBlock(bytes: *mut usize, f: Handle, blocks: c_int, block_size: c_int);
    cuDeviceGetByPCIBusId(d: *mut c_int, bus: *const c_char);
    cuCtxGetFlags(flags: *mut c_uint);
    cuCtxGetCacheConfig(config: *mut c_int);
    cuCtxGetSharedMemConfig(config: *mut c_int);
    cuCtxSetSharedMemConfig(config: c_int);
    cuFuncGetName(name: *mut *const c_char, f: Handle);
    cuDevicePrimaryCtxSetFlags_v2(d: c_int, flags: c_uint);
    cuGraphKernelNodeSetParams(node: Handle, p: *const c_void);
    cuGraphExecKernelNodeSetParams(x: Handle, node: Handle, p: *const c_void);
    cuGraphMemcpyNodeSetParams(node: Handle, p: *const c_void);
    cuGraphExecMemcpyNodeSetParams(x: Handle, node: Handle, p: *const c_void, ctx: Handle);
    cuGraphMemsetNodeSetParams(node: Handle, p: *const c_void);
    cuGraphExecMemsetNodeSetParams(x: Handle, node: Handle, p: *const c_void, ctx: Handle);
    cuGraphHostNodeSetParams(node: Handle, p: *const c_void);
    cuGraphExecHostNodeSetParams(x: Handle, node: Handle, p: *const c_void);
    cuGraphExecUpdate_v2(x: Handle, g: Handle, info: *mut c_void);
    cuGraphNodeGetDependencies_v2(node: Handle, deps: *mut Handle, edges: *mut u64, n: *mut usize);
    cuGraphNodeGetDependentNodes_v2(node: Handle, deps: *mut Handle, edges: *mut u64, n: *mut usize);
    cuArray3DCreate_v2(a: *mut Handle, d: *const c_void);
    cuArrayDestroy(a: Handle);
    cuArray3DGetDescriptor_v2(d: *mut c_void, a: Handle);
    cuMemcpyHtoA_v2(a: Handle, offset: usize, src: *const c_void, n: usize);
    cuMemcpyHtoAAsync_v2(a: Handle, offset: usize, src: *const c_void, n: usize, s: Handle);
    cuMemcpyAtoH_v2(dst: *mut c_void, a: Handle, offset: usize, n: usize);
    cuMemcpyAtoHAsync_v2(dst: *mut c_void, a: Handle, offset: usize, n: usize, s: Handle);
    cuMemcpyDtoA_v2(a: Handle, offset: usize, src: CUdeviceptr, n: usize);
    cuMemcpyAtoD_v2(dst: CUdeviceptr, a: Handle, offset: usize, n: usize);
    cuTexObjectCreate(o: *mut u64, r: *const c_void, t: *const c_void, v: *const c_void);
    cuTexObjectDestroy(o: u64);
    cuSurfObjectCreate(o: *mut u64, r: *const c_void);
    cuSurfObjectDestroy(o: u64);
    cuLaunchKernelEx(config: *const c_void, f: Handle, params: *mut *mut c_void, extra: *mut *mut c_void);
    cuMemcpyPeer(dst: CUdeviceptr, dst_ctx: Handle, src: CUdeviceptr, src_ctx: Handle, n: usize);
    cuMemcpyPeerAsync(dst: CUdeviceptr, dst_ctx: Handle, src: CUdeviceptr, src_ctx: Handle, n: usize, s: Handle);
    cuDeviceCanAccessPeer(can: *mut c_int, d: c_int, peer: c_int);
    cuCtxEnablePeerAccess(peer: Handle, flags: c_uint);
    cuDeviceGetPCIBusId(id: *mut c_char, len: c_int, d: c_int);
    cuMemPrefetchAsync_v2(p: CUdeviceptr, n: usize, location: MemLocation, flags: c_uint, s: Handle);
    cuMemAdvise_v2(p: CUdeviceptr, n: usize, advice: c_int, location: MemLocation);
    cuLinkCreate_v2(n: c_uint, options: *mut c_int, values: *mut *mut c_void, state: *mut Handle);
    cuLinkAddData_v2(state: Handle, kind: c_int, data: *mut c_void, size: usize, name: *const c_char, n: c_uint, options: *mut c_int, values: *mut *mut c_void);
    cuLinkComplete(state: Handle, image: *mut *mut c_void, size: *mut usize);
    cuLinkDestroy(state: Handle);
    cuDeviceGetDefaultMemPool(pool: *mut Handle, d: c_int);
    cuDeviceGetMemPool(pool: *mut Handle, d: c_int);
    cuMemPoolSetAttribute(pool: Handle, attr: c_int, value: *mut c_void);
    cuMemPoolGetAttribute(pool: Handle, attr: c_int, value: *mut c_void);
    cuMemPoolTrimTo(pool: Handle, keep: usize);
    cuMemAllocFromPoolAsync(p: *mut CUdeviceptr, bytes: usize, pool: Handle, s: Handle);
}

/// `CUmemLocation` (and the runtime's `cudaMemLocation`, the same layout).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct MemLocation {
    /// `CUmemLocationType`.
    pub ty: c_int,
    /// The device ordinal (or NUMA node).
    pub id: c_int,
}

/// Opens `libcuda.so.1` and resolves the driver.
pub fn load() -> Result<Driver, String> {
    const NAME: &CStr = c"libcuda.so.1";
    // SAFETY: dlopen with a NUL-terminated name; the handle is kept for the process
    // (never closed), so the function pointers stay valid.
    let lib = unsafe { libc::dlopen(NAME.as_ptr(), libc::RTLD_NOW | libc::RTLD_GLOBAL) };
    if lib.is_null() {
        // SAFETY: dlerror returns null or a NUL-terminated message of the loader's.
        let why = unsafe { libc::dlerror() };
        let why = if why.is_null() {
            "not found".to_string()
        } else {
            // SAFETY: non-null, NUL-terminated (above).
            unsafe { CStr::from_ptr(why) }
                .to_string_lossy()
                .into_owned()
        };
        return Err(format!("cannot load libcuda.so.1: {why}"));
    }
    // SAFETY: a live handle of a library that is a CUDA driver (its name says so); the
    // prototypes are cuda.h's.
    unsafe { Driver::resolve(lib) }
}
