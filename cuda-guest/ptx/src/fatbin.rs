//! The fat binaries nvcc makes (`.nv_fatbin` in a program, `nvcc -fatbin` files): a
//! wrapper (`__fatBinC_Wrapper_t`: magic `0x466243b1`, a version, a pointer to the
//! fatbin), as `__cudaRegisterFatBinary` receives it, then the fatbin (magic
//! `0xBA55ED50`, a 16-byte header, its size), as `cuModuleLoadData` may receive it,
//! holding entries of PTX or machine code for one architecture each. An entry's payload
//! may be compressed: zstd (nvcc 13's default; a standard frame), LZ4 (block format,
//! `-compress-mode=speed`) or not at all (`--no-compress`).
//!
//! Only the PTX entries are of use here; machine code is for a real GPU's driver. The
//! runtime library (registration) and the driver library (module loads) both read
//! fatbins through this module.

/// `__fatBinC_Wrapper_t`'s magic.
pub const WRAPPER_MAGIC: u32 = 0x466243b1;
/// A fatbin's magic.
pub const FATBIN_MAGIC: u32 = 0xBA55ED50;
/// An entry of PTX.
const KIND_PTX: u16 = 1;
/// Entry flag: the payload is LZ4-compressed.
const FLAG_LZ4: u64 = 0x2000;
/// Entry flag: the payload is zstd-compressed.
const FLAG_ZSTD: u64 = 0x8000;
/// The largest decompressed PTX taken (a bound against a corrupt size).
const MAX_PTX: usize = 256 << 20;

/// Why a fatbin could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum FatbinError {
    /// The wrapper or the fatbin has the wrong magic.
    #[error("magic {found:#x}, expected {expected:#x}")]
    BadMagic {
        /// What was read.
        found: u32,
        /// What was expected.
        expected: u32,
    },
    /// A size or offset points past the data.
    #[error("{what} runs past the fatbin")]
    Truncated {
        /// What was being read.
        what: &'static str,
    },
    /// The fatbin holds no entry at all: a program built with `-rdc=true` registers an
    /// empty one and keeps its device code in `__nv_relfatbin`.
    #[error(
        "the fatbin holds no entry (a program built with -rdc=true keeps its device code \
         in __nv_relfatbin)"
    )]
    Empty,
    /// The fatbin holds no PTX (only machine code, which the simulator cannot run).
    #[error(
        "no PTX in the fatbin, only machine code for {sm:?} (build with \
         -gencode arch=compute_XX,code=compute_XX to embed PTX)"
    )]
    NoPtx {
        /// The architectures of its machine code.
        sm: Vec<u32>,
    },
    /// A payload does not decompress.
    #[error("the PTX for sm_{sm} does not decompress: {reason}")]
    Decompress {
        /// The entry's architecture.
        sm: u32,
        /// What the decoder said.
        reason: String,
    },
}

/// One PTX entry: its architecture and text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PtxEntry {
    /// `sm_XX` as XX.
    pub sm: u32,
    /// The PTX.
    pub ptx: String,
}

fn u16_at(b: &[u8], at: usize, what: &'static str) -> Result<u16, FatbinError> {
    b.get(at..at + 2)
        .map(|s| u16::from_le_bytes([s[0], s[1]]))
        .ok_or(FatbinError::Truncated { what })
}

fn u32_at(b: &[u8], at: usize, what: &'static str) -> Result<u32, FatbinError> {
    b.get(at..at + 4)
        .map(|s| u32::from_le_bytes([s[0], s[1], s[2], s[3]]))
        .ok_or(FatbinError::Truncated { what })
}

fn u64_at(b: &[u8], at: usize, what: &'static str) -> Result<u64, FatbinError> {
    b.get(at..at + 8)
        .map(|s| u64::from_le_bytes(s.try_into().expect("8 bytes")))
        .ok_or(FatbinError::Truncated { what })
}

/// The fatbin's whole length (its 16-byte header and entries) from its first 16 bytes.
pub fn fatbin_len(header: &[u8]) -> Result<usize, FatbinError> {
    let magic = u32_at(header, 0, "the fatbin header")?;
    if magic != FATBIN_MAGIC {
        return Err(FatbinError::BadMagic {
            found: magic,
            expected: FATBIN_MAGIC,
        });
    }
    let header_size = u16_at(header, 6, "the fatbin header")? as usize;
    let size = u64_at(header, 8, "the fatbin header")?;
    usize::try_from(size)
        .ok()
        .and_then(|s| s.checked_add(header_size))
        .ok_or(FatbinError::Truncated { what: "the fatbin" })
}

/// The PTX entries of fatbin `b` (its header first), decompressed, in the fatbin's order.
pub fn ptx_entries(b: &[u8]) -> Result<Vec<PtxEntry>, FatbinError> {
    let total = fatbin_len(b)?;
    let b = b
        .get(..total)
        .ok_or(FatbinError::Truncated { what: "the fatbin" })?;
    let mut at = u16_at(b, 6, "the fatbin header")? as usize;
    let (mut out, mut machine) = (Vec::new(), Vec::new());
    while at < b.len() {
        let kind = u16_at(b, at, "an entry header")?;
        let header_size = u32_at(b, at + 4, "an entry header")? as usize;
        let padded = u64_at(b, at + 8, "an entry header")? as usize;
        let compressed = u32_at(b, at + 0x10, "an entry header")? as usize;
        let sm = u32_at(b, at + 0x1c, "an entry header")?;
        let flags = u64_at(b, at + 0x28, "an entry header")?;
        let plain = u64_at(b, at + 0x38, "an entry header")? as usize;
        if header_size < 0x40 {
            return Err(FatbinError::Truncated {
                what: "an entry header",
            });
        }
        let start = at + header_size;
        let next = start
            .checked_add(padded)
            .ok_or(FatbinError::Truncated { what: "an entry" })?;
        if kind == KIND_PTX {
            let len = if flags & (FLAG_LZ4 | FLAG_ZSTD) != 0 {
                compressed
            } else {
                padded
            };
            let payload = b
                .get(start..start + len)
                .ok_or(FatbinError::Truncated { what: "a payload" })?;
            let bytes = decompress(payload, flags, plain, sm)?;
            // PTX is text; a NUL ends it (the payload is padded).
            let end = bytes.iter().position(|&c| c == 0).unwrap_or(bytes.len());
            out.push(PtxEntry {
                sm,
                ptx: String::from_utf8_lossy(&bytes[..end]).into_owned(),
            });
        } else {
            machine.push(sm);
        }
        if next <= at {
            break;
        }
        at = next;
    }
    if out.is_empty() {
        return Err(if machine.is_empty() {
            FatbinError::Empty
        } else {
            FatbinError::NoPtx { sm: machine }
        });
    }
    Ok(out)
}

fn decompress(payload: &[u8], flags: u64, plain: usize, sm: u32) -> Result<Vec<u8>, FatbinError> {
    let fail = |reason: String| FatbinError::Decompress { sm, reason };
    if plain > MAX_PTX {
        return Err(fail(format!("{plain} bytes decompressed is too large")));
    }
    if payload.starts_with(&[0x28, 0xb5, 0x2f, 0xfd]) || flags & FLAG_ZSTD != 0 {
        use std::io::Read;
        let mut d =
            ruzstd::decoding::StreamingDecoder::new(payload).map_err(|e| fail(e.to_string()))?;
        let mut out = Vec::with_capacity(plain.min(MAX_PTX));
        d.by_ref()
            .take(MAX_PTX as u64)
            .read_to_end(&mut out)
            .map_err(|e| fail(e.to_string()))?;
        return Ok(out);
    }
    if flags & FLAG_LZ4 != 0 {
        return lz4_flex::block::decompress(payload, plain).map_err(|e| fail(e.to_string()));
    }
    Ok(payload.to_vec())
}

/// The best PTX for the simulator (a virtual sm_80): the newest architecture at or below
/// 80, else the oldest.
pub fn pick(entries: &[PtxEntry]) -> Option<&PtxEntry> {
    entries
        .iter()
        .filter(|e| e.sm <= 80)
        .max_by_key(|e| e.sm)
        .or_else(|| entries.iter().min_by_key(|e| e.sm))
}

/// The best PTX of fatbin `b` for the simulator ([`pick`] of [`ptx_entries`]).
pub fn best_ptx(b: &[u8]) -> Result<PtxEntry, FatbinError> {
    let mut entries = ptx_entries(b)?;
    let sm = pick(&entries).map(|e| e.sm);
    let i = entries
        .iter()
        .position(|e| Some(e.sm) == sm)
        .ok_or(FatbinError::Empty)?;
    Ok(entries.swap_remove(i))
}

/// The fatbins inside `b` (a host object or an archive of them, as `nvcc -rdc=true -c`
/// and `ar` make: each fatbin a section's bytes), in order: every place a fatbin's magic
/// starts a header whose length fits what follows.
pub fn embedded(b: &[u8]) -> Vec<&[u8]> {
    let magic = FATBIN_MAGIC.to_le_bytes();
    let mut found = Vec::new();
    let mut at = 0;
    while let Some(i) = b[at..].windows(4).position(|w| w == magic) {
        let start = at + i;
        match fatbin_len(&b[start..]) {
            Ok(len) if b.len() - start >= len && len > 16 => {
                found.push(&b[start..start + len]);
                at = start + len;
            }
            _ => at = start + 1,
        }
    }
    found
}

/// Whether `b` starts as a fatbin or a wrapper does (its magic).
pub fn is_fatbin(b: &[u8]) -> bool {
    b.get(..4)
        .map(|m| u32::from_le_bytes([m[0], m[1], m[2], m[3]]))
        .is_some_and(|m| m == FATBIN_MAGIC || m == WRAPPER_MAGIC)
}

/// The fatbin at `p`: `p` itself when it starts with a fatbin's magic, or the fatbin
/// the `__fatBinC_Wrapper_t` at `p` points to.
///
/// # Safety
/// `p` is non-null and points to at least 4 readable bytes; when they are a wrapper's
/// magic, to a whole (16-byte) wrapper whose fatbin pointer is null or readable for 4
/// bytes.
pub unsafe fn unwrap(p: *const u8) -> Result<*const u8, FatbinError> {
    // SAFETY: 4 readable bytes (the caller's contract).
    let magic = unsafe { p.cast::<u32>().read_unaligned() };
    match magic {
        FATBIN_MAGIC => Ok(p),
        WRAPPER_MAGIC => {
            // SAFETY: a wrapper: magic, version, then the fatbin's address at offset 8.
            let data = unsafe { p.add(8).cast::<*const u8>().read_unaligned() };
            if data.is_null() {
                return Err(FatbinError::Truncated {
                    what: "the wrapper's fatbin pointer (null)",
                });
            }
            Ok(data)
        }
        found => Err(FatbinError::BadMagic {
            found,
            expected: FATBIN_MAGIC,
        }),
    }
}

/// The whole fatbin at `p` (its header says how long), as bytes.
///
/// # Safety
/// `p` points to a fatbin (as [`unwrap`] returns) that is readable for its 16-byte
/// header and for as long as that header says, and stays so for `'a`.
pub unsafe fn in_memory<'a>(p: *const u8) -> Result<&'a [u8], FatbinError> {
    // SAFETY: the 16-byte header is readable (the caller's contract).
    let header = unsafe { std::slice::from_raw_parts(p, 16) };
    let len = fatbin_len(header)?;
    // SAFETY: as long as the header says (the caller's contract).
    Ok(unsafe { std::slice::from_raw_parts(p, len) })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An entry header of 0x50 bytes for `payload` (compressed to `compressed` bytes when
    /// `flags` says so).
    fn entry(kind: u16, sm: u32, flags: u64, payload: &[u8], plain: usize) -> Vec<u8> {
        let mut h = vec![0u8; 0x50];
        h[0..2].copy_from_slice(&kind.to_le_bytes());
        h[4..8].copy_from_slice(&0x50u32.to_le_bytes());
        let padded = payload.len().div_ceil(8) * 8;
        h[8..16].copy_from_slice(&(padded as u64).to_le_bytes());
        h[0x10..0x14].copy_from_slice(&(payload.len() as u32).to_le_bytes());
        h[0x1c..0x20].copy_from_slice(&sm.to_le_bytes());
        h[0x28..0x30].copy_from_slice(&flags.to_le_bytes());
        h[0x38..0x40].copy_from_slice(&(plain as u64).to_le_bytes());
        h.extend_from_slice(payload);
        h.resize(0x50 + padded, 0);
        h
    }

    fn fatbin(entries: &[Vec<u8>]) -> Vec<u8> {
        let body: Vec<u8> = entries.concat();
        let mut b = Vec::new();
        b.extend_from_slice(&FATBIN_MAGIC.to_le_bytes());
        b.extend_from_slice(&1u16.to_le_bytes());
        b.extend_from_slice(&16u16.to_le_bytes());
        b.extend_from_slice(&(body.len() as u64).to_le_bytes());
        b.extend_from_slice(&body);
        b
    }

    const PTX: &str = ".version 8.0\n.target sm_80\n.address_size 64\n";

    #[test]
    fn plain_lz4_and_machine_code_entries() {
        let lz4 = lz4_flex::block::compress(PTX.as_bytes());
        let b = fatbin(&[
            entry(2, 90, 0, &[0xde; 24], 24),
            entry(KIND_PTX, 75, 0, PTX.as_bytes(), PTX.len()),
            entry(KIND_PTX, 80, FLAG_LZ4, &lz4, PTX.len()),
        ]);
        let e = ptx_entries(&b).unwrap();
        assert_eq!(e.len(), 2);
        assert_eq!(
            e[0],
            PtxEntry {
                sm: 75,
                ptx: PTX.into()
            }
        );
        assert_eq!(
            e[1],
            PtxEntry {
                sm: 80,
                ptx: PTX.into()
            }
        );
        assert_eq!(pick(&e).unwrap().sm, 80);
    }

    #[test]
    fn best_ptx_is_the_newest_at_or_below_sm_80_and_memory_reads_follow_the_wrapper() {
        let lz4 = lz4_flex::block::compress(PTX.as_bytes());
        let b = fatbin(&[
            entry(KIND_PTX, 52, 0, b".version 5.0\n", 13),
            entry(KIND_PTX, 90, 0, b".version 9.0\n", 13),
            entry(KIND_PTX, 80, FLAG_LZ4, &lz4, PTX.len()),
        ]);
        assert!(is_fatbin(&b));
        assert!(!is_fatbin(PTX.as_bytes()));
        assert!(!is_fatbin(&b[..3]));
        let best = best_ptx(&b).unwrap();
        assert_eq!((best.sm, best.ptx.as_str()), (80, PTX));
        // A wrapper pointing at it, as nvcc emits.
        let mut w = Vec::new();
        w.extend_from_slice(&WRAPPER_MAGIC.to_le_bytes());
        w.extend_from_slice(&1u32.to_le_bytes());
        w.extend_from_slice(&(b.as_ptr() as u64).to_le_bytes());
        w.extend_from_slice(&0u64.to_le_bytes());
        assert!(is_fatbin(&w));
        // SAFETY: `w` is a whole wrapper pointing at `b`, both alive here.
        let f = unsafe { unwrap(w.as_ptr()) }.unwrap();
        assert_eq!(f, b.as_ptr());
        // SAFETY: `b` is a whole fatbin.
        let whole = unsafe { in_memory(f) }.unwrap();
        assert_eq!(whole, &b[..]);
        // SAFETY: 4 readable bytes.
        let e = unsafe { unwrap(PTX.as_ptr()) }.unwrap_err();
        assert!(matches!(e, FatbinError::BadMagic { .. }), "{e}");
    }

    #[test]
    fn fatbins_embedded_in_objects_and_archives_are_found() {
        let one = fatbin(&[entry(KIND_PTX, 80, 0, PTX.as_bytes(), PTX.len())]);
        let two = fatbin(&[entry(2, 90, 0, &[7; 8], 8)]);
        // An archive's bytes: a header, junk, a fatbin at an odd offset, a stray magic
        // whose length runs past the end, the second fatbin, and a truncated third.
        let mut b = b"!<arch>\nmember/ 0 0 0 644 1000 `\n\x7fELF...".to_vec();
        b.push(0);
        let at_one = b.len();
        b.extend_from_slice(&one);
        b.extend_from_slice(&FATBIN_MAGIC.to_le_bytes());
        b.extend_from_slice(&[1, 0, 16, 0, 0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0]);
        b.extend_from_slice(&two);
        b.extend_from_slice(&one[..one.len() - 8]);
        let found = embedded(&b);
        assert_eq!(found, [&one[..], &two[..]]);
        assert_eq!(found[0].as_ptr(), b[at_one..].as_ptr());
        assert_eq!(best_ptx(found[0]).unwrap().ptx, PTX);
        assert!(embedded(PTX.as_bytes()).is_empty());
        assert!(embedded(&[]).is_empty());
    }

    #[test]
    fn an_empty_fatbin_is_named_as_relocatable_device_code() {
        assert_eq!(ptx_entries(&fatbin(&[])), Err(FatbinError::Empty));
    }

    #[test]
    fn machine_code_only_is_named_with_its_architectures() {
        let b = fatbin(&[entry(2, 90, 0, &[1; 8], 8)]);
        assert_eq!(ptx_entries(&b), Err(FatbinError::NoPtx { sm: vec![90] }));
    }

    #[test]
    fn bad_input_is_an_error_not_a_panic() {
        assert!(matches!(
            ptx_entries(&[0; 16]),
            Err(FatbinError::BadMagic { .. })
        ));
        let mut b = fatbin(&[entry(KIND_PTX, 80, 0, PTX.as_bytes(), PTX.len())]);
        b.truncate(b.len() - 20);
        assert!(ptx_entries(&b).is_err());
        let b = fatbin(&[entry(KIND_PTX, 80, FLAG_ZSTD, &[1, 2, 3, 4], 100)]);
        assert!(matches!(
            ptx_entries(&b),
            Err(FatbinError::Decompress { sm: 80, .. })
        ));
        // Every prefix and every byte flipped: no panic.
        let good = fatbin(&[entry(KIND_PTX, 80, 0, PTX.as_bytes(), PTX.len())]);
        for n in 0..good.len() {
            let _ = ptx_entries(&good[..n]);
            let mut bad = good.clone();
            bad[n] ^= 0xff;
            let _ = ptx_entries(&bad);
        }
    }
}
