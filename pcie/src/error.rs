//! The error type of the `pcie` crate.

use std::path::{Path, PathBuf};

use crate::address::{AddressError, PciAddress};

/// Everything that can go wrong while reading the host's PCI picture from sysfs.
/// Every variant names the file or device involved. Messages never repeat their
/// source: print the chain (`{:#}` with anyhow, or walk [`std::error::Error::source`]).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The sysfs root itself does not exist.
    #[error("sysfs root {root} does not exist")]
    NoSysfsRoot {
        /// The root that was given.
        root: PathBuf,
    },

    /// The sysfs root exists but has no PCI bus (`bus/pci/devices`).
    #[error("{root} holds no PCI bus (no {}): not a sysfs tree, or a host without PCI", .path.display())]
    NoPciBus {
        /// The root that was given.
        root: PathBuf,
        /// The directory that is missing.
        path: PathBuf,
    },

    /// An attribute every device has is missing.
    #[error("{path}: missing (expected a sysfs attribute here)")]
    Missing {
        /// The missing file.
        path: PathBuf,
    },

    /// A path is, or goes through, a symlink loop.
    #[error("{path}: symlink loop (too many levels of symbolic links)")]
    SymlinkLoop {
        /// The path that could not be resolved.
        path: PathBuf,
    },

    /// Reading a file or directory failed.
    #[error("{path}")]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// What the OS said.
        #[source]
        source: std::io::Error,
    },

    /// A value is not what the kernel writes there.
    #[error("{path}: cannot parse {value:?} as {expected}")]
    Parse {
        /// The file.
        path: PathBuf,
        /// The value, or its first [`MAX_QUOTED`] bytes followed by `…`.
        value: String,
        /// What was expected, e.g. "a 16-bit vendor id".
        expected: &'static str,
    },

    /// A symlink such as `driver` or `iommu_group` points nowhere.
    #[error("{path}: symlink points to {target}, which does not exist")]
    DanglingLink {
        /// The link.
        path: PathBuf,
        /// Where it points.
        target: PathBuf,
    },

    /// A directory entry that should be a PCI address is not one.
    #[error("{path}: invalid PCI address")]
    BadAddress {
        /// The entry.
        path: PathBuf,
        /// Why it is not an address.
        #[source]
        source: AddressError,
    },

    /// No such device under `bus/pci/devices`.
    #[error("PCI device {address} not found (no {path})")]
    DeviceNotFound {
        /// The address asked for.
        address: PciAddress,
        /// Where it was looked for.
        path: PathBuf,
    },

    /// No such IOMMU group under `kernel/iommu_groups`.
    #[error("IOMMU group {group} not found (no {path})")]
    GroupNotFound {
        /// The group asked for.
        group: u32,
        /// Where it was looked for.
        path: PathBuf,
    },
}

/// Longest prefix of a bad value quoted in an error, in bytes.
pub const MAX_QUOTED: usize = 80;

/// `value`, cut to at most [`MAX_QUOTED`] bytes (on a character boundary) with `…`
/// and the full length appended when cut.
pub(crate) fn quote(value: &str) -> String {
    if value.len() <= MAX_QUOTED {
        return value.to_string();
    }
    let mut end = MAX_QUOTED;
    while !value.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}… ({} bytes)", &value[..end], value.len())
}

impl Error {
    /// A [`Error::Parse`] that quotes at most a short prefix of `value`.
    pub(crate) fn parse(path: &Path, value: &str, expected: &'static str) -> Self {
        Self::Parse {
            path: path.to_path_buf(),
            value: quote(value),
            expected,
        }
    }
}

/// Result alias for this crate.
pub type Result<T> = std::result::Result<T, Error>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_values_are_cut() {
        assert_eq!(quote("abc"), "abc");
        let long = "x".repeat(10 << 20);
        let q = quote(&long);
        assert_eq!(q, format!("{}… (10485760 bytes)", "x".repeat(MAX_QUOTED)));
        // Never splits a character.
        let wide = "é".repeat(100);
        assert!(quote(&wide).starts_with(&"é".repeat(MAX_QUOTED / 2)));
    }
}
