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
//! - [`accel`]: choosing the backend (native when a driver and a device are there,
//!   else the simulator; `VMGPU_CUDA_BACKEND` or the builder decide otherwise).
//! - [`bench`]: the native backend measured against plain driver calls (the simulator's
//!   benchmark set is [`sim::bench`]); what `vmgpu cuda bench` reports.

pub mod accel;
pub mod bench;
pub mod driver;
pub mod ptx;
pub mod sim;
