//! The accelerator's suite ([`accel_common`]) on the simulator, plus what only the
//! simulator has: the documented virtual device, quotas, timeouts, misaligned faults
//! and backend selection.

#[macro_use]
mod accel_common;

accel_suite!(accel_common::sim);
