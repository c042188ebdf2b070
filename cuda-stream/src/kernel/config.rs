//! The shape of a launch ([`LaunchConfig`], [`Dim3`]) and its attributes
//! ([`LaunchAttributes`]).

use std::fmt;

use crate::base::error::{Error, Result};

/// Three dimensions of a grid or a block; `From` a `u32` (`x`), a pair or a triple.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Dim3 {
    /// Along x.
    pub x: u32,
    /// Along y.
    pub y: u32,
    /// Along z.
    pub z: u32,
}

impl Dim3 {
    /// `x * y * z`, without overflow.
    pub fn volume(self) -> u64 {
        u64::from(self.x) * u64::from(self.y) * u64::from(self.z)
    }
}

impl From<u32> for Dim3 {
    fn from(x: u32) -> Dim3 {
        Dim3 { x, y: 1, z: 1 }
    }
}

impl From<(u32, u32)> for Dim3 {
    fn from((x, y): (u32, u32)) -> Dim3 {
        Dim3 { x, y, z: 1 }
    }
}

impl From<(u32, u32, u32)> for Dim3 {
    fn from((x, y, z): (u32, u32, u32)) -> Dim3 {
        Dim3 { x, y, z }
    }
}

impl fmt::Display for Dim3 {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "({}, {}, {})", self.x, self.y, self.z)
    }
}

/// The shape of a launch: the grid of blocks, the threads of a block, and the dynamic shared
/// memory of a block.
///
/// ```
/// use cuda_stream::LaunchConfig;
///
/// let c = LaunchConfig::for_elements(1_000_000, 256);
/// assert_eq!((c.grid.x, c.block.x), (3907, 256));
/// let tiled = LaunchConfig::new((64, 64), (16, 16)).shared_memory(4096);
/// assert_eq!(tiled.block.volume(), 256);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct LaunchConfig {
    /// Blocks in the grid.
    pub grid: Dim3,
    /// Threads in a block.
    pub block: Dim3,
    /// Dynamic shared memory per block, in bytes (`extern __shared__` arrays).
    pub shared_memory_bytes: u32,
    /// Launch attributes (clusters, cooperative launches, ...); with any set, the launch goes
    /// through `cuLaunchKernelEx` (CUDA 11.6), else through `cuLaunchKernel`.
    pub attributes: LaunchAttributes,
}

/// Launch attributes, set through [`LaunchConfig`]'s builders. Each needs a driver and a device
/// that have it; one that lacks it is [`Error::UnsupportedAttribute`] (and a driver before CUDA
/// 11.6, without `cuLaunchKernelEx`, is [`Error::Unsupported`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct LaunchAttributes {
    /// Thread-block cluster dimensions, in blocks (`CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION`:
    /// CUDA 11.8, compute capability 9.0); the grid must be a multiple of them.
    pub cluster: Option<Dim3>,
    /// A cooperative launch (`CU_LAUNCH_ATTRIBUTE_COOPERATIVE`: CUDA 11.8, a device with
    /// `CU_DEVICE_ATTRIBUTE_COOPERATIVE_LAUNCH`): every block is resident at once, so blocks may
    /// wait for each other; a grid too large for that is the driver's
    /// `CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE`.
    pub cooperative: bool,
    /// Programmatic stream serialisation (`CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION`:
    /// CUDA 11.8, compute capability 9.0): the kernel may start before the previous one on the
    /// stream ends, once that one triggers it (programmatic dependent launch). The kernel must
    /// wait (`griddepcontrol.wait`) before it touches what earlier work on the stream uses, its
    /// buffer arguments included: [`Function::launch`](crate::Function::launch)'s `# Safety`.
    pub programmatic_serialization: bool,
    /// The launch's priority (`CU_LAUNCH_ATTRIBUTE_PRIORITY`: CUDA 12.0), as a stream priority.
    pub priority: Option<i32>,
}

impl LaunchAttributes {
    /// Whether none is set (the launch goes through `cuLaunchKernel`).
    pub fn is_empty(&self) -> bool {
        *self == LaunchAttributes::default()
    }
}

impl LaunchConfig {
    /// `grid` blocks of `block` threads, no dynamic shared memory.
    pub fn new(grid: impl Into<Dim3>, block: impl Into<Dim3>) -> LaunchConfig {
        LaunchConfig {
            grid: grid.into(),
            block: block.into(),
            shared_memory_bytes: 0,
            attributes: LaunchAttributes::default(),
        }
    }

    /// One thread per element for `n` elements, in blocks of `block_size` threads: the grid is
    /// `n / block_size` rounded up (so the kernel checks its index against `n`). For `n == 0`
    /// the grid is empty, which a launch refuses.
    pub fn for_elements(n: u32, block_size: u32) -> LaunchConfig {
        LaunchConfig::new(n.div_ceil(block_size.max(1)), block_size)
    }

    /// With `bytes` of dynamic shared memory per block.
    pub fn shared_memory(mut self, bytes: u32) -> LaunchConfig {
        self.shared_memory_bytes = bytes;
        self
    }

    /// Launched as thread-block clusters of `blocks` blocks (see
    /// [`LaunchAttributes::cluster`]).
    pub fn cluster(mut self, blocks: impl Into<Dim3>) -> LaunchConfig {
        self.attributes.cluster = Some(blocks.into());
        self
    }

    /// A cooperative launch (see [`LaunchAttributes::cooperative`]).
    pub fn cooperative(mut self, on: bool) -> LaunchConfig {
        self.attributes.cooperative = on;
        self
    }

    /// Programmatic stream serialisation (see [`LaunchAttributes::programmatic_serialization`]).
    pub fn programmatic_serialization(mut self, on: bool) -> LaunchConfig {
        self.attributes.programmatic_serialization = on;
        self
    }

    /// The launch's priority (see [`LaunchAttributes::priority`]).
    pub fn priority(mut self, priority: i32) -> LaunchConfig {
        self.attributes.priority = Some(priority);
        self
    }

    /// Refuses what no kernel can run: an empty grid or block, a block of more threads than
    /// `max_threads` (0: unknown, not checked), or a grid that is no multiple of its clusters.
    pub(crate) fn check(&self, max_threads: u32) -> Result<()> {
        let bad = |reason: String| Err(Error::InvalidLaunch { reason });
        if self.grid.volume() == 0 {
            return bad(format!("empty grid {}", self.grid));
        }
        if self.block.volume() == 0 {
            return bad(format!("empty block {}", self.block));
        }
        if max_threads != 0 && self.block.volume() > u64::from(max_threads) {
            return bad(format!(
                "a block {} of {} threads, more than the kernel's maximum of {max_threads}",
                self.block,
                self.block.volume()
            ));
        }
        if let Some(c) = self.attributes.cluster {
            let fits = |g: u32, c: u32| c != 0 && g % c == 0;
            if !(fits(self.grid.x, c.x) && fits(self.grid.y, c.y) && fits(self.grid.z, c.z)) {
                return bad(format!(
                    "the grid {} is not a multiple of the cluster {c}",
                    self.grid
                ));
            }
        }
        Ok(())
    }
}
