//! The main example: two streams ordered by an event, a host function, a current-stream guard,
//! elapsed time, a pool lease and a fork/join scope on device 0.
//!
//! ```sh
//! cargo run --release -p cuda-stream --example streams
//! ```
//!
//! Without an NVIDIA driver it says so and exits with status 2.

use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use cuda_stream::{
    AsStream, Device, Error, EventOptions, StreamOptions, StreamPool, current_stream,
};

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(Error::Load(e)) => {
            eprintln!("no CUDA driver found: {e}");
            eprintln!("this example needs an NVIDIA GPU and its driver (libcuda)");
            ExitCode::from(2)
        }
        Err(e) => {
            eprintln!("error: {e}");
            let mut source = std::error::Error::source(&e);
            while let Some(s) = source {
                eprintln!("  caused by: {s}");
                source = s.source();
            }
            ExitCode::FAILURE
        }
    }
}

fn run() -> cuda_stream::Result<()> {
    let count = Device::count()?;
    let version = cuda_stream::driver_version()?;
    println!(
        "CUDA driver {} with {count} device(s)",
        cuda_stream::ffi::format_version(version)
    );
    if count == 0 {
        println!("no CUDA device: nothing to run");
        return Ok(());
    }
    let device = Device::new(0)?;
    let ctx = device.primary_context()?;
    let range = ctx.priority_range()?;
    println!("device 0: {}, stream priorities {range}", device.name()?);

    let producer = ctx.new_stream_with(StreamOptions::new().priority(range.greatest()))?;
    let consumer = ctx.new_stream()?;
    println!(
        "producer: priority {}, non-blocking {}, id {}",
        producer.priority()?,
        producer.is_nonblocking()?,
        producer.id()?
    );

    let timed = EventOptions::new().timing(true);
    let start = producer.record_event_with(timed)?;
    let order = Arc::new(AtomicUsize::new(0));
    let seen = order.clone();
    producer.launch_host_func(move || {
        seen.fetch_add(1, Ordering::SeqCst);
    })?;
    let end = producer.record_event_with(timed)?;

    consumer.wait_event(&end)?;
    consumer.wait_stream(&producer)?;
    let seen = order.clone();
    consumer.launch_host_func(move || {
        // Runs after the producer's host function, thanks to the wait.
        assert_eq!(seen.load(Ordering::SeqCst), 1);
        seen.fetch_add(1, Ordering::SeqCst);
    })?;
    consumer.synchronize()?;
    end.synchronize()?;
    println!(
        "host functions ran in order ({}), producer span {:?}",
        order.load(Ordering::SeqCst),
        end.elapsed_since(&start)?
    );

    {
        let _guard = consumer.make_current();
        current_stream(&ctx, |s| {
            println!(
                "current stream is the consumer: {}",
                s == consumer.as_stream()
            )
        });
    }

    let pool = StreamPool::new(&ctx, StreamOptions::new());
    let lease = pool.acquire()?;
    lease.wait_stream(&consumer)?;
    drop(lease);

    let joined = producer.scope(|s| {
        let a = s.fork()?;
        let b = s.fork()?;
        a.launch_host_func(|| ())?;
        b.launch_host_func(|| ())?;
        Ok(a != b)
    })?;
    producer.synchronize()?;
    println!("fork/join with two distinct forks: {joined}");
    println!("ok");
    Ok(())
}
