//! Runs inside the QEMU guest of the real-kernel VFIO suite (see `run.sh` beside it): drives
//! the two QEMU `edu` devices of one IOMMU group, already bound to vfio-pci, through the
//! `vm_passthrough::vfio` API, both opened in one KVM-registered container.
//!
//! Usage: `vfio-edu-guest <BDF> <IOMMU group> <BDF of the group mate>`. Prints one `PASS name` /
//! `FAIL name: reason` line per check and ends with `vfio-edu: N passed, M failed`; exits 0 iff
//! all passed.

use std::fs::File;
use std::os::fd::{BorrowedFd, RawFd};
use std::process::ExitCode;
use std::thread::sleep;
use std::time::{Duration, Instant};

use pcie::{Host, PciAddress};
use vm_memory::{Bytes, GuestAddress, GuestMemoryMmap};
// edu's register map: the one the fake edu of vm_passthrough's own tests emulates.
use vm_passthrough::vfio::edu::{
    dma_cmd, reg, status, DMA_BUFFER_ADDR, EDU_DEVICE_ID, EDU_ID, EDU_VENDOR_ID,
};
use vm_passthrough::vfio::kvm_ioctls::{Kvm, VmFd};
use vm_passthrough::vfio::{
    AssignError, AssignedDevice, Container, ErrorChain, IrqKind, KernelDma, KernelVfio, MappedBar,
    BAR0_REGION_INDEX,
};
use vmm_sys_util::eventfd::{EventFd, EFD_NONBLOCK};
use vmm_sys_util::ioctl::ioctl_with_ref;

/// Guest memory handed to the devices: below edu's 28-bit DMA mask (256 MiB).
const RAM_GPA: u64 = 0x10_0000;
const RAM_SIZE: usize = 0x4000;
/// QEMU <= 7.2 aborts on a full 4 KiB edu DMA (off-by-one range check).
const DMA_LEN: usize = 2048;
const TIMEOUT: Duration = Duration::from_secs(5);
/// How long a DMAR fault may take to reach the kernel log after the blocked DMA finished.
const FAULT_LOG_TIMEOUT: Duration = Duration::from_secs(2);
/// Every check of the suite, one name a line (`#` comments): run.sh fails the run when one is
/// not reported, and a check reported here must be listed.
const CHECKS: &str = include_str!("checks.txt");

/// `struct kvm_device_attr`, for `KVM_SET_DEVICE_ATTR` on the KVM VFIO device.
#[repr(C)]
struct KvmDeviceAttr {
    flags: u32,
    group: u32,
    attr: u64,
    addr: u64,
}
/// The ioctl numbers, in a private module: the macro makes undocumented `pub fn`s.
mod ioctls {
    use super::KvmDeviceAttr;
    vmm_sys_util::ioctl_iow_nr!(KVM_SET_DEVICE_ATTR, 0xae, 0xe1, KvmDeviceAttr);
}
use ioctls::KVM_SET_DEVICE_ATTR;
/// `KVM_DEV_VFIO_FILE` (formerly `KVM_DEV_VFIO_GROUP`) and its `_ADD` attribute.
const KVM_DEV_VFIO_FILE: u32 = 1;
const KVM_DEV_VFIO_FILE_ADD: u64 = 1;
/// Linux's `EEXIST` (this crate does not depend on libc).
const EEXIST: i32 = 17;

#[derive(Default)]
struct Report {
    passed: u32,
    failed: u32,
}

/// Whether `name` is one of the suite's checks (`checks.txt`).
fn listed(name: &str) -> bool {
    CHECKS
        .lines()
        .filter_map(|line| line.split('#').next())
        .any(|line| line.trim() == name)
}

/// An error with its sources, each once (the errno included).
fn chain(error: &(dyn std::error::Error + 'static)) -> String {
    ErrorChain(error).to_string()
}

impl Report {
    /// Records one check; `Err` carries the reason it failed.
    fn check(&mut self, name: &str, outcome: Result<String, String>) -> bool {
        let outcome = match outcome {
            Ok(_) if !listed(name) => Err("not listed in tests/vfio-edu/checks.txt".to_owned()),
            outcome => outcome,
        };
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
    fn require<T, E: std::error::Error + 'static>(
        &mut self,
        name: &str,
        step: Result<T, E>,
    ) -> Option<T> {
        match step {
            Ok(value) => Some(value),
            Err(e) => {
                self.check(name, Err(chain(&e)));
                None
            }
        }
    }
}

fn wait_until(mut done: impl FnMut() -> Result<bool, AssignError>) -> Result<Duration, String> {
    let start = Instant::now();
    loop {
        if done().map_err(|e| chain(&e))? {
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
    program().map_err(|e| chain(&e))?;
    wait_until(|| Ok(bar.read_u64(reg::DMA_CMD)? & dma_cmd::START == 0))
}

/// `DMA_LEN` bytes derived from `seed`.
fn pattern(seed: u8) -> Vec<u8> {
    (0..DMA_LEN)
        .map(|i| (i as u8).wrapping_mul(7).wrapping_add(seed))
        .collect()
}

/// Has `bar`'s device copy `DMA_LEN` bytes from guest memory at `src` into its buffer and back
/// out to `dst` (cleared first), and checks that `want` landed there.
fn dma_copy(
    bar: &MappedBar<KernelVfio>,
    memory: &GuestMemoryMmap,
    src: u64,
    dst: u64,
    want: &[u8],
) -> Result<String, String> {
    memory
        .write_slice(&[0u8; DMA_LEN], GuestAddress(dst))
        .map_err(|e| chain(&e))?;
    let to_device = run_dma(bar, src, DMA_BUFFER_ADDR, DMA_LEN as u64, dma_cmd::START)?;
    let to_ram = run_dma(
        bar,
        DMA_BUFFER_ADDR,
        dst,
        DMA_LEN as u64,
        dma_cmd::START | dma_cmd::TO_RAM,
    )?;
    let mut copied = vec![0u8; DMA_LEN];
    memory
        .read_slice(&mut copied, GuestAddress(dst))
        .map_err(|e| chain(&e))?;
    if let Some(first) = copied.iter().zip(want).position(|(a, b)| a != b) {
        return Err(format!(
            "byte {first} at {dst:#x}: got {:#x}, want {:#x}",
            copied[first], want[first]
        ));
    }
    Ok(format!(
        "{DMA_LEN} bytes {src:#x} -> device -> {dst:#x}, RAM->device {to_device:?}, \
         device->RAM {to_ram:?}"
    ))
}

/// Fills 256 bytes at `gpa` with `fill`, has `bar`'s device DMA its buffer there, and checks
/// that the memory still holds `fill` and that the IOMMU logged a fault for that IOVA: the
/// device tried, and the IOMMU blocked it.
fn dma_blocked(
    bar: &MappedBar<KernelVfio>,
    memory: &GuestMemoryMmap,
    gpa: u64,
    fill: u8,
) -> Result<String, String> {
    let seen = dmar_faults().len();
    memory
        .write_slice(&[fill; 256], GuestAddress(gpa))
        .map_err(|e| chain(&e))?;
    run_dma(
        bar,
        DMA_BUFFER_ADDR,
        gpa,
        256,
        dma_cmd::START | dma_cmd::TO_RAM,
    )?;
    let mut after = [0u8; 256];
    memory
        .read_slice(&mut after, GuestAddress(gpa))
        .map_err(|e| chain(&e))?;
    if let Some(i) = after.iter().position(|b| *b != fill) {
        return Err(format!(
            "DMA landed in unmapped memory: byte {i} at {gpa:#x} is {:#x}",
            after[i]
        ));
    }
    let fault = dmar_write_fault(seen, gpa)
        .map_err(|e| format!("destination {gpa:#x} unchanged, but {e}"))?;
    let record = fault.split("DMAR: ").nth(1).unwrap_or(&fault);
    Ok(format!(
        "destination {gpa:#x} still {fill:#x} x 256; DMAR: {record}"
    ))
}

fn read_id(dev: &AssignedDevice<KernelVfio>) -> Result<u32, AssignError> {
    let mut id = [0u8; 4];
    dev.read_region(BAR0_REGION_INDEX, reg::ID, &mut id)?;
    Ok(u32::from_le_bytes(id))
}

/// Compares what was read with what edu must answer; the detail shows both either way.
fn expect<T: PartialEq + std::fmt::LowerHex>(
    what: &str,
    got: T,
    want: T,
) -> Result<String, String> {
    if got == want {
        Ok(format!("{what}: read {got:#x}, want {want:#x}"))
    } else {
        Err(format!("{what}: got {got:#x}, want {want:#x}"))
    }
}

fn done<E: std::error::Error + 'static>(result: Result<(), E>) -> Result<String, String> {
    result.map(|()| String::new()).map_err(|e| chain(&e))
}

/// The DMAR fault records the guest kernel logged so far, in order: the lines with a
/// `fault addr` (e.g. `DMAR: [DMA Write NO_PASID] Request device [01:00.0] fault addr
/// 0x101000 [fault reason 0x05] PTE Write access is not set`).
fn dmar_faults() -> Vec<String> {
    let Ok(out) = std::process::Command::new("dmesg").output() else {
        return Vec::new();
    };
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.contains("DMAR") && l.contains("fault addr"))
        .map(str::to_owned)
        .collect()
}

/// The address of a DMAR fault line (`fault addr 0x101000` or `fault addr 101000`).
fn fault_address(line: &str) -> Option<u64> {
    let after = line.split("fault addr ").nth(1)?;
    let hex = after.split_whitespace().next()?;
    u64::from_str_radix(hex.trim_start_matches("0x"), 16).ok()
}

/// Waits for a DMAR fault record of a DMA write to the page of `iova` among the records after
/// the first `seen`; returns its line.
fn dmar_write_fault(seen: usize, iova: u64) -> Result<String, String> {
    let page = iova & !0xfff;
    let start = Instant::now();
    loop {
        let faults = dmar_faults();
        let new = faults.get(seen..).unwrap_or_default();
        if let Some(line) = new
            .iter()
            .find(|l| l.contains("DMA Write") && fault_address(l) == Some(page))
        {
            return Ok(line.clone());
        }
        if start.elapsed() > FAULT_LOG_TIMEOUT {
            return Err(format!(
                "no DMAR write fault for IOVA {page:#x} in the kernel log within \
                 {FAULT_LOG_TIMEOUT:?}; new fault records: {new:?}"
            ));
        }
        sleep(Duration::from_millis(10));
    }
}

/// The descriptor of this process whose `/proc/self/fd` link reads `target`.
fn fd_linked_to(target: &str) -> Option<RawFd> {
    std::fs::read_dir("/proc/self/fd")
        .ok()?
        .flatten()
        .find(|entry| std::fs::read_link(entry.path()).is_ok_and(|link| link.as_os_str() == target))
        .and_then(|entry| entry.file_name().to_str()?.parse().ok())
}

/// Asks the KVM VFIO device the container created to add the group file `/dev/vfio/<group>`
/// (both found among this process's descriptors): `Ok(None)` if KVM took it, `Ok(Some(errno))`
/// if it refused — `EEXIST` when the group is registered already.
fn kvm_add_group_file(group: u32) -> Result<Option<i32>, String> {
    let group_path = format!("/dev/vfio/{group}");
    let group_fd = fd_linked_to(&group_path).ok_or(format!("{group_path} is not open"))?;
    let kvm_fd =
        fd_linked_to("anon_inode:kvm-vfio").ok_or("no KVM VFIO device is open".to_owned())?;
    // SAFETY: the container holds `kvm_fd` open for the whole borrow, which only lasts for the
    // dup; the duplicate is ours.
    let kvm_device = File::from(
        unsafe { BorrowedFd::borrow_raw(kvm_fd) }
            .try_clone_to_owned()
            .map_err(|e| format!("dup of the KVM VFIO device: {e}"))?,
    );
    let attr = KvmDeviceAttr {
        flags: 0,
        group: KVM_DEV_VFIO_FILE,
        attr: KVM_DEV_VFIO_FILE_ADD,
        addr: &group_fd as *const RawFd as u64,
    };
    // SAFETY: `attr` is a complete kvm_device_attr whose `addr` points at `group_fd`, an i32
    // that outlives the call; the kernel only reads both. The fd is a KVM device.
    let rc = unsafe { ioctl_with_ref(&kvm_device, KVM_SET_DEVICE_ATTR(), &attr) };
    Ok((rc < 0).then(|| std::io::Error::last_os_error().raw_os_error().unwrap_or(0)))
}

/// A KVM VM to register the container's groups with (no vCPU is needed for that).
fn kvm_vm() -> Result<VmFd, String> {
    let kvm = Kvm::new().map_err(|e| format!("opening /dev/kvm: {e}"))?;
    kvm.create_vm().map_err(|e| format!("KVM_CREATE_VM: {e}"))
}

fn run(address: PciAddress, group: u32, mate: PciAddress, report: &mut Report) {
    // (2) one KVM-registered container; both functions of the group opened in it
    let host = Host::local();
    let wrong_group = group.wrapping_add(1);
    report.check(
        "open_wrong_group_refused",
        match AssignedDevice::open_group(&host, address, wrong_group) {
            Ok(_) => Err(format!("opened as a member of group {wrong_group}")),
            Err(AssignError::IommuGroupMismatch {
                expected, actual, ..
            }) if (expected, actual) == (wrong_group, group) => Ok(String::new()),
            Err(e) => Err(format!("unexpected error: {}", chain(&e))),
        },
    );
    let vm = match kvm_vm() {
        Ok(vm) => vm,
        Err(e) => {
            report.check("kvm_vfio_container", Err(e));
            return;
        }
    };
    let Some(container) = report.require("kvm_vfio_container", Container::with_kvm_device(&vm))
    else {
        return;
    };
    report.check(
        "kvm_vfio_container",
        Ok("KVM VM created, KVM VFIO device created, legacy container opened".to_owned()),
    );
    let Some(dev) = report.require(
        "open_device",
        AssignedDevice::open_in(&container, &host, address),
    ) else {
        return;
    };
    report.check(
        "open_device",
        Ok(format!("{address}, group {group}, {:?}", dev.device_info())),
    );
    report.check(
        "open_twice_refused",
        match AssignedDevice::open_in(&container, &host, address) {
            Ok(_) => Err("opened a second time in the same container".to_owned()),
            Err(AssignError::AlreadyOpen {
                address: a,
                group: g,
            }) if (a, g) == (address, group) => Ok(String::new()),
            Err(e) => Err(format!("unexpected error: {}", chain(&e))),
        },
    );
    let Some(mate_dev) = report.require(
        "open_group_mate",
        AssignedDevice::open_group_in(&container, &host, mate, group),
    ) else {
        return;
    };
    let members = container.members();
    report.check(
        "open_group_mate",
        if members.0 == [(address, group), (mate, group)] && container.groups() == [group] {
            Ok(members.to_string())
        } else {
            Err(format!("container members {:?}", members.0))
        },
    );
    report.check(
        "kvm_group_registered",
        match kvm_add_group_file(group) {
            Ok(Some(EEXIST)) => Ok(format!(
                "KVM_DEV_VFIO_FILE_ADD of /dev/vfio/{group} again: EEXIST"
            )),
            Ok(Some(errno)) => Err(format!(
                "adding the group again failed with {}, not EEXIST",
                std::io::Error::from_raw_os_error(errno)
            )),
            Ok(None) => Err(format!("KVM accepted group {group}: it was not registered")),
            Err(e) => Err(e),
        },
    );
    report.check(
        "other_container_refused",
        match AssignedDevice::open(&host, mate) {
            Ok(_) => Err(format!("{mate} opened in a second container")),
            Err(AssignError::GroupBusy {
                address: a,
                group: g,
                ..
            }) if (a, g) == (mate, group) => Ok(String::new()),
            Err(e) => Err(format!("unexpected error: {}", chain(&e))),
        },
    );

    // (3) identify, compute
    report.check(
        "config_ids",
        dev.config_read_u32(0)
            .map_err(|e| chain(&e))
            .and_then(|ids| {
                let want = u32::from(EDU_DEVICE_ID) << 16 | u32::from(EDU_VENDOR_ID);
                expect("vendor:device register (config 0x0)", ids, want)
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
            .map_err(|e| chain(&e))
            .and_then(|id| expect("ID register (BAR0 0x0, mmap)", id, EDU_ID)),
    );
    report.check(
        "id_via_region_read",
        read_id(&dev)
            .map_err(|e| chain(&e))
            .and_then(|id| expect("ID register (BAR0 0x0, pread)", id, EDU_ID)),
    );
    let liveness = bar
        .write_u32(reg::LIVENESS, 0x1234_5678)
        .and_then(|()| bar.read_u32(reg::LIVENESS));
    report.check(
        "liveness",
        liveness
            .map_err(|e| chain(&e))
            .and_then(|v| expect("liveness after writing 0x12345678", v, !0x1234_5678)),
    );
    let factorial = bar
        .write_u32(reg::FACTORIAL, 10)
        .map_err(|e| chain(&e))
        .and_then(|()| {
            wait_until(|| Ok(bar.read_u32(reg::STATUS)? & status::COMPUTING == 0))?;
            bar.read_u32(reg::FACTORIAL).map_err(|e| chain(&e))
        });
    report.check(
        "factorial",
        factorial.and_then(|v| {
            expect("factorial register after writing 10", v, 3_628_800)
                .map(|detail| format!("{detail} (10! = {v})"))
        }),
    );
    let Some(mate_bar) = report.require("group_mate_id", mate_dev.map_bar(0)) else {
        return;
    };
    report.check(
        "group_mate_id",
        mate_bar
            .read_u32(reg::ID)
            .map_err(|e| chain(&e))
            .and_then(|id| expect("ID register (BAR0 0x0, mmap)", id, EDU_ID))
            .map(|detail| format!("{mate}: {detail}")),
    );

    // (4) DMA of both devices through one mapping of the container (IOVA = GPA)
    report.check(
        "bus_master",
        done(
            dev.enable_bus_master()
                .and_then(|()| mate_dev.enable_bus_master()),
        ),
    );
    let Some(memory) = report.require(
        "guest_memory",
        GuestMemoryMmap::from_ranges(&[(GuestAddress(RAM_GPA), RAM_SIZE)]),
    ) else {
        return;
    };
    report.check(
        "guest_memory",
        Ok(format!("{RAM_SIZE:#x} bytes at GPA {RAM_GPA:#x}")),
    );
    let Some(mappings) = report.require("dma_map", container.map_guest_memory(&memory)) else {
        return;
    };
    report.check(
        "dma_map",
        Ok(format!(
            "{:x?}, once for {}",
            mappings.ranges(),
            container.members()
        )),
    );
    let (ours, theirs) = (pattern(3), pattern(0x55));
    let written = memory
        .write_slice(&ours, GuestAddress(RAM_GPA))
        .and_then(|()| memory.write_slice(&theirs, GuestAddress(RAM_GPA + 0x2000)))
        .map_err(|e| chain(&e));
    report.check(
        "dma_round_trip",
        written
            .clone()
            .and_then(|()| dma_copy(&bar, &memory, RAM_GPA, RAM_GPA + 0x1000, &ours)),
    );
    report.check(
        "dma_round_trip_group_mate",
        written.and_then(|()| {
            dma_copy(
                &mate_bar,
                &memory,
                RAM_GPA + 0x2000,
                RAM_GPA + 0x3000,
                &theirs,
            )
        }),
    );
    // What one device wrote through the mapping, the other reads through it.
    report.check(
        "dma_across_devices",
        dma_copy(
            &mate_bar,
            &memory,
            RAM_GPA + 0x1000,
            RAM_GPA + 0x3800,
            &ours,
        ),
    );

    // (5) MSI on an eventfd
    let msi = EventFd::new(EFD_NONBLOCK)
        .map_err(|e| chain(&e))
        .and_then(|eventfd| {
            dev.enable_irq(IrqKind::Msi, &[&eventfd])
                .map_err(|e| chain(&e))?;
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
                .map_err(|e| chain(&e))
                .and_then(|()| {
                    let (count, latency) = wait_eventfd(&eventfd)?;
                    let status = bar.read_u32(reg::IRQ_STATUS).map_err(|e| chain(&e))?;
                    bar.write_u32(reg::IRQ_ACK, status).map_err(|e| chain(&e))?;
                    expect("irq status", status & 0x1000, 0x1000)?;
                    Ok(format!("eventfd count {count} after {latency:?}"))
                });
            report.check("msi_delivered", delivered);
            report.check("msi_disable", done(dev.disable_irq(IrqKind::Msi)));
        }
    }

    // INTx, which edu falls back to with MSI off: delivered, masked, unmasked.
    let intx = EventFd::new(EFD_NONBLOCK)
        .map_err(|e| chain(&e))
        .and_then(|eventfd| {
            dev.enable_irq(IrqKind::Intx, &[&eventfd])
                .map_err(|e| chain(&e))?;
            bar.write_u32(reg::IRQ_RAISE, 0x2).map_err(|e| chain(&e))?;
            let (count, latency) = wait_eventfd(&eventfd)?;
            bar.write_u32(reg::IRQ_ACK, 0x2).map_err(|e| chain(&e))?;
            dev.unmask_intx().map_err(|e| chain(&e))?;
            dev.disable_irq(IrqKind::Intx).map_err(|e| chain(&e))?;
            Ok(format!("eventfd count {count} after {latency:?}, unmasked"))
        });
    report.check("intx_delivered", intx);

    // (6) one unmap; then a DMA into the unmapped IOVA must land from neither device
    report.check("dma_unmap", done(mappings.unmap()));
    report.check(
        "dma_blocked_after_unmap",
        dma_blocked(&bar, &memory, RAM_GPA + 0x1000, 0xaa),
    );
    report.check(
        "dma_blocked_after_unmap_group_mate",
        dma_blocked(&mate_bar, &memory, RAM_GPA + 0x3000, 0xbb),
    );

    // (7) reset: edu has no reset method (no FLR, no PM reset, and the bridge it sits behind
    // has a mate, so no bus reset): VFIO must say so, and a "successful" reset is a failure.
    let reset_flag = dev.device_info().reset_supported;
    let reset = match dev.reset() {
        Ok(()) => Err(format!(
            "VFIO_DEVICE_RESET succeeded (VFIO_DEVICE_FLAGS_RESET {reset_flag}), \
             but edu has no reset method"
        )),
        Err(AssignError::ResetNotSupported { address: a }) if a == address && !reset_flag => Ok(
            "not supported, as edu has no reset method: VFIO_DEVICE_FLAGS_RESET clear, \
             no ioctl issued"
                .to_owned(),
        ),
        Err(e) => Err(format!(
            "want ResetNotSupported with VFIO_DEVICE_FLAGS_RESET clear (it is {reset_flag}), \
             got: {}",
            chain(&e)
        )),
    };
    report.check("reset", reset);

    // (8) closing one function leaves the container and its group mate working
    drop(bar);
    drop(dev);
    report.check(
        "group_mate_survives_close",
        remap_and_copy(&container, &mate_bar, &memory, address, mate, group),
    );
    // vfio-ioctls 0.10 releases a group when any of its devices closes (it assumes one device
    // per group), which unregisters it from KVM; shown, not checked.
    match kvm_add_group_file(group) {
        Ok(None) => println!(
            "  (vfio-ioctls: group {group} was unregistered from KVM when {address} closed; \
             re-registered now)"
        ),
        Ok(Some(errno)) => println!(
            "  (vfio-ioctls: group {group} still registered with KVM after {address} closed: {})",
            std::io::Error::from_raw_os_error(errno)
        ),
        Err(e) => println!("  (KVM registration after {address} closed not probed: {e})"),
    }

    // (9) closing the last device and dropping the container and the VM release every VFIO and
    // KVM file of the process
    let start = Instant::now();
    drop(mate_bar);
    drop(mate_dev);
    drop(container);
    drop(vm);
    let took = start.elapsed();
    let left = open_files(|link| link.contains("vfio") || link.contains("kvm"));
    report.check(
        "teardown",
        if left.is_empty() {
            Ok(format!("VFIO and KVM files all closed, in {took:?}"))
        } else {
            Err(format!("still open: {left:?}"))
        },
    );
}

/// The `/proc/self/fd` links of this process that `wanted` picks.
fn open_files(wanted: impl Fn(&str) -> bool) -> Vec<String> {
    let Ok(dir) = std::fs::read_dir("/proc/self/fd") else {
        return vec!["/proc/self/fd unreadable".to_owned()];
    };
    dir.flatten()
        .filter_map(|entry| std::fs::read_link(entry.path()).ok())
        .map(|link| link.to_string_lossy().into_owned())
        .filter(|link| wanted(link))
        .collect()
}

/// After `closed` left the container: the container holds only `mate`, maps the memory again,
/// and `mate` copies through the new mapping.
fn remap_and_copy(
    container: &Container<KernelDma>,
    mate_bar: &MappedBar<KernelVfio>,
    memory: &GuestMemoryMmap,
    closed: PciAddress,
    mate: PciAddress,
    group: u32,
) -> Result<String, String> {
    let members = container.members();
    if members.0 != [(mate, group)] {
        return Err(format!(
            "after closing {closed} the container holds {:?}",
            members.0
        ));
    }
    let mappings = container.map_guest_memory(memory).map_err(|e| chain(&e))?;
    let want = pattern(0x77);
    memory
        .write_slice(&want, GuestAddress(RAM_GPA))
        .map_err(|e| chain(&e))?;
    let copied = dma_copy(mate_bar, memory, RAM_GPA, RAM_GPA + 0x1000, &want)?;
    mappings.unmap().map_err(|e| chain(&e))?;
    Ok(format!("{members}; {copied}"))
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    let usage = |why: String| {
        eprintln!("vfio-edu-guest: {why}");
        eprintln!("usage: vfio-edu-guest <BDF> <IOMMU group> <BDF of the group mate>");
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
    let mate = match args.get(3).map(|a| a.parse::<PciAddress>()) {
        Some(Ok(mate)) => mate,
        Some(Err(e)) => return usage(format!("invalid PCI address of the group mate {e}")),
        None => return usage("no PCI address of the group mate given".to_owned()),
    };
    let mut report = Report::default();
    run(address, group, mate, &mut report);
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fault_lines_give_their_page_address() {
        let line = "[    5.528026] DMAR: [DMA Write NO_PASID] Request device [01:00.0] fault addr \
                    0x101000 [fault reason 0x05] PTE Write access is not set";
        assert_eq!(fault_address(line), Some(0x10_1000));
        // Older kernels print the address without 0x.
        assert_eq!(
            fault_address("DMAR: [DMA Read] Request device [00:03.0] fault addr 103000"),
            Some(0x10_3000)
        );
        assert_eq!(
            fault_address("DMAR: DRHD: handling fault status reg 2"),
            None
        );
    }

    #[test]
    fn every_check_of_the_guest_is_listed() {
        for name in [
            "open_device",
            "dma_blocked_after_unmap",
            "reset",
            "teardown",
        ] {
            assert!(listed(name), "{name}");
        }
        assert!(!listed("kvm"));
        assert!(!listed("# every"));
        // A passing check that is not listed is reported as a failure.
        let mut report = Report::default();
        assert!(!report.check("not_a_check", Ok(String::new())));
        assert!(report.check("reset", Ok("not supported".to_owned())));
        assert_eq!((report.passed, report.failed), (1, 1));
    }

    #[test]
    fn expectations_show_both_values() {
        assert_eq!(
            expect("ID register", 0x0100_00edu32, EDU_ID),
            Ok("ID register: read 0x10000ed, want 0x10000ed".to_owned())
        );
        assert_eq!(
            expect("ID register", 0xffff_ffffu32, EDU_ID),
            Err("ID register: got 0xffffffff, want 0x10000ed".to_owned())
        );
    }
}
