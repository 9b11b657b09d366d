//! The service under attack (issue 12): what one guest sends must never end the service
//! or cost another guest, and every quota means what it says. Each test is a regression
//! test of a defect an independent attacker found, or one of our own adversarial cases.

mod service_support;

use std::time::{Duration, Instant};

use cuda_guest::proto::{Request, Status, StreamId};
use cuda_guest::service::{Isolation, Quota, ServiceConfig};
use service_support::*;

/// A kernel that never ends.
const SPIN: &str = ".version 7.0\n.target sm_80\n.address_size 64\n\n\
.visible .entry spin()\n{\n$L_spin:\n\tbra.uni $L_spin;\n}\n";

fn vector_add_works(c: &mut Client) {
    let m = c.load(VECTOR_ADD);
    let f = c.function(m, "vector_add");
    let a: Vec<f32> = (0..300).map(|i| i as f32).collect();
    let b: Vec<f32> = (0..300).map(|i| 2.0 * i as f32).collect();
    let out = vector_add(c, &f, &a, &b);
    assert!(out.iter().enumerate().all(|(i, v)| *v == 3.0 * i as f32));
}

/// Four guests start a kernel that never ends and disconnect (two of them while
/// waiting for it): within the documented bound their sessions are gone, their kernels
/// stopped, and new guests are admitted again.
fn gone_guests_stop_costing(isolation: Isolation) {
    let server = Server::start(ServiceConfig {
        max_sessions: 4,
        isolation,
        ..ServiceConfig::default()
    });
    for i in 0..4 {
        let mut c = server.client();
        c.context();
        let m = c.load(SPIN);
        let f = c.function(m, "spin");
        c.send(launch_req(&f, 64, 128, StreamId::DEFAULT, &[]), true);
        // The kernel runs.
        assert_eq!(
            c.status(Request::StreamQuery {
                stream: StreamId::DEFAULT
            }),
            Status::ERROR_NOT_READY
        );
        if i % 2 == 0 {
            // Its thread blocks in the synchronisation when the guest goes.
            c.send(Request::CtxSynchronize, false);
            std::thread::sleep(Duration::from_millis(50));
        }
        drop(c);
    }
    let t = Instant::now();
    loop {
        let s = server.service.stats();
        if s.sessions == 0 && s.contexts == 0 && s.workers == 0 {
            break;
        }
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "gone guests still held after {:?}: {s:?} (the launch time limit is 60 s)",
            t.elapsed()
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    println!("4 gone guests released in {:?}", t.elapsed());
    let mut c = server.client();
    c.context();
    vector_add_works(&mut c);
    drop(c);
    server.wait_idle();
    assert_eq!(server.service.stats().worker_failures, 0);
}

#[test]
fn gone_guests_stop_costing_in_process() {
    gone_guests_stop_costing(Isolation::InProcess);
}

#[test]
fn gone_guests_stop_costing_with_worker_processes() {
    gone_guests_stop_costing(process_isolation("sim"));
    assert_no_zombies();
}

/// A guest that queued many throttled launches and left does not keep its thread
/// sleeping through them.
#[test]
fn a_gone_guest_does_not_sleep_through_its_throttled_launches() {
    let server = Server::start(ServiceConfig {
        quota: Quota {
            launches_per_sec: Some(2),
            launch_burst: Some(1),
            ..Quota::default()
        },
        ..ServiceConfig::default()
    });
    let mut c = server.client();
    c.context();
    let m = c.load(EMPTY_KERNEL);
    let f = c.function(m, "empty");
    for _ in 0..200 {
        c.send(launch_req(&f, 1, 1, StreamId::DEFAULT, &[]), true);
    }
    std::thread::sleep(Duration::from_millis(100));
    let t = Instant::now();
    drop(c);
    server.wait_idle();
    assert!(
        t.elapsed() < Duration::from_secs(5),
        "200 launches at 2/s held the session {:?}",
        t.elapsed()
    );
}

/// The launch bucket starts with one token and holds one second's worth: from a
/// session's start the rate holds; after an idle second, one second's worth goes at
/// once and no more.
#[test]
fn the_launch_rate_holds_from_the_first_launch() {
    let rate = 100u32;
    let server = Server::start(ServiceConfig {
        quota: Quota {
            launches_per_sec: Some(rate),
            ..Quota::default()
        },
        ..ServiceConfig::default()
    });
    assert_eq!(server.service.config().quota.launch_bucket(), rate);
    let mut c = server.client();
    c.context();
    let m = c.load(EMPTY_KERNEL);
    let f = c.function(m, "empty");
    let t = Instant::now();
    for _ in 0..=50 {
        c.send(launch_req(&f, 1, 1, StreamId::DEFAULT, &[]), true);
    }
    c.ok(Request::CtxSynchronize);
    let took = t.elapsed();
    println!("51 launches at {rate}/s from the start: {took:?}");
    assert!(
        took >= Duration::from_millis(490),
        "51 launches at {rate}/s from a standing start took {took:?} (at least 0.5 s)"
    );
    // Idle long enough to fill the bucket: `rate` launches then go without waiting.
    std::thread::sleep(Duration::from_millis(1200));
    let before = server.service.stats().throttled_launches;
    for _ in 0..rate {
        c.send(launch_req(&f, 1, 1, StreamId::DEFAULT, &[]), true);
    }
    c.ok(Request::CtxSynchronize);
    assert_eq!(server.service.stats().throttled_launches, before);
    // ... and then the rate again: 21 more take at least 0.2 s.
    let t = Instant::now();
    for _ in 0..21 {
        c.send(launch_req(&f, 1, 1, StreamId::DEFAULT, &[]), true);
    }
    c.ok(Request::CtxSynchronize);
    assert!(
        t.elapsed() >= Duration::from_millis(150),
        "{:?}",
        t.elapsed()
    );
    assert!(server.service.stats().throttled_launches > before);
}

/// A module whose `.global` array takes 15 MiB, and a kernel that writes its end.
const BIG_GLOBAL: &str = ".version 7.0\n.target sm_80\n.address_size 64\n\n\
.visible .global .align 4 .b8 big[15728640];\n\n\
.visible .entry touch()\n{\n\t.reg .b32 %r<2>;\n\t.reg .b64 %rd<2>;\n\
\tmov.u64 %rd1, big;\n\tmov.u32 %r1, 7;\n\tst.global.u32 [%rd1+15728636], %r1;\n\tret;\n}\n";

/// `MemGetInfo` and the memory quota count a module's variables, and unloading the
/// module gives their memory back.
fn module_memory_counts(isolation: Isolation) {
    const MIB: u64 = 1 << 20;
    let server = Server::start(ServiceConfig {
        quota: Quota {
            device_memory: 16 * MIB,
            ..Quota::default()
        },
        isolation,
        ..ServiceConfig::default()
    });
    let mut c = server.client();
    c.context();
    assert_eq!(c.mem_info(), (16 * MIB, 16 * MIB));
    let m = c.load(BIG_GLOBAL);
    assert_eq!(c.mem_info(), (MIB, 16 * MIB));
    let f = c.function(m, "touch");
    c.send(launch_req(&f, 1, 1, StreamId::DEFAULT, &[]), true);
    c.ok(Request::CtxSynchronize);
    let r = c.call(Request::MemAlloc { bytes: 2 * MIB });
    assert_eq!(r.status, Status::ERROR_OUT_OF_MEMORY);
    assert!(
        r.detail().unwrap_or("").contains("quota"),
        "{:?}",
        r.detail()
    );
    let small = c.alloc(MIB / 2);
    assert_eq!(c.mem_info(), (MIB / 2, 16 * MIB));
    // A second copy of the module does not fit: refused before it is loaded.
    let r = c.call(Request::ModuleLoadData {
        image: BIG_GLOBAL.as_bytes().to_vec(),
    });
    assert_eq!(r.status, Status::ERROR_OUT_OF_MEMORY);
    assert!(
        r.detail().unwrap_or("").contains(".global"),
        "{:?}",
        r.detail()
    );
    assert_eq!(c.mem_info(), (MIB / 2, 16 * MIB));
    c.ok(Request::ModuleUnload { module: m });
    assert_eq!(c.mem_info(), (16 * MIB - MIB / 2, 16 * MIB));
    // Its memory is really back: the module loads again, and 15 MiB more after it no.
    let m = c.load(BIG_GLOBAL);
    assert_eq!(c.mem_info(), (MIB / 2, 16 * MIB));
    c.ok(Request::ModuleUnload { module: m });
    c.ok(Request::MemFree { ptr: small });
    let big = c.alloc(16 * MIB);
    c.ok(Request::MemFree { ptr: big });
    drop(c);
    server.wait_idle();
}

#[test]
fn module_memory_counts_in_process() {
    module_memory_counts(Isolation::InProcess);
}

#[test]
fn module_memory_counts_with_worker_processes() {
    module_memory_counts(process_isolation("sim"));
}

/// The same kernel asked for again is the same handle and no new object.
#[test]
fn one_function_handle_per_module_and_name() {
    let server = Server::start(ServiceConfig {
        quota: Quota {
            max_objects: 64,
            ..Quota::default()
        },
        ..ServiceConfig::default()
    });
    let mut c = server.client();
    c.context();
    let m = c.load(VECTOR_ADD);
    let first = c.function(m, "vector_add");
    for _ in 0..200 {
        let again = c.function(m, "vector_add");
        assert_eq!(again.function, first.function);
        assert_eq!(again.params, first.params);
    }
    // Each module has its own.
    let m2 = c.load(VECTOR_ADD);
    let other = c.function(m2, "vector_add");
    assert_ne!(other.function, first.function);
    // 60 more objects fit: 2 modules + 2 functions are all that is held.
    let ptrs: Vec<_> = (0..60).map(|_| c.alloc(256)).collect();
    assert_eq!(
        c.status(Request::MemAlloc { bytes: 256 }),
        Status::ERROR_OUT_OF_MEMORY
    );
    for p in ptrs {
        c.ok(Request::MemFree { ptr: p });
    }
    // After an unload the handle is dead, and a reload gives a new one.
    c.ok(Request::ModuleUnload { module: m });
    let r = c.call(launch_req(
        &first,
        1,
        1,
        StreamId::DEFAULT,
        &[&[0; 8], &[0; 8], &[0; 8], &[0; 4]],
    ));
    assert_eq!(r.status, Status::ERROR_INVALID_HANDLE);
    let m3 = c.load(VECTOR_ADD);
    assert_ne!(c.function(m3, "vector_add").function, first.function);
}

/// `n` copies of the vector_add kernel under different names: a module of about
/// `n * 1.4` KB of PTX.
fn many_kernels(n: usize) -> String {
    let at = VECTOR_ADD.find(".visible .entry").unwrap();
    let (head, body) = VECTOR_ADD.split_at(at);
    let mut out = head.to_string();
    for i in 0..n {
        out.push_str(&body.replace("vector_add", &format!("vector_add_{i}")));
    }
    out
}

/// The host memory a guest's modules make the service hold is under a quota: a module
/// over it is refused (and unloaded), and unloading gives the room back.
#[test]
fn module_host_memory_is_under_a_quota() {
    let server = Server::start(ServiceConfig {
        quota: Quota {
            module_host_memory: 1 << 20,
            ..Quota::default()
        },
        ..ServiceConfig::default()
    });
    let mut c = server.client();
    c.context();
    let big = many_kernels(2000);
    let r = c.call(Request::ModuleLoadData {
        image: big.into_bytes(),
    });
    assert_eq!(r.status, Status::ERROR_OUT_OF_MEMORY);
    let detail = r.detail().unwrap_or("").to_string();
    assert!(detail.contains("host memory"), "{detail}");
    // Modules that fit, until they do not; then one unload makes room again.
    let small = many_kernels(20);
    let mut loaded = Vec::new();
    let last = loop {
        let r = c.call(Request::ModuleLoadData {
            image: small.clone().into_bytes(),
        });
        match (r.status, r.body) {
            (Status::SUCCESS, cuda_guest::proto::ReplyBody::Module(m)) => loaded.push(m),
            (status, _) => break status,
        }
        assert!(loaded.len() < 10_000, "no host memory quota");
    };
    assert_eq!(last, Status::ERROR_OUT_OF_MEMORY);
    assert!(
        loaded.len() >= 2,
        "{} modules of 20 kernels fit in 1 MiB",
        loaded.len()
    );
    println!("{} modules of 20 kernels fit in 1 MiB", loaded.len());
    c.ok(Request::ModuleUnload { module: loaded[0] });
    c.load(&small);
    let f = c.function(loaded[1], "vector_add_19");
    assert!(f.params.is_some());
}

/// A query between a faulting launch and the synchronisation that finds the fault does
/// not lose the launch as the fault's cause (a query waits for nothing).
#[test]
fn a_query_keeps_the_cause_of_a_later_fault() {
    let server = Server::start(ServiceConfig::default());
    let mut c = server.client();
    c.context();
    let cuda_guest::proto::ReplyBody::Stream(st) = c.ok(Request::StreamCreate {
        flags: 0,
        priority: 0,
    }) else {
        panic!()
    };
    let m = c.load(include_str!("../../fixtures/ptx/oob_write.nvrtc.ptx"));
    let f = c.function(m, "oob_write");
    let n = 1u32 << 20;
    let out = c.alloc(u64::from(n) * 4);
    let launch = c.send(
        launch_req(
            &f,
            n / 128 + 1,
            128,
            st,
            &[&out.0.to_le_bytes(), &n.to_le_bytes()],
        ),
        true,
    );
    let first = c.call(Request::StreamQuery { stream: st });
    let r = if first.status == Status::ERROR_NOT_READY {
        c.call(Request::StreamSynchronize { stream: st })
    } else {
        first
    };
    assert_eq!(r.status, Status::ERROR_ILLEGAL_ADDRESS);
    assert_eq!(r.cause.map(|c| c.id), Some(launch), "{r:?}");
}
