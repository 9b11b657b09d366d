//! A profiling driver: one benchmark kernel launched repeatedly on one thread, for
//! `perf record`. `cargo bench -p cuda-guest --bench sim_profile -- KERNEL [N] [REPEATS] [THREADS]`
//! with KERNEL one of vector_add, saxpy, reduce_sum, matmul.

use cuda_guest::sim::{bench::BENCH_PTX, KernelArg, LaunchConfig, SimConfig, Simulator};

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
    let (cfg, kargs) = match kernel.as_str() {
        "matmul" => {
            let d = (n as f64).sqrt() as u32;
            let g = d.div_ceil(16);
            (
                LaunchConfig {
                    grid: [g, g, 1],
                    block: [16, 16, 1],
                    shared_bytes: 0,
                },
                vec![
                    KernelArg::Ptr(a),
                    KernelArg::Ptr(b),
                    KernelArg::Ptr(c),
                    KernelArg::U32(d),
                    KernelArg::U32(d),
                    KernelArg::U32(d),
                ],
            )
        }
        "saxpy" => (
            LaunchConfig {
                grid: [n.div_ceil(256), 1, 1],
                block: [256, 1, 1],
                shared_bytes: 0,
            },
            vec![
                KernelArg::U32(n),
                KernelArg::F32(2.0),
                KernelArg::Ptr(a),
                KernelArg::Ptr(b),
            ],
        ),
        "reduce_sum" => (
            LaunchConfig {
                grid: [n.div_ceil(512), 1, 1],
                block: [256, 1, 1],
                shared_bytes: 0,
            },
            vec![KernelArg::Ptr(a), KernelArg::Ptr(b), KernelArg::U32(n)],
        ),
        _ => (
            LaunchConfig {
                grid: [n.div_ceil(256), 1, 1],
                block: [256, 1, 1],
                shared_bytes: 0,
            },
            vec![
                KernelArg::Ptr(a),
                KernelArg::Ptr(b),
                KernelArg::Ptr(c),
                KernelArg::U32(n),
            ],
        ),
    };
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
