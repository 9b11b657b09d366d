//! A block's threads four at a time. Each register is a vector of the four lanes'
//! values, each the 64-bit value the one-thread code holds: an `i32x4` for a register
//! every value of which fits 32 bits ([`narrow_regs`]), else two `i64x2`; each predicate
//! is an `i32x4` lane mask; registers the same in every thread stay scalars. The common
//! integer, float and comparison operations run on the four lanes at once. A global load
//! or store whose four addresses are consecutive, and inside the allocation the
//! instruction hit last, is checked once and moves the four values together (a load
//! whose lanes share one address loads once); a shared-memory one is checked against
//! the block's shared memory, and made once, or once per lane. Whether the four
//! addresses are consecutive is known when the code is built where the address is a
//! progression of `%tid.x` ([`Lin`]), else tested per group. Barriers: see
//! [`super::phases`]. Other instructions run lane by lane
//! through the one-thread code's own lowering (`Lower::guarded`, the lanes' values moved
//! in and out), so this adds no semantics of its own.
//!
//! A branch all four lanes take (or none) is taken together. Where they disagree, or
//! where an access is not one the group makes together, the lanes part: their registers
//! go to a stack area, and each lane goes on alone in the one-thread code from that
//! instruction (`Lower::resume`: its checks, the engine's resolver, its fault reports),
//! then the next four start. Threads past the last full group of four run one at a
//! time. No call is made from the four-lane code's fast paths (values live across a
//! call would be spilled).

use super::*;
use cranelift_codegen::ir::types::{F32X4, F64X2, I32X4, I64X2, I8X16};
use cranelift_codegen::ir::{
    AliasRegion, ConstantData, Endianness, InstructionData, Opcode, StackSlot, StackSlotData,
    StackSlotKind, ValueDef,
};
use cranelift_frontend::Switch;

/// Threads a group runs together.
pub(super) const LANES: u64 = 4;
/// `rjoin` when the lanes that parted do not come together again.
pub(super) const NO_REJOIN: i64 = -1;
/// Every lane of a group, as bits.
const ALL_LANES: i64 = (1 << LANES) - 1;

/// Whether kernels may run four threads at a time (`VMGPU_JIT_LANES=1` runs every
/// compiled kernel one thread at a time, for comparison).
pub(super) fn enabled() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var("VMGPU_JIT_LANES").map_or(true, |v| v.trim() != "1"))
}

/// Whether running `prog` four threads at a time pays: when at most a third of its
/// body's instructions run lane by lane (each of those costs four one-thread ones
/// and the moves of its lanes' values), and the kernel is not so large that its
/// compiling time (the four-lane and the one-thread code) or the stack area its
/// lanes part through (32 bytes per register and predicate it writes) would grow
/// past [`MAX_LANE_INSTS`] and [`MAX_WRITTEN`].
pub(super) fn worth_it(prog: &Program) -> bool {
    if std::env::var_os("VMGPU_JIT_DUMP").is_some() {
        for (pc, i) in prog.insts.iter().enumerate() {
            if !matches!(i.op, Op::Bra { .. } | Op::Exit | Op::Bar { .. }) && !native(prog, i) {
                eprintln!(
                    "; {}: lane by lane: pc {pc} (PTX line {}) {:?}",
                    prog.name, i.line, i.op
                );
            }
        }
    }
    let lanes = prog
        .insts
        .iter()
        .filter(|i| !matches!(i.op, Op::Bra { .. } | Op::Exit | Op::Bar { .. }) && !native(prog, i))
        .count();
    let mut written: Vec<bool> = vec![false; (prog.nregs + prog.npreds) as usize];
    for i in &prog.insts {
        for r in reads_writes(&i.op).1 {
            written[r as usize] = true;
        }
        for p in preds_rw(i).1 {
            written[(prog.nregs + p) as usize] = true;
        }
    }
    let parted = written.iter().filter(|&&w| w).count();
    !prog.insts.is_empty()
        && prog.insts.len() <= MAX_LANE_INSTS
        && parted <= MAX_WRITTEN
        && lanes * 3 <= prog.insts.len()
}

/// Most instructions of a kernel run four threads at a time.
const MAX_LANE_INSTS: usize = 1 << 13;
/// Most registers and predicates a kernel run four threads at a time may write.
const MAX_WRITTEN: usize = 1 << 10;

/// Whether the lanes may part at instruction `i` (a branch or exit under a
/// predicate, an access the four-lane code makes, a `mul.wide` whose lanes it
/// tests): the one-thread code has a block
/// starting there.
pub(super) fn may_part(prog: &Program, i: &Inst) -> bool {
    match i.op {
        Op::Bra { .. } | Op::Exit => i.guard.is_some(),
        Op::Ld { .. } | Op::St { .. } => native(prog, i),
        // (`Lower::widen_test`.)
        _ => matches!(i.aff, Aff::MulWide { bits: 32, .. }) && i.guard.is_none(),
    }
}

/// The constant value of register `r`, if it is one of the program's constants.
fn konst_of(prog: &Program, r: R) -> Option<u64> {
    prog.consts.iter().find(|c| c.0 == r).map(|c| c.1)
}

/// The predicates an instruction reads (its guard's included) and writes.
pub(super) fn preds_rw(i: &Inst) -> (Vec<u32>, Vec<u32>) {
    let mut r: Vec<u32> = i.guard.iter().map(|g| g.0).collect();
    let mut w = vec![];
    match &i.op {
        Op::Setp { d, dn, comb, .. } => {
            w.push(*d);
            w.extend(dn);
            if let Some((_, c, _)) = comb {
                r.push(*c);
            }
        }
        Op::Selp { p, .. } => r.push(*p),
        Op::PredLogic { op, d, a, b, .. } => {
            r.push(*a);
            if op.is_some() {
                r.push(*b);
            }
            w.push(*d);
        }
        Op::PredConst { d, .. } => w.push(*d),
        _ => {}
    }
    (r, w)
}

/// The float comparison of `setp`'s code the four-lane code has (`float_cc`'s
/// conditions the code generator has on vectors), if it has it.
fn vfcc(code: u8) -> Option<FloatCC> {
    let cc = float_cc(code);
    matches!(
        cc,
        FloatCC::Equal
            | FloatCC::LessThan
            | FloatCC::LessThanOrEqual
            | FloatCC::GreaterThan
            | FloatCC::GreaterThanOrEqual
            | FloatCC::NotEqual
            | FloatCC::Ordered
            | FloatCC::Unordered
    )
    .then_some(cc)
}

/// Whether the four-lane code runs `i` on all lanes at once (the order of
/// `Lower::inst`: the affine form, then the semantic one, then the operation).
pub(super) fn native(prog: &Program, i: &Inst) -> bool {
    let konst = |r| konst_of(prog, r).is_some();
    match i.aff {
        Aff::Mov { .. } | Aff::Add { .. } | Aff::Mul { .. } | Aff::MulWide { .. } => return true,
        Aff::Shl { b, .. } | Aff::Shr { b, .. } => return konst(b),
        Aff::Cmp { .. } if matches!(i.op, Op::Setp { .. }) => return true,
        _ => {}
    }
    match (i.sem, &i.op) {
        (
            Sem::Int {
                op: IntOp::And | IntOp::Or | IntOp::Xor,
                ..
            },
            Op::Bin(..),
        ) => return true,
        (Sem::Int { op: IntOp::Not, .. }, Op::Un(..)) => return true,
        (Sem::Int { .. }, Op::Bin(..) | Op::Un(..)) => return false,
        (Sem::Flt { op, .. }, Op::Bin(..)) => return op != FltOp::Fma,
        (Sem::Flt { op: FltOp::Fma, .. }, Op::Ter(..)) => return true,
        (Sem::FCmp { code, .. }, Op::Setp { .. }) => return vfcc(code).is_some(),
        (Sem::Cvt { dt, st, .. }, Op::Un(..)) => {
            return matches!(dt, CvtTy::S(_) | CvtTy::U(_))
                && matches!(st, CvtTy::S(_) | CvtTy::U(_))
        }
        (Sem::None, _) => {}
        _ => return false,
    }
    match &i.op {
        Op::Mov(..)
        | Op::Selp { .. }
        | Op::PredLogic { .. }
        | Op::PredConst { .. }
        | Op::LdParam { .. }
        | Op::Nop => true,
        Op::Ld { sp, n, size, .. } | Op::St { sp, n, size, .. } => {
            i.guard.is_none()
                && matches!(sp, Sp::Global | Sp::Generic | Sp::Shared)
                && *n == 1
                && matches!(size, 4 | 8)
        }
        _ => false,
    }
}

/// A register's four lanes: a narrow register (every value it is given is below
/// 2^32, [`narrow_regs`]) as one `i32x4`, any other as two `i64x2` (lanes 0-1, 2-3).
#[derive(Clone, Copy)]
enum Var4 {
    N(Variable),
    W(Variable, Variable),
}

/// A value of the four-lane state a group's area holds: a register (and how its lanes
/// are held), or a predicate (an `i32x4` lane mask; 0 or -1 per lane).
#[derive(Clone, Copy)]
enum Held {
    Reg(R, Var4),
    Pred(u32),
}

/// Four 64-bit lanes (`i64x2` each half).
type V2 = (Value, Value);

/// What the four-lane code needs beside the one-thread code's state.
pub(super) struct VecState {
    regs: Vec<Option<Var4>>,
    /// Per register computed once per phase ([`phases::phase_uniform`]), its cell's
    /// offset from `Ctx::frames` (an `i64`: both codes read it there, and only the
    /// phases' starts write it); per instruction, whether it is one that computes them
    /// (neither code runs it: `phase_end` does, once).
    ucell: Vec<Option<i32>>,
    pub hoisted: Vec<bool>,
    /// Uniform registers' lanes the kernel's entry stores (`uniform_lanes`): the
    /// register, whether as 64-bit lanes, its place from `Ctx::frames` (before the
    /// cells, `super::SPLATS`).
    splats: Vec<(R, bool, i32)>,
    /// Predicates: an `i32x4` lane mask each.
    preds: Vec<Option<Variable>>,
    /// Registers the same in every thread of the block (one-thread variables, splatted
    /// where lanes are needed).
    uniform: Vec<bool>,
    narrow: Vec<bool>,
    /// Constant registers' values.
    konst: Vec<Option<u64>>,
    /// The four-lane body once per phase (one phase without barriers), and the one
    /// being built.
    pub codes: Vec<PhaseCode>,
    pub cur: usize,
    /// Lanes' registers and predicates when a group's lanes part (`spill_regs` then
    /// `spill_preds`, 32 bytes each: lane k at 4 k, or 8 k for a wide register).
    spill: StackSlot,
    spill_regs: Vec<R>,
    spill_preds: Vec<u32>,
    /// Where the parted lanes go on from (an index in `resume_pcs`), and the thread
    /// after the group's last.
    pub rpc: Cell,
    pub rend: Cell,
    resume_pcs: Vec<u32>,
    pub resume: Block,
    /// Start of the next group (checks that four threads remain).
    pub head: Block,
    /// Where lanes parted at a branch come together again (its reconvergence point,
    /// `Program::ipdom`; [`NO_REJOIN`] when they do not), the lanes that have reached
    /// it (bits), and the lanes still to go on alone (bits).
    pub rjoin: Cell,
    pub parked: Cell,
    pub alive: Cell,
    /// The reconvergence points of the body's branches (a block starts there in
    /// both codes).
    pub rejoin_pcs: Vec<u32>,
    park: Block,
    /// Per reconvergence point, where a lane parks there (stores what is live there,
    /// then `park`).
    parks: Vec<Block>,
    rejoin: Block,
    /// Per register, when its lanes are a uniform register plus 64-bit lanes (an
    /// address `base + offset`): the two.
    split: Vec<Option<(R, V2)>>,
    /// Lanes found consecutive (of a step) in this basic block: the lanes' first half
    /// and the step, the answer.
    consecutive: Vec<(Value, u64, Value)>,
    /// In a kernel with barriers ([`phases`]): the bytes of a group's frame (its area
    /// in `Ctx::frames`), and the barriers' instructions.
    pub frame: Option<u32>,
    pub bars: Vec<u32>,
    /// Per instruction (and the end), which of `spill_regs` then `spill_preds` are
    /// live there (bits, `phases::live_in`): what a group's area holds when its
    /// lanes part, wait at a barrier or come together there.
    live: Vec<Vec<u64>>,
    /// The phase the groups run: 0 from the start, `k + 1` from after barrier
    /// `bars[k]`; and the barrier the groups have reached in this one (its index,
    /// [`NO_BARRIER`] while none has).
    pub phase: Cell,
    pub bar_at: Cell,
    /// The phase's groups' end where it has a [`phases::Tail`] (`PhaseCode::tail`).
    pub limit: Cell,
    /// Per register, its lanes' progression where known ([`Lin`]): in the basic block
    /// being built, and (`lin_base`) from every block's start (registers the body
    /// never writes).
    lin: Vec<Option<Lin>>,
    lin_base: Vec<Option<Lin>>,
    /// Per instruction starting a block, the progressions its four-lane ways in so
    /// far bring (those the block starts with: where none differ), and whether it
    /// starts with `lin_base` alone (a loop's head, where lanes come together, where a
    /// phase starts: ways in whose progressions are not all known when it is built).
    lin_in: Vec<Option<Vec<Option<Lin>>>>,
    lin_fresh: Vec<bool>,
    /// The `mul.wide` being built tests its operand `.0`'s lanes (stride `.1`).
    widen_test: Option<(R, i64)>,
    /// Some access relied on a progression of `%tid.x` (or the same `%tid.y`).
    pub rows: bool,
}

/// The four-lane code of one phase: what the groups run from its start (pc 0, or
/// after a barrier) until each reaches a barrier or exits, in a loop of its own over
/// the groups (`head`), so that the phase's loop passes no dispatch on the phase and
/// the values it keeps stay its own.
pub(super) struct PhaseCode {
    /// Where the phase starts, and the instructions it may run (`phases::reach`).
    pub entry: u32,
    pub reach: Vec<bool>,
    /// Of the values a group's frame holds (bits, as `live`), those the phase loads
    /// at its start and never writes: the frame keeps them, and a barrier need not
    /// store them again.
    kept: Vec<u64>,
    blocks: Vec<Option<Block>>,
    /// Where a group starts, and where it has exited.
    pub head: Block,
    pub exit: Block,
    /// Groups past a bound of `%tid.x` that go straight to a barrier, where it has
    /// them: its groups' loop stops before them (`tail_limit`, `tail_end`).
    pub tail: Option<phases::Tail>,
}

/// The cells of the parted lanes' and the phases' state (`rend` to `bar_at`, `limit`)
/// and of the instruction count; the registers computed once per phase follow.
const FIXED_CELLS: u32 = 9;

/// Where cell `k` is from `Ctx::frames`: 8 bytes each, in the `FRAME_CELLS` before it.
fn cell_offset(k: u32) -> i32 {
    8 * k as i32 - super::FRAME_CELLS as i32
}

/// `bar_at` before any group has reached a barrier in a phase.
pub(super) const NO_BARRIER: i64 = -1;

/// A value of the parted lanes' state (`rpc`, `rend`, `rjoin`, `parked`, `alive`) or of
/// the phases (`phase`, `bar_at`): a Cranelift variable, or in a kernel with barriers
/// a place in memory (before `Ctx::frames`, [`super::FRAME_CELLS`]). There a group
/// passes the groups' loop head once per phase, and as variables the loop carried
/// them and the register allocator moved them on every pass, though only a group
/// whose lanes part uses them (reduce_sum: 11% fewer instructions); in a kernel
/// without barriers, the variables measured faster (vector_add: 9% fewer).
#[derive(Clone, Copy)]
pub(super) enum Cell {
    Var(Variable),
    Mem { off: i32, ty: Type, flags: MemFlags },
}

/// What is known of a register's four lanes when the code is built: lane `i` is lane
/// 0's value plus `s * i` modulo 2^`m`, every lane below 2^`small` when that is known,
/// and (`row`) only where a group's four threads are one row's consecutive `%tid.x`
/// (a block whose x size is a multiple of four: `Kernel::rows`). Such an address needs
/// no test that its lanes are consecutive: a global or shared access of four values
/// with none, where `vmem` tested them on every group.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Lin {
    s: i64,
    m: u8,
    small: Option<u8>,
    row: bool,
}

impl Lin {
    /// Every lane the same.
    const SAME: Lin = Lin {
        s: 0,
        m: 64,
        small: None,
        row: false,
    };

    /// The lanes of a per-thread special register, if they are a progression.
    fn special(k: u32) -> Option<Lin> {
        let (s, small, row) = match k {
            0 => (1, 16, true),
            1 | 2 => (0, 16, true),
            12 => (1, 5, false),
            13 => (0, 27, false),
            _ => return None,
        };
        Some(Lin {
            s,
            m: 64,
            small: Some(small),
            row,
        })
    }

    fn reduce(self, bits: u8) -> Lin {
        match self.small {
            Some(b) if b <= bits => self,
            _ => Lin {
                m: self.m.min(bits),
                small: None,
                ..self
            },
        }
    }

    fn add(self, o: Lin, bits: u8, sub: bool) -> Lin {
        let small = match (self.small, o.small) {
            (Some(a), Some(b)) if !sub && a.max(b) < bits => Some(a.max(b) + 1),
            _ => None,
        };
        Lin {
            s: if sub {
                self.s.wrapping_sub(o.s)
            } else {
                self.s.wrapping_add(o.s)
            },
            m: self.m.min(o.m).min(bits),
            small,
            row: self.row || o.row,
        }
    }

    /// Times constant `k`.
    fn scale(self, k: u64, bits: u8) -> Lin {
        let small = self
            .small
            .filter(|_| k <= 1 << 32)
            .map(|b| b + (64 - k.saturating_sub(1).leading_zeros()) as u8)
            .filter(|&b| b <= bits);
        Lin {
            s: self.s.wrapping_mul(k as i64),
            m: self.m.min(bits),
            small,
            row: self.row,
        }
    }
}

/// The progressions that hold wherever the four-lane code reads the register (what a
/// block starts with; `base` for registers the body never writes): those of the
/// registers every write of which the four lanes make together, with the same
/// progression. A write qualifies where it is unguarded, needs no test of its lanes
/// (`lin_step`), and no lane may run it apart from the others before they come
/// together again (it is not between a branch whose condition may differ between
/// threads and its reconvergence point, where they meet: `phases::divergence`); a
/// register the body may read before writing it also holds its first value, zero.
fn stable_lins(
    prog: &Program,
    uniform: &[bool],
    base: Vec<Option<Lin>>,
    written: &[bool],
) -> Vec<Option<Lin>> {
    let n = prog.insts.len();
    let d = phases::divergence(prog, uniform);
    let mut apart = vec![false; n];
    for (pc, i) in prog.insts.iter().enumerate() {
        let differs = i.guard.is_some_and(|(p, _)| d.preds[p as usize]);
        if let Some(r) = phases::meeting_point(prog, pc).filter(|_| differs) {
            phases::mark_between(prog, pc, r as usize, &mut apart);
        }
    }
    let regs: Vec<u32> = (0..prog.nregs).filter(|&r| written[r as usize]).collect();
    let live = phases::live_in(prog, &regs);
    // `None` while no write is seen; `Some(None)` where no progression holds.
    let mut lin: Vec<Option<Option<Lin>>> = base
        .iter()
        .enumerate()
        .map(|(r, b)| (!written[r]).then_some(*b))
        .collect();
    for (k, &r) in regs.iter().enumerate() {
        if live[0][k / 64] >> (k % 64) & 1 == 1 {
            lin[r as usize] = Some(Some(Lin::SAME));
        }
    }
    loop {
        let mut changed = false;
        for (pc, i) in prog.insts.iter().enumerate() {
            for dst in reads_writes(&i.op).1 {
                let step = match aff_dest(&i.aff) {
                    // (A kernel parameter: the same in every thread.)
                    _ if i.guard.is_none() && matches!(i.op, Op::LdParam { .. }) => Some(Lin::SAME),
                    Some(x) if x == dst && i.guard.is_none() && !apart[pc] => {
                        // (An operand no write of which is seen yet: later.)
                        if reads_writes(&i.op)
                            .0
                            .iter()
                            .any(|&r| lin[r as usize].is_none())
                        {
                            continue;
                        }
                        lin_step(&i.aff, |r| lin[r as usize].flatten(), |r| konst_of(prog, r))
                            .filter(|x| !x.1)
                            .map(|x| x.0)
                    }
                    _ => None,
                };
                let old = lin[dst as usize];
                let new = match old {
                    None => Some(step),
                    Some(o) => Some(if o == step { o } else { None }),
                };
                if new != old {
                    lin[dst as usize] = new;
                    changed = true;
                }
            }
        }
        if !changed {
            return lin.into_iter().map(Option::flatten).collect();
        }
    }
}

/// The register an affine form writes.
fn aff_dest(aff: &Aff) -> Option<R> {
    match *aff {
        Aff::Mov { d, .. }
        | Aff::Add { d, .. }
        | Aff::Mul { d, .. }
        | Aff::MulWide { d, .. }
        | Aff::Shl { d, .. }
        | Aff::Shr { d, .. } => Some(d),
        _ => None,
    }
}

/// What `aff` makes of its operands' progressions (`lin`), and whether it holds only
/// once the four lanes are tested (`mul.wide` of lanes that might wrap below their
/// width); `None` where the result is no known progression. Every lane the same in,
/// every lane the same out.
fn lin_step(
    aff: &Aff,
    lin: impl Fn(R) -> Option<Lin>,
    konst: impl Fn(R) -> Option<u64>,
) -> Option<(Lin, bool)> {
    let scaled = |a: R, b: R, bits: u8| -> Option<Lin> {
        let (fa, fb) = (lin(a)?, lin(b)?);
        if fa.s == 0 && fb.s == 0 {
            return Some(Lin {
                row: fa.row || fb.row,
                ..Lin::SAME
            });
        }
        match (konst(a), konst(b)) {
            (_, Some(k)) => Some(fa.scale(k, bits)),
            (Some(k), _) => Some(fb.scale(k, bits)),
            _ => None,
        }
    };
    match *aff {
        Aff::Mov { a, bits, .. } => Some((lin(a)?.reduce(bits), false)),
        Aff::Add {
            a, b, bits, sub, ..
        } => Some((lin(a)?.add(lin(b)?, bits, sub), false)),
        Aff::Mul { a, b, c, bits, .. } => {
            let x = scaled(a, b, bits)?;
            let x = match c {
                Some(c) => x.add(lin(c)?, bits, false),
                None => x,
            };
            Some((x, false))
        }
        Aff::Shl { a, b, bits, .. } => {
            let n = konst(b).filter(|&n| n < u64::from(bits))?;
            Some((lin(a)?.scale(1 << n, bits), false))
        }
        Aff::MulWide {
            a, b, bits, signed, ..
        } => {
            // The operands as `bits`-bit values, extended: a progression below 2^bits
            // (or 2^(bits - 1), signed) stays one; any other, if the lanes are tested.
            let (fa, fb) = (lin(a)?, lin(b)?);
            if fa.m < bits || fb.m < bits {
                return None;
            }
            let fits = |f: Lin| f.s == 0 || f.small.is_some_and(|b| b < bits - u8::from(signed));
            let wide = |f: Lin| Lin {
                m: 2 * bits,
                small: f.small.filter(|&b| b < bits - u8::from(signed)),
                ..f
            };
            let ext = |k: u64| {
                let sh = 64 - u32::from(bits);
                if signed {
                    ((k << sh) as i64 >> sh) as u64
                } else {
                    k & mask(u32::from(bits))
                }
            };
            let (ka, kb) = (konst(a).map(ext), konst(b).map(ext));
            let x = if fa.s == 0 && fb.s == 0 {
                Lin {
                    row: fa.row || fb.row,
                    ..Lin::SAME
                }
            } else if let Some(k) = kb.filter(|_| fb.s == 0) {
                wide(fa).scale(k, 2 * bits)
            } else if let Some(k) = ka.filter(|_| fa.s == 0) {
                wide(fb).scale(k, 2 * bits)
            } else {
                return None;
            };
            Some((x, x.s != 0 && !(fits(fa) && fits(fb))))
        }
        _ => None,
    }
}

/// The most bits of the value instruction `i` writes to its registers, where what
/// it computes says so (the one-thread lowering masks its result to them).
fn result_bits(i: &Inst) -> Option<u32> {
    match i.aff {
        Aff::Mov { bits, .. }
        | Aff::Add { bits, .. }
        | Aff::Mul { bits, .. }
        | Aff::Shl { bits, .. }
        | Aff::Shr { bits, .. } => return Some(bits as u32),
        Aff::MulWide { bits, .. } => return Some(2 * bits as u32),
        _ => {}
    }
    match (i.sem, &i.op) {
        (Sem::Int { op: IntOp::Not, .. }, Op::Bin(..)) => None,
        (Sem::Int { bits, .. }, Op::Bin(..) | Op::Un(..)) => Some(bits as u32),
        (Sem::Flt { op: FltOp::Fma, .. }, Op::Bin(..)) => None,
        (Sem::Flt { f64, .. }, Op::Bin(..) | Op::Ter(..))
        | (Sem::FSign { f64, .. }, Op::Un(..)) => Some(if f64 { 64 } else { 32 }),
        (Sem::Cvt { dt, .. }, Op::Un(..)) => Some(match dt {
            CvtTy::F64 | CvtTy::S(64) | CvtTy::U(64) => 64,
            _ => 32,
        }),
        _ => match &i.op {
            Op::Mov(_, _, m) if *m <= u32::MAX as u64 => Some(32),
            Op::Ld { dmask, .. } | Op::LdParam { dmask, .. } => {
                Some(if *dmask <= u32::MAX as u64 { 32 } else { 64 })
            }
            Op::Unpack { bits, .. } => Some(*bits),
            Op::Lop3 { .. } => Some(32),
            _ => None,
        },
    }
}

/// Per register, whether every value the kernel gives it is below 2^32 (its lanes
/// then fit an `i32x4`): the per-thread specials, and registers every write of which
/// is at most 32 bits wide (a copy or a `selp` as wide as its sources).
fn narrow_regs(prog: &Program, uniform: &[bool], uniform_prologue: &[bool]) -> Vec<bool> {
    let mut narrow: Vec<bool> = (0..prog.nregs)
        .map(|r| {
            !uniform[r as usize]
                || konst_of(prog, r).is_some_and(|k| k <= u32::MAX as u64)
                // (%ntid, %ctaid, %nctaid, %nwarpid, %smid, %nsmid)
                || matches!(r, 3..=11 | 14..=16)
        })
        .collect();
    let body: Vec<&Inst> = prog
        .prologue
        .iter()
        .zip(uniform_prologue)
        .filter(|(_, u)| !**u)
        .map(|(i, _)| i)
        .chain(&prog.insts)
        .collect();
    loop {
        let mut changed = false;
        for i in &body {
            let ok = match (&i.op, i.aff) {
                (Op::Mov(_, a, m), Aff::None) if *m == u64::MAX => narrow[*a as usize],
                (Op::Selp { a, b, .. }, _) => narrow[*a as usize] && narrow[*b as usize],
                _ => result_bits(i).is_some_and(|b| b <= 32),
            };
            for d in reads_writes(&i.op).1 {
                if !ok && narrow[d as usize] {
                    narrow[d as usize] = false;
                    changed = true;
                }
            }
        }
        if !changed {
            return narrow;
        }
    }
}

fn le() -> MemFlags {
    MemFlags::new().with_endianness(Endianness::Little)
}

impl Lower<'_> {
    /// Sets up the four-lane state (before the body is lowered).
    pub(super) fn vec_state(
        &mut self,
        mut uniform: Vec<bool>,
        uniform_prologue: &[bool],
    ) -> VecState {
        let prog = self.prog;
        let mut spill_regs = vec![];
        let mut spill_preds = vec![];
        let bars = phases::barriers(prog);
        // Registers computed once per phase: the same in every thread from then on,
        // each in a cell after the fixed ones.
        let (once, hoisted) = if bars.is_empty() {
            (vec![false; uniform.len()], vec![false; prog.insts.len()])
        } else {
            let most = super::FRAME_CELLS / 8 - FIXED_CELLS as usize;
            phases::phase_uniform(prog, &uniform, &bars, most)
        };
        let mut ucell = vec![None; uniform.len()];
        for (k, r) in (0..uniform.len()).filter(|&r| once[r]).enumerate() {
            uniform[r] = true;
            ucell[r] = Some(cell_offset(FIXED_CELLS + k as u32));
        }
        // With barriers, what the prologue computes per thread waits in the frames
        // too: a group starting a phase after a barrier loads it (one load per
        // register) rather than computing it again (the thread indices' table).
        let per_thread_prologue = prog
            .prologue
            .iter()
            .zip(uniform_prologue)
            .filter(|(_, &u)| !bars.is_empty() && !u)
            .map(|(i, _)| i);
        for i in per_thread_prologue.chain(&prog.insts) {
            for r in reads_writes(&i.op).1 {
                if !uniform[r as usize] && !spill_regs.contains(&r) {
                    spill_regs.push(r);
                }
            }
            for p in preds_rw(i).1 {
                if !spill_preds.contains(&p) {
                    spill_preds.push(p);
                }
            }
        }
        let size = 32 * (spill_regs.len() + spill_preds.len()).max(1) as u32;
        let spill = self.b.create_sized_stack_slot(StackSlotData::new(
            StackSlotKind::ExplicitSlot,
            size,
            4,
        ));
        let konst = (0..prog.nregs).map(|r| konst_of(prog, r)).collect();
        let narrow = narrow_regs(prog, &uniform, uniform_prologue);
        // (Measured: in the memory with barriers, in variables without.) Cell `k`
        // at 8 k bytes of the `FRAME_CELLS` before the frames, whose address the code
        // holds anyway (a stack slot's address Cranelift hoists and spills).
        let barriers = !bars.is_empty();
        let mut cell = |k: u32, ty: Type| {
            if barriers {
                Cell::Mem {
                    off: cell_offset(k),
                    ty,
                    flags: trusted(),
                }
            } else {
                Cell::Var(self.b.declare_var(ty))
            }
        };
        let (rend, rpc) = (cell(0, I64), cell(1, I32));
        let (rjoin, parked, alive) = (cell(2, I32), cell(3, I32), cell(4, I32));
        let (phase, bar_at) = (cell(5, I32), cell(6, I32));
        let limit = cell(8, I64);
        // The instruction count too (`FIXED_CELLS` cells), in an alias region of its
        // own: no load of the code's other state waits on its stores.
        if let Cell::Mem { off, ty, .. } = cell(7, I64) {
            let flags = trusted().with_alias_region(Some(AliasRegion::Table));
            self.cnt = Cell::Mem { off, ty, flags };
        }
        let mut rejoin_pcs = vec![];
        for pc in 0..prog.insts.len() {
            if let Some(r) = phases::meeting_point(prog, pc).filter(|r| !rejoin_pcs.contains(r)) {
                rejoin_pcs.push(r);
            }
        }
        let mut vars: Vec<u32> = spill_regs.clone();
        vars.extend(spill_preds.iter().map(|p| prog.nregs + p));
        let live = phases::live_in(prog, &vars);
        let parks = rejoin_pcs.iter().map(|_| self.b.create_block()).collect();
        // Parted lanes go on from after a barrier.
        let mut resume_pcs = rejoin_pcs.clone();
        resume_pcs.extend(
            bars.iter()
                .map(|&b| b + 1)
                .filter(|r| !rejoin_pcs.contains(r)),
        );
        let entries = std::iter::once(0).chain(bars.iter().map(|&b| b + 1));
        let codes = entries
            .map(|entry| {
                let reach = phases::reach(prog, entry as usize);
                let mut kept = vec![0; live[0].len()];
                if entry > 0 {
                    let written: Vec<u32> = (0..prog.insts.len())
                        .filter(|&pc| reach[pc])
                        .flat_map(|pc| {
                            let i = &prog.insts[pc];
                            let regs = reads_writes(&i.op).1.into_iter();
                            regs.chain(preds_rw(i).1.into_iter().map(|p| prog.nregs + p))
                        })
                        .collect();
                    for (k, x) in vars.iter().enumerate() {
                        let at_entry = live[entry as usize][k / 64] >> (k % 64) & 1 == 1;
                        if at_entry && !written.contains(x) {
                            kept[k / 64] |= 1 << (k % 64);
                        }
                    }
                }
                let tail = (entry > 0)
                    .then(|| phases::tail(prog, &uniform, &hoisted, entry))
                    .flatten();
                PhaseCode {
                    entry,
                    reach,
                    kept,
                    blocks: vec![None; prog.insts.len() + 1],
                    head: self.b.create_block(),
                    exit: self.b.create_block(),
                    tail,
                }
            })
            .collect();
        // The progressions every block starts with.
        let mut written = vec![false; prog.nregs as usize];
        for i in &prog.insts {
            for r in reads_writes(&i.op).1 {
                written[r as usize] = true;
            }
        }
        let mut lin_base: Vec<Option<Lin>> = (0..prog.nregs)
            .map(|r| {
                if uniform[r as usize] {
                    Some(Lin::SAME)
                } else if PER_THREAD.contains(&r) && !written[r as usize] {
                    Lin::special(r)
                } else {
                    None
                }
            })
            .collect();
        for (k, i) in prog.prologue.iter().enumerate() {
            let Some(d) =
                aff_dest(&i.aff).filter(|&d| !uniform_prologue[k] && !written[d as usize])
            else {
                continue;
            };
            let step = lin_step(&i.aff, |r| lin_base[r as usize], |r| konst_of(prog, r));
            lin_base[d as usize] = step.filter(|x| !x.1 && i.guard.is_none()).map(|x| x.0);
        }
        let mut lin_base = stable_lins(prog, &uniform, lin_base, &written);
        for (r, l) in lin_base.iter_mut().enumerate() {
            if once[r] {
                *l = Some(Lin::SAME);
            }
        }
        let n = prog.insts.len();
        let mut lin_fresh = vec![false; n + 1];
        lin_fresh[0] = true;
        for (pc, i) in prog.insts.iter().enumerate() {
            match i.op {
                Op::Bra { target } if target as usize <= pc => lin_fresh[target as usize] = true,
                Op::Bar { .. } => lin_fresh[pc + 1] = true,
                _ => {}
            }
        }
        for &r in &rejoin_pcs {
            lin_fresh[r as usize] = true;
        }
        VecState {
            splats: vec![],
            ucell,
            hoisted,
            lin_in: vec![None; n + 1],
            lin_fresh,
            lin: lin_base.clone(),
            lin_base,
            widen_test: None,
            rows: false,
            frame: (!bars.is_empty()).then_some(size + 16),
            bars,
            live,
            phase,
            bar_at,
            limit,
            regs: vec![None; prog.nregs as usize],
            preds: vec![None; prog.npreds as usize],
            uniform,
            narrow,
            konst,
            codes,
            cur: 0,
            spill,
            spill_regs,
            spill_preds,
            rpc,
            rend,
            resume_pcs,
            resume: self.b.create_block(),
            head: self.b.create_block(),
            rjoin,
            parked,
            alive,
            rejoin_pcs,
            park: self.b.create_block(),
            parks,
            rejoin: self.b.create_block(),
            split: vec![None; prog.nregs as usize],
            consecutive: vec![],
        }
    }

    pub(super) fn vs(&mut self) -> &mut VecState {
        self.v.as_mut().expect("four-lane state")
    }

    fn var4(&mut self, r: R) -> Var4 {
        if let Some(v) = self.vs().regs[r as usize] {
            return v;
        }
        let v = if self.vs().narrow[r as usize] {
            Var4::N(self.b.declare_var(I32X4))
        } else {
            Var4::W(self.b.declare_var(I64X2), self.b.declare_var(I64X2))
        };
        self.vs().regs[r as usize] = Some(v);
        v
    }
    fn pred_var4(&mut self, p: u32) -> Variable {
        if let Some(v) = self.vs().preds[p as usize] {
            return v;
        }
        let v = self.b.declare_var(I32X4);
        self.vs().preds[p as usize] = Some(v);
        v
    }

    /// The cell of register `r` when the four-lane code computes it once per phase.
    pub(super) fn ucell(&self, r: R) -> Option<i32> {
        self.v.as_ref().and_then(|v| v.ucell[r as usize])
    }
    fn is_uniform(&self, r: R) -> bool {
        self.v.as_ref().is_some_and(|v| v.uniform[r as usize])
    }
    fn is_narrow(&self, r: R) -> bool {
        self.v.as_ref().is_some_and(|v| v.narrow[r as usize])
    }

    /// The lanes of uniform register `r` (`wide`: as 64-bit values, else their low 32
    /// bits), loaded from where the kernel's entry put them (`fill_splats`; a pure
    /// load, `super::pure_load`): one load, often a memory operand of the instruction
    /// using it, where a splat is two or three instructions at each use (Cranelift
    /// computes pure values where they are used, and the phases' loops, entered where
    /// lanes come together, are no loops it hoists them out of). saxpy's compiled code
    /// 8% fewer instructions, reduce_sum 7%, transpose 4%. A register computed once
    /// per phase is splatted where used.
    fn uniform_lanes(&mut self, r: R, wide: bool) -> Value {
        if self.ucell(r).is_some() {
            return self.splat_reg(r, wide);
        }
        let found = self.vs().splats.iter().find(|s| s.0 == r && s.1 == wide);
        let off = match found.map(|s| s.2) {
            Some(off) => off,
            None if self.vs().splats.len() < super::SPLATS => {
                let k = self.vs().splats.len() as i32;
                let off = 16 * k - super::SPLATS as i32 * 16 - super::FRAME_CELLS as i32;
                self.vs().splats.push((r, wide, off));
                off
            }
            None => return self.splat_reg(r, wide),
        };
        let ty = if wide { I64X2 } else { I32X4 };
        self.b.ins().load(ty, pure_load(), self.f.frames, off)
    }

    /// Register `r`'s one-thread value in every lane (`wide`: as 64-bit lanes, else its
    /// low 32 bits).
    fn splat_reg(&mut self, r: R, wide: bool) -> Value {
        let x = self.reg(r);
        if wide {
            self.b.ins().splat(I64X2, x)
        } else {
            let x = self.b.ins().ireduce(I32, x);
            self.b.ins().splat(I32X4, x)
        }
    }

    /// At the kernel's entry (`block`, then on to `to`): the splats `uniform_lanes`
    /// loads.
    pub(super) fn fill_splats(&mut self, block: Block, to: Block) {
        self.b.switch_to_block(block);
        for (r, wide, off) in self.vs().splats.clone() {
            let v = self.splat_reg(r, wide);
            self.b.ins().store(trusted(), v, self.f.frames, off);
        }
        self.b.ins().jump(to, &[]);
    }

    /// Register `r`'s lanes' low 32 bits.
    fn vn(&mut self, r: R) -> Value {
        if self.is_uniform(r) {
            return self.uniform_lanes(r, false);
        }
        match self.var4(r) {
            Var4::N(v) => self.b.use_var(v),
            Var4::W(lo, hi) => {
                let p = (self.b.use_var(lo), self.b.use_var(hi));
                self.narrow(p)
            }
        }
    }
    /// Register `r`'s lanes as 64-bit values.
    fn vw(&mut self, r: R) -> V2 {
        if self.is_uniform(r) {
            let s = self.uniform_lanes(r, true);
            return (s, s);
        }
        match self.var4(r) {
            Var4::N(v) => {
                let x = self.b.use_var(v);
                self.widen(x, false)
            }
            Var4::W(lo, hi) => (self.b.use_var(lo), self.b.use_var(hi)),
        }
    }
    /// Gives register `r` lanes below 2^32.
    fn set_n(&mut self, r: R, x: Value) {
        self.vs().split[r as usize] = None;
        match self.var4(r) {
            Var4::N(v) => self.b.def_var(v, x),
            Var4::W(lo, hi) => {
                let (a, b) = self.widen(x, false);
                self.b.def_var(lo, a);
                self.b.def_var(hi, b);
            }
        }
    }
    /// Gives register `r` 64-bit lanes (`narrow_regs` made it wide when they may not
    /// fit 32 bits).
    fn set_w(&mut self, r: R, v: V2) {
        self.vs().split[r as usize] = None;
        match self.var4(r) {
            Var4::N(n) => {
                let x = self.narrow(v);
                self.b.def_var(n, x);
            }
            Var4::W(lo, hi) => {
                self.b.def_var(lo, v.0);
                self.b.def_var(hi, v.1);
            }
        }
    }
    fn vpred(&mut self, p: u32) -> Value {
        let v = self.pred_var4(p);
        self.b.use_var(v)
    }
    fn vset_pred(&mut self, p: u32, x: Value) {
        let v = self.pred_var4(p);
        self.b.def_var(v, x);
    }

    fn vconst_bytes(&mut self, ty: Type, bytes: Vec<u8>) -> Value {
        let c = self.b.func.dfg.constants.insert(ConstantData::from(bytes));
        self.b.ins().vconst(ty, c)
    }
    /// An `i64x2` constant.
    fn vconst(&mut self, lanes: [u64; 2]) -> Value {
        self.vconst_bytes(I64X2, lanes.iter().flat_map(|x| x.to_le_bytes()).collect())
    }
    fn vsplat(&mut self, x: u64) -> Value {
        self.vconst([x, x])
    }
    /// An `i32x4` constant.
    fn nconst(&mut self, lanes: [u32; 4]) -> Value {
        self.vconst_bytes(I32X4, lanes.iter().flat_map(|x| x.to_le_bytes()).collect())
    }
    fn nsplat(&mut self, x: u32) -> Value {
        self.nconst([x; 4])
    }
    fn both(&mut self, v: V2, f: impl Fn(&mut Self, Value) -> Value) -> V2 {
        (f(self, v.0), f(self, v.1))
    }
    fn both2(&mut self, a: V2, b: V2, f: impl Fn(&mut Self, Value, Value) -> Value) -> V2 {
        (f(self, a.0, b.0), f(self, a.1, b.1))
    }
    fn wmasked(&mut self, v: V2, bits: u32) -> V2 {
        if bits >= 64 {
            return v;
        }
        let m = self.vsplat(mask(bits));
        self.both(v, |l, x| l.b.ins().band(x, m))
    }
    fn nmasked(&mut self, x: Value, bits: u32) -> Value {
        if bits >= 32 {
            return x;
        }
        let m = self.nsplat(mask(bits) as u32);
        self.b.ins().band(x, m)
    }
    fn nsext(&mut self, x: Value, bits: u32) -> Value {
        if bits >= 32 {
            return x;
        }
        let s = (32 - bits) as i64;
        let y = self.b.ins().ishl_imm(x, s);
        self.b.ins().sshr_imm(y, s)
    }
    /// A narrow operand of `bits` bits, sign-extended or masked to 32 bits.
    fn noperand(&mut self, r: R, bits: u32, signed: bool) -> Value {
        let x = self.vn(r);
        if signed {
            self.nsext(x, bits)
        } else {
            self.nmasked(x, bits)
        }
    }
    /// The low 32 bits of four 64-bit lanes as one `i32x4`.
    fn narrow(&mut self, v: V2) -> Value {
        let lo = self.b.ins().bitcast(I8X16, le(), v.0);
        let hi = self.b.ins().bitcast(I8X16, le(), v.1);
        let m: Vec<u8> = [0u8, 8, 16, 24]
            .iter()
            .flat_map(|&s| [s, s + 1, s + 2, s + 3])
            .collect();
        let imm = self.b.func.dfg.immediates.push(ConstantData::from(m));
        let s = self.b.ins().shuffle(lo, hi, imm);
        self.b.ins().bitcast(I32X4, le(), s)
    }
    /// An `i32x4`'s lanes as 64-bit lanes, sign-extended or zero-extended.
    fn widen(&mut self, x: Value, signed: bool) -> V2 {
        if signed {
            (self.b.ins().swiden_low(x), self.b.ins().swiden_high(x))
        } else {
            (self.b.ins().uwiden_low(x), self.b.ins().uwiden_high(x))
        }
    }
    /// A constant register's value as an operand of `bits` bits (sign-extended when
    /// `signed`, else masked).
    fn kval(&self, r: R, bits: u32, signed: bool) -> Option<u64> {
        let k = self.v.as_ref()?.konst[r as usize]?;
        Some(if signed && bits < 64 {
            ((k << (64 - bits)) as i64 >> (64 - bits)) as u64
        } else {
            k & mask(bits)
        })
    }
    /// `a * b` of 64-bit lanes (a power-of-two constant `kb` by shifting).
    fn wmul(&mut self, a: V2, b: V2, kb: Option<u64>) -> V2 {
        match kb {
            Some(k) if k.is_power_of_two() => {
                let s = k.trailing_zeros() as i64;
                self.both(a, |l, x| l.b.ins().ishl_imm(x, s))
            }
            _ => self.both2(a, b, |l, x, y| l.b.ins().imul(x, y)),
        }
    }
    /// `a * b` of 32-bit lanes (a power-of-two constant `kb` by shifting).
    fn nmul(&mut self, a: Value, b: Value, kb: Option<u64>) -> Value {
        match kb {
            Some(k) if k.is_power_of_two() => self.b.ins().ishl_imm(a, k.trailing_zeros() as i64),
            _ => self.b.ins().imul(a, b),
        }
    }

    /// A 32-bit lane mask as two 64-bit ones.
    fn wmask(&mut self, m: Value) -> V2 {
        self.widen(m, true)
    }

    /// An `f32x4` result as lanes of canonical bits (a NaN the canonical NaN).
    fn ncanon(&mut self, f: Value) -> Value {
        let nan = self.b.ins().fcmp(FloatCC::Unordered, f, f);
        let nan = self.b.ins().bitcast(I32X4, le(), nan);
        let bits = self.b.ins().bitcast(I32X4, le(), f);
        let q = self.nsplat(0x7fff_ffff);
        self.b.ins().bitselect(nan, q, bits)
    }
    /// An `f64x2` pair's result bits, a NaN as `Lower::nan_of_f64` makes it from `ops`.
    fn wcanon(&mut self, f: V2, ops: &[V2]) -> V2 {
        let mut out = [f.0, f.1];
        for h in 0..2 {
            let x = out[h];
            let nan = self.b.ins().fcmp(FloatCC::Unordered, x, x);
            let nan = self.b.ins().bitcast(I64X2, le(), nan);
            let bits = self.b.ins().bitcast(I64X2, le(), x);
            let mut acc = self.vsplat(0xfff8_0000_0000_0000);
            let (mag, inf, quiet) = (
                self.vsplat(0x7fff_ffff_ffff_ffff),
                self.vsplat(0x7ff0_0000_0000_0000),
                self.vsplat(1 << 51),
            );
            for o in ops.iter().rev() {
                let v = if h == 0 { o.0 } else { o.1 };
                let m = self.b.ins().band(v, mag);
                let is = self.b.ins().icmp(IntCC::UnsignedGreaterThan, m, inf);
                let q = self.b.ins().bor(v, quiet);
                acc = self.b.ins().bitselect(is, q, acc);
            }
            out[h] = self.b.ins().bitselect(nan, acc, bits);
        }
        (out[0], out[1])
    }
    fn wf64(&mut self, v: V2) -> V2 {
        self.both(v, |l, x| l.b.ins().bitcast(F64X2, le(), x))
    }
    fn nf32(&mut self, r: R) -> Value {
        let x = self.vn(r);
        self.b.ins().bitcast(F32X4, le(), x)
    }

    /// The group's first thread.
    fn tbase(&mut self) -> Value {
        self.b.use_var(self.t)
    }

    pub(super) fn get(&mut self, c: Cell) -> Value {
        match c {
            Cell::Var(v) => self.b.use_var(v),
            Cell::Mem { off, ty, flags } => self.b.ins().load(ty, flags, self.f.frames, off),
        }
    }
    pub(super) fn put(&mut self, c: Cell, x: Value) {
        match c {
            Cell::Var(v) => self.b.def_var(v, x),
            Cell::Mem { off, flags, .. } => {
                self.b.ins().store(flags, x, self.f.frames, off);
            }
        }
    }

    /// The per-thread specials of the group's lanes; every other register and
    /// predicate the body writes starts at zero in each group (so that no lane value
    /// lives from one group into the next).
    pub(super) fn vprelude(&mut self, specials: &[u32]) {
        let z = self.nsplat(0);
        for r in self.vs().spill_regs.clone() {
            self.set_n(r, z);
        }
        for p in self.vs().spill_preds.clone() {
            self.vset_pred(p, z);
        }
        let tv = self.tbase();
        let mut packed = None;
        for &k in specials {
            if !PER_THREAD.contains(&k) {
                continue;
            }
            let v = match k {
                0..=2 => {
                    let pair = *packed.get_or_insert_with(|| {
                        let a = self.b.ins().imul_imm(tv, 8);
                        let a = self.b.ins().iadd(self.f.tids, a);
                        (
                            self.b.ins().load(I64X2, pure_load(), a, 0),
                            self.b.ins().load(I64X2, pure_load(), a, 16),
                        )
                    });
                    let pair = if k == 2 {
                        self.both(pair, |l, x| l.b.ins().ushr_imm(x, 32))
                    } else {
                        pair
                    };
                    let x = self.narrow(pair);
                    let x = if k == 1 {
                        self.b.ins().ushr_imm(x, 16)
                    } else {
                        x
                    };
                    self.nmasked(x, 16)
                }
                12 | 13 => {
                    let t32 = self.b.ins().ireduce(I32, tv);
                    let s = self.b.ins().splat(I32X4, t32);
                    let c = self.nconst([0, 1, 2, 3]);
                    let lanes = self.b.ins().iadd(s, c);
                    if k == 12 {
                        self.nmasked(lanes, 5)
                    } else {
                        self.b.ins().ushr_imm(lanes, 5)
                    }
                }
                _ => {
                    // The lane masks: each lane's as the one-thread code computes it.
                    let mut v = self.nsplat(0);
                    for lane in 0..LANES {
                        let tk = self.b.ins().iadd_imm(tv, lane as i64);
                        self.prelude(&[k], true, tk);
                        let x = self.reg(k);
                        let x = self.b.ins().ireduce(I32, x);
                        v = self.b.ins().insertlane(v, x, lane as u8);
                    }
                    v
                }
            };
            self.set_n(k, v);
        }
    }

    /// The four-lane block of instruction `pc`.
    pub(super) fn vblock_at(&mut self, pc: usize) -> Block {
        let v = self.v.as_mut().expect("four-lane state");
        let code = &mut v.codes[v.cur];
        if pc >= self.prog.insts.len() {
            return code.exit;
        }
        if let Some(b) = code.blocks[pc] {
            return b;
        }
        let b = self.b.create_block();
        code.blocks[pc] = Some(b);
        b
    }

    /// A four-lane way from here to the block at `pc`: what it brings in.
    pub(super) fn lin_edge(&mut self, pc: usize) {
        let v = self.vs();
        let Some(slot) = v.lin_in.get_mut(pc) else {
            return;
        };
        match slot {
            None => *slot = Some(v.lin.clone()),
            Some(x) => {
                for (a, b) in x.iter_mut().zip(&v.lin) {
                    if *a != *b {
                        *a = None;
                    }
                }
            }
        }
    }

    /// Forgets what ways into the phase's blocks brought (the next phase's code).
    pub(super) fn lin_reset(&mut self) {
        self.vs().lin_in.iter_mut().for_each(|x| *x = None);
    }

    /// Whether a group may run instruction `pc` from instruction `from` before it
    /// reaches a barrier.
    pub(super) fn in_phase_from(&self, from: u32, pc: u32) -> bool {
        phases::reach(self.prog, from as usize)[pc as usize]
    }

    /// Whether the phase being built may run instruction `pc`.
    pub(super) fn in_phase(&self, pc: usize) -> bool {
        let v = self.v.as_ref().expect("four-lane state");
        v.codes[v.cur].reach.get(pc).copied().unwrap_or(false)
    }

    /// A new basic block of the four-lane code: what was found in a block that need
    /// not dominate this one, or of a register another way into this block may define
    /// otherwise, is forgotten.
    pub(super) fn vblock_start(&mut self, pc: usize) {
        let v = self.vs();
        match v.lin_in[pc].take() {
            Some(lin) if !v.lin_fresh[pc] => v.lin = lin,
            _ => v.lin.clone_from(&v.lin_base),
        }
        self.vs().consecutive.clear();
        self.vs().split.iter_mut().for_each(|x| *x = None);
    }

    /// A branch of the four lanes: taken together, not taken together, or the lanes
    /// part (each goes on alone from `pc`).
    pub(super) fn vbranch(
        &mut self,
        pc: u32,
        guard: Option<(u32, bool)>,
        taken: Block,
        fall: Block,
    ) {
        let Some((p, neg)) = guard else {
            self.b.ins().jump(taken, &[]);
            return;
        };
        let m = self.vpred(p);
        // With `neg`, the branch is taken where the predicate is false.
        let (if_all, if_none) = if neg { (fall, taken) } else { (taken, fall) };
        let (mixed, some) = (self.b.create_block(), self.b.create_block());
        match self.not_equal_args(m) {
            // Lanes that differ: tested through the lanes that are equal (x86 makes
            // `icmp ne` of vectors as the complement of `icmp eq`, and the test of
            // all or none then complements it again).
            Some((a, b)) => {
                let eq = self.b.ins().icmp(IntCC::Equal, a, b);
                let any_eq = self.b.ins().vany_true(eq);
                self.b.ins().brif(any_eq, some, &[], if_all, &[]);
                self.b.switch_to_block(some);
                let all_eq = self.b.ins().vall_true(eq);
                self.b.ins().brif(all_eq, if_none, &[], mixed, &[]);
            }
            // All four through the lanes' sign bits (x86: `movmskps` and a compare,
            // where `vall_true` compares the vector with zero and tests that).
            None => {
                let bits = self.b.ins().vhigh_bits(I32, m);
                let all = self.b.ins().icmp_imm(IntCC::Equal, bits, ALL_LANES);
                self.b.ins().brif(all, if_all, &[], some, &[]);
                self.b.switch_to_block(some);
                let any = self.b.ins().vany_true(m);
                self.b.ins().brif(any, mixed, &[], if_none, &[]);
            }
        }
        self.b.set_cold_block(mixed);
        self.b.switch_to_block(mixed);
        let r = self.prog.ipdom.get(pc as usize).copied();
        // (Lanes come together in the phase they parted in.)
        let rejoin = r.filter(|&r| {
            self.v.as_ref().is_some_and(|v| v.rejoin_pcs.contains(&r)) && self.in_phase(r as usize)
        });
        self.part(pc, rejoin);
    }

    /// The operands of `m` when it is a vector `icmp ne`.
    fn not_equal_args(&self, m: Value) -> Option<(Value, Value)> {
        let dfg = &self.b.func.dfg;
        let ValueDef::Result(inst, _) = dfg.value_def(m) else {
            return None;
        };
        match dfg.insts[inst] {
            InstructionData::IntCompare {
                opcode: Opcode::Icmp,
                cond: IntCC::NotEqual,
                args,
            } if dfg.value_type(m).is_vector() => Some((args[0], args[1])),
            _ => None,
        }
    }

    /// The lanes part at instruction `pc`: their registers and predicates to the
    /// stack area, then each lane alone from `pc` (`resume`), until it reaches
    /// `rejoin` (`park`) or its exit.
    fn part(&mut self, pc: u32, rejoin: Option<u32>) {
        let tv = self.tbase();
        let area = self.area(tv);
        let live = self.live_at(pc);
        self.group_store(area, &live);
        if self.vs().frame.is_some() {
            // Its lanes that reach a barrier say so again.
            self.set_header(area, 0);
        }
        let idx = self.resume_index(pc);
        let all = self.b.ins().iconst(I32, ALL_LANES);
        self.start_parted(idx, rejoin, all);
    }

    /// The index in `resume_pcs` of instruction `pc` (added if it is not there).
    fn resume_index(&mut self, pc: u32) -> usize {
        match self.vs().resume_pcs.iter().position(|&x| x == pc) {
            Some(i) => i,
            None => {
                self.vs().resume_pcs.push(pc);
                self.vs().resume_pcs.len() - 1
            }
        }
    }

    /// The lanes `alive_bits` of the group starting at thread `t`, their values in
    /// its area, go on alone from `resume_pcs[idx]` until `rejoin` (or their exit).
    fn start_parted(&mut self, idx: usize, rejoin: Option<u32>, alive_bits: Value) {
        let (rpc, rend, vhead) = (self.vs().rpc, self.vs().rend, self.vs().head);
        let iv = self.b.ins().iconst(I32, idx as i64);
        self.put(rpc, iv);
        let (rjoin, parked, alive) = (self.vs().rjoin, self.vs().parked, self.vs().alive);
        let rj = self
            .b
            .ins()
            .iconst(I32, rejoin.map_or(NO_REJOIN, |r| r as i64));
        self.put(rjoin, rj);
        let none = self.b.ins().iconst(I32, 0);
        self.put(parked, none);
        self.put(alive, alive_bits);
        let tv = self.tbase();
        let end = self.b.ins().iadd_imm(tv, LANES as i64);
        self.put(rend, end);
        self.b.ins().jump(vhead, &[]);
    }

    /// The area of the group starting at thread `first`: its registers and predicates
    /// when its lanes part (32 bytes each, `spill_regs` then `spill_preds`: lane k's
    /// at 4 k, or 8 k for a wide register), then, in a kernel with barriers, its header
    /// (the lanes waiting at a barrier, bits). The stack area, or with barriers the
    /// group's frame in `Ctx::frames` (which lives from one phase to the next).
    pub(super) fn area(&mut self, first: Value) -> Value {
        match self.vs().frame {
            // (`first` is a multiple of four, the frame's size of 16.)
            Some(size) => {
                let o = self.b.ins().imul_imm(first, i64::from(size) / LANES as i64);
                self.b.ins().iadd(self.f.frames, o)
            }
            None => {
                let slot = self.vs().spill;
                self.b.ins().stack_addr(self.ptr, slot, 0)
            }
        }
    }

    /// The offset of the header in a group's area.
    fn header_off(&mut self) -> i32 {
        let v = self.vs();
        32 * (v.spill_regs.len() + v.spill_preds.len()) as i32
    }

    pub(super) fn set_header(&mut self, area: Value, bits: i64) {
        let off = self.header_off();
        let x = self.b.ins().iconst(I32, bits);
        self.b.ins().store(trusted(), x, area, off);
    }

    /// Which of the four-lane state's values (`spill_regs` then `spill_preds`) are
    /// live at instruction `pc`.
    fn live_at(&mut self, pc: u32) -> Vec<u64> {
        let v = self.vs();
        v.live[(pc as usize).min(v.live.len() - 1)].clone()
    }

    /// The values of the four-lane state in a group's area, those `live` (bits by
    /// index, `live_at`) or, without it, all, with their offsets there: 32 bytes each,
    /// `spill_regs` then `spill_preds`.
    fn held(&mut self, live: Option<&[u64]>) -> Vec<(Held, i32)> {
        let regs = self.vs().spill_regs.clone();
        let preds = self.vs().spill_preds.clone();
        let keep = |k: usize| live.is_none_or(|l| l[k / 64] >> (k % 64) & 1 == 1);
        let mut out = vec![];
        for (k, &r) in regs.iter().enumerate().filter(|(k, _)| keep(*k)) {
            out.push((Held::Reg(r, self.var4(r)), 32 * k as i32));
        }
        for (k, &p) in preds.iter().enumerate() {
            if keep(regs.len() + k) {
                out.push((Held::Pred(p), 32 * (regs.len() + k) as i32));
            }
        }
        out
    }

    /// The group's values `live` to `area`, four lanes each.
    fn group_store(&mut self, area: Value, live: &[u64]) {
        for (h, off) in self.held(Some(live)) {
            let store = |l: &mut Self, v: Variable, off: i32| {
                let x = l.b.use_var(v);
                l.b.ins().store(trusted(), x, area, off);
            };
            match h {
                Held::Reg(_, Var4::N(v)) => store(self, v, off),
                Held::Reg(_, Var4::W(lo, hi)) => {
                    store(self, lo, off);
                    store(self, hi, off + 16);
                }
                Held::Pred(p) => {
                    let m = self.vpred(p);
                    self.b.ins().store(trusted(), m, area, off);
                }
            }
        }
    }

    /// The group's values `live` from `area`, with `flags`.
    fn group_load(&mut self, area: Value, live: &[u64], flags: MemFlags) {
        for (h, off) in self.held(Some(live)) {
            let load = |l: &mut Self, ty: Type, off: i32| l.b.ins().load(ty, flags, area, off);
            match h {
                Held::Reg(_, Var4::N(v)) => {
                    let x = load(self, I32X4, off);
                    self.b.def_var(v, x);
                }
                Held::Reg(_, Var4::W(lo, hi)) => {
                    let (a, b) = (load(self, I64X2, off), load(self, I64X2, off + 16));
                    self.b.def_var(lo, a);
                    self.b.def_var(hi, b);
                }
                Held::Pred(p) => {
                    let m = load(self, I32X4, off);
                    self.vset_pred(p, m);
                }
            }
        }
    }

    /// A parted lane's values `live` to its place in its group's area.
    fn lane_store(&mut self, live: &[u64]) {
        let (b4, b8) = self.lane_slots();
        for (h, off) in self.held(Some(live)) {
            match h {
                Held::Reg(r, Var4::N(_)) => {
                    let x = self.reg(r);
                    let y = self.b.ins().ireduce(I32, x);
                    self.b.ins().store(trusted(), y, b4, off);
                }
                Held::Reg(r, Var4::W(..)) => {
                    let x = self.reg(r);
                    self.b.ins().store(trusted(), x, b8, off);
                }
                Held::Pred(p) => {
                    let c = self.pred(p);
                    let c = self.b.ins().uextend(I32, c);
                    let m = self.b.ins().ineg(c);
                    self.b.ins().store(trusted(), m, b4, off);
                }
            }
        }
    }

    /// A lane going on alone (thread `t`, of the group ending before `rend`): its
    /// specials and prologue as at a thread's start, its registers and predicates
    /// from the stack area, then the one-thread code from where it parted.
    pub(super) fn resume(&mut self, specials: &[u32], uniform_prologue: &[bool]) {
        let (resume, alive, vhead) = {
            let v = self.vs();
            (v.resume, v.alive, v.head)
        };
        self.b.switch_to_block(resume);
        // A lane that has exited, while the others go on from where they came
        // together, is passed over.
        let tv = self.b.use_var(self.t);
        let lane = self.lane();
        let lane = self.b.ins().ireduce(I32, lane);
        let bits = self.get(alive);
        let bit = self.b.ins().ushr(bits, lane);
        let bit = self.b.ins().band_imm(bit, 1);
        let (go, skip) = (self.b.create_block(), self.b.create_block());
        self.b.ins().brif(bit, go, &[], skip, &[]);
        self.b.switch_to_block(skip);
        let t1 = self.b.ins().iadd_imm(tv, 1);
        self.b.def_var(self.t, t1);
        self.b.ins().jump(vhead, &[]);
        self.b.switch_to_block(go);
        let tv = self.b.use_var(self.t);
        self.prelude(specials, true, tv);
        for (k, i) in self.prog.prologue.iter().enumerate() {
            if !uniform_prologue[k] {
                self.inst(i, PROLOGUE | k as u32);
            }
        }
        let (b4, b8) = self.lane_slots();
        for (h, off) in self.held(None) {
            match h {
                Held::Reg(r, Var4::N(_)) => {
                    let x = self.b.ins().uload32(trusted(), b4, off);
                    self.set(r, x);
                }
                Held::Reg(r, Var4::W(..)) => {
                    let x = self.b.ins().load(I64, trusted(), b8, off);
                    self.set(r, x);
                }
                Held::Pred(p) => {
                    let x = self.b.ins().load(I32, trusted(), b4, off);
                    let c = self.b.ins().icmp_imm(IntCC::NotEqual, x, 0);
                    self.set_pred(p, c);
                }
            }
        }
        // To where it parted (a chain of comparisons: a jump table's edges would
        // carry the restored values through blocks of their own).
        let pcs = self.vs().resume_pcs.clone();
        let rpc = self.vs().rpc;
        let rpc = self.get(rpc);
        let keys: Vec<u32> = (0..pcs.len() as u32).collect();
        let targets: Vec<Block> = pcs.iter().map(|&pc| self.block_at(pc as usize)).collect();
        self.dispatch(rpc, &keys, &targets);
    }

    /// No lanes parted: what `part` sets, as it is before any group.
    pub(super) fn vs_reset(&mut self) {
        let (rend, rjoin, parked, alive, rpc) = {
            let v = self.vs();
            (v.rend, v.rjoin, v.parked, v.alive, v.rpc)
        };
        let zero = self.b.ins().iconst(I64, 0);
        self.put(rend, zero);
        let no = self.b.ins().iconst(I32, NO_REJOIN);
        self.put(rjoin, no);
        let z = self.b.ins().iconst(I32, 0);
        for c in [parked, alive, rpc] {
            self.put(c, z);
        }
    }

    /// At the start of the one-thread code's block `pc`: a lane going on alone stops
    /// here when this is where its group's lanes come together (`park`).
    pub(super) fn park_check(&mut self, pc: usize) {
        let Some(v) = self.v.as_ref() else {
            return;
        };
        if !v.rejoin_pcs.contains(&(pc as u32)) {
            return;
        }
        let k = v.rejoin_pcs.iter().position(|&r| r == pc as u32);
        let (rjoin, park) = (v.rjoin, v.parks[k.expect("a reconvergence point")]);
        let rj = self.get(rjoin);
        let here = self.b.ins().icmp_imm(IntCC::Equal, rj, pc as i64);
        let cont = self.b.create_block();
        self.b.ins().brif(here, park, &[], cont, &[]);
        self.b.switch_to_block(cont);
    }

    /// The bit of a parted thread's lane (an i32).
    fn lane_bit(&mut self) -> Value {
        let lane = self.lane();
        let lane = self.b.ins().ireduce(I32, lane);
        let one = self.b.ins().iconst(I32, 1);
        self.b.ins().ishl(one, lane)
    }

    /// The first thread of the group whose lanes parted: `rend - 4`.
    fn group_first(&mut self) -> Value {
        let rend = self.vs().rend;
        let end = self.get(rend);
        self.b.ins().iadd_imm(end, -(LANES as i64))
    }

    /// The lane of a parted group thread `t` is: `t - (rend - 4)`.
    fn lane(&mut self) -> Value {
        let rend = self.vs().rend;
        let tv = self.b.use_var(self.t);
        let end = self.get(rend);
        let lane = self.b.ins().isub(tv, end);
        self.b.ins().iadd_imm(lane, LANES as i64)
    }

    /// The byte addresses of lane `t - (rend - 4)`'s values in the stack area: those
    /// of 4-byte values (narrow registers, predicates) and of 8-byte ones.
    fn lane_slots(&mut self) -> (Value, Value) {
        let lane = self.lane();
        let first = self.group_first();
        let base = self.area(first);
        let o4 = self.b.ins().imul_imm(lane, 4);
        let o8 = self.b.ins().imul_imm(lane, 8);
        (self.b.ins().iadd(base, o4), self.b.ins().iadd(base, o8))
    }

    /// A lane reaching where its group's lanes come together: its registers and
    /// predicates back to the stack area, then the next lane; after the last, the
    /// group goes on four lanes at a time from there when every lane has come (else
    /// those that have go on alone from there).
    pub(super) fn park_and_rejoin(&mut self, specials: &[u32], uniform_prologue: &[bool]) {
        let (park, rejoin, rend, parked, alive, rjoin, vhead, rpc) = {
            let v = self.vs();
            (
                v.park, v.rejoin, v.rend, v.parked, v.alive, v.rjoin, v.head, v.rpc,
            )
        };
        if self.vs().rejoin_pcs.is_empty() {
            return;
        }
        // A lane stores what is live where it parks.
        let pcs = self.vs().rejoin_pcs.clone();
        let parks = self.vs().parks.clone();
        for (&r, &blk) in pcs.iter().zip(&parks) {
            self.b.switch_to_block(blk);
            let live = self.live_at(r);
            self.lane_store(&live);
            self.b.ins().jump(park, &[]);
        }
        self.b.switch_to_block(park);
        let tv = self.b.use_var(self.t);
        let end = self.get(rend);
        let bit = self.lane_bit();
        let p = self.get(parked);
        let p = self.b.ins().bor(p, bit);
        self.put(parked, p);
        let t1 = self.b.ins().iadd_imm(tv, 1);
        self.b.def_var(self.t, t1);
        let more = self.b.ins().icmp(IntCC::UnsignedLessThan, t1, end);
        self.b.ins().brif(more, vhead, &[], rejoin, &[]);

        self.b.switch_to_block(rejoin);
        let end = self.get(rend);
        let first = self.b.ins().iadd_imm(end, -(LANES as i64));
        self.b.def_var(self.t, first);
        let p = self.get(parked);
        let rj = self.get(rjoin);
        let no = self.b.ins().iconst(I32, NO_REJOIN);
        self.put(rjoin, no);
        let zero = self.b.ins().iconst(I32, 0);
        self.put(parked, zero);
        let all = self.b.ins().icmp_imm(IntCC::Equal, p, ALL_LANES);
        let (back, rest) = (self.b.create_block(), self.b.create_block());
        self.b.ins().brif(all, back, &[], rest, &[]);

        // Every lane came: the group's registers from the stack area, its specials
        // and prologue again, on four lanes at a time from there.
        self.b.switch_to_block(back);
        self.vprelude(specials);
        for (k, i) in self.prog.prologue.iter().enumerate() {
            if !uniform_prologue[k] {
                self.vinst(i, PROLOGUE | k as u32);
            }
        }
        let first = self.tbase();
        let area = self.area(first);
        if self.vs().frame.is_some() {
            // Its four lanes together again, as when a phase after a barrier starts
            // them: the header says so, and a barrier they reach need not.
            self.set_header(area, ALL_LANES);
        }
        // To the point in the phase's code: keyed by the phase and the point where
        // there are phases.
        let stride = self.prog.insts.len() as u32 + 1;
        let ncodes = self.vs().codes.len();
        let key = if ncodes > 1 {
            let phase = self.vs().phase;
            let ph = self.get(phase);
            let k = self.b.ins().imul_imm(ph, i64::from(stride));
            self.b.ins().iadd(k, rj)
        } else {
            rj
        };
        let mut to = vec![];
        for e in 0..ncodes {
            self.vs().cur = e;
            for &r in &pcs {
                if self.in_phase(r as usize) {
                    to.push((e as u32 * stride + r, r, self.vblock_at(r as usize)));
                }
            }
        }
        let keys: Vec<u32> = to.iter().map(|x| x.0).collect();
        let targets: Vec<Block> = to.iter().map(|_| self.b.create_block()).collect();
        // (No other key: lanes park only where their phase's code goes on.)
        self.dispatch(key, &keys, &targets);
        for (&(_, r, blk), &t) in to.iter().zip(&targets) {
            self.b.switch_to_block(t);
            let live = self.live_at(r);
            self.group_load(area, &live, trusted());
            self.b.ins().jump(blk, &[]);
        }

        // Some lane exited: those that came go on alone from there.
        self.b.switch_to_block(rest);
        self.put(alive, p);
        let targets: Vec<Block> = pcs.iter().map(|_| self.b.create_block()).collect();
        self.dispatch(rj, &pcs, &targets);
        for (&r, &blk) in pcs.iter().zip(&targets) {
            let idx = self
                .vs()
                .resume_pcs
                .iter()
                .position(|&x| x == r)
                .expect("every reconvergence point is a place to resume");
            self.b.switch_to_block(blk);
            let iv = self.b.ins().iconst(I32, idx as i64);
            self.put(rpc, iv);
            self.b.ins().jump(vhead, &[]);
        }
    }

    /// To `targets[k]` where `x` (an i32) is `keys[k]` (the last taken for any other
    /// value): a jump table where the keys are dense, else a search
    /// (`cranelift_frontend::Switch`).
    pub(super) fn dispatch(&mut self, x: Value, keys: &[u32], targets: &[Block]) {
        let Some((&last, rest)) = targets.split_last() else {
            self.b.ins().jump(self.fail_blk, &[]);
            return;
        };
        let mut sw = Switch::new();
        for (&key, &to) in keys.iter().zip(rest) {
            sw.set_entry(u128::from(key), to);
        }
        sw.emit(&mut self.b, x, last);
    }

    /// Before a `mul.wide` whose product's lanes are taken for a progression: its
    /// 32-bit operand `r`'s lanes, extended, are one of `stride` (none wrapped past
    /// its width); else the lanes part here.
    fn widen_test(&mut self, pc: u32, r: R, stride: i64, signed: bool) {
        let x = self.noperand(r, 32, signed);
        let ext = |l: &mut Self, k: u8| {
            let y = l.b.ins().extractlane(x, k);
            if signed {
                l.b.ins().sextend(I64, y)
            } else {
                l.b.ins().uextend(I64, y)
            }
        };
        let (x0, x3) = (ext(self, 0), ext(self, LANES as u8 - 1));
        let want = self
            .b
            .ins()
            .iadd_imm(x0, stride.wrapping_mul(LANES as i64 - 1));
        let ok = self.b.ins().icmp(IntCC::Equal, x3, want);
        let (slow, cont) = (self.b.create_block(), self.b.create_block());
        self.b.ins().brif(ok, cont, &[], slow, &[]);
        self.b.set_cold_block(slow);
        self.b.switch_to_block(slow);
        self.part(pc, None);
        self.b.switch_to_block(cont);
    }

    /// The progression of register `a`'s lanes, when it makes an access of `size`
    /// bytes per lane consecutive (`Some(true)`) or the same in every lane
    /// (`Some(false)`).
    fn lin_access(&mut self, a: R, size: u64) -> Option<bool> {
        let f = self.vs().lin[a as usize].filter(|f| f.m == 64)?;
        let r = if f.s == size as i64 {
            true
        } else if f.s == 0 {
            false
        } else {
            return None;
        };
        self.vs().rows |= f.row;
        Some(r)
    }

    /// One instruction (not a branch or exit) on the four lanes.
    pub(super) fn vinst(&mut self, i: &Inst, pc: u32) {
        // The progression it makes (the lanes all run it: no guard).
        let prog = self.prog;
        let step = match aff_dest(&i.aff) {
            Some(d) if i.guard.is_none() && native(prog, i) => {
                let lin = &self.vs().lin;
                lin_step(&i.aff, |r| lin[r as usize], |r| konst_of(prog, r)).map(|x| (d, x))
            }
            _ => None,
        };
        let widen = match (i.aff, step) {
            // (A test only where the product is 64-bit lanes.)
            (Aff::MulWide { a, b, bits: 32, .. }, Some((_, (_, true)))) => {
                let lin = &self.vs().lin;
                let sa = lin[a as usize].map_or(0, |x| x.s);
                let sb = lin[b as usize].map_or(0, |x| x.s);
                Some(if sa != 0 { (a, sa) } else { (b, sb) })
            }
            _ => None,
        };
        let param = i.guard.is_none() && matches!(i.op, Op::LdParam { .. });
        for r in reads_writes(&i.op).1 {
            self.vs().lin[r as usize] = param.then_some(Lin::SAME);
        }
        if let Some((d, (f, test))) = step {
            if !test || widen.is_some() {
                self.vs().widen_test = widen;
                self.vnative_inst(i, pc);
                self.vs().widen_test = None;
                self.vs().lin[d as usize] = Some(f);
                return;
            }
        }
        if !native(self.prog, i) {
            self.lanes(i, pc);
            self.unsplit(i);
            return;
        }
        let Some((p, neg)) = i.guard else {
            self.vnative_inst(i, pc);
            return;
        };
        // The operation on every lane, then the old values kept where the guard is
        // off.
        let (rw, pw) = (reads_writes(&i.op).1, preds_rw(i).1);
        let old: Vec<Option<Value>> = rw
            .iter()
            .map(|&r| match self.var4(r) {
                Var4::N(v) => Some(self.b.use_var(v)),
                Var4::W(..) => None,
            })
            .collect();
        let oldw: Vec<V2> = rw.iter().map(|&r| self.vw(r)).collect();
        let oldp: Vec<Value> = pw.iter().map(|&q| self.vpred(q)).collect();
        let g = self.vpred(p);
        self.vnative_inst(i, pc);
        for (k, &r) in rw.iter().enumerate() {
            match (self.var4(r), old[k]) {
                (Var4::N(v), Some(o)) => {
                    let new = self.b.use_var(v);
                    let x = self.nblend(g, neg, new, o);
                    self.b.def_var(v, x);
                }
                _ => {
                    let new = self.vw(r);
                    let gw = self.wmask(g);
                    let x = self.wblend(gw, neg, new, oldw[k]);
                    self.set_w(r, x);
                }
            }
        }
        for (k, &q) in pw.iter().enumerate() {
            let new = self.vpred(q);
            let x = self.nblend(g, neg, new, oldp[k]);
            self.vset_pred(q, x);
        }
        self.unsplit(i);
    }

    /// Forgets what `split` knew of the registers `i` writes.
    fn unsplit(&mut self, i: &Inst) {
        for r in reads_writes(&i.op).1 {
            self.vs().split[r as usize] = None;
        }
    }

    /// `new` where mask `g` (negated with `neg`) is set, else `old`.
    fn nblend(&mut self, g: Value, neg: bool, new: Value, old: Value) -> Value {
        let (a, b) = if neg { (old, new) } else { (new, old) };
        self.b.ins().bitselect(g, a, b)
    }
    fn wblend(&mut self, g: V2, neg: bool, new: V2, old: V2) -> V2 {
        let (a, b) = if neg { (old, new) } else { (new, old) };
        (
            self.b.ins().bitselect(g.0, a.0, b.0),
            self.b.ins().bitselect(g.1, a.1, b.1),
        )
    }

    /// An instruction lane by lane, through the one-thread lowering: each lane's
    /// registers and predicates it touches moved into the one-thread variables, its
    /// results moved back.
    fn lanes(&mut self, i: &Inst, pc: u32) {
        let (rr, rw) = reads_writes(&i.op);
        let (pr, pw) = preds_rw(i);
        let mut regs: Vec<R> = rr.iter().chain(&rw).copied().collect();
        regs.retain(|&r| !self.is_uniform(r));
        regs.sort_unstable();
        regs.dedup();
        let mut preds: Vec<u32> = pr.iter().chain(&pw).copied().collect();
        preds.sort_unstable();
        preds.dedup();
        let tbase = self.tbase();
        let rv: Vec<(Var4, Value, V2)> = regs
            .iter()
            .map(|&r| {
                let v4 = self.var4(r);
                let n = match v4 {
                    Var4::N(v) => self.b.use_var(v),
                    Var4::W(..) => tbase,
                };
                let w = match v4 {
                    Var4::N(_) => (tbase, tbase),
                    Var4::W(lo, hi) => (self.b.use_var(lo), self.b.use_var(hi)),
                };
                (v4, n, w)
            })
            .collect();
        let pv: Vec<Value> = preds.iter().map(|&p| self.vpred(p)).collect();
        let mut out_r: Vec<Vec<Value>> = vec![vec![]; rw.len()];
        let mut out_p: Vec<Vec<Value>> = vec![vec![]; pw.len()];
        for lane in 0..LANES as u8 {
            let tk = self.b.ins().iadd_imm(tbase, lane as i64);
            self.b.def_var(self.t, tk);
            for (j, &r) in regs.iter().enumerate() {
                let x = match rv[j].0 {
                    Var4::N(_) => {
                        let x = self.b.ins().extractlane(rv[j].1, lane);
                        self.b.ins().uextend(I64, x)
                    }
                    Var4::W(..) => {
                        let h = if lane < 2 { rv[j].2 .0 } else { rv[j].2 .1 };
                        self.b.ins().extractlane(h, lane % 2)
                    }
                };
                self.set(r, x);
            }
            for (j, &p) in preds.iter().enumerate() {
                let x = self.b.ins().extractlane(pv[j], lane);
                let c = self.b.ins().icmp_imm(IntCC::NotEqual, x, 0);
                self.set_pred(p, c);
            }
            self.guarded(i, pc);
            for (j, &r) in rw.iter().enumerate() {
                let x = self.reg(r);
                out_r[j].push(x);
            }
            for (j, &p) in pw.iter().enumerate() {
                let c = self.pred(p);
                let w = self.b.ins().uextend(I32, c);
                out_p[j].push(self.b.ins().ineg(w));
            }
        }
        self.b.def_var(self.t, tbase);
        for (j, &r) in rw.iter().enumerate() {
            match self.var4(r) {
                Var4::N(v) => {
                    let mut x = self.nsplat(0);
                    for (lane, &y) in out_r[j].iter().enumerate() {
                        let y = self.b.ins().ireduce(I32, y);
                        x = self.b.ins().insertlane(x, y, lane as u8);
                    }
                    self.b.def_var(v, x);
                }
                Var4::W(lo, hi) => {
                    let z = self.vsplat(0);
                    let xs = &out_r[j];
                    let a = self.b.ins().insertlane(z, xs[0], 0);
                    let a = self.b.ins().insertlane(a, xs[1], 1);
                    let b = self.b.ins().insertlane(z, xs[2], 0);
                    let b = self.b.ins().insertlane(b, xs[3], 1);
                    self.b.def_var(lo, a);
                    self.b.def_var(hi, b);
                }
            }
        }
        for (j, &p) in pw.iter().enumerate() {
            let mut x = self.nsplat(0);
            for (lane, &y) in out_p[j].iter().enumerate() {
                x = self.b.ins().insertlane(x, y, lane as u8);
            }
            self.vset_pred(p, x);
        }
    }

    /// `setp`'s destinations from the lanes' comparison mask `r`.
    fn vsetp(&mut self, r: Value, d: u32, dn: Option<u32>, comb: Option<(BoolOp, u32, bool)>) {
        let nr = self.b.ins().bnot(r);
        let (p, q) = match comb {
            None => (r, nr),
            Some((op, c, neg)) => {
                let mut cv = self.vpred(c);
                if neg {
                    cv = self.b.ins().bnot(cv);
                }
                (self.bool_op(op, r, cv), self.bool_op(op, nr, cv))
            }
        };
        self.vset_pred(d, p);
        if let Some(dn) = dn {
            self.vset_pred(dn, q);
        }
    }

    /// An instruction with a lane-affine form `native` takes, on all four lanes.
    fn vaffine(&mut self, i: &Inst, pc: u32) -> bool {
        match i.aff {
            Aff::Mov { d, a, bits } => {
                if bits <= 32 {
                    let x = self.noperand(a, bits as u32, false);
                    self.set_n(d, x);
                } else {
                    let v = self.vw(a);
                    self.set_w(d, v);
                }
            }
            Aff::Add { d, a, b, bits, sub } => {
                let f = |l: &mut Self, x: Value, y: Value| {
                    if sub {
                        l.b.ins().isub(x, y)
                    } else {
                        l.b.ins().iadd(x, y)
                    }
                };
                if bits <= 32 {
                    let (x, y) = (self.vn(a), self.vn(b));
                    let r = f(self, x, y);
                    let r = self.nmasked(r, bits as u32);
                    self.set_n(d, r);
                } else {
                    let (x, y) = (self.vw(a), self.vw(b));
                    let r = self.both2(x, y, f);
                    self.set_w(d, r);
                    if !sub && self.is_uniform(a) != self.is_uniform(b) {
                        let (u, o) = if self.is_uniform(a) { (a, y) } else { (b, x) };
                        self.vs().split[d as usize] = Some((u, o));
                    }
                }
            }
            Aff::Mul { d, a, b, c, bits } => {
                // (`%ctaid.x * %ntid.x` of a global index: once, not per lane.)
                let uniform = (self.is_uniform(a) && self.is_uniform(b)).then(|| {
                    let (x, y) = (self.reg(a), self.reg(b));
                    self.b.ins().imul(x, y)
                });
                if bits <= 32 {
                    let mut r = if let Some(p) = uniform {
                        let p = self.b.ins().ireduce(I32, p);
                        self.b.ins().splat(I32X4, p)
                    } else {
                        let (x, y) = (self.vn(a), self.vn(b));
                        let kb = self.kval(b, 32, false);
                        self.nmul(x, y, kb)
                    };
                    if let Some(c) = c {
                        let cv = self.vn(c);
                        r = self.b.ins().iadd(r, cv);
                    }
                    let r = self.nmasked(r, bits as u32);
                    self.set_n(d, r);
                } else {
                    let mut r = if let Some(p) = uniform {
                        let s = self.b.ins().splat(I64X2, p);
                        (s, s)
                    } else {
                        let (x, y) = (self.vw(a), self.vw(b));
                        let kb = self.kval(b, 64, false);
                        self.wmul(x, y, kb)
                    };
                    if let Some(c) = c {
                        let cv = self.vw(c);
                        r = self.both2(r, cv, |l, x, y| l.b.ins().iadd(x, y));
                    }
                    self.set_w(d, r);
                }
            }
            Aff::MulWide {
                d,
                a,
                b,
                bits,
                signed,
            } => {
                let bits = bits as u32;
                let kb = self.kval(b, bits, signed);
                if bits <= 16 {
                    let (x, y) = (
                        self.noperand(a, bits, signed),
                        self.noperand(b, bits, signed),
                    );
                    let r = self.nmul(x, y, kb);
                    let r = self.nmasked(r, 2 * bits);
                    self.set_n(d, r);
                } else {
                    if let Some((r, stride)) = self.vs().widen_test {
                        self.widen_test(pc, r, stride, signed);
                    }
                    let x = self.noperand(a, bits, signed);
                    let x = self.widen(x, signed);
                    let y = match kb {
                        Some(k) if k.is_power_of_two() => x,
                        _ => {
                            let y = self.noperand(b, bits, signed);
                            self.widen(y, signed)
                        }
                    };
                    let r = self.wmul(x, y, kb);
                    self.set_w(d, r);
                }
            }
            Aff::Shl { d, a, b, bits } => {
                let n = self.kval(b, 32, false).unwrap_or(u64::MAX);
                if bits <= 32 {
                    let r = if n >= bits as u64 {
                        self.nsplat(0)
                    } else {
                        let x = self.vn(a);
                        let s = self.b.ins().ishl_imm(x, n as i64);
                        self.nmasked(s, bits as u32)
                    };
                    self.set_n(d, r);
                } else {
                    let r = if n >= 64 {
                        let z = self.vsplat(0);
                        (z, z)
                    } else {
                        let x = self.vw(a);
                        self.both(x, |l, x| l.b.ins().ishl_imm(x, n as i64))
                    };
                    self.set_w(d, r);
                }
            }
            Aff::Shr {
                d,
                a,
                b,
                bits,
                signed,
            } => {
                let n = self.kval(b, 32, false).unwrap_or(u64::MAX);
                let k = n.min(bits as u64 - 1) as i64;
                if bits <= 32 {
                    let x = self.noperand(a, bits as u32, signed);
                    let r = if signed {
                        let s = self.b.ins().sshr_imm(x, k);
                        self.nmasked(s, bits as u32)
                    } else if n >= bits as u64 {
                        self.nsplat(0)
                    } else {
                        self.b.ins().ushr_imm(x, k)
                    };
                    self.set_n(d, r);
                } else {
                    let x = self.vw(a);
                    let r = if signed {
                        self.both(x, |l, x| l.b.ins().sshr_imm(x, k))
                    } else if n >= 64 {
                        let z = self.vsplat(0);
                        (z, z)
                    } else {
                        self.both(x, |l, x| l.b.ins().ushr_imm(x, k))
                    };
                    self.set_w(d, r);
                }
            }
            Aff::Cmp { bits, signed, code } => {
                let Op::Setp {
                    d, dn, a, b, comb, ..
                } = &i.op
                else {
                    return false;
                };
                let cc = int_cc(code, signed);
                let r = if bits <= 32 {
                    let x = self.noperand(*a, bits as u32, signed);
                    let y = self.noperand(*b, bits as u32, signed);
                    self.b.ins().icmp(cc, x, y)
                } else {
                    let (x, y) = (self.vw(*a), self.vw(*b));
                    let m = self.both2(x, y, |l, x, y| l.b.ins().icmp(cc, x, y));
                    self.narrow(m)
                };
                self.vsetp(r, *d, *dn, *comb);
            }
            Aff::None | Aff::Mem { .. } => return false,
        }
        true
    }

    /// An instruction `native` takes, on all four lanes.
    fn vnative_inst(&mut self, i: &Inst, pc: u32) {
        if self.vaffine(i, pc) {
            return;
        }
        match (i.sem, &i.op) {
            (Sem::Int { op, bits, .. }, Op::Bin(_, d, a, b)) => {
                let f = |l: &mut Self, x: Value, y: Value| match op {
                    IntOp::And => l.b.ins().band(x, y),
                    IntOp::Or => l.b.ins().bor(x, y),
                    _ => l.b.ins().bxor(x, y),
                };
                if bits <= 32 {
                    let (x, y) = (self.vn(*a), self.vn(*b));
                    let r = f(self, x, y);
                    let r = self.nmasked(r, bits as u32);
                    self.set_n(*d, r);
                } else {
                    let (x, y) = (self.vw(*a), self.vw(*b));
                    let r = self.both2(x, y, f);
                    self.set_w(*d, r);
                }
            }
            (Sem::Int { bits, .. }, Op::Un(_, d, a)) => {
                if bits <= 32 {
                    let x = self.vn(*a);
                    let r = self.b.ins().bnot(x);
                    let r = self.nmasked(r, bits as u32);
                    self.set_n(*d, r);
                } else {
                    let x = self.vw(*a);
                    let r = self.both(x, |l, x| l.b.ins().bnot(x));
                    self.set_w(*d, r);
                }
            }
            (Sem::Flt { op, f64 }, Op::Bin(_, d, a, b)) => {
                let f = |l: &mut Self, x: Value, y: Value| match op {
                    FltOp::Add => l.b.ins().fadd(x, y),
                    FltOp::Sub => l.b.ins().fsub(x, y),
                    FltOp::Mul => l.b.ins().fmul(x, y),
                    _ => l.b.ins().fdiv(x, y),
                };
                if f64 {
                    let (av, bv) = (self.vw(*a), self.vw(*b));
                    let (x, y) = (self.wf64(av), self.wf64(bv));
                    let r = self.both2(x, y, f);
                    let order = if op == FltOp::Div { [av, bv] } else { [bv, av] };
                    let r = self.wcanon(r, &order);
                    self.set_w(*d, r);
                } else {
                    let (x, y) = (self.nf32(*a), self.nf32(*b));
                    let r = f(self, x, y);
                    let r = self.ncanon(r);
                    self.set_n(*d, r);
                }
            }
            (Sem::Flt { f64, .. }, Op::Ter(_, d, a, b, c)) => {
                if f64 {
                    let (av, bv, cv) = (self.vw(*a), self.vw(*b), self.vw(*c));
                    let (x, y, z) = (self.wf64(av), self.wf64(bv), self.wf64(cv));
                    let r = (
                        self.b.ins().fma(x.0, y.0, z.0),
                        self.b.ins().fma(x.1, y.1, z.1),
                    );
                    let r = self.wcanon(r, &[bv, av, cv]);
                    self.set_w(*d, r);
                } else {
                    let (x, y, z) = (self.nf32(*a), self.nf32(*b), self.nf32(*c));
                    let r = self.b.ins().fma(x, y, z);
                    let r = self.ncanon(r);
                    self.set_n(*d, r);
                }
            }
            (
                Sem::FCmp { code, f64 },
                Op::Setp {
                    d, dn, a, b, comb, ..
                },
            ) => {
                let cc = vfcc(code).expect("vnative took the comparison");
                let r = if f64 {
                    let (av, bv) = (self.vw(*a), self.vw(*b));
                    let (x, y) = (self.wf64(av), self.wf64(bv));
                    let m = self.both2(x, y, |l, x, y| {
                        let m = l.b.ins().fcmp(cc, x, y);
                        l.b.ins().bitcast(I64X2, le(), m)
                    });
                    self.narrow(m)
                } else {
                    let (x, y) = (self.nf32(*a), self.nf32(*b));
                    let m = self.b.ins().fcmp(cc, x, y);
                    self.b.ins().bitcast(I32X4, le(), m)
                };
                self.vsetp(r, *d, *dn, *comb);
            }
            (Sem::Cvt { dt, st, .. }, Op::Un(_, d, a)) => match (dt, st) {
                (CvtTy::S(64) | CvtTy::U(64), CvtTy::S(32)) => {
                    let x = self.vn(*a);
                    let r = self.widen(x, true);
                    self.set_w(*d, r);
                }
                _ => {
                    let x = self.vn(*a);
                    self.set_n(*d, x);
                }
            },
            _ => match &i.op {
                Op::Mov(d, a, m) => {
                    if *m == u64::MAX {
                        if self.is_narrow(*d) {
                            let x = self.vn(*a);
                            self.set_n(*d, x);
                        } else {
                            let x = self.vw(*a);
                            self.set_w(*d, x);
                        }
                    } else if *m <= u32::MAX as u64 {
                        let x = self.vn(*a);
                        let mv = self.nsplat(*m as u32);
                        let r = self.b.ins().band(x, mv);
                        self.set_n(*d, r);
                    } else {
                        let x = self.vw(*a);
                        let mv = self.vsplat(*m);
                        let r = self.both(x, |l, x| l.b.ins().band(x, mv));
                        self.set_w(*d, r);
                    }
                }
                Op::Selp { d, a, b, p, neg } => {
                    let g = self.vpred(*p);
                    if self.is_narrow(*d) {
                        let (x, y) = (self.vn(*a), self.vn(*b));
                        let r = self.nblend(g, *neg, x, y);
                        self.set_n(*d, r);
                    } else {
                        let (x, y) = (self.vw(*a), self.vw(*b));
                        let gw = self.wmask(g);
                        let r = self.wblend(gw, *neg, x, y);
                        self.set_w(*d, r);
                    }
                }
                Op::PredLogic {
                    op,
                    d,
                    a,
                    an,
                    b,
                    bn,
                } => {
                    let mut av = self.vpred(*a);
                    if *an {
                        av = self.b.ins().bnot(av);
                    }
                    let r = match op {
                        None => av,
                        Some(o) => {
                            let mut bv = self.vpred(*b);
                            if *bn {
                                bv = self.b.ins().bnot(bv);
                            }
                            self.bool_op(*o, av, bv)
                        }
                    };
                    self.vset_pred(*d, r);
                }
                Op::PredConst { d, v } => {
                    let m = self.nsplat(if *v { u32::MAX } else { 0 });
                    self.vset_pred(*d, m);
                }
                Op::LdParam { d, n, .. } => {
                    // The same in every lane: loaded once, then on every lane.
                    self.inst(i, pc);
                    for &r in &d[..*n as usize] {
                        let x = self.reg(r);
                        if self.is_narrow(r) {
                            let y = self.b.ins().ireduce(I32, x);
                            let s = self.b.ins().splat(I32X4, y);
                            self.set_n(r, s);
                        } else {
                            let s = self.b.ins().splat(I64X2, x);
                            self.set_w(r, (s, s));
                        }
                    }
                }
                Op::Ld { .. } | Op::St { .. } => self.vmem(i, pc),
                Op::Nop => {
                    self.b.ins().fence();
                }
                // `native` takes nothing else.
                _ => {}
            },
        }
    }

    /// Whether 64-bit lanes `v` step by `step` from the first.
    fn consecutive(&mut self, v: V2, step: u64) -> Value {
        if let Some(&(_, _, c)) = self
            .vs()
            .consecutive
            .iter()
            .find(|(x, s, _)| *x == v.0 && *s == step)
        {
            return c;
        }
        let first = self.b.ins().extractlane(v.0, 0);
        let s0 = self.b.ins().splat(I64X2, first);
        let (c0, c1) = (self.vconst([0, step]), self.vconst([2 * step, 3 * step]));
        let (e0, e1) = (self.b.ins().iadd(s0, c0), self.b.ins().iadd(s0, c1));
        let m0 = self.b.ins().icmp(IntCC::Equal, v.0, e0);
        let m1 = self.b.ins().icmp(IntCC::Equal, v.1, e1);
        let m = self.b.ins().band(m0, m1);
        let c = self.b.ins().vall_true(m);
        self.vs().consecutive.push((v.0, step, c));
        c
    }

    /// A load or store of one 4- or 8-byte value per lane: when the lanes' addresses
    /// are consecutive and inside the allocation the instruction hit last, one access
    /// of the four values; a load whose lanes' addresses are the same, one scalar
    /// load; else the lanes part here, and each makes the access alone (the one-thread
    /// code's checks, the engine's resolver and its fault reports). No call is made
    /// from the four-lane code: values live across one would be spilled.
    fn vmem(&mut self, i: &Inst, pc: u32) {
        let (size, a, off, sp) = match &i.op {
            Op::Ld {
                size, a, off, sp, ..
            }
            | Op::St {
                size, a, off, sp, ..
            } => (*size as u64, *a, *off, *sp),
            _ => return,
        };
        if sp == Sp::Shared {
            self.vshared(i, pc, size, a, off);
            return;
        }
        // The lanes' addresses (made where needed).
        let addr = |l: &mut Self| {
            let av = l.vw(a);
            if off == 0 {
                av
            } else {
                let o = l.vsplat(off as u64);
                l.both(av, |l, x| l.b.ins().iadd(x, o))
            }
        };
        // The first lane's: of an address `base + offsets`, the base plus the first
        // offset (which the accesses of a block that share the offsets extract once).
        let split = self.vs().split[a as usize];
        let a0 = match split {
            Some((u, o)) => {
                let o0 = self.b.ins().extractlane(o.0, 0);
                let u = self.reg(u);
                let x = self.b.ins().iadd(u, o0);
                self.b.ins().iadd_imm(x, off)
            }
            None => {
                let v = addr(self);
                self.b.ins().extractlane(v.0, 0)
            }
        };
        // An address `base + offset` is consecutive when the offsets are (found once
        // for the accesses of a block that share them).
        let consecutive = match self.lin_access(a, size) {
            Some(c) => self.b.ins().iconst(I8, i64::from(c)),
            None => {
                let lanes = match split {
                    Some((_, o)) => o,
                    None => addr(self),
                };
                self.consecutive(lanes, size)
            }
        };
        // The first lane's offset in the allocation, in units of `size`: the four
        // accesses fit when the last one's unit is inside it.
        let cache = self.f.cache;
        let slot = (pc as usize * std::mem::size_of::<Slot>()) as i32;
        let base = self
            .b
            .ins()
            .load(I64, trusted(), cache, slot + offset_of!(Slot, base) as i32);
        let group_units = self.b.ins().load(
            I64,
            trusted(),
            cache,
            slot + offset_of!(Slot, group_units) as i32,
        );
        let ofs = self.b.ins().isub(a0, base);
        let r = self.b.ins().rotr_imm(ofs, size.trailing_zeros() as i64);
        let fits = self.b.ins().icmp(IntCC::UnsignedLessThan, r, group_units);
        let fast_ok = self.b.ins().band(consecutive, fits);
        let (fast, other, slow, done) = (
            self.b.create_block(),
            self.b.create_block(),
            self.b.create_block(),
            self.b.create_block(),
        );
        self.b.ins().brif(fast_ok, fast, &[], other, &[]);

        // The host address of the first lane's access, in the allocation the slot holds.
        let host = |l: &mut Self| {
            let hp =
                l.b.ins()
                    .load(I64, trusted(), cache, slot + offset_of!(Slot, ptr) as i32);
            l.b.ins().iadd(hp, ofs)
        };
        self.b.switch_to_block(fast);
        let p = host(self);
        self.vaccess(i, p);
        self.b.ins().jump(done, &[]);

        self.b.set_cold_block(other);
        self.b.switch_to_block(other);
        if let Op::Ld { d, sext, dmask, .. } = &i.op {
            // Every lane the same address (a loop's broadcast operand): one load.
            let same = self.b.create_block();
            let addr = addr(self);
            let s0 = self.b.ins().splat(I64X2, a0);
            let n0 = self.b.ins().icmp(IntCC::Equal, addr.0, s0);
            let n1 = self.b.ins().icmp(IntCC::Equal, addr.1, s0);
            let n = self.b.ins().band(n0, n1);
            let all_same = self.b.ins().vall_true(n);
            let units =
                self.b
                    .ins()
                    .load(I64, trusted(), cache, slot + offset_of!(Slot, units) as i32);
            let first_in = self.b.ins().icmp(IntCC::UnsignedLessThan, r, units);
            let ok = self.b.ins().band(all_same, first_in);
            self.b.ins().brif(ok, same, &[], slow, &[]);
            self.b.switch_to_block(same);
            let p = host(self);
            let x = self.load_sized(p, 0, size as u8, *sext);
            let x = if *dmask == u64::MAX {
                x
            } else {
                self.b.ins().band_imm(x, *dmask as i64)
            };
            if self.is_narrow(d[0]) {
                let y = self.b.ins().ireduce(I32, x);
                let s = self.b.ins().splat(I32X4, y);
                self.set_n(d[0], s);
            } else {
                let s = self.b.ins().splat(I64X2, x);
                self.set_w(d[0], (s, s));
            }
            self.b.ins().jump(done, &[]);
        } else {
            self.b.ins().jump(slow, &[]);
        }
        self.b.set_cold_block(slow);
        self.b.switch_to_block(slow);
        self.part(pc, None);
        self.b.switch_to_block(done);
    }

    /// Before the first phase: from the start, no barrier reached.
    pub(super) fn phases_reset(&mut self) {
        let Some(v) = self.v.as_ref() else { return };
        let (phase, bar_at) = (v.phase, v.bar_at);
        let z = self.b.ins().iconst(I32, 0);
        self.put(phase, z);
        let none = self.b.ins().iconst(I32, NO_BARRIER);
        self.put(bar_at, none);
        // Registers computed once per phase start at zero, as every thread's.
        let zero = self.b.ins().iconst(I64, 0);
        let cells: Vec<i32> = self.vs().ucell.iter().flatten().copied().collect();
        for off in cells {
            self.b.ins().store(trusted(), zero, self.f.frames, off);
        }
    }

    /// Every group has run the phase: the block's threads are done when none reached
    /// a barrier (on to `done`), else the groups go on from after it (its phase's
    /// code, once what the phase computes once as it starts is: `hoisted`).
    pub(super) fn phase_end(&mut self, done: Block) {
        let (phase, bar_at) = {
            let v = self.vs();
            (v.phase, v.bar_at)
        };
        self.vs_reset();
        self.tick_check(u32::MAX);
        let x = self.get(bar_at);
        let none = self.b.ins().icmp_imm(IntCC::Equal, x, NO_BARRIER);
        let next = self.b.create_block();
        self.b.ins().brif(none, done, &[], next, &[]);
        self.b.switch_to_block(next);
        let p = self.b.ins().iadd_imm(x, 1);
        self.put(phase, p);
        let none = self.b.ins().iconst(I32, NO_BARRIER);
        self.put(bar_at, none);
        let zero = self.b.ins().iconst(I64, 0);
        self.b.def_var(self.t, zero);
        // Each phase's code, after what it computes once as it starts
        // (`phases::phase_uniform`).
        let (prog, v) = (self.prog, self.v.as_ref().expect("four-lane state"));
        type Start = (Block, Vec<usize>, Option<phases::Tail>);
        let starts: Vec<Start> = v.codes[1..]
            .iter()
            .map(|c| {
                let once = (c.entry as usize..prog.insts.len()).take_while(|&pc| v.hoisted[pc]);
                (c.head, once.collect(), c.tail.clone())
            })
            .collect();
        let targets: Vec<Block> = starts
            .iter()
            .map(
                |(head, once, tail)| match once.is_empty() && tail.is_none() {
                    true => *head,
                    false => self.b.create_block(),
                },
            )
            .collect();
        let keys: Vec<u32> = (0..targets.len() as u32).collect();
        self.dispatch(x, &keys, &targets);
        for ((head, once, tail), blk) in starts.into_iter().zip(targets) {
            if blk == head {
                continue;
            }
            self.b.switch_to_block(blk);
            for pc in once {
                self.inst(&prog.insts[pc], pc as u32);
            }
            if let Some(t) = tail {
                self.tail_limit(&t);
            }
            self.b.ins().jump(head, &[]);
        }
    }

    /// Where the groups of a phase with a [`phases::Tail`] stop (`limit`): past the
    /// last with a thread below the bound, when the block is one row (`%tid.x` is the
    /// thread's index) and the way to the test holds; else past the last group.
    fn tail_limit(&mut self, t: &phases::Tail) {
        let n = self.f.nthreads;
        let limit = self.vs().limit;
        let ntx = self
            .b
            .ins()
            .load(I64, trusted(), self.f.uniform, super::NTID_X as i32 * 8);
        let mut ok = self.b.ins().icmp(IntCC::Equal, ntx, n);
        let prog = self.prog;
        for &(pc, want) in &t.conds {
            let c = (self.int_cmp(&prog.insts[pc]))
                .expect("a tail's conditions are integer comparisons");
            let c = self.b.ins().bxor_imm(c, i64::from(!want));
            ok = self.b.ins().band(ok, c);
        }
        let u = self.reg(t.bound);
        let (bits, strict) = (t.bits as u32, i64::from(t.strict));
        let first = match t.signed {
            true => {
                let x = self.sext(u, bits);
                let x = self.b.ins().iadd_imm(x, strict);
                let zero = self.iconst(0);
                self.b.ins().smax(x, zero)
            }
            false => {
                let x = self.masked(u, bits);
                self.b.ins().iadd_imm(x, strict)
            }
        };
        // (Whole groups: the first past the bound.)
        let end = self.b.ins().iadd_imm(first, LANES as i64 - 1);
        let end = self.b.ins().band_imm(end, -(LANES as i64));
        let end = self.b.ins().umin(end, n);
        let end = self.b.ins().select(ok, end, n);
        self.put(limit, end);
    }

    /// The groups of a phase with a [`phases::Tail`] past its `limit`: counted, and
    /// waiting at its barrier. (Some thread of the block is: the phase started, so
    /// one waited at a barrier, and every thread that did takes the way to the test,
    /// then the barrier, directly or after the test's branch's code, which cannot exit
    /// without passing the barrier where it is aligned (`phases::aligned`: the
    /// barrier is where the test's threads come together again). Groups whose lanes
    /// exited earlier are passed over as they would be.)
    pub(super) fn tail_end(&mut self, t: &phases::Tail) {
        let limit = self.vs().limit;
        let end = self.get(limit);
        let left = self.b.ins().isub(self.f.nthreads, end);
        let (some, cont) = (self.b.create_block(), self.b.create_block());
        self.b.ins().brif(left, some, &[], cont, &[]);
        self.b.switch_to_block(some);
        if t.count > 0 {
            // (`left` is whole groups: the count of `LANES` threads each.)
            let c = self.get(self.cnt);
            let n = self.b.ins().imul_imm(left, t.count as i64);
            let c = self.b.ins().iadd(c, n);
            self.put(self.cnt, c);
        }
        let k = self.bar_index(t.bar);
        self.arrive(k);
        self.b.ins().jump(cont, &[]);
        self.b.switch_to_block(cont);
    }

    /// A group starting the phase being built: on four lanes from its start when it
    /// is pc 0; after a barrier, passed over when it has exited, on four lanes at a
    /// time from after the barrier when all four wait there, else those that wait go
    /// on alone from there.
    pub(super) fn phase_start(&mut self, specials: &[u32], uniform_prologue: &[bool]) {
        let (entry, head) = {
            let v = self.vs();
            (v.codes[v.cur].entry, v.codes[v.cur].head)
        };
        let all = self.b.create_block();
        let tv = self.tbase();
        let area = (entry > 0).then(|| self.area(tv));
        if let Some(area) = area {
            let off = self.header_off();
            let h = self.b.ins().load(I32, trusted(), area, off);
            let (skip, other, partial) = (
                self.b.create_block(),
                self.b.create_block(),
                self.b.create_block(),
            );
            let every = self.b.ins().icmp_imm(IntCC::Equal, h, ALL_LANES);
            self.b.ins().brif(every, all, &[], other, &[]);
            self.b.switch_to_block(other);
            self.b.ins().brif(h, partial, &[], skip, &[]);
            self.b.switch_to_block(skip);
            let t4 = self.b.ins().iadd_imm(tv, LANES as i64);
            self.b.def_var(self.t, t4);
            self.b.ins().jump(head, &[]);

            self.b.switch_to_block(partial);
            self.set_header(area, 0);
            let idx = self.resume_index(entry);
            self.start_parted(idx, None, h);
        } else {
            self.b.ins().jump(all, &[]);
        }

        self.b.switch_to_block(all);
        self.vprelude(specials);
        match area {
            // (The prologue's values among them.) Pure loads: each where the phase's
            // code first uses it, none where nothing does; the frame changes only
            // where the four-lane code stops using them (`super::pure_load`).
            Some(area) => {
                let live = self.live_at(entry);
                self.group_load(area, &live, pure_load());
            }
            None => {
                for (k, i) in self.prog.prologue.iter().enumerate() {
                    if !uniform_prologue[k] {
                        self.vinst(i, PROLOGUE | k as u32);
                    }
                }
            }
        }
        let to = self.vblock_at(entry as usize);
        self.b.ins().jump(to, &[]);
    }

    /// A group's next (the phase's next group): the loop head of the phase's code.
    pub(super) fn next_group(&mut self) {
        let head = {
            let v = self.vs();
            v.codes[v.cur].head
        };
        let tv = self.tbase();
        let t4 = self.b.ins().iadd_imm(tv, LANES as i64);
        self.b.def_var(self.t, t4);
        self.b.ins().jump(head, &[]);
    }

    /// The group reaching barrier `pc` on four lanes: its values live after it to
    /// its frame, then the next group.
    pub(super) fn vbarrier(&mut self, pc: u32) {
        let k = self.bar_index(pc);
        let tv = self.tbase();
        let area = self.area(tv);
        let mut live = self.live_at(pc + 1);
        let v = self.vs();
        for (w, k) in live.iter_mut().zip(&v.codes[v.cur].kept) {
            *w &= !k;
        }
        self.group_store(area, &live);
        // (After a barrier, the four lanes' header says they all wait already: a
        // phase's code starts four lanes only where it does, and lanes coming
        // together set it. From pc 0, the frame holds the last block's.)
        let v = self.vs();
        if v.codes[v.cur].entry == 0 {
            self.set_header(area, ALL_LANES);
        }
        // (Every group reaching one reaches this one: `phases::aligned`.)
        let (bar_at, kv) = (self.vs().bar_at, self.b.ins().iconst(I32, k as i64));
        self.put(bar_at, kv);
        self.next_group();
    }

    /// A lane going on alone reaching barrier `pc`: its values live after it to its
    /// place in its group's frame, the lane marked as waiting there, then the next
    /// lane (or group).
    pub(super) fn lane_barrier(&mut self, pc: u32) {
        let k = self.bar_index(pc);
        let live = self.live_at(pc + 1);
        self.lane_store(&live);
        let first = self.group_first();
        let area = self.area(first);
        let off = self.header_off();
        let h = self.b.ins().load(I32, trusted(), area, off);
        let bit = self.lane_bit();
        let h = self.b.ins().bor(h, bit);
        self.b.ins().store(trusted(), h, area, off);
        self.arrive(k);
        let vhead = self.vs().head;
        let tv = self.b.use_var(self.t);
        let t1 = self.b.ins().iadd_imm(tv, 1);
        self.b.def_var(self.t, t1);
        self.b.ins().jump(vhead, &[]);
    }

    fn bar_index(&mut self, pc: u32) -> usize {
        self.vs()
            .bars
            .iter()
            .position(|&b| b == pc)
            .expect("every barrier is in `bars`")
    }

    /// Barrier `k` reached in this phase: every group must reach the same one
    /// (`phases::aligned` proved it; the function fails if not).
    fn arrive(&mut self, k: usize) {
        let bar_at = self.vs().bar_at;
        let x = self.get(bar_at);
        // Every group after the phase's first finds it there.
        let same = self.b.ins().icmp_imm(IntCC::Equal, x, k as i64);
        let (first, cont) = (self.b.create_block(), self.b.create_block());
        self.b.ins().brif(same, cont, &[], first, &[]);
        self.b.switch_to_block(first);
        let kv = self.b.ins().iconst(I32, k as i64);
        self.put(bar_at, kv);
        let none = self.b.ins().icmp_imm(IntCC::Equal, x, NO_BARRIER);
        self.b.ins().brif(none, cont, &[], self.fail_blk, &[]);
        self.b.switch_to_block(cont);
    }

    /// Load or store `i` of the four lanes' consecutive values at host address `p`.
    fn vaccess(&mut self, i: &Inst, p: Value) {
        let flags = MemFlags::new();
        match &i.op {
            Op::Ld {
                d,
                sext,
                dmask,
                size,
                ..
            } => {
                if *size == 4 {
                    let x = self.b.ins().load(I32X4, flags, p, 0);
                    self.vset_loaded(d[0], *sext, *dmask, Ok(x));
                } else {
                    let v = (
                        self.b.ins().load(I64X2, flags, p, 0),
                        self.b.ins().load(I64X2, flags, p, 16),
                    );
                    self.vset_loaded(d[0], *sext, *dmask, Err(v));
                }
            }
            Op::St { s, size, .. } => {
                if *size == 4 {
                    let x = self.vn(s[0]);
                    self.b.ins().store(flags, x, p, 0);
                } else {
                    let v = self.vw(s[0]);
                    self.b.ins().store(flags, v.0, p, 0);
                    self.b.ins().store(flags, v.1, p, 16);
                }
            }
            _ => {}
        }
    }

    /// Register `d` of a load from its four lanes' values: 4-byte ones as an `i32x4`
    /// (`Ok`), 8-byte ones as two `i64x2` (`Err`); sign-extended (`sext`) and masked
    /// (`dmask`) as the one-thread code does.
    fn vset_loaded(&mut self, d: R, sext: bool, dmask: u64, x: Result<Value, V2>) {
        match x {
            Ok(x) if self.is_narrow(d) => {
                let x = self.nmasked(x, dmask.count_ones().min(32));
                self.set_n(d, x);
            }
            Ok(x) => {
                let v = self.widen(x, sext);
                let v = self.wmasked(v, dmask.count_ones());
                self.set_w(d, v);
            }
            Err(v) => {
                let v = self.wmasked(v, dmask.count_ones());
                self.set_w(d, v);
            }
        }
    }

    /// A shared-memory load or store of one 4- or 8-byte value per lane (at `a + off`,
    /// each lane's address a shared window address or an offset, as the one-thread
    /// code takes them): when every lane's access is inside the block's shared memory
    /// and aligned, one access of the four values where they are consecutive, else
    /// one per lane; when not, the lanes part here (the one-thread code reports the
    /// fault).
    fn vshared(&mut self, i: &Inst, pc: u32, size: u64, a: R, off: i64) {
        let av = self.vw(a);
        let addr = if off == 0 {
            av
        } else {
            let o = self.vsplat(off as u64);
            self.both(av, |l, x| l.b.ins().iadd(x, o))
        };
        // Whether the lanes are consecutive, or all the same (found once for the
        // accesses of a block that share them: the same register, or the same
        // offsets from a register the same in every lane, whatever the immediate).
        let (consecutive, same) = match self.lin_access(a, size) {
            Some(c) => (
                self.b.ins().iconst(I8, i64::from(c)),
                self.b.ins().iconst(I8, i64::from(!c)),
            ),
            None => {
                let lanes = match self.vs().split[a as usize] {
                    Some((_, o)) => o,
                    None => av,
                };
                (self.consecutive(lanes, size), self.consecutive(lanes, 0))
            }
        };
        // The first lane's offset in shared memory: its address's in the window, or
        // the address itself; the group's accesses fit when it is below the window's
        // size (no overflow below) and they end inside the block's shared memory.
        let a0 = self.b.ins().extractlane(addr.0, 0);
        let d = self
            .b
            .ins()
            .iadd_imm(a0, SHARED_WINDOW.wrapping_neg() as i64);
        let in_win = self
            .b
            .ins()
            .icmp_imm(IntCC::UnsignedLessThan, d, WINDOW_SIZE as i64);
        let o0 = self.b.ins().select(in_win, d, a0);
        let small = self
            .b
            .ins()
            .icmp_imm(IntCC::UnsignedLessThan, o0, WINDOW_SIZE as i64);
        let misaligned = self.b.ins().band_imm(a0, (size - 1) as i64);
        let aligned = self.b.ins().icmp_imm(IntCC::Equal, misaligned, 0);
        let ok0 = self.b.ins().band(small, aligned);
        let fits = |l: &mut Self, bytes: u64| {
            let e = l.b.ins().iadd_imm(o0, bytes as i64);
            let f =
                l.b.ins()
                    .icmp(IntCC::UnsignedLessThanOrEqual, e, l.f.shared_len);
            l.b.ins().band(ok0, f)
        };
        let (fast, other, bcast, general, gather, slow, done) = (
            self.b.create_block(),
            self.b.create_block(),
            self.b.create_block(),
            self.b.create_block(),
            self.b.create_block(),
            self.b.create_block(),
            self.b.create_block(),
        );
        let group_fits = fits(self, LANES * size);
        let fast_ok = self.b.ins().band(consecutive, group_fits);
        self.b.ins().brif(fast_ok, fast, &[], other, &[]);

        self.b.switch_to_block(fast);
        let p = self.b.ins().iadd(self.f.shared, o0);
        self.vaccess(i, p);
        self.b.ins().jump(done, &[]);

        // Every lane the same address: a load loads once (a store stores the last
        // lane's value, as lanes in order do).
        self.b.switch_to_block(other);
        let one_fits = fits(self, size);
        let bcast_ok = self.b.ins().band(same, one_fits);
        self.b.ins().brif(bcast_ok, bcast, &[], general, &[]);
        self.b.switch_to_block(bcast);
        let p = self.b.ins().iadd(self.f.shared, o0);
        let flags = MemFlags::new();
        match &i.op {
            Op::Ld { d, sext, dmask, .. } => {
                if size == 4 {
                    let y = self.b.ins().load(I32, flags, p, 0);
                    let x = self.b.ins().splat(I32X4, y);
                    self.vset_loaded(d[0], *sext, *dmask, Ok(x));
                } else {
                    let y = self.b.ins().load(I64, flags, p, 0);
                    let x = self.b.ins().splat(I64X2, y);
                    self.vset_loaded(d[0], *sext, *dmask, Err((x, x)));
                }
            }
            Op::St { s, .. } => {
                if size == 4 {
                    let x = self.vn(s[0]);
                    let y = self.b.ins().extractlane(x, LANES as u8 - 1);
                    self.b.ins().store(flags, y, p, 0);
                } else {
                    let v = self.vw(s[0]);
                    let y = self.b.ins().extractlane(v.1, 1);
                    self.b.ins().store(flags, y, p, 0);
                }
            }
            _ => {}
        }
        self.b.ins().jump(done, &[]);

        // Else each lane's offset (negative or past the end when its address is
        // neither a window address nor an offset), all checked at once.
        self.b.switch_to_block(general);
        let win = self.vsplat(SHARED_WINDOW);
        let wsize = self.vsplat(WINDOW_SIZE);
        let ofs = self.both(addr, |l, x| {
            let d = l.b.ins().isub(x, win);
            let in_win = l.b.ins().icmp(IntCC::UnsignedLessThan, d, wsize);
            l.b.ins().bitselect(in_win, d, x)
        });
        let lim = self.b.ins().iadd_imm(self.f.shared_len, 1 - size as i64);
        let lim = self.b.ins().splat(I64X2, lim);
        let neg = self.vsplat(u64::MAX);
        let align = self.vsplat(size - 1);
        let zero = self.vsplat(0);
        let ok = self.both2(ofs, addr, |l, o, x| {
            let nonneg = l.b.ins().icmp(IntCC::SignedGreaterThan, o, neg);
            let below = l.b.ins().icmp(IntCC::SignedLessThan, o, lim);
            let m = l.b.ins().band(x, align);
            let aligned = l.b.ins().icmp(IntCC::Equal, m, zero);
            let ok = l.b.ins().band(nonneg, below);
            l.b.ins().band(ok, aligned)
        });
        let ok = self.b.ins().band(ok.0, ok.1);
        let all_ok = self.b.ins().vall_true(ok);
        self.b.ins().brif(all_ok, gather, &[], slow, &[]);

        // One access per lane.
        self.b.switch_to_block(gather);
        let ps: Vec<Value> = (0..LANES as u8)
            .map(|k| {
                let half = if k < 2 { ofs.0 } else { ofs.1 };
                let o = self.b.ins().extractlane(half, k % 2);
                self.b.ins().iadd(self.f.shared, o)
            })
            .collect();
        let flags = MemFlags::new();
        match &i.op {
            Op::Ld { d, sext, dmask, .. } => {
                if size == 4 {
                    let mut x = self.nsplat(0);
                    for (k, &p) in ps.iter().enumerate() {
                        let y = self.b.ins().load(I32, flags, p, 0);
                        x = self.b.ins().insertlane(x, y, k as u8);
                    }
                    self.vset_loaded(d[0], *sext, *dmask, Ok(x));
                } else {
                    let mut v = (self.vsplat(0), self.vsplat(0));
                    for (k, &p) in ps.iter().enumerate() {
                        let y = self.b.ins().load(I64, flags, p, 0);
                        if k < 2 {
                            v.0 = self.b.ins().insertlane(v.0, y, k as u8);
                        } else {
                            v.1 = self.b.ins().insertlane(v.1, y, k as u8 - 2);
                        }
                    }
                    self.vset_loaded(d[0], *sext, *dmask, Err(v));
                }
            }
            Op::St { s, .. } => {
                if size == 4 {
                    let x = self.vn(s[0]);
                    for (k, &p) in ps.iter().enumerate() {
                        let y = self.b.ins().extractlane(x, k as u8);
                        self.b.ins().store(flags, y, p, 0);
                    }
                } else {
                    let v = self.vw(s[0]);
                    for (k, &p) in ps.iter().enumerate() {
                        let half = if k < 2 { v.0 } else { v.1 };
                        let y = self.b.ins().extractlane(half, k as u8 % 2);
                        self.b.ins().store(flags, y, p, 0);
                    }
                }
            }
            _ => {}
        }
        self.b.ins().jump(done, &[]);

        self.b.set_cold_block(slow);
        self.b.switch_to_block(slow);
        self.part(pc, None);
        self.b.switch_to_block(done);
    }
}
