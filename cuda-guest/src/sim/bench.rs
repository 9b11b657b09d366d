//! Benchmarks against plain Rust loops (filled in below).
