//! In-process mode: the CUDA driver API on the PTX simulator ([`SimBackend`]), through
//! the `vmgpu_cuda_api::Backend` trait.
//!
//! The device's primary context is one simulator instance; every `cuCtxCreate` context
//! is a simulator instance of its own (its own address space, modules, streams and
//! events). Handles of modules, functions, streams and events carry their context's
//! number in their upper bits, so a call finds the object's context from the handle.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use vmgpu_cuda_api::{
    Backend, Context, Device, DeviceAttribute, DevicePtr, Event, EventFlags, Function, HostAlloc,
    HostAllocFlags, HostRegisterFlags, LaunchConfig, Module, Stream, StreamFlags,
};
use vmgpu_cuda_sim::{SimBackend, SimConfig};

use crate::engine::{lock, Engine, Fail, Geometry, Layout, R, STREAM_PER_THREAD};
use crate::ffi::*;

/// The handle of device 0's primary context.
const PRIMARY_CTX: u64 = 1;
/// Bits of a handle below its context number.
const CTX_SHIFT: u32 = 40;
/// Handle kinds, in bits 32..40.
const TAG_MODULE: u64 = 0x10;
const TAG_FUNCTION: u64 = 0x20;
const TAG_STREAM: u64 = 0x30;
const TAG_EVENT: u64 = 0x40;

#[derive(Debug)]
struct LocalModule {
    module: Module,
    /// Each kernel's parameter layout, from the PTX.
    kernels: HashMap<String, Vec<(u32, u32)>>,
    /// The module's `.global` variable names.
    globals: Vec<String>,
}

#[derive(Debug)]
struct LocalFunction {
    function: Function,
    module: u64,
    layout: Vec<(u32, u32)>,
}

#[derive(Debug, Default)]
struct Tables {
    modules: HashMap<u64, LocalModule>,
    functions: HashMap<u64, Arc<LocalFunction>>,
    streams: HashMap<u64, Arc<Stream>>,
    events: HashMap<u64, Arc<Event>>,
    /// Pattern buffers of queued 16/32-bit memsets, kept until their stream is
    /// synchronised: (stream, bytes).
    keepalive: Vec<(u64, Box<[u8]>)>,
}

#[derive(Debug)]
struct LocalCtx {
    id: u64,
    backend: Arc<SimBackend>,
    ctx: Context,
    tables: Mutex<Tables>,
}

impl LocalCtx {
    /// Makes the simulator's context current on this thread.
    fn bind(&self) -> R<()> {
        self.backend.context_set_current(&self.ctx)?;
        Ok(())
    }
}

#[derive(Debug, Default)]
struct Primary {
    refs: u64,
    flags: u32,
}

/// The in-process engine.
#[derive(Debug)]
pub struct Local {
    primary: Arc<LocalCtx>,
    primary_state: Mutex<Primary>,
    created: Mutex<HashMap<u64, Arc<LocalCtx>>>,
    /// Pinned host allocations, by address, with their context.
    host: Mutex<HashMap<usize, (Arc<LocalCtx>, HostAlloc)>>,
    next_ctx: AtomicU64,
    next_handle: AtomicU64,
    config: SimConfig,
}

fn new_ctx(id: u64, config: &SimConfig) -> R<LocalCtx> {
    let backend = Arc::new(SimBackend::new(config.clone())?);
    let ctx = backend.primary_context_retain(Device::new(0))?;
    Ok(LocalCtx {
        id,
        backend,
        ctx,
        tables: Mutex::new(Tables::default()),
    })
}

/// The simulator's settings from the environment: `VMGPU_SIM_THREADS` (threads per
/// launch) and `VMGPU_SIM_MEMORY` (device memory in bytes).
fn config_from_env() -> SimConfig {
    let mut config = SimConfig::default();
    if let Some(t) = std::env::var("VMGPU_SIM_THREADS")
        .ok()
        .and_then(|v| v.parse::<usize>().ok())
    {
        config.threads = t.max(1);
    }
    if let Some(m) = std::env::var("VMGPU_SIM_MEMORY")
        .ok()
        .and_then(|v| v.parse::<u64>().ok())
    {
        config.memory_limit = m;
    }
    config
}

fn layout_of(f: &vmgpu_ptx::Function) -> Vec<(u32, u32)> {
    f.params.iter().map(|p| (p.offset, p.size)).collect()
}

impl Local {
    /// Starts the simulator (device 0 and its primary context).
    pub fn new() -> R<Local> {
        let config = config_from_env();
        Ok(Local {
            primary: Arc::new(new_ctx(PRIMARY_CTX, &config)?),
            primary_state: Mutex::new(Primary::default()),
            created: Mutex::new(HashMap::new()),
            host: Mutex::new(HashMap::new()),
            next_ctx: AtomicU64::new(2),
            next_handle: AtomicU64::new(1),
            config,
        })
    }

    fn device(&self, dev: u32) -> R<Device> {
        if dev == 0 {
            Ok(Device::new(0))
        } else {
            Err(Fail::new(
                CUDA_ERROR_INVALID_DEVICE,
                format!("device {dev}: the simulator has one device"),
            ))
        }
    }

    fn ctx(&self, id: u64) -> R<Arc<LocalCtx>> {
        if id == PRIMARY_CTX {
            return Ok(self.primary.clone());
        }
        lock(&self.created)
            .get(&id)
            .cloned()
            .ok_or_else(|| Fail::new(CUDA_ERROR_INVALID_CONTEXT, format!("context {id:#x}")))
    }

    /// The context (bound on this thread) that made `handle`, a handle of kind `tag`.
    fn owner(&self, handle: u64, tag: u64) -> R<Arc<LocalCtx>> {
        if (handle >> 32) & 0xff != tag {
            return Err(Fail::new(
                CUDA_ERROR_INVALID_HANDLE,
                format!("{handle:#x} is not a handle of this kind"),
            ));
        }
        let c = self
            .ctx(handle >> CTX_SHIFT)
            .map_err(|_| Fail::new(CUDA_ERROR_INVALID_HANDLE, format!("{handle:#x}")))?;
        c.bind()?;
        Ok(c)
    }

    fn bound(&self, ctx: u64) -> R<Arc<LocalCtx>> {
        let c = self.ctx(ctx)?;
        c.bind()?;
        Ok(c)
    }

    fn handle(&self, ctx: u64, tag: u64) -> u64 {
        let n = self.next_handle.fetch_add(1, Ordering::Relaxed) & 0xffff_ffff;
        (ctx << CTX_SHIFT) | (tag << 32) | n.max(1)
    }

    /// The stream `stream` names in `c` (the default stream for 0, 1 and 2).
    fn stream(&self, c: &LocalCtx, stream: u64) -> R<Arc<Stream>> {
        if stream <= STREAM_PER_THREAD {
            return Ok(Arc::new(Stream::DEFAULT));
        }
        lock(&c.tables)
            .streams
            .get(&stream)
            .cloned()
            .ok_or_else(|| Fail::new(CUDA_ERROR_INVALID_HANDLE, format!("stream {stream:#x}")))
    }

    fn event(&self, c: &LocalCtx, event: u64) -> R<Arc<Event>> {
        lock(&c.tables)
            .events
            .get(&event)
            .cloned()
            .ok_or_else(|| Fail::new(CUDA_ERROR_INVALID_HANDLE, format!("event {event:#x}")))
    }

    /// Forgets every object of `c` (after a reset or before a destroy).
    fn clear(c: &LocalCtx) {
        let mut t = lock(&c.tables);
        *t = Tables::default();
    }
}

/// `Arc::try_unwrap` with a short wait for other threads' calls to finish with it.
fn unwrap_arc<T>(mut a: Arc<T>) -> Option<T> {
    for _ in 0..1000 {
        match Arc::try_unwrap(a) {
            Ok(v) => return Some(v),
            Err(back) => {
                a = back;
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
        }
    }
    None
}

fn pattern(value: u32, width: u32, count: u64) -> R<Vec<u8>> {
    let bytes = count
        .checked_mul(width as u64)
        .filter(|b| *b <= isize::MAX as u64)
        .ok_or_else(|| Fail::new(CUDA_ERROR_INVALID_VALUE, "memset size overflows"))?;
    let elem = value.to_le_bytes();
    let mut v = Vec::with_capacity(bytes as usize);
    for _ in 0..count {
        v.extend_from_slice(&elem[..width as usize]);
    }
    Ok(v)
}

impl Engine for Local {
    fn describe(&self) -> String {
        format!(
            "in-process PTX simulator ({} thread(s) per launch, {} bytes of device memory)",
            self.config.threads, self.config.memory_limit
        )
    }

    fn init(&self, _flags: u32) -> R<()> {
        Ok(())
    }

    fn driver_version(&self) -> R<i32> {
        Ok(self.primary.backend.driver_version()?)
    }

    fn device_count(&self) -> R<u32> {
        Ok(self.primary.backend.device_count()?)
    }

    fn device_name(&self, dev: u32) -> R<String> {
        Ok(self.primary.backend.device_name(self.device(dev)?)?)
    }

    fn device_uuid(&self, dev: u32) -> R<[u8; 16]> {
        Ok(self.primary.backend.device_uuid(self.device(dev)?)?)
    }

    fn device_pci_bus_id(&self, dev: u32) -> R<String> {
        Ok(self.primary.backend.device_pci_bus_id(self.device(dev)?)?)
    }

    fn device_attribute(&self, dev: u32, attr: i32) -> R<i32> {
        Ok(self
            .primary
            .backend
            .device_attribute(self.device(dev)?, DeviceAttribute::Raw(attr))?)
    }

    fn device_total_mem(&self, dev: u32) -> R<u64> {
        Ok(self.primary.backend.device_total_mem(self.device(dev)?)?)
    }

    fn primary_retain(&self, dev: u32) -> R<u64> {
        self.device(dev)?;
        lock(&self.primary_state).refs += 1;
        Ok(PRIMARY_CTX)
    }

    fn primary_release(&self, dev: u32) -> R<()> {
        self.device(dev)?;
        let mut st = lock(&self.primary_state);
        if st.refs == 0 {
            return Err(Fail::new(
                CUDA_ERROR_INVALID_CONTEXT,
                "the primary context is not retained",
            ));
        }
        st.refs -= 1;
        if st.refs == 0 {
            // As in CUDA, the last release destroys the primary context's objects; the
            // next retain starts afresh (and clears a sticky error).
            drop(st);
            self.primary_reset(dev)?;
        }
        Ok(())
    }

    fn primary_reset(&self, dev: u32) -> R<()> {
        let d = self.device(dev)?;
        // SAFETY: the program asked for the reset; as with the driver, every handle and
        // device address of the context is invalid afterwards, and the shim forgets its
        // own (the tables are cleared) so none reaches the simulator again.
        unsafe { self.primary.backend.primary_context_reset(d) }?;
        Local::clear(&self.primary);
        Ok(())
    }

    fn primary_state(&self, dev: u32) -> R<(u32, bool)> {
        self.device(dev)?;
        let st = lock(&self.primary_state);
        Ok((st.flags, st.refs > 0))
    }

    fn primary_set_flags(&self, dev: u32, flags: u32) -> R<()> {
        self.device(dev)?;
        lock(&self.primary_state).flags = flags;
        Ok(())
    }

    fn ctx_create(&self, dev: u32, _flags: u32) -> R<u64> {
        self.device(dev)?;
        let id = self.next_ctx.fetch_add(1, Ordering::Relaxed);
        if id >= 1 << (64 - CTX_SHIFT) {
            return Err(Fail::new(CUDA_ERROR_OUT_OF_MEMORY, "too many contexts"));
        }
        let c = Arc::new(new_ctx(id, &self.config)?);
        lock(&self.created).insert(id, c);
        Ok(id)
    }

    fn ctx_destroy(&self, ctx: u64) -> R<()> {
        if ctx == PRIMARY_CTX {
            return Err(Fail::new(
                CUDA_ERROR_INVALID_CONTEXT,
                "the primary context is released, not destroyed",
            ));
        }
        let c = lock(&self.created)
            .remove(&ctx)
            .ok_or_else(|| Fail::new(CUDA_ERROR_INVALID_CONTEXT, format!("context {ctx:#x}")))?;
        Local::clear(&c);
        lock(&self.host).retain(|_, (owner, _)| owner.id != ctx);
        Ok(())
    }

    fn ctx_device(&self, ctx: u64) -> R<u32> {
        self.ctx(ctx).map(|_| 0)
    }

    fn ctx_synchronize(&self, ctx: u64) -> R<()> {
        let c = self.bound(ctx)?;
        let r = c.backend.context_synchronize();
        lock(&c.tables).keepalive.clear();
        Ok(r?)
    }

    fn mem_get_info(&self, ctx: u64) -> R<(u64, u64)> {
        let c = self.bound(ctx)?;
        let i = c.backend.mem_get_info()?;
        Ok((i.free, i.total))
    }

    fn module_load(&self, ctx: u64, image: &[u8]) -> R<u64> {
        let c = self.bound(ctx)?;
        if image.starts_with(b"\x7fELF") || image.starts_with(&[0x50, 0xed, 0x55, 0xba]) {
            return Err(Fail::new(
                CUDA_ERROR_NO_BINARY_FOR_GPU,
                "a cubin or fatbin image: the simulator runs PTX only",
            ));
        }
        let text = std::str::from_utf8(image).map_err(|e| Fail {
            code: CUDA_ERROR_INVALID_IMAGE,
            detail: format!("the image is neither PTX text nor a known binary: {e}"),
            jit_log: Some(format!("ptx: the image is not UTF-8 text: {e}\n")),
        })?;
        let module = c.backend.module_load_ptx(text)?;
        let parsed = vmgpu_ptx::parse("module.ptx", text).ok();
        let (kernels, globals) = match &parsed {
            Some(m) => (
                m.entries()
                    .map(|f| (f.name.clone(), layout_of(f)))
                    .collect(),
                m.variables.iter().map(|v| v.name.clone()).collect(),
            ),
            None => (HashMap::new(), Vec::new()),
        };
        let h = self.handle(ctx, TAG_MODULE);
        lock(&c.tables).modules.insert(
            h,
            LocalModule {
                module,
                kernels,
                globals,
            },
        );
        Ok(h)
    }

    fn module_unload(&self, _ctx: u64, module: u64) -> R<()> {
        let c = self.owner(module, TAG_MODULE)?;
        let m = {
            let mut t = lock(&c.tables);
            let m = t.modules.remove(&module).ok_or_else(|| {
                Fail::new(CUDA_ERROR_INVALID_HANDLE, format!("module {module:#x}"))
            })?;
            t.functions.retain(|_, f| f.module != module);
            m
        };
        // SAFETY: the module's functions are gone from the tables, so the program's
        // later launches of them are refused; launches already queued hold the
        // simulator's module alive (it is reference counted inside the simulator).
        unsafe { c.backend.module_unload(m.module) }?;
        Ok(())
    }

    fn module_get_function(&self, _ctx: u64, module: u64, name: &str) -> R<u64> {
        let c = self.owner(module, TAG_MODULE)?;
        let (function, layout) = {
            let t = lock(&c.tables);
            let m = t.modules.get(&module).ok_or_else(|| {
                Fail::new(CUDA_ERROR_INVALID_HANDLE, format!("module {module:#x}"))
            })?;
            let f = c.backend.module_get_function(&m.module, name)?;
            (f, m.kernels.get(name).cloned().unwrap_or_default())
        };
        let h = self.handle(c.id, TAG_FUNCTION);
        lock(&c.tables).functions.insert(
            h,
            Arc::new(LocalFunction {
                function,
                module,
                layout,
            }),
        );
        Ok(h)
    }

    fn module_get_global(&self, _ctx: u64, module: u64, name: &str) -> R<(u64, u64)> {
        let c = self.owner(module, TAG_MODULE)?;
        let t = lock(&c.tables);
        let m = t
            .modules
            .get(&module)
            .ok_or_else(|| Fail::new(CUDA_ERROR_INVALID_HANDLE, format!("module {module:#x}")))?;
        if m.globals.iter().any(|g| g == name) {
            Err(Fail::new(
                CUDA_ERROR_NOT_SUPPORTED,
                format!("cuModuleGetGlobal({name:?}): the simulator backend does not expose module variables"),
            ))
        } else {
            Err(Fail::new(
                CUDA_ERROR_NOT_FOUND,
                format!("the module has no variable {name:?}"),
            ))
        }
    }

    fn function_layout(&self, function: u64) -> R<Layout> {
        let c = self.owner(function, TAG_FUNCTION)?;
        let t = lock(&c.tables);
        let f = t.functions.get(&function).ok_or_else(|| {
            Fail::new(CUDA_ERROR_INVALID_HANDLE, format!("function {function:#x}"))
        })?;
        Ok(Some(f.layout.clone()))
    }

    fn function_set_max_dynamic_shared(&self, _ctx: u64, function: u64, bytes: u32) -> R<()> {
        let c = self.owner(function, TAG_FUNCTION)?;
        let f = lock(&c.tables)
            .functions
            .get(&function)
            .cloned()
            .ok_or_else(|| {
                Fail::new(CUDA_ERROR_INVALID_HANDLE, format!("function {function:#x}"))
            })?;
        c.backend
            .function_set_max_dynamic_shared(&f.function, bytes)?;
        Ok(())
    }

    fn launch(
        &self,
        _ctx: u64,
        function: u64,
        geometry: Geometry,
        stream: u64,
        args: &[&[u8]],
    ) -> R<()> {
        let c = self.owner(function, TAG_FUNCTION)?;
        let f = lock(&c.tables)
            .functions
            .get(&function)
            .cloned()
            .ok_or_else(|| {
                Fail::new(CUDA_ERROR_INVALID_HANDLE, format!("function {function:#x}"))
            })?;
        let s = self.stream(&c, stream)?;
        let config = LaunchConfig {
            grid: geometry.grid,
            block: geometry.block,
            shared_bytes: geometry.shared,
        };
        // SAFETY: the arguments were packed by the caller from the kernel's own PTX
        // parameter list (count and sizes), which the simulator checks again; the module
        // stays loaded while the function is in the tables; what the kernel reaches is
        // simulated device memory, checked by the simulator.
        unsafe { c.backend.launch(&f.function, &config, &s, args) }?;
        Ok(())
    }

    fn mem_alloc(&self, ctx: u64, bytes: u64) -> R<u64> {
        let c = self.bound(ctx)?;
        let bytes = usize::try_from(bytes)
            .map_err(|_| Fail::new(CUDA_ERROR_OUT_OF_MEMORY, "allocation too large"))?;
        Ok(c.backend.mem_alloc(bytes)?.0)
    }

    fn mem_free(&self, ctx: u64, ptr: u64) -> R<()> {
        let c = self.bound(ctx)?;
        c.backend.mem_free(DevicePtr(ptr))?;
        Ok(())
    }

    fn memset(
        &self,
        ctx: u64,
        dst: u64,
        value: u32,
        width: u32,
        count: u64,
        stream: Option<u64>,
    ) -> R<()> {
        let c = self.bound(ctx)?;
        let value = match width {
            1 => value & 0xff,
            2 => value & 0xffff,
            _ => value,
        };
        let bytes = value.to_le_bytes();
        let uniform = bytes[..width as usize].iter().all(|b| *b == bytes[0]);
        let total = count
            .checked_mul(width as u64)
            .and_then(|b| usize::try_from(b).ok())
            .ok_or_else(|| Fail::new(CUDA_ERROR_INVALID_VALUE, "memset size overflows"))?;
        let d = DevicePtr(dst);
        // SAFETY: the simulator checks the range against its live allocations; every
        // simulated device address is simulator memory, never the program's.
        unsafe {
            match stream {
                None if width == 4 => c.backend.memset_d32(d, value, count as usize)?,
                None if uniform => c.backend.memset_d8(d, bytes[0], total)?,
                None => c.backend.memcpy_htod(d, &pattern(value, width, count)?)?,
                Some(s) => {
                    let st = self.stream(&c, s)?;
                    if uniform {
                        c.backend.memset_d8_async(d, bytes[0], total, &st)?;
                    } else {
                        let buf = pattern(value, width, count)?.into_boxed_slice();
                        c.backend
                            .memcpy_htod_async(d, buf.as_ptr(), buf.len(), &st)?;
                        // The simulator reads the pattern when the stream reaches the
                        // copy: kept (at a stable heap address) until a synchronisation.
                        lock(&c.tables).keepalive.push((s, buf));
                    }
                }
            }
        }
        Ok(())
    }

    unsafe fn memcpy_htod(
        &self,
        ctx: u64,
        dst: u64,
        src: *const u8,
        bytes: usize,
        stream: Option<u64>,
        pinned: bool,
    ) -> R<()> {
        let c = self.bound(ctx)?;
        match stream {
            None => {
                // SAFETY: the caller guarantees `src..src+bytes` is readable.
                let data = unsafe { std::slice::from_raw_parts(src, bytes) };
                // SAFETY: the destination is simulated device memory, range-checked.
                unsafe { c.backend.memcpy_htod(DevicePtr(dst), data) }?;
            }
            Some(s) if pinned => {
                let st = self.stream(&c, s)?;
                // SAFETY: the caller guarantees the pinned source stays readable until
                // the stream passes the copy (cuMemcpyHtoDAsync's contract).
                unsafe { c.backend.memcpy_htod_async(DevicePtr(dst), src, bytes, &st) }?;
            }
            Some(s) => {
                // Pageable: the bytes are taken now (a staging copy, kept until the
                // stream is synchronised), so the program may reuse its buffer at once.
                let st = self.stream(&c, s)?;
                // SAFETY: the caller guarantees `src..src+bytes` is readable now.
                let staged: Box<[u8]> = unsafe { std::slice::from_raw_parts(src, bytes) }.into();
                // SAFETY: `staged` stays alive (in the keep-alive list, at a stable heap
                // address) until the stream or context is synchronised.
                unsafe {
                    c.backend
                        .memcpy_htod_async(DevicePtr(dst), staged.as_ptr(), bytes, &st)
                }?;
                lock(&c.tables).keepalive.push((s, staged));
            }
        }
        Ok(())
    }

    unsafe fn memcpy_dtoh(
        &self,
        ctx: u64,
        dst: *mut u8,
        src: u64,
        bytes: usize,
        stream: Option<u64>,
        pinned: bool,
    ) -> R<()> {
        let c = self.bound(ctx)?;
        match stream {
            None => {
                // SAFETY: the caller guarantees `dst..dst+bytes` is writable and unused.
                let out = unsafe { std::slice::from_raw_parts_mut(dst, bytes) };
                // SAFETY: the source is simulated device memory, range-checked.
                unsafe { c.backend.memcpy_dtoh(out, DevicePtr(src)) }?;
            }
            Some(s) => {
                let st = self.stream(&c, s)?;
                // SAFETY: the caller guarantees the destination stays writable and
                // unused until the stream passes the copy; for pageable memory that is
                // before this call returns (synchronised below).
                unsafe { c.backend.memcpy_dtoh_async(dst, DevicePtr(src), bytes, &st) }?;
                if !pinned {
                    // Pageable: the driver returns once the copy is done.
                    c.backend.stream_synchronize(&st)?;
                }
            }
        }
        Ok(())
    }

    fn memcpy_dtod(&self, ctx: u64, dst: u64, src: u64, bytes: u64, stream: Option<u64>) -> R<()> {
        let c = self.bound(ctx)?;
        let n = usize::try_from(bytes)
            .map_err(|_| Fail::new(CUDA_ERROR_INVALID_VALUE, "copy too large"))?;
        // SAFETY: both ranges are simulated device memory, range-checked by the
        // simulator.
        unsafe {
            match stream {
                None => c.backend.memcpy_dtod(DevicePtr(dst), DevicePtr(src), n)?,
                Some(s) => {
                    let st = self.stream(&c, s)?;
                    c.backend
                        .memcpy_dtod_async(DevicePtr(dst), DevicePtr(src), n, &st)?
                }
            }
        }
        Ok(())
    }

    fn host_alloc(&self, ctx: u64, bytes: usize, flags: u32) -> R<*mut u8> {
        let c = self.bound(ctx)?;
        let h = c.backend.host_alloc(
            bytes,
            HostAllocFlags {
                portable: flags & CU_MEMHOSTALLOC_PORTABLE != 0,
                device_map: flags & CU_MEMHOSTALLOC_DEVICEMAP != 0,
                write_combined: flags & CU_MEMHOSTALLOC_WRITECOMBINED != 0,
            },
        )?;
        let p = h.as_ptr();
        lock(&self.host).insert(p as usize, (c, h));
        Ok(p)
    }

    unsafe fn host_free(&self, ptr: *mut u8) -> R<()> {
        let (c, h) = lock(&self.host)
            .remove(&(ptr as usize))
            .ok_or_else(|| Fail::new(CUDA_ERROR_INVALID_VALUE, "not memory from cuMemHostAlloc"))?;
        c.bind()?;
        // SAFETY: the caller guarantees nothing uses the memory afterwards.
        unsafe { c.backend.host_free(h) }?;
        Ok(())
    }

    unsafe fn host_register(&self, ctx: u64, ptr: *mut u8, bytes: usize, flags: u32) -> R<()> {
        let c = self.bound(ctx)?;
        let f = HostRegisterFlags {
            portable: flags & CU_MEMHOSTREGISTER_PORTABLE != 0,
            device_map: flags & CU_MEMHOSTREGISTER_DEVICEMAP != 0,
            read_only: flags & CU_MEMHOSTREGISTER_READ_ONLY != 0,
        };
        // SAFETY: the caller guarantees the range stays mapped until unregistered.
        unsafe { c.backend.host_register(ptr, bytes, f) }?;
        Ok(())
    }

    unsafe fn host_unregister(&self, ctx: u64, ptr: *mut u8) -> R<()> {
        let c = self.bound(ctx)?;
        // SAFETY: the caller guarantees no pending operation uses the range.
        unsafe { c.backend.host_unregister(ptr) }?;
        Ok(())
    }

    fn stream_create(&self, ctx: u64, flags: u32, _priority: i32) -> R<u64> {
        let c = self.bound(ctx)?;
        let s = c.backend.stream_create(StreamFlags {
            non_blocking: flags & CU_STREAM_NON_BLOCKING != 0,
        })?;
        let h = self.handle(ctx, TAG_STREAM);
        lock(&c.tables).streams.insert(h, Arc::new(s));
        Ok(h)
    }

    fn stream_destroy(&self, _ctx: u64, stream: u64) -> R<()> {
        let c = self.owner(stream, TAG_STREAM)?;
        let s = lock(&c.tables)
            .streams
            .remove(&stream)
            .ok_or_else(|| Fail::new(CUDA_ERROR_INVALID_HANDLE, format!("stream {stream:#x}")))?;
        match unwrap_arc(s) {
            Some(s) => c.backend.stream_destroy(s)?,
            None => log_busy("stream", stream),
        }
        Ok(())
    }

    fn stream_synchronize(&self, ctx: u64, stream: u64) -> R<()> {
        let c = if stream <= STREAM_PER_THREAD {
            self.bound(ctx)?
        } else {
            self.owner(stream, TAG_STREAM)?
        };
        let s = self.stream(&c, stream)?;
        let r = c.backend.stream_synchronize(&s);
        let default = stream <= STREAM_PER_THREAD;
        lock(&c.tables).keepalive.retain(|(ks, _)| {
            if default {
                *ks > STREAM_PER_THREAD
            } else {
                *ks != stream
            }
        });
        Ok(r?)
    }

    fn stream_query(&self, ctx: u64, stream: u64) -> R<bool> {
        let c = if stream <= STREAM_PER_THREAD {
            self.bound(ctx)?
        } else {
            self.owner(stream, TAG_STREAM)?
        };
        let s = self.stream(&c, stream)?;
        Ok(c.backend.stream_query(&s)?)
    }

    fn stream_wait_event(&self, _ctx: u64, stream: u64, event: u64, _flags: u32) -> R<()> {
        let c = self.owner(event, TAG_EVENT)?;
        if stream > STREAM_PER_THREAD && stream >> CTX_SHIFT != c.id {
            // A stream of another context: it waits for this one's event. On the
            // simulator every context runs its work in submission order, so waiting for
            // the event on the host gives the same order.
            let e = self.event(&c, event)?;
            c.backend.event_synchronize(&e)?;
            return Ok(());
        }
        let s = self.stream(&c, stream)?;
        let e = self.event(&c, event)?;
        c.backend.stream_wait_event(&s, &e)?;
        Ok(())
    }

    fn event_create(&self, ctx: u64, flags: u32) -> R<u64> {
        let c = self.bound(ctx)?;
        if flags & !(CU_EVENT_BLOCKING_SYNC | CU_EVENT_DISABLE_TIMING) != 0 {
            return Err(Fail::new(
                CUDA_ERROR_NOT_SUPPORTED,
                format!("event flags {flags:#x} (interprocess events are not supported)"),
            ));
        }
        let e = c.backend.event_create(EventFlags {
            blocking_sync: flags & CU_EVENT_BLOCKING_SYNC != 0,
            disable_timing: flags & CU_EVENT_DISABLE_TIMING != 0,
        })?;
        let h = self.handle(ctx, TAG_EVENT);
        lock(&c.tables).events.insert(h, Arc::new(e));
        Ok(h)
    }

    fn event_record(&self, _ctx: u64, event: u64, stream: u64) -> R<()> {
        let c = self.owner(event, TAG_EVENT)?;
        let e = self.event(&c, event)?;
        let s = self.stream(&c, stream)?;
        c.backend.event_record(&e, &s)?;
        Ok(())
    }

    fn event_synchronize(&self, _ctx: u64, event: u64) -> R<()> {
        let c = self.owner(event, TAG_EVENT)?;
        let e = self.event(&c, event)?;
        c.backend.event_synchronize(&e)?;
        Ok(())
    }

    fn event_query(&self, _ctx: u64, event: u64) -> R<bool> {
        let c = self.owner(event, TAG_EVENT)?;
        let e = self.event(&c, event)?;
        Ok(c.backend.event_query(&e)?)
    }

    fn event_elapsed(&self, _ctx: u64, start: u64, end: u64) -> R<f32> {
        let c = self.owner(start, TAG_EVENT)?;
        if end >> CTX_SHIFT != c.id {
            return Err(Fail::new(
                CUDA_ERROR_INVALID_HANDLE,
                "the events belong to different contexts",
            ));
        }
        let a = self.event(&c, start)?;
        let b = self.event(&c, end)?;
        Ok(c.backend.event_elapsed_ms(&a, &b)?)
    }

    fn event_destroy(&self, _ctx: u64, event: u64) -> R<()> {
        let c = self.owner(event, TAG_EVENT)?;
        let e = lock(&c.tables)
            .events
            .remove(&event)
            .ok_or_else(|| Fail::new(CUDA_ERROR_INVALID_HANDLE, format!("event {event:#x}")))?;
        match unwrap_arc(e) {
            Some(e) => c.backend.event_destroy(e)?,
            None => log_busy("event", event),
        }
        Ok(())
    }
}

fn log_busy(what: &str, h: u64) {
    crate::log::warn(&format!(
        "{what} {h:#x} destroyed while another thread used it; its simulator object is kept"
    ));
}
