//! One capture shared by several threads, against the mock driver. A `CaptureStream` is `Copy +
//! Send + Sync`, so scoped threads may each enqueue into one capture; what they enqueue that
//! makes the capture's graph own something (host functions, kept values, external events, the
//! buffers a fill ties to the graph) calls `cuGraphRetainUserObject` on that graph, and the
//! driver does not synchronise graph objects. The mock counts explicit graph calls that begin
//! while another call on the same graph is under way; the crate serialises them per graph.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Barrier, Mutex, MutexGuard};

use cuda_mock_driver::MockDriver;
use cuda_stream::{CaptureMode, Context, DeviceBuffer, EventOptions, Result};

const THREADS: usize = 8;
const ROUNDS: usize = 40;

static LOCK: Mutex<()> = Mutex::new(());

/// Serialises the test, installs the mock as the process-wide driver (once) and resets it.
fn mock() -> (MutexGuard<'static, ()>, &'static MockDriver) {
    let guard = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let m = MockDriver::global();
    m.reset();
    (guard, m)
}

#[test]
fn threads_sharing_a_capture_never_use_its_graph_at_once() {
    let (_lock, m) = mock();
    let ctx = Context::primary(0).unwrap();
    let mut s = ctx.new_stream().unwrap();
    let event = Arc::new(ctx.new_event(EventOptions::new()).unwrap());
    let bufs: Vec<DeviceBuffer<u32>> = (0..THREADS)
        .map(|_| DeviceBuffer::zeroed(&ctx, &s, 16).unwrap())
        .collect();
    s.synchronize().unwrap();
    let ran = Arc::new(AtomicUsize::new(0));
    let kept = Arc::new(());
    let graph = s
        .capture(CaptureMode::Relaxed, |cap| {
            let start = Barrier::new(THREADS);
            std::thread::scope(|scope| {
                let workers: Vec<_> = bufs
                    .iter()
                    .map(|buf| {
                        let (start, ran, kept, event) = (&start, &ran, &kept, &event);
                        scope.spawn(move || -> Result<()> {
                            start.wait();
                            for _ in 0..ROUNDS {
                                let ran = ran.clone();
                                cap.launch_host_func(move || {
                                    ran.fetch_add(1, Ordering::SeqCst);
                                })?;
                                cap.keep_alive(kept.clone())?;
                                cap.record_external(event)?;
                                cap.wait_event(event)?;
                                buf.fill(&cap, 7)?;
                            }
                            Ok(())
                        })
                    })
                    .collect();
                workers
                    .into_iter()
                    .try_for_each(|w| w.join().expect("a worker panicked"))
            })
        })
        .expect("the capture");
    let concurrent = m.concurrent_graph_calls();
    let exec = graph.instantiate().unwrap();
    drop(graph);
    exec.launch(&s).unwrap();
    exec.launch(&s).unwrap();
    s.synchronize().unwrap();
    assert_eq!(ran.load(Ordering::SeqCst), 2 * THREADS * ROUNDS);
    for buf in &bufs {
        assert_eq!(buf.to_vec(&s).unwrap(), [7; 16]);
    }
    assert_eq!(
        concurrent, 0,
        "graph calls on the capture's graph overlapped {concurrent} times"
    );
    drop(exec);
    assert!(Arc::strong_count(&kept) >= 1);
}
