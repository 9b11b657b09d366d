//! Socket transports (tokio): a Unix socket listener that also accepts the hybrid-vsock
//! `CONNECT <port>\n` → `OK <port>\n` preamble of Firecracker and Cloud Hypervisor, and
//! an AF_VSOCK listener. Tokio tasks only move bytes; each connection's [`Session`] lives
//! on a worker thread of its own, which decodes frames in place (inline copy data goes
//! from the receive buffer to the device) and batches replies.
//!
//! Backpressure: the worker stops taking frames while `max_pipelined` replies are
//! produced but not yet written to the socket; the reader stops reading while the
//! worker's inbox (a few receive buffers) is full, so a guest that writes without
//! reading is held by its own socket, never by another guest's.

use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::{mpsc, oneshot, watch};

use super::{Service, ServiceError, Session};
use crate::proto::{
    ClientHello, Decoded, Decoder, Features, Reply, RequestFrame, ServerHello, Status, SyncScope,
    CLIENT_HELLO_LEN,
};

/// Receive buffer per read.
const READ_CHUNK: usize = 256 << 10;
/// Receive buffers queued for a worker before the reader waits.
const INBOX: usize = 4;
/// Reply bytes gathered before they are handed to the writer.
const FLUSH_BYTES: usize = 256 << 10;
/// How long a shutdown waits for connections to finish.
const DRAIN: Duration = Duration::from_secs(10);

/// Tells listeners and their connections to stop: no new connections; every session
/// finishes the request it runs, sends the closing notice, and is released. Cheap to
/// clone.
#[derive(Debug, Clone)]
pub struct ShutdownSignal {
    tx: Arc<watch::Sender<bool>>,
}

impl Default for ShutdownSignal {
    fn default() -> Self {
        Self::new()
    }
}

impl ShutdownSignal {
    /// A signal not yet given.
    pub fn new() -> Self {
        ShutdownSignal {
            tx: Arc::new(watch::channel(false).0),
        }
    }
    /// Gives it.
    pub fn trigger(&self) {
        self.tx.send_replace(true);
    }
    /// Whether it was given.
    pub fn is_triggered(&self) -> bool {
        *self.tx.borrow()
    }
    fn subscribe(&self) -> watch::Receiver<bool> {
        self.tx.subscribe()
    }
}

async fn triggered(rx: &mut watch::Receiver<bool>) {
    let _ = rx.wait_for(|v| *v).await;
}

/// Serves guests on a bound Unix socket until `shutdown`; then drains the connections
/// (each gets the closing notice; its resources are released). `guest_prefix` names
/// the guests in logs and errors (`<prefix>#<n>`, with the hybrid-vsock port when one
/// was given).
pub async fn serve_unix(
    service: Service,
    listener: tokio::net::UnixListener,
    guest_prefix: &str,
    shutdown: ShutdownSignal,
) -> Result<(), ServiceError> {
    let mut rx = shutdown.subscribe();
    let mut conns = tokio::task::JoinSet::new();
    let mut n = 0u64;
    loop {
        tokio::select! {
            _ = triggered(&mut rx) => break,
            r = listener.accept() => match r {
                Ok((stream, _)) => {
                    n += 1;
                    let guest = format!("{guest_prefix}#{n}");
                    conns.spawn(connection(service.clone(), stream, guest, true, shutdown.clone()));
                }
                Err(e) => {
                    log::warn!("accepting on the guest socket: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            },
            Some(_) = conns.join_next(), if !conns.is_empty() => {}
        }
    }
    drain(conns).await;
    Ok(())
}

async fn drain(mut conns: tokio::task::JoinSet<()>) {
    let all = async { while conns.join_next().await.is_some() {} };
    if tokio::time::timeout(DRAIN, all).await.is_err() {
        log::warn!("shutdown: connections did not finish in {DRAIN:?}; aborting them");
    }
}

/// Serves guests on AF_VSOCK `port` (any CID) until `shutdown`, like [`serve_unix`].
/// Guests are named `vsock:<cid>#<n>`.
pub async fn serve_vsock(
    service: Service,
    port: u32,
    shutdown: ShutdownSignal,
) -> Result<(), ServiceError> {
    let listener = vsock::Listener::bind(port).map_err(|source| ServiceError::Io {
        what: format!("listening on AF_VSOCK port {port}"),
        source,
    })?;
    let mut rx = shutdown.subscribe();
    let mut conns = tokio::task::JoinSet::new();
    let mut n = 0u64;
    loop {
        tokio::select! {
            _ = triggered(&mut rx) => break,
            r = listener.accept() => match r {
                Ok((stream, cid)) => {
                    n += 1;
                    conns.spawn(connection(service.clone(), stream, format!("vsock:{cid}#{n}"), false, shutdown.clone()));
                }
                Err(e) => {
                    log::warn!("accepting on AF_VSOCK port {port}: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            },
            Some(_) = conns.join_next(), if !conns.is_empty() => {}
        }
    }
    drain(conns).await;
    Ok(())
}

/// Reads the optional hybrid-vsock preamble and the client hello.
async fn handshake<R: AsyncRead + Unpin, W: AsyncWrite + Unpin>(
    rd: &mut R,
    wr: &mut W,
    hybrid: bool,
    guest: &mut String,
) -> std::io::Result<Option<ClientHello>> {
    let mut hello = [0u8; CLIENT_HELLO_LEN];
    rd.read_exact(&mut hello[..4]).await?;
    if hybrid && &hello[..4] == b"CONN" {
        // "CONNECT <port>\n", at most 32 bytes.
        let mut line = b"CONN".to_vec();
        let mut b = [0u8; 1];
        while line.len() < 32 {
            rd.read_exact(&mut b).await?;
            if b[0] == b'\n' {
                break;
            }
            line.push(b[0]);
        }
        let text = String::from_utf8_lossy(&line);
        let port = text
            .strip_prefix("CONNECT ")
            .and_then(|p| p.trim().parse::<u32>().ok());
        let Some(port) = port else {
            log::warn!("guest {guest}: bad hybrid-vsock preamble {text:?}; closed");
            return Ok(None);
        };
        wr.write_all(format!("OK {port}\n").as_bytes()).await?;
        guest.push_str(&format!(":port{port}"));
        rd.read_exact(&mut hello[..4]).await?;
    }
    if &hello[..4] != b"VGPC" {
        log::warn!(
            "guest {guest}: not a vmgpu client (magic {:02x?}); closed",
            &hello[..4]
        );
        return Ok(None);
    }
    rd.read_exact(&mut hello[4..]).await?;
    match ClientHello::decode(&hello) {
        Ok(Decoded::Frame { frame, .. }) => Ok(Some(frame)),
        _ => Ok(None),
    }
}

/// Replies produced and not yet written, bounded by `max_pipelined`.
#[derive(Debug, Default)]
struct Pending {
    n: Mutex<usize>,
    cv: Condvar,
}

impl Pending {
    fn add(&self, k: usize) {
        *self.n.lock().unwrap_or_else(|e| e.into_inner()) += k;
    }
    fn sub(&self, k: usize) {
        let mut n = self.n.lock().unwrap_or_else(|e| e.into_inner());
        *n = n.saturating_sub(k);
        self.cv.notify_all();
    }
    fn wait_below(&self, max: usize) {
        let mut n = self.n.lock().unwrap_or_else(|e| e.into_inner());
        while *n >= max {
            match self.cv.wait_timeout(n, Duration::from_millis(100)) {
                Ok((g, _)) => n = g,
                Err(e) => n = e.into_inner().0,
            }
        }
    }
    fn get(&self) -> usize {
        *self.n.lock().unwrap_or_else(|e| e.into_inner())
    }
}

enum Inbox {
    Data(Vec<u8>),
    Shutdown,
}

/// One guest connection: handshake, then a worker thread running the session while
/// this task reads and a writer task writes.
async fn connection<S>(
    service: Service,
    stream: S,
    mut guest: String,
    hybrid: bool,
    shutdown: ShutdownSignal,
) where
    S: AsyncRead + AsyncWrite + Send + 'static,
{
    let (mut rd, mut wr) = tokio::io::split(stream);
    let timeout = service.config().handshake_timeout;
    let hello = match tokio::time::timeout(timeout, handshake(&mut rd, &mut wr, hybrid, &mut guest))
        .await
    {
        Ok(Ok(Some(h))) => h,
        Ok(Ok(None)) => return,
        Ok(Err(e)) => {
            log::info!("guest {guest}: gone during the handshake: {e}");
            return;
        }
        Err(_) => {
            log::warn!("guest {guest}: no hello within {timeout:?}; closed");
            return;
        }
    };
    let id = match service.admit(&guest) {
        Ok(id) => id,
        Err(_) => {
            let mut refusal =
                ServerHello::answer(&hello, service.session_limits(), Features::PIPELINING, 0);
            refusal.status = Status::ERROR_OUT_OF_MEMORY;
            let _ = wr.write_all(&refusal.encode()).await;
            return;
        }
    };
    let answer = ServerHello::answer(&hello, service.session_limits(), Features::PIPELINING, id);
    if wr.write_all(&answer.encode()).await.is_err() || !answer.status.is_success() {
        if !answer.status.is_success() {
            log::warn!("guest {guest}: hello refused with {}", answer.status);
        }
        return;
    }
    let session = service.open_session(&guest, id, answer.limits, answer.features);
    let max_pipelined = answer.limits.max_pipelined.max(1) as usize;
    let (in_tx, in_rx) = mpsc::channel::<Inbox>(INBOX);
    let (out_tx, mut out_rx) = mpsc::channel::<(Vec<u8>, usize)>(64);
    let (done_tx, mut done_rx) = oneshot::channel::<()>();
    let pending = Arc::new(Pending::default());
    let worker_pending = pending.clone();
    let spawned = std::thread::Builder::new()
        .name(format!("vmgpu-guest-{id}"))
        .spawn(move || {
            worker(session, in_rx, out_tx, &worker_pending, max_pipelined);
            let _ = done_tx.send(());
        });
    if let Err(e) = spawned {
        log::warn!("guest {guest}: cannot start its worker thread: {e}");
        return;
    }
    let writer_guest = guest.clone();
    let writer = tokio::spawn(async move {
        let mut broken = false;
        while let Some((buf, n)) = out_rx.recv().await {
            if !broken {
                if let Err(e) = wr.write_all(&buf).await {
                    log::info!("guest {writer_guest}: writing replies: {e}");
                    broken = true;
                }
            }
            pending.sub(n);
        }
        let _ = wr.shutdown().await;
    });
    let mut rx = shutdown.subscribe();
    let mut buf = vec![0u8; READ_CHUNK];
    loop {
        tokio::select! {
            _ = triggered(&mut rx) => {
                let _ = in_tx.send(Inbox::Shutdown).await;
                break;
            }
            _ = &mut done_rx => break,
            r = rd.read(&mut buf) => match r {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    if in_tx.send(Inbox::Data(buf[..n].to_vec())).await.is_err() {
                        break;
                    }
                }
            }
        }
    }
    drop(in_tx);
    let _ = writer.await;
}

/// The worker thread: decodes frames in place, runs them, batches the replies.
fn worker(
    mut session: Session,
    mut inbox: mpsc::Receiver<Inbox>,
    out: mpsc::Sender<(Vec<u8>, usize)>,
    pending: &Pending,
    max_pipelined: usize,
) {
    let mut dec = Decoder::<RequestFrame>::new(*session.limits());
    let mut replies = Vec::with_capacity(FLUSH_BYTES);
    let mut count = 0usize;
    let flush = |replies: &mut Vec<u8>, count: &mut usize| {
        if *count > 0 || !replies.is_empty() {
            pending.add(*count);
            let _ = out.blocking_send((std::mem::take(replies), std::mem::take(count)));
        }
    };
    let push = |replies: &mut Vec<u8>, count: &mut usize, r: Reply| {
        if r.encode(replies).is_err() {
            let _ = Reply::error(r.id, r.opcode, Status::ERROR_UNKNOWN, "reply too large")
                .encode(replies);
        }
        *count += 1;
    };
    'outer: while let Some(msg) = inbox.blocking_recv() {
        let chunk = match msg {
            Inbox::Data(c) => c,
            Inbox::Shutdown => {
                push(
                    &mut replies,
                    &mut count,
                    Reply::closing_notice(
                        Status::ERROR_DEINITIALIZED,
                        "the server is shutting down",
                    ),
                );
                break;
            }
        };
        let mut rest = &chunk[..];
        loop {
            let n = dec.feed(rest);
            rest = &rest[n..];
            loop {
                match dec.next_lent() {
                    Ok(Some(lent)) => {
                        let replies_expected = !lent.frame.no_reply;
                        if replies_expected && pending.get() + count >= max_pipelined {
                            flush(&mut replies, &mut count);
                            pending.wait_below(max_pipelined);
                        }
                        if lent.frame.request.sync_scope() != SyncScope::None {
                            // It may wait for the device: earlier replies go out first.
                            flush(&mut replies, &mut count);
                        }
                        if let Some(r) = session.handle(lent.frame, lent.data, None) {
                            push(&mut replies, &mut count, r);
                        }
                        if session.is_closed() {
                            break 'outer;
                        }
                        if replies.len() >= FLUSH_BYTES {
                            flush(&mut replies, &mut count);
                        }
                    }
                    Ok(None) => break,
                    Err(e) => match e.answerable() {
                        Some(r) => {
                            if let Some(reply) = session.refused(r, &e.to_string()) {
                                push(&mut replies, &mut count, reply);
                            }
                        }
                        None => {
                            log::warn!(
                                "guest {} (session {}): protocol violation, closing: {e}",
                                session.guest(),
                                session.id()
                            );
                            push(
                                &mut replies,
                                &mut count,
                                Reply::closing_notice(
                                    Status::ERROR_INVALID_VALUE,
                                    format!("protocol violation: {e}"),
                                ),
                            );
                            break 'outer;
                        }
                    },
                }
            }
            if rest.is_empty() {
                break;
            }
        }
        flush(&mut replies, &mut count);
    }
    flush(&mut replies, &mut count);
    drop(session);
}

mod vsock {
    //! A minimal AF_VSOCK listener on tokio's reactor (tokio has no vsock type): the
    //! accepted sockets are stream sockets, driven as `UnixStream`s (read, write,
    //! shutdown behave alike; no address is asked of them).

    use std::io;
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

    use tokio::io::unix::AsyncFd;

    pub(super) struct Listener {
        fd: AsyncFd<OwnedFd>,
    }

    impl Listener {
        pub(super) fn bind(port: u32) -> io::Result<Listener> {
            // SAFETY: plain socket(2) call; the result is checked.
            let raw = unsafe {
                libc::socket(
                    libc::AF_VSOCK,
                    libc::SOCK_STREAM | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
                    0,
                )
            };
            if raw < 0 {
                return Err(io::Error::last_os_error());
            }
            // SAFETY: `raw` is a fresh, valid descriptor owned by nobody else.
            let fd = unsafe { OwnedFd::from_raw_fd(raw) };
            // SAFETY: sockaddr_vm is plain old data; all-zero is a valid value.
            let mut addr: libc::sockaddr_vm = unsafe { std::mem::zeroed() };
            addr.svm_family = libc::AF_VSOCK as libc::sa_family_t;
            addr.svm_port = port;
            addr.svm_cid = libc::VMADDR_CID_ANY;
            // SAFETY: `addr` is a valid sockaddr_vm of the size given, alive for the call.
            let r = unsafe {
                libc::bind(
                    fd.as_raw_fd(),
                    (&addr as *const libc::sockaddr_vm).cast(),
                    std::mem::size_of::<libc::sockaddr_vm>() as libc::socklen_t,
                )
            };
            if r < 0 {
                return Err(io::Error::last_os_error());
            }
            // SAFETY: listen(2) on our bound socket.
            if unsafe { libc::listen(fd.as_raw_fd(), 128) } < 0 {
                return Err(io::Error::last_os_error());
            }
            // SAFETY: the OwnedFd is moved into the AsyncFd, which owns it (open, the
            // same descriptor) until it is dropped.
            let fd =
                unsafe { AsyncFd::register(fd) }.map_err(|e| io::Error::other(e.to_string()))?;
            Ok(Listener { fd })
        }

        /// The next connection and its peer's CID.
        pub(super) async fn accept(&self) -> io::Result<(tokio::net::UnixStream, u32)> {
            loop {
                let mut guard = self.fd.readable().await?;
                let r = guard.try_io(|inner| {
                    // SAFETY: as in bind; `addr` and `len` are valid and writable.
                    let mut addr: libc::sockaddr_vm = unsafe { std::mem::zeroed() };
                    let mut len = std::mem::size_of::<libc::sockaddr_vm>() as libc::socklen_t;
                    // SAFETY: accept4(2) on our listening socket with a writable address
                    // buffer of `len` bytes.
                    let c = unsafe {
                        libc::accept4(
                            inner.get_ref().as_raw_fd(),
                            (&mut addr as *mut libc::sockaddr_vm).cast(),
                            &mut len,
                            libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
                        )
                    };
                    if c < 0 {
                        Err(io::Error::last_os_error())
                    } else {
                        Ok((c, addr.svm_cid))
                    }
                });
                match r {
                    Ok(Ok((c, cid))) => {
                        // SAFETY: `c` is a fresh descriptor from accept4, owned here.
                        let owned = unsafe { OwnedFd::from_raw_fd(c) };
                        let std = std::os::unix::net::UnixStream::from(owned);
                        return Ok((tokio::net::UnixStream::from_std(std)?, cid));
                    }
                    Ok(Err(e)) => return Err(e),
                    Err(_would_block) => continue,
                }
            }
        }
    }
}
