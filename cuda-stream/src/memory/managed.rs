//! [`ManagedBuffer`]: managed memory (`cuMemAllocManaged`), one address for the host and the
//! device, used on streams like a [`DeviceBuffer`] and read and written by the host once its
//! recorded uses are done.

use std::fmt;
use std::mem::size_of;
use std::ops::Deref;

use crate::base::error::{Error, Result, check, driver_fn, lookup};
use crate::base::plain_data::DeviceCopy;
use crate::driver::context::{Context, bind};
use crate::driver::device::Device;
use crate::driver::facts::DeviceAttribute;
use crate::ffi;
use crate::memory::allocation::{Allocation, poll_pending_frees};
use crate::memory::buffer::{BufferUse, DeviceBuffer, byte_size};
use crate::memory::slice::DeviceSliceMut;
use crate::memory::use_tracking::Access;
use crate::stream::view::{Enqueue, bind_for_copy};

/// Where managed memory should live or be reachable from, for [`ManagedBuffer::advise`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MemLocation {
    /// A device's memory.
    Device(Device),
    /// The host's memory.
    Host,
}

/// A hint to the driver about managed memory ([`ManagedBuffer::advise`], `cuMemAdvise`): it
/// changes where pages live and how faults are served, never what the memory holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MemAdvice {
    /// Mostly read: devices that read it get read-only copies of its pages
    /// (`CU_MEM_ADVISE_SET_READ_MOSTLY`); `false` undoes it.
    ReadMostly(bool),
    /// Pages should live here (`CU_MEM_ADVISE_SET_PREFERRED_LOCATION`); `None` undoes it.
    PreferredLocation(Option<MemLocation>),
    /// This location accesses it, so keep it mapped there (`CU_MEM_ADVISE_SET_ACCESSED_BY`,
    /// `false`: `UNSET`).
    AccessedBy(MemLocation, bool),
}

/// `len` values of `T` in managed memory (`cuMemAllocManaged`, attached globally): one address
/// that both the host and every device of the context reach, pages migrating on demand. On the
/// device side it is a [`DeviceBuffer`] (through `Deref`: fills, every copy, views, kernel
/// arguments through [`read`](DeviceBuffer::read), [`write`](ManagedBuffer::write) and
/// [`as_device_mut`](ManagedBuffer::as_device_mut)), its uses ordered and tracked as any buffer's.
///
/// **Host access is safe.** [`as_slice`](ManagedBuffer::as_slice) and
/// [`as_mut_slice`](ManagedBuffer::as_mut_slice) first wait on the host for every recorded use
/// (the device work that may touch it), and take the buffer by `&mut`, so no device work can be
/// enqueued on it through this value while the slice lives (device work goes through `&self`).
/// A graph never holds managed memory (work on it is refused in captures, [`Error::Refused`]),
/// so no replay can touch it behind a slice's back. Host access needs a device that lets the
/// host and the device touch managed memory at the same time
/// (`CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS`: Linux with a Pascal or newer GPU); on
/// others any host access while any kernel runs faults, which no borrow can rule out, so
/// [`zeroed`](ManagedBuffer::zeroed) refuses them ([`Error::Refused`]). For the same reason
/// no stream attachment (`cuStreamAttachMemAsync`) is offered: it would make host access safe
/// only while nothing at all runs on the attached stream, which other code can break.
///
/// Kernels reach it by address as well: a raw pointer in unsafe code is the caller's to order,
/// as for any buffer.
///
/// ```no_run
/// use cuda_stream::{Context, ManagedBuffer, MemAdvice};
///
/// let ctx = Context::primary(0)?;
/// let stream = ctx.new_stream()?;
/// let mut m = ManagedBuffer::<u32>::from_slice(&ctx, &[1, 2, 3, 4])?;
/// m.prefetch_to_device(&stream)?;           // pages to the GPU ahead of the kernels
/// m.fill(&stream, 7)?;                      // device work, as on any buffer
/// assert_eq!(m.as_slice()?, [7, 7, 7, 7]);  // waits for the fill first
/// m.advise(MemAdvice::ReadMostly(true))?;
/// # Ok::<(), cuda_stream::Error>(())
/// ```
pub struct ManagedBuffer<T: DeviceCopy> {
    buf: DeviceBuffer<T>,
}

impl<T: DeviceCopy> fmt::Debug for ManagedBuffer<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ManagedBuffer")
            .field("ptr", &format_args!("{:#x}", self.buf.device_ptr()))
            .field("len", &self.buf.len())
            .finish()
    }
}

impl<T: DeviceCopy> ManagedBuffer<T> {
    /// `len` zeroed values of managed memory (`cuMemAllocManaged` with `CU_MEM_ATTACH_GLOBAL`,
    /// `ctx` current for the call), zeroed by the host. [`Error::Refused`] where the device
    /// has no managed memory or does not let the host touch it while kernels run (see the type's
    /// docs).
    pub fn zeroed(ctx: &Context, len: usize) -> Result<ManagedBuffer<T>> {
        let device = ctx.device();
        let managed = device.get_attribute(DeviceAttribute::ManagedMemory)? != 0;
        let concurrent = device.get_attribute(DeviceAttribute::ConcurrentManagedAccess)? != 0;
        if !managed || !concurrent {
            return Err(Error::Refused {
                call: "cuMemAllocManaged",
                reason: "managed memory needs a device where the host and the device may touch \
                         it at the same time (CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS): \
                         elsewhere host access while any kernel runs faults",
            });
        }
        let bytes = byte_size::<T>(len)?;
        if bytes == 0 {
            return Ok(ManagedBuffer {
                buf: DeviceBuffer::from_alloc(Allocation::managed(ctx, 0), 0),
            });
        }
        poll_pending_frees();
        let f = driver_fn!(cuMemAllocManaged);
        let mut ptr = 0;
        {
            let _bound = bind(ctx.raw())?;
            // SAFETY: `ptr` is a valid out-pointer; the context is current.
            let rc = unsafe {
                f(
                    &mut ptr,
                    bytes,
                    ffi::CUmemAttach_flags::CU_MEM_ATTACH_GLOBAL.0,
                )
            };
            check(rc, "cuMemAllocManaged")?;
        }
        if ptr == 0 {
            return Err(Error::NullHandle {
                what: "managed allocation",
            });
        }
        // SAFETY: `bytes` bytes of managed memory just allocated, which no device work touches
        // yet, on a device where the host may touch managed memory while kernels run; all
        // zeros is a valid `T` (`DeviceCopy` accepts any bytes).
        unsafe { std::ptr::write_bytes(ptr as usize as *mut u8, 0, bytes) };
        Ok(ManagedBuffer {
            buf: DeviceBuffer::from_alloc(Allocation::managed(ctx, ptr), len),
        })
    }

    /// Managed memory holding a copy of `data` (written by the host).
    pub fn from_slice(ctx: &Context, data: &[T]) -> Result<ManagedBuffer<T>> {
        let mut m = ManagedBuffer::zeroed(ctx, data.len())?;
        m.as_mut_slice()?.copy_from_slice(data);
        Ok(m)
    }

    /// The values, read by the host once every recorded use has completed (waits on the host).
    /// `&mut self`: no device work can be enqueued on the buffer while the slice lives.
    /// [`Error::Busy`] where a graph holds the buffer (never, since graphs refuse it; kept for
    /// the rule's sake).
    pub fn as_slice(&mut self) -> Result<&[T]> {
        self.wait_for_device()?;
        // SAFETY: `len` values of the buffer's live managed memory, initialised (zeroed or
        // written); no device work on it is pending (waited for) and none can be enqueued
        // through this value while the slice borrows it; the device allows host access while
        // other kernels run (checked at allocation).
        Ok(unsafe { std::slice::from_raw_parts(self.host_ptr(), self.buf.len()) })
    }

    /// The values for writing by the host, once every recorded use has completed (waits on the
    /// host). Device work after the slice ends sees what the host wrote.
    pub fn as_mut_slice(&mut self) -> Result<&mut [T]> {
        self.wait_for_device()?;
        // SAFETY: as in `as_slice`; `&mut self` is exclusive.
        Ok(unsafe { std::slice::from_raw_parts_mut(self.host_ptr(), self.buf.len()) })
    }

    fn host_ptr(&self) -> *mut T {
        if self.buf.is_empty() {
            std::ptr::NonNull::dangling().as_ptr()
        } else {
            self.buf.device_ptr() as usize as *mut T
        }
    }

    fn wait_for_device(&mut self) -> Result<()> {
        match self.buf.alloc_mut() {
            Some(alloc) => alloc.wait_for_uses(),
            None => Err(Error::Busy {
                what: "managed memory held by a graph",
            }),
        }
    }

    /// This buffer as a kernel argument that the kernel writes: see [`DeviceBuffer::write`].
    pub fn write(&mut self) -> BufferUse<'_> {
        self.buf.write()
    }

    /// All of it as an exclusive view: what a typed kernel takes for a buffer it writes, and
    /// what [`DeviceSliceMut`]'s copies write into.
    pub fn as_device_mut(&mut self) -> DeviceSliceMut<'_, T> {
        self.buf.as_mut_slice()
    }

    /// Migrates the pages to the stream's device ahead of the work that uses them there
    /// (`cuMemPrefetchAsync`, its CUDA 12.2 form where the driver has it), in stream order;
    /// recorded as a use on the stream (host access waits for it). Refused on a capturing
    /// stream ([`Error::Refused`], as any work on managed memory).
    pub fn prefetch_to_device(&self, stream: &impl Enqueue) -> Result<()> {
        let (raw, ctx) = stream.enqueue_handle();
        let device = self.context().device();
        if ctx != self.context().raw() {
            // The stream's own device: only a stream of the memory's context names it here.
            return Err(Error::ContextMismatch { what: "the buffer" });
        }
        self.prefetch(stream, MemLocation::Device(device), raw)
    }

    /// Migrates the pages to the host ahead of host access (`cuMemPrefetchAsync` to the CPU),
    /// in stream order; recorded as a use on the stream.
    pub fn prefetch_to_host(&self, stream: &impl Enqueue) -> Result<()> {
        let (raw, ctx) = stream.enqueue_handle();
        if ctx != self.context().raw() {
            return Err(Error::ContextMismatch { what: "the buffer" });
        }
        self.prefetch(stream, MemLocation::Host, raw)
    }

    fn prefetch(&self, stream: &impl Enqueue, to: MemLocation, raw: ffi::CUstream) -> Result<()> {
        let (_, stream_ctx) = stream.enqueue_handle();
        let _bound = bind_for_copy(raw, stream_ctx)?;
        if crate::driver::capture_query::is_capturing(raw)? {
            return Err(Error::Refused {
                call: "cuMemPrefetchAsync",
                reason: "managed memory is not used in graphs",
            });
        }
        let bytes = self.buf.byte_len();
        if bytes == 0 {
            return Ok(());
        }
        let ptr = self.buf.device_ptr();
        self.buf.alloc_ref().uses.around(raw, Access::Read, || {
            match lookup("cuMemPrefetchAsync", ffi::fns::cuMemPrefetchAsync) {
                Ok(f) => {
                    // SAFETY: `bytes` bytes of live managed memory; the stream is live (borrowed)
                    // and of its context.
                    check(
                        unsafe { f(ptr, bytes, location(to), 0, raw) },
                        "cuMemPrefetchAsync",
                    )
                }
                Err(Error::Unsupported { .. }) => {
                    let f = lookup("cuMemPrefetchAsync", ffi::fns::cuMemPrefetchAsync_v8000)?;
                    // SAFETY: as above; the CUDA 8.0 form names the device (or the CPU, -1).
                    check(
                        unsafe { f(ptr, bytes, ordinal(to), raw) },
                        "cuMemPrefetchAsync",
                    )
                }
                Err(e) => Err(e),
            }
        })
    }

    /// Gives the driver a hint about the memory (`cuMemAdvise`, its CUDA 12.2 form where the
    /// driver has it): see [`MemAdvice`]. Not stream-ordered, and no use: it changes where pages
    /// live, never what they hold.
    pub fn advise(&self, advice: MemAdvice) -> Result<()> {
        use ffi::CUmem_advise as A;
        let bytes = self.buf.byte_len();
        if bytes == 0 {
            return Ok(());
        }
        let (code, at) = match advice {
            MemAdvice::ReadMostly(true) => (A::CU_MEM_ADVISE_SET_READ_MOSTLY, MemLocation::Host),
            MemAdvice::ReadMostly(false) => (A::CU_MEM_ADVISE_UNSET_READ_MOSTLY, MemLocation::Host),
            MemAdvice::PreferredLocation(Some(at)) => (A::CU_MEM_ADVISE_SET_PREFERRED_LOCATION, at),
            MemAdvice::PreferredLocation(None) => {
                (A::CU_MEM_ADVISE_UNSET_PREFERRED_LOCATION, MemLocation::Host)
            }
            MemAdvice::AccessedBy(at, true) => (A::CU_MEM_ADVISE_SET_ACCESSED_BY, at),
            MemAdvice::AccessedBy(at, false) => (A::CU_MEM_ADVISE_UNSET_ACCESSED_BY, at),
        };
        let ptr = self.buf.device_ptr();
        let _bound = bind(self.context().raw())?;
        match lookup("cuMemAdvise", ffi::fns::cuMemAdvise) {
            Ok(f) => {
                // SAFETY: `bytes` bytes of live managed memory; a location by value.
                check(unsafe { f(ptr, bytes, code, location(at)) }, "cuMemAdvise")
            }
            Err(Error::Unsupported { .. }) => {
                let f = lookup("cuMemAdvise", ffi::fns::cuMemAdvise_v8000)?;
                // SAFETY: as above; the CUDA 8.0 form names the device (or the CPU, -1).
                check(unsafe { f(ptr, bytes, code, ordinal(at)) }, "cuMemAdvise")
            }
            Err(e) => Err(e),
        }
    }

    /// The memory's size in bytes.
    pub fn byte_len(&self) -> usize {
        self.buf.len() * size_of::<T>()
    }
}

/// `at` as the driver's `CUmemLocation` (the CUDA 12.2 forms).
fn location(at: MemLocation) -> ffi::CUmemLocation {
    match at {
        MemLocation::Device(d) => ffi::CUmemLocation {
            type_: ffi::CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE,
            id: d.raw(),
        },
        MemLocation::Host => ffi::CUmemLocation {
            type_: ffi::CUmemLocationType::CU_MEM_LOCATION_TYPE_HOST,
            id: 0,
        },
    }
}

/// `at` as a device ordinal, the CPU as `CU_DEVICE_CPU` (-1) (the CUDA 8.0 forms).
fn ordinal(at: MemLocation) -> ffi::CUdevice {
    match at {
        MemLocation::Device(d) => d.raw(),
        MemLocation::Host => -1,
    }
}

impl<T: DeviceCopy> Deref for ManagedBuffer<T> {
    type Target = DeviceBuffer<T>;

    fn deref(&self) -> &DeviceBuffer<T> {
        &self.buf
    }
}

impl<T: DeviceCopy> crate::memory::slice::sealed::Sealed for ManagedBuffer<T> {}

impl<T: DeviceCopy> crate::memory::slice::AsDeviceSlice<T> for ManagedBuffer<T> {
    fn as_device_slice(&self) -> crate::memory::slice::DeviceSlice<'_, T> {
        self.as_slice_dev()
    }
}

impl<T: DeviceCopy> ManagedBuffer<T> {
    fn as_slice_dev(&self) -> crate::memory::slice::DeviceSlice<'_, T> {
        self.buf.as_slice()
    }
}

impl<T: DeviceCopy> crate::memory::slice::AsDeviceSliceMut<T> for ManagedBuffer<T> {
    fn as_device_slice_mut(&mut self) -> DeviceSliceMut<'_, T> {
        self.as_device_mut()
    }
}
