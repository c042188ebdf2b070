//! Fault cases of host functions that drop the last owner of a stream, event, pool, lease,
//! completion, context, module or buffer, or close one: no driver call inside, the destroys
//! queued and drained afterwards.

use std::future::Future;
use std::sync::{Arc, OnceLock, mpsc};
use std::task::{Context as TaskContext, Poll, Waker};

use cuda_stream::{
    AsStream, Context, DeviceBuffer, Error, Event, EventOptions, Module, Result, Stream,
    StreamOptions, StreamPool, deferred_pending, drain_deferred,
};

use crate::harness::fixture::{Op, PTX, op, op_frees};
use crate::harness::settle;
use crate::harness::swallowed::{
    SWALLOW_COMPLETED, SWALLOW_DROP, SWALLOW_FREE_DROP, VARYING_COMPLETED,
};

/// Polls a future once, with a waker that does nothing.
fn poll_once<F: Future + Unpin>(fut: &mut F) -> Poll<F::Output> {
    std::pin::Pin::new(fut).poll(&mut TaskContext::from_waker(Waker::noop()))
}

/// Holds `stream`'s later host functions until the returned sender is dropped (a host function
/// that waits on a channel), so that the test can drop its own owner first and the host function
/// is sure to hold the last one.
fn hold(stream: Stream<'_>) -> Result<mpsc::Sender<()>> {
    let (tx, rx) = mpsc::channel::<()>();
    stream.launch_host_func(move || {
        let _ = rx.recv();
    })?;
    Ok(tx)
}

/// After the host functions ran: exactly `n` destroys are queued (none was made inside a host
/// function), and an explicit drain makes them.
fn drain_expecting(n: usize) {
    settle();
    assert_eq!(deferred_pending(), n, "destroys queued by host functions");
    assert_eq!(drain_deferred(), n);
    assert_eq!(deferred_pending(), 0);
}

/// Host functions that drop the last owner of this crate's values, or close them: no driver call
/// inside (the mock would count it), the destroys queued and drained afterwards.
pub(crate) fn drop_ops() -> Vec<Op> {
    vec![
        op(
            "Arc<OwnedStream> dropped in its own host function",
            SWALLOW_DROP,
            |fx| {
                let s = Arc::new(fx.ctx.new_stream()?);
                let gate = hold(s.as_stream())?;
                let keep = s.clone();
                s.launch_host_func(move || drop(keep))?;
                drop(s);
                drop(gate);
                drain_expecting(1);
                Ok(())
            },
        ),
        op(
            "Arc<OwnedStream> dropped in its own callback",
            SWALLOW_DROP,
            |fx| {
                let s = Arc::new(fx.ctx.new_stream()?);
                let gate = hold(s.as_stream())?;
                let keep = s.clone();
                s.add_callback(move |_status| drop(keep))?;
                drop(s);
                drop(gate);
                drain_expecting(1);
                Ok(())
            },
        ),
        op(
            "a deferred stream destroy drained by the next stream creation",
            SWALLOW_DROP,
            |fx| {
                let s = Arc::new(fx.ctx.new_stream()?);
                let gate = hold(s.as_stream())?;
                let keep = s.clone();
                s.launch_host_func(move || drop(keep))?;
                drop(s);
                drop(gate);
                settle();
                assert_eq!(deferred_pending(), 1);
                let next = fx.ctx.new_stream();
                assert_eq!(deferred_pending(), 0, "creation drained the queue first");
                next.map(drop)
            },
        ),
        op(
            "a deferred stream destroy drained by synchronize",
            SWALLOW_DROP,
            |fx| {
                let s = fx.ctx.new_stream()?;
                fx.owned.launch_host_func(move || drop(s))?;
                settle();
                assert_eq!(deferred_pending(), 1);
                let r = fx.owned.synchronize();
                assert_eq!(deferred_pending(), 0, "synchronize drained the queue");
                r
            },
        ),
        op(
            "a panicking host function whose unwinding drops a stream",
            SWALLOW_DROP,
            |fx| {
                let s = fx.ctx.new_stream()?;
                let t = fx.ctx.new_stream()?;
                t.launch_host_func(move || {
                    let _s = s;
                    panic!("dropping a stream while unwinding");
                })?;
                settle();
                assert_eq!(deferred_pending(), 1);
                match t.synchronize() {
                    Err(Error::HostFnPanicked { .. }) => {}
                    Err(e) => return Err(e),
                    Ok(()) => panic!("the panic was not reported"),
                }
                assert_eq!(deferred_pending(), 0);
                Ok(())
            },
        ),
        op(
            "a host function panicking with a stream as its payload",
            SWALLOW_DROP,
            |fx| {
                let s = fx.ctx.new_stream()?;
                // A stream of its own: a panic left unreported (a faulted synchronize) goes
                // with it.
                let t = fx.ctx.new_stream()?;
                t.launch_host_func(move || std::panic::panic_any(s))?;
                drain_expecting(1);
                match t.synchronize() {
                    Err(Error::HostFnPanicked { message, .. }) => {
                        assert_eq!(message, "non-string panic payload");
                        Ok(())
                    }
                    Err(e) => Err(e),
                    Ok(()) => panic!("the panic was not reported"),
                }
            },
        ),
        op("Event dropped in a host function", SWALLOW_DROP, |fx| {
            let e = fx.owned.record_event()?;
            let raw = e.raw();
            fx.owned.launch_host_func(move || drop(e))?;
            drain_expecting(0);
            let again = fx.ctx.new_event(EventOptions::new())?;
            assert_eq!(again.raw(), raw, "returned to the context's spare events");
            assert!(!again.is_recorded());
            assert!(again.query()?, "nothing to wait for until recorded");
            fx.owned.wait_event(&again)
        }),
        op(
            "interprocess Event dropped in a host function",
            SWALLOW_DROP,
            |fx| {
                let e = Event::new(&fx.ctx, EventOptions::new().interprocess(true))?;
                fx.owned.record(&e)?;
                fx.owned.launch_host_func(move || drop(e))?;
                drain_expecting(1);
                Ok(())
            },
        ),
        op(
            "Event dropped in a host function with the cache full",
            SWALLOW_DROP,
            |fx| {
                let options = EventOptions::new().blocking_sync(true);
                let events = (0..33)
                    .map(|_| Event::new(&fx.ctx, options))
                    .collect::<Result<Vec<_>>>()?;
                fx.owned.launch_host_func(move || drop(events))?;
                drain_expecting(1);
                assert_eq!(fx.ctx.cached_events(), 32, "kept up to the bound");
                Ok(())
            },
        ),
        op(
            "pool lease dropped in a host function",
            SWALLOW_DROP,
            |fx| {
                static POOL: OnceLock<StreamPool> = OnceLock::new();
                let pool = POOL.get_or_init(|| StreamPool::new(&fx.ctx, StreamOptions::new()));
                let lease = pool.acquire()?;
                let raw = lease.raw();
                lease.query()?;
                fx.owned.launch_host_func(move || drop(lease))?;
                drain_expecting(0);
                assert_eq!(pool.acquire()?.raw(), raw, "back in the pool");
                Ok(())
            },
        ),
        op(
            "StreamPool dropped in a host function",
            SWALLOW_DROP,
            |fx| {
                let pool = StreamPool::new(&fx.ctx, StreamOptions::new());
                pool.reserve(2)?;
                pool.acquire()?.query()?;
                fx.owned.launch_host_func(move || drop(pool))?;
                drain_expecting(2);
                Ok(())
            },
        ),
        op(
            "Completion dropped in a host function",
            SWALLOW_COMPLETED,
            |fx| {
                let mut c = fx.owned.completed();
                if let Poll::Ready(r) = poll_once(&mut c) {
                    r?;
                }
                fx.owned.launch_host_func(move || drop(c))?;
                drain_expecting(0);
                Ok(())
            },
        )
        .varying(VARYING_COMPLETED),
        op(
            "Context clone (not the last) dropped in a host function",
            SWALLOW_DROP,
            |fx| {
                let c = fx.ctx.clone();
                fx.owned.launch_host_func(move || drop(c))?;
                drain_expecting(0);
                Ok(())
            },
        ),
        op(
            "Context (last clone, with a spare event) dropped in a host function",
            SWALLOW_DROP,
            |fx| {
                let c = Context::primary(1)?;
                drop(c.new_event(EventOptions::new())?);
                assert_eq!(c.cached_events(), 1);
                fx.owned.launch_host_func(move || drop(c))?;
                // The spare event's destroy, then the release.
                drain_expecting(2);
                Ok(())
            },
        ),
        op(
            "OwnedStream and its Context (last owners) dropped in a host function",
            SWALLOW_DROP,
            |fx| {
                let c = Context::primary(1)?;
                let s = c.new_stream()?;
                fx.owned.launch_host_func(move || drop((s, c)))?;
                // The stream's destroy, then the release.
                drain_expecting(2);
                Ok(())
            },
        ),
        op(
            "OwnedStream::close inside a host function",
            SWALLOW_DROP,
            |fx| {
                let s = fx.ctx.new_stream()?;
                let (tx, rx) = mpsc::channel();
                fx.owned
                    .launch_host_func(move || tx.send(s.close()).expect("the test waits"))?;
                settle();
                let r = rx.recv().expect("the host function ran");
                assert!(
                    matches!(
                        r,
                        Err(Error::InHostFunction {
                            call: "cuStreamDestroy"
                        })
                    ),
                    "{r:?}"
                );
                drain_expecting(1);
                Ok(())
            },
        ),
        op("Event::close inside a host function", SWALLOW_DROP, |fx| {
            let e = fx.owned.record_event()?;
            let (tx, rx) = mpsc::channel();
            fx.owned
                .launch_host_func(move || tx.send(e.close()).expect("the test waits"))?;
            settle();
            let r = rx.recv().expect("the host function ran");
            assert!(
                matches!(
                    r,
                    Err(Error::InHostFunction {
                        call: "cuEventDestroy"
                    })
                ),
                "{r:?}"
            );
            drain_expecting(1);
            Ok(())
        }),
        op(
            "Context::clear_event_cache inside a host function",
            SWALLOW_DROP,
            |fx| {
                drop(fx.ctx.new_event(EventOptions::new())?);
                let c = fx.ctx.clone();
                let (tx, rx) = mpsc::channel();
                fx.owned.launch_host_func(move || {
                    tx.send(c.clear_event_cache()).expect("the test waits")
                })?;
                settle();
                let r = rx.recv().expect("the host function ran");
                assert!(matches!(r, Err(Error::InHostFunction { .. })), "{r:?}");
                assert_eq!(fx.ctx.cached_events(), 0);
                drain_expecting(1);
                Ok(())
            },
        ),
        op_frees(
            "Module dropped in a host function",
            SWALLOW_FREE_DROP,
            |fx| {
                let module = Module::from_ptx(&fx.ctx, PTX)?;
                fx.owned.launch_host_func(move || drop(module))?;
                drain_expecting(1);
                Ok(())
            },
        ),
        op_frees(
            "DeviceBuffer::free inside a host function",
            SWALLOW_FREE_DROP,
            |fx| {
                let buf = DeviceBuffer::<u32>::alloc(&fx.ctx, 4)?;
                let (tx, rx) = mpsc::channel();
                fx.owned
                    .launch_host_func(move || tx.send(buf.free()).expect("the test waits"))?;
                settle();
                let r = rx.recv().expect("the host function ran");
                assert!(
                    matches!(
                        r,
                        Err(Error::InHostFunction {
                            call: "cuMemFreeAsync"
                        })
                    ),
                    "{r:?}"
                );
                drain_expecting(1);
                Ok(())
            },
        ),
    ]
}
