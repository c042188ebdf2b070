//! Pinning the measuring thread to one CPU (`--pin-cpu`): a thread the scheduler moves between
//! CPUs, or that shares its CPU with interrupt handling, times its batches with more spread.
//! Only the calling thread is pinned; the driver's own threads (host functions, callbacks) stay
//! free to run on any CPU, as they would in a program.

/// Pins the calling thread to `cpu`.
#[cfg(target_os = "linux")]
pub(crate) fn pin_this_thread(cpu: usize) -> Result<(), String> {
    /// glibc's `cpu_set_t`: 1024 CPUs, one bit each.
    const WORDS: usize = 1024 / 64;
    unsafe extern "C" {
        fn sched_setaffinity(pid: i32, cpusetsize: usize, mask: *const u64) -> i32;
    }
    if cpu >= WORDS * 64 {
        return Err(format!(
            "CPU {cpu} is out of range (at most {})",
            WORDS * 64 - 1
        ));
    }
    let mut mask = [0u64; WORDS];
    mask[cpu / 64] |= 1 << (cpu % 64);
    // SAFETY: pid 0 is the calling thread; `mask` is a valid `cpu_set_t` of the size given.
    let rc = unsafe { sched_setaffinity(0, size_of_val(&mask), mask.as_ptr()) };
    if rc == 0 {
        Ok(())
    } else {
        Err(format!(
            "sched_setaffinity(CPU {cpu}): {}",
            std::io::Error::last_os_error()
        ))
    }
}

/// Lets the calling thread run on every CPU the process may use again (the kernel keeps the mask
/// within the process's cpuset): threads inherit their creator's pinning, and the threads of the
/// `mem_threads_*` rows must not all share the measuring thread's one CPU.
#[cfg(target_os = "linux")]
pub(crate) fn unpin_this_thread() -> Result<(), String> {
    const WORDS: usize = 1024 / 64;
    unsafe extern "C" {
        fn sched_setaffinity(pid: i32, cpusetsize: usize, mask: *const u64) -> i32;
    }
    let mask = [u64::MAX; WORDS];
    // SAFETY: pid 0 is the calling thread; `mask` is a valid `cpu_set_t` of the size given.
    let rc = unsafe { sched_setaffinity(0, size_of_val(&mask), mask.as_ptr()) };
    if rc == 0 {
        Ok(())
    } else {
        Err(format!(
            "sched_setaffinity(every CPU): {}",
            std::io::Error::last_os_error()
        ))
    }
}

/// Nothing to undo where pinning is not implemented.
#[cfg(not(target_os = "linux"))]
pub(crate) fn unpin_this_thread() -> Result<(), String> {
    Ok(())
}

/// Pins the calling thread to `cpu` (Linux only).
#[cfg(not(target_os = "linux"))]
pub(crate) fn pin_this_thread(cpu: usize) -> Result<(), String> {
    Err(format!(
        "--pin-cpu {cpu}: pinning is implemented on Linux only"
    ))
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;

    #[test]
    fn a_thread_pinned_to_cpu_0_runs_there_and_a_cpu_out_of_range_is_refused() {
        std::thread::spawn(|| {
            pin_this_thread(0).unwrap();
            unsafe extern "C" {
                fn sched_getcpu() -> i32;
            }
            for _ in 0..100 {
                std::thread::yield_now();
                // SAFETY: no arguments; returns the CPU the thread runs on.
                assert_eq!(unsafe { sched_getcpu() }, 0);
            }
        })
        .join()
        .unwrap();
        assert!(pin_this_thread(5000).unwrap_err().contains("out of range"));
    }

    #[test]
    fn a_pinned_thread_unpinned_may_run_on_every_cpu_again() {
        let all = std::thread::available_parallelism().unwrap().get();
        std::thread::spawn(move || {
            pin_this_thread(0).unwrap();
            assert_eq!(std::thread::available_parallelism().unwrap().get(), 1);
            // A thread it creates inherits the pinning, until it unpins itself.
            std::thread::spawn(move || {
                assert_eq!(std::thread::available_parallelism().unwrap().get(), 1);
                unpin_this_thread().unwrap();
                assert_eq!(std::thread::available_parallelism().unwrap().get(), all);
            })
            .join()
            .unwrap();
        })
        .join()
        .unwrap();
    }
}
