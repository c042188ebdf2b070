//! Running a program: one host thread per program thread, each running its operations in order,
//! each once the operations it depends on ([`Program::deps`]) have finished, with what each
//! returned and read recorded.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use cuda_stream::{DeviceBuffer, ManagedBuffer, Result, Stream};

use super::Harness;
use super::execute::{Outcome, Target, block_on, mode};
use super::program::*;
use super::world::{BufObj, Env, Raw, StreamObj, World, free_owned, raw_destroy, raw_stream};

/// A replay's answer when its capture was refused.
pub const NO_GRAPH: &str = "no executable graph (its capture was refused)";

/// How long an operation may wait for the ones before it before the program counts as hung:
/// `CUDA_STREAM_RANDOM_HANG_S` seconds, else 120 (40 under compute-sanitizer, whose runs the
/// bundle bounds at 120 s a binary, so that a hang is reported before the bound kills it).
fn hang() -> Duration {
    static HANG: std::sync::OnceLock<Duration> = std::sync::OnceLock::new();
    *HANG.get_or_init(|| {
        let default = if crate::sanitizer().is_some() {
            40
        } else {
            120
        };
        let s = std::env::var("CUDA_STREAM_RANDOM_HANG_S")
            .ok()
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(default);
        Duration::from_secs(s)
    })
}

/// How long a program may run before the process is aborted with the program printed (a
/// deadlock inside an operation cannot be interrupted): twice [`hang`], plus a minute.
fn watchdog() -> Duration {
    hang() * 2 + Duration::from_secs(60)
}

/// Whether each operation is printed to stderr as it starts and ends, and the teardown as well
/// (`CUDA_STREAM_RANDOM_TRACE` set):
/// where a run is killed from outside, its last lines name what was running.
fn trace() -> bool {
    static TRACE: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *TRACE.get_or_init(|| std::env::var_os("CUDA_STREAM_RANDOM_TRACE").is_some())
}

fn panic_text(p: Box<dyn std::any::Any + Send>) -> String {
    if let Some(s) = p.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = p.downcast_ref::<String>() {
        s.clone()
    } else {
        "a panic".to_string()
    }
}

impl World<'_> {
    fn with_buf<R>(&self, b: usize, f: impl FnOnce(&DeviceBuffer<u32>) -> Result<R>) -> Result<R> {
        f(self.buf(b).get())
    }

    fn take(&self, b: usize) -> BufObj {
        std::mem::replace(&mut *self.buf_mut(b), BufObj::Empty)
    }

    /// Runs operation `op`, returning its outcome.
    fn run_op(&self, op: &OpKind) -> Outcome {
        let p = self.prog;
        let len = p.len;
        match op {
            OpKind::Alloc {
                b,
                how: AllocHow::Managed,
                ..
            } => {
                let ctx = self.ctx(p.buffers[*b]);
                let r = ManagedBuffer::zeroed(ctx, len);
                let out = Outcome::of(&r);
                if let Ok(m) = r {
                    *self.buf_mut(*b) = BufObj::Managed(m);
                }
                out
            }
            OpKind::Alloc { b, how, s } => {
                let ctx = self.ctx(p.buffers[*b]);
                let pool = self.env.mem_pools[p.buffers[*b]].as_ref();
                let r = self.with_stream(*s, |st| match how {
                    AllocHow::Unordered => DeviceBuffer::alloc(ctx, len),
                    AllocHow::AllocOn => DeviceBuffer::alloc_on(ctx, &st, len),
                    AllocHow::AllocIn => DeviceBuffer::alloc_in(pool.expect("a pool"), &st, len),
                    AllocHow::Zeroed => DeviceBuffer::zeroed(ctx, &st, len),
                    AllocHow::ZeroedIn => DeviceBuffer::zeroed_in(pool.expect("a pool"), &st, len),
                    AllocHow::FromHost(v) => DeviceBuffer::from_host(ctx, &st, &vec![*v; len]),
                    AllocHow::Managed => unreachable!("handled above"),
                });
                let out = Outcome::of(&r);
                if let Ok(buf) = r {
                    *self.buf_mut(*b) = BufObj::Own(buf);
                }
                out
            }
            OpKind::Act { s, act } => {
                let r = self.with_stream(*s, |st| self.act(Target::Stream(st), act, &mut []));
                Outcome::of(&r)
            }
            OpKind::CopyFromHost { b, s, v } => {
                let r = self.with_stream(*s, |st| {
                    self.with_buf(*b, |buf| buf.copy_from_host(&st, &vec![*v; len]))
                });
                Outcome::of(&r)
            }
            OpKind::ToVec { b, s, into_slice } => {
                let r = self.with_stream(*s, |st| {
                    self.with_buf(*b, |buf| {
                        if *into_slice {
                            let mut v = vec![0; len];
                            buf.copy_to_host(&st, &mut v).map(|()| v)
                        } else {
                            buf.to_vec(&st)
                        }
                    })
                });
                let mut out = Outcome::of(&r);
                out.read = r.ok();
                out
            }
            OpKind::FromPinned { b, p: h, s } => {
                let r = self.with_stream(*s, |st| {
                    let host = self.pinned(*h);
                    self.with_buf(*b, |buf| buf.copy_from_pinned(&st, &*host))
                });
                Outcome::of(&r)
            }
            OpKind::ToPinned { b, p: h, s } => {
                let r = self.with_stream(*s, |st| {
                    let mut host = self.pinned_mut(*h);
                    self.with_buf(*b, |buf| buf.copy_to_pinned(&st, &mut *host))
                });
                Outcome::of(&r)
            }
            OpKind::PinnedWrite { p: h, v } => {
                let mut host = self.pinned_mut(*h);
                let r = host.as_mut_slice().map(|slice| {
                    self.h
                        .host_access(slice.as_ptr() as u64, slice.len() * 4, true);
                    slice.fill(*v);
                });
                Outcome::of(&r)
            }
            OpKind::PinnedRead { p: h } => {
                let host = self.pinned(*h);
                let r = host.as_slice().map(|slice| {
                    self.h
                        .host_access(slice.as_ptr() as u64, slice.len() * 4, false);
                    slice.to_vec()
                });
                let mut out = Outcome::of(&r);
                out.read = r.ok();
                out
            }
            OpKind::ManagedWrite { b, v } => {
                let mut g = self.buf_mut(*b);
                let BufObj::Managed(m) = &mut *g else {
                    panic!("the generator wrote a slot that holds no managed buffer")
                };
                let r = m.as_mut_slice().map(|host| host.fill(*v));
                Outcome::of(&r)
            }
            OpKind::ManagedRead { b } => {
                let mut g = self.buf_mut(*b);
                let BufObj::Managed(m) = &mut *g else {
                    panic!("the generator read a slot that holds no managed buffer")
                };
                let r = m.as_slice().map(<[u32]>::to_vec);
                let mut out = Outcome::of(&r);
                out.read = r.ok();
                out
            }
            OpKind::Drop { b } => {
                drop(self.take(*b));
                Outcome::of(&Ok(()))
            }
            OpKind::Free { b } => match self.take(*b) {
                BufObj::Own(buf) => Outcome::of(&buf.free()),
                _ => panic!("the generator freed a slot that holds no owned buffer"),
            },
            OpKind::IntoRaw { b } | OpKind::IntoRawFails { b } => {
                let BufObj::Own(buf) = self.take(*b) else {
                    panic!("the generator handed over a slot that holds no owned buffer")
                };
                let ctx = self.ctx(p.buffers[*b]);
                let pooled = buf.pool().is_some();
                let fault = matches!(op, OpKind::IntoRawFails { .. });
                if fault {
                    self.h.fail_next("cuEventSynchronize");
                }
                let r = buf.into_raw();
                if fault {
                    self.h.clear_failures();
                }
                match r {
                    Ok((ptr, _)) => Outcome::of(&free_raw(ctx, ptr, pooled)),
                    Err(e) => {
                        // Without an error: refused, graphs hold the memory (`into_raw`'s docs).
                        let error = match e.error() {
                            Some(e) => (
                                e.to_string(),
                                matches!(e, cuda_stream::Error::Refused { .. }),
                            ),
                            None => ("refused: graphs hold the memory".to_string(), true),
                        };
                        let out = Outcome {
                            ran: true,
                            error: Some(error),
                            ..Outcome::default()
                        };
                        *self.buf_mut(*b) = BufObj::Own(e.into_buffer());
                        out
                    }
                }
            }
            OpKind::Borrow { b, v } => Outcome::of(&self.borrow(*b, *v)),
            OpKind::Release { b } => {
                let BufObj::Borrowed { buf, ptr, owner } = self.take(*b) else {
                    panic!("the generator released a slot that holds no borrow")
                };
                let ctx = self.ctx(p.buffers[*b]);
                let r = buf
                    .release()
                    .and_then(|()| owner_read(ctx, ptr, owner, len));
                let mut out = Outcome::of(&r);
                out.read = r.ok();
                let freed = free_owned(ctx, ptr, owner);
                if out.error.is_none() {
                    out.error = freed.err().map(|e| (e.to_string(), false));
                }
                out
            }
            OpKind::Sync { s } => Outcome::of(&self.with_stream(*s, |st| st.synchronize())),
            OpKind::Query { s } => Outcome::of(&self.with_stream(*s, |st| st.query())),
            OpKind::CtxSync { ctx } => Outcome::of(&self.ctx(*ctx).synchronize()),
            OpKind::EventSync { s } => Outcome::of(
                &self.with_stream(*s, |st| st.record_event().and_then(|e| e.synchronize())),
            ),
            OpKind::Completion { s } => {
                Outcome::of(&self.with_stream(*s, |st| block_on(st.completed())))
            }
            OpKind::WaitStream { s, other } => Outcome::of(
                &self.with_stream(*s, |st| self.with_stream(*other, |o| st.wait_stream(&o))),
            ),
            OpKind::DropStream { s } => {
                let old = std::mem::replace(&mut *self.stream_mut(*s), StreamObj::Gone);
                if let StreamObj::Borrowed(raw) = old {
                    raw_destroy(raw);
                }
                Outcome::of(&Ok(()))
            }
            OpKind::DropStreamInHostFn { s, on, into_raw } => {
                let old = std::mem::replace(&mut *self.stream_mut(*s), StreamObj::Gone);
                let StreamObj::Owned(owned) = old else {
                    panic!("the generator dropped a stream that is not owned in a host function")
                };
                let wait = p.drops_exclusive;
                let handed = self.handed_over.clone();
                let into_raw = *into_raw;
                Outcome::of(&self.with_stream(*on, |st| {
                    st.launch_host_func(move || {
                        if into_raw {
                            let raw = owned.into_raw();
                            handed
                                .lock()
                                .unwrap_or_else(|e| e.into_inner())
                                .push(Raw(raw as usize));
                        } else {
                            drop(owned);
                        }
                    })?;
                    // Hole 9 excluded: the drop has run when the operation ends.
                    if wait { st.synchronize() } else { Ok(()) }
                }))
            }
            OpKind::FaultyAct { s, act } => {
                self.h.fail_next("cuEventRecord");
                let r = self.with_stream(*s, |st| self.act(Target::Stream(st), act, &mut []));
                self.h.clear_failures();
                Outcome::of(&r)
            }
            OpKind::NewStream { s } => {
                let sp = p.streams[*s];
                let r = World::make_stream(self.env, sp.kind, sp.ctx);
                let out = Outcome::of(&r);
                if let Ok(obj) = r {
                    *self.stream_mut(*s) = obj;
                }
                out
            }
            OpKind::Scope { s, forks, body } => {
                let mut steps = Vec::new();
                let r = self.with_stream(*s, |st| {
                    st.scope(|sc| {
                        let mut lanes: Vec<Stream<'_>> = Vec::new();
                        for _ in 0..*forks {
                            lanes.push(sc.fork()?);
                        }
                        for step in body {
                            let t = match step.lane {
                                0 => Target::Stream(st),
                                l => Target::Stream(lanes[l as usize - 1]),
                            };
                            let r = self.act(t, &step.act, &mut []);
                            steps.push(Outcome::of(&r));
                            r?;
                        }
                        Ok(())
                    })
                });
                let mut out = Outcome::of(&r);
                out.steps = steps;
                out
            }
            OpKind::Capture {
                s,
                mode: m,
                exec,
                forks,
                graph_buffers,
                pre,
                scoped,
                post,
                ..
            } => {
                let ctx = p.streams[*s].ctx;
                let mut steps = Vec::new();
                let graph = {
                    let steps = &mut steps;
                    let body = move |cap: cuda_stream::CaptureStream<'_>| {
                        self.capture_body(
                            cap,
                            ctx,
                            *forks,
                            *graph_buffers,
                            pre,
                            scoped,
                            post,
                            steps,
                        )
                    };
                    let mut g = self.stream_mut(*s);
                    match &mut *g {
                        StreamObj::Owned(o) => o.capture(mode(*m), body),
                        StreamObj::Pooled(l) => l.capture(mode(*m), body),
                        _ => panic!("the generator captured a stream it does not own"),
                    }
                };
                let r = graph.and_then(|g| g.instantiate());
                let mut out = Outcome::of(&r);
                out.steps = steps;
                let old = self.execs[*exec]
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .take();
                drop(old);
                if let Ok(e) = r {
                    *self.execs[*exec].lock().unwrap_or_else(|e| e.into_inner()) = Some(e);
                }
                out
            }
            OpKind::Replay { exec, s, .. } => {
                let g = self.execs[*exec].lock().unwrap_or_else(|e| e.into_inner());
                match g.as_ref() {
                    Some(e) => Outcome::of(&self.with_stream(*s, |st| e.launch(&st))),
                    // Its capture was refused: nothing to replay (the model knows).
                    None => Outcome {
                        ran: true,
                        error: Some((NO_GRAPH.to_string(), true)),
                        ..Outcome::default()
                    },
                }
            }
            OpKind::DropExec { exec } => {
                let old = self.execs[*exec]
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .take();
                drop(old);
                Outcome::of(&Ok(()))
            }
        }
    }

    /// Memory the test owns (as another library would), written with `v` on a raw stream of its
    /// own, borrowed into slot `b`.
    fn borrow(&self, b: usize, v: u32) -> Result<()> {
        let ctx = self.ctx(self.prog.buffers[b]);
        let bytes = self.prog.len * 4;
        let owner = raw_stream(ctx)?;
        let ptr = {
            let _bound = ctx.bind()?;
            let mut ptr = 0;
            // SAFETY: valid out-pointer and sizes; the context is current; the memset is on
            // the owner's stream, into its own allocation.
            unsafe {
                let rc = cuda_stream_sys::cuMemAlloc(&mut ptr, bytes);
                assert_eq!(rc, cuda_stream_sys::CUresult::CUDA_SUCCESS, "cuMemAlloc");
                let rc = cuda_stream_sys::cuMemsetD32Async(ptr, v, self.prog.len, owner.stream());
                assert_eq!(
                    rc,
                    cuda_stream_sys::CUresult::CUDA_SUCCESS,
                    "cuMemsetD32Async"
                );
            }
            ptr
        };
        static OWNER: () = ();
        // SAFETY: the owner's stream lives until the borrow's `Release` (or the teardown),
        // which destroys it after the borrow ended.
        let view = unsafe { Stream::borrow_raw(owner.stream(), &OWNER) }?;
        // SAFETY: `ptr` holds `len` values until the borrow ends (`Release`, or the teardown,
        // free it only then); meanwhile only work on the owner's stream (none after the memset)
        // and through the borrow uses it; the borrow is ended, never leaked.
        let buf =
            unsafe { cuda_stream::BorrowedBuffer::from_raw(ctx, ptr, self.prog.len, view, &OWNER) };
        match buf {
            Ok(buf) => {
                *self.buf_mut(b) = BufObj::Borrowed { buf, ptr, owner };
                Ok(())
            }
            Err(e) => {
                let _ = free_owned(ctx, ptr, owner);
                Err(e)
            }
        }
    }
}

/// Frees memory `into_raw` handed over: with `cuMemFreeAsync` on the legacy stream (pool
/// memory) or `cuMemFree`; every use completed before `into_raw` returned.
fn free_raw(ctx: &cuda_stream::Context, ptr: u64, pooled: bool) -> Result<()> {
    let _bound = ctx.bind()?;
    // SAFETY: the memory is ours since `into_raw`, freed once, and no work uses it.
    let rc = unsafe {
        if pooled {
            cuda_stream_sys::cuMemFreeAsync(ptr, 1 as cuda_stream_sys::CUstream)
        } else {
            cuda_stream_sys::cuMemFree(ptr)
        }
    };
    assert_eq!(
        rc,
        cuda_stream_sys::CUresult::CUDA_SUCCESS,
        "freeing the raw memory"
    );
    Ok(())
}

/// The owner, after the borrow ended, reads its memory on its own stream (a copy into pageable
/// memory, which returns once done).
fn owner_read(ctx: &cuda_stream::Context, ptr: u64, owner: Raw, len: usize) -> Result<Vec<u32>> {
    let _bound = ctx.bind()?;
    let mut v = vec![0u32; len];
    // SAFETY: `v` holds `len` values; the copy into pageable memory completes before the call
    // returns; the memory is the owner's, used on its stream after the borrow's uses.
    let rc = unsafe {
        cuda_stream_sys::cuMemcpyDtoHAsync(v.as_mut_ptr().cast(), ptr, len * 4, owner.stream())
    };
    assert_eq!(
        rc,
        cuda_stream_sys::CUresult::CUDA_SUCCESS,
        "the owner's read"
    );
    Ok(v)
}

/// The seed a program's text names (its first line).
fn p_seed(text: &str) -> String {
    text.split_whitespace()
        .nth(1)
        .unwrap_or("?")
        .trim_end_matches(':')
        .to_string()
}

/// Runs `p` in `env`: its outcomes, and the problems of the teardown and of the harness's
/// checks (`Harness::finish`), or a panic's message.
pub fn run(p: &Program, env: &Env, h: &dyn Harness) -> (Vec<Outcome>, Vec<String>) {
    h.start();
    let world = match World::new(env, p, h) {
        Ok(w) => w,
        Err(e) => return (Vec::new(), vec![format!("setting the program up: {e}")]),
    };
    let deps = p.deps();
    let outs: Vec<Mutex<Option<Outcome>>> = p.ops.iter().map(|_| Mutex::new(None)).collect();
    let done = Mutex::new(vec![false; p.ops.len()]);
    let cv = Condvar::new();
    let mut problems: Vec<String> = Vec::new();
    let hung = Mutex::new(None);
    let (alive, watched) = std::sync::mpsc::channel::<()>();
    let text = format!("{p}");
    let seed_for_trace = p_seed(&text);
    // The operations under way (thread, index), and the threads past their last one: what the
    // watchdog names when it fires (no output meanwhile, which would change the timing).
    let under_way: Arc<Mutex<Vec<(usize, usize)>>> = Arc::default();
    let exiting: Arc<Mutex<Vec<usize>>> = Arc::default();
    let (watch_ops, watch_exits) = (under_way.clone(), exiting.clone());
    let watch = move |world: &World<'_>| {
        let watchdog = watchdog();
        if let Err(std::sync::mpsc::RecvTimeoutError::Timeout) = watched.recv_timeout(watchdog) {
            // Past the test harness's capture, which an abort would lose.
            use std::io::Write as _;
            let ops = watch_ops.lock().unwrap_or_else(|e| e.into_inner()).clone();
            let exits = watch_exits
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .clone();
            let _ = writeln!(
                std::io::stderr(),
                "random programs: program {} still running after {watchdog:?} (a deadlock?); \
                 under way (thread, op): {ops:?}; threads synchronising before they exit: \
                 {exits:?}; the locks and threads:\n{}aborting:\n{text}",
                p_seed(&text),
                super::hang_report::hang_report(world)
            );
            std::process::abort();
        }
    };
    std::thread::scope(|sc| {
        let world_ref = &world;
        sc.spawn(move || watch(world_ref));
        let mut threads = Vec::new();
        for t in 0..p.threads {
            let (world, deps, outs, done, cv, hung) = (&world, &deps, &outs, &done, &cv, &hung);
            let (under_way, exiting) = (&under_way, &exiting);
            let seed_for_trace = &seed_for_trace;
            threads.push(sc.spawn(move || {
                for (i, op) in p.ops.iter().enumerate().filter(|(_, op)| op.thread == t) {
                    let start = Instant::now();
                    let mut d = done.lock().unwrap_or_else(|e| e.into_inner());
                    while !deps[i].iter().all(|&j| d[j]) {
                        if start.elapsed() > hang()
                            || hung.lock().unwrap_or_else(|e| e.into_inner()).is_some()
                        {
                            hung.lock()
                                .unwrap_or_else(|e| e.into_inner())
                                .get_or_insert(i);
                            cv.notify_all();
                            return;
                        }
                        d = cv
                            .wait_timeout(d, Duration::from_millis(50))
                            .unwrap_or_else(|e| e.into_inner())
                            .0;
                    }
                    drop(d);
                    if trace() {
                        use std::io::Write as _;
                        let _ = writeln!(
                            std::io::stderr(),
                            "random programs: {} thread {t} #{i}: {:?}",
                            seed_for_trace,
                            op.kind
                        );
                    }
                    under_way
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .push((t, i));
                    let out = catch_unwind(AssertUnwindSafe(|| world.run_op(&op.kind)))
                        .unwrap_or_else(|p| Outcome {
                            ran: true,
                            error: Some((format!("panicked: {}", panic_text(p)), false)),
                            ..Outcome::default()
                        });
                    if trace() {
                        use std::io::Write as _;
                        let _ = writeln!(
                            std::io::stderr(),
                            "random programs: {} thread {t} #{i} done",
                            seed_for_trace
                        );
                    }
                    under_way
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .retain(|&u| u != (t, i));
                    *outs[i].lock().unwrap_or_else(|e| e.into_inner()) = Some(out);
                    done.lock().unwrap_or_else(|e| e.into_inner())[i] = true;
                    cv.notify_all();
                }
                // Under compute-sanitizer (every tool; H100, driver 580) a thread's exit waits
                // for the work it left on its per-thread default stream (raw calls,
                // `host_fn_wake --exit-pending`: a `cuCtxSynchronize` made after such a thread
                // exited found its 100 ms kernel done, against 100 ms without a tool), and a call
                // that waits for the device made by another thread right then never returned
                // (`cuMemAlloc` in `Borrow`, under each tool, with a replay left on a per-thread
                // stream; `cuModuleUnload` in the completion test under racecheck). A thread
                // that synchronises its per-thread streams before it exits hangs nothing. Without
                // a tool the thread leaves its work running, as programs may.
                if crate::sanitizer().is_some() {
                    exiting.lock().unwrap_or_else(|e| e.into_inner()).push(t);
                    for c in &world.env.ctxs {
                        let _ = c.per_thread_stream().synchronize();
                    }
                    exiting
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .retain(|&x| x != t);
                }
            }));
        }
        // A thread's panic goes on once the watchdog is told the program ended.
        let panics: Vec<_> = threads.into_iter().filter_map(|t| t.join().err()).collect();
        drop(alive);
        if let Some(p) = panics.into_iter().next() {
            std::panic::resume_unwind(p);
        }
    });
    if let Some(i) = *hung.lock().unwrap_or_else(|e| e.into_inner()) {
        problems.push(format!(
            "#{i}: waited more than {:?} for the operations before it (a hang)",
            hang()
        ));
    }
    let ran = world.host_fns.clone();
    if trace() {
        use std::io::Write as _;
        let _ = writeln!(
            std::io::stderr(),
            "random programs: {seed_for_trace} teardown"
        );
    }
    problems.extend(world.teardown());
    if trace() {
        use std::io::Write as _;
        let _ = writeln!(
            std::io::stderr(),
            "random programs: {seed_for_trace} torn down"
        );
    }
    let outs: Vec<Outcome> = outs
        .into_iter()
        .map(|o| {
            o.into_inner()
                .unwrap_or_else(|e| e.into_inner())
                .unwrap_or_default()
        })
        .collect();
    let host_fns = ran.load(std::sync::atomic::Ordering::SeqCst);
    problems.extend(super::model::check(p, &outs, host_fns));
    problems.extend(h.finish());
    (outs, problems)
}
