//! Running one operation of a program, recording what it returned and read; the threads and the
//! order are `run.rs`'s.

use std::future::Future;
use std::pin::pin;
use std::sync::Arc;
use std::task::{Context as TaskContext, Poll, Wake, Waker};
use std::time::Duration;

use cuda_stream::{
    BufferUse, CaptureMode, CaptureStream, DeviceBuffer, Enqueue, Error, GraphBuffer, LaunchConfig,
    Module, Result, Stream, kernel_args,
};

use super::program::*;
use super::world::{BufObj, World};

/// What an operation (or a step of a capture's closure) did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Outcome {
    /// It ran (a step after a failed one of its closure does not).
    pub ran: bool,
    /// Its error: the message, and whether it was `Error::Refused`.
    pub error: Option<(String, bool)>,
    /// The values it read (a host read, a `to_vec`, the owner's read after a borrow).
    pub read: Option<Vec<u32>>,
    /// A capture's steps (`pre`, `scoped`, `post` in order) or a scope's.
    pub steps: Vec<Outcome>,
}

impl Outcome {
    pub fn of<T>(r: &Result<T>) -> Outcome {
        Outcome {
            ran: true,
            error: r
                .as_ref()
                .err()
                .map(|e| (format!("{e}"), matches!(e, Error::Refused { .. }))),
            ..Outcome::default()
        }
    }
}

/// A minimal executor: polls `fut` on this thread, parking until woken.
pub fn block_on<F: Future>(fut: F) -> F::Output {
    struct Unpark(std::thread::Thread);
    impl Wake for Unpark {
        fn wake(self: Arc<Self>) {
            self.0.unpark();
        }
    }
    let waker = Waker::from(Arc::new(Unpark(std::thread::current())));
    let mut cx = TaskContext::from_waker(&waker);
    let mut fut = pin!(fut);
    loop {
        match fut.as_mut().poll(&mut cx) {
            Poll::Ready(v) => return v,
            Poll::Pending => std::thread::park_timeout(Duration::from_millis(10)),
        }
    }
}

/// Where an action is enqueued.
#[derive(Clone, Copy)]
pub enum Target<'a> {
    Stream(Stream<'a>),
    Cap(CaptureStream<'a>),
}

type Graphs<'c> = [Option<GraphBuffer<'c, u32>>];

/// A buffer an action names, locked for reading.
enum Held<'w, 'g, 'c> {
    Slot(std::sync::RwLockReadGuard<'w, BufObj>),
    Graph(&'g GraphBuffer<'c, u32>),
}

impl Held<'_, '_, '_> {
    fn get(&self) -> &DeviceBuffer<u32> {
        match self {
            Held::Slot(g) => g.get(),
            Held::Graph(g) => g,
        }
    }
}

fn kernel_fn<'m>(m: &'m Module, k: Kern) -> Result<cuda_stream::Function<'m>> {
    m.function(match k {
        Kern::Set(_) => "rp_set",
        Kern::Add(_) => "rp_add",
        Kern::Scale(..) => "rp_scale",
    })
}

/// A typed launch writing `d`, a buffer of the caller's.
#[allow(clippy::too_many_arguments)]
fn typed<E: Enqueue>(
    m: &Module,
    st: &E,
    cfg: LaunchConfig,
    k: Kern,
    d: &mut DeviceBuffer<u32>,
    s: Option<&DeviceBuffer<u32>>,
    n: u32,
    ns: u64,
) -> Result<()> {
    type B = DeviceBuffer<u32>;
    let f = kernel_fn(m, k)?;
    // SAFETY: the kernels read and write only the first `n` values of the buffers they are
    // given (their length), reading `src` and writing `dst` as declared (`kernels.rs`).
    unsafe {
        match (k, s) {
            (Kern::Set(v), _) => {
                f.typed::<(&mut B, u32, u32, u64)>()?
                    .launch(st, cfg, (d, n, v, ns))
            }
            (Kern::Add(x), Some(s)) => {
                f.typed::<(&mut B, &B, u32, u32, u64)>()?
                    .launch(st, cfg, (d, s, n, x, ns))
            }
            (Kern::Scale(a, b), Some(s)) => {
                f.typed::<(&mut B, &B, u32, u32, u32, u64)>()?
                    .launch(st, cfg, (d, s, n, a, b, ns))
            }
            _ => panic!("the generator gave a kernel no source"),
        }
    }
}

/// A checked launch writing `d` (a graph buffer's or a borrowed buffer's use).
#[allow(clippy::too_many_arguments)]
fn untyped<E: Enqueue>(
    m: &Module,
    st: &E,
    cfg: LaunchConfig,
    k: Kern,
    d: BufferUse<'_>,
    s: Option<&DeviceBuffer<u32>>,
    n: u32,
    ns: u64,
) -> Result<()> {
    let f = kernel_fn(m, k)?;
    // SAFETY: as in `typed`.
    unsafe {
        match (k, s) {
            (Kern::Set(v), _) => f.launch(st, cfg, &kernel_args![d, n, v, ns]),
            (Kern::Add(x), Some(s)) => f.launch(st, cfg, &kernel_args![d, s.read(), n, x, ns]),
            (Kern::Scale(a, b), Some(s)) => {
                f.launch(st, cfg, &kernel_args![d, s.read(), n, a, b, ns])
            }
            _ => panic!("the generator gave a kernel no source"),
        }
    }
}

impl<'e> World<'e> {
    fn held<'w, 'g, 'c>(&'w self, b: Buf, graph: &'g Graphs<'c>) -> Held<'w, 'g, 'c> {
        match b {
            Buf::Slot(i) => Held::Slot(self.buf(i)),
            Buf::Graph(g) => Held::Graph(graph[g].as_ref().expect("a graph buffer allocated")),
        }
    }

    /// Runs `act` on `t`.
    pub fn act(&self, t: Target<'_>, act: &Act, graph: &mut Graphs<'_>) -> Result<()> {
        match (t, act) {
            (Target::Stream(s), Act::HostFn) => s.launch_host_func(self.host_fn()),
            (Target::Cap(c), Act::HostFn) => c.launch_host_func(self.host_fn()),
            (Target::Stream(s), _) => self.act_on(&s, act, graph),
            (Target::Cap(c), _) => self.act_on(&c, act, graph),
        }
    }

    fn act_on<E: Enqueue>(&self, st: &E, act: &Act, graph: &mut Graphs<'_>) -> Result<()> {
        let n = self.prog.len as u32;
        let ns = self.env.cfg.delay_ns;
        match act {
            Act::Fill { b, v } => self.held(*b, graph).get().fill(st, *v),
            Act::FillHalves { b, v, high_first } => match b {
                Buf::Slot(i) => {
                    let mut g = self.buf_mut(*i);
                    match &mut *g {
                        BufObj::Own(d) => {
                            let half = d.len() / 2;
                            let (mut lo, mut hi) = d.split_at_mut(half)?;
                            if *high_first {
                                hi.fill(st, *v)?;
                                lo.fill(st, *v)
                            } else {
                                lo.fill(st, *v)?;
                                hi.fill(st, *v)
                            }
                        }
                        BufObj::Managed(m) => {
                            let all = m.as_device_mut();
                            let half = all.len() / 2;
                            let (mut lo, mut hi) = all.split_at_mut(half)?;
                            if *high_first {
                                hi.fill(st, *v)?;
                                lo.fill(st, *v)
                            } else {
                                lo.fill(st, *v)?;
                                hi.fill(st, *v)
                            }
                        }
                        BufObj::Borrowed { buf, .. } => buf.fill(st, *v),
                        BufObj::Empty => panic!("the generator used an empty buffer slot"),
                    }
                }
                Buf::Graph(_) => self.held(*b, graph).get().fill(st, *v),
            },
            Act::Copy { dst, src } => {
                let s = self.held(*src, graph);
                self.held(*dst, graph).get().copy_from(st, s.get())
            }
            Act::Peer { dst, src } => {
                let s = self.held(*src, graph);
                self.held(*dst, graph).get().copy_from_peer(st, s.get())
            }
            Act::KeepAlive { b } => self.held(*b, graph).get().keep_alive_in(st),
            Act::HostFn => unreachable!("handled by `act`"),
            Act::Kernel { k, dst, src } => {
                let ctx = match dst {
                    Buf::Slot(i) => self.prog.buffers[*i],
                    Buf::Graph(_) => self.graph_ctx(st),
                };
                let module = &self.env.modules[ctx];
                let cfg = LaunchConfig::for_elements(n, 256);
                match dst {
                    Buf::Slot(i) => {
                        let src = src.map(|s| self.held(s, graph));
                        let src = src.as_ref().map(Held::get);
                        let mut g = self.buf_mut(*i);
                        match &mut *g {
                            BufObj::Own(d) => typed(module, st, cfg, *k, d, src, n, ns),
                            BufObj::Managed(m) => {
                                untyped(module, st, cfg, *k, m.write(), src, n, ns)
                            }
                            BufObj::Borrowed { buf, .. } => {
                                untyped(module, st, cfg, *k, buf.write(), src, n, ns)
                            }
                            BufObj::Empty => panic!("the generator used an empty buffer slot"),
                        }
                    }
                    Buf::Graph(g) => {
                        let mut d = graph[*g].take().expect("a graph buffer allocated");
                        let r = {
                            let src = src.map(|s| self.held(s, graph));
                            let src = src.as_ref().map(Held::get);
                            untyped(module, st, cfg, *k, d.write(), src, n, ns)
                        };
                        graph[*g] = Some(d);
                        r
                    }
                }
            }
        }
    }

    /// The context of the stream work is enqueued on.
    fn graph_ctx<E: Enqueue>(&self, st: &E) -> usize {
        let ctx = st.enqueue_handle().1;
        self.env
            .ctxs
            .iter()
            .position(|c| c.raw() == ctx)
            .expect("a context of the program")
    }

    /// One step of a capture's closure, on `lane` (the capture itself or a fork).
    fn cap_step<'c>(
        &self,
        cap: CaptureStream<'c>,
        lane: CaptureStream<'_>,
        ctx: usize,
        st: &Step<CapAct>,
        graph: &mut Graphs<'c>,
    ) -> Result<()> {
        match &st.act {
            CapAct::Act(a) => self.act(Target::Cap(lane), a, graph),
            CapAct::GraphAlloc { g, zeroed } => {
                let c = self.ctx(ctx);
                let made = if *zeroed {
                    GraphBuffer::zeroed(c, cap, self.prog.len)
                } else {
                    GraphBuffer::alloc(c, cap, self.prog.len)
                };
                made.map(|b| graph[*g] = Some(b))
            }
            CapAct::GraphFree { g } => match graph[*g].take() {
                Some(b) => b.free(),
                None => Ok(()),
            },
            CapAct::Outside { s, act } => {
                let mut none: Vec<Option<GraphBuffer<'_, u32>>> = Vec::new();
                self.with_stream(*s, |view| self.act(Target::Stream(view), act, &mut none))
            }
            CapAct::DropInside { b } => {
                drop(std::mem::replace(&mut *self.buf_mut(*b), BufObj::Empty));
                Ok(())
            }
        }
    }

    /// Runs a capture's closure: `pre` on the capture, `scoped` in a scope with `forks` forks,
    /// `post`; each step's outcome pushed to `outs` (a step after a failure does not run).
    #[allow(clippy::too_many_arguments)]
    pub fn capture_body(
        &self,
        cap: CaptureStream<'_>,
        ctx: usize,
        forks: u8,
        graph_buffers: usize,
        pre: &[Step<CapAct>],
        scoped: &[Step<CapAct>],
        post: &[Step<CapAct>],
        outs: &mut Vec<Outcome>,
    ) -> Result<()> {
        let mut graph: Vec<Option<GraphBuffer<'_, u32>>> =
            (0..graph_buffers).map(|_| None).collect();
        for st in pre {
            let r = self.cap_step(cap, cap, ctx, st, &mut graph);
            outs.push(Outcome::of(&r));
            r?;
        }
        if !scoped.is_empty() || forks > 0 {
            cap.scope(|sc| {
                let mut lanes = Vec::new();
                for _ in 0..forks {
                    lanes.push(sc.fork()?);
                }
                for st in scoped {
                    let r = match st.lane {
                        0 => self.cap_step(cap, cap, ctx, st, &mut graph),
                        l => self.cap_step(cap, lanes[l as usize - 1], ctx, st, &mut graph),
                    };
                    outs.push(Outcome::of(&r));
                    r?;
                }
                Ok(())
            })?;
        }
        for st in post {
            let r = self.cap_step(cap, cap, ctx, st, &mut graph);
            outs.push(Outcome::of(&r));
            r?;
        }
        Ok(())
    }
}

/// The capture mode of a program's capture.
pub fn mode(m: Mode) -> CaptureMode {
    match m {
        Mode::Global => CaptureMode::Global,
        Mode::ThreadLocal => CaptureMode::ThreadLocal,
        Mode::Relaxed => CaptureMode::Relaxed,
    }
}
