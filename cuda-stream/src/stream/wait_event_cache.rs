//! The per-thread event cache behind `Stream::wait_stream`: one event per (thread, context),
//! recorded and waited on at once, so no event is created per call.

use std::cell::RefCell;

use crate::base::error::{Result, driver_fn};
use crate::driver::context::{Context, create_plain_event};
use crate::driver::recycled_events;
use crate::ffi;

/// One event per (thread, context) for `wait_stream`: recording it and waiting on it right away
/// is all `wait_stream` needs, and reuse is safe because a wait captures the event's state at the
/// time of the call. Entries hold a retain of the (primary) context so the event cannot outlive
/// it; for other contexts a temporary event is used.
pub(crate) struct WaitEvents;

struct CachedEvent {
    ctx: ffi::CUcontext,
    event: ffi::CUevent,
    _keep: Context,
}

impl Drop for CachedEvent {
    /// At thread exit: destroys the event while `_keep` still holds the context (fields drop
    /// after this body), or queues the destroy if the thread is in a host function.
    fn drop(&mut self) {
        if crate::driver::deferred_destroy::in_host_fn() {
            let e = crate::driver::deferred_destroy::Deferred::new(
                self.event as usize,
                recycled_events::destroy,
            );
            crate::driver::deferred_destroy::defer([e]);
        } else {
            let _ = recycled_events::destroy(self.event as usize);
        }
    }
}

thread_local! {
    static CACHE: RefCell<Vec<CachedEvent>> = const { RefCell::new(Vec::new()) };
}

pub(crate) static WAIT_EVENTS: WaitEvents = WaitEvents;

/// This thread's cached event for `ctx`, if it has one.
#[inline]
fn cached(ctx: ffi::CUcontext) -> Option<ffi::CUevent> {
    CACHE
        .try_with(|c| {
            let c = c.try_borrow().ok()?;
            c.iter().find(|e| e.ctx == ctx).map(|e| e.event)
        })
        .ok()
        .flatten()
}

impl WaitEvents {
    /// Runs `f` with this thread's cached event for `ctx`.
    #[inline]
    pub(crate) fn with_event(
        &self,
        ctx: ffi::CUcontext,
        f: impl FnOnce(ffi::CUevent) -> Result<()>,
    ) -> Result<()> {
        match cached(ctx) {
            Some(ev) => f(ev),
            None => self.slow(ctx, f),
        }
    }

    #[cold]
    #[inline(never)]
    fn slow(&self, ctx: ffi::CUcontext, f: impl FnOnce(ffi::CUevent) -> Result<()>) -> Result<()> {
        if let Some(keep) = Context::retain_if_primary(ctx)? {
            let event = create_plain_event(ctx)?;
            let entry = CachedEvent {
                ctx,
                event,
                _keep: keep,
            };
            let stored = CACHE.try_with(|c| match c.try_borrow_mut() {
                Ok(mut c) => {
                    c.push(entry);
                    None
                }
                Err(_) => Some(entry),
            });
            if let Ok(None) = stored {
                return f(event);
            }
            // Thread teardown: fall through to a temporary event (the entry drops here).
        }
        let event = create_plain_event(ctx)?;
        let r = f(event);
        let destroy = driver_fn!(cuEventDestroy);
        // SAFETY: created above, destroyed once; a pending wait keeps its own reference.
        let _ = unsafe { destroy(event) };
        r
    }
}
