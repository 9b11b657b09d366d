//! The accelerator end to end on whichever backend is chosen: prints the choice and the
//! devices, runs vector_add, times a device-to-device copy on a stream with events,
//! and awaits an asynchronous download.
//!
//! ```sh
//! cargo run -p cuda-guest --example accel_demo                          # auto
//! VMGPU_CUDA_BACKEND=sim cargo run -p cuda-guest --example accel_demo   # simulator
//! ```

use cuda_guest::accel::Accelerator;
use cuda_guest::driver::safe::format_uuid;
use cuda_guest::driver::{DriverError, EventFlags, LaunchConfig, StreamFlags};
use cuda_guest::kernel_args;

const KERNELS_PTX: &str = include_str!("../tests/native-ptx/kernels.ptx");

fn main() {
    if let Err(e) = run() {
        eprintln!("accel_demo: {e}");
        std::process::exit(1);
    }
}

fn run() -> Result<(), DriverError> {
    let acc = Accelerator::new()?;
    println!("backend: {}", acc.selection());
    for p in acc.devices()? {
        println!("device {p} GPU-{}", format_uuid(&p.uuid));
    }
    let gpu = acc.gpu(0)?;

    let n = 1u32 << 16;
    let a: Vec<f32> = (0..n).map(|i| i as f32).collect();
    let b: Vec<f32> = (0..n).map(|i| (n - i) as f32).collect();
    let (da, db) = (gpu.htod(&a)?, gpu.htod(&b)?);
    let mut dc = gpu.alloc_zeroed::<f32>(n as usize)?;
    let module = gpu.load_ptx(KERNELS_PTX)?;
    let add = module.function("vector_add")?;
    let stream = gpu.stream(StreamFlags { non_blocking: true })?;
    // SAFETY: vector_add reads a and b and writes c within n elements.
    unsafe {
        add.launch(
            &stream,
            LaunchConfig::for_elements(n, 256),
            &kernel_args![&da, &db, &mut dc, n],
        )
    }?;
    let c = stream
        .download(&dc.as_slice(), vec![0f32; n as usize])?
        .wait()?;
    let ok = c.iter().all(|&x| x == n as f32);
    println!(
        "vector_add over {n} elements: {}",
        if ok { "ok" } else { "WRONG" }
    );

    let bytes = 64usize << 20;
    let src = gpu.alloc_zeroed::<u8>(bytes)?;
    let mut dst = gpu.alloc_zeroed::<u8>(bytes)?;
    let (start, end) = (
        gpu.event(EventFlags::default())?,
        gpu.event(EventFlags::default())?,
    );
    start.record(&stream)?;
    dst.copy_from_device_async(&src, &stream)?;
    end.record(&stream)?;
    end.synchronize()?;
    let ms = end.elapsed_since(&start)?;
    println!(
        "D2D copy of {} MiB: {ms:.3} ms ({:.1} GB/s)",
        bytes >> 20,
        bytes as f64 / (ms as f64 / 1e3) / 1e9
    );
    let info = gpu.mem_info()?;
    println!(
        "memory: {} MiB free of {} MiB",
        info.free >> 20,
        info.total >> 20
    );
    Ok(())
}
