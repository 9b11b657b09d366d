//! Kernels of `tests/ptx/basic.cu` (clang-14 and NVRTC builds) against Rust references,
//! over sizes that leave partial blocks, on 1 and 2 host threads (shared-memory
//! transpose and global-atomic histogram included).

#![allow(clippy::needless_range_loop)]

use cuda_guest::sim::{DevicePtr, KernelArg, LaunchConfig, SimConfig, Simulator};
use std::path::PathBuf;

fn ptx(name: &str) -> String {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/ptx")
        .join(name);
    std::fs::read_to_string(p).unwrap()
}

fn sim(threads: usize) -> Simulator {
    Simulator::new(SimConfig {
        threads,
        instruction_budget: 0,
        ..SimConfig::default()
    })
}

fn upload_f32(s: &mut Simulator, v: &[f32]) -> DevicePtr {
    let p = s.malloc(4 * v.len() as u64).unwrap();
    let b: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
    s.memcpy_htod(p, &b).unwrap();
    p
}

fn download_f32(s: &mut Simulator, p: DevicePtr, n: usize) -> Vec<f32> {
    let mut b = vec![0u8; 4 * n];
    s.memcpy_dtoh(&mut b, p).unwrap();
    b.chunks(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .collect()
}

/// Deterministic pseudo-random floats in [-1, 1).
fn randf(n: usize, seed: u64) -> Vec<f32> {
    let mut x = seed.wrapping_mul(0x9E3779B97F4A7C15) | 1;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            ((x >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
        })
        .collect()
}

const VARIANTS: [&str; 2] = ["basic.clang.ptx", "basic.nvrtc.ptx"];

#[test]
fn vector_add_matches_rust() {
    for file in VARIANTS {
        for threads in [1, 2] {
            for n in [1usize, 31, 255, 1000, 4097] {
                let mut s = sim(threads);
                let m = s.load_module(file, &ptx(file)).unwrap();
                let a = randf(n, 1);
                let b = randf(n, 2);
                let (pa, pb) = (upload_f32(&mut s, &a), upload_f32(&mut s, &b));
                let pc = s.malloc(4 * n as u64).unwrap();
                let cfg = LaunchConfig {
                    grid: [(n as u32).div_ceil(128), 1, 1],
                    block: [128, 1, 1],
                    shared_bytes: 0,
                };
                s.launch(
                    &m,
                    "vector_add",
                    cfg,
                    &[
                        KernelArg::Ptr(pa),
                        KernelArg::Ptr(pb),
                        KernelArg::Ptr(pc),
                        KernelArg::I32(n as i32),
                    ],
                )
                .unwrap();
                let c = download_f32(&mut s, pc, n);
                for i in 0..n {
                    assert_eq!(
                        c[i].to_bits(),
                        (a[i] + b[i]).to_bits(),
                        "{file} n={n} i={i}"
                    );
                }
            }
        }
    }
}

#[test]
fn saxpy_matches_rust_fma() {
    for file in VARIANTS {
        for n in [100usize, 1023, 3000] {
            let mut s = sim(2);
            let m = s.load_module(file, &ptx(file)).unwrap();
            let x = randf(n, 3);
            let y = randf(n, 4);
            let (px, py) = (upload_f32(&mut s, &x), upload_f32(&mut s, &y));
            let cfg = LaunchConfig {
                grid: [(n as u32).div_ceil(256), 1, 1],
                block: [256, 1, 1],
                shared_bytes: 0,
            };
            s.launch(
                &m,
                "saxpy",
                cfg,
                &[
                    KernelArg::I32(n as i32),
                    KernelArg::F32(2.5),
                    KernelArg::Ptr(px),
                    KernelArg::Ptr(py),
                ],
            )
            .unwrap();
            let out = download_f32(&mut s, py, n);
            for i in 0..n {
                // Both compilers contract a*x+y into fma.rn.f32.
                assert_eq!(
                    out[i].to_bits(),
                    2.5f32.mul_add(x[i], y[i]).to_bits(),
                    "{file} i={i}"
                );
            }
        }
    }
}

#[test]
fn block_reduction_with_barriers() {
    for file in VARIANTS {
        for threads in [1, 2] {
            for (n, bs) in [(1000usize, 128u32), (4096, 256), (77, 64), (5000, 32)] {
                let mut s = sim(threads);
                let m = s.load_module(file, &ptx(file)).unwrap();
                // Small integers so that every summation order gives the same float.
                let v: Vec<f32> = (0..n).map(|i| ((i * 7) % 13) as f32).collect();
                let pin = upload_f32(&mut s, &v);
                let blocks = (n as u32).div_ceil(bs * 2);
                let pout = s.malloc(4 * blocks as u64).unwrap();
                let cfg = LaunchConfig {
                    grid: [blocks, 1, 1],
                    block: [bs, 1, 1],
                    shared_bytes: 0,
                };
                s.launch(
                    &m,
                    "reduce_sum",
                    cfg,
                    &[
                        KernelArg::Ptr(pin),
                        KernelArg::Ptr(pout),
                        KernelArg::I32(n as i32),
                    ],
                )
                .unwrap();
                let out = download_f32(&mut s, pout, blocks as usize);
                for b in 0..blocks as usize {
                    let lo = b * 2 * bs as usize;
                    let hi = (lo + 2 * bs as usize).min(n);
                    let want: f32 = v[lo..hi].iter().sum();
                    assert_eq!(out[b], want, "{file} n={n} bs={bs} block {b}");
                }
            }
        }
    }
}

fn matmul_ref(a: &[f32], b: &[f32], m: usize, n: usize, k: usize) -> Vec<f32> {
    let mut c = vec![0f32; m * n];
    for i in 0..m {
        for j in 0..n {
            let mut acc = 0f32;
            for t in 0..k {
                acc = a[i * k + t].mul_add(b[t * n + j], acc);
            }
            c[i * n + j] = acc;
        }
    }
    c
}

#[test]
fn tiled_matmul_matches_rust() {
    for file in VARIANTS {
        for (mm, nn, kk) in [(16usize, 16usize, 16usize), (33, 17, 45), (64, 40, 7)] {
            let mut s = sim(2);
            let m = s.load_module(file, &ptx(file)).unwrap();
            let a = randf(mm * kk, 5);
            let b = randf(kk * nn, 6);
            let (pa, pb) = (upload_f32(&mut s, &a), upload_f32(&mut s, &b));
            let pc = s.malloc(4 * (mm * nn) as u64).unwrap();
            let cfg = LaunchConfig {
                grid: [(nn as u32).div_ceil(16), (mm as u32).div_ceil(16), 1],
                block: [16, 16, 1],
                shared_bytes: 0,
            };
            s.launch(
                &m,
                "matmul",
                cfg,
                &[
                    KernelArg::Ptr(pa),
                    KernelArg::Ptr(pb),
                    KernelArg::Ptr(pc),
                    KernelArg::I32(mm as i32),
                    KernelArg::I32(nn as i32),
                    KernelArg::I32(kk as i32),
                ],
            )
            .unwrap();
            let got = download_f32(&mut s, pc, mm * nn);
            // The kernel accumulates in k order with fma (zero-padded tiles add +0.0 terms,
            // which do not change an fma chain's value), exactly like the reference.
            let want = matmul_ref(&a, &b, mm, nn, kk);
            for i in 0..mm * nn {
                assert_eq!(
                    got[i].to_bits(),
                    want[i].to_bits(),
                    "{file} {mm}x{nn}x{kk} at {i}: {} vs {}",
                    got[i],
                    want[i]
                );
            }
        }
    }
}

#[test]
fn shared_memory_transpose_matches_rust() {
    for file in VARIANTS {
        for threads in [1, 2] {
            // Partial tiles at both edges, and a single-row matrix.
            for (rows, cols) in [(70usize, 45usize), (32, 32), (1, 100)] {
                let mut s = sim(threads);
                let m = s.load_module(file, &ptx(file)).unwrap();
                let a = randf(rows * cols, 5);
                let pa = upload_f32(&mut s, &a);
                let pt = s.malloc(4 * (rows * cols) as u64).unwrap();
                let cfg = LaunchConfig {
                    grid: [(cols as u32).div_ceil(32), (rows as u32).div_ceil(32), 1],
                    block: [32, 8, 1],
                    shared_bytes: 0,
                };
                s.launch(
                    &m,
                    "transpose_shared",
                    cfg,
                    &[
                        KernelArg::Ptr(pa),
                        KernelArg::Ptr(pt),
                        KernelArg::I32(rows as i32),
                        KernelArg::I32(cols as i32),
                    ],
                )
                .unwrap();
                let t = download_f32(&mut s, pt, rows * cols);
                for r in 0..rows {
                    for c in 0..cols {
                        assert_eq!(
                            t[c * rows + r].to_bits(),
                            a[r * cols + c].to_bits(),
                            "{file} {threads}t {rows}x{cols} ({r},{c})"
                        );
                    }
                }
            }
        }
    }
}

#[test]
fn atomic_histogram_matches_rust() {
    for file in VARIANTS {
        for threads in [1, 2] {
            for (n, nbins, grid) in [(10_000usize, 256u32, 8u32), (999, 7, 3), (5, 64, 1)] {
                let mut s = sim(threads);
                let m = s.load_module(file, &ptx(file)).unwrap();
                let v: Vec<u32> = randf(n, 6)
                    .iter()
                    .map(|x| (x.to_bits() >> 3) ^ 0x5bd1)
                    .collect();
                let pv = s.malloc(4 * n as u64).unwrap();
                let b: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
                s.memcpy_htod(pv, &b).unwrap();
                let pb = s.malloc(4 * nbins as u64).unwrap();
                s.memset_d32(pb, 0, nbins as u64).unwrap();
                let cfg = LaunchConfig {
                    grid: [grid, 1, 1],
                    block: [128, 1, 1],
                    shared_bytes: 0,
                };
                s.launch(
                    &m,
                    "histogram_atomic",
                    cfg,
                    &[
                        KernelArg::Ptr(pv),
                        KernelArg::Ptr(pb),
                        KernelArg::I32(n as i32),
                        KernelArg::U32(nbins),
                    ],
                )
                .unwrap();
                let mut want = vec![0u32; nbins as usize];
                for x in &v {
                    want[(x % nbins) as usize] += 1;
                }
                let mut got = vec![0u8; 4 * nbins as usize];
                s.memcpy_dtoh(&mut got, pb).unwrap();
                let got: Vec<u32> = got
                    .chunks(4)
                    .map(|c| u32::from_le_bytes(c.try_into().unwrap()))
                    .collect();
                assert_eq!(got, want, "{file} {threads}t n={n} bins={nbins}");
            }
        }
    }
}
