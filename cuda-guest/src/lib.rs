//! CUDA accelerator for guests of a VMM.
//!
//! - [`ptx`]: the PTX front end (lexer, parser, entry parameter lists), independent of
//!   any consumer.
//! - [`sim`]: a PTX simulator that decodes a module once and executes its kernels on
//!   the CPU with the results a GPU would give, plus the checks a GPU does not make
//!   (bounds, freed pointers, divergent barriers, runaway kernels).
//! - [`driver`]: the boundary at the level of the CUDA driver API ([`driver::Backend`]),
//!   implemented by the native backend (the NVIDIA driver loaded at run time, never
//!   linked) and by the simulator ([`driver::SimBackend`]); the safe API over either
//!   ([`driver::safe`]).
//! - [`service`] (feature `service`, default): the CUDA service for guests — sessions
//!   with their own contexts, handles and quotas, over Unix sockets (hybrid vsock),
//!   AF_VSOCK or a VMM's own device (the embedding API); the protocol is [`proto`].
//! - [`accel`]: choosing the backend (native when a driver and a device are there,
//!   else the simulator; `VMGPU_CUDA_BACKEND` or the builder decide otherwise).
//! - [`bench`]: the native backend measured against plain driver calls (the simulator's
//!   benchmark set is [`sim::bench`]); what `vmgpu cuda bench` reports.
//!
//! # Backends
//!
//! | backend | what it is | when it is chosen |
//! | --- | --- | --- |
//! | native ([`driver::NativeBackend`]) | the NVIDIA driver, `libcuda.so.1` opened at run time (`VMGPU_LIBCUDA` overrides the path), entry points through `cuGetProcAddress_v2` | `auto` when the driver loads and reports a device; `native` always (an error without one) |
//! | simulator ([`driver::SimBackend`]) | the PTX simulator on a documented virtual sm_80 device, one device thread executing queued work in order, CUDA's error semantics | `auto` otherwise; `sim` always |
//!
//! The same [`driver::safe`] API and the same tests (`tests/accel_common`) run over
//! both. Environment: `VMGPU_CUDA_BACKEND` (`native`, `sim`, `auto`), `VMGPU_LIBCUDA`
//! (the driver library), `VMGPU_LIBNVRTC` (NVRTC, for CUDA C++ sources).
//!
//! ```
//! use cuda_guest::accel::Accelerator;
//! # fn main() -> Result<(), cuda_guest::driver::DriverError> {
//! // Native on a host with a GPU, the simulator elsewhere; never a panic.
//! # std::env::set_var("VMGPU_CUDA_BACKEND", "sim");
//! let acc = Accelerator::new()?;
//! println!("CUDA backend: {}", acc.selection());
//! for device in acc.devices()? {
//!     println!("{device}");
//! }
//! # Ok(()) }
//! ```

pub mod accel;
pub mod bench;
pub mod driver;
/// The wire protocol between a guest's `libcuda.so.1` and the VMM's CUDA service:
/// handshake, frames, one request per driver call, replies; pure and synchronous.
pub mod proto;
pub mod ptx;
#[cfg(feature = "service")]
pub mod service;
pub mod sim;
