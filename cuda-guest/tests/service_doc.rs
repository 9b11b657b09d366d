//! `docs/protocol.md` says what the service does: each test checks one statement of it
//! against a live service on its Unix socket (the simulator backend).

mod service_support;

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;

use cuda_guest::proto::{
    ClientHello, Features, Opcode, ReplyBody, Request, RequestFrame, Status, StreamId,
};
use cuda_guest::service::ServiceConfig;
use service_support::*;

fn doc() -> String {
    std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/protocol.md")).unwrap()
}

/// Section 8: the server hello of the worked example is what `vmgpu cuda serve`'s
/// defaults send for that client hello (but the session number).
#[test]
fn the_worked_example_hello_is_what_a_default_service_sends() {
    let d = doc();
    let at = d.find("Server hello (accepted").unwrap();
    let block = &d[at..];
    let block = &block[block.find("```text").unwrap() + 7..];
    let block = &block[..block.find("```").unwrap()];
    let documented: Vec<u8> = block
        .lines()
        .flat_map(|l| {
            l.split_whitespace()
                .take_while(|t| t.len() == 2 && t.chars().all(|c| c.is_ascii_hexdigit()))
                .map(|t| u8::from_str_radix(t, 16).unwrap())
                .collect::<Vec<_>>()
        })
        .collect();
    assert_eq!(documented.len(), 64);
    let server = Server::start(ServiceConfig::default());
    let mut s = UnixStream::connect(&server.path).unwrap();
    s.write_all(&ClientHello::new(Features::ALL, 1 << 20).encode())
        .unwrap();
    let mut got = [0u8; 64];
    s.read_exact(&mut got).unwrap();
    got[24..32].copy_from_slice(&42u64.to_le_bytes());
    assert_eq!(got.to_vec(), documented);
    // objects 4096: the default quota, not Limits::default()'s 65536.
    assert_eq!(u32::from_le_bytes(got[56..60].try_into().unwrap()), 4096);
}

/// Section 1: a hello with a non-zero reserved field is refused with a status like
/// every other bad hello, then closed.
#[test]
fn a_bad_reserved_field_gets_a_refusal_with_a_status() {
    let server = Server::start(ServiceConfig::default());
    let mut s = UnixStream::connect(&server.path).unwrap();
    let mut hello = ClientHello::new(Features::ALL, 1 << 20).encode();
    hello[20] = 1;
    s.write_all(&hello).unwrap();
    let mut got = [0u8; 64];
    s.read_exact(&mut got).unwrap();
    assert_eq!(&got[0..4], b"VGPS");
    assert_eq!(
        u32::from_le_bytes(got[8..12].try_into().unwrap()),
        Status::ERROR_INVALID_VALUE.0
    );
    assert_eq!(s.read(&mut got).unwrap(), 0, "closed after the refusal");
    // A wrong magic is still closed without an answer.
    let mut s = UnixStream::connect(&server.path).unwrap();
    s.write_all(b"HTTP/1.1 GET /\r\n\r\n.....").unwrap();
    assert_eq!(s.read(&mut got).unwrap_or(0), 0);
}

/// Sections 2 and 7: ids increase; a repeated or smaller one ends the session with the
/// closing notice, and its resources are released.
#[test]
fn a_repeated_request_id_is_a_protocol_violation() {
    let server = Server::start(ServiceConfig::default());
    for back in [0u64, 1] {
        let mut c = server.client();
        c.context();
        c.alloc(1 << 20);
        let last = c.take_id() - 1;
        let f = RequestFrame::new(last - back, Request::DeviceGetCount)
            .to_bytes()
            .unwrap();
        c.s.write_all(&f).unwrap();
        let rest = c.recv_until_closed();
        assert_eq!(rest.len(), 1, "{rest:?}");
        assert!(rest[0].is_closing_notice());
        assert_eq!(rest[0].status, Status::ERROR_INVALID_VALUE);
        let detail = rest[0].detail().unwrap_or("").to_string();
        assert!(detail.contains("is not above"), "{detail}");
    }
    server.wait_idle();
}

/// Section 4, *Call order*: `Init` first (as `cuInit`); a context for the rest.
#[test]
fn the_call_order_is_cudas() {
    let server = Server::start(ServiceConfig::default());
    let mut s = UnixStream::connect(&server.path).unwrap();
    let hello = hello_over(&mut s);
    let mut c = Client::over(s, hello);
    // Before Init: only the session commands.
    assert!(matches!(
        c.ok(Request::DriverGetVersion),
        ReplyBody::Int(v) if v > 0
    ));
    c.ok(Request::Ping { data: vec![1] });
    for r in [
        Request::DeviceGetCount,
        Request::DeviceGet { ordinal: 0 },
        Request::PrimaryCtxRetain { device: 0 },
        Request::MemAlloc { bytes: 64 },
    ] {
        let op = r.opcode();
        let reply = c.call(r);
        assert_eq!(reply.status, Status::ERROR_NOT_INITIALIZED, "{op:?}");
        assert!(reply.detail().unwrap_or("").contains("Init"));
    }
    c.ok(Request::Init { flags: 0 });
    // Device queries need only Init; memory needs a current context (201).
    assert_eq!(
        c.ok(Request::DeviceGet { ordinal: 0 }),
        ReplyBody::Device(0)
    );
    assert_eq!(
        c.status(Request::MemAlloc { bytes: 64 }),
        Status::ERROR_INVALID_CONTEXT
    );
    c.context();
    c.alloc(64);
    // The rule is one table, and the document names the opcodes it exempts.
    let d = doc();
    let exempt: Vec<Opcode> = Opcode::ALL
        .iter()
        .copied()
        .filter(|o| !o.needs_init())
        .collect();
    assert_eq!(
        exempt,
        [
            Opcode::Ping,
            Opcode::Init,
            Opcode::DriverGetVersion,
            Opcode::Goodbye
        ]
    );
    assert!(d.contains("every request but `Ping`, `Init`,\n   `DriverGetVersion` and `Goodbye`"));
}

/// Section 11, *Address spaces*: every simulator context has an address range of its
/// own, so two sessions' (and one session's successive contexts') addresses differ.
#[test]
fn each_context_has_addresses_of_its_own() {
    let server = Server::start(ServiceConfig::default());
    let mut a = server.client();
    let mut b = server.client();
    a.context();
    b.context();
    let (pa, pb) = (a.alloc(4096), b.alloc(4096));
    assert_ne!(pa, pb);
    // The first allocation of each: the same offset in windows of 2^38 bytes.
    assert_eq!(pa.0 & ((1 << 38) - 1), pb.0 & ((1 << 38) - 1));
    assert!(pa.0 < 1 << 47 && pb.0 < 1 << 47, "{pa:?} {pb:?}");
    a.ok(Request::PrimaryCtxRelease { device: 0 });
    a.context();
    let pa2 = a.alloc(4096);
    assert_ne!(pa2, pa);
    assert_ne!(pa2, pb);
}

/// Section 11, *Failure details*: a fault on a stream the guest made names the guest's
/// handle, not the backend's.
#[test]
fn a_fault_names_the_guests_stream_handle() {
    let server = Server::start(ServiceConfig::default());
    let mut c = server.client();
    c.context();
    let ReplyBody::Stream(st) = c.ok(Request::StreamCreate {
        flags: 0,
        priority: 0,
    }) else {
        panic!()
    };
    let m = c.load(include_str!("../../fixtures/ptx/oob_write.nvrtc.ptx"));
    let f = c.function(m, "oob_write");
    let out = c.alloc(4000);
    c.send(
        launch_req(
            &f,
            8,
            128,
            st,
            &[&out.0.to_le_bytes(), &1000u32.to_le_bytes()],
        ),
        true,
    );
    let r = c.call(Request::StreamSynchronize { stream: st });
    assert_eq!(r.status, Status::ERROR_ILLEGAL_ADDRESS);
    let detail = r.detail().unwrap_or("").to_string();
    assert!(
        detail.contains(&format!("on stream {:#x}", st.0)),
        "the guest's handle {:#x} in: {detail}",
        st.0
    );
    assert_ne!(st, StreamId::DEFAULT);
}
