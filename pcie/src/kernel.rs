//! The writes that change device bindings, behind a trait so binding logic runs
//! against the real kernel or (with the `testing` feature) against
//! `SimulatedKernel` on a copy of a fixture tree.

use std::fs;
use std::io;
use std::path::Path;
use std::process::Command;

#[cfg(feature = "testing")]
pub use simulated::{copy_tree, SimulatedCrash, SimulatedKernel};

/// The kernel operations binding needs. Paths are absolute (below the sysfs root).
pub trait Kernel {
    /// Writes `value` to a sysfs attribute.
    fn write(&self, path: &Path, value: &str) -> io::Result<()>;
    /// Loads a kernel module (`modprobe NAME`).
    fn load_module(&self, name: &str) -> io::Result<()>;
    /// Unloads a module this program loaded (`modprobe -r NAME`).
    fn unload_module(&self, name: &str) -> io::Result<()>;
}

/// The running kernel: plain file writes and `modprobe`.
#[derive(Debug, Default, Clone, Copy)]
pub struct SysfsKernel;

fn modprobe(args: &[&str]) -> io::Result<()> {
    let out = Command::new("modprobe").args(args).output()?;
    if out.status.success() {
        return Ok(());
    }
    Err(io::Error::other(format!(
        "modprobe {} failed ({}): {}",
        args.join(" "),
        out.status,
        String::from_utf8_lossy(&out.stderr).trim()
    )))
}

impl Kernel for SysfsKernel {
    fn write(&self, path: &Path, value: &str) -> io::Result<()> {
        fs::write(path, value)
    }
    fn load_module(&self, name: &str) -> io::Result<()> {
        modprobe(&[name])
    }
    fn unload_module(&self, name: &str) -> io::Result<()> {
        // The kernel knows modules by their underscore names; busybox modprobe needs that.
        modprobe(&["-r", &name.replace('-', "_")])
    }
}

#[cfg(feature = "testing")]
mod simulated {
    use std::cell::Cell;
    use std::collections::HashMap;
    use std::fs;
    use std::io;
    use std::path::{Component, Path, PathBuf};

    use super::Kernel;
    use crate::address::PciAddress;
    use crate::sysfs::{link_name, Sysfs};

    /// The payload of the unwind [`SimulatedKernel::crash_at`] starts: catch it with
    /// `std::panic::catch_unwind` to test what a crash at that point leaves behind.
    #[derive(Debug)]
    pub struct SimulatedCrash {
        /// The operation that was not carried out.
        pub operation: usize,
    }

    /// A kernel that acts on a copy of a fixture tree the way Linux acts on sysfs:
    /// `driver_override`, `drivers/X/bind`, `drivers/X/unbind`, `drivers_probe` and module
    /// loading update the `driver` links. It can fail the N-th operation, to test that
    /// callers roll back.
    #[derive(Debug)]
    pub struct SimulatedKernel {
        sysfs: Sysfs,
        /// The driver the kernel would pick for each device without an override: the
        /// one it was bound to when the simulation started.
        native_drivers: HashMap<PciAddress, String>,
        operations: Cell<usize>,
        fail_at: Cell<Option<usize>>,
        crash_at: Cell<Option<usize>>,
    }

    fn errno(code: i32) -> io::Error {
        io::Error::from_raw_os_error(code)
    }

    impl SimulatedKernel {
        /// Starts simulating the tree at `root`, which it will modify.
        pub fn new(root: impl Into<PathBuf>) -> crate::Result<Self> {
            let sysfs = Sysfs::new(root);
            let host = crate::Host::new(sysfs.root());
            let mut native_drivers = HashMap::new();
            for address in host.addresses()? {
                if let Some(driver) = crate::device::read_driver(&sysfs, &address)? {
                    native_drivers.insert(address, driver);
                }
            }
            Ok(Self {
                sysfs,
                native_drivers,
                operations: Cell::new(0),
                fail_at: Cell::new(None),
                crash_at: Cell::new(None),
            })
        }

        /// Makes operation number `n` (0-based, counting from now) fail with an
        /// injected error; cancels a pending crash.
        pub fn fail_operation(&self, n: usize) {
            self.operations.set(0);
            self.fail_at.set(Some(n));
            self.crash_at.set(None);
        }

        /// Makes the program "crash" instead of carrying out operation number `n`
        /// (0-based, counting from now): the call unwinds with a [`SimulatedCrash`]
        /// payload, without running the panic hook, so no rollback code runs after
        /// it. Everything before operation `n` is done; nothing after.
        pub fn crash_at(&self, n: usize) {
            self.operations.set(0);
            self.fail_at.set(None);
            self.crash_at.set(Some(n));
        }

        /// Operations performed since the last [`Self::fail_operation`] or creation.
        pub fn operations(&self) -> usize {
            self.operations.get()
        }

        fn count_operation(&self) -> io::Result<()> {
            let n = self.operations.get();
            if self.crash_at.get() == Some(n) {
                self.crash_at.set(None);
                std::panic::resume_unwind(Box::new(SimulatedCrash { operation: n }));
            }
            self.operations.set(n + 1);
            if self.fail_at.get() == Some(n) {
                return Err(io::Error::other(format!(
                    "injected failure at operation {n}"
                )));
            }
            Ok(())
        }

        fn device_dir(&self, address: &PciAddress) -> PathBuf {
            self.sysfs
                .pci_bus()
                .join("devices")
                .join(address.to_string())
        }

        fn current_driver(&self, address: &PciAddress) -> io::Result<Option<String>> {
            link_name(&self.device_dir(address).join("driver")).map_err(io::Error::other)
        }

        fn attach(&self, address: &PciAddress, driver: &str) -> io::Result<()> {
            let driver_dir = self.sysfs.pci_driver(driver);
            if !driver_dir.is_dir() {
                return Err(errno(libc::ENODEV));
            }
            let device_real = fs::canonicalize(self.device_dir(address))?;
            let device_link = device_real.join("driver");
            symlink_relative(&device_link, &fs::canonicalize(&driver_dir)?)?;
            symlink_relative(&driver_dir.join(address.to_string()), &device_real)
        }

        fn detach(&self, address: &PciAddress, driver: &str) -> io::Result<()> {
            let device_real = fs::canonicalize(self.device_dir(address))?;
            fs::remove_file(device_real.join("driver"))?;
            fs::remove_file(self.sysfs.pci_driver(driver).join(address.to_string()))
        }

        fn override_of(&self, address: &PciAddress) -> io::Result<Option<String>> {
            crate::device::read_driver_override(&self.sysfs, address).map_err(io::Error::other)
        }

        /// What `drivers_probe` does: bind the override driver if set (and present),
        /// otherwise the native one; an already bound device is left alone.
        fn probe(&self, address: &PciAddress) -> io::Result<()> {
            if self.current_driver(address)?.is_some() {
                return Ok(());
            }
            let wanted = match self.override_of(address)? {
                Some(o) => Some(o),
                None => self.native_drivers.get(address).cloned(),
            };
            match wanted {
                Some(driver) if self.sysfs.pci_driver(&driver).is_dir() => {
                    self.attach(address, &driver)
                }
                // The kernel reports success even when no driver matched.
                _ => Ok(()),
            }
        }

        fn parse_address(value: &str) -> io::Result<PciAddress> {
            value.trim().parse().map_err(|_| errno(libc::EINVAL))
        }
    }

    impl Kernel for SimulatedKernel {
        fn write(&self, path: &Path, value: &str) -> io::Result<()> {
            self.count_operation()?;
            let bus = self.sysfs.pci_bus();
            let relative = path.strip_prefix(&bus).map_err(|_| errno(libc::EINVAL))?;
            let parts: Vec<&str> = relative.iter().filter_map(|c| c.to_str()).collect();
            match parts.as_slice() {
                ["devices", _, "driver_override"] => {
                    let v = value.trim();
                    fs::write(
                        path,
                        if v.is_empty() {
                            "(null)\n".to_string()
                        } else {
                            format!("{v}\n")
                        },
                    )
                }
                ["drivers_probe"] => self.probe(&Self::parse_address(value)?),
                ["drivers", driver, "unbind"] => {
                    let address = Self::parse_address(value)?;
                    if self.current_driver(&address)?.as_deref() != Some(*driver) {
                        return Err(errno(libc::ENODEV));
                    }
                    self.detach(&address, driver)
                }
                ["drivers", driver, "bind"] => {
                    let address = Self::parse_address(value)?;
                    if self.current_driver(&address)?.is_some() {
                        return Err(errno(libc::EBUSY));
                    }
                    if matches!(self.override_of(&address)?, Some(o) if o != *driver) {
                        return Err(errno(libc::ENODEV));
                    }
                    self.attach(&address, driver)
                }
                _ => fs::write(path, value),
            }
        }

        fn load_module(&self, name: &str) -> io::Result<()> {
            self.count_operation()?;
            let driver = name.replace('_', "-");
            let dir = self.sysfs.pci_driver(&driver);
            fs::create_dir_all(&dir)?;
            for file in ["bind", "unbind", "new_id", "remove_id"] {
                fs::write(dir.join(file), "")?;
            }
            fs::create_dir_all(self.sysfs.path("module").join(name.replace('-', "_")))
        }

        fn unload_module(&self, name: &str) -> io::Result<()> {
            self.count_operation()?;
            let dir = self.sysfs.pci_driver(&name.replace('_', "-"));
            if fs::read_dir(&dir)?
                .any(|e| e.is_ok_and(|e| e.file_type().is_ok_and(|t| t.is_symlink())))
            {
                return Err(errno(libc::EBUSY));
            }
            fs::remove_dir_all(dir)?;
            fs::remove_dir_all(self.sysfs.path("module").join(name.replace('-', "_")))
        }
    }

    /// Creates `link` pointing at `target` through a relative path, as sysfs does.
    fn symlink_relative(link: &Path, target: &Path) -> io::Result<()> {
        let base = link.parent().unwrap_or(Path::new("/"));
        let base = fs::canonicalize(base)?;
        let base: Vec<Component> = base.components().collect();
        let target: Vec<Component> = target.components().collect();
        let common = base.iter().zip(&target).take_while(|(a, b)| a == b).count();
        let mut relative = PathBuf::new();
        for _ in common..base.len() {
            relative.push("..");
        }
        for c in &target[common..] {
            relative.push(c);
        }
        std::os::unix::fs::symlink(relative, link)
    }

    /// Copies a sysfs tree, keeping its symlinks as they are: for tests that need a
    /// writable copy of a fixture.
    pub fn copy_tree(from: &Path, to: &Path) -> io::Result<()> {
        fs::create_dir_all(to)?;
        for entry in fs::read_dir(from)? {
            let entry = entry?;
            let (src, dst) = (entry.path(), to.join(entry.file_name()));
            let kind = entry.file_type()?;
            if kind.is_symlink() {
                std::os::unix::fs::symlink(fs::read_link(&src)?, &dst)?;
            } else if kind.is_dir() {
                copy_tree(&src, &dst)?;
            } else {
                fs::copy(&src, &dst)?;
            }
        }
        Ok(())
    }
}
