// The legal uses of capture: an owned stream captured through its view, forks in a scope, an
// `Fn + Send + Sync + 'static` host function, captured and external events, the view sent to a
// scoped thread, enqueueing into a capture begun elsewhere, executable graphs moved to another
// thread and updated.
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use cuda_stream::{CaptureMode, CaptureStatus, Context, Error, EventOptions, Result, Stream};

fn run(ctx: Context) -> Result<()> {
    let mut stream = ctx.new_stream()?;
    let outside = Arc::new(ctx.new_event(EventOptions::new())?);
    let replays = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&replays);
    let graph = stream.capture(CaptureMode::ThreadLocal, |cap| {
        let marker = cap.record_event()?;
        cap.scope(|s| {
            let fork = s.fork()?;
            fork.wait_captured(marker)?;
            // The view is `Send`: another thread may enqueue into the capture.
            std::thread::scope(|t| t.spawn(move || fork.capture_id()).join().unwrap());
            cap.wait_stream(fork)
        })?;
        cap.record_external(&outside)?;
        assert!(matches!(cap.status()?, CaptureStatus::Active { .. }));
        cap.launch_host_func(move || {
            counter.fetch_add(1, Ordering::SeqCst);
        })
    })?;
    let mut exec = graph.instantiate()?;
    // Executable graphs are `Send`.
    let exec2 = std::thread::spawn(move || graph.instantiate().map(|e| (e, graph)))
        .join()
        .unwrap()?;
    exec.update(&exec2.1)?;
    exec.launch(&stream)?;
    exec2.0.launch(&stream)?;
    stream.synchronize()?;
    assert_eq!(replays.load(Ordering::SeqCst), 2);

    // A capture begun elsewhere (here by this crate, through a borrowed view).
    let owner = ();
    // SAFETY: `stream` outlives the view; only the view and its capture use it meanwhile.
    let view = unsafe { Stream::borrow_raw(stream.raw(), &owner) }?;
    // SAFETY: as above.
    let nested = unsafe {
        view.capture(CaptureMode::Relaxed, |_| {
            view.in_capture(|cap| cap.launch_host_func(|| ()))
        })
    }?;
    drop(nested);
    assert_eq!(stream.capture_status()?, CaptureStatus::None);
    Ok(())
}

fn main() {
    match Context::primary(0) {
        Ok(ctx) => run(ctx).expect("capture operations failed"),
        Err(
            e
            @ (Error::Load(_) | Error::NoSuchDevice { .. } | Error::Driver { call: "cuInit", .. }),
        ) => {
            eprintln!("skipped: no CUDA device: {e}")
        }
        Err(e) => panic!("Context::primary(0) failed: {e}"),
    }
}
