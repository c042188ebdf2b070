//! `cuda_stream::nccl` against the fake NCCL and the mock driver: communicators made and
//! destroyed (none left), init failures, argument checks before NCCL is called (asynchronous
//! errors: `nccl_async.rs`), the arguments NCCL receives, groups always ended, collectives in a capture tying their buffers to the graph,
//! every NCCL call of each operation failed in turn, and a missing NCCL library or symbol (each
//! in a child process, whose process-wide NCCL is another). The fake NCCL reports the memory
//! each collective reads and writes to the test driver's race detector, and every test fails on
//! a race.

use cuda_mock_driver::MockDriver;
use cuda_mock_nccl::partial_nccl_path;
use cuda_stream::ffi::nccl::{Nccl, NcclLoadError, ncclDataType_t, ncclResult_t};
use cuda_stream::nccl::{Communicator, Group, NcclId, ReduceOp, group};
use cuda_stream::{CaptureMode, Context, Device, DeviceBuffer, Error, drain_deferred};

mod fixture;

use fixture::{fake, in_child, in_child_with, one_rank};

#[test]
fn communicators_of_one_process_are_made_and_destroyed() {
    if in_child().is_some() {
        return;
    }
    let (_g, n, m) = fake();
    // Communicators whose destroy failed in the fault test stay alive for the whole process.
    let alive = n.live_comms();
    let comms = Communicator::init_all(&[Device::new(0).unwrap(), Device::new(1).unwrap()])
        .expect("two ranks");
    assert_eq!(n.live_comms(), alive + 2);
    assert_eq!((comms[1].rank(), comms[1].size()), (1, 2));
    assert_eq!(comms[1].context().device().ordinal(), 1);
    drop(comms);
    assert_eq!(n.live_comms(), alive);
    assert_eq!(n.calls("ncclCommDestroy"), 2);
    let id = NcclId::new().unwrap();
    assert_eq!(NcclId::from_bytes(id.as_bytes()).unwrap(), id);
    let ctx = Context::primary(0).unwrap();
    let c = Communicator::init_rank(&ctx, 1, &id, 0).unwrap();
    c.check_async().unwrap();
    c.close().unwrap();
    assert_eq!(n.live_comms(), alive);
    assert_eq!(m.live_streams(), 0);
}

#[test]
fn init_failures_are_errors_naming_the_call() {
    if in_child().is_some() {
        return;
    }
    let (_g, n, _m) = fake();
    let alive = n.live_comms();
    n.fail("ncclCommInitAll", 0, ncclResult_t::ncclSystemError);
    let e = Communicator::init_all(&[Device::new(0).unwrap()]).unwrap_err();
    assert_eq!(e.to_string(), "ncclCommInitAll: ncclSystemError");
    assert_eq!(e.call(), Some("ncclCommInitAll"));
    // A device that does not exist is refused before NCCL (the mock driver has two).
    n.reset();
    let calls = n.calls("ncclCommInitAll");
    let e = Communicator::init_all(&[Device::from_raw(7)]).unwrap_err();
    assert_eq!(
        e.to_string(),
        "cuDevicePrimaryCtxRetain: CUDA_ERROR_INVALID_DEVICE"
    );
    assert_eq!(n.calls("ncclCommInitAll"), calls);
    // An id that is not NCCL's.
    let ctx = Context::primary(0).unwrap();
    let bogus = NcclId::from_bytes(&[9; 128]).unwrap();
    let e = Communicator::init_rank(&ctx, 1, &bogus, 0).unwrap_err();
    assert_eq!(e.to_string(), "ncclCommInitRank: ncclInvalidArgument");
    // Refused before NCCL is called.
    let id = NcclId::new().unwrap();
    let calls = n.calls("ncclCommInitRank");
    assert!(matches!(
        Communicator::init_rank(&ctx, 2, &id, 2),
        Err(Error::InvalidArgument { .. })
    ));
    assert!(matches!(
        Communicator::init_rank(&ctx, 0, &id, 0),
        Err(Error::InvalidArgument { .. })
    ));
    assert!(matches!(
        NcclId::from_bytes(&[0; 12]),
        Err(Error::InvalidArgument { .. })
    ));
    assert!(matches!(
        Communicator::init_all(&[]),
        Err(Error::InvalidArgument { .. })
    ));
    assert_eq!(n.calls("ncclCommInitRank"), calls);
    assert_eq!(n.live_comms(), alive);
}

#[test]
fn collectives_pass_their_arguments_and_check_theirs() {
    if in_child().is_some() {
        return;
    }
    let (_g, n, _m) = fake();
    let comm = one_rank();
    let ctx = comm.context().clone();
    let s = ctx.new_stream().unwrap();
    let a = DeviceBuffer::<i64>::zeroed(&ctx, &s, 100).unwrap();
    let mut b = DeviceBuffer::<i64>::zeroed(&ctx, &s, 100).unwrap();
    comm.all_reduce(&s, &a, &mut b, ReduceOp::Max).unwrap();
    let raw = s.raw() as usize;
    assert_eq!(
        n.last("ncclAllReduce"),
        Some((100, ncclDataType_t::ncclInt64.0, raw))
    );
    comm.broadcast(&s, &a, &mut b, 0).unwrap();
    comm.broadcast_in_place(&s, &mut b, 0).unwrap();
    comm.all_gather(&s, &a, &mut b).unwrap();
    comm.reduce_scatter(&s, &a, &mut b, ReduceOp::Avg).unwrap();
    assert_eq!(n.last("ncclReduceScatter").map(|l| l.0), Some(100));
    // NCCL checks roots and peers: its error, named.
    let e = comm.broadcast_in_place(&s, &mut b, 3).unwrap_err();
    assert_eq!(e.to_string(), "ncclBroadcast: ncclInvalidArgument");
    // Lengths and contexts are checked first.
    let short = DeviceBuffer::<i64>::zeroed(&ctx, &s, 10).unwrap();
    let before = n.calls("ncclAllReduce");
    assert!(matches!(
        comm.all_reduce(&s, &short, &mut b, ReduceOp::Sum),
        Err(Error::LengthMismatch { .. })
    ));
    let ctx1 = Context::primary(1).unwrap();
    let s1 = ctx1.new_stream().unwrap();
    assert!(matches!(
        comm.all_reduce_in_place(&s1, &mut b, ReduceOp::Sum),
        Err(Error::ContextMismatch { what: "the stream" })
    ));
    let mut other = DeviceBuffer::<i64>::zeroed(&ctx1, &s1, 100).unwrap();
    assert!(matches!(
        comm.all_reduce(&s, &a, &mut other, ReduceOp::Sum),
        Err(Error::ContextMismatch { what: "the buffer" })
    ));
    assert_eq!(n.calls("ncclAllReduce"), before);
    // Legacy default stream of the context.
    comm.all_reduce_in_place(&ctx.legacy_stream(), &mut b, ReduceOp::Sum)
        .unwrap();
    assert_eq!(n.last("ncclAllReduce").map(|l| l.2), Some(1));
}

#[test]
fn groups_always_end_and_record_their_calls() {
    if in_child().is_some() {
        return;
    }
    let (_g, n, _m) = fake();
    let comm = one_rank();
    let ctx = comm.context().clone();
    let s = ctx.new_stream().unwrap();
    let x = DeviceBuffer::<u8>::zeroed(&ctx, &s, 32).unwrap();
    let mut y = DeviceBuffer::<u8>::zeroed(&ctx, &s, 32).unwrap();
    group(|g| {
        g.send(&comm, &s, &x, 0)?;
        g.recv(&comm, &s, &mut y, 0)
    })
    .unwrap();
    assert_eq!((n.calls("ncclGroupStart"), n.calls("ncclGroupEnd")), (1, 1));
    assert_eq!((n.calls("ncclSend"), n.calls("ncclRecv")), (1, 1));
    // A failing call inside: the group still ends, and the call's error is returned.
    n.fail("ncclRecv", 0, ncclResult_t::ncclInvalidUsage);
    let mut g = Group::new();
    g.send(&comm, &s, &x, 0).unwrap();
    g.recv(&comm, &s, &mut y, 0).unwrap();
    assert_eq!(g.len(), 2);
    let e = g.run().unwrap_err();
    assert_eq!(e.to_string(), "ncclRecv: ncclInvalidUsage");
    assert_eq!(n.group_depth(), 0);
    // A failing end.
    n.reset();
    n.fail("ncclGroupEnd", 0, ncclResult_t::ncclInternalError);
    let e = group(|g| g.all_reduce_in_place(&comm, &s, &mut y, ReduceOp::Sum)).unwrap_err();
    assert_eq!(e.to_string(), "ncclGroupEnd: ncclInternalError");
    assert_eq!(n.group_depth(), 0);
    // An empty group issues nothing; a dropped one too.
    n.reset();
    Group::new().run().unwrap();
    let mut g = Group::new();
    g.send(&comm, &s, &x, 0).unwrap();
    drop(g);
    assert_eq!(n.calls("ncclGroupStart") + n.calls("ncclSend"), 0);
    // One buffer on two streams of one group is refused.
    let s2 = ctx.new_stream().unwrap();
    let e = group(|g| {
        g.send(&comm, &s, &x, 0)?;
        g.send(&comm, &s2, &x, 0)
    })
    .unwrap_err();
    assert!(matches!(e, Error::InvalidArgument { .. }), "{e}");
}

/// A group keeps its first calls inline and the rest on the heap, and tracks up to eight uses
/// on the stack: a group of six calls with twelve buffer uses (past both) issues every call in
/// order, inside one group, and each later use of its buffers is ordered after it.
#[test]
fn a_group_past_its_inline_calls_issues_and_tracks_them_all() {
    if in_child().is_some() {
        return;
    }
    let (_g, n, _m) = fake();
    let comm = one_rank();
    let ctx = comm.context().clone();
    let streams: Vec<_> = (0..6).map(|_| ctx.new_stream().unwrap()).collect();
    let sends: Vec<_> = (0..6u8)
        .map(|i| DeviceBuffer::<u8>::from_host(&ctx, &streams[0], &[i + 1; 16]).unwrap())
        .collect();
    let mut recvs: Vec<_> = (0..6)
        .map(|_| DeviceBuffer::<u8>::zeroed(&ctx, &streams[0], 16).unwrap())
        .collect();
    let mut g = Group::new();
    for ((s, x), y) in streams.iter().zip(&sends).zip(recvs.iter_mut()) {
        g.all_reduce(&comm, s, x, y, ReduceOp::Sum).unwrap();
    }
    assert_eq!(g.len(), 6);
    g.run().unwrap();
    assert_eq!((n.calls("ncclGroupStart"), n.calls("ncclGroupEnd")), (1, 1));
    assert_eq!(n.calls("ncclAllReduce"), 6);
    // Each result read on another stream than the one it was written on: ordered after the
    // call, or the test driver's race detector (which the fake NCCL reports each call's accesses
    // to) fails the test when its guard drops. The fake moves no data.
    for (i, y) in recvs.iter().enumerate() {
        let other = &streams[(i + 1) % 6];
        assert_eq!(y.to_vec(other).unwrap().len(), 16, "call {i}");
    }
}

#[test]
fn a_collective_in_a_capture_ties_its_buffers_to_the_graph() {
    if in_child().is_some() {
        return;
    }
    let (_g, n, m) = fake();
    let comm = one_rank();
    let ctx = comm.context().clone();
    let mut s = ctx.new_stream().unwrap();
    let mut x = DeviceBuffer::<f64>::zeroed(&ctx, &s, 16).unwrap();
    let graph = s
        .capture(CaptureMode::ThreadLocal, |cap| {
            comm.all_reduce_in_place(&cap, &mut x, ReduceOp::Sum)
        })
        .unwrap();
    assert!(x.is_held_by_graphs());
    assert_eq!(n.calls("ncclAllReduce"), 1);
    let exec = graph.instantiate().unwrap();
    drop(graph);
    exec.launch(&s).unwrap();
    s.synchronize().unwrap();
    drop((exec, x));
    drain_deferred();
    assert_eq!(m.bad_uses(), 0);
}

/// The memory of each collective reaches the test driver's race detector: at the call, at the
/// group's end, and from each replay of a captured one. Raw memsets on another stream, which
/// nothing orders, race with them (checked, then forgotten).
#[test]
fn collectives_report_their_buffers_to_the_race_detector() {
    if in_child().is_some() {
        return;
    }
    let (_g, _n, m) = fake();
    let comm = one_rank();
    let ctx = comm.context().clone();
    let mut s = ctx.new_stream().unwrap();
    let t = ctx.new_stream().unwrap();
    let a = DeviceBuffer::<u32>::zeroed(&ctx, &s, 64).unwrap();
    let mut b = DeviceBuffer::<u32>::zeroed(&ctx, &s, 64).unwrap();
    let races = |expected: &str| {
        let r = m.race_reports();
        m.clear_races();
        assert_eq!(r.len(), 1, "{r:?}");
        assert!(r[0].contains(expected), "{r:?}");
    };
    let raw_memset = |p: u64| {
        // SAFETY: `p` holds 64 values; the race with the collective is the point of the test
        // (the mock touches no memory for a collective).
        unsafe { cuda_stream::memset_d32_async(&t, p, 1, 64) }.unwrap();
    };
    comm.all_reduce(&s, &a, &mut b, ReduceOp::Sum).unwrap();
    assert_eq!(
        m.races(),
        0,
        "the collective is ordered after b's zeroing on s"
    );
    raw_memset(b.device_ptr());
    races("is not ordered after ncclAllReduce (write of");
    t.synchronize().unwrap();
    group(|g| g.all_reduce_in_place(&comm, &s, &mut b, ReduceOp::Sum)).unwrap();
    assert_eq!(m.races(), 0);
    raw_memset(b.device_ptr());
    races("is not ordered after ncclAllReduce (write of");
    t.synchronize().unwrap();
    let graph = s
        .capture(CaptureMode::ThreadLocal, |cap| {
            comm.all_reduce_in_place(&cap, &mut b, ReduceOp::Sum)
        })
        .unwrap();
    let exec = graph.instantiate().unwrap();
    exec.launch(&s).unwrap();
    raw_memset(b.device_ptr());
    races("is not ordered after ncclAllReduce (write of");
    s.synchronize().unwrap();
    t.synchronize().unwrap();
    drop((exec, graph, a, b));
    drain_deferred();
}

#[test]
fn every_nccl_call_of_each_operation_fails_cleanly() {
    if in_child().is_some() {
        return;
    }
    let (_g, n, m) = fake();
    type OpFn = fn() -> cuda_stream::Result<()>;
    let ops: &[(&str, OpFn)] = &[
        ("init_all + all_reduce + close", || {
            let comm = Communicator::init_all(&[Device::new(0)?])?.remove(0);
            let ctx = comm.context().clone();
            let s = ctx.new_stream()?;
            let mut x = DeviceBuffer::<u32>::zeroed(&ctx, &s, 8)?;
            comm.all_reduce_in_place(&s, &mut x, ReduceOp::Sum)?;
            comm.close()
        }),
        (
            "init_rank + broadcast + all_gather + reduce_scatter + abort",
            || {
                let ctx = Context::primary(0)?;
                let comm = Communicator::init_rank(&ctx, 1, &NcclId::new()?, 0)?;
                let s = ctx.new_stream()?;
                let a = DeviceBuffer::<f32>::zeroed(&ctx, &s, 8)?;
                let mut b = DeviceBuffer::<f32>::zeroed(&ctx, &s, 8)?;
                comm.broadcast(&s, &a, &mut b, 0)?;
                comm.all_gather(&s, &a, &mut b)?;
                comm.reduce_scatter(&s, &a, &mut b, ReduceOp::Min)?;
                comm.abort()
            },
        ),
        (
            "init_all of two + a group of sends and receives + drop",
            || {
                let comms = Communicator::init_all(&[Device::new(0)?, Device::new(1)?])?;
                let c0 = comms[0].context().clone();
                let c1 = comms[1].context().clone();
                let (s0, s1) = (c0.new_stream()?, c1.new_stream()?);
                let x0 = DeviceBuffer::<u8>::zeroed(&c0, &s0, 8)?;
                let x1 = DeviceBuffer::<u8>::zeroed(&c1, &s1, 8)?;
                let mut y0 = DeviceBuffer::<u8>::zeroed(&c0, &s0, 8)?;
                let mut y1 = DeviceBuffer::<u8>::zeroed(&c1, &s1, 8)?;
                group(|g| {
                    g.send(&comms[0], &s0, &x0, 1)?;
                    g.recv(&comms[0], &s0, &mut y0, 1)?;
                    g.send(&comms[1], &s1, &x1, 0)?;
                    g.recv(&comms[1], &s1, &mut y1, 0)
                })
            },
        ),
    ];
    const NCCL_CALLS: &[&str] = &[
        "ncclGetUniqueId",
        "ncclCommInitAll",
        "ncclCommInitRank",
        "ncclCommGetAsyncError",
        "ncclAllReduce",
        "ncclBroadcast",
        "ncclAllGather",
        "ncclReduceScatter",
        "ncclSend",
        "ncclRecv",
        "ncclGroupStart",
        "ncclGroupEnd",
        "ncclCommDestroy",
        "ncclCommAbort",
    ];
    let mut cases = 0;
    // Communicators whose destroy failed stay alive (and are never destroyed twice).
    let mut alive = n.live_comms();
    for (name, op) in ops {
        n.reset();
        op().unwrap_or_else(|e| panic!("{name}, clean: {e}"));
        let counts: Vec<(&str, u64)> = NCCL_CALLS.iter().map(|c| (*c, n.calls(c))).collect();
        assert_eq!(n.live_comms(), alive, "{name}");
        for (call, count) in counts {
            for k in 1..=count {
                n.reset();
                n.fail(call, k, ncclResult_t::ncclInternalError);
                let r = op();
                drain_deferred();
                cases += 1;
                // The destroys of a drop have nobody to report to.
                let swallowed = matches!(call, "ncclCommDestroy" | "ncclCommAbort")
                    && !name.contains("close")
                    && !name.contains("abort");
                let dropped_get_async = call == "ncclCommGetAsyncError" && r.is_ok();
                match r {
                    Err(e) => assert_eq!(
                        e.to_string(),
                        format!("{call}: ncclInternalError"),
                        "{name}, {call} {k}/{count}"
                    ),
                    Ok(()) => assert!(
                        swallowed || dropped_get_async,
                        "{name}, {call} {k}/{count}: returned Ok"
                    ),
                }
                assert_eq!(n.group_depth(), 0, "{name}, {call} {k}/{count}");
                assert_eq!(
                    m.bad_uses(),
                    0,
                    "{name}, {call} {k}/{count}: a dead handle used"
                );
                // A communicator whose destroy failed stays alive, once.
                let failed_destroy = matches!(call, "ncclCommDestroy" | "ncclCommAbort");
                let expected = alive + u64::from(failed_destroy);
                assert_eq!(
                    n.live_comms(),
                    expected,
                    "{name}, {call} {k}/{count}: leaked"
                );
                alive = expected;
            }
        }
    }
    assert_eq!(m.bad_uses(), 0);
    assert!(cases >= 20, "{cases} NCCL fault cases");
    println!("NCCL fault cases: {cases}");
}

#[test]
fn a_communicator_dropped_or_closed_in_a_host_function_is_destroyed_later() {
    if in_child().is_some() {
        return;
    }
    let (_g, n, m) = fake();
    let alive = n.live_comms();
    let mut comms = Communicator::init_all(&[Device::new(0).unwrap(), Device::new(1).unwrap()])
        .unwrap()
        .into_iter();
    let (a, b) = (comms.next().unwrap(), comms.next().unwrap());
    let ctx = Context::primary(0).unwrap();
    let s = ctx.new_stream().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    s.launch_host_func(move || {
        drop(a);
        let closed = b.close().map_err(|e| e.to_string());
        // Nothing destroyed here: both queued for an ordinary thread.
        let _ = tx.send((closed, n.live_comms()));
    })
    .unwrap();
    s.synchronize().unwrap(); // an ordinary thread: drains the queued destroys
    let (closed, live_inside) = rx.recv().unwrap();
    assert_eq!(
        closed,
        Err("ncclCommDestroy cannot be made inside a host function".into())
    );
    assert_eq!(
        live_inside,
        alive + 2,
        "nothing destroyed inside the host function"
    );
    assert_eq!(
        m.host_fn_api_calls(),
        0,
        "no CUDA call from the host function"
    );
    drain_deferred();
    assert_eq!(n.live_comms(), alive, "both destroyed afterwards");
}

#[test]
fn nccl_calls_inside_a_host_function_are_refused_before_nccl() {
    if in_child().is_some() {
        return;
    }
    let (_g, n, m) = fake();
    let comm = one_rank();
    let ctx = comm.context().clone();
    let s = ctx.new_stream().unwrap();
    let other = ctx.new_stream().unwrap();
    let mut x = DeviceBuffer::<f32>::zeroed(&ctx, &other, 64).unwrap();
    other.synchronize().unwrap();
    let nccl_calls = || n.calls("ncclCommGetAsyncError") + n.calls("ncclAllReduce");
    let before = nccl_calls();
    let (tx, rx) = std::sync::mpsc::channel();
    s.launch_host_func(move || {
        let checked = comm.check_async();
        let reduced = comm.all_reduce_in_place(&other, &mut x, ReduceOp::Sum);
        // Everything goes back to an ordinary thread.
        let _ = tx.send((checked, reduced, comm, other, x));
    })
    .unwrap();
    s.synchronize().unwrap();
    let (checked, reduced, comm, other, mut x) = rx.recv().unwrap();
    assert!(
        matches!(
            checked,
            Err(Error::InHostFunction {
                call: "ncclCommGetAsyncError"
            })
        ),
        "{checked:?}"
    );
    assert!(
        matches!(reduced, Err(Error::InHostFunction { .. })),
        "{reduced:?}"
    );
    assert_eq!(nccl_calls(), before, "NCCL was called from a host function");
    assert_eq!(
        m.host_fn_api_calls(),
        0,
        "the driver was called from a host function"
    );
    // The same calls on an ordinary thread reach NCCL.
    let reduces = n.calls("ncclAllReduce");
    comm.check_async().unwrap();
    comm.all_reduce_in_place(&other, &mut x, ReduceOp::Sum)
        .unwrap();
    assert_eq!(n.calls("ncclAllReduce"), reduces + 1);
}

#[test]
fn a_missing_nccl_is_an_error_value() {
    match in_child().as_deref() {
        Some("a_missing_nccl_is_an_error_value") => {
            let _m = MockDriver::global();
            let e = Communicator::init_all(&[Device::new(0).unwrap()]).unwrap_err();
            assert_eq!(e.to_string(), "ncclCommInitAll: no usable NCCL");
            let Error::NcclLoad { source, .. } = &e else {
                panic!("{e:?}")
            };
            let text = source.to_string();
            assert!(
                text.contains("/nonexistent/libnccl.so.2 (no such file)"),
                "{text}"
            );
            assert!(matches!(
                NcclId::new(),
                Err(Error::NcclLoad {
                    call: "ncclGetUniqueId",
                    ..
                })
            ));
            println!("child: {e}: {text}");
        }
        Some(_) => {}
        None => {
            let out = in_child_with(
                "a_missing_nccl_is_an_error_value",
                &[("CUDA_SYS_LIBNCCL", "/nonexistent/libnccl.so.2".as_ref())],
            );
            assert!(
                out.contains("child: ncclCommInitAll: no usable NCCL"),
                "{out}"
            );
            // Opened explicitly: the loader's errors.
            // SAFETY: a file that does not exist: nothing is loaded.
            match unsafe { Nccl::open("/nonexistent/libnccl.so.2") } {
                Err(NcclLoadError::NotFound { tried }) => assert_eq!(tried.len(), 1),
                other => panic!("{other:?}"),
            }
            // SAFETY: the C library's libm, whose initialisers are sound to run; it exports no
            // `ncclGetVersion`, so none of its functions is called.
            match unsafe { Nccl::open("libm.so.6") } {
                Err(e @ NcclLoadError::NotNccl { .. }) => {
                    assert_eq!(
                        e.to_string(),
                        "libm.so.6 is not NCCL: it does not export ncclGetVersion"
                    )
                }
                other => panic!("{other:?}"),
            }
        }
    }
}

#[test]
fn an_nccl_missing_a_function_is_an_error_value() {
    match in_child().as_deref() {
        Some("an_nccl_missing_a_function_is_an_error_value") => {
            let _m = MockDriver::global();
            NcclId::new().expect("the partial NCCL has ncclGetUniqueId");
            let e = Communicator::init_all(&[Device::new(0).unwrap()]).unwrap_err();
            let Error::NcclLoad { call, source } = &e else {
                panic!("{e:?}")
            };
            assert_eq!(*call, "ncclCommInitAll");
            assert_eq!(
                source.to_string(),
                "ncclCommInitAll is not exported by NCCL 2.27.7"
            );
            println!("child: {e}: {source}");
        }
        Some(_) => {}
        None => {
            let path = partial_nccl_path();
            let out = in_child_with(
                "an_nccl_missing_a_function_is_an_error_value",
                &[("CUDA_SYS_LIBNCCL", path.as_os_str())],
            );
            assert!(
                out.contains("child: ncclCommInitAll: no usable NCCL"),
                "{out}"
            );
            // SAFETY: the partial fake NCCL, built with this test.
            let nccl = unsafe { Nccl::open(&path) }.expect("it has ncclGetVersion");
            assert_eq!(nccl.version(), 22707);
            assert!(matches!(
                nccl.ncclAllReduce(),
                Err(NcclLoadError::MissingSymbol {
                    name: "ncclAllReduce",
                    version: 22707
                })
            ));
            // Asked twice: the cached answer.
            assert!(nccl.ncclAllReduce().is_err());
            assert!(nccl.ncclGetUniqueId().is_ok());
        }
    }
}
