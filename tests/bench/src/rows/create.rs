//! Creating and destroying streams and events: stream create + destroy with its A/A control (the
//! raw code against itself: the method's noise floor), event create + destroy through the
//! context's spare events (a hit) and past them (`close()`, the driver's create and destroy every
//! time), `record_event()` + drop, and where event creation's overhead goes.

use std::hint::black_box;
use std::ptr;

use cuda_stream::{Error, Event, EventOptions, OwnedStream, StreamOptions};
use cuda_stream_sys as sys;

use super::Fixture;
use crate::fail::{must, must_cudarc, ok};
use crate::method::case;
use crate::raw::Raw;
use crate::report::{Rows, Target};

/// Why the diagnostic rows have no cudarc column.
const OWN_DIAGNOSTIC: &str = "a diagnostic of cuda-stream's own event creation";
/// Why the A/A row has no cudarc column.
const CONTROL: &str = "a control of the method: the raw code on both sides";

pub(super) fn rows(fx: &Fixture<'_>, rows: &mut Rows) -> Result<(), Error> {
    let (cfg, ctx) = (fx.cfg, fx.ctx);
    let Raw {
        stream_create,
        stream_destroy,
        event_create,
        event_destroy,
        event_record,
        ctx_get_current,
        ..
    } = fx.raw;
    let r1 = fx.s1.raw();
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
    // The A/A control: the same raw code on both sides (one closure, so one function), run like
    // the row above: its ratio, spread and per-order medians are what the method alone gives.
    rows.add(
        "stream_create_aa",
        "A/A control: stream create + destroy, raw against raw (the method's noise floor)",
        Target::None,
        case(
            cfg.slow,
            raw_stream_create_destroy,
            raw_stream_create_destroy,
        )
        .no_peer(CONTROL)
        .run(cfg),
    );

    let raw_event_create_destroy = || {
        let mut ev = ptr::null_mut();
        // SAFETY: `ev` is a valid out-pointer; the context is current.
        ok(unsafe { event_create(&mut ev, no_timing) }, "cuEventCreate");
        // SAFETY: created just above, destroyed once.
        ok(unsafe { event_destroy(black_box(ev)) }, "cuEventDestroy");
    };
    // Event::new + drop, the cache warm: after the warm-up batch every Event::new takes the
    // handle the previous drop returned to the context's spare events (no driver call).
    drop(must(Event::new(ctx, EventOptions::new()), "Event::new"));
    rows.add(
        "event_create",
        "event create + destroy (timing disabled; cuda-stream: Event::new + drop, spare events warm)",
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

    // The miss path: `close()` destroys the handle instead of keeping it, so every Event::new
    // checks the context and creates (the spare events emptied first).
    must(ctx.clear_event_cache(), "Context::clear_event_cache");
    rows.add(
        "event_create_close",
        "event create + destroy, no spare events (cuda-stream: Event::new + close(), the driver every time)",
        Target::None,
        case(cfg.medium, raw_event_create_destroy, || {
            let ev = must(Event::new(ctx, EventOptions::new()), "Event::new");
            must(black_box(ev).close(), "Event::close");
        })
        .peer(fx.cudarc().map(|c| {
            move || {
                let ev = must_cudarc(c.ctx.new_event(None), "CudaContext::new_event");
                drop(black_box(ev));
            }
        }))
        .run(cfg),
    );

    // The common pattern: a new event recorded where the stream is now, dropped after use.
    let settle = || fx.settle();
    rows.add(
        "record_event",
        "record_event() + drop (raw: cuEventCreate + cuEventRecord + cuEventDestroy)",
        Target::Ratio(1.0),
        case(
            cfg.medium,
            || {
                let mut ev = ptr::null_mut();
                // SAFETY: `ev` is a valid out-pointer; the context is current.
                ok(unsafe { event_create(&mut ev, no_timing) }, "cuEventCreate");
                // SAFETY: the event and the stream are live and of the current context.
                ok(unsafe { event_record(ev, black_box(r1)) }, "cuEventRecord");
                // SAFETY: created just above, destroyed once (the driver releases it when the
                // record completes).
                ok(unsafe { event_destroy(black_box(ev)) }, "cuEventDestroy");
            },
            || {
                let ev = must(fx.s1.record_event(), "Stream::record_event");
                drop(black_box(ev));
            },
        )
        .peer(fx.cudarc().map(|c| {
            move || {
                let ev = must_cudarc(c.s1.record_event(None), "CudaStream::record_event");
                drop(black_box(ev));
            }
        }))
        .settle(settle)
        .run(cfg),
    );

    // Where the event-creation overhead goes: the context check and the context retain.
    rows.add(
        "event_create_in_current",
        "event create + destroy, unsafe Event::new_in_current (no context check; spare events warm)",
        Target::None,
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
