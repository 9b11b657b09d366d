//! Device memory: allocations at tagged 64-bit addresses that are never reused, so a
//! null, freed or foreign pointer is recognised; contents are relaxed atomics so that
//! blocks running on several host threads never race in the Rust sense.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering::*};
use std::sync::{Arc, Mutex};

/// Where device allocations start (a tag per simulator in bits 40..47 tells simulators apart).
pub(crate) const DEVICE_BASE: u64 = 0x0000_7000_0000_0000;
const GUARD: u64 = 4096;

static NEXT_TAG: AtomicU64 = AtomicU64::new(1);

/// One allocation.
#[derive(Debug)]
pub(crate) struct Alloc {
    pub id: u64,
    pub base: u64,
    pub size: u64,
    words: Box<[AtomicU32]>,
    /// Module variable name, for module-scope `.global`/`.const` variables.
    pub name: Option<String>,
    /// A `.const` variable: kernels may not store to it.
    pub read_only: bool,
}

impl Alloc {
    fn new(id: u64, base: u64, size: u64, name: Option<String>, read_only: bool) -> Alloc {
        let n = (size as usize).div_ceil(4) + 1;
        let words = (0..n)
            .map(|_| AtomicU32::new(0))
            .collect::<Vec<_>>()
            .into_boxed_slice();
        Alloc {
            id,
            base,
            size,
            words,
            name,
            read_only,
        }
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

    /// Copies bytes out.
    pub fn read_bytes(&self, off: u64, out: &mut [u8]) {
        for (i, b) in out.iter_mut().enumerate() {
            *b = self.load(off + i as u64, 1) as u8;
        }
    }

    /// Copies bytes in.
    pub fn write_bytes(&self, off: u64, data: &[u8]) {
        let mut i = 0usize;
        // Aligned words at once.
        while i < data.len() {
            let o = off + i as u64;
            if o.is_multiple_of(4) && i + 4 <= data.len() {
                let v = u32::from_le_bytes([data[i], data[i + 1], data[i + 2], data[i + 3]]);
                self.words[(o >> 2) as usize].store(v, Relaxed);
                i += 4;
            } else {
                self.store(o, 1, data[i] as u64);
                i += 1;
            }
        }
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
    pub tag: u64,
    next: u64,
    next_id: u64,
    /// Live allocations sorted by base.
    pub live: Vec<Arc<Alloc>>,
    pub freed: Vec<Freed>,
    pub bytes_live: u64,
    /// Locks for 64-bit atomics (striped by address).
    pub locks64: Arc<[Mutex<()>; 64]>,
}

impl Memory {
    pub fn new() -> Memory {
        let tag = NEXT_TAG.fetch_add(1, Relaxed) % 255 + 1;
        Memory {
            tag,
            next: DEVICE_BASE | (tag << 40) | GUARD,
            next_id: 1,
            live: vec![],
            freed: vec![],
            bytes_live: 0,
            locks64: Arc::new(std::array::from_fn(|_| Mutex::new(()))),
        }
    }

    pub fn alloc(
        &mut self,
        size: u64,
        name: Option<String>,
        read_only: bool,
    ) -> Option<Arc<Alloc>> {
        let base = self.next;
        let span = size.max(1).div_ceil(256) * 256 + GUARD;
        let end = base.checked_add(span)?;
        if end >= (DEVICE_BASE | (self.tag << 40)) + (1 << 40) {
            return None;
        }
        self.next = end;
        let a = Arc::new(Alloc::new(self.next_id, base, size, name, read_only));
        self.next_id += 1;
        self.bytes_live += size;
        self.live.push(a.clone()); // bases increase: stays sorted
        Some(a)
    }

    pub fn free(&mut self, base: u64) -> Result<(), Option<Freed>> {
        match self.live.binary_search_by_key(&base, |a| a.base) {
            Ok(i) => {
                let a = self.live.remove(i);
                self.bytes_live -= a.size;
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
