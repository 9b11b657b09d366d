//! Managed memory and mapped page-locked memory over the protocol: host memory of the
//! guest that the server's kernels use.
//!
//! The server holds plain device memory. For managed memory (and `cuMemHostAlloc` with
//! `DEVICEMAP`), the guest holds an anonymous mapping at the same address (the device
//! address, page-aligned), so the program's host pointer and device pointer are one
//! value; for registered memory (`cuMemHostRegister` with `DEVICEMAP`), the program's
//! own range is paired with a device address of its own. The two copies are kept
//! coherent at the points where a
//! program without concurrent managed access (`CONCURRENT_MANAGED_ACCESS` 0) may switch
//! sides:
//! - before device work is sent, what the host changed since the last exchange is copied
//!   to the device (compared with a shadow of the last exchanged bytes);
//! - after a synchronisation, what the device holds is copied back, except the bytes the
//!   host changed meanwhile (which the next push sends).
//!
//! Nothing is exchanged while no managed memory exists.
//!
//! A module's `__managed__` variables (`.global .attribute(.managed)`) are mirrored the
//! same way, at their device addresses, from the module's load to its unload
//! ([`Mirrors::map_variables`]); their pages may be shared (a GPU packs a module's
//! variables), so the mappings are the module's, not each variable's.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

use vmgpu_cuda_api::DevicePtr;

/// The granularity of the comparison with the shadow.
const CHUNK: usize = 4096;

/// One mirrored range.
#[derive(Debug)]
pub(crate) struct Mirror {
    /// Its device address.
    pub at: u64,
    /// Its host address: `at` for a mapping made here.
    host: u64,
    /// Its size in bytes.
    pub len: usize,
    /// The length of the guest's mapping made here (whole pages; 0 for the program's
    /// own memory).
    map_len: usize,
    /// The server's allocation (it starts at or before `at`).
    pub server: DevicePtr,
    /// The bytes as last exchanged with the device.
    shadow: Vec<u8>,
    /// The module whose `__managed__` variable this is (its mapping is the module's).
    module: Option<u64>,
}

/// Pages mapped here for a module's `__managed__` variables.
#[derive(Debug)]
struct Region {
    start: u64,
    len: usize,
    module: u64,
}

/// The managed allocations of one backend.
#[derive(Debug, Default)]
pub(crate) struct Mirrors {
    list: Mutex<Vec<Mirror>>,
    any: AtomicBool,
    regions: Mutex<Vec<Region>>,
}

/// The page size of this process.
pub(crate) fn page_size() -> usize {
    // SAFETY: sysconf has no preconditions.
    let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    usize::try_from(p).ok().filter(|p| *p > 0).unwrap_or(4096)
}

impl Mirrors {
    fn list(&self) -> std::sync::MutexGuard<'_, Vec<Mirror>> {
        self.list.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Maps `len` zeroed bytes at `at` (page-aligned) in this process, for the server's
    /// allocation `server`; `Err` with the OS's reason when the address is taken.
    pub fn map(&self, at: u64, len: usize, server: DevicePtr) -> Result<(), String> {
        let page = page_size();
        let map_len = len.div_ceil(page).max(1) * page;
        map_fixed(at, map_len)?;
        self.list().push(Mirror {
            at,
            host: at,
            len,
            map_len,
            server,
            shadow: vec![0; len],
            module: None,
        });
        self.any.store(true, Ordering::Release);
        Ok(())
    }

    /// Mirrors module `module`'s `__managed__` variables (name, device address, bytes)
    /// at their device addresses: the pages they cover are mapped here (each run of
    /// touching pages once), and each variable's bytes are read from the device with
    /// `fetch` (its initial value). `Err` naming the variable whose pages cannot be
    /// mapped (the address is taken in this process) or read; then nothing stays mapped.
    pub fn map_variables(
        &self,
        module: u64,
        vars: &[(String, u64, usize)],
        mut fetch: impl FnMut(u64, &mut [u8]) -> Result<(), String>,
    ) -> Result<(), String> {
        let page = page_size() as u64;
        // Each variable's page span, sorted; touching or overlapping spans merged.
        let mut spans: Vec<(u64, u64, &str)> = vars
            .iter()
            .map(|(n, at, len)| {
                let end = (at + (*len).max(1) as u64).div_ceil(page) * page;
                (at / page * page, end, n.as_str())
            })
            .collect();
        spans.sort();
        let mut runs: Vec<(u64, u64, &str)> = vec![];
        for (s, e, n) in spans {
            match runs.last_mut() {
                Some(last) if s <= last.1 => last.1 = last.1.max(e),
                _ => runs.push((s, e, n)),
            }
        }
        let mut mapped: Vec<(u64, usize)> = vec![];
        let undo = |mapped: &[(u64, usize)]| {
            for &(s, l) in mapped {
                // SAFETY: a mapping made just above by this call, used by nothing yet.
                unsafe { libc::munmap(s as usize as *mut libc::c_void, l) };
            }
        };
        for &(start, end, name) in &runs {
            let len = (end - start) as usize;
            if let Err(why) = map_fixed(start, len) {
                undo(&mapped);
                return Err(format!(
                    "the __managed__ variable {name} (device address range {start:#x}..{end:#x}) \
                     cannot be mapped at the same address in this process: {why}"
                ));
            }
            mapped.push((start, len));
        }
        let mut mirrors = Vec::with_capacity(vars.len());
        for (name, at, len) in vars {
            let mut bytes = vec![0u8; *len];
            if let Err(why) = fetch(*at, &mut bytes) {
                undo(&mapped);
                return Err(format!("the __managed__ variable {name}'s value: {why}"));
            }
            // SAFETY: `at..at+len` lies in the pages mapped above (read-write, private,
            // nothing else uses them yet).
            unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), *at as usize as *mut u8, *len) };
            mirrors.push(Mirror {
                at: *at,
                host: *at,
                len: *len,
                map_len: 0,
                server: DevicePtr(*at),
                shadow: bytes,
                module: Some(module),
            });
        }
        self.regions().extend(
            mapped
                .into_iter()
                .map(|(start, len)| Region { start, len, module }),
        );
        let mut list = self.list();
        list.extend(mirrors);
        self.any.store(!list.is_empty(), Ordering::Release);
        Ok(())
    }

    /// Stops mirroring module `module`'s `__managed__` variables and unmaps their pages
    /// (the module is unloaded).
    ///
    /// # Safety
    /// The program no longer uses the variables (they go with the module).
    pub unsafe fn unmap_module(&self, module: u64) {
        {
            let mut list = self.list();
            list.retain(|m| m.module != Some(module));
            self.any.store(!list.is_empty(), Ordering::Release);
        }
        self.regions().retain(|r| {
            if r.module != module {
                return true;
            }
            // SAFETY: the module's mapping, made in `map_variables`, which nothing uses
            // any more (the caller).
            unsafe { libc::munmap(r.start as usize as *mut libc::c_void, r.len) };
            false
        });
    }

    fn regions(&self) -> std::sync::MutexGuard<'_, Vec<Region>> {
        self.regions.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Pairs the program's host range `host..host+len` with device memory at `at` (of
    /// the server's allocation `server`, zeroed): the first push sends its contents.
    ///
    /// # Safety
    /// The range stays valid host memory until [`Mirrors::unmap`] of `at`.
    pub unsafe fn register(&self, host: u64, len: usize, at: u64, server: DevicePtr) {
        self.list().push(Mirror {
            at,
            host,
            len,
            map_len: 0,
            server,
            shadow: vec![0; len],
            module: None,
        });
        self.any.store(true, Ordering::Release);
    }

    /// The device address of host address `host`, inside a mirrored range.
    pub fn device_address(&self, host: u64) -> Option<u64> {
        if !self.any.load(Ordering::Acquire) {
            return None;
        }
        self.list()
            .iter()
            .find(|m| host >= m.host && host - m.host < m.len as u64)
            .map(|m| m.at + (host - m.host))
    }

    /// The device address of the range that starts at host address `host`.
    pub fn by_host(&self, host: u64) -> Option<u64> {
        if !self.any.load(Ordering::Acquire) {
            return None;
        }
        self.list().iter().find(|m| m.host == host).map(|m| m.at)
    }

    /// Forgets and unmaps the managed allocation at `at`; its server allocation.
    ///
    /// # Safety
    /// The program no longer uses the memory (`cuMemFree`'s contract).
    pub unsafe fn unmap(&self, at: u64) -> Option<DevicePtr> {
        let mut list = self.list();
        let i = list.iter().position(|m| m.at == at)?;
        let m = list.remove(i);
        self.any.store(!list.is_empty(), Ordering::Release);
        if m.map_len > 0 {
            // SAFETY: the mapping made in `map`, which nothing uses any more (the
            // caller).
            unsafe { libc::munmap(m.host as usize as *mut libc::c_void, m.map_len) };
        }
        Some(m.server)
    }

    /// Whether `ptr` is the start of a managed allocation.
    pub fn contains(&self, ptr: u64) -> bool {
        self.any.load(Ordering::Acquire) && self.list().iter().any(|m| m.at == ptr)
    }

    /// Copies what the host changed since the last exchange to the device with `send`
    /// (address, bytes), in runs of changed chunks.
    pub fn push(
        &self,
        mut send: impl FnMut(u64, &[u8]) -> Result<(), String>,
    ) -> Result<(), String> {
        if !self.any.load(Ordering::Acquire) {
            return Ok(());
        }
        let mut list = self.list();
        for m in list.iter_mut() {
            // SAFETY: the mapping of `len` bytes made in `map` (or the program's range
            // given to `register`), alive while it is listed; the program does not write
            // it during this call (no concurrent managed access).
            let host = unsafe { std::slice::from_raw_parts(m.host as usize as *const u8, m.len) };
            let mut k = 0;
            while k < m.len {
                let end = (k + CHUNK).min(m.len);
                if host[k..end] == m.shadow[k..end] {
                    k = end;
                    continue;
                }
                // A run of changed chunks.
                let mut run_end = end;
                while run_end < m.len {
                    let next = (run_end + CHUNK).min(m.len);
                    if host[run_end..next] == m.shadow[run_end..next] {
                        break;
                    }
                    run_end = next;
                }
                send(m.at + k as u64, &host[k..run_end])?;
                m.shadow[k..run_end].copy_from_slice(&host[k..run_end]);
                k = run_end;
            }
        }
        Ok(())
    }

    /// Copies the device's bytes back with `fetch` (address, buffer), keeping the bytes
    /// the host changed since the last exchange (the next push sends them).
    pub fn pull(
        &self,
        mut fetch: impl FnMut(u64, &mut [u8]) -> Result<(), String>,
    ) -> Result<(), String> {
        if !self.any.load(Ordering::Acquire) {
            return Ok(());
        }
        let mut list = self.list();
        for m in list.iter_mut() {
            let mut device = vec![0u8; m.len];
            fetch(m.at, &mut device)?;
            // SAFETY: as in `push`, and the program does not read or write the memory
            // during the synchronisation call this runs in.
            let host = unsafe { std::slice::from_raw_parts_mut(m.host as usize as *mut u8, m.len) };
            for ((h, s), d) in host
                .chunks_mut(CHUNK)
                .zip(m.shadow.chunks_mut(CHUNK))
                .zip(device.chunks(CHUNK))
            {
                if h == s {
                    h.copy_from_slice(d);
                } else {
                    for ((hb, sb), db) in h.iter_mut().zip(s.iter()).zip(d) {
                        if *hb == *sb {
                            *hb = *db;
                        }
                    }
                }
                s.copy_from_slice(d);
            }
        }
        Ok(())
    }
}

/// The names of the `__managed__` variables a PTX module defines: its
/// `.global .attribute(.managed)` declarations (one a line, as nvcc writes them).
pub(crate) fn managed_variables(ptx: &str) -> Vec<String> {
    ptx.lines()
        .filter(|l| {
            let l = l.trim_start();
            !l.starts_with("//")
                && l.contains(".global")
                && l.replace(' ', "").contains(".attribute(.managed)")
        })
        .filter_map(|l| {
            // `... .b8 arr[32];`, `... .u32 x = 42;`: the word before `[`, `=` or `;`.
            let decl = l.split(['=', ';']).next()?;
            let last = decl.split_whitespace().last()?;
            let name = last.split('[').next()?;
            (!name.is_empty() && !name.starts_with('.')).then(|| name.to_string())
        })
        .collect()
}

/// Maps `len` zeroed bytes at `at` (page-aligned, `len` whole pages) in this process;
/// `Err` with the OS's reason when the address is taken.
fn map_fixed(at: u64, len: usize) -> Result<(), String> {
    // SAFETY: an anonymous private mapping at a fixed address that must not replace
    // anything mapped there (MAP_FIXED_NOREPLACE); no existing memory is touched.
    let p = unsafe {
        libc::mmap(
            at as usize as *mut libc::c_void,
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED_NOREPLACE,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return Err(std::io::Error::last_os_error().to_string());
    }
    if p as usize as u64 != at {
        // An old kernel that ignores MAP_FIXED_NOREPLACE placed it elsewhere.
        // SAFETY: the mapping just made, of `len` bytes, used by nothing.
        unsafe { libc::munmap(p, len) };
        return Err(format!("the address range at {at:#x} is in use"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A device side of `n` bytes at `at`, as the closures of push and pull see it.
    struct Device {
        at: u64,
        bytes: Vec<u8>,
        sent: Vec<(u64, usize)>,
    }

    impl Device {
        fn push(&mut self, m: &Mirrors) {
            m.push(|at, data| {
                let o = (at - self.at) as usize;
                self.bytes[o..o + data.len()].copy_from_slice(data);
                self.sent.push((at, data.len()));
                Ok(())
            })
            .unwrap();
        }
        fn pull(&self, m: &Mirrors) {
            m.pull(|at, buf| {
                let o = (at - self.at) as usize;
                buf.copy_from_slice(&self.bytes[o..o + buf.len()]);
                Ok(())
            })
            .unwrap();
        }
    }

    #[test]
    fn managed_variables_are_found_in_nvccs_ptx() {
        let ptx = ".version 9.0\n.target sm_80\n.address_size 64\n\
            .global .attribute(.managed) .align 4 .u32 counter;\n\
            .global .attribute(.managed) .align 4 .b8 vals[4000];\n\
            .visible .global .attribute(.managed) .align 4 .u32 seeded = 42;\n\
            .global .align 4 .u32 plain;\n\
            // .global .attribute(.managed) .u32 commented;\n";
        assert_eq!(managed_variables(ptx), ["counter", "vals", "seeded"]);
    }

    #[test]
    fn a_modules_variables_share_pages_and_go_with_it() {
        let page = page_size() as u64;
        // A free address range: reserved, then released.
        // SAFETY: a fresh anonymous mapping anywhere; unmapped at once.
        let base = unsafe {
            let p = libc::mmap(
                std::ptr::null_mut(),
                4 * page as usize,
                libc::PROT_NONE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            );
            assert_ne!(p, libc::MAP_FAILED);
            libc::munmap(p, 4 * page as usize);
            p as u64
        };
        // Two variables in one page (as a GPU packs them), one across the next two.
        let vars = [
            ("a".to_string(), base + 16, 4),
            ("b".to_string(), base + 64, 8),
            ("c".to_string(), base + 2 * page - 4, 8),
        ];
        let m = Mirrors::default();
        let mut fetched = vec![];
        m.map_variables(7, &vars, |at, buf| {
            fetched.push(at);
            buf.fill(at as u8 ^ 0x5a);
            Ok(())
        })
        .unwrap();
        assert_eq!(fetched, [base + 16, base + 64, base + 2 * page - 4]);
        // The initial values are in the host's memory at the device addresses.
        // SAFETY: mapped by `map_variables` until `unmap_module` below.
        let c = unsafe { std::slice::from_raw_parts((base + 2 * page - 4) as *const u8, 8) };
        assert_eq!(c, [((base + 2 * page - 4) as u8) ^ 0x5a; 8]);
        assert_eq!(m.device_address(base + 66), Some(base + 66));
        assert_eq!(m.regions().len(), 1, "one run of touching pages");
        // A second module whose variable is in those pages is refused, naming it.
        let e = m
            .map_variables(8, &[("d".to_string(), base + 128, 4)], |_, _| Ok(()))
            .unwrap_err();
        assert!(e.contains("__managed__ variable d"), "{e}");
        // SAFETY: nothing uses the variables any more.
        unsafe { m.unmap_module(7) };
        assert_eq!(m.device_address(base + 66), None);
        assert!(m.regions().is_empty());
        // The pages are free again.
        m.map_variables(8, &[("d".to_string(), base + 128, 4)], |_, _| Ok(()))
            .unwrap();
        // SAFETY: as above.
        unsafe { m.unmap_module(8) };
    }

    #[test]
    fn only_changed_chunks_go_and_host_changes_survive_a_pull() {
        let n = 3 * CHUNK + 100;
        let mut host = vec![0u8; n];
        let at = 0x7000_0000_0000;
        let m = Mirrors::default();
        // SAFETY: `host` outlives the mirror (unmapped below) and is only touched
        // between the calls, as a program without concurrent access does.
        unsafe { m.register(host.as_mut_ptr() as u64, n, at, DevicePtr(at)) };
        assert_eq!(m.device_address(host.as_ptr() as u64 + 5), Some(at + 5));
        let mut dev = Device {
            at,
            bytes: vec![0; n],
            sent: vec![],
        };
        // Nothing changed: nothing sent.
        dev.push(&m);
        assert!(dev.sent.is_empty());
        // Two bytes in chunk 1 and one in the short last chunk: two runs sent.
        host[CHUNK + 7] = 1;
        host[CHUNK + 9] = 2;
        host[3 * CHUNK + 50] = 3;
        dev.push(&m);
        assert_eq!(
            dev.sent,
            [(at + CHUNK as u64, CHUNK), (at + 3 * CHUNK as u64, 100)]
        );
        assert_eq!(dev.bytes[CHUNK + 9], 2);
        // The device writes byte 10 and byte CHUNK + 7; the host writes byte 11 meanwhile.
        dev.bytes[10] = 10;
        dev.bytes[CHUNK + 7] = 70;
        host[11] = 11;
        dev.pull(&m);
        assert_eq!((host[10], host[11], host[CHUNK + 7]), (10, 11, 70));
        // The host's byte 11 goes at the next push; the device's byte 10 stays.
        dev.sent.clear();
        dev.push(&m);
        assert_eq!(dev.sent, [(at, CHUNK)]);
        assert_eq!((dev.bytes[10], dev.bytes[11]), (10, 11));
        // SAFETY: the program's range, registered above; not used through it any more.
        assert_eq!(unsafe { m.unmap(at) }, Some(DevicePtr(at)));
        assert!(!m.contains(at));
    }
}
