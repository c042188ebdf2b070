//! [`Nvrtc`]: an opened NVRTC library (`libnvrtc.so.13`), found at run time beside Python (the
//! `nvidia-cuda-nvrtc` wheel), by its usual names or in a CUDA toolkit, with its functions
//! resolved by name on first use.

use std::ffi::{OsStr, OsString, c_int, c_void};
use std::fmt;
use std::path::Path;
use std::sync::OnceLock;

use super::by_name::ByName;
use super::error::list;
use super::{Candidate, driver::load_library};
use crate::generated::nvrtc::{NVRTC_RESULTS, NVRTC_SYMBOL_COUNT, NVRTC_SYMBOLS, nvrtcResult};

/// The environment variable that names the NVRTC library to load instead of the default search.
pub const NVRTC_PATH_VAR: &str = "CUDA_SYS_LIBNVRTC";

type Version = unsafe extern "C" fn(*mut c_int, *mut c_int) -> nvrtcResult;

/// Why NVRTC, or one of its functions, is not available (`Display` and `Error` by hand, as for
/// [`LoadError`](crate::LoadError)).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum NvrtcLoadError {
    /// No candidate library could be opened; each entry says which place and why (a file the
    /// dynamic loader could not open, a folder without NVRTC, or Python without the wheel).
    NotFound {
        /// Every place, in the order tried.
        tried: Vec<Candidate>,
    },
    /// The library loaded, but it is not NVRTC: it does not export `nvrtcVersion`, or that call
    /// fails.
    NotNvrtc {
        /// The file name or path it was opened from.
        path: OsString,
        /// What is wrong.
        reason: String,
    },
    /// The library does not export a function this program needs (an older NVRTC).
    MissingSymbol {
        /// The function's name.
        name: &'static str,
        /// The library's version (`nvrtcVersion`: major, minor).
        version: (i32, i32),
    },
}

impl fmt::Display for NvrtcLoadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NvrtcLoadError::NotFound { tried } => {
                write!(f, "no NVRTC library could be loaded; tried {}", list(tried))
            }
            NvrtcLoadError::NotNvrtc { path, reason } => {
                write!(f, "{} is not NVRTC: {reason}", path.to_string_lossy())
            }
            NvrtcLoadError::MissingSymbol { name, version } => {
                write!(
                    f,
                    "{name} is not exported by NVRTC {}.{}",
                    version.0, version.1
                )
            }
        }
    }
}

/// No source: each variant says all there is.
impl std::error::Error for NvrtcLoadError {}

/// The name of an `nvrtcResult` (`NVRTC_ERROR_COMPILATION`), without loading NVRTC.
pub fn nvrtc_result_name(result: nvrtcResult) -> &'static str {
    match NVRTC_RESULTS.binary_search_by_key(&result.0, |r| r.0) {
        Ok(i) => NVRTC_RESULTS[i].1,
        Err(_) => "an unknown nvrtcResult",
    }
}

/// An opened NVRTC library with a table of lazily resolved function pointers.
///
/// Methods named after the functions (`nvrtc.nvrtcCompileProgram()`) return that function's
/// pointer, looked up by its exported name on first use and cached; a function the library does
/// not export gives [`NvrtcLoadError::MissingSymbol`]. The library stays loaded as long as the
/// `Nvrtc` lives, and the pointers it hands out must not be called after it is dropped.
pub struct Nvrtc {
    lib: libloading::Library,
    /// The builtins library loaded from beside `lib`, if any (see [`builtins_beside`]).
    builtins: Option<libloading::Library>,
    path: OsString,
    slots: ByName,
    version: (i32, i32),
}

impl fmt::Debug for Nvrtc {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Nvrtc")
            .field("path", &self.path)
            .field("version", &self.version)
            .field("builtins_preloaded", &self.builtins.is_some())
            .finish_non_exhaustive()
    }
}

static GLOBAL: OnceLock<Result<Nvrtc, NvrtcLoadError>> = OnceLock::new();

impl Nvrtc {
    /// Opens the NVRTC library at `path` (a file name the dynamic loader searches for, or a
    /// path). A path that is missing, a directory or empty is [`NvrtcLoadError::NotFound`]; a
    /// library without a working `nvrtcVersion` is [`NvrtcLoadError::NotNvrtc`]. (Those checks
    /// catch a wrong path, not a wrong library: see the safety section.)
    ///
    /// The safe way to NVRTC is [`Nvrtc::global`] (or [`Nvrtc::open_default`]), which finds it
    /// where [`Nvrtc::candidates`] says, or loads the library the process's own environment
    /// names in `CUDA_SYS_LIBNVRTC`.
    ///
    /// # Safety
    ///
    /// Loading a library runs its initialisers, and opening it calls its `nvrtcVersion` (every
    /// other function is called later, by whoever uses the `Nvrtc`): nothing can check that a
    /// file is what its name says. `path` must name an NVRTC library (or a stand-in for one),
    /// whose exported `nvrtc*` functions have the types and the behaviour of NVRTC's functions
    /// of those names, and whose initialisers are sound to run now, on this thread. The same
    /// holds for [`libloading::Library::new`], which is `unsafe` for this reason. Where `path`
    /// is a path, the builtins library of its version beside it (`libnvrtc-builtins.so.13.0`
    /// for NVRTC 13.0) is loaded too (see below), and must be NVRTC's.
    ///
    /// NVRTC opens its builtins library (`libnvrtc-builtins.so.<major>.<minor>`) by name when it
    /// first compiles, and a wheel's NVRTC has no run path to find it beside itself: opened by
    /// path from a Python environment it would fail every compilation with
    /// `NVRTC_ERROR_BUILTIN_OPERATION_FAILURE`. So the file of that name beside `path`, where
    /// there is one, is loaded first and kept loaded with the `Nvrtc`, and NVRTC's own lookup
    /// finds it loaded.
    pub unsafe fn open(path: impl AsRef<OsStr>) -> Result<Nvrtc, NvrtcLoadError> {
        let path = path.as_ref();
        // SAFETY: the caller promises an NVRTC library, whose initialisers are sound to run at
        // any time and in any thread; the library is never unloaded while a pointer from it is
        // live (pointers are handed out under `&self`, and the global one never drops).
        let lib = unsafe { load_library(path) }
            .map_err(|c| NvrtcLoadError::NotFound { tried: vec![c] })?;
        let not_nvrtc = |reason: &str| NvrtcLoadError::NotNvrtc {
            path: path.to_os_string(),
            reason: reason.to_string(),
        };
        // SAFETY: the library is NVRTC (the caller's promise), and `nvrtcVersion` has this C
        // type in every NVRTC (`nvrtcResult (int *, int *)`).
        let get_version = unsafe { lib.get::<Version>(b"nvrtcVersion\0") }
            .map(|s| *s)
            .map_err(|_| not_nvrtc("it does not export nvrtcVersion"))?;
        let (mut major, mut minor) = (0, 0);
        // SAFETY: both are valid out-pointers for the call's duration.
        let rc = unsafe { get_version(&mut major, &mut minor) };
        if rc != nvrtcResult::NVRTC_SUCCESS || major <= 0 {
            return Err(not_nvrtc("nvrtcVersion failed"));
        }
        let builtins = builtins_beside(path, (major, minor)).and_then(|b| {
            // SAFETY: NVRTC's builtins library of its own version, beside the NVRTC the caller
            // vouched for (the caller's promise covers it); it is kept loaded with `lib`.
            unsafe { libloading::Library::new(b) }.ok()
        });
        Ok(Nvrtc {
            lib,
            builtins,
            path: path.to_os_string(),
            slots: ByName::new(NVRTC_SYMBOL_COUNT),
            version: (major, minor),
        })
    }

    /// Opens the first library of [`Nvrtc::candidates`] that loads; when none does, the error
    /// lists every place tried and why, Python's answer included.
    ///
    /// Safe, unlike [`Nvrtc::open`]: it loads NVRTC from the places the system and the Python
    /// environment install it, or the library that the process's own environment names in
    /// `CUDA_SYS_LIBNVRTC`, which is part of the environment the program runs in (as
    /// `LD_LIBRARY_PATH` is), not a value its code passes in; see
    /// [`Driver::open_default`](crate::Driver::open_default).
    pub fn open_default() -> Result<Nvrtc, NvrtcLoadError> {
        let mut tried = Vec::new();
        for place in search() {
            let path = match place {
                Place::File(path) => path,
                Place::Nothing(c) => {
                    tried.push(c);
                    continue;
                }
            };
            // SAFETY: NVRTC from the Python environment's wheel, a CUDA toolkit or by its usual
            // names, or the library the environment names in `CUDA_SYS_LIBNVRTC`: what this
            // process is configured to trust as NVRTC.
            match unsafe { Nvrtc::open(&path) } {
                Ok(n) => return Ok(n),
                Err(NvrtcLoadError::NotFound { tried: t }) => tried.extend(t),
                Err(e) => return Err(e),
            }
        }
        Err(NvrtcLoadError::NotFound { tried })
    }

    /// The files [`Nvrtc::open_default`] tries, in order: the file named by `CUDA_SYS_LIBNVRTC`
    /// (alone, when set); else the NVRTC wheel of the Python environment (`python3` is asked
    /// for the `nvidia` package's folders: `nvidia/cu13/lib/libnvrtc.so.13` of
    /// `nvidia-cuda-nvrtc` 13, `nvidia/cuda_nvrtc/lib/libnvrtc.so.12` of
    /// `nvidia-cuda-nvrtc-cu12`), then `libnvrtc.so.13`, `libnvrtc.so.12` and `libnvrtc.so`
    /// by name, then those files in the `lib64` folders of `$CUDA_HOME`, `$CUDA_PATH`,
    /// `/usr/local/cuda` and `/opt/cuda`. (On Windows: `nvrtc64_130_0.dll` and
    /// `nvrtc64_120_0.dll` from `%CUDA_PATH%\bin`.)
    pub fn candidates() -> Vec<OsString> {
        search()
            .into_iter()
            .filter_map(|p| match p {
                Place::File(path) => Some(path),
                Place::Nothing(_) => None,
            })
            .collect()
    }

    /// The process-wide NVRTC, opened by [`Nvrtc::open_default`] on first use. A failure is
    /// remembered: every later call returns the same error.
    pub fn global() -> Result<&'static Nvrtc, NvrtcLoadError> {
        GLOBAL
            .get_or_init(Nvrtc::open_default)
            .as_ref()
            .map_err(Clone::clone)
    }

    /// Makes `nvrtc` the process-wide NVRTC, if none has been loaded (or tried) yet; otherwise
    /// hands it back.
    pub fn install_global(nvrtc: Nvrtc) -> Result<(), Nvrtc> {
        let mut slot = Some(nvrtc);
        GLOBAL.get_or_init(|| match slot.take() {
            Some(n) => Ok(n),
            None => Err(NvrtcLoadError::NotFound { tried: Vec::new() }),
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

    /// `nvrtcVersion`'s answer when the library was opened: `(major, minor)`, such as
    /// `(13, 0)`.
    pub fn version(&self) -> (i32, i32) {
        self.version
    }

    /// The pointer of binding `i`, resolved on first use.
    #[inline]
    pub(crate) fn symbol(&self, i: usize) -> Result<*mut c_void, NvrtcLoadError> {
        self.slots
            .get(&self.lib, &NVRTC_SYMBOLS, i)
            .ok_or_else(|| NvrtcLoadError::MissingSymbol {
                name: NVRTC_SYMBOLS[i].to_str().unwrap_or("?"),
                version: self.version,
            })
    }
}

/// NVRTC's builtins library of `version` in the folder of `path`, if `path` is a path (not a
/// bare name, which the dynamic loader searches for, as it then does for the builtins) and the
/// file is there.
fn builtins_beside(path: &OsStr, (major, minor): (i32, i32)) -> Option<std::path::PathBuf> {
    let name = if cfg!(windows) {
        format!("nvrtc-builtins64_{major}{minor}.dll")
    } else {
        format!("libnvrtc-builtins.so.{major}.{minor}")
    };
    let dir = Path::new(path).parent()?;
    if dir.as_os_str().is_empty() {
        return None;
    }
    Some(dir.join(name)).filter(|b| b.is_file())
}

/// One step of the search: a file to try, or a place that has none (and why).
enum Place {
    File(OsString),
    Nothing(Candidate),
}

fn nothing(place: impl Into<OsString>, reason: impl Into<String>) -> Place {
    Place::Nothing(Candidate {
        path: place.into(),
        reason: reason.into(),
    })
}

/// Every place [`Nvrtc::open_default`] looks, in order.
fn search() -> Vec<Place> {
    if let Some(p) = std::env::var_os(NVRTC_PATH_VAR).filter(|p| !p.is_empty()) {
        return vec![Place::File(p)];
    }
    let mut out = beside_python();
    out.extend(NAMES.iter().map(|n| Place::File(n.into())));
    for dir in toolkit_dirs() {
        let found: Vec<Place> = NAMES
            .iter()
            .map(|n| dir.join(n))
            .filter(|p| p.is_file())
            .map(|p| Place::File(p.into_os_string()))
            .collect();
        if !found.is_empty() {
            out.extend(found);
        } else if dir.is_dir() {
            out.push(nothing(dir, format!("none of {} in it", NAMES.join(", "))));
        } else {
            out.push(nothing(dir, "no such folder"));
        }
    }
    out
}

/// NVRTC's usual file names, newest first.
#[cfg(not(windows))]
const NAMES: [&str; 3] = ["libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so"];
#[cfg(windows)]
const NAMES: [&str; 2] = ["nvrtc64_130_0.dll", "nvrtc64_120_0.dll"];

/// The folders of a CUDA toolkit's libraries: `$CUDA_HOME`, `$CUDA_PATH`, then the usual
/// install locations, each once.
fn toolkit_dirs() -> Vec<std::path::PathBuf> {
    let sub = if cfg!(windows) { "bin" } else { "lib64" };
    let mut roots: Vec<std::path::PathBuf> = ["CUDA_HOME", "CUDA_PATH"]
        .iter()
        .filter_map(std::env::var_os)
        .filter(|v| !v.is_empty())
        .map(Into::into)
        .collect();
    if !cfg!(windows) {
        roots.extend(["/usr/local/cuda".into(), "/opt/cuda".into()]);
    }
    let mut dirs: Vec<std::path::PathBuf> = Vec::new();
    for dir in roots.into_iter().map(|r| r.join(sub)) {
        if !dirs.contains(&dir) {
            dirs.push(dir);
        }
    }
    dirs
}

/// What `python3` is asked: the NVRTC libraries of the `nvidia` package's wheels, one a line.
/// The current folder is taken off `sys.path` first, so that a folder named `nvidia` there is
/// not taken for the package.
const PYTHON_SCRIPT: &str = r#"import os, sys
sys.path = [p for p in sys.path if p not in ("", ".", os.getcwd())]
try:
    import nvidia
except ImportError as e:
    sys.exit(f"no nvidia package ({e})")
subs = ("cu13/lib/libnvrtc.so.13", "cuda_nvrtc/lib/libnvrtc.so.12")
found = [os.path.join(d, s) for d in nvidia.__path__ for s in subs]
found = [f for f in found if os.path.isfile(f)]
if not found:
    sys.exit("none of nvidia/" + ", nvidia/".join(subs) + " in " + ", ".join(nvidia.__path__))
print("\n".join(found))
"#;

/// The NVRTC wheels installed for `python3`, or why there are none.
#[cfg(unix)]
fn beside_python() -> Vec<Place> {
    use std::os::unix::ffi::OsStrExt;
    use std::process::{Command, Stdio};

    const PLACE: &str = "the nvidia-cuda-nvrtc wheel of python3";
    let out = Command::new("python3")
        .args(["-c", PYTHON_SCRIPT])
        .stdin(Stdio::null())
        .output();
    let out = match out {
        Ok(o) => o,
        Err(e) => return vec![nothing(PLACE, format!("python3 could not be run: {e}"))],
    };
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        let reason = err.trim().lines().last().unwrap_or("").trim();
        let reason = if reason.is_empty() {
            format!("python3 failed ({})", out.status)
        } else {
            reason.to_string()
        };
        return vec![nothing(PLACE, reason)];
    }
    let found: Vec<Place> = out
        .stdout
        .split(|&b| b == b'\n')
        .filter(|l| !l.is_empty())
        .map(|l| Place::File(OsStr::from_bytes(l).to_os_string()))
        .collect();
    if found.is_empty() {
        return vec![nothing(PLACE, "python3 named no library")];
    }
    found
}

#[cfg(not(unix))]
fn beside_python() -> Vec<Place> {
    let _ = PYTHON_SCRIPT;
    Vec::new()
}
