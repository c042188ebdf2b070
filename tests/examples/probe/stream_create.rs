//! Stream creation cases: `cuStreamCreate` + `cuStreamDestroy` by hand, against `OwnedStream`
//! (with and without the current-context check the safe side makes).

use std::hint::black_box;
use std::ptr;

use cuda_stream::{OwnedStream, StreamOptions};

use crate::{Case, Fixture, ok};

impl Fixture {
    /// Runs a stream creation case `c`; false if `c` is not one.
    #[inline(always)]
    pub(crate) fn stream_create(&self, c: &Case<'_>) -> bool {
        let Case {
            name,
            iters,
            non_blocking,
            create,
            destroy,
            get_current,
            ..
        } = *c;
        match name {
            "stream-create-raw" => {
                for _ in 0..iters {
                    let mut h = ptr::null_mut();
                    // SAFETY: a valid out-pointer; the context is current.
                    ok(unsafe { create(&mut h, non_blocking) });
                    // SAFETY: created just above, destroyed once.
                    ok(unsafe { destroy(black_box(h)) });
                }
            }
            "stream-create-safe" => {
                for _ in 0..iters {
                    let st = OwnedStream::new(&self.ctx, StreamOptions::new()).expect("create");
                    drop(black_box(st));
                }
            }
            "stream-create-check" => {
                for _ in 0..iters {
                    let mut cur = ptr::null_mut();
                    // SAFETY: a valid out-pointer.
                    ok(unsafe { get_current(&mut cur) });
                    if black_box(cur) != self.ctx.raw() {
                        panic!("the context is not current");
                    }
                    let mut h = ptr::null_mut();
                    // SAFETY: a valid out-pointer; the context is current.
                    ok(unsafe { create(&mut h, non_blocking) });
                    // SAFETY: created just above, destroyed once.
                    ok(unsafe { destroy(black_box(h)) });
                }
            }
            "stream-create-adopt" => {
                for _ in 0..iters {
                    let mut h = ptr::null_mut();
                    // SAFETY: a valid out-pointer; the context is current.
                    ok(unsafe { create(&mut h, non_blocking) });
                    // SAFETY: created just above in this context; owned by the value alone.
                    let st = unsafe { OwnedStream::from_raw(h, &self.ctx) }.expect("adopt");
                    drop(black_box(st));
                }
            }
            _ => return false,
        }
        true
    }
}
