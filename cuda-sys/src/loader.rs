//! Opening the driver library and resolving its symbols, lazily and once.

use std::ffi::{CStr, OsStr, OsString, c_void};
use std::fmt;
use std::path::{Path, PathBuf};
use std::ptr;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicPtr, Ordering};

use crate::generated::functions::{SYMBOL_COUNT, SYMBOLS};
use crate::generated::types::CUresult;

/// The environment variable that names the driver library to load instead of the default search.
pub const DRIVER_PATH_VAR: &str = "CUDA_SYS_LIBCUDA";

/// A slot value meaning "looked up, and the driver does not export it".
const MISSING: *mut c_void = ptr::dangling_mut::<c_void>();

/// One driver function: the name C code writes, the symbol it stands for, and the CUDA version
/// (`1000 * major + 10 * minor`) that introduced that symbol, or 0 where the header's typedefs do
/// not record it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SymbolInfo {
    /// The name C code writes, such as `cuStreamDestroy`.
    pub name: &'static str,
    /// The exported symbol, such as `cuStreamDestroy_v2`.
    pub symbol: &'static CStr,
    /// The CUDA version that introduced `symbol`.
    pub since: u32,
}

impl SymbolInfo {
    /// Looks a function up by the name C code writes.
    pub fn find(name: &str) -> Option<&'static SymbolInfo> {
        SYMBOLS.iter().find(|s| s.name == name)
    }

    /// Every function of the bindings.
    pub fn all() -> &'static [SymbolInfo] {
        &SYMBOLS
    }
}

/// A library file that was tried and why it could not be used.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Candidate {
    /// The file name or path passed to the dynamic loader.
    pub path: OsString,
    /// What the loader said.
    pub reason: String,
}

impl fmt::Display for Candidate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.path.to_string_lossy(), self.reason)
    }
}

/// Why the driver, or one of its functions, is not available.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum LoadError {
    /// No candidate library could be opened; each entry says which file and why.
    #[error("no CUDA driver library could be loaded; tried {}", list(.tried))]
    NotFound {
        /// Every candidate, in the order tried.
        tried: Vec<Candidate>,
    },
    /// The library was opened but does not export a function the caller needs.
    #[error("{name} is not exported by the CUDA driver{}{}", driver(.driver_version), needs(*.since))]
    MissingSymbol {
        /// The name C code writes.
        name: &'static str,
        /// The exported symbol that was looked up.
        symbol: &'static str,
        /// The CUDA version that introduced it (0: not recorded).
        since: u32,
        /// The loaded driver's version, if it could tell.
        driver_version: Option<i32>,
    },
}

fn list(tried: &[Candidate]) -> String {
    let v: Vec<String> = tried.iter().map(ToString::to_string).collect();
    v.join("; ")
}

fn driver(version: &Option<i32>) -> String {
    match version {
        Some(v) => format!(" (CUDA {})", crate::format_version(*v)),
        None => String::new(),
    }
}

fn needs(since: u32) -> String {
    if since == 0 {
        String::new()
    } else {
        format!(
            "; it needs CUDA {} or later",
            crate::format_version(since as i32)
        )
    }
}

impl LoadError {
    /// The `CUresult` the C-shaped functions return for this error:
    /// `CUDA_ERROR_NOT_FOUND` ("named symbol not found") for a missing symbol and
    /// `CUDA_ERROR_SHARED_OBJECT_INIT_FAILED` when no driver library could be opened.
    pub fn to_cuda_result(&self) -> CUresult {
        match self {
            LoadError::NotFound { .. } => CUresult::CUDA_ERROR_SHARED_OBJECT_INIT_FAILED,
            LoadError::MissingSymbol { .. } => CUresult::CUDA_ERROR_NOT_FOUND,
        }
    }
}

/// An opened driver library with a table of lazily resolved function pointers.
///
/// Methods named after driver functions (`driver.cuInit()`) return that function's pointer,
/// resolving the symbol on first use and caching it; a symbol the library lacks gives
/// [`LoadError::MissingSymbol`]. The library stays loaded as long as the `Driver` lives, and the
/// pointers it hands out must not be called after it is dropped.
pub struct Driver {
    lib: libloading::Library,
    path: OsString,
    slots: Box<[AtomicPtr<c_void>]>,
}

impl fmt::Debug for Driver {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Driver")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

impl Driver {
    /// Opens the driver library at `path` (a file name the dynamic loader searches for, or a path).
    pub fn open(path: impl AsRef<OsStr>) -> Result<Driver, LoadError> {
        let path = path.as_ref();
        // SAFETY: loading the driver runs its initialisers; libcuda's are sound to run at any time
        // and in any thread, and the library is never unloaded while a pointer from it is live
        // (pointers from `Driver` are only handed out under `&self`, the global one never drops).
        match unsafe { libloading::Library::new(path) } {
            Ok(lib) => Ok(Driver {
                lib,
                path: path.to_os_string(),
                slots: (0..SYMBOL_COUNT)
                    .map(|_| AtomicPtr::new(ptr::null_mut()))
                    .collect(),
            }),
            Err(e) => Err(LoadError::NotFound {
                tried: vec![Candidate {
                    path: path.to_os_string(),
                    reason: error_chain(&e),
                }],
            }),
        }
    }

    /// Opens the first library of [`Driver::candidates`] that loads.
    pub fn open_default() -> Result<Driver, LoadError> {
        let mut tried = Vec::new();
        for path in Self::candidates() {
            match Driver::open(&path) {
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

    /// The process-wide driver, opened by [`Driver::open_default`] on first use. A failure is
    /// remembered: every later call returns the same error.
    pub fn global() -> Result<&'static Driver, LoadError> {
        GLOBAL
            .get_or_init(Driver::open_default)
            .as_ref()
            .map_err(Clone::clone)
    }

    /// The process-wide driver if it has been loaded already; never loads it.
    pub fn global_if_loaded() -> Option<&'static Driver> {
        GLOBAL.get().and_then(|r| r.as_ref().ok())
    }

    /// Makes `driver` the process-wide driver, if none has been loaded (or tried) yet; otherwise
    /// hands it back. Lets a program pick the library explicitly before anything else loads one.
    pub fn install_global(driver: Driver) -> Result<(), Driver> {
        let mut slot = Some(driver);
        GLOBAL.get_or_init(|| match slot.take() {
            Some(d) => Ok(d),
            None => Err(LoadError::NotFound { tried: Vec::new() }),
        });
        match slot {
            None => Ok(()),
            Some(d) => Err(d),
        }
    }

    /// The name or path this library was opened from.
    pub fn path(&self) -> &Path {
        Path::new(&self.path)
    }

    /// `cuDriverGetVersion`: the CUDA version the driver supports (`1000 * major + 10 * minor`).
    pub fn version(&self) -> Result<i32, LoadError> {
        let f = self.cuDriverGetVersion()?;
        let mut v = 0;
        // SAFETY: `v` is a valid out-pointer for the call's duration.
        let rc = unsafe { f(&mut v) };
        Ok(if rc == CUresult::CUDA_SUCCESS { v } else { 0 })
    }

    /// The driver version without going through the slots (the error path of a missing symbol
    /// must not recurse into itself when `cuDriverGetVersion` is the one missing).
    fn version_uncached(&self) -> Option<i32> {
        type GetVersion = unsafe extern "C" fn(*mut i32) -> CUresult;
        // SAFETY: `cuDriverGetVersion` has had this signature since CUDA 2.2.
        let f = unsafe { self.lib.get::<GetVersion>(b"cuDriverGetVersion\0") }.ok()?;
        let mut v = 0;
        // SAFETY: `v` is a valid out-pointer for the call's duration.
        let rc = unsafe { f(&mut v) };
        (rc == CUresult::CUDA_SUCCESS && v > 0).then_some(v)
    }

    /// Whether the driver exports the function C code calls `name` (resolving it if needed).
    pub fn has(&self, name: &str) -> bool {
        SYMBOLS
            .iter()
            .position(|s| s.name == name)
            .is_some_and(|i| self.symbol(i).is_ok())
    }

    /// The pointer in slot `index`, resolving it on first use.
    #[inline(always)]
    pub(crate) fn symbol(&self, index: usize) -> Result<*mut c_void, LoadError> {
        let p = self.slots[index].load(Ordering::Acquire);
        if p as usize > MISSING as usize {
            Ok(p)
        } else {
            self.resolve(index)
        }
    }

    #[cold]
    #[inline(never)]
    fn resolve(&self, index: usize) -> Result<*mut c_void, LoadError> {
        let info = &SYMBOLS[index];
        let mut p = self.slots[index].load(Ordering::Acquire);
        if p.is_null() {
            // SAFETY: the symbol is only used as an opaque address here; its type is restored by
            // the generated accessor that knows the C signature.
            let found = unsafe { self.lib.get::<*mut c_void>(info.symbol.to_bytes_with_nul()) };
            p = match found {
                Ok(sym) if !(*sym).is_null() => *sym,
                _ => MISSING,
            };
            // Racing resolvers store the same value.
            self.slots[index].store(p, Ordering::Release);
        }
        if p == MISSING {
            let driver_version = self.version_uncached();
            return Err(LoadError::MissingSymbol {
                name: info.name,
                symbol: info.symbol.to_str().unwrap_or(info.name),
                since: info.since,
                driver_version,
            });
        }
        Ok(p)
    }
}

static GLOBAL: OnceLock<Result<Driver, LoadError>> = OnceLock::new();

/// The process-wide driver's slots: non-null once resolved, so the hot path is one load.
static GLOBAL_SLOTS: [AtomicPtr<c_void>; SYMBOL_COUNT] =
    [const { AtomicPtr::new(ptr::null_mut()) }; SYMBOL_COUNT];

/// The process-wide driver's pointer for slot `index`.
#[inline(always)]
pub(crate) fn global_symbol(index: usize) -> Result<*mut c_void, LoadError> {
    let p = GLOBAL_SLOTS[index].load(Ordering::Acquire);
    if p.is_null() {
        global_symbol_slow(index)
    } else {
        Ok(p)
    }
}

#[cold]
#[inline(never)]
fn global_symbol_slow(index: usize) -> Result<*mut c_void, LoadError> {
    let p = Driver::global()?.symbol(index)?;
    GLOBAL_SLOTS[index].store(p, Ordering::Release);
    Ok(p)
}

fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        s.push_str(": ");
        s.push_str(&c.to_string());
        cur = c.source();
    }
    s
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
