//! A kernel's parameters as a launch checks its arguments against them ([`ParamInfo`]), and what
//! a mismatch says ([`ArgMismatch`]).

use std::fmt;

use crate::base::plain_data::ArgKind;

/// What the PTX declares a kernel parameter as; [`ParamKind::Any`] where it does not say (`.b32`,
/// byte arrays, or parameters read from the driver only).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ParamKind {
    /// `.u8` to `.u64`, `.s8` to `.s64`: an integer, or a pointer passed as one.
    Integer,
    /// `.f16` to `.f64`, `.bf16`.
    Float,
    /// `.u64 .ptr`: a pointer.
    Pointer,
    /// Untyped bits, a byte array (a struct), or unknown.
    Any,
}

impl ParamKind {
    /// Whether an argument of `arg` fits: only floats and non-floats are told apart.
    pub(crate) fn accepts(self, arg: ArgKind) -> bool {
        !matches!(
            (self, arg),
            (ParamKind::Float, ArgKind::Integer | ArgKind::Pointer)
                | (ParamKind::Integer | ParamKind::Pointer, ArgKind::Float)
        )
    }
}

/// One kernel parameter: its size in bytes and, where the PTX says, its kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ParamInfo {
    /// Bytes.
    pub size: u32,
    /// What the PTX declares it as.
    pub kind: ParamKind,
}

/// How a launch's arguments differ from the kernel's parameters (see
/// [`Error::ArgumentMismatch`](crate::Error::ArgumentMismatch)).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ArgMismatch {
    /// Another number of arguments than of parameters.
    Count {
        /// The kernel's parameters.
        params: usize,
        /// The arguments given.
        args: usize,
    },
    /// An argument of another size than its parameter.
    Size {
        /// The parameter's index, from 0.
        index: usize,
        /// The parameter's size in bytes.
        param: u32,
        /// The argument's size in bytes.
        arg: u32,
    },
    /// A float for an integer or pointer parameter, or the other way round.
    Kind {
        /// The parameter's index, from 0.
        index: usize,
        /// What the PTX declares.
        param: ParamKind,
        /// What was given.
        arg: ArgKind,
    },
}

impl fmt::Display for ArgMismatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            ArgMismatch::Count { params, args } => {
                write!(f, "takes {params} parameters, {args} arguments given")
            }
            ArgMismatch::Size { index, param, arg } => write!(
                f,
                "parameter {index} is {param} bytes, the argument is {arg} bytes"
            ),
            ArgMismatch::Kind { index, param, arg } => {
                write!(f, "parameter {index} is {param:?}, the argument is {arg:?}")
            }
        }
    }
}

/// `size_of::<T>()` as the size of a kernel parameter of type `T`. A zero-sized type (`[T; 0]`,
/// an empty struct) has no bytes for the kernel to read: the driver would read the parameter's
/// bytes from whatever lies behind the value. Like a type over 4 GiB, it does not compile where
/// it is used as a kernel argument (`cargo build` refuses it; `cargo check`, which stops
/// before code generation, does not see it).
pub(crate) const fn param_size<T>() -> u32 {
    let size = size_of::<T>();
    assert!(
        size != 0,
        "a zero-sized type cannot be a kernel argument: the kernel would read bytes that are not there"
    );
    assert!(
        size <= u32::MAX as usize,
        "too large for a kernel parameter"
    );
    size as u32
}

/// Checks arguments of `(size, kind)` against `params`. A size of `None` is unknown (a raw
/// pointer of unknown size) and not checked; every known size is, 0 included.
pub(crate) fn check_args(
    params: &[ParamInfo],
    args: impl ExactSizeIterator<Item = (Option<u32>, ArgKind)>,
) -> Result<(), ArgMismatch> {
    if params.len() != args.len() {
        return Err(ArgMismatch::Count {
            params: params.len(),
            args: args.len(),
        });
    }
    for (index, (p, (size, kind))) in params.iter().zip(args).enumerate() {
        if let Some(size) = size.filter(|&s| s != p.size) {
            return Err(ArgMismatch::Size {
                index,
                param: p.size,
                arg: size,
            });
        }
        if !p.kind.accepts(kind) {
            return Err(ArgMismatch::Kind {
                index,
                param: p.kind,
                arg: kind,
            });
        }
    }
    Ok(())
}
