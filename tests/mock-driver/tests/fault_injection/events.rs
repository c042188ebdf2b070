//! Fault cases of events: creation, recording, timing, IPC handles, `close`, raw handles, the
//! completion future, and the per-context cache of spare events.

use cuda_stream::{Event, EventOptions};

use crate::harness::block_on;
use crate::harness::fixture::{Op, op};
use crate::harness::swallowed::{
    SWALLOW_CLOSE_EVENT, SWALLOW_COMPLETED, SWALLOW_DROP, VARYING_COMPLETED,
};

/// Events.
pub(crate) fn ops() -> Vec<Op> {
    vec![
        op("Event::new_in_current", SWALLOW_DROP, |fx| {
            let _bound = fx.ctx.bind()?;
            // SAFETY: `fx.ctx` was made current just above, and nothing else is bound since.
            let e = unsafe { Event::new_in_current(&fx.ctx, EventOptions::new()) }?;
            fx.owned.record(&e)
        }),
        op("Context::new_event + drop", SWALLOW_DROP, |fx| {
            fx.ctx
                .new_event(EventOptions::new().blocking_sync(true))
                .map(drop)
        }),
        op("Event::new + record + elapsed_since", SWALLOW_DROP, |fx| {
            let timing = EventOptions::new().timing(true);
            let start = Event::new(&fx.ctx, timing)?;
            let end = Event::new(&fx.ctx, timing)?;
            fx.owned.record(&start)?;
            fx.owned.record(&end)?;
            end.synchronize()?;
            end.elapsed_since(&start).map(drop)
        }),
        op("Event::query", SWALLOW_DROP, |fx| {
            fx.recorded.query().map(drop)
        }),
        op("Event::synchronize", SWALLOW_DROP, |fx| {
            fx.recorded.synchronize()
        }),
        op("Event::ipc_handle + open_ipc", SWALLOW_DROP, |fx| {
            let e = Event::new(&fx.ctx, EventOptions::new().interprocess(true))?;
            let handle = e.ipc_handle()?;
            let opened = Event::open_ipc(&fx.ctx, &handle)?;
            fx.owned.record(&e)?;
            opened.synchronize()
        }),
        op("Event::close", SWALLOW_CLOSE_EVENT, |fx| {
            fx.ctx.new_event(EventOptions::new())?.close()
        }),
        op("Event::into_raw + from_raw", SWALLOW_DROP, |fx| {
            let raw = fx.ctx.new_event(EventOptions::new())?.into_raw();
            // SAFETY: `raw` was just handed over by `into_raw`, created with these options.
            let e = unsafe { Event::from_raw(raw, &fx.ctx, EventOptions::new()) };
            e.query().map(drop)
        }),
        op("Event::completed", SWALLOW_COMPLETED, |fx| {
            block_on(fx.recorded.completed())
        })
        .varying(VARYING_COMPLETED),
    ]
}

/// The event cache: a dropped event's handle is handed out again by `Event::new` and
/// `record_event` (no `cuEventCreate`), only to the same options.
pub(crate) fn cache_ops() -> Vec<Op> {
    vec![
        op(
            "Event::new + drop + Event::new (recycled)",
            SWALLOW_DROP,
            |fx| {
                let timing = EventOptions::new().timing(true);
                let e = Event::new(&fx.ctx, timing)?;
                let raw = e.raw();
                drop(e);
                let again = Event::new(&fx.ctx, timing)?;
                assert_eq!(again.raw(), raw, "the spare event is reused");
                assert!(!again.is_recorded());
                assert!(again.query()?, "a recycled event answers as a new one");
                let untimed = Event::new(&fx.ctx, EventOptions::new())?;
                assert_ne!(untimed.raw(), raw, "never to other options");
                fx.owned.record(&again)?;
                fx.owned.record(&untimed)?;
                again.synchronize()
            },
        ),
        op(
            "record_event + drop + record_event (recycled)",
            SWALLOW_DROP,
            |fx| {
                let e = fx.owned.record_event()?;
                let raw = e.raw();
                drop(e);
                let again = fx.owned.record_event()?;
                assert_eq!(again.raw(), raw);
                assert!(again.is_recorded());
                again.synchronize()
            },
        ),
        op("Context::clear_event_cache", SWALLOW_CLOSE_EVENT, |fx| {
            drop(fx.ctx.new_event(EventOptions::new())?);
            drop(fx.ctx.new_event(EventOptions::new().blocking_sync(true))?);
            assert_eq!(fx.ctx.cached_events(), 2);
            assert_eq!(fx.ctx.clear_event_cache()?, 2);
            assert_eq!(fx.ctx.cached_events(), 0);
            Ok(())
        }),
    ]
}
