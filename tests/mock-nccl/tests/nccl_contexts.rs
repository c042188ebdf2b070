//! `cuda_stream::nccl` and the current context, against the fake NCCL (which sets and restores
//! the CUDA runtime's current device through the mock driver, as NCCL does): NCCL calls leave
//! the calling thread's current context as they found it, host copies work after a two-device
//! all-reduce, and a graph holding a captured collective keeps its communicator.

mod fixture;

use cuda_stream::nccl::{Communicator, Group, ReduceOp};
use cuda_stream::{
    CaptureMode, Context, Device, DeviceBuffer, Error, current_context_raw, drain_deferred,
};
use fixture::{fake, in_child, one_rank};

/// NCCL makes the communicator's device current for its work and then the device it found
/// (device 0 when nothing was current; the fake does the same through the mock driver): every
/// call of the crate binds its communicator's context, so the calling thread's current context
/// is the same afterwards, whatever it was.
#[test]
fn nccl_calls_leave_the_current_context_as_they_found_it() {
    if in_child().is_some() {
        return;
    }
    let (_g, _n, _m) = fake();
    let (c0, c1) = (Context::primary(0).unwrap(), Context::primary(1).unwrap());
    for before in [None, Some(&c1), Some(&c0)] {
        std::thread::scope(|sc| {
            sc.spawn(|| {
                let _bound = before.map(|c| c.bind().unwrap());
                let want = before.map_or(std::ptr::null_mut(), |c| c.raw());
                let now = || current_context_raw().unwrap();
                let comms = Communicator::init_all(&[c0.device(), c1.device()]).unwrap();
                assert_eq!(now(), want, "after ncclCommInitAll");
                let (s0, s1) = (c0.new_stream().unwrap(), c1.new_stream().unwrap());
                let mut x0 = DeviceBuffer::<f32>::zeroed(&c0, &s0, 64).unwrap();
                let mut x1 = DeviceBuffer::<f32>::zeroed(&c1, &s1, 64).unwrap();
                let mut g = Group::new();
                g.all_reduce_in_place(&comms[0], &s0, &mut x0, ReduceOp::Sum)
                    .unwrap();
                g.all_reduce_in_place(&comms[1], &s1, &mut x1, ReduceOp::Sum)
                    .unwrap();
                g.run().unwrap();
                assert_eq!(now(), want, "after a group");
                // One rank's call alone (NCCL would wait for the other; the fake returns).
                comms[1]
                    .all_reduce_in_place(&s1, &mut x1, ReduceOp::Sum)
                    .unwrap();
                assert_eq!(now(), want, "after a collective");
            });
        });
    }
}

/// The failure seen on two H100s: after NCCL ran on two devices with nothing current, device
/// 0's context was current, and a host copy of a buffer of device 1 failed
/// (`cuMemcpyHtoDAsync: CUDA_ERROR_INVALID_VALUE`). Copies bind their context where another
/// is current, and NCCL leaves nothing behind.
#[test]
fn host_copies_work_after_nccl_ran_on_two_devices() {
    if in_child().is_some() {
        return;
    }
    let (_g, _n, m) = fake();
    std::thread::scope(|sc| {
        sc.spawn(|| {
            let comms = Communicator::init_all(&[Device::new(0).unwrap(), Device::new(1).unwrap()])
                .unwrap();
            let (c0, c1) = (comms[0].context().clone(), comms[1].context().clone());
            let (s0, s1) = (c0.new_stream().unwrap(), c1.new_stream().unwrap());
            let mut x0 = DeviceBuffer::from_host(&c0, &s0, &[1.0f32; 256]).unwrap();
            let mut x1 = DeviceBuffer::from_host(&c1, &s1, &[2.0f32; 256]).unwrap();
            let mut g = Group::new();
            g.all_reduce_in_place(&comms[0], &s0, &mut x0, ReduceOp::Sum)
                .unwrap();
            g.all_reduce_in_place(&comms[1], &s1, &mut x1, ReduceOp::Sum)
                .unwrap();
            g.run().unwrap();
            // The fake moves no data: the values are the uploads'.
            assert_eq!(x1.to_vec(&s1).unwrap(), vec![2.0; 256]);
            assert_eq!(x0.to_vec(&s0).unwrap(), vec![1.0; 256]);
        });
    });
    assert_eq!(m.bad_uses(), 0);
}

/// A graph holding a captured collective keeps the NCCL communicator: dropping the
/// `Communicator` destroys nothing while the graph or an executable graph made from it can
/// replay the collective; `close` and `abort` are refused then; the last graph ends it (an abort
/// if one was asked for). On main the drop destroyed the communicator at once, under the graph.
#[test]
fn a_graph_holding_a_collective_keeps_its_communicator() {
    if in_child().is_some() {
        return;
    }
    let (_g, n, _m) = fake();
    let alive = n.live_comms();
    for end in ["drop", "close", "abort"] {
        let comm = one_rank();
        let ctx = comm.context().clone();
        let mut s = ctx.new_stream().unwrap();
        let mut x = DeviceBuffer::<f32>::zeroed(&ctx, &s, 16).unwrap();
        let graph = s
            .capture(CaptureMode::ThreadLocal, |cap| {
                comm.all_reduce_in_place(&cap, &mut x, ReduceOp::Sum)
            })
            .unwrap();
        let exec = graph.instantiate().unwrap();
        assert_eq!(n.live_comms(), alive + 1);
        let (destroys, aborts) = (n.calls("ncclCommDestroy"), n.calls("ncclCommAbort"));
        match end {
            "drop" => drop(comm),
            "close" => assert!(
                matches!(
                    comm.close(),
                    Err(Error::Refused {
                        call: "ncclCommDestroy",
                        ..
                    })
                ),
                "close while a graph holds the communicator"
            ),
            _ => assert!(
                matches!(
                    comm.abort(),
                    Err(Error::Refused {
                        call: "ncclCommAbort",
                        ..
                    })
                ),
                "abort while a graph holds the communicator"
            ),
        }
        assert_eq!(n.live_comms(), alive + 1, "{end}: the graphs hold it");
        drop(graph);
        exec.launch(&s).unwrap();
        exec.launch(&s).unwrap();
        s.synchronize().unwrap();
        assert_eq!(
            n.live_comms(),
            alive + 1,
            "{end}: the executable graph holds it"
        );
        drop(exec);
        s.synchronize().unwrap();
        // The user object's destructor runs on the driver's thread once the last launch is
        // done, and queues the destroy for an ordinary thread: drained here as it comes.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while n.live_comms() != alive && std::time::Instant::now() < deadline {
            drain_deferred();
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        assert_eq!(n.live_comms(), alive, "{end}: ended with the last graph");
        let (d, a) = (
            n.calls("ncclCommDestroy") - destroys,
            n.calls("ncclCommAbort") - aborts,
        );
        assert_eq!(
            (d, a),
            if end == "abort" { (0, 1) } else { (1, 0) },
            "{end}"
        );
        drop(x);
    }
}

/// Seen on two H100s (the NCCL test binary, four test threads): the destroy of a communicator
/// whose last graph ended is queued by the graph's destructor (on the driver's thread) and made
/// by whichever ordinary thread drains the queue next, here one with nothing current. NCCL tears
/// the communicator down on its device and then makes the device it found current (device 0),
/// so the draining thread was left with device 0's primary context current, and a later
/// `init_all` found it there. A drain leaves the thread's current context as it found it.
#[test]
fn a_deferred_destroy_leaves_the_draining_thread_as_it_found_it() {
    if in_child().is_some() {
        return;
    }
    let (_g, n, _m) = fake();
    let alive = n.live_comms();
    let c1 = Context::primary(1).unwrap();
    let mut s = c1.new_stream().unwrap();
    let mut x = DeviceBuffer::<f32>::zeroed(&c1, &s, 16).unwrap();
    for before in [None, Some(&c1)] {
        // A communicator held by a graph alone, whose end queues its destroy.
        let comm = Communicator::init_all(&[c1.device()]).unwrap().remove(0);
        let graph = s
            .capture(CaptureMode::ThreadLocal, |cap| {
                comm.all_reduce_in_place(&cap, &mut x, ReduceOp::Sum)
            })
            .unwrap();
        drop(comm);
        drop(graph);
        s.synchronize().unwrap();
        std::thread::scope(|sc| {
            sc.spawn(|| {
                let _bound = before.map(|c| c.bind().unwrap());
                let want = before.map_or(std::ptr::null_mut(), |c| c.raw());
                let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
                while n.live_comms() != alive && std::time::Instant::now() < deadline {
                    drain_deferred();
                    assert_eq!(current_context_raw().unwrap(), want, "after a drain");
                    std::thread::sleep(std::time::Duration::from_millis(1));
                }
            });
        });
        assert_eq!(n.live_comms(), alive, "the destroy was drained");
    }
}

/// A group of collectives on private streams (whose handles never left the crate), each buffer
/// used only on its own stream, orders nothing: no event is recorded or waited for (the work's
/// stream order covers every use), so the group costs the checks alone.
#[test]
fn a_group_on_private_streams_records_no_event() {
    if in_child().is_some() {
        return;
    }
    let (_g, n, m) = fake();
    let (c0, c1) = (Context::primary(0).unwrap(), Context::primary(1).unwrap());
    let comms = Communicator::init_all(&[c0.device(), c1.device()]).unwrap();
    let (s0, s1) = (c0.new_stream().unwrap(), c1.new_stream().unwrap());
    let mut x0 = DeviceBuffer::<f32>::zeroed(&c0, &s0, 64).unwrap();
    let mut x1 = DeviceBuffer::<f32>::zeroed(&c1, &s1, 64).unwrap();
    let calls = || {
        (
            m.calls("cuEventRecord"),
            m.calls("cuStreamWaitEvent"),
            n.calls("ncclAllReduce"),
        )
    };
    let before = calls();
    for _ in 0..10 {
        let mut g = Group::new();
        g.all_reduce_in_place(&comms[0], &s0, &mut x0, ReduceOp::Sum)
            .unwrap();
        g.all_reduce_in_place(&comms[1], &s1, &mut x1, ReduceOp::Sum)
            .unwrap();
        g.run().unwrap();
    }
    let after = calls();
    assert_eq!(
        (after.0 - before.0, after.1 - before.1, after.2 - before.2),
        (0, 0, 20),
        "events recorded, waits, all-reduces"
    );
}
