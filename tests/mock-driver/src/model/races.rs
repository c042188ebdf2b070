//! The race detector's model: the happens-before relation of what the mock executes, as vector
//! clocks, and the accesses to memory checked against it.
//!
//! - **Components.** Each queue (a created stream, a context's legacy stream, a thread's
//!   per-thread stream) is a component of the clocks, and so is the host (component 0), and each
//!   branch (*lane*: the stream of the capture that recorded it) of an executable graph. A
//!   component's events are a chain: an event ticks its component only when its clock knows the
//!   component's latest tick (else it takes a fresh component), so `V[c] >= t` says that event
//!   `t` of `c` happened before `V`.
//! - **Edges.** A queue's clock advances with its work (stream order); each enqueue first takes
//!   in what the host knows (work enqueued after the host learnt that other work completed comes
//!   after it), and, for the legacy stream, the clocks of the context's blocking streams (and a
//!   blocking stream the legacy stream's: the implicit synchronisation). An event record copies
//!   the clock; a wait joins it. The host learns a clock from a synchronisation that returns
//!   (stream, event, context), a query that answers `CUDA_SUCCESS`, and a copy into pageable
//!   memory; what it learnt is the clock at the call, joined when the call returns. One clock
//!   stands for every host thread: knowledge passes between threads through their own
//!   synchronisation (a lock, a channel), which the driver cannot see, so a race that depends on
//!   which thread learnt what is not reported. Host functions touch no device memory; they are
//!   stream work like any other (the stream's later work waits for them).
//! - **Graphs.** A launch of an executable graph starts after the stream's earlier work and the
//!   previous launch of the same executable graph (the driver orders launches of one
//!   executable graph); each node's clock joins its dependencies' and ticks its lane; event record
//!   and wait nodes record and join as above; the stream's later work comes after every node.
//! - **Accesses.** Every operation that touches memory (device memory, or page-locked host
//!   memory from `cuMemHostAlloc`) records its byte ranges with its component and tick. A new
//!   access conflicts with an earlier one when either writes (a free counts as a write of the
//!   whole allocation); a conflicting earlier access that did not happen before the new one is a
//!   race, recorded with both operations named (call, stream or graph node, range). Records that
//!   a new access covers and happened after are forgotten.

use std::collections::HashMap;
use std::fmt;

use super::records::Key;

/// A component of the clocks.
pub(crate) type Comp = u32;

/// The host's component.
pub(crate) const HOST: Comp = 0;

/// A vector clock, dense over the components made since the last reset.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Clock(Vec<u32>);

impl Clock {
    pub(crate) fn get(&self, c: Comp) -> u32 {
        self.0.get(c as usize).copied().unwrap_or(0)
    }

    fn set(&mut self, c: Comp, t: u32) {
        let i = c as usize;
        if self.0.len() <= i {
            self.0.resize(i + 1, 0);
        }
        self.0[i] = t;
    }

    /// Takes in everything `other` knows.
    pub(crate) fn join(&mut self, other: &Clock) {
        if self.0.len() < other.0.len() {
            self.0.resize(other.0.len(), 0);
        }
        for (a, b) in self.0.iter_mut().zip(&other.0) {
            *a = (*a).max(*b);
        }
    }
}

/// Which memory an access touches.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Space {
    Device,
    /// Page-locked host memory (`cuMemHostAlloc`); other host memory is not tracked.
    Host,
}

/// What an access does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Read,
    Write,
    /// The end of the allocation: conflicts with every access.
    Free,
}

impl Kind {
    fn conflicts(self, other: Kind) -> bool {
        self != Kind::Read || other != Kind::Read
    }

    fn word(self) -> &'static str {
        match self {
            Kind::Read => "read",
            Kind::Write => "write",
            Kind::Free => "free",
        }
    }
}

/// One access: `len` bytes at `ptr`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Acc {
    pub(crate) space: Space,
    pub(crate) ptr: u64,
    pub(crate) len: u64,
    pub(crate) kind: Kind,
}

impl Acc {
    pub(crate) fn device(ptr: u64, len: usize, kind: Kind) -> Acc {
        Acc {
            space: Space::Device,
            ptr,
            len: len as u64,
            kind,
        }
    }

    pub(crate) fn host(ptr: usize, len: usize, kind: Kind) -> Acc {
        Acc {
            space: Space::Host,
            ptr: ptr as u64,
            len: len as u64,
            kind,
        }
    }
}

/// Where an operation ran.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Who {
    Stream(Key),
    /// Node `node` of executable graph `exec`, launched on a stream.
    Node {
        exec: usize,
        node: u32,
        stream: Key,
    },
    Host,
}

impl fmt::Display for Who {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fn key(f: &mut fmt::Formatter<'_>, k: &Key) -> fmt::Result {
            match k {
                Key::Stream(h) => write!(f, "stream {h:#x}"),
                Key::Legacy(c) => write!(f, "the legacy stream of context {c:#x}"),
                Key::PerThread(c, t) => {
                    write!(f, "the per-thread stream of context {c:#x} on {t:?}")
                }
            }
        }
        match self {
            Who::Stream(k) => key(f, k),
            Who::Node { exec, node, stream } => {
                write!(f, "node {node} of graph exec {exec:#x} launched on ")?;
                key(f, stream)
            }
            Who::Host => write!(f, "the host"),
        }
    }
}

/// An operation: the driver call and where it ran.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Op {
    pub(crate) call: &'static str,
    pub(crate) who: Who,
}

/// An access recorded on a range.
#[derive(Debug, Clone, Copy)]
struct Rec {
    lo: u64,
    hi: u64,
    kind: Kind,
    comp: Comp,
    tick: u32,
    op: Op,
}

impl Rec {
    fn describe(&self) -> String {
        format!(
            "{} ({} of [{:#x}, {:#x}) on {})",
            self.op.call,
            self.kind.word(),
            self.lo,
            self.hi,
            self.op.who
        )
    }
}

/// What a queue's clock needs to know about the queue.
#[derive(Debug, Clone)]
struct Queue {
    comp: Comp,
    ctx: usize,
    /// Synchronises with the legacy stream (created without `CU_STREAM_NON_BLOCKING`, or a
    /// per-thread stream).
    blocking: bool,
    clock: Clock,
}

/// An executable graph's lanes (the component of each, by the lane's index) and the clock its
/// last launch ended with.
#[derive(Debug, Default)]
pub(crate) struct ExecClocks {
    pub(crate) lanes: Vec<Comp>,
    pub(crate) last_end: Clock,
}

/// How many race reports are kept (all are counted).
const KEPT: usize = 64;

/// The detector's state: cleared by `cuda_mock_reset`.
#[derive(Debug, Default)]
pub(crate) struct Detector {
    queues: HashMap<Key, Queue>,
    /// The highest tick given out on each component.
    top: Vec<u32>,
    /// Each event's last record (by record state).
    pub(crate) events: HashMap<u64, Clock>,
    pub(crate) host: Clock,
    shadow: HashMap<(Space, u64), Vec<Rec>>,
    pub(crate) execs: HashMap<usize, ExecClocks>,
    reports: Vec<String>,
    count: u64,
    /// Print each race to stderr as it is found (`races=print`).
    pub(crate) print: bool,
    /// No detection at all (`races=off`).
    pub(crate) off: bool,
}

impl Detector {
    /// Forgets everything (races included): what happened before is taken as ordered.
    pub(crate) fn clear(&mut self) {
        let (print, off) = (self.print, self.off);
        *self = Detector::default();
        (self.print, self.off) = (print, off);
    }

    /// Forgets the races found so far (the clocks and records stay).
    pub(crate) fn clear_reports(&mut self) {
        self.reports.clear();
        self.count = 0;
    }

    pub(crate) fn count(&self) -> u64 {
        self.count
    }

    pub(crate) fn reports(&self) -> &[String] {
        &self.reports
    }

    /// A fresh component.
    pub(crate) fn fresh(&mut self) -> Comp {
        if self.top.is_empty() {
            self.top.push(0); // the host's
        }
        self.top.push(0);
        (self.top.len() - 1) as Comp
    }

    /// Advances `clock` on `comp` (or, if the clock does not know `comp`'s latest event, on a
    /// fresh component, written back to `comp`): the new event's (component, tick).
    pub(crate) fn tick(&mut self, clock: &mut Clock, comp: &mut Comp) -> (Comp, u32) {
        if self.top.is_empty() {
            self.top.push(0);
        }
        if clock.get(*comp) != self.top[*comp as usize] {
            *comp = self.fresh();
        }
        let t = self.top[*comp as usize] + 1;
        self.top[*comp as usize] = t;
        clock.set(*comp, t);
        (*comp, t)
    }

    /// The clock of queue `key` (of context `ctx`) with what it must take in before new work:
    /// the host's knowledge and the legacy stream's implicit synchronisation. Creates the queue.
    pub(crate) fn enter(&mut self, key: Key, ctx: usize, blocking: bool) -> Clock {
        if !self.queues.contains_key(&key) {
            let comp = self.fresh();
            self.queues.insert(
                key,
                Queue {
                    comp,
                    ctx,
                    blocking,
                    clock: Clock::default(),
                },
            );
        }
        let mut clock = self.queues[&key].clock.clone();
        clock.join(&self.host);
        match key {
            Key::Legacy(c) => {
                for q in self.queues.values().filter(|q| q.ctx == c && q.blocking) {
                    clock.join(&q.clock);
                }
            }
            _ if blocking => {
                if let Some(l) = self.queues.get(&Key::Legacy(ctx)) {
                    clock.join(&l.clock);
                }
            }
            _ => {}
        }
        clock
    }

    /// Stores `clock` as queue `key`'s (entered before).
    pub(crate) fn store(&mut self, key: Key, clock: Clock) {
        if let Some(q) = self.queues.get_mut(&key) {
            q.clock = clock;
        }
    }

    /// Ticks queue `key`'s own component in `clock` (entered before).
    pub(crate) fn tick_queue(&mut self, key: Key, clock: &mut Clock) -> (Comp, u32) {
        let mut comp = self.queues[&key].comp;
        let e = self.tick(clock, &mut comp);
        if let Some(q) = self.queues.get_mut(&key) {
            q.comp = comp;
        }
        e
    }

    /// Queue `key`'s clock now (empty for a queue with no work).
    pub(crate) fn queue_clock(&self, key: Key) -> Clock {
        self.queues
            .get(&key)
            .map(|q| q.clock.clone())
            .unwrap_or_default()
    }

    /// The join of the clocks of every queue of context `ctx`.
    pub(crate) fn ctx_clock(&self, ctx: usize) -> Clock {
        let mut c = Clock::default();
        for q in self.queues.values().filter(|q| q.ctx == ctx) {
            c.join(&q.clock);
        }
        c
    }

    /// The host learns `clock` (a synchronisation returned).
    pub(crate) fn host_learns(&mut self, clock: &Clock) {
        self.host.join(clock);
    }

    /// A new event of the host: its clock and (component, tick).
    pub(crate) fn host_event(&mut self) -> (Clock, (Comp, u32)) {
        let mut host = std::mem::take(&mut self.host);
        let mut comp = HOST;
        let e = self.tick(&mut host, &mut comp);
        self.host = host.clone();
        (host, e)
    }

    /// Checks access `acc` (to the allocation at `base` of its space) made by `op` at `epoch`
    /// with `clock` against the earlier accesses of the range, records the races, and records
    /// the access.
    pub(crate) fn access(
        &mut self,
        base: u64,
        acc: Acc,
        clock: &Clock,
        epoch: (Comp, u32),
        op: Op,
    ) {
        if acc.len == 0 {
            return;
        }
        let (lo, hi) = (acc.ptr, acc.ptr.saturating_add(acc.len));
        let recs = self.shadow.entry((acc.space, base)).or_default();
        let mut found = Vec::new();
        for r in recs.iter() {
            let overlaps = r.lo < hi && lo < r.hi;
            if overlaps && r.kind.conflicts(acc.kind) && clock.get(r.comp) < r.tick {
                found.push(r.describe());
            }
        }
        // What the new access covers and happened after is implied by it (for a read, only
        // earlier reads: a later write must still see an earlier write it is not ordered after).
        recs.retain(|r| {
            let covered = lo <= r.lo && r.hi <= hi;
            let before = clock.get(r.comp) >= r.tick;
            let implied = acc.kind != Kind::Read || r.kind == Kind::Read;
            !(covered && before && implied)
        });
        recs.push(Rec {
            lo,
            hi,
            kind: acc.kind,
            comp: epoch.0,
            tick: epoch.1,
            op,
        });
        if found.is_empty() {
            return;
        }
        let new = Rec {
            lo,
            hi,
            kind: acc.kind,
            comp: epoch.0,
            tick: epoch.1,
            op,
        }
        .describe();
        for earlier in found {
            self.count += 1;
            let report = format!("{new} is not ordered after {earlier}");
            if self.print {
                use std::io::Write as _;
                let _ = writeln!(std::io::stderr(), "cuda-mock-driver: race: {report}");
            }
            if self.reports.len() < KEPT {
                self.reports.push(report);
            }
        }
    }

    /// Forgets the accesses of an allocation whose address may be reused (page-locked host
    /// memory, given back to the system allocator).
    pub(crate) fn forget(&mut self, space: Space, base: u64) {
        self.shadow.remove(&(space, base));
    }

    /// Forgets the accesses of a graph's reserved range that a launch allocates again (after
    /// checking the allocation as a write): a new lifetime of the memory.
    pub(crate) fn restart(&mut self, base: u64) {
        if let Some(recs) = self.shadow.get_mut(&(Space::Device, base)) {
            let last = recs.pop();
            recs.clear();
            recs.extend(last);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn op(call: &'static str) -> Op {
        Op {
            call,
            who: Who::Host,
        }
    }

    #[test]
    fn clocks_order_what_they_know() {
        let mut d = Detector::default();
        let (a, b) = (Key::Stream(0x10), Key::Stream(0x20));
        let mut ca = d.enter(a, 1, false);
        let ea = d.tick_queue(a, &mut ca);
        d.store(a, ca.clone());
        d.access(0, Acc::device(0, 4, Kind::Write), &ca, ea, op("w"));
        // b knows nothing of a: its read races.
        let mut cb = d.enter(b, 1, false);
        let eb = d.tick_queue(b, &mut cb);
        d.access(0, Acc::device(0, 4, Kind::Read), &cb, eb, op("r"));
        assert_eq!(d.count(), 1);
        assert!(d.reports()[0].starts_with("r (read of [0x0, 0x4) on the host)"));
        // After joining a's clock (an event), it does not.
        cb.join(&ca);
        let eb = d.tick_queue(b, &mut cb);
        d.access(0, Acc::device(0, 4, Kind::Read), &cb, eb, op("r2"));
        assert_eq!(d.count(), 1);
        // Two reads never race; a range elsewhere neither.
        let mut ca = d.enter(a, 1, false);
        let ea = d.tick_queue(a, &mut ca);
        d.access(0, Acc::device(0, 4, Kind::Read), &ca, ea, op("r3"));
        d.access(0, Acc::device(8, 4, Kind::Write), &ca, ea, op("w2"));
        assert_eq!(d.count(), 1);
    }

    #[test]
    fn a_free_conflicts_with_reads_and_a_tick_off_the_chain_takes_a_fresh_component() {
        let mut d = Detector::default();
        let a = Key::Stream(0x10);
        let mut ca = d.enter(a, 1, false);
        let ea = d.tick_queue(a, &mut ca);
        d.store(a, ca.clone());
        d.access(0, Acc::device(0, 64, Kind::Read), &ca, ea, op("r"));
        let (host, eh) = d.host_event();
        assert_eq!(eh.0, HOST);
        d.access(0, Acc::device(0, 64, Kind::Free), &host, eh, op("free"));
        assert_eq!(d.count(), 1);
        // A clock that missed the component's latest tick cannot continue its chain.
        let mut stale = Clock::default();
        let mut comp = ea.0;
        let (c, _) = d.tick(&mut stale, &mut comp);
        assert_ne!(c, ea.0);
    }
}
