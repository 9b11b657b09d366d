//! A small test client over `cuda_guest::proto` (frames over a Unix socket) and a
//! server on a background tokio runtime.
#![allow(dead_code)]

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use cuda_guest::proto::{
    ClientHello, ContextId, Decoded, Decoder, DevicePtr, Features, FunctionId, FunctionInfo,
    HostDest, HostSource, KernelParams, ModuleId, Reply, ReplyBody, Request, RequestFrame,
    ServerHello, Status, StreamId,
};
use cuda_guest::service::{
    BackendChoice, BackgroundServer, Service, ServiceConfig, ShutdownSignal,
};
use cuda_guest::sim::SimConfig;

pub const VECTOR_ADD: &str = include_str!("../../../fixtures/ptx/vector_add.nvrtc.ptx");
pub const EMPTY_KERNEL: &str =
    ".version 7.0\n.target sm_80\n.address_size 64\n\n.visible .entry empty()\n{\n\tret;\n}\n";

/// A server on its own runtime thread.
pub struct Server {
    pub service: Service,
    pub path: PathBuf,
    pub shutdown: ShutdownSignal,
    server: BackgroundServer,
    _dir: tempfile::TempDir,
}

impl Server {
    pub fn start(config: ServiceConfig) -> Server {
        Self::start_with(BackendChoice::Simulator(SimConfig::default()), config)
    }

    pub fn start_with(backend: BackendChoice, config: ServiceConfig) -> Server {
        let _ = env_logger::builder().is_test(true).try_init();
        let service = Service::new(backend, config).expect("service");
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("vmgpu.sock");
        let server =
            BackgroundServer::start(service.clone(), &path, "test").expect("the server starts");
        Server {
            service,
            path,
            shutdown: server.shutdown_signal().clone(),
            server,
            _dir: dir,
        }
    }

    pub fn client(&self) -> Client {
        Client::connect(&self.path)
    }

    /// Waits until the service holds no session, context or device memory.
    pub fn wait_idle(&self) {
        let t = Instant::now();
        loop {
            let s = self.service.stats();
            if s.sessions == 0 && s.contexts == 0 && s.device_bytes == 0 {
                return;
            }
            assert!(
                t.elapsed() < Duration::from_secs(10),
                "service not idle: {s:?}"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    pub fn stop(self) {
        self.server.stop().expect("serve");
    }
}

pub struct Client {
    pub s: UnixStream,
    dec: Decoder<Reply>,
    next: u64,
    pub hello: ServerHello,
}

pub fn hello_over(s: &mut UnixStream) -> ServerHello {
    s.write_all(&ClientHello::new(Features::ALL, 1 << 24).encode())
        .unwrap();
    let mut b = [0u8; 64];
    s.read_exact(&mut b).unwrap();
    match ServerHello::decode(&b).expect("server hello") {
        Decoded::Frame { frame, .. } => frame,
        Decoded::NeedMore(_) => unreachable!(),
    }
}

impl Client {
    pub fn connect(path: &Path) -> Client {
        let mut s = UnixStream::connect(path).expect("connect");
        s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        let hello = hello_over(&mut s);
        let mut c = Client::over(s, hello);
        // As a program's cuInit does (the server refuses other calls before it).
        c.ok(Request::Init { flags: 0 });
        c
    }

    pub fn over(s: UnixStream, hello: ServerHello) -> Client {
        Client {
            s,
            dec: Decoder::new(hello.limits),
            next: 1,
            hello,
        }
    }

    /// The next request id (ids increase within a session), for a frame made by hand.
    pub fn take_id(&mut self) -> u64 {
        let id = self.next;
        self.next += 1;
        id
    }

    pub fn send(&mut self, request: Request, no_reply: bool) -> u64 {
        let id = self.take_id();
        let f = RequestFrame {
            id,
            no_reply,
            request,
        };
        self.s.write_all(&f.to_bytes().unwrap()).unwrap();
        id
    }

    pub fn recv(&mut self) -> Reply {
        loop {
            if let Some(r) = self.dec.next_frame().expect("reply decodes") {
                return r;
            }
            let n = self.dec.read_from(&mut self.s).expect("read");
            assert!(n > 0, "server closed the connection");
        }
    }

    /// Reads until the server closes; returns the replies read.
    pub fn recv_until_closed(&mut self) -> Vec<Reply> {
        let mut out = Vec::new();
        loop {
            while let Ok(Some(r)) = self.dec.next_frame() {
                out.push(r);
            }
            match self.dec.read_from(&mut self.s) {
                Ok(0) | Err(_) => return out,
                Ok(_) => {}
            }
        }
    }

    pub fn call(&mut self, request: Request) -> Reply {
        let id = self.send(request, false);
        let r = self.recv();
        assert_eq!(r.id, id, "replies in order");
        r
    }

    pub fn ok(&mut self, request: Request) -> ReplyBody {
        let what = format!("{:?}", request.opcode());
        let r = self.call(request);
        assert_eq!(r.status, Status::SUCCESS, "{what}: {:?}", r.detail());
        r.body
    }

    pub fn status(&mut self, request: Request) -> Status {
        self.call(request).status
    }

    pub fn context(&mut self) -> ContextId {
        let ReplyBody::Context(c) = self.ok(Request::PrimaryCtxRetain { device: 0 }) else {
            panic!()
        };
        self.ok(Request::CtxSetCurrent { ctx: c });
        c
    }

    pub fn alloc(&mut self, bytes: u64) -> DevicePtr {
        match self.ok(Request::MemAlloc { bytes }) {
            ReplyBody::DevicePtr(d) => d,
            b => panic!("{b:?}"),
        }
    }

    pub fn htod(&mut self, dst: DevicePtr, data: &[u8]) {
        self.ok(Request::MemcpyHtoD {
            dst,
            src: HostSource::Inline(data.to_vec()),
            stream: None,
        });
    }

    pub fn dtoh(&mut self, src: DevicePtr, bytes: u64) -> Vec<u8> {
        match self.ok(Request::MemcpyDtoH {
            src,
            bytes,
            dst: HostDest::Inline,
            stream: None,
        }) {
            ReplyBody::Data(d) => d,
            b => panic!("{b:?}"),
        }
    }

    pub fn load(&mut self, ptx: &str) -> ModuleId {
        match self.ok(Request::ModuleLoadData {
            image: ptx.as_bytes().to_vec(),
        }) {
            ReplyBody::Module(m) => m,
            b => panic!("{b:?}"),
        }
    }

    pub fn function(&mut self, module: ModuleId, name: &str) -> FunctionInfo {
        match self.ok(Request::ModuleGetFunction {
            module,
            name: name.into(),
        }) {
            ReplyBody::Function(f) => f,
            b => panic!("{b:?}"),
        }
    }

    pub fn mem_info(&mut self) -> (u64, u64) {
        match self.ok(Request::MemGetInfo) {
            ReplyBody::MemInfo { free, total } => (free, total),
            b => panic!("{b:?}"),
        }
    }
}

pub fn launch_req(
    f: &FunctionInfo,
    blocks: u32,
    threads: u32,
    stream: StreamId,
    args: &[&[u8]],
) -> Request {
    let params = match &f.params {
        Some(layout) => KernelParams::with_layout(layout, args).expect("layout"),
        None => KernelParams::pack(args),
    };
    Request::LaunchKernel {
        function: f.function,
        config: cuda_guest::driver::LaunchConfig {
            grid: [blocks, 1, 1],
            block: [threads, 1, 1],
            shared_bytes: 0,
        },
        stream,
        params,
    }
}

pub fn f32_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

pub fn f32s(b: &[u8]) -> Vec<f32> {
    b.chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

/// vector_add of `n` elements on this client's session; returns c.
pub fn vector_add(c: &mut Client, f: &FunctionInfo, a: &[f32], b: &[f32]) -> Vec<f32> {
    let n = a.len() as u64;
    let (da, db, dc) = (c.alloc(n * 4), c.alloc(n * 4), c.alloc(n * 4));
    c.htod(da, &f32_bytes(a));
    c.htod(db, &f32_bytes(b));
    let id = c.send(
        launch_req(
            f,
            (n as u32).div_ceil(128),
            128,
            StreamId::DEFAULT,
            &[
                &da.0.to_le_bytes(),
                &db.0.to_le_bytes(),
                &dc.0.to_le_bytes(),
                &(n as u32).to_le_bytes(),
            ],
        ),
        true,
    );
    assert!(id > 0);
    let out = f32s(&c.dtoh(dc, n * 4));
    for d in [da, db, dc] {
        c.ok(Request::MemFree { ptr: d });
    }
    out
}

pub fn unused(_: FunctionId) {}

/// The worker program of process isolation: `$VMGPU_CUDA_WORKER`, else the
/// `cuda_worker` example built beside this test (`target/<profile>/examples/`), else a
/// `cuda_worker` in this test executable's directory.
pub fn worker_program() -> PathBuf {
    if let Some(p) = std::env::var_os("VMGPU_CUDA_WORKER") {
        return PathBuf::from(p);
    }
    let exe = std::env::current_exe().expect("current exe");
    let dir = exe.parent().expect("exe dir");
    let beside = dir.join("cuda_worker");
    if beside.is_file() {
        return beside;
    }
    let examples = dir.join("../examples/cuda_worker");
    assert!(
        examples.is_file(),
        "no worker program: set VMGPU_CUDA_WORKER or build the cuda_worker example ({})",
        examples.display()
    );
    examples
}

/// Process isolation with the `cuda_worker` program on `backend` (`sim`, `native`).
pub fn process_isolation(backend: &str) -> cuda_guest::service::Isolation {
    cuda_guest::service::Isolation::Process {
        program: worker_program(),
        args: vec![backend.into()],
    }
}

/// Children of this process that are zombies (exited, not reaped).
pub fn zombie_children() -> Vec<u32> {
    let me = std::process::id();
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Ok(stat) = std::fs::read_to_string(e.path().join("stat")) else {
            continue;
        };
        // pid (comm) state ppid ...
        let Some(rest) = stat.rsplit_once(") ").map(|(_, r)| r) else {
            continue;
        };
        let mut f = rest.split(' ');
        let (state, ppid) = (f.next(), f.next().and_then(|p| p.parse::<u32>().ok()));
        if state == Some("Z") && ppid == Some(me) {
            if let Some(pid) = e.file_name().to_str().and_then(|p| p.parse().ok()) {
                out.push(pid);
            }
        }
    }
    out
}

/// Waits (up to 5 s) until this process has no zombie child.
pub fn assert_no_zombies() {
    let t = Instant::now();
    loop {
        let z = zombie_children();
        if z.is_empty() {
            return;
        }
        assert!(
            t.elapsed() < Duration::from_secs(5),
            "zombie children: {z:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Waits until the service has no worker process alive.
pub fn wait_no_workers(service: &Service) {
    let t = Instant::now();
    while service.stats().workers != 0 || !service.worker_pids().is_empty() {
        assert!(
            t.elapsed() < Duration::from_secs(20),
            "workers alive: {:?}",
            service.worker_pids()
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}
