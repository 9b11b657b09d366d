//! The embedding API: a VMM's own device hands whole frames and its guest memory
//! (`vm-memory`); bulk data as guest-physical scatter-gather lists.

mod service_support;

use cuda_guest::proto::{
    ClientHello, Decoded, DevAddr, Features, HostDest, HostSource, Message, Reply, ReplyBody,
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
    let ReplyBody::DevAddr(d) = g.ok(Request::MemAlloc { bytes: 0x3000 }) else {
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
        dst: DevAddr(d.0 + 0x2FF0),
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
    let ReplyBody::DevAddr(dx) = g.ok(Request::MemAlloc { bytes: 2048 }) else {
        panic!()
    };
    let ReplyBody::DevAddr(dy) = g.ok(Request::MemAlloc { bytes: 2048 }) else {
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

/// Seeds for the `service_dispatch` fuzz target (`cuda-guest/fuzz-proto`): frames as
/// `len: u16` + bytes, naming the simulator's first allocation. Written to
/// `DISPATCH_SEED_DIR` when it is set.
#[test]
fn dispatch_fuzz_seeds() {
    let svc = Service::new(
        BackendChoice::Simulator(SimConfig::default()),
        ServiceConfig::default(),
    )
    .unwrap();
    let mut g = Guest::new(&svc, "seeds", memory());
    let ReplyBody::Context(ctx) = g.ok(Request::PrimaryCtxRetain { device: 0 }) else {
        panic!()
    };
    g.ok(Request::CtxSetCurrent { ctx });
    let ReplyBody::DevAddr(d) = g.ok(Request::MemAlloc { bytes: 4096 }) else {
        panic!()
    };
    let seqs: Vec<Vec<RequestFrame>> = vec![
        vec![
            RequestFrame::new(10, Request::MemGetInfo),
            RequestFrame::new(11, Request::CtxSynchronize),
        ],
        vec![
            RequestFrame::new(
                10,
                Request::MemcpyHtoD {
                    dst: d,
                    src: HostSource::Inline(vec![1; 64]),
                    stream: None,
                },
            ),
            RequestFrame::new(
                11,
                Request::MemcpyDtoH {
                    src: d,
                    bytes: 64,
                    dst: HostDest::Inline,
                    stream: None,
                },
            ),
        ],
        vec![
            RequestFrame::pipelined(
                10,
                Request::Memset {
                    dst: d,
                    value: 7,
                    count: 1024,
                    width: cuda_guest::proto::MemsetWidth::W32,
                    stream: Some(StreamId::DEFAULT),
                },
            ),
            RequestFrame::new(
                11,
                Request::StreamSynchronize {
                    stream: StreamId::DEFAULT,
                },
            ),
        ],
        vec![
            RequestFrame::new(
                10,
                Request::MemcpyHtoD {
                    dst: d,
                    src: HostSource::Guest(vec![SgEntry {
                        gpa: 0x100,
                        len: 0x200,
                    }]),
                    stream: None,
                },
            ),
            RequestFrame::new(
                11,
                Request::MemcpyDtoH {
                    src: d,
                    bytes: 0x100,
                    dst: HostDest::Guest(vec![SgEntry {
                        gpa: 0x10000,
                        len: 0x100,
                    }]),
                    stream: Some(StreamId::DEFAULT),
                },
            ),
        ],
        vec![
            RequestFrame::new(
                10,
                Request::StreamCreate {
                    flags: 1,
                    priority: 0,
                },
            ),
            RequestFrame::new(11, Request::EventCreate { flags: 0 }),
            RequestFrame::new(12, Request::MemFree { ptr: d }),
            RequestFrame::new(13, Request::PrimaryCtxRelease { device: 0 }),
            RequestFrame::new(14, Request::Goodbye),
        ],
    ];
    let dir = std::env::var_os("DISPATCH_SEED_DIR");
    for (i, seq) in seqs.iter().enumerate() {
        let mut seed = Vec::new();
        for f in seq {
            let b = f.to_bytes().unwrap();
            seed.extend((b.len() as u16).to_le_bytes());
            seed.extend(b);
        }
        if let Some(dir) = &dir {
            std::fs::create_dir_all(dir).unwrap();
            std::fs::write(
                std::path::Path::new(dir).join(format!("seed-{i:03}")),
                &seed,
            )
            .unwrap();
        }
    }
    // The seeds' address is the simulator's first allocation in a fresh session.
    assert_eq!(d.0 % 256, 0);
}
