//! Device and context facts in typed form: a device's compute capability, total memory and the
//! properties people print ([`DeviceProperties`]), typed device attributes ([`DeviceAttribute`]);
//! a context's limits ([`Limit`]: stack size, printf FIFO, malloc heap, ...), its cache
//! preference ([`CacheConfig`]) and its free and total memory ([`MemoryInfo`]). The raw forms
//! stay available ([`Device::attribute`] takes any `CUdevice_attribute`,
//! [`Context::limit_raw`] any `CUlimit`).

use std::fmt;

use crate::base::error::{Result, check, driver_fn};
use crate::driver::context::{Context, bind};
use crate::driver::device::{Device, init};
use crate::ffi;

/// A device attribute in typed form (`cuDeviceGetAttribute`): the ones
/// [`DeviceProperties`] gathers. Any other is read with [`Device::attribute`] and the raw
/// `CUdevice_attribute`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum DeviceAttribute {
    /// The compute capability's major number (9 for an H100).
    ComputeCapabilityMajor,
    /// The compute capability's minor number.
    ComputeCapabilityMinor,
    /// Streaming multiprocessors.
    MultiprocessorCount,
    /// Threads in a block, at most.
    MaxThreadsPerBlock,
    /// Threads resident on one multiprocessor, at most.
    MaxThreadsPerMultiprocessor,
    /// A block's largest x, y and z extents.
    MaxBlockDimX,
    /// See [`MaxBlockDimX`](DeviceAttribute::MaxBlockDimX).
    MaxBlockDimY,
    /// See [`MaxBlockDimX`](DeviceAttribute::MaxBlockDimX).
    MaxBlockDimZ,
    /// A grid's largest x, y and z extents.
    MaxGridDimX,
    /// See [`MaxGridDimX`](DeviceAttribute::MaxGridDimX).
    MaxGridDimY,
    /// See [`MaxGridDimX`](DeviceAttribute::MaxGridDimX).
    MaxGridDimZ,
    /// Threads in a warp.
    WarpSize,
    /// Shared memory a block may use without opting in, in bytes.
    MaxSharedMemoryPerBlock,
    /// Shared memory a block may use after opting in (`cuFuncSetAttribute`), in bytes.
    MaxSharedMemoryPerBlockOptin,
    /// Shared memory of one multiprocessor, in bytes.
    MaxSharedMemoryPerMultiprocessor,
    /// 32-bit registers a block may use.
    MaxRegistersPerBlock,
    /// The peak clock, in kHz.
    ClockRateKhz,
    /// The peak memory clock, in kHz.
    MemoryClockRateKhz,
    /// The global memory bus's width, in bits.
    GlobalMemoryBusWidth,
    /// The L2 cache's size, in bytes.
    L2CacheSize,
    /// Whether kernels of one context may run concurrently.
    ConcurrentKernels,
    /// Copy engines that overlap with kernels.
    AsyncEngineCount,
    /// Whether the device shares one address space with the host.
    UnifiedAddressing,
    /// Whether the device can allocate managed memory.
    ManagedMemory,
    /// Whether the device and the host may touch managed memory at the same time.
    ConcurrentManagedAccess,
    /// Whether the device is integrated with the host's memory.
    Integrated,
    /// Whether ECC is on.
    EccEnabled,
    /// Whether cooperative launches are supported.
    CooperativeLaunch,
    /// Whether stream-ordered memory pools are supported.
    MemoryPoolsSupported,
    /// The PCI domain, bus and device numbers.
    PciDomainId,
    /// See [`PciDomainId`](DeviceAttribute::PciDomainId).
    PciBusId,
    /// See [`PciDomainId`](DeviceAttribute::PciDomainId).
    PciDeviceId,
}

impl DeviceAttribute {
    /// The raw attribute.
    pub fn raw(self) -> ffi::CUdevice_attribute {
        use DeviceAttribute as D;
        type A = ffi::CUdevice_attribute;
        match self {
            D::ComputeCapabilityMajor => A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR,
            D::ComputeCapabilityMinor => A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR,
            D::MultiprocessorCount => A::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT,
            D::MaxThreadsPerBlock => A::CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK,
            D::MaxThreadsPerMultiprocessor => A::CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR,
            D::MaxBlockDimX => A::CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X,
            D::MaxBlockDimY => A::CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y,
            D::MaxBlockDimZ => A::CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z,
            D::MaxGridDimX => A::CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X,
            D::MaxGridDimY => A::CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y,
            D::MaxGridDimZ => A::CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z,
            D::WarpSize => A::CU_DEVICE_ATTRIBUTE_WARP_SIZE,
            D::MaxSharedMemoryPerBlock => A::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK,
            D::MaxSharedMemoryPerBlockOptin => {
                A::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN
            }
            D::MaxSharedMemoryPerMultiprocessor => {
                A::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR
            }
            D::MaxRegistersPerBlock => A::CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK,
            D::ClockRateKhz => A::CU_DEVICE_ATTRIBUTE_CLOCK_RATE,
            D::MemoryClockRateKhz => A::CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE,
            D::GlobalMemoryBusWidth => A::CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH,
            D::L2CacheSize => A::CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE,
            D::ConcurrentKernels => A::CU_DEVICE_ATTRIBUTE_CONCURRENT_KERNELS,
            D::AsyncEngineCount => A::CU_DEVICE_ATTRIBUTE_ASYNC_ENGINE_COUNT,
            D::UnifiedAddressing => A::CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING,
            D::ManagedMemory => A::CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY,
            D::ConcurrentManagedAccess => A::CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS,
            D::Integrated => A::CU_DEVICE_ATTRIBUTE_INTEGRATED,
            D::EccEnabled => A::CU_DEVICE_ATTRIBUTE_ECC_ENABLED,
            D::CooperativeLaunch => A::CU_DEVICE_ATTRIBUTE_COOPERATIVE_LAUNCH,
            D::MemoryPoolsSupported => A::CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED,
            D::PciDomainId => A::CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID,
            D::PciBusId => A::CU_DEVICE_ATTRIBUTE_PCI_BUS_ID,
            D::PciDeviceId => A::CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID,
        }
    }
}

/// What people print about a device, read once by [`Device::properties`] (one
/// `cuDeviceGetAttribute` per field, the name and the total memory).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct DeviceProperties {
    /// The device's name, such as `NVIDIA H100 80GB HBM3`.
    pub name: String,
    /// The compute capability, (major, minor): (9, 0) for an H100.
    pub compute_capability: (u32, u32),
    /// Global memory, in bytes.
    pub total_memory: usize,
    /// Streaming multiprocessors.
    pub multiprocessors: u32,
    /// Threads in a block, at most.
    pub max_threads_per_block: u32,
    /// Threads resident on one multiprocessor, at most.
    pub max_threads_per_multiprocessor: u32,
    /// A block's largest extents (x, y, z).
    pub max_block_dim: [u32; 3],
    /// A grid's largest extents (x, y, z).
    pub max_grid_dim: [u32; 3],
    /// Threads in a warp.
    pub warp_size: u32,
    /// Shared memory a block may use without opting in, in bytes.
    pub shared_memory_per_block: usize,
    /// Shared memory a block may use after opting in, in bytes.
    pub shared_memory_per_block_optin: usize,
    /// Shared memory of one multiprocessor, in bytes.
    pub shared_memory_per_multiprocessor: usize,
    /// 32-bit registers a block may use.
    pub registers_per_block: u32,
    /// The peak clock, in kHz.
    pub clock_rate_khz: u32,
    /// The peak memory clock, in kHz.
    pub memory_clock_rate_khz: u32,
    /// The global memory bus's width, in bits.
    pub memory_bus_width: u32,
    /// The L2 cache's size, in bytes.
    pub l2_cache_size: usize,
    /// Copy engines that overlap with kernels.
    pub async_engines: u32,
    /// Whether kernels may run concurrently.
    pub concurrent_kernels: bool,
    /// Whether the device shares one address space with the host.
    pub unified_addressing: bool,
    /// Whether the device can allocate managed memory.
    pub managed_memory: bool,
    /// Whether the device and the host may touch managed memory at the same time.
    pub concurrent_managed_access: bool,
    /// Whether the device is integrated with the host's memory.
    pub integrated: bool,
    /// Whether ECC is on.
    pub ecc_enabled: bool,
    /// Whether cooperative launches are supported.
    pub cooperative_launch: bool,
    /// Whether stream-ordered memory pools are supported.
    pub memory_pools: bool,
    /// The PCI address: domain, bus, device.
    pub pci: (u32, u32, u32),
}

impl DeviceProperties {
    /// The theoretical memory bandwidth, in bytes per second (double data rate: two transfers
    /// per memory clock, over the bus's width).
    pub fn memory_bandwidth(&self) -> f64 {
        2.0 * f64::from(self.memory_clock_rate_khz) * 1e3 * f64::from(self.memory_bus_width) / 8.0
    }
}

impl fmt::Display for DeviceProperties {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (major, minor) = self.compute_capability;
        writeln!(f, "{} (compute capability {major}.{minor})", self.name)?;
        writeln!(
            f,
            "  memory: {:.1} GiB, {}-bit bus, {:.0} GB/s; L2 {} MiB",
            self.total_memory as f64 / f64::from(1u32 << 30),
            self.memory_bus_width,
            self.memory_bandwidth() / 1e9,
            self.l2_cache_size >> 20
        )?;
        writeln!(
            f,
            "  {} multiprocessors at {} MHz; {} threads a block, {} a multiprocessor; warp {}",
            self.multiprocessors,
            self.clock_rate_khz / 1000,
            self.max_threads_per_block,
            self.max_threads_per_multiprocessor,
            self.warp_size
        )?;
        writeln!(
            f,
            "  shared memory: {} KiB a block ({} KiB opted in), {} KiB a multiprocessor; {} registers a block",
            self.shared_memory_per_block >> 10,
            self.shared_memory_per_block_optin >> 10,
            self.shared_memory_per_multiprocessor >> 10,
            self.registers_per_block
        )?;
        write!(
            f,
            "  block {:?}, grid {:?}; PCI {:04x}:{:02x}:{:02x}",
            self.max_block_dim, self.max_grid_dim, self.pci.0, self.pci.1, self.pci.2
        )
    }
}

impl Device {
    /// A device attribute in typed form; [`attribute`](Device::attribute) takes any raw one.
    pub fn get_attribute(self, attribute: DeviceAttribute) -> Result<i32> {
        init()?;
        self.attribute(attribute.raw())
    }

    /// The compute capability, (major, minor): (9, 0) for an H100.
    pub fn compute_capability(self) -> Result<(u32, u32)> {
        Ok((
            self.get_u32(DeviceAttribute::ComputeCapabilityMajor)?,
            self.get_u32(DeviceAttribute::ComputeCapabilityMinor)?,
        ))
    }

    /// The device's global memory, in bytes (`cuDeviceTotalMem`). For what is free now, see
    /// [`Context::memory_info`].
    pub fn total_memory(self) -> Result<usize> {
        init()?;
        let f = driver_fn!(cuDeviceTotalMem);
        let mut bytes = 0usize;
        // SAFETY: `bytes` is a valid out-pointer; the driver checks the ordinal.
        check(unsafe { f(&mut bytes, self.raw()) }, "cuDeviceTotalMem")?;
        Ok(bytes)
    }

    /// The properties people print, read now (see [`DeviceProperties`]).
    pub fn properties(self) -> Result<DeviceProperties> {
        use DeviceAttribute as D;
        let u = |a| self.get_u32(a);
        let b = |a| self.get_attribute(a).map(|v| v != 0);
        let z = |a| self.get_u32(a).map(|v| v as usize);
        Ok(DeviceProperties {
            name: self.name()?,
            compute_capability: self.compute_capability()?,
            total_memory: self.total_memory()?,
            multiprocessors: u(D::MultiprocessorCount)?,
            max_threads_per_block: u(D::MaxThreadsPerBlock)?,
            max_threads_per_multiprocessor: u(D::MaxThreadsPerMultiprocessor)?,
            max_block_dim: [
                u(D::MaxBlockDimX)?,
                u(D::MaxBlockDimY)?,
                u(D::MaxBlockDimZ)?,
            ],
            max_grid_dim: [u(D::MaxGridDimX)?, u(D::MaxGridDimY)?, u(D::MaxGridDimZ)?],
            warp_size: u(D::WarpSize)?,
            shared_memory_per_block: z(D::MaxSharedMemoryPerBlock)?,
            shared_memory_per_block_optin: z(D::MaxSharedMemoryPerBlockOptin)?,
            shared_memory_per_multiprocessor: z(D::MaxSharedMemoryPerMultiprocessor)?,
            registers_per_block: u(D::MaxRegistersPerBlock)?,
            clock_rate_khz: u(D::ClockRateKhz)?,
            memory_clock_rate_khz: u(D::MemoryClockRateKhz)?,
            memory_bus_width: u(D::GlobalMemoryBusWidth)?,
            l2_cache_size: z(D::L2CacheSize)?,
            async_engines: u(D::AsyncEngineCount)?,
            concurrent_kernels: b(D::ConcurrentKernels)?,
            unified_addressing: b(D::UnifiedAddressing)?,
            managed_memory: b(D::ManagedMemory)?,
            concurrent_managed_access: b(D::ConcurrentManagedAccess)?,
            integrated: b(D::Integrated)?,
            ecc_enabled: b(D::EccEnabled)?,
            cooperative_launch: b(D::CooperativeLaunch)?,
            memory_pools: b(D::MemoryPoolsSupported)?,
            pci: (u(D::PciDomainId)?, u(D::PciBusId)?, u(D::PciDeviceId)?),
        })
    }

    /// A non-negative attribute (every one [`DeviceProperties`] reads): a negative answer
    /// reads as 0.
    fn get_u32(self, attribute: DeviceAttribute) -> Result<u32> {
        self.get_attribute(attribute)
            .map(|v| u32::try_from(v).unwrap_or(0))
    }
}

/// A context limit (`CUlimit`), read with [`Context::limit`] and set with
/// [`Context::set_limit`]. Any other is reached with [`Context::limit_raw`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Limit {
    /// The stack of each GPU thread, in bytes.
    StackSize,
    /// The FIFO that device-side `printf` writes into, in bytes (set it before the first
    /// launch of a kernel that prints).
    PrintfFifoSize,
    /// The heap of device-side `malloc`, in bytes (set it before the first launch of a kernel
    /// that allocates).
    MallocHeapSize,
    /// The nesting depth of device-runtime synchronisation.
    DevRuntimeSyncDepth,
    /// Device-runtime launches that may be pending.
    DevRuntimePendingLaunchCount,
    /// The L2 fetch granularity hint, in bytes (0 to 128; the driver may round or ignore it).
    MaxL2FetchGranularity,
    /// The L2 cache set aside for persisting accesses, in bytes.
    PersistingL2CacheSize,
}

impl Limit {
    /// The raw limit.
    pub fn raw(self) -> ffi::CUlimit {
        type L = ffi::CUlimit;
        match self {
            Limit::StackSize => L::CU_LIMIT_STACK_SIZE,
            Limit::PrintfFifoSize => L::CU_LIMIT_PRINTF_FIFO_SIZE,
            Limit::MallocHeapSize => L::CU_LIMIT_MALLOC_HEAP_SIZE,
            Limit::DevRuntimeSyncDepth => L::CU_LIMIT_DEV_RUNTIME_SYNC_DEPTH,
            Limit::DevRuntimePendingLaunchCount => L::CU_LIMIT_DEV_RUNTIME_PENDING_LAUNCH_COUNT,
            Limit::MaxL2FetchGranularity => L::CU_LIMIT_MAX_L2_FETCH_GRANULARITY,
            Limit::PersistingL2CacheSize => L::CU_LIMIT_PERSISTING_L2_CACHE_SIZE,
        }
    }
}

/// A context's preference between L1 cache and shared memory (`CUfunc_cache`), for kernels
/// that do not state their own.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CacheConfig {
    /// No preference (the default).
    PreferNone,
    /// More shared memory, less L1.
    PreferShared,
    /// More L1, less shared memory.
    PreferL1,
    /// Equal L1 and shared memory.
    PreferEqual,
}

impl CacheConfig {
    /// The raw value.
    pub fn raw(self) -> ffi::CUfunc_cache {
        type C = ffi::CUfunc_cache;
        match self {
            CacheConfig::PreferNone => C::CU_FUNC_CACHE_PREFER_NONE,
            CacheConfig::PreferShared => C::CU_FUNC_CACHE_PREFER_SHARED,
            CacheConfig::PreferL1 => C::CU_FUNC_CACHE_PREFER_L1,
            CacheConfig::PreferEqual => C::CU_FUNC_CACHE_PREFER_EQUAL,
        }
    }

    /// The typed value of a raw one (`None` for a value the driver does not define).
    pub fn from_raw(raw: ffi::CUfunc_cache) -> Option<CacheConfig> {
        type C = ffi::CUfunc_cache;
        Some(match raw {
            C::CU_FUNC_CACHE_PREFER_NONE => CacheConfig::PreferNone,
            C::CU_FUNC_CACHE_PREFER_SHARED => CacheConfig::PreferShared,
            C::CU_FUNC_CACHE_PREFER_L1 => CacheConfig::PreferL1,
            C::CU_FUNC_CACHE_PREFER_EQUAL => CacheConfig::PreferEqual,
            _ => return None,
        })
    }
}

/// The device memory free and in all, as the context's device reports it
/// ([`Context::memory_info`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemoryInfo {
    /// Bytes free now (other processes and pools' reserves count as used).
    pub free: usize,
    /// Bytes in all.
    pub total: usize,
}

impl Context {
    /// A limit of this context (`cuCtxGetLimit`, with the context bound).
    pub fn limit(&self, limit: Limit) -> Result<usize> {
        self.limit_raw(limit.raw())
    }

    /// Sets a limit of this context (`cuCtxSetLimit`, with the context bound). The driver may
    /// round the value (read it back with [`limit`](Context::limit)), and refuses a printf FIFO
    /// or malloc heap size once a kernel that uses them has been launched.
    pub fn set_limit(&self, limit: Limit, value: usize) -> Result<()> {
        self.set_limit_raw(limit.raw(), value)
    }

    /// [`limit`](Context::limit) for any raw `CUlimit` (the driver refuses one it does not
    /// know: `CUDA_ERROR_UNSUPPORTED_LIMIT` or `CUDA_ERROR_INVALID_VALUE`).
    pub fn limit_raw(&self, limit: ffi::CUlimit) -> Result<usize> {
        let f = driver_fn!(cuCtxGetLimit);
        let _bound = bind(self.raw())?;
        let mut v = 0usize;
        // SAFETY: `v` is a valid out-pointer; the context is current; the driver checks the
        // limit.
        check(unsafe { f(&mut v, limit) }, "cuCtxGetLimit")?;
        Ok(v)
    }

    /// [`set_limit`](Context::set_limit) for any raw `CUlimit`.
    pub fn set_limit_raw(&self, limit: ffi::CUlimit, value: usize) -> Result<()> {
        let f = driver_fn!(cuCtxSetLimit);
        let _bound = bind(self.raw())?;
        // SAFETY: no pointers; the context is current; the driver checks the limit and value.
        check(unsafe { f(limit, value) }, "cuCtxSetLimit")
    }

    /// The context's cache preference (`cuCtxGetCacheConfig`). A value this crate does not
    /// know reads as [`CacheConfig::PreferNone`].
    pub fn cache_config(&self) -> Result<CacheConfig> {
        let f = driver_fn!(cuCtxGetCacheConfig);
        let _bound = bind(self.raw())?;
        let mut raw = ffi::CUfunc_cache::CU_FUNC_CACHE_PREFER_NONE;
        // SAFETY: `raw` is a valid out-pointer; the context is current.
        check(unsafe { f(&mut raw) }, "cuCtxGetCacheConfig")?;
        Ok(CacheConfig::from_raw(raw).unwrap_or(CacheConfig::PreferNone))
    }

    /// Sets the context's cache preference (`cuCtxSetCacheConfig`): a hint, which devices with
    /// a fixed split ignore.
    pub fn set_cache_config(&self, config: CacheConfig) -> Result<()> {
        let f = driver_fn!(cuCtxSetCacheConfig);
        let _bound = bind(self.raw())?;
        // SAFETY: no pointers; the context is current.
        check(unsafe { f(config.raw()) }, "cuCtxSetCacheConfig")
    }

    /// Free and total memory of the context's device now (`cuMemGetInfo`, with the context
    /// bound).
    pub fn memory_info(&self) -> Result<MemoryInfo> {
        let f = driver_fn!(cuMemGetInfo);
        let _bound = bind(self.raw())?;
        let (mut free, mut total) = (0usize, 0usize);
        // SAFETY: both are valid out-pointers; the context is current.
        check(unsafe { f(&mut free, &mut total) }, "cuMemGetInfo")?;
        Ok(MemoryInfo { free, total })
    }
}
