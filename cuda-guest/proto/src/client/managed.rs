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
}

/// The managed allocations of one backend.
#[derive(Debug, Default)]
pub(crate) struct Mirrors {
    list: Mutex<Vec<Mirror>>,
    any: AtomicBool,
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
        // SAFETY: an anonymous private mapping at a fixed address that must not replace
        // anything mapped there (MAP_FIXED_NOREPLACE); no existing memory is touched.
        let p = unsafe {
            libc::mmap(
                at as usize as *mut libc::c_void,
                map_len,
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
            // SAFETY: the mapping just made, of `map_len` bytes, used by nothing.
            unsafe { libc::munmap(p, map_len) };
            return Err(format!("the address range at {at:#x} is in use"));
        }
        self.list().push(Mirror {
            at,
            host: at,
            len,
            map_len,
            server,
            shadow: vec![0; len],
        });
        self.any.store(true, Ordering::Release);
        Ok(())
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
