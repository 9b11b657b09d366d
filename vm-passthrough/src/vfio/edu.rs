//! The register map of QEMU's `edu` teaching device (docs/specs/edu.rst in QEMU): the one
//! definition that drivers of edu use — the fake backend's emulated edu (with the `fake`
//! feature) and the real-kernel VFIO suite (`tests/vfio-edu`), which drives QEMU's own edu
//! through the kernel — so it is always built, without the `fake` feature. Constants only.

/// edu's PCI vendor ID.
pub const EDU_VENDOR_ID: u16 = 0x1234;
/// edu's PCI device ID.
pub const EDU_DEVICE_ID: u16 = 0x11e8;
/// Size of BAR0.
pub const BAR0_SIZE: u64 = 1 << 20;
/// Value of the identification register: version 1.0, "ed".
pub const EDU_ID: u32 = 0x0100_00ed;
/// Register offsets within BAR0.
pub mod reg {
    /// Identification (RO).
    pub const ID: u64 = 0x00;
    /// Liveness check: reads back the bitwise inverse of what was written.
    pub const LIVENESS: u64 = 0x04;
    /// Factorial: a written n reads back as n! (32-bit, wrapping).
    pub const FACTORIAL: u64 = 0x08;
    /// Status; bits in [`super::status`].
    pub const STATUS: u64 = 0x20;
    /// Interrupt status (RO): the OR of all raised, unacknowledged values.
    pub const IRQ_STATUS: u64 = 0x24;
    /// Interrupt raise (WO): ORs the value into the interrupt status and interrupts.
    pub const IRQ_RAISE: u64 = 0x60;
    /// Interrupt acknowledge (WO): clears the value's bits from the interrupt status.
    pub const IRQ_ACK: u64 = 0x64;
    /// DMA source address.
    pub const DMA_SRC: u64 = 0x80;
    /// DMA destination address.
    pub const DMA_DST: u64 = 0x88;
    /// DMA transfer length.
    pub const DMA_COUNT: u64 = 0x90;
    /// DMA command; bits in [`super::dma_cmd`].
    pub const DMA_CMD: u64 = 0x98;
}
/// Bits of the STATUS register.
pub mod status {
    /// The factorial is being computed (RO; the fake computes at once, so never set there).
    pub const COMPUTING: u32 = 0x01;
    /// Raise interrupt [`super::FACTORIAL_IRQ`] after each factorial.
    pub const IRQ_FACTORIAL: u32 = 0x80;
}
/// Bits of the DMA command register.
pub mod dma_cmd {
    /// Start the transfer; reads back set while it runs.
    pub const START: u64 = 0x1;
    /// Direction: set = device buffer to RAM, clear = RAM to device buffer.
    pub const TO_RAM: u64 = 0x2;
    /// Raise interrupt [`super::DMA_IRQ`] on completion.
    pub const IRQ: u64 = 0x4;
}
/// Device-side address of the DMA buffer.
pub const DMA_BUFFER_ADDR: u64 = 0x40000;
/// Size of the DMA buffer.
pub const DMA_BUFFER_SIZE: u64 = 4096;
/// Interrupt status value of a completed DMA.
pub const DMA_IRQ: u32 = 0x100;
/// Interrupt status value of a completed factorial (when enabled in STATUS).
pub const FACTORIAL_IRQ: u32 = 0x1;
/// edu's DMA mask: RAM addresses are truncated to 28 bits.
pub const DMA_MASK: u64 = (1 << 28) - 1;
