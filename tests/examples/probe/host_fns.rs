//! Host function cases: launch throughput (raw with a plain, `Arc` or boxed user data, against
//! `launch_host_func`) and round trips (a launch and a synchronize each).

use std::ffi::c_void;
use std::ptr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::{Case, Fixture, ok};

pub(crate) static HOST_CALLS: AtomicU64 = AtomicU64::new(0);

pub(crate) unsafe extern "C" fn raw_host_fn(_user_data: *mut c_void) {
    HOST_CALLS.fetch_add(1, Ordering::Relaxed);
}

/// How many host functions were still queued when the last throughput case finished
/// enqueueing: whether the launching thread ran ahead of the driver's.
pub(crate) static IN_FLIGHT: AtomicU64 = AtomicU64::new(0);

/// The raw side of the fair boxed-closure row: the `Arc` travels as the user data.
unsafe extern "C" fn raw_arc_fn(user_data: *mut c_void) {
    // SAFETY: `user_data` is an `Arc::into_raw` made for this one call.
    let counter = unsafe { Arc::from_raw(user_data.cast::<AtomicU64>()) };
    counter.fetch_add(1, Ordering::Relaxed);
}

/// What `launch_host_func` did before its blocks were recycled: a `Box` of the closure, the
/// stream and the context, allocated here and freed on the driver's thread.
struct OldHostCall {
    f: Arc<AtomicU64>,
    _stream: usize,
    _ctx: usize,
}

unsafe extern "C" fn raw_box_fn(user_data: *mut c_void) {
    // SAFETY: `user_data` is a `Box::into_raw` made for this one call.
    let call = unsafe { Box::from_raw(user_data.cast::<OldHostCall>()) };
    call.f.fetch_add(1, Ordering::Relaxed);
}

impl Fixture {
    /// Runs a host function case `c`; false if `c` is not one.
    #[inline(always)]
    pub(crate) fn host_fns(&self, c: &Case<'_>) -> bool {
        let Case {
            name,
            iters,
            s,
            launch,
            sync,
            before,
            ..
        } = *c;
        match name {
            "host-raw" => {
                for _ in 0..iters {
                    // SAFETY: the function matches `CUhostFn` and ignores its argument.
                    ok(unsafe { launch(s, Some(raw_host_fn), ptr::null_mut()) });
                }
                self.note_in_flight(before, iters);
                // SAFETY: a live stream.
                ok(unsafe { sync(s) });
            }
            "host-raw-arc" => {
                for _ in 0..iters {
                    let data = Arc::into_raw(self.counter.clone()).cast_mut().cast();
                    // SAFETY: the function takes back the `Arc` once.
                    ok(unsafe { launch(s, Some(raw_arc_fn), data) });
                }
                self.note_in_flight(before, iters);
                // SAFETY: a live stream.
                ok(unsafe { sync(s) });
            }
            "host-raw-box" => {
                for _ in 0..iters {
                    let data = Box::into_raw(Box::new(OldHostCall {
                        f: self.counter.clone(),
                        _stream: s as usize,
                        _ctx: self.ctx.raw() as usize,
                    }));
                    // SAFETY: the function takes back the box once.
                    ok(unsafe { launch(s, Some(raw_box_fn), data.cast()) });
                }
                self.note_in_flight(before, iters);
                // SAFETY: a live stream.
                ok(unsafe { sync(s) });
            }
            "host-boxed" => {
                for _ in 0..iters {
                    let c = self.counter.clone();
                    self.stream
                        .launch_host_func(move || {
                            c.fetch_add(1, Ordering::Relaxed);
                        })
                        .expect("launch_host_func");
                }
                self.note_in_flight(before, iters);
                self.stream.synchronize().expect("synchronize");
            }
            "host-zst" => {
                for _ in 0..iters {
                    self.stream
                        .launch_host_func(|| {
                            HOST_CALLS.fetch_add(1, Ordering::Relaxed);
                        })
                        .expect("launch_host_func");
                }
                self.note_in_flight(before, iters);
                self.stream.synchronize().expect("synchronize");
            }
            "rt-raw-arc" => {
                for _ in 0..iters {
                    let data = Arc::into_raw(self.counter.clone()).cast_mut().cast();
                    // SAFETY: the function takes back the `Arc` once.
                    ok(unsafe { launch(s, Some(raw_arc_fn), data) });
                    // SAFETY: a live stream.
                    ok(unsafe { sync(s) });
                }
            }
            "rt-raw-box" => {
                for _ in 0..iters {
                    let data = Box::into_raw(Box::new(OldHostCall {
                        f: self.counter.clone(),
                        _stream: s as usize,
                        _ctx: self.ctx.raw() as usize,
                    }));
                    // SAFETY: the function takes back the box once.
                    ok(unsafe { launch(s, Some(raw_box_fn), data.cast()) });
                    // SAFETY: a live stream.
                    ok(unsafe { sync(s) });
                }
            }
            "rt-boxed" => {
                for _ in 0..iters {
                    let c = self.counter.clone();
                    self.stream
                        .launch_host_func(move || {
                            c.fetch_add(1, Ordering::Relaxed);
                        })
                        .expect("launch_host_func");
                    self.stream.synchronize().expect("synchronize");
                }
            }
            _ => return false,
        }
        true
    }
}

impl Fixture {
    /// Notes how many of the `iters` host functions launched since `before` have not run yet.
    fn note_in_flight(&self, before: u64, iters: u64) {
        let ran = self.calls() - before;
        IN_FLIGHT.store(iters.saturating_sub(ran), Ordering::Relaxed);
    }
}
