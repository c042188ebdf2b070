//! Completion cases: waiting for a stream's work by `cuStreamSynchronize`, by spinning on a flag a
//! host function sets, and by `block_on(stream.completed())`, after host or kernel busy work.

use std::ffi::c_void;
use std::future::Future;
use std::pin::pin;
use std::ptr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context as TaskContext, Poll, Wake, Waker};
use std::thread::{self, Thread};
use std::time::{Duration, Instant};

use cuda_stream_sys as sys;

use crate::host_fns::raw_host_fn;
use crate::{Case, Fixture, ok};

/// Set by [`raw_flag_fn`]: what a spinning wait watches.
static FLAG: AtomicBool = AtomicBool::new(false);

unsafe extern "C" fn raw_flag_fn(_user_data: *mut c_void) {
    FLAG.store(true, Ordering::Release);
}

/// Work on the driver's thread: spins for `user_data` microseconds.
unsafe extern "C" fn spin_fn(user_data: *mut c_void) {
    let until = Instant::now() + Duration::from_micros(user_data as u64);
    while Instant::now() < until {
        std::hint::spin_loop();
    }
}

pub(crate) struct ThreadWaker(pub(crate) Thread);

impl Wake for ThreadWaker {
    fn wake(self: Arc<Self>) {
        self.0.unpark();
    }
    fn wake_by_ref(self: &Arc<Self>) {
        self.0.unpark();
    }
}

/// The benchmark's executor: poll, park until woken.
fn block_on<F: Future>(fut: F, waker: &Waker) -> F::Output {
    let mut fut = pin!(fut);
    let mut cx = TaskContext::from_waker(waker);
    loop {
        match fut.as_mut().poll(&mut cx) {
            Poll::Ready(v) => return v,
            Poll::Pending => thread::park(),
        }
    }
}

impl Fixture {
    /// Runs a completion case `c`; false if `c` is not one.
    #[inline(always)]
    pub(crate) fn completion(&self, c: &Case<'_>) -> bool {
        let Case {
            name,
            iters,
            us,
            spin,
            s,
            launch,
            sync,
            ..
        } = *c;
        let work = |stream: sys::CUstream| {
            let us = us.expect("the work's length in µs, after ':'");
            if name.starts_with('k') {
                self.kernels().spin(&self.stream, Duration::from_micros(us));
            } else {
                // SAFETY: `spin_fn` matches `CUhostFn` and reads its argument as a number.
                ok(unsafe { launch(stream, Some(spin_fn), us as *mut c_void) });
            }
        };
        match name {
            "completed-raw" => {
                for _ in 0..iters {
                    // SAFETY: the function matches `CUhostFn` and ignores its argument.
                    ok(unsafe { launch(s, Some(raw_host_fn), ptr::null_mut()) });
                    // SAFETY: a live stream.
                    ok(unsafe { sync(s) });
                }
            }
            "busy-raw" | "kbusy-raw" => {
                for _ in 0..iters {
                    work(s);
                    // SAFETY: a live stream.
                    ok(unsafe { sync(s) });
                }
            }
            "busy-completed" | "kbusy-completed" => {
                for _ in 0..iters {
                    work(s);
                    let mut c = self.stream.completed();
                    if let Some(spin) = spin {
                        c = c.spin_limit(Duration::from_micros(spin));
                    }
                    block_on(c, &self.waker).expect("completed");
                }
            }
            "completed-raw-flag" => {
                for _ in 0..iters {
                    FLAG.store(false, Ordering::Relaxed);
                    // SAFETY: the function matches `CUhostFn` and ignores its argument.
                    ok(unsafe { launch(s, Some(raw_flag_fn), ptr::null_mut()) });
                    while !FLAG.load(Ordering::Acquire) {
                        std::hint::spin_loop();
                    }
                }
            }
            "completed-raw-flag-yield" => {
                for _ in 0..iters {
                    FLAG.store(false, Ordering::Relaxed);
                    // SAFETY: the function matches `CUhostFn` and ignores its argument.
                    ok(unsafe { launch(s, Some(raw_flag_fn), ptr::null_mut()) });
                    while !FLAG.load(Ordering::Acquire) {
                        thread::yield_now();
                    }
                }
            }
            "completed" => {
                for _ in 0..iters {
                    block_on(self.stream.completed(), &self.waker).expect("completed");
                }
            }
            "completed-nospin" => {
                for _ in 0..iters {
                    let c = self.stream.completed().spin_limit(Duration::ZERO);
                    block_on(c, &self.waker).expect("completed");
                }
            }
            _ => return false,
        }
        true
    }
}
