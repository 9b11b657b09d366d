//! Socket transports (tokio): a Unix socket listener that also accepts the hybrid-vsock
//! `CONNECT <port>\n` → `OK <port>\n` preamble of Firecracker and Cloud Hypervisor, and
//! an AF_VSOCK listener. Tokio tasks only move bytes; each connection's [`Session`] lives
//! on a worker thread of its own, which decodes frames in place (inline copy data goes
//! from the receive buffer to the device) and batches replies.
//!
//! Backpressure: the worker writes replies with blocking writes and reads no further
//! request while a write waits, so a guest that sends more than `max_pipelined`
//! requests without reading replies is held by its own socket buffers (as the
//! protocol allows), never another guest; the decoder holds at most one `max_frame`.

use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::{oneshot, watch};

use super::{Isolation, Service, ServiceError, Session};
use vmgpu_cuda_proto::{
    ClientHello, Decoded, Decoder, Features, Reply, RequestFrame, ServerHello, Status, SyncScope,
    CLIENT_HELLO_LEN,
};

/// Receive buffer of a connection's worker.
const READ_CHUNK: usize = 256 << 10;
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
        other => {
            // A vmgpu client (the magic was right) with a bad hello (a reserved field
            // not 0): refused with a status, as every other refusal.
            let why = match other {
                Err(e) => e.to_string(),
                Ok(_) => "a short hello".into(),
            };
            log::warn!("guest {guest}: hello refused: {why}");
            let refusal = ServerHello::refusal(Status::ERROR_INVALID_VALUE, 0);
            wr.write_all(&refusal.encode()).await?;
            Ok(None)
        }
    }
}

/// One guest connection: the handshake on tokio, then the session on a worker thread
/// of its own that reads and writes the socket directly (blocking), so a request costs
/// one wake-up, not a chain of tasks. This task only waits for the worker or for the
/// shutdown signal.
async fn connection(
    service: Service,
    mut stream: tokio::net::UnixStream,
    mut guest: String,
    hybrid: bool,
    shutdown: ShutdownSignal,
) {
    let timeout = service.config().handshake_timeout;
    let hello = {
        let (mut rd, mut wr) = stream.split();
        match tokio::time::timeout(timeout, handshake(&mut rd, &mut wr, hybrid, &mut guest)).await {
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
        }
    };
    let id = match service.admit(&guest) {
        Ok(id) => id,
        Err(_) => {
            let refusal = ServerHello::refusal(Status::ERROR_OUT_OF_MEMORY, 0);
            let _ = stream.write_all(&refusal.encode()).await;
            return;
        }
    };
    let answer = ServerHello::answer(&hello, service.session_limits(), Features::PIPELINING, id);
    if stream.write_all(&answer.encode()).await.is_err() {
        return;
    }
    if !answer.status.is_success() {
        log::warn!("guest {guest}: hello refused with {}", answer.status);
        return;
    }
    let sock = match stream.into_std().and_then(|s| {
        s.set_nonblocking(false)?;
        Ok(s)
    }) {
        Ok(s) => s,
        Err(e) => {
            log::warn!("guest {guest}: {e}");
            return;
        }
    };
    let control = match sock.try_clone() {
        Ok(c) => c,
        Err(e) => {
            log::warn!("guest {guest}: {e}");
            return;
        }
    };
    let stop = Arc::new(AtomicBool::new(false));
    let (done_tx, mut done_rx) = oneshot::channel::<()>();
    let worker_stop = stop.clone();
    let spawned = if matches!(service.config().isolation, Isolation::Process { .. }) {
        let (svc, g) = (service.clone(), guest.clone());
        std::thread::Builder::new()
            .name(format!("vmgpu-guest-{id}"))
            .spawn(move || {
                svc.supervise(sock, &g, id, answer.limits, answer.features, &worker_stop);
                let _ = done_tx.send(());
            })
    } else {
        let session = service.open_session(&guest, id, answer.limits, answer.features);
        std::thread::Builder::new()
            .name(format!("vmgpu-guest-{id}"))
            .spawn(move || {
                worker(session, sock, &worker_stop);
                let _ = done_tx.send(());
            })
    };
    if let Err(e) = spawned {
        log::warn!("guest {guest}: cannot start its worker thread: {e}");
        return;
    }
    let mut rx = shutdown.subscribe();
    tokio::select! {
        _ = &mut done_rx => return,
        _ = triggered(&mut rx) => {}
    }
    // Shutdown: the worker finishes its request, sends the closing notice and ends.
    stop.store(true, Ordering::SeqCst);
    let _ = control.shutdown(std::net::Shutdown::Read);
    if tokio::time::timeout(DRAIN, &mut done_rx).await.is_err() {
        // A guest that does not read its replies: cut it off.
        let _ = control.shutdown(std::net::Shutdown::Both);
        let _ = done_rx.await;
    }
}

/// The worker thread: reads frames straight into the decoder (large inline copies go
/// from there to the device), runs them, writes replies in batches (before it reads
/// again and before a request that may wait for the device).
pub(super) fn worker(
    mut session: Session,
    mut sock: std::os::unix::net::UnixStream,
    stop: &AtomicBool,
) {
    // A guest gone while this thread waits on the device: its work is cancelled, so the
    // wait ends and the session is released (see `hangup`).
    let gone = session.cancel_token();
    let cancel = gone.clone();
    let who = format!("guest {} (session {})", session.guest(), session.id());
    let _watch = super::hangup::watch(
        &sock,
        Box::new(move || {
            log::info!("{who}: connection closed; its work is cancelled");
            cancel.cancel();
        }),
    )
    .map_err(|e| {
        log::warn!(
            "guest {}: not watching its connection: {e}",
            session.guest()
        )
    })
    .ok();
    // Bulk inline copies come back to back: keep the buffer of the largest frame.
    let mut dec = Decoder::<RequestFrame>::new(*session.limits()).retain_capacity(usize::MAX);
    let mut replies: Vec<u8> = Vec::with_capacity(FLUSH_BYTES);
    // Received bytes not yet taken by the decoder: buf[taken..got].
    let mut buf = vec![0u8; READ_CHUNK];
    let (mut taken, mut got) = (0usize, 0usize);
    let max_pipelined = session.limits().max_pipelined.max(1) as usize;
    let mut queued = 0usize;
    let push = |replies: &mut Vec<u8>, r: Reply| {
        if r.encode(replies).is_err() {
            let _ = Reply::error(r.id, r.opcode, Status::ERROR_UNKNOWN, "reply too large")
                .encode(replies);
        }
    };
    let flush = |replies: &mut Vec<u8>, sock: &mut std::os::unix::net::UnixStream| -> bool {
        if replies.is_empty() {
            return true;
        }
        let ok = sock.write_all(replies).is_ok();
        replies.clear();
        if replies.capacity() > 4 * FLUSH_BYTES {
            replies.shrink_to(FLUSH_BYTES);
        }
        ok
    };
    'outer: loop {
        taken += dec.feed(&buf[taken..got]);
        loop {
            match dec.next_lent() {
                Ok(Some(lent)) => {
                    if lent.frame.request.sync_scope() != SyncScope::None
                        && !flush(&mut replies, &mut sock)
                    {
                        break 'outer;
                    }
                    if let Some(r) = session.handle(lent.frame, lent.data, None) {
                        if replies.is_empty() {
                            queued = 0;
                        }
                        push(&mut replies, r);
                        queued += 1;
                    }
                    if session.is_closed() {
                        flush(&mut replies, &mut sock);
                        break 'outer;
                    }
                    if gone.is_cancelled() {
                        // Nobody reads the replies of what it sent before it went.
                        break 'outer;
                    }
                    // At most `max_pipelined` replies wait in the server: beyond it the
                    // (blocking) write holds this guest until it reads.
                    if (replies.len() >= FLUSH_BYTES || queued >= max_pipelined)
                        && !flush(&mut replies, &mut sock)
                    {
                        break 'outer;
                    }
                }
                Ok(None) => break,
                Err(e) => match e.answerable() {
                    Some(r) => {
                        if let Some(reply) = session.refused(r, &e.to_string()) {
                            push(&mut replies, reply);
                        }
                        if session.is_closed() {
                            // Its id was not above the last one: the closing notice was
                            // the last frame.
                            flush(&mut replies, &mut sock);
                            break 'outer;
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
                            Reply::closing_notice(
                                Status::ERROR_INVALID_VALUE,
                                format!("protocol violation: {e}"),
                            ),
                        );
                        flush(&mut replies, &mut sock);
                        break 'outer;
                    }
                },
            }
        }
        if taken < got {
            // The decoder had no room for all of it: frames were taken out, feed on.
            continue;
        }
        if !flush(&mut replies, &mut sock) {
            break;
        }
        if stop.load(Ordering::SeqCst) {
            break;
        }
        match std::io::Read::read(&mut sock, &mut buf) {
            Ok(0) => break,
            Ok(n) => (taken, got) = (0, n),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => break,
        }
    }
    if stop.load(Ordering::SeqCst) {
        push(
            &mut replies,
            Reply::closing_notice(Status::ERROR_DEINITIALIZED, "the server is shutting down"),
        );
        flush(&mut replies, &mut sock);
    }
    drop(session);
    let _ = sock.shutdown(std::net::Shutdown::Both);
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
