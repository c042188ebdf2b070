//! A random program: its objects (streams of several kinds, buffers, page-locked buffers,
//! executable graphs), its operations, each on one thread, and how they depend on each other.

use std::fmt;

/// Values per buffer of a program: every buffer (and graph buffer) has the program's length.
pub type Len = usize;

/// How a stream slot gets its stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StreamKind {
    /// `Context::new_stream`.
    Owned,
    /// A lease from a `StreamPool`.
    Pooled,
    /// A stream created with raw driver calls (another library's), seen through
    /// `Stream::borrow_raw`.
    Borrowed,
    /// The context's legacy default stream.
    Legacy,
    /// The calling thread's per-thread default stream (another stream on each thread).
    PerThread,
}

impl StreamKind {
    /// Whether the slot's stream can be dropped (and made again) and captured.
    pub fn owned(self) -> bool {
        matches!(self, StreamKind::Owned | StreamKind::Pooled)
    }
}

/// A stream slot: its kind and context (0 or 1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StreamSpec {
    pub kind: StreamKind,
    pub ctx: usize,
}

/// A buffer as an operation names it: a slot of the program, or a graph buffer of the capture
/// the operation is part of.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Buf {
    Slot(usize),
    Graph(usize),
}

/// The kernels (`kernels.rs`), with their scalar arguments.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kern {
    /// `dst = v`.
    Set(u32),
    /// `dst += src + k`.
    Add(u32),
    /// `dst = src * mul + add`.
    Scale(u32, u32),
}

/// Work on buffers enqueued on one stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Act {
    Fill {
        b: Buf,
        v: u32,
    },
    Copy {
        dst: Buf,
        src: Buf,
    },
    /// `copy_from_peer`: the buffers on two devices.
    Peer {
        dst: Buf,
        src: Buf,
    },
    Kernel {
        k: Kern,
        dst: Buf,
        src: Option<Buf>,
    },
    /// `keep_alive_in` (outside a capture: a write with nothing enqueued).
    KeepAlive {
        b: Buf,
    },
    /// A host function that counts its runs.
    HostFn,
}

/// Work inside a capture closure.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CapAct {
    /// On the capture (`lane` 0) or one of its forks.
    Act(Act),
    /// `GraphBuffer::alloc` (or `zeroed`) into graph buffer `g`.
    GraphAlloc { g: usize, zeroed: bool },
    /// `GraphBuffer::free`.
    GraphFree { g: usize },
    /// Work on a stream outside the capture, made from inside the closure (takes effect now).
    Outside { s: usize, act: Act },
    /// A buffer slot dropped inside the closure.
    DropInside { b: usize },
}

/// One step of a capture or scope body: its lane (0: the parent, 1 and 2: forks) and work.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Step<A> {
    pub lane: u8,
    pub act: A,
}

/// The capture modes used.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Global,
    ThreadLocal,
    Relaxed,
}

/// How a buffer is allocated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AllocHow {
    /// `DeviceBuffer::alloc` (no stream).
    Unordered,
    AllocOn,
    /// `alloc_in` the program's memory pool.
    AllocIn,
    Zeroed,
    ZeroedIn,
    FromHost(u32),
}

/// What an operation does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OpKind {
    Alloc {
        b: usize,
        how: AllocHow,
        s: usize,
    },
    Act {
        s: usize,
        act: Act,
    },
    CopyFromHost {
        b: usize,
        s: usize,
        v: u32,
    },
    /// `to_vec` (or `copy_to_host`): the values read are checked.
    ToVec {
        b: usize,
        s: usize,
        into_slice: bool,
    },
    FromPinned {
        b: usize,
        p: usize,
        s: usize,
    },
    ToPinned {
        b: usize,
        p: usize,
        s: usize,
    },
    /// `as_mut_slice` filled with `v`.
    PinnedWrite {
        p: usize,
        v: u32,
    },
    /// `as_slice`: the values read are checked.
    PinnedRead {
        p: usize,
    },
    Drop {
        b: usize,
    },
    /// `free()`, its answer checked.
    Free {
        b: usize,
    },
    /// `into_raw`, then the memory freed with raw calls.
    IntoRaw {
        b: usize,
    },
    /// `into_raw` with its `cuEventSynchronize` failing (the test driver's fault injection): the
    /// buffer must come back unchanged.
    IntoRawFails {
        b: usize,
    },
    /// A `BorrowedBuffer` over memory the test owns (as another library would) on a raw stream
    /// of its own, written with `v` there first; the borrow ends (`release`) with `release`.
    Borrow {
        b: usize,
        v: u32,
    },
    /// The end of a borrow: the owner then reads the memory on its stream (checked) and frees
    /// it.
    Release {
        b: usize,
    },
    Sync {
        s: usize,
    },
    Query {
        s: usize,
    },
    CtxSync {
        ctx: usize,
    },
    EventSync {
        s: usize,
    },
    /// `block_on(stream.completed())`.
    Completion {
        s: usize,
    },
    WaitStream {
        s: usize,
        other: usize,
    },
    DropStream {
        s: usize,
    },
    /// The stream (owned) moved into a host function on `on`, which drops it, or hands its
    /// handle over (`into_raw`: its end is then marked nowhere, and the test destroys the handle
    /// at the end).
    DropStreamInHostFn {
        s: usize,
        on: usize,
        into_raw: bool,
    },
    /// Work on `s` with the next `cuEventRecord` failing (the test driver's fault injection):
    /// either the work was enqueued and its use cannot be marked (then only the context's
    /// completion covers it), or a record before it failed and nothing was enqueued.
    FaultyAct {
        s: usize,
        act: Act,
    },
    NewStream {
        s: usize,
    },
    /// `stream.scope` with `forks` forks.
    Scope {
        s: usize,
        forks: u8,
        body: Vec<Step<Act>>,
    },
    /// A capture of stream `s`, instantiated into executable graph slot `exec`: `pre` on the
    /// capture, `scoped` inside a `scope` with `forks` forks, `post` on the capture again.
    Capture {
        s: usize,
        mode: Mode,
        exec: usize,
        forks: u8,
        graph_buffers: usize,
        pre: Vec<Step<CapAct>>,
        scoped: Vec<Step<CapAct>>,
        post: Vec<Step<CapAct>>,
        /// Buffer slots it is ordered with although it does not use them (hole 2 excluded).
        serialize: Vec<usize>,
    },
    /// A launch of executable graph `exec` on `s`, which writes the buffer slots its graph
    /// holds (still the allocations it captured: [`Program::held`]).
    Replay {
        exec: usize,
        s: usize,
    },
    DropExec {
        exec: usize,
    },
}

/// One operation of a program: what it does, on which thread, and whether it may run
/// concurrently with the operation just before it on the buffer it reads or writes (`loose`: a
/// read may then see the value before or after that write).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Op {
    pub thread: usize,
    pub kind: OpKind,
    pub loose: bool,
}

/// A random program.
#[derive(Debug, Clone)]
pub struct Program {
    pub seed: u64,
    pub threads: usize,
    pub len: Len,
    pub streams: Vec<StreamSpec>,
    /// The context of each buffer slot.
    pub buffers: Vec<usize>,
    pub pinned: usize,
    pub execs: usize,
    pub ops: Vec<Op>,
    /// A `to_vec` is ordered with every other operation on its buffer, reads included (hole 3
    /// excluded).
    pub to_vec_exclusive: bool,
    /// A stream's drop is ordered with every buffer operation, and a drop in a host function
    /// waits for the host function to have run (hole 9 excluded).
    pub drops_exclusive: bool,
    /// A capture runs with no other operation at the same time (on a GPU, where a free that
    /// synchronises the context, or a page-locking, on another thread invalidates it).
    pub captures_alone: bool,
}

/// An object operations share, for their order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Obj {
    Stream(usize),
    Buffer(usize),
    Pinned(usize),
    Exec(usize),
    /// A context, which a context synchronisation and a capture in it must not overlap (the
    /// synchronisation would invalidate the capture).
    Ctx(usize),
    /// Everything: a capture runs alone where `captures_alone` says.
    All,
}

impl Act {
    /// The buffers it reads and writes (slots only).
    pub fn buffers(&self) -> Vec<(usize, bool)> {
        let slot = |b: &Buf| match b {
            Buf::Slot(i) => Some(*i),
            Buf::Graph(_) => None,
        };
        let mut v = Vec::new();
        match self {
            Act::Fill { b, .. } | Act::KeepAlive { b } => v.extend(slot(b).map(|i| (i, true))),
            Act::Copy { dst, src } | Act::Peer { dst, src } => {
                v.extend(slot(src).map(|i| (i, false)));
                v.extend(slot(dst).map(|i| (i, true)));
            }
            Act::Kernel { dst, src, .. } => {
                v.extend(src.as_ref().and_then(slot).map(|i| (i, false)));
                v.extend(slot(dst).map(|i| (i, true)));
            }
            Act::HostFn => {}
        }
        v
    }
}

impl OpKind {
    /// The objects it touches, each with whether it changes it (writes its value, ends or
    /// replaces it, or needs it exclusively).
    pub fn objects(&self, p: &Program) -> Vec<(Obj, bool)> {
        use Obj::*;
        let mut v = Vec::new();
        let act = |v: &mut Vec<(Obj, bool)>, s: usize, a: &Act| {
            v.push((Stream(s), false));
            for (b, w) in a.buffers() {
                v.push((Buffer(b), w));
            }
        };
        match self {
            OpKind::Alloc { b, s, .. } => v.extend([(Buffer(*b), true), (Stream(*s), false)]),
            OpKind::Act { s, act: a } => act(&mut v, *s, a),
            OpKind::CopyFromHost { b, s, .. } => {
                v.extend([(Buffer(*b), true), (Stream(*s), false)])
            }
            // With hole 3 excluded, ordered with the buffer's reads too (another thread's read on
            // the same stream while the `to_vec` waits would be marked complete).
            OpKind::ToVec { b, s, .. } => {
                v.extend([(Buffer(*b), p.to_vec_exclusive), (Stream(*s), false)])
            }
            OpKind::FromPinned { b, p, s } => {
                v.extend([(Buffer(*b), true), (Pinned(*p), false), (Stream(*s), false)])
            }
            OpKind::ToPinned { b, p, s } => {
                v.extend([(Buffer(*b), false), (Pinned(*p), true), (Stream(*s), false)])
            }
            OpKind::PinnedWrite { p, .. } => v.push((Pinned(*p), true)),
            OpKind::PinnedRead { p } => v.push((Pinned(*p), false)),
            OpKind::Drop { b }
            | OpKind::Free { b }
            | OpKind::IntoRaw { b }
            | OpKind::IntoRawFails { b }
            | OpKind::Borrow { b, .. }
            | OpKind::Release { b } => v.push((Buffer(*b), true)),
            OpKind::Sync { s }
            | OpKind::Query { s }
            | OpKind::EventSync { s }
            | OpKind::Completion { s } => v.push((Stream(*s), false)),
            OpKind::CtxSync { ctx } => v.push((Ctx(*ctx), true)),
            OpKind::WaitStream { s, other } => {
                v.extend([(Stream(*s), false), (Stream(*other), false)])
            }
            OpKind::DropStream { s } | OpKind::NewStream { s } => v.push((Stream(*s), true)),
            OpKind::DropStreamInHostFn { s, on, .. } => {
                v.extend([(Stream(*s), true), (Stream(*on), false)])
            }
            OpKind::FaultyAct { s, act: a } => act(&mut v, *s, a),
            OpKind::Scope { s, body, .. } => {
                v.push((Stream(*s), false));
                for st in body {
                    for (b, w) in st.act.buffers() {
                        v.push((Buffer(b), w));
                    }
                }
            }
            OpKind::Capture {
                s,
                exec,
                pre,
                scoped,
                post,
                serialize,
                ..
            } => {
                v.extend([
                    (Stream(*s), true),
                    (Exec(*exec), true),
                    (Ctx(p.streams[*s].ctx), false),
                ]);
                v.extend(serialize.iter().map(|b| (Buffer(*b), true)));
                for st in pre.iter().chain(scoped).chain(post) {
                    match &st.act {
                        CapAct::Act(a) => {
                            for (b, w) in a.buffers() {
                                v.push((Buffer(b), w));
                            }
                        }
                        CapAct::Outside { s, act: a } => act(&mut v, *s, a),
                        CapAct::DropInside { b } => v.push((Buffer(*b), true)),
                        CapAct::GraphAlloc { .. } | CapAct::GraphFree { .. } => {}
                    }
                }
            }
            OpKind::Replay { exec, s } => v.extend([(Exec(*exec), true), (Stream(*s), false)]),
            OpKind::DropExec { exec } => v.push((Exec(*exec), true)),
        }
        if p.drops_exclusive
            && matches!(
                self,
                OpKind::DropStream { .. } | OpKind::DropStreamInHostFn { .. }
            )
        {
            v.extend((0..p.buffers.len()).map(|b| (Buffer(b), true)));
        }
        if p.captures_alone {
            v.push((All, matches!(self, OpKind::Capture { .. })));
        }
        v
    }
}

/// What an operation does to one buffer it names by itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Use {
    /// `to_vec` / `copy_to_host`: a checked read that marks the stream's uses complete.
    ToVec,
    Read,
    /// Writes the values (and may read them).
    Write,
    /// Allocates, frees, borrows, captures, replays: no loose partner.
    Other,
}

fn use_of(kind: &OpKind, b: usize) -> Use {
    match kind {
        OpKind::ToVec { .. } => Use::ToVec,
        OpKind::ToPinned { .. } => Use::Read,
        OpKind::CopyFromHost { .. } | OpKind::FromPinned { .. } => Use::Write,
        OpKind::Act { act, .. } => match act.buffers().iter().find(|(x, _)| *x == b) {
            Some((_, true)) => Use::Write,
            Some((_, false)) => Use::Read,
            None => Use::Other,
        },
        _ => Use::Other,
    }
}

/// The stream an operation of one buffer runs on.
fn stream_of(kind: &OpKind) -> Option<usize> {
    match kind {
        OpKind::ToVec { s, .. }
        | OpKind::ToPinned { s, .. }
        | OpKind::CopyFromHost { s, .. }
        | OpKind::FromPinned { s, .. }
        | OpKind::Act { s, .. } => Some(*s),
        _ => None,
    }
}

impl Program {
    /// For each operation, the buffer slots it writes through a graph: for a replay, the slots
    /// its executable graph's capture used that still hold the allocation it used then.
    pub fn held(&self) -> Vec<Vec<usize>> {
        let mut generation = vec![0u64; self.buffers.len()];
        let mut execs: Vec<Vec<(usize, u64)>> = vec![Vec::new(); self.execs];
        let mut out = Vec::with_capacity(self.ops.len());
        for op in &self.ops {
            let mut held = Vec::new();
            match &op.kind {
                OpKind::Alloc { b, .. } | OpKind::Borrow { b, .. } => generation[*b] += 1,
                OpKind::Capture {
                    exec,
                    pre,
                    scoped,
                    post,
                    ..
                } => {
                    let mut slots: Vec<usize> = pre
                        .iter()
                        .chain(scoped)
                        .chain(post)
                        .filter_map(|st| match &st.act {
                            CapAct::Act(a) => Some(a.buffers()),
                            _ => None,
                        })
                        .flatten()
                        .map(|(b, _)| b)
                        .collect();
                    slots.sort_unstable();
                    slots.dedup();
                    execs[*exec] = slots.into_iter().map(|b| (b, generation[b])).collect();
                }
                OpKind::Replay { exec, .. } => {
                    held = execs[*exec]
                        .iter()
                        .filter(|&&(b, g)| generation[b] == g)
                        .map(|&(b, _)| b)
                        .collect();
                }
                _ => {}
            }
            out.push(held);
        }
        out
    }

    /// The objects operation `i` touches (with `held`, [`Program::held`]).
    pub fn objects(&self, i: usize, held: &[Vec<usize>]) -> Vec<(Obj, bool)> {
        let mut v = self.ops[i].kind.objects(self);
        v.extend(held[i].iter().map(|b| (Obj::Buffer(*b), true)));
        v
    }

    /// Whether operation `i` may be `loose`: it reads or writes one buffer by itself (a
    /// `to_vec`, a copy to or from page-locked memory or the host, a fill or an `rp_set`), and the
    /// operation before it on that buffer is on another thread and writes it (for a read) or is a
    /// `to_vec` (for a write). With `no_completed_on` (hole 3 excluded), not when either is an
    /// operation that marks its stream's uses complete (`to_vec`, `copy_from_host`) and both are
    /// on the same stream slot.
    pub fn loose_ok(&self, i: usize, no_completed_on: bool) -> bool {
        let op = &self.ops[i];
        let single = match &op.kind {
            OpKind::ToVec { b, .. }
            | OpKind::ToPinned { b, .. }
            | OpKind::CopyFromHost { b, .. }
            | OpKind::FromPinned { b, .. } => Some(*b),
            OpKind::Act {
                act: Act::Fill {
                    b: Buf::Slot(b), ..
                },
                ..
            }
            | OpKind::Act {
                act:
                    Act::Kernel {
                        k: Kern::Set(_),
                        dst: Buf::Slot(b),
                        ..
                    },
                ..
            } => Some(*b),
            _ => None,
        };
        let Some(b) = single else { return false };
        let held = self.held();
        let prev = (0..i).rev().find(|&j| {
            self.objects(j, &held)
                .iter()
                .any(|(o, _)| *o == Obj::Buffer(b))
        });
        let Some(j) = prev else { return false };
        let (mine, theirs) = (use_of(&op.kind, b), use_of(&self.ops[j].kind, b));
        let pair = match mine {
            Use::ToVec | Use::Read => theirs == Use::Write,
            Use::Write => theirs == Use::ToVec,
            Use::Other => false,
        };
        let is_to_vec = |k: &OpKind| matches!(k, OpKind::ToVec { .. });
        if self.to_vec_exclusive && (is_to_vec(&op.kind) || is_to_vec(&self.ops[j].kind)) {
            // Ordered as a write then: no loose partner.
            return false;
        }
        let completes =
            |k: &OpKind| matches!(k, OpKind::ToVec { .. } | OpKind::CopyFromHost { .. });
        // The same stream: one slot, or the legacy stream of one context in two slots.
        let same = match (stream_of(&op.kind), stream_of(&self.ops[j].kind)) {
            (Some(a), Some(b)) => {
                let (x, y) = (self.streams[a], self.streams[b]);
                a == b
                    || (x.kind == StreamKind::Legacy
                        && y.kind == StreamKind::Legacy
                        && x.ctx == y.ctx)
            }
            _ => false,
        };
        let hole3 =
            no_completed_on && (completes(&op.kind) || completes(&self.ops[j].kind)) && same;
        self.ops[j].thread != op.thread && pair && !hole3
    }

    /// For each operation, the earlier ones it waits for: per object in program order, a
    /// change waits for the last change and every use since, a use for the last change. A
    /// `loose` operation does not wait for the operation just before it on the one buffer they
    /// share, when that one is on another thread and one of the two only reads the buffer (it
    /// still waits for what that one waited for on the buffer).
    pub fn deps(&self) -> Vec<Vec<usize>> {
        use std::collections::HashMap;
        #[derive(Default, Clone)]
        struct Track {
            last_change: Option<usize>,
            uses: Vec<usize>,
            /// The change before `last_change`, and the last op on the object.
            before: Option<usize>,
            last: Option<usize>,
        }
        let mut objs: HashMap<Obj, Track> = HashMap::new();
        let mut deps = Vec::with_capacity(self.ops.len());
        let held = self.held();
        for (i, op) in self.ops.iter().enumerate() {
            let mut d: Vec<usize> = Vec::new();
            let mut seen: Vec<Obj> = Vec::new();
            for (o, w) in self.objects(i, &held) {
                if seen.contains(&o) {
                    // The same object twice: the stronger access counts (a write is listed last).
                    if !w {
                        continue;
                    }
                }
                seen.push(o);
                let t = objs.entry(o).or_default();
                let skip = op.loose
                    && matches!(o, Obj::Buffer(_))
                    && t.last.is_some_and(|l| self.ops[l].thread != op.thread);
                let add = |j: Option<usize>, d: &mut Vec<usize>| {
                    if let Some(j) = j {
                        if skip && Some(j) == t.last {
                            // Loose: wait for what the skipped one waited for on this object.
                            d.extend(t.before);
                        } else {
                            d.push(j);
                        }
                    }
                };
                if w {
                    add(t.last_change, &mut d);
                    for &u in &t.uses.clone() {
                        add(Some(u), &mut d);
                    }
                    // A use this one skipped stays one that the next change waits for.
                    let skipped: Vec<usize> = t
                        .uses
                        .iter()
                        .copied()
                        .filter(|&u| skip && Some(u) == t.last)
                        .collect();
                    t.before = t.last_change;
                    t.last_change = Some(i);
                    t.uses = skipped;
                } else {
                    add(t.last_change, &mut d);
                    t.uses.push(i);
                }
                t.last = Some(i);
            }
            d.sort_unstable();
            d.dedup();
            d.retain(|&j| j < i);
            deps.push(d);
        }
        deps
    }

    /// How many operations it makes, counting each step of a body.
    pub fn size(&self) -> usize {
        self.ops
            .iter()
            .map(|op| match &op.kind {
                OpKind::Scope { body, .. } => 1 + body.len(),
                OpKind::Capture {
                    pre, scoped, post, ..
                } => 1 + pre.len() + scoped.len() + post.len(),
                _ => 1,
            })
            .sum()
    }
}

impl fmt::Display for Buf {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Buf::Slot(i) => write!(f, "b{i}"),
            Buf::Graph(g) => write!(f, "g{g}"),
        }
    }
}

impl fmt::Display for Act {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Act::Fill { b, v } => write!(f, "{b}.fill({v:#x})"),
            Act::Copy { dst, src } => write!(f, "{dst}.copy_from({src})"),
            Act::Peer { dst, src } => write!(f, "{dst}.copy_from_peer({src})"),
            Act::Kernel { k, dst, src } => match (k, src) {
                (Kern::Set(v), _) => write!(f, "rp_set({dst}, {v:#x})"),
                (Kern::Add(k), Some(s)) => write!(f, "rp_add({dst} += {s} + {k:#x})"),
                (Kern::Scale(m, a), Some(s)) => {
                    write!(f, "rp_scale({dst} = {s} * {m:#x} + {a:#x})")
                }
                (_, None) => write!(f, "kernel({dst})"),
            },
            Act::KeepAlive { b } => write!(f, "{b}.keep_alive_in"),
            Act::HostFn => write!(f, "launch_host_func"),
        }
    }
}

impl fmt::Display for CapAct {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CapAct::Act(a) => write!(f, "{a}"),
            CapAct::GraphAlloc { g, zeroed } => {
                write!(
                    f,
                    "g{g} = GraphBuffer::{}",
                    if *zeroed { "zeroed" } else { "alloc" }
                )
            }
            CapAct::GraphFree { g } => write!(f, "g{g}.free()"),
            CapAct::Outside { s, act } => write!(f, "outside the capture, on s{s}: {act}"),
            CapAct::DropInside { b } => write!(f, "drop(b{b})"),
        }
    }
}

fn steps<A: fmt::Display>(f: &mut fmt::Formatter<'_>, what: &str, body: &[Step<A>]) -> fmt::Result {
    for st in body {
        let lane = match st.lane {
            0 => "parent".to_string(),
            n => format!("fork {n}"),
        };
        writeln!(f, "        {what} {lane}: {}", st.act)?;
    }
    Ok(())
}

impl fmt::Display for Program {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "program {:#x}: {} thread(s), {} values per buffer",
            self.seed, self.threads, self.len
        )?;
        for (i, s) in self.streams.iter().enumerate() {
            writeln!(f, "    s{i}: {:?} stream of context {}", s.kind, s.ctx)?;
        }
        for (i, c) in self.buffers.iter().enumerate() {
            writeln!(f, "    b{i}: buffer of context {c}")?;
        }
        for (i, op) in self.ops.iter().enumerate() {
            let loose = if op.loose { " (loose)" } else { "" };
            write!(f, "  #{i} [t{}]{loose} ", op.thread)?;
            match &op.kind {
                OpKind::Scope { s, forks, body } => {
                    writeln!(f, "s{s}.scope with {forks} fork(s):")?;
                    steps(f, "", body)?;
                }
                OpKind::Capture {
                    s,
                    mode,
                    exec,
                    forks,
                    pre,
                    scoped,
                    post,
                    ..
                } => {
                    writeln!(f, "e{exec} = s{s}.capture({mode:?}), {forks} fork(s):")?;
                    steps(f, "before the scope,", pre)?;
                    steps(f, "in the scope,", scoped)?;
                    steps(f, "after the scope,", post)?;
                }
                OpKind::Act { s, act } => writeln!(f, "on s{s}: {act}")?,
                other => writeln!(f, "{other:?}")?,
            }
        }
        Ok(())
    }
}
