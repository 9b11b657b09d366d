//! Process isolation on the simulator: every guest in a worker process of its own
//! (the `cuda_worker` example). A guest's fault or its worker's death ends only that
//! guest's worker; the other guest keeps computing right results; the faulting guest
//! gets its error, then a fresh worker after release and retain; memory comes back;
//! no zombie is left.

mod service_support;

use cuda_guest::proto::{Opcode, ReplyBody, Request, Status, StreamId};
use cuda_guest::service::{BackendChoice, ServiceConfig};
use cuda_guest::sim::SimConfig;
use service_support::*;

const QUOTA: u64 = 64 << 20;

fn server() -> Server {
    Server::start_with(
        BackendChoice::Simulator(SimConfig::default()),
        ServiceConfig {
            quota: cuda_guest::service::Quota {
                device_memory: QUOTA,
                ..Default::default()
            },
            isolation: process_isolation("sim"),
            ..ServiceConfig::default()
        },
    )
}

fn inputs() -> (Vec<f32>, Vec<f32>) {
    (
        (0..2048).map(|i| i as f32).collect(),
        (0..2048).map(|i| (i * 3) as f32).collect(),
    )
}

fn right(c: &[f32]) -> bool {
    c.len() == 2048 && c.iter().enumerate().all(|(i, v)| *v == (4 * i) as f32)
}

fn ready(c: &mut Client) -> cuda_guest::proto::FunctionInfo {
    c.context();
    let m = c.load(VECTOR_ADD);
    c.function(m, "vector_add")
}

#[test]
fn each_guest_runs_in_a_worker_process_of_its_own() {
    let server = server();
    let mut a = server.client();
    let mut b = server.client();
    let (fa, fb) = (ready(&mut a), ready(&mut b));
    let pids = server.service.worker_pids();
    assert_eq!(pids.len(), 2, "{pids:?}");
    assert_ne!(pids[0].1, pids[1].1);
    assert_ne!(pids[0].1, std::process::id());
    let (x, y) = inputs();
    assert!(right(&vector_add(&mut a, &fa, &x, &y)));
    assert!(right(&vector_add(&mut b, &fb, &y, &x)));
    // Device queries and the quota as seen through the worker.
    assert_eq!(a.mem_info(), (QUOTA, QUOTA));
    let d = a.alloc(1 << 20);
    assert_eq!(a.mem_info(), (QUOTA - (1 << 20), QUOTA));
    assert_eq!(b.mem_info(), (QUOTA, QUOTA));
    a.ok(Request::MemFree { ptr: d });
    // Frames larger than the relay's buffer, both ways, and many small ones at once.
    let big: Vec<u8> = (0..(4u32 << 20)).map(|i| (i % 251) as u8).collect();
    let d = a.alloc(big.len() as u64);
    a.htod(d, &big);
    assert!(a.dtoh(d, big.len() as u64) == big, "4 MiB back as written");
    for _ in 0..2000 {
        a.send(
            Request::Memset {
                dst: d,
                value: 7,
                count: 16,
                width: cuda_guest::proto::MemsetWidth::W8,
                stream: Some(StreamId::DEFAULT),
            },
            true,
        );
    }
    assert_eq!(
        a.dtoh(d, 20),
        [7u8; 16]
            .iter()
            .chain(&big[16..20])
            .copied()
            .collect::<Vec<_>>()
    );
    a.ok(Request::MemFree { ptr: d });
    assert_eq!(server.service.stats().workers, 2);
    drop(a);
    drop(b);
    wait_no_workers(&server.service);
    server.wait_idle();
    assert_no_zombies();
    let s = server.service.stats();
    assert_eq!((s.workers_started, s.worker_failures), (2, 0));
}

#[test]
fn a_sticky_fault_ends_only_that_guests_worker_and_a_fresh_one_follows() {
    let server = server();
    let mut a = server.client();
    let mut b = server.client();
    let (fa, fb) = (ready(&mut a), ready(&mut b));
    let (x, y) = inputs();
    let before = a.mem_info();
    let old_pid = server
        .service
        .worker_pids()
        .iter()
        .find(|(g, _)| g.ends_with("#1"))
        .map(|(_, p)| *p)
        .expect("A's worker");
    // A: a kernel writing through 0x10.
    let (da, db) = (a.alloc(4096), a.alloc(4096));
    let bad = a.send(
        launch_req(
            &fa,
            8,
            128,
            StreamId::DEFAULT,
            &[
                &da.0.to_le_bytes(),
                &db.0.to_le_bytes(),
                &0x10u64.to_le_bytes(),
                &1024u32.to_le_bytes(),
            ],
        ),
        true,
    );
    let r = a.call(Request::CtxSynchronize);
    assert_eq!(r.status, Status::ERROR_ILLEGAL_ADDRESS, "{:?}", r.detail());
    assert_eq!(
        r.cause.map(|c| (c.id, c.opcode)),
        Some((bad, Opcode::LaunchKernel))
    );
    // Sticky for A: every request needing its context, with the cause.
    let r = a.call(Request::MemAlloc { bytes: 16 });
    assert_eq!(r.status, Status::ERROR_ILLEGAL_ADDRESS);
    assert_eq!(r.cause.map(|c| c.id), Some(bad));
    // Device queries still answer.
    assert!(matches!(a.ok(Request::DeviceGetCount), ReplyBody::Count(1)));
    // B keeps computing right results.
    assert!(right(&vector_add(&mut b, &fb, &x, &y)));
    // A releases and retains: a fresh worker, old handles invalid.
    a.ok(Request::PrimaryCtxRelease { device: 0 });
    let started = server.service.stats().workers_started;
    let fresh = a.context();
    assert_eq!(server.service.stats().workers_started, started + 1);
    let pids = server.service.worker_pids();
    assert!(
        pids.iter().all(|(_, p)| *p != old_pid),
        "the faulted worker {old_pid} is gone: {pids:?}"
    );
    assert_eq!(pids.len(), 2, "{pids:?}");
    assert_ne!(fresh.0, 0);
    let r = a.call(Request::ModuleGetFunction {
        module: cuda_guest::proto::ModuleId(fa.function.0),
        name: "vector_add".into(),
    });
    assert_eq!(r.status, Status::ERROR_INVALID_HANDLE);
    let r = a.call(launch_req(
        &fa,
        1,
        32,
        StreamId::DEFAULT,
        &[
            &da.0.to_le_bytes(),
            &db.0.to_le_bytes(),
            &db.0.to_le_bytes(),
            &1u32.to_le_bytes(),
        ],
    ));
    assert_eq!(r.status, Status::ERROR_INVALID_HANDLE, "{:?}", r.detail());
    assert_eq!(a.mem_info(), before, "A's memory back to its level");
    let f = {
        let m = a.load(VECTOR_ADD);
        a.function(m, "vector_add")
    };
    assert!(right(&vector_add(&mut a, &f, &x, &y)));
    assert!(right(&vector_add(&mut b, &fb, &y, &x)));
    assert_eq!(b.mem_info(), (QUOTA, QUOTA));
    drop(a);
    drop(b);
    wait_no_workers(&server.service);
    server.wait_idle();
    assert_no_zombies();
    assert_eq!(server.service.stats().worker_failures, 0);
}

#[test]
fn a_killed_worker_fails_its_guest_only_and_is_reaped() {
    let server = server();
    let mut a = server.client();
    let mut b = server.client();
    let (fa, fb) = (ready(&mut a), ready(&mut b));
    let (x, y) = inputs();
    let before = a.mem_info();
    let pid = server
        .service
        .worker_pids()
        .iter()
        .find(|(g, _)| g.ends_with("#1"))
        .map(|(_, p)| *p)
        .expect("A's worker");
    // A: work queued, then a synchronising call; its worker is killed meanwhile.
    let n = 1u32 << 16;
    let (da, db, dc) = (
        a.alloc(u64::from(n) * 4),
        a.alloc(u64::from(n) * 4),
        a.alloc(u64::from(n) * 4),
    );
    for _ in 0..50 {
        a.send(
            launch_req(
                &fa,
                n / 128,
                128,
                StreamId::DEFAULT,
                &[
                    &da.0.to_le_bytes(),
                    &db.0.to_le_bytes(),
                    &dc.0.to_le_bytes(),
                    &n.to_le_bytes(),
                ],
            ),
            true,
        );
    }
    let sync = a.send(Request::CtxSynchronize, false);
    // SAFETY: plain kill(2) of a child process of this test (A's worker), by pid.
    assert_eq!(unsafe { libc_kill(pid as i32, 9) }, 0);
    let r = a.recv();
    assert_eq!(r.id, sync);
    assert_eq!(r.status, Status::ERROR_LAUNCH_FAILED, "{:?}", r.detail());
    // Sticky for A until it releases its context.
    let r = a.call(Request::MemAlloc { bytes: 16 });
    assert_eq!(r.status, Status::ERROR_LAUNCH_FAILED);
    assert_eq!(r.cause.map(|c| c.id), Some(sync));
    // Device queries go to a fresh worker.
    assert!(matches!(a.ok(Request::DeviceGetCount), ReplyBody::Count(1)));
    // B is untouched.
    assert!(right(&vector_add(&mut b, &fb, &x, &y)));
    a.ok(Request::PrimaryCtxRelease { device: 0 });
    a.context();
    assert_eq!(a.mem_info(), before);
    let f = {
        let m = a.load(VECTOR_ADD);
        a.function(m, "vector_add")
    };
    assert!(right(&vector_add(&mut a, &f, &x, &y)));
    assert_no_zombies();
    assert!(server.service.worker_pids().iter().all(|(_, p)| *p != pid));
    assert_eq!(server.service.stats().worker_failures, 1);
    drop(a);
    drop(b);
    wait_no_workers(&server.service);
    server.wait_idle();
    assert_no_zombies();
}

#[test]
fn a_guest_gone_mid_command_releases_its_worker() {
    let server = server();
    let mut a = server.client();
    let f = ready(&mut a);
    let n = 1u32 << 16;
    let d = a.alloc(u64::from(n) * 4);
    for _ in 0..20 {
        a.send(
            launch_req(
                &f,
                n / 128,
                128,
                StreamId::DEFAULT,
                &[
                    &d.0.to_le_bytes(),
                    &d.0.to_le_bytes(),
                    &d.0.to_le_bytes(),
                    &n.to_le_bytes(),
                ],
            ),
            true,
        );
    }
    a.send(Request::CtxSynchronize, false);
    drop(a);
    wait_no_workers(&server.service);
    server.wait_idle();
    assert_no_zombies();
    assert_eq!(server.service.stats().worker_failures, 0);
}

extern "C" {
    #[link_name = "kill"]
    fn libc_kill(pid: i32, sig: i32) -> i32;
}

#[test]
fn malformed_frames_through_the_relay() {
    use std::io::Write;
    let server = server();
    let mut a = server.client();
    let mut b = server.client();
    let fb = ready(&mut b);
    a.context();
    // A bad payload is answered by the worker's decoder; the session goes on.
    let id = a.take_id();
    let mut frame = vec![20, 0, 0, 0];
    frame.extend_from_slice(&id.to_le_bytes());
    frame.extend_from_slice(&0x0401u16.to_le_bytes());
    frame.extend_from_slice(&0u16.to_le_bytes());
    frame.extend_from_slice(&[1, 2, 3, 4]);
    a.s.write_all(&frame).unwrap();
    let r = a.recv();
    assert_eq!((r.id, r.status), (id, Status::ERROR_INVALID_VALUE));
    assert_ne!(a.alloc(64).0, 0);
    // An unknown opcode: the worker's closing notice, and the connection ends.
    let mut frame = vec![16, 0, 0, 0];
    frame.extend_from_slice(&a.take_id().to_le_bytes());
    frame.extend_from_slice(&0x7777u16.to_le_bytes());
    frame.extend_from_slice(&0u16.to_le_bytes());
    a.s.write_all(&frame).unwrap();
    let rest = a.recv_until_closed();
    assert!(
        rest.last().is_some_and(|r| r.is_closing_notice()),
        "{rest:?}"
    );
    // An oversized length: the supervisor's closing notice.
    let mut c = server.client();
    let mut frame = u32::MAX.to_le_bytes().to_vec();
    frame.extend_from_slice(&[0; 12]);
    c.s.write_all(&frame).unwrap();
    let rest = c.recv_until_closed();
    assert_eq!(rest.len(), 1);
    assert!(rest[0].is_closing_notice());
    // B is untouched.
    let (x, y) = inputs();
    assert!(right(&vector_add(&mut b, &fb, &x, &y)));
    drop(b);
    wait_no_workers(&server.service);
    server.wait_idle();
    assert_no_zombies();
    assert_eq!(server.service.stats().worker_failures, 0);
}

#[test]
fn graceful_shutdown_notifies_and_ends_the_workers() {
    let server = server();
    let mut c = server.client();
    c.context();
    c.alloc(1 << 20);
    let goodbye = server.client();
    let mut g = goodbye;
    g.ok(Request::Goodbye);
    let svc = server.service.clone();
    server.shutdown.trigger();
    let rest = c.recv_until_closed();
    assert_eq!(rest.len(), 1, "{rest:?}");
    assert!(rest[0].is_closing_notice());
    assert_eq!(rest[0].status, Status::ERROR_DEINITIALIZED);
    server.stop();
    wait_no_workers(&svc);
    let s = svc.stats();
    assert_eq!((s.sessions, s.workers, s.worker_failures), (0, 0, 0));
    assert_no_zombies();
}
