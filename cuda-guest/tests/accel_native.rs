//! The accelerator's suite ([`accel_common`]) on the native backend: the NVIDIA driver
//! and device 0. Ignored without a GPU (`cargo test -p cuda-guest --test accel_native
//! -- --ignored` on a machine with one).
//!
//! The tests that provoke a sticky fault run each in a child process (this binary run
//! again with `--exact NAME`, marked by `VMGPU_ACCEL_FAULT_CHILD`): on the native driver
//! a sticky error poisons the process for good, and a reset does not clear it.

#[macro_use]
mod accel_common;

accel_suite!(
    accel_common::native,
    accel_common::Faults::ChildProcess,
    #[ignore = "needs an NVIDIA GPU"]
);
