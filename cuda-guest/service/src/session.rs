//! One guest's session: its context, its handle tables, its allocations, its quota and
//! its deferred and sticky errors; and the dispatcher that runs a decoded request on the
//! backend. Pure and synchronous: the transports and the embedding API drive it from
//! one thread at a time (the backend calls block).

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use vm_memory::{GuestAddress, GuestMemoryBackend, GuestMemoryMmap};

use super::handles::{Kind, Table};
use super::{Gpu, Inner, Quota};
use vmgpu_cuda_api::{
    Backend, Context, CudaError, Device, DeviceAttribute, DevicePtr, DriverError, Event,
    EventFlags, Function, FunctionAttribute, HostRegisterFlags, LaunchConfig, Module, Stream,
    StreamFlags,
};
use vmgpu_cuda_proto::{
    Cause, ContextId, Covered, DeferredError, DeferredErrors, EventId, Features, FunctionId,
    FunctionInfo, HostDest, HostSource, Limits, MemsetWidth, ModuleId, Opcode, ParamLayout,
    Refused, Reply, ReplyBody, Request, RequestFrame, SgEntry, Status, StreamId, SyncScope,
};
use vmgpu_cuda_sim::CancelToken;
use vmgpu_ptx::Space;

/// Inline bytes of asynchronous host-to-device copies kept for the device before the
/// session waits for their stream (the copies read them when the stream reaches them).
const STAGING_CAP: usize = 64 << 20;

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

#[derive(Debug)]
struct ModuleEntry {
    module: Module,
    /// Parameter layouts of the module's kernels, read from its PTX.
    layouts: HashMap<String, Vec<ParamLayout>>,
    /// The function handle given out for each kernel name (one per name, as the driver
    /// gives one `CUfunction`).
    functions: HashMap<String, u64>,
    /// Device memory its `.global`/`.const` variables hold (counted in `mem_used`).
    device_bytes: u64,
    /// Host memory the service holds for it (counted in `host_used`).
    host_bytes: u64,
    /// Its variables whose address the guest asked for (`ModuleGetGlobal`): base to size.
    variables: BTreeMap<u64, u64>,
}

#[derive(Debug)]
struct FunctionEntry {
    function: Function,
    module: u64,
    layout: Option<Vec<ParamLayout>>,
}

#[derive(Debug)]
struct EventEntry {
    event: Event,
    /// The stream it was last recorded on (normalised).
    recorded_on: Option<StreamId>,
}

/// The session's live context on the backend.
#[derive(Debug)]
struct LiveContext {
    backend: Arc<dyn Backend>,
    ctx: Context,
    /// The backend is this session's own simulator instance (dropped with the context);
    /// otherwise the context was made with `context_create` on a shared backend.
    own_instance: bool,
    /// Guest memory regions registered with the driver (start, length).
    registered: Vec<(usize, usize)>,
}

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
    /// The context handle the guest holds (kept after a sticky fault until released).
    ctx_handle: Option<u64>,
    ctx_table: Table<()>,
    retains: u32,
    live: Option<LiveContext>,
    current: bool,
    deferred: DeferredErrors,
    modules: Table<ModuleEntry>,
    functions: Table<FunctionEntry>,
    streams: Table<Stream>,
    events: Table<EventEntry>,
    /// Live allocations: base to size.
    allocs: BTreeMap<u64, u64>,
    mem_used: u64,
    /// Host memory held for the session's modules ([`Quota::module_host_memory`]).
    host_used: u64,
    /// Per stream, the first pipelined request not yet synchronised: the cause given to
    /// an asynchronous fault that a later synchronisation finds.
    unsynced: Vec<(StreamId, Cause)>,
    /// Bytes of asynchronous inline copies, held until their stream is synchronised.
    staged: VecDeque<(StreamId, Vec<u8>)>,
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
}

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

fn bad_handle(what: &str, h: u64) -> Outcome {
    Outcome::Fail(Fail::new(
        Status::ERROR_INVALID_HANDLE,
        format!("{what} {h:#x} is not a live {what} of this session"),
    ))
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
            ctx_handle: None,
            ctx_table: Table::new(Kind::Context, key),
            retains: 0,
            live: None,
            current: false,
            deferred: DeferredErrors::new(),
            modules: Table::new(Kind::Module, key.rotate_left(8)),
            functions: Table::new(Kind::Function, key.rotate_left(16)),
            streams: Table::new(Kind::Stream, key.rotate_left(24)),
            events: Table::new(Kind::Event, key.rotate_left(32)),
            allocs: BTreeMap::new(),
            mem_used: 0,
            host_used: 0,
            unsynced: Vec::new(),
            staged: VecDeque::new(),
            staged_bytes: 0,
            refilled: Instant::now(),
            last_throttle_log: None,
            guest_mem: None,
            closed: false,
            initialized: false,
            last_id: 0,
            gone: CancelToken::new(),
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

    /// Device memory the guest holds, in bytes.
    pub fn mem_used(&self) -> u64 {
        self.mem_used
    }

    /// Host memory the service holds for the guest's modules, in bytes
    /// ([`Quota::module_host_memory`]).
    pub fn host_used(&self) -> u64 {
        self.host_used
    }

    /// Live objects the guest holds (allocations, modules, functions, streams, events).
    pub fn objects(&self) -> usize {
        self.allocs.len()
            + self.modules.len()
            + self.functions.len()
            + self.streams.len()
            + self.events.len()
    }

    /// Answers a frame refused for its payload (`DecodeError::answerable`): an
    /// `INVALID_VALUE` reply, or a deferred error when it was sent with `NO_REPLY`.
    pub fn refused(&mut self, r: Refused, why: &str) -> Option<Reply> {
        if let Some(notice) = self.check_id(r.id) {
            return Some(notice);
        }
        let detail = format!("guest {}: malformed request: {why}", self.guest);
        if r.no_reply {
            self.deferred.record(
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
        let done = if self.closed {
            Err(Outcome::Fail(Fail::new(
                Status::ERROR_DEINITIALIZED,
                "the session has ended",
            )))
        } else {
            self.execute(id, request, lent, mem)
        };
        if is_goodbye {
            if self.live.is_some() {
                log::info!(
                    "guest {} (session {}): goodbye; releasing its context, {} bytes of device memory and {} objects",
                    self.guest,
                    self.id,
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
                    if let Some(s) = stream {
                        if !self.unsynced.iter().any(|(u, _)| *u == s) {
                            self.unsynced.push((s, Cause { id, opcode }));
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
                if f.status.is_sticky() && self.deferred.sticky().is_none() {
                    // A fault of earlier pipelined work that this call found: the oldest
                    // request not yet synchronised caused it.
                    let cause = self
                        .unsynced
                        .iter()
                        .map(|(_, c)| *c)
                        .min_by_key(|c| c.id)
                        .unwrap_or(own);
                    self.poison(DeferredError {
                        status: f.status,
                        cause,
                        detail: f.detail.clone(),
                    });
                    if cause != own && !no_reply {
                        return Some(Reply::deferred(id, opcode, f.status, cause, f.detail));
                    }
                }
                let cause = own;
                if no_reply {
                    self.deferred.record(
                        stream.unwrap_or(StreamId::DEFAULT),
                        DeferredError {
                            status: f.status,
                            cause,
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

    /// The failure as the guest must read it: a backend stream in its message is named
    /// by the guest's own handle (0 for the default stream), not the backend's.
    fn in_guest_terms(&self, mut f: Fail) -> Fail {
        if let Some(c) = f.cuda.as_mut() {
            if let Some(raw) = c.stream.filter(|r| *r != 0) {
                c.stream = self
                    .streams
                    .iter()
                    .find(|(_, s)| s.raw() == raw)
                    .map(|(h, _)| h);
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

    /// The token that cancels the session's work when its guest is gone (a transport
    /// cancels it from another thread when the connection closes; dropping a session
    /// that did not say goodbye cancels it too). On the simulator, running and queued
    /// launches end at once; the native driver cannot stop a running kernel, which is
    /// why the service runs native guests in worker processes (ended instead).
    pub fn cancel_token(&self) -> CancelToken {
        self.gone.clone()
    }

    fn execute(
        &mut self,
        id: u64,
        request: Request,
        lent: &[u8],
        mem: Option<&GuestMemoryMmap>,
    ) -> Done {
        use Request as R;
        let opcode = request.opcode();
        let scope = request.sync_scope();
        if opcode.needs_init() && !self.initialized {
            return Err(Outcome::Fail(Fail::new(
                Status::ERROR_NOT_INITIALIZED,
                format!(
                    "{} before Init: this session has not called cuInit",
                    opcode.name()
                ),
            )));
        }
        let needs_ctx = opcode.needs_context();
        if needs_ctx {
            self.require_context(id, opcode)?;
        }
        let waits = scope != SyncScope::None
            && (needs_ctx || (self.live.is_some() && self.deferred.sticky().is_none()));
        if waits {
            self.synchronise(id, opcode, scope)?;
        }
        match request {
            R::Ping { data } => Ok(ReplyBody::Data(if data.is_empty() {
                lent.to_vec()
            } else {
                data
            })),
            R::Init { flags } => {
                if flags != 0 {
                    return Err(invalid("cuInit flags must be 0"));
                }
                self.initialized = true;
                Ok(ReplyBody::Empty)
            }
            R::DriverGetVersion => Ok(ReplyBody::Int(self.inner.devices.driver_version()?)),
            R::Goodbye => Ok(ReplyBody::Empty),
            R::DeviceGetCount => Ok(ReplyBody::Count(1)),
            R::DeviceGet { ordinal } => {
                self.dev(ordinal)?;
                Ok(ReplyBody::Device(ordinal))
            }
            R::DeviceGetName { device } => {
                let d = self.dev(device)?;
                let mut name = self.inner.devices.device_name(d)?;
                truncate_utf8(&mut name, self.limits.max_name as usize);
                Ok(ReplyBody::Text(name))
            }
            R::DeviceGetUuid { device } => {
                let d = self.dev(device)?;
                Ok(ReplyBody::Uuid(self.inner.devices.device_uuid(d)?))
            }
            R::DeviceGetPciBusId { device } => {
                let d = self.dev(device)?;
                let mut id = self.inner.devices.device_pci_bus_id(d)?;
                truncate_utf8(&mut id, self.limits.max_name as usize);
                Ok(ReplyBody::Text(id))
            }
            R::DeviceGetAttribute { device, attribute } => {
                let d = self.dev(device)?;
                let v = self
                    .inner
                    .devices
                    .device_attribute(d, DeviceAttribute::Raw(attribute))?;
                Ok(ReplyBody::Int(v))
            }
            R::DeviceTotalMem { device } => {
                let d = self.dev(device)?;
                let total = self.inner.devices.device_total_mem(d)?;
                Ok(ReplyBody::Size(total.min(self.quota.device_memory)))
            }
            R::DeviceComputeCapability { device } => {
                let d = self.dev(device)?;
                let (major, minor) = self.inner.devices.compute_capability(d)?;
                Ok(ReplyBody::ComputeCapability { major, minor })
            }
            R::PrimaryCtxRetain { device } => {
                self.dev(device)?;
                if self.ctx_handle.is_none() {
                    self.open()?;
                }
                self.retains = self.retains.saturating_add(1);
                Ok(ReplyBody::Context(ContextId(self.ctx_handle.unwrap_or(0))))
            }
            R::PrimaryCtxRelease { device } => {
                self.dev(device)?;
                if self.retains == 0 {
                    return Err(Outcome::Fail(Fail::new(
                        Status::ERROR_INVALID_CONTEXT,
                        "the primary context is not retained",
                    )));
                }
                self.retains -= 1;
                if self.retains == 0 {
                    self.close();
                }
                Ok(ReplyBody::Empty)
            }
            R::CtxSetCurrent { ctx } => {
                if ctx.0 == 0 {
                    self.current = false;
                    return Ok(ReplyBody::Empty);
                }
                match self.ctx_handle {
                    Some(h) if h == ctx.0 && self.ctx_table.get(h).is_some() => {
                        self.current = true;
                        Ok(ReplyBody::Empty)
                    }
                    _ => Err(Outcome::Fail(Fail::new(
                        Status::ERROR_INVALID_CONTEXT,
                        format!("context {:#x} is not a live context of this session", ctx.0),
                    ))),
                }
            }
            R::CtxSynchronize => Ok(ReplyBody::Empty),
            R::ModuleLoadData { image } => self.module_load(image),
            R::ModuleUnload { module } => {
                let Some(entry) = self.modules.remove(module.0) else {
                    return Err(bad_handle("module", module.0));
                };
                self.mem_used -= entry.device_bytes;
                self.host_used -= entry.host_bytes;
                self.inner
                    .stats
                    .device_bytes
                    .fetch_sub(entry.device_bytes, Ordering::Relaxed);
                let gone: Vec<u64> = self
                    .functions
                    .iter()
                    .filter(|(_, f)| f.module == module.0)
                    .map(|(h, _)| h)
                    .collect();
                for h in gone {
                    self.functions.remove(h);
                }
                // SAFETY: the request synchronised the context first (its scope), so no
                // launch of the module is pending, and its functions were just removed
                // from the session's table, so none is launched afterwards.
                unsafe { self.backend()?.module_unload(entry.module)? };
                Ok(ReplyBody::Empty)
            }
            R::ModuleGetFunction { module, name } => self.get_function(module, &name),
            R::ModuleGetGlobal { module, name } => {
                let Some(m) = self.modules.get(module.0) else {
                    return Err(bad_handle("module", module.0));
                };
                let (dptr, bytes) = self.backend()?.module_get_global(&m.module, &name)?;
                // Copies and memsets may reach it from now on (until the module goes).
                if let Some(m) = self.modules.get_mut(module.0) {
                    m.variables.insert(dptr.0, bytes as u64);
                }
                Ok(ReplyBody::Global {
                    dptr,
                    bytes: bytes as u64,
                })
            }
            R::FuncGetAttribute {
                function,
                attribute,
            } => {
                let Some(f) = self.functions.get(function.0) else {
                    return Err(bad_handle("function", function.0));
                };
                let a = FunctionAttribute::from_code(attribute)
                    .ok_or_else(|| invalid(format!("function attribute {attribute}")))?;
                Ok(ReplyBody::Int(
                    self.backend()?.function_attribute(&f.function, a)?,
                ))
            }
            R::FuncSetAttribute {
                function,
                attribute,
                value,
            } => {
                let Some(f) = self.functions.get(function.0) else {
                    return Err(bad_handle("function", function.0));
                };
                let a = FunctionAttribute::from_code(attribute)
                    .ok_or_else(|| invalid(format!("function attribute {attribute}")))?;
                self.backend()?
                    .function_set_attribute(&f.function, a, value)?;
                Ok(ReplyBody::Empty)
            }
            R::CtxCreate { .. } | R::CtxDestroy { .. } => Err(Outcome::Fail(Fail::new(
                Status::ERROR_NOT_SUPPORTED,
                "a second context in one session is not served yet",
            ))),
            R::MemAlloc { bytes } => self.mem_alloc(bytes),
            R::MemFree { ptr } => {
                let Some(size) = self.allocs.get(&ptr.0).copied() else {
                    return Err(invalid(format!(
                        "{:#x} is not the start of a live allocation of this session",
                        ptr.0
                    )));
                };
                self.backend()?.mem_free(DevicePtr(ptr.0))?;
                self.allocs.remove(&ptr.0);
                self.mem_used -= size;
                self.inner
                    .stats
                    .device_bytes
                    .fetch_sub(size, Ordering::Relaxed);
                Ok(ReplyBody::Empty)
            }
            R::MemGetInfo => {
                let be = self.backend()?;
                let dev = be.mem_get_info()?;
                let total = dev.total.min(self.quota.device_memory);
                let free = total.saturating_sub(self.mem_used).min(dev.free);
                Ok(ReplyBody::MemInfo { free, total })
            }
            R::Memset {
                dst,
                value,
                count,
                width,
                stream,
            } => self.memset(dst, value, count, width, stream),
            R::MemcpyHtoD { dst, src, stream } => self.htod(dst, src, stream, lent, mem),
            R::MemcpyDtoH {
                src,
                bytes,
                dst,
                stream,
            } => self.dtoh(src, bytes, dst, stream, mem),
            R::MemcpyDtoD {
                dst,
                src,
                bytes,
                stream,
            } => {
                self.check_range(dst, bytes, "destination")?;
                self.check_range(src, bytes, "source")?;
                let n = usize::try_from(bytes).map_err(|_| invalid("size"))?;
                let be = self.backend()?;
                match stream {
                    None => {
                        // SAFETY: both ranges lie inside live device allocations of this
                        // session (checked above).
                        unsafe { be.memcpy_dtod(DevicePtr(dst.0), DevicePtr(src.0), n)? }
                    }
                    Some(s) => {
                        let st = self.stream(s)?;
                        // SAFETY: as above.
                        unsafe { be.memcpy_dtod_async(DevicePtr(dst.0), DevicePtr(src.0), n, st)? }
                    }
                }
                Ok(ReplyBody::Empty)
            }
            R::StreamCreate { flags, priority: _ } => {
                if flags & !1 != 0 {
                    return Err(invalid(format!("stream flags {flags:#x}")));
                }
                self.object_quota("stream")?;
                let s = self.backend()?.stream_create(StreamFlags {
                    non_blocking: flags & 1 != 0,
                })?;
                Ok(ReplyBody::Stream(StreamId(self.streams.insert(s))))
            }
            R::StreamDestroy { stream } => {
                let Some(s) = self.streams.remove(stream.0) else {
                    return Err(bad_handle("stream", stream.0));
                };
                self.deferred.forget_stream(stream);
                self.unsynced.retain(|(u, _)| *u != stream);
                self.backend()?.stream_destroy(s)?;
                Ok(ReplyBody::Empty)
            }
            R::StreamSynchronize { .. } => Ok(ReplyBody::Empty),
            R::StreamQuery { stream } => {
                let st = self.stream(stream)?;
                if self.backend()?.stream_query(st)? {
                    Ok(ReplyBody::Empty)
                } else {
                    Err(Outcome::Fail(Fail::new(Status::ERROR_NOT_READY, "")))
                }
            }
            R::StreamWaitEvent {
                stream,
                event,
                flags,
            } => {
                if flags != 0 {
                    return Err(invalid("cuStreamWaitEvent flags must be 0"));
                }
                let st = self.stream(stream)?;
                let Some(ev) = self.events.get(event.0) else {
                    return Err(bad_handle("event", event.0));
                };
                self.backend()?.stream_wait_event(st, &ev.event)?;
                Ok(ReplyBody::Empty)
            }
            R::EventCreate { flags } => {
                if flags & !3 != 0 {
                    return Err(invalid(format!("event flags {flags:#x}")));
                }
                self.object_quota("event")?;
                let e = self.backend()?.event_create(EventFlags {
                    blocking_sync: flags & 1 != 0,
                    disable_timing: flags & 2 != 0,
                })?;
                Ok(ReplyBody::Event(EventId(self.events.insert(EventEntry {
                    event: e,
                    recorded_on: None,
                }))))
            }
            R::EventDestroy { event } => {
                let Some(e) = self.events.remove(event.0) else {
                    return Err(bad_handle("event", event.0));
                };
                self.backend()?.event_destroy(e.event)?;
                Ok(ReplyBody::Empty)
            }
            R::EventRecord { event, stream } => {
                let st = self.stream(stream)?;
                let Some(ev) = self.events.get(event.0) else {
                    return Err(bad_handle("event", event.0));
                };
                self.backend()?.event_record(&ev.event, st)?;
                if let Some(ev) = self.events.get_mut(event.0) {
                    ev.recorded_on = Some(norm(stream));
                }
                Ok(ReplyBody::Empty)
            }
            R::EventSynchronize { .. } => Ok(ReplyBody::Empty),
            R::EventQuery { event } => {
                let Some(ev) = self.events.get(event.0) else {
                    return Err(bad_handle("event", event.0));
                };
                if self.backend()?.event_query(&ev.event)? {
                    Ok(ReplyBody::Empty)
                } else {
                    Err(Outcome::Fail(Fail::new(Status::ERROR_NOT_READY, "")))
                }
            }
            R::EventElapsedTime { start, end } => {
                let (Some(a), Some(b)) = (self.events.get(start.0), self.events.get(end.0)) else {
                    return Err(bad_handle("event", start.0));
                };
                Ok(ReplyBody::ElapsedMs(
                    self.backend()?.event_elapsed_ms(&a.event, &b.event)?,
                ))
            }
            R::LaunchKernel {
                function,
                grid,
                block,
                shared_bytes,
                stream,
                params,
            } => {
                self.launch_quota();
                let Some(f) = self.functions.get(function.0) else {
                    return Err(bad_handle("function", function.0));
                };
                let args: Vec<&[u8]> = if params.is_opaque() {
                    let Some(layout) = &f.layout else {
                        return Err(invalid(
                            "an opaque parameter buffer for a kernel whose layout is unknown",
                        ));
                    };
                    let mut args = Vec::with_capacity(layout.len());
                    for s in layout {
                        let a = params.bytes.get(
                            s.offset as usize..(s.offset as usize).saturating_add(s.size as usize),
                        );
                        match a {
                            Some(a) => args.push(a),
                            None => {
                                return Err(invalid(format!(
                                    "the parameter buffer ({} bytes) ends before the parameter at {}+{}",
                                    params.bytes.len(),
                                    s.offset,
                                    s.size
                                )))
                            }
                        }
                    }
                    args
                } else {
                    let Some(layout) = &f.layout else {
                        return Err(Outcome::Fail(Fail::new(
                            Status::ERROR_NOT_SUPPORTED,
                            "the kernel's parameter layout is unknown",
                        )));
                    };
                    {
                        if layout.len() != params.slots.len()
                            || layout
                                .iter()
                                .zip(&params.slots)
                                .any(|(a, b)| a.size != b.size)
                        {
                            return Err(invalid(format!(
                                "the kernel takes {} parameters of sizes {:?}; the launch gives {} of sizes {:?}",
                                layout.len(),
                                layout.iter().map(|s| s.size).collect::<Vec<_>>(),
                                params.slots.len(),
                                params.slots.iter().map(|s| s.size).collect::<Vec<_>>()
                            )));
                        }
                    }
                    params.args()
                };
                let st = self.stream(stream)?;
                let be = self.backend()?;
                let cfg = LaunchConfig {
                    grid,
                    block,
                    shared_bytes,
                };
                // SAFETY: the arguments match the kernel's parameter list as read from its
                // PTX (checked above; the simulator checks again); the module stays loaded
                // until the launch is done (an unload synchronises the context first);
                // device addresses inside the kernel are the session's own context's: an
                // address outside its allocations faults in its own context only (the
                // device's address translation); the host memory it may reach is what
                // this context registered: the guest's own RAM.
                unsafe { be.launch(&f.function, &cfg, st, &args)? };
                Ok(ReplyBody::Empty)
            }
        }
    }

    // ----- contexts -----

    fn require_context(&mut self, id: u64, opcode: Opcode) -> Result<(), Outcome> {
        if let Some(s) = self.deferred.sticky() {
            return Err(Outcome::Reply(Reply::deferred(
                id,
                opcode,
                s.status,
                s.cause,
                s.detail.clone(),
            )));
        }
        if !self.current || self.live.is_none() {
            return Err(Outcome::Fail(Fail::new(
                Status::ERROR_INVALID_CONTEXT,
                "no current context (cuDevicePrimaryCtxRetain and cuCtxSetCurrent first)",
            )));
        }
        if let Some(l) = &self.live {
            l.backend.context_set_current(&l.ctx)?;
        }
        Ok(())
    }

    fn backend(&self) -> Result<Arc<dyn Backend>, Outcome> {
        match &self.live {
            Some(l) => Ok(l.backend.clone()),
            None => Err(Outcome::Fail(Fail::new(
                Status::ERROR_INVALID_CONTEXT,
                "no context",
            ))),
        }
    }

    fn dev(&self, ordinal: u32) -> Result<Device, Outcome> {
        if ordinal == 0 {
            Ok(self.device)
        } else {
            Err(Outcome::Fail(Fail::new(
                Status::ERROR_INVALID_DEVICE,
                format!("device {ordinal}: this guest has one device (0)"),
            )))
        }
    }

    /// A fresh context: the session's own simulator instance, or a context of its own
    /// on the shared native backend.
    fn open(&mut self) -> Result<(), Outcome> {
        let live = match &self.inner.gpu {
            Gpu::SimPerContext(config) => {
                let mut config = config.clone();
                config.memory_limit = config.memory_limit.min(self.quota.device_memory);
                let sim = vmgpu_cuda_sim::SimBackend::with_cancel(config, self.gone.clone())?;
                let ctx = sim.primary_context_retain(Device::new(0))?;
                sim.context_set_current(&ctx)?;
                LiveContext {
                    backend: Arc::new(sim),
                    ctx,
                    own_instance: true,
                    registered: Vec::new(),
                }
            }
            Gpu::Shared(be) => {
                let ctx = be.context_create(self.device)?;
                be.context_set_current(&ctx)?;
                LiveContext {
                    backend: be.clone(),
                    ctx,
                    own_instance: false,
                    registered: Vec::new(),
                }
            }
        };
        self.live = Some(live);
        self.ctx_handle = Some(self.ctx_table.insert(()));
        self.inner.stats.contexts.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    /// Tears the context down with everything made in it (teardown, release, fault).
    fn teardown(&mut self) {
        let Some(live) = self.live.take() else {
            return;
        };
        // The handles are values; the context's destruction releases what they name.
        let _ = self.modules.drain();
        let _ = self.functions.drain();
        let _ = self.streams.drain();
        let _ = self.events.drain();
        let bytes = std::mem::take(&mut self.mem_used);
        self.host_used = 0;
        self.allocs.clear();
        self.inner
            .stats
            .device_bytes
            .fetch_sub(bytes, Ordering::Relaxed);
        self.unsynced.clear();
        let _ = live.backend.context_set_current(&live.ctx);
        // Waits for work still queued (a sticky context answers at once).
        let _ = live.backend.context_synchronize();
        self.staged.clear();
        self.staged_bytes = 0;
        for (start, _) in &live.registered {
            // SAFETY: the range was registered by this session; its context was just
            // synchronised, so no copy uses it.
            let _ = unsafe { live.backend.host_unregister(*start as *mut u8) };
        }
        if live.own_instance {
            let _ = live.backend.primary_context_release(live.ctx);
            // The instance (its device thread and memory) goes with the last reference.
            drop(live.backend);
        } else {
            // SAFETY: every handle and address of the context was dropped from the
            // session's tables above; this thread stops using it as current (the next
            // context is made current explicitly).
            if let Err(e) = unsafe { live.backend.context_destroy(live.ctx) } {
                log::warn!("guest {}: destroying its context: {e}", self.guest);
            }
        }
        self.inner.stats.contexts.fetch_sub(1, Ordering::Relaxed);
    }

    /// The guest released its context (or said goodbye): everything goes, and the
    /// sticky error with it.
    fn close(&mut self) {
        self.teardown();
        if let Some(h) = self.ctx_handle.take() {
            self.ctx_table.remove(h);
        }
        self.retains = 0;
        self.current = false;
        self.deferred.reset();
    }

    /// A sticky fault: the context is torn down (other guests are not touched) and the
    /// error is kept for every later request until the guest releases the context.
    fn poison(&mut self, err: DeferredError) {
        if self.deferred.sticky().is_none() && self.gone.is_cancelled() {
            // Its own cancelled work, not a fault.
            log::debug!(
                "guest {} (session {}): cancelled: {}",
                self.guest,
                self.id,
                err.status
            );
            self.deferred.record(StreamId::DEFAULT, err);
        } else if self.deferred.sticky().is_none() {
            log::warn!(
                "guest {} (session {}): sticky fault {} caused by request {} ({}); its context is reset",
                self.guest,
                self.id,
                err.status,
                err.cause.id,
                err.cause.opcode.name()
            );
            self.deferred.record(StreamId::DEFAULT, err);
        }
        self.teardown();
    }

    /// Waits as `scope` requires; then reports the oldest deferred error it covers.
    fn synchronise(&mut self, id: u64, opcode: Opcode, scope: SyncScope) -> Result<(), Outcome> {
        let Some(be) = self.live.as_ref().map(|l| l.backend.clone()) else {
            return Ok(());
        };
        let mut covered: Vec<StreamId> = Vec::new();
        // The stream waited for to its end (its staged copies are done).
        let mut waited: Option<StreamId> = None;
        let all = matches!(scope, SyncScope::Context);
        let wait = match scope {
            SyncScope::None => return Ok(()),
            SyncScope::Context => be.context_synchronize(),
            SyncScope::Stream(s) => {
                self.stream(s)?;
                let s = norm(s);
                covered.push(s);
                covered.push(StreamId::DEFAULT);
                if opcode == Opcode::StreamQuery {
                    Ok(())
                } else {
                    waited = Some(s);
                    be.stream_synchronize(self.stream(s)?)
                }
            }
            SyncScope::Event(e) => match self.events.get(e.0) {
                Some(ev) => {
                    if let Some(s) = ev.recorded_on {
                        covered.push(s);
                    }
                    if opcode == Opcode::EventQuery {
                        Ok(())
                    } else {
                        be.event_synchronize(&ev.event)
                    }
                }
                None => return Err(bad_handle("event", e.0)),
            },
        };
        match wait {
            Ok(()) => {
                if all {
                    self.unsynced.clear();
                    self.staged.clear();
                    self.staged_bytes = 0;
                } else if let Some(done) = waited {
                    // What is synchronised (the cause a later fault is given) and the
                    // staged bytes go only when their work is done: those of the stream
                    // waited for; not the default stream's with it, nothing on a query
                    // (no wait) or an event (done up to its record only).
                    self.unsynced.retain(|(s, _)| *s != done);
                    let before = self.staged.len();
                    self.staged.retain(|(s, _)| *s != done);
                    if self.staged.len() != before {
                        self.staged_bytes = self.staged.iter().map(|(_, b)| b.len()).sum();
                    }
                }
            }
            Err(e) => {
                let f = self.in_guest_terms(Fail::from(e));
                // The fault of an earlier pipelined request: the oldest not yet
                // synchronised among the covered streams.
                let cause = self
                    .unsynced
                    .iter()
                    .filter(|(s, _)| all || covered.contains(s))
                    .min_by_key(|(_, c)| c.id)
                    .map(|(s, c)| (*s, *c));
                match cause {
                    Some((s, c)) => {
                        let err = DeferredError {
                            status: f.status,
                            cause: c,
                            detail: f.detail,
                        };
                        if f.status.is_sticky() {
                            self.poison(err);
                        } else {
                            self.deferred.record(s, err);
                        }
                        self.unsynced.retain(|(u, _)| *u != s);
                    }
                    None => {
                        if f.status.is_sticky() {
                            self.poison(DeferredError {
                                status: f.status,
                                cause: Cause { id, opcode },
                                detail: f.detail.clone(),
                            });
                        }
                        return Err(Outcome::Fail(f));
                    }
                }
            }
        }
        let reply = if all {
            self.deferred.reply_for(id, opcode, Covered::All)
        } else {
            self.deferred
                .reply_for(id, opcode, Covered::Streams(&covered))
        };
        match reply {
            Some(r) => Err(Outcome::Reply(r)),
            None => Ok(()),
        }
    }

    // ----- quotas -----

    fn object_quota(&self, what: &str) -> Result<(), Outcome> {
        if self.objects() >= self.quota.max_objects as usize {
            log::warn!(
                "guest {} (session {}): object quota hit ({} live objects) creating a {what}",
                self.guest,
                self.id,
                self.quota.max_objects
            );
            return Err(Outcome::Fail(Fail::new(
                Status::ERROR_OUT_OF_MEMORY,
                format!(
                    "guest {}: quota of {} live objects reached",
                    self.guest, self.quota.max_objects
                ),
            )));
        }
        Ok(())
    }

    /// Takes a launch token, waiting for one when the guest is over its launch rate
    /// (only this guest's thread waits). The wait is cut short when the guest is gone.
    fn launch_quota(&mut self) {
        let Some(rate) = self.quota.launches_per_sec.filter(|r| *r > 0) else {
            return;
        };
        let rate = f64::from(rate);
        let burst = f64::from(self.quota.launch_bucket());
        let mut waited = false;
        loop {
            let now = Instant::now();
            self.tokens =
                (self.tokens + now.duration_since(self.refilled).as_secs_f64() * rate).min(burst);
            self.refilled = now;
            if self.tokens >= 1.0 || self.gone.is_cancelled() {
                break;
            }
            if !waited {
                waited = true;
                self.inner.stats.throttled.fetch_add(1, Ordering::Relaxed);
                if self
                    .last_throttle_log
                    .is_none_or(|t| now.duration_since(t) > Duration::from_secs(5))
                {
                    log::warn!(
                        "guest {} (session {}): launch quota of {}/s hit; its launches are throttled",
                        self.guest,
                        self.id,
                        rate
                    );
                    self.last_throttle_log = Some(now);
                }
            }
            // In slices, so a guest that goes away is noticed.
            let wait = Duration::from_secs_f64((1.0 - self.tokens) / rate);
            std::thread::sleep(wait.min(Duration::from_millis(50)));
        }
        self.tokens -= 1.0;
    }

    // ----- memory -----

    fn mem_alloc(&mut self, bytes: u64) -> Done {
        if bytes == 0 {
            return Err(invalid("cuMemAlloc of 0 bytes"));
        }
        if self.mem_used.saturating_add(bytes) > self.quota.device_memory {
            log::warn!(
                "guest {} (session {}): memory quota hit: {bytes} bytes asked, {} of {} in use",
                self.guest,
                self.id,
                self.mem_used,
                self.quota.device_memory
            );
            return Err(Outcome::Fail(Fail::new(
                Status::ERROR_OUT_OF_MEMORY,
                format!(
                    "guest {}: {bytes} bytes over its device memory quota ({} of {} bytes in use)",
                    self.guest, self.mem_used, self.quota.device_memory
                ),
            )));
        }
        self.object_quota("device allocation")?;
        let n = usize::try_from(bytes)
            .map_err(|_| Outcome::Fail(Fail::new(Status::ERROR_OUT_OF_MEMORY, "size")))?;
        let p = self.backend()?.mem_alloc(n)?;
        self.allocs.insert(p.0, bytes);
        self.mem_used += bytes;
        self.inner
            .stats
            .device_bytes
            .fetch_add(bytes, Ordering::Relaxed);
        Ok(ReplyBody::DevicePtr(DevicePtr(p.0)))
    }

    /// `ptr..ptr+len` inside one live allocation of this session.
    fn check_range(&self, ptr: DevicePtr, len: u64, what: &str) -> Result<(), Outcome> {
        let within = |map: &BTreeMap<u64, u64>| match map.range(..=ptr.0).next_back() {
            Some((&base, &size)) => ptr
                .0
                .checked_sub(base)
                .and_then(|off| off.checked_add(len))
                .is_some_and(|end| end <= size),
            None => false,
        };
        // An allocation, or a module variable the guest asked the address of.
        let ok = within(&self.allocs) || self.modules.iter().any(|(_, m)| within(&m.variables));
        if ok {
            Ok(())
        } else {
            Err(invalid(format!(
                "{what} {:#x}..+{len} is not inside one live allocation of this session",
                ptr.0
            )))
        }
    }

    fn stream(&self, s: StreamId) -> Result<&Stream, Outcome> {
        if s.0 <= 2 {
            return Ok(&Stream::DEFAULT);
        }
        self.streams
            .get(s.0)
            .ok_or_else(|| bad_handle("stream", s.0))
    }

    fn memset(
        &mut self,
        dst: DevicePtr,
        value: u32,
        count: u64,
        width: MemsetWidth,
        stream: Option<StreamId>,
    ) -> Done {
        let bytes = count
            .checked_mul(width.bytes())
            .ok_or_else(|| invalid("memset size overflows"))?;
        if count == 0 {
            // Nothing to set; a made-up stream is still refused.
            if let Some(s) = stream {
                self.stream(s)?;
            }
            return Ok(ReplyBody::Empty);
        }
        if !dst.0.is_multiple_of(width.bytes()) {
            return Err(invalid(format!(
                "{:#x} is not {}-byte aligned",
                dst.0,
                width.bytes()
            )));
        }
        self.check_range(dst, bytes, "destination")?;
        let n = usize::try_from(count).map_err(|_| invalid("size"))?;
        let be = self.backend()?;
        let d = DevicePtr(dst.0);
        let st = match stream {
            None => None,
            Some(s) => Some(self.stream(s)?),
        };
        // SAFETY: the range lies inside a live device allocation of this session
        // (checked above).
        unsafe {
            match (st, width) {
                (None, MemsetWidth::W8) => be.memset_d8(d, value as u8, n)?,
                (None, MemsetWidth::W16) => be.memset_d16(d, value as u16, n)?,
                (None, MemsetWidth::W32) => be.memset_d32(d, value, n)?,
                (Some(st), MemsetWidth::W8) => be.memset_d8_async(d, value as u8, n, st)?,
                (Some(st), MemsetWidth::W16) => be.memset_d16_async(d, value as u16, n, st)?,
                (Some(st), MemsetWidth::W32) => be.memset_d32_async(d, value, n, st)?,
            }
        }
        Ok(ReplyBody::Empty)
    }

    /// Guest memory for a copy: `SCATTER_GATHER` granted, memory given, and each entry
    /// inside it. Returns host pieces (address, length) in order.
    fn resolve_sg(
        &mut self,
        entries: &[SgEntry],
        mem: Option<&GuestMemoryMmap>,
    ) -> Result<Vec<(usize, usize)>, Outcome> {
        if !self.features.contains(Features::SCATTER_GATHER) {
            return Err(Outcome::Fail(Fail::new(
                Status::ERROR_NOT_SUPPORTED,
                "guest memory copies need the SCATTER_GATHER feature (not on socket transports)",
            )));
        }
        let Some(mem) = mem else {
            return Err(Outcome::Fail(Fail::new(
                Status::ERROR_NOT_SUPPORTED,
                "this transport does not reach guest memory",
            )));
        };
        let mut out = Vec::with_capacity(entries.len());
        for e in entries {
            let len = usize::try_from(e.len).map_err(|_| invalid("entry length"))?;
            for piece in GuestMemoryBackend::get_slices(mem, GuestAddress(e.gpa), len) {
                let s = piece.map_err(|err| {
                    invalid(format!(
                        "guest {}: guest memory {:#x}..+{:#x} is not all guest RAM: {err}",
                        self.guest, e.gpa, e.len
                    ))
                })?;
                out.push((s.ptr_guard().as_ptr() as usize, s.len()));
            }
        }
        // Keep the mapping alive while asynchronous copies may read or write it.
        self.guest_mem = Some(mem.clone());
        self.register_guest_memory(mem);
        Ok(out)
    }

    /// Registers the guest's RAM with the driver once per context (`cuMemHostRegister`:
    /// copies from it run at pinned speed, without staging). Not portable: only this
    /// session's context knows it (with unified addressing its kernels could reach
    /// it, which is the guest's own RAM). A failure is not an error (the
    /// copies work from pageable memory too).
    fn register_guest_memory(&mut self, mem: &GuestMemoryMmap) {
        let Some(live) = self.live.as_mut() else {
            return;
        };
        if !live.registered.is_empty() || live.own_instance {
            // The simulator copies from host memory directly; registering would only
            // be bookkeeping.
            return;
        }
        for region in mem.iter() {
            let Ok(slice) = vm_memory::GuestMemoryRegion::get_slice(
                region,
                vm_memory::MemoryRegionAddress(0),
                vm_memory::GuestMemoryRegion::len(region) as usize,
            ) else {
                continue;
            };
            let (ptr, len) = (slice.ptr_guard_mut().as_ptr(), slice.len());
            // SAFETY: the region is mapped guest RAM, and the session keeps a clone of
            // the guest memory (its regions' mappings) until the context is torn down,
            // where the range is unregistered first.
            match unsafe {
                live.backend
                    .host_register(ptr, len, HostRegisterFlags::default())
            } {
                Ok(()) => live.registered.push((ptr as usize, len)),
                Err(e) => log::debug!("guest {}: registering guest memory: {e}", self.guest),
            }
        }
    }

    fn htod(
        &mut self,
        dst: DevicePtr,
        src: HostSource,
        stream: Option<StreamId>,
        lent: &[u8],
        mem: Option<&GuestMemoryMmap>,
    ) -> Done {
        let be = self.backend()?;
        match src {
            HostSource::Inline(data) => {
                let data: &[u8] = if data.is_empty() { lent } else { &data };
                self.check_range(dst, data.len() as u64, "destination")?;
                if data.is_empty() {
                    // Nothing to copy; a made-up stream is still refused.
                    if let Some(s) = stream {
                        self.stream(s)?;
                    }
                    return Ok(ReplyBody::Empty);
                }
                match stream {
                    None => {
                        // SAFETY: the range lies inside a live allocation of this session.
                        unsafe { be.memcpy_htod(DevicePtr(dst.0), data)? }
                    }
                    Some(s) => {
                        let key = norm(s);
                        if self.staged_bytes + data.len() > STAGING_CAP {
                            // Wait for the stream before holding more bytes for it.
                            be.context_synchronize()?;
                            self.staged.clear();
                            self.staged_bytes = 0;
                        }
                        let st = self.stream(s)?;
                        let copy = data.to_vec();
                        // SAFETY: the range lies inside a live allocation of this
                        // session; `copy` is kept in `staged` (its heap buffer does not
                        // move) until the stream or the context has been synchronised.
                        unsafe {
                            be.memcpy_htod_async(DevicePtr(dst.0), copy.as_ptr(), copy.len(), st)?
                        };
                        self.staged_bytes += copy.len();
                        self.staged.push_back((key, copy));
                    }
                }
                Ok(ReplyBody::Empty)
            }
            HostSource::Guest(entries) => {
                let total = sg_total(&entries)?;
                self.check_range(dst, total, "destination")?;
                let pieces = self.resolve_sg(&entries, mem)?;
                let st = match stream {
                    None => &Stream::DEFAULT,
                    Some(s) => self.stream(s)?,
                };
                let mut off = 0u64;
                for (ptr, len) in pieces {
                    // SAFETY: the device range lies inside a live allocation (checked
                    // above); `ptr..ptr+len` is mapped guest RAM that the session keeps
                    // mapped (its clone of the guest memory) until its context is torn
                    // down, which waits for the copy; the guest is not to change it
                    // before synchronising (protocol, section 6).
                    unsafe {
                        be.memcpy_htod_async(DevicePtr(dst.0 + off), ptr as *const u8, len, st)?
                    };
                    off += len as u64;
                }
                if stream.is_none() {
                    be.stream_synchronize(&Stream::DEFAULT)?;
                }
                Ok(ReplyBody::Empty)
            }
        }
    }

    fn dtoh(
        &mut self,
        src: DevicePtr,
        bytes: u64,
        dst: HostDest,
        stream: Option<StreamId>,
        mem: Option<&GuestMemoryMmap>,
    ) -> Done {
        let be = self.backend()?;
        self.check_range(src, bytes, "source")?;
        let n = usize::try_from(bytes).map_err(|_| invalid("size"))?;
        match dst {
            HostDest::Inline => {
                if bytes > u64::from(self.limits.max_inline) {
                    return Err(invalid("more than max_inline bytes"));
                }
                let mut out = vec![0u8; n];
                if n > 0 {
                    match stream {
                        None => {
                            // SAFETY: the range lies inside a live allocation.
                            unsafe { be.memcpy_dtoh(&mut out, DevicePtr(src.0))? }
                        }
                        Some(s) => {
                            let st = self.stream(s)?;
                            // SAFETY: the device range lies inside a live allocation;
                            // `out` is written by nothing else and outlives the copy (the
                            // stream is synchronised before it is read).
                            unsafe {
                                be.memcpy_dtoh_async(out.as_mut_ptr(), DevicePtr(src.0), n, st)?
                            };
                            be.stream_synchronize(st)?;
                        }
                    }
                }
                Ok(ReplyBody::Data(out))
            }
            HostDest::Guest(entries) => {
                let total = sg_total(&entries)?;
                if total != bytes {
                    return Err(invalid("the entries do not add up to the size"));
                }
                let pieces = self.resolve_sg(&entries, mem)?;
                let st = match stream {
                    None => &Stream::DEFAULT,
                    Some(s) => self.stream(s)?,
                };
                let mut off = 0u64;
                for (ptr, len) in pieces {
                    // SAFETY: the device range lies inside a live allocation; the host
                    // piece is mapped guest RAM kept mapped by the session; guest memory
                    // is not a Rust object, and the guest does not use the buffer before
                    // the reply (the stream is synchronised below).
                    unsafe {
                        be.memcpy_dtoh_async(ptr as *mut u8, DevicePtr(src.0 + off), len, st)?
                    };
                    off += len as u64;
                }
                be.stream_synchronize(st)?;
                Ok(ReplyBody::Data(Vec::new()))
            }
        }
    }

    // ----- modules -----

    fn module_load(&mut self, image: Vec<u8>) -> Done {
        if image.len() > self.quota.max_module_bytes as usize {
            log::warn!(
                "guest {} (session {}): module size quota hit ({} bytes, at most {})",
                self.guest,
                self.id,
                image.len(),
                self.quota.max_module_bytes
            );
            return Err(Outcome::Fail(Fail::new(
                Status::ERROR_OUT_OF_MEMORY,
                format!(
                    "guest {}: a module of {} bytes is over its quota of {} bytes",
                    self.guest,
                    image.len(),
                    self.quota.max_module_bytes
                ),
            )));
        }
        self.object_quota("module")?;
        let text = image.strip_suffix(&[0]).unwrap_or(&image);
        let Ok(text) = std::str::from_utf8(text) else {
            return Err(Outcome::Fail(Fail::new(
                Status::ERROR_INVALID_IMAGE,
                "the image is not PTX text (only PTX modules are served)",
            )));
        };
        // What the session reads of the PTX itself: the kernels' parameter layouts and
        // the device memory of the module's variables (counted against the quota before
        // the backend loads it). PTX that our parser does not read but the native driver
        // does gets no layouts and counts no variable memory.
        // One module parsed at a time per process: parsing takes many times the image's
        // size, for its duration.
        let inner = self.inner.clone();
        let _turn = inner.load_turn();
        let mut layouts = HashMap::new();
        let mut device_bytes = 0u64;
        if let Ok(m) = vmgpu_ptx::parse("guest.ptx", text) {
            for f in m.functions.iter().filter(|f| f.is_entry) {
                layouts.insert(
                    f.name.clone(),
                    f.params
                        .iter()
                        .map(|p| ParamLayout {
                            offset: p.offset,
                            size: p.size,
                        })
                        .collect(),
                );
            }
            device_bytes = m
                .variables
                .iter()
                .filter(|v| matches!(v.space, Space::Global | Space::Const) && !v.is_extern)
                .fold(0u64, |n, v| n.saturating_add(v.size().max(1)));
        }
        if self.mem_used.saturating_add(device_bytes) > self.quota.device_memory {
            log::warn!(
                "guest {} (session {}): memory quota hit: a module's variables take {device_bytes} bytes, {} of {} in use",
                self.guest,
                self.id,
                self.mem_used,
                self.quota.device_memory
            );
            return Err(Outcome::Fail(Fail::new(
                Status::ERROR_OUT_OF_MEMORY,
                format!(
                    "guest {}: the module's .global/.const variables ({device_bytes} bytes) are over its device memory quota ({} of {} bytes in use)",
                    self.guest, self.mem_used, self.quota.device_memory
                ),
            )));
        }
        let be = self.backend()?;
        let module = be.module_load_ptx(text)?;
        let host_bytes = be
            .module_host_bytes(&module)
            .unwrap_or(text.len() as u64)
            .saturating_add(layouts.capacity() as u64 * 64);
        if self.host_used.saturating_add(host_bytes) > self.quota.module_host_memory {
            // SAFETY: the module was loaded just now; nothing of it was handed out.
            let _ = unsafe { be.module_unload(module) };
            log::warn!(
                "guest {} (session {}): module host memory quota hit: {host_bytes} bytes, {} of {} in use",
                self.guest,
                self.id,
                self.host_used,
                self.quota.module_host_memory
            );
            return Err(Outcome::Fail(Fail::new(
                Status::ERROR_OUT_OF_MEMORY,
                format!(
                    "guest {}: the module takes {host_bytes} bytes of the service's host memory, over its quota for modules ({} of {} bytes in use)",
                    self.guest, self.host_used, self.quota.module_host_memory
                ),
            )));
        }
        self.host_used += host_bytes;
        self.mem_used += device_bytes;
        self.inner
            .stats
            .device_bytes
            .fetch_add(device_bytes, Ordering::Relaxed);
        let h = self.modules.insert(ModuleEntry {
            module,
            layouts,
            functions: HashMap::new(),
            device_bytes,
            host_bytes,
            variables: BTreeMap::new(),
        });
        Ok(ReplyBody::Module(ModuleId(h)))
    }

    fn get_function(&mut self, module: ModuleId, name: &str) -> Done {
        let Some(m) = self.modules.get(module.0) else {
            return Err(bad_handle("module", module.0));
        };
        if let Some(&h) = m.functions.get(name) {
            if let Some(f) = self.functions.get(h) {
                // The same kernel again: the same handle, no new object.
                return Ok(ReplyBody::Function(FunctionInfo {
                    function: FunctionId(h),
                    params: f.layout.clone(),
                }));
            }
        }
        self.object_quota("function")?;
        let be = self.backend()?;
        let function = be.module_get_function(&m.module, name)?;
        let layout = match be.function_params(&function) {
            Ok(Some(l)) => Some(
                l.into_iter()
                    .map(|p| ParamLayout {
                        offset: p.offset,
                        size: p.size,
                    })
                    .collect::<Vec<_>>(),
            ),
            _ => m.layouts.get(name).cloned(),
        };
        let layout = layout.filter(|l| {
            l.len() <= self.limits.max_params as usize
                && l.last().is_none_or(|s| {
                    u64::from(s.offset) + u64::from(s.size)
                        <= u64::from(self.limits.max_param_bytes)
                })
        });
        let h = self.functions.insert(FunctionEntry {
            function,
            module: module.0,
            layout: layout.clone(),
        });
        if let Some(m) = self.modules.get_mut(module.0) {
            m.functions.insert(name.to_owned(), h);
        }
        Ok(ReplyBody::Function(FunctionInfo {
            function: FunctionId(h),
            params: layout,
        }))
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        if !self.closed {
            // Gone without a goodbye: nobody waits for its work.
            self.gone.cancel();
        }
        let had = self.live.is_some();
        let (bytes, objects) = (self.mem_used, self.objects());
        self.teardown();
        self.inner.stats.sessions.fetch_sub(1, Ordering::Relaxed);
        log::info!(
            "guest {} (session {}): session ended{}",
            self.guest,
            self.id,
            if had {
                format!(
                    "; released its context, {bytes} bytes of device memory and {objects} objects"
                )
            } else {
                String::new()
            }
        );
    }
}

/// The bytes of a scatter-gather list (an overflowing list is refused).
fn sg_total(entries: &[SgEntry]) -> Result<u64, Outcome> {
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
