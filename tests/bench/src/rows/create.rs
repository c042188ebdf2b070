//! Creating and destroying streams and events, and where event creation's overhead goes.

use std::hint::black_box;
use std::ptr;

use cuda_stream::{Error, Event, EventOptions, OwnedStream, StreamOptions};
use cuda_sys as sys;

use super::Fixture;
use crate::fail::{must, must_cudarc, ok};
use crate::method::case;
use crate::raw::Raw;
use crate::report::{Rows, Target};

/// Why the diagnostic rows have no cudarc column.
const OWN_DIAGNOSTIC: &str = "a diagnostic of cuda-stream's own event creation";

pub(super) fn rows(fx: &Fixture<'_>, rows: &mut Rows) -> Result<(), Error> {
    let (cfg, ctx) = (fx.cfg, fx.ctx);
    let Raw {
        stream_create,
        stream_destroy,
        event_create,
        event_destroy,
        ctx_get_current,
        ..
    } = fx.raw;
    let non_blocking = sys::CUstream_flags::CU_STREAM_NON_BLOCKING.0;
    let no_timing = sys::CUevent_flags::CU_EVENT_DISABLE_TIMING.0;

    let raw_stream_create_destroy = || {
        let mut s = ptr::null_mut();
        // SAFETY: `s` is a valid out-pointer; the context is current.
        ok(
            unsafe { stream_create(&mut s, non_blocking) },
            "cuStreamCreate",
        );
        // SAFETY: created just above, destroyed once.
        ok(unsafe { stream_destroy(black_box(s)) }, "cuStreamDestroy");
    };
    rows.add(
        "stream_create",
        "stream create + destroy",
        Target::Ratio(1.05),
        case(cfg.slow, raw_stream_create_destroy, || {
            let s = must(
                OwnedStream::new(ctx, StreamOptions::new()),
                "OwnedStream::new",
            );
            drop(black_box(s));
        })
        .peer(fx.cudarc().map(|c| {
            move || {
                let s = must_cudarc(c.ctx.new_stream(), "CudaContext::new_stream");
                drop(black_box(s));
            }
        }))
        .run(cfg),
    );

    let raw_event_create_destroy = || {
        let mut ev = ptr::null_mut();
        // SAFETY: `ev` is a valid out-pointer; the context is current.
        ok(unsafe { event_create(&mut ev, no_timing) }, "cuEventCreate");
        // SAFETY: created just above, destroyed once.
        ok(unsafe { event_destroy(black_box(ev)) }, "cuEventDestroy");
    };
    rows.add(
        "event_create",
        "event create + destroy (timing disabled)",
        Target::Ratio(1.05),
        case(cfg.medium, raw_event_create_destroy, || {
            let ev = must(Event::new(ctx, EventOptions::new()), "Event::new");
            drop(black_box(ev));
        })
        .peer(fx.cudarc().map(|c| {
            move || {
                let ev = must_cudarc(c.ctx.new_event(None), "CudaContext::new_event");
                drop(black_box(ev));
            }
        }))
        .run(cfg),
    );

    // Where the event-creation overhead goes: the context check and the context retain.
    rows.add(
        "event_create_in_current",
        "event create + destroy, unsafe Event::new_in_current (no context check)",
        Target::Ratio(1.05),
        case(cfg.medium, raw_event_create_destroy, || {
            // SAFETY: the benchmark thread keeps `ctx` bound for the whole run.
            let ev = must(
                unsafe { Event::new_in_current(ctx, EventOptions::new()) },
                "Event::new_in_current",
            );
            drop(black_box(ev));
        })
        .no_peer(OWN_DIAGNOSTIC)
        .run(cfg),
    );
    rows.add(
        "context_check",
        "the context check alone: cuCtxGetCurrent (raw) vs Context clone + drop (cuda-stream)",
        Target::None,
        case(
            cfg.fast,
            || {
                let mut cur = ptr::null_mut();
                // SAFETY: `cur` is a valid out-pointer.
                ok(unsafe { ctx_get_current(&mut cur) }, "cuCtxGetCurrent");
                black_box(cur);
            },
            || drop(black_box(ctx.clone())),
        )
        .no_peer(OWN_DIAGNOSTIC)
        .run(cfg),
    );
    Ok(())
}
