//! The driver of one `service_stream` fuzz input, shared by the fuzz target
//! (`fuzz_targets/service_stream.rs`) and the test that replays its seeds
//! (`cuda-guest/tests/service_socket.rs`, `stream_fuzz_seeds`), both through
//! `#[path = ...] mod`.
//!
//! The service runs on its Unix socket ([`Env`]), on the simulator without an
//! instruction budget (a spinning kernel runs until its guest goes). An input is
//! `mode, n, n x split: u16, stream...`. Unless `mode` has [`MODE_RAW_HELLO`], the
//! driver first does the hello and a prologue of requests (`Init`, a current context, a
//! 4 KiB allocation, `vector_add` and the spinning `infinite_loop` loaded with their
//! functions, a stream and an event); then it writes the fuzzer's byte stream, cut at
//! the split points into separate writes, after replacing placeholders: an 8-byte
//! little-endian `0xf0f0_f0f0_f0f0_f0fK` is handle `K` of the prologue ([`PH_CTX`]...)
//! or the next request id ([`PH_ID`]). Then it ends as `mode & 3` says: drops the
//! connection, shuts down its sending side, reads until idle then drops, or sends
//! `Goodbye`. A reader thread takes everything the server sends.
//!
//! Checked: the server sends only well-formed reply frames that fit the negotiated
//! limits, in request order (ids increasing), each to a request of the stream awaiting
//! one, with its opcode; a closing notice is the last frame; a guest that shuts down its
//! sending side is closed at once (its spinning kernel cancelled); and once the guest is
//! gone the service holds no session, context or device memory within seconds.
#![allow(dead_code)]

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::Shutdown;
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use cuda_guest::proto::{
    ClientHello, Decoded, Decoder, DevicePtr, EventId, Features, FunctionId, HostDest,
    KernelParams, Limits, Message, ModuleId, Reply, ReplyBody, Request, RequestFrame, ServerHello,
    StreamId,
};
use cuda_guest::service::{BackendChoice, BackgroundServer, Quota, Service, ServiceConfig};
use cuda_guest::sim::SimConfig;

/// End: drop the connection right after the stream.
pub const MODE_DROP: u8 = 0;
/// End: shut down the sending side; the server must close at once.
pub const MODE_HALF_CLOSE: u8 = 1;
/// End: read until the server is quiet, then drop.
pub const MODE_READ_IDLE: u8 = 2;
/// End: send `Goodbye` and read until the server closes (or a while).
pub const MODE_GOODBYE: u8 = 3;
/// No hello or prologue from the driver: the stream starts with the client's bytes.
pub const MODE_RAW_HELLO: u8 = 4;
/// The driver's hello starts with the hybrid-vsock line `CONNECT 5\n`.
pub const MODE_CONNECT: u8 = 8;

/// Placeholders: the prologue's handles and addresses.
pub const PH_CTX: u8 = 0;
pub const PH_MODULE: u8 = 1;
pub const PH_FUNCTION: u8 = 2;
pub const PH_SPIN_MODULE: u8 = 3;
pub const PH_SPIN: u8 = 4;
pub const PH_STREAM: u8 = 5;
pub const PH_EVENT: u8 = 6;
pub const PH_DPTR: u8 = 7;
pub const PH_DPTR_LAST: u8 = 8;
pub const PH_DPTR_END: u8 = 9;
/// Placeholder: the next request id (one more at each use).
pub const PH_ID: u8 = 10;

/// Bytes of the allocation of the prologue.
pub const ALLOC: u64 = 4096;

const VECTOR_ADD: &str = include_str!("../../../fixtures/ptx/vector_add.nvrtc.ptx");
const INFINITE_LOOP: &str = include_str!("../../../fixtures/ptx/infinite_loop.nvrtc.ptx");

/// The 8 bytes that stand for placeholder `k`.
pub fn ph(k: u8) -> u64 {
    0xf0f0_f0f0_f0f0_f000 | u64::from(0xf0 | (k & 15))
}

/// The service on its socket.
#[derive(Debug)]
pub struct Env {
    /// The service (for its counters).
    pub service: Service,
    /// Its socket.
    pub path: PathBuf,
    _server: BackgroundServer,
}

impl Env {
    /// Serves on `path` (replaced if it exists).
    pub fn start(path: PathBuf) -> Env {
        let _ = std::fs::remove_file(&path);
        let sim = SimConfig {
            threads: 1,
            instruction_budget: 0,
            time_limit: Some(Duration::from_secs(60)),
            memory_limit: 1 << 30,
            // A fuzzed kernel's printf goes nowhere.
            output: cuda_guest::sim::Output(std::sync::Arc::new(|_, _| {})),
            devices: 1,
            engine: cuda_guest::sim::Engine::from_env(),
        };
        let config = ServiceConfig {
            quota: Quota {
                device_memory: 1 << 20,
                max_objects: 32,
                max_module_bytes: 64 << 10,
                launches_per_sec: None,
                launch_burst: None,
                ..Quota::default()
            },
            max_sessions: 4,
            handshake_timeout: Duration::from_secs(2),
            ..ServiceConfig::default()
        };
        let service =
            Service::new(BackendChoice::Simulator(sim), config).expect("the service starts");
        let server = BackgroundServer::start(service.clone(), &path, "fuzz").expect("it serves");
        Env {
            service,
            path,
            _server: server,
        }
    }

    /// Waits until the service holds nothing; panics after `limit`.
    fn wait_idle(&self, limit: Duration, what: &str) {
        let t = Instant::now();
        loop {
            let s = self.service.stats();
            if (s.sessions, s.contexts, s.device_bytes) == (0, 0, 0) {
                return;
            }
            if t.elapsed() > limit {
                panic!("{what}: the service still holds {s:?} after {limit:?}");
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}

/// What an input came to (for the seeds' test).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Summary {
    /// Reply frames received after the prologue (closing notices included).
    pub replies: usize,
    /// A closing notice came.
    pub notice: bool,
    /// The server closed the connection (rather than the driver).
    pub closed_by_server: bool,
    /// Time from the end of the stream to the service's release, in milliseconds.
    pub release_ms: u128,
}

/// One call of the prologue: the reply's body (it must succeed).
fn call(sock: &mut UnixStream, limits: &Limits, id: &mut u64, request: Request) -> ReplyBody {
    let what = format!("{request:?}");
    let f = RequestFrame::new(*id, request);
    *id += 1;
    sock.write_all(&f.to_bytes().expect("encodes"))
        .expect("prologue write");
    let mut head = [0u8; 4];
    sock.read_exact(&mut head).expect("prologue reply");
    let n = u32::from_le_bytes(head) as usize;
    assert!(
        (32..=limits.max_frame as usize).contains(&n),
        "{what}: reply length {n}"
    );
    let mut b = head.to_vec();
    b.resize(n, 0);
    sock.read_exact(&mut b[4..]).expect("prologue reply");
    let Ok(Decoded::Frame { frame, .. }) = Reply::decode(&b, limits) else {
        panic!("{what}: not a reply");
    };
    assert!(frame.status.is_success(), "{what}: {:?}", frame.detail());
    frame.body
}

/// Replaces the placeholders in `bytes`.
fn substitute(bytes: &[u8], handles: &[u64; 10], next_id: &mut u64) -> Vec<u8> {
    let mut out = bytes.to_vec();
    let mut i = 0;
    while i + 8 <= out.len() {
        if out[i] >= 0xf0 && out[i + 1..i + 8].iter().all(|b| *b == 0xf0) {
            let k = out[i] & 15;
            let v = match k {
                PH_ID => {
                    *next_id += 1;
                    *next_id - 1
                }
                k if usize::from(k) < handles.len() => handles[usize::from(k)],
                _ => {
                    i += 1;
                    continue;
                }
            };
            out[i..i + 8].copy_from_slice(&v.to_le_bytes());
            i += 8;
        } else {
            i += 1;
        }
    }
    out
}

/// Runs one input on `env` (which must have no other guest); panics when a check fails.
pub fn run(env: &Env, data: &[u8]) -> Summary {
    env.wait_idle(Duration::from_secs(5), "before the input");
    let Some((&mode, rest)) = data.split_first() else {
        return Summary::default();
    };
    let Some((&n, mut rest)) = rest.split_first() else {
        return Summary::default();
    };
    let mut splits = Vec::new();
    for _ in 0..n % 8 {
        if rest.len() < 2 {
            break;
        }
        splits.push(usize::from(u16::from_le_bytes([rest[0], rest[1]])));
        rest = &rest[2..];
    }
    let raw = mode & MODE_RAW_HELLO != 0;
    let mut sock = UnixStream::connect(&env.path).expect("connect");
    sock.set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    sock.set_write_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let mut limits = Limits::default();
    let mut handles = [0u64; 10];
    let mut id = 1u64;
    if !raw {
        if mode & MODE_CONNECT != 0 {
            sock.write_all(b"CONNECT 5\n").unwrap();
            let mut ok = [0u8; 5];
            sock.read_exact(&mut ok).unwrap();
            assert_eq!(&ok, b"OK 5\n", "the hybrid-vsock answer");
        }
        sock.write_all(&ClientHello::new(Features::ALL, 1 << 20).encode())
            .unwrap();
        let mut hello = [0u8; 64];
        sock.read_exact(&mut hello).expect("a server hello");
        let Ok(Decoded::Frame { frame: hello, .. }) = ServerHello::decode(&hello) else {
            panic!("not a server hello");
        };
        assert!(
            hello.status.is_success(),
            "hello refused: {:?}",
            hello.status
        );
        assert_eq!(
            hello.features,
            Features::PIPELINING,
            "a socket grants pipelining only"
        );
        limits = hello.limits;
        let s = &mut sock;
        call(s, &limits, &mut id, Request::Init { flags: 0 });
        let ReplyBody::Context(ctx) =
            call(s, &limits, &mut id, Request::PrimaryCtxRetain { device: 0 })
        else {
            panic!("retain")
        };
        call(s, &limits, &mut id, Request::CtxSetCurrent { ctx });
        let ReplyBody::DevicePtr(d) = call(s, &limits, &mut id, Request::MemAlloc { bytes: ALLOC })
        else {
            panic!("alloc")
        };
        let mut load = |text: &str, name: &str| -> (ModuleId, FunctionId) {
            let ReplyBody::Module(m) = call(
                s,
                &limits,
                &mut id,
                Request::ModuleLoadData {
                    image: text.as_bytes().to_vec(),
                },
            ) else {
                panic!("load")
            };
            let ReplyBody::Function(f) = call(
                s,
                &limits,
                &mut id,
                Request::ModuleGetFunction {
                    module: m,
                    name: name.into(),
                },
            ) else {
                panic!("function")
            };
            (m, f.function)
        };
        let (m1, f1) = load(VECTOR_ADD, "vector_add");
        let (m2, f2) = load(INFINITE_LOOP, "infinite_loop");
        let ReplyBody::Stream(st) = call(
            s,
            &limits,
            &mut id,
            Request::StreamCreate {
                flags: 1,
                priority: 0,
            },
        ) else {
            panic!("stream")
        };
        let ReplyBody::Event(ev) = call(s, &limits, &mut id, Request::EventCreate { flags: 0 })
        else {
            panic!("event")
        };
        handles = [
            ctx.0,
            m1.0,
            f1.0,
            m2.0,
            f2.0,
            st.0,
            ev.0,
            d.0,
            d.0 + ALLOC - 4,
            d.0 + ALLOC,
        ];
    }
    let first_id = id;
    let mut bytes = substitute(rest, &handles, &mut id);
    if mode & 3 == MODE_GOODBYE {
        // The last frame: a Goodbye (the stream before it may have left a frame
        // unfinished: the server then reads it otherwise, as the decoder below does).
        bytes.extend(
            RequestFrame::new(id, Request::Goodbye)
                .to_bytes()
                .expect("encodes"),
        );
    }

    // The requests of the stream as the server's decoder sees them: id to (opcode,
    // wants a reply).
    let mut ours: HashMap<u64, Vec<(u16, bool)>> = HashMap::new();
    if !raw {
        let mut dec = Decoder::<RequestFrame>::new(limits);
        let mut rest: &[u8] = &bytes;
        'feed: while !rest.is_empty() {
            let took = dec.feed(rest);
            rest = &rest[took..];
            loop {
                match dec.next_frame() {
                    Ok(Some(f)) => ours
                        .entry(f.id)
                        .or_default()
                        .push((f.request.opcode().code(), !f.no_reply)),
                    Ok(None) => break,
                    Err(e) => match e.answerable() {
                        Some(r) => ours
                            .entry(r.id)
                            .or_default()
                            .push((r.opcode.code(), !r.no_reply)),
                        None => break 'feed,
                    },
                }
            }
            if took == 0 {
                break;
            }
        }
    }

    // Everything the server sends from now on.
    let got = Arc::new(AtomicUsize::new(0));
    let reader = {
        let mut sock = sock.try_clone().expect("clone");
        let got = got.clone();
        std::thread::spawn(move || {
            let mut all = Vec::new();
            let mut buf = [0u8; 8192];
            let eof = loop {
                match sock.read(&mut buf) {
                    Ok(0) => break true,
                    Ok(n) => {
                        all.extend_from_slice(&buf[..n]);
                        got.fetch_add(n, Ordering::SeqCst);
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                    Err(_) => break false,
                }
            };
            (all, eof)
        })
    };
    let mut cuts: Vec<usize> = splits
        .iter()
        .map(|s| if bytes.is_empty() { 0 } else { s % bytes.len() })
        .collect();
    cuts.push(0);
    cuts.push(bytes.len());
    cuts.sort_unstable();
    cuts.dedup();
    for w in cuts.windows(2) {
        if sock.write_all(&bytes[w[0]..w[1]]).is_err() {
            // The server closed (a protocol violation): what it sent is checked below.
            break;
        }
    }
    let wait_reader = |limit: Duration| -> bool {
        let t = Instant::now();
        while !reader.is_finished() {
            if t.elapsed() > limit {
                return false;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        true
    };
    let ended = Instant::now();
    // Whether the server closed the connection by itself.
    let mut by_server = false;
    match mode & 3 {
        MODE_DROP => {}
        MODE_HALF_CLOSE => {
            let _ = sock.shutdown(Shutdown::Write);
            by_server = wait_reader(Duration::from_secs(3));
            assert!(
                by_server,
                "the server did not close a guest that shut down its sending side"
            );
        }
        MODE_READ_IDLE => {
            let mut last = got.load(Ordering::SeqCst);
            let mut quiet = Instant::now();
            while quiet.elapsed() < Duration::from_millis(10)
                && ended.elapsed() < Duration::from_millis(200)
                && !reader.is_finished()
            {
                std::thread::sleep(Duration::from_millis(2));
                let now = got.load(Ordering::SeqCst);
                if now != last {
                    last = now;
                    quiet = Instant::now();
                }
            }
            by_server = reader.is_finished();
        }
        _ => {
            // Goodbye waits for the guest's work (a spinning kernel): not forever here.
            by_server = wait_reader(Duration::from_millis(200));
        }
    }
    let _ = sock.shutdown(Shutdown::Both);
    let (received, _eof) = reader.join().expect("the reader");
    drop(sock);
    env.wait_idle(Duration::from_secs(3), "after the guest is gone");
    let release_ms = ended.elapsed().as_millis();

    let mut summary = Summary {
        closed_by_server: by_server,
        release_ms,
        ..Summary::default()
    };
    if raw {
        return summary;
    }
    // What the server sent: whole reply frames (the last one may be cut where the
    // driver closed first), in request order, each to a request of the stream that
    // awaits a reply; a closing notice last.
    let mut dec = Decoder::<Reply>::new(limits);
    let mut rest: &[u8] = &received;
    let mut last_id = first_id - 1;
    let mut after_notice = false;
    loop {
        let took = dec.feed(rest);
        rest = &rest[took..];
        loop {
            let r = match dec.next_frame() {
                Ok(Some(r)) => r,
                Ok(None) => break,
                Err(e) => panic!("the server sent a bad frame: {e}"),
            };
            assert!(!after_notice, "a frame after the closing notice: {r:?}");
            summary.replies += 1;
            if r.is_closing_notice() {
                assert!(!r.status.is_success(), "the closing notice has a status");
                after_notice = true;
                summary.notice = true;
                continue;
            }
            assert!(
                r.id > last_id,
                "replies in request order: {} after {last_id} ({r:?})",
                r.id
            );
            last_id = r.id;
            let sent = ours.get(&r.id).cloned().unwrap_or_default();
            assert!(
                sent.iter()
                    .any(|(op, wants)| *wants && *op == r.opcode.code()),
                "a reply to a request awaiting one, with its opcode: {r:?} (sent {sent:?})"
            );
            if let (Some(c), false) = (r.cause, r.status.is_success()) {
                assert!(c.id < r.id, "a cause is an earlier request: {r:?}");
            }
        }
        if took == 0 || rest.is_empty() {
            break;
        }
    }
    if by_server && mode & 3 != MODE_DROP {
        assert_eq!(dec.buffered(), 0, "the server closed after a whole frame");
    }
    summary
}

/// The frame of `request` with a placeholder id.
fn frame(request: Request, no_reply: bool) -> Vec<u8> {
    RequestFrame {
        id: ph(PH_ID),
        no_reply,
        request,
    }
    .to_bytes()
    .expect("a seed frame encodes")
}

fn input(mode: u8, splits: &[u16], frames: &[Vec<u8>]) -> Vec<u8> {
    let mut v = vec![mode, splits.len() as u8];
    for s in splits {
        v.extend_from_slice(&s.to_le_bytes());
    }
    for f in frames {
        v.extend_from_slice(f);
    }
    v
}

/// A hand-made seed: what it is for, its bytes, and what it must reach.
pub type Seed = (&'static str, Vec<u8>, fn(&Summary) -> bool);

/// The hand-made seeds.
pub fn seeds() -> Vec<Seed> {
    let d = DevicePtr(ph(PH_DPTR));
    let launch = |f: u8, stream: StreamId, args: &[&[u8]]| {
        frame(
            Request::LaunchKernel {
                function: FunctionId(ph(f)),
                config: cuda_guest::driver::LaunchConfig {
                    grid: [4, 1, 1],
                    block: [256, 1, 1],
                    shared_bytes: 0,
                },
                stream,
                params: KernelParams::pack(args),
            },
            true,
        )
    };
    let dp = ph(PH_DPTR).to_le_bytes();
    let spin = |stream| launch(PH_SPIN, stream, &[&dp, &dp]);
    let add = launch(
        PH_FUNCTION,
        StreamId::DEFAULT,
        &[&dp, &dp, &dp, &1024u32.to_le_bytes()],
    );
    let stream = StreamId(ph(PH_STREAM));
    let event = EventId(ph(PH_EVENT));
    vec![
        (
            "pipelined launch, sync, copy back, goodbye; frames cut across writes",
            input(
                MODE_GOODBYE,
                &[5, 37, 100, 101, 150],
                &[
                    add.clone(),
                    frame(Request::CtxSynchronize, false),
                    frame(
                        Request::MemcpyDtoH {
                            src: d,
                            bytes: 64,
                            dst: HostDest::Inline,
                            stream: None,
                        },
                        false,
                    ),
                    frame(Request::MemGetInfo, false),
                ],
            ),
            // Goodbye waits (here 200 ms) for the launch to end: its reply may be cut.
            |s| s.replies >= 3 && !s.notice,
        ),
        (
            "a spinning kernel, a sync waiting on it, then the guest shuts down its sending side",
            input(
                MODE_HALF_CLOSE,
                &[],
                &[
                    spin(StreamId::DEFAULT),
                    frame(Request::CtxSynchronize, false),
                ],
            ),
            |s| s.closed_by_server && s.replies == 0,
        ),
        (
            "a spinning kernel on a stream, a query, and the guest drops the connection",
            input(
                MODE_DROP,
                &[3],
                &[
                    spin(stream),
                    frame(Request::StreamQuery { stream }, false),
                    frame(Request::StreamSynchronize { stream }, false),
                ],
            ),
            |s| !s.closed_by_server,
        ),
        (
            "small pieces: pipelined memset and event record on a stream, synchronised",
            input(
                MODE_READ_IDLE,
                &[1, 2, 3, 17, 18, 40, 41],
                &[
                    frame(
                        Request::Ping {
                            data: vec![1, 2, 3],
                        },
                        false,
                    ),
                    frame(Request::DeviceGetCount, false),
                    frame(
                        Request::Memset {
                            dst: d,
                            value: 7,
                            count: ALLOC / 4,
                            width: cuda_guest::proto::MemsetWidth::W32,
                            stream: Some(stream),
                        },
                        true,
                    ),
                    frame(Request::EventRecord { event, stream }, true),
                    frame(Request::EventSynchronize { event }, false),
                    // One past the allocation: a deferred error, reported at the sync.
                    frame(
                        Request::Memset {
                            dst: DevicePtr(ph(PH_DPTR_END)),
                            value: 7,
                            count: 1,
                            width: cuda_guest::proto::MemsetWidth::W32,
                            stream: Some(stream),
                        },
                        true,
                    ),
                    frame(Request::StreamSynchronize { stream }, false),
                    frame(Request::CtxSynchronize, false),
                ],
            ),
            // Read until quiet: how many replies come first depends on the machine.
            |s| !s.notice && s.replies <= 5,
        ),
        (
            "raw: the hybrid-vsock line, the hello and two requests, then a half-close",
            input(
                MODE_HALF_CLOSE | MODE_RAW_HELLO,
                &[4, 30],
                &[
                    b"CONNECT 5\n".to_vec(),
                    ClientHello::new(Features::ALL, 1 << 20).encode().to_vec(),
                    frame(Request::Init { flags: 0 }, false),
                    frame(Request::DriverGetVersion, false),
                ],
            ),
            |s| s.closed_by_server,
        ),
        (
            "a frame shorter than its header: the closing notice",
            input(
                MODE_GOODBYE,
                &[],
                &[
                    frame(Request::DeviceGetCount, false),
                    vec![8, 0, 0, 0, 9, 0, 0, 0, 0, 0, 0, 0, 1, 1, 0, 0],
                ],
            ),
            |s| s.notice && s.replies == 2 && s.closed_by_server,
        ),
        (
            "a malformed payload with a repeated id, then more requests: the closing notice last",
            input(
                MODE_GOODBYE,
                &[],
                &[
                    frame(Request::DeviceGetCount, false),
                    // MemAlloc with a short payload and id 1 (the prologue's first).
                    vec![20, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 1, 4, 0, 0, 0, 0, 0, 0],
                    frame(Request::DeviceGetCount, false),
                ],
            ),
            |s| s.notice && s.closed_by_server,
        ),
        (
            "a frame cut in the middle, then a half-close",
            input(
                MODE_HALF_CLOSE,
                &[],
                &[frame(Request::CtxSynchronize, false), add[..30].to_vec()],
            ),
            // The sync may be dropped with the guest: it is gone.
            |s| s.closed_by_server && s.replies <= 1,
        ),
    ]
}
