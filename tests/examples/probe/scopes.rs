//! Scope cases: `Stream::scope` with two forks against the same fork/join by hand
//! (`cuEventRecord` + `cuStreamWaitEvent`) on various streams, with busy gaps, and the single
//! calls a scope makes (`cuStreamGetPriority`, `cuStreamIsCapturing`).

use std::hint::black_box;

use cuda_stream::{AsStream, StreamOptions};
use cuda_stream_sys as sys;

use crate::{Case, Fixture, ok};

impl Fixture {
    /// Runs a scope case `c`; false if `c` is not one.
    #[inline(always)]
    pub(crate) fn scopes(&self, c: &Case<'_>) -> bool {
        let Case {
            name, iters, us, s, ..
        } = *c;
        match name {
            "get-priority" => {
                let f = sys::fns::cuStreamGetPriority().expect("cuStreamGetPriority");
                for _ in 0..iters {
                    let mut p = 0;
                    // SAFETY: a live stream and a valid out-pointer.
                    ok(unsafe { f(s, &mut p) });
                    black_box(p);
                }
            }
            "is-capturing" => {
                let f = sys::fns::cuStreamIsCapturing().expect("cuStreamIsCapturing");
                for _ in 0..iters {
                    let mut st = sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE;
                    // SAFETY: a live stream and a valid out-pointer.
                    ok(unsafe { f(s, &mut st) });
                    black_box(st);
                }
            }
            "scope-api-waits" | "scope-pool-waits" | "scope-pool-waits-pri" | "scope-empty-raw" => {
                let event = cuda_stream::Event::new(&self.ctx, cuda_stream::EventOptions::new())
                    .expect("an event");
                let e = event.raw();
                let forks = [
                    self.ctx.new_stream().expect("a stream"),
                    self.ctx.new_stream().expect("a stream"),
                ];
                let pool = cuda_stream::StreamPool::new(&self.ctx, StreamOptions::new());
                let parent = self.stream.as_stream();
                for _ in 0..iters {
                    if name == "scope-empty-raw" {
                        self.stream.scope(|_| Ok(())).expect("scope");
                        raw_fork_join(s, [forks[0].raw(), forks[1].raw()], e);
                        continue;
                    }
                    if name == "scope-pool-waits-pri" {
                        black_box(parent.priority().expect("priority"));
                    }
                    if name.starts_with("scope-pool-waits") {
                        let (a, b) = (
                            pool.acquire().expect("a lease"),
                            pool.acquire().expect("a lease"),
                        );
                        a.wait_stream(&parent).expect("wait_stream");
                        b.wait_stream(&parent).expect("wait_stream");
                        parent.wait_stream(&a).expect("wait_stream");
                        parent.wait_stream(&b).expect("wait_stream");
                        continue;
                    }
                    for f in &forks {
                        f.wait_stream(&parent).expect("wait_stream");
                    }
                    for f in &forks {
                        parent.wait_stream(f).expect("wait_stream");
                    }
                }
            }
            "scope-raw-leased" | "scope-raw-gap" | "scope-raw-lump" => {
                // Made once (untimed in `--time`, which warms each case up first).
                let (forks, e) = self.leased();
                let k = us.unwrap_or(0);
                let (gap, lump) = match name {
                    "scope-raw-gap" => (k, 0),
                    "scope-raw-lump" => (0, 8 * k),
                    _ => (0, 0),
                };
                for _ in 0..iters {
                    if gap == 0 {
                        busy(lump);
                        raw_fork_join(s, forks, e);
                    } else {
                        raw_fork_join_with_gaps(s, forks, e, gap);
                    }
                }
            }
            "scope-raw" | "scope-safe" | "scope-raw-pri" | "scope-raw-prio-streams" => {
                let get_priority = sys::fns::cuStreamGetPriority().expect("cuStreamGetPriority");
                let options = if name == "scope-raw-prio-streams" {
                    StreamOptions::new().priority(0)
                } else {
                    StreamOptions::new()
                };
                let forks = [
                    self.ctx.new_stream_with(options).expect("a stream"),
                    self.ctx.new_stream_with(options).expect("a stream"),
                ];
                let event = cuda_stream::Event::new(&self.ctx, cuda_stream::EventOptions::new())
                    .expect("an event");
                let e = event.raw();
                for _ in 0..iters {
                    if name == "scope-safe" {
                        self.stream
                            .scope(|sc| {
                                black_box((sc.fork()?, sc.fork()?));
                                Ok(())
                            })
                            .expect("scope");
                        continue;
                    }
                    if name == "scope-raw-pri" {
                        let mut p = 0;
                        // SAFETY: a live stream and a valid out-pointer.
                        ok(unsafe { get_priority(s, &mut p) });
                        black_box(p);
                    }
                    raw_fork_join(s, [forks[0].raw(), forks[1].raw()], e);
                }
            }
            _ => return false,
        }
        true
    }
}

impl Fixture {
    /// See `leased`.
    fn leased(&self) -> ([sys::CUstream; 2], sys::CUevent) {
        let (forks, event) = self.leased.get_or_init(|| {
            let leased = || {
                self.stream
                    .scope(|sc| Ok([sc.fork()?.raw(), sc.fork()?.raw()]))
                    .expect("scope")
            };
            let forks = leased();
            assert_eq!(forks, leased(), "a scope's forks change between scopes");
            let event = cuda_stream::Event::new(&self.ctx, cuda_stream::EventOptions::new())
                .expect("an event");
            (forks, event)
        });
        (*forks, event.raw())
    }
}

/// What a scope with two forks does, by hand: per fork, `e` recorded on `parent` and waited on by
/// the fork; per join, recorded on the fork and waited on by `parent`.
#[inline(always)]
fn raw_fork_join(parent: sys::CUstream, forks: [sys::CUstream; 2], e: sys::CUevent) {
    let record = sys::fns::cuEventRecord().expect("cuEventRecord");
    let wait = sys::fns::cuStreamWaitEvent().expect("cuStreamWaitEvent");
    for f in forks {
        // SAFETY: live streams and event of the current context.
        ok(unsafe { record(e, parent) });
        // SAFETY: as above.
        ok(unsafe { wait(f, e, 0) });
    }
    for f in forks {
        // SAFETY: as above.
        ok(unsafe { record(e, f) });
        // SAFETY: as above.
        ok(unsafe { wait(parent, e, 0) });
    }
}

/// A busy loop of `k` iterations (about a cycle each).
#[inline(always)]
fn busy(k: u64) {
    for i in 0..k {
        black_box(i);
    }
}

/// [`raw_fork_join`] with [`busy`]`(k)` before each driver call.
fn raw_fork_join_with_gaps(
    parent: sys::CUstream,
    forks: [sys::CUstream; 2],
    e: sys::CUevent,
    k: u64,
) {
    let record = sys::fns::cuEventRecord().expect("cuEventRecord");
    let wait = sys::fns::cuStreamWaitEvent().expect("cuStreamWaitEvent");
    for f in forks {
        busy(k);
        // SAFETY: live streams and event of the current context.
        ok(unsafe { record(e, parent) });
        busy(k);
        // SAFETY: as above.
        ok(unsafe { wait(f, e, 0) });
    }
    for f in forks {
        busy(k);
        // SAFETY: as above.
        ok(unsafe { record(e, f) });
        busy(k);
        // SAFETY: as above.
        ok(unsafe { wait(parent, e, 0) });
    }
}
