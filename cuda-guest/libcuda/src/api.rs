//! The exported CUDA driver API entry points (C ABI, the names and prototypes of
//! `cuda.h` 12.x). Every entry point catches panics (`CUDA_ERROR_UNKNOWN`), refuses null
//! output pointers (`CUDA_ERROR_INVALID_VALUE`) and needs `cuInit` first
//! (`CUDA_ERROR_NOT_INITIALIZED`), as the driver does.

use std::cell::RefCell;
use std::ffi::{c_char, c_float, c_int, c_uint, c_void, CStr};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::OnceLock;

use crate::driver::Driver;
use crate::fail::{Fail, R, STREAM_PER_THREAD};
use crate::ffi::*;
use crate::log;
use vmgpu_ptx::fatbin;

static ENGINE: OnceLock<Result<Driver, Fail>> = OnceLock::new();
static INITIALIZED: AtomicBool = AtomicBool::new(false);

thread_local! {
    /// The calling thread's context stack (top last), as in the driver.
    static STACK: RefCell<Vec<u64>> = const { RefCell::new(Vec::new()) };
}

/// The driver state, started on first use (the mode is read from the environment once).
fn driver_any() -> R<&'static Driver> {
    let e = ENGINE.get_or_init(|| {
        let r = crate::start_driver();
        match &r {
            Ok(e) => log::info(&format!("mode: {}", e.describe())),
            Err(f) => log::warn(&format!("cannot start: {} ({})", f.detail, f.code)),
        }
        r
    });
    match e {
        Ok(e) => Ok(e),
        Err(f) => Err(f.clone()),
    }
}

/// The driver state after a successful `cuInit`.
fn driver() -> R<&'static Driver> {
    if !INITIALIZED.load(Ordering::Acquire) {
        return Err(Fail::new(
            CUDA_ERROR_NOT_INITIALIZED,
            "cuInit has not been called",
        ));
    }
    driver_any()
}

/// The context current on this thread.
fn current() -> R<u64> {
    STACK
        .with(|s| s.borrow().last().copied())
        .ok_or_else(|| Fail::new(CUDA_ERROR_INVALID_CONTEXT, "no context is current"))
}

/// Runs an entry point's body: panics become `CUDA_ERROR_UNKNOWN`, failures their
/// `CUresult` (logged at debug level).
fn call(name: &'static str, f: impl FnOnce() -> R<()>) -> CUresult {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(())) => CUDA_SUCCESS,
        Ok(Err(fail)) => {
            if log::debug_enabled() && fail.code != CUDA_ERROR_NOT_READY {
                log::debug(&format!("{name}: {} ({})", fail.detail, fail.code));
            }
            fail.code
        }
        Err(panic) => {
            let msg = panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_default();
            log::warn(&format!(
                "{name}: internal error (panic: {msg}); CUDA_ERROR_UNKNOWN"
            ));
            CUDA_ERROR_UNKNOWN
        }
    }
}

/// Writes `v` to the program's `p`.
///
/// # Safety
/// `p` is null or valid for writing a `T`.
unsafe fn out<T>(p: *mut T, v: T) -> R<()> {
    if p.is_null() {
        return Err(Fail::new(CUDA_ERROR_INVALID_VALUE, "null output pointer"));
    }
    // SAFETY: non-null, and the caller guarantees it is valid for a write of `T`; an
    // unaligned pointer from C is tolerated.
    unsafe { p.write_unaligned(v) };
    Ok(())
}

/// A NUL-terminated C string argument.
///
/// # Safety
/// `p` is null or a NUL-terminated string alive for the call.
unsafe fn c_str<'a>(p: *const c_char) -> R<&'a str> {
    if p.is_null() {
        return Err(Fail::new(CUDA_ERROR_INVALID_VALUE, "null string"));
    }
    // SAFETY: non-null and NUL-terminated (the caller's guarantee).
    let s = unsafe { CStr::from_ptr(p) };
    s.to_str()
        .map_err(|_| Fail::new(CUDA_ERROR_INVALID_VALUE, "a name that is not UTF-8"))
}

/// Copies `s` into the program's buffer of `len` bytes, NUL-terminated (truncated).
///
/// # Safety
/// `buf` is null or writable for `len` bytes.
unsafe fn copy_str(buf: *mut c_char, len: c_int, s: &str) -> R<()> {
    if buf.is_null() || len <= 0 {
        return Err(Fail::new(CUDA_ERROR_INVALID_VALUE, "null or empty buffer"));
    }
    let n = s.len().min(len as usize - 1);
    // SAFETY: `buf` is writable for `len` bytes and `n + 1 <= len`; the source is a
    // distinct Rust string.
    unsafe {
        std::ptr::copy_nonoverlapping(s.as_ptr(), buf.cast::<u8>(), n);
        *buf.add(n) = 0;
    }
    Ok(())
}

fn dev(d: CUdevice) -> R<u32> {
    u32::try_from(d).map_err(|_| Fail::new(CUDA_ERROR_INVALID_DEVICE, format!("device {d}")))
}

fn h(p: Handle) -> u64 {
    p as usize as u64
}

fn ptr(v: u64) -> Handle {
    v as usize as Handle
}

/// The stream value an entry point passes on: the null stream of a `_ptsz` variant is
/// the per-thread default stream.
fn strm(s: Handle, per_thread: bool) -> u64 {
    match h(s) {
        0 if per_thread => STREAM_PER_THREAD,
        v => v,
    }
}

fn nonnull(p: Handle, what: &str) -> R<u64> {
    if p.is_null() {
        Err(Fail::new(CUDA_ERROR_INVALID_HANDLE, format!("null {what}")))
    } else {
        Ok(h(p))
    }
}

macro_rules! entry {
    ($(#[doc = $doc:expr])* fn $name:ident($($arg:ident : $ty:ty),* $(,)?) $body:block) => {
        $(#[doc = $doc])*
        ///
        /// # Safety
        /// Called from C with the arguments `cuda.h` documents: pointers are null
        /// (refused) or valid for the accesses the call makes.
        #[no_mangle]
        pub unsafe extern "C" fn $name($($arg: $ty),*) -> CUresult {
            call(stringify!($name), move || $body)
        }
    };
}

mod arrays;
pub use arrays::*;

// ---------------------------------------------------------------------------------------
// Initialisation, version, errors.

entry! {
    /// `cuInit`: starts the driver state (the mode comes from the environment). In forward
    /// mode nothing is sent yet: the connection opens at the first call that needs the
    /// service, and its first request is `Init`.
    fn cuInit(flags: c_uint) {
        if flags != 0 {
            return Err(Fail::new(CUDA_ERROR_INVALID_VALUE, "cuInit flags must be 0"));
        }
        driver_any()?.init(flags)?;
        INITIALIZED.store(true, Ordering::Release);
        Ok(())
    }
}

entry! {
    /// `cuDriverGetVersion` (works before `cuInit`).
    fn cuDriverGetVersion(version: *mut c_int) {
        if version.is_null() {
            return Err(Fail::new(CUDA_ERROR_INVALID_VALUE, "null version"));
        }
        let v = driver_any()?.driver_version()?;
        // SAFETY: checked non-null; the program passes a writable int.
        unsafe { out(version, v) }
    }
}

fn error_text(code: CUresult, name: bool) -> R<&'static CStr> {
    use std::collections::HashMap;
    use std::sync::Mutex;
    static TEXTS: OnceLock<Mutex<HashMap<(CUresult, bool), &'static CStr>>> = OnceLock::new();
    let status = vmgpu_cuda_proto::Status(code as u32);
    let s = if name {
        status.name()
    } else {
        status.description()
    }
    .ok_or_else(|| Fail::new(CUDA_ERROR_INVALID_VALUE, format!("unknown CUresult {code}")))?;
    let mut map = TEXTS
        .get_or_init(|| Mutex::new(HashMap::new()))
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    Ok(map.entry((code, name)).or_insert_with(|| {
        let c = std::ffi::CString::new(s).unwrap_or_default();
        // Leaked once per code: the driver's strings are static too.
        Box::leak(c.into_boxed_c_str())
    }))
}

entry! {
    /// `cuGetErrorName`.
    fn cuGetErrorName(error: CUresult, p_str: *mut *const c_char) {
        if p_str.is_null() {
            return Err(Fail::new(CUDA_ERROR_INVALID_VALUE, "null pStr"));
        }
        match error_text(error, true) {
            // SAFETY: checked non-null; a writable `const char *` slot.
            Ok(s) => unsafe { out(p_str, s.as_ptr()) },
            Err(f) => {
                // SAFETY: as above; the driver sets it to NULL for unknown codes.
                unsafe { out(p_str, std::ptr::null())? };
                Err(f)
            }
        }
    }
}

entry! {
    /// `cuGetErrorString`.
    fn cuGetErrorString(error: CUresult, p_str: *mut *const c_char) {
        if p_str.is_null() {
            return Err(Fail::new(CUDA_ERROR_INVALID_VALUE, "null pStr"));
        }
        match error_text(error, false) {
            // SAFETY: checked non-null; a writable `const char *` slot.
            Ok(s) => unsafe { out(p_str, s.as_ptr()) },
            Err(f) => {
                // SAFETY: as above.
                unsafe { out(p_str, std::ptr::null())? };
                Err(f)
            }
        }
    }
}

entry! {
    /// `cuGetExportTable`: the driver's private tables of the CUDA runtime and the tools
    /// are not provided (`CUDA_ERROR_NOT_SUPPORTED`, `*ppExportTable` set to NULL).
    /// NVRTC loads `libcuda.so.1` and probes one while it compiles, in every process
    /// that compiles, so the probe is logged at debug level only; it needs neither
    /// `cuInit` nor, in forward mode, the service.
    fn cuGetExportTable(table: *mut *const c_void, id: *const [u8; 16]) {
        if !table.is_null() {
            // SAFETY: non-null; the caller's writable `const void *` slot.
            unsafe { out(table, std::ptr::null())? };
        }
        let uuid = if id.is_null() {
            "NULL".to_string()
        } else {
            // SAFETY: non-null, and the caller passes a `const CUuuid *` (16 bytes,
            // alignment 1) readable for the call.
            let id = unsafe { id.read_unaligned() };
            id.iter().map(|b| format!("{b:02x}")).collect()
        };
        Err(Fail::new(
            CUDA_ERROR_NOT_SUPPORTED,
            format!("export table {uuid}: not provided"),
        ))
    }
}

// ---------------------------------------------------------------------------------------
// Devices.

entry! {
    /// `cuDeviceGetCount`.
    fn cuDeviceGetCount(count: *mut c_int) {
        let n = driver()?.device_count()?;
        // SAFETY: `out` refuses null; the program passes a writable int.
        unsafe { out(count, n as c_int) }
    }
}

entry! {
    /// `cuDeviceGet`.
    fn cuDeviceGet(device: *mut CUdevice, ordinal: c_int) {
        let e = driver()?;
        if ordinal < 0 || ordinal as u32 >= e.device_count()? {
            return Err(Fail::new(CUDA_ERROR_INVALID_DEVICE, format!("ordinal {ordinal}")));
        }
        // SAFETY: `out` refuses null; a writable CUdevice.
        unsafe { out(device, ordinal) }
    }
}

entry! {
    /// `cuDeviceGetName`.
    fn cuDeviceGetName(name: *mut c_char, len: c_int, d: CUdevice) {
        let s = driver()?.device_name(dev(d)?)?;
        // SAFETY: the program's buffer is writable for `len` bytes (null refused).
        unsafe { copy_str(name, len, &s) }
    }
}

fn uuid(p: *mut [u8; 16], d: CUdevice) -> R<()> {
    let u = driver()?.device_uuid(dev(d)?)?;
    // SAFETY: `out` refuses null; a CUuuid is 16 bytes, alignment 1.
    unsafe { out(p, u) }
}

entry! {
    /// `cuDeviceGetUuid`.
    fn cuDeviceGetUuid(p: *mut [u8; 16], d: CUdevice) { uuid(p, d) }
}

entry! {
    /// `cuDeviceGetUuid_v2`.
    fn cuDeviceGetUuid_v2(p: *mut [u8; 16], d: CUdevice) { uuid(p, d) }
}

entry! {
    /// `cuDeviceGetPCIBusId`.
    fn cuDeviceGetPCIBusId(bus_id: *mut c_char, len: c_int, d: CUdevice) {
        let s = driver()?.device_pci_bus_id(dev(d)?)?;
        // SAFETY: the program's buffer is writable for `len` bytes (null refused).
        unsafe { copy_str(bus_id, len, &s) }
    }
}

entry! {
    /// `cuDeviceGetByPCIBusId`.
    fn cuDeviceGetByPCIBusId(d: *mut CUdevice, bus_id: *const c_char) {
        // SAFETY: a NUL-terminated string from the program (null refused).
        let want = unsafe { c_str(bus_id) }?.to_ascii_lowercase();
        let e = driver()?;
        for i in 0..e.device_count()? {
            let id = e.device_pci_bus_id(i)?.to_ascii_lowercase();
            if id == want || id.trim_start_matches('0') == want.trim_start_matches('0') {
                // SAFETY: `out` refuses null; a writable CUdevice.
                return unsafe { out(d, i as CUdevice) };
            }
        }
        Err(Fail::new(CUDA_ERROR_INVALID_DEVICE, format!("no device at {want}")))
    }
}

entry! {
    /// `cuDeviceGetAttribute`.
    fn cuDeviceGetAttribute(pi: *mut c_int, attrib: c_int, d: CUdevice) {
        if pi.is_null() {
            return Err(Fail::new(CUDA_ERROR_INVALID_VALUE, "null pi"));
        }
        let v = driver()?.device_attribute(dev(d)?, attrib)?;
        // SAFETY: checked non-null; a writable int.
        unsafe { out(pi, v) }
    }
}

entry! {
    /// `cuDeviceTotalMem_v2`.
    fn cuDeviceTotalMem_v2(bytes: *mut usize, d: CUdevice) {
        let v = driver()?.device_total_mem(dev(d)?)?;
        // SAFETY: `out` refuses null; a writable size_t.
        unsafe { out(bytes, v as usize) }
    }
}

entry! {
    /// `cuDeviceComputeCapability` (deprecated, still used).
    fn cuDeviceComputeCapability(major: *mut c_int, minor: *mut c_int, d: CUdevice) {
        if major.is_null() || minor.is_null() {
            return Err(Fail::new(CUDA_ERROR_INVALID_VALUE, "null major or minor"));
        }
        let e = driver()?;
        let d = dev(d)?;
        let ma = e.device_attribute(d, 75)?;
        let mi = e.device_attribute(d, 76)?;
        // SAFETY: both checked non-null; writable ints.
        unsafe {
            out(major, ma)?;
            out(minor, mi)
        }
    }
}

// ---------------------------------------------------------------------------------------
// Contexts.

entry! {
    /// `cuDevicePrimaryCtxRetain`.
    fn cuDevicePrimaryCtxRetain(pctx: *mut Handle, d: CUdevice) {
        if pctx.is_null() {
            return Err(Fail::new(CUDA_ERROR_INVALID_VALUE, "null pctx"));
        }
        let c = driver()?.primary_retain(dev(d)?)?;
        // SAFETY: checked non-null; a writable CUcontext slot.
        unsafe { out(pctx, ptr(c)) }
    }
}

fn primary_release(d: CUdevice) -> R<()> {
    driver()?.primary_release(dev(d)?)
}

entry! {
    /// `cuDevicePrimaryCtxRelease_v2`.
    fn cuDevicePrimaryCtxRelease_v2(d: CUdevice) { primary_release(d) }
}

entry! {
    /// `cuDevicePrimaryCtxRelease` (the same as `_v2`).
    fn cuDevicePrimaryCtxRelease(d: CUdevice) { primary_release(d) }
}

fn primary_reset(d: CUdevice) -> R<()> {
    driver()?.primary_reset(dev(d)?)
}

entry! {
    /// `cuDevicePrimaryCtxReset_v2`.
    fn cuDevicePrimaryCtxReset_v2(d: CUdevice) { primary_reset(d) }
}

entry! {
    /// `cuDevicePrimaryCtxReset` (the same as `_v2`).
    fn cuDevicePrimaryCtxReset(d: CUdevice) { primary_reset(d) }
}

entry! {
    /// `cuDevicePrimaryCtxGetState`.
    fn cuDevicePrimaryCtxGetState(d: CUdevice, flags: *mut c_uint, active: *mut c_int) {
        if flags.is_null() || active.is_null() {
            return Err(Fail::new(CUDA_ERROR_INVALID_VALUE, "null flags or active"));
        }
        let (f, a) = driver()?.primary_state(dev(d)?)?;
        // SAFETY: both checked non-null; writable.
        unsafe {
            out(flags, f)?;
            out(active, a as c_int)
        }
    }
}

fn primary_set_flags(d: CUdevice, flags: c_uint) -> R<()> {
    driver()?.primary_set_flags(dev(d)?, flags)
}

entry! {
    /// `cuDevicePrimaryCtxSetFlags_v2` (the flags are recorded; scheduling hints).
    fn cuDevicePrimaryCtxSetFlags_v2(d: CUdevice, flags: c_uint) { primary_set_flags(d, flags) }
}

entry! {
    /// `cuDevicePrimaryCtxSetFlags`.
    fn cuDevicePrimaryCtxSetFlags(d: CUdevice, flags: c_uint) { primary_set_flags(d, flags) }
}

/// Creates a context and pushes it on this thread's stack, as `cuCtxCreate` does.
fn ctx_create(pctx: *mut Handle, flags: c_uint, d: CUdevice) -> R<()> {
    if pctx.is_null() {
        return Err(Fail::new(CUDA_ERROR_INVALID_VALUE, "null pctx"));
    }
    let c = driver()?.ctx_create(dev(d)?, flags)?;
    STACK.with(|s| s.borrow_mut().push(c));
    // SAFETY: checked non-null; a writable CUcontext slot.
    unsafe { out(pctx, ptr(c)) }
}

entry! {
    /// `cuCtxCreate_v2`.
    fn cuCtxCreate_v2(pctx: *mut Handle, flags: c_uint, d: CUdevice) { ctx_create(pctx, flags, d) }
}

entry! {
    /// `cuCtxCreate` (the same prototype as `_v2`).
    fn cuCtxCreate(pctx: *mut Handle, flags: c_uint, d: CUdevice) { ctx_create(pctx, flags, d) }
}

entry! {
    /// `cuCtxCreate_v3`: execution affinity parameters are not supported (none is fine).
    fn cuCtxCreate_v3(pctx: *mut Handle, params: *mut c_void, num_params: c_int, flags: c_uint, d: CUdevice) {
        if !params.is_null() && num_params > 0 {
            return Err(Fail::new(CUDA_ERROR_NOT_SUPPORTED, "execution affinity"));
        }
        ctx_create(pctx, flags, d)
    }
}

/// `CUctxCreateParams` (cuda.h).
#[repr(C)]
pub(crate) struct CtxCreateParams {
    exec_affinity_params: *mut c_void,
    num_exec_affinity_params: c_int,
    cig_params: *mut c_void,
}

entry! {
    /// `cuCtxCreate_v4` (CUDA 13's `cuCtxCreate`): creation parameters asking for
    /// execution affinity or CIG are not supported; NULL, or parameters asking for
    /// neither (a zeroed `CUctxCreateParams`, as cuda-samples pass), are fine.
    fn cuCtxCreate_v4(pctx: *mut Handle, params: *mut CtxCreateParams, flags: c_uint, d: CUdevice) {
        if !params.is_null() {
            // SAFETY: a non-null `params` points to a CUctxCreateParams (cuda.h), which
            // the program keeps alive for the call; read unaligned, as written by C.
            let p = unsafe { params.read_unaligned() };
            if !p.exec_affinity_params.is_null() && p.num_exec_affinity_params > 0 {
                return Err(Fail::new(CUDA_ERROR_NOT_SUPPORTED, "execution affinity (CUctxCreateParams)"));
            }
            if !p.cig_params.is_null() {
                return Err(Fail::new(CUDA_ERROR_NOT_SUPPORTED, "CUDA in graphics (CUctxCreateParams.cigParams)"));
            }
        }
        ctx_create(pctx, flags, d)
    }
}

fn ctx_destroy(ctx: Handle) -> R<()> {
    let c = nonnull(ctx, "context").map_err(|f| Fail::new(CUDA_ERROR_INVALID_VALUE, f.detail))?;
    driver()?.ctx_destroy(c)?;
    // Off this thread's stack too (other threads find out at their next call).
    STACK.with(|s| s.borrow_mut().retain(|x| *x != c));
    Ok(())
}

entry! {
    /// `cuCtxDestroy_v2`.
    fn cuCtxDestroy_v2(ctx: Handle) { ctx_destroy(ctx) }
}

entry! {
    /// `cuCtxDestroy` (the same as `_v2`).
    fn cuCtxDestroy(ctx: Handle) { ctx_destroy(ctx) }
}

entry! {
    /// `cuCtxSetCurrent`: replaces the top of this thread's stack (NULL pops it).
    fn cuCtxSetCurrent(ctx: Handle) {
        let c = h(ctx);
        if c != 0 {
            driver()?.ctx_device(c)?;
        }
        STACK.with(|s| {
            let mut s = s.borrow_mut();
            s.pop();
            if c != 0 {
                s.push(c);
            }
        });
        Ok(())
    }
}

entry! {
    /// `cuCtxGetCurrent` (NULL when none).
    fn cuCtxGetCurrent(pctx: *mut Handle) {
        if pctx.is_null() {
            return Err(Fail::new(CUDA_ERROR_INVALID_VALUE, "null pctx"));
        }
        driver()?;
        let c = STACK.with(|s| s.borrow().last().copied()).unwrap_or(0);
        // SAFETY: checked non-null; a writable CUcontext slot.
        unsafe { out(pctx, ptr(c)) }
    }
}

fn ctx_push(ctx: Handle) -> R<()> {
    let c = nonnull(ctx, "context").map_err(|f| Fail::new(CUDA_ERROR_INVALID_CONTEXT, f.detail))?;
    driver()?.ctx_device(c)?;
    STACK.with(|s| s.borrow_mut().push(c));
    Ok(())
}

entry! {
    /// `cuCtxPushCurrent_v2`.
    fn cuCtxPushCurrent_v2(ctx: Handle) { ctx_push(ctx) }
}

entry! {
    /// `cuCtxPushCurrent`.
    fn cuCtxPushCurrent(ctx: Handle) { ctx_push(ctx) }
}

fn ctx_pop(pctx: *mut Handle) -> R<()> {
    driver()?;
    let c = STACK
        .with(|s| s.borrow_mut().pop())
        .ok_or_else(|| Fail::new(CUDA_ERROR_INVALID_CONTEXT, "the context stack is empty"))?;
    if !pctx.is_null() {
        // SAFETY: non-null; a writable CUcontext slot (optional in the API).
        unsafe { out(pctx, ptr(c))? };
    }
    Ok(())
}

entry! {
    /// `cuCtxPopCurrent_v2`.
    fn cuCtxPopCurrent_v2(pctx: *mut Handle) { ctx_pop(pctx) }
}

entry! {
    /// `cuCtxPopCurrent`.
    fn cuCtxPopCurrent(pctx: *mut Handle) { ctx_pop(pctx) }
}

thread_local! {
    /// This thread's stream capture mode (`cuThreadExchangeStreamCaptureMode`).
    static CAPTURE_MODE: std::cell::Cell<c_int> = const { std::cell::Cell::new(0) };
}

entry! {
    /// `cuThreadExchangeStreamCaptureMode`: this thread's mode (global, thread-local or
    /// relaxed) exchanged with `*mode`. Captures here refuse only what would wait for
    /// captured work, in every mode (the driver's relaxed mode).
    fn cuThreadExchangeStreamCaptureMode(mode: *mut c_int) {
        if mode.is_null() {
            return Err(Fail::new(CUDA_ERROR_INVALID_VALUE, "null mode"));
        }
        // SAFETY: non-null; the program's CUstreamCaptureMode.
        let want = unsafe { mode.read_unaligned() };
        if !(0..=2).contains(&want) {
            return Err(Fail::new(CUDA_ERROR_INVALID_VALUE, format!("capture mode {want}")));
        }
        let was = CAPTURE_MODE.with(|m| m.replace(want));
        // SAFETY: as above.
        unsafe { out(mode, was) }
    }
}

entry! {
    /// `cuCtxGetSharedMemConfig`: 4-byte banks (the only width of sm_50 and later).
    fn cuCtxGetSharedMemConfig(config: *mut c_int) {
        driver()?.ctx_device(current()?)?;
        // SAFETY: `out` refuses null. CU_SHARED_MEM_CONFIG_FOUR_BYTE_BANK_SIZE.
        unsafe { out(config, 1) }
    }
}

entry! {
    /// `cuCtxSetSharedMemConfig`: accepted (a hint, as on sm_50 and later); an unknown
    /// value is `CUDA_ERROR_INVALID_VALUE`.
    fn cuCtxSetSharedMemConfig(config: c_int) {
        driver()?.ctx_device(current()?)?;
        if !(0..=2).contains(&config) {
            return Err(Fail::new(CUDA_ERROR_INVALID_VALUE, format!("shared memory config {config}")));
        }
        Ok(())
    }
}

entry! {
    /// `cuCtxSynchronize`.
    fn cuCtxSynchronize() {
        driver()?.ctx_synchronize(current()?)
    }
}

entry! {
    /// `cuCtxGetLimit`: what `cuCtxSetLimit` set, else a fresh context's value.
    fn cuCtxGetLimit(value: *mut usize, limit: c_int) {
        let v = driver()?.ctx_limit(current()?, limit)?;
        // SAFETY: `out` refuses null.
        unsafe { out(value, v as usize) }
    }
}

entry! {
    /// `cuCtxSetLimit`: kept for `cuCtxGetLimit` (nothing here depends on them).
    fn cuCtxSetLimit(limit: c_int, value: usize) {
        driver()?.ctx_set_limit(current()?, limit, value as u64)
    }
}

entry! {
    /// `cuCtxGetDevice`.
    fn cuCtxGetDevice(device: *mut CUdevice) {
        if device.is_null() {
            return Err(Fail::new(CUDA_ERROR_INVALID_VALUE, "null device"));
        }
        let d = driver()?.ctx_device(current()?)?;
        // SAFETY: checked non-null; a writable CUdevice.
        unsafe { out(device, d as CUdevice) }
    }
}

entry! {
    /// `cuCtxGetApiVersion`: 3020, the API level of every context since CUDA 3.2.
    fn cuCtxGetApiVersion(ctx: Handle, version: *mut c_uint) {
        let c = if ctx.is_null() { current()? } else { h(ctx) };
        driver()?.ctx_device(c)?;
        // SAFETY: `out` refuses null; a writable unsigned int.
        unsafe { out(version, 3020) }
    }
}

entry! {
    /// `cuCtxGetFlags`: the scheduling flags (0, automatic).
    fn cuCtxGetFlags(flags: *mut c_uint) {
        let f = driver()?.ctx_flags(current()?)?;
        // SAFETY: `out` refuses null.
        unsafe { out(flags, f) }
    }
}

entry! {
    /// `cuCtxGetStreamPriorityRange`: one priority (0, 0).
    fn cuCtxGetStreamPriorityRange(least: *mut c_int, greatest: *mut c_int) {
        driver()?.ctx_device(current()?)?;
        // SAFETY: each pointer is optional; written only when non-null.
        unsafe {
            if !least.is_null() {
                out(least, 0)?;
            }
            if !greatest.is_null() {
                out(greatest, 0)?;
            }
        }
        Ok(())
    }
}

entry! {
    /// `cuCtxSetCacheConfig`: a hint, accepted.
    fn cuCtxSetCacheConfig(_config: c_int) {
        driver()?.ctx_device(current()?).map(drop)
    }
}

entry! {
    /// `cuCtxGetCacheConfig`: `CU_FUNC_CACHE_PREFER_NONE`.
    fn cuCtxGetCacheConfig(config: *mut c_int) {
        driver()?.ctx_device(current()?)?;
        // SAFETY: `out` refuses null.
        unsafe { out(config, 0) }
    }
}

entry! {
    /// `cuMemGetInfo_v2`.
    fn cuMemGetInfo_v2(free: *mut usize, total: *mut usize) {
        if free.is_null() || total.is_null() {
            return Err(Fail::new(CUDA_ERROR_INVALID_VALUE, "null free or total"));
        }
        let (f, t) = driver()?.mem_get_info(current()?)?;
        // SAFETY: both checked non-null; writable size_t.
        unsafe {
            out(free, f as usize)?;
            out(total, t as usize)
        }
    }
}

// ---------------------------------------------------------------------------------------
// Modules and functions.

/// The image bytes of a module: PTX text up to its NUL, or a whole fatbin (given as
/// itself or by nvcc's wrapper); an ELF image's first bytes (refused by its magic).
///
/// # Safety
/// `image` is null, a NUL-terminated PTX text, a fatbin or wrapper as nvcc makes them
/// (readable for as long as the fatbin's header says), or an ELF image (whose first
/// bytes are read to recognise it).
unsafe fn image_bytes<'a>(image: *const c_void) -> R<&'a [u8]> {
    if image.is_null() {
        return Err(Fail::new(CUDA_ERROR_INVALID_VALUE, "null image"));
    }
    // SAFETY: every image the driver accepts starts with at least 4 readable bytes or is
    // a NUL-terminated text; a text shorter than 4 bytes ends at its NUL, which
    // `CStr::from_ptr` below stops at.
    let head = unsafe { CStr::from_ptr(image.cast::<c_char>()) }.to_bytes();
    if fatbin::is_fatbin(head) {
        // SAFETY: a fatbin or nvcc's wrapper of one (its magic read above), whole as its
        // header says: the caller's contract.
        return unsafe { fatbin::unwrap(image.cast()).and_then(|f| fatbin::in_memory(f)) }.map_err(
            |e| {
                Fail::new(
                    CUDA_ERROR_INVALID_IMAGE,
                    format!("the fatbin image at {image:?}: {e}"),
                )
            },
        );
    }
    if head.len() >= 4 && head.starts_with(b"\x7fELF") {
        // A machine-code image: the driver refuses it by its magic.
        return Ok(&head[..4]);
    }
    Ok(head)
}

/// Writes a JIT log into the option buffers of `cuModuleLoadDataEx`.
///
/// # Safety
/// `options` and `values` are null or hold `n` entries; buffer options point to
/// writable buffers of the sizes given by their size options.
pub(crate) unsafe fn write_jit_logs(
    n: c_uint,
    options: *mut c_int,
    values: *mut *mut c_void,
    error_log: &str,
) {
    if n == 0 || options.is_null() || values.is_null() {
        return;
    }
    // SAFETY: the caller guarantees `n` entries in each array.
    let (opts, vals) = unsafe {
        (
            std::slice::from_raw_parts(options, n as usize),
            std::slice::from_raw_parts_mut(values, n as usize),
        )
    };
    for (buf_opt, size_opt, text) in [
        (
            CU_JIT_ERROR_LOG_BUFFER,
            CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES,
            error_log,
        ),
        (
            CU_JIT_INFO_LOG_BUFFER,
            CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES,
            "",
        ),
    ] {
        let Some(bi) = opts.iter().position(|o| *o == buf_opt) else {
            continue;
        };
        let Some(si) = opts.iter().position(|o| *o == size_opt) else {
            continue;
        };
        let size = vals[si] as usize;
        let buf = vals[bi].cast::<u8>();
        if buf.is_null() || size == 0 {
            continue;
        }
        let k = text.len().min(size - 1);
        // SAFETY: the program's buffer is writable for `size` bytes and `k + 1 <= size`.
        unsafe {
            std::ptr::copy_nonoverlapping(text.as_ptr(), buf, k);
            *buf.add(k) = 0;
        }
        // OUT: the bytes filled (cuda.h: the size option is in/out).
        vals[si] = k as *mut c_void;
    }
    if let Some(i) = opts.iter().position(|o| *o == CU_JIT_WALL_TIME) {
        // A float written into the value slot itself.
        vals[i] = std::ptr::null_mut();
    }
}

fn module_load(module: *mut Handle, image: &[u8]) -> R<u64> {
    if module.is_null() {
        return Err(Fail::new(CUDA_ERROR_INVALID_VALUE, "null module"));
    }
    driver()?.module_load(current()?, image)
}

entry! {
    /// `cuModuleLoadData`: PTX text, or a fatbin whose PTX is taken (the simulator and
    /// the service JIT it).
    fn cuModuleLoadData(module: *mut Handle, image: *const c_void) {
        // SAFETY: the program passes a NUL-terminated PTX image (null refused).
        let bytes = unsafe { image_bytes(image) }?;
        let m = module_load(module, bytes).inspect_err(|f| {
            if let Some(l) = &f.jit_log {
                log::debug(&format!("JIT log: {l}"));
            }
        })?;
        // SAFETY: checked non-null in `module_load`.
        unsafe { out(module, ptr(m)) }
    }
}

entry! {
    /// `cuModuleLoadFatBinary`: a fatbin (or nvcc's wrapper of one); its PTX is loaded.
    fn cuModuleLoadFatBinary(module: *mut Handle, fat_cubin: *const c_void) {
        // SAFETY: the program passes a fatbin image (null refused).
        let bytes = unsafe { image_bytes(fat_cubin) }?;
        if !fatbin::is_fatbin(bytes) {
            return Err(Fail::new(CUDA_ERROR_INVALID_IMAGE, "cuModuleLoadFatBinary: the image is not a fatbin (no fatbin magic)"));
        }
        let m = module_load(module, bytes)?;
        // SAFETY: checked non-null in `module_load`.
        unsafe { out(module, ptr(m)) }
    }
}

entry! {
    /// `cuModuleLoadDataEx`: as `cuModuleLoadData`; the JIT error log goes into
    /// `CU_JIT_ERROR_LOG_BUFFER` (its size option gets the bytes written).
    fn cuModuleLoadDataEx(module: *mut Handle, image: *const c_void, num_options: c_uint, options: *mut c_int, option_values: *mut *mut c_void) {
        // SAFETY: the program passes a NUL-terminated PTX image (null refused).
        let bytes = unsafe { image_bytes(image) }?;
        // SAFETY: the program's arrays and output slot, as cuda.h describes them.
        unsafe { load_with_logs(module, bytes, options, option_values, num_options) }
    }
}

entry! {
    /// `cuLinkCreate_v2`: a link of PTX inputs (see `link.rs`); the options' log
    /// buffers get the link's errors.
    fn cuLinkCreate_v2(num_options: c_uint, options: *mut c_int, option_values: *mut *mut c_void, state: *mut Handle) {
        if state.is_null() {
            return Err(Fail::new(CUDA_ERROR_INVALID_VALUE, "null link state"));
        }
        driver()?;
        current()?;
        // SAFETY: the option arrays hold `num_options` entries and stay valid for the
        // link state's life (cuda.h).
        let l = unsafe { crate::link::create((num_options, options, option_values)) };
        // SAFETY: checked non-null above.
        unsafe { out(state, l as Handle) }
    }
}

entry! {
    /// `cuLinkAddData_v2`: one input, `size` bytes at `data` (PTX only).
    fn cuLinkAddData_v2(state: Handle, kind: c_int, data: *mut c_void, size: usize, name: *const c_char, _num_options: c_uint, _options: *mut c_int, _option_values: *mut *mut c_void) {
        if data.is_null() || size == 0 {
            return Err(Fail::new(CUDA_ERROR_INVALID_VALUE, "no input data"));
        }
        // SAFETY: the program passes `size` readable bytes at `data` (non-null), and a
        // NUL-terminated name or null.
        let (bytes, name) = unsafe {
            (
                std::slice::from_raw_parts(data.cast::<u8>(), size),
                crate::link::input_label(name, "linked input"),
            )
        };
        crate::link::with(state as usize, |l| l.add(kind, bytes, &name))
    }
}

entry! {
    /// `cuLinkAddFile_v2`: one input read from `path` (PTX, or a fatbin's PTX).
    fn cuLinkAddFile_v2(state: Handle, kind: c_int, path: *const c_char, _num_options: c_uint, _options: *mut c_int, _option_values: *mut *mut c_void) {
        // SAFETY: a NUL-terminated path (null refused).
        let path = unsafe { c_str(path) }?;
        let bytes = crate::link::read_input(path)?;
        crate::link::with(state as usize, |l| l.add(kind, &bytes, path))
    }
}

entry! {
    /// `cuLinkComplete`: the linked image (owned by the link state until
    /// `cuLinkDestroy`), for `cuModuleLoadData`.
    fn cuLinkComplete(state: Handle, image: *mut *mut c_void, size: *mut usize) {
        if image.is_null() || size.is_null() {
            return Err(Fail::new(CUDA_ERROR_INVALID_VALUE, "null output"));
        }
        let (p, n) = crate::link::with(state as usize, |l| l.complete())?;
        // SAFETY: both checked non-null above.
        unsafe {
            out(image, p.cast_mut())?;
            out(size, n)
        }
    }
}

entry! {
    /// `cuLinkDestroy`: frees the link state and its image.
    fn cuLinkDestroy(state: Handle) { crate::link::destroy(state as usize) }
}

entry! {
    /// `cuModuleLoad`: a PTX or fatbin file.
    fn cuModuleLoad(module: *mut Handle, fname: *const c_char) {
        // SAFETY: a NUL-terminated path (null refused).
        let path = unsafe { c_str(fname) }?;
        let data = std::fs::read(path)
            .map_err(|e| Fail::new(CUDA_ERROR_FILE_NOT_FOUND, format!("{path}: {e}")))?;
        // A text ends at its NUL; a fatbin holds NULs.
        let end = match fatbin::is_fatbin(&data) {
            true => data.len(),
            false => data.iter().position(|b| *b == 0).unwrap_or(data.len()),
        };
        let m = module_load(module, &data[..end])?;
        // SAFETY: checked non-null in `module_load`.
        unsafe { out(module, ptr(m)) }
    }
}

entry! {
    /// `cuFuncGetName`: the kernel's name, valid while its module is loaded.
    fn cuFuncGetName(name: *mut *const c_char, f: Handle) {
        if name.is_null() {
            return Err(Fail::new(CUDA_ERROR_INVALID_VALUE, "null name"));
        }
        let p = driver()?.function_name(nonnull(f, "function")?)?;
        // SAFETY: checked non-null; the program's `const char *` slot.
        unsafe { out(name, p) }
    }
}

entry! {
    /// `cuModuleUnload`.
    fn cuModuleUnload(module: Handle) {
        let m = nonnull(module, "module")?;
        driver()?.module_unload(current().unwrap_or(0), m)
    }
}

entry! {
    /// `cuModuleGetFunction`.
    fn cuModuleGetFunction(hfunc: *mut Handle, module: Handle, name: *const c_char) {
        if hfunc.is_null() {
            return Err(Fail::new(CUDA_ERROR_INVALID_VALUE, "null hfunc"));
        }
        // SAFETY: a NUL-terminated kernel name (null refused).
        let name = unsafe { c_str(name) }?;
        let m = nonnull(module, "module")?;
        let f = driver()?.module_get_function(current().unwrap_or(0), m, name)?;
        // SAFETY: checked non-null; a writable CUfunction slot.
        unsafe { out(hfunc, ptr(f)) }
    }
}

entry! {
    /// `cuModuleGetGlobal_v2` (either output may be NULL).
    fn cuModuleGetGlobal_v2(dptr: *mut CUdeviceptr, bytes: *mut usize, module: Handle, name: *const c_char) {
        // SAFETY: the program's arguments as cuda.h describes them.
        unsafe { module_global(dptr, bytes, module, name, "module") }
    }
}

/// `cuModuleGetGlobal_v2` and `cuLibraryGetGlobal`: the variable `name` of module
/// `module` (a library is its module); either output may be NULL.
///
/// # Safety
/// `name` is null or NUL-terminated; each output is null or writable.
unsafe fn module_global(
    dptr: *mut CUdeviceptr,
    bytes: *mut usize,
    module: Handle,
    name: *const c_char,
    what: &str,
) -> R<()> {
    // SAFETY: a NUL-terminated variable name (null refused).
    let name = unsafe { c_str(name) }?;
    let m = nonnull(module, what)?;
    let (p, n) = driver()?.module_get_global(current().unwrap_or(0), m, name)?;
    // SAFETY: each output is optional and written only when non-null.
    unsafe {
        if !dptr.is_null() {
            out(dptr, p)?;
        }
        if !bytes.is_null() {
            out(bytes, n as usize)?;
        }
    }
    Ok(())
}

// Libraries (`cuLibrary*`, `cuKernel*`, CUDA 12): a library is the module its image
// makes in the context current when it is loaded, and its kernels are that module's
// functions (a `CUkernel` is a `CUfunction` of that context; `cuLaunchKernel` takes
// either, as the driver does).

/// `cuModuleLoadDataEx`, `cuLibraryLoadData` and `cuLibraryLoadFromFile`: `image`
/// loaded as a module, the JIT error log in `jit_options`' buffers (`CU_JIT_ERROR_LOG_
/// BUFFER`; its size option gets the bytes written).
///
/// # Safety
/// `library` is null or writable; the JIT option arrays hold `n` entries each.
unsafe fn load_with_logs(
    library: *mut Handle,
    image: &[u8],
    jit_options: *mut c_int,
    jit_values: *mut *mut c_void,
    n: c_uint,
) -> R<()> {
    match module_load(library, image) {
        Ok(m) => {
            // SAFETY: the option arrays hold `n` entries (cuda.h).
            unsafe { write_jit_logs(n, jit_options, jit_values, "") };
            // SAFETY: checked non-null in `module_load`.
            unsafe { out(library, ptr(m)) }
        }
        Err(f) => {
            let log = f.jit_log.clone().unwrap_or_else(|| f.detail.clone());
            // SAFETY: as above.
            unsafe { write_jit_logs(n, jit_options, jit_values, &log) };
            Err(f)
        }
    }
}

entry! {
    /// `cuLibraryLoadData`: PTX text or a linked image, in the current context.
    fn cuLibraryLoadData(library: *mut Handle, code: *const c_void, jit_options: *mut c_int, jit_values: *mut *mut c_void, num_jit: c_uint, _lib_options: *mut c_int, _lib_values: *mut *mut c_void, _num_lib: c_uint) {
        // SAFETY: the program passes a NUL-terminated image (null refused).
        let bytes = unsafe { image_bytes(code) }?;
        // SAFETY: the program's arrays and output slot, as cuda.h describes them.
        unsafe { load_with_logs(library, bytes, jit_options, jit_values, num_jit) }
    }
}

entry! {
    /// `cuLibraryLoadFromFile`: a PTX file (or linked image), in the current context.
    fn cuLibraryLoadFromFile(library: *mut Handle, path: *const c_char, jit_options: *mut c_int, jit_values: *mut *mut c_void, num_jit: c_uint, _lib_options: *mut c_int, _lib_values: *mut *mut c_void, _num_lib: c_uint) {
        // SAFETY: a NUL-terminated path (null refused).
        let path = unsafe { c_str(path) }?;
        let data = std::fs::read(path)
            .map_err(|e| Fail::new(CUDA_ERROR_FILE_NOT_FOUND, format!("{path}: {e}")))?;
        let end = data.iter().position(|b| *b == 0).unwrap_or(data.len());
        // SAFETY: the program's arrays and output slot, as cuda.h describes them.
        unsafe { load_with_logs(library, &data[..end], jit_options, jit_values, num_jit) }
    }
}

entry! {
    /// `cuLibraryUnload`.
    fn cuLibraryUnload(library: Handle) {
        let m = nonnull(library, "library")?;
        driver()?.module_unload(current().unwrap_or(0), m)
    }
}

entry! {
    /// `cuLibraryGetModule`: the module the library is.
    fn cuLibraryGetModule(module: *mut Handle, library: Handle) {
        let m = nonnull(library, "library")?;
        driver()?.module_exists(m)?;
        // SAFETY: `out` refuses null.
        unsafe { out(module, ptr(m)) }
    }
}

entry! {
    /// `cuLibraryGetKernel`: the kernel `name` of the library.
    fn cuLibraryGetKernel(kernel: *mut Handle, library: Handle, name: *const c_char) {
        if kernel.is_null() {
            return Err(Fail::new(CUDA_ERROR_INVALID_VALUE, "null kernel"));
        }
        // SAFETY: a NUL-terminated kernel name (null refused).
        let name = unsafe { c_str(name) }?;
        let m = nonnull(library, "library")?;
        let f = driver()?.module_get_function(current().unwrap_or(0), m, name)?;
        // SAFETY: checked non-null above.
        unsafe { out(kernel, ptr(f)) }
    }
}

entry! {
    /// `cuKernelGetFunction`: the kernel as a function of its library's context.
    fn cuKernelGetFunction(func: *mut Handle, kernel: Handle) {
        let k = nonnull(kernel, "kernel")?;
        driver()?.function_layout(k)?;
        // SAFETY: `out` refuses null.
        unsafe { out(func, ptr(k)) }
    }
}

entry! {
    /// `cuLibraryGetGlobal` (either output may be NULL).
    fn cuLibraryGetGlobal(dptr: *mut CUdeviceptr, bytes: *mut usize, library: Handle, name: *const c_char) {
        // SAFETY: the program's arguments as cuda.h describes them.
        unsafe { module_global(dptr, bytes, library, name, "library") }
    }
}

entry! {
    /// `cuKernelGetAttribute`: as `cuFuncGetAttribute` (one device here).
    fn cuKernelGetAttribute(pi: *mut c_int, attrib: c_int, kernel: Handle, _dev: CUdevice) {
        let k = nonnull(kernel, "kernel")?;
        let v = driver()?.function_attribute(k, attrib)?;
        // SAFETY: `out` refuses null.
        unsafe { out(pi, v) }
    }
}

entry! {
    /// `cuKernelSetAttribute`: as `cuFuncSetAttribute`.
    fn cuKernelSetAttribute(attrib: c_int, value: c_int, kernel: Handle, _dev: CUdevice) {
        let k = nonnull(kernel, "kernel")?;
        driver()?.function_set_attribute(k, attrib, value)
    }
}

entry! {
    /// `cuKernelSetCacheConfig`: a hint, accepted.
    fn cuKernelSetCacheConfig(kernel: Handle, _config: c_int, _dev: CUdevice) {
        let k = nonnull(kernel, "kernel")?;
        driver()?.function_layout(k).map(drop)
    }
}

// The occupancy calculator (`vmgpu_cuda_api::occupancy`). The flags (only
// `CU_OCCUPANCY_DISABLE_CACHING_OVERRIDE`, about the L1/shared split) change nothing
// here.

fn occupancy_blocks(n: *mut c_int, f: Handle, block_size: c_int, dynamic: usize) -> R<()> {
    let f = nonnull(f, "function")?;
    let (limits, kernel) = driver()?.occupancy(f)?;
    let size = u32::try_from(block_size)
        .map_err(|_| Fail::new(CUDA_ERROR_INVALID_VALUE, format!("block size {block_size}")))?;
    let blocks = limits.active_blocks(&kernel, size, dynamic as u64);
    // SAFETY: `out` refuses null.
    unsafe { out(n, blocks as c_int) }
}

entry! {
    /// `cuOccupancyMaxActiveBlocksPerMultiprocessor`.
    fn cuOccupancyMaxActiveBlocksPerMultiprocessor(n: *mut c_int, f: Handle, block_size: c_int, dynamic: usize) {
        occupancy_blocks(n, f, block_size, dynamic)
    }
}

entry! {
    /// `cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags`.
    fn cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(n: *mut c_int, f: Handle, block_size: c_int, dynamic: usize, _flags: c_uint) {
        occupancy_blocks(n, f, block_size, dynamic)
    }
}

/// `CUoccupancyB2DSize`: the dynamic shared memory of a block size.
type BlockToShared = Option<unsafe extern "C" fn(block_size: c_int) -> usize>;

/// `cuOccupancyMaxPotentialBlockSize[WithFlags]`.
///
/// # Safety
/// `to_shared` is null or a function safe to call with any block size.
unsafe fn potential_block_size(
    grid: *mut c_int,
    block: *mut c_int,
    f: Handle,
    to_shared: BlockToShared,
    dynamic: usize,
    limit: c_int,
) -> R<()> {
    if grid.is_null() || block.is_null() {
        return Err(Fail::new(CUDA_ERROR_INVALID_VALUE, "null output"));
    }
    let f = nonnull(f, "function")?;
    let (limits, kernel) = driver()?.occupancy(f)?;
    let shared = |size: u32| match to_shared {
        // SAFETY: the program's callback, called as cuda.h documents it.
        Some(cb) => (unsafe { cb(size as c_int) }) as u64,
        None => dynamic as u64,
    };
    let (g, b) = limits.potential_block_size(&kernel, shared, limit.max(0) as u32);
    // SAFETY: both checked non-null above.
    unsafe {
        out(grid, g as c_int)?;
        out(block, b as c_int)
    }
}

entry! {
    /// `cuOccupancyMaxPotentialBlockSize`.
    fn cuOccupancyMaxPotentialBlockSize(grid: *mut c_int, block: *mut c_int, f: Handle, to_shared: BlockToShared, dynamic: usize, limit: c_int) {
        // SAFETY: the program's arguments as cuda.h describes them.
        unsafe { potential_block_size(grid, block, f, to_shared, dynamic, limit) }
    }
}

entry! {
    /// `cuOccupancyMaxPotentialBlockSizeWithFlags`.
    fn cuOccupancyMaxPotentialBlockSizeWithFlags(grid: *mut c_int, block: *mut c_int, f: Handle, to_shared: BlockToShared, dynamic: usize, limit: c_int, _flags: c_uint) {
        // SAFETY: the program's arguments as cuda.h describes them.
        unsafe { potential_block_size(grid, block, f, to_shared, dynamic, limit) }
    }
}

entry! {
    /// `cuOccupancyAvailableDynamicSMemPerBlock`.
    fn cuOccupancyAvailableDynamicSMemPerBlock(bytes: *mut usize, f: Handle, blocks: c_int, block_size: c_int) {
        let f = nonnull(f, "function")?;
        let (limits, kernel) = driver()?.occupancy(f)?;
        let n = limits.available_dynamic_shared(&kernel, blocks.max(0) as u32, block_size.max(0) as u32);
        // SAFETY: `out` refuses null.
        unsafe { out(bytes, n as usize) }
    }
}

entry! {
    /// `cuFuncSetAttribute`: the settable attributes (the maximum dynamic shared memory,
    /// the carve-out); an unknown attribute is `CUDA_ERROR_INVALID_VALUE`.
    fn cuFuncSetAttribute(func: Handle, attrib: c_int, value: c_int) {
        let f = nonnull(func, "function")?;
        driver()?.function_set_attribute(f, attrib, value)
    }
}

entry! {
    /// `cuFuncGetAttribute`: every attribute; an unknown one is
    /// `CUDA_ERROR_INVALID_VALUE`.
    fn cuFuncGetAttribute(pi: *mut c_int, attrib: c_int, func: Handle) {
        let f = nonnull(func, "function")?;
        let v = driver()?.function_attribute(f, attrib)?;
        // SAFETY: `out` refuses null.
        unsafe { out(pi, v) }
    }
}

entry! {
    /// `cuFuncSetCacheConfig`: a hint, accepted.
    fn cuFuncSetCacheConfig(func: Handle, _config: c_int) {
        let f = nonnull(func, "function")?;
        driver()?.function_layout(f).map(drop)
    }
}

/// Refuses a launch geometry the device cannot run at the call, as the driver does
/// (and as forward mode, whose launches are pipelined, could otherwise only report at
/// the next synchronisation).
fn check_geometry(e: &Driver, ctx: u64, grid: [c_uint; 3], block: [c_uint; 3]) -> R<()> {
    use std::collections::HashMap;
    use std::sync::Mutex;
    static LIMITS: Mutex<Option<HashMap<u32, [i32; 7]>>> = Mutex::new(None);
    let bad = |why: String| Err(Fail::new(CUDA_ERROR_INVALID_VALUE, why));
    if grid.contains(&0) || block.contains(&0) {
        return bad(format!("grid {grid:?}, block {block:?}: a zero dimension"));
    }
    let dev = e.ctx_device(ctx)?;
    let cached = LIMITS
        .lock()
        .ok()
        .and_then(|m| m.as_ref().and_then(|m| m.get(&dev).copied()));
    let limits = match cached {
        Some(l) => l,
        None => {
            // MAX_THREADS_PER_BLOCK, MAX_BLOCK_DIM_X/Y/Z, MAX_GRID_DIM_X/Y/Z.
            let mut l = [0i32; 7];
            for (i, v) in l.iter_mut().enumerate() {
                match e.device_attribute(dev, i as i32 + 1) {
                    Ok(x) => *v = x,
                    Err(_) => return Ok(()),
                }
            }
            if let Ok(mut m) = LIMITS.lock() {
                m.get_or_insert_with(HashMap::new).insert(dev, l);
            }
            l
        }
    };
    let threads = block.iter().map(|b| u64::from(*b)).product::<u64>();
    if threads > limits[0].max(0) as u64 {
        return bad(format!(
            "block {block:?}: {threads} threads, more than {}",
            limits[0]
        ));
    }
    for i in 0..3 {
        if block[i] as i64 > i64::from(limits[1 + i]) || grid[i] as i64 > i64::from(limits[4 + i]) {
            return bad(format!(
                "grid {grid:?}, block {block:?}: beyond the device's limits"
            ));
        }
    }
    Ok(())
}

/// Packs a launch's parameters per the kernel's layout and launches.
///
/// # Safety
/// `params` is null or holds one pointer per kernel parameter, each to that parameter's
/// bytes; `extra` is null or a `CU_LAUNCH_PARAM_END`-terminated list of key/value
/// pointers as cuda.h describes.
#[allow(clippy::too_many_arguments)]
unsafe fn launch(
    f: Handle,
    grid: [c_uint; 3],
    block: [c_uint; 3],
    shared: c_uint,
    stream: u64,
    params: *mut *mut c_void,
    extra: *mut *mut c_void,
    cooperative: bool,
) -> R<()> {
    let e = driver()?;
    let f = nonnull(f, "function")?;
    let ctx = current()?;
    let layout = e.function_layout(f)?.ok_or_else(|| {
        Fail::new(
            CUDA_ERROR_NOT_SUPPORTED,
            "the server does not know this kernel's parameter layout",
        )
    })?;
    check_geometry(e, ctx, grid, block)?;
    let config = vmgpu_cuda_api::LaunchConfig {
        grid,
        block,
        shared_bytes: shared,
    };
    // SAFETY: the caller's guarantee.
    let args = unsafe { gather_args(&layout, params, extra) }?;
    e.launch(ctx, f, config, stream, &args, cooperative)
}

/// The kernel's arguments from `kernelParams` or `extra`, as cuda.h describes them,
/// each the size the kernel's `layout` gives.
///
/// # Safety
/// `params` (one pointer per parameter) or `extra` (a `CU_LAUNCH_PARAM_*` list) is what
/// the program passed, readable for the kernel's parameters.
unsafe fn gather_args<'a>(
    layout: &[vmgpu_cuda_api::ParamLayout],
    params: *mut *mut c_void,
    extra: *mut *mut c_void,
) -> R<Vec<&'a [u8]>> {
    if !params.is_null() && !extra.is_null() {
        return Err(Fail::new(
            CUDA_ERROR_INVALID_VALUE,
            "both kernelParams and extra given",
        ));
    }
    let mut args: Vec<&[u8]> = Vec::with_capacity(layout.len());
    if !params.is_null() {
        for (i, p) in layout.iter().enumerate() {
            let size = &p.size;
            // SAFETY: `params` holds one pointer per kernel parameter (cuda.h).
            let p = unsafe { *params.add(i) };
            if p.is_null() {
                return Err(Fail::new(
                    CUDA_ERROR_INVALID_VALUE,
                    format!("kernelParams[{i}] is NULL"),
                ));
            }
            // SAFETY: kernelParams[i] points to the parameter's value, `size` bytes
            // (the kernel's own declaration), read during this call only.
            args.push(unsafe { std::slice::from_raw_parts(p.cast::<u8>(), *size as usize) });
        }
    } else if !extra.is_null() {
        let (mut buf, mut len): (*const u8, Option<usize>) = (std::ptr::null(), None);
        let mut i = 0;
        loop {
            // SAFETY: `extra` is a key/value list ending with CU_LAUNCH_PARAM_END.
            let key = unsafe { *extra.add(i) } as usize;
            if key == CU_LAUNCH_PARAM_END {
                break;
            }
            // SAFETY: every key but the end marker is followed by its value.
            let value = unsafe { *extra.add(i + 1) };
            match key {
                CU_LAUNCH_PARAM_BUFFER_POINTER => buf = value.cast::<u8>(),
                CU_LAUNCH_PARAM_BUFFER_SIZE if !value.is_null() => {
                    // SAFETY: the value of BUFFER_SIZE points to a size_t.
                    len = Some(unsafe { value.cast::<usize>().read_unaligned() });
                }
                _ => {
                    return Err(Fail::new(
                        CUDA_ERROR_INVALID_VALUE,
                        format!("unknown launch extra key {key:#x}"),
                    ))
                }
            }
            i += 2;
        }
        let (Some(len), false) = (len, buf.is_null()) else {
            return Err(Fail::new(
                CUDA_ERROR_INVALID_VALUE,
                "extra without a buffer pointer and size",
            ));
        };
        // SAFETY: the program's parameter buffer is readable for `len` bytes.
        let all = unsafe { std::slice::from_raw_parts(buf, len) };
        for (i, p) in layout.iter().enumerate() {
            let (off, size) = (&p.offset, &p.size);
            let a = all
                .get(*off as usize..(*off + *size) as usize)
                .ok_or_else(|| {
                    Fail::new(
                        CUDA_ERROR_INVALID_VALUE,
                        format!("the parameter buffer ({len} bytes) ends before parameter {i}"),
                    )
                })?;
            args.push(a);
        }
    } else if !layout.is_empty() {
        return Err(Fail::new(
            CUDA_ERROR_INVALID_VALUE,
            format!("the kernel takes {} parameters; none given", layout.len()),
        ));
    }
    Ok(args)
}

entry! {
    /// `cuLaunchKernel`.
    fn cuLaunchKernel(f: Handle, gx: c_uint, gy: c_uint, gz: c_uint, bx: c_uint, by: c_uint, bz: c_uint, shared: c_uint, stream: Handle, params: *mut *mut c_void, extra: *mut *mut c_void) {
        // SAFETY: the program's arguments as cuda.h describes them.
        unsafe { launch(f, [gx, gy, gz], [bx, by, bz], shared, strm(stream, false), params, extra, false) }
    }
}

entry! {
    /// `cuLaunchCooperativeKernel`: every block at once (cooperative groups' grid
    /// sync); a grid larger than the device holds at once is
    /// `CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE`.
    fn cuLaunchCooperativeKernel(f: Handle, gx: c_uint, gy: c_uint, gz: c_uint, bx: c_uint, by: c_uint, bz: c_uint, shared: c_uint, stream: Handle, params: *mut *mut c_void) {
        // SAFETY: the program's arguments as cuda.h describes them.
        unsafe { launch(f, [gx, gy, gz], [bx, by, bz], shared, strm(stream, false), params, std::ptr::null_mut(), true) }
    }
}

entry! {
    /// `cuLaunchCooperativeKernel_ptsz`.
    fn cuLaunchCooperativeKernel_ptsz(f: Handle, gx: c_uint, gy: c_uint, gz: c_uint, bx: c_uint, by: c_uint, bz: c_uint, shared: c_uint, stream: Handle, params: *mut *mut c_void) {
        // SAFETY: the program's arguments as cuda.h describes them.
        unsafe { launch(f, [gx, gy, gz], [bx, by, bz], shared, strm(stream, true), params, std::ptr::null_mut(), true) }
    }
}

/// `CUlaunchConfig` (cuda.h 12).
#[repr(C)]
#[derive(Debug)]
pub(crate) struct LaunchConfigEx {
    grid: [c_uint; 3],
    block: [c_uint; 3],
    shared: c_uint,
    stream: Handle,
    attrs: *const LaunchAttribute,
    num_attrs: c_uint,
}

/// `CUlaunchAttribute`: an id, then its value (a 64-byte union) at offset 8.
#[repr(C)]
#[derive(Debug)]
pub(crate) struct LaunchAttribute {
    id: c_int,
    pad: [u8; 4],
    value: [u32; 16],
}

/// Checks a launch's attributes: the hints are taken (priorities, access policy,
/// scheduling and serialisation policies), a cluster of one block is a plain launch;
/// clusters and programmatic events are not supported here. Whether it is cooperative.
fn launch_attributes(attrs: &[LaunchAttribute]) -> R<bool> {
    let mut cooperative = false;
    for a in attrs {
        let supported = match a.id {
            // IGNORE, ACCESS_POLICY_WINDOW, SYNCHRONIZATION_POLICY, CLUSTER_SCHEDULING_
            // POLICY_PREFERENCE, PROGRAMMATIC_STREAM_SERIALIZATION, PRIORITY,
            // MEM_SYNC_DOMAIN_MAP, MEM_SYNC_DOMAIN: hints.
            0 | 1 | 3 | 5 | 6 | 8 | 9 | 10 => true,
            // COOPERATIVE.
            2 => {
                cooperative = a.value[0] != 0;
                true
            }
            // CLUSTER_DIMENSION: one block per cluster is a plain launch.
            4 => a.value[..3].iter().all(|d| *d <= 1),
            _ => false,
        };
        if !supported {
            return Err(Fail::new(
                CUDA_ERROR_NOT_SUPPORTED,
                format!(
                    "cuLaunchKernelEx launch attribute {} (value {:?}) is not supported",
                    a.id,
                    &a.value[..3]
                ),
            ));
        }
    }
    Ok(cooperative)
}

/// `cuLaunchKernelEx`: its configuration's launch.
///
/// # Safety
/// `config` is null or a valid `CUlaunchConfig` whose `attrs` holds `numAttrs` entries;
/// the parameters as for `cuLaunchKernel`.
unsafe fn launch_ex(
    config: *const LaunchConfigEx,
    f: Handle,
    params: *mut *mut c_void,
    extra: *mut *mut c_void,
    per_thread: bool,
) -> R<()> {
    if config.is_null() {
        return Err(Fail::new(
            CUDA_ERROR_INVALID_VALUE,
            "null launch configuration",
        ));
    }
    // SAFETY: non-null, and a valid CUlaunchConfig (the caller).
    let c = unsafe { &*config };
    let mut cooperative = false;
    if c.num_attrs > 0 {
        if c.attrs.is_null() {
            return Err(Fail::new(
                CUDA_ERROR_INVALID_VALUE,
                "null launch attributes",
            ));
        }
        // SAFETY: `attrs` holds `num_attrs` entries (the caller).
        cooperative = launch_attributes(unsafe {
            std::slice::from_raw_parts(c.attrs, c.num_attrs as usize)
        })?;
    }
    // SAFETY: as the caller guarantees for `cuLaunchKernel`'s arguments.
    unsafe {
        launch(
            f,
            c.grid,
            c.block,
            c.shared,
            strm(c.stream, per_thread),
            params,
            extra,
            cooperative,
        )
    }
}

entry! {
    /// `cuLaunchKernelEx`.
    fn cuLaunchKernelEx(config: *const LaunchConfigEx, f: Handle, params: *mut *mut c_void, extra: *mut *mut c_void) {
        // SAFETY: the program's arguments as cuda.h describes them.
        unsafe { launch_ex(config, f, params, extra, false) }
    }
}

entry! {
    /// `cuLaunchKernelEx_ptsz`.
    fn cuLaunchKernelEx_ptsz(config: *const LaunchConfigEx, f: Handle, params: *mut *mut c_void, extra: *mut *mut c_void) {
        // SAFETY: the program's arguments as cuda.h describes them.
        unsafe { launch_ex(config, f, params, extra, true) }
    }
}

entry! {
    /// `cuLaunchKernel_ptsz`: the null stream is the per-thread default stream.
    fn cuLaunchKernel_ptsz(f: Handle, gx: c_uint, gy: c_uint, gz: c_uint, bx: c_uint, by: c_uint, bz: c_uint, shared: c_uint, stream: Handle, params: *mut *mut c_void, extra: *mut *mut c_void) {
        // SAFETY: the program's arguments as cuda.h describes them.
        unsafe { launch(f, [gx, gy, gz], [bx, by, bz], shared, strm(stream, true), params, extra, false) }
    }
}

// ---------------------------------------------------------------------------------------
// Device memory.

entry! {
    /// `cuMemAlloc_v2`.
    fn cuMemAlloc_v2(dptr: *mut CUdeviceptr, bytes: usize) {
        if dptr.is_null() {
            return Err(Fail::new(CUDA_ERROR_INVALID_VALUE, "null dptr"));
        }
        if bytes == 0 {
            return Err(Fail::new(CUDA_ERROR_INVALID_VALUE, "0 bytes"));
        }
        let p = driver()?.mem_alloc(current()?, bytes as u64)?;
        // SAFETY: checked non-null; a writable CUdeviceptr.
        unsafe { out(dptr, p) }
    }
}

entry! {
    /// `cuMemFree_v2` (0 is accepted and does nothing).
    fn cuMemFree_v2(dptr: CUdeviceptr) {
        let e = driver()?;
        let c = current()?;
        if dptr == 0 {
            return Ok(());
        }
        e.mem_free(c, dptr)
    }
}

fn alloc_async(dptr: *mut CUdeviceptr, bytes: usize, stream: u64) -> R<()> {
    if dptr.is_null() {
        return Err(Fail::new(CUDA_ERROR_INVALID_VALUE, "null dptr"));
    }
    if bytes == 0 {
        return Err(Fail::new(CUDA_ERROR_INVALID_VALUE, "0 bytes"));
    }
    let e = driver()?;
    let c = current()?;
    // Captured: the graph's allocation node.
    if e.graphs().status(stream).0 != crate::capture::CAPTURE_NONE {
        let p = graph_alloc(bytes as u64, |op| e.capture_all(stream, &[op]).map(drop))?;
        // SAFETY: checked non-null; a writable CUdeviceptr.
        return unsafe { out(dptr, p) };
    }
    // The stream must exist; the memory is usable at once (before the stream reaches
    // the allocation), which stream order allows.
    e.stream_query(c, stream)?;
    let p = e.mem_alloc(c, bytes as u64)?;
    // SAFETY: checked non-null; a writable CUdeviceptr.
    unsafe { out(dptr, p) }
}

fn free_async(dptr: CUdeviceptr, stream: u64) -> R<()> {
    let e = driver()?;
    let c = current()?;
    // Captured: the graph's free node, of one of its allocations.
    if e.graphs().status(stream).0 != crate::capture::CAPTURE_NONE {
        graph_free_check(dptr)?;
        e.capture_all(stream, &[crate::capture::Op::MemFree { dptr }])?;
        e.graphs().graph_free(dptr);
        return Ok(());
    }
    // Stream-ordered: freed once the stream has passed its work so far.
    e.stream_synchronize(c, stream)?;
    if dptr == 0 {
        return Ok(());
    }
    e.mem_free(c, dptr)
}

/// A graph's allocation of `bytes`, its node added by `add` (a captured call, or a
/// node of a graph): the memory is made now and kept while a graph holds the node.
fn graph_alloc(bytes: u64, add: impl FnOnce(crate::capture::Op) -> R<()>) -> R<u64> {
    let e = driver()?;
    let c = current()?;
    let dptr = e.mem_alloc(c, bytes)?;
    e.graphs().graph_alloc(dptr, bytes);
    if let Err(f) = add(crate::capture::Op::MemAlloc { dptr, bytes }) {
        e.graphs().graph_free(dptr);
        let _ = e.mem_free(c, dptr);
        return Err(f);
    }
    Ok(dptr)
}

/// `CUDA_ERROR_INVALID_VALUE` unless `dptr` is a graph's allocation (what a graph's
/// free node may free).
fn graph_free_check(dptr: u64) -> R<()> {
    if driver()?.graphs().is_graph_alloc(dptr) {
        Ok(())
    } else {
        Err(Fail::new(
            CUDA_ERROR_INVALID_VALUE,
            format!("{dptr:#x} is not a graph's allocation (a graph frees only its own)"),
        ))
    }
}

/// Frees the memory of graph allocations that are freed and that no graph holds any
/// more (after a graph or executable graph goes, or a trim).
fn release_graph_memory() -> R<()> {
    let e = driver()?;
    let mut gone = e.graphs().take_unheld();
    gone.extend(e.graphs().take_unheld_conds());
    if !gone.is_empty() {
        let c = current()?;
        for p in gone {
            e.mem_free(c, p)?;
        }
    }
    Ok(())
}

/// `CUDA_MEM_ALLOC_NODE_PARAMS`: the pool's properties (`CUmemPoolProps`: allocation
/// type, handle types, location, ...), access descriptors, size, and the address the
/// node gives back.
#[repr(C)]
pub(crate) struct MemAllocNodeParams {
    alloc_type: c_int,
    handle_types: c_int,
    location_type: c_int,
    location_id: c_int,
    win32: *mut c_void,
    max_size: usize,
    usage: u16,
    reserved: [u8; 54],
    access_descs: *const c_void,
    access_count: usize,
    bytesize: usize,
    dptr: CUdeviceptr,
}

entry! {
    /// `cuGraphAddMemAllocNode`: pinned device memory of the current context's device;
    /// made now (its address in `dptr`) and kept while a graph holds the node.
    fn cuGraphAddMemAllocNode(node: *mut Handle, graph: Handle, deps: *const Handle, n: usize, p: *mut MemAllocNodeParams) {
        // SAFETY: null or the program's parameters.
        let p = unsafe { p.as_mut() }.ok_or_else(|| Fail::new(CUDA_ERROR_INVALID_VALUE, "null nodeParams"))?;
        // CU_MEM_ALLOCATION_TYPE_PINNED on CU_MEM_LOCATION_TYPE_DEVICE.
        if p.alloc_type != 1 || p.location_type != 1 || p.bytesize == 0 {
            return Err(Fail::new(
                CUDA_ERROR_INVALID_VALUE,
                format!(
                    "allocation type {}, location type {}, {} bytes (pinned device memory of some bytes)",
                    p.alloc_type, p.location_type, p.bytesize
                ),
            ));
        }
        let kind = crate::capture::NODE_MEM_ALLOC;
        // SAFETY: the program's node slot and dependencies.
        p.dptr = graph_alloc(p.bytesize as u64, |op| unsafe { add_node(node, graph, deps, n, kind, vec![op]) })?;
        Ok(())
    }
}

entry! {
    /// `cuGraphAddMemFreeNode`: frees a graph's allocation when the graph runs.
    fn cuGraphAddMemFreeNode(node: *mut Handle, graph: Handle, deps: *const Handle, n: usize, dptr: CUdeviceptr) {
        graph_free_check(dptr)?;
        let op = crate::capture::Op::MemFree { dptr };
        // SAFETY: the program's node slot and dependencies.
        unsafe { add_node(node, graph, deps, n, crate::capture::NODE_MEM_FREE, vec![op]) }?;
        driver()?.graphs().graph_free(dptr);
        Ok(())
    }
}

entry! {
    /// `cuGraphMemAllocNodeGetParams`.
    fn cuGraphMemAllocNodeGetParams(node: Handle, p: *mut MemAllocNodeParams) {
        let (_, ops) = driver()?.graphs().node_ops(nonnull(node, "graph node")?)?;
        let [crate::capture::Op::MemAlloc { dptr, bytes }] = ops[..] else {
            return Err(Fail::new(CUDA_ERROR_INVALID_VALUE, format!("node {node:?} is not an allocation node")));
        };
        // SAFETY: null or the program's parameters.
        let p = unsafe { p.as_mut() }.ok_or_else(|| Fail::new(CUDA_ERROR_INVALID_VALUE, "null params_out"))?;
        (p.alloc_type, p.handle_types, p.location_type, p.location_id) = (1, 0, 1, 0);
        (p.access_descs, p.access_count) = (std::ptr::null(), 0);
        (p.bytesize, p.dptr) = (bytes as usize, dptr);
        Ok(())
    }
}

entry! {
    /// `cuGraphMemFreeNodeGetParams`.
    fn cuGraphMemFreeNodeGetParams(node: Handle, dptr: *mut CUdeviceptr) {
        let (_, ops) = driver()?.graphs().node_ops(nonnull(node, "graph node")?)?;
        let [crate::capture::Op::MemFree { dptr: p }] = ops[..] else {
            return Err(Fail::new(CUDA_ERROR_INVALID_VALUE, format!("node {node:?} is not a free node")));
        };
        if dptr.is_null() {
            return Err(Fail::new(CUDA_ERROR_INVALID_VALUE, "null dptr_out"));
        }
        // SAFETY: checked non-null; a writable CUdeviceptr.
        unsafe { out(dptr, p) }
    }
}

/// `CUDA_ERROR_INVALID_DEVICE` unless `device` is one.
fn check_device(device: CUdevice) -> R<()> {
    let n = driver()?.device_count()?;
    if device < 0 || device as u32 >= n {
        return Err(Fail::new(
            CUDA_ERROR_INVALID_DEVICE,
            format!("device {device}"),
        ));
    }
    Ok(())
}

entry! {
    /// `cuDeviceGetGraphMemAttribute`: the memory graphs' allocations hold (used and
    /// reserved are the same here), now or at most.
    fn cuDeviceGetGraphMemAttribute(device: CUdevice, attr: c_int, value: *mut c_void) {
        check_device(device)?;
        let v = driver()?.graphs().graph_mem_attribute(attr)?;
        if value.is_null() {
            return Err(Fail::new(CUDA_ERROR_INVALID_VALUE, "null value"));
        }
        // SAFETY: checked non-null; a cuuint64_t.
        unsafe { out(value.cast::<u64>(), v) }
    }
}

entry! {
    /// `cuDeviceSetGraphMemAttribute`: a high watermark reset (to 0).
    fn cuDeviceSetGraphMemAttribute(device: CUdevice, attr: c_int, value: *mut c_void) {
        check_device(device)?;
        if value.is_null() {
            return Err(Fail::new(CUDA_ERROR_INVALID_VALUE, "null value"));
        }
        // SAFETY: checked non-null; a cuuint64_t.
        let v = unsafe { value.cast::<u64>().read_unaligned() };
        driver()?.graphs().reset_graph_mem_high(attr, v)
    }
}

entry! {
    /// `cuDeviceGraphMemTrim`: frees what freed graph allocations no graph holds.
    fn cuDeviceGraphMemTrim(device: CUdevice) {
        check_device(device)?;
        release_graph_memory()
    }
}

// The stream-ordered allocator's pools: each device has its default pool, which
// `cuMemAllocAsync` draws from; it is the only pool (`cuMemPoolCreate` is not
// supported). Its handle is `POOL_TAG | device`.
const POOL_TAG: u64 = 0x706f_6f6c_0000_0000;

/// The device whose default pool `pool` is.
fn pool_device(pool: Handle) -> R<u32> {
    let p = h(pool);
    let d = (p ^ POOL_TAG) as u32;
    if p & !0xffff_ffff != POOL_TAG || d >= driver()?.device_count()? {
        return Err(Fail::new(
            CUDA_ERROR_INVALID_VALUE,
            format!("{p:#x} is not a memory pool (only the devices' default pools are)"),
        ));
    }
    Ok(d)
}

entry! {
    /// `cuDeviceGetDefaultMemPool`: the device's one pool.
    fn cuDeviceGetDefaultMemPool(pool: *mut Handle, device: CUdevice) { default_pool(pool, device) }
}

entry! {
    /// `cuDeviceGetMemPool`: the current pool, always the default one.
    fn cuDeviceGetMemPool(pool: *mut Handle, device: CUdevice) { default_pool(pool, device) }
}

/// The default pool of `device`, written to `pool`.
fn default_pool(pool: *mut Handle, device: CUdevice) -> R<()> {
    let d = dev(device)?;
    if d >= driver()?.device_count()? {
        return Err(Fail::new(CUDA_ERROR_INVALID_DEVICE, format!("device {d}")));
    }
    // SAFETY: `out` refuses null; the program passes a writable CUmemoryPool slot.
    unsafe { out(pool, ptr(POOL_TAG | d as u64)) }
}

entry! {
    /// `cuMemPoolGetAttribute`: freed memory goes back to the device at once (release
    /// threshold 0), reuse is allowed; the usage counters are not kept (0).
    fn cuMemPoolGetAttribute(pool: Handle, attr: c_int, value: *mut c_void) {
        pool_device(pool)?;
        if value.is_null() {
            return Err(Fail::new(CUDA_ERROR_INVALID_VALUE, "null value"));
        }
        match attr {
            // CU_MEMPOOL_ATTR_REUSE_* (int): allowed.
            1..=3 => {
                // SAFETY: non-null; an int slot for these attributes (cuda.h).
                unsafe { out(value.cast::<c_int>(), 1) }
            }
            // CU_MEMPOOL_ATTR_RELEASE_THRESHOLD and the usage counters (cuuint64_t).
            4..=8 => {
                // SAFETY: non-null; a cuuint64_t slot for these attributes (cuda.h).
                unsafe { out(value.cast::<u64>(), 0) }
            }
            a => Err(Fail::new(CUDA_ERROR_INVALID_VALUE, format!("memory pool attribute {a}"))),
        }
    }
}

entry! {
    /// `cuMemPoolSetAttribute`: the reuse flags and the release threshold are accepted
    /// (hints: memory is returned at once); resetting a high-water mark to 0 too.
    fn cuMemPoolSetAttribute(pool: Handle, attr: c_int, value: *mut c_void) {
        pool_device(pool)?;
        if value.is_null() {
            return Err(Fail::new(CUDA_ERROR_INVALID_VALUE, "null value"));
        }
        match attr {
            1..=4 | 6 | 8 => Ok(()),
            a => Err(Fail::new(CUDA_ERROR_INVALID_VALUE, format!("memory pool attribute {a} is not settable"))),
        }
    }
}

entry! {
    /// `cuMemPoolTrimTo`: nothing is held back to trim.
    fn cuMemPoolTrimTo(pool: Handle, _min_bytes: usize) { pool_device(pool).map(drop) }
}

entry! {
    /// `cuMemPoolGetAccess`: the pool's own device reads and writes it
    /// (`CU_MEM_ACCESS_FLAGS_PROT_READWRITE`); others have none.
    fn cuMemPoolGetAccess(flags: *mut c_int, pool: Handle, location: *const c_int) {
        let d = pool_device(pool)?;
        if location.is_null() {
            return Err(Fail::new(CUDA_ERROR_INVALID_VALUE, "null location"));
        }
        // SAFETY: a CUmemLocation: `type` (int) then `id` (int).
        let (kind, id) = unsafe { (*location, *location.add(1)) };
        // CU_MEM_LOCATION_TYPE_DEVICE = 1; CU_MEM_ACCESS_FLAGS_PROT_READWRITE = 3.
        let access = if kind == 1 && id == d as c_int { 3 } else { 0 };
        // SAFETY: `out` refuses null.
        unsafe { out(flags, access) }
    }
}

entry! {
    /// `cuMemAllocFromPoolAsync`: as `cuMemAllocAsync` from the device's default pool.
    fn cuMemAllocFromPoolAsync(dptr: *mut CUdeviceptr, bytes: usize, pool: Handle, stream: Handle) {
        pool_device(pool)?;
        alloc_async(dptr, bytes, strm(stream, false))
    }
}

entry! {
    /// `cuMemAllocFromPoolAsync_ptsz`.
    fn cuMemAllocFromPoolAsync_ptsz(dptr: *mut CUdeviceptr, bytes: usize, pool: Handle, stream: Handle) {
        pool_device(pool)?;
        alloc_async(dptr, bytes, strm(stream, true))
    }
}

entry! {
    /// `cuMemAllocAsync`: allocated at once (usable before the stream reaches it).
    fn cuMemAllocAsync(dptr: *mut CUdeviceptr, bytes: usize, stream: Handle) {
        alloc_async(dptr, bytes, strm(stream, false))
    }
}

entry! {
    /// `cuMemAllocAsync_ptsz`.
    fn cuMemAllocAsync_ptsz(dptr: *mut CUdeviceptr, bytes: usize, stream: Handle) {
        alloc_async(dptr, bytes, strm(stream, true))
    }
}

entry! {
    /// `cuMemFreeAsync`: waits for the stream's work so far, then frees (the
    /// allocation may come from `cuMemAlloc` too).
    fn cuMemFreeAsync(dptr: CUdeviceptr, stream: Handle) { free_async(dptr, strm(stream, false)) }
}

entry! {
    /// `cuMemFreeAsync_ptsz`.
    fn cuMemFreeAsync_ptsz(dptr: CUdeviceptr, stream: Handle) { free_async(dptr, strm(stream, true)) }
}

fn memset(dst: CUdeviceptr, value: u32, width: u32, n: usize, stream: Option<u64>) -> R<()> {
    let e = driver()?;
    let c = current()?;
    if n == 0 {
        return Ok(());
    }
    if !dst.is_multiple_of(width as u64) {
        return Err(Fail::new(
            CUDA_ERROR_INVALID_VALUE,
            format!("{dst:#x} is not aligned to {width} bytes"),
        ));
    }
    e.memset(c, dst, value, width, n as u64, stream)?;
    // Registered page-locked memory (which the driver state does not hold) is as
    // host-reachable as allocated: the synchronous form returns once done.
    if stream.is_none() && is_pinned(dst as usize, n.saturating_mul(width as usize)) {
        e.stream_synchronize(c, 0)?;
    }
    Ok(())
}

macro_rules! memsets {
    ($( $sync:ident, $sync_ptds:ident, $asyn:ident, $asyn_ptsz:ident, $ty:ty, $w:expr; )*) => {$(
        entry! {
            #[doc = concat!("`", stringify!($sync), "`.")]
            fn $sync(dst: CUdeviceptr, value: $ty, n: usize) { memset(dst, value as u32, $w, n, None) }
        }
        entry! {
            #[doc = concat!("`", stringify!($sync_ptds), "` (the same as the legacy one here).")]
            fn $sync_ptds(dst: CUdeviceptr, value: $ty, n: usize) { memset(dst, value as u32, $w, n, None) }
        }
        entry! {
            #[doc = concat!("`", stringify!($asyn), "`.")]
            fn $asyn(dst: CUdeviceptr, value: $ty, n: usize, stream: Handle) {
                memset(dst, value as u32, $w, n, Some(strm(stream, false)))
            }
        }
        entry! {
            #[doc = concat!("`", stringify!($asyn_ptsz), "`: the null stream is the per-thread one.")]
            fn $asyn_ptsz(dst: CUdeviceptr, value: $ty, n: usize, stream: Handle) {
                memset(dst, value as u32, $w, n, Some(strm(stream, true)))
            }
        }
    )*};
}

memsets! {
    cuMemsetD8_v2, cuMemsetD8_v2_ptds, cuMemsetD8Async, cuMemsetD8Async_ptsz, u8, 1;
    cuMemsetD16_v2, cuMemsetD16_v2_ptds, cuMemsetD16Async, cuMemsetD16Async_ptsz, u16, 2;
    cuMemsetD32_v2, cuMemsetD32_v2_ptds, cuMemsetD32Async, cuMemsetD32Async_ptsz, u32, 4;
}

/// Page-locked host ranges (from `cuMemHostAlloc`/`cuMemAllocHost` or registered):
/// start to length. Asynchronous copies from or to other (pageable) memory behave as the
/// driver's do: synchronous with respect to the host.
static PINNED: std::sync::Mutex<std::collections::BTreeMap<usize, usize>> =
    std::sync::Mutex::new(std::collections::BTreeMap::new());

fn pinned_ranges() -> std::sync::MutexGuard<'static, std::collections::BTreeMap<usize, usize>> {
    PINNED.lock().unwrap_or_else(|e| e.into_inner())
}

/// Whether `addr..addr+len` lies in one page-locked range.
fn is_pinned(addr: usize, len: usize) -> bool {
    pinned_ranges()
        .range(..=addr)
        .next_back()
        .is_some_and(|(start, n)| addr.checked_add(len).is_some_and(|end| end <= start + n))
}

/// # Safety
/// `src..src+n` is readable (for an asynchronous copy, until the stream passes it).
unsafe fn htod(dst: CUdeviceptr, src: *const c_void, n: usize, stream: Option<u64>) -> R<()> {
    let e = driver()?;
    let c = current()?;
    if n == 0 {
        return Ok(());
    }
    if src.is_null() {
        return Err(Fail::new(CUDA_ERROR_INVALID_VALUE, "null source"));
    }
    let pinned = is_pinned(src as usize, n);
    // SAFETY: forwarded from the caller.
    unsafe { e.memcpy_htod(c, dst, src.cast(), n, stream, pinned) }
}

/// # Safety
/// `dst..dst+n` is writable (for an asynchronous copy, until the stream passes it).
unsafe fn dtoh(dst: *mut c_void, src: CUdeviceptr, n: usize, stream: Option<u64>) -> R<()> {
    let e = driver()?;
    let c = current()?;
    if n == 0 {
        return Ok(());
    }
    if dst.is_null() {
        return Err(Fail::new(CUDA_ERROR_INVALID_VALUE, "null destination"));
    }
    let pinned = is_pinned(dst as usize, n);
    // SAFETY: forwarded from the caller.
    unsafe { e.memcpy_dtoh(c, dst.cast(), src, n, stream, pinned) }
}

fn dtod(dst: CUdeviceptr, src: CUdeviceptr, n: usize, stream: Option<u64>) -> R<()> {
    let e = driver()?;
    let c = current()?;
    if n == 0 {
        return Ok(());
    }
    e.memcpy_dtod(c, dst, src, n as u64, stream)
}

entry! {
    /// `cuMemcpyHtoD_v2`.
    fn cuMemcpyHtoD_v2(dst: CUdeviceptr, src: *const c_void, n: usize) {
        // SAFETY: the program's source buffer holds `n` bytes.
        unsafe { htod(dst, src, n, None) }
    }
}
entry! {
    /// `cuMemcpyHtoD_v2_ptds`.
    fn cuMemcpyHtoD_v2_ptds(dst: CUdeviceptr, src: *const c_void, n: usize) {
        // SAFETY: the program's source buffer holds `n` bytes.
        unsafe { htod(dst, src, n, None) }
    }
}
entry! {
    /// `cuMemcpyHtoDAsync_v2`.
    fn cuMemcpyHtoDAsync_v2(dst: CUdeviceptr, src: *const c_void, n: usize, stream: Handle) {
        // SAFETY: the program keeps the source until the stream passes the copy.
        unsafe { htod(dst, src, n, Some(strm(stream, false))) }
    }
}
entry! {
    /// `cuMemcpyHtoDAsync_v2_ptsz`.
    fn cuMemcpyHtoDAsync_v2_ptsz(dst: CUdeviceptr, src: *const c_void, n: usize, stream: Handle) {
        // SAFETY: the program keeps the source until the stream passes the copy.
        unsafe { htod(dst, src, n, Some(strm(stream, true))) }
    }
}
entry! {
    /// `cuMemcpyDtoH_v2`.
    fn cuMemcpyDtoH_v2(dst: *mut c_void, src: CUdeviceptr, n: usize) {
        // SAFETY: the program's destination buffer holds `n` bytes.
        unsafe { dtoh(dst, src, n, None) }
    }
}
entry! {
    /// `cuMemcpyDtoH_v2_ptds`.
    fn cuMemcpyDtoH_v2_ptds(dst: *mut c_void, src: CUdeviceptr, n: usize) {
        // SAFETY: the program's destination buffer holds `n` bytes.
        unsafe { dtoh(dst, src, n, None) }
    }
}
entry! {
    /// `cuMemcpyDtoHAsync_v2`.
    fn cuMemcpyDtoHAsync_v2(dst: *mut c_void, src: CUdeviceptr, n: usize, stream: Handle) {
        // SAFETY: the program keeps the destination until the stream passes the copy.
        unsafe { dtoh(dst, src, n, Some(strm(stream, false))) }
    }
}
entry! {
    /// `cuMemcpyDtoHAsync_v2_ptsz`.
    fn cuMemcpyDtoHAsync_v2_ptsz(dst: *mut c_void, src: CUdeviceptr, n: usize, stream: Handle) {
        // SAFETY: the program keeps the destination until the stream passes the copy.
        unsafe { dtoh(dst, src, n, Some(strm(stream, true))) }
    }
}
entry! {
    /// `cuMemcpyDtoD_v2`.
    fn cuMemcpyDtoD_v2(dst: CUdeviceptr, src: CUdeviceptr, n: usize) { dtod(dst, src, n, None) }
}
entry! {
    /// `cuMemcpyDtoD_v2_ptds`.
    fn cuMemcpyDtoD_v2_ptds(dst: CUdeviceptr, src: CUdeviceptr, n: usize) { dtod(dst, src, n, None) }
}
entry! {
    /// `cuMemcpyDtoDAsync_v2`.
    fn cuMemcpyDtoDAsync_v2(dst: CUdeviceptr, src: CUdeviceptr, n: usize, stream: Handle) {
        dtod(dst, src, n, Some(strm(stream, false)))
    }
}
entry! {
    /// `cuMemcpyDtoDAsync_v2_ptsz`.
    fn cuMemcpyDtoDAsync_v2_ptsz(dst: CUdeviceptr, src: CUdeviceptr, n: usize, stream: Handle) {
        dtod(dst, src, n, Some(strm(stream, true)))
    }
}

// ---------------------------------------------------------------------------------------
// Host memory.

fn host_alloc(pp: *mut *mut c_void, bytes: usize, flags: c_uint) -> R<()> {
    if pp.is_null() {
        return Err(Fail::new(CUDA_ERROR_INVALID_VALUE, "null pp"));
    }
    if bytes == 0 {
        return Err(Fail::new(CUDA_ERROR_INVALID_VALUE, "0 bytes"));
    }
    let p = driver()?.host_alloc(current()?, bytes, flags)?;
    pinned_ranges().insert(p as usize, bytes);
    // SAFETY: checked non-null; a writable `void *` slot.
    unsafe { out(pp, p.cast::<c_void>()) }
}

entry! {
    /// `cuMemAllocHost_v2`.
    fn cuMemAllocHost_v2(pp: *mut *mut c_void, bytes: usize) { host_alloc(pp, bytes, 0) }
}

entry! {
    /// `cuMemHostAlloc`.
    fn cuMemHostAlloc(pp: *mut *mut c_void, bytes: usize, flags: c_uint) { host_alloc(pp, bytes, flags) }
}

/// What the driver knows of `ptr` ([`crate::driver::Driver::pointer`]), or of
/// page-locked memory registered with `cuMemHostRegister` (in the current context).
fn pointer_info(ptr: u64) -> R<Option<crate::driver::PointerInfo>> {
    let e = driver()?;
    if let Some(i) = e.pointer(ptr) {
        return Ok(Some(i));
    }
    let registered = pinned_ranges()
        .range(..=ptr as usize)
        .next_back()
        .filter(|(&base, &n)| (ptr as usize) - base < n.max(1))
        .map(|(&base, &n)| (base as u64, n as u64));
    Ok(registered.map(|(base, size)| crate::driver::PointerInfo {
        ctx: current().unwrap_or(0),
        base,
        size,
        buffer_id: base,
        host: true,
        managed: false,
    }))
}

/// One `CUpointer_attribute` of memory `i` (at address `at`), written to `data`; `None` for
/// an attribute this library does not answer.
///
/// # Safety
/// `data` is writable for the attribute's type (cuda.h).
unsafe fn write_pointer_attribute(
    i: &crate::driver::PointerInfo,
    at: u64,
    attribute: c_int,
    data: *mut c_void,
) -> R<Option<()>> {
    // SAFETY: `data` is writable for the attribute's type (the caller), in every arm.
    unsafe {
        match attribute {
            // CONTEXT: a CUcontext.
            1 => out(data.cast::<Handle>(), ptr(i.ctx))?,
            // MEMORY_TYPE: CU_MEMORYTYPE_HOST (1) or _DEVICE (2, managed memory too), an
            // unsigned int.
            2 => out(data.cast::<c_uint>(), if i.host { 1 } else { 2 })?,
            // DEVICE_POINTER: device memory's own address; page-locked memory's mapping.
            3 if !i.host => out(data.cast::<u64>(), at)?,
            3 => {
                let d = driver()?.host_device_pointer(i.ctx, at as usize as *mut u8)?;
                out(data.cast::<u64>(), d)?
            }
            // HOST_POINTER: page-locked and managed memory's own address (device
            // memory has none).
            4 if i.host || i.managed => {
                out(data.cast::<*mut c_void>(), at as usize as *mut c_void)?
            }
            // SYNC_MEMOPS: off (cuPointerSetAttribute is not supported).
            6 => out(data.cast::<c_int>(), 0)?,
            // BUFFER_ID: an unsigned long long.
            7 => out(data.cast::<u64>(), i.buffer_id)?,
            // IS_MANAGED.
            8 => out(data.cast::<c_int>(), i.managed as c_int)?,
            // DEVICE_ORDINAL: device 0.
            9 => out(data.cast::<c_int>(), driver()?.ctx_device(i.ctx)? as c_int)?,
            // RANGE_START_ADDR and RANGE_SIZE.
            11 => out(data.cast::<u64>(), i.base)?,
            12 => out(data.cast::<usize>(), i.size as usize)?,
            // MAPPED: usable by the device: device memory, and page-locked memory where
            // the backend maps it.
            13 => {
                let mapped = !i.host
                    || driver()?
                        .host_device_pointer(i.ctx, at as usize as *mut u8)
                        .is_ok();
                out(data.cast::<c_int>(), mapped as c_int)?
            }
            4 => {
                return Err(Fail::new(
                    CUDA_ERROR_INVALID_VALUE,
                    format!(
                        "pointer attribute {attribute} of {} memory",
                        if i.host { "host" } else { "device" }
                    ),
                ))
            }
            _ => return Ok(None),
        }
    }
    Ok(Some(()))
}

entry! {
    /// `cuPointerGetAttribute`: what the driver knows of memory it made (device
    /// allocations, module variables, page-locked host memory); another address is
    /// `CUDA_ERROR_INVALID_VALUE`, as the driver answers.
    fn cuPointerGetAttribute(data: *mut c_void, attribute: c_int, p: CUdeviceptr) {
        if data.is_null() {
            return Err(Fail::new(CUDA_ERROR_INVALID_VALUE, "null data"));
        }
        let i = pointer_info(p)?.ok_or_else(|| {
            Fail::new(CUDA_ERROR_INVALID_VALUE, format!("{p:#x} is no memory of this driver"))
        })?;
        // SAFETY: `data` is writable for the attribute's type (cuda.h).
        match unsafe { write_pointer_attribute(&i, p, attribute, data) }? {
            Some(()) => Ok(()),
            None => Err(Fail::new(
                CUDA_ERROR_NOT_SUPPORTED,
                format!("pointer attribute {attribute} is not supported"),
            )),
        }
    }
}

entry! {
    /// `cuPointerGetAttributes`: each attribute as `cuPointerGetAttribute` answers it;
    /// for an address the driver did not make, as the driver does, no error and the
    /// default values (MEMORY_TYPE and the others 0, CONTEXT null).
    fn cuPointerGetAttributes(n: c_uint, attributes: *mut c_int, data: *mut *mut c_void, p: CUdeviceptr) {
        if n > 0 && (attributes.is_null() || data.is_null()) {
            return Err(Fail::new(CUDA_ERROR_INVALID_VALUE, "null attribute arrays"));
        }
        let info = pointer_info(p)?;
        for k in 0..n as usize {
            // SAFETY: the arrays hold `n` entries (cuda.h).
            let (a, d) = unsafe { (*attributes.add(k), *data.add(k)) };
            if d.is_null() {
                continue;
            }
            let answered = match &info {
                // SAFETY: `d` is writable for attribute `a`'s type (cuda.h).
                Some(i) => unsafe { write_pointer_attribute(i, p, a, d) }?.is_some(),
                None => false,
            };
            if !answered {
                let width = match a {
                    1 | 4 => std::mem::size_of::<Handle>(),
                    3 | 7 | 11 | 12 => 8,
                    _ => 4,
                };
                // SAFETY: `d` is writable for the attribute's type, `width` bytes.
                unsafe { std::ptr::write_bytes(d.cast::<u8>(), 0, width) };
            }
        }
        Ok(())
    }
}

entry! {
    /// `cuMemGetAddressRange_v2`: the allocation `p` points into (either output may be
    /// NULL); `CUDA_ERROR_NOT_FOUND` for an address in none.
    fn cuMemGetAddressRange_v2(base: *mut CUdeviceptr, size: *mut usize, p: CUdeviceptr) {
        let e = driver()?;
        let i = pointer_info(p)?
            .filter(|i| !i.host || e.host_device_pointer(i.ctx, p as usize as *mut u8).is_ok())
            .ok_or_else(|| Fail::new(CUDA_ERROR_NOT_FOUND, format!("{p:#x} is in no device allocation")))?;
        // SAFETY: each output is optional and written only when non-null.
        unsafe {
            if !base.is_null() {
                out(base, i.base)?;
            }
            if !size.is_null() {
                out(size, i.size as usize)?;
            }
        }
        Ok(())
    }
}

entry! {
    /// `cuMemFreeHost`.
    fn cuMemFreeHost(p: *mut c_void) {
        if p.is_null() {
            return Err(Fail::new(CUDA_ERROR_INVALID_VALUE, "null pointer"));
        }
        // SAFETY: the program frees memory it got from cuMemHostAlloc and no longer uses.
        unsafe { driver()?.host_free(p.cast()) }?;
        pinned_ranges().remove(&(p as usize));
        Ok(())
    }
}

entry! {
    /// `cuMemHostGetDevicePointer_v2`: the device address of page-locked host memory
    /// (on the simulator the host address itself: unified addressing).
    fn cuMemHostGetDevicePointer_v2(pdptr: *mut CUdeviceptr, p: *mut c_void, flags: c_uint) {
        if pdptr.is_null() || p.is_null() {
            return Err(Fail::new(CUDA_ERROR_INVALID_VALUE, "null pointer"));
        }
        if flags != 0 {
            return Err(Fail::new(CUDA_ERROR_INVALID_VALUE, format!("flags {flags:#x} (must be 0)")));
        }
        let d = driver()?.host_device_pointer(current()?, p.cast())?;
        // SAFETY: checked non-null; a CUdeviceptr slot.
        unsafe { out(pdptr, d) }
    }
}

// ---------------------------------------------------------------------------------------
// Copies between contexts and devices.

fn memcpy_peer(
    dst: CUdeviceptr,
    dst_ctx: Handle,
    src: CUdeviceptr,
    src_ctx: Handle,
    n: usize,
    stream: Option<u64>,
) -> R<()> {
    let e = driver()?;
    if n == 0 {
        return Ok(());
    }
    let (dc, sc) = (
        nonnull(dst_ctx, "dstContext")?,
        nonnull(src_ctx, "srcContext")?,
    );
    e.ctx_device(dc)?;
    e.ctx_device(sc)?;
    let ctx = match stream {
        Some(s) => stream_ctx(s)?,
        None => current().unwrap_or(dc),
    };
    e.memcpy_peer(ctx, dst, dc, src, sc, n, stream)
}

entry! {
    /// `cuMemcpyPeer`: between the memory of two contexts (through the host between
    /// two devices).
    fn cuMemcpyPeer(dst: CUdeviceptr, dst_ctx: Handle, src: CUdeviceptr, src_ctx: Handle, n: usize) {
        memcpy_peer(dst, dst_ctx, src, src_ctx, n, None)
    }
}
entry! {
    /// `cuMemcpyPeer_ptds`.
    fn cuMemcpyPeer_ptds(dst: CUdeviceptr, dst_ctx: Handle, src: CUdeviceptr, src_ctx: Handle, n: usize) {
        memcpy_peer(dst, dst_ctx, src, src_ctx, n, None)
    }
}
entry! {
    /// `cuMemcpyPeerAsync`: after the stream's work so far (done when it returns).
    fn cuMemcpyPeerAsync(dst: CUdeviceptr, dst_ctx: Handle, src: CUdeviceptr, src_ctx: Handle, n: usize, s: Handle) {
        memcpy_peer(dst, dst_ctx, src, src_ctx, n, Some(strm(s, false)))
    }
}
entry! {
    /// `cuMemcpyPeerAsync_ptsz`.
    fn cuMemcpyPeerAsync_ptsz(dst: CUdeviceptr, dst_ctx: Handle, src: CUdeviceptr, src_ctx: Handle, n: usize, s: Handle) {
        memcpy_peer(dst, dst_ctx, src, src_ctx, n, Some(strm(s, true)))
    }
}
entry! {
    /// `cuDeviceCanAccessPeer`: 0 between any two devices (separate memories).
    fn cuDeviceCanAccessPeer(can: *mut c_int, d: CUdevice, peer: CUdevice) {
        let v = driver()?.can_access_peer(dev(d)?, dev(peer)?)?;
        // SAFETY: `out` refuses null; an int slot.
        unsafe { out(can, c_int::from(v)) }
    }
}
entry! {
    /// `cuCtxEnablePeerAccess`: `CUDA_ERROR_PEER_ACCESS_UNSUPPORTED`, as the driver answers
    /// for devices that cannot reach each other (`cuDeviceCanAccessPeer` is 0).
    fn cuCtxEnablePeerAccess(peer: Handle, flags: c_uint) {
        let e = driver()?;
        let p = nonnull(peer, "peerContext")?;
        let pd = e.ctx_device(p)?;
        let d = e.ctx_device(current()?)?;
        if flags != 0 {
            return Err(Fail::new(CUDA_ERROR_INVALID_VALUE, format!("flags {flags:#x}")));
        }
        Err(Fail::new(
            CUDA_ERROR_PEER_ACCESS_UNSUPPORTED,
            format!("device {d} cannot reach device {pd}'s memory (copy with cuMemcpyPeer)"),
        ))
    }
}
entry! {
    /// `cuCtxDisablePeerAccess`: never enabled here.
    fn cuCtxDisablePeerAccess(peer: Handle) {
        let e = driver()?;
        e.ctx_device(nonnull(peer, "peerContext")?)?;
        Err(Fail::new(CUDA_ERROR_PEER_ACCESS_NOT_ENABLED, "peer access was never enabled"))
    }
}

// ---------------------------------------------------------------------------------------
// Managed memory.

/// `CU_MEM_ATTACH_GLOBAL`, `_HOST`, `_SINGLE`.
const MEM_ATTACH_GLOBAL: c_uint = 1;
const MEM_ATTACH_HOST: c_uint = 2;
const MEM_ATTACH_SINGLE: c_uint = 4;

entry! {
    /// `cuMemAllocManaged`: one address for the host and the device (flags
    /// `CU_MEM_ATTACH_GLOBAL` or `_HOST`; on the simulator both reach it at once).
    fn cuMemAllocManaged(dptr: *mut CUdeviceptr, bytes: usize, flags: c_uint) {
        if dptr.is_null() {
            return Err(Fail::new(CUDA_ERROR_INVALID_VALUE, "null dptr"));
        }
        if flags != MEM_ATTACH_GLOBAL && flags != MEM_ATTACH_HOST {
            return Err(Fail::new(
                CUDA_ERROR_INVALID_VALUE,
                format!("flags {flags:#x} (CU_MEM_ATTACH_GLOBAL or CU_MEM_ATTACH_HOST)"),
            ));
        }
        if bytes == 0 {
            return Err(Fail::new(CUDA_ERROR_INVALID_VALUE, "0 bytes"));
        }
        let p = driver()?.mem_alloc_managed(current()?, bytes as u64)?;
        // SAFETY: checked non-null; a CUdeviceptr slot.
        unsafe { out(dptr, p) }
    }
}

/// Checks that `ptr..ptr+count` is managed memory of this driver (for advice,
/// prefetches and stream attachment, which need no work here: the memory is where both
/// the host and the device reach it).
fn managed_range(ptr: CUdeviceptr, count: usize, what: &str) -> R<()> {
    let i = pointer_info(ptr)?.filter(|i| i.managed).ok_or_else(|| {
        Fail::new(
            CUDA_ERROR_INVALID_VALUE,
            format!("{what}: {ptr:#x} is not managed memory"),
        )
    })?;
    if (ptr - i.base).saturating_add(count as u64) > i.size {
        return Err(Fail::new(
            CUDA_ERROR_INVALID_VALUE,
            format!(
                "{what}: {ptr:#x}+{count} runs past its allocation ({} bytes)",
                i.size
            ),
        ));
    }
    Ok(())
}

/// `CUmemLocation`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub(crate) struct MemLocation {
    ty: c_int,
    id: c_int,
}

/// `CUmem_advise` values 1..=6 (read mostly, preferred location, accessed by, each set
/// and unset).
fn advise(ptr: CUdeviceptr, count: usize, advice: c_int) -> R<()> {
    if !(1..=6).contains(&advice) {
        return Err(Fail::new(
            CUDA_ERROR_INVALID_VALUE,
            format!("advice {advice}"),
        ));
    }
    managed_range(ptr, count, "cuMemAdvise")
}

/// A prefetch: stream-ordered and nothing to move; the stream must be live.
fn prefetch(ptr: CUdeviceptr, count: usize, s: u64) -> R<()> {
    managed_range(ptr, count, "cuMemPrefetchAsync")?;
    driver()?.stream_exists(stream_ctx(s)?, s)
}

entry! {
    /// `cuMemAdvise`: a hint; managed memory here is host memory both sides reach.
    fn cuMemAdvise(ptr: CUdeviceptr, count: usize, advice: c_int, _device: CUdevice) { advise(ptr, count, advice) }
}
entry! {
    /// `cuMemAdvise_v2`.
    fn cuMemAdvise_v2(ptr: CUdeviceptr, count: usize, advice: c_int, _location: MemLocation) { advise(ptr, count, advice) }
}
entry! {
    /// `cuMemPrefetchAsync`: nothing to move (see `cuMemAdvise`).
    fn cuMemPrefetchAsync(ptr: CUdeviceptr, count: usize, _device: CUdevice, s: Handle) { prefetch(ptr, count, strm(s, false)) }
}
entry! {
    /// `cuMemPrefetchAsync_ptsz`.
    fn cuMemPrefetchAsync_ptsz(ptr: CUdeviceptr, count: usize, _device: CUdevice, s: Handle) { prefetch(ptr, count, strm(s, true)) }
}
entry! {
    /// `cuMemPrefetchAsync_v2`.
    fn cuMemPrefetchAsync_v2(ptr: CUdeviceptr, count: usize, _location: MemLocation, _flags: c_uint, s: Handle) { prefetch(ptr, count, strm(s, false)) }
}
entry! {
    /// `cuMemPrefetchAsync_v2_ptsz`.
    fn cuMemPrefetchAsync_v2_ptsz(ptr: CUdeviceptr, count: usize, _location: MemLocation, _flags: c_uint, s: Handle) { prefetch(ptr, count, strm(s, true)) }
}

/// `cuStreamAttachMemAsync`: which streams may use managed memory; here any may, so
/// only the arguments are checked.
fn attach_mem(s: u64, ptr: CUdeviceptr, len: usize, flags: c_uint) -> R<()> {
    if ![MEM_ATTACH_GLOBAL, MEM_ATTACH_HOST, MEM_ATTACH_SINGLE].contains(&flags) {
        return Err(Fail::new(
            CUDA_ERROR_INVALID_VALUE,
            format!("flags {flags:#x}"),
        ));
    }
    managed_range(ptr, len, "cuStreamAttachMemAsync")?;
    driver()?.stream_exists(stream_ctx(s)?, s)
}

entry! {
    /// `cuStreamAttachMemAsync`.
    fn cuStreamAttachMemAsync(s: Handle, ptr: CUdeviceptr, len: usize, flags: c_uint) { attach_mem(strm(s, false), ptr, len, flags) }
}
entry! {
    /// `cuStreamAttachMemAsync_ptsz`.
    fn cuStreamAttachMemAsync_ptsz(s: Handle, ptr: CUdeviceptr, len: usize, flags: c_uint) { attach_mem(strm(s, true), ptr, len, flags) }
}

fn host_register(p: *mut c_void, bytes: usize, flags: c_uint) -> R<()> {
    if p.is_null() || bytes == 0 {
        return Err(Fail::new(CUDA_ERROR_INVALID_VALUE, "null or empty range"));
    }
    let e = driver()?;
    // SAFETY: the program registers memory of its own that stays mapped until it
    // unregisters it (cuMemHostRegister's contract).
    unsafe { e.host_register(current()?, p.cast(), bytes, flags) }?;
    pinned_ranges().insert(p as usize, bytes);
    Ok(())
}

entry! {
    /// `cuMemHostRegister_v2`.
    fn cuMemHostRegister_v2(p: *mut c_void, bytes: usize, flags: c_uint) { host_register(p, bytes, flags) }
}

entry! {
    /// `cuMemHostRegister` (the same as `_v2`).
    fn cuMemHostRegister(p: *mut c_void, bytes: usize, flags: c_uint) { host_register(p, bytes, flags) }
}

entry! {
    /// `cuMemHostUnregister`.
    fn cuMemHostUnregister(p: *mut c_void) {
        if p.is_null() {
            return Err(Fail::new(CUDA_ERROR_INVALID_VALUE, "null pointer"));
        }
        let e = driver()?;
        // SAFETY: the program unregisters a range no pending operation uses.
        unsafe { e.host_unregister(current()?, p.cast()) }?;
        pinned_ranges().remove(&(p as usize));
        Ok(())
    }
}

// ---------------------------------------------------------------------------------------
// Streams.

fn stream_create(ph: *mut Handle, flags: c_uint, priority: c_int) -> R<()> {
    if ph.is_null() {
        return Err(Fail::new(CUDA_ERROR_INVALID_VALUE, "null phStream"));
    }
    if flags & !CU_STREAM_NON_BLOCKING != 0 {
        return Err(Fail::new(
            CUDA_ERROR_INVALID_VALUE,
            format!("stream flags {flags:#x}"),
        ));
    }
    let s = driver()?.stream_create(current()?, flags, priority)?;
    // SAFETY: checked non-null; a writable CUstream slot.
    unsafe { out(ph, ptr(s)) }
}

entry! {
    /// `cuStreamCreate`.
    fn cuStreamCreate(ph: *mut Handle, flags: c_uint) { stream_create(ph, flags, 0) }
}

entry! {
    /// `cuStreamCreateWithPriority` (one priority level: the priority is recorded only).
    fn cuStreamCreateWithPriority(ph: *mut Handle, flags: c_uint, priority: c_int) { stream_create(ph, flags, priority) }
}

fn stream_destroy(s: Handle) -> R<()> {
    let s = nonnull(s, "stream")?;
    driver()?.stream_destroy(current().unwrap_or(0), s)
}

entry! {
    /// `cuStreamDestroy_v2`.
    fn cuStreamDestroy_v2(s: Handle) { stream_destroy(s) }
}

entry! {
    /// `cuStreamDestroy` (the same as `_v2`).
    fn cuStreamDestroy(s: Handle) { stream_destroy(s) }
}

fn stream_ctx(s: u64) -> R<u64> {
    if s <= STREAM_PER_THREAD {
        current()
    } else {
        Ok(current().unwrap_or(0))
    }
}

macro_rules! stream_queries {
    ($( $name:ident, $per_thread:expr, $ty:ty, $get:ident; )*) => {$(
        entry! {
            #[doc = concat!("`", stringify!($name), "`.")]
            fn $name(s: Handle, v: *mut $ty) {
                let s = strm(s, $per_thread);
                let x = $get(s)?;
                // SAFETY: `out` refuses null.
                unsafe { out(v, x as $ty) }
            }
        }
    )*};
}

fn stream_flags(s: u64) -> R<u32> {
    driver()?.stream_flags(stream_ctx(s)?, s)
}

fn stream_id(s: u64) -> R<u64> {
    driver()?.stream_id(stream_ctx(s)?, s)
}

/// Every stream's priority is 0: the range `cuCtxGetStreamPriorityRange` gives is 0 to
/// 0, so the driver clamps any asked for to it.
fn stream_priority(s: u64) -> R<c_int> {
    driver()?.stream_flags(stream_ctx(s)?, s).map(|_| 0)
}

/// `cuStreamSetAttribute`, `cuStreamGetAttribute` and `cuStreamCopyAttributes`, each
/// for the legacy default stream's `s` and the per-thread one's (`_ptsz`).
macro_rules! stream_attributes {
    ($( $set:ident, $get:ident, $copy:ident, $per_thread:expr; )*) => {$(
        entry! {
            #[doc = concat!("`", stringify!($set), "`: see [`Driver::stream_set_attribute`].")]
            fn $set(s: Handle, attr: c_int, v: *const crate::driver::StreamAttrValue) {
                let s = strm(s, $per_thread);
                // SAFETY: null or the program's `CUstreamAttrValue` (64 bytes).
                let v = unsafe { v.as_ref() }.ok_or_else(|| Fail::new(CUDA_ERROR_INVALID_VALUE, "null value"))?;
                driver()?.stream_set_attribute(stream_ctx(s)?, s, attr, *v)
            }
        }
        entry! {
            #[doc = concat!("`", stringify!($get), "`.")]
            fn $get(s: Handle, attr: c_int, v: *mut crate::driver::StreamAttrValue) {
                let s = strm(s, $per_thread);
                let x = driver()?.stream_get_attribute(stream_ctx(s)?, s, attr)?;
                // SAFETY: `out` refuses null; a `CUstreamAttrValue` slot.
                unsafe { out(v, x) }
            }
        }
        entry! {
            #[doc = concat!("`", stringify!($copy), "`: every attribute of `src` set on `dst`.")]
            fn $copy(dst: Handle, src: Handle) {
                let (d, s) = (strm(dst, $per_thread), strm(src, $per_thread));
                let e = driver()?;
                for attr in crate::driver::STREAM_ATTRS {
                    let v = e.stream_get_attribute(stream_ctx(s)?, s, attr)?;
                    e.stream_set_attribute(stream_ctx(d)?, d, attr, v)?;
                }
                Ok(())
            }
        }
    )*};
}

stream_attributes! {
    cuStreamSetAttribute, cuStreamGetAttribute, cuStreamCopyAttributes, false;
    cuStreamSetAttribute_ptsz, cuStreamGetAttribute_ptsz, cuStreamCopyAttributes_ptsz, true;
}

entry! {
    /// `cuCtxResetPersistingL2Cache`: no line of the simulator's is persisting (it has
    /// no cache); a GPU's backend is asked when it has the entry point.
    fn cuCtxResetPersistingL2Cache() { current().map(drop) }
}

stream_queries! {
    cuStreamGetFlags, false, c_uint, stream_flags;
    cuStreamGetFlags_ptsz, true, c_uint, stream_flags;
    cuStreamGetId, false, u64, stream_id;
    cuStreamGetId_ptsz, true, u64, stream_id;
    cuStreamGetPriority, false, c_int, stream_priority;
    cuStreamGetPriority_ptsz, true, c_int, stream_priority;
}

/// `cuStreamGetCtx*` and `cuStreamGetDevice*`: the stream's context, and its device.
fn stream_context(s: u64) -> R<(u64, u32)> {
    let d = driver()?;
    let c = d.stream_context(stream_ctx(s)?, s)?;
    Ok((c, d.ctx_device(c)?))
}

entry! {
    /// `cuStreamGetCtx`.
    fn cuStreamGetCtx(s: Handle, pctx: *mut Handle) {
        let (c, _) = stream_context(strm(s, false))?;
        // SAFETY: `out` refuses null.
        unsafe { out(pctx, ptr(c)) }
    }
}

entry! {
    /// `cuStreamGetCtx_ptsz`.
    fn cuStreamGetCtx_ptsz(s: Handle, pctx: *mut Handle) {
        let (c, _) = stream_context(strm(s, true))?;
        // SAFETY: `out` refuses null.
        unsafe { out(pctx, ptr(c)) }
    }
}

/// `cuStreamGetCtx_v2[_ptsz]`: the context, and no green context (none is made here).
fn stream_get_ctx_v2(s: u64, pctx: *mut Handle, pgreen: *mut Handle) -> R<()> {
    if pctx.is_null() && pgreen.is_null() {
        return Err(Fail::new(
            CUDA_ERROR_INVALID_VALUE,
            "null context and green context",
        ));
    }
    let (c, _) = stream_context(s)?;
    if !pctx.is_null() {
        // SAFETY: non-null; a writable CUcontext slot.
        unsafe { out(pctx, ptr(c))? };
    }
    if !pgreen.is_null() {
        // SAFETY: non-null; a writable CUgreenCtx slot.
        unsafe { out(pgreen, std::ptr::null_mut())? };
    }
    Ok(())
}

entry! {
    /// `cuStreamGetCtx_v2`.
    fn cuStreamGetCtx_v2(s: Handle, pctx: *mut Handle, pgreen: *mut Handle) {
        stream_get_ctx_v2(strm(s, false), pctx, pgreen)
    }
}

entry! {
    /// `cuStreamGetCtx_v2_ptsz`.
    fn cuStreamGetCtx_v2_ptsz(s: Handle, pctx: *mut Handle, pgreen: *mut Handle) {
        stream_get_ctx_v2(strm(s, true), pctx, pgreen)
    }
}

entry! {
    /// `cuStreamGetDevice`.
    fn cuStreamGetDevice(s: Handle, device: *mut CUdevice) {
        let (_, d) = stream_context(strm(s, false))?;
        // SAFETY: `out` refuses null.
        unsafe { out(device, d as CUdevice) }
    }
}

entry! {
    /// `cuStreamGetDevice_ptsz`.
    fn cuStreamGetDevice_ptsz(s: Handle, device: *mut CUdevice) {
        let (_, d) = stream_context(strm(s, true))?;
        // SAFETY: `out` refuses null.
        unsafe { out(device, d as CUdevice) }
    }
}

fn stream_sync(s: u64) -> R<()> {
    let e = driver()?;
    e.stream_synchronize(stream_ctx(s)?, s)
}

fn stream_query(s: u64) -> R<()> {
    let e = driver()?;
    if e.stream_query(stream_ctx(s)?, s)? {
        Ok(())
    } else {
        Err(Fail::new(CUDA_ERROR_NOT_READY, "busy"))
    }
}

fn stream_wait(s: u64, ev: Handle, flags: c_uint) -> R<()> {
    let e = driver()?;
    let ev = nonnull(ev, "event")?;
    e.stream_wait_event(stream_ctx(s)?, s, ev, flags)
}

/// `CUhostFn`.
type HostFn = Option<unsafe extern "C" fn(user_data: *mut c_void)>;
/// `CUstreamCallback`.
type StreamCallback =
    Option<unsafe extern "C" fn(stream: Handle, status: CUresult, user_data: *mut c_void)>;

/// `cuLaunchHostFunc`: `f(data)` once the stream's work so far is done (in the
/// caller, as the stream's next step; not called if that work failed).
fn host_func(s: u64, f: HostFn, data: Handle) -> R<()> {
    let f = f.ok_or_else(|| Fail::new(CUDA_ERROR_INVALID_VALUE, "null host function"))?;
    let e = driver()?;
    e.stream_host_func(stream_ctx(s)?, s, repeatable(f, data))
}

/// `f(data)` as a stream or a graph calls it: once per time its turn comes, not when
/// the work before it failed.
fn repeatable(
    f: unsafe extern "C" fn(user_data: *mut c_void),
    data: Handle,
) -> crate::capture::RepeatableHostFunc {
    // The pointer travels as a number: the caller vouches for it, as with the driver.
    let data = data as usize;
    std::sync::Arc::new(move |r| {
        if r.is_ok() {
            // SAFETY: the caller passed `f` and `data` to be called so, each time the
            // work before it is done; `f` is a non-null function pointer.
            unsafe { f(data as Handle) }
        }
    })
}

/// `cuStreamAddCallback`: `cb(stream, status, data)` once the stream's work so far is
/// done, with that work's status (called on error too, as the driver does).
fn stream_callback(
    handle: Handle,
    s: u64,
    cb: StreamCallback,
    data: Handle,
    flags: c_uint,
) -> R<()> {
    let cb = cb.ok_or_else(|| Fail::new(CUDA_ERROR_INVALID_VALUE, "null callback"))?;
    if flags != 0 {
        return Err(Fail::new(
            CUDA_ERROR_INVALID_VALUE,
            "cuStreamAddCallback flags must be 0",
        ));
    }
    let e = driver()?;
    let (handle, data) = (handle as usize, data as usize);
    e.stream_host_func(
        stream_ctx(s)?,
        s,
        std::sync::Arc::new(move |r| {
            let status = r.map_or_else(|e| e.status().0 as CUresult, |()| CUDA_SUCCESS);
            // SAFETY: the caller passed `cb`, its stream and `data` to be called so,
            // once, after the stream's work; `cb` is a non-null function pointer.
            unsafe { cb(handle as Handle, status, data as Handle) }
        }),
    )
}

entry! {
    /// `cuLaunchHostFunc`.
    fn cuLaunchHostFunc(s: Handle, f: HostFn, data: Handle) { host_func(strm(s, false), f, data) }
}
entry! {
    /// `cuLaunchHostFunc_ptsz`.
    fn cuLaunchHostFunc_ptsz(s: Handle, f: HostFn, data: Handle) { host_func(strm(s, true), f, data) }
}
entry! {
    /// `cuStreamAddCallback`.
    fn cuStreamAddCallback(s: Handle, cb: StreamCallback, data: Handle, flags: c_uint) {
        stream_callback(s, strm(s, false), cb, data, flags)
    }
}
entry! {
    /// `cuStreamAddCallback_ptsz`.
    fn cuStreamAddCallback_ptsz(s: Handle, cb: StreamCallback, data: Handle, flags: c_uint) {
        stream_callback(s, strm(s, true), cb, data, flags)
    }
}
entry! {
    /// `cuProfilerStart`: no profiler is attached; nothing to start, as with the driver
    /// when none is.
    fn cuProfilerStart() { driver().map(drop) }
}
entry! {
    /// `cuProfilerStop`: see `cuProfilerStart`.
    fn cuProfilerStop() { driver().map(drop) }
}

/// `cuStreamIsCapturing`: `CU_STREAM_CAPTURE_STATUS_NONE`, `_ACTIVE` or `_INVALIDATED`.
fn is_capturing(s: u64, status: *mut c_int) -> R<()> {
    let (st, _) = driver()?.capture_status(stream_ctx(s)?, s)?;
    // SAFETY: `out` refuses null; a CUstreamCaptureStatus (int) slot.
    unsafe { out(status, st) }
}

/// `cuStreamBeginCapture_v2`: any `CUstreamCaptureMode` (global, thread-local,
/// relaxed) records the same way here.
fn begin_capture(s: u64, mode: c_int) -> R<()> {
    if !(0..=2).contains(&mode) {
        return Err(Fail::new(
            CUDA_ERROR_INVALID_VALUE,
            format!("stream capture mode {mode}"),
        ));
    }
    driver()?.capture_begin(stream_ctx(s)?, s)
}

fn end_capture(s: u64, graph: *mut Handle) -> R<()> {
    let e = driver()?;
    if graph.is_null() {
        if !e.graphs().captures_to_program_graph(s) {
            return Err(Fail::new(CUDA_ERROR_INVALID_VALUE, "null phGraph"));
        }
        return e.capture_end(stream_ctx(s)?, s).map(drop);
    }
    let r = e.capture_end(stream_ctx(s)?, s);
    match &r {
        // SAFETY: checked non-null; a CUgraph slot.
        Ok(g) => unsafe { out(graph, ptr(*g)) }?,
        Err(f) if f.code == CUDA_ERROR_STREAM_CAPTURE_INVALIDATED => {
            // SAFETY: as above: an invalidated capture gives a null graph, as the
            // driver's does.
            unsafe { out(graph, std::ptr::null_mut()) }?
        }
        Err(_) => {}
    }
    r.map(drop)
}

/// `cuStreamGetCaptureInfo` (all versions): the status, the sequence's number, the
/// graph it builds and the nodes its next work will depend on (an array this library
/// keeps until the capture changes; every edge the default one, so no edge data).
///
/// # Safety
/// Each pointer is null or writable for its type.
unsafe fn capture_info(
    s: u64,
    status: *mut c_int,
    id: *mut u64,
    graph: *mut Handle,
    deps: *mut *const Handle,
    edges: *mut *const c_void,
    count: *mut usize,
) -> R<()> {
    let e = driver()?;
    let (st, seq) = e.capture_status(stream_ctx(s)?, s)?;
    let (g, d, n) = match e.graphs().info(s) {
        Some((g, d)) if st != 0 => (ptr(g), d.as_ptr().cast::<Handle>(), d.len()),
        _ => (std::ptr::null_mut(), std::ptr::null(), 0),
    };
    // SAFETY: `out` refuses null; each optional output is written only when given.
    unsafe {
        out(status, st)?;
        if !id.is_null() {
            out(id, seq)?;
        }
        if !graph.is_null() {
            out(graph, g)?;
        }
        if !deps.is_null() {
            out(deps, d)?;
        }
        if !edges.is_null() {
            out(edges, std::ptr::null())?;
        }
        if !count.is_null() {
            out(count, n)?;
        }
    }
    Ok(())
}

entry! {
    /// `cuStreamBeginCapture_v2`.
    fn cuStreamBeginCapture_v2(s: Handle, mode: c_int) { begin_capture(strm(s, false), mode) }
}

/// `CUgraphEdgeData`: ports and type of an edge; only the default (all zero) is
/// supported.
///
/// # Safety
/// `edges` is null or `n` edge records of 8 bytes.
unsafe fn default_edges(edges: *const u64, n: usize) -> R<()> {
    if edges.is_null() || n == 0 {
        return Ok(());
    }
    // SAFETY: the caller's guarantee.
    let e = unsafe { std::slice::from_raw_parts(edges, n) };
    if e.iter().any(|&x| x != 0) {
        return Err(Fail::new(
            CUDA_ERROR_NOT_SUPPORTED,
            "graph edges other than the default (ports, programmatic dependencies)",
        ));
    }
    Ok(())
}

/// `cuStreamBeginCaptureToGraph`: capture into the program's graph, after `deps`.
///
/// # Safety
/// `deps` is null or `n` node handles; `edges` null or `n` edge records.
unsafe fn begin_capture_to_graph(
    s: u64,
    graph: Handle,
    deps: *const Handle,
    edges: *const u64,
    n: usize,
    mode: c_int,
) -> R<()> {
    if !(0..=2).contains(&mode) {
        return Err(Fail::new(
            CUDA_ERROR_INVALID_VALUE,
            format!("stream capture mode {mode}"),
        ));
    }
    // SAFETY: the caller's guarantee.
    unsafe { default_edges(edges, n) }?;
    // SAFETY: the caller's guarantee.
    let deps = unsafe { node_deps(deps, n) }?;
    driver()?.capture_begin_to_graph(stream_ctx(s)?, s, nonnull(graph, "graph")?, &deps)
}

entry! {
    /// `cuStreamBeginCaptureToGraph`.
    fn cuStreamBeginCaptureToGraph(s: Handle, graph: Handle, deps: *const Handle, edges: *const u64, n: usize, mode: c_int) {
        // SAFETY: the program's arrays of `n`.
        unsafe { begin_capture_to_graph(strm(s, false), graph, deps, edges, n, mode) }
    }
}
entry! {
    /// `cuStreamBeginCaptureToGraph_ptsz`.
    fn cuStreamBeginCaptureToGraph_ptsz(s: Handle, graph: Handle, deps: *const Handle, edges: *const u64, n: usize, mode: c_int) {
        // SAFETY: the program's arrays of `n`.
        unsafe { begin_capture_to_graph(strm(s, true), graph, deps, edges, n, mode) }
    }
}

/// `cuStreamUpdateCaptureDependencies`: the capturing stream's next work depends on
/// `deps` too (`CU_STREAM_ADD_CAPTURE_DEPENDENCIES`, 0) or only
/// (`CU_STREAM_SET_CAPTURE_DEPENDENCIES`, 1).
///
/// # Safety
/// `deps` is null or `n` node handles; `edges` null or `n` edge records.
unsafe fn update_capture_deps(
    s: u64,
    deps: *const Handle,
    edges: *const u64,
    n: usize,
    flags: c_uint,
) -> R<()> {
    if flags > 1 {
        return Err(Fail::new(
            CUDA_ERROR_INVALID_VALUE,
            format!("capture dependency flags {flags}"),
        ));
    }
    // SAFETY: the caller's guarantee.
    unsafe { default_edges(edges, n) }?;
    // SAFETY: the caller's guarantee.
    let deps = unsafe { node_deps(deps, n) }?;
    let e = driver()?;
    e.capture_status(stream_ctx(s)?, s)?;
    e.graphs().update_deps(s, &deps, flags == 1)
}

entry! {
    /// `cuStreamUpdateCaptureDependencies`.
    fn cuStreamUpdateCaptureDependencies(s: Handle, deps: *const Handle, n: usize, flags: c_uint) {
        // SAFETY: the program's array of `n`.
        unsafe { update_capture_deps(strm(s, false), deps, std::ptr::null(), n, flags) }
    }
}
entry! {
    /// `cuStreamUpdateCaptureDependencies_ptsz`.
    fn cuStreamUpdateCaptureDependencies_ptsz(s: Handle, deps: *const Handle, n: usize, flags: c_uint) {
        // SAFETY: the program's array of `n`.
        unsafe { update_capture_deps(strm(s, true), deps, std::ptr::null(), n, flags) }
    }
}
entry! {
    /// `cuStreamUpdateCaptureDependencies_v2` (with edge data).
    fn cuStreamUpdateCaptureDependencies_v2(s: Handle, deps: *const Handle, edges: *const u64, n: usize, flags: c_uint) {
        // SAFETY: the program's arrays of `n`.
        unsafe { update_capture_deps(strm(s, false), deps, edges, n, flags) }
    }
}
entry! {
    /// `cuStreamUpdateCaptureDependencies_v2_ptsz`.
    fn cuStreamUpdateCaptureDependencies_v2_ptsz(s: Handle, deps: *const Handle, edges: *const u64, n: usize, flags: c_uint) {
        // SAFETY: the program's arrays of `n`.
        unsafe { update_capture_deps(strm(s, true), deps, edges, n, flags) }
    }
}
entry! {
    /// `cuStreamBeginCapture_v2_ptsz`.
    fn cuStreamBeginCapture_v2_ptsz(s: Handle, mode: c_int) { begin_capture(strm(s, true), mode) }
}
entry! {
    /// `cuStreamEndCapture`.
    fn cuStreamEndCapture(s: Handle, graph: *mut Handle) { end_capture(strm(s, false), graph) }
}
entry! {
    /// `cuStreamEndCapture_ptsz`.
    fn cuStreamEndCapture_ptsz(s: Handle, graph: *mut Handle) { end_capture(strm(s, true), graph) }
}
entry! {
    /// `cuStreamGetCaptureInfo`.
    fn cuStreamGetCaptureInfo(s: Handle, status: *mut c_int, id: *mut u64) {
        // SAFETY: the program's output slots.
        unsafe { capture_info(strm(s, false), status, id, std::ptr::null_mut(), std::ptr::null_mut(), std::ptr::null_mut(), std::ptr::null_mut()) }
    }
}
entry! {
    /// `cuStreamGetCaptureInfo_v2`.
    fn cuStreamGetCaptureInfo_v2(s: Handle, status: *mut c_int, id: *mut u64, graph: *mut Handle, deps: *mut *const Handle, count: *mut usize) {
        // SAFETY: the program's output slots.
        unsafe { capture_info(strm(s, false), status, id, graph, deps, std::ptr::null_mut(), count) }
    }
}
entry! {
    /// `cuStreamGetCaptureInfo_v2_ptsz`.
    fn cuStreamGetCaptureInfo_v2_ptsz(s: Handle, status: *mut c_int, id: *mut u64, graph: *mut Handle, deps: *mut *const Handle, count: *mut usize) {
        // SAFETY: the program's output slots.
        unsafe { capture_info(strm(s, true), status, id, graph, deps, std::ptr::null_mut(), count) }
    }
}
entry! {
    /// `cuStreamGetCaptureInfo_v3`.
    fn cuStreamGetCaptureInfo_v3(s: Handle, status: *mut c_int, id: *mut u64, graph: *mut Handle, deps: *mut *const Handle, edges: *mut *const c_void, count: *mut usize) {
        // SAFETY: the program's output slots.
        unsafe { capture_info(strm(s, false), status, id, graph, deps, edges, count) }
    }
}
entry! {
    /// `cuStreamGetCaptureInfo_v3_ptsz`.
    fn cuStreamGetCaptureInfo_v3_ptsz(s: Handle, status: *mut c_int, id: *mut u64, graph: *mut Handle, deps: *mut *const Handle, edges: *mut *const c_void, count: *mut usize) {
        // SAFETY: the program's output slots.
        unsafe { capture_info(strm(s, true), status, id, graph, deps, edges, count) }
    }
}

entry! {
    /// `cuGraphCreate`: an empty graph (flags must be 0).
    fn cuGraphCreate(graph: *mut Handle, flags: c_uint) {
        if flags != 0 {
            return Err(Fail::new(CUDA_ERROR_INVALID_VALUE, "cuGraphCreate flags must be 0"));
        }
        if graph.is_null() {
            return Err(Fail::new(CUDA_ERROR_INVALID_VALUE, "null phGraph"));
        }
        let g = driver()?.graphs().create();
        // SAFETY: checked non-null; a CUgraph slot.
        unsafe { out(graph, ptr(g)) }
    }
}
entry! {
    /// `cuGraphDestroy`.
    fn cuGraphDestroy(graph: Handle) {
        let d = driver()?.graphs().destroy(nonnull(graph, "graph")?)?;
        run_destructors(d);
        release_graph_memory()
    }
}

/// The dependencies a `cuGraphAdd*Node` names.
///
/// # Safety
/// `deps` is null or points to `n` node handles.
unsafe fn node_deps(deps: *const Handle, n: usize) -> R<Vec<u64>> {
    if n == 0 {
        return Ok(vec![]);
    }
    if deps.is_null() {
        return Err(Fail::new(
            CUDA_ERROR_INVALID_VALUE,
            format!("{n} dependencies, no array"),
        ));
    }
    // SAFETY: the caller's guarantee.
    let d = unsafe { std::slice::from_raw_parts(deps, n) };
    d.iter().map(|&x| nonnull(x, "dependency node")).collect()
}

/// Adds a node of `kind` doing `ops` to `graph` after `deps`, and writes its handle.
///
/// # Safety
/// `node` is null or a `CUgraphNode` slot; `deps` is null or `n` node handles.
unsafe fn add_node(
    node: *mut Handle,
    graph: Handle,
    deps: *const Handle,
    n: usize,
    kind: i32,
    ops: Vec<crate::capture::Op>,
) -> R<()> {
    if node.is_null() {
        return Err(Fail::new(CUDA_ERROR_INVALID_VALUE, "null phGraphNode"));
    }
    // SAFETY: the caller's guarantee.
    let deps = unsafe { node_deps(deps, n) }?;
    let h = driver()?
        .graphs()
        .add_node(nonnull(graph, "graph")?, &deps, kind, ops)?;
    // SAFETY: checked non-null; a CUgraphNode slot.
    unsafe { out(node, ptr(h)) }
}

/// `CUDA_KERNEL_NODE_PARAMS` (`_v2` appends the `CUkernel` and its context).
#[repr(C)]
#[derive(Debug)]
pub(crate) struct KernelNodeParams {
    func: Handle,
    grid: [c_uint; 3],
    block: [c_uint; 3],
    shared: c_uint,
    params: *mut *mut c_void,
    extra: *mut *mut c_void,
}

/// `CUDA_KERNEL_NODE_PARAMS_v2`.
#[repr(C)]
#[derive(Debug)]
pub(crate) struct KernelNodeParamsV2 {
    base: KernelNodeParams,
    kern: Handle,
    ctx: Handle,
}

/// A kernel node's launch: the function (or, with none, the `CUkernel`), geometry
/// checked, arguments copied (a node keeps its own, as the driver does).
///
/// # Safety
/// `p`'s parameter pointers are what cuda.h describes.
unsafe fn kernel_op(p: &KernelNodeParams, kern: Handle) -> R<crate::capture::Op> {
    let e = driver()?;
    let ctx = current()?;
    let f = if p.func.is_null() {
        nonnull(kern, "function")?
    } else {
        h(p.func)
    };
    let layout = e.function_layout(f)?.ok_or_else(|| {
        Fail::new(
            CUDA_ERROR_NOT_SUPPORTED,
            "the server does not know this kernel's parameter layout",
        )
    })?;
    check_geometry(e, ctx, p.grid, p.block)?;
    // SAFETY: the caller's guarantee.
    let args = unsafe { gather_args(&layout, p.params, p.extra) }?;
    Ok(crate::capture::Op::Launch {
        function: f,
        config: vmgpu_cuda_api::LaunchConfig {
            grid: p.grid,
            block: p.block,
            shared_bytes: p.shared,
        },
        args: args.iter().map(|a| Box::<[u8]>::from(*a)).collect(),
        cooperative: false,
    })
}

entry! {
    /// `cuGraphAddKernelNode` (CUDA 11's parameters).
    fn cuGraphAddKernelNode(node: *mut Handle, graph: Handle, deps: *const Handle, n: usize, p: *const KernelNodeParams) {
        // SAFETY: `p` is null or the program's parameters.
        let p = unsafe { p.as_ref() }.ok_or_else(|| Fail::new(CUDA_ERROR_INVALID_VALUE, "null nodeParams"))?;
        // SAFETY: the program's parameters as cuda.h describes them.
        let op = unsafe { kernel_op(p, std::ptr::null_mut()) }?;
        // SAFETY: the program's node slot and dependencies.
        unsafe { add_node(node, graph, deps, n, crate::capture::NODE_KERNEL, vec![op]) }
    }
}
entry! {
    /// `cuGraphAddKernelNode_v2` (what cuda.h 12 calls `cuGraphAddKernelNode`).
    fn cuGraphAddKernelNode_v2(node: *mut Handle, graph: Handle, deps: *const Handle, n: usize, p: *const KernelNodeParamsV2) {
        // SAFETY: `p` is null or the program's parameters.
        let p = unsafe { p.as_ref() }.ok_or_else(|| Fail::new(CUDA_ERROR_INVALID_VALUE, "null nodeParams"))?;
        // SAFETY: the program's parameters as cuda.h describes them.
        let op = unsafe { kernel_op(&p.base, p.kern) }?;
        // SAFETY: the program's node slot and dependencies.
        unsafe { add_node(node, graph, deps, n, crate::capture::NODE_KERNEL, vec![op]) }
    }
}

/// `CUDA_MEMCPY3D`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub(crate) struct Memcpy3D {
    src_x: usize,
    src_y: usize,
    src_z: usize,
    src_lod: usize,
    src_type: c_int,
    src_host: *const c_void,
    src_device: CUdeviceptr,
    src_array: Handle,
    reserved0: *mut c_void,
    src_pitch: usize,
    src_height: usize,
    dst_x: usize,
    dst_y: usize,
    dst_z: usize,
    dst_lod: usize,
    dst_type: c_int,
    dst_host: *mut c_void,
    dst_device: CUdeviceptr,
    dst_array: Handle,
    reserved1: *mut c_void,
    dst_pitch: usize,
    dst_height: usize,
    width: usize,
    height: usize,
    depth: usize,
}

/// `CUmemorytype`: host, device, array, unified.
const MEMORYTYPE_HOST: c_int = 1;
const MEMORYTYPE_DEVICE: c_int = 2;
const MEMORYTYPE_ARRAY: c_int = 3;
const MEMORYTYPE_UNIFIED: c_int = 4;

/// A copy's array side as the device memory it is: its address, row pitch and rows.
fn array_side(
    ty: &mut c_int,
    array: Handle,
    device: &mut CUdeviceptr,
    pitch: &mut usize,
    height: &mut usize,
) -> R<()> {
    if *ty == MEMORYTYPE_ARRAY {
        if array.is_null() {
            return Err(Fail::new(CUDA_ERROR_INVALID_VALUE, "a null array"));
        }
        let base = h(array);
        let a = arrays::array(base)?;
        *ty = MEMORYTYPE_DEVICE;
        *device = base;
        *pitch = a.pitch() as usize;
        *height = a.height() as usize;
    }
    Ok(())
}

/// One side of a copy: whether it is device memory, and its start address.
fn copy_side(e: &Driver, ty: c_int, host: usize, device: u64, what: &str) -> R<(bool, u64)> {
    match ty {
        MEMORYTYPE_HOST => Ok((false, host as u64)),
        MEMORYTYPE_DEVICE => Ok((true, device)),
        // Unified addressing: the pointer (in the device field) says which it is.
        MEMORYTYPE_UNIFIED => Ok((e.pointer(device).is_some_and(|i| !i.host), device)),
        MEMORYTYPE_ARRAY => Err(Fail::new(
            CUDA_ERROR_INVALID_VALUE,
            format!("a CUDA array as the {what} of this copy"),
        )),
        t => Err(Fail::new(
            CUDA_ERROR_INVALID_VALUE,
            format!("{what} memory type {t}"),
        )),
    }
}

/// The copies of a `CUDA_MEMCPY3D`: one per row (one in all when the rows are one
/// contiguous range on both sides); `what` names the call in errors.
fn memcpy3d_ops(p: &Memcpy3D, what: &str) -> R<Vec<crate::capture::Op>> {
    use crate::capture::Op;
    let e = driver()?;
    // An array is device memory with its own pitch and rows.
    let mut p = *p;
    array_side(
        &mut p.src_type,
        p.src_array,
        &mut p.src_device,
        &mut p.src_pitch,
        &mut p.src_height,
    )?;
    array_side(
        &mut p.dst_type,
        p.dst_array,
        &mut p.dst_device,
        &mut p.dst_pitch,
        &mut p.dst_height,
    )?;
    let p = &p;
    let (src_dev, src) = copy_side(e, p.src_type, p.src_host as usize, p.src_device, "source")?;
    let (dst_dev, dst) = copy_side(
        e,
        p.dst_type,
        p.dst_host as usize,
        p.dst_device,
        "destination",
    )?;
    let rows = p.height.max(1) * p.depth.max(1);
    let bad = |why: &str| Fail::new(CUDA_ERROR_INVALID_VALUE, format!("{what}: {why}"));
    if (p.height > 1 || p.depth > 1) && (p.src_pitch < p.width || p.dst_pitch < p.width) {
        return Err(bad("a pitch smaller than the width"));
    }
    if p.src_lod != 0 || p.dst_lod != 0 {
        return Err(bad("a level of detail (arrays only)"));
    }
    let offset = |x: usize, y: usize, z: usize, pitch: usize, height: usize| -> R<u64> {
        z.checked_mul(height)
            .and_then(|zh| zh.checked_add(y))
            .and_then(|r| r.checked_mul(pitch))
            .and_then(|o| o.checked_add(x))
            .map(|o| o as u64)
            .ok_or_else(|| bad("an offset past the address space"))
    };
    let contiguous = rows == 1
        || (p.src_pitch == p.width
            && p.dst_pitch == p.width
            && (p.depth <= 1 || (p.src_height == p.height && p.dst_height == p.height)));
    let (count, bytes) = if contiguous {
        (1, p.width * rows)
    } else {
        (rows, p.width)
    };
    let pinned = |a: u64| e.pointer(a).is_some_and(|i| i.host);
    let mut ops = Vec::with_capacity(count);
    for r in 0..count {
        let (y, z) = (r % p.height.max(1), r / p.height.max(1));
        let s = src + offset(p.src_x, p.src_y + y, p.src_z + z, p.src_pitch, p.src_height)?;
        let d = dst + offset(p.dst_x, p.dst_y + y, p.dst_z + z, p.dst_pitch, p.dst_height)?;
        ops.push(match (src_dev, dst_dev) {
            (false, true) => Op::HtoD {
                dst: d,
                src: s as usize,
                bytes,
                pinned: pinned(s),
            },
            (true, false) => Op::DtoH {
                dst: d as usize,
                src: s,
                bytes,
                pinned: pinned(d),
            },
            (true, true) => Op::DtoD {
                dst: d,
                src: s,
                bytes: bytes as u64,
            },
            (false, false) => {
                return Err(Fail::new(
                    CUDA_ERROR_NOT_SUPPORTED,
                    format!("{what}: a copy from host to host memory"),
                ))
            }
        });
    }
    Ok(ops)
}

entry! {
    /// `cuGraphAddMemcpyNode`: host, device and unified memory (no arrays), one copy
    /// per row unless the rows are contiguous.
    fn cuGraphAddMemcpyNode(node: *mut Handle, graph: Handle, deps: *const Handle, n: usize, p: *const Memcpy3D, _ctx: Handle) {
        // SAFETY: `p` is null or the program's parameters.
        let p = unsafe { p.as_ref() }.ok_or_else(|| Fail::new(CUDA_ERROR_INVALID_VALUE, "null copyParams"))?;
        let ops = memcpy3d_ops(p, "memcpy node")?;
        // SAFETY: the program's node slot and dependencies.
        unsafe { add_node(node, graph, deps, n, crate::capture::NODE_MEMCPY, ops) }
    }
}

/// `CUDA_MEMCPY2D`.
#[repr(C)]
#[derive(Debug)]
pub(crate) struct Memcpy2D {
    src_x: usize,
    src_y: usize,
    src_type: c_int,
    src_host: *const c_void,
    src_device: CUdeviceptr,
    src_array: Handle,
    src_pitch: usize,
    dst_x: usize,
    dst_y: usize,
    dst_type: c_int,
    dst_host: *mut c_void,
    dst_device: CUdeviceptr,
    dst_array: Handle,
    dst_pitch: usize,
    width: usize,
    height: usize,
}

impl Memcpy2D {
    /// The same copy as a `CUDA_MEMCPY3D` of depth 1.
    fn as_3d(&self) -> Memcpy3D {
        Memcpy3D {
            src_x: self.src_x,
            src_y: self.src_y,
            src_z: 0,
            src_lod: 0,
            src_type: self.src_type,
            src_host: self.src_host,
            src_device: self.src_device,
            src_array: self.src_array,
            reserved0: std::ptr::null_mut(),
            src_pitch: self.src_pitch,
            src_height: self.height,
            dst_x: self.dst_x,
            dst_y: self.dst_y,
            dst_z: 0,
            dst_lod: 0,
            dst_type: self.dst_type,
            dst_host: self.dst_host,
            dst_device: self.dst_device,
            dst_array: self.dst_array,
            reserved1: std::ptr::null_mut(),
            dst_pitch: self.dst_pitch,
            dst_height: self.height,
            width: self.width,
            height: self.height,
            depth: 1,
        }
    }
}

/// Runs copy and memset operations now, synchronously (`stream` None) or on a stream,
/// through the one-range entry points' paths (captured on a capturing stream).
///
/// # Safety
/// Every host range of `ops` is valid for its copy (for an asynchronous copy, until the
/// stream passes it).
unsafe fn run_ops(ops: Vec<crate::capture::Op>, stream: Option<u64>) -> R<()> {
    use crate::capture::Op;
    // Captured, the rows are one node (as the driver captures one call).
    if let Some(s) = stream.filter(|_| ops.len() > 1) {
        if driver()?.capture_all(s, &ops)? {
            return Ok(());
        }
    }
    for op in ops {
        match op {
            Op::HtoD {
                dst, src, bytes, ..
            } => {
                // SAFETY: the caller's contract, for each row.
                unsafe { htod(dst, src as *const c_void, bytes, stream) }?
            }
            Op::DtoH {
                dst, src, bytes, ..
            } => {
                // SAFETY: the caller's contract, for each row.
                unsafe { dtoh(dst as *mut c_void, src, bytes, stream) }?
            }
            Op::DtoD { dst, src, bytes } => dtod(dst, src, bytes as usize, stream)?,
            Op::Memset {
                dst,
                value,
                width,
                count,
            } => memset(dst, value, width, count as usize, stream)?,
            Op::Launch { .. }
            | Op::HostFunc(_)
            | Op::MemAlloc { .. }
            | Op::MemFree { .. }
            | Op::Cond(_)
            | Op::Child(_)
            | Op::EventRecord(_)
            | Op::EventWait(_) => {
                return Err(Fail::new(
                    CUDA_ERROR_UNKNOWN,
                    "run_ops: a launch or host function among copies",
                ))
            }
        }
    }
    Ok(())
}

/// `cuMemcpy3D*` and `cuMemcpy2D*`: the copy described by `p` (null refused).
///
/// # Safety
/// `p` is null or a `CUDA_MEMCPY3D` whose host ranges are valid for the copy.
unsafe fn memcpy_3d(p: *const Memcpy3D, stream: Option<u64>, what: &str) -> R<()> {
    // SAFETY: `p` is null or the program's parameters.
    let p = unsafe { p.as_ref() }
        .ok_or_else(|| Fail::new(CUDA_ERROR_INVALID_VALUE, format!("{what}: null parameters")))?;
    if p.width == 0 || p.height == 0 || p.depth == 0 {
        return Ok(());
    }
    let ops = memcpy3d_ops(p, what)?;
    // SAFETY: the program's ranges (the caller's contract).
    unsafe { run_ops(ops, stream) }
}

/// # Safety
/// As [`memcpy_3d`], for a `CUDA_MEMCPY2D`.
unsafe fn memcpy_2d(p: *const Memcpy2D, stream: Option<u64>, what: &str) -> R<()> {
    // SAFETY: `p` is null or the program's parameters.
    let p = unsafe { p.as_ref() }
        .ok_or_else(|| Fail::new(CUDA_ERROR_INVALID_VALUE, format!("{what}: null parameters")))?;
    let p3 = p.as_3d();
    // SAFETY: the same copy (the caller's contract).
    unsafe { memcpy_3d(&p3, stream, what) }
}

macro_rules! copies_nd {
    ($( $name:ident, $params:ty, $copy:ident, $stream:expr; )*) => {$(
        entry! {
            #[doc = concat!("`", stringify!($name), "`: host, device and unified memory (no arrays), one copy per row unless the rows are contiguous.")]
            fn $name(p: *const $params) {
                // SAFETY: the program's parameters and buffers, as cuda.h describes them.
                unsafe { $copy(p, $stream, stringify!($name)) }
            }
        }
    )*};
    ($( async $name:ident, $params:ty, $copy:ident, $per_thread:expr; )*) => {$(
        entry! {
            #[doc = concat!("`", stringify!($name), "`: as the synchronous form, on a stream.")]
            fn $name(p: *const $params, stream: Handle) {
                // SAFETY: the program's parameters, and buffers it keeps until the stream passes the copy.
                unsafe { $copy(p, Some(strm(stream, $per_thread)), stringify!($name)) }
            }
        }
    )*};
}

copies_nd! {
    cuMemcpy2D_v2, Memcpy2D, memcpy_2d, None;
    cuMemcpy2D_v2_ptds, Memcpy2D, memcpy_2d, None;
    cuMemcpy2DUnaligned_v2, Memcpy2D, memcpy_2d, None;
    cuMemcpy2DUnaligned_v2_ptds, Memcpy2D, memcpy_2d, None;
    cuMemcpy3D_v2, Memcpy3D, memcpy_3d, None;
    cuMemcpy3D_v2_ptds, Memcpy3D, memcpy_3d, None;
}

copies_nd! {
    async cuMemcpy2DAsync_v2, Memcpy2D, memcpy_2d, false;
    async cuMemcpy2DAsync_v2_ptsz, Memcpy2D, memcpy_2d, true;
    async cuMemcpy3DAsync_v2, Memcpy3D, memcpy_3d, false;
    async cuMemcpy3DAsync_v2_ptsz, Memcpy3D, memcpy_3d, true;
}

/// `cuMemcpy` and `cuMemcpyAsync` (unified addressing): each pointer says whether it is
/// host or device memory.
///
/// # Safety
/// Host ranges among `dst` and `src` are valid for `n` bytes (for an asynchronous copy,
/// until the stream passes it).
unsafe fn memcpy_unified(
    dst: CUdeviceptr,
    src: CUdeviceptr,
    n: usize,
    stream: Option<u64>,
) -> R<()> {
    let p = Memcpy2D {
        src_x: 0,
        src_y: 0,
        src_type: MEMORYTYPE_UNIFIED,
        src_host: std::ptr::null(),
        src_device: src,
        src_array: std::ptr::null_mut(),
        src_pitch: n,
        dst_x: 0,
        dst_y: 0,
        dst_type: MEMORYTYPE_UNIFIED,
        dst_host: std::ptr::null_mut(),
        dst_device: dst,
        dst_array: std::ptr::null_mut(),
        dst_pitch: n,
        width: n,
        height: 1,
    };
    // SAFETY: the caller's contract.
    unsafe { memcpy_2d(&p, stream, "cuMemcpy") }
}

entry! {
    /// `cuMemcpy`.
    fn cuMemcpy(dst: CUdeviceptr, src: CUdeviceptr, n: usize) {
        // SAFETY: the program's buffers, `n` bytes each.
        unsafe { memcpy_unified(dst, src, n, None) }
    }
}
entry! {
    /// `cuMemcpy_ptds`.
    fn cuMemcpy_ptds(dst: CUdeviceptr, src: CUdeviceptr, n: usize) {
        // SAFETY: the program's buffers, `n` bytes each.
        unsafe { memcpy_unified(dst, src, n, None) }
    }
}
entry! {
    /// `cuMemcpyAsync`.
    fn cuMemcpyAsync(dst: CUdeviceptr, src: CUdeviceptr, n: usize, stream: Handle) {
        // SAFETY: the program's buffers, kept until the stream passes the copy.
        unsafe { memcpy_unified(dst, src, n, Some(strm(stream, false))) }
    }
}
entry! {
    /// `cuMemcpyAsync_ptsz`.
    fn cuMemcpyAsync_ptsz(dst: CUdeviceptr, src: CUdeviceptr, n: usize, stream: Handle) {
        // SAFETY: the program's buffers, kept until the stream passes the copy.
        unsafe { memcpy_unified(dst, src, n, Some(strm(stream, true))) }
    }
}

/// `cuMemsetD2D*`: `height` rows of `width` elements of `elem` bytes, `pitch` apart.
fn memset_2d(
    dst: CUdeviceptr,
    pitch: usize,
    value: u32,
    elem: u32,
    width: usize,
    height: usize,
    stream: Option<u64>,
) -> R<()> {
    let row = (width as u64).checked_mul(u64::from(elem));
    if height > 1 && row.is_none_or(|r| (pitch as u64) < r) {
        return Err(Fail::new(
            CUDA_ERROR_INVALID_VALUE,
            format!(
                "cuMemsetD2D{}: a pitch of {pitch} bytes is smaller than a row of {width} elements",
                elem * 8
            ),
        ));
    }
    let ops = (0..height as u64)
        .map(|y| crate::capture::Op::Memset {
            dst: dst + y * pitch as u64,
            value,
            width: elem,
            count: width as u64,
        })
        .collect();
    // SAFETY: memsets only (no host range).
    unsafe { run_ops(ops, stream) }
}

macro_rules! memsets_2d {
    ($( $sync:ident, $sync_ptds:ident, $asyn:ident, $asyn_ptsz:ident, $ty:ty, $w:expr; )*) => {$(
        entry! {
            #[doc = concat!("`", stringify!($sync), "`.")]
            fn $sync(dst: CUdeviceptr, pitch: usize, value: $ty, width: usize, height: usize) {
                memset_2d(dst, pitch, value as u32, $w, width, height, None)
            }
        }
        entry! {
            #[doc = concat!("`", stringify!($sync_ptds), "`.")]
            fn $sync_ptds(dst: CUdeviceptr, pitch: usize, value: $ty, width: usize, height: usize) {
                memset_2d(dst, pitch, value as u32, $w, width, height, None)
            }
        }
        entry! {
            #[doc = concat!("`", stringify!($asyn), "`.")]
            fn $asyn(dst: CUdeviceptr, pitch: usize, value: $ty, width: usize, height: usize, stream: Handle) {
                memset_2d(dst, pitch, value as u32, $w, width, height, Some(strm(stream, false)))
            }
        }
        entry! {
            #[doc = concat!("`", stringify!($asyn_ptsz), "`: the null stream is the per-thread one.")]
            fn $asyn_ptsz(dst: CUdeviceptr, pitch: usize, value: $ty, width: usize, height: usize, stream: Handle) {
                memset_2d(dst, pitch, value as u32, $w, width, height, Some(strm(stream, true)))
            }
        }
    )*};
}

memsets_2d! {
    cuMemsetD2D8_v2, cuMemsetD2D8_v2_ptds, cuMemsetD2D8Async, cuMemsetD2D8Async_ptsz, u8, 1;
    cuMemsetD2D16_v2, cuMemsetD2D16_v2_ptds, cuMemsetD2D16Async, cuMemsetD2D16Async_ptsz, u16, 2;
    cuMemsetD2D32_v2, cuMemsetD2D32_v2_ptds, cuMemsetD2D32Async, cuMemsetD2D32Async_ptsz, u32, 4;
}

/// The row pitch `cuMemAllocPitch` gives: rows start 512 bytes apart at least (what
/// NVIDIA's driver gives on sm_80 and later), so any element and texture row is aligned.
const PITCH_ALIGNMENT: usize = 512;

entry! {
    /// `cuMemAllocPitch_v2`: `height` rows of `width` bytes, each row starting at a
    /// multiple of 512 bytes.
    fn cuMemAllocPitch_v2(dptr: *mut CUdeviceptr, pitch: *mut usize, width: usize, height: usize, element_size: c_uint) {
        if dptr.is_null() || pitch.is_null() {
            return Err(Fail::new(CUDA_ERROR_INVALID_VALUE, "null dptr or pitch"));
        }
        if !matches!(element_size, 4 | 8 | 16) {
            return Err(Fail::new(CUDA_ERROR_INVALID_VALUE, format!("element size {element_size} (4, 8 or 16)")));
        }
        if width == 0 || height == 0 {
            return Err(Fail::new(CUDA_ERROR_INVALID_VALUE, "a width or height of 0"));
        }
        let row = width
            .checked_next_multiple_of(PITCH_ALIGNMENT)
            .ok_or_else(|| Fail::new(CUDA_ERROR_INVALID_VALUE, format!("a width of {width} bytes")))?;
        let bytes = row
            .checked_mul(height)
            .ok_or_else(|| Fail::new(CUDA_ERROR_OUT_OF_MEMORY, format!("{height} rows of {row} bytes")))?;
        let p = driver()?.mem_alloc(current()?, bytes as u64)?;
        // SAFETY: both checked non-null; a writable CUdeviceptr and size_t.
        unsafe {
            out(dptr, p)?;
            out(pitch, row)
        }
    }
}

/// `CUDA_MEMSET_NODE_PARAMS`.
#[repr(C)]
#[derive(Debug)]
pub(crate) struct MemsetNodeParams {
    dst: CUdeviceptr,
    pitch: usize,
    value: c_uint,
    element_size: c_uint,
    width: usize,
    height: usize,
}

/// A memset node's work: `height` rows of `width` elements of 1, 2 or 4 bytes.
fn memset_node_ops(p: Option<&MemsetNodeParams>) -> R<Vec<crate::capture::Op>> {
    let p = p.ok_or_else(|| Fail::new(CUDA_ERROR_INVALID_VALUE, "null memsetParams"))?;
    if !matches!(p.element_size, 1 | 2 | 4) {
        return Err(Fail::new(
            CUDA_ERROR_INVALID_VALUE,
            format!("memset node element size {}", p.element_size),
        ));
    }
    let row = p.width as u64 * u64::from(p.element_size);
    if p.height > 1 && (p.pitch as u64) < row {
        return Err(Fail::new(
            CUDA_ERROR_INVALID_VALUE,
            "memset node: a pitch smaller than a row",
        ));
    }
    Ok((0..p.height.max(1) as u64)
        .map(|y| crate::capture::Op::Memset {
            dst: p.dst + y * p.pitch as u64,
            value: p.value,
            width: p.element_size,
            count: p.width as u64,
        })
        .collect())
}

entry! {
    /// `cuGraphAddMemsetNode`: `height` rows of `width` elements of 1, 2 or 4 bytes.
    fn cuGraphAddMemsetNode(node: *mut Handle, graph: Handle, deps: *const Handle, n: usize, p: *const MemsetNodeParams, _ctx: Handle) {
        // SAFETY: `p` is null or the program's parameters.
        let ops = memset_node_ops(unsafe { p.as_ref() })?;
        // SAFETY: the program's node slot and dependencies.
        unsafe { add_node(node, graph, deps, n, crate::capture::NODE_MEMSET, ops) }
    }
}

/// `CUDA_HOST_NODE_PARAMS`.
#[repr(C)]
#[derive(Debug)]
pub(crate) struct HostNodeParams {
    f: HostFn,
    data: *mut c_void,
}

/// A host node's work: its function with its data.
fn host_node_ops(p: Option<&HostNodeParams>) -> R<Vec<crate::capture::Op>> {
    let p = p.ok_or_else(|| Fail::new(CUDA_ERROR_INVALID_VALUE, "null nodeParams"))?;
    let f =
        p.f.ok_or_else(|| Fail::new(CUDA_ERROR_INVALID_VALUE, "null host function"))?;
    Ok(vec![crate::capture::Op::HostFunc(repeatable(f, p.data))])
}

entry! {
    /// `cuGraphAddHostNode`.
    fn cuGraphAddHostNode(node: *mut Handle, graph: Handle, deps: *const Handle, n: usize, p: *const HostNodeParams) {
        // SAFETY: `p` is null or the program's parameters.
        let ops = host_node_ops(unsafe { p.as_ref() })?;
        // SAFETY: the program's node slot and dependencies.
        unsafe { add_node(node, graph, deps, n, crate::capture::NODE_HOST, ops) }
    }
}
entry! {
    /// `cuGraphAddEmptyNode`: a node that only orders others.
    fn cuGraphAddEmptyNode(node: *mut Handle, graph: Handle, deps: *const Handle, n: usize) {
        // SAFETY: the program's node slot and dependencies.
        unsafe { add_node(node, graph, deps, n, crate::capture::NODE_EMPTY, vec![]) }
    }
}

entry! {
    /// `cuGraphConditionalHandleCreate`: a conditional handle of `graph`, here the
    /// device address of its 32-bit value (set to `default`; each launch of the graph
    /// sets it again with `CU_GRAPH_COND_ASSIGN_DEFAULT`, flag 1). Kernels set it with
    /// `cudaGraphSetConditional`, which the simulator answers (in-process or behind the
    /// service); a GPU's backend does not read such handles.
    fn cuGraphConditionalHandleCreate(handle: *mut u64, graph: Handle, _ctx: Handle, default: c_uint, flags: c_uint) {
        if handle.is_null() {
            return Err(Fail::new(CUDA_ERROR_INVALID_VALUE, "null pHandle_out"));
        }
        if flags > 1 {
            return Err(Fail::new(CUDA_ERROR_INVALID_VALUE, format!("conditional handle flags {flags}")));
        }
        let g = nonnull(graph, "graph")?;
        let e = driver()?;
        let c = current()?;
        e.simulator_feature(c, "conditional graph nodes")?;
        e.graphs().def_exists(g)?;
        let a = e.mem_alloc(c, 4)?;
        if let Err(f) = e.memset(c, a, default, 4, 1, None) {
            let _ = e.mem_free(c, a);
            return Err(f);
        }
        e.graphs().cond_handle(g, a, default, flags == 1)?;
        // SAFETY: checked non-null; a CUgraphConditionalHandle slot.
        unsafe { out(handle, a) }
    }
}

/// The operation of an event record (`wait` false) or wait node on `event`, which must
/// be live.
fn event_node_op(event: Handle, wait: bool) -> R<crate::capture::Op> {
    let e = nonnull(event, "event")?;
    driver()?.event_known(e)?;
    Ok(if wait {
        crate::capture::Op::EventWait(e)
    } else {
        crate::capture::Op::EventRecord(e)
    })
}

/// The event of event record node (`wait` false) or wait node `node`.
fn node_event(node: Handle, wait: bool) -> R<u64> {
    let n = nonnull(node, "node")?;
    let (kind, ops) = driver()?.graphs().node_ops(n)?;
    match (ops.first(), wait) {
        (Some(crate::capture::Op::EventRecord(e)), false)
        | (Some(crate::capture::Op::EventWait(e)), true) => Ok(*e),
        _ => Err(Fail::new(
            CUDA_ERROR_INVALID_VALUE,
            format!(
                "node {n:#x} is of type {kind}, not an event {} node",
                if wait { "wait" } else { "record" }
            ),
        )),
    }
}

entry! {
    /// `cuGraphAddChildGraphNode`: a node running a copy of `child`.
    fn cuGraphAddChildGraphNode(node: *mut Handle, graph: Handle, deps: *const Handle, n: usize, child: Handle) {
        if node.is_null() {
            return Err(Fail::new(CUDA_ERROR_INVALID_VALUE, "null phGraphNode"));
        }
        // SAFETY: the program's array of `n` nodes.
        let deps = unsafe { node_deps(deps, n) }?;
        let h = driver()?.graphs().add_child(nonnull(graph, "graph")?, &deps, nonnull(child, "child graph")?)?;
        // SAFETY: checked non-null; a CUgraphNode slot.
        unsafe { out(node, ptr(h)) }
    }
}
entry! {
    /// `cuGraphChildGraphNodeGetGraph`: the node's own graph.
    fn cuGraphChildGraphNodeGetGraph(node: Handle, graph: *mut Handle) {
        let g = driver()?.graphs().child_graph(nonnull(node, "node")?)?;
        // SAFETY: `out` refuses null; a CUgraph slot.
        unsafe { out(graph, ptr(g)) }
    }
}

/// `cuGraphAddEventRecordNode`, `cuGraphAddEventWaitNode`; the get and set of their
/// events, in graphs and executable graphs.
macro_rules! event_nodes {
    ($( $add:ident, $get:ident, $set:ident, $exec_set:ident, $wait:expr; )*) => {$(
        entry! {
            #[doc = concat!("`", stringify!($add), "`.")]
            fn $add(node: *mut Handle, graph: Handle, deps: *const Handle, n: usize, event: Handle) {
                let kind = if $wait { crate::capture::NODE_WAIT_EVENT } else { crate::capture::NODE_EVENT_RECORD };
                // SAFETY: the program's node slot and dependencies.
                unsafe { add_node(node, graph, deps, n, kind, vec![event_node_op(event, $wait)?]) }
            }
        }
        entry! {
            #[doc = concat!("`", stringify!($get), "`.")]
            fn $get(node: Handle, event: *mut Handle) {
                let e = node_event(node, $wait)?;
                // SAFETY: `out` refuses null; a CUevent slot.
                unsafe { out(event, ptr(e)) }
            }
        }
        entry! {
            #[doc = concat!("`", stringify!($set), "`.")]
            fn $set(node: Handle, event: Handle) {
                let kind = if $wait { crate::capture::NODE_WAIT_EVENT } else { crate::capture::NODE_EVENT_RECORD };
                set_node(None, node, kind, vec![event_node_op(event, $wait)?])
            }
        }
        entry! {
            #[doc = concat!("`", stringify!($exec_set), "`.")]
            fn $exec_set(exec: Handle, node: Handle, event: Handle) {
                let kind = if $wait { crate::capture::NODE_WAIT_EVENT } else { crate::capture::NODE_EVENT_RECORD };
                set_node(Some(exec), node, kind, vec![event_node_op(event, $wait)?])
            }
        }
    )*};
}

event_nodes! {
    cuGraphAddEventRecordNode, cuGraphEventRecordNodeGetEvent, cuGraphEventRecordNodeSetEvent, cuGraphExecEventRecordNodeSetEvent, false;
    cuGraphAddEventWaitNode, cuGraphEventWaitNodeGetEvent, cuGraphEventWaitNodeSetEvent, cuGraphExecEventWaitNodeSetEvent, true;
}

/// `CUgraphNodeParams`: a node's type, then its parameters (a union of 29 words).
#[repr(C)]
pub(crate) struct GraphNodeParams {
    ty: c_int,
    reserved0: [c_int; 3],
    u: [u64; 29],
    reserved2: i64,
}

/// `CUDA_CONDITIONAL_NODE_PARAMS`.
#[repr(C)]
struct ConditionalNodeParams {
    handle: u64,
    kind: c_uint,
    size: c_uint,
    graphs: *const u64,
    ctx: Handle,
}

/// `cuGraphAddNode`: kernel, memcpy, memset, host, empty and conditional nodes (a
/// conditional node's body graphs are written to its `phGraph_out`).
///
/// # Safety
/// `node` is null or a node slot; `deps` null or `n` node handles; `edges` null or `n`
/// edge records; `p` null or the program's parameters as cuda.h describes them.
unsafe fn graph_add_node(
    node: *mut Handle,
    graph: Handle,
    deps: *const Handle,
    edges: *const u64,
    n: usize,
    p: *mut GraphNodeParams,
) -> R<()> {
    use crate::capture as c;
    // SAFETY: the caller's guarantee.
    unsafe { default_edges(edges, n) }?;
    // SAFETY: null or the program's parameters.
    let params = unsafe { p.as_mut() }
        .ok_or_else(|| Fail::new(CUDA_ERROR_INVALID_VALUE, "null nodeParams"))?;
    let u = params.u.as_mut_ptr();
    let (kind, ops) = match params.ty {
        c::NODE_KERNEL => {
            // SAFETY: `CUDA_KERNEL_NODE_PARAMS_v3` starts the union, with `_v2`'s layout.
            let k = unsafe { &*u.cast::<KernelNodeParamsV2>() };
            // SAFETY: the program's kernel parameters.
            (c::NODE_KERNEL, vec![unsafe { kernel_op(&k.base, k.kern) }?])
        }
        c::NODE_MEMCPY => {
            // SAFETY: `CUDA_MEMCPY_NODE_PARAMS`: flags, reserved, context, then the copy.
            let m = unsafe { &*u.add(2).cast::<Memcpy3D>() };
            (c::NODE_MEMCPY, memcpy3d_ops(m, "memcpy node")?)
        }
        c::NODE_MEMSET => {
            // SAFETY: `CUDA_MEMSET_NODE_PARAMS_v2` starts with `CUDA_MEMSET_NODE_PARAMS`.
            let m = unsafe { &*u.cast::<MemsetNodeParams>() };
            (c::NODE_MEMSET, memset_node_ops(Some(m))?)
        }
        c::NODE_HOST => {
            // SAFETY: `CUDA_HOST_NODE_PARAMS_v2` starts with `CUDA_HOST_NODE_PARAMS`.
            let h = unsafe { &*u.cast::<HostNodeParams>() };
            (c::NODE_HOST, host_node_ops(Some(h))?)
        }
        c::NODE_EMPTY => (c::NODE_EMPTY, vec![]),
        // `CUDA_EVENT_RECORD_NODE_PARAMS`, `CUDA_EVENT_WAIT_NODE_PARAMS`: the event.
        c::NODE_EVENT_RECORD | c::NODE_WAIT_EVENT => {
            let wait = params.ty == c::NODE_WAIT_EVENT;
            // SAFETY: the union's first word is the event.
            let event = unsafe { *u.cast::<Handle>() };
            (params.ty, vec![event_node_op(event, wait)?])
        }
        // `CUDA_CHILD_GRAPH_NODE_PARAMS`: the graph (copied; ownership moves are not
        // supported).
        c::NODE_GRAPH => {
            if node.is_null() {
                return Err(Fail::new(CUDA_ERROR_INVALID_VALUE, "null phGraphNode"));
            }
            // SAFETY: the union's first word is the graph, the second its ownership.
            let (child, ownership) = unsafe { (*u.cast::<Handle>(), *u.add(1).cast::<c_int>()) };
            if ownership != 0 {
                return Err(Fail::new(
                    CUDA_ERROR_NOT_SUPPORTED,
                    "a child graph node taking ownership of its graph (CU_GRAPH_CHILD_GRAPH_OWNERSHIP_MOVE)",
                ));
            }
            // SAFETY: the caller's guarantee.
            let deps = unsafe { node_deps(deps, n) }?;
            let h = driver()?.graphs().add_child(nonnull(graph, "graph")?, &deps, nonnull(child, "child graph")?)?;
            // SAFETY: checked non-null; a CUgraphNode slot.
            return unsafe { out(node, ptr(h)) };
        }
        c::NODE_CONDITIONAL => {
            if node.is_null() {
                return Err(Fail::new(CUDA_ERROR_INVALID_VALUE, "null phGraphNode"));
            }
            // SAFETY: `CUDA_CONDITIONAL_NODE_PARAMS` starts the union.
            let cp = unsafe { &mut *u.cast::<ConditionalNodeParams>() };
            // SAFETY: the caller's guarantee.
            let deps = unsafe { node_deps(deps, n) }?;
            let (h, bodies) = driver()?.graphs().add_conditional(
                nonnull(graph, "graph")?,
                &deps,
                cp.handle,
                cp.kind,
                cp.size,
            )?;
            cp.graphs = bodies;
            // SAFETY: checked non-null; a CUgraphNode slot.
            return unsafe { out(node, ptr(h)) };
        }
        t => {
            return Err(Fail::new(
                CUDA_ERROR_NOT_SUPPORTED,
                format!("graph node type {t} through cuGraphAddNode (kernel, memcpy, memset, host, child graph, empty, event and conditional nodes are supported)"),
            ))
        }
    };
    // SAFETY: the caller's guarantee.
    unsafe { add_node(node, graph, deps, n, kind, ops) }
}

entry! {
    /// `cuGraphAddNode` (CUDA 12.2's, without edge data).
    fn cuGraphAddNode(node: *mut Handle, graph: Handle, deps: *const Handle, n: usize, p: *mut GraphNodeParams) {
        // SAFETY: the program's slots, arrays and parameters.
        unsafe { graph_add_node(node, graph, deps, std::ptr::null(), n, p) }
    }
}
entry! {
    /// `cuGraphAddNode_v2` (what cuda.h 12.3 and later call `cuGraphAddNode`).
    fn cuGraphAddNode_v2(node: *mut Handle, graph: Handle, deps: *const Handle, edges: *const u64, n: usize, p: *mut GraphNodeParams) {
        // SAFETY: the program's slots, arrays and parameters.
        unsafe { graph_add_node(node, graph, deps, edges, n, p) }
    }
}

/// `cuGraphAddDependencies`: `to[i]` after `from[i]`.
///
/// # Safety
/// `from` and `to` are null or `n` node handles each.
unsafe fn add_dependencies(
    graph: Handle,
    from: *const Handle,
    to: *const Handle,
    n: usize,
) -> R<()> {
    // SAFETY: the caller's guarantee.
    let (from, to) = unsafe { (node_deps(from, n)?, node_deps(to, n)?) };
    driver()?
        .graphs()
        .add_dependencies(nonnull(graph, "graph")?, &from, &to)
}

entry! {
    /// `cuGraphAddDependencies`.
    fn cuGraphAddDependencies(graph: Handle, from: *const Handle, to: *const Handle, n: usize) {
        // SAFETY: the program's arrays.
        unsafe { add_dependencies(graph, from, to, n) }
    }
}
entry! {
    /// `cuGraphAddDependencies_v2`: edge data must be absent or the default (zeros).
    fn cuGraphAddDependencies_v2(graph: Handle, from: *const Handle, to: *const Handle, edges: *const u64, n: usize) {
        if !edges.is_null() && n > 0 {
            // SAFETY: `edges` holds `n` 8-byte CUgraphEdgeData.
            let e = unsafe { std::slice::from_raw_parts(edges, n) };
            if e.iter().any(|&x| x != 0) {
                return Err(Fail::new(CUDA_ERROR_NOT_SUPPORTED, "graph edges with data (programmatic ports)"));
            }
        }
        // SAFETY: the program's arrays.
        unsafe { add_dependencies(graph, from, to, n) }
    }
}

/// Writes `list` to the program's array of `*count` entries (the rest nulled) and the
/// number there is to `*count`; with no array, only the number.
///
/// # Safety
/// `count` is null or a `size_t`; `nodes` is null or holds `*count` entries.
unsafe fn node_array(list: &[u64], nodes: *mut Handle, count: *mut usize) -> R<()> {
    if count.is_null() {
        return Err(Fail::new(CUDA_ERROR_INVALID_VALUE, "null numNodes"));
    }
    if !nodes.is_null() {
        // SAFETY: the caller's guarantee.
        let room = unsafe { *count };
        for i in 0..room {
            // SAFETY: within the program's `room` entries.
            unsafe { *nodes.add(i) = list.get(i).map_or(std::ptr::null_mut(), |&n| ptr(n)) };
        }
    }
    // SAFETY: checked non-null.
    unsafe { *count = list.len() };
    Ok(())
}

entry! {
    /// `cuGraphGetNodes`.
    fn cuGraphGetNodes(graph: Handle, nodes: *mut Handle, count: *mut usize) {
        let list = driver()?.graphs().node_list(nonnull(graph, "graph")?, false)?;
        // SAFETY: the program's array and count.
        unsafe { node_array(&list, nodes, count) }
    }
}
entry! {
    /// `cuGraphGetRootNodes`: the nodes with no dependencies.
    fn cuGraphGetRootNodes(graph: Handle, nodes: *mut Handle, count: *mut usize) {
        let list = driver()?.graphs().node_list(nonnull(graph, "graph")?, true)?;
        // SAFETY: the program's array and count.
        unsafe { node_array(&list, nodes, count) }
    }
}
/// `cuGraph*NodeSetParams` (`exec` None) and `cuGraphExec*NodeSetParams`: node `node`
/// (of kind `kind`) does `ops`.
fn set_node(exec: Option<Handle>, node: Handle, kind: i32, ops: Vec<crate::capture::Op>) -> R<()> {
    let node = nonnull(node, "graph node")?;
    let mut g = driver()?.graphs();
    match exec {
        None => g.set_node(node, kind, ops),
        Some(x) => g.exec_set_node(nonnull(x, "graph exec")?, node, kind, ops),
    }
}

entry! {
    /// `cuGraphKernelNodeSetParams` (CUDA 11's parameters).
    fn cuGraphKernelNodeSetParams(node: Handle, p: *const KernelNodeParams) {
        // SAFETY: `p` is null or the program's parameters.
        let p = unsafe { p.as_ref() }.ok_or_else(|| Fail::new(CUDA_ERROR_INVALID_VALUE, "null nodeParams"))?;
        // SAFETY: the program's parameters as cuda.h describes them.
        let op = unsafe { kernel_op(p, std::ptr::null_mut()) }?;
        set_node(None, node, crate::capture::NODE_KERNEL, vec![op])
    }
}
entry! {
    /// `cuGraphKernelNodeSetParams_v2`.
    fn cuGraphKernelNodeSetParams_v2(node: Handle, p: *const KernelNodeParamsV2) {
        // SAFETY: `p` is null or the program's parameters.
        let p = unsafe { p.as_ref() }.ok_or_else(|| Fail::new(CUDA_ERROR_INVALID_VALUE, "null nodeParams"))?;
        // SAFETY: the program's parameters as cuda.h describes them.
        let op = unsafe { kernel_op(&p.base, p.kern) }?;
        set_node(None, node, crate::capture::NODE_KERNEL, vec![op])
    }
}
entry! {
    /// `cuGraphExecKernelNodeSetParams` (CUDA 11's parameters).
    fn cuGraphExecKernelNodeSetParams(exec: Handle, node: Handle, p: *const KernelNodeParams) {
        // SAFETY: `p` is null or the program's parameters.
        let p = unsafe { p.as_ref() }.ok_or_else(|| Fail::new(CUDA_ERROR_INVALID_VALUE, "null nodeParams"))?;
        // SAFETY: the program's parameters as cuda.h describes them.
        let op = unsafe { kernel_op(p, std::ptr::null_mut()) }?;
        set_node(Some(exec), node, crate::capture::NODE_KERNEL, vec![op])
    }
}
entry! {
    /// `cuGraphExecKernelNodeSetParams_v2`.
    fn cuGraphExecKernelNodeSetParams_v2(exec: Handle, node: Handle, p: *const KernelNodeParamsV2) {
        // SAFETY: `p` is null or the program's parameters.
        let p = unsafe { p.as_ref() }.ok_or_else(|| Fail::new(CUDA_ERROR_INVALID_VALUE, "null nodeParams"))?;
        // SAFETY: the program's parameters as cuda.h describes them.
        let op = unsafe { kernel_op(&p.base, p.kern) }?;
        set_node(Some(exec), node, crate::capture::NODE_KERNEL, vec![op])
    }
}
entry! {
    /// `cuGraphMemcpyNodeSetParams`.
    fn cuGraphMemcpyNodeSetParams(node: Handle, p: *const Memcpy3D) {
        // SAFETY: `p` is null or the program's parameters.
        let p = unsafe { p.as_ref() }.ok_or_else(|| Fail::new(CUDA_ERROR_INVALID_VALUE, "null nodeParams"))?;
        set_node(None, node, crate::capture::NODE_MEMCPY, memcpy3d_ops(p, "memcpy node")?)
    }
}
entry! {
    /// `cuGraphExecMemcpyNodeSetParams`.
    fn cuGraphExecMemcpyNodeSetParams(exec: Handle, node: Handle, p: *const Memcpy3D, _ctx: Handle) {
        // SAFETY: `p` is null or the program's parameters.
        let p = unsafe { p.as_ref() }.ok_or_else(|| Fail::new(CUDA_ERROR_INVALID_VALUE, "null copyParams"))?;
        set_node(Some(exec), node, crate::capture::NODE_MEMCPY, memcpy3d_ops(p, "memcpy node")?)
    }
}
entry! {
    /// `cuGraphMemsetNodeSetParams`.
    fn cuGraphMemsetNodeSetParams(node: Handle, p: *const MemsetNodeParams) {
        // SAFETY: `p` is null or the program's parameters.
        set_node(None, node, crate::capture::NODE_MEMSET, memset_node_ops(unsafe { p.as_ref() })?)
    }
}
entry! {
    /// `cuGraphExecMemsetNodeSetParams`.
    fn cuGraphExecMemsetNodeSetParams(exec: Handle, node: Handle, p: *const MemsetNodeParams, _ctx: Handle) {
        // SAFETY: `p` is null or the program's parameters.
        set_node(Some(exec), node, crate::capture::NODE_MEMSET, memset_node_ops(unsafe { p.as_ref() })?)
    }
}
entry! {
    /// `cuGraphHostNodeSetParams`.
    fn cuGraphHostNodeSetParams(node: Handle, p: *const HostNodeParams) {
        // SAFETY: `p` is null or the program's parameters.
        set_node(None, node, crate::capture::NODE_HOST, host_node_ops(unsafe { p.as_ref() })?)
    }
}
entry! {
    /// `cuGraphExecHostNodeSetParams`.
    fn cuGraphExecHostNodeSetParams(exec: Handle, node: Handle, p: *const HostNodeParams) {
        // SAFETY: `p` is null or the program's parameters.
        set_node(Some(exec), node, crate::capture::NODE_HOST, host_node_ops(unsafe { p.as_ref() })?)
    }
}

/// `CUgraphExecUpdateResultInfo`.
#[repr(C)]
pub(crate) struct ExecUpdateResultInfo {
    result: c_int,
    error_node: Handle,
    error_from_node: Handle,
}

entry! {
    /// `cuGraphExecUpdate_v2`: the executable graph takes the graph's parameters when
    /// both have the same nodes, kinds and dependencies; otherwise
    /// `CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE` with the reason in `result_info`.
    fn cuGraphExecUpdate_v2(exec: Handle, graph: Handle, info: *mut ExecUpdateResultInfo) {
        if info.is_null() {
            return Err(Fail::new(CUDA_ERROR_INVALID_VALUE, "null resultInfo"));
        }
        let r = driver()?.graphs().exec_update(nonnull(exec, "graph exec")?, nonnull(graph, "graph")?)?;
        let (result, node) = r.err().unwrap_or((0, 0));
        // SAFETY: checked non-null; the program's CUgraphExecUpdateResultInfo.
        unsafe {
            info.write_unaligned(ExecUpdateResultInfo { result, error_node: ptr(node), error_from_node: std::ptr::null_mut() })
        };
        if result != 0 {
            return Err(Fail::new(
                CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE,
                format!("the graph differs from the executable graph's ({})", if result == 2 { "topology changed" } else { "a node's type changed" }),
            ));
        }
        Ok(())
    }
}

/// `cuGraphNodeGetDependencies[_v2]` and `cuGraphNodeGetDependentNodes[_v2]`: the nodes,
/// and (for `_v2`) default edges.
///
/// # Safety
/// `count` is null or a `size_t`; `nodes` and `edges` are null or hold `*count` entries
/// (an edge is 8 bytes).
unsafe fn node_edges(
    node: Handle,
    dependents: bool,
    nodes: *mut Handle,
    edges: *mut u64,
    count: *mut usize,
) -> R<()> {
    let list = driver()?
        .graphs()
        .node_edges(nonnull(node, "graph node")?, dependents)?;
    if !edges.is_null() && !count.is_null() {
        // SAFETY: the caller's guarantee: `*count` edges of 8 bytes.
        let room = unsafe { *count };
        for i in 0..room {
            // SAFETY: within the program's `room` edges; a default edge is all zero.
            unsafe { edges.add(i).write_unaligned(0) };
        }
    }
    // SAFETY: the caller's guarantee.
    unsafe { node_array(&list, nodes, count) }
}

entry! {
    /// `cuGraphNodeGetDependencies`.
    fn cuGraphNodeGetDependencies(node: Handle, deps: *mut Handle, count: *mut usize) {
        // SAFETY: the program's array and count.
        unsafe { node_edges(node, false, deps, std::ptr::null_mut(), count) }
    }
}
entry! {
    /// `cuGraphNodeGetDependencies_v2` (every edge a default one).
    fn cuGraphNodeGetDependencies_v2(node: Handle, deps: *mut Handle, edges: *mut u64, count: *mut usize) {
        // SAFETY: the program's arrays and count.
        unsafe { node_edges(node, false, deps, edges, count) }
    }
}
entry! {
    /// `cuGraphNodeGetDependentNodes`.
    fn cuGraphNodeGetDependentNodes(node: Handle, deps: *mut Handle, count: *mut usize) {
        // SAFETY: the program's array and count.
        unsafe { node_edges(node, true, deps, std::ptr::null_mut(), count) }
    }
}
entry! {
    /// `cuGraphNodeGetDependentNodes_v2` (every edge a default one).
    fn cuGraphNodeGetDependentNodes_v2(node: Handle, deps: *mut Handle, edges: *mut u64, count: *mut usize) {
        // SAFETY: the program's arrays and count.
        unsafe { node_edges(node, true, deps, edges, count) }
    }
}

entry! {
    /// `cuGraphNodeGetType`.
    fn cuGraphNodeGetType(node: Handle, ty: *mut c_int) {
        let t = driver()?.graphs().node_type(nonnull(node, "graph node")?)?;
        // SAFETY: `out` refuses null.
        unsafe { out(ty, t) }
    }
}
entry! {
    /// `cuGraphClone`.
    fn cuGraphClone(clone: *mut Handle, graph: Handle) {
        if clone.is_null() {
            return Err(Fail::new(CUDA_ERROR_INVALID_VALUE, "null phGraphClone"));
        }
        let g = driver()?.graphs().clone_graph(nonnull(graph, "graph")?)?;
        // SAFETY: checked non-null; a CUgraph slot.
        unsafe { out(clone, ptr(g)) }
    }
}

/// A user object's destructor, `void (*)(void *)`.
type UserDestroy = Option<unsafe extern "C" fn(*mut c_void)>;

/// Calls user objects' destructors (no driver lock is held).
fn run_destructors(list: impl IntoIterator<Item = crate::capture::Destructor>) {
    for d in list {
        // SAFETY: `destroy` is the non-null `void (*)(void *)` the program gave
        // `cuUserObjectCreate` with `ptr`, to be called once when the last reference
        // goes, which is now.
        unsafe {
            let f: unsafe extern "C" fn(*mut c_void) = std::mem::transmute(d.destroy);
            f(d.ptr as *mut c_void)
        }
    }
}

entry! {
    /// `cuUserObjectCreate` (flags must be `CU_USER_OBJECT_NO_DESTRUCTOR_SYNC`, 1).
    fn cuUserObjectCreate(obj: *mut Handle, p: *mut c_void, destroy: UserDestroy, refs: c_uint, flags: c_uint) {
        if obj.is_null() {
            return Err(Fail::new(CUDA_ERROR_INVALID_VALUE, "null object_out"));
        }
        let destroy = destroy.ok_or_else(|| Fail::new(CUDA_ERROR_INVALID_VALUE, "null destroy"))?;
        if flags != 1 {
            return Err(Fail::new(
                CUDA_ERROR_INVALID_VALUE,
                "cuUserObjectCreate flags must be CU_USER_OBJECT_NO_DESTRUCTOR_SYNC",
            ));
        }
        let d = crate::capture::Destructor { destroy: destroy as usize, ptr: p as usize };
        let h = driver()?.graphs().object_create(d, refs)?;
        // SAFETY: checked non-null; a CUuserObject slot.
        unsafe { out(obj, ptr(h)) }
    }
}
entry! {
    /// `cuUserObjectRetain`.
    fn cuUserObjectRetain(obj: Handle, n: c_uint) { driver()?.graphs().object_retain(nonnull(obj, "user object")?, n) }
}
entry! {
    /// `cuUserObjectRelease`: the destructor runs when the last reference goes.
    fn cuUserObjectRelease(obj: Handle, n: c_uint) {
        let d = driver()?.graphs().object_release(nonnull(obj, "user object")?, n)?;
        run_destructors(d);
        Ok(())
    }
}
entry! {
    /// `cuGraphRetainUserObject` (flags 0 or `CU_GRAPH_USER_OBJECT_MOVE`, 1).
    fn cuGraphRetainUserObject(graph: Handle, obj: Handle, n: c_uint, flags: c_uint) {
        if flags > 1 {
            return Err(Fail::new(CUDA_ERROR_INVALID_VALUE, format!("flags {flags:#x}")));
        }
        driver()?.graphs().graph_retain_object(nonnull(graph, "graph")?, nonnull(obj, "user object")?, n, flags == 1)
    }
}
entry! {
    /// `cuGraphReleaseUserObject`.
    fn cuGraphReleaseUserObject(graph: Handle, obj: Handle, n: c_uint) {
        let d = driver()?.graphs().graph_release_object(nonnull(graph, "graph")?, nonnull(obj, "user object")?, n)?;
        run_destructors(d);
        Ok(())
    }
}

fn instantiate(exec: *mut Handle, graph: Handle, flags: u64) -> R<()> {
    if exec.is_null() {
        return Err(Fail::new(CUDA_ERROR_INVALID_VALUE, "null phGraphExec"));
    }
    let x = driver()?
        .graphs()
        .instantiate(nonnull(graph, "graph")?, flags)?;
    // SAFETY: checked non-null; a CUgraphExec slot.
    unsafe { out(exec, ptr(x)) }
}

entry! {
    /// `cuGraphInstantiateWithFlags`.
    fn cuGraphInstantiateWithFlags(exec: *mut Handle, graph: Handle, flags: u64) { instantiate(exec, graph, flags) }
}
entry! {
    /// `cuGraphInstantiate_v2` (CUDA 11's five-argument form): no error node, an
    /// empty log.
    fn cuGraphInstantiate_v2(exec: *mut Handle, graph: Handle, err_node: *mut Handle, log: *mut c_char, log_size: usize) {
        if !err_node.is_null() {
            // SAFETY: the program's CUgraphNode slot.
            unsafe { out(err_node, std::ptr::null_mut()) }?;
        }
        if !log.is_null() && log_size > 0 {
            // SAFETY: the program's log buffer holds at least one byte.
            unsafe { log.write(0) };
        }
        instantiate(exec, graph, 0)
    }
}

/// `CUDA_GRAPH_INSTANTIATE_PARAMS`.
#[repr(C)]
#[derive(Debug)]
pub(crate) struct InstantiateParams {
    flags: u64,
    upload_stream: Handle,
    err_node: Handle,
    result: c_int,
}

/// `cuGraphInstantiateWithParams`: the flags; the upload stream needs nothing (graphs
/// are not uploaded ahead); the result is written back.
///
/// # Safety
/// `params` is null or a valid `CUDA_GRAPH_INSTANTIATE_PARAMS`.
unsafe fn instantiate_with_params(
    exec: *mut Handle,
    graph: Handle,
    params: *mut InstantiateParams,
) -> R<()> {
    if params.is_null() {
        return Err(Fail::new(
            CUDA_ERROR_INVALID_VALUE,
            "null instantiateParams",
        ));
    }
    // SAFETY: non-null, the program's parameter block.
    let p = unsafe { &mut *params };
    let r = instantiate(exec, graph, p.flags);
    p.err_node = std::ptr::null_mut();
    // CUgraphInstantiateResult: success 0, error 1.
    p.result = c_int::from(r.is_err());
    r
}

entry! {
    /// `cuGraphInstantiateWithParams`.
    fn cuGraphInstantiateWithParams(exec: *mut Handle, graph: Handle, params: *mut InstantiateParams) {
        // SAFETY: the program's parameter block.
        unsafe { instantiate_with_params(exec, graph, params) }
    }
}
entry! {
    /// `cuGraphInstantiateWithParams_ptsz`.
    fn cuGraphInstantiateWithParams_ptsz(exec: *mut Handle, graph: Handle, params: *mut InstantiateParams) {
        // SAFETY: the program's parameter block.
        unsafe { instantiate_with_params(exec, graph, params) }
    }
}
entry! {
    /// `cuGraphExecDestroy`.
    fn cuGraphExecDestroy(exec: Handle) {
        let d = driver()?.graphs().exec_destroy(nonnull(exec, "graph exec")?)?;
        run_destructors(d);
        release_graph_memory()
    }
}

fn graph_launch(exec: Handle, s: u64) -> R<()> {
    let x = nonnull(exec, "graph exec")?;
    driver()?.graph_launch(stream_ctx(s)?, x, s)
}

fn graph_upload(exec: Handle, s: u64) -> R<()> {
    let x = nonnull(exec, "graph exec")?;
    let e = driver()?;
    e.graphs().exec(x)?;
    e.stream_exists(stream_ctx(s)?, s)
}

entry! {
    /// `cuGraphLaunch`: the graph's work, in capture order, on the stream.
    fn cuGraphLaunch(exec: Handle, s: Handle) { graph_launch(exec, strm(s, false)) }
}
entry! {
    /// `cuGraphLaunch_ptsz`.
    fn cuGraphLaunch_ptsz(exec: Handle, s: Handle) { graph_launch(exec, strm(s, true)) }
}
entry! {
    /// `cuGraphUpload`: nothing to upload ahead here; checks the graph and stream.
    fn cuGraphUpload(exec: Handle, s: Handle) { graph_upload(exec, strm(s, false)) }
}
entry! {
    /// `cuGraphUpload_ptsz`.
    fn cuGraphUpload_ptsz(exec: Handle, s: Handle) { graph_upload(exec, strm(s, true)) }
}

entry! {
    /// `cuStreamIsCapturing`.
    fn cuStreamIsCapturing(s: Handle, status: *mut c_int) { is_capturing(strm(s, false), status) }
}
entry! {
    /// `cuStreamIsCapturing_ptsz`.
    fn cuStreamIsCapturing_ptsz(s: Handle, status: *mut c_int) { is_capturing(strm(s, true), status) }
}

entry! {
    /// `cuStreamSynchronize`.
    fn cuStreamSynchronize(s: Handle) { stream_sync(strm(s, false)) }
}
entry! {
    /// `cuStreamSynchronize_ptsz`.
    fn cuStreamSynchronize_ptsz(s: Handle) { stream_sync(strm(s, true)) }
}
entry! {
    /// `cuStreamQuery`: `CUDA_ERROR_NOT_READY` while busy.
    fn cuStreamQuery(s: Handle) { stream_query(strm(s, false)) }
}
entry! {
    /// `cuStreamQuery_ptsz`.
    fn cuStreamQuery_ptsz(s: Handle) { stream_query(strm(s, true)) }
}
entry! {
    /// `cuStreamWaitEvent`.
    fn cuStreamWaitEvent(s: Handle, ev: Handle, flags: c_uint) { stream_wait(strm(s, false), ev, flags) }
}
entry! {
    /// `cuStreamWaitEvent_ptsz`.
    fn cuStreamWaitEvent_ptsz(s: Handle, ev: Handle, flags: c_uint) { stream_wait(strm(s, true), ev, flags) }
}

// ---------------------------------------------------------------------------------------
// Events.

entry! {
    /// `cuEventCreate`.
    fn cuEventCreate(ph: *mut Handle, flags: c_uint) {
        if ph.is_null() {
            return Err(Fail::new(CUDA_ERROR_INVALID_VALUE, "null phEvent"));
        }
        let ev = driver()?.event_create(current()?, flags)?;
        // SAFETY: checked non-null; a writable CUevent slot.
        unsafe { out(ph, ptr(ev)) }
    }
}

fn event_destroy(ev: Handle) -> R<()> {
    let ev = nonnull(ev, "event")?;
    driver()?.event_destroy(current().unwrap_or(0), ev)
}

entry! {
    /// `cuEventDestroy_v2`.
    fn cuEventDestroy_v2(ev: Handle) { event_destroy(ev) }
}
entry! {
    /// `cuEventDestroy` (the same as `_v2`).
    fn cuEventDestroy(ev: Handle) { event_destroy(ev) }
}

fn event_record(ev: Handle, s: u64, flags: c_uint) -> R<()> {
    let e = driver()?;
    let ev = nonnull(ev, "event")?;
    if flags != 0 {
        return Err(unsupported_detail(
            "cuEventRecordWithFlags",
            "CU_EVENT_RECORD_EXTERNAL",
        ));
    }
    e.event_record(stream_ctx(s)?, ev, s)
}

entry! {
    /// `cuEventRecord`.
    fn cuEventRecord(ev: Handle, s: Handle) { event_record(ev, strm(s, false), 0) }
}
entry! {
    /// `cuEventRecord_ptsz`.
    fn cuEventRecord_ptsz(ev: Handle, s: Handle) { event_record(ev, strm(s, true), 0) }
}
entry! {
    /// `cuEventRecordWithFlags` (flags 0 only).
    fn cuEventRecordWithFlags(ev: Handle, s: Handle, flags: c_uint) { event_record(ev, strm(s, false), flags) }
}
entry! {
    /// `cuEventRecordWithFlags_ptsz` (flags 0 only).
    fn cuEventRecordWithFlags_ptsz(ev: Handle, s: Handle, flags: c_uint) { event_record(ev, strm(s, true), flags) }
}

entry! {
    /// `cuEventSynchronize`.
    fn cuEventSynchronize(ev: Handle) {
        let ev = nonnull(ev, "event")?;
        driver()?.event_synchronize(current().unwrap_or(0), ev)
    }
}

entry! {
    /// `cuEventQuery`: `CUDA_ERROR_NOT_READY` until reached.
    fn cuEventQuery(ev: Handle) {
        let ev = nonnull(ev, "event")?;
        if driver()?.event_query(current().unwrap_or(0), ev)? {
            Ok(())
        } else {
            Err(Fail::new(CUDA_ERROR_NOT_READY, "not reached"))
        }
    }
}

fn elapsed(ms: *mut c_float, a: Handle, b: Handle) -> R<()> {
    if ms.is_null() {
        return Err(Fail::new(CUDA_ERROR_INVALID_VALUE, "null pMilliseconds"));
    }
    let (a, b) = (nonnull(a, "event")?, nonnull(b, "event")?);
    let v = driver()?.event_elapsed(current().unwrap_or(0), a, b)?;
    // SAFETY: checked non-null; a writable float.
    unsafe { out(ms, v) }
}

entry! {
    /// `cuEventElapsedTime`.
    fn cuEventElapsedTime(ms: *mut c_float, start: Handle, end: Handle) { elapsed(ms, start, end) }
}
entry! {
    /// `cuEventElapsedTime_v2` (CUDA 12.8; the same prototype).
    fn cuEventElapsedTime_v2(ms: *mut c_float, start: Handle, end: Handle) { elapsed(ms, start, end) }
}

// ---------------------------------------------------------------------------------------
// Entry points programs commonly touch that the shim does not implement: they answer
// CUDA_ERROR_NOT_SUPPORTED and are logged (once each; once per attribute or flag of a
// supported entry point, since programs may ask in a loop).

fn unsupported_detail(name: &str, what: &str) -> Fail {
    log::warn_once(
        &format!("{name}({what})"),
        &format!("{name}({what}) is not supported: CUDA_ERROR_NOT_SUPPORTED"),
    );
    Fail::new(CUDA_ERROR_NOT_SUPPORTED, format!("{name}: {what}"))
}

/// Logs an unsupported entry point once.
pub(crate) fn unsupported(name: &'static str) -> CUresult {
    log::warn_once(
        name,
        &format!("{name} is not supported: CUDA_ERROR_NOT_SUPPORTED"),
    );
    CUDA_ERROR_NOT_SUPPORTED
}

macro_rules! unsupported {
    ($($name:ident),* $(,)?) => {
        $(
            #[doc = concat!("`", stringify!($name), "`: not supported (`CUDA_ERROR_NOT_SUPPORTED`, logged).")]
            #[no_mangle]
            pub extern "C" fn $name() -> CUresult {
                unsupported(stringify!($name))
            }
        )*
        /// The unsupported entry points, for `cuGetProcAddress`.
        pub(crate) const UNSUPPORTED: &[(&str, extern "C" fn() -> CUresult)] = &[
            $((stringify!($name), $name),)*
        ];
    };
}

// Generated by gen-unsupported.sh (cuda.h 12.9 and the names cudarc 0.16 looks up), less
// what the library implements.
unsupported! {
    cuArrayGetMemoryRequirements,
    cuArrayGetPlane,
    cuArrayGetSparseProperties,
    cuCheckpointProcessCheckpoint,
    cuCheckpointProcessGetRestoreThreadId,
    cuCheckpointProcessGetState,
    cuCheckpointProcessLock,
    cuCheckpointProcessRestore,
    cuCheckpointProcessUnlock,
    cuCoredumpGetAttribute,
    cuCoredumpGetAttributeGlobal,
    cuCoredumpSetAttribute,
    cuCoredumpSetAttributeGlobal,
    cuCtxAttach,
    cuCtxDetach,
    cuCtxFromGreenCtx,
    cuCtxGetDevResource,
    cuCtxGetExecAffinity,
    cuCtxGetId,
    cuCtxRecordEvent,
    cuCtxSetFlags,
    cuCtxWaitEvent,
    cuDestroyExternalMemory,
    cuDestroyExternalSemaphore,
    cuDevResourceGenerateDesc,
    cuDevSmResourceSplitByCount,
    cuDeviceGetDevResource,
    cuDeviceGetExecAffinitySupport,
    cuDeviceGetLuid,
    cuDeviceGetNvSciSyncAttributes,
    cuDeviceGetP2PAttribute,
    cuDeviceGetProperties,
    cuDeviceGetTexture1DLinearMaxWidth,
    cuDeviceRegisterAsyncNotification,
    cuDeviceSetMemPool,
    cuDeviceUnregisterAsyncNotification,
    cuExternalMemoryGetMappedBuffer,
    cuExternalMemoryGetMappedMipmappedArray,
    cuFlushGPUDirectRDMAWrites,
    cuFuncGetModule,
    cuFuncGetParamInfo,
    cuFuncIsLoaded,
    cuFuncLoad,
    cuFuncSetBlockShape,
    cuFuncSetSharedMemConfig,
    cuFuncSetSharedSize,
    cuGetProcAddress_v2_ptsz,
    cuGraphAddBatchMemOpNode,
    cuGraphAddExternalSemaphoresSignalNode,
    cuGraphAddExternalSemaphoresWaitNode,
    cuGraphBatchMemOpNodeGetParams,
    cuGraphBatchMemOpNodeSetParams,
    cuGraphDebugDotPrint,
    cuGraphDestroyNode,
    cuGraphExecBatchMemOpNodeSetParams,
    cuGraphExecChildGraphNodeSetParams,
    cuGraphExecExternalSemaphoresSignalNodeSetParams,
    cuGraphExecExternalSemaphoresWaitNodeSetParams,
    cuGraphExecGetFlags,
    cuGraphExecNodeSetParams,
    cuGraphExecUpdate,
    cuGraphExternalSemaphoresSignalNodeGetParams,
    cuGraphExternalSemaphoresSignalNodeSetParams,
    cuGraphExternalSemaphoresWaitNodeGetParams,
    cuGraphExternalSemaphoresWaitNodeSetParams,
    cuGraphGetEdges,
    cuGraphGetEdges_v2,
    cuGraphHostNodeGetParams,
    cuGraphKernelNodeCopyAttributes,
    cuGraphKernelNodeGetAttribute,
    cuGraphKernelNodeGetParams,
    cuGraphKernelNodeGetParams_v2,
    cuGraphKernelNodeSetAttribute,
    cuGraphMemcpyNodeGetParams,
    cuGraphMemsetNodeGetParams,
    cuGraphNodeFindInClone,
    cuGraphNodeGetEnabled,
    cuGraphNodeSetEnabled,
    cuGraphNodeSetParams,
    cuGraphRemoveDependencies,
    cuGraphRemoveDependencies_v2,
    cuGraphicsMapResources,
    cuGraphicsMapResources_ptsz,
    cuGraphicsResourceGetMappedMipmappedArray,
    cuGraphicsResourceGetMappedPointer_v2,
    cuGraphicsResourceSetMapFlags_v2,
    cuGraphicsSubResourceGetMappedArray,
    cuGraphicsUnmapResources,
    cuGraphicsUnmapResources_ptsz,
    cuGraphicsUnregisterResource,
    cuGreenCtxCreate,
    cuGreenCtxDestroy,
    cuGreenCtxGetDevResource,
    cuGreenCtxRecordEvent,
    cuGreenCtxStreamCreate,
    cuGreenCtxWaitEvent,
    cuImportExternalMemory,
    cuImportExternalSemaphore,
    cuIpcCloseMemHandle,
    cuIpcGetEventHandle,
    cuIpcGetMemHandle,
    cuIpcOpenEventHandle,
    cuIpcOpenMemHandle_v2,
    cuKernelGetLibrary,
    cuKernelGetName,
    cuKernelGetParamInfo,
    cuLaunch,
    cuLaunchCooperativeKernelMultiDevice,
    cuLaunchGrid,
    cuLaunchGridAsync,
    cuLibraryEnumerateKernels,
    cuLibraryGetKernelCount,
    cuLibraryGetManaged,
    cuLibraryGetUnifiedFunction,
    cuLogsCurrent,
    cuLogsDumpToFile,
    cuLogsDumpToMemory,
    cuLogsRegisterCallback,
    cuLogsUnregisterCallback,
    cuMemAddressFree,
    cuMemAddressReserve,
    cuMemBatchDecompressAsync,
    cuMemBatchDecompressAsync_ptsz,
    cuMemCreate,
    cuMemExportToShareableHandle,
    cuMemGetAccess,
    cuMemGetAllocationGranularity,
    cuMemGetAllocationPropertiesFromHandle,
    cuMemGetHandleForAddressRange,
    cuMemHostGetFlags,
    cuMemImportFromShareableHandle,
    cuMemMap,
    cuMemMapArrayAsync,
    cuMemMapArrayAsync_ptsz,
    cuMemPoolCreate,
    cuMemPoolDestroy,
    cuMemPoolExportPointer,
    cuMemPoolExportToShareableHandle,
    cuMemPoolImportFromShareableHandle,
    cuMemPoolImportPointer,
    cuMemPoolSetAccess,
    cuMemRangeGetAttribute,
    cuMemRangeGetAttributes,
    cuMemRelease,
    cuMemRetainAllocationHandle,
    cuMemSetAccess,
    cuMemUnmap,
    cuMemcpy3DBatchAsync,
    cuMemcpy3DBatchAsync_ptsz,
    cuMemcpy3DPeer,
    cuMemcpy3DPeerAsync,
    cuMemcpy3DPeerAsync_ptsz,
    cuMemcpy3DPeer_ptds,
    cuMemcpyAtoA_v2_ptds,
    cuMemcpyAtoD_v2_ptds,
    cuMemcpyAtoHAsync_v2_ptsz,
    cuMemcpyAtoH_v2_ptds,
    cuMemcpyBatchAsync,
    cuMemcpyBatchAsync_ptsz,
    cuMemcpyDtoA_v2_ptds,
    cuMemcpyHtoAAsync_v2_ptsz,
    cuMemcpyHtoA_v2_ptds,
    cuMipmappedArrayCreate,
    cuMipmappedArrayDestroy,
    cuMipmappedArrayGetLevel,
    cuMipmappedArrayGetMemoryRequirements,
    cuMipmappedArrayGetSparseProperties,
    cuModuleEnumerateFunctions,
    cuModuleGetFunctionCount,
    cuModuleGetLoadingMode,
    cuModuleGetSurfRef,
    cuModuleGetTexRef,
    cuMulticastAddDevice,
    cuMulticastBindAddr,
    cuMulticastBindMem,
    cuMulticastCreate,
    cuMulticastGetGranularity,
    cuMulticastUnbind,
    cuOccupancyMaxActiveClusters,
    cuOccupancyMaxPotentialClusterSize,
    cuParamSetSize,
    cuParamSetTexRef,
    cuParamSetf,
    cuParamSeti,
    cuParamSetv,
    cuPointerSetAttribute,
    cuProfilerInitialize,
    cuSignalExternalSemaphoresAsync,
    cuSignalExternalSemaphoresAsync_ptsz,
    cuStreamBatchMemOp,
    cuStreamBatchMemOp_v2,
    cuStreamBatchMemOp_v2_ptsz,
    cuStreamGetGreenCtx,
    cuStreamWaitValue32,
    cuStreamWaitValue32_v2,
    cuStreamWaitValue32_v2_ptsz,
    cuStreamWaitValue64,
    cuStreamWaitValue64_v2,
    cuStreamWaitValue64_v2_ptsz,
    cuStreamWriteValue32,
    cuStreamWriteValue32_v2,
    cuStreamWriteValue32_v2_ptsz,
    cuStreamWriteValue64,
    cuStreamWriteValue64_v2,
    cuStreamWriteValue64_v2_ptsz,
    cuSurfRefGetArray,
    cuSurfRefSetArray,
    cuTensorMapEncodeIm2col,
    cuTensorMapEncodeIm2colWide,
    cuTensorMapEncodeTiled,
    cuTensorMapReplaceAddress,
    cuTexObjectGetResourceViewDesc,
    cuTexRefCreate,
    cuTexRefDestroy,
    cuTexRefGetAddressMode,
    cuTexRefGetAddress_v2,
    cuTexRefGetArray,
    cuTexRefGetBorderColor,
    cuTexRefGetFilterMode,
    cuTexRefGetFlags,
    cuTexRefGetFormat,
    cuTexRefGetMaxAnisotropy,
    cuTexRefGetMipmapFilterMode,
    cuTexRefGetMipmapLevelBias,
    cuTexRefGetMipmapLevelClamp,
    cuTexRefGetMipmappedArray,
    cuTexRefSetAddress2D_v3,
    cuTexRefSetAddressMode,
    cuTexRefSetAddress_v2,
    cuTexRefSetArray,
    cuTexRefSetBorderColor,
    cuTexRefSetFilterMode,
    cuTexRefSetFlags,
    cuTexRefSetFormat,
    cuTexRefSetMaxAnisotropy,
    cuTexRefSetMipmapFilterMode,
    cuTexRefSetMipmapLevelBias,
    cuTexRefSetMipmapLevelClamp,
    cuTexRefSetMipmappedArray,
    cuWaitExternalSemaphoresAsync,
    cuWaitExternalSemaphoresAsync_ptsz,
}
