//! Typed kernels: [`Function::typed`] declares a kernel's argument tuple once, checks it against
//! the kernel's parameters, and gives a [`TypedKernel`] whose launches take the values
//! themselves (scalars, `&DeviceBuffer` read, `&mut DeviceBuffer` written).

use std::fmt;
use std::marker::PhantomData;

use crate::base::error::{Error, Result};
use crate::base::params::{check_args, param_size};
use crate::base::plain_data::{ArgKind, DeviceCopy};
use crate::kernel::config::LaunchConfig;
use crate::kernel::launch::{AsKernelArg, KernelArg};
use crate::kernel::module::Function;
use crate::memory::borrowed::BorrowedBuffer;
use crate::memory::buffer::{BufferUse, DeviceBuffer};
use crate::memory::graph_buffer::GraphBuffer;
use crate::memory::managed::ManagedBuffer;
use crate::memory::slice::{DeviceSlice, DeviceSliceMut};
use crate::stream::view::Enqueue;

/// One parameter type of a typed kernel's signature: its size and kind, which
/// [`Function::typed`] checks against the kernel's parameter. Implemented for every
/// [`DeviceCopy`] value (passed by value), `&DeviceBuffer<T>` (a buffer the kernel reads) and
/// `&mut DeviceBuffer<T>` (a buffer the kernel writes). What a launch takes for it is any
/// [`KernelArgFor`] it. A zero-sized `DeviceCopy` type (`[u64; 0]`, an empty struct) has no
/// bytes for the kernel to read: a signature naming one does not compile (`cargo build`
/// refuses it; `cargo check`, which stops before code generation, does not see it).
///
/// # Safety
///
/// [`SIZE`](KernelParam::SIZE) and [`KIND`](KernelParam::KIND) describe what every
/// [`KernelArgFor`] this parameter hands the kernel: a launch trusts them once they were checked
/// against the kernel's parameters. `SIZE` is not 0.
pub unsafe trait KernelParam {
    /// The size of the value the kernel receives, in bytes.
    const SIZE: u32;
    /// What the value is.
    const KIND: ArgKind;
}

// SAFETY: the value itself is passed: `SIZE` and `KIND` are its type's.
unsafe impl<T: DeviceCopy> KernelParam for T {
    const SIZE: u32 = param_size::<T>();
    const KIND: ArgKind = T::KIND;
}

// SAFETY: a buffer is passed as its `CUdeviceptr` (a pointer).
unsafe impl<T: DeviceCopy> KernelParam for &DeviceBuffer<T> {
    const SIZE: u32 = param_size::<crate::ffi::CUdeviceptr>();
    const KIND: ArgKind = ArgKind::Pointer;
}

// SAFETY: a buffer is passed as its `CUdeviceptr` (a pointer).
unsafe impl<T: DeviceCopy> KernelParam for &mut DeviceBuffer<T> {
    const SIZE: u32 = param_size::<crate::ffi::CUdeviceptr>();
    const KIND: ArgKind = ArgKind::Pointer;
}

/// A value a launch takes for a parameter declared as `P`: a [`DeviceCopy`] value for itself,
/// `&DeviceBuffer<T>` for `&DeviceBuffer<T>` (recorded as a read) and `&mut DeviceBuffer<T>` for
/// `&mut DeviceBuffer<T>` (recorded as a write), each with a lifetime of its own; a view of a
/// buffer for either ([`DeviceSlice`], or `&DeviceSliceMut`, for a read; a [`DeviceSliceMut`] or
/// `&mut` one for a write: the kernel receives the view's address). Another buffer
/// type (one that borrows another library's memory, say) implements it for the same parameter
/// types, so that a kernel declared once takes either.
///
/// # Safety
///
/// [`hold`](KernelArgFor::hold)'s result hands the kernel a value of `P`'s
/// [`SIZE`](KernelParam::SIZE) and [`KIND`](KernelParam::KIND) through [`AsKernelArg`]; for a
/// buffer, a [`BufferUse`] whose access is at least what `P` says (a write for `&mut`), so the
/// launch orders and records the use.
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot be passed for a kernel parameter declared as `{P}`",
    label = "not an argument for `{P}`",
    note = "a typed kernel takes a `DeviceCopy` value for itself, `&DeviceBuffer<T>` or a `DeviceSlice<T>` for a buffer it reads, and `&mut DeviceBuffer<T>` or a `DeviceSliceMut<T>` for one it writes"
)]
pub unsafe trait KernelArgFor<P: KernelParam> {
    /// What the launch holds while it is made: the value the kernel receives.
    type Held: AsKernelArg;
    /// The value for the launch.
    fn hold(self) -> Self::Held;
}

// SAFETY: the value itself, of the parameter's type.
unsafe impl<T: DeviceCopy> KernelArgFor<T> for T {
    type Held = T;
    #[inline(always)]
    fn hold(self) -> T {
        self
    }
}

// SAFETY: the buffer's address, recorded as a read.
unsafe impl<'a, T: DeviceCopy> KernelArgFor<&DeviceBuffer<T>> for &'a DeviceBuffer<T> {
    type Held = BufferUse<'a>;
    #[inline(always)]
    fn hold(self) -> BufferUse<'a> {
        self.read()
    }
}

// SAFETY: the buffer's address, recorded as a write.
unsafe impl<'a, T: DeviceCopy> KernelArgFor<&mut DeviceBuffer<T>> for &'a mut DeviceBuffer<T> {
    type Held = BufferUse<'a>;
    #[inline(always)]
    fn hold(self) -> BufferUse<'a> {
        self.write()
    }
}

// SAFETY: the view's address, recorded as a read of its buffer.
unsafe impl<'a, T: DeviceCopy> KernelArgFor<&DeviceBuffer<T>> for DeviceSlice<'a, T> {
    type Held = BufferUse<'a>;
    #[inline(always)]
    fn hold(self) -> BufferUse<'a> {
        self.read()
    }
}

// SAFETY: as above, for an exclusive view lent for reading.
unsafe impl<'a, T: DeviceCopy> KernelArgFor<&DeviceBuffer<T>> for &'a DeviceSliceMut<'_, T> {
    type Held = BufferUse<'a>;
    #[inline(always)]
    fn hold(self) -> BufferUse<'a> {
        self.read()
    }
}

// SAFETY: the view's address, recorded as a write of its buffer.
unsafe impl<'a, T: DeviceCopy> KernelArgFor<&mut DeviceBuffer<T>>
    for &'a mut DeviceSliceMut<'_, T>
{
    type Held = BufferUse<'a>;
    #[inline(always)]
    fn hold(self) -> BufferUse<'a> {
        self.write()
    }
}

// SAFETY: as above, for a view given up to the launch.
unsafe impl<'a, T: DeviceCopy> KernelArgFor<&mut DeviceBuffer<T>> for DeviceSliceMut<'a, T> {
    type Held = BufferUse<'a>;
    #[inline(always)]
    fn hold(self) -> BufferUse<'a> {
        self.write_owned()
    }
}

// SAFETY: the borrowed memory's address, recorded as a read (with the borrow's tracking).
unsafe impl<'a, T: DeviceCopy> KernelArgFor<&DeviceBuffer<T>> for &'a BorrowedBuffer<'_, T> {
    type Held = BufferUse<'a>;
    #[inline(always)]
    fn hold(self) -> BufferUse<'a> {
        self.read()
    }
}

// SAFETY: the borrowed memory's address, recorded as a write.
unsafe impl<'a, T: DeviceCopy> KernelArgFor<&mut DeviceBuffer<T>>
    for &'a mut BorrowedBuffer<'_, T>
{
    type Held = BufferUse<'a>;
    #[inline(always)]
    fn hold(self) -> BufferUse<'a> {
        self.write()
    }
}

// SAFETY: the managed memory's address, recorded as a read.
unsafe impl<'a, T: DeviceCopy> KernelArgFor<&DeviceBuffer<T>> for &'a ManagedBuffer<T> {
    type Held = BufferUse<'a>;
    #[inline(always)]
    fn hold(self) -> BufferUse<'a> {
        self.read()
    }
}

// SAFETY: the managed memory's address, recorded as a write.
unsafe impl<'a, T: DeviceCopy> KernelArgFor<&mut DeviceBuffer<T>> for &'a mut ManagedBuffer<T> {
    type Held = BufferUse<'a>;
    #[inline(always)]
    fn hold(self) -> BufferUse<'a> {
        self.write()
    }
}

// SAFETY: the graph allocation's address, recorded as a read inside its capture.
unsafe impl<'a, T: DeviceCopy> KernelArgFor<&DeviceBuffer<T>> for &'a GraphBuffer<'_, T> {
    type Held = BufferUse<'a>;
    #[inline(always)]
    fn hold(self) -> BufferUse<'a> {
        self.read()
    }
}

// SAFETY: the graph allocation's address, recorded as a write inside its capture.
unsafe impl<'a, T: DeviceCopy> KernelArgFor<&mut DeviceBuffer<T>> for &'a mut GraphBuffer<'_, T> {
    type Held = BufferUse<'a>;
    #[inline(always)]
    fn hold(self) -> BufferUse<'a> {
        self.write()
    }
}

/// A kernel's argument tuple, `(P0, P1, ...)` of up to 16 [`KernelParam`]s: what
/// [`Function::typed`] takes. `&DeviceBuffer<T>` and `&mut DeviceBuffer<T>` may be written with
/// any lifetime (`typed::<(u32, &DeviceBuffer<f32>)>()` infers one, a struct field may say
/// `'static`): a launch's buffers have lifetimes of their own.
///
/// # Safety
///
/// [`layout`](KernelSignature::layout) lists each element's `SIZE` and `KIND`, in order.
pub unsafe trait KernelSignature {
    /// Each parameter's size and kind, in order.
    fn layout() -> Vec<(u32, ArgKind)>;
}

/// The values a launch of a kernel declared as `S` takes: a tuple of one [`KernelArgFor`] each
/// parameter, in order.
///
/// # Safety
///
/// [`with_args`](KernelArgs::with_args) hands `f` one argument per element of `S`, in order,
/// each from the element's [`KernelArgFor::hold`].
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not an argument tuple for a kernel declared as `{S}`",
    label = "not the kernel's arguments",
    note = "pass one value per parameter, in order: a `DeviceCopy` value for itself, `&DeviceBuffer<T>` for a buffer the kernel reads, `&mut DeviceBuffer<T>` for one it writes"
)]
pub unsafe trait KernelArgs<S: KernelSignature> {
    /// Calls `f` with the kernel arguments of `self`.
    fn with_args<R>(self, f: impl FnOnce(&[KernelArg<'_>]) -> R) -> R;
}

macro_rules! signature {
    ($($P:ident $V:ident $v:ident),*) => {
        // SAFETY: `layout` lists each element's size and kind, in order.
        unsafe impl<$($P: KernelParam),*> KernelSignature for ($($P,)*) {
            fn layout() -> Vec<(u32, ArgKind)> {
                vec![$(($P::SIZE, $P::KIND)),*]
            }
        }

        // SAFETY: one argument per element, in order, from its `hold`.
        unsafe impl<$($P: KernelParam, $V: KernelArgFor<$P>),*> KernelArgs<($($P,)*)>
            for ($($V,)*)
        {
            #[inline(always)]
            #[allow(clippy::unused_unit)]
            fn with_args<R>(self, f: impl FnOnce(&[KernelArg<'_>]) -> R) -> R {
                let ($($v,)*) = self;
                $(let $v = $v.hold();)*
                f(&[$($v.as_kernel_arg()),*])
            }
        }
    };
}

signature!();
signature!(A VA a);
signature!(A VA a, B VB b);
signature!(A VA a, B VB b, C VC c);
signature!(A VA a, B VB b, C VC c, D VD d);
signature!(A VA a, B VB b, C VC c, D VD d, E VE e);
signature!(A VA a, B VB b, C VC c, D VD d, E VE e, F VF f);
signature!(A VA a, B VB b, C VC c, D VD d, E VE e, F VF f, G VG g);
signature!(A VA a, B VB b, C VC c, D VD d, E VE e, F VF f, G VG g, H VH h);
signature!(A VA a, B VB b, C VC c, D VD d, E VE e, F VF f, G VG g, H VH h, I VI i);
signature!(A VA a, B VB b, C VC c, D VD d, E VE e, F VF f, G VG g, H VH h, I VI i, J VJ j);
signature!(
    A VA a, B VB b, C VC c, D VD d, E VE e, F VF f, G VG g, H VH h, I VI i, J VJ j, K VK k
);
signature!(
    A VA a, B VB b, C VC c, D VD d, E VE e, F VF f, G VG g, H VH h, I VI i, J VJ j, K VK k,
    L VL l
);
signature!(
    A VA a, B VB b, C VC c, D VD d, E VE e, F VF f, G VG g, H VH h, I VI i, J VJ j, K VK k,
    L VL l, M VM m
);
signature!(
    A VA a, B VB b, C VC c, D VD d, E VE e, F VF f, G VG g, H VH h, I VI i, J VJ j, K VK k,
    L VL l, M VM m, N VN n
);
signature!(
    A VA a, B VB b, C VC c, D VD d, E VE e, F VF f, G VG g, H VH h, I VI i, J VJ j, K VK k,
    L VL l, M VM m, N VN n, O VO o
);
signature!(
    A VA a, B VB b, C VC c, D VD d, E VE e, F VF f, G VG g, H VH h, I VI i, J VJ j, K VK k,
    L VL l, M VM m, N VN n, O VO o, P VP p
);

/// A kernel with its argument tuple declared and checked: made by [`Function::typed`], `Copy`,
/// valid as long as the module. Its [`launch`](TypedKernel::launch) takes the values themselves.
pub struct TypedKernel<'m, A: KernelSignature> {
    function: Function<'m>,
    _args: PhantomData<fn() -> A>,
}

impl<A: KernelSignature> Clone for TypedKernel<'_, A> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<A: KernelSignature> Copy for TypedKernel<'_, A> {}

impl<A: KernelSignature> fmt::Debug for TypedKernel<'_, A> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TypedKernel")
            .field("function", &self.function)
            .field("args", &std::any::type_name::<A>())
            .finish()
    }
}

impl<'m> Function<'m> {
    /// This kernel with its arguments declared as the tuple `A`: scalars that are
    /// [`DeviceCopy`] (`u32`, `f32`, `#[repr(C)]` structs), `&DeviceBuffer<T>` for a buffer it
    /// reads and `&mut DeviceBuffer<T>` for one it writes (see [`KernelSignature`]).
    ///
    /// `A` is checked against the kernel's parameters here, once (their number, each size, and
    /// a float for an integer or pointer where the PTX says): a mismatch is
    /// [`Error::ArgumentMismatch`] naming the kernel, the parameter and both sizes. A kernel
    /// whose parameters are unknown ([`Function::params`] is `None`: a cubin's on a driver
    /// before CUDA 12.4, or PTX this crate cannot read, such as text that needs the
    /// preprocessor) cannot be checked, and is refused with [`Error::UnknownParameters`]; the
    /// `unsafe` [`Function::typed_unchecked`] declares it on the caller's word.
    ///
    /// ```no_run
    /// # fn demo(module: &cuda_stream::Module, stream: &cuda_stream::OwnedStream,
    /// #         x: &cuda_stream::DeviceBuffer<f32>, y: &mut cuda_stream::DeviceBuffer<f32>)
    /// #         -> cuda_stream::Result<()> {
    /// use cuda_stream::{DeviceBuffer, LaunchConfig};
    ///
    /// // extern "C" __global__ void saxpy(unsigned n, float a, const float *x, float *y)
    /// let saxpy = module
    ///     .function("saxpy")?
    ///     .typed::<(u32, f32, &DeviceBuffer<f32>, &mut DeviceBuffer<f32>)>()?;
    /// let n = x.len() as u32;
    /// // SAFETY: saxpy reads x[..n] and writes y[..n] only.
    /// unsafe { saxpy.launch(stream, LaunchConfig::for_elements(n, 256), (n, 2.0, x, y)) }?;
    /// # Ok(()) }
    /// ```
    pub fn typed<A: KernelSignature>(self) -> Result<TypedKernel<'m, A>> {
        let Some(params) = self.params() else {
            return Err(Error::UnknownParameters {
                kernel: self.name().to_string(),
            });
        };
        let layout = A::layout()
            .into_iter()
            .map(|(size, kind)| (Some(size), kind));
        check_args(params, layout).map_err(|mismatch| Error::ArgumentMismatch {
            kernel: self.name().to_string(),
            mismatch,
        })?;
        Ok(TypedKernel {
            function: self,
            _args: PhantomData,
        })
    }

    /// This kernel with its arguments declared as the tuple `A`, unchecked: for a kernel whose
    /// parameters are unknown, which [`Function::typed`] refuses ([`Error::UnknownParameters`]).
    /// Nothing is checked, not even where the parameters are known: prefer `typed` there.
    ///
    /// # Safety
    ///
    /// `A` matches the kernel's parameters, as [`Function::typed`] would check: one element per
    /// parameter, in order, each of the parameter's size and layout (a `u32` for `.u32`, a
    /// buffer or a 64-bit integer for a pointer, a `#[repr(C)]` struct of the same layout for a
    /// struct). Every launch of the result relies on it, on top of
    /// [`TypedKernel::launch`]'s own contract.
    pub unsafe fn typed_unchecked<A: KernelSignature>(self) -> TypedKernel<'m, A> {
        TypedKernel {
            function: self,
            _args: PhantomData,
        }
    }
}

impl<'m, A: KernelSignature> TypedKernel<'m, A> {
    /// The kernel.
    pub fn function(self) -> Function<'m> {
        self.function
    }

    /// Enqueues the kernel on `stream` with `args` (one value per parameter, see
    /// [`KernelArgFor`]), as [`Function::launch`] does: each
    /// `&DeviceBuffer` is a read and each `&mut DeviceBuffer` a write that the launch orders
    /// after the buffer's conflicting uses on other streams and records (or, in a capture, ties
    /// to the graph); the configuration and the launch attributes are checked as there. The
    /// argument tuple was checked when the kernel was typed: nothing is checked per launch but
    /// the configuration.
    ///
    /// # Safety
    ///
    /// What no library can check: what the kernel does with its arguments. The caller promises
    /// that:
    ///
    /// - the kernel accesses each buffer passed as `&DeviceBuffer` / `&mut DeviceBuffer` only
    ///   within its length, and writes only those passed as `&mut`;
    /// - any other memory the kernel reaches (through device addresses passed as integers, such
    ///   as a [`device_ptr`](crate::DeviceBuffer::device_ptr) given as a `u64`, or inside
    ///   structs; mapped host memory; globals) is valid for those accesses for as long as the
    ///   kernel runs (in a capture: for every launch of every graph and executable graph made
    ///   from it), and those accesses do not race with other work or with the host;
    /// - the module stays loaded while a graph that contains the launch can still run, as for
    ///   [`Function::launch`];
    /// - with programmatic serialisation, the kernel waits (`griddepcontrol.wait`) before it
    ///   touches what the work before it on the stream uses, its buffer arguments included (see
    ///   [`Function::launch`]);
    /// - for a kernel declared with [`Function::typed_unchecked`], the tuple matches the
    ///   kernel's parameters (for one declared with [`Function::typed`], that was checked).
    #[inline]
    pub unsafe fn launch(
        &self,
        stream: &impl Enqueue,
        config: LaunchConfig,
        args: impl KernelArgs<A>,
    ) -> Result<()> {
        args.with_args(|args| {
            // SAFETY: the arguments were checked against the parameters when the kernel was
            // typed (`KernelSignature` lays them out as declared); the caller promises the rest.
            unsafe { self.function.launch_checked(stream, config, args) }
        })
    }
}
