//! One connection to the service: batching of `NO_REPLY` requests, replies read in
//! order, asynchronous device-to-host data written where the program asked when its
//! reply is read, the deadlock rules of `docs/protocol.md` section 6, and a broken
//! connection failing every later call. Also `Goodbye` at process exit.

use std::collections::{HashMap, VecDeque};
use std::io::Write;
use std::os::fd::RawFd;
use std::sync::{Arc, Mutex, MutexGuard, Once, TryLockError, Weak};

use super::transport::{wait_hangup, Transport, HANGUP_WAIT};
use crate::{
    Decoder, HostSource, Limits, Opcode, Reply, ReplyBody, Request, RequestFrame, Status, StreamId,
};
use vmgpu_cuda_api::{sys, CudaError, DevicePtr, DriverError};

/// Most bytes of asynchronous device-to-host copies left unread on the connection.
pub(super) const UNREAD_DTOH_LIMIT: usize = 1 << 20;
/// Bytes the client may write while a data reply may be waiting unread (well within a
/// socket's buffer).
pub(super) const SMALL_WRITE: usize = 64 << 10;
/// Queued `NO_REPLY` bytes written at once (batching stops here).
const BATCH: usize = 1 << 20;
/// Inline host-to-device data of at least this many bytes is written to the transport
/// from where the caller has it, right after its frame's head (see [`Conn::send_htod`]);
/// smaller copies are copied once, into the queued frames, and batched.
pub(super) const DIRECT_WRITE: usize = 64 << 10;

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
    /// A synchronous device-to-host copy: its data goes to this host address (read
    /// straight into it, see [`Decoder::read_data_into`]); its reply, with an empty body,
    /// is returned to the caller, who keeps the address valid until then.
    Into {
        /// Where the data goes (the caller's buffer).
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
    /// Bytes written straight to the transport ([`Conn::send_htod`]) while data replies
    /// may be waiting unread (counted with the queued ones against [`SMALL_WRITE`]).
    written_unread: usize,
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
            written_unread: 0,
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
        let large = match request {
            Request::MemcpyHtoD {
                src: HostSource::Inline(data),
                ..
            } => data.len(),
            Request::ModuleLoadData { image } => image.len(),
            _ => 0,
        };
        self.before_op(request.opcode(), large)
    }

    /// [`Conn::before`] for a request with opcode `opcode` carrying `large` bytes of bulk
    /// data.
    fn before_op(&mut self, opcode: Opcode, large: usize) -> R<()> {
        // A command the session's protocol lacks (1.1 added `CtxCreate`, ...) is the
        // driver's "not supported", at the call.
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
            self.written_unread = 0;
            return Ok(());
        }
        if large + self.out.len() + self.written_unread > SMALL_WRITE {
            self.flush()?;
            while self.unread_dtoh > 0 {
                self.read_one()?;
            }
            self.written_unread = 0;
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

    /// Waits until one more request may await its reply (`max_pipelined`).
    fn room_for_reply(&mut self) -> R<()> {
        while self.pending.len() as u64 >= u64::from(self.limits.max_pipelined.max(1)) {
            self.flush()?;
            self.read_one()?;
        }
        Ok(())
    }

    /// Sends an inline host-to-device copy of `data` (at most `max_inline` bytes) to
    /// `dst`: synchronous without `stream` (returns its id, to [`Conn::finish`]), else
    /// on `stream`, pipelined (`NO_REPLY`; or, when the server did not grant pipelining,
    /// sent and waited for like [`Conn::post`]; returns `None`).
    ///
    /// `data` is not needed once this returns (pageable semantics): at least
    /// [`DIRECT_WRITE`] bytes are written to the transport from `data` itself, after the
    /// queued frames and the copy's head (no copy anywhere: the frame is never built
    /// whole); fewer are copied once, into the queued frames.
    pub(super) fn send_htod(
        &mut self,
        dst: DevicePtr,
        stream: Option<StreamId>,
        data: &[u8],
    ) -> R<Option<u64>> {
        self.check()?;
        let opcode = match stream {
            Some(_) => Opcode::MemcpyHtoDAsync,
            None => Opcode::MemcpyHtoD,
        };
        self.before_op(opcode, data.len())?;
        let no_reply = stream.is_some() && self.pipelining;
        if !no_reply {
            self.room_for_reply()?;
        }
        let id = self.id();
        let before = self.out.len();
        if let Err(e) = RequestFrame::encode_inline_htod_head(
            id,
            no_reply,
            dst,
            stream,
            data.len(),
            &mut self.out,
        ) {
            self.out.truncate(before);
            return Err(Fail::new(
                sys::CUDA_ERROR_INVALID_VALUE,
                format!("cannot encode the request: {e}"),
            ));
        }
        if data.len() < DIRECT_WRITE {
            self.out.extend_from_slice(data);
            if self.out.len() >= BATCH {
                self.flush()?;
            }
        } else {
            // The queued frames, this copy's head, then its data from where it is.
            if self.unread_dtoh > 0 {
                self.written_unread += self.out.len() + data.len();
            }
            self.flush()?;
            let r = self.io.write_all(data).and_then(|_| self.io.flush());
            r.map_err(|e| self.break_with(io_fail("write", e)))?;
        }
        if no_reply {
            return Ok(None);
        }
        self.pending.push_back((id, Pending::Sync));
        if stream.is_none() {
            return Ok(Some(id));
        }
        let r = self.wait(id)?;
        if r.status.is_success() {
            Ok(None)
        } else {
            Err(Fail::of_reply(&r))
        }
    }

    /// Sends a request that gets a reply, without waiting for it.
    pub(super) fn send(&mut self, id: u64, request: Request, pending: Pending) -> R<()> {
        self.check()?;
        self.before(&request)?;
        self.room_for_reply()?;
        let dtoh = match pending {
            Pending::DtoH { len, .. } => len,
            Pending::Sync | Pending::Into { .. } => 0,
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
        let target = match self.pending.front() {
            Some(&(id, Pending::Into { dst, len })) => Some((id, dst, len)),
            Some(&(id, Pending::DtoH { dst, len })) if !self.discard_dtoh => Some((id, dst, len)),
            _ => None,
        };
        if let Some((id, dst, len)) = target.filter(|&(_, dst, len)| len > 0 && dst != 0) {
            // SAFETY: `dst..dst+len` is the destination of a device-to-host copy whose
            // reply is the next one due: a `Pending::Into` one is the caller's buffer,
            // valid and unused by anything else until its reply is handed back (see
            // `RemoteBackend::dtoh_direct`); a `Pending::DtoH` one is kept valid until the
            // stream has passed the copy (see `handle`). Nothing else refers to it here.
            let dst = unsafe { std::slice::from_raw_parts_mut(dst as *mut u8, len) };
            match self.decoder.read_data_into(&mut self.io, id, dst) {
                Ok(Some(reply)) => return self.handle(reply),
                Ok(None) => {}
                Err(e) => return Err(self.break_with(io_fail("read", e))),
            }
        }
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
            Pending::Into { dst, len } => {
                let mut reply = reply;
                if let (true, ReplyBody::Data(data)) = (reply.status.is_success(), &mut reply.body)
                {
                    // Empty when `read_one` read the data straight into `dst`.
                    let n = data.len().min(len);
                    // SAFETY: `dst..dst+len` is the caller's buffer, writable and unused by
                    // anything else until this reply is handed back; `n <= len`, and
                    // `data` is a separate buffer of at least `n` bytes.
                    unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), dst as *mut u8, n) };
                    *data = Vec::new();
                }
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

    /// Forgets the destinations of synchronous device-to-host copies still awaiting
    /// their replies (after their caller stopped waiting for them, on a failure): those
    /// replies, if they come, are kept as [`Pending::Sync`] ones, their data written
    /// nowhere.
    pub(super) fn forget_destinations(&mut self) {
        for (_, p) in self.pending.iter_mut() {
            if let Pending::Into { .. } = p {
                *p = Pending::Sync;
            }
        }
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

#[cfg(test)]
mod tests {
    use std::io::{Cursor, Read, Write};
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;
    use crate::{DevicePtr, HostDest, Opcode, StreamId};

    /// Bytes the server's stream handed out into the destination watched and elsewhere.
    #[derive(Debug, Default)]
    struct Counts {
        dst: Mutex<std::ops::Range<usize>>,
        into_dst: AtomicUsize,
        elsewhere: AtomicUsize,
    }

    /// A server's side scripted: its replies read in 4 KiB pieces (what a guest's vsock
    /// or virtio-serial port hands out); what the client writes is dropped.
    #[derive(Debug)]
    struct Scripted {
        replies: Cursor<Vec<u8>>,
        counts: Arc<Counts>,
    }

    impl Read for Scripted {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            let n = buf.len().min(4096);
            let got = self.replies.read(&mut buf[..n])?;
            let at = buf.as_ptr() as usize;
            let dst = lock(&self.counts.dst).clone();
            let into = if dst.contains(&at) && at + got <= dst.end {
                &self.counts.into_dst
            } else {
                &self.counts.elsewhere
            };
            into.fetch_add(got, Ordering::SeqCst);
            Ok(got)
        }
    }

    impl Write for Scripted {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    fn dtoh(bytes: usize, stream: Option<StreamId>) -> Request {
        Request::MemcpyDtoH {
            src: DevicePtr(1 << 20),
            bytes: bytes as u64,
            dst: HostDest::Inline,
            stream,
        }
    }

    #[test]
    fn device_to_host_data_is_read_straight_into_the_destination() {
        // A synchronous 6 MiB copy, then an asynchronous 1 MiB one, their replies coming
        // 4 KiB at a time: the data goes from the stream into the program's buffers (only
        // the first piece of each reply, with its header, is read anywhere else), never
        // into a buffer of the reply's size that is zero-filled and copied again.
        let sync: Vec<u8> = (0..6u32 << 20).map(|i| (i % 251) as u8).collect();
        let asynchronous: Vec<u8> = (0..1u32 << 20).map(|i| (i % 241) as u8).collect();
        let mut wire = Vec::new();
        Reply::ok(1, Opcode::MemcpyDtoH, ReplyBody::Data(sync.clone()))
            .encode(&mut wire)
            .unwrap();
        Reply::ok(
            2,
            Opcode::MemcpyDtoHAsync,
            ReplyBody::Data(asynchronous.clone()),
        )
        .encode(&mut wire)
        .unwrap();
        let counts = Arc::new(Counts::default());
        let io = Scripted {
            replies: Cursor::new(wire),
            counts: counts.clone(),
        };
        let mut c = Conn::new(
            Box::new(io),
            Limits::default(),
            crate::VERSION_MINOR,
            true,
            None,
        );
        let watch = |dst: &[u8]| {
            let at = dst.as_ptr() as usize;
            *lock(&counts.dst) = at..at + dst.len();
            (
                counts.into_dst.load(Ordering::SeqCst),
                counts.elsewhere.load(Ordering::SeqCst),
            )
        };

        let mut dst = vec![0u8; sync.len()];
        let (into, elsewhere) = watch(&dst);
        let into_dst = Pending::Into {
            dst: dst.as_mut_ptr() as usize,
            len: dst.len(),
        };
        c.send(1, dtoh(sync.len(), None), into_dst).unwrap();
        assert_eq!(c.finish(1).unwrap(), ReplyBody::Data(Vec::new()));
        assert!(dst == sync, "the synchronous copy's data differs");
        let elsewhere = counts.elsewhere.load(Ordering::SeqCst) - elsewhere;
        assert!(elsewhere <= 4096, "{elsewhere} bytes read elsewhere");
        assert!(counts.into_dst.load(Ordering::SeqCst) - into >= sync.len() - 4096);

        let mut dst = vec![0u8; asynchronous.len()];
        let (into, elsewhere) = watch(&dst);
        let later = Pending::DtoH {
            dst: dst.as_mut_ptr() as usize,
            len: dst.len(),
        };
        c.send(2, dtoh(dst.len(), Some(StreamId(1))), later)
            .unwrap();
        c.flush().unwrap();
        c.read_one().unwrap();
        assert!(dst == asynchronous, "the asynchronous copy's data differs");
        let elsewhere = counts.elsewhere.load(Ordering::SeqCst) - elsewhere;
        assert!(elsewhere <= 4096, "{elsewhere} bytes read elsewhere");
        assert!(counts.into_dst.load(Ordering::SeqCst) - into >= asynchronous.len() - 4096);
        assert!(c.pending.is_empty() && c.ready.is_empty());
    }

    #[test]
    fn a_failed_device_to_host_copy_writes_nothing() {
        // The reply is a failure: returned to the caller, the destination untouched; a
        // copy whose caller stopped waiting has its destination forgotten.
        let mut wire = Vec::new();
        Reply::error(1, Opcode::MemcpyDtoH, Status(1), "out of range")
            .encode(&mut wire)
            .unwrap();
        Reply::ok(2, Opcode::MemcpyDtoH, ReplyBody::Data(vec![7; 64]))
            .encode(&mut wire)
            .unwrap();
        let io = Scripted {
            replies: Cursor::new(wire),
            counts: Arc::default(),
        };
        let mut c = Conn::new(
            Box::new(io),
            Limits::default(),
            crate::VERSION_MINOR,
            true,
            None,
        );
        let mut dst = vec![0u8; 64];
        for id in [1, 2] {
            let into = Pending::Into {
                dst: dst.as_mut_ptr() as usize,
                len: dst.len(),
            };
            c.send(id, dtoh(64, None), into).unwrap();
        }
        let f = c.finish(1).unwrap_err();
        assert_eq!((f.code, f.detail.as_str()), (1, "out of range"));
        assert_eq!(dst, vec![0u8; 64]);
        c.forget_destinations();
        assert_eq!(c.finish(2).unwrap(), ReplyBody::Data(vec![7; 64]));
        assert_eq!(dst, vec![0u8; 64]);
    }

    /// What the client wrote: all of it, and how many bytes were written straight from
    /// the source buffer watched.
    #[derive(Debug, Default)]
    struct Written {
        src: Mutex<std::ops::Range<usize>>,
        bytes: Mutex<Vec<u8>>,
        from_src: AtomicUsize,
        elsewhere: AtomicUsize,
    }

    /// A server's side scripted: its replies read from `replies`; what the client writes
    /// recorded in `written`.
    #[derive(Debug)]
    struct Recording {
        replies: Cursor<Vec<u8>>,
        written: Arc<Written>,
    }

    impl Read for Recording {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            self.replies.read(buf)
        }
    }

    impl Write for Recording {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            let at = buf.as_ptr() as usize;
            let src = lock(&self.written.src).clone();
            let from = if src.contains(&at) && at + buf.len() <= src.end {
                &self.written.from_src
            } else {
                &self.written.elsewhere
            };
            from.fetch_add(buf.len(), Ordering::SeqCst);
            lock(&self.written.bytes).extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    /// A connection over a [`Recording`] transport whose replies are `replies`.
    fn recording(replies: &[Reply], pipelining: bool) -> (Conn, Arc<Written>) {
        let mut wire = Vec::new();
        for r in replies {
            r.encode(&mut wire).unwrap();
        }
        let written = Arc::new(Written::default());
        let io = Recording {
            replies: Cursor::new(wire),
            written: written.clone(),
        };
        let c = Conn::new(
            Box::new(io),
            Limits::default(),
            crate::VERSION_MINOR,
            pipelining,
            None,
        );
        (c, written)
    }

    /// The request frames in `bytes`.
    fn frames(bytes: &[u8]) -> Vec<RequestFrame> {
        let mut d = Decoder::<RequestFrame>::new(Limits::default());
        let (mut fed, mut out) = (0, Vec::new());
        loop {
            while let Some(f) = d.next_frame().unwrap() {
                out.push(f);
            }
            if fed == bytes.len() {
                return out;
            }
            fed += d.feed(&bytes[fed..]);
        }
    }

    fn htod(id: u64, no_reply: bool, data: &[u8], stream: Option<StreamId>) -> RequestFrame {
        RequestFrame {
            id,
            no_reply,
            request: Request::MemcpyHtoD {
                dst: DevicePtr(1 << 20),
                src: HostSource::Inline(data.to_vec()),
                stream,
            },
        }
    }

    #[test]
    fn host_to_device_data_is_written_from_the_source() {
        // A synchronous 6 MiB copy and an asynchronous 1 MiB one: their data goes from
        // the program's buffers to the transport (only their heads are written from
        // anywhere else), and the asynchronous one is written before the call returns
        // (the source may be reused at once). A small asynchronous copy is copied once,
        // into the batch, at the call.
        let (mut c, written) =
            recording(&[Reply::ok(1, Opcode::MemcpyHtoD, ReplyBody::Empty)], true);
        let watch = |src: &[u8]| {
            let at = src.as_ptr() as usize;
            *lock(&written.src) = at..at + src.len();
            (
                written.from_src.load(Ordering::SeqCst),
                written.elsewhere.load(Ordering::SeqCst),
            )
        };
        let count = |(from, elsewhere): (usize, usize)| {
            (
                written.from_src.load(Ordering::SeqCst) - from,
                written.elsewhere.load(Ordering::SeqCst) - elsewhere,
            )
        };

        let sync: Vec<u8> = (0..6u32 << 20).map(|i| (i % 251) as u8).collect();
        let before = watch(&sync);
        let id = c.send_htod(DevicePtr(1 << 20), None, &sync).unwrap();
        assert_eq!(id, Some(1));
        assert_eq!(c.finish(1).unwrap(), ReplyBody::Empty);
        let (from, elsewhere) = count(before);
        assert_eq!(from, sync.len(), "bytes written from the source");
        assert!(elsewhere <= 64, "{elsewhere} bytes written from elsewhere");

        let mut asynchronous: Vec<u8> = (0..1u32 << 20).map(|i| (i % 241) as u8).collect();
        let before = watch(&asynchronous);
        let s = Some(StreamId(3));
        assert_eq!(
            c.send_htod(DevicePtr(1 << 20), s, &asynchronous).unwrap(),
            None
        );
        // Written already: the program may change its buffer now.
        let (from, elsewhere) = count(before);
        assert_eq!(from, asynchronous.len(), "bytes written from the source");
        assert!(elsewhere <= 64, "{elsewhere} bytes written from elsewhere");
        let sent_async = asynchronous.clone();
        asynchronous.fill(0xee);

        let mut small = vec![5u8; 4096];
        let before = watch(&small);
        assert_eq!(c.send_htod(DevicePtr(1 << 20), s, &small).unwrap(), None);
        small.fill(6);
        c.flush().unwrap();
        let (from, elsewhere) = count(before);
        assert_eq!(from, 0, "a small copy is written from the batch");
        assert!((4096..4096 + 64).contains(&elsewhere));

        let frames = frames(&lock(&written.bytes));
        assert_eq!(
            frames,
            vec![
                htod(1, false, &sync, None),
                htod(2, true, &sent_async, s),
                htod(3, true, &[5u8; 4096], s),
            ]
        );
        assert!(c.pending.is_empty() && c.ready.is_empty());
    }

    #[test]
    fn an_asynchronous_host_to_device_copy_without_pipelining_is_waited_for() {
        // The server did not grant pipelining: each copy is answered and waited for, its
        // failure returned at the call.
        let (mut c, written) = recording(
            &[
                Reply::ok(1, Opcode::MemcpyHtoDAsync, ReplyBody::Empty),
                Reply::error(2, Opcode::MemcpyHtoDAsync, Status(400), "bad stream"),
            ],
            false,
        );
        let s = Some(StreamId(3));
        let data = vec![9u8; 256 << 10];
        assert_eq!(c.send_htod(DevicePtr(1 << 20), s, &data).unwrap(), None);
        let f = c
            .send_htod(DevicePtr(1 << 20), s, &data[..100])
            .unwrap_err();
        assert_eq!((f.code, f.detail.as_str()), (400, "bad stream"));
        assert_eq!(
            frames(&lock(&written.bytes)),
            vec![htod(1, false, &data, s), htod(2, false, &data[..100], s)]
        );
        assert!(c.pending.is_empty() && c.ready.is_empty());
    }

    #[test]
    fn unread_data_replies_are_read_before_much_is_written_straight() {
        // A data reply may be waiting unread: large copies written from the program's
        // buffers count against `SMALL_WRITE` as queued ones do, so the client reads the
        // reply before it writes on (the service reads nothing while its write waits).
        let back = vec![3u8; 4096];
        let (mut c, written) = recording(
            &[Reply::ok(
                1,
                Opcode::MemcpyDtoHAsync,
                ReplyBody::Data(back.clone()),
            )],
            true,
        );
        let mut dst = vec![0u8; back.len()];
        let later = Pending::DtoH {
            dst: dst.as_mut_ptr() as usize,
            len: dst.len(),
        };
        c.send(1, dtoh(back.len(), Some(StreamId(3))), later)
            .unwrap();
        c.flush().unwrap();
        let s = Some(StreamId(4));
        // Written straight, each within SMALL_WRITE, both beyond it.
        let up = vec![8u8; DIRECT_WRITE.max(SMALL_WRITE / 2 + 1)];
        c.send_htod(DevicePtr(1 << 20), s, &up).unwrap();
        assert_eq!(
            c.unread_dtoh,
            back.len(),
            "within SMALL_WRITE: not read yet"
        );
        c.send_htod(DevicePtr(1 << 20), s, &up).unwrap();
        assert_eq!(c.unread_dtoh, 0, "read before more was written");
        assert_eq!(dst, back);
        c.flush().unwrap();
        assert_eq!(frames(&lock(&written.bytes)).len(), 3);
    }
}
