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
//! - [`bench`](mod@bench): the native backend measured against plain driver calls (the simulator's
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
//! both. Where they differ, on purpose:
//!
//! - **Sticky errors** (`CUDA_ERROR_ILLEGAL_ADDRESS`, `_MISALIGNED_ADDRESS`,
//!   `_LAUNCH_FAILED`, ...; [`driver::error::is_sticky`]). On both, the faulting
//!   kernel's error surfaces at the next synchronising call and every later call of the
//!   context returns it. On the native driver it poisons the whole process: NVIDIA
//!   documents that the process must be terminated and relaunched to use CUDA again, and
//!   `cuDevicePrimaryCtxReset` does not clear it (on an H100 with CUDA 13 the retain after
//!   the reset fails with the same error), so [`driver::safe::Gpu::reset`] returns that
//!   error with a detail saying to restart the process, and every `Accelerator` of the
//!   process fails the same way. On the simulator the reset clears it and the device is
//!   usable again. A VMM that must survive a guest's faulting kernel runs the native
//!   backend in a process it can restart; the native test suite runs each faulting test
//!   in a child process of its own.
//! - **Bounds**: the simulator checks every access against the allocation, so a kernel
//!   writing 4 bytes past a 4000-byte buffer faults. A GPU maps memory in pages of the
//!   driver's allocation granularity (2 MiB on an H100), so such a small overrun lands in
//!   mapped memory and does not fault; only an access outside every mapping (far past
//!   the buffer, or an unmapped address) does.
//! - **Timing and memory figures** are those of the documented virtual device on the
//!   simulator (its clock counts nanoseconds, `cuMemGetInfo` counts the bytes allocated)
//!   and of the hardware natively (free memory moves in granularity steps and with other
//!   processes).
//!
//! Environment: `VMGPU_CUDA_BACKEND` (`native`, `sim`, `auto`), `VMGPU_LIBCUDA`
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
/// handshake, frames, one request per driver call, replies; pure and synchronous
/// (`vmgpu-cuda-proto`).
pub use vmgpu_cuda_proto as proto;
/// The CUDA service for guests (`vmgpu-cuda-service`).
#[cfg(feature = "service")]
pub use vmgpu_cuda_service as service;
/// The PTX simulator (`vmgpu-cuda-sim`).
pub use vmgpu_cuda_sim as sim;
/// The PTX front end (`vmgpu-ptx`).
pub use vmgpu_ptx as ptx;
