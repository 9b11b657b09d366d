//! One connection to the service: batching of `NO_REPLY` requests, replies read in
//! order, asynchronous device-to-host data written where the program asked when its
//! reply is read, the deadlock rules of `docs/protocol.md` section 6, and a broken
//! connection failing every later call. Also `Goodbye` at process exit.

use std::collections::{HashMap, VecDeque};
use std::io::Write;
use std::os::fd::RawFd;
use std::sync::{Arc, Mutex, MutexGuard, Once, TryLockError, Weak};

use super::transport::{wait_hangup, Transport, HANGUP_WAIT};
use crate::{Decoder, HostSource, Limits, Reply, ReplyBody, Request, RequestFrame, Status};
use vmgpu_cuda_api::{sys, CudaError, DriverError};

/// Most bytes of asynchronous device-to-host copies left unread on the connection.
pub(super) const UNREAD_DTOH_LIMIT: usize = 1 << 20;
/// Bytes the client may write while a data reply may be waiting unread (well within a
/// socket's buffer).
pub(super) const SMALL_WRITE: usize = 64 << 10;
/// Queued `NO_REPLY` bytes written at once (batching stops here).
const BATCH: usize = 1 << 20;

/// Locks `m`, taking it as it is when a panic on another thread poisoned it.
pub(super) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// A failed request, before it is named: the `CUresult`, what the server (or the
/// client) said, and a JIT log for failed module loads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Fail {
    /// The `CUresult`.
    pub(super) code: i32,
    /// Why.
    pub(super) detail: String,
    /// The JIT error log of a module load.
    pub(super) jit_log: Option<String>,
}

impl Fail {
    /// A failure with `code` and a reason.
    pub(super) fn new(code: i32, detail: impl Into<String>) -> Fail {
        Fail {
            code,
            detail: detail.into(),
            jit_log: None,
        }
    }

    /// A reply's failure: its status, its detail (with the earlier pipelined request it
    /// reports, if any) and, for `CUDA_ERROR_INVALID_PTX`/`_INVALID_IMAGE`, the detail as
    /// the JIT log.
    pub(super) fn of_reply(reply: &Reply) -> Fail {
        let text = reply.detail().unwrap_or_default();
        let mut detail = text.to_string();
        if let Some(c) = reply.cause {
            detail = format!(
                "{detail} (deferred: caused by request {} {})",
                c.id,
                c.opcode.name()
            )
            .trim_start()
            .to_string();
        }
        let code = reply.status.0 as i32;
        let jit_log = (code == sys::CUDA_ERROR_INVALID_PTX
            || code == sys::CUDA_ERROR_INVALID_IMAGE)
            .then(|| text.to_string());
        Fail {
            code: if code == 0 {
                sys::CUDA_ERROR_UNKNOWN
            } else {
                code
            },
            detail,
            jit_log,
        }
    }

    /// The error of CUDA entry point `op`.
    pub(super) fn at(self, op: &'static str) -> DriverError {
        let mut e = CudaError::builtin(self.code, op);
        e.detail = (!self.detail.is_empty()).then_some(self.detail);
        e.jit_log = self.jit_log;
        e.into()
    }
}

impl From<DriverError> for Fail {
    fn from(e: DriverError) -> Fail {
        let code = e.status().0 as i32;
        let detail = match e.as_cuda() {
            Some(c) => c.detail.clone().unwrap_or_default(),
            None => e.to_string(),
        };
        Fail::new(code, detail)
    }
}

/// Results of the connection.
pub(super) type R<T> = Result<T, Fail>;

fn io_fail(what: &str, e: std::io::Error) -> Fail {
    Fail::new(
        sys::CUDA_ERROR_UNKNOWN,
        format!("vmgpu CUDA service: {what}: {e}"),
    )
}

/// A reply body that is not what the request gets.
pub(super) fn unexpected(body: &ReplyBody) -> Fail {
    Fail::new(
        sys::CUDA_ERROR_UNKNOWN,
        format!("vmgpu CUDA service: an unexpected reply body {body:?}"),
    )
}

/// A reply the client waits for: what to do with its body.
#[derive(Debug)]
pub(super) enum Pending {
    /// A synchronous request's reply: returned to the caller.
    Sync,
    /// An asynchronous device-to-host copy: its data goes to this host address.
    DtoH {
        /// Where the data goes (the program's buffer).
        dst: usize,
        /// Bytes asked for.
        len: usize,
    },
}

/// One session with the service.
#[derive(Debug)]
pub(super) struct Conn {
    io: Box<dyn Transport>,
    decoder: Decoder<Reply>,
    /// The session's limits (from the server's hello).
    pub(super) limits: Limits,
    /// The session's protocol minor version.
    pub(super) minor: u16,
    pipelining: bool,
    next_id: u64,
    /// Frames not yet written (NO_REPLY requests are batched until a reply is needed).
    out: Vec<u8>,
    /// Requests awaiting a reply, in order.
    pending: VecDeque<(u64, Pending)>,
    /// Replies to synchronous requests read while looking for another one.
    ready: HashMap<u64, Reply>,
    /// The first failed asynchronous device-to-host copy not reported yet.
    async_failure: Option<Fail>,
    /// The server's handle of the context last set on the connection (0: unknown).
    pub(super) current: u64,
    /// Bytes of asynchronous device-to-host copies whose replies are not read yet.
    unread_dtoh: usize,
    /// A failed transport (or an ended session): every later call fails with this.
    broken: Option<Fail>,
    /// The descriptor of a virtio-serial port transport (see [`wait_hangup`]).
    virtio_port: Option<RawFd>,
    /// Whether `Init` was sent on this session (and succeeded).
    pub(super) init_sent: bool,
    /// Data of asynchronous device-to-host copies is dropped, not written (at process
    /// exit, when the program's buffers may be gone).
    discard_dtoh: bool,
}

impl Conn {
    /// A session over `io` whose server answered with these limits, features and minor
    /// version.
    pub(super) fn new(
        io: Box<dyn Transport>,
        limits: Limits,
        minor: u16,
        pipelining: bool,
        virtio_port: Option<RawFd>,
    ) -> Conn {
        Conn {
            io,
            decoder: Decoder::new(limits),
            limits,
            minor,
            pipelining,
            next_id: 0,
            out: Vec::new(),
            pending: VecDeque::new(),
            ready: HashMap::new(),
            async_failure: None,
            current: 0,
            unread_dtoh: 0,
            broken: None,
            virtio_port,
            init_sent: false,
            discard_dtoh: false,
        }
    }

    fn check(&self) -> R<()> {
        match &self.broken {
            Some(f) => Err(f.clone()),
            None => Ok(()),
        }
    }

    /// Ends the session: `Goodbye` (the service releases everything and hangs up); on a
    /// virtio-serial port, whose host connection outlives the process, also waits until
    /// the port reports the hang-up, so that the next process to open the port writes
    /// its hello to the host's next connection. Every later call fails. With
    /// `discard_dtoh` (at process exit, when the program's buffers may be gone) the data
    /// of asynchronous device-to-host copies still unread is dropped.
    pub(super) fn goodbye(&mut self, discard_dtoh: bool) {
        if self.broken.is_some() {
            return;
        }
        self.discard_dtoh |= discard_dtoh;
        let id = self.id();
        let said = self.send(id, Request::Goodbye, Pending::Sync).is_ok() && self.wait(id).is_ok();
        if said {
            if let Some(fd) = self.virtio_port {
                if !wait_hangup(fd, HANGUP_WAIT) {
                    log::warn!("goodbye: the virtio-serial port was not hung up by the host");
                }
            }
        }
        if self.broken.is_none() {
            self.broken = Some(Fail::new(
                sys::CUDA_ERROR_DEINITIALIZED,
                "the session with the vmgpu CUDA service has ended",
            ));
        }
    }

    /// The next request id.
    pub(super) fn id(&mut self) -> u64 {
        self.next_id += 1;
        self.next_id
    }

    /// Writes the queued frames.
    pub(super) fn flush(&mut self) -> R<()> {
        if self.out.is_empty() {
            return Ok(());
        }
        let r = self.io.write_all(&self.out).and_then(|_| self.io.flush());
        self.out.clear();
        r.map_err(|e| self.break_with(io_fail("write", e)))
    }

    fn break_with(&mut self, f: Fail) -> Fail {
        log::warn!("{} (every later call fails)", f.detail);
        self.broken = Some(f.clone());
        f
    }

    fn encode(&mut self, frame: &RequestFrame) -> R<()> {
        let before = self.out.len();
        if let Err(e) = frame.encode(&mut self.out) {
            self.out.truncate(before);
            return Err(Fail::new(
                sys::CUDA_ERROR_INVALID_VALUE,
                format!("cannot encode the request: {e}"),
            ));
        }
        if self.out.len() >= BATCH {
            self.flush()?;
        }
        Ok(())
    }

    /// Keeps the connection deadlock-free around unread data replies: the service
    /// writes replies with blocking writes and reads no request meanwhile, so while a
    /// data reply may be waiting, the client writes nothing large before reading it.
    fn before(&mut self, request: &Request) -> R<()> {
        // A command the session's protocol lacks (1.1 added `CtxCreate`, ...) is the
        // driver's "not supported", at the call.
        let opcode = request.opcode();
        if opcode.minor() > self.minor {
            return Err(Fail::new(
                sys::CUDA_ERROR_NOT_SUPPORTED,
                format!(
                    "{} needs protocol 1.{}; the session speaks 1.{}",
                    opcode.name(),
                    opcode.minor(),
                    self.minor
                ),
            ));
        }
        if self.unread_dtoh == 0 {
            return Ok(());
        }
        let large = match request {
            Request::MemcpyHtoD {
                src: HostSource::Inline(data),
                ..
            } => data.len(),
            Request::ModuleLoadData { image } => image.len(),
            _ => 0,
        };
        if large + self.out.len() > SMALL_WRITE {
            self.flush()?;
            while self.unread_dtoh > 0 {
                self.read_one()?;
            }
        }
        Ok(())
    }

    /// Queues a request without a reply (or sends it and waits for its reply when the
    /// server did not grant pipelining).
    pub(super) fn post(&mut self, request: Request) -> R<()> {
        self.check()?;
        self.before(&request)?;
        let id = self.id();
        if self.pipelining {
            self.encode(&RequestFrame::pipelined(id, request))
        } else {
            self.send(id, request, Pending::Sync)?;
            let r = self.wait(id)?;
            if r.status.is_success() {
                Ok(())
            } else {
                Err(Fail::of_reply(&r))
            }
        }
    }

    /// Sends a request that gets a reply, without waiting for it.
    pub(super) fn send(&mut self, id: u64, request: Request, pending: Pending) -> R<()> {
        self.check()?;
        self.before(&request)?;
        while self.pending.len() as u64 >= u64::from(self.limits.max_pipelined.max(1)) {
            self.flush()?;
            self.read_one()?;
        }
        let dtoh = match pending {
            Pending::DtoH { len, .. } => len,
            Pending::Sync => 0,
        };
        self.encode(&RequestFrame::new(id, request))?;
        self.pending.push_back((id, pending));
        self.unread_dtoh += dtoh;
        // Replies carrying data are read before much more is written: a server whose
        // replies back up behind ones the client does not read could stop reading the
        // client's requests. Everything is written before waiting, so this cannot block
        // on anything but the device.
        while self.unread_dtoh > UNREAD_DTOH_LIMIT {
            self.flush()?;
            self.read_one()?;
        }
        Ok(())
    }

    /// Reads one reply and handles it.
    fn read_one(&mut self) -> R<()> {
        loop {
            match self.decoder.next_frame() {
                Ok(Some(reply)) => return self.handle(reply),
                Ok(None) => {}
                Err(e) => {
                    return Err(self.break_with(Fail::new(
                        sys::CUDA_ERROR_UNKNOWN,
                        format!("vmgpu CUDA service: a bad reply: {e}"),
                    )))
                }
            }
            match self.decoder.read_from(&mut self.io) {
                Ok(0) => {
                    return Err(self.break_with(Fail::new(
                        sys::CUDA_ERROR_UNKNOWN,
                        "vmgpu CUDA service: the connection was closed",
                    )))
                }
                Ok(_) => {}
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(self.break_with(io_fail("read", e))),
            }
        }
    }

    fn handle(&mut self, reply: Reply) -> R<()> {
        if reply.is_closing_notice() {
            let f = Fail::of_reply(&reply);
            return Err(self.break_with(Fail::new(
                f.code,
                format!("vmgpu CUDA service closed the session: {}", f.detail),
            )));
        }
        let Some((id, what)) = self.pending.pop_front() else {
            return Err(self.break_with(Fail::new(
                sys::CUDA_ERROR_UNKNOWN,
                format!("vmgpu CUDA service: an unexpected reply {}", reply.id),
            )));
        };
        if id != reply.id {
            return Err(self.break_with(Fail::new(
                sys::CUDA_ERROR_UNKNOWN,
                format!("vmgpu CUDA service: reply {} where {id} was due", reply.id),
            )));
        }
        match what {
            Pending::Sync => {
                self.ready.insert(id, reply);
            }
            Pending::DtoH { dst, len } => {
                self.unread_dtoh = self.unread_dtoh.saturating_sub(len);
                if !reply.status.is_success() {
                    // Reported by the next call that waits for a reply (the server keeps
                    // it as the stream's deferred error only for NO_REPLY requests, so
                    // keep it here).
                    let f = Fail::of_reply(&reply);
                    log::debug!("asynchronous device-to-host copy: {}", f.detail);
                    self.async_failure.get_or_insert(f);
                } else if self.discard_dtoh {
                    log::debug!("process exit: {len} bytes of an asynchronous copy dropped");
                } else if let ReplyBody::Data(data) = &reply.body {
                    let n = data.len().min(len);
                    // SAFETY: `dst..dst+len` is the destination of a
                    // `Backend::memcpy_dtoh_async`, which its caller keeps valid, writable
                    // and used by nothing else until the stream has passed the copy; the
                    // program can only learn that through a call that waits for a reply
                    // of this connection, and replies come in order, so this one is read
                    // before any such call returns. `n <= len`, and `data` is a separate
                    // buffer of at least `n` bytes.
                    unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), dst as *mut u8, n) };
                } else {
                    self.async_failure.get_or_insert(unexpected(&reply.body));
                }
            }
        }
        Ok(())
    }

    /// Waits for the reply to `id`.
    pub(super) fn wait(&mut self, id: u64) -> R<Reply> {
        self.flush()?;
        loop {
            if let Some(r) = self.ready.remove(&id) {
                return Ok(r);
            }
            self.read_one()?;
        }
    }

    /// Waits for the reply to `id`: its successful body, or the failure (a failed
    /// asynchronous device-to-host copy read meanwhile is reported first).
    pub(super) fn finish(&mut self, id: u64) -> R<ReplyBody> {
        let r = self.wait(id)?;
        if r.status.is_success() {
            if let Some(failed) = self.async_failure.take() {
                return Err(failed);
            }
            Ok(r.body)
        } else {
            Err(Fail::of_reply(&r))
        }
    }

    /// A synchronous request: its successful body, or the failure.
    pub(super) fn call(&mut self, request: Request) -> R<ReplyBody> {
        let id = self.id();
        self.send(id, request, Pending::Sync)?;
        self.finish(id)
    }
}

/// Whether a query's failure is "not ready" (`CUDA_ERROR_NOT_READY`).
pub(super) fn not_ready(f: &Fail) -> bool {
    f.code == Status::ERROR_NOT_READY.0 as i32
}

/// The sessions of this process that end (`Goodbye`) at its exit.
static SESSIONS: Mutex<Vec<Weak<Mutex<Conn>>>> = Mutex::new(Vec::new());
/// Registers [`goodbye_at_exit`] once.
static AT_EXIT: Once = Once::new();

/// Says `Goodbye` on `conn` at process exit (if it is still open then).
pub(super) fn goodbye_at_exit_of(conn: &Arc<Mutex<Conn>>) {
    {
        let mut s = lock(&SESSIONS);
        s.retain(|w| w.strong_count() > 0);
        s.push(Arc::downgrade(conn));
    }
    AT_EXIT.call_once(|| {
        // SAFETY: registers a function taking and returning nothing that never unwinds
        // (it catches panics) and only touches statics that live as long as the process.
        unsafe { libc::atexit(goodbye_at_exit) };
    });
}

/// `atexit` handler: says goodbye on every open session that no other thread holds.
extern "C" fn goodbye_at_exit() {
    let _ = std::panic::catch_unwind(|| {
        let conns: Vec<Arc<Mutex<Conn>>> = match SESSIONS.try_lock() {
            Ok(s) => s.iter().filter_map(Weak::upgrade).collect(),
            Err(TryLockError::Poisoned(p)) => {
                p.into_inner().iter().filter_map(Weak::upgrade).collect()
            }
            Err(TryLockError::WouldBlock) => return,
        };
        for conn in conns {
            let mut c = match conn.try_lock() {
                Ok(c) => c,
                Err(TryLockError::Poisoned(p)) => p.into_inner(),
                Err(TryLockError::WouldBlock) => continue,
            };
            c.goodbye(true);
        }
    });
}
