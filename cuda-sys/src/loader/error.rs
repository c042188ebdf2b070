//! [`LoadError`]: why the driver, or one of its functions, is not available, and the
//! `CUresult` the C-shaped functions return for it.

use std::ffi::OsString;
use std::fmt;

use crate::generated::types::CUresult;

/// A library file that was tried and why it could not be used.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Candidate {
    /// The file name or path passed to the dynamic loader.
    pub path: OsString,
    /// What was wrong with it.
    pub reason: String,
}

impl fmt::Display for Candidate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.path.to_string_lossy(), self.reason)
    }
}

/// Why the driver, or one of its functions, is not available.
///
/// `Display` and `Error` are written by hand rather than derived with thiserror, so that this
/// crate needs no proc macro and compiles beside `syn` in a user's cold build.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum LoadError {
    /// No candidate library could be opened; each entry says which file and why (missing, a
    /// directory, an empty file, or what the dynamic loader said).
    NotFound {
        /// Every candidate, in the order tried.
        tried: Vec<Candidate>,
    },
    /// The library loaded, but it is not a CUDA driver: it lacks the functions every driver has.
    NotADriver {
        /// The file name or path it was opened from.
        path: OsString,
        /// What it lacks.
        reason: String,
    },
    /// An ABI limit that is not a CUDA version.
    InvalidAbiVersion {
        /// Where it was set: [`ABI_VERSION_VAR`](super::ABI_VERSION_VAR), or
        /// `DriverOptions::abi_version`.
        setting: &'static str,
        /// The value given.
        value: String,
    },
    /// The driver does not have this binding's ABI: it does not export it, the driver is older
    /// than the ABI, or the ABI is newer than the configured limit.
    #[non_exhaustive]
    MissingSymbol {
        /// The binding's name.
        name: &'static str,
        /// The exported symbol of the ABI.
        symbol: &'static str,
        /// The CUDA version of the ABI (0: not recorded).
        since: u32,
        /// The loaded driver's version, if it could tell.
        driver_version: Option<i32>,
        /// The configured ABI limit, when it is what leaves the binding out (the driver itself
        /// would have it).
        abi_limit: Option<i32>,
    },
}

impl fmt::Display for LoadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LoadError::NotFound { tried } => {
                write!(
                    f,
                    "no CUDA driver library could be loaded; tried {}",
                    list(tried)
                )
            }
            LoadError::NotADriver { path, reason } => {
                write!(
                    f,
                    "{} is not a CUDA driver: {reason}",
                    path.to_string_lossy()
                )
            }
            LoadError::InvalidAbiVersion { setting, value } => {
                write!(
                    f,
                    "{setting}={value:?} is not a CUDA version (write 12000 or 12.0)"
                )
            }
            LoadError::MissingSymbol {
                name,
                since,
                driver_version,
                abi_limit,
                ..
            } => f.write_str(&missing(name, *since, *driver_version, *abi_limit)),
        }
    }
}

/// No source: each variant says all there is (the dynamic loader's words are in its text).
impl std::error::Error for LoadError {}

pub(super) fn list(tried: &[Candidate]) -> String {
    let v: Vec<String> = tried.iter().map(ToString::to_string).collect();
    v.join("; ")
}

fn missing(name: &str, since: u32, driver: Option<i32>, limit: Option<i32>) -> String {
    let v = |v: i32| crate::format_version(v);
    let mut s = match limit {
        Some(l) => format!("{name} is left out by the ABI limit of CUDA {}", v(l)),
        None => format!("{name} is not exported by the CUDA driver"),
    };
    if let Some(d) = driver {
        s.push_str(&format!(" (CUDA {})", v(d)));
    }
    if since != 0 {
        s.push_str(&format!("; it needs CUDA {} or later", v(since as i32)));
    }
    s
}

impl LoadError {
    /// The `CUresult` the C-shaped functions return for this error:
    /// `CUDA_ERROR_NOT_FOUND` ("named symbol not found") for a missing symbol,
    /// `CUDA_ERROR_INVALID_VALUE` for an invalid ABI limit, and
    /// `CUDA_ERROR_SHARED_OBJECT_INIT_FAILED` when no driver library could be opened.
    pub fn to_cuda_result(&self) -> CUresult {
        match self {
            LoadError::NotFound { .. } | LoadError::NotADriver { .. } => {
                CUresult::CUDA_ERROR_SHARED_OBJECT_INIT_FAILED
            }
            LoadError::InvalidAbiVersion { .. } => CUresult::CUDA_ERROR_INVALID_VALUE,
            LoadError::MissingSymbol { .. } => CUresult::CUDA_ERROR_NOT_FOUND,
        }
    }
}

/// `e` and its sources, joined with `: `.
pub(super) fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        s.push_str(": ");
        s.push_str(&c.to_string());
        cur = c.source();
    }
    s
}
