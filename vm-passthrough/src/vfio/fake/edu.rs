//! QEMU's `edu` teaching device (docs/specs/edu.rst in QEMU), emulated.
//!
//! Its register map is [`crate::vfio::edu`], re-exported here. The emulation follows QEMU
//! register for register: the ID, liveness and factorial registers, interrupt
//! raise/acknowledge, and the DMA engine that copies between RAM (through the IOMMU) and a
//! 4 KiB buffer inside the device.

pub use crate::vfio::edu::*;

/// What the device can do on its PCI bus: DMA (through bus mastering and the IOMMU) and
/// asserting/deasserting its interrupt.
pub(crate) trait DeviceBus {
    /// Reads guest memory at `iova`; `false` if the transfer was blocked (fault recorded).
    fn dma_read(&mut self, iova: u64, buf: &mut [u8]) -> bool;
    /// Writes guest memory at `iova`; `false` if the transfer was blocked (fault recorded).
    fn dma_write(&mut self, iova: u64, data: &[u8]) -> bool;
    /// Signals the device's interrupt (MSI message or INTx assertion).
    fn raise_irq(&mut self);
    /// Deasserts INTx once nothing is pending.
    fn lower_irq(&mut self);
    /// Records a DMA the device itself refused (QEMU aborts the whole VM here).
    fn device_error(&mut self, addr: u64, len: u64);
}

/// The device's registers and DMA buffer.
pub(crate) struct Edu {
    liveness: u32,
    factorial: u32,
    status: u32,
    irq_status: u32,
    dma_src: u64,
    dma_dst: u64,
    dma_count: u64,
    dma_cmd: u64,
    dma_buffer: Vec<u8>,
}

impl Default for Edu {
    fn default() -> Self {
        Edu {
            liveness: 0,
            factorial: 1,
            status: 0,
            irq_status: 0,
            dma_src: 0,
            dma_dst: 0,
            dma_count: 0,
            dma_cmd: 0,
            dma_buffer: vec![0; DMA_BUFFER_SIZE as usize],
        }
    }
}

impl Edu {
    /// A BAR0 read of `width` bytes. Like QEMU, registers below 0x80 answer only 32-bit
    /// accesses, the DMA registers 32- and 64-bit ones, and everything else reads as all ones.
    pub(crate) fn mmio_read(&self, offset: u64, width: usize) -> u64 {
        let all_ones = u64::MAX;
        if !access_size_ok(offset, width) {
            return all_ones;
        }
        match offset {
            reg::ID => u64::from(EDU_ID),
            reg::LIVENESS => u64::from(!self.liveness),
            reg::FACTORIAL => u64::from(self.factorial),
            reg::STATUS => u64::from(self.status),
            reg::IRQ_STATUS => u64::from(self.irq_status),
            reg::DMA_SRC => self.dma_src,
            reg::DMA_DST => self.dma_dst,
            reg::DMA_COUNT => self.dma_count,
            reg::DMA_CMD => self.dma_cmd,
            _ => all_ones,
        }
    }

    /// A BAR0 write of `width` bytes.
    pub(crate) fn mmio_write(
        &mut self,
        offset: u64,
        width: usize,
        value: u64,
        bus: &mut dyn DeviceBus,
    ) {
        if !access_size_ok(offset, width) {
            return;
        }
        let value32 = value as u32;
        match offset {
            reg::LIVENESS => self.liveness = value32,
            reg::FACTORIAL => {
                // Computed at once, so the busy bit is never seen set.
                self.factorial = (1..=value32).fold(1u32, |acc, n| acc.wrapping_mul(n));
                if self.status & status::IRQ_FACTORIAL != 0 {
                    self.raise(FACTORIAL_IRQ, bus);
                }
            }
            reg::STATUS => self.status = value32 & status::IRQ_FACTORIAL,
            reg::IRQ_RAISE => self.raise(value32, bus),
            reg::IRQ_ACK => {
                self.irq_status &= !value32;
                if self.irq_status == 0 {
                    bus.lower_irq();
                }
            }
            reg::DMA_SRC => self.dma_src = value,
            reg::DMA_DST => self.dma_dst = value,
            reg::DMA_COUNT => self.dma_count = value,
            reg::DMA_CMD if self.dma_cmd & dma_cmd::START == 0 => {
                self.dma_cmd = value;
                if value & dma_cmd::START != 0 {
                    self.run_dma(bus);
                }
            }
            _ => {}
        }
    }

    /// Runs the programmed transfer to completion (QEMU runs it from a timer 100 ms later;
    /// software polls the START bit either way).
    fn run_dma(&mut self, bus: &mut dyn DeviceBus) {
        let to_ram = self.dma_cmd & dma_cmd::TO_RAM != 0;
        let (device_addr, ram_addr) = if to_ram {
            (self.dma_src, self.dma_dst)
        } else {
            (self.dma_dst, self.dma_src)
        };
        let count = self.dma_count;
        let buffer_range = device_addr
            .checked_sub(DMA_BUFFER_ADDR)
            .filter(|start| {
                start
                    .checked_add(count)
                    .is_some_and(|end| end <= DMA_BUFFER_SIZE)
            })
            .map(|start| start as usize..(start + count) as usize);
        match buffer_range {
            None => bus.device_error(device_addr, count),
            Some(range) => {
                let iova = ram_addr & DMA_MASK;
                if to_ram {
                    bus.dma_write(iova, &self.dma_buffer[range]);
                } else {
                    // Read into a scratch buffer so a blocked read leaves the buffer untouched.
                    let mut incoming = vec![0u8; range.len()];
                    if bus.dma_read(iova, &mut incoming) {
                        self.dma_buffer[range].copy_from_slice(&incoming);
                    }
                }
            }
        }
        self.dma_cmd &= !dma_cmd::START;
        if self.dma_cmd & dma_cmd::IRQ != 0 {
            self.raise(DMA_IRQ, bus);
        }
    }

    fn raise(&mut self, value: u32, bus: &mut dyn DeviceBus) {
        self.irq_status |= value;
        bus.raise_irq();
    }
}

fn access_size_ok(offset: u64, width: usize) -> bool {
    if offset < reg::DMA_SRC {
        width == 4
    } else {
        width == 4 || width == 8
    }
}
