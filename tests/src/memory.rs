//! Device memory for the tests: a zeroed `u32` buffer, reads on a private stream, free memory.

use std::marker::PhantomData;

use cuda_stream::Enqueue;
use cuda_stream_sys::{self as sys, CUcontext, CUdeviceptr, CUstream};

use crate::context::{HasContext, bind, bind_raw, raw_stream_create_in, raw_stream_destroy};
use crate::gpu::check;

/// Runs `f` with a private non-blocking stream of `ctx` (bound), then synchronises and destroys
/// the stream.
///
/// # Safety
/// `ctx` must be a live context.
#[track_caller]
unsafe fn with_private_stream<R>(ctx: CUcontext, f: impl FnOnce(CUstream) -> R) -> R {
    // SAFETY: the caller passes a live context.
    let _bound = unsafe { bind_raw(ctx) };
    // SAFETY: as above.
    let s = unsafe { raw_stream_create_in(ctx, sys::CUstream_flags::CU_STREAM_NON_BLOCKING.0) };
    let r = f(s);
    // SAFETY: `s` was created above and is live.
    check(
        unsafe { sys::cuStreamSynchronize(s) },
        "cuStreamSynchronize",
    );
    // SAFETY: created above, destroyed once.
    unsafe { raw_stream_destroy(s) };
    r
}

/// Reads `n` `u32`s at `ptr` (device memory usable in `ctx`) on a private non-blocking stream:
/// the read waits for no other stream, so it sees whatever is in memory now.
#[track_caller]
pub fn read_u32s<C: HasContext + ?Sized>(ctx: &C, ptr: CUdeviceptr, n: usize) -> Vec<u32> {
    // SAFETY: `ctx` is borrowed, so live, for the call.
    unsafe { read_u32s_in(ctx.raw_context(), ptr, n) }
}

/// # Safety
/// `ctx` must be a live context.
#[track_caller]
unsafe fn read_u32s_in(ctx: CUcontext, ptr: CUdeviceptr, n: usize) -> Vec<u32> {
    let mut out = vec![0u32; n];
    let dst = out.as_mut_ptr();
    let copy = |s: CUstream| {
        check(
            // SAFETY: `out` is writable for `4 * n` bytes and is not touched until the stream
            // has been synchronised (inside `with_private_stream`).
            unsafe { sys::cuMemcpyDtoHAsync(dst.cast(), ptr, 4 * n, s) },
            "cuMemcpyDtoHAsync",
        );
    };
    // SAFETY: the caller passes a live context.
    unsafe { with_private_stream(ctx, copy) };
    out
}

/// `n` `u32`s of device memory in one context (`cuMemAlloc`), zero-filled before `new`
/// returns; freed on drop with the context bound.
#[derive(Debug)]
pub struct DeviceBuffer<'a> {
    ptr: CUdeviceptr,
    len: usize,
    ctx: CUcontext,
    _ctx: PhantomData<&'a ()>,
}

// SAFETY: a device pointer and a context handle, both usable from any thread; freed once.
unsafe impl Send for DeviceBuffer<'_> {}
// SAFETY: as above; no interior mutability on the host.
unsafe impl Sync for DeviceBuffer<'_> {}

impl<'a> DeviceBuffer<'a> {
    /// Allocates `len` `u32`s in `ctx` and zeroes them (the zeroing has completed on return).
    #[track_caller]
    pub fn new<C: HasContext + ?Sized>(ctx: &'a C, len: usize) -> DeviceBuffer<'a> {
        assert!(len > 0);
        let _bound = bind(ctx);
        let ctx = ctx.raw_context();
        let mut ptr = 0;
        // SAFETY: `ptr` is a valid out-pointer; the context is current.
        check(unsafe { sys::cuMemAlloc(&mut ptr, 4 * len) }, "cuMemAlloc");
        let buf = DeviceBuffer {
            ptr,
            len,
            ctx,
            _ctx: PhantomData,
        };
        buf.fill(0);
        buf
    }

    /// The device address of element 0.
    pub fn ptr(&self) -> CUdeviceptr {
        self.ptr
    }

    /// The device address of element `i`.
    pub fn at(&self, i: usize) -> CUdeviceptr {
        assert!(i < self.len, "index {i} out of {}", self.len);
        self.ptr + 4 * i as u64
    }

    /// How many `u32`s.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Always false: buffers are never empty.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// Enqueues `cuMemsetD32Async(value)` of the whole buffer on `stream`.
    #[track_caller]
    pub fn fill_async(&self, stream: impl Enqueue, value: u32) {
        let (raw, ctx) = stream.enqueue_handle();
        assert_eq!(ctx, self.ctx);
        // SAFETY: the context is borrowed for 'a, which outlives `self`.
        let _bound = unsafe { bind_raw(self.ctx) };
        check(
            // SAFETY: the buffer is live and holds `len` u32s; the stream is of its context.
            unsafe { sys::cuMemsetD32Async(self.ptr, value, self.len, raw) },
            "cuMemsetD32Async",
        );
    }

    /// Sets every element to `value` on a private stream; done on return.
    #[track_caller]
    pub fn fill(&self, value: u32) {
        let set = |s: CUstream| {
            check(
                // SAFETY: the buffer is live and holds `len` u32s; `s` is of its context.
                unsafe { sys::cuMemsetD32Async(self.ptr, value, self.len, s) },
                "cuMemsetD32Async",
            );
        };
        // SAFETY: the context is borrowed for 'a, which outlives `self`.
        unsafe { with_private_stream(self.ctx, set) };
    }

    /// Reads the whole buffer now (see [`read_u32s`]); call after synchronising the work.
    #[track_caller]
    pub fn read(&self) -> Vec<u32> {
        // SAFETY: the context is borrowed for 'a, which outlives `self`.
        unsafe { read_u32s_in(self.ctx, self.ptr, self.len) }
    }

    /// Reads element `i` now.
    #[track_caller]
    pub fn get(&self, i: usize) -> u32 {
        // SAFETY: the context is borrowed for 'a, which outlives `self`.
        let v = unsafe { read_u32s_in(self.ctx, self.at(i), 1) };
        v[0]
    }
}

impl Drop for DeviceBuffer<'_> {
    fn drop(&mut self) {
        // SAFETY: the context is borrowed for 'a, which outlives `self`.
        let _bound = unsafe { bind_raw(self.ctx) };
        // SAFETY: allocated by this value, freed once, with its context bound.
        let rc = unsafe { sys::cuMemFree(self.ptr) };
        if !std::thread::panicking() {
            check(rc, "cuMemFree");
        }
    }
}

/// Free and total device memory of `ctx`'s device (`cuMemGetInfo`, symbol `cuMemGetInfo_v2`).
#[track_caller]
pub fn device_memory<C: HasContext + ?Sized>(ctx: &C) -> (usize, usize) {
    let _bound = bind(ctx);
    let (mut free, mut total) = (0, 0);
    // SAFETY: both are valid out-pointers; the context is current.
    check(
        unsafe { sys::cuMemGetInfo(&mut free, &mut total) },
        "cuMemGetInfo",
    );
    (free, total)
}
