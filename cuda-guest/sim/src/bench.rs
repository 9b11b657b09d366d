//! Benchmarks of the simulator against the same algorithms written as plain Rust loops,
//! measured in the same run: vector_add and saxpy over 2^24 f32, a shared-memory block
//! reduction over 2^24 f32, a 16x16-tiled matmul 512x512x512, a shared-memory 32x32-tile
//! transpose of 4096x4096 f32 and a global-atomic histogram of 2^24 words into 256
//! bins; each on 1, 2, 4, ... host threads up to every core. The kernels are NVRTC 12.9
//! builds of `tests/ptx/basic.cu` (`bench.ptx`). A kernel the JIT runs is measured on
//! the interpreter too (first thread count), the JIT's baseline in the same run, and
//! vector_add's loop on each thread count too, the machine's own scaling for
//! memory-bound code (`BenchResult::native_threads`). This is what `vmgpu cuda bench`
//! reports; nothing here asserts a time.

use super::{DevicePtr, Engine, KernelArg, LaunchConfig, SimConfig, SimError, Simulator};
use std::hint::black_box;
use std::time::{Duration, Instant};

/// The PTX of the benchmark kernels.
pub const BENCH_PTX: &str = include_str!("bench.ptx");

/// Issue 16's goals: a benchmark's simulator time on one thread over the plain loop's,
/// at most this (the benchmarks without one have none).
pub const GOALS_1T: [(&str, f64); 4] = [
    ("vector_add", 2.0),
    ("saxpy", 2.5),
    ("reduce", 8.0),
    ("matmul", 4.0),
];

/// Issue 16's scaling goal: on N threads (N <= [`SCALING_GOAL_UP_TO`]) at least this
/// times N the one-thread speed.
pub const SCALING_GOAL: f64 = 0.75;
/// The largest thread count the scaling goal covers.
pub const SCALING_GOAL_UP_TO: usize = 16;

/// The one-thread goal of benchmark `name` ([`GOALS_1T`]).
pub fn goal_1t(name: &str) -> Option<f64> {
    GOALS_1T.iter().find(|(n, _)| *n == name).map(|&(_, g)| g)
}

/// 1, 2, 4, ... up to `max`, and `max` itself.
pub fn thread_counts(max: usize) -> Vec<usize> {
    let max = max.max(1);
    let mut v: Vec<usize> = std::iter::successors(Some(1usize), |t| t.checked_mul(2))
        .take_while(|&t| t < max)
        .collect();
    v.push(max);
    v
}

/// Benchmark sizes.
#[derive(Debug, Clone)]
pub struct BenchSizes {
    /// Elements of vector_add, saxpy, the reduction and the histogram (2^24 by default).
    pub elements: usize,
    /// Matrix side of the matmul (512 by default; the transpose's is 8 times it).
    pub matrix: usize,
    /// Runs of each measurement; the fastest counts.
    pub repeats: usize,
    /// Host thread counts to run the simulator on ([`thread_counts`] up to every core
    /// by default; the ratios and the scaling are against the first).
    pub threads: Vec<usize>,
}

impl Default for BenchSizes {
    fn default() -> Self {
        BenchSizes {
            elements: 1 << 24,
            matrix: 512,
            repeats: 3,
            threads: thread_counts(std::thread::available_parallelism().map_or(1, |n| n.get())),
        }
    }
}

/// One benchmark's result.
#[derive(Debug, Clone)]
pub struct BenchResult {
    /// Benchmark name (`vector_add`, `saxpy`, `reduce`, `matmul`, `transpose`,
    /// `histogram`).
    pub name: &'static str,
    /// Problem size in words.
    pub size: String,
    /// The plain Rust loop (one thread).
    pub native: Duration,
    /// The simulator's time on each thread count, in [`BenchSizes::threads`] order.
    pub sim: Vec<(usize, Duration)>,
    /// Warp instructions per launch.
    pub warp_instructions: u64,
    /// The engine that ran the simulator's launches on the first thread count (the
    /// default: the JIT where it takes the kernel).
    pub engine: Engine,
    /// The interpreter's time on the first thread count, measured in the same run, when
    /// the JIT ran the kernel (the baseline of its speed-up).
    pub interpreted: Option<Duration>,
    /// The plain loop on each thread count, each thread a share of the elements
    /// (vector_add's; empty for the others): what the machine gives a memory-bound
    /// loop on more cores, the reference for the simulator's scaling.
    pub native_threads: Vec<(usize, Duration)>,
}

impl BenchResult {
    /// The simulator's time on `threads` threads, if measured.
    pub fn time(&self, threads: usize) -> Option<Duration> {
        time_on(&self.sim, threads)
    }
    /// Simulator time on `threads` threads over the native time.
    pub fn ratio(&self, threads: usize) -> Option<f64> {
        Some(self.time(threads)?.as_secs_f64() / self.native.as_secs_f64())
    }
    /// The interpreter's time over the engine's, on the first thread count (when the
    /// JIT ran the kernel).
    pub fn jit_speedup(&self) -> Option<f64> {
        let &(_, first) = self.sim.first()?;
        Some(self.interpreted?.as_secs_f64() / first.as_secs_f64())
    }
    /// Speed-up from the first thread count measured (1 by default) to `threads`.
    pub fn scaling(&self, threads: usize) -> Option<f64> {
        speedup(&self.sim, threads)
    }
    /// The plain loop's speed-up from the first thread count to `threads`, where
    /// measured ([`BenchResult::native_threads`]).
    pub fn native_scaling(&self, threads: usize) -> Option<f64> {
        speedup(&self.native_threads, threads)
    }
}

/// The time of `times` on `threads` threads.
fn time_on(times: &[(usize, Duration)], threads: usize) -> Option<Duration> {
    times.iter().find(|(t, _)| *t == threads).map(|&(_, d)| d)
}

/// The first time of `times` over the one on `threads`.
fn speedup(times: &[(usize, Duration)], threads: usize) -> Option<f64> {
    let &(_, first) = times.first()?;
    Some(first.as_secs_f64() / time_on(times, threads)?.as_secs_f64())
}

/// vector_add's plain loop: `c = a + b`, each read and the result kept opaque.
fn add_into(a: &[f32], b: &[f32], c: &mut [f32]) {
    let (a, b) = (black_box(a), black_box(b));
    for i in 0..c.len() {
        c[i] = a[i] + b[i];
    }
    black_box(c);
}

/// vector_add's plain loop on each of `threads` host threads, each a share of the
/// elements (the best of `repeats` runs).
fn native_threads(
    (a, b, c): (&[f32], &[f32], &mut [f32]),
    threads: &[usize],
    repeats: usize,
) -> Result<Vec<(usize, Duration)>, SimError> {
    let mut out = vec![];
    for &t in threads {
        let share = c.len().div_ceil(t.max(1)).max(1);
        let d = best(repeats, || {
            Ok(timed(|| {
                std::thread::scope(|s| {
                    let parts = c
                        .chunks_mut(share)
                        .zip(a.chunks(share))
                        .zip(b.chunks(share));
                    for ((c, a), b) in parts {
                        s.spawn(move || add_into(a, b, c));
                    }
                });
            }))
        })?;
        out.push((t, d));
    }
    Ok(out)
}

fn best(
    repeats: usize,
    mut f: impl FnMut() -> Result<Duration, SimError>,
) -> Result<Duration, SimError> {
    let mut b = Duration::MAX;
    for _ in 0..repeats.max(1) {
        b = b.min(f()?);
    }
    Ok(b)
}

fn timed(f: impl FnOnce()) -> Duration {
    let t = Instant::now();
    f();
    t.elapsed()
}

fn data(n: usize, seed: u32) -> Vec<f32> {
    let mut x = seed.wrapping_mul(2_654_435_761) | 1;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            (x >> 8) as f32 / (1u32 << 24) as f32 - 0.5
        })
        .collect()
}

fn to_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn from_bytes(b: &[u8]) -> Vec<f32> {
    b.chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

fn u32_bytes(v: &[u32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// One kernel's launch on the simulator: its geometry and arguments over buffers made
/// by `setup`, `before` run ahead of each timed launch (untimed), `check` after the
/// last: whether the result is the plain loop's.
struct Case<'a> {
    name: &'static str,
    size: String,
    kernel: &'static str,
    native: Duration,
    /// Makes the buffers; returns them with the launch's geometry and arguments.
    setup: Step<'a, Launch>,
    before: BufStep<'a, ()>,
    check: BufStep<'a, bool>,
}

/// A step of a [`Case`] on one simulator.
type Step<'a, T> = Box<dyn Fn(&mut Simulator) -> Result<T, SimError> + 'a>;
/// A step of a [`Case`] on one simulator and the case's buffers.
type BufStep<'a, T> = Box<dyn Fn(&mut Simulator, &[DevicePtr]) -> Result<T, SimError> + 'a>;

struct Launch {
    bufs: Vec<DevicePtr>,
    config: LaunchConfig,
    args: Vec<KernelArg>,
}

fn upload(s: &mut Simulator, bytes: &[u8]) -> Result<DevicePtr, SimError> {
    let p = s.malloc(bytes.len() as u64)?;
    s.memcpy_htod(p, bytes)?;
    Ok(p)
}

fn download(s: &mut Simulator, p: DevicePtr, bytes: usize) -> Result<Vec<u8>, SimError> {
    let mut b = vec![0u8; bytes];
    s.memcpy_dtoh(&mut b, p)?;
    Ok(b)
}

fn close(got: &[f32], want: &[f32], tolerance: f32) -> bool {
    got.len() == want.len()
        && got
            .iter()
            .zip(want)
            .all(|(g, w)| (g - w).abs() <= tolerance)
}

/// Runs `case` on simulator `s`, checking its result: the best time, the warp
/// instructions and the engine of its launches.
fn measure_on(
    case: &Case,
    s: &mut Simulator,
    repeats: usize,
) -> Result<(Duration, u64, Engine), SimError> {
    let m = s.load_module("bench.ptx", BENCH_PTX)?;
    let l = (case.setup)(s)?;
    let (mut wi, mut engine) = (0, s.config().engine);
    let t = best(repeats, || {
        (case.before)(s, &l.bufs)?;
        let r = s.launch(&m, case.kernel, l.config, &l.args)?;
        (wi, engine) = (r.warp_instructions, r.engine);
        Ok(r.elapsed)
    })?;
    if !(case.check)(s, &l.bufs)? {
        return Err(SimError::InvalidLaunch {
            kernel: case.kernel.into(),
            message: format!(
                "simulated result ({}, {} thread(s)) differs from the native loop",
                engine.name(),
                s.config().threads
            ),
        });
    }
    for p in l.bufs {
        s.free(p)?;
    }
    s.unload_module(&m)?;
    Ok((t, wi, engine))
}

/// Runs `case` on each simulator (one per thread count), checking its result; when the
/// JIT ran it, on the interpreter too (the first thread count), for the JIT's speed-up.
fn measure(case: Case, sims: &mut [Simulator], repeats: usize) -> Result<BenchResult, SimError> {
    let mut sim = vec![];
    let (mut wi, mut engine) = (0, None);
    for s in sims.iter_mut() {
        let (t, w, e) = measure_on(&case, s, repeats)?;
        wi = w;
        engine.get_or_insert(e);
        sim.push((s.config().threads, t));
    }
    let engine = engine.unwrap_or(Engine::Interpreter);
    let mut interpreted = None;
    if let (Engine::Jit, Some(first)) = (engine, sims.first()) {
        let mut s = Simulator::new(SimConfig {
            engine: Engine::Interpreter,
            ..first.config().clone()
        });
        interpreted = Some(measure_on(&case, &mut s, repeats)?.0);
    }
    Ok(BenchResult {
        name: case.name,
        size: case.size,
        native: case.native,
        sim,
        warp_instructions: wi,
        engine,
        interpreted,
        native_threads: vec![],
    })
}

fn grid_1d(n: usize, block: u32) -> LaunchConfig {
    LaunchConfig {
        grid: [(n as u32).div_ceil(block), 1, 1],
        block: [block, 1, 1],
        shared_bytes: 0,
    }
}

/// saxpy's `a` (y = a*x + y).
pub const SAXPY_A: f32 = 1.5;
/// The histogram's bins.
pub const HISTOGRAM_BINS: u32 = 256;

/// A benchmark kernel's launch: kernel `kernel` of [`BENCH_PTX`] over `n` elements (the
/// matrix side for `matmul` and `transpose_shared`), its buffers `bufs` in the order of
/// its parameters (vector_add a, b, c; saxpy x, y; reduce_sum input, one sum per 512
/// elements; matmul a, b, c; transpose_shared input, output; histogram_atomic words,
/// [`HISTOGRAM_BINS`] bins). What [`run`], the criterion benches and the profiling
/// driver launch; `None` for another kernel.
pub fn launch_of(
    kernel: &str,
    n: usize,
    bufs: &[DevicePtr],
) -> Option<(LaunchConfig, Vec<KernelArg>)> {
    let ptr = |k: usize| KernelArg::Ptr(bufs[k]);
    let square = |tile: u32, block: [u32; 3]| {
        let g = (n as u32).div_ceil(tile);
        LaunchConfig {
            grid: [g, g, 1],
            block,
            shared_bytes: 0,
        }
    };
    let ni = KernelArg::I32(n as i32);
    Some(match kernel {
        "vector_add" => (grid_1d(n, 256), vec![ptr(0), ptr(1), ptr(2), ni]),
        "saxpy" => (
            grid_1d(n, 256),
            vec![ni, KernelArg::F32(SAXPY_A), ptr(0), ptr(1)],
        ),
        // Each block of 256 threads sums 512 elements.
        "reduce_sum" => (
            grid_1d(n.div_ceil(512) * 256, 256),
            vec![ptr(0), ptr(1), ni],
        ),
        "matmul" => (
            square(16, [16, 16, 1]),
            vec![ptr(0), ptr(1), ptr(2), ni.clone(), ni.clone(), ni],
        ),
        "transpose_shared" => (square(32, [32, 8, 1]), vec![ptr(0), ptr(1), ni.clone(), ni]),
        // At most 1024 blocks of 256 threads, striding over the words.
        "histogram_atomic" => (
            LaunchConfig {
                grid: [(n as u32).div_ceil(256).min(1024), 1, 1],
                block: [256, 1, 1],
                shared_bytes: 0,
            },
            vec![ptr(0), ptr(1), ni, KernelArg::U32(HISTOGRAM_BINS)],
        ),
        _ => return None,
    })
}

/// [`launch_of`] for a kernel [`run`] names itself.
fn launch(kernel: &str, n: usize, bufs: Vec<DevicePtr>) -> Result<Launch, SimError> {
    let (config, args) = launch_of(kernel, n, &bufs).ok_or_else(|| SimError::InvalidLaunch {
        kernel: kernel.into(),
        message: "not a benchmark kernel".into(),
    })?;
    Ok(Launch { bufs, config, args })
}

/// Runs the benchmark set; also checks each simulated result against the native one
/// (an error if they differ, so a fast wrong simulator cannot report a ratio).
pub fn run(sizes: &BenchSizes) -> Result<Vec<BenchResult>, SimError> {
    let n = sizes.elements;
    let reps = sizes.repeats;
    let a = data(n, 1);
    let b = data(n, 2);
    let mut sims: Vec<Simulator> = sizes
        .threads
        .iter()
        .map(|&t| {
            Simulator::new(SimConfig {
                threads: t.max(1),
                instruction_budget: 0,
                time_limit: None,
                ..SimConfig::default()
            })
        })
        .collect();
    let mut out = vec![];

    // vector_add
    let mut c = vec![0f32; n];
    let native = best(reps, || Ok(timed(|| add_into(&a, &b, &mut c))))?;
    out.push(measure(
        Case {
            name: "vector_add",
            size: format!("{n} f32"),
            kernel: "vector_add",
            native,
            setup: Box::new(|s| {
                let bufs = vec![
                    upload(s, &to_bytes(&a))?,
                    upload(s, &to_bytes(&b))?,
                    s.malloc(4 * n as u64)?,
                ];
                launch("vector_add", n, bufs)
            }),
            before: Box::new(|_, _| Ok(())),
            check: Box::new(|s, bufs| Ok(from_bytes(&download(s, bufs[2], 4 * n)?) == c)),
        },
        &mut sims,
        reps,
    )?);
    let mut c = vec![0f32; n];
    let on = native_threads((&a, &b, &mut c), &sizes.threads, reps)?;
    if let Some(r) = out.last_mut() {
        r.native_threads = on;
    }

    // saxpy (y = a*x + y; the simulated kernel's fma.rn.f32 is compared with f32::mul_add)
    let k = SAXPY_A;
    let mut y = b.clone();
    let native = best(reps, || {
        y.copy_from_slice(&b);
        Ok(timed(|| {
            let x = black_box(&a);
            for i in 0..n {
                y[i] += k * x[i];
            }
            black_box(&y);
        }))
    })?;
    let want: Vec<f32> = a.iter().zip(&b).map(|(x, y)| k.mul_add(*x, *y)).collect();
    out.push(measure(
        Case {
            name: "saxpy",
            size: format!("{n} f32"),
            kernel: "saxpy",
            native,
            setup: Box::new(|s| {
                let bufs = vec![upload(s, &to_bytes(&a))?, s.malloc(4 * n as u64)?];
                launch("saxpy", n, bufs)
            }),
            before: Box::new(|s, bufs| s.memcpy_htod(bufs[1], &to_bytes(&b))),
            check: Box::new(|s, bufs| Ok(from_bytes(&download(s, bufs[1], 4 * n)?) == want)),
        },
        &mut sims,
        reps,
    )?);

    // Block reduction: each block of 256 threads sums 512 elements.
    let chunk = 512;
    let blocks = n.div_ceil(chunk);
    let mut sums = vec![0f32; blocks];
    let native = best(reps, || {
        Ok(timed(|| {
            let v = black_box(&a);
            for (s, c) in sums.iter_mut().zip(v.chunks(chunk)) {
                let mut acc = 0f32;
                for x in c {
                    acc += x;
                }
                *s = acc;
            }
            black_box(&sums);
        }))
    })?;
    out.push(measure(
        Case {
            name: "reduce",
            size: format!("{n} f32"),
            kernel: "reduce_sum",
            native,
            setup: Box::new(|s| {
                let bufs = vec![upload(s, &to_bytes(&a))?, s.malloc(4 * blocks as u64)?];
                launch("reduce_sum", n, bufs)
            }),
            before: Box::new(|_, _| Ok(())),
            // A tree sum differs from the sequential one by rounding: check closeness.
            check: Box::new(|s, bufs| {
                Ok(close(
                    &from_bytes(&download(s, bufs[1], 4 * blocks)?),
                    &sums,
                    1e-3,
                ))
            }),
        },
        &mut sims,
        reps,
    )?);

    // Tiled matmul.
    let d = sizes.matrix;
    let ma = data(d * d, 3);
    let mb = data(d * d, 4);
    let mut mc = vec![0f32; d * d];
    let native = best(reps, || {
        Ok(timed(|| {
            let (x, y) = (black_box(&ma), black_box(&mb));
            for i in 0..d {
                for j in 0..d {
                    let mut acc = 0f32;
                    for k in 0..d {
                        acc += x[i * d + k] * y[k * d + j];
                    }
                    mc[i * d + j] = acc;
                }
            }
            black_box(&mc);
        }))
    })?;
    out.push(measure(
        Case {
            name: "matmul",
            size: format!("{d}x{d}x{d} f32"),
            kernel: "matmul",
            native,
            setup: Box::new(|s| {
                let bufs = vec![
                    upload(s, &to_bytes(&ma))?,
                    upload(s, &to_bytes(&mb))?,
                    s.malloc(4 * (d * d) as u64)?,
                ];
                launch("matmul", d, bufs)
            }),
            before: Box::new(|_, _| Ok(())),
            // fma versus mul+add: close, not equal.
            check: Box::new(|s, bufs| {
                Ok(close(
                    &from_bytes(&download(s, bufs[2], 4 * d * d)?),
                    &mc,
                    1e-3,
                ))
            }),
        },
        &mut sims,
        reps,
    )?);

    // Transpose through shared memory: a (8d)x(8d) matrix, 32x32 tiles, 32x8 threads.
    let t = 8 * d;
    let mt = data(t * t, 5);
    let mut tt = vec![0f32; t * t];
    let native = best(reps, || {
        Ok(timed(|| {
            let x = black_box(&mt);
            // Tiled as the kernel is (the naive loop would be cache-bound).
            for bi in (0..t).step_by(32) {
                for bj in (0..t).step_by(32) {
                    for i in bi..(bi + 32).min(t) {
                        for j in bj..(bj + 32).min(t) {
                            tt[j * t + i] = x[i * t + j];
                        }
                    }
                }
            }
            black_box(&tt);
        }))
    })?;
    out.push(measure(
        Case {
            name: "transpose",
            size: format!("{t}x{t} f32"),
            kernel: "transpose_shared",
            native,
            setup: Box::new(|s| {
                let bufs = vec![upload(s, &to_bytes(&mt))?, s.malloc(4 * (t * t) as u64)?];
                launch("transpose_shared", t, bufs)
            }),
            before: Box::new(|_, _| Ok(())),
            check: Box::new(|s, bufs| Ok(from_bytes(&download(s, bufs[1], 4 * t * t)?) == tt)),
        },
        &mut sims,
        reps,
    )?);

    // Histogram: one global atomicAdd per element into 256 bins, 1024 blocks of 256
    // threads striding over the input.
    let words: Vec<u32> = a
        .iter()
        .zip(&b)
        .map(|(x, y)| x.to_bits() ^ y.to_bits().rotate_left(7))
        .collect();
    let nbins = HISTOGRAM_BINS;
    let mut bins = vec![0u32; nbins as usize];
    let native = best(reps, || {
        bins.fill(0);
        Ok(timed(|| {
            for w in black_box(&words) {
                bins[(w % nbins) as usize] += 1;
            }
            black_box(&bins);
        }))
    })?;
    out.push(measure(
        Case {
            name: "histogram",
            size: format!("{n} u32, {nbins} bins"),
            kernel: "histogram_atomic",
            native,
            setup: Box::new(|s| {
                let bufs = vec![upload(s, &u32_bytes(&words))?, s.malloc(4 * nbins as u64)?];
                launch("histogram_atomic", n, bufs)
            }),
            before: Box::new(|s, bufs| s.memset_d32(bufs[1], 0, nbins as u64)),
            check: Box::new(|s, bufs| {
                Ok(download(s, bufs[1], 4 * nbins as usize)? == u32_bytes(&bins))
            }),
        },
        &mut sims,
        reps,
    )?);
    Ok(out)
}

/// A table of results: one line per benchmark, its time on each thread count, the
/// one-thread ratio to the loop and the scaling to each other count.
pub fn report(results: &[BenchResult]) -> String {
    let threads: Vec<usize> = results
        .first()
        .map(|r| r.sim.iter().map(|&(t, _)| t).collect())
        .unwrap_or_default();
    let mut s = format!("{:<11} {:>22} {:>10}", "benchmark", "size", "native");
    for t in &threads {
        s += &format!(" {:>10}", format!("sim {t}t"));
    }
    s += &format!(" {:>8}", "1t/nat");
    for t in threads.iter().skip(1) {
        s += &format!(" {:>9}", format!("x on {t}t"));
    }
    s += &format!(" {:>12} {:>10} {:>8}", "engine", "interp", "jit x");
    s += "\n";
    for r in results {
        s += &format!(
            "{:<11} {:>22} {:>8.1}ms",
            r.name,
            r.size,
            r.native.as_secs_f64() * 1e3
        );
        for &(_, d) in &r.sim {
            s += &format!(" {:>8.1}ms", d.as_secs_f64() * 1e3);
        }
        let first = r.sim.first().map_or(0, |&(t, _)| t);
        s += &format!(" {:>7.2}x", r.ratio(first).unwrap_or(f64::NAN));
        for &(t, _) in r.sim.iter().skip(1) {
            s += &format!(" {:>8.2}x", r.scaling(t).unwrap_or(f64::NAN));
        }
        s += &format!(" {:>12}", r.engine.name());
        match (r.interpreted, r.jit_speedup()) {
            (Some(i), Some(x)) => s += &format!(" {:>8.1}ms {:>7.2}x", i.as_secs_f64() * 1e3, x),
            _ => s += &format!(" {:>10} {:>8}", "-", "-"),
        }
        s += "\n";
    }
    s
}
