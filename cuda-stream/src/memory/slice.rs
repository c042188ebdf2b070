//! Views of part of a [`DeviceBuffer`]: [`DeviceSlice`] (shared, as `&[T]`) and
//! [`DeviceSliceMut`] (exclusive, as `&mut [T]`), made by `slice`, `slice_mut`, `split_at` and
//! `split_at_mut`; and the span of memory every buffer operation works on, a buffer's or a
//! view's ([`Span`]). The operations themselves are in `buffer_ops` and `slice_ops`.
//!
//! **Uses are tracked at the allocation.** A view borrows its buffer, and a use of a view is a
//! use of the whole allocation: two views of one buffer used on two streams are ordered one
//! after the other (a write waits for every earlier use of the allocation on other streams, as a
//! write of the whole buffer does), even where their ranges are disjoint. That keeps the ordering
//! model of `use_tracking` (one tracker per allocation, whose rules the race detector and the
//! random programs check) unchanged, and costs nothing where views are used on one stream; what
//! it gives up is overlap of disjoint halves written on two streams at once, which needs two
//! buffers (two allocations) today. Measured on an H100 (driver 580, `cuda-stream-bench`,
//! `mem_halves_*`): the two halves of one buffer each written by a 200 us kernel on a stream of
//! its own took 414 us as views (in turn) against 216 us raw, and 214 us as two buffers
//! (overlapping, as tracking at the range would let views).

use std::marker::PhantomData;
use std::mem::size_of;
use std::ops::{Bound as RangeBound, RangeBounds};
use std::sync::Arc;

use crate::base::error::{Error, Result};
use crate::base::plain_data::DeviceCopy;
use crate::driver::context::Context;
use crate::ffi;
use crate::memory::allocation::Allocation;
use crate::memory::buffer::{BufferUse, DeviceBuffer};
use crate::memory::use_tracking::Access;

/// `len` values of `T` at `ptr`, inside the allocation `alloc`: what a buffer operation works
/// on, for a whole buffer or a view of part of it.
pub(crate) struct Span<'a, T> {
    ptr: ffi::CUdeviceptr,
    len: usize,
    alloc: &'a Arc<Allocation>,
    _values: PhantomData<fn() -> T>,
}

impl<T> Clone for Span<'_, T> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<T> Copy for Span<'_, T> {}

impl<'a, T: DeviceCopy> Span<'a, T> {
    /// The span of a whole allocation of `len` values starting at `ptr`.
    pub(crate) fn new(ptr: ffi::CUdeviceptr, len: usize, alloc: &'a Arc<Allocation>) -> Self {
        Span {
            ptr,
            len,
            alloc,
            _values: PhantomData,
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.len
    }

    pub(crate) fn byte_len(&self) -> usize {
        self.len * size_of::<T>()
    }

    pub(crate) fn device_ptr(&self) -> ffi::CUdeviceptr {
        self.ptr
    }

    pub(crate) fn context(&self) -> &'a Context {
        self.alloc.ctx()
    }

    /// The context's handle, read from the allocation (see `Allocation::ctx_raw`).
    #[inline]
    pub(crate) fn ctx_raw(&self) -> ffi::CUcontext {
        self.alloc.ctx_raw()
    }

    pub(crate) fn alloc_ref(&self) -> &'a Arc<Allocation> {
        self.alloc
    }

    /// Whether this span and `other` share bytes (in one allocation).
    pub(crate) fn overlaps<U: DeviceCopy>(&self, other: &Span<'_, U>) -> bool {
        let (a, b) = (self.ptr, self.ptr + self.byte_len() as u64);
        let (c, d) = (other.ptr, other.ptr + other.byte_len() as u64);
        Arc::ptr_eq(self.alloc, other.alloc) && a < d && c < b
    }

    /// The values `range` of this span, or [`Error::OutOfRange`].
    fn sub(self, range: impl RangeBounds<usize>) -> Result<Span<'a, T>> {
        let start = match range.start_bound() {
            RangeBound::Included(&s) => Some(s),
            RangeBound::Excluded(&s) => s.checked_add(1),
            RangeBound::Unbounded => Some(0),
        };
        let end = match range.end_bound() {
            RangeBound::Included(&e) => e.checked_add(1),
            RangeBound::Excluded(&e) => Some(e),
            RangeBound::Unbounded => Some(self.len),
        };
        match (start, end) {
            (Some(start), Some(end)) if start <= end && end <= self.len => Ok(Span {
                // Within the allocation: `start <= len`, and `len` values fit its bytes.
                ptr: self.ptr + (start * size_of::<T>()) as u64,
                len: end - start,
                alloc: self.alloc,
                _values: PhantomData,
            }),
            (start, end) => Err(Error::OutOfRange {
                start: start.unwrap_or(usize::MAX),
                end: end.unwrap_or(usize::MAX),
                len: self.len,
            }),
        }
    }

    fn split(self, mid: usize) -> Result<(Span<'a, T>, Span<'a, T>)> {
        Ok((self.sub(..mid)?, self.sub(mid..)?))
    }

    fn buffer_use(self, access: Access) -> BufferUse<'a> {
        BufferUse::new(self.ptr, self.alloc, access)
    }
}

/// A shared view of `len` values of a [`DeviceBuffer`] (as `&[T]` is of a slice), made by
/// [`DeviceBuffer::slice`], [`split_at`](DeviceBuffer::split_at) or
/// [`as_slice`](DeviceBuffer::as_slice). It reads: copies to the host, the source of a device
/// copy, a kernel argument through [`read`](DeviceSlice::read). `Copy`, and it borrows the buffer,
/// so the buffer outlives it.
///
/// Its uses are the buffer's: tracked at the allocation (see [`DeviceSliceMut`]).
pub struct DeviceSlice<'a, T: DeviceCopy> {
    span: Span<'a, T>,
}

/// An exclusive view of `len` values of a [`DeviceBuffer`] (as `&mut [T]` is of a slice), made
/// by [`DeviceBuffer::slice_mut`], [`split_at_mut`](DeviceBuffer::split_at_mut) or
/// [`as_mut_slice`](DeviceBuffer::as_mut_slice). It writes as well as reads: fill, device and host
/// copies into it, a kernel argument through [`write`](DeviceSliceMut::write).
///
/// **Uses are tracked at the allocation.** A use of a view waits for the uses of the whole
/// buffer it conflicts with, and is recorded as a use of the whole buffer: two halves from
/// `split_at_mut` written on two streams run one after the other, as two writes of the buffer
/// would. The ordering stays the buffer's one model (its free waits for every view's uses), and
/// views on one stream cost nothing more; work that must overlap on two streams takes two
/// buffers.
pub struct DeviceSliceMut<'a, T: DeviceCopy> {
    span: Span<'a, T>,
    _exclusive: PhantomData<&'a mut [T]>,
}

impl<T: DeviceCopy> Clone for DeviceSlice<'_, T> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<T: DeviceCopy> Copy for DeviceSlice<'_, T> {}

// Views of a `DeviceBuffer`, which is `Send + Sync`.
static_assertions::assert_impl_all!(DeviceSlice<'static, u8>: Send, Sync);
static_assertions::assert_impl_all!(DeviceSliceMut<'static, u8>: Send, Sync);

impl<T: DeviceCopy> std::fmt::Debug for DeviceSlice<'_, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DeviceSlice")
            .field("ptr", &format_args!("{:#x}", self.span.ptr))
            .field("len", &self.span.len)
            .finish()
    }
}

impl<T: DeviceCopy> std::fmt::Debug for DeviceSliceMut<'_, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DeviceSliceMut")
            .field("ptr", &format_args!("{:#x}", self.span.ptr))
            .field("len", &self.span.len)
            .finish()
    }
}

/// Device memory a copy can read from: a [`DeviceBuffer`], a view of one, a
/// [`GraphBuffer`](crate::GraphBuffer) or a [`BorrowedBuffer`](crate::BorrowedBuffer) (sealed).
pub trait AsDeviceSlice<T: DeviceCopy>: sealed::Sealed {
    /// All of it, as a shared view.
    fn as_device_slice(&self) -> DeviceSlice<'_, T>;
}

pub(crate) mod sealed {
    /// Implemented by the buffer types of this crate only (the graph and borrowed buffers add
    /// theirs in their modules).
    pub trait Sealed {}
    impl<T: crate::DeviceCopy> Sealed for crate::DeviceBuffer<T> {}
    impl<T: crate::DeviceCopy> Sealed for super::DeviceSlice<'_, T> {}
    impl<T: crate::DeviceCopy> Sealed for super::DeviceSliceMut<'_, T> {}
}

impl<T: DeviceCopy> AsDeviceSlice<T> for DeviceBuffer<T> {
    fn as_device_slice(&self) -> DeviceSlice<'_, T> {
        self.as_slice()
    }
}

/// Device memory that a collective can write: a [`DeviceBuffer`], an exclusive view of one, a
/// [`ManagedBuffer`](crate::ManagedBuffer) or a [`BorrowedBuffer`](crate::BorrowedBuffer)
/// (sealed).
pub trait AsDeviceSliceMut<T: DeviceCopy>: sealed::Sealed {
    /// All of it, as an exclusive view.
    fn as_device_slice_mut(&mut self) -> DeviceSliceMut<'_, T>;
}

impl<T: DeviceCopy> AsDeviceSliceMut<T> for DeviceBuffer<T> {
    fn as_device_slice_mut(&mut self) -> DeviceSliceMut<'_, T> {
        self.as_mut_slice()
    }
}

impl<T: DeviceCopy> AsDeviceSliceMut<T> for DeviceSliceMut<'_, T> {
    fn as_device_slice_mut(&mut self) -> DeviceSliceMut<'_, T> {
        DeviceSliceMut::new(self.span)
    }
}

impl<T: DeviceCopy> AsDeviceSlice<T> for DeviceSlice<'_, T> {
    fn as_device_slice(&self) -> DeviceSlice<'_, T> {
        *self
    }
}

impl<T: DeviceCopy> AsDeviceSlice<T> for DeviceSliceMut<'_, T> {
    fn as_device_slice(&self) -> DeviceSlice<'_, T> {
        self.as_slice()
    }
}

impl<T: DeviceCopy> DeviceBuffer<T> {
    /// The whole buffer as the span its operations work on.
    pub(crate) fn span(&self) -> Span<'_, T> {
        Span::new(self.device_ptr(), self.len(), self.alloc_ref())
    }

    /// The values `range` (any range of `usize`: `2..6`, `..n`, `..`), as a shared view;
    /// [`Error::OutOfRange`] where the range does not lie inside the buffer (or is reversed).
    pub fn slice(&self, range: impl RangeBounds<usize>) -> Result<DeviceSlice<'_, T>> {
        Ok(DeviceSlice {
            span: self.span().sub(range)?,
        })
    }

    /// The values `range`, as an exclusive view (see [`slice`](DeviceBuffer::slice)).
    pub fn slice_mut(&mut self, range: impl RangeBounds<usize>) -> Result<DeviceSliceMut<'_, T>> {
        Ok(DeviceSliceMut::new(self.span().sub(range)?))
    }

    /// The values before `mid` and from `mid` on, as two shared views; [`Error::OutOfRange`]
    /// past the end.
    pub fn split_at(&self, mid: usize) -> Result<(DeviceSlice<'_, T>, DeviceSlice<'_, T>)> {
        let (a, b) = self.span().split(mid)?;
        Ok((DeviceSlice { span: a }, DeviceSlice { span: b }))
    }

    /// The values before `mid` and from `mid` on, as two exclusive views, to be written apart
    /// (on two streams they are ordered one after the other: see [`DeviceSliceMut`]);
    /// [`Error::OutOfRange`] past the end.
    pub fn split_at_mut(
        &mut self,
        mid: usize,
    ) -> Result<(DeviceSliceMut<'_, T>, DeviceSliceMut<'_, T>)> {
        let (a, b) = self.span().split(mid)?;
        Ok((DeviceSliceMut::new(a), DeviceSliceMut::new(b)))
    }

    /// The whole buffer as a shared view.
    pub fn as_slice(&self) -> DeviceSlice<'_, T> {
        DeviceSlice { span: self.span() }
    }

    /// The whole buffer as an exclusive view.
    pub fn as_mut_slice(&mut self) -> DeviceSliceMut<'_, T> {
        DeviceSliceMut::new(self.span())
    }
}

impl<'a, T: DeviceCopy> DeviceSlice<'a, T> {
    pub(crate) fn span(&self) -> Span<'a, T> {
        self.span
    }

    /// How many values.
    pub fn len(&self) -> usize {
        self.span.len
    }

    /// Whether it holds no values.
    pub fn is_empty(&self) -> bool {
        self.span.len == 0
    }

    /// The size in bytes.
    pub fn byte_len(&self) -> usize {
        self.span.byte_len()
    }

    /// The device address of the first value (for the raw functions and `unsafe` code; work
    /// enqueued with it is not recorded as a use).
    pub fn device_ptr(&self) -> ffi::CUdeviceptr {
        self.span.ptr
    }

    /// The context the memory belongs to.
    pub fn context(&self) -> &'a Context {
        self.span.context()
    }

    /// The values `range` of this view (see [`DeviceBuffer::slice`]).
    pub fn slice(&self, range: impl RangeBounds<usize>) -> Result<DeviceSlice<'a, T>> {
        Ok(DeviceSlice {
            span: self.span.sub(range)?,
        })
    }

    /// This view split at `mid` (see [`DeviceBuffer::split_at`]).
    pub fn split_at(&self, mid: usize) -> Result<(DeviceSlice<'a, T>, DeviceSlice<'a, T>)> {
        let (a, b) = self.span.split(mid)?;
        Ok((DeviceSlice { span: a }, DeviceSlice { span: b }))
    }

    /// This view as a kernel argument that the kernel only reads (see
    /// [`DeviceBuffer::read`]): the kernel receives the view's address.
    pub fn read(&self) -> BufferUse<'a> {
        self.span.buffer_use(Access::Read)
    }
}

impl<'a, T: DeviceCopy> DeviceSliceMut<'a, T> {
    fn new(span: Span<'a, T>) -> Self {
        DeviceSliceMut {
            span,
            _exclusive: PhantomData,
        }
    }

    pub(crate) fn span(&self) -> Span<'a, T> {
        self.span
    }

    /// How many values.
    pub fn len(&self) -> usize {
        self.span.len
    }

    /// Whether it holds no values.
    pub fn is_empty(&self) -> bool {
        self.span.len == 0
    }

    /// The size in bytes.
    pub fn byte_len(&self) -> usize {
        self.span.byte_len()
    }

    /// The device address of the first value (for the raw functions and `unsafe` code; work
    /// enqueued with it is not recorded as a use).
    pub fn device_ptr(&self) -> ffi::CUdeviceptr {
        self.span.ptr
    }

    /// The context the memory belongs to.
    pub fn context(&self) -> &'a Context {
        self.span.context()
    }

    /// This view, shared, for as long as the borrow.
    pub fn as_slice(&self) -> DeviceSlice<'_, T> {
        DeviceSlice { span: self.span }
    }

    /// This view, reborrowed (to pass it on and keep it).
    pub fn reborrow(&mut self) -> DeviceSliceMut<'_, T> {
        DeviceSliceMut::new(self.span)
    }

    /// The values `range` of this view, exclusively (see [`DeviceBuffer::slice`]).
    pub fn slice_mut(&mut self, range: impl RangeBounds<usize>) -> Result<DeviceSliceMut<'_, T>> {
        Ok(DeviceSliceMut::new(self.span.sub(range)?))
    }

    /// This view split at `mid` into two exclusive views (see [`DeviceBuffer::split_at_mut`]).
    pub fn split_at_mut(
        self,
        mid: usize,
    ) -> Result<(DeviceSliceMut<'a, T>, DeviceSliceMut<'a, T>)> {
        let (a, b) = self.span.split(mid)?;
        Ok((DeviceSliceMut::new(a), DeviceSliceMut::new(b)))
    }

    /// This view as a kernel argument that the kernel only reads (see [`DeviceBuffer::read`]).
    pub fn read(&self) -> BufferUse<'_> {
        self.span.buffer_use(Access::Read)
    }

    /// This view as a kernel argument that the kernel writes (see [`DeviceBuffer::write`]): the
    /// kernel receives the view's address; the launch is recorded as a write of the buffer.
    pub fn write(&mut self) -> BufferUse<'_> {
        self.span.buffer_use(Access::Write)
    }

    /// [`write`](DeviceSliceMut::write) for the view's whole borrow, giving the view up.
    pub(crate) fn write_owned(self) -> BufferUse<'a> {
        self.span.buffer_use(Access::Write)
    }
}
