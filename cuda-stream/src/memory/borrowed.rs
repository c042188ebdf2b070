//! [`BorrowedBuffer`]: another library's device memory (a PyTorch tensor, a CuPy array, memory C
//! code allocated) borrowed for a lifetime, with the same use tracking as a [`DeviceBuffer`].

use std::fmt;
use std::marker::PhantomData;
use std::mem::align_of;
use std::ops::Deref;

use crate::base::error::{Error, Result, check, driver_fn};
use crate::base::plain_data::DeviceCopy;
use crate::driver::context::{Context, bind};
use crate::ffi;
use crate::memory::allocation::Allocation;
use crate::memory::buffer::{BufferUse, DeviceBuffer, byte_size};
use crate::stream::view::Stream;

/// `len` values of `T` in device memory that another library owns, borrowed for `'a`: a
/// PyTorch tensor's storage (`tensor.data_ptr()`), a CuPy array's (`a.data.ptr`), memory from C
/// code. It is a [`DeviceBuffer`] for everything that only reads the handle (through `Deref`):
/// [`fill`](DeviceBuffer::fill), [`copy_from`](DeviceBuffer::copy_from), the host and pinned
/// copies, [`read`](DeviceBuffer::read) in a kernel's arguments, and
/// [`write`](BorrowedBuffer::write) here.
///
/// **Ordering.** The owner's work so far on its stream counts as a write: the first use on
/// another stream waits for it. Uses are then ordered among themselves as for any buffer. When
/// the borrow ends (the drop) the owner's stream waits for every use made through it, so the
/// owner's later work on its stream, and its allocator's reuse of the memory, come after ours;
/// the host never waits.
///
/// **Not in graphs.** A graph could outlive the borrow, so work on a borrowed buffer is refused
/// on a capturing stream ([`Error::Refused`]); capture raw work on
/// [`device_ptr`](DeviceBuffer::device_ptr) in `unsafe` code instead.
///
/// ```no_run
/// use cuda_stream::{BorrowedBuffer, Context, Stream};
///
/// # fn f(tensor_ptr: u64, numel: usize, torch_stream: cuda_stream::ffi::CUstream) -> cuda_stream::Result<()> {
/// let ctx = Context::primary(0)?;
/// let tensor_owner = (); // whatever keeps the tensor alive, borrowed for 'a
/// // SAFETY: the tensor holds `numel` f32 values, lives as long as `tensor_owner`, and is
/// // used meanwhile only on its stream; the borrow is dropped, not leaked.
/// let torch = unsafe { Stream::borrow_raw(torch_stream, &tensor_owner)? };
/// let x = unsafe { BorrowedBuffer::<f32>::from_raw(&ctx, tensor_ptr, numel, torch, &tensor_owner)? };
/// let ours = ctx.new_stream()?;
/// let host = x.to_vec(&ours)?; // waits for the tensor's producer on the torch stream first
/// drop(x);                     // the torch stream waits for our read
/// # Ok(()) }
/// ```
pub struct BorrowedBuffer<'a, T: DeviceCopy> {
    buf: DeviceBuffer<T>,
    _owner: PhantomData<&'a ()>,
}

impl<T: DeviceCopy> fmt::Debug for BorrowedBuffer<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BorrowedBuffer")
            .field("ptr", &format_args!("{:#x}", self.buf.device_ptr()))
            .field("len", &self.buf.len())
            .finish()
    }
}

impl<'a, T: DeviceCopy> BorrowedBuffer<'a, T> {
    /// Borrows `len` values of `T` at device address `ptr`, memory of `ctx` that `owner` keeps
    /// allocated and whose work runs on `stream` (the owner's stream, of `ctx`). Checked first:
    /// the stream's context, the alignment of `ptr` for `T`, the size, and that the driver knows
    /// `[ptr, ptr + len * size_of::<T>())` as one allocation of `ctx` (`cuMemGetAddressRange`,
    /// which rejects addresses it does not know); 0 with a zero length borrows nothing.
    ///
    /// # Safety
    ///
    /// - The memory stays allocated for all of `'a` (as long as `owner` is borrowed), and the
    ///   stream stays valid as long as the borrow exists;
    /// - while the borrow exists, nothing else uses the memory except work enqueued on
    ///   `stream`, ordered by the caller against the host's and other libraries' use;
    /// - the borrow is dropped (not leaked with `mem::forget`): its drop makes `stream` wait for
    ///   the work enqueued on the memory through it.
    pub unsafe fn from_raw<O: ?Sized>(
        ctx: &Context,
        ptr: ffi::CUdeviceptr,
        len: usize,
        stream: Stream<'a>,
        owner: &'a O,
    ) -> Result<BorrowedBuffer<'a, T>> {
        let _ = owner;
        if stream.context_raw() != ctx.raw() {
            return Err(Error::ContextMismatch { what: "the stream" });
        }
        let bytes = byte_size::<T>(len)?;
        if bytes == 0 {
            let buf = DeviceBuffer::from_alloc(Allocation::borrow(ctx, 0, stream.handle())?, 0);
            return Ok(BorrowedBuffer {
                buf,
                _owner: PhantomData,
            });
        }
        if ptr == 0 || ptr % align_of::<T>() as u64 != 0 {
            return Err(Error::InvalidArgument {
                reason: format!(
                    "device address {ptr:#x} is not aligned for values of {} bytes",
                    align_of::<T>()
                ),
            });
        }
        check_range(ctx, ptr, bytes)?;
        let alloc = Allocation::borrow(ctx, ptr, stream.handle())?;
        Ok(BorrowedBuffer {
            buf: DeviceBuffer::from_alloc(alloc, len),
            _owner: PhantomData,
        })
    }

    /// This buffer as a kernel argument that the kernel writes: see
    /// [`DeviceBuffer::write`].
    pub fn write(&mut self) -> BufferUse<'_> {
        self.buf.write()
    }

    /// Ends the borrow as the drop does (the owner's stream waits for every use made through
    /// it), returning the driver's answer, which a drop can only ignore: after an error the
    /// owner's later work is not ordered after ours, so synchronise before the owner reuses the
    /// memory. Inside a host function no CUDA call is made: the wait is queued for an ordinary
    /// thread, and the answer is [`Error::InHostFunction`].
    pub fn release(self) -> Result<()> {
        self.buf.free()
    }
}

impl<T: DeviceCopy> Deref for BorrowedBuffer<'_, T> {
    type Target = DeviceBuffer<T>;

    fn deref(&self) -> &DeviceBuffer<T> {
        &self.buf
    }
}

/// Checks with the driver that `[ptr, ptr + bytes)` lies in one allocation of `ctx`
/// (`cuMemGetAddressRange` with `ctx` current): an address the driver does not know is its
/// error, a range past the allocation's end [`Error::InvalidArgument`].
fn check_range(ctx: &Context, ptr: ffi::CUdeviceptr, bytes: usize) -> Result<()> {
    let _bound = bind(ctx.raw())?;
    let f = driver_fn!(cuMemGetAddressRange);
    let (mut base, mut size) = (0, 0);
    // SAFETY: both out-pointers are valid; the driver looks the address up (an unknown one is
    // `CUDA_ERROR_NOT_FOUND` or `CUDA_ERROR_INVALID_VALUE`).
    let rc = unsafe { f(&mut base, &mut size, ptr) };
    check(rc, "cuMemGetAddressRange")?;
    let end = base.saturating_add(size as u64);
    if ptr.saturating_add(bytes as u64) > end {
        return Err(Error::InvalidArgument {
            reason: format!(
                "{bytes} bytes at {ptr:#x} run past the end of the allocation at {base:#x} \
                 ({size} bytes)"
            ),
        });
    }
    Ok(())
}

impl<T: DeviceCopy> crate::memory::slice::sealed::Sealed for BorrowedBuffer<'_, T> {}

impl<T: DeviceCopy> crate::memory::slice::AsDeviceSlice<T> for BorrowedBuffer<'_, T> {
    fn as_device_slice(&self) -> crate::memory::slice::DeviceSlice<'_, T> {
        self.as_slice()
    }
}

impl<T: DeviceCopy> crate::memory::slice::AsDeviceSliceMut<T> for BorrowedBuffer<'_, T> {
    fn as_device_slice_mut(&mut self) -> crate::memory::slice::DeviceSliceMut<'_, T> {
        self.buf.as_mut_slice()
    }
}
