//! Several contexts in one guest session (protocol 1.1's `CtxCreate`/`CtxDestroy`,
//! `docs/protocol.md` section 11): the primary context and created ones, each with its
//! own allocations, modules, functions, streams, events and errors; a handle of another
//! context is `CUDA_ERROR_INVALID_HANDLE`; `CtxDestroy` frees and kills; the primary
//! context is released, never destroyed; the quotas are the session's; a sticky fault
//! poisons its own context only on the simulator (every context of the session on a
//! native-like backend); and the same flows with every guest in a worker process.

mod service_support;

use std::sync::Arc;

use cuda_guest::driver::{
    Backend, BackendKind, Context, Device, DeviceAttribute, DevicePtr, Event, EventFlags, Function,
    FunctionAttribute, HostAlloc, HostAllocFlags, HostRegisterFlags, LaunchConfig, LaunchKind,
    MemInfo, Module, ParamLayout, Result, SimBackend, Stream, StreamFlags,
};
use cuda_guest::proto::{
    ContextId, EventId, FunctionInfo, HostSource, MemsetWidth, ModuleId, Opcode, ReplyBody,
    Request, Status, StreamId,
};
use cuda_guest::service::{BackendChoice, Isolation, Quota, ServiceConfig, MAX_CREATED_CONTEXTS};
use cuda_guest::sim::SimConfig;
use service_support::*;

const MIB: u64 = 1 << 20;
const QUOTA: u64 = 64 * MIB;

fn config(isolation: Isolation) -> ServiceConfig {
    ServiceConfig {
        quota: Quota {
            device_memory: QUOTA,
            ..Quota::default()
        },
        isolation,
        ..ServiceConfig::default()
    }
}

/// Guests in the service's process.
fn in_process() -> Server {
    Server::start(config(Isolation::InProcess))
}

/// Every guest in a worker process of its own (the `cuda_worker` example).
fn isolated() -> Server {
    Server::start_with(
        BackendChoice::Simulator(SimConfig::default()),
        config(process_isolation("sim")),
    )
}

fn ctx_create(c: &mut Client) -> ContextId {
    match c.ok(Request::CtxCreate {
        device: 0,
        flags: 0,
    }) {
        ReplyBody::Context(h) => h,
        b => panic!("{b:?}"),
    }
}

fn set(c: &mut Client, ctx: ContextId) {
    c.ok(Request::CtxSetCurrent { ctx });
}

fn stream(c: &mut Client) -> StreamId {
    match c.ok(Request::StreamCreate {
        flags: 0,
        priority: 0,
    }) {
        ReplyBody::Stream(s) => s,
        b => panic!("{b:?}"),
    }
}

fn event(c: &mut Client) -> EventId {
    match c.ok(Request::EventCreate { flags: 0 }) {
        ReplyBody::Event(e) => e,
        b => panic!("{b:?}"),
    }
}

/// vector_add loaded in the current context.
fn ready(c: &mut Client) -> (ModuleId, FunctionInfo) {
    let m = c.load(VECTOR_ADD);
    let f = c.function(m, "vector_add");
    (m, f)
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

/// A kernel of the current context writing through 0x10, pipelined: its request id.
fn fault(c: &mut Client, f: &FunctionInfo) -> u64 {
    let (da, db) = (c.alloc(4096), c.alloc(4096));
    c.send(
        launch_req(
            f,
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
    )
}

/// `status` with the cause `bad` (a pipelined launch).
#[track_caller]
fn sticky(c: &mut Client, request: Request, status: Status, bad: u64) {
    let what = format!("{:?}", request.opcode());
    let r = c.call(request);
    assert_eq!(r.status, status, "{what}: {:?}", r.detail());
    assert_eq!(
        r.cause.map(|c| (c.id, c.opcode)),
        Some((bad, Opcode::LaunchKernel)),
        "{what}"
    );
}

fn each_context_holds_its_own(server: &Server) {
    let mut c = server.client();
    let p = c.context();
    let (mp, fp) = ready(&mut c);
    let sp = stream(&mut c);
    let a = ctx_create(&mut c);
    let (ma, fa) = ready(&mut c);
    let sa = stream(&mut c);
    let b = ctx_create(&mut c);
    let (mb, fb) = ready(&mut c);
    assert!(p != a && a != b && p != b, "{p:?} {a:?} {b:?}");
    assert!(mp != ma && ma != mb, "a module per context");
    assert!(fp.function != fa.function && fa.function != fb.function);
    assert_ne!(sp, sa);
    // Each context computes with its own kernel.
    let (x, y) = inputs();
    for (ctx, f) in [(p, &fp), (a, &fa), (b, &fb)] {
        set(&mut c, ctx);
        assert!(right(&vector_add(&mut c, f, &x, &y)), "in {ctx:?}");
    }
    // An allocation in each: all of them count, whichever context asks.
    set(&mut c, p);
    let dp = c.alloc(MIB);
    set(&mut c, a);
    let da = c.alloc(2 * MIB);
    set(&mut c, b);
    let db = c.alloc(3 * MIB);
    assert_eq!(c.mem_info(), (QUOTA - 6 * MIB, QUOTA));
    set(&mut c, p);
    assert_eq!(c.mem_info(), (QUOTA - 6 * MIB, QUOTA));
    c.htod(dp, &[2; 64]);
    set(&mut c, a);
    c.htod(da, &[1; 64]);
    set(&mut c, b);
    c.htod(db, &[3; 64]);
    for (ctx, d, v) in [(p, dp, 2u8), (a, da, 1), (b, db, 3)] {
        set(&mut c, ctx);
        assert_eq!(c.dtoh(d, 64), [v; 64], "in {ctx:?}");
    }
    // Streams of their own context.
    set(&mut c, a);
    c.ok(Request::StreamSynchronize { stream: sa });
    set(&mut c, p);
    c.ok(Request::StreamSynchronize { stream: sp });
    if server.service.config().isolation == Isolation::InProcess {
        assert_eq!(server.service.stats().contexts, 3);
        assert_eq!(server.service.stats().device_bytes, 6 * MIB);
    }
    c.ok(Request::Goodbye);
    drop(c);
    server.wait_idle();
}

#[test]
fn each_context_of_a_session_holds_its_own_objects() {
    each_context_holds_its_own(&in_process());
}

#[test]
fn each_context_holds_its_own_objects_in_a_worker_process() {
    let server = isolated();
    each_context_holds_its_own(&server);
    wait_no_workers(&server.service);
    assert_no_zombies();
}

fn handles_of_another_context_are_refused(server: &Server) {
    let mut c = server.client();
    let p = c.context();
    let a = ctx_create(&mut c);
    let (ma, fa) = ready(&mut c);
    let sa = stream(&mut c);
    let ea = event(&mut c);
    let da = c.alloc(4096);
    let b = ctx_create(&mut c);
    let eb = event(&mut c);
    let db = c.alloc(4096);
    let launch = |f: &FunctionInfo, s: StreamId, d: DevicePtr| {
        launch_req(
            f,
            1,
            32,
            s,
            &[
                &d.0.to_le_bytes(),
                &d.0.to_le_bytes(),
                &d.0.to_le_bytes(),
                &16u32.to_le_bytes(),
            ],
        )
    };
    // In B, A's handles are another context's: CUDA_ERROR_INVALID_HANDLE.
    let foreign = [
        Request::ModuleGetFunction {
            module: ma,
            name: "vector_add".into(),
        },
        Request::ModuleGetGlobal {
            module: ma,
            name: "x".into(),
        },
        Request::ModuleUnload { module: ma },
        Request::FuncGetAttribute {
            function: fa.function,
            attribute: 0,
        },
        Request::FuncSetAttribute {
            function: fa.function,
            attribute: 8,
            value: 0,
        },
        launch(&fa, StreamId::DEFAULT, db),
        Request::StreamSynchronize { stream: sa },
        Request::StreamQuery { stream: sa },
        Request::StreamWaitEvent {
            stream: StreamId::DEFAULT,
            event: ea,
            flags: 0,
        },
        Request::EventRecord {
            event: ea,
            stream: StreamId::DEFAULT,
        },
        Request::EventRecord {
            event: eb,
            stream: sa,
        },
        Request::EventQuery { event: ea },
        Request::EventSynchronize { event: ea },
        Request::EventElapsedTime { start: eb, end: ea },
        Request::Memset {
            dst: db,
            count: 16,
            value: 0,
            width: MemsetWidth::W8,
            stream: Some(sa),
        },
        Request::StreamDestroy { stream: sa },
        Request::EventDestroy { event: ea },
    ];
    for r in foreign {
        let what = format!("{:?}", r.opcode());
        let reply = c.call(r);
        assert_eq!(
            reply.status,
            Status::ERROR_INVALID_HANDLE,
            "{what} with A's handle in B: {:?}",
            reply.detail()
        );
        assert!(
            reply.detail().unwrap_or("").contains("another context"),
            "{:?}",
            reply.detail()
        );
    }
    // A's memory is no range of B's (as any address outside B's allocations).
    assert_eq!(
        c.status(Request::MemcpyHtoD {
            dst: da,
            src: HostSource::Inline(vec![1; 16]),
            stream: None,
        }),
        Status::ERROR_INVALID_VALUE
    );
    assert_eq!(
        c.status(Request::MemFree { ptr: da }),
        Status::ERROR_INVALID_VALUE
    );
    // A pipelined launch of A's kernel in B: B's deferred error, not A's.
    let bad = c.send(launch(&fa, StreamId::DEFAULT, db), true);
    set(&mut c, a);
    c.ok(Request::CtxSynchronize);
    set(&mut c, b);
    let r = c.call(Request::CtxSynchronize);
    assert_eq!(r.status, Status::ERROR_INVALID_HANDLE);
    assert_eq!(
        r.cause.map(|c| (c.id, c.opcode)),
        Some((bad, Opcode::LaunchKernel))
    );
    // In A they all work, and nothing of the refusals was done.
    set(&mut c, a);
    assert_eq!(c.function(ma, "vector_add").function, fa.function);
    // A number that is no CU_FUNC_ATTRIBUTE_* is refused before the backend sees it.
    let r = c.call(Request::FuncGetAttribute {
        function: fa.function,
        attribute: 99,
    });
    assert_eq!(r.status, Status::ERROR_INVALID_VALUE, "{:?}", r.detail());
    assert!(
        r.detail()
            .unwrap_or("")
            .contains("99 is not a CU_FUNC_ATTRIBUTE_"),
        "{:?}",
        r.detail()
    );
    c.ok(Request::EventRecord {
        event: ea,
        stream: sa,
    });
    c.ok(Request::EventSynchronize { event: ea });
    c.ok(Request::StreamSynchronize { stream: sa });
    let (x, y) = inputs();
    assert!(right(&vector_add(&mut c, &fa, &x, &y)));
    c.ok(Request::MemFree { ptr: da });
    c.ok(Request::StreamDestroy { stream: sa });
    c.ok(Request::EventDestroy { event: ea });
    c.ok(Request::ModuleUnload { module: ma });
    // The primary context knows none of them either.
    set(&mut c, p);
    assert_eq!(
        c.status(Request::EventQuery { event: eb }),
        Status::ERROR_INVALID_HANDLE
    );
    drop(c);
    server.wait_idle();
}

#[test]
fn a_handle_of_another_context_is_an_invalid_handle() {
    handles_of_another_context_are_refused(&in_process());
}

#[test]
fn a_handle_of_another_context_is_an_invalid_handle_in_a_worker_process() {
    let server = isolated();
    handles_of_another_context_are_refused(&server);
    wait_no_workers(&server.service);
}

fn destroying_frees_and_kills(server: &Server) {
    let mut c = server.client();
    let p = c.context();
    let before = c.mem_info();
    let a = ctx_create(&mut c);
    let d = c.alloc(4 * MIB);
    let (m, f) = ready(&mut c);
    let s = stream(&mut c);
    let e = event(&mut c);
    c.ok(Request::EventRecord {
        event: e,
        stream: s,
    });
    // Work still queued when it is destroyed: CtxDestroy waits for it.
    for _ in 0..20 {
        c.send(
            launch_req(
                &f,
                16,
                128,
                s,
                &[
                    &d.0.to_le_bytes(),
                    &d.0.to_le_bytes(),
                    &d.0.to_le_bytes(),
                    &2048u32.to_le_bytes(),
                ],
            ),
            true,
        );
    }
    assert_eq!(c.mem_info(), (before.0 - 4 * MIB, QUOTA));
    c.ok(Request::CtxDestroy { ctx: a });
    // It was current: now none is.
    assert_eq!(
        c.status(Request::MemAlloc { bytes: 16 }),
        Status::ERROR_INVALID_CONTEXT
    );
    assert_eq!(
        c.status(Request::CtxSetCurrent { ctx: a }),
        Status::ERROR_INVALID_CONTEXT
    );
    assert_eq!(
        c.status(Request::CtxDestroy { ctx: a }),
        Status::ERROR_INVALID_CONTEXT
    );
    // Its memory is back, its handles are dead.
    set(&mut c, p);
    assert_eq!(c.mem_info(), before);
    for r in [
        Request::ModuleGetFunction {
            module: m,
            name: "vector_add".into(),
        },
        Request::StreamSynchronize { stream: s },
        Request::EventQuery { event: e },
        launch_req(
            &f,
            1,
            1,
            StreamId::DEFAULT,
            &[&[0; 8], &[0; 8], &[0; 8], &[0; 4]],
        ),
    ] {
        assert_eq!(c.status(r), Status::ERROR_INVALID_HANDLE);
    }
    assert_eq!(
        c.status(Request::MemFree { ptr: d }),
        Status::ERROR_INVALID_VALUE
    );
    if server.service.config().isolation == Isolation::InProcess {
        let st = server.service.stats();
        assert_eq!((st.contexts, st.device_bytes), (1, 0));
    }
    // A context made afterwards starts empty.
    let b = ctx_create(&mut c);
    assert_ne!(a, b);
    assert_eq!(c.mem_info(), before);
    drop(c);
    server.wait_idle();
}

#[test]
fn ctx_destroy_frees_the_context_and_kills_its_handles() {
    destroying_frees_and_kills(&in_process());
}

#[test]
fn ctx_destroy_frees_the_context_and_kills_its_handles_in_a_worker_process() {
    let server = isolated();
    destroying_frees_and_kills(&server);
    wait_no_workers(&server.service);
}

#[test]
fn the_primary_context_is_released_never_destroyed() {
    let server = in_process();
    let mut c = server.client();
    let p = c.context();
    let d = c.alloc(MIB);
    for ctx in [p, ContextId(0), ContextId(p.0 ^ (1 << 40)), ContextId(7)] {
        assert_eq!(
            c.status(Request::CtxDestroy { ctx }),
            Status::ERROR_INVALID_CONTEXT,
            "{ctx:?}"
        );
    }
    // Also while a created context is current.
    let a = ctx_create(&mut c);
    assert_eq!(
        c.status(Request::CtxDestroy { ctx: p }),
        Status::ERROR_INVALID_CONTEXT
    );
    set(&mut c, p);
    c.htod(d, &[9; 8]);
    assert_eq!(c.dtoh(d, 8), [9; 8]);
    // Bad arguments of CtxCreate.
    assert_eq!(
        c.status(Request::CtxCreate {
            device: 1,
            flags: 0
        }),
        Status::ERROR_INVALID_DEVICE
    );
    for flags in [3, 0x100, u32::MAX] {
        assert_eq!(
            c.status(Request::CtxCreate { device: 0, flags }),
            Status::ERROR_INVALID_VALUE,
            "flags {flags:#x}"
        );
    }
    // A refused creation leaves the current context current.
    assert_ne!(c.alloc(16).0, 0);
    // Releasing the primary context leaves the created one alive (and current if it
    // is).
    set(&mut c, a);
    c.ok(Request::PrimaryCtxRelease { device: 0 });
    let da = c.alloc(MIB);
    c.ok(Request::MemFree { ptr: da });
    assert_eq!(
        c.status(Request::CtxSetCurrent { ctx: p }),
        Status::ERROR_INVALID_CONTEXT
    );
    assert_eq!(server.service.stats().contexts, 1);
    drop(c);
    server.wait_idle();
}

#[test]
fn the_quotas_count_every_context() {
    let server = Server::start(ServiceConfig {
        quota: Quota {
            device_memory: 4 * MIB,
            max_objects: 6,
            ..Quota::default()
        },
        ..ServiceConfig::default()
    });
    let mut c = server.client();
    let p = c.context();
    c.alloc(3 * MIB);
    let a = ctx_create(&mut c);
    let r = c.call(Request::MemAlloc { bytes: 2 * MIB });
    assert_eq!(r.status, Status::ERROR_OUT_OF_MEMORY);
    assert!(
        r.detail().unwrap_or("").contains("quota"),
        "{:?}",
        r.detail()
    );
    let da = c.alloc(MIB);
    // MemGetInfo: the quota less everything the session holds, in either context.
    assert_eq!(c.mem_info(), (0, 4 * MIB));
    set(&mut c, p);
    assert_eq!(c.mem_info(), (0, 4 * MIB));
    // Objects: two allocations and the created context so far; three streams more.
    for _ in 0..3 {
        stream(&mut c);
    }
    let r = c.call(Request::StreamCreate {
        flags: 0,
        priority: 0,
    });
    assert_eq!(r.status, Status::ERROR_OUT_OF_MEMORY, "{:?}", r.detail());
    assert_eq!(
        c.status(Request::CtxCreate {
            device: 0,
            flags: 0
        }),
        Status::ERROR_OUT_OF_MEMORY
    );
    set(&mut c, a);
    assert_eq!(
        c.status(Request::EventCreate { flags: 0 }),
        Status::ERROR_OUT_OF_MEMORY
    );
    // Destroying A gives back its memory and its objects (itself and its allocation).
    c.ok(Request::CtxDestroy { ctx: a });
    set(&mut c, p);
    assert_eq!(c.mem_info(), (MIB, 4 * MIB));
    stream(&mut c);
    event(&mut c);
    assert_eq!(
        c.status(Request::MemFree { ptr: da }),
        Status::ERROR_INVALID_VALUE
    );
    drop(c);
    server.wait_idle();

    // At most MAX_CREATED_CONTEXTS contexts of CtxCreate at once.
    let server = in_process();
    let mut c = server.client();
    let made: Vec<ContextId> = (0..MAX_CREATED_CONTEXTS)
        .map(|_| ctx_create(&mut c))
        .collect();
    let r = c.call(Request::CtxCreate {
        device: 0,
        flags: 0,
    });
    assert_eq!(r.status, Status::ERROR_OUT_OF_MEMORY, "{:?}", r.detail());
    c.ok(Request::CtxDestroy { ctx: made[3] });
    ctx_create(&mut c);
    assert_eq!(server.service.stats().contexts, MAX_CREATED_CONTEXTS);
    drop(c);
    server.wait_idle();
}

#[test]
fn ctx_set_current_switches_between_the_sessions_contexts() {
    let server = in_process();
    let mut c = server.client();
    let p = c.context();
    let a = ctx_create(&mut c);
    let da = c.alloc(4096);
    let b = ctx_create(&mut c);
    let db = c.alloc(4096);
    // The current context is B (the last made): A's allocation is not its.
    assert_eq!(
        c.status(Request::MemFree { ptr: da }),
        Status::ERROR_INVALID_VALUE
    );
    set(&mut c, a);
    assert_eq!(
        c.status(Request::MemFree { ptr: db }),
        Status::ERROR_INVALID_VALUE
    );
    // A pipelined failure in A is A's deferred error: B's synchronisation does not see
    // it, A's does, once.
    let bad = c.send(
        Request::Memset {
            dst: DevicePtr(da.0 + 4096),
            count: 4,
            value: 0,
            width: MemsetWidth::W8,
            stream: Some(StreamId::DEFAULT),
        },
        true,
    );
    set(&mut c, b);
    c.ok(Request::CtxSynchronize);
    set(&mut c, a);
    let r = c.call(Request::CtxSynchronize);
    assert_eq!(r.status, Status::ERROR_INVALID_VALUE);
    assert_eq!(
        r.cause.map(|c| (c.id, c.opcode)),
        Some((bad, Opcode::MemsetAsync))
    );
    c.ok(Request::CtxSynchronize);
    c.ok(Request::MemFree { ptr: da });
    // No context current: requests needing one are INVALID_CONTEXT; device queries and
    // context commands go on.
    set(&mut c, ContextId(0));
    assert_eq!(
        c.status(Request::MemAlloc { bytes: 16 }),
        Status::ERROR_INVALID_CONTEXT
    );
    assert_eq!(
        c.status(Request::CtxSynchronize),
        Status::ERROR_INVALID_CONTEXT
    );
    assert!(matches!(c.ok(Request::DeviceGetCount), ReplyBody::Count(1)));
    // A new context is current at once.
    let n = ctx_create(&mut c);
    assert!(n != a && n != b && n != p);
    let dn = c.alloc(16);
    c.ok(Request::MemFree { ptr: dn });
    set(&mut c, b);
    c.ok(Request::MemFree { ptr: db });
    // Made-up and freed handles are refused.
    assert_eq!(
        c.status(Request::CtxSetCurrent {
            ctx: ContextId(b.0 ^ (1 << 40))
        }),
        Status::ERROR_INVALID_CONTEXT
    );
    c.ok(Request::CtxDestroy { ctx: n });
    assert_eq!(
        c.status(Request::CtxSetCurrent { ctx: n }),
        Status::ERROR_INVALID_CONTEXT
    );
    drop(c);
    server.wait_idle();
}

#[test]
fn a_sticky_fault_in_a_created_context_leaves_the_primary_working() {
    let server = in_process();
    let mut c = server.client();
    let mut other = server.client();
    let p = c.context();
    let (_, fp) = ready(&mut c);
    let dp = c.alloc(4096);
    c.htod(dp, &[5; 64]);
    let a = ctx_create(&mut c);
    let (_, fa) = ready(&mut c);
    let bad = fault(&mut c, &fa);
    sticky(
        &mut c,
        Request::CtxSynchronize,
        Status::ERROR_ILLEGAL_ADDRESS,
        bad,
    );
    // A is poisoned: every request in it gets the fault and its cause, until destroyed.
    sticky(
        &mut c,
        Request::MemAlloc { bytes: 16 },
        Status::ERROR_ILLEGAL_ADDRESS,
        bad,
    );
    assert_eq!(
        server.service.stats().contexts,
        1,
        "A was torn down at once"
    );
    // The primary context keeps working, its memory intact.
    set(&mut c, p);
    assert_eq!(c.dtoh(dp, 64), [5; 64]);
    let (x, y) = inputs();
    assert!(right(&vector_add(&mut c, &fp, &x, &y)));
    // A still answers its fault.
    set(&mut c, a);
    sticky(
        &mut c,
        Request::MemGetInfo,
        Status::ERROR_ILLEGAL_ADDRESS,
        bad,
    );
    // Another guest is untouched.
    other.context();
    let (_, fo) = ready(&mut other);
    assert!(right(&vector_add(&mut other, &fo, &x, &y)));
    // Destroying A ends it; its memory came back with the fault already.
    c.ok(Request::CtxDestroy { ctx: a });
    set(&mut c, p);
    assert_eq!(c.mem_info(), (QUOTA - 4096, QUOTA));
    let b = ctx_create(&mut c);
    let (_, fb) = ready(&mut c);
    assert!(right(&vector_add(&mut c, &fb, &x, &y)));
    assert_ne!(a, b);
    assert_eq!(server.service.stats().contexts, 3);
    drop(c);
    drop(other);
    server.wait_idle();
}

#[test]
fn a_sticky_fault_in_a_created_context_under_process_isolation() {
    let server = isolated();
    let mut c = server.client();
    let p = c.context();
    let (_, fp) = ready(&mut c);
    let dp = c.alloc(4096);
    c.htod(dp, &[5; 64]);
    let started = server.service.stats().workers_started;
    let pid = server.service.worker_pids()[0].1;
    let a = ctx_create(&mut c);
    let (_, fa) = ready(&mut c);
    let bad = fault(&mut c, &fa);
    sticky(
        &mut c,
        Request::CtxSynchronize,
        Status::ERROR_ILLEGAL_ADDRESS,
        bad,
    );
    sticky(
        &mut c,
        Request::MemAlloc { bytes: 16 },
        Status::ERROR_ILLEGAL_ADDRESS,
        bad,
    );
    // On the simulator the worker's other context is unharmed: the same worker serves
    // the primary context on.
    set(&mut c, p);
    assert_eq!(c.dtoh(dp, 64), [5; 64]);
    let (x, y) = inputs();
    assert!(right(&vector_add(&mut c, &fp, &x, &y)));
    // The primary context released first: A is still held, so no fresh worker yet.
    c.ok(Request::PrimaryCtxRelease { device: 0 });
    assert!(matches!(c.ok(Request::DeviceGetCount), ReplyBody::Count(1)));
    assert_eq!(server.service.worker_pids()[0].1, pid);
    set(&mut c, a);
    sticky(
        &mut c,
        Request::MemGetInfo,
        Status::ERROR_ILLEGAL_ADDRESS,
        bad,
    );
    assert_eq!(server.service.stats().workers_started, started);
    // Its last context destroyed: the faulted worker is replaced at the next request.
    c.ok(Request::CtxDestroy { ctx: a });
    let fresh = c.context();
    assert_eq!(server.service.stats().workers_started, started + 1);
    let pids = server.service.worker_pids();
    assert!(
        pids.iter().all(|(_, q)| *q != pid),
        "{pid} replaced: {pids:?}"
    );
    assert_ne!(fresh.0, 0);
    assert_eq!(c.mem_info(), (QUOTA, QUOTA));
    let (_, f) = ready(&mut c);
    assert!(right(&vector_add(&mut c, &f, &x, &y)));
    // The faulted worker's handles mean nothing in the fresh one.
    assert_eq!(
        c.status(Request::CtxSetCurrent { ctx: a }),
        Status::ERROR_INVALID_CONTEXT
    );
    drop(c);
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
fn a_killed_worker_with_created_contexts() {
    let server = isolated();
    let mut c = server.client();
    c.context();
    c.alloc(MIB);
    let a = ctx_create(&mut c);
    ready(&mut c);
    let pid = server.service.worker_pids()[0].1;
    let sync = c.send(Request::CtxSynchronize, false);
    let r = c.recv();
    assert_eq!((r.id, r.status), (sync, Status::SUCCESS));
    // SAFETY: plain kill(2) of a child process of this test (the guest's worker), by pid.
    assert_eq!(unsafe { libc_kill(pid as i32, 9) }, 0);
    // Every context the guest held is lost: requests needing one get 719.
    let r = c.call(Request::MemAlloc { bytes: 16 });
    assert_eq!(r.status, Status::ERROR_LAUNCH_FAILED, "{:?}", r.detail());
    let first = r.id;
    for req in [
        Request::MemGetInfo,
        Request::CtxCreate {
            device: 0,
            flags: 0,
        },
        Request::PrimaryCtxRetain { device: 0 },
    ] {
        let r = c.call(req);
        assert_eq!(r.status, Status::ERROR_LAUNCH_FAILED);
        assert_eq!(r.cause.map(|c| c.id), Some(first));
    }
    // The supervisor answers for the contexts it knew: destroying A and releasing the
    // primary one end the sticky rule; a handle it never gave is refused.
    assert_eq!(
        c.status(Request::CtxDestroy {
            ctx: ContextId(a.0 ^ 4)
        }),
        Status::ERROR_INVALID_CONTEXT
    );
    c.ok(Request::CtxDestroy { ctx: a });
    let r = c.call(Request::MemAlloc { bytes: 16 });
    assert_eq!(r.status, Status::ERROR_LAUNCH_FAILED, "the primary is held");
    c.ok(Request::PrimaryCtxRelease { device: 0 });
    // At once a fresh worker.
    c.context();
    assert_eq!(c.mem_info(), (QUOTA, QUOTA));
    let (_, g) = ready(&mut c);
    let (x, y) = inputs();
    assert!(right(&vector_add(&mut c, &g, &x, &y)));
    assert!(server.service.worker_pids().iter().all(|(_, q)| *q != pid));
    assert_eq!(server.service.stats().worker_failures, 1);
    drop(c);
    wait_no_workers(&server.service);
    server.wait_idle();
    assert_no_zombies();
}

/// A backend shared by all sessions whose faults poison the whole process, like the
/// native driver's: the simulator underneath, reporting itself as native. On it the
/// session makes every context with `context_create` and applies the native rule.
#[derive(Debug)]
struct NativeLike(SimBackend);

impl Backend for NativeLike {
    fn kind(&self) -> BackendKind {
        BackendKind::Native
    }
    fn instance_id(&self) -> u32 {
        self.0.instance_id()
    }
    fn driver_version(&self) -> Result<i32> {
        self.0.driver_version()
    }
    fn device_count(&self) -> Result<u32> {
        self.0.device_count()
    }
    fn device_name(&self, dev: Device) -> Result<String> {
        self.0.device_name(dev)
    }
    fn device_uuid(&self, dev: Device) -> Result<[u8; 16]> {
        self.0.device_uuid(dev)
    }
    fn device_pci_bus_id(&self, dev: Device) -> Result<String> {
        self.0.device_pci_bus_id(dev)
    }
    fn device_attribute(&self, dev: Device, attr: DeviceAttribute) -> Result<i32> {
        self.0.device_attribute(dev, attr)
    }
    fn device_total_mem(&self, dev: Device) -> Result<u64> {
        self.0.device_total_mem(dev)
    }
    fn primary_context_retain(&self, dev: Device) -> Result<Context> {
        self.0.primary_context_retain(dev)
    }
    fn primary_context_release(&self, ctx: Context) -> Result<()> {
        self.0.primary_context_release(ctx)
    }
    unsafe fn primary_context_reset(&self, dev: Device) -> Result<()> {
        // SAFETY: the caller's guarantees, passed on.
        unsafe { self.0.primary_context_reset(dev) }
    }
    fn context_create(&self, dev: Device) -> Result<Context> {
        self.0.context_create(dev)
    }
    unsafe fn context_destroy(&self, ctx: Context) -> Result<()> {
        // SAFETY: the caller's guarantees, passed on.
        unsafe { self.0.context_destroy(ctx) }
    }
    fn context_set_current(&self, ctx: &Context) -> Result<()> {
        self.0.context_set_current(ctx)
    }
    fn context_synchronize(&self) -> Result<()> {
        self.0.context_synchronize()
    }
    fn mem_get_info(&self) -> Result<MemInfo> {
        self.0.mem_get_info()
    }
    fn module_load_ptx(&self, ptx: &str) -> Result<Module> {
        self.0.module_load_ptx(ptx)
    }
    fn module_load_ptx_named(&self, name: &str, ptx: &str) -> Result<Module> {
        self.0.module_load_ptx_named(name, ptx)
    }
    unsafe fn module_unload(&self, module: Module) -> Result<()> {
        // SAFETY: the caller's guarantees, passed on.
        unsafe { self.0.module_unload(module) }
    }
    fn module_get_function(&self, module: &Module, name: &str) -> Result<Function> {
        self.0.module_get_function(module, name)
    }
    fn module_get_global(&self, module: &Module, name: &str) -> Result<(DevicePtr, usize)> {
        self.0.module_get_global(module, name)
    }
    fn mem_alloc(&self, bytes: usize) -> Result<DevicePtr> {
        self.0.mem_alloc(bytes)
    }
    fn mem_free(&self, ptr: DevicePtr) -> Result<()> {
        self.0.mem_free(ptr)
    }
    unsafe fn memset_d16_async(
        &self,
        dst: DevicePtr,
        value: u16,
        count: usize,
        stream: &Stream,
    ) -> Result<()> {
        // SAFETY: the caller's guarantees, passed on.
        unsafe { self.0.memset_d16_async(dst, value, count, stream) }
    }
    unsafe fn memset_d32_async(
        &self,
        dst: DevicePtr,
        value: u32,
        count: usize,
        stream: &Stream,
    ) -> Result<()> {
        // SAFETY: the caller's guarantees, passed on.
        unsafe { self.0.memset_d32_async(dst, value, count, stream) }
    }
    unsafe fn memset_d8_async(
        &self,
        dst: DevicePtr,
        value: u8,
        bytes: usize,
        stream: &Stream,
    ) -> Result<()> {
        // SAFETY: the caller's guarantees, passed on.
        unsafe { self.0.memset_d8_async(dst, value, bytes, stream) }
    }
    unsafe fn memcpy_htod_async(
        &self,
        dst: DevicePtr,
        src: *const u8,
        bytes: usize,
        stream: &Stream,
    ) -> Result<()> {
        // SAFETY: the caller's guarantees, passed on.
        unsafe { self.0.memcpy_htod_async(dst, src, bytes, stream) }
    }
    unsafe fn memcpy_dtoh_async(
        &self,
        dst: *mut u8,
        src: DevicePtr,
        bytes: usize,
        stream: &Stream,
    ) -> Result<()> {
        // SAFETY: the caller's guarantees, passed on.
        unsafe { self.0.memcpy_dtoh_async(dst, src, bytes, stream) }
    }
    unsafe fn memcpy_dtod_async(
        &self,
        dst: DevicePtr,
        src: DevicePtr,
        bytes: usize,
        stream: &Stream,
    ) -> Result<()> {
        // SAFETY: the caller's guarantees, passed on.
        unsafe { self.0.memcpy_dtod_async(dst, src, bytes, stream) }
    }
    fn host_alloc(&self, bytes: usize, flags: HostAllocFlags) -> Result<HostAlloc> {
        self.0.host_alloc(bytes, flags)
    }
    unsafe fn host_free(&self, mem: HostAlloc) -> Result<()> {
        // SAFETY: the caller's guarantees, passed on.
        unsafe { self.0.host_free(mem) }
    }
    unsafe fn host_register(
        &self,
        ptr: *mut u8,
        bytes: usize,
        flags: HostRegisterFlags,
    ) -> Result<()> {
        // SAFETY: the caller's guarantees, passed on.
        unsafe { self.0.host_register(ptr, bytes, flags) }
    }
    unsafe fn host_unregister(&self, ptr: *mut u8) -> Result<()> {
        // SAFETY: the caller's guarantees, passed on.
        unsafe { self.0.host_unregister(ptr) }
    }
    fn stream_create(&self, flags: StreamFlags) -> Result<Stream> {
        self.0.stream_create(flags)
    }
    fn stream_synchronize(&self, stream: &Stream) -> Result<()> {
        self.0.stream_synchronize(stream)
    }
    fn stream_query(&self, stream: &Stream) -> Result<bool> {
        self.0.stream_query(stream)
    }
    fn stream_wait_event(&self, stream: &Stream, event: &Event) -> Result<()> {
        self.0.stream_wait_event(stream, event)
    }
    fn stream_destroy(&self, stream: Stream) -> Result<()> {
        self.0.stream_destroy(stream)
    }
    fn event_create(&self, flags: EventFlags) -> Result<Event> {
        self.0.event_create(flags)
    }
    fn event_record(&self, event: &Event, stream: &Stream) -> Result<()> {
        self.0.event_record(event, stream)
    }
    fn event_synchronize(&self, event: &Event) -> Result<()> {
        self.0.event_synchronize(event)
    }
    fn event_query(&self, event: &Event) -> Result<bool> {
        self.0.event_query(event)
    }
    fn event_elapsed_ms(&self, start: &Event, end: &Event) -> Result<f32> {
        self.0.event_elapsed_ms(start, end)
    }
    fn event_destroy(&self, event: Event) -> Result<()> {
        self.0.event_destroy(event)
    }
    fn module_host_bytes(&self, module: &Module) -> Option<u64> {
        self.0.module_host_bytes(module)
    }
    fn function_params(&self, function: &Function) -> Result<Option<Vec<ParamLayout>>> {
        self.0.function_params(function)
    }
    fn function_attribute(&self, function: &Function, attribute: FunctionAttribute) -> Result<i32> {
        self.0.function_attribute(function, attribute)
    }
    fn function_set_attribute(
        &self,
        function: &Function,
        attribute: FunctionAttribute,
        value: i32,
    ) -> Result<()> {
        self.0.function_set_attribute(function, attribute, value)
    }
    unsafe fn launch_kind(
        &self,
        kind: LaunchKind,
        function: &Function,
        config: &LaunchConfig,
        stream: &Stream,
        args: &[&[u8]],
    ) -> Result<()> {
        // SAFETY: the caller's guarantees, passed on.
        unsafe { self.0.launch_kind(kind, function, config, stream, args) }
    }
}

#[test]
fn on_a_native_like_shared_backend_a_fault_poisons_every_context_of_the_session() {
    let shared = NativeLike(SimBackend::new(SimConfig::default()).unwrap());
    let server = Server::start_with(
        BackendChoice::Shared(Arc::new(shared)),
        config(Isolation::InProcess),
    );
    let mut c = server.client();
    let mut other = server.client();
    let p = c.context();
    let (_, fp) = ready(&mut c);
    let a = ctx_create(&mut c);
    let (_, fa) = ready(&mut c);
    // Every context of a session is a context of its own on the shared backend.
    assert_eq!(server.service.stats().contexts, 2);
    let (x, y) = inputs();
    assert!(right(&vector_add(&mut c, &fa, &x, &y)));
    set(&mut c, p);
    assert!(right(&vector_add(&mut c, &fp, &x, &y)));
    set(&mut c, a);
    let bad = fault(&mut c, &fa);
    sticky(
        &mut c,
        Request::CtxSynchronize,
        Status::ERROR_ILLEGAL_ADDRESS,
        bad,
    );
    // The native rule: the process is poisoned, so is every context of the session,
    // with the same fault and cause.
    set(&mut c, p);
    sticky(
        &mut c,
        Request::MemAlloc { bytes: 16 },
        Status::ERROR_ILLEGAL_ADDRESS,
        bad,
    );
    assert_eq!(server.service.stats().contexts, 0);
    // (On the simulator underneath the other session's context is unharmed; on the
    // driver it would not be, which is why native guests run in worker processes.)
    other.context();
    let (_, fo) = ready(&mut other);
    assert!(right(&vector_add(&mut other, &fo, &x, &y)));
    // Destroyed and released, the session starts over.
    c.ok(Request::CtxDestroy { ctx: a });
    c.ok(Request::PrimaryCtxRelease { device: 0 });
    c.context();
    let (_, f) = ready(&mut c);
    assert!(right(&vector_add(&mut c, &f, &x, &y)));
    drop(c);
    drop(other);
    server.wait_idle();
}
