//! The JIT against the interpreter: which kernels it takes (and which it leaves, by
//! their reason), the same results and the same fault reports from both engines, and
//! the budget, time limit and cancellation inside compiled loops.

use cuda_guest::sim::{
    bench::BENCH_PTX, CancelToken, DevicePtr, Engine, KernelArg, LaunchConfig, SimConfig, SimError,
    Simulator,
};
use std::time::Duration;

const HEADER: &str = ".version 7.0\n.target sm_80\n.address_size 64\n";

fn kernel(params: &str, body: &str) -> String {
    format!("{HEADER}.visible .entry k({params})\n{{\n{body}\n}}\n")
}

fn sim(engine: Engine, threads: usize) -> Simulator {
    Simulator::new(SimConfig {
        threads,
        engine,
        ..SimConfig::default()
    })
}

fn cfg(grid: u32, block: u32) -> LaunchConfig {
    LaunchConfig {
        grid: [grid, 1, 1],
        block: [block, 1, 1],
        shared_bytes: 0,
    }
}

fn words(s: &mut Simulator, p: DevicePtr, n: usize) -> Vec<u32> {
    let mut b = vec![0u8; 4 * n];
    s.memcpy_dtoh(&mut b, p).unwrap();
    b.chunks(4)
        .map(|c| u32::from_le_bytes(c.try_into().unwrap()))
        .collect()
}

/// Runs kernel `k` of `ptx` on `engine` over a buffer of `n` words (filled with `init`)
/// plus `extra` arguments: the launch's engine and result, and the buffer.
fn run_on(
    engine: Engine,
    ptx: &str,
    grid: u32,
    block: u32,
    n: usize,
    extra: &[KernelArg],
) -> (Result<Engine, String>, Vec<u32>) {
    let mut s = sim(engine, 1);
    let m = s.load_module("jit.ptx", ptx).unwrap();
    let buf = s.malloc(4 * n as u64).unwrap();
    let init: Vec<u8> = (0..n as u32)
        .flat_map(|i| (i.wrapping_mul(2654435761) >> 7).to_le_bytes())
        .collect();
    s.memcpy_htod(buf, &init).unwrap();
    let mut args = vec![KernelArg::Ptr(buf)];
    args.extend_from_slice(extra);
    let r = s
        .launch(&m, "k", cfg(grid, block), &args)
        .map(|r| r.engine)
        .map_err(|e| normalise(&e.to_string(), buf));
    s.reset();
    let out = words(&mut s, buf, n);
    (r, out)
}

/// How far below a buffer a wild address is still named from it.
const NEAR: u64 = 1 << 40;

/// A fault report with the simulator's own address tag (that of `buf`) named TAG, and
/// a wild address past it or below it in another window (the tag plus or less a
/// distance) written as `BUF+` or `BUF-` its distance from `buf`.
fn normalise(e: &str, buf: DevicePtr) -> String {
    // Each simulator's addresses carry its own tag: reports name it as TAG.
    let tag = format!("{:#x}", buf.0)[..6].to_string();
    let mut out = String::new();
    let mut rest = e;
    while let Some(i) = rest.find("address 0x") {
        let (head, tail) = rest.split_at(i + "address ".len());
        out += head;
        let len = tail[2..]
            .find(|c: char| !c.is_ascii_hexdigit())
            .map_or(tail.len(), |k| k + 2);
        let (hex, after) = tail.split_at(len);
        match u64::from_str_radix(&hex[2..], 16) {
            Ok(a) if a > buf.0 && !hex.starts_with(&tag) => {
                out += &format!("BUF+{:#x}", a - buf.0);
            }
            // (Below it, within the reach of a 32-bit index scaled by up to 256.)
            Ok(a) if (buf.0.saturating_sub(NEAR)..buf.0).contains(&a) && !hex.starts_with(&tag) => {
                out += &format!("BUF-{:#x}", buf.0 - a);
            }
            _ => out += hex,
        }
        rest = after;
    }
    out += rest;
    let e = out.replace(&tag, "TAG");
    // (and so does the distance of a wild address to them)
    match e.find(" bytes before allocation") {
        Some(i) => {
            let from = e[..i].rfind(' ').unwrap_or(i);
            format!("{} N{}", &e[..from], &e[i..])
        }
        None => e,
    }
}

/// Both engines: the same outcome (result or fault report, word for word) and the
/// same buffer; returns the engine the JIT run used.
fn same_on_both(ptx: &str, grid: u32, block: u32, n: usize, extra: &[KernelArg]) -> Engine {
    let (ri, bi) = run_on(Engine::Interpreter, ptx, grid, block, n, extra);
    let (rj, bj) = run_on(Engine::Jit, ptx, grid, block, n, extra);
    let ri = ri.map(|_| ());
    assert_eq!(ri, rj.clone().map(|_| ()), "{ptx}");
    if ri.is_ok() {
        let bad: Vec<String> = (0..n)
            .filter(|&i| bi[i] != bj[i])
            .take(8)
            .map(|i| format!("word {i}: {:#x} compiled, {:#x} interpreted", bj[i], bi[i]))
            .collect();
        assert!(bad.is_empty(), "{}\n{ptx}", bad.join("\n"));
    }
    rj.unwrap_or(Engine::Jit)
}

#[test]
fn the_jit_takes_the_bench_kernels_and_leaves_the_rest() {
    let mut s = sim(Engine::Jit, 1);
    let m = s.load_module("bench.ptx", BENCH_PTX).unwrap();
    let n = 4096u32;
    let bufs: Vec<DevicePtr> = (0..3).map(|_| s.malloc(4 * n as u64).unwrap()).collect();
    let p = |i: usize| KernelArg::Ptr(bufs[i]);
    let launch = |s: &mut Simulator, name: &str, grid: u32, args: &[KernelArg]| {
        s.launch(&m, name, cfg(grid, 256), args).unwrap().engine
    };
    let ni = KernelArg::I32(n as i32);
    assert_eq!(
        launch(&mut s, "vector_add", 16, &[p(0), p(1), p(2), ni.clone()]),
        Engine::Jit
    );
    assert_eq!(
        launch(
            &mut s,
            "saxpy",
            16,
            &[ni.clone(), KernelArg::F32(2.0), p(0), p(1)]
        ),
        Engine::Jit
    );
    assert_eq!(
        launch(&mut s, "reduce_sum", 8, &[p(0), p(1), ni.clone()]),
        Engine::Jit,
        "a kernel whose barriers every thread reaches is compiled"
    );
    // Global atomics: compiled on one host thread; on several compiled too when they are
    // reductions the engine combines per host thread (the histogram's), else
    // interpreted (contended atomics back to back from several cores each move a cache
    // line: `atomic_counter` below).
    let hist = [p(0), p(1), ni.clone(), KernelArg::U32(256)];
    assert_eq!(launch(&mut s, "histogram_atomic", 4, &hist), Engine::Jit);
    let mut two = sim(Engine::Jit, 2);
    let m2 = two.load_module("bench.ptx", BENCH_PTX).unwrap();
    let b2: Vec<DevicePtr> = (0..2).map(|_| two.malloc(4 * n as u64).unwrap()).collect();
    let r = two
        .launch(
            &m2,
            "histogram_atomic",
            cfg(4, 256),
            &[
                KernelArg::Ptr(b2[0]),
                KernelArg::Ptr(b2[1]),
                ni.clone(),
                KernelArg::U32(256),
            ],
        )
        .unwrap();
    assert_eq!(r.engine, Engine::Jit, "combined reductions on two threads");
    // A counter whose old values the threads keep: interpreted on several threads.
    let atomic_counter = kernel(
        ".param .u64 p",
        " .reg .b64 %rd<4>; .reg .b32 %r<4>;\n\
         ld.param.u64 %rd1, [p];\n\
         atom.global.add.u32 %r1, [%rd1], 1;\n\
         mov.u32 %r2, %tid.x; mul.wide.u32 %rd2, %r2, 4; add.s64 %rd3, %rd1, %rd2;\n\
         st.global.u32 [%rd3+4], %r1;\n\
         ret;",
    );
    let mc = two.load_module("counter.ptx", &atomic_counter).unwrap();
    let r = two
        .launch(&mc, "k", cfg(4, 32), &[KernelArg::Ptr(b2[0])])
        .unwrap();
    assert_eq!(
        r.engine,
        Engine::Interpreter,
        "atomics with results on two threads"
    );
    // The interpreter runs everything when asked to.
    let mut i = sim(Engine::Interpreter, 1);
    let m = i.load_module("bench.ptx", BENCH_PTX).unwrap();
    let b = i.malloc(4 * n as u64).unwrap();
    let r = i
        .launch(
            &m,
            "vector_add",
            cfg(16, 256),
            &[KernelArg::Ptr(b), KernelArg::Ptr(b), KernelArg::Ptr(b), ni],
        )
        .unwrap();
    assert_eq!(r.engine, Engine::Interpreter);
}

#[test]
fn code_that_needs_lanes_together_is_interpreted() {
    let body = |extra: &str| {
        kernel(
            ".param .u64 p",
            &format!(
                "  .reg .b64 %rd<4>;\n  .reg .b32 %r<4>;\n  ld.param.u64 %rd1, [p];\n  mov.u32 %r1, %tid.x;\n  mul.wide.u32 %rd2, %r1, 4;\n  add.s64 %rd3, %rd1, %rd2;\n{extra}\n  st.global.u32 [%rd3], %r1;\n  ret;"
            ),
        )
    };
    let plain = body("");
    assert_eq!(same_on_both(&plain, 2, 64, 128, &[]), Engine::Jit);
    for (extra, why) in [
        (
            "  bar.warp.sync -1;",
            "it has `bar.warp.sync` or loads or stores with a memory order",
        ),
        (
            "  ld.volatile.global.u32 %r2, [%rd3];",
            "it has `bar.warp.sync` or loads or stores with a memory order",
        ),
        (
            "  shfl.sync.down.b32 %r2, %r1, 1, 31, -1;",
            "a warp-wide operation (PTX line 12)",
        ),
        (
            "  .reg .pred %p<2>;\n  setp.lt.u32 %p1, %r1, 32;\n  @%p1 bra $X;\n  bar.sync 0;\n$X:",
            "a barrier inside a branch that may differ between threads (PTX line 15)",
        ),
        (
            "  activemask.b32 %r2;",
            "a warp-wide operation (PTX line 12)",
        ),
    ] {
        let ptx = body(extra);
        let m = sim(Engine::Jit, 1).load_module("w.ptx", &ptx).unwrap();
        assert_eq!(
            m.kernel("k").unwrap().jit(),
            Err(why.to_string()),
            "{extra}"
        );
        assert_eq!(
            same_on_both(&ptx, 2, 64, 128, &[]),
            Engine::Interpreter,
            "{extra}"
        );
    }
}

/// An arithmetic-dense kernel (many float or lane-function instructions per memory
/// access, run one lane at a time) stays the interpreter's, whose warp-wide loops are
/// vectorised; the same kernel with half the arithmetic is compiled. Float arithmetic
/// the JIT runs on four lanes at once does not count: a kernel dense with it is
/// compiled, four threads at a time. The results agree either way.
#[test]
fn arithmetic_dense_kernels_are_interpreted() {
    let dense = |op: &str, count: usize| {
        kernel(
            ".param .u64 p",
            &format!(
                "  .reg .b64 %rd<4>;\n  .reg .b32 %r<2>;\n  .reg .f32 %f<2>;\n  ld.param.u64 %rd1, [p];\n  mov.u32 %r1, %tid.x;\n  mul.wide.u32 %rd2, %r1, 4;\n  add.s64 %rd3, %rd1, %rd2;\n  ld.global.f32 %f1, [%rd3];\n{}  st.global.f32 [%rd3], %f1;\n  ret;",
                op.repeat(count)
            ),
        )
    };
    let ex2 = "  ex2.approx.ftz.f32 %f1, %f1;\n";
    let fma = "  fma.rn.f32 %f1, %f1, 0f3F000000, 0f3F800000;\n";
    let m = sim(Engine::Jit, 1)
        .load_module("d.ptx", &dense(ex2, 17))
        .unwrap();
    assert_eq!(
        m.kernel("k").unwrap().jit(),
        Err("arithmetic-dense (17 float or lane-function instructions, 2 memory accesses): the interpreter's warp-wide loops, vectorised, run it faster".to_string())
    );
    assert_eq!(
        same_on_both(&dense(ex2, 17), 2, 64, 128, &[]),
        Engine::Interpreter
    );
    assert_eq!(same_on_both(&dense(ex2, 16), 2, 64, 128, &[]), Engine::Jit);
    // Forty fused multiply-adds per two accesses, each on four lanes at once.
    assert_eq!(same_on_both(&dense(fma, 40), 2, 64, 128, &[]), Engine::Jit);
    let mut s = sim(Engine::Jit, 1);
    let m = s.load_module("d.ptx", &dense(fma, 40)).unwrap();
    let buf = s.malloc(4 * 128).unwrap();
    let r = s
        .launch(&m, "k", cfg(2, 64), &[KernelArg::Ptr(buf)])
        .unwrap();
    assert_eq!((r.engine, r.lanes), (Engine::Jit, 4));
}

/// Every kind of operation the JIT compiles, over values near every edge, against the
/// interpreter: integer arithmetic at each width and signedness, division by zero,
/// shifts past the width, float arithmetic with NaNs and infinities, comparisons,
/// conversions, predicates, vectors, sign-extending loads, generic, shared and local
/// addressing, and atomics.
#[test]
fn compiled_operations_agree_with_the_interpreter() {
    let ptx = kernel(
        ".param .u64 p",
        r#"  .reg .b64 %rd<40>;
  .reg .b32 %r<60>;
  .reg .b16 %h<8>;
  .reg .f32 %f<20>;
  .reg .f64 %fd<10>;
  .reg .pred %p<12>;
  .shared .align 8 .b8 sm[2048];
  .local .align 8 .b8 loc[64];
  ld.param.u64 %rd1, [p];
  mov.u32 %r1, %tid.x;
  mov.u32 %r2, %ctaid.x;
  mov.u32 %r3, %ntid.x;
  mad.lo.s32 %r4, %r2, %r3, %r1;
  mul.wide.u32 %rd2, %r4, 64;
  add.s64 %rd3, %rd1, %rd2;
  ld.global.u32 %r5, [%rd3];
  ld.global.u32 %r6, [%rd3+4];
  ld.global.v2.u32 {%r7, %r8}, [%rd3+8];
  ld.global.u64 %rd4, [%rd3+16];
  ld.global.s16 %r9, [%rd3+2];
  ld.global.s8 %r10, [%rd3+5];
  ld.global.u8 %r11, [%rd3+7];
  // integer arithmetic
  add.s32 %r12, %r5, %r6;
  sub.u32 %r13, %r5, %r6;
  mul.lo.s32 %r14, %r5, %r7;
  mul.hi.s32 %r15, %r5, %r7;
  mul.hi.u32 %r16, %r5, %r7;
  mad.lo.u32 %r17, %r5, %r6, %r7;
  mul.wide.s32 %rd5, %r5, %r9;
  div.s32 %r18, %r5, %r10;
  rem.s32 %r19, %r5, %r10;
  div.u32 %r20, %r6, %r11;
  rem.u32 %r21, %r6, %r11;
  div.s64 %rd6, %rd4, %rd5;
  rem.u64 %rd7, %rd4, %rd5;
  and.b32 %r22, %r5, %r6;
  or.b32 %r23, %r5, %r7;
  xor.b32 %r24, %r6, %r7;
  not.b32 %r25, %r8;
  min.s32 %r26, %r5, %r9;
  max.u32 %r27, %r5, %r6;
  min.s64 %rd8, %rd4, %rd5;
  and.b32 %r28, %r8, 63;
  shl.b32 %r29, %r5, %r28;
  shr.s32 %r30, %r6, %r28;
  shr.u32 %r31, %r7, %r28;
  shl.b64 %rd9, %rd4, %r28;
  shr.s64 %rd10, %rd4, %r28;
  neg.s32 %r32, %r10;
  abs.s32 %r33, %r9;
  popc.b32 %r34, %r5;
  clz.b32 %r35, %r6;
  brev.b32 %r36, %r7;
  bfe.u32 %r37, %r5, %r11, 7;
  prmt.b32 %r38, %r5, %r6, %r7;
  lop3.b32 %r39, %r5, %r6, %r7, 0x96;
  cvt.u16.u32 %h1, %r5;
  cvt.u32.u16 %r40, %h1;
  add.u16 %h2, %h1, %h1;
  cvt.s32.s16 %r41, %h2;
  mov.b64 %rd11, {%r5, %r6};
  mov.b64 {%r42, %r43}, %rd4;
  // floats: the words as f32, some NaN, infinite or subnormal
  mov.b32 %f1, %r5;
  mov.b32 %f2, %r6;
  mov.b32 %f3, %r7;
  add.f32 %f4, %f1, %f2;
  sub.f32 %f5, %f1, %f3;
  mul.f32 %f6, %f2, %f3;
  div.rn.f32 %f7, %f1, %f2;
  fma.rn.f32 %f8, %f1, %f2, %f3;
  mul.ftz.f32 %f9, %f1, %f3;
  min.f32 %f10, %f1, %f2;
  sqrt.rn.f32 %f11, %f6;
  abs.f32 %f12, %f5;
  neg.f32 %f13, %f4;
  cvt.rni.s32.f32 %r44, %f4;
  cvt.rzi.u32.f32 %r45, %f6;
  cvt.rmi.s32.f32 %r46, %f8;
  cvt.rn.f32.s32 %f14, %r5;
  cvt.rn.f32.u32 %f15, %r6;
  cvt.f64.f32 %fd1, %f1;
  mov.b64 %fd2, %rd4;
  add.f64 %fd3, %fd1, %fd2;
  fma.rn.f64 %fd4, %fd2, %fd1, %fd3;
  div.rn.f64 %fd5, %fd4, %fd1;
  cvt.rn.f32.f64 %f16, %fd5;
  cvt.rzi.s32.f64 %r47, %fd3;
  cvt.rn.f64.s32 %fd6, %r9;
  cvt.s64.s32 %rd12, %r9;
  cvt.u64.u32 %rd13, %r9;
  cvt.u32.u64 %r48, %rd4;
  // comparisons and predicates
  setp.lt.s32 %p1, %r5, %r6;
  setp.lo.u32 %p2, %r5, %r6;
  setp.gtu.f32 %p3, %f1, %f2;
  setp.nan.f32 %p4, %f1, %f3;
  setp.ge.f64 %p5, %fd1, %fd2;
  setp.ne.and.s32 %p6, %r7, 0, %p1;
  setp.eq.or.u64 %p7|%p8, %rd4, %rd5, %p3;
  and.pred %p9, %p2, %p4;
  or.pred %p10, %p5, %p8;
  xor.pred %p11, %p9, %p10;
  selp.b32 %r49, %r5, %r6, %p11;
  selp.u32 %r50, 1, 0, %p6;
  selp.u32 %r51, 1, 0, %p7;
  @%p1 add.s32 %r49, %r49, 1;
  @!%p3 sub.s32 %r50, %r50, 1;
  // shared (through a generic pointer too) and local memory
  shl.b32 %r52, %r1, 3;
  mov.u32 %r53, sm;
  add.s32 %r54, %r53, %r52;
  st.shared.v2.u32 [%r54], {%r12, %r13};
  cvta.shared.u64 %rd14, sm;
  cvt.u64.u32 %rd15, %r52;
  add.s64 %rd16, %rd14, %rd15;
  ld.u32 %r55, [%rd16+4];
  atom.shared.add.u32 %r56, [%r53], 1;
  mov.u64 %rd17, loc;
  cvta.local.u64 %rd18, %rd17;
  and.b32 %r57, %r5, 7;
  mul.wide.u32 %rd19, %r57, 4;
  add.s64 %rd20, %rd18, %rd19;
  st.u32 [%rd20], %r14;
  ld.local.u32 %r58, [loc+12];
  ld.u32 %r59, [%rd20];
  add.s64 %rd30, %rd1, 24576;
  atom.global.add.u32 %r57, [%rd30], 3;
  atom.global.max.s32 %r57, [%rd30+4], %r5;
  atom.global.cas.b32 %r57, [%rd30+8], %r6, %r7;
  atom.global.inc.u32 %r57, [%rd30+12], 1000;
  // results, 16 words per thread
  st.global.v4.u32 [%rd3], {%r12, %r13, %r14, %r15};
  st.global.v4.u32 [%rd3+16], {%r16, %r17, %r18, %r19};
  xor.b32 %r20, %r20, %r21;
  xor.b32 %r22, %r22, %r23;
  xor.b32 %r24, %r24, %r25;
  xor.b32 %r26, %r26, %r27;
  st.global.v4.u32 [%rd3+32], {%r20, %r22, %r24, %r26};
  xor.b32 %r29, %r29, %r30;
  xor.b32 %r31, %r31, %r32;
  xor.b32 %r33, %r33, %r34;
  xor.b32 %r35, %r35, %r36;
  st.global.v4.u32 [%rd3+48], {%r29, %r31, %r33, %r35};
  // the rest folded into the first word of the next block of 64 bytes' mirror:
  // a second buffer region past every thread's (written by each thread at its slot)
  mov.b32 %r20, %f4;
  mov.b32 %r21, %f5;
  xor.b32 %r20, %r20, %r21;
  mov.b32 %r21, %f6;
  xor.b32 %r20, %r20, %r21;
  mov.b32 %r21, %f7;
  xor.b32 %r20, %r20, %r21;
  mov.b32 %r21, %f8;
  xor.b32 %r20, %r20, %r21;
  mov.b32 %r21, %f9;
  xor.b32 %r20, %r20, %r21;
  mov.b32 %r21, %f10;
  xor.b32 %r20, %r20, %r21;
  mov.b32 %r21, %f11;
  xor.b32 %r20, %r20, %r21;
  mov.b32 %r21, %f12;
  xor.b32 %r20, %r20, %r21;
  mov.b32 %r21, %f13;
  xor.b32 %r20, %r20, %r21;
  mov.b32 %r21, %f14;
  xor.b32 %r20, %r20, %r21;
  mov.b32 %r21, %f15;
  xor.b32 %r20, %r20, %r21;
  mov.b32 %r21, %f16;
  xor.b32 %r20, %r20, %r21;
  xor.b32 %r20, %r20, %r37;
  xor.b32 %r20, %r20, %r38;
  xor.b32 %r20, %r20, %r39;
  xor.b32 %r20, %r20, %r40;
  xor.b32 %r20, %r20, %r41;
  xor.b32 %r20, %r20, %r42;
  xor.b32 %r20, %r20, %r43;
  xor.b32 %r20, %r20, %r44;
  xor.b32 %r20, %r20, %r45;
  xor.b32 %r20, %r20, %r46;
  xor.b32 %r20, %r20, %r47;
  xor.b32 %r20, %r20, %r48;
  xor.b32 %r20, %r20, %r49;
  xor.b32 %r20, %r20, %r50;
  xor.b32 %r20, %r20, %r51;
  xor.b32 %r20, %r20, %r55;
  xor.b32 %r20, %r20, %r56;
  xor.b32 %r20, %r20, %r58;
  xor.b32 %r20, %r20, %r59;
  mov.b64 {%r21, %r22}, %rd5;
  xor.b32 %r20, %r20, %r21;
  xor.b32 %r20, %r20, %r22;
  mov.b64 {%r21, %r22}, %rd6;
  xor.b32 %r20, %r20, %r21;
  xor.b32 %r20, %r20, %r22;
  mov.b64 {%r21, %r22}, %rd7;
  xor.b32 %r20, %r20, %r21;
  xor.b32 %r20, %r20, %r22;
  mov.b64 {%r21, %r22}, %rd8;
  xor.b32 %r20, %r20, %r21;
  xor.b32 %r20, %r20, %r22;
  mov.b64 {%r21, %r22}, %rd9;
  xor.b32 %r20, %r20, %r21;
  xor.b32 %r20, %r20, %r22;
  mov.b64 {%r21, %r22}, %rd10;
  xor.b32 %r20, %r20, %r21;
  xor.b32 %r20, %r20, %r22;
  mov.b64 {%r21, %r22}, %rd11;
  xor.b32 %r20, %r20, %r21;
  xor.b32 %r20, %r20, %r22;
  mov.b64 {%r21, %r22}, %rd12;
  xor.b32 %r20, %r20, %r21;
  xor.b32 %r20, %r20, %r22;
  mov.b64 {%r21, %r22}, %rd13;
  xor.b32 %r20, %r20, %r21;
  xor.b32 %r20, %r20, %r22;
  mov.b64 {%r21, %r22}, %fd3;
  xor.b32 %r20, %r20, %r21;
  xor.b32 %r20, %r20, %r22;
  mov.b64 {%r21, %r22}, %fd4;
  xor.b32 %r20, %r20, %r21;
  xor.b32 %r20, %r20, %r22;
  mov.b64 {%r21, %r22}, %fd6;
  xor.b32 %r20, %r20, %r21;
  xor.b32 %r20, %r20, %r22;
  st.global.u32 [%rd3+60], %r20;
  ret;"#,
    );
    // 4 blocks of 96 threads (a partial warp in each), 16 words each, then the words
    // the global atomics update.
    let n = 4 * 96 * 16;
    assert_eq!(same_on_both(&ptx, 4, 96, n + 4, &[]), Engine::Jit);
}

/// Faults in compiled code: the interpreter's report, word for word.
#[test]
fn compiled_faults_are_reported_as_the_interpreter_reports_them() {
    let access = |inst: &str| {
        kernel(
            ".param .u64 p, .param .u64 off",
            &format!(
                "  .reg .b64 %rd<6>;\n  .reg .b32 %r<4>;\n  .shared .align 4 .b8 sm[64];\n  .local .align 4 .b8 loc[16];\n  ld.param.u64 %rd1, [p];\n  ld.param.u64 %rd2, [off];\n  mov.u32 %r1, %tid.x;\n  mov.u32 %r2, %ctaid.x;\n  mad.lo.u32 %r1, %r2, 40, %r1;\n  mul.wide.u32 %rd3, %r1, 4;\n  add.s64 %rd4, %rd1, %rd3;\n  add.s64 %rd4, %rd4, %rd2;\n  cvt.u32.u64 %r2, %rd2;\n  mul.lo.u32 %r3, %r1, 4;\n  add.u32 %r3, %r3, %r2;\n{inst}\n  ret;"
            ),
        )
    };
    let cases: [(&str, u64); 10] = [
        // Past the end of the buffer (the 64th thread of the second block).
        ("  st.global.u32 [%rd4], %r1;", 0),
        ("  ld.global.u32 %r1, [%rd4];", 8),
        // Misaligned.
        ("  ld.global.u32 %r1, [%rd4];", 2),
        // Null and wild.
        ("  ld.global.u32 %r1, [%rd2];", 0),
        ("  st.u32 [%rd2], %r1;", 0x1234_5678_0000),
        // Shared and local out of bounds, through their windows and generic.
        ("  st.shared.u32 [%r3], %r1;", 0),
        ("  ld.local.u32 %r1, [%r3];", 0),
        ("  atom.global.add.u32 %r1, [%rd4], 1;", 4),
        ("  atom.global.exch.b32 %r1, [%rd4], 1;", 2),
        // A store to a kernel parameter.
        (
            "  mov.u64 %rd5, p;\n  cvta.param.u64 %rd5, %rd5;\n  st.u64 [%rd5], %rd1;",
            0,
        ),
    ];
    for (inst, off) in cases {
        let ptx = access(inst);
        let m = sim(Engine::Jit, 1).load_module("f.ptx", &ptx).unwrap();
        assert_eq!(m.kernel("k").unwrap().jit(), Ok(()), "{inst}");
        // 2 blocks of 40 threads over 64 words: the second block runs past the end.
        let (ri, _) = run_on(Engine::Interpreter, &ptx, 2, 40, 64, &[KernelArg::U64(off)]);
        let (rj, _) = run_on(Engine::Jit, &ptx, 2, 40, 64, &[KernelArg::U64(off)]);
        let ri = ri.expect_err(inst);
        let rj = rj.expect_err(inst);
        assert_eq!(rj, ri, "{inst} at offset {off}");
    }
}

/// `ptx`'s kernel `k` on one block of `block` threads, compiled, with a budget of
/// 200,000 warp instructions it exceeds: the instructions counted and the PTX line
/// where it stopped (and the simulator, its error sticky until reset).
fn budget_stop(ptx: &str, block: u32) -> (u64, u32, Simulator) {
    let mut s = Simulator::new(SimConfig {
        threads: 1,
        instruction_budget: 200_000,
        time_limit: None,
        engine: Engine::Jit,
        ..SimConfig::default()
    });
    let m = s.load_module("spin.ptx", ptx).unwrap();
    let b = s.malloc(4).unwrap();
    let e = s
        .launch(&m, "k", cfg(1, block), &[KernelArg::Ptr(b)])
        .unwrap_err();
    let SimError::Timeout {
        reason,
        warp_instructions,
        line,
        ..
    } = &e
    else {
        panic!("{e}")
    };
    assert_eq!(*reason, "instruction budget");
    (*warp_instructions, *line, s)
}

/// A compiled loop that never ends stops at the budget, the time limit or a
/// cancellation, as an interpreted one does.
#[test]
fn compiled_loops_stop_at_the_budget_the_time_limit_and_cancellation() {
    let ptx = kernel(
        ".param .u64 p",
        "  .reg .b32 %r<3>;\n  .reg .pred %p<2>;\n  mov.u32 %r1, 1;\nL:\n  add.u32 %r1, %r1, 2;\n  setp.ne.u32 %p1, %r1, 0;\n  @%p1 bra L;\n  ret;",
    );
    let (warp_instructions, line, _) = budget_stop(&ptx, 32);
    assert!(
        warp_instructions > 200_000 && warp_instructions <= 200_000 + 4096 + 32,
        "{warp_instructions}"
    );
    assert_eq!(line, 12, "the loop's branch, where compiled code checks");
    // A loop each round of which waits at a barrier (in the four-lane code, a phase a
    // round): the budget is checked as each phase ends.
    let bars = kernel(
        ".param .u64 p",
        "  .reg .b32 %r<3>;\n  .reg .pred %p<2>;\n  mov.u32 %r1, 1;\nL:\n  bar.sync 0;\n  add.u32 %r1, %r1, 2;\n  setp.ne.u32 %p1, %r1, 0;\n  @%p1 bra L;\n  ret;",
    );
    let (warp_instructions, line, mut s) = budget_stop(&bars, 64);
    assert!(
        warp_instructions > 200_000 && warp_instructions <= 200_000 + 4096 + 256,
        "{warp_instructions}"
    );
    assert_eq!(line, 0, "the phase's end, where compiled code checks");
    // (The compiled code's: ten rounds of the same loop run there.)
    s.reset();
    let b = s.malloc(4).unwrap();
    let m = s
        .load_module("bars10.ptx", &bars.replace("%r1, 0;", "%r1, 21;"))
        .unwrap();
    let r = s.launch(&m, "k", cfg(1, 64), &[KernelArg::Ptr(b)]).unwrap();
    assert_eq!(r.engine, Engine::Jit);
    // The time limit, on two threads with several blocks.
    let mut s = Simulator::new(SimConfig {
        threads: 2,
        time_limit: Some(Duration::from_millis(100)),
        engine: Engine::Jit,
        ..SimConfig::default()
    });
    let m = s.load_module("spin.ptx", &ptx).unwrap();
    let b = s.malloc(4).unwrap();
    let e = s
        .launch(&m, "k", cfg(4, 64), &[KernelArg::Ptr(b)])
        .unwrap_err();
    let SimError::Timeout {
        reason, elapsed, ..
    } = &e
    else {
        panic!("{e}")
    };
    assert_eq!(*reason, "time limit");
    assert!(*elapsed >= Duration::from_millis(100));
    // Cancellation from another thread.
    let token = CancelToken::new();
    let mut s = Simulator::with_cancel(
        SimConfig {
            threads: 1,
            time_limit: None,
            engine: Engine::Jit,
            ..SimConfig::default()
        },
        token.clone(),
    );
    let m = s.load_module("spin.ptx", &ptx).unwrap();
    let b = s.malloc(4).unwrap();
    let canceller = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(50));
        token.cancel();
    });
    let e = s
        .launch(&m, "k", cfg(1, 32), &[KernelArg::Ptr(b)])
        .unwrap_err();
    canceller.join().unwrap();
    assert!(
        matches!(&e, SimError::Timeout { reason, .. } if *reason == "cancelled"),
        "{e}"
    );
}

/// Reductions (global atomics whose result nothing reads) that a host thread combines
/// and applies after its last block (`Program::combine_reds`) give the exact totals
/// on every engine and thread count, and a thread reads its own reduction back.
#[test]
fn combined_reductions_are_exact_and_visible_to_their_thread() {
    // Each of 64 blocks x 128 threads adds 1 to bins[tid % 8] (atom with a result never
    // read), `red.add` 3 to bins[8], and keeps the largest tid in bins[9] (red.max).
    let hist = kernel(
        ".param .u64 p",
        " .reg .b64 %rd<6>; .reg .b32 %r<8>;\n\
         ld.param.u64 %rd1, [p];\n\
         mov.u32 %r1, %ctaid.x; mov.u32 %r2, %ntid.x; mov.u32 %r3, %tid.x;\n\
         mad.lo.s32 %r4, %r1, %r2, %r3; and.b32 %r5, %r4, 7;\n\
         mul.wide.u32 %rd2, %r5, 4; add.s64 %rd3, %rd1, %rd2;\n\
         atom.global.add.u32 %r6, [%rd3], 1;\n\
         red.global.add.u32 [%rd1+32], 3;\n\
         red.global.max.s32 [%rd1+36], %r4;\n\
         ret;",
    );
    // One thread, twice: reads the word, then red.add 5 to it; the second read (the same
    // load instruction, whose compiled fast path knows the allocation by then) sees the
    // first reduction.
    let own = kernel(
        ".param .u64 p",
        " .reg .b64 %rd<4>; .reg .b32 %r<4>; .reg .pred %p<2>;\n\
         ld.param.u64 %rd1, [p];\n\
         mov.u32 %r3, 0;\n\
         $L: ld.global.u32 %r1, [%rd1];\n\
         red.global.add.u32 [%rd1], 5;\n\
         add.u32 %r3, %r3, 1; setp.lt.u32 %p1, %r3, 2; @%p1 bra $L;\n\
         st.global.u32 [%rd1+4], %r1;\n\
         ret;",
    );
    for engine in [Engine::Interpreter, Engine::Jit] {
        for threads in [1, 2, 4] {
            let mut s = sim(engine, threads);
            let m = s.load_module("reds.ptx", &hist).unwrap();
            let buf = s.malloc(40).unwrap();
            s.memcpy_htod(buf, &[0u8; 40]).unwrap();
            s.launch(&m, "k", cfg(64, 128), &[KernelArg::Ptr(buf)])
                .unwrap();
            let w = words(&mut s, buf, 10);
            assert_eq!(&w[..8], &[1024; 8], "{engine:?} on {threads} threads");
            assert_eq!(w[8], 3 * 64 * 128, "{engine:?} on {threads} threads");
            assert_eq!(w[9], 64 * 128 - 1, "{engine:?} on {threads} threads");

            let m = s.load_module("own.ptx", &own).unwrap();
            let buf = s.malloc(8).unwrap();
            s.memcpy_htod(buf, &7u32.to_le_bytes().repeat(2)).unwrap();
            s.launch(&m, "k", cfg(1, 1), &[KernelArg::Ptr(buf)])
                .unwrap();
            assert_eq!(
                words(&mut s, buf, 2),
                [17, 12],
                "{engine:?} on {threads} threads"
            );
        }
    }
}

/// A thread's own reduction is visible to its full-warp load of the word (the
/// interpreter's fast path for 32 consecutive words) on several host threads.
#[test]
fn combined_reductions_are_visible_to_a_warps_consecutive_load() {
    // out[i] = 7; red.add out[i], 5; in[i] = out[i] for 64 blocks x 32 threads.
    let k = kernel(
        ".param .u64 p",
        " .reg .b64 %rd<6>; .reg .b32 %r<8>;\n\
         ld.param.u64 %rd1, [p];\n\
         mov.u32 %r1, %ctaid.x; mov.u32 %r2, %ntid.x; mov.u32 %r3, %tid.x;\n\
         mad.lo.s32 %r4, %r1, %r2, %r3;\n\
         mul.wide.u32 %rd2, %r4, 4; add.s64 %rd3, %rd1, %rd2;\n\
         red.global.add.u32 [%rd3], 5;\n\
         ld.global.u32 %r5, [%rd3];\n\
         st.global.u32 [%rd3+8192], %r5;\n\
         ret;",
    );
    for engine in [Engine::Interpreter, Engine::Jit] {
        let mut s = sim(engine, 2);
        let m = s.load_module("own.ptx", &k).unwrap();
        let buf = s.malloc(16384).unwrap();
        s.memcpy_htod(buf, &7u32.to_le_bytes().repeat(4096))
            .unwrap();
        s.launch(&m, "k", cfg(64, 32), &[KernelArg::Ptr(buf)])
            .unwrap();
        let w = words(&mut s, buf, 4096);
        assert!(w[..2048].iter().all(|&x| x == 12), "{engine:?}: the words");
        assert!(
            w[2048..].iter().all(|&x| x == 12),
            "{engine:?}: what each thread read"
        );
    }
}

/// Every combinable reduction (add, signed min, xor, or, and) on words that share
/// slots of a host thread's table (4096 words in 1024 slots: held words are applied
/// when another takes their slot, and compiled code combines into its slot inline only
/// when that holds the same word and operation) gives the exact results on both
/// engines and 1 to 4 host threads.
#[test]
fn combined_reductions_of_every_kind_are_exact_when_words_share_slots() {
    let k = kernel(
        ".param .u64 p, .param .u64 q",
        " .reg .b64 %rd<8>; .reg .b32 %r<16>;\n\
         ld.param.u64 %rd1, [p]; ld.param.u64 %rd2, [q];\n\
         mov.u32 %r1, %ctaid.x; mov.u32 %r2, %ntid.x; mov.u32 %r3, %tid.x;\n\
         mad.lo.s32 %r4, %r1, %r2, %r3;\n\
         mul.lo.u32 %r5, %r4, 37; and.b32 %r5, %r5, 4095;\n\
         mul.wide.u32 %rd3, %r5, 4; add.s64 %rd3, %rd1, %rd3;\n\
         red.global.add.u32 [%rd3], 1;\n\
         and.b32 %r6, %r4, 15; mul.wide.u32 %rd4, %r6, 4; add.s64 %rd4, %rd2, %rd4;\n\
         mul.lo.s32 %r7, %r4, 7; sub.s32 %r7, %r7, 20000;\n\
         red.global.min.s32 [%rd4], %r7;\n\
         and.b32 %r8, %r4, 7; mul.wide.u32 %rd5, %r8, 4; add.s64 %rd5, %rd2, %rd5;\n\
         red.global.xor.b32 [%rd5+64], %r4;\n\
         mov.u32 %r11, 1; and.b32 %r9, %r4, 31; shl.b32 %r10, %r11, %r9;\n\
         red.global.or.b32 [%rd5+96], %r10;\n\
         rem.u32 %r12, %r4, 29; shl.b32 %r13, %r11, %r12; not.b32 %r13, %r13;\n\
         red.global.and.b32 [%rd5+128], %r13;\n\
         ret;",
    );
    let (blocks, block) = (64u32, 128u32);
    let mut counts = vec![0u32; 4096];
    let mut other = [i32::MAX as u32; 16]
        .into_iter()
        .chain([0; 16])
        .chain([u32::MAX; 8])
        .collect::<Vec<u32>>();
    let initial = other.clone();
    for g in 0..blocks * block {
        counts[(g.wrapping_mul(37) & 4095) as usize] += 1;
        let m = &mut other[(g & 15) as usize];
        *m = (*m as i32).min((g as i32) * 7 - 20000) as u32;
        other[16 + (g & 7) as usize] ^= g;
        other[24 + (g & 7) as usize] |= 1 << (g & 31);
        other[32 + (g & 7) as usize] &= !(1 << (g % 29));
    }
    for engine in [Engine::Interpreter, Engine::Jit] {
        for threads in [1, 2, 4] {
            let mut s = sim(engine, threads);
            let m = s.load_module("kinds.ptx", &k).unwrap();
            let (p, q) = (s.malloc(16384).unwrap(), s.malloc(160).unwrap());
            s.memcpy_htod(p, &[0u8; 16384]).unwrap();
            let bytes: Vec<u8> = initial.iter().flat_map(|w| w.to_le_bytes()).collect();
            s.memcpy_htod(q, &bytes).unwrap();
            let r = s
                .launch(
                    &m,
                    "k",
                    cfg(blocks, block),
                    &[KernelArg::Ptr(p), KernelArg::Ptr(q)],
                )
                .unwrap();
            assert_eq!(r.engine, engine, "the engine that ran it");
            let what = format!("{engine:?} on {threads} threads");
            assert_eq!(words(&mut s, p, 4096), counts, "{what}: the counts");
            assert_eq!(words(&mut s, q, 40), other, "{what}: min, xor, or, and");
        }
    }
}

// The four-lane code (`jit/vector.rs`): groups of four consecutive threads of a block
// run together, part where their branches or accesses disagree, and the threads past
// the last full group run one at a time. Each kernel below is checked against the
// interpreter (and where simple, against values computed here), and must have run
// four threads at a time, on one host thread and (but for atomics with results) on two.

/// A small deterministic generator of test data (xorshift64*).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    fn word(&mut self) -> u32 {
        (self.next() >> 32) as u32
    }
    fn words(&mut self, n: usize) -> Vec<u32> {
        (0..n).map(|_| self.word()).collect()
    }
    /// One of `pool`, or (one time in `random_one_in`) a random value.
    fn pick(&mut self, pool: &[u64], random_one_in: u64) -> u64 {
        if self.below(random_one_in) == 0 {
            self.next()
        } else {
            pool[self.below(pool.len() as u64) as usize]
        }
    }
    /// A random permutation of `0..n`.
    fn permutation(&mut self, n: usize) -> Vec<u32> {
        let mut p: Vec<u32> = (0..n as u32).collect();
        for i in (1..n).rev() {
            p.swap(i, self.below(i as u64 + 1) as usize);
        }
        p
    }
}

fn cfg3(grid: [u32; 3], block: [u32; 3]) -> LaunchConfig {
    LaunchConfig {
        grid,
        block,
        shared_bytes: 0,
    }
}

/// u64 values as the pairs of words that hold them.
fn pairs(v: &[u64]) -> Vec<u32> {
    v.iter()
        .flat_map(|&x| [x as u32, (x >> 32) as u32])
        .collect()
}

/// What a launch did on one engine: its engine and lanes, or its error report (its
/// addresses normalised as [`normalise`] does).
type Outcome = Result<(Engine, u32), String>;

/// A launch of kernel `k` of `ptx` with a buffer per entry of `bufs` (holding its words)
/// as the first arguments, then `extra`.
struct Launch<'a> {
    ptx: &'a str,
    config: LaunchConfig,
    bufs: &'a [Vec<u32>],
    extra: &'a [KernelArg],
}

impl Launch<'_> {
    /// Runs the launch on `engine` (on `threads` host threads): the outcome, and each
    /// buffer's words afterwards.
    fn on(&self, engine: Engine, threads: usize) -> (Outcome, Vec<Vec<u32>>) {
        let mut s = sim(engine, threads);
        let m = s.load_module("lanes.ptx", self.ptx).unwrap();
        let ptrs: Vec<DevicePtr> = self
            .bufs
            .iter()
            .map(|b| {
                let p = s.malloc(4 * b.len() as u64).unwrap();
                let bytes: Vec<u8> = b.iter().flat_map(|w| w.to_le_bytes()).collect();
                s.memcpy_htod(p, &bytes).unwrap();
                p
            })
            .collect();
        let mut args: Vec<KernelArg> = ptrs.iter().map(|&p| KernelArg::Ptr(p)).collect();
        args.extend_from_slice(self.extra);
        let r = s
            .launch(&m, "k", self.config, &args)
            .map(|r| (r.engine, r.lanes))
            .map_err(|e| normalise(&e.to_string(), ptrs[0]));
        s.reset();
        let out = ptrs
            .iter()
            .zip(self.bufs)
            .map(|(&p, b)| words(&mut s, p, b.len()))
            .collect();
        (r, out)
    }

    /// Both engines on the same buffers, the JIT on each of `jit_threads` host threads:
    /// the same outcome (a fault report word for word) and, when the launch succeeds,
    /// the same words bit for bit, and the JIT ran the kernel four threads at a time.
    /// Returns the buffers (after the last JIT run), or the fault report.
    fn agree_on(&self, jit_threads: &[usize]) -> Agreed {
        let (ri, bi) = self.on(Engine::Interpreter, 1);
        let mut last = None;
        for &threads in jit_threads {
            let (rj, bj) = self.on(Engine::Jit, threads);
            let what = format!(
                "{:?}, the JIT on {threads} host threads\n{}",
                self.config, self.ptx
            );
            assert_eq!(
                rj.clone().map(|_| ()),
                ri.clone().map(|_| ()),
                "the JIT's outcome (left), the interpreter's (right): {what}"
            );
            if let Ok(r) = &ri {
                assert_eq!(*r, (Engine::Interpreter, 32), "{what}");
                assert_eq!(
                    rj.clone().unwrap(),
                    (Engine::Jit, 4),
                    "the JIT's engine and lanes: {what}"
                );
                for (b, (wj, wi)) in bj.iter().zip(&bi).enumerate() {
                    let bad: Vec<String> = (0..wi.len())
                        .filter(|&i| wj[i] != wi[i])
                        .take(8)
                        .map(|i| {
                            format!(
                                "buffer {b} word {i}: {:#x} compiled, {:#x} interpreted",
                                wj[i], wi[i]
                            )
                        })
                        .collect();
                    assert!(bad.is_empty(), "{}\n{what}", bad.join("\n"));
                }
            }
            last = Some(rj.map(|_| bj));
        }
        last.expect("a JIT run")
    }
}

/// The buffers after a launch on which both engines agree, or its fault report.
type Agreed = Result<Vec<Vec<u32>>, String>;

/// [`Launch::agree_on`] with the JIT on one host thread and on two.
fn agree(ptx: &str, config: LaunchConfig, bufs: &[Vec<u32>], extra: &[KernelArg]) -> Agreed {
    Launch {
        ptx,
        config,
        bufs,
        extra,
    }
    .agree_on(&[1, 2])
}

/// [`agree`] on a kernel over the `n` elements of `x` (and any padding past them) that
/// writes `y` (zeroed first), with `n` the third argument: `y` afterwards.
fn agree_xy(ptx: &str, grid: u32, block: u32, x: &[u32], n: u32) -> Vec<u32> {
    let bufs = [x.to_vec(), vec![0; n as usize]];
    let mut out = agree(ptx, cfg(grid, block), &bufs, &[KernelArg::U32(n)]).unwrap();
    out.swap_remove(1)
}

/// Kernel `k` with the parameters `params` (each `type name register`, `;` between them,
/// loaded into its register; a `ptr` is a u64 made a global address by
/// `cvta.to.global`), the registers `regs` (such as `%rd<8> %r<9> %f<5> %fd<3> %p<2>`),
/// then `body`.
fn kernel_of(params: &str, regs: &str, body: &str) -> String {
    fn ty(t: &str) -> &str {
        if t == "ptr" {
            "u64"
        } else {
            t
        }
    }
    let params: Vec<[&str; 3]> = params
        .split(';')
        .map(|p| {
            let p: Vec<&str> = p.split_whitespace().collect();
            [p[0], p[1], p[2]]
        })
        .collect();
    let mut lines: Vec<String> = regs
        .split_whitespace()
        .map(|r| {
            let kind = match &r[1..r.find('<').unwrap()] {
                "rd" => "b64",
                "r" => "b32",
                "f" => "f32",
                "fd" => "f64",
                "p" => "pred",
                other => panic!("registers %{other}"),
            };
            format!("  .reg .{kind} {r};")
        })
        .collect();
    for [t, name, reg] in &params {
        lines.push(format!("  ld.param.{} {reg}, [{name}];", ty(t)));
    }
    for [_, _, reg] in params.iter().filter(|p| p[0] == "ptr") {
        lines.push(format!("  cvta.to.global.u64 {reg}, {reg};"));
    }
    lines.push(body.to_string());
    let decls: Vec<String> = params
        .iter()
        .map(|[t, name, _]| format!(".param .{} {name}", ty(t)))
        .collect();
    kernel(&decls.join(", "), &lines.join("\n"))
}

/// The index computation of the kernels below: %r5 = %ctaid.x * %ntid.x + %tid.x
/// (%r4 = %tid.x).
const GID: &str = "  mov.u32 %r2, %ctaid.x;
  mov.u32 %r3, %ntid.x;
  mov.u32 %r4, %tid.x;
  mad.lo.s32 %r5, %r2, %r3, %r4;";

/// A kernel (of [`kernel_of`], with `params` and `regs`) over the `n` (%r1) elements of
/// global arrays `x` and `y` (%rd1, %rd2): each thread's index %r5 of [`GID`], the
/// threads at or past `n` going to `$END` (the kernel's `ret`), %rd3 the element's byte
/// offset and %rd4, %rd5 the addresses of `x[%r5]` and `y[%r5]`; then `body`.
fn elementwise(params: &str, regs: &str, body: &str) -> String {
    kernel_of(
        params,
        regs,
        &format!(
            "{GID}
  setp.ge.u32 %p1, %r5, %r1;
  @%p1 bra $END;
  mul.wide.u32 %rd3, %r5, 4;
  add.s64 %rd4, %rd1, %rd3;
  add.s64 %rd5, %rd2, %rd3;
{body}
$END:
  ret;"
        ),
    )
}

/// A guarded saxpy (`y = a x + y` in f32) and vector add (`z = x + z` on the words)
/// over blocks of 1, 3, 5, 37 and 130 threads (none a multiple of four) and element
/// counts that end inside a group of four: the four-lane code, the
/// interpreter and the values computed here agree, and nothing past `n` is written;
/// with the guard as a branch over the body and as a guarded `ret`.
#[test]
fn four_lanes_with_odd_block_sizes_and_counts_agree() {
    let saxpy = |guard: &str| {
        kernel_of(
            "ptr px %rd1; ptr py %rd2; ptr pz %rd3; u32 n %r1; f32 a %f1",
            "%rd<8> %r<9> %f<5> %p<2>",
            &format!(
                "{GID}
  setp.ge.s32 %p1, %r5, %r1;
{guard}
  mul.wide.s32 %rd4, %r5, 4;
  add.s64 %rd5, %rd1, %rd4;
  add.s64 %rd6, %rd2, %rd4;
  add.s64 %rd7, %rd3, %rd4;
  ld.global.f32 %f2, [%rd5];
  ld.global.f32 %f3, [%rd6];
  fma.rn.f32 %f4, %f1, %f2, %f3;
  st.global.f32 [%rd6], %f4;
  ld.global.u32 %r6, [%rd5];
  ld.global.u32 %r7, [%rd7];
  add.s32 %r8, %r6, %r7;
  st.global.u32 [%rd7], %r8;
$DONE:
  ret;"
            ),
        )
    };
    let mut rng = Rng(0x5eed_0001);
    let a = 1.5f32;
    let float = |rng: &mut Rng| ((rng.below(2_000_000) as f32) - 1e6) / 1024.0;
    for guard in ["  @%p1 bra $DONE;", "  @%p1 ret;"] {
        let ptx = saxpy(guard);
        for block in [1u32, 3, 5, 37, 130] {
            let grid = 3;
            let mut counts = vec![grid * block - 1, 2 * block + 1, grid * block];
            counts.retain(|&n| n >= 1 && n <= grid * block);
            counts.dedup();
            for n in counts {
                let len = (grid * block) as usize + 6;
                let x: Vec<u32> = (0..len).map(|_| float(&mut rng).to_bits()).collect();
                let y: Vec<u32> = (0..len).map(|_| float(&mut rng).to_bits()).collect();
                let z = rng.words(len);
                let bufs = [x.clone(), y.clone(), z.clone()];
                let args = [KernelArg::U32(n), KernelArg::F32(a)];
                let out = agree(&ptx, cfg(grid, block), &bufs, &args).unwrap();
                let n = n as usize;
                let want_y: Vec<u32> = (0..len)
                    .map(|i| {
                        if i < n {
                            a.mul_add(f32::from_bits(x[i]), f32::from_bits(y[i]))
                                .to_bits()
                        } else {
                            y[i]
                        }
                    })
                    .collect();
                let want_z: Vec<u32> = (0..len)
                    .map(|i| if i < n { x[i].wrapping_add(z[i]) } else { z[i] })
                    .collect();
                let what = format!("{guard}: block {block}, n {n}");
                assert_eq!(out[0], x, "{what}: x");
                assert_eq!(out[1], want_y, "{what}: y");
                assert_eq!(out[2], want_z, "{what}: z");
            }
        }
    }
}

/// Branches on the loaded values (an if/else on each word's parity, then a float
/// if/else on its top bits; random words, so a group's lanes mostly disagree, and
/// a run of even words where they agree), with a register every write of which is a
/// constant but whose value depends on the thread's path: the four-lane code, the
/// interpreter and the values computed here agree.
#[test]
fn four_lanes_part_on_data_dependent_branches() {
    let ptx = elementwise(
        "ptr px %rd1; ptr py %rd2; u32 n %r1",
        "%rd<6> %r<12> %f<3> %p<4>",
        "  ld.global.u32 %r6, [%rd4];
  mov.u32 %r9, 3;
  and.b32 %r7, %r6, 1;
  setp.eq.u32 %p2, %r7, 0;
  @%p2 bra $EVEN;
  mad.lo.u32 %r8, %r6, 3, 1;
  mov.u32 %r9, 7;
  bra $JOIN;
$EVEN:
  shr.u32 %r8, %r6, 1;
$JOIN:
  shr.u32 %r10, %r6, 9;
  or.b32 %r10, %r10, 1065353216;
  mov.b32 %f1, %r10;
  setp.lt.f32 %p3, %f1, 0f3FC00000;
  @!%p3 bra $BIG;
  mul.f32 %f2, %f1, 0f40000000;
  bra $F;
$BIG:
  sub.f32 %f2, %f1, 0f3F800000;
$F:
  mov.b32 %r11, %f2;
  add.u32 %r8, %r8, %r9;
  xor.b32 %r8, %r8, %r11;
  st.global.u32 [%rd5], %r8;",
    );
    let mut rng = Rng(0x5eed_0002);
    let n = 1000u32;
    let mut x = rng.words(n as usize);
    for w in &mut x[..64] {
        *w &= !1;
    }
    let want: Vec<u32> = x
        .iter()
        .map(|&v| {
            let (a, b) = if v & 1 == 1 {
                (v.wrapping_mul(3).wrapping_add(1), 7)
            } else {
                (v >> 1, 3)
            };
            let f = f32::from_bits((v >> 9) | 0x3f80_0000);
            let g = if f < 1.5 { f * 2.0 } else { f - 1.0 };
            a.wrapping_add(b) ^ g.to_bits()
        })
        .collect();
    for (grid, block) in [(11, 96), (28, 37)] {
        assert_eq!(
            agree_xy(&ptx, grid, block, &x, n),
            want,
            "blocks of {block}"
        );
    }
}

/// Lanes that part come together again where their branch reconverges, and go on four
/// at a time: nested if/else on the loaded word's bits (the inner one inside one arm),
/// a loop of per-thread length before a join, then 64-bit values and a predicate set
/// before the branches and used after them, and a uniform loop after the joins. The
/// four-lane code, the interpreter and the values computed here agree.
#[test]
fn four_lanes_come_together_where_branches_reconverge() {
    let ptx = elementwise(
        "ptr px %rd1; ptr py %rd2; u32 n %r1",
        "%rd<10> %r<16> %p<8>",
        "  ld.global.u32 %r6, [%rd4];
  cvt.u64.u32 %rd6, %r6;
  shl.b64 %rd7, %rd6, 20;
  setp.gt.u32 %p5, %r6, 2147483647;
  and.b32 %r7, %r6, 3;
  mov.u32 %r8, 0;
  setp.eq.u32 %p2, %r7, 0;
  @%p2 bra $A;
  and.b32 %r9, %r6, 4;
  setp.ne.u32 %p3, %r9, 0;
  @%p3 bra $B;
  add.u32 %r8, %r8, 11;
  bra $C;
$B:
  add.u32 %r8, %r8, 13;
$C:
  add.u32 %r8, %r8, 100;
  bra $J;
$A:
  shr.u32 %r10, %r6, 28;
$L:
  setp.eq.u32 %p4, %r10, 0;
  @%p4 bra $J;
  add.u32 %r8, %r8, %r10;
  sub.u32 %r10, %r10, 1;
  bra $L;
$J:
  mov.u32 %r11, 0;
  mov.u32 %r12, 0;
$U:
  add.u32 %r11, %r11, %r8;
  add.u32 %r12, %r12, 1;
  setp.lt.u32 %p6, %r12, 3;
  @%p6 bra $U;
  add.s64 %rd8, %rd7, %rd6;
  shr.u64 %rd9, %rd8, 17;
  cvt.u32.u64 %r13, %rd9;
  selp.u32 %r14, 1000000, 0, %p5;
  add.u32 %r15, %r11, %r13;
  add.u32 %r15, %r15, %r14;
  st.global.u32 [%rd5], %r15;",
    );
    let mut rng = Rng(0x5eed_0009);
    let n = 1000u32;
    let x = rng.words(n as usize);
    let want: Vec<u32> = x
        .iter()
        .map(|&v| {
            let r8 = if v & 3 != 0 {
                100 + if v & 4 != 0 { 13 } else { 11 }
            } else {
                (1..=v >> 28).sum::<u32>()
            };
            let r13 = ((((v as u64) << 20) + v as u64) >> 17) as u32;
            let r14 = if v > 0x7fff_ffff { 1_000_000 } else { 0 };
            (3 * r8).wrapping_add(r13).wrapping_add(r14)
        })
        .collect();
    for (grid, block) in [(4, 256), (9, 117)] {
        assert_eq!(agree_xy(&ptx, grid, block, &x, n), want, "block {block}");
    }
}

/// Loops whose trip counts differ between threads: one the same for a group's four
/// lanes (`(tid / 4) % 4 + 1` iterations, each loading a word), one of `tid % 7`
/// iterations (the lanes part at its branch), and one as long as the loaded word's
/// trailing zero bits: the four-lane code, the interpreter and the values computed here
/// agree.
#[test]
fn four_lanes_part_in_loops_of_per_thread_length() {
    let ptx = elementwise(
        "ptr px %rd1; ptr py %rd2; u32 n %r1",
        "%rd<8> %r<16> %p<7>",
        "  ld.global.u32 %r6, [%rd4];
  shr.u32 %r7, %r4, 2;
  and.b32 %r7, %r7, 3;
  add.u32 %r7, %r7, 1;
  mov.u32 %r8, 0;
  mov.u32 %r9, %r6;
$L1:
  mul.wide.u32 %rd6, %r8, 4;
  add.s64 %rd7, %rd4, %rd6;
  ld.global.u32 %r10, [%rd7];
  mad.lo.u32 %r9, %r9, 31, %r10;
  add.u32 %r8, %r8, 1;
  setp.lt.u32 %p2, %r8, %r7;
  @%p2 bra $L1;
  rem.u32 %r11, %r4, 7;
  mov.u32 %r12, 0;
  setp.eq.u32 %p3, %r11, 0;
  @%p3 bra $L3;
$L2:
  xor.b32 %r9, %r9, %r12;
  shl.b32 %r9, %r9, 1;
  add.u32 %r9, %r9, %r11;
  add.u32 %r12, %r12, 1;
  setp.lt.u32 %p4, %r12, %r11;
  @%p4 bra $L2;
$L3:
  or.b32 %r13, %r6, 65536;
  mov.u32 %r14, 0;
$L4:
  and.b32 %r15, %r13, 1;
  setp.ne.u32 %p5, %r15, 0;
  @%p5 bra $OUT;
  shr.u32 %r13, %r13, 1;
  add.u32 %r14, %r14, 1;
  bra $L4;
$OUT:
  shl.b32 %r14, %r14, 24;
  xor.b32 %r9, %r9, %r14;
  xor.b32 %r9, %r9, %r13;
  st.global.u32 [%rd5], %r9;",
    );
    let mut rng = Rng(0x5eed_0003);
    let n = 700u32;
    // Four words of padding for the first loop's loads.
    let x = rng.words(n as usize + 4);
    for (grid, block) in [(8, 96), (19, 37)] {
        let want: Vec<u32> = (0..n)
            .map(|g| {
                let (i, tid) = (g as usize, g % block);
                let mut acc = x[i];
                for j in 0..(tid >> 2 & 3) + 1 {
                    acc = acc.wrapping_mul(31).wrapping_add(x[i + j as usize]);
                }
                let t2 = tid % 7;
                for j in 0..t2 {
                    acc = ((acc ^ j) << 1).wrapping_add(t2);
                }
                let v = x[i] | 65536;
                let tz = v.trailing_zeros();
                acc ^ (tz << 24) ^ (v >> tz)
            })
            .collect();
        assert_eq!(
            agree_xy(&ptx, grid, block, &x, n),
            want,
            "blocks of {block}"
        );
    }
}

/// Accesses whose four addresses are not consecutive: a gather `y[i] = x[perm[i]]` and
/// a scatter `y[perm[i]] = x[i]` through a random permutation and through one that is
/// the identity but for a few swaps (some groups consecutive, some not); a load every
/// thread makes from the same address (`x[0]`, the allocation's last word, a
/// sign-extending `ld.global.s32` into a 64-bit register, a u64), one the same within
/// each group (`x[i & !3]`); loads and stores of stride 2; a reversed load; u64 loads
/// and stores; a load and a store under per-lane predicates; and a load whose
/// allocation alternates between groups of four, or between pairs of lanes in a group.
/// The four-lane code, the interpreter and the values computed here agree.
#[test]
fn four_lanes_gather_scatter_and_broadcast() {
    // The alternating allocations: `y[i] = x[i]`, or `perm[i]` where bit `bit` of `i`
    // is set (2 for groups of four, 1 for pairs of lanes).
    fn alternating(bit: u32, x: &[u32], p: &[u32], y: &mut [u32]) {
        for i in 0..p.len() {
            y[i] = if (i >> bit) & 1 == 0 { x[i] } else { p[i] };
        }
    }
    let alternate = |bit: u32| {
        format!(
            "  shr.u32 %r6, %r5, {bit};
  and.b32 %r6, %r6, 1;
  setp.eq.u32 %p2, %r6, 0;
  selp.b64 %rd7, %rd1, %rd9, %p2;
  add.s64 %rd8, %rd7, %rd3;
  ld.global.u32 %r7, [%rd8];
  st.global.u32 [%rd5], %r7;"
        )
    };
    let (by_group, by_pair) = (alternate(2), alternate(1));
    // Through the permutation: `y[i] = x[perm[i]]` (a gather, %rd8 the address of
    // element `perm[i]` of `x`) or `y[perm[i]] = x[i]` (a scatter, %rd8 that of `y`).
    let permuted = |array: &str, from: &str, to: &str| {
        format!(
            "  ld.global.u32 %r6, [%rd6];
  mul.wide.u32 %rd7, %r6, 4;
  add.s64 %rd8, {array}, %rd7;
  ld.global.u32 %r7, [{from}];
  st.global.u32 [{to}], %r7;"
        )
    };
    let gather = permuted("%rd1", "%rd8", "%rd5");
    let scatter = permuted("%rd2", "%rd4", "%rd8");
    type Want = fn(&[u32], &[u32], &mut [u32]);
    let cases: [(&str, &str, Want); 10] = [
        ("gather", &gather, |x, p, y| {
            for i in 0..p.len() {
                y[i] = x[p[i] as usize];
            }
        }),
        ("scatter", &scatter, |x, p, y| {
            for i in 0..p.len() {
                y[p[i] as usize] = x[i];
            }
        }),
        (
            "broadcast",
            "  ld.global.u32 %r6, [%rd1];
  ld.global.u32 %r7, [%rd4];
  add.u32 %r7, %r7, %r6;
  and.b32 %r8, %r5, -4;
  mul.wide.u32 %rd7, %r8, 4;
  add.s64 %rd8, %rd1, %rd7;
  ld.global.u32 %r9, [%rd8];
  xor.b32 %r7, %r7, %r9;
  shl.b32 %r10, %r1, 1;
  sub.u32 %r10, %r10, 1;
  mul.wide.u32 %rd10, %r10, 4;
  add.s64 %rd11, %rd1, %rd10;
  ld.global.u32 %r11, [%rd11];
  add.u32 %r7, %r7, %r11;
  ld.global.s32 %rd12, [%rd1+4];
  shr.u64 %rd12, %rd12, 32;
  cvt.u32.u64 %r12, %rd12;
  xor.b32 %r7, %r7, %r12;
  ld.global.u64 %rd13, [%rd1+8];
  shr.u64 %rd14, %rd13, 7;
  cvt.u32.u64 %r13, %rd14;
  add.u32 %r7, %r7, %r13;
  st.global.u32 [%rd5], %r7;",
            |x, p, y| {
                let n = p.len();
                let sext = (x[1] as i32 as i64 as u64 >> 32) as u32;
                let long = (x[2] as u64 | (x[3] as u64) << 32) >> 7;
                for i in 0..n {
                    y[i] = ((x[i].wrapping_add(x[0]) ^ x[i & !3]).wrapping_add(x[2 * n - 1])
                        ^ sext)
                        .wrapping_add(long as u32);
                }
            },
        ),
        (
            "predicated",
            "  ld.global.u32 %r6, [%rd6];
  and.b32 %r7, %r6, 1;
  setp.eq.u32 %p2, %r7, 0;
  mov.u32 %r8, 12345;
  @%p2 ld.global.u32 %r8, [%rd4];
  add.u32 %r8, %r8, %r6;
  @!%p2 st.global.u32 [%rd5], %r8;
  xor.b32 %r9, %r8, %r5;
  add.u32 %r9, %r9, 1;
  shl.b32 %r9, %r9, 2;
  mul.wide.u32 %rd7, %r1, 4;
  add.s64 %rd8, %rd5, %rd7;
  st.global.u32 [%rd8], %r9;",
            |x, p, y| {
                for i in 0..p.len() {
                    let v = if p[i] & 1 == 0 { x[i] } else { 12345 }.wrapping_add(p[i]);
                    if p[i] & 1 == 1 {
                        y[i] = v;
                    }
                    y[p.len() + i] = (v ^ i as u32).wrapping_add(1) << 2;
                }
            },
        ),
        (
            "stride-2 loads",
            "  mul.wide.u32 %rd7, %r5, 8;
  add.s64 %rd8, %rd1, %rd7;
  ld.global.u32 %r6, [%rd8];
  ld.global.u32 %r7, [%rd8+4];
  sub.u32 %r6, %r6, %r7;
  st.global.u32 [%rd5], %r6;",
            |x, p, y| {
                for i in 0..p.len() {
                    y[i] = x[2 * i].wrapping_sub(x[2 * i + 1]);
                }
            },
        ),
        (
            "stride-2 stores",
            "  ld.global.u32 %r6, [%rd4];
  mul.wide.u32 %rd7, %r5, 8;
  add.s64 %rd8, %rd2, %rd7;
  st.global.u32 [%rd8+4], %r6;",
            |x, p, y| {
                for i in 0..p.len() {
                    y[2 * i + 1] = x[i];
                }
            },
        ),
        (
            "reversed",
            "  sub.u32 %r6, %r1, 1;
  sub.u32 %r6, %r6, %r5;
  mul.wide.u32 %rd7, %r6, 4;
  add.s64 %rd8, %rd1, %rd7;
  ld.global.u32 %r7, [%rd8];
  st.global.u32 [%rd5], %r7;",
            |x, p, y| {
                let n = p.len();
                for i in 0..n {
                    y[i] = x[n - 1 - i];
                }
            },
        ),
        (
            "u64",
            "  mul.wide.u32 %rd7, %r5, 8;
  add.s64 %rd8, %rd1, %rd7;
  ld.global.u64 %rd10, [%rd8];
  shl.b64 %rd11, %rd10, 3;
  add.s64 %rd11, %rd11, %rd10;
  add.s64 %rd12, %rd2, %rd7;
  st.global.u64 [%rd12], %rd11;",
            |x, p, y| {
                for i in 0..p.len() {
                    let v = x[2 * i] as u64 | (x[2 * i + 1] as u64) << 32;
                    let v = v.wrapping_mul(9);
                    y[2 * i] = v as u32;
                    y[2 * i + 1] = (v >> 32) as u32;
                }
            },
        ),
        ("allocation by group", &by_group, |x, p, y| {
            alternating(2, x, p, y)
        }),
        ("allocation by pair", &by_pair, |x, p, y| {
            alternating(1, x, p, y)
        }),
    ];
    let kernel_for = |body: &str| {
        elementwise(
            "ptr px %rd1; ptr py %rd2; ptr pp %rd9; u32 n %r1",
            "%rd<16> %r<16> %p<4>",
            &format!("  add.s64 %rd6, %rd9, %rd3;\n{body}"),
        )
    };
    let mut rng = Rng(0x5eed_0004);
    let n = 301usize;
    // x and y hold 2n words (stride 2), the permutation n.
    let x = rng.words(2 * n);
    let y0 = rng.words(2 * n);
    let random = rng.permutation(n);
    let mut nearly: Vec<u32> = (0..n as u32).collect();
    for _ in 0..6 {
        let (a, b) = (rng.below(n as u64) as usize, rng.below(n as u64) as usize);
        nearly.swap(a, b);
    }
    let args = [KernelArg::U32(n as u32)];
    for (name, body, want) in cases {
        let ptx = kernel_for(body);
        for perm in [&random, &nearly] {
            let bufs = [x.clone(), y0.clone(), perm.clone()];
            let mut y = y0.clone();
            want(&x, perm, &mut y);
            for (grid, block) in [(5, 64), (9, 37)] {
                let out = agree(&ptx, cfg(grid, block), &bufs, &args).unwrap();
                assert_eq!(out[1], y, "{name}, blocks of {block}");
            }
        }
    }
}

/// A fault in one lane of a group (or of a thread past the last group): a load or a
/// store of 4 or 8 bytes (all lanes' or, lane by lane, under a predicate only thread
/// `bad` has) that thread `bad` makes `far` bytes from its own element
/// (past the end, before the start, misaligned, wild), or that all four lanes of its
/// group make at one address, and the last group's lanes 2 and 3 running past a
/// buffer's end. The fault report is the interpreter's word for word, and without a
/// fault (or with the odd access inside the buffer) the kernel runs four threads at a
/// time with the interpreter's results.
#[test]
fn four_lanes_report_a_single_lanes_fault_as_the_interpreter_does() {
    // The odd access: a load, a store, or (lane by lane in the four-lane code) a load
    // or a store under the predicate only thread `bad` has.
    // Or a load whose four lanes share one address: their group's first element's, `far`
    // bytes off in the group of thread `bad` (the others store what they load).
    let kinds = [
        "load",
        "store",
        "guarded load",
        "guarded store",
        "group load",
    ];
    let access = |size: u32, kind: &str| {
        let (bits, r) = if size == 4 { (32, "%r6") } else { (64, "%rd7") };
        let ld = |a: &str| format!("  ld.global.u{bits} {r}, [{a}];");
        let st = |a: &str| format!("  st.global.u{bits} [{a}], {r};");
        let inc = format!("  add.u{bits} {r}, {r}, 1;");
        let insts = match kind {
            "load" => vec![ld("%rd6"), inc, st("%rd4")],
            "store" => vec![ld("%rd4"), inc, st("%rd6")],
            "guarded load" => vec![
                ld("%rd4"),
                format!("  @%p1{}", &ld("%rd6")[1..]),
                inc,
                st("%rd4"),
            ],
            "guarded store" => vec![
                ld("%rd4"),
                inc,
                st("%rd4"),
                format!("  @%p1{}", &st("%rd6")[1..]),
            ],
            _ => vec![
                "  and.b32 %r7, %r5, -4;".into(),
                "  and.b32 %r8, %r1, -4;".into(),
                "  setp.eq.u32 %p2, %r7, %r8;".into(),
                "  selp.b64 %rd8, %rd2, 0, %p2;".into(),
                format!("  mul.wide.u32 %rd9, %r7, {size};"),
                "  add.s64 %rd9, %rd1, %rd9;".into(),
                "  add.s64 %rd9, %rd9, %rd8;".into(),
                ld("%rd9"),
                inc,
                // (not the group's first thread: no element a group loads is written)
                "  setp.ne.u32 %p2, %r7, %r5;".into(),
                format!("  @%p2{}", &st("%rd4")[1..]),
            ],
        }
        .join("\n");
        kernel_of(
            "ptr p %rd1; u32 bad %r1; u64 far %rd2",
            "%rd<10> %r<9> %p<3>",
            &format!(
                "{GID}
  mul.wide.u32 %rd3, %r5, {size};
  add.s64 %rd4, %rd1, %rd3;
  setp.eq.u32 %p1, %r5, %r1;
  selp.b64 %rd5, %rd2, 0, %p1;
  add.s64 %rd6, %rd4, %rd5;
{insts}
  ret;"
            ),
        )
    };
    let mut rng = Rng(0x5eed_0005);
    let none = u32::MAX;
    for size in [4u32, 8] {
        for kind in kinds {
            let ptx = access(size, kind);
            let what = format!("{size}-byte {kind}");
            // 2 blocks of 40 threads (ten groups each), or of 42 (two threads alone).
            for block in [40u32, 42] {
                let threads = 2 * block;
                // Each thread's element, then two no thread touches (but the odd one).
                let end = (threads * size) as i64;
                let buf = rng.words((threads + 2) as usize * size as usize / 4);
                let run = |bad: u32, far: i64, len: usize| {
                    let args = [KernelArg::U32(bad), KernelArg::U64(far as u64)];
                    agree(&ptx, cfg(2, block), &[buf[..len].to_vec()], &args)
                };
                run(none, 0, buf.len()).unwrap();
                // Lane 2 of the second group, of the second block's second group, and
                // the first block's last thread (alone in blocks of 42).
                for bad in [6, block + 6, block - 1] {
                    // The element the odd access is `far` bytes from.
                    let first = if kind == "group load" { bad & !3 } else { bad };
                    let own = (first * size) as i64;
                    // Inside the buffer: the first element past the threads'.
                    run(bad, end - own, buf.len()).unwrap();
                    let past = end + 2 * size as i64 - own;
                    for far in [past, -own - 8, 2, 0x1234_5678_0000] {
                        let e = run(bad, far, buf.len()).expect_err(&what);
                        assert!(!e.is_empty());
                    }
                }
                // The last group's lanes 2 and 3 (blocks of 40) past the end.
                let short = (threads - 2) as usize * size as usize / 4;
                run(none, 0, short).expect_err(&what);
            }
        }
    }
}

/// Blocks of two and three dimensions, whose x extent is a multiple of four (a group
/// of four is one row's: the four-lane code takes its addresses for consecutive) or
/// not (a group would span rows: the compiled code runs one thread at a time): each
/// thread's index from %tid.x/y/z, %ntid.x/y and %ctaid.x/y, guarded against the
/// array's width and height. The compiled code, the interpreter and the values
/// computed here agree.
#[test]
fn four_lanes_in_blocks_of_two_and_three_dimensions() {
    let ptx = kernel_of(
        "ptr px %rd1; ptr py %rd2; u32 w %r1; u32 h %r2",
        "%rd<6> %r<16> %p<2>",
        "  mov.u32 %r3, %tid.x;
  mov.u32 %r4, %tid.y;
  mov.u32 %r5, %tid.z;
  mov.u32 %r6, %ntid.x;
  mov.u32 %r7, %ntid.y;
  mov.u32 %r8, %ctaid.x;
  mov.u32 %r9, %ctaid.y;
  mad.lo.s32 %r10, %r8, %r6, %r3;
  mad.lo.s32 %r11, %r9, %r7, %r4;
  setp.ge.u32 %p1, %r10, %r1;
  setp.ge.or.u32 %p1, %r11, %r2, %p1;
  @%p1 bra $END;
  mad.lo.s32 %r12, %r5, %r2, %r11;
  mad.lo.s32 %r12, %r12, %r1, %r10;
  mul.wide.u32 %rd3, %r12, 4;
  add.s64 %rd4, %rd1, %rd3;
  add.s64 %rd5, %rd2, %rd3;
  ld.global.u32 %r13, [%rd4];
  shl.b32 %r14, %r4, 8;
  or.b32 %r14, %r14, %r3;
  shl.b32 %r15, %r5, 16;
  or.b32 %r14, %r14, %r15;
  shl.b32 %r15, %r9, 20;
  xor.b32 %r14, %r14, %r15;
  shl.b32 %r15, %r8, 26;
  xor.b32 %r14, %r14, %r15;
  mad.lo.u32 %r13, %r13, 3, %r14;
  st.global.u32 [%rd5], %r13;
$END:
  ret;",
    );
    let mut rng = Rng(0x5eed_0006);
    for (grid, block, w, h) in [
        ([3, 2, 1], [6, 4, 1], 17, 7),
        ([4, 2, 1], [3, 5, 1], 11, 10),
        ([3, 4, 1], [3, 2, 3], 8, 7),
        ([2, 3, 1], [7, 3, 1], 14, 9),
        ([2, 2, 1], [8, 3, 1], 13, 5),
        ([3, 2, 1], [4, 2, 3], 10, 4),
    ] {
        let len = (w * h * block[2]) as usize;
        let x = rng.words(len);
        let mut want = vec![0u32; len];
        for z in 0..block[2] {
            for gy in 0..h {
                for gx in 0..w {
                    let i = ((z * h + gy) * w + gx) as usize;
                    let (cx, tx) = (gx / block[0], gx % block[0]);
                    let (cy, ty) = (gy / block[1], gy % block[1]);
                    let tag = (ty << 8 | tx | z << 16) ^ cy << 20 ^ cx << 26;
                    want[i] = x[i].wrapping_mul(3).wrapping_add(tag);
                }
            }
        }
        let args = [KernelArg::U32(w), KernelArg::U32(h)];
        let out = agree(&ptx, cfg3(grid, block), &[x, vec![0; len]], &args).unwrap();
        assert_eq!(out[1], want, "blocks of {block:?}");
    }
}

/// An index `%tid.x + ctaid * ntid + k` (32 bits) widened by `mul.wide` (unsigned, or
/// signed) makes consecutive addresses the four-lane code takes without testing them
/// at the access, once it has tested at the `mul.wide` that no lane's index wrapped
/// past 32 bits: with `k` far from the edge the result is every element's; where a
/// group's index wraps (unsigned past 2^32, signed past 2^31), its lanes' addresses
/// are no longer consecutive and the fault reports are the interpreter's.
#[test]
fn four_lanes_test_widened_indices_for_wrapping() {
    for (wide, edge) in [("u32", 1u64 << 32), ("s32", 1 << 31)] {
        let ptx = kernel_of(
            "u64 px %rd1; u64 py %rd2; u32 k %r1; u64 back %rd3",
            "%rd<11> %r<8> %p<2>",
            &format!(
                "{GID}
  setp.ge.u32 %p1, %r5, 100000;
  @%p1 bra $END;
  add.s32 %r6, %r5, %r1;
  mul.wide.{wide} %rd4, %r6, 4;
  sub.s64 %rd5, %rd4, %rd3;
  cvta.to.global.u64 %rd9, %rd1;
  add.s64 %rd6, %rd9, %rd5;
  ld.global.u32 %r7, [%rd6];
  cvta.to.global.u64 %rd10, %rd2;
  add.s64 %rd7, %rd10, %rd5;
  xor.b32 %r7, %r7, %r5;
  st.global.u32 [%rd7], %r7;
$END:
  ret;"
            ),
        );
        let mut rng = Rng(0x5eed_0015);
        // (Two blocks: one faults, so that the report is the same on two host threads.)
        let (grid, block) = (2u32, 64u32);
        let n = (grid * block) as usize;
        let x = rng.words(n);
        // Far from the edge: every thread's element (the index less `back`).
        let k = 0x1000_0000u32;
        let args = [KernelArg::U32(k), KernelArg::U64(4 * u64::from(k))];
        let out = agree(&ptx, cfg(grid, block), &[x.clone(), vec![0; n]], &args).unwrap();
        let want: Vec<u32> = x.iter().enumerate().map(|(i, &v)| v ^ i as u32).collect();
        assert_eq!(out[1], want, "mul.wide.{wide}");
        // The index reaches the edge at thread 70's lane 2 (its group: 68..71): the
        // threads from there fault, as the interpreter reports it.
        let k = (edge - 70) as u32;
        let back = 4 * u64::from(k);
        let args = [KernelArg::U32(k), KernelArg::U64(back)];
        let e = agree(&ptx, cfg(grid, block), &[x.clone(), vec![0; n]], &args)
            .expect_err("a wrapped index");
        assert!(!e.is_empty(), "mul.wide.{wide}");
    }
}

/// An index each lane may change on its own (in a branch that depends on its data,
/// before the lanes come together again) is no progression the four-lane code may
/// take for consecutive, even where the lanes' first and last still are: each thread
/// reads its own element, or the one 64 past it where its element is odd.
#[test]
fn four_lanes_take_no_progression_a_lane_changed_alone() {
    let ptx = elementwise(
        "ptr px %rd1; ptr py %rd2; u32 n %r1",
        "%rd<8> %r<10> %p<3>",
        "  ld.global.u32 %r6, [%rd4];
  mov.u32 %r7, %r5;
  and.b32 %r8, %r6, 1;
  setp.eq.u32 %p2, %r8, 0;
  @%p2 bra $L;
  add.u32 %r7, %r7, 64;
$L:
  mul.wide.u32 %rd6, %r7, 4;
  add.s64 %rd7, %rd1, %rd6;
  ld.global.u32 %r9, [%rd7];
  st.global.u32 [%rd5], %r9;",
    );
    let n = 128usize;
    // Lanes 1 and 2 of each group odd: its first and last lanes read their own.
    let x: Vec<u32> = (0..n as u32 + 64)
        .map(|i| (i << 4) | u32::from(matches!(i % 4, 1 | 2)))
        .collect();
    let out = agree(
        &ptx,
        cfg(2, 64),
        &[x.clone(), vec![0; n]],
        &[KernelArg::U32(n as u32)],
    )
    .unwrap();
    let want: Vec<u32> = (0..n)
        .map(|i| if x[i] & 1 == 1 { x[i + 64] } else { x[i] })
        .collect();
    assert_eq!(out[1], want);
}

/// 64-bit integer arithmetic (add, sub, mul.lo, mad.lo, shifts by constants and by a
/// register, `mul.wide` of negative values), 32-bit shifts by constants, f64 and f32
/// arithmetic (division and fma included), `setp` on f32 and f64 with NaN operands
/// (lt, ge, eq, ne, nan, num, gtu), predicate logic, `setp` with a combined predicate
/// (negated too, and with two destinations), `selp`, predicated instructions on narrow
/// and wide registers, min and max, conversions between s32/u32/u64/s64,
/// `ld.global.s32` (and `.u32`) into 64-bit registers, u64 loads and stores, and a few
/// operations the four-lane code runs lane by lane (`neg`, `abs`, `cvt` to float,
/// `setp.equ`, `setp.gtu`), over values near every edge (NaNs with payloads,
/// infinities, signed zeros, subnormals, the extreme integers): the four-lane code's
/// results are the interpreter's bit for bit.
#[test]
fn four_lanes_integer_float_and_predicate_operations_agree() {
    // 2 blocks of 70 threads (17 groups and two threads alone each), their inputs and
    // outputs one array per value (so that a group's accesses are consecutive).
    let (grid, block) = (2u32, 70u32);
    let n = (grid * block) as usize;
    let (in32, in64) = (8usize, 6usize);
    // A `mov.{ty}` to `{dst}d` from `{src}s` for each pair (d, s) of `pairs`.
    fn moves(
        ty: &str,
        dst: &str,
        src: &str,
        pairs: impl IntoIterator<Item = (u32, u32)>,
    ) -> String {
        pairs
            .into_iter()
            .map(|(d, s)| format!("  mov.{ty} {dst}{d}, {src}{s};\n"))
            .collect()
    }
    let mut text = String::new();
    for k in 0..in32 {
        text += &format!("  ld.global.u32 %r{}, [%rd7+{}];\n", 10 + k, 4 * n * k);
    }
    for k in 0..in64 {
        text += &format!("  ld.global.u64 %rd{}, [%rd8+{}];\n", 20 + k, 8 * n * k);
    }
    text += &format!(
        "  ld.global.s32 %rd26, [%rd7+{}];
  ld.global.s32 %r18, [%rd7+{}];
  cvt.s64.s32 %rd27, %r18;
  ld.global.u32 %rd28, [%rd7+{}];
  add.s64 %rd29, %rd28, %rd20;
",
        4 * n,
        8 * n,
        12 * n
    );
    // the float inputs into float registers
    text += &moves("b32", "%f", "%r", (1..5).zip(14..18));
    text += &moves("b64", "%fd", "%rd", (1..4).zip(23..26));
    text += r#"  // 64-bit integers
  add.s64 %rd30, %rd20, %rd21;
  sub.s64 %rd31, %rd20, %rd22;
  mul.lo.u64 %rd32, %rd20, %rd21;
  mul.lo.s64 %rd33, %rd22, %rd26;
  mad.lo.s64 %rd34, %rd20, %rd22, %rd21;
  shl.b64 %rd35, %rd21, 13;
  shr.u64 %rd36, %rd22, 7;
  shr.s64 %rd37, %rd22, 60;
  shr.s64 %rd38, %rd20, 1;
  and.b32 %r19, %r10, 63;
  shl.b64 %rd39, %rd20, %r19;
  mul.wide.s32 %rd40, %r10, %r11;
  mul.wide.u32 %rd41, %r10, %r11;
  mul.wide.s32 %rd42, %r12, -7;
  mul.wide.u32 %rd43, %r12, 4;
  add.u64 %rd44, %rd20, 1;
  sub.s64 %rd45, %rd26, %rd27;
  // conversions
  cvt.s64.s32 %rd46, %r10;
  cvt.u64.u32 %rd47, %r10;
  cvt.u32.u64 %r30, %rd20;
  cvt.s32.s64 %r31, %rd22;
  cvt.s64.u32 %rd48, %r11;
  cvt.u64.s32 %rd49, %r11;
  cvt.u64.u32 %rd50, %r12;
  shl.b64 %rd50, %rd50, 20;
  add.s64 %rd50, %rd50, %rd47;
  // min and max
  min.s32 %r32, %r10, %r11;
  max.u32 %r33, %r10, %r11;
  min.u64 %rd51, %rd20, %rd22;
  max.s64 %rd52, %rd20, %rd22;
  // floats
  add.f64 %fd4, %fd1, %fd2;
  mul.f64 %fd5, %fd1, %fd3;
  fma.rn.f64 %fd6, %fd1, %fd2, %fd3;
  sub.f64 %fd7, %fd2, %fd3;
  add.f32 %f5, %f1, %f2;
  mul.f32 %f6, %f3, %f4;
  fma.rn.f32 %f7, %f1, %f2, %f3;
  sub.f32 %f8, %f4, %f1;
  div.rn.f32 %f11, %f1, %f4;
  div.rn.f64 %fd9, %fd1, %fd2;
  neg.f32 %f12, %f2;
  abs.f64 %fd10, %fd3;
  cvt.rn.f32.s32 %f13, %r10;
  // 32-bit shifts by constants, of negative values too
  shr.s32 %r20, %r10, 5;
  shl.b32 %r21, %r11, 7;
  shr.u32 %r22, %r12, 31;
  mul.lo.s32 %r23, %r10, %r11;
  mad.lo.s32 %r24, %r12, -3, %r13;
  // comparisons (NaNs among the operands)
  setp.lt.f32 %p1, %f1, %f2;
  setp.ge.f32 %p2, %f1, %f2;
  setp.eq.f32 %p3, %f1, %f3;
  setp.ne.f32 %p4, %f2, %f3;
  setp.nan.f32 %p5, %f1, %f2;
  setp.num.f32 %p6, %f3, %f4;
  setp.gtu.f32 %p7, %f1, %f4;
  setp.le.f64 %p8, %fd1, %fd2;
  setp.nan.f64 %p9, %fd2, %fd3;
  // predicate logic and combined comparisons
  and.pred %p10, %p1, %p3;
  or.pred %p11, %p2, %p5;
  not.pred %p12, %p6;
  xor.pred %p13, %p4, %p7;
  setp.lt.and.s32 %p14, %r10, %r11, %p1;
  setp.ge.or.u64 %p15, %rd20, %rd21, %p2;
  setp.ne.and.s32 %p16, %r12, %r13, !%p3;
  setp.gt.xor.s64 %p17|%p18, %rd22, %rd20, %p4;
  setp.lo.u32 %p19, %r10, %r12;
  setp.equ.f32 %p20, %f2, %f4;
  setp.lt.s64 %p21, %rd22, %rd21;
  setp.le.u64 %p22, %rd21, %rd22;
  // selp
  selp.b32 %r34, %r10, %r11, %p14;
  selp.b64 %rd53, %rd20, %rd21, %p15;
  selp.f32 %f9, %f1, %f2, %p5;
  selp.s32 %r35, -1, 5, %p17;
  selp.f64 %fd8, %fd1, %fd3, %p8;
  // predicated instructions
  mov.u32 %r36, %r12;
  @%p1 add.s32 %r36, %r36, %r13;
  @!%p2 mul.lo.s32 %r36, %r36, 3;
  @%p19 xor.b32 %r36, %r36, %r10;
  mov.u64 %rd54, %rd21;
  @%p18 add.s64 %rd54, %rd54, %rd20;
  @!%p10 shl.b64 %rd54, %rd54, 3;
  @%p16 cvt.s64.s32 %rd54, %r13;
  mov.f32 %f10, %f3;
  @%p11 add.f32 %f10, %f10, %f4;
"#;
    // the predicates as the bits of a word
    text += "  selp.u32 %r40, 1, 0, %p1;\n";
    for p in 2..23 {
        text += &format!("  selp.u32 %r41, {}, 0, %p{p};\n", 1 << (p - 1));
        text += "  or.b32 %r40, %r40, %r41;\n";
    }
    // the float results into integer registers, to store
    text += &moves("b32", "%r", "%f", (42..50).zip(5..13).chain([(25, 13)]));
    let wide = [(65, 9), (66, 10)].into_iter().chain((60..65).zip(4..9));
    text += &moves("b64", "%rd", "%fd", wide);
    let out32 = [
        30, 31, 32, 33, 34, 35, 36, 40, 42, 43, 44, 45, 46, 47, 18, 19, 20, 21, 22, 23, 24, 25, 48,
        49,
    ];
    let out64 = [
        26, 27, 30, 31, 32, 33, 34, 35, 36, 37, 38, 39, 40, 41, 42, 43, 44, 45, 46, 47, 48, 49, 50,
        51, 52, 53, 54, 60, 61, 62, 63, 64, 65, 66, 28, 29,
    ];
    for (k, r) in out32.iter().enumerate() {
        text += &format!("  st.global.u32 [%rd9+{}], %r{r};\n", 4 * n * k);
    }
    for (k, r) in out64.iter().enumerate() {
        text += &format!("  st.global.u64 [%rd10+{}], %rd{r};\n", 8 * n * k);
    }
    let ptx = kernel_of(
        "ptr pa %rd1; ptr pb %rd2; ptr po %rd3; ptr pq %rd4",
        "%rd<70> %r<50> %f<14> %fd<11> %p<24>",
        &format!(
            "{GID}
  mul.wide.u32 %rd5, %r5, 4;
  mul.wide.u32 %rd6, %r5, 8;
  add.s64 %rd7, %rd1, %rd5;
  add.s64 %rd8, %rd2, %rd6;
  add.s64 %rd9, %rd3, %rd5;
  add.s64 %rd10, %rd4, %rd6;
{text}  ret;"
        ),
    );
    let ints: [u64; 12] = [
        0,
        1,
        2,
        3,
        7,
        0x7fff_ffff,
        0x8000_0000,
        0xffff_ffff,
        0xffff_fff9,
        0xffff_8000,
        0x1234_5678,
        0xdead_beef,
    ];
    let floats: [u64; 13] = [
        0x7fc0_0000,
        0xffc0_0001,
        0x7f80_0001,
        0x7f80_0000,
        0xff80_0000,
        0,
        0x8000_0000,
        1,
        0x3f80_0000,
        0xbf80_0000,
        0x4049_0fdb,
        0x7f7f_ffff,
        0xc000_0000,
    ];
    let longs: [u64; 10] = [
        0,
        1,
        u64::MAX,
        1 << 63,
        i64::MAX as u64,
        0xffff_ffff,
        1 << 32,
        (-7i64) as u64,
        0x0123_4567_89ab_cdef,
        0xffff_ffff_0000_0001,
    ];
    let doubles: [u64; 11] = [
        0x7ff8_0000_0000_0000,
        0xfff0_0000_0000_0001,
        f64::INFINITY.to_bits(),
        f64::NEG_INFINITY.to_bits(),
        0,
        1 << 63,
        1,
        1.0f64.to_bits(),
        (-2.5f64).to_bits(),
        f64::MAX.to_bits(),
        1e-300f64.to_bits(),
    ];
    let mut rng = Rng(0x5eed_0006);
    let mut a = vec![0u32; in32 * n];
    for k in 0..in32 {
        for i in 0..n {
            a[k * n + i] = if k < 4 {
                rng.pick(&ints, 3) as u32
            } else {
                rng.pick(&floats, 4) as u32
            };
        }
    }
    let mut b = vec![0u64; in64 * n];
    for k in 0..in64 {
        for i in 0..n {
            b[k * n + i] = if k < 3 {
                rng.pick(&longs, 3)
            } else {
                rng.pick(&doubles, 4)
            };
        }
    }
    let bufs = [
        a,
        pairs(&b),
        vec![0; out32.len() * n],
        vec![0; 2 * out64.len() * n],
    ];
    agree(&ptx, cfg(grid, block), &bufs, &[]).unwrap();
}

/// An atomic with a result (run lane by lane inside a group of four) among native
/// instructions: a histogram of the low four bits of random words whose threads keep
/// the counts they saw. On one host thread the threads' atomics run in thread order
/// on both engines, so every count each thread saw is the interpreter's and the one
/// computed here; the bins hold the totals.
#[test]
fn four_lanes_run_atomics_with_results_lane_by_lane() {
    let ptx = elementwise(
        "ptr px %rd1; ptr pb %rd9; ptr py %rd2; u32 n %r1",
        "%rd<10> %r<10> %p<2>",
        "  ld.global.u32 %r6, [%rd4];
  and.b32 %r7, %r6, 15;
  mul.wide.u32 %rd6, %r7, 4;
  add.s64 %rd7, %rd9, %rd6;
  atom.global.add.u32 %r8, [%rd7], 1;
  shl.b32 %r9, %r7, 24;
  or.b32 %r8, %r8, %r9;
  st.global.u32 [%rd5], %r8;",
    );
    let mut rng = Rng(0x5eed_0007);
    let n = 999usize;
    let x = rng.words(n);
    let mut bins = vec![0u32; 16];
    let want: Vec<u32> = x
        .iter()
        .map(|&v| {
            let b = (v & 15) as usize;
            bins[b] += 1;
            (bins[b] - 1) | (b as u32) << 24
        })
        .collect();
    let bufs = [x, vec![0; 16], vec![0; n]];
    for (grid, block) in [(8, 128), (27, 37)] {
        let out = Launch {
            ptx: &ptx,
            config: cfg(grid, block),
            bufs: &bufs,
            extra: &[KernelArg::U32(n as u32)],
        }
        .agree_on(&[1])
        .unwrap();
        assert_eq!(out[1], bins, "blocks of {block}: the bins");
        assert_eq!(
            out[2], want,
            "blocks of {block}: the counts each thread saw"
        );
    }
}

/// `BENCH_PTX`'s kernel `name` as kernel `k` (what [`Launch`] runs).
fn bench_kernel(name: &str) -> String {
    BENCH_PTX.replace(&format!(".entry {name}("), ".entry k(")
}

/// f32 values of small integers (sums and products of them are exact in any order).
fn small_floats(rng: &mut Rng, n: usize) -> Vec<u32> {
    (0..n)
        .map(|_| (rng.below(16) as f32 - 7.0).to_bits())
        .collect()
}

/// The bench's kernels with barriers run four threads at a time, phase by phase: the
/// block reduction (a tree of barriers in a loop, threads past the end reading
/// nothing), the tiled matmul (two tiles through shared memory per step, one read
/// along a row by every lane, one along a column) and the shared-memory transpose
/// (the tile read across its rows: one access per lane), with partial tiles. Each
/// agrees with the interpreter and with the values computed here.
#[test]
fn four_lanes_run_the_bench_kernels_with_barriers() {
    let mut rng = Rng(0x5eed_0011);
    // Block reduction: each block of 256 threads sums 512 elements.
    let n = 5000u32;
    let x = small_floats(&mut rng, n as usize);
    let blocks = n.div_ceil(512);
    let out = agree(
        &bench_kernel("reduce_sum"),
        cfg(blocks, 256),
        &[x.clone(), vec![0; blocks as usize]],
        &[KernelArg::U32(n)],
    )
    .unwrap();
    for b in 0..blocks as usize {
        let want: f32 = x[b * 512..((b + 1) * 512).min(n as usize)]
            .iter()
            .map(|&w| f32::from_bits(w))
            .sum();
        assert_eq!(f32::from_bits(out[1][b]), want, "block {b}");
    }

    // Tiled matmul of 40 x 40 matrices (16 x 16 tiles, the last ones partial).
    let m = 40usize;
    let a = small_floats(&mut rng, m * m);
    let bm = small_floats(&mut rng, m * m);
    let tiles = (m as u32).div_ceil(16);
    let ni = KernelArg::I32(m as i32);
    let out = agree(
        &bench_kernel("matmul"),
        cfg3([tiles, tiles, 1], [16, 16, 1]),
        &[a.clone(), bm.clone(), vec![0; m * m]],
        &[ni.clone(), ni.clone(), ni.clone()],
    )
    .unwrap();
    let f = |v: &[u32], i: usize| f32::from_bits(v[i]);
    for r in 0..m {
        for c in 0..m {
            let want: f32 = (0..m).map(|k| f(&a, r * m + k) * f(&bm, k * m + c)).sum();
            assert_eq!(f(&out[2], r * m + c), want, "C[{r}][{c}]");
        }
    }

    // Shared-memory transpose of 80 x 80 (32 x 32 tiles through blocks of 32 x 8).
    let t = 80usize;
    let x = rng.words(t * t);
    let tiles = (t as u32).div_ceil(32);
    let ti = KernelArg::I32(t as i32);
    let out = agree(
        &bench_kernel("transpose_shared"),
        cfg3([tiles, tiles, 1], [32, 8, 1]),
        &[x.clone(), vec![0; t * t]],
        &[ti.clone(), ti],
    )
    .unwrap();
    for r in 0..t {
        for c in 0..t {
            assert_eq!(out[1][c * t + r], x[r * t + c], "element ({r}, {c})");
        }
    }
}

/// A block reduction whose threads past the end exit before the first barrier (so a
/// group may wait at a barrier with some of its lanes gone), a predicate and a tree
/// of sums live across the barriers, and every thread's load of one word that all
/// share; on blocks of 256 and of 64 threads.
#[test]
fn four_lanes_wait_at_barriers_with_lanes_that_exited() {
    let ptx = kernel_of(
        "ptr px %rd1; ptr py %rd2; u32 n %r1",
        "%rd<12> %r<16> %p<8>",
        &format!(
            "  .shared .align 4 .b32 s[256];
{GID}
  setp.ge.u32 %p1, %r5, %r1;
  @%p1 ret;
  mul.wide.u32 %rd3, %r5, 4;
  add.s64 %rd4, %rd1, %rd3;
  ld.global.u32 %r6, [%rd4];
  mov.u64 %rd5, s;
  mul.wide.u32 %rd6, %r4, 4;
  add.s64 %rd7, %rd5, %rd6;
  st.shared.u32 [%rd7], %r6;
  and.b32 %r14, %r6, 1;
  setp.eq.u32 %p5, %r14, 1;
  bar.sync 0;
  shr.u32 %r7, %r3, 1;
$L:
  setp.ge.u32 %p2, %r4, %r7;
  @%p2 bra $S;
  add.u32 %r9, %r5, %r7;
  setp.ge.u32 %p3, %r9, %r1;
  @%p3 bra $S;
  add.u32 %r8, %r4, %r7;
  mul.wide.u32 %rd8, %r8, 4;
  add.s64 %rd9, %rd5, %rd8;
  ld.shared.u32 %r10, [%rd9];
  ld.shared.u32 %r11, [%rd7];
  add.u32 %r11, %r11, %r10;
  st.shared.u32 [%rd7], %r11;
$S:
  bar.sync 0;
  shr.u32 %r7, %r7, 1;
  setp.ne.u32 %p4, %r7, 0;
  @%p4 bra $L;
  ld.shared.u32 %r12, [s];
  selp.u32 %r13, 1, 0, %p5;
  add.u32 %r12, %r12, %r13;
  add.s64 %rd10, %rd2, %rd3;
  st.global.u32 [%rd10], %r12;
  ret;"
        ),
    );
    let mut rng = Rng(0x5eed_0012);
    for (block, n) in [(256u32, 998u32), (64, 998), (256, 1024), (64, 61)] {
        let x = rng.words(n as usize);
        let y = agree_xy(&ptx, n.div_ceil(block), block, &x, n);
        for i in 0..n as usize {
            let b = i / block as usize * block as usize;
            let sum = x[b..(b + block as usize).min(n as usize)]
                .iter()
                .fold(0u32, |s, &v| s.wrapping_add(v));
            assert_eq!(
                y[i],
                sum.wrapping_add(x[i] & 1),
                "element {i}, blocks of {block}"
            );
        }
    }
}

/// Registers every thread computes alike right after a barrier (a count the loop
/// steps, set after a barrier of its own; a product of it and `%ntid.x`) are computed
/// once per phase: read by groups on four lanes, by lanes gone alone on a branch, and
/// by lanes going alone after a barrier where the others of their group exited. Even
/// threads sum the product (30 times the block size), odd ones the count (30).
#[test]
fn four_lanes_compute_once_per_phase_what_every_thread_computes_alike() {
    let ptx = kernel_of(
        "ptr px %rd1; ptr py %rd2; u32 n %r1",
        "%rd<8> %r<16> %p<8>",
        &format!(
            "{GID}
  setp.ge.u32 %p1, %r5, %r1;
  @%p1 ret;
  mov.u32 %r9, 0;
  and.b32 %r10, %r5, 1;
  setp.eq.u32 %p2, %r10, 1;
  bar.sync 0;
  mov.u32 %r7, 0;
$L:
  bar.sync 0;
  add.u32 %r7, %r7, 3;
  mul.lo.u32 %r8, %r7, %r3;
  @%p2 bra $ODD;
  add.u32 %r9, %r9, %r8;
  bra $J;
$ODD:
  add.u32 %r9, %r9, %r7;
$J:
  setp.lt.u32 %p3, %r7, 12;
  @%p3 bra $L;
  mul.wide.u32 %rd3, %r5, 4;
  add.s64 %rd4, %rd2, %rd3;
  st.global.u32 [%rd4], %r9;
  ret;"
        ),
    );
    for (block, n) in [(64u32, 200u32), (32, 90), (128, 128)] {
        let y = agree_xy(&ptx, n.div_ceil(block), block, &vec![0; n as usize], n);
        for (i, &v) in y.iter().enumerate() {
            let want = if i % 2 == 1 { 30 } else { 30 * block };
            assert_eq!(v, want, "element {i}, blocks of {block}");
        }
    }
}

/// A loop whose test sends the threads at or past a bound of `%tid.x` straight to the
/// barrier (a tree reduction's `if (tid < s)`): in a block of one row the four-lane
/// code runs only the groups below the bound. Each way to write the test; the bound
/// (computed once per phase) starts past the block and falls by 3 a round to below
/// zero, so neither it nor where the groups stop is a multiple of four, and unsigned
/// tests take the negative bounds for large ones. Blocks of one row (the last with
/// threads that exited at the start: groups past the bound with none left, or some),
/// and of two and four rows, where `%tid.x` is no thread's index and every group runs.
/// Each thread sums the bounds it was below.
#[test]
fn four_lanes_pass_over_the_groups_past_a_bound_of_tid_x() {
    // (Each test, and whether thread `t` is below bound `b` by it.)
    type Below = fn(u32, i32) -> bool;
    let tests: [(&str, Below); 6] = [
        ("setp.ge.u32 %p2, %r4, %r7;\n  @%p2 bra $B;", |t, b| {
            t < b as u32
        }),
        ("setp.lt.u32 %p2, %r4, %r7;\n  @!%p2 bra $B;", |t, b| {
            t < b as u32
        }),
        ("setp.le.u32 %p2, %r7, %r4;\n  @%p2 bra $B;", |t, b| {
            t < b as u32
        }),
        ("setp.gt.u32 %p2, %r4, %r7;\n  @%p2 bra $B;", |t, b| {
            t <= b as u32
        }),
        ("setp.ge.s32 %p2, %r4, %r7;\n  @%p2 bra $B;", |t, b| {
            (t as i32) < b
        }),
        ("setp.lt.s32 %p2, %r7, %r4;\n  @%p2 bra $B;", |t, b| {
            t as i32 <= b
        }),
    ];
    for (test, below) in tests {
        let ptx = kernel_of(
            "ptr px %rd1; ptr py %rd2; u32 n %r1",
            "%rd<8> %r<16> %p<4>",
            &format!(
                "  mov.u32 %r2, %ctaid.x;
  mov.u32 %r3, %ntid.x;
  mov.u32 %r4, %tid.x;
  mov.u32 %r10, %ntid.y;
  mov.u32 %r11, %tid.y;
  mul.lo.u32 %r12, %r3, %r10;
  mad.lo.u32 %r13, %r11, %r3, %r4;
  mad.lo.u32 %r5, %r2, %r12, %r13;
  setp.ge.u32 %p1, %r5, %r1;
  @%p1 ret;
  mov.u32 %r9, 0;
  bar.sync 0;
  add.u32 %r7, %r12, 1;
$L:
  {test}
  add.u32 %r9, %r9, %r7;
$B:
  bar.sync 0;
  sub.u32 %r7, %r7, 3;
  setp.gt.s32 %p3, %r7, -7;
  @%p3 bra $L;
  mul.wide.u32 %rd3, %r5, 4;
  add.s64 %rd4, %rd2, %rd3;
  st.global.u32 [%rd4], %r9;
  ret;"
            ),
        );
        let shapes = [
            ([64u32, 1], 192u32),
            ([100, 1], 250),
            ([64, 1], 138),
            ([24, 1], 48),
            ([4, 1], 12),
            ([256, 1], 292),
            ([8, 4], 96),
            ([12, 2], 60),
        ];
        for ([bx, by], n) in shapes {
            let size = bx * by;
            let bufs = [vec![0; n as usize], vec![0; n as usize]];
            let config = cfg3([n.div_ceil(size), 1, 1], [bx, by, 1]);
            let out = agree(&ptx, config, &bufs, &[KernelArg::U32(n)]).unwrap();
            for (i, &v) in out[1].iter().enumerate() {
                let t = (i as u32 % size) % bx;
                let bounds = std::iter::successors(Some(size as i32 + 1), |b| Some(b - 3))
                    .take_while(|&b| b > -7);
                let want = bounds
                    .filter(|&b| below(t, b))
                    .fold(0u32, |s, b| s.wrapping_add(b as u32));
                assert_eq!(v, want, "thread {i}, blocks of {bx}x{by}: {test}");
            }
        }
    }
}

/// Lanes that part on their data before a barrier wait there alone and go on four at a
/// time after it; a 64-bit value per thread lives across two barriers a round, three
/// rounds of a loop, each thread reading its mirror's (one shared access per lane).
#[test]
fn four_lanes_part_before_a_barrier_and_come_together_after_it() {
    let ptx = kernel_of(
        "ptr px %rd1; ptr py %rd2; u32 n %r1",
        "%rd<20> %r<16> %p<8>",
        &format!(
            "  .shared .align 8 .b64 t[128];
{GID}
  mul.wide.u32 %rd3, %r5, 4;
  add.s64 %rd4, %rd1, %rd3;
  ld.global.u32 %r6, [%rd4];
  cvt.u64.u32 %rd5, %r6;
  shl.b64 %rd6, %rd5, 24;
  and.b32 %r7, %r6, 7;
  setp.lt.u32 %p1, %r7, 3;
  @%p1 bra $A;
  add.u32 %r6, %r6, 1000;
$A:
  mov.u32 %r8, 0;
  mov.u64 %rd7, t;
  mul.wide.u32 %rd8, %r4, 8;
  add.s64 %rd9, %rd7, %rd8;
  sub.u32 %r9, %r3, 1;
  sub.u32 %r9, %r9, %r4;
  mul.wide.u32 %rd10, %r9, 8;
  add.s64 %rd11, %rd7, %rd10;
  cvt.u64.u32 %rd12, %r6;
  add.s64 %rd12, %rd12, %rd6;
$R:
  st.shared.u64 [%rd9], %rd12;
  bar.sync 0;
  ld.shared.u64 %rd13, [%rd11];
  bar.sync 0;
  add.s64 %rd12, %rd13, %rd12;
  add.u32 %r8, %r8, 1;
  setp.lt.u32 %p2, %r8, 3;
  @%p2 bra $R;
  mul.wide.u32 %rd14, %r5, 8;
  add.s64 %rd15, %rd2, %rd14;
  st.global.u64 [%rd15], %rd12;
  ret;"
        ),
    );
    let mut rng = Rng(0x5eed_0013);
    for block in [128u32, 32, 4] {
        let n = block * 6;
        let x = rng.words(n as usize);
        let out = agree(
            &ptx,
            cfg(6, block),
            &[x.clone(), vec![0; 2 * n as usize]],
            &[KernelArg::U32(n)],
        )
        .unwrap();
        let mut v: Vec<u64> = x
            .iter()
            .map(|&w| {
                let bumped = if w & 7 < 3 { w } else { w.wrapping_add(1000) };
                (bumped as u64).wrapping_add((w as u64) << 24)
            })
            .collect();
        for _ in 0..3 {
            v = (0..n as usize)
                .map(|i| {
                    let (b, t) = (i / block as usize * block as usize, i % block as usize);
                    v[b + block as usize - 1 - t].wrapping_add(v[i])
                })
                .collect();
        }
        assert_eq!(out[1], pairs(&v), "blocks of {block}");
    }
}

/// A shared access outside the block's shared memory by one lane is reported as the
/// interpreter reports it; a barrier only some threads may reach, and blocks whose
/// size is not a multiple of four, are the interpreter's.
#[test]
fn four_lanes_leave_divergent_barriers_and_odd_blocks_to_the_interpreter() {
    let body = |skip: &str, off: &str| {
        kernel_of(
            "ptr px %rd1; ptr py %rd2; u32 n %r1",
            "%rd<12> %r<16> %p<8>",
            &format!(
                "  .shared .align 4 .b32 s[64];
{GID}
  mov.u64 %rd5, s;
  mul.wide.u32 %rd6, %r4, 4;
  add.s64 %rd7, %rd5, %rd6;
  setp.eq.u32 %p2, %r5, {off};
  @%p2 add.s64 %rd7, %rd7, 4096;
  st.shared.u32 [%rd7], %r5;
  {skip}
  @%p1 bra $E;
  bar.sync 0;
$E:
  mul.wide.u32 %rd3, %r5, 4;
  add.s64 %rd4, %rd2, %rd3;
  st.global.u32 [%rd4], %r4;
  ret;"
            ),
        )
    };
    // The barrier is skipped by no thread (`n > 100000` never holds, and is the same
    // in every thread): compiled. A lane's shared store past the end faults as
    // interpreted.
    let never = "setp.gt.u32 %p1, %r1, 100000;";
    let fault = agree(
        &body(never, "37"),
        cfg(2, 64),
        &[vec![0; 128], vec![0; 128]],
        &[KernelArg::U32(128)],
    )
    .unwrap_err();
    assert!(fault.contains("shared"), "{fault}");
    let ok = agree(
        &body(never, "1000"),
        cfg(2, 64),
        &[vec![0; 128], vec![0; 128]],
        &[KernelArg::U32(128)],
    )
    .unwrap();
    let want: Vec<u32> = (0..128).map(|i| i % 64).collect();
    assert_eq!(ok[1], want);
    // Threads 0-7 skip the barrier: the interpreter's (which reports it).
    let ptx = body("setp.lt.u32 %p1, %r4, 8;", "1000");
    let m = sim(Engine::Jit, 1).load_module("d.ptx", &ptx).unwrap();
    let why = m.kernel("k").unwrap().jit().unwrap_err();
    assert!(
        why.starts_with("a barrier inside a branch that may differ between threads"),
        "{why}"
    );
    let launch = Launch {
        ptx: &ptx,
        config: cfg(2, 64),
        bufs: &[vec![0; 128], vec![0; 128]],
        extra: &[KernelArg::U32(128)],
    };
    let (ri, _) = launch.on(Engine::Interpreter, 1);
    let (rj, _) = launch.on(Engine::Jit, 1);
    assert!(ri.as_ref().unwrap_err().contains("bar.sync"), "{ri:?}");
    assert_eq!(rj, ri);
    // Blocks of 30 threads: the compiled kernel runs whole groups of four only.
    let odd = Launch {
        ptx: &body(never, "1000"),
        config: cfg(2, 30),
        bufs: &[vec![0; 60], vec![0; 60]],
        extra: &[KernelArg::U32(60)],
    };
    let (rj, bj) = odd.on(Engine::Jit, 1);
    assert_eq!(rj, Ok((Engine::Interpreter, 32)));
    let want: Vec<u32> = (0..60).map(|i| i % 30).collect();
    assert_eq!(bj[1], want);
    // The bench's shared-memory transpose takes a group's four threads for one row's
    // consecutive %tid.x: blocks of 4 x 8 run compiled, of 2 x 16 (whole groups that
    // span rows) interpreted; the words written are the interpreter's.
    let t = 32usize;
    let x: Vec<u32> = (0..(t * t) as u32).collect();
    let ti = KernelArg::I32(t as i32);
    for (block, engine) in [([4, 8, 1], Engine::Jit), ([2, 16, 1], Engine::Interpreter)] {
        let tiles = (t / 32) as u32;
        let rows = Launch {
            ptx: &bench_kernel("transpose_shared"),
            config: cfg3([tiles, tiles, 1], block),
            bufs: &[x.clone(), vec![0; t * t]],
            extra: &[ti.clone(), ti.clone()],
        };
        let (rj, bj) = rows.on(Engine::Jit, 1);
        assert_eq!(rj.map(|r| r.0), Ok(engine), "blocks of {block:?}");
        let (ri, bi) = rows.on(Engine::Interpreter, 1);
        assert!(ri.is_ok());
        assert_eq!(bj, bi, "blocks of {block:?}");
    }
}
