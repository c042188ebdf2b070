//! `Stream::scope`: forks start after the parent's prior work, and the parent waits for every
//! fork when the scope ends, however it ends.

use std::collections::HashSet;
use std::time::Duration;

use cuda_stream::{AsStream, Error};
use cuda_stream_tests::{DeviceBuffer, Kernels, Window, gpu};

const SPIN: Duration = Duration::from_millis(200);

fn failing_step() -> cuda_stream::Result<()> {
    Err(Error::NotRecorded)
}

#[test]
fn forks_start_after_the_parents_prior_work() {
    let Some(ctx) = gpu() else { return };
    let k = Kernels::load(&ctx);
    let main = ctx.new_stream().unwrap();
    let buf = DeviceBuffer::new(&ctx, 1);
    let out = DeviceBuffer::new(&ctx, 2);
    k.store_after_spin(&main, buf.ptr(), 7, SPIN);
    main.scope(|s| {
        let (a, b) = (s.fork()?, s.fork()?);
        k.copy_u32(a, out.at(0), buf.ptr());
        k.copy_u32(b, out.at(1), buf.ptr());
        Ok(())
    })
    .unwrap();
    main.synchronize().unwrap();
    assert_eq!(out.read(), [7, 7]);
}

#[test]
fn the_parent_waits_for_every_fork() {
    let Some(ctx) = gpu() else { return };
    let k = Kernels::load(&ctx);
    let main = ctx.new_stream().unwrap();
    let x = DeviceBuffer::new(&ctx, 2);
    let out = DeviceBuffer::new(&ctx, 2);
    let w = Window::start(SPIN);
    let value = main
        .scope(|s| {
            let a = s.fork()?;
            let b = s.fork()?;
            k.store_after_spin(a, x.at(0), 3, SPIN);
            k.store_after_spin(b, x.at(1), 4, SPIN);
            Ok(42)
        })
        .unwrap();
    assert_eq!(value, 42);
    let main_done = main.query().unwrap();
    w.assert_pending(!main_done, "the parent after the scope");
    k.copy_u32(&main, out.at(0), x.at(0));
    k.copy_u32(&main, out.at(1), x.at(1));
    main.synchronize().unwrap();
    assert_eq!(out.read(), [3, 4]);
}

#[test]
fn an_early_error_still_joins_the_forks() {
    let Some(ctx) = gpu() else { return };
    let k = Kernels::load(&ctx);
    let main = ctx.new_stream().unwrap();
    let x = DeviceBuffer::new(&ctx, 1);
    let out = DeviceBuffer::new(&ctx, 1);
    let r = main.scope(|s| {
        let a = s.fork()?;
        k.store_after_spin(a, x.ptr(), 4, SPIN);
        failing_step()?;
        Ok(())
    });
    assert!(matches!(r, Err(Error::NotRecorded)), "{r:?}");
    k.copy_u32(&main, out.ptr(), x.ptr());
    main.synchronize().unwrap();
    assert_eq!(out.get(0), 4, "the parent did not wait for the fork");
}

#[test]
fn a_panic_in_the_scope_still_joins_the_forks() {
    let Some(ctx) = gpu() else { return };
    let k = Kernels::load(&ctx);
    let main = ctx.new_stream().unwrap();
    let x = DeviceBuffer::new(&ctx, 1);
    let out = DeviceBuffer::new(&ctx, 1);
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        main.scope(|s| -> cuda_stream::Result<()> {
            let a = s.fork()?;
            k.store_after_spin(a, x.ptr(), 5, SPIN);
            panic!("panic inside a scope");
        })
    }));
    assert!(r.is_err());
    k.copy_u32(&main, out.ptr(), x.ptr());
    main.synchronize().unwrap();
    assert_eq!(out.get(0), 5, "the parent did not wait for the fork");
}

#[test]
fn forks_are_distinct_streams() {
    let Some(ctx) = gpu() else { return };
    let main = ctx.new_stream().unwrap();
    main.scope(|s| {
        let forks = [s.fork()?, s.fork()?, s.fork()?, s.fork()?];
        let raws: HashSet<usize> = forks.iter().map(|f| f.raw() as usize).collect();
        assert_eq!(raws.len(), forks.len());
        assert!(!raws.contains(&(main.raw() as usize)));
        assert_eq!(s.parent(), main.as_stream());
        for f in forks {
            assert_eq!(f.context_raw(), ctx.raw());
            assert!(f.is_nonblocking()?);
        }
        Ok(())
    })
    .unwrap();
    main.synchronize().unwrap();
}

#[test]
fn a_default_stream_can_be_a_parent() {
    let Some(ctx) = gpu() else { return };
    let k = Kernels::load(&ctx);
    let x = DeviceBuffer::new(&ctx, 1);
    let out = DeviceBuffer::new(&ctx, 1);
    std::thread::scope(|sc| {
        sc.spawn(|| {
            let parent = ctx.per_thread_stream();
            k.store_after_spin(parent, x.ptr(), 1, SPIN);
            parent
                .scope(|s| {
                    let a = s.fork()?;
                    k.copy_u32(a, out.ptr(), x.ptr());
                    k.store_after_spin(a, x.ptr(), 2, SPIN);
                    Ok(())
                })
                .unwrap();
            parent.synchronize().unwrap();
        });
    });
    assert_eq!(out.get(0), 1);
    assert_eq!(x.get(0), 2);
}

/// More forks than a thread keeps for its scopes (8): each a distinct stream, and the parent
/// waits for every one of them, in this scope and in the next (which forks the kept streams
/// again).
#[test]
fn the_parent_waits_for_more_forks_than_are_kept_in_place() {
    let Some(ctx) = gpu() else { return };
    let k = Kernels::load(&ctx);
    let main = ctx.new_stream().unwrap();
    const FORKS: usize = 11;
    let x = DeviceBuffer::new(&ctx, FORKS);
    let out = DeviceBuffer::new(&ctx, FORKS);
    for round in 0..2 {
        main.scope(|s| {
            let mut raws = HashSet::new();
            for i in 0..FORKS {
                let f = s.fork()?;
                assert!(
                    raws.insert(f.raw() as usize),
                    "fork {i} is a stream already forked"
                );
                let value = 10 * (round + 1) + i as u32;
                k.store_after_spin(f, x.at(i), value, Duration::from_millis(20));
            }
            Ok(())
        })
        .unwrap();
        for i in 0..FORKS {
            k.copy_u32(&main, out.at(i), x.at(i));
        }
        main.synchronize().unwrap();
        let expected: Vec<u32> = (0..FORKS as u32).map(|i| 10 * (round + 1) + i).collect();
        assert_eq!(
            out.read(),
            expected,
            "round {round}: the parent did not wait for every fork"
        );
    }
}

/// A scope nested in another on the same parent (so on the same pool: its forks are streams of
/// its own) starts after the parent's work and its parent waits for it, and so does the outer
/// scope's.
#[test]
fn a_nested_scope_on_the_same_parent_joins_before_the_outer_one_ends() {
    let Some(ctx) = gpu() else { return };
    let k = Kernels::load(&ctx);
    let main = ctx.new_stream().unwrap();
    let x = DeviceBuffer::new(&ctx, 3);
    let out = DeviceBuffer::new(&ctx, 3);
    k.store_after_spin(&main, x.at(0), 1, SPIN);
    main.scope(|outer| {
        let a = outer.fork()?;
        // Reads x[0] after the parent's store.
        k.copy_u32(a, x.at(1), x.at(0));
        main.scope(|inner| {
            let b = inner.fork()?;
            assert_ne!(b.raw(), a.raw());
            k.store_after_spin(b, x.at(2), 7, SPIN);
            Ok(())
        })?;
        // The parent waits for the nested fork here, before the outer scope ends.
        k.copy_u32(&main, out.at(2), x.at(2));
        Ok(())
    })
    .unwrap();
    k.copy_u32(&main, out.at(1), x.at(1));
    main.synchronize().unwrap();
    assert_eq!(
        out.get(2),
        7,
        "the parent did not wait for the nested scope's fork"
    );
    assert_eq!(
        out.get(1),
        1,
        "the outer fork did not start after the parent's work"
    );
}

/// Forks have their parent's priority, also when one thread alternates between parents of two
/// priorities (the thread remembers the pool it used last).
#[test]
fn forks_have_the_parents_priority() {
    let Some(ctx) = gpu() else { return };
    let range = ctx.priority_range().unwrap();
    let (least, greatest) = (range.least(), range.greatest());
    assert_ne!(least, greatest, "the GPU offers one stream priority only");
    let high = ctx
        .new_stream_with(cuda_stream::StreamOptions::new().priority(greatest))
        .unwrap();
    let low = ctx
        .new_stream_with(cuda_stream::StreamOptions::new().priority(least))
        .unwrap();
    for round in 0..3 {
        for (parent, want) in [(&high, greatest), (&low, least), (&high, greatest)] {
            parent
                .scope(|s| {
                    let (a, b) = (s.fork()?, s.fork()?);
                    assert_eq!(a.priority()?, want, "round {round}");
                    assert_eq!(b.priority()?, want, "round {round}");
                    Ok(())
                })
                .unwrap();
        }
    }
    high.synchronize().unwrap();
    low.synchronize().unwrap();
}
