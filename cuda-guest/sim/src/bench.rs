//! Benchmarks of the simulator against the same algorithms written as plain Rust loops,
//! measured in the same run: vector_add and saxpy over 2^24 f32, a shared-memory block
//! reduction over 2^24 f32, and a 16x16-tiled matmul 512x512x512; each on 1 and 2
//! host threads. The kernels are NVRTC 12.9 builds of `tests/ptx/basic.cu`
//! (`bench.ptx`). This is what `vmgpu cuda bench` reports; nothing here asserts a time.

use super::{KernelArg, LaunchConfig, SimConfig, SimError, Simulator};
use std::hint::black_box;
use std::time::{Duration, Instant};

/// The PTX of the benchmark kernels.
pub const BENCH_PTX: &str = include_str!("bench.ptx");

/// Benchmark sizes.
#[derive(Debug, Clone, Copy)]
pub struct BenchSizes {
    /// Elements of vector_add, saxpy and the reduction (2^24 by default).
    pub elements: usize,
    /// Matrix side of the matmul (512 by default).
    pub matrix: usize,
    /// Runs of each measurement; the fastest counts.
    pub repeats: usize,
}

impl Default for BenchSizes {
    fn default() -> Self {
        BenchSizes {
            elements: 1 << 24,
            matrix: 512,
            repeats: 3,
        }
    }
}

/// One benchmark's result.
#[derive(Debug, Clone)]
pub struct BenchResult {
    /// Benchmark name (`vector_add`, `saxpy`, `reduce`, `matmul`).
    pub name: &'static str,
    /// Problem size in words.
    pub size: String,
    /// The plain Rust loop (one thread).
    pub native: Duration,
    /// The simulator on 1 thread.
    pub sim_1t: Duration,
    /// The simulator on 2 threads.
    pub sim_2t: Duration,
    /// Warp instructions per launch.
    pub warp_instructions: u64,
}

impl BenchResult {
    /// Simulator time on one thread over the native time.
    pub fn ratio_1t(&self) -> f64 {
        self.sim_1t.as_secs_f64() / self.native.as_secs_f64()
    }
    /// Simulator time on two threads over the native time.
    pub fn ratio_2t(&self) -> f64 {
        self.sim_2t.as_secs_f64() / self.native.as_secs_f64()
    }
    /// Speed-up from 1 to 2 threads.
    pub fn scaling(&self) -> f64 {
        self.sim_1t.as_secs_f64() / self.sim_2t.as_secs_f64()
    }
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

/// Runs the benchmark set; also checks each simulated result against the native one
/// (an error if they differ, so a fast wrong simulator cannot report a ratio).
pub fn run(sizes: BenchSizes) -> Result<Vec<BenchResult>, SimError> {
    let n = sizes.elements;
    let mut out = vec![];
    let a = data(n, 1);
    let b = data(n, 2);
    let mismatch = |what: &str| SimError::InvalidLaunch {
        kernel: what.into(),
        message: "simulated result differs from the native loop".into(),
    };

    let mut sims: Vec<Simulator> = [1usize, 2]
        .iter()
        .map(|&t| {
            Simulator::new(SimConfig {
                threads: t,
                instruction_budget: 0,
                time_limit: None,
                ..SimConfig::default()
            })
        })
        .collect();

    // vector_add
    {
        let mut c = vec![0f32; n];
        let native = best(sizes.repeats, || {
            Ok(timed(|| {
                let (a, b) = (black_box(&a), black_box(&b));
                for i in 0..n {
                    c[i] = a[i] + b[i];
                }
                black_box(&c);
            }))
        })?;
        let mut times = vec![];
        let mut wi = 0;
        for s in sims.iter_mut() {
            let m = s.load_module("bench.ptx", BENCH_PTX)?;
            let (pa, pb, pc) = (
                s.malloc(4 * n as u64)?,
                s.malloc(4 * n as u64)?,
                s.malloc(4 * n as u64)?,
            );
            s.memcpy_htod(pa, &to_bytes(&a))?;
            s.memcpy_htod(pb, &to_bytes(&b))?;
            let cfg = LaunchConfig {
                grid: [(n as u32).div_ceil(256), 1, 1],
                block: [256, 1, 1],
                shared_bytes: 0,
            };
            let args = [
                KernelArg::Ptr(pa),
                KernelArg::Ptr(pb),
                KernelArg::Ptr(pc),
                KernelArg::I32(n as i32),
            ];
            times.push(best(sizes.repeats, || {
                let r = s.launch(&m, "vector_add", cfg, &args)?;
                wi = r.warp_instructions;
                Ok(r.elapsed)
            })?);
            let mut got = vec![0u8; 4 * n];
            s.memcpy_dtoh(&mut got, pc)?;
            if from_bytes(&got) != c {
                return Err(mismatch("vector_add"));
            }
            for p in [pa, pb, pc] {
                s.free(p)?;
            }
        }
        out.push(BenchResult {
            name: "vector_add",
            size: format!("{n} f32"),
            native,
            sim_1t: times[0],
            sim_2t: times[1],
            warp_instructions: wi,
        });
    }

    // saxpy (y = a*x + y; the simulated kernel's fma.rn.f32 is compared with f32::mul_add)
    {
        let k = 1.5f32;
        let mut y = b.clone();
        let native = best(sizes.repeats, || {
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
        let mut times = vec![];
        let mut wi = 0;
        for s in sims.iter_mut() {
            let m = s.load_module("bench.ptx", BENCH_PTX)?;
            let (px, py) = (s.malloc(4 * n as u64)?, s.malloc(4 * n as u64)?);
            s.memcpy_htod(px, &to_bytes(&a))?;
            let cfg = LaunchConfig {
                grid: [(n as u32).div_ceil(256), 1, 1],
                block: [256, 1, 1],
                shared_bytes: 0,
            };
            let args = [
                KernelArg::I32(n as i32),
                KernelArg::F32(k),
                KernelArg::Ptr(px),
                KernelArg::Ptr(py),
            ];
            times.push(best(sizes.repeats, || {
                s.memcpy_htod(py, &to_bytes(&b))?;
                let r = s.launch(&m, "saxpy", cfg, &args)?;
                wi = r.warp_instructions;
                Ok(r.elapsed)
            })?);
            let mut got = vec![0u8; 4 * n];
            s.memcpy_dtoh(&mut got, py)?;
            if from_bytes(&got) != want {
                return Err(mismatch("saxpy"));
            }
            s.free(px)?;
            s.free(py)?;
        }
        out.push(BenchResult {
            name: "saxpy",
            size: format!("{n} f32"),
            native,
            sim_1t: times[0],
            sim_2t: times[1],
            warp_instructions: wi,
        });
    }

    // Block reduction: each block of 256 threads sums 512 elements.
    {
        let chunk = 512;
        let blocks = n.div_ceil(chunk);
        let mut sums = vec![0f32; blocks];
        let native = best(sizes.repeats, || {
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
        let mut times = vec![];
        let mut wi = 0;
        for s in sims.iter_mut() {
            let m = s.load_module("bench.ptx", BENCH_PTX)?;
            let (pin, pout) = (s.malloc(4 * n as u64)?, s.malloc(4 * blocks as u64)?);
            s.memcpy_htod(pin, &to_bytes(&a))?;
            let cfg = LaunchConfig {
                grid: [blocks as u32, 1, 1],
                block: [256, 1, 1],
                shared_bytes: 0,
            };
            let args = [
                KernelArg::Ptr(pin),
                KernelArg::Ptr(pout),
                KernelArg::I32(n as i32),
            ];
            times.push(best(sizes.repeats, || {
                let r = s.launch(&m, "reduce_sum", cfg, &args)?;
                wi = r.warp_instructions;
                Ok(r.elapsed)
            })?);
            // A tree sum differs from the sequential one by rounding: check closeness.
            let mut got = vec![0u8; 4 * blocks];
            s.memcpy_dtoh(&mut got, pout)?;
            let got = from_bytes(&got);
            if got.iter().zip(&sums).any(|(g, w)| (g - w).abs() > 1e-3) {
                return Err(mismatch("reduce_sum"));
            }
            s.free(pin)?;
            s.free(pout)?;
        }
        out.push(BenchResult {
            name: "reduce",
            size: format!("{n} f32"),
            native,
            sim_1t: times[0],
            sim_2t: times[1],
            warp_instructions: wi,
        });
    }

    // Tiled matmul.
    {
        let d = sizes.matrix;
        let ma = data(d * d, 3);
        let mb = data(d * d, 4);
        let mut mc = vec![0f32; d * d];
        let native = best(sizes.repeats, || {
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
        let mut times = vec![];
        let mut wi = 0;
        for s in sims.iter_mut() {
            let m = s.load_module("bench.ptx", BENCH_PTX)?;
            let bytes = 4 * (d * d) as u64;
            let (pa, pb, pc) = (s.malloc(bytes)?, s.malloc(bytes)?, s.malloc(bytes)?);
            s.memcpy_htod(pa, &to_bytes(&ma))?;
            s.memcpy_htod(pb, &to_bytes(&mb))?;
            let g = (d as u32).div_ceil(16);
            let cfg = LaunchConfig {
                grid: [g, g, 1],
                block: [16, 16, 1],
                shared_bytes: 0,
            };
            let di = d as i32;
            let args = [
                KernelArg::Ptr(pa),
                KernelArg::Ptr(pb),
                KernelArg::Ptr(pc),
                KernelArg::I32(di),
                KernelArg::I32(di),
                KernelArg::I32(di),
            ];
            times.push(best(sizes.repeats, || {
                let r = s.launch(&m, "matmul", cfg, &args)?;
                wi = r.warp_instructions;
                Ok(r.elapsed)
            })?);
            let mut got = vec![0u8; bytes as usize];
            s.memcpy_dtoh(&mut got, pc)?;
            // fma versus mul+add: close, not equal.
            if from_bytes(&got)
                .iter()
                .zip(&mc)
                .any(|(g, w)| (g - w).abs() > 1e-3)
            {
                return Err(mismatch("matmul"));
            }
            for p in [pa, pb, pc] {
                s.free(p)?;
            }
        }
        out.push(BenchResult {
            name: "matmul",
            size: format!("{d}x{d}x{d} f32"),
            native,
            sim_1t: times[0],
            sim_2t: times[1],
            warp_instructions: wi,
        });
    }
    Ok(out)
}

/// A table of results, one line per benchmark.
pub fn report(results: &[BenchResult]) -> String {
    let mut s = format!(
        "{:<11} {:>18} {:>11} {:>11} {:>11} {:>8} {:>8} {:>8}\n",
        "benchmark", "size", "native", "sim 1t", "sim 2t", "1t/nat", "2t/nat", "scaling"
    );
    for r in results {
        s += &format!(
            "{:<11} {:>18} {:>9.1}ms {:>9.1}ms {:>9.1}ms {:>7.2}x {:>7.2}x {:>7.2}x\n",
            r.name,
            r.size,
            r.native.as_secs_f64() * 1e3,
            r.sim_1t.as_secs_f64() * 1e3,
            r.sim_2t.as_secs_f64() * 1e3,
            r.ratio_1t(),
            r.ratio_2t(),
            r.scaling()
        );
    }
    s
}
