//! A kernel launch's theoretical occupancy, as the CUDA occupancy calculator
//! (`cuda_occupancy.h`, `cudaOccupancyMaxActiveBlocksPerMultiprocessor`) computes it from the
//! GPU's SM limits and the launch's block size, registers and shared memory, with the default
//! shared memory carveout (all of an SM's shared memory) and no partitioned global caching.
//! The names of its args are those Perfetto's GPU compute tab reads (Nsight Compute's).

use nsys_perfetto_model::model::SmLimits;

/// Blocks an SM can hold by each limit, and what that makes of its warps.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct Occupancy {
    /// By the SM's block limit.
    pub blocks: i64,
    /// By registers; `None` where the kernel uses none.
    pub registers: Option<i64>,
    /// By shared memory; `None` where the blocks use none.
    pub shared_memory: Option<i64>,
    /// By the SM's warp limit.
    pub warps: i64,
    /// Warps resident per SM: the fewest blocks of the limits, times the block's warps.
    pub active_warps: i64,
    /// `active_warps` as a percentage of the SM's warp limit.
    pub percent: f64,
}

/// Arg names (Nsight Compute's, as Perfetto's GPU compute tab reads them).
pub(super) const LIMIT_BLOCKS: &str = "occupancy_limit_blocks";
pub(super) const LIMIT_REGISTERS: &str = "occupancy_limit_registers";
pub(super) const LIMIT_SHARED_MEMORY: &str = "occupancy_limit_shared_mem";
pub(super) const LIMIT_WARPS: &str = "occupancy_limit_warps";
pub(super) const ACTIVE_WARPS: &str = "sm__maximum_warps_avg_per_active_cycle";
pub(super) const PERCENT: &str = "sm__maximum_warps_per_active_cycle_pct";

/// `v` rounded up to a multiple of `unit` (saturating: figures come from the export).
fn round_up(v: i64, unit: i64) -> i64 {
    v.saturating_add(unit - 1) / unit * unit
}

/// The occupancy of blocks of `threads` threads using `registers` per thread and
/// `shared_memory` bytes (static and dynamic), or `None` for a launch the figures cannot
/// describe (no threads, negative figures).
pub(super) fn occupancy(
    sm: &SmLimits,
    threads: i64,
    registers: i64,
    shared_memory: i64,
) -> Option<Occupancy> {
    if threads <= 0 || registers < 0 || shared_memory < 0 {
        return None;
    }
    let (major, minor) = sm.compute;
    let warps_per_block = round_up(threads, sm.warp_size) / sm.warp_size;
    let warps = sm.max_warps_per_sm / warps_per_block;

    // Registers go to warps in units of 256, in each of the SM's sub-partitions (2 on
    // compute capability 6.0, 4 on the others); a block must also fit the per-block limit
    // with its warps counted as if spread over every sub-partition.
    let by_registers = (registers > 0).then(|| {
        let partitions = if (major, minor) == (6, 0) { 2 } else { 4 };
        let per_warp = round_up(registers.saturating_mul(sm.warp_size), 256);
        let assumed = per_warp.saturating_mul(round_up(warps_per_block, partitions));
        if assumed > sm.max_registers_per_block
            || per_warp.saturating_mul(warps_per_block) > sm.max_registers_per_block
        {
            0
        } else {
            let warps_per_partition = sm.max_registers_per_sm / partitions / per_warp;
            warps_per_partition * partitions / warps_per_block
        }
    });

    // Shared memory goes to blocks in units of 128 bytes (256 before compute capability 7),
    // with 1 KiB the system reserves per block from compute capability 8 on.
    let reserved = if major >= 8 { 1024 } else { 0 };
    let per_block = shared_memory.saturating_add(reserved);
    let by_shared_memory = (per_block > 0).then(|| {
        if shared_memory > sm.max_shared_memory_per_block {
            0
        } else {
            let unit = if major >= 7 { 128 } else { 256 };
            sm.max_shared_memory_per_sm / round_up(per_block, unit)
        }
    });

    let resident = [
        Some(sm.max_blocks_per_sm),
        Some(warps),
        by_registers,
        by_shared_memory,
    ]
    .into_iter()
    .flatten()
    .min()
    .expect("two limits always");
    let active_warps = resident.saturating_mul(warps_per_block);
    Some(Occupancy {
        blocks: sm.max_blocks_per_sm,
        registers: by_registers,
        shared_memory: by_shared_memory,
        warps,
        active_warps,
        percent: active_warps as f64 * 100.0 / sm.max_warps_per_sm as f64,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An RTX 3090 (compute capability 8.6) as nsys records it.
    const RTX_3090: SmLimits = SmLimits {
        compute: (8, 6),
        warp_size: 32,
        max_warps_per_sm: 48,
        max_blocks_per_sm: 16,
        max_registers_per_sm: 65536,
        max_registers_per_block: 65536,
        max_shared_memory_per_sm: 102400,
        max_shared_memory_per_block: 101376,
    };

    #[test]
    fn each_limit_as_the_calculator_finds_it() {
        // 8 warps of 64 registers a thread (2048 a warp): 8 warps a sub-partition, 32 an SM,
        // 4 blocks; 48 KiB + 1 KiB reserved: 2 blocks in 100 KiB.
        let o = occupancy(&RTX_3090, 256, 64, 48 * 1024).unwrap();
        assert_eq!(o.blocks, 16);
        assert_eq!(o.warps, 6);
        assert_eq!(o.registers, Some(4));
        assert_eq!(o.shared_memory, Some(2));
        assert_eq!(o.active_warps, 16);
        assert!((o.percent - 100.0 / 3.0).abs() < 1e-9);
    }

    #[test]
    fn a_block_over_a_limit_fits_nowhere() {
        // 1024 threads of 255 registers (8192 a warp, rounded): more than a block may hold.
        let o = occupancy(&RTX_3090, 1024, 255, 0).unwrap();
        assert_eq!(o.registers, Some(0));
        assert_eq!(o.active_warps, 0);
        let o = occupancy(&RTX_3090, 32, 16, 101377).unwrap();
        assert_eq!(o.shared_memory, Some(0));
    }

    #[test]
    fn unused_resources_limit_nothing() {
        let volta = SmLimits {
            compute: (7, 0),
            max_warps_per_sm: 64,
            max_blocks_per_sm: 32,
            max_shared_memory_per_sm: 98304,
            max_shared_memory_per_block: 98304,
            ..RTX_3090
        };
        let o = occupancy(&volta, 100, 0, 0).unwrap();
        assert_eq!((o.registers, o.shared_memory), (None, None));
        // 100 threads are 4 warps: 16 blocks by warps.
        assert_eq!((o.warps, o.active_warps), (16, 64));
        assert_eq!(occupancy(&volta, 0, 32, 0), None);
    }

    #[test]
    fn figures_past_any_gpu_fit_nowhere_without_overflow() {
        let o = occupancy(&RTX_3090, i64::MAX, i64::MAX, i64::MAX).unwrap();
        assert_eq!(
            (o.registers, o.shared_memory, o.active_warps),
            (Some(0), Some(0), 0)
        );
    }
}
