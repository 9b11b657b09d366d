//! The driver of one `service_dispatch` fuzz input, shared by the fuzz target
//! (`fuzz_targets/service_dispatch.rs`) and the test that replays the seeds
//! (`cuda-guest/tests/service_embed.rs`, `dispatch_fuzz_seeds`), both through
//! `#[path = ...] mod`.
//!
//! An input is a 4-byte header and then records of [`RECORD`] bytes, each one request
//! the fuzzer chose. The header picks the client's `max_frame`, its features and how far
//! the session is set up before the records (by default: hello, `Init`, the primary
//! context retained and made current). A record is `op, args[16], meta, mut_pos,
//! mut_val`: `op` selects the request, `args` its fields. Handles and device addresses
//! are never raw bytes: they are drawn from what earlier replies returned (live or
//! released ones), bit-flipped ones, or a few special values, so a short input reaches
//! real modules, functions, streams, events and allocations. `meta` bits 0-1 choose the
//! id step (ids increase), bit 2 asks for a reply to a request that may go without one
//! (`NO_REPLY` is the default for those), and `meta & 0xf0 == 0xf0` mutates the encoded
//! frame (bits 2-3: the mutation, at `mut_pos` with `mut_val`).
//!
//! The driver keeps a model of the session (the contexts the guest holds, its primary
//! context's retain count, the current context, each context's objects and sticky
//! error, and the known bytes of each allocation and module variable) and checks, after
//! every request, what must hold whatever the input (a failed check panics):
//! - every request awaiting a reply gets exactly one reply frame that fits the
//!   negotiated limits, with its id and opcode; a `NO_REPLY` request gets nothing; a
//!   protocol violation (bad header, an id not above the last, not one whole frame)
//!   gets the closing notice, and so does every frame after it;
//! - a cause names an earlier request with its opcode; a non-sticky one names a
//!   pipelined request and is reported once; a sticky error is answered to every
//!   request needing a context in the context it poisoned (the simulator's faults are
//!   per context), with the same cause, until that context is released (primary) or
//!   destroyed (created); the session's other contexts keep working;
//! - before `Init` requests needing it get `NOT_INITIALIZED`; without a current
//!   context, `INVALID_CONTEXT`;
//! - a released, foreign or bit-flipped handle, a handle of another context than the
//!   current one, or a range outside the current context's live allocations (and module
//!   variables whose address was asked), never succeeds; the requests whose outcome is
//!   certain (allocations within the quota, frees of live allocations, handle
//!   destruction, copies inside an allocation, a context made within the quotas or
//!   destroyed, a known variable or function attribute...) succeed; `ModuleGetFunction`
//!   gives one handle per (module, name); `CtxCreate` makes the new context current,
//!   `CtxDestroy` of the current one leaves none current, the primary context cannot be
//!   destroyed; a function attribute set reads back;
//! - the session's `mem_used()` equals its allocations plus its modules' variables (all
//!   contexts) and stays within the memory quota; `objects()` equals the live objects
//!   (created contexts included) and stays within `max_objects`; `MemGetInfo`'s total is
//!   the quota and `free + used == total`; the service's `device_bytes` and `contexts`
//!   (the contexts alive) agree;
//! - bytes written by synchronous copies and memsets read back the same (until a
//!   kernel of their context or an asynchronous write may have changed them);
//! - after a sticky error, a release to 0, `Goodbye`, a closing notice or the drop of
//!   the session, everything is released (`Service::stats`).
#![allow(dead_code)]

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use cuda_guest::proto::{
    Cause, ClientHello, ContextId, Decoded, DevicePtr, EventId, Features, FunctionId, HostDest,
    HostSource, KernelParams, Limits, MemsetWidth, Message, ModuleId, Opcode, ParamLayout, Refused,
    Reply, ReplyBody, Request, RequestFrame, ServerHello, SgEntry, Status, StreamId,
};
use cuda_guest::service::{BackendChoice, EmbeddedSession, Quota, Service, ServiceConfig};
use cuda_guest::sim::SimConfig;
use vm_memory::{Bytes, GuestAddress, GuestMemoryMmap};

/// The memory quota of a session: small enough for inputs to reach it.
pub const QUOTA_BYTES: u64 = 1 << 20;
/// The object quota of a session.
pub const MAX_OBJECTS: u32 = 32;
/// Bytes of the input header.
pub const HEADER: usize = 4;
/// Bytes of one record.
pub const RECORD: usize = 20;
/// Records run per input at most.
pub const MAX_STEPS: usize = 200;
/// Guest RAM: two regions with a hole between them.
pub const RAM: [(u64, u64); 2] = [(0, 0x4000), (0x10000, 0x1000)];
/// Longest inline copy an input makes.
const INLINE_CAP: u64 = 256 << 10;

// Record opcodes (`op % OPS`).
pub const OP_ALLOC: u8 = 0;
pub const OP_FREE: u8 = 1;
pub const OP_MEMINFO: u8 = 2;
pub const OP_MEMSET: u8 = 3;
pub const OP_HTOD: u8 = 4;
pub const OP_HTOD_SG: u8 = 5;
pub const OP_DTOH: u8 = 6;
pub const OP_DTOH_SG: u8 = 7;
pub const OP_DTOD: u8 = 8;
pub const OP_LOAD: u8 = 9;
pub const OP_LOAD_MUTATED: u8 = 10;
pub const OP_LOAD_GLOBALS: u8 = 11;
pub const OP_UNLOAD: u8 = 12;
pub const OP_GET_FUNCTION: u8 = 13;
pub const OP_LAUNCH: u8 = 14;
pub const OP_STREAM_CREATE: u8 = 15;
pub const OP_STREAM_DESTROY: u8 = 16;
pub const OP_STREAM_SYNC: u8 = 17;
pub const OP_STREAM_QUERY: u8 = 18;
pub const OP_STREAM_WAIT: u8 = 19;
pub const OP_EVENT_CREATE: u8 = 20;
pub const OP_EVENT_DESTROY: u8 = 21;
pub const OP_EVENT_RECORD: u8 = 22;
pub const OP_EVENT_SYNC: u8 = 23;
pub const OP_EVENT_QUERY: u8 = 24;
pub const OP_EVENT_ELAPSED: u8 = 25;
pub const OP_CTX_SYNC: u8 = 26;
pub const OP_SET_CURRENT: u8 = 27;
pub const OP_RETAIN: u8 = 28;
pub const OP_RELEASE: u8 = 29;
pub const OP_DEVICE: u8 = 30;
pub const OP_MISC: u8 = 31;
pub const OP_GOODBYE: u8 = 32;
pub const OP_BAD_ID: u8 = 33;
pub const OP_NO_REPLY_VIOLATION: u8 = 34;
pub const OP_JUNK: u8 = 35;
pub const OP_CTX_CREATE: u8 = 36;
pub const OP_CTX_DESTROY: u8 = 37;
pub const OP_GET_GLOBAL: u8 = 38;
pub const OP_FUNC_GET_ATTR: u8 = 39;
pub const OP_FUNC_SET_ATTR: u8 = 40;
/// Number of record opcodes.
pub const OPS: u8 = 41;
/// Contexts a session may make with `CtxCreate` at once.
const MAX_CREATED: usize = cuda_guest::service::MAX_CREATED_CONTEXTS;
/// Dynamic shared memory a kernel may opt in to on the simulator, beside 48 KiB of
/// static shared memory at most (`CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES`).
const OPT_IN_SURE: i32 = 166_912 - 49_152;

/// Meta bit: a reply is wanted for a request that may be pipelined.
pub const META_REPLY: u8 = 4;

/// The PTX modules inputs load (by index), the simulator's fixtures.
pub const FIXTURES: [(&str, &str); 16] = [
    (
        "vector_add",
        include_str!("../../../fixtures/ptx/vector_add.nvrtc.ptx"),
    ),
    (
        "saxpy",
        include_str!("../../../fixtures/ptx/saxpy.nvrtc.ptx"),
    ),
    (
        "infinite_loop",
        include_str!("../../../fixtures/ptx/infinite_loop.nvrtc.ptx"),
    ),
    (
        "oob_write",
        include_str!("../../../fixtures/ptx/oob_write.nvrtc.ptx"),
    ),
    (
        "use_after_free",
        include_str!("../../../fixtures/ptx/use_after_free.nvrtc.ptx"),
    ),
    (
        "misaligned",
        include_str!("../../../fixtures/ptx/misaligned.nvrtc.ptx"),
    ),
    (
        "histogram",
        include_str!("../../../fixtures/ptx/histogram.nvrtc.ptx"),
    ),
    (
        "reduce_block",
        include_str!("../../../fixtures/ptx/reduce_block.nvrtc.ptx"),
    ),
    (
        "dyn_shared",
        include_str!("../../../fixtures/ptx/dyn_shared.nvrtc.ptx"),
    ),
    (
        "vec4_const",
        include_str!("../../../fixtures/ptx/vec4_const.nvrtc.ptx"),
    ),
    (
        "shared_atomics",
        include_str!("../../../fixtures/ptx/shared_atomics.nvrtc.ptx"),
    ),
    (
        "warp_reduce",
        include_str!("../../../fixtures/ptx/warp_reduce.nvrtc.ptx"),
    ),
    (
        "divergent_barrier",
        include_str!("../../../fixtures/ptx/divergent_barrier.nvrtc.ptx"),
    ),
    (
        "shared_oob",
        include_str!("../../../fixtures/ptx/shared_oob.nvrtc.ptx"),
    ),
    (
        "transpose2d",
        include_str!("../../../fixtures/ptx/transpose2d.nvrtc.ptx"),
    ),
    (
        "device_call",
        include_str!("../../../fixtures/ptx/device_call.nvrtc.ptx"),
    ),
];

/// The service the inputs run on: the simulator with a small instruction budget (a
/// spinning kernel ends with a launch timeout) and small quotas.
pub fn service() -> Service {
    let sim = SimConfig {
        threads: 1,
        instruction_budget: 20_000,
        time_limit: Some(Duration::from_secs(2)),
        memory_limit: 1 << 30,
        // A fuzzed kernel's printf goes nowhere.
        output: cuda_guest::sim::Output(std::sync::Arc::new(|_, _| {})),
        devices: 1,
        engine: cuda_guest::sim::Engine::from_env(),
    };
    let config = ServiceConfig {
        quota: Quota {
            device_memory: QUOTA_BYTES,
            max_objects: MAX_OBJECTS,
            max_module_bytes: 64 << 10,
            launches_per_sec: Some(1_000_000),
            launch_burst: Some(16),
            ..Quota::default()
        },
        ..ServiceConfig::default()
    };
    Service::new(BackendChoice::Simulator(sim), config).expect("the service starts")
}

/// The guest's RAM ([`RAM`]).
pub fn guest_memory() -> GuestMemoryMmap {
    let ranges: Vec<(GuestAddress, usize)> = RAM
        .iter()
        .map(|&(a, n)| (GuestAddress(a), n as usize))
        .collect();
    GuestMemoryMmap::from_ranges(&ranges).expect("guest memory")
}

/// What an input reached (for the seeds' test).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Summary {
    /// Frames handed to the session.
    pub frames: usize,
    /// Replies other than closing notices.
    pub replies: usize,
    /// Successful replies.
    pub successes: usize,
    /// Modules loaded.
    pub modules: usize,
    /// Modules unloaded.
    pub unloads: usize,
    /// Function handles given (new ones).
    pub functions: usize,
    /// Launches sent (with or without reply).
    pub launches: usize,
    /// Sticky errors seen (the first reply of each).
    pub sticky: usize,
    /// Deferred (non-sticky) errors reported with a cause.
    pub deferred: usize,
    /// `CUDA_ERROR_OUT_OF_MEMORY` replies (quotas).
    pub out_of_memory: usize,
    /// Bytes compared with what was written.
    pub compared: usize,
    /// The session ended (goodbye or closing notice).
    pub closed: bool,
    /// It ended with a closing notice.
    pub notice: bool,
    /// Contexts made with `CtxCreate`.
    pub contexts: usize,
    /// Contexts destroyed with `CtxDestroy`.
    pub destroyed: usize,
    /// Module variables found (`ModuleGetGlobal`).
    pub globals: usize,
    /// Function attributes read or set.
    pub attributes: usize,
}

/// Builds one record (for hand-made inputs): `args` (at most 16 bytes) padded with 0.
pub fn rec(op: u8, args: &[u8]) -> [u8; RECORD] {
    rec_meta(op, args, 0)
}

/// Builds one record with its meta byte.
pub fn rec_meta(op: u8, args: &[u8], meta: u8) -> [u8; RECORD] {
    let mut r = [0u8; RECORD];
    r[0] = op;
    r[1..1 + args.len()].copy_from_slice(args);
    r[17] = meta;
    r
}

/// Runs one input on a fresh session of `svc` (which must have no other session) with
/// guest memory `mem`; panics when a check fails.
pub fn run(svc: &Service, mem: &GuestMemoryMmap, data: &[u8]) -> Summary {
    let mut header = [0u8; HEADER];
    let n = data.len().min(HEADER);
    header[..n].copy_from_slice(&data[..n]);
    let records = data.get(HEADER..).unwrap_or(&[]);
    let [cfg, fill, _, _] = header;
    // Guest RAM starts with the same bytes every run.
    for &(start, len) in &RAM {
        let bytes = pattern(len, fill);
        mem.write_slice(&bytes, GuestAddress(start))
            .expect("guest RAM");
    }
    let before = svc.stats();
    assert_eq!(
        (before.sessions, before.contexts, before.device_bytes),
        (0, 0, 0),
        "the service is idle before the input"
    );
    let max_frame = match cfg & 3 {
        2 => 4096,
        3 => 64 << 10,
        _ => 1 << 20,
    };
    let features = if cfg & 4 != 0 {
        Features::PIPELINING
    } else {
        Features::ALL
    };
    let mut summary = Summary::default();
    {
        let mut s = svc.session("fuzz").expect("a session");
        let hello = s.handshake(&ClientHello::new(features, max_frame).encode());
        let Ok(Decoded::Frame { frame: hello, .. }) = ServerHello::decode(&hello) else {
            panic!("the hello is not answered with a ServerHello");
        };
        assert!(hello.status.is_success(), "the hello is refused");
        assert_eq!(hello.features, features, "granted features");
        assert_eq!(hello.limits.max_frame, max_frame);
        assert!(hello.limits.max_objects <= MAX_OBJECTS);
        let mut m = Model::new(hello.limits, hello.features);
        let setup = (cfg >> 3) & 3;
        if setup != 3 {
            m.exchange(
                &mut s,
                svc,
                mem,
                m.frame(Request::Init { flags: 0 }),
                &mut summary,
            );
        }
        if setup < 2 {
            m.exchange(
                &mut s,
                svc,
                mem,
                m.frame(Request::PrimaryCtxRetain { device: 0 }),
                &mut summary,
            );
            let ctx = m.primary.unwrap_or(0);
            m.exchange(
                &mut s,
                svc,
                mem,
                m.frame(Request::CtxSetCurrent {
                    ctx: ContextId(ctx),
                }),
                &mut summary,
            );
            assert!(m.current.is_some(), "setup: a current context");
        }
        for chunk in records.chunks(RECORD).take(MAX_STEPS) {
            let mut r = [0u8; RECORD];
            r[..chunk.len()].copy_from_slice(chunk);
            if let Some(bytes) = m.generate(&r) {
                m.exchange(&mut s, svc, mem, bytes, &mut summary);
            }
            if m.closed {
                // One more frame: the closing notice again.
                let again = RequestFrame::new(m.last_id + 1, Request::DeviceGetCount)
                    .to_bytes()
                    .expect("encodes");
                let out = s.handle_frame(&again, mem);
                let r = m.one_reply(&out);
                m.ensure(
                    r.is_closing_notice(),
                    "a frame after the end: the closing notice",
                );
                break;
            }
        }
        summary.closed = m.closed;
        if std::env::var_os("DISPATCH_TRACE").is_some() {
            eprintln!("{}", m.trace.join("\n"));
        }
    }
    let after = svc.stats();
    assert_eq!(
        (after.sessions, after.contexts, after.device_bytes),
        (0, 0, 0),
        "everything released when the session is dropped"
    );
    summary
}

/// `len` bytes of a pattern chosen by `seed`.
fn pattern(len: u64, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed) ^ (i >> 8) as u8)
        .collect()
}

/// A request for the trace, its bulk data shortened.
fn describe(r: &Request) -> String {
    match r {
        Request::MemcpyHtoD {
            dst,
            src: HostSource::Inline(d),
            stream,
        } => format!(
            "MemcpyHtoD {{ dst: {:#x}, inline {} bytes, stream: {stream:?} }}",
            dst.0,
            d.len()
        ),
        Request::Ping { data } => format!("Ping {{ {} bytes }}", data.len()),
        Request::ModuleLoadData { image } => {
            let text = String::from_utf8_lossy(image);
            // The variables of a small (generated) module.
            let vars: Vec<&str> = text
                .lines()
                .filter(|l| {
                    image.len() < 400 && (l.starts_with(".global") || l.starts_with(".const"))
                })
                .collect();
            format!(
                "ModuleLoadData {{ {} bytes, kernels {:?} {vars:?} }}",
                image.len(),
                entry_names(&text)
            )
        }
        other => format!("{other:?}"),
    }
}

/// The module-scope `.global`/`.const` variables of a PTX text and their sizes, found
/// by a plain scan of lines like the fixtures' and the generated modules' (`.global
/// .align 4 .u32 name = 7;`, `.const .align 8 .b8 name[16];`).
fn variables(text: &str) -> Vec<(String, u64)> {
    let mut out = Vec::new();
    for line in text.lines() {
        let line = line.trim_start_matches(".visible ").trim();
        if !(line.starts_with(".global") || line.starts_with(".const")) {
            continue;
        }
        let decl = line.split(['=', ';']).next().unwrap_or("");
        let Some(last) = decl.split_whitespace().last() else {
            continue;
        };
        let (name, count) = match last.split_once('[') {
            Some((n, c)) => (n, c.trim_end_matches(']').parse::<u64>().ok()),
            None => (last, Some(1)),
        };
        let elem = [
            (".b8", 1),
            (".u8", 1),
            (".u32", 4),
            (".b32", 4),
            (".f32", 4),
            (".u64", 8),
            (".b64", 8),
        ]
        .iter()
        .find(|(t, _)| decl.split_whitespace().any(|w| w == *t))
        .map(|(_, n)| *n);
        if let (Some(count), Some(elem)) = (count, elem) {
            out.push((name.to_string(), count * elem));
        }
    }
    out
}

/// The `.entry` names of a PTX text, found by a plain scan.
fn entry_names(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(i) = rest.find(".entry") {
        rest = &rest[i + 6..];
        let name: String = rest
            .trim_start()
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_' || *c == '$')
            .collect();
        if !name.is_empty() && !out.contains(&name) {
            out.push(name);
        }
    }
    out
}

/// The fields of one record, read in order (0 past the end).
struct Args<'a> {
    b: &'a [u8],
    i: usize,
}

impl Args<'_> {
    fn u8(&mut self) -> u8 {
        let v = self.b.get(self.i).copied().unwrap_or(0);
        self.i += 1;
        v
    }
    fn u16(&mut self) -> u16 {
        u16::from_le_bytes([self.u8(), self.u8()])
    }
    fn u32(&mut self) -> u32 {
        u32::from_le_bytes([self.u8(), self.u8(), self.u8(), self.u8()])
    }
}

#[derive(Debug)]
struct Alloc {
    /// The context it was made in.
    ctx: u64,
    /// A module variable (from `ModuleGetGlobal`) of this module, not an allocation.
    var_of: Option<u64>,
    ptr: u64,
    size: u64,
    live: bool,
    /// Known bytes (written by synchronous copies and memsets since the last kernel).
    data: Vec<u8>,
    known: Vec<bool>,
}

#[derive(Debug)]
struct Module {
    h: u64,
    ctx: u64,
    live: bool,
    kernels: Vec<String>,
    /// Its `.global`/`.const` variables and their sizes (certain when `exact`).
    vars: Vec<(String, u64)>,
    /// Device memory of its variables (what `mem_used` grew by when it loaded).
    bytes: u64,
    /// Its kernel names are certain (a fixture or a generated module, not mutated).
    exact: bool,
}

#[derive(Debug)]
struct Func {
    h: u64,
    ctx: u64,
    live: bool,
    module: u64,
    name: String,
    layout: Option<Vec<ParamLayout>>,
    /// Attributes set: `MAX_DYNAMIC_SHARED_SIZE_BYTES`, `PREFERRED_SHARED_MEMORY_CARVEOUT`.
    max_dynamic: Option<i32>,
    carveout: i32,
}

#[derive(Debug, Clone, Copy)]
struct Handle {
    h: u64,
    ctx: u64,
    live: bool,
}

/// A context the guest holds.
#[derive(Debug)]
struct Ctx {
    h: u64,
    primary: bool,
    /// Alive on the backend (not torn down by a sticky fault).
    alive: bool,
    sticky: Sticky,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Sticky {
    No,
    /// The context was torn down by a pipelined request: the next request that needs a
    /// context learns the status and cause.
    Silent,
    Known(Status, Cause),
}

/// What the generator meant a module load to be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Load {
    Fixture,
    Mutated,
    Globals { bytes: u64, valid: bool },
}

/// What the session makes of a frame's bytes.
enum Seen {
    Frame(RequestFrame),
    Refused(Refused),
    Violation,
}

struct Model {
    limits: Limits,
    features: Features,
    initialized: bool,
    /// The contexts the guest holds (released and destroyed ones are removed).
    contexts: Vec<Ctx>,
    /// The primary context's handle while it is retained.
    primary: Option<u64>,
    contexts_seen: Vec<u64>,
    retains: u32,
    current: Option<u64>,
    allocs: Vec<Alloc>,
    modules: Vec<Module>,
    funcs: Vec<Func>,
    streams: Vec<Handle>,
    events: Vec<Handle>,
    handles_seen: HashSet<u64>,
    sent: HashMap<u64, Opcode>,
    pipelined: HashSet<u64>,
    reported: HashSet<u64>,
    last_id: u64,
    closed: bool,
    /// The module load the generator made last (until the frame is sent).
    load: Option<Load>,
    trace: Vec<String>,
}

impl Model {
    fn new(limits: Limits, features: Features) -> Model {
        Model {
            limits,
            features,
            initialized: false,
            contexts: Vec::new(),
            primary: None,
            contexts_seen: Vec::new(),
            retains: 0,
            current: None,
            allocs: Vec::new(),
            modules: Vec::new(),
            funcs: Vec::new(),
            streams: Vec::new(),
            events: Vec::new(),
            handles_seen: HashSet::new(),
            sent: HashMap::new(),
            pipelined: HashSet::new(),
            reported: HashSet::new(),
            last_id: 0,
            closed: false,
            load: None,
            trace: Vec::new(),
        }
    }

    #[track_caller]
    fn ensure(&self, ok: bool, what: &str) {
        if !ok {
            self.fail(what);
        }
    }

    #[track_caller]
    fn fail(&self, what: &str) -> ! {
        let from = if std::env::var_os("DISPATCH_TRACE").is_some() {
            0
        } else {
            self.trace.len().saturating_sub(40)
        };
        panic!(
            "invariant failed: {what}\n--- the last requests and replies:\n{}",
            self.trace[from..].join("\n")
        );
    }

    fn note(&mut self, s: String) {
        let mut s = s;
        if s.len() > 400 {
            let mut end = 400;
            while !s.is_char_boundary(end) {
                end -= 1;
            }
            s.truncate(end);
            s.push_str("...");
        }
        self.trace.push(s);
    }

    fn frame(&self, request: Request) -> Vec<u8> {
        RequestFrame::new(self.last_id + 1, request)
            .to_bytes()
            .expect("a setup request encodes")
    }

    // ------------------------------------------------------------------ the state

    /// Device memory the session holds (all contexts): allocations and the variables
    /// of loaded modules.
    fn used(&self) -> u64 {
        self.allocs
            .iter()
            .filter(|a| a.live && a.var_of.is_none())
            .map(|a| a.size)
            .chain(self.modules.iter().filter(|m| m.live).map(|m| m.bytes))
            .sum()
    }

    /// Live objects (all contexts), the contexts made with `CtxCreate` included.
    fn objects(&self) -> usize {
        self.allocs
            .iter()
            .filter(|a| a.live && a.var_of.is_none())
            .count()
            + self.modules.iter().filter(|m| m.live).count()
            + self.funcs.iter().filter(|f| f.live).count()
            + self.streams.iter().filter(|s| s.live).count()
            + self.events.iter().filter(|e| e.live).count()
            + self.contexts.iter().filter(|c| !c.primary).count()
    }

    /// The context `h` the guest holds.
    fn ctx(&self, h: u64) -> Option<&Ctx> {
        self.contexts.iter().find(|c| c.h == h)
    }

    fn ctx_mut(&mut self, h: u64) -> Option<&mut Ctx> {
        self.contexts.iter_mut().find(|c| c.h == h)
    }

    /// Contexts alive on the backend (the service's `contexts`).
    fn alive(&self) -> usize {
        self.contexts.iter().filter(|c| c.alive).count()
    }

    /// The current context, when it is alive and not poisoned.
    fn cur(&self) -> Option<u64> {
        self.current.filter(|h| {
            self.ctx(*h)
                .is_some_and(|c| c.alive && c.sticky == Sticky::No)
        })
    }

    /// The current context's handle, or 0 (no object belongs to 0).
    fn at(&self) -> u64 {
        self.current.unwrap_or(0)
    }

    /// Everything made in context `h` is gone (its sticky fault, release or
    /// destruction).
    fn kill_ctx(&mut self, h: u64) {
        for a in self.allocs.iter_mut().filter(|a| a.ctx == h) {
            a.live = false;
            a.data = Vec::new();
            a.known = Vec::new();
        }
        for m in self.modules.iter_mut().filter(|m| m.ctx == h) {
            m.live = false;
        }
        for f in self.funcs.iter_mut().filter(|f| f.ctx == h) {
            f.live = false;
        }
        for x in self.streams.iter_mut().chain(&mut self.events) {
            if x.ctx == h {
                x.live = false;
            }
        }
        if let Some(c) = self.ctx_mut(h) {
            c.alive = false;
        }
    }

    /// The guest no longer holds context `h` (released to 0, destroyed).
    fn drop_ctx(&mut self, h: u64) {
        self.kill_ctx(h);
        self.contexts.retain(|c| c.h != h);
        if self.current == Some(h) {
            self.current = None;
        }
        if self.primary == Some(h) {
            self.primary = None;
        }
    }

    fn fresh(&mut self, h: u64, what: &str) {
        let new = self.handles_seen.insert(h);
        if !new {
            self.fail(&format!(
                "a new {what} handle {h:#x} was never given before"
            ));
        };
    }

    /// A live stream of the current context (or its default stream).
    fn stream_ok(&self, s: StreamId) -> bool {
        let at = self.at();
        s.0 <= 2
            || self
                .streams
                .iter()
                .any(|x| x.live && x.h == s.0 && x.ctx == at)
    }

    fn event_live(&self, e: EventId) -> bool {
        let at = self.at();
        self.events
            .iter()
            .any(|x| x.live && x.h == e.0 && x.ctx == at)
    }

    fn module_live(&self, m: ModuleId) -> bool {
        let at = self.at();
        self.modules
            .iter()
            .any(|x| x.live && x.h == m.0 && x.ctx == at)
    }

    fn func_live(&self, f: FunctionId) -> bool {
        let at = self.at();
        self.funcs
            .iter()
            .any(|x| x.live && x.h == f.0 && x.ctx == at)
    }

    /// The live allocation (or module variable whose address was asked) of the current
    /// context holding `ptr..ptr+len` (as the service checks ranges), and the offset in
    /// it.
    fn inside(&self, ptr: u64, len: u64) -> Option<(usize, u64)> {
        let at = self.at();
        self.allocs
            .iter()
            .position(|a| {
                a.live
                    && a.ctx == at
                    && ptr >= a.ptr
                    && (ptr - a.ptr)
                        .checked_add(len)
                        .is_some_and(|end| end <= a.size)
            })
            .map(|i| (i, ptr - self.allocs[i].ptr))
    }

    fn in_ram(e: &SgEntry) -> bool {
        RAM.iter()
            .any(|&(s, n)| e.gpa >= s && e.gpa.checked_add(e.len).is_some_and(|end| end <= s + n))
    }

    fn sg_ok(&self, entries: &[SgEntry]) -> bool {
        self.features.contains(Features::SCATTER_GATHER) && entries.iter().all(Self::in_ram)
    }

    fn forget(&mut self, ptr: u64, len: u64) {
        if let Some((i, off)) = self.inside(ptr, len) {
            let a = &mut self.allocs[i];
            for k in off..off + len {
                a.known[k as usize] = false;
            }
        }
    }

    /// A kernel may have written anything of its context's memory (only its own: the
    /// contexts are separate address spaces).
    fn forget_context(&mut self) {
        let at = self.at();
        for a in self.allocs.iter_mut().filter(|a| a.ctx == at) {
            a.known.iter_mut().for_each(|k| *k = false);
        }
    }

    fn write(&mut self, ptr: u64, bytes: &[u8]) {
        if let Some((i, off)) = self.inside(ptr, bytes.len() as u64) {
            let a = &mut self.allocs[i];
            let off = off as usize;
            a.data[off..off + bytes.len()].copy_from_slice(bytes);
            a.known[off..off + bytes.len()]
                .iter_mut()
                .for_each(|k| *k = true);
        }
    }

    /// Checks bytes read back from `ptr` against what is known of them.
    fn compare(&mut self, ptr: u64, bytes: &[u8], summary: &mut Summary) {
        let Some((i, off)) = self.inside(ptr, bytes.len() as u64) else {
            return;
        };
        let off = off as usize;
        let a = &self.allocs[i];
        for (k, b) in bytes.iter().enumerate() {
            if a.known[off + k] {
                summary.compared += 1;
                if a.data[off + k] != *b {
                    self.fail(&format!(
                        "byte {:#x}+{:#x} reads {b:#x}, {:#x} was written",
                        a.ptr,
                        off + k,
                        a.data[off + k]
                    ));
                }
            }
        }
    }

    // ------------------------------------------------------------------ generation

    /// A handle of `pool` (`sel >> 6`): 0, a live one of the current context `at`; 1, a
    /// live one of any context; 2, any (bit-flipped); 3, a special value.
    fn pick(pool: &[Handle], at: u64, sel: u8, flip: u8) -> u64 {
        let here: Vec<u64> = pool
            .iter()
            .filter(|h| h.live && h.ctx == at)
            .map(|h| h.h)
            .collect();
        let live: Vec<u64> = pool.iter().filter(|h| h.live).map(|h| h.h).collect();
        let all: Vec<u64> = pool.iter().map(|h| h.h).collect();
        let special = [
            0u64,
            1,
            2,
            0x100,
            u64::MAX,
            1 << 56,
            0x0500_0000_0000_0000,
            7,
        ];
        match sel >> 6 {
            0 if !here.is_empty() => here[(sel & 63) as usize % here.len()],
            0 | 1 if !live.is_empty() => live[(sel & 63) as usize % live.len()],
            0..=2 if !all.is_empty() => {
                let h = all[(sel & 63) as usize % all.len()];
                if sel >> 6 == 2 {
                    h ^ (1u64 << (flip % 64))
                } else {
                    h
                }
            }
            _ => special[(sel & 7) as usize],
        }
    }

    fn handles<T>(v: &[T], f: impl Fn(&T) -> Handle) -> Vec<Handle> {
        v.iter().map(f).collect()
    }

    fn pick_stream(&self, sel: u8, flip: u8) -> StreamId {
        if sel < 0x60 {
            return StreamId(u64::from(sel % 3));
        }
        StreamId(Self::pick(
            &self.streams,
            self.at(),
            sel.wrapping_sub(0x60),
            flip,
        ))
    }

    fn pick_event(&self, sel: u8, flip: u8) -> EventId {
        EventId(Self::pick(&self.events, self.at(), sel, flip))
    }

    fn pick_module(&self, sel: u8, flip: u8) -> (ModuleId, Option<usize>) {
        let pool = Self::handles(&self.modules, |m| Handle {
            h: m.h,
            ctx: m.ctx,
            live: m.live,
        });
        let h = Self::pick(&pool, self.at(), sel, flip);
        (ModuleId(h), self.modules.iter().position(|m| m.h == h))
    }

    fn pick_func(&self, sel: u8, flip: u8) -> (FunctionId, Option<usize>) {
        let pool = Self::handles(&self.funcs, |f| Handle {
            h: f.h,
            ctx: f.ctx,
            live: f.live,
        });
        let h = Self::pick(&pool, self.at(), sel, flip);
        (FunctionId(h), self.funcs.iter().position(|f| f.h == h))
    }

    /// A context handle (`sel % 8`): 0-1, the primary one (else the current or the last
    /// seen); 2-3, one the guest holds; 4, 0 (none); 5, a held one bit-flipped; 6, the
    /// first ever seen (maybe released or destroyed); 7, a made-up one.
    fn pick_ctx(&self, sel: u8, flip: u8) -> u64 {
        let held: Vec<u64> = self.contexts.iter().map(|c| c.h).collect();
        let some_held = held
            .get(usize::from(flip) % held.len().max(1))
            .copied()
            .unwrap_or(0);
        match sel % 8 {
            0 | 1 => self
                .primary
                .or(self.current)
                .or(self.contexts_seen.last().copied())
                .unwrap_or(0),
            2 | 3 => some_held,
            4 => 0,
            5 => some_held ^ (1u64 << (flip % 64)),
            6 => self.contexts_seen.first().copied().unwrap_or(1 << 56),
            _ => u64::from(flip) << 56 | 5,
        }
    }

    /// A device address near an allocation's edges (or a special one), and the room
    /// from it to its allocation's end.
    fn pick_addr(&self, a: &mut Args<'_>) -> (u64, u64) {
        let sel = a.u8();
        let offk = a.u8();
        let raw = u64::from(a.u16());
        let at = self.at();
        let here: Vec<&Alloc> = self
            .allocs
            .iter()
            .filter(|x| x.live && x.ctx == at)
            .collect();
        let live: Vec<&Alloc> = self.allocs.iter().filter(|x| x.live).collect();
        let base = match sel >> 6 {
            0 if !here.is_empty() => Some(here[(sel & 63) as usize % here.len()]),
            0 | 1 if !live.is_empty() => Some(live[(sel & 63) as usize % live.len()]),
            0..=2 if !self.allocs.is_empty() => {
                Some(&self.allocs[(sel & 63) as usize % self.allocs.len()])
            }
            _ => None,
        };
        let Some(al) = base else {
            let special = [
                0u64,
                1,
                u64::MAX,
                0x7000_0000_0000,
                raw << 8,
                0x1000,
                u64::MAX - 255,
                1 << 63,
            ];
            return (special[(sel & 7) as usize], raw);
        };
        // (A module variable may have 0 bytes.)
        let size = al.size.max(1);
        let off = match offk % 8 {
            0 | 7 => 0,
            1 => raw % size,
            2 => size - 1,
            3 => size,
            4 => size + 1,
            5 => raw,
            _ => size - (raw % size).max(1).min(size),
        };
        let mut addr = al.ptr.wrapping_add(off);
        if sel >> 6 == 2 {
            addr ^= 1u64 << (raw % 64);
        }
        let room = (al.ptr.wrapping_add(size)).saturating_sub(addr);
        (addr, room)
    }

    fn pick_len(a: &mut Args<'_>, room: u64, addr: u64) -> u64 {
        let sel = a.u8();
        let raw = u64::from(a.u16());
        match sel % 12 {
            0..=3 => room,
            4 => room + 1,
            5 => raw,
            6 => 1,
            7 => 0,
            8 => u64::MAX,
            9 => 0u64.wrapping_sub(addr),
            10 => room.saturating_sub(raw % 64),
            _ => room / 2,
        }
    }

    fn pick_sg(a: &mut Args<'_>, room: u64) -> Vec<SgEntry> {
        let n = 1 + a.u8() % 3;
        let mut v = Vec::new();
        for _ in 0..n {
            let g = a.u8();
            let l = a.u8();
            let gpa = [
                0u64, 0x100, 0x3ff0, 0x4000, 0x10000, 0x10ff0, 0x11000, 0x3000, 0x2001,
            ][(g % 9) as usize]
                + u64::from(g >> 4) * 16;
            let len = match l % 8 {
                0 => room.clamp(1, 0x1000),
                1 => 1,
                2 => 16,
                3 => 0x100,
                4 => 0x1000,
                5 => 0x20,
                6 => u64::from(l) + 1,
                _ => 0x4001,
            };
            v.push(SgEntry { gpa, len });
        }
        v
    }

    /// The frame of one record (`None`: nothing to send).
    fn generate(&mut self, r: &[u8; RECORD]) -> Option<Vec<u8>> {
        const GRID: [u32; 16] = [1, 1, 1, 2, 4, 8, 0, 3, 65536, u32::MAX, 1, 1, 16, 1, 2, 1];
        const GRID_YZ: [u32; 8] = [1, 1, 1, 1, 2, 0, 65536, u32::MAX];
        const BLOCK: [u32; 16] = [
            32, 64, 128, 1, 256, 16, 0, 1024, 1025, 2048, 33, 1, 32, 64, 8, 4096,
        ];
        const BLOCK_YZ: [u32; 16] = [1, 1, 1, 1, 2, 4, 0, 64, 1, 1, 1, 1, 1, 2, 1024, u32::MAX];
        const SHARED: [u32; 16] = [
            0,
            0,
            0,
            0,
            16,
            256,
            4096,
            48 << 10,
            (48 << 10) + 1,
            1 << 20,
            u32::MAX,
            0,
            0,
            64,
            0,
            8,
        ];
        // Function attributes: the named ones (0..=15) and others.
        const ATTRS: [i32; 16] = [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 15, 16, -1, 9999, 8];
        const INTS: [u32; 16] = [
            0,
            1,
            16,
            64,
            256,
            1024,
            4096,
            65536,
            1 << 20,
            u32::MAX,
            7,
            100,
            255,
            1000,
            2,
            32,
        ];
        let mut a = Args { b: &r[1..17], i: 0 };
        let meta = r[17];
        let id = self.last_id + [1, 1, 2, 977][(meta & 3) as usize];
        self.load = None;
        let asynch = |a: &mut Args<'_>, m: &Model| -> Option<StreamId> {
            let s = a.u8();
            let f = a.u8();
            (s & 1 == 1).then(|| m.pick_stream(s >> 1, f))
        };
        let request = match r[0] % OPS {
            OP_ALLOC => {
                let k = a.u8();
                let raw = u64::from(a.u16());
                let used = self.used();
                Request::MemAlloc {
                    bytes: match k % 10 {
                        0 | 1 => raw + 1,
                        2 => 4096,
                        3 => 256,
                        4 => QUOTA_BYTES.saturating_sub(used),
                        5 => QUOTA_BYTES.saturating_sub(used) + 1,
                        6 => QUOTA_BYTES,
                        7 => 0,
                        8 => u64::MAX - raw,
                        _ => (raw << 4) + 1,
                    },
                }
            }
            OP_FREE => {
                let (ptr, _) = self.pick_addr(&mut a);
                Request::MemFree {
                    ptr: DevicePtr(ptr),
                }
            }
            OP_MEMINFO => Request::MemGetInfo,
            OP_MEMSET => {
                let stream = asynch(&mut a, self);
                let (dst, room) = self.pick_addr(&mut a);
                let width =
                    [MemsetWidth::W8, MemsetWidth::W16, MemsetWidth::W32][(a.u8() % 3) as usize];
                let len = Self::pick_len(&mut a, room, dst);
                Request::Memset {
                    dst: DevicePtr(dst),
                    value: a.u32(),
                    count: len / width.bytes(),
                    width,
                    stream,
                }
            }
            OP_HTOD => {
                let stream = asynch(&mut a, self);
                let (dst, room) = self.pick_addr(&mut a);
                let mut len = Self::pick_len(&mut a, room, dst);
                if len > INLINE_CAP {
                    len %= INLINE_CAP + 1;
                }
                Request::MemcpyHtoD {
                    dst: DevicePtr(dst),
                    src: HostSource::Inline(pattern(len, a.u8())),
                    stream,
                }
            }
            OP_HTOD_SG => {
                let stream = asynch(&mut a, self);
                let (dst, room) = self.pick_addr(&mut a);
                Request::MemcpyHtoD {
                    dst: DevicePtr(dst),
                    src: HostSource::Guest(Self::pick_sg(&mut a, room)),
                    stream,
                }
            }
            OP_DTOH => {
                let stream = asynch(&mut a, self);
                let (src, room) = self.pick_addr(&mut a);
                let mut bytes = Self::pick_len(&mut a, room, src);
                if bytes > INLINE_CAP && a.u8() != 0xff {
                    bytes %= INLINE_CAP + 1;
                }
                Request::MemcpyDtoH {
                    src: DevicePtr(src),
                    bytes,
                    dst: HostDest::Inline,
                    stream,
                }
            }
            OP_DTOH_SG => {
                let stream = asynch(&mut a, self);
                let (src, room) = self.pick_addr(&mut a);
                let entries = Self::pick_sg(&mut a, room);
                Request::MemcpyDtoH {
                    src: DevicePtr(src),
                    bytes: entries.iter().map(|e| e.len).sum(),
                    dst: HostDest::Guest(entries),
                    stream,
                }
            }
            OP_DTOD => {
                let stream = asynch(&mut a, self);
                let (dst, room_d) = self.pick_addr(&mut a);
                let (src, room_s) = self.pick_addr(&mut a);
                Request::MemcpyDtoD {
                    dst: DevicePtr(dst),
                    src: DevicePtr(src),
                    bytes: Self::pick_len(&mut a, room_d.min(room_s), src),
                    stream,
                }
            }
            OP_LOAD => {
                let (_, text) = FIXTURES[a.u8() as usize % FIXTURES.len()];
                let mut image = text.as_bytes().to_vec();
                if a.u8() & 1 == 1 {
                    image.push(0);
                }
                self.load = Some(Load::Fixture);
                Request::ModuleLoadData { image }
            }
            OP_LOAD_MUTATED => {
                let (_, text) = FIXTURES[a.u8() as usize % FIXTURES.len()];
                let mut image = text.as_bytes().to_vec();
                for _ in 0..1 + a.u8() % 4 {
                    let p = a.u16();
                    let v = a.u8();
                    if image.is_empty() {
                        break;
                    }
                    let at = usize::from(p & 0x3fff) * 7 % image.len();
                    match p >> 14 {
                        0 => image[at] = v,
                        1 => {
                            let end = (at + 1 + usize::from(v % 32)).min(image.len());
                            image.drain(at..end);
                        }
                        2 => {
                            let ins: &[u8] = match v % 8 {
                                0 => b"\n}\n",
                                1 => b" .reg .b32 %r<99999999>;",
                                2 => b"[",
                                3 => b"99999999999999999999",
                                4 => b"\n.global .b8 xx[100000];\n",
                                5 => b"bra $L__BB0_1;",
                                6 => b"%rd1",
                                _ => b"\0",
                            };
                            image.splice(at..at, ins.iter().copied());
                        }
                        _ => image.truncate(at),
                    }
                }
                self.load = Some(Load::Mutated);
                Request::ModuleLoadData { image }
            }
            OP_LOAD_GLOBALS => {
                let n = a.u8() % 4;
                let mut text = String::from(".version 7.0\n.target sm_80\n.address_size 64\n\n");
                let mut bytes = 0u64;
                let mut names = HashSet::new();
                let mut valid = true;
                for _ in 0..n {
                    let kind = a.u8();
                    let size = u64::from(a.u16()) * [1, 16, 256, 4096][(kind & 3) as usize];
                    let name = format!("g{}", (kind >> 2) % 3);
                    valid &= names.insert(name.clone());
                    let space = if kind & 0x80 != 0 { "const" } else { "global" };
                    if kind & 0x40 != 0 {
                        text.push_str(&format!(".{space} .align 4 .u32 {name} = {};\n", size));
                        bytes += 4;
                    } else {
                        text.push_str(&format!(".{space} .align 8 .b8 {name}[{size}];\n"));
                        bytes += size.max(1);
                    }
                }
                text.push_str(
                    ".visible .entry touch(\n\t.param .u64 touch_param_0\n)\n{\n\tret;\n}\n",
                );
                self.load = Some(Load::Globals { bytes, valid });
                Request::ModuleLoadData {
                    image: text.into_bytes(),
                }
            }
            OP_UNLOAD => {
                let (module, _) = self.pick_module(a.u8(), a.u8());
                Request::ModuleUnload { module }
            }
            OP_GET_FUNCTION => {
                let (module, at) = self.pick_module(a.u8(), a.u8());
                let sel = a.u8();
                let kernels = at
                    .map(|i| self.modules[i].kernels.clone())
                    .unwrap_or_default();
                let name = if sel < 200 && !kernels.is_empty() {
                    kernels[sel as usize % kernels.len()].clone()
                } else {
                    match sel % 5 {
                        0 => String::new(),
                        1 => "nope".into(),
                        2 => "vector_add".into(),
                        3 => "x".repeat(300),
                        _ => "touch".into(),
                    }
                };
                Request::ModuleGetFunction { module, name }
            }
            OP_LAUNCH => {
                let (function, at) = self.pick_func(a.u8(), a.u8());
                let g = a.u8();
                let gyz = a.u8();
                let grid = [
                    GRID[(g & 15) as usize],
                    GRID_YZ[(gyz & 7) as usize],
                    GRID_YZ[((gyz >> 3) & 7) as usize],
                ];
                let bx = a.u8();
                let byz = a.u8();
                let block = [
                    BLOCK[(bx & 15) as usize],
                    BLOCK_YZ[(byz & 15) as usize],
                    BLOCK_YZ[(byz >> 4) as usize],
                ];
                let shared_bytes = SHARED[(a.u8() & 15) as usize];
                let stream = self.pick_stream(a.u8(), g);
                let mode = a.u8();
                let pa = a.u8();
                let pb = a.u8();
                let layout = at
                    .and_then(|i| self.funcs[i].layout.clone())
                    .unwrap_or_default();
                let here = self.at();
                let live: Vec<&Alloc> = self
                    .allocs
                    .iter()
                    .filter(|x| x.live && x.ctx == here)
                    .collect();
                let values: Vec<Vec<u8>> = layout
                    .iter()
                    .enumerate()
                    .map(|(i, s)| match s.size {
                        8 => {
                            let p = if live.is_empty() {
                                u64::from(pa) << 4
                            } else {
                                let al = live[(pa as usize + i) % live.len()];
                                match (pa >> 5) & 7 {
                                    6 => al.ptr + al.size - 4,
                                    7 => al.ptr + al.size,
                                    _ => al.ptr,
                                }
                            };
                            p.to_le_bytes().to_vec()
                        }
                        4 => INTS[(pb as usize + i) & 15].to_le_bytes().to_vec(),
                        n => pattern(u64::from(n.min(64)), pb),
                    })
                    .collect();
                let args: Vec<&[u8]> = values.iter().map(|v| v.as_slice()).collect();
                let exact = KernelParams::with_layout(&layout, &args)
                    .unwrap_or_else(|| KernelParams::pack(&args));
                let params = match mode % 8 {
                    0..=2 => exact,
                    3 => KernelParams::opaque(exact.bytes),
                    4 => KernelParams::pack(&args[..args.len().saturating_sub(1)]),
                    5 => {
                        let mut v = values.clone();
                        if let Some(x) = v.first_mut() {
                            x.extend_from_slice(&[0; 4]);
                        } else {
                            v.push(vec![0; 4]);
                        }
                        let args: Vec<&[u8]> = v.iter().map(|v| v.as_slice()).collect();
                        KernelParams::pack(&args)
                    }
                    6 => KernelParams::default(),
                    _ => KernelParams::opaque(pattern(u64::from(pb), pa)),
                };
                let config = cuda_guest::driver::LaunchConfig {
                    grid,
                    block,
                    shared_bytes,
                };
                // One in eight, by a byte already drawn: a cooperative launch.
                if pb % 8 == 7 {
                    Request::LaunchCooperativeKernel {
                        function,
                        config,
                        stream,
                        params,
                    }
                } else {
                    Request::LaunchKernel {
                        function,
                        config,
                        stream,
                        params,
                    }
                }
            }
            OP_STREAM_CREATE => Request::StreamCreate {
                flags: [0, 1, 0, 1, 2, u32::MAX, 3, 0][(a.u8() % 8) as usize],
                priority: i32::from(a.u8() as i8),
            },
            OP_STREAM_DESTROY => Request::StreamDestroy {
                stream: self.pick_stream(a.u8(), a.u8()),
            },
            OP_STREAM_SYNC => Request::StreamSynchronize {
                stream: self.pick_stream(a.u8(), a.u8()),
            },
            OP_STREAM_QUERY => Request::StreamQuery {
                stream: self.pick_stream(a.u8(), a.u8()),
            },
            OP_STREAM_WAIT => Request::StreamWaitEvent {
                stream: self.pick_stream(a.u8(), a.u8()),
                event: self.pick_event(a.u8(), a.u8()),
                flags: u32::from(a.u8() == 0xff),
            },
            OP_EVENT_CREATE => Request::EventCreate {
                flags: [0, 1, 2, 3, 4, u32::MAX][(a.u8() % 6) as usize],
            },
            OP_EVENT_DESTROY => Request::EventDestroy {
                event: self.pick_event(a.u8(), a.u8()),
            },
            OP_EVENT_RECORD => Request::EventRecord {
                event: self.pick_event(a.u8(), a.u8()),
                stream: self.pick_stream(a.u8(), a.u8()),
            },
            OP_EVENT_SYNC => Request::EventSynchronize {
                event: self.pick_event(a.u8(), a.u8()),
            },
            OP_EVENT_QUERY => Request::EventQuery {
                event: self.pick_event(a.u8(), a.u8()),
            },
            OP_EVENT_ELAPSED => Request::EventElapsedTime {
                start: self.pick_event(a.u8(), a.u8()),
                end: self.pick_event(a.u8(), a.u8()),
            },
            OP_CTX_SYNC => Request::CtxSynchronize,
            OP_SET_CURRENT => {
                let sel = a.u8();
                let flip = a.u8();
                Request::CtxSetCurrent {
                    ctx: ContextId(self.pick_ctx(sel, flip)),
                }
            }
            OP_CTX_CREATE => Request::CtxCreate {
                device: u32::from(a.u8() == 0xff),
                flags: [0, 1, 2, 4, 8, 0x80, 3, 0x100][(a.u8() % 8) as usize],
            },
            OP_CTX_DESTROY => {
                let sel = a.u8();
                let flip = a.u8();
                // Mostly a created context the guest holds.
                let created: Vec<u64> = self
                    .contexts
                    .iter()
                    .filter(|c| !c.primary)
                    .map(|c| c.h)
                    .collect();
                let ctx = match (sel % 4, created.is_empty()) {
                    (0 | 1, false) => created[usize::from(flip) % created.len()],
                    _ => self.pick_ctx(sel >> 2, flip),
                };
                Request::CtxDestroy {
                    ctx: ContextId(ctx),
                }
            }
            OP_GET_GLOBAL => {
                let (module, at) = self.pick_module(a.u8(), a.u8());
                let sel = a.u8();
                let vars = at.map(|i| self.modules[i].vars.clone()).unwrap_or_default();
                let name = if sel < 200 && !vars.is_empty() {
                    vars[sel as usize % vars.len()].0.clone()
                } else {
                    [
                        "g0",
                        "g1",
                        "g2",
                        "vm_scale",
                        "vm_visits",
                        "nope",
                        "",
                        "touch",
                    ][(sel % 8) as usize]
                        .to_string()
                };
                Request::ModuleGetGlobal { module, name }
            }
            OP_FUNC_GET_ATTR => {
                let (function, _) = self.pick_func(a.u8(), a.u8());
                Request::FuncGetAttribute {
                    function,
                    attribute: ATTRS[(a.u8() % 16) as usize],
                }
            }
            OP_FUNC_SET_ATTR => {
                let (function, _) = self.pick_func(a.u8(), a.u8());
                let attribute = ATTRS[(a.u8() % 16) as usize];
                let k = a.u8();
                let value = match k % 16 {
                    0..=11 => [
                        0,
                        1024,
                        49152,
                        65536,
                        OPT_IN_SURE,
                        OPT_IN_SURE + 1,
                        166_912,
                        -1,
                        50,
                        100,
                        101,
                        -2,
                    ][(k % 16) as usize],
                    12 => i32::MAX,
                    13 => i32::MIN,
                    _ => i32::from(a.u16() as i16),
                };
                Request::FuncSetAttribute {
                    function,
                    attribute,
                    value,
                }
            }
            OP_RETAIN => Request::PrimaryCtxRetain {
                device: u32::from(a.u8() == 0xff),
            },
            OP_RELEASE => Request::PrimaryCtxRelease {
                device: u32::from(a.u8() == 0xff),
            },
            OP_DEVICE => {
                let sub = a.u8();
                let d = a.u8();
                let device = if d > 240 { u32::from(d) } else { 0 };
                match sub % 8 {
                    0 => Request::DeviceGetCount,
                    1 => Request::DeviceGet { ordinal: device },
                    2 => Request::DeviceGetName { device },
                    3 => Request::DeviceGetUuid { device },
                    4 => Request::DeviceGetPciBusId { device },
                    5 => Request::DeviceGetAttribute {
                        device,
                        attribute: a.u32() as i32,
                    },
                    6 => Request::DeviceTotalMem { device },
                    _ => Request::DeviceComputeCapability { device },
                }
            }
            OP_MISC => {
                let sub = a.u8();
                match sub % 4 {
                    0 => Request::Ping {
                        data: pattern(u64::from(a.u16()), sub),
                    },
                    1 => Request::DriverGetVersion,
                    2 => Request::Init {
                        flags: u32::from(a.u8() == 0xff),
                    },
                    _ => Request::Ping { data: Vec::new() },
                }
            }
            OP_GOODBYE => Request::Goodbye,
            OP_BAD_ID => {
                let mut b = RequestFrame::new(1, Request::CtxSynchronize)
                    .to_bytes()
                    .ok()?;
                let bad = match a.u8() % 3 {
                    0 => self.last_id,
                    1 => self.last_id.saturating_sub(1),
                    _ => 0,
                };
                b[4..12].copy_from_slice(&bad.to_le_bytes());
                return Some(b);
            }
            OP_NO_REPLY_VIOLATION => {
                let req = if a.u8() & 1 == 0 {
                    Request::CtxSynchronize
                } else {
                    Request::MemGetInfo
                };
                let mut b = RequestFrame::new(id, req).to_bytes().ok()?;
                b[14] |= 1;
                return Some(b);
            }
            OP_JUNK => {
                let len = 16 + usize::from(a.u8() % 12);
                let mut b = Vec::with_capacity(len);
                let lf = a.u8();
                let length = if lf == 0xff { a.u32() } else { len as u32 };
                b.extend_from_slice(&length.to_le_bytes());
                b.extend_from_slice(&id.to_le_bytes());
                let op = a.u16();
                let opcode = Opcode::ALL[usize::from(op) % Opcode::ALL.len()].code();
                b.extend_from_slice(&(if op & 0x8000 != 0 { op } else { opcode }).to_le_bytes());
                b.extend_from_slice(&(u16::from(a.u8() & 0x81)).to_le_bytes());
                while b.len() < len {
                    b.push(a.u8());
                }
                return Some(b);
            }
            _ => unreachable!("op % OPS"),
        };
        let no_reply = request.opcode().pipelined() && meta & META_REPLY == 0;
        let mut bytes = RequestFrame {
            id,
            no_reply,
            request,
        }
        .to_bytes()
        .ok()?;
        if meta & 0xf0 == 0xf0 {
            let (pos, val) = (usize::from(r[18]), r[19]);
            let at = pos % bytes.len();
            match (meta >> 2) & 3 {
                0 => bytes[at] ^= val | 1,
                1 => bytes.truncate(at),
                2 => bytes.extend(std::iter::repeat_n(val, 1 + pos % 8)),
                _ => {
                    // A payload byte, length field kept.
                    let at = 16 + pos % bytes.len().saturating_sub(16).max(1);
                    if at < bytes.len() {
                        bytes[at] = val;
                    }
                }
            }
            if self.load.is_some() {
                self.load = Some(Load::Mutated);
            }
        }
        Some(bytes)
    }

    // ------------------------------------------------------------------ checking

    fn classify(&self, bytes: &[u8]) -> Seen {
        match RequestFrame::decode(bytes, &self.limits) {
            Ok(Decoded::Frame { frame, len }) if len == bytes.len() => Seen::Frame(frame),
            Ok(_) => Seen::Violation,
            Err(e) => match e.answerable() {
                Some(r) => Seen::Refused(r),
                None => Seen::Violation,
            },
        }
    }

    /// The one reply frame in `out`.
    #[track_caller]
    fn one_reply(&self, out: &[u8]) -> Reply {
        match Reply::decode(out, &self.limits) {
            Ok(Decoded::Frame { frame, len }) => {
                self.ensure(len == out.len(), "exactly one reply frame");
                frame
            }
            other => {
                self.fail(&format!(
                    "a reply that fits the negotiated limits ({} bytes: {other:?})",
                    out.len()
                ));
            }
        }
    }

    fn released(&self, svc: &Service, s: &EmbeddedSession, what: &str) {
        let st = svc.stats();
        if s.session().is_none() && (st.sessions, st.contexts, st.device_bytes) != (0, 0, 0) {
            self.fail(&format!("{what}: everything released ({st:?})"));
        };
    }

    /// Hands one frame to the session and checks the answer.
    fn exchange(
        &mut self,
        s: &mut EmbeddedSession,
        svc: &Service,
        mem: &GuestMemoryMmap,
        bytes: Vec<u8>,
        summary: &mut Summary,
    ) {
        let seen = self.classify(&bytes);
        let desc = match &seen {
            Seen::Frame(f) => format!(
                "#{} {}{}",
                f.id,
                if f.no_reply { "(no reply) " } else { "" },
                describe(&f.request)
            ),
            Seen::Refused(r) => format!("#{} refused {:?} ({} bytes)", r.id, r.opcode, bytes.len()),
            Seen::Violation => format!(
                "violation ({} bytes: {:02x?})",
                bytes.len(),
                &bytes[..bytes.len().min(24)]
            ),
        };
        self.note(desc);
        // Guest bytes a synchronous gather copy reads.
        let gathered = match &seen {
            Seen::Frame(RequestFrame {
                request:
                    Request::MemcpyHtoD {
                        src: HostSource::Guest(entries),
                        stream: None,
                        ..
                    },
                ..
            }) if entries.iter().all(Self::in_ram) => {
                let mut v = Vec::new();
                for e in entries {
                    let mut b = vec![0u8; e.len as usize];
                    mem.read_slice(&mut b, GuestAddress(e.gpa))
                        .expect("guest RAM");
                    v.extend(b);
                }
                Some(v)
            }
            _ => None,
        };
        summary.frames += 1;
        let out = s.handle_frame(&bytes, mem);
        let closing = self.closed
            || match &seen {
                Seen::Violation => true,
                Seen::Refused(r) => r.id <= self.last_id,
                Seen::Frame(f) => f.id <= self.last_id,
            };
        if closing {
            let r = self.one_reply(&out);
            self.note(format!("  -> {:?} {:?}", r.status, r.detail()));
            self.ensure(
                r.is_closing_notice(),
                "a protocol violation gets the closing notice",
            );
            self.ensure(!r.status.is_success(), "the closing notice has a status");
            self.closed = true;
            summary.notice = true;
            self.released(svc, s, "after the closing notice");
            return;
        }
        match seen {
            Seen::Violation => unreachable!(),
            Seen::Refused(r) => {
                self.last_id = r.id;
                self.sent.insert(r.id, r.opcode);
                if r.no_reply {
                    self.ensure(out.is_empty(), "no reply to a refused NO_REPLY frame");
                    self.pipelined.insert(r.id);
                } else {
                    let rep = self.one_reply(&out);
                    self.note(format!("  -> {:?} {:?}", rep.status, rep.detail()));
                    self.ensure(
                        rep.id == r.id
                            && rep.opcode == r.opcode
                            && rep.status == Status::ERROR_INVALID_VALUE
                            && rep.cause.is_none(),
                        "a malformed payload is answered INVALID_VALUE",
                    );
                    summary.replies += 1;
                }
            }
            Seen::Frame(f) => {
                self.last_id = f.id;
                let opcode = f.request.opcode();
                self.sent.insert(f.id, opcode);
                if let Request::LaunchKernel { .. } | Request::LaunchCooperativeKernel { .. } =
                    f.request
                {
                    summary.launches += 1;
                }
                self.before_effects(&f.request);
                if f.no_reply {
                    self.ensure(out.is_empty(), "no reply to a NO_REPLY request");
                    self.pipelined.insert(f.id);
                    let cur = self
                        .current
                        .filter(|h| self.ctx(*h).is_some_and(|c| c.alive));
                    if let (Some(h), true) = (cur, svc.stats().contexts < self.alive()) {
                        // A pipelined request found a sticky fault: its context (the
                        // current one, only) is gone.
                        self.note("  (context torn down silently)".into());
                        self.kill_ctx(h);
                        if let Some(c) = self.ctx_mut(h) {
                            if c.sticky == Sticky::No {
                                c.sticky = Sticky::Silent;
                            }
                        }
                    }
                } else {
                    let rep = self.one_reply(&out);
                    self.note(format!(
                        "  -> {:?} cause {:?} {}",
                        rep.status,
                        rep.cause,
                        match &rep.body {
                            ReplyBody::Detail(d) => format!("{d:?}"),
                            ReplyBody::Data(d) => format!("{} bytes", d.len()),
                            b => format!("{b:?}"),
                        }
                    ));
                    self.ensure(
                        rep.id == f.id && rep.opcode == opcode,
                        "the reply repeats the request's id and opcode",
                    );
                    summary.replies += 1;
                    if rep.status.is_success() {
                        summary.successes += 1;
                    }
                    if rep.status == Status::ERROR_OUT_OF_MEMORY {
                        summary.out_of_memory += 1;
                    }
                    self.check_reply(f.id, &f.request, &rep, s, svc, mem, gathered, summary);
                }
            }
        }
        if self.closed {
            self.released(svc, s, "after goodbye");
            return;
        }
        self.check_state(s, svc);
    }

    /// What a request may do to the bytes of allocations whatever its outcome: kernels
    /// and asynchronous writes make them unknown.
    fn before_effects(&mut self, request: &Request) {
        match request {
            Request::LaunchKernel { .. } | Request::LaunchCooperativeKernel { .. } => {
                self.forget_context()
            }
            Request::Memset {
                dst,
                count,
                width,
                stream: Some(_),
                ..
            } => self.forget(dst.0, count.saturating_mul(width.bytes())),
            Request::MemcpyHtoD {
                dst,
                src,
                stream: Some(_),
            } => {
                let n = match src {
                    HostSource::Inline(d) => d.len() as u64,
                    HostSource::Guest(e) => e.iter().map(|e| e.len).sum(),
                };
                self.forget(dst.0, n)
            }
            Request::MemcpyDtoD {
                dst,
                bytes,
                stream: Some(_),
                ..
            } => self.forget(dst.0, *bytes),
            _ => {}
        }
    }

    fn check_state(&self, s: &EmbeddedSession, svc: &Service) {
        let Some(sess) = s.session() else {
            self.ensure(false, "the session is open");
            return;
        };
        let st = svc.stats();
        if sess.mem_used() > QUOTA_BYTES {
            self.fail(&format!("mem_used {} within the quota", sess.mem_used()));
        };
        if sess.objects() > MAX_OBJECTS as usize {
            self.fail(&format!("objects {} within the quota", sess.objects()));
        };
        if sess.objects() != self.objects() {
            self.fail(&format!(
                "objects(): {} live objects, the session counts {}",
                self.objects(),
                sess.objects()
            ));
        };
        if sess.mem_used() != self.used() {
            self.fail(&format!(
                "mem_used(): {} bytes held, the session counts {}",
                self.used(),
                sess.mem_used()
            ));
        };
        if st.sessions == 1 && st.device_bytes != sess.mem_used() {
            self.fail(&format!("service stats agree with the session: {st:?}"));
        };
        if st.contexts != self.alive() {
            self.fail(&format!(
                "the contexts alive are the ones held and not faulted ({}): {st:?}",
                self.alive()
            ));
        };
        if sess.contexts() != self.contexts.len() {
            self.fail(&format!(
                "the session holds {} contexts, the guest {}",
                sess.contexts(),
                self.contexts.len()
            ));
        };
    }

    #[allow(clippy::too_many_arguments)]
    fn check_reply(
        &mut self,
        id: u64,
        request: &Request,
        rep: &Reply,
        s: &EmbeddedSession,
        svc: &Service,
        mem: &GuestMemoryMmap,
        gathered: Option<Vec<u8>>,
        summary: &mut Summary,
    ) {
        let op = request.opcode();
        let status = rep.status;
        let ok = status.is_success();
        let own = Cause { id, opcode: op };
        if let Some(c) = rep.cause {
            self.ensure(!ok, "a cause only with a failure");
            self.ensure(c.id < id, "a cause is an earlier request");
            self.ensure(
                self.sent.get(&c.id) == Some(&c.opcode),
                "a cause names a request with its opcode",
            );
            if !status.is_sticky() {
                self.ensure(
                    self.pipelined.contains(&c.id),
                    "a deferred error's cause is a pipelined request",
                );
                let first = self.reported.insert(c.id);
                self.ensure(first, "a deferred error is reported once");
                summary.deferred += 1;
            }
        }
        if op == Opcode::Goodbye {
            self.closed = true;
            summary.closed = true;
            return;
        }
        if !self.initialized && op.needs_init() {
            self.ensure(
                status == Status::ERROR_NOT_INITIALIZED && rep.cause.is_none(),
                "before Init: NOT_INITIALIZED",
            );
            return;
        }
        if op.needs_context() {
            // The context it runs in: the current one; with none, a fault of the
            // primary context is still answered.
            let target = self.current.or(self
                .primary
                .filter(|p| self.ctx(*p).is_some_and(|c| c.sticky != Sticky::No)));
            match target.and_then(|h| self.ctx(h)).map(|c| (c.h, c.sticky)) {
                Some((_, Sticky::Known(st, c))) => {
                    self.ensure(
                        status == st && rep.cause == Some(c),
                        "a sticky error is answered with its cause until the release",
                    );
                    return;
                }
                Some((h, Sticky::Silent)) => {
                    self.ensure(
                        status.is_sticky() && rep.cause.is_some(),
                        "a sticky fault of a pipelined request is reported with its cause",
                    );
                    if let Some(c) = self.ctx_mut(h) {
                        c.sticky = Sticky::Known(status, rep.cause.unwrap_or(own));
                    }
                    summary.sticky += 1;
                    return;
                }
                _ => {}
            }
            if self.cur().is_none() {
                self.ensure(
                    status == Status::ERROR_INVALID_CONTEXT && rep.cause.is_none(),
                    "without a current context: INVALID_CONTEXT",
                );
                return;
            }
        }
        if status.is_sticky() {
            // The context the fault poisons: the one the request ran in (the primary
            // one for its release, which waits for it).
            let hit = if op.needs_context() {
                self.cur()
            } else if op == Opcode::PrimaryCtxRelease {
                self.primary.filter(|p| {
                    self.ctx(*p)
                        .is_some_and(|c| c.alive && c.sticky == Sticky::No)
                })
            } else {
                None
            };
            let Some(h) = hit else {
                self.fail("a sticky error of a request that runs in no live context");
            };
            let before = self.alive();
            self.kill_ctx(h);
            if let Some(c) = self.ctx_mut(h) {
                c.sticky = Sticky::Known(status, rep.cause.unwrap_or(own));
            }
            let st = svc.stats();
            if st.contexts != before - 1 {
                self.fail(&format!(
                    "a sticky fault tears its context down, and only it: {st:?}"
                ));
            };
            summary.sticky += 1;
            return;
        }
        if rep.cause.is_some() {
            // A deferred error reported instead: the request was not performed.
            return;
        }
        let used = self.used();
        let room_for_object = self.objects() < MAX_OBJECTS as usize;
        match request {
            Request::Ping { data } => {
                self.ensure(
                    ok && rep.body == ReplyBody::Data(data.clone()),
                    "Ping echoes",
                );
            }
            Request::CtxCreate { device, flags } => {
                let created = self.contexts.iter().filter(|c| !c.primary).count();
                let valid_flags = flags & !0xff == 0 && !matches!(flags & 7, 3 | 5..=7);
                self.ensure(
                    ok == (*device == 0 && valid_flags && created < MAX_CREATED && room_for_object),
                    "CtxCreate succeeds iff its device and flags are valid and the quotas allow",
                );
                if let ReplyBody::Context(c) = rep.body {
                    self.fresh(c.0, "context");
                    self.contexts_seen.push(c.0);
                    self.contexts.push(Ctx {
                        h: c.0,
                        primary: false,
                        alive: true,
                        sticky: Sticky::No,
                    });
                    self.current = Some(c.0);
                    summary.contexts += 1;
                }
            }
            Request::CtxDestroy { ctx } => {
                let created = self.ctx(ctx.0).is_some_and(|c| !c.primary);
                self.ensure(
                    ok == created,
                    "CtxDestroy succeeds iff it names a created context the guest holds",
                );
                if ok {
                    let before = self.alive();
                    let was_alive = self.ctx(ctx.0).is_some_and(|c| c.alive);
                    self.drop_ctx(ctx.0);
                    let st = svc.stats();
                    if st.contexts != before - usize::from(was_alive) {
                        self.fail(&format!("CtxDestroy frees the context: {st:?}"));
                    };
                    summary.destroyed += 1;
                }
            }
            Request::ModuleGetGlobal { module, name } => {
                let m = self
                    .modules
                    .iter()
                    .find(|m| m.live && m.h == module.0 && m.ctx == self.at());
                let known = m.map(|m| (m.exact, m.vars.iter().find(|v| &v.0 == name).map(|v| v.1)));
                match known {
                    None => self.ensure(!ok, "a variable of a dead or foreign module fails"),
                    Some((true, Some(_))) => {
                        self.ensure(ok, "a variable of a live module is found")
                    }
                    Some((true, None)) => self.ensure(!ok, "an unknown variable name fails"),
                    Some((false, _)) => {}
                }
                if let ReplyBody::Global { dptr, bytes } = rep.body {
                    if let Some((true, Some(size))) = known {
                        self.ensure(
                            bytes == size || (size == 0 && bytes <= 1),
                            "ModuleGetGlobal gives the variable's size",
                        );
                    }
                    self.ensure(dptr.0 != 0, "a variable has an address");
                    let at = self.at();
                    // Reachable by copies and memsets of its context from now on.
                    match self
                        .allocs
                        .iter_mut()
                        .find(|a| a.live && a.var_of == Some(module.0) && a.ptr == dptr.0)
                    {
                        Some(v) => {
                            v.size = bytes;
                            v.data = vec![0; bytes as usize];
                            v.known = vec![false; bytes as usize];
                        }
                        None => self.allocs.push(Alloc {
                            ctx: at,
                            var_of: Some(module.0),
                            ptr: dptr.0,
                            size: bytes,
                            live: true,
                            data: vec![0; bytes as usize],
                            known: vec![false; bytes as usize],
                        }),
                    }
                    summary.globals += 1;
                }
            }
            Request::FuncGetAttribute {
                function,
                attribute,
            } => {
                let live = self.func_live(*function);
                self.ensure(
                    ok == (live && (0..=15).contains(attribute)),
                    "FuncGetAttribute succeeds iff the function is live and the attribute known",
                );
                if let (ReplyBody::Int(v), Some(f)) = (
                    &rep.body,
                    self.funcs.iter().find(|f| f.live && f.h == function.0),
                ) {
                    let want = match attribute {
                        0 => Some(1024),
                        8 => f.max_dynamic,
                        9 => Some(f.carveout),
                        _ => None,
                    };
                    if let Some(w) = want {
                        if *v != w {
                            self.fail(&format!("attribute {attribute} reads {v}, {w} expected"));
                        }
                    }
                    summary.attributes += 1;
                }
            }
            Request::FuncSetAttribute {
                function,
                attribute,
                value,
            } => {
                let live = self.func_live(*function);
                match attribute {
                    8 if (0..=OPT_IN_SURE).contains(value) => self.ensure(
                        ok == live,
                        "MAX_DYNAMIC_SHARED_SIZE_BYTES within the opt-in is set",
                    ),
                    8 => self.ensure(
                        !ok || (live && (0..=166_912).contains(value)),
                        "MAX_DYNAMIC_SHARED_SIZE_BYTES beyond the device's is refused",
                    ),
                    9 => self.ensure(
                        ok == (live && (-1..=100).contains(value)),
                        "a carveout is a percentage or -1",
                    ),
                    _ => self.ensure(!ok, "only two function attributes are settable"),
                }
                if ok {
                    if let Some(f) = self.funcs.iter_mut().find(|f| f.live && f.h == function.0) {
                        if *attribute == 8 {
                            f.max_dynamic = Some(*value);
                        } else {
                            f.carveout = *value;
                        }
                    }
                    summary.attributes += 1;
                }
            }
            Request::Init { flags } => {
                self.ensure(ok == (*flags == 0), "Init succeeds iff its flags are 0");
                if ok {
                    self.initialized = true;
                }
            }
            Request::DriverGetVersion | Request::DeviceGetCount => {
                self.ensure(ok, "a device query succeeds");
            }
            Request::DeviceGet { ordinal: d }
            | Request::DeviceGetName { device: d }
            | Request::DeviceGetUuid { device: d }
            | Request::DeviceGetPciBusId { device: d }
            | Request::DeviceComputeCapability { device: d } => {
                self.ensure(ok == (*d == 0), "device 0 is the guest's only device");
            }
            Request::DeviceGetAttribute { device, .. } => {
                self.ensure(*device == 0 || !ok, "device 0 is the guest's only device");
            }
            Request::DeviceTotalMem { device } => {
                self.ensure(ok == (*device == 0), "device 0 is the guest's only device");
                if let ReplyBody::Size(n) = rep.body {
                    self.ensure(n <= QUOTA_BYTES, "DeviceTotalMem is at most the quota");
                }
            }
            Request::PrimaryCtxRetain { device } => {
                self.ensure(ok == (*device == 0), "retaining device 0 succeeds");
                if let ReplyBody::Context(c) = rep.body {
                    match self.primary {
                        Some(h) => self.ensure(c.0 == h, "a retain gives the same context"),
                        None => {
                            self.fresh(c.0, "context");
                            self.primary = Some(c.0);
                            self.contexts_seen.push(c.0);
                            self.contexts.push(Ctx {
                                h: c.0,
                                primary: true,
                                alive: true,
                                sticky: Sticky::No,
                            });
                        }
                    }
                    self.retains += 1;
                }
            }
            Request::PrimaryCtxRelease { device } => {
                self.ensure(
                    ok == (*device == 0 && self.retains > 0),
                    "a release succeeds iff the context is retained",
                );
                if ok {
                    self.retains -= 1;
                    if let (0, Some(p)) = (self.retains, self.primary) {
                        let before = self.alive();
                        let was_alive = self.ctx(p).is_some_and(|c| c.alive);
                        self.drop_ctx(p);
                        let st = svc.stats();
                        if st.contexts != before - usize::from(was_alive) {
                            self.fail(&format!("the last release frees the context: {st:?}"));
                        };
                    }
                }
            }
            Request::CtxSetCurrent { ctx } => {
                let valid = ctx.0 == 0 || self.ctx(ctx.0).is_some();
                self.ensure(
                    ok == valid,
                    "CtxSetCurrent succeeds iff the guest holds the context",
                );
                if ok {
                    self.current = (ctx.0 != 0).then_some(ctx.0);
                }
            }
            Request::CtxSynchronize => {}
            Request::ModuleLoadData { image } => {
                let load = self.load.unwrap_or(Load::Mutated);
                if let Load::Globals { bytes, valid } = load {
                    if used + bytes > QUOTA_BYTES {
                        self.ensure(!ok, "a module whose variables are over the quota fails");
                    }
                    if valid && room_for_object && used + bytes <= QUOTA_BYTES {
                        self.ensure(ok, "a module whose variables fit loads");
                    }
                }
                if load == Load::Fixture && room_for_object && used + 1024 <= QUOTA_BYTES {
                    self.ensure(ok, "a fixture module loads");
                }
                if !room_for_object {
                    self.ensure(!ok, "the object quota holds for modules");
                }
                if let ReplyBody::Module(m) = rep.body {
                    self.fresh(m.0, "module");
                    let now = s.session().map(|x| x.mem_used()).unwrap_or(0);
                    self.ensure(now >= used, "loading a module does not free memory");
                    let bytes = now - used;
                    if let Load::Globals { bytes: b, .. } = load {
                        self.ensure(b == bytes, "a module's variables count against the quota");
                    }
                    let text = String::from_utf8_lossy(image);
                    let at = self.at();
                    self.modules.push(Module {
                        h: m.0,
                        ctx: at,
                        live: true,
                        kernels: entry_names(&text),
                        vars: variables(&text),
                        bytes,
                        exact: load != Load::Mutated,
                    });
                    summary.modules += 1;
                }
            }
            Request::ModuleUnload { module } => {
                let live = self.module_live(*module);
                self.ensure(ok == live, "ModuleUnload succeeds iff the module is live");
                if ok {
                    for m in self.modules.iter_mut().filter(|m| m.h == module.0) {
                        m.live = false;
                    }
                    for f in self.funcs.iter_mut().filter(|f| f.module == module.0) {
                        f.live = false;
                    }
                    // Its variables are not reachable any more.
                    for v in self
                        .allocs
                        .iter_mut()
                        .filter(|a| a.var_of == Some(module.0))
                    {
                        v.live = false;
                    }
                    summary.unloads += 1;
                }
            }
            Request::ModuleGetFunction { module, name } => {
                let m = self
                    .modules
                    .iter()
                    .find(|m| m.live && m.h == module.0 && m.ctx == self.at());
                let known = m.map(|m| (m.exact, m.kernels.contains(name)));
                let existing = self
                    .funcs
                    .iter()
                    .find(|f| f.live && f.module == module.0 && &f.name == name)
                    .map(|f| f.h);
                match known {
                    None => self.ensure(!ok, "a function of a dead or foreign module fails"),
                    Some((true, true)) => self.ensure(
                        ok == (existing.is_some() || room_for_object),
                        "a kernel of a live module is found (within the object quota)",
                    ),
                    Some((true, false)) => self.ensure(!ok, "an unknown kernel name fails"),
                    Some((false, _)) => {}
                }
                if let ReplyBody::Function(info) = &rep.body {
                    match existing {
                        Some(h) => self.ensure(
                            info.function.0 == h,
                            "one function handle per (module, name)",
                        ),
                        None => {
                            self.fresh(info.function.0, "function");
                            let at = self.at();
                            self.funcs.push(Func {
                                h: info.function.0,
                                ctx: at,
                                live: true,
                                module: module.0,
                                name: name.clone(),
                                layout: info.params.clone(),
                                max_dynamic: None,
                                carveout: -1,
                            });
                            summary.functions += 1;
                        }
                    }
                }
            }
            Request::MemAlloc { bytes } => {
                let fits = *bytes > 0 && used.saturating_add(*bytes) <= QUOTA_BYTES;
                self.ensure(
                    ok == (fits && room_for_object),
                    "MemAlloc succeeds iff it fits the memory and object quotas",
                );
                if let ReplyBody::DevicePtr(p) = rep.body {
                    let at = self.at();
                    // (Contexts are separate address spaces: only the context's own.)
                    let overlaps = self.allocs.iter().any(|a| {
                        a.live
                            && a.ctx == at
                            && p.0 < a.ptr.saturating_add(a.size)
                            && a.ptr < p.0.saturating_add(*bytes)
                    });
                    self.ensure(
                        p.0 != 0 && !overlaps,
                        "a new allocation overlaps no live one",
                    );
                    self.allocs.push(Alloc {
                        ctx: at,
                        var_of: None,
                        ptr: p.0,
                        size: *bytes,
                        live: true,
                        data: vec![0; *bytes as usize],
                        known: vec![false; *bytes as usize],
                    });
                }
            }
            Request::MemFree { ptr } => {
                let cx = self.at();
                let at = self
                    .allocs
                    .iter()
                    .position(|a| a.live && a.ptr == ptr.0 && a.ctx == cx && a.var_of.is_none());
                self.ensure(
                    ok == at.is_some(),
                    "MemFree succeeds iff it names a live allocation",
                );
                if let (true, Some(i)) = (ok, at) {
                    let a = &mut self.allocs[i];
                    a.live = false;
                    a.data = Vec::new();
                    a.known = Vec::new();
                }
            }
            Request::MemGetInfo => {
                self.ensure(ok, "MemGetInfo succeeds");
                if let ReplyBody::MemInfo { free, total } = rep.body {
                    self.ensure(total == QUOTA_BYTES, "MemGetInfo's total is the quota");
                    if free + used != total {
                        self.fail(&format!(
                            "MemGetInfo: free {free} + used {used} == total {total}"
                        ));
                    };
                }
            }
            Request::Memset {
                dst,
                value,
                count,
                width,
                stream,
            } => {
                let w = width.bytes();
                let valid = *count == 0
                    || (dst.0 % w == 0
                        && count
                            .checked_mul(w)
                            .is_some_and(|n| self.inside(dst.0, n).is_some()));
                let stream_ok = stream.is_none_or(|s| self.stream_ok(s));
                self.ensure(
                    !ok || (valid && stream_ok),
                    "a memset outside the allocations or on a dead stream fails",
                );
                if stream.is_none() || *count == 0 {
                    self.ensure(
                        ok || !valid || !stream_ok,
                        "a memset inside an allocation succeeds",
                    );
                }
                if ok && stream.is_none() && *count > 0 {
                    let unit: Vec<u8> = match width {
                        MemsetWidth::W8 => vec![*value as u8],
                        MemsetWidth::W16 => (*value as u16).to_le_bytes().to_vec(),
                        MemsetWidth::W32 => value.to_le_bytes().to_vec(),
                    };
                    let bytes: Vec<u8> = unit
                        .iter()
                        .copied()
                        .cycle()
                        .take((*count * w) as usize)
                        .collect();
                    self.write(dst.0, &bytes);
                }
            }
            Request::MemcpyHtoD { dst, src, stream } => {
                let stream_ok = stream.is_none_or(|s| self.stream_ok(s));
                let (len, src_ok) = match src {
                    HostSource::Inline(d) => (d.len() as u64, true),
                    HostSource::Guest(e) => (e.iter().map(|e| e.len).sum(), self.sg_ok(e)),
                };
                let valid = self.inside(dst.0, len).is_some() && src_ok;
                self.ensure(
                    !ok || (valid && stream_ok),
                    "a copy outside the allocations or guest RAM fails",
                );
                if stream.is_none() {
                    self.ensure(ok || !valid, "a copy inside an allocation succeeds");
                }
                if ok && stream.is_none() {
                    match src {
                        HostSource::Inline(d) => self.write(dst.0, d),
                        HostSource::Guest(_) => {
                            if let Some(g) = gathered {
                                self.write(dst.0, &g)
                            }
                        }
                    }
                }
            }
            Request::MemcpyDtoH {
                src,
                bytes,
                dst,
                stream,
            } => {
                let stream_ok = stream.is_none_or(|s| self.stream_ok(s));
                let dst_ok = match dst {
                    HostDest::Inline => *bytes <= u64::from(self.limits.max_inline),
                    HostDest::Guest(e) => self.sg_ok(e),
                };
                let valid = self.inside(src.0, *bytes).is_some() && dst_ok;
                self.ensure(
                    !ok || (valid && stream_ok),
                    "a copy outside the allocations or guest RAM fails",
                );
                if stream.is_none() {
                    self.ensure(ok || !valid, "a copy inside an allocation succeeds");
                }
                if ok {
                    match (dst, &rep.body) {
                        (HostDest::Inline, ReplyBody::Data(d)) => {
                            self.ensure(d.len() as u64 == *bytes, "DtoH returns the bytes asked");
                            self.compare(src.0, d, summary);
                        }
                        (HostDest::Guest(entries), ReplyBody::Data(d)) => {
                            self.ensure(d.is_empty(), "DtoH into guest RAM returns no data");
                            // Later entries overwrite earlier ones at the same address.
                            let mut at: HashMap<u64, u64> = HashMap::new();
                            let mut off = 0u64;
                            for e in entries {
                                for k in 0..e.len {
                                    at.insert(e.gpa + k, off + k);
                                }
                                off += e.len;
                            }
                            let mut dev = vec![0u8; *bytes as usize];
                            let mut seen = vec![false; *bytes as usize];
                            for (gpa, o) in at {
                                let mut b = [0u8];
                                mem.read_slice(&mut b, GuestAddress(gpa))
                                    .expect("guest RAM");
                                dev[o as usize] = b[0];
                                seen[o as usize] = true;
                            }
                            if let Some((i, base)) = self.inside(src.0, *bytes) {
                                let a = &self.allocs[i];
                                for k in 0..*bytes as usize {
                                    if seen[k] && a.known[base as usize + k] {
                                        summary.compared += 1;
                                        let want = a.data[base as usize + k];
                                        if want != dev[k] {
                                            self.fail(&format!(
                                                "guest byte of device {:#x}+{:#x}: {:#x}, {want:#x} was written",
                                                a.ptr,
                                                base as usize + k,
                                                dev[k]
                                            ));
                                        };
                                    }
                                }
                            }
                        }
                        _ => self.ensure(false, "a DtoH reply carries data"),
                    }
                }
            }
            Request::MemcpyDtoD {
                dst,
                src,
                bytes,
                stream,
            } => {
                let stream_ok = stream.is_none_or(|s| self.stream_ok(s));
                let valid =
                    self.inside(dst.0, *bytes).is_some() && self.inside(src.0, *bytes).is_some();
                self.ensure(
                    !ok || (valid && stream_ok),
                    "a copy outside the allocations fails",
                );
                if stream.is_none() {
                    self.ensure(ok || !valid, "a copy inside allocations succeeds");
                }
                if ok && stream.is_none() {
                    let overlap = src.0 < dst.0.saturating_add(*bytes)
                        && dst.0 < src.0.saturating_add(*bytes);
                    if overlap {
                        self.forget(dst.0, *bytes);
                    } else if let Some((i, off)) = self.inside(src.0, *bytes) {
                        let a = &self.allocs[i];
                        let (o, n) = (off as usize, *bytes as usize);
                        let data = a.data[o..o + n].to_vec();
                        let known = a.known[o..o + n].to_vec();
                        if let Some((j, doff)) = self.inside(dst.0, *bytes) {
                            let d = &mut self.allocs[j];
                            let p = doff as usize;
                            d.data[p..p + n].copy_from_slice(&data);
                            d.known[p..p + n].copy_from_slice(&known);
                        }
                    }
                }
            }
            Request::StreamCreate { flags, .. } => {
                self.ensure(
                    ok == (flags & !1 == 0 && room_for_object),
                    "StreamCreate succeeds iff its flags are valid and the object quota allows",
                );
                if let ReplyBody::Stream(h) = rep.body {
                    self.fresh(h.0, "stream");
                    let ctx = self.at();
                    self.streams.push(Handle {
                        h: h.0,
                        ctx,
                        live: true,
                    });
                }
            }
            Request::StreamDestroy { stream } => {
                let live = stream.0 > 2 && self.stream_ok(*stream);
                self.ensure(ok == live, "StreamDestroy succeeds iff the stream is live");
                if ok {
                    self.streams
                        .iter_mut()
                        .filter(|x| x.h == stream.0)
                        .for_each(|x| x.live = false);
                }
            }
            Request::StreamSynchronize { stream } | Request::StreamQuery { stream } => {
                self.ensure(!ok || self.stream_ok(*stream), "a dead stream fails");
            }
            Request::StreamWaitEvent {
                stream,
                event,
                flags,
            } => {
                self.ensure(
                    !ok || (self.stream_ok(*stream) && self.event_live(*event) && *flags == 0),
                    "StreamWaitEvent with a dead handle fails",
                );
            }
            Request::EventCreate { flags } => {
                self.ensure(
                    ok == (flags & !3 == 0 && room_for_object),
                    "EventCreate succeeds iff its flags are valid and the object quota allows",
                );
                if let ReplyBody::Event(h) = rep.body {
                    self.fresh(h.0, "event");
                    let ctx = self.at();
                    self.events.push(Handle {
                        h: h.0,
                        ctx,
                        live: true,
                    });
                }
            }
            Request::EventDestroy { event } => {
                let live = self.event_live(*event);
                self.ensure(ok == live, "EventDestroy succeeds iff the event is live");
                if ok {
                    self.events
                        .iter_mut()
                        .filter(|x| x.h == event.0)
                        .for_each(|x| x.live = false);
                }
            }
            Request::EventRecord { event, stream } => {
                self.ensure(
                    !ok || (self.event_live(*event) && self.stream_ok(*stream)),
                    "EventRecord with a dead handle fails",
                );
            }
            Request::EventSynchronize { event } | Request::EventQuery { event } => {
                self.ensure(!ok || self.event_live(*event), "a dead event fails");
            }
            Request::EventElapsedTime { start, end } => {
                self.ensure(
                    !ok || (self.event_live(*start) && self.event_live(*end)),
                    "EventElapsedTime with a dead event fails",
                );
            }
            Request::LaunchKernel {
                function, stream, ..
            }
            | Request::LaunchCooperativeKernel {
                function, stream, ..
            } => {
                self.ensure(
                    !ok || (self.func_live(*function) && self.stream_ok(*stream)),
                    "a launch with a dead handle fails",
                );
            }
            Request::Goodbye => unreachable!(),
        }
    }
}
