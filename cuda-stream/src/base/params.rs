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

/// Checks arguments of `(size, kind)` (size 0: unknown, not checked) against `params`.
pub(crate) fn check_args(
    params: &[ParamInfo],
    args: impl ExactSizeIterator<Item = (u32, ArgKind)>,
) -> Result<(), ArgMismatch> {
    if params.len() != args.len() {
        return Err(ArgMismatch::Count {
            params: params.len(),
            args: args.len(),
        });
    }
    for (index, (p, (size, kind))) in params.iter().zip(args).enumerate() {
        if size != 0 && size != p.size {
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
