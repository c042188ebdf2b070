//! [`DeviceCopy`]: the types whose bytes may travel between host and device as they are.

/// A type that can be copied to and from the device byte for byte: kernel arguments
/// ([`KernelArg`](crate::KernelArg)) and the elements of a [`DeviceBuffer`](crate::DeviceBuffer).
///
/// Implemented for the integer and floating-point primitives, and for arrays of `DeviceCopy`
/// types. Implement it for a `#[repr(C)]` struct that mirrors a kernel's parameter struct:
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
// pattern is a value.
/// unsafe impl cuda_stream::DeviceCopy for Params {}
/// ```
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
pub unsafe trait DeviceCopy: Copy + Send + Sync + 'static {}

macro_rules! impl_device_copy {
    ($($t:ty),* $(,)?) => {
        $(
            // SAFETY: a primitive integer or float: no padding, every bit pattern is a value.
            unsafe impl DeviceCopy for $t {}
        )*
    };
}

impl_device_copy!(
    u8, i8, u16, i16, u32, i32, u64, i64, u128, i128, usize, isize, f32, f64
);

// SAFETY: an array has no padding between or around elements that have none, and its bit
// patterns are those of its elements.
unsafe impl<T: DeviceCopy, const N: usize> DeviceCopy for [T; N] {}
