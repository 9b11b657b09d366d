//! Checks the corpus itself: every kernel has its source and both PTX files, the PTX
//! parameter lists match the references' `PARAMS`, and the reference implementations
//! give hand-computed values on small inputs.

mod common;

use common::reference::*;

#[test]
fn every_kernel_has_source_and_both_ptx() {
    for kernel in WORKING_KERNELS.iter().chain(&BROKEN_KERNELS) {
        let cu = fixtures_dir().join(format!("{kernel}.cu"));
        assert!(cu.is_file(), "{} missing", cu.display());
        for c in Compiler::ALL {
            let ptx = load_ptx(kernel, c);
            assert!(
                ptx.contains(".target sm_80"),
                "{kernel}.{}: not sm_80",
                c.tag()
            );
            assert!(
                ptx.contains(&format!(".visible .entry {kernel}(")),
                "{kernel}.{}: no entry",
                c.tag()
            );
        }
    }
    // Nothing in the directory that the lists above do not know about.
    let mut sources: Vec<String> = std::fs::read_dir(fixtures_dir())
        .unwrap()
        .filter_map(|e| {
            e.unwrap()
                .file_name()
                .to_str()?
                .strip_suffix(".cu")
                .map(str::to_owned)
        })
        .collect();
    sources.sort();
    let mut known: Vec<String> = WORKING_KERNELS
        .iter()
        .chain(&BROKEN_KERNELS)
        .map(|s| s.to_string())
        .collect();
    known.sort();
    assert_eq!(sources, known);
}

#[test]
fn ptx_parameter_lists_match_the_references() {
    for kernel in WORKING_KERNELS.iter().chain(&BROKEN_KERNELS) {
        let want: Vec<&str> = params(kernel).unwrap().iter().map(|p| p.ty.ptx()).collect();
        for c in Compiler::ALL {
            let got = entry_param_types(&load_ptx(kernel, c), kernel).unwrap();
            assert_eq!(got, want, "{kernel}.{}", c.tag());
        }
    }
}

#[test]
fn ptx_versions_are_the_documented_ones() {
    for kernel in WORKING_KERNELS.iter().chain(&BROKEN_KERNELS) {
        assert!(
            load_ptx(kernel, Compiler::Clang).contains("\n.version 7.0\n"),
            "{kernel}"
        );
        let nvrtc = load_ptx(kernel, Compiler::Nvrtc);
        assert!(nvrtc.contains("\n.version 8.8\n"), "{kernel}");
        assert!(
            nvrtc.contains("Cuda compilation tools, release 12.9, V12.9.86"),
            "{kernel}"
        );
    }
}

#[test]
fn launch_configs_leave_partial_blocks() {
    // Threads launched (or, for the grid-stride saxpy, elements) never divide evenly.
    let vadd = vector_add::Inputs::new();
    assert_eq!(vector_add::config(&vadd).grid, Dim3::x(8));
    assert_ne!(vadd.a.len() % 128, 0);
    let mm = matmul_tiled::Inputs::new();
    let cfg = matmul_tiled::config(&mm);
    assert_eq!(
        (cfg.grid, cfg.block),
        (Dim3::new(3, 3, 1), Dim3::new(16, 16, 1))
    );
    let st = stencil3d::Inputs::new();
    assert_eq!(stencil3d::config(&st).grid, Dim3::new(3, 2, 3));
    let rb = reduce_block::Inputs::new();
    assert_eq!(reduce_block::config(&rb).grid, Dim3::x(20));
    assert_eq!(
        dyn_shared::config(&dyn_shared::Inputs::new()).shared_bytes,
        1024
    );
}

#[test]
fn vector_add_saxpy_by_hand() {
    let i = vector_add::Inputs {
        a: vec![1.0, 2.5, -3.0],
        b: vec![0.5, 0.25, 3.0],
    };
    assert_eq!(vector_add::reference(&i), vec![1.5, 2.75, 0.0]);
    let s = saxpy::Inputs {
        a: 2.0,
        x: vec![1.0, -1.5],
        y: vec![0.5, 4.0],
    };
    assert_eq!(saxpy::reference(&s), vec![2.5, 1.0]);
    // The fma is single-rounded: 0.1f * 10 + -1 is not 0 as it would be with a
    // rounded product.
    let s = saxpy::Inputs {
        a: 0.1,
        x: vec![10.0],
        y: vec![-1.0],
    };
    assert_eq!(saxpy::reference(&s), vec![1.0 / 67_108_864.0]); // 2^-26
}

#[test]
fn reduce_block_sums_each_block() {
    // 20 blocks over 5000 ones: 19 full blocks of 256, then 136.
    let i = reduce_block::Inputs {
        input: vec![1.0; 5000],
    };
    let out = reduce_block::reference(&i);
    assert_eq!(out.len(), 20);
    assert!(out[..19].iter().all(|&s| s == 256.0));
    assert_eq!(out[19], 136.0);
    // Order matters: 2^24 + 1 + 1 ... the tree adds pairs first.
    let mut v = vec![0.0f32; 5000];
    v[0] = 16_777_216.0;
    v[1] = 1.0;
    v[65] = 1.0; // thread 1 at stride 64 meets thread 65: 1 + 1 = 2 first
    assert_eq!(
        reduce_block::reference(&reduce_block::Inputs { input: v })[0],
        16_777_218.0
    );
}

#[test]
fn matmul_by_hand() {
    // [1 2; 3 4] * [5 6; 7 8] = [19 22; 43 50]
    let i = matmul_tiled::Inputs {
        m: 2,
        n: 2,
        k: 2,
        a: vec![1.0, 2.0, 3.0, 4.0],
        b: vec![5.0, 6.0, 7.0, 8.0],
    };
    assert_eq!(matmul_tiled::reference(&i), vec![19.0, 22.0, 43.0, 50.0]);
    let i = matmul_tiled::Inputs {
        m: 1,
        n: 3,
        k: 1,
        a: vec![2.0],
        b: vec![1.0, -1.0, 0.5],
    };
    assert_eq!(matmul_tiled::reference(&i), vec![2.0, -2.0, 1.0]);
}

#[test]
fn atomics_by_hand() {
    let h = histogram::reference(&histogram::Inputs {
        data: vec![0, 5, 10, 257, 0xffff_ffff],
        nbins: 5,
    });
    assert_eq!(h.bins, vec![4, 0, 1, 0, 0]); // 2^32 - 1 = 5 * 858993459
    assert_eq!(h.total_f32, (5 + 10 + 1 + 255) as f32);
    assert_eq!(h.total_u64, 5 + 10 + 257 + 0xffff_ffff);

    // 12 values in one block: inc wraps at 9 (12 % 10 = 2), dec from 0 with limit 6
    // goes 6 5 4 3 2 1 0 6 5 4 3 2 -> 2.
    let data: Vec<u32> = (1..=12).collect();
    let o = shared_atomics::reference(&shared_atomics::Inputs { data });
    // xor of 1..=12 is 12 (1^2^3, 4^5^6^7 and 8^9^10^11 are 0); the largest
    // v ^ 0x5a5a5a5a is at v = 5 (0x5a ^ 5 = 0x5f).
    assert_eq!(
        o.stats,
        vec![12, 1, 0xf0f0_f0f0, 0x0f, 12, 2, 2, 0xabcd_1234, 0x5a5a_5a5f]
    );
    assert_eq!(o.bins[1..=12], [1; 12]);
    assert_eq!(o.bins.iter().sum::<u32>(), 12);
}

#[test]
fn warp_reduce_by_hand() {
    // 40 ones: warp 0 full, warp 1 has 8 live lanes; 4 warps launched (128 threads).
    let i = warp_reduce::Inputs {
        input: vec![1.0; 40],
    };
    let o = warp_reduce::reference(&i);
    assert_eq!(o.sums, vec![32.0, 8.0, 0.0, 0.0]);
    assert_eq!(
        o.scan[..32],
        (1..=32).map(|v| v as f32).collect::<Vec<_>>()[..]
    );
    assert_eq!(
        o.scan[32..],
        (1..=8).map(|v| v as f32).collect::<Vec<_>>()[..]
    );
    assert_eq!(o.maxs, vec![1.0, 1.0, 0.0, 0.0]);
    assert_eq!(o.bcast, vec![1.0, 0.0, 0.0, 0.0]);
    assert_eq!(
        &o.bits[..8],
        &[0xffff_ffff, 2, 0xaaaa_aaaa, 32, 0xff, 2, 0xaaaa_aaaa, 8]
    );
    // Negative lane: any = 1, all = 0.
    let mut v = vec![1.0; 32];
    v[3] = -1.0;
    let o = warp_reduce::reference(&warp_reduce::Inputs { input: v });
    assert_eq!(o.bits[..2], [!(1u32 << 3), 1]);
    assert_eq!(o.sums[0], 30.0);
}

#[test]
fn bit_helpers_follow_the_ptx_isa() {
    assert_eq!(bfe32(0xf0f0_f0f0, 4, 8, false), 0x0f);
    assert_eq!(bfe32(0x8000_0000, 28, 8, false), 0x8); // field runs past bit 31
    assert_eq!(bfe32(0x8000_0000, 28, 8, true), 0xffff_fff8); // sign of bit 31 fills
    assert_eq!(bfe32(0x0000_0100, 8, 1, true), 0xffff_ffff);
    assert_eq!(bfe32(0x1234, 0, 0, true), 0);
    assert_eq!(bfe64(u64::MAX, 60, 17), 0xf);
    assert_eq!(bfi32(0xfff, 0, 8, 12), 0x000f_ff00);
    assert_eq!(bfi32(0xffff_ffff, 0, 28, 12), 0xf000_0000); // clipped at bit 31
    assert_eq!(int_to_f32(16_777_217, Rounding::Zero), 16_777_216.0);
    assert_eq!(int_to_f32(16_777_217, Rounding::Up), 16_777_218.0);
    assert_eq!(int_to_f32(-16_777_217, Rounding::Down), -16_777_218.0);
    assert_eq!(int_to_f32(-16_777_217, Rounding::Zero), -16_777_216.0);
    assert_eq!(int_to_f32(16_777_219, Rounding::Nearest), 16_777_220.0);
    assert_eq!(f64_to_f32(1.0 + f64::EPSILON, Rounding::Zero), 1.0);
    assert_eq!(
        f64_to_f32(1.0 + f64::EPSILON, Rounding::Up),
        1.0f32.next_up()
    );
    assert_eq!(ulp_diff_f32(1.0, 1.0f32.next_up().next_up()), 2);
    assert_eq!(ulp_diff_f32(-0.0, 0.0), 0);
    assert_eq!(ulp_diff_f32(f32::from_bits(1), -f32::from_bits(1)), 2);
}

#[test]
fn bits64_by_hand() {
    let i = bits64::Inputs {
        input: vec![0, 1 << 40],
        in16: vec![-1, 2],
    };
    let o = bits64::reference(&i);
    // x = 0: y = in[0] = 0, sh = 0; murmur(0) = 0; clz(0) = 64, ffs(0) = 0, popc 0.
    assert_eq!(o.out[..4], [0, 0, 0, 64 << 8]);
    // x = 2^40: j = x % 2 = 0, y = 0, sh = 0; brev puts bit 40 at 23.
    assert_eq!(o.out[5], 1 << 40);
    assert_eq!(o.out[6], 1 << 23);
    assert_eq!(o.out[7], (1 << 40) + (1 | (64 << 8) | (41 << 16)));
    // hi = 0x100, lo = 0: bfe.s32(hi, 7, 9) = 0b10 (bit 8 set, sign bit 15 clear).
    assert_eq!(o.out32[4..], [0, 2, 0x0001_0000, 0]);
    assert_eq!(o.out16, vec![0xffff, 0x102]);
}

#[test]
fn math_by_hand() {
    let mut i = math::Inputs::new();
    i.x.truncate(20);
    i.y.truncate(20);
    i.k.truncate(20);
    let o = math::reference(&i);
    let f = |e: usize, j: usize| o.f[e * math::NF + j];
    let n = |e: usize, j: usize| o.i[e * math::NI + j];
    // x = 2.5: rint 2, floor 2, ceil 3, trunc 2; f2i rn/rz/rd/ru = 2, 2, 2, 3.
    assert_eq!([f(6, 7), f(6, 8), f(6, 9), f(6, 10)], [2.0, 2.0, 3.0, 2.0]);
    assert_eq!(o.i[6 * math::NI..6 * math::NI + 5], [2, 2, 2, 3, 2]);
    // x = -2.5: rn -2 (even), rd -3, ru -2.
    assert_eq!(o.i[7 * math::NI..7 * math::NI + 4], [-2, -2, -3, -2]);
    // x = 3.5 -> 4; x = 3e9 saturates; x * 1e8 saturates for 22.
    assert_eq!(n(8, 0), 4);
    assert_eq!(n(16, 0), i32::MAX);
    assert_eq!(n(17, 2), i32::MIN);
    assert_eq!(n(16, 5), 3_000_000_000u32 as i32);
    assert_eq!(n(19, 5), 4_000_000_000u32 as i32);
    assert_eq!(n(12, 6), i32::MAX);
    assert_eq!(n(9, 7), 127); // exponent of 1.0
                              // k = 16777217: rz/rd 16777216, ru 16777218, rn 16777216.
    assert_eq!(
        [f(3, 11), f(3, 12), f(3, 13), f(3, 14)],
        [16_777_216.0, 16_777_216.0, 16_777_218.0, 16_777_216.0]
    );
    // k = -1 as unsigned, rz: 4294967295 -> 4294967040.
    assert_eq!(f(2, 15), 4_294_967_040.0);
    // k = 7: 49 exactly.
    assert_eq!(f(15, 16), 49.0);
    // x = 0: exp 1, sqrt 0; x = 1: exp(1) rounded.
    assert_eq!(f(0, 0), 1.0);
    assert_eq!(f(9, 0), std::f32::consts::E);
    assert_eq!(f(1, 1), 0.0);
    assert_eq!(
        math::check(&i, 14, 0, Compiler::Clang),
        math::Check::Ulps(4)
    );
    assert_eq!(math::check(&i, 16, 0, Compiler::Nvrtc), math::Check::Skip);
}

#[test]
fn f64_by_hand() {
    let i = f64k::Inputs {
        a: 2.0,
        x: vec![0.0, 1.0, -2.5],
        y: vec![1.0, 1.0, 0.0],
    };
    let o = f64k::reference(&i);
    assert_eq!(o.y, vec![1.0, 3.0, -5.0]);
    // p(0) = 1; p(1) = 1 - 0.5 + 0.25 - 0.125 + 0.0625 - 0.03125 = 0.65625.
    assert_eq!(o.poly[..4], [1.0, 1.0, 0.328_125, 1.0 + 0.65625]);
    assert_eq!(o.conv[..2], [1_000_000, 656_250]);
    assert_eq!(o.narrow[..4], [1.0, 1.0, 0.65625, 0.65625]);
    assert_eq!(o.sum, 0.0 + 1.0 - 2.0);
}

#[test]
fn device_call_transpose_stencil_dyn_shared_by_hand() {
    let i = device_call::Inputs {
        x: vec![2.0, 2.0],
        coeffs: vec![1.0, 1.0, 1.0],
    };
    // 1 + 2 + 4 = 7, plus pw[0] = 1 or pw[1] = 2.
    assert_eq!(device_call::reference(&i), vec![8.0, 9.0]);

    let t = transpose2d::Inputs {
        rows: 2,
        cols: 3,
        input: vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0],
    };
    assert_eq!(
        transpose2d::reference(&t),
        vec![1.0, 4.0, 2.0, 5.0, 3.0, 6.0]
    );

    let mut s = stencil3d::Inputs::new();
    s.input = vec![1.0; s.nx * s.ny * s.nz];
    let out = stencil3d::reference(&s);
    // Interior: 0.1 * 6 + 0.4 * 1 (as f32 fma); boundary copies 1.
    assert_eq!(out[0], 1.0);
    let c = s.nx * s.ny + s.nx + 1;
    assert_eq!(out[c], 0.1f32.mul_add(6.0, 0.4));

    let d = dyn_shared::Inputs {
        input: (0..130).map(|v| v as f32).collect(),
    };
    let (out, out2) = dyn_shared::reference(&d);
    assert_eq!(out[0], 127.0);
    assert_eq!(out[127], 0.0);
    assert_eq!(out[128..], [129.0, 128.0]);
    assert_eq!(out2[0], 1);
    assert_eq!(out2[127], 0);
    assert_eq!(out2[128..], [1 ^ 1, 4 ^ 1]);
}

#[test]
fn broken_kernel_expectations() {
    use broken::*;
    assert_eq!((oob_write::FAULT_BLOCK, oob_write::FAULT_THREAD), (7, 104));
    assert_eq!(oob_write::FAULT_OFFSET, 4000);
    assert!(oob_write::CONFIG.grid.count() * oob_write::CONFIG.block.count() > oob_write::N);
    assert_eq!(use_after_free::reference(&[1.0, 2.0]), vec![2.0, 3.0]);
    assert_eq!(divergent_barrier::ARRIVED_LANES.count_ones(), 16);
    // The broken kernels carry the bug in both compilers' PTX.
    for c in Compiler::ALL {
        let ptx = load_ptx("infinite_loop", c);
        assert!(ptx.contains("ld.volatile.global.u32"), "{}", c.tag());
        let ptx = load_ptx("divergent_barrier", c);
        let bar = ptx.find("bar.sync").unwrap();
        let parity = ptx.find(", 1;").unwrap(); // and.b32 %r, %tid, 1
        assert!(
            parity < bar,
            "{}: the barrier must sit inside the `t & 1` branch",
            c.tag()
        );
        assert_eq!(ptx.matches("bar.sync").count(), 1, "{}", c.tag());
        let ptx = load_ptx("oob_write", c);
        assert!(ptx.contains("setp.gt.s32"), "{}: `i <= n` check", c.tag());
    }
}

#[test]
fn references_cover_the_fixed_inputs() {
    assert_eq!(
        vector_add::reference(&vector_add::Inputs::new()).len(),
        1000
    );
    assert_eq!(saxpy::reference(&saxpy::Inputs::new()).len(), 3000);
    let mm = matmul_tiled::reference(&matmul_tiled::Inputs::new());
    assert_eq!(mm.len(), 37 * 45);
    assert!(mm.iter().all(|v| v.is_finite() && v.abs() < 29.0));
    let h = histogram::reference(&histogram::Inputs::new());
    assert_eq!(h.bins.iter().sum::<u32>(), 3001);
    let sa = shared_atomics::reference(&shared_atomics::Inputs::new());
    assert_eq!(sa.stats.len(), 11 * shared_atomics::STATS);
    assert_eq!(sa.bins.iter().sum::<u32>(), 2000);
    // Last block: 80 elements -> inc 80 % 10 = 0, dec from 0 by 80 = 80 % 7 = 3 steps -> 4.
    assert_eq!(sa.stats[10 * 9 + 5..10 * 9 + 7], [0, 4]);
    let w = warp_reduce::reference(&warp_reduce::Inputs::new());
    assert_eq!((w.sums.len(), w.bits.len()), (32, 128));
    assert_eq!(w.bits[3 * 4 + 1], 2, "warp 3 is all positive");
    assert_eq!(
        w.bits[31 * 4],
        w.bits[31 * 4] & 0xff,
        "only 8 live lanes in warp 31"
    );
    let b = bits64::reference(&bits64::Inputs::new());
    assert_eq!(
        (b.out.len(), b.out32.len(), b.out16.len()),
        (4 * 777, 4 * 777, 777)
    );
    let mi = math::Inputs::new();
    let m = math::reference(&mi);
    assert_eq!((m.f.len(), m.i.len()), (300 * math::NF, 300 * math::NI));
    let f = f64k::reference(&f64k::Inputs::new());
    assert_eq!(
        (f.poly.len(), f.narrow.len(), f.conv.len()),
        (2002, 2002, 1001)
    );
    assert_eq!(f.sum, f.sum.round(), "a sum of integers");
    assert_eq!(
        device_call::reference(&device_call::Inputs::new()).len(),
        500
    );
    assert_eq!(
        transpose2d::reference(&transpose2d::Inputs::new()).len(),
        37 * 53
    );
    assert_eq!(
        stencil3d::reference(&stencil3d::Inputs::new()).len(),
        19 * 13 * 11
    );
    assert_eq!(
        dyn_shared::reference(&dyn_shared::Inputs::new()).0.len(),
        1000
    );
}

#[test]
fn half_helpers_by_hand() {
    use Rounding::{Nearest, Zero};
    assert_eq!(f32_to_f16(1.0, Nearest), 0x3c00);
    assert_eq!(f32_to_f16(-2.0, Zero), 0xc000);
    assert_eq!(f32_to_f16(1.0 + 2f32.powi(-11), Nearest), 0x3c00); // tie to even
    assert_eq!(f32_to_f16(1.0 + 3.0 * 2f32.powi(-11), Nearest), 0x3c02); // tie to even
    assert_eq!(f32_to_f16(1.0 + 3.0 * 2f32.powi(-11), Zero), 0x3c01);
    assert_eq!(f32_to_f16(65504.0, Nearest), 0x7bff);
    assert_eq!(f32_to_f16(65519.0, Nearest), 0x7bff);
    assert_eq!(f32_to_f16(65520.0, Nearest), 0x7c00);
    assert_eq!(f32_to_f16(1.0e6, Zero), 0x7bff);
    assert_eq!(f32_to_f16(-1.0e6, Nearest), 0xfc00);
    assert_eq!(f32_to_f16(f32::INFINITY, Zero), 0x7c00);
    assert_eq!(f32_to_f16(5.96e-8, Nearest), 0x0001);
    assert_eq!(f32_to_f16(2.98e-8, Nearest), 0x0000);
    assert_eq!(f32_to_f16(-0.0, Nearest), 0x8000);
    assert_eq!(f32_to_f16(2f32.powi(-14), Nearest), 0x0400);
    assert_eq!(
        f32_to_f16(2f32.powi(-14) * 1023.0 / 1024.0, Nearest),
        0x03ff
    );
    assert_eq!(f16_to_f32(0x7bff), 65504.0);
    assert_eq!(f16_to_f32(0x0001), 2f32.powi(-24));
    assert_eq!(f16_to_f32(0xfc00), f32::NEG_INFINITY);
    assert_eq!(f16_to_f32(0x3555), 0.333_251_95);
    for h in (0..=0xffffu16).filter(|h| h & 0x7c00 != 0x7c00 || h & 0x3ff == 0) {
        assert_eq!(f32_to_f16(f16_to_f32(h), Nearest), h, "{h:#06x} round trip");
    }
    let o = half_conv::reference(&half_conv::Inputs {
        x: vec![1.5],
        y: vec![2.75],
        h: vec![0x3c00],
    });
    assert_eq!(o.0, vec![0x3e00, 0x4180, 0x4440, 0x4420]); // 1.5, 2.75, 4.25, 4.125
    assert_eq!(o.1, vec![4.25, 1.0]);
}

#[test]
fn int_ops_by_hand() {
    assert_eq!(prmt(0x4433_2211, 0x8877_6655, 0x3210), 0x4433_2211);
    assert_eq!(prmt(0x4433_2211, 0x8877_6655, 0x7654), 0x8877_6655);
    assert_eq!(prmt(0x4433_2211, 0x8877_6655, 0x0f08), 0x11ff_1100); // selectors 8 (sign of 0x11), 0 (0x11), f (sign of 0x88), 0
    let i = int_ops::Inputs::new();
    let (o, o64) = int_ops::reference(&i);
    let row = |k: usize| &o[k * int_ops::NO..(k + 1) * int_ops::NO];
    // 7 / 2, -7 / 2, 7 / -2, -7 / -2: truncating division, remainder takes the dividend's sign.
    assert_eq!([row(0)[0], row(0)[1], row(1)[0], row(1)[1]], [3, 1, -3, -1]);
    assert_eq!([row(2)[0], row(2)[1], row(3)[0], row(3)[1]], [-3, 1, 3, -1]);
    // -7 as unsigned / 2.
    assert_eq!(row(1)[2], ((-7i32 as u32) / 2) as i32);
    // __mul24(0xffffff, 0x800000): 24-bit signed -1 * -2^23 = 2^23.
    assert_eq!(row(4)[6], 1 << 23);
    assert_eq!(row(4)[7], (0xff_ffffu32.wrapping_mul(0x80_0000)) as i32);
    // -1 * 1: mul.hi.s32 = -1, mul.hi.u32 of 0xffffffff * 1 = 0.
    assert_eq!([row(5)[4], row(5)[5]], [-1, 0]);
    // sad(7, 2) + 7 = 12; abs(-7) = 7; min(-7, 2) = -7.
    assert_eq!([row(0)[8], row(1)[12], row(1)[10]], [12, 7, -7]);
    // shift by 33 & 31 = 1; funnel-right clamps 33 to 32: returns hi = b.
    assert_eq!(row(7)[19], 0x1234_5678 >> 1);
    assert_eq!(row(7)[16], 33);
    // (signed char)0x12345678 = 0x78; (short)33 = 33.
    assert_eq!([row(7)[17], row(7)[18]], [0x78, 33]);
    // 64-bit: c / -3 and c % -3 truncate; c / i64::MAX is 0 or +-1.
    let (c0, c3) = (i.c[0], i.c[3]);
    assert_eq!(o64[..2], [c0 / -3, c0 % -3]);
    assert_eq!(o64[3], ((c0 as i128 * -3) >> 64) as i64);
    assert_eq!(o64[12], c3 / i64::MAX);
}

#[test]
fn vec4_const_by_hand() {
    let i = vec4_const::Inputs {
        input: vec![1.0, 2.0, 3.0, 4.0, -1.0, 0.0, 0.5, 9.0],
        scale: [2.0, 0.5, -1.0, 0.25],
    };
    let o = vec4_const::reference(&i);
    assert_eq!(o.out, vec![2.25, 1.25, -2.75, 4.0, -1.75, 0.25, -0.25, 9.0]);
    assert_eq!(o.tag, vec![0, 1, 1, 1]);
    assert_eq!(o.visits, 102);
}

#[test]
fn special_regs_by_hand() {
    let o = special_regs::reference();
    let w = special_regs::WORDS;
    assert_eq!(o.len(), w * 12 * 60);
    // Thread 0 of block 0, and thread (5, 4, 1) = t 59 = lane 27 of warp 1 (28 threads).
    assert_eq!(
        o[..w],
        [
            0,
            6 | 5 << 8 | 2 << 16,
            0,
            2 | 3 << 8 | 2 << 16,
            0,
            0,
            u32::MAX,
            o[7]
        ]
    );
    let t59 = &o[59 * w..60 * w];
    assert_eq!(t59[0], 5 | 4 << 8 | 1 << 16);
    assert_eq!([t59[4], t59[5], t59[6]], [27, (1 << 27) - 1, 0x0fff_ffff]);
    // Warp 0: t 0-31; tid.y = (t / 6) % 5 is odd for t 6-11, 18-23 and 36.. (not in warp 0: 30, 31 have tid.y 0).
    assert_eq!(o[7], 0b0000_0000_1111_1100_0000_1111_1100_0000);
    // Last block: ctaid (1, 2, 1).
    assert_eq!(o[(11 * 60) * w + 2], 1 | 2 << 8 | 1 << 16);
}

/// The committed PTX is what the two compilers make of the committed sources. Needs
/// clang-14, python3 and the NVRTC and CUDA runtime wheels (see fixtures/ptx/README.md).
#[test]
#[ignore = "needs clang-14 and the nvidia-cuda-nvrtc-cu12 / nvidia-cuda-runtime-cu12 wheels; run with --ignored"]
fn committed_ptx_matches_the_sources() {
    let out = std::process::Command::new("python3")
        .arg(fixtures_dir().join("gen.py"))
        .arg("--check")
        .output()
        .expect("python3");
    assert!(
        out.status.success(),
        "gen.py --check failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}
