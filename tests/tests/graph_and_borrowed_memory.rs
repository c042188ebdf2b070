//! Graph memory nodes and borrowed memory on the GPU: a `GraphBuffer` written behind a spin on
//! the capture's stream and read on two forks gives the written value on every replay (the
//! forks wait for the write inside the graph); memory another library owns, written on its own
//! stream behind a spin, is read on a stream of ours with no event by hand, and the owner's
//! later work sees what we wrote through the borrow.

use std::time::Duration;

use cuda_stream::{
    BorrowedBuffer, CaptureMode, Context, DeviceBuffer, Function, GraphBuffer, LaunchConfig,
    Module, Stream, kernel_args,
};
use cuda_stream_tests::{
    alongside_others, error_chain, gpu, ptx_source, raw_stream_create, raw_stream_destroy,
    sanitizer,
};

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

fn one() -> LaunchConfig {
    LaunchConfig::new(1, 1)
}

fn rounds(full: usize) -> usize {
    if sanitizer().is_some() { 10 } else { full }
}

fn ns(d: Duration) -> u64 {
    d.as_nanos() as u64
}

#[test]
fn graph_memory_is_written_and_read_across_forks_on_every_replay() {
    let Some(ctx) = gpu() else { return };
    let _turn = alongside_others();
    let k = kernels(&ctx);
    let mut s = ctx.new_stream().unwrap();
    let t = ctx.new_stream().unwrap();
    let mut a = DeviceBuffer::<u32>::zeroed(&ctx, &t, 1).unwrap();
    let mut b = DeviceBuffer::<u32>::zeroed(&ctx, &t, 1).unwrap();
    let delay = ns(Duration::from_micros(200));
    let graph = s
        .capture(CaptureMode::ThreadLocal, |cap| {
            let mut scratch = GraphBuffer::<u32>::zeroed(&ctx, cap, 1)?;
            let store = k
                .f("store_after_spin")
                .typed::<(&mut DeviceBuffer<u32>, u32, u64)>()?;
            // SAFETY: store_after_spin(u32 *p, u32 value, u64 ns) writes p[0] only.
            unsafe { store.launch(&cap, one(), (&mut scratch, 42u32, delay)) }?;
            cap.scope(|sc| {
                let (f1, f2) = (sc.fork()?, sc.fork()?);
                // SAFETY: copy_u32(u32 *dst, const u32 *src) reads src[0], writes dst[0].
                unsafe {
                    k.f("copy_u32")
                        .launch(&f1, one(), &kernel_args![a.write(), scratch.read()])
                }?;
                // SAFETY: as above.
                unsafe {
                    k.f("copy_u32")
                        .launch(&f2, one(), &kernel_args![b.write(), scratch.read()])
                }
            })
            // The free node, after both forks' reads.
        })
        .unwrap_or_else(|e| panic!("capture: {}", error_chain(&e)));
    let exec = graph.instantiate().unwrap();
    let mut stale = 0;
    let n = rounds(200);
    for _ in 0..n {
        a.fill(&s, 0).unwrap();
        b.fill(&s, 0).unwrap();
        exec.launch(&s).unwrap();
        if a.to_vec(&s).unwrap() != [42] || b.to_vec(&s).unwrap() != [42] {
            stale += 1;
        }
    }
    assert_eq!(
        stale, 0,
        "{stale} of {n} replays read the graph buffer early"
    );
}

#[test]
fn borrowed_memory_is_ordered_against_its_owners_stream() {
    let Some(ctx) = gpu() else { return };
    let _turn = alongside_others();
    let k = kernels(&ctx);
    // The other library: its memory (allocated here, used only through raw pointers) and its
    // stream (created with raw calls).
    let owner_raw = raw_stream_create(&ctx, 1);
    let token = ();
    // SAFETY: the stream lives until the end of the test, past every use of the view.
    let owner = unsafe { Stream::borrow_raw(owner_raw, &token) }.unwrap();
    let theirs = DeviceBuffer::<u32>::zeroed(&ctx, &owner, 1).unwrap();
    let seen_by_owner = DeviceBuffer::<u32>::zeroed(&ctx, &owner, 1).unwrap();
    let (p, q) = (theirs.device_ptr(), seen_by_owner.device_ptr());
    owner.synchronize().unwrap();
    let ours = ctx.new_stream().unwrap();
    let mut copy = DeviceBuffer::<u32>::zeroed(&ctx, &ours, 1).unwrap();
    let delay = ns(Duration::from_micros(300));
    let copy_typed = k
        .f("copy_u32")
        .typed::<(&mut DeviceBuffer<u32>, &DeviceBuffer<u32>)>()
        .unwrap();
    let (mut stale_in, mut stale_out) = (0, 0);
    let n = rounds(200) as u32;
    for round in 1..=n {
        // The owner writes behind a spin, with raw pointers (no tracking of ours).
        // SAFETY: store_after_spin writes p[0], which `theirs` holds.
        unsafe {
            k.f("store_after_spin")
                .launch(&owner, one(), &kernel_args![p, round, delay])
        }
        .unwrap();
        {
            // SAFETY: `theirs` holds one u32 for the whole borrow, used meanwhile only on
            // `owner`; the borrow is released below.
            let mut x =
                unsafe { BorrowedBuffer::<u32>::from_raw(&ctx, p, 1, owner, &theirs) }.unwrap();
            // A typed launch takes the borrowed buffer like an owned one.
            // SAFETY: copy_u32 reads src[0] and writes dst[0].
            unsafe { copy_typed.launch(&ours, one(), (&mut copy, &x)) }.unwrap();
            // Our write behind a spin on our stream; then the borrow ends.
            // SAFETY: store_after_spin writes p[0] only.
            unsafe {
                k.f("store_after_spin").launch(
                    &ours,
                    one(),
                    &kernel_args![x.write(), round + 1_000_000, delay],
                )
            }
            .unwrap();
            x.release().unwrap();
        }
        // The owner reads after the borrow, on its own stream, with raw pointers.
        // SAFETY: copy_u32 reads p[0] and writes q[0].
        unsafe { k.f("copy_u32").launch(&owner, one(), &kernel_args![q, p]) }.unwrap();
        if copy.to_vec(&ours).unwrap() != [round] {
            stale_in += 1;
        }
        owner.synchronize().unwrap();
        if seen_by_owner.to_vec(&owner).unwrap() != [round + 1_000_000] {
            stale_out += 1;
        }
    }
    assert_eq!(
        (stale_in, stale_out),
        (0, 0),
        "of {n} rounds: reads before the owner's write, owner reads before ours"
    );
    drop((theirs, seen_by_owner));
    owner.synchronize().unwrap();
    // SAFETY: nothing uses the stream any more.
    unsafe { raw_stream_destroy(owner_raw) };
}

#[test]
fn a_replay_is_ordered_against_other_streams_uses_of_its_buffers() {
    let Some(ctx) = gpu() else { return };
    let _turn = alongside_others();
    let k = kernels(&ctx);
    let mut s = ctx.new_stream().unwrap();
    let other = ctx.new_stream().unwrap();
    let mut out = DeviceBuffer::<u32>::zeroed(&ctx, &other, 1).unwrap();
    other.synchronize().unwrap();
    let delay = ns(Duration::from_micros(300));
    let store = k
        .f("store_after_spin")
        .typed::<(&mut DeviceBuffer<u32>, u32, u64)>()
        .unwrap();
    let graph = s
        .capture(CaptureMode::ThreadLocal, |cap| {
            // SAFETY: store_after_spin writes p[0] only.
            unsafe { store.launch(&cap, one(), (&mut out, 77u32, delay)) }
        })
        .unwrap();
    let exec = graph.instantiate().unwrap();
    let (mut early, mut late) = (0, 0);
    let n = rounds(200);
    for _ in 0..n {
        out.fill(&other, 0).unwrap(); // the replay waits for this on `s`
        exec.launch(&s).unwrap(); // writes 77 after a spin
        if out.to_vec(&other).unwrap() != [77] {
            early += 1; // read on `other` before the replay's write
        }
        exec.launch(&s).unwrap();
        out.fill(&other, 5).unwrap(); // must land after the replay
        if out.to_vec(&other).unwrap() != [5] {
            late += 1;
        }
    }
    assert_eq!(
        (early, late),
        (0, 0),
        "of {n} rounds: reads before a replay's write, writes overtaken by a replay"
    );
}
