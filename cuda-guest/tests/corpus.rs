//! The `fixtures/ptx/` corpus on the simulator: every kernel's clang-14 and NVRTC PTX is
//! loaded, launched with the reference configuration (partial blocks everywhere) on 1
//! and 2 host threads, and compared with the Rust references of
//! `tests/common/reference.rs`, bit for bit unless the reference documents an ulp or
//! absolute bound. Each broken kernel must produce its precise fault. Everything runs on
//! both engines, the interpreter and the JIT (which takes the kernels it can compile).

mod common;

use common::reference::{self as r, Compiler};
use cuda_guest::sim::{
    self, DevicePtr, Engine, FaultKind, KernelArg, SimConfig, SimError, Simulator,
};
use std::fmt::Debug;
use std::sync::Arc;

// ---------------------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------------------

/// Element types moved between host and device, compared by their bits.
trait Elem: Copy + Debug {
    const SIZE: usize;
    fn put(self, out: &mut Vec<u8>);
    fn get(b: &[u8]) -> Self;
    fn bits(self) -> u64;
}

macro_rules! elem_int {
    ($($t:ty),*) => {$(
        impl Elem for $t {
            const SIZE: usize = std::mem::size_of::<$t>();
            fn put(self, out: &mut Vec<u8>) {
                out.extend_from_slice(&self.to_le_bytes());
            }
            fn get(b: &[u8]) -> Self {
                <$t>::from_le_bytes(b.try_into().unwrap())
            }
            fn bits(self) -> u64 {
                self as u64
            }
        }
    )*};
}
elem_int!(i8, u8, u16, i16, u32, i32, u64, i64);

impl Elem for f32 {
    const SIZE: usize = 4;
    fn put(self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.to_le_bytes());
    }
    fn get(b: &[u8]) -> Self {
        f32::from_le_bytes(b.try_into().unwrap())
    }
    fn bits(self) -> u64 {
        u64::from(self.to_bits())
    }
}

impl Elem for f64 {
    const SIZE: usize = 8;
    fn put(self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.to_le_bytes());
    }
    fn get(b: &[u8]) -> Self {
        f64::from_le_bytes(b.try_into().unwrap())
    }
    fn bits(self) -> u64 {
        self.to_bits()
    }
}

fn upload<T: Elem>(s: &mut Simulator, v: &[T]) -> DevicePtr {
    let p = s.malloc((T::SIZE * v.len()) as u64).unwrap();
    let mut bytes = Vec::with_capacity(T::SIZE * v.len());
    v.iter().for_each(|x| x.put(&mut bytes));
    s.memcpy_htod(p, &bytes).unwrap();
    p
}

/// A device buffer of `n` elements of `T`, zeroed.
fn zeros<T: Elem>(s: &mut Simulator, n: usize) -> DevicePtr {
    let bytes = (T::SIZE * n) as u64;
    let p = s.malloc(bytes).unwrap();
    s.memset_d8(p, 0, bytes).unwrap();
    p
}

fn download<T: Elem>(s: &mut Simulator, p: DevicePtr, n: usize) -> Vec<T> {
    let mut b = vec![0u8; T::SIZE * n];
    s.memcpy_dtoh(&mut b, p).unwrap();
    b.chunks(T::SIZE).map(T::get).collect()
}

/// Bit-for-bit equality; a failure names the number of differences and the first few.
fn exact<T: Elem>(what: &str, got: &[T], want: &[T]) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    let bad: Vec<String> = got
        .iter()
        .zip(want)
        .enumerate()
        .filter(|(_, (g, w))| g.bits() != w.bits())
        .map(|(i, (g, w))| format!("[{i}] got {g:?} want {w:?}"))
        .collect();
    assert!(
        bad.is_empty(),
        "{what}: {} of {} differ: {}",
        bad.len(),
        got.len(),
        bad[..bad.len().min(8)].join(", ")
    );
}

fn launch_config(c: r::LaunchConfig) -> sim::LaunchConfig {
    sim::LaunchConfig {
        grid: [c.grid.x, c.grid.y, c.grid.z],
        block: [c.block.x, c.block.y, c.block.z],
        shared_bytes: c.shared_bytes,
    }
}

/// Both engines.
const ENGINES: [Engine; 2] = [Engine::Interpreter, Engine::Jit];

/// Every compiler with every engine.
fn variants() -> impl Iterator<Item = (Compiler, Engine)> {
    Compiler::ALL
        .into_iter()
        .flat_map(|c| ENGINES.map(move |e| (c, e)))
}

fn new_sim(threads: usize, engine: Engine) -> Simulator {
    Simulator::new(SimConfig {
        threads,
        engine,
        ..SimConfig::default()
    })
}

/// Loads a kernel's PTX and checks its parameter list against the reference.
fn load(s: &mut Simulator, kernel: &str, c: Compiler) -> Arc<sim::Module> {
    let file = format!("{kernel}.{}.ptx", c.tag());
    let m = s
        .load_module(&file, &r::load_ptx(kernel, c))
        .unwrap_or_else(|e| panic!("{file} does not load: {e}"));
    let k = m
        .kernel(kernel)
        .unwrap_or_else(|| panic!("{file}: no kernel {kernel}"));
    let got: Vec<(String, u32)> = k
        .params()
        .iter()
        .map(|p| (format!(".{}", p.ty.name()), p.size))
        .collect();
    let want: Vec<(String, u32)> = r::params(kernel)
        .unwrap()
        .iter()
        .map(|p| (p.ty.ptx().to_string(), p.ty.size() as u32))
        .collect();
    assert_eq!(got, want, "{file}: parameter list");
    m
}

/// Runs `body` for each compiler's PTX on 1 and 2 host threads; the context is `NAME.tag tN`.
fn each_variant(kernel: &str, body: impl FnMut(&mut Simulator, &sim::Module, &str)) {
    each_variant_of(kernel, &Compiler::ALL, body)
}

/// `each_variant` for some compilers only.
fn each_variant_of(
    kernel: &str,
    compilers: &[Compiler],
    mut body: impl FnMut(&mut Simulator, &sim::Module, &str),
) {
    for &c in compilers {
        for engine in ENGINES {
            for threads in [1, 2] {
                let mut s = new_sim(threads, engine);
                let m = load(&mut s, kernel, c);
                let ctx = format!("{kernel}.{} t{threads} {}", c.tag(), engine.name());
                body(&mut s, &m, &ctx);
            }
        }
    }
}

fn run(s: &mut Simulator, m: &sim::Module, kernel: &str, cfg: r::LaunchConfig, args: &[KernelArg]) {
    let report = s
        .launch(m, kernel, launch_config(cfg), args)
        .unwrap_or_else(|e| panic!("{kernel}: launch failed: {e}"));
    assert_eq!(
        report.blocks,
        u64::from(cfg.grid.count()),
        "{kernel}: blocks run"
    );
}

fn p(ptr: DevicePtr) -> KernelArg {
    KernelArg::Ptr(ptr)
}

fn n_arg(n: usize) -> KernelArg {
    KernelArg::I32(n as i32)
}

// ---------------------------------------------------------------------------------------
// Working kernels
// ---------------------------------------------------------------------------------------

#[test]
fn every_corpus_module_loads() {
    for kernel in r::WORKING_KERNELS.iter().chain(&r::BROKEN_KERNELS) {
        for c in Compiler::ALL {
            load(&mut new_sim(1, Engine::Interpreter), kernel, c);
        }
    }
}

#[test]
fn vector_add() {
    let i = r::vector_add::Inputs::new();
    let want = r::vector_add::reference(&i);
    each_variant("vector_add", |s, m, ctx| {
        let (a, b, c) = (upload(s, &i.a), upload(s, &i.b), zeros::<f32>(s, i.a.len()));
        run(
            s,
            m,
            "vector_add",
            r::vector_add::config(&i),
            &[p(a), p(b), p(c), n_arg(i.a.len())],
        );
        exact(ctx, &download::<f32>(s, c, i.a.len()), &want);
    });
}

#[test]
fn saxpy() {
    let i = r::saxpy::Inputs::new();
    let want = r::saxpy::reference(&i);
    each_variant("saxpy", |s, m, ctx| {
        let (x, y) = (upload(s, &i.x), upload(s, &i.y));
        run(
            s,
            m,
            "saxpy",
            r::saxpy::config(&i),
            &[KernelArg::F32(i.a), p(x), p(y), n_arg(i.x.len())],
        );
        exact(ctx, &download::<f32>(s, y, i.y.len()), &want);
    });
}

#[test]
fn reduce_block() {
    let i = r::reduce_block::Inputs::new();
    let want = r::reduce_block::reference(&i);
    each_variant("reduce_block", |s, m, ctx| {
        let input = upload(s, &i.input);
        let out = zeros::<f32>(s, want.len());
        run(
            s,
            m,
            "reduce_block",
            r::reduce_block::config(&i),
            &[p(input), p(out), n_arg(i.input.len())],
        );
        exact(ctx, &download::<f32>(s, out, want.len()), &want);
    });
}

#[test]
fn matmul_tiled() {
    for i in [
        r::matmul_tiled::Inputs::new(),
        r::matmul_tiled::Inputs::sized(16, 16, 16, 40),
    ] {
        let want = r::matmul_tiled::reference(&i);
        each_variant("matmul_tiled", |s, m, ctx| {
            let (a, b, c) = (upload(s, &i.a), upload(s, &i.b), zeros::<f32>(s, i.m * i.n));
            let dims = [n_arg(i.m), n_arg(i.n), n_arg(i.k)];
            let args = [
                p(a),
                p(b),
                p(c),
                dims[0].clone(),
                dims[1].clone(),
                dims[2].clone(),
            ];
            run(s, m, "matmul_tiled", r::matmul_tiled::config(&i), &args);
            exact(
                &format!("{ctx} {}x{}x{}", i.m, i.n, i.k),
                &download::<f32>(s, c, i.m * i.n),
                &want,
            );
        });
    }
}

#[test]
fn histogram() {
    let i = r::histogram::Inputs::new();
    let want = r::histogram::reference(&i);
    each_variant("histogram", |s, m, ctx| {
        let data = upload(s, &i.data);
        let bins = zeros::<u32>(s, i.nbins as usize);
        let (tf, tu) = (zeros::<f32>(s, 1), zeros::<u64>(s, 1));
        let args = [
            p(data),
            p(bins),
            p(tf),
            p(tu),
            n_arg(i.data.len()),
            KernelArg::U32(i.nbins),
        ];
        run(s, m, "histogram", r::histogram::config(&i), &args);
        exact(
            &format!("{ctx} bins"),
            &download::<u32>(s, bins, want.bins.len()),
            &want.bins,
        );
        exact(
            &format!("{ctx} total_f32"),
            &download::<f32>(s, tf, 1),
            &[want.total_f32],
        );
        exact(
            &format!("{ctx} total_u64"),
            &download::<u64>(s, tu, 1),
            &[want.total_u64],
        );
    });
}

#[test]
fn shared_atomics() {
    let i = r::shared_atomics::Inputs::new();
    let want = r::shared_atomics::reference(&i);
    each_variant("shared_atomics", |s, m, ctx| {
        let data = upload(s, &i.data);
        let bins = zeros::<u32>(s, 256);
        let stats = zeros::<u32>(s, want.stats.len());
        run(
            s,
            m,
            "shared_atomics",
            r::shared_atomics::config(&i),
            &[p(data), p(bins), p(stats), n_arg(i.data.len())],
        );
        exact(
            &format!("{ctx} bins"),
            &download::<u32>(s, bins, 256),
            &want.bins,
        );
        exact(
            &format!("{ctx} stats"),
            &download::<u32>(s, stats, want.stats.len()),
            &want.stats,
        );
    });
}

#[test]
fn warp_reduce() {
    let i = r::warp_reduce::Inputs::new();
    let want = r::warp_reduce::reference(&i);
    let warps = want.sums.len();
    each_variant("warp_reduce", |s, m, ctx| {
        let input = upload(s, &i.input);
        let scan = zeros::<f32>(s, i.input.len());
        let (sums, maxs, bcast) = (
            zeros::<f32>(s, warps),
            zeros::<f32>(s, warps),
            zeros::<f32>(s, warps),
        );
        let bits = zeros::<u32>(s, 4 * warps);
        let args = [
            p(input),
            p(scan),
            p(sums),
            p(maxs),
            p(bcast),
            p(bits),
            n_arg(i.input.len()),
        ];
        run(s, m, "warp_reduce", r::warp_reduce::config(&i), &args);
        exact(
            &format!("{ctx} scan"),
            &download::<f32>(s, scan, i.input.len()),
            &want.scan,
        );
        exact(
            &format!("{ctx} sums"),
            &download::<f32>(s, sums, warps),
            &want.sums,
        );
        exact(
            &format!("{ctx} maxs"),
            &download::<f32>(s, maxs, warps),
            &want.maxs,
        );
        exact(
            &format!("{ctx} bcast"),
            &download::<f32>(s, bcast, warps),
            &want.bcast,
        );
        exact(
            &format!("{ctx} bits"),
            &download::<u32>(s, bits, 4 * warps),
            &want.bits,
        );
    });
}

#[test]
fn bits64() {
    let i = r::bits64::Inputs::new();
    let want = r::bits64::reference(&i);
    let n = i.input.len();
    each_variant("bits64", |s, m, ctx| {
        let (input, in16) = (upload(s, &i.input), upload(s, &i.in16));
        let (out, out32, out16) = (
            zeros::<u64>(s, 4 * n),
            zeros::<u32>(s, 4 * n),
            zeros::<u16>(s, n),
        );
        run(
            s,
            m,
            "bits64",
            r::bits64::config(&i),
            &[p(input), p(in16), p(out), p(out32), p(out16), n_arg(n)],
        );
        exact(
            &format!("{ctx} out"),
            &download::<u64>(s, out, 4 * n),
            &want.out,
        );
        exact(
            &format!("{ctx} out32"),
            &download::<u32>(s, out32, 4 * n),
            &want.out32,
        );
        exact(
            &format!("{ctx} out16"),
            &download::<u16>(s, out16, n),
            &want.out16,
        );
    });
}

#[test]
fn math() {
    use r::math::{Check, NF, NI};
    let i = r::math::Inputs::new();
    let want = r::math::reference(&i);
    let n = i.x.len();
    for (c, engine) in variants() {
        let mut s = new_sim(1, engine);
        let m = load(&mut s, "math", c);
        let s = &mut s;
        let (x, y, k) = (upload(s, &i.x), upload(s, &i.y), upload(s, &i.k));
        let (outf, outi) = (zeros::<f32>(s, NF * n), zeros::<i32>(s, NI * n));
        run(
            s,
            &m,
            "math",
            r::math::config(&i),
            &[p(x), p(y), p(k), p(outf), p(outi), n_arg(n)],
        );
        let f = download::<f32>(s, outf, NF * n);
        let ints = download::<i32>(s, outi, NI * n);
        exact(&format!("math.{} outi", c.tag()), &ints, &want.i);
        for e in 0..n {
            for j in 0..NF {
                let (got, w) = (f[e * NF + j], want.f[e * NF + j]);
                let ctx = format!(
                    "math.{} outf[{e}][{j}] (x={}, y={}, k={})",
                    c.tag(),
                    i.x[e],
                    i.y[e],
                    i.k[e]
                );
                match r::math::check(&i, e, j, c) {
                    Check::Exact => {
                        assert_eq!(got.to_bits(), w.to_bits(), "{ctx}: got {got:e}, want {w:e}")
                    }
                    Check::Ulps(u) => {
                        let d = r::ulp_diff_f32(got, w);
                        assert!(d <= u, "{ctx}: got {got:e}, want {w:e}: {d} ulp > {u}");
                    }
                    Check::Abs(eps) => assert!(
                        (got - w).abs() <= eps,
                        "{ctx}: got {got:e}, want {w:e} (+-{eps:e})"
                    ),
                    Check::Skip => {}
                }
            }
        }
    }
}

#[test]
fn f64() {
    let i = r::f64k::Inputs::new();
    let want = r::f64k::reference(&i);
    let n = i.x.len();
    each_variant("f64", |s, m, ctx| {
        let (x, y) = (upload(s, &i.x), upload(s, &i.y));
        let (poly, narrow, conv, sum) = (
            zeros::<f64>(s, 2 * n),
            zeros::<f32>(s, 2 * n),
            zeros::<i64>(s, n),
            zeros::<f64>(s, 1),
        );
        let args = [
            KernelArg::F64(i.a),
            p(x),
            p(y),
            p(poly),
            p(narrow),
            p(conv),
            p(sum),
            n_arg(n),
        ];
        run(s, m, "f64", r::f64k::config(&i), &args);
        exact(&format!("{ctx} y"), &download::<f64>(s, y, n), &want.y);
        exact(
            &format!("{ctx} poly"),
            &download::<f64>(s, poly, 2 * n),
            &want.poly,
        );
        exact(
            &format!("{ctx} narrow"),
            &download::<f32>(s, narrow, 2 * n),
            &want.narrow,
        );
        exact(
            &format!("{ctx} conv"),
            &download::<i64>(s, conv, n),
            &want.conv,
        );
        exact(
            &format!("{ctx} sum"),
            &download::<f64>(s, sum, 1),
            &[want.sum],
        );
    });
}

#[test]
fn device_call() {
    let i = r::device_call::Inputs::new();
    let want = r::device_call::reference(&i);
    each_variant("device_call", |s, m, ctx| {
        let (x, coeffs, out) = (
            upload(s, &i.x),
            upload(s, &i.coeffs),
            zeros::<f32>(s, i.x.len()),
        );
        let args = [
            p(x),
            p(coeffs),
            p(out),
            n_arg(i.coeffs.len()),
            n_arg(i.x.len()),
        ];
        run(s, m, "device_call", r::device_call::config(&i), &args);
        exact(ctx, &download::<f32>(s, out, i.x.len()), &want);
    });
}

#[test]
fn transpose2d() {
    let i = r::transpose2d::Inputs::new();
    let want = r::transpose2d::reference(&i);
    each_variant("transpose2d", |s, m, ctx| {
        let (input, out) = (upload(s, &i.input), zeros::<f32>(s, want.len()));
        run(
            s,
            m,
            "transpose2d",
            r::transpose2d::config(&i),
            &[p(input), p(out), n_arg(i.rows), n_arg(i.cols)],
        );
        exact(ctx, &download::<f32>(s, out, want.len()), &want);
    });
}

#[test]
fn stencil3d() {
    let i = r::stencil3d::Inputs::new();
    let want = r::stencil3d::reference(&i);
    each_variant("stencil3d", |s, m, ctx| {
        let (input, out) = (upload(s, &i.input), zeros::<f32>(s, want.len()));
        let args = [
            p(input),
            p(out),
            n_arg(i.nx),
            n_arg(i.ny),
            n_arg(i.nz),
            KernelArg::F32(i.c0),
            KernelArg::F32(i.c1),
        ];
        run(s, m, "stencil3d", r::stencil3d::config(&i), &args);
        exact(ctx, &download::<f32>(s, out, want.len()), &want);
    });
}

#[test]
fn dyn_shared() {
    let i = r::dyn_shared::Inputs::new();
    let (want, want2) = r::dyn_shared::reference(&i);
    let n = i.input.len();
    each_variant("dyn_shared", |s, m, ctx| {
        let (input, out, out2) = (upload(s, &i.input), zeros::<f32>(s, n), zeros::<i32>(s, n));
        run(
            s,
            m,
            "dyn_shared",
            r::dyn_shared::config(&i),
            &[p(input), p(out), p(out2), n_arg(n)],
        );
        exact(&format!("{ctx} out"), &download::<f32>(s, out, n), &want);
        exact(&format!("{ctx} out2"), &download::<i32>(s, out2, n), &want2);
    });
}

#[test]
fn vec4_const() {
    use r::vec4_const::*;
    let i = Inputs::new();
    let want = reference(&i);
    let n4 = i.n4();
    each_variant("vec4_const", |s, m, ctx| {
        let scale = m
            .global(SCALE_SYMBOL)
            .unwrap_or_else(|| panic!("{ctx}: no {SCALE_SYMBOL}"));
        let visits = m
            .global(VISITS_SYMBOL)
            .unwrap_or_else(|| panic!("{ctx}: no {VISITS_SYMBOL}"));
        assert_eq!(
            download::<u32>(s, visits, 1),
            [VISITS_INIT],
            "{ctx}: initialiser"
        );
        let mut bytes = vec![];
        i.scale.iter().for_each(|v| v.put(&mut bytes));
        s.memcpy_htod(scale, &bytes).unwrap();
        let (input, out, tag) = (
            upload(s, &i.input),
            zeros::<f32>(s, 4 * n4),
            zeros::<i32>(s, 2 * n4),
        );
        run(
            s,
            m,
            "vec4_const",
            config(&i),
            &[p(input), p(out), p(tag), n_arg(n4)],
        );
        exact(
            &format!("{ctx} out"),
            &download::<f32>(s, out, 4 * n4),
            &want.out,
        );
        exact(
            &format!("{ctx} tag"),
            &download::<i32>(s, tag, 2 * n4),
            &want.tag,
        );
        exact(
            &format!("{ctx} vm_visits"),
            &download::<u32>(s, visits, 1),
            &[want.visits],
        );
    });
}

fn int_ops(c: Compiler) {
    use r::int_ops::*;
    let i = Inputs::new();
    let (want, want64) = reference(&i);
    let n = i.a.len();
    each_variant_of("int_ops", &[c], |s, m, ctx| {
        let (a, b, c, d, e) = (
            upload(s, &i.a),
            upload(s, &i.b),
            upload(s, &i.c),
            upload(s, &i.d),
            upload(s, &i.e),
        );
        let (out, out64) = (zeros::<i32>(s, NO * n), zeros::<i64>(s, 4 * n));
        run(
            s,
            m,
            "int_ops",
            config(&i),
            &[p(a), p(b), p(c), p(d), p(e), p(out), p(out64), n_arg(n)],
        );
        exact(
            &format!("{ctx} out"),
            &download::<i32>(s, out, NO * n),
            &want,
        );
        exact(
            &format!("{ctx} out64"),
            &download::<i64>(s, out64, 4 * n),
            &want64,
        );
    });
}

#[test]
fn int_ops_clang() {
    int_ops(Compiler::Clang);
}

#[test]
fn int_ops_nvrtc() {
    int_ops(Compiler::Nvrtc);
}

fn half_conv(c: Compiler, i: &r::half_conv::Inputs) {
    use r::half_conv::*;
    let (want_h, want_f) = reference(i);
    let n = i.x.len();
    each_variant_of("half_conv", &[c], |s, m, ctx| {
        let (x, y, h) = (upload(s, &i.x), upload(s, &i.y), upload(s, &i.h));
        let (hout, fout) = (zeros::<u16>(s, 4 * n), zeros::<f32>(s, 2 * n));
        run(
            s,
            m,
            "half_conv",
            config(i),
            &[p(x), p(y), p(h), p(hout), p(fout), n_arg(n)],
        );
        exact(
            &format!("{ctx} hout"),
            &download::<u16>(s, hout, 4 * n),
            &want_h,
        );
        exact(
            &format!("{ctx} fout"),
            &download::<f32>(s, fout, 2 * n),
            &want_f,
        );
    });
}

#[test]
fn half_conv_clang() {
    half_conv(Compiler::Clang, &r::half_conv::Inputs::new());
}

#[test]
fn half_conv_nvrtc() {
    half_conv(Compiler::Nvrtc, &r::half_conv::Inputs::new());
}

#[test]
fn special_regs() {
    use r::special_regs::*;
    let want = reference();
    let n = threads();
    each_variant("special_regs", |s, m, ctx| {
        let (out, clocks) = (zeros::<u32>(s, WORDS * n), zeros::<u64>(s, n));
        run(s, m, "special_regs", CONFIG, &[p(out), p(clocks)]);
        exact(ctx, &download::<u32>(s, out, WORDS * n), &want);
        let c = download::<u64>(s, clocks, n);
        assert!(
            c.iter().all(|&d| d < 1 << 40),
            "{ctx}: %clock64 went backwards or jumped: {c:?}"
        );
    });
}

// ---------------------------------------------------------------------------------------
// Broken kernels
// ---------------------------------------------------------------------------------------

/// After a fault the simulator refuses work until reset, like a CUDA context.
fn assert_sticky_then_reset(s: &mut Simulator, ctx: &str) {
    assert!(s.failure().is_some(), "{ctx}: no recorded failure");
    match s.malloc(4) {
        Err(SimError::Sticky(_)) => {}
        other => panic!("{ctx}: expected a sticky error after the fault, got {other:?}"),
    }
    s.reset();
    assert!(
        s.malloc(4).is_ok(),
        "{ctx}: reset did not clear the failure"
    );
}

#[test]
fn oob_write_reports_the_store_past_the_end() {
    use r::broken::oob_write::*;
    for (c, engine) in variants() {
        for threads in [1, 2] {
            let ctx = format!("oob_write.{} t{threads}", c.tag());
            let mut s = new_sim(threads, engine);
            let m = load(&mut s, "oob_write", c);
            let out = zeros::<f32>(&mut s, N as usize);
            let err = s
                .launch(
                    &m,
                    "oob_write",
                    launch_config(CONFIG),
                    &[p(out), KernelArg::I32(N as i32)],
                )
                .expect_err(&ctx);
            let SimError::MemoryFault(f) = &err else {
                panic!("{ctx}: expected a memory fault, got {err}")
            };
            assert_eq!(f.kind, FaultKind::OutOfBounds, "{ctx}: {err}");
            assert!(f.write, "{ctx}: {err}");
            assert_eq!(f.size, FAULT_SIZE, "{ctx}: {err}");
            assert_eq!(f.address, out.0 + FAULT_OFFSET, "{ctx}: {err}");
            assert_eq!(f.at.kernel, "oob_write");
            assert_eq!(f.at.block, [FAULT_BLOCK, 0, 0], "{ctx}: {err}");
            assert_eq!(f.at.thread, [FAULT_THREAD, 0, 0], "{ctx}: {err}");
            assert!(f.at.line > 0, "{ctx}: {err}");
            let near = f
                .nearest
                .as_ref()
                .unwrap_or_else(|| panic!("{ctx}: no nearest allocation: {err}"));
            assert_eq!(
                (near.base, near.size, near.offset, near.freed),
                (out, 4 * u64::from(N), FAULT_OFFSET as i64, false)
            );
            assert_sticky_then_reset(&mut s, &ctx);
        }
    }
}

#[test]
fn use_after_free_reports_the_freed_allocation() {
    use r::broken::use_after_free::*;
    let input: Vec<f32> = (0..N).map(|v| v as f32 * 0.5).collect();
    for (c, engine) in variants() {
        let ctx = format!("use_after_free.{}", c.tag());
        let mut s = new_sim(1, engine);
        let m = load(&mut s, "use_after_free", c);
        let cfg = launch_config(CONFIG);
        // With `in` alive the kernel is correct.
        let (inp, out) = (upload(&mut s, &input), zeros::<f32>(&mut s, N as usize));
        s.launch(
            &m,
            "use_after_free",
            cfg,
            &[p(inp), p(out), KernelArg::I32(N as i32)],
        )
        .unwrap();
        exact(
            &ctx,
            &download::<f32>(&mut s, out, N as usize),
            &reference(&input),
        );
        // Freed: the first load faults.
        s.free(inp).unwrap();
        let err = s
            .launch(
                &m,
                "use_after_free",
                cfg,
                &[p(inp), p(out), KernelArg::I32(N as i32)],
            )
            .expect_err(&ctx);
        let SimError::MemoryFault(f) = &err else {
            panic!("{ctx}: expected a memory fault, got {err}")
        };
        assert_eq!(f.kind, FaultKind::UseAfterFree, "{ctx}: {err}");
        assert!(!f.write, "{ctx}: {err}");
        assert_eq!(f.size, FAULT_SIZE, "{ctx}: {err}");
        assert_eq!(
            (f.at.block, f.at.thread),
            ([0, 0, 0], [0, 0, 0]),
            "{ctx}: {err}"
        );
        assert_eq!(f.address, inp.0, "{ctx}: {err}");
        let near = f
            .nearest
            .as_ref()
            .unwrap_or_else(|| panic!("{ctx}: no nearest allocation: {err}"));
        assert_eq!(
            (near.base, near.offset, near.freed),
            (inp, 0, true),
            "{ctx}: {err}"
        );
        assert_sticky_then_reset(&mut s, &ctx);
    }
}

#[test]
fn divergent_barrier_is_reported_not_hung() {
    use r::broken::divergent_barrier::*;
    for (c, engine) in variants() {
        let ctx = format!("divergent_barrier.{}", c.tag());
        let mut s = new_sim(1, engine);
        let m = load(&mut s, "divergent_barrier", c);
        let data = upload(&mut s, &vec![1.0f32; N as usize]);
        let err = s
            .launch(
                &m,
                "divergent_barrier",
                launch_config(CONFIG),
                &[p(data), KernelArg::I32(N as i32)],
            )
            .expect_err(&ctx);
        let SimError::BarrierDivergence { at, message } = &err else {
            panic!("{ctx}: expected barrier divergence, got {err}")
        };
        assert_eq!(at.kernel, "divergent_barrier");
        assert_eq!(at.block, [0, 0, 0], "{ctx}: {err}");
        let arrived = format!("lanes {ARRIVED_LANES:#010x} of warp 0");
        assert!(
            message.contains(&arrived),
            "{ctx}: `{message}` lacks `{arrived}`"
        );
        assert!(
            message.contains(&format!("{:#010x}", !ARRIVED_LANES)),
            "{ctx}: `{message}` lacks the even lanes"
        );
        let bar_line = r::load_ptx("divergent_barrier", c)
            .lines()
            .position(|l| l.contains("bar.sync"))
            .map(|i| i as u32 + 1)
            .unwrap();
        assert_eq!(at.line, bar_line, "{ctx}: {err}");
        assert_sticky_then_reset(&mut s, &ctx);
    }
}

#[test]
fn infinite_loop_times_out() {
    use r::broken::infinite_loop::*;
    for (c, engine) in variants() {
        let ctx = format!("infinite_loop.{}", c.tag());
        let mut s = Simulator::new(SimConfig {
            threads: 1,
            instruction_budget: 200_000,
            engine,
            ..SimConfig::default()
        });
        let m = load(&mut s, "infinite_loop", c);
        let (flag, spins) = (zeros::<i32>(&mut s, 1), zeros::<u32>(&mut s, 32));
        let err = s
            .launch(
                &m,
                "infinite_loop",
                launch_config(CONFIG),
                &[p(flag), p(spins)],
            )
            .expect_err(&ctx);
        let SimError::Timeout {
            kernel,
            warp_instructions,
            line,
            ..
        } = &err
        else {
            panic!("{ctx}: expected a timeout, got {err}")
        };
        assert_eq!(kernel, "infinite_loop");
        assert!(*warp_instructions >= 200_000, "{ctx}: {err}");
        // Stopped inside the spin loop (between its label and its back branch).
        let ptx = r::load_ptx("infinite_loop", c);
        let lines: Vec<&str> = ptx.lines().collect();
        let load_line = lines
            .iter()
            .position(|l| l.contains("ld.volatile.global"))
            .unwrap() as u32
            + 1;
        assert!(
            (load_line - 2..=load_line + 3).contains(line),
            "{ctx}: stopped at line {line}: {err}"
        );
        assert_sticky_then_reset(&mut s, &ctx);
    }
}

/// 1-based line of the first line of `kernel`'s PTX from `c` that contains `needle`.
fn ptx_line(kernel: &str, c: Compiler, needle: &str) -> u32 {
    r::load_ptx(kernel, c)
        .lines()
        .position(|l| l.contains(needle))
        .map(|i| i as u32 + 1)
        .unwrap()
}

#[test]
fn misaligned_load_is_reported() {
    use r::broken::misaligned::*;
    for (c, engine) in variants() {
        let ctx = format!("misaligned.{}", c.tag());
        let mut s = new_sim(1, engine);
        let m = load(&mut s, "misaligned", c);
        let base = zeros::<u8>(&mut s, 4 * N as usize + 4);
        let out = zeros::<i32>(&mut s, N as usize);
        let err = s
            .launch(
                &m,
                "misaligned",
                launch_config(CONFIG),
                &[p(base), p(out), KernelArg::I32(N as i32)],
            )
            .expect_err(&ctx);
        let SimError::MemoryFault(f) = &err else {
            panic!("{ctx}: expected a memory fault, got {err}")
        };
        assert_eq!(f.kind, FaultKind::Misaligned, "{ctx}: {err}");
        assert!(!f.write, "{ctx}: {err}");
        assert_eq!(
            (f.size, f.address),
            (FAULT_SIZE, base.0 + FAULT_OFFSET),
            "{ctx}: {err}"
        );
        assert_eq!(
            (f.at.block, f.at.thread),
            ([0, 0, 0], [0, 0, 0]),
            "{ctx}: {err}"
        );
        assert_eq!(
            f.at.line,
            ptx_line("misaligned", c, "ld.global.u32"),
            "{ctx}: {err}"
        );
        let near = f
            .nearest
            .as_ref()
            .unwrap_or_else(|| panic!("{ctx}: no nearest allocation: {err}"));
        assert_eq!(
            (near.base, near.offset, near.freed),
            (base, FAULT_OFFSET as i64, false),
            "{ctx}: {err}"
        );
        assert_sticky_then_reset(&mut s, &ctx);
    }
}

#[test]
fn shared_out_of_bounds_is_reported() {
    use r::broken::shared_oob::*;
    for (c, engine) in variants() {
        let ctx = format!("shared_oob.{}", c.tag());
        let mut s = new_sim(1, engine);
        let m = load(&mut s, "shared_oob", c);
        let input = upload(&mut s, &vec![1.0f32; 128]);
        let out = zeros::<f32>(&mut s, 128);
        let err = s
            .launch(&m, "shared_oob", launch_config(CONFIG), &[p(input), p(out)])
            .expect_err(&ctx);
        let SimError::MemoryFault(f) = &err else {
            panic!("{ctx}: expected a memory fault, got {err}")
        };
        assert_eq!(f.kind, FaultKind::SharedOutOfBounds, "{ctx}: {err}");
        assert!(f.write, "{ctx}: {err}");
        assert_eq!(
            (f.space, f.size, f.address),
            ("shared", FAULT_SIZE, FAULT_OFFSET),
            "{ctx}: {err}"
        );
        assert_eq!(
            (f.at.block, f.at.thread),
            ([0, 0, 0], [FAULT_THREAD, 0, 0]),
            "{ctx}: {err}"
        );
        assert_eq!(
            f.at.line,
            ptx_line("shared_oob", c, "st.shared.f32"),
            "{ctx}: {err}"
        );
        assert_sticky_then_reset(&mut s, &ctx);
    }
}
