//! Device assignment through VFIO.
//!
//! Open a device already bound to vfio-pci with [`AssignedDevice::open`] (its
//! [`pcie::PciAddress`] and IOMMU group come from a [`pcie::Host`], normally
//! [`pcie::Host::local`]), then:
//! - inspect and access its regions ([`AssignedDevice::region_info`],
//!   [`AssignedDevice::read_region`]) and configuration space
//!   ([`AssignedDevice::config_read_u16`], [`AssignedDevice::enable_bus_master`]);
//! - map its BARs with the MSI-X table kept out ([`AssignedDevice::map_bar`]);
//! - make guest memory reachable by DMA ([`AssignedDevice::map_guest_memory`]);
//! - route its interrupts to eventfds ([`AssignedDevice::enable_irq`]) and, with the `kvm`
//!   feature, into a guest ([`irqfd::register_irqfds`]);
//! - reset it ([`AssignedDevice::reset`]).
//!
//! Everything below the [`VfioBackend`] trait is one ioctl or system call, so the same code
//! runs against the kernel ([`KernelVfio`]) and, with the `fake` feature, against an emulated
//! device (`fake::FakeVfio`).

#![deny(missing_docs)]

mod backend;
mod bar;
mod config;
mod device;
mod dma;
mod error;
mod irq;
mod kernel;

#[cfg(any(test, feature = "fake"))]
pub mod fake;
#[cfg(feature = "kvm")]
pub mod irqfd;

pub use backend::{
    DeviceInfo, IrqInfo, MmapArea, RegionFlags, RegionInfo, SparseMmapArea, VfioBackend,
    BAR0_REGION_INDEX, BAR_COUNT, CONFIG_REGION_INDEX, ROM_REGION_INDEX,
};
pub use bar::{mmap_plan, MappedBar};
pub use config::{MsixCapability, MsixStructure, PCI_COMMAND, PCI_COMMAND_MASTER};
pub use device::AssignedDevice;
pub use dma::{DmaMappings, DmaRange};
pub use error::{AssignError, Result};
pub use irq::IrqKind;
pub use kernel::KernelVfio;
