//! The compiling engine: a kernel's decoded instructions ([`Program`]) to native code
//! through Cranelift, with the interpreter (`exec.rs`) kept as the reference and as the
//! engine for every kernel this one does not take. `VMGPU_JIT_DUMP` (set to anything)
//! prints each compiled kernel's Cranelift IR (as built, then optimized, with the loops
//! Cranelift found) and machine code on standard error (and the instructions its
//! four-lane code runs lane by lane); `VMGPU_JIT_BIN=FILE` writes the last compiled
//! kernel's machine code to FILE (for a profiler's offsets).
//!
//! One function per kernel runs a whole block: its threads four at a time where that
//! pays ([`vector`]: each register a vector of four lanes, the lanes going on one at a
//! time from where they disagree), else each thread in turn, from its start to its
//! exit, its registers Cranelift variables (machine registers). Threads do not run a
//! warp's 32 together, so the kernels taken are those whose result cannot depend on a
//! warp's lanes running together (see [`compile`]'s refusals): no warp-wide operations
//! or `bar.warp.sync`, no loads or stores with a memory order (spin waits,
//! warp-synchronous exchanges through `volatile`). Barriers are taken where every
//! thread that has not exited reaches them ([`phases`]): the four-lane code runs the
//! block phase by phase, each group to the barrier and then the next, as the
//! interpreter runs warp after warp; other barriers stay the interpreter's, which
//! reports a divergent one.
//!
//! What stays the interpreter's: every memory access is checked (the fast path compares
//! the address with the allocation its instruction hit last, anything else asks the
//! engine's resolver, which reports faults exactly as the interpreter does); the
//! instruction budget, time limit and cancellation are checked on loop back-edges and
//! between threads; instructions without a compiled form call the interpreter's own
//! lane functions.

#![allow(clippy::needless_range_loop)]

use crate::decode::{
    combinable, reads_writes, Aff, AtomOp, AtomTy, BoolOp, FltOp, Inst, IntOp, Op, Program, Sem,
    Sp, LOCAL_WINDOW, NSPECIAL, R, SHARED_WINDOW, WINDOW_SIZE,
};
use crate::ops::{CvtTy, Rnd};
use cranelift_codegen::ir::condcodes::{FloatCC, IntCC};
use cranelift_codegen::ir::types::{F32, F64, I16, I32, I64, I8};
use cranelift_codegen::ir::{
    AbiParam, AtomicRmwOp, Block, BlockArg, InstBuilder, MemFlags, SigRef, Signature, Type, Value,
};
use cranelift_codegen::settings::{self, Configurable};
use cranelift_frontend::{FunctionBuilder, FunctionBuilderContext, Variable};
use cranelift_jit::{JITBuilder, JITModule};
use cranelift_module::{Linkage, Module};
use std::mem::offset_of;

mod phases;
mod vector;

/// Thread instructions between two checks of the budget, the time limit and
/// cancellation (the interpreter's 4096 warp instructions).
pub(crate) const TICK: u64 = 32 * 4096;
/// Most instructions of a kernel the JIT compiles (larger ones are interpreted).
const MAX_INSTS: usize = 1 << 16;
/// Most registers and predicates a compiled kernel may have.
const MAX_VARS: u32 = 1 << 14;
/// The bit of a helper's `pc` argument naming a prologue instruction.
pub(crate) const PROLOGUE: u32 = 1 << 31;

/// What the compiled function and the engine's helpers share, per worker (`repr(C)`:
/// the function reads it at fixed offsets).
#[repr(C)]
#[derive(Debug)]
pub(crate) struct Ctx {
    /// The launch's parameter buffer (at least `Program::param_size` bytes).
    pub params: *const u8,
    /// The block's shared memory and its size.
    pub shared: *mut u8,
    pub shared_len: u64,
    /// Local memory: `local_size` bytes per thread, thread `t` at `t * local_size`.
    pub local: *mut u8,
    pub local_size: u64,
    pub nthreads: u64,
    /// Per thread: `%tid.x | %tid.y << 16 | %tid.z << 32`.
    pub tids: *const u64,
    /// Every special register's value in the block's first thread (those the same in
    /// every thread are read from here).
    pub uniform: *const u64,
    /// Per memory instruction (by pc): the allocation it hit last.
    pub cache: *mut Slot,
    /// Thread instructions run since the last check (written when the function returns).
    pub count: u64,
    /// A helper's second result (an atomic's old value).
    pub ret: u64,
    /// The engine's side of the launch, for the helpers.
    pub host: *mut std::ffi::c_void,
    /// The host thread's held reductions ([`RedSlot::SLOTS`] slots; used when the
    /// kernel's are combined, `Program::combine_reds`).
    pub reds: *mut RedSlot,
    /// A kernel with barriers: per group of four threads, [`Kernel::frame`] bytes
    /// (16-byte aligned) where its registers wait at a barrier (`jit::phases`), and
    /// before the first, [`FRAME_CELLS`] bytes of the four-lane code's own state. Any
    /// four-lane code: before those, its uniform registers' lanes ([`SPLATS`] of 16
    /// bytes).
    pub frames: *mut u8,
}

/// The bytes before `Ctx::frames` where the four-lane code of a kernel with barriers
/// keeps its phases' and parted lanes' state (`vector::Cell`) and the registers it
/// computes once per phase (`phases::phase_uniform`).
pub const FRAME_CELLS: usize = 256;

/// Uniform registers' lanes the four-lane code keeps (16 bytes each, before the
/// cells): `vector::Lower::uniform_lanes`.
pub const SPLATS: usize = 48;

/// A reduction a host thread holds back (`exec::Reds`, when the launch combines them):
/// the global word's device address (`FREE`'s when the slot is free), the operation
/// ([`RedSlot::tag`]), the operands combined so far (in the low 32 bits for 32-bit
/// types), and what applying it takes. The slot of a word is a function of its address
/// alone ([`RedSlot::index`]), so that compiled code combines into a slot that holds
/// its word and operation already without calling the engine (`Lower::combine`).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub(crate) struct RedSlot {
    pub addr: u64,
    pub tag: u64,
    pub acc: u64,
    pub alloc: u32,
    pub op: AtomOp,
    pub ty: AtomTy,
}

impl RedSlot {
    /// Slots of a table (a power of two).
    pub const SLOTS: usize = 1024;
    /// A free slot (no word has the address `u64::MAX`).
    pub const FREE: RedSlot = RedSlot {
        addr: u64::MAX,
        tag: 0,
        acc: 0,
        alloc: 0,
        op: AtomOp::Add,
        ty: AtomTy::U32,
    };
    /// Whether no word holds the slot.
    pub fn is_free(&self) -> bool {
        self.addr == Self::FREE.addr
    }
    /// The slot of the word at `addr` (`Lower::combine` computes the same): the
    /// word's index, its page's mixed in.
    pub fn index(addr: u64) -> usize {
        ((addr >> 2) ^ (addr >> 12)) as usize & (Self::SLOTS - 1)
    }
    /// The operation and type as one word.
    pub fn tag(op: AtomOp, ty: AtomTy) -> u64 {
        (op as u64) << 8 | ty as u64
    }
}

/// The allocation a memory instruction hit last, for its access size `total` (a power
/// of two): an address `a` is inside it and aligned when `(a - base)` rotated right by
/// log2(`total`) is below `units` (a misaligned offset rotates its low bits to the top);
/// the host address is then `ptr + (a - base)`. An empty slot has `units` 0; so has an
/// allocation whose base is not aligned to `total` (its accesses take the slow path).
/// `group_units` is the same for four consecutive accesses (`units - 3`, at least 0):
/// they fit when the first one's rotated offset is below it (`vector::Lower::vmem`).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Slot {
    pub base: u64,
    pub units: u64,
    pub ptr: u64,
    pub group_units: u64,
}

impl Slot {
    /// The slot of an allocation at `base` of `size` bytes, host memory at `ptr`, for
    /// accesses of `total` bytes.
    pub fn new(base: u64, size: u64, ptr: u64, total: u64) -> Slot {
        let units = if base.is_multiple_of(total) && size >= total {
            (size - total) / total + 1
        } else {
            0
        };
        Slot {
            base,
            units,
            ptr,
            group_units: units.saturating_sub(vector::LANES - 1),
        }
    }
}

/// The engine's helpers the compiled code calls (`extern "C"`), by address.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Helpers {
    /// `(ctx, pc, thread, address) -> host pointer` of an `ld`, `st` or `atom`, null
    /// after recording a fault.
    pub mem: usize,
    /// `(ctx, pc, thread instructions) -> 0`, or 1 after recording a timeout.
    pub tick: usize,
    /// `(ctx, pc, a, b) -> d` of an [`Op::Bin`] (the lane function on one lane).
    pub bin: usize,
    /// `(ctx, pc, a) -> d` of an [`Op::Un`] or [`Op::Cvt`].
    pub un: usize,
    /// `(ctx, pc, a, b, c) -> d` of an [`Op::Ter`] or [`Op::Prmt`].
    pub ter: usize,
    /// `(ctx, pc, a, b) -> 0 or 1` of an [`Op::Setp`]'s comparison.
    pub cmp: usize,
    /// `(ctx, pc, thread, address, b, c) -> 0` with the old value in `ctx.ret`, or 1
    /// after recording a fault: an [`Op::Atom`].
    pub atom: usize,
}

/// A compiled kernel.
pub(crate) struct Kernel {
    module: Option<JITModule>,
    entry: unsafe extern "C" fn(*mut Ctx) -> u32,
    /// It has atomics on global (or generic) memory: compiled, they run back to back,
    /// and from several host threads each contended one moves a cache line between
    /// cores (the bench's histogram: 92 ms on one thread, 378 ms on two); the
    /// interpreter scales better (`exec::launch` picks it then), unless the kernel's
    /// reductions are combined per host thread (`Program::combine_reds`), which the
    /// compiled code does inline (`Lower::combine`: the histogram 70 ms on one thread,
    /// 36 ms on two, against the CPU's atomics' 92 ms on one).
    pub global_atomics: bool,
    /// Threads its code runs together: [`vector::LANES`], or 1.
    pub lanes: u32,
    /// It has barriers: the bytes of `Ctx::frames` per group of four threads (0
    /// without barriers). Its code runs blocks of a multiple of four threads only.
    pub frame: usize,
    /// Its four-lane code takes a group's threads for one row's consecutive
    /// `%tid.x` (`vector::Lin`): it runs them where the block's x size is a multiple
    /// of four (else one thread at a time, or with barriers not at all).
    pub rows: bool,
}

impl std::fmt::Debug for Kernel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Kernel").finish_non_exhaustive()
    }
}

// SAFETY: the module's code and data are written once, before `compile` returns, and only
// executed (or freed, in `drop`, when no launch holds the kernel) afterwards; nothing in
// it is mutated through a shared reference.
unsafe impl Send for Kernel {}
// SAFETY: as above: running the code reads the module's memory and writes only through
// the `Ctx` each caller passes.
unsafe impl Sync for Kernel {}

impl Drop for Kernel {
    fn drop(&mut self) {
        if let Some(m) = self.module.take() {
            // SAFETY: the kernel is dropped with its program, after every launch that
            // ran its code has returned (launches borrow the program), and no pointer
            // into the module outlives it.
            unsafe { m.free_memory() };
        }
    }
}

/// Threads a group of the four-lane code runs together.
pub(crate) fn vector_lanes() -> usize {
    vector::LANES as usize
}

impl Kernel {
    /// Whether its code runs blocks of `block` threads: a kernel with barriers runs
    /// its blocks in whole groups of four ([`phases`]), each one row's when its
    /// four-lane code takes `%tid.x` for consecutive ([`Kernel::rows`]).
    pub fn runs_block(&self, block: [u32; 3]) -> bool {
        let nthreads = block.iter().product::<u32>() as usize;
        let whole = |n: usize| n.is_multiple_of(vector_lanes());
        self.frame == 0 || (whole(nthreads) && (!self.rows || whole(block[0] as usize)))
    }

    /// Runs the block described by `ctx`: 0, or 1 when a helper recorded an error.
    ///
    /// # Safety
    /// Every pointer in `ctx` is valid for what [`Ctx`] says of it, for this block and
    /// this kernel (`nthreads` tids, a slot per instruction, `shared_len` bytes of
    /// shared memory, `nthreads * local_size` of local memory, the parameters), and
    /// `host` is what the helpers expect.
    pub unsafe fn run(&self, ctx: *mut Ctx) -> u32 {
        // SAFETY: the function was compiled for `Ctx`'s layout; the caller vouches for
        // its contents.
        unsafe { (self.entry)(ctx) }
    }
}

/// Special registers whose value differs between the threads of a block: `%tid.x/y/z`,
/// `%laneid`, `%warpid`, `%lanemask_eq/lt/le/gt/ge`.
const PER_THREAD: [u32; 10] = [0, 1, 2, 12, 13, 17, 18, 19, 20, 21];
/// The special `%ntid.x` (its index in the specials and the uniform values).
const NTID_X: u32 = 3;

/// Why the JIT does not take an operation, if it does not.
fn unsupported(op: &Op) -> Option<&'static str> {
    Some(match op {
        Op::Bin(..)
        | Op::Un(..)
        | Op::Ter(..)
        | Op::Mov(..)
        | Op::Setp { .. }
        | Op::Selp { .. }
        | Op::PredLogic { .. }
        | Op::PredConst { .. }
        | Op::Cvt { .. }
        | Op::Pack { .. }
        | Op::Unpack { .. }
        | Op::Lop3 { .. }
        | Op::Prmt(..)
        | Op::LdParam { .. }
        | Op::Bra { .. }
        | Op::Exit
        | Op::Nop => return None,
        Op::Ld { .. } | Op::St { .. } | Op::Atom { .. } => return None,
        Op::Bar { .. } => return None,
        Op::Shfl { .. } | Op::Vote { .. } | Op::Activemask(_) | Op::Redux { .. } => {
            "a warp-wide operation"
        }
        Op::Match { .. } => "match",
        Op::Wmma(_) => "wmma",
        Op::Tex { .. } | Op::Surf { .. } => "a texture or surface",
        Op::Printf { .. } | Op::Assert { .. } => "printf or assert",
        Op::Malloc { .. } | Op::Free { .. } | Op::Cdp { .. } => "the device runtime",
        Op::Call { .. } | Op::Return { .. } | Op::BadCall { .. } => "an out-of-line call",
        Op::MbarInit { .. } | Op::MbarArrive { .. } | Op::MbarWait { .. } => "mbarrier",
        Op::Carry { .. } | Op::MadCarry { .. } => "a carry chain",
        Op::Clock { .. } => "a clock",
        _ => "an operation without a compiled form",
    })
}

/// Compiles `prog`, or says why the JIT does not take it (the interpreter runs it).
pub(crate) fn compile(prog: &Program, h: &Helpers) -> Result<Kernel, String> {
    if !prog.funcs.is_empty() {
        return Err("it calls functions out of line".into());
    }
    if prog.uses_heap {
        return Err("it uses the device runtime or heap".into());
    }
    if prog.lockstep {
        return Err("it has `bar.warp.sync` or loads or stores with a memory order".into());
    }
    if prog.insts.len() > MAX_INSTS || prog.nregs + prog.npreds > MAX_VARS {
        return Err("it is too large".into());
    }
    for i in prog.prologue.iter().chain(&prog.insts) {
        if let Some(why) = unsupported(&i.op) {
            return Err(format!("{why} (PTX line {})", i.line));
        }
        if let Op::Atom { sp: Sp::Local, .. } = i.op {
            return Err(format!("an atomic on local memory (PTX line {})", i.line));
        }
    }
    // Four lanes at a time where that pays: their float operations run on the four
    // lanes at once, so only those run lane by lane count towards the density.
    let four = vector::enabled() && vector::worth_it(prog);
    let barrier = prog.insts.iter().find(|i| matches!(i.op, Op::Bar { .. }));
    if let Some(i) = barrier {
        // Only the four-lane code runs barriers, and only those every thread reaches.
        if !four {
            return Err(format!(
                "a barrier (PTX line {}) in a kernel not run four threads at a time (only \
                 that code runs barriers)",
                i.line
            ));
        }
        phases::aligned(prog, &uniform_regs(prog).0)?;
    }
    let (dense, memory) = arithmetic_density(prog, four);
    if dense > DENSE_PER_ACCESS * memory.max(1) {
        return Err(format!(
            "arithmetic-dense ({dense} float or lane-function instructions{}, {memory} memory \
             accesses): the interpreter's warp-wide loops, vectorised, run it faster",
            if four { " run lane by lane" } else { "" }
        ));
    }
    let try_build = |lanes: bool| {
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| build(prog, h, lanes)))
            .unwrap_or_else(|_| Err("the code generator failed".into()))
    };
    if !four {
        return try_build(false);
    }
    match try_build(true) {
        Ok(k) => Ok(k),
        Err(e) => {
            if std::env::var_os("VMGPU_JIT_DUMP").is_some() {
                eprintln!("; {}: four lanes at a time: {e}", prog.name)
            }
            // One thread at a time where the code generator lacks a vector operation
            // on this CPU, unless the kernel is too dense for that or has barriers.
            let (dense, memory) = arithmetic_density(prog, false);
            if dense > DENSE_PER_ACCESS * memory.max(1) || barrier.is_some() {
                return Err(e);
            }
            try_build(false)
        }
    }
}

/// Most float or lane-function instructions per memory access of a kernel the JIT
/// takes. One thread at a time, each float instruction is a scalar operation (with its
/// NaN made canonical) and each lane-function call a helper call, where the interpreter
/// runs a warp's 32 lanes in one vectorised loop: past this density the interpreter is
/// faster (cuda-samples' BlackScholes, 21 per access: 80 s compiled, 51 s interpreted;
/// vector_add and saxpy, 1 per 3 accesses: 1.8x faster compiled). Four lanes at a time,
/// only the instructions that run lane by lane count (32 float operations per access:
/// interpreted 65 ms, one thread at a time 211 ms, four lanes at a time 37 ms).
const DENSE_PER_ACCESS: usize = 8;

/// A kernel's float instructions and instructions the JIT calls lane functions for
/// (`four`: those of them the four-lane code runs lane by lane), and its memory
/// accesses.
fn arithmetic_density(prog: &Program, four: bool) -> (usize, usize) {
    let (mut dense, mut memory) = (0, 0);
    for i in &prog.insts {
        match (&i.op, i.sem, i.aff) {
            (Op::Ld { .. } | Op::St { .. } | Op::Atom { .. }, ..) => memory += 1,
            _ if four && vector::native(prog, i) => {}
            (_, Sem::Flt { .. } | Sem::FCmp { .. }, _) => dense += 1,
            (Op::Bin(..) | Op::Un(..) | Op::Ter(..) | Op::Cvt { .. }, Sem::None, Aff::None) => {
                dense += 1
            }
            _ => {}
        }
    }
    (dense, memory)
}

/// Registers the same in every thread of a block, defined once per call before the
/// thread loop (the body never writes them): constants, the specials but the
/// per-thread ones, and the prologue's instructions computed from them alone (the
/// prologue is pure register arithmetic and parameter loads: no predicates). Also
/// which of the prologue's instructions compute them.
fn uniform_regs(prog: &Program) -> (Vec<bool>, Vec<bool>) {
    let mut uniform = vec![false; prog.nregs as usize];
    for r in (0..NSPECIAL.min(prog.nregs)).filter(|r| !PER_THREAD.contains(r)) {
        uniform[r as usize] = true;
    }
    for &(r, _) in &prog.consts {
        uniform[r as usize] = true;
    }
    let mut uniform_prologue = vec![false; prog.prologue.len()];
    for (k, i) in prog.prologue.iter().enumerate() {
        let (u, d) = reads_writes(&i.op);
        if i.guard.is_none() && u.iter().all(|&x| uniform[x as usize]) {
            uniform_prologue[k] = true;
            for x in d {
                uniform[x as usize] = true;
            }
        }
    }
    (uniform, uniform_prologue)
}

fn build(prog: &Program, h: &Helpers, lanes: bool) -> Result<Kernel, String> {
    let err = |e: &dyn std::fmt::Display| format!("code generation: {e}");
    let mut flags = settings::builder();
    flags
        .set(
            "opt_level",
            std::env::var("VMGPU_OPT").as_deref().unwrap_or("speed"),
        )
        .map_err(|e| err(&e))?;
    flags.set("is_pic", "false").map_err(|e| err(&e))?;
    let isa = cranelift_native::builder()
        .map_err(|e| err(&e))?
        .finish(settings::Flags::new(flags))
        .map_err(|e| err(&e))?;
    let mut module = JITModule::new(JITBuilder::with_isa(
        isa,
        cranelift_module::default_libcall_names(),
    ));
    let ptr = module.target_config().pointer_type();
    let mut ctx = module.make_context();
    ctx.func.signature.params.push(AbiParam::new(ptr));
    ctx.func.signature.returns.push(AbiParam::new(I32));

    let (uniform, uniform_prologue) = uniform_regs(prog);
    let mut used_specials: Vec<u32> = vec![];
    for i in prog.prologue.iter().chain(&prog.insts) {
        for r in reads_writes(&i.op).0 {
            if r < NSPECIAL && !used_specials.contains(&r) {
                used_specials.push(r);
            }
        }
    }
    used_specials.sort_unstable();

    let mut fbc = FunctionBuilderContext::new();
    let b = FunctionBuilder::new(&mut ctx.func, &mut fbc);
    let mut l = Lower::new(b, prog, *h, ptr);
    if lanes && vector::worth_it(prog) {
        l.v = Some(l.vec_state(uniform, &uniform_prologue));
    }
    let lanes = if l.v.is_some() {
        vector::LANES as u32
    } else {
        1
    };
    let frame = l.v.as_ref().and_then(|v| v.frame).unwrap_or(0) as usize;
    l.kernel(&used_specials, &uniform_prologue);
    let rows = l.v.as_ref().is_some_and(|v| v.rows);
    l.b.seal_all_blocks();
    l.b.finalize();

    let id = module
        .declare_function(&prog.name, Linkage::Local, &ctx.func.signature)
        .map_err(|e| err(&e))?;
    let dump = std::env::var_os("VMGPU_JIT_DUMP").is_some();
    if dump {
        ctx.set_disasm(true);
        eprintln!("; kernel {}\n{}", prog.name, ctx.func.display());
    }
    module
        .define_function(id, &mut ctx)
        .map_err(|e| format!("code generation: {e:?}"))?;
    if let (Some(path), Some(c)) = (std::env::var_os("VMGPU_JIT_BIN"), ctx.compiled_code()) {
        let _ = std::fs::write(path, c.code_buffer());
    }
    if dump {
        eprintln!("; optimized IR of {}\n{}", prog.name, ctx.func.display());
        // The loops Cranelift found (what it moves code out of, and where to).
        for lp in ctx.loop_analysis.loops() {
            let (h, parent) = (
                ctx.loop_analysis.loop_header(lp),
                ctx.loop_analysis.loop_parent(lp),
            );
            eprintln!("; {lp}: header {h}, in {parent:?}");
        }
        if let Some(v) = ctx.compiled_code().and_then(|c| c.vcode.as_ref()) {
            eprintln!("; machine code of {}\n{v}", prog.name);
        }
    }
    module.clear_context(&mut ctx);
    module.finalize_definitions().map_err(|e| err(&e))?;
    let code = module.get_finalized_function(id);
    // SAFETY: `code` is the finalized function just defined with the signature
    // `(pointer) -> i32`, the C calling convention of the host (the ISA's default).
    let entry =
        unsafe { std::mem::transmute::<*const u8, unsafe extern "C" fn(*mut Ctx) -> u32>(code) };
    Ok(Kernel {
        module: Some(module),
        entry,
        lanes,
        frame,
        rows,
        global_atomics: prog.insts.iter().any(|i| {
            matches!(
                i.op,
                Op::Atom {
                    sp: Sp::Global | Sp::Generic,
                    ..
                }
            )
        }),
    })
}

/// The condition of an integer `setp` of comparison code `code` (eq, ne, lt, le, gt,
/// ge).
fn int_cc(code: u8, signed: bool) -> IntCC {
    match (code, signed) {
        (0, _) => IntCC::Equal,
        (1, _) => IntCC::NotEqual,
        (2, true) => IntCC::SignedLessThan,
        (3, true) => IntCC::SignedLessThanOrEqual,
        (4, true) => IntCC::SignedGreaterThan,
        (5, true) => IntCC::SignedGreaterThanOrEqual,
        (2, false) => IntCC::UnsignedLessThan,
        (3, false) => IntCC::UnsignedLessThanOrEqual,
        (4, false) => IntCC::UnsignedGreaterThan,
        _ => IntCC::UnsignedGreaterThanOrEqual,
    }
}

/// The condition of a float `setp` of comparison code `code` (as `cmp_code`).
fn float_cc(code: u8) -> FloatCC {
    match code {
        0 => FloatCC::Equal,
        1 => FloatCC::OrderedNotEqual,
        2 => FloatCC::LessThan,
        3 => FloatCC::LessThanOrEqual,
        4 => FloatCC::GreaterThan,
        5 => FloatCC::GreaterThanOrEqual,
        6 => FloatCC::UnorderedOrEqual,
        7 => FloatCC::NotEqual,
        8 => FloatCC::UnorderedOrLessThan,
        9 => FloatCC::UnorderedOrLessThanOrEqual,
        10 => FloatCC::UnorderedOrGreaterThan,
        11 => FloatCC::UnorderedOrGreaterThanOrEqual,
        12 => FloatCC::Ordered,
        _ => FloatCC::Unordered,
    }
}

/// Memory flags of the engine's own tables.
fn trusted() -> MemFlags {
    MemFlags::trusted()
}

/// A load of memory that does not change while the code using the loaded value runs:
/// the threads' indices (`Ctx::tids`, written before the kernel runs, never while it
/// runs), and a group's frame where a phase starts (written again only where the group
/// parts, waits at a barrier or exits, after which nothing uses what it loaded), and
/// the uniform registers' lanes (written as the function starts, before any loop,
/// `vector::Lower::fill_splats`). A pure value: Cranelift drops it where nothing uses
/// it (a group resuming after a barrier), computes it where it is used (a value only a
/// branch reads: reduce_sum's loop, 11% fewer instructions) and may share it. A
/// thread's or group's address depends on the thread index, which every pass of the
/// groups' and threads' loops changes, so no code motion moves it out of them to where
/// the index is past the block's threads; the lanes' loads move at most out of a loop,
/// which starts after they are written.
fn pure_load() -> MemFlags {
    MemFlags::trusted().with_readonly().with_can_move()
}

/// The width mask of `bits` bits.
fn mask(bits: u32) -> u64 {
    if bits >= 64 {
        u64::MAX
    } else {
        (1u64 << bits) - 1
    }
}

fn int_ty(bits: u32) -> Type {
    match bits {
        8 => I8,
        16 => I16,
        32 => I32,
        _ => I64,
    }
}

/// The context's fields the code reads, loaded once on entry (they do not change
/// while the function runs).
#[derive(Clone, Copy)]
struct Fields {
    params: Value,
    shared: Value,
    shared_len: Value,
    local: Value,
    local_size: Value,
    nthreads: Value,
    tids: Value,
    uniform: Value,
    cache: Value,
    frames: Value,
}

struct Lower<'a> {
    b: FunctionBuilder<'a>,
    f: Fields,
    prog: &'a Program,
    h: Helpers,
    ptr: Type,
    regs: Vec<Option<Variable>>,
    preds: Vec<Option<Variable>>,
    t: Variable,
    /// Thread instructions counted since the last check (`Ctx::count` as the function
    /// returns).
    cnt: vector::Cell,
    ctx: Value,
    blocks: Vec<Option<Block>>,
    exit_blk: Block,
    next_blk: Block,
    fail_blk: Block,
    sigs: Sigs,
    /// Backward branches' budget checks: their block, pc, destination and the loop's
    /// length in instructions.
    back_edges: Vec<(Block, u32, Block, u64, bool)>,
    /// The four-lane code's state, when the kernel runs four threads at a time
    /// ([`vector`]).
    v: Option<vector::VecState>,
}

struct Sigs {
    mem: SigRef,
    tick: SigRef,
    bin: SigRef,
    un: SigRef,
    ter: SigRef,
    cmp: SigRef,
    atom: SigRef,
}

impl<'a> Lower<'a> {
    fn new(mut b: FunctionBuilder<'a>, prog: &'a Program, h: Helpers, ptr: Type) -> Lower<'a> {
        let mut sig = |params: &[Type], ret: Type| {
            let mut s = Signature::new(b.func.signature.call_conv);
            s.params.push(AbiParam::new(ptr));
            s.params.push(AbiParam::new(I32));
            s.params.extend(params.iter().map(|&t| AbiParam::new(t)));
            s.returns.push(AbiParam::new(ret));
            b.import_signature(s)
        };
        let sigs = Sigs {
            mem: sig(&[I32, I64], ptr),
            tick: sig(&[I64], I32),
            bin: sig(&[I64, I64], I64),
            un: sig(&[I64], I64),
            ter: sig(&[I64, I64, I64], I64),
            cmp: sig(&[I64, I64], I32),
            atom: sig(&[I32, I64, I64, I64], I32),
        };
        let t = b.declare_var(I64);
        let cnt = vector::Cell::Var(b.declare_var(I64));
        let entry = b.create_block();
        b.append_block_params_for_function_params(entry);
        b.switch_to_block(entry);
        let ctx = b.block_params(entry)[0];
        let mut field = |off: usize, ty: Type| b.ins().load(ty, trusted(), ctx, off as i32);
        let f = Fields {
            params: field(offset_of!(Ctx, params), ptr),
            shared: field(offset_of!(Ctx, shared), ptr),
            shared_len: field(offset_of!(Ctx, shared_len), I64),
            local: field(offset_of!(Ctx, local), ptr),
            local_size: field(offset_of!(Ctx, local_size), I64),
            nthreads: field(offset_of!(Ctx, nthreads), I64),
            tids: field(offset_of!(Ctx, tids), ptr),
            uniform: field(offset_of!(Ctx, uniform), ptr),
            cache: field(offset_of!(Ctx, cache), ptr),
            frames: field(offset_of!(Ctx, frames), ptr),
        };
        let exit_blk = b.create_block();
        let next_blk = b.create_block();
        let fail_blk = b.create_block();
        Lower {
            b,
            f,
            prog,
            h,
            ptr,
            regs: vec![None; prog.nregs as usize],
            preds: vec![None; prog.npreds as usize],
            t,
            cnt,
            ctx,
            blocks: vec![None; prog.insts.len() + 1],
            exit_blk,
            next_blk,
            fail_blk,
            sigs,
            back_edges: vec![],
            v: None,
        }
    }

    fn reg_var(&mut self, r: u32) -> Variable {
        if let Some(v) = self.regs[r as usize] {
            return v;
        }
        let v = self.b.declare_var(I64);
        self.regs[r as usize] = Some(v);
        v
    }
    fn pred_var(&mut self, p: u32) -> Variable {
        if let Some(v) = self.preds[p as usize] {
            return v;
        }
        let v = self.b.declare_var(I8);
        self.preds[p as usize] = Some(v);
        v
    }
    fn reg(&mut self, r: u32) -> Value {
        if let Some(off) = self.ucell(r) {
            return self.b.ins().load(I64, trusted(), self.f.frames, off);
        }
        let v = self.reg_var(r);
        self.b.use_var(v)
    }
    fn set(&mut self, r: u32, x: Value) {
        if let Some(off) = self.ucell(r) {
            self.b.ins().store(trusted(), x, self.f.frames, off);
            return;
        }
        let v = self.reg_var(r);
        self.b.def_var(v, x);
    }
    fn pred(&mut self, p: u32) -> Value {
        let v = self.pred_var(p);
        self.b.use_var(v)
    }
    fn set_pred(&mut self, p: u32, x: Value) {
        let v = self.pred_var(p);
        self.b.def_var(v, x);
    }
    fn iconst(&mut self, v: u64) -> Value {
        self.b.ins().iconst(I64, v as i64)
    }
    fn masked(&mut self, x: Value, bits: u32) -> Value {
        if bits >= 64 {
            x
        } else {
            self.b.ins().band_imm(x, mask(bits) as i64)
        }
    }
    /// Two `bits`-bit operands as 64-bit values: sign-extended (`signed`) or masked.
    fn operands(&mut self, a: Value, b: Value, bits: u32, signed: bool) -> (Value, Value) {
        if signed {
            (self.sext(a, bits), self.sext(b, bits))
        } else {
            (self.masked(a, bits), self.masked(b, bits))
        }
    }

    /// The low `bits` of `x`, sign-extended to 64 bits.
    fn sext(&mut self, x: Value, bits: u32) -> Value {
        if bits >= 64 {
            return x;
        }
        let n = self.b.ins().ireduce(int_ty(bits), x);
        self.b.ins().sextend(I64, n)
    }

    fn call(&mut self, sig: SigRef, addr: usize, args: &[Value]) -> Value {
        let f = self.b.ins().iconst(self.ptr, addr as i64);
        let c = self.b.ins().call_indirect(sig, f, args);
        self.b.inst_results(c)[0]
    }

    /// Goes to the fail block when `rc` (an i32) is not 0.
    fn check_rc(&mut self, rc: Value) {
        let ok = self.b.create_block();
        self.b.ins().brif(rc, self.fail_blk, &[], ok, &[]);
        self.b.switch_to_block(ok);
    }

    /// Integer `setp` `i`'s comparison of its operands (`Aff::Cmp`), before its
    /// predicates are combined or written.
    fn int_cmp(&mut self, i: &Inst) -> Option<Value> {
        let (Op::Setp { a, b, .. }, Aff::Cmp { bits, signed, code }) = (&i.op, i.aff) else {
            return None;
        };
        let (av, bv) = (self.reg(*a), self.reg(*b));
        let (x, y) = self.operands(av, bv, bits as u32, signed);
        Some(self.b.ins().icmp(int_cc(code, signed), x, y))
    }

    /// Counts `n` more thread instructions.
    fn count(&mut self, n: u64) {
        let c = self.get(self.cnt);
        let c = self.b.ins().iadd_imm(c, n as i64);
        self.put(self.cnt, c);
    }

    /// Checks the budget when the count has reached [`TICK`].
    fn tick_check(&mut self, pc: u32) {
        let cnt = self.get(self.cnt);
        let due = self
            .b
            .ins()
            .icmp_imm(IntCC::UnsignedGreaterThanOrEqual, cnt, TICK as i64);
        let (tick, cont) = (self.b.create_block(), self.b.create_block());
        self.b.ins().brif(due, tick, &[], cont, &[]);
        self.b.switch_to_block(tick);
        let pcv = self.b.ins().iconst(I32, pc as i64);
        let rc = self.call(self.sigs.tick, self.h.tick, &[self.ctx, pcv, cnt]);
        let zero = self.iconst(0);
        self.put(self.cnt, zero);
        self.b.ins().brif(rc, self.fail_blk, &[], cont, &[]);
        self.b.switch_to_block(cont);
    }

    fn block_at(&mut self, pc: usize) -> Block {
        if pc >= self.prog.insts.len() {
            return self.exit_blk;
        }
        if let Some(b) = self.blocks[pc] {
            return b;
        }
        let b = self.b.create_block();
        self.blocks[pc] = Some(b);
        b
    }

    /// The specials (`per_thread`: those that differ between threads, defined on each
    /// way into the kernel's code, never spilled; else the others) and, with the others,
    /// the constants.
    fn prelude(&mut self, specials: &[u32], per_thread: bool, tv: Value) {
        let uniform = self.f.uniform;
        let tids = self.f.tids;
        let mut packed = None;
        for &k in specials {
            if PER_THREAD.contains(&k) != per_thread {
                continue;
            }
            let v = match k {
                0..=2 => {
                    let p = *packed.get_or_insert_with(|| {
                        let a = self.b.ins().imul_imm(tv, 8);
                        let a = self.b.ins().iadd(tids, a);
                        self.b.ins().load(I64, pure_load(), a, 0)
                    });
                    let s = self.b.ins().ushr_imm(p, 16 * k as i64);
                    self.b.ins().band_imm(s, 0xffff)
                }
                12 => self.b.ins().band_imm(tv, 31),
                13 => self.b.ins().ushr_imm(tv, 5),
                17..=21 => {
                    let lane = self.b.ins().band_imm(tv, 31);
                    let one = self.iconst(1);
                    let eq = self.b.ins().ishl(one, lane);
                    let lt = self.b.ins().iadd_imm(eq, -1);
                    let le = self.b.ins().bor(lt, eq);
                    match k {
                        17 => eq,
                        18 => lt,
                        19 => le,
                        20 => {
                            let x = self.b.ins().bnot(le);
                            self.b.ins().band_imm(x, 0xffff_ffff)
                        }
                        _ => {
                            let x = self.b.ins().bnot(lt);
                            self.b.ins().band_imm(x, 0xffff_ffff)
                        }
                    }
                }
                _ => self
                    .b
                    .ins()
                    .load(I64, trusted(), uniform, (k as usize * 8) as i32),
            };
            self.set(k, v);
        }
        if !per_thread {
            for &(r, c) in &self.prog.consts {
                let v = self.iconst(c);
                self.set(r, v);
            }
        }
    }

    fn kernel(&mut self, specials: &[u32], uniform_prologue: &[bool]) {
        let prog = self.prog;
        // What is the same in every thread, once.
        let zero = self.iconst(0);
        self.prelude(specials, false, zero);
        for (k, i) in prog.prologue.iter().enumerate() {
            if uniform_prologue[k] {
                self.inst(i, PROLOGUE | k as u32);
            }
        }
        self.b.def_var(self.t, zero);
        self.put(self.cnt, zero);
        // (The four-lane code's splats of them, once it is built.)
        let (splats, after) = (self.b.create_block(), self.b.create_block());
        self.b.ins().jump(splats, &[]);
        self.b.switch_to_block(after);
        let head = self.b.create_block();
        // (Four lanes at a time or one, `Kernel::rows`: chosen at the end.)
        let pick = self.b.create_block();
        match &self.v {
            Some(_) => {
                self.vs_reset();
                self.phases_reset();
                self.b.ins().jump(pick, &[]);
            }
            None => {
                self.b.ins().jump(head, &[]);
            }
        }

        // The thread loop: each thread from its start to its exit.
        self.b.switch_to_block(head);
        let tv = self.b.use_var(self.t);
        let done = self
            .b
            .ins()
            .icmp(IntCC::UnsignedGreaterThanOrEqual, tv, self.f.nthreads);
        let (start, ret_blk) = (self.b.create_block(), self.b.create_block());
        self.b.ins().brif(done, ret_blk, &[], start, &[]);

        // Start: the per-thread specials and prologue, then pc 0.
        self.b.switch_to_block(start);
        let tv = self.b.use_var(self.t);
        self.prelude(specials, true, tv);
        for (k, i) in prog.prologue.iter().enumerate() {
            if !uniform_prologue[k] {
                self.inst(i, PROLOGUE | k as u32);
            }
        }
        let first = self.block_at(0);
        self.b.ins().jump(first, &[]);

        // The body.
        let leaders = self.leaders(self.v.is_some());
        let n = prog.insts.len();
        self.walk(&leaders, false);
        // Instructions are counted per loop iteration (the loop's length, at its
        // backward branch) and per thread (the kernel's length, at its exit): the
        // interpreter's count as a warp runs them all, lanes on or off.
        self.back_edge_checks();

        // Exit, then the next thread.
        self.b.switch_to_block(self.exit_blk);
        self.count((n + prog.prologue.len()) as u64);
        self.b.ins().jump(self.next_blk, &[]);
        self.b.switch_to_block(self.next_blk);
        self.tick_check(u32::MAX);
        let tv = self.b.use_var(self.t);
        let t1 = self.b.ins().iadd_imm(tv, 1);
        self.b.def_var(self.t, t1);
        match &self.v {
            // The next lane of a group whose lanes parted, else the next group.
            Some(v) => {
                let vhead = v.head;
                self.b.ins().jump(vhead, &[]);
            }
            None => {
                self.b.ins().jump(head, &[]);
            }
        }
        if self.v.is_some() {
            let vleaders = self.leaders(false);
            self.groups(specials, uniform_prologue, &vleaders, head);
            self.back_edge_checks();
            // Where the four-lane code took a group's threads for one row's
            // consecutive `%tid.x`, a block whose x size is not a multiple of four runs
            // one thread at a time (with barriers, the interpreter runs it:
            // `Kernel::runs_block`).
            self.b.switch_to_block(pick);
            let vhead = self.vs().head;
            if self.vs().rows {
                let ntx = self
                    .b
                    .ins()
                    .load(I64, trusted(), self.f.uniform, NTID_X as i32 * 8);
                let odd = self.b.ins().band_imm(ntx, vector::LANES as i64 - 1);
                self.b.ins().brif(odd, head, &[], vhead, &[]);
            } else {
                self.b.ins().jump(vhead, &[]);
            }
        }

        if self.v.is_some() {
            self.fill_splats(splats, after);
        } else {
            self.b.switch_to_block(splats);
            self.b.ins().jump(after, &[]);
        }

        for (blk, rc) in [(ret_blk, 0), (self.fail_blk, 1)] {
            self.b.switch_to_block(blk);
            let c = self.get(self.cnt);
            self.b
                .ins()
                .store(trusted(), c, self.ctx, offset_of!(Ctx, count) as i32);
            let r = self.b.ins().iconst(I32, rc);
            self.b.ins().return_(&[r]);
        }
    }

    /// Four threads at a time ([`vector`]): a group starts when four threads remain
    /// (else the one-thread loop at `head` runs the rest), runs the body on its four
    /// lanes, and at its exit counts their instructions and goes on with the next.
    /// With barriers, the body is built once per phase, each with its own loop over
    /// the groups ([`vector::PhaseCode`]).
    fn groups(
        &mut self,
        specials: &[u32],
        uniform_prologue: &[bool],
        leaders: &[bool],
        head: Block,
    ) {
        let prog = self.prog;
        let (vhead, rend, resume, phase) = {
            let v = self.v.as_ref().expect("four-lane state");
            (v.head, v.rend, v.resume, v.phase)
        };
        let heads: Vec<Block> = self.vs().codes.iter().map(|c| c.head).collect();
        let barriers = self.vs().frame.is_some();
        // Where a parted group's lanes go, each in turn (`resume`), then the phase's
        // next group.
        self.b.switch_to_block(vhead);
        let tv = self.b.use_var(self.t);
        let lanes_end = self.get(rend);
        let lanes_left = self.b.ins().icmp(IntCC::UnsignedLessThan, tv, lanes_end);
        let next = self.b.create_block();
        self.b.ins().brif(lanes_left, resume, &[], next, &[]);
        self.b.switch_to_block(next);
        if barriers {
            let ph = self.get(phase);
            let keys: Vec<u32> = (0..heads.len() as u32).collect();
            self.dispatch(ph, &keys, &heads);
        } else {
            self.b.ins().jump(heads[0], &[]);
        }
        // Past the last group: the threads past the last full group run one at a
        // time, none of them a lane that parted (and no state of parted lanes lives
        // across the groups' loop). With barriers (a block of whole groups), the next
        // phase starts.
        let end = self.b.create_block();
        for (e, &h) in heads.iter().enumerate() {
            self.vs().cur = e;
            self.b.switch_to_block(h);
            let tv = self.b.use_var(self.t);
            let last = self.b.ins().iadd_imm(tv, vector::LANES as i64);
            // (A phase with a tail stops before it, `vector::PhaseCode::tail`.)
            let tail = self.vs().codes[e].tail.clone();
            let limit = match &tail {
                Some(_) => {
                    let limit = self.vs().limit;
                    self.get(limit)
                }
                None => self.f.nthreads,
            };
            let fits = self
                .b
                .ins()
                .icmp(IntCC::UnsignedLessThanOrEqual, last, limit);
            let (start, past) = (self.b.create_block(), self.b.create_block());
            self.b.ins().brif(fits, start, &[], past, &[]);
            self.b.switch_to_block(past);
            if let Some(t) = &tail {
                self.tail_end(t);
            }
            self.b.ins().jump(end, &[]);
            self.b.switch_to_block(start);
            self.phase_start(specials, uniform_prologue);
            self.lin_reset();
            self.walk(leaders, true);
            let exit = self.vs().codes[e].exit;
            self.b.switch_to_block(exit);
            if barriers {
                // A group that exited waits at no barrier.
                let tv = self.b.use_var(self.t);
                let area = self.area(tv);
                self.set_header(area, 0);
            }
            // (The budget is checked once the groups are done: a loop of the body
            // checks it at its backward branch, and the groups are finite.)
            self.count((prog.insts.len() + prog.prologue.len()) as u64 * vector::LANES);
            self.next_group();
        }
        self.b.switch_to_block(end);
        if barriers {
            self.phase_end(head);
        } else {
            self.vs_reset();
            self.tick_check(u32::MAX);
            self.b.ins().jump(head, &[]);
        }
        self.resume(specials, uniform_prologue);
        self.park_and_rejoin(specials, uniform_prologue);
    }

    /// An instruction (not a branch, exit or barrier) where its guard holds.
    fn guarded(&mut self, i: &Inst, pc: u32) {
        match i.guard {
            None => self.inst(i, pc),
            Some((p, neg)) => {
                let (then, cont) = (self.b.create_block(), self.b.create_block());
                let c = self.pred(p);
                if neg {
                    self.b.ins().brif(c, cont, &[], then, &[]);
                } else {
                    self.b.ins().brif(c, then, &[], cont, &[]);
                }
                self.b.switch_to_block(then);
                self.inst(i, pc);
                self.b.ins().jump(cont, &[]);
                self.b.switch_to_block(cont);
            }
        }
    }

    /// The backward branches' blocks: their count and budget check.
    fn back_edge_checks(&mut self) {
        for (tb, pc, to, len, tick) in std::mem::take(&mut self.back_edges) {
            self.b.switch_to_block(tb);
            self.count(len);
            if tick {
                self.tick_check(pc);
            }
            self.b.ins().jump(to, &[]);
        }
    }

    /// To `taken` when the guard holds (always without one), else to `fall`.
    fn branch(&mut self, guard: Option<(u32, bool)>, taken: Block, fall: Block) {
        match guard {
            None => {
                self.b.ins().jump(taken, &[]);
            }
            Some((p, neg)) => {
                let c = self.pred(p);
                if neg {
                    self.b.ins().brif(c, fall, &[], taken, &[]);
                } else {
                    self.b.ins().brif(c, taken, &[], fall, &[]);
                }
            }
        }
    }

    /// A branch's destination: a backward branch checks the budget first (in a block
    /// of its own, filled at the end).
    /// (`four`: of the four-lane code, whose iterations count four threads' each.)
    fn branch_target(&mut self, pc: u32, target: u32, four: bool) -> Block {
        let to = self.block_of(target as usize, four);
        if target > pc {
            return to;
        }
        let tb = self.b.create_block();
        let lanes = if four { vector::LANES } else { 1 };
        // A loop with a barrier in it is no loop of a phase's code (the group stops at
        // the barrier): the phase's end checks the budget (`phase_end`).
        let barriers = four && self.vs().frame.is_some();
        let tick = !barriers || self.in_phase_from(target, pc);
        self.back_edges
            .push((tb, pc, to, (pc - target + 1) as u64 * lanes, tick));
        tb
    }

    /// The block of instruction `pc` in the one-thread code, or (`four`) in the
    /// four-lane code.
    fn block_of(&mut self, pc: usize, four: bool) -> Block {
        if four {
            self.vblock_at(pc)
        } else {
            self.block_at(pc)
        }
    }

    /// The body's instructions in order, a new block at each leader: the one-thread
    /// code, or (`four`) the four-lane code.
    fn walk(&mut self, leaders: &[bool], four: bool) {
        let prog = self.prog;
        let mut open = false;
        for (pc, i) in prog.insts.iter().enumerate() {
            if leaders[pc] {
                if four && !self.in_phase(pc) {
                    // Not the phase's code.
                    open = false;
                    continue;
                }
                let blk = self.block_of(pc, four);
                if open {
                    if four {
                        self.lin_edge(pc);
                    }
                    self.b.ins().jump(blk, &[]);
                }
                self.b.switch_to_block(blk);
                open = true;
                if four {
                    self.vblock_start(pc);
                } else {
                    self.park_check(pc);
                }
            }
            if !open {
                // Unreachable code after an unconditional jump: on to the next leader.
                continue;
            }
            let pcu = pc as u32;
            let (taken, fall) = match i.op {
                // (Only in the four-lane code of a kernel whose barriers it runs.)
                Op::Bar { .. } => {
                    if four {
                        self.vbarrier(pcu);
                    } else {
                        self.lane_barrier(pcu);
                    }
                    open = false;
                    continue;
                }
                Op::Bra { target } => (
                    self.branch_target(pcu, target, four),
                    self.block_of(pc + 1, four),
                ),
                Op::Exit => (
                    self.block_of(prog.insts.len(), four),
                    self.block_of(pc + 1, four),
                ),
                // (Computed once as the phase starts.)
                _ if self.v.as_ref().is_some_and(|v| v.hoisted[pc]) => continue,
                _ if four => {
                    self.vinst(i, pcu);
                    continue;
                }
                _ => {
                    self.guarded(i, pcu);
                    continue;
                }
            };
            if four {
                if let Op::Bra { target } = i.op {
                    self.lin_edge(target as usize);
                }
                if i.guard.is_some() {
                    self.lin_edge(pc + 1);
                }
                self.vbranch(pcu, i.guard, taken, fall);
            } else {
                self.branch(i.guard, taken, fall);
            }
            open = false;
        }
        if open {
            let exit = self.block_of(prog.insts.len(), four);
            self.b.ins().jump(exit, &[]);
        }
    }

    /// Instructions starting a block: pc 0, branch targets, those after a branch, an
    /// exit or a barrier.
    /// (`parts`: also where four lanes may part, [`vector::may_part`].)
    fn leaders(&self, parts: bool) -> Vec<bool> {
        let n = self.prog.insts.len();
        let mut l = vec![false; n + 1];
        if n > 0 {
            l[0] = true;
        }
        for (pc, i) in self.prog.insts.iter().enumerate() {
            match i.op {
                Op::Bra { target } => {
                    l[(target as usize).min(n)] = true;
                    l[pc + 1] = true;
                }
                Op::Exit | Op::Bar { .. } => l[pc + 1] = true,
                _ => {}
            }
            // Four lanes that part go on alone from that instruction itself.
            if parts && vector::may_part(self.prog, i) {
                l[pc] = true;
            }
        }
        // Lanes that parted at a branch come together again where it reconverges.
        for &r in self.v.iter().flat_map(|v| &v.rejoin_pcs) {
            l[r as usize] = true;
        }
        l
    }

    /// The host address of an access of `total` bytes at `addr` in space `sp` by the
    /// instruction at `pc`: the fast path, else the engine's resolver (which reports
    /// a fault, and the function fails).
    fn address(&mut self, pc: u32, sp: Sp, addr: Value, total: u64) -> Value {
        let ptr = self.ptr;
        let merge = self.b.create_block();
        let p = self.b.append_block_param(merge, ptr);
        let (fast, slow) = (self.b.create_block(), self.b.create_block());
        let fast_ptr = match sp {
            Sp::Global | Sp::Generic => {
                let cache = self.f.cache;
                let slot = (pc as usize * std::mem::size_of::<Slot>()) as i32;
                let base = self.b.ins().load(I64, trusted(), cache, slot);
                let units = self.b.ins().load(I64, trusted(), cache, slot + 8);
                let o = self.b.ins().isub(addr, base);
                let r = self.b.ins().rotr_imm(o, total.trailing_zeros() as i64);
                let ok = self.b.ins().icmp(IntCC::UnsignedLessThan, r, units);
                self.b.ins().brif(ok, fast, &[], slow, &[]);
                self.b.switch_to_block(fast);
                let hp = self.b.ins().load(I64, trusted(), cache, slot + 16);
                self.b.ins().iadd(hp, o)
            }
            Sp::Shared | Sp::Local => {
                let (win, base, len) = if sp == Sp::Shared {
                    (SHARED_WINDOW, self.f.shared, self.f.shared_len)
                } else {
                    let (local, ls) = (self.f.local, self.f.local_size);
                    let tv = self.b.use_var(self.t);
                    let o = self.b.ins().imul(tv, ls);
                    (LOCAL_WINDOW, self.b.ins().iadd(local, o), ls)
                };
                // A window address, or an offset (anything else takes the slow path).
                let d = self.b.ins().iadd_imm(addr, win.wrapping_neg() as i64);
                let in_win = self
                    .b
                    .ins()
                    .icmp_imm(IntCC::UnsignedLessThan, d, WINDOW_SIZE as i64);
                let o = self.b.ins().select(in_win, d, addr);
                let e = self.b.ins().iadd_imm(o, total as i64);
                let small = self
                    .b
                    .ins()
                    .icmp_imm(IntCC::UnsignedLessThan, o, WINDOW_SIZE as i64);
                let fits = self.b.ins().icmp(IntCC::UnsignedLessThanOrEqual, e, len);
                let ok = self.b.ins().band(small, fits);
                let misaligned = self.b.ins().band_imm(addr, (total - 1) as i64);
                let aligned = self.b.ins().icmp_imm(IntCC::Equal, misaligned, 0);
                let ok = self.b.ins().band(ok, aligned);
                self.b.ins().brif(ok, fast, &[], slow, &[]);
                self.b.switch_to_block(fast);
                self.b.ins().iadd(base, o)
            }
        };
        self.b.ins().jump(merge, &[BlockArg::Value(fast_ptr)]);
        self.b.set_cold_block(slow);
        self.b.switch_to_block(slow);
        let pcv = self.b.ins().iconst(I32, pc as i64);
        let tv = self.b.use_var(self.t);
        let t32 = self.b.ins().ireduce(I32, tv);
        let hp = self.call(self.sigs.mem, self.h.mem, &[self.ctx, pcv, t32, addr]);
        let null = self.b.ins().icmp_imm(IntCC::Equal, hp, 0);
        self.b
            .ins()
            .brif(null, self.fail_blk, &[], merge, &[BlockArg::Value(hp)]);
        self.b.switch_to_block(merge);
        p
    }

    /// The address `a + off` of a memory instruction.
    fn addr_of(&mut self, a: u32, off: i64) -> Value {
        let av = self.reg(a);
        self.b.ins().iadd_imm(av, off)
    }

    /// Registers `d` from consecutive values of `size` bytes at `p + off`, each
    /// sign-extended (`sext`) and masked to its register (`dmask`).
    fn load_regs(&mut self, p: Value, off: i32, size: u8, sext: bool, d: &[u32], dmask: u64) {
        for (k, &r) in d.iter().enumerate() {
            let v = self.load_sized(p, off + (k * size as usize) as i32, size, sext);
            let v = if dmask == u64::MAX {
                v
            } else {
                self.b.ins().band_imm(v, dmask as i64)
            };
            self.set(r, v);
        }
    }

    fn load_sized(&mut self, p: Value, off: i32, size: u8, sext: bool) -> Value {
        let flags = MemFlags::new();
        if size == 8 {
            return self.b.ins().load(I64, flags, p, off);
        }
        let ins = self.b.ins();
        match (size, sext) {
            (1, false) => ins.uload8(I64, flags, p, off),
            (1, true) => ins.sload8(I64, flags, p, off),
            (2, false) => ins.uload16(I64, flags, p, off),
            (2, true) => ins.sload16(I64, flags, p, off),
            (_, false) => ins.uload32(flags, p, off),
            (_, true) => ins.sload32(flags, p, off),
        }
    }

    /// Float helpers: the register's bits as a float, a float as canonical bits.
    fn as_float(&mut self, x: Value, f64: bool) -> Value {
        if f64 {
            self.b.ins().bitcast(F64, MemFlags::new(), x)
        } else {
            let n = self.b.ins().ireduce(I32, x);
            self.b.ins().bitcast(F32, MemFlags::new(), n)
        }
    }
    /// A float result as register bits, a NaN as the GPU makes it from operands `ops`
    /// (register bits, in the hardware's priority order): f32 the canonical NaN, f64 the
    /// first NaN operand quieted, else the default NaN (`ops::Flt::result`).
    fn canon(&mut self, f: Value, f64: bool, ops: &[Value]) -> Value {
        let nan = self.b.ins().fcmp(FloatCC::Unordered, f, f);
        if f64 {
            let bits = self.b.ins().bitcast(I64, MemFlags::new(), f);
            let q = self.nan_of_f64(ops);
            self.b.ins().select(nan, q, bits)
        } else {
            let bits = self.b.ins().bitcast(I32, MemFlags::new(), f);
            let q = self.b.ins().iconst(I32, 0x7fff_ffff);
            let v = self.b.ins().select(nan, q, bits);
            self.b.ins().uextend(I64, v)
        }
    }

    /// An atomic through the engine's helper (`h_atom`), its old value into `d`.
    fn atom_helper(&mut self, pc: u32, a: R, off: i64, b: R, c: R, d: Option<R>) {
        let addr = self.addr_of(a, off);
        let (bv, cv) = (self.reg(b), self.reg(c));
        let p = self.b.ins().iconst(I32, pc as i64);
        let tv = self.b.use_var(self.t);
        let t32 = self.b.ins().ireduce(I32, tv);
        let rc = self.call(
            self.sigs.atom,
            self.h.atom,
            &[self.ctx, p, t32, addr, bv, cv],
        );
        self.check_rc(rc);
        if let Some(d) = d {
            let old = self
                .b
                .ins()
                .load(I64, trusted(), self.ctx, offset_of!(Ctx, ret) as i32);
            self.set(d, old);
        }
    }

    /// Reduction `op` (of 32-bit type `ty`) of register `b` on the word at `a + off`,
    /// when the launch combines them: into the host thread's held value when its slot
    /// ([`RedSlot::index`]) holds that word and operation already (placed there by the
    /// engine, which checked the address), else through the engine (`atom_helper`:
    /// checks, holds, or applies what the slot held).
    #[allow(clippy::too_many_arguments)]
    fn combine(&mut self, pc: u32, op: AtomOp, ty: AtomTy, a: R, off: i64, b: R, c: R) {
        let addr = self.addr_of(a, off);
        let x = self.b.ins().ushr_imm(addr, 2);
        let y = self.b.ins().ushr_imm(addr, 12);
        let k = self.b.ins().bxor(x, y);
        let k = self.b.ins().band_imm(k, (RedSlot::SLOTS - 1) as i64);
        let k = self
            .b
            .ins()
            .imul_imm(k, std::mem::size_of::<RedSlot>() as i64);
        let table = self
            .b
            .ins()
            .load(I64, trusted(), self.ctx, offset_of!(Ctx, reds) as i32);
        let slot = self.b.ins().iadd(table, k);
        let held = self
            .b
            .ins()
            .load(I64, trusted(), slot, offset_of!(RedSlot, addr) as i32);
        let tag = self
            .b
            .ins()
            .load(I64, trusted(), slot, offset_of!(RedSlot, tag) as i32);
        let same_word = self.b.ins().icmp(IntCC::Equal, held, addr);
        let same_op = self
            .b
            .ins()
            .icmp_imm(IntCC::Equal, tag, RedSlot::tag(op, ty) as i64);
        let hit = self.b.ins().band(same_word, same_op);
        let (fast, slow, done) = (
            self.b.create_block(),
            self.b.create_block(),
            self.b.create_block(),
        );
        self.b.ins().brif(hit, fast, &[], slow, &[]);
        self.b.switch_to_block(fast);
        let at = offset_of!(RedSlot, acc) as i32;
        let acc = self.b.ins().load(I32, trusted(), slot, at);
        let bv = self.reg(b);
        let v = self.b.ins().ireduce(I32, bv);
        let signed = ty == AtomTy::S32;
        let r = match op {
            AtomOp::Add => self.b.ins().iadd(acc, v),
            AtomOp::Min if signed => self.b.ins().smin(acc, v),
            AtomOp::Min => self.b.ins().umin(acc, v),
            AtomOp::Max if signed => self.b.ins().smax(acc, v),
            AtomOp::Max => self.b.ins().umax(acc, v),
            AtomOp::And => self.b.ins().band(acc, v),
            AtomOp::Or => self.b.ins().bor(acc, v),
            // (The caller passes the `combinable` operations alone.)
            _ => self.b.ins().bxor(acc, v),
        };
        self.b.ins().store(trusted(), r, slot, at);
        self.b.ins().jump(done, &[]);
        self.b.set_cold_block(slow);
        self.b.switch_to_block(slow);
        self.atom_helper(pc, a, off, b, c, None);
        self.b.ins().jump(done, &[]);
        self.b.switch_to_block(done);
    }

    /// Whether f64 register bits `x` are a NaN.
    fn is_nan_f64(&mut self, x: Value) -> Value {
        let mag = self.b.ins().band_imm(x, 0x7fff_ffff_ffff_ffff);
        self.b
            .ins()
            .icmp_imm(IntCC::UnsignedGreaterThan, mag, 0x7ff0_0000_0000_0000)
    }
    /// The NaN an f64 operation on `ops` gives: the first NaN operand quieted, else
    /// the default NaN.
    fn nan_of_f64(&mut self, ops: &[Value]) -> Value {
        let mut acc = self.iconst(0xfff8_0000_0000_0000);
        for &x in ops.iter().rev() {
            let nan = self.is_nan_f64(x);
            let q = self.b.ins().bor_imm(x, 1 << 51);
            acc = self.b.ins().select(nan, q, acc);
        }
        acc
    }

    /// One instruction (not a branch, exit or barrier), its guard already taken.
    fn inst(&mut self, i: &Inst, pc: u32) {
        if self.affine(i) || self.semantic(i) {
            return;
        }
        let pcv = |l: &mut Lower| l.b.ins().iconst(I32, pc as i64);
        match &i.op {
            Op::Bin(_, d, a, b) => {
                let (av, bv, p) = (self.reg(*a), self.reg(*b), pcv(self));
                let r = self.call(self.sigs.bin, self.h.bin, &[self.ctx, p, av, bv]);
                self.set(*d, r);
            }
            Op::Un(_, d, a) | Op::Cvt { d, a, .. } => {
                let (av, p) = (self.reg(*a), pcv(self));
                let r = self.call(self.sigs.un, self.h.un, &[self.ctx, p, av]);
                self.set(*d, r);
            }
            Op::Ter(_, d, a, b, c) | Op::Prmt(d, a, b, c) => {
                let (av, bv, cv, p) = (self.reg(*a), self.reg(*b), self.reg(*c), pcv(self));
                let r = self.call(self.sigs.ter, self.h.ter, &[self.ctx, p, av, bv, cv]);
                self.set(*d, r);
            }
            Op::Mov(d, a, m) => {
                let av = self.reg(*a);
                let r = if *m == u64::MAX {
                    av
                } else {
                    self.b.ins().band_imm(av, *m as i64)
                };
                self.set(*d, r);
            }
            Op::Setp {
                d, dn, a, b, comb, ..
            } => {
                let r = match i.sem {
                    Sem::FCmp { code, f64 } => {
                        let (av, bv) = (self.reg(*a), self.reg(*b));
                        let (x, y) = (self.as_float(av, f64), self.as_float(bv, f64));
                        let cc = float_cc(code);
                        self.b.ins().fcmp(cc, x, y)
                    }
                    _ => {
                        let (av, bv, p) = (self.reg(*a), self.reg(*b), pcv(self));
                        let m = self.call(self.sigs.cmp, self.h.cmp, &[self.ctx, p, av, bv]);
                        self.b.ins().ireduce(I8, m)
                    }
                };
                self.setp(r, *d, *dn, *comb);
            }
            Op::Selp { d, a, b, p, neg } => {
                let c = self.pred(*p);
                let (av, bv) = (self.reg(*a), self.reg(*b));
                let r = if *neg {
                    self.b.ins().select(c, bv, av)
                } else {
                    self.b.ins().select(c, av, bv)
                };
                self.set(*d, r);
            }
            Op::PredLogic {
                op,
                d,
                a,
                an,
                b,
                bn,
            } => {
                let mut av = self.pred(*a);
                if *an {
                    av = self.b.ins().bxor_imm(av, 1);
                }
                let r = match op {
                    None => av,
                    Some(o) => {
                        let mut bv = self.pred(*b);
                        if *bn {
                            bv = self.b.ins().bxor_imm(bv, 1);
                        }
                        self.bool_op(*o, av, bv)
                    }
                };
                self.set_pred(*d, r);
            }
            Op::PredConst { d, v } => {
                let r = self.b.ins().iconst(I8, *v as i64);
                self.set_pred(*d, r);
            }
            Op::Pack { d, parts, bits } => {
                let mut acc = self.iconst(0);
                for (k, p) in parts.iter().enumerate() {
                    let v = self.reg(*p);
                    let v = self.masked(v, *bits);
                    let s = (k as u32 * bits) as i64;
                    let v = if s == 0 {
                        v
                    } else {
                        self.b.ins().ishl_imm(v, s)
                    };
                    acc = self.b.ins().bor(acc, v);
                }
                self.set(*d, acc);
            }
            Op::Unpack { s, parts, bits } => {
                let sv = self.reg(*s);
                for (k, p) in parts.iter().enumerate() {
                    let sh = (k as u32 * bits) as i64;
                    let v = if sh == 0 {
                        sv
                    } else {
                        self.b.ins().ushr_imm(sv, sh)
                    };
                    let v = self.masked(v, *bits);
                    self.set(*p, v);
                }
            }
            Op::Lop3 { d, a, b, c, lut } => {
                let (av, bv, cv) = (self.reg(*a), self.reg(*b), self.reg(*c));
                let (na, nb, nc) = (
                    self.b.ins().bnot(av),
                    self.b.ins().bnot(bv),
                    self.b.ins().bnot(cv),
                );
                let mut acc = self.iconst(0);
                for k in 0..8u8 {
                    if lut >> k & 1 == 1 {
                        let x = if k & 4 != 0 { av } else { na };
                        let y = if k & 2 != 0 { bv } else { nb };
                        let z = if k & 1 != 0 { cv } else { nc };
                        let t = self.b.ins().band(x, y);
                        let t = self.b.ins().band(t, z);
                        acc = self.b.ins().bor(acc, t);
                    }
                }
                let r = self.masked(acc, 32);
                self.set(*d, r);
            }
            Op::LdParam {
                d,
                n,
                size,
                sext,
                off,
                dmask,
            } => {
                let params = self.f.params;
                self.load_regs(params, *off as i32, *size, *sext, &d[..*n as usize], *dmask);
            }
            Op::Ld {
                sp,
                size,
                sext,
                n,
                d,
                a,
                off,
                dmask,
            } => {
                let addr = self.addr_of(*a, *off);
                let p = self.address(pc, *sp, addr, *size as u64 * *n as u64);
                self.load_regs(p, 0, *size, *sext, &d[..*n as usize], *dmask);
            }
            Op::St {
                sp,
                size,
                n,
                s,
                a,
                off,
            } => {
                let addr = self.addr_of(*a, *off);
                let p = self.address(pc, *sp, addr, *size as u64 * *n as u64);
                for k in 0..*n as usize {
                    let v = self.reg(s[k]);
                    let v = if *size == 8 {
                        v
                    } else {
                        self.b.ins().ireduce(int_ty(*size as u32 * 8), v)
                    };
                    self.b
                        .ins()
                        .store(MemFlags::new(), v, p, (k * *size as usize) as i32);
                }
            }
            Op::Atom {
                sp,
                op,
                ty: ty @ (AtomTy::U32 | AtomTy::S32),
                d,
                a,
                off,
                b,
                c,
            } if !matches!(op, AtomOp::Inc | AtomOp::Dec) => {
                // A 32-bit integer atomic the CPU has: on the checked address; a
                // reduction of a kernel whose reductions are combined
                // (`Program::combine_reds`) is combined into the host thread's.
                if d.is_none()
                    && self.prog.combine_reds
                    && combinable(*op, *ty)
                    && matches!(sp, Sp::Global | Sp::Generic)
                {
                    self.combine(pc, *op, *ty, *a, *off, *b, *c);
                    return;
                }
                let addr = self.addr_of(*a, *off);
                let p = self.address(pc, *sp, addr, 4);
                let bv = self.reg(*b);
                let x = self.b.ins().ireduce(I32, bv);
                let flags = MemFlags::new();
                let signed = *ty == AtomTy::S32;
                let old = match op {
                    AtomOp::Cas => {
                        let cv = self.reg(*c);
                        let y = self.b.ins().ireduce(I32, cv);
                        self.b.ins().atomic_cas(flags, p, x, y)
                    }
                    _ => {
                        let rmw = match op {
                            AtomOp::Add => AtomicRmwOp::Add,
                            AtomOp::Min if signed => AtomicRmwOp::Smin,
                            AtomOp::Min => AtomicRmwOp::Umin,
                            AtomOp::Max if signed => AtomicRmwOp::Smax,
                            AtomOp::Max => AtomicRmwOp::Umax,
                            AtomOp::Exch => AtomicRmwOp::Xchg,
                            AtomOp::And => AtomicRmwOp::And,
                            AtomOp::Or => AtomicRmwOp::Or,
                            _ => AtomicRmwOp::Xor,
                        };
                        self.b.ins().atomic_rmw(I32, flags, rmw, p, x)
                    }
                };
                if let Some(d) = d {
                    let v = self.b.ins().uextend(I64, old);
                    self.set(*d, v);
                }
            }
            Op::Atom {
                d, a, off, b, c, ..
            } => self.atom_helper(pc, *a, *off, *b, *c, *d),
            Op::Nop => {
                self.b.ins().fence();
            }
            // `compile` refused everything else.
            _ => {}
        }
    }

    fn bool_op(&mut self, op: BoolOp, a: Value, b: Value) -> Value {
        match op {
            BoolOp::And => self.b.ins().band(a, b),
            BoolOp::Or => self.b.ins().bor(a, b),
            BoolOp::Xor => self.b.ins().bxor(a, b),
        }
    }

    /// `setp`'s destinations from the comparison `r` (an i8 0 or 1).
    fn setp(&mut self, r: Value, d: u32, dn: Option<u32>, comb: Option<(BoolOp, u32, bool)>) {
        let nr = self.b.ins().bxor_imm(r, 1);
        let (p, q) = match comb {
            None => (r, nr),
            Some((op, c, neg)) => {
                let mut cv = self.pred(c);
                if neg {
                    cv = self.b.ins().bxor_imm(cv, 1);
                }
                (self.bool_op(op, r, cv), self.bool_op(op, nr, cv))
            }
        };
        self.set_pred(d, p);
        if let Some(dn) = dn {
            self.set_pred(dn, q);
        }
    }

    /// An instruction with a lane-affine form: what the form says it computes.
    fn affine(&mut self, i: &Inst) -> bool {
        match i.aff {
            Aff::Mov { d, a, bits } => {
                let av = self.reg(a);
                let r = self.masked(av, bits as u32);
                self.set(d, r);
            }
            Aff::Add { d, a, b, bits, sub } => {
                let (av, bv) = (self.reg(a), self.reg(b));
                let r = if sub {
                    self.b.ins().isub(av, bv)
                } else {
                    self.b.ins().iadd(av, bv)
                };
                let r = self.masked(r, bits as u32);
                self.set(d, r);
            }
            Aff::Mul { d, a, b, c, bits } => {
                let (av, bv) = (self.reg(a), self.reg(b));
                let mut r = self.b.ins().imul(av, bv);
                if let Some(c) = c {
                    let cv = self.reg(c);
                    r = self.b.ins().iadd(r, cv);
                }
                let r = self.masked(r, bits as u32);
                self.set(d, r);
            }
            Aff::MulWide {
                d,
                a,
                b,
                bits,
                signed,
            } => {
                let (av, bv) = (self.reg(a), self.reg(b));
                let (x, y) = self.operands(av, bv, bits as u32, signed);
                let r = self.b.ins().imul(x, y);
                let r = self.masked(r, 2 * bits as u32);
                self.set(d, r);
            }
            Aff::Shl { d, a, b, bits } => {
                let (av, bv) = (self.reg(a), self.reg(b));
                let n = self.masked(bv, 32);
                let s = self.b.ins().ishl(av, n);
                let s = self.masked(s, bits as u32);
                let big = self
                    .b
                    .ins()
                    .icmp_imm(IntCC::UnsignedGreaterThanOrEqual, n, bits as i64);
                let zero = self.iconst(0);
                let r = self.b.ins().select(big, zero, s);
                self.set(d, r);
            }
            Aff::Shr {
                d,
                a,
                b,
                bits,
                signed,
            } => {
                let (av, bv) = (self.reg(a), self.reg(b));
                let n = self.masked(bv, 32);
                let big = self
                    .b
                    .ins()
                    .icmp_imm(IntCC::UnsignedGreaterThanOrEqual, n, bits as i64);
                let r = if signed {
                    let x = self.sext(av, bits as u32);
                    let top = self.iconst(bits as u64 - 1);
                    let k = self.b.ins().select(big, top, n);
                    let s = self.b.ins().sshr(x, k);
                    self.masked(s, bits as u32)
                } else {
                    let x = self.masked(av, bits as u32);
                    let s = self.b.ins().ushr(x, n);
                    let zero = self.iconst(0);
                    self.b.ins().select(big, zero, s)
                };
                self.set(d, r);
            }
            Aff::Cmp { .. } => {
                let (Some(r), Op::Setp { d, dn, comb, .. }) = (self.int_cmp(i), &i.op) else {
                    return false;
                };
                self.setp(r, *d, *dn, *comb);
            }
            Aff::None | Aff::Mem { .. } => return false,
        }
        true
    }

    /// An instruction with a [`Sem`]: what it says the instruction computes.
    fn semantic(&mut self, i: &Inst) -> bool {
        match (i.sem, &i.op) {
            (Sem::Int { op, bits, signed }, Op::Bin(_, d, a, b)) => {
                let (av, bv) = (self.reg(*a), self.reg(*b));
                let r = match op {
                    IntOp::And => self.b.ins().band(av, bv),
                    IntOp::Or => self.b.ins().bor(av, bv),
                    IntOp::Xor => self.b.ins().bxor(av, bv),
                    IntOp::Min | IntOp::Max => {
                        let (x, y) = self.operands(av, bv, bits as u32, signed);
                        let cc = if signed {
                            IntCC::SignedLessThan
                        } else {
                            IntCC::UnsignedLessThan
                        };
                        let lt = self.b.ins().icmp(cc, x, y);
                        if op == IntOp::Min {
                            self.b.ins().select(lt, x, y)
                        } else {
                            self.b.ins().select(lt, y, x)
                        }
                    }
                    IntOp::Div | IntOp::Rem => {
                        let (x, y) = self.operands(av, bv, bits as u32, signed);
                        // Division by zero gives all ones, a remainder too (as the
                        // GPU); the one signed overflow (64-bit MIN / -1) wraps.
                        let zero = self.b.ins().icmp_imm(IntCC::Equal, y, 0);
                        let mut avoid = zero;
                        if signed && bits == 64 {
                            let min = self.b.ins().icmp_imm(IntCC::Equal, x, i64::MIN);
                            let m1 = self.b.ins().icmp_imm(IntCC::Equal, y, -1);
                            let ovf = self.b.ins().band(min, m1);
                            avoid = self.b.ins().bor(zero, ovf);
                        }
                        let one = self.iconst(1);
                        let safe = self.b.ins().select(avoid, one, y);
                        let (q, by_zero) = match (op, signed) {
                            (IntOp::Div, true) => {
                                (self.b.ins().sdiv(x, safe), self.iconst(u64::MAX))
                            }
                            (IntOp::Div, false) => {
                                (self.b.ins().udiv(x, safe), self.iconst(u64::MAX))
                            }
                            (_, true) => (self.b.ins().srem(x, safe), self.iconst(u64::MAX)),
                            (_, false) => (self.b.ins().urem(x, safe), self.iconst(u64::MAX)),
                        };
                        self.b.ins().select(zero, by_zero, q)
                    }
                    IntOp::Not => return false,
                };
                let r = self.masked(r, bits as u32);
                self.set(*d, r);
            }
            (
                Sem::Int {
                    op: IntOp::Not,
                    bits,
                    ..
                },
                Op::Un(_, d, a),
            ) => {
                let av = self.reg(*a);
                let r = self.b.ins().bnot(av);
                let r = self.masked(r, bits as u32);
                self.set(*d, r);
            }
            (Sem::Flt { op, f64 }, Op::Bin(_, d, a, b)) => {
                let (av, bv) = (self.reg(*a), self.reg(*b));
                let (x, y) = (self.as_float(av, f64), self.as_float(bv, f64));
                let r = match op {
                    FltOp::Add => self.b.ins().fadd(x, y),
                    FltOp::Sub => self.b.ins().fsub(x, y),
                    FltOp::Mul => self.b.ins().fmul(x, y),
                    FltOp::Div => self.b.ins().fdiv(x, y),
                    FltOp::Fma => return false,
                };
                // NaN priority: b then a; a then b for the GPU's division sequence.
                let order = if op == FltOp::Div { [av, bv] } else { [bv, av] };
                let r = self.canon(r, f64, &order);
                self.set(*d, r);
            }
            (
                Sem::Flt {
                    op: FltOp::Fma,
                    f64,
                },
                Op::Ter(_, d, a, b, c),
            ) => {
                let (av, bv, cv) = (self.reg(*a), self.reg(*b), self.reg(*c));
                let (x, y, z) = (
                    self.as_float(av, f64),
                    self.as_float(bv, f64),
                    self.as_float(cv, f64),
                );
                let r = self.b.ins().fma(x, y, z);
                let r = self.canon(r, f64, &[bv, av, cv]);
                self.set(*d, r);
            }
            (Sem::FSign { neg, f64 }, Op::Un(_, d, a)) => {
                let av = self.reg(*a);
                let sign = if f64 { 1u64 << 63 } else { 1 << 31 };
                let r = if neg {
                    let x = self.b.ins().bxor_imm(av, sign as i64);
                    self.masked(x, if f64 { 64 } else { 32 })
                } else {
                    self.b.ins().band_imm(av, !sign as i64)
                };
                // A NaN operand gives the NaN of an operation (ops::fsign).
                let (nan, q) = if f64 {
                    let nan = self.is_nan_f64(av);
                    (nan, self.b.ins().bor_imm(av, 1 << 51))
                } else {
                    let mag = self.b.ins().band_imm(av, 0x7fff_ffff);
                    let nan = self
                        .b
                        .ins()
                        .icmp_imm(IntCC::UnsignedGreaterThan, mag, 0x7f80_0000);
                    (nan, self.iconst(0x7fff_ffff))
                };
                let r = self.b.ins().select(nan, q, r);
                self.set(*d, r);
            }
            (Sem::Cvt { dt, st, rnd }, Op::Un(_, d, a)) => {
                let av = self.reg(*a);
                let r = match (dt, st) {
                    (CvtTy::F32 | CvtTy::F64, CvtTy::S(32) | CvtTy::U(32)) => {
                        let f = if dt == CvtTy::F64 { F64 } else { F32 };
                        let n = self.b.ins().ireduce(I32, av);
                        let x = if st == CvtTy::S(32) {
                            self.b.ins().fcvt_from_sint(f, n)
                        } else {
                            self.b.ins().fcvt_from_uint(f, n)
                        };
                        self.canon(x, dt == CvtTy::F64, &[])
                    }
                    (CvtTy::F64, CvtTy::F32) => {
                        // A NaN keeps its sign and payload, quieted (ops::nan_convert).
                        let x = self.as_float(av, false);
                        let w = self.b.ins().fpromote(F64, x);
                        let bits = self.b.ins().bitcast(I64, MemFlags::new(), w);
                        let nan = self.b.ins().fcmp(FloatCC::Unordered, x, x);
                        let sign = self.b.ins().band_imm(av, 0x8000_0000);
                        let sign = self.b.ins().ishl_imm(sign, 32);
                        let mant = self.b.ins().band_imm(av, 0x7f_ffff);
                        let mant = self.b.ins().ishl_imm(mant, 29);
                        let q = self.b.ins().bor(sign, mant);
                        let q = self.b.ins().bor_imm(q, 0x7ff8_0000_0000_0000);
                        self.b.ins().select(nan, q, bits)
                    }
                    (CvtTy::F32, CvtTy::F64) => {
                        let x = self.as_float(av, true);
                        let n = self.b.ins().fdemote(F32, x);
                        let bits = self.b.ins().bitcast(I32, MemFlags::new(), n);
                        let bits = self.b.ins().uextend(I64, bits);
                        let nan = self.b.ins().fcmp(FloatCC::Unordered, x, x);
                        let sign = self.b.ins().ushr_imm(av, 32);
                        let sign = self.b.ins().band_imm(sign, 0x8000_0000);
                        let mant = self.b.ins().ushr_imm(av, 29);
                        let mant = self.b.ins().band_imm(mant, 0x7f_ffff);
                        let q = self.b.ins().bor(sign, mant);
                        let q = self.b.ins().bor_imm(q, 0x7fc0_0000);
                        self.b.ins().select(nan, q, bits)
                    }
                    (CvtTy::S(32) | CvtTy::U(32), CvtTy::F32) => {
                        let x = self.as_float(av, false);
                        let x = match rnd {
                            Rnd::N => self.b.ins().nearest(x),
                            Rnd::Z => self.b.ins().trunc(x),
                            Rnd::M => self.b.ins().floor(x),
                            Rnd::P => self.b.ins().ceil(x),
                        };
                        let n = if dt == CvtTy::S(32) {
                            self.b.ins().fcvt_to_sint_sat(I32, x)
                        } else {
                            self.b.ins().fcvt_to_uint_sat(I32, x)
                        };
                        self.b.ins().uextend(I64, n)
                    }
                    (CvtTy::S(64) | CvtTy::U(64), CvtTy::S(32)) => self.sext(av, 32),
                    _ => self.masked(av, 32),
                };
                self.set(*d, r);
            }
            _ => return false,
        }
        true
    }
}
