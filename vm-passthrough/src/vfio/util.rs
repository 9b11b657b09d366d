//! Small helpers every part of the `vfio` module uses, written once: the bounds check of a
//! region access, an [`io::Error`] from an errno, and a lock that survives a poisoning panic.
//! A leaf, like `types`.

use std::io;
use std::sync::{Mutex, MutexGuard};

/// Whether an access of `len` bytes at `offset` lies inside a region of `size` bytes (an
/// `offset + len` that overflows does not).
pub(crate) fn in_bounds(offset: u64, len: u64, size: u64) -> bool {
    offset.checked_add(len).is_some_and(|end| end <= size)
}

/// The [`io::Error`] of errno `code` (`libc::EINVAL`, ...), as a system call would report it.
pub(crate) fn errno(code: i32) -> io::Error {
    io::Error::from_raw_os_error(code)
}

/// Locks `mutex` even when a panic elsewhere poisoned it. Every mutex of this module guards
/// plain data (a member table, an emulated device's registers, an IOMMU table) that each
/// critical section leaves consistent at every step, so a panicking holder leaves nothing half
/// done that a later holder could trip over.
pub(crate) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounds_include_the_end_and_reject_overflow() {
        assert!(in_bounds(0, 0x1000, 0x1000));
        assert!(in_bounds(0xffc, 4, 0x1000));
        assert!(in_bounds(0x1000, 0, 0x1000));
        assert!(!in_bounds(0xffd, 4, 0x1000));
        assert!(!in_bounds(0x1001, 0, 0x1000));
        assert!(!in_bounds(u64::MAX, 2, u64::MAX));
    }

    #[test]
    fn a_poisoned_lock_is_still_taken() {
        let mutex = std::sync::Arc::new(Mutex::new(7));
        let held = std::sync::Arc::clone(&mutex);
        let _ = std::thread::spawn(move || {
            let _guard = held.lock().unwrap();
            panic!("poisoning on purpose");
        })
        .join();
        assert!(mutex.is_poisoned());
        assert_eq!(*lock(&mutex), 7);
        assert_eq!(errno(libc::EINVAL).raw_os_error(), Some(libc::EINVAL));
    }
}
