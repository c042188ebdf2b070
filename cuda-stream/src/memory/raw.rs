//! The raw, `unsafe` memset and memcpy functions for memory the caller manages, on any
//! [`Enqueue`] (a stream or a capture). [`DeviceBuffer`](crate::DeviceBuffer) has the safe forms.

use crate::base::error::{Result, check, driver_fn};
use crate::base::plain_data::DeviceCopy;
use crate::ffi;
use crate::stream::view::{Enqueue, bind_for_copy, bind_if_special};

/// `cuMemsetD8Async`: sets `count` bytes at `dst` to `value`, after the work enqueued on
/// `stream` so far. Returns at once; works on every stream (a default stream's context is made
/// current for the call) and inside a graph capture.
///
/// # Safety
///
/// `dst` must be device memory (or memory the device can address) valid for `count` bytes of
/// writes until the stream's work up to here has completed, and, when recorded into a graph
/// capture, for every launch of the graphs made from it; nothing may access it meanwhile
/// without ordering (other streams by events; the host not at all, if it is host memory).
///
/// For memory of a [`DeviceBuffer`](crate::DeviceBuffer), the safe [`DeviceBuffer::fill`](crate::DeviceBuffer::fill) needs none of this; where
/// the raw function is wanted (part of a buffer), call
/// [`DeviceBuffer::keep_alive_in`](crate::DeviceBuffer::keep_alive_in) on the same stream first:
/// it orders the stream after the buffer's earlier uses and records a use there (on a stream
/// this crate created, the buffer's free then waits for the work enqueued after it), and makes a
/// capture's graph keep the memory allocated for its launches.
pub unsafe fn memset_d8_async(
    stream: &impl Enqueue,
    dst: ffi::CUdeviceptr,
    value: u8,
    count: usize,
) -> Result<()> {
    let (raw, ctx) = stream.enqueue_handle();
    let f = driver_fn!(cuMemsetD8Async);
    let _bound = bind_if_special(raw, ctx)?;
    // SAFETY: the caller vouches for `dst`; the stream is live while borrowed.
    check(unsafe { f(dst, value, count, raw) }, "cuMemsetD8Async")
}

/// `cuMemsetD16Async`: sets `count` 16-bit words at `dst` (2-byte aligned) to `value`; see
/// [`memset_d8_async`].
///
/// # Safety
///
/// As for [`memset_d8_async`], for `2 * count` bytes at a 2-byte-aligned `dst`.
pub unsafe fn memset_d16_async(
    stream: &impl Enqueue,
    dst: ffi::CUdeviceptr,
    value: u16,
    count: usize,
) -> Result<()> {
    let (raw, ctx) = stream.enqueue_handle();
    let f = driver_fn!(cuMemsetD16Async);
    let _bound = bind_if_special(raw, ctx)?;
    // SAFETY: the caller vouches for `dst`; the stream is live while borrowed.
    check(unsafe { f(dst, value, count, raw) }, "cuMemsetD16Async")
}

/// `cuMemsetD32Async`: sets `count` 32-bit words at `dst` (4-byte aligned) to `value`; see
/// [`memset_d8_async`].
///
/// # Safety
///
/// As for [`memset_d8_async`], for `4 * count` bytes at a 4-byte-aligned `dst`.
pub unsafe fn memset_d32_async(
    stream: &impl Enqueue,
    dst: ffi::CUdeviceptr,
    value: u32,
    count: usize,
) -> Result<()> {
    let (raw, ctx) = stream.enqueue_handle();
    let f = driver_fn!(cuMemsetD32Async);
    let _bound = bind_if_special(raw, ctx)?;
    // SAFETY: the caller vouches for `dst`; the stream is live while borrowed.
    check(unsafe { f(dst, value, count, raw) }, "cuMemsetD32Async")
}

/// `cuMemcpyDtoDAsync`: copies `bytes` bytes from `src` to `dst` (device memory, of any device
/// with unified addressing), after the work enqueued on `stream` so far; see
/// [`memset_d8_async`].
///
/// # Safety
///
/// `src` must be valid for `bytes` bytes of reads and `dst` for `bytes` bytes of writes, the
/// two not overlapping, until the stream's work up to here has completed (and for every launch
/// of a graph the copy is captured into); nothing may write `src` or access `dst` meanwhile
/// without ordering. For [`DeviceBuffer`](crate::DeviceBuffer)s, [`DeviceBuffer::copy_from`](crate::DeviceBuffer::copy_from) is the safe form, and
/// [`DeviceBuffer::keep_alive_in`](crate::DeviceBuffer::keep_alive_in) meets the graph part for each buffer involved.
pub unsafe fn memcpy_dtod_async(
    stream: &impl Enqueue,
    dst: ffi::CUdeviceptr,
    src: ffi::CUdeviceptr,
    bytes: usize,
) -> Result<()> {
    let (raw, ctx) = stream.enqueue_handle();
    let f = driver_fn!(cuMemcpyDtoDAsync);
    let _bound = bind_for_copy(raw, ctx)?;
    // SAFETY: the caller vouches for both ranges; the stream is live while borrowed.
    check(unsafe { f(dst, src, bytes, raw) }, "cuMemcpyDtoDAsync")
}

/// `cuMemcpyHtoDAsync`: copies `src` from host memory to `dst`, after the work enqueued on
/// `stream` so far. From pinned (page-locked) memory the copy is truly asynchronous; from
/// ordinary memory the driver stages it first.
///
/// # Safety
///
/// `dst` must be valid for `size_of_val(src)` bytes of writes until the copy has completed;
/// `src` must stay allocated and unmodified until then: until the stream's work up to here has
/// completed, and, when the copy is recorded into a graph capture, for every launch of the
/// graphs made from it (the graph reads `src` each time).
/// ([`DeviceBuffer::keep_alive_in`](crate::DeviceBuffer::keep_alive_in) meets the graph part for a buffer's memory as `dst`; the
/// host memory stays the caller's.)
pub unsafe fn memcpy_htod_async<T: DeviceCopy>(
    stream: &impl Enqueue,
    dst: ffi::CUdeviceptr,
    src: &[T],
) -> Result<()> {
    let (raw, ctx) = stream.enqueue_handle();
    let f = driver_fn!(cuMemcpyHtoDAsync);
    let _bound = bind_for_copy(raw, ctx)?;
    // SAFETY: `src` is readable for its size now; the caller keeps it so and vouches for `dst`.
    let rc = unsafe { f(dst, src.as_ptr().cast(), size_of_val(src), raw) };
    check(rc, "cuMemcpyHtoDAsync")
}

/// `cuMemcpyDtoHAsync`: copies `size_of_val(dst)` bytes from `src` into host memory `dst`,
/// after the work enqueued on `stream` so far. Into pinned memory the copy is truly
/// asynchronous; into ordinary memory the call returns once the copy is done.
///
/// # Safety
///
/// `src` must be valid for the reads; `dst` must stay allocated, and must not be read or written
/// by anything, until the copy has completed (until the stream's work up to here has completed,
/// and for every launch of a graph the copy is recorded into): the device writes it
/// behind the compiler's back. Synchronise the stream (or an event recorded after the copy)
/// before reading `dst`. ([`DeviceBuffer::keep_alive_in`](crate::DeviceBuffer::keep_alive_in) meets the graph part for a buffer's
/// memory as `src`.)
pub unsafe fn memcpy_dtoh_async<T: DeviceCopy>(
    stream: &impl Enqueue,
    dst: &mut [T],
    src: ffi::CUdeviceptr,
) -> Result<()> {
    let (raw, ctx) = stream.enqueue_handle();
    let f = driver_fn!(cuMemcpyDtoHAsync);
    let _bound = bind_for_copy(raw, ctx)?;
    // SAFETY: `dst` is writable for its size now; the caller keeps it so until the copy is done,
    // and vouches for `src`.
    let rc = unsafe { f(dst.as_mut_ptr().cast(), src, size_of_val(dst), raw) };
    check(rc, "cuMemcpyDtoHAsync")
}
