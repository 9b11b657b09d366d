//! A simulated kernel's memory-fault report, carried by [`crate::CudaError::fault`]: what
//! went wrong, where in the launch, and the allocation nearest to the address (the
//! simulator makes it; a native driver says nothing as precise).

use std::fmt;

use crate::DevicePtr;

/// Kind of a memory fault.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum FaultKind {
    /// Outside every live allocation.
    OutOfBounds,
    /// Inside an allocation that was freed.
    UseAfterFree,
    /// Address 0 (or near it).
    NullPointer,
    /// Not aligned to the access size.
    Misaligned,
    /// Outside the block's shared memory.
    SharedOutOfBounds,
    /// Outside the thread's local memory.
    LocalOutOfBounds,
    /// A store to a `.const` variable.
    ReadOnly,
}

/// The allocation nearest to a faulting address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NearestAlloc {
    /// Allocation number (1 = first `malloc` of the simulator).
    pub id: u64,
    /// Base address.
    pub base: DevicePtr,
    /// Size in bytes.
    pub size: u64,
    /// Faulting address minus base (negative: before the allocation).
    pub offset: i64,
    /// Whether it was freed.
    pub freed: bool,
    /// The module variable it holds, for a `.global`/`.const` variable.
    pub name: Option<String>,
}

/// Where in a launch something happened.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Location {
    /// Kernel name.
    pub kernel: String,
    /// Block index.
    pub block: [u32; 3],
    /// Thread index in the block.
    pub thread: [u32; 3],
    /// PTX source line.
    pub line: u32,
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "kernel {} block ({},{},{}) thread ({},{},{}) at PTX line {}",
            self.kernel,
            self.block[0],
            self.block[1],
            self.block[2],
            self.thread[0],
            self.thread[1],
            self.thread[2],
            self.line
        )
    }
}

/// A memory fault report, in the manner of compute-sanitizer's memcheck.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemoryFault {
    /// What went wrong.
    pub kind: FaultKind,
    /// Read or write.
    pub write: bool,
    /// State space (`global`, `shared`, `local`, `generic`).
    pub space: &'static str,
    /// Faulting address (space-relative for shared/local).
    pub address: u64,
    /// Access size in bytes.
    pub size: u32,
    /// Where.
    pub at: Location,
    /// The nearest allocation, for global accesses.
    pub nearest: Option<NearestAlloc>,
}

impl fmt::Display for MemoryFault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let what = match self.kind {
            FaultKind::OutOfBounds => "out-of-bounds",
            FaultKind::UseAfterFree => "use-after-free",
            FaultKind::NullPointer => "null-pointer",
            FaultKind::Misaligned => "misaligned",
            FaultKind::SharedOutOfBounds => "out-of-bounds shared",
            FaultKind::LocalOutOfBounds => "out-of-bounds local",
            FaultKind::ReadOnly => "read-only",
        };
        write!(
            f,
            "invalid {} {} of size {} at {} address {:#x}, {}",
            what,
            if self.write { "write" } else { "read" },
            self.size,
            self.space,
            self.address,
            self.at
        )?;
        if let Some(n) = &self.nearest {
            let rel = if n.offset >= 0 && (n.offset as u64) < n.size {
                format!("{} bytes inside", n.offset)
            } else if n.offset >= 0 {
                format!("{} bytes after the end of", n.offset as u64 - n.size)
            } else {
                format!("{} bytes before", -n.offset)
            };
            write!(
                f,
                "; address is {} {}allocation #{}{} at {} of {} bytes",
                rel,
                if n.freed { "freed " } else { "" },
                n.id,
                n.name
                    .as_ref()
                    .map(|v| format!(" ({v})"))
                    .unwrap_or_default(),
                n.base,
                n.size
            )?;
        }
        Ok(())
    }
}
