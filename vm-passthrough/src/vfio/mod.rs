//! Device assignment through VFIO.
//!
//! Create one [`Container`] per VM ([`Container::new`], or with the `kvm` feature
//! [`Container::with_kvm_device`] so that its groups are registered with KVM), open every device
//! already bound to vfio-pci in it with [`AssignedDevice::open_in`] — all functions of an IOMMU
//! group (a GPU and its audio function) must be opened in the same container, and a device
//! alone in its group and in its VM may use [`AssignedDevice::open`], which makes a container of
//! its own. Their [`pcie::PciAddress`] and IOMMU group come from a [`pcie::Host`], normally
//! [`pcie::Host::local`]. Make guest memory reachable by DMA once for the whole container
//! ([`Container::map_guest_memory`]), then, per device:
//! - inspect and access its regions ([`AssignedDevice::region_info`],
//!   [`AssignedDevice::read_region`]) and configuration space
//!   ([`AssignedDevice::config_read_u16`], [`AssignedDevice::enable_bus_master`]);
//! - map its BARs with the MSI-X table kept out ([`AssignedDevice::map_bar`]);
//! - route its interrupts to eventfds ([`AssignedDevice::enable_irq`]) and, with the `kvm`
//!   feature, into a guest ([`irqfd::register_irqfds`]);
//! - reset it ([`AssignedDevice::reset`]).
//!
//! Everything below the [`VfioBackend`] and [`DmaBackend`] traits is one ioctl or system call, so
//! the same code runs against the kernel ([`KernelVfio`], [`KernelDma`]) and, with the `fake`
//! feature, against emulated devices sharing an emulated IOMMU (`fake::FakeVfio`,
//! `fake::FakeDma`).

//!
//! Module layout, without import cycles: `types` (what VFIO reports, interrupt kinds, container
//! names) and `util` (bounds check, errno, poison-tolerant lock) are leaves; `error` uses only
//! them; the backend traits (`backend`) use only those; `container`, `device` and the modules
//! adding device methods (`config`, `bar`, `irq`, `dma`) build on them; the kernel's backend
//! (`kernel`) and the fake (`fake`) sit on top. [`edu`] is the register map of QEMU's edu test
//! device.

mod backend;
mod bar;
mod config;
mod container;
mod device;
mod dma;
pub mod edu;
mod error;
mod irq;
mod kernel;
mod types;
mod util;

#[cfg(any(test, feature = "fake"))]
pub mod fake;
#[cfg(feature = "kvm")]
pub mod irqfd;

pub use backend::{DmaBackend, MmapArea, VfioBackend};
pub use bar::{mmap_plan, MappedBar};
pub use config::{MsixCapability, MsixStructure, PCI_COMMAND, PCI_COMMAND_MASTER};
pub use container::{Container, ContainerSlot};
pub use device::AssignedDevice;
pub use dma::{DmaMappings, DmaRange};
pub use error::{AssignError, ErrorChain, Result};
pub use kernel::{KernelDma, KernelVfio};
/// The kvm-ioctls this crate is built with: [`Container::with_kvm_device`] and
/// [`irqfd::register_irqfds`] take its `VmFd`.
#[cfg(feature = "kvm")]
pub use kvm_ioctls;
pub use types::{
    ContainerMembers, DeviceInfo, IrqInfo, IrqKind, RegionFlags, RegionInfo, SparseMmapArea,
    BAR0_REGION_INDEX, BAR_COUNT, CONFIG_REGION_INDEX, ROM_REGION_INDEX,
};
