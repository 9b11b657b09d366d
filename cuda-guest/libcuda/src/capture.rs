//! Stream capture and graphs (`cuStreamBeginCapture`, `cuStreamEndCapture`,
//! `cuGraphInstantiate`, `cuGraphLaunch`), above the [`vmgpu_cuda_api::Backend`]
//! boundary so every mode has them: while a stream captures, its stream-ordered work
//! (kernels, copies, memsets, host functions) is recorded instead of run; the graph is
//! that record, and launching its executable form submits the recorded work, in the
//! order it was captured, to the launch stream.
//!
//! Work captured from several streams (joined by an event recorded in the capturing
//! stream and waited for in another) is one graph; its order of capture is a valid
//! order of the graph's dependencies, so replaying it in that order on one stream
//! keeps every ordering the program asked for. Events recorded during the capture are
//! dependencies of the graph, not work: querying or synchronising one is
//! `CUDA_ERROR_CAPTURED_EVENT` and invalidates the capture, as on a GPU.
//!
//! A capture builds its graph as it goes (each call a node after the capture's current
//! dependencies), so the program may read the graph and those dependencies
//! (`cuStreamGetCaptureInfo`), add nodes to it and change the dependencies
//! (`cuStreamUpdateCaptureDependencies`), or capture into a graph of its own
//! (`cuStreamBeginCaptureToGraph`).
//!
//! Conditional nodes (`IF`, `WHILE`, `SWITCH`): a handle is 4 bytes of device memory
//! that kernels set with `cudaGraphSetConditional` (the simulator's device runtime
//! writes it); when a launched graph reaches such a node, the work before it on the
//! stream is waited for, the value read, and the body it picks submitted.

use std::collections::HashMap;
use std::sync::Arc;

use vmgpu_cuda_api::{DriverError, LaunchConfig};

use crate::fail::{Fail, R};
use crate::ffi::*;

/// A host function as a graph holds it: callable once per launch of the graph.
pub type RepeatableHostFunc = Arc<dyn Fn(Result<(), &DriverError>) + Send + Sync>;

/// One recorded stream-ordered operation. Host addresses are the program's, taken as
/// numbers: a graph reads and writes them when it runs, as a GPU's memcpy node does.
#[derive(Clone)]
pub enum Op {
    /// `cuMemsetD*Async`.
    Memset {
        dst: u64,
        value: u32,
        width: u32,
        count: u64,
    },
    /// `cuMemcpyHtoDAsync`.
    HtoD {
        dst: u64,
        src: usize,
        bytes: usize,
        pinned: bool,
    },
    /// `cuMemcpyDtoHAsync`.
    DtoH {
        dst: usize,
        src: u64,
        bytes: usize,
        pinned: bool,
    },
    /// `cuMemcpyDtoDAsync`.
    DtoD { dst: u64, src: u64, bytes: u64 },
    /// A kernel launch with its packed arguments (`cooperative`: every block at once,
    /// `cuLaunchCooperativeKernel`).
    Launch {
        function: u64,
        config: LaunchConfig,
        args: Vec<Box<[u8]>>,
        cooperative: bool,
    },
    /// `cuLaunchHostFunc`, `cuStreamAddCallback`.
    HostFunc(RepeatableHostFunc),
    /// A graph's allocation (`cuGraphAddMemAllocNode`, `cuMemAllocAsync` captured): the
    /// memory is made with the node and kept for the graph's life (see
    /// [`Captures::graph_alloc`]), so running it does nothing.
    MemAlloc { dptr: u64, bytes: u64 },
    /// A graph's free of its allocation (`cuGraphAddMemFreeNode`, `cuMemFreeAsync`
    /// captured): nothing to run either.
    MemFree { dptr: u64 },
    /// A conditional node (`CU_GRAPH_NODE_TYPE_CONDITIONAL`): see [`Cond`].
    Cond(Arc<Cond>),
    /// A child graph node (`cuGraphAddChildGraphNode`): the node's own copy of the
    /// graph it was given (runs as its nodes do, in their order).
    Child(u64),
    /// `cuGraphAddEventRecordNode`: records the event on the launch stream.
    EventRecord(u64),
    /// `cuGraphAddEventWaitNode`: the launch stream waits for the event.
    EventWait(u64),
}

/// `CUgraphConditionalNodeType`: `IF` (run the first body when the value is not 0, the
/// second, if there are two, when it is), `WHILE` (run the body while it is not 0,
/// looking before each run), `SWITCH` (run body `value`, if there is one).
pub const COND_IF: u32 = 0;
pub const COND_WHILE: u32 = 1;
pub const COND_SWITCH: u32 = 2;

/// A conditional node: its handle (here, the device address of the 32-bit value that
/// `cudaGraphSetConditional` writes), its type and its body graphs; in an executable
/// graph, the bodies' work too (`run`, one per body).
#[derive(Debug)]
pub struct Cond {
    pub handle: u64,
    pub kind: u32,
    pub bodies: Vec<u64>,
    pub run: Vec<Graph>,
}

impl std::fmt::Debug for Op {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Op::Memset { dst, count, .. } => write!(f, "memset {dst:#x} x{count}"),
            Op::HtoD { dst, bytes, .. } => write!(f, "htod {dst:#x} {bytes} B"),
            Op::DtoH { src, bytes, .. } => write!(f, "dtoh {src:#x} {bytes} B"),
            Op::DtoD { dst, src, bytes } => write!(f, "dtod {src:#x} -> {dst:#x} {bytes} B"),
            Op::Launch { function, .. } => write!(f, "launch {function:#x}"),
            Op::HostFunc(_) => f.write_str("host function"),
            Op::MemAlloc { dptr, bytes } => write!(f, "alloc {dptr:#x} {bytes} B"),
            Op::MemFree { dptr } => write!(f, "free {dptr:#x}"),
            Op::Cond(c) => write!(f, "conditional {:#x} type {}", c.handle, c.kind),
            Op::Child(g) => write!(f, "child graph {g:#x}"),
            Op::EventRecord(e) => write!(f, "record event {e:#x}"),
            Op::EventWait(e) => write!(f, "wait for event {e:#x}"),
        }
    }
}

/// A handle of kind `what` that names nothing live: `CUDA_ERROR_INVALID_VALUE`, as the
/// driver answers for graphs.
fn unknown(what: &str, h: u64) -> Fail {
    Fail::new(CUDA_ERROR_INVALID_VALUE, format!("{what} {h:#x}"))
}

/// `CUstreamCaptureStatus`.
pub const CAPTURE_NONE: i32 = 0;
/// `CU_STREAM_CAPTURE_STATUS_ACTIVE`.
pub const CAPTURE_ACTIVE: i32 = 1;
/// `CU_STREAM_CAPTURE_STATUS_INVALIDATED`.
pub const CAPTURE_INVALIDATED: i32 = 2;

/// `CUgraphInstantiate_flags` this library knows: auto-free on launch, upload, device
/// launch, use node priority.
const INSTANTIATE_AUTO_FREE: u64 = 1;
const INSTANTIATE_UPLOAD: u64 = 2;
const INSTANTIATE_DEVICE_LAUNCH: u64 = 4;
const INSTANTIATE_USE_NODE_PRIORITY: u64 = 8;

/// One capture sequence.
#[derive(Debug)]
struct Sequence {
    /// Its number (`cuStreamGetCaptureInfo`'s id).
    id: u64,
    /// The stream that began it (only it may end it).
    origin: u64,
    /// The graph it builds: one of its own (the sequence's number), or the program's
    /// (`cuStreamBeginCaptureToGraph`, `owned` false). Each call captured is a node of
    /// it after the nodes in `deps`, then the only one there.
    graph: u64,
    owned: bool,
    deps: Vec<usize>,
    /// `deps` as handles, for `cuStreamGetCaptureInfo` (which lends the array).
    dep_handles: Vec<u64>,
    /// Why the capture was invalidated, once it was.
    invalid: Option<String>,
}

/// An executable graph (`CUgraphExec`): the work in an order its dependencies allow.
pub type Graph = Arc<Vec<Op>>;

/// `CUgraphNodeType` of the nodes this library builds.
pub const NODE_KERNEL: i32 = 0;
pub const NODE_MEMCPY: i32 = 1;
pub const NODE_MEMSET: i32 = 2;
pub const NODE_HOST: i32 = 3;
pub const NODE_GRAPH: i32 = 4;
pub const NODE_EMPTY: i32 = 5;
pub const NODE_WAIT_EVENT: i32 = 6;
pub const NODE_EVENT_RECORD: i32 = 7;
pub const NODE_CONDITIONAL: i32 = 13;
pub const NODE_MEM_ALLOC: i32 = 10;
pub const NODE_MEM_FREE: i32 = 11;

/// One node of a graph: its kind, its work (a memcpy or memset of several rows is
/// several operations; an empty node has none) and the nodes it depends on (indices).
#[derive(Debug, Clone)]
struct Node {
    handle: u64,
    kind: i32,
    ops: Vec<Op>,
    deps: Vec<usize>,
}

/// A conditional handle of a graph (`cuGraphConditionalHandleCreate`): the device
/// address of its value, the value a launch of the graph starts it at and whether it
/// does (`CU_GRAPH_COND_ASSIGN_DEFAULT`).
#[derive(Debug, Clone, Copy)]
struct CondHandle {
    addr: u64,
    default: u32,
    assign: bool,
}

/// A graph (`CUgraph`): captured (each node depends on the one captured before it) or
/// built node by node (`cuGraphAdd*Node`).
#[derive(Debug, Clone, Default)]
struct GraphDef {
    nodes: Vec<Node>,
    handles: Vec<CondHandle>,
}

impl GraphDef {
    /// The nodes' work in an order that keeps every dependency: of the nodes whose
    /// dependencies are done, the one made first (so a captured graph runs in capture
    /// order); a cycle is `CUDA_ERROR_INVALID_VALUE`.
    fn ordered(&self, graph: u64) -> R<Vec<Op>> {
        let n = self.nodes.len();
        let mut waiting: Vec<usize> = self.nodes.iter().map(|x| x.deps.len()).collect();
        let mut dependents: Vec<Vec<usize>> = vec![Vec::new(); n];
        for (i, node) in self.nodes.iter().enumerate() {
            for &d in &node.deps {
                dependents[d].push(i);
            }
        }
        let mut ready: std::collections::BTreeSet<usize> =
            (0..n).filter(|&i| waiting[i] == 0).collect();
        let mut ops = Vec::new();
        let mut done = 0;
        while let Some(i) = ready.pop_first() {
            done += 1;
            ops.extend(self.nodes[i].ops.iter().cloned());
            for &j in &dependents[i] {
                waiting[j] -= 1;
                if waiting[j] == 0 {
                    ready.insert(j);
                }
            }
        }
        if done != n {
            return Err(Fail::new(
                CUDA_ERROR_INVALID_VALUE,
                format!("graph {graph:#x}: its dependencies form a cycle"),
            ));
        }
        Ok(ops)
    }
}

/// `CUDA_ERROR_INVALID_VALUE` unless node `n` is of kind `kind` (parameters of one kind
/// cannot go to a node of another).
fn same_kind(n: &Node, kind: i32) -> R<()> {
    if n.kind == kind {
        Ok(())
    } else {
        Err(Fail::new(
            CUDA_ERROR_INVALID_VALUE,
            format!(
                "node {:#x} is of type {}, the parameters are for type {kind}",
                n.handle, n.kind
            ),
        ))
    }
}

/// The kind of node an operation recorded by a capture is.
fn kind_of(op: &Op) -> i32 {
    match op {
        Op::Memset { .. } => NODE_MEMSET,
        Op::HtoD { .. } | Op::DtoH { .. } | Op::DtoD { .. } => NODE_MEMCPY,
        Op::Launch { .. } => NODE_KERNEL,
        Op::HostFunc(_) => NODE_HOST,
        Op::MemAlloc { .. } => NODE_MEM_ALLOC,
        Op::MemFree { .. } => NODE_MEM_FREE,
        Op::Cond(_) => NODE_CONDITIONAL,
        Op::Child(_) => NODE_GRAPH,
        Op::EventRecord(_) => NODE_EVENT_RECORD,
        Op::EventWait(_) => NODE_WAIT_EVENT,
    }
}

/// Memory a graph allocates: its size, and whether it has been freed (by a free node of
/// the graph, or by the program outside it), after which it goes once no graph or
/// executable graph holds its allocation node.
#[derive(Debug, Clone, Copy)]
struct GraphAlloc {
    bytes: u64,
    freed: bool,
}

/// The capture state of the program: sequences by number, which stream and which event
/// belong to which, and the graphs made.
#[derive(Debug, Default)]
pub struct Captures {
    sequences: HashMap<u64, Sequence>,
    /// Capturing streams (joined ones too): stream handle to sequence.
    streams: HashMap<u64, u64>,
    /// Events last recorded in a capturing stream: event handle to sequence.
    events: HashMap<u64, u64>,
    graphs: HashMap<u64, GraphDef>,
    /// Node handle to its graph and index there.
    nodes: HashMap<u64, (u64, usize)>,
    /// Executable graphs: the nodes they were made from (updated by
    /// `cuGraphExec*SetParams` and `cuGraphExecUpdate`) and their work in order.
    execs: HashMap<u64, (GraphDef, Graph)>,
    /// User objects (`cuUserObjectCreate`) by handle.
    objects: HashMap<u64, UserObject>,
    /// The user-object references a graph or executable graph owns: handle to
    /// (object, count).
    owned: HashMap<u64, Vec<(u64, u32)>>,
    /// Graphs' allocations by address.
    graph_mem: HashMap<u64, GraphAlloc>,
    /// The most bytes graphs' allocations held at once (since reset).
    graph_mem_high: u64,
    /// Conditional handles' values (device memory) by address: freed once no graph
    /// (the one each was made for, or a copy of it) or executable graph has them.
    cond_mem: std::collections::HashSet<u64>,
    /// The body graphs of each conditional node, the array `phGraph_out` lends.
    cond_bodies: HashMap<u64, Box<[u64]>>,
    next: u64,
}

/// A destructor to call (`cuUserObjectCreate`'s `destroy(ptr)`), once no lock is held.
#[derive(Debug, Clone, Copy)]
pub struct Destructor {
    /// The program's function, as a number.
    pub destroy: usize,
    /// Its argument.
    pub ptr: usize,
}

/// A reference-counted object of the program whose destructor runs when its last
/// reference goes (`CUuserObject`).
#[derive(Debug)]
struct UserObject {
    destructor: Destructor,
    refs: u64,
}

impl Captures {
    fn number(&mut self) -> u64 {
        self.next += 1;
        self.next
    }

    /// `cuStreamBeginCapture`: `stream` (a created stream) starts a sequence.
    pub fn begin(&mut self, stream: u64) -> R<()> {
        if self.streams.contains_key(&stream) {
            return Err(Fail::new(
                CUDA_ERROR_ILLEGAL_STATE,
                format!("stream {stream:#x} is already capturing"),
            ));
        }
        let id = self.number();
        self.graphs.insert(id, GraphDef::default());
        self.sequences.insert(
            id,
            Sequence {
                id,
                origin: stream,
                graph: id,
                owned: true,
                deps: vec![],
                dep_handles: vec![],
                invalid: None,
            },
        );
        self.streams.insert(stream, id);
        Ok(())
    }

    /// `cuStreamBeginCaptureToGraph`: `stream` starts a sequence adding to the program's
    /// `graph`, its first node after `deps` (nodes of that graph).
    pub fn begin_to_graph(&mut self, stream: u64, graph: u64, deps: &[u64]) -> R<()> {
        self.def(graph)?;
        let idx = deps
            .iter()
            .map(|&d| self.index_in(graph, d))
            .collect::<R<Vec<_>>>()?;
        self.begin(stream)?;
        let id = self.streams[&stream];
        self.graphs.remove(&id);
        let seq = self.sequences.get_mut(&id).expect("just begun");
        seq.graph = graph;
        seq.owned = false;
        seq.deps = idx;
        Ok(())
    }

    /// Whether `stream` captures into a graph of the program's
    /// (`cuStreamBeginCaptureToGraph`: ending it needs no graph slot).
    pub fn captures_to_program_graph(&self, stream: u64) -> bool {
        self.streams
            .get(&stream)
            .and_then(|id| self.sequences.get(id))
            .is_some_and(|q| !q.owned)
    }

    /// The capturing `stream`'s graph and the nodes its next work will depend on
    /// (`cuStreamGetCaptureInfo`; the array stays until the capture changes).
    pub fn info(&mut self, stream: u64) -> Option<(u64, &[u64])> {
        let id = *self.streams.get(&stream)?;
        let seq = self.sequences.get_mut(&id)?;
        let nodes = &self.graphs.get(&seq.graph)?.nodes;
        seq.dep_handles = seq.deps.iter().map(|&i| nodes[i].handle).collect();
        Some((seq.graph, &seq.dep_handles))
    }

    /// `cuStreamUpdateCaptureDependencies`: the capturing `stream`'s next work depends
    /// on `nodes` (`set`) or on them too.
    pub fn update_deps(&mut self, stream: u64, nodes: &[u64], set: bool) -> R<()> {
        let id = *self.streams.get(&stream).ok_or_else(|| {
            Fail::new(
                CUDA_ERROR_ILLEGAL_STATE,
                format!("stream {stream:#x} is not capturing"),
            )
        })?;
        let graph = self.sequences[&id].graph;
        let idx = nodes
            .iter()
            .map(|&d| self.index_in(graph, d))
            .collect::<R<Vec<_>>>()?;
        let seq = self.sequences.get_mut(&id).expect("the stream's sequence");
        if set {
            seq.deps.clear();
        }
        for i in idx {
            if !seq.deps.contains(&i) {
                seq.deps.push(i);
            }
        }
        Ok(())
    }

    /// `cuStreamEndCapture`: the sequence's graph (`None` with the error when the
    /// capture was invalidated). Every stream joined to it stops capturing.
    pub fn end(&mut self, stream: u64) -> R<u64> {
        let id = *self.streams.get(&stream).ok_or_else(|| {
            Fail::new(
                CUDA_ERROR_ILLEGAL_STATE,
                format!("stream {stream:#x} is not capturing"),
            )
        })?;
        let origin = self.sequences[&id].origin;
        if origin != stream {
            return Err(Fail::new(
                CUDA_ERROR_STREAM_CAPTURE_UNMATCHED,
                format!("the capture began in stream {origin:#x}, not {stream:#x}"),
            ));
        }
        let seq = self.sequences.remove(&id).expect("the stream's sequence");
        self.streams.retain(|_, s| *s != id);
        self.events.retain(|_, s| *s != id);
        if let Some(why) = seq.invalid {
            if seq.owned {
                self.graphs.remove(&seq.graph);
                self.nodes.retain(|_, (g, _)| *g != seq.graph);
            }
            return Err(Fail::new(
                CUDA_ERROR_STREAM_CAPTURE_INVALIDATED,
                format!("capture {}: {why}", seq.id),
            ));
        }
        Ok(seq.graph)
    }

    /// Records `op` when `stream` captures (`Ok(true)`); `Ok(false)` when it does not.
    pub fn record(&mut self, stream: u64, op: impl FnOnce() -> Op) -> R<bool> {
        self.record_all(stream, || vec![op()])
    }

    /// Records the operations of one call (a pitched copy's rows: one node, as the
    /// driver captures it) when `stream` captures (`Ok(true)`); `Ok(false)` when it
    /// does not. `ops` gives at least one operation, all of one node kind.
    pub fn record_all(&mut self, stream: u64, ops: impl FnOnce() -> Vec<Op>) -> R<bool> {
        let Some(&id) = self.streams.get(&stream) else {
            return Ok(false);
        };
        let seq = self
            .sequences
            .get_mut(&id)
            .expect("a capturing stream's sequence");
        if let Some(why) = &seq.invalid {
            return Err(Fail::new(
                CUDA_ERROR_STREAM_CAPTURE_INVALIDATED,
                format!("capture {}: {why}", seq.id),
            ));
        }
        let ops = ops();
        if !ops.is_empty() {
            let (graph, deps) = (seq.graph, std::mem::take(&mut seq.deps));
            self.push_node(graph, kind_of(&ops[0]), ops, deps);
            let i = self.graphs[&graph].nodes.len() - 1;
            self.sequences.get_mut(&id).expect("the sequence").deps = vec![i];
        }
        Ok(true)
    }

    /// The capture status of `stream` and its sequence's number.
    pub fn status(&self, stream: u64) -> (i32, u64) {
        match self.streams.get(&stream) {
            None => (CAPTURE_NONE, 0),
            Some(id) if self.sequences[id].invalid.is_some() => (CAPTURE_INVALIDATED, *id),
            Some(id) => (CAPTURE_ACTIVE, *id),
        }
    }

    /// Refuses `what` on a capturing stream (it cannot be captured) and invalidates the
    /// capture, as the driver does.
    pub fn refuse(&mut self, stream: u64, what: &str) -> R<()> {
        match self.streams.get(&stream) {
            None => Ok(()),
            Some(id) => {
                let seq = self
                    .sequences
                    .get_mut(id)
                    .expect("a capturing stream's sequence");
                seq.invalid
                    .get_or_insert_with(|| format!("{what} on the capturing stream"));
                Err(Fail::new(
                    CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED,
                    format!("{what}: stream {stream:#x} is capturing"),
                ))
            }
        }
    }

    /// `cuEventRecord` on `stream`: while it captures, the event becomes a dependency
    /// of the sequence (`Ok(true)`: nothing to run); otherwise it is an event again.
    pub fn event_record(&mut self, event: u64, stream: u64) -> R<bool> {
        match self.streams.get(&stream).copied() {
            Some(id) => {
                self.events.insert(event, id);
                Ok(true)
            }
            None => {
                self.events.remove(&event);
                Ok(false)
            }
        }
    }

    /// `cuStreamWaitEvent`: waiting for an event of a sequence joins `stream` to it
    /// (`Ok(true)`: nothing to run, the order is the capture's).
    pub fn wait_event(&mut self, stream: u64, event: u64) -> R<bool> {
        let Some(&id) = self.events.get(&event) else {
            // An event of work outside any capture: a capturing stream may not depend
            // on it.
            return match self.streams.get(&stream) {
                None => Ok(false),
                Some(id) => {
                    let seq = self
                        .sequences
                        .get_mut(id)
                        .expect("a capturing stream's sequence");
                    seq.invalid
                        .get_or_insert_with(|| format!("a wait for uncaptured event {event:#x}"));
                    Err(Fail::new(
                        CUDA_ERROR_STREAM_CAPTURE_ISOLATION,
                        format!("stream {stream:#x} captures and event {event:#x} does not belong to the capture"),
                    ))
                }
            };
        };
        match self.streams.get(&stream) {
            Some(&s) if s != id => Err(Fail::new(
                CUDA_ERROR_STREAM_CAPTURE_MERGE,
                format!("stream {stream:#x} and event {event:#x} belong to different captures"),
            )),
            _ => {
                self.streams.insert(stream, id);
                Ok(true)
            }
        }
    }

    /// `cuEventQuery`, `cuEventSynchronize` on an event recorded during a capture:
    /// `CUDA_ERROR_CAPTURED_EVENT`, and the capture is invalidated.
    pub fn check_event(&mut self, event: u64, what: &str) -> R<()> {
        let Some(id) = self.events.get(&event) else {
            return Ok(());
        };
        if let Some(seq) = self.sequences.get_mut(id) {
            seq.invalid
                .get_or_insert_with(|| format!("{what} of event {event:#x}"));
        }
        Err(Fail::new(
            CUDA_ERROR_CAPTURED_EVENT,
            format!("{what}: event {event:#x} was recorded in a capturing stream"),
        ))
    }

    /// `cuGraphCreate`: an empty graph.
    pub fn create(&mut self) -> u64 {
        let h = self.number();
        self.graphs.insert(h, GraphDef::default());
        h
    }

    /// `CUDA_ERROR_INVALID_VALUE` unless `graph` is a graph.
    pub fn def_exists(&self, graph: u64) -> R<()> {
        self.def(graph).map(drop)
    }

    fn def(&self, graph: u64) -> R<&GraphDef> {
        self.graphs
            .get(&graph)
            .ok_or_else(|| unknown("graph", graph))
    }

    /// Appends a node to a graph known to exist; its handle.
    fn push_node(&mut self, graph: u64, kind: i32, ops: Vec<Op>, deps: Vec<usize>) -> u64 {
        let handle = self.number();
        let g = self.graphs.get_mut(&graph).expect("the graph exists");
        g.nodes.push(Node {
            handle,
            kind,
            ops,
            deps,
        });
        self.nodes.insert(handle, (graph, g.nodes.len() - 1));
        handle
    }

    /// The index in `graph` of node `node`.
    fn index_in(&self, graph: u64, node: u64) -> R<usize> {
        match self.nodes.get(&node) {
            Some(&(g, i)) if g == graph => Ok(i),
            Some(_) => Err(Fail::new(
                CUDA_ERROR_INVALID_VALUE,
                format!("node {node:#x} belongs to another graph than {graph:#x}"),
            )),
            None => Err(unknown("graph node", node)),
        }
    }

    /// `cuGraphAdd*Node`: a node of kind `kind` doing `ops` after the nodes `deps` (of
    /// the same graph); its handle.
    pub fn add_node(&mut self, graph: u64, deps: &[u64], kind: i32, ops: Vec<Op>) -> R<u64> {
        self.def(graph)?;
        let mut idx = Vec::with_capacity(deps.len());
        for &d in deps {
            let i = self.index_in(graph, d)?;
            if idx.contains(&i) {
                return Err(Fail::new(
                    CUDA_ERROR_INVALID_VALUE,
                    format!("node {d:#x} is named twice as a dependency"),
                ));
            }
            idx.push(i);
        }
        Ok(self.push_node(graph, kind, ops, idx))
    }

    /// `cuGraphAddDependencies`: each `to[i]` runs after `from[i]`.
    pub fn add_dependencies(&mut self, graph: u64, from: &[u64], to: &[u64]) -> R<()> {
        self.def(graph)?;
        let mut edges = Vec::with_capacity(from.len());
        for (&f, &t) in from.iter().zip(to) {
            let (fi, ti) = (self.index_in(graph, f)?, self.index_in(graph, t)?);
            if fi == ti || self.graphs[&graph].nodes[ti].deps.contains(&fi) {
                return Err(Fail::new(
                    CUDA_ERROR_INVALID_VALUE,
                    format!("dependency {f:#x} -> {t:#x}: a node on itself, or already there"),
                ));
            }
            edges.push((fi, ti));
        }
        let g = self.graphs.get_mut(&graph).expect("checked above");
        for (fi, ti) in edges {
            g.nodes[ti].deps.push(fi);
        }
        Ok(())
    }

    /// `cuGraphGetNodes` (`roots`: `cuGraphGetRootNodes`): the nodes' handles, in the
    /// order they were made.
    pub fn node_list(&self, graph: u64, roots: bool) -> R<Vec<u64>> {
        Ok(self
            .def(graph)?
            .nodes
            .iter()
            .filter(|n| !roots || n.deps.is_empty())
            .map(|n| n.handle)
            .collect())
    }

    /// `cuGraphNodeGetType`.
    pub fn node_type(&self, node: u64) -> R<i32> {
        let &(g, i) = self
            .nodes
            .get(&node)
            .ok_or_else(|| unknown("graph node", node))?;
        Ok(self.graphs[&g].nodes[i].kind)
    }

    /// The kind and work of node `node`.
    pub fn node_ops(&self, node: u64) -> R<(i32, Vec<Op>)> {
        let &(g, i) = self
            .nodes
            .get(&node)
            .ok_or_else(|| unknown("graph node", node))?;
        let n = &self.graphs[&g].nodes[i];
        Ok((n.kind, n.ops.clone()))
    }

    /// `cuGraphClone`: a copy of the graph with nodes of its own (and copies of its
    /// conditional bodies and child graphs); its conditional handles are the same.
    pub fn clone_graph(&mut self, graph: u64) -> R<u64> {
        let def = self.def(graph)?.clone();
        let h = self.create();
        self.graphs.get_mut(&h).expect("just made").handles = def.handles.clone();
        for node in def.nodes {
            let ops = node
                .ops
                .into_iter()
                .map(|op| self.deep_copy(op))
                .collect::<R<Vec<Op>>>()?;
            let bodies = match ops.first() {
                Some(Op::Cond(c)) => Some(c.bodies.clone().into_boxed_slice()),
                _ => None,
            };
            let n = self.push_node(h, node.kind, ops, node.deps);
            if let Some(b) = bodies {
                self.cond_bodies.insert(n, b);
            }
        }
        Ok(h)
    }

    /// `op` with copies of the graphs it owns (a conditional node's bodies, a child
    /// graph).
    fn deep_copy(&mut self, op: Op) -> R<Op> {
        Ok(match op {
            Op::Cond(c) => Op::Cond(Arc::new(Cond {
                handle: c.handle,
                kind: c.kind,
                bodies: c
                    .bodies
                    .iter()
                    .map(|&b| self.clone_graph(b))
                    .collect::<R<_>>()?,
                run: vec![],
            })),
            Op::Child(g) => Op::Child(self.clone_graph(g)?),
            op => op,
        })
    }

    /// `cuGraphAddChildGraphNode`: a node running a copy of `child`, after `deps`.
    pub fn add_child(&mut self, graph: u64, deps: &[u64], child: u64) -> R<u64> {
        self.def(graph)?;
        let copy = self.clone_graph(child)?;
        self.add_node(graph, deps, NODE_GRAPH, vec![Op::Child(copy)])
            .inspect_err(|_| {
                let _ = self.destroy(copy);
            })
    }

    /// `cuGraphChildGraphNodeGetGraph`: the graph a child graph node runs.
    pub fn child_graph(&self, node: u64) -> R<u64> {
        match self.node_ops(node)? {
            (NODE_GRAPH, ops) => match ops.first() {
                Some(Op::Child(g)) => Ok(*g),
                _ => Err(unknown("child graph node", node)),
            },
            (k, _) => Err(Fail::new(
                CUDA_ERROR_INVALID_VALUE,
                format!("node {node:#x} is of type {k}, not a child graph node"),
            )),
        }
    }

    /// `cuGraphDestroy`: the destructors of user objects whose last reference it held.
    /// The body graphs of its conditional nodes go with it.
    pub fn destroy(&mut self, graph: u64) -> R<Vec<Destructor>> {
        let def = self
            .graphs
            .remove(&graph)
            .ok_or_else(|| unknown("graph", graph))?;
        self.nodes.retain(|_, (g, _)| *g != graph);
        let mut d = self.disown(graph);
        for n in &def.nodes {
            self.cond_bodies.remove(&n.handle);
            for op in &n.ops {
                let owned = match op {
                    Op::Cond(c) => c.bodies.clone(),
                    Op::Child(g) => vec![*g],
                    _ => vec![],
                };
                for b in owned {
                    if self.graphs.contains_key(&b) {
                        d.extend(self.destroy(b)?);
                    }
                }
            }
        }
        Ok(d)
    }

    /// The work of graph `graph` (`def`) as an executable graph runs it: its
    /// conditional handles given their default values first (those that ask), then the
    /// nodes in order, each conditional node with its bodies' work.
    fn runnable(&self, def: &GraphDef, graph: u64, depth: u32) -> R<Vec<Op>> {
        if depth > 32 {
            return Err(Fail::new(
                CUDA_ERROR_INVALID_VALUE,
                format!("graph {graph:#x}: conditional bodies nested more than 32 deep"),
            ));
        }
        let mut ops: Vec<Op> = def
            .handles
            .iter()
            .filter(|h| h.assign)
            .map(|h| Op::Memset {
                dst: h.addr,
                value: h.default,
                width: 4,
                count: 1,
            })
            .collect();
        for op in def.ordered(graph)? {
            if let Op::Child(g) = op {
                ops.extend(self.runnable(self.def(g)?, g, depth + 1)?);
                continue;
            }
            ops.push(match op {
                Op::Cond(c) => {
                    let run = c
                        .bodies
                        .iter()
                        .map(|&b| Ok(Arc::new(self.runnable(self.def(b)?, b, depth + 1)?)))
                        .collect::<R<Vec<Graph>>>()?;
                    Op::Cond(Arc::new(Cond {
                        handle: c.handle,
                        kind: c.kind,
                        bodies: c.bodies.clone(),
                        run,
                    }))
                }
                op => op,
            });
        }
        Ok(ops)
    }

    /// `cuGraphConditionalHandleCreate`: graph `graph`'s conditional handle whose value
    /// lives at `addr` (4 bytes of device memory the caller made and set to `default`).
    pub fn cond_handle(&mut self, graph: u64, addr: u64, default: u32, assign: bool) -> R<()> {
        self.graphs
            .get_mut(&graph)
            .ok_or_else(|| unknown("graph", graph))?
            .handles
            .push(CondHandle {
                addr,
                default,
                assign,
            });
        self.cond_mem.insert(addr);
        Ok(())
    }

    /// A conditional node of type `kind` with `size` new body graphs, on `handle`, after
    /// `deps`: its handle and the array of its bodies (valid while the node is).
    pub fn add_conditional(
        &mut self,
        graph: u64,
        deps: &[u64],
        handle: u64,
        kind: u32,
        size: u32,
    ) -> R<(u64, *const u64)> {
        self.def(graph)?;
        if !self.cond_mem.contains(&handle) {
            return Err(Fail::new(
                CUDA_ERROR_INVALID_VALUE,
                format!("{handle:#x} is no conditional handle"),
            ));
        }
        let ok = match kind {
            COND_IF => (1..=2).contains(&size),
            COND_WHILE => size == 1,
            COND_SWITCH => size >= 1,
            _ => false,
        };
        if !ok {
            return Err(Fail::new(
                CUDA_ERROR_INVALID_VALUE,
                format!("conditional node of type {kind} with {size} bodies"),
            ));
        }
        let bodies: Vec<u64> = (0..size).map(|_| self.create()).collect();
        let op = Op::Cond(Arc::new(Cond {
            handle,
            kind,
            bodies: bodies.clone(),
            run: vec![],
        }));
        let node = match self.add_node(graph, deps, NODE_CONDITIONAL, vec![op]) {
            Ok(n) => n,
            Err(f) => {
                for b in bodies {
                    self.graphs.remove(&b);
                }
                return Err(f);
            }
        };
        let arr = bodies.into_boxed_slice();
        let p = arr.as_ptr();
        self.cond_bodies.insert(node, arr);
        Ok((node, p))
    }

    /// The conditional handles' values that no graph or executable graph has any more,
    /// taken out for the caller to free.
    pub fn take_unheld_conds(&mut self) -> Vec<u64> {
        fn mentions(ops: &[Op], addr: u64) -> bool {
            ops.iter().any(|o| match o {
                Op::Memset { dst, .. } => *dst == addr,
                Op::Cond(c) => c.handle == addr || c.run.iter().any(|g| mentions(g, addr)),
                _ => false,
            })
        }
        let gone: Vec<u64> = self
            .cond_mem
            .iter()
            .copied()
            .filter(|&a| {
                !self
                    .graphs
                    .values()
                    .any(|g| g.handles.iter().any(|h| h.addr == a))
                    && !self.execs.values().any(|(_, x)| mentions(x, a))
            })
            .collect();
        for a in &gone {
            self.cond_mem.remove(a);
        }
        gone
    }

    /// Drops the user-object references `owner` holds.
    fn disown(&mut self, owner: u64) -> Vec<Destructor> {
        let refs = self.owned.remove(&owner).unwrap_or_default();
        refs.into_iter()
            .filter_map(|(o, n)| self.object_release(o, n).ok().flatten())
            .collect()
    }

    /// `cuUserObjectCreate`: a user object with `refs` references.
    pub fn object_create(&mut self, destructor: Destructor, refs: u32) -> R<u64> {
        if refs == 0 {
            return Err(Fail::new(
                CUDA_ERROR_INVALID_VALUE,
                "a user object needs at least one reference",
            ));
        }
        let h = self.number();
        self.objects.insert(
            h,
            UserObject {
                destructor,
                refs: refs.into(),
            },
        );
        Ok(h)
    }

    /// `cuUserObjectRetain`.
    pub fn object_retain(&mut self, object: u64, n: u32) -> R<()> {
        let o = self.objects.get_mut(&object).ok_or_else(|| {
            Fail::new(CUDA_ERROR_INVALID_VALUE, format!("user object {object:#x}"))
        })?;
        if n == 0 {
            return Err(Fail::new(CUDA_ERROR_INVALID_VALUE, "a count of 0"));
        }
        o.refs += u64::from(n);
        Ok(())
    }

    /// `cuUserObjectRelease`: the destructor to call when that was the last reference.
    pub fn object_release(&mut self, object: u64, n: u32) -> R<Option<Destructor>> {
        let o = self.objects.get_mut(&object).ok_or_else(|| {
            Fail::new(CUDA_ERROR_INVALID_VALUE, format!("user object {object:#x}"))
        })?;
        if n == 0 || u64::from(n) > o.refs {
            return Err(Fail::new(
                CUDA_ERROR_INVALID_VALUE,
                format!("releasing {n} of {} references", o.refs),
            ));
        }
        o.refs -= u64::from(n);
        if o.refs > 0 {
            return Ok(None);
        }
        Ok(self.objects.remove(&object).map(|o| o.destructor))
    }

    /// `cuGraphRetainUserObject`: the graph takes `n` references (with
    /// `CU_GRAPH_USER_OBJECT_MOVE`, the caller's own).
    pub fn graph_retain_object(&mut self, graph: u64, object: u64, n: u32, moved: bool) -> R<()> {
        self.def(graph)?;
        if moved {
            if !self.objects.contains_key(&object) || n == 0 {
                return Err(Fail::new(
                    CUDA_ERROR_INVALID_VALUE,
                    format!("user object {object:#x}, count {n}"),
                ));
            }
        } else {
            self.object_retain(object, n)?;
        }
        self.owned.entry(graph).or_default().push((object, n));
        Ok(())
    }

    /// `cuGraphReleaseUserObject`.
    pub fn graph_release_object(
        &mut self,
        graph: u64,
        object: u64,
        n: u32,
    ) -> R<Option<Destructor>> {
        self.def(graph)?;
        let held: u32 = self.owned.get(&graph).map_or(0, |v| {
            v.iter().filter(|(o, _)| *o == object).map(|(_, c)| c).sum()
        });
        if n == 0 || n > held {
            return Err(Fail::new(
                CUDA_ERROR_INVALID_VALUE,
                format!(
                    "graph {graph:#x} holds {held} references of user object {object:#x}, not {n}"
                ),
            ));
        }
        let refs = self.owned.entry(graph).or_default();
        refs.retain(|(o, _)| *o != object);
        if held > n {
            refs.push((object, held - n));
        }
        self.object_release(object, n)
    }

    /// `cuGraphInstantiateWithFlags`: the executable graph.
    pub fn instantiate(&mut self, graph: u64, flags: u64) -> R<u64> {
        let known = INSTANTIATE_AUTO_FREE
            | INSTANTIATE_UPLOAD
            | INSTANTIATE_DEVICE_LAUNCH
            | INSTANTIATE_USE_NODE_PRIORITY;
        if flags & !known != 0 {
            return Err(Fail::new(
                CUDA_ERROR_INVALID_VALUE,
                format!("graph instantiate flags {flags:#x}"),
            ));
        }
        if flags & INSTANTIATE_DEVICE_LAUNCH != 0 {
            return Err(if flags & INSTANTIATE_AUTO_FREE != 0 {
                Fail::new(
                    CUDA_ERROR_INVALID_VALUE,
                    "device launch and auto-free on launch exclude each other",
                )
            } else {
                Fail::new(
                    CUDA_ERROR_NOT_SUPPORTED,
                    "graphs launched from the device are not supported",
                )
            });
        }
        let def = self.def(graph)?.clone();
        let g = Arc::new(self.runnable(&def, graph, 0)?);
        let h = self.number();
        self.execs.insert(h, (def, g));
        // The executable graph holds references of its own to the graph's user objects.
        let refs = self.owned.get(&graph).cloned().unwrap_or_default();
        for (o, n) in &refs {
            self.object_retain(*o, *n)?;
        }
        self.owned.insert(h, refs);
        Ok(h)
    }

    /// The work of executable graph `exec`.
    pub fn exec(&self, exec: u64) -> R<Graph> {
        self.execs
            .get(&exec)
            .map(|(_, g)| g.clone())
            .ok_or_else(|| unknown("graph exec", exec))
    }

    /// `cuGraph*NodeSetParams`: node `node` (of kind `kind`) does `ops` from now on.
    pub fn set_node(&mut self, node: u64, kind: i32, ops: Vec<Op>) -> R<()> {
        let &(graph, i) = self
            .nodes
            .get(&node)
            .ok_or_else(|| unknown("graph node", node))?;
        let n = &mut self
            .graphs
            .get_mut(&graph)
            .ok_or_else(|| unknown("graph", graph))?
            .nodes[i];
        same_kind(n, kind)?;
        n.ops = ops;
        Ok(())
    }

    /// `cuGraphExec*NodeSetParams`: in executable graph `exec`, node `node` (a node of
    /// the graph it was made from, of kind `kind`) does `ops` at its next launches.
    pub fn exec_set_node(&mut self, exec: u64, node: u64, kind: i32, ops: Vec<Op>) -> R<()> {
        let (def, _) = self
            .execs
            .get_mut(&exec)
            .ok_or_else(|| unknown("graph exec", exec))?;
        let n =
            def.nodes
                .iter_mut()
                .find(|n| n.handle == node)
                .ok_or_else(|| {
                    Fail::new(
                CUDA_ERROR_INVALID_VALUE,
                format!("node {node:#x} is not a node of the graph exec {exec:#x} was made from"),
            )
                })?;
        same_kind(n, kind)?;
        n.ops = ops;
        let def = def.clone();
        let run = Arc::new(self.runnable(&def, exec, 0)?);
        if let Some((_, g)) = self.execs.get_mut(&exec) {
            *g = run;
        }
        Ok(())
    }

    /// `cuGraphExecUpdate`: executable graph `exec` takes graph `graph`'s parameters when
    /// the two have the same nodes, kinds and dependencies; otherwise it is left as it
    /// was and the reason is given: `CU_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED` (2) or
    /// `_NODE_TYPE_CHANGED` (3), with the first node that differs.
    pub fn exec_update(&mut self, exec: u64, graph: u64) -> R<Result<(), (i32, u64)>> {
        let new = self.def(graph)?.clone();
        let run = self.runnable(&new, graph, 0)?;
        let (def, g) = self
            .execs
            .get_mut(&exec)
            .ok_or_else(|| unknown("graph exec", exec))?;
        if new.nodes.len() != def.nodes.len() {
            return Ok(Err((2, 0)));
        }
        for (a, b) in def.nodes.iter().zip(&new.nodes) {
            if a.deps != b.deps {
                return Ok(Err((2, b.handle)));
            }
            if a.kind != b.kind {
                return Ok(Err((3, b.handle)));
            }
        }
        *g = Arc::new(run);
        *def = new;
        Ok(Ok(()))
    }

    /// `cuGraphNodeGetDependencies` (`dependents` false) and
    /// `cuGraphNodeGetDependentNodes` (true): the nodes, in the order they were added.
    pub fn node_edges(&self, node: u64, dependents: bool) -> R<Vec<u64>> {
        let &(graph, i) = self
            .nodes
            .get(&node)
            .ok_or_else(|| unknown("graph node", node))?;
        let g = self.def(graph)?;
        Ok(if dependents {
            g.nodes
                .iter()
                .filter(|n| n.deps.contains(&i))
                .map(|n| n.handle)
                .collect()
        } else {
            g.nodes[i].deps.iter().map(|&d| g.nodes[d].handle).collect()
        })
    }

    /// `cuGraphExecDestroy`: the destructors of user objects whose last reference it held.
    pub fn exec_destroy(&mut self, exec: u64) -> R<Vec<Destructor>> {
        self.execs
            .remove(&exec)
            .ok_or_else(|| unknown("graph exec", exec))?;
        Ok(self.disown(exec))
    }

    /// Takes `bytes` at `dptr` (just allocated) as a graph's allocation.
    pub fn graph_alloc(&mut self, dptr: u64, bytes: u64) {
        self.graph_mem.insert(
            dptr,
            GraphAlloc {
                bytes,
                freed: false,
            },
        );
        self.graph_mem_high = self.graph_mem_high.max(self.graph_mem_used());
    }

    /// Whether `dptr` is a graph's allocation (a free node may name only those).
    pub fn is_graph_alloc(&self, dptr: u64) -> bool {
        self.graph_mem.contains_key(&dptr)
    }

    /// A graph's allocation freed (by a free node, or by the program): whether its
    /// memory may go now (no graph holds its allocation node: the caller frees it);
    /// `None` when `dptr` is no graph's allocation.
    pub fn graph_free(&mut self, dptr: u64) -> Option<bool> {
        let a = self.graph_mem.get_mut(&dptr)?;
        a.freed = true;
        Some(self.take_unheld().contains(&dptr))
    }

    /// The freed graph allocations no graph or executable graph holds any more, taken
    /// out for the caller to free.
    pub fn take_unheld(&mut self) -> Vec<u64> {
        let held = |p: u64| {
            let has = |ops: &[Op]| {
                ops.iter()
                    .any(|o| matches!(o, Op::MemAlloc { dptr, .. } if *dptr == p))
            };
            self.graphs
                .values()
                .any(|g| g.nodes.iter().any(|n| has(&n.ops)))
                || self.execs.values().any(|(_, g)| has(g))
        };
        let gone: Vec<u64> = self
            .graph_mem
            .iter()
            .filter(|(&p, a)| a.freed && !held(p))
            .map(|(&p, _)| p)
            .collect();
        for p in &gone {
            self.graph_mem.remove(p);
        }
        gone
    }

    /// Bytes graphs' allocations hold now.
    pub fn graph_mem_used(&self) -> u64 {
        self.graph_mem.values().map(|a| a.bytes).sum()
    }

    /// `cuDeviceGetGraphMemAttribute`: used and reserved memory (the same here: each
    /// allocation is its own memory), now or at most since the last reset.
    pub fn graph_mem_attribute(&self, attr: i32) -> R<u64> {
        match attr {
            0 | 2 => Ok(self.graph_mem_used()),
            1 | 3 => Ok(self.graph_mem_high),
            _ => Err(Fail::new(
                CUDA_ERROR_INVALID_VALUE,
                format!("graph memory attribute {attr}"),
            )),
        }
    }

    /// `cuDeviceSetGraphMemAttribute`: a high watermark (1, 3) reset to 0.
    pub fn reset_graph_mem_high(&mut self, attr: i32, value: u64) -> R<()> {
        if !matches!(attr, 1 | 3) || value != 0 {
            return Err(Fail::new(
                CUDA_ERROR_INVALID_VALUE,
                format!(
                    "graph memory attribute {attr} set to {value} (only the high watermarks, to 0)"
                ),
            ));
        }
        self.graph_mem_high = self.graph_mem_used();
        Ok(())
    }

    /// Refuses `what` (a context-wide synchronisation) while any stream captures: it
    /// would wait for work that does not run. Every capture is invalidated.
    pub fn refuse_any(&mut self, what: &str) -> R<()> {
        if self.sequences.is_empty() {
            return Ok(());
        }
        for seq in self.sequences.values_mut() {
            seq.invalid
                .get_or_insert_with(|| format!("{what} during the capture"));
        }
        Err(Fail::new(
            CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED,
            format!("{what}: a stream is capturing"),
        ))
    }
}
