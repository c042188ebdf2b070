//! Stress: many threads sharing streams and events, and create/destroy loops that must not leak
//! host or device memory. The two tests run one at a time (the leak figures would otherwise
//! include the other test's allocations).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

use cuda_stream::{Event, EventOptions, OwnedStream};
use cuda_stream_tests::{DeviceBuffer, Kernels, device_memory, gpu, mib, rss_bytes};

static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

const THREADS: usize = 16;
const ITERATIONS: usize = 2000;
const STREAMS: usize = 4;
const EVENTS: usize = 8;

#[test]
fn sixteen_threads_share_streams_and_events() {
    let _serial = serial();
    let Some(ctx) = gpu() else { return };
    let k = Kernels::load(&ctx);
    let counter = DeviceBuffer::new(&ctx, 1);
    let streams: Vec<Arc<OwnedStream>> = (0..STREAMS)
        .map(|_| Arc::new(ctx.new_stream().unwrap()))
        .collect();
    let events: Vec<Arc<Event>> = (0..EVENTS)
        .map(|_| Arc::new(Event::new(&ctx, EventOptions::new()).unwrap()))
        .collect();
    // Per (thread, stream): the sequence number of the last host function that ran.
    let last: Arc<Vec<AtomicU64>> =
        Arc::new((0..THREADS * STREAMS).map(|_| AtomicU64::new(0)).collect());
    let violations = Arc::new(AtomicU64::new(0));
    let host_ran = Arc::new(AtomicU64::new(0));
    let host_enqueued = AtomicU64::new(0);
    let kernels = AtomicU64::new(0);
    let ops = AtomicU64::new(0);

    let start = Instant::now();
    std::thread::scope(|sc| {
        for t in 0..THREADS {
            let streams: Vec<Arc<OwnedStream>> = streams.clone();
            let events: Vec<Arc<Event>> = events.clone();
            let (last, violations, host_ran) = (last.clone(), violations.clone(), host_ran.clone());
            let (ctx, k, counter) = (&ctx, &k, &counter);
            let (host_enqueued, kernels, ops) = (&host_enqueued, &kernels, &ops);
            sc.spawn(move || {
                let mut n_ops = 0u64;
                let mut n_host = 0u64;
                let mut n_kernels = 0u64;
                let mut seq = [0u64; STREAMS];
                for i in 0..ITERATIONS {
                    let si = (t + i) % STREAMS;
                    let oi = (t + i + 1) % STREAMS;
                    let s: &OwnedStream = &streams[si];
                    let o: &OwnedStream = &streams[oi];
                    let e: &Event = &events[(t * 3 + i) % EVENTS];

                    s.record(e).unwrap();
                    o.wait_event(e).unwrap();
                    seq[oi] += 1;
                    let n = seq[oi];
                    let slot = t * STREAMS + oi;
                    let (last_c, violations_c, host_ran_c) =
                        (last.clone(), violations.clone(), host_ran.clone());
                    o.launch_host_func(move || {
                        if last_c[slot].swap(n, Ordering::SeqCst) + 1 != n {
                            violations_c.fetch_add(1, Ordering::SeqCst);
                        }
                        host_ran_c.fetch_add(1, Ordering::SeqCst);
                    })
                    .unwrap();
                    n_host += 1;
                    let _ = s.query().unwrap();
                    let _ = e.query().unwrap();
                    n_ops += 5;

                    if i % 4 == 0 {
                        k.add_u32(s, counter.ptr(), 1);
                        n_kernels += 1;
                        n_ops += 1;
                    }
                    if i % 8 == 0 {
                        o.wait_stream(s).unwrap();
                        n_ops += 1;
                    }
                    if i % 32 == 0 {
                        let own = ctx.new_stream().unwrap();
                        own.wait_event(e).unwrap();
                        let host_ran_c = host_ran.clone();
                        own.launch_host_func(move || {
                            host_ran_c.fetch_add(1, Ordering::SeqCst);
                        })
                        .unwrap();
                        n_host += 1;
                        let ev = own.record_event().unwrap();
                        own.synchronize().unwrap();
                        assert!(ev.query().unwrap());
                        drop(ev);
                        drop(own);
                        n_ops += 7;
                    }
                    if i % 64 == 0 {
                        s.synchronize().unwrap();
                        e.synchronize().unwrap();
                        n_ops += 2;
                    }
                }
                ops.fetch_add(n_ops, Ordering::SeqCst);
                host_enqueued.fetch_add(n_host, Ordering::SeqCst);
                kernels.fetch_add(n_kernels, Ordering::SeqCst);
            });
        }
    });
    for s in &streams {
        s.synchronize().unwrap();
    }
    for e in &events {
        e.synchronize().unwrap();
    }
    let ops = ops.load(Ordering::SeqCst);
    println!(
        "{THREADS} threads: {ops} operations, {} host functions, {} kernels in {:?}",
        host_enqueued.load(Ordering::SeqCst),
        kernels.load(Ordering::SeqCst),
        start.elapsed()
    );
    assert!(ops >= 100_000, "only {ops} operations");
    assert_eq!(
        host_ran.load(Ordering::SeqCst),
        host_enqueued.load(Ordering::SeqCst),
        "every host function ran exactly once"
    );
    assert_eq!(
        violations.load(Ordering::SeqCst),
        0,
        "host functions ran out of order"
    );
    assert_eq!(
        u64::from(counter.get(0)),
        kernels.load(Ordering::SeqCst),
        "every kernel ran"
    );
}

/// One round of create/use/destroy: `n` streams and `n` events, plus host functions, recorded
/// events, completions and per-thread wait events.
fn churn(ctx: &cuda_stream::Context, n: usize) {
    for i in 0..n {
        let s = ctx.new_stream().unwrap();
        let e = Event::new(ctx, EventOptions::new().timing(i % 2 == 0)).unwrap();
        s.record(&e).unwrap();
        if i % 10 == 0 {
            s.launch_host_func(|| ()).unwrap();
            let r = s.record_event().unwrap();
            drop(s.completed());
            drop(r);
        }
        if i % 2 == 0 {
            e.close().unwrap();
            s.close().unwrap();
        } else {
            drop(e);
            drop(s);
        }
    }
    // Threads that die with a cached wait event each.
    let (a, b) = (ctx.new_stream().unwrap(), ctx.new_stream().unwrap());
    for _ in 0..(n / 100) {
        std::thread::scope(|sc| {
            sc.spawn(|| a.wait_stream(&b).unwrap());
        });
    }
    a.synchronize().unwrap();
    ctx.synchronize().unwrap();
}

#[test]
fn creating_and_destroying_100k_streams_and_events_does_not_leak() {
    let _serial = serial();
    let Some(ctx) = gpu() else { return };
    let n = 100_000;
    churn(&ctx, 10_000); // warm-up: the driver's and allocator's caches fill here
    let rss0 = rss_bytes();
    let (free0, total) = device_memory(&ctx);
    let start = Instant::now();
    churn(&ctx, n);
    let took = start.elapsed();
    let rss1 = rss_bytes();
    let (free1, _) = device_memory(&ctx);
    let rss_growth = i128::from(rss1) - i128::from(rss0);
    let device_loss = free0 as i128 - free1 as i128;
    println!(
        "{n} streams + {n} events in {took:?}: RSS {:.1} -> {:.1} MiB ({:+.2} MiB), \
         device free {:.1} -> {:.1} MiB of {:.1} MiB ({:+.2} MiB used)",
        mib(rss0.into()),
        mib(rss1.into()),
        mib(rss_growth),
        mib(free0 as i128),
        mib(free1 as i128),
        mib(total as i128),
        mib(device_loss),
    );
    assert!(
        rss_growth <= 16 << 20,
        "host RSS grew by {:.2} MiB (tolerance 16 MiB)",
        mib(rss_growth)
    );
    assert!(
        device_loss <= 8 << 20,
        "device free memory dropped by {:.2} MiB (tolerance 8 MiB)",
        mib(device_loss)
    );
}
