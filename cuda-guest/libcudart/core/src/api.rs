//! The exported runtime API (C ABI, the names and prototypes `cuda_runtime_api.h` 12.9
//! and 13.0 share, and the registration hooks nvcc's and clang's generated code calls;
//! the entry points whose ABI differs are functions here that each soname's crate
//! exports in its version's form). Every entry point catches
//! panics (`cudaErrorUnknown`), records its error as the thread's last error, and
//! reaches the device through the driver ([`crate::driver`]).

#![allow(non_upper_case_globals)]

use std::ffi::{c_char, c_int, c_uint, c_void, CStr};
use std::panic::{catch_unwind, AssertUnwindSafe};

use crate::driver::{CUdeviceptr, Handle};
use crate::errors::*;
use crate::log;
use crate::state::{self, cu, runtime, CallConfig, Fail, Runtime, R};

/// `dim3`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct Dim3 {
    x: c_uint,
    y: c_uint,
    z: c_uint,
}

impl Dim3 {
    fn arr(self) -> [u32; 3] {
        [self.x, self.y, self.z]
    }
}

/// Runs an entry point's body: panics become `cudaErrorUnknown`; a failure is logged at
/// debug level and becomes the thread's last error.
fn call(name: &'static str, f: impl FnOnce() -> R<()>) -> CudaError {
    let code = match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(())) => return cudaSuccess,
        Ok(Err(fail)) => {
            if fail.code != cudaErrorNotReady {
                log::debug(&format!("{name}: {} ({})", fail.detail, fail.code));
            }
            fail.code
        }
        Err(_) => {
            log::warn(&format!("{name}: internal error (panic); cudaErrorUnknown"));
            cudaErrorUnknown
        }
    };
    if code != cudaErrorNotReady {
        state::set_last(code);
    }
    code
}

macro_rules! rt {
    ($(#[doc = $doc:expr])* fn $name:ident($($arg:ident : $ty:ty),* $(,)?) $body:block) => {
        $(#[doc = $doc])*
        ///
        /// # Safety
        /// The arguments are what `cuda_runtime_api.h` describes for this entry point.
        #[no_mangle]
        pub unsafe extern "C" fn $name($($arg: $ty),*) -> CudaError {
            call(stringify!($name), || $body)
        }
    };
}

/// An entry point that is one driver call on the thread's device (its primary context
/// bound first), the driver's `CUresult` as the runtime's error: `fn name(args) =>
/// cuName(driver args);`.
macro_rules! forward {
    ($(#[doc = $doc:expr])* fn $name:ident($($arg:ident : $ty:ty),* $(,)?) => $cu:ident($($carg:expr),* $(,)?);) => {
        rt! {
            $(#[doc = $doc])*
            fn $name($($arg: $ty),*) {
                let rt = bound()?;
                cu!(rt.d, $cu($($carg),*))
            }
        }
    };
}

mod textures;
use textures::*;

/// Writes `v` to the program's `p`.
///
/// # Safety
/// `p` is null or valid for writing a `T`.
unsafe fn out<T>(p: *mut T, v: T) -> R<()> {
    if p.is_null() {
        return Err(Fail::new(cudaErrorInvalidValue, "null output pointer"));
    }
    // SAFETY: non-null, and the caller guarantees it is valid for a write of `T`.
    unsafe { p.write_unaligned(v) };
    Ok(())
}

/// The runtime with this thread's device's context current.
fn bound() -> R<&'static Runtime> {
    let rt = runtime()?;
    rt.bind()?;
    Ok(rt)
}

// ---------------------------------------------------------------------------------------
// Registration (nvcc's generated constructors) and launches.

/// `__cudaRegisterFatBinary`: the fatbin is read when a kernel or variable of it is first
/// used (the device is not touched in the program's constructors).
///
/// # Safety
/// `fat` is the wrapper nvcc's registration code passes.
#[no_mangle]
pub unsafe extern "C" fn __cudaRegisterFatBinary(fat: *mut c_void) -> *mut *mut c_void {
    // SAFETY: the caller's guarantee.
    match unsafe { state::fatbin_of(fat) } {
        Ok(data) => {
            // SAFETY: the caller's guarantee.
            let relocatable = unsafe { state::relocatable_of(fat) };
            let n = state::register_fatbin(data, relocatable);
            Box::into_raw(Box::new(n as *mut c_void))
        }
        Err(f) => {
            log::warn(&format!("__cudaRegisterFatBinary: {}", f.detail));
            Box::into_raw(Box::new(usize::MAX as *mut c_void))
        }
    }
}

/// The fatbin number behind a registration handle.
///
/// # Safety
/// `h` is a handle `__cudaRegisterFatBinary` returned.
unsafe fn fatbin_number(h: *mut *mut c_void) -> Option<usize> {
    if h.is_null() {
        return None;
    }
    // SAFETY: the handle is the box made in `__cudaRegisterFatBinary`, never freed.
    let n = unsafe { *h } as usize;
    (n != usize::MAX).then_some(n)
}

/// `__cudaRegisterFatBinaryEnd`: nothing to do (modules load when first needed).
#[no_mangle]
pub extern "C" fn __cudaRegisterFatBinaryEnd(_handle: *mut *mut c_void) {}

/// `__cudaUnregisterFatBinary`: at the program's exit; its modules go with the process.
#[no_mangle]
pub extern "C" fn __cudaUnregisterFatBinary(_handle: *mut *mut c_void) {}

/// `__cudaInitModule`: nvcc's code calls it (`__nv_init_managed_rt`) before the host
/// first touches a `__managed__` variable of the fatbin: the module is loaded on this
/// thread's device and the variables' pointers set (`Runtime::init_module`); 1.
///
/// The generated code dereferences the pointers right after, whatever this returns, so
/// a fatbin whose variables cannot be set ends the program with an error naming them
/// (instead of the host writing through a null pointer).
///
/// # Safety
/// `handle` is a handle `__cudaRegisterFatBinary` returned.
#[no_mangle]
pub unsafe extern "C" fn __cudaInitModule(handle: *mut *mut c_void) -> c_char {
    // SAFETY: the caller's guarantee.
    let Some(n) = (unsafe { fatbin_number(handle) }) else {
        return 0;
    };
    let r = catch_unwind(|| bound().and_then(|rt| rt.init_module(n)));
    let why = match r {
        Ok(Ok(())) => return 1,
        Ok(Err(f)) => format!("{} ({})", f.detail, f.code),
        Err(_) => "internal error (panic)".to_string(),
    };
    log::fatal(&format!(
        "__cudaInitModule: the __managed__ variables of fatbin {n} ({}) cannot be reached \
         from the host: {why}; exiting",
        state::managed_names(n).join(", ")
    ));
    std::process::exit(1)
}

/// `__cudaRegisterManagedVar`: `__managed__` variable `device_name` (`size` bytes) of
/// the fatbin, whose address the program reads from `*host_var_ptr` once
/// `__cudaInitModule` has set it.
///
/// # Safety
/// As `__cudaRegisterFunction`; `host_var_ptr` is the program's writable pointer
/// variable, alive for the process.
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn __cudaRegisterManagedVar(
    handle: *mut *mut c_void,
    host_var_ptr: *mut *mut c_void,
    _device_address: *mut c_char,
    device_name: *const c_char,
    _ext: c_int,
    size: usize,
    _constant: c_int,
    _global: c_int,
) {
    // SAFETY: the caller's guarantees.
    let Some(n) = (unsafe { fatbin_number(handle) }) else {
        return;
    };
    if device_name.is_null() || host_var_ptr.is_null() {
        return;
    }
    // SAFETY: NUL-terminated (the caller).
    let name = unsafe { CStr::from_ptr(device_name) }.to_owned();
    state::register_managed_var(n, host_var_ptr as usize, name, size);
}

/// `__cudaRegisterFunction`: kernel `host_fun` (the host stub's address) of the fatbin,
/// named `device_name` on the device.
///
/// # Safety
/// The arguments are nvcc's registration code's: a live handle, NUL-terminated names.
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn __cudaRegisterFunction(
    handle: *mut *mut c_void,
    host_fun: *const c_char,
    _device_fun: *mut c_char,
    device_name: *const c_char,
    _thread_limit: c_int,
    _tid: *mut c_void,
    _bid: *mut c_void,
    _bdim: *mut c_void,
    _gdim: *mut c_void,
    _wsize: *mut c_int,
) {
    // SAFETY: the caller's guarantees.
    let Some(n) = (unsafe { fatbin_number(handle) }) else {
        return;
    };
    if device_name.is_null() {
        return;
    }
    // SAFETY: NUL-terminated (the caller).
    let name = unsafe { CStr::from_ptr(device_name) }.to_owned();
    state::register_kernel(n, host_fun as usize, name);
}

/// `__cudaRegisterVar`: variable `host_var` (its host shadow's address) of the fatbin,
/// named `device_name` on the device, `size` bytes.
///
/// # Safety
/// As `__cudaRegisterFunction`.
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn __cudaRegisterVar(
    handle: *mut *mut c_void,
    host_var: *mut c_char,
    _device_address: *mut c_char,
    device_name: *const c_char,
    _ext: c_int,
    size: usize,
    _constant: c_int,
    _global: c_int,
) {
    // SAFETY: the caller's guarantees.
    let Some(n) = (unsafe { fatbin_number(handle) }) else {
        return;
    };
    if device_name.is_null() {
        return;
    }
    // SAFETY: NUL-terminated (the caller).
    let name = unsafe { CStr::from_ptr(device_name) }.to_owned();
    state::register_var(n, host_var as usize, name, size);
}

/// `__cudaPushCallConfiguration`: `<<<grid, block, shared, stream>>>`; 0 (the stub then
/// runs).
#[no_mangle]
pub extern "C" fn __cudaPushCallConfiguration(
    grid: Dim3,
    block: Dim3,
    shared: usize,
    stream: Handle,
) -> c_uint {
    state::push_config(CallConfig {
        grid: grid.arr(),
        block: block.arr(),
        shared,
        stream,
    });
    0
}

rt! {
    /// `__cudaPopCallConfiguration`: the configuration the stub launches with.
    fn __cudaPopCallConfiguration(grid: *mut Dim3, block: *mut Dim3, shared: *mut usize, stream: *mut Handle) {
        let c = state::pop_config().ok_or_else(|| {
            Fail::new(cudaErrorMissingConfiguration, "no <<<...>>> configuration was pushed")
        })?;
        let d = |a: [u32; 3]| Dim3 { x: a[0], y: a[1], z: a[2] };
        // SAFETY: the stub's own locals.
        unsafe {
            out(grid, d(c.grid))?;
            out(block, d(c.block))?;
            out(shared, c.shared)?;
            out(stream, c.stream)
        }
    }
}

rt! {
    /// `__cudaGetKernel` (CUDA 13): a kernel's handle is its host stub's address.
    fn __cudaGetKernel(kernel: *mut *const c_void, func: *const c_void) {
        // SAFETY: the stub's own static.
        unsafe { out(kernel, func) }
    }
}

/// Launches the kernel whose host stub is `func`.
///
/// # Safety
/// `args` holds one pointer per kernel parameter, each to that parameter's bytes.
unsafe fn launch(
    func: *const c_void,
    grid: Dim3,
    block: Dim3,
    args: *mut *mut c_void,
    shared: usize,
    stream: Handle,
) -> R<()> {
    // SAFETY: the caller's guarantee.
    unsafe { launch_grid(func, grid, block, args, shared, stream, false) }
}

/// `cudaLaunchKernel`, or `cudaLaunchCooperativeKernel` (`cooperative`).
///
/// # Safety
/// As [`launch`].
unsafe fn launch_grid(
    func: *const c_void,
    grid: Dim3,
    block: Dim3,
    args: *mut *mut c_void,
    shared: usize,
    stream: Handle,
    cooperative: bool,
) -> R<()> {
    let rt = bound()?;
    // NVIDIA's runtime answers a launch of an address that is no registered kernel
    // with cudaErrorInvalidResourceHandle (measured on an H200, CUDA 13.0).
    let f = rt.function(func as usize).map_err(|e| match e.code {
        cudaErrorInvalidDeviceFunction => Fail::new(cudaErrorInvalidResourceHandle, e.detail),
        _ => e,
    })?;
    let shared = u32::try_from(shared).map_err(|_| {
        Fail::new(
            cudaErrorInvalidValue,
            format!("{shared} bytes of shared memory"),
        )
    })?;
    let (g, b) = (grid, block);
    let r = if cooperative {
        cu!(
            rt.d,
            cuLaunchCooperativeKernel(f, g.x, g.y, g.z, b.x, b.y, b.z, shared, stream, args)
        )
    } else {
        cu!(
            rt.d,
            cuLaunchKernel(
                f,
                g.x,
                g.y,
                g.z,
                b.x,
                b.y,
                b.z,
                shared,
                stream,
                args,
                std::ptr::null_mut()
            )
        )
    };
    // A bad geometry (a block of 2048 threads) is cudaErrorInvalidValue, as the driver
    // says, in NVIDIA's runtime too (measured on an H200, CUDA 13.0).
    r
}

rt! {
    /// `__cudaLaunchKernel` (CUDA 13's `<<<>>>` path).
    fn __cudaLaunchKernel(kernel: *const c_void, grid: Dim3, block: Dim3, args: *mut *mut c_void, shared: usize, stream: Handle) {
        // SAFETY: the stub's argument array.
        unsafe { launch(kernel, grid, block, args, shared, stream) }
    }
}
rt! {
    /// `__cudaLaunchKernel_ptsz`.
    fn __cudaLaunchKernel_ptsz(kernel: *const c_void, grid: Dim3, block: Dim3, args: *mut *mut c_void, shared: usize, stream: Handle) {
        // SAFETY: the stub's argument array.
        unsafe { launch(kernel, grid, block, args, shared, per_thread(stream)) }
    }
}
rt! {
    /// `cudaLaunchKernel`.
    fn cudaLaunchKernel(func: *const c_void, grid: Dim3, block: Dim3, args: *mut *mut c_void, shared: usize, stream: Handle) {
        // SAFETY: the program's argument array.
        unsafe { launch(func, grid, block, args, shared, stream) }
    }
}
rt! {
    /// `cudaLaunchCooperativeKernel`: every block at once (cooperative groups' grid
    /// sync).
    fn cudaLaunchCooperativeKernel(func: *const c_void, grid: Dim3, block: Dim3, args: *mut *mut c_void, shared: usize, stream: Handle) {
        // SAFETY: the program's argument array.
        unsafe { launch_grid(func, grid, block, args, shared, stream, true) }
    }
}
rt! {
    /// `cudaLaunchCooperativeKernel_ptsz`.
    fn cudaLaunchCooperativeKernel_ptsz(func: *const c_void, grid: Dim3, block: Dim3, args: *mut *mut c_void, shared: usize, stream: Handle) {
        // SAFETY: the program's argument array.
        unsafe { launch_grid(func, grid, block, args, shared, per_thread(stream), true) }
    }
}
rt! {
    /// `cudaLaunchKernel_ptsz`.
    fn cudaLaunchKernel_ptsz(func: *const c_void, grid: Dim3, block: Dim3, args: *mut *mut c_void, shared: usize, stream: Handle) {
        // SAFETY: the program's argument array.
        unsafe { launch(func, grid, block, args, shared, per_thread(stream)) }
    }
}

/// `cudaLaunchConfig_t`: geometry, dynamic shared memory, stream and launch attributes
/// (`cudaLaunchAttribute` is the driver's `CUlaunchAttribute`, ids included).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct LaunchConfig {
    grid: Dim3,
    block: Dim3,
    shared: usize,
    stream: Handle,
    attrs: *const c_void,
    num_attrs: c_uint,
}

/// `CUlaunchConfig`.
#[repr(C)]
struct DriverLaunchConfig {
    grid: [c_uint; 3],
    block: [c_uint; 3],
    shared: c_uint,
    stream: Handle,
    attrs: *const c_void,
    num_attrs: c_uint,
}

/// `cudaLaunchKernelExC[_ptsz]`: the driver's `cuLaunchKernelEx` with the registered
/// kernel's function.
///
/// # Safety
/// `config` is null or the program's; `args` its argument array.
unsafe fn launch_ex(
    config: *const LaunchConfig,
    func: *const c_void,
    args: *mut *mut c_void,
    per_thread_stream: bool,
) -> R<()> {
    let rt = bound()?;
    // SAFETY: null or the program's configuration.
    let c = unsafe { config.as_ref() }
        .ok_or_else(|| Fail::new(cudaErrorInvalidValue, "null config"))?;
    let f = rt.function(func as usize)?;
    let shared = u32::try_from(c.shared).map_err(|_| {
        Fail::new(
            cudaErrorInvalidValue,
            format!("{} bytes of shared memory", c.shared),
        )
    })?;
    let d = DriverLaunchConfig {
        grid: [c.grid.x, c.grid.y, c.grid.z],
        block: [c.block.x, c.block.y, c.block.z],
        shared,
        stream: if per_thread_stream {
            per_thread(c.stream)
        } else {
            c.stream
        },
        attrs: c.attrs,
        num_attrs: c.num_attrs,
    };
    cu!(
        rt.d,
        cuLaunchKernelEx(
            (&d as *const DriverLaunchConfig).cast(),
            f,
            args,
            std::ptr::null_mut()
        )
    )
}

rt! {
    /// `cudaLaunchKernelExC`.
    fn cudaLaunchKernelExC(config: *const LaunchConfig, func: *const c_void, args: *mut *mut c_void) {
        // SAFETY: the program's configuration and arguments.
        unsafe { launch_ex(config, func, args, false) }
    }
}
rt! {
    /// `cudaLaunchKernelExC_ptsz`.
    fn cudaLaunchKernelExC_ptsz(config: *const LaunchConfig, func: *const c_void, args: *mut *mut c_void) {
        // SAFETY: the program's configuration and arguments.
        unsafe { launch_ex(config, func, args, true) }
    }
}

/// The null stream of a `_ptsz` variant is the per-thread stream.
pub fn per_thread(s: Handle) -> Handle {
    if s.is_null() {
        2 as Handle
    } else {
        s
    }
}

// ---------------------------------------------------------------------------------------
// Errors.

/// `cudaGetLastError`: the thread's last error, reset (unless sticky).
#[no_mangle]
pub extern "C" fn cudaGetLastError() -> CudaError {
    state::take_last()
}

/// `cudaPeekAtLastError`: the thread's last error, kept.
#[no_mangle]
pub extern "C" fn cudaPeekAtLastError() -> CudaError {
    state::peek_last()
}

/// `cudaGetErrorString`.
#[no_mangle]
pub extern "C" fn cudaGetErrorString(e: CudaError) -> *const c_char {
    description(e)
        .unwrap_or("unrecognized error code\0")
        .as_ptr()
        .cast()
}

/// `cudaGetErrorName`.
#[no_mangle]
pub extern "C" fn cudaGetErrorName(e: CudaError) -> *const c_char {
    name(e).unwrap_or("cudaErrorUnknown\0").as_ptr().cast()
}

// ---------------------------------------------------------------------------------------
// Devices.

/// `cudaRuntimeGetVersion`, for the soname's version (`13000` for 13.0): each soname's
/// crate exports it.
///
/// # Safety
/// `v` is null or the program's int.
pub unsafe fn runtime_get_version(v: *mut c_int, version: c_int) -> CudaError {
    // SAFETY: the caller's int.
    call("cudaRuntimeGetVersion", || unsafe { out(v, version) })
}
rt! {
    /// `cudaDriverGetVersion`: the driver's; 0 without one, as the runtime answers.
    fn cudaDriverGetVersion(v: *mut c_int) {
        let n = match runtime() {
            Ok(rt) => {
                let mut n = 0;
                cu!(rt.d, cuDriverGetVersion(&mut n))?;
                n
            }
            Err(_) => 0,
        };
        // SAFETY: the program's int.
        unsafe { out(v, n) }
    }
}
rt! {
    /// `cudaGetDeviceCount`.
    fn cudaGetDeviceCount(n: *mut c_int) {
        let rt = runtime()?;
        // SAFETY: the program's int.
        unsafe { out(n, rt.devices) }
    }
}
rt! {
    /// `cudaSetDevice`: this thread's device (its primary context becomes current).
    fn cudaSetDevice(d: c_int) {
        let rt = runtime()?;
        if !(0..rt.devices).contains(&d) {
            return Err(Fail::new(cudaErrorInvalidDevice, format!("device {d} of {}", rt.devices)));
        }
        state::set_device(d);
        rt.bind_primary()
    }
}
rt! {
    /// `cudaGetDevice`.
    fn cudaGetDevice(d: *mut c_int) {
        runtime()?;
        // SAFETY: the program's int.
        unsafe { out(d, state::device()) }
    }
}
forward! {
    /// `cudaDeviceSynchronize`.
    fn cudaDeviceSynchronize() => cuCtxSynchronize();
}
forward! {
    /// `cudaThreadExchangeStreamCaptureMode` (`cudaStreamCaptureMode` is the driver's).
    fn cudaThreadExchangeStreamCaptureMode(mode: *mut c_int) => cuThreadExchangeStreamCaptureMode(mode);
}
forward! {
    /// `cudaStreamGetFlags`.
    fn cudaStreamGetFlags(s: Handle, flags: *mut c_uint) => cuStreamGetFlags(s, flags);
}
forward! {
    /// `cudaStreamGetPriority`.
    fn cudaStreamGetPriority(s: Handle, priority: *mut c_int) => cuStreamGetPriority(s, priority);
}
forward! {
    /// `cudaStreamGetId`.
    fn cudaStreamGetId(s: Handle, id: *mut u64) => cuStreamGetId(s, id);
}
forward! {
    /// `cudaStreamGetDevice`.
    fn cudaStreamGetDevice(s: Handle, d: *mut c_int) => cuStreamGetDevice(s, d);
}
forward! {
    /// `cudaStreamAttachMemAsync`.
    fn cudaStreamAttachMemAsync(s: Handle, p: *mut c_void, n: usize, flags: c_uint) => cuStreamAttachMemAsync(s, p as usize as CUdeviceptr, n, flags);
}
forward! {
    /// `cudaUserObjectCreate` (a `cudaHostFn_t` destructor, as the driver's).
    fn cudaUserObjectCreate(o: *mut Handle, p: *mut c_void, destroy: Option<unsafe extern "C" fn(*mut c_void)>, refs: c_uint, flags: c_uint) => cuUserObjectCreate(o, p, destroy, refs, flags);
}
forward! {
    /// `cudaUserObjectRetain`.
    fn cudaUserObjectRetain(o: Handle, n: c_uint) => cuUserObjectRetain(o, n);
}
forward! {
    /// `cudaUserObjectRelease`.
    fn cudaUserObjectRelease(o: Handle, n: c_uint) => cuUserObjectRelease(o, n);
}
forward! {
    /// `cudaGraphRetainUserObject`.
    fn cudaGraphRetainUserObject(g: Handle, o: Handle, n: c_uint, flags: c_uint) => cuGraphRetainUserObject(g, o, n, flags);
}
forward! {
    /// `cudaGraphReleaseUserObject`.
    fn cudaGraphReleaseUserObject(g: Handle, o: Handle, n: c_uint) => cuGraphReleaseUserObject(g, o, n);
}
forward! {
    /// `cudaGraphUpload`.
    fn cudaGraphUpload(x: Handle, s: Handle) => cuGraphUpload(x, s);
}
forward! {
    /// `cudaDeviceGetByPCIBusId`.
    fn cudaDeviceGetByPCIBusId(d: *mut c_int, bus: *const c_char) => cuDeviceGetByPCIBusId(d, bus);
}
forward! {
    /// `cudaGetDeviceFlags`: the flags of the context the runtime uses.
    fn cudaGetDeviceFlags(flags: *mut c_uint) => cuCtxGetFlags(flags);
}
forward! {
    /// `cudaDeviceGetCacheConfig`.
    fn cudaDeviceGetCacheConfig(config: *mut c_int) => cuCtxGetCacheConfig(config);
}
forward! {
    /// `cudaDeviceGetSharedMemConfig`.
    fn cudaDeviceGetSharedMemConfig(config: *mut c_int) => cuCtxGetSharedMemConfig(config);
}
forward! {
    /// `cudaDeviceSetSharedMemConfig`.
    fn cudaDeviceSetSharedMemConfig(config: c_int) => cuCtxSetSharedMemConfig(config);
}
rt! {
    /// `cudaFuncGetName`: the kernel's device-side name.
    fn cudaFuncGetName(name: *mut *const c_char, func: *const c_void) {
        let rt = bound()?;
        let f = rt.function(func as usize)?;
        cu!(rt.d, cuFuncGetName(name, f))
    }
}
rt! {
    /// `cudaOccupancyAvailableDynamicSMemPerBlock`.
    fn cudaOccupancyAvailableDynamicSMemPerBlock(bytes: *mut usize, func: *const c_void, blocks: c_int, block_size: c_int) {
        let rt = bound()?;
        let f = rt.function(func as usize)?;
        cu!(rt.d, cuOccupancyAvailableDynamicSMemPerBlock(bytes, f, blocks, block_size))
    }
}
rt! {
    /// `cudaChooseDevice`: the devices are alike, so device 0 matches best.
    fn cudaChooseDevice(d: *mut c_int, prop: *const c_void) {
        runtime()?;
        if prop.is_null() {
            return Err(Fail::new(cudaErrorInvalidValue, "null prop"));
        }
        // SAFETY: `out` refuses null.
        unsafe { out(d, 0) }
    }
}
rt! {
    /// `cudaInitDevice`: device `d`'s primary context, with `device_flags` when `flags`
    /// says they are valid (`cudaInitDeviceFlagsAreValid`).
    fn cudaInitDevice(d: c_int, device_flags: c_uint, flags: c_uint) {
        let rt = runtime()?;
        if flags & !1 != 0 {
            return Err(Fail::new(cudaErrorInvalidValue, format!("flags {flags:#x}")));
        }
        if flags & 1 != 0 {
            cu!(rt.d, cuDevicePrimaryCtxSetFlags_v2(d, device_flags))?;
        }
        rt.context_of(d).map(|_| ())
    }
}

/// `cudaGetDriverEntryPoint` and `cudaGetDriverEntryPointByVersion`: the driver's
/// `cuGetProcAddress_v2` (the runtime's flags and query results are the driver's), at
/// `version` (the runtime's own for the first), with the runtime's context current:
/// each soname's crate exports the first.
///
/// # Safety
/// The arguments are the program's, as `cuda_runtime_api.h` describes them.
pub unsafe fn get_driver_entry_point(
    name: &'static str,
    symbol: *const c_char,
    p: *mut *mut c_void,
    version: c_int,
    flags: u64,
    status: *mut c_int,
) -> CudaError {
    call(name, || {
        // The runtime starts (its context current), as for most calls: the driver's
        // functions are then ready to call.
        let rt = bound()?;
        cu!(rt.d, cuGetProcAddress_v2(symbol, p, version, flags, status))
    })
}

/// `cudaGetDriverEntryPointByVersion`.
///
/// # Safety
/// The arguments are the program's, as `cuda_runtime_api.h` describes them.
#[no_mangle]
pub unsafe extern "C" fn cudaGetDriverEntryPointByVersion(
    symbol: *const c_char,
    p: *mut *mut c_void,
    version: c_uint,
    flags: u64,
    status: *mut c_int,
) -> CudaError {
    // SAFETY: the caller's arguments.
    unsafe {
        get_driver_entry_point(
            "cudaGetDriverEntryPointByVersion",
            symbol,
            p,
            version as c_int,
            flags,
            status,
        )
    }
}
rt! {
    /// `cudaDeviceReset`: the device's primary context is reset; its modules load again
    /// when next needed (at once for those with `__managed__` variables the host has
    /// used, whose pointers must stay valid).
    fn cudaDeviceReset() {
        let rt = bound()?;
        let _ = cu!(rt.d, cuCtxSynchronize());
        cu!(rt.d, cuDevicePrimaryCtxReset_v2(state::device()))?;
        rt.forget_device()
    }
}
rt! {
    /// `cudaDeviceGetAttribute`: `cudaDeviceAttr` numbers are the driver's.
    fn cudaDeviceGetAttribute(v: *mut c_int, attr: c_int, d: c_int) {
        let rt = runtime()?;
        if v.is_null() {
            return Err(Fail::new(cudaErrorInvalidValue, "null value"));
        }
        cu!(rt.d, cuDeviceGetAttribute(v, attr, d)).map_err(|e| match e.code {
            cudaErrorInvalidValue if !(0..rt.devices).contains(&d) => Fail::new(cudaErrorInvalidDevice, e.detail),
            _ => e,
        })
    }
}
/// `cudaGetDeviceProperties` for a version's `struct cudaDeviceProp` (each soname's
/// crate exports its own, as `name`): the name, UUID and memory of the device, every
/// other field from its driver attribute (0 where the driver has none).
///
/// # Safety
/// `prop` is null or the program's `struct cudaDeviceProp` of that version.
pub unsafe fn get_device_properties<P: crate::props::DeviceProp>(
    name: &'static str,
    prop: *mut P,
    d: c_int,
) -> CudaError {
    call(name, || {
        let rt = runtime()?;
        if prop.is_null() {
            return Err(Fail::new(cudaErrorInvalidValue, "null prop"));
        }
        if !(0..rt.devices).contains(&d) {
            return Err(Fail::new(
                cudaErrorInvalidDevice,
                format!("device {d} of {}", rt.devices),
            ));
        }
        let mut id = crate::props::Identity {
            name: [0; 256],
            uuid: [0; 16],
            total_mem: 0,
        };
        cu!(
            rt.d,
            cuDeviceGetName(id.name.as_mut_ptr(), id.name.len() as c_int - 1, d)
        )?;
        cu!(rt.d, cuDeviceGetUuid(id.uuid.as_mut_ptr(), d))?;
        cu!(rt.d, cuDeviceTotalMem_v2(&mut id.total_mem, d))?;
        let mut p = P::zeroed();
        // An attribute the driver does not have (newer than it) is 0, as on a device
        // without the feature.
        p.fill(&id, &mut |attr| {
            let mut v = 0;
            cu!(rt.d, cuDeviceGetAttribute(&mut v, attr, d)).map_or(0, |()| v)
        });
        // SAFETY: checked non-null; the program's `struct cudaDeviceProp` (the caller).
        unsafe { out(prop, p) }
    })
}

forward! {
    /// `cudaMemGetInfo`.
    fn cudaMemGetInfo(free: *mut usize, total: *mut usize) => cuMemGetInfo_v2(free, total);
}

// ---------------------------------------------------------------------------------------
// Memory.

rt! {
    /// `cudaMalloc`.
    fn cudaMalloc(p: *mut *mut c_void, bytes: usize) {
        let rt = bound()?;
        if p.is_null() {
            return Err(Fail::new(cudaErrorInvalidValue, "null devPtr"));
        }
        let mut d: CUdeviceptr = 0;
        if bytes > 0 {
            cu!(rt.d, cuMemAlloc_v2(&mut d, bytes))?;
        }
        // SAFETY: checked non-null; the program's pointer slot.
        unsafe { out(p, d as usize as *mut c_void) }
    }
}
rt! {
    /// `cudaFree`: a null pointer is success (it also starts the runtime).
    fn cudaFree(p: *mut c_void) {
        let rt = bound()?;
        if p.is_null() {
            return Ok(());
        }
        cu!(rt.d, cuMemFree_v2(p as usize as CUdeviceptr))
    }
}
forward! {
    /// `cudaMallocHost`.
    fn cudaMallocHost(p: *mut *mut c_void, bytes: usize) => cuMemAllocHost_v2(p, bytes);
}
forward! {
    /// `cudaHostAlloc` (`cudaHostAlloc*` flags are the driver's `CU_MEMHOSTALLOC_*`).
    fn cudaHostAlloc(p: *mut *mut c_void, bytes: usize, flags: c_uint) => cuMemHostAlloc(p, bytes, flags);
}
forward! {
    /// `cudaFreeHost`.
    fn cudaFreeHost(p: *mut c_void) => cuMemFreeHost(p);
}
rt! {
    /// `cudaHostGetDevicePointer`.
    fn cudaHostGetDevicePointer(d: *mut *mut c_void, h: *mut c_void, flags: c_uint) {
        let rt = bound()?;
        let mut p: CUdeviceptr = 0;
        cu!(rt.d, cuMemHostGetDevicePointer_v2(&mut p, h, flags))?;
        // SAFETY: the program's pointer slot.
        unsafe { out(d, p as usize as *mut c_void) }
    }
}
forward! {
    /// `cudaHostRegister`.
    fn cudaHostRegister(p: *mut c_void, bytes: usize, flags: c_uint) => cuMemHostRegister_v2(p, bytes, flags);
}
forward! {
    /// `cudaHostUnregister`.
    fn cudaHostUnregister(p: *mut c_void) => cuMemHostUnregister(p);
}
rt! {
    /// `cudaMallocManaged`.
    fn cudaMallocManaged(p: *mut *mut c_void, bytes: usize, flags: c_uint) {
        let rt = bound()?;
        if p.is_null() {
            return Err(Fail::new(cudaErrorInvalidValue, "null devPtr"));
        }
        let mut d: CUdeviceptr = 0;
        cu!(rt.d, cuMemAllocManaged(&mut d, bytes, flags))?;
        // SAFETY: checked non-null; the program's pointer slot.
        unsafe { out(p, d as usize as *mut c_void) }
    }
}

/// `cudaMemcpyKind`.
const HOST_TO_HOST: c_int = 0;
const HOST_TO_DEVICE: c_int = 1;
const DEVICE_TO_HOST: c_int = 2;
const DEVICE_TO_DEVICE: c_int = 3;
const DEFAULT: c_int = 4;

/// Whether `p` is device memory (managed memory counts as device memory): what
/// `cudaMemcpyDefault` asks the driver.
fn is_device(rt: &Runtime, p: *const c_void) -> bool {
    let mut t: c_uint = 0;
    // CU_POINTER_ATTRIBUTE_MEMORY_TYPE (2): CU_MEMORYTYPE_DEVICE is 2.
    cu!(
        rt.d,
        cuPointerGetAttribute((&mut t as *mut c_uint).cast(), 2, p as usize as CUdeviceptr)
    )
    .is_ok()
        && t == 2
}

/// A copy of `n` bytes of `kind` (`cudaMemcpyDefault` resolved by the pointers), on
/// `stream` when given.
///
/// # Safety
/// The pointers are valid for `n` bytes as `kind` says.
unsafe fn memcpy(
    dst: *mut c_void,
    src: *const c_void,
    n: usize,
    kind: c_int,
    stream: Option<Handle>,
) -> R<()> {
    let rt = bound()?;
    if n == 0 {
        return Ok(());
    }
    let kind = match kind {
        DEFAULT => match (is_device(rt, dst), is_device(rt, src)) {
            (true, true) => DEVICE_TO_DEVICE,
            (true, false) => HOST_TO_DEVICE,
            (false, true) => DEVICE_TO_HOST,
            (false, false) => HOST_TO_HOST,
        },
        k @ HOST_TO_HOST..=DEVICE_TO_DEVICE => k,
        k => {
            return Err(Fail::new(
                cudaErrorInvalidMemcpyDirection,
                format!("cudaMemcpyKind {k}"),
            ))
        }
    };
    let (d, s) = (dst as usize as CUdeviceptr, src as usize as CUdeviceptr);
    match (kind, stream) {
        (HOST_TO_DEVICE, None) => cu!(rt.d, cuMemcpyHtoD_v2(d, src, n)),
        (DEVICE_TO_HOST, None) => cu!(rt.d, cuMemcpyDtoH_v2(dst, s, n)),
        (DEVICE_TO_DEVICE, None) => cu!(rt.d, cuMemcpyDtoD_v2(d, s, n)),
        (HOST_TO_DEVICE, Some(st)) => cu!(rt.d, cuMemcpyHtoDAsync_v2(d, src, n, st)),
        (DEVICE_TO_HOST, Some(st)) => cu!(rt.d, cuMemcpyDtoHAsync_v2(dst, s, n, st)),
        (DEVICE_TO_DEVICE, Some(st)) => cu!(rt.d, cuMemcpyDtoDAsync_v2(d, s, n, st)),
        _ => {
            if dst.is_null() || src.is_null() {
                return Err(Fail::new(cudaErrorInvalidValue, "a null pointer"));
            }
            if let Some(st) = stream {
                cu!(rt.d, cuStreamSynchronize(st))?;
            }
            // SAFETY: host memory valid for `n` bytes (the caller); `copy` allows overlap.
            unsafe { std::ptr::copy(src.cast::<u8>(), dst.cast::<u8>(), n) };
            Ok(())
        }
    }
}

rt! {
    /// `cudaMemcpy`.
    fn cudaMemcpy(dst: *mut c_void, src: *const c_void, n: usize, kind: c_int) {
        // SAFETY: the program's buffers.
        unsafe { memcpy(dst, src, n, kind, None) }
    }
}
rt! {
    /// `cudaMemcpyAsync`.
    fn cudaMemcpyAsync(dst: *mut c_void, src: *const c_void, n: usize, kind: c_int, stream: Handle) {
        // SAFETY: the program's buffers.
        unsafe { memcpy(dst, src, n, kind, Some(stream)) }
    }
}
forward! {
    /// `cudaMemset`.
    fn cudaMemset(p: *mut c_void, v: c_int, n: usize) => cuMemsetD8_v2(p as usize as CUdeviceptr, v as u8, n);
}
forward! {
    /// `cudaMemsetAsync`.
    fn cudaMemsetAsync(p: *mut c_void, v: c_int, n: usize, stream: Handle) => cuMemsetD8Async(p as usize as CUdeviceptr, v as u8, n, stream);
}

/// The device range `offset..offset+n` of variable `symbol`, checked.
fn symbol_range(
    symbol: *const c_void,
    n: usize,
    offset: usize,
) -> R<(&'static Runtime, CUdeviceptr)> {
    let rt = bound()?;
    let (p, size) = rt.symbol(symbol as usize)?;
    if offset.checked_add(n).is_none_or(|end| end > size) {
        return Err(Fail::new(
            cudaErrorInvalidValue,
            format!("{n} bytes at offset {offset} of a {size}-byte variable"),
        ));
    }
    Ok((rt, p + offset as u64))
}

rt! {
    /// `cudaMemcpyToSymbol`.
    fn cudaMemcpyToSymbol(symbol: *const c_void, src: *const c_void, n: usize, offset: usize, kind: c_int) {
        let (_, p) = symbol_range(symbol, n, offset)?;
        let kind = if kind == DEFAULT { DEFAULT } else if kind == DEVICE_TO_DEVICE { DEVICE_TO_DEVICE } else { HOST_TO_DEVICE };
        // SAFETY: the program's source of `n` bytes; the variable's range, checked.
        unsafe { memcpy(p as usize as *mut c_void, src, n, kind, None) }
    }
}
rt! {
    /// `cudaMemcpyFromSymbol`.
    fn cudaMemcpyFromSymbol(dst: *mut c_void, symbol: *const c_void, n: usize, offset: usize, kind: c_int) {
        let (_, p) = symbol_range(symbol, n, offset)?;
        let kind = if kind == DEFAULT { DEFAULT } else if kind == DEVICE_TO_DEVICE { DEVICE_TO_DEVICE } else { DEVICE_TO_HOST };
        // SAFETY: the program's destination of `n` bytes; the variable's range, checked.
        unsafe { memcpy(dst, p as usize as *const c_void, n, kind, None) }
    }
}
rt! {
    /// `cudaGetSymbolAddress`.
    fn cudaGetSymbolAddress(d: *mut *mut c_void, symbol: *const c_void) {
        let (_, p) = symbol_range(symbol, 0, 0)?;
        // SAFETY: the program's pointer slot.
        unsafe { out(d, p as usize as *mut c_void) }
    }
}
rt! {
    /// `cudaGetSymbolSize`.
    fn cudaGetSymbolSize(n: *mut usize, symbol: *const c_void) {
        let rt = bound()?;
        let (_, size) = rt.symbol(symbol as usize)?;
        // SAFETY: the program's size slot.
        unsafe { out(n, size) }
    }
}

// ---------------------------------------------------------------------------------------
// Streams and events.

forward! {
    /// `cudaStreamCreate`.
    fn cudaStreamCreate(s: *mut Handle) => cuStreamCreate(s, 0);
}
forward! {
    /// `cudaStreamCreateWithFlags` (`cudaStreamNonBlocking` is the driver's flag).
    fn cudaStreamCreateWithFlags(s: *mut Handle, flags: c_uint) => cuStreamCreate(s, flags);
}
forward! {
    /// `cudaStreamDestroy`.
    fn cudaStreamDestroy(s: Handle) => cuStreamDestroy_v2(s);
}
forward! {
    /// `cudaStreamSynchronize`.
    fn cudaStreamSynchronize(s: Handle) => cuStreamSynchronize(s);
}
forward! {
    /// `cudaStreamQuery`: `cudaErrorNotReady` while busy.
    fn cudaStreamQuery(s: Handle) => cuStreamQuery(s);
}
forward! {
    /// `cudaStreamWaitEvent`.
    fn cudaStreamWaitEvent(s: Handle, e: Handle, flags: c_uint) => cuStreamWaitEvent(s, e, flags);
}
rt! {
    /// `cudaLaunchHostFunc`.
    fn cudaLaunchHostFunc(s: Handle, f: Option<unsafe extern "C" fn(*mut c_void)>, data: *mut c_void) {
        let rt = bound()?;
        cu!(rt.d, cuLaunchHostFunc(s, f, data))
    }
}
forward! {
    /// `cudaEventCreate`.
    fn cudaEventCreate(e: *mut Handle) => cuEventCreate(e, 0);
}
forward! {
    /// `cudaEventCreateWithFlags` (the flags are the driver's).
    fn cudaEventCreateWithFlags(e: *mut Handle, flags: c_uint) => cuEventCreate(e, flags);
}
forward! {
    /// `cudaEventRecord`.
    fn cudaEventRecord(e: Handle, s: Handle) => cuEventRecord(e, s);
}
forward! {
    /// `cudaEventSynchronize`.
    fn cudaEventSynchronize(e: Handle) => cuEventSynchronize(e);
}
forward! {
    /// `cudaEventQuery`.
    fn cudaEventQuery(e: Handle) => cuEventQuery(e);
}
forward! {
    /// `cudaEventElapsedTime`.
    fn cudaEventElapsedTime(ms: *mut f32, a: Handle, b: Handle) => cuEventElapsedTime(ms, a, b);
}
forward! {
    /// `cudaEventDestroy`.
    fn cudaEventDestroy(e: Handle) => cuEventDestroy_v2(e);
}

// ---------------------------------------------------------------------------------------
// Kernels' attributes and occupancy.

/// `struct cudaFuncAttributes` (CUDA 13).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct FuncAttributes {
    shared_size_bytes: usize,
    const_size_bytes: usize,
    local_size_bytes: usize,
    max_threads_per_block: c_int,
    num_regs: c_int,
    ptx_version: c_int,
    binary_version: c_int,
    cache_mode_ca: c_int,
    max_dynamic_shared_size_bytes: c_int,
    preferred_shmem_carveout: c_int,
    cluster_dim_must_be_set: c_int,
    required_cluster_width: c_int,
    required_cluster_height: c_int,
    required_cluster_depth: c_int,
    cluster_scheduling_policy_preference: c_int,
    non_portable_cluster_size_allowed: c_int,
    reserved: [c_int; 16],
}

rt! {
    /// `cudaGetFuncBySymbol`: the driver's `CUfunction` of a registered kernel (loading
    /// its module on the current device if not yet loaded).
    fn cudaGetFuncBySymbol(f: *mut Handle, symbol: *const c_void) {
        let rt = bound()?;
        let h = rt.function(symbol as usize)?;
        // SAFETY: the program's `cudaFunction_t` to fill.
        unsafe { out(f, h) }
    }
}

rt! {
    /// `cudaFuncGetAttributes`: each field from the driver's `CU_FUNC_ATTRIBUTE_*` of
    /// the same meaning.
    fn cudaFuncGetAttributes(attr: *mut FuncAttributes, func: *const c_void) {
        let rt = bound()?;
        let f = rt.function(func as usize)?;
        let get = |a: c_int| -> R<c_int> {
            let mut v = 0;
            cu!(rt.d, cuFuncGetAttribute(&mut v, a, f))?;
            Ok(v)
        };
        let a = FuncAttributes {
            max_threads_per_block: get(0)?,
            shared_size_bytes: get(1)? as usize,
            const_size_bytes: get(2)? as usize,
            local_size_bytes: get(3)? as usize,
            num_regs: get(4)?,
            ptx_version: get(5)?,
            binary_version: get(6)?,
            cache_mode_ca: get(7)?,
            max_dynamic_shared_size_bytes: get(8)?,
            preferred_shmem_carveout: get(9)?,
            cluster_dim_must_be_set: get(10).unwrap_or(0),
            required_cluster_width: get(11).unwrap_or(0),
            required_cluster_height: get(12).unwrap_or(0),
            required_cluster_depth: get(13).unwrap_or(0),
            non_portable_cluster_size_allowed: get(14).unwrap_or(0),
            cluster_scheduling_policy_preference: get(15).unwrap_or(0),
            reserved: [0; 16],
        };
        // SAFETY: the program's `struct cudaFuncAttributes`.
        unsafe { out(attr, a) }
    }
}
rt! {
    /// `cudaFuncSetAttribute`: `cudaFuncAttribute` numbers are the driver's.
    fn cudaFuncSetAttribute(func: *const c_void, attr: c_int, value: c_int) {
        let rt = bound()?;
        let f = rt.function(func as usize)?;
        cu!(rt.d, cuFuncSetAttribute(f, attr, value))
    }
}
rt! {
    /// `cudaFuncSetCacheConfig`: a hint, taken (the kernel must be registered).
    fn cudaFuncSetCacheConfig(func: *const c_void, _config: c_int) {
        bound()?.function(func as usize).map(drop)
    }
}
rt! {
    /// `cudaOccupancyMaxActiveBlocksPerMultiprocessor`.
    fn cudaOccupancyMaxActiveBlocksPerMultiprocessor(n: *mut c_int, func: *const c_void, block: c_int, shared: usize) {
        let rt = bound()?;
        let f = rt.function(func as usize)?;
        cu!(rt.d, cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(n, f, block, shared, 0))
    }
}
rt! {
    /// `cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags`.
    fn cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(n: *mut c_int, func: *const c_void, block: c_int, shared: usize, flags: c_uint) {
        let rt = bound()?;
        let f = rt.function(func as usize)?;
        cu!(rt.d, cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(n, f, block, shared, flags))
    }
}

// ---------------------------------------------------------------------------------------
// More of streams, events, memory and devices: each the driver call of the same meaning.

rt! {
    /// `cudaStreamAddCallback` (`cudaStreamCallback_t` has the driver callback's shape;
    /// the status passed is the driver's code, which the runtime shares).
    fn cudaStreamAddCallback(s: Handle, cb: Option<unsafe extern "C" fn(Handle, c_int, *mut c_void)>, data: *mut c_void, flags: c_uint) {
        let rt = bound()?;
        cu!(rt.d, cuStreamAddCallback(s, cb, data, flags))
    }
}
forward! {
    /// `cudaStreamCreateWithPriority`.
    fn cudaStreamCreateWithPriority(s: *mut Handle, flags: c_uint, priority: c_int) => cuStreamCreateWithPriority(s, flags, priority);
}
forward! {
    /// `cudaDeviceGetStreamPriorityRange`.
    fn cudaDeviceGetStreamPriorityRange(least: *mut c_int, greatest: *mut c_int) => cuCtxGetStreamPriorityRange(least, greatest);
}
forward! {
    /// `cudaEventRecordWithFlags`.
    fn cudaEventRecordWithFlags(e: Handle, s: Handle, flags: c_uint) => cuEventRecordWithFlags(e, s, flags);
}
rt! {
    /// `cudaMallocAsync`: from the device's memory pool, in stream order.
    fn cudaMallocAsync(p: *mut *mut c_void, bytes: usize, s: Handle) {
        let rt = bound()?;
        if p.is_null() {
            return Err(Fail::new(cudaErrorInvalidValue, "null devPtr"));
        }
        let mut d: CUdeviceptr = 0;
        cu!(rt.d, cuMemAllocAsync(&mut d, bytes, s))?;
        // SAFETY: checked non-null; the program's pointer slot.
        unsafe { out(p, d as usize as *mut c_void) }
    }
}
forward! {
    /// `cudaFreeAsync`.
    fn cudaFreeAsync(p: *mut c_void, s: Handle) => cuMemFreeAsync(p as usize as CUdeviceptr, s);
}
rt! {
    /// `cudaMemcpyToSymbolAsync`.
    fn cudaMemcpyToSymbolAsync(symbol: *const c_void, src: *const c_void, n: usize, offset: usize, kind: c_int, s: Handle) {
        let (_, p) = symbol_range(symbol, n, offset)?;
        let kind = if kind == DEFAULT || kind == DEVICE_TO_DEVICE { kind } else { HOST_TO_DEVICE };
        // SAFETY: the program's source of `n` bytes; the variable's range, checked.
        unsafe { memcpy(p as usize as *mut c_void, src, n, kind, Some(s)) }
    }
}
rt! {
    /// `cudaMemcpyFromSymbolAsync`.
    fn cudaMemcpyFromSymbolAsync(dst: *mut c_void, symbol: *const c_void, n: usize, offset: usize, kind: c_int, s: Handle) {
        let (_, p) = symbol_range(symbol, n, offset)?;
        let kind = if kind == DEFAULT || kind == DEVICE_TO_DEVICE { kind } else { DEVICE_TO_HOST };
        // SAFETY: the program's destination of `n` bytes; the variable's range, checked.
        unsafe { memcpy(dst, p as usize as *const c_void, n, kind, Some(s)) }
    }
}
/// `cudaMemPrefetchAsync` in CUDA 13's form (a `cudaMemLocation`; CUDA 12's
/// `cudaMemPrefetchAsync_v2`), under the exported `name`.
///
/// # Safety
/// The arguments are what `cuda_runtime_api.h` 13 describes.
pub unsafe fn mem_prefetch_async(
    name: &'static str,
    p: *const c_void,
    n: usize,
    location: crate::driver::MemLocation,
    flags: c_uint,
    s: Handle,
) -> CudaError {
    call(name, || {
        let rt = bound()?;
        check_location(rt, location)?;
        cu!(
            rt.d,
            cuMemPrefetchAsync_v2(p as usize as CUdeviceptr, n, location, flags, s)
        )
    })
}

/// `cudaMemAdvise` in CUDA 13's form (a `cudaMemLocation`; CUDA 12's `cudaMemAdvise_v2`),
/// under the exported `name`.
///
/// # Safety
/// The arguments are what `cuda_runtime_api.h` 13 describes.
pub unsafe fn mem_advise(
    name: &'static str,
    p: *const c_void,
    n: usize,
    advice: c_int,
    location: crate::driver::MemLocation,
) -> CudaError {
    call(name, || {
        let rt = bound()?;
        // cudaMemAdviseSetPreferredLocation 3, SetAccessedBy 5, UnsetAccessedBy 6 name a
        // location; the other advice ignores it.
        if matches!(advice, 3 | 5 | 6) {
            check_location(rt, location)?;
        }
        cu!(
            rt.d,
            cuMemAdvise_v2(p as usize as CUdeviceptr, n, advice, location)
        )
    })
}

/// A device location names a device there is (`cudaErrorInvalidDevice`, as the runtime
/// answers; the driver does not look).
fn check_location(rt: &Runtime, location: crate::driver::MemLocation) -> R<()> {
    // cudaMemLocationTypeDevice.
    if location.ty == 1 && !(0..rt.devices).contains(&location.id) {
        return Err(Fail::new(
            cudaErrorInvalidDevice,
            format!("device {} of {}", location.id, rt.devices),
        ));
    }
    Ok(())
}

/// The `cudaMemLocation` CUDA 12's device-number forms mean: `cudaCpuDeviceId` (-1) is
/// the host, a device number that device (any other number too, which the prefetch or
/// advice then refuses: `cudaErrorInvalidDevice`).
pub fn device_location(device: c_int) -> crate::driver::MemLocation {
    // cudaMemLocationTypeDevice 1, cudaMemLocationTypeHost 2.
    match device {
        -1 => crate::driver::MemLocation { ty: 2, id: 0 },
        d => crate::driver::MemLocation { ty: 1, id: d },
    }
}

forward! {
    /// `cudaDeviceGetLimit` (`cudaLimit` numbers are the driver's).
    fn cudaDeviceGetLimit(v: *mut usize, limit: c_int) => cuCtxGetLimit(v, limit);
}
forward! {
    /// `cudaDeviceSetLimit`.
    fn cudaDeviceSetLimit(limit: c_int, v: usize) => cuCtxSetLimit(limit, v);
}
rt! {
    /// `cudaDeviceGetPCIBusId`.
    fn cudaDeviceGetPCIBusId(id: *mut c_char, len: c_int, d: c_int) {
        let rt = runtime()?;
        cu!(rt.d, cuDeviceGetPCIBusId(id, len, d))
    }
}
rt! {
    /// `cudaDeviceCanAccessPeer`.
    fn cudaDeviceCanAccessPeer(can: *mut c_int, d: c_int, peer: c_int) {
        let rt = runtime()?;
        cu!(rt.d, cuDeviceCanAccessPeer(can, d, peer))
    }
}
rt! {
    /// `cudaDeviceEnablePeerAccess`: for this thread's device, to `peer`'s memory.
    fn cudaDeviceEnablePeerAccess(peer: c_int, flags: c_uint) {
        let rt = bound()?;
        let p = rt.context_of(peer)?;
        cu!(rt.d, cuCtxEnablePeerAccess(p, flags))
    }
}
rt! {
    /// `cudaMemcpyPeer`: between the memory of two devices.
    fn cudaMemcpyPeer(dst: *mut c_void, dst_dev: c_int, src: *const c_void, src_dev: c_int, n: usize) {
        let rt = bound()?;
        let (dc, sc) = (rt.context_of(dst_dev)?, rt.context_of(src_dev)?);
        cu!(rt.d, cuMemcpyPeer(dst as usize as CUdeviceptr, dc, src as usize as CUdeviceptr, sc, n))
    }
}
rt! {
    /// `cudaMemcpyPeerAsync`.
    fn cudaMemcpyPeerAsync(dst: *mut c_void, dst_dev: c_int, src: *const c_void, src_dev: c_int, n: usize, s: Handle) {
        let rt = bound()?;
        let (dc, sc) = (rt.context_of(dst_dev)?, rt.context_of(src_dev)?);
        cu!(rt.d, cuMemcpyPeerAsync(dst as usize as CUdeviceptr, dc, src as usize as CUdeviceptr, sc, n, s))
    }
}
rt! {
    /// `cudaSetDeviceFlags`: taken (scheduling and mapping hints; mapping is always on).
    fn cudaSetDeviceFlags(_flags: c_uint) {
        runtime().map(drop)
    }
}
rt! {
    /// `cudaDeviceSetCacheConfig`: a hint, taken.
    fn cudaDeviceSetCacheConfig(_config: c_int) {
        runtime().map(drop)
    }
}
rt! {
    /// `cudaProfilerStart`: no profiler is attached; success, as without one.
    fn cudaProfilerStart() {
        runtime().map(drop)
    }
}
rt! {
    /// `cudaProfilerStop`.
    fn cudaProfilerStop() {
        runtime().map(drop)
    }
}

/// `struct cudaPointerAttributes`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct PointerAttributes {
    ty: c_int,
    device: c_int,
    device_pointer: *mut c_void,
    host_pointer: *mut c_void,
}

rt! {
    /// `cudaPointerGetAttributes`: host memory the driver did not make is
    /// `cudaMemoryTypeUnregistered`, as the runtime answers.
    fn cudaPointerGetAttributes(attr: *mut PointerAttributes, p: *const c_void) {
        let rt = bound()?;
        let get = |a: c_int, out: *mut c_void| cu!(rt.d, cuPointerGetAttribute(out, a, p as usize as CUdeviceptr));
        let mut mem_type: c_uint = 0;
        let mut a = PointerAttributes {
            ty: 0,
            device: -2,
            device_pointer: std::ptr::null_mut(),
            host_pointer: std::ptr::null_mut(),
        };
        if get(2, (&mut mem_type as *mut c_uint).cast()).is_ok() {
            let mut managed: c_int = 0;
            let _ = get(8, (&mut managed as *mut c_int).cast());
            let mut ordinal: c_int = 0;
            let _ = get(9, (&mut ordinal as *mut c_int).cast());
            let mut dp: CUdeviceptr = 0;
            let _ = get(3, (&mut dp as *mut CUdeviceptr).cast());
            let mut hp: *mut c_void = std::ptr::null_mut();
            let _ = get(4, (&mut hp as *mut *mut c_void).cast());
            // cudaMemoryTypeHost 1, Device 2, Managed 3.
            a.ty = if managed != 0 { 3 } else { mem_type as c_int };
            a.device = ordinal;
            a.device_pointer = dp as usize as *mut c_void;
            a.host_pointer = hp;
        }
        // SAFETY: the program's `struct cudaPointerAttributes`.
        unsafe { out(attr, a) }
    }
}

// ---------------------------------------------------------------------------------------
// Stream capture and graphs (the driver's, which records above every backend).

forward! {
    /// `cudaStreamBeginCapture` (`cudaStreamCaptureMode` numbers are the driver's).
    fn cudaStreamBeginCapture(s: Handle, mode: c_int) => cuStreamBeginCapture_v2(s, mode);
}
forward! {
    /// `cudaStreamEndCapture`.
    fn cudaStreamEndCapture(s: Handle, g: *mut Handle) => cuStreamEndCapture(s, g);
}
forward! {
    /// `cudaStreamIsCapturing`.
    fn cudaStreamIsCapturing(s: Handle, status: *mut c_int) => cuStreamIsCapturing(s, status);
}
forward! {
    /// `cudaStreamSetAttribute` (`cudaStreamAttrValue` is the driver's union).
    fn cudaStreamSetAttribute(s: Handle, attr: c_int, v: *const c_void) => cuStreamSetAttribute(s, attr, v);
}
forward! {
    /// `cudaStreamGetAttribute`.
    fn cudaStreamGetAttribute(s: Handle, attr: c_int, v: *mut c_void) => cuStreamGetAttribute(s, attr, v);
}
forward! {
    /// `cudaStreamCopyAttributes`.
    fn cudaStreamCopyAttributes(dst: Handle, src: Handle) => cuStreamCopyAttributes(dst, src);
}
rt! {
    /// `cudaStreamCopyAttributes_ptsz`: either default stream is this thread's.
    fn cudaStreamCopyAttributes_ptsz(dst: Handle, src: Handle) {
        let rt = bound()?;
        cu!(rt.d, cuStreamCopyAttributes(per_thread(dst), per_thread(src)))
    }
}
forward! {
    /// `cudaGraphAddChildGraphNode`: a node running a copy of `child`.
    fn cudaGraphAddChildGraphNode(node: *mut Handle, g: Handle, deps: *const Handle, n: usize, child: Handle) => cuGraphAddChildGraphNode(node, g, deps, n, child);
}
forward! {
    /// `cudaGraphChildGraphNodeGetGraph`.
    fn cudaGraphChildGraphNodeGetGraph(node: Handle, g: *mut Handle) => cuGraphChildGraphNodeGetGraph(node, g);
}
forward! {
    /// `cudaGraphAddEventRecordNode`.
    fn cudaGraphAddEventRecordNode(node: *mut Handle, g: Handle, deps: *const Handle, n: usize, e: Handle) => cuGraphAddEventRecordNode(node, g, deps, n, e);
}
forward! {
    /// `cudaGraphAddEventWaitNode`.
    fn cudaGraphAddEventWaitNode(node: *mut Handle, g: Handle, deps: *const Handle, n: usize, e: Handle) => cuGraphAddEventWaitNode(node, g, deps, n, e);
}
forward! {
    /// `cudaGraphEventRecordNodeGetEvent`.
    fn cudaGraphEventRecordNodeGetEvent(node: Handle, e: *mut Handle) => cuGraphEventRecordNodeGetEvent(node, e);
}
forward! {
    /// `cudaGraphEventRecordNodeSetEvent`.
    fn cudaGraphEventRecordNodeSetEvent(node: Handle, e: Handle) => cuGraphEventRecordNodeSetEvent(node, e);
}
forward! {
    /// `cudaGraphEventWaitNodeGetEvent`.
    fn cudaGraphEventWaitNodeGetEvent(node: Handle, e: *mut Handle) => cuGraphEventWaitNodeGetEvent(node, e);
}
forward! {
    /// `cudaGraphEventWaitNodeSetEvent`.
    fn cudaGraphEventWaitNodeSetEvent(node: Handle, e: Handle) => cuGraphEventWaitNodeSetEvent(node, e);
}
forward! {
    /// `cudaGraphExecEventRecordNodeSetEvent`.
    fn cudaGraphExecEventRecordNodeSetEvent(x: Handle, node: Handle, e: Handle) => cuGraphExecEventRecordNodeSetEvent(x, node, e);
}
forward! {
    /// `cudaGraphExecEventWaitNodeSetEvent`.
    fn cudaGraphExecEventWaitNodeSetEvent(x: Handle, node: Handle, e: Handle) => cuGraphExecEventWaitNodeSetEvent(x, node, e);
}
forward! {
    /// `cudaCtxResetPersistingL2Cache`.
    fn cudaCtxResetPersistingL2Cache() => cuCtxResetPersistingL2Cache();
}
forward! {
    /// `cudaStreamBeginCaptureToGraph`: capture into the program's graph.
    fn cudaStreamBeginCaptureToGraph(s: Handle, g: Handle, deps: *const Handle, edges: *const c_void, n: usize, mode: c_int) => cuStreamBeginCaptureToGraph(s, g, deps, edges, n, mode);
}
/// `cudaStreamGetCaptureInfo` in CUDA 13's form (with edge data; CUDA 12's `_v3`),
/// which the soname's crate exports.
///
/// # Safety
/// Each pointer is null or writable for its type.
#[allow(clippy::too_many_arguments)]
pub unsafe fn stream_get_capture_info(
    name: &'static str,
    s: Handle,
    status: *mut c_int,
    id: *mut u64,
    g: *mut Handle,
    deps: *mut *const Handle,
    edges: *mut *const c_void,
    n: *mut usize,
) -> CudaError {
    call(name, || {
        let rt = bound()?;
        cu!(
            rt.d,
            cuStreamGetCaptureInfo_v3(s, status, id, g, deps, edges, n)
        )
    })
}

/// `cudaStreamUpdateCaptureDependencies` in CUDA 13's form (with edge data; CUDA 12's
/// `_v2`), which the soname's crate exports.
///
/// # Safety
/// `deps` is null or `n` node handles; `edges` null or `n` edge data.
pub unsafe fn stream_update_capture_dependencies(
    name: &'static str,
    s: Handle,
    deps: *const Handle,
    edges: *const c_void,
    n: usize,
    flags: c_uint,
) -> CudaError {
    call(name, || {
        let rt = bound()?;
        cu!(
            rt.d,
            cuStreamUpdateCaptureDependencies_v2(s, deps, edges, n, flags)
        )
    })
}
forward! {
    /// `cudaGraphConditionalHandleCreate` (in the current context).
    fn cudaGraphConditionalHandleCreate(h: *mut u64, g: Handle, default: c_uint, flags: c_uint) => cuGraphConditionalHandleCreate(h, g, std::ptr::null_mut(), default, flags);
}

/// `struct cudaGraphNodeParams`: the driver's `CUgraphNodeParams` but for a kernel
/// node's host stub and a memcpy node's runtime copy parameters.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct GraphNodeParams {
    ty: c_int,
    reserved0: [c_int; 3],
    u: [u64; 29],
    reserved2: i64,
}

/// `cudaGraphAddNode` in CUDA 13's form (with edge data; CUDA 12's `_v2`), which the
/// soname's crate exports: the driver's node, a kernel node given the registered
/// kernel's function for its host stub; memcpy nodes through here are not supported
/// (`cudaGraphAddMemcpyNode` is).
///
/// # Safety
/// `node` is null or a node slot; `deps` null or `n` node handles; `edges` null or `n`
/// edge data; `p` null or the program's `cudaGraphNodeParams`.
pub unsafe fn graph_add_node(
    name: &'static str,
    node: *mut Handle,
    g: Handle,
    deps: *const Handle,
    edges: *const c_void,
    n: usize,
    p: *mut GraphNodeParams,
) -> CudaError {
    call(name, || {
        let rt = bound()?;
        // SAFETY: null or the program's parameters.
        let params = unsafe { p.as_ref() }
            .ok_or_else(|| Fail::new(cudaErrorInvalidValue, "null nodeParams"))?;
        match params.ty {
            // cudaGraphNodeTypeKernel: `cudaKernelNodeParamsV2` starts with the stub.
            0 => {
                let mut d = *params;
                d.u[0] = rt.function(params.u[0] as usize)? as u64;
                cu!(
                    rt.d,
                    cuGraphAddNode_v2(
                        node,
                        g,
                        deps,
                        edges,
                        n,
                        (&mut d as *mut GraphNodeParams).cast()
                    )
                )
            }
            1 => Err(Fail::new(
                cudaErrorNotSupported,
                "a memcpy node through cudaGraphAddNode (cudaGraphAddMemcpyNode makes one)",
            )),
            // The driver writes a conditional node's body graphs into the program's.
            _ => cu!(rt.d, cuGraphAddNode_v2(node, g, deps, edges, n, p.cast())),
        }
    })
}

forward! {
    /// `cudaGraphInstantiate` (CUDA 12 and later: flags).
    fn cudaGraphInstantiate(x: *mut Handle, g: Handle, flags: u64) => cuGraphInstantiateWithFlags(x, g, flags);
}
forward! {
    /// `cudaGraphInstantiateWithFlags`.
    fn cudaGraphInstantiateWithFlags(x: *mut Handle, g: Handle, flags: u64) => cuGraphInstantiateWithFlags(x, g, flags);
}
forward! {
    /// `cudaGraphLaunch`.
    fn cudaGraphLaunch(x: Handle, s: Handle) => cuGraphLaunch(x, s);
}
forward! {
    /// `cudaGraphExecDestroy`.
    fn cudaGraphExecDestroy(x: Handle) => cuGraphExecDestroy(x);
}
forward! {
    /// `cudaGraphDestroy`.
    fn cudaGraphDestroy(g: Handle) => cuGraphDestroy(g);
}

// Graphs built node by node (the driver's nodes; the runtime's parameters converted).

forward! {
    /// `cudaGraphCreate`.
    fn cudaGraphCreate(g: *mut Handle, flags: c_uint) => cuGraphCreate(g, flags);
}

/// `struct cudaKernelNodeParams`, the driver's `CUDA_KERNEL_NODE_PARAMS` with the
/// kernel's host stub for its function.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct KernelNodeParams {
    func: *const c_void,
    grid: Dim3,
    block: Dim3,
    shared: c_uint,
    params: *mut *mut c_void,
    extra: *mut *mut c_void,
}

/// A kernel node's parameters as the driver's (CUDA 11's layout, which the runtime's
/// shares): the registered kernel's function for its host stub.
fn driver_kernel_params(rt: &Runtime, p: *const KernelNodeParams) -> R<KernelNodeParams> {
    // SAFETY: null or the program's parameters.
    let p = unsafe { p.as_ref() }
        .ok_or_else(|| Fail::new(cudaErrorInvalidValue, "null pNodeParams"))?;
    let mut driver_params = *p;
    driver_params.func = rt.function(p.func as usize)? as *const c_void;
    Ok(driver_params)
}

rt! {
    /// `cudaGraphAddKernelNode`: the registered kernel's function in the node.
    fn cudaGraphAddKernelNode(node: *mut Handle, g: Handle, deps: *const Handle, n: usize, p: *const KernelNodeParams) {
        let rt = bound()?;
        let dp = driver_kernel_params(rt, p)?;
        cu!(rt.d, cuGraphAddKernelNode(node, g, deps, n, (&dp as *const KernelNodeParams).cast()))
    }
}
rt! {
    /// `cudaGraphKernelNodeSetParams`.
    fn cudaGraphKernelNodeSetParams(node: Handle, p: *const KernelNodeParams) {
        let rt = bound()?;
        let dp = driver_kernel_params(rt, p)?;
        cu!(rt.d, cuGraphKernelNodeSetParams(node, (&dp as *const KernelNodeParams).cast()))
    }
}
rt! {
    /// `cudaGraphExecKernelNodeSetParams`.
    fn cudaGraphExecKernelNodeSetParams(x: Handle, node: Handle, p: *const KernelNodeParams) {
        let rt = bound()?;
        let dp = driver_kernel_params(rt, p)?;
        cu!(rt.d, cuGraphExecKernelNodeSetParams(x, node, (&dp as *const KernelNodeParams).cast()))
    }
}
forward! {
    /// `cudaGraphExecUpdate` (`cudaGraphExecUpdateResultInfo` is the driver's layout).
    fn cudaGraphExecUpdate(x: Handle, g: Handle, info: *mut c_void) => cuGraphExecUpdate_v2(x, g, info);
}
forward! {
    /// `cudaGraphHostNodeSetParams`.
    fn cudaGraphHostNodeSetParams(node: Handle, p: *const c_void) => cuGraphHostNodeSetParams(node, p);
}
forward! {
    /// `cudaGraphExecHostNodeSetParams`.
    fn cudaGraphExecHostNodeSetParams(x: Handle, node: Handle, p: *const c_void) => cuGraphExecHostNodeSetParams(x, node, p);
}
forward! {
    /// `cudaGraphMemsetNodeSetParams` (`struct cudaMemsetParams` is the driver's layout).
    fn cudaGraphMemsetNodeSetParams(node: Handle, p: *const c_void) => cuGraphMemsetNodeSetParams(node, p);
}
rt! {
    /// `cudaGraphExecMemsetNodeSetParams`.
    fn cudaGraphExecMemsetNodeSetParams(x: Handle, node: Handle, p: *const c_void) {
        let rt = bound()?;
        let ctx = rt.context_of(state::device())?;
        cu!(rt.d, cuGraphExecMemsetNodeSetParams(x, node, p, ctx))
    }
}

rt! {
    /// `cudaGraphMemcpyNodeSetParams` (linear memory; arrays `cudaErrorNotSupported`).
    fn cudaGraphMemcpyNodeSetParams(node: Handle, p: *const Memcpy3DParms) {
        let rt = bound()?;
        // SAFETY: null or the program's parameters.
        let p = unsafe { p.as_ref() }.ok_or_else(|| Fail::new(cudaErrorInvalidValue, "null pNodeParams"))?;
        let c = driver_copy(p)?;
        cu!(rt.d, cuGraphMemcpyNodeSetParams(node, (&c as *const DriverMemcpy3D).cast()))
    }
}
rt! {
    /// `cudaGraphExecMemcpyNodeSetParams` (linear memory; arrays `cudaErrorNotSupported`).
    fn cudaGraphExecMemcpyNodeSetParams(x: Handle, node: Handle, p: *const Memcpy3DParms) {
        let rt = bound()?;
        // SAFETY: null or the program's parameters.
        let p = unsafe { p.as_ref() }.ok_or_else(|| Fail::new(cudaErrorInvalidValue, "null pNodeParams"))?;
        let c = driver_copy(p)?;
        let ctx = rt.context_of(state::device())?;
        cu!(rt.d, cuGraphExecMemcpyNodeSetParams(x, node, (&c as *const DriverMemcpy3D).cast(), ctx))
    }
}

/// `struct cudaPos` and `struct cudaExtent` (three `size_t`s each).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct Size3 {
    x: usize,
    y: usize,
    z: usize,
}

/// `struct cudaPitchedPtr`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct PitchedPtr {
    ptr: *mut c_void,
    pitch: usize,
    xsize: usize,
    ysize: usize,
}

/// `struct cudaMemcpy3DParms`.
#[repr(C)]
#[derive(Debug)]
pub struct Memcpy3DParms {
    src_array: Handle,
    src_pos: Size3,
    src_ptr: PitchedPtr,
    dst_array: Handle,
    dst_pos: Size3,
    dst_ptr: PitchedPtr,
    extent: Size3,
    kind: c_int,
}

/// The driver's `CUDA_MEMCPY3D`.
#[repr(C)]
#[derive(Debug, Default)]
struct DriverMemcpy3D {
    src_x: usize,
    src_y: usize,
    src_z: usize,
    src_lod: usize,
    src_type: c_int,
    src_host: usize,
    src_device: CUdeviceptr,
    src_array: usize,
    reserved0: usize,
    src_pitch: usize,
    src_height: usize,
    dst_x: usize,
    dst_y: usize,
    dst_z: usize,
    dst_lod: usize,
    dst_type: c_int,
    dst_host: usize,
    dst_device: CUdeviceptr,
    dst_array: usize,
    reserved1: usize,
    dst_pitch: usize,
    dst_height: usize,
    width: usize,
    height: usize,
    depth: usize,
}

/// A `cudaMemcpy3DParms` as the driver's copy: `cudaMemcpyKind` gives each linear
/// side's memory type (`cudaMemcpyDefault`: unified addressing decides); an array side
/// is the driver's array.
fn driver_copy(p: &Memcpy3DParms) -> R<DriverMemcpy3D> {
    // CUmemorytype: host 1, device 2, array 3, unified 4.
    let (src_type, dst_type) = match p.kind {
        0 => (1, 1),
        1 => (1, 2),
        2 => (2, 1),
        3 => (2, 2),
        4 => (4, 4),
        k => {
            return Err(Fail::new(
                cudaErrorInvalidMemcpyDirection,
                format!("cudaMemcpyKind {k}"),
            ))
        }
    };
    // An array side: positions and the width in elements, which the driver takes in
    // bytes.
    let (src_x, dst_x, width) = textures::array_extent_bytes(p)?;
    let array = |a: Handle, ty: c_int| if a.is_null() { ty } else { 3 };
    let (src, dst) = (p.src_ptr.ptr as usize, p.dst_ptr.ptr as usize);
    Ok(DriverMemcpy3D {
        src_x,
        src_y: p.src_pos.y,
        src_z: p.src_pos.z,
        src_type: array(p.src_array, src_type),
        src_host: src,
        src_device: src as CUdeviceptr,
        src_array: p.src_array as usize,
        src_pitch: p.src_ptr.pitch,
        src_height: p.src_ptr.ysize,
        dst_x,
        dst_y: p.dst_pos.y,
        dst_z: p.dst_pos.z,
        dst_type: array(p.dst_array, dst_type),
        dst_host: dst,
        dst_device: dst as CUdeviceptr,
        dst_array: p.dst_array as usize,
        dst_pitch: p.dst_ptr.pitch,
        dst_height: p.dst_ptr.ysize,
        width,
        height: p.extent.y,
        depth: p.extent.z,
        ..DriverMemcpy3D::default()
    })
}

rt! {
    /// `cudaGraphAddMemcpyNode` (linear memory; arrays `cudaErrorNotSupported`).
    fn cudaGraphAddMemcpyNode(node: *mut Handle, g: Handle, deps: *const Handle, n: usize, p: *const Memcpy3DParms) {
        let rt = bound()?;
        // SAFETY: null or the program's parameters.
        let p = unsafe { p.as_ref() }.ok_or_else(|| Fail::new(cudaErrorInvalidValue, "null pCopyParams"))?;
        let c = driver_copy(p)?;
        let ctx = rt.context_of(state::device())?;
        cu!(rt.d, cuGraphAddMemcpyNode(node, g, deps, n, (&c as *const DriverMemcpy3D).cast(), ctx))
    }
}
/// A linear copy of `count` bytes as the driver's copy (`cudaGraph*MemcpyNode*1D`).
fn copy_1d(dst: *mut c_void, src: *const c_void, count: usize, kind: c_int) -> R<DriverMemcpy3D> {
    let at = |ptr: usize| PitchedPtr {
        ptr: ptr as *mut c_void,
        pitch: count,
        xsize: count,
        ysize: 1,
    };
    let origin = Size3 { x: 0, y: 0, z: 0 };
    driver_copy(&Memcpy3DParms {
        src_array: std::ptr::null_mut(),
        src_pos: origin,
        src_ptr: at(src as usize),
        dst_array: std::ptr::null_mut(),
        dst_pos: origin,
        dst_ptr: at(dst as usize),
        extent: Size3 {
            x: count,
            y: 1,
            z: 1,
        },
        kind,
    })
}

rt! {
    /// `cudaGraphAddMemcpyNode1D`: `count` bytes of linear memory.
    fn cudaGraphAddMemcpyNode1D(node: *mut Handle, g: Handle, deps: *const Handle, n: usize, dst: *mut c_void, src: *const c_void, count: usize, kind: c_int) {
        let rt = bound()?;
        let c = copy_1d(dst, src, count, kind)?;
        let ctx = rt.context_of(state::device())?;
        cu!(rt.d, cuGraphAddMemcpyNode(node, g, deps, n, (&c as *const DriverMemcpy3D).cast(), ctx))
    }
}
rt! {
    /// `cudaGraphMemcpyNodeSetParams1D`.
    fn cudaGraphMemcpyNodeSetParams1D(node: Handle, dst: *mut c_void, src: *const c_void, count: usize, kind: c_int) {
        let rt = bound()?;
        let c = copy_1d(dst, src, count, kind)?;
        cu!(rt.d, cuGraphMemcpyNodeSetParams(node, (&c as *const DriverMemcpy3D).cast()))
    }
}
rt! {
    /// `cudaGraphExecMemcpyNodeSetParams1D`.
    fn cudaGraphExecMemcpyNodeSetParams1D(x: Handle, node: Handle, dst: *mut c_void, src: *const c_void, count: usize, kind: c_int) {
        let rt = bound()?;
        let c = copy_1d(dst, src, count, kind)?;
        let ctx = rt.context_of(state::device())?;
        cu!(rt.d, cuGraphExecMemcpyNodeSetParams(x, node, (&c as *const DriverMemcpy3D).cast(), ctx))
    }
}
rt! {
    /// `cudaGraphAddMemsetNode` (`struct cudaMemsetParams` is the driver's layout).
    fn cudaGraphAddMemsetNode(node: *mut Handle, g: Handle, deps: *const Handle, n: usize, p: *const c_void) {
        let rt = bound()?;
        let ctx = rt.context_of(state::device())?;
        cu!(rt.d, cuGraphAddMemsetNode(node, g, deps, n, p, ctx))
    }
}
forward! {
    /// `cudaGraphAddHostNode` (`struct cudaHostNodeParams` is the driver's layout).
    fn cudaGraphAddHostNode(node: *mut Handle, g: Handle, deps: *const Handle, n: usize, p: *const c_void) => cuGraphAddHostNode(node, g, deps, n, p);
}
forward! {
    /// `cudaGraphAddEmptyNode`.
    fn cudaGraphAddEmptyNode(node: *mut Handle, g: Handle, deps: *const Handle, n: usize) => cuGraphAddEmptyNode(node, g, deps, n);
}
forward! {
    /// `cudaGraphAddMemAllocNode` (`struct cudaMemAllocNodeParams` is the driver's
    /// layout).
    fn cudaGraphAddMemAllocNode(node: *mut Handle, g: Handle, deps: *const Handle, n: usize, p: *mut c_void) => cuGraphAddMemAllocNode(node, g, deps, n, p);
}
forward! {
    /// `cudaGraphAddMemFreeNode`.
    fn cudaGraphAddMemFreeNode(node: *mut Handle, g: Handle, deps: *const Handle, n: usize, dptr: *mut c_void) => cuGraphAddMemFreeNode(node, g, deps, n, dptr as CUdeviceptr);
}
forward! {
    /// `cudaGraphMemAllocNodeGetParams`.
    fn cudaGraphMemAllocNodeGetParams(node: Handle, p: *mut c_void) => cuGraphMemAllocNodeGetParams(node, p);
}
forward! {
    /// `cudaGraphMemFreeNodeGetParams` (a `void*` out, the driver's `CUdeviceptr`).
    fn cudaGraphMemFreeNodeGetParams(node: Handle, dptr: *mut c_void) => cuGraphMemFreeNodeGetParams(node, dptr.cast());
}
forward! {
    /// `cudaDeviceGetGraphMemAttribute` (`cudaGraphMemAttributeType` numbers are the
    /// driver's).
    fn cudaDeviceGetGraphMemAttribute(d: c_int, attr: c_int, v: *mut c_void) => cuDeviceGetGraphMemAttribute(d, attr, v);
}
forward! {
    /// `cudaDeviceSetGraphMemAttribute`.
    fn cudaDeviceSetGraphMemAttribute(d: c_int, attr: c_int, v: *mut c_void) => cuDeviceSetGraphMemAttribute(d, attr, v);
}
forward! {
    /// `cudaDeviceGraphMemTrim`.
    fn cudaDeviceGraphMemTrim(d: c_int) => cuDeviceGraphMemTrim(d);
}
forward! {
    /// `cudaGraphGetNodes`.
    fn cudaGraphGetNodes(g: Handle, nodes: *mut Handle, count: *mut usize) => cuGraphGetNodes(g, nodes, count);
}
forward! {
    /// `cudaGraphGetRootNodes`.
    fn cudaGraphGetRootNodes(g: Handle, nodes: *mut Handle, count: *mut usize) => cuGraphGetRootNodes(g, nodes, count);
}
forward! {
    /// `cudaGraphNodeGetType` (`cudaGraphNodeType` numbers are the driver's).
    fn cudaGraphNodeGetType(node: Handle, t: *mut c_int) => cuGraphNodeGetType(node, t);
}
forward! {
    /// `cudaGraphClone`.
    fn cudaGraphClone(c: *mut Handle, g: Handle) => cuGraphClone(c, g);
}

/// `cudaGraphAddDependencies` under the exported `name`: CUDA 13's form (CUDA 12's
/// `_v2`) with edge data (`cudaGraphEdgeData` is the driver's `CUgraphEdgeData`); CUDA
/// 12's form passes none.
///
/// # Safety
/// `from` and `to` are `n` node handles each; `edges` is null or `n` 8-byte
/// `cudaGraphEdgeData`.
pub unsafe fn graph_add_dependencies(
    name: &'static str,
    g: Handle,
    from: *const Handle,
    to: *const Handle,
    edges: *const u64,
    n: usize,
) -> CudaError {
    call(name, || {
        let rt = bound()?;
        cu!(rt.d, cuGraphAddDependencies_v2(g, from, to, edges, n))
    })
}

/// `cudaGraphNodeGetDependencies` and `cudaGraphNodeGetDependentNodes` (`dependents`), in
/// each soname's form: CUDA 12's without edge data (`edges` null), CUDA 13's (and 12's
/// `_v2`) with it (every edge a default one); each soname's crate exports them.
///
/// # Safety
/// `count` is null or a `size_t`; `nodes` and `edges` are null or hold `*count`
/// entries.
pub unsafe fn graph_node_edges(
    name: &'static str,
    node: Handle,
    dependents: bool,
    nodes: *mut Handle,
    edges: *mut u64,
    count: *mut usize,
) -> CudaError {
    call(name, || {
        let rt = bound()?;
        if dependents {
            cu!(
                rt.d,
                cuGraphNodeGetDependentNodes_v2(node, nodes, edges, count)
            )
        } else {
            cu!(
                rt.d,
                cuGraphNodeGetDependencies_v2(node, nodes, edges, count)
            )
        }
    })
}

// ---------------------------------------------------------------------------------------
// Per-thread default stream variants (`nvcc --default-stream per-thread`): the `_ptsz`
// forms take the null stream as the calling thread's default stream; the `_ptds` forms
// of synchronous calls are their legacy forms (which order at least as strongly).

macro_rules! per_thread {
    ($($name:ident => $base:ident($($arg:ident: $ty:ty),*) $(stream $s:ident)?;)*) => {$(
        #[doc = concat!("`", stringify!($name), "`: `", stringify!($base), "` on the per-thread default stream.")]
        ///
        /// # Safety
        #[doc = concat!("As `", stringify!($base), "`.")]
        #[no_mangle]
        pub unsafe extern "C" fn $name($($arg: $ty),*) -> CudaError {
            $(let $s = per_thread($s);)?
            // SAFETY: the caller's arguments, as the base entry point takes them.
            unsafe { $base($($arg),*) }
        }
    )*};
}

per_thread! {
    cudaMemcpyAsync_ptsz => cudaMemcpyAsync(dst: *mut c_void, src: *const c_void, n: usize, kind: c_int, s: Handle) stream s;
    cudaMemsetAsync_ptsz => cudaMemsetAsync(p: *mut c_void, v: c_int, n: usize, s: Handle) stream s;
    cudaStreamSynchronize_ptsz => cudaStreamSynchronize(s: Handle) stream s;
    cudaStreamQuery_ptsz => cudaStreamQuery(s: Handle) stream s;
    cudaStreamGetFlags_ptsz => cudaStreamGetFlags(s: Handle, flags: *mut c_uint) stream s;
    cudaStreamGetPriority_ptsz => cudaStreamGetPriority(s: Handle, priority: *mut c_int) stream s;
    cudaStreamGetId_ptsz => cudaStreamGetId(s: Handle, id: *mut u64) stream s;
    cudaStreamGetDevice_ptsz => cudaStreamGetDevice(s: Handle, d: *mut c_int) stream s;
    cudaStreamAttachMemAsync_ptsz => cudaStreamAttachMemAsync(s: Handle, p: *mut c_void, n: usize, flags: c_uint) stream s;
    cudaGraphUpload_ptsz => cudaGraphUpload(x: Handle, s: Handle) stream s;
    cudaStreamWaitEvent_ptsz => cudaStreamWaitEvent(s: Handle, e: Handle, flags: c_uint) stream s;
    cudaEventRecord_ptsz => cudaEventRecord(e: Handle, s: Handle) stream s;
    cudaEventRecordWithFlags_ptsz => cudaEventRecordWithFlags(e: Handle, s: Handle, flags: c_uint) stream s;
    cudaLaunchHostFunc_ptsz => cudaLaunchHostFunc(s: Handle, f: Option<unsafe extern "C" fn(*mut c_void)>, data: *mut c_void) stream s;
    cudaStreamAddCallback_ptsz => cudaStreamAddCallback(s: Handle, cb: Option<unsafe extern "C" fn(Handle, c_int, *mut c_void)>, data: *mut c_void, flags: c_uint) stream s;
    cudaMallocAsync_ptsz => cudaMallocAsync(p: *mut *mut c_void, bytes: usize, s: Handle) stream s;
    cudaFreeAsync_ptsz => cudaFreeAsync(p: *mut c_void, s: Handle) stream s;
    cudaMemcpyToSymbolAsync_ptsz => cudaMemcpyToSymbolAsync(symbol: *const c_void, src: *const c_void, n: usize, offset: usize, kind: c_int, s: Handle) stream s;
    cudaMemcpyFromSymbolAsync_ptsz => cudaMemcpyFromSymbolAsync(dst: *mut c_void, symbol: *const c_void, n: usize, offset: usize, kind: c_int, s: Handle) stream s;
    cudaGraphLaunch_ptsz => cudaGraphLaunch(x: Handle, s: Handle) stream s;
    cudaStreamBeginCapture_ptsz => cudaStreamBeginCapture(s: Handle, mode: c_int) stream s;
    cudaStreamEndCapture_ptsz => cudaStreamEndCapture(s: Handle, g: *mut Handle) stream s;
    cudaStreamIsCapturing_ptsz => cudaStreamIsCapturing(s: Handle, status: *mut c_int) stream s;
    cudaStreamSetAttribute_ptsz => cudaStreamSetAttribute(s: Handle, attr: c_int, v: *const c_void) stream s;
    cudaStreamGetAttribute_ptsz => cudaStreamGetAttribute(s: Handle, attr: c_int, v: *mut c_void) stream s;
    cudaStreamBeginCaptureToGraph_ptsz => cudaStreamBeginCaptureToGraph(s: Handle, g: Handle, deps: *const Handle, edges: *const c_void, n: usize, mode: c_int) stream s;
    cudaMemcpy_ptds => cudaMemcpy(dst: *mut c_void, src: *const c_void, n: usize, kind: c_int);
    cudaMemset_ptds => cudaMemset(p: *mut c_void, v: c_int, n: usize);
    cudaMemcpyToSymbol_ptds => cudaMemcpyToSymbol(symbol: *const c_void, src: *const c_void, n: usize, offset: usize, kind: c_int);
    cudaMemcpyFromSymbol_ptds => cudaMemcpyFromSymbol(dst: *mut c_void, symbol: *const c_void, n: usize, offset: usize, kind: c_int);
}

// ---------------------------------------------------------------------------------------
// Pitched memory: allocations, 2-D and 3-D copies and memsets, on the driver's.

rt! {
    /// `cudaMallocPitch`: `height` rows of `width` bytes, each row at a multiple of the
    /// driver's pitch (`cuMemAllocPitch`).
    fn cudaMallocPitch(p: *mut *mut c_void, pitch: *mut usize, width: usize, height: usize) {
        let rt = bound()?;
        if p.is_null() || pitch.is_null() {
            return Err(Fail::new(cudaErrorInvalidValue, "null devPtr or pitch"));
        }
        let mut d: CUdeviceptr = 0;
        cu!(rt.d, cuMemAllocPitch_v2(&mut d, pitch, width.max(1), height.max(1), 4))?;
        // SAFETY: checked non-null; the program's slot.
        unsafe { out(p, d as usize as *mut c_void) }
    }
}

rt! {
    /// `cudaMalloc3D`: `depth` slices of `height` rows of `width` bytes, pitched as
    /// `cudaMallocPitch` pitches.
    fn cudaMalloc3D(p: *mut PitchedPtr, extent: Size3) {
        let rt = bound()?;
        if p.is_null() {
            return Err(Fail::new(cudaErrorInvalidValue, "null pitchedDevPtr"));
        }
        let rows = extent.y.max(1).checked_mul(extent.z.max(1)).ok_or_else(|| {
            Fail::new(cudaErrorMemoryAllocation, format!("{extent:?}"))
        })?;
        let (mut d, mut pitch): (CUdeviceptr, usize) = (0, 0);
        cu!(rt.d, cuMemAllocPitch_v2(&mut d, &mut pitch, extent.x.max(1), rows, 4))?;
        let pp = PitchedPtr { ptr: d as usize as *mut c_void, pitch, xsize: extent.x, ysize: extent.y };
        // SAFETY: checked non-null; the program's cudaPitchedPtr.
        unsafe { out(p, pp) }
    }
}

/// Copies `p` through the driver's `cuMemcpy3D` (on `stream` when given).
fn memcpy_3d(p: &Memcpy3DParms, stream: Option<Handle>) -> R<()> {
    let rt = bound()?;
    let c = driver_copy(p)?;
    let c = (&c as *const DriverMemcpy3D).cast();
    match stream {
        None => cu!(rt.d, cuMemcpy3D_v2(c)),
        Some(s) => cu!(rt.d, cuMemcpy3DAsync_v2(c, s)),
    }
}

/// A 2-D copy: `height` rows of `width` bytes, rows `spitch`/`dpitch` apart (as a 3-D
/// copy of one slice; host to host here, row by row).
///
/// # Safety
/// The pointers are valid for the rows as `kind` says.
#[allow(clippy::too_many_arguments)]
unsafe fn memcpy_2d(
    dst: *mut c_void,
    dpitch: usize,
    src: *const c_void,
    spitch: usize,
    width: usize,
    height: usize,
    kind: c_int,
    stream: Option<Handle>,
) -> R<()> {
    // As NVIDIA's runtime (measured on an H200, CUDA 13.0): a pitch error when there
    // are rows to step over, else an invalid value.
    if width > dpitch || width > spitch {
        return Err(Fail::new(
            if height > 1 {
                cudaErrorInvalidPitchValue
            } else {
                cudaErrorInvalidValue
            },
            format!("width {width} wider than a pitch ({dpitch}, {spitch})"),
        ));
    }
    if width == 0 || height == 0 {
        return Ok(());
    }
    let rt = bound()?;
    let host_only =
        kind == HOST_TO_HOST || (kind == DEFAULT && !is_device(rt, dst) && !is_device(rt, src));
    if host_only {
        for r in 0..height {
            let (d, s) = (
                (dst as usize + r * dpitch) as *mut c_void,
                (src as usize + r * spitch) as *const c_void,
            );
            // SAFETY: row `r` of each side (the caller).
            unsafe { memcpy(d, s, width, kind, stream) }?;
        }
        return Ok(());
    }
    let at = |ptr: usize, pitch: usize| PitchedPtr {
        ptr: ptr as *mut c_void,
        pitch,
        xsize: width,
        ysize: height,
    };
    let p = Memcpy3DParms {
        src_array: std::ptr::null_mut(),
        src_pos: Size3 { x: 0, y: 0, z: 0 },
        src_ptr: at(src as usize, spitch),
        dst_array: std::ptr::null_mut(),
        dst_pos: Size3 { x: 0, y: 0, z: 0 },
        dst_ptr: at(dst as usize, dpitch),
        extent: Size3 {
            x: width,
            y: height,
            z: 1,
        },
        kind,
    };
    memcpy_3d(&p, stream)
}

rt! {
    /// `cudaMemcpy2D`.
    fn cudaMemcpy2D(dst: *mut c_void, dpitch: usize, src: *const c_void, spitch: usize, width: usize, height: usize, kind: c_int) {
        // SAFETY: the program's rows.
        unsafe { memcpy_2d(dst, dpitch, src, spitch, width, height, kind, None) }
    }
}
rt! {
    /// `cudaMemcpy2DAsync`.
    fn cudaMemcpy2DAsync(dst: *mut c_void, dpitch: usize, src: *const c_void, spitch: usize, width: usize, height: usize, kind: c_int, s: Handle) {
        // SAFETY: the program's rows.
        unsafe { memcpy_2d(dst, dpitch, src, spitch, width, height, kind, Some(s)) }
    }
}
rt! {
    /// `cudaMemcpy3D` (linear memory; arrays `cudaErrorNotSupported`).
    fn cudaMemcpy3D(p: *const Memcpy3DParms) {
        // SAFETY: null or the program's parameters.
        let p = unsafe { p.as_ref() }.ok_or_else(|| Fail::new(cudaErrorInvalidValue, "null p"))?;
        memcpy_3d(p, None)
    }
}
rt! {
    /// `cudaMemcpy3DAsync` (linear memory; arrays `cudaErrorNotSupported`).
    fn cudaMemcpy3DAsync(p: *const Memcpy3DParms, s: Handle) {
        // SAFETY: null or the program's parameters.
        let p = unsafe { p.as_ref() }.ok_or_else(|| Fail::new(cudaErrorInvalidValue, "null p"))?;
        memcpy_3d(p, Some(s))
    }
}

/// A 2-D memset: `height` rows of `width` bytes, `pitch` apart.
fn memset_2d(
    p: *mut c_void,
    pitch: usize,
    v: c_int,
    width: usize,
    height: usize,
    stream: Option<Handle>,
) -> R<()> {
    let rt = bound()?;
    // cudaErrorInvalidValue, as NVIDIA's runtime (measured on an H200, CUDA 13.0).
    if width > pitch {
        return Err(Fail::new(
            cudaErrorInvalidValue,
            format!("width {width} wider than the pitch {pitch}"),
        ));
    }
    if width == 0 || height == 0 {
        return Ok(());
    }
    let d = p as usize as CUdeviceptr;
    match stream {
        None => cu!(rt.d, cuMemsetD2D8_v2(d, pitch, v as u8, width, height)),
        Some(s) => cu!(rt.d, cuMemsetD2D8Async(d, pitch, v as u8, width, height, s)),
    }
}

rt! {
    /// `cudaMemset2D`.
    fn cudaMemset2D(p: *mut c_void, pitch: usize, v: c_int, width: usize, height: usize) {
        memset_2d(p, pitch, v, width, height, None)
    }
}
rt! {
    /// `cudaMemset2DAsync`.
    fn cudaMemset2DAsync(p: *mut c_void, pitch: usize, v: c_int, width: usize, height: usize, s: Handle) {
        memset_2d(p, pitch, v, width, height, Some(s))
    }
}

/// A 3-D memset of `extent` (bytes wide) in `p`: each slice's rows (`p.ysize` rows a
/// slice apart).
fn memset_3d(p: PitchedPtr, v: c_int, extent: Size3, stream: Option<Handle>) -> R<()> {
    if extent.y > p.ysize.max(1) && extent.z > 1 {
        return Err(Fail::new(
            cudaErrorInvalidValue,
            format!(
                "{} rows a slice, but the allocation's slices hold {}",
                extent.y, p.ysize
            ),
        ));
    }
    let slice = p
        .pitch
        .checked_mul(p.ysize)
        .ok_or_else(|| Fail::new(cudaErrorInvalidValue, format!("{p:?}")))?;
    for z in 0..extent.z {
        let at = (p.ptr as usize + z * slice) as *mut c_void;
        memset_2d(at, p.pitch, v, extent.x, extent.y, stream)?;
    }
    Ok(())
}

rt! {
    /// `cudaMemset3D`.
    fn cudaMemset3D(p: PitchedPtr, v: c_int, extent: Size3) {
        memset_3d(p, v, extent, None)
    }
}
rt! {
    /// `cudaMemset3DAsync`.
    fn cudaMemset3DAsync(p: PitchedPtr, v: c_int, extent: Size3, s: Handle) {
        memset_3d(p, v, extent, Some(s))
    }
}

per_thread! {
    cudaMemcpy2DAsync_ptsz => cudaMemcpy2DAsync(dst: *mut c_void, dpitch: usize, src: *const c_void, spitch: usize, width: usize, height: usize, kind: c_int, s: Handle) stream s;
    cudaMemset2DAsync_ptsz => cudaMemset2DAsync(p: *mut c_void, pitch: usize, v: c_int, width: usize, height: usize, s: Handle) stream s;
    cudaMemcpy2D_ptds => cudaMemcpy2D(dst: *mut c_void, dpitch: usize, src: *const c_void, spitch: usize, width: usize, height: usize, kind: c_int);
    cudaMemcpy3DAsync_ptsz => cudaMemcpy3DAsync(p: *const Memcpy3DParms, s: Handle) stream s;
    cudaMemcpy3D_ptds => cudaMemcpy3D(p: *const Memcpy3DParms);
    cudaMemcpy2DToArrayAsync_ptsz => cudaMemcpy2DToArrayAsync(a: Handle, x: usize, y: usize, src: *const c_void, spitch: usize, width: usize, height: usize, kind: c_int, s: Handle) stream s;
    cudaMemcpy2DFromArrayAsync_ptsz => cudaMemcpy2DFromArrayAsync(dst: *mut c_void, dpitch: usize, a: Handle, x: usize, y: usize, width: usize, height: usize, kind: c_int, s: Handle) stream s;
    cudaMemcpyToArrayAsync_ptsz => cudaMemcpyToArrayAsync(a: Handle, x: usize, y: usize, src: *const c_void, count: usize, kind: c_int, s: Handle) stream s;
    cudaMemcpyFromArrayAsync_ptsz => cudaMemcpyFromArrayAsync(dst: *mut c_void, a: Handle, x: usize, y: usize, count: usize, kind: c_int, s: Handle) stream s;
    cudaMemcpy2DToArray_ptds => cudaMemcpy2DToArray(a: Handle, x: usize, y: usize, src: *const c_void, spitch: usize, width: usize, height: usize, kind: c_int);
    cudaMemcpy2DFromArray_ptds => cudaMemcpy2DFromArray(dst: *mut c_void, dpitch: usize, a: Handle, x: usize, y: usize, width: usize, height: usize, kind: c_int);
    cudaMemcpyToArray_ptds => cudaMemcpyToArray(a: Handle, x: usize, y: usize, src: *const c_void, count: usize, kind: c_int);
    cudaMemcpyFromArray_ptds => cudaMemcpyFromArray(dst: *mut c_void, a: Handle, x: usize, y: usize, count: usize, kind: c_int);
    cudaMemset3DAsync_ptsz => cudaMemset3DAsync(p: PitchedPtr, v: c_int, extent: Size3, s: Handle) stream s;
    cudaMemset3D_ptds => cudaMemset3D(p: PitchedPtr, v: c_int, extent: Size3);
    cudaMemset2D_ptds => cudaMemset2D(p: *mut c_void, pitch: usize, v: c_int, width: usize, height: usize);
}

// ---------------------------------------------------------------------------------------
// Memory pools (the driver's; `cudaMemPoolAttr` numbers are the driver's).

rt! {
    /// `cudaDeviceGetDefaultMemPool`.
    fn cudaDeviceGetDefaultMemPool(pool: *mut Handle, d: c_int) {
        let rt = runtime()?;
        cu!(rt.d, cuDeviceGetDefaultMemPool(pool, d))
    }
}
rt! {
    /// `cudaDeviceGetMemPool`.
    fn cudaDeviceGetMemPool(pool: *mut Handle, d: c_int) {
        let rt = runtime()?;
        cu!(rt.d, cuDeviceGetMemPool(pool, d))
    }
}
forward! {
    /// `cudaMemPoolSetAttribute`.
    fn cudaMemPoolSetAttribute(pool: Handle, attr: c_int, value: *mut c_void) => cuMemPoolSetAttribute(pool, attr, value);
}
forward! {
    /// `cudaMemPoolGetAttribute`.
    fn cudaMemPoolGetAttribute(pool: Handle, attr: c_int, value: *mut c_void) => cuMemPoolGetAttribute(pool, attr, value);
}
forward! {
    /// `cudaMemPoolTrimTo`.
    fn cudaMemPoolTrimTo(pool: Handle, keep: usize) => cuMemPoolTrimTo(pool, keep);
}
rt! {
    /// `cudaMallocFromPoolAsync`.
    fn cudaMallocFromPoolAsync(p: *mut *mut c_void, bytes: usize, pool: Handle, s: Handle) {
        let rt = bound()?;
        if p.is_null() {
            return Err(Fail::new(cudaErrorInvalidValue, "null ptr"));
        }
        let mut d: CUdeviceptr = 0;
        cu!(rt.d, cuMemAllocFromPoolAsync(&mut d, bytes, pool, s))?;
        // SAFETY: checked non-null; the program's pointer slot.
        unsafe { out(p, d as usize as *mut c_void) }
    }
}

per_thread! {
    cudaMallocFromPoolAsync_ptsz => cudaMallocFromPoolAsync(p: *mut *mut c_void, bytes: usize, pool: Handle, s: Handle) stream s;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cuda_12s_device_numbers_are_locations() {
        // cudaCpuDeviceId (-1) is the host (cudaMemLocationTypeHost 2); a device number
        // a device (cudaMemLocationTypeDevice 1), cudaInvalidDeviceId (-2) too (refused).
        let at = |d| {
            let l = device_location(d);
            (l.ty, l.id)
        };
        assert_eq!(at(-1), (2, 0));
        assert_eq!(at(0), (1, 0));
        assert_eq!(at(3), (1, 3));
        assert_eq!(at(-2), (1, -2));
    }
}
