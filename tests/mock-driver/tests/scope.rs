//! `Stream::scope`'s per-thread state against the mock driver: which streams a thread's scopes
//! fork (the same ones, in order, scope after scope), what a nested scope or a scope with many
//! forks leases besides, and what a thread's exit frees. The ordering the links create is the
//! GPU's to show (tests/tests/scope.rs); here the driver's handles are counted.
//!
//! The mock's state is process-wide and the scopes' shared pools live for the process, so the
//! mock is reset once, and each test takes `LOCK` and scopes on threads of its own (a fresh
//! thread has no per-thread state yet).

use std::collections::HashSet;
use std::sync::Mutex;

use cuda_mock_driver::{MockDriver, Serialized};
use cuda_stream::{Context, OwnedStream, Result};

static LOCK: Mutex<()> = Mutex::new(());

/// Serialises the test and installs the mock as the process-wide driver (once).
fn mock() -> (Serialized, &'static MockDriver) {
    let guard = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let m = MockDriver::global();
    static RESET: std::sync::Once = std::sync::Once::new();
    RESET.call_once(|| m.reset());
    (m.checked(guard), m)
}

/// Runs `f` on a new thread (no per-thread scope state yet) and returns what it returns.
fn on_new_thread<T: Send>(f: impl FnOnce() -> T + Send) -> T {
    std::thread::scope(|s| s.spawn(f).join().expect("the thread panicked"))
}

fn forks(parent: &OwnedStream, n: usize) -> Vec<usize> {
    parent
        .scope(|s| {
            (0..n)
                .map(|_| Ok(s.fork()?.raw() as usize))
                .collect::<Result<_>>()
        })
        .expect("a scope")
}

fn distinct(raws: &[usize]) -> bool {
    raws.iter().collect::<HashSet<_>>().len() == raws.len()
}

#[test]
fn a_threads_scopes_fork_the_same_streams_in_order() {
    let (_guard, _m) = mock();
    let ctx = Context::primary(0).unwrap();
    let parent = ctx.new_stream().unwrap();
    on_new_thread(|| {
        let first = forks(&parent, 2);
        assert!(distinct(&first) && !first.contains(&(parent.raw() as usize)));
        assert_eq!(
            forks(&parent, 2),
            first,
            "the second scope forked other streams"
        );
        // A third fork adds a stream; the first two stay in place.
        let three = forks(&parent, 3);
        assert_eq!(three[..2], first[..]);
        assert!(distinct(&three));
        assert_eq!(forks(&parent, 3), three);
        assert_eq!(forks(&parent, 1), first[..1]);
        // Another parent of the same context and priority forks the same streams.
        let other = ctx.new_stream().unwrap();
        assert_eq!(forks(&other, 3), three);
    });
}

#[test]
fn a_nested_scope_on_the_same_pool_forks_streams_of_its_own_and_returns_them() {
    let (_guard, m) = mock();
    let ctx = Context::primary(0).unwrap();
    let parent = ctx.new_stream().unwrap();
    on_new_thread(|| {
        let outer_first = forks(&parent, 2);
        let mut live = None;
        for round in 0..20 {
            let (outer, inner) = parent
                .scope(|s| {
                    let a = s.fork()?.raw() as usize;
                    let inner = forks(&parent, 2);
                    let b = s.fork()?.raw() as usize;
                    Ok((vec![a, b], inner))
                })
                .unwrap();
            assert_eq!(
                outer, outer_first,
                "round {round}: the outer scope's forks moved"
            );
            let all: Vec<usize> = outer.iter().chain(&inner).copied().collect();
            assert!(distinct(&all), "round {round}: {all:?}");
            // The nested scope's streams go back to the pool: no stream is made after the
            // first round.
            match live {
                None => live = Some(m.live_streams()),
                Some(n) => assert_eq!(m.live_streams(), n, "round {round}: a stream leaked"),
            }
        }
        assert_eq!(forks(&parent, 2), outer_first);
    });
}

#[test]
fn forks_past_what_a_thread_keeps_come_from_the_pool_and_go_back() {
    let (_guard, m) = mock();
    let ctx = Context::primary(0).unwrap();
    let parent = ctx.new_stream().unwrap();
    on_new_thread(|| {
        let first = forks(&parent, 12);
        assert!(distinct(&first));
        let live = m.live_streams();
        for round in 0..20 {
            let again = forks(&parent, 12);
            assert!(distinct(&again), "round {round}");
            // The streams a thread keeps (8) come back in place; the rest are any of the pool's.
            assert_eq!(again[..8], first[..8], "round {round}");
            assert_eq!(
                m.live_streams(),
                live,
                "round {round}: streams were made or leaked"
            );
        }
    });
}

#[test]
fn a_threads_event_is_destroyed_at_exit_and_its_streams_serve_the_next_thread() {
    let (_guard, m) = mock();
    let ctx = Context::primary(0).unwrap();
    let parent = ctx.new_stream().unwrap();
    // Fills the shared pool with two streams, so later threads make none.
    on_new_thread(|| forks(&parent, 2));
    let (events, streams) = (m.live_events(), m.live_streams());
    let seen = on_new_thread(|| {
        let f = forks(&parent, 2);
        // The thread's own event for its links.
        assert_eq!(m.live_events(), events + 1);
        f
    });
    assert_eq!(
        m.live_events(),
        events,
        "the thread's event outlived the thread"
    );
    assert_eq!(
        m.live_streams(),
        streams,
        "the forks' streams were made or destroyed"
    );
    let next = on_new_thread(|| forks(&parent, 2));
    assert_eq!(
        next.iter().collect::<HashSet<_>>(),
        seen.iter().collect::<HashSet<_>>(),
        "the next thread did not get the pool's streams back"
    );
}

#[test]
fn a_scope_that_panics_or_fails_releases_the_threads_streams() {
    let (_guard, _m) = mock();
    let ctx = Context::primary(0).unwrap();
    let parent = ctx.new_stream().unwrap();
    on_new_thread(|| {
        let first = forks(&parent, 2);
        let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            parent.scope(|s| -> Result<()> {
                let _ = (s.fork()?, s.fork()?);
                panic!("in the scope");
            })
        }));
        assert!(panicked.is_err());
        assert_eq!(
            forks(&parent, 2),
            first,
            "a panic kept the thread's streams claimed"
        );
        let failed = parent.scope(|s| -> Result<()> {
            s.fork()?;
            Err(cuda_stream::Error::InHostFunction { call: "test" })
        });
        assert!(failed.is_err());
        assert_eq!(
            forks(&parent, 2),
            first,
            "an error kept the thread's streams claimed"
        );
    });
}
