//! Where the service is and how to reach it: `unix:PATH`, `vsock:CID:PORT` and
//! `port:PATH` (a virtio-serial port, or any character device or FIFO), and the
//! handshake over them.

use std::io::{Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, RawFd};
use std::time::{Duration, Instant};

use super::conn::Fail;
use crate::{
    ClientHello, Decoded, Features, HandshakeError, Limits, ServerHello, SERVER_HELLO_LEN,
};
use vmgpu_cuda_api::sys;

/// A byte stream to the server.
pub(super) trait Transport: Read + Write + Send + std::fmt::Debug {}
impl<T: Read + Write + Send + std::fmt::Debug> Transport for T {}

/// How long a process waits for the host to hang up a virtio-serial port.
pub(super) const HANGUP_WAIT: Duration = Duration::from_secs(5);

/// Where the service is: an address (`VMGPU_CUDA_SERVER`) parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Addr {
    /// `unix:PATH`.
    Unix(String),
    /// `port:PATH` (a virtio-serial port, or any character device or FIFO).
    Port(String),
    /// `vsock:CID:PORT`.
    Vsock(u32, u32),
}

impl Addr {
    /// Parses `server`; a malformed one is `CUDA_ERROR_NOT_INITIALIZED`.
    pub(super) fn parse(server: &str) -> Result<Addr, Fail> {
        let bad = |why: &str| {
            Fail::new(
                sys::CUDA_ERROR_NOT_INITIALIZED,
                format!("VMGPU_CUDA_SERVER={server}: {why}"),
            )
        };
        if let Some(path) = server.strip_prefix("unix:") {
            if path.is_empty() {
                return Err(bad("an empty socket path"));
            }
            return Ok(Addr::Unix(path.to_string()));
        }
        if let Some(path) = server.strip_prefix("port:") {
            if path.is_empty() {
                return Err(bad("an empty port path"));
            }
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
    pub(super) fn open(&self, server: &str) -> Result<(Box<dyn Transport>, Option<RawFd>), Fail> {
        let bad = |e: std::io::Error| {
            Fail::new(
                sys::CUDA_ERROR_NOT_INITIALIZED,
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
    // SAFETY: `addr` is an initialised sockaddr_vm and the length passed is its size;
    // `fd` is open (owned by `file`).
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
pub(super) fn wait_hangup(fd: RawFd, limit: Duration) -> bool {
    // SAFETY: fcntl(F_GETFL) on a descriptor the caller keeps open; no memory is passed.
    let flags = unsafe { libc::fcntl(fd, libc::F_GETFL) };
    if flags < 0 {
        return false;
    }
    // SAFETY: as above; only O_NONBLOCK is added (and the flags restored below).
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
        // SAFETY: one valid, writable pollfd for the duration of the call.
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
    // SAFETY: restores the flags read above on the same open descriptor.
    unsafe { libc::fcntl(fd, libc::F_SETFL, flags) };
    hung_up
}

/// Sends the client hello and reads the server's. Every failure is
/// `CUDA_ERROR_NOT_INITIALIZED` naming `server`, except a refusal, which carries the
/// server's status.
pub(super) fn handshake(
    io: &mut Box<dyn Transport>,
    server: &str,
    ours: Limits,
) -> Result<ServerHello, Fail> {
    let fail = |why: String| {
        Fail::new(
            sys::CUDA_ERROR_NOT_INITIALIZED,
            format!("VMGPU_CUDA_SERVER={server}: {why}"),
        )
    };
    let hello = ClientHello::new(Features::PIPELINING, ours.max_frame);
    io.write_all(&hello.encode())
        .and_then(|_| io.flush())
        .map_err(|e| fail(format!("handshake: {e}")))?;
    let mut buf = [0u8; SERVER_HELLO_LEN];
    io.read_exact(&mut buf)
        .map_err(|e| fail(format!("handshake (the server's hello): {e}")))?;
    match ServerHello::decode(&buf) {
        Ok(Decoded::Frame { frame, .. }) => Ok(frame),
        Ok(Decoded::NeedMore(_)) => Err(fail("a short server hello".into())),
        Err(HandshakeError::Refused { status }) => Err(Fail::new(
            if status.is_success() {
                sys::CUDA_ERROR_NOT_INITIALIZED
            } else {
                status.0 as i32
            },
            format!("VMGPU_CUDA_SERVER={server}: the service refused the session"),
        )),
        Err(e) => Err(fail(format!("not a vmgpu CUDA service: {e}"))),
    }
}
