//! The execution engine: warps of 32 lanes over lane masks, a SIMT stack reconverging
//! at immediate post-dominators, blocks scheduled barrier to barrier, and blocks spread
//! over host threads.

#![allow(clippy::needless_range_loop)]

use super::decode::*;
use super::memory::{Alloc, Freed, Memory};
use super::ops::{self, Lanes};
use super::wmma::{Frag, Place, Places, Wmma};
use super::{
    Assertion, FaultKind, LaunchConfig, LaunchReport, Location, MemoryFault, NearestAlloc,
    OutputStream, SimConfig, SimError,
};
use crate::cdp::{self, Call, Child};
use crate::jit::RedSlot;
use std::collections::HashMap;
use std::sync::atomic::{fence, AtomicBool, AtomicU64, Ordering::*};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

mod jitrun;
pub(crate) use jitrun::kernel as jit_kernel;

const FULL: u32 = u32::MAX;

/// A launch's shared tables, a poisoned lock (a worker that panicked) read as it is.
fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}
/// Warp instructions between budget/time checks.
const TICK: u64 = 4096;

#[derive(Debug, Clone, Copy)]
struct Frame {
    pc: u32,
    rpc: u32,
    mask: u32,
    /// The frame of an out-of-line call's body, not yet returned: popping it (its lanes
    /// exited) ends the call ([`Warp::calls`]).
    call: bool,
}

/// An out-of-line call in progress: what its [`Op::Return`] gives back.
#[derive(Debug)]
struct CallRec {
    /// The pc of its [`Op::Call`].
    site: u32,
    func: u32,
    /// The callee's registers, tags and predicates as they were before the call.
    regs: Box<[u64]>,
    tags: Box<[Tag]>,
    preds: Box<[u32]>,
    /// The caller's frame and stack top.
    fp: u64,
    top: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum WState {
    Run,
    Bar,
    Done,
}

/// What the engine knows of a register row without reading it: lane `l` holds
/// `base + stride * l` (exactly, as unsigned 64-bit values: no lane wraps; a stride of 0
/// is a uniform value). `lazy`: the row itself is stale and is written from the tag
/// before anything reads it (only registers in [`Program::touch`] lists are ever lazy).
#[derive(Debug, Clone, Copy, Default)]
struct Tag {
    aff: Option<(u64, i64)>,
    lazy: bool,
}

#[derive(Debug)]
struct Warp {
    regs: Vec<u64>,
    /// A tag per register.
    tags: Vec<Tag>,
    preds: Vec<u32>,
    stack: Vec<Frame>,
    live: u32,
    state: WState,
    local: Vec<u8>,
    bar_pc: u32,
    /// Carry flag (`CC.CF`) per lane.
    carry: u32,
    /// This warp's part of a `bar.red` reduction.
    red: u64,
    /// Out-of-line calls in progress, innermost last.
    calls: Vec<CallRec>,
    /// The running call's frame and the top of the stack, as local memory offsets
    /// (the same in every lane: the lanes of a call are at the same depth).
    fp: u64,
    top: u64,
}

impl Warp {
    /// Writes row `r` from its tag if the row is stale.
    #[inline(always)]
    fn materialize(&mut self, r: R) {
        let t = &mut self.tags[r as usize];
        if t.lazy {
            t.lazy = false;
            if let Some((b, s)) = t.aff {
                let row =
                    <&mut Lanes>::try_from(&mut self.regs[r as usize * 32..r as usize * 32 + 32])
                        .expect("register row");
                if s == 0 {
                    row.fill(b);
                } else {
                    let mut v = b;
                    for x in row.iter_mut() {
                        *x = v;
                        v = v.wrapping_add(s as u64);
                    }
                }
            }
        }
    }

    /// Reads the tag of row `r` from its lanes.
    fn detect(&mut self, r: R) {
        let row = lanes(&self.regs, r);
        let (b, s) = (row[0], row[1].wrapping_sub(row[0]) as i64);
        let exact = (0..32).all(|l| b as i128 + s as i128 * l as i128 == row[l] as i128);
        self.tags[r as usize] = Tag {
            aff: exact.then_some((b, s)),
            lazy: false,
        };
    }

    /// Gives row `d` the lanes `t` (lazily: the row is written when read).
    #[inline(always)]
    fn set_tag(&mut self, d: R, t: (u64, i64)) {
        self.tags[d as usize] = Tag {
            aff: Some(t),
            lazy: true,
        };
    }
}

/// Lanes `r0 + s * l` reduced modulo 2^bits (`r0` and `s` given modulo 2^64; bits 8,
/// 16, 32 or 64), if the reduced lanes form an exact progression: lane 0, the stride,
/// lane 31 and the mask of the width.
#[inline(always)]
fn progression(r0: u64, s: u64, bits: u8) -> Option<(u64, i64, u64, u64)> {
    if bits == 0 || bits > 64 {
        return None;
    }
    let mask = u64::MAX >> (64 - bits);
    let t0 = r0 & mask;
    let sm = s & mask;
    if sm == 0 {
        // Uniform: always exact.
        return Some((t0, 0, t0, mask));
    }
    // The stride as a signed residue (sign-extended from the width).
    let sp = ((sm << (64 - bits)) as i64) >> (64 - bits);
    let span = sp.unsigned_abs().checked_mul(31)?;
    let t31 = if sp >= 0 {
        t0.checked_add(span).filter(|&t| t <= mask)?
    } else {
        t0.checked_sub(span)?
    };
    Some((t0, sp, t31, mask))
}

/// The lanes of a tag read as `bits`-bit integers (signed or not): lane 0 and the stride,
/// exact for every lane, or `None` when the lanes so read are no exact progression.
#[inline(always)]
fn view(t: (u64, i64), bits: u8, signed: bool) -> Option<(i128, i128)> {
    let (t0, sp, t31, mask) = progression(t.0, t.1 as u64, bits)?;
    if signed {
        // Every lane on the same side of the sign bit (the lanes are monotonic).
        let half = mask / 2 + 1;
        if (t0 >= half) != (t31 >= half) {
            return None;
        }
        if t0 >= half {
            return Some((t0 as i128 - mask as i128 - 1, sp as i128));
        }
    }
    Some((t0 as i128, sp as i128))
}

/// The tag of lanes `r0 + s * l` reduced modulo 2^bits (`r0` and `s` given modulo 2^64;
/// bits 8, 16, 32 or 64), if the reduced lanes form an exact progression.
#[inline(always)]
fn fit(r0: u64, s: u64, bits: u8) -> Option<(u64, i64)> {
    progression(r0, s, bits).map(|(t0, sp, _, _)| (t0, sp))
}

/// The lanes where `d0 + ds * l` is negative, zero and positive (`|ds|` below 2^59, as
/// [`view`] gives).
#[inline(always)]
fn sign_masks(d0: i128, ds: i128) -> (u32, u32, u32) {
    if ds < 0 {
        let (n, z, p) = sign_masks(-d0, -ds);
        return (p, z, n);
    }
    let by_sign = |v: i128| match v.signum() {
        -1 => (FULL, 0, 0),
        0 => (0, FULL, 0),
        _ => (0, 0, FULL),
    };
    if ds == 0 {
        return by_sign(d0);
    }
    if d0 >= 0 {
        let z = (d0 == 0) as u32;
        return (0, z, FULL & !z);
    }
    if d0 + 31 * ds < 0 {
        return (FULL, 0, 0);
    }
    // 0 < -d0 <= 31 ds: the lanes below ceil(-d0 / ds) are negative.
    let (k, ds) = ((-d0) as u64, ds as u64);
    let (q, rem) = (k / ds, k % ds);
    let below = q + (rem != 0) as u64;
    let neg = ((1u64 << below) - 1) as u32;
    let zero = if rem == 0 { 1u32 << q } else { 0 };
    (neg, zero, !(neg | zero))
}

/// A tag's lane 0 and stride as integers modulo 2^64 (for ring operations).
#[inline(always)]
fn ring(t: (u64, i64)) -> (u64, u64) {
    (t.0, t.1 as u64)
}

enum Stop {
    Barrier,
    Done,
    /// Waiting on an mbarrier: the other warps run first.
    Yield,
}

/// What all workers of a launch share.
struct Launch<'a> {
    prog: &'a Program,
    params: &'a [u8],
    live: &'a [Arc<Alloc>],
    freed: &'a [Freed],
    locks64: &'a [Mutex<()>; 64],
    cfg: LaunchConfig,
    nthreads: u32,
    nwarps: u32,
    budget: u64,
    deadline: Option<Instant>,
    /// The simulator's cancel flag ([`super::CancelToken`]).
    cancel: &'a AtomicBool,
    start: Instant,
    abort: AtomicBool,
    executed: AtomicU64,
    error: Mutex<Option<(u64, SimError)>>,
    workers: u32,
    /// Device `printf` output, in the order threads printed (at most [`PRINTF_FIFO`]).
    printed: Mutex<Vec<u8>>,
    /// The device heap (`malloc`, `free`).
    heap: Option<&'a crate::memory::DeviceHeap>,
    /// The module, whose kernels device code launches (dynamic parallelism).
    module: &'a crate::Module,
    /// How deep in launches from device code this grid is (0: launched by the host).
    depth: u32,
    /// A cooperative launch's grid workspace (cooperative groups' `grid.sync()`
    /// counter, `%envreg1:%envreg2`); 0 in any other launch.
    workspace: u64,
    /// What the grid queued to run when it ends (see `cdp.rs`).
    children: Mutex<Vec<Child>>,
    /// Parameter buffers given out and not yet launched: kernel and geometry.
    buffers: Mutex<HashMap<u64, (String, LaunchConfig)>>,
    /// The last device-runtime error of each thread (block, thread) that had one.
    last_error: Mutex<HashMap<(u64, u32), u32>>,
}

/// The most `printf` output one launch keeps, as a GPU's default printf FIFO
/// (`cudaLimitPrintfFifoSize`, 1 MiB); what does not fit is dropped, as there.
const PRINTF_FIFO: usize = 1 << 20;

/// Device memory as one thread sees it, for `printf` and `assert` (generic addresses,
/// every access checked as a load is).
struct ThreadMem<'e, 'a, 'b> {
    ex: &'e mut Exec<'a, 'b>,
    w: &'e Warp,
    wid: u32,
    lane: usize,
    pc: u32,
    ls: usize,
}

impl crate::printf::Reader for ThreadMem<'_, '_, '_> {
    fn read(&mut self, addr: u64, len: u8) -> Result<u64, ()> {
        let t = self
            .ex
            .resolve(
                Sp::Generic,
                addr,
                len as u64,
                1,
                false,
                self.wid,
                self.lane,
                self.pc,
                self.ls,
            )
            .map_err(drop)?;
        Ok(self.ex.load(&t, 0, len, self.w))
    }
}

impl ThreadMem<'_, '_, '_> {
    /// The value of a call's argument (`len` bytes) in this thread.
    fn arg(&self, a: ArgSrc, len: u8) -> u64 {
        get_arg(self.w, a, self.lane, self.ls, 0, len)
    }

    fn text(&mut self, addr: u64) -> String {
        match crate::printf::Reader::string(self, addr, 4096) {
            Ok(b) => String::from_utf8_lossy(&b).into_owned(),
            Err(()) => format!("<unreadable string at {addr:#x}>"),
        }
    }
}

struct Exec<'a, 'b> {
    l: &'b Launch<'a>,
    block: [u32; 3],
    block_linear: u64,
    /// Shared memory of the running block, as little-endian words.
    shared: Vec<u32>,
    /// Its size in bytes.
    shared_len: usize,
    /// Per instruction: the allocation its last global access hit.
    cache: Vec<u32>,
    count: u64,
    /// Set by a `try_wait` no lane of which completed: the warp yields to its siblings.
    yield_now: bool,
    /// Reductions held back ([`Program::combine_reds`]).
    reds: Reds,
}

/// A host thread's combined reductions ([`Program::combine_reds`]), in a direct-mapped
/// table by word: applied to memory when the host thread has run its last block of
/// the launch (or stopped on an error), before any access of the kernel to an
/// allocation that has some, or when another word takes the slot. Contended atomics
/// from many host threads then become about one per word and host thread: the
/// global-atomic histogram scales instead of bouncing cache lines. (Applied at the end
/// of each block instead, a 256-bin histogram of 256-thread blocks still made about 160
/// contended atomics per block: 2 host threads were slower than one on a 16-core
/// Xeon.) Holding them across blocks is what a GPU may do too: without a fence or an
/// atomic that reads, nothing orders one block's reductions before another block's
/// plain loads.
struct Reds {
    /// [`RedSlot::SLOTS`] slots, never resized: compiled kernels combine into held
    /// words through [`Exec::red_table`] between their helper calls.
    slots: std::cell::RefCell<Vec<RedSlot>>,
    /// The slots in use, to apply without scanning the table.
    used: std::cell::RefCell<Vec<u16>>,
    /// The allocations with held reductions, as bits of their index mod 64.
    allocs: std::cell::Cell<u64>,
}

impl Default for Reds {
    fn default() -> Reds {
        Reds {
            slots: std::cell::RefCell::new(vec![RedSlot::FREE; RedSlot::SLOTS]),
            used: std::cell::RefCell::new(Vec::new()),
            allocs: std::cell::Cell::new(0),
        }
    }
}

fn lanes(regs: &[u64], r: R) -> &Lanes {
    let s = r as usize * 32;
    <&Lanes>::try_from(&regs[s..s + 32]).expect("register row")
}

#[inline(always)]
fn write(regs: &mut [u64], d: R, v: &Lanes, mask: u32) {
    let s = d as usize * 32;
    let row = <&mut Lanes>::try_from(&mut regs[s..s + 32]).expect("register row");
    if mask == FULL {
        *row = *v;
    } else {
        let mut m = mask;
        while m != 0 {
            let l = m.trailing_zeros() as usize;
            m &= m - 1;
            row[l] = v[l];
        }
    }
}

macro_rules! each_lane {
    ($mask:expr, $l:ident, $body:block) => {{
        let mut m__ = $mask;
        while m__ != 0 {
            let $l = m__.trailing_zeros() as usize;
            m__ &= m__ - 1;
            $body
        }
    }};
}

fn sext(v: u64, size: u8) -> u64 {
    let sh = 64 - 8 * size as u32;
    (((v << sh) as i64) >> sh) as u64
}

#[derive(Clone, Copy)]
enum Target {
    Global(usize, u64),
    Shared(usize),
    Local(usize),
    /// The launch's parameter buffer at this offset (read-only).
    Param(usize),
}

impl<'a, 'b> Exec<'a, 'b> {
    /// The texture (or, with `surface`, surface) object descriptor a lane's handle
    /// points to: read as global memory (a stale or forged handle faults as a load
    /// would), and refused when the bytes there are not a descriptor of that kind.
    #[allow(clippy::too_many_arguments)]
    fn descriptor(
        &mut self,
        handle: u64,
        surface: bool,
        w: &Warp,
        wid: u32,
        lane: usize,
        pc: u32,
        ls: usize,
    ) -> Result<vmgpu_cuda_api::texture::Descriptor, SimError> {
        use vmgpu_cuda_api::texture::{Descriptor, SIZE};
        let t = self.resolve(Sp::Global, handle, SIZE as u64, 8, false, wid, lane, pc, ls)?;
        let mut b = [0u8; SIZE];
        for (k, chunk) in b.chunks_mut(8).enumerate() {
            chunk.copy_from_slice(&self.load(&t, 8 * k as u64, 8, w).to_le_bytes());
        }
        let what = if surface { "surface" } else { "texture" };
        match Descriptor::decode(&b) {
            Some(d) if d.surface == surface => Ok(d),
            _ => Err(SimError::Texture {
                at: self.location(wid, lane, pc),
                handle,
                message: format!(
                    "{handle:#x} is not a {what} object (cu{}ObjectCreate makes them)",
                    if surface { "Surf" } else { "Tex" }
                ),
            }),
        }
    }

    /// Reads the 8-byte mbarrier word at `addr` and writes `f` of it back; the old value.
    #[allow(clippy::too_many_arguments)]
    fn mbar_rmw(
        &mut self,
        sp: Sp,
        addr: u64,
        w: &mut Warp,
        wid: u32,
        lane: usize,
        pc: u32,
        ls: usize,
        f: impl Fn(u64) -> u64,
    ) -> Result<u64, SimError> {
        let t = self.resolve(sp, addr, 8, 8, true, wid, lane, pc, ls)?;
        Ok(match t {
            Target::Shared(so) => {
                let old = sh_read(&self.shared, so, 8);
                sh_write(&mut self.shared, so, 8, f(old));
                old
            }
            Target::Global(i, o) => {
                let al = &self.l.live[i];
                let _g = self.l.locks64[((al.base + o) >> 3) as usize % 64]
                    .lock()
                    .unwrap_or_else(|e| e.into_inner());
                let old = al.load(o, 8);
                al.store(o, 8, f(old));
                old
            }
            Target::Local(lo) => {
                let old = read_le(&w.local, lo, 8);
                write_le(&mut w.local, lo, 8, f(old));
                old
            }
            // `resolve` refuses a write to the parameters.
            Target::Param(o) => read_le(self.l.params, o, 8),
        })
    }

    fn location(&self, warp: u32, lane: usize, pc: u32) -> Location {
        let [bx, by, _] = self.l.cfg.block;
        let t = warp * 32 + lane as u32;
        Location {
            kernel: self.l.prog.name.clone(),
            block: self.block,
            thread: [t % bx, (t / bx) % by, t / (bx * by)],
            line: self
                .l
                .prog
                .insts
                .get(pc as usize)
                .map(|i| i.line)
                .unwrap_or(0),
        }
    }

    fn nearest(&self, addr: u64) -> Option<NearestAlloc> {
        let mut best: Option<(u64, NearestAlloc)> = None;
        let mut consider = |id: u64, base: u64, size: u64, freed: bool, name: Option<&String>| {
            let dist = if addr < base {
                base - addr
            } else if addr < base + size.max(1) {
                0
            } else {
                addr - (base + size)
            };
            let better = match &best {
                None => true,
                Some((d, n)) => dist < *d || (dist == *d && n.freed && !freed),
            };
            if better {
                best = Some((
                    dist,
                    NearestAlloc {
                        id,
                        base: super::DevicePtr(base),
                        size,
                        offset: addr.wrapping_sub(base) as i64,
                        freed,
                        name: name.cloned(),
                    },
                ));
            }
        };
        for a in self.l.live {
            consider(a.id, a.base, a.size, false, a.name.as_ref());
        }
        for f in self.l.freed {
            consider(f.id, f.base, f.size, true, None);
        }
        best.map(|b| b.1)
    }

    #[allow(clippy::too_many_arguments)]
    fn fault(
        &self,
        kind: FaultKind,
        write: bool,
        space: &'static str,
        addr: u64,
        size: u32,
        warp: u32,
        lane: usize,
        pc: u32,
    ) -> SimError {
        let nearest = if space == "global" || space == "generic" {
            self.nearest(addr)
        } else {
            None
        };
        SimError::MemoryFault(Box::new(MemoryFault {
            kind,
            write,
            space,
            address: addr,
            size,
            at: self.location(warp, lane, pc),
            nearest,
        }))
    }

    /// Resolves an access of `len` bytes aligned to `align` in space `sp`.
    #[inline(always)]
    #[allow(clippy::too_many_arguments)]
    fn resolve(
        &mut self,
        sp: Sp,
        addr: u64,
        len: u64,
        align: u64,
        write: bool,
        w: u32,
        lane: usize,
        pc: u32,
        local_size: usize,
    ) -> Result<Target, SimError> {
        // A kernel parameter's address, in param space or generic.
        if matches!(sp, Sp::Generic | Sp::Local) && addr.wrapping_sub(PARAM_WINDOW) < WINDOW_SIZE {
            let off = addr - PARAM_WINDOW;
            let kind = if write {
                Some(FaultKind::ReadOnly)
            } else if off
                .checked_add(len)
                .is_none_or(|e| e > self.l.params.len() as u64)
            {
                Some(FaultKind::OutOfBounds)
            } else {
                None
            };
            return match kind {
                None => Ok(Target::Param(off as usize)),
                Some(k) => Err(self.fault(k, write, "param", addr, len as u32, w, lane, pc)),
            };
        }
        let (sp, addr, name) = match sp {
            Sp::Generic => {
                if addr.wrapping_sub(SHARED_WINDOW) < WINDOW_SIZE {
                    (Sp::Shared, addr - SHARED_WINDOW, "shared")
                } else if addr.wrapping_sub(LOCAL_WINDOW) < WINDOW_SIZE {
                    (Sp::Local, addr - LOCAL_WINDOW, "local")
                } else {
                    (Sp::Global, addr, "generic")
                }
            }
            Sp::Shared => (Sp::Shared, window_offset(addr, SHARED_WINDOW), "shared"),
            Sp::Local => (Sp::Local, window_offset(addr, LOCAL_WINDOW), "local"),
            Sp::Global => (Sp::Global, addr, "global"),
        };
        if addr & (align - 1) != 0 {
            return Err(self.fault(
                FaultKind::Misaligned,
                write,
                name,
                addr,
                len as u32,
                w,
                lane,
                pc,
            ));
        }
        match sp {
            Sp::Shared => {
                if addr
                    .checked_add(len)
                    .is_some_and(|e| e <= self.shared_len as u64)
                {
                    Ok(Target::Shared(addr as usize))
                } else {
                    Err(self.fault(
                        FaultKind::SharedOutOfBounds,
                        write,
                        name,
                        addr,
                        len as u32,
                        w,
                        lane,
                        pc,
                    ))
                }
            }
            Sp::Local => {
                if addr
                    .checked_add(len)
                    .is_some_and(|e| e <= local_size as u64)
                {
                    Ok(Target::Local(lane * local_size + addr as usize))
                } else {
                    Err(self.fault(
                        FaultKind::LocalOutOfBounds,
                        write,
                        name,
                        addr,
                        len as u32,
                        w,
                        lane,
                        pc,
                    ))
                }
            }
            _ => {
                let live = self.l.live;
                let ci = self.cache[pc as usize] as usize;
                if let Some(a) = live.get(ci) {
                    let off = addr.wrapping_sub(a.base);
                    if off < a.size && len <= a.size - off && !(write && a.read_only) {
                        return Ok(Target::Global(ci, off));
                    }
                }
                let i = live.partition_point(|a| a.base <= addr);
                if i > 0 {
                    let a = &live[i - 1];
                    let off = addr - a.base;
                    if off < a.size && len <= a.size - off {
                        if write && a.read_only {
                            return Err(self.fault(
                                FaultKind::ReadOnly,
                                write,
                                name,
                                addr,
                                len as u32,
                                w,
                                lane,
                                pc,
                            ));
                        }
                        self.cache[pc as usize] = (i - 1) as u32;
                        return Ok(Target::Global(i - 1, off));
                    }
                }
                let kind = if addr < 0x10000 {
                    FaultKind::NullPointer
                } else if self
                    .l
                    .freed
                    .iter()
                    .any(|f| addr >= f.base && addr < f.base + f.size.max(1))
                {
                    FaultKind::UseAfterFree
                } else {
                    FaultKind::OutOfBounds
                };
                Err(self.fault(kind, write, name, addr, len as u32, w, lane, pc))
            }
        }
    }

    /// Fastest path: a full warp accessing 32 consecutive aligned 32-bit words inside
    /// the instruction's cached allocation.
    #[inline(always)]
    fn coalesced32(
        &self,
        regs: &[u64],
        a: R,
        off: i64,
        write: bool,
        pc: u32,
    ) -> Option<&'b [std::sync::atomic::AtomicU32; 32]> {
        let al = self.cached_alloc(pc)?;
        if write && al.read_only {
            return None;
        }
        let av = lanes(regs, a);
        let first = av[0].wrapping_add(off as u64);
        let start = first.wrapping_sub(al.base);
        if !consecutive_words(av) || first & 3 != 0 || start >= al.size || al.size - start < 128 {
            return None;
        }
        al.words32(start)
    }

    /// The allocation instruction `pc`'s last global access hit, for a fast path that
    /// reaches its memory directly: held reductions on it are applied first.
    #[inline(always)]
    fn cached_alloc(&self, pc: u32) -> Option<&'b Alloc> {
        let i = self.cache[pc as usize] as usize;
        let al = self.l.live.get(i)?;
        self.touch(i);
        Some(al)
    }

    /// Fast path of a shared access: every active lane in bounds and aligned.
    #[inline(always)]
    fn fast_shared(
        &self,
        regs: &[u64],
        a: R,
        off: i64,
        len: u64,
        mask: u32,
        offs: &mut Lanes,
    ) -> bool {
        let size = self.shared_len as u64;
        if size < len {
            return false;
        }
        let limit = size - len;
        let av = lanes(regs, a);
        for l in 0..32 {
            offs[l] = av[l].wrapping_add(off as u64);
        }
        !lanes_bad(offs, limit, len - 1, mask)
    }

    /// Fast path of a global access: every active lane inside the cached allocation,
    /// aligned, and (for stores) the allocation writable. Returns byte offsets.
    #[inline(always)]
    #[allow(clippy::too_many_arguments)]
    fn fast_global(
        &self,
        regs: &[u64],
        a: R,
        off: i64,
        len: u64,
        mask: u32,
        write: bool,
        pc: u32,
        offs: &mut Lanes,
    ) -> Option<&'b Alloc> {
        let al = self.cached_alloc(pc)?;
        if (write && al.read_only) || al.size < len {
            return None;
        }
        let limit = al.size - len;
        let base = al.base.wrapping_sub(off as u64);
        let av = lanes(regs, a);
        for l in 0..32 {
            offs[l] = av[l].wrapping_sub(base);
        }
        if lanes_bad(offs, limit, len - 1, mask) {
            return None;
        }
        Some(al)
    }

    fn load(&self, t: &Target, off: u64, size: u8, warp: &Warp) -> u64 {
        match *t {
            Target::Global(i, o) => {
                self.touch(i);
                self.l.live[i].load(o + off, size)
            }
            Target::Shared(o) => sh_read(&self.shared, o + off as usize, size),
            Target::Local(o) => read_le(&warp.local, o + off as usize, size),
            Target::Param(o) => read_le(self.l.params, o + off as usize, size),
        }
    }

    fn store(&mut self, t: &Target, off: u64, size: u8, v: u64, warp: &mut Warp) {
        match *t {
            Target::Global(i, o) => {
                self.touch(i);
                self.l.live[i].store(o + off, size, v)
            }
            Target::Shared(o) => sh_write(&mut self.shared, o + off as usize, size, v),
            Target::Local(o) => write_le(&mut warp.local, o + off as usize, size, v),
            // `resolve` refuses a write to the parameters (read-only).
            Target::Param(_) => {}
        }
    }

    /// `wmma.load`, `wmma.store`, `wmma.mma`: warp-wide, so every lane takes part (a
    /// partial warp is a divergence, as at a barrier). Loads and stores go element by
    /// element, each checked as `ld`/`st` would be, at each lane's own address.
    fn wmma(
        &mut self,
        op: &Wmma,
        w: &mut Warp,
        mask: u32,
        wid: u32,
        pc: u32,
        ls: usize,
    ) -> Result<(), SimError> {
        if mask != FULL {
            return Err(SimError::BarrierDivergence {
                at: self.location(wid, mask.trailing_zeros() as usize, pc),
                message: format!(
                    "wmma is warp-wide, but only lanes {mask:#010x} of warp {wid} execute it"
                ),
            });
        }
        let row = |w: &Warp, r: R, l: usize| w.regs[r as usize * 32 + l];
        match op {
            Wmma::Load {
                frag,
                col_major,
                sp,
                d,
                a,
                off,
                stride,
            }
            | Wmma::Store {
                frag,
                col_major,
                sp,
                s: d,
                a,
                off,
                stride,
            } => {
                let store = matches!(op, Wmma::Store { .. });
                let f = &frag.frag;
                let bits = f.elem.bits();
                let (bytes, emask) = (bits as u64 / 8, u64::MAX >> (64 - bits));
                let (rows, cols) = f.dims();
                let n = d.len();
                let mut vals = vec![0u64; 32 * n];
                for l in 0..32 {
                    let base = row(w, *a, l).wrapping_add(*off as u64);
                    let ld =
                        stride.map_or(f.default_ld(*col_major), |s| row(w, s, l) as u32 as u64);
                    let at = |p: &Place| Frag::offset(p.row as u32, p.col as u32, *col_major, ld);
                    // The whole matrix checked at once; element by element (each fault
                    // precise) when it is not inside one allocation.
                    let span = (Frag::offset(rows - 1, cols - 1, *col_major, ld) + 1)
                        .saturating_mul(bytes);
                    let whole = self
                        .resolve(*sp, base, span, bytes, store, wid, l, pc, ls)
                        .ok();
                    for p in frag.lane(l) {
                        let (t, o) = match &whole {
                            Some(t) => (*t, at(p) * bytes),
                            None => {
                                let addr = base.wrapping_add(at(p).wrapping_mul(bytes));
                                (
                                    self.resolve(*sp, addr, bytes, bytes, store, wid, l, pc, ls)?,
                                    0,
                                )
                            }
                        };
                        if store {
                            let v = (row(w, d[p.reg as usize], l) >> p.shift) & emask;
                            self.store(&t, o, bytes as u8, v, w);
                        } else {
                            vals[l * n + p.reg as usize] |=
                                self.load(&t, o, bytes as u8, w) << p.shift;
                        }
                    }
                }
                if !store {
                    for (k, &r) in d.iter().enumerate() {
                        for l in 0..32 {
                            w.regs[r as usize * 32 + l] = vals[l * n + k];
                        }
                    }
                }
            }
            Wmma::Mma {
                mma,
                places,
                d,
                a,
                b,
                c,
            } => {
                // The matrices on the stack: A and B have at most 512 elements, C and
                // D 256, in every shape.
                let (mut am, mut bm, mut cm, mut dm) =
                    ([0u64; 512], [0u64; 512], [0u64; 256], [0u64; 256]);
                let gather = |p: &Places, regs: &[R], m: &mut [u64]| {
                    p.gather_into(|l, k| row(w, regs[k], l), m)
                };
                gather(&places[0], a, &mut am);
                gather(&places[1], b, &mut bm);
                gather(&places[2], c, &mut cm);
                mma.compute_into(&am, &bm, &cm, &mut dm);
                let mut out = [0u64; 8];
                let out = &mut out[..d.len()];
                for l in 0..32 {
                    places[3].scatter(&dm, l, out);
                    for (k, &r) in d.iter().enumerate() {
                        w.regs[r as usize * 32 + l] = out[k];
                    }
                }
            }
        }
        Ok(())
    }

    /// One thread's call of CUDA's device runtime (see `cdp.rs`): its result.
    #[allow(clippy::too_many_arguments)]
    fn cdp(
        &mut self,
        call: Call,
        args: &[ArgSrc],
        w: &mut Warp,
        wid: u32,
        lane: usize,
        pc: u32,
        ls: usize,
    ) -> Result<u64, SimError> {
        let arg = |w: &Warp, k: usize, off: usize, len: u8| -> u64 {
            get_arg(w, args[k], lane, ls, off, len)
        };
        let l = self.l;
        let thread = (self.block_linear, wid * 32 + lane as u32);
        let fail = |e: u32| {
            lock(&l.last_error).insert(thread, e);
            e as u64
        };
        let heap = l.heap;
        Ok(match call {
            Call::ParamBuffer => {
                let func = arg(w, 0, 0, 8);
                let dims = |k| std::array::from_fn(|i| arg(w, k, 4 * i, 4) as u32);
                let cfg = LaunchConfig {
                    grid: dims(1),
                    block: dims(2),
                    shared_bytes: arg(w, 3, 0, 4) as u32,
                };
                let Some(kernel) = l.module.entries.get(&func) else {
                    // A null buffer: the launch that follows fails.
                    fail(cdp::INVALID_DEVICE_FUNCTION);
                    return Ok(0);
                };
                let size = l.module.kernels[kernel].prog.param_size;
                let p = heap.map_or(0, |h| h.alloc(size.max(1) as u64));
                if p == 0 {
                    fail(cdp::MEMORY_ALLOCATION);
                } else {
                    lock(&l.buffers).insert(p, (kernel.clone(), cfg));
                }
                p
            }
            Call::Launch => {
                let buf = arg(w, 0, 0, 8);
                let Some((kernel, cfg)) = lock(&l.buffers).remove(&buf) else {
                    return Ok(fail(cdp::INVALID_RESOURCE_HANDLE));
                };
                let prog = &l.module.kernels[&kernel].prog;
                let refused = if !cdp::config_ok(&cfg, prog.shared_static) {
                    Some(cdp::INVALID_CONFIGURATION)
                } else if l.depth >= cdp::MAX_DEPTH {
                    Some(cdp::LAUNCH_MAX_DEPTH_EXCEEDED)
                } else {
                    None
                };
                if let Some(e) = refused {
                    heap.map(|h| h.free(buf));
                    return Ok(fail(e));
                }
                lock(&l.children).push(Child::Launch {
                    kernel,
                    cfg,
                    params: buf,
                    size: prog.param_size,
                });
                0
            }
            Call::StreamCreate => {
                // Streams order nothing here beyond launch order (children run one
                // after another), so every stream is one handle.
                let t =
                    self.resolve(Sp::Generic, arg(w, 0, 0, 8), 8, 8, true, wid, lane, pc, ls)?;
                self.store(&t, 0, 8, 0x5354_5245_414d, w);
                0
            }
            Call::StreamDestroy => 0,
            Call::GetLastError => lock(&l.last_error).remove(&thread).unwrap_or(0) as u64,
            Call::PeekAtLastError => lock(&l.last_error).get(&thread).copied().unwrap_or(0) as u64,
            Call::ErrorString | Call::ErrorName => {
                let (name, text) = cdp::error_text(arg(w, 0, 0, 4) as u32);
                let s = if call == Call::ErrorName { name } else { text };
                let p = heap.map_or(0, |h| h.alloc(s.len() as u64 + 1));
                if p != 0 {
                    let t = self.resolve(
                        Sp::Global,
                        p,
                        s.len() as u64 + 1,
                        1,
                        true,
                        wid,
                        lane,
                        pc,
                        ls,
                    )?;
                    for (i, b) in s.bytes().chain([0]).enumerate() {
                        self.store(&t, i as u64, 1, b as u64, w);
                    }
                }
                p
            }
            Call::MemcpyAsync => {
                lock(&l.children).push(Child::Copy {
                    dst: arg(w, 0, 0, 8),
                    src: arg(w, 1, 0, 8),
                    bytes: arg(w, 2, 0, 8),
                });
                0
            }
            Call::Malloc => {
                let p = heap.map_or(0, |h| h.alloc(arg(w, 1, 0, 8)));
                if p == 0 {
                    return Ok(fail(cdp::MEMORY_ALLOCATION));
                }
                let t =
                    self.resolve(Sp::Generic, arg(w, 0, 0, 8), 8, 8, true, wid, lane, pc, ls)?;
                self.store(&t, 0, 8, p, w);
                0
            }
            Call::GraphSetConditional => {
                let t =
                    self.resolve(Sp::Generic, arg(w, 0, 0, 8), 4, 4, true, wid, lane, pc, ls)?;
                self.store(&t, 0, 4, arg(w, 1, 0, 4), w);
                0
            }
            Call::Free => {
                let p = arg(w, 0, 0, 8);
                if p != 0 && !heap.is_some_and(|h| h.free(p)) {
                    let at = self.location(wid, lane, pc);
                    log::warn!("device cudaFree: {at}: {p:#x} is not a block of the device heap");
                }
                0
            }
        })
    }

    fn tick(&mut self, pc: u32) -> Result<(), SimError> {
        self.tick_by(TICK, pc)
    }

    /// Counts `n` more warp instructions, then checks the budget, the time limit,
    /// cancellation and other workers' failure.
    fn tick_by(&mut self, n: u64, pc: u32) -> Result<(), SimError> {
        let total = self.l.executed.fetch_add(n, Relaxed) + n;
        if self.l.abort.load(Relaxed) {
            return Err(SimError::Sticky(Box::new(SimError::InvalidLaunch {
                kernel: String::new(),
                message: "aborted".into(),
            })));
        }
        let over_budget = self.l.budget != 0 && total > self.l.budget;
        let over_time = self.l.deadline.is_some_and(|d| Instant::now() > d);
        let cancelled = self.l.cancel.load(Relaxed);
        if over_budget || over_time || cancelled {
            return Err(SimError::Timeout {
                kernel: self.l.prog.name.clone(),
                warp_instructions: total,
                elapsed: self.l.start.elapsed(),
                reason: if cancelled {
                    "cancelled"
                } else if over_budget {
                    "instruction budget"
                } else {
                    "time limit"
                },
                line: self
                    .l
                    .prog
                    .insts
                    .get(pc as usize)
                    .map(|i| i.line)
                    .unwrap_or(0),
            });
        }
        Ok(())
    }

    /// Runs one instruction: from the lane-affine tags of its sources when it can (a full
    /// warp), else on the register rows (written from their tags first where stale).
    #[inline(always)]
    fn step(
        &mut self,
        inst: &Inst,
        w: &mut Warp,
        mask: u32,
        wid: u32,
        pc: u32,
        ls: usize,
    ) -> Result<(), SimError> {
        if mask == FULL {
            let done = match inst.aff {
                Aff::None => false,
                Aff::Mem { a } => w.tags[a as usize].aff.is_some() && self.mem_affine(inst, w, pc),
                _ => alu_affine(inst, w),
            };
            if done {
                return Ok(());
            }
        }
        if self.l.prog.touch[pc as usize].is_empty() {
            return self.exec(&inst.op, w, mask, wid, pc, ls);
        }
        self.step_touched(inst, w, mask, wid, pc, ls)
    }

    /// [`Exec::step`] on the rows of an instruction touching registers that may have a
    /// tag: stale rows are written first, and the registers it writes lose their tags.
    #[inline(always)]
    fn step_touched(
        &mut self,
        inst: &Inst,
        w: &mut Warp,
        mask: u32,
        wid: u32,
        pc: u32,
        ls: usize,
    ) -> Result<(), SimError> {
        let touch = &self.l.prog.touch[pc as usize];
        for &(r, _) in touch.iter() {
            w.materialize(r);
        }
        let res = self.exec(&inst.op, w, mask, wid, pc, ls);
        for &(r, def) in touch.iter() {
            if def {
                w.tags[r as usize] = Tag::default();
            }
        }
        res
    }

    /// A full warp's `ld`/`st` whose address register has a tag: 32 consecutive words,
    /// or one address for every lane (loads), inside the instruction's cached allocation
    /// or the block's shared memory, aligned. False (nothing done) otherwise: the
    /// instruction then runs lane by lane, checked (and faulting) as ever.
    #[inline(always)]
    fn mem_affine(&mut self, inst: &Inst, w: &mut Warp, pc: u32) -> bool {
        match inst.op {
            Op::Ld {
                sp,
                size,
                sext: false,
                n: 1,
                d,
                a,
                off,
                dmask,
            } => {
                let Some((b, s)) = w.tags[a as usize].aff else {
                    return false;
                };
                let first = b.wrapping_add(off as u64);
                let len = size as u64;
                let d0 = d[0] as usize * 32;
                match (sp, s) {
                    (Sp::Global | Sp::Generic, _) => {
                        let Some(al) = self.cached_alloc(pc) else {
                            return false;
                        };
                        let start = first.wrapping_sub(al.base);
                        if first & (len - 1) != 0 || start >= al.size {
                            return false;
                        }
                        if s == 4 && size == 4 {
                            let Some(ws) = al.words32(start) else {
                                return false;
                            };
                            if al.size - start < 128 {
                                return false;
                            }
                            let row = &mut w.regs[d0..d0 + 32];
                            for l in 0..32 {
                                row[l] = ws[l].load(Relaxed) as u64 & dmask;
                            }
                        } else if s == 0 && al.size - start >= len {
                            let v = al.load(start, size) & dmask;
                            w.regs[d0..d0 + 32].fill(v);
                        } else {
                            return false;
                        }
                    }
                    (Sp::Shared, 0 | 4) => {
                        let o = if first.wrapping_sub(SHARED_WINDOW) < WINDOW_SIZE {
                            first - SHARED_WINDOW
                        } else {
                            first
                        };
                        let span = if s == 0 { len } else { 128 };
                        if o & (len - 1) != 0
                            || o.checked_add(span)
                                .is_none_or(|e| e > self.shared_len as u64)
                        {
                            return false;
                        }
                        if s == 0 {
                            let v = sh_read(&self.shared, o as usize, size) & dmask;
                            w.regs[d0..d0 + 32].fill(v);
                        } else if size == 4 {
                            let w0 = (o >> 2) as usize;
                            let ws = &self.shared[w0..w0 + 32];
                            let row = &mut w.regs[d0..d0 + 32];
                            for l in 0..32 {
                                row[l] = ws[l] as u64 & dmask;
                            }
                        } else {
                            return false;
                        }
                    }
                    _ => return false,
                }
                w.tags[d[0] as usize] = Tag::default();
                true
            }
            Op::St {
                sp,
                size: 4,
                n: 1,
                s,
                a,
                off,
            } => {
                let Some((b, 4)) = w.tags[a as usize].aff else {
                    return false;
                };
                let first = b.wrapping_add(off as u64);
                match sp {
                    Sp::Global | Sp::Generic => {
                        let Some(al) = self.cached_alloc(pc) else {
                            return false;
                        };
                        let start = first.wrapping_sub(al.base);
                        if al.read_only
                            || first & 3 != 0
                            || start >= al.size
                            || al.size - start < 128
                        {
                            return false;
                        }
                        let Some(ws) = al.words32(start) else {
                            return false;
                        };
                        w.materialize(s[0]);
                        let row = lanes(&w.regs, s[0]);
                        for l in 0..32 {
                            ws[l].store(row[l] as u32, Relaxed);
                        }
                        true
                    }
                    Sp::Shared => {
                        let o = if first.wrapping_sub(SHARED_WINDOW) < WINDOW_SIZE {
                            first - SHARED_WINDOW
                        } else {
                            first
                        };
                        if o & 3 != 0
                            || o.checked_add(128)
                                .is_none_or(|e| e > self.shared_len as u64)
                        {
                            return false;
                        }
                        w.materialize(s[0]);
                        let row = lanes(&w.regs, s[0]);
                        let w0 = (o >> 2) as usize;
                        let ws = &mut self.shared[w0..w0 + 32];
                        for l in 0..32 {
                            ws[l] = row[l] as u32;
                        }
                        true
                    }
                    _ => false,
                }
            }
            _ => false,
        }
    }

    fn run_warp(&mut self, w: &mut Warp, wid: u32) -> Result<Stop, SimError> {
        let prog = self.l.prog;
        let insts = &prog.insts[..];
        let ls = prog.local_size as usize;
        loop {
            let Some(top) = w.stack.last_mut() else {
                return Ok(Stop::Done);
            };
            if top.mask == 0 || top.pc == top.rpc {
                if w.stack.pop().is_some_and(|f| f.call) {
                    // Every lane of the call exited in it.
                    self.end_call(w, 0, ls);
                }
                continue;
            }
            // Straight-line run of the top frame: `pc` stays local until an instruction
            // that changes control flow, the frame's reconvergence point or the end.
            let (fmask, rpc) = (top.mask, top.rpc);
            let mut pc = top.pc;
            while let Some(inst) = insts.get(pc as usize) {
                let mut mask = fmask;
                if let Some((p, neg)) = inst.guard {
                    let pm = w.preds[p as usize];
                    mask &= if neg { !pm } else { pm };
                }
                match inst.op {
                    // A branch every lane of the frame takes, or none: the run goes on
                    // (a divergent one is the frame's business, below).
                    Op::Bra { target } if mask == fmask || mask == 0 => {
                        self.count += 1;
                        if self.count.is_multiple_of(TICK) {
                            self.tick(pc)?;
                        }
                        pc = if mask == 0 { pc + 1 } else { target };
                        if pc == rpc {
                            break;
                        }
                        continue;
                    }
                    Op::Bra { .. }
                    | Op::Exit
                    | Op::Bar { .. }
                    | Op::MbarWait { .. }
                    | Op::Call { .. }
                    | Op::Return { .. } => break,
                    _ => {}
                }
                self.count += 1;
                if self.count.is_multiple_of(TICK) {
                    self.tick(pc)?;
                }
                if mask != 0 {
                    self.step(inst, w, mask, wid, pc, ls)?;
                }
                pc += 1;
                if pc == rpc {
                    break;
                }
            }
            let top = w.stack.last_mut().expect("frame");
            top.pc = pc;
            if pc == rpc {
                continue;
            }
            let Some(inst) = insts.get(pc as usize) else {
                // Reconvergence at the end: those lanes are finished.
                let m = top.mask;
                w.live &= !m;
                for f in w.stack.iter_mut() {
                    f.mask &= !m;
                }
                continue;
            };
            let mut mask = top.mask;
            if let Some((p, neg)) = inst.guard {
                let pm = w.preds[p as usize];
                mask &= if neg { !pm } else { pm };
            }
            self.count += 1;
            if self.count.is_multiple_of(TICK) {
                self.tick(pc)?;
            }
            match &inst.op {
                Op::Bra { target } => {
                    let top = w.stack.last_mut().expect("frame");
                    if mask == top.mask {
                        top.pc = *target;
                    } else if mask == 0 {
                        top.pc = pc + 1;
                    } else {
                        let ip = prog.ipdom[pc as usize];
                        let nt = top.mask & !mask;
                        top.pc = ip;
                        w.stack.push(Frame {
                            pc: pc + 1,
                            rpc: ip,
                            mask: nt,
                            call: false,
                        });
                        w.stack.push(Frame {
                            pc: *target,
                            rpc: ip,
                            mask,
                            call: false,
                        });
                    }
                    continue;
                }
                Op::Call { func, args, .. } => {
                    w.stack.last_mut().expect("frame").pc = pc + 1;
                    if mask != 0 {
                        let f = &prog.funcs[*func as usize];
                        self.call(w, wid, pc, mask, *func, args, ls)?;
                        w.stack.push(Frame {
                            pc: f.entry,
                            rpc: f.ret + 1,
                            mask,
                            call: true,
                        });
                    }
                    continue;
                }
                Op::Return { .. } => {
                    let top = w.stack.last_mut().expect("frame");
                    top.pc = pc + 1;
                    if !std::mem::take(&mut top.call) {
                        // Lanes that went apart on a path leaving by `exit` reconverge
                        // only at the kernel's end, so they return one part at a time.
                        let lane = mask.trailing_zeros() as usize;
                        return Err(SimError::Unsupported {
                            module: self.l.prog.name.clone(),
                            line: insts[pc as usize].line,
                            message: format!(
                                "{}: a return by some lanes of a call whose other lanes \
                                 may leave the function by `exit` (thread {:?} of block {:?})",
                                prog.funcs
                                    .iter()
                                    .find(|f| f.ret == pc)
                                    .map_or("an out-of-line function", |f| f.name.as_str()),
                                self.location(wid, lane, pc).thread,
                                self.block
                            ),
                        });
                    }
                    self.end_call(w, mask, ls);
                    continue;
                }
                Op::Exit => {
                    w.live &= !mask;
                    for f in w.stack.iter_mut() {
                        f.mask &= !mask;
                    }
                    if let Some(top) = w.stack.last_mut() {
                        if top.mask != 0 {
                            top.pc = pc + 1;
                        }
                    }
                    continue;
                }
                Op::Bar { red } => {
                    let top = w.stack.last_mut().expect("frame");
                    top.pc = pc + 1;
                    if mask == 0 {
                        continue;
                    }
                    if mask != w.live {
                        let missing = w.live & !mask;
                        let other = w
                            .stack
                            .iter()
                            .rev()
                            .find(|f| f.mask & missing != 0)
                            .and_then(|f| insts.get(f.pc as usize))
                            .map(|i| i.line);
                        let lane = mask.trailing_zeros() as usize;
                        let ml = missing.trailing_zeros() as usize;
                        let there = self.location(wid, ml, 0);
                        return Err(SimError::BarrierDivergence {
                            at: self.location(wid, lane, pc),
                            message: format!(
                                "lanes {:#010x} of warp {wid} wait at bar.sync while live lanes {:#010x} (thread ({},{},{})) are elsewhere{}",
                                mask,
                                missing,
                                there.thread[0],
                                there.thread[1],
                                there.thread[2],
                                other.map(|l| format!(", at PTX line {l}")).unwrap_or_default()
                            ),
                        });
                    }
                    w.bar_pc = pc;
                    if let Some(r) = red {
                        let ps = (w.preds[r.src as usize] ^ if r.neg { FULL } else { 0 }) & mask;
                        w.red = match r.mode {
                            0 => ps.count_ones() as u64,
                            1 => (ps == mask) as u64,
                            _ => (ps != 0) as u64,
                        };
                    }
                    return Ok(Stop::Barrier);
                }
                Op::MbarWait { .. } => {
                    if mask != 0 {
                        self.step(inst, w, mask, wid, pc, ls)?;
                    }
                    w.stack.last_mut().expect("frame").pc = pc + 1;
                    if std::mem::take(&mut self.yield_now) {
                        return Ok(Stop::Yield);
                    }
                }
                _ => {
                    if mask != 0 {
                        self.step(inst, w, mask, wid, pc, ls)?;
                    }
                    w.stack.last_mut().expect("frame").pc = pc + 1;
                }
            }
        }
    }

    #[inline(always)]
    fn exec(
        &mut self,
        op: &Op,
        w: &mut Warp,
        mask: u32,
        wid: u32,
        pc: u32,
        ls: usize,
    ) -> Result<(), SimError> {
        match op {
            Op::Bin(f, d, a, b) => f(&mut w.regs, *d as usize, *a as usize, *b as usize, mask),
            Op::Un(f, d, a) => f(&mut w.regs, *d as usize, *a as usize, mask),
            Op::Ter(f, d, a, b, c) => f(
                &mut w.regs,
                *d as usize,
                *a as usize,
                *b as usize,
                *c as usize,
                mask,
            ),
            Op::Mov(d, a, m) => {
                let (d, a) = (*d as usize * 32, *a as usize * 32);
                if d != a {
                    let (dst, src) = if d < a {
                        let (lo, hi) = w.regs.split_at_mut(a);
                        (&mut lo[d..d + 32], &hi[..32])
                    } else {
                        let (lo, hi) = w.regs.split_at_mut(d);
                        (&mut hi[..32], &lo[a..a + 32])
                    };
                    if mask == FULL {
                        for l in 0..32 {
                            dst[l] = src[l] & m;
                        }
                    } else {
                        for l in 0..32 {
                            dst[l] = if (mask >> l) & 1 == 1 {
                                src[l] & m
                            } else {
                                dst[l]
                            };
                        }
                    }
                } else {
                    for l in 0..32 {
                        let v = w.regs[d + l];
                        w.regs[d + l] = if (mask >> l) & 1 == 1 { v & m } else { v };
                    }
                }
            }
            Op::Ld {
                sp,
                size,
                sext: sx,
                n,
                d,
                a,
                off,
                dmask,
            } => {
                // The commonest case first (before any lane array is set up).
                if matches!(sp, Sp::Global | Sp::Generic)
                    && *size == 4
                    && *n == 1
                    && mask == FULL
                    && !*sx
                {
                    if let Some(ws) = self.coalesced32(&w.regs, *a, *off, false, pc) {
                        let row = <&mut Lanes>::try_from(
                            &mut w.regs[d[0] as usize * 32..d[0] as usize * 32 + 32],
                        )
                        .expect("register row");
                        for l in 0..32 {
                            row[l] = ws[l].load(Relaxed) as u64 & dmask;
                        }
                        return Ok(());
                    }
                }
                let mut out: Lanes = [0; 32];
                let total = *size as u64 * *n as u64;
                if *sp == Sp::Shared && self.fast_shared(&w.regs, *a, *off, total, mask, &mut out) {
                    let offs = &out;
                    if *size == 4 && *n == 1 && mask == FULL {
                        // The common case: a full warp loading 32-bit words; consecutive
                        // (one slice) or all the same word (a broadcast) go faster.
                        let row = <&mut Lanes>::try_from(
                            &mut w.regs[d[0] as usize * 32..d[0] as usize * 32 + 32],
                        )
                        .expect("register row");
                        let sh = &self.shared[..];
                        // Differences accumulated with or (branch-free, vectorises).
                        let (mut step, mut diff) = (0u64, 0u64);
                        for (l, &o) in offs.iter().enumerate() {
                            step |= o ^ offs[0].wrapping_add(4 * l as u64);
                            diff |= o ^ offs[0];
                        }
                        let (consecutive, same) = (step == 0, diff == 0);
                        let w0 = (offs[0] >> 2) as usize;
                        if same {
                            row.fill(sh[w0] as u64 & dmask);
                        } else if let Some(ws) = sh.get(w0..w0 + 32).filter(|_| consecutive) {
                            for l in 0..32 {
                                row[l] = ws[l] as u64 & dmask;
                            }
                        } else {
                            // The same per half warp (a 16-wide block: a row of a 16x16
                            // tile each): one word, or 16 consecutive words, per half.
                            let (mut hstep, mut hdiff) = (0u64, 0u64);
                            for (l, &o) in offs.iter().enumerate() {
                                let h = offs[l & 16];
                                hstep |= o ^ h.wrapping_add(4 * (l & 15) as u64);
                                hdiff |= o ^ h;
                            }
                            let w1 = (offs[16] >> 2) as usize;
                            if hdiff == 0 {
                                row[..16].fill(sh[w0] as u64 & dmask);
                                row[16..].fill(sh[w1] as u64 & dmask);
                            } else if let (Some(lo), Some(hi), 0) =
                                (sh.get(w0..w0 + 16), sh.get(w1..w1 + 16), hstep)
                            {
                                for l in 0..16 {
                                    row[l] = lo[l] as u64 & dmask;
                                    row[16 + l] = hi[l] as u64 & dmask;
                                }
                            } else {
                                for l in 0..32 {
                                    row[l] = sh[(offs[l] >> 2) as usize] as u64 & dmask;
                                }
                            }
                        }
                        if *sx {
                            row.iter_mut().for_each(|v| *v = sext(*v, 4) & dmask);
                        }
                        return Ok(());
                    }
                    for k in 0..*n as usize {
                        let ko = k * *size as usize;
                        let row = d[k] as usize * 32;
                        each_lane!(mask, l, {
                            let mut v = sh_read(&self.shared, offs[l] as usize + ko, *size);
                            if *sx {
                                v = sext(v, *size);
                            }
                            w.regs[row + l] = v & dmask;
                        });
                    }
                    return Ok(());
                }
                if matches!(sp, Sp::Global | Sp::Generic) {
                    if let Some(al) =
                        self.fast_global(&w.regs, *a, *off, total, mask, false, pc, &mut out)
                    {
                        let offs = &out;
                        if *size == 4 && *n == 1 && mask == FULL && !*sx {
                            let row = &mut w.regs[d[0] as usize * 32..d[0] as usize * 32 + 32];
                            // Coalesced: 32 consecutive words.
                            if let Some(ws) = coalesced(offs).and_then(|o| al.words32(o)) {
                                for l in 0..32 {
                                    row[l] = ws[l].load(Relaxed) as u64 & dmask;
                                }
                                return Ok(());
                            }
                            for l in 0..32 {
                                row[l] = al.load32(offs[l]) as u64 & dmask;
                            }
                            return Ok(());
                        }
                        for k in 0..*n as usize {
                            let ko = (k * *size as usize) as u64;
                            let row = d[k] as usize * 32;
                            each_lane!(mask, l, {
                                let mut v = al.load(offs[l] + ko, *size);
                                if *sx {
                                    v = sext(v, *size);
                                }
                                w.regs[row + l] = v & dmask;
                            });
                        }
                        return Ok(());
                    }
                }
                each_lane!(mask, l, {
                    let addr = w.regs[*a as usize * 32 + l].wrapping_add(*off as u64);
                    let t = self.resolve(*sp, addr, total, total, false, wid, l, pc, ls)?;
                    for k in 0..*n as usize {
                        let mut v = self.load(&t, (k * *size as usize) as u64, *size, w);
                        if *sx {
                            v = sext(v, *size);
                        }
                        w.regs[d[k] as usize * 32 + l] = v & dmask;
                    }
                });
            }
            Op::St {
                sp,
                size,
                n,
                s,
                a,
                off,
            } => {
                if matches!(sp, Sp::Global | Sp::Generic) && *size == 4 && *n == 1 && mask == FULL {
                    if let Some(ws) = self.coalesced32(&w.regs, *a, *off, true, pc) {
                        let row = lanes(&w.regs, s[0]);
                        for l in 0..32 {
                            ws[l].store(row[l] as u32, Relaxed);
                        }
                        return Ok(());
                    }
                }
                let mut out: Lanes = [0; 32];
                let total = *size as u64 * *n as u64;
                if *sp == Sp::Shared && self.fast_shared(&w.regs, *a, *off, total, mask, &mut out) {
                    let offs = &out;
                    if *size == 4 && *n == 1 {
                        // 32-bit words: one slice for a full warp's consecutive words.
                        let row = lanes(&w.regs, s[0]);
                        let sh = &mut self.shared[..];
                        let w0 = (offs[0] >> 2) as usize;
                        if mask == FULL && consecutive_words(offs) {
                            if let Some(ws) = sh.get_mut(w0..w0 + 32) {
                                for l in 0..32 {
                                    ws[l] = row[l] as u32;
                                }
                                return Ok(());
                            }
                        }
                        each_lane!(mask, l, {
                            sh[(offs[l] >> 2) as usize] = row[l] as u32;
                        });
                        return Ok(());
                    }
                    for k in 0..*n as usize {
                        let ko = k * *size as usize;
                        let row = s[k] as usize * 32;
                        each_lane!(mask, l, {
                            sh_write(
                                &mut self.shared,
                                offs[l] as usize + ko,
                                *size,
                                w.regs[row + l],
                            );
                        });
                    }
                    return Ok(());
                }
                if matches!(sp, Sp::Global | Sp::Generic) {
                    if let Some(al) =
                        self.fast_global(&w.regs, *a, *off, total, mask, true, pc, &mut out)
                    {
                        let offs = &out;
                        if *size == 4 && *n == 1 && mask == FULL {
                            let row = &w.regs[s[0] as usize * 32..s[0] as usize * 32 + 32];
                            if let Some(ws) = coalesced(offs).and_then(|o| al.words32(o)) {
                                for l in 0..32 {
                                    ws[l].store(row[l] as u32, Relaxed);
                                }
                                return Ok(());
                            }
                            for l in 0..32 {
                                al.store32(offs[l], row[l] as u32);
                            }
                            return Ok(());
                        }
                        for k in 0..*n as usize {
                            let ko = (k * *size as usize) as u64;
                            let row = s[k] as usize * 32;
                            each_lane!(mask, l, {
                                al.store(offs[l] + ko, *size, w.regs[row + l]);
                            });
                        }
                        return Ok(());
                    }
                }
                each_lane!(mask, l, {
                    let addr = w.regs[*a as usize * 32 + l].wrapping_add(*off as u64);
                    let t = self.resolve(*sp, addr, total, total, true, wid, l, pc, ls)?;
                    for k in 0..*n as usize {
                        let v = w.regs[s[k] as usize * 32 + l];
                        let o = (k * *size as usize) as u64;
                        self.store(&t, o, *size, v, w);
                    }
                });
            }
            Op::LdParam {
                d,
                n,
                size,
                sext: sx,
                off,
                dmask,
            } => {
                for k in 0..*n as usize {
                    let o = *off as usize + k * *size as usize;
                    let mut v = read_le(self.l.params, o, *size);
                    if *sx {
                        v = sext(v, *size);
                    }
                    let v = v & dmask;
                    let row = &mut w.regs[d[k] as usize * 32..d[k] as usize * 32 + 32];
                    if mask == FULL {
                        row.fill(v);
                    } else {
                        for l in 0..32 {
                            row[l] = if (mask >> l) & 1 == 1 { v } else { row[l] };
                        }
                    }
                }
            }
            Op::Setp {
                f,
                d,
                dn,
                a,
                b,
                comb,
            } => {
                let r = f(&w.regs, *a as usize, *b as usize);
                setp_write(w, *d, *dn, *comb, mask, r);
            }
            Op::Selp { d, a, b, p, neg } => {
                let mut out: Lanes = [0; 32];
                let pm = w.preds[*p as usize] ^ if *neg { FULL } else { 0 };
                let (av, bv) = (lanes(&w.regs, *a), lanes(&w.regs, *b));
                for l in 0..32 {
                    out[l] = if pm >> l & 1 == 1 { av[l] } else { bv[l] };
                }
                write(&mut w.regs, *d, &out, mask);
            }
            Op::PredLogic {
                op,
                d,
                a,
                an,
                b,
                bn,
            } => {
                let av = w.preds[*a as usize] ^ if *an { FULL } else { 0 };
                let bv = w.preds[*b as usize] ^ if *bn { FULL } else { 0 };
                let r = match op {
                    None => av,
                    Some(BoolOp::And) => av & bv,
                    Some(BoolOp::Or) => av | bv,
                    Some(BoolOp::Xor) => av ^ bv,
                };
                let pd = &mut w.preds[*d as usize];
                *pd = (*pd & !mask) | (r & mask);
            }
            Op::PredConst { d, v } => {
                let pd = &mut w.preds[*d as usize];
                *pd = (*pd & !mask) | if *v { mask } else { 0 };
            }
            Op::Bfi {
                w: width,
                d,
                a,
                b,
                c,
                e,
            } => {
                let mut out: Lanes = [0; 32];
                let (av, bv, cv, ev) = (
                    lanes(&w.regs, *a),
                    lanes(&w.regs, *b),
                    lanes(&w.regs, *c),
                    lanes(&w.regs, *e),
                );
                for l in 0..32 {
                    out[l] = if *width == 64 {
                        ops::bfi::<u64>(bv[l], av[l], cv[l], ev[l])
                    } else {
                        ops::bfi::<u32>(bv[l], av[l], cv[l], ev[l])
                    };
                }
                write(&mut w.regs, *d, &out, mask);
            }
            Op::Lop3 { d, a, b, c, lut } => {
                let mut out: Lanes = [0; 32];
                let (av, bv, cv) = (lanes(&w.regs, *a), lanes(&w.regs, *b), lanes(&w.regs, *c));
                for l in 0..32 {
                    out[l] = ops::lop3(av[l], bv[l], cv[l], *lut);
                }
                write(&mut w.regs, *d, &out, mask);
            }
            Op::Carry {
                d,
                a,
                b,
                sub,
                cin,
                cout,
                w64,
            } => {
                let mut out: Lanes = [0; 32];
                let (av, bv) = (lanes(&w.regs, *a), lanes(&w.regs, *b));
                let cf = w.carry;
                let mut new_cf = 0u32;
                for l in 0..32 {
                    let c = if *cin { ((cf >> l) & 1) as u128 } else { 0 };
                    let m: u128 = if *w64 {
                        u64::MAX as u128
                    } else {
                        u32::MAX as u128
                    };
                    let (x, y) = (av[l] as u128 & m, bv[l] as u128 & m);
                    let (r, carry) = if *sub {
                        let r = x.wrapping_sub(y).wrapping_sub(c);
                        (r & m, x < y + c)
                    } else {
                        let r = x + y + c;
                        (r & m, r > m)
                    };
                    out[l] = r as u64;
                    new_cf |= (carry as u32) << l;
                }
                write(&mut w.regs, *d, &out, mask);
                if *cout {
                    w.carry = (w.carry & !mask) | (new_cf & mask);
                }
            }
            Op::MadCarry {
                d,
                a,
                b,
                c,
                hi,
                signed,
                cin,
                cout,
                w64,
            } => {
                let mut out: Lanes = [0; 32];
                let (av, bv, cv) = (lanes(&w.regs, *a), lanes(&w.regs, *b), lanes(&w.regs, *c));
                let mut new_cf = 0u32;
                for l in 0..32 {
                    let cf = if *cin { (w.carry >> l) & 1 } else { 0 };
                    let (r, carry) = ops::mad_carry(av[l], bv[l], cv[l], cf, *hi, *signed, *w64);
                    out[l] = r;
                    new_cf |= (carry as u32) << l;
                }
                write(&mut w.regs, *d, &out, mask);
                if *cout {
                    w.carry = (w.carry & !mask) | (new_cf & mask);
                }
            }
            Op::Testp { d, a, class, f64 } => {
                let av = lanes(&w.regs, *a);
                let mut r = 0u32;
                for l in 0..32 {
                    let v = if *f64 {
                        f64::from_bits(av[l])
                    } else {
                        f32::from_bits(av[l] as u32) as f64
                    };
                    let sub = if *f64 {
                        f64::from_bits(av[l]).is_subnormal()
                    } else {
                        f32::from_bits(av[l] as u32).is_subnormal()
                    };
                    let t = match class {
                        0 => v.is_finite(),
                        1 => v.is_infinite(),
                        2 => !v.is_nan(),
                        3 => v.is_nan(),
                        // The GPU counts zeros as normal (fixtures/isa-goldens).
                        4 => v.is_finite() && !sub,
                        _ => sub,
                    };
                    r |= (t as u32) << l;
                }
                let pd = &mut w.preds[*d as usize];
                *pd = (*pd & !mask) | (r & mask);
            }
            Op::Prmt(d, a, b, c) => {
                let mut out: Lanes = [0; 32];
                let (av, bv, cv) = (lanes(&w.regs, *a), lanes(&w.regs, *b), lanes(&w.regs, *c));
                for l in 0..32 {
                    out[l] = ops::prmt(av[l], bv[l], cv[l]);
                }
                write(&mut w.regs, *d, &out, mask);
            }
            Op::Pack { d, parts, bits } => {
                let mut out: Lanes = [0; 32];
                let m = if *bits >= 64 {
                    u64::MAX
                } else {
                    (1u64 << bits) - 1
                };
                for (i, p) in parts.iter().enumerate() {
                    let pv = lanes(&w.regs, *p);
                    for l in 0..32 {
                        out[l] |= (pv[l] & m) << (i as u32 * bits);
                    }
                }
                write(&mut w.regs, *d, &out, mask);
            }
            Op::Unpack { s, parts, bits } => {
                let mut out: Lanes = [0; 32];
                let m = if *bits >= 64 {
                    u64::MAX
                } else {
                    (1u64 << bits) - 1
                };
                let sv = *lanes(&w.regs, *s);
                for (i, p) in parts.iter().enumerate() {
                    for l in 0..32 {
                        out[l] = (sv[l] >> (i as u32 * bits)) & m;
                    }
                    write(&mut w.regs, *p, &out, mask);
                }
            }
            Op::Cvt { d, a, .. } => {
                let mut out: Lanes = [0; 32];
                let av = lanes(&w.regs, *a);
                each_lane!(mask, l, {
                    out[l] = op.cvt_one(av[l]).unwrap_or(0);
                });
                write(&mut w.regs, *d, &out, mask);
            }
            Op::Atom {
                sp,
                op,
                ty,
                d,
                a,
                off,
                b,
                c,
            } => {
                let size = atom_size(*ty);
                let hold = d.is_none() && self.l.prog.combine_reds;
                each_lane!(mask, l, {
                    let addr = w.regs[*a as usize * 32 + l].wrapping_add(*off as u64);
                    let bv = w.regs[*b as usize * 32 + l];
                    let cv = w.regs[*c as usize * 32 + l];
                    let t = self.resolve(*sp, addr, size, size, true, wid, l, pc, ls)?;
                    if let (true, Target::Global(i, o)) = (hold, t) {
                        self.hold_red(i, o, *op, *ty, bv);
                        continue;
                    }
                    let old = self.atom_at(t, *op, *ty, size, bv, cv, &mut w.local);
                    if let Some(d) = d {
                        w.regs[*d as usize * 32 + l] = old;
                    }
                });
            }
            Op::Shfl {
                mode,
                d,
                p,
                a,
                b,
                c,
            } => {
                let mut out: Lanes = [0; 32];
                // Every source is read before any destination is written.
                let av = *lanes(&w.regs, *a);
                let (bv, cv) = (lanes(&w.regs, *b), lanes(&w.regs, *c));
                let mut pbits = 0u32;
                for l in 0..32usize {
                    let lane = l as i64;
                    let bval = (bv[l] & 0xffff_ffff) as i64;
                    let cval = (cv[l] & 0x1f) as i64;
                    let segmask = ((cv[l] >> 8) & 0x1f) as i64;
                    let max_lane = (lane & segmask) | (cval & !segmask);
                    let min_lane = lane & segmask;
                    let (j, ok) = match mode {
                        ShflMode::Up => {
                            let j = lane - bval;
                            (j, j >= max_lane)
                        }
                        ShflMode::Down => {
                            let j = lane + bval;
                            (j, j <= max_lane)
                        }
                        ShflMode::Bfly => {
                            let j = lane ^ bval;
                            (j, j <= max_lane)
                        }
                        ShflMode::Idx => {
                            let j = min_lane | (bval & !segmask);
                            (j, j <= max_lane)
                        }
                    };
                    let j = if ok && (0..32).contains(&j) {
                        j as usize
                    } else {
                        l
                    };
                    out[l] = av[j];
                    pbits |= (ok as u32) << l;
                }
                write(&mut w.regs, *d, &out, mask);
                if let Some(p) = p {
                    let pd = &mut w.preds[*p as usize];
                    *pd = (*pd & !mask) | (pbits & mask);
                }
            }
            Op::Vote {
                mode,
                d,
                src,
                neg,
                member,
            } => {
                let ps = (w.preds[*src as usize] ^ if *neg { FULL } else { 0 }) & mask;
                // Each lane votes with the active lanes its membermask names (lanes of
                // different labelled groups vote apart in one instruction).
                let groups: [u32; 32] = match member {
                    Some(m) => {
                        let mv = lanes(&w.regs, *m);
                        std::array::from_fn(|l| mask & mv[l] as u32)
                    }
                    None => [mask; 32],
                };
                match mode {
                    VoteMode::Ballot => {
                        let out: Lanes = std::array::from_fn(|l| (ps & groups[l]) as u64);
                        write(&mut w.regs, *d, &out, mask);
                    }
                    m => {
                        let mut yes = 0u32;
                        each_lane!(mask, l, {
                            let (g, p) = (groups[l], ps & groups[l]);
                            let r = match m {
                                VoteMode::All => p == g,
                                VoteMode::Any => p != 0,
                                _ => p == 0 || p == g,
                            };
                            if r {
                                yes |= 1 << l;
                            }
                        });
                        let pd = &mut w.preds[*d as usize];
                        *pd = (*pd & !mask) | yes;
                    }
                }
            }
            Op::Match {
                d,
                p,
                a,
                member,
                all,
                w64,
            } => {
                let av = lanes(&w.regs, *a);
                let mv = lanes(&w.regs, *member);
                let width = if *w64 { u64::MAX } else { u32::MAX as u64 };
                let mut out: Lanes = [0; 32];
                let mut all_same = 0u32;
                // Each lane matches among the active lanes its membermask names.
                each_lane!(mask, l, {
                    // A lane outside its own membermask is undefined in PTX; here it
                    // matches nothing.
                    let set = mask & mv[l] as u32;
                    let set = if set & (1 << l) == 0 { 0 } else { set };
                    let mut peers = 0u32;
                    each_lane!(set, k, {
                        if av[k] & width == av[l] & width {
                            peers |= 1 << k;
                        }
                    });
                    if *all {
                        let same = set != 0 && peers == set;
                        out[l] = if same { set as u64 } else { 0 };
                        if same {
                            all_same |= 1 << l;
                        }
                    } else {
                        out[l] = peers as u64;
                    }
                });
                if *all {
                    if let Some(p) = p {
                        let pd = &mut w.preds[*p as usize];
                        *pd = (*pd & !mask) | all_same;
                    }
                }
                write(&mut w.regs, *d, &out, mask);
            }
            Op::Tex {
                d,
                obj,
                coords,
                layer,
                int_coords,
                ret,
            } => {
                let mut cached: Option<(u64, vmgpu_cuda_api::texture::Descriptor)> = None;
                each_lane!(mask, l, {
                    let handle = w.regs[*obj as usize * 32 + l];
                    let desc = match cached {
                        Some((h, d)) if h == handle => d,
                        _ => {
                            let d = self.descriptor(handle, false, w, wid, l, pc, ls)?;
                            cached = Some((handle, d));
                            d
                        }
                    };
                    let c = coords.map(|r| w.regs[r as usize * 32 + l]);
                    let c = if *int_coords {
                        crate::texture::Coords::Int(c.map(|v| v as u32 as i32))
                    } else {
                        crate::texture::Coords::Float(c.map(|v| f32::from_bits(v as u32)))
                    };
                    let lay = layer.map_or(0, |r| w.regs[r as usize * 32 + l] as u32 as i32);
                    let v = {
                        let mut fetch = |addr: u64, n: usize| -> Result<[u8; 16], SimError> {
                            let t =
                                self.resolve(Sp::Global, addr, n as u64, 1, false, wid, l, pc, ls)?;
                            let mut b = [0u8; 16];
                            for (k, x) in b.iter_mut().enumerate().take(n) {
                                *x = self.load(&t, k as u64, 1, w) as u8;
                            }
                            Ok(b)
                        };
                        crate::texture::sample(&desc, c, lay, *ret, &mut fetch)?
                    };
                    for k in 0..4 {
                        w.regs[d[k] as usize * 32 + l] = u64::from(v[k]);
                    }
                });
            }
            Op::Surf {
                store,
                v,
                n,
                size,
                obj,
                coords,
                ncoords: _,
                bounds,
            } => {
                let mut cached: Option<(u64, vmgpu_cuda_api::texture::Descriptor)> = None;
                let total = u64::from(*size) * u64::from(*n);
                each_lane!(mask, l, {
                    let handle = w.regs[*obj as usize * 32 + l];
                    let desc = match cached {
                        Some((h, d)) if h == handle => d,
                        _ => {
                            let d = self.descriptor(handle, true, w, wid, l, pc, ls)?;
                            cached = Some((handle, d));
                            d
                        }
                    };
                    let [x, y, z] =
                        coords.map(|r| w.regs[r as usize * 32 + l] as u32 as i32 as i64);
                    match crate::texture::surface_address(&desc, x, y, z, total, *bounds) {
                        Err(()) => {
                            return Err(SimError::Texture {
                                at: self.location(wid, l, pc),
                                handle,
                                message: format!(
                                    "surface access of {total} bytes at byte {x}, row {y}, slice {z} is outside the {}x{}x{} surface of {}-byte elements (.trap)",
                                    desc.width,
                                    desc.height,
                                    desc.depth,
                                    desc.texel_bytes()
                                ),
                            })
                        }
                        Ok(None) => {
                            if !*store {
                                for k in 0..*n as usize {
                                    w.regs[v[k] as usize * 32 + l] = 0;
                                }
                            }
                        }
                        Ok(Some(addr)) => {
                            let t = self.resolve(Sp::Global, addr, total, u64::from(*size), *store, wid, l, pc, ls)?;
                            for k in 0..*n as usize {
                                let o = (k * *size as usize) as u64;
                                if *store {
                                    let val = w.regs[v[k] as usize * 32 + l];
                                    match t {
                                        Target::Global(i, go) => self.l.live[i].store(go + o, *size, val),
                                        _ => unreachable!("surfaces are global memory"),
                                    }
                                } else {
                                    w.regs[v[k] as usize * 32 + l] = self.load(&t, o, *size, w);
                                }
                            }
                        }
                    }
                });
            }
            Op::BadCall { a } => {
                // Every lane here called through a pointer naming no function the call
                // can reach: the first one stops the launch.
                let lane = mask.trailing_zeros() as usize;
                return Err(SimError::BadCall {
                    at: self.location(wid, lane, pc),
                    address: w.regs[*a as usize * 32 + lane],
                });
            }
            Op::Trap => {
                let lane = mask.trailing_zeros() as usize;
                return Err(SimError::Trap {
                    at: self.location(wid, lane, pc),
                });
            }
            Op::Assert { args } => {
                let lane = mask.trailing_zeros() as usize;
                let at = self.location(wid, lane, pc);
                let mut t = ThreadMem {
                    ex: self,
                    w,
                    wid,
                    lane,
                    pc,
                    ls,
                };
                let (message, file) = (t.arg(args[0], 8), t.arg(args[1], 8));
                let (line, function) = (t.arg(args[2], 4) as u32, t.arg(args[3], 8));
                return Err(SimError::Assert(Box::new(Assertion {
                    at,
                    message: t.text(message),
                    file: t.text(file),
                    line,
                    function: t.text(function),
                })));
            }
            Op::Printf { format, args, ret } => {
                let mut done = vec![];
                each_lane!(mask, lane, {
                    let mut t = ThreadMem {
                        ex: self,
                        w,
                        wid,
                        lane,
                        pc,
                        ls,
                    };
                    let (f, a) = (t.arg(*format, 8), t.arg(*args, 8));
                    // As NVIDIA's: the number of arguments; -1 for a null format, -2 for
                    // one it cannot print (logged).
                    let r = if f == 0 {
                        Err((-1, "a null format".to_string()))
                    } else {
                        crate::printf::Reader::string(&mut t, f, crate::printf::MAX_STRING)
                            .map_err(|()| format!("format at {f:#x} is not readable"))
                            .and_then(|fmt| crate::printf::format(&fmt, a, &mut t))
                            .map_err(|why| (-2, why))
                    };
                    let n = match r {
                        Ok((text, used)) => {
                            let mut out = self.l.printed.lock().unwrap_or_else(|e| e.into_inner());
                            let room = PRINTF_FIFO.saturating_sub(out.len());
                            out.extend_from_slice(&text[..text.len().min(room)]);
                            used as i32
                        }
                        Err((code, why)) => {
                            let at = self.location(wid, lane, pc);
                            log::warn!("device printf: {at}: {why}");
                            code
                        }
                    };
                    done.push((lane, n));
                });
                if let Some(ret) = ret {
                    for (lane, n) in done {
                        let v = n as u32 as u64;
                        put_arg(w, *ret, lane, ls, 4, v);
                    }
                }
            }
            Op::Malloc { size, ret } => {
                let mut got = vec![];
                each_lane!(mask, lane, {
                    let t = ThreadMem {
                        ex: self,
                        w,
                        wid,
                        lane,
                        pc,
                        ls,
                    };
                    let n = t.arg(*size, 8);
                    got.push((lane, self.l.heap.map_or(0, |h| h.alloc(n))));
                });
                for (lane, p) in got {
                    put_arg(w, *ret, lane, ls, 8, p);
                }
            }
            Op::Free { ptr } => {
                each_lane!(mask, lane, {
                    let t = ThreadMem {
                        ex: self,
                        w,
                        wid,
                        lane,
                        pc,
                        ls,
                    };
                    let p = t.arg(*ptr, 8);
                    if p != 0 && !self.l.heap.is_some_and(|h| h.free(p)) {
                        // As a GPU's heap: freeing what malloc did not give is undefined;
                        // here it is ignored and said.
                        let at = self.location(wid, lane, pc);
                        log::warn!("device free: {at}: {p:#x} is not a block of the device heap");
                    }
                });
            }
            Op::MbarInit { sp, a, off, count } => {
                let cv: Lanes = *lanes(&w.regs, *count);
                each_lane!(mask, l, {
                    let addr = w.regs[*a as usize * 32 + l].wrapping_add(*off as u64);
                    let n = cv[l] & 0x7fff_ffff;
                    self.mbar_rmw(*sp, addr, w, wid, l, pc, ls, |_| (n << 32) | n)?;
                });
            }
            Op::MbarArrive {
                sp,
                a,
                off,
                count,
                d,
                drop,
            } => {
                let cv: Option<Lanes> = count.map(|c| *lanes(&w.regs, c));
                each_lane!(mask, l, {
                    let addr = w.regs[*a as usize * 32 + l].wrapping_add(*off as u64);
                    let c = cv.map_or(1, |v| v[l] & 0xffff_ffff);
                    let old =
                        self.mbar_rmw(*sp, addr, w, wid, l, pc, ls, |x| mbar_arrive(x, c, *drop))?;
                    if let Some(d) = d {
                        w.regs[*d as usize * 32 + l] = old & (1 << 63);
                    }
                });
            }
            Op::MbarWait {
                sp,
                a,
                off,
                p,
                state,
                parity,
            } => {
                let sv: Lanes = *lanes(&w.regs, *state);
                let mut done = 0u32;
                each_lane!(mask, l, {
                    let addr = w.regs[*a as usize * 32 + l].wrapping_add(*off as u64);
                    let cur = self.mbar_rmw(*sp, addr, w, wid, l, pc, ls, |x| x)? >> 63;
                    let want = if *parity { sv[l] & 1 } else { sv[l] >> 63 };
                    if cur != want {
                        done |= 1 << l;
                    }
                });
                let pd = &mut w.preds[*p as usize];
                *pd = (*pd & !mask) | done;
                self.yield_now = done == 0;
            }
            Op::Redux {
                d,
                a,
                op,
                signed,
                member,
            } => {
                let av = lanes(&w.regs, *a);
                let mv = lanes(&w.regs, *member);
                // Each lane reduces over the active lanes its membermask names: lanes of
                // different labelled groups reduce apart in one instruction.
                let reduce = |group: u32| {
                    let mut acc: Option<u32> = None;
                    each_lane!(group, l, {
                        let v = av[l] as u32;
                        acc = Some(match acc {
                            None => v,
                            Some(x) => match (op, signed) {
                                (0, _) => x.wrapping_add(v),
                                (1, true) => (x as i32).min(v as i32) as u32,
                                (2, true) => (x as i32).max(v as i32) as u32,
                                (1, false) => x.min(v),
                                (2, false) => x.max(v),
                                (3, _) => x & v,
                                (4, _) => x | v,
                                _ => x ^ v,
                            },
                        });
                    });
                    acc.unwrap_or(0) as u64
                };
                let mut out: Lanes = [0; 32];
                let mut done: Vec<(u32, u64)> = Vec::new();
                each_lane!(mask, l, {
                    let g = mask & mv[l] as u32;
                    out[l] = match done.iter().find(|(k, _)| *k == g) {
                        Some(&(_, v)) => v,
                        None => {
                            let v = reduce(g);
                            done.push((g, v));
                            v
                        }
                    };
                });
                write(&mut w.regs, *d, &out, mask);
            }
            Op::Activemask(d) => {
                let out = [mask as u64; 32];
                write(&mut w.regs, *d, &out, mask);
            }
            Op::Clock { d, kind } => {
                let v = match kind {
                    0 => self.l.start.elapsed().as_nanos() as u64 & 0xffff_ffff,
                    1 => self.l.start.elapsed().as_nanos() as u64,
                    _ => std::time::SystemTime::now()
                        .duration_since(std::time::UNIX_EPOCH)
                        .map(|d| d.as_nanos() as u64)
                        .unwrap_or(0),
                };
                write(&mut w.regs, *d, &[v; 32], mask);
            }
            Op::Wmma(op) => self.wmma(op, w, mask, wid, pc, ls)?,
            Op::Cdp {
                call,
                args,
                ret,
                ret_size,
            } => {
                let mut results = Vec::with_capacity(32);
                each_lane!(mask, lane, {
                    results.push((lane, self.cdp(*call, args, w, wid, lane, pc, ls)?));
                });
                if let Some(ret) = *ret {
                    for (lane, v) in results {
                        put_arg(w, ret, lane, ls, *ret_size, v);
                    }
                }
            }
            Op::Nop => fence(SeqCst),
            Op::SpinHint => {
                if self.l.workspace != 0 {
                    std::thread::yield_now();
                }
            }
            Op::Bra { .. } | Op::Exit | Op::Bar { .. } | Op::Call { .. } | Op::Return { .. } => {}
        }
        Ok(())
    }

    /// Makes the out-of-line call at `pc` of function `func` for the lanes of `mask`:
    /// a zeroed frame on the stack with the arguments in it, the callee's registers
    /// saved. The caller pushes the SIMT frame of its body.
    #[allow(clippy::too_many_arguments)]
    fn call(
        &mut self,
        w: &mut Warp,
        wid: u32,
        pc: u32,
        mask: u32,
        func: u32,
        args: &[ArgSrc],
        ls: usize,
    ) -> Result<(), SimError> {
        let prog = self.l.prog;
        let f = &prog.funcs[func as usize];
        let fp = w.top;
        let top = fp + f.frame as u64;
        if top > ls as u64 {
            return Err(SimError::StackOverflow {
                at: self.location(wid, mask.trailing_zeros() as usize, pc),
                function: f.name.clone(),
                depth: w.calls.len() as u32 + 1,
                limit: STACK_SIZE,
            });
        }
        for &a in args {
            if let ArgSrc::Reg(r) = a {
                w.materialize(r);
            }
        }
        let (fpu, frame) = (fp as usize, f.frame as usize);
        each_lane!(mask, lane, {
            let base = lane * ls;
            w.local[base + fpu..base + fpu + frame].fill(0);
            for (a, &(at, size)) in args.iter().zip(&f.params) {
                let to = base + fpu + at as usize;
                copy_arg(w, *a, lane, ls, to, size as usize);
            }
        });
        let (r, p) = (&f.regs, &f.preds);
        let rec = CallRec {
            site: pc,
            func,
            regs: w.regs[r.start as usize * 32..r.end as usize * 32].into(),
            tags: w.tags[r.start as usize..r.end as usize].into(),
            preds: w.preds[p.start as usize..p.end as usize].into(),
            fp: w.fp,
            top: w.top,
        };
        w.calls.push(rec);
        set_fp(w, prog.fp, fp, top);
        Ok(())
    }

    /// Ends the innermost out-of-line call: its results copied to the caller's places
    /// for the lanes of `mask` (none when its lanes exited), the callee's registers and
    /// the caller's frame back.
    fn end_call(&mut self, w: &mut Warp, mask: u32, ls: usize) {
        let prog = self.l.prog;
        let Some(rec) = w.calls.pop() else {
            return;
        };
        let f = &prog.funcs[rec.func as usize];
        let (r, p) = (&f.regs, &f.preds);
        w.regs[r.start as usize * 32..r.end as usize * 32].copy_from_slice(&rec.regs);
        w.tags[r.start as usize..r.end as usize].copy_from_slice(&rec.tags);
        w.preds[p.start as usize..p.end as usize].copy_from_slice(&rec.preds);
        let callee_fp = w.fp as usize;
        set_fp(w, prog.fp, rec.fp, rec.top);
        let Op::Call { rets, .. } = &prog.insts[rec.site as usize].op else {
            return;
        };
        for &d in rets.iter() {
            if let ArgSrc::Reg(r) = d {
                w.tags[r as usize] = Tag::default();
            }
        }
        each_lane!(mask, lane, {
            let base = lane * ls;
            for (d, &(at, size)) in rets.iter().zip(&f.returns) {
                let from = base + callee_fp + at as usize;
                match (arg_at(w, *d, lane, ls), *d) {
                    (Some(to), _) => w.local.copy_within(from..from + size as usize, to),
                    (None, ArgSrc::Reg(r)) => {
                        w.regs[r as usize * 32 + lane] = read_le(&w.local, from, size.min(8) as u8)
                    }
                    (None, _) => {}
                }
            }
        });
    }

    /// An atomic read-modify-write of `size` bytes at `t` (resolved for a write):
    /// returns the old value. `local` is the warp's local memory.
    #[allow(clippy::too_many_arguments)]
    fn atom_at(
        &mut self,
        t: Target,
        op: AtomOp,
        ty: AtomTy,
        size: u64,
        bv: u64,
        cv: u64,
        local: &mut [u8],
    ) -> u64 {
        match t {
            Target::Global(i, o) => {
                self.touch(i);
                self.global_atom(i, o, op, ty, size, bv, cv)
            }
            Target::Shared(so) => {
                let old = sh_read(&self.shared, so, size as u8);
                sh_write(
                    &mut self.shared,
                    so,
                    size as u8,
                    atom_apply(op, ty, old, bv, cv),
                );
                old
            }
            Target::Local(lo) => {
                let old = read_le(local, lo, size as u8);
                write_le(local, lo, size as u8, atom_apply(op, ty, old, bv, cv));
                old
            }
            // `resolve` refuses an atomic on the parameters (a write).
            Target::Param(o) => read_le(self.l.params, o, size as u8),
        }
    }

    /// A worker's engine for launch `l`.
    fn new(l: &'b Launch<'a>) -> Exec<'a, 'b> {
        Exec {
            l,
            block: [0; 3],
            block_linear: 0,
            shared: Vec::new(),
            shared_len: 0,
            cache: vec![0; l.prog.insts.len()],
            count: 0,
            yield_now: false,
            reds: Reds::default(),
        }
    }

    /// Applies the held reductions on allocation `i` (all of them) before the kernel
    /// accesses it.
    #[inline(always)]
    pub(super) fn touch(&self, i: usize) {
        if self.holds(i) {
            self.flush_reds();
        }
    }

    /// Whether reductions on allocation `i` may be held (its bit is set).
    #[inline(always)]
    pub(super) fn holds(&self, i: usize) -> bool {
        self.reds.allocs.get() & (1 << (i % 64)) != 0
    }

    /// Applies every held reduction to memory.
    pub(super) fn flush_reds(&self) {
        if self.reds.allocs.get() == 0 {
            return;
        }
        self.reds.allocs.set(0);
        let mut slots = self.reds.slots.borrow_mut();
        for k in self.reds.used.borrow_mut().drain(..) {
            let h = std::mem::replace(&mut slots[k as usize], RedSlot::FREE);
            if !h.is_free() {
                self.apply_red(h);
            }
        }
    }

    fn apply_red(&self, h: RedSlot) {
        let i = h.alloc as usize;
        let o = h.addr - self.l.live[i].base;
        self.global_atom(i, o, h.op, h.ty, atom_size(h.ty), h.acc, 0);
    }

    /// The held reductions' table, for compiled code (see [`Reds::slots`]).
    pub(super) fn red_table(&self) -> *mut RedSlot {
        // SAFETY: `as_ptr` gives the RefCell's contents without borrowing; the pointer
        // is dereferenced here only to read the Vec's buffer address, while no borrow
        // of it is alive (the helpers' borrows end before they return).
        unsafe { (*self.reds.slots.as_ptr()).as_mut_ptr() }
    }

    /// Holds back reduction `op` of `v` on global word `(i, o)`, combined with those
    /// held on it already.
    pub(super) fn hold_red(&self, i: usize, o: u64, op: AtomOp, ty: AtomTy, v: u64) {
        let addr = self.l.live[i].base + o;
        let k = RedSlot::index(addr);
        let mut slots = self.reds.slots.borrow_mut();
        let new = RedSlot {
            addr,
            tag: RedSlot::tag(op, ty),
            acc: v,
            alloc: i as u32,
            op,
            ty,
        };
        let h = &mut slots[k];
        if h.addr == addr && h.tag == new.tag {
            h.acc = atom_apply(op, ty, h.acc, v, 0);
        } else if !h.is_free() {
            // Another word (or operation) had the slot: it goes to memory now.
            let old = std::mem::replace(h, new);
            self.apply_red(old);
        } else {
            *h = new;
            self.reds.used.borrow_mut().push(k as u16);
        }
        self.reds.allocs.set(self.reds.allocs.get() | 1 << (i % 64));
    }

    /// Atomic `op` on global word `(i, o)` of `size` bytes; the old value.
    #[allow(clippy::too_many_arguments)]
    fn global_atom(
        &self,
        i: usize,
        o: u64,
        op: AtomOp,
        ty: AtomTy,
        size: u64,
        bv: u64,
        cv: u64,
    ) -> u64 {
        let al = &self.l.live[i];
        if size == 4 {
            al.rmw32(o, |x| atom_apply(op, ty, x as u64, bv, cv) as u32) as u64
        } else {
            let _g = self.l.locks64[((al.base + o) >> 3) as usize % 64]
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            let old = al.load(o, 8);
            al.store(o, 8, atom_apply(op, ty, old, bv, cv));
            fence(SeqCst);
            old
        }
    }

    /// Starts block `block_linear`: its coordinates and its zeroed shared memory.
    fn begin_block(&mut self) {
        let l = self.l;
        let prog = l.prog;
        let [gx, gy, _] = l.cfg.grid;
        let lin = self.block_linear;
        self.block = [
            (lin % gx as u64) as u32,
            ((lin / gx as u64) % gy as u64) as u32,
            (lin / (gx as u64 * gy as u64)) as u32,
        ];
        self.shared_len = prog.shared_static as usize + l.cfg.shared_bytes as usize;
        if prog.reserved_smem {
            self.shared_len = reserved_base(prog, &l.cfg) as usize + RESERVED_SMEM as usize;
        }
        self.shared.clear();
        self.shared.resize(self.shared_len.div_ceil(4) + 1, 0);
    }

    fn run_block(&mut self, warps: &mut [Warp]) -> Result<(), SimError> {
        let l = self.l;
        let prog = l.prog;
        self.begin_block();
        for (wi, w) in warps.iter_mut().enumerate() {
            let wi = wi as u32;
            let first = wi * 32;
            let n = l.nthreads.saturating_sub(first).min(32);
            let live = if n == 32 { FULL } else { (1u32 << n) - 1 };
            w.live = live;
            w.state = WState::Run;
            w.stack.clear();
            w.stack.push(Frame {
                pc: 0,
                rpc: EXIT_PC,
                mask: live,
                call: false,
            });
            // The kernel's own variables start at 0; a call's frame is zeroed when made.
            // This runs for every warp of every block: nothing to do without locals (an
            // empty fill per lane made transpose 10x slower), one fill without a stack.
            let (ls, sl) = (prog.local_size as usize, prog.static_local as usize);
            if sl > 0 {
                if sl == ls {
                    w.local.fill(0);
                } else {
                    for lane in 0..32 {
                        w.local[lane * ls..lane * ls + sl].fill(0);
                    }
                }
            }
            w.calls.clear();
            w.fp = 0;
            w.top = sl as u64;
            // `%ctaid` rows: uniform and read-only to the kernel, so lane 0 tells whether
            // a row already holds this block's value (in a 1D grid y and z never change).
            let r = &mut w.regs;
            for k in 6..9 {
                let v = self.block[k - 6] as u64;
                if r[k * 32] != v {
                    r[k * 32..k * 32 + 32].fill(v);
                }
                w.tags[k] = Tag {
                    aff: Some((v, 0)),
                    lazy: false,
                };
            }
        }
        loop {
            for (wi, w) in warps.iter_mut().enumerate() {
                if w.state == WState::Run {
                    match self.run_warp(w, wi as u32)? {
                        Stop::Barrier => w.state = WState::Bar,
                        Stop::Done => w.state = WState::Done,
                        Stop::Yield => {}
                    }
                }
            }
            // Warps waiting on an mbarrier run again before any bar.sync is released
            // (the time limit ends a wait nothing will satisfy).
            if warps.iter().any(|w| w.state == WState::Run) {
                continue;
            }
            // Every waiting warp must wait at the same barrier instruction.
            let mut first: Option<(usize, u32)> = None;
            for (wi, w) in warps.iter().enumerate() {
                if w.state != WState::Bar {
                    continue;
                }
                match first {
                    None => first = Some((wi, w.bar_pc)),
                    Some((fw, fpc)) if fpc != w.bar_pc => {
                        let line_of =
                            |pc: u32| prog.insts.get(pc as usize).map(|i| i.line).unwrap_or(0);
                        let lane = warps[fw].live.trailing_zeros() as usize;
                        return Err(SimError::BarrierDivergence {
                            at: self.location(fw as u32, lane, fpc),
                            message: format!(
                                "warp {fw} waits at bar.sync on PTX line {} while warp {wi} waits at another bar.sync on PTX line {}",
                                line_of(fpc),
                                line_of(w.bar_pc)
                            ),
                        });
                    }
                    _ => {}
                }
            }
            // bar.red: combine the waiting warps' parts and hand the result to each.
            if let Some((_, pc)) = first {
                if let Some(Op::Bar { red: Some(r) }) = prog.insts.get(pc as usize).map(|i| &i.op) {
                    let parts = warps
                        .iter()
                        .filter(|w| w.state == WState::Bar)
                        .map(|w| w.red);
                    let total = match r.mode {
                        0 => parts.sum::<u64>(),
                        1 => parts.fold(1, |a, x| a & x),
                        _ => parts.fold(0, |a, x| a | x),
                    };
                    for w in warps.iter_mut().filter(|w| w.state == WState::Bar) {
                        let live = w.live;
                        if r.mode == 0 {
                            w.materialize(r.d);
                            w.tags[r.d as usize] = Tag::default();
                            write(&mut w.regs, r.d, &[total; 32], live);
                        } else {
                            let pd = &mut w.preds[r.d as usize];
                            *pd = (*pd & !live) | if total != 0 { live } else { 0 };
                        }
                    }
                }
            }
            let mut any = false;
            for w in warps.iter_mut() {
                if w.state == WState::Bar {
                    w.state = WState::Run;
                    any = true;
                }
            }
            if !any {
                return Ok(());
            }
        }
    }
}

/// An arithmetic instruction of a full warp computed from its sources' tags (the
/// destination gets a tag, its row written when read); false (nothing done) when the
/// tags do not give the result.
#[inline(always)]
fn alu_affine(inst: &Inst, w: &mut Warp) -> bool {
    let tag = |r: R| w.tags[r as usize].aff;
    let out = match inst.aff {
        Aff::None | Aff::Mem { .. } => return false,
        Aff::Mov { d, a, bits } => {
            let Some(ta) = tag(a) else { return false };
            let (a0, sa) = ring(ta);
            (d, fit(a0, sa, bits))
        }
        Aff::Add { d, a, b, bits, sub } => {
            let (Some(ta), Some(tb)) = (tag(a), tag(b)) else {
                return false;
            };
            let ((a0, sa), (b0, sb)) = (ring(ta), ring(tb));
            if sub {
                (d, fit(a0.wrapping_sub(b0), sa.wrapping_sub(sb), bits))
            } else {
                (d, fit(a0.wrapping_add(b0), sa.wrapping_add(sb), bits))
            }
        }
        Aff::Mul { d, a, b, c, bits } => {
            let (Some(ta), Some(tb)) = (tag(a), tag(b)) else {
                return false;
            };
            let ((a0, sa), (b0, sb)) = (ring(ta), ring(tb));
            // Affine only when one factor is uniform (modulo 2^bits).
            let m = if bits >= 64 {
                u64::MAX
            } else {
                (1u64 << bits) - 1
            };
            let (mut r0, mut s) = if sb & m == 0 {
                (a0.wrapping_mul(b0), sa.wrapping_mul(b0))
            } else if sa & m == 0 {
                (a0.wrapping_mul(b0), a0.wrapping_mul(sb))
            } else {
                return false;
            };
            if let Some(c) = c {
                let Some(tc) = tag(c) else { return false };
                let (c0, sc) = ring(tc);
                r0 = r0.wrapping_add(c0);
                s = s.wrapping_add(sc);
            }
            (d, fit(r0, s, bits))
        }
        Aff::MulWide {
            d,
            a,
            b,
            bits,
            signed,
        } => {
            let (Some(ta), Some(tb)) = (tag(a), tag(b)) else {
                return false;
            };
            let (Some((a0, sa)), Some((b0, sb))) = (view(ta, bits, signed), view(tb, bits, signed))
            else {
                return false;
            };
            if sa != 0 && sb != 0 {
                return false;
            }
            {
                let (r0, s) = (a0 * b0, sa * b0 + a0 * sb);
                (d, fit(r0 as u64, s as u64, 2 * bits))
            }
        }
        Aff::Shl { d, a, b, bits } => {
            let (Some(ta), Some((n, 0))) = (tag(a), tag(b)) else {
                return false;
            };
            let n = n as u32;
            if n >= bits as u32 {
                (d, fit(0, 0, bits))
            } else {
                let (a0, sa) = ring(ta);
                (d, fit(a0 << n, sa << n, bits))
            }
        }
        Aff::Shr {
            d,
            a,
            b,
            bits,
            signed,
        } => {
            let (Some(ta), Some((n, 0))) = (tag(a), tag(b)) else {
                return false;
            };
            let Some((a0, 0)) = view(ta, bits, signed) else {
                return false;
            };
            let n = n as u32;
            let r = if signed {
                a0 >> n.min(bits as u32 - 1)
            } else if n >= bits as u32 {
                0
            } else {
                a0 >> n
            };
            (d, fit(r as u64, 0, bits))
        }
        Aff::Cmp { bits, signed, code } => {
            let Op::Setp {
                d, dn, a, b, comb, ..
            } = &inst.op
            else {
                return false;
            };
            let (Some(ta), Some(tb)) = (tag(*a), tag(*b)) else {
                return false;
            };
            let (neg, zero, pos) = if ta.1 == 0 && tb.1 == 0 {
                // Two uniform values: one comparison (as the type reads them).
                let sh = 64 - bits as u32;
                let (x, y) = (ta.0 << sh, tb.0 << sh);
                let ord = if signed {
                    (x as i64).cmp(&(y as i64))
                } else {
                    x.cmp(&y)
                };
                match ord {
                    std::cmp::Ordering::Less => (FULL, 0, 0),
                    std::cmp::Ordering::Equal => (0, FULL, 0),
                    std::cmp::Ordering::Greater => (0, 0, FULL),
                }
            } else {
                let (Some((a0, sa)), Some((b0, sb))) =
                    (view(ta, bits, signed), view(tb, bits, signed))
                else {
                    return false;
                };
                sign_masks(a0 - b0, sa - sb)
            };
            let r = match code {
                0 => zero,
                1 => !zero,
                2 => neg,
                3 => neg | zero,
                4 => pos,
                _ => pos | zero,
            };
            setp_write(w, *d, *dn, *comb, FULL, r);
            return true;
        }
    };
    match out {
        (d, Some(t)) => {
            w.set_tag(d, t);
            true
        }
        (_, None) => false,
    }
}

/// Writes `setp`'s predicates from the comparison's lanes `r`.
#[inline(always)]
/// The local memory offset of a call's argument or result `a` in lane `lane`, if it is
/// not a register.
fn arg_at(w: &Warp, a: ArgSrc, lane: usize, ls: usize) -> Option<usize> {
    match a {
        ArgSrc::Reg(_) => None,
        ArgSrc::Local(o) => Some(lane * ls + o as usize),
        ArgSrc::Frame(o) => Some(lane * ls + w.fp as usize + o as usize),
    }
}

/// `len` bytes at byte `off` of a call's argument `a` in lane `lane`.
fn get_arg(w: &Warp, a: ArgSrc, lane: usize, ls: usize, off: usize, len: u8) -> u64 {
    match (a, arg_at(w, a, lane, ls)) {
        (_, Some(at)) => read_le(&w.local, at + off, len),
        (ArgSrc::Reg(r), None) => {
            let v = w.regs[r as usize * 32 + lane] >> (8 * off.min(7));
            if len >= 8 {
                v
            } else {
                v & ((1u64 << (8 * len)) - 1)
            }
        }
        _ => 0,
    }
}

/// Writes a call's result `v` (`size` bytes) to `d` in lane `lane`.
fn put_arg(w: &mut Warp, d: ArgSrc, lane: usize, ls: usize, size: u8, v: u64) {
    match (d, arg_at(w, d, lane, ls)) {
        (_, Some(at)) => write_le(&mut w.local, at, size, v),
        (ArgSrc::Reg(r), None) => w.regs[r as usize * 32 + lane] = v,
        _ => {}
    }
}

/// Copies `size` bytes of a call's argument `a` (in lane `lane`) to local memory at
/// `to`.
fn copy_arg(w: &mut Warp, a: ArgSrc, lane: usize, ls: usize, to: usize, size: usize) {
    match (arg_at(w, a, lane, ls), a) {
        (Some(from), _) => w.local.copy_within(from..from + size, to),
        (None, ArgSrc::Reg(r)) => {
            let v = w.regs[r as usize * 32 + lane].to_le_bytes();
            let n = size.min(8);
            w.local[to..to + n].copy_from_slice(&v[..n]);
        }
        (None, _) => {}
    }
}

/// Sets the running call's frame `fp` (and its register `reg`, every lane) and the
/// stack top.
fn set_fp(w: &mut Warp, reg: R, fp: u64, top: u64) {
    w.fp = fp;
    w.top = top;
    w.regs[reg as usize * 32..reg as usize * 32 + 32].fill(fp);
    w.tags[reg as usize] = Tag {
        aff: Some((fp, 0)),
        lazy: false,
    };
}

/// The offset a `.shared` or `.local` address names: a window address's low half, and
/// the sum of a 32-bit register and an instruction's offset modulo 2^32, as the
/// hardware's 32-bit addressing of these spaces wraps (nvcc's `[%r21+128]` with `%r21`
/// = base - 128). Any other value stays as it is (out of bounds: device addresses are
/// far above 2^33).
fn window_offset(addr: u64, window: u64) -> u64 {
    if addr.wrapping_sub(window) < WINDOW_SIZE {
        addr - window
    } else if addr < 2 << 32 || addr >= 0u64.wrapping_sub(1 << 32) {
        addr & 0xffff_ffff
    } else {
        addr
    }
}

fn setp_write(
    w: &mut Warp,
    d: P,
    dn: Option<P>,
    comb: Option<(BoolOp, P, bool)>,
    mask: u32,
    r: u32,
) {
    let combine = |x: u32| match comb {
        None => x,
        Some((op, c, neg)) => {
            let cv = w.preds[c as usize] ^ if neg { FULL } else { 0 };
            match op {
                BoolOp::And => x & cv,
                BoolOp::Or => x | cv,
                BoolOp::Xor => x ^ cv,
            }
        }
    };
    let p = combine(r);
    let q = combine(!r);
    let pd = &mut w.preds[d as usize];
    *pd = (*pd & !mask) | (p & mask);
    if let Some(dn) = dn {
        let qd = &mut w.preds[dn as usize];
        *qd = (*qd & !mask) | (q & mask);
    }
}

/// The first offset when the 32 offsets are consecutive 32-bit words.
#[inline(always)]
fn coalesced(offs: &Lanes) -> Option<u64> {
    consecutive_words(offs).then_some(offs[0])
}

/// Whether lane `l` holds `v[0] + 4 * l` for every lane (differences accumulated with
/// or: branch-free, and it vectorises without 64-bit compares).
#[inline(always)]
fn consecutive_words(v: &Lanes) -> bool {
    let mut diff = 0u64;
    for (l, &x) in v.iter().enumerate() {
        diff |= x ^ v[0].wrapping_add(4 * l as u64);
    }
    diff == 0
}

/// Whether an active lane's offset is past `limit` or not aligned (`align_mask`).
#[inline(always)]
fn lanes_bad(offs: &Lanes, limit: u64, align_mask: u64, mask: u32) -> bool {
    if mask == FULL {
        let mut bad = false;
        for &o in offs {
            bad |= (o > limit) | (o & align_mask != 0);
        }
        bad
    } else {
        // Only the active lanes (often few of them under divergence).
        let mut bad = false;
        each_lane!(mask, l, {
            let o = offs[l];
            bad |= (o > limit) | (o & align_mask != 0);
        });
        bad
    }
}

/// Reads `size` bytes at byte offset `o` (naturally aligned) of word-array memory.
#[inline(always)]
fn sh_read(m: &[u32], o: usize, size: u8) -> u64 {
    let w = o >> 2;
    match size {
        4 => m[w] as u64,
        8 => m[w] as u64 | ((m[w + 1] as u64) << 32),
        2 => ((m[w] >> ((o & 3) * 8)) & 0xffff) as u64,
        1 => ((m[w] >> ((o & 3) * 8)) & 0xff) as u64,
        _ => m[w] as u64 | ((m[w + 1] as u64) << 32),
    }
}

/// Writes `size` bytes at byte offset `o` (naturally aligned) of word-array memory.
#[inline(always)]
fn sh_write(m: &mut [u32], o: usize, size: u8, v: u64) {
    let w = o >> 2;
    match size {
        4 => m[w] = v as u32,
        8 | 16 => {
            m[w] = v as u32;
            m[w + 1] = (v >> 32) as u32;
        }
        _ => {
            let sh = (o & 3) * 8;
            let mask: u32 = (if size == 1 { 0xff } else { 0xffff }) << sh;
            m[w] = (m[w] & !mask) | (((v as u32) << sh) & mask);
        }
    }
}

#[inline(always)]
fn read_le(buf: &[u8], o: usize, size: u8) -> u64 {
    match size {
        1 => buf[o] as u64,
        2 => u16::from_le_bytes([buf[o], buf[o + 1]]) as u64,
        4 => u32::from_le_bytes(buf[o..o + 4].try_into().expect("4 bytes")) as u64,
        _ => u64::from_le_bytes(buf[o..o + 8].try_into().expect("8 bytes")),
    }
}

/// One arrival of `c` at an mbarrier word (pending in bits 0..31, expected in 32..62,
/// phase in 63): the last pending one completes the phase (the phase flips and the
/// expected count is pending again); `drop` also leaves the barrier for later phases.
fn mbar_arrive(x: u64, c: u64, drop: bool) -> u64 {
    let (mut pending, mut expected, mut phase) =
        (x & 0xffff_ffff, (x >> 32) & 0x7fff_ffff, x >> 63);
    pending = pending.saturating_sub(c);
    if drop {
        expected = expected.saturating_sub(1);
    }
    if pending == 0 {
        phase ^= 1;
        pending = expected;
    }
    (phase << 63) | (expected << 32) | pending
}

#[inline(always)]
/// Where a block's reserved shared memory starts: after its static and dynamic shared
/// memory, 16-aligned.
fn reserved_base(prog: &Program, cfg: &LaunchConfig) -> u32 {
    (prog.shared_static + cfg.shared_bytes).next_multiple_of(16)
}

fn write_le(buf: &mut [u8], o: usize, size: u8, v: u64) {
    match size {
        1 => buf[o] = v as u8,
        2 => buf[o..o + 2].copy_from_slice(&(v as u16).to_le_bytes()),
        4 => buf[o..o + 4].copy_from_slice(&(v as u32).to_le_bytes()),
        _ => buf[o..o + 8].copy_from_slice(&v.to_le_bytes()),
    }
}

/// The bytes an atomic of type `ty` reads and writes.
fn atom_size(ty: AtomTy) -> u64 {
    match ty {
        AtomTy::U32 | AtomTy::S32 | AtomTy::F32 => 4,
        _ => 8,
    }
}

fn atom_apply(op: AtomOp, ty: AtomTy, old: u64, b: u64, c: u64) -> u64 {
    let m32 = 0xffff_ffffu64;
    let wide = matches!(ty, AtomTy::U64 | AtomTy::S64 | AtomTy::F64);
    let m = if wide { u64::MAX } else { m32 };
    let (o, b) = (old & m, b & m);
    let r = match (op, ty) {
        (AtomOp::Add, AtomTy::F32) => {
            let ftz = |x: f32| {
                if x.is_subnormal() {
                    0.0f32.copysign(x)
                } else {
                    x
                }
            };
            let s = ftz(ftz(f32::from_bits(o as u32)) + ftz(f32::from_bits(b as u32)));
            if s.is_nan() {
                0x7fff_ffff
            } else {
                s.to_bits() as u64
            }
        }
        (AtomOp::Add, AtomTy::F64) => {
            // A NaN operand is kept as it is (the added value's first, not quieted); an
            // invalid sum gives the default NaN (fixtures/isa-goldens).
            let (x, y) = (f64::from_bits(o), f64::from_bits(b));
            if y.is_nan() {
                b
            } else if x.is_nan() {
                o
            } else {
                ops::Flt::canon(x + y)
            }
        }
        (AtomOp::Add, _) => o.wrapping_add(b),
        (AtomOp::Min | AtomOp::Max, AtomTy::S32) => {
            let (x, y) = (o as u32 as i32, b as u32 as i32);
            (if op == AtomOp::Min {
                x.min(y)
            } else {
                x.max(y)
            }) as u32 as u64
        }
        (AtomOp::Min | AtomOp::Max, AtomTy::S64) => {
            let (x, y) = (o as i64, b as i64);
            (if op == AtomOp::Min {
                x.min(y)
            } else {
                x.max(y)
            }) as u64
        }
        (AtomOp::Min | AtomOp::Max, AtomTy::F32) => {
            let (x, y) = (f32::from_bits(o as u32), f32::from_bits(b as u32));
            (if op == AtomOp::Min {
                x.min(y)
            } else {
                x.max(y)
            })
            .to_bits() as u64
        }
        (AtomOp::Min | AtomOp::Max, AtomTy::F64) => {
            let (x, y) = (f64::from_bits(o), f64::from_bits(b));
            (if op == AtomOp::Min {
                x.min(y)
            } else {
                x.max(y)
            })
            .to_bits()
        }
        (AtomOp::Min, _) => o.min(b),
        (AtomOp::Max, _) => o.max(b),
        (AtomOp::Inc, _) => {
            if o >= b {
                0
            } else {
                o + 1
            }
        }
        (AtomOp::Dec, _) => {
            if o == 0 || o > b {
                b
            } else {
                o - 1
            }
        }
        (AtomOp::Exch, _) => b,
        (AtomOp::Cas, _) => {
            if o == b {
                c & m
            } else {
                o
            }
        }
        (AtomOp::And, _) => o & b,
        (AtomOp::Or, _) => o | b,
        (AtomOp::Xor, _) => o ^ b,
    };
    r & m
}

/// A warp's register file with the constants and the block-invariant special
/// registers in place (`%ctaid` is set per block).
/// Every special register's value in thread `t` (linear in its block) of a launch, on
/// host thread `worker`; `%ctaid` is the block's business (0 here).
fn special_values(l: &Launch, t: u32, worker: u32) -> [u64; NSPECIAL as usize] {
    let prog = l.prog;
    let [bx, by, bz] = l.cfg.block;
    let [gx, gy, gz] = l.cfg.grid;
    let (wi, lane) = (t / 32, t % 32);
    let mut v = [0u64; NSPECIAL as usize];
    let first: [u64; 25] = [
        (t % bx) as u64,
        ((t / bx) % by) as u64,
        (t / (bx * by)) as u64,
        bx as u64,
        by as u64,
        bz as u64,
        0,
        0,
        0,
        gx as u64,
        gy as u64,
        gz as u64,
        lane as u64,
        wi as u64,
        l.nwarps as u64,
        worker as u64,
        l.workers as u64,
        1u64 << lane,
        (1u64 << lane) - 1,
        ((1u64 << (lane + 1)) - 1) & 0xffff_ffff,
        (!((1u64 << (lane + 1)) - 1)) & 0xffff_ffff,
        (!((1u64 << lane) - 1)) & 0xffff_ffff,
        0,
        l.cfg.shared_bytes as u64,
        (prog.shared_static + l.cfg.shared_bytes) as u64,
    ];
    v[..first.len()].copy_from_slice(&first);
    // %reserved_smem_offset_begin, _end, _cap, _0, _1.
    let base = reserved_base(prog, &l.cfg) as u64;
    let size = RESERVED_SMEM as u64;
    v[RESERVED_SMEM_SPECIAL..RESERVED_SMEM_SPECIAL + 5].copy_from_slice(&[
        base,
        base + size,
        size,
        base,
        base + size / 2,
    ]);
    v[ENVREG1_SPECIAL] = l.workspace >> 32;
    v[ENVREG1_SPECIAL + 1] = l.workspace & 0xffff_ffff;
    v
}

fn new_warp(l: &Launch, wi: u32, worker: u32) -> Warp {
    let prog = l.prog;
    let mut regs = vec![0u64; prog.nregs as usize * 32];
    for &(r, v) in &prog.consts {
        regs[r as usize * 32..r as usize * 32 + 32].fill(v);
    }
    for lane in 0..32u32 {
        for (k, v) in special_values(l, wi * 32 + lane, worker).iter().enumerate() {
            regs[k * 32 + lane as usize] = *v;
        }
    }
    Warp {
        regs,
        tags: vec![Tag::default(); prog.nregs as usize],
        preds: vec![0; prog.npreds as usize],
        stack: Vec::with_capacity(16),
        live: 0,
        state: WState::Done,
        local: vec![0; prog.local_size as usize * 32],
        bar_pc: 0,
        carry: 0,
        red: 0,
        calls: vec![],
        fp: 0,
        top: 0,
    }
}

fn worker(l: &Launch, next: &AtomicU64, total: u64, id: u32) {
    let mut warps: Vec<Warp> = (0..l.nwarps).map(|wi| new_warp(l, wi, id)).collect();
    let mut ex = Exec::new(l);
    // Hoisted launch/warp invariants, once per register file; then the tags of the
    // registers the body never writes.
    for (wi, w) in warps.iter_mut().enumerate() {
        for inst in &l.prog.prologue {
            if ex
                .exec(&inst.op, w, FULL, wi as u32, 0, l.prog.local_size as usize)
                .is_err()
            {
                break;
            }
        }
        for &r in &l.prog.fixed {
            w.detect(r);
        }
    }
    take_blocks(l, next, total, |b| {
        ex.block_linear = b;
        ex.run_block(&mut warps)
    });
    ex.flush_reds();
    l.executed.fetch_add(ex.count % TICK, Relaxed);
}

/// A worker's share of a launch's `total` blocks: runs `block` on each block it takes
/// until none is left or one fails (the launch then aborts, keeping the fault of the
/// lowest block for a stable report). Blocks are taken a run at a time (one shared
/// atomic per run, not per block); a single worker takes them in order.
fn take_blocks(
    l: &Launch,
    next: &AtomicU64,
    total: u64,
    mut block: impl FnMut(u64) -> Result<(), SimError>,
) {
    let run = (total / (l.workers as u64 * 16)).clamp(1, 32);
    'outer: loop {
        if l.abort.load(Relaxed) {
            break;
        }
        let first = next.fetch_add(run, Relaxed);
        if first >= total {
            break;
        }
        for b in first..(first + run).min(total) {
            if b > first && l.abort.load(Relaxed) {
                break 'outer;
            }
            if let Err(e) = block(b) {
                if !matches!(e, SimError::Sticky(_)) {
                    let mut g = lock(&l.error);
                    if g.as_ref().is_none_or(|(ob, _)| b < *ob) {
                        *g = Some((b, e));
                    }
                }
                l.abort.store(true, Relaxed);
                break 'outer;
            }
        }
    }
}

/// Runs a grid of `prog` (of `module`); what it launched in turn is put in `children`,
/// for the caller to run after it.
#[allow(clippy::too_many_arguments)]
pub(crate) fn launch(
    prog: &Program,
    mem: &Memory,
    config: &SimConfig,
    cancel: &AtomicBool,
    cfg: LaunchConfig,
    params: &[u8],
    module: &crate::Module,
    depth: u32,
    workspace: u64,
    children: &mut Vec<Child>,
) -> Result<LaunchReport, SimError> {
    let start = Instant::now();
    let nthreads = cfg.block.iter().product::<u32>();
    let total: u64 = cfg.grid.iter().map(|&x| x as u64).product();
    // A cooperative launch's blocks all run at once, one host thread each (they may
    // wait for each other); the caller bounded the grid to what the device holds.
    let workers = if workspace != 0 {
        total as u32
    } else {
        config.threads.max(1).min(total as usize).min(256) as u32
    };
    let l = Launch {
        prog,
        params,
        live: &mem.live,
        freed: &mem.freed,
        locks64: &mem.locks64,
        cfg,
        nthreads,
        nwarps: nthreads.div_ceil(32),
        budget: config.instruction_budget,
        deadline: config.time_limit.map(|t| start + t),
        cancel,
        start,
        abort: AtomicBool::new(false),
        executed: AtomicU64::new(0),
        error: Mutex::new(None),
        workers,
        printed: Mutex::new(Vec::new()),
        heap: mem.heap.as_deref(),
        module,
        depth,
        workspace,
        children: Mutex::new(Vec::new()),
        buffers: Mutex::new(HashMap::new()),
        last_error: Mutex::new(HashMap::new()),
    };
    // The JIT's code when it takes the kernel (a cooperative grid's blocks wait for
    // each other: those are the interpreter's; so are global atomics on several host
    // threads, see `jit::Kernel::global_atomics`, and blocks its barriers' code does
    // not run, `jit::Kernel::runs_block`).
    let compiled = (config.engine == crate::Engine::Jit
        && workspace == 0
        && params.len() >= prog.param_size as usize)
        .then(|| jitrun::kernel(prog).ok())
        .flatten()
        .filter(|k| workers == 1 || !k.global_atomics || prog.combine_reds)
        .filter(|k| k.runs_block(cfg.block));
    let work = |l: &Launch, next: &AtomicU64, id: u32| match compiled {
        Some(k) => jitrun::worker(l, k, next, total, id),
        None => worker(l, next, total, id),
    };
    let next = AtomicU64::new(0);
    if workers == 1 {
        work(&l, &next, 0);
    } else {
        std::thread::scope(|s| {
            for id in 0..workers {
                let (l, next, work) = (&l, &next, &work);
                s.spawn(move || work(l, next, id));
            }
        });
    }
    fence(SeqCst);
    // What the kernel printed reaches the host when it ends, failed or not, as a GPU's
    // printf buffer does at the next synchronisation; then a failed assertion's line.
    let printed = l.printed.into_inner().unwrap_or_else(|e| e.into_inner());
    if !printed.is_empty() {
        (config.output.0)(OutputStream::Stdout, &printed);
    }
    // Buffers given out but never launched go back to the heap.
    let unused = l.buffers.into_inner().unwrap_or_else(|e| e.into_inner());
    if let Some(h) = l.heap {
        for &p in unused.keys() {
            h.free(p);
        }
    }
    *children = l.children.into_inner().unwrap_or_else(|e| e.into_inner());
    if let Some((_, e)) = l.error.into_inner().unwrap_or_else(|e| e.into_inner()) {
        if let SimError::Assert(_) = &e {
            (config.output.0)(OutputStream::Stderr, format!("{e}\n").as_bytes());
        }
        return Err(e);
    }
    Ok(LaunchReport {
        warp_instructions: l.executed.load(Relaxed),
        blocks: total.min(next.load(Relaxed)),
        elapsed: start.elapsed().max(Duration::from_nanos(1)),
        engine: if compiled.is_some() {
            crate::Engine::Jit
        } else {
            crate::Engine::Interpreter
        },
        lanes: compiled.map_or(FULL.count_ones(), |k| k.lanes),
    })
}

#[cfg(test)]
mod tests {
    //! The lane-affine forms against the operations they stand for: random tags (bases
    //! and strides near every wrap and sign boundary), the operation run on the rows and
    //! from the tags, the same lanes either way whenever the tags give a result.
    use super::*;

    struct Rng(u64);
    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }
        fn pick<T: Copy>(&mut self, v: &[T]) -> T {
            v[(self.next() % v.len() as u64) as usize]
        }
    }

    fn warp() -> Warp {
        Warp {
            regs: vec![0; 4 * 32],
            tags: vec![Tag::default(); 4],
            preds: vec![0; 2],
            stack: vec![],
            live: FULL,
            state: WState::Run,
            local: vec![],
            bar_pc: 0,
            carry: 0,
            red: 0,
            calls: vec![],
            fp: 0,
            top: 0,
        }
    }

    fn tag(r: &mut Rng, shift: bool) -> (u64, i64) {
        if shift && r.next().is_multiple_of(2) {
            return (r.next() % 70, 0);
        }
        let bases = [
            0u64,
            1,
            0x7f,
            0xff,
            0x7fff,
            0xffff,
            0x7fff_ffff,
            0x8000_0000,
            0xffff_ffff,
            0x1_0000_0000,
            0x7fff_ffff_ffff_ffff,
            0x8000_0000_0000_0000,
            u64::MAX,
        ];
        let strides = [
            0i64,
            1,
            2,
            4,
            8,
            -1,
            -4,
            64,
            1 << 16,
            1 << 32,
            -(1 << 32),
            1 << 40,
        ];
        let b = match r.next() % 3 {
            0 => r.next(),
            _ => r.pick(&bases).wrapping_add(r.next() % 80).wrapping_sub(40),
        };
        let s = match r.next() % 5 {
            0 => (r.next() as i64) >> (r.next() % 64),
            1 => 0,
            _ => r.pick(&strides),
        };
        (b, s)
    }

    /// Rows 1..=3 from `tags` (lane l: base + stride * l, wrapping), their tags read back
    /// from the rows; row 0 (the destination) garbage.
    fn setup(w: &mut Warp, tags: &[(u64, i64); 3], garbage: u64) {
        for (k, t) in tags.iter().enumerate() {
            let r = k + 1;
            for l in 0..32 {
                w.regs[r * 32 + l] = t.0.wrapping_add((t.1 as u64).wrapping_mul(l as u64));
            }
            w.detect(r as R);
        }
        for l in 0..32 {
            w.regs[l] = garbage.wrapping_mul(l as u64 + 1);
        }
        w.tags[0] = Tag::default();
        w.preds = vec![garbage as u32, (garbage >> 32) as u32];
    }

    fn check(rng: &mut Rng, op: Op, aff: Aff, hits: &mut u32) {
        let shift = matches!(aff, Aff::Shl { .. } | Aff::Shr { .. });
        for _ in 0..200 {
            let tags = [tag(rng, false), tag(rng, shift), tag(rng, false)];
            let garbage = rng.next();
            let (mut a, mut b) = (warp(), warp());
            setup(&mut a, &tags, garbage);
            setup(&mut b, &tags, garbage);
            let inst = Inst {
                op: op.clone(),
                guard: None,
                line: 0,
                aff,
                sem: Sem::None,
            };
            if !alu_affine(&inst, &mut a) {
                continue;
            }
            *hits += 1;
            match &op {
                Op::Bin(f, d, x, y) => f(&mut b.regs, *d as usize, *x as usize, *y as usize, FULL),
                Op::Ter(f, d, x, y, z) => f(
                    &mut b.regs,
                    *d as usize,
                    *x as usize,
                    *y as usize,
                    *z as usize,
                    FULL,
                ),
                Op::Mov(d, x, m) => {
                    for l in 0..32 {
                        b.regs[*d as usize * 32 + l] = b.regs[*x as usize * 32 + l] & m;
                    }
                }
                Op::Setp {
                    f,
                    d,
                    dn,
                    a: x,
                    b: y,
                    comb,
                } => {
                    let r = f(&b.regs, *x as usize, *y as usize);
                    setp_write(&mut b, *d, *dn, *comb, FULL, r);
                }
                _ => unreachable!(),
            }
            for r in 0..4 {
                a.materialize(r);
            }
            assert_eq!(a.regs, b.regs, "{aff:?} on {tags:x?}");
            assert_eq!(a.preds, b.preds, "{aff:?} on {tags:x?}");
        }
    }

    #[test]
    fn affine_forms_match_the_operations() {
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
        let mut hits = 0;
        macro_rules! ints {
            ($($t:ty),*) => {$(
                let bits = <$t>::BITS as u8;
                let signed = <$t>::MIN != 0;
                for d in [0, 1] {
                    check(&mut rng, Op::Bin(ops::add::<$t>, d, 1, 2),
                        Aff::Add { d, a: 1, b: 2, bits, sub: false }, &mut hits);
                    check(&mut rng, Op::Bin(ops::sub::<$t>, d, 1, 2),
                        Aff::Add { d, a: 1, b: 2, bits, sub: true }, &mut hits);
                    check(&mut rng, Op::Bin(ops::mul_lo::<$t>, d, 1, 2),
                        Aff::Mul { d, a: 1, b: 2, c: None, bits }, &mut hits);
                    check(&mut rng, Op::Ter(ops::mad_lo::<$t>, d, 1, 2, 3),
                        Aff::Mul { d, a: 1, b: 2, c: Some(3), bits }, &mut hits);
                    check(&mut rng, Op::Bin(ops::shl::<$t>, d, 1, 2),
                        Aff::Shl { d, a: 1, b: 2, bits }, &mut hits);
                    check(&mut rng, Op::Bin(ops::shr::<$t>, d, 1, 2),
                        Aff::Shr { d, a: 1, b: 2, bits, signed }, &mut hits);
                    check(&mut rng, Op::Mov(d, 1, if bits >= 64 { u64::MAX } else { (1u64 << bits) - 1 }),
                        Aff::Mov { d, a: 1, bits }, &mut hits);
                }
                check(&mut rng, Op::Setp { f: ops::cmp_int::<$t, 0>, d: 0, dn: Some(1), a: 1, b: 2, comb: None },
                    Aff::Cmp { bits, signed, code: 0 }, &mut hits);
                check(&mut rng, Op::Setp { f: ops::cmp_int::<$t, 1>, d: 0, dn: None, a: 1, b: 2, comb: Some((BoolOp::And, 1, true)) },
                    Aff::Cmp { bits, signed, code: 1 }, &mut hits);
                check(&mut rng, Op::Setp { f: ops::cmp_int::<$t, 2>, d: 0, dn: Some(1), a: 1, b: 2, comb: None },
                    Aff::Cmp { bits, signed, code: 2 }, &mut hits);
                check(&mut rng, Op::Setp { f: ops::cmp_int::<$t, 3>, d: 0, dn: None, a: 1, b: 2, comb: Some((BoolOp::Or, 1, false)) },
                    Aff::Cmp { bits, signed, code: 3 }, &mut hits);
                check(&mut rng, Op::Setp { f: ops::cmp_int::<$t, 4>, d: 0, dn: Some(1), a: 1, b: 2, comb: None },
                    Aff::Cmp { bits, signed, code: 4 }, &mut hits);
                check(&mut rng, Op::Setp { f: ops::cmp_int::<$t, 5>, d: 0, dn: None, a: 1, b: 2, comb: Some((BoolOp::Xor, 1, false)) },
                    Aff::Cmp { bits, signed, code: 5 }, &mut hits);
            )*};
        }
        ints!(u8, i8, u16, i16, u32, i32, u64, i64);
        macro_rules! wide {
            ($($t:ty),*) => {$(
                let bits = <$t>::BITS as u8;
                let signed = <$t>::MIN != 0;
                check(&mut rng, Op::Bin(ops::mul_wide::<$t>, 0, 1, 2),
                    Aff::MulWide { d: 0, a: 1, b: 2, bits, signed }, &mut hits);
            )*};
        }
        wide!(u16, i16, u32, i32);
        // Most cases take the affine path (the rest run on the rows).
        assert!(hits > 10_000, "{hits}");
    }
}
