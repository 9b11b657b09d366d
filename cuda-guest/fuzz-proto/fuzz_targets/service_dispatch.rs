//! Fuzzes the service's dispatcher through the embedding API, on the simulator. Each
//! input is a sequence of frames, each `len: u16` + bytes, handed to a fresh guest
//! session that first retains and makes current its context, allocates 4 KiB (the
//! simulator's first address is fixed, so inputs can name it) and loads vector_add.
//! Checked: no panic; every answer is empty (a `NO_REPLY` request) or exactly one
//! reply frame; and after the session is dropped the service holds no session, context
//! or device memory.
#![no_main]

use std::sync::OnceLock;

use cuda_guest::proto::*;
use cuda_guest::service::{BackendChoice, Quota, Service, ServiceConfig};
use cuda_guest::sim::SimConfig;
use libfuzzer_sys::fuzz_target;
use vm_memory::{GuestAddress, GuestMemoryMmap};

const VECTOR_ADD: &str = include_str!("../../../fixtures/ptx/vector_add.nvrtc.ptx");

fn service() -> &'static (Service, GuestMemoryMmap) {
    static S: OnceLock<(Service, GuestMemoryMmap)> = OnceLock::new();
    S.get_or_init(|| {
        let sim = SimConfig {
            threads: 1,
            instruction_budget: 100_000,
            time_limit: Some(std::time::Duration::from_millis(50)),
            memory_limit: 1 << 20,
        };
        let config = ServiceConfig {
            quota: Quota {
                device_memory: 1 << 20,
                max_objects: 64,
                max_module_bytes: 64 << 10,
                launches_per_sec: None,
                launch_burst: Some(16),
            },
            ..ServiceConfig::default()
        };
        let svc = Service::new(BackendChoice::Simulator(sim), config).expect("service");
        let mem = GuestMemoryMmap::from_ranges(&[
            (GuestAddress(0), 0x4000),
            (GuestAddress(0x10000), 0x1000),
        ])
        .expect("guest memory");
        (svc, mem)
    })
}

fn check_reply(out: &[u8]) {
    if out.is_empty() {
        return;
    }
    match Reply::decode(out, &Limits::default()) {
        Ok(Decoded::Frame { len, .. }) => assert_eq!(len, out.len(), "one reply frame"),
        other => panic!("not a reply: {other:?}"),
    }
}

fuzz_target!(|data: &[u8]| {
    let (svc, mem) = service();
    {
        let mut s = svc.session("fuzz").expect("session");
        let hello = s.handshake(&ClientHello::new(Features::ALL, 1 << 20).encode());
        assert_eq!(&hello[..4], b"VGPS");
        let setup = [
            Request::PrimaryCtxRetain { device: 0 },
            Request::CtxSetCurrent { ctx: ContextId(0) },
            Request::MemAlloc { bytes: 4096 },
            Request::ModuleLoadData { image: VECTOR_ADD.as_bytes().to_vec() },
        ];
        for (i, r) in setup.into_iter().enumerate() {
            let r = match r {
                Request::CtxSetCurrent { .. } => {
                    // The context handle of this session: from the retain's reply.
                    let out = s.handle_frame(
                        &RequestFrame::new(100, Request::PrimaryCtxRetain { device: 0 }).to_bytes().unwrap(),
                        mem,
                    );
                    let Ok(Decoded::Frame { frame, .. }) = Reply::decode(&out, &Limits::default()) else {
                        panic!("retain")
                    };
                    let ReplyBody::Context(c) = frame.body else { panic!("retain") };
                    Request::CtxSetCurrent { ctx: c }
                }
                r => r,
            };
            check_reply(&s.handle_frame(&RequestFrame::new(1 + i as u64, r).to_bytes().unwrap(), mem));
        }
        let mut rest = data;
        while rest.len() >= 2 {
            let n = u16::from_le_bytes([rest[0], rest[1]]) as usize;
            rest = &rest[2..];
            let frame = &rest[..n.min(rest.len())];
            rest = &rest[frame.len()..];
            check_reply(&s.handle_frame(frame, mem));
        }
    }
    let st = svc.stats();
    assert_eq!((st.sessions, st.contexts, st.device_bytes), (0, 0, 0), "everything released");
});
