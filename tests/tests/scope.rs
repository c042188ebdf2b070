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
