//! Benchmarks of the guest service on the simulator (not a test):
//!
//! - synchronous round trip of a small command (`Ping` of 8 bytes) over the Unix socket,
//!   p50/p99, against a raw Unix socket ping-pong of the same request and reply sizes;
//! - pipelined empty-kernel launches per second through the socket;
//! - host-to-device bandwidth: inline over the socket, from guest memory through the
//!   embedding API, and a plain `memcpy` of the same size.
//!
//! `cargo run --release -p cuda-guest --example service_bench [rounds]` (guests in
//! worker processes: `VMGPU_CUDA_WORKER=target/release/examples/cuda_worker`)

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

use cuda_guest::proto::{
    ClientHello, Decoded, Decoder, DevicePtr, Features, HostSource, KernelParams, Reply, ReplyBody,
    Request, RequestFrame, ServerHello, SgEntry, Status, StreamId,
};
use cuda_guest::service::{BackendChoice, BackgroundServer, Quota, Service, ServiceConfig};
use cuda_guest::sim::SimConfig;
use vm_memory::{GuestAddress, GuestMemoryMmap};

const EMPTY: &str =
    ".version 7.0\n.target sm_80\n.address_size 64\n\n.visible .entry empty()\n{\n\tret;\n}\n";

struct Client {
    s: UnixStream,
    dec: Decoder<Reply>,
    next: u64,
}

impl Client {
    fn connect(path: &std::path::Path) -> Client {
        let mut s = UnixStream::connect(path).expect("connect");
        s.write_all(&ClientHello::new(Features::ALL, 1 << 25).encode())
            .unwrap();
        let mut b = [0u8; 64];
        s.read_exact(&mut b).unwrap();
        let Ok(Decoded::Frame { frame: hello, .. }) = ServerHello::decode(&b) else {
            panic!("hello")
        };
        Client {
            s,
            dec: Decoder::new(hello.limits),
            next: 1,
        }
    }
    fn frame(&mut self, request: Request, no_reply: bool) -> Vec<u8> {
        let id = self.next;
        self.next += 1;
        RequestFrame {
            id,
            no_reply,
            request,
        }
        .to_bytes()
        .unwrap()
    }
    fn recv(&mut self) -> Reply {
        loop {
            if let Some(r) = self.dec.next_frame().expect("decode") {
                return r;
            }
            assert!(self.dec.read_from(&mut self.s).expect("read") > 0, "closed");
        }
    }
    fn call(&mut self, request: Request) -> Reply {
        let f = self.frame(request, false);
        self.s.write_all(&f).unwrap();
        let r = self.recv();
        assert_eq!(r.status, Status::SUCCESS, "{:?}", r.detail());
        r
    }
}

fn percentiles(mut v: Vec<Duration>) -> (Duration, Duration) {
    v.sort();
    (v[v.len() / 2], v[v.len() * 99 / 100])
}

fn main() {
    let rounds: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(20000);
    let config = ServiceConfig {
        quota: Quota {
            device_memory: 1 << 30,
            ..Quota::default()
        },
        // `VMGPU_CUDA_WORKER=target/release/examples/cuda_worker`: guests in worker
        // processes (process isolation, the relay's cost).
        isolation: match std::env::var_os("VMGPU_CUDA_WORKER") {
            Some(program) => cuda_guest::service::Isolation::Process {
                program: program.into(),
                args: vec!["sim".into()],
            },
            None => cuda_guest::service::Isolation::InProcess,
        },
        ..ServiceConfig::default()
    };
    println!("isolation: {:?}", config.isolation);
    let service = Service::new(BackendChoice::Simulator(SimConfig::default()), config).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bench.sock");
    let server = BackgroundServer::start(service.clone(), &path, "bench").unwrap();

    // 1. Synchronous round trips.
    let mut c = Client::connect(&path);
    let req_len = c.frame(Request::Ping { data: vec![0; 8] }, false).len();
    for _ in 0..1000 {
        c.call(Request::Ping { data: vec![1; 8] });
    }
    // A raw ping-pong of the same sizes, measured in blocks interleaved with the
    // service's, so both see the same load on the machine.
    let mut reply_len = c
        .call(Request::Ping { data: vec![1; 8] })
        .to_bytes()
        .unwrap()
        .len();
    let (mut a, mut b) = UnixStream::pair().unwrap();
    let echo = std::thread::spawn(move || {
        let mut req = vec![0u8; req_len];
        let rep = vec![0u8; reply_len];
        while b.read_exact(&mut req).is_ok() {
            if b.write_all(&rep).is_err() {
                break;
            }
        }
    });
    let req = vec![0u8; req_len];
    let mut rep = vec![0u8; reply_len];
    let mut times = Vec::with_capacity(rounds);
    let mut raw = Vec::with_capacity(rounds);
    let block = 500;
    for _ in 0..rounds.div_ceil(block) {
        for _ in 0..block {
            let f = c.frame(Request::Ping { data: vec![1; 8] }, false);
            let t = Instant::now();
            c.s.write_all(&f).unwrap();
            let r = c.recv();
            times.push(t.elapsed());
            reply_len = r.to_bytes().unwrap().len();
        }
        for _ in 0..block {
            let t = Instant::now();
            a.write_all(&req).unwrap();
            a.read_exact(&mut rep).unwrap();
            raw.push(t.elapsed());
        }
    }
    let (p50, p99) = percentiles(times);
    drop(a);
    echo.join().unwrap();
    let (r50, r99) = percentiles(raw);
    println!("sync round trip ({req_len}-byte Ping, {reply_len}-byte reply, {rounds} rounds):");
    println!(
        "  service   p50 {:>7.1} us  p99 {:>7.1} us",
        p50.as_secs_f64() * 1e6,
        p99.as_secs_f64() * 1e6
    );
    println!(
        "  raw socket p50 {:>7.1} us  p99 {:>7.1} us",
        r50.as_secs_f64() * 1e6,
        r99.as_secs_f64() * 1e6
    );
    println!(
        "  ratio     p50 {:.2}x p99 {:.2}x",
        p50.as_secs_f64() / r50.as_secs_f64(),
        p99.as_secs_f64() / r99.as_secs_f64()
    );

    // 2. Pipelined empty launches.
    c.call(Request::Init { flags: 0 });
    let ReplyBody::Context(ctx) = c.call(Request::PrimaryCtxRetain { device: 0 }).body else {
        panic!()
    };
    c.call(Request::CtxSetCurrent { ctx });
    let ReplyBody::Module(m) = c
        .call(Request::ModuleLoadData {
            image: EMPTY.as_bytes().to_vec(),
        })
        .body
    else {
        panic!()
    };
    let ReplyBody::Function(f) = c
        .call(Request::ModuleGetFunction {
            module: m,
            name: "empty".into(),
        })
        .body
    else {
        panic!()
    };
    let launches = 200_000usize;
    let launch = |c: &mut Client| {
        c.frame(
            Request::LaunchKernel {
                function: f.function,
                config: cuda_guest::driver::LaunchConfig {
                    grid: [1, 1, 1],
                    block: [1, 1, 1],
                    shared_bytes: 0,
                },
                stream: StreamId::DEFAULT,
                params: KernelParams::default(),
            },
            true,
        )
    };
    let mut batch = Vec::new();
    for _ in 0..launches {
        batch.extend(launch(&mut c));
    }
    let t = Instant::now();
    c.s.write_all(&batch).unwrap();
    c.call(Request::CtxSynchronize);
    let dt = t.elapsed();
    println!(
        "pipelined empty launches: {launches} in {:.3} s = {:.0} launches/s",
        dt.as_secs_f64(),
        launches as f64 / dt.as_secs_f64()
    );

    // 3. Host to device bandwidth.
    let size = 8usize << 20;
    let reps = 64;
    let ReplyBody::DevicePtr(d) = c.call(Request::MemAlloc { bytes: size as u64 }).body else {
        panic!()
    };
    let data = vec![0x5au8; size];
    let mut head = Vec::new();
    let t = Instant::now();
    for _ in 0..reps {
        head.clear();
        let id = c.next;
        c.next += 1;
        RequestFrame::encode_inline_htod_head(id, false, d, None, size, &mut head).unwrap();
        c.s.write_all(&head).unwrap();
        c.s.write_all(&data).unwrap();
        let r = c.recv();
        assert_eq!(r.status, Status::SUCCESS);
    }
    let inline = (size * reps) as f64 / t.elapsed().as_secs_f64() / 1e9;

    let mem = GuestMemoryMmap::<()>::from_ranges(&[(GuestAddress(0), size)]).unwrap();
    let mut g = service.session("bench-embed").unwrap();
    g.handshake(&ClientHello::new(Features::ALL, 1 << 25).encode());
    let mut id = 1u64;
    let mut call = |g: &mut cuda_guest::service::EmbeddedSession, r: Request| {
        let out = g.handle_frame(&RequestFrame::new(id, r).to_bytes().unwrap(), &mem);
        id += 1;
        let Ok(Decoded::Frame { frame, .. }) = <Reply as cuda_guest::proto::Message>::decode(
            &out,
            &cuda_guest::proto::Limits::default(),
        ) else {
            panic!()
        };
        assert_eq!(frame.status, Status::SUCCESS, "{:?}", frame.detail());
        frame.body
    };
    call(&mut g, Request::Init { flags: 0 });
    let ReplyBody::Context(ectx) = call(&mut g, Request::PrimaryCtxRetain { device: 0 }) else {
        panic!()
    };
    call(&mut g, Request::CtxSetCurrent { ctx: ectx });
    let ReplyBody::DevicePtr(ed) = call(&mut g, Request::MemAlloc { bytes: size as u64 }) else {
        panic!()
    };
    let sg = Request::MemcpyHtoD {
        dst: ed,
        src: HostSource::Guest(vec![SgEntry {
            gpa: 0,
            len: size as u64,
        }]),
        stream: None,
    };
    let t = Instant::now();
    for _ in 0..reps {
        call(&mut g, sg.clone());
    }
    let guest = (size * reps) as f64 / t.elapsed().as_secs_f64() / 1e9;

    let mut dst = vec![0u8; size];
    let t = Instant::now();
    for i in 0..reps {
        dst.copy_from_slice(&data);
        std::hint::black_box(&mut dst[i % size]);
    }
    let plain = (size * reps) as f64 / t.elapsed().as_secs_f64() / 1e9;
    println!("H2D {} MiB x {reps}: inline over the socket {inline:.2} GB/s, guest memory via embedding {guest:.2} GB/s, plain memcpy {plain:.2} GB/s", size >> 20);
    let _ = DevicePtr(0);
    drop(g);
    drop(c);
    server.stop().unwrap();
}
