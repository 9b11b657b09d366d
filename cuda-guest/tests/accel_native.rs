//! The accelerator's suite ([`accel_common`]) on the native backend: the NVIDIA driver
//! and device 0. Ignored without a GPU (`cargo test -p cuda-guest --test accel_native
//! -- --ignored` on a machine with one).

#[macro_use]
mod accel_common;

accel_suite!(accel_common::native, #[ignore = "needs an NVIDIA GPU"]);
