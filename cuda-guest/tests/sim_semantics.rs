//! Execution semantics on small hand-written PTX: shuffles read every source before
//! writing, atomics stay atomic across host threads, divergent calls and returns
//! reconverge, recursion (a frame per call, and a stack that overflows), dynamic shared memory, `%laneid`/lane masks.

use cuda_guest::sim::{KernelArg, LaunchConfig, SimConfig, SimError, Simulator};

const HEADER: &str = ".version 7.0\n.target sm_80\n.address_size 64\n";

fn sim(threads: usize) -> Simulator {
    Simulator::new(SimConfig {
        threads,
        ..SimConfig::default()
    })
}

fn read_u32(s: &mut Simulator, p: cuda_guest::sim::DevicePtr, n: usize) -> Vec<u32> {
    let mut b = vec![0u8; 4 * n];
    s.memcpy_dtoh(&mut b, p).unwrap();
    b.chunks(4)
        .map(|c| u32::from_le_bytes(c.try_into().unwrap()))
        .collect()
}

fn cfg(grid: u32, block: u32) -> LaunchConfig {
    LaunchConfig {
        grid: [grid, 1, 1],
        block: [block, 1, 1],
        shared_bytes: 0,
    }
}

#[test]
fn shfl_reads_all_sources_before_writing() {
    // Destination and source are the same register: a simulator writing lane by lane
    // would shift already-shifted values (GPGPU-Sim's bug).
    let ptx = format!(
        "{HEADER}.visible .entry k(.param .u64 out)\n{{\n .reg .b32 %r<4>; .reg .b64 %rd<4>; .reg .pred %p<2>;\n\
         ld.param.u64 %rd1, [out];\n mov.u32 %r1, %laneid;\n mul.lo.u32 %r2, %r1, 10;\n\
         shfl.sync.down.b32 %r2|%p1, %r2, 1, 31, -1;\n shfl.sync.bfly.b32 %r3, %r2, 3, 31, -1;\n\
         mul.wide.u32 %rd2, %r1, 4;\n add.s64 %rd3, %rd1, %rd2;\n st.global.u32 [%rd3], %r3;\n\
         selp.u32 %r3, 1, 0, %p1;\n st.global.u32 [%rd3+128], %r3;\n ret;\n}}\n"
    );
    let mut s = sim(1);
    let m = s.load_module("shfl.ptx", &ptx).unwrap();
    let out = s.malloc(4 * 64).unwrap();
    s.launch(&m, "k", cfg(1, 32), &[KernelArg::Ptr(out)])
        .unwrap();
    let got = read_u32(&mut s, out, 64);
    let down: Vec<u32> = (0..32)
        .map(|l| if l < 31 { (l + 1) * 10 } else { l * 10 })
        .collect();
    let bfly: Vec<u32> = (0..32).map(|l| down[l as usize ^ 3]).collect();
    assert_eq!(&got[..32], &bfly[..]);
    let valid: Vec<u32> = (0..32).map(|l| (l < 31) as u32).collect();
    assert_eq!(&got[32..], &valid[..]);
}

#[test]
fn global_atomics_stay_atomic_across_threads() {
    // 512 blocks of 256 threads each add 1 (u32), 3 (u64), 0.5 (f32), 1.0 (f64) to one
    // counter, take a ticket with atom.inc, and do a CAS loop on a shared word.
    let ptx = format!(
        "{HEADER}.visible .entry k(.param .u64 c)\n{{\n .reg .b32 %r<6>; .reg .b64 %rd<6>; .reg .f32 %f<2>; .reg .f64 %fd<2>; .reg .pred %p<2>;\n\
         ld.param.u64 %rd1, [c];\n\
         atom.global.add.u32 %r1, [%rd1], 1;\n\
         atom.global.add.u64 %rd2, [%rd1+8], 3;\n\
         atom.global.add.f32 %f1, [%rd1+16], 0f3F000000;\n\
         atom.global.add.f64 %fd1, [%rd1+24], 0d3FF0000000000000;\n\
         atom.global.inc.u32 %r2, [%rd1+32], 1000000;\n\
         atom.global.max.s32 %r3, [%rd1+36], %r2;\n\
         LOOP:\n ld.volatile.global.u32 %r4, [%rd1+40];\n add.u32 %r5, %r4, 2;\n\
         atom.global.cas.b32 %r3, [%rd1+40], %r4, %r5;\n setp.ne.u32 %p1, %r3, %r4;\n @%p1 bra LOOP;\n\
         ret;\n}}\n"
    );
    for threads in [1, 2] {
        let mut s = sim(threads);
        let m = s.load_module("atom.ptx", &ptx).unwrap();
        let c = s.malloc(64).unwrap();
        s.launch(&m, "k", cfg(512, 256), &[KernelArg::Ptr(c)])
            .unwrap();
        let mut b = vec![0u8; 64];
        s.memcpy_dtoh(&mut b, c).unwrap();
        let n = 512u64 * 256;
        assert_eq!(u32::from_le_bytes(b[0..4].try_into().unwrap()) as u64, n);
        assert_eq!(u64::from_le_bytes(b[8..16].try_into().unwrap()), 3 * n);
        assert_eq!(
            f32::from_le_bytes(b[16..20].try_into().unwrap()),
            0.5 * n as f32
        );
        assert_eq!(f64::from_le_bytes(b[24..32].try_into().unwrap()), n as f64);
        assert_eq!(u32::from_le_bytes(b[32..36].try_into().unwrap()) as u64, n);
        assert_eq!(
            u32::from_le_bytes(b[36..40].try_into().unwrap()) as u64,
            n - 1
        );
        assert_eq!(
            u32::from_le_bytes(b[40..44].try_into().unwrap()) as u64,
            2 * n
        );
    }
}

#[test]
fn divergent_calls_and_returns_reconverge() {
    // A .func with an early return taken by odd lanes; called only by lanes < 20.
    let ptx = format!(
        "{HEADER}.func (.param .b32 ret) f(.param .b32 x)\n{{\n .reg .b32 %r<4>; .reg .pred %p<2>;\n\
         ld.param.b32 %r1, [x];\n and.b32 %r2, %r1, 1;\n setp.eq.u32 %p1, %r2, 1;\n\
         @%p1 bra ODD;\n mul.lo.u32 %r3, %r1, 100;\n st.param.b32 [ret], %r3;\n ret;\n\
         ODD:\n st.param.b32 [ret], 7;\n ret;\n}}\n\
         .visible .entry k(.param .u64 out)\n{{\n .reg .b32 %r<5>; .reg .b64 %rd<4>; .reg .pred %p<2>;\n\
         ld.param.u64 %rd1, [out];\n mov.u32 %r1, %tid.x;\n mov.u32 %r4, 1;\n setp.ge.u32 %p1, %r1, 20;\n\
         @%p1 bra SKIP;\n {{\n .param .b32 a0;\n .param .b32 r0;\n st.param.b32 [a0], %r1;\n\
         call.uni (r0), f, (a0);\n ld.param.b32 %r4, [r0];\n }}\n\
         SKIP:\n activemask.b32 %r2;\n add.u32 %r3, %r4, %r2;\n\
         mul.wide.u32 %rd2, %r1, 4;\n add.s64 %rd3, %rd1, %rd2;\n st.global.u32 [%rd3], %r3;\n ret;\n}}\n"
    );
    let mut s = sim(1);
    let m = s.load_module("call.ptx", &ptx).unwrap();
    assert!(m.kernel("k").unwrap().local_bytes() >= 8);
    let out = s.malloc(4 * 32).unwrap();
    s.launch(&m, "k", cfg(1, 32), &[KernelArg::Ptr(out)])
        .unwrap();
    let got = read_u32(&mut s, out, 32);
    for l in 0..32u32 {
        let v = if l >= 20 {
            1
        } else if l % 2 == 1 {
            7
        } else {
            l * 100
        };
        // After the call every lane is active again: activemask is full.
        assert_eq!(got[l as usize], v.wrapping_add(u32::MAX), "lane {l}");
    }
}

/// Recursion runs out of line, each call with a frame of its own: `fact(n, p)` writes
/// `n` through `p` into its caller's `.local` slot, zeroes its own slot, recurses with a
/// pointer to it, and multiplies by what its callee wrote there plus one. Lanes recurse
/// to different depths (their thread index).
#[test]
fn recursion_runs_with_a_frame_per_call() {
    let ptx = format!(
        "{HEADER}.func (.param .b64 ret) fact(.param .b64 n, .param .b64 p)\n{{\n\
         .local .align 8 .b8 buf[16];\n .reg .b64 %rd<12>; .reg .pred %p<2>;\n\
         ld.param.b64 %rd1, [n];\n ld.param.b64 %rd2, [p];\n setp.eq.u64 %p1, %rd2, 0;\n\
         @%p1 bra NOPARENT;\n st.u64 [%rd2], %rd1;\n\
         NOPARENT:\n st.local.u64 [buf], 0;\n setp.eq.u64 %p1, %rd1, 0;\n @%p1 bra BASE;\n\
         mov.u64 %rd3, buf;\n cvta.local.u64 %rd4, %rd3;\n sub.u64 %rd5, %rd1, 1;\n\
         {{\n .param .b64 a0; .param .b64 a1; .param .b64 r0;\n\
         st.param.b64 [a0], %rd5;\n st.param.b64 [a1], %rd4;\n\
         call.uni (r0), fact, (a0, a1);\n ld.param.b64 %rd6, [r0];\n }}\n\
         ld.local.u64 %rd7, [buf];\n add.u64 %rd7, %rd7, 1;\n mul.lo.u64 %rd8, %rd6, %rd7;\n\
         st.param.b64 [ret], %rd8;\n ret;\n\
         BASE:\n mov.u64 %rd9, 1;\n st.param.b64 [ret], %rd9;\n ret;\n}}\n\
         .visible .entry k(.param .u64 out)\n{{\n .reg .b32 %r<3>; .reg .b64 %rd<8>;\n\
         ld.param.u64 %rd1, [out];\n mov.u32 %r1, %tid.x;\n cvt.u64.u32 %rd2, %r1;\n mov.u64 %rd6, 0;\n\
         {{\n .param .b64 a0; .param .b64 a1; .param .b64 r0;\n\
         st.param.b64 [a0], %rd2;\n st.param.b64 [a1], %rd6;\n\
         call.uni (r0), fact, (a0, a1);\n ld.param.b64 %rd3, [r0];\n }}\n\
         mul.wide.u32 %rd4, %r1, 8;\n add.s64 %rd5, %rd1, %rd4;\n st.global.u64 [%rd5], %rd3;\n ret;\n}}\n"
    );
    for threads in [1, 2] {
        let mut s = sim(threads);
        let m = s.load_module("fact.ptx", &ptx).unwrap();
        let out = s.malloc(8 * 64).unwrap();
        s.launch(&m, "k", cfg(1, 64), &[KernelArg::Ptr(out)])
            .unwrap();
        let mut bytes = vec![0u8; 8 * 64];
        s.memcpy_dtoh(&mut bytes, out).unwrap();
        for (n, got) in bytes.chunks(8).enumerate() {
            let want = (1..=n as u64).fold(1u64, |a, k| a.wrapping_mul(k));
            assert_eq!(
                u64::from_le_bytes(got.try_into().unwrap()),
                want,
                "fact({n})"
            );
        }
    }
}

/// Endless recursion: the call past the thread's stack stops the launch.
#[test]
fn endless_recursion_overflows_the_stack() {
    let ptx = format!(
        "{HEADER}.func f()\n{{\n call.uni f, ();\n ret;\n}}\n.visible .entry k()\n{{\n call.uni f, ();\n ret;\n}}\n"
    );
    let mut s = sim(1);
    let m = s.load_module("rec.ptx", &ptx).unwrap();
    let e = s.launch(&m, "k", cfg(1, 32), &[]).unwrap_err();
    let SimError::StackOverflow {
        at,
        function,
        depth,
        limit,
    } = &e
    else {
        panic!("{e}")
    };
    // Each call takes 16 bytes of the 16 KiB: the 1025th is one too many.
    assert_eq!(
        (function.as_str(), *depth, *limit, at.line, at.thread),
        ("f", 1025, cuda_guest::sim::STACK_SIZE, 6, [0, 0, 0])
    );
    assert_eq!(cuda_guest::sim::STACK_SIZE, 16 * 1024);
}

#[test]
fn dynamic_shared_memory_and_lane_masks() {
    // Each thread writes lanemask_lt popcount (= laneid) into dynamic shared memory,
    // then reads its mirror after a barrier.
    let ptx = format!(
        "{HEADER}.extern .shared .align 16 .b8 dyn[];\n\
         .visible .entry k(.param .u64 out)\n{{\n .reg .b32 %r<8>; .reg .b64 %rd<5>;\n\
         ld.param.u64 %rd1, [out];\n mov.u32 %r1, %tid.x;\n mov.u32 %r2, %lanemask_lt;\n popc.b32 %r3, %r2;\n\
         mov.u32 %r7, %warpid;\n mad.lo.u32 %r3, %r7, 1000, %r3;\n\
         shl.b32 %r4, %r1, 2;\n mov.u32 %r5, dyn;\n add.u32 %r5, %r5, %r4;\n st.shared.u32 [%r5], %r3;\n\
         bar.sync 0;\n mov.u32 %r6, %ntid.x;\n sub.u32 %r6, %r6, 1;\n sub.u32 %r6, %r6, %r1;\n shl.b32 %r6, %r6, 2;\n\
         mov.u32 %r5, dyn;\n add.u32 %r5, %r5, %r6;\n ld.shared.u32 %r3, [%r5];\n\
         mul.wide.u32 %rd2, %r1, 4;\n add.s64 %rd3, %rd1, %rd2;\n st.global.u32 [%rd3], %r3;\n ret;\n}}\n"
    );
    let mut s = sim(2);
    let m = s.load_module("dyn.ptx", &ptx).unwrap();
    let out = s.malloc(4 * 96).unwrap();
    let mut c = cfg(3, 96);
    c.shared_bytes = 4 * 96;
    s.launch(&m, "k", c, &[KernelArg::Ptr(out)]).unwrap();
    let got = read_u32(&mut s, out, 96);
    for t in 0..96u32 {
        let mirror = 95 - t;
        assert_eq!(
            got[t as usize],
            (mirror / 32) * 1000 + mirror % 32,
            "thread {t}"
        );
    }
    // Too little dynamic shared memory for the block: the out-of-range store faults.
    c.shared_bytes = 4 * 95;
    let e = s.launch(&m, "k", c, &[KernelArg::Ptr(out)]).unwrap_err();
    assert!(
        e.to_string()
            .starts_with("invalid out-of-bounds shared write of size 4 at shared address 0x17c"),
        "{e}"
    );
}

#[test]
fn redux_sync_reduces_over_the_active_lanes() {
    // Lanes with laneid < 20 reduce v = laneid * 7 + 3 (signed min/max of v - 50).
    let ops = [
        "add.u32", "min.s32", "max.s32", "min.u32", "and.b32", "or.b32", "xor.b32",
    ];
    let body: String = ops
        .iter()
        .enumerate()
        .map(|(k, op)| {
            format!(
                " redux.sync.{op} %r5, %r3, -1;\n st.global.u32 [%rd3+{}], %r5;\n",
                4 * 32 * k
            )
        })
        .collect();
    let ptx = format!(
        "{HEADER}.visible .entry k(.param .u64 out)\n{{\n .reg .b32 %r<6>; .reg .b64 %rd<4>; .reg .pred %p<2>;\n\
         ld.param.u64 %rd1, [out];\n mov.u32 %r1, %laneid;\n mad.lo.u32 %r2, %r1, 7, 3;\n sub.u32 %r3, %r2, 50;\n\
         mul.wide.u32 %rd2, %r1, 4;\n add.s64 %rd3, %rd1, %rd2;\n setp.ge.u32 %p1, %r1, 20;\n @%p1 bra END;\n{body}END:\n ret;\n}}\n"
    );
    let mut s = sim(1);
    let m = s
        .load_module("redux.ptx", &ptx)
        .unwrap_or_else(|e| panic!("{e}\n{ptx}"));
    let out = s.malloc(4 * 32 * ops.len() as u64).unwrap();
    s.launch(&m, "k", cfg(1, 32), &[KernelArg::Ptr(out)])
        .unwrap();
    let got = read_u32(&mut s, out, 32 * ops.len());
    let v: Vec<u32> = (0..20u32).map(|l| (l * 7 + 3).wrapping_sub(50)).collect();
    let want = [
        v.iter().fold(0u32, |a, x| a.wrapping_add(*x)),
        v.iter().map(|x| *x as i32).min().unwrap() as u32,
        v.iter().map(|x| *x as i32).max().unwrap() as u32,
        *v.iter().min().unwrap(),
        v.iter().fold(u32::MAX, |a, x| a & x),
        v.iter().fold(0, |a, x| a | x),
        v.iter().fold(0, |a, x| a ^ x),
    ];
    for (k, w) in want.iter().enumerate() {
        for l in 0..32 {
            let g = got[k * 32 + l];
            assert_eq!(g, if l < 20 { *w } else { 0 }, "{} lane {l}", ops[k]);
        }
    }
}

#[test]
fn bar_red_counts_and_combines_over_the_block() {
    // __syncthreads_count / _and / _or over 100 threads (the last warp partial).
    let ptx = format!(
        "{HEADER}.visible .entry k(.param .u64 out)\n{{\n .reg .b32 %r<8>; .reg .b64 %rd<4>; .reg .pred %p<6>;\n\
         ld.param.u64 %rd1, [out];\n mov.u32 %r1, %tid.x;\n rem.u32 %r2, %r1, 3;\n setp.eq.u32 %p1, %r2, 0;\n\
         bar.red.popc.u32 %r3, 0, %p1;\n\
         setp.lt.u32 %p2, %r1, 1000;\n bar.red.and.pred %p3, 0, %p2;\n\
         bar.red.and.pred %p4, 0, %p1;\n barrier.red.or.pred %p5, 0, !%p1;\n\
         selp.u32 %r4, 10, 0, %p3;\n selp.u32 %r5, 100, 0, %p4;\n selp.u32 %r6, 1000, 0, %p5;\n\
         add.u32 %r7, %r3, %r4;\n add.u32 %r7, %r7, %r5;\n add.u32 %r7, %r7, %r6;\n\
         mul.wide.u32 %rd2, %r1, 4;\n add.s64 %rd3, %rd1, %rd2;\n st.global.u32 [%rd3], %r7;\n ret;\n}}\n"
    );
    for threads in [1, 2] {
        let mut s = sim(threads);
        let m = s.load_module("barred.ptx", &ptx).unwrap();
        let out = s.malloc(4 * 200).unwrap();
        s.launch(&m, "k", cfg(2, 100), &[KernelArg::Ptr(out)])
            .unwrap();
        let got = read_u32(&mut s, out, 100);
        // 34 multiples of 3 in 0..100; all < 1000; not all multiples; some are not.
        assert!(got.iter().all(|&v| v == 34 + 10 + 1000), "{got:?}");
    }
}

#[test]
fn match_sync_groups_lanes_by_value() {
    // Lane l holds l % 3 (b32) and l / 8 (b64): match.any gives each lane the lanes of
    // its group; match.all is 0 and false for them, and the whole set and true for a
    // uniform value; a membermask of the even lanes leaves the odd ones out.
    let ptx = format!(
        "{HEADER}.visible .entry k(.param .u64 out)\n{{\n .reg .b32 %r<8>; .reg .b64 %rd<6>; .reg .pred %p<3>;\n\
         ld.param.u64 %rd1, [out];\n mov.u32 %r1, %laneid;\n rem.u32 %r2, %r1, 3;\n\
         mul.wide.u32 %rd2, %r1, 4;\n add.s64 %rd3, %rd1, %rd2;\n\
         match.any.sync.b32 %r3, %r2, -1;\n st.global.u32 [%rd3], %r3;\n\
         shr.u32 %r4, %r1, 3;\n cvt.u64.u32 %rd4, %r4;\n\
         match.any.sync.b64 %r3, %rd4, 0x55555555;\n st.global.u32 [%rd3+128], %r3;\n\
         match.all.sync.b32 %r5|%p1, %r2, -1;\n selp.u32 %r6, 1, 0, %p1;\n add.u32 %r5, %r5, %r6;\n\
         st.global.u32 [%rd3+256], %r5;\n\
         match.all.sync.b32 %r5|%p2, 7, WARP_SZ;\n selp.u32 %r6, 1, 0, %p2;\n add.u32 %r5, %r5, %r6;\n\
         st.global.u32 [%rd3+384], %r5;\n ret;\n}}\n"
    );
    let mut s = sim(1);
    let m = s.load_module("match.ptx", &ptx).unwrap();
    let out = s.malloc(4 * 128).unwrap();
    s.launch(&m, "k", cfg(1, 32), &[KernelArg::Ptr(out)])
        .unwrap();
    let got = read_u32(&mut s, out, 128);
    let any: Vec<u32> = (0..32u32)
        .map(|l| (0..32).filter(|k| k % 3 == l % 3).map(|k| 1u32 << k).sum())
        .collect();
    assert_eq!(&got[..32], &any[..], "match.any.sync.b32");
    let even: Vec<u32> = (0..32u32)
        .map(|l| {
            if l % 2 == 1 {
                0
            } else {
                (0..32)
                    .filter(|k| k % 2 == 0 && k / 8 == l / 8)
                    .map(|k| 1u32 << k)
                    .sum()
            }
        })
        .collect();
    assert_eq!(
        &got[32..64],
        &even[..],
        "match.any.sync.b64 over the even lanes"
    );
    assert_eq!(
        &got[64..96],
        &[0u32; 32][..],
        "match.all.sync of unequal values"
    );
    // WARP_SZ (32: lane 5 alone) as the membermask, one value: for lane 5 the set 0x20
    // and true (+1); the other lanes are outside their own membermask (undefined in PTX;
    // here: nothing and false).
    let lane5: Vec<u32> = (0..32).map(|l| if l == 5 { 0x21 } else { 0 }).collect();
    assert_eq!(&got[96..], &lane5[..], "match.all.sync of one value");
}

#[test]
fn redux_and_vote_sync_reduce_within_each_lanes_membermask() {
    // Lanes labelled l % 4 (cooperative groups' labeled_partition: match.any gives each
    // lane its group's mask); in one instruction each group reduces and votes apart, as
    // on a GPU (cuda-samples' warpAggregatedAtomicsCG checks this).
    let ptx = format!(
        "{HEADER}.visible .entry k(.param .u64 out)\n{{\n .reg .b32 %r<10>; .reg .b64 %rd<4>; .reg .pred %p<3>;\n\
         ld.param.u64 %rd1, [out];\n mov.u32 %r1, %laneid;\n rem.u32 %r2, %r1, 4;\n\
         mul.wide.u32 %rd2, %r1, 4;\n add.s64 %rd3, %rd1, %rd2;\n\
         match.any.sync.b32 %r3, %r2, -1;\n\
         redux.sync.max.s32 %r4, %r1, %r3;\n st.global.u32 [%rd3], %r4;\n\
         redux.sync.add.u32 %r5, %r1, %r3;\n st.global.u32 [%rd3+128], %r5;\n\
         setp.lt.u32 %p1, %r1, 16;\n vote.sync.ballot.b32 %r6, %p1, %r3;\n st.global.u32 [%rd3+256], %r6;\n\
         setp.lt.u32 %p2, %r2, 2;\n vote.sync.all.pred %p1, %p2, %r3;\n selp.u32 %r7, 1, 0, %p1;\n\
         st.global.u32 [%rd3+384], %r7;\n ret;\n}}\n"
    );
    for threads in [1, 2] {
        let mut s = sim(threads);
        let m = s.load_module("groups.ptx", &ptx).unwrap();
        let out = s.malloc(4 * 128).unwrap();
        s.launch(&m, "k", cfg(1, 32), &[KernelArg::Ptr(out)])
            .unwrap();
        let got = read_u32(&mut s, out, 128);
        let group = |l: u32| (0..32u32).filter(move |k| k % 4 == l % 4);
        let max: Vec<u32> = (0..32).map(|l| 28 + l % 4).collect();
        let sum: Vec<u32> = (0..32).map(|l| group(l).sum()).collect();
        let ballot: Vec<u32> = (0..32)
            .map(|l| group(l).filter(|k| *k < 16).map(|k| 1 << k).sum())
            .collect();
        // Groups 0 and 1 all have label < 2; groups 2 and 3 none.
        let all: Vec<u32> = (0..32).map(|l| u32::from(l % 4 < 2)).collect();
        assert_eq!(&got[..32], &max[..], "redux.sync.max per group");
        assert_eq!(&got[32..64], &sum[..], "redux.sync.add per group");
        assert_eq!(&got[64..96], &ballot[..], "vote.sync.ballot per group");
        assert_eq!(&got[96..], &all[..], "vote.sync.all per group");
    }
}

#[test]
fn cp_async_copies_to_shared_and_reserved_shared_memory_follows_the_kernels() {
    // cp.async of 16, 8 and 4 bytes (and 4 with a source size of 0: zeros), committed
    // and waited for; then %reserved_smem_offset_*: a region after the kernel's shared
    // memory (here 64 static bytes), usable through a generic address.
    let ptx = format!(
        "{HEADER}.visible .entry k(.param .u64 src, .param .u64 out)\n{{\n\
         .shared .align 16 .b8 buf[64];\n .reg .b32 %r<12>; .reg .b64 %rd<8>;\n\
         ld.param.u64 %rd1, [src];\n ld.param.u64 %rd2, [out];\n\
         mov.u32 %r1, buf;\n\
         cp.async.cg.shared.global [%r1], [%rd1], 16;\n\
         cp.async.ca.shared.global [%r1+16], [%rd1+16], 8;\n\
         cp.async.ca.shared.global [%r1+24], [%rd1+24], 4;\n\
         cp.async.ca.shared.global [%r1+28], [%rd1+28], 4, 0;\n\
         cp.async.commit_group;\n cp.async.wait_group 0;\n cp.async.wait_all;\n bar.sync 0;\n\
         ld.shared.v4.u32 {{%r2, %r3, %r4, %r5}}, [buf];\n st.global.v4.u32 [%rd2], {{%r2, %r3, %r4, %r5}};\n\
         ld.shared.v4.u32 {{%r2, %r3, %r4, %r5}}, [buf+16];\n st.global.v4.u32 [%rd2+16], {{%r2, %r3, %r4, %r5}};\n\
         mov.u32 %r6, %reserved_smem_offset_begin;\n mov.u32 %r7, %reserved_smem_offset_end;\n\
         mov.u32 %r8, %reserved_smem_offset_cap;\n mov.u32 %r9, %reserved_smem_offset_1;\n\
         st.global.v4.u32 [%rd2+32], {{%r6, %r7, %r8, %r9}};\n\
         cvt.u64.u32 %rd3, %r9;\n cvta.shared.u64 %rd4, %rd3;\n\
         mov.u32 %r10, 77;\n st.u32 [%rd4], %r10;\n ld.shared.u32 %r11, [%r9];\n\
         st.global.u32 [%rd2+48], %r11;\n ret;\n}}\n"
    );
    let mut s = sim(1);
    let m = s.load_module("cpasync.ptx", &ptx).unwrap();
    let src = s.malloc(32).unwrap();
    let words: Vec<u8> = (1..=8u32)
        .flat_map(|w| (w * 0x0101_0101).to_le_bytes())
        .collect();
    s.memcpy_htod(src, &words).unwrap();
    let out = s.malloc(64).unwrap();
    s.launch(
        &m,
        "k",
        cfg(1, 1),
        &[KernelArg::Ptr(src), KernelArg::Ptr(out)],
    )
    .unwrap();
    let got = read_u32(&mut s, out, 13);
    let want: Vec<u32> = (1..=7u32).map(|w| w * 0x0101_0101).chain([0]).collect();
    assert_eq!(
        &got[..8],
        &want[..],
        "the copied words, the last one zero-filled"
    );
    // Reserved memory after the 64 static bytes: begin 64, end 64 + 1024, cap 1024, _1 in
    // it; a store through its generic address reads back.
    assert_eq!(&got[8..12], &[64, 64 + 1024, 1024, 64 + 512]);
    assert_eq!(got[12], 77);
}

#[test]
fn mbarrier_waits_let_the_arriving_warps_run() {
    // Warp 0 waits on a shared-memory mbarrier that warp 1's 32 threads arrive at after
    // writing `buf`: the waiting warp must yield to its sibling (it runs first here), and
    // what it reads after the wait is what warp 1 wrote. The state `arrive` returns is the
    // phase arrived in (0); after the phase completes, `test_wait` with that state is true.
    let ptx = format!(
        "{HEADER}.visible .entry k(.param .u64 out)\n{{\n\
         .shared .align 8 .b64 bar;\n .shared .align 4 .b32 buf[32];\n\
         .reg .b32 %r<12>; .reg .b64 %rd<8>; .reg .pred %p<4>;\n\
         ld.param.u64 %rd1, [out];\n mov.u32 %r1, %tid.x;\n\
         setp.ne.u32 %p1, %r1, 0;\n @%p1 bra SKIP;\n mov.u32 %r2, 32;\n\
         mbarrier.init.shared.b64 [bar], %r2;\n\
         SKIP:\n bar.sync 0;\n setp.lt.u32 %p1, %r1, 32;\n @%p1 bra CONSUMER;\n\
         sub.u32 %r3, %r1, 32;\n mul.lo.u32 %r4, %r3, 7;\n mov.u32 %r5, buf;\n\
         shl.b32 %r6, %r3, 2;\n add.u32 %r5, %r5, %r6;\n st.shared.u32 [%r5], %r4;\n\
         mbarrier.arrive.shared.b64 %rd2, [bar];\n\
         shr.u64 %rd3, %rd2, 63;\n cvt.u32.u64 %r7, %rd3;\n\
         mul.wide.u32 %rd4, %r1, 4;\n add.s64 %rd5, %rd1, %rd4;\n st.global.u32 [%rd5], %r7;\n\
         ret;\n\
         CONSUMER:\n\
         WAIT:\n mbarrier.try_wait.parity.shared.b64 %p2, [bar], 0;\n @!%p2 bra WAIT;\n\
         mov.u64 %rd6, 0;\n mbarrier.test_wait.shared.b64 %p3, [bar], %rd6;\n\
         selp.u32 %r8, 1, 0, %p3;\n\
         mov.u32 %r5, buf;\n shl.b32 %r6, %r1, 2;\n add.u32 %r5, %r5, %r6;\n ld.shared.u32 %r9, [%r5];\n\
         add.u32 %r9, %r9, %r8;\n\
         mul.wide.u32 %rd4, %r1, 4;\n add.s64 %rd5, %rd1, %rd4;\n st.global.u32 [%rd5], %r9;\n\
         ret;\n}}\n"
    );
    for threads in [1, 2] {
        let mut s = sim(threads);
        let m = s.load_module("mbarrier.ptx", &ptx).unwrap();
        let out = s.malloc(4 * 64).unwrap();
        s.memset_d8(out, 0xff, 4 * 64).unwrap();
        s.launch(&m, "k", cfg(1, 64), &[KernelArg::Ptr(out)])
            .unwrap();
        let got = read_u32(&mut s, out, 64);
        // What warp 1 wrote, plus 1 for the completed phase `test_wait` saw.
        let want: Vec<u32> = (0..32).map(|l| l * 7 + 1).collect();
        assert_eq!(&got[..32], &want[..], "{threads} thread(s)");
        assert_eq!(&got[32..], &[0; 32], "arrivals in phase 0");
    }
}

/// clang-14's PTX (`-O2 --cuda-gpu-arch=sm_80`) of
/// ```cuda
/// typedef int (*op_t)(int);
/// __device__ __noinline__ int add1(int x) { return x + 1; }
/// __device__ __noinline__ int twice(int x) { return 2 * x; }
/// __device__ op_t table[2] = {add1, twice};
/// extern "C" __global__ void k(int *out, op_t extra) {
///   int i = threadIdx.x;
///   op_t f = (i == 5) ? extra : table[i & 1];
///   out[i] = f(i);
/// }
/// ```
const FUNCTION_POINTERS: &str = ".version 7.0
.target sm_80
.address_size 64
.visible .func  (.param .b32 func_retval0) _Z4add1i
(
	.param .b32 _Z4add1i_param_0
)
;
.visible .func  (.param .b32 func_retval0) _Z5twicei
(
	.param .b32 _Z5twicei_param_0
)
;
.visible .global .align 8 .u64 table[2] = {_Z4add1i, _Z5twicei};

.visible .func  (.param .b32 func_retval0) _Z4add1i(
	.param .b32 _Z4add1i_param_0
)
{
	.reg .b32 	%r<3>;
	ld.param.u32 	%r1, [_Z4add1i_param_0];
	add.s32 	%r2, %r1, 1;
	st.param.b32 	[func_retval0+0], %r2;
	ret;
}
.visible .func  (.param .b32 func_retval0) _Z5twicei(
	.param .b32 _Z5twicei_param_0
)
{
	.reg .b32 	%r<3>;
	ld.param.u32 	%r1, [_Z5twicei_param_0];
	shl.b32 	%r2, %r1, 1;
	st.param.b32 	[func_retval0+0], %r2;
	ret;
}
.visible .entry k(
	.param .u64 k_param_0,
	.param .u64 k_param_1
)
{
	.reg .pred 	%p<2>;
	.reg .b32 	%r<5>;
	.reg .b64 	%rd<12>;
	ld.param.u64 	%rd11, [k_param_1];
	ld.param.u64 	%rd6, [k_param_0];
	cvta.to.global.u64 	%rd1, %rd6;
	mov.u32 	%r1, %tid.x;
	setp.eq.s32 	%p1, %r1, 5;
	@%p1 bra 	LBB2_2;
	and.b32  	%r2, %r1, 1;
	mul.wide.u32 	%rd7, %r2, 8;
	mov.u64 	%rd8, table;
	add.s64 	%rd2, %rd8, %rd7;
	ld.global.u64 	%rd11, [%rd2];
LBB2_2:
	{ // callseq 0, 0
	.reg .b32 temp_param_reg;
	.param .b32 param0;
	st.param.b32 	[param0+0], %r1;
	.param .b32 retval0;
	prototype_0 : .callprototype (.param .b32 _) _ (.param .b32 _);
	call (retval0), 
	%rd11, 
	(
	param0
	)
	, prototype_0;
	ld.param.b32 	%r3, [retval0+0];
	} // callseq 0
	mul.wide.s32 	%rd9, %r1, 4;
	add.s64 	%rd10, %rd1, %rd9;
	st.global.u32 	[%rd10], %r3;
	ret;
}
";

#[test]
fn indirect_calls_run_the_function_each_lanes_pointer_names() {
    for threads in [1, 2] {
        let mut s = sim(threads);
        let m = s.load_module("fp.ptx", FUNCTION_POINTERS).unwrap();
        // The table's initialiser holds the functions' addresses, readable from the host
        // (as cudaMemcpyFromSymbol would) and passed back as a kernel argument.
        let table = m.global("table").unwrap();
        let mut b = [0u8; 16];
        s.memcpy_dtoh(&mut b, table).unwrap();
        let add1 = u64::from_le_bytes(b[..8].try_into().unwrap());
        let twice = u64::from_le_bytes(b[8..].try_into().unwrap());
        assert!(
            add1 != 0 && twice != 0 && add1 != twice,
            "{add1:#x} {twice:#x}"
        );
        let out = s.malloc(4 * 40).unwrap();
        for (extra, five) in [(twice, 10), (add1, 6)] {
            s.launch(
                &m,
                "k",
                cfg(1, 40),
                &[KernelArg::Ptr(out), KernelArg::U64(extra)],
            )
            .unwrap();
            let want: Vec<u32> = (0..40)
                .map(|i| match i {
                    5 => five,
                    i if i % 2 == 0 => i + 1,
                    i => 2 * i,
                })
                .collect();
            assert_eq!(read_u32(&mut s, out, 40), want, "{threads} thread(s)");
        }
        // A function pointer is no data pointer: reading through it faults.
        let e = s.memcpy_dtoh(&mut b[..4], cuda_guest::sim::DevicePtr(add1));
        assert!(e.is_err(), "read at a function's address: {e:?}");
    }
}

#[test]
fn a_call_through_a_pointer_naming_no_function_stops_the_launch() {
    let mut s = sim(2);
    let m = s.load_module("fp.ptx", FUNCTION_POINTERS).unwrap();
    let other = s.load_module("fp2.ptx", FUNCTION_POINTERS).unwrap();
    let out = s.malloc(4 * 40).unwrap();
    let mut b = [0u8; 8];
    s.memcpy_dtoh(&mut b, other.global("table").unwrap())
        .unwrap();
    let foreign = u64::from_le_bytes(b);
    // Null, a data pointer, and the same function of another module.
    for bad in [0, out.0, foreign] {
        let e = s
            .launch(
                &m,
                "k",
                cfg(1, 40),
                &[KernelArg::Ptr(out), KernelArg::U64(bad)],
            )
            .unwrap_err();
        let SimError::BadCall { at, address } = &e else {
            panic!("{bad:#x}: {e}")
        };
        assert_eq!(*address, bad);
        // Only thread 5 called through `extra`.
        assert_eq!((at.block, at.thread), ([0, 0, 0], [5, 0, 0]), "{e}");
        assert!(e.to_string().contains("names no function"), "{e}");
        s.reset();
    }
}

#[test]
fn bmsk_and_vabsdiff4_as_thrust_and_stereo_kernels_use_them() {
    // Lane l: bmsk.clamp with a = l, b = 40 - l (clamped to 32); bmsk.wrap with
    // a = l + 30, b = l; vabsdiff4.u32 and .s32 .add of two packed words plus 1000.
    let ptx = format!(
        "{HEADER}.visible .entry k(.param .u64 out)\n{{\n\
         .reg .b32 %r<16>; .reg .b64 %rd<6>;\n\
         ld.param.u64 %rd1, [out]; mov.u32 %r1, %tid.x;\n\
         mov.u32 %r2, 40; sub.u32 %r3, %r2, %r1;\n\
         bmsk.clamp.b32 %r4, %r1, %r3;\n\
         add.u32 %r5, %r1, 30; bmsk.wrap.b32 %r6, %r5, %r1;\n\
         mul.lo.u32 %r7, %r1, 0x01030507; mov.u32 %r8, 0x80ff10f0;\n\
         vabsdiff4.u32.u32.u32.add %r9, %r7, %r8, 1000;\n\
         vabsdiff4.s32.s32.s32.add %r10, %r7, %r8, 1000;\n\
         mul.wide.u32 %rd2, %r1, 16; add.s64 %rd3, %rd1, %rd2;\n\
         st.global.v4.u32 [%rd3], {{%r4, %r6, %r9, %r10}};\n\
         ret;\n}}\n"
    );
    let mut s = sim(2);
    let m = s.load_module("bits.ptx", &ptx).unwrap();
    let out = s.malloc(16 * 32).unwrap();
    s.launch(&m, "k", cfg(1, 32), &[KernelArg::Ptr(out)])
        .unwrap();
    let got = read_u32(&mut s, out, 128);
    let mask = |p: u32, w: u32| (((1u64 << w) - 1) << p) as u32;
    let sad = |x: u32, y: u32, signed: bool| {
        let b = |v: u32, i: u32| {
            let v = (v >> (8 * i)) as u8;
            if signed {
                v as i8 as i64
            } else {
                v as i64
            }
        };
        (1000 + (0..4).map(|i| (b(x, i) - b(y, i)).abs()).sum::<i64>()) as u32
    };
    for l in 0..32u32 {
        let w = l.wrapping_mul(0x0103_0507);
        let want = [
            mask(l.min(32), (40 - l).min(32)),
            mask((l + 30) & 31, l & 31),
            sad(w, 0x80ff_10f0, false),
            sad(w, 0x80ff_10f0, true),
        ];
        assert_eq!(&got[4 * l as usize..4 * l as usize + 4], &want, "lane {l}");
    }
}

#[test]
fn a_32_bit_shared_address_wraps_with_its_offset() {
    // nvcc's unrolled loops address shared memory as `[%r+128]` with `%r` = base - 128
    // (a 32-bit register that went below zero): the sum wraps at 2^32, as on the GPU.
    let ptx = format!(
        "{HEADER}.visible .entry k(.param .u64 out)\n{{\n .reg .b32 %r<6>; .reg .b64 %rd<4>;\n\
         .shared .align 4 .b8 sm[128];\n ld.param.u64 %rd1, [out];\n mov.u32 %r1, %tid.x;\n\
         mov.u32 %r2, sm;\n shl.b32 %r3, %r1, 2;\n add.s32 %r4, %r2, %r3;\n add.s32 %r4, %r4, -128;\n\
         add.s32 %r5, %r1, 100;\n st.shared.u32 [%r4+128], %r5;\n bar.sync 0;\n\
         ld.shared.u32 %r5, [%r4+128];\n mul.wide.u32 %rd2, %r1, 4;\n add.s64 %rd3, %rd1, %rd2;\n\
         st.global.u32 [%rd3], %r5;\n ret;\n}}\n"
    );
    let mut s = sim(1);
    let m = s.load_module("wrap.ptx", &ptx).unwrap();
    let out = s.malloc(4 * 32).unwrap();
    s.launch(&m, "k", cfg(1, 32), &[KernelArg::Ptr(out)])
        .unwrap();
    let want: Vec<u32> = (100..132).collect();
    assert_eq!(read_u32(&mut s, out, 32), want);
}

/// A warp loads a 16x16 f16 matrix and its identity as wmma fragments, multiplies them
/// and stores the product (f32): the matrix back.
fn wmma_kernel() -> String {
    let r = |p: &str, n: usize| {
        (1..=n)
            .map(|i| format!("%{p}{i}"))
            .collect::<Vec<_>>()
            .join(",")
    };
    format!(
        "{HEADER}.visible .entry k(.param .u64 a, .param .u64 b, .param .u64 c)\n{{\n\
         .reg .b32 %r<9>; .reg .b32 %q<9>; .reg .f32 %f<9>; .reg .f32 %z; .reg .b64 %rd<4>;\n\
         ld.param.u64 %rd1, [a];\n ld.param.u64 %rd2, [b];\n ld.param.u64 %rd3, [c];\n\
         mov.f32 %z, 0f00000000;\n\
         wmma.load.a.sync.aligned.row.m16n16k16.global.f16 {{{a}}}, [%rd1], 16;\n\
         wmma.load.b.sync.aligned.col.m16n16k16.global.f16 {{{b}}}, [%rd2], 16;\n\
         wmma.mma.sync.aligned.row.col.m16n16k16.f32.f32 {{{f}}}, {{{a}}}, {{{b}}}, {{%z,%z,%z,%z,%z,%z,%z,%z}};\n\
         wmma.store.d.sync.aligned.row.m16n16k16.global.f32 [%rd3], {{{f}}}, 16;\n ret;\n}}\n",
        a = r("r", 8),
        b = r("q", 8),
        f = r("f", 8),
    )
}

#[test]
fn wmma_multiplies_fragments_and_needs_the_whole_warp() {
    let ptx = wmma_kernel();
    let mut s = sim(1);
    let m = s.load_module("wmma.ptx", &ptx).unwrap();
    let (a, b, c) = (
        s.malloc(512).unwrap(),
        s.malloc(512).unwrap(),
        s.malloc(1024).unwrap(),
    );
    // The f16 bits of a small integer; A holds i % 17, B the identity.
    let half = |v: u32| -> [u8; 2] {
        let bits = match v {
            0 => 0,
            _ => {
                let e = 31 - v.leading_zeros();
                ((e + 15) << 10) | ((v << (10 - e)) & 0x3ff)
            }
        };
        (bits as u16).to_le_bytes()
    };
    let av: Vec<u8> = (0..256).flat_map(|i| half(i % 17)).collect();
    let bv: Vec<u8> = (0..256)
        .flat_map(|i| half((i / 16 == i % 16) as u32))
        .collect();
    s.memcpy_htod(a, &av).unwrap();
    s.memcpy_htod(b, &bv).unwrap();
    let args = [KernelArg::Ptr(a), KernelArg::Ptr(b), KernelArg::Ptr(c)];
    s.launch(&m, "k", cfg(1, 32), &args).unwrap();
    let mut out = vec![0u8; 1024];
    s.memcpy_dtoh(&mut out, c).unwrap();
    let got: Vec<f32> = out
        .chunks(4)
        .map(|x| f32::from_le_bytes(x.try_into().unwrap()))
        .collect();
    let want: Vec<f32> = (0..256).map(|i| (i % 17) as f32).collect();
    assert_eq!(got, want);
    // Half a warp: a divergence at a warp-wide instruction, named.
    let e = s.launch(&m, "k", cfg(1, 16), &args).unwrap_err();
    let SimError::BarrierDivergence { at, message } = &e else {
        panic!("{e}")
    };
    assert!(
        message.contains("wmma") && message.contains("0x0000ffff"),
        "{e}"
    );
    assert_eq!(
        at.line,
        1 + ptx.lines().position(|l| l.contains("wmma.load.a")).unwrap() as u32
    );
    s.reset();
    // A matrix past its allocation's end: the load faults at its line.
    let small = s.malloc(256).unwrap();
    let e = s
        .launch(
            &m,
            "k",
            cfg(1, 32),
            &[KernelArg::Ptr(small), KernelArg::Ptr(b), KernelArg::Ptr(c)],
        )
        .unwrap_err();
    let SimError::MemoryFault(f) = &e else {
        panic!("{e}")
    };
    assert_eq!(f.address, small.0 + 256, "{e}");
    assert_eq!(
        f.at.line,
        1 + ptx.lines().position(|l| l.contains("wmma.load.a")).unwrap() as u32
    );
}

#[test]
fn environment_registers_read_as_in_a_launch_that_is_not_cooperative() {
    // Cooperative groups' `this_grid()` reads its workspace from %envreg1:%envreg2: a
    // kernel using it loads, and `grid.sync()` (a null workspace) traps, as on a GPU
    // outside a cooperative launch.
    let ptx = format!(
        "{HEADER}.visible .entry k(.param .u64 out)\n{{\n .reg .b32 %r<4>; .reg .b64 %rd<4>; .reg .pred %p<2>;\n\
         ld.param.u64 %rd1, [out];\n mov.u32 %r1, %envreg2;\n mov.u32 %r2, %envreg1;\n\
         cvt.u64.u32 %rd2, %r1;\n st.global.u64 [%rd1], %rd2;\n setp.ne.u32 %p1, %r2, 0;\n\
         @%p1 bra DONE;\n trap;\nDONE:\n ret;\n}}\n"
    );
    let mut s = sim(1);
    let m = s.load_module("envreg.ptx", &ptx).unwrap();
    let out = s.malloc(8).unwrap();
    s.memcpy_htod(out, &[0xff; 8]).unwrap();
    let e = s
        .launch(&m, "k", cfg(1, 32), &[KernelArg::Ptr(out)])
        .unwrap_err();
    assert!(matches!(e, SimError::Trap { .. }), "{e}");
    s.reset();
    let mut b = [0u8; 8];
    s.memcpy_dtoh(&mut b, out).unwrap();
    assert_eq!(b, [0; 8]);
}
