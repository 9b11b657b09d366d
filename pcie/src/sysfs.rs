//! Reading sysfs attributes with errors that name the file.
//!
//! The root is injectable so the whole crate runs against the trees in `fixtures/`.

use std::fs;
use std::io::{self, Read};
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};

/// Default sysfs mount point.
pub const DEFAULT_ROOT: &str = "/sys";

/// A sysfs tree rooted at `root` (normally `/sys`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sysfs {
    root: PathBuf,
}

impl Sysfs {
    /// A tree rooted at `root`.
    pub fn new(root: impl Into<PathBuf>) -> Self {
        Self { root: root.into() }
    }

    /// The root directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// `root/relative`.
    pub fn path(&self, relative: impl AsRef<Path>) -> PathBuf {
        self.root.join(relative)
    }

    /// `bus/pci` below the root.
    pub fn pci_bus(&self) -> PathBuf {
        self.path("bus/pci")
    }

    /// `bus/pci/drivers/<driver>`: where a PCI driver's `bind`/`unbind` live.
    pub fn pci_driver(&self, driver: &str) -> PathBuf {
        self.pci_bus().join("drivers").join(driver)
    }

    /// Checks that the root exists and holds a PCI bus, so a wrong `--sysfs` is
    /// reported as such rather than as a missing device.
    pub fn verify(&self) -> Result<()> {
        if !exists(&self.root)? {
            return Err(Error::NoSysfsRoot {
                root: self.root.clone(),
            });
        }
        let devices = self.pci_bus().join("devices");
        if !exists(&devices)? {
            return Err(Error::NoPciBus {
                root: self.root.clone(),
                path: devices,
            });
        }
        Ok(())
    }
}

fn is_loop(e: &io::Error) -> bool {
    e.raw_os_error() == Some(libc::ELOOP)
}

pub(crate) fn io_error(path: &Path, source: io::Error) -> Error {
    if source.kind() == io::ErrorKind::NotFound {
        Error::Missing {
            path: path.to_path_buf(),
        }
    } else if is_loop(&source) {
        Error::SymlinkLoop {
            path: path.to_path_buf(),
        }
    } else {
        Error::Io {
            path: path.to_path_buf(),
            source,
        }
    }
}

/// Whether `path` exists (following links): `false` when it does not, an error
/// when it cannot be told (a symlink loop, no permission).
pub(crate) fn exists(path: &Path) -> Result<bool> {
    match fs::metadata(path) {
        Ok(_) => Ok(true),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(io_error(path, e)),
    }
}

/// Largest attribute read, in bytes: sysfs attributes fit in a page; anything
/// larger is not one.
const MAX_ATTR: u64 = 64 << 10;

/// Reads an attribute and strips the trailing newline the kernel adds.
pub(crate) fn read_attr(path: &Path) -> Result<String> {
    let file = fs::File::open(path).map_err(|e| io_error(path, e))?;
    let mut raw = Vec::new();
    file.take(MAX_ATTR + 1)
        .read_to_end(&mut raw)
        .map_err(|e| io_error(path, e))?;
    if raw.len() as u64 > MAX_ATTR {
        return Err(Error::parse(
            path,
            &String::from_utf8_lossy(&raw),
            "a sysfs attribute (at most 64 KiB)",
        ));
    }
    let text = String::from_utf8(raw)
        .map_err(|e| Error::parse(path, &String::from_utf8_lossy(e.as_bytes()), "UTF-8 text"))?;
    Ok(text.trim_end_matches(['\n', '\0']).to_string())
}

/// Like [`read_attr`], but a missing file is `None`: for attributes that only
/// some kernels or devices have.
pub(crate) fn read_optional_attr(path: &Path) -> Result<Option<String>> {
    match read_attr(path) {
        Ok(v) => Ok(Some(v)),
        Err(Error::Missing { .. }) => Ok(None),
        Err(e) => Err(e),
    }
}

/// Parses `0x`-prefixed hex as the kernel prints ids and class codes.
pub(crate) fn parse_hex(path: &Path, value: &str, expected: &'static str) -> Result<u32> {
    let parse_error = || Error::parse(path, value, expected);
    let digits = value.strip_prefix("0x").ok_or_else(parse_error)?;
    u32::from_str_radix(digits, 16).map_err(|_| parse_error())
}

/// Reads a hex attribute that must fit `max`.
pub(crate) fn read_hex(path: &Path, max: u32, expected: &'static str) -> Result<u32> {
    let value = read_attr(path)?;
    let n = parse_hex(path, &value, expected)?;
    if n > max {
        return Err(Error::parse(path, &value, expected));
    }
    Ok(n)
}

/// Parses a decimal attribute.
pub(crate) fn parse_decimal<T: std::str::FromStr>(
    path: &Path,
    value: &str,
    expected: &'static str,
) -> Result<T> {
    value
        .trim()
        .parse()
        .map_err(|_| Error::parse(path, value, expected))
}

/// Follows a symlink such as `driver` or `iommu_group` and returns the final
/// component of its target. `None` when the link does not exist; an error when it
/// dangles, since then the sysfs tree is inconsistent.
pub(crate) fn link_name(path: &Path) -> Result<Option<String>> {
    let target = match fs::read_link(path) {
        Ok(t) => t,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(io_error(path, e)),
    };
    let resolved = path.parent().unwrap_or(Path::new("/")).join(&target);
    if !exists(&resolved).map_err(|e| match e {
        Error::SymlinkLoop { .. } => Error::SymlinkLoop {
            path: path.to_path_buf(),
        },
        other => other,
    })? {
        return Err(Error::DanglingLink {
            path: path.to_path_buf(),
            target,
        });
    }
    let name = target.file_name().and_then(|n| n.to_str()).ok_or_else(|| {
        Error::parse(
            path,
            &target.display().to_string(),
            "a link whose last component is a name",
        )
    })?;
    Ok(Some(name.to_string()))
}

/// Names in a directory, sorted; a missing directory is an empty list.
pub(crate) fn list_dir(path: &Path) -> Result<Vec<String>> {
    let entries = match fs::read_dir(path) {
        Ok(e) => e,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(io_error(path, e)),
    };
    let mut names = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|e| io_error(path, e))?;
        names.push(entry.file_name().to_string_lossy().into_owned());
    }
    names.sort();
    Ok(names)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_strip_newline_and_report_missing_path() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("vendor");
        fs::write(&f, "0x10de\n").unwrap();
        assert_eq!(read_attr(&f).unwrap(), "0x10de");
        assert_eq!(read_hex(&f, 0xffff, "vendor id").unwrap(), 0x10de);
        let missing = dir.path().join("device");
        match read_attr(&missing) {
            Err(Error::Missing { path }) => assert_eq!(path, missing),
            other => panic!("expected Missing, got {other:?}"),
        }
        assert_eq!(read_optional_attr(&missing).unwrap(), None);
    }

    #[test]
    fn hex_errors_carry_path_and_value() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("vendor");
        for bad in ["10de", "0xzz", "", "0x1ffff"] {
            fs::write(&f, format!("{bad}\n")).unwrap();
            match read_hex(&f, 0xffff, "vendor id") {
                Err(Error::Parse {
                    path,
                    value,
                    expected,
                }) => {
                    assert_eq!(path, f);
                    assert_eq!(value, bad);
                    assert_eq!(expected, "vendor id");
                }
                other => panic!("{bad:?}: expected Parse, got {other:?}"),
            }
        }
    }

    #[test]
    fn links_resolve_dangle_or_are_absent() {
        let dir = tempfile::tempdir().unwrap();
        fs::create_dir(dir.path().join("nvidia")).unwrap();
        std::os::unix::fs::symlink("nvidia", dir.path().join("driver")).unwrap();
        assert_eq!(
            link_name(&dir.path().join("driver")).unwrap().as_deref(),
            Some("nvidia")
        );
        std::os::unix::fs::symlink("gone/7", dir.path().join("iommu_group")).unwrap();
        assert!(matches!(
            link_name(&dir.path().join("iommu_group")),
            Err(Error::DanglingLink { target, .. }) if target == Path::new("gone/7")
        ));
        assert_eq!(link_name(&dir.path().join("nothing")).unwrap(), None);
    }
}
