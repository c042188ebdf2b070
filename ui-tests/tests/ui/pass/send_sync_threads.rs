// `OwnedStream`, `Stream<'_>`, `Event`, `Context`, `StreamPool` and `PooledStream` are
// `Send + Sync`: moved into threads, shared by reference with scoped threads, and shared
// through `Arc`. Runs for real where a CUDA device exists; skips (exit 0) otherwise.
use std::sync::Arc;

use cuda_stream::{
    AsStream, Context, Error, EventOptions, Result, Stream, StreamOptions, StreamPool,
};

fn assert_send_sync<T: Send + Sync>() {}

fn run(ctx: Context) -> Result<()> {
    assert_send_sync::<cuda_stream::OwnedStream>();
    assert_send_sync::<Stream<'_>>();
    assert_send_sync::<cuda_stream::Event>();
    assert_send_sync::<Context>();
    assert_send_sync::<StreamPool>();
    assert_send_sync::<cuda_stream::PooledStream<'_>>();

    // Moved into a `'static` thread and moved back out.
    let stream = ctx.new_stream()?;
    let event = ctx.new_event(EventOptions::new())?;
    let pool = StreamPool::new(&ctx, StreamOptions::new());
    let moved_ctx = ctx.clone();
    let worker = std::thread::spawn(move || -> Result<_> {
        stream.record(&event)?;
        stream.synchronize()?;
        let lease = pool.acquire()?;
        lease.wait_event(&event)?;
        lease.synchronize()?;
        drop(lease);
        moved_ctx.new_stream()?.synchronize()?;
        Ok((stream, event, pool))
    });
    let (stream, event, pool) = worker.join().expect("worker thread panicked")?;
    assert!(event.query()?);

    // Shared by reference (and `Stream` copied) with scoped threads.
    let view = stream.as_stream();
    let lease = pool.acquire()?;
    std::thread::scope(|scope| -> Result<()> {
        let a = scope.spawn(move || view.synchronize());
        let b = scope.spawn(|| event.synchronize());
        let c = scope.spawn(|| pool.acquire()?.synchronize());
        let d = scope.spawn(|| lease.synchronize());
        let e = scope.spawn(|| ctx.new_stream()?.synchronize());
        let f = scope.spawn(|| stream.wait_event(&event));
        for handle in [a, b, c, d, e, f] {
            handle.join().expect("scoped thread panicked")?;
        }
        Ok(())
    })?;
    drop(lease);

    // Shared through `Arc` with `'static` threads.
    let shared = Arc::new(stream);
    let handles: Vec<_> = (0..4)
        .map(|_| {
            let s = Arc::clone(&shared);
            std::thread::spawn(move || s.synchronize())
        })
        .collect();
    for handle in handles {
        handle.join().expect("thread panicked")?;
    }
    Ok(())
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
