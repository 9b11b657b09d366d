//! Assign host PCI devices to virtual machines through VFIO.

pub mod vfio;
