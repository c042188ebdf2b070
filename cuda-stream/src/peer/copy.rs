//! Peer copies: [`DeviceBuffer::copy_from_peer`], a copy between buffers of two devices on a
//! stream of either, with the uses of both buffers tracked.

use crate::base::error::{Error, Result, check, driver_fn};
use crate::base::plain_data::DeviceCopy;
use crate::driver::capture_query::is_capturing;
use crate::driver::context::Context;
use crate::ffi;
use crate::memory::buffer::DeviceBuffer;
use crate::memory::buffer_ops::{capture_graph, enqueue_with_uses};
use crate::memory::use_tracking::Access;
use crate::peer::tracked::{TrackedUse, around_streams};
use crate::stream::view::{Enqueue, bind_if_special};

impl<T: DeviceCopy> DeviceBuffer<T> {
    /// Enqueues a copy of `src`, a buffer of the same length on **another device**, into this
    /// buffer on `stream` (`cuMemcpyPeerAsync`); `stream` belongs to either buffer's context.
    ///
    /// Uses are tracked on both devices: the copy waits for the last write of `src` and every
    /// earlier use of this buffer, wherever they were enqueued, and later uses wait for the copy
    /// (a read on device 1 of a buffer written there by a copy from device 0 waits for it). The
    /// buffer of the other context records its use on that context's service stream, which is
    /// ordered after the copy by an event each way: later work there (the context's unordered
    /// allocations and some frees) also waits for the copy.
    ///
    /// Without peer access between the two devices ([`Context::enable_peer_access`] not called,
    /// or not possible, see [`Device::can_access_peer`](crate::Device::can_access_peer)) the
    /// driver stages the copy through host memory: the result is the same, only slower.
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
    /// if c0.device().can_access_peer(c1.device())? {
    ///     c1.enable_peer_access(&c0)?; // device 1's copies read device 0's memory directly
    /// }
    /// let s1 = c1.new_stream()?;
    /// let x = DeviceBuffer::from_host(&c0, &c0.new_stream()?, &[1.0f32; 1024])?;
    /// let y = DeviceBuffer::<f32>::alloc_on(&c1, &s1, 1024)?;
    /// y.copy_from_peer(&s1, &x)?;
    /// assert_eq!(y.to_vec(&s1)?, vec![1.0; 1024]);
    /// # Ok::<(), cuda_stream::Error>(())
    /// ```
    pub fn copy_from_peer(&self, stream: &impl Enqueue, src: &DeviceBuffer<T>) -> Result<()> {
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
        let _bound = bind_if_special(raw, stream_ctx)?;
        let bytes = self.byte_len();
        let copy = |raw: ffi::CUstream| -> Result<()> {
            let f = driver_fn!(cuMemcpyPeerAsync);
            // SAFETY: two live allocations of `bytes` bytes each in their own contexts, freed
            // only after this use (recorded on both sides) or held by the capture's graph.
            let rc = unsafe {
                f(
                    self.device_ptr(),
                    dst_ctx.raw(),
                    src.device_ptr(),
                    src_ctx.raw(),
                    bytes,
                    raw,
                )
            };
            check(rc, "cuMemcpyPeerAsync")
        };
        let capturing = is_capturing(raw)?;
        if bytes == 0 {
            if capturing {
                capture_graph(raw)?;
            }
            return Ok(());
        }
        let (dst, src_alloc) = (self.alloc_ref(), src.alloc_ref());
        if capturing {
            // The memory layer's rule for captures: buffers from outside are tied to the graph
            // (after the host waited for their conflicting uses elsewhere), a graph buffer of
            // this capture is tracked inside it, a borrowed one is refused.
            return enqueue_with_uses(
                raw,
                stream_ctx,
                &[(dst, Access::Write), (src_alloc, Access::Read)],
                || copy(raw),
            );
        }
        dst.check_outside_capture()?;
        src_alloc.check_outside_capture()?;
        let (home_ctx, remote_ctx) = if home_is_dst {
            (dst_ctx, src_ctx)
        } else {
            (src_ctx, dst_ctx)
        };
        let proxy = remote_ctx.service_stream()?;
        let (remote_uses, remote_access) = if home_is_dst {
            (&src_alloc.uses, Access::Read)
        } else {
            (&dst.uses, Access::Write)
        };
        let (home_uses, home_access) = if home_is_dst {
            (&dst.uses, Access::Write)
        } else {
            (&src_alloc.uses, Access::Read)
        };
        let list = vec![
            TrackedUse {
                uses: home_uses,
                access: home_access,
                stream: raw,
            },
            TrackedUse {
                uses: remote_uses,
                access: remote_access,
                stream: proxy,
            },
        ];
        around_streams(list, |enqueued| {
            // The proxy has waited for the remote buffer's conflicting uses: so does `raw`.
            hand_over(remote_ctx, proxy, raw)?;
            copy(raw)?;
            *enqueued = true;
            // And the proxy, which stands for the copy on the remote side, waits for it.
            hand_over(home_ctx, raw, proxy)
        })
    }
}

/// Makes `to` wait for the work enqueued on `from` so far (a stream of `ctx`): an event of
/// `ctx` recorded on `from`, waited for by `to` (of any context), then recycled (a wait holds
/// the record it was made for).
fn hand_over(ctx: &Context, from: ffi::CUstream, to: ffi::CUstream) -> Result<()> {
    let ev = ctx.plain_event()?;
    let out = (|| {
        let record = driver_fn!(cuEventRecord);
        // SAFETY: the event is ours, of `ctx`, as `from` is; both streams are live.
        check(unsafe { record(ev, from) }, "cuEventRecord")?;
        let wait = driver_fn!(cuStreamWaitEvent);
        // SAFETY: as above; a stream may wait for an event of another context.
        check(unsafe { wait(to, ev, 0) }, "cuStreamWaitEvent")
    })();
    ctx.recycle_plain_event(ev);
    out
}
