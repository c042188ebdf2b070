//! Graph memory nodes and borrowed memory against the mock's counters: a `GraphBuffer` is an
//! allocation node that each replay allocates and its free node frees (nothing live between
//! replays, no bad use), its uses on a fork are ordered by captured events, and it is refused
//! off its capture; a `BorrowedBuffer`'s first use waits for the owner's stream, the owner's
//! later work waits for the borrow's uses, and bad borrows are refused before any use; a pinned
//! buffer copies to a buffer of another context.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use cuda_mock_driver::{MockDriver, Serialized};
use cuda_stream::{
    AsStream, BorrowedBuffer, CaptureMode, Context, DeviceBuffer, Error, GraphBuffer,
    PinnedHostBuffer, Stream,
};
use cuda_stream_tests::gate;

static LOCK: Mutex<()> = Mutex::new(());

fn mock() -> (Serialized, &'static MockDriver) {
    let guard = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let m = MockDriver::global();
    // Frees that graphs queued when the previous test let them go are made against its state,
    // before the reset.
    settle(m);
    cuda_stream::drain_deferred();
    settle(m);
    m.set_memory_pools(1, false);
    m.reset();
    (m.checked(guard), m)
}

fn settle(m: &MockDriver) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while m.pending_host_fns() > 0 {
        assert!(Instant::now() < deadline, "work still pending");
        std::thread::sleep(Duration::from_micros(50));
    }
}

#[test]
fn a_graph_buffer_lives_inside_each_replay() {
    let (_lock, m) = mock();
    let ctx = Context::primary(0).unwrap();
    let mut s = ctx.new_stream().unwrap();
    let out = DeviceBuffer::<u32>::zeroed(&ctx, &s, 64).unwrap();
    s.synchronize().unwrap();
    let live = m.live_allocations();
    let graph = s
        .capture(CaptureMode::ThreadLocal, |cap| {
            let scratch = GraphBuffer::<u32>::zeroed(&ctx, cap, 64)?;
            scratch.fill(&cap, 5)?;
            out.copy_from(&cap, &scratch)?;
            assert!(!scratch.is_held_by_graphs(), "the graph owns its memory");
            Ok(())
        })
        .unwrap();
    assert_eq!(m.calls("cuMemAllocAsync"), 1);
    assert_eq!(m.calls("cuMemFreeAsync"), 1, "the free node");
    assert_eq!(
        m.live_allocations(),
        live,
        "nothing allocated by the capture"
    );
    let exec = graph.instantiate().unwrap();
    for round in 0..3u32 {
        out.fill(&s, round).unwrap();
        exec.launch(&s).unwrap();
        assert_eq!(out.to_vec(&s).unwrap(), [5; 64], "round {round}");
        settle(m);
        assert_eq!(m.live_allocations(), live, "freed by the replay");
    }
    drop((exec, graph, out));
    settle(m);
    assert_eq!((m.bad_uses(), m.bad_destroys()), (0, 0));
}

#[test]
fn a_graph_buffer_used_on_a_fork_is_ordered_by_captured_events() {
    let (_lock, m) = mock();
    let ctx = Context::primary(0).unwrap();
    let mut s = ctx.new_stream().unwrap();
    // Made on another stream: a use from before the capture on a stream that joins it cannot
    // be waited for (the host would have to record an event on a capturing stream).
    let t = ctx.new_stream().unwrap();
    let (a, b) = (
        DeviceBuffer::<u32>::zeroed(&ctx, &t, 16).unwrap(),
        DeviceBuffer::<u32>::zeroed(&ctx, &t, 16).unwrap(),
    );
    let live = m.live_allocations();
    let waits = m.calls("cuStreamWaitEvent");
    let graph = s
        .capture(CaptureMode::ThreadLocal, |cap| {
            let mut scratch = GraphBuffer::<u32>::alloc(&ctx, cap, 16)?;
            scratch.fill(&cap, 9)?;
            let _ = scratch.write(); // a `&mut` use compiles (a kernel argument)
            cap.scope(|sc| {
                let (f1, f2) = (sc.fork()?, sc.fork()?);
                a.copy_from(&f1, &scratch)?; // reads on two forks, after the parent's write
                b.copy_from(&f2, &scratch)?;
                Ok(())
            })?;
            Ok(()) // freed on the parent after both forks' reads
        })
        .unwrap();
    assert!(
        m.calls("cuStreamWaitEvent") >= waits + 4,
        "each fork waits for the write, the free for each read"
    );
    let exec = graph.instantiate().unwrap();
    exec.launch(&s).unwrap();
    assert_eq!(a.to_vec(&s).unwrap(), [9; 16]);
    assert_eq!(b.to_vec(&s).unwrap(), [9; 16]);
    drop((exec, graph, a, b));
    // The graph's user objects let go of `a` and `b` on the driver's thread, which queues
    // their frees for an ordinary thread.
    settle(m);
    cuda_stream::drain_deferred();
    settle(m);
    assert_eq!(m.live_allocations(), live - 2);
    assert_eq!((m.bad_uses(), m.bad_destroys()), (0, 0));
}

#[test]
fn a_graph_buffer_is_refused_off_its_capture() {
    let (_lock, m) = mock();
    let ctx = Context::primary(0).unwrap();
    let mut s = ctx.new_stream().unwrap();
    let other = ctx.new_stream().unwrap();
    let host = PinnedHostBuffer::<u32>::zeroed(&ctx, 4).unwrap();
    let graph = s
        .capture(CaptureMode::Relaxed, |cap| {
            let scratch = GraphBuffer::<u32>::alloc(&ctx, cap, 4)?;
            let refused = scratch.fill(&other, 1).unwrap_err();
            assert!(
                matches!(refused, Error::Refused { .. }),
                "a stream outside the capture: {refused}"
            );
            assert!(matches!(
                scratch.copy_from_pinned(&other, &host),
                Err(Error::Refused { .. })
            ));
            assert!(matches!(scratch.to_vec(&other), Err(Error::Refused { .. })));
            Ok(())
        })
        .unwrap();
    drop((graph, host));
    settle(m);
    assert_eq!((m.bad_uses(), m.bad_destroys()), (0, 0));
}

#[test]
fn graph_memory_needs_memory_pools() {
    let (_lock, m) = mock();
    let ctx1 = Context::primary(1).unwrap();
    let mut s = ctx1.new_stream().unwrap();
    let err = s
        .capture(CaptureMode::ThreadLocal, |cap| {
            GraphBuffer::<u8>::alloc(&ctx1, cap, 8).map(drop)
        })
        .unwrap_err();
    assert_eq!(err.call(), Some("cuMemAllocAsync"), "{err}");
    assert!(
        err.to_string().contains("CUDA_ERROR_NOT_SUPPORTED"),
        "{err}"
    );
    settle(m);
    assert_eq!((m.bad_uses(), m.bad_destroys()), (0, 0));
}

#[test]
fn a_borrowed_buffer_is_ordered_after_its_owner_and_before_its_owners_later_work() {
    let (_lock, m) = mock();
    let ctx = Context::primary(0).unwrap();
    let owner_stream = ctx.new_stream().unwrap();
    let ours = ctx.new_stream().unwrap();
    // The other library's memory and its producer, held back on the owner's stream.
    let owned = DeviceBuffer::<u32>::zeroed(&ctx, &owner_stream, 32).unwrap();
    owner_stream.synchronize().unwrap();
    let hold = gate(&owner_stream);
    owned.fill(&owner_stream, 7).unwrap();
    let seen = DeviceBuffer::<u32>::zeroed(&ctx, &ours, 32).unwrap();
    {
        let owner_view: Stream<'_> = owner_stream.as_stream();
        // SAFETY: `owned` holds 32 u32 for the whole borrow; its work runs on `owner_stream`.
        let mut x = unsafe {
            BorrowedBuffer::<u32>::from_raw(&ctx, owned.device_ptr(), 32, owner_view, &owned)
        }
        .unwrap();
        seen.copy_from(&ours, &x).unwrap(); // must wait for the gated fill
        let _ = x.write();
        drop(hold);
        assert_eq!(seen.to_vec(&ours).unwrap(), [7; 32], "waited for the owner");
        // Our write, held back; then the borrow ends and the owner writes: the owner's
        // write must land last.
        let hold = gate(&ours);
        x.fill(&ours, 1).unwrap();
        drop(x);
        owned.fill(&owner_stream, 3).unwrap();
        drop(hold);
    }
    assert_eq!(
        owned.to_vec(&owner_stream).unwrap(),
        [3; 32],
        "owner after us"
    );
    drop((owned, seen));
    settle(m);
    assert_eq!((m.bad_uses(), m.bad_destroys()), (0, 0));
}

#[test]
fn bad_borrows_are_refused_and_borrowed_memory_stays_out_of_graphs() {
    let (_lock, m) = mock();
    let ctx = Context::primary(0).unwrap();
    let mut s = ctx.new_stream().unwrap();
    let owned = DeviceBuffer::<u32>::zeroed(&ctx, &s, 8).unwrap();
    let p = owned.device_ptr();
    let ctx1 = Context::primary(1).unwrap();
    {
        let view = s.as_stream();
        let borrow = |c: &Context, ptr: u64, len: usize| {
            // SAFETY: `owned` outlives the borrow and its work runs on `s`; the bad values below
            // are refused before any use.
            unsafe { BorrowedBuffer::<u32>::from_raw(c, ptr, len, view, &owned) }
        };
        let past_end = borrow(&ctx, p, 9);
        assert!(matches!(past_end, Err(Error::InvalidArgument { .. })));
        let misaligned = borrow(&ctx, p + 2, 1);
        assert!(matches!(misaligned, Err(Error::InvalidArgument { .. })));
        let unknown = borrow(&ctx, 0x10, 1);
        assert_eq!(
            unknown.unwrap_err().call(),
            Some("cuMemGetAddressRange"),
            "the driver does not know the address"
        );
        let wrong_ctx = borrow(&ctx1, p, 8);
        assert!(matches!(wrong_ctx, Err(Error::ContextMismatch { .. })));
        let empty = borrow(&ctx, 0, 0).unwrap();
        assert!(empty.is_empty());
        drop(empty);
    }
    let borrow = owned.device_ptr();
    let graph = s.capture(CaptureMode::ThreadLocal, |cap| {
        let other = ctx.new_stream()?;
        // SAFETY: as above; the borrow ends inside the closure.
        let x =
            unsafe { BorrowedBuffer::<u32>::from_raw(&ctx, borrow, 8, other.as_stream(), &owned) }?;
        let refused = x.fill(&cap, 1).unwrap_err();
        assert!(matches!(refused, Error::Refused { .. }), "{refused}");
        Ok(())
    });
    drop(graph.unwrap());
    drop(owned);
    settle(m);
    assert_eq!((m.bad_uses(), m.bad_destroys()), (0, 0));
}

#[test]
fn a_pinned_buffer_copies_to_a_buffer_of_another_context() {
    let (_lock, m) = mock();
    let ctx = Context::primary(0).unwrap();
    let ctx1 = Context::primary(1).unwrap();
    let s1 = ctx1.new_stream().unwrap();
    let mut host = PinnedHostBuffer::<u32>::from_slice(&ctx, &[4; 16]).unwrap();
    let dev = DeviceBuffer::<u32>::zeroed(&ctx1, &s1, 16).unwrap();
    dev.copy_from_pinned(&s1, &host).unwrap();
    dev.fill(&s1, 6).unwrap();
    dev.copy_to_pinned(&s1, &mut host).unwrap();
    assert_eq!(host.as_slice().unwrap(), [6; 16]);
    drop((dev, host));
    settle(m);
    assert_eq!((m.bad_uses(), m.bad_destroys()), (0, 0));
}

#[test]
fn a_replay_is_a_use_of_the_buffers_its_graph_holds() {
    let (_lock, m) = mock();
    {
        let ctx = Context::primary(0).unwrap();
        let mut s = ctx.new_stream().unwrap();
        let other = ctx.new_stream().unwrap();
        let out = DeviceBuffer::<u32>::zeroed(&ctx, &other, 8).unwrap();
        other.synchronize().unwrap();
        let graph = s
            .capture(CaptureMode::ThreadLocal, |cap| out.fill(&cap, 5))
            .unwrap();
        let exec = graph.instantiate().unwrap();
        out.fill(&other, 1).unwrap();
        // The replay is held back on `s`; a read on another stream must wait for it.
        let hold = gate(&s);
        exec.launch(&s).unwrap();
        let release = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(50));
            drop(hold);
        });
        assert_eq!(out.to_vec(&other).unwrap(), [5; 8], "read after the replay");
        release.join().unwrap();
        // A write elsewhere after a held-back replay lands last.
        let hold = gate(&s);
        exec.launch(&s).unwrap();
        out.fill(&other, 9).unwrap();
        drop(hold);
        assert_eq!(
            out.to_vec(&other).unwrap(),
            [9; 8],
            "written after the replay"
        );
        drop((exec, graph, out));
        settle(m);
        cuda_stream::drain_deferred();
        settle(m);
    }
    assert_eq!((m.bad_uses(), m.bad_destroys()), (0, 0));
}
