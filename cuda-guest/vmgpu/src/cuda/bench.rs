//! `vmgpu cuda bench`: each figure against a baseline measured in the same run.

use std::process::ExitCode;
use std::sync::Arc;

use clap::Args;
use cuda_guest::bench::{self as native_bench, NativeBenchConfig, NativeBenchReport};
use cuda_guest::driver::{BackendKind, NativeBackend};
use cuda_guest::sim::bench::{self as sim_bench, BenchResult, BenchSizes};
use serde::Serialize;

use super::{accelerator, sim_config, BackendArgs, BackendInfo};
use crate::Out;

#[derive(Args)]
pub struct BenchArgs {
    #[command(flatten)]
    backend: BackendArgs,
    /// Small sizes (simulator: 2^16 elements and 64^3, one run each; native: 16 MiB
    /// copies, few rounds): a quick look, not a measurement
    #[arg(long)]
    quick: bool,
    /// On the native backend, run the simulator's set too
    #[arg(long)]
    with_sim: bool,
    /// Simulator: the host thread counts to run on, e.g. `1,2,4` [default: 1, 2, 4, ...
    /// up to every core; with --quick 1,2]
    #[arg(long, value_name = "N,N,...", value_delimiter = ',',
          value_parser = clap::value_parser!(u16).range(1..=256))]
    threads: Option<Vec<u16>>,
    /// Print JSON
    #[arg(long)]
    json: bool,
}

/// One figure with its baseline.
#[derive(Serialize)]
struct Figure {
    /// `sim` or `native`.
    set: &'static str,
    name: String,
    /// What is measured and what against.
    what: String,
    unit: &'static str,
    value: f64,
    baseline: f64,
    /// value / baseline.
    ratio: f64,
    /// e.g. `<= 3` (a ratio), `null` where the issues set none.
    goal: Option<String>,
    goal_met: Option<bool>,
}

#[derive(Serialize)]
struct SimRow {
    name: &'static str,
    size: String,
    native_ms: f64,
    /// One per thread count, in the order run.
    runs: Vec<SimRun>,
    warp_instructions: u64,
    /// The engine of the runs (`jit` or `interpreter`).
    engine: &'static str,
    /// When the JIT ran them: the interpreter's time on the first thread count.
    interpreted_ms: Option<f64>,
}

#[derive(Serialize)]
struct SimRun {
    threads: usize,
    ms: f64,
    /// ms / native_ms.
    ratio: f64,
    /// The first run's time over this one's.
    scaling: f64,
}

#[derive(Serialize)]
struct SimSet {
    elements: usize,
    matrix: usize,
    repeats: usize,
    threads: Vec<usize>,
    results: Vec<SimRow>,
}

#[derive(Serialize)]
struct NativeSet {
    device: String,
    driver_version: i32,
    library: String,
    resolution: String,
    mib: usize,
    rounds: usize,
    copies: usize,
    launch_rounds: usize,
    launches: usize,
    roundtrips: usize,
}

#[derive(Serialize)]
struct BenchReport {
    backend: BackendInfo,
    quick: bool,
    sim: Option<SimSet>,
    native: Option<NativeSet>,
    figures: Vec<Figure>,
    /// The simulator's table for the text output.
    #[serde(skip)]
    sim_table: Option<String>,
}

fn ms(d: std::time::Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn goal_le(ratio: f64, goal: f64) -> (Option<String>, Option<bool>) {
    (Some(format!("<= {goal}")), Some(ratio <= goal))
}

fn goal_ge(ratio: f64, goal: f64) -> (Option<String>, Option<bool>) {
    (Some(format!(">= {goal}")), Some(ratio >= goal))
}

fn sim_figures(rows: &[BenchResult], figures: &mut Vec<Figure>) {
    for r in rows {
        let first = r.sim.first().map(|&(t, _)| t);
        for &(threads, sim) in &r.sim {
            let ratio = sim.as_secs_f64() / r.native.as_secs_f64();
            // Issue 16's one-thread goals.
            let (goal, goal_met) = match sim_bench::goal_1t(r.name) {
                Some(g) if threads == 1 => goal_le(ratio, g),
                _ => (None, None),
            };
            figures.push(Figure {
                set: "sim",
                name: format!("{}_{threads}t", r.name),
                what: format!(
                    "{} {}: simulator on {threads} thread(s) / plain Rust loop",
                    r.name, r.size
                ),
                unit: "ms",
                value: ms(sim),
                baseline: ms(r.native),
                ratio,
                goal,
                goal_met,
            });
        }
        // The JIT against the interpreter, both measured in this run.
        if let (Some(&(threads, sim)), Some(interp)) = (r.sim.first(), r.interpreted) {
            figures.push(Figure {
                set: "sim",
                name: format!("{}_jit_{threads}t", r.name),
                what: format!(
                    "{} {}: JIT / interpreter, {threads} thread(s)",
                    r.name, r.size
                ),
                unit: "ms",
                value: ms(sim),
                baseline: ms(interp),
                ratio: sim.as_secs_f64() / interp.as_secs_f64(),
                goal: None,
                goal_met: None,
            });
        }
        // Issue 16's scaling goal: the speed-up on N threads at least 0.75 N (N <= 16).
        for &(threads, _) in r.sim.iter().skip(1) {
            let (Some(first), Some(speedup)) = (first, r.scaling(threads)) else {
                continue;
            };
            let ideal = threads as f64 / first as f64;
            let ratio = speedup / ideal;
            let (goal, goal_met) = if first == 1 && threads <= sim_bench::SCALING_GOAL_UP_TO {
                goal_ge(ratio, sim_bench::SCALING_GOAL)
            } else {
                (None, None)
            };
            figures.push(Figure {
                set: "sim",
                name: format!("{}_scaling_{threads}t", r.name),
                what: format!(
                    "{}: speed-up from {first} to {threads} threads / {ideal}",
                    r.name
                ),
                unit: "x",
                value: speedup,
                baseline: ideal,
                ratio,
                goal,
                goal_met,
            });
            // What the machine gives the plain loop, where measured: the reference.
            if let Some(native) = r.native_scaling(threads) {
                figures.push(Figure {
                    set: "sim",
                    name: format!("{}_native_scaling_{threads}t", r.name),
                    what: format!(
                        "{}: the plain loop's speed-up from {first} to {threads} threads / \
                         {ideal} (this machine's, for a memory-bound loop)",
                        r.name
                    ),
                    unit: "x",
                    value: native,
                    baseline: ideal,
                    ratio: native / ideal,
                    goal: None,
                    goal_met: None,
                });
            }
        }
    }
}

fn native_figures(r: &NativeBenchReport, figures: &mut Vec<Figure>) {
    let (d, h, l) = (&r.d2d, &r.host, &r.launch);
    let mut push = |name: &str,
                    what: String,
                    unit: &'static str,
                    value: f64,
                    baseline: f64,
                    goal: (Option<String>, Option<bool>)| {
        figures.push(Figure {
            set: "native",
            name: name.into(),
            what,
            unit,
            value,
            baseline,
            ratio: value / baseline,
            goal: goal.0,
            goal_met: goal.1,
        })
    };
    let g = native_bench::GOAL_D2D;
    push(
        "d2d_sync",
        format!("D2D {} MiB: memcpy_dtod / raw cuMemcpyDtoD", d.mib),
        "GB/s",
        d.sync_gbps,
        d.raw_gbps,
        goal_ge(d.ratio_sync(), g),
    );
    push(
        "d2d_async",
        format!(
            "D2D {} MiB: memcpy_dtod_async on a stream / raw cuMemcpyDtoD",
            d.mib
        ),
        "GB/s",
        d.async_gbps,
        d.raw_gbps,
        goal_ge(d.ratio_async(), g),
    );
    push(
        "d2d_async_vs_raw_async",
        format!(
            "D2D {} MiB: memcpy_dtod_async / raw cuMemcpyDtoDAsync",
            d.mib
        ),
        "GB/s",
        d.async_gbps,
        d.raw_async_gbps,
        (None, None),
    );
    let gr = native_bench::GOAL_REGISTERED;
    push(
        "h2d_registered",
        format!("H2D {} MiB: registered / pinned host memory", h.mib),
        "GB/s",
        h.h2d_registered_gbps,
        h.h2d_pinned_gbps,
        goal_ge(h.h2d_ratio_registered_vs_pinned(), gr),
    );
    push(
        "h2d_pageable",
        format!("H2D {} MiB: pageable / pinned host memory", h.mib),
        "GB/s",
        h.h2d_pageable_gbps,
        h.h2d_pinned_gbps,
        (None, None),
    );
    push(
        "d2h_registered",
        format!("D2H {} MiB: registered / pinned host memory", h.mib),
        "GB/s",
        h.d2h_registered_gbps,
        h.d2h_pinned_gbps,
        (None, None),
    );
    push(
        "d2h_pageable",
        format!("D2H {} MiB: pageable / pinned host memory", h.mib),
        "GB/s",
        h.d2h_pageable_gbps,
        h.d2h_pinned_gbps,
        (None, None),
    );
    let gl = native_bench::GOAL_LAUNCH;
    // The launch ratios are medians of per-round ratios, not ratios of the medians.
    let mut launch = |name: &str, what: &str, value: f64, baseline: f64, ratio: f64, goal| {
        figures.push(Figure {
            set: "native",
            name: name.into(),
            what: what.into(),
            unit: "us",
            value,
            baseline,
            ratio,
            goal: match goal {
                Some(true) => goal_le(ratio, gl).0,
                _ => None,
            },
            goal_met: match goal {
                Some(true) => Some(ratio <= gl),
                _ => None,
            },
        })
    };
    launch(
        "launch",
        "empty kernel: Backend::launch / raw cuLaunchKernel",
        l.trait_us,
        l.raw_us,
        l.ratio,
        Some(true),
    );
    launch(
        "launch_sync",
        "empty kernel launch+sync / raw cuLaunchKernel+cuStreamSynchronize",
        l.sync_trait_us,
        l.sync_raw_us,
        l.sync_ratio,
        Some(true),
    );
    launch(
        "launch_4_params",
        "4-parameter kernel: Backend::launch / raw cuLaunchKernel",
        l.params4_trait_us,
        l.params4_raw_us,
        l.params4_ratio,
        None,
    );
}

pub fn run(args: &BenchArgs, out: &mut Out) -> anyhow::Result<ExitCode> {
    let (acc, backend) = accelerator(&args.backend, sim_config(None, None))?;
    let native = acc.kind() == BackendKind::Native;
    drop(acc);
    let mut report = BenchReport {
        backend,
        quick: args.quick,
        sim: None,
        native: None,
        figures: Vec::new(),
        sim_table: None,
    };
    if native {
        let config = if args.quick {
            NativeBenchConfig::quick()
        } else {
            NativeBenchConfig::default()
        };
        let backend = Arc::new(NativeBackend::new()?);
        let r = native_bench::run_native(&backend, 0, &config)
            .map_err(|e| anyhow::Error::new(e).context("the native benchmark failed"))?;
        native_figures(&r, &mut report.figures);
        report.native = Some(NativeSet {
            device: r.device.clone(),
            driver_version: r.driver_version,
            library: r.library.clone(),
            resolution: r.resolution.clone(),
            mib: config.mib,
            rounds: config.rounds,
            copies: config.copies,
            launch_rounds: config.launch_rounds,
            launches: config.launches,
            roundtrips: config.roundtrips,
        });
    }
    if !native || args.with_sim {
        let mut sizes = if args.quick {
            BenchSizes {
                elements: 1 << 16,
                matrix: 64,
                repeats: 1,
                threads: vec![1, 2],
            }
        } else {
            BenchSizes::default()
        };
        if let Some(t) = &args.threads {
            sizes.threads = t.iter().map(|&n| usize::from(n)).collect();
        }
        let rows = sim_bench::run(&sizes)
            .map_err(|e| anyhow::Error::new(e).context("the simulator benchmark failed"))?;
        sim_figures(&rows, &mut report.figures);
        report.sim_table = Some(sim_bench::report(&rows));
        report.sim = Some(SimSet {
            elements: sizes.elements,
            matrix: sizes.matrix,
            repeats: sizes.repeats,
            threads: sizes.threads.clone(),
            results: rows
                .iter()
                .map(|r| SimRow {
                    name: r.name,
                    size: r.size.clone(),
                    native_ms: ms(r.native),
                    runs: r
                        .sim
                        .iter()
                        .map(|&(threads, d)| SimRun {
                            threads,
                            ms: ms(d),
                            ratio: r.ratio(threads).unwrap_or(f64::NAN),
                            scaling: r.scaling(threads).unwrap_or(f64::NAN),
                        })
                        .collect(),
                    warp_instructions: r.warp_instructions,
                    engine: r.engine.name(),
                    interpreted_ms: r.interpreted.map(ms),
                })
                .collect(),
        });
    }
    if args.json {
        crate::print_json(out, &report)?;
    } else {
        print_text(&report, out);
    }
    Ok(ExitCode::SUCCESS)
}

fn print_text(r: &BenchReport, out: &mut Out) {
    outln!(out, "{}", r.backend.line());
    if let Some(n) = &r.native {
        outln!(
            out,
            "native: {} (driver {}, {}, entry points by {}); copies of {} MiB",
            n.device,
            n.driver_version,
            n.library,
            n.resolution,
            n.mib
        );
    }
    if let Some(s) = &r.sim {
        outln!(
            out,
            "simulator: {} elements, {}^3 matmul, best of {} run(s), on {} thread(s)",
            s.elements,
            s.matrix,
            s.repeats,
            s.threads
                .iter()
                .map(usize::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    if let Some(t) = &r.sim_table {
        out.push_str(t);
    }
    if r.quick {
        outln!(
            out,
            "(--quick: small sizes, a quick look rather than a measurement)"
        );
    }
    outln!(
        out,
        "{:<26} {:>13} {:>13} {:>9}  {:<14} {}",
        "figure",
        "value",
        "baseline",
        "ratio",
        "goal",
        "what"
    );
    for f in &r.figures {
        let goal = match (&f.goal, f.goal_met) {
            (Some(g), Some(true)) => format!("{g} met"),
            (Some(g), _) => format!("{g} NOT met"),
            _ => "-".into(),
        };
        outln!(
            out,
            "{:<26} {:>8.3} {:<4} {:>8.3} {:<4} {:>8.3}x  {:<14} {}",
            format!("{}/{}", f.set, f.name),
            f.value,
            f.unit,
            f.baseline,
            f.unit,
            f.ratio,
            goal,
            f.what
        );
    }
}
