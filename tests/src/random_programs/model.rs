//! The reference model: what every read of a program must see, given what each operation
//! returned. Buffers hold one value in every element (all operations are element-wise), as a
//! small set of the values the crate's ordering allows (one value, unless an operation ran
//! concurrently with the write before it, `loose`), or undefined (memory never written: not
//! checked). Operations are taken in program order, which for each buffer is the order the
//! program made its operations in (their dependencies).
//!
//! An error is a failure, except where the crate documents a refusal or the program provokes a
//! failure: a use covered by the context's completion only, refused while a capture of the
//! context runs (on any thread), a use inside a capture refused (`Error::Refused`: the buffer's
//! conflicting earlier use is on a stream in a capture now, or covered by the context's
//! completion only), `into_raw`
//! refused (graphs hold the memory, or a use is covered by the context's completion only: the
//! buffer comes back), and the faults `IntoRawFails` and `FaultyAct` inject. A refused step
//! ends its capture with that error and no graph; the work it did outside the capture before
//! the refusal stands.

use std::collections::BTreeSet;

use super::execute::Outcome;
use super::kernels::apply;
use super::program::*;
use super::run::NO_GRAPH;

/// The values a buffer may hold: `None` where undefined.
type Val = Option<BTreeSet<u32>>;

/// The most values a set holds before it counts as undefined.
const MAX_SET: usize = 16;

fn one(v: u32) -> Val {
    Some(BTreeSet::from([v]))
}

fn union(a: &Val, b: &Val) -> Val {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.union(b).copied().collect()),
        _ => None,
    }
}

fn map2(a: &Val, b: &Val, f: impl Fn(Option<u32>, Option<u32>) -> Option<u32>) -> Val {
    let a: Vec<Option<u32>> = match a {
        Some(s) => s.iter().map(|v| Some(*v)).collect(),
        None => vec![None],
    };
    let b: Vec<Option<u32>> = match b {
        Some(s) => s.iter().map(|v| Some(*v)).collect(),
        None => vec![None],
    };
    let mut out = BTreeSet::new();
    for x in &a {
        for y in &b {
            out.insert(f(*x, *y)?);
        }
    }
    (out.len() <= MAX_SET).then_some(out)
}

#[derive(Debug, Clone, Default)]
struct MBuf {
    alive: bool,
    generation: u64,
    val: Val,
    /// The value before the last write.
    before: Val,
    /// The last operation on it: (index, thread).
    last: Option<(usize, usize)>,
}

/// An executable graph: its steps (with the allocation each buffer slot meant) and its graph
/// buffers (zeroed or not).
#[derive(Debug, Clone)]
struct ExecModel {
    acts: Vec<(Act, Vec<(usize, u64)>)>,
    graph_allocs: Vec<(usize, bool)>,
}

struct Model {
    bufs: Vec<MBuf>,
    /// The values of allocations no slot holds any more, which graphs may still hold (by slot
    /// and allocation).
    orphans: std::collections::HashMap<(usize, u64), Val>,
    pinned: Vec<Val>,
    execs: Vec<Option<ExecModel>>,
    /// Reads to check: (operation, what, the values allowed).
    reads: Vec<(usize, String, Val, Vec<u32>)>,
    host_fns: u64,
    problems: Vec<String>,
}

impl Model {
    /// The value of slot `b` an operation `i` on `thread` reads (the value before the last
    /// write too if `loose` skipped it).
    fn view(&self, b: usize, loose: bool, thread: usize) -> Val {
        let m = &self.bufs[b];
        match m.last {
            Some((_, t)) if loose && t != thread => union(&m.val, &m.before),
            _ => m.val.clone(),
        }
    }

    fn write(&mut self, b: usize, v: Val, i: usize, loose: bool, thread: usize) {
        let m = &mut self.bufs[b];
        // A loose write after a checked read on another thread: that read may see it.
        if let (true, Some((j, t))) = (loose, m.last) {
            if t != thread {
                for r in self.reads.iter_mut().filter(|r| r.0 == j) {
                    r.2 = union(&r.2, &v);
                }
            }
        }
        let m = &mut self.bufs[b];
        m.before = std::mem::replace(&mut m.val, v);
        m.last = Some((i, thread));
    }

    /// Slot `b` lets go of its allocation (a graph may still hold it).
    fn orphan(&mut self, b: usize) {
        let m = &mut self.bufs[b];
        if m.alive {
            self.orphans.insert((b, m.generation), m.val.clone());
        }
        m.alive = false;
    }

    fn touch(&mut self, b: usize, i: usize, thread: usize) {
        self.bufs[b].last = Some((i, thread));
    }

    /// Applies `act` (an operation `i`'s, on `thread`) to slots and `graph` buffers.
    fn act(&mut self, act: &Act, graph: &mut [Val], i: usize, loose: bool, thread: usize) {
        let get = |m: &Self, b: Buf, graph: &[Val]| match b {
            Buf::Slot(s) => m.view(s, loose, thread),
            Buf::Graph(g) => graph[g].clone(),
        };
        let (dst, v) = match act {
            Act::Fill { b, v } => (*b, one(*v)),
            Act::FillHalves { b, v, .. } => (*b, one(*v)),
            Act::Copy { dst, src } | Act::Peer { dst, src } => (*dst, get(self, *src, graph)),
            Act::Kernel { k, dst, src } => {
                let d = get(self, *dst, graph);
                let s = src.map(|s| get(self, s, graph)).unwrap_or(one(0));
                (*dst, map2(&d, &s, |d, s| apply(*k, d, s)))
            }
            Act::KeepAlive { .. } | Act::HostFn => {
                if let Act::HostFn = act {
                    self.host_fns += 1;
                }
                return;
            }
        };
        for (b, _) in act.buffers() {
            if Buf::Slot(b) != dst {
                self.touch(b, i, thread);
            }
        }
        match dst {
            Buf::Slot(b) => self.write(b, v, i, loose, thread),
            Buf::Graph(g) => graph[g] = v,
        }
    }

    fn read(&mut self, i: usize, what: String, expected: Val, got: Option<Vec<u32>>) {
        match got {
            Some(v) => self.reads.push((i, what, expected, v)),
            None => self.problems.push(format!("#{i}: {what} read nothing")),
        }
    }

    /// Whether operation `i`'s error is one the crate documents for it.
    fn allowed(&self, op: &OpKind, out: &Outcome) -> bool {
        // Any use whose earlier use only the context's completion covers is refused while a
        // capture of the context runs, on whatever thread: nothing is enqueued.
        if out
            .error
            .as_ref()
            .is_some_and(|e| e.1 && e.0.contains("a stream of the context is being captured"))
        {
            return true;
        }
        match op {
            OpKind::IntoRawFails { .. } => true,
            // The memory is freed, after the context's work where a use is covered by nothing
            // else, and the refusal that forced that wait reported.
            OpKind::Free { .. } => out.error.as_ref().is_some_and(|e| e.1),
            // Refused while graphs hold the memory, which they let go of on the driver's threads
            // (so either answer can come after a capture): the buffer comes back.
            OpKind::IntoRaw { .. } => out.error.as_ref().is_some_and(|e| e.1),
            // Every refusal a capture's step gets is documented: a conflicting earlier use on a
            // stream that is in a capture now (a fork of the pool it was used on, hole 1's
            // family), or one covered by the context's completion only.
            OpKind::Capture { .. } => out
                .steps
                .iter()
                .rev()
                .find_map(|o| o.error.as_ref())
                .is_some_and(|e| e.1),
            // A failed event record: the error of that call.
            OpKind::FaultyAct { .. } => out
                .error
                .as_ref()
                .is_some_and(|e| e.0.contains("cuEventRecord")),
            _ => false,
        }
    }

    fn op(&mut self, i: usize, op: &Op, out: &Outcome) {
        let (loose, t) = (op.loose, op.thread);
        if let OpKind::Replay { exec, .. } = &op.kind {
            let missing = out.error.as_ref().is_some_and(|e| e.0 == NO_GRAPH);
            if missing != self.execs[*exec].is_none() {
                self.problems.push(format!(
                    "#{i}: the executable graph {}",
                    if missing {
                        "is missing"
                    } else {
                        "should be missing"
                    }
                ));
            }
            if missing {
                return;
            }
        }
        if let Some((e, _)) = &out.error {
            if !self.allowed(&op.kind, out) {
                self.problems.push(format!("#{i}: returned an error: {e}"));
            }
        }
        let ok = out.error.is_none();
        match &op.kind {
            OpKind::Alloc { b, how, .. } if ok => {
                self.orphan(*b);
                let m = &mut self.bufs[*b];
                m.alive = true;
                m.generation += 1;
                m.last = Some((i, t));
                m.before = None;
                m.val = match how {
                    AllocHow::Zeroed | AllocHow::ZeroedIn | AllocHow::Managed => one(0),
                    AllocHow::FromHost(v) => one(*v),
                    _ => None,
                };
            }
            OpKind::Act { act, .. } if ok => self.act(act, &mut [], i, loose, t),
            OpKind::FaultyAct { act, .. } => {
                // Enqueued or not: each buffer it writes holds either value.
                let before: Vec<(usize, Val)> = act
                    .buffers()
                    .iter()
                    .map(|(b, _)| (*b, self.bufs[*b].val.clone()))
                    .collect();
                self.act(act, &mut [], i, loose, t);
                for (b, v) in before {
                    let after = self.bufs[b].val.clone();
                    self.bufs[b].val = union(&v, &after);
                }
            }
            OpKind::CopyFromHost { b, v, .. } if ok => self.write(*b, one(*v), i, loose, t),
            OpKind::ToVec { b, s, .. } => {
                let v = self.view(*b, loose, t);
                self.touch(*b, i, t);
                if ok {
                    self.read(i, format!("b{b} read on s{s}"), v, out.read.clone());
                }
            }
            OpKind::FromPinned { b, p, .. } if ok => {
                let v = self.pinned[*p].clone();
                self.write(*b, v, i, loose, t);
            }
            OpKind::ToPinned { b, p, .. } if ok => {
                self.pinned[*p] = self.view(*b, loose, t);
                self.touch(*b, i, t);
            }
            OpKind::ManagedWrite { b, v } if ok => self.write(*b, one(*v), i, loose, t),
            OpKind::ManagedRead { b } => {
                let v = self.view(*b, loose, t);
                self.touch(*b, i, t);
                if ok {
                    self.read(
                        i,
                        format!("managed b{b} read on the host"),
                        v,
                        out.read.clone(),
                    );
                }
            }
            OpKind::PinnedWrite { p, v } if ok => self.pinned[*p] = one(*v),
            OpKind::PinnedRead { p } if ok => {
                let v = self.pinned[*p].clone();
                self.read(
                    i,
                    format!("pinned p{p} read on the host"),
                    v,
                    out.read.clone(),
                );
            }
            OpKind::Drop { b } | OpKind::Free { b } => self.orphan(*b),
            OpKind::IntoRaw { b } if ok => self.orphan(*b),
            OpKind::IntoRawFails { b } if ok => self.orphan(*b),
            OpKind::Borrow { b, v } if ok => {
                self.orphan(*b);
                let m = &mut self.bufs[*b];
                m.alive = true;
                m.generation += 1;
                m.last = Some((i, t));
                m.val = one(*v);
            }
            OpKind::Release { b } => {
                let v = self.bufs[*b].val.clone();
                self.orphan(*b);
                if ok {
                    self.read(
                        i,
                        format!("b{b} read by its owner after the borrow"),
                        v,
                        out.read.clone(),
                    );
                }
            }
            OpKind::Scope { body, .. } if ok => {
                for st in body {
                    self.act(&st.act, &mut [], i, false, t);
                }
            }
            OpKind::Capture {
                exec,
                graph_buffers,
                pre,
                scoped,
                post,
                ..
            } => {
                self.execs[*exec] = None;
                let steps: Vec<&Step<CapAct>> = pre.iter().chain(scoped).chain(post).collect();
                let mut model = ExecModel {
                    acts: Vec::new(),
                    graph_allocs: Vec::new(),
                };
                let _ = graph_buffers;
                for (k, st) in steps.iter().enumerate() {
                    if out.steps.get(k).is_none_or(|o| o.error.is_some()) {
                        break;
                    }
                    match &st.act {
                        CapAct::Act(a) => {
                            let gens = a
                                .buffers()
                                .iter()
                                .map(|(b, _)| (*b, self.bufs[*b].generation))
                                .collect();
                            model.acts.push((a.clone(), gens));
                        }
                        CapAct::GraphAlloc { g, zeroed } => model.graph_allocs.push((*g, *zeroed)),
                        CapAct::GraphFree { .. } => {}
                        CapAct::Outside { act, .. } => self.act(act, &mut [], i, false, t),
                        CapAct::DropInside { b } => self.orphan(*b),
                    }
                }
                if ok {
                    self.execs[*exec] = Some(model);
                }
            }
            OpKind::Replay { exec, .. } if ok => {
                let Some(e) = self.execs[*exec].clone() else {
                    self.problems
                        .push(format!("#{i}: replayed a graph the model has not"));
                    return;
                };
                let mut graph: Vec<Val> = vec![None; 4];
                for (g, zeroed) in &e.graph_allocs {
                    graph[*g] = if *zeroed { one(0) } else { None };
                }
                for (a, gens) in &e.acts {
                    // An allocation that is no longer its slot's (the graph holds it): its
                    // value stands in for a graph buffer for the step.
                    let mut a = a.clone();
                    let mut moved = Vec::new();
                    for &(b, generation) in gens {
                        if self.bufs[b].alive && self.bufs[b].generation == generation {
                            continue;
                        }
                        let k = graph.len();
                        graph.push(self.orphans.get(&(b, generation)).cloned().flatten());
                        moved.push((b, generation, k));
                        rename(&mut a, b, k);
                    }
                    self.act(&a, &mut graph, i, false, t);
                    for (b, generation, k) in moved {
                        self.orphans.insert((b, generation), graph[k].clone());
                    }
                    graph.truncate(4);
                }
            }
            OpKind::DropExec { exec } => self.execs[*exec] = None,
            _ => {}
        }
    }
}

/// `act` with slot `b` standing for graph buffer `g`.
fn rename(act: &mut Act, b: usize, g: usize) {
    let r = |x: &mut Buf| {
        if *x == Buf::Slot(b) {
            *x = Buf::Graph(g);
        }
    };
    match act {
        Act::Fill { b, .. } | Act::FillHalves { b, .. } | Act::KeepAlive { b } => r(b),
        Act::Copy { dst, src } | Act::Peer { dst, src } => {
            r(dst);
            r(src);
        }
        Act::Kernel { dst, src, .. } => {
            r(dst);
            if let Some(s) = src {
                r(s);
            }
        }
        Act::HostFn => {}
    }
}

/// The problems of a run of `p` whose operations returned `outs`, with `host_fns` host
/// functions run in all.
pub fn check(p: &Program, outs: &[Outcome], host_fns: u64) -> Vec<String> {
    let mut m = Model {
        bufs: vec![MBuf::default(); p.buffers.len()],
        orphans: std::collections::HashMap::new(),
        pinned: vec![one(0); p.pinned],
        execs: vec![None; p.execs],
        reads: Vec::new(),
        host_fns: 0,
        problems: Vec::new(),
    };
    for (i, op) in p.ops.iter().enumerate() {
        match outs.get(i) {
            Some(o) if o.ran => m.op(i, op, o),
            _ => m.problems.push(format!("#{i}: did not run")),
        }
    }
    for (i, what, allowed, got) in &m.reads {
        let Some(allowed) = allowed else { continue };
        let first = got.first().copied();
        let uniform = got.iter().all(|v| Some(*v) == first);
        if !uniform || first.is_some_and(|v| !allowed.contains(&v)) {
            let mut seen: Vec<u32> = got.clone();
            seen.sort_unstable();
            seen.dedup();
            seen.truncate(4);
            m.problems.push(format!(
                "#{i}: {what}: saw {seen:#x?}, expected {:#x?}",
                allowed.iter().collect::<Vec<_>>()
            ));
        }
    }
    if m.host_fns != host_fns {
        m.problems.push(format!(
            "{host_fns} host function runs, expected {}",
            m.host_fns
        ));
    }
    m.problems
}
