//! The driver boundary: one trait at the level of the CUDA driver API ([`Backend`]),
//! implemented by the native driver loaded at run time ([`NativeBackend`]) and by the
//! PTX simulator ([`SimBackend`], a documented virtual device with CUDA's semantics).
//!
//! Handles ([`Context`], [`Module`], [`Function`], [`Stream`], [`Event`],
//! [`HostAlloc`]) are opaque values: a raw 64-bit handle tagged with the backend
//! instance that made it, so a handle of another backend is refused rather than handed
//! to a driver. [`Stream`], [`Event`] and [`HostAlloc`] are neither `Copy` nor `Clone`
//! and are destroyed by value, so safe code cannot use one after destroying it. Device
//! addresses are plain [`DevicePtr`] numbers; the operations that read or write through
//! one are `unsafe` (see [`Backend`]), and the small safe layer in [`safe`] wraps them
//! in buffers that free themselves.
//!
//! [`nvrtc`] compiles CUDA C++ to PTX with NVRTC, loaded at run time the same way.
//!
//! The same calls on the simulator (no GPU needed):
//!
//! ```
//! use cuda_guest::driver::{Backend, Device, SimBackend, Stream};
//! use cuda_guest::sim::SimConfig;
//! # fn main() -> Result<(), cuda_guest::driver::DriverError> {
//! let sim = SimBackend::new(SimConfig::default())?;
//! let ctx = sim.primary_context_retain(Device::new(0))?;
//! sim.context_set_current(&ctx)?;
//! assert_eq!(sim.compute_capability(Device::new(0))?, (8, 0));
//! let a = sim.mem_alloc(16)?;
//! let b = sim.mem_alloc(16)?;
//! // SAFETY: both ranges are device memory of the simulator.
//! unsafe {
//!     sim.memcpy_htod(a, &[7; 16])?;
//!     sim.memcpy_dtod_async(b, a, 16, &Stream::DEFAULT)?; // queued on the device thread
//!     let mut out = [0u8; 16];
//!     sim.memcpy_dtoh(&mut out, b)?; // waits for the queued copy first
//!     assert_eq!(out, [7; 16]);
//! }
//! sim.mem_free(a)?;
//! sim.mem_free(b)?;
//! # Ok(()) }
//! ```
//!
//! ```no_run
//! use cuda_guest::driver::{Backend, Device, NativeBackend};
//! # fn main() -> Result<(), cuda_guest::driver::DriverError> {
//! let cuda = NativeBackend::new()?;          // typed error, never a panic, without a GPU
//! let dev = Device::new(0);
//! let ctx = cuda.primary_context_retain(dev)?;
//! cuda.context_set_current(&ctx)?;
//! println!("{} {:?}", cuda.device_name(dev)?, cuda.compute_capability(dev)?);
//! # Ok(()) }
//! ```

pub mod safe;

pub use vmgpu_cuda_api::*;
pub use vmgpu_cuda_native::{loader, nvrtc, Driver, LoadOptions, NativeBackend, Resolution};
/// The simulator's backend and its virtual device.
pub use vmgpu_cuda_sim::backend as sim;
pub use vmgpu_cuda_sim::SimBackend;

/// A device's PCI address as the `pcie` crate's [`pcie::PciAddress`] (to find it in
/// sysfs: IOMMU group, NUMA node, binding), for every [`Backend`]: host-side, so the
/// driver boundary itself knows no `pcie`.
pub trait DevicePciAddress: Backend {
    /// The PCI address of `dev`, from [`Backend::device_pci_bus_id`].
    fn device_pci_address(&self, dev: Device) -> Result<pcie::PciAddress> {
        let id = self.device_pci_bus_id(dev)?;
        id.parse()
            .map_err(|e: pcie::AddressError| DriverError::Unexpected {
                operation: "cuDeviceGetPCIBusId",
                reason: format!("{id:?} is not a PCI address: {e}"),
            })
    }
}

impl<B: Backend + ?Sized> DevicePciAddress for B {}
