//! Reading the IOMMU group of a PCI function from sysfs.

use std::path::{Path, PathBuf};

use crate::vfio::error::{AssignError, Result};

/// Checks that `bdf` is a full PCI address `DDDD:BB:DD.F` (it becomes part of sysfs paths and
/// is handed to the kernel, so nothing else may get through).
pub fn validate_bdf(bdf: &str) -> Result<()> {
    let bytes = bdf.as_bytes();
    let well_formed = bytes.len() == 12
        && bytes.iter().enumerate().all(|(i, b)| match i {
            4 | 7 => *b == b':',
            10 => *b == b'.',
            11 => (b'0'..=b'7').contains(b),
            _ => b.is_ascii_hexdigit(),
        });
    if well_formed {
        Ok(())
    } else {
        Err(AssignError::InvalidBdf {
            bdf: bdf.to_owned(),
        })
    }
}

/// `<sysfs_root>/bus/pci/devices/<bdf>`: the device's sysfs directory.
pub fn pci_device_dir(sysfs_root: &Path, bdf: &str) -> PathBuf {
    sysfs_root.join("bus/pci/devices").join(bdf)
}

/// Resolves the IOMMU group number of `bdf` from the `iommu_group` link under `sysfs_root`
/// (normally `/sys`; tests point it at a fake tree).
pub fn iommu_group(sysfs_root: &Path, bdf: &str) -> Result<u32> {
    validate_bdf(bdf)?;
    let link = pci_device_dir(sysfs_root, bdf).join("iommu_group");
    let target = std::fs::read_link(&link).map_err(|source| AssignError::IommuGroupLookup {
        bdf: bdf.to_owned(),
        path: link.clone(),
        source,
    })?;
    target
        .file_name()
        .and_then(|name| name.to_str())
        .and_then(|name| name.parse::<u32>().ok())
        .ok_or(AssignError::IommuGroupMalformed {
            bdf: bdf.to_owned(),
            path: link,
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fake_sysfs(bdf: &str, target: &str) -> tempfile::TempDir {
        let root = tempfile::tempdir().unwrap();
        let dev = pci_device_dir(root.path(), bdf);
        std::fs::create_dir_all(&dev).unwrap();
        std::os::unix::fs::symlink(target, dev.join("iommu_group")).unwrap();
        root
    }

    #[test]
    fn group_number_comes_from_the_link_target() {
        let root = fake_sysfs("0000:00:03.0", "../../../../kernel/iommu_groups/7");
        assert_eq!(iommu_group(root.path(), "0000:00:03.0").unwrap(), 7);
    }

    #[test]
    fn missing_link_reports_path_and_errno() {
        let root = tempfile::tempdir().unwrap();
        let err = iommu_group(root.path(), "0000:00:04.0").unwrap_err();
        match err {
            AssignError::IommuGroupLookup { bdf, path, source } => {
                assert_eq!(bdf, "0000:00:04.0");
                assert!(path.ends_with("bus/pci/devices/0000:00:04.0/iommu_group"));
                assert_eq!(source.raw_os_error(), Some(libc::ENOENT));
            }
            other => panic!("unexpected error {other:?}"),
        }
    }

    #[test]
    fn non_numeric_group_is_rejected() {
        let root = fake_sysfs("0000:00:03.0", "../iommu_groups/abc");
        assert!(matches!(
            iommu_group(root.path(), "0000:00:03.0"),
            Err(AssignError::IommuGroupMalformed { .. })
        ));
    }

    #[test]
    fn bdf_validation() {
        assert!(validate_bdf("0000:65:00.1").is_ok());
        assert!(validate_bdf("0000:AF:1f.7").is_ok());
        for bad in [
            "",
            "00:03.0",
            "0000:00:03.8",
            "0000:00:03/0",
            "../../../etc",
            "0000:00:03.0 ",
        ] {
            assert!(
                matches!(validate_bdf(bad), Err(AssignError::InvalidBdf { .. })),
                "{bad:?} accepted"
            );
        }
    }
}
