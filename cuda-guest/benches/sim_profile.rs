//! A profiling driver: one benchmark kernel launched repeatedly on one thread, for
//! `perf record`. `cargo bench -p cuda-guest --bench sim_profile -- KERNEL [N] [REPEATS] [THREADS]`
//! with KERNEL one of vector_add, saxpy, reduce_sum, matmul, transpose_shared,
//! histogram_atomic (`bench::launch_of`); or `memory [N] [REPEATS]`
//! for device memory operations on N-word buffers (dtod copies, memsets, host copies).

use cuda_guest::sim::bench::{self, BENCH_PTX};
use cuda_guest::sim::{DevicePtr, SimConfig, Simulator};

fn main() {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with("--"))
        .collect();
    let kernel = args
        .first()
        .map(String::as_str)
        .unwrap_or("vector_add")
        .to_string();
    let n: u32 = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(1 << 20);
    let reps: u32 = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(20);
    let threads: usize = args.get(3).and_then(|s| s.parse().ok()).unwrap_or(1);
    let mut s = Simulator::new(SimConfig {
        threads,
        instruction_budget: 0,
        time_limit: None,
        ..SimConfig::default()
    });
    let m = s.load_module("bench.ptx", BENCH_PTX).expect("load");
    let bytes = 4 * n as u64;
    let (a, b, c) = (
        s.malloc(bytes).unwrap(),
        s.malloc(bytes).unwrap(),
        s.malloc(bytes).unwrap(),
    );
    // Realistic operands (zeros would take every fast path): values in [-0.5, 0.5).
    let mut x = 0x9e37_79b9u32;
    let host: Vec<u8> = (0..n)
        .flat_map(|_| {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            ((x >> 8) as f32 / (1u32 << 24) as f32 - 0.5).to_le_bytes()
        })
        .collect();
    s.memcpy_htod(a, &host).unwrap();
    s.memcpy_htod(b, &host).unwrap();
    if kernel == "memory" {
        memory_ops(&mut s, a, b, bytes, reps);
        return;
    }
    // The matrices' side for the two-dimensional kernels: n words hold a matrix.
    let size = match kernel.as_str() {
        "matmul" | "transpose_shared" => (n as f64).sqrt() as usize,
        _ => n as usize,
    };
    let (cfg, kargs) = bench::launch_of(&kernel, size, &[a, b, c])
        .unwrap_or_else(|| panic!("{kernel}: not a benchmark kernel"));
    let mut best = f64::MAX;
    let mut wi = 0;
    for _ in 0..reps {
        let r = s.launch(&m, &kernel, cfg, &kargs).expect("launch");
        best = best.min(r.elapsed.as_secs_f64());
        wi = r.warp_instructions;
    }
    println!(
        "{kernel} n={n} threads={threads}: best {:.2} ms, {wi} warp instructions, {:.1} ns per warp instruction",
        best * 1e3,
        best * 1e9 / wi as f64
    );
}

/// Times device memory operations on two `bytes`-long buffers (best of `reps`).
fn memory_ops(s: &mut Simulator, a: DevicePtr, b: DevicePtr, bytes: u64, reps: u32) {
    let mut host = vec![0u8; bytes as usize];
    let time = |name: &str, f: &mut dyn FnMut()| {
        let mut best = f64::MAX;
        for _ in 0..reps.max(1) {
            let t = std::time::Instant::now();
            f();
            best = best.min(t.elapsed().as_secs_f64());
        }
        println!(
            "{name:<16} {bytes} bytes: {:.2} ms, {:.2} GB/s",
            best * 1e3,
            bytes as f64 / best / 1e9
        );
    };
    time("htod", &mut || s.memcpy_htod(a, &host).unwrap());
    time("dtoh", &mut || s.memcpy_dtoh(&mut host, a).unwrap());
    time("dtod", &mut || s.memcpy_dtod(b, a, bytes).unwrap());
    time("dtod unaligned", &mut || {
        s.memcpy_dtod(b.offset(1), a.offset(2), bytes - 2).unwrap()
    });
    time("memset_d8", &mut || s.memset_d8(a, 7, bytes).unwrap());
    time("memset_d32", &mut || s.memset_d32(a, 7, bytes / 4).unwrap());
    std::hint::black_box(&host);
}
