//! The control handle of the fake NCCL, for tests: where its library is, and [`MockNccl`],
//! which calls its `mock_nccl_*` functions through the loaded library.

use std::ffi::{c_char, c_int};
use std::path::{Path, PathBuf};

use cuda_stream_sys::nccl::{ncclComm_t, ncclResult_t};

/// The file name of the fake NCCL on this platform.
pub fn mock_nccl_file_name() -> String {
    format!(
        "{}cuda_mock_nccl{}",
        std::env::consts::DLL_PREFIX,
        std::env::consts::DLL_SUFFIX
    )
}

/// The file name of the partial NCCL (only `ncclGetVersion` and `ncclGetUniqueId`).
pub fn partial_nccl_file_name() -> String {
    format!(
        "{}cuda_mock_nccl_partial{}",
        std::env::consts::DLL_PREFIX,
        std::env::consts::DLL_SUFFIX
    )
}

/// Looks for `file` next to the running executable and in the cargo output folders around it.
pub fn find_next_to_exe(file: &str) -> PathBuf {
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

/// The path of the fake NCCL built with the running test.
pub fn mock_nccl_path() -> PathBuf {
    find_next_to_exe(&mock_nccl_file_name())
}

/// The path of the partial NCCL built with the running test.
pub fn partial_nccl_path() -> PathBuf {
    find_next_to_exe(&partial_nccl_file_name())
}

/// The control functions of the loaded fake NCCL.
#[derive(Debug)]
pub struct MockNccl {
    lib: libloading::Library,
}

impl MockNccl {
    /// Opens the fake NCCL at `path` (the same loaded copy as `cuda_stream_sys::nccl::Nccl::open` of
    /// the same path).
    ///
    /// # Safety
    ///
    /// `path` is a build of this fake ([`mock_nccl_path`]): its control functions are called
    /// through the types they are defined with here, which nothing can check of another library
    /// (loading one runs its initialisers, too).
    pub unsafe fn open(path: impl AsRef<Path>) -> Result<MockNccl, libloading::Error> {
        // SAFETY: the fake (the caller's promise), whose initialisers are Rust statics with no
        // side effects.
        let lib = unsafe { libloading::Library::new(path.as_ref()) }?;
        Ok(MockNccl { lib })
    }

    fn f<T: Copy>(&self, name: &[u8]) -> T {
        // SAFETY: each caller names a control function with the C type `T` it is defined with.
        unsafe {
            *self
                .lib
                .get::<T>(name)
                .expect("a control function of the fake NCCL")
        }
    }

    /// Makes the fake NCCL emulate the CUDA runtime's current device (which NCCL sets and
    /// restores around its work) against the driver library at `path`: the mock driver the
    /// test loaded. Returns whether it opened.
    pub fn use_driver(&self, path: &Path) -> bool {
        let Ok(c) = std::ffi::CString::new(path.to_string_lossy().into_owned()) else {
            return false;
        };
        let f = self.f::<unsafe extern "C" fn(*const c_char) -> c_int>(b"mock_nccl_use_driver\0");
        // SAFETY: a NUL-terminated string, alive for the call.
        unsafe { f(c.as_ptr()) != 0 }
    }

    /// Forgets failure rules, counts and records.
    pub fn reset(&self) {
        self.f::<extern "C" fn()>(b"mock_nccl_reset\0")()
    }

    /// Makes call `nth` of `name` (every call for 0) return `code`.
    pub fn fail(&self, name: &str, nth: u64, code: ncclResult_t) {
        let name = std::ffi::CString::new(name).expect("a name");
        let f = self.f::<unsafe extern "C" fn(*const c_char, u64, u32)>(b"mock_nccl_fail\0");
        // SAFETY: a NUL-terminated name.
        unsafe { f(name.as_ptr(), nth, code.0) }
    }

    /// Makes `comm` report `code` asynchronously; false if it is not a live communicator.
    pub fn set_async_error(&self, comm: ncclComm_t, code: ncclResult_t) -> bool {
        self.f::<extern "C" fn(usize, u32) -> c_int>(b"mock_nccl_set_async_error\0")(
            comm as usize,
            code.0,
        ) == 1
    }

    /// How many times `name` was called since the last reset.
    pub fn calls(&self, name: &str) -> u64 {
        let name = std::ffi::CString::new(name).expect("a name");
        let f = self.f::<unsafe extern "C" fn(*const c_char) -> u64>(b"mock_nccl_calls\0");
        // SAFETY: a NUL-terminated name.
        unsafe { f(name.as_ptr()) }
    }

    /// Makes every collective report the memory it reads and writes to `hook`, the test
    /// driver's `cuda_mock_stream_access` (`cuda_mock_driver::MockDriver::stream_access_fn`), so
    /// that the driver's race detector checks it (null: no reports).
    pub fn set_access_hook(&self, hook: *const std::ffi::c_void) {
        self.f::<extern "C" fn(*const std::ffi::c_void)>(b"mock_nccl_set_access_hook\0")(hook)
    }

    /// Live communicators.
    pub fn live_comms(&self) -> u64 {
        self.f::<extern "C" fn() -> u64>(b"mock_nccl_live_comms\0")()
    }

    /// Collectives launched (their work reported: at once, or at their group's end) since the
    /// last reset. A call NCCL refuses launches nothing, nor does a group with a refused call.
    pub fn launched(&self) -> u64 {
        self.f::<extern "C" fn() -> u64>(b"mock_nccl_launched\0")()
    }

    /// Groups started and not ended.
    pub fn group_depth(&self) -> i32 {
        self.f::<extern "C" fn() -> c_int>(b"mock_nccl_group_depth\0")()
    }

    /// `(count, datatype, stream)` of the last call of `name`.
    pub fn last(&self, name: &str) -> Option<(usize, u32, usize)> {
        let name = std::ffi::CString::new(name).expect("a name");
        let f = self.f::<unsafe extern "C" fn(*const c_char, *mut [usize; 3]) -> c_int>(
            b"mock_nccl_last\0",
        );
        let mut out = [0usize; 3];
        // SAFETY: a NUL-terminated name and a writable array.
        (unsafe { f(name.as_ptr(), &mut out) } == 1).then_some((out[0], out[1] as u32, out[2]))
    }
}
