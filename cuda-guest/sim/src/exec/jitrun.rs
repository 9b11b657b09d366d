//! The JIT's side of a launch: a kernel compiled by `crate::jit` runs block by block on
//! the same workers, block order, error handling and accounting as the interpreter; its
//! helpers are the interpreter's own resolver, fault reports, budget check, lane
//! functions and atomics.

use super::*;
use crate::jit::{self, Ctx, Helpers, Kernel, Slot, PROLOGUE};

/// The helpers compiled code calls.
fn helpers() -> Helpers {
    Helpers {
        mem: h_mem as *const () as usize,
        tick: h_tick as *const () as usize,
        bin: h_bin as *const () as usize,
        un: h_un as *const () as usize,
        ter: h_ter as *const () as usize,
        cmp: h_cmp as *const () as usize,
        atom: h_atom as *const () as usize,
    }
}

/// The compiled form of `prog`, compiled the first time it is asked for, or why the
/// JIT does not take it (logged then).
pub(crate) fn kernel(prog: &Program) -> Result<&Kernel, &str> {
    prog.jit
        .get_or_init(|| {
            let k = jit::compile(prog, &helpers());
            if let Err(why) = &k {
                log::debug!("kernel {}: interpreted, not compiled: {why}", prog.name);
            }
            k
        })
        .as_ref()
        .map_err(|e| e.as_str())
}

/// What the helpers reach through [`Ctx::host`].
struct Host<'e, 'a, 'b> {
    ex: &'e mut Exec<'a, 'b>,
    /// The error a helper recorded (the compiled function then returns 1).
    error: Option<SimError>,
    /// The block's local memory (`local_size` bytes per thread).
    local: *mut u8,
    /// Register rows for the lane functions ([`lane_regs`]).
    scratch: [u64; 128],
}

/// The host behind `ctx`.
///
/// # Safety
/// `ctx` is the `Ctx` [`run_block`] passed to the compiled function now running on this
/// thread, whose `host` points to its live `Host`, borrowed by nothing else meanwhile.
unsafe fn host<'h>(ctx: *mut Ctx) -> &'h mut Host<'h, 'h, 'h> {
    // SAFETY: as the caller guarantees.
    unsafe { &mut *((*ctx).host as *mut Host<'h, 'h, 'h>) }
}

/// Runs a helper's body on the host behind `ctx`. A panic in it (a defect of ours)
/// cannot unwind through compiled code: it becomes the launch's error, and the helper
/// returns `fail` (the compiled function then fails, or the block does when it returns).
fn guarded<T>(ctx: *mut Ctx, fail: T, f: impl FnOnce(&mut Host) -> T) -> T {
    // SAFETY: the helpers are called only by the compiled function `run_block` runs
    // with `ctx`, whose `host` is that block's live `Host`.
    let host = unsafe { host(ctx) };
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(&mut *host))) {
        Ok(v) => v,
        Err(panic) => {
            let what = panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_default();
            host.error = Some(SimError::InvalidLaunch {
                kernel: host.ex.l.prog.name.clone(),
                message: format!("internal error in a helper of the compiled kernel: {what}"),
            });
            fail
        }
    }
}

/// The instruction a helper's `pc` names (a body pc, or [`PROLOGUE`] and an index).
fn inst_at(prog: &Program, pc: u32) -> Option<&Inst> {
    if pc & PROLOGUE != 0 {
        prog.prologue.get((pc & !PROLOGUE) as usize)
    } else {
        prog.insts.get(pc as usize)
    }
}

/// `ld`/`st` at `pc` by thread `t`: the host address of the access at `addr`, resolved
/// as the interpreter resolves it (the instruction's slot learns a global allocation);
/// null after recording the fault.
extern "C" fn h_mem(ctx: *mut Ctx, pc: u32, t: u32, addr: u64) -> *mut u8 {
    guarded(ctx, std::ptr::null_mut(), |host| {
        let ex = &mut *host.ex;
        let (sp, total, write) = match inst_at(ex.l.prog, pc).map(|i| &i.op) {
            Some(Op::Ld { sp, size, n, .. }) => (*sp, *size as u64 * *n as u64, false),
            Some(Op::St { sp, size, n, .. }) => (*sp, *size as u64 * *n as u64, true),
            Some(Op::Atom { sp, ty, .. }) => (*sp, atom_size(*ty), true),
            _ => return std::ptr::null_mut(),
        };
        let ls = ex.l.prog.local_size as usize;
        let (wid, lane) = (t / 32, (t % 32) as usize);
        match ex.resolve(sp, addr, total, total, write, wid, lane, pc, ls) {
            Ok(Target::Global(i, o)) => {
                // Held reductions on this allocation first (the thread reads its own).
                ex.touch(i);
                let a = &ex.l.live[i];
                let p = a.host_ptr();
                if !(write && a.read_only) {
                    // SAFETY: `ctx.cache` has a slot per instruction (`worker`).
                    let slot = unsafe { &mut *(*ctx).cache.add(pc as usize) };
                    *slot = Slot::new(a.base, a.size, p as u64, total);
                }
                p.wrapping_add(o as usize)
            }
            Ok(Target::Shared(o)) => (ex.shared.as_mut_ptr() as *mut u8).wrapping_add(o),
            Ok(Target::Local(o)) => host.local.wrapping_add(wid as usize * 32 * ls + o),
            // Read only: `resolve` refuses a store to the parameters.
            Ok(Target::Param(o)) => (ex.l.params.as_ptr() as *mut u8).wrapping_add(o),
            Err(e) => {
                host.error = Some(e);
                std::ptr::null_mut()
            }
        }
    })
}

/// Counts `n` thread instructions and checks the budget, the time limit, cancellation
/// and other workers' failure: 0 to go on, 1 after recording why not.
extern "C" fn h_tick(ctx: *mut Ctx, pc: u32, n: u64) -> u32 {
    guarded(ctx, 1, |host| {
        if host.error.is_some() {
            // A helper failed where it could not say so (see `guarded`).
            return 1;
        }
        match host.ex.tick_by(n / 32, pc) {
            Ok(()) => 0,
            Err(e) => {
                host.error = Some(e);
                1
            }
        }
    })
}

/// Rows for one lane of a lane function: the sources in lane 0 of rows 0.., the result
/// in lane 0 of the row after them (a lane function called with mask 1 reads and writes
/// lane 0 alone; the other lanes hold whatever the last call left, read only by the
/// comparisons, whose other lanes' results are dropped).
fn lane_regs<'h>(host: &'h mut Host, srcs: &[u64]) -> &'h mut [u64; 128] {
    for (k, v) in srcs.iter().enumerate() {
        host.scratch[k * 32] = *v;
    }
    &mut host.scratch
}

extern "C" fn h_bin(ctx: *mut Ctx, pc: u32, a: u64, b: u64) -> u64 {
    guarded(ctx, 0, |host| {
        match inst_at(host.ex.l.prog, pc).map(|i| &i.op) {
            Some(Op::Bin(f, ..)) => {
                let r = lane_regs(host, &[a, b]);
                f(r, 2, 0, 1, 1);
                r[64]
            }
            _ => 0,
        }
    })
}

extern "C" fn h_un(ctx: *mut Ctx, pc: u32, a: u64) -> u64 {
    guarded(ctx, 0, |host| {
        match inst_at(host.ex.l.prog, pc).map(|i| &i.op) {
            Some(Op::Un(f, ..)) => {
                let r = lane_regs(host, &[a]);
                f(r, 1, 0, 1);
                r[32]
            }
            Some(op @ Op::Cvt { .. }) => op.cvt_one(a).unwrap_or(0),
            _ => 0,
        }
    })
}

extern "C" fn h_ter(ctx: *mut Ctx, pc: u32, a: u64, b: u64, c: u64) -> u64 {
    guarded(ctx, 0, |host| {
        match inst_at(host.ex.l.prog, pc).map(|i| &i.op) {
            Some(Op::Ter(f, ..)) => {
                let r = lane_regs(host, &[a, b, c]);
                f(r, 3, 0, 1, 2, 1);
                r[96]
            }
            Some(Op::Prmt(..)) => ops::prmt(a, b, c),
            _ => 0,
        }
    })
}

extern "C" fn h_cmp(ctx: *mut Ctx, pc: u32, a: u64, b: u64) -> u32 {
    guarded(ctx, 0, |host| {
        match inst_at(host.ex.l.prog, pc).map(|i| &i.op) {
            Some(Op::Setp { f, .. }) => f(lane_regs(host, &[a, b]), 0, 1) & 1,
            _ => 0,
        }
    })
}

/// `atom` at `pc` by thread `t`: 0 with the old value in `ctx.ret`, or 1 after
/// recording the fault.
extern "C" fn h_atom(ctx: *mut Ctx, pc: u32, t: u32, addr: u64, b: u64, c: u64) -> u32 {
    guarded(ctx, 1, |host| {
        let ex = &mut *host.ex;
        let Some(Op::Atom { sp, op, ty, d, .. }) = inst_at(ex.l.prog, pc).map(|i| &i.op) else {
            return 1;
        };
        let hold = d.is_none() && ex.l.prog.combine_reds;
        let (sp, op, ty) = (*sp, *op, *ty);
        let size = atom_size(ty);
        let ls = ex.l.prog.local_size as usize;
        let (wid, lane) = (t / 32, (t % 32) as usize);
        match ex.resolve(sp, addr, size, size, true, wid, lane, pc, ls) {
            Ok(Target::Global(i, o)) if hold => {
                // (The bit set is exact below 64 allocations; beyond, always.)
                if i >= 64 || !ex.holds(i) {
                    // The compiled accesses' fast paths skip `touch`: empty the slots
                    // of this allocation, so that they take `h_mem`, which applies the
                    // held reductions first.
                    let base = ex.l.live[i].base;
                    for k in 0..ex.l.prog.insts.len() {
                        // SAFETY: `ctx.cache` has a slot per instruction (`worker`).
                        let slot = unsafe { &mut *(*ctx).cache.add(k) };
                        if slot.base == base {
                            *slot = Slot::default();
                        }
                    }
                }
                ex.hold_red(i, o, op, ty, b);
                0
            }
            Ok(target) => {
                // `compile` refuses atomics on local memory: no lane's local memory is
                // reached here.
                let old = ex.atom_at(target, op, ty, size, b, c, &mut []);
                // SAFETY: `ctx` is valid (as above); only this thread uses it.
                unsafe { (*ctx).ret = old };
                0
            }
            Err(e) => {
                host.error = Some(e);
                1
            }
        }
    })
}

/// A worker of launch `l` running compiled kernel `k`: blocks taken as the
/// interpreter's workers take them ([`take_blocks`]).
pub(super) fn worker(l: &Launch, k: &Kernel, next: &AtomicU64, total: u64, id: u32) {
    let prog = l.prog;
    let n = l.nthreads as usize;
    let ls = prog.local_size as usize;
    let mut ex = Exec::new(l);
    let tids: Vec<u64> = (0..n as u32)
        .map(|t| {
            let s = special_values(l, t, id);
            s[0] | s[1] << 16 | s[2] << 32
        })
        .collect();
    let mut uniform = special_values(l, 0, id).to_vec();
    let mut cache = vec![Slot::default(); prog.insts.len()];
    let mut local = vec![0u8; n.div_ceil(32) * 32 * ls];
    // (16-byte aligned: the frames hold four-lane vectors.)
    let before = jit::FRAME_CELLS + 16 * jit::SPLATS;
    let mut frames = vec![0u128; (before + (n / jit::vector_lanes()) * k.frame) / 16];
    let mut ctx = Ctx {
        params: l.params.as_ptr(),
        shared: std::ptr::null_mut(),
        shared_len: 0,
        local: local.as_mut_ptr(),
        local_size: ls as u64,
        nthreads: n as u64,
        tids: tids.as_ptr(),
        // Set per block (`run_block`), as `shared` and `host` are.
        uniform: std::ptr::null(),
        cache: cache.as_mut_ptr(),
        count: 0,
        ret: 0,
        host: std::ptr::null_mut(),
        reds: ex.red_table(),
        // SAFETY: `frames` holds at least `before` bytes (a multiple of 16), so
        // the pointer stays inside its allocation or one past its end; the vector is
        // neither resized nor dropped while the kernel runs.
        frames: unsafe { (frames.as_mut_ptr() as *mut u8).add(before) },
    };
    let mut host = Host {
        ex: &mut ex,
        error: None,
        local: local.as_mut_ptr(),
        scratch: [0; 128],
    };
    let mut rest = 0u64;
    take_blocks(l, next, total, |b| {
        host.ex.block_linear = b;
        run_block(k, &mut ctx, &mut host, &mut uniform, &mut rest)
    });
    host.ex.flush_reds();
    l.executed.fetch_add(rest / 32, Relaxed);
}

/// Runs the block `host.ex.block_linear`: every thread from its start to its exit.
fn run_block(
    k: &Kernel,
    ctx: &mut Ctx,
    host: &mut Host,
    uniform: &mut [u64],
    rest: &mut u64,
) -> Result<(), SimError> {
    let prog = host.ex.l.prog;
    host.ex.begin_block();
    uniform[6..9].copy_from_slice(&host.ex.block.map(|x| x as u64));
    if prog.static_local > 0 {
        let len = ctx.nthreads as usize * ctx.local_size as usize;
        // SAFETY: `local` holds at least `nthreads * local_size` bytes (`worker`).
        unsafe { std::ptr::write_bytes(ctx.local, 0, len) };
    }
    ctx.shared = host.ex.shared.as_mut_ptr() as *mut u8;
    ctx.shared_len = host.ex.shared_len as u64;
    ctx.uniform = uniform.as_ptr();
    ctx.host = host as *mut Host as *mut std::ffi::c_void;
    ctx.count = 0;
    // SAFETY: every table in `ctx` is sized for this kernel and block (`worker`, above),
    // `host` is the live `Host` the helpers expect, and nothing else touches either
    // while the function runs.
    let rc = unsafe { k.run(ctx) };
    *rest += ctx.count;
    if rc != 0 || host.error.is_some() {
        return Err(host.error.take().unwrap_or(SimError::InvalidLaunch {
            kernel: prog.name.clone(),
            message: "the compiled kernel failed without a report".into(),
        }));
    }
    Ok(())
}
