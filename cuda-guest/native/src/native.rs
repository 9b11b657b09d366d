//! [`Backend`] over the NVIDIA driver, loaded at run time by [`Driver`].

use std::cell::Cell;
use std::ffi::{c_char, c_int, c_uint, c_void, CString};
use std::sync::Mutex;

use crate::loader::{Driver, DriverApi, LoadOptions};
use vmgpu_cuda_api::error::{is_sticky, CudaError, DriverError};
use vmgpu_cuda_api::LaunchKind;
use vmgpu_cuda_api::{
    next_instance_id, sys, Backend, BackendKind, Context, Device, DeviceAttribute, DevicePtr,
    Event, EventFlags, Function, FunctionAttribute, HostAlloc, HostAllocFlags, HostRegisterFlags,
    LaunchConfig, MemInfo, Module, Result, Stream, StreamFlags,
};

thread_local! {
    /// (backend instance, device ordinal) of the context this thread last made current
    /// through a backend, for error messages.
    static CURRENT: Cell<(u32, u32)> = const { Cell::new((0, 0)) };
}

/// A primary context the backend holds one reference on, and how many references the
/// callers of [`Backend::primary_context_retain`] hold (so that they cannot release the
/// backend's own).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Retained {
    ctx: u64,
    user_refs: u64,
}

/// JIT log buffers, bytes each.
const JIT_LOG_BYTES: usize = 16 * 1024;
/// Kernel parameters passed without a heap allocation.
const INLINE_ARGS: usize = 32;

/// The NVIDIA driver as a [`Backend`]: `libcuda.so.1` loaded at run time (never
/// linked), entry points resolved through `cuGetProcAddress_v2`.
#[derive(Debug)]
pub struct NativeBackend {
    id: u32,
    driver_version: i32,
    devices: Vec<sys::CUdevice>,
    /// The primary context this backend holds a reference on, per device, released
    /// when the backend is dropped.
    retained: Mutex<Vec<Option<Retained>>>,
    /// Contexts made by [`Backend::context_create`] and not destroyed yet: handle and
    /// device ordinal (destroyed when the backend is dropped).
    created: Mutex<Vec<(u64, u32)>>,
    // Declared last: the library is unloaded after everything above is dropped.
    driver: Driver,
}

impl NativeBackend {
    /// `cuLaunchKernel`, or `cuLaunchCooperativeKernel`, as `kind` says.
    ///
    /// # Safety
    /// As [`Backend::launch`].
    unsafe fn launch_grid(
        &self,
        function: &Function,
        config: &LaunchConfig,
        stream: &Stream,
        args: &[&[u8]],
        kind: LaunchKind,
    ) -> Result<()> {
        let name = kind.entry_point();
        self.owned(function.owner(), name)?;
        let s = self.stream_raw(stream, name)?;
        let mut inline = [std::ptr::null_mut::<c_void>(); INLINE_ARGS];
        let mut heap: Vec<*mut c_void>;
        let params: &mut [*mut c_void] = if args.len() <= INLINE_ARGS {
            for (slot, a) in inline.iter_mut().zip(args) {
                *slot = a.as_ptr() as *mut c_void;
            }
            &mut inline[..args.len()]
        } else {
            heap = args.iter().map(|a| a.as_ptr() as *mut c_void).collect();
            &mut heap
        };
        let params_ptr = if params.is_empty() {
            std::ptr::null_mut()
        } else {
            params.as_mut_ptr()
        };
        let [gx, gy, gz] = config.grid;
        let [bx, by, bz] = config.block;
        let f = function.raw() as usize as sys::CUfunction;
        let shared = config.shared_bytes;
        // SAFETY: `function` and `s` are live handles of this backend; `params_ptr` is
        // null or points to `args.len()` pointers, each to the bytes of one argument,
        // which the driver only reads during the call (it copies the values); the caller
        // guarantees the arguments match the kernel's parameters and the contract for
        // what the kernel reaches.
        let r = unsafe {
            if kind == LaunchKind::Cooperative {
                (self.api().launch_cooperative_kernel)(
                    f, gx, gy, gz, bx, by, bz, shared, s, params_ptr,
                )
            } else {
                (self.api().launch_kernel)(
                    f,
                    gx,
                    gy,
                    gz,
                    bx,
                    by,
                    bz,
                    shared,
                    s,
                    params_ptr,
                    std::ptr::null_mut(),
                )
            }
        };
        self.check(
            r,
            || {
                format!(
                    "{name}(grid {:?}, block {:?}, {} shared bytes, {} args)",
                    config.grid,
                    config.block,
                    config.shared_bytes,
                    args.len()
                )
            },
            Some(stream.raw()),
        )
    }

    /// Loads the driver (`VMGPU_LIBCUDA`, else `libcuda.so.1`), initialises it, and
    /// finds its devices. Without a library, an entry point or a device this is an
    /// error, never a panic.
    pub fn new() -> Result<Self> {
        Self::with_options(&LoadOptions::default())
    }

    /// [`NativeBackend::new`] with explicit load options.
    pub fn with_options(options: &LoadOptions) -> Result<Self> {
        let driver = Driver::load(options)?;
        let (driver_version, count) = driver.init()?;
        let api = *driver.api();
        let mut devices = Vec::with_capacity(count as usize);
        for ordinal in 0..count {
            let mut dev: sys::CUdevice = 0;
            // SAFETY: `dev` is a valid, writable CUdevice; `ordinal` < the count the
            // driver reported.
            let r = unsafe { (api.device_get)(&mut dev, ordinal as c_int) };
            if r != sys::CUDA_SUCCESS {
                return Err(driver
                    .error(r, format!("cuDeviceGet({ordinal})"), Some(ordinal), None)
                    .into());
            }
            devices.push(dev);
        }
        log::info!(
            "CUDA driver {} (CUDA {}.{}) loaded from {}: {} device(s), entry points by {:?}",
            driver_version,
            driver_version / 1000,
            driver_version % 1000 / 10,
            driver.path(),
            devices.len(),
            driver.resolution()
        );
        Ok(Self {
            id: next_instance_id(),
            driver_version,
            retained: Mutex::new(vec![None; devices.len()]),
            created: Mutex::new(Vec::new()),
            devices,
            driver,
        })
    }

    /// The loaded driver (path, how entry points were resolved).
    pub fn driver(&self) -> &Driver {
        &self.driver
    }

    /// The raw entry points, for measuring the boundary against plain driver calls.
    pub fn raw_api(&self) -> &DriverApi {
        self.driver.api()
    }

    fn api(&self) -> &DriverApi {
        self.driver.api()
    }

    fn dev(&self, dev: Device, op: &'static str) -> Result<sys::CUdevice> {
        match self.devices.get(dev.ordinal() as usize) {
            Some(d) => Ok(*d),
            None => Err(self
                .driver
                .error(
                    sys::CUDA_ERROR_INVALID_DEVICE,
                    op.to_string(),
                    Some(dev.ordinal()),
                    None,
                )
                .into()),
        }
    }

    fn owned(&self, owner: u32, op: &'static str) -> Result<()> {
        vmgpu_cuda_api::check_owner(owner, self.id, op)
    }

    fn current_device(&self) -> Option<u32> {
        let (inst, dev) = CURRENT.with(|c| c.get());
        (inst == self.id).then_some(dev)
    }

    /// `Ok` for `CUDA_SUCCESS`, else the error with what was being done.
    #[inline]
    fn check(
        &self,
        r: sys::CUresult,
        op: impl FnOnce() -> String,
        stream: Option<u64>,
    ) -> Result<()> {
        if r == sys::CUDA_SUCCESS {
            Ok(())
        } else {
            Err(self.fail(r, op(), stream))
        }
    }

    #[cold]
    #[inline(never)]
    fn fail(&self, r: sys::CUresult, op: String, stream: Option<u64>) -> DriverError {
        self.driver
            .error(r, op, self.current_device(), stream)
            .into()
    }

    fn check_dev(&self, r: sys::CUresult, op: impl FnOnce() -> String, dev: Device) -> Result<()> {
        if r == sys::CUDA_SUCCESS {
            Ok(())
        } else {
            Err(self.driver.error(r, op(), Some(dev.ordinal()), None).into())
        }
    }

    /// [`Self::check_dev`] for the steps of a reset: a sticky error that the reset did
    /// not clear says so, with what to do (restart the process).
    fn check_reset(&self, r: sys::CUresult, op: &str, dev: Device) -> Result<()> {
        if r == sys::CUDA_SUCCESS {
            return Ok(());
        }
        let mut e = self
            .driver
            .error(r, op.to_string(), Some(dev.ordinal()), None);
        if is_sticky(r) {
            e.detail = Some(format!(
                "a sticky error ({}) survives cuDevicePrimaryCtxReset_v2 on the native driver: \
                 the process is left in an inconsistent state and every further CUDA call \
                 returns this error; restart the process to use CUDA again",
                e.name
            ));
        }
        Err(e.into())
    }

    fn stream_raw(&self, stream: &Stream, op: &'static str) -> Result<sys::CUstream> {
        self.owned(stream.owner(), op)?;
        Ok(stream.raw() as usize as sys::CUstream)
    }

    fn event_raw(&self, event: &Event, op: &'static str) -> Result<sys::CUevent> {
        self.owned(event.owner(), op)?;
        Ok(event.raw() as usize as sys::CUevent)
    }
}

impl Drop for NativeBackend {
    fn drop(&mut self) {
        let created = match self.created.get_mut() {
            Ok(v) => std::mem::take(v),
            Err(poisoned) => std::mem::take(poisoned.into_inner()),
        };
        for (ctx, ordinal) in created {
            // SAFETY: a context this backend created and did not destroy; its handles
            // are useless without this backend, which is going away.
            let r = unsafe { (self.api().ctx_destroy)(ctx as usize as sys::CUcontext) };
            if r != sys::CUDA_SUCCESS {
                log::warn!("destroying a context of device {ordinal}: {r}");
            }
        }
        let retained = match self.retained.get_mut() {
            Ok(v) => std::mem::take(v),
            Err(poisoned) => std::mem::take(poisoned.into_inner()),
        };
        for (ordinal, held) in retained.into_iter().enumerate() {
            let (Some(held), Some(dev)) = (held, self.devices.get(ordinal)) else {
                continue;
            };
            // The backend's own reference and every one its callers did not give back
            // (their `Context` handles are useless without this backend).
            for _ in 0..=held.user_refs {
                // SAFETY: each iteration gives back one reference taken through this
                // backend on the primary context of `dev` (from cuDeviceGet).
                let r = unsafe { (self.api().primary_ctx_release)(*dev) };
                if r != sys::CUDA_SUCCESS {
                    log::warn!("releasing the primary context of device {ordinal}: {r}");
                    break;
                }
            }
        }
    }
}

impl Backend for NativeBackend {
    fn kind(&self) -> BackendKind {
        BackendKind::Native
    }

    fn instance_id(&self) -> u32 {
        self.id
    }

    fn driver_version(&self) -> Result<i32> {
        Ok(self.driver_version)
    }

    fn device_count(&self) -> Result<u32> {
        Ok(self.devices.len() as u32)
    }

    fn device_name(&self, dev: Device) -> Result<String> {
        let d = self.dev(dev, "cuDeviceGetName")?;
        let mut buf = [0 as c_char; 256];
        // SAFETY: `buf` is writable for the length passed; the driver writes at most that
        // many bytes, NUL-terminated.
        let r = unsafe { (self.api().device_get_name)(buf.as_mut_ptr(), buf.len() as c_int, d) };
        self.check_dev(r, || "cuDeviceGetName".into(), dev)?;
        Ok(c_buf_to_string(&buf))
    }

    fn device_uuid(&self, dev: Device) -> Result<[u8; 16]> {
        let d = self.dev(dev, "cuDeviceGetUuid")?;
        let mut uuid = sys::CUuuid::default();
        // SAFETY: `uuid` is a valid, writable CUuuid.
        let r = unsafe { (self.api().device_get_uuid)(&mut uuid, d) };
        self.check_dev(r, || "cuDeviceGetUuid_v2".into(), dev)?;
        Ok(uuid.bytes.map(|b| b as u8))
    }

    fn device_pci_bus_id(&self, dev: Device) -> Result<String> {
        let d = self.dev(dev, "cuDeviceGetPCIBusId")?;
        let mut buf = [0 as c_char; 64];
        // SAFETY: `buf` is writable for the length passed; the driver writes at most that
        // many bytes, NUL-terminated.
        let r =
            unsafe { (self.api().device_get_pci_bus_id)(buf.as_mut_ptr(), buf.len() as c_int, d) };
        self.check_dev(r, || "cuDeviceGetPCIBusId".into(), dev)?;
        Ok(normalize_bus_id(&c_buf_to_string(&buf)))
    }

    fn device_attribute(&self, dev: Device, attr: DeviceAttribute) -> Result<i32> {
        let d = self.dev(dev, "cuDeviceGetAttribute")?;
        let mut v: c_int = 0;
        // SAFETY: `v` is a valid, writable c_int; an unknown attribute is an error return.
        let r = unsafe { (self.api().device_get_attribute)(&mut v, attr.code(), d) };
        self.check_dev(r, || format!("cuDeviceGetAttribute({attr:?})"), dev)?;
        Ok(v)
    }

    fn device_total_mem(&self, dev: Device) -> Result<u64> {
        let d = self.dev(dev, "cuDeviceTotalMem")?;
        let mut v: usize = 0;
        // SAFETY: `v` is a valid, writable size_t.
        let r = unsafe { (self.api().device_total_mem)(&mut v, d) };
        self.check_dev(r, || "cuDeviceTotalMem_v2".into(), dev)?;
        Ok(v as u64)
    }

    fn primary_context_retain(&self, dev: Device) -> Result<Context> {
        let d = self.dev(dev, "cuDevicePrimaryCtxRetain")?;
        let mut retained = self.retained.lock().unwrap_or_else(|e| e.into_inner());
        let slot = &mut retained[dev.ordinal() as usize];
        let mut ctx: sys::CUcontext = std::ptr::null_mut();
        if slot.is_none() {
            // The backend's own reference, released in Drop.
            // SAFETY: `ctx` is a valid, writable CUcontext slot; `d` came from cuDeviceGet.
            let r = unsafe { (self.api().primary_ctx_retain)(&mut ctx, d) };
            self.check_dev(r, || "cuDevicePrimaryCtxRetain".into(), dev)?;
            *slot = Some(Retained {
                ctx: ctx as usize as u64,
                user_refs: 0,
            });
        }
        // SAFETY: as above.
        let r = unsafe { (self.api().primary_ctx_retain)(&mut ctx, d) };
        self.check_dev(r, || "cuDevicePrimaryCtxRetain".into(), dev)?;
        let raw = ctx as usize as u64;
        match slot {
            Some(held) if held.ctx == raw => {
                held.user_refs += 1;
                Ok(Context::from_raw(self.id, raw))
            }
            _ => {
                // SAFETY: gives back the reference just taken, which is not handed out.
                unsafe { (self.api().primary_ctx_release)(d) };
                Err(DriverError::Unexpected {
                    operation: "cuDevicePrimaryCtxRetain",
                    reason: "the primary context changed while this backend held it".into(),
                })
            }
        }
    }

    fn primary_context_release(&self, ctx: Context) -> Result<()> {
        self.owned(ctx.owner(), "cuDevicePrimaryCtxRelease")?;
        let mut retained = self.retained.lock().unwrap_or_else(|e| e.into_inner());
        let found = retained
            .iter_mut()
            .enumerate()
            .find_map(|(i, r)| r.as_mut().filter(|r| r.ctx == ctx.raw()).map(|r| (i, r)));
        let Some((ordinal, held)) = found.filter(|(_, r)| r.user_refs > 0) else {
            return Err(DriverError::InvalidArgument {
                operation: "cuDevicePrimaryCtxRelease",
                reason: "no reference on this context is held through this backend (released \
                         more often than retained?)"
                    .into(),
            });
        };
        let dev = Device::new(ordinal as u32);
        let d = self.dev(dev, "cuDevicePrimaryCtxRelease")?;
        // SAFETY: one of the caller's references (counted in `user_refs`) is given back;
        // the backend's own reference keeps the context alive.
        let r = unsafe { (self.api().primary_ctx_release)(d) };
        self.check_dev(r, || "cuDevicePrimaryCtxRelease_v2".into(), dev)?;
        held.user_refs -= 1;
        Ok(())
    }

    unsafe fn primary_context_reset(&self, dev: Device) -> Result<()> {
        let d = self.dev(dev, "cuDevicePrimaryCtxReset_v2")?;
        // SAFETY: `d` came from cuDeviceGet; the caller guarantees that nothing made in
        // the context before the reset (pinned memory above all) is used afterwards.
        let r = unsafe { (self.api().primary_ctx_reset)(d) };
        self.check_reset(r, "cuDevicePrimaryCtxReset_v2", dev)?;
        // The references survive a reset; a retain re-initialises the context. Its handle
        // must be the one this backend (and its callers' `Context`s) hold. After a sticky
        // error the driver refuses this retain with that error (CUDA 13, H100): the reset
        // did not recover the process.
        let mut ctx: sys::CUcontext = std::ptr::null_mut();
        // SAFETY: `ctx` is a valid, writable slot; `d` came from cuDeviceGet.
        let r = unsafe { (self.api().primary_ctx_retain)(&mut ctx, d) };
        self.check_reset(
            r,
            "cuDevicePrimaryCtxReset_v2 (the retain that re-initialises the context)",
            dev,
        )?;
        // SAFETY: gives back the reference just taken.
        unsafe { (self.api().primary_ctx_release)(d) };
        let held = self
            .retained
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(dev.ordinal() as usize)
            .copied()
            .flatten()
            .map(|r| r.ctx);
        match held {
            Some(h) if h != ctx as usize as u64 => Err(DriverError::Unexpected {
                operation: "cuDevicePrimaryCtxReset_v2",
                reason: "the primary context has a new handle after the reset; retain it again"
                    .into(),
            }),
            _ => Ok(()),
        }
    }

    fn context_create(&self, dev: Device) -> Result<Context> {
        let d = self.dev(dev, "cuCtxCreate_v3")?;
        let mut ctx: sys::CUcontext = std::ptr::null_mut();
        // SAFETY: `ctx` is a valid, writable CUcontext slot; `d` came from cuDeviceGet;
        // no execution-affinity parameters (null, count 0), flags 0 (automatic
        // scheduling). The entry point was resolved for CUDA 12.0, which makes it
        // cuCtxCreate_v3, whose prototype `sys::cuCtxCreate` is.
        let r = unsafe { (self.api().ctx_create)(&mut ctx, std::ptr::null_mut(), 0, 0, d) };
        self.check_dev(r, || "cuCtxCreate_v3".into(), dev)?;
        let raw = ctx as usize as u64;
        self.created
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push((raw, dev.ordinal()));
        CURRENT.with(|c| c.set((self.id, dev.ordinal())));
        Ok(Context::from_raw(self.id, raw))
    }

    unsafe fn context_destroy(&self, ctx: Context) -> Result<()> {
        self.owned(ctx.owner(), "cuCtxDestroy_v2")?;
        let ordinal = {
            let mut created = self.created.lock().unwrap_or_else(|e| e.into_inner());
            let Some(i) = created.iter().position(|(c, _)| *c == ctx.raw()) else {
                return Err(DriverError::InvalidArgument {
                    operation: "cuCtxDestroy_v2",
                    reason: "not a context created by this backend (or destroyed already)".into(),
                });
            };
            created.swap_remove(i).1
        };
        // SAFETY: a context this backend created, destroyed once (removed from
        // `created` above); the caller guarantees nothing made in it is used afterwards.
        let r = unsafe { (self.api().ctx_destroy)(ctx.raw() as usize as sys::CUcontext) };
        if CURRENT.with(|c| c.get()) == (self.id, ordinal) {
            CURRENT.with(|c| c.set((0, 0)));
        }
        self.check_dev(r, || "cuCtxDestroy_v2".into(), Device::new(ordinal))
    }

    fn context_set_current(&self, ctx: &Context) -> Result<()> {
        self.owned(ctx.owner(), "cuCtxSetCurrent")?;
        // Fast path (the safe API binds before every call): already current on this
        // thread, as this backend last made it.
        if CURRENT.with(|c| c.get().0) == self.id {
            let mut cur: sys::CUcontext = std::ptr::null_mut();
            // SAFETY: `cur` is a valid, writable slot; cuCtxGetCurrent only reads the
            // calling thread's state.
            let r = unsafe { (self.api().ctx_get_current)(&mut cur) };
            if r == sys::CUDA_SUCCESS && !cur.is_null() && cur as usize as u64 == ctx.raw() {
                return Ok(());
            }
        }
        let ordinal = {
            let retained = self.retained.lock().unwrap_or_else(|e| e.into_inner());
            retained
                .iter()
                .position(|r| r.is_some_and(|r| r.ctx == ctx.raw()))
        };
        let ordinal = ordinal.map(|o| o as u32).or_else(|| {
            self.created
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .iter()
                .find(|(c, _)| *c == ctx.raw())
                .map(|(_, o)| *o)
        });
        let Some(ordinal) = ordinal else {
            return Err(DriverError::InvalidArgument {
                operation: "cuCtxSetCurrent",
                reason: "not a context of this backend".into(),
            });
        };
        // SAFETY: the context is a primary context this backend holds a reference on, so
        // it is alive.
        let r = unsafe { (self.api().ctx_set_current)(ctx.raw() as usize as sys::CUcontext) };
        self.check_dev(r, || "cuCtxSetCurrent".into(), Device::new(ordinal))?;
        CURRENT.with(|c| c.set((self.id, ordinal)));
        Ok(())
    }

    fn context_synchronize(&self) -> Result<()> {
        // SAFETY: no arguments; works on the calling thread's current context.
        let r = unsafe { (self.api().ctx_synchronize)() };
        self.check(r, || "cuCtxSynchronize".into(), None)
    }

    fn mem_get_info(&self) -> Result<MemInfo> {
        let (mut free, mut total) = (0usize, 0usize);
        // SAFETY: both are valid, writable size_t.
        let r = unsafe { (self.api().mem_get_info)(&mut free, &mut total) };
        self.check(r, || "cuMemGetInfo_v2".into(), None)?;
        Ok(MemInfo {
            free: free as u64,
            total: total as u64,
        })
    }

    fn module_load_ptx(&self, ptx: &str) -> Result<Module> {
        if ptx.starts_with(vmgpu_ptx::linked::MAGIC) {
            // A guest's cuLinkComplete image: NVIDIA's linker would take its units one
            // by one; not done yet (the simulator links it).
            return Err(self
                .driver
                .error(
                    sys::CUDA_ERROR_NOT_SUPPORTED,
                    "cuModuleLoadDataEx of a linked image (cuLink* of several PTX units): \
                     the native backend does not link PTX units yet"
                        .into(),
                    self.current_device(),
                    None,
                )
                .into());
        }
        let image = CString::new(ptx).map_err(|e| DriverError::InvalidArgument {
            operation: "cuModuleLoadDataEx",
            reason: format!("the PTX text holds a NUL byte at {}", e.nul_position()),
        })?;
        let mut error_log = vec![0u8; JIT_LOG_BYTES];
        let mut info_log = vec![0u8; JIT_LOG_BYTES];
        let mut options: [sys::CUjit_option; 5] = [
            sys::CU_JIT_ERROR_LOG_BUFFER,
            sys::CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES,
            sys::CU_JIT_INFO_LOG_BUFFER,
            sys::CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES,
            sys::CU_JIT_LOG_VERBOSE,
        ];
        // Option values are pointer-sized: buffers as pointers, sizes and flags as
        // integers cast to pointers (cuda.h, CUjit_option).
        let mut values: [*mut c_void; 5] = [
            error_log.as_mut_ptr().cast(),
            JIT_LOG_BYTES as *mut c_void,
            info_log.as_mut_ptr().cast(),
            JIT_LOG_BYTES as *mut c_void,
            std::ptr::without_provenance_mut(1), // CU_JIT_LOG_VERBOSE = 1
        ];
        let mut module: sys::CUmodule = std::ptr::null_mut();
        // SAFETY: `image` is NUL-terminated PTX alive for the call; `options` and
        // `values` hold 5 entries each; the log buffers are writable for the sizes given
        // and outlive the call; `module` is a valid, writable slot.
        let r = unsafe {
            (self.api().module_load_data_ex)(
                &mut module,
                image.as_ptr().cast(),
                options.len() as c_uint,
                options.as_mut_ptr(),
                values.as_mut_ptr(),
            )
        };
        if r != sys::CUDA_SUCCESS {
            let mut err: CudaError = self.driver.error(
                r,
                "cuModuleLoadDataEx (PTX JIT)".into(),
                self.current_device(),
                None,
            );
            let log = c_bytes_to_string(&error_log);
            let log = if log.trim().is_empty() {
                c_bytes_to_string(&info_log)
            } else {
                log
            };
            err.jit_log = Some(log);
            return Err(err.into());
        }
        let info = c_bytes_to_string(&info_log);
        if !info.trim().is_empty() {
            log::debug!("PTX JIT: {}", info.trim_end());
        }
        Ok(Module::from_raw(self.id, module as usize as u64))
    }

    unsafe fn module_unload(&self, module: Module) -> Result<()> {
        self.owned(module.owner(), "cuModuleUnload")?;
        // SAFETY: the module was loaded by this backend and is unloaded once (taken by
        // value); the caller guarantees none of its functions is used afterwards.
        let r = unsafe { (self.api().module_unload)(module.raw() as usize as sys::CUmodule) };
        self.check(r, || "cuModuleUnload".into(), None)
    }

    fn module_get_function(&self, module: &Module, name: &str) -> Result<Function> {
        self.owned(module.owner(), "cuModuleGetFunction")?;
        let cname = CString::new(name).map_err(|_| DriverError::InvalidArgument {
            operation: "cuModuleGetFunction",
            reason: format!("kernel name {name:?} holds a NUL byte"),
        })?;
        let mut f: sys::CUfunction = std::ptr::null_mut();
        // SAFETY: the module is loaded (a `Module` exists only until unloaded by value);
        // `cname` is NUL-terminated and alive for the call; `f` is a valid slot.
        let r = unsafe {
            (self.api().module_get_function)(
                &mut f,
                module.raw() as usize as sys::CUmodule,
                cname.as_ptr(),
            )
        };
        self.check(r, || format!("cuModuleGetFunction({name:?})"), None)?;
        Ok(Function::from_raw(self.id, f as usize as u64))
    }

    fn mem_alloc(&self, bytes: usize) -> Result<DevicePtr> {
        let mut p: sys::CUdeviceptr = 0;
        // SAFETY: `p` is a valid, writable CUdeviceptr.
        let r = unsafe { (self.api().mem_alloc)(&mut p, bytes) };
        self.check(r, || format!("cuMemAlloc_v2({bytes} bytes)"), None)?;
        Ok(DevicePtr(p))
    }

    fn mem_free(&self, ptr: DevicePtr) -> Result<()> {
        // SAFETY: cuMemFree takes the address by value and checks it against the live
        // allocations of the context; freeing device memory touches no host memory.
        let r = unsafe { (self.api().mem_free)(ptr.0) };
        self.check(r, || format!("cuMemFree_v2({:#x})", ptr.0), None)
    }

    unsafe fn memset_d8(&self, dst: DevicePtr, value: u8, bytes: usize) -> Result<()> {
        // SAFETY: the caller upholds the trait's contract for `dst..dst+bytes`.
        let r = unsafe { (self.api().memset_d8)(dst.0, value, bytes) };
        self.check(
            r,
            || format!("cuMemsetD8_v2({:#x}, {value}, {bytes})", dst.0),
            None,
        )
    }

    unsafe fn memset_d32(&self, dst: DevicePtr, value: u32, count: usize) -> Result<()> {
        // SAFETY: the caller upholds the trait's contract for `dst..dst+4*count`.
        let r = unsafe { (self.api().memset_d32)(dst.0, value, count) };
        self.check(
            r,
            || format!("cuMemsetD32_v2({:#x}, {value:#x}, {count})", dst.0),
            None,
        )
    }

    unsafe fn memset_d16(&self, dst: DevicePtr, value: u16, count: usize) -> Result<()> {
        // SAFETY: the caller upholds the trait's contract for `dst..dst+2*count`.
        let r = unsafe { (self.api().memset_d16)(dst.0, value, count) };
        self.check(
            r,
            || format!("cuMemsetD16_v2({:#x}, {value:#x}, {count})", dst.0),
            None,
        )
    }

    unsafe fn memset_d16_async(
        &self,
        dst: DevicePtr,
        value: u16,
        count: usize,
        stream: &Stream,
    ) -> Result<()> {
        let s = self.stream_raw(stream, "cuMemsetD16Async")?;
        // SAFETY: the caller upholds the trait's contract; `s` is a live stream of this
        // backend (destroyed only by value) or the default stream.
        let r = unsafe { (self.api().memset_d16_async)(dst.0, value, count, s) };
        self.check(
            r,
            || format!("cuMemsetD16Async({:#x}, {value:#x}, {count})", dst.0),
            Some(stream.raw()),
        )
    }

    unsafe fn memset_d32_async(
        &self,
        dst: DevicePtr,
        value: u32,
        count: usize,
        stream: &Stream,
    ) -> Result<()> {
        let s = self.stream_raw(stream, "cuMemsetD32Async")?;
        // SAFETY: the caller upholds the trait's contract; `s` is a live stream of this
        // backend (destroyed only by value) or the default stream.
        let r = unsafe { (self.api().memset_d32_async)(dst.0, value, count, s) };
        self.check(
            r,
            || format!("cuMemsetD32Async({:#x}, {value:#x}, {count})", dst.0),
            Some(stream.raw()),
        )
    }

    unsafe fn memset_d8_async(
        &self,
        dst: DevicePtr,
        value: u8,
        bytes: usize,
        stream: &Stream,
    ) -> Result<()> {
        let s = self.stream_raw(stream, "cuMemsetD8Async")?;
        // SAFETY: the caller upholds the trait's contract; `s` is a live stream of this
        // backend (destroyed only by value) or the default stream.
        let r = unsafe { (self.api().memset_d8_async)(dst.0, value, bytes, s) };
        self.check(
            r,
            || format!("cuMemsetD8Async({:#x}, {value}, {bytes})", dst.0),
            Some(stream.raw()),
        )
    }

    unsafe fn memcpy_htod(&self, dst: DevicePtr, src: &[u8]) -> Result<()> {
        // SAFETY: `src` is readable for its length for the whole (synchronous) call; the
        // caller upholds the contract for the device range.
        let r = unsafe { (self.api().memcpy_htod)(dst.0, src.as_ptr().cast(), src.len()) };
        self.check(
            r,
            || format!("cuMemcpyHtoD_v2({:#x}, {} bytes)", dst.0, src.len()),
            None,
        )
    }

    unsafe fn memcpy_dtoh(&self, dst: &mut [u8], src: DevicePtr) -> Result<()> {
        // SAFETY: `dst` is writable and exclusively borrowed for its length for the whole
        // (synchronous) call; the caller upholds the contract for the device range.
        let r = unsafe { (self.api().memcpy_dtoh)(dst.as_mut_ptr().cast(), src.0, dst.len()) };
        self.check(
            r,
            || format!("cuMemcpyDtoH_v2({:#x}, {} bytes)", src.0, dst.len()),
            None,
        )
    }

    unsafe fn memcpy_dtod(&self, dst: DevicePtr, src: DevicePtr, bytes: usize) -> Result<()> {
        // SAFETY: the caller upholds the trait's contract for both device ranges.
        let r = unsafe { (self.api().memcpy_dtod)(dst.0, src.0, bytes) };
        self.check(
            r,
            || {
                format!(
                    "cuMemcpyDtoD_v2({:#x} <- {:#x}, {bytes} bytes)",
                    dst.0, src.0
                )
            },
            None,
        )
    }

    unsafe fn memcpy_htod_async(
        &self,
        dst: DevicePtr,
        src: *const u8,
        bytes: usize,
        stream: &Stream,
    ) -> Result<()> {
        let s = self.stream_raw(stream, "cuMemcpyHtoDAsync")?;
        // SAFETY: the caller guarantees `src..src+bytes` stays readable until the stream
        // passes the copy, and the contract for the device range; `s` is live.
        let r = unsafe { (self.api().memcpy_htod_async)(dst.0, src.cast(), bytes, s) };
        self.check(
            r,
            || format!("cuMemcpyHtoDAsync_v2({:#x}, {bytes} bytes)", dst.0),
            Some(stream.raw()),
        )
    }

    unsafe fn memcpy_dtoh_async(
        &self,
        dst: *mut u8,
        src: DevicePtr,
        bytes: usize,
        stream: &Stream,
    ) -> Result<()> {
        let s = self.stream_raw(stream, "cuMemcpyDtoHAsync")?;
        // SAFETY: the caller guarantees `dst..dst+bytes` stays writable and unaliased
        // until the stream passes the copy, and the contract for the device range.
        let r = unsafe { (self.api().memcpy_dtoh_async)(dst.cast(), src.0, bytes, s) };
        self.check(
            r,
            || format!("cuMemcpyDtoHAsync_v2({:#x}, {bytes} bytes)", src.0),
            Some(stream.raw()),
        )
    }

    unsafe fn memcpy_dtod_async(
        &self,
        dst: DevicePtr,
        src: DevicePtr,
        bytes: usize,
        stream: &Stream,
    ) -> Result<()> {
        let s = self.stream_raw(stream, "cuMemcpyDtoDAsync")?;
        // SAFETY: the caller upholds the trait's contract for both device ranges; `s` is
        // a live stream of this backend or the default stream.
        let r = unsafe { (self.api().memcpy_dtod_async)(dst.0, src.0, bytes, s) };
        self.check(
            r,
            || {
                format!(
                    "cuMemcpyDtoDAsync_v2({:#x} <- {:#x}, {bytes} bytes)",
                    dst.0, src.0
                )
            },
            Some(stream.raw()),
        )
    }

    fn host_alloc(&self, bytes: usize, flags: HostAllocFlags) -> Result<HostAlloc> {
        let mut p: *mut c_void = std::ptr::null_mut();
        // SAFETY: `p` is a valid, writable pointer slot.
        let r = unsafe { (self.api().mem_host_alloc)(&mut p, bytes, flags.bits()) };
        self.check(
            r,
            || format!("cuMemHostAlloc({bytes} bytes, {flags:?})"),
            None,
        )?;
        Ok(HostAlloc::from_raw(self.id, p as usize, bytes))
    }

    unsafe fn host_free(&self, mem: HostAlloc) -> Result<()> {
        self.owned(mem.owner(), "cuMemFreeHost")?;
        // SAFETY: `mem` came from cuMemHostAlloc of this backend and is freed once (taken
        // by value); the caller guarantees nothing uses it any more.
        let r = unsafe { (self.api().mem_free_host)(mem.as_ptr().cast()) };
        self.check(r, || "cuMemFreeHost".into(), None)
    }

    unsafe fn host_register(
        &self,
        ptr: *mut u8,
        bytes: usize,
        flags: HostRegisterFlags,
    ) -> Result<()> {
        // SAFETY: the caller guarantees the range is mapped host memory of this process
        // until it is unregistered.
        let r = unsafe { (self.api().mem_host_register)(ptr.cast(), bytes, flags.bits()) };
        self.check(
            r,
            || format!("cuMemHostRegister_v2({ptr:p}, {bytes} bytes, {flags:?})"),
            None,
        )
    }

    unsafe fn host_unregister(&self, ptr: *mut u8) -> Result<()> {
        // SAFETY: the driver looks `ptr` up among its registrations (an unknown one is an
        // error); the caller guarantees no pending operation uses the range.
        let r = unsafe { (self.api().mem_host_unregister)(ptr.cast()) };
        self.check(r, || format!("cuMemHostUnregister({ptr:p})"), None)
    }

    fn stream_create(&self, flags: StreamFlags) -> Result<Stream> {
        let mut s: sys::CUstream = std::ptr::null_mut();
        let bits = if flags.non_blocking {
            sys::CU_STREAM_NON_BLOCKING
        } else {
            sys::CU_STREAM_DEFAULT
        };
        // SAFETY: `s` is a valid, writable CUstream slot.
        let r = unsafe { (self.api().stream_create)(&mut s, bits) };
        self.check(r, || format!("cuStreamCreate({flags:?})"), None)?;
        Ok(Stream::from_raw(self.id, s as usize as u64))
    }

    fn stream_synchronize(&self, stream: &Stream) -> Result<()> {
        let s = self.stream_raw(stream, "cuStreamSynchronize")?;
        // SAFETY: `s` is a live stream of this backend (destroyed only by value) or the
        // default stream.
        let r = unsafe { (self.api().stream_synchronize)(s) };
        self.check(r, || "cuStreamSynchronize".into(), Some(stream.raw()))
    }

    fn stream_query(&self, stream: &Stream) -> Result<bool> {
        let s = self.stream_raw(stream, "cuStreamQuery")?;
        // SAFETY: as for stream_synchronize.
        let r = unsafe { (self.api().stream_query)(s) };
        if r == sys::CUDA_ERROR_NOT_READY {
            return Ok(false);
        }
        self.check(r, || "cuStreamQuery".into(), Some(stream.raw()))?;
        Ok(true)
    }

    fn stream_wait_event(&self, stream: &Stream, event: &Event) -> Result<()> {
        let s = self.stream_raw(stream, "cuStreamWaitEvent")?;
        let e = self.event_raw(event, "cuStreamWaitEvent")?;
        // SAFETY: both handles are live handles of this backend (or the default stream).
        let r = unsafe { (self.api().stream_wait_event)(s, e, 0) };
        self.check(r, || "cuStreamWaitEvent".into(), Some(stream.raw()))
    }

    fn stream_destroy(&self, stream: Stream) -> Result<()> {
        let s = self.stream_raw(&stream, "cuStreamDestroy")?;
        if s.is_null() {
            return Err(DriverError::InvalidArgument {
                operation: "cuStreamDestroy",
                reason: "the default stream cannot be destroyed".into(),
            });
        }
        // SAFETY: `s` is a live stream of this backend, destroyed once (taken by value).
        let r = unsafe { (self.api().stream_destroy)(s) };
        self.check(r, || "cuStreamDestroy_v2".into(), Some(stream.raw()))
    }

    fn event_create(&self, flags: EventFlags) -> Result<Event> {
        let mut e: sys::CUevent = std::ptr::null_mut();
        let bits = (if flags.blocking_sync {
            sys::CU_EVENT_BLOCKING_SYNC
        } else {
            0
        }) | (if flags.disable_timing {
            sys::CU_EVENT_DISABLE_TIMING
        } else {
            0
        });
        // SAFETY: `e` is a valid, writable CUevent slot.
        let r = unsafe { (self.api().event_create)(&mut e, bits) };
        self.check(r, || format!("cuEventCreate({flags:?})"), None)?;
        Ok(Event::from_raw(self.id, e as usize as u64))
    }

    fn event_record(&self, event: &Event, stream: &Stream) -> Result<()> {
        let e = self.event_raw(event, "cuEventRecord")?;
        let s = self.stream_raw(stream, "cuEventRecord")?;
        // SAFETY: both are live handles of this backend (or the default stream).
        let r = unsafe { (self.api().event_record)(e, s) };
        self.check(r, || "cuEventRecord".into(), Some(stream.raw()))
    }

    fn event_synchronize(&self, event: &Event) -> Result<()> {
        let e = self.event_raw(event, "cuEventSynchronize")?;
        // SAFETY: `e` is a live event of this backend (destroyed only by value).
        let r = unsafe { (self.api().event_synchronize)(e) };
        self.check(r, || "cuEventSynchronize".into(), None)
    }

    fn event_query(&self, event: &Event) -> Result<bool> {
        let e = self.event_raw(event, "cuEventQuery")?;
        // SAFETY: as for event_synchronize.
        let r = unsafe { (self.api().event_query)(e) };
        if r == sys::CUDA_ERROR_NOT_READY {
            return Ok(false);
        }
        self.check(r, || "cuEventQuery".into(), None)?;
        Ok(true)
    }

    fn event_elapsed_ms(&self, start: &Event, end: &Event) -> Result<f32> {
        let a = self.event_raw(start, "cuEventElapsedTime")?;
        let b = self.event_raw(end, "cuEventElapsedTime")?;
        let mut ms = 0f32;
        // SAFETY: both events are live handles of this backend; `ms` is a valid f32 slot.
        let r = unsafe { (self.api().event_elapsed_time)(&mut ms, a, b) };
        self.check(r, || "cuEventElapsedTime".into(), None)?;
        Ok(ms)
    }

    fn event_destroy(&self, event: Event) -> Result<()> {
        let e = self.event_raw(&event, "cuEventDestroy")?;
        // SAFETY: `e` is a live event of this backend, destroyed once (taken by value).
        let r = unsafe { (self.api().event_destroy)(e) };
        self.check(r, || "cuEventDestroy_v2".into(), None)
    }

    fn function_attribute(&self, function: &Function, attribute: FunctionAttribute) -> Result<i32> {
        self.owned(function.owner(), "cuFuncGetAttribute")?;
        let mut value: c_int = 0;
        // SAFETY: the function is a live handle of this backend (a `Function` exists only
        // while its module is loaded, per `module_unload`'s contract); `value` is a
        // writable int for the call.
        let r = unsafe {
            (self.api().func_get_attribute)(
                &mut value,
                attribute.code(),
                function.raw() as usize as sys::CUfunction,
            )
        };
        self.check(r, || format!("cuFuncGetAttribute({attribute:?})"), None)?;
        Ok(value)
    }

    fn function_set_attribute(
        &self,
        function: &Function,
        attribute: FunctionAttribute,
        value: i32,
    ) -> Result<()> {
        self.owned(function.owner(), "cuFuncSetAttribute")?;
        // SAFETY: as in `function_attribute`; the attribute and value are passed by value.
        let r = unsafe {
            (self.api().func_set_attribute)(
                function.raw() as usize as sys::CUfunction,
                attribute.code(),
                value,
            )
        };
        self.check(
            r,
            || format!("cuFuncSetAttribute({attribute:?}, {value})"),
            None,
        )
    }

    fn module_get_global(&self, module: &Module, name: &str) -> Result<(DevicePtr, usize)> {
        self.owned(module.owner(), "cuModuleGetGlobal_v2")?;
        let c_name = CString::new(name).map_err(|_| DriverError::InvalidArgument {
            operation: "cuModuleGetGlobal_v2",
            reason: format!("the name {name:?} contains a NUL byte"),
        })?;
        let (mut ptr, mut bytes): (sys::CUdeviceptr, usize) = (0, 0);
        // SAFETY: the module is a live handle of this backend (until `module_unload`,
        // which takes it by value); the name is a NUL-terminated string alive for the
        // call; both outputs are writable.
        let r = unsafe {
            (self.api().module_get_global)(
                &mut ptr,
                &mut bytes,
                module.raw() as usize as sys::CUmodule,
                c_name.as_ptr(),
            )
        };
        self.check(r, || format!("cuModuleGetGlobal_v2({name:?})"), None)?;
        Ok((DevicePtr(ptr), bytes))
    }

    unsafe fn launch_kind(
        &self,
        kind: LaunchKind,
        function: &Function,
        config: &LaunchConfig,
        stream: &Stream,
        args: &[&[u8]],
    ) -> Result<()> {
        // SAFETY: the caller's contract, passed on.
        unsafe { self.launch_grid(function, config, stream, args, kind) }
    }
}

fn c_buf_to_string(buf: &[c_char]) -> String {
    let bytes: Vec<u8> = buf
        .iter()
        .take_while(|&&c| c != 0)
        .map(|&c| c as u8)
        .collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

fn c_bytes_to_string(buf: &[u8]) -> String {
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    String::from_utf8_lossy(&buf[..end]).into_owned()
}

/// `0000:1B:00.0` or `00000000:1b:00.0` as `0000:1b:00.0`.
fn normalize_bus_id(s: &str) -> String {
    let lower = s.trim().to_ascii_lowercase();
    match lower.split_once(':') {
        Some((domain, rest))
            if domain.len() > 4 && domain[..domain.len() - 4].bytes().all(|b| b == b'0') =>
        {
            format!("{}:{rest}", &domain[domain.len() - 4..])
        }
        _ => lower,
    }
}

#[cfg(test)]
mod tests {
    use super::normalize_bus_id;

    #[test]
    fn bus_ids_are_normalised() {
        assert_eq!(normalize_bus_id("0000:1B:00.0"), "0000:1b:00.0");
        assert_eq!(normalize_bus_id("00000000:1B:00.0"), "0000:1b:00.0");
        assert_eq!(normalize_bus_id("00010000:1B:00.0"), "00010000:1b:00.0");
    }
}
