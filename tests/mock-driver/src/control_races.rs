//! [`MockDriver`]'s view of the race detector (`exports/races.rs`): the races found, accesses a
//! test declares, and [`RaceCheck`], which fails a test that leaves a race behind.

use std::ffi::{c_int, c_void};
use std::sync::{Mutex, MutexGuard};

use crate::MockDriver;

impl MockDriver {
    /// Races the detector found since the last reset (or [`MockDriver::clear_races`]).
    pub fn races(&self) -> u64 {
        self.control::<extern "C" fn() -> u64>(b"cuda_mock_races\0")()
    }

    /// The reports of the first races found (64 at most), each naming both operations: the
    /// driver call, where it ran (stream, graph node or host) and the byte range.
    pub fn race_reports(&self) -> Vec<String> {
        let f = self.control::<unsafe extern "C" fn(u32, *mut u8, usize) -> i64>(
            b"cuda_mock_race_report\0",
        );
        let mut out = Vec::new();
        for i in 0.. {
            // SAFETY: a null buffer asks for the length only.
            let Ok(len) = usize::try_from(unsafe { f(i, std::ptr::null_mut(), 0) }) else {
                break;
            };
            let mut buf = vec![0u8; len];
            // SAFETY: `buf` holds `len` writable bytes.
            unsafe { f(i, buf.as_mut_ptr(), len) };
            out.push(String::from_utf8_lossy(&buf).into_owned());
        }
        out
    }

    /// Forgets the races found so far (and their reports); what the detector knows of earlier
    /// accesses stays. For a test that provokes races on purpose, after checking them.
    pub fn clear_races(&self) {
        self.control::<extern "C" fn()>(b"cuda_mock_clear_races\0")()
    }

    /// Declares that the host reads (or writes) `len` bytes at `ptr` (page-locked host memory
    /// from `cuMemHostAlloc`, or device memory) now: checked like any access, ordered after what
    /// the host learnt from synchronisations. False for memory the mock did not hand out.
    pub fn host_access(&self, ptr: u64, len: usize, write: bool) -> bool {
        let f =
            self.control::<extern "C" fn(u64, usize, c_int) -> c_int>(b"cuda_mock_host_access\0");
        f(ptr, len, c_int::from(write)) == 0
    }

    /// The address of `cuda_mock_stream_access`, through which another fake library (the fake
    /// NCCL) reports the memory its work on a stream touches:
    /// `CUresult (CUstream, const char *name, size_t n, const uint64_t *ptrs, const size_t
    /// *lens, const uint8_t *writes)`.
    pub fn stream_access_fn(&self) -> *const c_void {
        // SAFETY: only the address is taken; the library stays loaded (`-z nodelete`).
        unsafe {
            *self
                ._lib
                .get::<*const c_void>(b"cuda_mock_stream_access\0")
                .expect("the mock exports cuda_mock_stream_access")
        }
    }

    /// Panics, listing the reports, if the detector found a race.
    #[track_caller]
    pub fn assert_no_races(&self) {
        let n = self.races();
        if n > 0 {
            panic!(
                "the race detector found {n} race(s):\n{}",
                self.race_reports().join("\n")
            );
        }
    }

    /// Locks `lock` (which serialises a test binary's tests: the mock's state is process-wide),
    /// resets the mock, and returns a guard that, when the test ends without a panic, fails it
    /// if a race was found meanwhile ([`RaceCheck`]), then unlocks.
    pub fn serialize(&'static self, lock: &'static Mutex<()>) -> Serialized {
        let guard = lock.lock().unwrap_or_else(|e| e.into_inner());
        self.reset();
        self.checked(guard)
    }

    /// [`serialize`](MockDriver::serialize) for a lock already taken, without a reset: the
    /// races found before are forgotten.
    pub fn checked(&'static self, guard: MutexGuard<'static, ()>) -> Serialized {
        self.clear_races();
        Serialized {
            _check: RaceCheck(self),
            _guard: guard,
        }
    }
}

/// Fails the test (panics, listing the races) when dropped at the end of a test that found a
/// race and is not already panicking. Test infrastructure only: nothing else may panic in a
/// `Drop`.
#[derive(Debug)]
pub struct RaceCheck(pub &'static MockDriver);

impl Drop for RaceCheck {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            self.0.assert_no_races();
        }
    }
}

/// A test's hold on the mock: see [`MockDriver::serialize`]. The race check runs before the
/// lock is released.
#[derive(Debug)]
pub struct Serialized {
    _check: RaceCheck,
    _guard: MutexGuard<'static, ()>,
}
