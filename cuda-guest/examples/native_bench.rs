//! Benchmark of the native backend against plain driver calls made from the raw
//! function table in the same run ([`cuda_guest::bench`]; `vmgpu cuda bench --backend
//! native` reports the same figures).
//!
//! ```text
//! cargo run --release -p cuda-guest --example native_bench -- [--json] [--mib N]
//!     [--rounds N] [--copies N] [--launches N] [--launch-rounds N] [--roundtrips N]
//! ```
//! Goals: D2D >= 97% of raw, launch <= 1.05x raw, H2D from registered memory >= 95% of
//! pinned.

use std::process::ExitCode;
use std::sync::Arc;

use cuda_guest::bench::{self, NativeBenchConfig, NativeBenchReport};
use cuda_guest::driver::NativeBackend;

fn parse_args() -> Result<(bool, NativeBenchConfig), String> {
    let mut json = false;
    let mut c = NativeBenchConfig::default();
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        let mut num = |name: &str| -> Result<usize, String> {
            it.next()
                .and_then(|v| v.parse().ok())
                .filter(|&v: &usize| v > 0)
                .ok_or(format!("{name} needs a positive number"))
        };
        match arg.as_str() {
            "--json" => json = true,
            "--mib" => c.mib = num("--mib")?,
            "--rounds" => c.rounds = num("--rounds")?,
            "--copies" => c.copies = num("--copies")?,
            "--launches" => c.launches = num("--launches")?,
            "--launch-rounds" => c.launch_rounds = num("--launch-rounds")?,
            "--roundtrips" => c.roundtrips = num("--roundtrips")?,
            "-h" | "--help" => {
                return Err(
                    "usage: native_bench [--json] [--mib N] [--rounds N] [--copies N] \
                            [--launches N] [--launch-rounds N] [--roundtrips N]"
                        .into(),
                )
            }
            other => return Err(format!("unknown argument {other}")),
        }
    }
    Ok((json, c))
}

/// The figures as a flat JSON object (the keys this example always printed).
fn json(r: &NativeBenchReport) -> String {
    let (d, h, l) = (&r.d2d, &r.host, &r.launch);
    let num = |v: f64| {
        if v.is_finite() {
            format!("{v:.4}")
        } else {
            "null".into()
        }
    };
    let text = |v: &str| format!("\"{}\"", v.replace('\\', "\\\\").replace('"', "\\\""));
    let fields: Vec<(&str, String)> = vec![
        ("backend", text("native")),
        ("device", text(&r.device)),
        ("driver_version", r.driver_version.to_string()),
        ("resolution", text(&r.resolution)),
        ("d2d_mib", d.mib.to_string()),
        ("d2d_raw_gbps", num(d.raw_gbps)),
        ("d2d_trait_sync_gbps", num(d.sync_gbps)),
        ("d2d_raw_async_gbps", num(d.raw_async_gbps)),
        ("d2d_trait_async_gbps", num(d.async_gbps)),
        ("d2d_ratio_sync_vs_raw", num(d.ratio_sync())),
        ("d2d_ratio_async_vs_raw", num(d.ratio_async())),
        (
            "d2d_ratio_async_vs_raw_async",
            num(d.ratio_async_vs_raw_async()),
        ),
        ("goal_d2d_ge_97pct", d.goal_met().to_string()),
        ("h2d_pageable_gbps", num(h.h2d_pageable_gbps)),
        ("h2d_pinned_gbps", num(h.h2d_pinned_gbps)),
        ("h2d_registered_gbps", num(h.h2d_registered_gbps)),
        ("d2h_pageable_gbps", num(h.d2h_pageable_gbps)),
        ("d2h_pinned_gbps", num(h.d2h_pinned_gbps)),
        ("d2h_registered_gbps", num(h.d2h_registered_gbps)),
        (
            "h2d_ratio_registered_vs_pinned",
            num(h.h2d_ratio_registered_vs_pinned()),
        ),
        (
            "d2h_ratio_registered_vs_pinned",
            num(h.d2h_ratio_registered_vs_pinned()),
        ),
        (
            "goal_h2d_registered_ge_95pct_pinned",
            h.goal_met().to_string(),
        ),
        ("launch_raw_us", num(l.raw_us)),
        ("launch_trait_us", num(l.trait_us)),
        ("launch_ratio", num(l.ratio)),
        ("launch_sync_raw_us", num(l.sync_raw_us)),
        ("launch_sync_trait_us", num(l.sync_trait_us)),
        ("launch_sync_ratio", num(l.sync_ratio)),
        ("goal_launch_le_1_05x", l.goal_met().to_string()),
        ("launch4_raw_us", num(l.params4_raw_us)),
        ("launch4_trait_us", num(l.params4_trait_us)),
        ("launch4_ratio", num(l.params4_ratio)),
    ];
    let body: Vec<String> = fields
        .iter()
        .map(|(k, v)| format!("  \"{k}\": {v}"))
        .collect();
    format!("{{\n{}\n}}", body.join(",\n"))
}

fn main() -> ExitCode {
    let (as_json, config) = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("native_bench: {e}");
            return ExitCode::from(2);
        }
    };
    let result = NativeBackend::new()
        .map(Arc::new)
        .and_then(|native| bench::run_native(&native, 0, &config));
    match result {
        Ok(r) => {
            if as_json {
                println!("{}", json(&r));
            } else {
                print!("{}", bench::report(&r));
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("native_bench: {e}");
            ExitCode::FAILURE
        }
    }
}
