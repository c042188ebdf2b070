//! Graph replay and capture churn that must not leak host or device memory: 100,000 replays of a
//! graph with a kernel and a host function, then 5,000 captures with host functions, each
//! instantiated, launched and dropped (every closure must be freed once). One test, so that the
//! memory figures include nothing else (the sanitizer runs skip this binary, as `stress`).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use cuda_stream::{CaptureMode, GraphExec, OwnedStream};
use cuda_stream_tests::{DeviceBuffer, Kernels, device_memory, gpu, mib, rss_bytes};

/// Counts drops of a host function's capture.
struct DropCount(Arc<AtomicUsize>);

impl Drop for DropCount {
    fn drop(&mut self) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

fn replay(exec: &GraphExec, s: &OwnedStream, n: usize) {
    for i in 0..n {
        exec.launch(s).unwrap();
        if i % 1000 == 999 {
            s.synchronize().unwrap();
        }
    }
    s.synchronize().unwrap();
}

fn memory(ctx: &cuda_stream::Context) -> (u64, usize) {
    (rss_bytes(), device_memory(ctx).0)
}

fn report(what: &str, before: (u64, usize), after: (u64, usize), took: Duration) {
    let rss = i128::from(after.0) - i128::from(before.0);
    let device = before.1 as i128 - after.1 as i128;
    println!(
        "{what} in {took:?}: RSS {:+.2} MiB, device memory used {:+.2} MiB",
        mib(rss),
        mib(device)
    );
    assert!(
        rss <= 16 << 20,
        "{what}: host RSS grew by {:.2} MiB (tolerance 16 MiB)",
        mib(rss)
    );
    assert!(
        device <= 8 << 20,
        "{what}: device free memory dropped by {:.2} MiB (tolerance 8 MiB)",
        mib(device)
    );
}

#[test]
fn replays_and_capture_churn_keep_host_and_device_memory_flat() {
    let Some(ctx) = gpu() else { return };
    let k = Kernels::load(&ctx);
    let buf = DeviceBuffer::new(&ctx, 1);
    let mut s = ctx.new_stream().unwrap();
    let ran = Arc::new(AtomicUsize::new(0));
    let r = ran.clone();
    let exec = s
        .capture(CaptureMode::ThreadLocal, |cap| {
            k.add_u32(cap, buf.ptr(), 1);
            cap.launch_host_func(move || {
                r.fetch_add(1, Ordering::Relaxed);
            })
        })
        .unwrap()
        .instantiate()
        .unwrap();

    const WARM: usize = 10_000;
    const N: usize = 100_000;
    replay(&exec, &s, WARM); // the driver's and allocator's caches fill here
    let before = memory(&ctx);
    let start = Instant::now();
    replay(&exec, &s, N);
    report(
        &format!("{N} replays"),
        before,
        memory(&ctx),
        start.elapsed(),
    );
    assert_eq!(
        ran.load(Ordering::SeqCst),
        WARM + N,
        "a host function per replay"
    );
    assert_eq!(buf.get(0) as usize, WARM + N, "a kernel per replay");
    drop(exec);

    // Capture churn: every closure captured must be freed once its graphs are gone.
    let dropped = Arc::new(AtomicUsize::new(0));
    let mut churn = |n: usize| {
        for _ in 0..n {
            let d = DropCount(dropped.clone());
            let graph = s
                .capture(CaptureMode::ThreadLocal, |cap| {
                    cap.scope(|sc| {
                        k.add_u32(sc.fork()?, buf.ptr(), 1);
                        Ok(())
                    })?;
                    cap.launch_host_func(move || {
                        let _keep = &d;
                    })
                })
                .unwrap();
            let exec = graph.instantiate().unwrap();
            drop(graph);
            exec.launch(&s).unwrap();
            drop(exec); // possibly mid-launch
        }
        s.synchronize().unwrap();
    };
    const CAPTURES: usize = 5_000;
    churn(500);
    let before = memory(&ctx);
    let start = Instant::now();
    churn(CAPTURES);
    let took = start.elapsed();
    let deadline = Instant::now() + Duration::from_secs(60);
    while dropped.load(Ordering::SeqCst) < 500 + CAPTURES && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(1));
    }
    assert_eq!(
        dropped.load(Ordering::SeqCst),
        500 + CAPTURES,
        "every captured closure freed exactly once"
    );
    report(
        &format!("{CAPTURES} captures + instantiations + launches"),
        before,
        memory(&ctx),
        took,
    );
    assert_eq!(buf.get(0) as usize, WARM + N + 500 + CAPTURES);
}
