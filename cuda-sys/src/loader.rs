//! Opening the driver library and resolving its symbols, lazily and once.
//!
//! Each binding stands for one ABI of one driver function (see [`SymbolInfo`]). The first use of
//! a binding resolves it in the cold path ([`Driver::symbol`] then `resolve`):
//!
//! 1. a binding whose ABI is newer than the driver, or than the configured ABI limit
//!    ([`DriverOptions::abi_version`], `CUDA_SYS_ABI_VERSION`), is missing, whatever the library
//!    exports: a pointer with another ABI is never handed out;
//! 2. the driver's own `cuGetProcAddress` (`cuGetProcAddress_v2` from CUDA 12.0, the four-argument
//!    one from 11.3) is asked for the binding's base name at the binding's ABI version, with the
//!    per-thread-default-stream flag for the `_ptds` / `_ptsz` variants;
//! 3. where the driver has no `cuGetProcAddress`, or it does not return the function, the exported
//!    symbol is looked up by name (`dlsym`): its name is the ABI.
//!
//! The outcome, found or missing, is cached in the binding's slot; later calls load the slot.

use std::ffi::{CStr, OsStr, OsString, c_char, c_int, c_void};
use std::fmt;
use std::path::{Path, PathBuf};
use std::ptr;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicPtr, Ordering};

use crate::generated::symbols::{SYMBOL_COUNT, SYMBOLS};
use crate::generated::types::{
    CUdriverProcAddress_flags, CUdriverProcAddressQueryResult, CUresult, cuuint64_t,
};

/// The environment variable that names the driver library to load instead of the default search.
pub const DRIVER_PATH_VAR: &str = "CUDA_SYS_LIBCUDA";

/// The environment variable that limits the ABI the process-wide driver's bindings resolve
/// (`12000` or `12.0`): a binding of a newer ABI is reported missing, as on an older driver.
pub const ABI_VERSION_VAR: &str = "CUDA_SYS_ABI_VERSION";

/// A slot value meaning "looked up, and the driver does not have it".
const MISSING: *mut c_void = ptr::dangling_mut::<c_void>();

/// One binding: one ABI of one driver function.
///
/// The bindings are the names C code writes, each meaning the ABI the pinned header maps it to
/// (`cuEventElapsedTime` is the CUDA 12.8 ABI, symbol `cuEventElapsedTime_v2`), the per-thread
/// default-stream variants under their exported names (`cuMemcpyHtoDAsync_v2_ptsz`), and for every
/// function with more than one ABI, each ABI under the suffix of its `cudaTypedefs.h` typedef
/// (`cuEventElapsedTime_v2000` and `cuEventElapsedTime_v12080`, `cuStreamGetCaptureInfo_v10010_ptsz`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct SymbolInfo {
    /// The binding's name, such as `cuStreamDestroy` or `cuEventElapsedTime_v2000`.
    pub name: &'static str,
    /// The exported symbol of this ABI, such as `cuStreamDestroy_v2`; looked up by name when the
    /// driver has no `cuGetProcAddress`.
    pub symbol: &'static CStr,
    /// The name `cuGetProcAddress` knows the function by, such as `cuStreamDestroy`.
    pub base: &'static CStr,
    /// The CUDA version (`1000 * major + 10 * minor`) of this ABI, from its `cudaTypedefs.h`
    /// typedef: the version asked of `cuGetProcAddress`, and the oldest driver that has it. 0
    /// where the typedefs do not record it (such a binding is never version-limited).
    pub since: u32,
    /// A per-thread default-stream variant (`_ptds`, `_ptsz`), asked of `cuGetProcAddress` with
    /// `CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM`.
    pub per_thread: bool,
}

impl SymbolInfo {
    /// Looks a binding up by name.
    pub fn find(name: &str) -> Option<&'static SymbolInfo> {
        SYMBOLS.iter().find(|s| s.name == name)
    }

    /// Every binding, sorted by name.
    pub fn all() -> &'static [SymbolInfo] {
        &SYMBOLS
    }

    /// Every ABI of the function `name` stands for (the bindings with its base name and
    /// per-thread flag, deduplicated by exported symbol), oldest first.
    pub fn abis(name: &str) -> Vec<&'static SymbolInfo> {
        let Some(me) = Self::find(name) else {
            return Vec::new();
        };
        let mut v: Vec<&'static SymbolInfo> = SYMBOLS
            .iter()
            .filter(|s| s.base == me.base && s.per_thread == me.per_thread)
            .collect();
        v.sort_by_key(|s| (s.since, s.symbol));
        v.dedup_by_key(|s| s.symbol);
        v
    }
}

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
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum LoadError {
    /// No candidate library could be opened; each entry says which file and why (missing, a
    /// directory, an empty file, or what the dynamic loader said).
    #[error("no CUDA driver library could be loaded; tried {}", list(.tried))]
    NotFound {
        /// Every candidate, in the order tried.
        tried: Vec<Candidate>,
    },
    /// The library loaded, but it is not a CUDA driver: it lacks the functions every driver has.
    #[error("{} is not a CUDA driver: {reason}", .path.to_string_lossy())]
    NotADriver {
        /// The file name or path it was opened from.
        path: OsString,
        /// What it lacks.
        reason: String,
    },
    /// An ABI limit that is not a CUDA version.
    #[error("{setting}={value:?} is not a CUDA version (write 12000 or 12.0)")]
    InvalidAbiVersion {
        /// Where it was set: [`ABI_VERSION_VAR`], or `DriverOptions::abi_version`.
        setting: &'static str,
        /// The value given.
        value: String,
    },
    /// The driver does not have this binding's ABI: it does not export it, the driver is older
    /// than the ABI, or the ABI is newer than the configured limit.
    #[error("{}", missing(name, *since, *driver_version, *abi_limit))]
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

fn list(tried: &[Candidate]) -> String {
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

/// Parses a CUDA version as `12000`, `12.0` or `12` (each meaning CUDA 12.0): `1000 * major +
/// 10 * minor`. `None` for anything else.
pub fn parse_cuda_version(text: &str) -> Option<u32> {
    let text = text.trim();
    let digits = |s: &str| !s.is_empty() && s.len() <= 6 && s.bytes().all(|b| b.is_ascii_digit());
    if let Some((major, minor)) = text.split_once('.') {
        if !digits(major) || !digits(minor) || minor.len() > 2 {
            return None;
        }
        let (major, minor): (u32, u32) = (major.parse().ok()?, minor.parse().ok()?);
        return (1..100)
            .contains(&major)
            .then_some(1000 * major + 10 * minor);
    }
    if !digits(text) {
        return None;
    }
    match text.parse::<u32>().ok()? {
        major @ 1..=99 => Some(1000 * major),
        v @ 1000..=99_990 if v % 10 == 0 => Some(v),
        _ => None,
    }
}

/// How a [`Driver`] is opened.
///
/// ```no_run
/// use cuda_sys::{Driver, DriverOptions};
///
/// // Resolve every binding as on a CUDA 12.0 driver, whatever the installed driver is.
/// let driver = Driver::open_with("libcuda.so.1", DriverOptions::new().abi_version(12000))?;
/// assert!(driver.abi_version() <= 12000);
/// assert!(driver.cuEventElapsedTime().is_err()); // the 12.8 ABI
/// assert!(driver.cuEventElapsedTime_v2000().is_ok()); // the original one
/// # Ok::<(), cuda_sys::LoadError>(())
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DriverOptions {
    abi_version: Option<u32>,
    from_env: bool,
}

impl DriverOptions {
    /// No ABI limit: every binding the driver has resolves.
    pub const fn new() -> DriverOptions {
        DriverOptions {
            abi_version: None,
            from_env: false,
        }
    }

    /// What the environment asks for: the ABI limit of `CUDA_SYS_ABI_VERSION` (`12000` or
    /// `12.0`), if set and not empty. An unparsable value is [`LoadError::InvalidAbiVersion`].
    pub fn from_env() -> Result<DriverOptions, LoadError> {
        let Some(value) = std::env::var_os(ABI_VERSION_VAR).filter(|v| !v.is_empty()) else {
            return Ok(DriverOptions::new());
        };
        let text = value.to_string_lossy();
        match parse_cuda_version(&text) {
            Some(v) => Ok(DriverOptions {
                abi_version: Some(v),
                from_env: true,
            }),
            None => Err(LoadError::InvalidAbiVersion {
                setting: ABI_VERSION_VAR,
                value: text.into_owned(),
            }),
        }
    }

    /// Resolves no binding whose ABI is newer than CUDA `version` (`1000 * major + 10 * minor`,
    /// such as 12000): each is reported missing, as it would be on a driver of that version, and
    /// code that falls back to older ABIs takes the fallback. A version below 1000 is refused
    /// when the driver is opened ([`LoadError::InvalidAbiVersion`]).
    pub const fn abi_version(mut self, version: u32) -> DriverOptions {
        self.abi_version = Some(version);
        self.from_env = false;
        self
    }

    /// The configured ABI limit, if any.
    pub const fn abi_limit(&self) -> Option<u32> {
        self.abi_version
    }
}

/// How a [`Driver`] turns a binding into a function pointer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Resolver {
    /// The driver's `cuGetProcAddress_v2` (CUDA 12.0 and later), then the exported name.
    ProcAddressV2,
    /// The driver's four-argument `cuGetProcAddress` (CUDA 11.3 to 11.8), then the exported name.
    ProcAddress,
    /// The exported name only: the driver has no `cuGetProcAddress` (before CUDA 11.3).
    SymbolLookup,
}

impl fmt::Display for Resolver {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Resolver::ProcAddressV2 => "cuGetProcAddress_v2",
            Resolver::ProcAddress => "cuGetProcAddress",
            Resolver::SymbolLookup => "symbol lookup",
        })
    }
}

type GetProcAddressV2 = unsafe extern "C" fn(
    *const c_char,
    *mut *mut c_void,
    c_int,
    cuuint64_t,
    *mut CUdriverProcAddressQueryResult,
) -> CUresult;
type GetProcAddressV1 =
    unsafe extern "C" fn(*const c_char, *mut *mut c_void, c_int, cuuint64_t) -> CUresult;
type DriverGetVersion = unsafe extern "C" fn(*mut c_int) -> CUresult;

#[derive(Clone, Copy)]
enum ProcAddress {
    V2(GetProcAddressV2),
    V1(GetProcAddressV1),
    None,
}

/// An opened driver library with a table of lazily resolved function pointers.
///
/// Methods named after bindings (`driver.cuInit()`, `driver.cuEventElapsedTime_v2000()`) return
/// that binding's pointer, resolving it on first use (through the driver's `cuGetProcAddress` at
/// the binding's ABI version, else by its exported name) and caching it; a binding the driver does not have, or whose ABI is above [`Driver::abi_version`], gives
/// [`LoadError::MissingSymbol`]. The library stays loaded as long as the `Driver` lives, and the
/// pointers it hands out must not be called after it is dropped.
pub struct Driver {
    lib: libloading::Library,
    path: OsString,
    slots: Box<[AtomicPtr<c_void>]>,
    proc_address: ProcAddress,
    /// `cuDriverGetVersion`'s answer when the library was opened.
    driver_version: Option<i32>,
    /// The configured ABI limit.
    abi_limit: Option<u32>,
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
    pub fn open(path: impl AsRef<OsStr>) -> Result<Driver, LoadError> {
        Self::open_with(path, DriverOptions::new())
    }

    /// Opens the driver library at `path` with `options`.
    ///
    /// A path (anything with a `/`) that is missing, a directory or an empty file is
    /// [`LoadError::NotFound`] saying so; a library that loads but lacks `cuInit` or
    /// `cuDriverGetVersion` is [`LoadError::NotADriver`].
    pub fn open_with(path: impl AsRef<OsStr>, options: DriverOptions) -> Result<Driver, LoadError> {
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
        let not_found = |reason: String| LoadError::NotFound {
            tried: vec![Candidate {
                path: path.to_os_string(),
                reason,
            }],
        };
        if let Some(reason) = unusable_file(path) {
            return Err(not_found(reason));
        }
        // SAFETY: loading the driver runs its initialisers; libcuda's are sound to run at any time
        // and in any thread, and the library is never unloaded while a pointer from it is live
        // (pointers from `Driver` are only handed out under `&self`, the global one never drops).
        let lib =
            unsafe { libloading::Library::new(path) }.map_err(|e| not_found(error_chain(&e)))?;

        // SAFETY: the symbol is the driver's, with the C type of `PFN_cuDriverGetVersion_v2020`
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
    pub fn open_default() -> Result<Driver, LoadError> {
        Self::open_default_with(DriverOptions::from_env()?)
    }

    /// Opens the first library of [`Driver::candidates`] that loads, with `options`.
    pub fn open_default_with(options: DriverOptions) -> Result<Driver, LoadError> {
        let mut tried = Vec::new();
        for path in Self::candidates() {
            match Driver::open_with(&path, options) {
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

    /// The process-wide driver, opened by [`Driver::open_default`] on first use (so the
    /// environment's `CUDA_SYS_LIBCUDA` and `CUDA_SYS_ABI_VERSION` apply). A failure is
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
    /// hands it back. Lets a program pick the library and options explicitly before anything
    /// else loads one.
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

    /// How this driver's bindings are resolved.
    pub fn resolver(&self) -> Resolver {
        match self.proc_address {
            ProcAddress::V2(_) => Resolver::ProcAddressV2,
            ProcAddress::V1(_) => Resolver::ProcAddress,
            ProcAddress::None => Resolver::SymbolLookup,
        }
    }

    /// Whether the driver has the binding `name` (resolving it if needed).
    pub fn has(&self, name: &str) -> bool {
        self.address(name).is_some_and(|r| r.is_ok())
    }

    /// The address of the binding `name`, resolving it if needed, as its typed accessor would
    /// (`driver.address("cuInit")` is `driver.cuInit()` as a pointer); `None` if the bindings
    /// have no such name. Cast it only to the binding's [`pfn`](crate::pfn) type.
    pub fn address(&self, name: &str) -> Option<Result<*mut c_void, LoadError>> {
        let index = SYMBOLS.iter().position(|s| s.name == name)?;
        Some(self.symbol(index))
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
            p = self.look_up(info).unwrap_or(MISSING);
            // Racing resolvers store the same value.
            self.slots[index].store(p, Ordering::Release);
        }
        if p == MISSING {
            return Err(self.missing_error(info));
        }
        Ok(p)
    }

    /// Whether a binding of ABI `since` may be handed out.
    fn allows(&self, since: u32) -> bool {
        since == 0 || since <= self.abi_version()
    }

    /// The binding's function, if the driver has its ABI and the limit allows it.
    fn look_up(&self, info: &SymbolInfo) -> Option<*mut c_void> {
        if !self.allows(info.since) {
            return None;
        }
        if info.since != 0 {
            if let Some(p) = self.proc_address(info) {
                return Some(p);
            }
        }
        // SAFETY: the symbol is only used as an opaque address here; its type is restored by
        // the generated accessor that knows the C signature of this exported name.
        let found = unsafe { self.lib.get::<*mut c_void>(info.symbol.to_bytes_with_nul()) };
        found.ok().map(|s| *s).filter(|p| !p.is_null())
    }

    /// Asks the driver's `cuGetProcAddress` for `info`'s ABI.
    fn proc_address(&self, info: &SymbolInfo) -> Option<*mut c_void> {
        let flags = if info.per_thread {
            CUdriverProcAddress_flags::CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM
        } else {
            CUdriverProcAddress_flags::CU_GET_PROC_ADDRESS_DEFAULT
        };
        let flags = cuuint64_t::from(flags.0);
        let version = c_int::try_from(info.since).ok()?;
        let mut p = ptr::null_mut();
        let rc = match self.proc_address {
            // SAFETY: a NUL-terminated name, valid out-pointers, and a version no newer than
            // the driver's (`allows` checked it); cuGetProcAddress needs no cuInit.
            ProcAddress::V2(f) => unsafe {
                let mut status = CUdriverProcAddressQueryResult::CU_GET_PROC_ADDRESS_SUCCESS;
                f(info.base.as_ptr(), &mut p, version, flags, &mut status)
            },
            // SAFETY: as above.
            ProcAddress::V1(f) => unsafe { f(info.base.as_ptr(), &mut p, version, flags) },
            ProcAddress::None => return None,
        };
        // Not found is CUDA_SUCCESS with a null pointer (v2) or CUDA_ERROR_NOT_FOUND (v1).
        (rc == CUresult::CUDA_SUCCESS && !p.is_null()).then_some(p)
    }

    fn missing_error(&self, info: &SymbolInfo) -> LoadError {
        let driver = self.driver_version;
        // The configured limit is the reason when the driver itself is new enough.
        let abi_limit = self.abi_limit.filter(|l| {
            info.since > *l
                && driver.is_none_or(|d| u32::try_from(d).is_ok_and(|d| info.since <= d))
        });
        LoadError::MissingSymbol {
            name: info.name,
            symbol: info.symbol.to_str().unwrap_or(info.name),
            since: info.since,
            driver_version: driver,
            abi_limit: abi_limit.map(|l| l as i32),
        }
    }
}

/// Why `path` cannot be a library, for a path (not a bare name the loader searches for) that is
/// missing, a directory or empty.
fn unusable_file(path: &OsStr) -> Option<String> {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_parse_in_both_spellings() {
        assert_eq!(parse_cuda_version("12000"), Some(12000));
        assert_eq!(parse_cuda_version("12.0"), Some(12000));
        assert_eq!(parse_cuda_version(" 12.8 "), Some(12080));
        assert_eq!(parse_cuda_version("11.4"), Some(11040));
        assert_eq!(parse_cuda_version("13"), Some(13000));
        assert_eq!(parse_cuda_version("12080"), Some(12080));
        for bad in [
            "", "abc", "12.", ".5", "12.0.1", "120", "12005", "-12", "12.100", "1e4",
        ] {
            assert_eq!(parse_cuda_version(bad), None, "{bad}");
        }
    }

    /// Every binding's type is its ABI's `cudaTypedefs.h` typedef.
    #[test]
    fn every_binding_has_the_signature_of_its_typedef() {
        use crate::generated::functions::PFN_TYPES;
        let wrong: Vec<_> = PFN_TYPES
            .iter()
            .filter(|(_, _, binding, typedef)| binding() != typedef())
            .map(|(name, pfn, _, _)| format!("{name} is not {pfn}"))
            .collect();
        assert!(wrong.is_empty(), "{wrong:#?}");
        // Every binding with a recorded ABI is checked, every versioned variant among them.
        let checked: Vec<&str> = PFN_TYPES.iter().map(|t| t.0).collect();
        for s in SymbolInfo::all() {
            assert_eq!(s.since != 0, checked.contains(&s.name), "{s:?}");
            let suffix = s.name.strip_prefix(s.base.to_str().unwrap());
            if let Some(v) = suffix.and_then(|x| x.strip_prefix("_v")) {
                let v = v.trim_end_matches("_ptsz").trim_end_matches("_ptds");
                if v.len() >= 4 {
                    assert_eq!(v.parse::<u32>().ok(), Some(s.since), "{s:?}");
                }
            }
        }
        // The check can fail: two ABIs of one function with different signatures differ.
        use crate::generated::functions::pfn;
        use crate::generated::typedefs;
        use core::any::TypeId;
        assert_ne!(
            TypeId::of::<Option<pfn::cuCtxCreate_v3020>>(),
            TypeId::of::<typedefs::PFN_cuCtxCreate_v11040>()
        );
        assert_ne!(
            TypeId::of::<Option<pfn::cuMemGetInfo_v2000>>(),
            TypeId::of::<typedefs::PFN_cuMemGetInfo_v3020>()
        );
        assert_eq!(
            TypeId::of::<Option<pfn::cuEventElapsedTime_v2000>>(),
            TypeId::of::<typedefs::PFN_cuEventElapsedTime_v2000>()
        );
    }
}
