//! `vmgpu cuda run MODULE.ptx KERNEL --grid X[,Y,Z] --block X[,Y,Z] ARG...`

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use clap::Args;
use cuda_guest::driver::safe::{check_args, DeviceBuffer, Gpu, KernelArg};
use cuda_guest::driver::{
    DeviceAttribute as A, DevicePtr, DriverError, EventFlags, LaunchConfig, StreamFlags,
};
use cuda_guest::ptx;
use cuda_guest::sim::{FaultKind, MemoryFault};
use serde::Serialize;

use super::args::{parse_arg, parse_dim3, Arg, ArgSpec, BufferSpec, Elem};
use super::{accelerator, human_bytes, sim_config, usage, BackendArgs, BackendInfo};
use crate::Out;

#[derive(Args)]
pub struct RunArgs {
    /// The module: PTX text (as clang or NVRTC emit it), or CUDA C++ (`.cu`, compiled
    /// with NVRTC for the device; its directory is on the include path)
    module: PathBuf,
    /// The kernel (`.entry`) to launch
    kernel: String,
    /// Blocks in the grid: X[,Y[,Z]]
    #[arg(long, value_name = "X[,Y,Z]", value_parser = parse_dim3)]
    grid: [u32; 3],
    /// Threads per block: X[,Y[,Z]]
    #[arg(long, value_name = "X[,Y,Z]", value_parser = parse_dim3)]
    block: [u32; 3],
    /// Dynamic shared memory per block, in bytes
    #[arg(long, value_name = "BYTES", default_value_t = 0)]
    shared: u32,
    #[command(flatten)]
    backend: BackendArgs,
    /// Simulator only: host threads running blocks (1: blocks in order, so the first
    /// fault is always the same) [default: every core, or VMGPU_SIM_THREADS]
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u16).range(1..=256))]
    sim_threads: Option<u16>,
    /// Simulator only: stop a launch after this many seconds (CUDA_ERROR_LAUNCH_TIMEOUT)
    #[arg(long, value_name = "SECONDS", default_value_t = 60.0)]
    timeout: f64,
    /// An NVRTC option for a `.cu` module (repeatable), e.g. --nvrtc-opt=--use_fast_math
    #[arg(long, value_name = "OPTION", allow_hyphen_values = true)]
    nvrtc_opt: Vec<String>,
    /// Print JSON
    #[arg(long)]
    json: bool,
    /// Kernel arguments, in the order of the kernel's parameters: TYPE:VALUE scalars
    /// (u8 i8 u16 i16 u32 i32 u64 i64 f32 f64, e.g. u32:1000, f32:2.5) and device
    /// buffers buf:TYPE:LEN[=zeros|iota|fill:VALUE|random:SEED|file:PATH][,out=PATH][,show];
    /// bytes:HEX for a by-value struct parameter
    #[arg(value_name = "ARG", value_parser = parse_arg)]
    args: Vec<Arg>,
}

#[derive(Serialize)]
struct ArgReport {
    index: usize,
    param: String,
    param_type: String,
    spec: String,
    /// `buffer` or `scalar`.
    kind: &'static str,
    /// A buffer's element type and length and its size in bytes.
    elem: Option<&'static str>,
    len: Option<usize>,
    bytes: usize,
    out: Option<PathBuf>,
    /// A buffer's device address (to read fault reports).
    device_address: Option<String>,
}

#[derive(Serialize)]
struct Output {
    index: usize,
    path: PathBuf,
    bytes: usize,
}

#[derive(Serialize)]
struct Shown {
    index: usize,
    /// The first elements, as text.
    values: Vec<String>,
}

#[derive(Serialize)]
struct NearestReport {
    /// The argument whose buffer it is, when it is one.
    argument: Option<usize>,
    param: Option<String>,
    base: String,
    size: u64,
    offset: i64,
    freed: bool,
    /// A module variable's name.
    variable: Option<String>,
}

#[derive(Serialize)]
struct FaultReport {
    kind: &'static str,
    access: &'static str,
    space: &'static str,
    address: String,
    size: u32,
    kernel: String,
    block: [u32; 3],
    thread: [u32; 3],
    ptx_line: u32,
    ptx_text: Option<String>,
    nearest: Option<NearestReport>,
}

#[derive(Serialize)]
struct ErrorReport {
    cuda_name: Option<String>,
    code: Option<i32>,
    message: String,
    fault: Option<FaultReport>,
}

#[derive(Serialize)]
struct RunReport {
    backend: BackendInfo,
    device: String,
    module: PathBuf,
    /// Whether the module was CUDA C++ compiled with NVRTC (PTX lines are then lines of
    /// NVRTC's output).
    compiled: bool,
    #[serde(skip)]
    ptx_name: String,
    kernel: String,
    grid: [u32; 3],
    block: [u32; 3],
    shared_bytes: u32,
    args: Vec<ArgReport>,
    /// `ok` or `failed`.
    status: &'static str,
    /// Kernel time between events recorded around the launch.
    kernel_ms: Option<f64>,
    /// Host time from the launch call to the end of the synchronisation.
    wall_ms: f64,
    outputs: Vec<Output>,
    shown: Vec<Shown>,
    error: Option<ErrorReport>,
}

/// How many elements `,show` prints.
const SHOW: usize = 16;

/// A kernel that failed (exit status 1), with the report already written.
#[derive(Debug)]
struct KernelFailed(String);

impl std::fmt::Display for KernelFailed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for KernelFailed {}

fn fault_kind(k: FaultKind) -> &'static str {
    match k {
        FaultKind::OutOfBounds => "out-of-bounds",
        FaultKind::UseAfterFree => "use-after-free",
        FaultKind::NullPointer => "null-pointer",
        FaultKind::Misaligned => "misaligned",
        FaultKind::SharedOutOfBounds => "shared-out-of-bounds",
        FaultKind::LocalOutOfBounds => "local-out-of-bounds",
        FaultKind::ReadOnly => "read-only",
        _ => "other",
    }
}

pub fn run(a: &RunArgs, out: &mut Out) -> anyhow::Result<ExitCode> {
    // Everything the command line names is checked before any backend work.
    let source = std::fs::read(&a.module)
        .map_err(|e| usage(format!("cannot read {}: {e}", a.module.display())))?;
    let source = String::from_utf8(source).map_err(|e| {
        usage(format!(
            "{} is not text (not UTF-8 at byte {})",
            a.module.display(),
            e.utf8_error().valid_up_to()
        ))
    })?;
    if !a.timeout.is_finite() || a.timeout <= 0.0 {
        return Err(usage(format!(
            "--timeout {}: expected a positive number of seconds",
            a.timeout
        )));
    }
    let choose = || {
        accelerator(
            &a.backend,
            sim_config(
                a.sim_threads.map(usize::from),
                Some(Duration::from_secs_f64(a.timeout.min(1e9))),
            ),
        )
    };
    let mut module_name = a.module.display().to_string();
    // CUDA C++ is compiled with NVRTC for the chosen device first.
    let mut chosen = None;
    let text = if a.module.extension().is_some_and(|e| e == "cu") {
        let (acc, info) = choose()?;
        let (major, minor) = acc
            .backend()
            .compute_capability(cuda_guest::driver::Device::new(0))
            .context("querying CUDA device 0")?;
        let ptx = compile_cuda(a, &source, major, minor)?;
        chosen = Some((acc, info));
        module_name.push_str(" (NVRTC)");
        ptx
    } else {
        source
    };
    let parsed = ptx::parse(&module_name, &text)
        .map_err(|e| anyhow::Error::new(e).context(format!("cannot load {module_name}")))?;
    let entry = match parsed.entry(&a.kernel) {
        Some(e) => e,
        None => {
            let names: Vec<&str> = parsed.entries().map(|f| f.name.as_str()).collect();
            return Err(usage(format!(
                "{module_name} has no kernel `{}`; its kernels: {}",
                a.kernel,
                if names.is_empty() {
                    "none".into()
                } else {
                    names.join(", ")
                }
            )));
        }
    };
    let params = entry.params.clone();
    let signature = || {
        let p: Vec<String> = params
            .iter()
            .map(|p| {
                format!(
                    ".{}{} {}",
                    p.ty.name(),
                    p.array.map(|n| format!("[{n}]")).unwrap_or_default(),
                    p.name
                )
            })
            .collect();
        format!("{}({})", a.kernel, p.join(", "))
    };
    // The arguments against the parameters, with stand-ins for the buffers.
    let stand_ins: Vec<KernelArg<'static>> = a
        .args
        .iter()
        .map(|arg| kernel_arg(&arg.spec, None))
        .collect();
    if let Err(e) = check_args(&a.kernel, &params, &stand_ins) {
        let given = match &e {
            DriverError::BadKernelArgument { index, .. } => a
                .args
                .get(*index)
                .map(|g| format!(" (given `{}`)", g.text))
                .unwrap_or_default(),
            _ => String::new(),
        };
        return Err(usage(format!("{e}{given}; the kernel is {}", signature())));
    }
    let mut lens = Vec::with_capacity(a.args.len());
    for arg in &a.args {
        if let ArgSpec::Buffer(BufferSpec {
            out: Some(path), ..
        }) = &arg.spec
        {
            let dir = path.parent().filter(|d| !d.as_os_str().is_empty());
            if dir.is_some_and(|d| !d.is_dir()) || path.is_dir() {
                return Err(usage(format!(
                    "argument `{}`: cannot write {}: {}",
                    arg.text,
                    path.display(),
                    if path.is_dir() {
                        "it is a directory"
                    } else {
                        "its directory does not exist"
                    }
                )));
            }
        }
        lens.push(match &arg.spec {
            ArgSpec::Buffer(b) => b
                .resolved_len()
                .map_err(|e| usage(format!("argument `{}`: {e}", arg.text)))?,
            ArgSpec::Scalar(..) | ArgSpec::Bytes(_) => 0,
        });
    }

    let compiled = chosen.is_some();
    let (acc, backend) = match chosen {
        Some(c) => c,
        None => choose()?,
    };
    let gpu = acc.gpu(0).context("opening CUDA device 0")?;
    let device = gpu.name().unwrap_or_else(|_| "?".into());
    check_geometry(&gpu, a)?;

    let mut report = RunReport {
        backend,
        device,
        module: a.module.clone(),
        compiled,
        ptx_name: module_name.clone(),
        kernel: a.kernel.clone(),
        grid: a.grid,
        block: a.block,
        shared_bytes: a.shared,
        args: Vec::new(),
        status: "ok",
        kernel_ms: None,
        wall_ms: 0.0,
        outputs: Vec::new(),
        shown: Vec::new(),
        error: None,
    };

    // Device buffers, in argument order.
    let mut buffers: Vec<Option<DeviceBuffer<u8>>> = Vec::with_capacity(a.args.len());
    for (i, (arg, p)) in a.args.iter().zip(&params).enumerate() {
        let mut r = ArgReport {
            index: i,
            param: p.name.clone(),
            param_type: p.ty.name().into(),
            spec: arg.text.clone(),
            kind: "scalar",
            elem: None,
            len: None,
            bytes: p.size as usize,
            out: None,
            device_address: None,
        };
        match &arg.spec {
            ArgSpec::Scalar(..) | ArgSpec::Bytes(_) => buffers.push(None),
            ArgSpec::Buffer(b) => {
                let buf = make_buffer(&gpu, b, lens[i])
                    .map_err(|e| e.context(format!("argument {i} `{}`", arg.text)))?;
                r.kind = "buffer";
                r.elem = Some(b.elem.name());
                r.len = Some(lens[i]);
                r.bytes = buf.len();
                r.out = b.out.clone();
                r.device_address = Some(format!("{:#x}", buf.ptr().0));
                buffers.push(Some(buf));
            }
        }
        report.args.push(r);
    }
    let kargs: Vec<KernelArg<'_>> = a
        .args
        .iter()
        .zip(&buffers)
        .map(|(arg, buf)| kernel_arg(&arg.spec, buf.as_ref()))
        .collect();

    // Under the file's name: the simulator reports what it cannot execute at MODULE:LINE.
    let module = gpu
        .load_ptx_named(&module_name, &text)
        .map_err(|e| anyhow::Error::new(e).context(format!("cannot load {module_name}")))?;
    let function = module
        .function(&a.kernel)
        .map_err(|e| anyhow::Error::new(e).context(format!("kernel `{}`", a.kernel)))?;
    if a.shared > 0 {
        // Beyond 48 KiB in all a kernel must opt in; asking for what it uses is always
        // allowed.
        function
            .set_max_dynamic_shared_memory(a.shared)
            .map_err(|e| {
                usage(format!(
                    "--shared {}: kernel `{}` cannot have that much dynamic shared memory: {e}",
                    a.shared, a.kernel
                ))
            })?;
    }
    let stream = gpu.stream(StreamFlags::default())?;
    let (start, end) = (
        gpu.event(EventFlags::default())?,
        gpu.event(EventFlags::default())?,
    );
    let config = LaunchConfig {
        grid: a.grid,
        block: a.block,
        shared_bytes: a.shared,
    };
    let t0 = Instant::now();
    let launched = (|| -> Result<(), DriverError> {
        start.record(&stream)?;
        // SAFETY: this process holds no pinned, registered or mapped host memory, so
        // every address the kernel can reach is device memory (its buffers, or an address
        // the device refuses with CUDA_ERROR_ILLEGAL_ADDRESS); the buffers and the module
        // live until after the synchronisation below.
        unsafe { function.launch(&stream, config, &kargs) }?;
        end.record(&stream)?;
        stream.synchronize()
    })();
    report.wall_ms = t0.elapsed().as_secs_f64() * 1e3;

    match launched {
        Ok(()) => {
            report.kernel_ms = end.elapsed_since(&start).ok().map(f64::from);
            for (i, (arg, buf)) in a.args.iter().zip(&buffers).enumerate() {
                let (ArgSpec::Buffer(b), Some(buf)) = (&arg.spec, buf) else {
                    continue;
                };
                if b.out.is_none() && !b.show {
                    continue;
                }
                let data = buf
                    .to_vec()
                    .with_context(|| format!("reading back argument {i} `{}`", arg.text))?;
                if let Some(path) = &b.out {
                    std::fs::write(path, &data).map_err(|e| {
                        anyhow::anyhow!("writing argument {i} to {}: {e}", path.display())
                    })?;
                    report.outputs.push(Output {
                        index: i,
                        path: path.clone(),
                        bytes: data.len(),
                    });
                }
                if b.show {
                    report.shown.push(Shown {
                        index: i,
                        values: data
                            .chunks_exact(b.elem.size())
                            .take(SHOW)
                            .map(|c| b.elem.format(c))
                            .collect(),
                    });
                }
            }
        }
        Err(e) => {
            report.status = "failed";
            report.error = Some(error_report(&e, &report.args, &text));
            // A kernel fault leaves the context failed (sticky): reset it so that the
            // buffers, the module, the stream and the events drop without calling into
            // a failed context.
            // SAFETY: no raw handle or device address of this context is used after
            // the reset; the safe objects alive refuse to work and drop quietly.
            if let Err(e) = unsafe { gpu.reset() } {
                log::debug!("resetting the device after the failure: {e}");
            }
        }
    }

    if a.json {
        crate::print_json(out, &report)?;
    } else {
        print_text(&report, out);
    }
    match &report.error {
        None => Ok(ExitCode::SUCCESS),
        Some(e) => Err(anyhow::Error::new(KernelFailed(format!(
            "kernel `{}` failed: {}",
            a.kernel, e.message
        )))),
    }
}

/// Compiles a `.cu` module with NVRTC (`VMGPU_LIBNVRTC`, else libnvrtc.so.13/12) for
/// compute capability `major.minor`, with the module's directory on the include path.
fn compile_cuda(a: &RunArgs, source: &str, major: u32, minor: u32) -> anyhow::Result<String> {
    let nvrtc = cuda_guest::driver::nvrtc::Nvrtc::load()
        .context("compiling CUDA C++ needs NVRTC (set VMGPU_LIBNVRTC)")?;
    let arch = format!("--gpu-architecture=compute_{major}{minor}");
    let dir = a
        .module
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(std::path::Path::new("."));
    let include = format!("--include-path={}", dir.display());
    let mut options: Vec<&str> = vec![&arch, &include];
    options.extend(a.nvrtc_opt.iter().map(String::as_str));
    let name = a
        .module
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "module.cu".into());
    let compiled = nvrtc.compile(source, &name, &options).map_err(|e| {
        anyhow::Error::new(e).context(format!("cannot compile {}", a.module.display()))
    })?;
    if !compiled.log.trim().is_empty() {
        log::warn!("NVRTC: {}", compiled.log.trim_end());
    }
    Ok(compiled.ptx)
}

/// The kernel argument of `spec`: `buffer` for a buffer argument (null before the
/// buffers exist, as a stand-in for checking the arguments against the parameters).
fn kernel_arg<'a>(spec: &ArgSpec, buffer: Option<&'a DeviceBuffer<u8>>) -> KernelArg<'a> {
    match (spec, buffer) {
        (_, Some(b)) => KernelArg::from(b),
        (ArgSpec::Buffer(_), None) => KernelArg::pointer(DevicePtr::NULL),
        (ArgSpec::Scalar(elem, bytes), None) => scalar_arg(*elem, bytes),
        (ArgSpec::Bytes(bytes), None) => KernelArg::bytes(bytes.clone()),
    }
}

fn scalar_arg(elem: Elem, b: &[u8]) -> KernelArg<'static> {
    let mut w = [0u8; 8];
    w[..b.len().min(8)].copy_from_slice(&b[..b.len().min(8)]);
    let u = u64::from_le_bytes(w);
    match elem {
        Elem::U8 => KernelArg::from(u as u8),
        Elem::I8 => KernelArg::from(u as u8 as i8),
        Elem::U16 => KernelArg::from(u as u16),
        Elem::I16 => KernelArg::from(u as u16 as i16),
        Elem::U32 => KernelArg::from(u as u32),
        Elem::I32 => KernelArg::from(u as u32 as i32),
        Elem::U64 => KernelArg::from(u),
        Elem::I64 => KernelArg::from(u as i64),
        Elem::F32 => KernelArg::from(f32::from_bits(u as u32)),
        Elem::F64 => KernelArg::from(f64::from_bits(u)),
    }
}

/// The launch geometry against the device's limits (a usage error, before anything is
/// allocated).
fn check_geometry(gpu: &Gpu, a: &RunArgs) -> anyhow::Result<()> {
    let attr = |x: A| gpu.attribute(x).map(|v| v.max(0) as u64);
    let max_block = [
        attr(A::MaxBlockDimX)?,
        attr(A::MaxBlockDimY)?,
        attr(A::MaxBlockDimZ)?,
    ];
    let max_grid = [
        attr(A::MaxGridDimX)?,
        attr(A::MaxGridDimY)?,
        attr(A::MaxGridDimZ)?,
    ];
    let threads: u64 = a.block.iter().map(|&x| x as u64).product();
    let max_threads = attr(A::MaxThreadsPerBlock)?;
    let xyz = |d: [u64; 3]| format!("{},{},{}", d[0], d[1], d[2]);
    let dims = |d: [u32; 3]| format!("{},{},{}", d[0], d[1], d[2]);
    if threads > max_threads || a.block.iter().zip(max_block).any(|(&b, m)| b as u64 > m) {
        return Err(usage(format!(
            "--block {}: {threads} threads; the device allows {max_threads} per block and at \
             most {} in x,y,z",
            dims(a.block),
            xyz(max_block)
        )));
    }
    if a.grid.iter().zip(max_grid).any(|(&g, m)| g as u64 > m) {
        return Err(usage(format!(
            "--grid {}: the device allows at most {} blocks in x,y,z",
            dims(a.grid),
            xyz(max_grid)
        )));
    }
    let optin = attr(A::MaxSharedMemoryPerBlockOptin)?;
    if a.shared as u64 > optin {
        return Err(usage(format!(
            "--shared {}: the device allows at most {optin} bytes per block",
            a.shared
        )));
    }
    Ok(())
}

fn make_buffer(gpu: &Gpu, b: &BufferSpec, len: usize) -> anyhow::Result<DeviceBuffer<u8>> {
    let bytes = len
        .checked_mul(b.elem.size())
        .ok_or_else(|| usage(format!("{len} x {} overflows", b.elem.name())))?;
    if let Ok(info) = gpu.mem_info() {
        if bytes as u64 > info.free {
            return Err(anyhow::anyhow!(
                "{bytes} bytes do not fit in the device's free memory ({} free of {})",
                human_bytes(info.free),
                human_bytes(info.total)
            ));
        }
    }
    let host = b.host_bytes(len).map_err(anyhow::Error::msg)?;
    Ok(gpu.htod(&host)?)
}

fn error_report(e: &DriverError, args: &[ArgReport], text: &str) -> ErrorReport {
    let cuda = e.as_cuda();
    let fault = cuda
        .and_then(|c| c.fault.as_deref())
        .map(|f| fault_report(f, args, text));
    ErrorReport {
        cuda_name: e.cuda_name().map(str::to_string),
        code: e.code(),
        message: e.to_string(),
        fault,
    }
}

fn fault_report(f: &MemoryFault, args: &[ArgReport], text: &str) -> FaultReport {
    let nearest = f.nearest.as_ref().map(|n| {
        let arg = args
            .iter()
            .find(|r| r.device_address.as_deref() == Some(&format!("{:#x}", n.base.0)));
        NearestReport {
            argument: arg.map(|r| r.index),
            param: arg.map(|r| r.param.clone()),
            base: format!("{:#x}", n.base.0),
            size: n.size,
            offset: n.offset,
            freed: n.freed,
            variable: n.name.clone(),
        }
    });
    FaultReport {
        kind: fault_kind(f.kind),
        access: if f.write { "store" } else { "load" },
        space: f.space,
        address: format!("{:#x}", f.address),
        size: f.size,
        kernel: f.at.kernel.clone(),
        block: f.at.block,
        thread: f.at.thread,
        ptx_line: f.at.line,
        ptx_text: text
            .lines()
            .nth((f.at.line as usize).saturating_sub(1))
            .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
            .filter(|_| f.at.line > 0),
        nearest,
    }
}

fn print_text(r: &RunReport, out: &mut Out) {
    let d = |v: [u32; 3]| format!("{},{},{}", v[0], v[1], v[2]);
    outln!(out, "{}", r.backend.line());
    outln!(out, "device 0: {}", r.device);
    outln!(
        out,
        "kernel {} from {}: grid {} block {}, {} bytes of dynamic shared memory",
        r.kernel,
        r.module.display(),
        d(r.grid),
        d(r.block),
        r.shared_bytes
    );
    for g in &r.args {
        let what = match (g.elem, g.len) {
            (Some(e), Some(n)) => format!(
                "{n} x {e} ({}) at {}",
                human_bytes(g.bytes as u64),
                g.device_address.as_deref().unwrap_or("?")
            ),
            _ => format!("{} bytes", g.bytes),
        };
        outln!(
            out,
            "  arg {} {} .{} = {}: {}",
            g.index,
            g.param,
            g.param_type,
            g.spec,
            what
        );
    }
    match &r.error {
        None => {
            outln!(
                out,
                "launch: ok, {} kernel (events), {:.3} ms wall (launch to synchronize)",
                r.kernel_ms
                    .map(|k| format!("{k:.3} ms"))
                    .unwrap_or_else(|| "? ms".into()),
                r.wall_ms
            );
            for s in &r.shown {
                let n = r.args[s.index].len.unwrap_or(0);
                outln!(
                    out,
                    "arg {}: [{}{}]",
                    s.index,
                    s.values.join(", "),
                    if n > s.values.len() {
                        format!(", ... ({n} elements)")
                    } else {
                        String::new()
                    }
                );
            }
            for o in &r.outputs {
                let g = &r.args[o.index];
                outln!(
                    out,
                    "wrote {}: {} bytes (arg {}, {} x {})",
                    o.path.display(),
                    o.bytes,
                    o.index,
                    g.len.unwrap_or(0),
                    g.elem.unwrap_or("?")
                );
            }
        }
        Some(e) => {
            outln!(
                out,
                "launch: FAILED after {:.3} ms: {}",
                r.wall_ms,
                e.cuda_name.as_deref().unwrap_or("error")
            );
            if let Some(f) = &e.fault {
                outln!(out, "fault report:");
                outln!(
                    out,
                    "  {} {}-byte {} {} at address {}",
                    f.kind,
                    f.size,
                    f.space,
                    f.access,
                    f.address
                );
                outln!(out, "  kernel   {}", f.kernel);
                outln!(out, "  block    ({})", d(f.block));
                outln!(out, "  thread   ({})", d(f.thread));
                outln!(
                    out,
                    "  PTX      {}:{}{}",
                    r.ptx_name,
                    f.ptx_line,
                    f.ptx_text
                        .as_deref()
                        .map(|t| format!("  {t}"))
                        .unwrap_or_default()
                );
                match &f.nearest {
                    Some(n) => {
                        let whose = match (n.argument, &n.param, &n.variable) {
                            (Some(i), Some(p), _) => {
                                format!("arg {i} ({p}, `{}`)", r.args[i].spec)
                            }
                            (_, _, Some(v)) => format!("module variable `{v}`"),
                            _ => "an allocation".into(),
                        };
                        let rel = if n.offset >= 0 && (n.offset as u64) < n.size {
                            format!("{} bytes inside it", n.offset)
                        } else if n.offset >= 0 {
                            format!(
                                "offset {}, {} bytes past its end",
                                n.offset,
                                n.offset as u64 - n.size
                            )
                        } else {
                            format!("{} bytes before it", -n.offset)
                        };
                        outln!(
                            out,
                            "  nearest  {}{} at {}, {} bytes; the address is at {}",
                            if n.freed { "freed " } else { "" },
                            whose,
                            n.base,
                            n.size,
                            rel
                        );
                    }
                    None => outln!(out, "  nearest  none"),
                }
            }
        }
    }
}
