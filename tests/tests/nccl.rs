//! NCCL on the GPU (feature `nccl`, built by the GPU bundle): a one-rank communicator's
//! collectives on owned streams, ordered after a kernel that writes their input late (no event
//! in the test), results checked; send and receive to itself in a group; a collective captured
//! into a graph and replayed; the errors NCCL and the driver give; with two GPUs, an all-reduce
//! over both in one process (a group, and one thread per rank), a captured two-GPU all-reduce
//! replayed, and two processes with one rank each, joined by an id passed through a file.
//!
//! Every test prints why it skips without a driver, without NCCL (`libnccl.so.2`, or
//! `CUDA_SYS_LIBNCCL`) or without a second GPU.

use std::process::Command;
use std::time::{Duration, Instant};

use cuda_stream::nccl::{Communicator, Group, NcclId, ReduceOp, group, nccl_version};
use cuda_stream::{
    CaptureMode, Context, Device, DeviceBuffer, Error, LaunchConfig, Module, OwnedStream,
    kernel_args,
};
use cuda_stream_tests::{alone, alongside_others, error_chain, gpu, ptx_source, sanitizer};

const CHILD_VAR: &str = "CUDA_STREAM_NCCL_CHILD";

/// Device 0's context when a driver and NCCL are there; else `None`, with the reason printed.
fn nccl_gpu() -> Option<Context> {
    let ctx = gpu()?;
    match nccl_version() {
        Ok(v) => {
            println!("NCCL {}", cuda_stream::ffi::nccl::format_nccl_version(v));
            Some(ctx)
        }
        Err(e) => {
            let why = format!("skipped: no NCCL: {}", error_chain(&e));
            assert!(
                std::env::var_os("CUDA_STREAM_TESTS_REQUIRE_NCCL").is_none(),
                "{why}"
            );
            println!("{why}");
            None
        }
    }
}

fn two_gpus() -> Option<(Context, Context)> {
    let ctx0 = nccl_gpu()?;
    let n = Device::count().unwrap();
    if n < 2 {
        println!("skipped: two-GPU NCCL tests need 2 devices, this machine has {n}");
        return None;
    }
    Some((ctx0, Context::primary(1).unwrap()))
}

fn kernels(ctx: &Context) -> Module {
    Module::from_ptx(ctx, &ptx_source()).unwrap_or_else(|e| panic!("{}", error_chain(&e)))
}

/// A kernel on `stream` that spins `ns` then stores `value` into `y[0]`.
fn store_late(m: &Module, stream: &OwnedStream, y: &mut DeviceBuffer<u32>, value: u32, ns: u64) {
    // SAFETY: store_after_spin(u32 *p, u32 value, u64 ns) writes p[0] only.
    unsafe {
        m.function("store_after_spin").unwrap().launch(
            stream,
            LaunchConfig::new(1, 1),
            &kernel_args![y.write(), value, ns],
        )
    }
    .unwrap();
}

fn one_rank(ctx: &Context) -> Communicator {
    let comm = Communicator::init_all(&[ctx.device()])
        .unwrap_or_else(|e| panic!("{}", error_chain(&e)))
        .remove(0);
    assert_eq!((comm.rank(), comm.size()), (0, 1));
    comm
}

#[test]
fn one_rank_collectives_follow_the_kernel_that_wrote_their_input() {
    let Some(ctx) = nccl_gpu() else { return };
    let _turn = alongside_others();
    let comm = one_rank(&ctx);
    let m = kernels(&ctx);
    let (a, b) = (ctx.new_stream().unwrap(), ctx.new_stream().unwrap());
    let mut x = DeviceBuffer::<u32>::zeroed(&ctx, &a, 1024).unwrap();
    let mut y = DeviceBuffer::<u32>::zeroed(&ctx, &b, 1024).unwrap();
    let rounds = if sanitizer().is_some() { 10 } else { 200 };
    let mut stale = 0;
    for round in 1..=rounds as u32 {
        let ns = if round % 10 == 0 { 2_000_000 } else { 20_000 };
        store_late(&m, &a, &mut x, round, ns); // on a
        comm.all_reduce(&b, &x, &mut y, ReduceOp::Sum).unwrap(); // on b: waits for it
        if y.to_vec(&a).unwrap()[0] != round {
            stale += 1;
        }
    }
    assert_eq!(stale, 0, "stale all-reduce inputs in {rounds} rounds");

    // The other collectives, one rank: copies of the input.
    let src: Vec<f32> = (0..4096).map(|i| i as f32 * 0.5).collect();
    let p = DeviceBuffer::from_host(&ctx, &a, &src).unwrap();
    let mut q = DeviceBuffer::<f32>::zeroed(&ctx, &a, 4096).unwrap();
    for op in [
        ReduceOp::Sum,
        ReduceOp::Prod,
        ReduceOp::Max,
        ReduceOp::Min,
        ReduceOp::Avg,
    ] {
        q.fill(&a, 0.0).unwrap();
        comm.all_reduce(&b, &p, &mut q, op).unwrap();
        assert_eq!(q.to_vec(&a).unwrap(), src, "{op:?}");
    }
    q.fill(&a, 0.0).unwrap();
    comm.broadcast(&b, &p, &mut q, 0).unwrap();
    assert_eq!(q.to_vec(&a).unwrap(), src);
    q.fill(&a, 0.0).unwrap();
    comm.all_gather(&b, &p, &mut q).unwrap();
    assert_eq!(q.to_vec(&a).unwrap(), src);
    q.fill(&a, 0.0).unwrap();
    comm.reduce_scatter(&b, &p, &mut q, ReduceOp::Sum).unwrap();
    assert_eq!(q.to_vec(&a).unwrap(), src);
    let mut r = DeviceBuffer::from_host(&ctx, &a, &src).unwrap();
    comm.all_reduce_in_place(&b, &mut r, ReduceOp::Sum).unwrap();
    comm.broadcast_in_place(&b, &mut r, 0).unwrap();
    assert_eq!(r.to_vec(&a).unwrap(), src);
    // Views: the low half of `p` reduced into the high half of `q`, after a fill of `q` on a.
    q.fill(&a, -1.0).unwrap();
    {
        let (_, mut q_hi) = q.split_at_mut(2048).unwrap();
        comm.all_reduce(&b, &p.slice(..2048).unwrap(), &mut q_hi, ReduceOp::Sum)
            .unwrap();
    }
    let got = q.to_vec(&a).unwrap();
    assert_eq!(got[..2048], [-1.0; 2048], "the low half untouched");
    assert_eq!(
        got[2048..],
        src[..2048],
        "the high half reduced from p's low half"
    );
    comm.close().unwrap();
}

#[test]
fn send_and_receive_to_itself_in_a_group() {
    let Some(ctx) = nccl_gpu() else { return };
    let _turn = alongside_others();
    let comm = one_rank(&ctx);
    let s = ctx.new_stream().unwrap();
    let src: Vec<u64> = (0..10_000).map(|i| i * 3).collect();
    let x = DeviceBuffer::from_host(&ctx, &s, &src).unwrap();
    let mut y = DeviceBuffer::<u64>::zeroed(&ctx, &s, src.len()).unwrap();
    group(|g| {
        g.send(&comm, &s, &x, 0)?;
        g.recv(&comm, &s, &mut y, 0)
    })
    .unwrap_or_else(|e| panic!("{}", error_chain(&e)));
    assert_eq!(y.to_vec(&s).unwrap(), src);
}

#[test]
fn a_captured_all_reduce_replays() {
    let Some(ctx) = nccl_gpu() else { return };
    let _turn = alone();
    let comm = one_rank(&ctx);
    let mut s = ctx.new_stream().unwrap();
    let x = DeviceBuffer::<i32>::zeroed(&ctx, &s, 1 << 16).unwrap();
    let mut y = DeviceBuffer::<i32>::zeroed(&ctx, &s, 1 << 16).unwrap();
    let graph = s
        .capture(CaptureMode::ThreadLocal, |cap| {
            comm.all_reduce(&cap, &x, &mut y, ReduceOp::Sum)
        })
        .unwrap_or_else(|e| panic!("{}", error_chain(&e)));
    assert!(x.is_held_by_graphs() && y.is_held_by_graphs());
    let exec = graph.instantiate().unwrap();
    for v in [5, -7, 11] {
        x.fill(&s, v).unwrap(); // outside the graph, on the replay's stream
        exec.launch(&s).unwrap();
        assert_eq!(y.to_vec(&s).unwrap(), vec![v; 1 << 16], "replay with {v}");
    }
}

/// The `Communicator` dropped (and `close` refused) while an executable graph still holds a
/// captured all-reduce: the graph keeps NCCL's communicator, so the replays run and give the
/// right values; on main the drop destroyed it under the graph (`ncclCommDestroy`), and the
/// replays ran NCCL's kernels against freed resources.
#[test]
fn a_replay_after_the_communicator_is_dropped() {
    let Some(ctx) = nccl_gpu() else { return };
    let _turn = alone();
    for close in [false, true] {
        let comm = one_rank(&ctx);
        let mut s = ctx.new_stream().unwrap();
        let x = DeviceBuffer::<i32>::zeroed(&ctx, &s, 1 << 16).unwrap();
        let mut y = DeviceBuffer::<i32>::zeroed(&ctx, &s, 1 << 16).unwrap();
        let graph = s
            .capture(CaptureMode::ThreadLocal, |cap| {
                comm.all_reduce(&cap, &x, &mut y, ReduceOp::Sum)
            })
            .unwrap_or_else(|e| panic!("{}", error_chain(&e)));
        let exec = graph.instantiate().unwrap();
        drop(graph);
        if close {
            let e = comm.close().unwrap_err();
            assert!(matches!(e, Error::Refused { .. }), "{e}");
        } else {
            drop(comm);
        }
        for v in [3, -9] {
            x.fill(&s, v).unwrap();
            exec.launch(&s).unwrap();
            assert_eq!(y.to_vec(&s).unwrap(), vec![v; 1 << 16], "replay with {v}");
        }
        drop(exec);
        s.synchronize().unwrap();
        cuda_stream::drain_deferred();
    }
    println!("replays after the communicator was dropped: values checked");
}

#[test]
fn an_id_passed_as_bytes_makes_a_one_rank_communicator() {
    let Some(ctx) = nccl_gpu() else { return };
    let _turn = alongside_others();
    let id = NcclId::new().unwrap();
    let bytes: Vec<u8> = id.as_bytes().to_vec(); // as a file or pipe gives them
    let again = NcclId::from_bytes(&bytes).unwrap();
    let comm = Communicator::init_rank(&ctx, 1, &again, 0)
        .unwrap_or_else(|e| panic!("{}", error_chain(&e)));
    let s = ctx.new_stream().unwrap();
    let mut x = DeviceBuffer::from_host(&ctx, &s, &[2.5f64; 100]).unwrap();
    comm.all_reduce_in_place(&s, &mut x, ReduceOp::Sum).unwrap();
    assert_eq!(x.to_vec(&s).unwrap(), vec![2.5; 100]);
    comm.check_async().unwrap();
}

#[test]
fn nccl_and_the_crate_refuse_bad_arguments() {
    let Some(ctx) = nccl_gpu() else { return };
    let _turn = alongside_others();
    let comm = one_rank(&ctx);
    let s = ctx.new_stream().unwrap();
    let mut x = DeviceBuffer::<f32>::zeroed(&ctx, &s, 64).unwrap();
    // NCCL checks roots and peers.
    let e = comm.broadcast_in_place(&s, &mut x, 5).unwrap_err();
    assert!(
        matches!(
            e,
            Error::Nccl {
                call: "ncclBroadcast",
                ..
            }
        ),
        "{e}"
    );
    println!("root 5 of 1: {e}");
    // The crate refuses a device that does not exist before NCCL sees it.
    let e = Communicator::init_all(&[Device::from_raw(4096)]).unwrap_err();
    assert_eq!(e.call(), Some("cuDevicePrimaryCtxRetain"), "{e}");
    println!("device 4096: {e}");
    // The crate checks lengths before NCCL sees them.
    let short = DeviceBuffer::<f32>::zeroed(&ctx, &s, 8).unwrap();
    assert!(matches!(
        comm.all_reduce(&s, &short, &mut x, ReduceOp::Sum),
        Err(Error::LengthMismatch { .. })
    ));
    comm.check_async().unwrap();
}

#[test]
fn two_gpus_all_reduce_in_one_process() {
    let Some((c0, c1)) = two_gpus() else { return };
    let _turn = alone(); // its rank threads capture
    let comms = Communicator::init_all(&[c0.device(), c1.device()])
        .unwrap_or_else(|e| panic!("{}", error_chain(&e)));
    let (s0, s1) = (c0.new_stream().unwrap(), c1.new_stream().unwrap());
    let n = 1 << 20;
    let mut x0 = DeviceBuffer::from_host(&c0, &s0, &vec![1.0f32; n]).unwrap();
    let mut x1 = DeviceBuffer::from_host(&c1, &s1, &vec![2.0f32; n]).unwrap();
    // One thread, two communicators: one group.
    let mut g = Group::new();
    g.all_reduce_in_place(&comms[0], &s0, &mut x0, ReduceOp::Sum)
        .unwrap();
    g.all_reduce_in_place(&comms[1], &s1, &mut x1, ReduceOp::Sum)
        .unwrap();
    g.run().unwrap_or_else(|e| panic!("{}", error_chain(&e)));
    assert_eq!(x0.to_vec(&s0).unwrap(), vec![3.0; n]);
    assert_eq!(x1.to_vec(&s1).unwrap(), vec![3.0; n]);
    // One thread per rank, each capturing its all-reduce; the graphs replayed together.
    let mut comms = comms.into_iter();
    let (k0, k1) = (comms.next().unwrap(), comms.next().unwrap());
    let results: Vec<Vec<f32>> = std::thread::scope(|sc| {
        let run = |comm: Communicator, value: f32| {
            move || {
                let ctx = comm.context().clone();
                let mut s = ctx.new_stream().unwrap();
                let x = DeviceBuffer::from_host(&ctx, &s, &vec![value; n]).unwrap();
                let mut y = DeviceBuffer::<f32>::zeroed(&ctx, &s, n).unwrap();
                let graph = s
                    .capture(CaptureMode::ThreadLocal, |cap| {
                        comm.all_reduce(&cap, &x, &mut y, ReduceOp::Sum)
                    })
                    .unwrap_or_else(|e| panic!("{}", error_chain(&e)));
                let exec = graph.instantiate().unwrap();
                for _ in 0..3 {
                    exec.launch(&s).unwrap();
                }
                y.to_vec(&s).unwrap()
            }
        };
        let h0 = sc.spawn(run(k0, 10.0));
        let h1 = sc.spawn(run(k1, 20.0));
        vec![h0.join().unwrap(), h1.join().unwrap()]
    });
    for r in results {
        assert!(
            r.iter().all(|&v| v == 30.0),
            "a replayed two-GPU all-reduce"
        );
    }
}

/// How long a rank waits for its peer (to join, or for a collective to finish) before it gives
/// up and aborts: a failure on one rank fails the test in seconds instead of hanging it.
const PEER_WAIT: Duration = Duration::from_secs(60);

/// Waits for `s`'s work until `PEER_WAIT` has passed; on time out aborts `comm` (which stops its
/// work in flight) and fails with `who`.
fn wait_or_abort(comm: Communicator, s: &OwnedStream, who: &str) -> Communicator {
    let start = Instant::now();
    while !s
        .query()
        .unwrap_or_else(|e| panic!("{who}: {}", error_chain(&e)))
    {
        if start.elapsed() > PEER_WAIT {
            let aborted = comm.abort();
            panic!("{who}: the collective did not finish in {PEER_WAIT:?}; aborted: {aborted:?}");
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    comm
}

/// The calling thread's current context (raw), and whether device 0's primary context is
/// active in this process.
fn context_state() -> (cuda_stream::ffi::CUcontext, bool) {
    let current = cuda_stream::current_context_raw().unwrap();
    let (mut flags, mut active) = (0u32, 0i32);
    // SAFETY: valid out-pointers; device 0 exists.
    let rc = unsafe { cuda_stream::ffi::cuDevicePrimaryCtxGetState(0, &mut flags, &mut active) };
    assert_eq!(rc, cuda_stream::ffi::CUresult::CUDA_SUCCESS);
    (current, active != 0)
}

/// Rank 1's side of [`two_processes_one_rank_each`], in a child process: device 1 only. NCCL
/// works on the runtime's current device; on main, its all-reduce from a thread with nothing
/// current made device 0's primary context current (and active) in this process, and the
/// `to_vec` after it failed (`cuMemcpyDtoHAsync: CUDA_ERROR_INVALID_VALUE`).
fn rank1(id_file: &str) {
    let bytes = std::fs::read(id_file).expect("the id file");
    let id = NcclId::from_bytes(&bytes).unwrap();
    let ctx = Context::primary(1).unwrap();
    let comm = Communicator::init_rank(&ctx, 2, &id, 1)
        .unwrap_or_else(|e| panic!("rank 1: {}", error_chain(&e)));
    let s = ctx.new_stream().unwrap();
    let mut x = DeviceBuffer::from_host(&ctx, &s, &vec![2u64; 1 << 16]).unwrap();
    let (before, _) = context_state();
    comm.all_reduce_in_place(&s, &mut x, ReduceOp::Sum)
        .unwrap_or_else(|e| panic!("rank 1: {}", error_chain(&e)));
    let (after, device0_active) = context_state();
    println!(
        "rank 1: current context before the all-reduce {before:?}, after {after:?}; device 0's \
         primary context active in this process: {device0_active}"
    );
    assert_eq!(after, before, "rank 1: NCCL changed the current context");
    let comm = wait_or_abort(comm, &s, "rank 1");
    assert_eq!(x.to_vec(&s).unwrap(), vec![3; 1 << 16]);
    comm.close().unwrap();
    println!("rank 1: all-reduce checked");
}

#[test]
fn two_processes_one_rank_each() {
    if let Ok(file) = std::env::var(CHILD_VAR) {
        rank1(&file);
        return;
    }
    let Some((c0, _c1)) = two_gpus() else { return };
    let _turn = alongside_others();
    let id = NcclId::new().unwrap();
    let file = std::env::temp_dir().join(format!("cuda-stream-nccl-id-{}", std::process::id()));
    std::fs::write(&file, id.as_bytes()).unwrap();
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "two_processes_one_rank_each", "--nocapture"])
        .env(CHILD_VAR, &file)
        .env("NCCL_NVLS_ENABLE", "0")
        .spawn()
        .expect("rank 1's process starts");
    // Rank 0 on a thread of its own: `ncclCommInitRank` blocks until rank 1 joins, which a
    // failed child never does. The test waits for the child and for this thread, each with a
    // deadline, and fails (leaving a blocked thread behind, which the process's exit ends).
    let (done_tx, done_rx) = std::sync::mpsc::channel();
    let rank0 = std::thread::spawn(move || {
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let comm = Communicator::init_rank(&c0, 2, &id, 0)
                .unwrap_or_else(|e| panic!("rank 0: {}", error_chain(&e)));
            let s = c0.new_stream().unwrap();
            let mut x = DeviceBuffer::from_host(&c0, &s, &vec![1u64; 1 << 16]).unwrap();
            comm.all_reduce_in_place(&s, &mut x, ReduceOp::Sum)
                .unwrap_or_else(|e| panic!("rank 0: {}", error_chain(&e)));
            let comm = wait_or_abort(comm, &s, "rank 0");
            assert_eq!(x.to_vec(&s).unwrap(), vec![3; 1 << 16]);
            comm.close().unwrap();
        }));
        let _ = done_tx.send(r.is_ok());
    });
    let start = Instant::now();
    let status = loop {
        if let Some(st) = child.try_wait().expect("rank 1's status") {
            break Some(st);
        }
        if start.elapsed() > PEER_WAIT * 2 {
            let _ = child.kill();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let _ = std::fs::remove_file(&file);
    match status {
        Some(st) => assert!(st.success(), "rank 1 failed: {st}"),
        None => panic!("rank 1 did not finish in {:?}: killed", PEER_WAIT * 2),
    }
    match done_rx.recv_timeout(PEER_WAIT) {
        Ok(true) => {
            rank0.join().unwrap();
        }
        Ok(false) => panic!("rank 0 failed (see its panic above)"),
        Err(_) => panic!("rank 0 did not finish in {PEER_WAIT:?} after rank 1 ended"),
    }
}

/// NCCL works on the CUDA runtime's current device and makes the device it found current again
/// afterwards (device 0 when nothing was current). Every call of the crate binds its
/// communicator's context, so the thread's current context is the caller's afterwards, and host
/// copies of either device's buffers work (on main: `cuMemcpyHtoDAsync:
/// CUDA_ERROR_INVALID_VALUE` for device 1 after `init_all`).
#[test]
fn nccl_leaves_the_current_context_as_it_found_it() {
    let Some((c0, c1)) = two_gpus() else { return };
    let _turn = alone();
    for (label, before) in [("nothing", None), ("device 1", Some(&c1))] {
        std::thread::scope(|sc| {
            sc.spawn(|| {
                let _bound = before.map(|c| c.bind().unwrap());
                let want = context_state().0;
                let comms = Communicator::init_all(&[c0.device(), c1.device()])
                    .unwrap_or_else(|e| panic!("{}", error_chain(&e)));
                assert_eq!(context_state().0, want, "{label} current: after init_all");
                let (s0, s1) = (c0.new_stream().unwrap(), c1.new_stream().unwrap());
                let mut x0 = DeviceBuffer::from_host(&c0, &s0, &[1.0f32; 4096]).unwrap();
                let mut x1 = DeviceBuffer::from_host(&c1, &s1, &[2.0f32; 4096]).unwrap();
                let mut g = Group::new();
                g.all_reduce_in_place(&comms[0], &s0, &mut x0, ReduceOp::Sum)
                    .unwrap();
                g.all_reduce_in_place(&comms[1], &s1, &mut x1, ReduceOp::Sum)
                    .unwrap();
                g.run().unwrap_or_else(|e| panic!("{}", error_chain(&e)));
                assert_eq!(context_state().0, want, "{label} current: after a group");
                assert_eq!(x1.to_vec(&s1).unwrap(), vec![3.0; 4096]);
                assert_eq!(x0.to_vec(&s0).unwrap(), vec![3.0; 4096]);
                println!("{label} current: NCCL left it so");
            });
        });
    }
}
