//! Occupancy: the block size that keeps a device busiest for a kernel, and how many blocks of a
//! size fit on a multiprocessor, so that [`LaunchConfig`] can pick a block size for the device.

use crate::base::error::{Error, Result, check, driver_fn};
use crate::driver::context::bind;
use crate::kernel::config::LaunchConfig;
use crate::kernel::module::Function;

/// A block size the driver's occupancy calculator suggested, with the smallest grid that fills
/// the device at that size.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct BlockSize {
    /// Threads per block.
    pub block: u32,
    /// The fewest blocks that keep every multiprocessor as busy as it can be.
    pub min_grid: u32,
}

impl Function<'_> {
    /// Refuses more dynamic shared memory per block than a launch of this kernel may ask for
    /// ([`Function::max_dynamic_shared_memory`]), before the occupancy calculator is asked.
    fn check_dynamic_shared_memory(self, bytes: u32) -> Result<()> {
        if bytes == 0 {
            return Ok(());
        }
        let limit = self.max_dynamic_shared_memory()?;
        if bytes > limit {
            return Err(Error::InvalidArgument {
                reason: format!(
                    "{bytes} bytes of dynamic shared memory per block for `{}`, which may ask \
                     for {limit} (raise it with set_max_dynamic_shared_memory)",
                    self.name()
                ),
            });
        }
        Ok(())
    }

    /// The block size with the highest occupancy for this kernel on its device, with
    /// `dynamic_shared_memory` bytes per block (`cuOccupancyMaxPotentialBlockSize`). More
    /// dynamic shared memory than a launch of the kernel may ask for is
    /// [`Error::InvalidArgument`].
    pub fn max_potential_block_size(self, dynamic_shared_memory: u32) -> Result<BlockSize> {
        self.check_dynamic_shared_memory(dynamic_shared_memory)?;
        let f = driver_fn!(cuOccupancyMaxPotentialBlockSize);
        let _bound = bind(self.context_raw())?;
        let (mut min_grid, mut block) = (0, 0);
        // SAFETY: valid out-pointers; no callback (the dynamic shared memory is fixed); the
        // function's module is loaded; no block size limit (0).
        let rc = unsafe {
            f(
                &mut min_grid,
                &mut block,
                self.raw(),
                None,
                dynamic_shared_memory as usize,
                0,
            )
        };
        check(rc, "cuOccupancyMaxPotentialBlockSize")?;
        match (u32::try_from(block), u32::try_from(min_grid)) {
            (Ok(block @ 1..), Ok(min_grid)) => Ok(BlockSize { block, min_grid }),
            _ => Err(Error::InvalidLaunch {
                reason: format!(
                    "cuOccupancyMaxPotentialBlockSize answered a block of {block} threads"
                ),
            }),
        }
    }

    /// How many blocks of `block_size` threads and `dynamic_shared_memory` bytes each can be
    /// resident on one multiprocessor at once
    /// (`cuOccupancyMaxActiveBlocksPerMultiprocessor`); 0 if the kernel cannot run so (a block
    /// of more than [`Function::max_threads_per_block`] is answered so without asking the
    /// driver). A block of no threads, or more dynamic shared memory than a launch of the kernel
    /// may ask for, is [`Error::InvalidArgument`].
    pub fn max_active_blocks_per_multiprocessor(
        self,
        block_size: u32,
        dynamic_shared_memory: u32,
    ) -> Result<u32> {
        if block_size == 0 {
            return Err(Error::InvalidArgument {
                reason: format!("a block of no threads for `{}`", self.name()),
            });
        }
        let max = self.max_threads_per_block();
        self.check_dynamic_shared_memory(dynamic_shared_memory)?;
        let Ok(block) = i32::try_from(block_size) else {
            return Ok(0);
        };
        if max != 0 && block_size > max {
            return Ok(0);
        }
        let f = driver_fn!(cuOccupancyMaxActiveBlocksPerMultiprocessor);
        let _bound = bind(self.context_raw())?;
        let mut blocks = 0;
        // SAFETY: a valid out-pointer; the function's module is loaded.
        let rc = unsafe {
            f(
                &mut blocks,
                self.raw(),
                block,
                dynamic_shared_memory as usize,
            )
        };
        check(rc, "cuOccupancyMaxActiveBlocksPerMultiprocessor")?;
        Ok(u32::try_from(blocks).unwrap_or(0))
    }
}

impl LaunchConfig {
    /// One thread per element for `n` elements, in blocks of the size with the highest
    /// occupancy for `function` on its device ([`Function::max_potential_block_size`]; the
    /// driver is asked on every call, so keep the result where launches repeat).
    ///
    /// ```no_run
    /// # fn demo(f: cuda_stream::Function<'_>) -> cuda_stream::Result<()> {
    /// let config = cuda_stream::LaunchConfig::for_elements_auto(f, 1 << 20)?;
    /// assert!(config.block.x <= f.max_threads_per_block());
    /// # Ok(()) }
    /// ```
    pub fn for_elements_auto(function: Function<'_>, n: u32) -> Result<LaunchConfig> {
        let size = function.max_potential_block_size(0)?;
        Ok(LaunchConfig::for_elements(n, size.block))
    }
}
