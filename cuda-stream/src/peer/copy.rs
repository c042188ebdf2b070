//! Peer copies: [`DeviceBuffer::copy_from_peer`], a copy between buffers of two devices on a
//! stream of either, with the uses of both buffers tracked.

use crate::base::error::{Error, Result, check, driver_fn};
use crate::base::plain_data::DeviceCopy;
use crate::driver::capture_query::is_capturing;
use crate::driver::context::bind;
use crate::driver::device::Device;
use crate::memory::across::enqueue_across;
use crate::memory::allocation::Allocation;
use crate::memory::buffer::DeviceBuffer;
use crate::memory::buffer_ops::capture_graph;
use crate::memory::pool::ensure_read_write;
use crate::memory::slice::{AsDeviceSlice, DeviceSliceMut, Span};
use crate::memory::use_tracking::Access;
use crate::stream::view::Enqueue;

impl<T: DeviceCopy> DeviceBuffer<T> {
    /// Enqueues a copy of `src`, a buffer of the same length on **another device**, into this
    /// buffer on `stream` (`cuMemcpyPeerAsync`); `stream` belongs to either buffer's context.
    ///
    /// Uses are tracked on both devices: the copy waits for the last write of `src` and every
    /// earlier use of this buffer, wherever they were enqueued, and later uses wait for the copy
    /// (a read on device 1 of a buffer written there by a copy from device 0 waits for it). The
    /// buffer of the other context records its use on that context's service stream, which
    /// waits for the copy (an event): later work there (the context's unordered allocations and
    /// some frees) also waits for the copy. On a created stream the copy waits for the other
    /// buffer's earlier uses itself, through their events, never for the service stream: copies
    /// repeated on one stream cost no round trip between the devices.
    ///
    /// Where the two devices can be peers ([`Device::can_access_peer`](crate::Device::can_access_peer)),
    /// the first copy between a pool and a device grants that device read-write access to the
    /// pool ([`MemPool::set_access`](crate::MemPool::set_access)): stream-ordered memory is
    /// mapped for its own device alone, and context peer access does not reach it, so without the
    /// grant the driver stages every copy through host memory (37 GB/s instead of 391 GB/s over
    /// NVLink on two H100s). Buffers from no pool (`cuMemAlloc`) need
    /// [`Context::enable_peer_access`](crate::Context::enable_peer_access) for the same; without
    /// it, or between devices that cannot be peers, the copy is staged: the same result, slower.
    /// Buffers of the same device are refused ([`Error::InvalidArgument`]: use
    /// [`copy_from`](DeviceBuffer::copy_from)), a stream of a third context is
    /// [`Error::ContextMismatch`], and lengths must match ([`Error::LengthMismatch`]).
    ///
    /// On a stream that is being captured the copy becomes a graph node, and the graph keeps
    /// both buffers allocated for its replays (the host first waits for conflicting uses
    /// elsewhere, as for [`copy_from`](DeviceBuffer::copy_from)).
    ///
    /// ```no_run
    /// use cuda_stream::{Context, DeviceBuffer};
    ///
    /// let (c0, c1) = (Context::primary(0)?, Context::primary(1)?);
    /// let s1 = c1.new_stream()?;
    /// let x = DeviceBuffer::from_host(&c0, &c0.new_stream()?, &[1.0f32; 1024])?;
    /// let y = DeviceBuffer::<f32>::alloc_on(&c1, &s1, 1024)?;
    /// y.copy_from_peer(&s1, &x)?;
    /// assert_eq!(y.to_vec(&s1)?, vec![1.0; 1024]);
    /// # Ok::<(), cuda_stream::Error>(())
    /// ```
    pub fn copy_from_peer(&self, stream: &impl Enqueue, src: &impl AsDeviceSlice<T>) -> Result<()> {
        self.span()
            .copy_from_peer(stream, src.as_device_slice().span())
    }
}

impl<T: DeviceCopy> DeviceSliceMut<'_, T> {
    /// Enqueues a copy of `src` (a buffer or view of the view's length on another device) into
    /// the view on `stream`: see [`DeviceBuffer::copy_from_peer`].
    pub fn copy_from_peer(
        &mut self,
        stream: &impl Enqueue,
        src: &impl AsDeviceSlice<T>,
    ) -> Result<()> {
        self.span()
            .copy_from_peer(stream, src.as_device_slice().span())
    }
}

impl<T: DeviceCopy> Span<'_, T> {
    /// The peer copy of [`DeviceBuffer::copy_from_peer`], on this span's values.
    fn copy_from_peer(self, stream: &impl Enqueue, src: Span<'_, T>) -> Result<()> {
        if src.len() != self.len() {
            return Err(Error::LengthMismatch {
                expected: self.len(),
                actual: src.len(),
            });
        }
        let (raw, stream_ctx) = stream.enqueue_handle();
        let (dst_ctx, src_ctx) = (self.context(), src.context());
        let home_is_dst = if stream_ctx == dst_ctx.raw() {
            true
        } else if stream_ctx == src_ctx.raw() {
            false
        } else {
            return Err(Error::ContextMismatch { what: "the stream" });
        };
        if dst_ctx.device() == src_ctx.device() {
            return Err(Error::InvalidArgument {
                reason: format!(
                    "both buffers are on device {}: a peer copy needs two devices \
                     (use DeviceBuffer::copy_from)",
                    dst_ctx.device().ordinal()
                ),
            });
        }
        // Always bound: with no context current, the driver (580) crashed the process in
        // `cuMemcpyPeerAsync` of pool memory (tests/examples/contexts.rs); with a context of
        // another device current, copies of pool memory fail (see `bind_for_copy`).
        let _bound = bind(stream_ctx)?;
        let (dst, src_alloc) = (self.alloc_ref(), src.alloc_ref());
        // Link speed for pool memory: each buffer's pool lets the other device in, once per
        // pool and device (where the devices can be peers; else the driver stages the copy).
        grant_peer(dst, src_ctx.device())?;
        grant_peer(src_alloc, dst_ctx.device())?;
        let bytes = self.byte_len();
        let home = if home_is_dst { dst_ctx } else { src_ctx };
        let capturing = is_capturing(raw)?;
        if bytes == 0 {
            if capturing {
                capture_graph(raw)?;
            }
            return Ok(());
        }
        // The driver (580) refuses `cuMemcpyPeerAsync` in a capture
        // (`CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED`, the capture invalidated): there the copy is
        // a unified-addressing device-to-device copy, which becomes a memcpy node between the
        // two devices.
        let (peer, unified) = (driver_fn!(cuMemcpyPeerAsync), driver_fn!(cuMemcpyDtoDAsync));
        enqueue_across(
            raw,
            home,
            &[(dst, Access::Write), (src_alloc, Access::Read)],
            || {
                let (d, s) = (self.device_ptr(), src.device_ptr());
                if capturing {
                    // SAFETY: as below; unified addressing names each buffer by its address
                    // alone, and the current context (the stream's) reaches both pools.
                    let rc = unsafe { unified(d, s, bytes, raw) };
                    return check(rc, "cuMemcpyDtoDAsync");
                }
                // SAFETY: two live allocations of `bytes` bytes each in their own contexts,
                // freed only after this use (recorded on both sides) or held by the capture's
                // graph; the stream is of one of the two contexts.
                let rc = unsafe { peer(d, dst_ctx.raw(), s, src_ctx.raw(), bytes, raw) };
                check(rc, "cuMemcpyPeerAsync")
            },
        )
    }
}

/// Grants `device` read-write access to `alloc`'s pool, once (see [`ensure_read_write`]).
fn grant_peer(alloc: &Allocation, device: Device) -> Result<()> {
    if let Some(pool) = alloc.pool_raw()? {
        ensure_read_write(pool, alloc.ctx().device(), device)?;
    }
    Ok(())
}
