//! `StreamPool`: exclusive leases, reuse, limits, and ordering of a returned stream's work.

use std::collections::HashSet;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use cuda_stream::{Error, StreamOptions, StreamPool};
use cuda_stream_tests::{DeviceBuffer, Kernels, gpu};

#[test]
fn live_leases_never_share_a_stream() {
    let Some(ctx) = gpu() else { return };
    let pool = StreamPool::new(&ctx, StreamOptions::new());
    let leases: Vec<_> = (0..40).map(|_| pool.acquire().unwrap()).collect();
    let raws: HashSet<usize> = leases.iter().map(|l| l.raw() as usize).collect();
    assert_eq!(raws.len(), 40, "two live leases shared a stream");
    assert_eq!(pool.created(), 40);
    assert_eq!(pool.free(), 0);
    drop(leases);
    assert_eq!(pool.free(), 40);
    let again: Vec<_> = (0..40).map(|_| pool.acquire().unwrap()).collect();
    let raws2: HashSet<usize> = again.iter().map(|l| l.raw() as usize).collect();
    assert_eq!(raws2, raws, "returned streams are reused");
    assert_eq!(pool.created(), 40);
}

#[test]
fn a_dropped_lease_returns_its_stream() {
    let Some(ctx) = gpu() else { return };
    let pool = StreamPool::new(&ctx, StreamOptions::new());
    let a = pool.acquire().unwrap();
    let raw = a.raw();
    a.synchronize().unwrap();
    drop(a);
    assert_eq!(pool.created(), 1);
    assert_eq!(pool.free(), 1);
    let b = pool.acquire().unwrap();
    assert_eq!(b.raw(), raw);
    assert_eq!(pool.created(), 1);
    drop(b);
    let c = pool.acquire().unwrap();
    assert_eq!(c.raw(), raw);
    assert_eq!(pool.created(), 1);
}

#[test]
fn a_bounded_pool_is_exhausted_at_its_limit() {
    let Some(ctx) = gpu() else { return };
    let pool = StreamPool::bounded(&ctx, StreamOptions::new(), 2);
    let a = pool.acquire().unwrap();
    let b = pool.acquire().unwrap();
    assert_ne!(a.raw(), b.raw());
    match pool.acquire() {
        Err(Error::PoolExhausted { limit }) => assert_eq!(limit, 2),
        other => panic!("expected PoolExhausted, got {other:?}"),
    }
    assert_eq!(pool.created(), 2);
    let a_raw = a.raw();
    drop(a);
    let c = pool.acquire().unwrap();
    assert_eq!(c.raw(), a_raw);
    assert_eq!(pool.created(), 2);
    drop((b, c));
}

#[test]
fn reserve_precreates_streams() {
    let Some(ctx) = gpu() else { return };
    let pool = StreamPool::new(&ctx, StreamOptions::new());
    pool.reserve(4).unwrap();
    assert_eq!((pool.created(), pool.free()), (4, 4));
    let leases: Vec<_> = (0..4).map(|_| pool.acquire().unwrap()).collect();
    assert_eq!((pool.created(), pool.free()), (4, 0));
    drop(leases);
}

#[test]
fn pending_work_of_a_returned_stream_stays_ordered_before_the_next_lease() {
    let Some(ctx) = gpu() else { return };
    let k = Kernels::load(&ctx);
    let buf = DeviceBuffer::new(&ctx, 1);
    let out = DeviceBuffer::new(&ctx, 1);
    let pool = StreamPool::new(&ctx, StreamOptions::new());
    let first = pool.acquire().unwrap();
    let raw = first.raw();
    k.store_after_spin(&first, buf.ptr(), 5, Duration::from_millis(200));
    drop(first); // returned without synchronising
    let second = pool.acquire().unwrap();
    assert_eq!(second.raw(), raw);
    k.copy_u32(&second, out.ptr(), buf.ptr());
    second.synchronize().unwrap();
    assert_eq!(out.get(0), 5);
}

#[test]
fn pool_options_apply_to_its_streams() {
    let Some(ctx) = gpu() else { return };
    let range = ctx.priority_range().unwrap();
    let pool = StreamPool::new(
        &ctx,
        StreamOptions::new()
            .blocking(true)
            .priority(range.greatest()),
    );
    let s = pool.acquire().unwrap();
    assert_eq!(s.priority().unwrap(), range.greatest());
    assert!(!s.is_nonblocking().unwrap());
    assert_eq!(s.device().unwrap(), ctx.device());
}

#[test]
fn leases_stay_exclusive_across_threads() {
    let Some(ctx) = gpu() else { return };
    let pool = StreamPool::new(&ctx, StreamOptions::new());
    let live = Mutex::new(HashSet::new());
    let ran = std::sync::Arc::new(AtomicUsize::new(0));
    std::thread::scope(|sc| {
        for _ in 0..8 {
            sc.spawn(|| {
                for _ in 0..200 {
                    let lease = pool.acquire().unwrap();
                    let raw = lease.raw() as usize;
                    assert!(
                        live.lock().unwrap().insert(raw),
                        "stream {raw:#x} leased twice"
                    );
                    let ran = ran.clone();
                    lease
                        .launch_host_func(move || {
                            ran.fetch_add(1, Ordering::Relaxed);
                        })
                        .unwrap();
                    assert!(live.lock().unwrap().remove(&raw));
                    drop(lease);
                }
            });
        }
    });
    println!("{} streams served 1600 leases", pool.created());
    assert!(pool.created() <= 8);
    // Lease every stream the pool has (it creates none) and synchronise each.
    let created = pool.created();
    let leases: Vec<_> = (0..pool.created())
        .map(|_| pool.acquire().unwrap())
        .collect();
    assert_eq!(pool.created(), created);
    for l in &leases {
        l.synchronize().unwrap();
    }
    assert_eq!(ran.load(Ordering::Relaxed), 1600);
}
