//! [`Driver`]: an opened driver library, how it is found and opened, and what it says about
//! itself (path, version, ABI limit).

use std::ffi::{OsStr, OsString, c_int, c_void};
use std::fmt;
use std::path::{Path, PathBuf};
use std::ptr;
use std::sync::atomic::AtomicPtr;

use super::error::error_chain;
use super::resolve::{GetProcAddressV1, GetProcAddressV2, ProcAddress};
use super::{ABI_VERSION_VAR, Candidate, DriverOptions, LoadError};
use crate::generated::symbols::SYMBOL_COUNT;
use crate::generated::types::CUresult;

/// The environment variable that names the driver library to load instead of the default search.
pub const DRIVER_PATH_VAR: &str = "CUDA_SYS_LIBCUDA";

type DriverGetVersion = unsafe extern "C" fn(*mut c_int) -> CUresult;

/// An opened driver library with a table of lazily resolved function pointers.
///
/// Methods named after bindings (`driver.cuInit()`, `driver.cuEventElapsedTime_v2000()`) return
/// that binding's pointer, resolving it on first use (through the driver's `cuGetProcAddress` at
/// the binding's ABI version, else by its exported name) and caching it; a binding the driver does not have, or whose ABI is above [`Driver::abi_version`], gives
/// [`LoadError::MissingSymbol`]. The library stays loaded as long as the `Driver` lives, and the
/// pointers it hands out must not be called after it is dropped.
pub struct Driver {
    pub(super) lib: libloading::Library,
    path: OsString,
    pub(super) slots: Box<[AtomicPtr<c_void>]>,
    pub(super) proc_address: ProcAddress,
    /// `cuDriverGetVersion`'s answer when the library was opened.
    pub(super) driver_version: Option<i32>,
    /// The configured ABI limit.
    pub(super) abi_limit: Option<u32>,
}

impl fmt::Debug for Driver {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Driver")
            .field("path", &self.path)
            .field("driver_version", &self.driver_version)
            .field("abi_version", &self.abi_version())
            .field("resolver", &self.resolver())
            .finish_non_exhaustive()
    }
}

impl Driver {
    /// Opens the driver library at `path` (a file name the dynamic loader searches for, or a
    /// path), with no ABI limit; the environment is not read.
    ///
    /// The safe way to the driver is [`Driver::global`] (or [`Driver::open_default`]), which
    /// loads the system's libcuda by its usual names, or the library the process's own
    /// environment names in `CUDA_SYS_LIBCUDA`.
    ///
    /// # Safety
    ///
    /// Loading a library runs its initialisers, and opening it calls its `cuDriverGetVersion`
    /// (every other binding is called later, by whoever uses the `Driver`): nothing can check
    /// that a file is what its name says. `path` must name a CUDA driver library (libcuda, or a
    /// library that stands in for it, such as a test double), whose exported `cu*` functions
    /// have the types and the behaviour of the CUDA driver API's functions of those names, and
    /// whose initialisers are sound to run now, on this thread. A library that merely exports
    /// `cuInit` and `cuDriverGetVersion` (as data, say, or with other signatures) makes the
    /// call undefined behaviour. The same holds for [`libloading::Library::new`], which is
    /// `unsafe` for this reason.
    pub unsafe fn open(path: impl AsRef<OsStr>) -> Result<Driver, LoadError> {
        // SAFETY: the caller's contract.
        unsafe { Self::open_with(path, DriverOptions::new()) }
    }

    /// Opens the driver library at `path` with `options`.
    ///
    /// A path (anything with a `/`) that is missing, a directory or an empty file is
    /// [`LoadError::NotFound`] saying so; a library that loads but lacks `cuInit` or
    /// `cuDriverGetVersion` is [`LoadError::NotADriver`]. (Those checks catch a wrong path, not
    /// a wrong library: see the safety section.)
    ///
    /// # Safety
    ///
    /// As for [`Driver::open`]: `path` must name a CUDA driver library whose exported `cu*`
    /// functions have the types and behaviour of the driver API's, and whose initialisers are
    /// sound to run now.
    pub unsafe fn open_with(
        path: impl AsRef<OsStr>,
        options: DriverOptions,
    ) -> Result<Driver, LoadError> {
        let path = path.as_ref();
        if let Some(v) = options.abi_version.filter(|v| *v < 1000) {
            return Err(LoadError::InvalidAbiVersion {
                setting: if options.from_env {
                    ABI_VERSION_VAR
                } else {
                    "DriverOptions::abi_version"
                },
                value: v.to_string(),
            });
        }
        // SAFETY: the caller promises a CUDA driver library, whose initialisers are sound to run
        // at any time and in any thread; the library is never unloaded while a pointer from it
        // is live (pointers from `Driver` are only handed out under `&self`, the global one
        // never drops).
        let lib =
            unsafe { load_library(path) }.map_err(|c| LoadError::NotFound { tried: vec![c] })?;

        // SAFETY: the library is a CUDA driver (the caller's promise), so the symbol is the
        // driver's, with the C type of `PFN_cuDriverGetVersion_v2020`
        // (so are the `cuGetProcAddress` lookups below, of `PFN_cuGetProcAddress_v12000` and
        // `_v11030`); the pointers are kept in the `Driver` that keeps `lib` loaded.
        let get_version = unsafe { lib.get::<DriverGetVersion>(b"cuDriverGetVersion\0") }
            .ok()
            .map(|s| *s);
        // SAFETY: as above; only whether it exists is used.
        let has_init = unsafe { lib.get::<*mut c_void>(b"cuInit\0") }.is_ok();
        let Some(get_version) = get_version.filter(|_| has_init) else {
            let lacks = match (has_init, get_version.is_some()) {
                (false, false) => "it exports neither cuInit nor cuDriverGetVersion",
                (false, true) => "it does not export cuInit",
                _ => "it does not export cuDriverGetVersion",
            };
            return Err(LoadError::NotADriver {
                path: path.to_os_string(),
                reason: lacks.to_string(),
            });
        };
        let mut v = 0;
        // SAFETY: `v` is a valid out-pointer for the call's duration; cuDriverGetVersion may be
        // called before cuInit.
        let rc = unsafe { get_version(&mut v) };
        let driver_version = (rc == CUresult::CUDA_SUCCESS && v > 0).then_some(v);

        // SAFETY: as above.
        let proc_address = match unsafe { lib.get::<GetProcAddressV2>(b"cuGetProcAddress_v2\0") } {
            Ok(f) => ProcAddress::V2(*f),
            // SAFETY: as above.
            Err(_) => match unsafe { lib.get::<GetProcAddressV1>(b"cuGetProcAddress\0") } {
                Ok(f) => ProcAddress::V1(*f),
                Err(_) => ProcAddress::None,
            },
        };
        Ok(Driver {
            lib,
            path: path.to_os_string(),
            slots: (0..SYMBOL_COUNT)
                .map(|_| AtomicPtr::new(ptr::null_mut()))
                .collect(),
            proc_address,
            driver_version,
            abi_limit: options.abi_version,
        })
    }

    /// Opens the first library of [`Driver::candidates`] that loads, with the ABI limit of
    /// `CUDA_SYS_ABI_VERSION` if set ([`DriverOptions::from_env`]).
    ///
    /// Safe, unlike [`Driver::open`]: it loads the system's driver by its usual names, or the
    /// library that the process's own environment names in `CUDA_SYS_LIBCUDA`. Whoever sets
    /// that variable chooses what the process loads, as with `LD_LIBRARY_PATH` or `LD_PRELOAD`,
    /// which already decide which library the name `libcuda.so.1` finds: it is part of the
    /// environment the program runs in, trusted like the system's libraries, not a value the
    /// program's code passes in. A library named there that is no CUDA driver is the
    /// environment's fault, as a broken libcuda would be.
    pub fn open_default() -> Result<Driver, LoadError> {
        Self::open_default_with(DriverOptions::from_env()?)
    }

    /// Opens the first library of [`Driver::candidates`] that loads, with `options` (safe, as
    /// [`Driver::open_default`] says).
    pub fn open_default_with(options: DriverOptions) -> Result<Driver, LoadError> {
        let mut tried = Vec::new();
        for path in Self::candidates() {
            // SAFETY: a candidate is the system's driver by its usual names, or the library the
            // environment names in `CUDA_SYS_LIBCUDA`: the libraries this process is configured
            // to trust as its CUDA driver (see `open_default`).
            match unsafe { Driver::open_with(&path, options) } {
                Ok(d) => return Ok(d),
                Err(LoadError::NotFound { tried: t }) => tried.extend(t),
                Err(e) => return Err(e),
            }
        }
        Err(LoadError::NotFound { tried })
    }

    /// The files [`Driver::open_default`] tries, in order: the file named by `CUDA_SYS_LIBCUDA`
    /// (alone, when set), else `libcuda.so.1` then `libcuda.so` (Linux), or `nvcuda.dll` from the
    /// system folder (Windows; never the current directory).
    pub fn candidates() -> Vec<OsString> {
        if let Some(p) = std::env::var_os(DRIVER_PATH_VAR).filter(|p| !p.is_empty()) {
            return vec![p];
        }
        default_candidates()
    }

    /// The name or path this library was opened from.
    pub fn path(&self) -> &Path {
        Path::new(&self.path)
    }

    /// `cuDriverGetVersion`: the CUDA version the driver supports (`1000 * major + 10 * minor`),
    /// asked now (0 if the call fails).
    pub fn version(&self) -> Result<i32, LoadError> {
        let f = self.cuDriverGetVersion()?;
        let mut v = 0;
        // SAFETY: `v` is a valid out-pointer for the call's duration.
        let rc = unsafe { f(&mut v) };
        Ok(if rc == CUresult::CUDA_SUCCESS { v } else { 0 })
    }

    /// The driver's version as it answered when the library was opened; `None` if it did not.
    pub fn driver_version(&self) -> Option<i32> {
        self.driver_version
    }

    /// The newest ABI this driver's bindings resolve (`1000 * major + 10 * minor`): the driver's
    /// version, or the configured limit ([`DriverOptions::abi_version`], `CUDA_SYS_ABI_VERSION`)
    /// when that is lower. With neither known, the header's version.
    pub fn abi_version(&self) -> u32 {
        let driver = self
            .driver_version
            .and_then(|v| u32::try_from(v).ok())
            .unwrap_or(crate::HEADER_CUDA_VERSION);
        self.abi_limit.map_or(driver, |l| l.min(driver))
    }

    /// The configured ABI limit, if any (whether or not the driver is older still).
    pub fn abi_limit(&self) -> Option<u32> {
        self.abi_limit
    }
}

/// Loads the library at `path` (a file name the dynamic loader searches for, or a path), or the
/// [`Candidate`] that says why not: a path that is missing, a directory or empty
/// ([`unusable_file`]), or the loader's error. The one load of every loader here.
///
/// # Safety
///
/// As [`libloading::Library::new`]: loading runs the library's initialisers, which must be sound
/// to run now, on this thread; the caller also keeps the library loaded while any pointer from it
/// is live.
pub(super) unsafe fn load_library(path: &OsStr) -> Result<libloading::Library, Candidate> {
    let not_found = |reason: String| Candidate {
        path: path.to_os_string(),
        reason,
    };
    if let Some(reason) = unusable_file(path) {
        return Err(not_found(reason));
    }
    // SAFETY: the caller's promise (above).
    unsafe { libloading::Library::new(path) }.map_err(|e| not_found(error_chain(&e)))
}

/// Why `path` cannot be a library, for a path (not a bare name the loader searches for) that is
/// missing, a directory or empty.
pub(super) fn unusable_file(path: &OsStr) -> Option<String> {
    let p = Path::new(path);
    if p.components().count() < 2 && !p.is_absolute() {
        return None;
    }
    match std::fs::metadata(p) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Some("no such file".into()),
        Err(e) => Some(format!("cannot be read: {e}")),
        Ok(m) if m.is_dir() => Some("a directory, not a library file".into()),
        Ok(m) if m.len() == 0 => Some("an empty file, not a library".into()),
        Ok(_) => None,
    }
}

#[cfg(windows)]
fn default_candidates() -> Vec<OsString> {
    // Only the system folder: never the current directory, where a planted DLL could be picked up.
    let dir = std::env::var_os("SystemRoot")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(r"C:\Windows"))
        .join("System32");
    vec![dir.join("nvcuda.dll").into_os_string()]
}

#[cfg(not(windows))]
fn default_candidates() -> Vec<OsString> {
    let _ = PathBuf::new;
    vec!["libcuda.so.1".into(), "libcuda.so".into()]
}
