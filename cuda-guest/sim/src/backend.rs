//! [`Backend`] over the PTX simulator ([`crate::Simulator`]): the same driver-level API as
//! the native backend, with CUDA's semantics, on a documented virtual device.
//!
//! # The virtual device
//! One device (ordinal 0), shaped like an A100 as far as the attributes go:
//!
//! | query | value |
//! | --- | --- |
//! | name | [`SIM_DEVICE_NAME`] |
//! | UUID | [`SIM_DEVICE_UUID`] (`GPU-766d6770-752d-7369-6d2d-6465762d3030`) |
//! | PCI bus id | [`SIM_PCI_BUS_ID`] (`0000:ff:00.0`, a bus no real host device uses) |
//! | compute capability | 8.0 |
//! | total memory | [`SimConfig::memory_limit`] (the quota; `cuMemAlloc` beyond it is `CUDA_ERROR_OUT_OF_MEMORY`) |
//! | SMs, threads | 108 SMs, 2048 threads/SM, 1024 threads/block, block ≤ 1024×1024×64, grid ≤ (2³¹−1)×65535×65535 |
//! | shared memory | 48 KiB per block (166912 bytes opt-in), 164 KiB per SM; 64 KiB constant |
//! | warp, registers | 32 lanes, 65536 registers per block |
//! | clocks | 1410 MHz SM, 1215 MHz memory, 5120-bit bus, 40 MiB L2 |
//! | flags | unified addressing 1, ECC 0, integrated 0, concurrent kernels 1, 1 copy engine, host registration 1, mapped host memory 1, managed memory 1 (concurrent access 1) |
//!
//! The driver version reported is [`SIM_DRIVER_VERSION`] (the API level it follows).
//!
//! # Execution
//! Every asynchronous operation (copies, memsets, launches, event records) goes into
//! one queue in submission order; calls return as soon as the work is queued. The
//! context's device threads (four) take from it the first queued operation of a stream
//! none of them is running, so each stream's work runs in its order and different
//! streams' work runs at once, as on a GPU: kernels under a read lock of the simulator
//! (device memory is shared between threads, as between one launch's own threads),
//! copies and memsets under its write lock (so they wait for running kernels). A wait
//! for an event starts only once the event's record is done; work of the legacy default
//! stream waits for all earlier work and all later work waits for it (kept for every
//! stream). An event record is also taken as soon as its own stream has reached it
//! (nothing of that stream, no wait of it and no legacy-stream work queued before it),
//! even while another stream's kernel is still queued or running, as a GPU takes it. [`Backend::stream_query`] and [`Backend::event_query`]
//! say "not ready" while work queued before them is queued or running; event timestamps
//! are the host's monotonic clock when the worker reaches the record.
//!
//! # Contexts
//! As in CUDA: the primary context (made at the first retain, reference counted, never
//! destroyed) and any number made by [`Backend::context_create`], each current on a
//! thread until another is made current there. Each context is a [`Simulator`] of its
//! own (its address range, allocations, modules, streams, events and sticky error) with
//! its own queue and device thread; [`Backend::context_destroy`] frees everything made
//! in it. A handle made in one context is refused in another.
//!
//! [`Backend::mem_get_info`] reports [`SimConfig::memory_limit`] as the total and the
//! total less what every context holds as free: allocations and the `.global`/`.const`
//! variables of loaded modules (which copies and memsets reach, as on a GPU). An
//! allocation larger than the host's available memory is refused with
//! `CUDA_ERROR_OUT_OF_MEMORY`, since the simulator backs device memory with host memory.
//!
//! Synchronous copies and memsets wait for all queued work first (as the legacy default
//! stream does), then run on the calling thread; `cuMemcpyDtoD` is queued on the legacy
//! default stream, as CUDA orders it; `cuMemFree` waits for queued work first.
//!
//! # Errors
//! Arguments are checked when the work is queued (handles, ranges against the live
//! allocations, launch geometry, the argument count and sizes against the kernel's PTX
//! parameters): those errors come back at once. A kernel fault comes back at the next
//! synchronising call, as in CUDA: an out-of-bounds, freed or null access is
//! `CUDA_ERROR_ILLEGAL_ADDRESS`, a misaligned one `CUDA_ERROR_MISALIGNED_ADDRESS`, a
//! launch past its instruction budget or time limit `CUDA_ERROR_LAUNCH_TIMEOUT`, a
//! barrier not reached by every thread `CUDA_ERROR_LAUNCH_FAILED`. These are sticky:
//! every later call of the context returns the same error (queued work after it is
//! dropped) until [`Backend::primary_context_reset`], which frees every device
//! allocation, module, stream and event of the context (unlike the native driver, where
//! a sticky error lasts until the process ends: see the crate's backends section). The
//! simulator checks bounds per allocation, so it also catches small overruns that a GPU's
//! page-granular mappings let through. The simulator's own report is
//! kept in [`CudaError::detail`] (and [`CudaError::fault`] for memory faults). Pinned
//! host memory ([`Backend::host_alloc`]) is plain page-aligned host memory here and
//! survives a reset.

use std::alloc::Layout;
use std::cell::Cell;
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::thread::JoinHandle;
use std::time::Instant;

use crate::ptx;
use crate::{self as engine, CancelToken, FaultKind, KernelArg, SimConfig, SimError, Simulator};
use vmgpu_cuda_api::error::{CudaError, DriverError};
use vmgpu_cuda_api::LaunchKind;
use vmgpu_cuda_api::{
    next_instance_id, sys, Backend, BackendKind, Context, Device, DeviceAttribute, DevicePtr,
    Event, EventFlags, Function, FunctionAttribute, HostAlloc, HostAllocFlags, HostRegisterFlags,
    LaunchConfig, MemInfo, Module, Result, Stream, StreamFlags,
};

/// The virtual device's name.
pub const SIM_DEVICE_NAME: &str = "vmgpu PTX simulator (virtual sm_80)";
/// The virtual device's UUID: the bytes of `vmgpu-sim-dev-00` (device N's ends in its
/// two decimal digits: [`sim_device_uuid`]).
pub const SIM_DEVICE_UUID: [u8; 16] = *b"vmgpu-sim-dev-00";
/// The virtual device's PCI address (device N is on bus `0xff - N`: [`sim_pci_bus_id`]).
pub const SIM_PCI_BUS_ID: &str = "0000:ff:00.0";
/// The most devices one simulator backend simulates ([`SimConfig::devices`]).
pub const SIM_MAX_DEVICES: u32 = 16;

/// The UUID of simulated device `dev`.
pub fn sim_device_uuid(dev: u32) -> [u8; 16] {
    let mut u = SIM_DEVICE_UUID;
    u[14] = b'0' + (dev / 10 % 10) as u8;
    u[15] = b'0' + (dev % 10) as u8;
    u
}

/// The PCI bus number of simulated device `dev` (`0xff` for device 0, downwards).
fn sim_pci_bus(dev: u32) -> u32 {
    0xff - dev.min(SIM_MAX_DEVICES)
}

/// The PCI address of simulated device `dev`.
pub fn sim_pci_bus_id(dev: u32) -> String {
    format!("0000:{:02x}:00.0", sim_pci_bus(dev))
}
/// The CUDA version the simulator reports (`cuDriverGetVersion`): 13.0, the `cuda.h`
/// whose entry points `libcuda.so.1` serves (CUDA 12's too). A driver older than the
/// runtime would be refused by programs that compare the two, as cuda-samples do.
pub const SIM_DRIVER_VERSION: i32 = 13000;
/// Largest shared memory (static plus dynamic) one block may use on the virtual device,
/// after opting in with [`Backend::function_set_max_dynamic_shared`].
pub const SIM_MAX_SHARED_PER_BLOCK: u32 = 166_912;
/// Shared memory (static plus dynamic) a block may use without opting in.
pub const SIM_DEFAULT_SHARED_PER_BLOCK: u32 = 49_152;

thread_local! {
    /// The simulator backend instance whose (only) context is current on this thread.
    static SIM_CURRENT: Cell<u32> = const { Cell::new(0) };
}

/// A host address handed to the worker thread by an `unsafe` asynchronous copy.
#[derive(Debug, Clone, Copy)]
struct HostPtr(usize);

#[derive(Debug)]
enum Op {
    Memset {
        dst: u64,
        value: u8,
        bytes: u64,
    },
    Memset16 {
        dst: u64,
        value: u16,
        count: u64,
    },
    Memset32 {
        dst: u64,
        value: u32,
        count: u64,
    },
    HtoD {
        dst: u64,
        src: HostPtr,
        bytes: usize,
    },
    DtoH {
        dst: HostPtr,
        src: u64,
        bytes: usize,
    },
    DtoD {
        dst: u64,
        src: u64,
        bytes: u64,
    },
    Launch {
        module: Arc<engine::Module>,
        kernel: String,
        cfg: engine::LaunchConfig,
        args: Vec<KernelArg>,
        /// Plain, or every block at once (`cuLaunchCooperativeKernel`).
        kind: LaunchKind,
    },
    Record {
        event: u64,
    },
    /// `cuStreamWaitEvent`: the stream's later work follows the event's record, queued
    /// as operation `after` (which queue order gives); until that is done, the stream's
    /// later records are not taken ahead of the queue.
    Wait {
        after: u64,
    },
    /// `cuLaunchHostFunc`/`cuStreamAddCallback`: called on the device thread when the
    /// queue reaches it.
    HostFunc(HostCall),
}

/// A host function waiting in the queue (called once).
struct HostCall(Mutex<Option<vmgpu_cuda_api::HostFunc>>);

impl std::fmt::Debug for HostCall {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("HostCall(..)")
    }
}

impl HostCall {
    /// Calls the function (the first time) with the outcome of the work before it.
    fn fire(&self, outcome: std::result::Result<(), &DriverError>) {
        let f = self.0.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(f) = f {
            f(outcome);
        }
    }
}

#[derive(Debug)]
struct Queued {
    seq: u64,
    stream: u64,
    op: Op,
}

/// An asynchronous failure, turned into a [`CudaError`] for whichever call reports it.
#[derive(Debug, Clone)]
struct Fault {
    code: i32,
    detail: String,
    fault: Option<Box<engine::MemoryFault>>,
    stream: u64,
}

#[derive(Debug)]
struct EventState {
    flags: EventFlags,
    record: Option<u64>,
    time: Option<Instant>,
}

#[derive(Debug)]
struct FunctionState {
    module_handle: u64,
    module: Arc<engine::Module>,
    name: String,
    params: Vec<ptx::Param>,
    shared_static: u32,
    /// `CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES`: 48 KiB less the static part
    /// until raised.
    max_dynamic: u32,
    /// `CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT` (-1: the default).
    carveout: i32,
}

#[derive(Debug, Default)]
struct State {
    ops: VecDeque<Queued>,
    /// Sequence number of the last queued operation (0: none yet).
    submitted: u64,
    /// Sequence number of the last finished operation: every operation up to it is done.
    done: u64,
    /// Operations finished ahead of the queue's order (event records taken early by
    /// [`take_ready_records`], work of one stream done while another stream's earlier
    /// work runs), whose sequence numbers `done` passes once the work queued before
    /// them is done.
    early: std::collections::BTreeSet<u64>,
    /// The streams of the operations the device threads are running.
    running: Vec<u64>,
    shutdown: bool,
    /// Bumped by every reset; handles carry it in their upper 32 bits.
    generation: u32,
    next_handle: u32,
    next_module: u32,
    sticky: Option<Fault>,
    deferred: Option<Fault>,
    /// Stream handle to the sequence number of its last queued operation.
    streams: HashMap<u64, u64>,
    events: HashMap<u64, EventState>,
    modules: HashMap<u64, Arc<engine::Module>>,
    functions: HashMap<u64, FunctionState>,
    /// Live device allocations: base to size.
    allocs: BTreeMap<u64, u64>,
    /// Module variables (`.global`/`.const`) of loaded modules: base to size; copies and
    /// memsets reach them, `cuMemFree` does not.
    variables: BTreeMap<u64, u64>,
    /// Bytes of device memory allocated or reserved.
    allocated: u64,
    /// Pinned host allocations: address to layout.
    host: HashMap<usize, Layout>,
    /// Registered host ranges: start to length.
    registered: BTreeMap<usize, usize>,
    /// Page-locked host ranges the device reaches at their own address: start to length.
    mapped: BTreeMap<u64, u64>,
}

impl State {
    fn handle(&mut self) -> u64 {
        self.next_handle = self.next_handle.wrapping_add(1).max(1);
        ((self.generation as u64) << 32) | self.next_handle as u64
    }

    fn range_ok(&self, ptr: u64, len: u64) -> bool {
        let within = |map: &BTreeMap<u64, u64>| match map.range(..=ptr).next_back() {
            Some((&base, &size)) => ptr
                .checked_sub(base)
                .and_then(|off| off.checked_add(len))
                .is_some_and(|end| end <= size),
            None => false,
        };
        within(&self.allocs) || within(&self.variables) || within(&self.mapped)
    }
}

#[derive(Debug)]
struct Shared {
    config: SimConfig,
    /// Launches run under a read lock (several streams' kernels at once); everything
    /// else that touches the simulator takes the write lock.
    sim: RwLock<Simulator>,
    state: Mutex<State>,
    cv: Condvar,
    /// Device memory in use by every context of the device.
    device_used: Arc<AtomicU64>,
}

impl Shared {
    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
    fn sim(&self) -> RwLockWriteGuard<'_, Simulator> {
        self.sim.write().unwrap_or_else(|e| e.into_inner())
    }
    fn sim_read(&self) -> RwLockReadGuard<'_, Simulator> {
        self.sim.read().unwrap_or_else(|e| e.into_inner())
    }
    /// Counts `bytes` of device memory in use by this context (and the device).
    fn charge(&self, st: &mut State, bytes: u64) {
        st.allocated += bytes;
        self.device_used.fetch_add(bytes, Ordering::Relaxed);
    }
    /// Gives back `bytes` this context counted.
    fn refund(&self, st: &mut State, bytes: u64) {
        let bytes = bytes.min(st.allocated);
        st.allocated -= bytes;
        self.device_used.fetch_sub(bytes, Ordering::Relaxed);
    }
    /// Device memory in use by every context of the device.
    fn device_used(&self) -> u64 {
        self.device_used.load(Ordering::Relaxed)
    }
    fn wait<'a>(&self, guard: MutexGuard<'a, State>) -> MutexGuard<'a, State> {
        self.cv.wait(guard).unwrap_or_else(|e| e.into_inner())
    }
}

/// One context of the simulated device: its own simulator (memory, modules), its
/// queue and the device thread that executes it. Objects made in it carry its id.
#[derive(Debug)]
struct SimContext {
    id: u32,
    /// The device's ordinal.
    device: u32,
    shared: Arc<Shared>,
    workers: Vec<JoinHandle<()>>,
}

impl SimContext {
    fn new(
        config: SimConfig,
        cancel: CancelToken,
        device_used: Arc<AtomicU64>,
        device: u32,
    ) -> Result<SimContext> {
        let shared = Arc::new(Shared {
            sim: RwLock::new(Simulator::with_cancel(config.clone(), cancel)),
            config,
            state: Mutex::new(State::default()),
            cv: Condvar::new(),
            device_used,
        });
        let mut ctx = SimContext {
            id: next_instance_id(),
            device,
            shared,
            workers: Vec::new(),
        };
        for _ in 0..DEVICE_THREADS {
            let worker_shared = ctx.shared.clone();
            let w = std::thread::Builder::new()
                .name("vmgpu-sim-device".into())
                .spawn(move || worker(&worker_shared))
                .map_err(|e| DriverError::Unexpected {
                    operation: "starting the simulator's device thread",
                    reason: e.to_string(),
                })?;
            ctx.workers.push(w);
        }
        Ok(ctx)
    }

    /// `cuDevicePrimaryCtxReset` of this context: waits for queued work, frees
    /// everything made in it and clears its sticky error (new handles from here on).
    fn reset(&self) -> Result<()> {
        let mut st = self.shared.state();
        // Queued work runs to its end (or is dropped after a sticky error).
        while st.done < st.submitted {
            st = self.shared.wait(st);
        }
        let allocs = std::mem::take(&mut st.allocs);
        let modules = std::mem::take(&mut st.modules);
        st.variables.clear();
        {
            let mut sim = self.shared.sim();
            sim.reset();
            for base in allocs.keys() {
                if let Err(e) = sim.free(engine::DevicePtr(*base)) {
                    log::warn!("simulator reset: freeing {base:#x}: {e}");
                }
            }
            for m in modules.values() {
                if let Err(e) = sim.unload_module(m) {
                    log::warn!("simulator reset: unloading module {}: {e}", m.name());
                }
            }
        }
        let all = st.allocated;
        self.shared.refund(&mut st, all);
        st.generation = st.generation.wrapping_add(1);
        st.next_handle = 0;
        st.sticky = None;
        st.deferred = None;
        st.streams.clear();
        st.events.clear();
        st.modules.clear();
        st.functions.clear();
        st.registered.clear();
        log::info!("simulated device: primary context reset");
        Ok(())
    }

    fn err(&self, code: i32, operation: impl Into<String>) -> CudaError {
        let mut e = CudaError::builtin(code, operation);
        e.device = Some(self.device);
        e
    }

    fn fail<T>(&self, code: i32, operation: impl Into<String>, detail: String) -> Result<T> {
        let mut e = self.err(code, operation);
        e.detail = Some(detail);
        Err(e.into())
    }

    /// `dst` must be `width`-aligned (a memset of `width`-byte values).
    fn aligned(&self, dst: DevicePtr, width: u64, operation: &'static str) -> Result<()> {
        if dst.0.is_multiple_of(width) {
            Ok(())
        } else {
            self.fail(
                sys::CUDA_ERROR_INVALID_VALUE,
                operation,
                format!("not {width}-byte aligned"),
            )
        }
    }

    fn fault_error(&self, f: &Fault, operation: &str) -> DriverError {
        let mut e = self.err(f.code, operation);
        e.stream = Some(f.stream);
        e.detail = Some(f.detail.clone());
        e.fault = f.fault.clone();
        e.into()
    }

    fn owned(&self, owner: u32, op: &'static str) -> Result<()> {
        vmgpu_cuda_api::check_owner(owner, self.id, op)
    }

    /// The context must be current on this thread.
    fn ctx(&self, op: &'static str) -> Result<()> {
        if SIM_CURRENT.with(|c| c.get()) == self.id {
            Ok(())
        } else {
            Err(self.err(sys::CUDA_ERROR_INVALID_CONTEXT, op).into())
        }
    }

    /// The context is current and not failed; returns the state.
    fn live(&self, op: &'static str) -> Result<MutexGuard<'_, State>> {
        self.ctx(op)?;
        let st = self.shared.state();
        if let Some(f) = &st.sticky {
            return Err(self.fault_error(f, op));
        }
        Ok(st)
    }

    /// Waits until every operation up to `seq` is done, then reports the sticky error
    /// or (once) a deferred one.
    fn wait_for<'a>(
        &'a self,
        mut st: MutexGuard<'a, State>,
        seq: u64,
        op: &'static str,
    ) -> Result<MutexGuard<'a, State>> {
        while st.done < seq && st.sticky.is_none() {
            st = self.shared.wait(st);
        }
        if let Some(f) = &st.sticky {
            return Err(self.fault_error(f, op));
        }
        if let Some(f) = st.deferred.take() {
            return Err(self.fault_error(&f, op));
        }
        Ok(st)
    }

    fn stream_id(&self, st: &State, stream: &Stream, op: &'static str) -> Result<u64> {
        self.owned(stream.owner(), op)?;
        let raw = stream.raw();
        if raw == 0 || st.streams.contains_key(&raw) {
            Ok(raw)
        } else {
            let mut e = self.err(sys::CUDA_ERROR_INVALID_HANDLE, op);
            e.stream = Some(raw);
            e.detail = Some("unknown or destroyed stream (or one from before a reset)".into());
            Err(e.into())
        }
    }

    fn submit(&self, st: &mut State, stream: u64, op: Op) -> u64 {
        st.submitted += 1;
        let seq = st.submitted;
        if stream != 0 {
            st.streams.insert(stream, seq);
        }
        st.ops.push_back(Queued { seq, stream, op });
        self.shared.cv.notify_all();
        seq
    }

    fn check_range(&self, st: &State, ptr: DevicePtr, len: u64, op: &'static str) -> Result<()> {
        if st.range_ok(ptr.0, len) {
            Ok(())
        } else {
            self.fail(
                sys::CUDA_ERROR_INVALID_VALUE,
                op,
                format!(
                    "{:#x}..+{len} is not inside one live device allocation",
                    ptr.0
                ),
            )
        }
    }

    /// Runs `f` on the simulator, turning a panic inside it (a simulator bug) into
    /// `CUDA_ERROR_UNKNOWN` instead of unwinding into the caller.
    fn guarded<T>(
        &self,
        op: &str,
        f: impl FnOnce(&mut Simulator) -> std::result::Result<T, SimError>,
    ) -> Result<std::result::Result<T, SimError>> {
        let mut sim = self.shared.sim();
        match std::panic::catch_unwind(AssertUnwindSafe(|| f(&mut sim))) {
            Ok(r) => Ok(r),
            Err(p) => {
                let mut e = self.err(sys::CUDA_ERROR_UNKNOWN, op);
                e.detail = Some(format!(
                    "the simulator failed internally: {}",
                    panic_message(&*p)
                ));
                Err(e.into())
            }
        }
    }

    fn event_state<'a>(
        &self,
        st: &'a mut State,
        event: &Event,
        op: &'static str,
    ) -> Result<&'a mut EventState> {
        self.owned(event.owner(), op)?;
        match st.events.get_mut(&event.raw()) {
            Some(e) => Ok(e),
            None => self.fail(
                sys::CUDA_ERROR_INVALID_HANDLE,
                op,
                "unknown or destroyed event (or one from before a reset)".into(),
            ),
        }
    }
}

impl Drop for SimContext {
    fn drop(&mut self) {
        {
            let mut st = self.shared.state();
            st.shutdown = true;
            self.shared.cv.notify_all();
        }
        for w in self.workers.drain(..) {
            if w.join().is_err() {
                log::warn!("the simulator's device thread panicked");
            }
        }
        let mut st = self.shared.state();
        let all = st.allocated;
        self.shared.refund(&mut st, all);
        for (addr, layout) in st.host.drain() {
            // SAFETY: `addr` came from `std::alloc::alloc_zeroed(layout)` in host_alloc
            // and was not freed (host_free removes it from the map); the backend is
            // going away, and `host_free`'s callers may not use memory past its backend.
            unsafe { std::alloc::dealloc(addr as *mut u8, layout) };
        }
    }
}

/// The device thread: executes queued operations in order.
/// Takes the event records whose own stream has reached them: queued behind other
/// streams' work only (no earlier work of their stream, no wait of it, no work of the
/// legacy default stream, which every blocking stream follows). Their time is now; their
/// sequence number joins `early` until the work queued before them is done.
fn take_ready_records(st: &mut State, now: Instant) {
    if st.sticky.is_some() {
        return;
    }
    // The operations running, else the one a device thread takes next, go first.
    let (mut seen, mut i) = if st.running.is_empty() {
        match st.ops.front() {
            Some(item) => (vec![item.stream], 1),
            None => return,
        }
    } else {
        (st.running.clone(), 0)
    };
    if seen.contains(&0) {
        return;
    }
    while i < st.ops.len() {
        let item = &st.ops[i];
        if item.stream == 0 {
            return;
        }
        let reached = match item.op {
            Op::Record { .. } => true,
            // A wait whose event is reached holds nothing back.
            Op::Wait { after } => after <= st.done || st.early.contains(&after),
            _ => false,
        };
        let ready = reached && !seen.contains(&item.stream);
        if !ready {
            if !seen.contains(&item.stream) {
                seen.push(item.stream);
            }
            i += 1;
            continue;
        }
        let Some(item) = st.ops.remove(i) else {
            return;
        };
        if let Op::Record { event } = item.op {
            if let Some(e) = st.events.get_mut(&event) {
                if e.record == Some(item.seq) {
                    e.time = Some(now);
                }
            }
        }
        st.early.insert(item.seq);
    }
}

/// Device threads per context: operations of different streams run at once on them
/// (kernels under the simulator's read lock; copies and memsets take it for writing).
const DEVICE_THREADS: usize = 4;

/// How far into the queue a device thread looks for work of a stream that may start.
const LOOKAHEAD: usize = 64;

/// Whether operation `seq` is done.
fn finished(st: &State, seq: u64) -> bool {
    seq <= st.done || st.early.contains(&seq)
}

/// The queue position of the next operation a device thread may start: the first of its
/// stream in the queue, on a stream no thread is running, with no legacy-stream work
/// before it or running (the legacy default stream waits for all earlier work and all
/// later work of blocking streams waits for it: both kept for every stream here), and,
/// for a wait, its event's record done.
fn next_runnable(st: &State) -> Option<usize> {
    if st.running.contains(&0) {
        return None;
    }
    let mut seen: Vec<u64> = st.running.clone();
    for (i, item) in st.ops.iter().enumerate().take(LOOKAHEAD) {
        if item.stream == 0 {
            return (i == 0 && st.running.is_empty()).then_some(0);
        }
        if seen.contains(&item.stream) {
            continue;
        }
        let ready = match item.op {
            Op::Wait { after } => finished(st, after),
            _ => true,
        };
        if ready {
            return Some(i);
        }
        seen.push(item.stream);
    }
    None
}

/// Marks operation `seq` done, and `done` past every operation finished up to it.
fn complete(st: &mut State, seq: u64) {
    if seq > st.done {
        st.early.insert(seq);
    }
    while st.early.first() == Some(&(st.done + 1)) {
        st.early.pop_first();
        st.done += 1;
    }
}

/// A device thread: executes queued operations, each stream's in its order, several
/// streams' at once.
fn worker(shared: &Shared) {
    loop {
        let (item, skip) = {
            let mut st = shared.state();
            loop {
                if st.ops.len() > 1 {
                    take_ready_records(&mut st, Instant::now());
                }
                if let Some(item) = next_runnable(&st).and_then(|i| st.ops.remove(i)) {
                    st.running.push(item.stream);
                    break (item, st.sticky.is_some());
                }
                if st.shutdown && st.ops.is_empty() {
                    return;
                }
                st = shared.wait(st);
            }
        };
        let result = if let Op::HostFunc(call) = &item.op {
            // Outside the simulator's lock: the function may take its time.
            let failed = if skip {
                shared.state().sticky.clone()
            } else {
                None
            };
            match failed {
                Some(f) => {
                    let mut e = CudaError::builtin(f.code, "a stream's host function");
                    e.stream = Some(f.stream);
                    e.detail = Some(f.detail);
                    call.fire(Err(&e.into()));
                }
                None => call.fire(Ok(())),
            }
            Ok(())
        } else if skip {
            Ok(())
        } else {
            match std::panic::catch_unwind(AssertUnwindSafe(|| execute(shared, &item))) {
                Ok(r) => r,
                Err(p) => {
                    let msg = panic_message(&*p);
                    Err((
                        Fault {
                            code: sys::CUDA_ERROR_LAUNCH_FAILED,
                            detail: format!("the simulator failed internally: {msg}"),
                            fault: None,
                            stream: item.stream,
                        },
                        true,
                    ))
                }
            }
        };
        let now = Instant::now();
        let mut st = shared.state();
        if let Some(i) = st.running.iter().position(|&r| r == item.stream) {
            st.running.swap_remove(i);
        }
        complete(&mut st, item.seq);
        if let Op::Record { event } = item.op {
            if let Some(e) = st.events.get_mut(&event) {
                if e.record == Some(item.seq) {
                    e.time = Some(now);
                }
            }
        }
        if let Err((f, sticky)) = result {
            if sticky {
                log::debug!("simulated device: sticky error {}: {}", f.code, f.detail);
                st.sticky.get_or_insert(f);
            } else {
                st.deferred.get_or_insert(f);
            }
        }
        shared.cv.notify_all();
    }
}

/// Runs one operation; the error and whether it is sticky.
fn execute(shared: &Shared, item: &Queued) -> std::result::Result<(), (Fault, bool)> {
    if let Op::Launch {
        module,
        kernel,
        cfg,
        args,
        kind,
    } = &item.op
    {
        // Checked and run under a read lock: other streams' kernels run meanwhile (the
        // device heap, when a kernel first needs it, is made under the write lock).
        // (Each guard is a statement's temporary: dropped before the next lock.)
        let fail = |e: SimError| (fault_of(&e, item.stream), is_sticky(&e));
        let setup = shared.sim_read().launch_needs_setup(module, kernel);
        if setup {
            shared.sim().setup_launch(module, kernel).map_err(fail)?;
        }
        if *kind == LaunchKind::Cooperative {
            shared.sim().setup_cooperative().map_err(fail)?;
        }
        let r = {
            let sim = shared.sim_read();
            let params = sim.check_launch(module, kernel, *cfg, args).map_err(fail)?;
            sim.run_prepared(module, kernel, *cfg, &params, *kind)
        };
        if let Err(e) = &r {
            shared.sim().launch_failed(e);
        }
        return r.map(drop).map_err(fail);
    }
    let mut sim = shared.sim();
    let r = match &item.op {
        Op::Memset { dst, value, bytes } => sim.memset_d8(engine::DevicePtr(*dst), *value, *bytes),
        Op::Memset16 { dst, value, count } => fill16(&mut sim, *dst, *value, *count),
        Op::Memset32 { dst, value, count } => {
            sim.memset_d32(engine::DevicePtr(*dst), *value, *count)
        }
        Op::HtoD { dst, src, bytes } => {
            // SAFETY: the caller of the `unsafe` memcpy_htod_async guaranteed that
            // `src..src+bytes` is readable host memory, valid and unwritten until the
            // stream has passed this copy, which is now.
            let src = unsafe { std::slice::from_raw_parts(src.0 as *const u8, *bytes) };
            sim.memcpy_htod(engine::DevicePtr(*dst), src)
        }
        Op::DtoH { dst, src, bytes } => {
            // SAFETY: the caller of the `unsafe` memcpy_dtoh_async guaranteed that
            // `dst..dst+bytes` is writable host memory, valid and used by nothing else
            // until the stream has passed this copy, which is now.
            let dst = unsafe { std::slice::from_raw_parts_mut(dst.0 as *mut u8, *bytes) };
            sim.memcpy_dtoh(dst, engine::DevicePtr(*src))
        }
        Op::DtoD { dst, src, bytes } => {
            sim.memcpy_dtod(engine::DevicePtr(*dst), engine::DevicePtr(*src), *bytes)
        }
        Op::Record { .. } | Op::HostFunc(_) | Op::Wait { .. } | Op::Launch { .. } => Ok(()),
    };
    r.map_err(|e| {
        let f = fault_of(&e, item.stream);
        let sticky = is_sticky(&e);
        (f, sticky)
    })
}

/// `cuMemsetD16` on the engine: the pattern written in chunks (the range was checked
/// against the live allocations when the work was queued).
fn fill16(
    sim: &mut Simulator,
    dst: u64,
    value: u16,
    count: u64,
) -> std::result::Result<(), SimError> {
    const CHUNK: u64 = 32 * 1024;
    let pattern: Vec<u8> = std::iter::repeat_n(value.to_le_bytes(), CHUNK.min(count) as usize)
        .flatten()
        .collect();
    let mut done = 0u64;
    while done < count {
        let n = CHUNK.min(count - done);
        sim.memcpy_htod(
            engine::DevicePtr(dst + done * 2),
            &pattern[..(n * 2) as usize],
        )?;
        done += n;
    }
    Ok(())
}

/// `MemAvailable` of `/proc/meminfo`, in bytes (`None` where it cannot be read).
fn host_available_bytes() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = text.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    kib.checked_mul(1024)
}

fn panic_message(p: &(dyn std::any::Any + Send)) -> String {
    p.downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| p.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic without a message".into())
}

/// Whether a simulator error leaves the context unusable: its `CUresult` is sticky, or
/// the simulator is in its failed state already.
fn is_sticky(e: &SimError) -> bool {
    matches!(e, SimError::Sticky(_)) || vmgpu_cuda_api::error::is_sticky(code_of(e))
}

/// The `CUresult` a simulator error stands for.
fn code_of(e: &SimError) -> i32 {
    match e {
        SimError::MemoryFault(m) if m.kind == FaultKind::Misaligned => {
            sys::CUDA_ERROR_MISALIGNED_ADDRESS
        }
        SimError::MemoryFault(_) => sys::CUDA_ERROR_ILLEGAL_ADDRESS,
        SimError::Timeout { .. } => sys::CUDA_ERROR_LAUNCH_TIMEOUT,
        SimError::BarrierDivergence { .. }
        | SimError::Trap { .. }
        | SimError::StackOverflow { .. } => sys::CUDA_ERROR_LAUNCH_FAILED,
        SimError::Assert(_) => sys::CUDA_ERROR_ASSERT,
        SimError::BadCall { .. } => sys::CUDA_ERROR_INVALID_PC,
        SimError::Texture { .. } => sys::CUDA_ERROR_ILLEGAL_ADDRESS,
        SimError::Sticky(inner) => code_of(inner),
        SimError::OutOfMemory { .. } => sys::CUDA_ERROR_OUT_OF_MEMORY,
        // The simulator's JIT cannot compile it (an instruction unknown to PTX is
        // indistinguishable from one it does not implement): the log says which.
        SimError::Parse(p) if p.kind == ptx::ParseErrorKind::UnsupportedVersion => {
            sys::CUDA_ERROR_UNSUPPORTED_PTX_VERSION
        }
        SimError::Parse(_) | SimError::Unsupported { .. } => sys::CUDA_ERROR_INVALID_PTX,
        SimError::UnknownKernel { .. } => sys::CUDA_ERROR_NOT_FOUND,
        _ => sys::CUDA_ERROR_INVALID_VALUE,
    }
}

/// The CUDA error a simulator error stands for, with the simulator's report.
fn fault_of(e: &SimError, stream: u64) -> Fault {
    let mut inner = e;
    while let SimError::Sticky(i) = inner {
        inner = i;
    }
    Fault {
        code: code_of(e),
        detail: format!("simulator: {inner}"),
        fault: match inner {
            SimError::MemoryFault(m) => Some(m.clone()),
            _ => None,
        },
        stream,
    }
}

fn attribute(attr: DeviceAttribute) -> Option<i32> {
    use DeviceAttribute as A;
    Some(match attr {
        A::MaxThreadsPerBlock => 1024,
        A::MaxBlockDimX | A::MaxBlockDimY => 1024,
        A::MaxBlockDimZ => 64,
        A::MaxGridDimX => i32::MAX,
        A::MaxGridDimY | A::MaxGridDimZ => 65535,
        A::MaxSharedMemoryPerBlock => SIM_DEFAULT_SHARED_PER_BLOCK as i32,
        A::MaxSharedMemoryPerBlockOptin => SIM_MAX_SHARED_PER_BLOCK as i32,
        A::MaxSharedMemoryPerMultiprocessor => 167_936,
        A::TotalConstantMemory => 65536,
        A::WarpSize => 32,
        A::MaxRegistersPerBlock => 65536,
        A::ClockRate => 1_410_000,
        A::MemoryClockRate => 1_215_000,
        A::GlobalMemoryBusWidth => 5120,
        A::MultiprocessorCount => 108,
        A::MaxThreadsPerMultiprocessor => 2048,
        A::MaxRegistersPerMultiprocessor => 65536,
        A::MaxBlocksPerMultiprocessor => 32,
        // No shared memory is set aside per block (the simulator's blocks get it all).
        A::ReservedSharedMemoryPerBlock => 0,
        A::L2CacheSize => 40 << 20,
        A::EccEnabled => 0,
        A::UnifiedAddressing => 1,
        A::Integrated => 0,
        // Page-locked host memory is mapped at its own address, and managed memory is
        // host memory at one address for both: the host and kernels may use it at once.
        A::CanMapHostMemory => 1,
        // Kernels of different streams run at once (on the device threads).
        A::ConcurrentKernels => 1,
        A::AsyncEngineCount => 1,
        A::ManagedMemory => 1,
        A::ConcurrentManagedAccess => 1,
        A::HostRegisterSupported => 1,
        // Every block of a cooperative launch runs at once (one host thread each).
        A::CooperativeLaunch => 1,
        // cuMemAllocAsync and cuMemFreeAsync work (as on an H100), from each device's
        // one default pool (libcuda.so.1 answers its cuMemPool* queries).
        A::MemoryPoolsSupported => 1,
        A::PciDomainId => 0,
        A::PciBusId => 0xff,
        A::PciDeviceId => 0,
        A::ComputeCapabilityMajor => 8,
        A::ComputeCapabilityMinor => 0,
        A::Raw(n) => {
            // Known attributes by number reach the same table; the others cuda.h
            // declares the simulator does not model: what a device without the feature
            // answers (0), or a plain value where 0 would mislead.
            return match DeviceAttribute::from_code(n) {
                A::Raw(n) if (1..sys::CU_DEVICE_ATTRIBUTE_MAX).contains(&n) => Some(match n {
                    11 => i32::MAX, // MAX_PITCH
                    14 => 512,      // TEXTURE_ALIGNMENT
                    15 => 1,        // GPU_OVERLAP
                    // Texture and surface limits (an A100's, cuda.h's numbers in order):
                    // 1-D, 2-D, 3-D, 2-D layered textures; surface alignment; 1-D
                    // layered; gather; 3-D alternate; pitch alignment; cubemaps;
                    // surfaces 1-D, 2-D, 3-D, layered, cubemap; linear 1-D, 2-D;
                    // mipmapped.
                    21 | 22 => 131_072,
                    23 => 65_536,
                    24..=26 => 16_384,
                    27 | 28 => 32_768,
                    29 => 2_048,
                    30 => 512,
                    42 => 32_768,
                    43 => 2_048,
                    45 | 46 => 32_768,
                    47 | 48 => 8_192,
                    49 => 32_768,
                    51 => 32,
                    52 | 53 => 32_768,
                    54 => 2_046,
                    55 => 32_768,
                    56 => 131_072,
                    57 => 65_536,
                    58 => 16_384,
                    59 | 60 => 16_384,
                    61 => 32_768,
                    62 => 2_048,
                    63 | 64 => 32_768,
                    65 => 2_048,
                    66 | 67 => 32_768,
                    68 => 2_046,
                    69 => 268_435_456,
                    70 => 131_072,
                    71 => 65_000,
                    72 => 2_097_120,
                    73 => 32_768,
                    74 => 32_768,
                    77 => 32_768,
                    // An A100's persisting L2 (30 of its 40 MiB) and largest access
                    // policy window: stream attributes about it are kept as hints.
                    108 => 31_457_280,
                    109 => 134_213_632,
                    _ => 0,
                }),
                // Texture and surface objects are descriptors in device memory here.
                A::Raw(vmgpu_cuda_api::texture::CAPABILITY_ATTRIBUTE) => Some(1),
                A::Raw(_) => None,
                named => attribute(named),
            };
        }
        _ => return None,
    })
}

/// Checks `args` against a kernel's PTX parameters: count and sizes.
fn check_arg_sizes(
    kernel: &str,
    params: &[ptx::Param],
    args: &[&[u8]],
) -> std::result::Result<(), String> {
    if args.len() != params.len() {
        return Err(format!(
            "kernel `{kernel}` takes {} parameter(s), {} argument(s) given",
            params.len(),
            args.len()
        ));
    }
    for (i, (p, a)) in params.iter().zip(args).enumerate() {
        if a.len() != p.size as usize {
            return Err(format!(
                "kernel `{kernel}`: argument {i} (parameter `{}`, .{}, {} bytes) has {} bytes",
                p.name,
                p.ty.name(),
                p.size,
                a.len()
            ));
        }
    }
    Ok(())
}

impl SimContext {
    fn context_synchronize(&self) -> Result<()> {
        self.ctx("cuCtxSynchronize")?;
        let st = self.shared.state();
        let seq = st.submitted;
        self.wait_for(st, seq, "cuCtxSynchronize").map(drop)
    }

    fn mem_get_info(&self) -> Result<MemInfo> {
        drop(self.live("cuMemGetInfo_v2")?);
        let total = self.shared.config.memory_limit;
        Ok(MemInfo {
            free: total.saturating_sub(self.shared.device_used()),
            total,
        })
    }

    fn module_load_ptx(&self, ptx: &str) -> Result<Module> {
        let name = {
            let mut st = self.live("cuModuleLoadDataEx (PTX JIT)")?;
            st.next_module += 1;
            format!("module{}.ptx", st.next_module)
        };
        self.module_load_ptx_named(&name, ptx)
    }

    fn module_load_ptx_named(&self, name: &str, ptx: &str) -> Result<Module> {
        const OP: &str = "cuModuleLoadDataEx (PTX JIT)";
        let loaded = self.guarded(OP, |sim| sim.load_module(name, ptx))?;
        match loaded {
            Ok(m) => {
                let mut st = self.shared.state();
                let h = st.handle();
                // Its variables are device memory, counted like allocations and reached
                // by copies and memsets (their addresses come from cuModuleGetGlobal).
                self.shared.charge(&mut st, m.global_bytes());
                for (_, p, size) in m.variables() {
                    st.variables.insert(p.0, size.max(1));
                }
                st.modules.insert(h, m);
                Ok(Module::from_raw(self.id, h))
            }
            Err(e) => {
                let f = fault_of(&e, 0);
                let mut err = self.err(f.code, OP);
                err.jit_log = Some(match &e {
                    SimError::Unsupported {
                        module,
                        line,
                        message,
                    } => format!("ptx simulator: {module}:{line}: error: {message}\n"),
                    other => format!("ptx simulator: {other}\n"),
                });
                Err(err.into())
            }
        }
    }

    unsafe fn module_unload(&self, module: Module) -> Result<()> {
        self.owned(module.owner(), "cuModuleUnload")?;
        let mut st = self.live("cuModuleUnload")?;
        let Some(m) = st.modules.remove(&module.raw()) else {
            return self.fail(
                sys::CUDA_ERROR_INVALID_HANDLE,
                "cuModuleUnload",
                "unknown or unloaded module".into(),
            );
        };
        st.functions.retain(|_, f| f.module_handle != module.raw());
        self.shared.refund(&mut st, m.global_bytes());
        for (_, p, _) in m.variables() {
            st.variables.remove(&p.0);
        }
        drop(st);
        // Its variables are freed (a kernel still reaching them faults, as on a GPU).
        match self.guarded("cuModuleUnload", |sim| sim.unload_module(&m))? {
            Ok(()) => Ok(()),
            Err(e) => self.fail(sys::CUDA_ERROR_UNKNOWN, "cuModuleUnload", e.to_string()),
        }
    }

    fn module_get_function(&self, module: &Module, name: &str) -> Result<Function> {
        self.owned(module.owner(), "cuModuleGetFunction")?;
        let mut st = self.live("cuModuleGetFunction")?;
        let Some(m) = st.modules.get(&module.raw()).cloned() else {
            return self.fail(
                sys::CUDA_ERROR_INVALID_HANDLE,
                format!("cuModuleGetFunction({name:?})"),
                "unknown or unloaded module".into(),
            );
        };
        let Some(k) = m.kernel(name) else {
            return self.fail(
                sys::CUDA_ERROR_NOT_FOUND,
                format!("cuModuleGetFunction({name:?})"),
                format!("the module's kernels are {:?}", m.kernel_names()),
            );
        };
        let state = FunctionState {
            module_handle: module.raw(),
            params: k.params().to_vec(),
            shared_static: k.shared_bytes(),
            max_dynamic: SIM_DEFAULT_SHARED_PER_BLOCK.saturating_sub(k.shared_bytes()),
            carveout: -1,
            module: m.clone(),
            name: name.into(),
        };
        let h = st.handle();
        st.functions.insert(h, state);
        Ok(Function::from_raw(self.id, h))
    }

    fn mem_alloc(&self, bytes: usize) -> Result<DevicePtr> {
        let op = || format!("cuMemAlloc_v2({bytes} bytes)");
        let total = self.shared.config.memory_limit;
        {
            let mut st = self.live("cuMemAlloc_v2")?;
            if bytes == 0 {
                return self.fail(sys::CUDA_ERROR_INVALID_VALUE, op(), "0 bytes".into());
            }
            let used = self.shared.device_used();
            if used.saturating_add(bytes as u64) > total {
                let detail = format!(
                    "{bytes} bytes requested, {used} of the virtual device's {total} in use"
                );
                return self.fail(sys::CUDA_ERROR_OUT_OF_MEMORY, op(), detail);
            }
            // The simulator backs device memory with host memory, which a failed
            // allocation would abort the process for: refuse what the host lacks.
            if let Some(avail) = host_available_bytes() {
                if bytes as u64 > avail {
                    let detail = format!(
                        "{bytes} bytes requested; the simulator backs device memory with host \
                         memory and the host has {avail} bytes available"
                    );
                    return self.fail(sys::CUDA_ERROR_OUT_OF_MEMORY, op(), detail);
                }
            }
            self.shared.charge(&mut st, bytes as u64);
        }
        let r = self.guarded("cuMemAlloc_v2", |sim| sim.malloc(bytes as u64));
        let mut st = self.shared.state();
        let r = match r {
            Ok(r) => r,
            Err(e) => {
                self.shared.refund(&mut st, bytes as u64);
                return Err(e);
            }
        };
        match r {
            Ok(p) => {
                st.allocs.insert(p.0, bytes as u64);
                Ok(DevicePtr(p.0))
            }
            Err(e) => {
                self.shared.refund(&mut st, bytes as u64);
                let f = fault_of(&e, 0);
                self.fail(f.code, op(), f.detail)
            }
        }
    }

    fn mem_free(&self, ptr: DevicePtr) -> Result<()> {
        const OP: &str = "cuMemFree_v2";
        let st = self.live(OP)?;
        let seq = st.submitted;
        let mut st = self.wait_for(st, seq, OP)?;
        let Some(size) = st.allocs.remove(&ptr.0) else {
            return self.fail(
                sys::CUDA_ERROR_INVALID_VALUE,
                format!("cuMemFree_v2({:#x})", ptr.0),
                "not the start of a live device allocation".into(),
            );
        };
        self.shared.refund(&mut st, size);
        drop(st);
        self.guarded(OP, |sim| sim.free(engine::DevicePtr(ptr.0)))?
            .map_err(|e| self.fault_error(&fault_of(&e, 0), OP))
    }

    unsafe fn memset_d16_async(
        &self,
        dst: DevicePtr,
        value: u16,
        count: usize,
        stream: &Stream,
    ) -> Result<()> {
        const OP: &str = "cuMemsetD16Async";
        self.owned(stream.owner(), OP)?;
        let mut st = self.live(OP)?;
        let s = self.stream_id(&st, stream, OP)?;
        if count == 0 {
            return Ok(());
        }
        self.aligned(dst, 2, OP)?;
        self.check_range(&st, dst, (count as u64).saturating_mul(2), OP)?;
        let count = count as u64;
        self.submit(
            &mut st,
            s,
            Op::Memset16 {
                dst: dst.0,
                value,
                count,
            },
        );
        Ok(())
    }

    unsafe fn memset_d32_async(
        &self,
        dst: DevicePtr,
        value: u32,
        count: usize,
        stream: &Stream,
    ) -> Result<()> {
        const OP: &str = "cuMemsetD32Async";
        self.owned(stream.owner(), OP)?;
        let mut st = self.live(OP)?;
        let s = self.stream_id(&st, stream, OP)?;
        if count == 0 {
            return Ok(());
        }
        self.aligned(dst, 4, OP)?;
        self.check_range(&st, dst, (count as u64).saturating_mul(4), OP)?;
        let count = count as u64;
        self.submit(
            &mut st,
            s,
            Op::Memset32 {
                dst: dst.0,
                value,
                count,
            },
        );
        Ok(())
    }

    unsafe fn memset_d8_async(
        &self,
        dst: DevicePtr,
        value: u8,
        bytes: usize,
        stream: &Stream,
    ) -> Result<()> {
        const OP: &str = "cuMemsetD8Async";
        self.owned(stream.owner(), OP)?;
        let mut st = self.live(OP)?;
        let s = self.stream_id(&st, stream, OP)?;
        if bytes == 0 {
            return Ok(());
        }
        self.check_range(&st, dst, bytes as u64, OP)?;
        self.submit(
            &mut st,
            s,
            Op::Memset {
                dst: dst.0,
                value,
                bytes: bytes as u64,
            },
        );
        Ok(())
    }

    unsafe fn memcpy_htod_async(
        &self,
        dst: DevicePtr,
        src: *const u8,
        bytes: usize,
        stream: &Stream,
    ) -> Result<()> {
        const OP: &str = "cuMemcpyHtoDAsync_v2";
        self.owned(stream.owner(), OP)?;
        let mut st = self.live(OP)?;
        let s = self.stream_id(&st, stream, OP)?;
        if bytes == 0 {
            return Ok(());
        }
        if src.is_null() {
            return self.fail(
                sys::CUDA_ERROR_INVALID_VALUE,
                OP,
                "null host pointer".into(),
            );
        }
        self.check_range(&st, dst, bytes as u64, OP)?;
        self.submit(
            &mut st,
            s,
            Op::HtoD {
                dst: dst.0,
                src: HostPtr(src as usize),
                bytes,
            },
        );
        Ok(())
    }

    unsafe fn memcpy_dtoh_async(
        &self,
        dst: *mut u8,
        src: DevicePtr,
        bytes: usize,
        stream: &Stream,
    ) -> Result<()> {
        const OP: &str = "cuMemcpyDtoHAsync_v2";
        self.owned(stream.owner(), OP)?;
        let mut st = self.live(OP)?;
        let s = self.stream_id(&st, stream, OP)?;
        if bytes == 0 {
            return Ok(());
        }
        if dst.is_null() {
            return self.fail(
                sys::CUDA_ERROR_INVALID_VALUE,
                OP,
                "null host pointer".into(),
            );
        }
        self.check_range(&st, src, bytes as u64, OP)?;
        self.submit(
            &mut st,
            s,
            Op::DtoH {
                dst: HostPtr(dst as usize),
                src: src.0,
                bytes,
            },
        );
        Ok(())
    }

    unsafe fn memcpy_dtod_async(
        &self,
        dst: DevicePtr,
        src: DevicePtr,
        bytes: usize,
        stream: &Stream,
    ) -> Result<()> {
        const OP: &str = "cuMemcpyDtoDAsync_v2";
        self.owned(stream.owner(), OP)?;
        let mut st = self.live(OP)?;
        let s = self.stream_id(&st, stream, OP)?;
        if bytes == 0 {
            return Ok(());
        }
        self.check_range(&st, src, bytes as u64, OP)?;
        self.check_range(&st, dst, bytes as u64, OP)?;
        self.submit(
            &mut st,
            s,
            Op::DtoD {
                dst: dst.0,
                src: src.0,
                bytes: bytes as u64,
            },
        );
        Ok(())
    }

    fn host_alloc(&self, bytes: usize, _flags: HostAllocFlags) -> Result<HostAlloc> {
        const OP: &str = "cuMemHostAlloc";
        let mut st = self.live(OP)?;
        let layout = match Layout::from_size_align(bytes, 4096) {
            Ok(l) if bytes > 0 => l,
            _ => {
                return self.fail(
                    sys::CUDA_ERROR_INVALID_VALUE,
                    OP,
                    format!("{bytes} bytes cannot be allocated"),
                )
            }
        };
        // SAFETY: `layout` has a non-zero size.
        let p = unsafe { std::alloc::alloc_zeroed(layout) };
        if p.is_null() {
            return self.fail(
                sys::CUDA_ERROR_OUT_OF_MEMORY,
                OP,
                format!("the host has no {bytes} bytes to spare"),
            );
        }
        st.host.insert(p as usize, layout);
        drop(st);
        // Mapped for the device at its own address (unified addressing: page-locked
        // memory is the device's too, as `cuMemHostGetDevicePointer` gives out).
        // SAFETY: the memory stays allocated until `host_free`, which unmaps it first,
        // once the device is idle.
        self.guarded(OP, |sim| unsafe { sim.map_host(p as u64, bytes as u64) })?
            .map_err(|e| self.fault_error(&fault_of(&e, 0), OP))?;
        self.shared.state().mapped.insert(p as u64, bytes as u64);
        Ok(HostAlloc::from_raw(self.id, p as usize, bytes))
    }

    unsafe fn host_free(&self, mem: HostAlloc) -> Result<()> {
        const OP: &str = "cuMemFreeHost";
        self.owned(mem.owner(), OP)?;
        let st = self.shared.state();
        let seq = st.submitted;
        let mut st = self.wait_for(st, seq, OP)?;
        let Some(layout) = st.host.remove(&(mem.as_ptr() as usize)) else {
            return self.fail(
                sys::CUDA_ERROR_INVALID_VALUE,
                OP,
                "not memory from cuMemHostAlloc of this backend".into(),
            );
        };
        st.mapped.remove(&(mem.as_ptr() as u64));
        drop(st);
        // The device is idle (waited for above): no kernel reaches it after this.
        let _ = self.guarded(OP, |sim| sim.unmap_host(mem.as_ptr() as u64));
        // SAFETY: the address came from `alloc_zeroed(layout)` and was removed from the
        // map, so it is freed once; the caller guarantees nothing uses it any more, and
        // the device no longer maps it.
        unsafe { std::alloc::dealloc(mem.as_ptr(), layout) };
        Ok(())
    }

    fn host_device_pointer(&self, host: *mut u8) -> Result<DevicePtr> {
        const OP: &str = "cuMemHostGetDevicePointer_v2";
        drop(self.live(OP)?);
        let addr = host as u64;
        match self.guarded(OP, |sim| Ok(sim.host_mapped(addr)))? {
            Ok(true) => Ok(DevicePtr(addr)),
            _ => self.fail(
                sys::CUDA_ERROR_INVALID_VALUE,
                OP,
                format!("{addr:#x} is not page-locked host memory of this context"),
            ),
        }
    }

    fn mem_alloc_managed(&self, bytes: usize) -> Result<DevicePtr> {
        const OP: &str = "cuMemAllocManaged";
        let total = self.shared.config.memory_limit;
        {
            let mut st = self.live(OP)?;
            if bytes == 0 {
                return self.fail(sys::CUDA_ERROR_INVALID_VALUE, OP, "0 bytes".into());
            }
            let used = self.shared.device_used();
            if used.saturating_add(bytes as u64) > total {
                let detail = format!(
                    "{bytes} bytes requested, {used} of the virtual device's {total} in use"
                );
                return self.fail(sys::CUDA_ERROR_OUT_OF_MEMORY, OP, detail);
            }
            self.shared.charge(&mut st, bytes as u64);
        }
        let r = self.guarded(OP, |sim| sim.malloc_managed(bytes as u64));
        let mut st = self.shared.state();
        match r {
            Ok(Ok(p)) => {
                st.allocs.insert(p.0, bytes as u64);
                Ok(p)
            }
            Ok(Err(e)) => {
                self.shared.refund(&mut st, bytes as u64);
                let f = fault_of(&e, 0);
                self.fail(f.code, OP, f.detail)
            }
            Err(e) => {
                self.shared.refund(&mut st, bytes as u64);
                Err(e)
            }
        }
    }

    unsafe fn host_register(
        &self,
        ptr: *mut u8,
        bytes: usize,
        _flags: HostRegisterFlags,
    ) -> Result<()> {
        const OP: &str = "cuMemHostRegister_v2";
        let mut st = self.live(OP)?;
        let start = ptr as usize;
        let Some(end) = start
            .checked_add(bytes)
            .filter(|_| !ptr.is_null() && bytes > 0)
        else {
            return self.fail(
                sys::CUDA_ERROR_INVALID_VALUE,
                OP,
                format!("{start:#x}..+{bytes} is not a host range"),
            );
        };
        let overlaps = st
            .registered
            .range(..end)
            .next_back()
            .is_some_and(|(&s, &len)| s + len > start);
        if overlaps {
            return self.fail(
                sys::CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED,
                OP,
                format!("{start:#x}..+{bytes} overlaps a registered range"),
            );
        }
        st.registered.insert(start, bytes);
        drop(st);
        // Mapped for the device at its own address, as page-locked memory is under
        // unified addressing. A range the simulator cannot map (it overlaps simulated
        // device memory) stays registered for copies only.
        // SAFETY: the caller keeps the range mapped until `host_unregister`, which
        // unmaps it once the device is idle.
        if let Ok(Ok(_)) = self.guarded(OP, |sim| unsafe {
            sim.map_host(start as u64, bytes as u64)
        }) {
            self.shared
                .state()
                .mapped
                .insert(start as u64, bytes as u64);
        }
        Ok(())
    }

    unsafe fn host_unregister(&self, ptr: *mut u8) -> Result<()> {
        const OP: &str = "cuMemHostUnregister";
        let st = self.live(OP)?;
        let seq = st.submitted;
        let mut st = self.wait_for(st, seq, OP)?;
        if st.registered.remove(&(ptr as usize)).is_none() {
            return self.fail(
                sys::CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED,
                OP,
                format!("{:#x} is not the start of a registered range", ptr as usize),
            );
        }
        st.mapped.remove(&(ptr as u64));
        drop(st);
        // The device is idle (waited for above): no kernel reaches it after this.
        let _ = self.guarded(OP, |sim| sim.unmap_host(ptr as u64));
        Ok(())
    }

    fn stream_create(&self, _flags: StreamFlags) -> Result<Stream> {
        let mut st = self.live("cuStreamCreate")?;
        let h = st.handle();
        st.streams.insert(h, 0);
        Ok(Stream::from_raw(self.id, h))
    }

    fn stream_synchronize(&self, stream: &Stream) -> Result<()> {
        const OP: &str = "cuStreamSynchronize";
        self.owned(stream.owner(), OP)?;
        self.ctx(OP)?;
        let st = self.shared.state();
        let s = self.stream_id(&st, stream, OP)?;
        // The legacy default stream waits for everything.
        let seq = if s == 0 {
            st.submitted
        } else {
            st.streams.get(&s).copied().unwrap_or(0)
        };
        self.wait_for(st, seq, OP)
            .map_err(|mut e| {
                if let DriverError::Cuda(c) = &mut e {
                    c.stream = Some(s);
                }
                e
            })
            .map(drop)
    }

    fn stream_query(&self, stream: &Stream) -> Result<bool> {
        const OP: &str = "cuStreamQuery";
        self.owned(stream.owner(), OP)?;
        let st = self.live(OP)?;
        let s = self.stream_id(&st, stream, OP)?;
        let seq = if s == 0 {
            st.submitted
        } else {
            st.streams.get(&s).copied().unwrap_or(0)
        };
        Ok(st.done >= seq)
    }

    fn stream_wait_event(&self, stream: &Stream, event: &Event) -> Result<()> {
        const OP: &str = "cuStreamWaitEvent";
        self.owned(stream.owner(), OP)?;
        self.owned(event.owner(), OP)?;
        let mut st = self.live(OP)?;
        let s = self.stream_id(&st, stream, OP)?;
        // The record the wait refers to is already queued; in-order execution reaches it
        // before any later work of `stream` (see the module documentation). The marker
        // keeps the stream's later records from being taken ahead of it.
        let after = self.event_state(&mut st, event, OP)?.record.unwrap_or(0);
        self.submit(&mut st, s, Op::Wait { after });
        take_ready_records(&mut st, Instant::now());
        Ok(())
    }

    fn stream_destroy(&self, stream: Stream) -> Result<()> {
        const OP: &str = "cuStreamDestroy_v2";
        self.owned(stream.owner(), OP)?;
        let mut st = self.live(OP)?;
        if stream.raw() == 0 || st.streams.remove(&stream.raw()).is_none() {
            return self.fail(
                sys::CUDA_ERROR_INVALID_HANDLE,
                OP,
                "unknown or destroyed stream".into(),
            );
        }
        Ok(())
    }

    fn event_create(&self, flags: EventFlags) -> Result<Event> {
        let mut st = self.live("cuEventCreate")?;
        let h = st.handle();
        st.events.insert(
            h,
            EventState {
                flags,
                record: None,
                time: None,
            },
        );
        Ok(Event::from_raw(self.id, h))
    }

    fn event_record(&self, event: &Event, stream: &Stream) -> Result<()> {
        const OP: &str = "cuEventRecord";
        self.owned(stream.owner(), OP)?;
        self.owned(event.owner(), OP)?;
        let mut st = self.live(OP)?;
        let s = self.stream_id(&st, stream, OP)?;
        self.event_state(&mut st, event, OP)?;
        let seq = self.submit(&mut st, s, Op::Record { event: event.raw() });
        let e = self.event_state(&mut st, event, OP)?;
        e.record = Some(seq);
        e.time = None;
        // Reached at once when its stream is idle, even while the device runs other
        // streams' work.
        take_ready_records(&mut st, Instant::now());
        Ok(())
    }

    fn stream_host_func(&self, stream: &Stream, f: vmgpu_cuda_api::HostFunc) -> Result<()> {
        const OP: &str = "cuLaunchHostFunc";
        self.owned(stream.owner(), OP)?;
        let mut st = self.live(OP)?;
        let s = self.stream_id(&st, stream, OP)?;
        self.submit(&mut st, s, Op::HostFunc(HostCall(Mutex::new(Some(f)))));
        Ok(())
    }

    fn event_synchronize(&self, event: &Event) -> Result<()> {
        const OP: &str = "cuEventSynchronize";
        self.owned(event.owner(), OP)?;
        self.ctx(OP)?;
        let mut st = self.shared.state();
        let seq = self.event_state(&mut st, event, OP)?.record.unwrap_or(0);
        self.wait_for(st, seq, OP).map(drop)
    }

    fn event_query(&self, event: &Event) -> Result<bool> {
        const OP: &str = "cuEventQuery";
        self.owned(event.owner(), OP)?;
        let mut st = self.live(OP)?;
        let done = st.done;
        let seq = self.event_state(&mut st, event, OP)?.record.unwrap_or(0);
        Ok(done >= seq)
    }

    fn event_elapsed_ms(&self, start: &Event, end: &Event) -> Result<f32> {
        const OP: &str = "cuEventElapsedTime";
        self.owned(start.owner(), OP)?;
        self.owned(end.owner(), OP)?;
        let mut st = self.live(OP)?;
        let mut times = [None; 2];
        for (slot, ev) in times.iter_mut().zip([start, end]) {
            let e = self.event_state(&mut st, ev, OP)?;
            if e.flags.disable_timing {
                return self.fail(
                    sys::CUDA_ERROR_INVALID_HANDLE,
                    OP,
                    "an event was created with timing disabled".into(),
                );
            }
            if e.record.is_none() {
                return self.fail(
                    sys::CUDA_ERROR_INVALID_HANDLE,
                    OP,
                    "an event has not been recorded".into(),
                );
            }
            match e.time {
                Some(t) => *slot = Some(t),
                None => {
                    return Err(self.err(sys::CUDA_ERROR_NOT_READY, OP).into());
                }
            }
        }
        let (Some(a), Some(b)) = (times[0], times[1]) else {
            return Err(self.err(sys::CUDA_ERROR_NOT_READY, OP).into());
        };
        Ok(if b >= a {
            b.duration_since(a).as_secs_f64() as f32 * 1000.0
        } else {
            -(a.duration_since(b).as_secs_f64() as f32 * 1000.0)
        })
    }

    fn event_destroy(&self, event: Event) -> Result<()> {
        const OP: &str = "cuEventDestroy_v2";
        self.owned(event.owner(), OP)?;
        let mut st = self.live(OP)?;
        if st.events.remove(&event.raw()).is_none() {
            return self.fail(
                sys::CUDA_ERROR_INVALID_HANDLE,
                OP,
                "unknown or destroyed event".into(),
            );
        }
        Ok(())
    }

    fn module_host_bytes(&self, module: &Module) -> Option<u64> {
        if module.owner() != self.id {
            return None;
        }
        let st = self.shared.state();
        st.modules.get(&module.raw()).map(|m| m.host_bytes())
    }

    fn function_params(
        &self,
        function: &Function,
    ) -> Result<Option<Vec<vmgpu_cuda_api::ParamLayout>>> {
        const OP: &str = "cuFuncGetParamInfo";
        self.owned(function.owner(), OP)?;
        let st = self.live(OP)?;
        match st.functions.get(&function.raw()) {
            Some(f) => Ok(Some(
                f.params
                    .iter()
                    .map(|p| vmgpu_cuda_api::ParamLayout {
                        offset: p.offset,
                        size: p.size,
                    })
                    .collect(),
            )),
            None => self.fail(
                sys::CUDA_ERROR_INVALID_HANDLE,
                OP,
                "unknown function (or one from before a reset)".into(),
            ),
        }
    }

    fn function_attribute(&self, function: &Function, attribute: FunctionAttribute) -> Result<i32> {
        const OP: &str = "cuFuncGetAttribute";
        self.owned(function.owner(), OP)?;
        let st = self.live(OP)?;
        let Some(f) = st.functions.get(&function.raw()) else {
            return self.fail(
                sys::CUDA_ERROR_INVALID_HANDLE,
                OP,
                "unknown function (its module was unloaded, or the context reset)".into(),
            );
        };
        let kernel = f.module.kernel(&f.name);
        let int = |v: u64| i32::try_from(v).unwrap_or(i32::MAX);
        use FunctionAttribute as F;
        Ok(match attribute {
            F::MaxThreadsPerBlock => 1024,
            F::SharedSizeBytes => int(f.shared_static.into()),
            F::ConstSizeBytes => int(f.module.const_bytes()),
            F::LocalSizeBytes => int(kernel.map_or(0, |k| k.local_bytes()).into()),
            F::NumRegs => int(kernel.map_or(0, |k| k.registers()).into()),
            F::PtxVersion => int(f.module.arch().into()),
            // The virtual device is an sm_80.
            F::BinaryVersion => 80,
            F::CacheModeCa => 0,
            F::MaxDynamicSharedSizeBytes => int(f.max_dynamic.into()),
            F::PreferredSharedMemoryCarveout => f.carveout,
            // No clusters on an sm_80.
            F::ClusterSizeMustBeSet
            | F::RequiredClusterWidth
            | F::RequiredClusterHeight
            | F::RequiredClusterDepth
            | F::NonPortableClusterSizeAllowed
            | F::ClusterSchedulingPolicyPreference => 0,
            other => {
                return self.fail(
                    sys::CUDA_ERROR_INVALID_VALUE,
                    OP,
                    format!("attribute {other:?} is not known to the simulator"),
                )
            }
        })
    }

    fn function_set_attribute(
        &self,
        function: &Function,
        attribute: FunctionAttribute,
        value: i32,
    ) -> Result<()> {
        const OP: &str = "cuFuncSetAttribute";
        self.owned(function.owner(), OP)?;
        let mut st = self.live(OP)?;
        let Some(f) = st.functions.get_mut(&function.raw()) else {
            return self.fail(
                sys::CUDA_ERROR_INVALID_HANDLE,
                OP,
                "unknown function (its module was unloaded, or the context reset)".into(),
            );
        };
        match attribute {
            FunctionAttribute::MaxDynamicSharedSizeBytes => {
                let limit = SIM_MAX_SHARED_PER_BLOCK.saturating_sub(f.shared_static);
                match u32::try_from(value) {
                    Ok(bytes) if bytes <= limit => {
                        f.max_dynamic = bytes;
                        Ok(())
                    }
                    _ => {
                        let detail = format!(
                            "{value} bytes of dynamic shared memory; the device allows {limit} \
                             beside the kernel's {} static bytes",
                            f.shared_static
                        );
                        self.fail(sys::CUDA_ERROR_INVALID_VALUE, OP, detail)
                    }
                }
            }
            FunctionAttribute::PreferredSharedMemoryCarveout if (-1..=100).contains(&value) => {
                f.carveout = value;
                Ok(())
            }
            other => self.fail(
                sys::CUDA_ERROR_INVALID_VALUE,
                OP,
                format!("{other:?} = {value} cannot be set"),
            ),
        }
    }

    fn module_get_global(&self, module: &Module, name: &str) -> Result<(DevicePtr, usize)> {
        const OP: &str = "cuModuleGetGlobal_v2";
        self.owned(module.owner(), OP)?;
        let st = self.live(OP)?;
        let Some(m) = st.modules.get(&module.raw()) else {
            return self.fail(
                sys::CUDA_ERROR_INVALID_HANDLE,
                OP,
                "unknown or unloaded module".into(),
            );
        };
        match m.variable(name) {
            Some((ptr, size)) => Ok((DevicePtr(ptr.0), size as usize)),
            None => self.fail(
                sys::CUDA_ERROR_NOT_FOUND,
                format!("cuModuleGetGlobal_v2({name:?})"),
                "the module has no .global or .const variable by that name".into(),
            ),
        }
    }

    unsafe fn launch_kind(
        &self,
        kind: LaunchKind,
        function: &Function,
        config: &LaunchConfig,
        stream: &Stream,
        args: &[&[u8]],
    ) -> Result<()> {
        self.launch_grid(function, config, stream, args, kind)
    }
}

impl SimContext {
    /// `cuLaunchKernel`, or `cuLaunchCooperativeKernel`, as `kind` says.
    fn launch_grid(
        &self,
        function: &Function,
        config: &LaunchConfig,
        stream: &Stream,
        args: &[&[u8]],
        kind: LaunchKind,
    ) -> Result<()> {
        let op_name = kind.entry_point();
        self.owned(function.owner(), op_name)?;
        let mut st = self.live(op_name)?;
        let s = self.stream_id(&st, stream, op_name)?;
        let Some(f) = st.functions.get(&function.raw()) else {
            return self.fail(
                sys::CUDA_ERROR_INVALID_HANDLE,
                op_name,
                "unknown function (its module was unloaded, or the context reset)".into(),
            );
        };
        let launch_op = || {
            format!(
                "{op_name}({}, grid {:?}, block {:?}, {} shared bytes, {} args)",
                f.name,
                config.grid,
                config.block,
                config.shared_bytes,
                args.len()
            )
        };
        if let Err(detail) = check_arg_sizes(&f.name, &f.params, args) {
            return self.fail(sys::CUDA_ERROR_INVALID_VALUE, launch_op(), detail);
        }
        let [bx, by, bz] = config.block;
        let [gx, gy, gz] = config.grid;
        // Saturating: three u32 factors overflow a u64 (a guest's block of u32::MAX^3).
        let threads = (bx as u64)
            .saturating_mul(by as u64)
            .saturating_mul(bz as u64);
        if threads == 0
            || threads > 1024
            || bx > 1024
            || by > 1024
            || bz > 64
            || gx == 0
            || gy == 0
            || gz == 0
            || gx > i32::MAX as u32
            || gy > 65535
            || gz > 65535
        {
            let detail = "block: 1..=1024 threads, x,y <= 1024, z <= 64; grid: x < 2^31, \
                          y,z <= 65535, none 0"
                .to_string();
            return self.fail(sys::CUDA_ERROR_INVALID_VALUE, launch_op(), detail);
        }
        if config.shared_bytes > f.max_dynamic {
            let detail = format!(
                "{} bytes of dynamic shared memory, more than the kernel's maximum of {} \
                 (raise it with cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES))",
                config.shared_bytes, f.max_dynamic
            );
            return self.fail(sys::CUDA_ERROR_INVALID_VALUE, launch_op(), detail);
        }
        let shared = f.shared_static as u64 + config.shared_bytes as u64;
        if shared > SIM_MAX_SHARED_PER_BLOCK as u64 {
            let detail = format!(
                "{} static + {} dynamic bytes of shared memory, more than the device's {} per block",
                f.shared_static, config.shared_bytes, SIM_MAX_SHARED_PER_BLOCK
            );
            return self.fail(sys::CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES, launch_op(), detail);
        }
        let op = Op::Launch {
            module: f.module.clone(),
            kernel: f.name.clone(),
            cfg: engine::LaunchConfig {
                grid: config.grid,
                block: config.block,
                shared_bytes: config.shared_bytes,
            },
            args: args.iter().map(|a| KernelArg::Bytes(a.to_vec())).collect(),
            kind,
        };
        self.submit(&mut st, s, op);
        Ok(())
    }
}

/// The PTX simulator as a [`Backend`]: one simulated device with CUDA's contexts (the
/// primary context, and as many more as `cuCtxCreate` makes), each a [`Simulator`] of
/// its own with its own queue and device thread; see the [module documentation](self)
/// for the virtual device and the execution model.
#[derive(Debug)]
pub struct SimBackend {
    id: u32,
    config: SimConfig,
    cancel: CancelToken,
    /// Live contexts by id (a context's id is its handle's value and the owner of what
    /// is made in it).
    contexts: Mutex<HashMap<u32, Arc<SimContext>>>,
    /// Per device: the primary context (made at the first retain) and its reference
    /// count.
    primary: Mutex<HashMap<u32, (Option<u32>, u64)>>,
    /// Per device: memory in use by all its contexts (allocations and module variables).
    device_used: Vec<Arc<AtomicU64>>,
}

impl SimBackend {
    /// A simulator backend with `config` (threads per launch, budgets, and
    /// [`SimConfig::memory_limit`] as the device's memory).
    pub fn new(config: SimConfig) -> Result<SimBackend> {
        SimBackend::with_cancel(config, CancelToken::new())
    }

    /// [`SimBackend::new`] whose work `cancel` stops: the running launch ends at its
    /// next budget check and every later one at once, with a sticky
    /// `CUDA_ERROR_LAUNCH_TIMEOUT` (so queued work is skipped and synchronising returns),
    /// in every context. For a server whose client is gone.
    pub fn with_cancel(config: SimConfig, cancel: CancelToken) -> Result<SimBackend> {
        Ok(SimBackend {
            id: next_instance_id(),
            cancel,
            contexts: Mutex::new(HashMap::new()),
            primary: Mutex::new(HashMap::new()),
            device_used: (0..config.devices.clamp(1, SIM_MAX_DEVICES))
                .map(|_| Arc::new(AtomicU64::new(0)))
                .collect(),
            config,
        })
    }

    /// The simulator's settings.
    pub fn config(&self) -> &SimConfig {
        &self.config
    }

    fn contexts(&self) -> MutexGuard<'_, HashMap<u32, Arc<SimContext>>> {
        self.contexts.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// How many devices it simulates.
    fn devices(&self) -> u32 {
        self.device_used.len() as u32
    }

    fn primaries(&self) -> MutexGuard<'_, HashMap<u32, (Option<u32>, u64)>> {
        self.primary.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A new context of device `dev` (its device thread started).
    fn make_context(&self, dev: u32) -> Result<Arc<SimContext>> {
        let c = Arc::new(SimContext::new(
            self.config.clone(),
            self.cancel.clone(),
            self.device_used[dev as usize].clone(),
            dev,
        )?);
        self.contexts().insert(c.id, c.clone());
        Ok(c)
    }

    /// The context current on this thread, if it is one of this device's. Otherwise the
    /// primary context, whose own check then refuses the call with the entry point's
    /// name (`CUDA_ERROR_INVALID_CONTEXT`).
    fn current(&self, method: &'static str) -> Result<Arc<SimContext>> {
        let id = SIM_CURRENT.with(|c| c.get());
        let contexts = self.contexts();
        if let Some(c) = contexts.get(&id) {
            return Ok(c.clone());
        }
        let primary = self.primaries().get(&0).and_then(|p| p.0);
        match primary.and_then(|p| contexts.get(&p)) {
            Some(c) => Ok(c.clone()),
            None => Err(sim_err(
                sys::CUDA_ERROR_INVALID_CONTEXT,
                format!("{method}: no context of this simulator is current"),
            )
            .into()),
        }
    }

    /// The context of handle `ctx`, if it is a live context of this device.
    fn context(&self, ctx: &Context, op: &'static str) -> Result<Arc<SimContext>> {
        vmgpu_cuda_api::check_owner(ctx.owner(), self.id, op)?;
        match u32::try_from(ctx.raw())
            .ok()
            .and_then(|id| self.contexts().get(&id).cloned())
        {
            Some(c) => Ok(c),
            None => Err(sim_err(sys::CUDA_ERROR_INVALID_CONTEXT, op).into()),
        }
    }

    fn device(&self, dev: Device, op: &'static str) -> Result<u32> {
        let d = dev.ordinal();
        if d < self.devices() {
            Ok(d)
        } else {
            let mut e = sim_err(sys::CUDA_ERROR_INVALID_DEVICE, op);
            e.device = Some(d);
            e.detail = Some(format!("the simulator has {} device(s)", self.devices()));
            Err(e.into())
        }
    }
}

/// An error of a simulated device (ordinal 0 unless set).
fn sim_err(code: i32, operation: impl Into<String>) -> CudaError {
    let mut e = CudaError::builtin(code, operation);
    e.device = Some(0);
    e
}

/// The [`Backend`] methods that run in the calling thread's current context: each is the
/// [`SimContext`] method of the same name and arguments (its name is the operation an
/// error names when no context is current).
macro_rules! in_current_context {
    () => {};
    (fn $name:ident($($arg:ident: $ty:ty),*) -> $ret:ty; $($rest:tt)*) => {
        fn $name(&self, $($arg: $ty),*) -> $ret {
            self.current(stringify!($name))?.$name($($arg),*)
        }
        in_current_context!($($rest)*);
    };
    (unsafe fn $name:ident($($arg:ident: $ty:ty),*) -> $ret:ty; $($rest:tt)*) => {
        unsafe fn $name(&self, $($arg: $ty),*) -> $ret {
            let c = self.current(stringify!($name))?;
            // SAFETY: this method's contract, passed on unchanged to the same method of
            // the context it runs in.
            unsafe { c.$name($($arg),*) }
        }
        in_current_context!($($rest)*);
    };
}

impl Backend for SimBackend {
    fn kind(&self) -> BackendKind {
        BackendKind::Simulator
    }

    /// Host functions run from the device's queue, in stream order.
    fn host_funcs_block_caller(&self) -> bool {
        false
    }

    fn instance_id(&self) -> u32 {
        self.id
    }

    fn driver_version(&self) -> Result<i32> {
        Ok(SIM_DRIVER_VERSION)
    }

    fn device_count(&self) -> Result<u32> {
        Ok(self.devices())
    }

    fn device_name(&self, dev: Device) -> Result<String> {
        self.device(dev, "cuDeviceGetName")?;
        Ok(SIM_DEVICE_NAME.into())
    }

    fn device_uuid(&self, dev: Device) -> Result<[u8; 16]> {
        Ok(sim_device_uuid(self.device(dev, "cuDeviceGetUuid")?))
    }

    fn device_pci_bus_id(&self, dev: Device) -> Result<String> {
        Ok(sim_pci_bus_id(self.device(dev, "cuDeviceGetPCIBusId")?))
    }

    fn device_attribute(&self, dev: Device, attr: DeviceAttribute) -> Result<i32> {
        let d = self.device(dev, "cuDeviceGetAttribute")?;
        if attr == DeviceAttribute::PciBusId {
            return Ok(sim_pci_bus(d) as i32);
        }
        match attribute(attr) {
            Some(v) => Ok(v),
            None => {
                let mut e = sim_err(
                    sys::CUDA_ERROR_INVALID_VALUE,
                    format!("cuDeviceGetAttribute({})", attr.code()),
                );
                e.detail = Some("cuda.h defines no such attribute".into());
                Err(e.into())
            }
        }
    }

    fn device_total_mem(&self, dev: Device) -> Result<u64> {
        self.device(dev, "cuDeviceTotalMem_v2")?;
        Ok(self.config.memory_limit)
    }

    fn primary_context_retain(&self, dev: Device) -> Result<Context> {
        let d = self.device(dev, "cuDevicePrimaryCtxRetain")?;
        let mut all = self.primaries();
        let p = all.entry(d).or_insert((None, 0));
        let id = match p.0 {
            Some(id) => id,
            None => {
                let id = self.make_context(d)?.id;
                p.0 = Some(id);
                id
            }
        };
        p.1 += 1;
        Ok(Context::from_raw(self.id, id.into()))
    }

    fn primary_context_release(&self, ctx: Context) -> Result<()> {
        vmgpu_cuda_api::check_owner(ctx.owner(), self.id, "cuDevicePrimaryCtxRelease")?;
        let mut all = self.primaries();
        let Some(p) = all
            .values_mut()
            .find(|p| p.0.map(u64::from) == Some(ctx.raw()) && p.1 > 0)
        else {
            return Err(DriverError::InvalidArgument {
                operation: "cuDevicePrimaryCtxRelease",
                reason: "no reference on this context is held through this backend (released \
                         more often than retained?)"
                    .into(),
            });
        };
        p.1 -= 1;
        if p.1 == 0 {
            // As in CUDA, the last release resets the primary context: everything made
            // in it is freed, and the next retain starts afresh.
            let primary = p.0;
            drop(all);
            if let Some(c) = primary.and_then(|id| self.contexts().get(&id).cloned()) {
                c.reset()?;
            }
        }
        Ok(())
    }

    unsafe fn primary_context_reset(&self, dev: Device) -> Result<()> {
        let d = self.device(dev, "cuDevicePrimaryCtxReset_v2")?;
        let primary = self.primaries().get(&d).and_then(|p| p.0);
        match primary.and_then(|id| self.contexts().get(&id).cloned()) {
            Some(c) => c.reset(),
            None => Ok(()),
        }
    }

    fn context_create(&self, dev: Device) -> Result<Context> {
        let d = self.device(dev, "cuCtxCreate_v3")?;
        let c = self.make_context(d)?;
        SIM_CURRENT.with(|cur| cur.set(c.id));
        Ok(Context::from_raw(self.id, c.id.into()))
    }

    unsafe fn context_destroy(&self, ctx: Context) -> Result<()> {
        let c = self.context(&ctx, "cuCtxDestroy_v2")?;
        let primary = self.primaries().values().any(|p| p.0 == Some(c.id));
        if primary {
            return Err(DriverError::InvalidArgument {
                operation: "cuCtxDestroy_v2",
                reason: "the primary context is released, not destroyed".into(),
            });
        }
        self.contexts().remove(&c.id);
        SIM_CURRENT.with(|cur| {
            if cur.get() == c.id {
                cur.set(0);
            }
        });
        // Everything made in it goes with it (its device thread ends once queued work
        // is done, at the last reference).
        drop(c);
        Ok(())
    }

    fn context_set_current(&self, ctx: &Context) -> Result<()> {
        let c = self.context(ctx, "cuCtxSetCurrent")?;
        SIM_CURRENT.with(|cur| cur.set(c.id));
        Ok(())
    }

    in_current_context! {
        fn context_synchronize() -> Result<()>;
        fn mem_get_info() -> Result<MemInfo>;
        fn module_load_ptx(ptx: &str) -> Result<Module>;
        fn module_load_ptx_named(name: &str, ptx: &str) -> Result<Module>;
        unsafe fn module_unload(module: Module) -> Result<()>;
        fn module_get_function(module: &Module, name: &str) -> Result<Function>;
        fn mem_alloc(bytes: usize) -> Result<DevicePtr>;
        fn mem_free(ptr: DevicePtr) -> Result<()>;
        unsafe fn memset_d8_async(dst: DevicePtr, value: u8, bytes: usize, stream: &Stream) -> Result<()>;
        unsafe fn memset_d16_async(dst: DevicePtr, value: u16, count: usize, stream: &Stream) -> Result<()>;
        unsafe fn memset_d32_async(dst: DevicePtr, value: u32, count: usize, stream: &Stream) -> Result<()>;
        unsafe fn memcpy_htod_async(dst: DevicePtr, src: *const u8, bytes: usize, stream: &Stream) -> Result<()>;
        unsafe fn memcpy_dtoh_async(dst: *mut u8, src: DevicePtr, bytes: usize, stream: &Stream) -> Result<()>;
        unsafe fn memcpy_dtod_async(dst: DevicePtr, src: DevicePtr, bytes: usize, stream: &Stream) -> Result<()>;
        fn host_alloc(bytes: usize, flags: HostAllocFlags) -> Result<HostAlloc>;
        unsafe fn host_free(mem: HostAlloc) -> Result<()>;
        unsafe fn host_register(ptr: *mut u8, bytes: usize, flags: HostRegisterFlags) -> Result<()>;
        unsafe fn host_unregister(ptr: *mut u8) -> Result<()>;
        fn host_device_pointer(host: *mut u8) -> Result<DevicePtr>;
        fn mem_alloc_managed(bytes: usize) -> Result<DevicePtr>;
        fn stream_create(flags: StreamFlags) -> Result<Stream>;
        fn stream_synchronize(stream: &Stream) -> Result<()>;
        fn stream_query(stream: &Stream) -> Result<bool>;
        fn stream_wait_event(stream: &Stream, event: &Event) -> Result<()>;
        fn stream_destroy(stream: Stream) -> Result<()>;
        fn stream_host_func(stream: &Stream, f: vmgpu_cuda_api::HostFunc) -> Result<()>;
        fn event_create(flags: EventFlags) -> Result<Event>;
        fn event_record(event: &Event, stream: &Stream) -> Result<()>;
        fn event_synchronize(event: &Event) -> Result<()>;
        fn event_query(event: &Event) -> Result<bool>;
        fn event_elapsed_ms(start: &Event, end: &Event) -> Result<f32>;
        fn event_destroy(event: Event) -> Result<()>;
        fn function_params(function: &Function) -> Result<Option<Vec<vmgpu_cuda_api::ParamLayout>>>;
        fn function_attribute(function: &Function, attribute: FunctionAttribute) -> Result<i32>;
        fn function_set_attribute(function: &Function, attribute: FunctionAttribute, value: i32) -> Result<()>;
        fn module_get_global(module: &Module, name: &str) -> Result<(DevicePtr, usize)>;
        unsafe fn launch_kind(kind: LaunchKind, function: &Function, config: &LaunchConfig, stream: &Stream, args: &[&[u8]]) -> Result<()>;
    }

    fn module_host_bytes(&self, module: &Module) -> Option<u64> {
        self.current("module_host_bytes")
            .ok()?
            .module_host_bytes(module)
    }
}
