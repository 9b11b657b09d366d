//! Runs inside the QEMU guest of the real-kernel VFIO suite (see `run.sh` beside it): drives
//! QEMU's `edu` device, already bound to vfio-pci, through the `vm_passthrough::vfio` API.
//!
//! Usage: `vfio-edu-guest <BDF> <IOMMU group>`. Prints one `PASS name` / `FAIL name: reason`
//! line per check and ends with `vfio-edu: N passed, M failed`; exits 0 iff all passed.

use std::process::ExitCode;
use std::thread::sleep;
use std::time::{Duration, Instant};

use pcie::{Host, PciAddress};
use vm_memory::{Bytes, GuestAddress, GuestMemoryMmap};
// edu's register map, shared with the fake edu device of vm_passthrough's own tests.
use vm_passthrough::vfio::fake::edu::{
    dma_cmd, reg, status, DMA_BUFFER_ADDR, EDU_DEVICE_ID, EDU_ID, EDU_VENDOR_ID,
};
use vm_passthrough::vfio::{
    AssignError, AssignedDevice, IrqKind, KernelVfio, MappedBar, BAR0_REGION_INDEX,
};
use vmm_sys_util::eventfd::{EventFd, EFD_NONBLOCK};

/// Guest memory handed to the device: below edu's 28-bit DMA mask.
const RAM_GPA: u64 = 0x10_0000;
const RAM_SIZE: usize = 0x2000;
/// QEMU <= 7.2 aborts on a full 4 KiB edu DMA (off-by-one range check).
const DMA_LEN: usize = 2048;
const TIMEOUT: Duration = Duration::from_secs(5);

#[derive(Default)]
struct Report {
    passed: u32,
    failed: u32,
}

impl Report {
    /// Records one check; `Err` carries the reason it failed.
    fn check(&mut self, name: &str, outcome: Result<String, String>) -> bool {
        match outcome {
            Ok(detail) => {
                self.passed += 1;
                if detail.is_empty() {
                    println!("PASS {name}");
                } else {
                    println!("PASS {name} ({detail})");
                }
                true
            }
            Err(reason) => {
                self.failed += 1;
                println!("FAIL {name}: {reason}");
                false
            }
        }
    }

    /// The value of a step the checks after it need; a failure is recorded as check `name`
    /// (success is left for the caller to report, with what it learnt).
    fn require<T, E: std::fmt::Display>(&mut self, name: &str, step: Result<T, E>) -> Option<T> {
        match step {
            Ok(value) => Some(value),
            Err(e) => {
                self.check(name, Err(e.to_string()));
                None
            }
        }
    }
}

fn wait_until(mut done: impl FnMut() -> Result<bool, AssignError>) -> Result<Duration, String> {
    let start = Instant::now();
    loop {
        if done().map_err(|e| e.to_string())? {
            return Ok(start.elapsed());
        }
        if start.elapsed() > TIMEOUT {
            return Err(format!("timed out after {TIMEOUT:?}"));
        }
        sleep(Duration::from_millis(1));
    }
}

fn wait_eventfd(eventfd: &EventFd) -> Result<(u64, Duration), String> {
    let start = Instant::now();
    loop {
        match eventfd.read() {
            Ok(count) => return Ok((count, start.elapsed())),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(e) => return Err(format!("eventfd read: {e}")),
        }
        if start.elapsed() > TIMEOUT {
            return Err(format!("no interrupt within {TIMEOUT:?}"));
        }
        sleep(Duration::from_millis(1));
    }
}

/// Programs one edu DMA and waits for the engine to finish.
fn run_dma(
    bar: &MappedBar<KernelVfio>,
    src: u64,
    dst: u64,
    len: u64,
    cmd: u64,
) -> Result<Duration, String> {
    let program = || -> Result<(), AssignError> {
        bar.write_u64(reg::DMA_SRC, src)?;
        bar.write_u64(reg::DMA_DST, dst)?;
        bar.write_u64(reg::DMA_COUNT, len)?;
        bar.write_u64(reg::DMA_CMD, cmd)
    };
    program().map_err(|e| e.to_string())?;
    wait_until(|| Ok(bar.read_u64(reg::DMA_CMD)? & dma_cmd::START == 0))
}

fn read_id(dev: &AssignedDevice<KernelVfio>) -> Result<u32, AssignError> {
    let mut id = [0u8; 4];
    dev.read_region(BAR0_REGION_INDEX, reg::ID, &mut id)?;
    Ok(u32::from_le_bytes(id))
}

fn expect<T: PartialEq + std::fmt::Debug>(what: &str, got: T, want: T) -> Result<String, String> {
    if got == want {
        Ok(String::new())
    } else {
        Err(format!("{what}: got {got:x?}, want {want:x?}"))
    }
}

/// The DMAR fault lines the guest kernel logged, if any (informational).
fn dmar_faults() -> Vec<String> {
    let Ok(out) = std::process::Command::new("dmesg").output() else {
        return Vec::new();
    };
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| {
            l.contains("DMAR")
                && (l.contains("fault") || l.contains("DMA Write") || l.contains("DMA Read"))
        })
        .map(str::to_owned)
        .collect()
}

fn run(address: PciAddress, group: u32, report: &mut Report) {
    // (2) open, identify, compute
    let host = Host::local();
    let wrong_group = group.wrapping_add(1);
    report.check(
        "open_wrong_group_refused",
        match AssignedDevice::open_group(&host, address, wrong_group) {
            Ok(_) => Err(format!("opened as a member of group {wrong_group}")),
            Err(AssignError::IommuGroupMismatch {
                expected, actual, ..
            }) if (expected, actual) == (wrong_group, group) => Ok(String::new()),
            Err(e) => Err(format!("unexpected error: {e}")),
        },
    );
    let Some(dev) = report.require("open_device", AssignedDevice::open(&host, address)) else {
        return;
    };
    report.check(
        "open_device",
        Ok(format!("{address}, group {group}, {:?}", dev.device_info())),
    );
    report.check(
        "config_ids",
        dev.config_read_u32(0)
            .map_err(|e| e.to_string())
            .and_then(|ids| {
                let want = u32::from(EDU_DEVICE_ID) << 16 | u32::from(EDU_VENDOR_ID);
                expect("vendor/device", ids, want)
            }),
    );
    let Some(bar) = report.require("bar0_mmap", dev.map_bar(0)) else {
        return;
    };
    report.check(
        "bar0_mmap",
        if bar.is_mapped(reg::ID, 4) {
            Ok(format!(
                "size {:#x}, mapped {:x?}",
                bar.size(),
                bar.mapped_ranges()
            ))
        } else {
            Err(format!(
                "ID register not mapped; mapped ranges {:x?}",
                bar.mapped_ranges()
            ))
        },
    );
    report.check(
        "id_via_mmap",
        bar.read_u32(reg::ID)
            .map_err(|e| e.to_string())
            .and_then(|id| expect("ID", id, EDU_ID)),
    );
    report.check(
        "id_via_region_read",
        read_id(&dev)
            .map_err(|e| e.to_string())
            .and_then(|id| expect("ID", id, EDU_ID)),
    );
    let liveness = bar
        .write_u32(reg::LIVENESS, 0x1234_5678)
        .and_then(|()| bar.read_u32(reg::LIVENESS));
    report.check(
        "liveness",
        liveness
            .map_err(|e| e.to_string())
            .and_then(|v| expect("liveness", v, !0x1234_5678)),
    );
    let factorial = bar
        .write_u32(reg::FACTORIAL, 10)
        .map_err(|e| e.to_string())
        .and_then(|()| {
            wait_until(|| Ok(bar.read_u32(reg::STATUS)? & status::COMPUTING == 0))?;
            bar.read_u32(reg::FACTORIAL).map_err(|e| e.to_string())
        });
    report.check(
        "factorial",
        factorial.and_then(|v| expect("10!", v, 3_628_800)),
    );

    // (3) DMA through guest memory mapped at IOVA = GPA
    report.check(
        "bus_master",
        dev.enable_bus_master()
            .map(|()| String::new())
            .map_err(|e| e.to_string()),
    );
    let Some(memory) = report.require(
        "guest_memory",
        GuestMemoryMmap::from_ranges(&[(GuestAddress(RAM_GPA), RAM_SIZE)]),
    ) else {
        return;
    };
    let Some(mappings) = report.require("dma_map", dev.map_guest_memory(&memory)) else {
        return;
    };
    report.check("dma_map", Ok(format!("{:x?}", mappings.ranges())));
    let pattern: Vec<u8> = (0..DMA_LEN).map(|i| (i * 7 + 3) as u8).collect();
    let back = RAM_GPA + 0x1000;
    let round_trip = memory
        .write_slice(&pattern, GuestAddress(RAM_GPA))
        .and_then(|()| memory.write_slice(&[0u8; DMA_LEN], GuestAddress(back)))
        .map_err(|e| e.to_string())
        .and_then(|()| {
            let to_device = run_dma(
                &bar,
                RAM_GPA,
                DMA_BUFFER_ADDR,
                DMA_LEN as u64,
                dma_cmd::START,
            )?;
            let to_ram = run_dma(
                &bar,
                DMA_BUFFER_ADDR,
                back,
                DMA_LEN as u64,
                dma_cmd::START | dma_cmd::TO_RAM,
            )?;
            let mut copied = vec![0u8; DMA_LEN];
            memory
                .read_slice(&mut copied, GuestAddress(back))
                .map_err(|e| e.to_string())?;
            if copied != pattern {
                let first = copied
                    .iter()
                    .zip(&pattern)
                    .position(|(a, b)| a != b)
                    .unwrap_or(0);
                return Err(format!(
                    "byte {first}: got {:#x}, want {:#x}",
                    copied[first], pattern[first]
                ));
            }
            Ok(format!(
                "{DMA_LEN} bytes, RAM->device {to_device:?}, device->RAM {to_ram:?}"
            ))
        });
    report.check("dma_round_trip", round_trip);

    // (4) MSI on an eventfd
    let msi = EventFd::new(EFD_NONBLOCK)
        .map_err(|e| e.to_string())
        .and_then(|eventfd| {
            dev.enable_irq(IrqKind::Msi, &[&eventfd])
                .map_err(|e| e.to_string())?;
            Ok(eventfd)
        });
    match msi {
        Err(e) => {
            report.check("msi_enable", Err(e));
        }
        Ok(eventfd) => {
            report.check("msi_enable", Ok(String::new()));
            let delivered = bar
                .write_u32(reg::IRQ_RAISE, 0x1000)
                .map_err(|e| e.to_string())
                .and_then(|()| {
                    let (count, latency) = wait_eventfd(&eventfd)?;
                    let status = bar.read_u32(reg::IRQ_STATUS).map_err(|e| e.to_string())?;
                    bar.write_u32(reg::IRQ_ACK, status)
                        .map_err(|e| e.to_string())?;
                    expect("irq status", status & 0x1000, 0x1000)?;
                    Ok(format!("eventfd count {count} after {latency:?}"))
                });
            report.check("msi_delivered", delivered);
            report.check(
                "msi_disable",
                dev.disable_irq(IrqKind::Msi)
                    .map(|()| String::new())
                    .map_err(|e| e.to_string()),
            );
        }
    }

    // INTx, which edu falls back to with MSI off: delivered, masked, unmasked.
    let intx = EventFd::new(EFD_NONBLOCK)
        .map_err(|e| e.to_string())
        .and_then(|eventfd| {
            dev.enable_irq(IrqKind::Intx, &[&eventfd])
                .map_err(|e| e.to_string())?;
            bar.write_u32(reg::IRQ_RAISE, 0x2)
                .map_err(|e| e.to_string())?;
            let (count, latency) = wait_eventfd(&eventfd)?;
            bar.write_u32(reg::IRQ_ACK, 0x2)
                .map_err(|e| e.to_string())?;
            dev.unmask_intx().map_err(|e| e.to_string())?;
            dev.disable_irq(IrqKind::Intx).map_err(|e| e.to_string())?;
            Ok(format!("eventfd count {count} after {latency:?}, unmasked"))
        });
    report.check("intx_delivered", intx);

    // (5) unmap, then a DMA into the unmapped IOVA must not land
    report.check(
        "dma_unmap",
        mappings
            .unmap()
            .map(|()| String::new())
            .map_err(|e| e.to_string()),
    );
    let before = dmar_faults().len();
    let blocked = memory
        .write_slice(&[0xaa; 256], GuestAddress(back))
        .map_err(|e| e.to_string())
        .and_then(|()| {
            run_dma(
                &bar,
                DMA_BUFFER_ADDR,
                back,
                256,
                dma_cmd::START | dma_cmd::TO_RAM,
            )
        })
        .and_then(|_| {
            let mut after = [0u8; 256];
            memory
                .read_slice(&mut after, GuestAddress(back))
                .map_err(|e| e.to_string())?;
            match after.iter().position(|b| *b != 0xaa) {
                Some(i) => Err(format!(
                    "DMA landed in unmapped memory: byte {i} is {:#x}",
                    after[i]
                )),
                None => Ok("destination unchanged".to_owned()),
            }
        });
    report.check("dma_blocked_after_unmap", blocked);
    sleep(Duration::from_millis(100));
    let faults = dmar_faults();
    match faults.get(before..).and_then(<[String]>::last) {
        Some(line) => println!("  DMAR fault logged: {line}"),
        None => println!("  (no new DMAR fault line in dmesg)"),
    }

    // (6) reset: done, or reported as unsupported in line with the device flags
    let reset = match dev.reset() {
        Ok(()) => Ok("VFIO_DEVICE_RESET done".to_owned()),
        Err(AssignError::ResetNotSupported { .. }) if !dev.device_info().reset_supported => Ok(
            "not supported: the device has no reset method (VFIO_DEVICE_FLAGS_RESET clear)"
                .to_owned(),
        ),
        Err(e) => Err(e.to_string()),
    };
    report.check("reset", reset);
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    let usage = |why: String| {
        eprintln!("vfio-edu-guest: {why}");
        eprintln!("usage: vfio-edu-guest <BDF> <IOMMU group>");
        println!("vfio-edu: 0 passed, 1 failed");
        ExitCode::from(2)
    };
    let address = match args.get(1).map(|a| a.parse::<PciAddress>()) {
        Some(Ok(address)) => address,
        Some(Err(e)) => return usage(format!("invalid PCI address {e}")),
        None => return usage("no PCI address given".to_owned()),
    };
    let Some(group) = args.get(2).and_then(|g| g.parse::<u32>().ok()) else {
        return usage("missing or invalid IOMMU group number".to_owned());
    };
    let mut report = Report::default();
    run(address, group, &mut report);
    println!(
        "vfio-edu: {} passed, {} failed",
        report.passed, report.failed
    );
    if report.failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
