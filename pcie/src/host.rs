//! The host as a whole: its devices, groups, IOMMU and the vfio-pci module.

use std::path::{Path, PathBuf};

use crate::address::PciAddress;
use crate::device::PciDevice;
use crate::error::{Error, Result};
use crate::iommu::{IommuGroup, IommuState};
use crate::sysfs::{link_name, list_dir, read_optional_attr, Sysfs, DEFAULT_ROOT};

/// Whether vfio-pci can drive devices on this host.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case", tag = "state")]
pub enum VfioPciModule {
    /// The driver is registered (`bus/pci/drivers/vfio-pci` exists).
    Loaded,
    /// Built into the kernel (listed in `modules.builtin`).
    BuiltIn,
    /// A loadable module at `path`.
    Available {
        /// The module file.
        path: PathBuf,
    },
    /// Neither loaded nor found in `modules_dir`.
    Missing {
        /// Where it was looked for.
        modules_dir: PathBuf,
    },
    /// Not loaded, and no modules directory to look in.
    Unknown,
}

/// A view of one host's PCI/IOMMU picture, rooted at a sysfs tree.
#[derive(Debug, Clone)]
pub struct Host {
    sysfs: Sysfs,
    modules_dir: Option<PathBuf>,
}

impl Host {
    /// A host rooted at `sysfs_root`, without a modules directory.
    pub fn new(sysfs_root: impl Into<PathBuf>) -> Self {
        Self {
            sysfs: Sysfs::new(sysfs_root),
            modules_dir: None,
        }
    }

    /// The running host: `/sys` and `/lib/modules/$(uname -r)`.
    pub fn local() -> Self {
        let mut host = Self::new(DEFAULT_ROOT);
        host.modules_dir = running_kernel_modules_dir();
        host
    }

    /// Where to look for `vfio-pci.ko` when it is not loaded.
    pub fn with_modules_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.modules_dir = Some(dir.into());
        self
    }

    /// The sysfs tree read.
    pub fn sysfs(&self) -> &Sysfs {
        &self.sysfs
    }

    /// Checks that the sysfs root exists and holds a PCI bus.
    pub fn verify(&self) -> Result<()> {
        self.sysfs.verify()
    }

    /// Where `vfio-pci.ko` is looked for, if anywhere.
    pub fn modules_dir(&self) -> Option<&Path> {
        self.modules_dir.as_deref()
    }

    /// All PCI functions, sorted by address.
    pub fn addresses(&self) -> Result<Vec<PciAddress>> {
        self.sysfs.verify()?;
        let dir = self.sysfs.pci_bus().join("devices");
        let mut addresses = list_dir(&dir)?
            .into_iter()
            .map(|name| {
                let path = dir.join(&name);
                name.parse()
                    .map_err(|source| Error::BadAddress { path, source })
            })
            .collect::<Result<Vec<PciAddress>>>()?;
        addresses.sort();
        Ok(addresses)
    }

    /// One device, read in full.
    pub fn device(&self, address: PciAddress) -> Result<PciDevice> {
        PciDevice::read(&self.sysfs, address)
    }

    /// Every device, sorted by address. Fails on the first unreadable device, naming
    /// the file, rather than showing a partial picture.
    pub fn devices(&self) -> Result<Vec<PciDevice>> {
        self.addresses()?
            .into_iter()
            .map(|a| self.device(a))
            .collect()
    }

    /// The other functions of `address`'s multi-function device (a GPU's audio or
    /// USB function). SR-IOV virtual functions share their PF's slot number but
    /// are not functions of it: a VF has no companions and is no one's companion.
    pub fn companions(&self, address: PciAddress) -> Result<Vec<PciAddress>> {
        if self.is_virtual_function(address)? {
            return Ok(Vec::new());
        }
        let mut companions = Vec::new();
        for a in self.addresses()? {
            if a != address && a.same_slot(&address) && !self.is_virtual_function(a)? {
                companions.push(a);
            }
        }
        Ok(companions)
    }

    fn is_virtual_function(&self, address: PciAddress) -> Result<bool> {
        let path = PciDevice::sysfs_dir(&self.sysfs, &address).join("physfn");
        Ok(link_name(&path)?.is_some())
    }

    /// The enabled SR-IOV virtual functions of `address` (its `virtfnN` links), in
    /// VF order; empty for anything but a PF with VFs enabled.
    pub fn virtual_functions(&self, address: PciAddress) -> Result<Vec<PciAddress>> {
        let dir = PciDevice::sysfs_dir(&self.sysfs, &address);
        let mut vfs = Vec::new();
        for name in list_dir(&dir)? {
            let Some(n) = name
                .strip_prefix("virtfn")
                .and_then(|n| n.parse::<u32>().ok())
            else {
                continue;
            };
            let path = dir.join(&name);
            if let Some(target) = link_name(&path)? {
                let vf = target
                    .parse()
                    .map_err(|source| Error::BadAddress { path, source })?;
                vfs.push((n, vf));
            }
        }
        vfs.sort();
        Ok(vfs.into_iter().map(|(_, vf)| vf).collect())
    }

    /// IOMMU group `id`.
    pub fn group(&self, id: u32) -> Result<IommuGroup> {
        IommuGroup::read(&self.sysfs, id)
    }

    /// The members of `id`, read in full.
    pub fn group_members(&self, id: u32) -> Result<Vec<PciDevice>> {
        self.group(id)?
            .devices
            .into_iter()
            .map(|a| self.device(a))
            .collect()
    }

    /// The IOMMU's state.
    pub fn iommu(&self) -> Result<IommuState> {
        IommuState::read(&self.sysfs)
    }

    /// Whether vfio-pci is loaded, built in, or where its module is.
    pub fn vfio_pci_module(&self) -> Result<VfioPciModule> {
        if self.sysfs.pci_bus().join("drivers/vfio-pci").is_dir() {
            return Ok(VfioPciModule::Loaded);
        }
        let Some(dir) = &self.modules_dir else {
            return Ok(VfioPciModule::Unknown);
        };
        let listed = |file: &str| -> Result<Option<String>> {
            let Some(text) = read_optional_attr(&dir.join(file))? else {
                return Ok(None);
            };
            Ok(text
                .lines()
                .map(|l| l.split(':').next().unwrap_or(l).trim())
                .find(|path| is_vfio_pci_module(path))
                .map(str::to_string))
        };
        if listed("modules.builtin")?.is_some() {
            return Ok(VfioPciModule::BuiltIn);
        }
        if let Some(relative) = listed("modules.dep")? {
            return Ok(VfioPciModule::Available {
                path: dir.join(relative),
            });
        }
        Ok(VfioPciModule::Missing {
            modules_dir: dir.clone(),
        })
    }
}

fn is_vfio_pci_module(path: &str) -> bool {
    let file = path.rsplit('/').next().unwrap_or(path);
    let stem = file.split(".ko").next().unwrap_or(file);
    stem == "vfio-pci" || stem == "vfio_pci"
}

fn running_kernel_modules_dir() -> Option<PathBuf> {
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").ok()?;
    Some(Path::new("/lib/modules").join(release.trim()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn module_names_match_compressed_and_plain() {
        assert!(is_vfio_pci_module("kernel/drivers/vfio/pci/vfio-pci.ko.xz"));
        assert!(is_vfio_pci_module("kernel/drivers/vfio/pci/vfio-pci.ko"));
        assert!(is_vfio_pci_module(
            "kernel/drivers/vfio/pci/vfio_pci.ko.zst"
        ));
        assert!(!is_vfio_pci_module(
            "kernel/drivers/vfio/pci/vfio-pci-core.ko"
        ));
    }

    #[test]
    fn finds_module_in_modules_dep_or_builtin() {
        let dir = tempfile::tempdir().unwrap();
        let sys = tempfile::tempdir().unwrap();
        let host = Host::new(sys.path()).with_modules_dir(dir.path());
        assert_eq!(
            host.vfio_pci_module().unwrap(),
            VfioPciModule::Missing {
                modules_dir: dir.path().to_path_buf()
            }
        );
        std::fs::write(
            dir.path().join("modules.dep"),
            "kernel/drivers/vfio/pci/vfio-pci.ko.xz: kernel/drivers/vfio/pci/vfio-pci-core.ko.xz\n",
        )
        .unwrap();
        assert_eq!(
            host.vfio_pci_module().unwrap(),
            VfioPciModule::Available {
                path: dir.path().join("kernel/drivers/vfio/pci/vfio-pci.ko.xz")
            }
        );
        std::fs::write(
            dir.path().join("modules.builtin"),
            "kernel/drivers/vfio/pci/vfio-pci.ko\n",
        )
        .unwrap();
        assert_eq!(host.vfio_pci_module().unwrap(), VfioPciModule::BuiltIn);
        std::fs::create_dir_all(sys.path().join("bus/pci/drivers/vfio-pci")).unwrap();
        assert_eq!(host.vfio_pci_module().unwrap(), VfioPciModule::Loaded);
        assert_eq!(
            Host::new(sys.path().join("x")).vfio_pci_module().unwrap(),
            VfioPciModule::Unknown
        );
    }
}
