//! The benchmark's hot rows (`query`, `record`, `wait_event`, `synchronize` of an idle stream),
//! each through the driver function by hand and through `Stream`, so that what the safe call
//! adds (its lookups and checks) can be counted under callgrind.

use std::hint::black_box;

use cuda_stream::EventOptions;
use cuda_stream_sys as sys;

use crate::{Case, Fixture, ok};

impl Fixture {
    /// Runs a stream operation case `c`; false if `c` is not one.
    #[inline(always)]
    pub(crate) fn stream_ops(&self, c: &Case<'_>) -> bool {
        let Case {
            name,
            iters,
            s,
            sync,
            ..
        } = *c;
        let event = || self.ctx.new_event(EventOptions::new()).expect("an event");
        match name {
            "query-raw" => {
                let query = sys::fns::cuStreamQuery().expect("cuStreamQuery");
                for _ in 0..iters {
                    // SAFETY: the fixture's stream is live.
                    ok(unsafe { query(black_box(s)) });
                }
            }
            "query-safe" => {
                for _ in 0..iters {
                    black_box(self.stream.query().expect("query"));
                }
            }
            "record-raw" => {
                let record = sys::fns::cuEventRecord().expect("cuEventRecord");
                let ev = event();
                for _ in 0..iters {
                    // SAFETY: a live event and stream of one context.
                    ok(unsafe { record(black_box(ev.raw()), s) });
                }
            }
            "record-safe" => {
                let ev = event();
                for _ in 0..iters {
                    self.stream.record(black_box(&ev)).expect("record");
                }
            }
            "wait-raw" => {
                let wait = sys::fns::cuStreamWaitEvent().expect("cuStreamWaitEvent");
                let ev = event();
                self.stream.record(&ev).expect("record");
                for _ in 0..iters {
                    // SAFETY: a live stream and event.
                    ok(unsafe { wait(s, black_box(ev.raw()), 0) });
                }
            }
            "wait-safe" => {
                let ev = event();
                self.stream.record(&ev).expect("record");
                for _ in 0..iters {
                    self.stream.wait_event(black_box(&ev)).expect("wait_event");
                }
            }
            "sync-raw" => {
                for _ in 0..iters {
                    // SAFETY: the fixture's stream is live.
                    ok(unsafe { sync(black_box(s)) });
                }
            }
            "sync-safe" => {
                for _ in 0..iters {
                    self.stream.synchronize().expect("synchronize");
                }
            }
            _ => return false,
        }
        true
    }
}
