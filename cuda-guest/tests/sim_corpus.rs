//! The working kernels of the corpus (`fixtures/ptx/`, both compilers) run on the
//! simulator and match the Rust references of `sim_support/reference.rs` (a copy of the
//! corpus's `tests/common/reference.rs`), bit-exact except where the reference states
//! a documented ulp/absolute bound; on 1 and 2 host threads.

#[path = "sim_support/reference.rs"]
mod reference;

use cuda_guest::sim::{self, KernelArg, SimConfig, Simulator};
use reference::*;

/// One kernel argument of a harness launch.
enum A {
    /// Input buffer.
    In(Vec<u8>),
    /// Output buffer of this many bytes (zero-filled).
    Out(usize),
    /// A scalar.
    S(KernelArg),
}

fn bytes<T: Copy, const N: usize>(v: &[T], f: impl Fn(T) -> [u8; N]) -> Vec<u8> {
    v.iter().flat_map(|x| f(*x)).collect()
}
fn f32s(b: &[u8]) -> Vec<f32> {
    b.chunks(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .collect()
}
fn u32s(b: &[u8]) -> Vec<u32> {
    b.chunks(4)
        .map(|c| u32::from_le_bytes(c.try_into().unwrap()))
        .collect()
}
fn f64s(b: &[u8]) -> Vec<f64> {
    b.chunks(8)
        .map(|c| f64::from_le_bytes(c.try_into().unwrap()))
        .collect()
}
fn u64s(b: &[u8]) -> Vec<u64> {
    b.chunks(8)
        .map(|c| u64::from_le_bytes(c.try_into().unwrap()))
        .collect()
}

/// Loads `kernel` from `compiler`'s PTX, launches it with `args`, and returns every
/// buffer argument's contents afterwards (buffers only, in argument order).
fn run(
    kernel: &str,
    compiler: Compiler,
    threads: usize,
    cfg: LaunchConfig,
    args: Vec<A>,
) -> Vec<Vec<u8>> {
    let mut s = Simulator::new(SimConfig {
        threads,
        ..SimConfig::default()
    });
    let m = s
        .load_module(
            &format!("{kernel}.{}.ptx", compiler.tag()),
            &load_ptx(kernel, compiler),
        )
        .unwrap();
    // The decoded parameter list matches the corpus's.
    let want = params(kernel).unwrap();
    let got = m.kernel(kernel).unwrap().params();
    assert_eq!(got.len(), want.len(), "{kernel}");
    for (g, w) in got.iter().zip(want) {
        assert_eq!(g.size as usize, w.ty.size(), "{kernel} {}", w.name);
        assert_eq!(
            format!(".{}", g.ty.name()),
            w.ty.ptx(),
            "{kernel} {}",
            w.name
        );
    }
    let mut kargs = vec![];
    let mut bufs = vec![];
    for a in &args {
        match a {
            A::In(b) => {
                let p = s.malloc(b.len() as u64).unwrap();
                s.memcpy_htod(p, b).unwrap();
                bufs.push((p, b.len()));
                kargs.push(KernelArg::Ptr(p));
            }
            A::Out(n) => {
                let p = s.malloc(*n as u64).unwrap();
                bufs.push((p, *n));
                kargs.push(KernelArg::Ptr(p));
            }
            A::S(k) => kargs.push(k.clone()),
        }
    }
    let lc = sim::LaunchConfig {
        grid: [cfg.grid.x, cfg.grid.y, cfg.grid.z],
        block: [cfg.block.x, cfg.block.y, cfg.block.z],
        shared_bytes: cfg.shared_bytes,
    };
    s.launch(&m, kernel, lc, &kargs)
        .unwrap_or_else(|e| panic!("{kernel} ({}): {e}", compiler.tag()));
    bufs.iter()
        .map(|(p, n)| {
            let mut b = vec![0u8; *n];
            s.memcpy_dtoh(&mut b, *p).unwrap();
            b
        })
        .collect()
}

fn each(mut f: impl FnMut(Compiler, usize)) {
    for c in Compiler::ALL {
        for t in [1, 2] {
            f(c, t);
        }
    }
}

fn assert_bits_f32(got: &[f32], want: &[f32], what: &str) {
    assert_eq!(got.len(), want.len(), "{what}");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert_eq!(g.to_bits(), w.to_bits(), "{what}[{i}]: {g} vs {w}");
    }
}

#[test]
fn vector_add() {
    use reference::vector_add::*;
    let i = Inputs::new();
    each(|c, t| {
        let n = i.a.len();
        let out = run(
            "vector_add",
            c,
            t,
            config(&i),
            vec![
                A::In(bytes(&i.a, f32::to_le_bytes)),
                A::In(bytes(&i.b, f32::to_le_bytes)),
                A::Out(4 * n),
                A::S(KernelArg::I32(n as i32)),
            ],
        );
        assert_bits_f32(&f32s(&out[2]), &reference(&i), &format!("vector_add {c:?}"));
    });
}

#[test]
fn saxpy() {
    use reference::saxpy::*;
    let i = Inputs::new();
    each(|c, t| {
        let n = i.x.len();
        let out = run(
            "saxpy",
            c,
            t,
            config(&i),
            vec![
                A::S(KernelArg::F32(i.a)),
                A::In(bytes(&i.x, f32::to_le_bytes)),
                A::In(bytes(&i.y, f32::to_le_bytes)),
                A::S(KernelArg::I32(n as i32)),
            ],
        );
        assert_bits_f32(&f32s(&out[1]), &reference(&i), &format!("saxpy {c:?}"));
    });
}

#[test]
fn reduce_block() {
    use reference::reduce_block::*;
    let i = Inputs::new();
    each(|c, t| {
        let want = reference(&i);
        let out = run(
            "reduce_block",
            c,
            t,
            config(&i),
            vec![
                A::In(bytes(&i.input, f32::to_le_bytes)),
                A::Out(4 * want.len()),
                A::S(KernelArg::I32(i.input.len() as i32)),
            ],
        );
        assert_bits_f32(&f32s(&out[1]), &want, &format!("reduce_block {c:?}"));
    });
}

#[test]
fn matmul_tiled() {
    use reference::matmul_tiled::*;
    for i in [
        Inputs::new(),
        Inputs::sized(64, 48, 80, 11),
        Inputs::sized(5, 70, 3, 12),
    ] {
        each(|c, t| {
            let out = run(
                "matmul_tiled",
                c,
                t,
                config(&i),
                vec![
                    A::In(bytes(&i.a, f32::to_le_bytes)),
                    A::In(bytes(&i.b, f32::to_le_bytes)),
                    A::Out(4 * i.m * i.n),
                    A::S(KernelArg::I32(i.m as i32)),
                    A::S(KernelArg::I32(i.n as i32)),
                    A::S(KernelArg::I32(i.k as i32)),
                ],
            );
            assert_bits_f32(
                &f32s(&out[2]),
                &reference(&i),
                &format!("matmul {}x{}x{} {c:?}", i.m, i.n, i.k),
            );
        });
    }
}

#[test]
fn histogram() {
    use reference::histogram::*;
    let i = Inputs::new();
    each(|c, t| {
        let want = reference(&i);
        let out = run(
            "histogram",
            c,
            t,
            config(&i),
            vec![
                A::In(bytes(&i.data, u32::to_le_bytes)),
                A::Out(4 * i.nbins as usize),
                A::Out(4),
                A::Out(8),
                A::S(KernelArg::U32(i.data.len() as u32)),
                A::S(KernelArg::U32(i.nbins)),
            ],
        );
        assert_eq!(u32s(&out[1]), want.bins, "{c:?} t={t}");
        assert_eq!(f32s(&out[2])[0].to_bits(), want.total_f32.to_bits());
        assert_eq!(u64s(&out[3])[0], want.total_u64);
    });
}

#[test]
fn shared_atomics() {
    use reference::shared_atomics::*;
    let i = Inputs::new();
    each(|c, t| {
        let want = reference(&i);
        let out = run(
            "shared_atomics",
            c,
            t,
            config(&i),
            vec![
                A::In(bytes(&i.data, u32::to_le_bytes)),
                A::Out(4 * want.bins.len()),
                A::Out(4 * want.stats.len()),
                A::S(KernelArg::U32(i.data.len() as u32)),
            ],
        );
        assert_eq!(u32s(&out[1]), want.bins, "{c:?}");
        assert_eq!(u32s(&out[2]), want.stats, "{c:?}");
    });
}

#[test]
fn warp_reduce() {
    use reference::warp_reduce::*;
    let i = Inputs::new();
    each(|c, t| {
        let w = reference(&i);
        let out = run(
            "warp_reduce",
            c,
            t,
            config(&i),
            vec![
                A::In(bytes(&i.input, f32::to_le_bytes)),
                A::Out(4 * w.scan.len()),
                A::Out(4 * w.sums.len()),
                A::Out(4 * w.maxs.len()),
                A::Out(4 * w.bcast.len()),
                A::Out(4 * w.bits.len()),
                A::S(KernelArg::U32(i.input.len() as u32)),
            ],
        );
        let what = format!("warp_reduce {c:?}");
        assert_bits_f32(&f32s(&out[1]), &w.scan, &what);
        assert_bits_f32(&f32s(&out[2]), &w.sums, &what);
        assert_bits_f32(&f32s(&out[3]), &w.maxs, &what);
        assert_bits_f32(&f32s(&out[4]), &w.bcast, &what);
        assert_eq!(u32s(&out[5]), w.bits, "{what}");
    });
}

#[test]
fn bits64() {
    use reference::bits64::*;
    let i = Inputs::new();
    each(|c, t| {
        let w = reference(&i);
        let out = run(
            "bits64",
            c,
            t,
            config(&i),
            vec![
                A::In(bytes(&i.input, u64::to_le_bytes)),
                A::In(bytes(&i.in16, i16::to_le_bytes)),
                A::Out(8 * w.out.len()),
                A::Out(4 * w.out32.len()),
                A::Out(2 * w.out16.len()),
                A::S(KernelArg::U32(i.input.len() as u32)),
            ],
        );
        assert_eq!(u64s(&out[2]), w.out, "{c:?}");
        assert_eq!(u32s(&out[3]), w.out32, "{c:?}");
        let o16: Vec<u16> = out[4]
            .chunks(2)
            .map(|x| u16::from_le_bytes([x[0], x[1]]))
            .collect();
        assert_eq!(o16, w.out16, "{c:?}");
    });
}

#[test]
fn math_within_documented_bounds() {
    use reference::math::*;
    let i = Inputs::new();
    each(|c, t| {
        let w = reference(&i);
        let n = i.x.len();
        let out = run(
            "math",
            c,
            t,
            config(&i),
            vec![
                A::In(bytes(&i.x, f32::to_le_bytes)),
                A::In(bytes(&i.y, f32::to_le_bytes)),
                A::In(bytes(&i.k, i32::to_le_bytes)),
                A::Out(4 * NF * n),
                A::Out(4 * NI * n),
                A::S(KernelArg::U32(n as u32)),
            ],
        );
        let f = f32s(&out[3]);
        for e in 0..n {
            for j in 0..NF {
                let (g, x) = (f[e * NF + j], w.f[e * NF + j]);
                match check(&i, e, j, c) {
                    Check::Exact => {
                        assert_eq!(g.to_bits(), x.to_bits(), "{c:?} e={e} j={j}: {g} vs {x}")
                    }
                    Check::Ulps(u) => assert!(
                        ulp_diff_f32(g, x) <= u,
                        "{c:?} e={e} j={j}: {g} vs {x} (> {u} ulp)"
                    ),
                    Check::Abs(a) => {
                        assert!((g - x).abs() <= a, "{c:?} e={e} j={j}: {g} vs {x} (> {a})")
                    }
                    Check::Skip => {}
                }
            }
        }
        let iv: Vec<i32> = u32s(&out[4]).into_iter().map(|x| x as i32).collect();
        assert_eq!(iv, w.i, "{c:?}");
    });
}

#[test]
fn f64_kernel() {
    use reference::f64k::*;
    let i = Inputs::new();
    each(|c, t| {
        let w = reference(&i);
        let n = i.x.len();
        let out = run(
            "f64",
            c,
            t,
            config(&i),
            vec![
                A::S(KernelArg::F64(i.a)),
                A::In(bytes(&i.x, f64::to_le_bytes)),
                A::In(bytes(&i.y, f64::to_le_bytes)),
                A::Out(8 * w.poly.len()),
                A::Out(4 * w.narrow.len()),
                A::Out(8 * w.conv.len()),
                A::Out(8),
                A::S(KernelArg::U32(n as u32)),
            ],
        );
        let same = |g: &[f64], w: &[f64], what: &str| {
            assert_eq!(g.len(), w.len(), "{what}");
            for (k, (a, b)) in g.iter().zip(w).enumerate() {
                assert_eq!(a.to_bits(), b.to_bits(), "{c:?} {what}[{k}]: {a} vs {b}");
            }
        };
        // Buffers only (the scalar `a` is not one): x, y, poly, narrow, conv, sum.
        same(&f64s(&out[1]), &w.y, "y");
        same(&f64s(&out[2]), &w.poly, "poly");
        assert_bits_f32(&f32s(&out[3]), &w.narrow, "narrow");
        assert_eq!(
            u64s(&out[4])
                .into_iter()
                .map(|x| x as i64)
                .collect::<Vec<_>>(),
            w.conv,
            "{c:?} conv"
        );
        assert_eq!(f64s(&out[5])[0].to_bits(), w.sum.to_bits(), "{c:?} sum");
    });
}

#[test]
fn device_call() {
    use reference::device_call::*;
    let i = Inputs::new();
    each(|c, t| {
        let want = reference(&i);
        let out = run(
            "device_call",
            c,
            t,
            config(&i),
            vec![
                A::In(bytes(&i.x, f32::to_le_bytes)),
                A::In(bytes(&i.coeffs, f32::to_le_bytes)),
                A::Out(4 * want.len()),
                A::S(KernelArg::I32(i.coeffs.len() as i32)),
                A::S(KernelArg::I32(i.x.len() as i32)),
            ],
        );
        assert_bits_f32(&f32s(&out[2]), &want, &format!("device_call {c:?}"));
    });
}

#[test]
fn transpose2d() {
    use reference::transpose2d::*;
    let i = Inputs::new();
    each(|c, t| {
        let out = run(
            "transpose2d",
            c,
            t,
            config(&i),
            vec![
                A::In(bytes(&i.input, f32::to_le_bytes)),
                A::Out(4 * i.rows * i.cols),
                A::S(KernelArg::I32(i.rows as i32)),
                A::S(KernelArg::I32(i.cols as i32)),
            ],
        );
        assert_bits_f32(
            &f32s(&out[1]),
            &reference(&i),
            &format!("transpose2d {c:?}"),
        );
    });
}

#[test]
fn stencil3d() {
    use reference::stencil3d::*;
    let i = Inputs::new();
    each(|c, t| {
        let out = run(
            "stencil3d",
            c,
            t,
            config(&i),
            vec![
                A::In(bytes(&i.input, f32::to_le_bytes)),
                A::Out(4 * i.input.len()),
                A::S(KernelArg::I32(i.nx as i32)),
                A::S(KernelArg::I32(i.ny as i32)),
                A::S(KernelArg::I32(i.nz as i32)),
                A::S(KernelArg::F32(i.c0)),
                A::S(KernelArg::F32(i.c1)),
            ],
        );
        assert_bits_f32(&f32s(&out[1]), &reference(&i), &format!("stencil3d {c:?}"));
    });
}

#[test]
fn dyn_shared() {
    use reference::dyn_shared::*;
    let i = Inputs::new();
    each(|c, t| {
        let w = reference(&i);
        let n = i.input.len();
        let out = run(
            "dyn_shared",
            c,
            t,
            config(&i),
            vec![
                A::In(bytes(&i.input, f32::to_le_bytes)),
                A::Out(4 * n),
                A::Out(4 * n),
                A::S(KernelArg::I32(n as i32)),
            ],
        );
        assert_bits_f32(&f32s(&out[1]), &w.0, &format!("dyn_shared {c:?}"));
        let ints: Vec<i32> = u32s(&out[2]).into_iter().map(|x| x as i32).collect();
        assert_eq!(ints, w.1, "{c:?}");
    });
}
