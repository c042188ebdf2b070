//! Single checks of destroys: a borrowed stream is never destroyed, owned streams and events are
//! destroyed exactly once (a failed destroy leaves the handle alive, untouched), and a failing
//! `StreamPool::reserve` keeps the streams it made.

use cuda_stream::ffi;
use cuda_stream::{
    Context, Error, EventOptions, Stream, StreamOptions, StreamPool, current_stream,
};

use crate::harness::checks::Live;
use crate::harness::{FAULT, SUCCESS, block_on, isolated, mock, raw_destroy, raw_stream};

#[test]
fn a_borrowed_stream_is_never_destroyed() {
    let (_lock, m) = mock();
    isolated(|| {
        let ctx = Context::primary(0).unwrap();
        let raw = raw_stream(&ctx);
        let destroyed = m.destroyed_streams();
        {
            let owner = ();
            // SAFETY: `raw` is live until the raw destroy below, after every view is gone.
            let view = unsafe { Stream::borrow_raw(raw, &owner) }.unwrap();
            assert_eq!(view.raw(), raw);
            view.launch_host_func(|| ()).unwrap();
            let ev = view.record_event().unwrap();
            view.wait_event(&ev).unwrap();
            view.wait_stream(&ctx.legacy_stream()).unwrap();
            {
                let _guard = view.make_current();
                current_stream(&ctx, |cur| assert_eq!(cur, view));
            }
            view.scope(|s| s.fork()?.query().map(drop)).unwrap();
            block_on(view.completed()).unwrap();
            view.synchronize().unwrap();
            drop(ev);
        }
        assert_eq!(
            m.destroyed(raw),
            Some(false),
            "the view destroyed its stream"
        );
        assert_eq!(m.destroyed_streams(), destroyed);
        assert_eq!(raw_destroy(raw), SUCCESS, "the owner destroys it once");
        assert_eq!(m.destroyed(raw), Some(true));
        assert_eq!((m.bad_destroys(), m.bad_uses()), (0, 0));

        // The special values are refused, with no driver call.
        for special in [0usize, 1, 2] {
            // SAFETY: refused before any use.
            let r = unsafe { Stream::borrow_raw(special as ffi::CUstream, &()) };
            assert!(
                matches!(r, Err(Error::SpecialHandle { handle }) if handle == special),
                "{r:?}"
            );
        }
    });
}

#[test]
fn an_owned_stream_is_destroyed_exactly_once() {
    let (_lock, m) = mock();
    isolated(|| {
        let ctx = Context::primary(0).unwrap();
        let base = Live::now(m);

        let s = ctx.new_stream().unwrap();
        let raw = s.raw();
        let d = m.destroyed_streams();
        drop(s);
        assert_eq!(m.destroyed_streams(), d + 1, "Drop destroys it");
        assert_eq!(m.destroyed(raw), Some(true));

        let s = ctx.new_stream().unwrap();
        let raw = s.raw();
        s.close().unwrap();
        assert_eq!(m.destroyed_streams(), d + 2, "close destroys it");
        assert_eq!(m.destroyed(raw), Some(true));

        // close reports a failed destroy and does not try again.
        let s = ctx.new_stream().unwrap();
        let raw = s.raw();
        m.fail("cuStreamDestroy", 1, FAULT);
        let err = s.close().unwrap_err();
        assert_eq!(err.call(), Some("cuStreamDestroy"), "{err:?}");
        assert_eq!(err.driver_code(), Some(FAULT));
        assert_eq!(m.calls("cuStreamDestroy"), 3, "one destroy per stream");
        assert_eq!(m.destroyed(raw), Some(false));
        assert_eq!(m.destroyed_streams(), d + 2);
        assert_eq!(raw_destroy(raw), SUCCESS, "the handle was left alive, once");

        // So does Drop, silently.
        let s = ctx.new_stream().unwrap();
        let raw = s.raw();
        m.fail("cuStreamDestroy", 1, FAULT);
        drop(s);
        assert_eq!(m.calls("cuStreamDestroy"), 5);
        assert_eq!(m.destroyed(raw), Some(false));
        assert_eq!(raw_destroy(raw), SUCCESS);

        assert_eq!(Live::now(m), base);
        assert_eq!((m.bad_destroys(), m.bad_uses()), (0, 0));
    });
}

#[test]
fn an_owned_event_is_destroyed_exactly_once() {
    let (_lock, m) = mock();
    isolated(|| {
        let ctx = Context::primary(0).unwrap();
        let base = Live::now(m);
        let d = m.destroyed_events();

        // Drop keeps the handle for reuse; clearing the cache destroys it, once.
        let e = ctx.new_event(EventOptions::new()).unwrap();
        let raw = e.raw();
        drop(e);
        assert_eq!(m.destroyed(raw), Some(false), "kept as a spare event");
        assert_eq!(ctx.cached_events(), 1);
        assert_eq!(ctx.clear_event_cache().unwrap(), 1);
        assert_eq!(ctx.cached_events(), 0);
        assert_eq!(m.destroyed_events(), d + 1);
        assert_eq!(m.destroyed(raw), Some(true));

        // close destroys, never keeps.
        let e = ctx.new_event(EventOptions::new()).unwrap();
        let raw = e.raw();
        e.close().unwrap();
        assert_eq!(ctx.cached_events(), 0);
        assert_eq!(m.destroyed_events(), d + 2);
        assert_eq!(m.destroyed(raw), Some(true));

        let e = ctx.new_event(EventOptions::new()).unwrap();
        let raw = e.raw();
        m.fail("cuEventDestroy", 1, FAULT);
        let err = e.close().unwrap_err();
        assert_eq!(err.call(), Some("cuEventDestroy"), "{err:?}");
        assert_eq!(m.destroyed(raw), Some(false));
        assert_eq!(m.destroyed_events(), d + 2);
        // SAFETY: the mock checks the handle; the failed close left it to us.
        assert_eq!(unsafe { cuda_stream_sys::cuEventDestroy(raw) }, SUCCESS);

        assert_eq!(Live::now(m), base);
        assert_eq!((m.bad_destroys(), m.bad_uses()), (0, 0));
    });
}

/// Regression: `StreamPool::reserve` once returned early on a failing creation and leaked the
/// streams it had made before it; they must stay in the pool.
#[test]
fn pool_reserve_failure_keeps_the_streams_it_made() {
    let (_lock, m) = mock();
    isolated(|| {
        let ctx = Context::primary(0).unwrap();
        let base = Live::now(m);
        {
            let pool = StreamPool::new(&ctx, StreamOptions::new());
            m.fail("cuStreamCreate", 3, FAULT);
            let err = pool.reserve(4).unwrap_err();
            assert_eq!(err.call(), Some("cuStreamCreate"));
            assert_eq!(
                pool.created(),
                pool.free(),
                "every stream created is usable"
            );
        }
        assert_eq!(Live::now(m), base, "the pool's drop destroys what it made");
        assert_eq!((m.bad_destroys(), m.bad_uses()), (0, 0));
    });
}
