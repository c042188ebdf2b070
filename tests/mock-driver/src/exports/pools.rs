//! Stream-ordered memory (CUDA 11.2): `cuDeviceGetDefaultMemPool`, `cuMemPoolCreate` and the
//! rest of the pool calls, `cuMemAllocFromPoolAsync`, `cuMemAllocAsync`, `cuMemFreeAsync`; and
//! page-locked host memory, `cuMemHostAlloc` and `cuMemFreeHost`. The model is
//! `model/pools.rs`.
//!
//! - An allocation from a pool is made at the call, in the pool's device's primary context (the
//!   stream must be of that device), and counts as any allocation. On a capturing stream it is
//!   an allocation node: the range is reserved at the call and allocated by each launch that
//!   reaches the node (a launch finding it still allocated is a bad use).
//! - `cuMemFreeAsync` checks at the call that the address starts a live allocation with no free
//!   queued (else `CUDA_ERROR_INVALID_VALUE`, a bad destroy), then queues the free on the stream:
//!   work queued before it still finds the memory, work that reaches it afterwards is a bad use.
//!   On a capturing stream it becomes a node that frees when the graph runs, for a graph's
//!   reserved range only (once); memory allocated outside the capture is
//!   `CUDA_ERROR_INVALID_VALUE` there, as on driver 580 (no bad destroy: the address is valid).
//! - A device whose pools are switched off (`cuda_mock_set_memory_pools`, or `pools=0` in the
//!   configuration; a reset keeps the setting) answers 0 for `CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED` and
//!   `CUDA_ERROR_NOT_SUPPORTED` for its default pool and new pools.
//! - An unknown or destroyed pool handle is `CUDA_ERROR_INVALID_VALUE`, counted as a bad use (a
//!   bad destroy for `cuMemPoolDestroy`, as is destroying a default pool).
//! - `cuMemPoolSetAccess` records the access of other devices (two distinct devices are peers
//!   here); the pool's own device is `CUDA_ERROR_INVALID_DEVICE`. Copies of pool memory check
//!   it against the current context (`exports/memory.rs`, `check_copy_context`).

use std::ffi::{c_int, c_uint, c_void};

use cuda_stream_sys::{
    CU_MEMHOSTALLOC_DEVICEMAP, CU_MEMHOSTALLOC_PORTABLE, CU_MEMHOSTALLOC_WRITECOMBINED, CUdevice,
    CUdeviceptr, CUmemAccess_flags, CUmemAccessDesc, CUmemAllocationType, CUmemLocation,
    CUmemLocationType, CUmemPool_attribute, CUmemPoolProps, CUmemoryPool, CUresult, CUstream,
};

use super::call::{INVALID_VALUE, SUCCESS, api, guard, put, read};
use super::devices::valid_device;
use crate::model::device::{DeviceWork, MAX_ALLOCATION};
use crate::model::jobs::Work;
use crate::model::pools::{Overlap, PoolRec};
use crate::model::races::{Acc, Kind};
use crate::state::capture::on_device_work;
use crate::state::{self, State};

const NOT_SUPPORTED: CUresult = CUresult::CUDA_ERROR_NOT_SUPPORTED;

/// The live pool `h`, or `CUDA_ERROR_INVALID_VALUE` with the use counted.
fn pool(st: &mut State, h: CUmemoryPool) -> Result<&mut PoolRec, CUresult> {
    if st.device.pools.get_mut(h as usize).is_none() {
        st.counters.bad_uses += 1;
        crate::base::trace_bad_use(file!(), line!());
        return Err(INVALID_VALUE);
    }
    Ok(st.device.pools.get_mut(h as usize).expect("just checked"))
}

/// `cuDeviceGetDefaultMemPool`: one fixed handle per device.
///
/// # Safety
///
/// `pool_out` is null or valid for a write.
#[cfg_attr(exported = "cuDeviceGetDefaultMemPool", unsafe(no_mangle))]
pub unsafe extern "C" fn cuDeviceGetDefaultMemPool(
    pool_out: *mut CUmemoryPool,
    dev: CUdevice,
) -> CUresult {
    api("cuDeviceGetDefaultMemPool", false, |mut st| {
        if pool_out.is_null() {
            return INVALID_VALUE;
        }
        tri!(valid_device(&st, dev));
        if !st.device.pools.supported(dev) {
            return NOT_SUPPORTED;
        }
        let h = st.device.pools.default_pool(dev);
        // SAFETY: non-null; the caller's contract makes it writable.
        unsafe { put(pool_out, h as CUmemoryPool) };
        SUCCESS
    })
}

/// `cuMemPoolCreate`: pinned device memory of a valid device only.
///
/// # Safety
///
/// Each pointer is null or valid (`pool` for a write, `props` for a read).
#[cfg_attr(exported = "cuMemPoolCreate", unsafe(no_mangle))]
pub unsafe extern "C" fn cuMemPoolCreate(
    pool: *mut CUmemoryPool,
    props: *const CUmemPoolProps,
) -> CUresult {
    api("cuMemPoolCreate", false, |mut st| {
        if pool.is_null() || props.is_null() {
            return INVALID_VALUE;
        }
        // SAFETY: non-null; the caller's contract makes it readable.
        let props = unsafe { &*props };
        if props.allocType != CUmemAllocationType::CU_MEM_ALLOCATION_TYPE_PINNED
            || props.location.type_ != CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE
        {
            return INVALID_VALUE;
        }
        let dev = props.location.id;
        tri!(valid_device(&st, dev).map_err(|_| INVALID_VALUE));
        if !st.device.pools.supported(dev) {
            return NOT_SUPPORTED;
        }
        let h = st.device.pools.create(dev);
        // SAFETY: non-null; the caller's contract makes it writable.
        unsafe { put(pool, h as CUmemoryPool) };
        SUCCESS
    })
}

/// `cuMemPoolDestroy`: returns at once; the pool is released once its allocations are freed.
///
/// # Safety
///
/// None beyond the C contract; the handle is only looked up.
#[cfg_attr(exported = "cuMemPoolDestroy", unsafe(no_mangle))]
pub unsafe extern "C" fn cuMemPoolDestroy(pool: CUmemoryPool) -> CUresult {
    api("cuMemPoolDestroy", false, |mut st| {
        if st.device.pools.destroy(pool as usize) {
            SUCCESS
        } else {
            st.counters.bad_destroys += 1;
            INVALID_VALUE
        }
    })
}

/// `cuMemPoolGetAttribute`: the release threshold and the usage counters (64-bit values);
/// other attributes are `CUDA_ERROR_INVALID_VALUE`.
///
/// # Safety
///
/// `value` is null or valid for a write of a `cuuint64_t`.
#[cfg_attr(exported = "cuMemPoolGetAttribute", unsafe(no_mangle))]
pub unsafe extern "C" fn cuMemPoolGetAttribute(
    pool: CUmemoryPool,
    attr: CUmemPool_attribute,
    value: *mut c_void,
) -> CUresult {
    type A = CUmemPool_attribute;
    api("cuMemPoolGetAttribute", false, |mut st| {
        let p = tri!(self::pool(&mut st, pool));
        if value.is_null() {
            return INVALID_VALUE;
        }
        let v = match attr {
            A::CU_MEMPOOL_ATTR_RELEASE_THRESHOLD => p.release_threshold,
            A::CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT => p.reserved(),
            A::CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH => p.reserved_high,
            A::CU_MEMPOOL_ATTR_USED_MEM_CURRENT => p.used,
            A::CU_MEMPOOL_ATTR_USED_MEM_HIGH => p.used_high,
            _ => return INVALID_VALUE,
        };
        // SAFETY: non-null; the caller's contract makes it writable as a `cuuint64_t`.
        unsafe { put(value.cast::<u64>(), v) };
        SUCCESS
    })
}

/// `cuMemPoolSetAttribute`: the release threshold, and the high-water marks (only to 0, which
/// resets them to the current value); other attributes are `CUDA_ERROR_INVALID_VALUE`.
///
/// # Safety
///
/// `value` is null or valid for a read of a `cuuint64_t`.
#[cfg_attr(exported = "cuMemPoolSetAttribute", unsafe(no_mangle))]
pub unsafe extern "C" fn cuMemPoolSetAttribute(
    pool: CUmemoryPool,
    attr: CUmemPool_attribute,
    value: *mut c_void,
) -> CUresult {
    type A = CUmemPool_attribute;
    api("cuMemPoolSetAttribute", false, |mut st| {
        let p = tri!(self::pool(&mut st, pool));
        if value.is_null() {
            return INVALID_VALUE;
        }
        // SAFETY: non-null; the caller's contract makes it readable as a `cuuint64_t`.
        let v = unsafe { value.cast::<u64>().read() };
        match attr {
            A::CU_MEMPOOL_ATTR_RELEASE_THRESHOLD => p.set_release_threshold(v),
            A::CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH if v == 0 => p.reset_reserved_high(),
            A::CU_MEMPOOL_ATTR_USED_MEM_HIGH if v == 0 => p.reset_used_high(),
            _ => return INVALID_VALUE,
        }
        SUCCESS
    })
}

/// `cuMemPoolTrimTo`: gives kept memory back until at most `min_bytes_to_keep` are reserved.
///
/// # Safety
///
/// None beyond the C contract; the handle is only looked up.
#[cfg_attr(exported = "cuMemPoolTrimTo", unsafe(no_mangle))]
pub unsafe extern "C" fn cuMemPoolTrimTo(pool: CUmemoryPool, min_bytes_to_keep: usize) -> CUresult {
    api("cuMemPoolTrimTo", false, |mut st| {
        let p = tri!(self::pool(&mut st, pool));
        p.trim_to(min_bytes_to_keep as u64);
        SUCCESS
    })
}

/// An allocation of `bytesize` bytes from pool `pool` (`None`: the stream's device's default
/// pool) for `h_stream`.
fn alloc_async(
    symbol: &'static str,
    dptr: *mut CUdeviceptr,
    bytesize: usize,
    pool: Option<CUmemoryPool>,
    h_stream: CUstream,
) -> CUresult {
    api(symbol, false, |mut st| {
        if dptr.is_null() || bytesize == 0 {
            return INVALID_VALUE;
        }
        let s = tri!(st.stream(h_stream));
        let device = st.ctx_device(s.ctx);
        let h = match pool {
            Some(p) => {
                let rec = tri!(self::pool(&mut st, p));
                if rec.device != device {
                    return INVALID_VALUE;
                }
                p as usize
            }
            None if st.device.pools.supported(device) => st.device.pools.default_pool(device),
            None => return NOT_SUPPORTED,
        };
        if bytesize > MAX_ALLOCATION {
            return CUresult::CUDA_ERROR_OUT_OF_MEMORY;
        }
        if st.graphs.captures.capture_of(s.key).is_some() {
            // An allocation node: the range is reserved now, allocated by each launch.
            let p = st.device.reserve_for_graph(s.ctx, bytesize, h);
            let work = DeviceWork::GraphAlloc { ptr: p };
            let rc = on_device_work(&mut st, s, &work).expect("capturing");
            if rc == SUCCESS {
                // SAFETY: non-null; the caller's contract makes it writable.
                unsafe { put(dptr, p) };
            }
            return rc;
        }
        let p = st.device.allocate_from(s.ctx, bytesize, Some(h));
        // Usable in stream order after the allocation: a write, for the race detector.
        st.race_op(s, symbol, &[Acc::device(p, bytesize, Kind::Write)]);
        // SAFETY: non-null; the caller's contract makes it writable.
        unsafe { put(dptr, p) };
        SUCCESS
    })
}

/// `cuMemAllocFromPoolAsync`: made at once (see the module docs).
///
/// # Safety
///
/// `dptr` is null or valid for a write.
#[cfg_attr(exported = "cuMemAllocFromPoolAsync", unsafe(no_mangle))]
pub unsafe extern "C" fn cuMemAllocFromPoolAsync(
    dptr: *mut CUdeviceptr,
    bytesize: usize,
    pool: CUmemoryPool,
    h_stream: CUstream,
) -> CUresult {
    alloc_async(
        "cuMemAllocFromPoolAsync",
        dptr,
        bytesize,
        Some(pool),
        h_stream,
    )
}

/// `cuMemAllocAsync`: from the stream's device's default pool.
///
/// # Safety
///
/// `dptr` is null or valid for a write.
#[cfg_attr(exported = "cuMemAllocAsync", unsafe(no_mangle))]
pub unsafe extern "C" fn cuMemAllocAsync(
    dptr: *mut CUdeviceptr,
    bytesize: usize,
    h_stream: CUstream,
) -> CUresult {
    alloc_async("cuMemAllocAsync", dptr, bytesize, None, h_stream)
}

/// `cuMemFreeAsync`: checked at the call, made when the stream reaches it (see the module docs).
///
/// # Safety
///
/// None beyond the C contract; the address is only looked up.
#[cfg_attr(exported = "cuMemFreeAsync", unsafe(no_mangle))]
pub unsafe extern "C" fn cuMemFreeAsync(dptr: CUdeviceptr, h_stream: CUstream) -> CUresult {
    api("cuMemFreeAsync", false, |mut st| {
        let s = tri!(st.stream(h_stream));
        let capturing = st.graphs.captures.capture_of(s.key).is_some();
        // In a capture, a graph's reserved range may be freed (once): the node frees it when
        // the launch reaches it.
        let freeable = |a: &crate::model::device::AllocRec| {
            (a.alive && !a.freeing) || (capturing && a.graph && !a.freeing)
        };
        if !st.device.allocs.get(&dptr).is_some_and(freeable) {
            st.counters.bad_destroys += 1;
            return INVALID_VALUE;
        }
        if capturing && st.device.allocs.get(&dptr).is_some_and(|a| !a.graph) {
            return INVALID_VALUE;
        }
        let work = DeviceWork::Free { ptr: dptr };
        if let Some(rc) = on_device_work(&mut st, s, &work) {
            if rc == SUCCESS {
                if let Some(a) = st.device.allocs.get_mut(&dptr).filter(|a| a.graph) {
                    a.freeing = true;
                }
            }
            return rc;
        }
        st.race_work(s, "cuMemFreeAsync", &work);
        tri!(st.enqueue(s, Work::Device(work)));
        if let Some(a) = st.device.allocs.get_mut(&dptr) {
            a.freeing = true;
        }
        SUCCESS
    })
}

/// `cuMemHostAlloc`: `bytesize` bytes of host memory (filled with 0xa5), 4096-byte aligned,
/// with a current context. Flags other than `PORTABLE`, `DEVICEMAP` and `WRITECOMBINED`, and 0
/// bytes, are `CUDA_ERROR_INVALID_VALUE`; more than 1 GiB is `CUDA_ERROR_OUT_OF_MEMORY`.
///
/// # Safety
///
/// `pp` is null or valid for a write.
#[cfg_attr(exported = "cuMemHostAlloc", unsafe(no_mangle))]
pub unsafe extern "C" fn cuMemHostAlloc(
    pp: *mut *mut c_void,
    bytesize: usize,
    flags: c_uint,
) -> CUresult {
    const KNOWN: u32 =
        CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_WRITECOMBINED;
    api("cuMemHostAlloc", false, |mut st| {
        // Potentially unsafe during a capture (the driver documents the synchronous allocation
        // and free as such): refused on a thread a capture prohibits, which it invalidates.
        if let Some(rc) = crate::state::capture::on_unsafe_call(&mut st) {
            return rc;
        }
        if pp.is_null() || bytesize == 0 || flags & !KNOWN != 0 {
            return INVALID_VALUE;
        }
        tri!(st.current_ctx());
        if bytesize > MAX_ALLOCATION {
            return CUresult::CUDA_ERROR_OUT_OF_MEMORY;
        }
        let Some(p) = st.device.host.allocate(bytesize) else {
            return CUresult::CUDA_ERROR_OUT_OF_MEMORY;
        };
        // SAFETY: non-null; the caller's contract makes it writable.
        unsafe { put(pp, p as *mut c_void) };
        SUCCESS
    })
}

/// `cuMemFreeHost`: with a current context (the driver's `CUDA_ERROR_INVALID_CONTEXT` without
/// one); anything but the start of a live `cuMemHostAlloc` allocation is
/// `CUDA_ERROR_INVALID_VALUE`, a bad destroy. Queued copies that reach freed memory are bad uses.
///
/// # Safety
///
/// None beyond the C contract; the address is only looked up.
#[cfg_attr(exported = "cuMemFreeHost", unsafe(no_mangle))]
pub unsafe extern "C" fn cuMemFreeHost(p: *mut c_void) -> CUresult {
    api("cuMemFreeHost", false, |mut st| {
        // Potentially unsafe during a capture (the driver documents the synchronous allocation
        // and free as such): refused on a thread a capture prohibits, which it invalidates.
        if let Some(rc) = crate::state::capture::on_unsafe_call(&mut st) {
            return rc;
        }
        tri!(st.current_ctx());
        let base = p as usize;
        if let Some(size) = st.device.host.size_of(base) {
            st.race_host_op("cuMemFreeHost", &[Acc::host(base, size, Kind::Free)]);
            st.races
                .forget(crate::model::races::Space::Host, base as u64);
        }
        if st.device.host.free(p as usize) {
            SUCCESS
        } else {
            st.counters.bad_destroys += 1;
            INVALID_VALUE
        }
    })
}

/// `cuMemHostRegister_v2`: page-locks the caller's `[p, p + bytesize)` (flags `PORTABLE`,
/// `DEVICEMAP`, `IOMEMORY`, `READ_ONLY` accepted), with a current context; 0 bytes or a null
/// address is `CUDA_ERROR_INVALID_VALUE`, and so is memory of `cuMemHostAlloc` (as on driver
/// 580); a range that overlaps one registered is `CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED`. Asynchronous copies
/// then treat the range as page-locked memory (checked and raced as such); a copy that reaches it
/// after `cuMemHostUnregister` is a bad use.
///
/// # Safety
///
/// None beyond the C contract; the memory is only recorded, never touched at the call.
#[cfg_attr(exported = "cuMemHostRegister_v2", unsafe(no_mangle))]
pub unsafe extern "C" fn cuMemHostRegister_v2(
    p: *mut c_void,
    bytesize: usize,
    flags: c_uint,
) -> CUresult {
    const KNOWN: u32 = 0x1 | 0x2 | 0x4 | 0x8;
    api("cuMemHostRegister_v2", false, |mut st| {
        if let Some(rc) = crate::state::capture::on_unsafe_call(&mut st) {
            return rc;
        }
        if p.is_null() || bytesize == 0 || flags & !KNOWN != 0 {
            return INVALID_VALUE;
        }
        tri!(st.current_ctx());
        match st.device.host.register(p as usize, bytesize) {
            Ok(()) => SUCCESS,
            // Measured on an H100 (driver 580.159): page-locked memory of `cuMemHostAlloc` is
            // `CUDA_ERROR_INVALID_VALUE`.
            Err(Overlap::Allocation) => INVALID_VALUE,
            Err(Overlap::Registered) => CUresult::CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED,
        }
    })
}

/// `cuMemHostUnregister`: with a current context; anything but the start of a registered range
/// is `CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED`, a bad destroy. Queued copies that reach the range
/// afterwards are bad uses.
///
/// # Safety
///
/// None beyond the C contract; the address is only looked up.
#[cfg_attr(exported = "cuMemHostUnregister", unsafe(no_mangle))]
pub unsafe extern "C" fn cuMemHostUnregister(p: *mut c_void) -> CUresult {
    api("cuMemHostUnregister", false, |mut st| {
        if let Some(rc) = crate::state::capture::on_unsafe_call(&mut st) {
            return rc;
        }
        tri!(st.current_ctx());
        let base = p as usize;
        match st.device.host.unregister(base) {
            Some(size) => {
                st.race_host_op("cuMemHostUnregister", &[Acc::host(base, size, Kind::Free)]);
                st.races
                    .forget(crate::model::races::Space::Host, base as u64);
                SUCCESS
            }
            None => {
                st.counters.bad_destroys += 1;
                CUresult::CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED
            }
        }
    })
}

/// How many host ranges are registered (`cuMemHostRegister`) now.
#[unsafe(no_mangle)]
pub extern "C" fn cuda_mock_registered_host_ranges() -> u64 {
    read(|st| st.device.host.registered())
}

/// Switches device `device`'s memory pools on (`supported` != 0) or off, for good: a property of
/// the device, which `cuda_mock_reset` keeps (`cuda-stream` asks once per device and process, so
/// switch before its first allocation there). Returns 0, or -1 for a device out of range.
#[unsafe(no_mangle)]
pub extern "C" fn cuda_mock_set_memory_pools(device: c_int, supported: c_int) -> c_int {
    guard(-1, || {
        let mut st = state::lock();
        if valid_device(&st, device).is_err() {
            return -1;
        }
        let off = &mut st.device.pools.unsupported;
        off.retain(|d| *d != device);
        if supported == 0 {
            off.push(device);
        }
        0
    })
}

/// Pools created by `cuMemPoolCreate` and not destroyed.
#[unsafe(no_mangle)]
pub extern "C" fn cuda_mock_live_pools() -> u64 {
    read(|st| st.device.pools.live_pools)
}

/// `cuMemHostAlloc` allocations not freed.
#[unsafe(no_mangle)]
pub extern "C" fn cuda_mock_live_host_allocations() -> u64 {
    read(|st| st.device.host.live())
}

/// `cuMemPoolSetAccess`: records each descriptor's device and flags (`PROT_NONE`, `READ`,
/// `READWRITE`); a location that is not a device, an invalid device, the pool's own device
/// (`CUDA_ERROR_INVALID_DEVICE`) or unknown flags make the call fail with nothing recorded.
///
/// # Safety
///
/// `map` is null or valid for `count` descriptors of reads.
#[cfg_attr(exported = "cuMemPoolSetAccess", unsafe(no_mangle))]
pub unsafe extern "C" fn cuMemPoolSetAccess(
    pool: CUmemoryPool,
    map: *const CUmemAccessDesc,
    count: usize,
) -> CUresult {
    api("cuMemPoolSetAccess", false, |mut st| {
        if map.is_null() && count > 0 {
            return INVALID_VALUE;
        }
        if let Some(rc) = crate::state::capture::on_unsafe_call(&mut st) {
            return rc;
        }
        let devices = st.devices;
        let rec = tri!(self::pool(&mut st, pool));
        let mut wanted = Vec::with_capacity(count);
        for i in 0..count {
            // SAFETY: the caller's contract: `count` readable descriptors.
            let d = unsafe { map.add(i).read() };
            if d.location.type_ != CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE
                || d.location.id < 0
                || d.location.id as usize >= devices
                || d.flags.0 > 3
                || d.flags.0 == 2
            {
                return INVALID_VALUE;
            }
            if d.location.id == rec.device {
                return CUresult::CUDA_ERROR_INVALID_DEVICE;
            }
            wanted.push((d.location.id, d.flags.0));
        }
        for (device, flags) in wanted {
            rec.access.retain(|(d, _)| *d != device);
            if flags != 0 {
                rec.access.push((device, flags));
            }
        }
        SUCCESS
    })
}

/// `cuMemPoolGetAccess`: the flags recorded for the location's device (read-write for the
/// pool's own device, none for a device never granted).
///
/// # Safety
///
/// `flags` is null or valid for a write; `location` null or valid for a read.
#[cfg_attr(exported = "cuMemPoolGetAccess", unsafe(no_mangle))]
pub unsafe extern "C" fn cuMemPoolGetAccess(
    flags: *mut CUmemAccess_flags,
    pool: CUmemoryPool,
    location: *mut CUmemLocation,
) -> CUresult {
    api("cuMemPoolGetAccess", false, |mut st| {
        if flags.is_null() || location.is_null() {
            return INVALID_VALUE;
        }
        // SAFETY: non-null; the caller's contract makes it readable.
        let loc = unsafe { location.read() };
        if loc.type_ != CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE {
            return INVALID_VALUE;
        }
        let rec = tri!(self::pool(&mut st, pool));
        let f = rec.access_of(loc.id);
        // SAFETY: non-null; the caller's contract makes it writable.
        unsafe { put(flags, CUmemAccess_flags(f)) };
        SUCCESS
    })
}
