//! Probe: host memory of parsing and loading a PTX module (live heap bytes, counted by
//! the allocator).
use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};

struct Counting;
static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

// SAFETY: forwards to the system allocator unchanged; only counts.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        let n = LIVE.fetch_add(l.size(), Relaxed) + l.size();
        PEAK.fetch_max(n, Relaxed);
        // SAFETY: the caller's contract is System's.
        unsafe { System.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        LIVE.fetch_sub(l.size(), Relaxed);
        // SAFETY: as above.
        unsafe { System.dealloc(p, l) }
    }
}

#[global_allocator]
static A: Counting = Counting;

fn mib(n: usize) -> f64 {
    n as f64 / (1 << 20) as f64
}

fn main() {
    let path = std::env::args().nth(1).expect("a PTX file");
    let text = std::fs::read_to_string(&path).expect("readable");
    let base = LIVE.load(Relaxed);
    PEAK.store(base, Relaxed);
    let ast = cuda_guest::ptx::parse("x.ptx", &text).expect("parses");
    let ast_bytes = LIVE.load(Relaxed) - base;
    drop(ast);
    PEAK.store(LIVE.load(Relaxed), Relaxed);
    let mut sim = cuda_guest::sim::Simulator::new(Default::default());
    let before = LIVE.load(Relaxed);
    let m = sim.load_module("x.ptx", &text).expect("loads");
    println!(
        "text {:.2} MiB; AST {:.1} MiB ({:.1}x); load peak {:.1} MiB ({:.1}x); held {:.1} MiB ({:.1}x), host_bytes() {:.1} MiB",
        mib(text.len()),
        mib(ast_bytes),
        ast_bytes as f64 / text.len() as f64,
        mib(PEAK.load(Relaxed) - before),
        (PEAK.load(Relaxed) - before) as f64 / text.len() as f64,
        mib(LIVE.load(Relaxed) - before),
        (LIVE.load(Relaxed) - before) as f64 / text.len() as f64,
        mib(m.host_bytes() as usize)
    );
}
