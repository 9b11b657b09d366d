//! The embedding API: a VMM's own device hands whole frames and its guest memory
//! (`vm-memory`); bulk data as guest-physical scatter-gather lists.

mod service_support;

use cuda_guest::proto::{
    ClientHello, Decoded, DevicePtr, Features, HostDest, HostSource, Message, Reply, ReplyBody,
    Request, RequestFrame, ServerHello, SgEntry, Status, StreamId,
};
use cuda_guest::service::{BackendChoice, EmbeddedSession, Service, ServiceConfig};
use cuda_guest::sim::SimConfig;
use service_support::*;
use vm_memory::{Bytes, GuestAddress, GuestMemoryMmap};

struct Guest {
    s: EmbeddedSession,
    mem: GuestMemoryMmap,
    next: u64,
    limits: cuda_guest::proto::Limits,
}

impl Guest {
    fn new(svc: &Service, name: &str, mem: GuestMemoryMmap) -> Guest {
        let mut s = svc.session(name).unwrap();
        let hello = s.handshake(&ClientHello::new(Features::ALL, 1 << 24).encode());
        let Decoded::Frame { frame: hello, .. } = ServerHello::decode(&hello).unwrap() else {
            panic!()
        };
        assert!(hello.features.contains(Features::SCATTER_GATHER));
        let mut g = Guest {
            s,
            mem,
            next: 1,
            limits: hello.limits,
        };
        g.ok(Request::Init { flags: 0 });
        g
    }

    fn send(&mut self, request: Request, no_reply: bool) -> Option<Reply> {
        let id = self.next;
        self.next += 1;
        let bytes = RequestFrame {
            id,
            no_reply,
            request,
        }
        .to_bytes()
        .unwrap();
        let out = self.s.handle_frame(&bytes, &self.mem);
        if out.is_empty() {
            return None;
        }
        let Decoded::Frame { frame, len } = Reply::decode(&out, &self.limits).unwrap() else {
            panic!("a whole reply")
        };
        assert_eq!(len, out.len());
        assert_eq!(frame.id, id);
        Some(frame)
    }

    fn call(&mut self, request: Request) -> Reply {
        self.send(request, false).expect("a reply")
    }

    fn ok(&mut self, request: Request) -> ReplyBody {
        let r = self.call(request);
        assert_eq!(r.status, Status::SUCCESS, "{:?}", r.detail());
        r.body
    }
}

fn memory() -> GuestMemoryMmap {
    // Two adjacent regions (a copy may cross from one to the other) and one far away.
    GuestMemoryMmap::from_ranges(&[
        (GuestAddress(0), 0x10000),
        (GuestAddress(0x10000), 0x10000),
        (GuestAddress(0x100000), 0x10000),
    ])
    .unwrap()
}

#[test]
fn scatter_gather_copies_through_guest_memory() {
    let svc = Service::new(
        BackendChoice::Simulator(SimConfig::default()),
        ServiceConfig::default(),
    )
    .unwrap();
    let mut g = Guest::new(&svc, "vm-embed", memory());
    let ReplyBody::Context(ctx) = g.ok(Request::PrimaryCtxRetain { device: 0 }) else {
        panic!()
    };
    g.ok(Request::CtxSetCurrent { ctx });
    let ReplyBody::DevicePtr(d) = g.ok(Request::MemAlloc { bytes: 0x3000 }) else {
        panic!()
    };

    // Guest data: 0x2000 bytes across the region boundary at 0x10000, then 0x1000 far.
    let a: Vec<u8> = (0..0x2000u32).map(|i| (i * 7 % 251) as u8).collect();
    let b: Vec<u8> = (0..0x1000u32).map(|i| (i * 13 % 241) as u8).collect();
    g.mem.write_slice(&a, GuestAddress(0xF000)).unwrap();
    g.mem.write_slice(&b, GuestAddress(0x100800)).unwrap();
    let entries = vec![
        SgEntry {
            gpa: 0xF000,
            len: 0x2000,
        },
        SgEntry {
            gpa: 0x100800,
            len: 0x1000,
        },
    ];
    g.ok(Request::MemcpyHtoD {
        dst: d,
        src: HostSource::Guest(entries.clone()),
        stream: None,
    });
    let ReplyBody::Data(back) = g.ok(Request::MemcpyDtoH {
        src: d,
        bytes: 0x3000,
        dst: HostDest::Inline,
        stream: None,
    }) else {
        panic!()
    };
    assert_eq!(&back[..0x2000], &a[..]);
    assert_eq!(&back[0x2000..], &b[..]);

    // Device to guest memory, scattered elsewhere.
    let out = vec![
        SgEntry {
            gpa: 0x1_8000,
            len: 0x1000,
        },
        SgEntry {
            gpa: 0x100,
            len: 0x2000,
        },
    ];
    let ReplyBody::Data(empty) = g.ok(Request::MemcpyDtoH {
        src: d,
        bytes: 0x3000,
        dst: HostDest::Guest(out),
        stream: None,
    }) else {
        panic!()
    };
    assert!(empty.is_empty());
    let mut got = vec![0u8; 0x1000];
    g.mem.read_slice(&mut got, GuestAddress(0x1_8000)).unwrap();
    assert_eq!(&got[..], &a[..0x1000]);
    let mut got = vec![0u8; 0x2000];
    g.mem.read_slice(&mut got, GuestAddress(0x100)).unwrap();
    assert_eq!(&got[..0x1000], &a[0x1000..]);
    assert_eq!(&got[0x1000..], &b[..]);

    // Asynchronous, on a stream: read when the stream reaches it.
    let ReplyBody::Stream(s) = g.ok(Request::StreamCreate {
        flags: 1,
        priority: 0,
    }) else {
        panic!()
    };
    g.mem
        .write_slice(&[0xee; 0x100], GuestAddress(0x4000))
        .unwrap();
    assert!(g
        .send(
            Request::MemcpyHtoD {
                dst: d,
                src: HostSource::Guest(vec![SgEntry {
                    gpa: 0x4000,
                    len: 0x100
                }]),
                stream: Some(s)
            },
            true
        )
        .is_none());
    g.ok(Request::StreamSynchronize { stream: s });
    let ReplyBody::Data(back) = g.ok(Request::MemcpyDtoH {
        src: d,
        bytes: 0x100,
        dst: HostDest::Inline,
        stream: Some(s),
    }) else {
        panic!()
    };
    assert_eq!(back, vec![0xee; 0x100]);

    // Out of guest memory: in the hole, past the end, partly outside.
    for bad in [
        SgEntry {
            gpa: 0x20000,
            len: 0x10,
        },
        SgEntry {
            gpa: 0x110000,
            len: 0x10,
        },
        SgEntry {
            gpa: 0x10F000,
            len: 0x2000,
        },
    ] {
        let r = g.call(Request::MemcpyHtoD {
            dst: d,
            src: HostSource::Guest(vec![bad]),
            stream: None,
        });
        assert_eq!(r.status, Status::ERROR_INVALID_VALUE, "{bad:?}");
        let r = g.call(Request::MemcpyDtoH {
            src: d,
            bytes: bad.len,
            dst: HostDest::Guest(vec![bad]),
            stream: None,
        });
        assert_eq!(r.status, Status::ERROR_INVALID_VALUE, "{bad:?}");
    }
    // A device range beyond the allocation, with good guest memory.
    let r = g.call(Request::MemcpyHtoD {
        dst: DevicePtr(d.0 + 0x2FF0),
        src: HostSource::Guest(vec![SgEntry { gpa: 0, len: 0x20 }]),
        stream: None,
    });
    assert_eq!(r.status, Status::ERROR_INVALID_VALUE);

    // A kernel through the embedding API.
    let ReplyBody::Module(m) = g.ok(Request::ModuleLoadData {
        image: VECTOR_ADD.as_bytes().to_vec(),
    }) else {
        panic!()
    };
    let ReplyBody::Function(f) = g.ok(Request::ModuleGetFunction {
        module: m,
        name: "vector_add".into(),
    }) else {
        panic!()
    };
    let n = 512u32;
    let x: Vec<f32> = (0..n).map(|i| i as f32).collect();
    let y: Vec<f32> = (0..n).map(|i| 2.0 * i as f32).collect();
    g.mem
        .write_slice(&f32_bytes(&x), GuestAddress(0x100000))
        .unwrap();
    g.mem
        .write_slice(&f32_bytes(&y), GuestAddress(0x100800))
        .unwrap();
    let ReplyBody::DevicePtr(dx) = g.ok(Request::MemAlloc { bytes: 2048 }) else {
        panic!()
    };
    let ReplyBody::DevicePtr(dy) = g.ok(Request::MemAlloc { bytes: 2048 }) else {
        panic!()
    };
    g.ok(Request::MemcpyHtoD {
        dst: dx,
        src: HostSource::Guest(vec![SgEntry {
            gpa: 0x100000,
            len: 2048,
        }]),
        stream: None,
    });
    g.ok(Request::MemcpyHtoD {
        dst: dy,
        src: HostSource::Guest(vec![SgEntry {
            gpa: 0x100800,
            len: 2048,
        }]),
        stream: None,
    });
    g.send(
        launch_req(
            &f,
            4,
            128,
            StreamId::DEFAULT,
            &[
                &dx.0.to_le_bytes(),
                &dy.0.to_le_bytes(),
                &dy.0.to_le_bytes(),
                &n.to_le_bytes(),
            ],
        ),
        true,
    );
    g.ok(Request::MemcpyDtoH {
        src: dy,
        bytes: 2048,
        dst: HostDest::Guest(vec![SgEntry {
            gpa: 0x101000,
            len: 2048,
        }]),
        stream: None,
    });
    let mut res = vec![0u8; 2048];
    g.mem.read_slice(&mut res, GuestAddress(0x101000)).unwrap();
    let res = f32s(&res);
    for (i, v) in res.iter().enumerate() {
        assert_eq!(*v, 3.0 * i as f32, "element {i}");
    }
    assert!(svc.stats().device_bytes > 0);
    drop(g);
    let s = svc.stats();
    assert_eq!((s.sessions, s.contexts, s.device_bytes), (0, 0, 0));
}

#[test]
fn embedded_protocol_violations_end_the_session() {
    let svc = Service::new(
        BackendChoice::Simulator(SimConfig::default()),
        ServiceConfig::default(),
    )
    .unwrap();
    let mut g = Guest::new(&svc, "vm-bad", memory());
    let ReplyBody::Context(ctx) = g.ok(Request::PrimaryCtxRetain { device: 0 }) else {
        panic!()
    };
    g.ok(Request::CtxSetCurrent { ctx });
    g.ok(Request::MemAlloc { bytes: 4096 });
    // Two frames in one buffer is not one frame.
    let mut two = RequestFrame::new(50, Request::CtxSynchronize)
        .to_bytes()
        .unwrap();
    two.extend(
        RequestFrame::new(51, Request::CtxSynchronize)
            .to_bytes()
            .unwrap(),
    );
    let out = g.s.handle_frame(&two, &g.mem);
    let Decoded::Frame { frame, .. } = Reply::decode(&out, &g.limits).unwrap() else {
        panic!()
    };
    assert!(frame.is_closing_notice());
    assert_eq!(svc.stats().device_bytes, 0, "released at once");
    let out = g.s.handle_frame(
        &RequestFrame::new(52, Request::DeviceGetCount)
            .to_bytes()
            .unwrap(),
        &g.mem,
    );
    let Decoded::Frame { frame, .. } = Reply::decode(&out, &g.limits).unwrap() else {
        panic!()
    };
    assert!(frame.is_closing_notice());
    // A bad hello is refused.
    let mut s = svc.session("vm-nohello").unwrap();
    let hello = s.handshake(b"not a hello at all......");
    assert!(ServerHello::decode(&hello).is_err());
}

#[test]
fn sockets_do_not_reach_guest_memory() {
    let server = Server::start(ServiceConfig::default());
    let mut c = server.client();
    assert!(!c.hello.features.contains(Features::SCATTER_GATHER));
    c.context();
    let d = c.alloc(64);
    let r = c.call(Request::MemcpyHtoD {
        dst: d,
        src: HostSource::Guest(vec![SgEntry { gpa: 0, len: 64 }]),
        stream: None,
    });
    assert_eq!(r.status, Status::ERROR_NOT_SUPPORTED);
}

#[path = "../fuzz-proto/harness/dispatch.rs"]
mod dispatch;

/// The seeds' header: full setup (hello, `Init`, a current context), 1 MiB frames,
/// scatter-gather granted; `fill` seeds the guest RAM's bytes.
fn seed(cfg: u8, records: &[[u8; dispatch::RECORD]]) -> Vec<u8> {
    let mut v = vec![cfg, 0x11, 0, 0];
    for r in records {
        v.extend_from_slice(r);
    }
    v
}

/// A hand-made seed: what it is for, its bytes, and what it must reach.
type DispatchSeed = (&'static str, Vec<u8>, fn(&dispatch::Summary) -> bool);

/// The hand-made seeds of the `service_dispatch` fuzz target (`cuda-guest/fuzz-proto`,
/// records of `harness/dispatch.rs`), each with what it must reach.
fn dispatch_seeds() -> Vec<DispatchSeed> {
    use dispatch::*;
    let alloc_4k = rec(OP_ALLOC, &[2]);
    // A synchronous copy of a whole live allocation (`sel` picks it).
    let htod_all = |sel: u8, seed: u8| rec(OP_HTOD, &[0, 0, sel, 0, 0, 0, 0, 0, 0, seed]);
    let dtoh_all = |sel: u8| rec(OP_DTOH, &[0, 0, sel, 0, 0, 0, 0, 0, 0]);
    let zero_all = |sel: u8| rec(OP_MEMSET, &[0, 0, sel, 0, 0, 0, 2, 0, 0, 0]);
    let load = |fixture: u8| rec(OP_LOAD, &[fixture]);
    let function = |module: u8| rec(OP_GET_FUNCTION, &[module, 0, 0]);
    // A launch of the first live function, grid 1, block 32, on the default stream,
    // pointers to the live allocations in turn (`pa` 0xe0: their ends), 32-bit values
    // INTS[(pb + i) & 15].
    let launch = |pa: u8, pb: u8| rec(OP_LAUNCH, &[0, 0, 0, 0, 0, 0, 0, 0, 0, pa, pb]);
    let sync = rec(OP_CTX_SYNC, &[]);
    vec![
        (
            "a launch that computes: vector_add over written inputs, read back",
            seed(
                0,
                &[
                    alloc_4k,
                    alloc_4k,
                    alloc_4k,
                    htod_all(0, 5),
                    htod_all(1, 9),
                    dtoh_all(0),
                    load(0),
                    function(0),
                    launch(0, 15),
                    sync,
                    dtoh_all(2),
                    rec(OP_MEMINFO, &[]),
                    rec(OP_GOODBYE, &[]),
                ],
            ),
            |s| s.launches == 1 && s.functions == 1 && s.compared > 0 && s.sticky == 0 && s.closed,
        ),
        (
            "a spinning kernel ends with a sticky timeout; release, retain, go on",
            seed(
                0,
                &[
                    alloc_4k,
                    alloc_4k,
                    zero_all(0),
                    load(2),
                    function(0),
                    launch(0, 0),
                    sync,
                    rec(OP_ALLOC, &[2]),
                    rec(OP_RELEASE, &[]),
                    rec(OP_RETAIN, &[]),
                    rec(OP_SET_CURRENT, &[]),
                    alloc_4k,
                    rec(OP_MEMINFO, &[]),
                ],
            ),
            |s| s.sticky == 1 && s.launches == 1 && !s.closed,
        ),
        (
            "an out-of-bounds kernel faults (illegal address), reported at the sync",
            seed(
                0,
                &[
                    alloc_4k,
                    load(3),
                    function(0),
                    // oob_write(out = the buffer's end, n = 1).
                    launch(0xe0, 0),
                    rec(OP_STREAM_SYNC, &[0, 0]),
                    rec(OP_MEMINFO, &[]),
                ],
            ),
            |s| s.sticky == 1,
        ),
        (
            "quotas: memory by allocations and module variables, then objects",
            seed(0, &{
                let mut v = vec![
                    rec(OP_ALLOC, &[4]),
                    rec(OP_ALLOC, &[3]),
                    rec(OP_MEMINFO, &[]),
                    // A module with a 4096-byte .global: over the quota while it is full.
                    rec(OP_LOAD_GLOBALS, &[1, 3, 1, 0]),
                    rec(OP_FREE, &[0, 0]),
                    rec(OP_LOAD_GLOBALS, &[1, 3, 1, 0]),
                    rec(OP_MEMINFO, &[]),
                    rec(OP_GET_FUNCTION, &[0, 0, 0]),
                    rec(OP_GET_FUNCTION, &[0, 0, 0]),
                ];
                v.extend(std::iter::repeat_n(rec(OP_STREAM_CREATE, &[1]), 31));
                v.push(rec(OP_EVENT_CREATE, &[0]));
                v.push(rec(OP_MEMINFO, &[]));
                v
            }),
            |s| s.out_of_memory >= 3 && s.modules == 1 && s.functions == 1,
        ),
        (
            "unload: a pipelined launch of an unloaded module's function is reported at the sync",
            seed(
                0,
                &[
                    alloc_4k,
                    alloc_4k,
                    alloc_4k,
                    load(0),
                    function(0),
                    launch(0, 1),
                    rec(OP_UNLOAD, &[0, 0]),
                    rec(OP_GET_FUNCTION, &[0x80, 0, 0]),
                    // The dead function (pick mode 2 of an empty live list: the pool).
                    launch(0, 1),
                    sync,
                    load(1),
                    rec(OP_GET_FUNCTION, &[0, 0, 0]),
                ],
            ),
            |s| s.unloads == 1 && s.deferred == 1 && s.modules == 2 && s.launches == 2,
        ),
        (
            "streams and events: a pipelined memset outside the allocations, recorded, synchronised",
            seed(
                0,
                &[
                    alloc_4k,
                    rec(OP_STREAM_CREATE, &[1]),
                    rec(OP_EVENT_CREATE, &[0]),
                    rec(OP_EVENT_CREATE, &[0]),
                    rec(OP_EVENT_RECORD, &[0, 0, 0x60, 0]),
                    // MemsetAsync on the created stream, 4 bytes past the allocation.
                    rec(OP_MEMSET, &[0xc1, 0, 0, 4, 0, 0, 0, 6, 0, 0]),
                    rec(OP_EVENT_RECORD, &[1, 0, 0x60, 0]),
                    rec(OP_STREAM_QUERY, &[0x60, 0]),
                    rec(OP_STREAM_SYNC, &[0x60, 0]),
                    rec(OP_EVENT_SYNC, &[1, 0]),
                    rec(OP_EVENT_ELAPSED, &[0, 0, 1, 0]),
                    rec(OP_STREAM_WAIT, &[0x60, 0, 0, 0, 0]),
                    rec(OP_STREAM_DESTROY, &[0x60, 0]),
                    rec(OP_EVENT_DESTROY, &[0, 0]),
                    rec(OP_EVENT_QUERY, &[0, 0]),
                    rec(OP_GOODBYE, &[]),
                ],
            ),
            |s| s.deferred == 1 && s.closed && !s.notice,
        ),
        (
            "guest memory: scatter-gather copies across the hole's edges",
            seed(
                0,
                &[
                    alloc_4k,
                    alloc_4k,
                    // 0x100 bytes from guest 0x3000 into the first allocation.
                    rec(OP_HTOD_SG, &[0, 0, 0, 0, 0, 0, 0, 7, 3]),
                    rec(OP_DTOH_SG, &[0, 0, 0, 0, 0, 0, 0, 4, 3]),
                    // An entry from 0x3ff0 that runs into the hole: refused.
                    rec(OP_HTOD_SG, &[0, 0, 0, 0, 0, 0, 0, 2, 3]),
                    rec(OP_DTOD, &[0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0]),
                    rec(OP_DTOH, &[0, 0, 1, 0, 0, 0, 0, 0, 0]),
                ],
            ),
            |s| s.compared > 0 && s.successes >= 6,
        ),
        (
            "before Init: NOT_INITIALIZED, then Init and a context by hand",
            seed(
                0x18,
                &[
                    rec(OP_ALLOC, &[2]),
                    rec(OP_DEVICE, &[2, 0]),
                    rec(OP_MISC, &[2, 0]),
                    rec(OP_DEVICE, &[2, 0]),
                    rec(OP_RETAIN, &[]),
                    rec(OP_ALLOC, &[2]),
                    rec(OP_SET_CURRENT, &[]),
                    rec(OP_ALLOC, &[2]),
                ],
            ),
            |s| s.successes >= 5,
        ),
        (
            "a repeated request id: the closing notice, everything released",
            seed(0, &[alloc_4k, rec(OP_BAD_ID, &[0])]),
            |s| s.notice && s.closed,
        ),
        (
            "4 KiB frames: a copy over max_inline is refused, a frame over max_frame ends the session",
            seed(2, &[load(0), function(0), alloc_4k, dtoh_all(0), load(11)]),
            |s| s.modules == 1 && s.replies == 7 && s.notice,
        ),
        (
            "contexts: two created ones with their own objects; another context's handle fails; destroy; the primary stays",
            seed(
                0,
                &[
                    alloc_4k,
                    rec(OP_CTX_CREATE, &[0, 0]),
                    alloc_4k,
                    load(0),
                    function(0),
                    rec(OP_CTX_CREATE, &[0, 0]),
                    alloc_4k,
                    htod_all(0, 5),
                    // A's module and (pipelined) A's kernel, in B: foreign handles.
                    rec(OP_GET_FUNCTION, &[0x40, 0, 0]),
                    launch(0, 15),
                    sync,
                    rec(OP_MEMINFO, &[]),
                    // Destroy A (not current), then try the primary one.
                    rec(OP_CTX_DESTROY, &[0, 0]),
                    rec(OP_CTX_DESTROY, &[2, 0]),
                    rec(OP_MEMINFO, &[]),
                    rec(OP_SET_CURRENT, &[0]),
                    dtoh_all(0),
                    rec(OP_GOODBYE, &[]),
                ],
            ),
            |s| s.contexts == 2 && s.destroyed == 1 && s.deferred == 1 && s.closed && !s.notice,
        ),
        (
            "a sticky fault in a created context: the primary one keeps working; destroy the faulted one",
            seed(
                0,
                &[
                    alloc_4k,
                    htod_all(0, 3),
                    rec(OP_CTX_CREATE, &[0, 0]),
                    alloc_4k,
                    load(3),
                    function(0),
                    // oob_write(out = the buffer's end, n = 1).
                    launch(0xe0, 0),
                    rec(OP_STREAM_SYNC, &[0, 0]),
                    rec(OP_ALLOC, &[2]),
                    rec(OP_SET_CURRENT, &[0]),
                    dtoh_all(0),
                    alloc_4k,
                    // Back in the faulted context (held: the second of two).
                    rec(OP_SET_CURRENT, &[2, 1]),
                    rec(OP_MEMINFO, &[]),
                    rec(OP_CTX_DESTROY, &[0, 0]),
                    rec(OP_SET_CURRENT, &[0]),
                    rec(OP_MEMINFO, &[]),
                ],
            ),
            |s| s.sticky == 1 && s.contexts == 1 && s.destroyed == 1 && s.compared > 0,
        ),
        (
            "module variables (ModuleGetGlobal) reached by copies until the unload; function attributes",
            seed(
                0,
                &[
                    // .global .b8 g0[64] and .global .u32 g2 = 7.
                    rec(OP_LOAD_GLOBALS, &[2, 0x00, 64, 0, 0x44, 7, 0]),
                    rec(OP_GET_GLOBAL, &[0, 0, 0]),
                    rec(OP_GET_GLOBAL, &[0, 0, 1]),
                    rec(OP_GET_GLOBAL, &[0, 0, 205]),
                    htod_all(0, 9),
                    dtoh_all(0),
                    // Not an allocation: cuMemFree refuses it.
                    rec(OP_FREE, &[0, 0]),
                    rec(OP_GET_FUNCTION, &[0, 0, 0]),
                    rec(OP_FUNC_GET_ATTR, &[0, 0, 0]),
                    rec(OP_FUNC_SET_ATTR, &[0, 0, 8, 4]),
                    rec(OP_FUNC_GET_ATTR, &[0, 0, 8]),
                    rec(OP_FUNC_SET_ATTR, &[0, 0, 9, 10]),
                    rec(OP_FUNC_SET_ATTR, &[0, 0, 4, 0]),
                    rec(OP_UNLOAD, &[0, 0]),
                    dtoh_all(0),
                ],
            ),
            |s| s.globals == 2 && s.attributes == 3 && s.compared > 0 && s.unloads == 1,
        ),
    ]
}

/// Runs the `service_dispatch` fuzz target's seeds (`cuda-guest/fuzz-proto/seeds-dispatch`)
/// through its harness: the hand-made ones (checked to reach what they are for) and
/// every other input kept there (crash reproducers); with `DISPATCH_REPLAY=<file>` only
/// that input (`DISPATCH_TRACE=1` prints its requests and replies). With `DISPATCH_SEED_DIR` set the
/// hand-made seeds are written there first:
/// `DISPATCH_SEED_DIR=$PWD/cuda-guest/fuzz-proto/seeds-dispatch cargo test -p cuda-guest --test service_embed dispatch_fuzz_seeds`.
#[test]
fn dispatch_fuzz_seeds() {
    let svc = dispatch::service();
    let mem = dispatch::guest_memory();
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz-proto/seeds-dispatch");
    if let Some(input) = std::env::var_os("DISPATCH_REPLAY") {
        // One input only (a fuzzer's finding; `DISPATCH_TRACE=1` prints its trace).
        dispatch::run(&svc, &mem, &std::fs::read(input).unwrap());
        return;
    }
    let seeds = dispatch_seeds();
    if let Some(out) = std::env::var_os("DISPATCH_SEED_DIR") {
        std::fs::create_dir_all(&out).unwrap();
        for (i, (_, bytes, _)) in seeds.iter().enumerate() {
            std::fs::write(
                std::path::Path::new(&out).join(format!("seed-{i:03}")),
                bytes,
            )
            .unwrap();
        }
    }
    for (i, (what, bytes, reached)) in seeds.iter().enumerate() {
        let s = dispatch::run(&svc, &mem, bytes);
        assert!(reached(&s), "seed {i} ({what}) reached {s:?}");
        let file = dir.join(format!("seed-{i:03}"));
        assert_eq!(
            std::fs::read(&file).ok().as_ref(),
            Some(bytes),
            "{} is seed {i} (regenerate with DISPATCH_SEED_DIR)",
            file.display()
        );
    }
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    for f in files {
        dispatch::run(&svc, &mem, &std::fs::read(&f).unwrap());
    }
}

/// Found by the `service_dispatch` fuzz target: a launch whose block is `u32::MAX` in
/// x, y and z overflowed the simulator's thread count (`bx * by * bz` in u64), a panic
/// in builds with overflow checks. Such blocks are refused with `INVALID_VALUE`.
#[test]
fn launch_with_overflowing_block_is_refused() {
    let svc = Service::new(
        BackendChoice::Simulator(SimConfig::default()),
        ServiceConfig::default(),
    )
    .unwrap();
    let mut g = Guest::new(&svc, "vm-block", memory());
    let ReplyBody::Context(ctx) = g.ok(Request::PrimaryCtxRetain { device: 0 }) else {
        panic!()
    };
    g.ok(Request::CtxSetCurrent { ctx });
    let ReplyBody::Module(module) = g.ok(Request::ModuleLoadData {
        image: EMPTY_KERNEL.as_bytes().to_vec(),
    }) else {
        panic!()
    };
    let ReplyBody::Function(f) = g.ok(Request::ModuleGetFunction {
        module,
        name: "empty".into(),
    }) else {
        panic!()
    };
    for block in [
        [u32::MAX; 3],
        [u32::MAX, u32::MAX, 1],
        [1 << 16, 1 << 16, 1 << 16],
    ] {
        let r = g.call(Request::LaunchKernel {
            function: f.function,
            config: cuda_guest::driver::LaunchConfig {
                grid: [1, 1, 1],
                block,
                shared_bytes: 0,
            },
            stream: StreamId::DEFAULT,
            params: cuda_guest::proto::KernelParams::default(),
        });
        assert_eq!(r.status, Status::ERROR_INVALID_VALUE, "block {block:?}");
    }
    g.ok(Request::CtxSynchronize);
}

/// Found by the `service_dispatch` fuzz target: a module defining one `.global` name
/// three times loaded on the simulator (the session counted 12 bytes), but unloading it
/// freed only one of the three variables, so the simulator held memory the session no
/// longer counted, and a `MemAlloc` within the guest's quota failed with
/// `OUT_OF_MEMORY`. A duplicate definition is now refused (`INVALID_PTX`, as ptxas).
#[test]
fn module_with_duplicate_variables_is_refused() {
    let quota = 1 << 20;
    let config = ServiceConfig {
        quota: cuda_guest::service::Quota {
            device_memory: quota,
            ..Default::default()
        },
        ..ServiceConfig::default()
    };
    let svc = Service::new(BackendChoice::Simulator(SimConfig::default()), config).unwrap();
    let mut g = Guest::new(&svc, "vm-dup", memory());
    let ReplyBody::Context(ctx) = g.ok(Request::PrimaryCtxRetain { device: 0 }) else {
        panic!()
    };
    g.ok(Request::CtxSetCurrent { ctx });
    let ptx = ".version 7.0\n.target sm_80\n.address_size 64\n\n\
               .global .align 4 .u32 g2 = 1;\n.global .align 4 .u32 g2 = 1;\n\
               .global .align 4 .u32 g2 = 1;\n\
               .visible .entry touch(\n\t.param .u64 touch_param_0\n)\n{\n\tret;\n}\n";
    for _ in 0..3 {
        let r = g.call(Request::ModuleLoadData {
            image: ptx.as_bytes().to_vec(),
        });
        if let ReplyBody::Module(module) = r.body {
            g.ok(Request::ModuleUnload { module });
        } else {
            assert_eq!(r.status, Status::ERROR_INVALID_PTX, "{:?}", r.detail());
            assert!(
                r.detail().unwrap().contains("duplicate"),
                "{:?}",
                r.detail()
            );
        }
    }
    let ReplyBody::MemInfo { free, total } = g.ok(Request::MemGetInfo) else {
        panic!()
    };
    assert_eq!((free, total), (quota, quota));
    // The whole quota can be allocated.
    g.ok(Request::MemAlloc { bytes: quota });
    assert_eq!(svc.stats().device_bytes, quota);
}

/// A kernel that counts to its parameter: busy for a while, then done.
const SPIN: &str = ".version 7.0\n.target sm_80\n.address_size 64\n\n\
    .visible .entry spin(\n\t.param .u32 spin_param_0\n)\n{\n\
    \t.reg .pred %p<2>;\n\t.reg .b32 %r<4>;\n\n\
    \tld.param.u32 %r1, [spin_param_0];\n\tmov.u32 %r2, 0;\n\
    $L_loop:\n\tadd.s32 %r2, %r2, 1;\n\tsetp.lt.u32 %p1, %r2, %r1;\n\
    \t@%p1 bra $L_loop;\n\tret;\n}\n";

/// Found by the `service_dispatch` fuzz target (AddressSanitizer: heap use after free in
/// the simulator's device thread): the inline bytes of a pipelined `MemcpyHtoDAsync`
/// are staged until the copy is done, but a `StreamQuery` (which waits for nothing), an
/// `EventSynchronize` (done up to the record only) or a `StreamSynchronize` of another
/// stream freed the staged bytes of the streams it covered while the copy was still
/// queued behind a running kernel; the copy then read freed memory. Here a
/// `StreamQuery`, an `EventQuery` and a `StreamSynchronize` of another stream come while
/// a kernel runs, with such a copy queued behind it: the bytes must arrive intact.
#[test]
fn staged_async_copies_outlive_queries_and_events() {
    let svc = Service::new(
        BackendChoice::Simulator(SimConfig::default()),
        ServiceConfig::default(),
    )
    .unwrap();
    let mut g = Guest::new(&svc, "vm-staged", memory());
    let ReplyBody::Context(ctx) = g.ok(Request::PrimaryCtxRetain { device: 0 }) else {
        panic!()
    };
    g.ok(Request::CtxSetCurrent { ctx });
    let ReplyBody::Module(module) = g.ok(Request::ModuleLoadData {
        image: SPIN.as_bytes().to_vec(),
    }) else {
        panic!()
    };
    let ReplyBody::Function(spin) = g.ok(Request::ModuleGetFunction {
        module,
        name: "spin".into(),
    }) else {
        panic!()
    };
    let ReplyBody::Stream(other) = g.ok(Request::StreamCreate {
        flags: 1,
        priority: 0,
    }) else {
        panic!()
    };
    let ReplyBody::Event(event) = g.ok(Request::EventCreate { flags: 0 }) else {
        panic!()
    };
    const N: usize = 64 << 10;
    let ReplyBody::DevicePtr(d) = g.ok(Request::MemAlloc { bytes: N as u64 }) else {
        panic!()
    };
    let mut busy = 0;
    for (round, seed) in [3u8, 5, 7].into_iter().enumerate() {
        let data: Vec<u8> = (0..N)
            .map(|i| (i as u8).wrapping_mul(seed) ^ 0x5a)
            .collect();
        let started = std::time::Instant::now();
        g.send(
            Request::LaunchKernel {
                function: spin.function,
                config: cuda_guest::driver::LaunchConfig {
                    grid: [1, 1, 1],
                    block: [1, 1, 1],
                    shared_bytes: 0,
                },
                stream: StreamId::DEFAULT,
                params: cuda_guest::proto::KernelParams::pack(&[&300_000u32.to_le_bytes()]),
            },
            true,
        );
        g.send(
            Request::EventRecord {
                event,
                stream: StreamId::DEFAULT,
            },
            true,
        );
        g.send(
            Request::MemcpyHtoD {
                dst: d,
                src: HostSource::Inline(data.clone()),
                stream: Some(StreamId::DEFAULT),
            },
            true,
        );
        let r = match round {
            0 => g.call(Request::StreamQuery {
                stream: StreamId::DEFAULT,
            }),
            1 => g.call(Request::EventQuery { event }),
            _ => g.call(Request::StreamSynchronize { stream: other }),
        };
        if r.status == Status::ERROR_NOT_READY || round == 2 {
            busy += 1;
        }
        // Other heap traffic, reusing what a wrongly freed buffer held.
        let junk: Vec<Vec<u8>> = (0..16).map(|_| vec![0xee; N]).collect();
        g.ok(Request::CtxSynchronize);
        drop(junk);
        let ReplyBody::Data(back) = g.ok(Request::MemcpyDtoH {
            src: d,
            bytes: N as u64,
            dst: HostDest::Inline,
            stream: None,
        }) else {
            panic!()
        };
        assert!(back == data, "round {round}: the copied bytes changed");
        eprintln!("round {round}: {:?} ({:?})", r.status, started.elapsed());
    }
    assert!(
        busy >= 2,
        "the kernel ran long enough for the requests to come during it"
    );
}

/// Found by the `service_dispatch` fuzz target: an asynchronous inline copy of 0 bytes
/// (and a memset of 0 elements) succeeded on a made-up stream handle; the stream was
/// only checked when there was something to copy. Made-up streams are
/// `INVALID_HANDLE` whatever the size; on a real stream the empty copy succeeds.
#[test]
fn empty_async_copies_check_their_stream() {
    let svc = Service::new(
        BackendChoice::Simulator(SimConfig::default()),
        ServiceConfig::default(),
    )
    .unwrap();
    let mut g = Guest::new(&svc, "vm-empty", memory());
    let ReplyBody::Context(ctx) = g.ok(Request::PrimaryCtxRetain { device: 0 }) else {
        panic!()
    };
    g.ok(Request::CtxSetCurrent { ctx });
    let ReplyBody::DevicePtr(d) = g.ok(Request::MemAlloc { bytes: 256 }) else {
        panic!()
    };
    for stream in [StreamId(7), StreamId(0x100), StreamId(u64::MAX)] {
        let r = g.call(Request::MemcpyHtoD {
            dst: d,
            src: HostSource::Inline(Vec::new()),
            stream: Some(stream),
        });
        assert_eq!(r.status, Status::ERROR_INVALID_HANDLE, "{stream:?}");
        let r = g.call(Request::Memset {
            dst: d,
            value: 0,
            count: 0,
            width: cuda_guest::proto::MemsetWidth::W8,
            stream: Some(stream),
        });
        assert_eq!(r.status, Status::ERROR_INVALID_HANDLE, "{stream:?}");
    }
    g.ok(Request::MemcpyHtoD {
        dst: d,
        src: HostSource::Inline(Vec::new()),
        stream: Some(StreamId::DEFAULT),
    });
    g.ok(Request::Memset {
        dst: d,
        value: 0,
        count: 0,
        width: cuda_guest::proto::MemsetWidth::W8,
        stream: Some(StreamId(2)),
    });
}
