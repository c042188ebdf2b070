//! The ordering model's known holes on the GPU (`cuda-stream/src/memory/use_tracking/mod.rs`
//! states the model): each case makes a buffer's earlier write late (`store_after_spin`, or a
//! fill behind a `spin`), so that a missing wait reads a stale value, and checks the values
//! round after round (200 rounds, 20 under a sanitizer). No event is written by the tests.
//!
//! - a lazy mark settled before a capture of its stream begins (this crate's capture; a
//!   framework's raw capture of a stream whose handle was taken, before or after the use);
//! - a buffer dropped inside the capture of its own stream is freed (the pool's usage);
//! - another thread's capture survives a fill on a third stream;
//! - a host synchronisation covers only the uses recorded before it;
//! - a private stream that joins a framework's capture: a use elsewhere and `into_raw` are
//!   refused, the buffer keeps its uses, and the values are right once the capture ends;
//! - a replayed peer copy (two GPUs);
//! - programmatic launches: a kernel that waits (`griddepcontrol.wait`) reads the value the
//!   kernel before it wrote (sm_90);
//! - captures begun elsewhere refuse buffers and stay unbroken.

use std::sync::mpsc;
use std::time::Duration;

use cuda_stream::ffi::CUresult;
use cuda_stream::{
    CaptureMode, Context, Device, DeviceBuffer, Error, Function, LaunchConfig, MemPool, Module,
    OwnedStream, Stream, kernel_args,
};
use cuda_stream_tests::{alone, error_chain, gpu, ptx_source, sanitizer, sys};

/// The test kernels through the safe API.
struct K(Module);

impl K {
    fn load(ctx: &Context) -> K {
        K(Module::from_ptx(ctx, &ptx_source())
            .unwrap_or_else(|e| panic!("the test PTX loads: {}", error_chain(&e))))
    }

    fn f(&self, name: &str) -> Function<'_> {
        self.0.function(name).expect("the kernel exists")
    }

    /// `x[0] = value` on `s` after a spin of `d`: a late write, recorded as one.
    fn late_store(&self, s: &OwnedStream, x: &mut DeviceBuffer<u32>, value: u32, d: Duration) {
        let ns = d.as_nanos() as u64;
        // SAFETY: store_after_spin(u32 *p, u32 value, u64 ns) writes p[0] only.
        unsafe {
            self.f("store_after_spin").launch(
                s,
                LaunchConfig::new(1, 1),
                &kernel_args![x.write(), value, ns],
            )
        }
        .unwrap();
    }

    /// A spin of `d` on `s`, touching no memory.
    fn spin(&self, s: &OwnedStream, d: Duration) {
        let ns = d.as_nanos() as u64;
        // SAFETY: spin(u64 ns) touches no memory.
        unsafe {
            self.f("spin")
                .launch(s, LaunchConfig::new(1, 1), &kernel_args![ns])
        }
        .unwrap();
    }
}

fn rounds() -> u32 {
    if sanitizer().is_some() { 20 } else { 200 }
}

/// A delay that varies with the round, so that the late write lands at different times.
fn late(round: u32) -> Duration {
    Duration::from_micros(if round % 10 == 0 { 2000 } else { 50 })
}

/// Begins a capture on a raw stream as a framework would (`cuStreamBeginCapture`, thread-local).
fn raw_begin(s: sys::CUstream) {
    let mode = sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL;
    // SAFETY: a live stream.
    let rc = unsafe { sys::cuStreamBeginCapture(s, mode) };
    assert_eq!(rc, CUresult::CUDA_SUCCESS, "cuStreamBeginCapture");
}

/// Ends the raw capture of `s`, destroys its graph if any, and returns the end's result.
fn raw_end(s: sys::CUstream) -> CUresult {
    let mut graph = std::ptr::null_mut();
    // SAFETY: a valid out-pointer; the capture was begun on this thread.
    let rc = unsafe { sys::cuStreamEndCapture(s, &mut graph) };
    if !graph.is_null() {
        // SAFETY: the capture handed the graph over.
        let d = unsafe { sys::cuGraphDestroy(graph) };
        assert_eq!(d, CUresult::CUDA_SUCCESS, "cuGraphDestroy");
    }
    rc
}

/// Hole 1: the buffer's last write (late, on `s`, no event) and a fill on `t` while `s` is
/// captured. The fill used to be captured (the mark's record joined `t` to the capture), never
/// run, and the capture ended `UNJOINED` (H100: fill `Ok`, capture `Err`, read 0).
#[test]
fn a_lazy_mark_is_settled_before_a_capture_of_its_stream_begins() {
    let Some(ctx) = gpu() else { return };
    let _turn = alone();
    let k = K::load(&ctx);
    let (mut s, t) = (ctx.new_stream().unwrap(), ctx.new_stream().unwrap());
    let mut x = DeviceBuffer::<u32>::zeroed(&ctx, &s, 1).unwrap();
    let (mut broken, mut stale) = (0, 0);
    for round in 1..=rounds() {
        k.late_store(&s, &mut x, 0xdead, late(round));
        let mut filled = None;
        let graph = s.capture(CaptureMode::ThreadLocal, |_cap| {
            filled = Some(x.fill(&t, round));
            Ok(())
        });
        filled.expect("the closure ran").unwrap();
        broken += usize::from(graph.is_err());
        if x.to_vec(&t).unwrap()[0] != round {
            stale += 1;
        }
    }
    println!(
        "{broken} captures broken, {stale} stale reads in {} rounds",
        rounds()
    );
    assert_eq!((broken, stale), (0, 0), "captures broken, stale reads");
}

/// Hole 1, a framework's capture of a stream whose handle was taken (`raw()`), before the
/// buffer's last use on it or after (H100, before: the framework's end capture 904, read 0).
#[test]
fn a_stream_lent_to_a_framework_is_never_joined_to_its_capture() {
    let Some(ctx) = gpu() else { return };
    let _turn = alone();
    let k = K::load(&ctx);
    let t = ctx.new_stream().unwrap();
    for taken_before_the_use in [true, false] {
        let (mut broken, mut stale) = (0, 0);
        let lent = ctx.new_stream().unwrap();
        let mut x = DeviceBuffer::<u32>::zeroed(&ctx, &t, 1).unwrap();
        for round in 1..=rounds() {
            // Taken after the use: a stream whose handle was never taken before, every round.
            let fresh;
            let s = if taken_before_the_use {
                &lent
            } else {
                fresh = ctx.new_stream().unwrap();
                &fresh
            };
            let early = taken_before_the_use.then(|| s.raw());
            k.late_store(s, &mut x, 0xdead, late(round));
            let raw = early.unwrap_or_else(|| s.raw());
            raw_begin(raw);
            let filled = x.fill(&t, round);
            broken += usize::from(raw_end(raw) != CUresult::CUDA_SUCCESS);
            filled.unwrap();
            if x.to_vec(&t).unwrap()[0] != round {
                stale += 1;
            }
        }
        println!(
            "handle taken before the use: {taken_before_the_use}: {broken} captures broken, \
             {stale} stale reads in {} rounds",
            rounds()
        );
        assert_eq!((broken, stale), (0, 0), "captures broken, stale reads");
    }
}

/// Hole 1, the free: a buffer last written on `s` and dropped inside the capture of `s` used to
/// be freed on `s`, which the driver refuses inside a capture: the pool's bytes in use went from
/// 0 to 4,194,304 and stayed there. A pool of the test's own shows every byte given back.
#[test]
fn a_buffer_dropped_in_the_capture_of_its_own_stream_is_freed() {
    let Some(ctx) = gpu() else { return };
    let _turn = alone();
    let k = K::load(&ctx);
    let pool = MemPool::new(&ctx).unwrap();
    let mut s = ctx.new_stream().unwrap();
    let before = pool.usage().unwrap().used;
    let mut broken = 0;
    for round in 1..=rounds() {
        let mut x = DeviceBuffer::<u32>::alloc_in(&pool, &s, 1 << 20).unwrap();
        k.late_store(&s, &mut x, round, late(round));
        let graph = s.capture(CaptureMode::ThreadLocal, |cap| {
            drop(x);
            cap.launch_host_func(|| ())
        });
        match graph {
            Ok(g) => {
                let exec = g.instantiate().unwrap();
                exec.launch(&s).unwrap();
                exec.launch(&s).unwrap();
            }
            Err(e) => {
                if broken == 0 {
                    println!("the first broken capture: {}", error_chain(&e));
                }
                broken += 1;
            }
        }
    }
    s.synchronize().unwrap();
    let after = pool.usage().unwrap().used;
    println!(
        "{broken} captures broken; pool bytes in use {before} -> {after} over {} rounds",
        rounds()
    );
    assert_eq!(broken, 0, "captures broken by the drop");
    assert_eq!(after, before, "every buffer freed");
}

/// Hole 2: thread A captures `s`; thread B, which holds only the buffer (written late on `s`
/// before the capture), fills it on its own stream (H100, before: A's capture `Err`, B's fill
/// `Ok`, read 0).
#[test]
fn a_fill_on_another_thread_never_breaks_a_capture() {
    let Some(ctx) = gpu() else { return };
    let _turn = alone();
    let k = K::load(&ctx);
    let (mut s, t) = (ctx.new_stream().unwrap(), ctx.new_stream().unwrap());
    let mut x = DeviceBuffer::<u32>::zeroed(&ctx, &s, 1).unwrap();
    let (mut broken, mut stale) = (0, 0);
    for round in 1..=rounds() {
        k.late_store(&s, &mut x, 0xdead, late(round));
        let (to_b, at_b) = mpsc::channel::<()>();
        let (to_a, at_a) = mpsc::channel::<()>();
        let (graph, filled) = std::thread::scope(|sc| {
            let (x, t) = (&x, &t);
            let b = sc.spawn(move || {
                at_b.recv().unwrap();
                let r = x.fill(t, round);
                to_a.send(()).unwrap();
                r
            });
            let graph = s.capture(CaptureMode::ThreadLocal, |_cap| {
                to_b.send(()).unwrap();
                at_a.recv().unwrap();
                Ok(())
            });
            (graph, b.join().unwrap())
        });
        filled.unwrap();
        broken += usize::from(graph.is_err());
        if x.to_vec(&t).unwrap()[0] != round {
            stale += 1;
        }
    }
    println!(
        "{broken} captures broken, {stale} stale reads in {} rounds",
        rounds()
    );
    assert_eq!((broken, stale), (0, 0), "captures broken, stale reads");
}

/// Hole 3: thread A copies from the host on `s` (behind a spin, so its synchronisation waits);
/// meanwhile thread B enqueues a fill of the buffer on `s` behind a longer spin. A used to take
/// B's fill as complete when its synchronisation returned: a read on another stream then waited
/// for nothing (H100, before: read 1 instead of 7). Rounds in which B's fill was still running
/// when A returned are the ones that test it: counted and printed. A read is stale when it
/// differs from the value the stream left once it finished.
#[test]
fn a_host_synchronisation_covers_only_the_uses_recorded_before_it() {
    let Some(ctx) = gpu() else { return };
    let _turn = alone();
    let k = K::load(&ctx);
    let (s, t) = (ctx.new_stream().unwrap(), ctx.new_stream().unwrap());
    let x = DeviceBuffer::<u32>::zeroed(&ctx, &s, 1).unwrap();
    let (mut stale, mut exercised) = (0, 0);
    for round in 1..=rounds() {
        let one = [1u32];
        k.spin(&s, Duration::from_millis(1));
        let pending = std::thread::scope(|sc| {
            let a = sc.spawn(|| x.copy_from_host(&s, &one));
            // B: after A's synchronisation has (very likely) begun.
            std::thread::sleep(Duration::from_micros(200));
            k.spin(&s, Duration::from_millis(3));
            x.fill(&s, 7 + round).unwrap();
            a.join().unwrap().unwrap();
            !s.query().unwrap()
        });
        exercised += usize::from(pending);
        // Stale: the read on `t` differs from the buffer's final value, read on `s` after it
        // finished. (On a loaded host B's fill can be enqueued before A's copy; the final value
        // is then 1, and a read of 1 is right.)
        let seen = x.to_vec(&t).unwrap()[0];
        s.synchronize().unwrap();
        let last = x.to_vec(&s).unwrap()[0];
        assert!(
            last == 1 || last == 7 + round,
            "round {round}: final value {last}"
        );
        if seen != last {
            stale += 1;
        }
    }
    println!(
        "{stale} stale reads in {} rounds ({exercised} with the fill still running when the \
         host copy returned)",
        rounds()
    );
    assert_eq!(stale, 0, "stale reads");
}

/// A private stream made to wait on a framework's capture joins it: a buffer last written there
/// (late) cannot be waited for until that capture ends. A use on another stream and `into_raw`
/// are refused without breaking the capture, and the buffer keeps its uses (hole 4: a failed
/// `into_raw` used to forget them, and the read after it waited for nothing).
#[test]
fn a_stream_that_joined_a_capture_begun_elsewhere_keeps_its_buffers_ordered() {
    let Some(ctx) = gpu() else { return };
    let _turn = alone();
    let k = K::load(&ctx);
    let (framework, t) = (ctx.new_stream().unwrap(), ctx.new_stream().unwrap());
    let raw = framework.raw();
    let (mut broken, mut stale, mut accepted) = (0, 0, 0);
    for round in 1..=rounds() {
        let j = ctx.new_stream().unwrap();
        let mut x = DeviceBuffer::<u32>::zeroed(&ctx, &j, 1).unwrap();
        k.late_store(&j, &mut x, round, late(round));
        raw_begin(raw);
        j.wait_stream(&framework).unwrap(); // `j` joins the framework's capture
        accepted += usize::from(x.fill(&t, 0xdead).is_ok());
        let x = match x.into_raw() {
            Ok(_) => panic!("into_raw waited for a stream in a capture"),
            Err(kept) => kept.into_buffer(),
        };
        framework.wait_stream(&j).unwrap(); // joined back
        broken += usize::from(raw_end(raw) != CUresult::CUDA_SUCCESS);
        if x.to_vec(&t).unwrap()[0] != round {
            stale += 1;
        }
    }
    println!(
        "{accepted} uses accepted, {broken} captures broken, {stale} stale reads in {} rounds",
        rounds()
    );
    assert_eq!((accepted, broken, stale), (0, 0, 0));
}

/// Hole 5 (two GPUs): a peer copy into a buffer of device 1, captured on device 0 and replayed
/// there, after a late write of the buffer on device 1: the replay used to fail
/// (`CUDA_ERROR_INVALID_HANDLE`) though enqueued, and a read on device 1 waited for nothing.
#[test]
fn a_replayed_peer_copy_orders_its_remote_buffer() {
    let Some(c0) = gpu() else { return };
    let n = Device::count().unwrap();
    if n < 2 {
        println!("skipped: a peer copy needs 2 devices, this machine has {n}");
        return;
    }
    let _turn = alone();
    let c1 = Context::primary(1).unwrap();
    let k1 = K::load(&c1);
    let (mut cap0, s0) = (c0.new_stream().unwrap(), c0.new_stream().unwrap());
    let s1 = c1.new_stream().unwrap();
    let x0 = DeviceBuffer::<u32>::zeroed(&c0, &s0, 1).unwrap();
    let mut y1 = DeviceBuffer::<u32>::zeroed(&c1, &s1, 1).unwrap();
    let graph = cap0
        .capture(CaptureMode::ThreadLocal, |cap| y1.copy_from_peer(&cap, &x0))
        .unwrap();
    let exec = graph.instantiate().unwrap();
    let mut stale = 0;
    for round in 1..=rounds() {
        x0.fill(&s0, round).unwrap();
        k1.late_store(&s1, &mut y1, 0xdead, late(round));
        exec.launch(&s0)
            .unwrap_or_else(|e| panic!("round {round}: {}", error_chain(&e)));
        if y1.to_vec(&s1).unwrap()[0] != round {
            stale += 1;
        }
    }
    println!("{stale} stale reads in {} rounds", rounds());
    assert_eq!(stale, 0, "stale reads");
}

/// `copy_u32`, and the same after `griddepcontrol.wait` (PTX 7.8, sm_90).
const PDL_PTX: &str = r#"
.version 7.8
.target sm_90
.address_size 64

.visible .entry copy_after_wait(
	.param .u64 copy_after_wait_param_0,
	.param .u64 copy_after_wait_param_1
)
{
	.reg .b32 	%r<2>;
	.reg .b64 	%rd<5>;

	griddepcontrol.wait;
	ld.param.u64 	%rd1, [copy_after_wait_param_0];
	ld.param.u64 	%rd2, [copy_after_wait_param_1];
	cvta.to.global.u64 	%rd3, %rd1;
	cvta.to.global.u64 	%rd4, %rd2;
	ld.global.u32 	%r1, [%rd4];
	st.global.u32 	[%rd3], %r1;
	ret;
}

.visible .entry copy_without_wait(
	.param .u64 copy_without_wait_param_0,
	.param .u64 copy_without_wait_param_1
)
{
	.reg .b32 	%r<2>;
	.reg .b64 	%rd<5>;

	ld.param.u64 	%rd1, [copy_without_wait_param_0];
	ld.param.u64 	%rd2, [copy_without_wait_param_1];
	cvta.to.global.u64 	%rd3, %rd1;
	cvta.to.global.u64 	%rd4, %rd2;
	ld.global.u32 	%r1, [%rd4];
	st.global.u32 	[%rd3], %r1;
	ret;
}
"#;

/// Hole 6, decided by contract: a launch with programmatic serialisation is ordered after the
/// kernel before it on its stream by the stream alone, and `Function::launch`'s `# Safety` asks
/// the kernel to wait (`griddepcontrol.wait`) before touching what that kernel uses. A kernel
/// that keeps the contract reads the late write in every round; one that does not may read a
/// stale value (counted and printed, not asserted: the driver may or may not start it early).
#[test]
fn a_programmatic_launch_that_waits_reads_the_previous_kernels_write() {
    let Some(ctx) = gpu() else { return };
    let _turn = alone();
    let major = ctx
        .device()
        .attribute(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)
        .unwrap();
    if major < 9 {
        println!("skipped: programmatic launches need compute capability 9.0 (this is {major}.x)");
        return;
    }
    let k = K::load(&ctx);
    let pdl = Module::from_ptx(&ctx, PDL_PTX)
        .unwrap_or_else(|e| panic!("the PDL PTX loads: {}", error_chain(&e)));
    let s = ctx.new_stream().unwrap();
    let mut x = DeviceBuffer::<u32>::zeroed(&ctx, &s, 1).unwrap();
    let mut y = DeviceBuffer::<u32>::zeroed(&ctx, &s, 1).unwrap();
    let config = LaunchConfig::new(1, 1).programmatic_serialization(true);
    let mut stale = [0usize; 2];
    for (i, name) in ["copy_after_wait", "copy_without_wait"]
        .into_iter()
        .enumerate()
    {
        let f = pdl.function(name).unwrap();
        for round in 1..=rounds() {
            k.late_store(&s, &mut x, round, late(round));
            // SAFETY: (u32 *dst, const u32 *src), dst[0] and src[0] only; `copy_after_wait`
            // waits for the kernel before it before reading `src` (the contract);
            // `copy_without_wait` breaks it on purpose, and only its value is at stake.
            unsafe { f.launch(&s, config, &kernel_args![y.write(), x.read()]) }
                .unwrap_or_else(|e| panic!("{name}: {}", error_chain(&e)));
            if y.to_vec(&s).unwrap()[0] != round {
                stale[i] += 1;
            }
        }
    }
    println!(
        "stale reads in {} rounds: {} with griddepcontrol.wait, {} without (not asserted)",
        rounds(),
        stale[0],
        stale[1]
    );
    assert_eq!(stale[0], 0, "a kernel keeping the contract read stale data");
}

/// Hole 7, decided by refusal: in a capture this crate did not begin (a framework's raw capture
/// of a stream borrowed or reached through `in_capture`), buffer operations are refused, nothing
/// is tied, the capture ends unbroken, and `keep_alive_in` ties.
#[test]
fn buffers_are_refused_in_captures_begun_elsewhere() {
    let Some(ctx) = gpu() else { return };
    let _turn = alone();
    let owner = ctx.new_stream().unwrap();
    let raw = owner.raw();
    let buf = DeviceBuffer::<u32>::zeroed(&ctx, &owner, 16).unwrap();
    let out = DeviceBuffer::<u32>::zeroed(&ctx, &owner, 16).unwrap();
    let (mut accepted, mut broken) = (0, 0);
    for _ in 1..=rounds() {
        raw_begin(raw);
        {
            // SAFETY: `owner` keeps the stream alive while the view is used.
            let view = unsafe { Stream::borrow_raw(raw, &owner) }.unwrap();
            for r in [
                buf.fill(&view, 1),
                out.copy_from(&view, &buf),
                owner.in_capture(|cap| buf.fill(&cap, 1)),
            ] {
                match r {
                    Err(Error::Refused { .. }) => {}
                    Err(e) => panic!("{}", error_chain(&e)),
                    Ok(()) => accepted += 1,
                }
            }
        }
        broken += usize::from(raw_end(raw) != CUresult::CUDA_SUCCESS);
    }
    assert!(
        !buf.is_held_by_graphs() && !out.is_held_by_graphs(),
        "nothing tied"
    );
    raw_begin(raw);
    // SAFETY: as above.
    let view = unsafe { Stream::borrow_raw(raw, &owner) }.unwrap();
    buf.keep_alive_in(&view).unwrap();
    assert!(buf.is_held_by_graphs(), "keep_alive_in ties");
    assert_eq!(raw_end(raw), CUresult::CUDA_SUCCESS);
    println!(
        "{accepted} uses accepted, {broken} captures broken in {} rounds",
        rounds()
    );
    assert_eq!((accepted, broken), (0, 0));
    assert_eq!(out.to_vec(&owner).unwrap(), [0; 16]);
}
