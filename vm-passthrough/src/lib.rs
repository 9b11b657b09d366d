//! Assign host PCI devices to virtual machines through VFIO.
//!
//! This is the crate a VMM embeds. The host side (which devices exist, their IOMMU
//! groups, binding them to vfio-pci) comes from the [`pcie`] crate; this one opens
//! the bound devices and wires them into a VM: one [`vfio::Container`] per VM, every
//! function of a group opened in it, guest memory mapped for DMA once, BARs mapped
//! with the MSI-X table kept out, interrupts on eventfds ready for KVM irqfds.
//!
//! ```no_run
//! use pcie::{Host, PciAddress};
//! use vm_memory::{GuestAddress, GuestMemoryMmap};
//! use vm_passthrough::vfio::{AssignedDevice, Container, IrqKind};
//! use vmm_sys_util::eventfd::EventFd;
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let host = Host::local();
//! // After `vmgpu bind 0000:01:00.0`: the GPU and its audio function share a group.
//! let gpu: PciAddress = "0000:01:00.0".parse()?;
//! let audio: PciAddress = "0000:01:00.1".parse()?;
//! let memory = GuestMemoryMmap::<()>::from_ranges(&[(GuestAddress(0), 1 << 30)])?;
//!
//! let container = Container::new()?; // with KVM: Container::with_kvm_device(&vm_fd)
//! let gpu = AssignedDevice::open_in(&container, &host, gpu)?;
//! let _audio = AssignedDevice::open_in(&container, &host, audio)?;
//! let _dma = container.map_guest_memory(&memory)?; // IOVA = guest physical address
//!
//! gpu.enable_bus_master()?;
//! let bar0 = gpu.map_bar(0)?;
//! println!("BAR0: {:#x} bytes, mapped {:x?}", bar0.size(), bar0.mapped_ranges());
//! let msi = EventFd::new(0)?;
//! gpu.enable_irq(IrqKind::Msi, &[&msi])?; // then vfio::irqfd::register_irqfds
//! # Ok(())
//! # }
//! ```

pub mod vfio;
