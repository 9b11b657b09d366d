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
        .map_err(|e| {
            // Each simulator's addresses carry its own tag: reports name it as TAG.
            let tag = format!("{:#x}", buf.0)[..6].to_string();
            let e = e.to_string().replace(&tag, "TAG");
            // (and so does the distance of a wild address to them)
            match e.find(" bytes before allocation") {
                Some(i) => {
                    let from = e[..i].rfind(' ').unwrap_or(i);
                    format!("{} N{}", &e[..from], &e[i..])
                }
                None => e,
            }
        });
    s.reset();
    let out = words(&mut s, buf, n);
    (r, out)
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
fn the_jit_takes_kernels_without_barriers_and_leaves_the_rest() {
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
        Engine::Interpreter,
        "a kernel with barriers is interpreted"
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
        ("  bar.sync 0;", "a barrier (PTX line 12)"),
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

/// An arithmetic-dense kernel (many float instructions per memory access) stays the
/// interpreter's, whose warp-wide loops are vectorised; the same kernel with half the
/// arithmetic is compiled. The results agree either way.
#[test]
fn arithmetic_dense_kernels_are_interpreted() {
    let dense = |fmas: usize| {
        kernel(
            ".param .u64 p",
            &format!(
                "  .reg .b64 %rd<4>;\n  .reg .b32 %r<2>;\n  .reg .f32 %f<2>;\n  ld.param.u64 %rd1, [p];\n  mov.u32 %r1, %tid.x;\n  mul.wide.u32 %rd2, %r1, 4;\n  add.s64 %rd3, %rd1, %rd2;\n  ld.global.f32 %f1, [%rd3];\n{}  st.global.f32 [%rd3], %f1;\n  ret;",
                "  fma.rn.f32 %f1, %f1, 0f3F000000, 0f3F800000;\n".repeat(fmas)
            ),
        )
    };
    let m = sim(Engine::Jit, 1)
        .load_module("d.ptx", &dense(17))
        .unwrap();
    assert_eq!(
        m.kernel("k").unwrap().jit(),
        Err("arithmetic-dense (17 float or lane-function instructions, 2 memory accesses): the interpreter's warp-wide loops, vectorised, run it faster".to_string())
    );
    assert_eq!(
        same_on_both(&dense(17), 2, 64, 128, &[]),
        Engine::Interpreter
    );
    assert_eq!(same_on_both(&dense(16), 2, 64, 128, &[]), Engine::Jit);
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

/// A compiled loop that never ends stops at the budget, the time limit or a
/// cancellation, as an interpreted one does.
#[test]
fn compiled_loops_stop_at_the_budget_the_time_limit_and_cancellation() {
    let ptx = kernel(
        ".param .u64 p",
        "  .reg .b32 %r<3>;\n  .reg .pred %p<2>;\n  mov.u32 %r1, 1;\nL:\n  add.u32 %r1, %r1, 2;\n  setp.ne.u32 %p1, %r1, 0;\n  @%p1 bra L;\n  ret;",
    );
    let mut s = Simulator::new(SimConfig {
        threads: 1,
        instruction_budget: 200_000,
        time_limit: None,
        engine: Engine::Jit,
        ..SimConfig::default()
    });
    let m = s.load_module("spin.ptx", &ptx).unwrap();
    let b = s.malloc(4).unwrap();
    let e = s
        .launch(&m, "k", cfg(1, 32), &[KernelArg::Ptr(b)])
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
    assert!(
        *warp_instructions > 200_000 && *warp_instructions <= 200_000 + 4096 + 32,
        "{warp_instructions}"
    );
    assert_eq!(*line, 12, "the loop's branch, where compiled code checks");
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
