//! [`Nccl`]: an opened NCCL library (`libnccl.so.2`), found and opened at run time like the
//! driver, with its functions resolved by name on first use.

use std::ffi::{OsStr, OsString, c_int, c_void};
use std::fmt;
use std::path::Path;
use std::sync::OnceLock;

use super::by_name::ByName;
use super::error::list;
use super::{Candidate, driver::load_library};
use crate::generated::nccl::{NCCL_SYMBOL_COUNT, NCCL_SYMBOLS, ncclResult_t};

/// The environment variable that names the NCCL library to load instead of the default search.
pub const NCCL_PATH_VAR: &str = "CUDA_SYS_LIBNCCL";

type GetVersion = unsafe extern "C" fn(*mut c_int) -> ncclResult_t;

/// Why NCCL, or one of its functions, is not available (`Display` and `Error` by hand, as for
/// [`LoadError`](crate::LoadError)).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum NcclLoadError {
    /// No candidate library could be opened; each entry says which file and why.
    NotFound {
        /// Every candidate, in the order tried.
        tried: Vec<Candidate>,
    },
    /// The library loaded, but it is not NCCL: it does not export `ncclGetVersion`, or that
    /// call fails.
    NotNccl {
        /// The file name or path it was opened from.
        path: OsString,
        /// What is wrong.
        reason: String,
    },
    /// The library does not export a function this program needs (an older NCCL).
    MissingSymbol {
        /// The function's name.
        name: &'static str,
        /// The library's version code (`ncclGetVersion`, 22707 for 2.27.7).
        version: i32,
    },
}

impl fmt::Display for NcclLoadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NcclLoadError::NotFound { tried } => {
                write!(f, "no NCCL library could be loaded; tried {}", list(tried))
            }
            NcclLoadError::NotNccl { path, reason } => {
                write!(f, "{} is not NCCL: {reason}", path.to_string_lossy())
            }
            NcclLoadError::MissingSymbol { name, version } => {
                let version = format_nccl_version(*version);
                write!(f, "{name} is not exported by NCCL {version}")
            }
        }
    }
}

/// No source: each variant says all there is.
impl std::error::Error for NcclLoadError {}

/// Formats an NCCL version code (`22707`, or `2704` before 2.9) as `2.27.7`.
pub fn format_nccl_version(code: i32) -> String {
    if code >= 10000 {
        format!("{}.{}.{}", code / 10000, (code % 10000) / 100, code % 100)
    } else {
        format!("{}.{}.{}", code / 1000, (code % 1000) / 100, code % 100)
    }
}

/// The name of an `ncclResult_t` (`ncclInvalidArgument`), without loading NCCL.
pub fn nccl_result_name(result: ncclResult_t) -> &'static str {
    match result.0 {
        0 => "ncclSuccess",
        1 => "ncclUnhandledCudaError",
        2 => "ncclSystemError",
        3 => "ncclInternalError",
        4 => "ncclInvalidArgument",
        5 => "ncclInvalidUsage",
        6 => "ncclRemoteError",
        7 => "ncclInProgress",
        _ => "an unknown ncclResult_t",
    }
}

/// An opened NCCL library with a table of lazily resolved function pointers.
///
/// Methods named after the functions (`nccl.ncclAllReduce()`) return that function's pointer,
/// looked up by its exported name on first use and cached; a function the library does not
/// export gives [`NcclLoadError::MissingSymbol`]. The library stays loaded as long as the
/// `Nccl` lives, and the pointers it hands out must not be called after it is dropped.
pub struct Nccl {
    lib: libloading::Library,
    path: OsString,
    slots: ByName,
    version: i32,
}

impl fmt::Debug for Nccl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Nccl")
            .field("path", &self.path)
            .field("version", &format_nccl_version(self.version))
            .finish_non_exhaustive()
    }
}

static GLOBAL: OnceLock<Result<Nccl, NcclLoadError>> = OnceLock::new();

impl Nccl {
    /// Opens the NCCL library at `path` (a file name the dynamic loader searches for, or a
    /// path). A path that is missing, a directory or empty is [`NcclLoadError::NotFound`]; a
    /// library without a working `ncclGetVersion` is [`NcclLoadError::NotNccl`]. (Those checks
    /// catch a wrong path, not a wrong library: see the safety section.)
    ///
    /// The safe way to NCCL is [`Nccl::global`] (or [`Nccl::open_default`]), which loads
    /// `libnccl.so.2` by its usual names or the library the process's own environment names in
    /// `CUDA_SYS_LIBNCCL`.
    ///
    /// # Safety
    ///
    /// Loading a library runs its initialisers, and opening it calls its `ncclGetVersion`
    /// (every other function is called later, by whoever uses the `Nccl`): nothing can check
    /// that a file is what its name says. `path` must name an NCCL library (or a stand-in for
    /// one), whose exported `nccl*` functions have the types and the behaviour of NCCL's
    /// functions of those names, and whose initialisers are sound to run now, on this thread.
    /// The same holds for [`libloading::Library::new`], which is `unsafe` for this reason.
    pub unsafe fn open(path: impl AsRef<OsStr>) -> Result<Nccl, NcclLoadError> {
        let path = path.as_ref();
        // SAFETY: the caller promises an NCCL library, whose initialisers are sound to run at
        // any time and in any thread; the library is never unloaded while a pointer from it is
        // live (pointers are handed out under `&self`, and the global one never drops).
        let lib = unsafe { load_library(path) }
            .map_err(|c| NcclLoadError::NotFound { tried: vec![c] })?;
        let not_nccl = |reason: &str| NcclLoadError::NotNccl {
            path: path.to_os_string(),
            reason: reason.to_string(),
        };
        // SAFETY: the library is NCCL (the caller's promise), and `ncclGetVersion` has this C
        // type in every NCCL (`ncclResult_t (int *)`).
        let get_version = unsafe { lib.get::<GetVersion>(b"ncclGetVersion\0") }
            .map(|s| *s)
            .map_err(|_| not_nccl("it does not export ncclGetVersion"))?;
        let mut version = 0;
        // SAFETY: `version` is a valid out-pointer for the call's duration.
        let rc = unsafe { get_version(&mut version) };
        if rc != ncclResult_t::ncclSuccess || version <= 0 {
            return Err(not_nccl("ncclGetVersion failed"));
        }
        Ok(Nccl {
            lib,
            path: path.to_os_string(),
            slots: ByName::new(NCCL_SYMBOL_COUNT),
            version,
        })
    }

    /// Opens the first library of [`Nccl::candidates`] that loads.
    ///
    /// Safe, unlike [`Nccl::open`]: it loads NCCL by its usual names, or the library that the
    /// process's own environment names in `CUDA_SYS_LIBNCCL`, which is part of the environment
    /// the program runs in (as `LD_LIBRARY_PATH` is), not a value its code passes in; see
    /// [`Driver::open_default`](crate::Driver::open_default).
    pub fn open_default() -> Result<Nccl, NcclLoadError> {
        let mut tried = Vec::new();
        for path in Self::candidates() {
            // SAFETY: NCCL by its usual names, or the library the environment names in
            // `CUDA_SYS_LIBNCCL`: what this process is configured to trust as NCCL.
            match unsafe { Nccl::open(&path) } {
                Ok(n) => return Ok(n),
                Err(NcclLoadError::NotFound { tried: t }) => tried.extend(t),
                Err(e) => return Err(e),
            }
        }
        Err(NcclLoadError::NotFound { tried })
    }

    /// The files [`Nccl::open_default`] tries, in order: the file named by `CUDA_SYS_LIBNCCL`
    /// (alone, when set), else `libnccl.so.2` then `libnccl.so`.
    pub fn candidates() -> Vec<OsString> {
        if let Some(p) = std::env::var_os(NCCL_PATH_VAR).filter(|p| !p.is_empty()) {
            return vec![p];
        }
        vec!["libnccl.so.2".into(), "libnccl.so".into()]
    }

    /// The process-wide NCCL, opened by [`Nccl::open_default`] on first use. A failure is
    /// remembered: every later call returns the same error.
    #[inline]
    pub fn global() -> Result<&'static Nccl, NcclLoadError> {
        GLOBAL
            .get_or_init(Nccl::open_default)
            .as_ref()
            .map_err(Clone::clone)
    }

    /// Makes `nccl` the process-wide NCCL, if none has been loaded (or tried) yet; otherwise
    /// hands it back.
    pub fn install_global(nccl: Nccl) -> Result<(), Nccl> {
        let mut slot = Some(nccl);
        GLOBAL.get_or_init(|| match slot.take() {
            Some(n) => Ok(n),
            None => Err(NcclLoadError::NotFound { tried: Vec::new() }),
        });
        match slot {
            None => Ok(()),
            Some(n) => Err(n),
        }
    }

    /// The name or path this library was opened from.
    pub fn path(&self) -> &Path {
        Path::new(&self.path)
    }

    /// `ncclGetVersion`'s answer when the library was opened (`22707` for 2.27.7).
    pub fn version(&self) -> i32 {
        self.version
    }

    /// The pointer of binding `i`, resolved on first use.
    #[inline]
    pub(crate) fn symbol(&self, i: usize) -> Result<*mut c_void, NcclLoadError> {
        self.slots
            .get(&self.lib, &NCCL_SYMBOLS, i)
            .ok_or_else(|| NcclLoadError::MissingSymbol {
                name: NCCL_SYMBOLS[i].to_str().unwrap_or("?"),
                version: self.version,
            })
    }
}
