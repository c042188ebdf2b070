// The borrowing patterns the compile-fail cases reject, done right: views, raw borrows,
// default streams and leases used while their owners live, and forks used inside their scope
// (including from scoped threads).
use cuda_stream::{AsStream, Context, Error, Result, Stream, StreamOptions, StreamPool};

fn run(ctx: Context) -> Result<()> {
    let owned = ctx.new_stream()?;
    let view = owned.as_stream();
    // SAFETY: `owned` keeps the handle live for as long as it is borrowed.
    let raw_view = unsafe { Stream::borrow_raw(owned.raw(), &owned) }?;
    assert_eq!(view, raw_view);
    raw_view.synchronize()?;

    let legacy = ctx.legacy_stream();
    legacy.wait_stream(&view)?;
    legacy.synchronize()?;

    let pool = StreamPool::new(&ctx, StreamOptions::new());
    let lease = pool.acquire()?;
    lease.wait_stream(&owned)?;
    lease.synchronize()?;
    drop(lease);

    let forks = owned.scope(|s| {
        let (a, b) = (s.fork()?, s.fork()?);
        assert_ne!(a, b);
        std::thread::scope(|threads| -> Result<()> {
            let ha = threads.spawn(move || a.query().map(drop));
            let hb = threads.spawn(move || b.wait_stream(&a));
            ha.join().expect("thread panicked")?;
            hb.join().expect("thread panicked")
        })?;
        Ok(2)
    })?;
    assert_eq!(forks, 2);
    owned.synchronize()?;
    owned.close()
}

fn main() {
    match Context::primary(0) {
        Ok(ctx) => run(ctx).expect("stream operations failed"),
        Err(
            e
            @ (Error::Load(_) | Error::NoSuchDevice { .. } | Error::Driver { call: "cuInit", .. }),
        ) => {
            eprintln!("skipped: no CUDA device: {e}")
        }
        Err(e) => panic!("Context::primary(0) failed: {e}"),
    }
}
