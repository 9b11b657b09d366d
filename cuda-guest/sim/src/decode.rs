//! Decoding a parsed module once into the executable form: typed register banks
//! (64-bit lanes and predicate lane masks), constants in read-only registers, special
//! registers as registers filled at warp start, `.func` calls inlined with their
//! `.param` passing mapped to per-thread local memory, resolved branch targets and the
//! immediate post-dominator of every branch computed on the real control-flow graph.

use super::ops::{self, BinFn, CmpFn, CvtTy, Rnd, TerFn, UnFn};
use crate::ptx::{self, Function, Instruction, Operand, ScalarType, Space, Statement};
use std::collections::HashMap;

/// Register index (64-bit bank).
pub(crate) type R = u32;
/// Predicate register index (lane-mask bank).
pub(crate) type P = u32;

/// Generic-address window of shared memory.
pub(crate) const SHARED_WINDOW: u64 = 0x0001_0000_0000_0000;
/// Generic-address window of local memory.
pub(crate) const LOCAL_WINDOW: u64 = 0x0002_0000_0000_0000;
/// Generic-address window of the kernel's parameters (read-only): the address of a
/// kernel parameter (`mov.u64 %rd, k_param_0`) is `PARAM_WINDOW` plus its offset, usable
/// by `ld.param` and, as `cvta.param` leaves it, by generic loads.
pub(crate) const PARAM_WINDOW: u64 = 0x0003_0000_0000_0000;
/// Size of each window.
pub(crate) const WINDOW_SIZE: u64 = 1 << 32;
/// Where function addresses lie (`mov.u64 %rd, fname;`, a vtable's entries): the
/// module's tag in bits 32..47 and the function's number times 16 below (see
/// [`func_address`]). No allocation or window lies there, so a load or store through a
/// function pointer faults; only an indirect call uses one.
pub(crate) const FUNC_WINDOW: u64 = 0x0004_0000_0000_0000;

/// Tags of loaded modules, so that a function pointer of one module names no function
/// of another.
static NEXT_MODULE: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

/// A new module's tag for [`func_address`].
pub(crate) fn next_module_tag() -> u64 {
    NEXT_MODULE.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

/// The address of the `index`th function with a body of the module tagged `module`.
pub(crate) fn func_address(module: u64, index: usize) -> u64 {
    FUNC_WINDOW | ((module & 0xffff) << 32) | (((index as u64 + 1) & 0x0fff_ffff) << 4)
}

/// Special registers held in the first registers of the bank.
pub(crate) const SPECIALS: &[&str] = &[
    "%tid.x",
    "%tid.y",
    "%tid.z",
    "%ntid.x",
    "%ntid.y",
    "%ntid.z",
    "%ctaid.x",
    "%ctaid.y",
    "%ctaid.z",
    "%nctaid.x",
    "%nctaid.y",
    "%nctaid.z",
    "%laneid",
    "%warpid",
    "%nwarpid",
    "%smid",
    "%nsmid",
    "%lanemask_eq",
    "%lanemask_lt",
    "%lanemask_le",
    "%lanemask_gt",
    "%lanemask_ge",
    "%gridid",
    "%dynamic_smem_size",
    "%total_smem_size",
    "%tid",
    "%ntid",
    // Reserved shared memory (cooperative groups' scratch, PTX 7.6+): a region after
    // the kernel's static and dynamic shared memory, [`RESERVED_SMEM`] bytes.
    "%reserved_smem_offset_begin",
    "%reserved_smem_offset_end",
    "%reserved_smem_offset_cap",
    "%reserved_smem_offset_0",
    "%reserved_smem_offset_1",
    // The driver's environment registers cooperative groups read: the grid's workspace
    // address (high, low half) in a cooperative launch, 0 in any other (the rest of
    // %envreg0-31 are 0 in every launch).
    "%envreg1",
    "%envreg2",
];

/// The index in [`SPECIALS`] of `%reserved_smem_offset_begin`.
pub(crate) const RESERVED_SMEM_SPECIAL: usize = 27;
/// The index in [`SPECIALS`] of `%envreg1`.
pub(crate) const ENVREG1_SPECIAL: usize = 32;
/// The bytes of reserved shared memory a block gets when its kernel names it.
pub(crate) const RESERVED_SMEM: u32 = 1024;
pub(crate) const NSPECIAL: u32 = SPECIALS.len() as u32;

/// Memory state space of a load/store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Sp {
    Global,
    Shared,
    Local,
    Generic,
}

/// Atomic operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AtomOp {
    Add,
    Min,
    Max,
    Inc,
    Dec,
    Exch,
    Cas,
    And,
    Or,
    Xor,
}

/// Type class of an atomic.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AtomTy {
    U32,
    S32,
    U64,
    S64,
    F32,
    F64,
}

/// Boolean combination of predicates.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum BoolOp {
    And,
    Or,
    Xor,
}

/// `shfl` mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ShflMode {
    Up,
    Down,
    Bfly,
    Idx,
}

/// `vote` mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum VoteMode {
    All,
    Any,
    Uni,
    Ballot,
}

/// The reduction of `bar.red`: `mode` 0 popc (into register `d`), 1 and, 2 or (into
/// predicate `d`) of predicate `src` (negated with `neg`) over the block.
#[derive(Debug, Clone, Copy)]
pub(crate) struct BarRed {
    pub mode: u8,
    pub d: u32,
    pub src: P,
    pub neg: bool,
}

/// A decoded operation.
#[derive(Debug, Clone)]
pub(crate) enum Op {
    Bin(BinFn, R, R, R),
    Un(UnFn, R, R),
    Ter(TerFn, R, R, R, R),
    Bfi {
        w: u32,
        d: R,
        a: R,
        b: R,
        c: R,
        e: R,
    },
    Prmt(R, R, R, R),
    Lop3 {
        d: R,
        a: R,
        b: R,
        c: R,
        lut: u8,
    },
    /// `add.cc`/`addc`/`sub.cc`/`subc`: `sub`, carry in (`cin`), carry out (`cout`), width.
    Carry {
        d: R,
        a: R,
        b: R,
        sub: bool,
        cin: bool,
        cout: bool,
        w64: bool,
    },
    /// `mad{.lo,.hi}.cc`/`madc{.lo,.hi}[.cc]`: the low or high half of `a * b` (signed
    /// or not), plus `c`, plus the carry in (`cin`); carry out (`cout`), width.
    MadCarry {
        d: R,
        a: R,
        b: R,
        c: R,
        hi: bool,
        signed: bool,
        cin: bool,
        cout: bool,
        w64: bool,
    },
    Testp {
        d: P,
        a: R,
        class: u8,
        f64: bool,
    },
    Mov(R, R, u64),
    Pack {
        d: R,
        parts: Vec<R>,
        bits: u32,
    },
    Unpack {
        s: R,
        parts: Vec<R>,
        bits: u32,
    },
    Setp {
        f: CmpFn,
        d: P,
        dn: Option<P>,
        a: R,
        b: R,
        comb: Option<(BoolOp, P, bool)>,
    },
    Selp {
        d: R,
        a: R,
        b: R,
        p: P,
        neg: bool,
    },
    PredLogic {
        op: Option<BoolOp>,
        d: P,
        a: P,
        an: bool,
        b: P,
        bn: bool,
    },
    PredConst {
        d: P,
        v: bool,
    },
    Cvt {
        d: R,
        a: R,
        dt: CvtTy,
        st: CvtTy,
        rnd: Rnd,
        irnd: bool,
        sat: bool,
        ftz: bool,
    },
    Ld {
        sp: Sp,
        size: u8,
        sext: bool,
        n: u8,
        d: [R; 4],
        a: R,
        off: i64,
        dmask: u64,
    },
    St {
        sp: Sp,
        size: u8,
        n: u8,
        s: [R; 4],
        a: R,
        off: i64,
    },
    LdParam {
        d: [R; 4],
        n: u8,
        size: u8,
        sext: bool,
        off: u32,
        dmask: u64,
    },
    Atom {
        sp: Sp,
        op: AtomOp,
        ty: AtomTy,
        d: Option<R>,
        a: R,
        off: i64,
        b: R,
        c: R,
    },
    Bra {
        target: u32,
    },
    Bar {
        red: Option<BarRed>,
    },
    Exit,
    /// `trap`/`brkpt`: the launch fails.
    Trap,
    /// `call __assertfail, (message, file, line, function, char_size)`: the launch fails
    /// with the assertion's text.
    Assert {
        /// Message, file, line (32-bit), function.
        args: [ArgSrc; 4],
    },
    /// `call (ret), vprintf, (format, args)`: formats into the launch's output; `ret`
    /// gets the number of arguments, or -1 for a format the device cannot print.
    Printf {
        format: ArgSrc,
        args: ArgSrc,
        ret: Option<ArgSrc>,
    },
    /// `call (ret), malloc, (size)`: `size` bytes of the device heap, or null.
    Malloc {
        size: ArgSrc,
        ret: ArgSrc,
    },
    /// `call free, (ptr)`: back to the device heap.
    Free {
        ptr: ArgSrc,
    },
    /// `mbarrier.init [a+off], count`: a barrier object (8 bytes: pending arrivals in
    /// bits 0..31, expected ones in 32..62, the phase in 63).
    MbarInit {
        sp: Sp,
        a: R,
        off: i64,
        count: R,
    },
    /// `mbarrier.arrive[_drop] state, [a+off]{, count}` (and `cp.async.mbarrier.arrive
    /// .noinc`): each thread arrives `count` times; `d` gets the phase it arrived in.
    MbarArrive {
        sp: Sp,
        a: R,
        off: i64,
        count: Option<R>,
        d: Option<R>,
        drop: bool,
    },
    /// `mbarrier.{test,try}_wait[.parity] p, [a+off], state`: whether the phase of
    /// `state` (or the parity) is complete; a `try_wait` no lane of which completes
    /// lets the warp's siblings run (they are the ones to arrive).
    MbarWait {
        sp: Sp,
        a: R,
        off: i64,
        p: P,
        state: R,
        parity: bool,
    },
    Shfl {
        mode: ShflMode,
        d: R,
        p: Option<P>,
        a: R,
        b: R,
        c: R,
    },
    Vote {
        mode: VoteMode,
        d: u32,
        src: P,
        neg: bool,
        /// `membermask` of `vote.sync` (each lane votes with the lanes its mask names);
        /// `None` for the legacy `vote` (the active lanes).
        member: Option<R>,
    },
    Activemask(R),
    /// `redux.sync.op.type d, a, membermask`: op 0 add, 1 min, 2 max, 3 and, 4 or, 5 xor;
    /// each lane reduces over the active lanes its `membermask` names.
    Redux {
        d: R,
        a: R,
        op: u8,
        signed: bool,
        member: R,
    },
    /// `match.any.sync`/`match.all.sync` (`.b32`/`.b64`) `d[|p], a, membermask`: the
    /// lanes (active and in `membermask`) whose `a` equals this lane's (`any`), or all of
    /// them if every `a` is equal and else 0 (`all`, `p` saying which).
    Match {
        d: R,
        p: Option<P>,
        a: R,
        member: R,
        all: bool,
        w64: bool,
    },
    Clock {
        d: R,
        kind: u8,
    },
    /// The end of an indirect call's chain of candidates: a lane here called through a
    /// pointer (`a`) that names none of them, which faults.
    BadCall {
        a: R,
    },
    /// `tex.{1d,2d,3d,a1d,a2d}.v4.{f32,s32,u32}.{f32,s32}`: four results sampled from
    /// the texture object in `obj` at `coords` (`layer` first for an array geometry).
    Tex {
        d: [R; 4],
        obj: R,
        coords: [R; 3],
        layer: Option<R>,
        int_coords: bool,
        ret: crate::texture::Result4,
    },
    /// `suld.b.{1d,2d,3d,a1d,a2d}[.v2,.v4].b{8,16,32,64}` (`store` false) and `sust.b`
    /// (true): `n` elements of `size` bytes at byte column `coords[0]`, row and slice
    /// (or layer) of the surface object in `obj`.
    Surf {
        store: bool,
        v: [R; 4],
        n: u8,
        size: u8,
        obj: R,
        coords: [R; 3],
        ncoords: u8,
        bounds: crate::texture::Bounds,
    },
    /// `wmma.load`, `wmma.store` and `wmma.mma` (the warp's fragments, see `wmma.rs`).
    Wmma(Box<crate::wmma::Wmma>),
    /// Before a load with memory-ordering semantics (`.acquire`, `.volatile`,
    /// `.relaxed`) from global memory: in a cooperative launch, where every block has a
    /// host thread and blocks may spin on such loads waiting for each other
    /// (`grid.sync()`), the thread lets the others run.
    SpinHint,
    /// A call of CUDA's device runtime (dynamic parallelism, see `cdp.rs`): its
    /// arguments, and where its result goes (`ret_size` bytes).
    Cdp {
        call: crate::cdp::Call,
        args: Vec<ArgSrc>,
        ret: Option<ArgSrc>,
        ret_size: u8,
    },
    /// A call of a function run out of line (one that recursion reaches, see
    /// [`OutFn`]): `args` are copied into a new frame of `prog.funcs[func]` on the
    /// thread's stack, its registers saved, and the lanes run its body; its results go to
    /// `rets` at its [`Op::Return`].
    Call {
        func: u32,
        args: Box<[ArgSrc]>,
        rets: Box<[ArgSrc]>,
    },
    /// The end of an out-of-line function's body: its results copied to the caller's
    /// `rets`, the caller's registers and frame back.
    Return {
        func: u32,
    },
    Nop,
}

/// What the engine may compute from the lane-affine tags of its registers (each lane's
/// value `base + stride * lane`, known without reading the register rows), with the
/// same result as the operation itself; `None` for every other instruction.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) enum Aff {
    #[default]
    None,
    /// `d = a` modulo 2^bits (`mov`, `cvta` to or from generic).
    Mov { d: R, a: R, bits: u8 },
    /// `d = a + b` (or `a - b`) modulo 2^bits.
    Add {
        d: R,
        a: R,
        b: R,
        bits: u8,
        sub: bool,
    },
    /// `d = a * b (+ c)` modulo 2^bits (`mul.lo`, `mad.lo`).
    Mul {
        d: R,
        a: R,
        b: R,
        c: Option<R>,
        bits: u8,
    },
    /// `mul.wide`: the product of two `bits`-bit values (signed or not) in 2 * bits.
    MulWide {
        d: R,
        a: R,
        b: R,
        bits: u8,
        signed: bool,
    },
    /// `shl` by `b` (0 from the width on).
    Shl { d: R, a: R, b: R, bits: u8 },
    /// `shr` by `b` (clamped to the width; `signed`: arithmetic).
    Shr {
        d: R,
        a: R,
        b: R,
        bits: u8,
        signed: bool,
    },
    /// `setp` on integers: `code` 0..=5 (eq, ne, lt, le, gt, ge).
    Cmp { bits: u8, signed: bool, code: u8 },
    /// `ld`/`st`: the address register's (`a`) tag may give every lane's address.
    Mem { a: R },
}

/// What an arithmetic instruction computes, for an engine that compiles instructions
/// instead of calling their lane functions (the JIT, `jit/`): the integer operations
/// beyond [`Aff`]'s and float arithmetic and comparisons, each with the result its lane
/// function gives; `None` for the rest (such an engine calls the lane function).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) enum Sem {
    #[default]
    None,
    /// `and`, `or`, `xor`, `not`, `min`, `max`, `div`, `rem` on `bits`-bit integers.
    Int { op: IntOp, bits: u8, signed: bool },
    /// `add`, `sub`, `mul`, `div`, `fma` (`mad.f*`), round to nearest, no flush to
    /// zero: IEEE results, NaN made canonical.
    Flt { op: FltOp, f64: bool },
    /// `setp` on f32 or f64 with comparison code `code` (as `cmp_code`).
    FCmp { code: u8, f64: bool },
    /// `neg` (`neg`) or `abs` on f32 or f64: the sign bit flipped or cleared.
    FSign { neg: bool, f64: bool },
    /// One of the conversions `cvt_fast` has a lane function for (no saturation, no
    /// flush to zero; `rnd` is the float or the integer rounding).
    Cvt { dt: CvtTy, st: CvtTy, rnd: Rnd },
}

/// An integer operation of [`Sem::Int`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum IntOp {
    And,
    Or,
    Xor,
    Not,
    Min,
    Max,
    /// Division and remainder (by zero: all ones, and the dividend).
    Div,
    Rem,
}

/// A float operation of [`Sem::Flt`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum FltOp {
    Add,
    Sub,
    Mul,
    Div,
    Fma,
}

impl Op {
    /// An [`Op::Cvt`]'s conversion of one value (`None` for any other operation).
    pub fn cvt_one(&self, a: u64) -> Option<u64> {
        let Op::Cvt {
            dt,
            st,
            rnd,
            irnd,
            sat,
            ftz,
            ..
        } = self
        else {
            return None;
        };
        Some(ops::cvt_one(a, *st, *dt, *rnd, *irnd, *sat, *ftz))
    }
}

/// A decoded instruction.
#[derive(Debug, Clone)]
pub(crate) struct Inst {
    pub op: Op,
    pub guard: Option<(P, bool)>,
    pub line: u32,
    /// Its lane-affine form, if any.
    pub aff: Aff,
    /// What it computes, for a compiling engine ([`Sem`]).
    pub sem: Sem,
}

/// A function the kernel calls out of line, because a call reaches it again from its
/// own body (recursion, direct or through other functions), where inlining would never
/// end. Its body's code follows the kernel's; each activation has a frame on the
/// thread's stack (its `.param` and `.local` variables, `frame` bytes) and saves the
/// registers and predicates its body uses (`regs`, `preds`: those decoded for it).
#[derive(Debug, Clone)]
pub(crate) struct OutFn {
    pub name: String,
    pub entry: u32,
    /// The pc of its [`Op::Return`].
    pub ret: u32,
    pub frame: u32,
    pub regs: std::ops::Range<R>,
    pub preds: std::ops::Range<P>,
    /// Frame offset and size of each parameter, then of each result.
    pub params: Vec<(u32, u32)>,
    pub returns: Vec<(u32, u32)>,
}

/// Bytes of stack each thread has for out-of-line calls (a GPU's default is 1 KiB;
/// frames here hold only a function's `.param` and `.local` variables, never its
/// registers, so this is more than any program asks for with `cudaLimitStackSize`).
pub const STACK_SIZE: u32 = 16 * 1024;
/// The least stack an activation takes (a GPU's frame holds at least a return address),
/// so that the calls a thread can nest are bounded.
const MIN_FRAME: u64 = 16;

/// A kernel decoded for execution.
#[derive(Debug)]
pub(crate) struct Program {
    pub name: String,
    pub params: Vec<ptx::Param>,
    pub param_size: u32,
    pub insts: Vec<Inst>,
    /// Reconvergence point (immediate post-dominator) of each instruction; `EXIT_PC`
    /// when the branch only reconverges at the kernel's end.
    pub ipdom: Vec<u32>,
    pub nregs: u32,
    pub npreds: u32,
    pub consts: Vec<(R, u64)>,
    pub shared_static: u32,
    /// Bytes of local memory per thread: its `.local`/`.param` variables
    /// (`static_local`), then, if it calls functions out of line, [`STACK_SIZE`] of
    /// stack.
    pub local_size: u32,
    pub static_local: u32,
    /// The functions it calls out of line (recursion), by [`Op::Call`]'s index.
    pub funcs: Vec<OutFn>,
    /// The register holding the frame of the running out-of-line call (its base in
    /// local memory), the same in every lane.
    pub fp: R,
    /// Instructions hoisted out of the kernel: single-definition pure computations on
    /// launch- or warp-invariant values (parameters, constants, `%ntid`, `%tid`...),
    /// evaluated once per warp register file when a launch starts.
    pub prologue: Vec<Inst>,
    /// `.maxnreg`: the most registers per thread the kernel may be given.
    pub max_regs: Option<u32>,
    /// Per instruction, the registers it touches that may hold a lane-affine tag
    /// (see [`Aff`]); `true` for those it writes.
    pub touch: Vec<Box<[(R, bool)]>>,
    /// Registers no instruction of the body writes, set before it runs (special
    /// registers but `%ctaid`, constants, the prologue's results): their tags are
    /// read from their rows once per register file.
    pub fixed: Vec<R>,
    /// It calls `malloc` or `free` (the device heap is made before it runs).
    pub uses_heap: bool,
    /// It reads `%reserved_smem_offset_*`: each block gets [`RESERVED_SMEM`] more bytes
    /// of shared memory, after the static and dynamic ones.
    pub reserved_smem: bool,
    /// It has `bar.warp.sync` or loads or stores with a memory order (`.volatile`,
    /// `.relaxed`, `.acquire`, `.release`, `.mmio`): code that may wait for other
    /// threads or exchange values between the lanes of a warp without a block barrier,
    /// which only an engine running a warp's lanes together (the interpreter) runs as a
    /// GPU does.
    pub lockstep: bool,
    /// Its global atomics whose result nothing reads (reductions: `red`, or `atom` into
    /// a register never read) may be combined per host thread and applied when that
    /// thread's last block ends, or before the kernel touches that allocation: it has
    /// such atomics (integer add, and, or, xor, min, max) and nothing that could
    /// observe the order (no barrier, fence, memory order, call, global atomic with a
    /// result, texture or surface). See `exec::Reds`.
    pub combine_reds: bool,
    /// The kernel compiled by the JIT, made at its first launch, or why the JIT does
    /// not take it (see `jit::compile`).
    pub jit: std::sync::OnceLock<Result<crate::jit::Kernel, String>>,
}

/// Most registers a kernel may declare (with inlined calls).
const MAX_REGS: u64 = 1 << 16;
/// Most decoded instructions of a kernel (with inlined calls).
const MAX_INSTS: usize = 1 << 20;
/// Deepest chain of inlined `.func` calls (so also the recursion refused).
const MAX_CALL_DEPTH: u32 = 16;
/// Most calls inlined into one kernel: a call of an empty function adds no instruction,
/// so without this, functions each calling the next many times would take time and
/// label memory exponential in the chain's length while staying under [`MAX_INSTS`].
const MAX_INLINED_CALLS: u32 = 1 << 16;
/// [`weight`] of a statement besides the bytes of its names.
const STATEMENT_WEIGHT: u64 = 16;
/// Most [`weight`] decoded for one kernel, its own body and every inlined one: about 4
/// million statements, or 64 MiB of names copied or hashed. Labels and declarations
/// are not instructions, so without this a callee of many labels inlined many times
/// took minutes and gigabytes (a 7 KB module: 100 s and 5 GB in a debug build) within
/// [`MAX_INSTS`] and [`MAX_INLINED_CALLS`].
const MAX_WEIGHT: u64 = 64 << 20;

/// Reconvergence at the kernel's end.
pub(crate) const EXIT_PC: u32 = u32::MAX - 1;

/// A decode error: module line and message.
#[derive(Debug, Clone)]
pub(crate) struct DecodeError {
    pub line: u32,
    pub message: String,
}

type DResult<T> = Result<T, DecodeError>;

fn derr<T>(line: u32, msg: impl Into<String>) -> DResult<T> {
    Err(DecodeError {
        line,
        message: msg.into(),
    })
}

#[derive(Debug, Clone, Copy)]
enum Sym {
    Reg(R, u32),
    Pred(P),
    Shared(u64),
    Global(u64),
    Local(u64),
    /// A `.local` or `.param` variable of an out-of-line function: its offset in the
    /// running call's frame.
    Frame(u64),
    KParam(u32, u32),
    /// `extern .shared` (dynamic shared memory), placed after the static shared memory.
    DynShared,
    /// A `.func` with a body: its address.
    Func(u64),
}

/// Module-level facts the decoder needs.
pub(crate) struct ModuleCtx<'a> {
    /// Every function with a body, by name (the first definition of a name), so that a
    /// call finds its callee without a scan of the module's functions, with the
    /// [`weight`] of its body.
    pub bodies: HashMap<&'a str, (&'a Function, u64)>,
    /// Device address of every module-scope `.global`/`.const` variable.
    pub globals: HashMap<String, u64>,
    /// Offsets of module-scope `.shared` variables (shared by every kernel using them).
    pub shared: HashMap<String, u64>,
    pub shared_size: u64,
    pub extern_shared: Vec<(String, u32)>,
    /// The address of every `.func` with a body ([`func_address`]).
    pub funcs: HashMap<&'a str, u64>,
    /// The functions whose address is taken (named in a variable's initializer or an
    /// instruction's operand other than a direct call's callee), by address: an
    /// indirect call's candidates.
    pub taken: Vec<(u64, &'a Function, u64)>,
}

impl<'a> ModuleCtx<'a> {
    /// The function addresses of `module` (tagged `tag`) and the functions whose address
    /// is taken, with the bodies: the parts of a context about functions.
    #[allow(clippy::type_complexity)]
    pub fn functions(
        module: &'a ptx::Module,
        tag: u64,
    ) -> (
        HashMap<&'a str, (&'a Function, u64)>,
        HashMap<&'a str, u64>,
        Vec<(u64, &'a Function, u64)>,
    ) {
        let bodies = bodies(module);
        let mut funcs = HashMap::new();
        for (i, f) in module.functions.iter().enumerate() {
            // Kernels too: device code launching a kernel takes its address.
            if f.body.is_some() {
                funcs.entry(f.name.as_str()).or_insert(func_address(tag, i));
            }
        }
        let mut named = std::collections::HashSet::new();
        let mut note = |o: &Operand| {
            if let Operand::Name(n) | Operand::NameOffset(n, _) = o {
                if funcs.contains_key(n.as_str()) {
                    named.insert(n.clone());
                }
            }
        };
        for v in &module.variables {
            v.init.iter().for_each(&mut note);
        }
        for f in &module.functions {
            let mut open = vec![f.body.as_deref().unwrap_or_default().iter()];
            while let Some(top) = open.last_mut() {
                let Some(s) = top.next() else {
                    open.pop();
                    continue;
                };
                match s {
                    Statement::Block(b) => open.push(b.iter()),
                    Statement::Inst(i) if i.opcode != "call" => {
                        i.operands.iter().for_each(&mut note)
                    }
                    _ => {}
                }
            }
        }
        let mut taken: Vec<(u64, &Function, u64)> = named
            .iter()
            .filter_map(|n| {
                let &(f, w) = bodies.get(n.as_str())?;
                if f.is_entry {
                    return None;
                }
                Some((*funcs.get(n.as_str())?, f, w))
            })
            .collect();
        taken.sort_by_key(|t| t.0);
        (bodies, funcs, taken)
    }
}

struct Dec<'a> {
    m: &'a ModuleCtx<'a>,
    insts: Vec<Inst>,
    scopes: Vec<HashMap<String, Sym>>,
    nregs: u32,
    npreds: u32,
    consts: HashMap<u64, R>,
    shared_size: u64,
    local_size: u64,
    labels: HashMap<(u32, String), u32>,
    fixups: Vec<(usize, u32, String, u32)>,
    instance: u32,
    next_instance: u32,
    depth: u32,
    /// Inline context: label to branch to on `ret`.
    ret_label: Option<String>,
    /// Constant register holding the offset of dynamic shared memory.
    dyn_reg: R,
    /// The [`weight`] of the kernel's body and of every body inlined so far.
    weight: u64,
    /// A `%reserved_smem_offset_*` register is read.
    reserved_smem: bool,
    /// The `.callprototype`s seen, by inline instance and label: parameter and return
    /// sizes.
    protos: HashMap<(u32, String), (Vec<u32>, Vec<u32>)>,
    /// The functions being inlined, outermost first (calling one of them again is
    /// recursion: that call is made out of line).
    stack: Vec<&'a str>,
    /// While an out-of-line body is decoded: the size of its frame so far (its
    /// variables are [`Sym::Frame`]s).
    frame: Option<u64>,
    /// See [`Program::fp`].
    fp: R,
    /// The functions called out of line, by name, and those whose body is still to be
    /// decoded.
    outs: Vec<OutFn>,
    out_ix: HashMap<&'a str, u32>,
    pending: Vec<(u32, &'a Function)>,
    /// See [`Program::lockstep`].
    lockstep: bool,
    /// It has `membar` or `fence` (see [`Program::combine_reds`]).
    fences: bool,
}

fn int_width(t: ScalarType) -> u32 {
    t.size() * 8
}

macro_rules! int_fn {
    ($ty:expr, $f:ident, $line:expr) => {
        match $ty {
            ScalarType::U8 | ScalarType::B8 => ops::$f::<u8>,
            ScalarType::S8 => ops::$f::<i8>,
            ScalarType::U16 | ScalarType::B16 => ops::$f::<u16>,
            ScalarType::S16 => ops::$f::<i16>,
            ScalarType::U32 | ScalarType::B32 => ops::$f::<u32>,
            ScalarType::S32 => ops::$f::<i32>,
            ScalarType::U64 | ScalarType::B64 => ops::$f::<u64>,
            ScalarType::S64 => ops::$f::<i64>,
            t => return derr($line, format!("type .{} not supported here", t.name())),
        }
    };
}

macro_rules! flt_fn {
    ($ty:expr, $ftz:expr, $f:ident, $line:expr) => {
        match ($ty, $ftz) {
            (ScalarType::F32, false) => ops::$f::<f32, false>,
            (ScalarType::F32, true) => ops::$f::<f32, true>,
            (ScalarType::F64, _) => ops::$f::<f64, false>,
            (t, _) => return derr($line, format!("type .{} not supported here", t.name())),
        }
    };
}

/// The float operation `$f` of [`ops::falu2`] family (`$op` first when given) for type
/// `$t`, rounding `$m`, `.ftz` and `.sat` (f32 only).
macro_rules! falu_fn {
    ($f:ident, [$($op:expr)?], $t:expr, $m:expr, $ftz:expr, $sat:expr) => {{
        let flags = ($ftz as u8) | (($sat as u8) << 1);
        macro_rules! modes {
            ($ty:ty, $fl:literal) => {
                match $m {
                    Rnd::N => ops::$f::<$ty, $($op,)? 0, $fl>,
                    Rnd::Z => ops::$f::<$ty, $($op,)? 1, $fl>,
                    Rnd::M => ops::$f::<$ty, $($op,)? 2, $fl>,
                    Rnd::P => ops::$f::<$ty, $($op,)? 3, $fl>,
                }
            };
        }
        match ($t, flags) {
            (ScalarType::F32, 0) => modes!(f32, 0),
            (ScalarType::F32, 1) => modes!(f32, 1),
            (ScalarType::F32, 2) => modes!(f32, 2),
            (ScalarType::F32, _) => modes!(f32, 3),
            _ => modes!(f64, 0),
        }
    }};
}

/// A half-precision instruction's format and modifiers: `(bf16, flags)` with the flags
/// of [`ops::half_arith`] (`.ftz`, `.sat`, `.NaN`, packed), or `None` for other types.
fn half_kind(i: &Instruction, t: ScalarType) -> Option<(bool, u8)> {
    let (bf, x2) = match t {
        ScalarType::F16 => (false, false),
        ScalarType::Bf16 => (true, false),
        ScalarType::F16x2 => (i.has("bf16x2"), true),
        _ => return None,
    };
    let flags = i.has("ftz") as u8
        | (i.has("sat") as u8) << 1
        | (i.has("NaN") as u8) << 2
        | (x2 as u8) << 3;
    Some((bf, flags))
}

/// The half-precision lane function `$f` (its leading const parameters `$c`) for
/// bf16 or f16 and the flags of [`half_kind`].
macro_rules! half_fn {
    ($f:ident, [$($c:expr),*], $bf:expr, $flags:expr) => {{
        macro_rules! by_flags {
            ($b:literal) => {
                match $flags {
                    0 => ops::$f::<$b, $($c,)* 0>,
                    1 => ops::$f::<$b, $($c,)* 1>,
                    2 => ops::$f::<$b, $($c,)* 2>,
                    3 => ops::$f::<$b, $($c,)* 3>,
                    4 => ops::$f::<$b, $($c,)* 4>,
                    5 => ops::$f::<$b, $($c,)* 5>,
                    6 => ops::$f::<$b, $($c,)* 6>,
                    7 => ops::$f::<$b, $($c,)* 7>,
                    8 => ops::$f::<$b, $($c,)* 8>,
                    9 => ops::$f::<$b, $($c,)* 9>,
                    10 => ops::$f::<$b, $($c,)* 10>,
                    11 => ops::$f::<$b, $($c,)* 11>,
                    12 => ops::$f::<$b, $($c,)* 12>,
                    13 => ops::$f::<$b, $($c,)* 13>,
                    14 => ops::$f::<$b, $($c,)* 14>,
                    _ => ops::$f::<$b, $($c,)* 15>,
                }
            };
        }
        if $bf {
            by_flags!(true)
        } else {
            by_flags!(false)
        }
    }};
}

fn cmp_code(m: &str) -> Option<u8> {
    Some(match m {
        "eq" => 0,
        "ne" => 1,
        "lt" | "lo" => 2,
        "le" | "ls" => 3,
        "gt" | "hi" => 4,
        "ge" | "hs" => 5,
        "equ" => 6,
        "neu" => 7,
        "ltu" => 8,
        "leu" => 9,
        "gtu" => 10,
        "geu" => 11,
        "num" => 12,
        "nan" => 13,
        _ => return None,
    })
}

fn cmp_fn(ty: ScalarType, code: u8, ftz: bool, line: u32) -> DResult<CmpFn> {
    use ScalarType::*;
    macro_rules! pick {
        ($f:ident, $t:ty) => {
            match code {
                0 => ops::$f::<$t, 0>,
                1 => ops::$f::<$t, 1>,
                2 => ops::$f::<$t, 2>,
                3 => ops::$f::<$t, 3>,
                4 => ops::$f::<$t, 4>,
                5 => ops::$f::<$t, 5>,
                6 => ops::$f::<$t, 6>,
                7 => ops::$f::<$t, 7>,
                8 => ops::$f::<$t, 8>,
                9 => ops::$f::<$t, 9>,
                10 => ops::$f::<$t, 10>,
                11 => ops::$f::<$t, 11>,
                12 => ops::$f::<$t, 12>,
                _ => ops::$f::<$t, 13>,
            }
        };
    }
    if code > 5 && !matches!(ty, F16 | F32 | F64) {
        return derr(line, "unordered comparison on an integer type");
    }
    Ok(match ty {
        U16 | B16 => pick!(cmp_int, u16),
        S16 => pick!(cmp_int, i16),
        U32 | B32 => pick!(cmp_int, u32),
        S32 => pick!(cmp_int, i32),
        U64 | B64 => pick!(cmp_int, u64),
        S64 => pick!(cmp_int, i64),
        F32 if ftz => pick!(cmp_flt_ftz, f32),
        F32 => pick!(cmp_flt, f32),
        F64 => pick!(cmp_flt, f64),
        F16 => match code {
            0 => ops::cmp_f16::<0>,
            1 => ops::cmp_f16::<1>,
            2 => ops::cmp_f16::<2>,
            3 => ops::cmp_f16::<3>,
            4 => ops::cmp_f16::<4>,
            5 => ops::cmp_f16::<5>,
            6 => ops::cmp_f16::<6>,
            7 => ops::cmp_f16::<7>,
            8 => ops::cmp_f16::<8>,
            9 => ops::cmp_f16::<9>,
            10 => ops::cmp_f16::<10>,
            11 => ops::cmp_f16::<11>,
            12 => ops::cmp_f16::<12>,
            _ => ops::cmp_f16::<13>,
        },
        t => return derr(line, format!("setp on .{} is not supported", t.name())),
    })
}

fn rnd_of(i: &Instruction) -> (Rnd, bool) {
    for m in &i.modifiers {
        match m.as_str() {
            "rn" => return (Rnd::N, false),
            "rz" => return (Rnd::Z, false),
            "rm" => return (Rnd::M, false),
            "rp" => return (Rnd::P, false),
            "rni" => return (Rnd::N, true),
            "rzi" => return (Rnd::Z, true),
            "rmi" => return (Rnd::M, true),
            "rpi" => return (Rnd::P, true),
            _ => {}
        }
    }
    (Rnd::N, false)
}

fn cvt_ty(t: ScalarType) -> Option<CvtTy> {
    use ScalarType::*;
    Some(match t {
        U8 | B8 => CvtTy::U(8),
        S8 => CvtTy::S(8),
        U16 | B16 => CvtTy::U(16),
        S16 => CvtTy::S(16),
        U32 | B32 => CvtTy::U(32),
        S32 => CvtTy::S(32),
        U64 | B64 => CvtTy::U(64),
        S64 => CvtTy::S(64),
        F16 => CvtTy::F16,
        Bf16 => CvtTy::Bf16,
        F32 => CvtTy::F32,
        F64 => CvtTy::F64,
        _ => return None,
    })
}

fn mask_of(bits: u32) -> u64 {
    if bits >= 64 {
        u64::MAX
    } else {
        (1u64 << bits) - 1
    }
}

impl<'a> Dec<'a> {
    fn lookup(&self, name: &str) -> Option<Sym> {
        for s in self.scopes.iter().rev() {
            if let Some(v) = s.get(name) {
                return Some(*v);
            }
        }
        if let Some(&a) = self.m.globals.get(name) {
            return Some(Sym::Global(a));
        }
        if let Some(&o) = self.m.shared.get(name) {
            return Some(Sym::Shared(o));
        }
        if self.m.extern_shared.iter().any(|(n, _)| n == name) {
            return Some(Sym::DynShared);
        }
        if let Some(&a) = self.m.funcs.get(name) {
            return Some(Sym::Func(a));
        }
        None
    }

    fn konst(&mut self, v: u64) -> R {
        if let Some(&r) = self.consts.get(&v) {
            return r;
        }
        let r = self.new_reg();
        self.consts.insert(v, r);
        r
    }

    /// A register holding the local address of a variable at `o` in the running
    /// out-of-line call's frame.
    fn frame_addr(&mut self, o: u64, line: u32) -> R {
        let k = self.konst(o);
        let d = self.new_reg();
        self.emit(Op::Bin(ops::add::<u64>, d, self.fp, k), None, line);
        d
    }

    fn new_reg(&mut self) -> R {
        let r = self.nregs;
        self.nregs += 1;
        r
    }

    fn new_pred(&mut self) -> P {
        let p = self.npreds;
        self.npreds += 1;
        p
    }

    fn declare(&mut self, d: &ptx::VarDecl) -> DResult<()> {
        match d.space {
            Space::Reg => {
                let count = d.range.unwrap_or(1) as u64;
                if self.nregs as u64 + self.npreds as u64 + count > MAX_REGS {
                    return derr(d.line, format!("more than {MAX_REGS} registers"));
                }
                let names: Vec<String> = match d.range {
                    Some(n) => (0..n).map(|i| format!("{}{}", d.name, i)).collect(),
                    None => vec![d.name.clone()],
                };
                for n in names {
                    let sym = if d.ty == ScalarType::Pred {
                        let p = self.npreds;
                        self.npreds += 1;
                        Sym::Pred(p)
                    } else {
                        let r = self.nregs;
                        self.nregs += 1;
                        Sym::Reg(r, int_width(d.ty) * d.vector)
                    };
                    self.scopes.last_mut().expect("scope").insert(n, sym);
                }
            }
            Space::Shared => {
                let a = d.alignment().max(1) as u64;
                if d.is_extern || d.array.contains(&0) {
                    return derr(d.line, "extern .shared inside a function is not supported");
                }
                self.shared_size = self
                    .shared_size
                    .checked_next_multiple_of(a)
                    .unwrap_or(u64::MAX);
                self.scopes
                    .last_mut()
                    .expect("scope")
                    .insert(d.name.clone(), Sym::Shared(self.shared_size));
                self.shared_size = self.shared_size.saturating_add(d.size());
            }
            Space::Local | Space::Param if self.frame.is_some() => {
                let a = d.alignment().max(1) as u64;
                let at = self
                    .frame
                    .unwrap_or(0)
                    .checked_next_multiple_of(a)
                    .unwrap_or(u64::MAX);
                self.scopes
                    .last_mut()
                    .expect("scope")
                    .insert(d.name.clone(), Sym::Frame(at));
                self.frame = Some(at.saturating_add(d.size().max(1)));
            }
            Space::Local | Space::Param => {
                let a = d.alignment().max(1) as u64;
                self.local_size = self
                    .local_size
                    .checked_next_multiple_of(a)
                    .unwrap_or(u64::MAX);
                self.scopes
                    .last_mut()
                    .expect("scope")
                    .insert(d.name.clone(), Sym::Local(self.local_size));
                self.local_size = self.local_size.saturating_add(d.size().max(1));
            }
            Space::Global | Space::Const => {
                return derr(
                    d.line,
                    "function-scope .global/.const variables are not supported",
                );
            }
        }
        Ok(())
    }

    fn emit(&mut self, op: Op, guard: Option<(P, bool)>, line: u32) {
        self.insts.push(Inst {
            op,
            guard,
            line,
            aff: Aff::None,
            sem: Sem::None,
        });
    }

    fn check_size(&self, line: u32) -> DResult<()> {
        if self.insts.len() > MAX_INSTS || self.nregs as u64 > MAX_REGS * 2 {
            return derr(line, format!("kernel too large after inlining calls (over {MAX_INSTS} instructions or {MAX_REGS} registers)"));
        }
        Ok(())
    }

    /// A source operand as a register (immediates and symbols become constants).
    fn src(&mut self, o: &Operand, line: u32) -> DResult<R> {
        Ok(match o {
            Operand::Name(n) => match self.lookup(n) {
                Some(Sym::Reg(r, _)) => r,
                Some(Sym::Shared(o)) => self.konst(o),
                Some(Sym::Global(a)) => self.konst(a),
                Some(Sym::Local(o)) => self.konst(o),
                Some(Sym::Frame(o)) => self.frame_addr(o, line),
                Some(Sym::DynShared) => self.dyn_reg,
                Some(Sym::Func(a)) => self.konst(a),
                Some(Sym::Pred(_)) => return derr(line, format!("predicate {n} used as a value")),
                Some(Sym::KParam(off, _)) => self.konst(PARAM_WINDOW + off as u64),
                None => {
                    if let Some(i) = SPECIALS.iter().position(|s| s == n) {
                        self.reserved_smem |= (RESERVED_SMEM_SPECIAL..ENVREG1_SPECIAL).contains(&i);
                        i as R
                    } else if n == "WARP_SZ" {
                        // PTX's predefined constant: the warp size.
                        self.konst(32)
                    } else if n
                        .strip_prefix("%envreg")
                        .and_then(|d| d.parse::<u32>().ok())
                        .is_some_and(|d| d < 32)
                    {
                        // The driver's other environment registers: 0 in every launch.
                        self.konst(0)
                    } else {
                        return derr(line, format!("unknown name {n}"));
                    }
                }
            },
            Operand::NameOffset(n, off) => {
                let base = match self.lookup(n) {
                    Some(Sym::Frame(o)) => {
                        return Ok(self.frame_addr(o.wrapping_add(*off as u64), line))
                    }
                    Some(Sym::Shared(o)) | Some(Sym::Local(o)) | Some(Sym::Global(o)) => o,
                    _ => return derr(line, format!("{n}+{off}: not a variable")),
                };
                self.konst(base.wrapping_add(*off as u64))
            }
            Operand::Int(v) => self.konst(*v as u64),
            Operand::F32(b) => self.konst(*b as u64),
            Operand::F64(b) => self.konst(*b),
            _ => return derr(line, format!("unsupported operand {o:?}")),
        })
    }

    /// A float immediate given for an f32 operand may be written as a double literal.
    fn src_typed(&mut self, o: &Operand, ty: ScalarType, line: u32) -> DResult<R> {
        match (o, ty) {
            (Operand::F64(b), ScalarType::F32) => {
                Ok(self.konst((f64::from_bits(*b) as f32).to_bits() as u64))
            }
            (Operand::F32(b), ScalarType::F64) => {
                Ok(self.konst((f32::from_bits(*b) as f64).to_bits()))
            }
            (Operand::Int(v), _) => Ok(self.konst((*v as u64) & mask_of(ty.size() * 8))),
            _ => self.src(o, line),
        }
    }

    fn dst(&mut self, o: &Operand, line: u32) -> DResult<R> {
        match o {
            Operand::Name(n) => match self.lookup(n) {
                Some(Sym::Reg(r, _)) => Ok(r),
                _ => derr(line, format!("{n} is not a register")),
            },
            Operand::Sink => Ok(self.new_reg()),
            _ => derr(line, format!("bad destination {o:?}")),
        }
    }

    fn dst_width(&self, o: &Operand) -> u32 {
        match o {
            Operand::Name(n) => match self.lookup(n) {
                Some(Sym::Reg(_, w)) => w,
                _ => 64,
            },
            _ => 64,
        }
    }

    fn pred(&mut self, o: &Operand, line: u32) -> DResult<(P, bool)> {
        match o {
            Operand::Name(n) => match self.lookup(n) {
                Some(Sym::Pred(p)) => Ok((p, false)),
                _ => derr(line, format!("{n} is not a predicate")),
            },
            Operand::Not(inner) => {
                let (p, n) = self.pred(inner, line)?;
                Ok((p, !n))
            }
            Operand::Int(v) => {
                let p = self.new_pred();
                self.emit(Op::PredConst { d: p, v: *v != 0 }, None, line);
                Ok((p, false))
            }
            Operand::Sink => Ok((self.new_pred(), false)),
            _ => derr(line, format!("bad predicate operand {o:?}")),
        }
    }

    /// Address operand: (register, offset, space override for symbols).
    fn addr(&mut self, o: &Operand, line: u32) -> DResult<(R, i64, Option<Sp>)> {
        match o {
            Operand::Address {
                base: Some(n),
                offset,
            } => match self.lookup(n) {
                Some(Sym::Reg(r, _)) => Ok((r, *offset, None)),
                Some(Sym::Shared(s)) => Ok((self.konst(s), *offset, Some(Sp::Shared))),
                Some(Sym::Local(s)) => Ok((self.konst(s), *offset, Some(Sp::Local))),
                Some(Sym::Frame(s)) => {
                    Ok((self.fp, offset.wrapping_add(s as i64), Some(Sp::Local)))
                }
                Some(Sym::Global(a)) => Ok((self.konst(a), *offset, Some(Sp::Global))),
                Some(Sym::DynShared) => Ok((self.dyn_reg, *offset, Some(Sp::Shared))),
                Some(Sym::KParam(off, _)) => Ok((
                    self.konst(PARAM_WINDOW + off as u64),
                    *offset,
                    Some(Sp::Generic),
                )),
                Some(Sym::Pred(_)) => derr(line, "predicate used as an address"),
                Some(Sym::Func(_)) => derr(line, format!("function {n} used as an address")),
                None => derr(line, format!("unknown name {n}")),
            },
            Operand::Address { base: None, offset } => Ok((self.konst(*offset as u64), 0, None)),
            _ => derr(line, format!("expected an address, found {o:?}")),
        }
    }

    fn vec_regs(&mut self, o: &Operand, line: u32, dest: bool) -> DResult<(Vec<R>, u32)> {
        match o {
            Operand::Vector(v) => {
                let mut rs = vec![];
                let mut w = 64;
                for x in v {
                    if dest {
                        w = self.dst_width(x);
                        rs.push(self.dst(x, line)?);
                    } else {
                        rs.push(self.src(x, line)?);
                    }
                }
                Ok((rs, w))
            }
            _ => {
                if dest {
                    let w = self.dst_width(o);
                    Ok((vec![self.dst(o, line)?], w))
                } else {
                    Ok((vec![self.src(o, line)?], 64))
                }
            }
        }
    }

    /// Decodes a body. Nested `{ }` blocks are walked with an explicit stack (one scope
    /// each), so only inlined calls (at most [`MAX_CALL_DEPTH`] deep) recurse.
    fn body(&mut self, stmts: &[Statement]) -> DResult<()> {
        let mut open = vec![stmts.iter()];
        while let Some(top) = open.last_mut() {
            let Some(s) = top.next() else {
                open.pop();
                if !open.is_empty() {
                    self.scopes.pop();
                }
                continue;
            };
            match s {
                Statement::Decl(d) => self.declare(d)?,
                Statement::Label(l, line) => {
                    if self.labels.len() >= MAX_INSTS {
                        return derr(
                            *line,
                            format!(
                                "kernel too large after inlining calls (over {MAX_INSTS} labels)"
                            ),
                        );
                    }
                    self.labels
                        .insert((self.instance, l.clone()), self.insts.len() as u32);
                }
                Statement::Block(b) => {
                    self.scopes.push(HashMap::new());
                    open.push(b.iter());
                }
                Statement::Inst(i) => self.inst(i)?,
                Statement::Prototype(p) => {
                    let sizes = |ps: &[ptx::Param]| ps.iter().map(|p| p.size).collect();
                    self.protos.insert(
                        (self.instance, p.name.clone()),
                        (sizes(&p.params), sizes(&p.returns)),
                    );
                }
            }
        }
        Ok(())
    }

    fn inst(&mut self, i: &Instruction) -> DResult<()> {
        let line = i.line;
        self.check_size(line)?;
        let guard = match &i.guard {
            Some(g) => match self.lookup(&g.reg) {
                Some(Sym::Pred(p)) => Some((p, g.negated)),
                _ => return derr(line, format!("guard {} is not a predicate", g.reg)),
            },
            None => None,
        };
        let types: Vec<ScalarType> = i
            .modifiers
            .iter()
            .filter_map(|m| ScalarType::from_name(m))
            .collect();
        let ty = types.last().copied();
        let ops = &i.operands;
        let need = |n: usize| -> DResult<()> {
            if ops.len() < n {
                derr(line, format!("`{}` needs {n} operands", i.full_name()))
            } else {
                Ok(())
            }
        };
        let need_ty = || -> DResult<ScalarType> {
            ty.ok_or(DecodeError {
                line,
                message: format!("`{}` has no type", i.full_name()),
            })
        };
        let ftz = i.has("ftz");
        let is_float = matches!(ty, Some(ScalarType::F32 | ScalarType::F64));
        let mut aff = Aff::None;
        let mut sem = Sem::None;
        let op: Op = match i.opcode.as_str() {
            "add" | "sub" | "mul" | "div" | "rem" | "min" | "max" | "and" | "or" | "xor"
            | "shl" | "shr" => {
                need(3)?;
                let t = need_ty()?;
                if t == ScalarType::Pred {
                    let (a, an) = self.pred(&ops[1], line)?;
                    let (b, bn) = self.pred(&ops[2], line)?;
                    let (d, _) = self.pred(&ops[0], line)?;
                    let op = match i.opcode.as_str() {
                        "and" => BoolOp::And,
                        "or" => BoolOp::Or,
                        "xor" => BoolOp::Xor,
                        _ => return derr(line, format!("`{}` on predicates", i.opcode)),
                    };
                    self.emit(
                        Op::PredLogic {
                            op: Some(op),
                            d,
                            a,
                            an,
                            b,
                            bn,
                        },
                        guard,
                        line,
                    );
                    return Ok(());
                }
                if i.has("cc") && matches!(i.opcode.as_str(), "add" | "sub") {
                    let d = self.dst(&ops[0], line)?;
                    let a = self.src_typed(&ops[1], t, line)?;
                    let b = self.src_typed(&ops[2], t, line)?;
                    self.emit(
                        Op::Carry {
                            d,
                            a,
                            b,
                            sub: i.opcode == "sub",
                            cin: false,
                            cout: true,
                            w64: t.size() == 8,
                        },
                        guard,
                        line,
                    );
                    return Ok(());
                }
                let d = self.dst(&ops[0], line)?;
                let a_ty = t;
                let a = self.src_typed(&ops[1], a_ty, line)?;
                let b_ty = if matches!(i.opcode.as_str(), "shl" | "shr") {
                    ScalarType::U32
                } else {
                    a_ty
                };
                let b = self.src_typed(&ops[2], b_ty, line)?;
                let (rnd, _) = rnd_of(i);
                let f: BinFn = if let Some((bf, flags)) = half_kind(i, t) {
                    match i.opcode.as_str() {
                        "add" => half_fn!(half_arith, [0], bf, flags),
                        "sub" => half_fn!(half_arith, [1], bf, flags),
                        "mul" => half_fn!(half_arith, [2], bf, flags),
                        "min" => half_fn!(half_minmax, [false], bf, flags),
                        "max" => half_fn!(half_minmax, [true], bf, flags),
                        o => return derr(line, format!("`{o}.{}` is not supported", t.name())),
                    }
                } else if is_float {
                    let explicit_dir = rnd != Rnd::N;
                    match i.opcode.as_str() {
                        "add" | "sub" | "mul" | "div"
                            if (explicit_dir && !i.has("approx") && !i.has("full"))
                                || i.has("sat") =>
                        {
                            let sat = i.has("sat");
                            match i.opcode.as_str() {
                                "add" => falu_fn!(falu2, [{ ops::fop::ADD }], t, rnd, ftz, sat),
                                "sub" => falu_fn!(falu2, [{ ops::fop::SUB }], t, rnd, ftz, sat),
                                "mul" => falu_fn!(falu2, [{ ops::fop::MUL }], t, rnd, ftz, sat),
                                _ => falu_fn!(falu2, [{ ops::fop::DIV }], t, rnd, ftz, sat),
                            }
                        }
                        "div" if i.has("approx") && t == ScalarType::F32 => {
                            if ftz {
                                ops::fdiv_approx::<true>
                            } else {
                                ops::fdiv_approx::<false>
                            }
                        }
                        "add" => flt_fn!(t, ftz, fadd, line),
                        "sub" => flt_fn!(t, ftz, fsub, line),
                        "mul" => flt_fn!(t, ftz, fmul, line),
                        "div" => flt_fn!(t, ftz, fdiv, line),
                        "min" | "max" => {
                            macro_rules! mm {
                                ($max:literal) => {
                                    match (t, i.has("NaN"), ftz) {
                                        (ScalarType::F32, false, false) => {
                                            ops::fmin::<f32, $max, false, false>
                                        }
                                        (ScalarType::F32, false, true) => {
                                            ops::fmin::<f32, $max, false, true>
                                        }
                                        (ScalarType::F32, true, false) => {
                                            ops::fmin::<f32, $max, true, false>
                                        }
                                        (ScalarType::F32, true, true) => {
                                            ops::fmin::<f32, $max, true, true>
                                        }
                                        _ => ops::fmin::<f64, $max, false, false>,
                                    }
                                };
                            }
                            if i.opcode == "max" {
                                mm!(true)
                            } else {
                                mm!(false)
                            }
                        }
                        o => return derr(line, format!("`{o}` on a float type")),
                    }
                } else {
                    match i.opcode.as_str() {
                        "add" | "sub" if i.has("sat") => match t {
                            ScalarType::S32 if i.opcode == "add" => ops::addsub_sat::<false>,
                            ScalarType::S32 => ops::addsub_sat::<true>,
                            _ => {
                                return derr(line, format!("`{}`: .sat needs .s32", i.full_name()))
                            }
                        },
                        "min" | "max" if i.has("relu") => match t {
                            ScalarType::S32 if i.opcode == "min" => ops::minmax_relu::<false>,
                            ScalarType::S32 => ops::minmax_relu::<true>,
                            _ => {
                                return derr(line, format!("`{}`: .relu needs .s32", i.full_name()))
                            }
                        },
                        "add" => int_fn!(t, add, line),
                        "sub" => int_fn!(t, sub, line),
                        "mul" if i.has("hi") => int_fn!(t, mul_hi, line),
                        "mul" if i.has("wide") => match t {
                            ScalarType::U16 => ops::mul_wide::<u16>,
                            ScalarType::S16 => ops::mul_wide::<i16>,
                            ScalarType::U32 => ops::mul_wide::<u32>,
                            ScalarType::S32 => ops::mul_wide::<i32>,
                            _ => return derr(line, "mul.wide needs a 16- or 32-bit type"),
                        },
                        "mul" => int_fn!(t, mul_lo, line),
                        "div" => int_fn!(t, div, line),
                        "rem" => int_fn!(t, rem, line),
                        "min" => int_fn!(t, min, line),
                        "max" => int_fn!(t, max, line),
                        "and" => int_fn!(t, and, line),
                        "or" => int_fn!(t, or, line),
                        "xor" => int_fn!(t, xor, line),
                        // An immediate amount is a constant register: a uniform shift.
                        "shl" if matches!(ops[2], Operand::Int(_)) => int_fn!(t, shl_imm, line),
                        "shr" if matches!(ops[2], Operand::Int(_)) => int_fn!(t, shr_imm, line),
                        "shl" => int_fn!(t, shl, line),
                        _ => int_fn!(t, shr, line),
                    }
                };
                sem = bin_sem(i, t, is_float, rnd, ftz);
                if !is_float && half_kind(i, t).is_none() && !i.has("sat") {
                    let bits = (t.size() * 8) as u8;
                    let signed = matches!(
                        t,
                        ScalarType::S8 | ScalarType::S16 | ScalarType::S32 | ScalarType::S64
                    );
                    aff = match i.opcode.as_str() {
                        "add" | "sub" => Aff::Add {
                            d,
                            a,
                            b,
                            bits,
                            sub: i.opcode == "sub",
                        },
                        "mul" if i.has("hi") => Aff::None,
                        "mul" if i.has("wide") => Aff::MulWide {
                            d,
                            a,
                            b,
                            bits,
                            signed,
                        },
                        "mul" => Aff::Mul {
                            d,
                            a,
                            b,
                            c: None,
                            bits,
                        },
                        "shl" => Aff::Shl { d, a, b, bits },
                        "shr" => Aff::Shr {
                            d,
                            a,
                            b,
                            bits,
                            signed,
                        },
                        _ => Aff::None,
                    };
                }
                Op::Bin(f, d, a, b)
            }
            "mad" | "madc" if i.opcode == "madc" || (i.has("cc") && !is_float) => {
                // The extended-precision forms: the carry flag in and/or out.
                need(4)?;
                let t = need_ty()?;
                if !matches!(
                    t,
                    ScalarType::U32 | ScalarType::S32 | ScalarType::U64 | ScalarType::S64
                ) {
                    return derr(
                        line,
                        format!("{} needs .u32, .s32, .u64 or .s64", i.full_name()),
                    );
                }
                let d = self.dst(&ops[0], line)?;
                let a = self.src_typed(&ops[1], t, line)?;
                let b = self.src_typed(&ops[2], t, line)?;
                let c = self.src_typed(&ops[3], t, line)?;
                Op::MadCarry {
                    d,
                    a,
                    b,
                    c,
                    hi: i.has("hi"),
                    signed: matches!(t, ScalarType::S32 | ScalarType::S64),
                    cin: i.opcode == "madc",
                    cout: i.has("cc"),
                    w64: t.size() == 8,
                }
            }
            "mad" | "fma" => {
                need(4)?;
                let t = need_ty()?;
                let d = self.dst(&ops[0], line)?;
                let a = self.src_typed(&ops[1], t, line)?;
                let b = self.src_typed(&ops[2], t, line)?;
                let c_ty = if i.has("wide") {
                    match t {
                        ScalarType::S32 => ScalarType::S64,
                        ScalarType::U32 => ScalarType::U64,
                        _ => t,
                    }
                } else {
                    t
                };
                let c = self.src_typed(&ops[3], c_ty, line)?;
                let (rnd, _) = rnd_of(i);
                let f: TerFn = if let Some((bf, flags)) = half_kind(i, t) {
                    half_fn!(half_fma, [], bf, flags)
                } else if is_float {
                    if rnd != Rnd::N || i.has("sat") {
                        falu_fn!(falu3, [], t, rnd, ftz, i.has("sat"))
                    } else if t == ScalarType::F32 {
                        if ftz {
                            ops::ffma32::<true>
                        } else {
                            sem = Sem::Flt {
                                op: FltOp::Fma,
                                f64: false,
                            };
                            ops::ffma32::<false>
                        }
                    } else {
                        if !ftz && t == ScalarType::F64 {
                            sem = Sem::Flt {
                                op: FltOp::Fma,
                                f64: true,
                            };
                        }
                        flt_fn!(t, ftz, ffma, line)
                    }
                } else if i.has("hi") {
                    int_fn!(t, mad_hi, line)
                } else if i.has("wide") {
                    match t {
                        ScalarType::U16 => ops::mad_wide::<u16>,
                        ScalarType::S16 => ops::mad_wide::<i16>,
                        ScalarType::U32 => ops::mad_wide::<u32>,
                        ScalarType::S32 => ops::mad_wide::<i32>,
                        _ => return derr(line, "mad.wide needs a 16- or 32-bit type"),
                    }
                } else {
                    aff = Aff::Mul {
                        d,
                        a,
                        b,
                        c: Some(c),
                        bits: (t.size() * 8) as u8,
                    };
                    int_fn!(t, mad_lo, line)
                };
                Op::Ter(f, d, a, b, c)
            }
            "neg" | "abs" | "not" | "cnot" | "popc" | "clz" | "brev" | "bfind" | "sqrt" | "rcp"
            | "rsqrt" | "ex2" | "lg2" | "sin" | "cos" | "tanh" => {
                need(2)?;
                let t = need_ty()?;
                if t == ScalarType::Pred {
                    let (d, _) = self.pred(&ops[0], line)?;
                    let (a, an) = self.pred(&ops[1], line)?;
                    let an = if i.opcode == "not" { !an } else { an };
                    self.emit(
                        Op::PredLogic {
                            op: None,
                            d,
                            a,
                            an,
                            b: a,
                            bn: an,
                        },
                        guard,
                        line,
                    );
                    return Ok(());
                }
                let d = self.dst(&ops[0], line)?;
                let a = self.src_typed(&ops[1], t, line)?;
                let f: UnFn = match (i.opcode.as_str(), is_float) {
                    ("neg" | "abs", _) if half_kind(i, t).is_some() => {
                        let (bf, flags) = half_kind(i, t).unwrap_or_default();
                        if i.opcode == "abs" {
                            half_fn!(half_sign, [true], bf, flags)
                        } else {
                            half_fn!(half_sign, [false], bf, flags)
                        }
                    }
                    ("neg", false) => int_fn!(t, neg, line),
                    ("abs", false) => int_fn!(t, abs, line),
                    ("not", false) => int_fn!(t, not, line),
                    ("cnot", false) => int_fn!(t, cnot, line),
                    ("popc", false) => int_fn!(t, popc, line),
                    ("clz", false) => int_fn!(t, clz, line),
                    ("brev", false) => int_fn!(t, brev, line),
                    ("bfind", false) if i.has("shiftamt") => int_fn!(t, bfind_shiftamt, line),
                    ("bfind", false) => int_fn!(t, bfind, line),
                    ("neg" | "abs", true) => {
                        macro_rules! sign {
                            ($abs:literal) => {
                                match (t, ftz) {
                                    (ScalarType::F32, false) => ops::fsign::<f32, $abs, false>,
                                    (ScalarType::F32, true) => ops::fsign::<f32, $abs, true>,
                                    _ => ops::fsign::<f64, $abs, false>,
                                }
                            };
                        }
                        if i.opcode == "abs" {
                            sign!(true)
                        } else {
                            sign!(false)
                        }
                    }
                    ("sqrt" | "rcp", true)
                        if !i.has("approx") && (rnd_of(i).0 != Rnd::N || ftz) =>
                    {
                        let m = rnd_of(i).0;
                        if i.opcode == "sqrt" {
                            falu_fn!(falu1, [{ ops::fop::SQRT }], t, m, ftz, false)
                        } else {
                            falu_fn!(falu1, [{ ops::fop::RCP }], t, m, ftz, false)
                        }
                    }
                    ("sqrt", true) => flt_fn!(t, ftz, fsqrt, line),
                    ("rcp", true) if t == ScalarType::F32 && i.has("approx") => {
                        if ftz {
                            ops::f32_approx::<5, true>
                        } else {
                            ops::f32_approx::<5, false>
                        }
                    }
                    ("rcp", true) if t == ScalarType::F64 && i.has("approx") && ftz => {
                        ops::frcp_approx_f64
                    }
                    ("rcp", true) => flt_fn!(t, ftz, frcp, line),
                    ("rsqrt", true) => flt_fn!(t, ftz, frsqrt, line),
                    ("ex2" | "lg2" | "sin" | "cos" | "tanh", true) if t == ScalarType::F32 => {
                        macro_rules! ap {
                            ($k:expr) => {
                                if ftz {
                                    ops::f32_approx::<$k, true>
                                } else {
                                    ops::f32_approx::<$k, false>
                                }
                            };
                        }
                        match i.opcode.as_str() {
                            "ex2" => ap!(0),
                            "lg2" => ap!(1),
                            "sin" => ap!(2),
                            "cos" => ap!(3),
                            _ => ap!(4),
                        }
                    }
                    (o, _) => return derr(line, format!("`{o}.{}` is not supported", t.name())),
                };
                if i.opcode == "not" && !is_float {
                    sem = Sem::Int {
                        op: IntOp::Not,
                        bits: (t.size() * 8) as u8,
                        signed: false,
                    };
                }
                if matches!(i.opcode.as_str(), "neg" | "abs") && is_float && !ftz {
                    sem = Sem::FSign {
                        neg: i.opcode == "neg",
                        f64: t == ScalarType::F64,
                    };
                }
                Op::Un(f, d, a)
            }
            "mad24" => {
                need(4)?;
                let t = need_ty()?;
                let d = self.dst(&ops[0], line)?;
                let a = self.src_typed(&ops[1], t, line)?;
                let b = self.src_typed(&ops[2], t, line)?;
                let c = self.src_typed(&ops[3], t, line)?;
                let f: TerFn = match (t, i.has("hi"), i.has("sat")) {
                    (ScalarType::S32, false, false) => ops::mad24::<true, false, false>,
                    (ScalarType::S32, true, false) => ops::mad24::<true, true, false>,
                    (ScalarType::S32, true, true) => ops::mad24::<true, true, true>,
                    (ScalarType::U32, false, false) => ops::mad24::<false, false, false>,
                    (ScalarType::U32, true, false) => ops::mad24::<false, true, false>,
                    _ => {
                        return derr(
                            line,
                            format!(
                                "`{}`: mad24 takes .lo or .hi on .s32 or .u32 (.sat with .hi.s32)",
                                i.full_name()
                            ),
                        )
                    }
                };
                Op::Ter(f, d, a, b, c)
            }
            "mul24" => {
                need(3)?;
                let t = need_ty()?;
                let d = self.dst(&ops[0], line)?;
                let a = self.src_typed(&ops[1], t, line)?;
                let b = self.src_typed(&ops[2], t, line)?;
                let hi = i.has("hi");
                let f: BinFn = match (t, hi) {
                    (ScalarType::S32, false) => ops::mul24::<true, false>,
                    (ScalarType::S32, true) => ops::mul24::<true, true>,
                    (ScalarType::U32, false) => ops::mul24::<false, false>,
                    (ScalarType::U32, true) => ops::mul24::<false, true>,
                    _ => return derr(line, "mul24 needs .s32 or .u32"),
                };
                Op::Bin(f, d, a, b)
            }
            "sad" | "shf" => {
                need(4)?;
                let t = need_ty()?;
                let d = self.dst(&ops[0], line)?;
                let a = self.src_typed(&ops[1], t, line)?;
                let b = self.src_typed(&ops[2], t, line)?;
                let c = self.src_typed(&ops[3], ScalarType::U32, line)?;
                let f: TerFn = if i.opcode == "sad" {
                    int_fn!(t, sad, line)
                } else {
                    match (i.has("r"), i.has("clamp")) {
                        (false, false) => ops::shf::<false, false>,
                        (false, true) => ops::shf::<false, true>,
                        (true, false) => ops::shf::<true, false>,
                        (true, true) => ops::shf::<true, true>,
                    }
                };
                Op::Ter(f, d, a, b, c)
            }
            "bfe" => {
                need(4)?;
                let t = need_ty()?;
                let d = self.dst(&ops[0], line)?;
                let a = self.src_typed(&ops[1], t, line)?;
                let b = self.src_typed(&ops[2], ScalarType::U32, line)?;
                let c = self.src_typed(&ops[3], ScalarType::U32, line)?;
                Op::Ter(int_fn!(t, bfe, line), d, a, b, c)
            }
            "bfi" => {
                need(5)?;
                let t = need_ty()?;
                let d = self.dst(&ops[0], line)?;
                let a = self.src_typed(&ops[1], t, line)?;
                let b = self.src_typed(&ops[2], t, line)?;
                let c = self.src_typed(&ops[3], ScalarType::U32, line)?;
                let e = self.src_typed(&ops[4], ScalarType::U32, line)?;
                Op::Bfi {
                    w: t.size() * 8,
                    d,
                    a,
                    b,
                    c,
                    e,
                }
            }
            "lop3" => {
                need(5)?;
                let d = self.dst(&ops[0], line)?;
                let a = self.src(&ops[1], line)?;
                let b = self.src(&ops[2], line)?;
                let c = self.src(&ops[3], line)?;
                let Operand::Int(lut) = ops[4] else {
                    return derr(line, "lop3 needs an immediate table");
                };
                Op::Lop3 {
                    d,
                    a,
                    b,
                    c,
                    lut: lut as u8,
                }
            }
            "addc" | "subc" => {
                need(3)?;
                let t = need_ty()?;
                let d = self.dst(&ops[0], line)?;
                let a = self.src_typed(&ops[1], t, line)?;
                let b = self.src_typed(&ops[2], t, line)?;
                Op::Carry {
                    d,
                    a,
                    b,
                    sub: i.opcode == "subc",
                    cin: true,
                    cout: i.has("cc"),
                    w64: t.size() == 8,
                }
            }
            "copysign" => {
                need(3)?;
                let t = need_ty()?;
                let d = self.dst(&ops[0], line)?;
                let a = self.src_typed(&ops[1], t, line)?;
                let b = self.src_typed(&ops[2], t, line)?;
                let f: BinFn = match t {
                    ScalarType::F32 => ops::copysign::<f32>,
                    ScalarType::F64 => ops::copysign::<f64>,
                    _ => return derr(line, "copysign needs .f32 or .f64"),
                };
                Op::Bin(f, d, a, b)
            }
            "testp" => {
                need(2)?;
                let t = need_ty()?;
                let class = [
                    ("finite", 0u8),
                    ("infinite", 1),
                    ("number", 2),
                    ("notanumber", 3),
                    ("normal", 4),
                    ("subnormal", 5),
                ]
                .iter()
                .find(|(n, _)| i.has(n))
                .map(|x| x.1)
                .ok_or(DecodeError {
                    line,
                    message: "testp needs a class".into(),
                })?;
                let (d, _) = self.pred(&ops[0], line)?;
                let a = self.src_typed(&ops[1], t, line)?;
                Op::Testp {
                    d,
                    a,
                    class,
                    f64: t == ScalarType::F64,
                }
            }
            "prmt" => {
                need(4)?;
                let mode = i
                    .modifiers
                    .iter()
                    .find_map(|m| ops::PRMT_MODES.iter().position(|(n, _)| n == m));
                if mode.is_none() && i.modifiers.len() > 1 {
                    return derr(line, format!("`{}`: unknown prmt mode", i.full_name()));
                }
                let d = self.dst(&ops[0], line)?;
                let a = self.src(&ops[1], line)?;
                let b = self.src(&ops[2], line)?;
                let c = self.src(&ops[3], line)?;
                let fixed: [TerFn; 6] = [
                    ops::prmt_fixed::<0>,
                    ops::prmt_fixed::<1>,
                    ops::prmt_fixed::<2>,
                    ops::prmt_fixed::<3>,
                    ops::prmt_fixed::<4>,
                    ops::prmt_fixed::<5>,
                ];
                match mode {
                    Some(m) => Op::Ter(fixed[m], d, a, b, c),
                    None => Op::Prmt(d, a, b, c),
                }
            }
            "mov" => {
                need(2)?;
                let t = need_ty()?;
                if t == ScalarType::Pred {
                    let (d, _) = self.pred(&ops[0], line)?;
                    let (a, an) = self.pred(&ops[1], line)?;
                    Op::PredLogic {
                        op: None,
                        d,
                        a,
                        an,
                        b: a,
                        bn: an,
                    }
                } else if let Operand::Vector(_) = &ops[1] {
                    let (parts, _) = self.vec_regs(&ops[1], line, false)?;
                    let d = self.dst(&ops[0], line)?;
                    let bits = t.size() * 8 / parts.len() as u32;
                    Op::Pack { d, parts, bits }
                } else if let Operand::Vector(_) = &ops[0] {
                    let (parts, _) = self.vec_regs(&ops[0], line, true)?;
                    let s = self.src(&ops[1], line)?;
                    let bits = t.size() * 8 / parts.len() as u32;
                    Op::Unpack { s, parts, bits }
                } else {
                    let d = self.dst(&ops[0], line)?;
                    if let Operand::Name(n) = &ops[1] {
                        let kind = match n.as_str() {
                            "%clock" => Some(0),
                            "%clock64" => Some(1),
                            "%globaltimer" | "%globaltimer_lo" => Some(2),
                            _ => None,
                        };
                        if let Some(kind) = kind {
                            self.emit(Op::Clock { d, kind }, guard, line);
                            return Ok(());
                        }
                    }
                    let a = self.src_typed(&ops[1], t, line)?;
                    aff = Aff::Mov {
                        d,
                        a,
                        bits: (t.size() * 8) as u8,
                    };
                    Op::Mov(d, a, mask_of(t.size() * 8))
                }
            }
            "cvta" => {
                need(2)?;
                let d = self.dst(&ops[0], line)?;
                let a = self.src(&ops[1], line)?;
                let to = i.has("to");
                let win = if i.has("shared") {
                    SHARED_WINDOW
                } else if i.has("local") {
                    LOCAL_WINDOW
                } else {
                    0
                };
                if win == 0 {
                    aff = Aff::Mov { d, a, bits: 64 };
                    Op::Mov(d, a, u64::MAX)
                } else {
                    let k = self.konst(if to { win.wrapping_neg() } else { win });
                    aff = Aff::Add {
                        d,
                        a,
                        b: k,
                        bits: 64,
                        sub: false,
                    };
                    Op::Bin(ops::add::<u64>, d, a, k)
                }
            }
            "cvt" if i.has("tf32") => {
                need(2)?;
                if types != [ScalarType::F32] {
                    return derr(
                        line,
                        format!("`{}`: tf32 is converted from f32", i.full_name()),
                    );
                }
                let d = self.dst(&ops[0], line)?;
                let a = self.src_typed(&ops[1], ScalarType::F32, line)?;
                let f: UnFn = match (
                    i.has("rna"),
                    i.has("rn"),
                    i.has("rz"),
                    i.has("relu"),
                    i.has("satfinite"),
                ) {
                    (true, _, _, false, false) => ops::tf32::<0, false, false>,
                    (true, _, _, false, true) => ops::tf32::<0, false, true>,
                    (_, true, _, false, false) => ops::tf32::<1, false, false>,
                    (_, true, _, true, false) => ops::tf32::<1, true, false>,
                    (_, true, _, false, true) => ops::tf32::<1, false, true>,
                    (_, true, _, true, true) => ops::tf32::<1, true, true>,
                    (_, _, true, false, false) => ops::tf32::<2, false, false>,
                    (_, _, true, true, false) => ops::tf32::<2, true, false>,
                    (_, _, true, false, true) => ops::tf32::<2, false, true>,
                    (_, _, true, true, true) => ops::tf32::<2, true, true>,
                    _ => return derr(line, format!("`{}` is not supported", i.full_name())),
                };
                Op::Un(f, d, a)
            }
            "cvt" if types.len() == 2 && types[0] == ScalarType::F16x2 => {
                // cvt.rn{.relu}.{f16x2,bf16x2}.f32 d, a, b
                need(3)?;
                if types[1] != ScalarType::F32 || !i.has("rn") {
                    return derr(line, format!("`{}` is not supported", i.full_name()));
                }
                let d = self.dst(&ops[0], line)?;
                let a = self.src_typed(&ops[1], ScalarType::F32, line)?;
                let b = self.src_typed(&ops[2], ScalarType::F32, line)?;
                let f: BinFn = match (i.has("bf16x2"), i.has("relu")) {
                    (false, false) => ops::cvt_pack_half::<false, false>,
                    (false, true) => ops::cvt_pack_half::<false, true>,
                    (true, false) => ops::cvt_pack_half::<true, false>,
                    (true, true) => ops::cvt_pack_half::<true, true>,
                };
                Op::Bin(f, d, a, b)
            }
            "cvt"
                if i.has("relu")
                    && types.len() == 2
                    && matches!(types[0], ScalarType::F16 | ScalarType::Bf16)
                    && types[1] == ScalarType::F32 =>
            {
                need(2)?;
                let d = self.dst(&ops[0], line)?;
                let a = self.src_typed(&ops[1], ScalarType::F32, line)?;
                if types[0] == ScalarType::Bf16 {
                    Op::Un(ops::cvt_half_relu::<true>, d, a)
                } else {
                    Op::Un(ops::cvt_half_relu::<false>, d, a)
                }
            }
            "cvt" => {
                need(2)?;
                if types.len() != 2 {
                    return derr(line, "cvt needs a destination and a source type");
                }
                let (dt, st) = (types[0], types[1]);
                let d = self.dst(&ops[0], line)?;
                let a = self.src_typed(&ops[1], st, line)?;
                let (rnd, irnd) = rnd_of(i);
                let sat = i.has("sat");
                let (dc, sc) = match (cvt_ty(dt), cvt_ty(st)) {
                    (Some(x), Some(y)) => (x, y),
                    _ => {
                        return derr(
                            line,
                            format!("cvt.{}.{} is not supported", dt.name(), st.name()),
                        )
                    }
                };
                match cvt_fast(dc, sc, rnd, irnd, sat, ftz) {
                    Some(f) => {
                        sem = Sem::Cvt {
                            dt: dc,
                            st: sc,
                            rnd,
                        };
                        Op::Un(f, d, a)
                    }
                    None => Op::Cvt {
                        d,
                        a,
                        dt: dc,
                        st: sc,
                        rnd,
                        irnd,
                        sat,
                        ftz,
                    },
                }
            }
            "setp" | "set" => {
                need(3)?;
                let t = *types.last().ok_or(DecodeError {
                    line,
                    message: "setp without a type".into(),
                })?;
                let src_t = if i.opcode == "set" {
                    types[types.len() - 1]
                } else {
                    t
                };
                let code = i
                    .modifiers
                    .iter()
                    .find_map(|m| cmp_code(m))
                    .ok_or(DecodeError {
                        line,
                        message: "missing comparison".into(),
                    })?;
                let f = cmp_fn(src_t, code, ftz, line)?;
                let a = self.src_typed(&ops[1], src_t, line)?;
                let b = self.src_typed(&ops[2], src_t, line)?;
                let bop = if i.has("and") {
                    Some(BoolOp::And)
                } else if i.has("or") {
                    Some(BoolOp::Or)
                } else if i.has("xor") {
                    Some(BoolOp::Xor)
                } else {
                    None
                };
                let comb = match bop {
                    Some(op) => {
                        need(4)?;
                        let (c, cn) = self.pred(&ops[3], line)?;
                        Some((op, c, cn))
                    }
                    None => None,
                };
                if i.opcode == "set" {
                    let p = self.new_pred();
                    self.emit(
                        Op::Setp {
                            f,
                            d: p,
                            dn: None,
                            a,
                            b,
                            comb,
                        },
                        guard,
                        line,
                    );
                    let d = self.dst(&ops[0], line)?;
                    let dt = types[0];
                    let (tv, fv) = if dt == ScalarType::F32 {
                        (0x3f80_0000, 0)
                    } else {
                        (0xffff_ffff, 0)
                    };
                    let tr = self.konst(tv);
                    let fr = self.konst(fv);
                    Op::Selp {
                        d,
                        a: tr,
                        b: fr,
                        p,
                        neg: false,
                    }
                } else {
                    use ScalarType::*;
                    if matches!(src_t, F32 | F64) && !ftz {
                        sem = Sem::FCmp {
                            code,
                            f64: src_t == F64,
                        };
                    }
                    if code <= 5
                        && matches!(src_t, U16 | B16 | S16 | U32 | B32 | S32 | U64 | B64 | S64)
                    {
                        aff = Aff::Cmp {
                            bits: (src_t.size() * 8) as u8,
                            signed: matches!(src_t, S16 | S32 | S64),
                            code,
                        };
                    }
                    let (d, dn) = match &ops[0] {
                        Operand::Pair(p, q) => {
                            let (p, _) = self.pred(&Operand::Name(p.clone()), line)?;
                            let (q, _) = self.pred(&Operand::Name(q.clone()), line)?;
                            (p, Some(q))
                        }
                        o => (self.pred(o, line)?.0, None),
                    };
                    Op::Setp {
                        f,
                        d,
                        dn,
                        a,
                        b,
                        comb,
                    }
                }
            }
            "selp" => {
                need(4)?;
                let t = need_ty()?;
                let d = self.dst(&ops[0], line)?;
                let a = self.src_typed(&ops[1], t, line)?;
                let b = self.src_typed(&ops[2], t, line)?;
                let (p, neg) = self.pred(&ops[3], line)?;
                Op::Selp { d, a, b, p, neg }
            }
            "ld" if ["acquire", "volatile", "relaxed"].iter().any(|m| i.has(m))
                && !i.has("shared")
                && !i.has("local")
                && !i.has("param") =>
            {
                self.emit(Op::SpinHint, guard, line);
                self.mem(i, &types, line)?
            }
            "ld" | "ldu" | "st" => self.mem(i, &types, line)?,
            "tex" => self.tex(i, &types, line)?,
            "suld" | "sust" => self.surf(i, &types, line)?,
            "tld4" | "txq" | "suq" | "sured" | "istypep" => {
                return derr(
                    line,
                    format!(
                        "`{}` is not supported (tex, suld.b and sust.b are)",
                        i.full_name()
                    ),
                )
            }
            "atom" | "red" => {
                let is_red = i.opcode == "red";
                need(if is_red { 2 } else { 3 })?;
                let t = need_ty()?;
                let sp = if i.has("shared") {
                    Sp::Shared
                } else if i.has("global") {
                    Sp::Global
                } else {
                    Sp::Generic
                };
                let op = [
                    ("add", AtomOp::Add),
                    ("min", AtomOp::Min),
                    ("max", AtomOp::Max),
                    ("inc", AtomOp::Inc),
                    ("dec", AtomOp::Dec),
                    ("exch", AtomOp::Exch),
                    ("cas", AtomOp::Cas),
                    ("and", AtomOp::And),
                    ("or", AtomOp::Or),
                    ("xor", AtomOp::Xor),
                ]
                .iter()
                .find(|(n, _)| i.has(n))
                .map(|x| x.1)
                .ok_or(DecodeError {
                    line,
                    message: format!("`{}`: unknown atomic operation", i.full_name()),
                })?;
                let aty = match t {
                    ScalarType::U32 | ScalarType::B32 => AtomTy::U32,
                    ScalarType::S32 => AtomTy::S32,
                    ScalarType::U64 | ScalarType::B64 => AtomTy::U64,
                    ScalarType::S64 => AtomTy::S64,
                    ScalarType::F32 => AtomTy::F32,
                    ScalarType::F64 => AtomTy::F64,
                    t => return derr(line, format!("atomics on .{} are not supported", t.name())),
                };
                let k = if is_red { 0 } else { 1 };
                let d = if is_red {
                    None
                } else {
                    Some(self.dst(&ops[0], line)?)
                };
                let (a, off, spo) = self.addr(&ops[k], line)?;
                let b = self.src_typed(&ops[k + 1], t, line)?;
                let c = if op == AtomOp::Cas {
                    need(k + 3)?;
                    self.src_typed(&ops[k + 2], t, line)?
                } else {
                    b
                };
                Op::Atom {
                    sp: spo.unwrap_or(sp),
                    op,
                    ty: aty,
                    d,
                    a,
                    off,
                    b,
                    c,
                }
            }
            "brx" => return derr(line, "brx.idx (indirect branch) is not supported"),
            "bra" => {
                need(1)?;
                let Operand::Name(l) = &ops[0] else {
                    return derr(line, "bra needs a label");
                };
                self.fixups
                    .push((self.insts.len(), self.instance, l.clone(), line));
                Op::Bra { target: 0 }
            }
            "ret" | "exit" => {
                if i.opcode == "ret" {
                    if let Some(l) = self.ret_label.clone() {
                        self.fixups.push((self.insts.len(), self.instance, l, line));
                        self.emit(Op::Bra { target: 0 }, guard, line);
                        return Ok(());
                    }
                }
                Op::Exit
            }
            "bar" | "barrier" => {
                if i.has("warp") {
                    self.lockstep = true;
                    Op::Nop
                } else if i.has("arrive") {
                    return derr(line, format!("`{}` is not supported", i.full_name()));
                } else if i.has("red") {
                    need(3)?;
                    let mode = if i.has("popc") {
                        0
                    } else if i.has("and") {
                        1
                    } else if i.has("or") {
                        2
                    } else {
                        return derr(line, "bar.red needs .popc, .and or .or");
                    };
                    let (src, neg) = self.pred(&ops[ops.len() - 1], line)?;
                    let d = if mode == 0 {
                        self.dst(&ops[0], line)?
                    } else {
                        self.pred(&ops[0], line)?.0
                    };
                    Op::Bar {
                        red: Some(BarRed { mode, d, src, neg }),
                    }
                } else {
                    Op::Bar { red: None }
                }
            }
            "membar" | "fence" => {
                self.fences = true;
                Op::Nop
            }
            "call" => return self.call(i, guard),
            "wmma" => self.wmma(i, line)?,
            "shfl" => {
                need(4)?;
                let mode = if i.has("up") {
                    ShflMode::Up
                } else if i.has("down") {
                    ShflMode::Down
                } else if i.has("bfly") {
                    ShflMode::Bfly
                } else {
                    ShflMode::Idx
                };
                let (d, p) = match &ops[0] {
                    Operand::Pair(d, p) => {
                        let d = self.dst(&Operand::Name(d.clone()), line)?;
                        let (p, _) = self.pred(&Operand::Name(p.clone()), line)?;
                        (d, Some(p))
                    }
                    o => (self.dst(o, line)?, None),
                };
                let a = self.src(&ops[1], line)?;
                let b = self.src(&ops[2], line)?;
                let c = self.src(&ops[3], line)?;
                Op::Shfl {
                    mode,
                    d,
                    p,
                    a,
                    b,
                    c,
                }
            }
            "match" => {
                need(3)?;
                let t = need_ty()?;
                if !matches!(t, ScalarType::B32 | ScalarType::B64) {
                    return derr(line, format!("{} needs .b32 or .b64", i.full_name()));
                }
                let all = i.has("all");
                if !all && !i.has("any") {
                    return derr(line, format!("{}: .any or .all", i.full_name()));
                }
                let (d, p) = match &ops[0] {
                    Operand::Pair(d, p) if all => {
                        let d = self.dst(&Operand::Name(d.clone()), line)?;
                        let (p, _) = self.pred(&Operand::Name(p.clone()), line)?;
                        (d, Some(p))
                    }
                    o => (self.dst(o, line)?, None),
                };
                let a = self.src(&ops[1], line)?;
                let member = self.src_typed(&ops[2], ScalarType::B32, line)?;
                Op::Match {
                    d,
                    p,
                    a,
                    member,
                    all,
                    w64: t == ScalarType::B64,
                }
            }
            "vote" => {
                need(2)?;
                let mode = if i.has("ballot") {
                    VoteMode::Ballot
                } else if i.has("all") {
                    VoteMode::All
                } else if i.has("any") {
                    VoteMode::Any
                } else {
                    VoteMode::Uni
                };
                let (src, neg) = self.pred(&ops[1], line)?;
                let d = if mode == VoteMode::Ballot {
                    self.dst(&ops[0], line)?
                } else {
                    self.pred(&ops[0], line)?.0
                };
                let member = match ops.get(2) {
                    Some(m) if i.has("sync") => Some(self.src_typed(m, ScalarType::B32, line)?),
                    _ => None,
                };
                Op::Vote {
                    mode,
                    d,
                    src,
                    neg,
                    member,
                }
            }
            "redux" => {
                need(2)?;
                let t = need_ty()?;
                let op = [
                    ("add", 0u8),
                    ("min", 1),
                    ("max", 2),
                    ("and", 3),
                    ("or", 4),
                    ("xor", 5),
                ]
                .iter()
                .find(|(n, _)| i.has(n))
                .map(|x| x.1)
                .ok_or(DecodeError {
                    line,
                    message: format!("`{}`: unknown reduction", i.full_name()),
                })?;
                if t.size() != 4 || matches!(t, ScalarType::F32) {
                    return derr(line, "redux.sync needs a 32-bit integer type");
                }
                need(3)?;
                let d = self.dst(&ops[0], line)?;
                let a = self.src(&ops[1], line)?;
                let member = self.src_typed(&ops[2], ScalarType::B32, line)?;
                Op::Redux {
                    d,
                    a,
                    op,
                    signed: t == ScalarType::S32,
                    member,
                }
            }
            "bmsk" => {
                need(3)?;
                if types != [ScalarType::B32] {
                    return derr(line, format!("`{}`: bmsk is .b32", i.full_name()));
                }
                let d = self.dst(&ops[0], line)?;
                let a = self.src(&ops[1], line)?;
                let b = self.src(&ops[2], line)?;
                let f: BinFn = if i.has("wrap") {
                    ops::bmsk::<true>
                } else {
                    ops::bmsk::<false>
                };
                Op::Bin(f, d, a, b)
            }
            "vabsdiff4" => {
                need(4)?;
                if !i.has("add") || types.len() != 3 || i.has("sat") {
                    return derr(
                        line,
                        format!(
                            "`{}`: only the .add (sum) form of vabsdiff4 is supported",
                            i.full_name()
                        ),
                    );
                }
                let d = self.dst(&ops[0], line)?;
                let a = self.src(&ops[1], line)?;
                let b = self.src(&ops[2], line)?;
                let c = self.src(&ops[3], line)?;
                let f: TerFn = if types[1] == ScalarType::S32 {
                    ops::vabsdiff4_add::<true>
                } else {
                    ops::vabsdiff4_add::<false>
                };
                Op::Ter(f, d, a, b, c)
            }
            "dp4a" | "dp2a" => {
                need(4)?;
                if types.len() != 2 {
                    return derr(line, "dp4a/dp2a need two types");
                }
                let d = self.dst(&ops[0], line)?;
                let a = self.src(&ops[1], line)?;
                let b = self.src(&ops[2], line)?;
                let c = self.src(&ops[3], line)?;
                let (sa, sb) = (types[0] == ScalarType::S32, types[1] == ScalarType::S32);
                let hi = i.has("hi");
                let f: TerFn = match (i.opcode.as_str(), sa, sb, hi) {
                    ("dp4a", false, false, _) => ops::dp4a::<false, false>,
                    ("dp4a", false, true, _) => ops::dp4a::<false, true>,
                    ("dp4a", true, false, _) => ops::dp4a::<true, false>,
                    ("dp4a", true, true, _) => ops::dp4a::<true, true>,
                    (_, false, false, h) => {
                        if h {
                            ops::dp2a::<false, false, true>
                        } else {
                            ops::dp2a::<false, false, false>
                        }
                    }
                    (_, false, true, h) => {
                        if h {
                            ops::dp2a::<false, true, true>
                        } else {
                            ops::dp2a::<false, true, false>
                        }
                    }
                    (_, true, false, h) => {
                        if h {
                            ops::dp2a::<true, false, true>
                        } else {
                            ops::dp2a::<true, false, false>
                        }
                    }
                    (_, true, true, h) => {
                        if h {
                            ops::dp2a::<true, true, true>
                        } else {
                            ops::dp2a::<true, true, false>
                        }
                    }
                };
                Op::Ter(f, d, a, b, c)
            }
            "activemask" => {
                need(1)?;
                Op::Activemask(self.dst(&ops[0], line)?)
            }
            "pmevent" | "nanosleep" | "prefetch" | "prefetchu" => Op::Nop,
            "mbarrier" => self.mbarrier(i, line)?,
            "cp" if i.has("async") && i.has("mbarrier") && i.has("arrive") => {
                // The copies complete at once: a plain arrival, or, without `.noinc`
                // (which counted the copies in), nothing.
                if i.has("noinc") {
                    let (a, off, sp) = self.addr(&ops[0], line)?;
                    Op::MbarArrive {
                        sp: sp.unwrap_or(if i.has("shared") {
                            Sp::Shared
                        } else {
                            Sp::Generic
                        }),
                        a,
                        off,
                        count: None,
                        d: None,
                        drop: false,
                    }
                } else {
                    Op::Nop
                }
            }
            // The asynchronous copy completes at once (a completion the wait allows);
            // committing and waiting for groups has nothing left to do.
            "cp" if i.has("async")
                && (i.has("commit_group") || i.has("wait_group") || i.has("wait_all")) =>
            {
                Op::Nop
            }
            "cp" if i.has("async") && i.has("shared") && i.has("global") && !i.has("bulk") => {
                self.cp_async(i, guard, line)?
            }
            "trap" | "brkpt" => Op::Trap,
            o => {
                return derr(
                    line,
                    format!("instruction `{o}` (`{}`) is not supported", i.full_name()),
                )
            }
        };
        if let Op::Ld { a, .. } | Op::St { a, .. } = op {
            aff = Aff::Mem { a };
        }
        self.emit(op, guard, line);
        if let Some(last) = self.insts.last_mut() {
            last.aff = aff;
            last.sem = sem;
        }
        let _ = ftz;
        Ok(())
    }

    /// The `mbarrier` instructions of shared-memory barrier objects.
    fn mbarrier(&mut self, i: &Instruction, line: u32) -> DResult<Op> {
        let ops = &i.operands;
        let shared = i.modifiers.iter().any(|m| m.starts_with("shared"));
        let space = |spo: Option<Sp>| spo.unwrap_or(if shared { Sp::Shared } else { Sp::Generic });
        if i.has("inval") {
            return Ok(Op::Nop);
        }
        if i.has("init") {
            if ops.len() != 2 {
                return derr(line, "mbarrier.init needs 2 operands");
            }
            let (a, off, spo) = self.addr(&ops[0], line)?;
            let count = self.src_typed(&ops[1], ScalarType::B32, line)?;
            return Ok(Op::MbarInit {
                sp: space(spo),
                a,
                off,
                count,
            });
        }
        if i.has("arrive") || i.has("arrive_drop") {
            if ops.len() < 2 || ops.len() > 3 || i.has("expect_tx") {
                return derr(line, format!("`{}` is not supported", i.full_name()));
            }
            let d = match &ops[0] {
                Operand::Name(n) if n == "_" => None,
                o => Some(self.dst(o, line)?),
            };
            let (a, off, spo) = self.addr(&ops[1], line)?;
            let count = match ops.get(2) {
                Some(o) => Some(self.src_typed(o, ScalarType::B32, line)?),
                None => None,
            };
            return Ok(Op::MbarArrive {
                sp: space(spo),
                a,
                off,
                count,
                d,
                drop: i.has("arrive_drop"),
            });
        }
        if i.has("test_wait") || i.has("try_wait") {
            if ops.len() < 3 {
                return derr(line, format!("`{}` needs 3 operands", i.full_name()));
            }
            let (p, _) = self.pred(&ops[0], line)?;
            let (a, off, spo) = self.addr(&ops[1], line)?;
            let state = self.src_typed(&ops[2], ScalarType::B64, line)?;
            return Ok(Op::MbarWait {
                sp: space(spo),
                a,
                off,
                p,
                state,
                parity: i.has("parity"),
            });
        }
        derr(line, format!("`{}` is not supported", i.full_name()))
    }

    /// `cp.async.{ca,cg}.shared.global [dst], [src], cp-size{, src-size}`: the copy, done
    /// at once as a load (emitted here) and a store (returned); bytes past `src-size`
    /// are zero, as the instruction fills them.
    fn cp_async(&mut self, i: &Instruction, guard: Option<(P, bool)>, line: u32) -> DResult<Op> {
        let ops = &i.operands;
        if ops.len() < 3 {
            return derr(line, format!("`{}` needs 3 operands", i.full_name()));
        }
        let size = match &ops[2] {
            Operand::Int(n @ (4 | 8 | 16)) => *n as u32,
            _ => return derr(line, "cp.async: the copy size must be 4, 8 or 16"),
        };
        // An explicit source size: only the full one (the zero-filling forms are not
        // modelled yet), or 0 (nothing read: all zero).
        // `.L2::cache_hint` adds a cache-policy operand last.
        let hinted = i.modifiers.iter().any(|m| m.starts_with("L2"));
        let src_op = if ops.len() == 5 || (ops.len() == 4 && !hinted) {
            ops.get(3)
        } else {
            None
        };
        let src_size = match src_op {
            None => size,
            Some(Operand::Int(n)) if *n as u32 == size || *n == 0 => *n as u32,
            Some(_) => {
                return derr(
                    line,
                    "cp.async with a run-time source size is not supported",
                )
            }
        };
        let (words, n) = if size == 16 {
            (4u32, 4u8)
        } else {
            (size / 4, (size / 4) as u8)
        };
        let regs: Vec<R> = (0..words).map(|_| self.new_reg()).collect();
        let mut d = [0; 4];
        d[..regs.len()].copy_from_slice(&regs);
        let (sa, soff, _) = self.addr(&ops[1], line)?;
        let (da, doff, _) = self.addr(&ops[0], line)?;
        if src_size == 0 {
            let z = self.konst(0);
            let mut s = [0; 4];
            s[..n as usize].fill(z);
            return Ok(Op::St {
                sp: Sp::Shared,
                size: 4,
                n,
                s,
                a: da,
                off: doff,
            });
        }
        self.emit(
            Op::Ld {
                sp: Sp::Global,
                size: 4,
                sext: false,
                n,
                d,
                a: sa,
                off: soff,
                dmask: mask_of(32),
            },
            guard,
            line,
        );
        Ok(Op::St {
            sp: Sp::Shared,
            size: 4,
            n,
            s: d,
            a: da,
            off: doff,
        })
    }

    /// The texture or surface register and coordinates of `[obj, {coords}]`.
    fn texture_operand<'o>(
        &mut self,
        o: &'o Operand,
        what: &str,
        line: u32,
    ) -> DResult<(R, &'o [Operand])> {
        let Operand::Texture { object, coords } = o else {
            return derr(
                line,
                format!("{what}: expected `[object, {{coordinates}}]`"),
            );
        };
        match self.lookup(object) {
            Some(Sym::Reg(r, _)) => Ok((r, coords)),
            _ => derr(
                line,
                format!(
                    "{what} through `{object}`: texture and surface references (.texref, \
                     .surfref) are not supported, only objects (a 64-bit register)"
                ),
            ),
        }
    }

    /// `tex.geom.v4.dtype.ctype d, [obj, {coords}]`.
    fn tex(&mut self, i: &Instruction, types: &[ScalarType], line: u32) -> DResult<Op> {
        use crate::texture::Result4;
        let name = i.full_name();
        let [dt, ct] = types else {
            return derr(
                line,
                format!("`{name}`: expected a result and a coordinate type"),
            );
        };
        if i.operands.len() != 2 || !i.has("v4") {
            return derr(
                line,
                format!("`{name}`: only tex.v4 with no offset, depth or lod operand is supported"),
            );
        }
        let ret = match dt {
            ScalarType::F32 => Result4::F32,
            ScalarType::S32 => Result4::S32,
            ScalarType::U32 => Result4::U32,
            t => {
                return derr(
                    line,
                    format!("`{name}`: .{} results are not supported", t.name()),
                )
            }
        };
        let int_coords = match ct {
            ScalarType::F32 => false,
            ScalarType::S32 => true,
            t => {
                return derr(
                    line,
                    format!("`{name}`: .{} coordinates are not supported", t.name()),
                )
            }
        };
        if i.has("level") || i.has("grad") {
            return derr(
                line,
                format!("`{name}`: mipmap levels and gradients are not supported"),
            );
        }
        // Coordinates a geometry takes (a layer first for arrays), and how many of them
        // are coordinates proper.
        let (layered, dims) = if i.has("1d") {
            (false, 1)
        } else if i.has("2d") {
            (false, 2)
        } else if i.has("3d") {
            (false, 3)
        } else if i.has("a1d") {
            (true, 1)
        } else if i.has("a2d") {
            (true, 2)
        } else if i.has("cube") {
            (false, 3)
        } else if i.has("acube") {
            (true, 3)
        } else {
            return derr(
                line,
                format!("`{name}`: only the 1d, 2d, 3d, a1d, a2d, cube and acube geometries are supported"),
            );
        };
        let (d, _) = self.vec_regs(&i.operands[0], line, true)?;
        if d.len() != 4 {
            return derr(line, format!("`{name}`: four destinations expected"));
        }
        let (obj, cs) = self.texture_operand(&i.operands[1], &name, line)?;
        let first = usize::from(layered);
        if cs.len() < first + dims {
            return derr(line, format!("`{name}`: {} coordinates given", cs.len()));
        }
        let layer = if layered {
            Some(self.src(&cs[0], line)?)
        } else {
            None
        };
        let mut coords = [0; 3];
        for (k, c) in cs[first..first + dims].iter().enumerate() {
            coords[k] = self.src(c, line)?;
        }
        for c in coords.iter_mut().skip(dims) {
            *c = self.konst(0);
        }
        Ok(Op::Tex {
            d: [d[0], d[1], d[2], d[3]],
            obj,
            coords,
            layer,
            int_coords,
            ret,
        })
    }

    /// `suld.b.geom[.vN].bW.mode v, [obj, {coords}]` and `sust.b.geom[.vN].bW.mode [obj,
    /// {coords}], v`.
    fn surf(&mut self, i: &Instruction, types: &[ScalarType], line: u32) -> DResult<Op> {
        use crate::texture::Bounds;
        let name = i.full_name();
        let store = i.opcode == "sust";
        if !i.has("b") || i.operands.len() != 2 {
            return derr(
                line,
                format!("`{name}`: only the .b (unformatted) form is supported"),
            );
        }
        let size = match types {
            [ScalarType::B8] => 1,
            [ScalarType::B16] => 2,
            [ScalarType::B32] => 4,
            [ScalarType::B64] => 8,
            _ => return derr(line, format!("`{name}`: expected .b8, .b16, .b32 or .b64")),
        };
        let n: u8 = if i.has("v4") {
            4
        } else if i.has("v2") {
            2
        } else {
            1
        };
        let bounds = if i.has("clamp") {
            Bounds::Clamp
        } else if i.has("zero") {
            Bounds::Zero
        } else {
            Bounds::Trap
        };
        let ncoords: u8 = if i.has("1d") {
            1
        } else if i.has("2d") || i.has("a1d") {
            2
        } else if i.has("3d") || i.has("a2d") {
            3
        } else {
            return derr(
                line,
                format!("`{name}`: only the 1d, 2d, 3d, a1d and a2d geometries are supported"),
            );
        };
        if i.has("a1d") || i.has("a2d") {
            return derr(
                line,
                format!("`{name}`: layered surfaces are not supported"),
            );
        }
        let (vo, ao) = if store {
            (&i.operands[1], &i.operands[0])
        } else {
            (&i.operands[0], &i.operands[1])
        };
        let (vs, _) = self.vec_regs(vo, line, !store)?;
        if vs.len() != n as usize {
            return derr(
                line,
                format!("`{name}`: {} values for a vector of {n}", vs.len()),
            );
        }
        let (obj, cs) = self.texture_operand(ao, &name, line)?;
        if cs.len() < ncoords as usize {
            return derr(line, format!("`{name}`: {} coordinates given", cs.len()));
        }
        let mut coords = [0; 3];
        for (k, c) in cs[..ncoords as usize].iter().enumerate() {
            coords[k] = self.src(c, line)?;
        }
        let mut v = [0; 4];
        v[..vs.len()].copy_from_slice(&vs);
        Ok(Op::Surf {
            store,
            v,
            n,
            size,
            obj,
            coords,
            ncoords,
            bounds,
        })
    }

    /// `wmma.load`, `wmma.store`, `wmma.mma`: each fragment a vector of as many
    /// registers as PTX gives it.
    fn wmma(&mut self, i: &Instruction, line: u32) -> DResult<Op> {
        use crate::wmma::{parse, Form, Use, Wmma};
        let form =
            parse(&i.modifiers).or_else(|e| derr(line, format!("`{}`: {e}", i.full_name())))?;
        let regs = |this: &mut Self, o: &Operand, n: usize, dest: bool| -> DResult<Vec<R>> {
            let (rs, _) = this.vec_regs(o, line, dest)?;
            if rs.len() != n || !matches!(o, Operand::Vector(_)) {
                return derr(
                    line,
                    format!(
                        "`{}`: a fragment of {n} registers {{...}} expected",
                        i.full_name()
                    ),
                );
            }
            Ok(rs)
        };
        let ops = &i.operands;
        let w = match form {
            Form::Memory {
                store,
                frag,
                col_major,
                sp,
            } => {
                if !(2..=3).contains(&ops.len()) {
                    return derr(line, format!("`{}`: 2 or 3 operands", i.full_name()));
                }
                let (aop, vop) = if store {
                    (&ops[0], &ops[1])
                } else {
                    (&ops[1], &ops[0])
                };
                let (a, off, spo) = self.addr(aop, line)?;
                let sp = match (spo, sp) {
                    (Some(s), Sp::Generic) => s,
                    (_, s) => s,
                };
                let stride = match ops.get(2) {
                    Some(o) => Some(self.src_typed(o, ScalarType::U32, line)?),
                    None => None,
                };
                let v = regs(self, vop, frag.regs(), !store)?;
                if store {
                    Wmma::Store {
                        frag: frag.places(),
                        col_major,
                        sp,
                        s: v,
                        a,
                        off,
                        stride,
                    }
                } else {
                    Wmma::Load {
                        frag: frag.places(),
                        col_major,
                        sp,
                        d: v,
                        a,
                        off,
                        stride,
                    }
                }
            }
            Form::Mma(mma) => {
                if ops.len() != 4 {
                    return derr(line, format!("`{}`: 4 operands", i.full_name()));
                }
                let a = regs(self, &ops[1], mma.frag(Use::A).regs(), false)?;
                let b = regs(self, &ops[2], mma.frag(Use::B).regs(), false)?;
                let c = regs(self, &ops[3], mma.frag(Use::C).regs(), false)?;
                let d = regs(self, &ops[0], mma.d_frag().regs(), true)?;
                let places = Box::new([
                    mma.frag(Use::A).places(),
                    mma.frag(Use::B).places(),
                    mma.frag(Use::C).places(),
                    mma.d_frag().places(),
                ]);
                Wmma::Mma {
                    mma,
                    places,
                    d,
                    a,
                    b,
                    c,
                }
            }
        };
        Ok(Op::Wmma(Box::new(w)))
    }

    fn mem(&mut self, i: &Instruction, types: &[ScalarType], line: u32) -> DResult<Op> {
        let is_st = i.opcode == "st";
        if i.operands.len() < 2 {
            return derr(line, "memory instruction needs 2 operands");
        }
        let t = *types.last().ok_or(DecodeError {
            line,
            message: "missing type".into(),
        })?;
        let n: u8 = if i.has("v4") {
            4
        } else if i.has("v2") {
            2
        } else {
            1
        };
        if matches!(t, ScalarType::B128 | ScalarType::Pred) {
            return derr(
                line,
                format!(
                    "`{}`: .{} memory accesses are not supported",
                    i.full_name(),
                    t.name()
                ),
            );
        }
        let size = t.size() as u8;
        let sext = matches!(t, ScalarType::S8 | ScalarType::S16 | ScalarType::S32);
        if ["volatile", "relaxed", "acquire", "release", "mmio"]
            .iter()
            .any(|m| i.has(m))
        {
            self.lockstep = true;
        }
        let space = if i.has("global") {
            Sp::Global
        } else if i.has("shared") {
            Sp::Shared
        } else if i.has("local") {
            Sp::Local
        } else if i.has("const") {
            Sp::Global
        } else if i.has("param") {
            Sp::Local
        } else {
            Sp::Generic
        };
        let (aop, vop) = if is_st {
            (&i.operands[0], &i.operands[1])
        } else {
            (&i.operands[1], &i.operands[0])
        };
        // Kernel parameters.
        if i.has("param") && !is_st {
            if let Operand::Address {
                base: Some(b),
                offset,
            } = aop
            {
                if let Some(Sym::KParam(off, psize)) = self.lookup(b) {
                    let total = *offset + (size as i64) * (n as i64);
                    if *offset < 0 || total > psize as i64 {
                        return derr(line, format!("load outside kernel parameter {b}"));
                    }
                    let (rs, w) = self.vec_regs(vop, line, true)?;
                    let mut d = [0; 4];
                    d[..rs.len()].copy_from_slice(&rs[..rs.len().min(4)]);
                    return Ok(Op::LdParam {
                        d,
                        n,
                        size,
                        sext,
                        off: off + *offset as u32,
                        dmask: mask_of(w),
                    });
                }
            }
        }
        let (a, off, spo) = self.addr(aop, line)?;
        let sp = match (spo, space) {
            (Some(s), Sp::Generic) => s,
            (_, s) => s,
        };
        let (rs, w) = self.vec_regs(vop, line, !is_st)?;
        if rs.len() != n as usize {
            return derr(line, "vector width does not match the operand");
        }
        let mut regs = [0; 4];
        regs[..rs.len()].copy_from_slice(&rs);
        Ok(if is_st {
            let mut s = regs;
            // Float immediates stored to f32.
            if let Operand::F64(bits) = vop {
                if t == ScalarType::F32 {
                    s[0] = self.konst((f64::from_bits(*bits) as f32).to_bits() as u64);
                }
            }
            Op::St {
                sp,
                size,
                n,
                s,
                a,
                off,
            }
        } else {
            Op::Ld {
                sp,
                size,
                sext,
                n,
                d: regs,
                a,
                off,
                dmask: mask_of(w),
            }
        })
    }

    fn call(&mut self, i: &Instruction, guard: Option<(P, bool)>) -> DResult<()> {
        let line = i.line;
        // `call [(rets),] callee[, (args)][, prototype];`
        let mut rest = i.operands.as_slice();
        let mut rets: &[Operand] = &[];
        if let [Operand::List(r), tail @ ..] = rest {
            rets = r;
            rest = tail;
        }
        let [Operand::Name(fname), tail @ ..] = rest else {
            return derr(line, "unsupported call form");
        };
        rest = tail;
        let mut args: &[Operand] = &[];
        if let [Operand::List(a), tail @ ..] = rest {
            args = a;
            rest = tail;
        }
        let proto = match rest {
            [] => None,
            [Operand::Name(p)] => Some(p),
            _ => return derr(line, "unsupported call form"),
        };
        if let Some(Sym::Reg(ptr, _)) = self.lookup(fname) {
            let Some(proto) = proto else {
                return derr(
                    line,
                    format!("indirect call through {fname} without a .callprototype"),
                );
            };
            return self.indirect_call(ptr, fname, proto, rets, args, guard, line);
        }
        if proto.is_some() {
            return derr(line, "indirect calls through a prototype are not supported");
        }
        if let Some(op) = self.builtin(fname, rets, args, line)? {
            self.emit(op, guard, line);
            return Ok(());
        }
        let Some(&(f, weight)) = self.m.bodies.get(fname.as_str()) else {
            return derr(
                line,
                format!("call to {fname}, which has no body in this module"),
            );
        };
        if self.recursive(f) {
            // Recursion: inlining would not end.
            return self.call_out(f, rets, args, guard, line);
        }
        // A guarded call: branch around the inlined body.
        let skip_label = format!("$__call_skip_{}", self.next_instance);
        if let Some((p, neg)) = guard {
            self.fixups
                .push((self.insts.len(), self.instance, skip_label.clone(), line));
            self.emit(Op::Bra { target: 0 }, Some((p, !neg)), line);
        }
        self.inline(f, weight, rets, args, line)?;
        if guard.is_some() {
            self.labels
                .insert((self.instance, skip_label), self.insts.len() as u32);
        }
        Ok(())
    }

    /// `call [(rets),] %ptr, (args), proto;`: a chain of guarded inlined calls, one for
    /// each function whose address is taken and whose parameters and results have the
    /// sizes of the prototype's (but those being inlined already: recursion), each taken
    /// by the lanes whose pointer is its address; the lanes left fault ([`Op::BadCall`]).
    #[allow(clippy::too_many_arguments)]
    fn indirect_call(
        &mut self,
        ptr: R,
        via: &str,
        proto: &str,
        rets: &[Operand],
        args: &[Operand],
        guard: Option<(P, bool)>,
        line: u32,
    ) -> DResult<()> {
        let Some((psizes, rsizes)) = self
            .protos
            .get(&(self.instance, proto.to_string()))
            .cloned()
        else {
            return derr(
                line,
                format!("indirect call through {via}: no .callprototype {proto} before it"),
            );
        };
        if psizes.len() != args.len() || rsizes.len() != rets.len() {
            return derr(
                line,
                format!(
                    "indirect call through {via}: {} arguments and {} results, but prototype \
                     {proto} has {} and {}",
                    args.len(),
                    rets.len(),
                    psizes.len(),
                    rsizes.len()
                ),
            );
        }
        let sizes = |ps: &[ptx::Param], want: &[u32]| {
            ps.len() == want.len() && ps.iter().zip(want).all(|(p, &w)| p.size == w)
        };
        let m = self.m;
        let matching: Vec<(u64, &Function, u64)> = m
            .taken
            .iter()
            .filter(|(_, f, _)| sizes(&f.params, &psizes) && sizes(&f.returns, &rsizes))
            .copied()
            .collect();
        if matching.is_empty() {
            return derr(
                line,
                format!(
                    "indirect call through {via} with prototype {proto}: no function of this \
                     module whose address is taken has parameters of {psizes:?} bytes and \
                     results of {rsizes:?} bytes"
                ),
            );
        }
        let start = self.insts.len();
        let end_label = format!("$__icall_{start}_end");
        if let Some((p, neg)) = guard {
            self.fixups
                .push((self.insts.len(), self.instance, end_label.clone(), line));
            self.emit(Op::Bra { target: 0 }, Some((p, !neg)), line);
        }
        let q = self.new_pred();
        let eq = cmp_fn(ScalarType::U64, 0, false, line)?;
        for (k, (addr, f, weight)) in matching.into_iter().enumerate() {
            let b = self.konst(addr);
            self.emit(
                Op::Setp {
                    f: eq,
                    d: q,
                    dn: None,
                    a: ptr,
                    b,
                    comb: None,
                },
                None,
                line,
            );
            let next = format!("$__icall_{start}_{k}");
            self.fixups
                .push((self.insts.len(), self.instance, next.clone(), line));
            self.emit(Op::Bra { target: 0 }, Some((q, true)), line);
            if self.recursive(f) {
                self.call_out(f, rets, args, None, line)?;
            } else {
                self.inline(f, weight, rets, args, line)?;
            }
            self.fixups
                .push((self.insts.len(), self.instance, end_label.clone(), line));
            self.emit(Op::Bra { target: 0 }, None, line);
            self.labels
                .insert((self.instance, next), self.insts.len() as u32);
        }
        self.emit(Op::BadCall { a: ptr }, None, line);
        self.labels
            .insert((self.instance, end_label), self.insts.len() as u32);
        Ok(())
    }

    /// Inlines a call of `f` (whose body has [`weight`] `weight`), its parameters bound
    /// to `args` and its results to `rets`, within the call limits.
    fn inline(
        &mut self,
        f: &'a Function,
        weight: u64,
        rets: &[Operand],
        args: &[Operand],
        line: u32,
    ) -> DResult<()> {
        let fname = &f.name;
        self.check_size(line)?;
        if self.depth >= MAX_CALL_DEPTH {
            return derr(
                line,
                format!(
                    "call depth over {MAX_CALL_DEPTH} (recursion through {fname} is not supported)"
                ),
            );
        }
        if self.next_instance >= MAX_INLINED_CALLS {
            return derr(
                line,
                format!("kernel too large after inlining calls (over {MAX_INLINED_CALLS} calls)"),
            );
        }
        self.weight = self.weight.saturating_add(weight);
        if self.weight > MAX_WEIGHT {
            return derr(line, too_heavy());
        }
        if f.params.len() != args.len() || f.returns.len() != rets.len() {
            return derr(
                line,
                format!("call to {fname}: argument count does not match"),
            );
        }
        let mut bind = HashMap::new();
        for (p, a) in f
            .params
            .iter()
            .chain(f.returns.iter())
            .zip(args.iter().chain(rets.iter()))
        {
            let Operand::Name(n) = a else {
                return derr(line, "call arguments must be .param variables");
            };
            match self.lookup(n) {
                Some(s @ (Sym::Local(_) | Sym::Frame(_))) => {
                    bind.insert(p.name.clone(), s);
                }
                Some(Sym::Reg(r, w)) => {
                    bind.insert(p.name.clone(), Sym::Reg(r, w));
                }
                _ => return derr(line, format!("call argument {n} is not a .param variable")),
            }
        }
        let saved_instance = self.instance;
        let saved_ret = self.ret_label.take();
        let saved_scopes = std::mem::take(&mut self.scopes);
        self.next_instance += 1;
        self.instance = self.next_instance;
        self.depth += 1;
        self.stack.push(fname);
        let end_label = format!("$__ret_{}", self.instance);
        self.ret_label = Some(end_label.clone());
        self.scopes.push(bind);
        let r = match f.body.as_ref() {
            Some(body) => self.body(body),
            None => derr(
                line,
                format!("call to {fname}, which has no body in this module"),
            ),
        };
        self.labels
            .insert((self.instance, end_label), self.insts.len() as u32);
        self.stack.pop();
        self.depth -= 1;
        self.scopes = saved_scopes;
        self.ret_label = saved_ret;
        self.instance = saved_instance;
        r
    }
}

/// Where a call's argument or result lives: a `.param` variable of the caller (local
/// memory, at this offset, or at this offset in the running out-of-line call's frame)
/// or a register.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ArgSrc {
    Local(u64),
    Frame(u64),
    Reg(R),
}

impl<'a> Dec<'a> {
    /// Where the argument or result `o` of a call of `fname` lives.
    fn arg_src(&self, o: &Operand, fname: &str, line: u32) -> DResult<ArgSrc> {
        let Operand::Name(n) = o else {
            return derr(
                line,
                format!("{fname}: its arguments must be .param variables"),
            );
        };
        match self.lookup(n) {
            Some(Sym::Local(o)) => Ok(ArgSrc::Local(o)),
            Some(Sym::Frame(o)) => Ok(ArgSrc::Frame(o)),
            Some(Sym::Reg(r, _)) => Ok(ArgSrc::Reg(r)),
            _ => derr(
                line,
                format!("{fname}: argument {n} is not a .param variable"),
            ),
        }
    }

    /// Whether a call of `f` here is recursion (`f` is being inlined, or already runs
    /// out of line): it is made out of line.
    fn recursive(&self, f: &Function) -> bool {
        self.stack.contains(&f.name.as_str()) || self.out_ix.contains_key(f.name.as_str())
    }

    /// A call of `f` made out of line ([`OutFn`]), `f`'s body decoded later if it is
    /// not already.
    fn call_out(
        &mut self,
        f: &'a Function,
        rets: &[Operand],
        args: &[Operand],
        guard: Option<(P, bool)>,
        line: u32,
    ) -> DResult<()> {
        let fname = f.name.as_str();
        if f.params.len() != args.len() || f.returns.len() != rets.len() {
            return derr(
                line,
                format!("call to {fname}: argument count does not match"),
            );
        }
        let id = match self.out_ix.get(fname) {
            Some(&id) => id,
            None => {
                let id = self.outs.len() as u32;
                let mut at = 0u64;
                let mut layout = |ps: &[ptx::Param]| {
                    ps.iter()
                        .map(|p| {
                            at = at.next_multiple_of(p.align.clamp(1, 256) as u64);
                            let o = at;
                            at += p.size as u64;
                            (o as u32, p.size)
                        })
                        .collect::<Vec<_>>()
                };
                let params = layout(&f.params);
                let returns = layout(&f.returns);
                self.outs.push(OutFn {
                    name: f.name.clone(),
                    entry: 0,
                    ret: 0,
                    frame: at as u32,
                    regs: 0..0,
                    preds: 0..0,
                    params,
                    returns,
                });
                self.out_ix.insert(fname, id);
                self.pending.push((id, f));
                id
            }
        };
        let args = args
            .iter()
            .map(|o| self.arg_src(o, fname, line))
            .collect::<DResult<_>>()?;
        let rets = rets
            .iter()
            .map(|o| self.arg_src(o, fname, line))
            .collect::<DResult<_>>()?;
        self.emit(
            Op::Call {
                func: id,
                args,
                rets,
            },
            guard,
            line,
        );
        Ok(())
    }

    /// Decodes the bodies of the functions called out of line, after the kernel's code
    /// (each may call more out of line).
    fn outlined_bodies(&mut self) -> DResult<()> {
        while let Some((id, f)) = self.pending.pop() {
            let Some(body) = f.body.as_ref() else {
                return derr(
                    f.line,
                    format!("call to {}, which has no body in this module", f.name),
                );
            };
            let weight = weight(body);
            self.weight = self.weight.saturating_add(weight);
            if self.weight > MAX_WEIGHT {
                return derr(f.line, too_heavy());
            }
            self.check_size(f.line)?;
            let o = &self.outs[id as usize];
            let mut bind = HashMap::new();
            for (p, &(at, _)) in f
                .params
                .iter()
                .zip(&o.params)
                .chain(f.returns.iter().zip(&o.returns))
            {
                bind.insert(p.name.clone(), Sym::Frame(at as u64));
            }
            let entry = self.insts.len() as u32;
            let (r0, p0) = (self.nregs, self.npreds);
            self.next_instance += 1;
            self.instance = self.next_instance;
            let end_label = format!("$__ret_{}", self.instance);
            self.ret_label = Some(end_label.clone());
            self.scopes = vec![bind];
            self.depth = 1;
            self.stack = vec![f.name.as_str()];
            self.frame = Some(o.frame as u64);
            self.body(body)?;
            self.labels
                .insert((self.instance, end_label), self.insts.len() as u32);
            let ret = self.insts.len() as u32;
            self.emit(Op::Return { func: id }, None, f.line);
            let frame = self.frame.take().unwrap_or(0);
            if frame > STACK_SIZE as u64 {
                return derr(
                    f.line,
                    format!(
                        "{}: {frame} bytes of .local and .param variables, more than the \
                         {STACK_SIZE} bytes of stack a thread has",
                        f.name
                    ),
                );
            }
            let o = &mut self.outs[id as usize];
            o.entry = entry;
            o.ret = ret;
            o.frame = frame.next_multiple_of(MIN_FRAME).max(MIN_FRAME) as u32;
            o.regs = r0..self.nregs;
            o.preds = p0..self.npreds;
        }
        self.ret_label = None;
        self.scopes = vec![];
        self.stack.clear();
        self.depth = 0;
        Ok(())
    }

    /// The system calls a kernel makes without a body in its module (`vprintf`,
    /// `__assertfail`, `malloc`, `free`), as operations; `None` for any other callee.
    fn builtin(
        &mut self,
        fname: &str,
        rets: &[Operand],
        args: &[Operand],
        line: u32,
    ) -> DResult<Option<Op>> {
        if self.m.bodies.contains_key(fname) {
            return Ok(None);
        }
        let cdp = crate::cdp::Call::of(fname);
        let (want_args, want_rets) = match fname {
            "__assertfail" => (5, 0..=0),
            "vprintf" => (2, 0..=1),
            "malloc" => (1, 1..=1),
            "free" => (1, 0..=0),
            _ => match cdp {
                Some((_, n, _)) => (n, 0..=1),
                None => return Ok(None),
            },
        };
        if args.len() != want_args || !want_rets.contains(&rets.len()) {
            return derr(
                line,
                format!(
                    "call to {fname} with {} arguments and {} results",
                    args.len(),
                    rets.len()
                ),
            );
        }
        let mut src = |o: &Operand| self.arg_src(o, fname, line);
        Ok(Some(if let Some((call, _, ret_size)) = cdp {
            Op::Cdp {
                call,
                args: args.iter().map(&mut src).collect::<DResult<_>>()?,
                ret: rets.first().map(&mut src).transpose()?,
                ret_size,
            }
        } else if fname == "vprintf" {
            Op::Printf {
                format: src(&args[0])?,
                args: src(&args[1])?,
                ret: rets.first().map(&mut src).transpose()?,
            }
        } else if fname == "malloc" {
            Op::Malloc {
                size: src(&args[0])?,
                ret: src(&rets[0])?,
            }
        } else if fname == "free" {
            Op::Free {
                ptr: src(&args[0])?,
            }
        } else {
            Op::Assert {
                args: [
                    src(&args[0])?,
                    src(&args[1])?,
                    src(&args[2])?,
                    src(&args[3])?,
                ],
            }
        }))
    }
}

/// [`Sem`] of a two-operand arithmetic instruction of type `t` (the lane functions the
/// decoder picks for it compute the same).
fn bin_sem(i: &Instruction, t: ScalarType, is_float: bool, rnd: Rnd, ftz: bool) -> Sem {
    use ScalarType::*;
    if is_float {
        let op = match i.opcode.as_str() {
            "add" => FltOp::Add,
            "sub" => FltOp::Sub,
            "mul" => FltOp::Mul,
            "div" => FltOp::Div,
            _ => return Sem::None,
        };
        if rnd != Rnd::N || ftz || i.has("sat") || i.has("approx") || i.has("full") {
            return Sem::None;
        }
        return Sem::Flt { op, f64: t == F64 };
    }
    if !matches!(t, U16 | B16 | S16 | U32 | B32 | S32 | U64 | B64 | S64) {
        return Sem::None;
    }
    let op = match i.opcode.as_str() {
        "and" => IntOp::And,
        "or" => IntOp::Or,
        "xor" => IntOp::Xor,
        "min" if !i.has("relu") => IntOp::Min,
        "max" if !i.has("relu") => IntOp::Max,
        "div" => IntOp::Div,
        "rem" => IntOp::Rem,
        _ => return Sem::None,
    };
    Sem::Int {
        op,
        bits: (t.size() * 8) as u8,
        signed: matches!(t, S16 | S32 | S64),
    }
}

/// Whether a global atomic `op` on `ty` combines (associative and commutative on the
/// bits: integer add, and, or, xor, min, max).
pub(crate) fn combinable(op: AtomOp, ty: AtomTy) -> bool {
    !matches!(ty, AtomTy::F32 | AtomTy::F64)
        && matches!(
            op,
            AtomOp::Add | AtomOp::And | AtomOp::Or | AtomOp::Xor | AtomOp::Min | AtomOp::Max
        )
}

/// Drops the destination of global atomics whose result no instruction reads (they
/// are reductions), and says whether the program's reductions may be combined
/// ([`Program::combine_reds`]; `ordered`: it has fences or memory-ordered accesses).
fn combine_reds(insts: &mut [Inst], ordered: bool) -> bool {
    let mut read: Vec<bool> = Vec::new();
    for i in insts.iter() {
        for r in reads_writes(&i.op).0 {
            let r = r as usize;
            if read.len() <= r {
                read.resize(r + 1, false);
            }
            read[r] = true;
        }
    }
    let read = |r: R| read.get(r as usize).copied().unwrap_or(false);
    let global = |sp: Sp| matches!(sp, Sp::Global | Sp::Generic);
    let mut any = false;
    let mut ok = !ordered;
    for i in insts.iter_mut() {
        match &mut i.op {
            Op::Atom { sp, d, op, ty, .. } if global(*sp) => {
                if d.is_some_and(|r| !read(r)) {
                    *d = None;
                }
                if d.is_some() || !combinable(*op, *ty) {
                    ok = false;
                } else {
                    any = true;
                }
            }
            Op::Bar { .. }
            | Op::Call { .. }
            | Op::Cdp { .. }
            | Op::Tex { .. }
            | Op::Surf { .. }
            | Op::Wmma(..)
            | Op::SpinHint
            | Op::MbarInit { .. }
            | Op::MbarArrive { .. }
            | Op::MbarWait { .. }
            | Op::Malloc { .. }
            | Op::Free { .. } => ok = false,
            _ => {}
        }
    }
    ok && any
}

fn cvt_fast(d: CvtTy, s: CvtTy, rnd: Rnd, irnd: bool, sat: bool, ftz: bool) -> Option<UnFn> {
    // Fast paths for the common conversions; everything else goes through cvt_one.
    if !sat && !ftz {
        let float = match (d, s, rnd, irnd) {
            (CvtTy::F32, CvtTy::S(32), Rnd::N, false) => Some(ops::cvt_f32_s32 as UnFn),
            (CvtTy::F32, CvtTy::U(32), Rnd::N, false) => Some(ops::cvt_f32_u32 as UnFn),
            (CvtTy::F64, CvtTy::S(32), _, false) => Some(ops::cvt_f64_s32 as UnFn),
            (CvtTy::F64, CvtTy::U(32), _, false) => Some(ops::cvt_f64_u32 as UnFn),
            (CvtTy::F64, CvtTy::F32, _, false) => Some(ops::cvt_f64_f32 as UnFn),
            (CvtTy::F32, CvtTy::F64, Rnd::N, false) => Some(ops::cvt_f32_f64 as UnFn),
            (CvtTy::S(32) | CvtTy::U(32), CvtTy::F32, m, _) => {
                let u = d == CvtTy::U(32);
                Some(match (u, m) {
                    (false, Rnd::N) => ops::cvt_i32_f32::<false, 0> as UnFn,
                    (false, Rnd::Z) => ops::cvt_i32_f32::<false, 1>,
                    (false, Rnd::M) => ops::cvt_i32_f32::<false, 2>,
                    (false, Rnd::P) => ops::cvt_i32_f32::<false, 3>,
                    (true, Rnd::N) => ops::cvt_i32_f32::<true, 0>,
                    (true, Rnd::Z) => ops::cvt_i32_f32::<true, 1>,
                    (true, Rnd::M) => ops::cvt_i32_f32::<true, 2>,
                    (true, Rnd::P) => ops::cvt_i32_f32::<true, 3>,
                })
            }
            _ => None,
        };
        if float.is_some() {
            return float;
        }
    }
    Some(match (d, s, irnd, sat) {
        (CvtTy::U(32), CvtTy::U(64) | CvtTy::S(64), false, false) => ops::cvt_low32,
        (CvtTy::S(32), CvtTy::U(64) | CvtTy::S(64), false, false) => ops::cvt_low32,
        (CvtTy::U(64) | CvtTy::S(64), CvtTy::U(32), false, false) => ops::cvt_low32,
        (CvtTy::S(64) | CvtTy::U(64), CvtTy::S(32), false, false) => ops::cvt_sext32,
        _ => return None,
    })
}

/// Registers an operation writes in the 64-bit bank.
fn written(op: &Op) -> Vec<R> {
    match op {
        Op::Bin(_, d, ..)
        | Op::Un(_, d, _)
        | Op::Ter(_, d, ..)
        | Op::Mov(d, ..)
        | Op::Prmt(d, ..) => vec![*d],
        Op::Bfi { d, .. }
        | Op::Lop3 { d, .. }
        | Op::Carry { d, .. }
        | Op::MadCarry { d, .. }
        | Op::Cvt { d, .. }
        | Op::Selp { d, .. } => vec![*d],
        Op::Pack { d, .. }
        | Op::Shfl { d, .. }
        | Op::Match { d, .. }
        | Op::Activemask(d)
        | Op::Clock { d, .. } => {
            vec![*d]
        }
        Op::Unpack { parts, .. } => parts.clone(),
        Op::Redux { d, .. } => vec![*d],
        Op::MbarArrive { d: Some(d), .. } => vec![*d],
        Op::Malloc {
            ret: ArgSrc::Reg(r),
            ..
        }
        | Op::Printf {
            ret: Some(ArgSrc::Reg(r)),
            ..
        } => vec![*r],
        Op::Ld { n, d, .. } | Op::LdParam { n, d, .. } => d[..*n as usize].to_vec(),
        Op::Tex { d, .. } => d.to_vec(),
        Op::Surf {
            store: false, v, n, ..
        } => v[..*n as usize].to_vec(),
        Op::Atom { d, .. } => d.iter().copied().collect(),
        Op::Wmma(w) => w.reads_writes().1,
        Op::Cdp {
            ret: Some(ArgSrc::Reg(r)),
            ..
        } => vec![*r],
        Op::Call { rets, .. } => rets
            .iter()
            .filter_map(|a| match a {
                ArgSrc::Reg(r) => Some(*r),
                _ => None,
            })
            .collect(),
        Op::Vote {
            mode: VoteMode::Ballot,
            d,
            ..
        } => vec![*d],
        _ => vec![],
    }
}

/// The registers an operation reads and those it writes (every variant named: a new
/// one must say which it touches, or the engine's lane-affine tags could go stale).
pub(crate) fn reads_writes(op: &Op) -> (Vec<R>, Vec<R>) {
    let arg = |a: &ArgSrc| match a {
        ArgSrc::Reg(r) => vec![*r],
        ArgSrc::Local(_) | ArgSrc::Frame(_) => vec![],
    };
    match op {
        Op::Bin(_, d, a, b) => (vec![*a, *b], vec![*d]),
        Op::Un(_, d, a) => (vec![*a], vec![*d]),
        Op::Ter(_, d, a, b, c) => (vec![*a, *b, *c], vec![*d]),
        Op::Bfi { d, a, b, c, e, .. } => (vec![*a, *b, *c, *e], vec![*d]),
        Op::Prmt(d, a, b, c) => (vec![*a, *b, *c], vec![*d]),
        Op::Lop3 { d, a, b, c, .. } => (vec![*a, *b, *c], vec![*d]),
        Op::Carry { d, a, b, .. } => (vec![*a, *b], vec![*d]),
        Op::MadCarry { d, a, b, c, .. } => (vec![*a, *b, *c], vec![*d]),
        Op::Testp { a, .. } => (vec![*a], vec![]),
        Op::Mov(d, a, _) => (vec![*a], vec![*d]),
        Op::Pack { d, parts, .. } => (parts.clone(), vec![*d]),
        Op::Unpack { s, parts, .. } => (vec![*s], parts.clone()),
        Op::Setp { a, b, .. } => (vec![*a, *b], vec![]),
        Op::Selp { d, a, b, .. } => (vec![*a, *b], vec![*d]),
        Op::PredLogic { .. } | Op::PredConst { .. } => (vec![], vec![]),
        Op::Cvt { d, a, .. } => (vec![*a], vec![*d]),
        Op::Ld { n, d, a, .. } => (vec![*a], d[..*n as usize].to_vec()),
        Op::St { n, s, a, .. } => {
            let mut u = vec![*a];
            u.extend_from_slice(&s[..*n as usize]);
            (u, vec![])
        }
        Op::LdParam { d, n, .. } => (vec![], d[..*n as usize].to_vec()),
        Op::Atom { d, a, b, c, .. } => (vec![*a, *b, *c], d.iter().copied().collect()),
        Op::Bra { .. } | Op::Exit | Op::Trap | Op::Nop | Op::SpinHint => (vec![], vec![]),
        // `bar.red`'s destination is written by the block scheduler, which resets its tag.
        Op::Bar { .. } => (vec![], vec![]),
        Op::Assert { args } => (args.iter().flat_map(arg).collect(), vec![]),
        Op::Printf { format, args, ret } => {
            let mut u = arg(format);
            u.extend(arg(args));
            (u, ret.as_ref().map(arg).unwrap_or_default())
        }
        Op::Malloc { size, ret } => (arg(size), arg(ret)),
        Op::Free { ptr } => (arg(ptr), vec![]),
        Op::MbarInit { a, count, .. } => (vec![*a, *count], vec![]),
        Op::MbarArrive { a, count, d, .. } => {
            let mut u = vec![*a];
            u.extend(count.iter().copied());
            (u, d.iter().copied().collect())
        }
        Op::MbarWait { a, state, .. } => (vec![*a, *state], vec![]),
        Op::Shfl { d, a, b, c, .. } => (vec![*a, *b, *c], vec![*d]),
        Op::Vote {
            mode, d, member, ..
        } => (
            member.iter().copied().collect(),
            if *mode == VoteMode::Ballot {
                vec![*d]
            } else {
                vec![]
            },
        ),
        Op::Activemask(d) | Op::Clock { d, .. } => (vec![], vec![*d]),
        Op::Redux { d, a, member, .. } => (vec![*a, *member], vec![*d]),
        Op::Match { d, a, member, .. } => (vec![*a, *member], vec![*d]),
        Op::BadCall { a } => (vec![*a], vec![]),
        // The frame register is written too, with the same value in every lane and its
        // tag set; and the callee's own registers are given back as they were.
        Op::Call { args, rets, .. } => (
            args.iter().flat_map(arg).collect(),
            rets.iter().flat_map(arg).collect(),
        ),
        Op::Return { .. } => (vec![], vec![]),
        Op::Wmma(w) => w.reads_writes(),
        Op::Cdp { args, ret, .. } => (
            args.iter().flat_map(arg).collect(),
            ret.as_ref().map(arg).unwrap_or_default(),
        ),
        Op::Tex {
            d,
            obj,
            coords,
            layer,
            ..
        } => {
            let mut u = vec![*obj];
            u.extend_from_slice(coords);
            u.extend(layer.iter().copied());
            (u, d.to_vec())
        }
        Op::Surf {
            store,
            v,
            n,
            obj,
            coords,
            ncoords,
            ..
        } => {
            let mut u = vec![*obj];
            u.extend_from_slice(&coords[..*ncoords as usize]);
            let vals = v[..*n as usize].to_vec();
            if *store {
                u.extend(vals);
                (u, vec![])
            } else {
                (u, vals)
            }
        }
    }
}

/// Per instruction, the registers it reads or writes (with whether it writes them) among
/// those a lane-affine instruction may leave with a tag: the engine writes such a
/// register's row from its tag before the instruction runs, and forgets the tag of one
/// it writes.
fn touched(insts: &[Inst], nregs: u32) -> Vec<Box<[(R, bool)]>> {
    let mut tagged = vec![false; nregs as usize];
    for i in insts {
        if !matches!(i.aff, Aff::None | Aff::Mem { .. } | Aff::Cmp { .. }) {
            for r in reads_writes(&i.op).1 {
                tagged[r as usize] = true;
            }
        }
    }
    insts
        .iter()
        .map(|i| {
            let (u, d) = reads_writes(&i.op);
            let mut t: Vec<(R, bool)> = vec![];
            for (r, def) in u
                .into_iter()
                .map(|r| (r, false))
                .chain(d.into_iter().map(|r| (r, true)))
            {
                if !tagged.get(r as usize).copied().unwrap_or(false) {
                    continue;
                }
                match t.iter_mut().find(|x| x.0 == r) {
                    Some(x) => x.1 |= def,
                    None => t.push((r, def)),
                }
            }
            t.into_boxed_slice()
        })
        .collect()
}

/// Sources of a pure operation that may be hoisted, or `None` if it may not.
fn hoistable_sources(op: &Op) -> Option<Vec<R>> {
    Some(match op {
        Op::Bin(_, _, a, b) => vec![*a, *b],
        Op::Un(_, _, a) | Op::Mov(_, a, _) | Op::Cvt { a, .. } => vec![*a],
        Op::Ter(_, _, a, b, c) | Op::Prmt(_, a, b, c) | Op::Lop3 { a, b, c, .. } => {
            vec![*a, *b, *c]
        }
        Op::Bfi { a, b, c, e, .. } => vec![*a, *b, *c, *e],
        Op::LdParam { .. } => vec![],
        _ => return None,
    })
}

/// Moves single-definition pure instructions whose sources are invariant for a warp
/// over the whole launch into a prologue, and drops them from the body (branch targets
/// are renumbered). `%ctaid` changes per block and is never invariant.
fn hoist_invariants(
    insts: Vec<Inst>,
    nregs: u32,
    consts: &HashMap<u64, R>,
    dyn_reg: R,
    entries: &mut [u32],
) -> (Vec<Inst>, Vec<Inst>) {
    let mut defs = vec![0u32; nregs as usize];
    for i in &insts {
        for r in written(&i.op) {
            if let Some(c) = defs.get_mut(r as usize) {
                *c += 1;
            }
        }
    }
    let mut invariant = vec![false; nregs as usize];
    for (i, name) in SPECIALS.iter().enumerate() {
        invariant[i] = !name.starts_with("%ctaid");
    }
    for &r in consts.values() {
        invariant[r as usize] = true;
    }
    invariant[dyn_reg as usize] = true;
    let mut keep = vec![true; insts.len()];
    let mut prologue = vec![];
    for (pc, i) in insts.iter().enumerate() {
        if i.guard.is_some() {
            continue;
        }
        let Some(srcs) = hoistable_sources(&i.op) else {
            continue;
        };
        let dst = written(&i.op);
        let ok = srcs.iter().all(|&r| invariant[r as usize])
            && dst
                .iter()
                .all(|&r| r >= NSPECIAL && defs[r as usize] == 1 && !invariant[r as usize]);
        if ok {
            for &r in &dst {
                invariant[r as usize] = true;
            }
            keep[pc] = false;
            prologue.push(i.clone());
        }
    }
    if prologue.is_empty() {
        return (insts, prologue);
    }
    // New index of every old instruction (a removed one maps to the next kept one).
    let mut new_index = vec![0u32; insts.len() + 1];
    let mut n = 0u32;
    for pc in 0..insts.len() {
        new_index[pc] = n;
        if keep[pc] {
            n += 1;
        }
    }
    new_index[insts.len()] = n;
    for e in entries.iter_mut() {
        *e = new_index[(*e as usize).min(new_index.len() - 1)];
    }
    let mut out = Vec::with_capacity(n as usize);
    for (pc, mut i) in insts.into_iter().enumerate() {
        if !keep[pc] {
            continue;
        }
        if let Op::Bra { target } = &mut i.op {
            *target = new_index[(*target as usize).min(new_index.len() - 1)];
        }
        out.push(i);
    }
    (out, prologue)
}

/// Immediate post-dominators over instructions.
fn ipdoms(insts: &[Inst]) -> Vec<u32> {
    let n = insts.len();
    // Basic block leaders.
    let mut leader = vec![false; n + 1];
    if n > 0 {
        leader[0] = true;
    }
    for (pc, i) in insts.iter().enumerate() {
        match i.op {
            Op::Bra { target } => {
                leader[target as usize] = true;
                leader[pc + 1] = true;
            }
            Op::Exit | Op::Return { .. } => leader[pc + 1] = true,
            _ => {}
        }
    }
    let mut block_of = vec![0usize; n];
    let mut starts = vec![];
    for pc in 0..n {
        if leader[pc] {
            starts.push(pc);
        }
        block_of[pc] = starts.len() - 1;
    }
    let nb = starts.len();
    let exit = nb; // virtual exit node
    let mut succ: Vec<Vec<usize>> = vec![vec![]; nb + 1];
    for b in 0..nb {
        let end = if b + 1 < nb { starts[b + 1] } else { n };
        let last = &insts[end - 1];
        match last.op {
            Op::Bra { target } => {
                succ[b].push(if (target as usize) < n {
                    block_of[target as usize]
                } else {
                    exit
                });
                if last.guard.is_some() {
                    succ[b].push(if end < n { block_of[end] } else { exit });
                }
            }
            Op::Return { .. } => succ[b].push(exit),
            Op::Exit => {
                succ[b].push(exit);
                if last.guard.is_some() {
                    succ[b].push(if end < n { block_of[end] } else { exit });
                }
            }
            _ => succ[b].push(if end < n { block_of[end] } else { exit }),
        }
    }
    let mut pred: Vec<Vec<usize>> = vec![vec![]; nb + 1];
    for (b, ss) in succ.iter().enumerate() {
        for &s in ss {
            pred[s].push(b);
        }
    }
    // Post-order of the reverse graph from exit.
    let mut order = vec![];
    let mut seen = vec![false; nb + 1];
    let mut stack = vec![(exit, 0usize)];
    seen[exit] = true;
    while let Some((v, k)) = stack.pop() {
        if k < pred[v].len() {
            stack.push((v, k + 1));
            let w = pred[v][k];
            if !seen[w] {
                seen[w] = true;
                stack.push((w, 0));
            }
        } else {
            order.push(v);
        }
    }
    let mut rpo_index = vec![usize::MAX; nb + 1];
    for (i, &v) in order.iter().enumerate() {
        rpo_index[v] = i; // post-order number: exit has the largest
    }
    const UNDEF: usize = usize::MAX;
    let mut idom = vec![UNDEF; nb + 1];
    idom[exit] = exit;
    let mut changed = true;
    while changed {
        changed = false;
        for &b in order.iter().rev() {
            if b == exit {
                continue;
            }
            let mut new = UNDEF;
            for &s in &succ[b] {
                if idom[s] == UNDEF {
                    continue;
                }
                new = if new == UNDEF {
                    s
                } else {
                    let (mut x, mut y) = (new, s);
                    while x != y {
                        while rpo_index[x] < rpo_index[y] {
                            x = idom[x];
                        }
                        while rpo_index[y] < rpo_index[x] {
                            y = idom[y];
                        }
                    }
                    x
                };
            }
            if new != UNDEF && idom[b] != new {
                idom[b] = new;
                changed = true;
            }
        }
    }
    (0..n)
        .map(|pc| {
            let b = block_of[pc];
            let p = idom[b];
            if p == UNDEF || p == exit {
                EXIT_PC
            } else {
                starts[p] as u32
            }
        })
        .collect()
}

/// The functions of `module` with a body, by name (the first of each name), with the
/// [`weight`] of each body.
pub(crate) fn bodies(module: &ptx::Module) -> HashMap<&str, (&Function, u64)> {
    let mut map = HashMap::new();
    for f in &module.functions {
        if let Some(body) = &f.body {
            map.entry(f.name.as_str())
                .or_insert_with(|| (f, weight(body)));
        }
    }
    map
}

/// What decoding a body costs, in bytes of names and strings it copies or hashes plus
/// [`STATEMENT_WEIGHT`] a statement (nested blocks included; a register range counts
/// each register it declares). Inlining a call costs its callee's weight again, so the
/// sum over a kernel bounds its decoding time and memory ([`MAX_WEIGHT`]) however the
/// calls multiply.
fn weight(stmts: &[Statement]) -> u64 {
    fn operand(o: &Operand) -> u64 {
        match o {
            Operand::Name(n) | Operand::NameOffset(n, _) => n.len() as u64,
            Operand::Address { base, .. } => base.as_ref().map_or(0, |b| b.len() as u64),
            Operand::Pair(a, b) => (a.len() + b.len()) as u64,
            // At most `ptx::MAX_NESTING` deep.
            Operand::Vector(v) | Operand::List(v) => v.iter().map(operand).sum::<u64>() + 1,
            Operand::Texture { object, coords } => {
                object.len() as u64 + coords.iter().map(operand).sum::<u64>() + 1
            }
            Operand::Not(o) => operand(o) + 1,
            Operand::Int(_) | Operand::F32(_) | Operand::F64(_) | Operand::Sink => 1,
        }
    }
    let mut w = 0u64;
    let mut open = vec![stmts.iter()];
    while let Some(top) = open.last_mut() {
        let Some(s) = top.next() else {
            open.pop();
            continue;
        };
        let cost = match s {
            Statement::Decl(d) => {
                let n = d.range.map_or(1, u64::from);
                n.saturating_mul(d.name.len() as u64 + 10 + STATEMENT_WEIGHT)
            }
            Statement::Label(l, _) => l.len() as u64,
            Statement::Prototype(p) => {
                p.name.len() as u64 + 10 * (p.params.len() + p.returns.len()) as u64
            }
            Statement::Inst(i) => {
                i.opcode.len() as u64
                    + i.modifiers.iter().map(|m| m.len() as u64).sum::<u64>()
                    + i.guard.as_ref().map_or(0, |g| g.reg.len() as u64)
                    + i.operands.iter().map(operand).sum::<u64>()
            }
            Statement::Block(b) => {
                open.push(b.iter());
                0
            }
        };
        w = w.saturating_add(cost).saturating_add(STATEMENT_WEIGHT);
    }
    w
}

fn too_heavy() -> String {
    format!(
        "kernel too large after inlining calls (decoding it would cost over {MAX_WEIGHT} \
         units: {STATEMENT_WEIGHT} a statement, 1 a byte of names)"
    )
}

/// Decodes one kernel.
pub(crate) fn decode_kernel(m: &ModuleCtx, f: &Function) -> DResult<Program> {
    let body = f.body.as_ref().ok_or(DecodeError {
        line: f.line,
        message: "kernel has no body".into(),
    })?;
    let weight = weight(body);
    if weight > MAX_WEIGHT {
        return derr(f.line, too_heavy());
    }
    let mut d = Dec {
        m,
        insts: vec![],
        scopes: vec![HashMap::new()],
        nregs: NSPECIAL + 2,
        npreds: 0,
        consts: HashMap::new(),
        shared_size: m.shared_size,
        local_size: 0,
        labels: HashMap::new(),
        fixups: vec![],
        instance: 0,
        next_instance: 0,
        reserved_smem: false,
        protos: HashMap::new(),
        stack: vec![],
        depth: 0,
        ret_label: None,
        dyn_reg: NSPECIAL,
        weight,
        frame: None,
        fp: NSPECIAL + 1,
        outs: vec![],
        out_ix: HashMap::new(),
        pending: vec![],
        lockstep: false,
        fences: false,
    };
    for p in &f.params {
        d.scopes[0].insert(p.name.clone(), Sym::KParam(p.offset, p.size));
    }
    d.body(body)?;
    // Falling off the end exits.
    d.emit(Op::Exit, None, f.line);
    d.outlined_bodies()?;
    for (pc, inst, l, line) in std::mem::take(&mut d.fixups) {
        let Some(&t) = d.labels.get(&(inst, l.clone())) else {
            return derr(line, format!("unknown label {l}"));
        };
        d.insts[pc].op = Op::Bra { target: t };
    }
    let mut entries: Vec<u32> = d.outs.iter().map(|o| o.entry).collect();
    let (insts, prologue) = hoist_invariants(
        std::mem::take(&mut d.insts),
        d.nregs,
        &d.consts,
        d.dyn_reg,
        &mut entries,
    );
    d.insts = insts;
    for (o, e) in d.outs.iter_mut().zip(entries) {
        o.entry = e;
    }
    for (pc, i) in d.insts.iter().enumerate() {
        if let Op::Return { func } = i.op {
            d.outs[func as usize].ret = pc as u32;
        }
    }
    let ipdom = ipdoms(&d.insts);
    let touch = touched(&d.insts, d.nregs);
    let mut body_written = vec![false; d.nregs as usize];
    for i in &d.insts {
        for r in reads_writes(&i.op).1 {
            body_written[r as usize] = true;
        }
        if let Op::Bar { red: Some(r) } = &i.op {
            if r.mode == 0 {
                body_written[r.d as usize] = true;
            }
        }
    }
    let mut fixed: Vec<R> = (0..NSPECIAL)
        .filter(|r| !(6..9).contains(r))
        .chain(d.consts.values().copied())
        .chain([d.dyn_reg])
        .chain(prologue.iter().flat_map(|i| reads_writes(&i.op).1))
        .filter(|&r| !body_written[r as usize])
        .collect();
    fixed.sort_unstable();
    fixed.dedup();
    let param_size = f
        .params
        .iter()
        .map(|p| p.offset + p.size)
        .max()
        .unwrap_or(0);
    let mut dyn_align = 16u32;
    for (_, a) in &m.extern_shared {
        dyn_align = dyn_align.max(*a);
    }
    let shared_static = d
        .shared_size
        .checked_next_multiple_of(dyn_align as u64)
        .unwrap_or(u64::MAX);
    if shared_static > u32::MAX as u64 / 2 || d.local_size > 512 * 1024 {
        return derr(
            f.line,
            "shared memory or local memory (512 KiB per thread) too large",
        );
    }
    let uses_heap = d
        .insts
        .iter()
        .any(|i| matches!(i.op, Op::Malloc { .. } | Op::Free { .. } | Op::Cdp { .. }));
    let mut consts: Vec<(R, u64)> = d.consts.iter().map(|(&v, &r)| (r, v)).collect();
    consts.push((d.dyn_reg, shared_static));
    let combine_reds = combine_reds(&mut d.insts, d.fences || d.lockstep);
    Ok(Program {
        name: f.name.clone(),
        params: f.params.clone(),
        param_size,
        insts: d.insts,
        ipdom,
        nregs: d.nregs,
        npreds: d.npreds.max(1),
        consts,
        shared_static: shared_static as u32,
        local_size: d.local_size.next_multiple_of(16) as u32
            + if d.outs.is_empty() { 0 } else { STACK_SIZE },
        static_local: d.local_size.next_multiple_of(16) as u32,
        funcs: d.outs,
        fp: d.fp,
        prologue,
        touch,
        fixed,
        max_regs: f
            .directives
            .iter()
            .filter(|(name, v)| name == ".maxnreg" && !v.is_empty())
            .map(|(_, v)| v[0])
            .min(),
        uses_heap,
        reserved_smem: d.reserved_smem,
        lockstep: d.lockstep,
        combine_reds,
        jit: std::sync::OnceLock::new(),
    })
}
