//! Where the mock's libraries are ([`mock_driver_path`], [`Flavour::path`]) and what each
//! flavour is: a CUDA version, with or without `cuGetProcAddress`.

use std::path::{Path, PathBuf};

/// The file name of the full flavour's library on this platform.
pub fn mock_driver_file_name() -> String {
    format!(
        "{}cuda_mock_driver{}",
        std::env::consts::DLL_PREFIX,
        std::env::consts::DLL_SUFFIX
    )
}

/// Looks for `file` next to the running executable and in the cargo output folders around it
/// (`target/<profile>/deps/` for tests, `target/<profile>/examples/` for examples).
fn find_next_to_exe(file: &str) -> PathBuf {
    let exe = std::env::current_exe().unwrap_or_default();
    let dir = exe.parent().unwrap_or(Path::new("."));
    let mut candidates = vec![dir.join(file), dir.join("deps").join(file)];
    if let Some(up) = dir.parent() {
        candidates.push(up.join(file));
        candidates.push(up.join("deps").join(file));
    }
    candidates
        .iter()
        .find(|p| p.is_file())
        .unwrap_or(&candidates[0])
        .clone()
}

/// The path of `libcuda_mock_driver.so` (the full flavour) built with the running test. If it
/// cannot be found, the place it was expected, so that opening it reports that path.
pub fn mock_driver_path() -> PathBuf {
    find_next_to_exe(&mock_driver_file_name())
}

/// One build of the mock: a CUDA version, with or without `cuGetProcAddress`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Flavour {
    /// `CUDA 12.2`, or `CUDA 12.2, no cuGetProcAddress`: what the tests print.
    pub name: &'static str,
    /// The CUDA version (`1000 * major + 10 * minor`) whose symbols it exports and which
    /// `cuDriverGetVersion` reports.
    pub version: i32,
    /// Whether it exports `cuGetProcAddress` (and `_v2` from CUDA 12.0).
    pub proc_address: bool,
    /// Its package (`cuda-mock-driver-12-2-noproc`); the library is named after it.
    pub package: &'static str,
}

/// The environment variable a test process reads to pick a flavour ([`Flavour::from_env`]).
pub const FLAVOUR_VAR: &str = "CUDA_MOCK_FLAVOUR";

macro_rules! flavours {
    ($(($key:literal, $version:literal, $proc:literal, $package:literal)),* $(,)?) => {
        /// Every flavour, newest first; the first is this package's (`libcuda_mock_driver.so`).
        pub const FLAVOURS: &[Flavour] = &[$(Flavour {
            name: if $proc {
                concat!("CUDA ", $key)
            } else {
                concat!("CUDA ", $key, ", no cuGetProcAddress")
            },
            version: $version,
            proc_address: $proc,
            package: $package,
        }),*];

        /// `12.2` or `12.2-noproc`, for [`FLAVOUR_VAR`].
        const KEYS: &[&str] = &[$(if $proc { $key } else { concat!($key, "-noproc") }),*];
    };
}

flavours![
    ("13.0", 13000, true, "cuda-mock-driver"),
    ("13.0", 13000, false, "cuda-mock-driver-13-0-noproc"),
    ("12.8", 12080, true, "cuda-mock-driver-12-8"),
    ("12.8", 12080, false, "cuda-mock-driver-12-8-noproc"),
    ("12.4", 12040, true, "cuda-mock-driver-12-4"),
    ("12.4", 12040, false, "cuda-mock-driver-12-4-noproc"),
    ("12.2", 12020, true, "cuda-mock-driver-12-2"),
    ("12.2", 12020, false, "cuda-mock-driver-12-2-noproc"),
    ("12.0", 12000, true, "cuda-mock-driver-12-0"),
    ("12.0", 12000, false, "cuda-mock-driver-12-0-noproc"),
    ("11.4", 11040, true, "cuda-mock-driver-11-4"),
    ("11.4", 11040, false, "cuda-mock-driver-11-4-noproc"),
];

impl Flavour {
    /// The full flavour: CUDA 13.0 with `cuGetProcAddress`, this package's library.
    pub fn full() -> &'static Flavour {
        &FLAVOURS[0]
    }

    /// `12.2` or `12.2-noproc`: how [`FLAVOUR_VAR`] names it.
    pub fn key(&self) -> &'static str {
        FLAVOURS
            .iter()
            .position(|f| f == self)
            .map_or("", |i| KEYS[i])
    }

    /// The flavour [`FLAVOUR_VAR`] names, if it is set. Panics on a name that is no flavour (a
    /// mistake in the test).
    pub fn from_env() -> Option<&'static Flavour> {
        let key = std::env::var(FLAVOUR_VAR).ok()?;
        let i = KEYS.iter().position(|k| *k == key);
        Some(&FLAVOURS[i.unwrap_or_else(|| panic!("{FLAVOUR_VAR}={key} is no flavour"))])
    }

    /// The library's file name on this platform.
    pub fn file_name(&self) -> String {
        format!(
            "{}{}{}",
            std::env::consts::DLL_PREFIX,
            self.package.replace('-', "_"),
            std::env::consts::DLL_SUFFIX
        )
    }

    /// The path of this flavour's library, built with the running test when its package is a
    /// (dev-)dependency of the test's package. If it cannot be found, the place it was expected.
    pub fn path(&self) -> PathBuf {
        find_next_to_exe(&self.file_name())
    }

    /// Whether this flavour has the ABI of the cuda-stream-sys binding `name` (by its version; for
    /// `cuGetProcAddress` also by [`Flavour::proc_address`]).
    pub fn has_abi(&self, name: &str) -> bool {
        let Some(s) = cuda_stream_sys::SymbolInfo::find(name) else {
            return false;
        };
        let proc = s.base.to_bytes() == b"cuGetProcAddress";
        i64::from(s.since) <= i64::from(self.version) && (self.proc_address || !proc)
    }
}
