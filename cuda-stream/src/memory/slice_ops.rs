//! The operations of the views of a buffer ([`DeviceSlice`], [`DeviceSliceMut`]): those of
//! [`DeviceBuffer`](crate::DeviceBuffer) on the view's values, each recorded as a use of the
//! whole allocation (see `slice`).

use crate::base::error::Result;
use crate::base::plain_data::DeviceCopy;
use crate::memory::slice::{AsDeviceSlice, DeviceSlice, DeviceSliceMut};
use crate::stream::view::{AsStream, Enqueue};

impl<T: DeviceCopy> DeviceSlice<'_, T> {
    /// Copies the view's values into `dst` (of the view's length) on `stream` and waits: see
    /// [`DeviceBuffer::copy_to_host`](crate::DeviceBuffer::copy_to_host).
    pub fn copy_to_host(&self, stream: &impl AsStream, dst: &mut [T]) -> Result<()> {
        self.span().copy_to_host(stream, dst)
    }

    /// The view's values, copied on `stream`: see
    /// [`DeviceBuffer::to_vec`](crate::DeviceBuffer::to_vec).
    pub fn to_vec(&self, stream: &impl AsStream) -> Result<Vec<T>> {
        self.span().to_vec(stream)
    }

    /// Enqueues a copy of the view's values into `dst` without waiting: see
    /// [`DeviceBuffer::copy_to_host_async`](crate::DeviceBuffer::copy_to_host_async).
    ///
    /// # Safety
    ///
    /// As for [`DeviceBuffer::copy_to_host_async`](crate::DeviceBuffer::copy_to_host_async).
    pub unsafe fn copy_to_host_async(&self, stream: &impl Enqueue, dst: &mut [T]) -> Result<()> {
        // SAFETY: the caller's promise, passed on.
        unsafe { self.span().copy_to_host_async(stream, dst) }
    }

    /// Ties the buffer to `stream`'s capture, or records a use there: see
    /// [`DeviceBuffer::keep_alive_in`](crate::DeviceBuffer::keep_alive_in).
    pub fn keep_alive_in(&self, stream: &impl Enqueue) -> Result<()> {
        self.span().keep_alive_in(stream)
    }
}

impl<T: DeviceCopy> DeviceSliceMut<'_, T> {
    /// Enqueues setting every value of the view to `value` on `stream`: see
    /// [`DeviceBuffer::fill`](crate::DeviceBuffer::fill).
    pub fn fill(&mut self, stream: &impl Enqueue, value: T) -> Result<()> {
        self.span().fill(stream, value)
    }

    /// Enqueues a copy of `src` (a buffer or a view, of the view's length and context, not
    /// overlapping it) into the view on `stream`: see
    /// [`DeviceBuffer::copy_from`](crate::DeviceBuffer::copy_from).
    pub fn copy_from(&mut self, stream: &impl Enqueue, src: &impl AsDeviceSlice<T>) -> Result<()> {
        self.span().copy_from(stream, src.as_device_slice().span())
    }

    /// Copies `src` (of the view's length) into the view on `stream` and waits: see
    /// [`DeviceBuffer::copy_from_host`](crate::DeviceBuffer::copy_from_host).
    pub fn copy_from_host(&mut self, stream: &impl AsStream, src: &[T]) -> Result<()> {
        self.span().copy_from_host(stream, src)
    }

    /// Enqueues a copy of `src` into the view without waiting: see
    /// [`DeviceBuffer::copy_from_host_async`](crate::DeviceBuffer::copy_from_host_async).
    ///
    /// # Safety
    ///
    /// As for [`DeviceBuffer::copy_from_host_async`](crate::DeviceBuffer::copy_from_host_async).
    pub unsafe fn copy_from_host_async(&mut self, stream: &impl Enqueue, src: &[T]) -> Result<()> {
        // SAFETY: the caller's promise, passed on.
        unsafe { self.span().copy_from_host_async(stream, src) }
    }

    /// Copies the view's values into `dst` on `stream` and waits: see
    /// [`DeviceSlice::copy_to_host`].
    pub fn copy_to_host(&self, stream: &impl AsStream, dst: &mut [T]) -> Result<()> {
        self.span().copy_to_host(stream, dst)
    }

    /// The view's values, copied on `stream`: see [`DeviceSlice::to_vec`].
    pub fn to_vec(&self, stream: &impl AsStream) -> Result<Vec<T>> {
        self.span().to_vec(stream)
    }

    /// Ties the buffer to `stream`'s capture, or records a use there: see
    /// [`DeviceBuffer::keep_alive_in`](crate::DeviceBuffer::keep_alive_in).
    pub fn keep_alive_in(&self, stream: &impl Enqueue) -> Result<()> {
        self.span().keep_alive_in(stream)
    }
}
