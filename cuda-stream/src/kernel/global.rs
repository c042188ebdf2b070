//! A module's global variables (`__device__` and `__constant__` in CUDA C++, `.global` and
//! `.const` in PTX) as device buffers: [`Module::global`].

use std::mem::{align_of, size_of};
use std::sync::Arc;

use crate::base::error::{Error, Result, driver_fn};
use crate::base::plain_data::DeviceCopy;
use crate::driver::context::bind;
use crate::ffi;
use crate::kernel::module::Module;
use crate::memory::allocation::Allocation;
use crate::memory::buffer::DeviceBuffer;

impl Module {
    /// The module's global variable `name` (`cuModuleGetGlobal`), as a [`DeviceBuffer`] of its
    /// values: a `__constant__ float coeffs[16]` is `global::<f32>("coeffs")` with 16 values, a
    /// `__device__ unsigned counter` is `global::<u32>("counter")` with one. Checked against the
    /// symbol: its size must be a whole, non-zero number of `T` and its address aligned for `T`
    /// ([`Error::InvalidArgument`] otherwise); a name the module does not define is
    /// [`Error::GlobalNotFound`]. (C++ globals go by their mangled names unless declared
    /// `extern "C"`; NVRTC's name expressions give them.)
    ///
    /// The buffer is a buffer like any other: filled, copied to and from (the host, page-locked
    /// memory, other buffers, views), passed to kernels, and its uses ordered and tracked. Every
    /// call for the same name shares one tracker, so two buffers of one variable are ordered as
    /// one. It does not borrow the module: the memory stays the module's, and the module stays
    /// loaded while a buffer of one of its variables, or a graph that captured work on one,
    /// exists (a graph's replays can reach it). Its `free` and drop free nothing; `into_raw`
    /// refuses it ([`Error::Refused`]), and [`is_held_by_graphs`](DeviceBuffer::is_held_by_graphs)
    /// is always `true` while the module exists (the module holds it too).
    ///
    /// So constant memory is filled with a safe copy, ordered before the kernels that read it:
    ///
    /// ```no_run
    /// use cuda_stream::{Context, Module};
    ///
    /// # const PTX: &str = "";
    /// let ctx = Context::primary(0)?;
    /// let stream = ctx.new_stream()?;
    /// let module = Module::from_ptx(&ctx, PTX)?; // declares `.const .align 4 .b8 coeffs[64]`
    /// let coeffs = module.global::<f32>("coeffs")?;
    /// assert_eq!(coeffs.len(), 16);
    /// coeffs.copy_from_host(&stream, &[0.5f32; 16])?;
    /// // ... launches on `stream` (or any stream: they wait for the copy) read `coeffs` ...
    /// assert_eq!(coeffs.to_vec(&stream)?, [0.5f32; 16]);
    /// # Ok::<(), cuda_stream::Error>(())
    /// ```
    pub fn global<T: DeviceCopy>(&self, name: &str) -> Result<DeviceBuffer<T>> {
        let (alloc, bytes) = self.global_alloc(name)?;
        let size = size_of::<T>();
        let bad = |why: String| {
            Err(Error::InvalidArgument {
                reason: format!("global variable `{name}` ({bytes} bytes): {why}"),
            })
        };
        if size == 0 || bytes % size != 0 || bytes == 0 {
            return bad(format!("not a whole number of {size}-byte values"));
        }
        if alloc.ptr % align_of::<T>() as u64 != 0 {
            return bad(format!(
                "its address {:#x} is not aligned for values of {} bytes",
                alloc.ptr,
                align_of::<T>()
            ));
        }
        Ok(DeviceBuffer::from_shared(alloc, bytes / size))
    }

    /// The allocation of global `name` and its size in bytes: the one handed out before, or a
    /// new one (`cuModuleGetGlobal`) that holds the loaded module.
    fn global_alloc(&self, name: &str) -> Result<(Arc<Allocation>, usize)> {
        let mut globals = self.globals.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((_, alloc, bytes)) = globals.iter().find(|(n, _, _)| n == name) {
            return Ok((alloc.clone(), *bytes));
        }
        let c_name = std::ffi::CString::new(name).map_err(|_| Error::InvalidArgument {
            reason: format!("global variable name {name:?} has a NUL byte"),
        })?;
        let f = driver_fn!(cuModuleGetGlobal);
        let (mut ptr, mut bytes): (ffi::CUdeviceptr, usize) = (0, 0);
        {
            let _bound = bind(self.context().raw())?;
            // SAFETY: both out-pointers are valid; the module is loaded (borrowed); the name is
            // NUL-terminated.
            let rc = unsafe { f(&mut ptr, &mut bytes, self.raw(), c_name.as_ptr()) };
            match rc {
                ffi::CUresult::CUDA_SUCCESS => {}
                ffi::CUresult::CUDA_ERROR_NOT_FOUND => {
                    return Err(Error::GlobalNotFound {
                        name: name.to_string(),
                    });
                }
                rc => return Err(Error::driver("cuModuleGetGlobal", rc)),
            }
        }
        if ptr == 0 {
            return Err(Error::NullHandle {
                what: "global variable",
            });
        }
        let owner: Arc<dyn std::any::Any + Send + Sync> = self.loaded.clone();
        let alloc = Arc::new(Allocation::owned_by(self.context(), ptr, owner));
        globals.push((name.to_string(), alloc.clone(), bytes));
        Ok((alloc, bytes))
    }
}
