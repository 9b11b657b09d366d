//! The error type of the `pcie` crate.

use std::path::PathBuf;

use crate::address::{AddressError, PciAddress};

/// Everything that can go wrong while reading the host's PCI picture from sysfs or
/// changing device bindings. Every variant names the file or device involved.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{path}: missing (expected a sysfs attribute here)")]
    Missing { path: PathBuf },

    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },

    #[error("{path}: cannot parse {value:?} as {expected}")]
    Parse {
        path: PathBuf,
        value: String,
        expected: &'static str,
    },

    #[error("{path}: symlink points to {target}, which does not exist")]
    DanglingLink { path: PathBuf, target: PathBuf },

    #[error("{path}: invalid PCI address: {source}")]
    BadAddress {
        path: PathBuf,
        #[source]
        source: AddressError,
    },

    #[error("PCI device {address} not found (no {path})")]
    DeviceNotFound { address: PciAddress, path: PathBuf },

    #[error("IOMMU group {group} not found (no {path})")]
    GroupNotFound { group: u32, path: PathBuf },
}

/// Result alias for this crate.
pub type Result<T> = std::result::Result<T, Error>;
