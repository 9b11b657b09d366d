//! `RemoteBackend` (`vmgpu_cuda_proto::client`): the client's own logic, against a
//! `cuda_guest::service` in this process (Unix socket), behind a [`Proxy`] that records
//! what the client sends and can cut the connection, or against a scripted server.
//! The driver API's behaviour is `conformance_remote.rs`.

mod service_support;

use std::io::{Read, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::PathBuf;
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

use cuda_guest::driver::{
    Backend, BackendKind, Device, DriverError, EventFlags, FunctionAttribute, LaunchConfig, Result,
    Status, Stream, StreamFlags,
};
use cuda_guest::proto::client::RemoteBackend;
use cuda_guest::proto::{
    ClientHello, ContextId, Decoded, Decoder, Features, FunctionId, FunctionInfo, Limits, ModuleId,
    Opcode, Reply, ReplyBody, Request, RequestFrame, ServerHello, CLIENT_HELLO_LEN,
};
use cuda_guest::service::{BackendChoice, ServiceConfig};
use cuda_guest::sim::SimConfig;
use service_support::Server;

const OOB_WRITE_PTX: &str = include_str!("../../fixtures/ptx/oob_write.nvrtc.ptx");

/// A service on the simulator whose sessions have these protocol limits.
fn service(limits: Limits) -> Server {
    Server::start_with(
        BackendChoice::Simulator(SimConfig {
            threads: 2,
            ..SimConfig::default()
        }),
        ServiceConfig {
            limits,
            ..ServiceConfig::default()
        },
    )
}

/// Limits with `max_inline` bytes of inline data in frames of `max_frame` bytes.
fn small_limits(max_frame: u32, max_inline: u32) -> Limits {
    let l = Limits {
        max_frame,
        max_inline,
        max_module: max_frame - 4096,
        max_sg_entries: 64,
        ..Limits::default()
    };
    l.validate().expect("valid limits");
    l
}

fn address(path: &std::path::Path) -> String {
    format!("unix:{}", path.display())
}

/// A backend on `address` after `cuInit(0)`.
fn backend(address: &str) -> RemoteBackend {
    let b = RemoteBackend::new(address).unwrap_or_else(|e| panic!("new({address}): {e}"));
    b.set_init_flags(0);
    b
}

/// `b` with device 0's primary context retained and current on this thread.
fn with_context(b: &RemoteBackend) {
    let ctx = b.primary_context_retain(Device::new(0)).expect("retain");
    b.context_set_current(&ctx).expect("set current");
}

#[track_caller]
fn status_of<T: std::fmt::Debug>(r: Result<T>, want: Status, what: &str) -> DriverError {
    match r {
        Ok(v) => panic!("{what}: succeeded ({v:?}); expected {want}"),
        Err(e) => {
            assert_eq!(e.status(), want, "{what}: {e}");
            e
        }
    }
}

fn pattern(n: usize, seed: u8) -> Vec<u8> {
    (0..n)
        .map(|i| (i as u8).wrapping_mul(29).wrapping_add(seed) ^ (i >> 8) as u8)
        .collect()
}

/// Runs `body` on a thread of its own; fails if it takes longer than `limit` (a
/// deadlock) or panics.
fn within(limit: Duration, body: impl FnOnce() + Send + 'static) {
    let (tx, rx) = mpsc::channel();
    let t = std::thread::spawn(move || {
        body();
        let _ = tx.send(());
    });
    match rx.recv_timeout(limit) {
        Ok(()) => t.join().expect("the body"),
        Err(mpsc::RecvTimeoutError::Disconnected) => {
            std::panic::resume_unwind(t.join().expect_err("the body panicked"))
        }
        Err(mpsc::RecvTimeoutError::Timeout) => panic!("still running after {limit:?}: deadlock"),
    }
}

// ---------------------------------------------------------------------------------------
// A recording proxy.

#[derive(Default)]
struct Recorded {
    /// What the client sent.
    bytes: Vec<u8>,
    /// The client closed its side.
    closed: bool,
    /// The proxy's socket towards the client (to cut the connection).
    client: Option<UnixStream>,
}

/// A Unix socket in front of a [`Server`] that forwards every connection to it,
/// records what each client sent, and can cut a connection.
struct Proxy {
    path: PathBuf,
    connections: Arc<Mutex<Vec<Arc<Mutex<Recorded>>>>>,
    _dir: tempfile::TempDir,
}

impl Proxy {
    fn start(upstream: PathBuf) -> Proxy {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("proxy.sock");
        let listener = UnixListener::bind(&path).expect("bind the proxy");
        let connections: Arc<Mutex<Vec<Arc<Mutex<Recorded>>>>> = Arc::default();
        let all = connections.clone();
        std::thread::spawn(move || {
            for client in listener.incoming() {
                let Ok(client) = client else { return };
                let server = UnixStream::connect(&upstream).expect("connect to the service");
                let record = Arc::new(Mutex::new(Recorded {
                    client: Some(client.try_clone().expect("clone")),
                    ..Recorded::default()
                }));
                all.lock().unwrap().push(record.clone());
                let (mut from_client, mut to_server) = (
                    client.try_clone().expect("clone"),
                    server.try_clone().expect("clone"),
                );
                std::thread::spawn(move || {
                    let mut buf = vec![0u8; 1 << 16];
                    loop {
                        match from_client.read(&mut buf) {
                            Ok(0) | Err(_) => break,
                            Ok(n) => {
                                record.lock().unwrap().bytes.extend_from_slice(&buf[..n]);
                                if to_server.write_all(&buf[..n]).is_err() {
                                    break;
                                }
                            }
                        }
                    }
                    record.lock().unwrap().closed = true;
                    let _ = to_server.shutdown(std::net::Shutdown::Write);
                });
                let (mut from_server, mut to_client) = (server, client);
                std::thread::spawn(move || {
                    let _ = std::io::copy(&mut from_server, &mut to_client);
                    let _ = to_client.shutdown(std::net::Shutdown::Write);
                });
            }
        });
        Proxy {
            path,
            connections,
            _dir: dir,
        }
    }

    fn address(&self) -> String {
        address(&self.path)
    }

    fn connections(&self) -> usize {
        self.connections.lock().unwrap().len()
    }

    fn record(&self, i: usize) -> Arc<Mutex<Recorded>> {
        self.connections.lock().unwrap()[i].clone()
    }

    /// Cuts connection `i` (both directions, as a dead peer).
    fn cut(&self, i: usize) {
        let record = self.record(i);
        let r = record.lock().unwrap();
        let _ = r
            .client
            .as_ref()
            .expect("client socket")
            .shutdown(std::net::Shutdown::Both);
    }

    /// The requests connection `i` sent after its hello, once the client closed it.
    fn requests(&self, i: usize) -> Vec<Request> {
        self.frames(i).into_iter().map(|f| f.request).collect()
    }

    /// The same, as frames.
    fn frames(&self, i: usize) -> Vec<RequestFrame> {
        let record = self.record(i);
        let t = Instant::now();
        while !record.lock().unwrap().closed {
            assert!(
                t.elapsed() < Duration::from_secs(10),
                "connection {i} still open"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        let bytes = std::mem::take(&mut record.lock().unwrap().bytes);
        assert!(bytes.len() >= CLIENT_HELLO_LEN, "no hello");
        let mut decoder = Decoder::<RequestFrame>::new(Limits::default());
        let mut rest = &bytes[CLIENT_HELLO_LEN..];
        let mut out = Vec::new();
        loop {
            while let Some(frame) = decoder.next_frame().expect("a request") {
                out.push(frame);
            }
            if rest.is_empty() {
                return out;
            }
            let n = decoder.feed(rest);
            assert!(n > 0, "undecodable requests after {} requests", out.len());
            rest = &rest[n..];
        }
    }
}

fn opcodes(requests: &[Request]) -> Vec<Opcode> {
    requests.iter().map(Request::opcode).collect()
}

// ---------------------------------------------------------------------------------------
// Addresses and connecting.

#[test]
fn a_malformed_address_is_not_initialized() {
    for bad in [
        "",
        "/run/vmgpu.sock",
        "tcp:127.0.0.1:4000",
        "unix:",
        "port:",
        "vsock:",
        "vsock:3",
        "vsock:x:5000",
        "vsock:3:99999999999",
    ] {
        let e = RemoteBackend::new(bad).expect_err(bad);
        assert_eq!(e.status(), Status::ERROR_NOT_INITIALIZED, "{bad:?}: {e}");
        let detail = e
            .as_cuda()
            .and_then(|c| c.detail.clone())
            .unwrap_or_default();
        assert!(
            detail.contains(&format!("VMGPU_CUDA_SERVER={bad}")),
            "{bad:?}: {detail}"
        );
    }
    for good in ["unix:/run/vmgpu.sock", "vsock:2:5000", "port:/dev/vport0p1"] {
        let b = RemoteBackend::new(good).unwrap_or_else(|e| panic!("{good}: {e}"));
        assert_eq!(b.server(), good);
        assert_eq!(b.kind(), BackendKind::Remote);
    }
}

#[test]
fn a_service_that_is_not_there_fails_every_call_with_not_initialized() {
    let dir = tempfile::tempdir().expect("tempdir");
    let address = address(&dir.path().join("nobody.sock"));
    let b = backend(&address);
    for _ in 0..2 {
        let e = status_of(
            b.device_count(),
            Status::ERROR_NOT_INITIALIZED,
            "cuDeviceGetCount",
        );
        let c = e.as_cuda().expect("a CUDA error");
        assert_eq!(c.operation, "cuDeviceGetCount");
        assert!(
            c.detail
                .as_deref()
                .is_some_and(|d| d.contains(&format!("VMGPU_CUDA_SERVER={address}"))),
            "{e}"
        );
    }
    let e = status_of(
        b.driver_version(),
        Status::ERROR_NOT_INITIALIZED,
        "cuDriverGetVersion",
    );
    assert_eq!(
        e.as_cuda().map(|c| c.operation.as_str()),
        Some("cuDriverGetVersion")
    );
    status_of(
        b.primary_context_retain(Device::new(0)),
        Status::ERROR_NOT_INITIALIZED,
        "cuDevicePrimaryCtxRetain",
    );
}

#[test]
fn the_session_opens_at_the_first_call_that_needs_it_and_init_comes_first() {
    let server = service(Limits::default());
    let proxy = Proxy::start(server.path.clone());

    let b = backend(&proxy.address());
    // Calls answered by the client itself open nothing.
    status_of(b.mem_alloc(16), Status::ERROR_INVALID_CONTEXT, "cuMemAlloc");
    status_of(
        b.context_synchronize(),
        Status::ERROR_INVALID_CONTEXT,
        "cuCtxSynchronize",
    );
    status_of(
        b.host_alloc(4096, Default::default()),
        Status::ERROR_INVALID_CONTEXT,
        "cuMemHostAlloc",
    );
    status_of(
        b.stream_synchronize(&Stream::DEFAULT),
        Status::ERROR_INVALID_CONTEXT,
        "cuStreamSynchronize(0)",
    );
    assert_eq!(
        proxy.connections(),
        0,
        "a call that needs no service connected"
    );
    // The first one that needs it does, once.
    assert_eq!(b.device_count().expect("cuDeviceGetCount"), 1);
    assert_eq!(proxy.connections(), 1);
    b.device_name(Device::new(0)).expect("cuDeviceGetName");
    drop(b);
    assert_eq!(proxy.connections(), 1);
    assert_eq!(
        opcodes(&proxy.requests(0)),
        [
            Opcode::Init,
            Opcode::DeviceGetCount,
            Opcode::DeviceGetName,
            Opcode::Goodbye
        ]
    );

    // cuDriverGetVersion needs no cuInit: before it, the session has no Init; after
    // cuInit, Init is the next request, with the program's flags.
    let b = RemoteBackend::new(&proxy.address()).expect("new");
    b.driver_version().expect("cuDriverGetVersion");
    b.set_init_flags(0);
    b.set_init_flags(7); // the first cuInit's flags stay
    assert_eq!(proxy.connections(), 2);
    b.device_count().expect("cuDeviceGetCount");
    drop(b);
    let requests = proxy.requests(1);
    assert_eq!(
        opcodes(&requests),
        [
            Opcode::DriverGetVersion,
            Opcode::Init,
            Opcode::DeviceGetCount,
            Opcode::Goodbye
        ]
    );
    assert_eq!(requests[1], Request::Init { flags: 0 });
    // Goodbye released everything on the server.
    server.wait_idle();
}

// ---------------------------------------------------------------------------------------
// Copies.

#[test]
fn asynchronous_device_to_host_data_lands_at_the_next_synchronisation() {
    let server = service(small_limits(1 << 16, 1000));
    let b = backend(&address(&server.path));
    with_context(&b);
    let n = 10_000;
    let data = pattern(n, 5);
    let d = b.mem_alloc(n).expect("cuMemAlloc");
    // SAFETY: `d` is a live allocation of n bytes.
    unsafe { b.memcpy_htod(d, &data) }.expect("cuMemcpyHtoD");
    let s = b
        .stream_create(StreamFlags::default())
        .expect("cuStreamCreate");
    let e = b
        .event_create(EventFlags::default())
        .expect("cuEventCreate");

    // Landing at cuStreamSynchronize, at cuCtxSynchronize, at cuEventSynchronize.
    let mut on_stream = vec![0u8; n];
    let mut on_default = vec![0u8; n];
    let mut before_event = vec![0u8; 3000];
    // SAFETY: the buffers outlive the copies, and nothing touches them until the
    // synchronisations below (the reads in between are this test's probes of the
    // client, on this thread, while the client writes nothing: it writes only inside
    // calls).
    unsafe {
        b.memcpy_dtoh_async(on_stream.as_mut_ptr(), d, n, &s)
            .expect("cuMemcpyDtoHAsync");
        b.memcpy_dtoh_async(on_default.as_mut_ptr(), d, n, &Stream::DEFAULT)
            .expect("cuMemcpyDtoHAsync(0)");
        b.memcpy_dtoh_async(before_event.as_mut_ptr(), d.offset(500), 3000, &s)
            .expect("cuMemcpyDtoHAsync");
    }
    b.event_record(&e, &s).expect("cuEventRecord");
    assert!(
        on_stream
            .iter()
            .chain(&on_default)
            .chain(&before_event)
            .all(|&x| x == 0),
        "data written before a synchronising call"
    );
    b.event_synchronize(&e).expect("cuEventSynchronize");
    assert_eq!(before_event, data[500..3500]);
    assert_eq!(on_stream, data);
    b.context_synchronize().expect("cuCtxSynchronize");
    assert_eq!(on_default, data);

    // And a stream synchronisation alone.
    let mut again = vec![0u8; n];
    // SAFETY: as above.
    unsafe { b.memcpy_dtoh_async(again.as_mut_ptr(), d, n, &s) }.expect("cuMemcpyDtoHAsync");
    assert!(again.iter().all(|&x| x == 0));
    b.stream_synchronize(&s).expect("cuStreamSynchronize");
    assert_eq!(again, data);

    b.event_destroy(e).expect("cuEventDestroy");
    b.stream_destroy(s).expect("cuStreamDestroy");
    b.mem_free(d).expect("cuMemFree");
}

#[test]
fn copies_larger_than_max_inline_are_split_and_correct() {
    let server = service(small_limits(1 << 16, 1000));
    let proxy = Proxy::start(server.path.clone());
    let b = backend(&proxy.address());
    with_context(&b);
    let n = 10_001;
    let data = pattern(n, 9);
    let d = b.mem_alloc(n + 7).expect("cuMemAlloc");
    let s = b
        .stream_create(StreamFlags::default())
        .expect("cuStreamCreate");
    let mut back = vec![0u8; n];
    let mut back_async = vec![0u8; 2_500];
    // SAFETY: every range lies in `d` (n + 7 bytes); the host buffers outlive the
    // synchronisation below.
    unsafe {
        b.memset_d8(d, 0xee, n + 7).expect("cuMemsetD8");
        b.memcpy_htod(d.offset(3), &data).expect("cuMemcpyHtoD");
        b.memcpy_dtoh(&mut back, d.offset(3)).expect("cuMemcpyDtoH");
        b.memcpy_htod_async(d.offset(4000), data.as_ptr().add(100), 2_500, &s)
            .expect("cuMemcpyHtoDAsync");
        b.memcpy_dtoh_async(back_async.as_mut_ptr(), d.offset(4000), 2_500, &s)
            .expect("cuMemcpyDtoHAsync");
    }
    b.stream_synchronize(&s).expect("cuStreamSynchronize");
    assert_eq!(back, data);
    assert_eq!(back_async, data[100..2600]);
    let mut whole = vec![0u8; n + 7];
    // SAFETY: `d` holds n + 7 bytes.
    unsafe { b.memcpy_dtoh(&mut whole, d) }.expect("cuMemcpyDtoH");
    let mut want = vec![0xeeu8; 3];
    want.extend_from_slice(&data);
    want.extend_from_slice(&[0xee; 4]);
    want[4000..6500].copy_from_slice(&data[100..2600]);
    assert_eq!(whole, want);
    // A split copy past the end fails as a whole copy does.
    let mut past = vec![0u8; n + 8];
    // SAFETY: the copy reaches one byte past `d`: refused.
    let r = unsafe { b.memcpy_dtoh(&mut past, d) };
    status_of(r, Status::ERROR_INVALID_VALUE, "cuMemcpyDtoH past the end");
    b.stream_destroy(s).expect("cuStreamDestroy");
    b.mem_free(d).expect("cuMemFree");
    drop(b);

    let frames = proxy.frames(0);
    // Pipelined: the asynchronous host-to-device pieces (not the device-to-host ones,
    // whose replies carry the data, nor the synchronous ones).
    for f in &frames {
        assert_eq!(
            f.no_reply,
            f.request.opcode() == Opcode::MemcpyHtoDAsync,
            "{:?}",
            f.request.opcode()
        );
    }
    let requests: Vec<Request> = frames.into_iter().map(|f| f.request).collect();
    let count = |op: Opcode| requests.iter().filter(|r| r.opcode() == op).count();
    assert_eq!(
        count(Opcode::MemcpyHtoD),
        11,
        "10001 bytes in 1000-byte pieces"
    );
    assert_eq!(count(Opcode::MemcpyHtoDAsync), 3);
    assert_eq!(count(Opcode::MemcpyDtoHAsync), 3);
    // 10001, then 10008 and 10009 bytes.
    assert_eq!(count(Opcode::MemcpyDtoH), 11 + 11 + 11);
    for r in &requests {
        if let Request::MemcpyHtoD { src, .. } = r {
            assert!(
                matches!(src, cuda_guest::proto::HostSource::Inline(d) if d.len() <= 1000),
                "a piece larger than max_inline"
            );
        }
    }
}

#[test]
fn unread_device_to_host_data_does_not_block_large_writes() {
    // Data replies of 64 KiB that the client has not read, and 2 MiB of host-to-device
    // data written after them: the client reads the replies first (the service writes
    // replies with blocking writes and reads nothing meanwhile).
    let server = service(small_limits(1 << 17, 64 << 10));
    let b = Arc::new(backend(&address(&server.path)));
    let b2 = b.clone();
    within(Duration::from_secs(60), move || {
        let b = &*b2;
        with_context(b);
        let n = 3 << 20;
        let data = pattern(n, 1);
        let src = b.mem_alloc(n).expect("cuMemAlloc");
        let dst = b.mem_alloc(2 << 20).expect("cuMemAlloc");
        // SAFETY: `src` holds n bytes.
        unsafe { b.memcpy_htod(src, &data) }.expect("cuMemcpyHtoD");
        let s1 = b
            .stream_create(StreamFlags::default())
            .expect("cuStreamCreate");
        let s2 = b
            .stream_create(StreamFlags::default())
            .expect("cuStreamCreate");
        let mut back = vec![0u8; n];
        let up = pattern(2 << 20, 77);
        // SAFETY: the buffers outlive the synchronisations below; device ranges lie in
        // `src` and `dst`.
        unsafe {
            b.memcpy_dtoh_async(back.as_mut_ptr(), src, n, &s1)
                .expect("cuMemcpyDtoHAsync");
            b.memcpy_htod_async(dst, up.as_ptr(), up.len(), &s2)
                .expect("cuMemcpyHtoDAsync");
            b.memcpy_dtoh_async(back.as_mut_ptr(), src, 4096, &s1)
                .expect("cuMemcpyDtoHAsync");
            b.memcpy_htod_async(dst, up.as_ptr(), up.len(), &s2)
                .expect("cuMemcpyHtoDAsync");
        }
        b.stream_synchronize(&s2).expect("cuStreamSynchronize");
        b.stream_synchronize(&s1).expect("cuStreamSynchronize");
        assert_eq!(back, data);
        let mut check = vec![0u8; up.len()];
        // SAFETY: `dst` holds 2 MiB.
        unsafe { b.memcpy_dtoh(&mut check, dst) }.expect("cuMemcpyDtoH");
        assert_eq!(check, up);
        b.stream_destroy(s1).expect("cuStreamDestroy");
        b.stream_destroy(s2).expect("cuStreamDestroy");
    });
    drop(b);
    server.wait_idle();
}

// ---------------------------------------------------------------------------------------
// Deferred errors.

#[test]
fn a_pipelined_failure_is_reported_by_the_next_synchronisation_with_its_cause() {
    let server = service(Limits::default());
    let b = backend(&address(&server.path));
    with_context(&b);
    let d = b.mem_alloc(256).expect("cuMemAlloc");
    let s = b
        .stream_create(StreamFlags::default())
        .expect("cuStreamCreate");

    // A memset past the allocation: accepted at the call (pipelined), reported by the
    // stream's next synchronisation, then cleared (not sticky).
    // SAFETY: the range reaches past `d`: the service refuses it.
    unsafe { b.memset_d8_async(d, 1, 512, &s) }.expect("cuMemsetD8Async returns at once");
    let e = status_of(
        b.stream_synchronize(&s),
        Status::ERROR_INVALID_VALUE,
        "cuStreamSynchronize after a bad memset",
    );
    let c = e.as_cuda().expect("a CUDA error");
    assert_eq!(c.operation, "cuStreamSynchronize");
    let detail = c.detail.clone().unwrap_or_default();
    assert!(
        detail.contains("deferred: caused by request") && detail.contains("MemsetAsync"),
        "{detail}"
    );
    b.stream_synchronize(&s).expect("cleared once reported");

    let m = b.module_load_ptx(OOB_WRITE_PTX).expect("cuModuleLoadData");
    let k = b
        .module_get_function(&m, "oob_write")
        .expect("cuModuleGetFunction");
    let far = d.offset(1 << 40);
    let n = 0i32;
    let args: [&[u8]; 2] = [&far.0.to_le_bytes(), &n.to_le_bytes()];

    // Refused at the call, not deferred: a geometry the device cannot run.
    for block in [[2048, 1, 1], [u32::MAX; 3], [1, 1, 0]] {
        let cfg = LaunchConfig {
            grid: [1, 1, 1],
            block,
            shared_bytes: 0,
        };
        // SAFETY: refused before anything is sent.
        let r = unsafe { b.launch(&k, &cfg, &s, &args) };
        status_of(r, Status::ERROR_INVALID_VALUE, &format!("block {block:?}"));
    }
    b.stream_synchronize(&s).expect("nothing was deferred");

    // A kernel that faults: the launch succeeds; the next synchronisation reports the
    // sticky illegal address, caused by the launch.
    // SAFETY: thread 0 stores one terabyte past `d`, where nothing is mapped in the
    // session's own (simulated) device: it faults there, nothing of this process.
    unsafe { b.launch(&k, &LaunchConfig::linear(1, 32), &s, &args) }
        .expect("cuLaunchKernel returns at once");
    let e = status_of(
        b.context_synchronize(),
        Status::ERROR_ILLEGAL_ADDRESS,
        "cuCtxSynchronize after the fault",
    );
    let c = e.as_cuda().expect("a CUDA error");
    assert_eq!(c.operation, "cuCtxSynchronize");
    let detail = c.detail.clone().unwrap_or_default();
    assert!(
        detail.contains("deferred: caused by request") && detail.contains("LaunchKernel"),
        "{detail}"
    );
    status_of(
        b.mem_alloc(16),
        Status::ERROR_ILLEGAL_ADDRESS,
        "cuMemAlloc (sticky)",
    );
    // Refused at the call, not deferred: arguments that do not match the kernel.
    let short: [&[u8]; 1] = [&far.0.to_le_bytes()];
    // SAFETY: refused before anything is sent.
    let r = unsafe { b.launch(&k, &LaunchConfig::linear(1, 32), &s, &short) };
    status_of(
        r,
        Status::ERROR_INVALID_VALUE,
        "cuLaunchKernel with one argument of two",
    );
}

#[test]
fn a_broken_connection_fails_every_later_call() {
    let server = service(Limits::default());
    let proxy = Proxy::start(server.path.clone());
    let b = backend(&proxy.address());
    with_context(&b);
    let d = b.mem_alloc(64).expect("cuMemAlloc");
    proxy.cut(0);
    let e = b
        .mem_alloc(64)
        .expect_err("cuMemAlloc over a cut connection");
    assert_eq!(e.status(), Status::ERROR_UNKNOWN, "{e}");
    let why = e
        .as_cuda()
        .and_then(|c| c.detail.clone())
        .unwrap_or_default();
    assert!(why.contains("vmgpu CUDA service"), "{why}");
    // Every later call, with or without a context, local state aside, fails the same.
    for r in [
        b.mem_free(d).map(drop),
        b.context_synchronize(),
        b.device_count().map(drop),
        b.driver_version().map(drop),
        b.stream_create(StreamFlags::default()).map(drop),
        b.primary_context_retain(Device::new(0)).map(drop),
    ] {
        let e = r.expect_err("a call after the break");
        assert_eq!(e.status(), Status::ERROR_UNKNOWN, "{e}");
        assert_eq!(
            e.as_cuda()
                .and_then(|c| c.detail.clone())
                .unwrap_or_default(),
            why
        );
    }
    // Pipelined calls too.
    // SAFETY: nothing is sent.
    let r = unsafe { b.memset_d8_async(d, 0, 64, &Stream::DEFAULT) };
    status_of(r, Status::ERROR_UNKNOWN, "cuMemsetD8Async after the break");
    drop(b);
    server.wait_idle();
}

// ---------------------------------------------------------------------------------------
// Contexts and handles.

#[test]
fn objects_are_used_in_their_own_context_from_any_thread() {
    let server = service(Limits::default());
    let b = Arc::new(backend(&address(&server.path)));
    with_context(&b);
    let s = b
        .stream_create(StreamFlags::default())
        .expect("cuStreamCreate");
    let e = b
        .event_create(EventFlags::default())
        .expect("cuEventCreate");
    let d = b.mem_alloc(64).expect("cuMemAlloc");
    let b2 = b.clone();
    let (s, e) = std::thread::spawn(move || {
        let b = &*b2;
        // No context is current on this thread: calls that need one fail, calls on
        // objects work in the objects' context.
        status_of(b.mem_alloc(16), Status::ERROR_INVALID_CONTEXT, "cuMemAlloc");
        status_of(
            b.stream_synchronize(&Stream::DEFAULT),
            Status::ERROR_INVALID_CONTEXT,
            "cuStreamSynchronize(0)",
        );
        // SAFETY: `d` holds 64 bytes.
        unsafe { b.memset_d8_async(d, 0x3c, 64, &s) }.expect("cuMemsetD8Async");
        b.event_record(&e, &s).expect("cuEventRecord");
        b.event_synchronize(&e).expect("cuEventSynchronize");
        assert!(b.stream_query(&s).expect("cuStreamQuery"));
        (s, e)
    })
    .join()
    .expect("the other thread");
    let mut out = [0u8; 64];
    // SAFETY: `d` holds 64 bytes.
    unsafe { b.memcpy_dtoh(&mut out, d) }.expect("cuMemcpyDtoH");
    assert_eq!(out, [0x3c; 64]);
    b.event_destroy(e).expect("cuEventDestroy");
    b.stream_destroy(s).expect("cuStreamDestroy");
    b.mem_free(d).expect("cuMemFree");
}

#[test]
fn handles_of_another_backend_and_dead_handles_are_invalid_handle() {
    let server = service(Limits::default());
    let a = backend(&address(&server.path));
    let b = backend(&address(&server.path));
    with_context(&a);
    with_context(&b);
    let s = a
        .stream_create(StreamFlags::default())
        .expect("cuStreamCreate");
    let e = a
        .event_create(EventFlags::default())
        .expect("cuEventCreate");
    let want = Status::ERROR_INVALID_HANDLE;
    status_of(b.stream_synchronize(&s), want, "another backend's stream");
    status_of(b.event_query(&e), want, "another backend's event");
    status_of(
        b.event_record(&e, &Stream::DEFAULT),
        want,
        "another backend's event",
    );
    let ctx_a = a.primary_context_retain(Device::new(0)).expect("retain");
    status_of(
        b.context_set_current(&ctx_a),
        want,
        "another backend's context",
    );
    a.primary_context_release(ctx_a).expect("release");
    // A destroyed stream is refused by the client.
    let raw = s.raw();
    a.stream_destroy(s).expect("cuStreamDestroy");
    let dead = Stream::from_raw(a.instance_id(), raw);
    status_of(a.stream_synchronize(&dead), want, "a destroyed stream");
    a.event_destroy(e).expect("cuEventDestroy");
}

#[test]
fn the_primary_context_keeps_its_handle_across_a_reset() {
    let server = service(Limits::default());
    let b = backend(&address(&server.path));
    let ctx = b.primary_context_retain(Device::new(0)).expect("retain");
    let again = b.primary_context_retain(Device::new(0)).expect("retain");
    assert_eq!(again, ctx);
    b.context_set_current(&ctx).expect("set current");
    let before = b.mem_get_info().expect("cuMemGetInfo");
    let _p = b.mem_alloc(1 << 20).expect("cuMemAlloc");
    let s = b
        .stream_create(StreamFlags::default())
        .expect("cuStreamCreate");
    // SAFETY: nothing made before the reset is used afterwards but the stream, which
    // must be refused.
    unsafe { b.primary_context_reset(Device::new(0)) }.expect("cuDevicePrimaryCtxReset");
    // The same handle, still current, a fresh context behind it.
    assert_eq!(b.mem_get_info().expect("cuMemGetInfo"), before);
    status_of(
        b.stream_synchronize(&s),
        Status::ERROR_INVALID_HANDLE,
        "a stream of the context before the reset",
    );
    b.context_set_current(&ctx)
        .expect("the handle is still valid");
    b.primary_context_release(again).expect("release");
    b.primary_context_release(ctx).expect("release");
    status_of(
        b.primary_context_release(ctx),
        Status::ERROR_INVALID_CONTEXT,
        "a release more than retained",
    );
    // Released to 0: the service dropped the context. A retain gives it back under the
    // same handle.
    let third = b.primary_context_retain(Device::new(0)).expect("retain");
    assert_eq!(third, ctx);
    b.mem_alloc(16).expect("cuMemAlloc in the new context");
}

// ---------------------------------------------------------------------------------------
// A 1.0 session.

/// A scripted server speaking protocol 1.0: it answers the requests a program needs to
/// get a context, a module and a kernel, and refuses anything else with
/// `CUDA_ERROR_NOT_SUPPORTED`; it returns the opcodes it received.
fn serve_1_0(listener: UnixListener) -> std::thread::JoinHandle<Vec<Opcode>> {
    std::thread::spawn(move || {
        let (mut s, _) = listener.accept().expect("accept");
        let mut hello = [0u8; CLIENT_HELLO_LEN];
        s.read_exact(&mut hello).expect("client hello");
        let Ok(Decoded::Frame { frame: client, .. }) = ClientHello::decode(&hello) else {
            panic!("not a client hello")
        };
        let mut answer = ServerHello::answer(&client, Limits::default(), Features::PIPELINING, 1);
        answer.minor = 0;
        s.write_all(&answer.encode()).expect("server hello");
        let mut decoder = Decoder::<RequestFrame>::new(answer.limits);
        let mut seen = Vec::new();
        loop {
            let frame = loop {
                if let Some(f) = decoder.next_frame().expect("a request") {
                    break f;
                }
                if decoder.read_from(&mut s).unwrap_or(0) == 0 {
                    return seen;
                }
            };
            let op = frame.request.opcode();
            seen.push(op);
            if frame.no_reply {
                continue;
            }
            let body = match frame.request {
                Request::Init { .. } | Request::CtxSetCurrent { .. } | Request::Goodbye => {
                    Some(ReplyBody::Empty)
                }
                Request::PrimaryCtxRetain { .. } => Some(ReplyBody::Context(ContextId(0x51))),
                Request::ModuleLoadData { .. } => Some(ReplyBody::Module(ModuleId(0x61))),
                Request::ModuleGetFunction { .. } => Some(ReplyBody::Function(FunctionInfo {
                    function: FunctionId(0x71),
                    params: Some(Vec::new()),
                })),
                _ => None,
            };
            let reply = match body {
                Some(body) => Reply::ok(frame.id, op, body),
                None => Reply::error(frame.id, op, Status::ERROR_NOT_SUPPORTED, "scripted"),
            };
            let mut out = Vec::new();
            reply.encode(&mut out).expect("encode");
            s.write_all(&out).expect("reply");
            if op == Opcode::Goodbye {
                return seen;
            }
        }
    })
}

#[test]
fn a_1_0_session_does_not_send_what_1_1_added() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("v10.sock");
    let server = serve_1_0(UnixListener::bind(&path).expect("bind"));
    let b = backend(&address(&path));
    with_context(&b);
    let m = b
        .module_load_ptx(".version 7.0\n")
        .expect("cuModuleLoadData");
    let k = b.module_get_function(&m, "k").expect("cuModuleGetFunction");
    assert_eq!(b.function_params(&k).expect("layout"), Some(Vec::new()));
    let want = Status::ERROR_NOT_SUPPORTED;
    for e in [
        status_of(b.context_create(Device::new(0)), want, "cuCtxCreate"),
        status_of(b.module_get_global(&m, "g"), want, "cuModuleGetGlobal"),
        status_of(
            b.function_attribute(&k, FunctionAttribute::NumRegs),
            want,
            "cuFuncGetAttribute",
        ),
        status_of(
            b.function_set_attribute(&k, FunctionAttribute::MaxDynamicSharedSizeBytes, 0),
            want,
            "cuFuncSetAttribute",
        ),
    ] {
        let detail = e
            .as_cuda()
            .and_then(|c| c.detail.clone())
            .unwrap_or_default();
        assert!(detail.contains("needs protocol 1.1"), "{detail}");
    }
    drop(b);
    let seen = server.join().expect("the scripted server");
    assert_eq!(
        seen,
        [
            Opcode::Init,
            Opcode::PrimaryCtxRetain,
            Opcode::CtxSetCurrent,
            Opcode::ModuleLoadData,
            Opcode::ModuleGetFunction,
            Opcode::Goodbye
        ]
    );
}
