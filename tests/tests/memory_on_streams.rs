//! Memory on streams on the GPU: cross-stream use ordered with no event written by the test,
//! frees that never wait for the device, memory pools, and pinned host memory with safe
//! asynchronous copies.

use std::time::Duration;

use cuda_stream::{
    CaptureMode, Context, DeviceBuffer, Error, Function, LaunchConfig, MemPool, Module,
    PinnedHostBuffer, Stream, kernel_args,
};
use cuda_stream_tests::{Window, alone, alongside_others, error_chain, gpu, ptx_source, sanitizer};

/// The test kernels (`spin`, `store_after_spin`, `copy_u32`) through the safe API.
struct K(Module);

impl K {
    fn f(&self, name: &str) -> Function<'_> {
        self.0.function(name).expect("the kernel exists")
    }
}

fn kernels(ctx: &Context) -> K {
    K(Module::from_ptx(ctx, &ptx_source())
        .unwrap_or_else(|e| panic!("the test PTX loads: {}", error_chain(&e))))
}

fn ns(d: Duration) -> u64 {
    d.as_nanos() as u64
}

fn one() -> LaunchConfig {
    LaunchConfig::new(1, 1)
}

fn rounds(full: usize) -> usize {
    if sanitizer().is_some() { 20 } else { full }
}

/// A producer on one stream behind a kernel that spins, two consumers on two others, and the
/// next round's write on the producer's stream again: no event in the test, no stale read, in
/// every round (with the previous API the read raced the write in 20 of 20 rounds).
#[test]
fn cross_stream_uses_are_ordered_with_no_event_by_hand() {
    let Some(ctx) = gpu() else { return };
    let _turn = alongside_others();
    let k = kernels(&ctx);
    let (a, b, c) = (
        ctx.new_stream().unwrap(),
        ctx.new_stream().unwrap(),
        ctx.new_stream().unwrap(),
    );
    let mut y = DeviceBuffer::<u32>::zeroed(&ctx, &a, 1).unwrap();
    let mut z1 = DeviceBuffer::<u32>::zeroed(&ctx, &b, 1).unwrap();
    let mut z2 = DeviceBuffer::<u32>::zeroed(&ctx, &c, 1).unwrap();
    let mut stale = 0;
    let n = rounds(1000);
    for round in 1..=n as u32 {
        let delay = ns(Duration::from_micros(if round % 10 == 0 {
            2000
        } else {
            20
        }));
        // SAFETY: store_after_spin(u32 *p, u32 value, u64 ns) writes p[0] only.
        unsafe {
            k.f("store_after_spin")
                .launch(&a, one(), &kernel_args![y.write(), round, delay])
        }
        .unwrap();
        // SAFETY: copy_u32(u32 *dst, const u32 *src) reads src[0] and writes dst[0].
        unsafe {
            k.f("copy_u32")
                .launch(&b, one(), &kernel_args![z1.write(), y.read()])
        }
        .unwrap();
        // SAFETY: as above.
        unsafe {
            k.f("copy_u32")
                .launch(&c, one(), &kernel_args![z2.write(), y.read()])
        }
        .unwrap();
        let direct = y.to_vec(&c).unwrap()[0];
        let (v1, v2) = (z1.to_vec(&b).unwrap()[0], z2.to_vec(&c).unwrap()[0]);
        if direct != round || v1 != round || v2 != round {
            stale += 1;
        }
    }
    assert_eq!(stale, 0, "{stale} of {n} rounds read stale data");
}

/// Dropping a buffer while another stream of the context runs a long kernel returns without
/// waiting for that kernel (no context-wide synchronisation): the other stream is still busy
/// after the drop. Also for a buffer used behind the kernel, whose free is then ordered after it.
#[test]
fn a_drop_never_waits_for_the_device() {
    let Some(ctx) = gpu() else { return };
    let _turn = alongside_others();
    let k = kernels(&ctx);
    let (busy, other) = (ctx.new_stream().unwrap(), ctx.new_stream().unwrap());
    // A pool of the test's own: other tests of this process allocate from the default pool.
    let pool = MemPool::new(&ctx).unwrap();
    let before = pool.usage().unwrap().used;

    let unrelated = DeviceBuffer::<f32>::zeroed_in(&pool, &other, 1 << 20).unwrap();
    unrelated.fill(&other, 1.0).unwrap();
    other.synchronize().unwrap();
    // The kernel surely runs while less than half its time has passed on the host: only what is
    // observed then is checked (a host held up longer proves nothing either way).
    let w = Window::start(Duration::from_millis(300));
    // SAFETY: spin(u64 ns) touches no memory.
    unsafe {
        k.f("spin")
            .launch(&busy, one(), &kernel_args![ns(Duration::from_millis(300))])
    }
    .unwrap();
    drop(unrelated);
    w.assert_pending(
        !busy.query().unwrap(),
        "the kernel on another stream, after the drop (a drop that waited for it)",
    );

    let behind = DeviceBuffer::<u32>::zeroed_in(&pool, &busy, 1 << 20).unwrap();
    behind.fill(&busy, 7).unwrap();
    behind.free().unwrap();
    w.assert_pending(
        !busy.query().unwrap(),
        "the kernel, after the free behind it (a free that waited for it)",
    );
    busy.synchronize().unwrap();
    other.synchronize().unwrap();
    assert_eq!(
        pool.usage().unwrap().used,
        before,
        "both frees ran on their streams"
    );
}

/// A buffer filled on one stream behind a spin and read back on another with `to_vec`: the read
/// waits for the fill (safe code, no event written), where the previous API read stale data.
#[test]
fn a_host_read_on_another_stream_waits_for_the_write() {
    let Some(ctx) = gpu() else { return };
    let _turn = alongside_others();
    let k = kernels(&ctx);
    let (a, b) = (ctx.new_stream().unwrap(), ctx.new_stream().unwrap());
    let buf = DeviceBuffer::<u32>::zeroed(&ctx, &a, 1 << 20).unwrap();
    b.synchronize().unwrap();
    for round in 1..=rounds(20) as u32 {
        // SAFETY: spin(u64 ns) touches no memory.
        unsafe {
            k.f("spin")
                .launch(&a, one(), &kernel_args![ns(Duration::from_millis(1))])
        }
        .unwrap();
        buf.fill(&a, round).unwrap();
        let v = buf.to_vec(&b).unwrap();
        assert!(v.iter().all(|&x| x == round), "round {round}: stale data");
    }
}

/// Device-to-device copies across streams, and a borrowed stream (whose uses are marked by
/// events, since it may end without notice).
#[test]
fn copies_and_borrowed_streams_are_ordered_too() {
    let Some(ctx) = gpu() else { return };
    let _turn = alongside_others();
    let k = kernels(&ctx);
    let (a, b) = (ctx.new_stream().unwrap(), ctx.new_stream().unwrap());
    let owner = ctx.new_stream().unwrap();
    // SAFETY: `owner` outlives the view.
    let borrowed = unsafe { Stream::borrow_raw(owner.raw(), &owner) }.unwrap();
    let src = DeviceBuffer::<u32>::zeroed(&ctx, &a, 4096).unwrap();
    let dst = DeviceBuffer::<u32>::zeroed(&ctx, &b, 4096).unwrap();
    for round in 1..=rounds(50) as u32 {
        // SAFETY: spin(u64 ns) touches no memory.
        unsafe {
            k.f("spin")
                .launch(&a, one(), &kernel_args![ns(Duration::from_micros(200))])
        }
        .unwrap();
        src.fill(&a, round).unwrap();
        dst.copy_from(&borrowed, &src).unwrap();
        assert!(dst.to_vec(&b).unwrap().iter().all(|&x| x == round));
    }
}

#[test]
fn pools_report_usage_and_give_memory_back() {
    let Some(ctx) = gpu() else { return };
    let _turn = alongside_others();
    let s = ctx.new_stream().unwrap();
    let default = MemPool::default_for(&ctx).unwrap();
    assert!(default.is_default());
    let buf = DeviceBuffer::<u8>::zeroed(&ctx, &s, 1 << 20).unwrap();
    assert_eq!(buf.pool().as_ref(), Some(&default));

    let pool = MemPool::new(&ctx).unwrap();
    assert!(!pool.is_default());
    pool.set_release_threshold(u64::MAX).unwrap();
    assert_eq!(pool.release_threshold().unwrap(), u64::MAX);
    let mine = DeviceBuffer::<u8>::zeroed_in(&pool, &s, 8 << 20).unwrap();
    assert_eq!(mine.pool().as_ref(), Some(&pool));
    let u = pool.usage().unwrap();
    assert!(u.used >= 8 << 20 && u.reserved >= u.used, "{u:?}");
    drop(mine);
    s.synchronize().unwrap();
    let u = pool.usage().unwrap();
    assert_eq!(u.used, 0, "{u:?}");
    assert!(u.reserved >= 8 << 20, "kept for reuse: {u:?}");
    assert!(u.used_high >= 8 << 20, "{u:?}");
    pool.trim_to(0).unwrap();
    assert_eq!(pool.usage().unwrap().reserved, 0);
    pool.reset_high_water().unwrap();
    assert_eq!(pool.usage().unwrap().used_high, 0);
    drop(buf);
}

/// Pinned memory: uploads and downloads that return at once, host access that waits for the
/// copies it conflicts with, `try_` forms that say `Busy`, and a drop with a copy in flight.
#[test]
fn pinned_copies_are_safe_and_asynchronous() {
    let Some(ctx) = gpu() else { return };
    let _turn = alongside_others();
    let k = kernels(&ctx);
    let (up, down) = (ctx.new_stream().unwrap(), ctx.new_stream().unwrap());
    let n = 1 << 20;
    let data: Vec<u32> = (0..n as u32).collect();
    let host = PinnedHostBuffer::from_slice(&ctx, &data).unwrap();
    let dev = DeviceBuffer::<u32>::alloc_on(&ctx, &up, n).unwrap();
    // Allocated before the spin: page-locking memory may wait for the device's work.
    let mut back = PinnedHostBuffer::<u32>::zeroed(&ctx, n).unwrap();
    // Checked only while the spin surely runs (see `Window`).
    let w = Window::start(Duration::from_millis(100));
    // SAFETY: spin(u64 ns) touches no memory.
    unsafe {
        k.f("spin")
            .launch(&up, one(), &kernel_args![ns(Duration::from_millis(100))])
    }
    .unwrap();
    dev.copy_from_pinned(&up, &host).unwrap();
    dev.copy_to_pinned(&down, &mut back).unwrap();
    let early = back.try_as_slice().map(|s| s[0]);
    let in_flight = host.copies_in_flight();
    w.assert_pending(
        matches!(early, Err(Error::Busy { .. })),
        &format!("the download behind the spin: {early:?}"),
    );
    w.assert_pending(in_flight == 1, "the upload behind the spin");
    assert_eq!(back.as_slice().unwrap(), &data[..]);
    assert_eq!(back.copies_in_flight(), 0);

    // A pinned buffer dropped with its upload in flight: freed later, the copy unharmed.
    let doomed = PinnedHostBuffer::from_slice(&ctx, &vec![9u32; n]).unwrap();
    up.synchronize().unwrap();
    // SAFETY: spin(u64 ns) touches no memory.
    unsafe {
        k.f("spin")
            .launch(&up, one(), &kernel_args![ns(Duration::from_millis(50))])
    }
    .unwrap();
    dev.copy_from_pinned(&up, &doomed).unwrap();
    drop(doomed);
    assert!(dev.to_vec(&down).unwrap().iter().all(|&x| x == 9));
}

/// A kernel captured with `write()`: the graph keeps the buffer for its replays, also after the
/// buffer is dropped; an earlier use on another stream that is not known complete is refused.
#[test]
fn buffer_arguments_in_captures() {
    let Some(ctx) = gpu() else { return };
    // Alone: page-locking memory (the pinned test) may synchronise the device, which
    // invalidates a capture on another thread.
    let _turn = alone();
    let k = kernels(&ctx);
    let mut s = ctx.new_stream().unwrap();
    let other = ctx.new_stream().unwrap();
    let mut y = DeviceBuffer::<u32>::zeroed(&ctx, &s, 1).unwrap();
    let graph = s
        .capture(CaptureMode::ThreadLocal, |cap| {
            // SAFETY: store_after_spin(u32 *p, u32 value, u64 ns) writes p[0] only.
            unsafe {
                k.f("store_after_spin")
                    .launch(&cap, one(), &kernel_args![y.write(), 5u32, 0u64])
            }
        })
        .unwrap();
    assert!(y.is_held_by_graphs());
    let exec = graph.instantiate().unwrap();
    exec.launch(&s).unwrap();
    assert_eq!(y.to_vec(&s).unwrap(), [5]);

    // Written on `other` behind a spin and not waited for by the test: the capture cannot wait
    // for it on the device, so the host waits before the node is recorded.
    // SAFETY: spin(u64 ns) touches no memory.
    unsafe {
        k.f("spin")
            .launch(&other, one(), &kernel_args![ns(Duration::from_millis(20))])
    }
    .unwrap();
    y.fill(&other, 1).unwrap();
    let graph2 = s
        .capture(CaptureMode::ThreadLocal, |cap| {
            // SAFETY: as above.
            unsafe {
                k.f("store_after_spin")
                    .launch(&cap, one(), &kernel_args![y.write(), 6u32, 0u64])
            }
        })
        .unwrap_or_else(|e| panic!("{}", error_chain(&e)));
    assert!(other.query().unwrap(), "the host waited for the fill");
    assert_eq!(y.to_vec(&s).unwrap(), [1]);
    graph2.instantiate().unwrap().launch(&s).unwrap();
    assert_eq!(y.to_vec(&s).unwrap(), [6]);
    drop(y);
    exec.launch(&s).unwrap();
    s.synchronize().unwrap();
}
