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
