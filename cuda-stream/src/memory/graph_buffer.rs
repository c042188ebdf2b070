//! [`GraphBuffer`]: memory that lives inside one replay of a graph, made by an allocation node
//! and freed by a free node of the capture (graph memory nodes, CUDA 11.4).

use std::fmt;
use std::marker::PhantomData;
use std::ops::Deref;

use crate::base::error::{Error, Result};
use crate::base::plain_data::DeviceCopy;
use crate::driver::context::Context;
use crate::graph::capture_view::CaptureStream;
use crate::memory::allocation::Allocation;
use crate::memory::buffer::{BufferUse, DeviceBuffer, byte_size};

/// `len` values of `T` allocated inside a graph capture: `cuMemAllocAsync` on a capturing
/// stream adds an allocation node to the graph, and the drop adds a free node after every use
/// recorded in the capture. Each replay of the graph allocates the memory when it reaches the
/// allocation node and frees it at the free node, so scratch memory costs nothing between
/// replays and the driver can reuse it inside one.
///
/// It cannot leave the capture (its lifetime is the capture's), and it is used only on the
/// streams of its capture: the stream it was allocated on and the capture's forks
/// (elsewhere [`Error::Refused`]; its memory exists only while the graph runs). Uses on the
/// capture's streams are ordered by the same tracking as any buffer's, with events recorded in
/// the capture, so a fork reading what the parent wrote waits for the write in the graph.
/// Through `Deref` it is a [`DeviceBuffer`] for [`fill`](DeviceBuffer::fill),
/// [`copy_from`](DeviceBuffer::copy_from), [`read`](DeviceBuffer::read) in kernel arguments
/// and, here, [`write`](GraphBuffer::write).
///
/// A graph with allocation nodes has the driver's rules: one executable graph of it at a time,
/// and a replay must have freed its memory before the next (the free node does that).
///
/// ```no_run
/// use cuda_stream::{CaptureMode, Context, DeviceBuffer, GraphBuffer};
///
/// let ctx = Context::primary(0)?;
/// let mut stream = ctx.new_stream()?;
/// let out = DeviceBuffer::<f32>::zeroed(&ctx, &stream, 1024)?;
/// let graph = stream.capture(CaptureMode::ThreadLocal, |cap| {
///     let scratch = GraphBuffer::<f32>::alloc(&ctx, cap, 1024)?; // an allocation node
///     scratch.fill(&cap, 2.0)?;
///     out.copy_from(&cap, &scratch)?;
///     Ok(())                                                   // the free node, at the drop
/// })?;
/// # Ok::<(), cuda_stream::Error>(())
/// ```
pub struct GraphBuffer<'cap, T: DeviceCopy> {
    buf: DeviceBuffer<T>,
    _capture: PhantomData<CaptureStream<'cap>>,
}

impl<T: DeviceCopy> fmt::Debug for GraphBuffer<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GraphBuffer")
            .field("ptr", &format_args!("{:#x}", self.buf.device_ptr()))
            .field("len", &self.buf.len())
            .finish()
    }
}

impl<'cap, T: DeviceCopy> GraphBuffer<'cap, T> {
    /// Allocates `len` values of `T` in the graph being captured on `stream` (of `ctx`): an
    /// allocation node from the device's default pool. The contents are undefined bytes at every
    /// replay. A device without memory pools has no graph memory nodes (the driver's
    /// `CUDA_ERROR_NOT_SUPPORTED`); an invalidated capture is [`Error::NotCapturing`].
    pub fn alloc(
        ctx: &Context,
        stream: CaptureStream<'cap>,
        len: usize,
    ) -> Result<GraphBuffer<'cap, T>> {
        if stream.context_raw() != ctx.raw() {
            return Err(Error::ContextMismatch { what: "the stream" });
        }
        let status = stream.status()?;
        if !status.is_capturing() {
            return Err(Error::NotCapturing { status });
        }
        let bytes = byte_size::<T>(len)?;
        let alloc = if bytes == 0 {
            Allocation::adopt(ctx, 0)
        } else {
            Allocation::in_graph(ctx, stream.handle(), stream.capture_id(), bytes)?
        };
        Ok(GraphBuffer {
            buf: DeviceBuffer::from_alloc(alloc, len),
            _capture: PhantomData,
        })
    }

    /// [`alloc`](GraphBuffer::alloc), then a memset node zeroing it.
    pub fn zeroed(
        ctx: &Context,
        stream: CaptureStream<'cap>,
        len: usize,
    ) -> Result<GraphBuffer<'cap, T>> {
        let buf = GraphBuffer::alloc(ctx, stream, len)?;
        buf.buf.zero(&stream)?;
        Ok(buf)
    }

    /// This buffer as a kernel argument that the kernel writes: see [`DeviceBuffer::write`].
    pub fn write(&mut self) -> BufferUse<'_> {
        self.buf.write()
    }

    /// Adds the free node now, returning the driver's answer (the drop does the same and can
    /// only ignore an error). If the free node cannot be added the graph keeps the memory
    /// allocated after a replay, and the driver refuses to launch it again.
    pub fn free(self) -> Result<()> {
        self.buf.free()
    }
}

impl<T: DeviceCopy> Deref for GraphBuffer<'_, T> {
    type Target = DeviceBuffer<T>;

    fn deref(&self) -> &DeviceBuffer<T> {
        &self.buf
    }
}

impl<T: DeviceCopy> crate::memory::slice::sealed::Sealed for GraphBuffer<'_, T> {}

impl<T: DeviceCopy> crate::memory::slice::AsDeviceSlice<T> for GraphBuffer<'_, T> {
    fn as_device_slice(&self) -> crate::memory::slice::DeviceSlice<'_, T> {
        self.as_slice()
    }
}
