//! Device memory: allocations at tagged 64-bit addresses that are never reused, so a
//! null, freed or foreign pointer is recognised; contents are relaxed atomics so that
//! blocks running on several host threads never race in the Rust sense.
//!
//! Host memory the device reaches (managed memory, page-locked host memory) is an
//! allocation too, at its host address (unified addressing: the device pointer is the
//! host pointer), whose words are the host's bytes.

use std::alloc::Layout;
use std::ops::Deref;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering::*};
use std::sync::{Arc, Mutex};

/// Where an allocation's words live.
#[derive(Debug)]
pub(crate) enum Words {
    /// The simulator's own memory.
    Owned(Box<[AtomicU32]>),
    /// Host memory at the allocation's address: `len` words from `ptr`, freed with
    /// `free` when the allocation goes (memory the simulator made), or the program's
    /// (`free` is `None`).
    Host {
        ptr: NonNull<AtomicU32>,
        len: usize,
        free: Option<Layout>,
    },
}

// SAFETY: the host words are only reached as `AtomicU32`s (shared access is what atomics
// are for), and the memory stays valid while the allocation lives: the simulator's own
// is freed only when it is dropped, the program's is unmapped (removed from the live
// list, after the device is idle) before the program may free it.
unsafe impl Send for Words {}
// SAFETY: as above.
unsafe impl Sync for Words {}

impl Deref for Words {
    type Target = [AtomicU32];
    fn deref(&self) -> &[AtomicU32] {
        match self {
            Words::Owned(b) => b,
            // SAFETY: `ptr..ptr+len` words are valid, aligned host memory while the
            // allocation lives (see the `Send` argument), only accessed atomically here.
            Words::Host { ptr, len, .. } => unsafe {
                std::slice::from_raw_parts(ptr.as_ptr(), *len)
            },
        }
    }
}

impl Drop for Words {
    fn drop(&mut self) {
        if let Words::Host {
            ptr,
            free: Some(layout),
            ..
        } = self
        {
            // SAFETY: made by `alloc_zeroed(layout)` in `Words::zeroed_host` and freed
            // only here, once.
            unsafe { std::alloc::dealloc(ptr.as_ptr().cast(), *layout) };
        }
    }
}

impl Words {
    /// Zeroed, page-aligned host memory for `size` bytes that the host reaches at its
    /// address (managed memory); `None` when the host has none.
    pub fn zeroed_host(size: u64) -> Option<Words> {
        let n = usize::try_from(size).ok()?.div_ceil(4).checked_add(1)?;
        let layout = Layout::from_size_align(n.checked_mul(4)?, 4096).ok()?;
        // SAFETY: `layout` has a non-zero size.
        let p = unsafe { std::alloc::alloc_zeroed(layout) };
        Some(Words::Host {
            ptr: NonNull::new(p.cast())?,
            len: n,
            free: Some(layout),
        })
    }

    /// The program's host memory `base..base+size` (`base` 4-aligned).
    ///
    /// # Safety
    /// The range is valid, readable and writable host memory until the allocation is
    /// removed from the live list (and the device is idle).
    pub unsafe fn program_host(base: u64, size: u64) -> Option<Words> {
        Some(Words::Host {
            ptr: NonNull::new(base as usize as *mut AtomicU32)?,
            len: usize::try_from(size).ok()?.div_ceil(4),
            free: None,
        })
    }

    /// Where its words start in the host's address space, for host memory.
    pub fn host_address(&self) -> Option<u64> {
        match self {
            Words::Owned(_) => None,
            Words::Host { ptr, .. } => Some(ptr.as_ptr() as usize as u64),
        }
    }
}

/// Where device allocations start: each simulator allocates in a window of its own
/// ([`WINDOW_BITS`]), the [`WINDOWS`] windows filling `0x7000_0000_0000..0x8000_0000_0000`,
/// inside a 47-bit user address space (forwarded managed memory is mapped at its device
/// address in the guest program's process).
pub(crate) const DEVICE_BASE: u64 = 0x0000_7000_0000_0000;
const GUARD: u64 = 4096;
/// A window is 256 GiB of addresses (never reused within a simulator).
const WINDOW_BITS: u32 = 38;
const WINDOWS: usize = (0x1000_0000_0000u64 >> WINDOW_BITS) as usize;

/// Simulators' identities (never reused: a module knows its simulator by it).
static NEXT_TAG: AtomicU64 = AtomicU64::new(1);
/// How many live simulators use each window: a new one takes the least used, so a
/// process that makes simulator after simulator (a service, one per guest) reuses the
/// windows of those gone, and up to [`WINDOWS`] live ones never share one.
static WINDOW_USERS: Mutex<[u32; WINDOWS]> = Mutex::new([0; WINDOWS]);

/// One allocation.
#[derive(Debug)]
pub(crate) struct Alloc {
    pub id: u64,
    pub base: u64,
    pub size: u64,
    words: Words,
    /// Module variable name, for module-scope `.global`/`.const` variables.
    pub name: Option<String>,
    /// A `.const` variable: kernels may not store to it.
    pub read_only: bool,
    /// Host memory mapped for the device (not charged to device memory).
    pub host_mapped: bool,
}

impl Alloc {
    /// A zero-filled allocation; `None` when the host cannot provide the memory (the
    /// reservation is fallible, so a huge request is refused instead of aborting).
    fn new(id: u64, base: u64, size: u64, name: Option<String>, read_only: bool) -> Option<Alloc> {
        let n = usize::try_from(size).ok()?.div_ceil(4).checked_add(1)?;
        let mut words: Vec<AtomicU32> = Vec::new();
        words.try_reserve_exact(n).ok()?;
        words.resize_with(n, || AtomicU32::new(0));
        Some(Alloc {
            id,
            base,
            size,
            words: Words::Owned(words.into_boxed_slice()),
            name,
            read_only,
            host_mapped: false,
        })
    }

    /// Where its words are in the host's address space, for compiled code (the JIT),
    /// which reads and writes them as plain memory: each word is an `AtomicU32`, whose
    /// contents may change through a shared reference.
    pub fn host_ptr(&self) -> *mut u8 {
        self.words.as_ptr() as *mut u8
    }

    /// Loads `size` (1, 2, 4, 8) bytes at byte offset `off` (naturally aligned, in range).
    #[inline(always)]
    pub fn load(&self, off: u64, size: u8) -> u64 {
        let w = (off >> 2) as usize;
        match size {
            4 => self.words[w].load(Relaxed) as u64,
            8 => {
                (self.words[w].load(Relaxed) as u64)
                    | ((self.words[w + 1].load(Relaxed) as u64) << 32)
            }
            _ => {
                let v = self.words[w].load(Relaxed) >> ((off & 3) * 8);
                (v & if size == 1 { 0xff } else { 0xffff }) as u64
            }
        }
    }

    /// The 32 consecutive words starting at byte offset `off` (4-aligned), if in range.
    #[inline(always)]
    pub fn words32(&self, off: u64) -> Option<&[AtomicU32; 32]> {
        let w = (off >> 2) as usize;
        <&[AtomicU32; 32]>::try_from(self.words.get(w..w + 32)?).ok()
    }

    /// Loads the aligned 32-bit word at `off`.
    #[inline(always)]
    pub fn load32(&self, off: u64) -> u32 {
        self.words[(off >> 2) as usize].load(Relaxed)
    }

    /// Stores the aligned 32-bit word at `off`.
    #[inline(always)]
    pub fn store32(&self, off: u64, v: u32) {
        self.words[(off >> 2) as usize].store(v, Relaxed)
    }

    /// Stores `size` bytes at `off` (naturally aligned, in range).
    #[inline(always)]
    pub fn store(&self, off: u64, size: u8, v: u64) {
        let w = (off >> 2) as usize;
        match size {
            4 => self.words[w].store(v as u32, Relaxed),
            8 => {
                self.words[w].store(v as u32, Relaxed);
                self.words[w + 1].store((v >> 32) as u32, Relaxed);
            }
            _ => {
                let sh = (off & 3) * 8;
                let m: u32 = (if size == 1 { 0xff } else { 0xffff }) << sh;
                let bits = ((v as u32) << sh) & m;
                let _ = self.words[w].fetch_update(Relaxed, Relaxed, |x| Some((x & !m) | bits));
            }
        }
    }

    /// 32-bit atomic read-modify-write; returns the old value.
    pub fn rmw32(&self, off: u64, f: impl Fn(u32) -> u32) -> u32 {
        let w = &self.words[(off >> 2) as usize];
        match w.fetch_update(SeqCst, SeqCst, |x| Some(f(x))) {
            Ok(v) | Err(v) => v,
        }
    }

    /// Copies bytes out (`off + out.len()` in range): whole words where aligned.
    pub fn read_bytes(&self, off: u64, out: &mut [u8]) {
        let head = ((4 - (off & 3)) & 3).min(out.len() as u64) as usize;
        let (h, rest) = out.split_at_mut(head);
        for (i, b) in h.iter_mut().enumerate() {
            *b = self.load(off + i as u64, 1) as u8;
        }
        let o = off + head as u64;
        let w0 = (o >> 2) as usize;
        let body = rest.len() / 4 * 4;
        let to = o + body as u64;
        let mut chunks = rest.chunks_exact_mut(4);
        let words = &self.words[w0..w0 + chunks.len()];
        for (c, w) in (&mut chunks).zip(words) {
            c.copy_from_slice(&w.load(Relaxed).to_le_bytes());
        }
        let tail = chunks.into_remainder();
        for (i, b) in tail.iter_mut().enumerate() {
            *b = self.load(to + i as u64, 1) as u8;
        }
    }

    /// Copies bytes in (`off + data.len()` in range): whole words where aligned.
    pub fn write_bytes(&self, off: u64, data: &[u8]) {
        let head = ((4 - (off & 3)) & 3).min(data.len() as u64) as usize;
        let (h, rest) = data.split_at(head);
        for (i, b) in h.iter().enumerate() {
            self.store(off + i as u64, 1, *b as u64);
        }
        let o = off + head as u64;
        let w0 = (o >> 2) as usize;
        let chunks = rest.chunks_exact(4);
        let tail = chunks.remainder();
        let words = &self.words[w0..w0 + chunks.len()];
        for (c, w) in chunks.zip(words) {
            w.store(u32::from_le_bytes([c[0], c[1], c[2], c[3]]), Relaxed);
        }
        let to = o + (rest.len() - tail.len()) as u64;
        for (i, b) in tail.iter().enumerate() {
            self.store(to + i as u64, 1, *b as u64);
        }
    }

    /// Sets `len` bytes at `off` (in range) to `value`.
    pub fn fill(&self, off: u64, len: u64, value: u8) {
        let head = ((4 - (off & 3)) & 3).min(len);
        for i in 0..head {
            self.store(off + i, 1, value as u64);
        }
        let o = off + head;
        let n = ((len - head) / 4) as usize;
        let w0 = (o >> 2) as usize;
        let word = u32::from_ne_bytes([value; 4]);
        for w in &self.words[w0..w0 + n] {
            w.store(word, Relaxed);
        }
        for i in o + 4 * n as u64..off + len {
            self.store(i, 1, value as u64);
        }
    }

    /// Sets `count` 32-bit words from `off` (4-aligned, in range) to `value`.
    pub fn fill32(&self, off: u64, count: u64, value: u32) {
        let w0 = (off >> 2) as usize;
        for w in &self.words[w0..w0 + count as usize] {
            w.store(value, Relaxed);
        }
    }

    /// Copies `len` bytes from `src` at `soff` to `self` at `doff` (both in range), as
    /// `memmove` does when both are the same allocation and the ranges overlap.
    pub fn copy_from(&self, doff: u64, src: &Alloc, soff: u64, len: u64) {
        let backward = std::ptr::eq(self, src) && doff > soff && doff < soff + len;
        if doff & 3 == 0 && soff & 3 == 0 {
            let n = (len / 4) as usize;
            let (d0, s0) = ((doff >> 2) as usize, (soff >> 2) as usize);
            let (dw, sw) = (&self.words[d0..d0 + n], &src.words[s0..s0 + n]);
            let tail = 4 * n as u64..len;
            if backward {
                for t in tail.clone().rev() {
                    self.store(doff + t, 1, src.load(soff + t, 1));
                }
                for (d, s) in dw.iter().zip(sw).rev() {
                    d.store(s.load(Relaxed), Relaxed);
                }
            } else {
                for (d, s) in dw.iter().zip(sw) {
                    d.store(s.load(Relaxed), Relaxed);
                }
                for t in tail {
                    self.store(doff + t, 1, src.load(soff + t, 1));
                }
            }
            return;
        }
        // Unaligned: through a small buffer on the stack, chunk by chunk.
        const CHUNK: u64 = 4096;
        let mut buf = [0u8; CHUNK as usize];
        let nchunks = len.div_ceil(CHUNK);
        for k in 0..nchunks {
            let k = if backward { nchunks - 1 - k } else { k };
            let at = k * CHUNK;
            let b = &mut buf[..(len - at).min(CHUNK) as usize];
            src.read_bytes(soff + at, b);
            self.write_bytes(doff + at, b);
        }
    }
}

/// The device heap kernels `malloc` from (`cudaLimitMallocHeapSize`): one allocation of
/// device memory, carved first-fit in 16-byte units; a request it cannot meet is null,
/// as on a GPU.
#[derive(Debug)]
pub(crate) struct DeviceHeap {
    base: u64,
    size: u64,
    /// Free ranges (offset to length) and blocks in use (offset to length).
    state: Mutex<(
        std::collections::BTreeMap<u64, u64>,
        std::collections::HashMap<u64, u64>,
    )>,
}

/// The device heap's size: CUDA's default `cudaLimitMallocHeapSize`.
pub(crate) const HEAP_SIZE: u64 = 8 << 20;

impl DeviceHeap {
    /// A heap over the allocation at `base` of `size` bytes.
    pub fn new(base: u64, size: u64) -> DeviceHeap {
        DeviceHeap {
            base,
            size,
            state: Mutex::new((
                std::iter::once((0, size)).collect(),
                std::collections::HashMap::new(),
            )),
        }
    }

    /// `malloc(n)`: an address, or 0.
    pub fn alloc(&self, n: u64) -> u64 {
        if n == 0 || n > self.size {
            return 0;
        }
        let n = n.div_ceil(16) * 16;
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let Some((&off, &len)) = st.0.iter().find(|(_, &len)| len >= n) else {
            return 0;
        };
        st.0.remove(&off);
        if len > n {
            st.0.insert(off + n, len - n);
        }
        st.1.insert(off, n);
        self.base + off
    }

    /// `free(p)`: whether `p` was a block of the heap (then it is free again).
    pub fn free(&self, p: u64) -> bool {
        let Some(off) = p.checked_sub(self.base) else {
            return false;
        };
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let Some(n) = st.1.remove(&off) else {
            return false;
        };
        // Joined with free neighbours.
        let (mut start, mut len) = (off, n);
        if let Some((&o, &l)) = st.0.range(..off).next_back() {
            if o + l == off {
                st.0.remove(&o);
                start = o;
                len += l;
            }
        }
        if let Some(l) = st.0.remove(&(off + n)) {
            len += l;
        }
        st.0.insert(start, len);
        true
    }
}

/// A freed allocation, kept to name it in fault reports.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Freed {
    pub id: u64,
    pub base: u64,
    pub size: u64,
}

/// The device memory of one simulator.
#[derive(Debug)]
pub(crate) struct Memory {
    /// This simulator's identity (unique in the process).
    pub tag: u64,
    /// Its address window (see [`DEVICE_BASE`]).
    window: usize,
    next: u64,
    next_id: u64,
    /// Live allocations sorted by base.
    pub live: Vec<Arc<Alloc>>,
    pub freed: Vec<Freed>,
    pub bytes_live: u64,
    /// Locks for 64-bit atomics (striped by address).
    pub locks64: Arc<[Mutex<()>; 64]>,
    /// The device heap, made at the first launch of a kernel that calls `malloc`.
    pub heap: Option<Arc<DeviceHeap>>,
}

impl Memory {
    pub fn new() -> Memory {
        let tag = NEXT_TAG.fetch_add(1, Relaxed);
        let window = {
            let mut users = WINDOW_USERS.lock().unwrap_or_else(|e| e.into_inner());
            let w = (0..WINDOWS).min_by_key(|&w| users[w]).unwrap_or(0);
            users[w] += 1;
            w
        };
        Memory {
            tag,
            window,
            next: Self::window_base(window) + GUARD,
            next_id: 1,
            live: vec![],
            freed: vec![],
            bytes_live: 0,
            locks64: Arc::new(std::array::from_fn(|_| Mutex::new(()))),
            heap: None,
        }
    }

    /// The first address of window `w`.
    fn window_base(w: usize) -> u64 {
        DEVICE_BASE + ((w as u64) << WINDOW_BITS)
    }

    pub fn alloc(
        &mut self,
        size: u64,
        name: Option<String>,
        read_only: bool,
    ) -> Option<Arc<Alloc>> {
        let span = size.max(1).div_ceil(256) * 256 + GUARD;
        let mut base = self.next;
        let mut end = base.checked_add(span)?;
        // Host memory mapped at its own address may sit in the device range: step over.
        while let Some(b) = self.overlap(base, end) {
            base = (b.base + b.size.max(1)).div_ceil(256) * 256 + GUARD;
            end = base.checked_add(span)?;
        }
        if end >= Self::window_base(self.window) + (1 << WINDOW_BITS) {
            return None;
        }
        let a = Arc::new(Alloc::new(self.next_id, base, size, name, read_only)?);
        self.next = end;
        self.next_id += 1;
        self.bytes_live += size;
        self.insert(a.clone());
        Some(a)
    }

    /// A live allocation overlapping `[start, end)`.
    fn overlap(&self, start: u64, end: u64) -> Option<&Arc<Alloc>> {
        let i = self.live.partition_point(|a| a.base < end);
        self.live[..i]
            .last()
            .filter(|a| a.base + a.size.max(1) > start)
    }

    /// Adds `a` to the live list, which stays sorted by base.
    fn insert(&mut self, a: Arc<Alloc>) {
        let i = self.live.partition_point(|x| x.base < a.base);
        self.live.insert(i, a);
    }

    /// Host memory at its own address `base` (4-aligned), `size` bytes: managed memory
    /// (charged to device memory; `name` for a module's `.managed` variable) or mapped
    /// page-locked memory (`host_mapped`, not charged). `None` when it overlaps a live
    /// allocation.
    pub fn map_host(
        &mut self,
        base: u64,
        size: u64,
        words: Words,
        host_mapped: bool,
        name: Option<String>,
    ) -> Option<Arc<Alloc>> {
        let end = base.checked_add(size.max(1))?;
        if base & 3 != 0 || self.overlap(base, end).is_some() {
            return None;
        }
        let a = Arc::new(Alloc {
            id: self.next_id,
            base,
            size,
            words,
            name,
            read_only: false,
            host_mapped,
        });
        self.next_id += 1;
        if !host_mapped {
            self.bytes_live += size;
        }
        self.insert(a.clone());
        Some(a)
    }

    pub fn free(&mut self, base: u64) -> Result<(), Option<Freed>> {
        match self.live.binary_search_by_key(&base, |a| a.base) {
            Ok(i) => {
                let a = self.live.remove(i);
                if !a.host_mapped {
                    self.bytes_live -= a.size;
                }
                self.freed.push(Freed {
                    id: a.id,
                    base: a.base,
                    size: a.size,
                });
                Ok(())
            }
            Err(_) => Err(self.freed.iter().find(|f| f.base == base).copied()),
        }
    }

    /// The live allocation holding `[addr, addr+len)`.
    pub fn find(&self, addr: u64, len: u64) -> Option<(&Arc<Alloc>, u64)> {
        find_in(&self.live, addr, len)
    }
}

/// Finds the allocation holding `[addr, addr+len)` in a sorted list.
pub(crate) fn find_in(live: &[Arc<Alloc>], addr: u64, len: u64) -> Option<(&Arc<Alloc>, u64)> {
    let i = live.partition_point(|a| a.base <= addr);
    if i == 0 {
        return None;
    }
    let a = &live[i - 1];
    let off = addr - a.base;
    if off.checked_add(len)? <= a.size {
        Some((a, off))
    } else {
        None
    }
}

impl Drop for Memory {
    fn drop(&mut self) {
        let mut users = WINDOW_USERS.lock().unwrap_or_else(|e| e.into_inner());
        users[self.window] = users[self.window].saturating_sub(1);
    }
}

#[cfg(test)]
mod heap_tests {
    use super::DeviceHeap;

    #[test]
    fn first_fit_in_16_byte_units_null_when_full_and_freed_blocks_joined() {
        let h = DeviceHeap::new(0x1000, 256);
        let a = h.alloc(1);
        let b = h.alloc(100);
        assert_eq!((a, b), (0x1000, 0x1010));
        assert_eq!(h.alloc(0), 0, "malloc(0) is null");
        assert_eq!(h.alloc(1000), 0, "more than the heap");
        let c = h.alloc(256 - 16 - 112);
        assert_eq!(c, 0x1080);
        assert_eq!(h.alloc(1), 0, "full");
        assert!(h.free(b));
        assert!(!h.free(b), "twice");
        assert!(!h.free(0x1008), "not a block's start");
        assert!(!h.free(0x10), "below the heap");
        assert!(h.free(a));
        // a and b joined: 128 bytes at the start again.
        assert_eq!(h.alloc(128), 0x1000);
        assert!(h.free(c));
        assert!(h.free(0x1000));
        assert_eq!(h.alloc(256), 0x1000, "everything joined");
    }
}

#[cfg(test)]
mod window_tests {
    use super::{Memory, DEVICE_BASE, WINDOWS};

    /// A service makes a simulator per guest: however many come and go, or live at
    /// once, their device addresses stay inside a 47-bit user address space (they were
    /// past it after 128 simulators, and some pairs shared addresses).
    #[test]
    fn device_addresses_stay_below_2_47_for_any_number_of_simulators() {
        let inside = |m: &mut Memory| {
            let a = m.alloc(1 << 16, None, false).expect("an allocation");
            assert!(
                a.base >= DEVICE_BASE && a.base + a.size < 1 << 47,
                "{:#x}",
                a.base
            );
        };
        for _ in 0..1000 {
            inside(&mut Memory::new());
        }
        let mut live: Vec<Memory> = (0..WINDOWS + 8).map(|_| Memory::new()).collect();
        for m in &mut live {
            inside(m);
        }
    }
}
