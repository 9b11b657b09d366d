//! The service over its Unix socket, on the simulator: two guests at once, isolation,
//! quotas, malformed frames, disconnects, deferred faults, hybrid vsock, shutdown.

mod service_support;

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

use cuda_guest::proto::{
    ContextId, DevicePtr, EventId, FunctionId, HostDest, HostSource, ModuleId, Opcode, Reply,
    Request, Status, StreamId,
};
use cuda_guest::service::{Quota, ServiceConfig};
use service_support::*;

fn inputs(n: usize, k: f32) -> (Vec<f32>, Vec<f32>) {
    let a: Vec<f32> = (0..n).map(|i| i as f32 * k).collect();
    let b: Vec<f32> = (0..n).map(|i| 1000.0 - i as f32).collect();
    (a, b)
}

fn check_sum(a: &[f32], b: &[f32], c: &[f32]) {
    assert_eq!(c.len(), a.len());
    for (i, ((x, y), z)) in a.iter().zip(b).zip(c).enumerate() {
        assert_eq!(*z, x + y, "element {i}");
    }
}

#[test]
fn two_guests_compute_and_cannot_reach_each_other() {
    let server = Server::start(ServiceConfig::default());
    let mut a = server.client();
    let mut b = server.client();
    let ctx_a = a.context();
    let ctx_b = b.context();
    assert_ne!(ctx_a, ctx_b);
    let ma = a.load(VECTOR_ADD);
    let mb = b.load(VECTOR_ADD);
    let fa = a.function(ma, "vector_add");
    let fb = b.function(mb, "vector_add");
    // The layout comes with the function: 3 pointers and an int.
    let layout = fa.params.clone().expect("layout known");
    assert_eq!(
        layout
            .iter()
            .map(|s| (s.offset, s.size))
            .collect::<Vec<_>>(),
        vec![(0, 8), (8, 8), (16, 8), (24, 4)]
    );

    let (xa, ya) = inputs(1000, 2.0);
    let (xb, yb) = inputs(777, -3.5);
    check_sum(&xa, &ya, &vector_add(&mut a, &fa, &xa, &ya));
    check_sum(&xb, &yb, &vector_add(&mut b, &fb, &xb, &yb));

    // B's objects in A's session.
    let sb = match b.ok(Request::StreamCreate {
        flags: 0,
        priority: 0,
    }) {
        cuda_guest::proto::ReplyBody::Stream(s) => s,
        x => panic!("{x:?}"),
    };
    let eb = match b.ok(Request::EventCreate { flags: 0 }) {
        cuda_guest::proto::ReplyBody::Event(e) => e,
        x => panic!("{x:?}"),
    };
    assert_eq!(
        a.status(Request::StreamSynchronize { stream: sb }),
        Status::ERROR_INVALID_HANDLE
    );
    assert_eq!(
        a.status(Request::EventQuery { event: eb }),
        Status::ERROR_INVALID_HANDLE
    );
    assert_eq!(
        a.status(Request::ModuleUnload { module: mb }),
        Status::ERROR_INVALID_HANDLE
    );
    assert_eq!(
        a.status(Request::ModuleGetFunction {
            module: mb,
            name: "vector_add".into()
        }),
        Status::ERROR_INVALID_HANDLE
    );
    assert_eq!(
        a.status(Request::CtxSetCurrent { ctx: ctx_b }),
        Status::ERROR_INVALID_CONTEXT
    );
    // A launch of B's function, pipelined: deferred to A's next synchronisation.
    let lid = a.send(
        launch_req(
            &fb,
            1,
            1,
            StreamId::DEFAULT,
            &[&[0; 8], &[0; 8], &[0; 8], &[0; 4]],
        ),
        true,
    );
    let r = a.call(Request::CtxSynchronize);
    assert_eq!(r.status, Status::ERROR_INVALID_HANDLE);
    assert_eq!(
        r.cause.map(|c| (c.id, c.opcode)),
        Some((lid, Opcode::LaunchKernel))
    );
    // Made-up handles.
    for h in [0x100u64, 0xdead_beef, 1 << 56, u64::MAX] {
        assert_eq!(
            a.status(Request::StreamQuery {
                stream: StreamId(h)
            }),
            Status::ERROR_INVALID_HANDLE,
            "{h:#x}"
        );
        assert_eq!(
            a.status(Request::EventDestroy { event: EventId(h) }),
            Status::ERROR_INVALID_HANDLE
        );
        assert_eq!(
            a.status(Request::ModuleUnload {
                module: ModuleId(h)
            }),
            Status::ERROR_INVALID_HANDLE
        );
    }
    assert_eq!(
        a.status(Request::CtxSetCurrent {
            ctx: ContextId(12345)
        }),
        Status::ERROR_INVALID_CONTEXT
    );
    let _ = FunctionId(0);

    // Device pointers: B holds 1 MiB, A 4 KiB; B's range is not A's.
    let pb = b.alloc(1 << 20);
    let pa = a.alloc(4096);
    b.htod(pb, &vec![0x5a; 1 << 20]);
    let far = DevicePtr(pb.0 + (1 << 19));
    assert_eq!(
        a.status(Request::MemcpyDtoH {
            src: far,
            bytes: 16,
            dst: HostDest::Inline,
            stream: None
        }),
        Status::ERROR_INVALID_VALUE
    );
    assert_eq!(
        a.status(Request::MemFree { ptr: far }),
        Status::ERROR_INVALID_VALUE
    );
    // Beyond A's own allocation, overlapping its end, overflowing.
    let over = Request::MemcpyHtoD {
        dst: DevicePtr(pa.0 + 4090),
        src: HostSource::Inline(vec![1; 8]),
        stream: None,
    };
    assert_eq!(a.status(over), Status::ERROR_INVALID_VALUE);
    assert_eq!(
        a.status(Request::Memset {
            dst: pa,
            value: 0,
            count: 1025,
            width: cuda_guest::proto::MemsetWidth::W32,
            stream: None
        }),
        Status::ERROR_INVALID_VALUE
    );
    assert_eq!(
        a.status(Request::MemcpyDtoD {
            dst: pa,
            src: DevicePtr(u64::MAX - 4),
            bytes: 8,
            stream: None
        }),
        Status::ERROR_INVALID_VALUE
    );
    // A freed pointer.
    a.ok(Request::MemFree { ptr: pa });
    assert_eq!(
        a.status(Request::MemFree { ptr: pa }),
        Status::ERROR_INVALID_VALUE
    );
    assert_eq!(
        a.status(Request::MemcpyDtoH {
            src: pa,
            bytes: 4,
            dst: HostDest::Inline,
            stream: None
        }),
        Status::ERROR_INVALID_VALUE
    );
    // B's data is intact, and B still computes right.
    assert_eq!(b.dtoh(DevicePtr(pb.0 + 4096), 8), vec![0x5a; 8]);
    check_sum(&xb, &yb, &vector_add(&mut b, &fb, &xb, &yb));
    // Memset widths.
    let w = b.alloc(64);
    for (width, value, expect) in [
        (cuda_guest::proto::MemsetWidth::W8, 0xab, vec![0xab; 64]),
        (
            cuda_guest::proto::MemsetWidth::W16,
            0x1234,
            [0x34, 0x12].repeat(32),
        ),
        (
            cuda_guest::proto::MemsetWidth::W32,
            0xdeadbeef,
            [0xef, 0xbe, 0xad, 0xde].repeat(16),
        ),
    ] {
        let count = 64 / width.bytes();
        b.ok(Request::Memset {
            dst: w,
            value,
            count,
            width,
            stream: None,
        });
        assert_eq!(b.dtoh(w, 64), expect);
        b.ok(Request::Memset {
            dst: w,
            value: 0,
            count: 64,
            width: cuda_guest::proto::MemsetWidth::W8,
            stream: Some(StreamId::DEFAULT),
        });
        b.ok(Request::Memset {
            dst: w,
            value,
            count,
            width,
            stream: Some(sb),
        });
        b.ok(Request::StreamSynchronize { stream: sb });
        assert_eq!(b.dtoh(w, 64), expect);
    }
    let _ = eb;
    drop(a);
    drop(b);
    server.wait_idle();
}

#[test]
fn quotas_hit_one_guest_only() {
    let config = ServiceConfig {
        quota: Quota {
            device_memory: 1 << 20,
            max_objects: 8,
            max_module_bytes: 64 << 10,
            ..Quota::default()
        },
        ..ServiceConfig::default()
    };
    let server = Server::start(config);
    let mut a = server.client();
    let mut b = server.client();
    a.context();
    b.context();
    assert_eq!(a.hello.limits.max_objects, 8);
    assert_eq!(a.hello.limits.max_module, 64 << 10);
    let (free, total) = a.mem_info();
    assert_eq!((free, total), (1 << 20, 1 << 20));
    let r = a.call(Request::MemAlloc { bytes: 2 << 20 });
    assert_eq!(r.status, Status::ERROR_OUT_OF_MEMORY);
    assert!(r.detail().unwrap().contains("test#"), "{:?}", r.detail());
    let p = a.alloc(768 << 10);
    assert_eq!(a.mem_info(), (256 << 10, 1 << 20));
    assert_eq!(
        a.status(Request::MemAlloc { bytes: 512 << 10 }),
        Status::ERROR_OUT_OF_MEMORY
    );
    // B has its own quota.
    let q = b.alloc(1 << 20);
    assert_eq!(b.mem_info(), (0, 1 << 20));
    b.ok(Request::MemFree { ptr: q });
    // Objects: A holds 1 allocation; 7 more objects, then no more.
    for _ in 0..7 {
        a.ok(Request::EventCreate { flags: 0 });
    }
    assert_eq!(
        a.status(Request::StreamCreate {
            flags: 0,
            priority: 0
        }),
        Status::ERROR_OUT_OF_MEMORY
    );
    // B still creates objects and computes.
    let mb = b.load(VECTOR_ADD);
    let fb = b.function(mb, "vector_add");
    let (x, y) = inputs(300, 0.5);
    check_sum(&x, &y, &vector_add(&mut b, &fb, &x, &y));
    // Module size: over the announced limit is a malformed frame for the decoder.
    let big = format!("{VECTOR_ADD}\n// {}\n", "x".repeat(70 << 10));
    assert_eq!(
        b.status(Request::ModuleLoadData {
            image: big.into_bytes()
        }),
        Status::ERROR_INVALID_VALUE
    );
    a.ok(Request::MemFree { ptr: p });
    drop(a);
    drop(b);
    server.wait_idle();
}

#[test]
fn malformed_truncated_and_oversized_frames() {
    let server = Server::start(ServiceConfig::default());
    let mut good = server.client();
    good.context();
    let mf = good.load(VECTOR_ADD);
    let f = good.function(mf, "vector_add");

    // A bad payload: MemAlloc with 4 bytes instead of 8. Answered, session goes on.
    let mut bad = server.client();
    bad.context();
    let id = bad.take_id();
    let mut frame = vec![20, 0, 0, 0];
    frame.extend_from_slice(&id.to_le_bytes());
    frame.extend_from_slice(&0x0401u16.to_le_bytes());
    frame.extend_from_slice(&0u16.to_le_bytes());
    frame.extend_from_slice(&[1, 2, 3, 4]);
    bad.s.write_all(&frame).unwrap();
    let r = bad.recv();
    assert_eq!((r.id, r.status), (id, Status::ERROR_INVALID_VALUE));
    let p = bad.alloc(64);
    assert_ne!(p.0, 0);
    // A pipelined bad payload: deferred to the next synchronisation.
    let id = bad.take_id();
    let mut frame = vec![20, 0, 0, 0];
    frame.extend_from_slice(&id.to_le_bytes());
    frame.extend_from_slice(&0x0701u16.to_le_bytes());
    frame.extend_from_slice(&1u16.to_le_bytes());
    frame.extend_from_slice(&[1, 2, 3, 4]);
    bad.s.write_all(&frame).unwrap();
    let r = bad.call(Request::CtxSynchronize);
    assert_eq!(r.status, Status::ERROR_INVALID_VALUE);
    assert_eq!(r.cause.map(|c| c.id), Some(id));
    // An oversized length: closing notice, closed.
    let mut frame = (u32::MAX).to_le_bytes().to_vec();
    frame.extend_from_slice(&[0; 12]);
    bad.s.write_all(&frame).unwrap();
    let rest = bad.recv_until_closed();
    assert_eq!(rest.len(), 1);
    assert!(rest[0].is_closing_notice());

    // An unknown opcode: a protocol violation.
    let mut v = server.client();
    let mut frame = vec![16, 0, 0, 0];
    frame.extend_from_slice(&v.take_id().to_le_bytes());
    frame.extend_from_slice(&0x7777u16.to_le_bytes());
    frame.extend_from_slice(&0u16.to_le_bytes());
    v.s.write_all(&frame).unwrap();
    let rest = v.recv_until_closed();
    assert!(rest.last().is_some_and(Reply::is_closing_notice));

    // A truncated frame, then the guest goes away.
    let mut t = server.client();
    t.context();
    t.alloc(4096);
    let full = cuda_guest::proto::RequestFrame::new(
        99,
        Request::MemcpyHtoD {
            dst: DevicePtr(0x1000),
            src: HostSource::Inline(vec![7; 4096]),
            stream: None,
        },
    )
    .to_bytes()
    .unwrap();
    t.s.write_all(&full[..100]).unwrap();
    drop(t);

    // Garbage instead of a hello: closed without an answer.
    let mut g = UnixStream::connect(&server.path).unwrap();
    g.write_all(b"GET / HTTP/1.1\r\n\r\n").unwrap();
    let mut buf = [0u8; 64];
    assert!(
        matches!(g.read(&mut buf), Ok(0) | Err(_)),
        "closed without an answer"
    );

    // The good guest never noticed.
    let (x, y) = inputs(513, 1.25);
    check_sum(&x, &y, &vector_add(&mut good, &f, &x, &y));
    drop(good);
    drop(bad);
    drop(v);
    server.wait_idle();
}

#[test]
fn pipelined_launches_and_a_deferred_fault() {
    let server = Server::start(ServiceConfig::default());
    let mut a = server.client();
    let mut b = server.client();
    a.context();
    b.context();
    let m = a.load(VECTOR_ADD);
    let f = a.function(m, "vector_add");
    let mb = b.load(VECTOR_ADD);
    let fb = b.function(mb, "vector_add");
    let n = 256u32;
    let (x, y) = inputs(n as usize, 1.0);
    let (da, db, dc) = (a.alloc(1024), a.alloc(1024), a.alloc(1024));
    a.htod(da, &f32_bytes(&x));
    a.htod(db, &f32_bytes(&y));
    let args = |c: u64| vec![da.0.to_le_bytes(), db.0.to_le_bytes(), c.to_le_bytes()];
    // 50 good launches pipelined, then one with a wild pointer, then 10 more.
    for _ in 0..50 {
        let a3 = args(dc.0);
        a.send(
            launch_req(
                &f,
                2,
                128,
                StreamId::DEFAULT,
                &[&a3[0], &a3[1], &a3[2], &n.to_le_bytes()],
            ),
            true,
        );
    }
    let a3 = args(0x10);
    let bad = a.send(
        launch_req(
            &f,
            2,
            128,
            StreamId::DEFAULT,
            &[&a3[0], &a3[1], &a3[2], &n.to_le_bytes()],
        ),
        true,
    );
    for _ in 0..10 {
        let a3 = args(dc.0);
        a.send(
            launch_req(
                &f,
                2,
                128,
                StreamId::DEFAULT,
                &[&a3[0], &a3[1], &a3[2], &n.to_le_bytes()],
            ),
            true,
        );
    }
    // The next synchronising call reports it, with its cause.
    let r = a.call(Request::CtxSynchronize);
    assert_eq!(r.status, Status::ERROR_ILLEGAL_ADDRESS, "{:?}", r.detail());
    let cause = r.cause.expect("a cause");
    assert_eq!(cause.opcode, Opcode::LaunchKernel);
    assert!(
        cause.id <= bad,
        "cause {} for the bad launch {bad}",
        cause.id
    );
    // Sticky: every call needing the context gets it; device queries still work.
    let r = a.call(Request::MemAlloc { bytes: 16 });
    assert_eq!(r.status, Status::ERROR_ILLEGAL_ADDRESS);
    assert!(matches!(
        a.ok(Request::DeviceGetCount),
        cuda_guest::proto::ReplyBody::Count(1)
    ));
    // The context was torn down: its memory is back.
    assert_eq!(server.service.stats().device_bytes, 0);
    // B kept running the whole time.
    let (xb, yb) = inputs(100, 9.0);
    check_sum(&xb, &yb, &vector_add(&mut b, &fb, &xb, &yb));
    // Release and retain: a fresh context.
    a.ok(Request::PrimaryCtxRelease { device: 0 });
    a.context();
    let m = a.load(VECTOR_ADD);
    let f = a.function(m, "vector_add");
    check_sum(&x, &y, &vector_add(&mut a, &f, &x, &y));
    // A pipelined async memset on a bad range is deferred to its stream's sync.
    let p = a.alloc(64);
    let id = a.send(
        Request::Memset {
            dst: p,
            value: 0,
            count: 65,
            width: cuda_guest::proto::MemsetWidth::W8,
            stream: Some(StreamId::DEFAULT),
        },
        true,
    );
    let r = a.call(Request::StreamSynchronize {
        stream: StreamId::DEFAULT,
    });
    assert_eq!(
        (r.status, r.cause.map(|c| c.id)),
        (Status::ERROR_INVALID_VALUE, Some(id))
    );
    assert_eq!(
        a.status(Request::StreamSynchronize {
            stream: StreamId::DEFAULT
        }),
        Status::SUCCESS
    );
    drop(a);
    drop(b);
    server.wait_idle();
}

#[test]
fn a_guest_that_disconnects_mid_command_leaks_nothing() {
    let server = Server::start(ServiceConfig::default());
    let mut other = server.client();
    other.context();
    let mo = other.load(VECTOR_ADD);
    let fo = other.function(mo, "vector_add");
    for round in 0..3 {
        let mut c = server.client();
        c.context();
        let m = c.load(VECTOR_ADD);
        let f = c.function(m, "vector_add");
        let n = 1 << 16;
        let d = c.alloc(n * 4);
        c.alloc(1 << 20);
        for _ in 0..20 {
            c.send(
                launch_req(
                    &f,
                    (n as u32) / 128,
                    128,
                    StreamId::DEFAULT,
                    &[
                        &d.0.to_le_bytes(),
                        &d.0.to_le_bytes(),
                        &d.0.to_le_bytes(),
                        &(n as u32).to_le_bytes(),
                    ],
                ),
                true,
            );
        }
        // A synchronous copy in flight, then gone.
        c.send(
            Request::MemcpyDtoH {
                src: d,
                bytes: n * 4,
                dst: HostDest::Inline,
                stream: None,
            },
            false,
        );
        drop(c);
        let (x, y) = inputs(64, round as f32);
        check_sum(&x, &y, &vector_add(&mut other, &fo, &x, &y));
    }
    drop(other);
    server.wait_idle();
}

#[test]
fn hybrid_vsock_connect_preamble() {
    let server = Server::start(ServiceConfig::default());
    let mut s = UnixStream::connect(&server.path).unwrap();
    s.write_all(b"CONNECT 5123\n").unwrap();
    let mut ok = [0u8; 8];
    s.read_exact(&mut ok).unwrap();
    assert_eq!(&ok, b"OK 5123\n");
    let hello = hello_over(&mut s);
    let mut c = Client::over(s, hello);
    match c.ok(Request::Ping {
        data: b"hello".to_vec(),
    }) {
        cuda_guest::proto::ReplyBody::Data(d) => assert_eq!(d, b"hello"),
        b => panic!("{b:?}"),
    }
    // A bad preamble is closed.
    let mut s = UnixStream::connect(&server.path).unwrap();
    s.write_all(b"CONNECT nope\n").unwrap();
    let mut buf = [0u8; 8];
    assert_eq!(s.read(&mut buf).unwrap(), 0);
}

#[test]
fn handshake_timeout_closes_silent_peers() {
    let server = Server::start(ServiceConfig {
        handshake_timeout: Duration::from_millis(200),
        ..ServiceConfig::default()
    });
    let mut s = UnixStream::connect(&server.path).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let t = Instant::now();
    let mut buf = [0u8; 8];
    assert_eq!(s.read(&mut buf).unwrap(), 0);
    assert!(t.elapsed() >= Duration::from_millis(150));
    assert_eq!(server.service.stats().sessions, 0);
}

#[test]
fn graceful_shutdown_notifies_and_releases() {
    let server = Server::start(ServiceConfig::default());
    let mut c = server.client();
    c.context();
    c.alloc(1 << 20);
    assert_eq!(server.service.stats().device_bytes, 1 << 20);
    let svc = server.service.clone();
    server.shutdown.trigger();
    let rest = c.recv_until_closed();
    assert_eq!(rest.len(), 1);
    assert!(rest[0].is_closing_notice());
    assert_eq!(rest[0].status, Status::ERROR_DEINITIALIZED);
    server.stop();
    let s = svc.stats();
    assert_eq!((s.sessions, s.contexts, s.device_bytes), (0, 0, 0));
}

#[test]
fn launch_rate_quota_throttles_only_its_guest() {
    let server = Server::start(ServiceConfig {
        quota: Quota {
            launches_per_sec: Some(200),
            launch_burst: Some(5),
            ..Quota::default()
        },
        ..ServiceConfig::default()
    });
    let mut c = server.client();
    c.context();
    let m = c.load(EMPTY_KERNEL);
    let f = c.function(m, "empty");
    assert_eq!(f.params, Some(vec![]));
    let t = Instant::now();
    for _ in 0..45 {
        c.send(launch_req(&f, 1, 1, StreamId::DEFAULT, &[]), true);
    }
    c.ok(Request::CtxSynchronize);
    let took = t.elapsed();
    assert!(
        took >= Duration::from_millis(180),
        "45 launches at 200/s with a burst of 5 took {took:?}"
    );
    assert!(server.service.stats().throttled_launches >= 30);
}

#[test]
fn session_limit_and_goodbye() {
    let server = Server::start(ServiceConfig {
        max_sessions: 1,
        ..ServiceConfig::default()
    });
    let mut a = server.client();
    a.context();
    let p = a.alloc(4096);
    // A second guest is refused while the first is there.
    let mut s = UnixStream::connect(&server.path).unwrap();
    s.write_all(
        &cuda_guest::proto::ClientHello::new(cuda_guest::proto::Features::ALL, 1 << 20).encode(),
    )
    .unwrap();
    let mut b = [0u8; 64];
    s.read_exact(&mut b).unwrap();
    assert!(matches!(
        cuda_guest::proto::ServerHello::decode(&b),
        Err(cuda_guest::proto::HandshakeError::Refused {
            status: Status::ERROR_OUT_OF_MEMORY
        })
    ));
    // Goodbye with a deferred error pending: reported, and the session ends anyway.
    let id = a.send(
        Request::Memset {
            dst: p,
            value: 0,
            count: 8192,
            width: cuda_guest::proto::MemsetWidth::W8,
            stream: Some(StreamId::DEFAULT),
        },
        true,
    );
    let r = a.call(Request::Goodbye);
    assert_eq!(
        (r.status, r.cause.map(|c| c.id)),
        (Status::ERROR_INVALID_VALUE, Some(id))
    );
    assert!(a.recv_until_closed().is_empty());
    server.wait_idle();
    // Then there is room again.
    let mut c = server.client();
    c.context();
    assert_eq!(c.mem_info().0, 1 << 30);
}

#[test]
fn a_fault_found_by_a_later_call_names_the_launch() {
    let server = Server::start(ServiceConfig::default());
    let mut a = server.client();
    a.context();
    let m = a.load(VECTOR_ADD);
    let f = a.function(m, "vector_add");
    let d = a.alloc(4096);
    let n = 1024u32;
    let lid = a.send(
        launch_req(
            &f,
            8,
            128,
            StreamId::DEFAULT,
            &[
                &d.0.to_le_bytes(),
                &d.0.to_le_bytes(),
                &0x10u64.to_le_bytes(),
                &n.to_le_bytes(),
            ],
        ),
        true,
    );
    // A synchronous copy waits for the launch and finds its fault.
    let r = a.call(Request::MemcpyDtoH {
        src: d,
        bytes: 16,
        dst: HostDest::Inline,
        stream: None,
    });
    assert_eq!(r.status, Status::ERROR_ILLEGAL_ADDRESS);
    assert_eq!(
        r.cause.map(|c| (c.id, c.opcode)),
        Some((lid, Opcode::LaunchKernel))
    );
    // Every later call needing the context repeats it, with the same cause.
    let r = a.call(Request::StreamCreate {
        flags: 0,
        priority: 0,
    });
    assert_eq!(
        (r.status, r.cause.map(|c| c.id)),
        (Status::ERROR_ILLEGAL_ADDRESS, Some(lid))
    );
    let _ = ModuleId(0);
}

#[test]
fn a_guest_that_does_not_read_is_held_alone() {
    let mut config = ServiceConfig::default();
    config.limits.max_pipelined = 4;
    let server = Server::start(config);
    let mut slow = server.client();
    assert_eq!(slow.hello.limits.max_pipelined, 4);
    let mut w = slow.s.try_clone().unwrap();
    // Ids above the client's own (Init took 1).
    let frames: Vec<u8> = (10..2010u64)
        .flat_map(|id| {
            cuda_guest::proto::RequestFrame::new(
                id,
                Request::Ping {
                    data: vec![id as u8; 4096],
                },
            )
            .to_bytes()
            .unwrap()
        })
        .collect();
    let writer = std::thread::spawn(move || w.write_all(&frames).unwrap());
    std::thread::sleep(Duration::from_millis(300));
    // The server is stuck writing to `slow`; another guest is served meanwhile.
    let mut other = server.client();
    let t = Instant::now();
    for _ in 0..100 {
        other.ok(Request::Ping { data: vec![1; 8] });
    }
    assert!(t.elapsed() < Duration::from_secs(5));
    // Now `slow` reads: every reply, in order.
    for id in 10..2010u64 {
        let r = slow.recv();
        assert_eq!(r.id, id);
        assert_eq!(
            r.body,
            cuda_guest::proto::ReplyBody::Data(vec![id as u8; 4096])
        );
    }
    writer.join().unwrap();
}

#[test]
fn streams_events_and_device_copies() {
    use cuda_guest::proto::ReplyBody as B;
    let server = Server::start(ServiceConfig::default());
    let mut c = server.client();
    c.context();
    let stream = |c: &mut Client| match c.ok(Request::StreamCreate {
        flags: 1,
        priority: 0,
    }) {
        B::Stream(s) => s,
        b => panic!("{b:?}"),
    };
    let event = |c: &mut Client, flags| match c.ok(Request::EventCreate { flags }) {
        B::Event(e) => e,
        b => panic!("{b:?}"),
    };
    let (s1, s2) = (stream(&mut c), stream(&mut c));
    assert!(s1.0 >= StreamId::FIRST_HANDLE && s2.0 >= StreamId::FIRST_HANDLE);
    let (e0, e1, done) = (event(&mut c, 0), event(&mut c, 0), event(&mut c, 2));
    let n = 1 << 16;
    let (a, b, d) = (c.alloc(n), c.alloc(n), c.alloc(n));
    let data: Vec<u8> = (0..n).map(|i| (i * 31 % 255) as u8).collect();
    // a -> (s1) b, then s2 waits for s1's event and copies b -> d; async, pipelined.
    c.send(
        Request::EventRecord {
            event: e0,
            stream: s1,
        },
        true,
    );
    c.send(
        Request::MemcpyHtoD {
            dst: a,
            src: HostSource::Inline(data.clone()),
            stream: Some(s1),
        },
        true,
    );
    c.send(
        Request::MemcpyDtoD {
            dst: b,
            src: a,
            bytes: n,
            stream: Some(s1),
        },
        true,
    );
    c.send(
        Request::EventRecord {
            event: e1,
            stream: s1,
        },
        true,
    );
    c.send(
        Request::StreamWaitEvent {
            stream: s2,
            event: e1,
            flags: 0,
        },
        true,
    );
    c.send(
        Request::MemcpyDtoD {
            dst: d,
            src: b,
            bytes: n,
            stream: Some(s2),
        },
        true,
    );
    c.send(
        Request::EventRecord {
            event: done,
            stream: s2,
        },
        true,
    );
    // The async device-to-host copy's reply comes when s2 has reached it.
    let r = c.call(Request::MemcpyDtoH {
        src: d,
        bytes: n,
        dst: HostDest::Inline,
        stream: Some(s2),
    });
    assert_eq!(r.status, Status::SUCCESS);
    assert_eq!(r.body, B::Data(data.clone()));
    c.ok(Request::EventSynchronize { event: done });
    c.ok(Request::EventQuery { event: e1 });
    match c.ok(Request::EventElapsedTime { start: e0, end: e1 }) {
        B::ElapsedMs(ms) => assert!(ms >= 0.0),
        b => panic!("{b:?}"),
    }
    // Timing disabled on `done`: the driver's error.
    assert_ne!(
        c.status(Request::EventElapsedTime {
            start: e0,
            end: done
        }),
        Status::SUCCESS
    );
    // Synchronous device-to-device copy, and a range one byte too long.
    c.ok(Request::MemcpyDtoD {
        dst: a,
        src: d,
        bytes: n,
        stream: None,
    });
    assert_eq!(c.dtoh(a, 16), data[..16].to_vec());
    assert_eq!(
        c.status(Request::MemcpyDtoD {
            dst: a,
            src: DevicePtr(d.0 + 1),
            bytes: n,
            stream: None
        }),
        Status::ERROR_INVALID_VALUE
    );
    // Destroyed objects are gone; an unloaded module's functions too.
    c.ok(Request::StreamDestroy { stream: s1 });
    assert_eq!(
        c.status(Request::StreamSynchronize { stream: s1 }),
        Status::ERROR_INVALID_HANDLE
    );
    c.ok(Request::EventDestroy { event: e0 });
    assert_eq!(
        c.status(Request::EventSynchronize { event: e0 }),
        Status::ERROR_INVALID_HANDLE
    );
    let m = c.load(VECTOR_ADD);
    let f = c.function(m, "vector_add");
    assert_eq!(
        c.status(Request::ModuleGetFunction {
            module: m,
            name: "nope".into()
        }),
        Status::ERROR_NOT_FOUND
    );
    c.ok(Request::ModuleUnload { module: m });
    let id = c.send(
        launch_req(
            &f,
            1,
            1,
            StreamId::DEFAULT,
            &[&[0; 8], &[0; 8], &[0; 8], &[0; 4]],
        ),
        true,
    );
    let r = c.call(Request::CtxSynchronize);
    assert_eq!(
        (r.status, r.cause.map(|x| x.id)),
        (Status::ERROR_INVALID_HANDLE, Some(id))
    );
    // A launch whose slots do not match the kernel.
    let m = c.load(VECTOR_ADD);
    let f = c.function(m, "vector_add");
    let bad = launch_req(
        &f,
        1,
        1,
        StreamId::DEFAULT,
        &[&[0; 8], &[0; 8], &[0; 8], &[0; 4]],
    );
    let bad = match bad {
        Request::LaunchKernel {
            function,
            config,
            stream,
            ..
        } => Request::LaunchKernel {
            function,
            config,
            stream,
            params: cuda_guest::proto::KernelParams::pack(&[&[0; 8], &[0; 4]]),
        },
        _ => unreachable!(),
    };
    assert_eq!(c.status(bad), Status::ERROR_INVALID_VALUE);
    // Device queries.
    assert!(matches!(c.ok(Request::DeviceGetName { device: 0 }), B::Text(t) if !t.is_empty()));
    assert_eq!(
        c.status(Request::DeviceGetName { device: 1 }),
        Status::ERROR_INVALID_DEVICE
    );
    assert!(matches!(
        c.ok(Request::DeviceComputeCapability { device: 0 }),
        B::ComputeCapability { major: 8, minor: 0 }
    ));
    assert!(matches!(c.ok(Request::DeviceTotalMem { device: 0 }), B::Size(s) if s == 1 << 30));
    assert!(matches!(c.ok(Request::DriverGetVersion), B::Int(v) if v > 0));
}

#[test]
fn background_server_reports_a_failed_bind_and_stops_cleanly() {
    let service = || {
        cuda_guest::service::Service::new(
            cuda_guest::service::BackendChoice::Simulator(cuda_guest::sim::SimConfig::default()),
            ServiceConfig::default(),
        )
        .expect("service")
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let missing = dir.path().join("no-such-dir").join("vmgpu.sock");
    let err = cuda_guest::service::BackgroundServer::start(service(), &missing, "t")
        .expect_err("binding in a missing directory fails");
    assert!(err.to_string().contains("binding"), "{err}");
    let path = dir.path().join("vmgpu.sock");
    let server = cuda_guest::service::BackgroundServer::start(service(), &path, "t")
        .expect("the server starts");
    let c = UnixStream::connect(&path).expect("bound before start returns");
    drop(c);
    server.stop().expect("a clean shutdown");
}

#[path = "../fuzz-proto/harness/stream.rs"]
mod stream;

/// Runs the `service_stream` fuzz target's seeds (`cuda-guest/fuzz-proto/seeds-stream`)
/// through its harness: the hand-made ones (checked to reach what they are for) and
/// every other input kept there. With `STREAM_SEED_DIR` set the hand-made seeds are
/// written there first:
/// `STREAM_SEED_DIR=$PWD/cuda-guest/fuzz-proto/seeds-stream cargo test -p cuda-guest --test service_socket stream_fuzz_seeds`.
#[test]
fn stream_fuzz_seeds() {
    let dir = tempfile::tempdir().unwrap();
    let env = stream::Env::start(dir.path().join("fuzz.sock"));
    let seeds_dir =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz-proto/seeds-stream");
    if let Some(input) = std::env::var_os("STREAM_REPLAY") {
        stream::run(&env, &std::fs::read(input).unwrap());
        return;
    }
    let seeds = stream::seeds();
    if let Some(out) = std::env::var_os("STREAM_SEED_DIR") {
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
        let s = stream::run(&env, bytes);
        assert!(reached(&s), "seed {i} ({what}) reached {s:?}");
        let file = seeds_dir.join(format!("seed-{i:03}"));
        assert_eq!(
            std::fs::read(&file).ok().as_ref(),
            Some(bytes),
            "{} is seed {i} (regenerate with STREAM_SEED_DIR)",
            file.display()
        );
    }
    let mut files: Vec<_> = std::fs::read_dir(&seeds_dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    for f in files {
        stream::run(&env, &std::fs::read(&f).unwrap());
    }
}

/// Found with the `service_stream` fuzz harness (its seed 6): a frame refused for its
/// payload whose id was not above the last one got the closing notice, but the
/// connection's worker went on and answered the next frame (`DEINITIALIZED`, "the
/// session has ended") after it. The closing notice is the last frame.
#[test]
fn closing_notice_is_last_after_a_refused_frame_with_a_repeated_id() {
    let server = Server::start(ServiceConfig::default());
    let mut c = server.client();
    c.context();
    // MemAlloc with 4 payload bytes instead of 8, and the id 1 again.
    let mut bytes = vec![20, 0, 0, 0];
    bytes.extend_from_slice(&1u64.to_le_bytes());
    bytes.extend_from_slice(&0x0401u16.to_le_bytes());
    bytes.extend_from_slice(&[0, 0, 1, 2, 3, 4]);
    let id = c.take_id();
    bytes.extend(
        cuda_guest::proto::RequestFrame::new(id, Request::DeviceGetCount)
            .to_bytes()
            .unwrap(),
    );
    c.s.write_all(&bytes).unwrap();
    let replies = c.recv_until_closed();
    assert_eq!(replies.len(), 1, "only the closing notice: {replies:?}");
    assert!(replies[0].is_closing_notice());
    server.wait_idle();
}
