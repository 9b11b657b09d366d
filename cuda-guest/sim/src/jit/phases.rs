//! Barriers in the four-lane code. A kernel with `bar.sync` runs its block in phases:
//! each group of four runs until it reaches the barrier (its registers live there go
//! to the group's frame in `Ctx::frames`) or exits, then the next group runs; when
//! every group has, each goes on from after the barrier. That is what the interpreter
//! does warp by warp, and it is right only where every thread of the block that has
//! not exited reaches the same barrier: so the JIT takes a barrier only where it
//! cannot depend on which thread runs ([`aligned`]: not inside a branch whose
//! condition differs between the block's threads). Any other is the interpreter's,
//! which reports a divergent one.
//!
//! The four-lane body is built once per phase: from pc 0, and from after each barrier,
//! what a group may run until it reaches a barrier ([`reach`]), each with a loop over
//! the groups of its own. A phase's loop then dispatches on nothing, and the register
//! allocator keeps its values apart from the other phases'. What every thread computes
//! alike right after a barrier is computed once, before the phase's groups start
//! ([`phase_uniform`]).

use super::*;
use cranelift_codegen::ir::condcodes::CondCode;

/// The instructions control may go to after instruction `pc` of the body.
pub(super) fn succs(prog: &Program, pc: usize) -> impl Iterator<Item = usize> {
    let n = prog.insts.len();
    let i = &prog.insts[pc];
    let (a, b) = match i.op {
        Op::Bra { target } => (Some(target as usize), i.guard.map(|_| pc + 1)),
        Op::Exit => (None, i.guard.map(|_| pc + 1)),
        _ => (Some(pc + 1), None),
    };
    a.into_iter().chain(b).filter(move |&s| s < n)
}

/// Whether the values of registers and predicates may differ between a block's
/// threads (a divergence analysis), and the instructions only some of them may run.
pub(super) struct Divergence {
    pub regs: Vec<bool>,
    pub preds: Vec<bool>,
    /// Instructions inside a branch whose condition may differ between threads (from
    /// the branch to its reconvergence point).
    pub region: Vec<bool>,
}

/// The divergence of `prog`'s body, `uniform` being the registers set before it that
/// are the same in every thread (everything else set before it, a per-thread special
/// or what the prologue computes from one, differs). A register or predicate differs
/// when an instruction writing it reads one that does, loads from memory or makes an
/// atomic, has a guard that does, or may run in only some threads (a divergent
/// branch's region); the regions grow with the predicates, to a fixed point.
pub(super) fn divergence(prog: &Program, uniform: &[bool]) -> Divergence {
    let n = prog.insts.len();
    let mut written = vec![false; prog.nregs as usize];
    for i in &prog.insts {
        for r in reads_writes(&i.op).1 {
            written[r as usize] = true;
        }
    }
    let mut d = Divergence {
        regs: (0..prog.nregs as usize)
            .map(|r| !uniform[r] && !written[r])
            .collect(),
        preds: vec![false; prog.npreds as usize],
        region: vec![false; n],
    };
    loop {
        let mut changed = false;
        for (pc, i) in prog.insts.iter().enumerate() {
            let (rr, rw) = reads_writes(&i.op);
            let (pr, pw) = vector::preds_rw(i);
            let div = d.region[pc]
                || matches!(i.op, Op::Ld { .. } | Op::Atom { .. })
                || rr.iter().any(|&r| d.regs[r as usize])
                || pr.iter().any(|&p| d.preds[p as usize]);
            if !div {
                continue;
            }
            for r in rw {
                changed |= !std::mem::replace(&mut d.regs[r as usize], true);
            }
            for p in pw {
                changed |= !std::mem::replace(&mut d.preds[p as usize], true);
            }
        }
        // The regions of the branches on predicates that differ: what is reachable from
        // the branch before its reconvergence point.
        for (pc, i) in prog.insts.iter().enumerate() {
            let Some((p, _)) = i.guard else { continue };
            if !matches!(i.op, Op::Bra { .. }) || !d.preds[p as usize] {
                continue;
            }
            let stop = prog.ipdom.get(pc).map_or(usize::MAX, |&r| r as usize);
            changed |= mark_between(prog, pc, stop, &mut d.region);
        }
        if !changed {
            return d;
        }
    }
}

/// Marks in `marks` what is reachable from branch `pc` before `stop` (its
/// reconvergence point); whether it marked any instruction not marked before.
pub(super) fn mark_between(prog: &Program, pc: usize, stop: usize, marks: &mut [bool]) -> bool {
    let mut changed = false;
    let mut todo: Vec<usize> = succs(prog, pc).collect();
    while let Some(x) = todo.pop() {
        if x == stop || std::mem::replace(&mut marks[x], true) {
            continue;
        }
        changed = true;
        todo.extend(succs(prog, x));
    }
    changed
}

/// Where the lanes that part at instruction `pc` (a branch under a predicate) meet
/// again: its reconvergence point, unless there they would only exit together.
pub(super) fn meeting_point(prog: &Program, pc: usize) -> Option<u32> {
    let i = &prog.insts[pc];
    if !matches!(i.op, Op::Bra { .. }) || i.guard.is_none() {
        return None;
    }
    let r = *prog.ipdom.get(pc)?;
    prog.insts
        .get(r as usize)
        .is_some_and(|j| !(matches!(j.op, Op::Exit) && j.guard.is_none()))
        .then_some(r)
}

/// Why the four-lane code cannot run `prog`'s barriers, if it cannot: one that is
/// guarded, reduces (`bar.red`), or may be reached by only some of the block's threads.
pub(super) fn aligned(prog: &Program, uniform: &[bool]) -> Result<(), String> {
    let mut d = None;
    for (pc, i) in prog.insts.iter().enumerate() {
        let Op::Bar { red } = &i.op else { continue };
        if i.guard.is_some() || red.is_some() {
            return Err(format!(
                "a guarded or reducing barrier (PTX line {})",
                i.line
            ));
        }
        let d = d.get_or_insert_with(|| divergence(prog, uniform));
        if d.region[pc] {
            return Err(format!(
                "a barrier inside a branch that may differ between threads (PTX line {})",
                i.line
            ));
        }
    }
    Ok(())
}

/// The instructions of `prog`'s body a thread may run from `from` before it reaches a
/// barrier (the barriers it reaches included): one phase's code.
pub(super) fn reach(prog: &Program, from: usize) -> Vec<bool> {
    let n = prog.insts.len();
    let mut seen = vec![false; n];
    let mut todo = vec![from];
    while let Some(pc) = todo.pop() {
        if pc >= n || std::mem::replace(&mut seen[pc], true) {
            continue;
        }
        if !matches!(prog.insts[pc].op, Op::Bar { .. }) {
            todo.extend(succs(prog, pc));
        }
    }
    seen
}

/// The instructions of `prog`'s body that are barriers.
pub(super) fn barriers(prog: &Program) -> Vec<u32> {
    (0..prog.insts.len() as u32)
        .filter(|&pc| matches!(prog.insts[pc as usize].op, Op::Bar { .. }))
        .collect()
}

/// Which of `vars` (registers, then predicates as `nregs + p`) are live at each
/// instruction of `prog`'s body (and at its end, none), as bits by index in `vars`:
/// read on some path from there before being written. A guarded write does not end a
/// value's life (where the guard is off, the old value stays).
pub(super) fn live_in(prog: &Program, vars: &[u32]) -> Vec<Vec<u64>> {
    let n = prog.insts.len();
    let words = vars.len().div_ceil(64).max(1);
    let mut index = std::collections::HashMap::new();
    for (k, &v) in vars.iter().enumerate() {
        index.insert(v, k);
    }
    let nregs = prog.nregs;
    let bits = |regs: &[u32], preds: &[u32]| {
        let mut s = vec![0u64; words];
        for x in regs.iter().copied().chain(preds.iter().map(|p| nregs + p)) {
            if let Some(&k) = index.get(&x) {
                s[k / 64] |= 1 << (k % 64);
            }
        }
        s
    };
    let (uses, defs): (Vec<Vec<u64>>, Vec<Vec<u64>>) = prog
        .insts
        .iter()
        .map(|i| {
            let (rr, rw) = reads_writes(&i.op);
            let (pr, pw) = vector::preds_rw(i);
            let defs = if i.guard.is_some() {
                vec![0; words]
            } else {
                bits(&rw, &pw)
            };
            (bits(&rr, &pr), defs)
        })
        .unzip();
    let mut live = vec![vec![0u64; words]; n + 1];
    loop {
        let mut changed = false;
        for pc in (0..n).rev() {
            let mut s = vec![0u64; words];
            for x in succs(prog, pc) {
                for w in 0..words {
                    s[w] |= live[x][w];
                }
            }
            for w in 0..words {
                s[w] = uses[pc][w] | (s[w] & !defs[pc][w]);
            }
            if s != live[pc] {
                live[pc] = s;
                changed = true;
            }
        }
        if !changed {
            return live;
        }
    }
}

/// Registers the same in every thread of the block that the body computes once per
/// phase, as it starts (from after a barrier), and which instructions compute them
/// (`hoisted`). Such a register is written only by the first instructions after a
/// barrier, unguarded register arithmetic on constants, what is the same in every
/// thread before the body (`uniform`) and such registers; no branch goes to them, so
/// every thread that runs them has passed the barrier, and every thread passes it the
/// same number of times (`aligned`), each computing the same value. The four-lane code
/// keeps one value of each for the block (`vector::VecState::ucell`, at most `most`)
/// and runs those instructions once before the phase's groups start, where each group
/// ran them on its four lanes (reduce_sum's halving stride: its loop's groups, nearly
/// all of them past the threads that add, run only a comparison).
pub(super) fn phase_uniform(
    prog: &Program,
    uniform: &[bool],
    bars: &[u32],
    most: usize,
) -> (Vec<bool>, Vec<bool>) {
    let n = prog.insts.len();
    let nregs = prog.nregs as usize;
    let mut target = vec![false; n + 1];
    for i in &prog.insts {
        if let Op::Bra { target: t } = i.op {
            target[(t as usize).min(n)] = true;
        }
    }
    let dest = |i: &Inst| -> Option<R> {
        let (_, w) = reads_writes(&i.op);
        let (pr, pw) = vector::preds_rw(i);
        let arithmetic = matches!(
            i.op,
            Op::Bin(..)
                | Op::Un(..)
                | Op::Ter(..)
                | Op::Mov(..)
                | Op::Bfi { .. }
                | Op::Prmt(..)
                | Op::Lop3 { .. }
                | Op::Cvt { .. }
        );
        (arithmetic && i.guard.is_none() && pr.is_empty() && pw.is_empty() && w.len() == 1)
            .then(|| w[0])
    };
    // The first instructions after each barrier that may be computed once.
    let runs: Vec<Vec<usize>> = bars
        .iter()
        .map(|&b| {
            (b as usize + 1..n)
                .take_while(|&pc| !target[pc] && dest(&prog.insts[pc]).is_some())
                .collect()
        })
        .collect();
    let mut touched = vec![false; nregs];
    for i in &prog.prologue {
        let (r, w) = reads_writes(&i.op);
        for x in r.into_iter().chain(w) {
            touched[x as usize] = true;
        }
    }
    let mut regs = vec![false; nregs];
    for i in &prog.insts {
        for r in reads_writes(&i.op).1 {
            regs[r as usize] = !uniform[r as usize] && !touched[r as usize];
        }
    }
    loop {
        let mut hoisted = vec![false; n];
        for run in &runs {
            for &pc in run.iter() {
                if !dest(&prog.insts[pc]).is_some_and(|d| regs[d as usize]) {
                    break;
                }
                hoisted[pc] = true;
            }
        }
        let mut next = regs.clone();
        for (pc, i) in prog.insts.iter().enumerate() {
            let (r, w) = reads_writes(&i.op);
            let ok = hoisted[pc] && r.iter().all(|&x| uniform[x as usize] || regs[x as usize]);
            for d in w.into_iter().filter(|_| !ok) {
                next[d as usize] = false;
            }
        }
        // (The first `most`, by register.)
        let over: Vec<usize> = (0..nregs).filter(|&r| next[r]).skip(most).collect();
        for r in over {
            next[r] = false;
        }
        if next == regs {
            return (regs, hoisted);
        }
        regs = next;
    }
}

/// A phase whose threads from some `%tid.x` on go straight to a barrier, doing
/// nothing else: a tree reduction's `if (tid < s)` after its `__syncthreads()`, nearly
/// every group idle in its last steps. In a block of one row, the groups past the
/// bound need not run: their frames and headers already say what running them would
/// (they wait at `bar`, with the values they came with).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Tail {
    /// The way from the phase's start to the test: each comparison of values the
    /// same in every thread it depends on (pc of the `setp`) and what it must give.
    pub conds: Vec<(usize, bool)>,
    /// The value compared with `%tid.x` (the same in every thread), and the test:
    /// a thread goes to the barrier when its `%tid.x` is at least it (`strict`: past
    /// it), compared on `bits` (`signed` or not).
    pub bound: R,
    pub strict: bool,
    pub bits: u8,
    pub signed: bool,
    /// The barrier, and the thread instructions counted on the way (its backward
    /// branches' loops, as the code counts them).
    pub bar: u32,
    pub count: u64,
    /// The predicates the way writes, in order, each with its `setp`'s pc (each dead
    /// after the barrier).
    pub preds: Vec<(u32, usize)>,
}

/// The phase from `entry`'s [`Tail`], if it has one: from its start, past what it
/// computes once (`hoisted`), comparisons of `uniform` values and branches on them,
/// to `setp` of `%tid.x` against a `uniform` value and a branch on it to a barrier.
pub(super) fn tail(prog: &Program, uniform: &[bool], hoisted: &[bool], entry: u32) -> Option<Tail> {
    let way = Tail {
        conds: vec![],
        bound: 0,
        strict: false,
        bits: 0,
        signed: false,
        bar: 0,
        count: 0,
        preds: vec![],
    };
    let mut seen = vec![false; prog.insts.len()];
    let t = tail_from(prog, uniform, hoisted, entry as usize, &mut seen, way)?;
    // (The groups passed over keep what the way writes only where it is dead after
    // the barrier: they store nothing there.)
    let preds: Vec<u32> = t.preds.iter().map(|&(p, _)| prog.nregs + p).collect();
    let live = live_in(prog, &preds);
    live[t.bar as usize + 1]
        .iter()
        .all(|&w| w == 0)
        .then_some(t)
}

fn tail_from(
    prog: &Program,
    uniform: &[bool],
    hoisted: &[bool],
    mut pc: usize,
    seen: &mut [bool],
    mut way: Tail,
) -> Option<Tail> {
    let cmp = |i: &Inst| match (&i.op, i.aff) {
        (
            &Op::Setp {
                d,
                dn: None,
                a,
                b,
                comb: None,
                ..
            },
            Aff::Cmp { bits, signed, code },
        ) if i.guard.is_none() => Some((d, a, b, bits, signed, code)),
        _ => None,
    };
    loop {
        if pc >= prog.insts.len() || std::mem::replace(&mut seen[pc], true) {
            return None;
        }
        let i = &prog.insts[pc];
        if hoisted[pc] {
            pc += 1;
            continue;
        }
        if let Some((d, a, b, bits, signed, code)) = cmp(i) {
            if uniform[a as usize] && uniform[b as usize] {
                way.preds.push((d, pc));
                pc += 1;
                continue;
            }
            // `%tid.x` against a uniform value, and a branch to a barrier on it.
            let cc = int_cc(code, signed);
            let (bound, cc) = match (tid_x(prog, a), tid_x(prog, b)) {
                (true, false) if uniform[b as usize] => (b, cc),
                // (`u < tid` is `tid > u`.)
                (false, true) if uniform[a as usize] => (a, cc.swap_args()),
                _ => return None,
            };
            let next = prog.insts.get(pc + 1)?;
            let (Op::Bra { target }, Some((p, neg))) = (&next.op, next.guard) else {
                return None;
            };
            let bar = prog.insts.get(*target as usize)?;
            if p != d
                || bits < 16
                || bar.guard.is_some()
                || !matches!(bar.op, Op::Bar { red: None })
            {
                return None;
            }
            // Taken when `tid cc bound` holds, or (`neg`) fails.
            let cc = if neg { cc.complement() } else { cc };
            way.strict = match cc {
                IntCC::SignedGreaterThan | IntCC::UnsignedGreaterThan => true,
                IntCC::SignedGreaterThanOrEqual | IntCC::UnsignedGreaterThanOrEqual => false,
                _ => return None,
            };
            way.preds.push((d, pc));
            (way.bound, way.bits, way.signed, way.bar) = (bound, bits, signed, *target);
            return Some(way);
        }
        let Op::Bra { target } = i.op else {
            return None;
        };
        let target = target as usize;
        let back = |from: usize, to: usize| {
            if to <= from {
                (from - to + 1) as u64
            } else {
                0
            }
        };
        let Some((p, neg)) = i.guard else {
            way.count += back(pc, target);
            pc = target;
            continue;
        };
        // On a comparison of the way's (the last to write `p`): each side in turn.
        let &(_, at) = way.preds.iter().rev().find(|&&(q, _)| q == p)?;
        for (to, taken) in [(target, true), (pc + 1, false)] {
            let mut w = way.clone();
            w.conds.push((at, taken != neg));
            if taken {
                w.count += back(pc, target);
            }
            if let Some(t) = tail_from(prog, uniform, hoisted, to, seen, w) {
                return Some(t);
            }
        }
        return None;
    }
}

/// Whether register `r` is `%tid.x` wherever the body reads it: the special itself,
/// or what the prologue alone writes, once, with a `mov` of it.
fn tid_x(prog: &Program, r: R) -> bool {
    if r == 0 {
        return true;
    }
    let writes = |i: &&Inst| reads_writes(&i.op).1.contains(&r);
    let mut defs = prog.prologue.iter().filter(writes);
    let once = matches!(
        (defs.next(), defs.next()),
        (Some(i), None) if i.guard.is_none() && matches!(i.aff, Aff::Mov { a: 0, bits, .. } if bits >= 16)
    );
    once && !prog.insts.iter().any(|i| writes(&i))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{bench::BENCH_PTX, SimConfig, Simulator};

    /// Kernel `k` of `ptx`'s barriers and their phases' [`Tail`]s, found as the
    /// four-lane code finds them (`vector::Lower::vec_state`).
    fn tails(ptx: &str, k: &str) -> (Vec<u32>, Vec<Option<Tail>>) {
        let mut s = Simulator::new(SimConfig::default());
        let m = s.load_module("tails.ptx", ptx).unwrap();
        let prog = &m.kernels[k].prog;
        let (mut uniform, _) = super::super::uniform_regs(prog);
        let bars = barriers(prog);
        let (once, hoisted) = phase_uniform(prog, &uniform, &bars, 8);
        for (u, o) in uniform.iter_mut().zip(once) {
            *u |= o;
        }
        let t = bars
            .iter()
            .map(|&b| tail(prog, &uniform, &hoisted, b + 1))
            .collect();
        (bars, t)
    }

    /// The bench's block reduction: after its first barrier the halving stride is
    /// computed (once per phase); where it is not zero, a test sends the threads at or
    /// past it to the loop's barrier. After the loop's barrier the same, on the way of
    /// the loop's branch back (13 instructions a round).
    #[test]
    fn a_tree_reductions_steps_have_tails() {
        let (bars, t) = tails(BENCH_PTX, "reduce_sum");
        let t: Vec<Tail> = t.into_iter().map(|t| t.expect("a tail")).collect();
        assert_eq!(bars.len(), 2);
        for (k, (t, (cond, count))) in t.iter().zip([(false, 0), (true, 13)]).enumerate() {
            assert_eq!(
                (t.strict, t.bits, t.signed),
                (false, 32, false),
                "{k}: {t:?}"
            );
            assert_eq!((t.bar, t.count), (bars[1], count), "{k}: {t:?}");
            assert_eq!(t.conds.len(), 1, "{k}: {t:?}");
            assert_eq!(t.conds[0].1, cond, "{k}: {t:?}");
            assert_eq!(t.preds.len(), 2, "{k}: {t:?}");
            assert_ne!(t.bound, 0, "{k}: {t:?}");
        }
        assert_eq!(t[0].bound, t[1].bound);
    }

    /// A loop of `test` (threads it sends to `$B` idle), the bound `%r7` computed
    /// after each barrier; `after` right after the loop's barrier's computation.
    fn looped(test: &str, after: &str) -> String {
        format!(
            ".version 7.0\n.target sm_80\n.address_size 64\n.visible .entry k(.param .u64 p)\n{{
  .reg .b32 %r<16>;
  .reg .b64 %rd<4>;
  .reg .pred %p<4>;
  ld.param.u64 %rd1, [p];
  mov.u32 %r3, %ntid.x;
  mov.u32 %r4, %tid.x;
  mov.u32 %r5, %tid.y;
  mov.u32 %r9, 0;
  ld.global.u32 %r10, [%rd1];
  bar.sync 0;
  add.u32 %r7, %r3, 1;
$L:
  {test}
  add.u32 %r9, %r9, %r7;
$B:
  bar.sync 0;
  sub.u32 %r7, %r7, 3;
  {after}
  setp.gt.s32 %p3, %r7, -7;
  @%p3 bra $L;
  st.global.u32 [%rd1], %r9;
  ret;
}}
"
        )
    }

    /// What is a tail and what is not: each way to write the test, and where the
    /// threads it sends on do more than wait, or the test is of another value.
    #[test]
    fn tails_are_threads_past_a_bound_of_tid_x_that_only_wait() {
        // (Each test, the branch, whether it is `strict` and `signed`.)
        let ge = [
            "ge.u32 %p2, %r4, %r7",
            "ge.s32 %p2, %r4, %r7",
            "le.u32 %p2, %r7, %r4",
        ];
        let gt = [
            "gt.u32 %p2, %r4, %r7",
            "lt.s32 %p2, %r7, %r4",
            "lt.u32 %p2, %r4, %r7",
        ];
        let tests = [
            (ge[0], "@%p2", Some((false, false))),
            (gt[2], "@!%p2", Some((false, false))),
            (ge[2], "@%p2", Some((false, false))),
            (gt[0], "@%p2", Some((true, false))),
            (ge[1], "@%p2", Some((false, true))),
            (gt[1], "@%p2", Some((true, true))),
            // Threads below the bound are the idle ones; a test of not equal.
            (gt[2], "@%p2", None),
            ("ne.u32 %p2, %r4, %r7", "@%p2", None),
            // Another index, a value that differs between threads, a value of the
            // thread's own.
            ("ge.u32 %p2, %r5, %r7", "@%p2", None),
            ("ge.u32 %p2, %r4, %r10", "@%p2", None),
            ("ge.u32 %p2, %r9, %r7", "@%p2", None),
        ];
        let mut cases: Vec<(String, &str, _)> = tests
            .iter()
            .map(|(t, b, want)| (format!("setp.{t};\n  {b} bra $B;"), "", *want))
            .collect();
        let ge = "setp.ge.u32 %p2, %r4, %r7;\n ";
        cases.extend([
            // The test's predicate read after the barrier.
            (
                format!("{ge} @%p2 bra $B;"),
                "@%p2 add.u32 %r9, %r9, 1;",
                None,
            ),
            // The threads it sends on go elsewhere first, or write something first.
            (format!("{ge} @%p2 bra $L;\n  bra $B;"), "", None),
            (
                format!("{ge} @%p2 add.u32 %r9, %r9, 5;\n  @%p2 bra $B;"),
                "",
                None,
            ),
        ]);
        for (test, after, want) in cases {
            let ptx = looped(&test, after);
            let (bars, t) = tails(&ptx, "k");
            let got: Vec<Option<(bool, bool)>> = t
                .iter()
                .map(|t| t.as_ref().map(|t| (t.strict, t.signed)))
                .collect();
            assert_eq!(got, vec![want; 2], "{test} / {after}");
            for t in t.iter().flatten() {
                assert_eq!((t.bar, t.bits), (bars[1], 32), "{test}");
            }
            // (After the first barrier the way is straight; after the loop's, it
            // takes the loop's branch back, 7 instructions a round, on its condition.)
            if want.is_some() {
                let (a, b) = (t[0].as_ref().unwrap(), t[1].as_ref().unwrap());
                assert_eq!((a.count, a.conds.len()), (0, 0), "{test}");
                assert_eq!((b.count, b.conds.len()), (7, 1), "{test}");
                assert!(b.conds[0].1, "{test}");
            }
        }
        // A barrier that reduces (every thread's value counts) is no tail's.
        let red = looped("setp.ge.u32 %p2, %r4, %r7;\n  @%p2 bra $B;", "").replace(
            "$B:\n  bar.sync 0;",
            "$B:\n  bar.red.popc.u32 %r11, 0, %p2;",
        );
        assert_eq!(tails(&red, "k").1, vec![None, None]);
    }
}
