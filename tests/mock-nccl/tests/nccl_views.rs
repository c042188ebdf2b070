//! NCCL calls on views and other buffer kinds, against the fake NCCL and the mock driver: the
//! lengths are the views', a collective on a view waits for the buffer's earlier write on another
//! stream, and a later raw write not ordered after it is a race (the fake NCCL reports each
//! collective's memory to the race detector); overlapping views in one group do not compile.
//! And a collective that repeats a buffer's last use on its stream while another thread takes
//! the stream's handle is still waited for by a later use elsewhere; a group whose buffer another
//! thread is using waits for it.

use cuda_stream::nccl::{ReduceOp, group};
use cuda_stream::{DeviceBuffer, Error};

mod fixture;

use fixture::{fake, in_child, one_rank};

#[test]
fn collectives_take_views_of_buffers() {
    if in_child().is_some() {
        return;
    }
    let (_g, n, m) = fake();
    let comm = one_rank();
    let ctx = comm.context().clone();
    let (s, t) = (ctx.new_stream().unwrap(), ctx.new_stream().unwrap());
    let mut x = DeviceBuffer::<f32>::zeroed(&ctx, &s, 64).unwrap();
    // Written on t, then reduced on s in two views: each collective waits for the write.
    x.fill(&t, 1.0).unwrap();
    {
        let (lo, mut hi) = x.split_at_mut(16).unwrap();
        // Lengths are the views': 16 against 48 is refused before NCCL.
        assert!(matches!(
            comm.all_reduce(&s, &lo, &mut hi, ReduceOp::Sum),
            Err(Error::LengthMismatch {
                expected: 48,
                actual: 16
            })
        ));
        let mut part = hi.slice_mut(..16).unwrap();
        comm.all_reduce(&s, &lo, &mut part, ReduceOp::Sum).unwrap();
        assert_eq!(n.last("ncclAllReduce").map(|l| l.0), Some(16));
        comm.all_reduce_in_place(&s, &mut hi, ReduceOp::Max)
            .unwrap();
        assert_eq!(n.last("ncclAllReduce").map(|l| l.0), Some(48));
        // In a group too (overlapping views in one group do not compile: `hi` is lent once).
        let mut y = DeviceBuffer::<f32>::zeroed(&ctx, &s, 16).unwrap();
        let mut y_view = y.as_mut_slice();
        group(|g| {
            g.broadcast_in_place(&comm, &s, &mut hi, 0)?;
            g.send(&comm, &s, &lo, 0)?;
            g.recv(&comm, &s, &mut y_view, 0)
        })
        .unwrap();
    }
    assert_eq!(m.races(), 0, "{:?}", m.race_reports());
    // A raw write of the buffer on t, not ordered after the view's collective, is a race.
    // SAFETY: 64 values at the address; the race is the point.
    unsafe { cuda_stream::memset_d32_async(&t, x.device_ptr(), 0, 64) }.unwrap();
    let r = m.race_reports();
    m.clear_races();
    assert!(
        r.iter()
            .any(|r| r.contains("is not ordered after ncclBroadcast")
                || r.contains("is not ordered after ncclRecv")),
        "{r:?}"
    );
    s.synchronize().unwrap();
    t.synchronize().unwrap();
}

#[test]
fn a_repeated_use_whose_stream_is_lent_meanwhile_is_marked_after_its_work() {
    // The in-place all-reduce repeats the buffer's last use, a lazy write on `s`: it takes the
    // small path (no wait, no event). The thread is held once the use was found to repeat and
    // before NCCL enqueued anything (its binding of the communicator's context asks what is
    // current), while another thread takes `s`'s handle, which records the epoch's settling
    // event now, before the collective. A later fill on `t` must wait for the collective itself.
    if in_child().is_some() {
        return;
    }
    let (_g, _n, m) = fake();
    let comm = one_rank();
    let ctx = comm.context().clone();
    let s = std::sync::Arc::new(ctx.new_stream().unwrap());
    let t = ctx.new_stream().unwrap();
    let mut b = DeviceBuffer::<u32>::zeroed(&ctx, &*s, 64).unwrap();
    s.synchronize().unwrap();
    m.pause_after("cuCtxGetCurrent");
    let s1 = s.clone();
    let reducing = std::thread::spawn(move || {
        group(|g| g.all_reduce_in_place(&comm, &*s1, &mut b, ReduceOp::Sum)).unwrap();
        (b, comm)
    });
    m.wait_until_paused("the group never bound its context");
    let _ = s.raw(); // the epoch ends: its settling event is recorded on `s` now
    m.resume();
    let (b, comm) = reducing.join().unwrap();
    b.fill(&t, 1).unwrap();
    t.synchronize().unwrap();
    s.synchronize().unwrap();
    assert_eq!(m.races(), 0, "{:?}", m.race_reports());
    drop((b, comm));
}

#[test]
fn a_group_whose_buffer_another_thread_is_using_waits_for_it() {
    // A group of calls that repeat their buffers' last uses takes the trackers without waiting;
    // one held by another thread (a fill of the buffer, held inside its driver call) sends the
    // group the general way, which waits for it in the trackers' order.
    if in_child().is_some() {
        return;
    }
    let (_g, _n, m) = fake();
    let comm = one_rank();
    let ctx = comm.context().clone();
    let s = ctx.new_stream().unwrap();
    let b = DeviceBuffer::<u32>::zeroed(&ctx, &s, 64).unwrap();
    let mut c = DeviceBuffer::<u32>::zeroed(&ctx, &s, 64).unwrap();
    // `b` read and `c` written on `s`: the same call again repeats both uses.
    comm.all_reduce(&s, &b, &mut c, ReduceOp::Sum).unwrap();
    let resumed = std::sync::atomic::AtomicBool::new(false);
    m.pause_after("cuMemsetD32Async");
    std::thread::scope(|sc| {
        let filling = sc.spawn(|| b.fill(&s, 7).unwrap());
        m.wait_until_paused("the fill never ran");
        // The communicator stays on this thread: another lets the fill go on later.
        sc.spawn(|| {
            std::thread::sleep(std::time::Duration::from_millis(50));
            resumed.store(true, std::sync::atomic::Ordering::SeqCst);
            m.resume();
        });
        group(|g| g.all_reduce(&comm, &s, &b, &mut c, ReduceOp::Sum)).unwrap();
        assert!(
            resumed.load(std::sync::atomic::Ordering::SeqCst),
            "the group went ahead while the fill held the buffer"
        );
        filling.join().unwrap();
    });
    s.synchronize().unwrap();
    assert_eq!(m.races(), 0, "{:?}", m.race_reports());
}
