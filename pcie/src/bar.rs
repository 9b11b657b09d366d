//! Base address registers, read from the device's `resource` file.

use std::path::Path;

use crate::error::{Error, Result};

// Flags from include/linux/ioport.h, as printed in the third column of `resource`.
const IORESOURCE_IO: u64 = 0x100;
const IORESOURCE_MEM: u64 = 0x200;
const IORESOURCE_PREFETCH: u64 = 0x2000;
const IORESOURCE_MEM_64: u64 = 0x0010_0000;

/// Lines 0..=5 of `resource` are the six BARs; line 6 is the expansion ROM.
const BAR_LINES: usize = 6;

/// What a BAR decodes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum BarKind {
    /// I/O ports.
    Io,
    /// Memory below 4 GiB.
    Mem32,
    /// Memory anywhere in the 64-bit space.
    Mem64,
}

/// One assigned BAR.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Bar {
    /// BAR number, 0 to 5.
    pub index: u8,
    /// Host physical (or I/O port) start address.
    pub start: u64,
    /// Size in bytes.
    pub size: u64,
    /// What it decodes.
    pub kind: BarKind,
    /// Prefetchable memory.
    pub prefetchable: bool,
}

impl Bar {
    /// A 64-bit memory BAR.
    pub fn is_64bit(&self) -> bool {
        self.kind == BarKind::Mem64
    }
}

/// Parses the kernel's `resource` file: one `start end flags` line per resource,
/// each a `0x`-prefixed 64-bit hex number. Unassigned BARs (all zero) are skipped.
pub(crate) fn parse_resource(path: &Path, text: &str) -> Result<Vec<Bar>> {
    let mut bars = Vec::new();
    for (index, line) in text.lines().take(BAR_LINES).enumerate() {
        let bad = |expected| Error::parse(path, line, expected);
        let fields: Vec<u64> = line
            .split_whitespace()
            .map(|f| {
                f.strip_prefix("0x")
                    .and_then(|h| u64::from_str_radix(h, 16).ok())
            })
            .collect::<Option<_>>()
            .ok_or_else(|| bad("three 0x-prefixed hex numbers (start end flags)"))?;
        let [start, end, flags] = fields[..] else {
            return Err(bad("three 0x-prefixed hex numbers (start end flags)"));
        };
        if start == 0 && end == 0 {
            continue;
        }
        if end < start {
            return Err(bad("a resource whose end is not below its start"));
        }
        let kind = if flags & IORESOURCE_IO != 0 {
            BarKind::Io
        } else if flags & IORESOURCE_MEM != 0 {
            if flags & IORESOURCE_MEM_64 != 0 {
                BarKind::Mem64
            } else {
                BarKind::Mem32
            }
        } else {
            return Err(bad("an I/O or memory resource"));
        };
        bars.push(Bar {
            index: index as u8,
            start,
            // end >= start, so only the full 64-bit range overflows.
            size: (end - start)
                .checked_add(1)
                .ok_or_else(|| bad("a resource smaller than the 64-bit space"))?,
            kind,
            prefetchable: flags & IORESOURCE_PREFETCH != 0,
        });
    }
    Ok(bars)
}

/// Human size: `16 MiB`, `128 GiB`, `256 B`.
pub fn format_size(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut value = bytes;
    let mut unit = 0;
    while unit + 1 < UNITS.len() && value >= 1024 && value.is_multiple_of(1024) {
        value /= 1024;
        unit += 1;
    }
    format!("{value} {}", UNITS[unit])
}

#[cfg(test)]
mod tests {
    use super::*;

    const H100: &str = "\
0x000000009c000000 0x000000009cffffff 0x0000000000040200
0x0000000000000000 0x0000000000000000 0x0000000000000000
0x0000200000000000 0x0000201fffffffff 0x000000000014220c
0x0000000000000000 0x0000000000000000 0x0000000000000000
0x0000202000000000 0x0000202001ffffff 0x000000000014220c
0x0000000000000000 0x0000000000000000 0x0000000000000000
0x0000000000000000 0x0000000000000000 0x0000000000000000
";

    #[test]
    fn parses_h100_bars() {
        let bars = parse_resource(Path::new("resource"), H100).unwrap();
        let summary: Vec<(u8, String, BarKind, bool)> = bars
            .iter()
            .map(|b| (b.index, format_size(b.size), b.kind, b.prefetchable))
            .collect();
        assert_eq!(
            summary,
            [
                (0, "16 MiB".to_string(), BarKind::Mem32, false),
                (2, "128 GiB".to_string(), BarKind::Mem64, true),
                (4, "32 MiB".to_string(), BarKind::Mem64, true),
            ]
        );
        assert_eq!(bars[1].start, 0x2000_0000_0000);
    }

    #[test]
    fn io_bar_and_rom_line() {
        let text = "0x0000000000003000 0x000000000000307f 0x0000000000040101\n\
                    0x0000000000000000 0x0000000000000000 0x0000000000000000\n";
        let bars = parse_resource(Path::new("r"), text).unwrap();
        assert_eq!(bars.len(), 1);
        assert_eq!((bars[0].kind, bars[0].size), (BarKind::Io, 128));
    }

    #[test]
    fn garbage_names_path_and_line() {
        for bad in ["0x1 0x2", "zz 0x2 0x200", "0x10 0x1 0x200", "0x1 0x2 0x0"] {
            let err = parse_resource(Path::new("/x/resource"), bad).unwrap_err();
            let Error::Parse { path, value, .. } = err else {
                panic!("{bad}: expected Parse error");
            };
            assert_eq!(path, Path::new("/x/resource"));
            assert_eq!(value, bad);
        }
    }

    #[test]
    fn sizes_read_naturally() {
        assert_eq!(format_size(256), "256 B");
        assert_eq!(format_size(16 << 20), "16 MiB");
        assert_eq!(format_size(3 << 30), "3 GiB");
        assert_eq!(format_size(1536), "1536 B");
    }
}
