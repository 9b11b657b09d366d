//! Rust reference implementations of the kernels in `fixtures/ptx/`.
//!
//! For every kernel that is not broken on purpose, a module with:
//! - `PARAMS`: the kernel's parameter list as both compilers declare it in PTX (every
//!   pointer is a `.u64`, `int`/`unsigned` a `.u32`, `float` an `.f32`, `double` an `.f64`);
//! - `Inputs::new()`: deterministic inputs, sized so that the last block is partial;
//! - `config(&Inputs)`: the launch configuration for those inputs;
//! - `reference(&Inputs)`: what the kernel writes, computed in plain Rust with the same
//!   floating-point operation order as the PTX (same reduction trees, same fused
//!   multiply-adds), so results are bit-exact unless the module says otherwise.
//!
//! Broken kernels get `PARAMS`, a configuration and the fault they must produce
//! (`broken` module). Everything is deterministic: inputs come from a fixed-seed
//! SplitMix64 generator.
#![allow(dead_code)]

use std::path::PathBuf;

/// Where the corpus lives, from `cuda-guest/`.
pub fn fixtures_dir() -> PathBuf {
    let local = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../fixtures/ptx");
    if local.is_dir() {
        return local;
    }
    // Before the corpus branch is merged: its worktree.
    PathBuf::from("/work/wt/corpus/fixtures/ptx")
}

/// The compiler that produced a PTX file of the corpus.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Compiler {
    /// Debian clang 14.0.6, `NAME.clang.ptx`.
    Clang,
    /// NVRTC 12.9, `NAME.nvrtc.ptx`.
    Nvrtc,
}

impl Compiler {
    /// Both compilers, clang first.
    pub const ALL: [Compiler; 2] = [Compiler::Clang, Compiler::Nvrtc];

    /// The file-name tag: `clang` or `nvrtc`.
    pub fn tag(self) -> &'static str {
        match self {
            Compiler::Clang => "clang",
            Compiler::Nvrtc => "nvrtc",
        }
    }
}

/// Path of a kernel's PTX from one compiler.
pub fn ptx_path(kernel: &str, compiler: Compiler) -> PathBuf {
    fixtures_dir().join(format!("{kernel}.{}.ptx", compiler.tag()))
}

/// A kernel's PTX text from one compiler.
pub fn load_ptx(kernel: &str, compiler: Compiler) -> String {
    let path = ptx_path(kernel, compiler);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Every kernel of the corpus that computes something checkable.
pub const WORKING_KERNELS: [&str; 18] = [
    "vector_add",
    "saxpy",
    "reduce_block",
    "matmul_tiled",
    "histogram",
    "shared_atomics",
    "warp_reduce",
    "bits64",
    "math",
    "f64",
    "device_call",
    "transpose2d",
    "stencil3d",
    "dyn_shared",
    "vec4_const",
    "int_ops",
    "half_conv",
    "special_regs",
];

/// The kernels that are broken on purpose (see `broken`).
pub const BROKEN_KERNELS: [&str; 6] = [
    "oob_write",
    "use_after_free",
    "divergent_barrier",
    "infinite_loop",
    "misaligned",
    "shared_oob",
];

// ---------------------------------------------------------------------------------------
// Parameters and launch configurations
// ---------------------------------------------------------------------------------------

/// A PTX parameter type as declared in the `.entry` of both compilers' output.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ParamType {
    /// `.u32`: C `int` or `unsigned`.
    U32,
    /// `.u64`: a pointer (generic address).
    U64,
    /// `.f32`: C `float`.
    F32,
    /// `.f64`: C `double`.
    F64,
}

impl ParamType {
    /// Size in bytes (also the alignment).
    pub fn size(self) -> usize {
        match self {
            ParamType::U32 | ParamType::F32 => 4,
            ParamType::U64 | ParamType::F64 => 8,
        }
    }

    /// The PTX spelling, e.g. `.u64`.
    pub fn ptx(self) -> &'static str {
        match self {
            ParamType::U32 => ".u32",
            ParamType::U64 => ".u64",
            ParamType::F32 => ".f32",
            ParamType::F64 => ".f64",
        }
    }
}

/// One kernel parameter: its name in the CUDA source and its PTX type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Param {
    /// Name in the `.cu` source.
    pub name: &'static str,
    /// Declared type in the PTX.
    pub ty: ParamType,
    /// Whether it is a device pointer.
    pub pointer: bool,
}

const fn ptr(name: &'static str) -> Param {
    Param {
        name,
        ty: ParamType::U64,
        pointer: true,
    }
}
const fn int(name: &'static str) -> Param {
    Param {
        name,
        ty: ParamType::U32,
        pointer: false,
    }
}
const fn f32p(name: &'static str) -> Param {
    Param {
        name,
        ty: ParamType::F32,
        pointer: false,
    }
}
const fn f64p(name: &'static str) -> Param {
    Param {
        name,
        ty: ParamType::F64,
        pointer: false,
    }
}

/// Grid or block dimensions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Dim3 {
    /// x extent.
    pub x: u32,
    /// y extent.
    pub y: u32,
    /// z extent.
    pub z: u32,
}

impl Dim3 {
    /// A 1D extent.
    pub const fn x(x: u32) -> Self {
        Dim3 { x, y: 1, z: 1 }
    }
    /// A 3D extent.
    pub const fn new(x: u32, y: u32, z: u32) -> Self {
        Dim3 { x, y, z }
    }
    /// x * y * z.
    pub fn count(self) -> u32 {
        self.x * self.y * self.z
    }
}

/// Launch configuration: grid, block and dynamic shared memory bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LaunchConfig {
    /// Blocks per grid.
    pub grid: Dim3,
    /// Threads per block.
    pub block: Dim3,
    /// Bytes of dynamic (`extern __shared__`) shared memory.
    pub shared_bytes: u32,
}

impl LaunchConfig {
    fn linear(n: usize, block: u32) -> Self {
        LaunchConfig {
            grid: Dim3::x(ceil_div(n as u32, block)),
            block: Dim3::x(block),
            shared_bytes: 0,
        }
    }

    fn with_block(mut self, block: u32) -> Self {
        self.block = Dim3::x(block);
        self
    }
}

/// ceil(a / b).
pub fn ceil_div(a: u32, b: u32) -> u32 {
    a.div_ceil(b)
}

/// The parameter list of any corpus kernel, broken ones included.
pub fn params(kernel: &str) -> Option<&'static [Param]> {
    Some(match kernel {
        "vector_add" => vector_add::PARAMS,
        "saxpy" => saxpy::PARAMS,
        "reduce_block" => reduce_block::PARAMS,
        "matmul_tiled" => matmul_tiled::PARAMS,
        "histogram" => histogram::PARAMS,
        "shared_atomics" => shared_atomics::PARAMS,
        "warp_reduce" => warp_reduce::PARAMS,
        "bits64" => bits64::PARAMS,
        "math" => math::PARAMS,
        "f64" => f64k::PARAMS,
        "device_call" => device_call::PARAMS,
        "transpose2d" => transpose2d::PARAMS,
        "stencil3d" => stencil3d::PARAMS,
        "dyn_shared" => dyn_shared::PARAMS,
        "vec4_const" => vec4_const::PARAMS,
        "int_ops" => int_ops::PARAMS,
        "half_conv" => half_conv::PARAMS,
        "special_regs" => special_regs::PARAMS,
        "oob_write" => broken::oob_write::PARAMS,
        "use_after_free" => broken::use_after_free::PARAMS,
        "divergent_barrier" => broken::divergent_barrier::PARAMS,
        "infinite_loop" => broken::infinite_loop::PARAMS,
        "misaligned" => broken::misaligned::PARAMS,
        "shared_oob" => broken::shared_oob::PARAMS,
        _ => return None,
    })
}

/// The `.param` types of `.entry kernel` in a PTX text, in order, read with plain
/// string matching (enough for the two compilers' layout: one parameter per line).
pub fn entry_param_types(ptx: &str, kernel: &str) -> Option<Vec<String>> {
    let head = format!(".entry {kernel}(");
    let start = ptx.find(&head)? + head.len();
    let end = start + ptx[start..].find(')')?;
    Some(
        ptx[start..end]
            .split(',')
            .filter_map(|p| {
                let mut words = p.split_whitespace();
                (words.next()? == ".param").then(|| words.next().map(str::to_owned))?
            })
            .collect(),
    )
}

// ---------------------------------------------------------------------------------------
// Deterministic inputs and float helpers
// ---------------------------------------------------------------------------------------

/// SplitMix64: a tiny deterministic generator for test inputs.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// A generator from a seed.
    pub fn new(seed: u64) -> Self {
        Rng(seed)
    }
    /// Next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    /// Next 32 random bits.
    pub fn next_u32(&mut self) -> u32 {
        (self.next_u64() >> 32) as u32
    }
    /// Uniform in [lo, hi) with 24 random bits.
    pub fn f32_in(&mut self, lo: f32, hi: f32) -> f32 {
        let u = (self.next_u32() >> 8) as f32 / (1u32 << 24) as f32;
        lo + (hi - lo) * u
    }
    /// Uniform in [lo, hi) with 53 random bits.
    pub fn f64_in(&mut self, lo: f64, hi: f64) -> f64 {
        let u = (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64;
        lo + (hi - lo) * u
    }
    /// `n` values in [lo, hi).
    pub fn f32_vec(&mut self, n: usize, lo: f32, hi: f32) -> Vec<f32> {
        (0..n).map(|_| self.f32_in(lo, hi)).collect()
    }
}

/// Distance in units in the last place between two f32 (0 for equal values, both NaN,
/// or +0/-0; u32::MAX when one is NaN or the signs differ, except around zero).
pub fn ulp_diff_f32(a: f32, b: f32) -> u32 {
    if a == b || (a.is_nan() && b.is_nan()) {
        return 0;
    }
    if a.is_nan() || b.is_nan() {
        return u32::MAX;
    }
    // Map to a monotonic integer line.
    let key = |x: f32| -> i64 {
        let bits = x.to_bits() as i32 as i64;
        if bits < 0 {
            i64::from(i32::MIN) - bits
        } else {
            bits
        }
    };
    (key(a) - key(b)).unsigned_abs().min(u64::from(u32::MAX)) as u32
}

/// IEEE rounding directions of PTX `cvt`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rounding {
    /// `.rn`: to nearest, ties to even.
    Nearest,
    /// `.rz`: towards zero.
    Zero,
    /// `.rm`: towards minus infinity.
    Down,
    /// `.rp`: towards plus infinity.
    Up,
}

/// Round an exact value to f32 in the given direction. `nearest` is the
/// round-to-nearest f32 of the value and `cmp(f)` orders a candidate f32 against the
/// exact value.
fn directed_f32(nearest: f32, mode: Rounding, cmp: impl Fn(f32) -> std::cmp::Ordering) -> f32 {
    use std::cmp::Ordering::*;
    let r = nearest;
    match (mode, cmp(r)) {
        (Rounding::Nearest, _) | (_, Equal) => r,
        (Rounding::Up, Less) => r.next_up(),
        (Rounding::Down, Greater) => r.next_down(),
        (Rounding::Zero, Greater) if r > 0.0 => r.next_down(),
        (Rounding::Zero, Less) if r < 0.0 => r.next_up(),
        _ => r,
    }
}

/// An integer to f32 with a PTX rounding (`cvt.r*.f32.s32/u32/s64/u64`).
pub fn int_to_f32(v: i128, mode: Rounding) -> f32 {
    // `as` rounds integers to nearest-even exactly; every f32 that can be near an i128
    // of the sizes used here is an integer, so the comparison is exact in i128.
    directed_f32(v as f32, mode, |f| (f as i128).cmp(&v))
}

/// An f64 to f32 with a PTX rounding (`cvt.r*.f32.f64`), for finite values.
pub fn f64_to_f32(v: f64, mode: Rounding) -> f32 {
    directed_f32(v as f32, mode, |f| {
        f64::from(f).partial_cmp(&v).expect("finite")
    })
}

/// PTX `bfe.u32` / `bfe.s32` (ISA: pos = b & 0xff, len = c & 0xff, bits past the
/// msb read as the sign bit for .s32, 0 for .u32).
pub fn bfe32(a: u32, pos: u32, len: u32, signed: bool) -> u32 {
    let (pos, len) = (pos & 0xff, len & 0xff);
    let sbit = if signed && len != 0 {
        (a >> (pos + len - 1).min(31)) & 1
    } else {
        0
    };
    (0..32).fold(0, |d, i| {
        let bit = if i < len && pos + i <= 31 {
            (a >> (pos + i)) & 1
        } else {
            sbit
        };
        d | (bit << i)
    })
}

/// PTX `bfe.u64`.
pub fn bfe64(a: u64, pos: u32, len: u32) -> u64 {
    let (pos, len) = (pos & 0xff, len & 0xff);
    (0..64).fold(0, |d, i| {
        let bit = if i < len && pos + i <= 63 {
            (a >> (pos + i)) & 1
        } else {
            0
        };
        d | (bit << i)
    })
}

/// PTX `bfi.b32 d, a, b, pos, len`: `b` with `len` bits of `a` inserted at `pos`.
pub fn bfi32(a: u32, b: u32, pos: u32, len: u32) -> u32 {
    let (pos, len) = (pos & 0xff, len & 0xff);
    let mut d = b;
    for i in 0..len {
        if pos + i > 31 {
            break;
        }
        d = (d & !(1 << (pos + i))) | (((a >> i) & 1) << (pos + i));
    }
    d
}

// ---------------------------------------------------------------------------------------
// Working kernels
// ---------------------------------------------------------------------------------------

/// `vector_add`: c = a + b. Bit-exact.
pub mod vector_add {
    use super::*;

    /// `(const float *a, const float *b, float *c, int n)`
    pub const PARAMS: &[Param] = &[ptr("a"), ptr("b"), ptr("c"), int("n")];

    /// Inputs: n = 1000, so with blocks of 128 the last block has 104 live threads.
    #[derive(Debug, Clone)]
    pub struct Inputs {
        /// First operand.
        pub a: Vec<f32>,
        /// Second operand.
        pub b: Vec<f32>,
    }

    impl Inputs {
        /// The fixed inputs.
        pub fn new() -> Self {
            let mut r = Rng::new(1);
            Inputs {
                a: r.f32_vec(1000, -100.0, 100.0),
                b: r.f32_vec(1000, -100.0, 100.0),
            }
        }
    }

    /// Grid of ceil(n / 128) blocks of 128.
    pub fn config(i: &Inputs) -> LaunchConfig {
        LaunchConfig::linear(i.a.len(), 128)
    }

    /// `c`.
    pub fn reference(i: &Inputs) -> Vec<f32> {
        i.a.iter().zip(&i.b).map(|(a, b)| a + b).collect()
    }
}

/// `saxpy`: y = fma(a, x, y) (both compilers contract `a * x + y`). Bit-exact.
pub mod saxpy {
    use super::*;

    /// `(float a, const float *x, float *y, int n)`
    pub const PARAMS: &[Param] = &[f32p("a"), ptr("x"), ptr("y"), int("n")];

    /// Inputs: n = 3000, launched with fewer threads than elements (grid-stride loop).
    #[derive(Debug, Clone)]
    pub struct Inputs {
        /// The scalar.
        pub a: f32,
        /// x.
        pub x: Vec<f32>,
        /// y before the launch.
        pub y: Vec<f32>,
    }

    impl Inputs {
        /// The fixed inputs.
        pub fn new() -> Self {
            let mut r = Rng::new(2);
            Inputs {
                a: 1.618_034,
                x: r.f32_vec(3000, -10.0, 10.0),
                y: r.f32_vec(3000, -10.0, 10.0),
            }
        }
    }

    /// 10 blocks of 128 (1280 threads for 3000 elements: 2 or 3 iterations each).
    pub fn config(_: &Inputs) -> LaunchConfig {
        LaunchConfig {
            grid: Dim3::x(10),
            block: Dim3::x(128),
            shared_bytes: 0,
        }
    }

    /// `y` after the launch.
    pub fn reference(i: &Inputs) -> Vec<f32> {
        i.x.iter()
            .zip(&i.y)
            .map(|(x, y)| i.a.mul_add(*x, *y))
            .collect()
    }
}

/// `reduce_block`: one partial sum per block. Bit-exact: the reference follows the
/// kernel's tree (pairwise load add, then halving strides).
pub mod reduce_block {
    use super::*;

    /// `(const float *in, float *out, int n)`
    pub const PARAMS: &[Param] = &[ptr("in"), ptr("out"), int("n")];

    /// Threads per block (a power of two <= 256).
    pub const BLOCK: u32 = 128;

    /// Inputs: n = 5000 = 19 * 256 + 136, so the last block is partial (some threads
    /// load one element, some none).
    #[derive(Debug, Clone)]
    pub struct Inputs {
        /// Values to sum.
        pub input: Vec<f32>,
    }

    impl Inputs {
        /// The fixed inputs.
        pub fn new() -> Self {
            Inputs {
                input: Rng::new(3).f32_vec(5000, -1.0, 1.0),
            }
        }
    }

    /// ceil(n / 256) blocks of 128 (each block covers 2 * 128 elements).
    pub fn config(i: &Inputs) -> LaunchConfig {
        LaunchConfig::linear(i.input.len(), 2 * BLOCK).with_block(BLOCK)
    }

    /// `out`, one sum per block.
    pub fn reference(i: &Inputs) -> Vec<f32> {
        let n = i.input.len();
        let bd = BLOCK as usize;
        let blocks = config(i).grid.x as usize;
        (0..blocks)
            .map(|b| {
                let mut s: Vec<f32> = (0..bd)
                    .map(|t| {
                        let idx = b * 2 * bd + t;
                        let mut x = 0.0f32;
                        if idx < n {
                            x = i.input[idx];
                        }
                        if idx + bd < n {
                            x += i.input[idx + bd];
                        }
                        x
                    })
                    .collect();
                let mut stride = bd / 2;
                while stride > 0 {
                    for t in 0..stride {
                        s[t] += s[t + stride];
                    }
                    stride /= 2;
                }
                s[0]
            })
            .collect()
    }
}

/// `matmul_tiled`: C = A * B with 16x16 tiles. Bit-exact: the reference runs the same
/// fma chain over the zero-padded K.
pub mod matmul_tiled {
    use super::*;

    /// `(const float *A, const float *B, float *C, int M, int N, int K)`
    pub const PARAMS: &[Param] = &[ptr("A"), ptr("B"), ptr("C"), int("M"), int("N"), int("K")];

    /// Tile edge.
    pub const TILE: usize = 16;

    /// Inputs: M = 37, N = 45, K = 29, none a multiple of 16.
    #[derive(Debug, Clone)]
    pub struct Inputs {
        /// Rows of A and C.
        pub m: usize,
        /// Columns of B and C.
        pub n: usize,
        /// Columns of A, rows of B.
        pub k: usize,
        /// A, row-major M x K.
        pub a: Vec<f32>,
        /// B, row-major K x N.
        pub b: Vec<f32>,
    }

    impl Inputs {
        /// The fixed inputs.
        pub fn new() -> Self {
            Self::sized(37, 45, 29, 4)
        }
        /// Random inputs of any size.
        pub fn sized(m: usize, n: usize, k: usize, seed: u64) -> Self {
            let mut r = Rng::new(seed);
            Inputs {
                m,
                n,
                k,
                a: r.f32_vec(m * k, -1.0, 1.0),
                b: r.f32_vec(k * n, -1.0, 1.0),
            }
        }
    }

    /// Block (16, 16), grid (ceil(N / 16), ceil(M / 16)).
    pub fn config(i: &Inputs) -> LaunchConfig {
        let t = TILE as u32;
        LaunchConfig {
            grid: Dim3::new(ceil_div(i.n as u32, t), ceil_div(i.m as u32, t), 1),
            block: Dim3::new(t, t, 1),
            shared_bytes: 0,
        }
    }

    /// `C`, row-major M x N.
    pub fn reference(i: &Inputs) -> Vec<f32> {
        let kp = i.k.div_ceil(TILE) * TILE;
        let mut c = vec![0.0f32; i.m * i.n];
        for row in 0..i.m {
            for col in 0..i.n {
                let mut acc = 0.0f32;
                for kk in 0..kp {
                    let a = if kk < i.k { i.a[row * i.k + kk] } else { 0.0 };
                    let b = if kk < i.k { i.b[kk * i.n + col] } else { 0.0 };
                    acc = a.mul_add(b, acc);
                }
                c[row * i.n + col] = acc;
            }
        }
        c
    }
}

/// `histogram`: global atomics. Bit-exact (integer counts; the f32 total only adds
/// integers below 2^24, exact in any order).
pub mod histogram {
    use super::*;

    /// `(const unsigned *data, unsigned *bins, float *total_f32,
    ///   unsigned long long *total_u64, int n, unsigned nbins)`
    pub const PARAMS: &[Param] = &[
        ptr("data"),
        ptr("bins"),
        ptr("total_f32"),
        ptr("total_u64"),
        int("n"),
        int("nbins"),
    ];

    /// Inputs: n = 3001 values, 37 bins; blocks of 256.
    #[derive(Debug, Clone)]
    pub struct Inputs {
        /// Values.
        pub data: Vec<u32>,
        /// Number of bins.
        pub nbins: u32,
    }

    impl Inputs {
        /// The fixed inputs.
        pub fn new() -> Self {
            let mut r = Rng::new(5);
            Inputs {
                data: (0..3001).map(|_| r.next_u32()).collect(),
                nbins: 37,
            }
        }
    }

    /// ceil(n / 256) blocks of 256.
    pub fn config(i: &Inputs) -> LaunchConfig {
        LaunchConfig::linear(i.data.len(), 256)
    }

    /// What the kernel leaves in its outputs (all zero before the launch).
    #[derive(Debug, Clone, PartialEq)]
    pub struct Outputs {
        /// Per-bin counts.
        pub bins: Vec<u32>,
        /// Sum of `v & 255` as f32.
        pub total_f32: f32,
        /// Wrapping sum of the values as u64.
        pub total_u64: u64,
    }

    /// The outputs.
    pub fn reference(i: &Inputs) -> Outputs {
        let mut bins = vec![0u32; i.nbins as usize];
        let mut total_f32 = 0.0f32;
        let mut total_u64 = 0u64;
        for &v in &i.data {
            bins[(v % i.nbins) as usize] += 1;
            total_f32 += (v & 255) as f32;
            total_u64 = total_u64.wrapping_add(u64::from(v));
        }
        Outputs {
            bins,
            total_f32,
            total_u64,
        }
    }
}

/// `shared_atomics`: shared-memory atomics of every kind. Bit-exact (every final value
/// is order-independent).
pub mod shared_atomics {
    use super::*;

    /// `(const unsigned *data, unsigned *bins, unsigned *stats, int n)`
    pub const PARAMS: &[Param] = &[ptr("data"), ptr("bins"), ptr("stats"), int("n")];

    /// Words of `stats` per block.
    pub const STATS: usize = 9;

    /// Inputs: n = 2000 in blocks of 192 (not a divisor of the 256 bins, and the last
    /// block has 80 elements).
    #[derive(Debug, Clone)]
    pub struct Inputs {
        /// Values.
        pub data: Vec<u32>,
    }

    impl Inputs {
        /// The fixed inputs.
        pub fn new() -> Self {
            let mut r = Rng::new(6);
            Inputs {
                data: (0..2000).map(|_| r.next_u32()).collect(),
            }
        }
    }

    /// ceil(n / 192) blocks of 192.
    pub fn config(i: &Inputs) -> LaunchConfig {
        LaunchConfig::linear(i.data.len(), 192)
    }

    /// Outputs (`bins` zeroed before the launch).
    #[derive(Debug, Clone, PartialEq)]
    pub struct Outputs {
        /// 256 bins of `v & 255`.
        pub bins: Vec<u32>,
        /// `STATS` words per block.
        pub stats: Vec<u32>,
    }

    /// The outputs.
    pub fn reference(i: &Inputs) -> Outputs {
        let mut bins = vec![0u32; 256];
        let mut stats = Vec::new();
        for chunk in i.data.chunks(config(i).block.x as usize) {
            let mut s = [0, u32::MAX, u32::MAX, 0, 0, 0, 0, 0, 0];
            for &v in chunk {
                bins[(v & 255) as usize] += 1;
                s[0] = s[0].max(v);
                s[1] = s[1].min(v);
                s[2] &= v | 0xf0f0_f0f0;
                s[3] |= v & 0x0f0f_0f0f;
                s[4] ^= v;
                s[5] = if s[5] >= 9 { 0 } else { s[5] + 1 };
                s[6] = if s[6] == 0 || s[6] > 6 { 6 } else { s[6] - 1 };
                s[7] = 0xabcd_1234;
                s[8] = s[8].max(v ^ 0x5a5a_5a5a);
            }
            stats.extend_from_slice(&s);
        }
        Outputs { bins, stats }
    }
}

/// `warp_reduce`: warp shuffles and votes. Bit-exact: the reference replays the
/// 32-lane shuffle trees (an out-of-range source lane returns the lane's own value).
pub mod warp_reduce {
    use super::*;

    /// `(const float *in, float *scan, float *sums, float *maxs, float *bcast,
    ///   unsigned *bits, int n)`
    pub const PARAMS: &[Param] = &[
        ptr("in"),
        ptr("scan"),
        ptr("sums"),
        ptr("maxs"),
        ptr("bcast"),
        ptr("bits"),
        int("n"),
    ];

    /// Inputs: n = 1000 in blocks of 128, so the last warp has 8 live elements and 24
    /// lanes that read 0; values in [-4, 4), with a warp of all-positive values.
    #[derive(Debug, Clone)]
    pub struct Inputs {
        /// Values.
        pub input: Vec<f32>,
    }

    impl Inputs {
        /// The fixed inputs.
        pub fn new() -> Self {
            let mut input = Rng::new(7).f32_vec(1000, -4.0, 4.0);
            // Warp 3: all positive, so __all_sync(v >= 0) is true there.
            for v in &mut input[96..128] {
                *v = v.abs() + 0.25;
            }
            Inputs { input }
        }
    }

    /// ceil(n / 128) blocks of 128.
    pub fn config(i: &Inputs) -> LaunchConfig {
        LaunchConfig::linear(i.input.len(), 128)
    }

    /// Outputs.
    #[derive(Debug, Clone, PartialEq)]
    pub struct Outputs {
        /// Inclusive warp scan, n values.
        pub scan: Vec<f32>,
        /// Per warp: lane 0 of the shfl.down tree.
        pub sums: Vec<f32>,
        /// Per warp: max.
        pub maxs: Vec<f32>,
        /// Per warp: lane 31's input.
        pub bcast: Vec<f32>,
        /// Per warp: ballot, any/all flags, activemask in the odd branch, popc.
        pub bits: Vec<u32>,
    }

    /// The outputs for every launched warp.
    pub fn reference(i: &Inputs) -> Outputs {
        let n = i.input.len();
        let warps = (config(i).grid.x * config(i).block.x / 32) as usize;
        let mut o = Outputs {
            scan: vec![0.0; n],
            sums: vec![],
            maxs: vec![],
            bcast: vec![],
            bits: vec![],
        };
        for w in 0..warps {
            let v: Vec<f32> = (0..32)
                .map(|l| i.input.get(w * 32 + l).copied().unwrap_or(0.0))
                .collect();
            let mut s = v.clone();
            let mut d = 1;
            while d < 32 {
                let prev = s.clone();
                for l in d..32 {
                    s[l] = prev[l - d] + prev[l];
                }
                d *= 2;
            }
            for (l, value) in s.iter().enumerate() {
                if let Some(dst) = o.scan.get_mut(w * 32 + l) {
                    *dst = *value;
                }
            }
            let mut sum = v.clone();
            let mut m = v.clone();
            for d in [16, 8, 4, 2, 1] {
                let (ps, pm) = (sum.clone(), m.clone());
                for l in 0..32 {
                    sum[l] = ps[l] + if l + d < 32 { ps[l + d] } else { ps[l] };
                    m[l] = pm[l].max(pm[l ^ d]);
                }
            }
            o.sums.push(sum[0]);
            o.maxs.push(m[0]);
            o.bcast.push(v[31]);
            let ballot = (0..32)
                .filter(|&l| v[l] > 0.0)
                .fold(0u32, |b, l| b | (1 << l));
            let any_neg = v.iter().any(|&x| x < 0.0) as u32;
            let all_pos = v.iter().all(|&x| x >= 0.0) as u32;
            o.bits.extend_from_slice(&[
                ballot,
                any_neg | (all_pos << 1),
                0xaaaa_aaaa,
                ballot.count_ones(),
            ]);
        }
        o
    }
}

/// `bits64`: 64-bit integer, bit-field and 16-bit operations. Bit-exact.
pub mod bits64 {
    use super::*;

    /// `(const unsigned long long *in, const short *in16, unsigned long long *out,
    ///   unsigned *out32, unsigned short *out16, int n)`
    pub const PARAMS: &[Param] = &[
        ptr("in"),
        ptr("in16"),
        ptr("out"),
        ptr("out32"),
        ptr("out16"),
        int("n"),
    ];

    /// Inputs: n = 777 in blocks of 64; some special values first (0, all ones, one
    /// bit, the sign bit).
    #[derive(Debug, Clone)]
    pub struct Inputs {
        /// 64-bit values.
        pub input: Vec<u64>,
        /// Signed 16-bit values.
        pub in16: Vec<i16>,
    }

    impl Inputs {
        /// The fixed inputs.
        pub fn new() -> Self {
            let mut r = Rng::new(8);
            let mut input: Vec<u64> = (0..777).map(|_| r.next_u64()).collect();
            input[..6].copy_from_slice(&[
                0,
                u64::MAX,
                1,
                1 << 63,
                0x8000_0000,
                0x0000_0001_0000_0000,
            ]);
            let in16 = (0..777).map(|_| r.next_u32() as i16).collect();
            Inputs { input, in16 }
        }
    }

    /// ceil(n / 64) blocks of 64.
    pub fn config(i: &Inputs) -> LaunchConfig {
        LaunchConfig::linear(i.input.len(), 64)
    }

    /// Outputs.
    #[derive(Debug, Clone, PartialEq)]
    pub struct Outputs {
        /// 4 per element.
        pub out: Vec<u64>,
        /// 4 per element.
        pub out32: Vec<u32>,
        /// 1 per element.
        pub out16: Vec<u16>,
    }

    /// The outputs.
    pub fn reference(i: &Inputs) -> Outputs {
        let n = i.input.len();
        let mut o = Outputs {
            out: vec![],
            out32: vec![],
            out16: vec![],
        };
        for (idx, &x) in i.input.iter().enumerate() {
            let y = i.input[(x % n as u64) as usize];
            let sh = (y & 63) as u32;
            let mut m = x ^ (x >> 33);
            m = m.wrapping_mul(0xff51_afd7_ed55_8ccd);
            m ^= m >> 33;
            m = m.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
            m ^= m >> 33;
            let rot = (x << sh) | (x >> ((64 - sh) & 63));
            let hi_mul = ((u128::from(x) * u128::from(y)) >> 64) as u64;
            let ffs = if x == 0 { 0 } else { x.trailing_zeros() + 1 };
            let counts = u64::from(x.count_ones() | (y.leading_zeros() << 8) | (ffs << 16));
            let sra = ((x as i64) >> (sh & 31)) as u64;
            o.out
                .extend_from_slice(&[m, rot, x.reverse_bits() ^ hi_mul, sra.wrapping_add(counts)]);
            let (lo, hi) = (x as u32, (x >> 32) as u32);
            o.out32.extend_from_slice(&[
                bfe32(lo, sh & 31, 5 + (hi & 7), false),
                bfe32(hi, 7, 9, true),
                bfi32(hi, lo, 8, 12),
                bfe64(x, sh, 17) as u32,
            ]);
            o.out16
                .push(((lo ^ hi) as u16).wrapping_add(i.in16[idx] as u16));
        }
        o
    }
}

/// `math`: f32 math and conversions. Exact outputs are bit-exact; approximate ones
/// carry a bound (`Check`).
pub mod math {
    use super::*;

    /// `(const float *x, const float *y, const int *k, float *outf, int *outi, int n)`
    pub const PARAMS: &[Param] = &[
        ptr("x"),
        ptr("y"),
        ptr("k"),
        ptr("outf"),
        ptr("outi"),
        int("n"),
    ];

    /// f32 outputs per element.
    pub const NF: usize = 17;
    /// i32 outputs per element.
    pub const NI: usize = 8;

    /// How an f32 output is checked.
    #[derive(Debug, Clone, Copy, PartialEq)]
    pub enum Check {
        /// Bit-exact (correctly rounded or exact operation).
        Exact,
        /// Within this many ulps of the correctly rounded value.
        Ulps(u32),
        /// Within this absolute error of the exact value.
        Abs(f32),
        /// Not checked for this input (outside the documented range of the approximation).
        Skip,
    }

    /// Inputs: n = 300 (blocks of 64), the first ones special (ties for the roundings,
    /// signed zero, values past the int32 range, integers that f32 cannot hold).
    #[derive(Debug, Clone)]
    pub struct Inputs {
        /// x.
        pub x: Vec<f32>,
        /// y (never 0; |y| in [2^-126, 2^126]).
        pub y: Vec<f32>,
        /// k.
        pub k: Vec<i32>,
    }

    impl Inputs {
        /// The fixed inputs.
        pub fn new() -> Self {
            let mut r = Rng::new(9);
            let special_x = [
                0.0, -0.0, 0.5, -0.5, 1.5, -1.5, 2.5, -2.5, 3.5, 1.0, -1.0, 21.5, 22.0, -30.0,
                80.0, -80.0, 3.0e9, -3.0e9, 1.0e-3, 4.0e9,
            ];
            let special_k = [
                0,
                1,
                -1,
                16_777_217,
                -16_777_217,
                16_777_219,
                2_147_483_647,
                i32::MIN,
                123_456_789,
                -987_654_321,
                33_554_435,
                -33_554_435,
                46_341,
                -46_341,
                65_537,
                7,
                -7,
                1 << 30,
                (1 << 30) + 1,
                -(1 << 30) - 3,
            ];
            let n = 300;
            let mut x: Vec<f32> = (0..n).map(|_| r.f32_in(-50.0, 50.0)).collect();
            x[..special_x.len()].copy_from_slice(&special_x);
            let y: Vec<f32> = (0..n)
                .map(|_| {
                    let v = r.f32_in(0.01, 20.0);
                    if r.next_u32() & 1 == 0 {
                        v
                    } else {
                        -v
                    }
                })
                .collect();
            let mut k: Vec<i32> = (0..n).map(|_| r.next_u32() as i32).collect();
            k[..special_k.len()].copy_from_slice(&special_k);
            Inputs { x, y, k }
        }
    }

    /// ceil(n / 64) blocks of 64.
    pub fn config(i: &Inputs) -> LaunchConfig {
        LaunchConfig::linear(i.x.len(), 64)
    }

    /// Outputs: `NF` f32 and `NI` i32 per element.
    #[derive(Debug, Clone, PartialEq)]
    pub struct Outputs {
        /// f32 results; for approximate entries the correctly rounded (or f64-exact) value.
        pub f: Vec<f32>,
        /// i32 results.
        pub i: Vec<i32>,
    }

    /// The check for f32 output `j` of element `e`, for PTX from `compiler`.
    /// Bounds: CUDA's expf is documented within 2 ulp (the prelude's clang expf, built
    /// on ex2.approx.f32, within 4); div.approx.f32 2 ulp for |y| in [2^-126, 2^126];
    /// sin.approx.f32 absolute 2^-20.5 on [-pi, pi]; lg2.approx.f32 absolute 2^-22
    /// (these are the PTX ISA's figures; the tests take 2^-20 and 2^-21 for margin).
    pub fn check(i: &Inputs, e: usize, j: usize, compiler: Compiler) -> Check {
        match j {
            0 if !(-87.0..=88.0).contains(&i.x[e]) => Check::Skip,
            0 => Check::Ulps(if compiler == Compiler::Clang { 4 } else { 2 }),
            4 => Check::Ulps(2),
            5 if (0.25 * i.x[e]).abs() > std::f32::consts::PI => Check::Skip,
            5 => Check::Abs(1.0 / (1u32 << 20) as f32),
            6 => Check::Abs(1.0 / (1u32 << 21) as f32),
            _ => Check::Exact,
        }
    }

    /// The outputs.
    pub fn reference(i: &Inputs) -> Outputs {
        let mut o = Outputs {
            f: vec![],
            i: vec![],
        };
        for e in 0..i.x.len() {
            let (a, b, c) = (i.x[e], i.y[e], i.k[e]);
            let lg_arg = b.abs() + 1.0;
            o.f.extend_from_slice(&[
                f64::from(a).exp() as f32,
                a.abs().sqrt(),
                a.mul_add(b, 0.5),
                a / b,
                a / b,
                f64::from(0.25 * a).sin() as f32,
                f64::from(lg_arg).log2() as f32,
                a.round_ties_even(),
                a.floor(),
                a.ceil(),
                a.trunc(),
                int_to_f32(c.into(), Rounding::Zero),
                int_to_f32(c.into(), Rounding::Down),
                int_to_f32(c.into(), Rounding::Up),
                c as f32,
                int_to_f32((c as u32).into(), Rounding::Zero),
                int_to_f32((i64::from(c) * i64::from(c)).into(), Rounding::Up),
            ]);
            o.i.extend_from_slice(&[
                a.round_ties_even() as i32,
                a.trunc() as i32,
                a.floor() as i32,
                a.ceil() as i32,
                a as i32,
                a.abs().round_ties_even() as u32 as i32,
                (a * 1e8) as i32,
                ((a.to_bits() as i32) >> 23) & 0xff,
            ]);
        }
        o
    }
}

/// `f64`: double precision. Bit-exact.
pub mod f64k {
    use super::*;

    /// `(double a, const double *x, double *y, double *poly, float *narrow,
    ///   long long *conv, double *sum, int n)`
    pub const PARAMS: &[Param] = &[
        f64p("a"),
        ptr("x"),
        ptr("y"),
        ptr("poly"),
        ptr("narrow"),
        ptr("conv"),
        ptr("sum"),
        int("n"),
    ];

    /// Inputs: n = 1001 in blocks of 128.
    #[derive(Debug, Clone)]
    pub struct Inputs {
        /// The daxpy scalar.
        pub a: f64,
        /// x in [-3, 3).
        pub x: Vec<f64>,
        /// y before the launch.
        pub y: Vec<f64>,
    }

    impl Inputs {
        /// The fixed inputs.
        pub fn new() -> Self {
            let mut r = Rng::new(10);
            let mut x: Vec<f64> = (0..1001).map(|_| r.f64_in(-3.0, 3.0)).collect();
            x[..4].copy_from_slice(&[0.5, -0.5, 1.5, -2.5]);
            Inputs {
                a: -0.75,
                x,
                y: (0..1001).map(|_| r.f64_in(-10.0, 10.0)).collect(),
            }
        }
    }

    /// ceil(n / 128) blocks of 128.
    pub fn config(i: &Inputs) -> LaunchConfig {
        LaunchConfig::linear(i.x.len(), 128)
    }

    /// Outputs (`sum` zero before the launch).
    #[derive(Debug, Clone, PartialEq)]
    pub struct Outputs {
        /// y after the launch.
        pub y: Vec<f64>,
        /// 2 per element.
        pub poly: Vec<f64>,
        /// 2 per element.
        pub narrow: Vec<f32>,
        /// 1 per element.
        pub conv: Vec<i64>,
        /// Sum of rint(x) (ties to even).
        pub sum: f64,
    }

    /// The outputs.
    pub fn reference(i: &Inputs) -> Outputs {
        let mut o = Outputs {
            y: vec![],
            poly: vec![],
            narrow: vec![],
            conv: vec![],
            sum: 0.0,
        };
        for (x, y) in i.x.iter().zip(&i.y) {
            let x = *x;
            o.y.push(i.a.mul_add(x, *y));
            let mut p = -0.03125f64;
            for c in [0.0625, -0.125, 0.25, -0.5, 1.0] {
                p = p.mul_add(x, c);
            }
            o.poly.push(p / x.mul_add(x, 1.0));
            o.poly.push(x.abs().sqrt() + p);
            o.narrow.push(p as f32);
            o.narrow.push(f64_to_f32(p, Rounding::Zero));
            o.conv.push((p * 1e6) as i64);
            o.sum += f64::from(x.round_ties_even() as i32);
        }
        o
    }
}

/// `device_call`: a `.func` call with a `.local` array. Bit-exact.
pub mod device_call {
    use super::*;

    /// `(const float *x, const float *coeffs, float *out, int ncoef, int n)`
    pub const PARAMS: &[Param] = &[ptr("x"), ptr("coeffs"), ptr("out"), int("ncoef"), int("n")];

    /// Inputs: n = 500 in blocks of 128, 6 coefficients.
    #[derive(Debug, Clone)]
    pub struct Inputs {
        /// x.
        pub x: Vec<f32>,
        /// Polynomial coefficients (at most 8 are used).
        pub coeffs: Vec<f32>,
    }

    impl Inputs {
        /// The fixed inputs.
        pub fn new() -> Self {
            let mut r = Rng::new(11);
            Inputs {
                x: r.f32_vec(500, -1.5, 1.5),
                coeffs: vec![0.5, -1.25, 2.0, 0.375, -0.0625, 1.5],
            }
        }
    }

    /// ceil(n / 128) blocks of 128.
    pub fn config(i: &Inputs) -> LaunchConfig {
        LaunchConfig::linear(i.x.len(), 128)
    }

    /// `out`.
    pub fn reference(i: &Inputs) -> Vec<f32> {
        i.x.iter()
            .enumerate()
            .map(|(e, &x)| {
                let mut pw = [1.0f32; 8];
                for j in 1..8 {
                    pw[j] = pw[j - 1] * x;
                }
                let mut acc = 0.0f32;
                // The kernel stops at min(ncoef, 8): zip stops at the shorter.
                for (c, p) in i.coeffs.iter().zip(&pw) {
                    acc = c.mul_add(*p, acc);
                }
                acc + pw[e & 7]
            })
            .collect()
    }
}

/// `transpose2d`: tiled transpose on a 2D grid. Bit-exact.
pub mod transpose2d {
    use super::*;

    /// `(const float *in, float *out, int rows, int cols)`
    pub const PARAMS: &[Param] = &[ptr("in"), ptr("out"), int("rows"), int("cols")];

    /// Inputs: 37 rows x 53 columns (partial tiles on both edges).
    #[derive(Debug, Clone)]
    pub struct Inputs {
        /// Rows of `in`.
        pub rows: usize,
        /// Columns of `in`.
        pub cols: usize,
        /// Row-major rows x cols.
        pub input: Vec<f32>,
    }

    impl Inputs {
        /// The fixed inputs.
        pub fn new() -> Self {
            Inputs {
                rows: 37,
                cols: 53,
                input: Rng::new(12).f32_vec(37 * 53, -1.0, 1.0),
            }
        }
    }

    /// Block (16, 16), grid (ceil(cols / 16), ceil(rows / 16)).
    pub fn config(i: &Inputs) -> LaunchConfig {
        LaunchConfig {
            grid: Dim3::new(ceil_div(i.cols as u32, 16), ceil_div(i.rows as u32, 16), 1),
            block: Dim3::new(16, 16, 1),
            shared_bytes: 0,
        }
    }

    /// `out`, row-major cols x rows.
    pub fn reference(i: &Inputs) -> Vec<f32> {
        let mut out = vec![0.0; i.rows * i.cols];
        for r in 0..i.rows {
            for c in 0..i.cols {
                out[c * i.rows + r] = i.input[r * i.cols + c];
            }
        }
        out
    }
}

/// `stencil3d`: 7-point stencil on a 3D grid. Bit-exact.
pub mod stencil3d {
    use super::*;

    /// `(const float *in, float *out, int nx, int ny, int nz, float c0, float c1)`
    pub const PARAMS: &[Param] = &[
        ptr("in"),
        ptr("out"),
        int("nx"),
        int("ny"),
        int("nz"),
        f32p("c0"),
        f32p("c1"),
    ];

    /// Inputs: 19 x 13 x 11 points, blocks of 8 x 8 x 4 (partial in every dimension).
    #[derive(Debug, Clone)]
    pub struct Inputs {
        /// Extents.
        pub nx: usize,
        /// Extents.
        pub ny: usize,
        /// Extents.
        pub nz: usize,
        /// Centre weight.
        pub c0: f32,
        /// Neighbour weight.
        pub c1: f32,
        /// x fastest.
        pub input: Vec<f32>,
    }

    impl Inputs {
        /// The fixed inputs.
        pub fn new() -> Self {
            let (nx, ny, nz) = (19, 13, 11);
            Inputs {
                nx,
                ny,
                nz,
                c0: 0.4,
                c1: 0.1,
                input: Rng::new(13).f32_vec(nx * ny * nz, 0.0, 10.0),
            }
        }
    }

    /// Block (8, 8, 4), grid covering the volume.
    pub fn config(i: &Inputs) -> LaunchConfig {
        LaunchConfig {
            grid: Dim3::new(
                ceil_div(i.nx as u32, 8),
                ceil_div(i.ny as u32, 8),
                ceil_div(i.nz as u32, 4),
            ),
            block: Dim3::new(8, 8, 4),
            shared_bytes: 0,
        }
    }

    /// `out`.
    pub fn reference(i: &Inputs) -> Vec<f32> {
        let (nx, ny, nz) = (i.nx, i.ny, i.nz);
        let (sy, sz) = (nx, nx * ny);
        let mut out = vec![0.0; nx * ny * nz];
        for z in 0..nz {
            for y in 0..ny {
                for x in 0..nx {
                    let c = z * sz + y * sy + x;
                    let v = i.input[c];
                    out[c] = if x == 0
                        || y == 0
                        || z == 0
                        || x == nx - 1
                        || y == ny - 1
                        || z == nz - 1
                    {
                        v
                    } else {
                        let inp = &i.input;
                        let s = inp[c - 1]
                            + inp[c + 1]
                            + inp[c - sy]
                            + inp[c + sy]
                            + inp[c - sz]
                            + inp[c + sz];
                        i.c1.mul_add(s, i.c0 * v)
                    };
                }
            }
        }
        out
    }
}

/// `dyn_shared`: dynamic shared memory. Bit-exact.
pub mod dyn_shared {
    use super::*;

    /// `(const float *in, float *out, int *out2, int n)`
    pub const PARAMS: &[Param] = &[ptr("in"), ptr("out"), ptr("out2"), int("n")];

    /// Threads per block.
    pub const BLOCK: u32 = 128;

    /// Inputs: n = 1000 (the last block holds 104).
    #[derive(Debug, Clone)]
    pub struct Inputs {
        /// Values.
        pub input: Vec<f32>,
    }

    impl Inputs {
        /// The fixed inputs.
        pub fn new() -> Self {
            Inputs {
                input: Rng::new(14).f32_vec(1000, -5.0, 5.0),
            }
        }
    }

    /// ceil(n / 128) blocks of 128, 8 * 128 bytes of dynamic shared memory.
    pub fn config(i: &Inputs) -> LaunchConfig {
        LaunchConfig {
            shared_bytes: 8 * BLOCK,
            ..LaunchConfig::linear(i.input.len(), BLOCK)
        }
    }

    /// `out` and `out2`.
    pub fn reference(i: &Inputs) -> (Vec<f32>, Vec<i32>) {
        let n = i.input.len();
        let bd = BLOCK as usize;
        let mut out = vec![0.0; n];
        let mut out2 = vec![0; n];
        for (b, base) in (0..n).step_by(bd).enumerate() {
            let count = (n - base).min(bd);
            for t in 0..count {
                out[base + t] = i.input[base + count - 1 - t];
                let u = (t + 1) % bd;
                out2[base + t] = ((u * u) as i32) ^ b as i32;
            }
        }
        (out, out2)
    }
}

/// `vec4_const`: float4/int2 vector memory, `.const` and an initialised `.global`.
/// Bit-exact.
pub mod vec4_const {
    use super::*;

    /// `(const float4 *in, float4 *out, int2 *tag, int n4)`
    pub const PARAMS: &[Param] = &[ptr("in"), ptr("out"), ptr("tag"), int("n4")];
    /// The `.const` module variable the host fills (4 floats).
    pub const SCALE_SYMBOL: &str = "vm_scale";
    /// The initialised `.global` module variable (starts at 100).
    pub const VISITS_SYMBOL: &str = "vm_visits";
    /// Initial value of `vm_visits`.
    pub const VISITS_INIT: u32 = 100;

    /// Inputs: 333 float4 (1332 floats) in blocks of 64.
    #[derive(Debug, Clone)]
    pub struct Inputs {
        /// 4 * n4 floats.
        pub input: Vec<f32>,
        /// Contents of `vm_scale`.
        pub scale: [f32; 4],
    }

    impl Inputs {
        /// The fixed inputs.
        pub fn new() -> Self {
            Inputs {
                input: Rng::new(15).f32_vec(4 * 333, -8.0, 8.0),
                scale: [0.5, -1.25, 3.0, 0.1],
            }
        }
        /// Number of float4 elements.
        pub fn n4(&self) -> usize {
            self.input.len() / 4
        }
    }

    /// ceil(n4 / 64) blocks of 64.
    pub fn config(i: &Inputs) -> LaunchConfig {
        LaunchConfig::linear(i.n4(), 64)
    }

    /// Outputs.
    #[derive(Debug, Clone, PartialEq)]
    pub struct Outputs {
        /// 4 * n4 floats.
        pub out: Vec<f32>,
        /// 2 * n4 ints: (i, 1).
        pub tag: Vec<i32>,
        /// `vm_visits` after the launch.
        pub visits: u32,
    }

    /// The outputs.
    pub fn reference(i: &Inputs) -> Outputs {
        let k = i.scale;
        let mut o = Outputs {
            out: vec![],
            tag: vec![],
            visits: VISITS_INIT + i.n4() as u32,
        };
        for (e, v) in i.input.chunks(4).enumerate() {
            o.out.extend_from_slice(&[
                v[0].mul_add(k[0], k[3]),
                v[1].mul_add(k[1], k[3]),
                v[2].mul_add(k[2], k[3]),
                v[3],
            ]);
            o.tag.extend_from_slice(&[e as i32, 1]);
        }
        o
    }
}

/// PTX `prmt.b32` in its default mode: bytes 0-3 of `a`, 4-7 of `b`; each selector
/// nibble picks a byte (low 3 bits) and, with bit 3 set, replicates its sign bit.
pub fn prmt(a: u32, b: u32, sel: u32) -> u32 {
    let bytes = (u64::from(b) << 32 | u64::from(a)).to_le_bytes();
    (0..4).fold(0u32, |d, n| {
        let s = (sel >> (4 * n)) & 0xf;
        let mut byte = bytes[(s & 7) as usize];
        if s & 8 != 0 {
            byte = if byte & 0x80 != 0 { 0xff } else { 0 };
        }
        d | (u32::from(byte) << (8 * n))
    })
}

/// `int_ops`: 32/64-bit integer arithmetic and byte/funnel operations. Bit-exact.
pub mod int_ops {
    use super::*;

    /// `(const int *a, const int *b, const long long *c, const long long *d,
    ///   const signed char *e, int *out, long long *out64, int n)`
    pub const PARAMS: &[Param] = &[
        ptr("a"),
        ptr("b"),
        ptr("c"),
        ptr("d"),
        ptr("e"),
        ptr("out"),
        ptr("out64"),
        int("n"),
    ];
    /// i32 outputs per element.
    pub const NO: usize = 22;

    /// Inputs: n = 400 in blocks of 96; specials first (negative operands for the
    /// truncating division, 24-bit boundaries, large shifts).
    #[derive(Debug, Clone)]
    pub struct Inputs {
        /// a (never i32::MIN).
        pub a: Vec<i32>,
        /// b (never 0).
        pub b: Vec<i32>,
        /// c.
        pub c: Vec<i64>,
        /// d (never 0; c / d never overflows).
        pub d: Vec<i64>,
        /// e.
        pub e: Vec<i8>,
    }

    impl Inputs {
        /// The fixed inputs.
        pub fn new() -> Self {
            let mut r = Rng::new(16);
            let n = 400;
            let mut a: Vec<i32> = (0..n).map(|_| r.next_u32() as i32).collect();
            let mut b: Vec<i32> = (0..n)
                .map(|_| (r.next_u32() >> (r.next_u32() % 31)) as i32)
                .collect();
            let special = [
                (7, 2),
                (-7, 2),
                (7, -2),
                (-7, -2),
                (0x00ff_ffff, 0x0080_0000),
                (-1, 1),
                (i32::MAX, -1),
                (0x1234_5678, 33),
            ];
            for (k, (x, y)) in special.iter().enumerate() {
                a[k] = *x;
                b[k] = *y;
            }
            for v in a.iter_mut().filter(|v| **v == i32::MIN) {
                *v = 0;
            }
            for v in b.iter_mut().filter(|v| **v == 0) {
                *v = 3;
            }
            let c: Vec<i64> = (0..n).map(|_| r.next_u64() as i64).collect();
            let mut d: Vec<i64> = (0..n)
                .map(|_| (r.next_u64() >> (r.next_u32() % 63)) as i64)
                .collect();
            d[..4].copy_from_slice(&[-3, 3, -1, i64::MAX]);
            for v in d.iter_mut().filter(|v| **v == 0) {
                *v = -5;
            }
            let e = (0..n).map(|_| r.next_u32() as i8).collect();
            Inputs { a, b, c, d, e }
        }
    }

    /// ceil(n / 96) blocks of 96.
    pub fn config(i: &Inputs) -> LaunchConfig {
        LaunchConfig::linear(i.a.len(), 96)
    }

    /// `out` (NO per element) and `out64` (4 per element).
    pub fn reference(i: &Inputs) -> (Vec<i32>, Vec<i64>) {
        let (mut out, mut out64) = (vec![], vec![]);
        for k in 0..i.a.len() {
            let (x, y) = (i.a[k], i.b[k]);
            let (ux, uy) = (x as u32, y as u32);
            let s24 = |v: i32| (v << 8) >> 8;
            let sad = |lo: i32, hi: i32| {
                if lo < hi {
                    hi.wrapping_sub(lo)
                } else {
                    lo.wrapping_sub(hi)
                }
            };
            let wide = (u64::from(uy) << 32) | u64::from(ux);
            let shl = (ux >> 27) & 31;
            let shr = (uy & 63).min(32);
            out.extend_from_slice(&[
                x.wrapping_div(y),
                x.wrapping_rem(y),
                (ux / uy) as i32,
                (ux % uy) as i32,
                ((i64::from(x) * i64::from(y)) >> 32) as i32,
                ((u64::from(ux) * u64::from(uy)) >> 32) as i32,
                s24(x).wrapping_mul(s24(y)),
                ((ux & 0xff_ffff).wrapping_mul(uy & 0xff_ffff)) as i32,
                sad(x, y).wrapping_add(7),
                ux.abs_diff(uy).wrapping_add(1) as i32,
                x.min(y),
                ux.max(uy) as i32,
                x.abs(),
                prmt(ux, uy, (ux >> 3) & 0x7777) as i32,
                prmt(ux, uy, uy & 0xffff) as i32,
                ((wide << shl) >> 32) as u32 as i32,
                (wide >> shr) as u32 as i32,
                i32::from(x as i8),
                i32::from(y as i16),
                x >> (y & 31),
                (ux >> (uy & 31)) as i32,
                i32::from(i.e[k]),
            ]);
            let (p, q) = (i.c[k], i.d[k]);
            out64.extend_from_slice(&[
                p.wrapping_div(q),
                p.wrapping_rem(q),
                ((p as u64) / (q as u64)) as i64,
                ((i128::from(p) * i128::from(q)) >> 64) as i64,
            ]);
        }
        (out, out64)
    }
}

/// IEEE binary16 from f32 bits with round-to-nearest-even or towards zero (PTX
/// `cvt.rn/rz.f16.f32`; NaN inputs are not handled).
pub fn f32_to_f16(x: f32, mode: Rounding) -> u16 {
    assert!(!x.is_nan() && matches!(mode, Rounding::Nearest | Rounding::Zero));
    let sign = ((x.to_bits() >> 16) & 0x8000) as u16;
    let a = f64::from(x.abs());
    let overflow = if mode == Rounding::Nearest {
        0x7c00
    } else {
        0x7bff
    };
    if a.is_infinite() {
        return sign | 0x7c00; // exact in every rounding mode
    }
    if a == 0.0 {
        return sign;
    }
    let e = (a.log2().floor() as i32).max(-14);
    // a / 2^(e-10) has 11 integer bits; exact in f64.
    let m = a * 2f64.powi(10 - e);
    let mut r = if mode == Rounding::Nearest {
        m.round_ties_even()
    } else {
        m.trunc()
    } as u32;
    let mut e = e;
    if r >= 2048 {
        r /= 2;
        e += 1;
    }
    if e > 15 {
        return sign | overflow;
    }
    if r < 1024 {
        return sign | r as u16; // subnormal (e == -14)
    }
    sign | (((e + 15) as u16) << 10) | (r - 1024) as u16
}

/// The f32 value of binary16 bits (exact).
pub fn f16_to_f32(h: u16) -> f32 {
    let sign = if h & 0x8000 != 0 { -1.0 } else { 1.0 };
    let exp = i32::from((h >> 10) & 0x1f);
    let man = f32::from(h & 0x3ff);
    sign * match exp {
        0 => man * 2f32.powi(-24),
        31 if man == 0.0 => f32::INFINITY,
        31 => f32::NAN,
        _ => (1024.0 + man) * 2f32.powi(exp - 25),
    }
}

/// `half_conv`: f16 conversions and arithmetic. Bit-exact.
pub mod half_conv {
    use super::*;

    /// `(const float *x, const float *y, const unsigned short *h, unsigned short *hout,
    ///   float *fout, int n)`
    pub const PARAMS: &[Param] = &[
        ptr("x"),
        ptr("y"),
        ptr("h"),
        ptr("hout"),
        ptr("fout"),
        int("n"),
    ];

    /// Inputs: n = 500 in blocks of 128; specials first (ties, half subnormals, overflow,
    /// signed zero, infinity).
    #[derive(Debug, Clone)]
    pub struct Inputs {
        /// x (rounded to nearest).
        pub x: Vec<f32>,
        /// y (rounded towards zero).
        pub y: Vec<f32>,
        /// Raw half bits (no NaN).
        pub h: Vec<u16>,
    }

    impl Inputs {
        /// The fixed inputs.
        pub fn new() -> Self {
            let mut r = Rng::new(17);
            let n = 500;
            let mut x: Vec<f32> = (0..n).map(|_| r.f32_in(-300.0, 300.0)).collect();
            let mut y: Vec<f32> = (0..n).map(|_| r.f32_in(-300.0, 300.0)).collect();
            let special = [
                0.0,
                -0.0,
                1.0 + 2f32.powi(-11), // tie: rn to even (1.0)
                1.0 + 3.0 * 2f32.powi(-11),
                65504.0,
                65519.0,
                65520.0, // rn: inf
                1.0e6,
                -1.0e6,
                f32::INFINITY,
                5.96e-8, // near the smallest subnormal half
                2.98e-8, // below half of it
                6.1e-5,  // around the smallest normal half
                -3.0e-6,
                1.0e-10,
                0.333_333_34,
            ];
            x[..special.len()].copy_from_slice(&special);
            y[..special.len()].copy_from_slice(&special);
            for v in &mut x[special.len()..100] {
                *v *= 1.0e-6; // small values: subnormal halves
            }
            let h: Vec<u16> = (0..n)
                .map(|_| {
                    let v = r.next_u32() as u16;
                    if v & 0x7c00 == 0x7c00 {
                        v & 0xfc00 // infinities instead of NaNs
                    } else {
                        v
                    }
                })
                .collect();
            Inputs { x, y, h }
        }
    }

    /// ceil(n / 128) blocks of 128.
    pub fn config(i: &Inputs) -> LaunchConfig {
        LaunchConfig::linear(i.x.len(), 128)
    }

    /// `hout` (4 per element) and `fout` (2 per element).
    pub fn reference(i: &Inputs) -> (Vec<u16>, Vec<f32>) {
        let (mut hout, mut fout) = (vec![], vec![]);
        for k in 0..i.x.len() {
            let hx = f32_to_f16(i.x[k], Rounding::Nearest);
            let hy = f32_to_f16(i.y[k], Rounding::Zero);
            let (fx, fy) = (f16_to_f32(hx), f16_to_f32(hy));
            let s = f32_to_f16(fx + fy, Rounding::Nearest);
            let p = f32_to_f16(fx * fy, Rounding::Nearest);
            hout.extend_from_slice(&[hx, hy, s, p]);
            fout.extend_from_slice(&[f16_to_f32(s), f16_to_f32(i.h[k])]);
        }
        (hout, fout)
    }
}

/// `special_regs`: special registers and warps of a 3D block of 60 threads. Bit-exact
/// (`clocks` is only checked to be a plausible non-negative difference).
pub mod special_regs {
    use super::*;

    /// `(unsigned *out, unsigned long long *clocks)`
    pub const PARAMS: &[Param] = &[ptr("out"), ptr("clocks")];
    /// Words of `out` per thread.
    pub const WORDS: usize = 8;
    /// Block (6, 5, 2): 60 threads, warps of 32 and 28.
    pub const CONFIG: LaunchConfig = LaunchConfig {
        grid: Dim3::new(2, 3, 2),
        block: Dim3::new(6, 5, 2),
        shared_bytes: 0,
    };

    /// Threads in the whole grid.
    pub fn threads() -> usize {
        (CONFIG.grid.count() * CONFIG.block.count()) as usize
    }

    /// `out`.
    pub fn reference() -> Vec<u32> {
        let (g, bd) = (CONFIG.grid, CONFIG.block);
        let per_block = bd.count();
        let pack = |d: Dim3| d.x | (d.y << 8) | (d.z << 16);
        let mut out = vec![];
        for bz in 0..g.z {
            for by in 0..g.y {
                for bx in 0..g.x {
                    for tz in 0..bd.z {
                        for ty in 0..bd.y {
                            for tx in 0..bd.x {
                                let t = tx + bd.x * (ty + bd.y * tz);
                                let lane = t % 32;
                                let warp_base = t - lane;
                                let live = (per_block - warp_base).min(32);
                                let active = if live == 32 {
                                    u32::MAX
                                } else {
                                    (1 << live) - 1
                                };
                                // Lane l of this warp has linear id warp_base + l; its tid.y:
                                let ballot = (0..live)
                                    .filter(|l| ((warp_base + l) / bd.x) % bd.y % 2 == 1)
                                    .fold(0u32, |m, l| m | (1 << l));
                                out.extend_from_slice(&[
                                    pack(Dim3::new(tx, ty, tz)),
                                    pack(bd),
                                    pack(Dim3::new(bx, by, bz)),
                                    pack(g),
                                    lane,
                                    (1u32 << lane) - 1,
                                    active,
                                    ballot,
                                ]);
                            }
                        }
                    }
                }
            }
        }
        out
    }
}

// ---------------------------------------------------------------------------------------
// Broken kernels
// ---------------------------------------------------------------------------------------

/// The kernels that are wrong on purpose, with the fault each must produce.
pub mod broken {
    use super::*;

    /// `oob_write`: `if (i <= n) out[i] = i`.
    pub mod oob_write {
        use super::*;

        /// `(float *out, int n)`
        pub const PARAMS: &[Param] = &[ptr("out"), int("n")];
        /// Elements of `out`.
        pub const N: u32 = 1000;
        /// 8 blocks of 128: threads 1000..1023 exist, only 1000 passes the bad check.
        pub const CONFIG: LaunchConfig = LaunchConfig {
            grid: Dim3::x(8),
            block: Dim3::x(128),
            shared_bytes: 0,
        };
        /// The faulting thread: block 7, thread 104 (global index n).
        pub const FAULT_BLOCK: u32 = N / 128;
        /// Thread index within the block.
        pub const FAULT_THREAD: u32 = N % 128;
        /// Byte offset of the faulting store from the start of `out` (its size: just past the end).
        pub const FAULT_OFFSET: u64 = 4 * N as u64;
        /// Access size in bytes.
        pub const FAULT_SIZE: u32 = 4;
        /// What `out[0..n]` holds if the simulator ran the in-range threads before
        /// stopping (it may stop earlier; only the fault is required).
        pub fn partial_out() -> Vec<f32> {
            (0..N).map(|i| i as f32).collect()
        }
    }

    /// `use_after_free`: a correct kernel launched with `in` already freed.
    pub mod use_after_free {
        use super::*;

        /// `(const float *in, float *out, int n)`
        pub const PARAMS: &[Param] = &[ptr("in"), ptr("out"), int("n")];
        /// Elements.
        pub const N: u32 = 256;
        /// 4 blocks of 64.
        pub const CONFIG: LaunchConfig = LaunchConfig {
            grid: Dim3::x(4),
            block: Dim3::x(64),
            shared_bytes: 0,
        };
        /// Access size of the faulting load.
        pub const FAULT_SIZE: u32 = 4;
        /// The result with `in` alive: `in[i] + 1` (to check the kernel itself is fine).
        pub fn reference(input: &[f32]) -> Vec<f32> {
            input.iter().map(|v| v + 1.0).collect()
        }
    }

    /// `divergent_barrier`: `__syncthreads()` only in the odd threads' branch.
    pub mod divergent_barrier {
        use super::*;

        /// `(float *data, int n)`
        pub const PARAMS: &[Param] = &[ptr("data"), int("n")];
        /// Elements.
        pub const N: u32 = 64;
        /// One block of 64 threads (two warps).
        pub const CONFIG: LaunchConfig = LaunchConfig {
            grid: Dim3::x(1),
            block: Dim3::x(64),
            shared_bytes: 0,
        };
        /// The lanes of warp 0 that reach the barrier inside the branch.
        pub const ARRIVED_LANES: u32 = 0xaaaa_aaaa;
    }

    /// `infinite_loop`: spins on a flag that stays 0.
    pub mod infinite_loop {
        use super::*;

        /// `(volatile const int *flag, unsigned *spins)`
        pub const PARAMS: &[Param] = &[ptr("flag"), ptr("spins")];
        /// One block of 32.
        pub const CONFIG: LaunchConfig = LaunchConfig {
            grid: Dim3::x(1),
            block: Dim3::x(32),
            shared_bytes: 0,
        };
    }

    /// `misaligned`: 4-byte loads from `base + 1 + 4 * i`.
    pub mod misaligned {
        use super::*;

        /// `(const char *base, int *out, int n)`
        pub const PARAMS: &[Param] = &[ptr("base"), ptr("out"), int("n")];
        /// Words read (the `base` buffer holds 4 * N + 4 bytes, so no read leaves it).
        pub const N: u32 = 100;
        /// 2 blocks of 64.
        pub const CONFIG: LaunchConfig = LaunchConfig {
            grid: Dim3::x(2),
            block: Dim3::x(64),
            shared_bytes: 0,
        };
        /// Offset of the first faulting load in `base`.
        pub const FAULT_OFFSET: u64 = 1;
        /// Access size.
        pub const FAULT_SIZE: u32 = 4;
    }

    /// `shared_oob`: `__shared__ float s[64]` indexed by `threadIdx.x` in a block of 128.
    pub mod shared_oob {
        use super::*;

        /// `(const float *in, float *out)`
        pub const PARAMS: &[Param] = &[ptr("in"), ptr("out")];
        /// One block of 128 threads.
        pub const CONFIG: LaunchConfig = LaunchConfig {
            grid: Dim3::x(1),
            block: Dim3::x(128),
            shared_bytes: 0,
        };
        /// The first faulting thread.
        pub const FAULT_THREAD: u32 = 64;
        /// Its offset in the block's shared memory (just past the 256-byte array).
        pub const FAULT_OFFSET: u64 = 256;
        /// Access size.
        pub const FAULT_SIZE: u32 = 4;
    }
}
