//! Fault cases of owned streams (creation with options, drop, `close`, raw handles, the
//! current-stream guard) and of stream pools (`acquire`, a bounded pool, `reserve`).

use cuda_stream::{
    AsStream, Context, Error, OwnedStream, StreamOptions, StreamPool, current_stream,
    current_stream_raw,
};

use crate::harness::fixture::{Op, op};
use crate::harness::swallowed::{SWALLOW_CLOSE_STREAM, SWALLOW_DROP};

/// Owned streams.
pub(crate) fn ops() -> Vec<Op> {
    vec![
        op("Context::new_stream + drop", SWALLOW_DROP, |fx| {
            fx.ctx.new_stream().map(drop)
        }),
        op("Context::new_stream_with(priority)", SWALLOW_DROP, |fx| {
            let p = fx.ctx.priority_range()?.greatest();
            let s = fx
                .ctx
                .new_stream_with(StreamOptions::new().blocking(true).priority(p))?;
            assert_eq!(s.priority()?, p);
            Ok(())
        }),
        op(
            "OwnedStream::new(priority), range not cached",
            SWALLOW_DROP,
            |_| {
                let ctx = Context::primary(0)?;
                OwnedStream::new(&ctx, StreamOptions::new().priority(-2)).map(drop)
            },
        ),
        op("OwnedStream::new(priority_clamped)", SWALLOW_DROP, |fx| {
            OwnedStream::new(&fx.ctx, StreamOptions::new().priority_clamped(-100)).map(drop)
        }),
        op(
            "OwnedStream::fork + wait_stream (join)",
            SWALLOW_DROP,
            |fx| {
                let f = fx.owned.fork()?;
                fx.owned.wait_stream(&f)
            },
        ),
        op("OwnedStream drop after use", SWALLOW_DROP, |fx| {
            let s = fx.ctx.new_stream()?;
            s.launch_host_func(|| ())?;
            s.synchronize()?;
            drop(s);
            Ok(())
        }),
        op("OwnedStream::close", SWALLOW_CLOSE_STREAM, |fx| {
            fx.ctx.new_stream()?.close()
        }),
        op("OwnedStream::into_raw + from_raw", SWALLOW_DROP, |fx| {
            let raw = fx.ctx.new_stream()?.into_raw();
            // SAFETY: `raw` was just handed over by `into_raw`; nothing else uses it.
            let s = unsafe { OwnedStream::from_raw(raw, &fx.ctx) }?;
            s.query().map(drop)
        }),
        op("OwnedStream::make_current", SWALLOW_DROP, |fx| {
            let s = fx.ctx.new_stream()?;
            let guard = s.make_current();
            assert_eq!(current_stream_raw(&fx.ctx), s.raw());
            let r = current_stream(&fx.ctx, |cur| cur.query().map(drop));
            drop(guard);
            r
        }),
        op("Stream::wait_event_raw", SWALLOW_DROP, |fx| {
            // SAFETY: the fixture's event is live for the call.
            unsafe { fx.owned.as_stream().wait_event_raw(fx.recorded.raw()) }
        }),
    ]
}

/// Stream pools.
pub(crate) fn pool_ops() -> Vec<Op> {
    vec![
        op("StreamPool::acquire", SWALLOW_DROP, |fx| {
            let pool = StreamPool::new(&fx.ctx, StreamOptions::new());
            let a = pool.acquire()?;
            let b = pool.acquire()?;
            assert_ne!(a.raw(), b.raw());
            a.wait_stream(&b)?;
            drop((a, b));
            let c = pool.acquire()?;
            assert_eq!(pool.created(), 2);
            c.query().map(drop)
        }),
        op("StreamPool::bounded acquire", SWALLOW_DROP, |fx| {
            let pool = StreamPool::bounded(&fx.ctx, StreamOptions::new().priority(-1), 1);
            let a = pool.acquire()?;
            match pool.acquire() {
                Err(Error::PoolExhausted { limit: 1 }) => {}
                other => panic!("a second lease of a pool of one: {other:?}"),
            }
            assert_eq!(a.priority()?, -1);
            Ok(())
        }),
    ]
}

/// `StreamPool::reserve`, a row of its own: the table runs it after the modules and buffers.
pub(crate) fn pool_reserve_ops() -> Vec<Op> {
    vec![op("StreamPool::reserve", SWALLOW_DROP, |fx| {
        let pool = StreamPool::new(&fx.ctx, StreamOptions::new());
        pool.reserve(1)?;
        assert_eq!(pool.free(), 1);
        let a = pool.acquire()?;
        assert_eq!(pool.created(), 1);
        a.query().map(drop)
    })]
}
