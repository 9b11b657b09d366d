//! Process isolation: each guest's session runs in a worker process of its own.
//!
//! On the native driver a sticky fault (`CUDA_ERROR_ILLEGAL_ADDRESS`, ...) poisons
//! every context of the *process*, not only the faulting one, and nothing but ending
//! the process clears it (measured on an H100, driver 580: after guest A's fault guest
//! B's `cuMemAlloc_v2` in its own context failed with 700, and so did
//! `cuDevicePrimaryCtxRetain`). So the service (the supervisor) gives each guest a
//! worker process that runs the guest's [`Session`](super::Session) over the same
//! frames ([`vmgpu_cuda_proto`]), and relays the guest's frames to it over a socketpair
//! (the worker's stdin), reading only frame headers (length, id, opcode, flags and a
//! reply's status).
//!
//! - [`run`] is the worker's main loop (an embedding VMM calls it from a subcommand of
//!   its own executable, like `vmgpu cuda worker`), [`run_stdio`] the same on stdin.
//! - The supervisor follows which contexts the guest holds in its worker: retains of the
//!   primary context (successful `PrimaryCtxRetain`/`PrimaryCtxRelease` replies) and
//!   the contexts it created (the handle in a successful `CtxCreate` reply, until a
//!   `CtxDestroy` naming it succeeds).
//! - A sticky status in a reply marks the worker poisoned: the supervisor then forwards
//!   one request at a time (the worker's session answers the sticky rule, per context),
//!   and once the guest holds no context in it (its primary one released to 0, every
//!   created one destroyed) it ends that worker and starts a fresh one at the next
//!   request (new handle secrets: old handles are `INVALID_HANDLE`). On the native
//!   driver the fault poisoned every context of the worker; on the simulator its other
//!   contexts keep working in it meanwhile.
//! - A worker that dies (crash, kill): every context of the guest is lost. Its
//!   outstanding requests are answered with `CUDA_ERROR_LAUNCH_FAILED` (sticky), later
//!   requests needing a context get it too (as their deferred cause), and so do
//!   `PrimaryCtxRetain` and `CtxCreate`, until the guest released and destroyed every
//!   context it held (answered here: `CtxDestroy` of a context it did not hold is
//!   `INVALID_CONTEXT`); requests without a context go to a fresh worker. The process
//!   is reaped; its exit is logged.

// The supervisor (process isolation) serves the socket transports only.
#![cfg_attr(not(feature = "transport"), allow(dead_code))]

use std::io::{BufRead, Read, Write};
use std::os::fd::AsFd;
use std::os::unix::net::UnixStream;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use super::{BackendChoice, Isolation, Quota, Service, ServiceConfig, ServiceError};
use vmgpu_cuda_api::Device;
use vmgpu_cuda_proto::{
    Cause, Features, Limits, Opcode, Reply, Status, FLAG_NO_REPLY, HEADER_LEN, REPLY_HEADER_LEN,
};

/// First word of the supervisor's setup line.
const SETUP_MAGIC: &str = "vmgpu-worker/1";
/// How long a worker has to come up (load the driver) and answer its setup.
const START_TIMEOUT: Duration = Duration::from_secs(60);
/// How long a worker has to end after its socket is closed before it is killed.
const EXIT_GRACE: Duration = Duration::from_secs(10);
/// The same when its guest is gone (it closed its connection without a goodbye): a
/// simulator worker cancels its work and ends at once; a native one whose kernel runs on
/// is killed after this (the driver frees what the process held).
pub const GONE_GRACE: Duration = Duration::from_secs(1);

fn io_err(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> ServiceError {
    let what = what.into();
    move |source| ServiceError::Io { what, source }
}

fn config_err(reason: impl Into<String>) -> ServiceError {
    ServiceError::Config {
        reason: reason.into(),
    }
}

/// What a worker's session is: sent by the supervisor as one text line.
#[derive(Debug, Clone, PartialEq)]
struct Setup {
    guest: String,
    id: u64,
    device: u32,
    quota: Quota,
    limits: Limits,
    features: Features,
    /// The guest's session sent `Init` already (to a worker before this one).
    initialized: bool,
}

impl Setup {
    fn encode(&self) -> String {
        let q = &self.quota;
        let l = &self.limits;
        format!(
            "{SETUP_MAGIC} {} {} {} {} {} {} {} {} {} {} {} {} {} {} {} {} {} {} {} {}\n",
            self.id,
            self.device,
            q.device_memory,
            q.max_objects,
            q.max_module_bytes,
            q.module_host_memory,
            q.launches_per_sec.map(i64::from).unwrap_or(-1),
            q.launch_burst.map(i64::from).unwrap_or(-1),
            l.max_frame,
            l.max_inline,
            l.max_module,
            l.max_sg_entries,
            l.max_params,
            l.max_param_bytes,
            l.max_name,
            l.max_objects,
            l.max_pipelined,
            self.features.0,
            u8::from(self.initialized),
            self.guest.replace(['\n', '\r'], "?"),
        )
    }

    fn decode(line: &str) -> Option<Setup> {
        let mut it = line.trim_end_matches(['\n', '\r']).splitn(21, ' ');
        if it.next()? != SETUP_MAGIC {
            return None;
        }
        let mut n = || -> Option<i64> { it.next()?.parse().ok() };
        let id = n()? as u64;
        let device = u32::try_from(n()?).ok()?;
        let u32_ = |v: i64| u32::try_from(v).ok();
        let device_memory = u64::try_from(n()?).ok()?;
        let max_objects = u32_(n()?)?;
        let max_module_bytes = u32_(n()?)?;
        let module_host_memory = u64::try_from(n()?).ok()?;
        let rate = n()?;
        let burst = n()?;
        let mut lim = [0u32; 9];
        for v in &mut lim {
            *v = u32_(n()?)?;
        }
        let features = Features(u64::try_from(n()?).ok()?);
        let initialized = match n()? {
            0 => false,
            1 => true,
            _ => return None,
        };
        let guest = it.next()?.to_string();
        Some(Setup {
            guest,
            id,
            device,
            quota: Quota {
                device_memory,
                max_objects,
                max_module_bytes,
                module_host_memory,
                launches_per_sec: if rate < 0 { None } else { u32_(rate) },
                launch_burst: if burst < 0 { None } else { u32_(burst) },
            },
            limits: Limits {
                max_frame: lim[0],
                max_inline: lim[1],
                max_module: lim[2],
                max_sg_entries: lim[3],
                max_params: lim[4],
                max_param_bytes: lim[5],
                max_name: lim[6],
                max_objects: lim[7],
                max_pipelined: lim[8],
            },
            features,
            initialized,
        })
    }
}

/// The worker's main loop: serves one guest session on `sock` (connected to the
/// supervisor) with `backend`, until the supervisor closes the socket or the guest
/// says goodbye. Reads the supervisor's setup line first (the guest's name, session
/// number, quota, limits and features) and answers `ok` or `error <why>`.
pub fn run(sock: UnixStream, backend: BackendChoice) -> Result<(), ServiceError> {
    let mut line = Vec::new();
    {
        let mut rd = std::io::BufReader::new(
            sock.try_clone()
                .map_err(io_err("cloning the worker socket"))?,
        )
        .take(4096);
        // Byte by byte is not needed: the supervisor sends nothing after the line
        // before our answer.
        rd.read_until(b'\n', &mut line)
            .map_err(io_err("reading the worker setup"))?;
    }
    let mut answer = sock
        .try_clone()
        .map_err(io_err("cloning the worker socket"))?;
    let setup = match std::str::from_utf8(&line).ok().and_then(Setup::decode) {
        Some(s) => s,
        None => {
            let _ = answer.write_all(b"error bad setup line\n");
            return Err(config_err("the worker got a bad setup line"));
        }
    };
    let config = ServiceConfig {
        quota: setup.quota.clone(),
        limits: setup.limits,
        device: Device::new(setup.device),
        max_sessions: 1,
        isolation: Isolation::InProcess,
        ..ServiceConfig::default()
    };
    let service = match Service::new(backend, config) {
        Ok(s) => s,
        Err(e) => {
            let _ = answer.write_all(format!("error {e}\n").replace('\n', " ").as_bytes());
            let _ = answer.write_all(b"\n");
            return Err(e);
        }
    };
    let mut session = service.open_session(&setup.guest, setup.id, setup.limits, setup.features);
    if setup.initialized {
        session.assume_initialized();
    }
    answer
        .write_all(b"ok\n")
        .map_err(io_err("answering the supervisor"))?;
    super::conn::worker(session, sock, &AtomicBool::new(false));
    Ok(())
}

/// [`run`] on the worker's stdin (a socket the supervisor gave it), as started by
/// [`Isolation::Process`].
pub fn run_stdio(backend: BackendChoice) -> Result<(), ServiceError> {
    let fd = std::io::stdin()
        .as_fd()
        .try_clone_to_owned()
        .map_err(io_err("duplicating stdin"))?;
    run(UnixStream::from(fd), backend)
}

/// Device memory `(free, total)` of device `ordinal` seen from a context of this
/// process (the primary context, retained and released): for a short-lived probe
/// process, so a supervisor or a test never holds a context of its own.
pub fn device_memory(ordinal: u32) -> Result<(u64, u64), ServiceError> {
    use vmgpu_cuda_api::Backend;
    let err = |source| ServiceError::Backend {
        guest: "-".into(),
        source,
    };
    let be = vmgpu_cuda_native::NativeBackend::new().map_err(err)?;
    let ctx = be
        .primary_context_retain(Device::new(ordinal))
        .map_err(err)?;
    be.context_set_current(&ctx).map_err(err)?;
    let info = be.mem_get_info().map_err(err);
    let _ = be.primary_context_release(ctx);
    let info = info?;
    Ok((info.free, info.total))
}

// ------------------------------------------------------------------ supervisor --

/// A worker process, taken out (`None`) once it is reaped: so a later kill never hits
/// a process that reused its pid.
type SharedChild = Arc<Mutex<Option<Child>>>;

/// A running worker process and the socket to it.
struct Worker {
    child: Arc<Mutex<Option<Child>>>,
    /// Set when the supervisor ends the worker (its end is no failure).
    ending: Arc<AtomicBool>,
    to: UnixStream,
    replies: Option<std::thread::JoinHandle<()>>,
    pid: u32,
}

/// What the relay knows of the guest's session.
#[derive(Default)]
struct State {
    /// Requests sent to the worker that wait for a reply: (id, opcode, the context a
    /// `CtxDestroy` names).
    outstanding: std::collections::VecDeque<(u64, u16, u64)>,
    /// Primary context retains the guest holds (from successful replies).
    retains: u32,
    /// Contexts the guest made with `CtxCreate` and holds (from successful replies:
    /// the handle in a `CtxCreate` reply, the one a `CtxDestroy` named).
    created: Vec<u64>,
    /// The guest's `Init` succeeded (a fresh worker starts initialized).
    initialized: bool,
    /// The worker reported a sticky status: forward one request at a time.
    poisoned: bool,
    /// The worker died: the status, its cause and detail the supervisor answers.
    dead: Option<(Status, Option<Cause>, String)>,
    /// The reply reader ended (the worker closed its socket).
    reader_done: bool,
}

struct Shared {
    state: Mutex<State>,
    changed: Condvar,
    guest_out: Mutex<UnixStream>,
    guest: String,
    /// The guest closed its connection (seen by the hang-up watcher or the relay).
    gone: AtomicBool,
    /// The worker now serving the guest: its input and its process, for the hang-up
    /// watcher.
    current: Mutex<Option<(UnixStream, SharedChild)>>,
}

impl State {
    /// Whether the guest holds a context in the worker: its primary one retained, or
    /// one it created and did not destroy. A poisoned or dead worker is replaced only
    /// when it holds none.
    fn holds_context(&self) -> bool {
        self.retains > 0 || !self.created.is_empty()
    }

    /// The state of a guest that holds no context (its `Init` is kept).
    fn fresh(&self) -> State {
        State {
            initialized: self.initialized,
            ..State::default()
        }
    }
}

/// The `u64` at `at` of a frame (a handle in a payload or a reply body), 0 when the
/// frame is shorter.
fn word_at(frame: &[u8], at: usize) -> u64 {
    frame
        .get(at..at + 8)
        .and_then(|b| b.try_into().ok())
        .map(u64::from_le_bytes)
        .unwrap_or(0)
}

impl Shared {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
    fn write_guest(&self, bytes: &[u8]) -> bool {
        self.write_guest_all(&[bytes])
    }
    /// Writes `parts` one after the other, nothing of another writer between them.
    fn write_guest_all(&self, parts: &[&[u8]]) -> bool {
        let mut g = self.guest_out.lock().unwrap_or_else(|p| p.into_inner());
        parts.iter().all(|p| g.write_all(p).is_ok())
    }
    fn reply(&self, r: Reply) -> bool {
        let mut out = Vec::new();
        if r.encode(&mut out).is_err() {
            return false;
        }
        self.write_guest(&out)
    }
    /// Waits until no reply is outstanding (or the worker or the guest is gone).
    fn drain(&self) {
        let mut st = self.lock();
        while !st.outstanding.is_empty() && !st.reader_done && !self.gone.load(Ordering::SeqCst) {
            st = self
                .changed
                .wait_timeout(st, Duration::from_millis(100))
                .map(|(g, _)| g)
                .unwrap_or_else(|p| p.into_inner().0);
        }
    }
}

impl Shared {
    /// The guest is gone: the current worker's input ends (a simulator worker cancels its
    /// work and exits), and the worker is killed if it still runs after [`GONE_GRACE`].
    fn guest_gone(&self) {
        if self.gone.swap(true, Ordering::SeqCst) {
            return;
        }
        log::info!(
            "guest {}: connection closed; its worker is ended",
            self.guest
        );
        let current = self
            .current
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        if let Some((input, child)) = current {
            let _ = input.shutdown(std::net::Shutdown::Write);
            let guest = self.guest.clone();
            let spawned = std::thread::Builder::new()
                .name("vmgpu-gone".into())
                .spawn(move || {
                    std::thread::sleep(GONE_GRACE);
                    // Still held here only while not yet reaped: no other process is hit.
                    if let Some(c) = child.lock().unwrap_or_else(|p| p.into_inner()).as_mut() {
                        if matches!(c.try_wait(), Ok(None)) {
                            log::warn!(
                                "guest {guest}: its worker {} did not end in {GONE_GRACE:?} after the guest left; killed",
                                c.id()
                            );
                            let _ = c.kill();
                        }
                    }
                });
            if let Err(e) = spawned {
                log::warn!("guest {}: {e}", self.guest);
            }
        }
        self.changed.notify_all();
    }
}

/// Whether the command with opcode `op` needs a context (as `Session` sees it; an
/// unknown opcode is answered by the session, with its context rules).
fn needs_context(op: u16) -> bool {
    Opcode::from_u16(op).is_none_or(Opcode::needs_context)
}

/// Splits a byte stream into frames (by their length word), bounded by `max_frame`.
/// Reads straight into its buffer: `buf[start..end]` is received and not yet taken.
struct Frames {
    buf: Vec<u8>,
    start: usize,
    end: usize,
    max_frame: u32,
}

/// Bytes the relay gathers before it writes them on; also the smallest read.
const BATCH: usize = 256 << 10;

impl Frames {
    fn new(max_frame: u32) -> Frames {
        Frames {
            buf: vec![0; BATCH],
            start: 0,
            end: 0,
            max_frame,
        }
    }

    /// The length of the next frame when its header has arrived; an error for a length
    /// outside `HEADER_LEN..=max_frame`.
    fn next_len(&self) -> std::io::Result<Option<usize>> {
        let avail = &self.buf[self.start..self.end];
        if avail.len() < 4 {
            return Ok(None);
        }
        let len = u32::from_le_bytes([avail[0], avail[1], avail[2], avail[3]]);
        if (len as usize) < HEADER_LEN || len > self.max_frame {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!("frame length {len} outside 16..={}", self.max_frame),
            ));
        }
        Ok(Some(len as usize))
    }

    /// Whether a whole frame is buffered (the next [`Frames::next`] does not read).
    fn has_ready(&self) -> bool {
        matches!(self.next_len(), Ok(Some(n)) if self.end - self.start >= n)
    }

    /// The next whole frame, reading from `r` as needed; `Ok(None)` at the end of the
    /// stream. The frame is valid until the next call.
    fn next(&mut self, r: &mut impl Read) -> std::io::Result<Option<&[u8]>> {
        Ok(self.next_at(r)?.map(|at| &self.buf[at]))
    }

    /// [`Frames::next`]: where the frame is in `buf`.
    fn next_at(&mut self, r: &mut impl Read) -> std::io::Result<Option<std::ops::Range<usize>>> {
        loop {
            let want = match self.next_len()? {
                Some(len) if self.end - self.start >= len => {
                    let at = self.start;
                    self.start += len;
                    return Ok(Some(at..at + len));
                }
                Some(len) => len,
                None => HEADER_LEN,
            };
            if self.start == self.end {
                (self.start, self.end) = (0, 0);
            }
            if self.start + want > self.buf.len() {
                // Room for the whole frame: move what is buffered to the front, and
                // grow for a frame larger than the buffer.
                self.buf.copy_within(self.start..self.end, 0);
                (self.start, self.end) = (0, self.end - self.start);
                if want > self.buf.len() {
                    self.buf.resize(want, 0);
                }
            }
            match r.read(&mut self.buf[self.end..]) {
                Ok(0) => return Ok(None),
                Ok(n) => self.end += n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
    }
}

fn header(frame: &[u8]) -> (u64, u16, u16) {
    let id = u64::from_le_bytes(frame[4..12].try_into().unwrap_or([0; 8]));
    let op = u16::from_le_bytes([frame[12], frame[13]]);
    let flags = u16::from_le_bytes([frame[14], frame[15]]);
    (id, op, flags)
}

impl Service {
    /// Starts a worker process for `setup`, checks its answer and starts its reply
    /// reader.
    fn start_worker(&self, setup: &Setup, shared: &Arc<Shared>) -> Result<Worker, ServiceError> {
        let Isolation::Process { program, args } = &self.inner.config.isolation else {
            return Err(config_err("not process isolation"));
        };
        let (ours, theirs) = UnixStream::pair().map_err(io_err("socketpair"))?;
        use std::os::unix::process::CommandExt;
        let child = Command::new(program)
            .args(args)
            // A group of its own: a terminal's Ctrl-C reaches the service, which ends
            // its workers in order (closing notices), not the workers directly. A
            // worker whose service dies sees the end of its socket and exits.
            .process_group(0)
            .stdin(Stdio::from(std::os::fd::OwnedFd::from(theirs)))
            .stdout(Stdio::null())
            .spawn()
            .map_err(io_err(format!(
                "guest {}: starting worker {}",
                setup.guest,
                program.display()
            )))?;
        let pid = child.id();
        let child = Arc::new(Mutex::new(Some(child)));
        let mut to = ours;
        let fail = |e: ServiceError, child: &Arc<Mutex<Option<Child>>>| {
            reap(child, true);
            e
        };
        if let Err(e) = to.write_all(setup.encode().as_bytes()) {
            return Err(fail(io_err("writing the worker setup")(e), &child));
        }
        let _ = to.set_read_timeout(Some(START_TIMEOUT));
        let mut answer = Vec::new();
        let mut b = [0u8; 1];
        while answer.len() < 4096 {
            match to.read(&mut b) {
                Ok(1) if b[0] == b'\n' => break,
                Ok(1) => answer.push(b[0]),
                _ => break,
            }
        }
        let _ = to.set_read_timeout(None);
        if answer != b"ok" {
            let why = String::from_utf8_lossy(&answer).into_owned();
            return Err(fail(
                ServiceError::Refused {
                    guest: setup.guest.clone(),
                    reason: format!("its worker (pid {pid}) did not start: {why:?}"),
                },
                &child,
            ));
        }
        self.inner
            .stats
            .workers_started
            .fetch_add(1, Ordering::Relaxed);
        self.inner.stats.workers.fetch_add(1, Ordering::Relaxed);
        self.workers_lock().push((setup.guest.clone(), pid));
        log::info!("guest {}: worker process {pid} started", setup.guest);
        let from = to
            .try_clone()
            .map_err(io_err("cloning the worker socket"))?;
        if let Ok(input) = to.try_clone() {
            *shared.current.lock().unwrap_or_else(|p| p.into_inner()) =
                Some((input, child.clone()));
        }
        if shared.gone.load(Ordering::SeqCst) {
            // Gone while this worker started: end it like the one before.
            shared.gone.store(false, Ordering::SeqCst);
            shared.guest_gone();
        }
        let (sh, ch, svc) = (shared.clone(), child.clone(), self.clone());
        let ending = Arc::new(AtomicBool::new(false));
        let end = ending.clone();
        let max_frame = setup.limits.max_frame;
        let replies = std::thread::Builder::new()
            .name(format!("vmgpu-relay-{pid}"))
            .spawn(move || svc.relay_replies(from, &sh, &ch, pid, max_frame, &end))
            .map_err(io_err("starting the relay thread"))?;
        Ok(Worker {
            child,
            ending,
            to,
            replies: Some(replies),
            pid,
        })
    }

    fn workers_lock(&self) -> std::sync::MutexGuard<'_, Vec<(String, u32)>> {
        self.inner
            .worker_pids
            .lock()
            .unwrap_or_else(|p| p.into_inner())
    }

    /// Worker processes alive: (guest, pid).
    pub fn worker_pids(&self) -> Vec<(String, u32)> {
        self.workers_lock().clone()
    }

    /// Worker → guest: forwards replies, keeps the state, and answers the outstanding
    /// requests when the worker dies.
    fn relay_replies(
        &self,
        mut from: UnixStream,
        sh: &Shared,
        child: &Arc<Mutex<Option<Child>>>,
        pid: u32,
        max_frame: u32,
        ending: &AtomicBool,
    ) {
        let mut frames = Frames::new(max_frame);
        let mut goodbye = false;
        // Replies gathered and what they tell, written and applied together (so no
        // request is taken off `outstanding` before its reply is on its way).
        let mut out: Vec<u8> = Vec::with_capacity(BATCH);
        let mut seen: Vec<(u64, u16, Status, u64)> = Vec::new();
        let end = loop {
            match frames.next(&mut from) {
                Ok(Some(f)) if f.len() >= REPLY_HEADER_LEN => {
                    let (id, op, _) = header(f);
                    let status = Status(u32::from_le_bytes([f[16], f[17], f[18], f[19]]));
                    // A successful `CtxCreate` reply's body is the new context's handle.
                    seen.push((id, op, status, word_at(f, REPLY_HEADER_LEN)));
                    let notice = id == 0 && op == Opcode::Goodbye.code();
                    let written = if f.len() >= BATCH {
                        // A large reply (a device-to-host copy's data): written from where
                        // it was read, after the replies gathered before it, not copied
                        // into `out` (which would grow to its size).
                        sh.write_guest_all(&[&out, f])
                    } else {
                        out.extend_from_slice(f);
                        if frames.has_ready() && out.len() < BATCH && !notice {
                            continue;
                        }
                        sh.write_guest(&out)
                    };
                    out.clear();
                    {
                        let mut st = sh.lock();
                        for (id, op, status, body) in seen.drain(..) {
                            let mut named = 0;
                            if id != 0 && st.outstanding.front().map(|o| o.0) == Some(id) {
                                named = st.outstanding.pop_front().map_or(0, |o| o.2);
                            }
                            if status.is_sticky() && !st.poisoned {
                                st.poisoned = true;
                                log::warn!(
                                    "guest {}: sticky fault {status} in worker {pid}; it is replaced when the guest releases its context",
                                    sh.guest
                                );
                            }
                            if status.is_success() && op == Opcode::Init.code() {
                                st.initialized = true;
                            }
                            if status.is_success() && op == Opcode::PrimaryCtxRetain.code() {
                                st.retains = st.retains.saturating_add(1);
                            }
                            if status.is_success() && op == Opcode::PrimaryCtxRelease.code() {
                                st.retains = st.retains.saturating_sub(1);
                            }
                            if status.is_success() && op == Opcode::CtxCreate.code() {
                                st.created.push(body);
                            }
                            if status.is_success() && op == Opcode::CtxDestroy.code() {
                                st.created.retain(|c| *c != named);
                            }
                            if op == Opcode::Goodbye.code() {
                                // The guest's goodbye, or the worker's closing notice
                                // (id 0: it closes the session after a protocol
                                // violation).
                                goodbye = true;
                            }
                        }
                        sh.changed.notify_all();
                    }
                    if !written {
                        break None;
                    }
                    if notice {
                        // The session is over: so is the guest's connection.
                        let g = sh.guest_out.lock().unwrap_or_else(|p| p.into_inner());
                        let _ = g.shutdown(std::net::Shutdown::Both);
                        break None;
                    }
                }
                Ok(Some(_)) => break Some("a frame too short for a reply".to_string()),
                Ok(None) => break Some("closed its socket".to_string()),
                Err(e) => break Some(e.to_string()),
            }
        };
        let status = reap(child, false);
        self.workers_lock().retain(|(_, p)| *p != pid);
        self.inner.stats.workers.fetch_sub(1, Ordering::Relaxed);
        let mut st = sh.lock();
        st.reader_done = true;
        let expected = goodbye
            || st.dead.is_some()
            || ending.load(Ordering::SeqCst)
            || sh.gone.load(Ordering::SeqCst);
        if let (Some(why), false) = (end, expected) {
            self.inner
                .stats
                .worker_failures
                .fetch_add(1, Ordering::Relaxed);
            let detail = format!(
                "guest {}: its worker process {pid} ended ({why}; {}); its context is lost",
                sh.guest,
                status.unwrap_or_else(|| "still running, killed".into())
            );
            log::warn!("{detail}");
            let cause = st.outstanding.front().and_then(|(id, op, _)| {
                Opcode::from_u16(*op).map(|opcode| Cause { id: *id, opcode })
            });
            for (id, op, _) in std::mem::take(&mut st.outstanding) {
                let opcode = Opcode::from_u16(op).unwrap_or(Opcode::Ping);
                sh.reply(Reply::error(
                    id,
                    opcode,
                    Status::ERROR_LAUNCH_FAILED,
                    detail.clone(),
                ));
            }
            if st.dead.is_none() {
                st.dead = Some((Status::ERROR_LAUNCH_FAILED, cause, detail));
            }
        }
        sh.changed.notify_all();
    }

    /// One guest connection with process isolation: relays `sock`'s frames to a worker
    /// process (replaced after a sticky fault or a crash) until the guest goes.
    pub(super) fn supervise(
        &self,
        sock: UnixStream,
        guest: &str,
        id: u64,
        limits: Limits,
        features: Features,
        stop: &AtomicBool,
    ) {
        let mut setup = Setup {
            guest: guest.into(),
            id,
            device: self.inner.config.device.ordinal(),
            quota: self.inner.config.quota.clone(),
            limits,
            features,
            initialized: false,
        };
        let Ok(out) = sock.try_clone() else { return };
        let shared = Arc::new(Shared {
            state: Mutex::new(State::default()),
            changed: Condvar::new(),
            guest_out: Mutex::new(out),
            guest: guest.into(),
            gone: AtomicBool::new(false),
            current: Mutex::new(None),
        });
        let watched = shared.clone();
        let _watch = super::hangup::watch(&sock, Box::new(move || watched.guest_gone()))
            .map_err(|e| log::warn!("guest {guest}: not watching its connection: {e}"))
            .ok();
        self.inner.stats.sessions.fetch_add(1, Ordering::Relaxed);
        log::info!("guest {guest} (session {id}): connected (process isolation)");
        let mut worker = match self.start_worker(&setup, &shared) {
            Ok(w) => Some(w),
            Err(e) => {
                log::warn!("{e}");
                shared.reply(Reply::closing_notice(
                    Status::ERROR_OUT_OF_MEMORY,
                    format!("no worker for this guest: {e}"),
                ));
                None
            }
        };
        let mut frames = Frames::new(limits.max_frame);
        // Requests gathered for the worker, written when no further whole frame is
        // buffered (before this thread would wait for the guest) or before the
        // supervisor waits or answers itself.
        let mut pending: Vec<u8> = Vec::with_capacity(BATCH);
        let mut rd = sock;
        if worker.is_some() {
            loop {
                // Where it was read: valid until the next frame is read.
                let frame = match frames.next_at(&mut rd) {
                    Ok(Some(at)) => &frames.buf[at],
                    Ok(None) => {
                        send(&mut pending, worker.as_mut());
                        // Gone without a goodbye (a goodbye ends the loop itself).
                        shared.guest_gone();
                        break;
                    }
                    Err(e) => {
                        log::warn!("guest {guest}: protocol violation, closing: {e}");
                        send(&mut pending, worker.as_mut());
                        shared.drain();
                        shared.reply(Reply::closing_notice(
                            Status::ERROR_INVALID_VALUE,
                            format!("protocol violation: {e}"),
                        ));
                        break;
                    }
                };
                let (rid, op, flags) = header(frame);
                let no_reply = flags & FLAG_NO_REPLY != 0;
                let (poisoned, dead) = {
                    let st = shared.lock();
                    (st.poisoned, st.dead.is_some() || st.reader_done)
                };
                if poisoned || dead {
                    send(&mut pending, worker.as_mut());
                    shared.drain();
                }
                let mut st = shared.lock();
                if st.poisoned && !st.holds_context() && !st.reader_done {
                    // The guest released (or destroyed) every context of the faulted
                    // worker: a fresh worker.
                    drop(st);
                    if let Some(w) = worker.take() {
                        self.end_worker(w, true, EXIT_GRACE);
                    }
                    let mut st2 = shared.lock();
                    *st2 = st2.fresh();
                    drop(st2);
                    st = shared.lock();
                }
                if st.reader_done && st.dead.is_none() {
                    // The old worker ended cleanly (after the swap above or a goodbye).
                    st.reader_done = false;
                }
                if let Some((status, cause, detail)) = st.dead.clone() {
                    // The worker died: the sticky rule, answered here, for every context
                    // the guest held in it.
                    let opcode = Opcode::from_u16(op);
                    let mut answer: Option<Reply> = None;
                    let mut released = false;
                    if op == Opcode::PrimaryCtxRelease.code() {
                        if st.retains == 0 {
                            answer = Some(Reply::error(
                                rid,
                                Opcode::PrimaryCtxRelease,
                                Status::ERROR_INVALID_CONTEXT,
                                "the primary context is not retained",
                            ));
                        } else {
                            st.retains -= 1;
                            answer = Some(Reply::ok(
                                rid,
                                Opcode::PrimaryCtxRelease,
                                vmgpu_cuda_proto::ReplyBody::Empty,
                            ));
                            released = true;
                        }
                    } else if op == Opcode::CtxDestroy.code() {
                        let ctx = word_at(frame, HEADER_LEN);
                        if ctx != 0 && st.created.contains(&ctx) {
                            st.created.retain(|c| *c != ctx);
                            answer = Some(Reply::ok(
                                rid,
                                Opcode::CtxDestroy,
                                vmgpu_cuda_proto::ReplyBody::Empty,
                            ));
                            released = true;
                        } else {
                            answer = Some(Reply::error(
                                rid,
                                Opcode::CtxDestroy,
                                Status::ERROR_INVALID_CONTEXT,
                                format!("context {ctx:#x} is not a live context of this session"),
                            ));
                        }
                    } else if op == Opcode::Goodbye.code() {
                        answer = Some(Reply::ok(
                            rid,
                            Opcode::Goodbye,
                            vmgpu_cuda_proto::ReplyBody::Empty,
                        ));
                    } else if needs_context(op)
                        || op == Opcode::PrimaryCtxRetain.code()
                        || op == Opcode::CtxCreate.code()
                    {
                        if let Some(opcode) = opcode {
                            answer = Some(match cause {
                                Some(c) => Reply::deferred(rid, opcode, status, c, detail),
                                None => {
                                    // It died with nothing outstanding: this request is the
                                    // first to fail, the cause of the ones after it.
                                    if let Some(d) = st.dead.as_mut() {
                                        d.1 = Some(Cause { id: rid, opcode });
                                    }
                                    Reply::error(rid, opcode, status, detail)
                                }
                            });
                        }
                    }
                    // The last context the guest held in the dead worker is gone: the
                    // sticky rule ends, and the next request goes to a fresh worker (the
                    // dead one, unless a request without a context replaced it already,
                    // is reaped now).
                    let reset = released && !st.holds_context();
                    let reap_dead = reset && st.reader_done;
                    if reset {
                        *st = st.fresh();
                    }
                    drop(st);
                    if reap_dead {
                        if let Some(w) = worker.take() {
                            self.end_worker(w, false, EXIT_GRACE);
                        }
                    }
                    if answer.is_some() {
                        if let (Some(r), false) = (answer, no_reply) {
                            shared.reply(r);
                        }
                        if op == Opcode::Goodbye.code() {
                            break;
                        }
                        continue;
                    }
                    st = shared.lock();
                    // A request without a context: to a fresh worker (started already
                    // unless the dead one is still the current one).
                    if st.reader_done {
                        st.reader_done = false;
                        if let Some(w) = worker.take() {
                            drop(st);
                            self.end_worker(w, false, EXIT_GRACE);
                            st = shared.lock();
                        }
                    }
                }
                if worker.is_none() {
                    let retained = (st.retains, st.dead.clone(), st.created.clone());
                    setup.initialized = st.initialized;
                    drop(st);
                    match self.start_worker(&setup, &shared) {
                        Ok(w) => worker = Some(w),
                        Err(e) => {
                            log::warn!("{e}");
                            shared.reply(Reply::closing_notice(
                                Status::ERROR_LAUNCH_FAILED,
                                format!("no worker for this guest: {e}"),
                            ));
                            break;
                        }
                    }
                    st = shared.lock();
                    st.retains = retained.0;
                    st.dead = retained.1;
                    st.created = retained.2;
                    st.initialized = setup.initialized;
                    st.reader_done = false;
                }
                if !no_reply {
                    let named = if op == Opcode::CtxDestroy.code() {
                        word_at(frame, HEADER_LEN)
                    } else {
                        0
                    };
                    st.outstanding.push_back((rid, op, named));
                }
                drop(st);
                if pending.is_empty() && !frames.has_ready() && op != Opcode::Goodbye.code() {
                    // Alone (a synchronous call, a bulk copy): on at once from where it
                    // was read, not copied.
                    write_worker(frame, worker.as_mut());
                    continue;
                }
                pending.extend_from_slice(frame);
                if op == Opcode::Goodbye.code() {
                    send(&mut pending, worker.as_mut());
                    shared.drain();
                    break;
                }
                if !frames.has_ready() || pending.len() >= BATCH {
                    send(&mut pending, worker.as_mut());
                }
            }
        }
        if let Some(w) = worker.take() {
            let grace = if shared.gone.load(Ordering::SeqCst) {
                GONE_GRACE
            } else {
                EXIT_GRACE
            };
            self.end_worker(w, false, grace);
        }
        if stop.load(Ordering::SeqCst) {
            shared.reply(Reply::closing_notice(
                Status::ERROR_DEINITIALIZED,
                "the server is shutting down",
            ));
        }
        let _ = rd.shutdown(std::net::Shutdown::Both);
        self.inner.stats.sessions.fetch_sub(1, Ordering::Relaxed);
        log::info!("guest {guest} (session {id}): session ended (its worker is gone)");
    }

    /// Ends a worker: closes its socket (it releases its session and exits), kills it
    /// after `grace` (at once with `kill`), reaps it and joins its reader.
    fn end_worker(&self, mut w: Worker, kill: bool, grace: Duration) {
        w.ending.store(true, Ordering::SeqCst);
        // End of its input: it answers what it has, releases its session and exits.
        let _ = w.to.shutdown(std::net::Shutdown::Write);
        if !kill {
            let t = Instant::now();
            while w.replies.as_ref().is_some_and(|r| !r.is_finished()) {
                if t.elapsed() > grace {
                    log::warn!("worker {} did not end in {grace:?}; killed", w.pid);
                    break;
                }
                std::thread::sleep(Duration::from_millis(2));
            }
        }
        if kill || w.replies.as_ref().is_some_and(|r| !r.is_finished()) {
            if let Some(c) = w.child.lock().unwrap_or_else(|p| p.into_inner()).as_mut() {
                let _ = c.kill();
            }
        }
        if let Some(t) = w.replies.take() {
            let _ = t.join();
        }
        reap(&w.child, true);
        log::debug!("worker {} ended", w.pid);
    }
}

/// Writes the gathered requests to the worker; on a failed write the worker's input is
/// closed (its reply reader answers what is outstanding when it sees the end).
fn send(pending: &mut Vec<u8>, worker: Option<&mut Worker>) {
    if pending.is_empty() {
        return;
    }
    write_worker(pending, worker);
    pending.clear();
}

/// Writes `bytes` to the worker (a failed write ends its input).
fn write_worker(bytes: &[u8], worker: Option<&mut Worker>) {
    if let Some(w) = worker {
        if w.to.write_all(bytes).is_err() {
            let _ = w.to.shutdown(std::net::Shutdown::Write);
        }
    }
}

/// Waits for the worker to exit (killing it after [`EXIT_GRACE`], or at once with
/// `kill`); its exit status, `None` when it was reaped already.
fn reap(child: &Arc<Mutex<Option<Child>>>, kill: bool) -> Option<String> {
    // Taken out: the lock is not held while waiting.
    let mut c = child.lock().unwrap_or_else(|p| p.into_inner()).take()?;
    if kill {
        let _ = c.kill();
    }
    let t = Instant::now();
    loop {
        match c.try_wait() {
            Ok(Some(s)) => return Some(s.to_string()),
            Ok(None) if t.elapsed() < EXIT_GRACE => std::thread::sleep(Duration::from_millis(5)),
            _ => {
                let _ = c.kill();
                return c.wait().ok().map(|s| s.to_string());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn setup_line_round_trips() {
        let s = Setup {
            guest: "vm one#3:port52".into(),
            id: 7,
            device: 0,
            quota: Quota {
                launches_per_sec: Some(100),
                ..Quota::default()
            },
            limits: Limits::default(),
            features: Features::PIPELINING,
            initialized: true,
        };
        assert_eq!(Setup::decode(&s.encode()), Some(s.clone()));
        let mut t = s;
        t.quota.launches_per_sec = None;
        assert_eq!(Setup::decode(&t.encode()), Some(t.clone()));
        t.quota.launch_burst = Some(7);
        assert_eq!(Setup::decode(&t.encode()), Some(t));
        assert_eq!(Setup::decode("vmgpu-worker/1 1 2"), None);
    }
}
