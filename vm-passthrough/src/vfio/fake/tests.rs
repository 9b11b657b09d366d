//! The assignment code ([`AssignedDevice`] and friends) exercised against the fake edu device.

use pcie::PciAddress;
use vm_memory::{Bytes, GuestAddress, GuestMemoryMmap};
use vmm_sys_util::eventfd::{EventFd, EFD_NONBLOCK};

use super::edu::{dma_cmd, reg, DMA_BUFFER_ADDR, DMA_IRQ, EDU_ID};
use super::*;
use crate::vfio::{
    AssignError, AssignedDevice, Container, ContainerMembers, ErrorChain, IrqKind, MappedBar,
};

const BDF: PciAddress = PciAddress {
    domain: 0,
    bus: 0,
    device: 3,
    function: 0,
};
const RAM_BASE: u64 = 0x10_0000;
const RAM_SIZE: usize = 0x2000;
const DMA_LEN: usize = 2048;

fn edu() -> AssignedDevice<FakeVfio> {
    FakeVfio::builder().open(BDF).unwrap()
}

fn guest_memory() -> GuestMemoryMmap {
    GuestMemoryMmap::from_ranges(&[(GuestAddress(RAM_BASE), RAM_SIZE)]).unwrap()
}

fn pattern() -> Vec<u8> {
    (0..DMA_LEN).map(|i| (i * 7 + 3) as u8).collect()
}

/// edu with bus mastering on, and guest memory holding [`pattern`] at `RAM_BASE`.
fn edu_with_pattern_in_ram() -> (AssignedDevice<FakeVfio>, GuestMemoryMmap) {
    let dev = edu();
    dev.enable_bus_master().unwrap();
    let memory = guest_memory();
    memory
        .write_slice(&pattern(), GuestAddress(RAM_BASE))
        .unwrap();
    (dev, memory)
}

/// Runs one edu DMA and waits for START to clear, as a driver would.
fn run_dma(bar: &MappedBar<FakeVfio>, src: u64, dst: u64, len: u64, cmd: u64) {
    bar.write_u64(reg::DMA_SRC, src).unwrap();
    bar.write_u64(reg::DMA_DST, dst).unwrap();
    bar.write_u64(reg::DMA_COUNT, len).unwrap();
    bar.write_u64(reg::DMA_CMD, cmd).unwrap();
    assert_eq!(
        bar.read_u64(reg::DMA_CMD).unwrap() & dma_cmd::START,
        0,
        "DMA still running"
    );
}

/// Fills `len` bytes of `memory` at `gpa` with `fill`, has the device DMA its buffer there, and
/// asserts that the memory still holds `fill` everywhere: the transfer was blocked.
fn assert_dma_to_ram_blocked(
    bar: &MappedBar<FakeVfio>,
    memory: &GuestMemoryMmap,
    gpa: u64,
    len: usize,
    fill: u8,
) {
    memory
        .write_slice(&vec![fill; len], GuestAddress(gpa))
        .unwrap();
    run_dma(
        bar,
        DMA_BUFFER_ADDR,
        gpa,
        len as u64,
        dma_cmd::START | dma_cmd::TO_RAM,
    );
    let mut after = vec![0u8; len];
    memory.read_slice(&mut after, GuestAddress(gpa)).unwrap();
    assert_eq!(
        after,
        vec![fill; len],
        "DMA landed in memory it must not reach"
    );
}

fn eventfd_count(eventfd: &EventFd) -> u64 {
    match eventfd.read() {
        Ok(count) => count,
        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => 0,
        Err(e) => panic!("eventfd read failed: {e}"),
    }
}

fn errno_of(error: &AssignError) -> Option<i32> {
    std::error::Error::source(error)
        .and_then(|s| s.downcast_ref::<std::io::Error>())
        .and_then(std::io::Error::raw_os_error)
}

#[test]
fn id_register_reads_through_region_and_bar() {
    let dev = edu();
    let mut id = [0u8; 4];
    dev.read_region(BAR0_REGION_INDEX, reg::ID, &mut id)
        .unwrap();
    assert_eq!(u32::from_le_bytes(id), EDU_ID);

    let bar = dev.map_bar(0).unwrap();
    assert_eq!(bar.size(), 1 << 20);
    assert!(bar.mapped_ranges().is_empty(), "the fake traps BAR0");
    assert_eq!(bar.read_u32(reg::ID).unwrap(), 0x0100_00ed);
}

#[test]
fn liveness_and_factorial_registers_compute() {
    let bar = edu().map_bar(0).unwrap();
    bar.write_u32(reg::LIVENESS, 0x1234_5678).unwrap();
    assert_eq!(bar.read_u32(reg::LIVENESS).unwrap(), !0x1234_5678);
    bar.write_u32(reg::FACTORIAL, 10).unwrap();
    assert_eq!(bar.read_u32(reg::FACTORIAL).unwrap(), 3_628_800);
    assert_eq!(
        bar.read_u32(reg::STATUS).unwrap() & 1,
        0,
        "factorial no longer busy"
    );
}

#[test]
fn config_space_identifies_edu_and_enables_bus_master() {
    let dev = edu();
    assert_eq!(dev.config_read_u16(0).unwrap(), EDU_VENDOR_ID);
    assert_eq!(dev.config_read_u32(0).unwrap(), 0x11e8_1234);
    assert_eq!(dev.config_read_u8(0x3d).unwrap(), 1, "INTA");
    assert_eq!(
        dev.config_read_u16(PCI_COMMAND).unwrap() & PCI_COMMAND_MASTER,
        0
    );
    dev.enable_bus_master().unwrap();
    assert_eq!(
        dev.config_read_u16(PCI_COMMAND).unwrap() & PCI_COMMAND_MASTER,
        PCI_COMMAND_MASTER
    );
    // Read-only fields ignore writes.
    dev.config_write_u16(0, 0xffff).unwrap();
    assert_eq!(dev.config_read_u16(0).unwrap(), EDU_VENDOR_ID);
    assert!(dev.msix_capability().unwrap().is_none());
    match dev.config_read_u32(254).unwrap_err() {
        AssignError::RegionOutOfBounds {
            index,
            offset,
            len,
            size,
            ..
        } => {
            assert_eq!(
                (index, offset, len, size),
                (CONFIG_REGION_INDEX, 254, 4, 256)
            );
        }
        other => panic!("unexpected {other:?}"),
    }
}

#[test]
fn dma_round_trip_through_guest_memory() {
    let (dev, memory) = edu_with_pattern_in_ram();
    let mappings = dev.container().map_guest_memory(&memory).unwrap();
    assert_eq!(
        mappings.ranges(),
        &[crate::vfio::DmaRange {
            iova: RAM_BASE,
            size: RAM_SIZE as u64
        }]
    );
    assert_eq!(
        dev.container().iommu_mappings(),
        vec![(RAM_BASE, RAM_SIZE as u64)]
    );

    let bar = dev.map_bar(0).unwrap();
    run_dma(
        &bar,
        RAM_BASE,
        DMA_BUFFER_ADDR,
        DMA_LEN as u64,
        dma_cmd::START,
    );
    let back = RAM_BASE + 0x1000;
    run_dma(
        &bar,
        DMA_BUFFER_ADDR,
        back,
        DMA_LEN as u64,
        dma_cmd::START | dma_cmd::TO_RAM,
    );

    let mut copied = vec![0u8; DMA_LEN];
    memory.read_slice(&mut copied, GuestAddress(back)).unwrap();
    assert_eq!(copied, pattern());
    assert!(dev.backend().dma_faults().is_empty());
}

#[test]
fn dma_after_unmap_is_blocked_by_the_iommu() {
    let (dev, memory) = edu_with_pattern_in_ram();
    let bar = dev.map_bar(0).unwrap();
    let mappings = dev.container().map_guest_memory(&memory).unwrap();
    run_dma(
        &bar,
        RAM_BASE,
        DMA_BUFFER_ADDR,
        DMA_LEN as u64,
        dma_cmd::START,
    );
    mappings.unmap().unwrap();
    assert!(dev.container().iommu_mappings().is_empty());

    let target = RAM_BASE + 0x1000;
    assert_dma_to_ram_blocked(&bar, &memory, target, 256, 0xaa);
    assert_eq!(
        dev.backend().dma_faults(),
        vec![DmaFault::IommuUnmapped {
            iova: target,
            write: true
        }]
    );
}

#[test]
fn dropping_the_mappings_unmaps_them() {
    let dev = edu();
    dev.enable_bus_master().unwrap();
    let memory = GuestMemoryMmap::from_ranges(&[
        (GuestAddress(0), 0x4000),
        (GuestAddress(RAM_BASE), RAM_SIZE),
    ])
    .unwrap();
    {
        let mappings = dev.container().map_guest_memory(&memory).unwrap();
        assert_eq!(mappings.ranges().len(), 2);
        assert_eq!(
            dev.container().iommu_mappings(),
            vec![(0, 0x4000), (RAM_BASE, RAM_SIZE as u64)]
        );
    }
    assert!(dev.container().iommu_mappings().is_empty());
    let bar = dev.map_bar(0).unwrap();
    run_dma(&bar, RAM_BASE, DMA_BUFFER_ADDR, 64, dma_cmd::START);
    assert_eq!(
        dev.backend().dma_faults(),
        vec![DmaFault::IommuUnmapped {
            iova: RAM_BASE,
            write: false
        }]
    );
}

#[test]
fn dma_without_bus_master_is_blocked() {
    let dev = edu();
    let memory = guest_memory();
    let _mappings = dev.container().map_guest_memory(&memory).unwrap();
    let bar = dev.map_bar(0).unwrap();
    assert_dma_to_ram_blocked(&bar, &memory, RAM_BASE, 64, 0x55);
    assert_eq!(
        dev.backend().dma_faults(),
        vec![DmaFault::BusMasterDisabled]
    );
}

#[test]
fn overlapping_dma_map_fails_with_eexist_and_rolls_back() {
    let dev = edu();
    let memory = guest_memory();
    let first = dev.container().map_guest_memory(&memory).unwrap();
    // A second memory whose first region is free but whose second overlaps `first`.
    let overlapping = GuestMemoryMmap::from_ranges(&[
        (GuestAddress(0), 0x1000),
        (GuestAddress(RAM_BASE + 0x1000), 0x1000),
    ])
    .unwrap();
    let err = dev
        .container()
        .map_guest_memory(&overlapping)
        .map(|_| ())
        .unwrap_err();
    match &err {
        AssignError::DmaMap {
            container,
            iova,
            size,
            ..
        } => {
            assert_eq!(container.0, vec![(BDF, 0)]);
            assert_eq!((*iova, *size), (RAM_BASE + 0x1000, 0x1000));
        }
        other => panic!("unexpected {other:?}"),
    }
    assert_eq!(errno_of(&err), Some(libc::EEXIST));
    // The message says what failed; the errno is its source, printed once by the chain.
    assert_eq!(
        err.to_string(),
        "VFIO container of group 0 (0000:00:03.0): DMA map of IOVA 0x101000 (+0x1000) failed"
    );
    assert_eq!(
        ErrorChain(&err).to_string(),
        "VFIO container of group 0 (0000:00:03.0): DMA map of IOVA 0x101000 (+0x1000) failed: \
         File exists (os error 17)"
    );
    assert_eq!(
        dev.container().iommu_mappings(),
        vec![(RAM_BASE, RAM_SIZE as u64)],
        "IOVA 0 not rolled back"
    );
    drop(first);
}

#[test]
fn misaligned_guest_region_is_refused_with_einval() {
    let dev = edu();
    let memory = GuestMemoryMmap::from_ranges(&[(GuestAddress(0x800), 0x1000)]).unwrap();
    let err = dev
        .container()
        .map_guest_memory(&memory)
        .map(|_| ())
        .unwrap_err();
    assert!(
        matches!(
            err,
            AssignError::DmaMap {
                iova: 0x800,
                size: 0x1000,
                ..
            }
        ),
        "{err:?}"
    );
    assert_eq!(errno_of(&err), Some(libc::EINVAL));
}

#[test]
fn msi_is_delivered_to_the_eventfd() {
    let dev = edu();
    let info = dev.irq_info(IrqKind::Msi).unwrap();
    assert_eq!(info.count, 1);
    let eventfd = EventFd::new(EFD_NONBLOCK).unwrap();
    dev.enable_irq(IrqKind::Msi, &[&eventfd]).unwrap();
    let bar = dev.map_bar(0).unwrap();
    assert_eq!(eventfd_count(&eventfd), 0);
    bar.write_u32(reg::IRQ_RAISE, 0x1000).unwrap();
    assert_eq!(eventfd_count(&eventfd), 1);
    assert_eq!(bar.read_u32(reg::IRQ_STATUS).unwrap(), 0x1000);
    bar.write_u32(reg::IRQ_ACK, 0x1000).unwrap();
    assert_eq!(bar.read_u32(reg::IRQ_STATUS).unwrap(), 0);

    // DMA completion interrupts too.
    dev.enable_bus_master().unwrap();
    let memory = guest_memory();
    let _mappings = dev.container().map_guest_memory(&memory).unwrap();
    run_dma(
        &bar,
        RAM_BASE,
        DMA_BUFFER_ADDR,
        16,
        dma_cmd::START | dma_cmd::IRQ,
    );
    assert_eq!(eventfd_count(&eventfd), 1);
    assert_eq!(bar.read_u32(reg::IRQ_STATUS).unwrap(), DMA_IRQ);

    dev.disable_irq(IrqKind::Msi).unwrap();
    bar.write_u32(reg::IRQ_RAISE, 0x1).unwrap();
    assert_eq!(eventfd_count(&eventfd), 0, "signalled after disable");
}

#[test]
fn intx_stays_masked_until_unmasked() {
    let dev = edu();
    let eventfd = EventFd::new(EFD_NONBLOCK).unwrap();
    dev.enable_irq(IrqKind::Intx, &[&eventfd]).unwrap();
    let bar = dev.map_bar(0).unwrap();
    bar.write_u32(reg::IRQ_RAISE, 0x2).unwrap();
    assert_eq!(eventfd_count(&eventfd), 1);
    bar.write_u32(reg::IRQ_RAISE, 0x4).unwrap();
    assert_eq!(eventfd_count(&eventfd), 0, "delivered while masked");
    // Still asserted at unmask time: delivered again.
    dev.unmask_intx().unwrap();
    assert_eq!(eventfd_count(&eventfd), 1);
    // Acknowledged (line low) before unmask: nothing more.
    bar.write_u32(reg::IRQ_ACK, 0x6).unwrap();
    dev.unmask_intx().unwrap();
    assert_eq!(eventfd_count(&eventfd), 0);
    dev.disable_irq(IrqKind::Intx).unwrap();
}

#[test]
fn irq_errors_name_kind_and_errno() {
    let dev = edu();
    assert!(matches!(
        dev.irq_info(IrqKind::Msix),
        Err(AssignError::IrqUnsupported {
            kind: IrqKind::Msix,
            ..
        })
    ));
    let (a, b) = (EventFd::new(0).unwrap(), EventFd::new(0).unwrap());
    match dev.enable_irq(IrqKind::Msi, &[&a, &b]).unwrap_err() {
        AssignError::IrqVectorCount {
            kind,
            requested,
            available,
            ..
        } => {
            assert_eq!((kind, requested, available), (IrqKind::Msi, 2, 1));
        }
        other => panic!("unexpected {other:?}"),
    }
    dev.enable_irq(IrqKind::Intx, &[&a]).unwrap();
    // Only one interrupt kind at a time, as in vfio-pci.
    let err = dev.enable_irq(IrqKind::Msi, &[&b]).unwrap_err();
    assert!(
        matches!(
            err,
            AssignError::SetIrqs {
                kind: IrqKind::Msi,
                action: "enable",
                ..
            }
        ),
        "{err:?}"
    );
    assert_eq!(errno_of(&err), Some(libc::EINVAL));
    dev.disable_irq(IrqKind::Intx).unwrap();
    let err = dev.unmask_intx().unwrap_err();
    assert!(
        matches!(
            err,
            AssignError::SetIrqs {
                kind: IrqKind::Intx,
                action: "unmask",
                ..
            }
        ),
        "{err:?}"
    );
}

#[test]
fn msix_table_is_kept_out_of_the_bar_mapping() {
    let dev = FakeVfio::builder().msix(8, false).open(BDF).unwrap();
    let cap = dev.msix_capability().unwrap().unwrap();
    assert_eq!((cap.cap_offset, cap.vectors), (0x50, 8));
    assert_eq!(
        (cap.table.bar, cap.table.offset, cap.table.size),
        (MSIX_BAR_REGION_INDEX, MSIX_TABLE_OFFSET, 128)
    );
    assert_eq!(
        (cap.pba.bar, cap.pba.offset),
        (MSIX_BAR_REGION_INDEX, MSIX_PBA_OFFSET)
    );

    let bar = dev.map_bar(2).unwrap();
    // No sparse-mmap capability: the hole comes from config space, table and PBA pages.
    assert_eq!(bar.mapped_ranges(), vec![0..0x8000, 0xa000..0x10000]);
    assert!(!bar.is_mapped(MSIX_TABLE_OFFSET, 4));
    assert!(bar.is_mapped(0x7ffc, 4) && bar.is_mapped(0xa000, 4));

    // Mapped accesses never reach the fake's trap; table accesses always do.
    bar.write_u32(0x100, 0xdead_beef).unwrap();
    assert_eq!(bar.read_u32(0x100).unwrap(), 0xdead_beef);
    assert_eq!(dev.backend().msix_table_traps(), 0);
    bar.write_u32(MSIX_TABLE_OFFSET + 8, 0x4000).unwrap();
    assert_eq!(bar.read_u32(MSIX_TABLE_OFFSET + 8).unwrap(), 0x4000);
    assert_eq!(dev.backend().msix_table_traps(), 2);
    // The mapping and the trapped path see the same device memory.
    let mut through_trap = [0u8; 4];
    dev.read_region(MSIX_BAR_REGION_INDEX, 0x100, &mut through_trap)
        .unwrap();
    assert_eq!(u32::from_le_bytes(through_trap), 0xdead_beef);

    let eventfds: Vec<EventFd> = (0..8)
        .map(|_| EventFd::new(EFD_NONBLOCK).unwrap())
        .collect();
    dev.enable_irq(IrqKind::Msix, &eventfds.iter().collect::<Vec<_>>())
        .unwrap();
    dev.map_bar(0)
        .unwrap()
        .write_u32(reg::IRQ_RAISE, 1)
        .unwrap();
    assert_eq!(eventfd_count(&eventfds[0]), 1);
}

#[test]
fn sparse_mmap_capability_is_honoured() {
    let dev = FakeVfio::builder().msix(8, true).open(BDF).unwrap();
    let info = dev.region_info(MSIX_BAR_REGION_INDEX).unwrap();
    assert_eq!(
        info.sparse_mmap.as_deref(),
        Some(&MSIX_BAR_SPARSE_AREAS[..])
    );
    let bar = dev.map_bar(2).unwrap();
    assert_eq!(
        bar.mapped_ranges(),
        vec![0..0x4000, 0x5000..0x8000, 0xa000..0x10000]
    );
    bar.write_u32(0x4000, 7).unwrap();
    assert_eq!(bar.read_u32(0x4000).unwrap(), 7, "trapped page still works");
}

#[test]
fn bad_region_and_bar_accesses_are_reported() {
    let dev = edu();
    assert!(matches!(
        dev.region_info(9),
        Err(AssignError::NoSuchRegion { index: 9, .. })
    ));
    let mut buf = [0u8; 4];
    assert!(matches!(
        dev.read_region(42, 0, &mut buf),
        Err(AssignError::NoSuchRegion { index: 42, .. })
    ));
    assert!(matches!(
        dev.map_bar(6),
        Err(AssignError::NotABar { index: 6, .. })
    ));
    // BAR1 is not implemented: size 0, nothing to access.
    match dev.read_region(1, 0, &mut buf).unwrap_err() {
        AssignError::RegionOutOfBounds { index, size, .. } => assert_eq!((index, size), (1, 0)),
        other => panic!("unexpected {other:?}"),
    }
    let bar = dev.map_bar(0).unwrap();
    assert!(matches!(
        bar.read_u32(2),
        Err(AssignError::MisalignedAccess {
            offset: 2,
            width: 4,
            ..
        })
    ));
    assert!(matches!(
        bar.read_u64(u64::MAX - 7),
        Err(AssignError::RegionOutOfBounds { offset, .. }) if offset == u64::MAX - 7
    ));
    // edu answers only 32-bit accesses below 0x80: a 64-bit read of the ID reads as all ones.
    assert_eq!(bar.read_u64(reg::ID).unwrap(), u64::MAX);
}

#[test]
fn reset_is_reported_as_unsupported_for_plain_edu() {
    let dev = edu();
    assert!(!dev.device_info().reset_supported);
    let err = dev.reset().unwrap_err();
    assert!(
        matches!(&err, AssignError::ResetNotSupported { address } if *address == BDF),
        "{err:?}"
    );
    assert_eq!(dev.backend().reset_count(), 0, "the device was touched");
}

#[test]
fn reset_restores_power_on_state() {
    let dev = FakeVfio::builder().reset_supported(true).open(BDF).unwrap();
    dev.enable_bus_master().unwrap();
    let bar = dev.map_bar(0).unwrap();
    bar.write_u32(reg::LIVENESS, 5).unwrap();
    bar.write_u32(reg::IRQ_RAISE, 8).unwrap();
    dev.reset().unwrap();
    assert_eq!(dev.backend().reset_count(), 1);
    assert_eq!(bar.read_u32(reg::LIVENESS).unwrap(), !0);
    assert_eq!(bar.read_u32(reg::IRQ_STATUS).unwrap(), 0);
    assert_eq!(
        dev.config_read_u16(PCI_COMMAND).unwrap() & PCI_COMMAND_MASTER,
        0,
        "bus master survived reset"
    );
}

#[test]
fn dma_outside_the_device_buffer_is_refused() {
    let dev = edu();
    dev.enable_bus_master().unwrap();
    let memory = guest_memory();
    let _mappings = dev.container().map_guest_memory(&memory).unwrap();
    let bar = dev.map_bar(0).unwrap();
    run_dma(
        &bar,
        RAM_BASE,
        DMA_BUFFER_ADDR + 0x800,
        0x1000,
        dma_cmd::START,
    );
    assert_eq!(
        dev.backend().dma_faults(),
        vec![DmaFault::DeviceBufferOutOfRange {
            addr: DMA_BUFFER_ADDR + 0x800,
            len: 0x1000
        }]
    );
}

// ---- several devices in one container ----

/// The two functions behind one PCIe-to-PCI bridge, as in the real-kernel suite: one IOMMU group.
const EDU_A: PciAddress = PciAddress {
    domain: 0,
    bus: 1,
    device: 1,
    function: 0,
};
const EDU_B: PciAddress = PciAddress {
    domain: 0,
    bus: 1,
    device: 2,
    function: 0,
};
const GROUP: u32 = 5;
const PAIR_RAM_SIZE: usize = 0x4000;

/// Fills `len` bytes at `gpa` with a pattern seeded by `seed`.
fn seeded_pattern(seed: u8) -> Vec<u8> {
    (0..DMA_LEN)
        .map(|i| (i as u8).wrapping_mul(13).wrapping_add(seed))
        .collect()
}

/// RAM -> device buffer -> RAM on `bar`'s device; returns what landed at `dst`.
fn round_trip(bar: &MappedBar<FakeVfio>, memory: &GuestMemoryMmap, src: u64, dst: u64) -> Vec<u8> {
    run_dma(bar, src, DMA_BUFFER_ADDR, DMA_LEN as u64, dma_cmd::START);
    run_dma(
        bar,
        DMA_BUFFER_ADDR,
        dst,
        DMA_LEN as u64,
        dma_cmd::START | dma_cmd::TO_RAM,
    );
    let mut landed = vec![0u8; DMA_LEN];
    memory.read_slice(&mut landed, GuestAddress(dst)).unwrap();
    landed
}

/// Both edus of group [`GROUP`] open in `container`, bus mastering on.
fn edu_pair(
    container: &Container<FakeDma>,
) -> (AssignedDevice<FakeVfio>, AssignedDevice<FakeVfio>) {
    let a = FakeVfio::builder()
        .open_in(container, EDU_A, GROUP)
        .unwrap();
    let b = FakeVfio::builder()
        .open_in(container, EDU_B, GROUP)
        .unwrap();
    a.enable_bus_master().unwrap();
    b.enable_bus_master().unwrap();
    (a, b)
}

#[test]
fn devices_of_one_container_dma_through_one_mapping() {
    let container = Container::fake();
    let (a, b) = edu_pair(&container);
    assert!(a.container().same_as(&container) && b.container().same_as(&container));
    assert_eq!(container.members().0, vec![(EDU_A, GROUP), (EDU_B, GROUP)]);
    assert_eq!(container.groups(), vec![GROUP]);

    let memory = GuestMemoryMmap::from_ranges(&[(GuestAddress(RAM_BASE), PAIR_RAM_SIZE)]).unwrap();
    let (pattern_a, pattern_b) = (seeded_pattern(1), seeded_pattern(2));
    memory
        .write_slice(&pattern_a, GuestAddress(RAM_BASE))
        .unwrap();
    memory
        .write_slice(&pattern_b, GuestAddress(RAM_BASE + 0x2000))
        .unwrap();
    let mappings = container.map_guest_memory(&memory).unwrap();
    // Mapped once, for both.
    assert_eq!(
        container.iommu_mappings(),
        vec![(RAM_BASE, PAIR_RAM_SIZE as u64)]
    );
    assert!(mappings.container().same_as(&container));

    let (bar_a, bar_b) = (a.map_bar(0).unwrap(), b.map_bar(0).unwrap());
    assert_eq!(
        round_trip(&bar_a, &memory, RAM_BASE, RAM_BASE + 0x1000),
        pattern_a
    );
    assert_eq!(
        round_trip(&bar_b, &memory, RAM_BASE + 0x2000, RAM_BASE + 0x3000),
        pattern_b
    );
    // What one device wrote through the mapping, the other reads through it.
    assert_eq!(
        round_trip(&bar_b, &memory, RAM_BASE + 0x1000, RAM_BASE + 0x3800),
        pattern_a
    );
    assert!(a.backend().dma_faults().is_empty());
    assert!(b.backend().dma_faults().is_empty());

    // One unmap blocks both.
    mappings.unmap().unwrap();
    assert!(container.iommu_mappings().is_empty());
    assert_dma_to_ram_blocked(&bar_a, &memory, RAM_BASE + 0x1000, 256, 0xaa);
    assert_dma_to_ram_blocked(&bar_b, &memory, RAM_BASE + 0x3000, 256, 0xbb);
    assert_eq!(
        a.backend().dma_faults(),
        vec![DmaFault::IommuUnmapped {
            iova: RAM_BASE + 0x1000,
            write: true
        }]
    );
    assert_eq!(
        b.backend().dma_faults(),
        vec![DmaFault::IommuUnmapped {
            iova: RAM_BASE + 0x3000,
            write: true
        }]
    );
}

#[test]
fn opening_a_device_twice_in_one_container_is_refused() {
    let container = Container::fake();
    let first = FakeVfio::builder()
        .open_in(&container, EDU_A, GROUP)
        .unwrap();
    let err = FakeVfio::builder()
        .open_in(&container, EDU_A, GROUP)
        .map(|_| ())
        .unwrap_err();
    match &err {
        AssignError::AlreadyOpen { address, group } => {
            assert_eq!((*address, *group), (EDU_A, GROUP))
        }
        other => panic!("unexpected {other:?}"),
    }
    assert_eq!(
        err.to_string(),
        "0000:01:01.0: already open in this container (IOMMU group 5); \
         a device is opened once per container"
    );
    assert_eq!(container.members().0, vec![(EDU_A, GROUP)]);
    // Closing frees the address.
    drop(first);
    assert!(container.members().0.is_empty());
    let again = FakeVfio::builder()
        .open_in(&container, EDU_A, GROUP)
        .unwrap();
    assert_eq!(again.address(), EDU_A);
}

#[test]
fn mapping_needs_a_device_and_keeps_the_devices_open() {
    let container = Container::fake();
    let memory = guest_memory();
    let err = container.map_guest_memory(&memory).map(|_| ()).unwrap_err();
    assert!(matches!(err, AssignError::EmptyContainer), "{err:?}");
    assert!(container.iommu_mappings().is_empty());

    let dev = FakeVfio::builder()
        .open_in(&container, EDU_A, GROUP)
        .unwrap();
    let mappings = container.map_guest_memory(&memory).unwrap();
    drop(dev);
    // The mappings hold the device open (the IOMMU domain lives as long as one device does):
    // its address is still taken.
    assert_eq!(container.members().0, vec![(EDU_A, GROUP)]);
    let err = FakeVfio::builder()
        .open_in(&container, EDU_A, GROUP)
        .map(|_| ())
        .unwrap_err();
    assert!(matches!(err, AssignError::AlreadyOpen { .. }), "{err:?}");
    drop(mappings);
    assert!(container.iommu_mappings().is_empty());
    assert!(container.members().0.is_empty());
}

#[test]
fn a_device_opened_later_uses_the_existing_mapping() {
    // Two groups in one container, as a VM with two assigned groups has.
    let container = Container::fake();
    let a = FakeVfio::builder()
        .open_in(&container, EDU_A, GROUP)
        .unwrap();
    let memory = guest_memory();
    memory
        .write_slice(&pattern(), GuestAddress(RAM_BASE))
        .unwrap();
    let _mappings = container.map_guest_memory(&memory).unwrap();
    let other = PciAddress { bus: 2, ..EDU_A };
    let b = FakeVfio::builder().open_in(&container, other, 7).unwrap();
    b.enable_bus_master().unwrap();
    assert_eq!(container.groups(), vec![GROUP, 7]);
    assert_eq!(
        round_trip(&b.map_bar(0).unwrap(), &memory, RAM_BASE, RAM_BASE + 0x1000),
        pattern()
    );
    assert!(b.backend().dma_faults().is_empty());
    assert_eq!(
        container.iommu_mappings(),
        vec![(RAM_BASE, RAM_SIZE as u64)]
    );
    drop(a);
}

#[test]
fn container_members_name_devices_by_group() {
    assert_eq!(
        ContainerMembers::default().to_string(),
        "empty VFIO container"
    );
    let other = PciAddress { bus: 2, ..EDU_A };
    let members = ContainerMembers(vec![(EDU_A, GROUP), (EDU_B, GROUP), (other, 7)]);
    assert_eq!(
        members.to_string(),
        "VFIO container of groups 5 (0000:01:01.0, 0000:01:02.0), 7 (0000:02:01.0)"
    );
    assert_eq!(members.addresses(), vec![EDU_A, EDU_B, other]);
}
