//! A random program: its objects (streams of several kinds, buffers, page-locked buffers,
//! executable graphs), its operations, each on one thread, and how they depend on each other.

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
    /// A fill of the buffer through the two views `split_at_mut` makes of it, one after the
    /// other (the high half first, or the low one), so that every read sees one value. (A
    /// borrowed or graph buffer, which lends no exclusive view, is filled whole.)
    FillHalves {
        b: Buf,
        v: u32,
        high_first: bool,
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
    /// `ManagedBuffer::zeroed` (no stream: zeroed by the host).
    Managed,
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
    /// A managed buffer's `as_mut_slice` (host access, after its recorded uses) filled with `v`.
    ManagedWrite {
        b: usize,
        v: u32,
    },
    /// A managed buffer's `as_slice` (host access): the values read are checked.
    ManagedRead {
        b: usize,
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
    /// The cache limit of every memory pool for the program (bytes of freed blocks kept for
    /// reuse on private streams: 0, room for one small block, or no limit).
    pub cache_limit: u64,
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
            Act::Fill { b, .. } | Act::FillHalves { b, .. } | Act::KeepAlive { b } => {
                v.extend(slot(b).map(|i| (i, true)))
            }
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
            OpKind::ManagedWrite { b, .. } => v.push((Buffer(*b), true)),
            OpKind::ManagedRead { b } => v.push((Buffer(*b), false)),
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
