//! Benchmark of the native backend against plain driver calls made from the raw
//! function table in the same run (what `vmgpu cuda bench` reports on a GPU, and what
//! `cargo run --release -p cuda-guest --example native_bench` prints):
//!
//! - D2D copy bandwidth of `mib` MiB: [`Backend::memcpy_dtod`] (synchronous form, on the
//!   legacy default stream) and [`Backend::memcpy_dtod_async`] on a stream, against raw
//!   `cuMemcpyDtoD_v2` and `cuMemcpyDtoDAsync_v2`, timed with events;
//! - H2D and D2H from pageable, pinned ([`Backend::host_alloc`]) and registered
//!   ([`Backend::host_register`]) host memory, timed on the host;
//! - the launch latency of an empty kernel through [`Backend::launch`] against raw
//!   `cuLaunchKernel`, alone and as a launch + synchronize round trip, and of a
//!   4-parameter kernel.
//!
//! Each figure is the median of its rounds (one warm-up round is dropped); the variants
//! of one comparison are interleaved round by round. Goals (issue 8): D2D >= 97% of the
//! raw call ([`GOAL_D2D`]), launch <= 1.05x raw ([`GOAL_LAUNCH`]), H2D from registered
//! memory >= 95% of pinned ([`GOAL_REGISTERED`]). Nothing here asserts a time.
//!
//! The simulator's benchmark set is [`crate::sim::bench`].

use std::ffi::c_void;
use std::sync::Arc;
use std::time::Instant;

use crate::driver::loader::DriverApi;
use crate::driver::safe::Gpu;
use crate::driver::{
    sys, Backend, Device, DriverError, Event, EventFlags, Function, HostAllocFlags,
    HostRegisterFlags, LaunchConfig, NativeBackend, Result, Stream, StreamFlags,
};

/// The kernels the launch benchmark uses (`empty`, `vector_add`), NVRTC 12.9 for sm_52.
pub const KERNELS_PTX: &str = include_str!("../tests/native-ptx/kernels.ptx");

/// Goal: D2D bandwidth through the boundary over the raw call's, at least.
pub const GOAL_D2D: f64 = 0.97;
/// Goal: launch latency through the boundary over raw `cuLaunchKernel`'s, at most.
pub const GOAL_LAUNCH: f64 = 1.05;
/// Goal: H2D bandwidth from registered memory over pinned memory's, at least.
pub const GOAL_REGISTERED: f64 = 0.95;

/// Sizes and repetitions of the native benchmark.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NativeBenchConfig {
    /// Size of each copy, MiB (256 by default).
    pub mib: usize,
    /// Measured rounds of each comparison (after one warm-up round).
    pub rounds: usize,
    /// D2D copies per round.
    pub copies: usize,
    /// Rounds of the launch comparisons.
    pub launch_rounds: usize,
    /// Launches per round.
    pub launches: usize,
    /// Launch + synchronize round trips per round.
    pub roundtrips: usize,
}

impl Default for NativeBenchConfig {
    fn default() -> Self {
        NativeBenchConfig {
            mib: 256,
            rounds: 9,
            copies: 40,
            launch_rounds: 31,
            launches: 5_000,
            roundtrips: 500,
        }
    }
}

impl NativeBenchConfig {
    /// Small sizes for a quick look (16 MiB copies, few rounds).
    pub fn quick() -> Self {
        NativeBenchConfig {
            mib: 16,
            rounds: 3,
            copies: 4,
            launch_rounds: 5,
            launches: 200,
            roundtrips: 50,
        }
    }
}

/// D2D copy bandwidths, GB/s of data copied (reads plus writes are twice that).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct D2dFigures {
    /// Copy size, MiB.
    pub mib: usize,
    /// Raw `cuMemcpyDtoD_v2` on the legacy default stream (the baseline).
    pub raw_gbps: f64,
    /// [`Backend::memcpy_dtod`].
    pub sync_gbps: f64,
    /// Raw `cuMemcpyDtoDAsync_v2` on a stream.
    pub raw_async_gbps: f64,
    /// [`Backend::memcpy_dtod_async`] on a stream.
    pub async_gbps: f64,
}

impl D2dFigures {
    /// Synchronous form over the raw call.
    pub fn ratio_sync(&self) -> f64 {
        self.sync_gbps / self.raw_gbps
    }
    /// Asynchronous form over the raw (synchronous) call.
    pub fn ratio_async(&self) -> f64 {
        self.async_gbps / self.raw_gbps
    }
    /// Asynchronous form over the raw asynchronous call.
    pub fn ratio_async_vs_raw_async(&self) -> f64 {
        self.async_gbps / self.raw_async_gbps
    }
    /// Both forms reach [`GOAL_D2D`] of the raw call.
    pub fn goal_met(&self) -> bool {
        self.ratio_sync() >= GOAL_D2D && self.ratio_async() >= GOAL_D2D
    }
}

/// Host copy bandwidths through the boundary, GB/s.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct HostCopyFigures {
    /// Copy size, MiB.
    pub mib: usize,
    /// H2D from pageable memory.
    pub h2d_pageable_gbps: f64,
    /// H2D from pinned memory (the baseline).
    pub h2d_pinned_gbps: f64,
    /// H2D from registered memory.
    pub h2d_registered_gbps: f64,
    /// D2H to pageable memory.
    pub d2h_pageable_gbps: f64,
    /// D2H to pinned memory.
    pub d2h_pinned_gbps: f64,
    /// D2H to registered memory.
    pub d2h_registered_gbps: f64,
}

impl HostCopyFigures {
    /// H2D from registered over pinned.
    pub fn h2d_ratio_registered_vs_pinned(&self) -> f64 {
        self.h2d_registered_gbps / self.h2d_pinned_gbps
    }
    /// D2H to registered over pinned.
    pub fn d2h_ratio_registered_vs_pinned(&self) -> f64 {
        self.d2h_registered_gbps / self.d2h_pinned_gbps
    }
    /// H2D from registered memory reaches [`GOAL_REGISTERED`] of pinned.
    pub fn goal_met(&self) -> bool {
        self.h2d_ratio_registered_vs_pinned() >= GOAL_REGISTERED
    }
}

/// Launch latencies, microseconds per launch; ratios are medians of per-round ratios.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LaunchFigures {
    /// Raw `cuLaunchKernel` of the empty kernel (the baseline).
    pub raw_us: f64,
    /// [`Backend::launch`] of the empty kernel.
    pub trait_us: f64,
    /// `trait_us / raw_us`.
    pub ratio: f64,
    /// Raw launch + `cuStreamSynchronize`.
    pub sync_raw_us: f64,
    /// Launch + synchronize through the boundary.
    pub sync_trait_us: f64,
    /// `sync_trait_us / sync_raw_us`.
    pub sync_ratio: f64,
    /// Raw launch of a 4-parameter kernel.
    pub params4_raw_us: f64,
    /// The same through the boundary.
    pub params4_trait_us: f64,
    /// `params4_trait_us / params4_raw_us`.
    pub params4_ratio: f64,
}

impl LaunchFigures {
    /// Both empty-kernel comparisons are within [`GOAL_LAUNCH`].
    pub fn goal_met(&self) -> bool {
        self.ratio <= GOAL_LAUNCH && self.sync_ratio <= GOAL_LAUNCH
    }
}

/// Everything [`run_native`] measured.
#[derive(Debug, Clone, PartialEq)]
pub struct NativeBenchReport {
    /// The device's name.
    pub device: String,
    /// `cuDriverGetVersion`.
    pub driver_version: i32,
    /// The driver library's path.
    pub library: String,
    /// How the entry points were resolved.
    pub resolution: String,
    /// The configuration measured.
    pub config: NativeBenchConfig,
    /// D2D copies.
    pub d2d: D2dFigures,
    /// H2D and D2H copies.
    pub host: HostCopyFigures,
    /// Launch latency.
    pub launch: LaunchFigures,
}

/// Runs the native benchmark on device `ordinal` of `native`.
pub fn run_native(
    native: &Arc<NativeBackend>,
    ordinal: u32,
    config: &NativeBenchConfig,
) -> Result<NativeBenchReport> {
    let api: DriverApi = *native.raw_api();
    let backend: Arc<dyn Backend> = native.clone();
    let cuda: &dyn Backend = &*backend;
    let dev = Device::new(ordinal);
    let gpu = Gpu::new(backend.clone(), dev)?;
    let device = cuda.device_name(dev)?;
    let driver_version = cuda.driver_version()?;
    let d2d = d2d(config, cuda, &api, &gpu)?;
    let host = host_copies(config, cuda, &gpu)?;
    let launch = launches(config, cuda, &api)?;
    Ok(NativeBenchReport {
        device,
        driver_version,
        library: native.driver().path().to_string(),
        resolution: format!("{:?}", native.driver().resolution()),
        config: *config,
        d2d,
        host,
        launch,
    })
}

fn met(ok: bool) -> &'static str {
    if ok {
        "met"
    } else {
        "NOT met"
    }
}

/// The report as lines of text, each figure with its baseline, ratio and goal.
pub fn report(r: &NativeBenchReport) -> String {
    let (d, h, l) = (&r.d2d, &r.host, &r.launch);
    let mut s = format!(
        "native backend on {}, driver {} ({}), entry points by {}\n",
        r.device, r.driver_version, r.library, r.resolution
    );
    s += &format!(
        "D2D {} MiB (GB/s copied; x2 for read+write): raw cuMemcpyDtoD {:.1}, trait sync {:.1} \
         ({:.1}%), raw async {:.1}, trait async {:.1} ({:.1}% of raw sync, {:.1}% of raw \
         async) -> goal >= {:.0}%: {}\n",
        d.mib,
        d.raw_gbps,
        d.sync_gbps,
        d.ratio_sync() * 100.0,
        d.raw_async_gbps,
        d.async_gbps,
        d.ratio_async() * 100.0,
        d.ratio_async_vs_raw_async() * 100.0,
        GOAL_D2D * 100.0,
        met(d.goal_met())
    );
    s += &format!(
        "H2D {} MiB (GB/s): pageable {:.1}, pinned {:.1}, registered {:.1} ({:.1}% of pinned) \
         -> goal >= {:.0}%: {}\n",
        h.mib,
        h.h2d_pageable_gbps,
        h.h2d_pinned_gbps,
        h.h2d_registered_gbps,
        h.h2d_ratio_registered_vs_pinned() * 100.0,
        GOAL_REGISTERED * 100.0,
        met(h.goal_met())
    );
    s += &format!(
        "D2H {} MiB (GB/s): pageable {:.1}, pinned {:.1}, registered {:.1} ({:.1}% of pinned)\n",
        h.mib,
        h.d2h_pageable_gbps,
        h.d2h_pinned_gbps,
        h.d2h_registered_gbps,
        h.d2h_ratio_registered_vs_pinned() * 100.0
    );
    s += &format!(
        "empty-kernel launch (us each; {} rounds of {} launches, ratio = median of per-round \
         ratios): raw cuLaunchKernel {:.3}, trait {:.3} ({:.3}x); launch+sync round trip: raw \
         {:.2}, trait {:.2} ({:.3}x) -> goal <= {:.2}x: {}\n",
        r.config.launch_rounds,
        r.config.launches,
        l.raw_us,
        l.trait_us,
        l.ratio,
        l.sync_raw_us,
        l.sync_trait_us,
        l.sync_ratio,
        GOAL_LAUNCH,
        met(l.goal_met())
    );
    s += &format!(
        "4-parameter launch (us each): raw cuLaunchKernel {:.3}, trait {:.3} ({:.3}x)\n",
        l.params4_raw_us, l.params4_trait_us, l.params4_ratio
    );
    s
}

type Step<'a> = &'a dyn Fn() -> Result<()>;

/// Microseconds per call of `a` and of `b` (medians over rounds) and the median of the
/// per-round ratios b/a: `rounds` rounds (after one warm-up) of `n` calls of each, the
/// order alternating from round to round, `sync` before each batch.
fn paired(rounds: usize, n: usize, sync: Step, a: Step, b: Step) -> Result<(f64, f64, f64)> {
    let batch = |f: Step| -> Result<f64> {
        sync()?;
        let t = Instant::now();
        for _ in 0..n {
            f()?;
        }
        Ok(t.elapsed().as_secs_f64() * 1e6 / n.max(1) as f64)
    };
    let (mut va, mut vb, mut ratios) = (Vec::new(), Vec::new(), Vec::new());
    for round in 0..=rounds.max(1) {
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

/// Checks a raw `CUresult`.
fn raw(r: sys::CUresult, what: &str) -> Result<()> {
    if r == sys::CUDA_SUCCESS {
        Ok(())
    } else {
        let (name, _) = crate::driver::error::builtin_text(r);
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
    f: &mut dyn FnMut() -> Result<()>,
) -> Result<f64> {
    cuda.event_record(start, stream)?;
    f()?;
    cuda.event_record(end, stream)?;
    cuda.event_synchronize(end)?;
    Ok(cuda.event_elapsed_ms(start, end)? as f64)
}

fn d2d(
    config: &NativeBenchConfig,
    cuda: &dyn Backend,
    api: &DriverApi,
    gpu: &Gpu,
) -> Result<D2dFigures> {
    let bytes = config.mib.max(1) << 20;
    let src = gpu.alloc_zeroed::<u8>(bytes)?;
    let dst = gpu.alloc_zeroed::<u8>(bytes)?;
    let (s, d) = (src.ptr(), dst.ptr());
    let stream = gpu.stream(StreamFlags { non_blocking: true })?;
    let (e0, e1) = (
        gpu.event(EventFlags::default())?,
        gpu.event(EventFlags::default())?,
    );
    let raw_stream = stream.raw().raw() as usize as sys::CUstream;
    let n = config.copies.max(1);
    let mut results = [Vec::new(), Vec::new(), Vec::new(), Vec::new()];
    for round in 0..=config.rounds.max(1) {
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
    let [raw_gbps, sync_gbps, raw_async_gbps, async_gbps] = results.map(median);
    Ok(D2dFigures {
        mib: config.mib.max(1),
        raw_gbps,
        sync_gbps,
        raw_async_gbps,
        async_gbps,
    })
}

fn host_copies(
    config: &NativeBenchConfig,
    cuda: &dyn Backend,
    gpu: &Gpu,
) -> Result<HostCopyFigures> {
    let bytes = config.mib.max(1) << 20;
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
    let registered_ok = reg.is_ok();
    let result = (|| -> Result<HostCopyFigures> {
        reg?;
        let mut h2d = [Vec::new(), Vec::new(), Vec::new()];
        let mut d2h = [Vec::new(), Vec::new(), Vec::new()];
        let reps = 3;
        for round in 0..=config.rounds.clamp(1, 7) {
            for which in 0..3usize {
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
                    h2d[which].push((bytes * reps) as f64 / s / 1e9);
                    d2h[which].push((bytes * reps) as f64 / s2 / 1e9);
                }
            }
        }
        let [hp, hn, hr] = h2d.map(median);
        let [dp, dn, dr] = d2h.map(median);
        Ok(HostCopyFigures {
            mib: config.mib.max(1),
            h2d_pageable_gbps: hp,
            h2d_pinned_gbps: hn,
            h2d_registered_gbps: hr,
            d2h_pageable_gbps: dp,
            d2h_pinned_gbps: dn,
            d2h_registered_gbps: dr,
        })
    })();
    if registered_ok {
        // SAFETY: synchronous copies only, so nothing uses the range any more.
        let _ = unsafe { cuda.host_unregister(reg_ptr) };
    }
    // SAFETY: allocated above with this layout; `registered` is not used after this.
    unsafe { std::alloc::dealloc(reg_ptr, layout) };
    result
}

fn launches(
    config: &NativeBenchConfig,
    cuda: &dyn Backend,
    api: &DriverApi,
) -> Result<LaunchFigures> {
    let module = cuda.module_load_ptx(KERNELS_PTX)?;
    let figures = launches_in(config, cuda, api, &module);
    // Whatever happened, wait for the launches before unloading.
    let synced = cuda.context_synchronize();
    // SAFETY: every launch completed (synchronised above), or failed to be queued; no
    // function of the module is used afterwards.
    let unloaded = unsafe { cuda.module_unload(module) };
    let figures = figures?;
    synced?;
    unloaded?;
    Ok(figures)
}

fn launches_in(
    config: &NativeBenchConfig,
    cuda: &dyn Backend,
    api: &DriverApi,
    module: &crate::driver::Module,
) -> Result<LaunchFigures> {
    let empty: Function = cuda.module_get_function(module, "empty")?;
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
    let rounds = config.launch_rounds.max(1);
    let (raw_us, trait_us, ratio) = paired(
        rounds,
        config.launches.max(1),
        &sync,
        &raw_launch,
        &trait_launch,
    )?;
    let (sync_raw_us, sync_trait_us, sync_ratio) =
        paired(rounds, config.roundtrips.max(1), &sync, &raw_rt, &trait_rt)?;
    cuda.context_synchronize()?;

    // vector_add with n = 0 (touches no memory): four parameters packed per launch, as a
    // C caller does (`void *args[] = {&a, &b, &c, &n}`) and as the trait takes them.
    let vector_add: Function = cuda.module_get_function(module, "vector_add")?;
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
    let (params4_raw_us, params4_trait_us, params4_ratio) =
        paired(rounds, config.launches.max(1), &sync, &raw4, &trait4)?;
    Ok(LaunchFigures {
        raw_us,
        trait_us,
        ratio,
        sync_raw_us,
        sync_trait_us,
        sync_ratio,
        params4_raw_us,
        params4_trait_us,
        params4_ratio,
    })
}
