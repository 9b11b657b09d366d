//! Benchmark of the native backend against plain driver calls made from the raw
//! function table in the same run: D2D copy bandwidth (sync through the trait, async on
//! a stream), H2D and D2H from pageable, pinned and registered host memory, and the
//! launch latency of an empty kernel through the trait against raw `cuLaunchKernel`.
//!
//! ```text
//! cargo run --release -p cuda-guest --example native_bench -- [--json] [--mib N]
//!     [--rounds N] [--copies N] [--launches N] [--launch-rounds N] [--roundtrips N]
//! ```
//! Each figure is the median of its rounds; the variants of one comparison are
//! interleaved round by round. Goals: D2D >= 97% of raw, launch <= 1.05x raw, H2D from
//! registered memory >= 95% of pinned.

use std::ffi::c_void;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Instant;

use cuda_guest::driver::loader::DriverApi;
use cuda_guest::driver::safe::Gpu;
use cuda_guest::driver::{
    sys, Backend, Device, DriverError, Event, EventFlags, Function, HostAllocFlags,
    HostRegisterFlags, LaunchConfig, NativeBackend, Stream, StreamFlags,
};

const KERNELS_PTX: &str = include_str!("../tests/native-ptx/kernels.ptx");

#[derive(Debug)]
struct Args {
    json: bool,
    mib: usize,
    rounds: usize,
    copies: usize,
    launch_rounds: usize,
    launches: usize,
    roundtrips: usize,
}

fn parse_args() -> Result<Args, String> {
    let mut a = Args {
        json: false,
        mib: 256,
        rounds: 9,
        copies: 40,
        launch_rounds: 31,
        launches: 5_000,
        roundtrips: 500,
    };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        let mut num = |name: &str| -> Result<usize, String> {
            it.next()
                .and_then(|v| v.parse().ok())
                .filter(|&v: &usize| v > 0)
                .ok_or(format!("{name} needs a positive number"))
        };
        match arg.as_str() {
            "--json" => a.json = true,
            "--mib" => a.mib = num("--mib")?,
            "--rounds" => a.rounds = num("--rounds")?,
            "--copies" => a.copies = num("--copies")?,
            "--launches" => a.launches = num("--launches")?,
            "--launch-rounds" => a.launch_rounds = num("--launch-rounds")?,
            "--roundtrips" => a.roundtrips = num("--roundtrips")?,
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
    Ok(a)
}

fn main() -> ExitCode {
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("native_bench: {e}");
            return ExitCode::from(2);
        }
    };
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("native_bench: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Microseconds per call of `a` and of `b` (medians over rounds) and the median of the
/// per-round ratios b/a: `rounds` rounds (after one warm-up) of `n` calls of each, the
/// order alternating from round to round, `sync` before each batch.
fn paired(
    rounds: usize,
    n: usize,
    sync: &dyn Fn() -> Result<(), DriverError>,
    a: &dyn Fn() -> Result<(), DriverError>,
    b: &dyn Fn() -> Result<(), DriverError>,
) -> Result<(f64, f64, f64), DriverError> {
    let batch = |f: &dyn Fn() -> Result<(), DriverError>| -> Result<f64, DriverError> {
        sync()?;
        let t = Instant::now();
        for _ in 0..n {
            f()?;
        }
        Ok(t.elapsed().as_secs_f64() * 1e6 / n as f64)
    };
    let (mut va, mut vb, mut ratios) = (Vec::new(), Vec::new(), Vec::new());
    for round in 0..=rounds {
        let (ta, tb) = if round % 2 == 0 {
            let ta = batch(a)?;
            (ta, batch(b)?)
        } else {
            let tb = batch(b)?;
            (batch(a)?, tb)
        };
        if round > 0 {
            va.push(ta);
            vb.push(tb);
            ratios.push(tb / ta);
        }
    }
    sync()?;
    Ok((median(va), median(vb), median(ratios)))
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    if v.is_empty() {
        return f64::NAN;
    }
    v[v.len() / 2]
}

/// Check a raw CUresult.
fn raw(r: sys::CUresult, what: &str) -> Result<(), DriverError> {
    if r == sys::CUDA_SUCCESS {
        Ok(())
    } else {
        let (name, _) = cuda_guest::driver::error::builtin_text(r);
        Err(DriverError::InvalidArgument {
            operation: "raw driver call",
            reason: format!("{what} returned {name} ({r})"),
        })
    }
}

/// Milliseconds between events recorded around `f` on `stream`.
fn timed(
    cuda: &dyn Backend,
    stream: &Stream,
    start: &Event,
    end: &Event,
    f: &mut dyn FnMut() -> Result<(), DriverError>,
) -> Result<f64, DriverError> {
    cuda.event_record(start, stream)?;
    f()?;
    cuda.event_record(end, stream)?;
    cuda.event_synchronize(end)?;
    Ok(cuda.event_elapsed_ms(start, end)? as f64)
}

#[derive(Debug, Default)]
struct Report {
    fields: Vec<(String, String)>,
    lines: Vec<String>,
}

impl Report {
    fn num(&mut self, key: &str, v: f64) {
        let s = if v.is_finite() {
            format!("{v:.4}")
        } else {
            "null".into()
        };
        self.fields.push((key.into(), s));
    }
    fn text(&mut self, key: &str, v: &str) {
        self.fields.push((
            key.into(),
            format!("\"{}\"", v.replace('\\', "\\\\").replace('"', "\\\"")),
        ));
    }
    fn flag(&mut self, key: &str, v: bool) {
        self.fields.push((key.into(), v.to_string()));
    }
    fn line(&mut self, s: String) {
        self.lines.push(s);
    }
    fn json(&self) -> String {
        let body: Vec<String> = self
            .fields
            .iter()
            .map(|(k, v)| format!("  \"{k}\": {v}"))
            .collect();
        format!("{{\n{}\n}}", body.join(",\n"))
    }
}

fn run(args: &Args) -> Result<(), DriverError> {
    let native = Arc::new(NativeBackend::new()?);
    let api: DriverApi = *native.raw_api();
    let backend: Arc<dyn Backend> = native.clone();
    let cuda: &dyn Backend = &*backend;
    let gpu = Gpu::new(backend.clone(), Device::new(0))?;
    let mut rep = Report::default();
    let name = cuda.device_name(Device::new(0))?;
    let version = cuda.driver_version()?;
    rep.text("backend", "native");
    rep.text("device", &name);
    rep.num("driver_version", version as f64);
    rep.text("resolution", &format!("{:?}", native.driver().resolution()));
    rep.line(format!(
        "native backend on {name}, driver {version}, entry points by {:?}",
        native.driver().resolution()
    ));

    d2d(args, cuda, &api, &gpu, &mut rep)?;
    host_copies(args, cuda, &gpu, &mut rep)?;
    launches(args, cuda, &api, &mut rep)?;

    if args.json {
        println!("{}", rep.json());
    } else {
        for l in &rep.lines {
            println!("{l}");
        }
    }
    Ok(())
}

fn d2d(
    args: &Args,
    cuda: &dyn Backend,
    api: &DriverApi,
    gpu: &Gpu,
    rep: &mut Report,
) -> Result<(), DriverError> {
    let bytes = args.mib << 20;
    let src = gpu.alloc_zeroed::<u8>(bytes)?;
    let dst = gpu.alloc_zeroed::<u8>(bytes)?;
    let (s, d) = (src.ptr(), dst.ptr());
    let stream = gpu.stream(StreamFlags { non_blocking: true })?;
    let (e0, e1) = (
        gpu.event(EventFlags::default())?,
        gpu.event(EventFlags::default())?,
    );
    let raw_stream = stream.raw().raw() as usize as sys::CUstream;
    let n = args.copies;
    let mut results = [Vec::new(), Vec::new(), Vec::new(), Vec::new()];
    for round in 0..=args.rounds {
        // raw cuMemcpyDtoD_v2 on the default stream
        let ms_raw = timed(cuda, &Stream::DEFAULT, e0.raw(), e1.raw(), &mut || {
            for _ in 0..n {
                // SAFETY: both ranges are `bytes` of device memory of live buffers.
                let r = unsafe { (api.memcpy_dtod)(d.0, s.0, bytes) };
                raw(r, "cuMemcpyDtoD_v2")?;
            }
            Ok(())
        })?;
        // the trait, synchronous form
        let ms_trait = timed(cuda, &Stream::DEFAULT, e0.raw(), e1.raw(), &mut || {
            for _ in 0..n {
                // SAFETY: as above.
                unsafe { cuda.memcpy_dtod(d, s, bytes) }?;
            }
            Ok(())
        })?;
        // raw cuMemcpyDtoDAsync_v2 on the stream
        let ms_raw_async = timed(cuda, stream.raw(), e0.raw(), e1.raw(), &mut || {
            for _ in 0..n {
                // SAFETY: as above; the stream is live.
                let r = unsafe { (api.memcpy_dtod_async)(d.0, s.0, bytes, raw_stream) };
                raw(r, "cuMemcpyDtoDAsync_v2")?;
            }
            Ok(())
        })?;
        // the trait, asynchronous form on the stream
        let ms_trait_async = timed(cuda, stream.raw(), e0.raw(), e1.raw(), &mut || {
            for _ in 0..n {
                // SAFETY: as above.
                unsafe { cuda.memcpy_dtod_async(d, s, bytes, stream.raw()) }?;
            }
            Ok(())
        })?;
        if round > 0 {
            // round 0 warms up
            for (v, ms) in results
                .iter_mut()
                .zip([ms_raw, ms_trait, ms_raw_async, ms_trait_async])
            {
                v.push((bytes * n) as f64 / (ms / 1e3) / 1e9);
            }
        }
    }
    let [raw_sync, trait_sync, raw_async, trait_async] = results.map(median);
    rep.num("d2d_mib", args.mib as f64);
    rep.num("d2d_raw_gbps", raw_sync);
    rep.num("d2d_trait_sync_gbps", trait_sync);
    rep.num("d2d_raw_async_gbps", raw_async);
    rep.num("d2d_trait_async_gbps", trait_async);
    let r_sync = trait_sync / raw_sync;
    let r_async = trait_async / raw_sync;
    let r_async_matched = trait_async / raw_async;
    rep.num("d2d_ratio_sync_vs_raw", r_sync);
    rep.num("d2d_ratio_async_vs_raw", r_async);
    rep.num("d2d_ratio_async_vs_raw_async", r_async_matched);
    let ok = r_sync >= 0.97 && r_async >= 0.97;
    rep.flag("goal_d2d_ge_97pct", ok);
    rep.line(format!(
        "D2D {} MiB (GB/s copied; x2 for read+write): raw cuMemcpyDtoD {raw_sync:.1}, trait \
         sync {trait_sync:.1} ({:.1}%), raw async {raw_async:.1}, trait async {trait_async:.1} \
         ({:.1}% of raw sync, {:.1}% of raw async) -> goal >= 97%: {}",
        args.mib,
        r_sync * 100.0,
        r_async * 100.0,
        r_async_matched * 100.0,
        if ok { "met" } else { "NOT met" }
    ));
    Ok(())
}

fn host_copies(
    args: &Args,
    cuda: &dyn Backend,
    gpu: &Gpu,
    rep: &mut Report,
) -> Result<(), DriverError> {
    let bytes = args.mib << 20;
    let dev = gpu.alloc_zeroed::<u8>(bytes)?;
    let mut pageable = vec![0u8; bytes];
    for (i, b) in pageable.iter_mut().enumerate() {
        *b = i as u8;
    }
    let mut pinned = gpu.pinned(bytes, HostAllocFlags::default())?;
    pinned.as_mut_slice().copy_from_slice(&pageable);
    let layout = std::alloc::Layout::from_size_align(bytes, 4096).map_err(|e| {
        DriverError::InvalidArgument {
            operation: "host allocation",
            reason: e.to_string(),
        }
    })?;
    // SAFETY: the layout has a non-zero size (bytes >= 1 MiB).
    let reg_ptr = unsafe { std::alloc::alloc_zeroed(layout) };
    if reg_ptr.is_null() {
        return Err(DriverError::InvalidArgument {
            operation: "host allocation",
            reason: "out of host memory".into(),
        });
    }
    // SAFETY: `reg_ptr` holds `bytes` zeroed bytes owned here until the dealloc below.
    let registered = unsafe { std::slice::from_raw_parts_mut(reg_ptr, bytes) };
    registered.copy_from_slice(&pageable);
    // SAFETY: the range stays allocated until after host_unregister below.
    let reg = unsafe { cuda.host_register(reg_ptr, bytes, HostRegisterFlags::default()) };
    let result = (|| -> Result<(), DriverError> {
        reg?;
        let mut h2d = [Vec::new(), Vec::new(), Vec::new()];
        let mut d2h = [Vec::new(), Vec::new(), Vec::new()];
        let reps = 3;
        for round in 0..=args.rounds.min(7) {
            for (k, which) in [0usize, 1, 2].into_iter().enumerate() {
                let t = Instant::now();
                for _ in 0..reps {
                    // SAFETY: `dev` is `bytes` of device memory; each host slice is
                    // `bytes` long.
                    unsafe {
                        match which {
                            0 => cuda.memcpy_htod(dev.ptr(), &pageable),
                            1 => cuda.memcpy_htod(dev.ptr(), pinned.as_slice()),
                            _ => cuda.memcpy_htod(dev.ptr(), registered),
                        }
                    }?;
                }
                let s = t.elapsed().as_secs_f64();
                let t = Instant::now();
                for _ in 0..reps {
                    // SAFETY: as above.
                    unsafe {
                        match which {
                            0 => cuda.memcpy_dtoh(&mut pageable, dev.ptr()),
                            1 => cuda.memcpy_dtoh(pinned.as_mut_slice(), dev.ptr()),
                            _ => cuda.memcpy_dtoh(registered, dev.ptr()),
                        }
                    }?;
                }
                let s2 = t.elapsed().as_secs_f64();
                if round > 0 {
                    h2d[k].push((bytes * reps) as f64 / s / 1e9);
                    d2h[k].push((bytes * reps) as f64 / s2 / 1e9);
                }
            }
        }
        let [hp, hn, hr] = h2d.map(median);
        let [dp, dn, dr] = d2h.map(median);
        for (key, v) in [
            ("h2d_pageable_gbps", hp),
            ("h2d_pinned_gbps", hn),
            ("h2d_registered_gbps", hr),
            ("d2h_pageable_gbps", dp),
            ("d2h_pinned_gbps", dn),
            ("d2h_registered_gbps", dr),
        ] {
            rep.num(key, v);
        }
        rep.num("h2d_ratio_registered_vs_pinned", hr / hn);
        rep.num("d2h_ratio_registered_vs_pinned", dr / dn);
        let ok = hr / hn >= 0.95;
        rep.flag("goal_h2d_registered_ge_95pct_pinned", ok);
        rep.line(format!(
            "H2D {} MiB (GB/s): pageable {hp:.1}, pinned {hn:.1}, registered {hr:.1} ({:.1}% \
             of pinned) -> goal >= 95%: {}",
            args.mib,
            hr / hn * 100.0,
            if ok { "met" } else { "NOT met" }
        ));
        rep.line(format!(
            "D2H {} MiB (GB/s): pageable {dp:.1}, pinned {dn:.1}, registered {dr:.1} ({:.1}% \
             of pinned)",
            args.mib,
            dr / dn * 100.0
        ));
        Ok(())
    })();
    // SAFETY: synchronous copies only, so nothing uses the range any more.
    let _ = unsafe { cuda.host_unregister(reg_ptr) };
    // SAFETY: allocated above with this layout; `registered` is not used after this.
    unsafe { std::alloc::dealloc(reg_ptr, layout) };
    result
}

fn launches(
    args: &Args,
    cuda: &dyn Backend,
    api: &DriverApi,
    rep: &mut Report,
) -> Result<(), DriverError> {
    let module = cuda.module_load_ptx(KERNELS_PTX)?;
    let empty: Function = cuda.module_get_function(&module, "empty")?;
    let f = empty.raw() as usize as sys::CUfunction;
    let cfg = LaunchConfig::linear(1, 1);
    let null_stream: sys::CUstream = std::ptr::null_mut();
    let raw_launch = || {
        // SAFETY: `f` is a live function of a loaded module taking no parameters.
        let r = unsafe {
            (api.launch_kernel)(
                f,
                1,
                1,
                1,
                1,
                1,
                1,
                0,
                null_stream,
                std::ptr::null_mut::<*mut c_void>(),
                std::ptr::null_mut(),
            )
        };
        raw(r, "cuLaunchKernel")
    };
    let trait_launch = || {
        // SAFETY: `empty` takes no parameters; its module stays loaded until the end.
        unsafe { cuda.launch(&empty, &cfg, &Stream::DEFAULT, &[]) }
    };
    let raw_rt = || {
        raw_launch()?;
        // SAFETY: the legacy default stream of the current context.
        let r = unsafe { (api.stream_synchronize)(null_stream) };
        raw(r, "cuStreamSynchronize")
    };
    let trait_rt = || {
        trait_launch()?;
        cuda.stream_synchronize(&Stream::DEFAULT)
    };
    let sync = || cuda.context_synchronize();
    let (raw_us, trait_us, ratio) = paired(
        args.launch_rounds,
        args.launches,
        &sync,
        &raw_launch,
        &trait_launch,
    )?;
    let (raw_rt, trait_rt, ratio_rt) = paired(
        args.launch_rounds,
        args.roundtrips,
        &sync,
        &raw_rt,
        &trait_rt,
    )?;
    rep.num("launch_raw_us", raw_us);
    rep.num("launch_trait_us", trait_us);
    rep.num("launch_ratio", ratio);
    rep.num("launch_sync_raw_us", raw_rt);
    rep.num("launch_sync_trait_us", trait_rt);
    rep.num("launch_sync_ratio", ratio_rt);
    let ok = ratio <= 1.05 && ratio_rt <= 1.05;
    rep.flag("goal_launch_le_1_05x", ok);
    rep.line(format!(
        "empty-kernel launch (us each; {} rounds of {} launches, ratio = median of per-round \
         ratios): raw cuLaunchKernel {raw_us:.3}, trait {trait_us:.3} ({ratio:.3}x); \
         launch+sync round trip: raw {raw_rt:.2}, trait {trait_rt:.2} ({ratio_rt:.3}x) -> goal \
         <= 1.05x: {}",
        args.launch_rounds,
        args.launches,
        if ok { "met" } else { "NOT met" }
    ));
    cuda.context_synchronize()?;

    // vector_add with n = 0 (touches no memory): four parameters packed per launch, as a
    // C caller does (`void *args[] = {&a, &b, &c, &n}`) and as the trait takes them.
    let vector_add: Function = cuda.module_get_function(&module, "vector_add")?;
    let fv = vector_add.raw() as usize as sys::CUfunction;
    let (pa, pb, pc, n0): (u64, u64, u64, u32) = (0, 0, 0, 0);
    let raw4 = || {
        let mut params: [*mut c_void; 4] = [
            (&pa as *const u64).cast_mut().cast(),
            (&pb as *const u64).cast_mut().cast(),
            (&pc as *const u64).cast_mut().cast(),
            (&n0 as *const u32).cast_mut().cast(),
        ];
        // SAFETY: `fv` takes (ptr, ptr, ptr, u32); each params entry points to a live
        // value of that size, read by the driver during the call; with n = 0 the kernel
        // touches no memory.
        let r = unsafe {
            (api.launch_kernel)(
                fv,
                1,
                1,
                1,
                32,
                1,
                1,
                0,
                null_stream,
                params.as_mut_ptr(),
                std::ptr::null_mut(),
            )
        };
        raw(r, "cuLaunchKernel")
    };
    let cfg32 = LaunchConfig::linear(1, 32);
    let trait4 = || {
        let args: [&[u8]; 4] = [
            &pa.to_le_bytes(),
            &pb.to_le_bytes(),
            &pc.to_le_bytes(),
            &n0.to_le_bytes(),
        ];
        // SAFETY: as above.
        unsafe { cuda.launch(&vector_add, &cfg32, &Stream::DEFAULT, &args) }
    };
    let (raw4_us, trait4_us, ratio4) =
        paired(args.launch_rounds, args.launches, &sync, &raw4, &trait4)?;
    rep.num("launch4_raw_us", raw4_us);
    rep.num("launch4_trait_us", trait4_us);
    rep.num("launch4_ratio", ratio4);
    rep.line(format!(
        "4-parameter launch (us each): raw cuLaunchKernel {raw4_us:.3}, trait {trait4_us:.3} \
         ({ratio4:.3}x)"
    ));
    cuda.context_synchronize()?;
    // SAFETY: every launch completed (synchronised above).
    unsafe { cuda.module_unload(module) }?;
    Ok(())
}
