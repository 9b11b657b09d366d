//! The driver state of `libcuda.so.1` over one [`Backend`]: the program's handles (its
//! `CUcontext`, `CUmodule`, `CUfunction`, `CUstream` and `CUevent` values) mapped to the
//! backend's, per context; the primary context's reference count and flags; pinned host
//! memory; staging of asynchronous copies from pageable memory. The backend is the
//! PTX simulator in simulator mode ([`vmgpu_cuda_sim::SimBackend`]) and the vmgpu CUDA
//! service in forward mode ([`vmgpu_cuda_proto::client::RemoteBackend`]): the same code
//! serves both, so both answer alike.
//!
//! Every context (the primary one and each `cuCtxCreate` one) is a context of the
//! backend. Handles of modules, functions, streams and events carry their context's
//! number in their upper bits, so a call finds the object's context from the handle and
//! makes it current on the backend before it calls, as the driver uses an object's own
//! context.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};

use vmgpu_cuda_api::LaunchKind;
use vmgpu_cuda_api::{
    Backend, BackendKind, Context, Device, DeviceAttribute, DevicePtr, Event, EventFlags, Function,
    FunctionAttribute, HostAlloc, HostAllocFlags, HostFunc, HostRegisterFlags, LaunchConfig,
    Module, ParamLayout, Stream, StreamFlags,
};

use crate::capture::{Captures, Cond, Op, RepeatableHostFunc, COND_IF, COND_SWITCH, COND_WHILE};
use crate::fail::{lock, Fail, R, STREAM_PER_THREAD};
use crate::ffi::*;
use crate::holds::{self, Held, Holds};

/// The handle of device 0's primary context; device N's is `PRIMARY_CTX + N`, for up to
/// [`MAX_DEVICES`] devices; contexts made by `cuCtxCreate` are numbered after them.
const PRIMARY_CTX: u64 = 1;
/// The most devices the driver state tells apart.
const MAX_DEVICES: u64 = 64;

/// The handle of device `dev`'s primary context.
fn primary_id(dev: u32) -> u64 {
    PRIMARY_CTX + u64::from(dev)
}

/// The device whose primary context `id` is, if it is one.
fn primary_device(id: u64) -> Option<u32> {
    (PRIMARY_CTX..PRIMARY_CTX + MAX_DEVICES)
        .contains(&id)
        .then(|| (id - PRIMARY_CTX) as u32)
}
/// Bits of a handle below its context number.
const CTX_SHIFT: u32 = 40;
/// Handle kinds, in bits 32..40.
const TAG_MODULE: u64 = 0x10;
const TAG_FUNCTION: u64 = 0x20;
const TAG_STREAM: u64 = 0x30;
const TAG_EVENT: u64 = 0x40;

#[derive(Debug)]
struct DriverModule {
    module: Module,
    /// Its variables whose addresses the program asked for: base to size.
    globals: BTreeMap<u64, u64>,
}

#[derive(Debug)]
struct DriverFunction {
    function: Function,
    module: u64,
    /// Its name, for `cuFuncGetName` (kept as long as the function).
    name: std::ffi::CString,
    /// Its parameter layout, when the backend knows it.
    layout: Option<Vec<ParamLayout>>,
}

#[derive(Debug, Default)]
struct Tables {
    modules: HashMap<u64, DriverModule>,
    functions: HashMap<u64, Arc<DriverFunction>>,
    streams: HashMap<u64, Arc<Stream>>,
    events: HashMap<u64, Arc<Event>>,
    /// Staged bytes of asynchronous copies from pageable memory, kept until their
    /// stream is synchronised: (stream, bytes).
    keepalive: Vec<(u64, Box<[u8]>)>,
    /// Device allocations made in the context: base to (size, buffer id), for
    /// `cuPointerGetAttribute` and `cuMemGetAddressRange`.
    allocs: BTreeMap<u64, (u64, u64)>,
    /// Which of them are managed memory (`cuMemAllocManaged`).
    managed: std::collections::HashSet<u64>,
    /// The limits the program set (`cuCtxSetLimit`); the others are [`LIMITS`]'.
    limits: HashMap<i32, u64>,
    /// Stream attributes the program set (`cuStreamSetAttribute`): hints here, kept
    /// for `cuStreamGetAttribute` until the stream goes.
    stream_attrs: HashMap<(u64, i32), StreamAttrValue>,
}

/// `CUstreamAttrValue` (`CUlaunchAttributeValue`, 64 bytes).
pub type StreamAttrValue = [u64; 8];

/// `CUstreamAttrID`s a stream takes: the access policy window, the synchronization
/// policy, the priority, the memory synchronization domain map and domain.
pub const STREAM_ATTRS: [i32; 5] = [1, 3, 8, 9, 10];

/// `CUlimit`s and their values on a fresh context (an H100's with NVIDIA's driver):
/// stack size, printf FIFO, malloc heap, device-runtime sync depth and pending launches,
/// L2 fetch granularity, persisting L2 cache size.
const LIMITS: [(i32, u64); 7] = [
    (0, 1024),
    (1, 1 << 20),
    (2, 8 << 20),
    (3, 2),
    (4, 2048),
    (5, 64),
    (6, 0),
];

/// What the driver knows of an address ([`Driver::pointer`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PointerInfo {
    /// The context (its handle) the memory belongs to.
    pub ctx: u64,
    /// The allocation's start and size.
    pub base: u64,
    pub size: u64,
    /// A number no other allocation of this process has had.
    pub buffer_id: u64,
    /// Page-locked host memory (`cuMemHostAlloc`, `cuMemHostRegister`), else device
    /// memory.
    pub host: bool,
    /// Managed memory (`cuMemAllocManaged`): device memory the host uses at the same
    /// address.
    pub managed: bool,
}

/// One context of the program: the backend's context and what was made in it.
#[derive(Debug)]
struct DriverCtx {
    id: u64,
    /// Its device's ordinal.
    device: u32,
    ctx: Context,
    /// `CU_CTX_*` flags it was made with (`cuCtxGetFlags`).
    flags: u32,
    tables: Mutex<Tables>,
}

impl DriverCtx {
    fn new(id: u64, device: u32, ctx: Context, flags: u32) -> DriverCtx {
        DriverCtx {
            id,
            device,
            ctx,
            flags,
            tables: Mutex::new(Tables::default()),
        }
    }

    /// Makes this context current on the backend for the calling thread.
    fn bind(&self, backend: &dyn Backend) -> R<()> {
        backend.context_set_current(&self.ctx)?;
        Ok(())
    }
}

/// A device's primary context: while retained, its state; its reference count and
/// flags.
#[derive(Debug, Default)]
struct Primary {
    ctx: Option<Arc<DriverCtx>>,
    refs: u64,
    flags: u32,
}

/// What `cuInit` tells the backend (forward mode: the flags of the session's `Init`).
pub type OnInit = Box<dyn Fn(u32) + Send + Sync>;

/// The driver state over one backend.
pub struct Driver {
    backend: Arc<dyn Backend>,
    describe: String,
    on_init: Option<OnInit>,
    /// Each device's primary context.
    primary: Mutex<HashMap<u32, Primary>>,
    created: Mutex<HashMap<u64, Arc<DriverCtx>>>,
    /// Pinned host allocations, by address, with their context.
    host: Mutex<HashMap<usize, (Arc<DriverCtx>, HostAlloc)>>,
    next_ctx: AtomicU64,
    next_handle: AtomicU64,
    /// Stream captures in progress and the graphs made.
    captures: Mutex<Captures>,
    /// Streams held behind a host function (a backend that runs host functions in the
    /// caller), and the condition their progress signals.
    holds: Mutex<Holds>,
    held_progress: Condvar,
}

impl std::fmt::Debug for Driver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Driver")
            .field("backend", &self.backend)
            .field("describe", &self.describe)
            .finish_non_exhaustive()
    }
}

impl Driver {
    /// The driver over `backend`; `describe` says which (for the log); `on_init` is
    /// told the flags of the program's `cuInit`.
    pub fn new(backend: Arc<dyn Backend>, describe: String, on_init: Option<OnInit>) -> Driver {
        Driver {
            backend,
            describe,
            on_init,
            primary: Mutex::new(HashMap::new()),
            created: Mutex::new(HashMap::new()),
            host: Mutex::new(HashMap::new()),
            next_ctx: AtomicU64::new(PRIMARY_CTX + MAX_DEVICES),
            next_handle: AtomicU64::new(1),
            captures: Mutex::new(Captures::default()),
            holds: Mutex::new(Holds::default()),
            held_progress: Condvar::new(),
        }
    }

    /// Whether stream-ordered work `op` on `stream` is recorded by a capture or queued
    /// behind a held stream's host function (true: nothing to submit now).
    fn divert(&self, stream: u64, op: impl FnOnce() -> Op) -> R<bool> {
        let mut op = Some(op);
        if lock(&self.captures).record(stream, || (op.take().expect("made once"))())? {
            return Ok(true);
        }
        Ok(lock(&self.holds).queue(stream, || Held::Op((op.take().expect("made once"))())))
    }

    /// Records the operations of one call as one node when `stream` captures
    /// (`Ok(true)`); `Ok(false)` when it does not (the caller then runs them).
    pub fn capture_all(&self, stream: u64, ops: &[Op]) -> R<bool> {
        lock(&self.captures).record_all(stream, || ops.to_vec())
    }

    /// Waits until `done` holds of the held streams.
    fn settle(&self, done: impl Fn(&Holds) -> bool) {
        let mut h = lock(&self.holds);
        while !done(&h) {
            h = self
                .held_progress
                .wait(h)
                .unwrap_or_else(|e| e.into_inner());
        }
    }

    /// Submits the held work of `stream`, in order, until none is left (the thread a
    /// held stream's host function starts).
    fn submit_held(&'static self, stream: u64) {
        holds::submitting();
        loop {
            let next = lock(&self.holds).next(stream);
            let Some((ctx, work)) = next else { break };
            let r = match work {
                Held::Op(op) => self.submit(ctx, stream, op),
                Held::Record(e) => {
                    let r = self.event_record(ctx, e, stream);
                    lock(&self.holds).recorded(e);
                    r
                }
                Held::Wait(e) => self.stream_wait_event(ctx, stream, e, 0),
            };
            if let Err(f) = r {
                crate::log::warn(&format!(
                    "held work of stream {stream:#x}, submitted after its host function: {} ({})",
                    f.detail, f.code
                ));
                lock(&self.holds).fail(stream, f);
            }
            self.held_progress.notify_all();
        }
        self.held_progress.notify_all();
    }

    /// Submits one recorded or held operation to `stream`.
    fn submit(&'static self, ctx: u64, stream: u64, op: Op) -> R<()> {
        match op {
            Op::Memset {
                dst,
                value,
                width,
                count,
            } => self.memset(ctx, dst, value, width, count, Some(stream)),
            Op::HtoD {
                dst,
                src,
                bytes,
                pinned,
            } => {
                // SAFETY: the program keeps the host buffers of its captured or queued
                // copies alive and unused until the stream has done them (a memcpy
                // node's and an asynchronous copy's rule).
                unsafe { self.memcpy_htod(ctx, dst, src as *const u8, bytes, Some(stream), pinned) }
            }
            Op::DtoH {
                dst,
                src,
                bytes,
                pinned,
            } => {
                // SAFETY: as above, for the destination.
                unsafe { self.memcpy_dtoh(ctx, dst as *mut u8, src, bytes, Some(stream), pinned) }
            }
            Op::DtoD { dst, src, bytes } => self.memcpy_dtod(ctx, dst, src, bytes, Some(stream)),
            Op::Launch {
                function,
                config,
                args,
                cooperative,
            } => {
                let args: Vec<&[u8]> = args.iter().map(|a| &a[..]).collect();
                self.launch(ctx, function, config, stream, &args, cooperative)
            }
            Op::HostFunc(f) => self.stream_host_func(ctx, stream, f),
            // Made with the node, kept for the graph's life.
            Op::MemAlloc { .. } | Op::MemFree { .. } => Ok(()),
            Op::Cond(c) => self.conditional(ctx, stream, &c),
            Op::EventRecord(e) => self.event_record(ctx, e, stream),
            Op::EventWait(e) => self.stream_wait_event(ctx, stream, e, 0),
            // An executable graph holds its child graphs' work in their place.
            Op::Child(g) => Err(Fail::new(
                CUDA_ERROR_UNKNOWN,
                format!("child graph {g:#x} submitted whole"),
            )),
        }
    }

    /// A conditional node of a launched graph: once the work before it on `stream` is
    /// done (its value is the device's), the body its value picks is submitted; a
    /// `WHILE` node looks again after each run of its body. The caller waits for that
    /// work, where a GPU would decide on the device.
    fn conditional(&'static self, ctx: u64, stream: u64, c: &Cond) -> R<()> {
        loop {
            self.stream_synchronize(ctx, stream)?;
            let mut v = [0u8; 4];
            // SAFETY: a local 4-byte buffer, written by this call only.
            unsafe { self.memcpy_dtoh(ctx, v.as_mut_ptr(), c.handle, 4, None, false) }?;
            let v = u32::from_le_bytes(v);
            let body = match c.kind {
                COND_IF if v != 0 => c.run.first(),
                COND_IF => c.run.get(1),
                COND_WHILE if v != 0 => c.run.first(),
                COND_SWITCH => c.run.get(v as usize),
                _ => None,
            };
            let Some(body) = body else {
                return Ok(());
            };
            for op in body.iter() {
                self.submit(ctx, stream, op.clone())?;
            }
            if c.kind != COND_WHILE {
                return Ok(());
            }
        }
    }

    fn device(&self, dev: u32) -> R<Device> {
        let n = self.backend.device_count()?;
        if dev < n && u64::from(dev) < MAX_DEVICES {
            Ok(Device::new(dev))
        } else {
            Err(Fail::new(
                CUDA_ERROR_INVALID_DEVICE,
                format!("device {dev}: there are {n} device(s)"),
            ))
        }
    }

    fn ctx(&self, id: u64) -> R<Arc<DriverCtx>> {
        if let Some(dev) = primary_device(id) {
            return lock(&self.primary)
                .get(&dev)
                .and_then(|p| p.ctx.clone())
                .ok_or_else(|| {
                    Fail::new(
                        CUDA_ERROR_INVALID_CONTEXT,
                        format!("device {dev}'s primary context is not retained"),
                    )
                });
        }
        lock(&self.created)
            .get(&id)
            .cloned()
            .ok_or_else(|| Fail::new(CUDA_ERROR_INVALID_CONTEXT, format!("context {id:#x}")))
    }

    /// The context (bound on this thread) that made `handle`, a handle of kind `tag`.
    fn owner(&self, handle: u64, tag: u64) -> R<Arc<DriverCtx>> {
        if (handle >> 32) & 0xff != tag {
            return Err(Fail::new(
                CUDA_ERROR_INVALID_HANDLE,
                format!("{handle:#x} is not a handle of this kind"),
            ));
        }
        let c = self
            .ctx(handle >> CTX_SHIFT)
            .map_err(|_| Fail::new(CUDA_ERROR_INVALID_HANDLE, format!("{handle:#x}")))?;
        c.bind(&*self.backend)?;
        Ok(c)
    }

    fn bound(&self, ctx: u64) -> R<Arc<DriverCtx>> {
        let c = self.ctx(ctx)?;
        c.bind(&*self.backend)?;
        Ok(c)
    }

    fn handle(&self, ctx: u64, tag: u64) -> u64 {
        let n = self.next_handle.fetch_add(1, Ordering::Relaxed) & 0xffff_ffff;
        (ctx << CTX_SHIFT) | (tag << 32) | n.max(1)
    }

    /// The context a stream-ordered call runs in (the bound one for the default streams,
    /// the stream's own for a created one) and the stream.
    fn stream_in(&self, ctx: u64, stream: u64) -> R<(Arc<DriverCtx>, Arc<Stream>)> {
        let c = if stream <= STREAM_PER_THREAD {
            self.bound(ctx)?
        } else {
            self.owner(stream, TAG_STREAM)?
        };
        let s = self.stream(&c, stream)?;
        Ok((c, s))
    }

    /// The stream `stream` names in `c` (the default stream for 0, 1 and 2).
    fn stream(&self, c: &DriverCtx, stream: u64) -> R<Arc<Stream>> {
        if stream <= STREAM_PER_THREAD {
            return Ok(Arc::new(Stream::DEFAULT));
        }
        lock(&c.tables)
            .streams
            .get(&stream)
            .cloned()
            .ok_or_else(|| Fail::new(CUDA_ERROR_INVALID_HANDLE, format!("stream {stream:#x}")))
    }

    fn event(&self, c: &DriverCtx, event: u64) -> R<Arc<Event>> {
        lock(&c.tables)
            .events
            .get(&event)
            .cloned()
            .ok_or_else(|| Fail::new(CUDA_ERROR_INVALID_HANDLE, format!("event {event:#x}")))
    }

    /// Forgets every object of `c` (after a reset or before a destroy).
    fn clear(c: &DriverCtx) {
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

impl Driver {
    pub fn describe(&self) -> String {
        self.describe.clone()
    }

    pub fn init(&self, flags: u32) -> R<()> {
        if let Some(f) = &self.on_init {
            f(flags);
        }
        Ok(())
    }

    pub fn driver_version(&self) -> R<i32> {
        Ok(self.backend.driver_version()?)
    }

    pub fn device_count(&self) -> R<u32> {
        Ok(self.backend.device_count()?)
    }

    pub fn device_name(&self, dev: u32) -> R<String> {
        Ok(self.backend.device_name(self.device(dev)?)?)
    }

    pub fn device_uuid(&self, dev: u32) -> R<[u8; 16]> {
        Ok(self.backend.device_uuid(self.device(dev)?)?)
    }

    pub fn device_pci_bus_id(&self, dev: u32) -> R<String> {
        Ok(self.backend.device_pci_bus_id(self.device(dev)?)?)
    }

    /// `CUDA_ERROR_NOT_SUPPORTED`, naming `what`, unless the device of context `ctx`
    /// is the simulator (in-process or behind the service): the features whose device
    /// side only it implements (texture and surface objects read as descriptors from
    /// device memory, conditional handles set by its `cudaGraphSetConditional`), as the
    /// private attribute [`vmgpu_cuda_api::texture::CAPABILITY_ATTRIBUTE`] says.
    pub fn simulator_feature(&self, ctx: u64, what: &str) -> R<()> {
        let dev = self.ctx_device(ctx)?;
        if self
            .device_attribute(dev, vmgpu_cuda_api::texture::CAPABILITY_ATTRIBUTE)
            .unwrap_or(0)
            == 1
        {
            return Ok(());
        }
        Err(Fail::new(
            CUDA_ERROR_NOT_SUPPORTED,
            format!(
                "{what} are supported on the simulator (in-process or behind the service), \
                 not on a GPU's backend yet"
            ),
        ))
    }

    pub fn device_attribute(&self, dev: u32, attr: i32) -> R<i32> {
        let a = DeviceAttribute::from_code(attr);
        let v = self.backend.device_attribute(self.device(dev)?, a)?;
        // Forwarded, the device is the server's and the host memory is the guest's:
        // managed and mapped memory are mirrored in the guest and coherent at
        // synchronisations, so the host may not use them while kernels run, whatever the
        // server's device can do.
        if a == DeviceAttribute::ConcurrentManagedAccess
            && self.backend.kind() == BackendKind::Remote
        {
            return Ok(0);
        }
        Ok(v)
    }

    pub fn device_total_mem(&self, dev: u32) -> R<u64> {
        Ok(self.backend.device_total_mem(self.device(dev)?)?)
    }

    pub fn primary_retain(&self, dev: u32) -> R<u64> {
        let d = self.device(dev)?;
        let mut all = lock(&self.primary);
        let p = all.entry(dev).or_default();
        if p.ctx.is_none() {
            let ctx = self.backend.primary_context_retain(d)?;
            p.ctx = Some(Arc::new(DriverCtx::new(primary_id(dev), dev, ctx, p.flags)));
        }
        p.refs += 1;
        Ok(primary_id(dev))
    }

    pub fn primary_release(&self, dev: u32) -> R<()> {
        self.device(dev)?;
        let mut all = lock(&self.primary);
        let p = all.entry(dev).or_default();
        if p.refs == 0 {
            return Err(Fail::new(
                CUDA_ERROR_INVALID_CONTEXT,
                format!("device {dev}'s primary context is not retained"),
            ));
        }
        p.refs -= 1;
        if p.refs == 0 {
            // As in CUDA, the last release resets the primary context: everything made
            // in it goes, and the next retain starts afresh (a sticky error cleared).
            if let Some(c) = p.ctx.take() {
                drop(all);
                Driver::clear(&c);
                lock(&self.host).retain(|_, (owner, _)| owner.id != c.id);
                self.backend.primary_context_release(c.ctx)?;
            }
        }
        Ok(())
    }

    pub fn primary_reset(&self, dev: u32) -> R<()> {
        let d = self.device(dev)?;
        self.settle(|h| !h.any());
        // SAFETY: the program asked for the reset; as with the driver, every handle and
        // device address of the context is invalid afterwards, and the driver state
        // forgets its own (the tables are cleared) so none reaches the backend again.
        unsafe { self.backend.primary_context_reset(d) }?;
        if let Some(c) = lock(&self.primary).get(&dev).and_then(|p| p.ctx.clone()) {
            Driver::clear(&c);
        }
        Ok(())
    }

    pub fn primary_state(&self, dev: u32) -> R<(u32, bool)> {
        self.device(dev)?;
        let all = lock(&self.primary);
        Ok(all.get(&dev).map_or((0, false), |p| (p.flags, p.refs > 0)))
    }

    pub fn primary_set_flags(&self, dev: u32, flags: u32) -> R<()> {
        self.device(dev)?;
        lock(&self.primary).entry(dev).or_default().flags = flags;
        Ok(())
    }

    /// The `CU_CTX_*` flags of context `ctx` (`cuCtxGetFlags`).
    pub fn ctx_flags(&self, ctx: u64) -> R<u32> {
        let c = self.ctx(ctx)?;
        if primary_device(ctx).is_some() {
            return Ok(lock(&self.primary).get(&c.device).map_or(0, |p| p.flags));
        }
        Ok(c.flags)
    }

    /// `cuCtxGetLimit` of the current context.
    pub fn ctx_limit(&self, ctx: u64, limit: i32) -> R<u64> {
        let c = self.ctx(ctx)?;
        let default = LIMITS.iter().find(|(l, _)| *l == limit).map(|(_, v)| *v);
        let default = default
            .ok_or_else(|| Fail::new(CUDA_ERROR_UNSUPPORTED_LIMIT, format!("limit {limit}")))?;
        let set = lock(&c.tables).limits.get(&limit).copied();
        Ok(set.unwrap_or(default))
    }

    /// `cuCtxSetLimit` of the current context: kept and answered back (the simulator
    /// and the service have no use for them; the L2 fetch granularity must be 0 to 128).
    pub fn ctx_set_limit(&self, ctx: u64, limit: i32, value: u64) -> R<()> {
        self.ctx_limit(ctx, limit)?;
        if limit == 5 && value > 128 {
            return Err(Fail::new(
                CUDA_ERROR_INVALID_VALUE,
                format!("L2 fetch granularity {value} (0 to 128)"),
            ));
        }
        let c = self.ctx(ctx)?;
        lock(&c.tables).limits.insert(limit, value);
        Ok(())
    }

    pub fn ctx_create(&self, dev: u32, flags: u32) -> R<u64> {
        let d = self.device(dev)?;
        let id = self.next_ctx.fetch_add(1, Ordering::Relaxed);
        if id >= 1 << (64 - CTX_SHIFT) {
            return Err(Fail::new(CUDA_ERROR_OUT_OF_MEMORY, "too many contexts"));
        }
        let ctx = self.backend.context_create(d)?;
        lock(&self.created).insert(id, Arc::new(DriverCtx::new(id, dev, ctx, flags)));
        Ok(id)
    }

    pub fn ctx_destroy(&self, ctx: u64) -> R<()> {
        if primary_device(ctx).is_some() {
            return Err(Fail::new(
                CUDA_ERROR_INVALID_CONTEXT,
                "the primary context is released, not destroyed",
            ));
        }
        self.settle(|h| !h.any());
        let c = lock(&self.created)
            .remove(&ctx)
            .ok_or_else(|| Fail::new(CUDA_ERROR_INVALID_CONTEXT, format!("context {ctx:#x}")))?;
        Driver::clear(&c);
        lock(&self.host).retain(|_, (owner, _)| owner.id != ctx);
        // SAFETY: every handle the program had of the context is gone from the tables
        // (cleared above), so none reaches the backend again.
        unsafe { self.backend.context_destroy(c.ctx) }?;
        Ok(())
    }

    pub fn ctx_device(&self, ctx: u64) -> R<u32> {
        self.ctx(ctx).map(|c| c.device)
    }

    pub fn ctx_synchronize(&self, ctx: u64) -> R<()> {
        let c = self.bound(ctx)?;
        lock(&self.captures).refuse_any("cuCtxSynchronize")?;
        self.settle(|h| !h.any());
        let r = self.backend.context_synchronize();
        lock(&c.tables).keepalive.clear();
        Ok(r?)
    }

    pub fn mem_get_info(&self, ctx: u64) -> R<(u64, u64)> {
        self.bound(ctx)?;
        let i = self.backend.mem_get_info()?;
        Ok((i.free, i.total))
    }

    pub fn module_load(&self, ctx: u64, image: &[u8]) -> R<u64> {
        let c = self.bound(ctx)?;
        if image.starts_with(b"\x7fELF") {
            return Err(Fail::new(
                CUDA_ERROR_NO_BINARY_FOR_GPU,
                "a cubin (machine code) image: vmgpu's guest library runs PTX, alone or in \
                 a fatbin (build with -gencode arch=compute_XX,code=compute_XX to embed it)",
            ));
        }
        let from_fatbin;
        let text = if vmgpu_ptx::fatbin::is_fatbin(image) {
            from_fatbin = fatbin_ptx(image, "the module's fatbin")?;
            from_fatbin.as_str()
        } else {
            std::str::from_utf8(image).map_err(|e| Fail {
                code: CUDA_ERROR_INVALID_IMAGE,
                detail: format!("the image is neither PTX text nor a known binary: {e}"),
                jit_log: Some(format!("ptx: the image is not UTF-8 text: {e}\n")),
            })?
        };
        let module = self.backend.module_load_ptx(text)?;
        let h = self.handle(ctx, TAG_MODULE);
        lock(&c.tables).modules.insert(
            h,
            DriverModule {
                module,
                globals: BTreeMap::new(),
            },
        );
        Ok(h)
    }

    /// Whether `module` names a loaded module (`CUDA_ERROR_INVALID_HANDLE` if not).
    pub fn module_exists(&self, module: u64) -> R<()> {
        let c = self.owner(module, TAG_MODULE)?;
        if lock(&c.tables).modules.contains_key(&module) {
            Ok(())
        } else {
            Err(Fail::new(
                CUDA_ERROR_INVALID_HANDLE,
                format!("module {module:#x}"),
            ))
        }
    }

    pub fn module_unload(&self, _ctx: u64, module: u64) -> R<()> {
        let c = self.owner(module, TAG_MODULE)?;
        // Held launches of its kernels run first, and the context's queued work is
        // done before the module's code and variables go, as the driver's unload waits:
        // a program may launch and unload at once (NVIDIA's device-side-launch sample
        // does), and its kernels still read the module's variables.
        self.settle(|h| !h.any());
        let synced = self.backend.context_synchronize();
        let m = {
            let mut t = lock(&c.tables);
            let m = t.modules.remove(&module).ok_or_else(|| {
                Fail::new(CUDA_ERROR_INVALID_HANDLE, format!("module {module:#x}"))
            })?;
            t.functions.retain(|_, f| f.module != module);
            m
        };
        // SAFETY: the module's functions are gone from the tables, so the program's
        // later launches of them are refused, and the work queued before is done.
        let unloaded = unsafe { self.backend.module_unload(m.module) };
        // An error of earlier asynchronous work is this call's, as the driver's
        // cuModuleUnload may return one.
        synced?;
        Ok(unloaded?)
    }

    pub fn module_get_function(&self, _ctx: u64, module: u64, name: &str) -> R<u64> {
        let c = self.owner(module, TAG_MODULE)?;
        let function = {
            let t = lock(&c.tables);
            let m = t.modules.get(&module).ok_or_else(|| {
                Fail::new(CUDA_ERROR_INVALID_HANDLE, format!("module {module:#x}"))
            })?;
            self.backend.module_get_function(&m.module, name)?
        };
        let layout = self.backend.function_params(&function)?;
        let h = self.handle(c.id, TAG_FUNCTION);
        lock(&c.tables).functions.insert(
            h,
            Arc::new(DriverFunction {
                function,
                module,
                name: std::ffi::CString::new(name).map_err(|_| {
                    Fail::new(CUDA_ERROR_INVALID_VALUE, "a function name with a NUL byte")
                })?,
                layout,
            }),
        );
        Ok(h)
    }

    pub fn module_get_global(&self, _ctx: u64, module: u64, name: &str) -> R<(u64, u64)> {
        let c = self.owner(module, TAG_MODULE)?;
        let t = lock(&c.tables);
        let m = t
            .modules
            .get(&module)
            .ok_or_else(|| Fail::new(CUDA_ERROR_INVALID_HANDLE, format!("module {module:#x}")))?;
        let (p, bytes) = self.backend.module_get_global(&m.module, name)?;
        drop(t);
        if let Some(m) = lock(&c.tables).modules.get_mut(&module) {
            m.globals.insert(p.0, bytes as u64);
        }
        Ok((p.0, bytes as u64))
    }

    /// `cuFuncGetName`: the function's name, as long as its module is loaded.
    pub fn function_name(&self, function: u64) -> R<*const std::ffi::c_char> {
        let (_, f) = self.function(function)?;
        // The name lives in the function's record, which its module keeps.
        Ok(f.name.as_ptr())
    }

    /// `cuFuncGetAttribute`: an unknown attribute number is `CUDA_ERROR_INVALID_VALUE`.
    pub fn function_attribute(&self, function: u64, attribute: i32) -> R<i32> {
        let (_, f) = self.function(function)?;
        let a = FunctionAttribute::from_code(attribute).ok_or_else(|| {
            Fail::new(
                CUDA_ERROR_INVALID_VALUE,
                format!("function attribute {attribute}"),
            )
        })?;
        Ok(self.backend.function_attribute(&f.function, a)?)
    }

    /// `cuFuncSetAttribute`.
    pub fn function_set_attribute(&self, function: u64, attribute: i32, value: i32) -> R<()> {
        let (_, f) = self.function(function)?;
        let a = FunctionAttribute::from_code(attribute).ok_or_else(|| {
            Fail::new(
                CUDA_ERROR_INVALID_VALUE,
                format!("function attribute {attribute}"),
            )
        })?;
        Ok(self.backend.function_set_attribute(&f.function, a, value)?)
    }

    /// The function `function` names, in its context (bound on this thread).
    fn function(&self, function: u64) -> R<(Arc<DriverCtx>, Arc<DriverFunction>)> {
        let c = self.owner(function, TAG_FUNCTION)?;
        let f = lock(&c.tables)
            .functions
            .get(&function)
            .cloned()
            .ok_or_else(|| {
                Fail::new(CUDA_ERROR_INVALID_HANDLE, format!("function {function:#x}"))
            })?;
        Ok((c, f))
    }

    /// What the occupancy calculator needs of `function` and its device.
    pub fn occupancy(
        &self,
        function: u64,
    ) -> R<(
        vmgpu_cuda_api::occupancy::Limits,
        vmgpu_cuda_api::occupancy::Kernel,
    )> {
        let (c, f) = self.function(function)?;
        let device = self.device(self.ctx_device(c.id)?)?;
        Ok((
            vmgpu_cuda_api::occupancy::Limits::of(&*self.backend, device)?,
            vmgpu_cuda_api::occupancy::Kernel::of(&*self.backend, &f.function)?,
        ))
    }

    pub fn function_layout(&self, function: u64) -> R<Option<Vec<ParamLayout>>> {
        Ok(self.function(function)?.1.layout.clone())
    }

    /// `cuLaunchKernel`, or `cuLaunchCooperativeKernel` (`cooperative`: its grid is
    /// checked against what the device holds at once, occupancy times multiprocessors,
    /// as the driver does).
    pub fn launch(
        &self,
        _ctx: u64,
        function: u64,
        config: LaunchConfig,
        stream: u64,
        args: &[&[u8]],
        cooperative: bool,
    ) -> R<()> {
        let (c, f) = self.function(function)?;
        let s = self.stream(&c, stream)?;
        if cooperative {
            let (limits, kernel) = self.occupancy(function)?;
            let threads = config.block.iter().product::<u32>();
            let per_sm = limits.active_blocks(&kernel, threads, config.shared_bytes as u64);
            let most = per_sm as u64 * limits.sm_count as u64;
            let blocks = config.grid.iter().map(|&g| g as u64).product::<u64>();
            if blocks > most {
                return Err(Fail::new(
                    CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE,
                    format!(
                        "a grid of {blocks} blocks; the device holds {most} of these at once ({per_sm} per multiprocessor, {} multiprocessors)",
                        limits.sm_count
                    ),
                ));
            }
        }
        if self.divert(stream, || Op::Launch {
            function,
            config,
            args: args.iter().map(|a| Box::<[u8]>::from(*a)).collect(),
            cooperative,
        })? {
            return Ok(());
        }
        // SAFETY: the arguments were packed by the caller from the kernel's own PTX
        // parameter list (count and sizes), which the simulator checks again; the module
        // stays loaded while the function is in the tables; what the kernel reaches is
        // simulated device memory, checked by the simulator.
        unsafe {
            self.backend
                .launch_kind(LaunchKind::of(cooperative), &f.function, &config, &s, args)
        }?;
        Ok(())
    }

    pub fn mem_alloc(&self, ctx: u64, bytes: u64) -> R<u64> {
        let c = self.bound(ctx)?;
        let size = usize::try_from(bytes)
            .map_err(|_| Fail::new(CUDA_ERROR_OUT_OF_MEMORY, "allocation too large"))?;
        let p = self.backend.mem_alloc(size)?.0;
        let id = self.next_handle.fetch_add(1, Ordering::Relaxed);
        lock(&c.tables).allocs.insert(p, (bytes, id));
        Ok(p)
    }

    pub fn mem_free(&self, ctx: u64, ptr: u64) -> R<()> {
        let c = self.bound(ctx)?;
        // A graph's allocation stays while a graph holds its allocation node.
        if lock(&self.captures).graph_free(ptr) == Some(false) {
            return Ok(());
        }
        // Held work may use it (the driver's cuMemFree waits for the device too).
        self.settle(|h| !h.any());
        self.backend.mem_free(DevicePtr(ptr))?;
        let mut t = lock(&c.tables);
        t.allocs.remove(&ptr);
        t.managed.remove(&ptr);
        Ok(())
    }

    /// `cuMemAllocManaged`: memory the host and the device use at one address.
    pub fn mem_alloc_managed(&self, ctx: u64, bytes: u64) -> R<u64> {
        let c = self.bound(ctx)?;
        let size = usize::try_from(bytes)
            .map_err(|_| Fail::new(CUDA_ERROR_OUT_OF_MEMORY, "allocation too large"))?;
        let p = self.backend.mem_alloc_managed(size)?.0;
        let id = self.next_handle.fetch_add(1, Ordering::Relaxed);
        let mut t = lock(&c.tables);
        t.allocs.insert(p, (bytes, id));
        t.managed.insert(p);
        Ok(p)
    }

    /// `cuMemHostGetDevicePointer`: the device's address of page-locked host memory.
    pub fn host_device_pointer(&self, ctx: u64, host: *mut u8) -> R<u64> {
        self.bound(ctx)?;
        let dev = self.ctx_device(ctx)?;
        if self.device_attribute(dev, DeviceAttribute::CanMapHostMemory.code())? == 0 {
            // As NVIDIA's driver answers on a device that cannot map host memory.
            return Err(Fail::new(
                CUDA_ERROR_INVALID_VALUE,
                format!("device {dev} cannot map host memory (CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY is 0)"),
            ));
        }
        Ok(self.backend.host_device_pointer(host)?.0)
    }

    /// The allocation `ptr` points into: device memory of a live context (an
    /// allocation, or a module variable whose address the program asked for), else
    /// page-locked host memory; `None` for memory the driver did not make.
    pub fn pointer(&self, ptr: u64) -> Option<PointerInfo> {
        let inside = |base: u64, size: u64| ptr >= base && ptr - base < size.max(1);
        let contexts: Vec<Arc<DriverCtx>> = lock(&self.primary)
            .values()
            .filter_map(|p| p.ctx.clone())
            .chain(lock(&self.created).values().cloned())
            .collect();
        for c in &contexts {
            let t = lock(&c.tables);
            if let Some((&base, &(size, buffer_id))) = t.allocs.range(..=ptr).next_back() {
                if inside(base, size) {
                    return Some(PointerInfo {
                        ctx: c.id,
                        base,
                        size,
                        buffer_id,
                        host: false,
                        managed: t.managed.contains(&base),
                    });
                }
            }
            for m in t.modules.values() {
                if let Some((&base, &size)) = m.globals.range(..=ptr).next_back() {
                    if inside(base, size) {
                        return Some(PointerInfo {
                            ctx: c.id,
                            base,
                            size,
                            // A variable's number: its address (it lives as long as its
                            // module, and no allocation starts at it meanwhile).
                            buffer_id: base,
                            host: false,
                            managed: false,
                        });
                    }
                }
            }
        }
        lock(&self.host).iter().find_map(|(&base, (c, h))| {
            let size = h.len() as u64;
            inside(base as u64, size).then_some(PointerInfo {
                ctx: c.id,
                base: base as u64,
                size,
                buffer_id: base as u64,
                host: true,
                managed: false,
            })
        })
    }

    pub fn memset(
        &self,
        ctx: u64,
        dst: u64,
        value: u32,
        width: u32,
        count: u64,
        stream: Option<u64>,
    ) -> R<()> {
        let c = self.bound(ctx)?;
        let d = DevicePtr(dst);
        let n = usize::try_from(count)
            .map_err(|_| Fail::new(CUDA_ERROR_INVALID_VALUE, "memset size overflows"))?;
        let st = match stream {
            Some(s) => Some(self.stream(&c, s)?),
            None => None,
        };
        if let Some(s) = stream {
            if self.divert(s, || Op::Memset {
                dst,
                value,
                width,
                count,
            })? {
                return Ok(());
            }
        }
        // SAFETY: the program's device range (the backend checks it against its
        // allocations); a memset writes device memory only.
        unsafe {
            match (width, st) {
                (1, None) => self.backend.memset_d8(d, value as u8, n)?,
                (2, None) => self.backend.memset_d16(d, value as u16, n)?,
                (_, None) => self.backend.memset_d32(d, value, n)?,
                (1, Some(s)) => self.backend.memset_d8_async(d, value as u8, n, &s)?,
                (2, Some(s)) => self.backend.memset_d16_async(d, value as u16, n, &s)?,
                (_, Some(s)) => self.backend.memset_d32_async(d, value, n, &s)?,
            }
        }
        // The synchronous form is asynchronous for device memory, but not when the
        // host reaches the memory (page-locked or managed): it returns once done.
        if stream.is_none() && self.pointer(dst).is_some_and(|i| i.host || i.managed) {
            self.backend.stream_synchronize(&Stream::DEFAULT)?;
        }
        Ok(())
    }

    pub unsafe fn memcpy_htod(
        &self,
        ctx: u64,
        dst: u64,
        src: *const u8,
        bytes: usize,
        stream: Option<u64>,
        pinned: bool,
    ) -> R<()> {
        let c = self.bound(ctx)?;
        if let Some(s) = stream {
            if self.divert(s, || Op::HtoD {
                dst,
                src: src as usize,
                bytes,
                pinned,
            })? {
                return Ok(());
            }
        }
        match stream {
            None => {
                // SAFETY: the caller guarantees `src..src+bytes` is readable.
                let data = unsafe { std::slice::from_raw_parts(src, bytes) };
                // SAFETY: the destination is simulated device memory, range-checked.
                unsafe { self.backend.memcpy_htod(DevicePtr(dst), data) }?;
            }
            Some(s) if pinned => {
                let st = self.stream(&c, s)?;
                // SAFETY: the caller guarantees the pinned source stays readable until
                // the stream passes the copy (cuMemcpyHtoDAsync's contract).
                unsafe {
                    self.backend
                        .memcpy_htod_async(DevicePtr(dst), src, bytes, &st)
                }?;
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
                    self.backend
                        .memcpy_htod_async(DevicePtr(dst), staged.as_ptr(), bytes, &st)
                }?;
                lock(&c.tables).keepalive.push((s, staged));
            }
        }
        Ok(())
    }

    pub unsafe fn memcpy_dtoh(
        &self,
        ctx: u64,
        dst: *mut u8,
        src: u64,
        bytes: usize,
        stream: Option<u64>,
        pinned: bool,
    ) -> R<()> {
        let c = self.bound(ctx)?;
        if let Some(s) = stream {
            if self.divert(s, || Op::DtoH {
                dst: dst as usize,
                src,
                bytes,
                pinned,
            })? {
                return Ok(());
            }
        }
        match stream {
            None => {
                // SAFETY: the caller guarantees `dst..dst+bytes` is writable and unused.
                let out = unsafe { std::slice::from_raw_parts_mut(dst, bytes) };
                // SAFETY: the source is simulated device memory, range-checked.
                unsafe { self.backend.memcpy_dtoh(out, DevicePtr(src)) }?;
            }
            Some(s) => {
                let st = self.stream(&c, s)?;
                // SAFETY: the caller guarantees the destination stays writable and
                // unused until the stream passes the copy; for pageable memory that is
                // before this call returns (synchronised below).
                unsafe {
                    self.backend
                        .memcpy_dtoh_async(dst, DevicePtr(src), bytes, &st)
                }?;
                if !pinned {
                    // Pageable: the driver returns once the copy is done.
                    self.backend.stream_synchronize(&st)?;
                }
            }
        }
        Ok(())
    }

    pub fn memcpy_dtod(
        &self,
        ctx: u64,
        dst: u64,
        src: u64,
        bytes: u64,
        stream: Option<u64>,
    ) -> R<()> {
        let c = self.bound(ctx)?;
        let n = usize::try_from(bytes)
            .map_err(|_| Fail::new(CUDA_ERROR_INVALID_VALUE, "copy too large"))?;
        if let Some(s) = stream {
            if self.divert(s, || Op::DtoD { dst, src, bytes })? {
                return Ok(());
            }
        }
        // SAFETY: both ranges are simulated device memory, range-checked by the
        // simulator.
        unsafe {
            match stream {
                None => self
                    .backend
                    .memcpy_dtod(DevicePtr(dst), DevicePtr(src), n)?,
                Some(s) => {
                    let st = self.stream(&c, s)?;
                    self.backend
                        .memcpy_dtod_async(DevicePtr(dst), DevicePtr(src), n, &st)?
                }
            }
        }
        Ok(())
    }

    pub fn host_alloc(&self, ctx: u64, bytes: usize, flags: u32) -> R<*mut u8> {
        let c = self.bound(ctx)?;
        let h = self.backend.host_alloc(
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

    pub unsafe fn host_free(&self, ptr: *mut u8) -> R<()> {
        self.settle(|h| !h.any());
        let (c, h) = lock(&self.host)
            .remove(&(ptr as usize))
            .ok_or_else(|| Fail::new(CUDA_ERROR_INVALID_VALUE, "not memory from cuMemHostAlloc"))?;
        c.bind(&*self.backend)?;
        // SAFETY: the caller guarantees nothing uses the memory afterwards.
        unsafe { self.backend.host_free(h) }?;
        Ok(())
    }

    pub unsafe fn host_register(&self, ctx: u64, ptr: *mut u8, bytes: usize, flags: u32) -> R<()> {
        self.bound(ctx)?;
        let f = HostRegisterFlags {
            portable: flags & CU_MEMHOSTREGISTER_PORTABLE != 0,
            device_map: flags & CU_MEMHOSTREGISTER_DEVICEMAP != 0,
            read_only: flags & CU_MEMHOSTREGISTER_READ_ONLY != 0,
        };
        // SAFETY: the caller guarantees the range stays mapped until unregistered.
        unsafe { self.backend.host_register(ptr, bytes, f) }?;
        Ok(())
    }

    pub unsafe fn host_unregister(&self, ctx: u64, ptr: *mut u8) -> R<()> {
        self.bound(ctx)?;
        self.settle(|h| !h.any());
        // SAFETY: the caller guarantees no pending operation uses the range.
        unsafe { self.backend.host_unregister(ptr) }?;
        Ok(())
    }

    pub fn stream_create(&self, ctx: u64, flags: u32, _priority: i32) -> R<u64> {
        let c = self.bound(ctx)?;
        let s = self.backend.stream_create(StreamFlags {
            non_blocking: flags & CU_STREAM_NON_BLOCKING != 0,
        })?;
        let h = self.handle(ctx, TAG_STREAM);
        lock(&self.holds).stream_created(h, flags & CU_STREAM_NON_BLOCKING != 0);
        lock(&c.tables).streams.insert(h, Arc::new(s));
        Ok(h)
    }

    /// The context of `stream`: the current one (`ctx`) for the default streams, the
    /// one that created it otherwise (a stream it still holds).
    pub fn stream_context(&self, ctx: u64, stream: u64) -> R<u64> {
        // The stream is checked: a live context's stream.
        self.stream_in(ctx, stream)?;
        Ok(if stream <= STREAM_PER_THREAD {
            ctx
        } else {
            stream >> CTX_SHIFT
        })
    }

    /// `cuStreamGetFlags`: `CU_STREAM_NON_BLOCKING` for a stream made so, else 0 (the
    /// default streams too).
    pub fn stream_flags(&self, ctx: u64, stream: u64) -> R<u32> {
        self.stream_in(ctx, stream)?;
        Ok(if lock(&self.holds).is_non_blocking(stream) {
            CU_STREAM_NON_BLOCKING
        } else {
            0
        })
    }

    /// `cuStreamSetAttribute`: kept (the simulator has no L2 cache to steer, and the
    /// others are hints) for `cuStreamGetAttribute`; an access policy window is checked
    /// against the device's largest and a hit ratio within 0 to 1.
    pub fn stream_set_attribute(
        &self,
        ctx: u64,
        stream: u64,
        attr: i32,
        v: StreamAttrValue,
    ) -> R<()> {
        let (c, _) = self.stream_in(ctx, stream)?;
        if !STREAM_ATTRS.contains(&attr) {
            return Err(Fail::new(
                CUDA_ERROR_INVALID_VALUE,
                format!("stream attribute {attr}"),
            ));
        }
        if attr == 1 {
            // base_ptr, num_bytes, hitRatio (f32), hitProp, missProp.
            let bytes = v[1];
            let ratio = f32::from_bits(v[2] as u32);
            let max = self
                .backend
                .device_attribute(Device::new(c.device), DeviceAttribute::Raw(109))
                .unwrap_or(0)
                .max(0) as u64;
            if bytes > max || !(0.0..=1.0).contains(&ratio) {
                return Err(Fail::new(
                    CUDA_ERROR_INVALID_VALUE,
                    format!(
                        "access policy window of {bytes} bytes (the device's largest is \
                         {max}), hit ratio {ratio}"
                    ),
                ));
            }
        }
        lock(&c.tables).stream_attrs.insert((stream, attr), v);
        Ok(())
    }

    /// `cuStreamGetAttribute`: what `cuStreamSetAttribute` set, else a fresh stream's
    /// (all zero: no window, the default policy, priority 0).
    pub fn stream_get_attribute(&self, ctx: u64, stream: u64, attr: i32) -> R<StreamAttrValue> {
        let (c, _) = self.stream_in(ctx, stream)?;
        if !STREAM_ATTRS.contains(&attr) {
            return Err(Fail::new(
                CUDA_ERROR_INVALID_VALUE,
                format!("stream attribute {attr}"),
            ));
        }
        let v = lock(&c.tables)
            .stream_attrs
            .get(&(stream, attr))
            .copied()
            .unwrap_or_default();
        Ok(v)
    }

    /// `cuStreamGetId`: a number unique to the stream in the process (a created
    /// stream's handle; the legacy default stream 1, the per-thread one 2).
    pub fn stream_id(&self, ctx: u64, stream: u64) -> R<u64> {
        self.stream_in(ctx, stream)?;
        Ok(match stream {
            0 | 1 => 1,
            s => s,
        })
    }

    pub fn stream_destroy(&self, _ctx: u64, stream: u64) -> R<()> {
        let c = self.owner(stream, TAG_STREAM)?;
        // Its held work still runs, as its pending work does.
        self.settle(|h| !h.held(stream));
        lock(&self.holds).stream_destroyed(stream);
        let s = {
            let mut t = lock(&c.tables);
            t.stream_attrs.retain(|(st, _), _| *st != stream);
            t.streams.remove(&stream)
        }
        .ok_or_else(|| Fail::new(CUDA_ERROR_INVALID_HANDLE, format!("stream {stream:#x}")))?;
        match unwrap_arc(s) {
            Some(s) => self.backend.stream_destroy(s)?,
            None => log_busy("stream", stream),
        }
        Ok(())
    }

    pub fn stream_synchronize(&self, ctx: u64, stream: u64) -> R<()> {
        let (c, s) = self.stream_in(ctx, stream)?;
        lock(&self.captures).refuse(stream, "cuStreamSynchronize")?;
        self.settle(|h| !h.held(stream));
        let r = self.backend.stream_synchronize(&s);
        if let Some(f) = lock(&self.holds).take_failure(stream) {
            return Err(f);
        }
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

    /// `cuLaunchHostFunc`, `cuStreamAddCallback`: `f` after the stream's work so far.
    pub fn stream_host_func(&'static self, ctx: u64, stream: u64, f: RepeatableHostFunc) -> R<()> {
        let (_, s) = self.stream_in(ctx, stream)?;
        if self.divert(stream, || Op::HostFunc(f.clone()))? {
            return Ok(());
        }
        if self.backend.host_funcs_block_caller() {
            let mut h = lock(&self.holds);
            if h.may_hold(stream) {
                h.hold(ctx, stream, Op::HostFunc(f.clone()));
                // Started under the lock: nothing is queued behind the function until
                // its thread exists.
                let started = std::thread::Builder::new()
                    .name("vmgpu-held-stream".into())
                    .spawn(move || self.submit_held(stream));
                match started {
                    Ok(_) => return Ok(()),
                    Err(e) => {
                        crate::log::warn(&format!(
                            "cannot start a thread for a host function ({e}): it runs in the caller"
                        ));
                        h.next(stream);
                        h.next(stream);
                    }
                }
            }
        }
        let once: HostFunc = Box::new(move |r| f(r));
        Ok(self.backend.stream_host_func(&s, once)?)
    }

    /// Whether `stream` names a live stream (or a default stream of a context).
    pub fn stream_exists(&self, ctx: u64, stream: u64) -> R<()> {
        self.stream_in(ctx, stream).map(drop)
    }

    pub fn stream_query(&self, ctx: u64, stream: u64) -> R<bool> {
        let (_, s) = self.stream_in(ctx, stream)?;
        lock(&self.captures).refuse(stream, "cuStreamQuery")?;
        if lock(&self.holds).held(stream) {
            return Ok(false);
        }
        Ok(self.backend.stream_query(&s)?)
    }

    pub fn stream_wait_event(&self, _ctx: u64, stream: u64, event: u64, _flags: u32) -> R<()> {
        let c = self.owner(event, TAG_EVENT)?;
        if lock(&self.captures).wait_event(stream, event)? {
            return Ok(());
        }
        if lock(&self.holds).queue(stream, || Held::Wait(event)) {
            return Ok(());
        }
        // A record still held behind another stream's host function is waited for here.
        self.settle(|h| !h.event_pending(event));
        if stream > STREAM_PER_THREAD && stream >> CTX_SHIFT != c.id {
            // A stream of another context: it waits for this one's event. On the
            // simulator every context runs its work in submission order, so waiting for
            // the event on the host gives the same order.
            let e = self.event(&c, event)?;
            self.backend.event_synchronize(&e)?;
            return Ok(());
        }
        let s = self.stream(&c, stream)?;
        let e = self.event(&c, event)?;
        self.backend.stream_wait_event(&s, &e)?;
        Ok(())
    }

    pub fn event_create(&self, ctx: u64, flags: u32) -> R<u64> {
        let c = self.bound(ctx)?;
        if flags & !(CU_EVENT_BLOCKING_SYNC | CU_EVENT_DISABLE_TIMING) != 0 {
            return Err(Fail::new(
                CUDA_ERROR_NOT_SUPPORTED,
                format!("event flags {flags:#x} (interprocess events are not supported)"),
            ));
        }
        let e = self.backend.event_create(EventFlags {
            blocking_sync: flags & CU_EVENT_BLOCKING_SYNC != 0,
            disable_timing: flags & CU_EVENT_DISABLE_TIMING != 0,
        })?;
        let h = self.handle(ctx, TAG_EVENT);
        lock(&c.tables).events.insert(h, Arc::new(e));
        Ok(h)
    }

    /// `CUDA_ERROR_INVALID_HANDLE` unless `event` is a live event.
    pub fn event_known(&self, event: u64) -> R<()> {
        self.owner(event, TAG_EVENT).map(drop)
    }

    pub fn event_record(&self, _ctx: u64, event: u64, stream: u64) -> R<()> {
        let c = self.owner(event, TAG_EVENT)?;
        let e = self.event(&c, event)?;
        let s = self.stream(&c, stream)?;
        if lock(&self.captures).event_record(event, stream)? {
            return Ok(());
        }
        if lock(&self.holds).queue(stream, || Held::Record(event)) {
            return Ok(());
        }
        self.backend.event_record(&e, &s)?;
        Ok(())
    }

    pub fn event_synchronize(&self, _ctx: u64, event: u64) -> R<()> {
        let c = self.owner(event, TAG_EVENT)?;
        let e = self.event(&c, event)?;
        lock(&self.captures).check_event(event, "cuEventSynchronize")?;
        self.settle(|h| !h.event_pending(event));
        self.backend.event_synchronize(&e)?;
        Ok(())
    }

    pub fn event_query(&self, _ctx: u64, event: u64) -> R<bool> {
        let c = self.owner(event, TAG_EVENT)?;
        let e = self.event(&c, event)?;
        lock(&self.captures).check_event(event, "cuEventQuery")?;
        if lock(&self.holds).event_pending(event) {
            return Ok(false);
        }
        Ok(self.backend.event_query(&e)?)
    }

    pub fn event_elapsed(&self, _ctx: u64, start: u64, end: u64) -> R<f32> {
        let c = self.owner(start, TAG_EVENT)?;
        if end >> CTX_SHIFT != c.id {
            return Err(Fail::new(
                CUDA_ERROR_INVALID_HANDLE,
                "the events belong to different contexts",
            ));
        }
        let a = self.event(&c, start)?;
        let b = self.event(&c, end)?;
        Ok(self.backend.event_elapsed_ms(&a, &b)?)
    }

    pub fn event_destroy(&self, _ctx: u64, event: u64) -> R<()> {
        let c = self.owner(event, TAG_EVENT)?;
        let e = lock(&c.tables)
            .events
            .remove(&event)
            .ok_or_else(|| Fail::new(CUDA_ERROR_INVALID_HANDLE, format!("event {event:#x}")))?;
        match unwrap_arc(e) {
            Some(e) => self.backend.event_destroy(e)?,
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

/// Copies between contexts (of one device or of two).
impl Driver {
    /// `cuMemcpyPeer[Async]`: `bytes` from `src` in context `src_ctx` to `dst` in
    /// `dst_ctx`. Within one context a device-to-device copy; between two, through the
    /// host, as the driver copies between devices without peer access (the simulated
    /// devices have separate memories). The asynchronous form is ordered after its
    /// stream's work so far and done when it returns.
    #[allow(clippy::too_many_arguments)]
    pub fn memcpy_peer(
        &self,
        ctx: u64,
        dst: u64,
        dst_ctx: u64,
        src: u64,
        src_ctx: u64,
        bytes: usize,
        stream: Option<u64>,
    ) -> R<()> {
        if dst_ctx == src_ctx {
            return self.memcpy_dtod(dst_ctx, dst, src, bytes as u64, stream);
        }
        if let Some(s) = stream {
            lock(&self.captures).refuse(s, "cuMemcpyPeerAsync")?;
            self.stream_synchronize(ctx, s)?;
        }
        let mut buf = Vec::new();
        buf.try_reserve_exact(bytes).map_err(|_| {
            Fail::new(
                CUDA_ERROR_OUT_OF_MEMORY,
                format!("{bytes} bytes of staging"),
            )
        })?;
        buf.resize(bytes, 0u8);
        self.bound(src_ctx)?;
        // SAFETY: `buf` is this call's own buffer of `bytes` bytes; the source is device
        // memory of `src_ctx`, range-checked by the backend.
        unsafe { self.backend.memcpy_dtoh(&mut buf, DevicePtr(src)) }?;
        self.bound(dst_ctx)?;
        // SAFETY: the destination is device memory of `dst_ctx`, range-checked by the
        // backend; the synchronous copy is done with `buf` when it returns.
        unsafe { self.backend.memcpy_htod(DevicePtr(dst), &buf) }?;
        Ok(())
    }

    /// `cuDeviceCanAccessPeer`: whether kernels on `dev` reach `peer`'s memory: never
    /// between two devices here (each has memory of its own; `cuMemcpyPeer` copies).
    pub fn can_access_peer(&self, dev: u32, peer: u32) -> R<bool> {
        self.device(dev)?;
        self.device(peer)?;
        Ok(false)
    }
}

/// Stream capture and graphs ([`crate::capture`]).
impl Driver {
    /// `cuStreamBeginCapture`: a created stream of a live context starts recording.
    pub fn capture_begin(&self, ctx: u64, stream: u64) -> R<()> {
        if stream <= STREAM_PER_THREAD {
            return Err(Fail::new(
                CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED,
                "a default stream cannot be captured here (capture a created stream)",
            ));
        }
        self.stream_in(ctx, stream)?;
        lock(&self.captures).begin(stream)
    }

    /// `cuStreamBeginCaptureToGraph`: `stream` captures into the program's `graph`,
    /// after its nodes `deps`.
    pub fn capture_begin_to_graph(&self, ctx: u64, stream: u64, graph: u64, deps: &[u64]) -> R<()> {
        if stream <= STREAM_PER_THREAD {
            return Err(Fail::new(
                CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED,
                "a default stream cannot be captured here (capture a created stream)",
            ));
        }
        self.stream_in(ctx, stream)?;
        lock(&self.captures).begin_to_graph(stream, graph, deps)
    }

    /// `cuStreamEndCapture`: the graph recorded.
    pub fn capture_end(&self, ctx: u64, stream: u64) -> R<u64> {
        self.stream_in(ctx, stream)?;
        lock(&self.captures).end(stream)
    }

    /// `cuStreamIsCapturing`, `cuStreamGetCaptureInfo`: the status and the sequence.
    pub fn capture_status(&self, ctx: u64, stream: u64) -> R<(i32, u64)> {
        self.stream_in(ctx, stream)?;
        Ok(lock(&self.captures).status(stream))
    }

    /// The graph calls that need only the capture state.
    pub fn graphs(&self) -> std::sync::MutexGuard<'_, Captures> {
        lock(&self.captures)
    }

    /// `cuGraphLaunch`: the executable graph's work, in order, on `stream`.
    pub fn graph_launch(&'static self, ctx: u64, exec: u64, stream: u64) -> R<()> {
        let ops = lock(&self.captures).exec(exec)?;
        self.stream_in(ctx, stream)?;
        for op in ops.iter() {
            self.submit(ctx, stream, op.clone())?;
        }
        Ok(())
    }
}

/// The PTX the simulator runs from fatbin `image` (a whole fatbin, its header first;
/// [`vmgpu_ptx::fatbin::best_ptx`]): machine code only is `CUDA_ERROR_NO_BINARY_FOR_GPU`
/// naming the flag that embeds PTX, a damaged fatbin `CUDA_ERROR_INVALID_IMAGE`.
pub(crate) fn fatbin_ptx(image: &[u8], what: &str) -> R<String> {
    use vmgpu_ptx::fatbin::{self, FatbinError};
    fatbin::best_ptx(image).map(|e| e.ptx).map_err(|e| {
        let code = match e {
            FatbinError::NoPtx { .. } | FatbinError::Empty => CUDA_ERROR_NO_BINARY_FOR_GPU,
            _ => CUDA_ERROR_INVALID_IMAGE,
        };
        Fail::new(code, format!("{what}: {e}"))
    })
}
