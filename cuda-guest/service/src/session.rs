//! One guest's session: its contexts, its handle tables, its allocations, its quota and
//! its deferred and sticky errors; and the dispatcher that runs a decoded request on the
//! backend. Pure and synchronous: the transports and the embedding API drive it from
//! one thread at a time (the backend calls block).
//!
//! # The dispatcher
//! The command table (`vmgpu_cuda_proto`'s `commands.rs`) says of each command what it
//! needs (`Opcode::needs_init`, `Opcode::needs_context`), which deferred errors its reply
//! reports (`Request::sync_scope`) and which `Backend` method serves it
//! (`Opcode::backend_methods`). [`Session::execute`] does the part every command shares,
//! once, from those facts: the `Init` and current-context checks (entering the context:
//! made current on the backend), the wait its sync scope asks for and the deferred or
//! sticky error that wait reports. Then [`Session::dispatch`] hands the request's fields
//! to its command's own code, one small method per command, grouped by family as the
//! table is (the opcode's high byte): `device.rs` (session and device commands, `0x00..`
//! and `0x01..`), `context.rs` (`0x02..`), `module.rs` (`0x03..`), `memory.rs` (`0x040.`
//! and the memsets `0x041.`), `copy.rs` (`0x042.`), `stream.rs` (`0x05..`), `event.rs`
//! (`0x06..`) and `launch.rs` (`0x07..`); each calls the `Backend` method its row names
//! (a test checks that against the table). A command whose row writes out its method's
//! signature (`Opcode::plain`: one backend call, nothing of the session's own) has no
//! code here: the last arm hands it to `vmgpu_cuda_proto::serve`, with [`Scope`] (the
//! session's handle lookups and backends) as its server. Handle lookups ([`Session::found`], which
//! refuses another context's objects) and the quotas ([`Session::object_quota`],
//! [`Session::memory_quota`]) are written once here too.
//!
//! # Contexts
//! A session holds its primary context (`PrimaryCtxRetain`/`PrimaryCtxRelease`, retain
//! counted) and the contexts it made with `CtxCreate`, each with its own allocations,
//! modules, functions, streams, events, deferred errors and sticky error (`context.rs`).
//! Every object belongs to the context current when it was made; a request naming an
//! object of another context gets `CUDA_ERROR_INVALID_HANDLE`, a device range outside
//! the current context's allocations `CUDA_ERROR_INVALID_VALUE`. The quotas are the
//! session's, over all its contexts.

mod context;
mod copy;
mod device;
mod event;
mod launch;
mod memory;
mod module;
mod stream;

pub use context::MAX_CREATED_CONTEXTS;

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use vm_memory::GuestMemoryMmap;

use super::handles::{Kind, Miss, Scoped, Table};
use super::{Inner, Quota};
use context::Ctx;
use event::EventEntry;
use module::{FunctionEntry, ModuleEntry};
use vmgpu_cuda_api::{
    Backend, BackendKind, CudaError, Device, DriverError, Event, Function, Module, Stream,
};
use vmgpu_cuda_proto::{
    Cause, DeferredError, EventId, Features, FunctionId, Limits, ModuleId, Opcode, Refused, Reply,
    ReplyBody, Request, RequestFrame, Status, StreamId, SyncScope,
};
use vmgpu_cuda_sim::CancelToken;

/// Why a request failed: the status the guest gets and the detail.
#[derive(Debug)]
struct Fail {
    status: Status,
    detail: String,
    /// The backend's error, whose stream (a backend handle) the session names by the
    /// guest's handle before the guest sees it ([`Session::in_guest_terms`]).
    cuda: Option<Box<CudaError>>,
}

impl Fail {
    fn new(status: Status, detail: impl Into<String>) -> Self {
        Fail {
            status,
            detail: detail.into(),
            cuda: None,
        }
    }
}

/// What the guest reads of a backend error: its JIT log, else the whole message.
fn cuda_detail(c: &CudaError) -> String {
    match &c.jit_log {
        Some(log) if !log.trim().is_empty() => log.clone(),
        _ => c.to_string(),
    }
}

impl From<DriverError> for Fail {
    fn from(e: DriverError) -> Self {
        let status = e.status();
        match e {
            DriverError::Cuda(c) => Fail {
                status,
                detail: cuda_detail(&c),
                cuda: Some(c),
            },
            other => Fail::new(status, other.to_string()),
        }
    }
}

/// What a request came to, when not its own success.
enum Outcome {
    /// It failed itself.
    Fail(Fail),
    /// A reply made already (a deferred or sticky error reported).
    Reply(Reply),
}

impl From<Fail> for Outcome {
    fn from(f: Fail) -> Self {
        Outcome::Fail(f)
    }
}

impl From<DriverError> for Outcome {
    fn from(e: DriverError) -> Self {
        Outcome::Fail(e.into())
    }
}

type Done = Result<ReplyBody, Outcome>;

/// A guest's session; see the [module documentation](super).
#[derive(Debug)]
pub struct Session {
    inner: Arc<Inner>,
    guest: Arc<str>,
    id: u64,
    limits: Limits,
    features: Features,
    quota: Quota,
    device: Device,
    /// The backend every context of the session is made on: on the simulator a
    /// `SimBackend` of the session's own (made with its first context, kept until the
    /// session ends), else the shared backend.
    backend: Option<Arc<dyn Backend>>,
    /// The contexts the guest holds, by its handles.
    contexts: Table<Ctx>,
    /// The primary context's handle (kept after a sticky fault until released).
    primary: Option<u64>,
    retains: u32,
    /// The connection's current context (`CtxSetCurrent`, `CtxCreate`).
    current: Option<u64>,
    /// The context the request being served runs in (entered or synchronised).
    ran_in: Option<u64>,
    /// Failures of pipelined requests that ran in no context (before `Init`, without a
    /// current context): reported in the next context a request enters.
    loose: Vec<(StreamId, DeferredError)>,
    modules: Scoped<ModuleEntry>,
    functions: Scoped<FunctionEntry>,
    streams: Scoped<Stream>,
    events: Scoped<EventEntry>,
    /// Live allocations: (context, base) to size.
    allocs: BTreeMap<(u64, u64), u64>,
    mem_used: u64,
    /// Host memory held for the session's modules ([`Quota::module_host_memory`]).
    host_used: u64,
    /// Bytes of asynchronous inline copies held for the device, all contexts.
    staged_bytes: usize,
    /// Launch tokens (launch quota).
    tokens: f64,
    refilled: Instant,
    last_throttle_log: Option<Instant>,
    /// Guest memory of the embedding API, held while asynchronous copies may read it.
    guest_mem: Option<GuestMemoryMmap>,
    closed: bool,
    /// The guest sent `Init` (requests that need it are refused before).
    initialized: bool,
    /// The id of the last request: ids must increase.
    last_id: u64,
    /// Cancelled when the guest is gone: stops the simulator work of every context of
    /// this session (running and queued launches end with a sticky timeout).
    gone: CancelToken,
    /// A large device-to-host copy's buffer, given back once its reply was written
    /// ([`Session::recycle`]): the next one's data goes into it (see
    /// [`Session::data_buffer`]).
    spare_data: Vec<u8>,
    /// Buffers of at least [`RECYCLE_MIN`] bytes allocated for device-to-host data.
    fresh_data_buffers: u64,
}

/// Device-to-host buffers of at least this many bytes are reused ([`Session::recycle`]);
/// smaller ones are allocated each time (cheap, and they leave the spare to large ones).
pub(crate) const RECYCLE_MIN: usize = 64 << 10;

/// The legacy default stream for the reserved values 0, 1 and 2.
fn norm(s: StreamId) -> StreamId {
    if s.0 <= 2 {
        StreamId::DEFAULT
    } else {
        s
    }
}

fn invalid(detail: impl Into<String>) -> Outcome {
    Outcome::Fail(Fail::new(Status::ERROR_INVALID_VALUE, detail))
}

fn failed(status: Status, detail: impl Into<String>) -> Outcome {
    Outcome::Fail(Fail::new(status, detail))
}

fn bad_handle(what: &str, h: u64) -> Outcome {
    failed(
        Status::ERROR_INVALID_HANDLE,
        format!("{what} {h:#x} is not a live {what} of this session"),
    )
}

impl Session {
    pub(super) fn new(
        inner: Arc<Inner>,
        guest: &str,
        id: u64,
        limits: Limits,
        features: Features,
    ) -> Session {
        let key = super::session_key(id);
        let quota = inner.config.quota.clone();
        inner.stats.sessions.fetch_add(1, Ordering::Relaxed);
        Session {
            device: inner.config.device,
            guest: guest.into(),
            id,
            limits,
            features,
            tokens: 1.0,
            quota,
            backend: None,
            contexts: Table::new(Kind::Context, key),
            primary: None,
            retains: 0,
            current: None,
            ran_in: None,
            loose: Vec::new(),
            modules: Scoped::new(Kind::Module, key.rotate_left(8)),
            functions: Scoped::new(Kind::Function, key.rotate_left(16)),
            streams: Scoped::new(Kind::Stream, key.rotate_left(24)),
            events: Scoped::new(Kind::Event, key.rotate_left(32)),
            allocs: BTreeMap::new(),
            mem_used: 0,
            host_used: 0,
            staged_bytes: 0,
            refilled: Instant::now(),
            last_throttle_log: None,
            guest_mem: None,
            closed: false,
            initialized: false,
            last_id: 0,
            gone: CancelToken::new(),
            spare_data: Vec::new(),
            fresh_data_buffers: 0,
            inner,
        }
    }

    /// The guest's name.
    pub fn guest(&self) -> &str {
        &self.guest
    }

    /// The session's number (as in the `ServerHello`).
    pub fn id(&self) -> u64 {
        self.id
    }

    /// The session's negotiated limits.
    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    /// Device memory the guest holds, in bytes (all its contexts).
    pub fn mem_used(&self) -> u64 {
        self.mem_used
    }

    /// Host memory the service holds for the guest's modules, in bytes
    /// ([`Quota::module_host_memory`]).
    pub fn host_used(&self) -> u64 {
        self.host_used
    }

    /// Live objects the guest holds, all its contexts together (allocations, modules,
    /// functions, streams, events, and the contexts it made with `CtxCreate`; the
    /// primary context is not counted).
    pub fn objects(&self) -> usize {
        self.allocs.len()
            + self.modules.len()
            + self.functions.len()
            + self.streams.len()
            + self.events.len()
            + self.created_contexts()
    }

    /// Contexts the guest holds, the primary one included (also the ones a sticky fault
    /// tore down, until released or destroyed).
    pub fn contexts(&self) -> usize {
        self.contexts.len()
    }

    /// Answers a frame refused for its payload (`DecodeError::answerable`): an
    /// `INVALID_VALUE` reply, or a deferred error when it was sent with `NO_REPLY`.
    pub fn refused(&mut self, r: Refused, why: &str) -> Option<Reply> {
        if let Some(notice) = self.check_id(r.id) {
            return Some(notice);
        }
        let detail = format!("guest {}: malformed request: {why}", self.guest);
        if r.no_reply {
            self.ran_in = self.current;
            self.defer(
                StreamId::DEFAULT,
                DeferredError {
                    status: Status::ERROR_INVALID_VALUE,
                    cause: Cause {
                        id: r.id,
                        opcode: r.opcode,
                    },
                    detail,
                },
            );
            None
        } else {
            Some(Reply::error(
                r.id,
                r.opcode,
                Status::ERROR_INVALID_VALUE,
                detail,
            ))
        }
    }

    /// Gives back a reply's body once it was written: a device-to-host copy's buffer is
    /// kept (the largest one given back, up to `max_inline`) for the next copy's data.
    pub fn recycle(&mut self, body: ReplyBody) {
        if let ReplyBody::Data(data) = body {
            let room = data.capacity();
            if data.len() >= RECYCLE_MIN
                && room >= self.spare_data.capacity()
                && room <= self.limits.max_inline as usize
            {
                self.spare_data = data;
            }
        }
    }

    /// A buffer of `n` bytes for a device-to-host copy's data, which the copy overwrites
    /// whole (its old bytes are the session's own earlier data): the spare one given
    /// back by [`Session::recycle`] when it has room, so that a run of large copies costs
    /// no allocation, zero-fill or page faults per copy (only bytes past the length it
    /// came back with are zeroed, after a shorter copy), else a new one (zeroed by the
    /// allocator).
    pub(crate) fn data_buffer(&mut self, n: usize) -> Vec<u8> {
        if n < RECYCLE_MIN || self.spare_data.capacity() < n {
            if n >= RECYCLE_MIN {
                self.fresh_data_buffers += 1;
            }
            return vec![0u8; n];
        }
        let mut data = std::mem::take(&mut self.spare_data);
        data.truncate(n);
        // Zeros copied in (a `memcpy` even in a debug build, where `resize` is a loop
        // per byte), within the capacity: no allocation.
        const ZEROS: [u8; 4096] = [0; 4096];
        while data.len() < n {
            let k = (n - data.len()).min(ZEROS.len());
            data.extend_from_slice(&ZEROS[..k]);
        }
        data
    }

    /// Buffers of at least 64 KiB (`RECYCLE_MIN`) allocated for device-to-host data so far.
    pub fn fresh_data_buffers(&self) -> u64 {
        self.fresh_data_buffers
    }

    /// Runs one request; the reply (`None` for a `NO_REPLY` request). `lent` is the
    /// inline data of a request decoded with `RequestFrame::decode_lent` (empty
    /// otherwise); `mem` is the guest's memory where the transport reaches it.
    pub fn handle(
        &mut self,
        frame: RequestFrame,
        lent: &[u8],
        mem: Option<&GuestMemoryMmap>,
    ) -> Option<Reply> {
        let RequestFrame {
            id,
            no_reply,
            request,
        } = frame;
        if let Some(notice) = self.check_id(id) {
            return Some(notice);
        }
        let opcode = request.opcode();
        let stream = request.stream().map(norm);
        let is_goodbye = matches!(request, Request::Goodbye);
        self.ran_in = None;
        let done = if self.closed {
            Err(failed(Status::ERROR_DEINITIALIZED, "the session has ended"))
        } else {
            self.execute(id, request, lent, mem)
        };
        if is_goodbye {
            if self.live_contexts() > 0 {
                log::info!(
                    "guest {} (session {}): goodbye; releasing its {} context(s), {} bytes of device memory and {} objects",
                    self.guest,
                    self.id,
                    self.live_contexts(),
                    self.mem_used,
                    self.objects()
                );
            }
            self.close();
            self.closed = true;
        }
        match done {
            Ok(body) => {
                if no_reply {
                    // The cause given to a fault that a later synchronisation finds.
                    let ctx = self.ran_in.and_then(|h| self.contexts.get_mut(h));
                    if let (Some(s), Some(c)) = (stream, ctx) {
                        if !c.unsynced.iter().any(|(u, _)| *u == s) {
                            c.unsynced.push((s, Cause { id, opcode }));
                        }
                    }
                    None
                } else {
                    Some(Reply::ok(id, opcode, body))
                }
            }
            Err(Outcome::Reply(r)) => (!no_reply).then_some(r),
            Err(Outcome::Fail(f)) => {
                let f = self.in_guest_terms(f);
                let own = Cause { id, opcode };
                let unpoisoned = self
                    .ran_in
                    .filter(|h| self.contexts.get(*h).is_some_and(|c| c.sticky().is_none()));
                if let (true, Some(h)) = (f.status.is_sticky(), unpoisoned) {
                    // A fault of earlier pipelined work that this call found: the oldest
                    // request of the context not yet synchronised caused it.
                    let cause = self
                        .contexts
                        .get(h)
                        .and_then(|c| c.unsynced.iter().map(|(_, c)| *c).min_by_key(|c| c.id))
                        .unwrap_or(own);
                    self.poison(
                        h,
                        DeferredError {
                            status: f.status,
                            cause,
                            detail: f.detail.clone(),
                        },
                    );
                    if cause != own && !no_reply {
                        return Some(Reply::deferred(id, opcode, f.status, cause, f.detail));
                    }
                }
                if no_reply {
                    self.defer(
                        stream.unwrap_or(StreamId::DEFAULT),
                        DeferredError {
                            status: f.status,
                            cause: own,
                            detail: f.detail,
                        },
                    );
                    None
                } else {
                    Some(Reply::error(id, opcode, f.status, f.detail))
                }
            }
        }
    }

    /// Whether the session ended: the guest said goodbye, or broke the protocol (the
    /// transport closes after the reply or the closing notice).
    pub fn is_closed(&self) -> bool {
        self.closed
    }

    /// The session starts as if `Init` had been received (a worker process that takes
    /// over a guest's session after the one before it ended).
    pub(super) fn assume_initialized(&mut self) {
        self.initialized = true;
    }

    /// The token that cancels the session's work when its guest is gone (a transport
    /// cancels it from another thread when the connection closes; dropping a session
    /// that did not say goodbye cancels it too). On the simulator, running and queued
    /// launches end at once; the native driver cannot stop a running kernel, which is
    /// why the service runs native guests in worker processes (ended instead).
    pub fn cancel_token(&self) -> CancelToken {
        self.gone.clone()
    }

    /// The failure as the guest must read it: a backend stream in its message is named
    /// by the guest's own handle (0 for the default stream), not the backend's.
    fn in_guest_terms(&self, mut f: Fail) -> Fail {
        if let Some(c) = f.cuda.as_mut() {
            if let Some(raw) = c.stream.filter(|r| *r != 0) {
                // Backend stream values are per context: look in the one it ran in.
                c.stream = self.ran_in.and_then(|h| {
                    self.streams
                        .of(h)
                        .find(|(_, s)| s.raw() == raw)
                        .map(|(g, _)| g)
                });
                if c.stream.is_none() {
                    c.operation.push_str(" (on a stream destroyed since)");
                }
                f.detail = cuda_detail(c);
            }
        }
        f
    }

    /// Request ids must increase within a session (deferred errors are ordered by
    /// them): a frame whose id is not above the last one's is a protocol violation,
    /// answered with the closing notice; the session ends.
    fn check_id(&mut self, id: u64) -> Option<Reply> {
        if id > self.last_id || self.closed {
            self.last_id = self.last_id.max(id);
            return None;
        }
        let why = format!(
            "request id {id} is not above the previous request's id {}",
            self.last_id
        );
        log::warn!(
            "guest {} (session {}): protocol violation, closing: {why}",
            self.guest,
            self.id
        );
        self.close();
        self.closed = true;
        Some(Reply::closing_notice(
            Status::ERROR_INVALID_VALUE,
            format!("protocol violation: {why}"),
        ))
    }

    // ----- the part every command shares -----

    /// Runs a request: what the command table says it needs, its sync scope, then its
    /// own code.
    fn execute(
        &mut self,
        id: u64,
        request: Request,
        lent: &[u8],
        mem: Option<&GuestMemoryMmap>,
    ) -> Done {
        let opcode = request.opcode();
        if opcode.needs_init() && !self.initialized {
            return Err(failed(
                Status::ERROR_NOT_INITIALIZED,
                format!(
                    "{} before Init: this session has not called cuInit",
                    opcode.name()
                ),
            ));
        }
        let cx = if opcode.needs_context() {
            self.enter(id, opcode)?
        } else {
            0
        };
        let scope = request.sync_scope();
        if scope != SyncScope::None {
            let target = if opcode.needs_context() {
                Some(cx)
            } else {
                // A session or device command that waits for a context (releasing the
                // primary one, goodbye): that context's work, if it is alive.
                self.scope_context(opcode)
            };
            if let Some(t) = target {
                if t != cx {
                    self.bind(t)?;
                    self.ran_in = Some(t);
                }
                self.synchronise(t, id, opcode, scope)?;
            }
        }
        self.dispatch(cx, request, lent, mem)
    }

    /// Each command's own code; `cx` is the current context for the commands that need
    /// one (entered by [`Session::execute`]), 0 for the others.
    fn dispatch(
        &mut self,
        cx: u64,
        request: Request,
        lent: &[u8],
        mem: Option<&GuestMemoryMmap>,
    ) -> Done {
        use Request as R;
        match request {
            // Session and devices (device.rs).
            R::Ping { data } => self.ping(data, lent),
            R::Init { flags } => self.init(flags),
            R::Goodbye => Ok(ReplyBody::Empty),
            R::DeviceGetCount => self.device_get_count(),
            R::DeviceGet { ordinal } => self.device_get(ordinal),
            R::DeviceGetName { device } => self.device_get_name(device),
            R::DeviceGetPciBusId { device } => self.device_get_pci_bus_id(device),
            R::DeviceTotalMem { device } => self.device_total_mem(device),
            // Contexts (context.rs).
            R::PrimaryCtxRetain { device } => self.primary_ctx_retain(device),
            R::PrimaryCtxRelease { device } => self.primary_ctx_release(device),
            R::CtxSetCurrent { ctx } => self.ctx_set_current(ctx),
            R::CtxSynchronize => Ok(ReplyBody::Empty),
            R::CtxCreate { device, flags } => self.ctx_create(device, flags),
            R::CtxDestroy { ctx } => self.ctx_destroy(ctx),
            // Modules and functions (module.rs).
            R::ModuleLoadData { image } => self.module_load(cx, image),
            R::ModuleUnload { module } => self.module_unload(cx, module),
            R::ModuleGetFunction { module, name } => self.module_get_function(cx, module, &name),
            R::ModuleGetGlobal { module, name } => self.module_get_global(cx, module, &name),
            R::FuncSetAttribute {
                function,
                attribute,
                value,
            } => self.func_set_attribute(cx, function, attribute, value),
            // Memory (memory.rs).
            R::MemAlloc { bytes } => self.mem_alloc(cx, bytes),
            R::MemFree { ptr } => self.mem_free(cx, ptr),
            R::MemGetInfo => self.mem_get_info(),
            R::Memset {
                dst,
                value,
                count,
                width,
                stream,
            } => self.memset(cx, dst, value, count, width, stream),
            // Copies (copy.rs).
            R::MemcpyHtoD { dst, src, stream } => self.memcpy_htod(cx, dst, src, stream, lent, mem),
            R::MemcpyDtoH {
                src,
                bytes,
                dst,
                stream,
            } => self.memcpy_dtoh(cx, src, bytes, dst, stream, mem),
            R::MemcpyDtoD {
                dst,
                src,
                bytes,
                stream,
            } => self.memcpy_dtod(cx, dst, src, bytes, stream),
            // Streams (stream.rs).
            R::StreamCreate { flags, priority } => self.stream_create(cx, flags, priority),
            R::StreamDestroy { stream } => self.stream_destroy(cx, stream),
            R::StreamSynchronize { .. } => Ok(ReplyBody::Empty),
            R::StreamQuery { stream } => self.stream_query(cx, stream),
            R::StreamWaitEvent {
                stream,
                event,
                flags,
            } => self.stream_wait_event(cx, stream, event, flags),
            // Events (event.rs).
            R::EventCreate { flags } => self.event_create(cx, flags),
            R::EventDestroy { event } => self.event_destroy(cx, event),
            R::EventRecord { event, stream } => self.event_record(cx, event, stream),
            R::EventSynchronize { .. } => Ok(ReplyBody::Empty),
            R::EventQuery { event } => self.event_query(cx, event),
            // Launches (launch.rs).
            R::LaunchKernel {
                function,
                config,
                stream,
                params,
            } => self.launch_kernel(cx, function, config, stream, &params, false),
            R::LaunchCooperativeKernel {
                function,
                config,
                stream,
                params,
            } => self.launch_kernel(cx, function, config, stream, &params, true),
            // One backend call each, as their rows say (`Opcode::plain`).
            request => {
                let scope = Scope { session: self, cx };
                vmgpu_cuda_proto::serve(&scope, &request).unwrap_or_else(|| {
                    Err(failed(
                        Status::ERROR_NOT_SUPPORTED,
                        format!("{} has no handler in this service", request.opcode().name()),
                    ))
                })
            }
        }
    }

    /// The current context, entered for a command that needs one: its sticky error
    /// answered, else made current on the backend (this thread). Returns its handle.
    fn enter(&mut self, id: u64, opcode: Opcode) -> Result<u64, Outcome> {
        let Some(h) = self.current else {
            // A fault of the primary context is answered while no context is current,
            // as it was before sessions had other contexts.
            let primary = self.primary.and_then(|p| self.contexts.get(p));
            if let Some(s) = primary.and_then(Ctx::sticky) {
                return Err(Outcome::Reply(Reply::deferred(
                    id,
                    opcode,
                    s.status,
                    s.cause,
                    s.detail.clone(),
                )));
            }
            return Err(failed(
                Status::ERROR_INVALID_CONTEXT,
                "no current context (cuDevicePrimaryCtxRetain and cuCtxSetCurrent, or cuCtxCreate, first)",
            ));
        };
        if let Some(s) = self.contexts.get(h).and_then(Ctx::sticky) {
            return Err(Outcome::Reply(Reply::deferred(
                id,
                opcode,
                s.status,
                s.cause,
                s.detail.clone(),
            )));
        }
        self.bind(h)?;
        self.ran_in = Some(h);
        if !self.loose.is_empty() {
            let loose = std::mem::take(&mut self.loose);
            if let Some(c) = self.contexts.get_mut(h) {
                for (s, e) in loose {
                    c.deferred.record(s, e);
                }
            }
        }
        Ok(h)
    }

    /// The context a session or device command with a sync scope waits for: the
    /// primary one for its release, else the current one (or the primary one) for a
    /// goodbye; only while it is alive.
    fn scope_context(&self, opcode: Opcode) -> Option<u64> {
        let h = match opcode {
            Opcode::PrimaryCtxRelease => self.primary,
            _ => self.current.or(self.primary),
        }?;
        let c = self.contexts.get(h)?;
        (c.live.is_some() && c.sticky().is_none()).then_some(h)
    }

    /// Records the failure of a pipelined request in the context it ran in (or for the
    /// next context entered, when it ran in none).
    fn defer(&mut self, stream: StreamId, err: DeferredError) {
        match self.ran_in.and_then(|h| self.contexts.get_mut(h)) {
            Some(c) => c.deferred.record(stream, err),
            None => {
                if !self.loose.iter().any(|(s, _)| *s == stream) {
                    self.loose.push((stream, err));
                }
            }
        }
    }

    /// The session's backend, for a command of a live context.
    fn backend(&self) -> Result<Arc<dyn Backend>, Outcome> {
        match &self.backend {
            Some(b) => Ok(b.clone()),
            None => Err(failed(Status::ERROR_INVALID_CONTEXT, "no context")),
        }
    }

    /// Whether the backend is the native driver (whose sticky faults poison every
    /// context of the process).
    fn native(&self) -> bool {
        self.backend
            .as_ref()
            .is_some_and(|b| b.kind() == BackendKind::Native)
    }

    /// The object of `handle` in context `cx` of `table`, or `CUDA_ERROR_INVALID_HANDLE`
    /// naming what it is.
    fn found<'a, T>(
        table: &'a Scoped<T>,
        what: &str,
        handle: u64,
        cx: u64,
    ) -> Result<&'a T, Outcome> {
        table.get(handle, cx).map_err(|m| miss(what, handle, m))
    }

    /// Waits as `scope` requires in context `cx` (made current); then reports the
    /// oldest deferred error it covers, or the context's sticky fault it found.
    fn synchronise(
        &mut self,
        cx: u64,
        id: u64,
        opcode: Opcode,
        scope: SyncScope,
    ) -> Result<(), Outcome> {
        let be = self.backend()?;
        let mut covered: Vec<StreamId> = Vec::new();
        // The stream waited for to its end (its staged copies are done).
        let mut waited: Option<StreamId> = None;
        let all = matches!(scope, SyncScope::Context);
        let wait = match scope {
            SyncScope::None => return Ok(()),
            SyncScope::Context => Self::wait_context(&*be),
            SyncScope::Stream(s) => {
                let st = self.stream(cx, s)?;
                let s = norm(s);
                covered.push(s);
                covered.push(StreamId::DEFAULT);
                if opcode == Opcode::StreamQuery {
                    Ok(())
                } else {
                    waited = Some(s);
                    Self::wait_stream(&*be, st)
                }
            }
            SyncScope::Event(e) => {
                let ev = Self::found(&self.events, "event", e.0, cx)?;
                if let Some(s) = ev.recorded_on {
                    covered.push(s);
                }
                if opcode == Opcode::EventQuery {
                    Ok(())
                } else {
                    Self::wait_event(&*be, &ev.event)
                }
            }
        };
        match wait {
            Ok(()) => {
                let Some(c) = self.contexts.get_mut(cx) else {
                    return Ok(());
                };
                if all {
                    c.unsynced.clear();
                    self.staged_bytes -= c.staged_bytes;
                    c.staged.clear();
                    c.staged_bytes = 0;
                } else if let Some(done) = waited {
                    // What is synchronised (the cause a later fault is given) and the
                    // staged bytes go only when their work is done: those of the stream
                    // waited for; not the default stream's with it, nothing on a query
                    // (no wait) or an event (done up to its record only).
                    c.unsynced.retain(|(s, _)| *s != done);
                    let before = c.staged_bytes;
                    c.staged.retain(|(s, _)| *s != done);
                    c.staged_bytes = c.staged.iter().map(|(_, b)| b.len()).sum();
                    self.staged_bytes -= before - c.staged_bytes;
                }
            }
            Err(e) => {
                let f = self.in_guest_terms(Fail::from(e));
                // The fault of an earlier pipelined request: the oldest not yet
                // synchronised among the covered streams.
                let cause = self.contexts.get(cx).and_then(|c| {
                    c.unsynced
                        .iter()
                        .filter(|(s, _)| all || covered.contains(s))
                        .min_by_key(|(_, c)| c.id)
                        .map(|(s, c)| (*s, *c))
                });
                match cause {
                    Some((s, c)) => {
                        let err = DeferredError {
                            status: f.status,
                            cause: c,
                            detail: f.detail,
                        };
                        if f.status.is_sticky() {
                            self.poison(cx, err);
                        } else if let Some(c) = self.contexts.get_mut(cx) {
                            c.deferred.record(s, err);
                        }
                        if let Some(c) = self.contexts.get_mut(cx) {
                            c.unsynced.retain(|(u, _)| *u != s);
                        }
                    }
                    None => {
                        if f.status.is_sticky() {
                            self.poison(
                                cx,
                                DeferredError {
                                    status: f.status,
                                    cause: Cause { id, opcode },
                                    detail: f.detail.clone(),
                                },
                            );
                        }
                        return Err(Outcome::Fail(f));
                    }
                }
            }
        }
        let Some(c) = self.contexts.get_mut(cx) else {
            return Ok(());
        };
        let reply = if all {
            c.deferred
                .reply_for(id, opcode, vmgpu_cuda_proto::Covered::All)
        } else {
            c.deferred
                .reply_for(id, opcode, vmgpu_cuda_proto::Covered::Streams(&covered))
        };
        match reply {
            Some(r) => Err(Outcome::Reply(r)),
            None => Ok(()),
        }
    }

    /// A sticky fault in context `h`: it is torn down (other guests are not touched)
    /// and the error is kept for every later request in it until the guest releases or
    /// destroys it. On the native driver the fault poisons every context of the process,
    /// so all the session's contexts go with the same error; on the simulator its other
    /// contexts keep working.
    fn poison(&mut self, h: u64, err: DeferredError) {
        let mut hit = vec![h];
        if self.native() {
            hit.extend(
                self.contexts
                    .iter()
                    .filter(|(o, c)| *o != h && c.live.is_some())
                    .map(|(o, _)| o),
            );
        }
        for t in hit {
            let Some(c) = self.contexts.get_mut(t) else {
                continue;
            };
            if c.sticky().is_none() {
                if self.gone.is_cancelled() {
                    // Its own cancelled work, not a fault.
                    log::debug!(
                        "guest {} (session {}): cancelled: {}",
                        self.guest,
                        self.id,
                        err.status
                    );
                } else if t == h {
                    log::warn!(
                        "guest {} (session {}): sticky fault {} caused by request {} ({}); its context {t:#x} is reset",
                        self.guest,
                        self.id,
                        err.status,
                        err.cause.id,
                        err.cause.opcode.name()
                    );
                } else {
                    log::warn!(
                        "guest {} (session {}): the fault poisons the process's contexts: its context {t:#x} is reset too",
                        self.guest,
                        self.id
                    );
                }
                c.deferred.record(StreamId::DEFAULT, err.clone());
            }
            self.teardown(t);
        }
    }

    // ----- quotas -----

    /// The object quota (all contexts): room for one more object.
    fn object_quota(&self, what: &str) -> Result<(), Outcome> {
        if self.objects() >= self.quota.max_objects as usize {
            log::warn!(
                "guest {} (session {}): object quota hit ({} live objects) creating a {what}",
                self.guest,
                self.id,
                self.quota.max_objects
            );
            return Err(failed(
                Status::ERROR_OUT_OF_MEMORY,
                format!(
                    "guest {}: quota of {} live objects reached",
                    self.guest, self.quota.max_objects
                ),
            ));
        }
        Ok(())
    }

    /// The device memory quota (all contexts): room for `bytes` more, of `what`.
    fn memory_quota(&self, bytes: u64, what: &str) -> Result<(), Outcome> {
        if self.mem_used.saturating_add(bytes) <= self.quota.device_memory {
            return Ok(());
        }
        log::warn!(
            "guest {} (session {}): memory quota hit: {what} takes {bytes} bytes, {} of {} in use",
            self.guest,
            self.id,
            self.mem_used,
            self.quota.device_memory
        );
        Err(failed(
            Status::ERROR_OUT_OF_MEMORY,
            format!(
                "guest {}: {what} ({bytes} bytes) is over its device memory quota ({} of {} bytes in use)",
                self.guest, self.mem_used, self.quota.device_memory
            ),
        ))
    }
}

/// A session serving one request in context `cx` (0 for session and device commands):
/// what [`vmgpu_cuda_proto::serve`] needs of it.
struct Scope<'a> {
    session: &'a Session,
    cx: u64,
}

impl vmgpu_cuda_proto::serve::Serve for Scope<'_> {
    type Fail = Outcome;

    fn backend(&self, opcode: Opcode) -> Result<Arc<dyn Backend>, Outcome> {
        if opcode.needs_context() {
            self.session.backend()
        } else {
            Ok(self.session.inner.devices.clone())
        }
    }

    fn device(&self, ordinal: u32) -> Result<Device, Outcome> {
        self.session.dev(ordinal)
    }

    fn module(&self, id: ModuleId) -> Result<&Module, Outcome> {
        Session::found(&self.session.modules, "module", id.0, self.cx).map(|m| &m.module)
    }

    fn function(&self, id: FunctionId) -> Result<&Function, Outcome> {
        Session::found(&self.session.functions, "function", id.0, self.cx).map(|f| &f.function)
    }

    fn stream(&self, id: StreamId) -> Result<&Stream, Outcome> {
        self.session.stream(self.cx, id)
    }

    fn event(&self, id: EventId) -> Result<&Event, Outcome> {
        Session::found(&self.session.events, "event", id.0, self.cx).map(|e| &e.event)
    }
}

/// `CUDA_ERROR_INVALID_HANDLE` for a handle that names no `what` of the context.
fn miss(what: &str, h: u64, m: Miss) -> Outcome {
    match m {
        Miss::Dead => bad_handle(what, h),
        Miss::Foreign => failed(
            Status::ERROR_INVALID_HANDLE,
            format!(
                "{what} {h:#x} belongs to another context of this session, not the current one"
            ),
        ),
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        if !self.closed {
            // Gone without a goodbye: nobody waits for its work.
            self.gone.cancel();
        }
        let had = self.live_contexts();
        let (bytes, objects) = (self.mem_used, self.objects());
        self.close();
        self.inner.stats.sessions.fetch_sub(1, Ordering::Relaxed);
        log::info!(
            "guest {} (session {}): session ended{}",
            self.guest,
            self.id,
            if had > 0 {
                format!(
                    "; released its {had} context(s), {bytes} bytes of device memory and {objects} objects"
                )
            } else {
                String::new()
            }
        );
    }
}

/// The bytes of a scatter-gather list (an overflowing list is refused).
fn sg_total(entries: &[vmgpu_cuda_proto::SgEntry]) -> Result<u64, Outcome> {
    entries
        .iter()
        .try_fold(0u64, |acc, e| acc.checked_add(e.len))
        .ok_or_else(|| invalid("the entries' lengths overflow"))
}

fn truncate_utf8(s: &mut String, max: usize) {
    if s.len() > max {
        let mut end = max;
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        s.truncate(end);
    }
}

#[cfg(test)]
mod tests {
    use vmgpu_cuda_proto::{Opcode, RequestFrame};

    /// The file of a command's family: the table's grouping by the opcode's high byte
    /// (`0x04..` is memory, its memsets `0x041.` too, and copies `0x042.`).
    fn family(op: Opcode) -> Option<(&'static str, &'static str)> {
        let code = op.code();
        Some(match code >> 8 {
            0 | 1 => ("device.rs", include_str!("session/device.rs")),
            2 => ("context.rs", include_str!("session/context.rs")),
            3 => ("module.rs", include_str!("session/module.rs")),
            4 if code & 0xf0 == 0x20 => ("copy.rs", include_str!("session/copy.rs")),
            4 => ("memory.rs", include_str!("session/memory.rs")),
            5 => ("stream.rs", include_str!("session/stream.rs")),
            6 => ("event.rs", include_str!("session/event.rs")),
            7 => ("launch.rs", include_str!("session/launch.rs")),
            _ => return None,
        })
    }

    /// Each command's code (in its family's file) calls the `Backend` methods its row of
    /// the command table names; a command served by one backend call (`Opcode::plain`)
    /// has none, and every other one its arm in the dispatcher (the last arm answers
    /// the plain ones).
    #[test]
    fn each_family_calls_the_backend_methods_of_its_rows() {
        let dispatcher = include_str!("session.rs");
        let mut missing = Vec::new();
        for &op in Opcode::ALL {
            let variant = op.name().strip_suffix("Async").unwrap_or(op.name());
            let arm = dispatcher.contains(&format!("R::{variant} "));
            if op.plain() {
                if arm {
                    missing.push(format!("{op:?}: generated, yet an arm of its own"));
                }
                continue;
            }
            if !arm {
                missing.push(format!("{op:?}: no arm in the dispatcher"));
            }
            let Some((file, text)) = family(op) else {
                missing.push(format!("{op:?}: no family file"));
                continue;
            };
            for m in op.backend_methods() {
                if !text.contains(&format!(".{m}(")) {
                    missing.push(format!("{op:?}: {file} does not call Backend::{m}"));
                }
            }
        }
        assert!(missing.is_empty(), "{missing:#?}");
    }

    /// A session of a simulator service with a context current and `bytes` of device
    /// memory holding 0, 1, 2, ... (mod 251); its allocation.
    fn session_with_memory(bytes: usize) -> (super::Session, vmgpu_cuda_api::DevicePtr) {
        use vmgpu_cuda_proto::{Features, HostSource, Limits, ReplyBody, Request};
        let svc = crate::Service::new(
            crate::BackendChoice::Simulator(vmgpu_cuda_sim::SimConfig::default()),
            crate::ServiceConfig::default(),
        )
        .unwrap();
        let mut s = svc.open_session("g", 1, Limits::default(), Features::ALL);
        let mut id = 0;
        let mut ok = |s: &mut super::Session, request: Request| {
            id += 1;
            let r = s.handle(RequestFrame::new(id, request), &[], None).unwrap();
            assert!(r.status.is_success(), "{r:?}");
            r.body
        };
        ok(&mut s, Request::Init { flags: 0 });
        let ReplyBody::Context(ctx) = ok(&mut s, Request::PrimaryCtxRetain { device: 0 }) else {
            panic!("a context")
        };
        ok(&mut s, Request::CtxSetCurrent { ctx });
        let ReplyBody::DevicePtr(d) = ok(
            &mut s,
            Request::MemAlloc {
                bytes: bytes as u64,
            },
        ) else {
            panic!("an allocation")
        };
        let data: Vec<u8> = (0..bytes).map(|i| (i % 251) as u8).collect();
        let src = HostSource::Inline(data);
        let stream = None;
        ok(
            &mut s,
            Request::MemcpyHtoD {
                dst: d,
                src,
                stream,
            },
        );
        (s, d)
    }

    #[test]
    fn device_to_host_copies_reuse_the_buffer_given_back() {
        // Large copies, each reply given back once written (as the connection worker
        // and the embedding API do): one buffer is allocated for all of them, and each
        // reply holds exactly its copy's bytes (never a zero or a stale byte).
        use vmgpu_cuda_proto::{HostDest, ReplyBody, Request, StreamId};
        let n = 1 << 20;
        let (mut s, d) = session_with_memory(2 * n);
        let mut seen = Vec::new();
        let sizes = [n, n, n / 2, 3 << 16, n / 2, 1000, n / 2];
        for (i, &len) in sizes.iter().enumerate() {
            let at = (i * 4099) % (n - len + 1);
            let copy = Request::MemcpyDtoH {
                src: d.offset(at as u64),
                bytes: len as u64,
                dst: HostDest::Inline,
                stream: (i % 2 == 1).then_some(StreamId::DEFAULT),
            };
            let r = s
                .handle(RequestFrame::new(100 + i as u64, copy), &[], None)
                .unwrap();
            let ReplyBody::Data(data) = &r.body else {
                panic!("{r:?}")
            };
            let want: Vec<u8> = (at..at + len).map(|i| (i % 251) as u8).collect();
            assert!(*data == want, "copy {i}: other bytes");
            seen.push((data.as_ptr() as usize, data.len()));
            s.recycle(r.body);
        }
        // One buffer, the first copy's, for all (the small one takes a small one of
        // its own).
        assert_eq!(s.fresh_data_buffers(), 1);
        let first = seen[0].0;
        for (i, &(at, len)) in seen.iter().enumerate() {
            if len >= super::RECYCLE_MIN {
                assert_eq!(at, first, "copy {i} ({len} bytes) got a buffer of its own");
            }
        }
        // A longer copy than the spare has room for: a new buffer, then kept.
        for k in 0..2 {
            let copy = Request::MemcpyDtoH {
                src: d,
                bytes: 2 * n as u64,
                dst: HostDest::Inline,
                stream: None,
            };
            let r = s
                .handle(RequestFrame::new(200 + k, copy), &[], None)
                .unwrap();
            let ReplyBody::Data(data) = &r.body else {
                panic!("{r:?}")
            };
            let want: Vec<u8> = (0..2 * n).map(|i| (i % 251) as u8).collect();
            assert!(*data == want, "other bytes");
            s.recycle(r.body);
        }
        assert_eq!(s.fresh_data_buffers(), 2);
    }
}
