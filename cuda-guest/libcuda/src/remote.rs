//! Forward mode: the client side of `docs/protocol.md` (`vmgpu_cuda_proto`) over a Unix
//! socket, AF_VSOCK or a virtio-serial port.
//!
//! One connection per process, shared by its threads under a lock. The connection's
//! current context is set (`CtxSetCurrent`) whenever the calling thread's differs from
//! the one last set. Launches, asynchronous memsets, host-to-device and device-to-device
//! copies, event records and stream waits go out with `NO_REPLY` (when the server grants
//! pipelining) and return at once; their failures come back from the next synchronising
//! call. Device-to-host asynchronous copies are sent without waiting; their data is
//! copied into the program's buffer when their reply is read (at the latest by the next
//! synchronising call). Copies larger than `max_inline` are split.
//!
//! `cuCtxCreate` retains the device's primary context of the session (the service gives
//! each session one context, its own address space) and `cuCtxDestroy` releases it.
//!
//! The connection (and the session on the server) opens at the first call that needs the
//! service, not at `cuInit`: a process that only loads the library — NVRTC does, calling
//! `cuInit` and `cuGetExportTable` while it compiles — opens none. Once the program has
//! called `cuInit`, the session's next request is `Init` with its flags, before anything
//! else (the service answers `CUDA_ERROR_NOT_INITIALIZED` to device, context and memory
//! requests before it, as CUDA does before `cuInit`). A connection that cannot be opened
//! fails that call and every later one with the same error.

use std::collections::{HashMap, VecDeque};
use std::io::{Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, RawFd};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, TryLockError};
use std::time::{Duration, Instant};

use vmgpu_cuda_proto::{
    ClientHello, ContextId, Decoded, Decoder, DevicePtr, EventId, Features, FunctionId, HostDest,
    HostSource, KernelParams, Limits, MemsetWidth, ModuleId, ParamLayout, Reply, ReplyBody,
    Request, RequestFrame, ServerHello, Status, StreamId, SERVER_HELLO_LEN,
};

use crate::engine::{lock, Engine, Fail, Geometry, Layout, R};
use crate::ffi::*;

/// Most bytes of asynchronous device-to-host copies left unread on the connection.
const UNREAD_DTOH_LIMIT: usize = 1 << 20;
/// Bytes the client may write while a data reply may be waiting unread (well within a
/// socket's buffer).
const SMALL_WRITE: usize = 64 << 10;

/// A byte stream to the server.
trait Transport: Read + Write + Send + std::fmt::Debug {}
impl<T: Read + Write + Send + std::fmt::Debug> Transport for T {}

/// A reply the client waits for: what to do with its body.
#[derive(Debug)]
enum Pending {
    /// A synchronous request's reply: returned to the caller.
    Sync,
    /// An asynchronous device-to-host copy: its data goes to this host address.
    DtoH { dst: usize, len: usize },
}

#[derive(Debug)]
struct Conn {
    io: Box<dyn Transport>,
    decoder: Decoder<Reply>,
    limits: Limits,
    pipelining: bool,
    next_id: u64,
    /// Frames not yet written (NO_REPLY requests are batched until a reply is needed).
    out: Vec<u8>,
    /// Requests awaiting a reply, in order.
    pending: VecDeque<(u64, Pending)>,
    /// Replies to synchronous requests read while looking for another one.
    ready: HashMap<u64, Reply>,
    /// The context last set on the connection.
    current: u64,
    /// Bytes of asynchronous device-to-host copies whose replies are not read yet.
    unread_dtoh: usize,
    /// A failed transport: every later call fails with this.
    broken: Option<Fail>,
    /// The descriptor of a virtio-serial port transport (see [`wait_hangup`]).
    virtio_port: Option<RawFd>,
    /// Whether `Init` was sent on this session (and succeeded).
    init_sent: bool,
}

fn io_fail(what: &str, e: std::io::Error) -> Fail {
    Fail::new(
        CUDA_ERROR_UNKNOWN,
        format!("vmgpu CUDA service: {what}: {e}"),
    )
}

fn status_fail(reply: &Reply) -> Fail {
    let mut detail = reply.detail().unwrap_or_default().to_string();
    if let Some(c) = reply.cause {
        detail = format!(
            "{detail} (deferred: caused by request {} {})",
            c.id,
            c.opcode.name()
        );
    }
    let code = reply.status.0 as i32;
    let jit_log = (code == CUDA_ERROR_INVALID_PTX || code == CUDA_ERROR_INVALID_IMAGE)
        .then(|| reply.detail().unwrap_or_default().to_string());
    Fail {
        code,
        detail,
        jit_log,
    }
}

impl Conn {
    fn check(&self) -> R<()> {
        match &self.broken {
            Some(f) => Err(f.clone()),
            None => Ok(()),
        }
    }

    /// Ends the session at process exit: `Goodbye` (the service releases everything
    /// and hangs up); on a virtio-serial port, whose host connection outlives the
    /// process, also waits until the port reports the hang-up, so that the next process
    /// to open the port writes its hello to the host's next connection.
    fn goodbye(&mut self) {
        if self.broken.is_some() {
            return;
        }
        let id = self.id();
        if self.send(id, Request::Goodbye, Pending::Sync).is_err() || self.wait(id).is_err() {
            return;
        }
        if let Some(fd) = self.virtio_port {
            if !wait_hangup(fd, HANGUP_WAIT) {
                crate::log::warn("goodbye: the virtio-serial port was not hung up by the host");
            }
        }
    }

    fn id(&mut self) -> u64 {
        self.next_id += 1;
        self.next_id
    }

    fn flush(&mut self) -> R<()> {
        if self.out.is_empty() {
            return Ok(());
        }
        let r = self.io.write_all(&self.out).and_then(|_| self.io.flush());
        self.out.clear();
        r.map_err(|e| self.break_with(io_fail("write", e)))
    }

    fn break_with(&mut self, f: Fail) -> Fail {
        crate::log::warn(&f.detail);
        self.broken = Some(f.clone());
        f
    }

    fn encode(&mut self, frame: &RequestFrame) -> R<()> {
        frame.encode(&mut self.out).map_err(|e| {
            Fail::new(
                CUDA_ERROR_INVALID_VALUE,
                format!("cannot encode the request: {e}"),
            )
        })?;
        if self.out.len() >= 1 << 20 {
            self.flush()?;
        }
        Ok(())
    }

    /// Keeps the connection deadlock-free around unread data replies: the service
    /// writes replies with blocking writes and reads no request meanwhile, so while a
    /// data reply may be waiting, the client writes nothing large before reading it.
    fn before(&mut self, request: &Request) -> R<()> {
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

    /// Queues a request without a reply (or with one, not waited for, when the server
    /// did not grant pipelining).
    fn post(&mut self, request: Request) -> R<()> {
        self.check()?;
        self.before(&request)?;
        let id = self.id();
        if self.pipelining {
            self.encode(&RequestFrame::pipelined(id, request))
        } else {
            self.send(id, request, Pending::Sync)?;
            self.wait(id).and_then(|r| {
                if r.status == Status::SUCCESS {
                    Ok(())
                } else {
                    Err(status_fail(&r))
                }
            })
        }
    }

    /// Sends a request that gets a reply, without waiting for it.
    fn send(&mut self, id: u64, request: Request, pending: Pending) -> R<()> {
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
                        CUDA_ERROR_UNKNOWN,
                        format!("vmgpu CUDA service: a bad reply: {e}"),
                    )))
                }
            }
            match self.decoder.read_from(&mut self.io) {
                Ok(0) => {
                    return Err(self.break_with(Fail::new(
                        CUDA_ERROR_UNKNOWN,
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
            let f = status_fail(&reply);
            return Err(self.break_with(Fail::new(
                if f.code == 0 {
                    CUDA_ERROR_UNKNOWN
                } else {
                    f.code
                },
                format!("vmgpu CUDA service closed the session: {}", f.detail),
            )));
        }
        let Some((id, what)) = self.pending.pop_front() else {
            return Err(self.break_with(Fail::new(
                CUDA_ERROR_UNKNOWN,
                format!("vmgpu CUDA service: an unexpected reply {}", reply.id),
            )));
        };
        if id != reply.id {
            return Err(self.break_with(Fail::new(
                CUDA_ERROR_UNKNOWN,
                format!("vmgpu CUDA service: reply {} where {id} was due", reply.id),
            )));
        }
        match what {
            Pending::Sync => {
                self.ready.insert(id, reply);
            }
            Pending::DtoH { dst, len } => {
                self.unread_dtoh = self.unread_dtoh.saturating_sub(len);
                if reply.status != Status::SUCCESS {
                    // Reported by the next synchronising call (the server keeps it as
                    // the stream's deferred error only for NO_REPLY requests, so keep
                    // it here).
                    let f = status_fail(&reply);
                    crate::log::debug(&format!("asynchronous device-to-host copy: {}", f.detail));
                    self.ready.insert(0, reply);
                } else if let ReplyBody::Data(data) = &reply.body {
                    let n = data.len().min(len);
                    // SAFETY: `dst..dst+len` is the program's destination of
                    // cuMemcpyDtoHAsync, which it keeps valid and unused until the
                    // stream is synchronised — which has not returned yet, since this
                    // reply is read at the latest by that call.
                    unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), dst as *mut u8, n) };
                }
            }
        }
        Ok(())
    }

    /// Waits for the reply to `id`.
    fn wait(&mut self, id: u64) -> R<Reply> {
        self.flush()?;
        loop {
            if let Some(r) = self.ready.remove(&id) {
                return Ok(r);
            }
            self.read_one()?;
        }
    }

    /// A synchronous request: its successful body, or the failure.
    fn call(&mut self, request: Request) -> R<ReplyBody> {
        let id = self.id();
        self.send(id, request, Pending::Sync)?;
        let r = self.wait(id)?;
        if let Some(failed) = self.ready.remove(&0) {
            // A failed asynchronous device-to-host copy surfaces here.
            if r.status == Status::SUCCESS {
                return Err(status_fail(&failed));
            }
        }
        if r.status == Status::SUCCESS {
            Ok(r.body)
        } else {
            Err(status_fail(&r))
        }
    }
}

fn unexpected(body: &ReplyBody) -> Fail {
    Fail::new(
        CUDA_ERROR_UNKNOWN,
        format!("vmgpu CUDA service: an unexpected reply body {body:?}"),
    )
}

/// A session with a vmgpu CUDA service, opened at the first call that needs it.
#[derive(Debug)]
pub struct Remote {
    server: String,
    addr: Addr,
    /// The connection, or why it could not be opened (every later call answers that).
    conn: OnceLock<Result<Arc<Mutex<Conn>>, Fail>>,
    /// The flags of the program's `cuInit`, once it has called it.
    init_flags: OnceLock<u32>,
    /// Function layouts from `ModuleGetFunction`.
    layouts: Mutex<HashMap<u64, Layout>>,
    /// Per device: the context handle the program sees (the first the server gave; it
    /// stays the same across resets, as the driver's primary context does), the
    /// server's current handle of that context, and the references the program holds.
    contexts: Mutex<HashMap<u32, Primary>>,
    /// Page-locked host memory (plain page-aligned memory here): address to layout.
    host: Mutex<HashMap<usize, std::alloc::Layout>>,
    /// Registered host ranges (recorded only): start to length.
    registered: Mutex<HashMap<usize, usize>>,
}

#[derive(Debug, Clone, Copy)]
struct Primary {
    shown: u64,
    server: u64,
    refs: u64,
}

/// How long a process waits for the host to hang up a virtio-serial port.
const HANGUP_WAIT: Duration = Duration::from_secs(5);

/// The connection whose session ends at process exit.
static AT_EXIT: OnceLock<Arc<Mutex<Conn>>> = OnceLock::new();

/// `atexit` handler: says goodbye unless another thread holds the connection.
extern "C" fn goodbye_at_exit() {
    let _ = std::panic::catch_unwind(|| {
        let Some(conn) = AT_EXIT.get() else { return };
        let mut c = match conn.try_lock() {
            Ok(c) => c,
            Err(TryLockError::Poisoned(p)) => p.into_inner(),
            Err(TryLockError::WouldBlock) => return,
        };
        c.goodbye();
    });
}

/// Whether `f` is a virtio-serial port (`/sys/dev/char/MAJ:MIN/subsystem` is the
/// `virtio-ports` class).
fn is_virtio_port(f: &std::fs::File) -> bool {
    use std::os::unix::fs::{FileTypeExt, MetadataExt};
    let Ok(meta) = f.metadata() else { return false };
    if !meta.file_type().is_char_device() {
        return false;
    }
    let (major, minor) = (libc::major(meta.rdev()), libc::minor(meta.rdev()));
    std::fs::canonicalize(format!("/sys/dev/char/{major}:{minor}/subsystem"))
        .is_ok_and(|p| p.file_name().is_some_and(|n| n == "virtio-ports"))
}

/// Waits until the host side of virtio-serial port `fd` is gone (a read answers 0:
/// no data left and the host not connected), discarding what is still to be read.
/// False after `limit`. Reads do not block: the VMM may reconnect at once, and a
/// blocking read would then wait for the next session's data.
fn wait_hangup(fd: RawFd, limit: Duration) -> bool {
    // SAFETY: fcntl on a descriptor the caller keeps open.
    let flags = unsafe { libc::fcntl(fd, libc::F_GETFL) };
    if flags < 0 {
        return false;
    }
    // SAFETY: as above; only O_NONBLOCK is added (and restored below).
    unsafe { libc::fcntl(fd, libc::F_SETFL, flags | libc::O_NONBLOCK) };
    let end = Instant::now() + limit;
    let mut scratch = [0u8; 4096];
    let hung_up = loop {
        let left = end.saturating_duration_since(Instant::now());
        if left.is_zero() {
            break false;
        }
        let mut p = libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd for the duration of the call.
        let r = unsafe { libc::poll(&mut p, 1, left.as_millis().clamp(1, 60_000) as i32) };
        if r < 0 && std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted {
            continue;
        }
        if r <= 0 {
            break false;
        }
        // SAFETY: `scratch` is writable for its length; `fd` is the open port.
        let n = unsafe { libc::read(fd, scratch.as_mut_ptr().cast(), scratch.len()) };
        if n == 0 {
            break true;
        }
        if n < 0 {
            match std::io::Error::last_os_error().kind() {
                std::io::ErrorKind::Interrupted => {}
                // Nothing left to read and the host was gone at the poll (it may be back).
                std::io::ErrorKind::WouldBlock if p.revents & libc::POLLHUP != 0 => break true,
                std::io::ErrorKind::WouldBlock => {}
                _ => break false,
            }
        }
    };
    // SAFETY: restores the flags read above.
    unsafe { libc::fcntl(fd, libc::F_SETFL, flags) };
    hung_up
}

/// Where the service is: `VMGPU_CUDA_SERVER` parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Addr {
    /// `unix:PATH`.
    Unix(String),
    /// `port:PATH` (a virtio-serial port, or any character device or FIFO).
    Port(String),
    /// `vsock:CID:PORT`.
    Vsock(u32, u32),
}

impl Addr {
    /// Parses `server`; a malformed one is `CUDA_ERROR_NOT_INITIALIZED` (at `cuInit`).
    fn parse(server: &str) -> R<Addr> {
        let bad = |why: &str| {
            Fail::new(
                CUDA_ERROR_NOT_INITIALIZED,
                format!("VMGPU_CUDA_SERVER={server}: {why}"),
            )
        };
        if let Some(path) = server.strip_prefix("unix:") {
            return Ok(Addr::Unix(path.to_string()));
        }
        if let Some(path) = server.strip_prefix("port:") {
            return Ok(Addr::Port(path.to_string()));
        }
        if let Some(rest) = server.strip_prefix("vsock:") {
            return rest
                .split_once(':')
                .and_then(|(c, p)| Some(Addr::Vsock(c.parse().ok()?, p.parse().ok()?)))
                .ok_or_else(|| bad("expected vsock:CID:PORT"));
        }
        Err(bad("expected unix:PATH, vsock:CID:PORT or port:PATH"))
    }

    /// Opens the transport; with the descriptor of a virtio-serial port. A failure is
    /// `CUDA_ERROR_NOT_INITIALIZED` naming `server`.
    fn open(&self, server: &str) -> R<(Box<dyn Transport>, Option<RawFd>)> {
        let bad = |e: std::io::Error| {
            Fail::new(
                CUDA_ERROR_NOT_INITIALIZED,
                format!("VMGPU_CUDA_SERVER={server}: {e}"),
            )
        };
        match self {
            Addr::Unix(path) => {
                let s = std::os::unix::net::UnixStream::connect(path).map_err(bad)?;
                Ok((Box::new(s), None))
            }
            Addr::Port(path) => {
                let f = std::fs::OpenOptions::new()
                    .read(true)
                    .write(true)
                    .open(path)
                    .map_err(bad)?;
                let virtio = is_virtio_port(&f).then(|| f.as_raw_fd());
                Ok((Box::new(f), virtio))
            }
            Addr::Vsock(cid, port) => vsock(*cid, *port).map(|t| (t, None)).map_err(bad),
        }
    }
}

fn vsock(cid: u32, port: u32) -> std::io::Result<Box<dyn Transport>> {
    // SAFETY: socket(2) with constant arguments; the result is checked.
    let fd = unsafe { libc::socket(libc::AF_VSOCK, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: `fd` is a socket this function just opened and owns; the File closes it.
    let file = unsafe { std::fs::File::from_raw_fd(fd) };
    // SAFETY: sockaddr_vm is plain old data; all-zero is a valid value.
    let mut addr: libc::sockaddr_vm = unsafe { std::mem::zeroed() };
    addr.svm_family = libc::AF_VSOCK as libc::sa_family_t;
    addr.svm_cid = cid;
    addr.svm_port = port;
    // SAFETY: `addr` is an initialised sockaddr_vm and the length passed is its size.
    let r = unsafe {
        libc::connect(
            fd,
            (&addr as *const libc::sockaddr_vm).cast(),
            std::mem::size_of::<libc::sockaddr_vm>() as libc::socklen_t,
        )
    };
    if r != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(Box::new(file))
}

/// Sends the client hello and reads the server's.
fn handshake(io: &mut Box<dyn Transport>, server: &str, ours: Limits) -> R<ServerHello> {
    let hello = ClientHello::new(Features::PIPELINING, ours.max_frame);
    io.write_all(&hello.encode())
        .and_then(|_| io.flush())
        .map_err(|e| io_fail("handshake", e))?;
    let mut buf = [0u8; SERVER_HELLO_LEN];
    io.read_exact(&mut buf)
        .map_err(|e| io_fail("handshake (the server's hello)", e))?;
    match ServerHello::decode(&buf) {
        Ok(Decoded::Frame { frame, .. }) => Ok(frame),
        Ok(Decoded::NeedMore(_)) => Err(Fail::new(CUDA_ERROR_UNKNOWN, "a short server hello")),
        Err(e) => Err(Fail::new(
            CUDA_ERROR_NOT_INITIALIZED,
            format!("{server}: not a vmgpu CUDA service: {e}"),
        )),
    }
}

/// The forward-mode engine for `server`; it connects at the first call that needs the
/// service.
pub fn engine(server: &str) -> R<Box<dyn Engine>> {
    Ok(Box::new(Remote::new(server)?))
}

impl Remote {
    /// The engine for `server` (`unix:PATH`, `vsock:CID:PORT`, `port:PATH`), not
    /// connected yet; a malformed address is refused here.
    pub fn new(server: &str) -> R<Remote> {
        Ok(Remote {
            server: server.to_string(),
            addr: Addr::parse(server)?,
            conn: OnceLock::new(),
            init_flags: OnceLock::new(),
            layouts: Mutex::new(HashMap::new()),
            contexts: Mutex::new(HashMap::new()),
            host: Mutex::new(HashMap::new()),
            registered: Mutex::new(HashMap::new()),
        })
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
            crate::log::info(&format!(
                "{server}: no server hello ({}); waiting for the host to hang up the port, then again",
                f.detail
            ));
            if wait_hangup(fd, HANGUP_WAIT) {
                answer = handshake(&mut io, server, ours);
            }
        }
        let answer = answer?;
        if answer.status != Status::SUCCESS {
            return Err(Fail::new(
                answer.status.0 as i32,
                format!("{server}: the service refused the session"),
            ));
        }
        let limits = answer.limits;
        crate::log::info(&format!(
            "connected to {server}: session {}, features {:#x}, max_inline {}",
            answer.session_id, answer.features.0, limits.max_inline
        ));
        let conn = Arc::new(Mutex::new(Conn {
            io,
            decoder: Decoder::new(limits),
            limits,
            pipelining: answer.features.contains(Features::PIPELINING),
            next_id: 0,
            out: Vec::new(),
            pending: VecDeque::new(),
            ready: HashMap::new(),
            current: 0,
            unread_dtoh: 0,
            broken: None,
            virtio_port,
            init_sent: false,
        }));
        // The session ends with the process: Goodbye from an exit handler (the only
        // end a virtio-serial port's host can see; a socket's close is another).
        if AT_EXIT.set(conn.clone()).is_ok() {
            // SAFETY: registers a function taking and returning nothing, which never
            // unwinds (it catches panics).
            unsafe { libc::atexit(goodbye_at_exit) };
        }
        Ok(conn)
    }

    /// The connection, opened at the first call that needs it (a failure is logged once
    /// and answered from then on); once the program has called `cuInit`, `Init` is the
    /// session's first request after anything sent before `cuInit`
    /// (`cuDriverGetVersion`).
    fn conn(&self) -> R<MutexGuard<'_, Conn>> {
        let conn = self.conn.get_or_init(|| {
            let r = self.connect();
            if let Err(f) = &r {
                crate::log::warn(&format!("cannot connect: {} ({})", f.detail, f.code));
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

    /// The device and the server's handle of the context the program calls `ctx`.
    fn context(&self, ctx: u64) -> R<(u32, u64)> {
        lock(&self.contexts)
            .iter()
            .find(|(_, p)| p.shown == ctx)
            .map(|(d, p)| (*d, p.server))
            .ok_or_else(|| Fail::new(CUDA_ERROR_INVALID_CONTEXT, format!("context {ctx:#x}")))
    }

    /// Records a retain that returned `server` for `dev`; the program's handle.
    fn retained(&self, dev: u32, server: u64) -> u64 {
        let mut m = lock(&self.contexts);
        let p = m.entry(dev).or_insert(Primary {
            shown: server,
            server,
            refs: 0,
        });
        p.server = server;
        p.refs += 1;
        p.shown
    }

    /// The connection with `ctx` current on it.
    fn bound(&self, ctx: u64) -> R<MutexGuard<'_, Conn>> {
        if ctx == 0 {
            return Err(Fail::new(
                CUDA_ERROR_INVALID_CONTEXT,
                "no context is current",
            ));
        }
        let (_, server) = self.context(ctx)?;
        let mut c = self.conn()?;
        if c.current != server {
            c.call(Request::CtxSetCurrent {
                ctx: ContextId(server),
            })?;
            c.current = server;
        }
        Ok(c)
    }

    /// The connection, bound to `ctx` when there is one (calls on streams and events
    /// name their objects; the server finds them in the session).
    fn maybe_bound(&self, ctx: u64) -> R<MutexGuard<'_, Conn>> {
        if ctx == 0 {
            self.conn()
        } else {
            self.bound(ctx)
        }
    }

    fn call(&self, request: Request) -> R<ReplyBody> {
        self.conn()?.call(request)
    }
}

fn sid(s: u64) -> StreamId {
    StreamId(s)
}

impl Engine for Remote {
    fn describe(&self) -> String {
        format!(
            "forwarding to the vmgpu CUDA service at {} (connecting at the first call that needs it)",
            self.server
        )
    }

    fn init(&self, flags: u32) -> R<()> {
        // Sent as the session's next request (see `conn`); no connection for it.
        let _ = self.init_flags.set(flags);
        Ok(())
    }

    fn driver_version(&self) -> R<i32> {
        match self.call(Request::DriverGetVersion)? {
            ReplyBody::Int(v) => Ok(v),
            b => Err(unexpected(&b)),
        }
    }

    fn device_count(&self) -> R<u32> {
        match self.call(Request::DeviceGetCount)? {
            ReplyBody::Count(n) => Ok(n),
            b => Err(unexpected(&b)),
        }
    }

    fn device_name(&self, dev: u32) -> R<String> {
        match self.call(Request::DeviceGetName { device: dev })? {
            ReplyBody::Text(s) => Ok(s),
            b => Err(unexpected(&b)),
        }
    }

    fn device_uuid(&self, dev: u32) -> R<[u8; 16]> {
        match self.call(Request::DeviceGetUuid { device: dev })? {
            ReplyBody::Uuid(u) => Ok(u),
            b => Err(unexpected(&b)),
        }
    }

    fn device_pci_bus_id(&self, dev: u32) -> R<String> {
        match self.call(Request::DeviceGetPciBusId { device: dev })? {
            ReplyBody::Text(s) => Ok(s),
            b => Err(unexpected(&b)),
        }
    }

    fn device_attribute(&self, dev: u32, attr: i32) -> R<i32> {
        match self.call(Request::DeviceGetAttribute {
            device: dev,
            attribute: attr,
        })? {
            ReplyBody::Int(v) => Ok(v),
            b => Err(unexpected(&b)),
        }
    }

    fn device_total_mem(&self, dev: u32) -> R<u64> {
        match self.call(Request::DeviceTotalMem { device: dev })? {
            ReplyBody::Size(v) => Ok(v),
            b => Err(unexpected(&b)),
        }
    }

    fn primary_retain(&self, dev: u32) -> R<u64> {
        match self.call(Request::PrimaryCtxRetain { device: dev })? {
            ReplyBody::Context(c) => Ok(self.retained(dev, c.0)),
            b => Err(unexpected(&b)),
        }
    }

    fn primary_release(&self, dev: u32) -> R<()> {
        let mut c = self.conn()?;
        c.call(Request::PrimaryCtxRelease { device: dev })?;
        if let Some(p) = lock(&self.contexts).get_mut(&dev) {
            p.refs = p.refs.saturating_sub(1);
        }
        Ok(())
    }

    fn primary_reset(&self, dev: u32) -> R<()> {
        // The protocol has no reset: releasing every reference the program holds and
        // retaining them again gives the session a fresh context (as after a sticky
        // fault); the program's handle stays the same.
        let refs = lock(&self.contexts).get(&dev).map_or(0, |p| p.refs);
        let mut c = self.conn()?;
        for _ in 0..refs {
            c.call(Request::PrimaryCtxRelease { device: dev })?;
        }
        c.current = 0;
        let mut server = None;
        for _ in 0..refs {
            match c.call(Request::PrimaryCtxRetain { device: dev })? {
                ReplyBody::Context(ctx) => server = Some(ctx.0),
                b => return Err(unexpected(&b)),
            }
        }
        if let (Some(s), Some(p)) = (server, lock(&self.contexts).get_mut(&dev)) {
            p.server = s;
        }
        Ok(())
    }

    fn primary_state(&self, dev: u32) -> R<(u32, bool)> {
        let active = lock(&self.contexts).get(&dev).is_some_and(|p| p.refs > 0);
        Ok((0, active))
    }

    fn primary_set_flags(&self, _dev: u32, _flags: u32) -> R<()> {
        Ok(())
    }

    fn ctx_create(&self, dev: u32, _flags: u32) -> R<u64> {
        self.primary_retain(dev)
    }

    fn ctx_destroy(&self, ctx: u64) -> R<()> {
        let (dev, _) = self.context(ctx)?;
        self.primary_release(dev)
    }

    fn ctx_device(&self, ctx: u64) -> R<u32> {
        self.context(ctx).map(|(d, _)| d)
    }

    fn ctx_synchronize(&self, ctx: u64) -> R<()> {
        self.bound(ctx)?.call(Request::CtxSynchronize).map(drop)
    }

    fn mem_get_info(&self, ctx: u64) -> R<(u64, u64)> {
        match self.bound(ctx)?.call(Request::MemGetInfo)? {
            ReplyBody::MemInfo { free, total } => Ok((free, total)),
            b => Err(unexpected(&b)),
        }
    }

    fn module_load(&self, ctx: u64, image: &[u8]) -> R<u64> {
        let mut c = self.bound(ctx)?;
        if image.len() > c.limits.max_module as usize {
            return Err(Fail::new(
                CUDA_ERROR_INVALID_VALUE,
                format!(
                    "the module image ({} bytes) is larger than the session's limit ({})",
                    image.len(),
                    c.limits.max_module
                ),
            ));
        }
        match c.call(Request::ModuleLoadData {
            image: image.to_vec(),
        })? {
            ReplyBody::Module(m) => Ok(m.0),
            b => Err(unexpected(&b)),
        }
    }

    fn module_unload(&self, ctx: u64, module: u64) -> R<()> {
        self.maybe_bound(ctx)?
            .call(Request::ModuleUnload {
                module: ModuleId(module),
            })
            .map(drop)
    }

    fn module_get_function(&self, ctx: u64, module: u64, name: &str) -> R<u64> {
        match self.maybe_bound(ctx)?.call(Request::ModuleGetFunction {
            module: ModuleId(module),
            name: name.to_string(),
        })? {
            ReplyBody::Function(info) => {
                let layout = info
                    .params
                    .map(|p| p.iter().map(|s| (s.offset, s.size)).collect());
                lock(&self.layouts).insert(info.function.0, layout);
                Ok(info.function.0)
            }
            b => Err(unexpected(&b)),
        }
    }

    fn module_get_global(&self, _ctx: u64, _module: u64, name: &str) -> R<(u64, u64)> {
        Err(Fail::new(
            CUDA_ERROR_NOT_SUPPORTED,
            format!("cuModuleGetGlobal({name:?}): the protocol has no module variables"),
        ))
    }

    fn function_layout(&self, function: u64) -> R<Layout> {
        lock(&self.layouts)
            .get(&function)
            .cloned()
            .ok_or_else(|| Fail::new(CUDA_ERROR_INVALID_HANDLE, format!("function {function:#x}")))
    }

    fn function_set_max_dynamic_shared(&self, _ctx: u64, _function: u64, _bytes: u32) -> R<()> {
        Err(Fail::new(
            CUDA_ERROR_NOT_SUPPORTED,
            "cuFuncSetAttribute: the protocol has no function attributes",
        ))
    }

    fn launch(
        &self,
        ctx: u64,
        function: u64,
        geometry: Geometry,
        stream: u64,
        args: &[&[u8]],
    ) -> R<()> {
        let layout = self.function_layout(function)?.ok_or_else(|| {
            Fail::new(
                CUDA_ERROR_NOT_SUPPORTED,
                "the server does not know this kernel's parameter layout",
            )
        })?;
        let slots: Vec<ParamLayout> = layout
            .iter()
            .map(|(offset, size)| ParamLayout {
                offset: *offset,
                size: *size,
            })
            .collect();
        let params = KernelParams::with_layout(&slots, args).ok_or_else(|| {
            Fail::new(
                CUDA_ERROR_INVALID_VALUE,
                "the arguments do not match the kernel's parameters",
            )
        })?;
        self.bound(ctx)?.post(Request::LaunchKernel {
            function: FunctionId(function),
            grid: geometry.grid,
            block: geometry.block,
            shared_bytes: geometry.shared,
            stream: sid(stream),
            params,
        })
    }

    fn mem_alloc(&self, ctx: u64, bytes: u64) -> R<u64> {
        match self.bound(ctx)?.call(Request::MemAlloc { bytes })? {
            ReplyBody::DevicePtr(p) => Ok(p.0),
            b => Err(unexpected(&b)),
        }
    }

    fn mem_free(&self, ctx: u64, ptr: u64) -> R<()> {
        self.bound(ctx)?
            .call(Request::MemFree {
                ptr: DevicePtr(ptr),
            })
            .map(drop)
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
        let width = match width {
            1 => MemsetWidth::W8,
            2 => MemsetWidth::W16,
            _ => MemsetWidth::W32,
        };
        let request = Request::Memset {
            dst: DevicePtr(dst),
            value,
            count,
            width,
            stream: stream.map(sid),
        };
        let mut c = self.bound(ctx)?;
        match stream {
            None => c.call(request).map(drop),
            Some(_) => c.post(request),
        }
    }

    unsafe fn memcpy_htod(
        &self,
        ctx: u64,
        dst: u64,
        src: *const u8,
        bytes: usize,
        stream: Option<u64>,
        _pinned: bool,
    ) -> R<()> {
        // SAFETY: the caller guarantees `src..src+bytes` is readable; the bytes are
        // copied into frames before this call returns (inline copies take their data
        // when the call is made, like a pageable copy in CUDA).
        let data = unsafe { std::slice::from_raw_parts(src, bytes) };
        let mut c = self.bound(ctx)?;
        let chunk = c.limits.max_inline.max(1) as usize;
        let mut ids = Vec::new();
        for (i, part) in data.chunks(chunk).enumerate() {
            let request = Request::MemcpyHtoD {
                dst: DevicePtr(dst + (i * chunk) as u64),
                src: HostSource::Inline(part.to_vec()),
                stream: stream.map(sid),
            };
            match stream {
                Some(_) => c.post(request)?,
                None => {
                    let id = c.id();
                    c.send(id, request, Pending::Sync)?;
                    ids.push(id);
                }
            }
        }
        let mut first = Ok(());
        for id in ids {
            let r = c.wait(id)?;
            if r.status != Status::SUCCESS && first.is_ok() {
                first = Err(status_fail(&r));
            }
        }
        first
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
        // An asynchronous copy to pageable memory returns when it is done, as the
        // driver's does: its replies are waited for here.
        let wait = stream.is_none() || !pinned;
        let mut c = self.bound(ctx)?;
        let chunk = c.limits.max_inline.max(1) as usize;
        let mut ids = Vec::new();
        let mut off = 0usize;
        while off < bytes {
            let n = chunk.min(bytes - off);
            let request = Request::MemcpyDtoH {
                src: DevicePtr(src + off as u64),
                bytes: n as u64,
                dst: HostDest::Inline,
                stream: stream.map(sid),
            };
            let id = c.id();
            if wait {
                c.send(id, request, Pending::Sync)?;
                ids.push((id, off, n));
            } else {
                c.send(
                    id,
                    request,
                    Pending::DtoH {
                        dst: dst as usize + off,
                        len: n,
                    },
                )?;
            }
            off += n;
        }
        if !wait {
            // Sent; the data lands when the replies are read.
            return c.flush();
        }
        let mut first = Ok(());
        for (id, off, n) in ids {
            let r = c.wait(id)?;
            if r.status != Status::SUCCESS {
                if first.is_ok() {
                    first = Err(status_fail(&r));
                }
                continue;
            }
            if let ReplyBody::Data(data) = &r.body {
                let k = data.len().min(n);
                // SAFETY: the caller guarantees `dst..dst+bytes` is writable and unused;
                // `off + k <= bytes`.
                unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), dst.add(off), k) };
            }
        }
        first
    }

    fn memcpy_dtod(&self, ctx: u64, dst: u64, src: u64, bytes: u64, stream: Option<u64>) -> R<()> {
        let request = Request::MemcpyDtoD {
            dst: DevicePtr(dst),
            src: DevicePtr(src),
            bytes,
            stream: stream.map(sid),
        };
        let mut c = self.bound(ctx)?;
        match stream {
            None => c.call(request).map(drop),
            Some(_) => c.post(request),
        }
    }

    fn host_alloc(&self, _ctx: u64, bytes: usize, _flags: u32) -> R<*mut u8> {
        let layout = std::alloc::Layout::from_size_align(bytes.max(1), 4096)
            .map_err(|_| Fail::new(CUDA_ERROR_OUT_OF_MEMORY, "host allocation too large"))?;
        // SAFETY: the layout has a non-zero size.
        let p = unsafe { std::alloc::alloc_zeroed(layout) };
        if p.is_null() {
            return Err(Fail::new(CUDA_ERROR_OUT_OF_MEMORY, "host memory exhausted"));
        }
        lock(&self.host).insert(p as usize, layout);
        Ok(p)
    }

    unsafe fn host_free(&self, ptr: *mut u8) -> R<()> {
        let layout = lock(&self.host)
            .remove(&(ptr as usize))
            .ok_or_else(|| Fail::new(CUDA_ERROR_INVALID_VALUE, "not memory from cuMemHostAlloc"))?;
        // SAFETY: allocated by `host_alloc` with this layout; the caller guarantees
        // nothing uses it afterwards.
        unsafe { std::alloc::dealloc(ptr, layout) };
        Ok(())
    }

    unsafe fn host_register(&self, ctx: u64, ptr: *mut u8, bytes: usize, _flags: u32) -> R<()> {
        self.ctx_device(ctx)?;
        let mut r = lock(&self.registered);
        if r.contains_key(&(ptr as usize)) {
            return Err(Fail::new(
                CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED,
                "already registered",
            ));
        }
        r.insert(ptr as usize, bytes);
        Ok(())
    }

    unsafe fn host_unregister(&self, _ctx: u64, ptr: *mut u8) -> R<()> {
        lock(&self.registered)
            .remove(&(ptr as usize))
            .map(drop)
            .ok_or_else(|| Fail::new(CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED, "not registered"))
    }

    fn stream_create(&self, ctx: u64, flags: u32, priority: i32) -> R<u64> {
        match self
            .bound(ctx)?
            .call(Request::StreamCreate { flags, priority })?
        {
            ReplyBody::Stream(s) => Ok(s.0),
            b => Err(unexpected(&b)),
        }
    }

    fn stream_destroy(&self, ctx: u64, stream: u64) -> R<()> {
        self.maybe_bound(ctx)?
            .call(Request::StreamDestroy {
                stream: sid(stream),
            })
            .map(drop)
    }

    fn stream_synchronize(&self, ctx: u64, stream: u64) -> R<()> {
        self.maybe_bound(ctx)?
            .call(Request::StreamSynchronize {
                stream: sid(stream),
            })
            .map(drop)
    }

    fn stream_query(&self, ctx: u64, stream: u64) -> R<bool> {
        match self.maybe_bound(ctx)?.call(Request::StreamQuery {
            stream: sid(stream),
        }) {
            Ok(_) => Ok(true),
            Err(f) if f.code == CUDA_ERROR_NOT_READY => Ok(false),
            Err(f) => Err(f),
        }
    }

    fn stream_wait_event(&self, ctx: u64, stream: u64, event: u64, flags: u32) -> R<()> {
        self.maybe_bound(ctx)?.post(Request::StreamWaitEvent {
            stream: sid(stream),
            event: EventId(event),
            flags,
        })
    }

    fn event_create(&self, ctx: u64, flags: u32) -> R<u64> {
        match self.bound(ctx)?.call(Request::EventCreate { flags })? {
            ReplyBody::Event(e) => Ok(e.0),
            b => Err(unexpected(&b)),
        }
    }

    fn event_record(&self, ctx: u64, event: u64, stream: u64) -> R<()> {
        self.maybe_bound(ctx)?.post(Request::EventRecord {
            event: EventId(event),
            stream: sid(stream),
        })
    }

    fn event_synchronize(&self, ctx: u64, event: u64) -> R<()> {
        self.maybe_bound(ctx)?
            .call(Request::EventSynchronize {
                event: EventId(event),
            })
            .map(drop)
    }

    fn event_query(&self, ctx: u64, event: u64) -> R<bool> {
        match self.maybe_bound(ctx)?.call(Request::EventQuery {
            event: EventId(event),
        }) {
            Ok(_) => Ok(true),
            Err(f) if f.code == CUDA_ERROR_NOT_READY => Ok(false),
            Err(f) => Err(f),
        }
    }

    fn event_elapsed(&self, ctx: u64, start: u64, end: u64) -> R<f32> {
        match self.maybe_bound(ctx)?.call(Request::EventElapsedTime {
            start: EventId(start),
            end: EventId(end),
        })? {
            ReplyBody::ElapsedMs(ms) => Ok(ms),
            b => Err(unexpected(&b)),
        }
    }

    fn event_destroy(&self, ctx: u64, event: u64) -> R<()> {
        self.maybe_bound(ctx)?
            .call(Request::EventDestroy {
                event: EventId(event),
            })
            .map(drop)
    }
}
