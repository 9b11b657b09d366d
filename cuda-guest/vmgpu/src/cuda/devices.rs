//! `vmgpu cuda devices`

use std::process::ExitCode;

use clap::Args;
use cuda_guest::driver::safe::{format_uuid, Gpu};
use cuda_guest::driver::{Backend, Device, DeviceAttribute as A};
use pcie::PciAddress;
use serde::Serialize;

use super::{accelerator, human_bytes, sim_config, BackendArgs, BackendInfo};
use crate::Out;

#[derive(Args)]
pub struct DevicesArgs {
    #[command(flatten)]
    backend: BackendArgs,
    /// Print JSON
    #[arg(long)]
    json: bool,
}

#[derive(Serialize)]
struct Listing {
    backend: BackendInfo,
    devices: Vec<DeviceInfo>,
}

#[derive(Serialize)]
struct Capability {
    major: u32,
    minor: u32,
}

/// One device (field names are documented in the README and stable).
#[derive(Serialize)]
struct DeviceInfo {
    ordinal: u32,
    name: String,
    /// `GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx`, as nvidia-smi prints it.
    uuid: String,
    /// What the driver reports (`cuDeviceGetPCIBusId`).
    pci_bus_id: String,
    /// The same as a `pcie::PciAddress` (`DDDD:BB:DD.F`), `null` when it does not parse.
    pci_address: Option<PciAddress>,
    compute_capability: Capability,
    total_memory: u64,
    free_memory: Option<u64>,
    multiprocessors: u32,
    max_threads_per_block: u32,
    max_threads_per_multiprocessor: u32,
    max_block: [u32; 3],
    max_grid: [u32; 3],
    shared_memory_per_block: u32,
    shared_memory_per_block_optin: u32,
    shared_memory_per_multiprocessor: u32,
    constant_memory: u32,
    registers_per_block: u32,
    warp_size: u32,
    clock_khz: u32,
    memory_clock_khz: u32,
    memory_bus_width: u32,
    l2_cache_bytes: u32,
    ecc: bool,
    unified_addressing: bool,
    integrated: bool,
    concurrent_kernels: bool,
    async_engines: u32,
    host_register: bool,
}

fn query(b: &dyn Backend, ordinal: u32, gpu: Option<&Gpu>) -> anyhow::Result<DeviceInfo> {
    let dev = Device::new(ordinal);
    let a = |attr: A| -> anyhow::Result<u32> { Ok(b.device_attribute(dev, attr)?.max(0) as u32) };
    let (major, minor) = b.compute_capability(dev)?;
    let pci_bus_id = b.device_pci_bus_id(dev)?;
    Ok(DeviceInfo {
        ordinal,
        name: b.device_name(dev)?,
        uuid: format!("GPU-{}", format_uuid(&b.device_uuid(dev)?)),
        pci_address: pci_bus_id.parse().ok(),
        pci_bus_id,
        compute_capability: Capability { major, minor },
        total_memory: b.device_total_mem(dev)?,
        free_memory: gpu.and_then(|g| g.mem_info().ok()).map(|m| m.free),
        multiprocessors: a(A::MultiprocessorCount)?,
        max_threads_per_block: a(A::MaxThreadsPerBlock)?,
        max_threads_per_multiprocessor: a(A::MaxThreadsPerMultiprocessor)?,
        max_block: [
            a(A::MaxBlockDimX)?,
            a(A::MaxBlockDimY)?,
            a(A::MaxBlockDimZ)?,
        ],
        max_grid: [a(A::MaxGridDimX)?, a(A::MaxGridDimY)?, a(A::MaxGridDimZ)?],
        shared_memory_per_block: a(A::MaxSharedMemoryPerBlock)?,
        shared_memory_per_block_optin: a(A::MaxSharedMemoryPerBlockOptin)?,
        shared_memory_per_multiprocessor: a(A::MaxSharedMemoryPerMultiprocessor)?,
        constant_memory: a(A::TotalConstantMemory)?,
        registers_per_block: a(A::MaxRegistersPerBlock)?,
        warp_size: a(A::WarpSize)?,
        clock_khz: a(A::ClockRate)?,
        memory_clock_khz: a(A::MemoryClockRate)?,
        memory_bus_width: a(A::GlobalMemoryBusWidth)?,
        l2_cache_bytes: a(A::L2CacheSize)?,
        ecc: a(A::EccEnabled)? != 0,
        unified_addressing: a(A::UnifiedAddressing)? != 0,
        integrated: a(A::Integrated)? != 0,
        concurrent_kernels: a(A::ConcurrentKernels)? != 0,
        async_engines: a(A::AsyncEngineCount)?,
        host_register: a(A::HostRegisterSupported)? != 0,
    })
}

pub fn run(args: &DevicesArgs, out: &mut Out) -> anyhow::Result<ExitCode> {
    let (acc, backend) = accelerator(&args.backend, sim_config(None, None))?;
    let count = acc.device_count()?;
    let mut devices = Vec::with_capacity(count as usize);
    for ordinal in 0..count {
        // Free memory needs the device's context; the other queries do not, so a device
        // whose context cannot be made still lists.
        let gpu = match acc.gpu(ordinal) {
            Ok(g) => Some(g),
            Err(e) => {
                log::warn!("device {ordinal}: no context, free memory unknown: {e}");
                None
            }
        };
        let info = query(acc.backend().as_ref(), ordinal, gpu.as_ref())
            .map_err(|e| e.context(format!("querying CUDA device {ordinal}")))?;
        devices.push(info);
    }
    let listing = Listing { backend, devices };
    if args.json {
        crate::print_json(out, &listing)?;
    } else {
        print_text(&listing, out);
    }
    Ok(ExitCode::SUCCESS)
}

fn on_off(b: bool) -> &'static str {
    if b {
        "yes"
    } else {
        "no"
    }
}

fn print_text(l: &Listing, out: &mut Out) {
    outln!(out, "{}", l.backend.line());
    if let Some(v) = l.backend.driver_version {
        outln!(out, "CUDA driver API {}.{}", v / 1000, v % 1000 / 10);
    }
    if l.devices.is_empty() {
        outln!(out, "no devices");
    }
    for d in &l.devices {
        outln!(out);
        outln!(out, "device {}: {}", d.ordinal, d.name);
        let row = |out: &mut Out, k: &str, v: String| outln!(out, "  {k:<22} {v}");
        row(out, "UUID", d.uuid.clone());
        row(
            out,
            "PCI bus id",
            match &d.pci_address {
                Some(a) => a.to_string(),
                None => format!("{} (not a PCI address)", d.pci_bus_id),
            },
        );
        row(
            out,
            "compute capability",
            format!(
                "{}.{} (sm_{}{})",
                d.compute_capability.major,
                d.compute_capability.minor,
                d.compute_capability.major,
                d.compute_capability.minor
            ),
        );
        row(
            out,
            "memory",
            format!(
                "{} total, {}",
                human_bytes(d.total_memory),
                match d.free_memory {
                    Some(f) => format!("{} free", human_bytes(f)),
                    None => "free unknown".into(),
                }
            ),
        );
        row(
            out,
            "multiprocessors",
            format!(
                "{} ({} threads each)",
                d.multiprocessors, d.max_threads_per_multiprocessor
            ),
        );
        row(
            out,
            "threads per block",
            d.max_threads_per_block.to_string(),
        );
        row(
            out,
            "block limits",
            format!(
                "{} x {} x {}",
                d.max_block[0], d.max_block[1], d.max_block[2]
            ),
        );
        row(
            out,
            "grid limits",
            format!("{} x {} x {}", d.max_grid[0], d.max_grid[1], d.max_grid[2]),
        );
        row(
            out,
            "shared memory",
            format!(
                "{} per block ({} opt-in), {} per multiprocessor",
                human_bytes(d.shared_memory_per_block.into()),
                human_bytes(d.shared_memory_per_block_optin.into()),
                human_bytes(d.shared_memory_per_multiprocessor.into())
            ),
        );
        row(
            out,
            "constant memory",
            human_bytes(d.constant_memory.into()),
        );
        row(
            out,
            "registers per block",
            d.registers_per_block.to_string(),
        );
        row(out, "warp size", d.warp_size.to_string());
        row(
            out,
            "clocks",
            format!(
                "{} MHz SM, {} MHz memory, {}-bit bus",
                d.clock_khz / 1000,
                d.memory_clock_khz / 1000,
                d.memory_bus_width
            ),
        );
        row(out, "L2 cache", human_bytes(d.l2_cache_bytes.into()));
        row(out, "ECC", on_off(d.ecc).into());
        row(
            out,
            "unified addressing",
            on_off(d.unified_addressing).into(),
        );
        row(out, "integrated", on_off(d.integrated).into());
        row(
            out,
            "concurrent kernels",
            on_off(d.concurrent_kernels).into(),
        );
        row(out, "copy engines", d.async_engines.to_string());
        row(out, "host registration", on_off(d.host_register).into());
    }
}
