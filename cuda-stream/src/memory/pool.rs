//! [`MemPool`]: a device's memory pool for stream-ordered allocation (CUDA 11.2): the device's
//! default pool or one of the caller's, with its release threshold, trimming and usage
//! statistics; whether a device has pools at all (`pools_supported`); and which other devices
//! may address a pool's memory ([`MemPool::set_access`]), with the grants this process made.
//!
//! Access of other devices (`cuMemPoolSetAccess`): measured on two H100s joined by NVLink
//! (driver 580.159, `tests/examples/contexts.rs`), stream-ordered memory of one device is mapped
//! for that device alone. Context peer access (`cuCtxEnablePeerAccess`) does not reach it: a
//! peer copy of 256 MiB of default-pool memory runs at 37 GB/s (the driver stages it) with or
//! without context peer access, and at 391 GB/s once the pool grants the other device access,
//! with or without context peer access; a kernel of the other device reads the memory after the
//! grant. A grant covers the pool's existing allocations and later ones.
//!
//! Blocks of a pool freed on a private stream may be kept there for reuse (`block_cache`): the
//! pool's [cache limit](MemPool::set_cache_limit) bounds them, [`usage`](MemPool::usage) counts
//! them apart, and [`trim_to`](MemPool::trim_to), [`release_cached`](MemPool::release_cached)
//! and the drop of a pool of the caller's free them first.

use std::fmt;
use std::mem::MaybeUninit;
use std::ptr;
use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use crate::base::capture_mode::CaptureMode;
use crate::base::error::{Error, Result, check, driver_fn};
use crate::driver::context::Context;
use crate::driver::device::Device;
use crate::ffi;
use crate::graph::capture_mode_guard::exchange_capture_mode;
use crate::memory::alloc_calls::synchronize_events;
use crate::stream::block_cache;
use crate::stream::known_streams;

/// A memory pool of one device: [`DeviceBuffer`](crate::DeviceBuffer)s allocated on a stream
/// come from it (`cuMemAllocFromPoolAsync`) and go back to it in stream order
/// (`cuMemFreeAsync`), so neither blocks the host.
///
/// [`MemPool::default_for`] is the device's default pool (the one `cudaMallocAsync`, PyTorch's
/// `cudaMallocAsync` backend and CuPy's `MemoryAsyncPool` use), which this value does not own;
/// [`MemPool::new`] creates a pool of the caller's, destroyed when the last clone of it and the
/// last buffer allocated from it are gone. Cheap to clone.
///
/// A pool keeps freed memory for reuse up to its [release
/// threshold](MemPool::set_release_threshold) (0 by default: whatever is not in use goes back to
/// the system at the next synchronisation); [`trim_to`](MemPool::trim_to) gives memory back now.
///
/// ```no_run
/// use cuda_stream::{Context, DeviceBuffer, MemPool};
///
/// let ctx = Context::primary(0)?;
/// let stream = ctx.new_stream()?;
/// let pool = MemPool::new(&ctx)?;
/// pool.set_release_threshold(u64::MAX)?; // keep what is freed: allocation stays cheap
/// let buf = DeviceBuffer::<f32>::zeroed_in(&pool, &stream, 1 << 20)?;
/// assert_eq!(buf.pool().as_ref(), Some(&pool));
/// drop(buf); // returns at once; the memory goes back to the pool in stream order
/// println!("{:?}", pool.usage()?);
/// # Ok::<(), cuda_stream::Error>(())
/// ```
#[derive(Clone)]
pub struct MemPool(Arc<PoolInner>);

struct PoolInner {
    raw: ffi::CUmemoryPool,
    ctx: Context,
    /// Created here (destroyed on drop), or the device's default pool (never destroyed).
    owned: bool,
}

// SAFETY: a memory pool handle is a driver object usable from any thread.
unsafe impl Send for PoolInner {}
// SAFETY: as above; nothing here is mutated after creation.
unsafe impl Sync for PoolInner {}

impl Drop for PoolInner {
    /// `cuMemPoolDestroy` returns at once; the driver releases the pool once its allocations
    /// are freed and its frees have completed.
    fn drop(&mut self) {
        if !self.owned {
            return;
        }
        let raw = self.raw as usize;
        forget_pool(self.raw);
        if crate::driver::deferred_destroy::must_defer_free() {
            crate::driver::deferred_destroy::defer([
                crate::driver::deferred_destroy::Deferred::new(raw, destroy_pool),
            ]);
            return;
        }
        let _ = destroy_pool(raw);
    }
}

fn destroy_pool(raw: usize) -> Result<()> {
    // The blocks of the pool kept on streams go back to it first (in those streams' order).
    known_streams::free_kept_blocks(Some(raw as ffi::CUmemoryPool), None);
    block_cache::forget_pool(raw as ffi::CUmemoryPool);
    let f = driver_fn!(cuMemPoolDestroy);
    // SAFETY: the pool was created here and nothing uses the handle after this.
    check(unsafe { f(raw as ffi::CUmemoryPool) }, "cuMemPoolDestroy")
}

impl fmt::Debug for MemPool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MemPool")
            .field("raw", &self.0.raw)
            .field("device", &self.0.ctx.device().ordinal())
            .field("default", &!self.0.owned)
            .finish()
    }
}

impl PartialEq for MemPool {
    fn eq(&self, other: &MemPool) -> bool {
        self.0.raw == other.0.raw
    }
}
impl Eq for MemPool {}

/// A pool's usage in bytes (`cuMemPoolGetAttribute`): memory reserved from the system, the part
/// of it handed out to buffers, now and at the high-water mark, and the blocks this process
/// keeps for reuse on its streams.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PoolUsage {
    /// Reserved from the system now (`CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT`).
    pub reserved: u64,
    /// The most ever reserved since the last reset (`..._RESERVED_MEM_HIGH`).
    pub reserved_high: u64,
    /// In use by buffers now: the driver's `..._USED_MEM_CURRENT` less [`cached`](Self::cached).
    pub used: u64,
    /// The most ever allocated from the driver since the last reset (`..._USED_MEM_HIGH`,
    /// kept blocks included).
    pub used_high: u64,
    /// Held in blocks kept for reuse on this process's streams (allocated, as the driver sees
    /// them, but in no buffer): given back by [`MemPool::release_cached`], a trim, or an
    /// allocation that runs out of memory.
    pub cached: u64,
}

impl MemPool {
    /// The default pool of `ctx`'s device (`cuDeviceGetDefaultMemPool`), shared with everything
    /// else in the process that allocates stream-ordered memory on that device. Never destroyed
    /// by this crate. A device or driver without memory pools is [`Error::Unsupported`].
    pub fn default_for(ctx: &Context) -> Result<MemPool> {
        require_pools(ctx)?;
        let raw = default_pool_raw(ctx.device())?;
        Ok(MemPool(Arc::new(PoolInner {
            raw,
            ctx: ctx.clone(),
            owned: false,
        })))
    }

    /// A new pool of device memory on `ctx`'s device (`cuMemPoolCreate`: pinned device memory,
    /// no export handle, no size limit). A device or driver without memory pools is
    /// [`Error::Unsupported`].
    pub fn new(ctx: &Context) -> Result<MemPool> {
        require_pools(ctx)?;
        let f = driver_fn!(cuMemPoolCreate);
        // SAFETY: every field of the C struct is an integer, a pointer or a byte array, for
        // which all zeros is valid (and means "none" for the ones not set below).
        let mut props: ffi::CUmemPoolProps = unsafe { MaybeUninit::zeroed().assume_init() };
        props.allocType = ffi::CUmemAllocationType::CU_MEM_ALLOCATION_TYPE_PINNED;
        props.handleTypes = ffi::CUmemAllocationHandleType::CU_MEM_HANDLE_TYPE_NONE;
        props.location.type_ = ffi::CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE;
        props.location.id = ctx.device().raw();
        let mut raw = ptr::null_mut();
        // SAFETY: `raw` is a valid out-pointer and `props` a valid properties struct.
        check(unsafe { f(&mut raw, &props) }, "cuMemPoolCreate")?;
        if raw.is_null() {
            return Err(Error::NullHandle {
                what: "memory pool",
            });
        }
        Ok(MemPool(Arc::new(PoolInner {
            raw,
            ctx: ctx.clone(),
            owned: true,
        })))
    }

    /// The raw `CUmemoryPool`, valid while this value (or a buffer from the pool) lives.
    pub fn raw(&self) -> ffi::CUmemoryPool {
        self.0.raw
    }

    /// The context the pool was opened through; its device is the pool's.
    pub fn context(&self) -> &Context {
        &self.0.ctx
    }

    /// Whether this is the device's default pool (not created by [`MemPool::new`]).
    pub fn is_default(&self) -> bool {
        !self.0.owned
    }

    /// How many bytes of freed memory the pool keeps for reuse before it gives memory back to
    /// the system at a synchronisation (`CU_MEMPOOL_ATTR_RELEASE_THRESHOLD`).
    pub fn release_threshold(&self) -> Result<u64> {
        self.get_u64(ffi::CUmemPool_attribute::CU_MEMPOOL_ATTR_RELEASE_THRESHOLD)
    }

    /// Sets the release threshold (`u64::MAX`: keep everything until [`trim_to`](Self::trim_to)).
    pub fn set_release_threshold(&self, bytes: u64) -> Result<()> {
        let f = driver_fn!(cuMemPoolSetAttribute);
        let mut value = bytes;
        // SAFETY: the pool is live; the attribute takes a `cuuint64_t`, which `value` is.
        let rc = unsafe {
            f(
                self.0.raw,
                ffi::CUmemPool_attribute::CU_MEMPOOL_ATTR_RELEASE_THRESHOLD,
                ptr::from_mut(&mut value).cast(),
            )
        };
        check(rc, "cuMemPoolSetAttribute")
    }

    /// Gives memory the pool holds but no allocation uses back to the system, keeping at least
    /// `keep_bytes` reserved (`cuMemPoolTrimTo`). The blocks kept for reuse on streams are
    /// freed first, and their frees waited for on the host. Memory whose free has not yet run
    /// on its stream is still in use.
    pub fn trim_to(&self, keep_bytes: usize) -> Result<()> {
        // The kept blocks are freed on their streams; the trim waits for those frees (events
        // after them, synchronised with the thread's capture mode relaxed: a wait the caller did
        // not ask for must not break another thread's global-mode capture).
        let events = known_streams::free_kept_blocks_marked(self.0.raw);
        if !events.is_empty() {
            let waited = exchange_capture_mode(CaptureMode::Relaxed)
                .and_then(|_relaxed| synchronize_events(&events));
            for ev in events {
                let _ = crate::driver::recycled_events::destroy_or_defer(ev);
            }
            waited?;
        }
        let f = driver_fn!(cuMemPoolTrimTo);
        // SAFETY: the pool is live.
        check(unsafe { f(self.0.raw, keep_bytes) }, "cuMemPoolTrimTo")
    }

    /// The pool's usage now and its high-water marks, with the bytes kept for reuse apart.
    pub fn usage(&self) -> Result<PoolUsage> {
        use ffi::CUmemPool_attribute as A;
        // The driver first: inside a host function it refuses, before any stream's cache is
        // locked (a host function never waits for an epoch's lock: see `known_streams`).
        let reserved = self.get_u64(A::CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT)?;
        let reserved_high = self.get_u64(A::CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH)?;
        let used = self.get_u64(A::CU_MEMPOOL_ATTR_USED_MEM_CURRENT)?;
        let used_high = self.get_u64(A::CU_MEMPOOL_ATTR_USED_MEM_HIGH)?;
        // Kept blocks on the streams and orphans (the pool's counter also counts spares).
        let cached = block_cache::pool_cache_if_any(self.0.raw).map_or(0, |c| {
            known_streams::kept_bytes(self.0.raw) + block_cache::orphan_bytes(&c)
        });
        Ok(PoolUsage {
            reserved,
            reserved_high,
            used: used.saturating_sub(cached),
            used_high,
            cached,
        })
    }

    /// The most bytes of this pool's memory that freed buffers may leave kept for reuse, on
    /// all streams together. Unless set, a quarter of the device's memory.
    ///
    /// A buffer dropped on a stream this crate created, whose uses that stream orders (the
    /// usual case: allocated, used and dropped on one stream), leaves its block on the stream
    /// for the next allocation of the same size class there, which then makes no driver call
    /// and needs no event. Past the limit the block is freed to the pool (`cuMemFreeAsync`).
    /// Blocks are never reused on another stream; an allocation that runs out of memory frees
    /// every kept block of its context and tries once more; a stream's blocks are freed when
    /// it is destroyed, its handle leaves the crate (`raw()`), or a capture begins on it.
    ///
    /// The limit also counts, for each stream and size, one block that an allocation took back
    /// from the stream's cache (its return fits in that count, with no shared counter touched:
    /// threads allocating on their own streams do not contend). [`usage`](Self::usage) reports
    /// the kept blocks alone.
    pub fn cache_limit(&self) -> u64 {
        block_cache::pool_cache(self.0.raw, &self.0.ctx).limit()
    }

    /// Sets the [cache limit](Self::cache_limit) (0: no block is kept). Blocks kept past a
    /// lower limit are freed now.
    pub fn set_cache_limit(&self, bytes: u64) {
        let cache = block_cache::pool_cache(self.0.raw, &self.0.ctx);
        cache.set_limit(bytes);
        if cache.counted() > bytes {
            self.release_cached();
        }
    }

    /// Frees every block of this pool kept for reuse on this process's streams, each on its
    /// stream (`cuMemFreeAsync`, no wait); returns how many. The memory is the pool's again,
    /// for any stream, once those streams reach the frees.
    pub fn release_cached(&self) -> usize {
        known_streams::free_kept_blocks(Some(self.0.raw), None)
    }

    /// Resets both high-water marks to the current values.
    pub fn reset_high_water(&self) -> Result<()> {
        use ffi::CUmemPool_attribute as A;
        let f = driver_fn!(cuMemPoolSetAttribute);
        for attr in [
            A::CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH,
            A::CU_MEMPOOL_ATTR_USED_MEM_HIGH,
        ] {
            let mut zero = 0u64;
            // SAFETY: the pool is live; the attribute takes a `cuuint64_t` (only 0 is allowed,
            // meaning "reset").
            let rc = unsafe { f(self.0.raw, attr, ptr::from_mut(&mut zero).cast()) };
            check(rc, "cuMemPoolSetAttribute")?;
        }
        Ok(())
    }

    fn get_u64(&self, attr: ffi::CUmemPool_attribute) -> Result<u64> {
        let f = driver_fn!(cuMemPoolGetAttribute);
        let mut value = 0u64;
        // SAFETY: the pool is live; the 64-bit attributes write a `cuuint64_t` to `value`.
        let rc = unsafe { f(self.0.raw, attr, ptr::from_mut(&mut value).cast()) };
        check(rc, "cuMemPoolGetAttribute")?;
        Ok(value)
    }
}

impl Context {
    /// Frees every block of this context's memory kept for reuse on its streams, from every
    /// pool (see [`MemPool::cache_limit`]), each on its stream (`cuMemFreeAsync`, no wait);
    /// returns how many. What `torch.cuda.empty_cache()` does for PyTorch's caching allocator;
    /// an allocation that runs out of memory does it on its own before it gives up.
    pub fn release_cached(&self) -> usize {
        known_streams::free_kept_blocks(None, Some(self.raw()))
    }
}

/// Per-device answers cached without a lock (devices past the array ask the driver each time):
/// the default pool's handle (0: not yet asked), and whether the device has pools (0: not yet
/// asked, 1: no, 2: yes).
const CACHED_DEVICES: usize = 64;
static DEFAULT_POOLS: [AtomicUsize; CACHED_DEVICES] =
    [const { AtomicUsize::new(0) }; CACHED_DEVICES];
static SUPPORTED: [AtomicU8; CACHED_DEVICES] = [const { AtomicU8::new(0) }; CACHED_DEVICES];

fn slot(device: Device) -> Option<usize> {
    usize::try_from(device.raw())
        .ok()
        .filter(|&d| d < CACHED_DEVICES)
}

/// The raw default pool of `device` (`cuDeviceGetDefaultMemPool`), looked up once per device
/// (inline: one load on an allocation's path once known).
#[inline]
pub(crate) fn default_pool_raw(device: Device) -> Result<ffi::CUmemoryPool> {
    if let Some(i) = slot(device) {
        let raw = DEFAULT_POOLS[i].load(Ordering::Acquire);
        if raw != 0 {
            return Ok(raw as ffi::CUmemoryPool);
        }
    }
    look_up_default_pool(device)
}

#[cold]
#[inline(never)]
fn look_up_default_pool(device: Device) -> Result<ffi::CUmemoryPool> {
    let slot = slot(device);
    let f = driver_fn!(cuDeviceGetDefaultMemPool);
    let mut raw = ptr::null_mut();
    // SAFETY: `raw` is a valid out-pointer; the device came from the driver.
    let rc = unsafe { f(&mut raw, device.raw()) };
    check(rc, "cuDeviceGetDefaultMemPool")?;
    if raw.is_null() {
        return Err(Error::NullHandle {
            what: "memory pool",
        });
    }
    if let Some(i) = slot {
        DEFAULT_POOLS[i].store(raw as usize, Ordering::Release);
    }
    Ok(raw)
}

/// Whether `ctx`'s device allocates stream-ordered memory: the driver has
/// `cuMemAllocFromPoolAsync` and `cuMemFreeAsync` (CUDA 11.2) and the device says
/// `CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED`. Asked once per device; a driver error is
/// `false` (the plain path is always correct). Inline: one load once known.
#[inline]
pub(crate) fn pools_supported(ctx: &Context) -> bool {
    let device = ctx.device();
    if let Some(i) = slot(device) {
        match SUPPORTED[i].load(Ordering::Acquire) {
            1 => return false,
            2 => return true,
            _ => {}
        }
    }
    ask_pools_supported(device)
}

#[cold]
#[inline(never)]
fn ask_pools_supported(device: Device) -> bool {
    let slot = slot(device);
    let attribute =
        device.attribute(ffi::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED);
    if let Err(Error::InHostFunction { .. }) = attribute {
        // Not an answer: nothing is remembered (the allocation is refused further on).
        return false;
    }
    let yes = ffi::fns::cuMemAllocFromPoolAsync().is_ok()
        && ffi::fns::cuMemFreeAsync().is_ok()
        && ffi::fns::cuDeviceGetDefaultMemPool().is_ok()
        && attribute.is_ok_and(|v| v != 0);
    if let Some(i) = slot {
        SUPPORTED[i].store(if yes { 2 } else { 1 }, Ordering::Release);
    }
    yes
}

/// [`Error::Unsupported`] naming the call when `ctx`'s device has no memory pools.
fn require_pools(ctx: &Context) -> Result<()> {
    if pools_supported(ctx) {
        return Ok(());
    }
    // A missing symbol is reported as the loader reports it (with the version that added it).
    driver_fn!(cuMemAllocFromPoolAsync);
    driver_fn!(cuDeviceGetDefaultMemPool);
    Err(Error::Refused {
        call: "cuMemAllocFromPoolAsync",
        reason: "the device has no memory pools (CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED is 0)",
    })
}

/// What a device may do with a pool's memory (`CUmemAccess_flags`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum PoolAccess {
    /// Not mapped for the device (`CU_MEM_ACCESS_FLAGS_PROT_NONE`).
    None,
    /// Readable by the device (`CU_MEM_ACCESS_FLAGS_PROT_READ`).
    Read,
    /// Readable and writable by the device (`CU_MEM_ACCESS_FLAGS_PROT_READWRITE`).
    ReadWrite,
}

impl PoolAccess {
    fn flags(self) -> ffi::CUmemAccess_flags {
        use ffi::CUmemAccess_flags as F;
        match self {
            PoolAccess::None => F::CU_MEM_ACCESS_FLAGS_PROT_NONE,
            PoolAccess::Read => F::CU_MEM_ACCESS_FLAGS_PROT_READ,
            PoolAccess::ReadWrite => F::CU_MEM_ACCESS_FLAGS_PROT_READWRITE,
        }
    }

    fn from_flags(flags: ffi::CUmemAccess_flags) -> PoolAccess {
        use ffi::CUmemAccess_flags as F;
        if flags == F::CU_MEM_ACCESS_FLAGS_PROT_READWRITE {
            PoolAccess::ReadWrite
        } else if flags == F::CU_MEM_ACCESS_FLAGS_PROT_READ {
            PoolAccess::Read
        } else {
            PoolAccess::None
        }
    }
}

/// The grants this process made through the crate: (pool, device, access). A pool's own device
/// is never listed (it always has read-write access). An entry of a pool the crate destroys is
/// removed with it ([`forget_pool`]), so a handle the driver hands out again starts clean.
static GRANTS: Mutex<Vec<(usize, i32, PoolAccess)>> = Mutex::new(Vec::new());

fn grants() -> std::sync::MutexGuard<'static, Vec<(usize, i32, PoolAccess)>> {
    GRANTS.lock().unwrap_or_else(|e| e.into_inner())
}

/// The access this process granted `device` to `pool` through the crate.
pub(crate) fn granted(pool: ffi::CUmemoryPool, device: Device) -> PoolAccess {
    grants()
        .iter()
        .find(|(p, d, _)| *p == pool as usize && *d == device.raw())
        .map_or(PoolAccess::None, |g| g.2)
}

fn note(pool: ffi::CUmemoryPool, device: Device, access: PoolAccess) {
    let mut g = grants();
    g.retain(|(p, d, _)| !(*p == pool as usize && *d == device.raw()));
    if access != PoolAccess::None {
        g.push((pool as usize, device.raw(), access));
    }
}

/// Forgets the grants of a pool being destroyed.
pub(crate) fn forget_pool(pool: ffi::CUmemoryPool) {
    grants().retain(|(p, _, _)| *p != pool as usize);
}

/// `cuMemPoolSetAccess` of `pool` for `device`, recorded.
pub(crate) fn set_access_raw(
    pool: ffi::CUmemoryPool,
    device: Device,
    access: PoolAccess,
) -> Result<()> {
    let f = driver_fn!(cuMemPoolSetAccess);
    let desc = ffi::CUmemAccessDesc {
        location: ffi::CUmemLocation {
            type_: ffi::CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE,
            id: device.raw(),
        },
        flags: access.flags(),
    };
    // SAFETY: the pool is live (the caller holds it, or it is a default pool, which lives as
    // long as the device); one valid descriptor; the driver checks the ordinal.
    check(unsafe { f(pool, &desc, 1) }, "cuMemPoolSetAccess")?;
    note(pool, device, access);
    Ok(())
}

/// Grants `device` read-write access to `pool` (of `pool_device`) once: a no-op where this
/// process already granted it, and `Ok(false)` without a driver call for the pool's own device
/// or a device that cannot address `pool_device` (`cuDeviceCanAccessPeer`): its copies are
/// staged by the driver, and its kernels may not touch the memory.
pub(crate) fn ensure_read_write(
    pool: ffi::CUmemoryPool,
    pool_device: Device,
    device: Device,
) -> Result<bool> {
    if device == pool_device {
        return Ok(false);
    }
    if granted(pool, device) == PoolAccess::ReadWrite {
        return Ok(true);
    }
    let pair = (device.raw(), pool_device.raw());
    let not_peers = || NOT_PEERS.lock().unwrap_or_else(|e| e.into_inner());
    if not_peers().contains(&pair) {
        return Ok(false);
    }
    // A first grant may come from a copy recorded into a capture: the driver refuses the pool
    // call on a capturing thread (`CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED`, measured on two
    // H200s) unless the thread's capture mode is relaxed for it. Neither call touches a stream.
    let _relaxed = exchange_capture_mode(CaptureMode::Relaxed)?;
    if !device.can_access_peer(pool_device)? {
        not_peers().push(pair);
        return Ok(false);
    }
    set_access_raw(pool, device, PoolAccess::ReadWrite)?;
    Ok(true)
}

/// Pairs of devices (device, pool's device) that `cuDeviceCanAccessPeer` said cannot be peers:
/// a hardware property, asked once per pair by [`ensure_read_write`].
static NOT_PEERS: Mutex<Vec<(i32, i32)>> = Mutex::new(Vec::new());

impl MemPool {
    /// Lets `device` address this pool's memory, existing allocations and later ones
    /// (`cuMemPoolSetAccess`), or takes that away ([`PoolAccess::None`]). The pool's own device
    /// always has read-write access ([`Error::InvalidArgument`] if named here). A device that cannot address the pool's device
    /// ([`Device::can_access_peer`](crate::Device::can_access_peer)) gets the driver's error.
    ///
    /// A peer copy needs this for link speed ([`Context::enable_peer_access`] grants the default
    /// pools, and [`DeviceBuffer::copy_from_peer`](crate::DeviceBuffer::copy_from_peer) the
    /// pools of its two buffers, on first use); a kernel of `device` that reads or writes a
    /// buffer of this pool needs it to run at all (a typed launch refuses the buffer without
    /// it).
    ///
    /// [`Context::enable_peer_access`]: crate::Context::enable_peer_access
    pub fn set_access(&self, device: Device, access: PoolAccess) -> Result<()> {
        if device == self.context().device() {
            return Err(Error::InvalidArgument {
                reason: format!(
                    "device {} owns the pool: its access is always read-write",
                    device.ordinal()
                ),
            });
        }
        set_access_raw(self.raw(), device, access)
    }

    /// What `device` may do with this pool's memory (`cuMemPoolGetAccess`): read-write for the
    /// pool's own device, and for others what was granted (by this process or any other code).
    pub fn access(&self, device: Device) -> Result<PoolAccess> {
        let f = driver_fn!(cuMemPoolGetAccess);
        let mut flags = ffi::CUmemAccess_flags::CU_MEM_ACCESS_FLAGS_PROT_NONE;
        let mut location = ffi::CUmemLocation {
            type_: ffi::CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE,
            id: device.raw(),
        };
        // SAFETY: the pool is live; both pointers are valid; the driver checks the ordinal.
        let rc = unsafe { f(&mut flags, self.raw(), &mut location) };
        check(rc, "cuMemPoolGetAccess")?;
        Ok(PoolAccess::from_flags(flags))
    }
}
