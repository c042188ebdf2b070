//! [`DeviceCopy`]: the types whose bytes may travel between host and device as they are.

/// A type that can be copied to and from the device byte for byte: kernel arguments
/// ([`KernelArg`](crate::KernelArg)) and the elements of a [`DeviceBuffer`](crate::DeviceBuffer).
///
/// Implemented for the integer and floating-point primitives, and for arrays of `DeviceCopy`
/// types. Zero-sized ones (`[T; 0]`) are `DeviceCopy` too, but no kernel argument: they have no
/// bytes for a parameter, and a launch or a typed kernel naming one does not compile. Implement
/// it for a `#[repr(C)]` struct that mirrors a kernel's parameter struct:
///
/// ```
/// #[derive(Clone, Copy)]
/// #[repr(C)]
/// struct Params {
///     n: u32,
///     scale: f32,
///     data: cuda_stream::ffi::CUdeviceptr,
/// }
/// // SAFETY: `#[repr(C)]`, 4 + 4 + 8 bytes of integers and floats: no padding, and every bit
/// // pattern is a value.
/// unsafe impl cuda_stream::DeviceCopy for Params {}
/// ```
///
/// Or let [`device_copy!`](crate::device_copy) write the `unsafe impl` after checking, at
/// compile time, that every field is `DeviceCopy` and that the struct has no padding.
///
/// # Safety
///
/// - Every bit pattern of `size_of::<Self>()` bytes must be a valid value of the type: the
///   device writes whatever its kernels compute, and reading it back must never make an invalid
///   value. So no references, `bool`, `char`, enums, `NonZero*` or other types with invalid bit
///   patterns, and nothing whose meaning depends on host memory (a `Box`, a `Vec`).
/// - The type has no padding bytes (add explicit fields instead): values are read as bytes, and
///   padding is uninitialised memory.
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not `DeviceCopy`: its bytes cannot travel to and from the device as they are",
    label = "not `DeviceCopy`",
    note = "kernel arguments and buffer values are integers, floats, arrays of them, or `#[repr(C)]` structs that implement `DeviceCopy`; pass a buffer to a kernel as `buf.read()` or `buf.write()`"
)]
pub unsafe trait DeviceCopy: Copy + Send + Sync + 'static {
    /// What a launch checks this type against a kernel parameter's type as (besides its size):
    /// [`ArgKind::Integer`] for the integer primitives, [`ArgKind::Float`] for `f32` and `f64`,
    /// and [`ArgKind::Bytes`] (checked by size only) for everything else, the default.
    const KIND: ArgKind = ArgKind::Bytes;
}

/// What a kernel argument holds, as a launch checks it against the kernel's parameter (the PTX
/// says `.u32`, `.f32`, `.u64 .ptr`, `.b8 x[16]`, ...): a float argument for an integer or
/// pointer parameter, or the other way round, is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ArgKind {
    /// An integer.
    Integer,
    /// A floating-point number.
    Float,
    /// A device address (a buffer passed as `read()` / `write()`).
    Pointer,
    /// Bytes of unknown meaning (a struct, an array, a raw pointer to a value): checked by size
    /// (where the size is known: [`KernelArg::from_ptr`](crate::KernelArg::from_ptr)'s is not).
    Bytes,
}

macro_rules! impl_device_copy {
    ($kind:ident: $($t:ty),* $(,)?) => {
        $(
            // SAFETY: a primitive integer or float: no padding, every bit pattern is a value.
            unsafe impl DeviceCopy for $t {
                const KIND: ArgKind = ArgKind::$kind;
            }
        )*
    };
}

impl_device_copy!(Integer: u8, i8, u16, i16, u32, i32, u64, i64, u128, i128, usize, isize);
impl_device_copy!(Float: f32, f64);

// SAFETY: an array has no padding between or around elements that have none, and its bit
// patterns are those of its elements.
unsafe impl<T: DeviceCopy, const N: usize> DeviceCopy for [T; N] {}

/// Declares a `#[repr(C)]` struct and implements [`DeviceCopy`] for it, checked at compile
/// time: every field's type must be `DeviceCopy`, and the struct's size must be the sum of its
/// fields' sizes (no padding; add explicit fields where the C struct has some). Derive `Clone`
/// and `Copy` on it (`DeviceCopy` needs them). Generic structs are not taken; write their
/// `unsafe impl` by hand.
///
/// ```
/// cuda_stream::device_copy! {
///     /// A kernel's parameter struct: `{float, double, unsigned, size_t}` in C, with the four
///     /// bytes of padding after `scale` made a field.
///     #[derive(Clone, Copy, Debug, Default)]
///     pub struct Params {
///         pub scale: f32,
///         pub _pad: u32,
///         pub offset: f64,
///         pub n: u32,
///         pub _pad2: u32,
///         pub len: u64,
///     }
/// }
/// assert_eq!(std::mem::size_of::<Params>(), 32);
/// ```
///
/// Without the padding fields, or with a field that is not `DeviceCopy` (a `bool`), it does not
/// compile:
///
/// ```compile_fail
/// cuda_stream::device_copy! {
///     #[derive(Clone, Copy)]
///     pub struct Params {
///         pub scale: f32,
///         pub offset: f64,
///     }
/// }
/// ```
#[macro_export]
macro_rules! device_copy {
    (
        $(#[$meta:meta])*
        $vis:vis struct $name:ident {
            $($(#[$field_meta:meta])* $field_vis:vis $field:ident : $ty:ty),* $(,)?
        }
    ) => {
        $(#[$meta])*
        #[repr(C)]
        $vis struct $name {
            $($(#[$field_meta])* $field_vis $field: $ty),*
        }

        const _: () = {
            const fn field_is_device_copy<T: $crate::DeviceCopy>() {}
            $(field_is_device_copy::<$ty>();)*
            assert!(
                ::core::mem::size_of::<$name>() == 0 $(+ ::core::mem::size_of::<$ty>())*,
                concat!(
                    "`",
                    stringify!($name),
                    "` has padding: add explicit fields so that its size is the sum of its fields' sizes"
                )
            );
        };

        // SAFETY: `#[repr(C)]`; every field is `DeviceCopy` (every bit pattern a value, no
        // padding inside), and the struct's size is the sum of its fields' sizes (asserted at
        // compile time above), so no byte of it is padding.
        unsafe impl $crate::DeviceCopy for $name {}
    };
}
