//! The host's PCIe/IOMMU picture, read from sysfs.
//!
//! Everything starts from a [`Host`], rooted at a sysfs tree (`/sys`, or a fixture
//! tree in tests): its devices ([`PciDevice`]), IOMMU groups ([`IommuGroup`]) and
//! IOMMU state, NVIDIA identification ([`NvidiaInfo`]), and whether a device can be
//! given to a VM ([`check::assess`]); binding a group to vfio-pci and back
//! ([`bind`]). The crate only reads and writes sysfs files; it issues no ioctls.
//!
//! Feature `testing`: `kernel::SimulatedKernel` (acts on a writable copy of a
//! fixture tree the way Linux acts on sysfs, with injected failures and crashes)
//! and `kernel::copy_tree`, for tests of code that binds devices.

pub mod address;
pub mod bar;
pub mod bind;
pub mod check;
pub mod class;
pub mod device;
pub mod error;
pub mod host;
pub mod iommu;
pub mod kernel;
pub mod link;
pub mod nvidia;
pub mod sysfs;

pub use address::{AddressError, PciAddress};
pub use bar::{Bar, BarKind};
pub use class::ClassCode;
pub use device::{PciDevice, Sriov};
pub use error::{Error, Result};
pub use host::{Host, VfioPciModule};
pub use iommu::{InterruptRemapping, IommuGroup, IommuState};
pub use link::{Link, LinkSpeed};
pub use nvidia::{GpuArchitecture, NvidiaFunction, NvidiaInfo};
