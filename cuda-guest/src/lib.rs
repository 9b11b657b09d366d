//! CUDA accelerator for guests of a VMM.
//!
//! Nothing here yet: the driver API loader, the PTX simulator and the guest protocol
//! arrive with their own issues.
