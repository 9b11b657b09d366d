//! The client side of the protocol as a [`Backend`]: [`RemoteBackend`] forwards every
//! driver call to a vmgpu CUDA service over a Unix socket (`unix:PATH`), AF_VSOCK
//! (`vsock:CID:PORT`) or a virtio-serial port (`port:PATH`). A proxy is just another
//! implementer of the driver API; the guest's `libcuda.so.1` is a C-ABI adapter over
//! `dyn Backend`, whichever backend it runs on.
//!
//! # The session
//! One connection (one session on the server) per backend, opened at the first call
//! that needs the service, not at [`RemoteBackend::new`]: a process that only loads the
//! library (NVRTC calls `cuInit` while it compiles) opens none. Once the program has
//! called `cuInit` ([`RemoteBackend::set_init_flags`]), the session's next request is
//! `Init` with its flags, before anything else (the service answers
//! `CUDA_ERROR_NOT_INITIALIZED` to device, context and memory requests before it). A
//! connection that cannot be opened fails that call and every later one with
//! `CUDA_ERROR_NOT_INITIALIZED` naming the address (logged once, at warn); a connection
//! that breaks later fails every later call. The session ends with `Goodbye` when the
//! backend is dropped, or at process exit (`atexit`) for a backend still alive then; on
//! a virtio-serial port the process then waits (up to 5 s) for the host to hang up, so
//! that the next process's hello reaches the host's next connection.
//!
//! # Contexts
//! The current context is per thread and per backend instance
//! ([`Backend::context_set_current`]); the connection's current context belongs to the
//! connection, so before a request that works in a context the client sends
//! `CtxSetCurrent` whenever the context it needs differs from the one it last set. A
//! request that names an object (stream, event, module, function) is sent in that
//! object's context, as CUDA does: work on a stream goes to the stream's context,
//! whichever is current; the default stream is the current context's. So the server
//! sees mixed contexts (an event of one context recorded on a stream of another) and
//! refuses them as the driver does. A request that works in a context with none
//! current and no object is `CUDA_ERROR_INVALID_CONTEXT`, without asking the server.
//!
//! The primary context keeps the handle of its first retain: the server gives a new
//! one after a reset (which the protocol lacks: the client releases every reference
//! and retains them again) or after the last release, and the client maps the one the
//! program holds to the server's current one. `cuCtxCreate`/`cuCtxDestroy` are
//! `CtxCreate`/`CtxDestroy` (protocol 1.1; `CUDA_ERROR_NOT_SUPPORTED` on a 1.0
//! session), as are module variables and function attributes.
//!
//! # Pipelining
//! Launches, asynchronous memsets, host-to-device and device-to-device copies, event
//! records and stream waits go out with `NO_REPLY` (when the server grants pipelining),
//! batched until a reply is needed, and return at once; their failures come back from
//! the next synchronising call, with the request that caused them in the detail.
//! [`Backend::memcpy_htod_async`] takes its bytes at the call (pageable semantics, so the
//! source may be reused at once): a large copy's bytes are written to the transport from
//! the source before it returns, a small one's copied into the batch.
//! [`Backend::memcpy_dtoh_async`] is sent without waiting; its data is written into the
//! destination when its reply is read, at the latest by the next call that waits for a
//! reply (every synchronising call does). Copies larger than the session's `max_inline`
//! are split. While data replies may be unread, the client writes nothing large before
//! reading them (the server writes replies with blocking writes and reads no request
//! meanwhile), and it never leaves more than 1 MiB of them unread.
//!
//! The synchronous memsets and copies are the protocol's synchronous requests (whose
//! "context" scope reports earlier deferred errors of the context), not the trait's
//! provided forms. A launch's geometry and dynamic shared memory are checked at the call
//! (against the device's limits and the kernel's `MAX_DYNAMIC_SHARED_SIZE_BYTES`, asked
//! once each), as the driver refuses them there, not at the next synchronisation.
//!
//! # Host memory
//! [`Backend::host_alloc`] is page-aligned host memory of this process (the copies go
//! through the connection either way); memory still allocated when the backend is
//! dropped is left allocated. [`Backend::host_register`] records the range, with the
//! driver's errors for overlapping and unknown ranges.

mod conn;
mod managed;
mod transport;

use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

use conn::{goodbye_at_exit_of, lock, not_ready, unexpected, Conn, Fail, Pending, R};
use transport::{handshake, wait_hangup, Addr, HANGUP_WAIT};

use crate::{
    ContextId, EventId, Features, FunctionId, HostDest, KernelParams, Limits, MemsetWidth,
    ModuleId, ReplyBody, Request, StreamId,
};
use vmgpu_cuda_api::LaunchKind;
use vmgpu_cuda_api::{
    check_owner, next_instance_id, sys, Backend, BackendKind, Context, Device, DeviceAttribute,
    DevicePtr, Event, EventFlags, Function, FunctionAttribute, HostAlloc, HostAllocFlags,
    HostRegisterFlags, LaunchConfig, MemInfo, Module, ParamLayout, Result, Stream, StreamFlags,
};

thread_local! {
    /// Per backend instance: the handle of the context current on this thread.
    static CURRENT: RefCell<Vec<(u32, u64)>> = const { RefCell::new(Vec::new()) };
}

/// The context current on this thread for backend `id`.
fn current_of(id: u32) -> Option<u64> {
    CURRENT
        .try_with(|c| {
            c.try_borrow()
                .ok()
                .and_then(|v| v.iter().find(|(i, _)| *i == id).map(|(_, h)| *h))
        })
        .ok()
        .flatten()
}

/// Sets (or with `None` clears) the context current on this thread for backend `id`.
fn set_current(id: u32, ctx: Option<u64>) {
    let _ = CURRENT.try_with(|c| {
        if let Ok(mut v) = c.try_borrow_mut() {
            v.retain(|(i, _)| *i != id);
            if let Some(h) = ctx {
                v.push((id, h));
            }
        }
    });
}

/// Runs `f` as CUDA entry point `op`: its failure is a `DriverError::Cuda` naming `op`.
fn run<T>(op: &'static str, f: impl FnOnce() -> R<T>) -> Result<T> {
    f().map_err(|e| e.at(op))
}

/// A context the program holds, by the handle it holds.
#[derive(Debug, Clone)]
struct Ctx {
    /// Its device.
    device: u32,
    /// The server's handle of it now.
    server: u64,
    /// The device's primary context (else one from `CtxCreate`).
    primary: bool,
    /// References from `PrimaryCtxRetain` (primary contexts).
    refs: u64,
}

/// A kernel: its context and module, its parameter layout (`None`: the server does not
/// know it) and its dynamic shared memory maximum once asked.
#[derive(Debug, Clone)]
struct Func {
    ctx: u64,
    module: u64,
    layout: Option<Vec<ParamLayout>>,
    max_dynamic: Option<u32>,
}

/// What the client keeps about the session: contexts, the context of every object, and
/// host memory.
#[derive(Debug, Default)]
struct State {
    /// By the handle the program holds.
    contexts: HashMap<u64, Ctx>,
    /// Per device: the handle of its primary context.
    primary: HashMap<u32, u64>,
    /// Module handle to its context.
    modules: HashMap<u64, u64>,
    /// Function handles.
    functions: HashMap<u64, Func>,
    /// Stream handle to its context.
    streams: HashMap<u64, u64>,
    /// Event handle to its context.
    events: HashMap<u64, u64>,
    /// Per device: `MAX_THREADS_PER_BLOCK`, `MAX_BLOCK_DIM_X/Y/Z`, `MAX_GRID_DIM_X/Y/Z`.
    launch_limits: HashMap<u32, [i32; 7]>,
    /// Page-locked host memory (page-aligned memory here): address to layout.
    host: HashMap<usize, std::alloc::Layout>,
    /// Registered host ranges (recorded only): start to length.
    registered: BTreeMap<usize, usize>,
}

impl State {
    /// Forgets every object made in context `ctx` (destroyed, reset or released).
    fn forget_objects_of(&mut self, ctx: u64) {
        self.modules.retain(|_, c| *c != ctx);
        self.functions.retain(|_, f| f.ctx != ctx);
        self.streams.retain(|_, c| *c != ctx);
        self.events.retain(|_, c| *c != ctx);
    }

    /// A context handle for the program: the server's `server`, unless a context it
    /// holds already has that handle (never with vmgpu's service, whose handles are not
    /// reused).
    fn fresh_handle(&self, server: u64) -> u64 {
        let mut h = server;
        while h == 0 || self.contexts.contains_key(&h) {
            h = h.wrapping_add(1);
        }
        h
    }
}

/// What a request works on: the calling thread's current context, or the object it
/// names (whose context it is sent in).
#[derive(Debug, Clone, Copy)]
pub(crate) enum On<'a> {
    Current,
    Stream(&'a Stream),
    Event(&'a Event),
    Module(&'a Module),
    Function(&'a Function),
}

/// An argument of a generated stub ([`crate::commands`]): the object it names, if any,
/// whose context the request is sent in.
pub(crate) trait Arg {
    /// The object named (the default: none, a value).
    fn on(&self) -> Option<On<'_>> {
        None
    }
}

/// An argument of a generated stub as its request field of type `W`.
pub(crate) trait ToWire<W> {
    /// The field's value.
    fn to_wire(&self) -> W;
}

/// Values that name no object, each with its field.
macro_rules! value_args {
    ($($t:ty => $w:ty: |$v:ident| $e:expr;)*) => {$(
        impl Arg for $t {}
        impl ToWire<$w> for $t {
            fn to_wire(&self) -> $w {
                let $v = self;
                $e
            }
        }
    )*};
}
value_args! {
    i32 => i32: |v| *v;
    u32 => u32: |v| *v;
    u64 => u64: |v| *v;
    &str => String: |v| v.to_string();
    Device => u32: |v| v.ordinal();
    DeviceAttribute => i32: |v| v.code();
    FunctionAttribute => i32: |v| v.code();
}

/// Handles, each naming its object and sent as its id.
macro_rules! object_args {
    ($($t:ident => $on:ident, $id:ident;)*) => {$(
        impl Arg for &$t {
            fn on(&self) -> Option<On<'_>> {
                Some(On::$on(self))
            }
        }
        impl ToWire<$id> for &$t {
            fn to_wire(&self) -> $id {
                $id(self.raw())
            }
        }
    )*};
}
object_args! {
    Stream => Stream, StreamId;
    Event => Event, EventId;
    Module => Module, ModuleId;
    Function => Function, FunctionId;
}

/// Whether `s` is one of the default streams (0, `CU_STREAM_LEGACY`,
/// `CU_STREAM_PER_THREAD`): the current context's.
fn is_default(s: &Stream) -> bool {
    s.raw() < StreamId::FIRST_HANDLE
}

fn invalid_handle(what: &str, raw: u64) -> Fail {
    Fail::new(
        sys::CUDA_ERROR_INVALID_HANDLE,
        format!("{what} {raw:#x} is not a live {what} of this backend"),
    )
}

fn invalid_value(why: impl Into<String>) -> Fail {
    Fail::new(sys::CUDA_ERROR_INVALID_VALUE, why)
}

/// [`Backend`] over a session with a vmgpu CUDA service (see the [module](self)).
#[derive(Debug)]
pub struct RemoteBackend {
    id: u32,
    server: String,
    addr: Addr,
    /// The connection, or why it could not be opened (every later call answers that).
    conn: OnceLock<std::result::Result<Arc<Mutex<Conn>>, Fail>>,
    /// The flags of the program's `cuInit`, once it has called it.
    init_flags: OnceLock<u32>,
    state: Mutex<State>,
    /// Managed memory: the guest's mappings of it and what was last exchanged.
    managed: managed::Mirrors,
}

impl RemoteBackend {
    /// A backend forwarding to `server` (`unix:PATH`, `vsock:CID:PORT`, `port:PATH`),
    /// not connected yet; a malformed address is `CUDA_ERROR_NOT_INITIALIZED`.
    pub fn new(server: &str) -> Result<RemoteBackend> {
        let addr = Addr::parse(server).map_err(|f| f.at("cuInit"))?;
        Ok(RemoteBackend {
            id: next_instance_id(),
            server: server.to_string(),
            addr,
            conn: OnceLock::new(),
            init_flags: OnceLock::new(),
            state: Mutex::new(State::default()),
            managed: managed::Mirrors::default(),
        })
    }

    /// `cuInit(flags)` was called: `Init { flags }` is the session's first request
    /// after the handshake (sent when the connection opens, or before the next request
    /// if it is open already). It never connects by itself. Later calls keep the first
    /// flags.
    pub fn set_init_flags(&self, flags: u32) {
        let _ = self.init_flags.set(flags);
    }

    /// The address it forwards to.
    pub fn server(&self) -> &str {
        &self.server
    }

    fn state(&self) -> MutexGuard<'_, State> {
        lock(&self.state)
    }

    /// Connects and shakes hands: a new session.
    fn connect(&self) -> R<Arc<Mutex<Conn>>> {
        let server = self.server.as_str();
        let (mut io, virtio_port) = self.addr.open(server)?;
        let ours = Limits::default();
        let mut answer = handshake(&mut io, server, ours);
        if let (Err(f), Some(fd)) = (&answer, virtio_port) {
            // The host's connection behind a virtio-serial port outlives processes: an
            // earlier process that ended without Goodbye (killed) left its session
            // there, which takes this hello for a bad frame, closes with a notice and
            // hangs up; the VMM reconnects. Shake hands again on the new connection.
            log::info!(
                "{server}: no server hello ({}); waiting for the host to hang up the port, then again",
                f.detail
            );
            if wait_hangup(fd, HANGUP_WAIT) {
                answer = handshake(&mut io, server, ours);
            }
        }
        let answer = answer?;
        let limits = answer.limits;
        log::info!(
            "connected to {server}: session {}, protocol 1.{}, features {:#x}, max_inline {}",
            answer.session_id,
            answer.minor,
            answer.features.0,
            limits.max_inline
        );
        let conn = Arc::new(Mutex::new(Conn::new(
            io,
            limits,
            answer.minor,
            answer.features.contains(Features::PIPELINING),
            virtio_port,
        )));
        // The session ends with the process at the latest: Goodbye from an exit handler
        // (the only end a virtio-serial port's host can see; a socket's close is another).
        goodbye_at_exit_of(&conn);
        Ok(conn)
    }

    /// The connection, opened at the first call that needs it (a failure is logged once
    /// and answered from then on); once the program has called `cuInit`, `Init` is the
    /// session's next request.
    fn conn(&self) -> R<MutexGuard<'_, Conn>> {
        let conn = self.conn.get_or_init(|| {
            let r = self.connect();
            if let Err(f) = &r {
                log::warn!(
                    "cannot open a session with the vmgpu CUDA service: {} (CUresult {}); \
                     every CUDA call fails",
                    f.detail,
                    f.code
                );
            }
            r
        });
        let mut c = lock(conn.as_ref().map_err(Fail::clone)?);
        if !c.init_sent {
            if let Some(&flags) = self.init_flags.get() {
                c.call(Request::Init { flags })?;
                c.init_sent = true;
            }
        }
        Ok(c)
    }

    /// The context a request on `on` works in: the handle the program holds.
    fn context_of(&self, on: On<'_>, op: &'static str) -> R<u64> {
        let current = || {
            current_of(self.id).ok_or_else(|| {
                Fail::new(
                    sys::CUDA_ERROR_INVALID_CONTEXT,
                    "no context is current on this thread",
                )
            })
        };
        let st = || self.state();
        match on {
            On::Current => current(),
            On::Stream(s) => {
                check_owner(s.owner(), self.id, op)?;
                if is_default(s) {
                    return current();
                }
                st().streams
                    .get(&s.raw())
                    .copied()
                    .ok_or_else(|| invalid_handle("stream", s.raw()))
            }
            On::Event(e) => {
                check_owner(e.owner(), self.id, op)?;
                st().events
                    .get(&e.raw())
                    .copied()
                    .ok_or_else(|| invalid_handle("event", e.raw()))
            }
            On::Module(m) => {
                check_owner(m.owner(), self.id, op)?;
                st().modules
                    .get(&m.raw())
                    .copied()
                    .ok_or_else(|| invalid_handle("module", m.raw()))
            }
            On::Function(f) => {
                check_owner(f.owner(), self.id, op)?;
                st().functions
                    .get(&f.raw())
                    .map(|f| f.ctx)
                    .ok_or_else(|| invalid_handle("function", f.raw()))
            }
        }
    }

    /// The server's handle of context `ctx`, and its device.
    fn server_of(&self, ctx: u64) -> R<(u64, u32)> {
        self.state()
            .contexts
            .get(&ctx)
            .map(|c| (c.server, c.device))
            .ok_or_else(|| {
                Fail::new(
                    sys::CUDA_ERROR_INVALID_CONTEXT,
                    format!("context {ctx:#x} is not a live context of this backend"),
                )
            })
    }

    /// The connection with context `ctx` current on it.
    fn bound(&self, ctx: u64) -> R<MutexGuard<'_, Conn>> {
        // Checked before connecting too: no session for a call that fails anyway.
        self.server_of(ctx)?;
        let mut c = self.conn()?;
        let (server, _) = self.server_of(ctx)?;
        if c.current != server {
            c.call(Request::CtxSetCurrent {
                ctx: ContextId(server),
            })?;
            c.current = server;
        }
        Ok(c)
    }

    /// The connection bound to the context of `on`, and that context.
    fn on(&self, on: On<'_>, op: &'static str) -> R<(MutexGuard<'_, Conn>, u64)> {
        let ctx = self.context_of(on, op)?;
        Ok((self.bound(ctx)?, ctx))
    }

    /// A request that needs no context.
    fn call(&self, request: Request) -> R<ReplyBody> {
        self.conn()?.call(request)
    }

    /// A generated stub's call (`op` the entry point, for errors): the objects its
    /// arguments name must be live objects of this backend, and the request is sent in
    /// the first one's context (the current context if it names none; none for a
    /// session or device command); the reply's body must be what `unwrap` takes.
    fn plain<T>(
        &self,
        op: &'static str,
        opcode: crate::Opcode,
        objects: &[Option<On<'_>>],
        request: Request,
        unwrap: fn(ReplyBody) -> Option<T>,
    ) -> Result<T> {
        run(op, || {
            let mut objects = objects.iter().flatten();
            let first = objects.next().copied();
            for o in objects {
                self.context_of(*o, op)?;
            }
            let body = if opcode.needs_context() {
                let (mut c, _) = self.on(first.unwrap_or(On::Current), op)?;
                c.call(request)?
            } else {
                self.call(request)?
            };
            unwrap(body.clone()).ok_or_else(|| unexpected(&body))
        })
    }

    /// Refuses at the call a launch geometry the device cannot run, as the driver does
    /// (a pipelined launch could otherwise only report it at the next synchronisation).
    fn check_geometry(&self, c: &mut Conn, dev: u32, config: &LaunchConfig) -> R<()> {
        let (grid, block) = (config.grid, config.block);
        if grid.contains(&0) || block.contains(&0) {
            return Err(invalid_value(format!(
                "grid {grid:?}, block {block:?}: a zero dimension"
            )));
        }
        let cached = self.state().launch_limits.get(&dev).copied();
        let limits = match cached {
            Some(l) => l,
            None => {
                let mut l = [0i32; 7];
                for (i, v) in l.iter_mut().enumerate() {
                    let attribute = DeviceAttribute::MaxThreadsPerBlock.code() + i as i32;
                    match c.call(Request::DeviceGetAttribute {
                        device: dev,
                        attribute,
                    })? {
                        ReplyBody::Int(x) => *v = x,
                        b => return Err(unexpected(&b)),
                    }
                }
                self.state().launch_limits.insert(dev, l);
                l
            }
        };
        let threads = block
            .iter()
            .fold(1u64, |n, b| n.saturating_mul(u64::from(*b)));
        if threads > u64::try_from(limits[0]).unwrap_or(0) {
            return Err(invalid_value(format!(
                "block {block:?}: {threads} threads, more than {}",
                limits[0]
            )));
        }
        for i in 0..3 {
            if i64::from(block[i]) > i64::from(limits[1 + i])
                || i64::from(grid[i]) > i64::from(limits[4 + i])
            {
                return Err(invalid_value(format!(
                    "grid {grid:?}, block {block:?}: beyond the device's limits (block {:?}, grid {:?})",
                    &limits[1..4],
                    &limits[4..7]
                )));
            }
        }
        Ok(())
    }

    /// Refuses at the call more dynamic shared memory than the kernel allows
    /// (`MAX_DYNAMIC_SHARED_SIZE_BYTES`, asked once; on a 1.0 session, which cannot ask,
    /// the server's launch reports it).
    fn check_dynamic_shared(&self, c: &mut Conn, function: u64, bytes: u32) -> R<()> {
        if bytes == 0 || c.minor < 1 {
            return Ok(());
        }
        let cached = self
            .state()
            .functions
            .get(&function)
            .and_then(|f| f.max_dynamic);
        let max = match cached {
            Some(m) => m,
            None => {
                let m = match c.call(Request::FuncGetAttribute {
                    function: FunctionId(function),
                    attribute: FunctionAttribute::MaxDynamicSharedSizeBytes.code(),
                })? {
                    ReplyBody::Int(v) => u32::try_from(v).unwrap_or(0),
                    b => return Err(unexpected(&b)),
                };
                if let Some(f) = self.state().functions.get_mut(&function) {
                    f.max_dynamic = Some(m);
                }
                m
            }
        };
        if bytes > max {
            return Err(invalid_value(format!(
                "{bytes} bytes of dynamic shared memory, more than the kernel's maximum of {max} \
                 (cuFuncSetAttribute(CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES) raises it)"
            )));
        }
        Ok(())
    }

    /// A memset of `count` elements of `width` at `dst`: synchronous (`stream: None`) or
    /// pipelined on `stream`.
    fn memset(
        &self,
        op: &'static str,
        dst: DevicePtr,
        value: u32,
        width: MemsetWidth,
        count: usize,
        stream: Option<&Stream>,
    ) -> Result<()> {
        run(op, || {
            self.managed_to_device(op)?;
            let (mut c, _) = self.on(stream.map_or(On::Current, On::Stream), op)?;
            let align = width.bytes();
            if count == 0 {
                return Ok(());
            }
            // Refused at the call, as the driver does (a pipelined memset could only
            // report it at the next synchronisation).
            if !dst.0.is_multiple_of(align) {
                return Err(invalid_value(format!(
                    "{dst} is not aligned to {align} bytes"
                )));
            }
            let request = Request::Memset {
                dst,
                value,
                count: count as u64,
                width,
                stream: stream.map(|s| StreamId(s.raw())),
            };
            match stream {
                None => c.call(request).map(drop),
                Some(_) => c.post(request),
            }
        })?;
        if stream.is_none() {
            run(op, || self.managed_from_device(op))?;
        }
        Ok(())
    }

    /// `bytes` of the server's device memory mapped in this process at the same
    /// address (page-aligned within the allocation), zeroed on both sides.
    fn mirrored(&self, op: &'static str, bytes: usize) -> Result<DevicePtr> {
        let page = managed::page_size();
        let total = bytes
            .checked_add(page)
            .ok_or_else(|| invalid_value(format!("{bytes} bytes")).at(op))?;
        let server = self.mem_alloc(total)?;
        let at = server.0.div_ceil(page as u64) * page as u64;
        if let Err(why) = self.managed.map(at, bytes, server) {
            let _ = self.mem_free(server);
            return Err(Fail::new(
                sys::CUDA_ERROR_OUT_OF_MEMORY,
                format!("the device's address {at:#x} cannot be mapped in this process: {why}"),
            )
            .at(op));
        }
        // The guest's mapping is zeroed; so is the device's copy.
        let r = self.memset(op, DevicePtr(at), 0, MemsetWidth::W8, bytes, None);
        if let Err(e) = r {
            let _ = self.mem_free(DevicePtr(at));
            return Err(e);
        }
        Ok(DevicePtr(at))
    }

    /// Mirrors `module`'s `__managed__` variables `names` in this process at their device
    /// addresses (`managed.rs`), with their initial values, so the address
    /// `cuModuleGetGlobal` gives is the host's too, as on a GPU. `Err` naming the
    /// variable where its address is taken in this process.
    fn mirror_variables(&self, module: &Module, names: &[String]) -> R<()> {
        const OP: &str = "cuModuleLoadData";
        let mut vars = Vec::with_capacity(names.len());
        for name in names {
            let (at, bytes) = self.module_get_global(module, name).map_err(|e| {
                Fail::new(
                    e.code().unwrap_or(sys::CUDA_ERROR_UNKNOWN),
                    format!("the __managed__ variable {name} of the module: {e}"),
                )
            })?;
            vars.push((name.clone(), at.0, bytes));
        }
        self.managed
            .map_variables(module.raw(), &vars, |at, buf| {
                // SAFETY: `buf` is a buffer of this call, written only by the copy.
                unsafe { self.dtoh_direct(OP, buf.as_mut_ptr(), DevicePtr(at), buf.len(), None) }
                    .map_err(|e| e.to_string())
            })
            .map_err(|why| Fail::new(sys::CUDA_ERROR_OUT_OF_MEMORY, why))
    }

    /// Stops mirroring the `__managed__` variables of context `ctx`'s modules (the
    /// context is destroyed or reset: they are gone on the server).
    fn forget_variables_of(&self, ctx: u64) {
        let modules: Vec<u64> = self
            .state()
            .modules
            .iter()
            .filter(|(_, c)| **c == ctx)
            .map(|(m, _)| *m)
            .collect();
        for m in modules {
            // SAFETY: the context's modules are gone; the program may not use their
            // variables any more.
            unsafe { self.managed.unmap_module(m) };
        }
    }

    /// Stops mirroring the range at device address `at` (after the device is done
    /// with it and its bytes came back) and frees its device memory.
    fn unmirror(&self, op: &'static str, at: u64) -> Result<()> {
        run(op, || {
            let (mut c, _) = self.on(On::Current, op)?;
            c.call(Request::CtxSynchronize)?;
            drop(c);
            self.managed_from_device(op)?;
            // SAFETY: the program frees or unregisters it: it no longer uses the range
            // through this backend.
            let server = unsafe { self.managed.unmap(at) }.unwrap_or(DevicePtr(at));
            let (mut c, _) = self.on(On::Current, op)?;
            c.call(Request::MemFree { ptr: server }).map(drop)
        })
    }

    /// Sends what the host changed in managed memory to the device, before device work
    /// (see `managed.rs`).
    fn managed_to_device(&self, op: &'static str) -> R<()> {
        self.managed
            .push(|at, bytes| {
                self.htod_direct(op, DevicePtr(at), bytes, None)
                    .map_err(|e| e.to_string())
            })
            .map_err(|why| {
                Fail::new(
                    sys::CUDA_ERROR_UNKNOWN,
                    format!("managed memory to the device: {why}"),
                )
            })
    }

    /// Brings managed memory back from the device, after a synchronisation.
    fn managed_from_device(&self, op: &'static str) -> R<()> {
        self.managed
            .pull(|at, buf| {
                // SAFETY: `buf` is a buffer of this call, written only by the copy.
                unsafe { self.dtoh_direct(op, buf.as_mut_ptr(), DevicePtr(at), buf.len(), None) }
                    .map_err(|e| e.to_string())
            })
            .map_err(|why| {
                Fail::new(
                    sys::CUDA_ERROR_UNKNOWN,
                    format!("managed memory from the device: {why}"),
                )
            })
    }

    /// [`RemoteBackend::htod_direct`] after managed memory is sent.
    fn htod(
        &self,
        op: &'static str,
        dst: DevicePtr,
        data: &[u8],
        stream: Option<&Stream>,
    ) -> Result<()> {
        run(op, || self.managed_to_device(op))?;
        self.htod_direct(op, dst, data, stream)?;
        if stream.is_none() {
            run(op, || self.managed_from_device(op))?;
        }
        Ok(())
    }

    /// [`RemoteBackend::dtoh_direct`] after managed memory is sent.
    ///
    /// # Safety
    /// As [`RemoteBackend::dtoh_direct`].
    unsafe fn dtoh(
        &self,
        op: &'static str,
        dst: *mut u8,
        src: DevicePtr,
        bytes: usize,
        stream: Option<&Stream>,
    ) -> Result<()> {
        run(op, || self.managed_to_device(op))?;
        // SAFETY: the caller's guarantees.
        unsafe { self.dtoh_direct(op, dst, src, bytes, stream) }?;
        if stream.is_none() {
            run(op, || self.managed_from_device(op))?;
        }
        Ok(())
    }

    /// Host-to-device copies of `data` to `dst`, split at `max_inline`: synchronous
    /// (each chunk waited for) or pipelined on `stream`.
    fn htod_direct(
        &self,
        op: &'static str,
        dst: DevicePtr,
        data: &[u8],
        stream: Option<&Stream>,
    ) -> Result<()> {
        run(op, || {
            let (mut c, _) = self.on(stream.map_or(On::Current, On::Stream), op)?;
            let chunk = (c.limits.max_inline as usize).max(1);
            let mut ids = Vec::new();
            for (i, part) in data.chunks(chunk).enumerate() {
                // Sent from `part` itself (or copied once, when small; see
                // `Conn::send_htod`): nothing of it is needed after this call.
                let at = dst.offset((i * chunk) as u64);
                if let Some(id) = c.send_htod(at, stream.map(|s| StreamId(s.raw())), part)? {
                    ids.push(id);
                }
            }
            let mut first = Ok(());
            for id in ids {
                if let Err(f) = c.finish(id) {
                    if first.is_ok() {
                        first = Err(f);
                    }
                }
            }
            first
        })
    }

    /// Device-to-host copies of `bytes` at `src` into `dst`, split at `max_inline`:
    /// synchronous (waited for, the data copied here) or sent on `stream` with the data
    /// written when the replies are read.
    ///
    /// # Safety
    /// `dst..dst+bytes` is writable host memory that nothing else reads or writes until
    /// this call returns (synchronous) or until the stream has passed the copy.
    unsafe fn dtoh_direct(
        &self,
        op: &'static str,
        dst: *mut u8,
        src: DevicePtr,
        bytes: usize,
        stream: Option<&Stream>,
    ) -> Result<()> {
        run(op, || {
            let (mut c, _) = self.on(stream.map_or(On::Current, On::Stream), op)?;
            let chunk = (c.limits.max_inline as usize).max(1);
            let mut ids = Vec::new();
            let mut sent = Ok(());
            let mut off = 0usize;
            while off < bytes {
                let n = chunk.min(bytes - off);
                let request = Request::MemcpyDtoH {
                    src: src.offset(off as u64),
                    bytes: n as u64,
                    dst: HostDest::Inline,
                    stream: stream.map(|s| StreamId(s.raw())),
                };
                let id = c.id();
                match stream {
                    None => {
                        // The reply's data is read straight into `dst` (no copy here).
                        let into = Pending::Into {
                            dst: (dst as usize).wrapping_add(off),
                            len: n,
                        };
                        if let Err(f) = c.send(id, request, into) {
                            // The copies sent are still waited for (their data goes to
                            // `dst`, which is only valid during this call).
                            sent = Err(f);
                            break;
                        }
                        ids.push(id);
                    }
                    Some(_) => c.send(
                        id,
                        request,
                        Pending::DtoH {
                            dst: (dst as usize).wrapping_add(off),
                            len: n,
                        },
                    )?,
                }
                off += n;
            }
            if stream.is_some() {
                // Sent; the data lands when the replies are read.
                return c.flush();
            }
            let mut first = sent;
            for id in ids {
                match c.finish(id) {
                    // Its data is in `dst` (see `Pending::Into`).
                    Ok(ReplyBody::Data(_)) => {}
                    Ok(b) => {
                        if first.is_ok() {
                            first = Err(unexpected(&b));
                        }
                    }
                    Err(f) => {
                        if first.is_ok() {
                            first = Err(f);
                        }
                    }
                }
            }
            // Replies not read (a broken connection) must never be written to `dst`.
            c.forget_destinations();
            first
        })
    }

    fn dtod(
        &self,
        op: &'static str,
        dst: DevicePtr,
        src: DevicePtr,
        bytes: usize,
        stream: Option<&Stream>,
    ) -> Result<()> {
        run(op, || {
            self.managed_to_device(op)?;
            let (mut c, _) = self.on(stream.map_or(On::Current, On::Stream), op)?;
            let request = Request::MemcpyDtoD {
                dst,
                src,
                bytes: bytes as u64,
                stream: stream.map(|s| StreamId(s.raw())),
            };
            match stream {
                None => c.call(request).map(drop),
                Some(_) => c.post(request),
            }
        })
    }

    /// Checks that a context is current on this thread (for calls the client answers
    /// itself).
    fn require_current(&self, op: &'static str) -> R<()> {
        let ctx = self.context_of(On::Current, op)?;
        self.server_of(ctx).map(drop)
    }
}

impl Drop for RemoteBackend {
    fn drop(&mut self) {
        // The session ends with the backend: the service releases everything.
        if let Some(Ok(conn)) = self.conn.get() {
            lock(conn).goodbye(false);
        }
        set_current(self.id, None);
    }
}

impl Backend for RemoteBackend {
    // Every command whose row names its method's signature (`commands.rs`).
    crate::commands::remote_stubs!();

    fn kind(&self) -> BackendKind {
        BackendKind::Remote
    }

    fn instance_id(&self) -> u32 {
        self.id
    }

    fn device_count(&self) -> Result<u32> {
        run("cuDeviceGetCount", || {
            match self.call(Request::DeviceGetCount)? {
                ReplyBody::Count(n) => Ok(n),
                b => Err(unexpected(&b)),
            }
        })
    }

    fn device_name(&self, dev: Device) -> Result<String> {
        run("cuDeviceGetName", || {
            match self.call(Request::DeviceGetName {
                device: dev.ordinal(),
            })? {
                ReplyBody::Text(s) => Ok(s),
                b => Err(unexpected(&b)),
            }
        })
    }

    fn device_pci_bus_id(&self, dev: Device) -> Result<String> {
        run("cuDeviceGetPCIBusId", || {
            match self.call(Request::DeviceGetPciBusId {
                device: dev.ordinal(),
            })? {
                ReplyBody::Text(s) => Ok(s),
                b => Err(unexpected(&b)),
            }
        })
    }

    fn device_total_mem(&self, dev: Device) -> Result<u64> {
        run("cuDeviceTotalMem_v2", || {
            match self.call(Request::DeviceTotalMem {
                device: dev.ordinal(),
            })? {
                ReplyBody::Size(v) => Ok(v),
                b => Err(unexpected(&b)),
            }
        })
    }

    fn primary_context_retain(&self, dev: Device) -> Result<Context> {
        run("cuDevicePrimaryCtxRetain", || {
            let mut c = self.conn()?;
            let server = match c.call(Request::PrimaryCtxRetain {
                device: dev.ordinal(),
            })? {
                ReplyBody::Context(x) => x.0,
                b => return Err(unexpected(&b)),
            };
            let mut st = self.state();
            let shown = match st.primary.get(&dev.ordinal()) {
                Some(&h) if st.contexts.contains_key(&h) => h,
                _ => {
                    let h = st.fresh_handle(server);
                    st.primary.insert(dev.ordinal(), h);
                    h
                }
            };
            let e = st.contexts.entry(shown).or_insert(Ctx {
                device: dev.ordinal(),
                server,
                primary: true,
                refs: 0,
            });
            e.server = server;
            e.refs = e.refs.saturating_add(1);
            Ok(Context::from_raw(self.id, shown))
        })
    }

    fn primary_context_release(&self, ctx: Context) -> Result<()> {
        const OP: &str = "cuDevicePrimaryCtxRelease_v2";
        run(OP, || {
            check_owner(ctx.owner(), self.id, OP)?;
            let not_held = || {
                Fail::new(
                    sys::CUDA_ERROR_INVALID_CONTEXT,
                    format!(
                        "context {:#x} is not a primary context retained through this backend",
                        ctx.raw()
                    ),
                )
            };
            let held = |st: &State| {
                st.contexts
                    .get(&ctx.raw())
                    .filter(|c| c.primary && c.refs > 0)
                    .map(|c| c.device)
            };
            held(&self.state()).ok_or_else(not_held)?;
            let mut c = self.conn()?;
            let device = held(&self.state()).ok_or_else(not_held)?;
            c.call(Request::PrimaryCtxRelease { device })?;
            let mut st = self.state();
            let mut gone = None;
            if let Some(e) = st.contexts.get_mut(&ctx.raw()) {
                e.refs = e.refs.saturating_sub(1);
                if e.refs == 0 {
                    // The server destroyed it with everything made in it; the next
                    // retain gives a fresh one under the same handle.
                    gone = Some(e.server);
                }
            }
            if let Some(server) = gone {
                if c.current == server {
                    c.current = 0;
                }
                st.forget_objects_of(ctx.raw());
            }
            Ok(())
        })
    }

    unsafe fn primary_context_reset(&self, dev: Device) -> Result<()> {
        run("cuDevicePrimaryCtxReset_v2", || {
            // The protocol has no reset: releasing every reference the program holds and
            // retaining them again gives the session a fresh context (as after a sticky
            // fault); the program's handle stays the same.
            let device = dev.ordinal();
            let mut c = self.conn()?;
            let shown = self.state().primary.get(&device).copied();
            let Some(shown) = shown else {
                // Never retained: nothing of it to reset.
                return Ok(());
            };
            let refs = self.state().contexts.get(&shown).map_or(0, |e| e.refs);
            for _ in 0..refs {
                c.call(Request::PrimaryCtxRelease { device })?;
                if let Some(e) = self.state().contexts.get_mut(&shown) {
                    e.refs = e.refs.saturating_sub(1);
                }
            }
            c.current = 0;
            self.forget_variables_of(shown);
            self.state().forget_objects_of(shown);
            for _ in 0..refs {
                let server = match c.call(Request::PrimaryCtxRetain { device })? {
                    ReplyBody::Context(x) => x.0,
                    b => return Err(unexpected(&b)),
                };
                if let Some(e) = self.state().contexts.get_mut(&shown) {
                    e.server = server;
                    e.refs = e.refs.saturating_add(1);
                }
            }
            Ok(())
        })
    }

    fn context_create(&self, dev: Device) -> Result<Context> {
        const OP: &str = "cuCtxCreate_v3";
        run(OP, || {
            let mut c = self.conn()?;
            let server = match c.call(Request::CtxCreate {
                device: dev.ordinal(),
                flags: 0,
            })? {
                ReplyBody::Context(x) => x.0,
                b => return Err(unexpected(&b)),
            };
            // Current on the connection, and on the calling thread.
            c.current = server;
            let mut st = self.state();
            let shown = st.fresh_handle(server);
            st.contexts.insert(
                shown,
                Ctx {
                    device: dev.ordinal(),
                    server,
                    primary: false,
                    refs: 0,
                },
            );
            set_current(self.id, Some(shown));
            Ok(Context::from_raw(self.id, shown))
        })
    }

    unsafe fn context_destroy(&self, ctx: Context) -> Result<()> {
        const OP: &str = "cuCtxDestroy_v2";
        run(OP, || {
            check_owner(ctx.owner(), self.id, OP)?;
            let entry = || self.state().contexts.get(&ctx.raw()).cloned();
            let check = |e: Option<Ctx>| match e {
                None => Err(Fail::new(
                    sys::CUDA_ERROR_INVALID_CONTEXT,
                    format!(
                        "context {:#x} is not a live context of this backend",
                        ctx.raw()
                    ),
                )),
                Some(e) if e.primary => Err(invalid_value(
                    "the primary context is released (cuDevicePrimaryCtxRelease), not destroyed",
                )),
                Some(e) => Ok(e),
            };
            check(entry())?;
            let mut c = self.conn()?;
            let e = check(entry())?;
            c.call(Request::CtxDestroy {
                ctx: ContextId(e.server),
            })?;
            if c.current == e.server {
                c.current = 0;
            }
            self.forget_variables_of(ctx.raw());
            let mut st = self.state();
            st.contexts.remove(&ctx.raw());
            st.forget_objects_of(ctx.raw());
            if current_of(self.id) == Some(ctx.raw()) {
                set_current(self.id, None);
            }
            Ok(())
        })
    }

    fn context_set_current(&self, ctx: &Context) -> Result<()> {
        const OP: &str = "cuCtxSetCurrent";
        run(OP, || {
            check_owner(ctx.owner(), self.id, OP)?;
            self.server_of(ctx.raw())?;
            // Sent to the server when a request needs it (see `bound`).
            set_current(self.id, Some(ctx.raw()));
            Ok(())
        })
    }

    fn context_synchronize(&self) -> Result<()> {
        const OP: &str = "cuCtxSynchronize";
        run(OP, || {
            let (mut c, _) = self.on(On::Current, OP)?;
            c.call(Request::CtxSynchronize)?;
            drop(c);
            self.managed_from_device(OP)
        })
    }

    fn mem_get_info(&self) -> Result<MemInfo> {
        const OP: &str = "cuMemGetInfo_v2";
        run(OP, || {
            let (mut c, _) = self.on(On::Current, OP)?;
            match c.call(Request::MemGetInfo)? {
                ReplyBody::MemInfo { free, total } => Ok(MemInfo { free, total }),
                b => Err(unexpected(&b)),
            }
        })
    }

    fn module_load_ptx(&self, ptx: &str) -> Result<Module> {
        const OP: &str = "cuModuleLoadData";
        run(OP, || {
            let (mut c, ctx) = self.on(On::Current, OP)?;
            if ptx.len() > c.limits.max_module as usize {
                return Err(invalid_value(format!(
                    "the module image ({} bytes) is larger than the session's limit ({})",
                    ptx.len(),
                    c.limits.max_module
                )));
            }
            let m = match c.call(Request::ModuleLoadData {
                image: ptx.as_bytes().to_vec(),
            })? {
                ReplyBody::Module(m) => m,
                b => return Err(unexpected(&b)),
            };
            drop(c);
            self.state().modules.insert(m.0, ctx);
            let module = Module::from_raw(self.id, m.0);
            let managed = managed::managed_variables(ptx);
            if !managed.is_empty() {
                if let Err(e) = self.mirror_variables(&module, &managed) {
                    // SAFETY: the module just loaded, which the program never saw.
                    let _ = unsafe { self.module_unload(module) };
                    return Err(e);
                }
            }
            Ok(module)
        })
    }

    unsafe fn module_unload(&self, module: Module) -> Result<()> {
        const OP: &str = "cuModuleUnload";
        run(OP, || {
            // The module's `__managed__` variables go with it (the program's contract).
            // SAFETY: the program unloads the module: it no longer uses its variables.
            unsafe { self.managed.unmap_module(module.raw()) };
            let (mut c, _) = self.on(On::Module(&module), OP)?;
            c.call(Request::ModuleUnload {
                module: ModuleId(module.raw()),
            })?;
            let mut st = self.state();
            st.modules.remove(&module.raw());
            st.functions.retain(|_, f| f.module != module.raw());
            Ok(())
        })
    }

    fn module_get_function(&self, module: &Module, name: &str) -> Result<Function> {
        const OP: &str = "cuModuleGetFunction";
        run(OP, || {
            let (mut c, ctx) = self.on(On::Module(module), OP)?;
            match c.call(Request::ModuleGetFunction {
                module: ModuleId(module.raw()),
                name: name.to_string(),
            })? {
                ReplyBody::Function(info) => {
                    let h = info.function.0;
                    let mut st = self.state();
                    let f = st.functions.entry(h).or_insert(Func {
                        ctx,
                        module: module.raw(),
                        layout: None,
                        max_dynamic: None,
                    });
                    f.ctx = ctx;
                    f.module = module.raw();
                    f.layout = info.params;
                    Ok(Function::from_raw(self.id, h))
                }
                b => Err(unexpected(&b)),
            }
        })
    }

    fn module_get_global(&self, module: &Module, name: &str) -> Result<(DevicePtr, usize)> {
        const OP: &str = "cuModuleGetGlobal_v2";
        run(OP, || {
            let (mut c, _) = self.on(On::Module(module), OP)?;
            match c.call(Request::ModuleGetGlobal {
                module: ModuleId(module.raw()),
                name: name.to_string(),
            })? {
                ReplyBody::Global { dptr, bytes } => {
                    let bytes = usize::try_from(bytes).map_err(|_| {
                        Fail::new(
                            sys::CUDA_ERROR_UNKNOWN,
                            format!("a variable of {bytes} bytes does not fit this process"),
                        )
                    })?;
                    Ok((dptr, bytes))
                }
                b => Err(unexpected(&b)),
            }
        })
    }

    fn mem_alloc(&self, bytes: usize) -> Result<DevicePtr> {
        const OP: &str = "cuMemAlloc_v2";
        run(OP, || {
            let (mut c, _) = self.on(On::Current, OP)?;
            match c.call(Request::MemAlloc {
                bytes: bytes as u64,
            })? {
                ReplyBody::DevicePtr(p) => Ok(p),
                b => Err(unexpected(&b)),
            }
        })
    }

    fn mem_free(&self, ptr: DevicePtr) -> Result<()> {
        const OP: &str = "cuMemFree_v2";
        run(OP, || {
            let (mut c, _) = self.on(On::Current, OP)?;
            if self.managed.contains(ptr.0) {
                // The device is done with it before the guest's mapping goes, as
                // cuMemFree waits for the device.
                c.call(Request::CtxSynchronize)?;
                // SAFETY: the program frees it: it no longer uses the memory.
                let server = unsafe { self.managed.unmap(ptr.0) }.unwrap_or(ptr);
                return c.call(Request::MemFree { ptr: server }).map(drop);
            }
            c.call(Request::MemFree { ptr }).map(drop)
        })
    }

    /// Managed memory: device memory of the server, mapped in this process at the same
    /// address (page-aligned within the allocation) and kept coherent at
    /// synchronisations (`managed.rs`). Where that address is taken in this process, the
    /// allocation is refused (`CUDA_ERROR_OUT_OF_MEMORY`, with the address).
    fn mem_alloc_managed(&self, bytes: usize) -> Result<DevicePtr> {
        const OP: &str = "cuMemAllocManaged";
        if bytes == 0 {
            return Err(invalid_value("0 bytes").at(OP));
        }
        self.mirrored(OP, bytes)
    }

    fn host_device_pointer(&self, host: *mut u8) -> Result<DevicePtr> {
        const OP: &str = "cuMemHostGetDevicePointer_v2";
        match self.managed.device_address(host as u64) {
            Some(d) => Ok(DevicePtr(d)),
            None => Err(invalid_value(format!(
                "{:#x} is not mapped for the device (allocate it with CU_MEMHOSTALLOC_DEVICEMAP \
                 or register it with CU_MEMHOSTREGISTER_DEVICEMAP)",
                host as usize
            ))
            .at(OP)),
        }
    }

    unsafe fn memset_d8(&self, dst: DevicePtr, value: u8, bytes: usize) -> Result<()> {
        self.memset(
            "cuMemsetD8_v2",
            dst,
            value.into(),
            MemsetWidth::W8,
            bytes,
            None,
        )
    }

    unsafe fn memset_d16(&self, dst: DevicePtr, value: u16, count: usize) -> Result<()> {
        self.memset(
            "cuMemsetD16_v2",
            dst,
            value.into(),
            MemsetWidth::W16,
            count,
            None,
        )
    }

    unsafe fn memset_d32(&self, dst: DevicePtr, value: u32, count: usize) -> Result<()> {
        self.memset("cuMemsetD32_v2", dst, value, MemsetWidth::W32, count, None)
    }

    unsafe fn memset_d16_async(
        &self,
        dst: DevicePtr,
        value: u16,
        count: usize,
        stream: &Stream,
    ) -> Result<()> {
        self.memset(
            "cuMemsetD16Async",
            dst,
            value.into(),
            MemsetWidth::W16,
            count,
            Some(stream),
        )
    }

    unsafe fn memset_d32_async(
        &self,
        dst: DevicePtr,
        value: u32,
        count: usize,
        stream: &Stream,
    ) -> Result<()> {
        self.memset(
            "cuMemsetD32Async",
            dst,
            value,
            MemsetWidth::W32,
            count,
            Some(stream),
        )
    }

    unsafe fn memset_d8_async(
        &self,
        dst: DevicePtr,
        value: u8,
        bytes: usize,
        stream: &Stream,
    ) -> Result<()> {
        self.memset(
            "cuMemsetD8Async",
            dst,
            value.into(),
            MemsetWidth::W8,
            bytes,
            Some(stream),
        )
    }

    unsafe fn memcpy_htod(&self, dst: DevicePtr, src: &[u8]) -> Result<()> {
        if src.is_empty() {
            return Ok(());
        }
        self.htod("cuMemcpyHtoD_v2", dst, src, None)
    }

    unsafe fn memcpy_dtoh(&self, dst: &mut [u8], src: DevicePtr) -> Result<()> {
        if dst.is_empty() {
            return Ok(());
        }
        // SAFETY: `dst` is borrowed mutably for the whole call, which waits for the copy.
        unsafe { self.dtoh("cuMemcpyDtoH_v2", dst.as_mut_ptr(), src, dst.len(), None) }
    }

    unsafe fn memcpy_dtod(&self, dst: DevicePtr, src: DevicePtr, bytes: usize) -> Result<()> {
        self.dtod("cuMemcpyDtoD_v2", dst, src, bytes, None)
    }

    unsafe fn memcpy_htod_async(
        &self,
        dst: DevicePtr,
        src: *const u8,
        bytes: usize,
        stream: &Stream,
    ) -> Result<()> {
        const OP: &str = "cuMemcpyHtoDAsync_v2";
        if bytes == 0 {
            // Nothing to read; the stream is still checked.
            return run(OP, || self.on(On::Stream(stream), OP).map(drop));
        }
        if src.is_null() {
            return Err(invalid_value("a null source").at(OP));
        }
        // SAFETY: the caller guarantees `src..src+bytes` is readable host memory (not
        // null, checked) that nothing writes during this call; the bytes are written to
        // the transport or copied into the batch before it returns (pageable semantics).
        let data = unsafe { std::slice::from_raw_parts(src, bytes) };
        self.htod(OP, dst, data, Some(stream))
    }

    unsafe fn memcpy_dtoh_async(
        &self,
        dst: *mut u8,
        src: DevicePtr,
        bytes: usize,
        stream: &Stream,
    ) -> Result<()> {
        const OP: &str = "cuMemcpyDtoHAsync_v2";
        if bytes > 0 && dst.is_null() {
            return Err(invalid_value("a null destination").at(OP));
        }
        // SAFETY: the caller guarantees `dst..dst+bytes` stays writable and unused by
        // anything else until the stream has passed the copy, which the program can only
        // learn through a call that reads this copy's reply first.
        unsafe { self.dtoh(OP, dst, src, bytes, Some(stream)) }
    }

    unsafe fn memcpy_dtod_async(
        &self,
        dst: DevicePtr,
        src: DevicePtr,
        bytes: usize,
        stream: &Stream,
    ) -> Result<()> {
        self.dtod("cuMemcpyDtoDAsync_v2", dst, src, bytes, Some(stream))
    }

    fn host_alloc(&self, bytes: usize, flags: HostAllocFlags) -> Result<HostAlloc> {
        const OP: &str = "cuMemHostAlloc";
        if flags.device_map && bytes > 0 {
            // Mapped for kernels: mirrored device memory, one address on both sides.
            let at = self.mirrored(OP, bytes)?;
            return Ok(HostAlloc::from_raw(self.id, at.0 as usize, bytes));
        }
        run(OP, || {
            self.require_current(OP)?;
            let layout = match std::alloc::Layout::from_size_align(bytes, 4096) {
                Ok(l) if bytes > 0 => l,
                _ => return Err(invalid_value(format!("{bytes} bytes cannot be allocated"))),
            };
            // SAFETY: `layout` has a non-zero size (checked).
            let p = unsafe { std::alloc::alloc_zeroed(layout) };
            if p.is_null() {
                return Err(Fail::new(
                    sys::CUDA_ERROR_OUT_OF_MEMORY,
                    format!("the host has no {bytes} bytes to spare"),
                ));
            }
            self.state().host.insert(p as usize, layout);
            Ok(HostAlloc::from_raw(self.id, p as usize, bytes))
        })
    }

    unsafe fn host_free(&self, mem: HostAlloc) -> Result<()> {
        const OP: &str = "cuMemFreeHost";
        check_owner(mem.owner(), self.id, OP)?;
        if let Some(at) = self.managed.by_host(mem.as_ptr() as u64) {
            return self.unmirror(OP, at);
        }
        run(OP, || {
            let layout = self
                .state()
                .host
                .remove(&(mem.as_ptr() as usize))
                .ok_or_else(|| invalid_value("not memory from cuMemHostAlloc of this backend"))?;
            // SAFETY: the address came from `alloc_zeroed(layout)` and was removed from the
            // map, so it is freed once; the caller guarantees nothing uses it any more.
            unsafe { std::alloc::dealloc(mem.as_ptr(), layout) };
            Ok(())
        })
    }

    unsafe fn host_register(
        &self,
        ptr: *mut u8,
        bytes: usize,
        flags: HostRegisterFlags,
    ) -> Result<()> {
        const OP: &str = "cuMemHostRegister_v2";
        run(OP, || {
            self.require_current(OP)?;
            let start = ptr as usize;
            let Some(end) = start
                .checked_add(bytes)
                .filter(|_| !ptr.is_null() && bytes > 0)
            else {
                return Err(invalid_value(format!(
                    "{start:#x}..+{bytes} is not a host range"
                )));
            };
            let mut st = self.state();
            let overlaps = st
                .registered
                .range(..end)
                .next_back()
                .is_some_and(|(&s, &len)| s.saturating_add(len) > start);
            if overlaps {
                return Err(Fail::new(
                    sys::CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED,
                    format!("{start:#x}..+{bytes} overlaps a registered range"),
                ));
            }
            st.registered.insert(start, bytes);
            Ok(())
        })?;
        if flags.device_map {
            // Mapped for kernels: device memory paired with the range, coherent at
            // synchronisations.
            let registered = self.mem_alloc(bytes).and_then(|d| {
                self.memset(OP, d, 0, MemsetWidth::W8, bytes, None)?;
                Ok(d)
            });
            match registered {
                // SAFETY: the caller keeps the range mapped until it unregisters it,
                // which stops the mirror first.
                Ok(d) => unsafe { self.managed.register(ptr as u64, bytes, d.0, d) },
                Err(e) => {
                    self.state().registered.remove(&(ptr as usize));
                    return Err(e);
                }
            }
        }
        Ok(())
    }

    unsafe fn host_unregister(&self, ptr: *mut u8) -> Result<()> {
        const OP: &str = "cuMemHostUnregister";
        if let Some(at) = self.managed.by_host(ptr as u64) {
            self.unmirror(OP, at)?;
        }
        run(OP, || {
            self.require_current(OP)?;
            self.state()
                .registered
                .remove(&(ptr as usize))
                .map(drop)
                .ok_or_else(|| {
                    Fail::new(
                        sys::CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED,
                        format!("{:#x} is not the start of a registered range", ptr as usize),
                    )
                })
        })
    }

    fn stream_create(&self, flags: StreamFlags) -> Result<Stream> {
        const OP: &str = "cuStreamCreate";
        run(OP, || {
            let (mut c, ctx) = self.on(On::Current, OP)?;
            match c.call(Request::StreamCreate {
                flags: u32::from(flags.non_blocking),
                priority: 0,
            })? {
                ReplyBody::Stream(s) => {
                    self.state().streams.insert(s.0, ctx);
                    Ok(Stream::from_raw(self.id, s.0))
                }
                b => Err(unexpected(&b)),
            }
        })
    }

    fn stream_synchronize(&self, stream: &Stream) -> Result<()> {
        const OP: &str = "cuStreamSynchronize";
        run(OP, || {
            let (mut c, _) = self.on(On::Stream(stream), OP)?;
            c.call(Request::StreamSynchronize {
                stream: StreamId(stream.raw()),
            })?;
            drop(c);
            self.managed_from_device(OP)
        })
    }

    fn stream_query(&self, stream: &Stream) -> Result<bool> {
        const OP: &str = "cuStreamQuery";
        run(OP, || {
            let (mut c, _) = self.on(On::Stream(stream), OP)?;
            match c.call(Request::StreamQuery {
                stream: StreamId(stream.raw()),
            }) {
                Ok(_) => {
                    drop(c);
                    self.managed_from_device(OP)?;
                    Ok(true)
                }
                Err(f) if not_ready(&f) => Ok(false),
                Err(f) => Err(f),
            }
        })
    }

    fn stream_wait_event(&self, stream: &Stream, event: &Event) -> Result<()> {
        const OP: &str = "cuStreamWaitEvent";
        run(OP, || {
            self.context_of(On::Event(event), OP)?;
            let (mut c, _) = self.on(On::Stream(stream), OP)?;
            c.post(Request::StreamWaitEvent {
                stream: StreamId(stream.raw()),
                event: EventId(event.raw()),
                flags: 0,
            })
        })
    }

    fn stream_destroy(&self, stream: Stream) -> Result<()> {
        const OP: &str = "cuStreamDestroy_v2";
        run(OP, || {
            let (mut c, _) = self.on(On::Stream(&stream), OP)?;
            c.call(Request::StreamDestroy {
                stream: StreamId(stream.raw()),
            })?;
            self.state().streams.remove(&stream.raw());
            Ok(())
        })
    }

    fn event_create(&self, flags: EventFlags) -> Result<Event> {
        const OP: &str = "cuEventCreate";
        run(OP, || {
            let (mut c, ctx) = self.on(On::Current, OP)?;
            let bits = u32::from(flags.blocking_sync) | (u32::from(flags.disable_timing) << 1);
            match c.call(Request::EventCreate { flags: bits })? {
                ReplyBody::Event(e) => {
                    self.state().events.insert(e.0, ctx);
                    Ok(Event::from_raw(self.id, e.0))
                }
                b => Err(unexpected(&b)),
            }
        })
    }

    fn event_record(&self, event: &Event, stream: &Stream) -> Result<()> {
        const OP: &str = "cuEventRecord";
        run(OP, || {
            let event_ctx = self.context_of(On::Event(event), OP)?;
            // The event and the stream must be of one context (the driver's
            // CUDA_ERROR_INVALID_HANDLE), refused at the call: the record is pipelined,
            // so the server could only report it at the next synchronisation.
            let (mut c, stream_ctx) = self.on(On::Stream(stream), OP)?;
            if event_ctx != stream_ctx {
                return Err(invalid_handle(
                    "event (of another context than the stream)",
                    event.raw(),
                ));
            }
            c.post(Request::EventRecord {
                event: EventId(event.raw()),
                stream: StreamId(stream.raw()),
            })
        })
    }

    fn event_synchronize(&self, event: &Event) -> Result<()> {
        const OP: &str = "cuEventSynchronize";
        run(OP, || {
            let (mut c, _) = self.on(On::Event(event), OP)?;
            c.call(Request::EventSynchronize {
                event: EventId(event.raw()),
            })?;
            drop(c);
            self.managed_from_device(OP)
        })
    }

    fn event_query(&self, event: &Event) -> Result<bool> {
        const OP: &str = "cuEventQuery";
        run(OP, || {
            let (mut c, _) = self.on(On::Event(event), OP)?;
            match c.call(Request::EventQuery {
                event: EventId(event.raw()),
            }) {
                Ok(_) => {
                    drop(c);
                    self.managed_from_device(OP)?;
                    Ok(true)
                }
                Err(f) if not_ready(&f) => Ok(false),
                Err(f) => Err(f),
            }
        })
    }

    fn event_destroy(&self, event: Event) -> Result<()> {
        const OP: &str = "cuEventDestroy_v2";
        run(OP, || {
            let (mut c, _) = self.on(On::Event(&event), OP)?;
            c.call(Request::EventDestroy {
                event: EventId(event.raw()),
            })?;
            self.state().events.remove(&event.raw());
            Ok(())
        })
    }

    fn function_params(&self, function: &Function) -> Result<Option<Vec<ParamLayout>>> {
        const OP: &str = "cuFuncGetParamInfo";
        run(OP, || {
            check_owner(function.owner(), self.id, OP)?;
            self.state()
                .functions
                .get(&function.raw())
                .map(|f| f.layout.clone())
                .ok_or_else(|| invalid_handle("function", function.raw()))
        })
    }

    fn function_set_attribute(
        &self,
        function: &Function,
        attribute: FunctionAttribute,
        value: i32,
    ) -> Result<()> {
        const OP: &str = "cuFuncSetAttribute";
        run(OP, || {
            let (mut c, _) = self.on(On::Function(function), OP)?;
            c.call(Request::FuncSetAttribute {
                function: FunctionId(function.raw()),
                attribute: attribute.code(),
                value,
            })?;
            if attribute == FunctionAttribute::MaxDynamicSharedSizeBytes {
                if let Some(f) = self.state().functions.get_mut(&function.raw()) {
                    f.max_dynamic = u32::try_from(value).ok();
                }
            }
            Ok(())
        })
    }

    unsafe fn launch_kind(
        &self,
        kind: LaunchKind,
        function: &Function,
        config: &LaunchConfig,
        stream: &Stream,
        args: &[&[u8]],
    ) -> Result<()> {
        self.launch_grid(function, config, stream, args, kind)
    }
}

impl RemoteBackend {
    /// `LaunchKernel`, or `LaunchCooperativeKernel`, as `kind` says.
    fn launch_grid(
        &self,
        function: &Function,
        config: &LaunchConfig,
        stream: &Stream,
        args: &[&[u8]],
        kind: LaunchKind,
    ) -> Result<()> {
        let op_name = kind.entry_point();
        run(op_name, || {
            check_owner(function.owner(), self.id, op_name)?;
            let layout = self
                .state()
                .functions
                .get(&function.raw())
                .map(|f| f.layout.clone())
                .ok_or_else(|| invalid_handle("function", function.raw()))?
                .ok_or_else(|| {
                    Fail::new(
                        sys::CUDA_ERROR_NOT_SUPPORTED,
                        "the server does not know this kernel's parameter layout",
                    )
                })?;
            let params = KernelParams::with_layout(&layout, args).ok_or_else(|| {
                invalid_value(format!(
                    "the arguments (sizes {:?}) do not match the kernel's parameters (sizes {:?})",
                    args.iter().map(|a| a.len()).collect::<Vec<_>>(),
                    layout.iter().map(|p| p.size).collect::<Vec<_>>()
                ))
            })?;
            self.managed_to_device(op_name)?;
            let (mut c, ctx) = self.on(On::Stream(stream), op_name)?;
            let (_, device) = self.server_of(ctx)?;
            self.check_geometry(&mut c, device, config)?;
            self.check_dynamic_shared(&mut c, function.raw(), config.shared_bytes)?;
            let (function, stream, config) =
                (FunctionId(function.raw()), StreamId(stream.raw()), *config);
            c.post(if kind == LaunchKind::Cooperative {
                Request::LaunchCooperativeKernel {
                    function,
                    stream,
                    config,
                    params,
                }
            } else {
                Request::LaunchKernel {
                    function,
                    stream,
                    config,
                    params,
                }
            })
        })
    }
}
