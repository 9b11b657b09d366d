//! The engines' inner loops under criterion: one launch of each benchmark kernel
//! (`vmgpu cuda bench`'s set, at small sizes so that a sample is milliseconds) on the
//! interpreter and on the JIT where it takes the kernel, on one host thread, and the
//! combined reductions of the histogram on two. `cargo bench -p vmgpu-cuda-sim --bench engine [-- FILTER]`;
//! elements per second are the kernel's threads (or matrix elements) per second.
//!
//! `vmgpu cuda bench` is the figure the goals are stated in (ratios to plain loops in
//! the same run); this is for watching one engine's loop change.

use criterion::{BenchmarkId, Criterion, Throughput};
use vmgpu_cuda_sim::bench::{self, BENCH_PTX};
use vmgpu_cuda_sim::{DevicePtr, Engine, KernelArg, LaunchConfig, SimConfig, Simulator};

/// Elements of the one-dimensional kernels, and the matrices' side.
const N: u32 = 1 << 16;
const SIDE: u32 = 64;

/// A simulator with `threads` host threads and the given engine, no limits.
fn sim(engine: Engine, threads: usize) -> Simulator {
    Simulator::new(SimConfig {
        threads,
        engine,
        instruction_budget: 0,
        time_limit: None,
        ..SimConfig::default()
    })
}

/// A device buffer of `words` words holding small values (an index into 256 bins for
/// the histogram, a float in [0, 1) as bits otherwise).
fn buffer(s: &mut Simulator, words: u32, bins: bool) -> DevicePtr {
    let mut x = 0x9e37_79b9u32;
    let bytes: Vec<u8> = (0..words)
        .flat_map(|_| {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            let v = if bins {
                x % 256
            } else {
                ((x >> 8) as f32 / (1u32 << 24) as f32).to_bits()
            };
            v.to_le_bytes()
        })
        .collect();
    let p = s.malloc(bytes.len() as u64).expect("malloc");
    s.memcpy_htod(p, &bytes).expect("upload");
    p
}

/// Kernel `name`'s launch configuration and arguments on fresh buffers
/// ([`bench::launch_of`]), and its elements.
fn setup(s: &mut Simulator, name: &str) -> (LaunchConfig, Vec<KernelArg>, u64) {
    let (n, sizes): (u32, &[u32]) = match name {
        "vector_add" => (N, &[N, N, N]),
        "saxpy" => (N, &[N, N]),
        "reduce_sum" => (N, &[N, N / 512]),
        "matmul" => (SIDE, &[SIDE * SIDE; 3]),
        "transpose_shared" => (SIDE, &[SIDE * SIDE; 2]),
        _ => (N, &[N, bench::HISTOGRAM_BINS]),
    };
    let histogram = name == "histogram_atomic";
    let bufs: Vec<DevicePtr> = sizes
        .iter()
        .enumerate()
        .map(|(k, &w)| buffer(s, w, histogram && k == 0))
        .collect();
    let (cfg, args) = bench::launch_of(name, n as usize, &bufs).expect("a benchmark kernel");
    (cfg, args, sizes[0] as u64)
}

fn kernels(c: &mut Criterion) {
    let runs: &[(&str, usize)] = &[
        ("vector_add", 1),
        ("saxpy", 1),
        ("reduce_sum", 1),
        ("matmul", 1),
        ("transpose_shared", 1),
        ("histogram_atomic", 1),
        ("histogram_atomic", 2),
    ];
    for &(name, threads) in runs {
        let mut g = c.benchmark_group(format!("{name}/{threads}t"));
        for engine in [Engine::Interpreter, Engine::Jit] {
            let mut s = sim(engine, threads);
            let m = s.load_module("bench.ptx", BENCH_PTX).expect("load");
            let (cfg, args, elements) = setup(&mut s, name);
            // A kernel the JIT does not take (barriers) runs interpreted: measured once.
            let ran = s.launch(&m, name, cfg, &args).expect("launch").engine;
            if ran != engine {
                continue;
            }
            g.throughput(Throughput::Elements(elements));
            g.bench_function(BenchmarkId::from_parameter(format!("{engine:?}")), |b| {
                b.iter(|| s.launch(&m, name, cfg, &args).expect("launch"))
            });
        }
        g.finish();
    }
}

fn main() {
    // (criterion_group!/criterion_main!'s expansion, without its undocumented public
    // function.)
    let mut c = Criterion::default().configure_from_args();
    kernels(&mut c);
    c.final_summary();
}
