//! A PTX simulator: runs kernels on the CPU with the results a GPU gives, and checks
//! what a GPU does not (every global access against the live allocations, freed and
//! foreign pointers, misaligned accesses, barriers not reached by every live thread,
//! runaway launches).
//!
//! A module is decoded once ([`Simulator::load_module`]) into a register-bank form with
//! resolved labels and reconvergence points, then launched any number of times. A warp
//! executes one decoded instruction for its 32 lanes at a time over a lane mask, with a
//! SIMT stack that reconverges at immediate post-dominators. Blocks run in parallel on
//! [`SimConfig::threads`] host threads (1 gives a deterministic order).
//!
//! # Semantics
//!
//! - Grids and blocks in 3D, warps of 32, `bar.sync`/`barrier.sync` (a warp arriving
//!   with only part of its live lanes is a [`SimError::BarrierDivergence`]; exited
//!   threads do not count), static and dynamic (`extern .shared`) shared memory,
//!   `.local` memory, `.func` calls (inlined at decode time, `.param` arguments and
//!   return values in per-thread local memory; at most 16 deep and 65,536 calls
//!   inlined into one kernel).
//! - Recursion: a function that a call reaches again from its own body (directly, through
//!   other functions or through a function pointer) is called out of line. Its body's
//!   code follows the kernel's; each call gets a frame on the thread's stack of
//!   [`STACK_SIZE`] bytes (its `.param` and `.local` variables, so a pointer to a
//!   caller's local stays valid in the callee), saves the registers the body uses and
//!   gives them back at its return. Lanes of a warp may recurse to different depths (a
//!   call is a SIMT frame like a branch's). A call past the stack stops the launch with
//!   [`SimError::StackOverflow`] (`CUDA_ERROR_LAUNCH_FAILED`).
//! - Function pointers and virtual calls: a `.func`'s address (`mov.u64 %rd, f;`, a
//!   vtable's initialiser) is a code address in a window of its own, unique to the
//!   module, that no load or store can reach. An indirect call (`call %rd, (args),
//!   proto;`) becomes a chain of inlined candidates: every function of the module whose
//!   address is taken and whose parameters and results have the prototype's sizes, each
//!   run by the lanes whose pointer is its address. A lane whose pointer names none of
//!   them (null, a data or host pointer, another module's function) stops the launch
//!   with [`SimError::BadCall`] (`CUDA_ERROR_INVALID_PC`).
//! - Textures and surfaces through objects: `tex.{1d,2d,3d,a1d,a2d,cube,acube}.v4` (f32, s32 or u32
//!   results; float or integer coordinates) and `suld.b`/`sust.b` (1-D, 2-D, 3-D;
//!   `.trap`, `.clamp`, `.zero`). An object handle is the device address of a
//!   descriptor `libcuda.so.1` writes there ([`vmgpu_cuda_api::texture`]), read as
//!   global memory; sampling is CUDA's: point or bilinear/trilinear in 1/256 steps, wrap
//!   and mirror on normalized coordinates, clamp, border, 8/16-bit texels as
//!   normalized floats, `tex1Dfetch` reading 0 outside, a cubemap's direction choosing
//!   its face as CUDA's table does. A handle that names no object,
//!   or a trapping surface access outside, stops the launch ([`SimError::Texture`],
//!   `CUDA_ERROR_ILLEGAL_ADDRESS`); texels of freed memory fault as a load would.
//! - Global memory: tagged 64-bit addresses never reused, so null, freed and foreign
//!   pointers fault; every access is checked against the live allocations and its
//!   alignment; a fault names kernel, block, thread, PTX line, address, size and the
//!   nearest allocation ([`MemoryFault`]). After a fault or timeout the simulator stays
//!   failed ([`SimError::Sticky`]) until [`Simulator::reset`].
//! - Generic addressing: shared and local memory appear in generic windows reached
//!   through `cvta`; other generic addresses are global.
//! - Atomics on global memory are host atomics (32-bit words) or striped locks
//!   (64-bit), so they stay atomic across host threads; `membar`/`fence` are SeqCst
//!   fences.
//! - Floating point: IEEE results with the GPU's canonical NaN; `.ftz` flushes
//!   subnormals; directed roundings (`.rz/.rm/.rp`) are exact for f32 add/sub/mul/fma,
//!   f64 add/sub/mul, and every `cvt`; `approx` instructions are computed in f64 and
//!   rounded once (within the PTX ISA bounds, see `tests/sim_props.rs`).
//! - Device memory: [`Simulator::bytes_in_use`] counts `malloc`s and module variables
//!   against [`SimConfig::memory_limit`]; an allocation the host cannot provide is a
//!   [`SimError::OutOfMemory`], not an abort. Host and device-to-device copies and
//!   memsets move whole words (a device-to-device copy between overlapping ranges of one
//!   allocation behaves as `memmove`).
//!
//! # Execution speed
//!
//! Lane functions are chosen per instruction at decode time and run over all 32 lanes
//! (branch-free loops that vectorise); a full warp reading or writing 32 consecutive
//! words of global memory is checked against its allocation once and copied as a
//! slice; shared accesses recognise consecutive and broadcast patterns; shifts by
//! immediates are uniform; straight-line code runs without touching the SIMT stack.
//! `cargo bench -p cuda-guest --bench sim` compares with plain Rust loops;
//! `--bench sim_profile` drives one kernel for `perf`/`callgrind`.
//!
//! # Instruction coverage
//!
//! Implemented: `add sub mul(.lo/.hi/.wide) mad(.lo/.hi/.wide) mul24 sad div rem abs neg
//! min max` on 8/16/32/64-bit integers; `add.cc addc sub.cc subc mad.cc madc` (`.lo/.hi`,
//! carry in and out); `and or xor not cnot shl shr lop3 popc clz brev bfind(.shiftamt) bfe
//! bfi shf`, `prmt` (default mode); `add sub mul div
//! fma mad min max abs neg sqrt rcp rsqrt copysign testp` on f32/f64 (f16: add sub mul
//! fma min max neg abs setp; cvt to/from f16 and bf16); `ex2 lg2 sin cos tanh rcp.approx sqrt.approx rsqrt.approx
//! div.approx div.full`; `setp` (all comparisons, `.and/.or/.xor` combination, two
//! destinations) and `set`; `selp`; `mov` (including vector pack/unpack and special
//! registers); `cvt` between every integer and float type with every rounding mode
//! and `.sat`; `cvta`; `ld st ldu` (`.global .shared .local .const .param`, generic,
//! `.v2/.v4`, volatile/cache qualifiers ignored); `atom red` (add min max inc dec exch
//! cas and or xor; u32 s32 u64 s64 f32 f64); `bra ret exit call`; a kernel parameter's address (`mov` of a parameter, used by
//! `ld.param` and, through `cvta.param`, generic loads; read-only); `trap` (the launch
//! fails: [`SimError::Trap`]); device `printf` (`vprintf`, formatted as C does, written
//! to [`SimConfig::output`] when the launch ends) and `assert` (`__assertfail`:
//! [`SimError::Assert`], the GPU's line to stderr); `bar.sync
//! barrier.sync bar.red(popc and or) bar.warp.sync membar fence`; `shfl.sync` (up down bfly idx, with the
//! predicate output; every source lane is read before any destination is written);
//! `vote.sync` (all any uni ballot); `redux.sync` (add min max and or xor); `match.sync`
//! (any all, `.b32/.b64`, with the predicate output); `dp4a dp2a`;
//! `activemask`; `%tid %ntid %ctaid %nctaid %laneid
//! %warpid %nwarpid %smid %nsmid %lanemask_* %clock %clock64 %globaltimer
//! %dynamic_smem_size %total_smem_size`; the constant `WARP_SZ`.
//!
//! Not implemented (a load error names the line): texture and surface references
//! (`.texref`/`.surfref`), multisample geometries, `tld4`, `txq`, `suq`,
//! formatted surface stores, mipmap levels, `brx.idx`,
//! `prmt` modes, f16x2/bf16 arithmetic (bf16 conversions are implemented), `mma`/`wmma`,
//! `bar.arrive`, clusters.
//!
//! Refused at load as too deep or too large (an error naming the line): nesting beyond
//! [`ptx::MAX_NESTING`] (see [the front end's limits](crate::ptx#limits)), calls
//! beyond the limits above, kernels over 2^20 decoded instructions, 2^20 labels or
//! 2^16 registers after inlining, or whose decoding, every inlined body counted each
//! time, would handle over about 4 million statements or 64 MiB of names (so that no
//! module within the 16 MiB quota takes minutes or gigabytes to decode). Decoding walks nested blocks without recursion and recurses only
//! into inlined calls, so a module within these limits loads on a 2 MiB thread stack
//! in a debug build (with room to spare: under 0.75 MiB at every limit at once).
//!
//! ```
//! use vmgpu_cuda_sim::{KernelArg, LaunchConfig, SimConfig, Simulator};
//! let ptx = r#"
//! .version 7.0
//! .target sm_80
//! .address_size 64
//! .visible .entry scale(.param .u64 p, .param .f32 k, .param .u32 n)
//! {
//!     .reg .pred %p<2>; .reg .b32 %r<6>; .reg .f32 %f<3>; .reg .b64 %rd<5>;
//!     ld.param.u64 %rd1, [p];
//!     ld.param.f32 %f1, [k];
//!     ld.param.u32 %r1, [n];
//!     mov.u32 %r2, %ctaid.x;
//!     mov.u32 %r3, %ntid.x;
//!     mov.u32 %r4, %tid.x;
//!     mad.lo.s32 %r5, %r2, %r3, %r4;
//!     setp.ge.u32 %p1, %r5, %r1;
//!     @%p1 bra DONE;
//!     cvta.to.global.u64 %rd2, %rd1;
//!     mul.wide.u32 %rd3, %r5, 4;
//!     add.s64 %rd4, %rd2, %rd3;
//!     ld.global.f32 %f2, [%rd4];
//!     mul.f32 %f2, %f2, %f1;
//!     st.global.f32 [%rd4], %f2;
//! DONE:
//!     ret;
//! }
//! "#;
//! let mut sim = Simulator::new(SimConfig::default());
//! let module = sim.load_module("scale.ptx", ptx).unwrap();
//! assert_eq!(module.kernel("scale").unwrap().params().len(), 3);
//! let n = 1000u32;
//! let buf = sim.malloc(4 * n as u64).unwrap();
//! let host: Vec<f32> = (0..n).map(|i| i as f32).collect();
//! sim.memcpy_htod(buf, bytemuck_f32(&host)).unwrap();
//! let cfg = LaunchConfig { grid: [(n + 127) / 128, 1, 1], block: [128, 1, 1], shared_bytes: 0 };
//! sim.launch(&module, "scale", cfg, &[KernelArg::Ptr(buf), KernelArg::F32(2.0), KernelArg::U32(n)]).unwrap();
//! let mut out = vec![0u8; 4 * n as usize];
//! sim.memcpy_dtoh(&mut out, buf).unwrap();
//! assert_eq!(f32::from_le_bytes(out[4 * 999..].try_into().unwrap()), 1998.0);
//! # fn bytemuck_f32(v: &[f32]) -> &[u8] { Box::leak(v.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>().into_boxed_slice()) }
//! ```

pub mod backend;
pub mod bench;
mod cdp;
mod decode;
mod exec;
mod jit;
mod memory;
mod ops;
mod printf;
mod texture;
mod wmma;

pub use backend::SimBackend;
pub use decode::STACK_SIZE;

/// The most registers per thread a kernel reports: 64, what fits a block of 1024
/// threads in a multiprocessor's 65,536, as ptxas allocates for
/// `__launch_bounds__(1024)`. The simulator launches every block size up to 1024 for
/// every kernel, and its register slots are PTX's virtual registers (often hundreds,
/// where ptxas would allocate a few dozen), so a higher count would make occupancy
/// calculators (`cuOccupancyMaxActiveBlocksPerMultiprocessor`, which programs size
/// cooperative grids with) answer zero blocks for launches that run.
pub const MAX_REGISTERS: u32 = 64;

/// `env_logger` directives that keep the JIT's code generator quiet at `info`
/// (Cranelift logs every function it defines, IR included, at info level). Binaries
/// append them to their default filter: `format!("info,{}", sim::QUIET_DEPENDENCIES)`.
pub const QUIET_DEPENDENCIES: &str =
    "cranelift_jit=warn,cranelift_codegen=warn,cranelift_frontend=warn";
pub use vmgpu_cuda_api::{
    DevicePtr, FaultKind, LaunchConfig, LaunchKind, Location, MemoryFault, NearestAlloc,
};
/// The PTX front end the simulator decodes from.
pub use vmgpu_ptx as ptx;

use crate::ptx::{ParseError, ScalarType, Space};
use decode::{ModuleCtx, Program};
use memory::Memory;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Simulator settings.
#[derive(Debug, Clone)]
pub struct SimConfig {
    /// Host threads running blocks in parallel; 1 runs blocks in order (deterministic:
    /// the first fault is always the same). By default every core, or
    /// `VMGPU_SIM_THREADS` ([`SimConfig::default_threads`]).
    pub threads: usize,
    /// Most warp instructions one launch may execute (0: unlimited).
    pub instruction_budget: u64,
    /// Most wall time one launch may take.
    pub time_limit: Option<Duration>,
    /// Largest total of device allocations, in bytes.
    pub memory_limit: u64,
    /// Where device `printf` output and failed-assertion lines go (the process's
    /// stdout and stderr by default), written when a launch ends.
    pub output: Output,
    /// How many devices [`SimBackend`] simulates (1 to [`backend::SIM_MAX_DEVICES`]), each with
    /// [`SimConfig::memory_limit`] of memory of its own.
    pub devices: u32,
    /// The engine that runs kernels ([`Engine::Jit`] unless `VMGPU_SIM_ENGINE` says
    /// otherwise: [`Engine::from_env`]).
    pub engine: Engine,
}

/// What runs a kernel's instructions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Engine {
    /// Kernels the JIT takes run as native code it compiled for them (once per
    /// kernel, at its first launch); the others are interpreted. Results, faults and
    /// their reports are the interpreter's.
    Jit,
    /// Every kernel is interpreted (the reference the JIT is tested against).
    Interpreter,
}

impl Engine {
    /// The environment variable that sets the default engine: `jit` or `interpreter`.
    pub const ENV: &'static str = "VMGPU_SIM_ENGINE";

    /// `VMGPU_SIM_ENGINE`'s engine, [`Engine::Jit`] when it is unset; another value is
    /// logged and ignored.
    pub fn from_env() -> Engine {
        match std::env::var(Self::ENV) {
            Ok(v) => match v.trim() {
                "jit" => Engine::Jit,
                "interpreter" | "interp" => Engine::Interpreter,
                other => {
                    log::warn!(
                        "{}={other:?} is not an engine (jit, interpreter): using the JIT",
                        Self::ENV
                    );
                    Engine::Jit
                }
            },
            Err(_) => Engine::Jit,
        }
    }

    /// Its name, as `VMGPU_SIM_ENGINE` spells it.
    pub fn name(self) -> &'static str {
        match self {
            Engine::Jit => "jit",
            Engine::Interpreter => "interpreter",
        }
    }
}

/// The stream a kernel's text goes to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OutputStream {
    /// Device `printf`.
    Stdout,
    /// A failed device-side assertion's line.
    Stderr,
}

/// What receives a kernel's text: the stream and the bytes.
pub type OutputFn = dyn Fn(OutputStream, &[u8]) + Send + Sync;

/// Where a kernel's text goes: a function of the stream and the bytes, called once
/// per launch and stream that printed anything (in the order the threads printed).
#[derive(Clone)]
pub struct Output(pub Arc<OutputFn>);

impl Output {
    /// The process's stdout and stderr (through Rust's handles, flushed at once).
    pub fn process() -> Output {
        Output(Arc::new(|stream, bytes| {
            use std::io::Write;
            // Nowhere to report a closed stdout to; the kernel's result stands.
            let _ = match stream {
                OutputStream::Stdout => {
                    let mut o = std::io::stdout().lock();
                    o.write_all(bytes).and_then(|()| o.flush())
                }
                OutputStream::Stderr => std::io::stderr().lock().write_all(bytes),
            };
        }))
    }
}

impl Default for Output {
    fn default() -> Self {
        Output::process()
    }
}

impl std::fmt::Debug for Output {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Output(..)")
    }
}

impl SimConfig {
    /// The environment variable that sets [`SimConfig::default_threads`].
    pub const THREADS_ENV: &'static str = "VMGPU_SIM_THREADS";

    /// The host threads a simulator uses unless told otherwise: `VMGPU_SIM_THREADS`
    /// when it is a whole number from 1 up, else every core the process may use
    /// (`std::thread::available_parallelism`, 1 if that cannot be known). A value that
    /// is not such a number is logged and ignored.
    pub fn default_threads() -> usize {
        let cores = || std::thread::available_parallelism().map_or(1, |n| n.get());
        match std::env::var(Self::THREADS_ENV) {
            Ok(v) => match v.trim().parse::<usize>() {
                Ok(n) if n >= 1 => n,
                _ => {
                    log::warn!(
                        "{}={v:?} is not a number of threads (1 or more): using {} (every core)",
                        Self::THREADS_ENV,
                        cores()
                    );
                    cores()
                }
            },
            Err(_) => cores(),
        }
    }

    /// The default settings on one host thread: blocks run in order, so a run is
    /// repeatable to the fault (what a test comparing reports needs).
    pub fn deterministic() -> SimConfig {
        SimConfig {
            threads: 1,
            ..SimConfig::default()
        }
    }
}

impl Default for SimConfig {
    fn default() -> Self {
        SimConfig {
            threads: SimConfig::default_threads(),
            instruction_budget: 0,
            time_limit: Some(Duration::from_secs(60)),
            memory_limit: 16 << 30,
            output: Output::default(),
            devices: 1,
            engine: Engine::from_env(),
        }
    }
}

/// Stops a simulator's work from another thread (a guest that is gone, a VMM tearing a
/// device down): the running launch ends at its next budget check (every few thousand
/// warp instructions, where the time limit is checked) and every later launch fails at
/// once, both with [`SimError::Timeout`] whose reason is `cancelled` (a sticky
/// `CUDA_ERROR_LAUNCH_TIMEOUT` to a driver-API caller). Cancelling cannot be undone.
/// Cheap to clone; one token may serve several simulators.
#[derive(Debug, Clone, Default)]
pub struct CancelToken(Arc<AtomicBool>);

impl CancelToken {
    /// A token not yet cancelled.
    pub fn new() -> CancelToken {
        CancelToken::default()
    }
    /// Cancels: see the type's documentation.
    pub fn cancel(&self) {
        self.0.store(true, Ordering::Relaxed);
    }
    /// Whether [`CancelToken::cancel`] was called.
    pub fn is_cancelled(&self) -> bool {
        self.0.load(Ordering::Relaxed)
    }
    pub(crate) fn flag(&self) -> &AtomicBool {
        &self.0
    }
}

/// A kernel argument, checked against the kernel's parameter list.
#[derive(Debug, Clone, PartialEq)]
pub enum KernelArg {
    /// A device pointer (for a `.u64`/`.b64`/`.s64` parameter).
    Ptr(DevicePtr),
    /// 8-bit integer.
    U8(u8),
    /// 16-bit integer.
    U16(u16),
    /// 32-bit unsigned integer.
    U32(u32),
    /// 32-bit signed integer.
    I32(i32),
    /// 64-bit unsigned integer.
    U64(u64),
    /// 64-bit signed integer.
    I64(i64),
    /// 32-bit float.
    F32(f32),
    /// 64-bit float.
    F64(f64),
    /// Raw bytes (a by-value struct; must match the parameter's size exactly).
    Bytes(Vec<u8>),
}

impl KernelArg {
    fn bytes(&self) -> (Vec<u8>, &'static str) {
        match self {
            KernelArg::Ptr(p) => (p.0.to_le_bytes().to_vec(), "pointer"),
            KernelArg::U8(v) => (vec![*v], "8-bit integer"),
            KernelArg::U16(v) => (v.to_le_bytes().to_vec(), "16-bit integer"),
            KernelArg::U32(v) => (v.to_le_bytes().to_vec(), "32-bit integer"),
            KernelArg::I32(v) => (v.to_le_bytes().to_vec(), "32-bit integer"),
            KernelArg::U64(v) => (v.to_le_bytes().to_vec(), "64-bit integer"),
            KernelArg::I64(v) => (v.to_le_bytes().to_vec(), "64-bit integer"),
            KernelArg::F32(v) => (v.to_le_bytes().to_vec(), "f32"),
            KernelArg::F64(v) => (v.to_le_bytes().to_vec(), "f64"),
            KernelArg::Bytes(b) => (b.clone(), "bytes"),
        }
    }
}

/// What a launch did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LaunchReport {
    /// Warp instructions executed.
    pub warp_instructions: u64,
    /// Blocks run.
    pub blocks: u64,
    /// Wall time of the launch.
    pub elapsed: Duration,
    /// The engine that ran it: [`Engine::Jit`] when the JIT compiled the kernel.
    pub engine: Engine,
    /// Threads the engine runs together: a warp's 32 lanes on the interpreter; on
    /// the JIT, 4 when it runs the kernel four threads at a time, else 1.
    pub lanes: u32,
}

/// Simulator errors.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum SimError {
    /// The PTX text does not parse.
    #[error(transparent)]
    Parse(#[from] ParseError),
    /// The PTX parses but uses something the simulator cannot execute.
    #[error("{module}:{line}: {message}")]
    Unsupported {
        /// Module name.
        module: String,
        /// PTX line.
        line: u32,
        /// What.
        message: String,
    },
    /// No kernel of that name in the module.
    #[error("no kernel `{kernel}` in module {module}")]
    UnknownKernel {
        /// Module name.
        module: String,
        /// Kernel asked for.
        kernel: String,
    },
    /// Launch arguments do not match the parameter list.
    #[error("kernel {kernel}: argument {index}: {message}")]
    BadArgument {
        /// Kernel.
        kernel: String,
        /// Argument index.
        index: usize,
        /// What is wrong.
        message: String,
    },
    /// Bad launch geometry or shared memory size.
    #[error("kernel {kernel}: invalid launch: {message}")]
    InvalidLaunch {
        /// Kernel.
        kernel: String,
        /// What is wrong.
        message: String,
    },
    /// A memory fault during a launch.
    #[error("{0}")]
    MemoryFault(Box<MemoryFault>),
    /// A barrier that not every live thread of the block reached.
    #[error("barrier divergence: {at}: {message}")]
    BarrierDivergence {
        /// Where (one of the threads that did reach it).
        at: Location,
        /// Details.
        message: String,
    },
    /// The launch ran past its instruction budget or time limit, or was cancelled
    /// ([`CancelToken`]).
    #[error("kernel {kernel}: timeout after {warp_instructions} warp instructions and {elapsed:?} ({reason}), last at PTX line {line}")]
    Timeout {
        /// Kernel.
        kernel: String,
        /// Warp instructions executed.
        warp_instructions: u64,
        /// Wall time.
        elapsed: Duration,
        /// `instruction budget`, `time limit` or `cancelled`.
        reason: &'static str,
        /// A PTX line being executed when stopped.
        line: u32,
    },
    /// A host-side memory operation on a bad pointer or range.
    #[error("invalid device pointer {ptr} for {len} bytes: {message}")]
    InvalidPointer {
        /// The pointer.
        ptr: DevicePtr,
        /// Bytes asked for.
        len: u64,
        /// Why.
        message: String,
    },
    /// A thread executed `trap` (or `brkpt`): the launch stops, as on a GPU, with an
    /// unspecified launch failure.
    #[error("kernel trapped: {at}")]
    Trap {
        /// The first thread that trapped.
        at: Location,
    },
    /// A thread called through a function pointer that names no function the call can
    /// run (null, a data or host pointer, another module's function, or one whose
    /// parameters differ from the prototype's): the launch stops with an invalid program
    /// counter, as on a GPU.
    #[error("call through function pointer {address:#x}, which names no function of this module that the call can run (null, not a function, another module's, or parameters unlike the prototype's): {at}")]
    BadCall {
        /// The first thread that called through it.
        at: Location,
        /// The pointer it called through.
        address: u64,
    },
    /// A call that would grow a thread's stack past the [`STACK_SIZE`] bytes it has (deep
    /// or endless recursion): the launch stops, as a GPU's does on a stack overflow, with
    /// an unspecified launch failure.
    #[error("stack overflow: the call of {function} at depth {depth} would take the thread past its {limit} bytes of stack: {at}")]
    StackOverflow {
        /// The thread that made the call.
        at: Location,
        /// The function called.
        function: String,
        /// Calls in progress with this one.
        depth: u32,
        /// Bytes of stack a thread has.
        limit: u32,
    },
    /// A texture or surface instruction whose object handle names no object of its
    /// kind, or a `.trap` surface access outside the surface: the launch stops, as a
    /// GPU's does, with an illegal address.
    #[error("{message}: {at}")]
    Texture {
        /// The first thread that made the access.
        at: Location,
        /// The handle it used.
        handle: u64,
        /// What was wrong.
        message: String,
    },
    /// A device-side `assert` failed (`__assertfail`): the launch stops; its text is the
    /// line a GPU prints.
    #[error("{0}")]
    Assert(Box<Assertion>),
    /// The memory limit would be exceeded.
    #[error("out of device memory: {requested} bytes requested, {in_use} in use, limit {limit}")]
    OutOfMemory {
        /// Requested bytes.
        requested: u64,
        /// In use.
        in_use: u64,
        /// The limit.
        limit: u64,
    },
    /// An earlier launch failed; the simulator refuses work until [`Simulator::reset`].
    #[error("simulator is in a failed state after an earlier error (reset it): {0}")]
    Sticky(Box<SimError>),
}

/// A failed device-side assertion: where, and what the source said.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{file}:{line}: {function}: block: [{},{},{}], thread: [{},{},{}] Assertion `{message}` failed. ({at})",
    at.block[0], at.block[1], at.block[2], at.thread[0], at.thread[1], at.thread[2])]
pub struct Assertion {
    /// The first thread whose assertion failed.
    pub at: Location,
    /// The asserted expression, as the source wrote it.
    pub message: String,
    /// The source file.
    pub file: String,
    /// The source line.
    pub line: u32,
    /// The function.
    pub function: String,
}

/// A kernel of a loaded module.
#[derive(Debug)]
pub struct Kernel {
    prog: Program,
}

impl Kernel {
    /// Kernel name.
    pub fn name(&self) -> &str {
        &self.prog.name
    }
    /// Whether [`Engine::Jit`] runs this kernel as compiled code (compiling it now if
    /// no launch has yet): `Ok(())`, or why the interpreter runs it.
    pub fn jit(&self) -> Result<(), String> {
        exec::jit_kernel(&self.prog)
            .map(drop)
            .map_err(str::to_string)
    }
    /// Parameter list (names, types, sizes, alignments, offsets).
    pub fn params(&self) -> &[ptx::Param] {
        &self.prog.params
    }
    /// Static shared memory in bytes.
    pub fn shared_bytes(&self) -> u32 {
        self.prog.shared_static
    }
    /// Local memory per thread in bytes.
    pub fn local_bytes(&self) -> u32 {
        self.prog.local_size
    }
    /// Registers per thread (`CU_FUNC_ATTRIBUTE_NUM_REGS`): the decoded kernel's
    /// register slots (with `.func` calls inlined), at most [`MAX_REGISTERS`] and at
    /// most its `.maxnreg` (as ptxas spills to meet it).
    pub fn registers(&self) -> u32 {
        self.prog
            .nregs
            .min(MAX_REGISTERS)
            .min(self.prog.max_regs.unwrap_or(u32::MAX))
    }
    /// Decoded instruction count (with `.func` calls inlined).
    pub fn instruction_count(&self) -> usize {
        self.prog.insts.len()
    }
}

impl Program {
    /// Heap bytes of the decoded kernel (see [`Module::host_bytes`]).
    fn host_bytes(&self) -> usize {
        use std::mem::size_of;
        let insts = |v: &Vec<decode::Inst>| {
            v.capacity() * size_of::<decode::Inst>()
                + v.iter()
                    .map(|i| match &i.op {
                        decode::Op::Pack { parts, .. } | decode::Op::Unpack { parts, .. } => {
                            parts.capacity() * size_of::<decode::R>()
                        }
                        _ => 0,
                    })
                    .sum::<usize>()
        };
        self.name.capacity()
            + self.params.capacity() * size_of::<ptx::Param>()
            + self.params.iter().map(|p| p.name.capacity()).sum::<usize>()
            + insts(&self.insts)
            + insts(&self.prologue)
            + self.ipdom.capacity() * size_of::<u32>()
            + self.consts.capacity() * size_of::<(decode::R, u64)>()
            // The lane-affine tags' tables: per instruction, the registers it touches;
            // the registers the body never writes.
            + self.touch.capacity() * size_of::<Box<[(decode::R, bool)]>>()
            + self
                .touch
                .iter()
                .map(|t| t.len() * size_of::<(decode::R, bool)>())
                .sum::<usize>()
            + self.fixed.capacity() * size_of::<decode::R>()
    }
}

/// A decoded module: decode once, launch many times.
#[derive(Debug)]
pub struct Module {
    name: String,
    kernels: HashMap<String, Kernel>,
    /// Module-scope `.global`/`.const` variables: name to (pointer, bytes, `.const`).
    globals: HashMap<String, (DevicePtr, u64, bool)>,
    /// Their bytes together (device memory the module holds).
    global_bytes: u64,
    /// The virtual architecture of its `.target` (`sm_80` is 80; 0 when none is named).
    arch: u32,
    sim_tag: u64,
    /// Kernel names by their addresses (device code launching kernels names them so).
    entries: HashMap<u64, String>,
}

impl Module {
    /// Module name.
    pub fn name(&self) -> &str {
        &self.name
    }
    /// A kernel by name.
    pub fn kernel(&self, name: &str) -> Option<&Kernel> {
        self.kernels.get(name)
    }
    /// The kernel `name`, or the error a launch of a kernel the module lacks is.
    fn launchable(&self, name: &str) -> Result<&Kernel, SimError> {
        self.kernel(name).ok_or_else(|| SimError::UnknownKernel {
            module: self.name.clone(),
            kernel: name.into(),
        })
    }
    /// Kernel names, sorted.
    pub fn kernel_names(&self) -> Vec<&str> {
        let mut v: Vec<&str> = self.kernels.keys().map(|s| s.as_str()).collect();
        v.sort();
        v
    }
    /// Device address of a module-scope `.global`/`.const` variable.
    pub fn global(&self, name: &str) -> Option<DevicePtr> {
        self.globals.get(name).map(|v| v.0)
    }
    /// Address and size in bytes of a module-scope `.global`/`.const` variable
    /// (`cuModuleGetGlobal`).
    pub fn variable(&self, name: &str) -> Option<(DevicePtr, u64)> {
        self.globals.get(name).map(|v| (v.0, v.1))
    }
    /// Every `.global`/`.const` variable: name, address and size in bytes.
    pub fn variables(&self) -> impl Iterator<Item = (&str, DevicePtr, u64)> + '_ {
        self.globals
            .iter()
            .map(|(n, (p, size, _))| (n.as_str(), *p, *size))
    }
    /// Bytes of the module's `.const` variables (`CU_FUNC_ATTRIBUTE_CONST_SIZE_BYTES`).
    pub fn const_bytes(&self) -> u64 {
        self.globals.values().filter(|v| v.2).map(|v| v.1).sum()
    }
    /// The virtual architecture its `.target` names, major * 10 + minor (`sm_80` is 80,
    /// `sm_90a` 90; 0 when it names none): `CU_FUNC_ATTRIBUTE_PTX_VERSION`.
    pub fn arch(&self) -> u32 {
        self.arch
    }
    /// Host memory the decoded module holds, in bytes (its kernels' instructions,
    /// tables and names; an estimate from their lengths, within a few percent).
    pub fn host_bytes(&self) -> u64 {
        use std::mem::size_of;
        let mut n = size_of::<Module>() + self.name.capacity();
        n += self.globals.capacity() * (size_of::<(String, (DevicePtr, u64, bool))>() + 8);
        n += self.globals.keys().map(String::capacity).sum::<usize>();
        n += self.kernels.capacity() * (size_of::<(String, Kernel)>() + 8);
        for (name, k) in &self.kernels {
            n += name.capacity() + k.prog.host_bytes();
        }
        n as u64
    }
    /// Device memory the module's `.global`/`.const` variables hold, in bytes (counted
    /// against [`SimConfig::memory_limit`] until [`Simulator::unload_module`]).
    pub fn global_bytes(&self) -> u64 {
        self.global_bytes
    }
}

/// The simulator: device memory, loaded modules and the launch engine.
#[derive(Debug)]
pub struct Simulator {
    config: SimConfig,
    mem: Memory,
    failed: Option<SimError>,
    cancel: CancelToken,
}

impl Simulator {
    /// A simulator with `config`.
    pub fn new(config: SimConfig) -> Simulator {
        Simulator::with_cancel(config, CancelToken::new())
    }

    /// A simulator with `config` whose launches `cancel` stops.
    pub fn with_cancel(config: SimConfig, cancel: CancelToken) -> Simulator {
        Simulator {
            config,
            mem: Memory::new(),
            failed: None,
            cancel,
        }
    }

    /// The token that cancels this simulator's launches.
    pub fn cancel_token(&self) -> &CancelToken {
        &self.cancel
    }

    /// The configuration.
    pub fn config(&self) -> &SimConfig {
        &self.config
    }

    /// Changes the configuration (threads, budget, limits).
    pub fn set_config(&mut self, config: SimConfig) {
        self.config = config;
    }

    fn check_sticky(&self) -> Result<(), SimError> {
        match &self.failed {
            Some(e) => Err(SimError::Sticky(Box::new(e.clone()))),
            None => Ok(()),
        }
    }

    /// The error that put the simulator in its failed state, if any.
    pub fn failure(&self) -> Option<&SimError> {
        self.failed.as_ref()
    }

    /// Clears a failed state (like destroying and re-creating a CUDA context, but
    /// keeping memory and modules).
    pub fn reset(&mut self) {
        self.failed = None;
    }

    /// Parses and decodes a module.
    pub fn load_module(&mut self, name: &str, ptx_text: &str) -> Result<Arc<Module>, SimError> {
        self.check_sticky()?;
        let m = ptx::linked::parse_any(name, ptx_text)?;
        let mut placed = Vec::new();
        let r = self.place_module(name, &m, &mut placed);
        if r.is_err() {
            // Nothing of a module that failed to load stays allocated.
            for base in placed {
                let _ = self.mem.free(base);
            }
        }
        r
    }

    /// Allocates and initialises the module's variables (their bases go to `placed` as
    /// they are made) and decodes its kernels.
    fn place_module(
        &mut self,
        name: &str,
        m: &ptx::Module,
        placed: &mut Vec<u64>,
    ) -> Result<Arc<Module>, SimError> {
        let mut globals = HashMap::new();
        let mut shared = HashMap::new();
        let mut shared_size = 0u64;
        let mut extern_shared = vec![];
        let mut allocs = vec![];
        for v in &m.variables {
            match v.space {
                Space::Global | Space::Const => {
                    if globals.contains_key(&v.name) {
                        // As ptxas: a second definition is an error (it would hold memory
                        // that unloading the module, which frees each name, never frees).
                        return Err(SimError::Unsupported {
                            module: name.into(),
                            line: v.line,
                            message: format!("duplicate definition of variable {}", v.name),
                        });
                    }
                    if v.is_extern {
                        return Err(SimError::Unsupported {
                            module: name.into(),
                            line: v.line,
                            message: format!(
                                "extern variable {} is not defined in this module",
                                v.name
                            ),
                        });
                    }
                    let size = v.size();
                    if self.mem.bytes_live.saturating_add(size) > self.config.memory_limit {
                        return Err(SimError::OutOfMemory {
                            requested: size,
                            in_use: self.mem.bytes_live,
                            limit: self.config.memory_limit,
                        });
                    }
                    let oom = |mem: &memory::Memory| SimError::OutOfMemory {
                        requested: size,
                        in_use: mem.bytes_live,
                        limit: self.config.memory_limit,
                    };
                    let a = if v.managed && v.space == Space::Global {
                        // `.attribute(.managed)` (`__managed__`): managed memory, host
                        // memory at its own address as `malloc_managed`'s, so the
                        // address `cuModuleGetGlobal` gives is the host's too.
                        let words = memory::Words::zeroed_host(size.max(1))
                            .ok_or_else(|| oom(&self.mem))?;
                        let base = words.host_address().ok_or_else(|| oom(&self.mem))?;
                        self.mem
                            .map_host(base, size.max(1), words, false, Some(v.name.clone()))
                            .ok_or_else(|| oom(&self.mem))?
                    } else {
                        self.mem
                            .alloc(size.max(1), Some(v.name.clone()), v.space == Space::Const)
                            .ok_or_else(|| oom(&self.mem))?
                    };
                    placed.push(a.base);
                    globals.insert(v.name.clone(), a.base);
                    allocs.push((v, a));
                }
                Space::Shared => {
                    if v.is_extern || v.array.contains(&0) {
                        extern_shared.push((v.name.clone(), v.alignment()));
                    } else {
                        let al = v.alignment().max(1) as u64;
                        shared_size = shared_size.checked_next_multiple_of(al).unwrap_or(u64::MAX);
                        shared.insert(v.name.clone(), shared_size);
                        shared_size = shared_size.saturating_add(v.size());
                    }
                }
                _ => {
                    return Err(SimError::Unsupported {
                        module: name.into(),
                        line: v.line,
                        message: "module-scope variable in this state space".into(),
                    })
                }
            }
        }
        // Function addresses, for initialisers (vtables) and the decoder.
        let (bodies, funcs, taken) = ModuleCtx::functions(m, decode::next_module_tag());
        let addr_of = |s: &str| globals.get(s).or_else(|| funcs.get(s)).copied();
        // Initialisers (after all addresses are known, for `generic(sym)`).
        for (v, a) in &allocs {
            let es = v.ty.size() as u64;
            for (i, init) in v.init.iter().enumerate() {
                let val = match init {
                    ptx::Operand::Int(x) => *x as u64,
                    ptx::Operand::F32(b) if es == 8 => (f32::from_bits(*b) as f64).to_bits(),
                    ptx::Operand::F32(b) => *b as u64,
                    ptx::Operand::F64(b) if es == 4 => (f64::from_bits(*b) as f32).to_bits() as u64,
                    ptx::Operand::F64(b) => *b,
                    ptx::Operand::Name(s) => addr_of(s).unwrap_or(0),
                    ptx::Operand::NameOffset(s, o) => {
                        addr_of(s).unwrap_or(0).wrapping_add(*o as u64)
                    }
                    _ => 0,
                };
                let off = i as u64 * es;
                if off + es <= a.size {
                    a.write_bytes(off, &val.to_le_bytes()[..es as usize]);
                }
            }
        }
        let ctx = ModuleCtx {
            bodies,
            funcs,
            taken,
            globals: globals.clone(),
            shared,
            shared_size,
            extern_shared,
        };
        let entries = m
            .entries()
            .filter_map(|f| Some((*ctx.funcs.get(f.name.as_str())?, f.name.clone())))
            .collect();
        let mut kernels = HashMap::new();
        for f in m.entries() {
            let prog = decode::decode_kernel(&ctx, f).map_err(|e| SimError::Unsupported {
                module: name.into(),
                line: e.line,
                message: e.message,
            })?;
            kernels.insert(f.name.clone(), Kernel { prog });
        }
        let global_bytes = allocs.iter().map(|(_, a)| a.size).sum();
        Ok(Arc::new(Module {
            name: name.into(),
            global_bytes,
            kernels,
            globals: allocs
                .iter()
                .map(|(v, a)| {
                    (
                        v.name.clone(),
                        (DevicePtr(a.base), v.size(), v.space == Space::Const),
                    )
                })
                .collect(),
            arch: m
                .target
                .iter()
                .find_map(|t| {
                    let digits: String = t
                        .strip_prefix("sm_")?
                        .chars()
                        .take_while(char::is_ascii_digit)
                        .collect();
                    digits.parse().ok()
                })
                .unwrap_or(0),
            sim_tag: self.mem.tag,
            entries,
        }))
    }

    /// Frees the module's `.global`/`.const` variables (as `cuModuleUnload` does). A
    /// launch that still reaches them afterwards faults (use after free); launching the
    /// module's kernels is refused only by the caller's bookkeeping, so drop it too.
    pub fn unload_module(&mut self, module: &Module) -> Result<(), SimError> {
        if module.sim_tag != self.mem.tag {
            return Err(SimError::InvalidLaunch {
                kernel: String::new(),
                message: format!("module {} was loaded by another simulator", module.name),
            });
        }
        for (name, (ptr, _, _)) in &module.globals {
            if self.mem.free(ptr.0).is_err() {
                return Err(SimError::InvalidPointer {
                    ptr: *ptr,
                    len: 0,
                    message: format!("variable {name} of module {} is not live", module.name),
                });
            }
        }
        Ok(())
    }

    /// Bytes held by live allocations: device `malloc`s and the module-scope
    /// `.global`/`.const` variables of every loaded module (until it is unloaded). This is what [`SimConfig::memory_limit`] is checked against.
    pub fn bytes_allocated(&self) -> u64 {
        self.mem.bytes_live
    }

    /// The same as [`Simulator::bytes_allocated`]: device memory in use, module
    /// variables included.
    pub fn bytes_in_use(&self) -> u64 {
        self.mem.bytes_live
    }

    /// Allocates device memory (zero-filled).
    pub fn malloc(&mut self, bytes: u64) -> Result<DevicePtr, SimError> {
        self.check_sticky()?;
        if self.mem.bytes_live.saturating_add(bytes) > self.config.memory_limit {
            return Err(SimError::OutOfMemory {
                requested: bytes,
                in_use: self.mem.bytes_live,
                limit: self.config.memory_limit,
            });
        }
        let a = self
            .mem
            .alloc(bytes, None, false)
            .ok_or(SimError::OutOfMemory {
                requested: bytes,
                in_use: self.mem.bytes_live,
                limit: self.config.memory_limit,
            })?;
        Ok(DevicePtr(a.base))
    }

    /// Allocates managed memory (zero-filled): host memory the device reaches at the
    /// same address, so the returned pointer is both the device's and the host's.
    pub fn malloc_managed(&mut self, bytes: u64) -> Result<DevicePtr, SimError> {
        self.check_sticky()?;
        let oom = |mem: &memory::Memory| SimError::OutOfMemory {
            requested: bytes,
            in_use: mem.bytes_live,
            limit: self.config.memory_limit,
        };
        if self.mem.bytes_live.saturating_add(bytes) > self.config.memory_limit {
            return Err(oom(&self.mem));
        }
        let words = memory::Words::zeroed_host(bytes).ok_or_else(|| oom(&self.mem))?;
        let base = words.host_address().ok_or_else(|| oom(&self.mem))?;
        let a = self
            .mem
            .map_host(base, bytes, words, false, None)
            .ok_or_else(|| oom(&self.mem))?;
        Ok(DevicePtr(a.base))
    }

    /// Maps the program's host memory `ptr..ptr+len` for the device at its own address
    /// (page-locked memory under unified addressing); the device pointer is `ptr`.
    ///
    /// # Safety
    /// The range stays valid, readable and writable host memory until
    /// [`Simulator::unmap_host`] and no kernel touching it runs after that.
    pub unsafe fn map_host(&mut self, ptr: u64, len: u64) -> Result<DevicePtr, SimError> {
        let base = ptr & !3;
        let size = len + (ptr & 3);
        let refused = |message: &str| SimError::InvalidPointer {
            ptr: DevicePtr(ptr),
            len,
            message: message.into(),
        };
        // SAFETY: forwarded from the caller.
        let words = unsafe { memory::Words::program_host(base, size) }
            .ok_or_else(|| refused("not a host range"))?;
        self.mem
            .map_host(base, size, words, true, None)
            .ok_or_else(|| refused("overlaps device memory or another mapped range"))?;
        Ok(DevicePtr(ptr))
    }

    /// Whether `addr` lies in host memory mapped by [`Simulator::map_host`].
    pub fn host_mapped(&self, addr: u64) -> bool {
        self.mem.find(addr, 1).is_some_and(|(a, _)| a.host_mapped)
    }

    /// Unmaps host memory mapped by [`Simulator::map_host`] at `ptr`.
    pub fn unmap_host(&mut self, ptr: u64) -> Result<(), SimError> {
        self.mem
            .free(ptr & !3)
            .map_err(|_| SimError::InvalidPointer {
                ptr: DevicePtr(ptr),
                len: 0,
                message: "not mapped host memory".into(),
            })
    }

    /// Frees an allocation.
    pub fn free(&mut self, ptr: DevicePtr) -> Result<(), SimError> {
        self.check_sticky()?;
        self.mem.free(ptr.0).map_err(|f| SimError::InvalidPointer {
            ptr,
            len: 0,
            message: match f {
                Some(f) => format!("allocation #{} was already freed", f.id),
                None => "not the start of an allocation".into(),
            },
        })
    }

    fn range(&self, ptr: DevicePtr, len: u64) -> Result<(Arc<memory::Alloc>, u64), SimError> {
        match self.mem.find(ptr.0, len) {
            Some((a, off)) => Ok((a.clone(), off)),
            None => {
                let message = if self
                    .mem
                    .freed
                    .iter()
                    .any(|f| ptr.0 >= f.base && ptr.0 < f.base + f.size.max(1))
                {
                    "inside a freed allocation".to_string()
                } else if self.mem.find(ptr.0, 0).is_some() {
                    "range runs past the end of its allocation".to_string()
                } else {
                    "not inside any allocation".to_string()
                };
                Err(SimError::InvalidPointer { ptr, len, message })
            }
        }
    }

    /// Copies host bytes to the device.
    pub fn memcpy_htod(&mut self, dst: DevicePtr, src: &[u8]) -> Result<(), SimError> {
        self.check_sticky()?;
        let (a, off) = self.range(dst, src.len() as u64)?;
        a.write_bytes(off, src);
        Ok(())
    }

    /// Copies device bytes to the host.
    pub fn memcpy_dtoh(&mut self, dst: &mut [u8], src: DevicePtr) -> Result<(), SimError> {
        self.check_sticky()?;
        let (a, off) = self.range(src, dst.len() as u64)?;
        a.read_bytes(off, dst);
        Ok(())
    }

    /// Copies between device buffers.
    pub fn memcpy_dtod(
        &mut self,
        dst: DevicePtr,
        src: DevicePtr,
        bytes: u64,
    ) -> Result<(), SimError> {
        self.check_sticky()?;
        let (sa, so) = self.range(src, bytes)?;
        let (da, doff) = self.range(dst, bytes)?;
        da.copy_from(doff, &sa, so, bytes);
        Ok(())
    }

    /// Sets `count` bytes to `value`.
    pub fn memset_d8(&mut self, dst: DevicePtr, value: u8, count: u64) -> Result<(), SimError> {
        self.check_sticky()?;
        let (a, off) = self.range(dst, count)?;
        a.fill(off, count, value);
        Ok(())
    }

    /// Sets `count` 32-bit words to `value` (`dst` 4-byte aligned).
    pub fn memset_d32(&mut self, dst: DevicePtr, value: u32, count: u64) -> Result<(), SimError> {
        self.check_sticky()?;
        if !dst.0.is_multiple_of(4) {
            return Err(SimError::InvalidPointer {
                ptr: dst,
                len: count * 4,
                message: "not 4-byte aligned".into(),
            });
        }
        let (a, off) = self.range(dst, count.saturating_mul(4))?;
        a.fill32(off, count, value);
        Ok(())
    }

    /// Launches `kernel` of `module` and waits for it. A fault or timeout puts the
    /// simulator in a failed state (see [`Simulator::reset`]).
    pub fn launch(
        &mut self,
        module: &Module,
        kernel: &str,
        cfg: LaunchConfig,
        args: &[KernelArg],
    ) -> Result<LaunchReport, SimError> {
        let params = self.prepare_launch(module, kernel, cfg, args)?;
        let r = self.run_prepared(module, kernel, cfg, &params, LaunchKind::Plain);
        if let Err(e) = &r {
            self.launch_failed(e);
        }
        r
    }

    /// The checks of a launch and what it needs made first (the device heap): the
    /// kernel's parameter buffer, for [`Simulator::run_prepared`].
    pub fn prepare_launch(
        &mut self,
        module: &Module,
        kernel: &str,
        cfg: LaunchConfig,
        args: &[KernelArg],
    ) -> Result<Vec<u8>, SimError> {
        let params = self.check_launch(module, kernel, cfg, args)?;
        self.setup_launch(module, kernel)?;
        Ok(params)
    }

    /// Whether a launch of `kernel` needs [`Simulator::setup_launch`] first (the device
    /// heap a kernel that calls `malloc` uses, made at the first such launch).
    pub fn launch_needs_setup(&self, module: &Module, kernel: &str) -> bool {
        module
            .kernel(kernel)
            .is_some_and(|k| k.prog.uses_heap && self.mem.heap.is_none())
    }

    /// Makes what a launch of `kernel` needs (the device heap).
    pub fn setup_launch(&mut self, module: &Module, kernel: &str) -> Result<(), SimError> {
        if !self.launch_needs_setup(module, kernel) {
            return Ok(());
        }
        self.setup_cooperative()
    }

    /// Makes what a cooperative launch needs (the device heap, its workspace comes
    /// from), if it is not made yet.
    pub fn setup_cooperative(&mut self) -> Result<(), SimError> {
        if self.mem.heap.is_some() {
            return Ok(());
        }
        // The device heap, from device memory (as a GPU reserves it at the first launch
        // that needs it).
        let a = self
            .mem
            .alloc(memory::HEAP_SIZE, Some("device malloc heap".into()), false)
            .ok_or(SimError::OutOfMemory {
                requested: memory::HEAP_SIZE,
                in_use: self.mem.bytes_live,
                limit: self.config.memory_limit,
            })?;
        self.mem.heap = Some(Arc::new(memory::DeviceHeap::new(a.base, memory::HEAP_SIZE)));
        Ok(())
    }

    /// The checks of a launch (the sticky state, the kernel, its arguments and
    /// geometry): the kernel's parameter buffer.
    pub fn check_launch(
        &self,
        module: &Module,
        kernel: &str,
        cfg: LaunchConfig,
        args: &[KernelArg],
    ) -> Result<Vec<u8>, SimError> {
        self.check_sticky()?;
        let k = module.launchable(kernel)?;
        if module.sim_tag != self.mem.tag {
            return Err(SimError::InvalidLaunch {
                kernel: kernel.into(),
                message: "module was loaded by another simulator".into(),
            });
        }
        let params = build_params(&k.prog, args)?;
        let threads: u64 = cfg.block.iter().map(|&x| x as u64).product();
        let blocks: u64 = cfg.grid.iter().map(|&x| x as u64).product();
        if threads == 0
            || threads > 1024
            || blocks == 0
            || cfg.block[2] > 64
            || cfg.grid[1] > 65535
            || cfg.grid[2] > 65535
        {
            return Err(SimError::InvalidLaunch {
                kernel: kernel.into(),
                message: format!("grid {:?} block {:?} (1..=1024 threads per block, block z <= 64, grid y,z <= 65535)", cfg.grid, cfg.block),
            });
        }
        let total_shared = k.prog.shared_static as u64 + cfg.shared_bytes as u64;
        if total_shared > 228 * 1024 {
            return Err(SimError::InvalidLaunch {
                kernel: kernel.into(),
                message: format!("{total_shared} bytes of shared memory (limit 228 KiB)"),
            });
        }
        Ok(params)
    }

    /// Runs a launch [`Simulator::prepare_launch`] checked, through a shared reference:
    /// launches of several streams run at once (device memory is shared between
    /// threads, as between a launch's own worker threads). A failure is the caller's
    /// to record with [`Simulator::launch_failed`]. A cooperative launch
    /// (`cuLaunchCooperativeKernel`) runs every block at once, with a grid workspace for
    /// cooperative groups' `grid.sync()` from the device heap
    /// ([`Simulator::setup_cooperative`] makes it); the caller keeps the grid within what
    /// the device holds at once.
    pub fn run_prepared(
        &self,
        module: &Module,
        kernel: &str,
        cfg: LaunchConfig,
        params: &[u8],
        kind: LaunchKind,
    ) -> Result<LaunchReport, SimError> {
        let k = module.launchable(kernel)?;
        if self.cancel.is_cancelled() {
            return Err(SimError::Timeout {
                kernel: kernel.into(),
                warp_instructions: 0,
                elapsed: Duration::ZERO,
                reason: "cancelled",
                line: 0,
            });
        }
        let start = Instant::now();
        // A cooperative grid's workspace: 16 zeroed bytes of the device heap.
        let workspace = match (kind == LaunchKind::Cooperative, &self.mem.heap) {
            (false, _) => 0,
            (true, Some(h)) => {
                let p = h.alloc(16);
                if let Some((a, off)) = self.mem.find(p, 16) {
                    a.fill(off, 16, 0);
                }
                p
            }
            (true, None) => {
                return Err(SimError::InvalidLaunch {
                    kernel: kernel.into(),
                    message: "a cooperative launch without its setup (setup_cooperative)".into(),
                })
            }
        };
        let mut children = vec![];
        let r = exec::launch(
            &k.prog,
            &self.mem,
            &self.config,
            self.cancel.flag(),
            cfg,
            params,
            module,
            0,
            workspace,
            &mut children,
        );
        if let (Some(h), true) = (&self.mem.heap, workspace != 0) {
            h.free(workspace);
        }
        let mut report = r?;
        if !children.is_empty() {
            self.run_children(module, children, 1, &mut report)?;
            report.elapsed = start.elapsed();
        }
        Ok(report)
    }

    /// Runs what a grid launched from device code (see `cdp.rs`), in order, each
    /// child's own children right after it; `depth` is their nesting (1: launched by a
    /// grid the host launched).
    fn run_children(
        &self,
        module: &Module,
        children: Vec<cdp::Child>,
        depth: u32,
        report: &mut LaunchReport,
    ) -> Result<(), SimError> {
        for c in children {
            match c {
                cdp::Child::Copy { dst, src, bytes } => {
                    let bad = |ptr: u64, what: &str| SimError::InvalidPointer {
                        ptr: DevicePtr(ptr),
                        len: bytes,
                        message: format!("the {what} of a cudaMemcpyAsync in device code"),
                    };
                    let (s, so) = self
                        .mem
                        .find(src, bytes)
                        .ok_or_else(|| bad(src, "source"))?;
                    let (d, doff) = self
                        .mem
                        .find(dst, bytes)
                        .ok_or_else(|| bad(dst, "destination"))?;
                    d.copy_from(doff, s, so, bytes);
                }
                cdp::Child::Launch {
                    kernel,
                    cfg,
                    params,
                    size,
                } => {
                    let mut buf = vec![0u8; size as usize];
                    if let Some((a, off)) = self.mem.find(params, size as u64) {
                        a.read_bytes(off, &mut buf);
                    }
                    if let Some(h) = &self.mem.heap {
                        h.free(params);
                    }
                    let k = module.launchable(&kernel)?;
                    let mut grand = vec![];
                    let r = exec::launch(
                        &k.prog,
                        &self.mem,
                        &self.config,
                        self.cancel.flag(),
                        cfg,
                        &buf,
                        module,
                        depth,
                        0,
                        &mut grand,
                    )?;
                    report.warp_instructions += r.warp_instructions;
                    report.blocks += r.blocks;
                    self.run_children(module, grand, depth + 1, report)?;
                }
            }
        }
        Ok(())
    }

    /// Puts the simulator in its failed state after a launch's fault (the first one
    /// stays).
    pub fn launch_failed(&mut self, e: &SimError) {
        if self.failed.is_none() {
            self.failed = Some(e.clone());
        }
    }
}

fn build_params(prog: &Program, args: &[KernelArg]) -> Result<Vec<u8>, SimError> {
    let kernel = &prog.name;
    if args.len() != prog.params.len() {
        return Err(SimError::BadArgument {
            kernel: kernel.clone(),
            index: args.len().min(prog.params.len()),
            message: format!(
                "kernel takes {} arguments, {} given",
                prog.params.len(),
                args.len()
            ),
        });
    }
    let mut buf = vec![0u8; prog.param_size as usize];
    for (i, (p, a)) in prog.params.iter().zip(args).enumerate() {
        let (bytes, what) = a.bytes();
        let ok = match (a, p.ty) {
            (KernelArg::Bytes(_), _) => true,
            (KernelArg::Ptr(_), ScalarType::U64 | ScalarType::B64 | ScalarType::S64) => {
                p.array.is_none()
            }
            (KernelArg::Ptr(_), _) => false,
            (KernelArg::F32(_), t) => {
                t == ScalarType::F32 || (t == ScalarType::B32 && p.array.is_none())
            }
            (KernelArg::F64(_), t) => {
                t == ScalarType::F64 || (t == ScalarType::B64 && p.array.is_none())
            }
            (_, ScalarType::F32 | ScalarType::F64) => false,
            _ => p.array.is_none(),
        };
        if !ok || bytes.len() != p.size as usize {
            return Err(SimError::BadArgument {
                kernel: kernel.clone(),
                index: i,
                message: format!(
                    "parameter {} is .{}{} ({} bytes), got {} ({} bytes)",
                    p.name,
                    p.ty.name(),
                    p.array.map(|n| format!("[{n}]")).unwrap_or_default(),
                    p.size,
                    what,
                    bytes.len()
                ),
            });
        }
        buf[p.offset as usize..p.offset as usize + bytes.len()].copy_from_slice(&bytes);
    }
    Ok(buf)
}
