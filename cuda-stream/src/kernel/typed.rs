//! Typed kernels: [`Function::typed`] declares a kernel's argument tuple once, checks it against
//! the kernel's parameters, and gives a [`TypedKernel`] whose launches take the values
//! themselves (scalars, `&DeviceBuffer` read, `&mut DeviceBuffer` written).

use std::fmt;
use std::marker::PhantomData;

use crate::base::error::{Error, Result};
use crate::base::params::check_args;
use crate::base::plain_data::{ArgKind, DeviceCopy};
use crate::kernel::config::LaunchConfig;
use crate::kernel::launch::{AsKernelArg, KernelArg};
use crate::kernel::module::Function;
use crate::memory::buffer::{BufferUse, DeviceBuffer};
use crate::stream::view::Enqueue;

/// One parameter type of a typed kernel's signature: what a launch takes for it
/// ([`Arg`](KernelParam::Arg)), and how that reaches the kernel. Implemented for every
/// [`DeviceCopy`] value (passed by value), `&DeviceBuffer<T>` (the kernel reads it: passed as
/// [`read()`](DeviceBuffer::read)) and `&mut DeviceBuffer<T>` (the kernel writes it: passed as
/// [`write()`](DeviceBuffer::write)); a buffer type of another crate implements it the same way.
///
/// # Safety
///
/// [`SIZE`](KernelParam::SIZE) is the size of the value [`hold`](KernelParam::hold)'s result
/// hands the kernel through [`AsKernelArg`], and [`KIND`](KernelParam::KIND) what it is: a launch
/// trusts them once they were checked against the kernel's parameters. A buffer's
/// [`Held`](KernelParam::Held) is a [`BufferUse`] (or records its use as one does), so the launch
/// orders and records it.
pub unsafe trait KernelParam {
    /// What a launch takes for this parameter, borrowed for `'a`.
    type Arg<'a>;
    /// What the launch holds while it is made: the value the kernel receives.
    type Held<'a>: AsKernelArg;
    /// The size of the value the kernel receives, in bytes.
    const SIZE: u32;
    /// What the value is.
    const KIND: ArgKind;
    /// The value for the launch.
    fn hold<'a>(arg: Self::Arg<'a>) -> Self::Held<'a>;
}

// SAFETY: the value itself is passed: `SIZE` and `KIND` are its type's.
unsafe impl<T: DeviceCopy> KernelParam for T {
    type Arg<'a> = T;
    type Held<'a> = T;
    const SIZE: u32 = size_of_param::<T>();
    const KIND: ArgKind = T::KIND;
    #[inline(always)]
    fn hold<'a>(arg: Self::Arg<'a>) -> Self::Held<'a> {
        arg
    }
}

// SAFETY: a `BufferUse` passes a `CUdeviceptr` (a pointer) and records a read.
unsafe impl<T: DeviceCopy> KernelParam for &DeviceBuffer<T> {
    type Arg<'a> = &'a DeviceBuffer<T>;
    type Held<'a> = BufferUse<'a>;
    const SIZE: u32 = size_of_param::<crate::ffi::CUdeviceptr>();
    const KIND: ArgKind = ArgKind::Pointer;
    #[inline(always)]
    fn hold<'a>(arg: Self::Arg<'a>) -> Self::Held<'a> {
        arg.read()
    }
}

// SAFETY: a `BufferUse` passes a `CUdeviceptr` (a pointer) and records a write.
unsafe impl<T: DeviceCopy> KernelParam for &mut DeviceBuffer<T> {
    type Arg<'a> = &'a mut DeviceBuffer<T>;
    type Held<'a> = BufferUse<'a>;
    const SIZE: u32 = size_of_param::<crate::ffi::CUdeviceptr>();
    const KIND: ArgKind = ArgKind::Pointer;
    #[inline(always)]
    fn hold<'a>(arg: Self::Arg<'a>) -> Self::Held<'a> {
        arg.write()
    }
}

const fn size_of_param<T>() -> u32 {
    let size = size_of::<T>();
    assert!(
        size <= u32::MAX as usize,
        "too large for a kernel parameter"
    );
    size as u32
}

/// A kernel's argument tuple, `(P0, P1, ...)` of up to 16 [`KernelParam`]s: what
/// [`Function::typed`] takes. `&DeviceBuffer<T>` and `&mut DeviceBuffer<T>` may be written with
/// any lifetime (`typed::<(u32, &DeviceBuffer<f32>)>()` infers one): a launch borrows the buffers
/// for its call only, whatever the signature says.
///
/// # Safety
///
/// [`layout`](KernelSignature::layout) lists each element's `SIZE` and `KIND`, in order, and
/// [`with_args`](KernelSignature::with_args) hands `f` one argument per element, in the same
/// order, each from the element's [`KernelParam::hold`].
pub unsafe trait KernelSignature {
    /// The values a launch takes: the tuple of each parameter's [`KernelParam::Arg`].
    type Values<'a>;
    /// Each parameter's size and kind, in order.
    fn layout() -> Vec<(u32, ArgKind)>;
    /// Calls `f` with the kernel arguments of `values`.
    fn with_args<R>(values: Self::Values<'_>, f: impl FnOnce(&[KernelArg<'_>]) -> R) -> R;
}

macro_rules! signature {
    ($($P:ident $v:ident),*) => {
        // SAFETY: one argument per element, in order, from its `hold`; `layout` alike.
        unsafe impl<$($P: KernelParam),*> KernelSignature for ($($P,)*) {
            type Values<'a> = ($($P::Arg<'a>,)*);
            fn layout() -> Vec<(u32, ArgKind)> {
                vec![$(($P::SIZE, $P::KIND)),*]
            }
            #[inline(always)]
            #[allow(clippy::unused_unit)]
            fn with_args<R>(values: Self::Values<'_>, f: impl FnOnce(&[KernelArg<'_>]) -> R) -> R {
                let ($($v,)*) = values;
                $(let $v = $P::hold($v);)*
                f(&[$($v.as_kernel_arg()),*])
            }
        }
    };
}

signature!();
signature!(A a);
signature!(A a, B b);
signature!(A a, B b, C c);
signature!(A a, B b, C c, D d);
signature!(A a, B b, C c, D d, E e);
signature!(A a, B b, C c, D d, E e, F f);
signature!(A a, B b, C c, D d, E e, F f, G g);
signature!(A a, B b, C c, D d, E e, F f, G g, H h);
signature!(A a, B b, C c, D d, E e, F f, G g, H h, I i);
signature!(A a, B b, C c, D d, E e, F f, G g, H h, I i, J j);
signature!(A a, B b, C c, D d, E e, F f, G g, H h, I i, J j, K k);
signature!(A a, B b, C c, D d, E e, F f, G g, H h, I i, J j, K k, L l);
signature!(A a, B b, C c, D d, E e, F f, G g, H h, I i, J j, K k, L l, M m);
signature!(A a, B b, C c, D d, E e, F f, G g, H h, I i, J j, K k, L l, M m, N n);
signature!(A a, B b, C c, D d, E e, F f, G g, H h, I i, J j, K k, L l, M m, N n, O o);
signature!(A a, B b, C c, D d, E e, F f, G g, H h, I i, J j, K k, L l, M m, N n, O o, P p);

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
    /// whose parameters are unknown ([`Function::params`] is `None`: a cubin's, on a driver
    /// before CUDA 12.4) cannot be checked, and is accepted.
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
        if let Some(params) = self.params() {
            check_args(params, A::layout().into_iter()).map_err(|mismatch| {
                Error::ArgumentMismatch {
                    kernel: self.name().to_string(),
                    mismatch,
                }
            })?;
        }
        Ok(TypedKernel {
            function: self,
            _args: PhantomData,
        })
    }
}

impl<'m, A: KernelSignature> TypedKernel<'m, A> {
    /// The kernel.
    pub fn function(self) -> Function<'m> {
        self.function
    }

    /// Enqueues the kernel on `stream` with `args`, as [`Function::launch`] does: each
    /// `&DeviceBuffer` is a read and each `&mut DeviceBuffer` a write that the launch orders
    /// after the buffer's conflicting uses on other streams and records (or, in a capture, ties
    /// to the graph); the configuration and the launch attributes are checked as there. The
    /// argument tuple was checked when the kernel was typed: nothing is checked per launch but
    /// the configuration.
    ///
    /// # Safety
    ///
    /// What no library can check: the kernel's own memory accesses. The caller promises that the
    /// kernel accesses each buffer only within its length and writes only those passed as
    /// `&mut`, and that any other memory it reaches (through device addresses passed as
    /// integers or inside structs) is valid for those accesses while it runs (in a capture, for
    /// every replay) and does not race with other work. As for [`Function::launch`], the module
    /// must stay loaded while a graph holding the launch can still run.
    #[inline]
    pub unsafe fn launch(
        &self,
        stream: &impl Enqueue,
        config: LaunchConfig,
        args: A::Values<'_>,
    ) -> Result<()> {
        A::with_args(args, |args| {
            // SAFETY: the arguments were checked against the parameters when the kernel was
            // typed (`KernelSignature` lays them out as declared); the caller promises the rest.
            unsafe { self.function.launch_checked(stream, config, args) }
        })
    }
}
