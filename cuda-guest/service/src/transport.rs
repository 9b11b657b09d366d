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

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::{oneshot, watch};

use super::{Isolation, Service, ServiceError};
use vmgpu_cuda_proto::{ClientHello, Decoded, Features, ServerHello, Status, CLIENT_HELLO_LEN};

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
                super::conn::worker(session, sock, &worker_stop);
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

/// Serves `service` on a Unix socket at `path` (a stale socket file there is replaced)
/// until SIGINT or SIGTERM, then shuts down gracefully and removes the socket file.
/// Builds its own tokio runtime: for a command line (`vmgpu cuda serve`).
pub fn serve_unix_until_signal(
    service: Service,
    path: &std::path::Path,
    guest_prefix: &str,
) -> Result<(), ServiceError> {
    let io = |what: String| move |source| ServiceError::Io { what, source };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(io("starting the runtime".into()))?;
    if let Ok(meta) = std::fs::symlink_metadata(path) {
        use std::os::unix::fs::FileTypeExt;
        if meta.file_type().is_socket() {
            let _ = std::fs::remove_file(path);
        }
    }
    let r = rt.block_on(async {
        let listener = tokio::net::UnixListener::bind(path)
            .map_err(io(format!("binding {}", path.display())))?;
        log::info!("serving CUDA guests on {}", path.display());
        let shutdown = ShutdownSignal::new();
        let trigger = shutdown.clone();
        tokio::spawn(async move {
            use tokio::signal::unix::{signal, SignalKind};
            let (Ok(mut int), Ok(mut term)) = (
                signal(SignalKind::interrupt()),
                signal(SignalKind::terminate()),
            ) else {
                return;
            };
            tokio::select! {
                _ = int.recv() => {}
                _ = term.recv() => {}
            }
            log::info!("shutting down: draining guest sessions");
            trigger.trigger();
        });
        serve_unix(service, listener, guest_prefix, shutdown).await
    });
    let _ = std::fs::remove_file(path);
    r
}

/// `service` served on a Unix socket on a runtime thread of its own (two worker threads),
/// until [`stop`](Self::stop) or drop: for tests, benchmarks and programs that embed the
/// service next to other work. The socket is bound before [`start`](Self::start) returns.
#[derive(Debug)]
pub struct BackgroundServer {
    shutdown: ShutdownSignal,
    thread: Option<std::thread::JoinHandle<Result<(), ServiceError>>>,
}

impl BackgroundServer {
    /// Binds `path` and serves `service` there (guests named `guest_prefix#N`).
    pub fn start(
        service: Service,
        path: &std::path::Path,
        guest_prefix: &str,
    ) -> Result<BackgroundServer, ServiceError> {
        let io = |what: String| move |source| ServiceError::Io { what, source };
        let shutdown = ShutdownSignal::new();
        let (sd, p, prefix) = (
            shutdown.clone(),
            path.to_path_buf(),
            guest_prefix.to_owned(),
        );
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let thread = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .map_err(io("starting the runtime".into()))?;
            rt.block_on(async move {
                let listener = tokio::net::UnixListener::bind(&p);
                let _ = ready_tx.send(listener.is_ok());
                let listener = listener.map_err(io(format!("binding {}", p.display())))?;
                serve_unix(service, listener, &prefix, sd).await
            })
        });
        if ready_rx.recv() == Ok(true) {
            return Ok(BackgroundServer {
                shutdown,
                thread: Some(thread),
            });
        }
        // The thread ended with the error (the runtime's or the bind's).
        match thread.join() {
            Ok(r) => Err(r.expect_err("the server thread reported no bound socket")),
            Err(panic) => std::panic::resume_unwind(panic),
        }
    }

    /// Its shutdown signal: triggering it starts the graceful shutdown without waiting.
    pub fn shutdown_signal(&self) -> &ShutdownSignal {
        &self.shutdown
    }

    /// Shuts down gracefully and waits for the server thread; what serving returned.
    pub fn stop(mut self) -> Result<(), ServiceError> {
        self.shutdown.trigger();
        match self.thread.take().map(|t| t.join()) {
            None => Ok(()),
            Some(Ok(r)) => r,
            Some(Err(panic)) => std::panic::resume_unwind(panic),
        }
    }
}

impl Drop for BackgroundServer {
    fn drop(&mut self) {
        self.shutdown.trigger();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
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
