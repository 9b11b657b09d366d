//! `cargo bench -p cuda-guest --bench sim`: the simulator against plain Rust loops.
//! `SIM_BENCH_SMALL=1` runs 2^20 elements and 128^3 for a quick look.

fn main() {
    let mut sizes = cuda_guest::sim::bench::BenchSizes::default();
    if std::env::var_os("SIM_BENCH_SMALL").is_some() {
        sizes = cuda_guest::sim::bench::BenchSizes {
            elements: 1 << 20,
            matrix: 128,
            repeats: 2,
            ..sizes
        };
    }
    match cuda_guest::sim::bench::run(&sizes) {
        Ok(r) => print!("{}", cuda_guest::sim::bench::report(&r)),
        Err(e) => {
            eprintln!("bench failed: {e}");
            std::process::exit(1);
        }
    }
}
