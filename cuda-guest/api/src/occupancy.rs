//! The occupancy calculator (`cuOccupancy*`): how many blocks of a kernel fit on one
//! multiprocessor at once, from the device's per-multiprocessor limits and the kernel's
//! registers and shared memory, as NVIDIA's calculator counts them (threads by whole
//! warps, registers by warp in allocation units of 256, shared memory per block plus
//! the per-block reservation). Pure arithmetic over what any backend answers
//! ([`Limits::of`] reads a [`Backend`]), so every mode gives the same numbers.

use crate::{Backend, Device, DeviceAttribute, Function, FunctionAttribute, Result};

/// A device's per-multiprocessor limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Threads per multiprocessor.
    pub threads_per_sm: u32,
    /// Resident blocks per multiprocessor.
    pub blocks_per_sm: u32,
    /// 32-bit registers per multiprocessor.
    pub regs_per_sm: u32,
    /// Shared memory per multiprocessor, bytes.
    pub shared_per_sm: u32,
    /// Shared memory one block may opt in to, bytes.
    pub shared_per_block_optin: u32,
    /// Shared memory the system reserves per block, bytes.
    pub reserved_shared_per_block: u32,
    /// Threads per warp.
    pub warp_size: u32,
    /// Multiprocessors.
    pub sm_count: u32,
}

/// What occupancy needs of a kernel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Kernel {
    /// Registers per thread.
    pub regs: u32,
    /// Static shared memory, bytes.
    pub static_shared: u32,
    /// The most threads per block it can be launched with.
    pub max_threads: u32,
}

/// Register allocation unit per warp.
const REG_UNIT: u64 = 256;

impl Limits {
    /// The limits of `device` as `backend` answers them.
    pub fn of(backend: &dyn Backend, device: Device) -> Result<Limits> {
        let a = |attr| -> Result<u32> { Ok(backend.device_attribute(device, attr)?.max(0) as u32) };
        Ok(Limits {
            threads_per_sm: a(DeviceAttribute::MaxThreadsPerMultiprocessor)?,
            blocks_per_sm: a(DeviceAttribute::MaxBlocksPerMultiprocessor)?,
            regs_per_sm: a(DeviceAttribute::MaxRegistersPerMultiprocessor)?,
            shared_per_sm: a(DeviceAttribute::MaxSharedMemoryPerMultiprocessor)?,
            shared_per_block_optin: a(DeviceAttribute::MaxSharedMemoryPerBlockOptin)?,
            reserved_shared_per_block: a(DeviceAttribute::ReservedSharedMemoryPerBlock)?,
            warp_size: a(DeviceAttribute::WarpSize)?.max(1),
            sm_count: a(DeviceAttribute::MultiprocessorCount)?,
        })
    }

    /// Resident blocks of `block_size` threads and `dynamic_shared` bytes of dynamic
    /// shared memory per multiprocessor (`cuOccupancyMaxActiveBlocksPerMultiprocessor`);
    /// 0 when such a block cannot run at all.
    pub fn active_blocks(&self, k: &Kernel, block_size: u32, dynamic_shared: u64) -> u32 {
        if block_size == 0 || block_size > k.max_threads {
            return 0;
        }
        let ws = self.warp_size.max(1);
        let warps = block_size.div_ceil(ws);
        let by_threads = (self.threads_per_sm as u64 / (warps as u64 * ws as u64)) as u32;
        let by_regs = if k.regs == 0 {
            u32::MAX
        } else {
            let per_warp = (k.regs as u64 * ws as u64).div_ceil(REG_UNIT) * REG_UNIT;
            ((self.regs_per_sm as u64 / per_warp) / warps as u64) as u32
        };
        let shared = k.static_shared as u64 + dynamic_shared;
        let by_shared = if shared == 0 {
            u32::MAX
        } else if shared > self.shared_per_block_optin as u64 {
            0
        } else {
            let per_block = shared + self.reserved_shared_per_block as u64;
            (self.shared_per_sm as u64 / per_block).min(u32::MAX as u64) as u32
        };
        by_threads
            .min(by_regs)
            .min(by_shared)
            .min(self.blocks_per_sm)
    }

    /// The block size with the most resident threads per multiprocessor, and the grid
    /// that fills the device with it (`cuOccupancyMaxPotentialBlockSize`):
    /// `(min_grid_size, block_size)`. `dynamic_shared` gives the dynamic shared memory
    /// of a block size; `limit` caps the block size (0: the kernel's own limit).
    pub fn potential_block_size(
        &self,
        k: &Kernel,
        dynamic_shared: impl Fn(u32) -> u64,
        limit: u32,
    ) -> (u32, u32) {
        let cap = if limit == 0 {
            k.max_threads
        } else {
            limit.min(k.max_threads)
        };
        let (mut best, mut best_threads) = (0u32, 0u32);
        let ws = self.warp_size.max(1);
        // Whole warps, largest first: a tie keeps the larger block.
        let mut size = cap / ws * ws;
        if size == 0 {
            size = cap;
        }
        while size > 0 {
            let threads = self
                .active_blocks(k, size, dynamic_shared(size))
                .saturating_mul(size);
            if threads > best_threads {
                (best, best_threads) = (size, threads);
            }
            size = size.saturating_sub(ws);
        }
        if best == 0 {
            return (0, 0);
        }
        let blocks = self.active_blocks(k, best, dynamic_shared(best));
        (blocks.saturating_mul(self.sm_count), best)
    }

    /// The dynamic shared memory each of `blocks` blocks of `block_size` threads can
    /// have with all of them resident (`cuOccupancyAvailableDynamicSMemPerBlock`).
    pub fn available_dynamic_shared(&self, k: &Kernel, blocks: u32, block_size: u32) -> u64 {
        if blocks == 0 || self.active_blocks(k, block_size, 0) < blocks {
            return 0;
        }
        let per_block = self.shared_per_sm as u64 / blocks as u64;
        let usable = per_block
            .saturating_sub(self.reserved_shared_per_block as u64)
            .min(self.shared_per_block_optin as u64);
        usable.saturating_sub(k.static_shared as u64)
    }
}

impl Kernel {
    /// What `backend` answers of `function`.
    pub fn of(backend: &dyn Backend, function: &Function) -> Result<Kernel> {
        let a =
            |attr| -> Result<u32> { Ok(backend.function_attribute(function, attr)?.max(0) as u32) };
        Ok(Kernel {
            regs: a(FunctionAttribute::NumRegs)?,
            static_shared: a(FunctionAttribute::SharedSizeBytes)?,
            max_threads: a(FunctionAttribute::MaxThreadsPerBlock)?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An A100's limits (sm_80), the device the simulator models.
    const A100: Limits = Limits {
        threads_per_sm: 2048,
        blocks_per_sm: 32,
        regs_per_sm: 65536,
        shared_per_sm: 167_936,
        shared_per_block_optin: 166_912,
        reserved_shared_per_block: 1024,
        warp_size: 32,
        sm_count: 108,
    };

    fn kernel(regs: u32, static_shared: u32) -> Kernel {
        Kernel {
            regs,
            static_shared,
            max_threads: 1024,
        }
    }

    #[test]
    fn each_limit_binds_as_the_calculator_counts() {
        // Threads: 2048 / 256.
        assert_eq!(A100.active_blocks(&kernel(32, 0), 256, 0), 8);
        // Blocks: at most 32, even of one warp.
        assert_eq!(A100.active_blocks(&kernel(16, 0), 32, 0), 32);
        // Registers: 64 per thread = 2048 per warp, 32 warps fit, 4 blocks of 8 warps.
        assert_eq!(A100.active_blocks(&kernel(64, 0), 256, 0), 4);
        // Registers round up per warp: 33 * 32 = 1056 -> 1280, 51 warps, 6 blocks.
        assert_eq!(A100.active_blocks(&kernel(33, 0), 256, 0), 6);
        // Shared memory: 48 KiB + 1 KiB reserved per block -> 3 blocks.
        assert_eq!(A100.active_blocks(&kernel(16, 16384), 128, 32768), 3);
        // Over the opt-in limit, or over the kernel's threads: none.
        assert_eq!(A100.active_blocks(&kernel(16, 0), 128, 200_000), 0);
        assert_eq!(A100.active_blocks(&kernel(16, 0), 2048, 0), 0);
        // A partial warp counts as a whole one.
        assert_eq!(A100.active_blocks(&kernel(16, 0), 33, 0), 32);
    }

    #[test]
    fn the_potential_block_size_fills_the_device() {
        // Few registers: every size up to 1024 keeps 2048 threads; the largest wins.
        assert_eq!(
            A100.potential_block_size(&kernel(16, 0), |_| 0, 0),
            (2 * 108, 1024)
        );
        // 128 registers: 16 warps per SM, so 512 threads at most, in one block of 512.
        assert_eq!(
            A100.potential_block_size(&kernel(128, 0), |_| 0, 0),
            (108, 512)
        );
        // A cap on the block size.
        // A cap on the block size: 96 gives 21 blocks (2016 threads), 64 gives the
        // 32-block limit's 2048.
        assert_eq!(
            A100.potential_block_size(&kernel(16, 0), |_| 0, 96),
            (32 * 108, 64)
        );
        // Dynamic shared memory per thread: 64 bytes per thread caps threads at ~2600,
        // so the thread limit still binds.
        let (grid, block) = A100.potential_block_size(&kernel(16, 0), |b| 64 * b as u64, 0);
        assert_eq!(
            A100.active_blocks(&kernel(16, 0), block, 64 * block as u64) * block,
            2048
        );
        assert!(grid > 0);
    }

    #[test]
    fn degenerate_limits_answer_without_dividing_by_zero_or_looping() {
        let none = Limits {
            warp_size: 0,
            regs_per_sm: 0,
            threads_per_sm: 0,
            ..A100
        };
        assert_eq!(none.active_blocks(&kernel(u32::MAX, 0), 64, 0), 0);
        assert_eq!(none.potential_block_size(&kernel(16, 0), |_| 0, 0), (0, 0));
    }

    #[test]
    fn available_dynamic_shared_memory_shares_the_multiprocessor() {
        assert_eq!(
            A100.available_dynamic_shared(&kernel(16, 1024), 2, 256),
            167_936 / 2 - 1024 - 1024
        );
        assert_eq!(
            A100.available_dynamic_shared(&kernel(16, 0), 1, 256),
            166_912
        );
        // More blocks than can be resident: none.
        assert_eq!(A100.available_dynamic_shared(&kernel(16, 0), 33, 32), 0);
    }
}
