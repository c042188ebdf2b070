//! Generating a random program from a seed: objects first, then operations chosen among those
//! whose objects exist at that point of the program (a buffer allocated and not yet dropped, a
//! stream not dropped, an executable graph captured), each on a random thread, with the rules
//! that keep every value well defined and the exclusions of [`KNOWN_HOLES`](super::KNOWN_HOLES).

use super::program::*;
pub use super::rng::Rng;
use super::{Config, Hole};

/// The pools' cache limits a program may run with: no block kept, one small block, no limit.
const CACHE_LIMITS: [u64; 3] = [0, 1024, u64::MAX];

/// What the generator knows of a buffer slot.
#[derive(Debug, Clone, Default)]
struct BufState {
    alive: bool,
    borrowed: bool,
    /// A `ManagedBuffer`: kept out of captures and peer copies, dropped (not freed or handed
    /// over), and read and written by the host.
    managed: bool,
    /// The streams of its recorded uses that a fork of a capture of that stream could not wait
    /// for (the last write's, and the reads' since), as far as the generator can tell.
    write_on: Option<usize>,
    reads_on: Vec<usize>,
    /// Which allocation of the slot this is.
    generation: u64,
    /// The stream slots it was used on (at the top level).
    streams: Vec<usize>,
    /// A use of it may be covered by the context's completion only (a failed record, a stream
    /// that ended where nothing marks its end).
    lost: bool,
}

/// What the generator knows of an executable graph: its context, and the buffer slots its graph
/// holds with the allocation each held when captured.
type ExecState = (usize, Vec<(usize, u64)>);

/// A stream that is no slot (a scope's fork, a borrow's owner).
const NO_SLOT: usize = usize::MAX;

struct Gen<'c> {
    rng: Rng,
    cfg: &'c Config,
    p: Program,
    stream_alive: Vec<bool>,
    bufs: Vec<BufState>,
    /// Each executable graph slot: its context and the buffer slots its graph holds, if it
    /// exists.
    execs: Vec<Option<ExecState>>,
}

impl Gen<'_> {
    fn excluded(&self, h: Hole) -> bool {
        self.cfg.excluded.contains(&h)
    }

    fn val(&mut self) -> u32 {
        (self.rng.next_u64() as u32) | 1
    }

    fn streams_where(&self, f: impl Fn(usize, &StreamSpec) -> bool) -> Vec<usize> {
        (0..self.p.streams.len())
            .filter(|&s| self.stream_alive[s] && f(s, &self.p.streams[s]))
            .collect()
    }

    fn bufs_where(&self, f: impl Fn(usize, &BufState) -> bool) -> Vec<usize> {
        (0..self.bufs.len())
            .filter(|&b| self.bufs[b].alive && f(b, &self.bufs[b]))
            .collect()
    }

    fn ctx_of(&self, s: usize) -> usize {
        self.p.streams[s].ctx
    }

    /// Records a top-level use of `b` on stream `s` (`NO_SLOT` for none of the slots).
    fn used(&mut self, b: usize, s: usize, write: bool) {
        let st = &mut self.bufs[b];
        if !st.streams.contains(&s) {
            st.streams.push(s);
        }
        if write {
            st.write_on = Some(s);
            st.reads_on.clear();
        } else if !st.reads_on.contains(&s) {
            st.reads_on.push(s);
        }
    }

    /// `to_vec`, `copy_from_host` on `s`: the buffer's uses there are complete.
    fn completed_on(&mut self, b: usize, s: usize) {
        let st = &mut self.bufs[b];
        if st.write_on == Some(s) {
            st.write_on = None;
        }
        st.reads_on.retain(|&r| r != s);
    }

    /// Whether a fork of a capture of `s` may use `b` (`write`) without the refusal of a use
    /// whose earlier conflicting use is on the capturing stream.
    fn fork_may_use(&self, b: usize, s: usize, write: bool) -> bool {
        let st = &self.bufs[b];
        st.write_on != Some(s) && !(write && st.reads_on.contains(&s))
    }

    fn act(
        &mut self,
        ctx: usize,
        pick: &mut dyn FnMut(&mut Self, bool) -> Option<Buf>,
    ) -> Option<Act> {
        Some(match self.rng.below(12) {
            0..=2 => Act::Fill {
                b: pick(self, true)?,
                v: self.val(),
            },
            11 => Act::FillHalves {
                b: pick(self, true)?,
                v: self.val(),
                high_first: self.rng.chance(1, 2),
            },
            3 | 4 => {
                let src = pick(self, false)?;
                let dst = pick(self, true).filter(|d| *d != src)?;
                Act::Copy { dst, src }
            }
            5..=7 => {
                let dst = pick(self, true)?;
                let k = match self.rng.below(3) {
                    0 => Kern::Set(self.val()),
                    1 => Kern::Add(self.val()),
                    _ => Kern::Scale(self.val(), self.val()),
                };
                let src = match k {
                    Kern::Set(_) => None,
                    _ => Some(pick(self, false).filter(|s| *s != dst)?),
                };
                Act::Kernel { k, dst, src }
            }
            8 if self.cfg.devices > 1 => {
                let dst = pick(self, true)?;
                // Managed memory is no pool memory a peer was granted: no peer copies of it.
                if let Buf::Slot(d) = dst {
                    if self.bufs[d].managed {
                        return None;
                    }
                }
                let other = 1 - ctx;
                let src = self
                    .rng
                    .pick(&self.bufs_where(|b, st| self.p.buffers[b] == other && !st.managed))?;
                if self.rng.chance(1, 2) {
                    Act::Peer {
                        dst,
                        src: Buf::Slot(src),
                    }
                } else {
                    // The other way: this stream's context is the source's.
                    let Buf::Slot(d) = dst else { return None };
                    Act::Peer {
                        dst: Buf::Slot(src),
                        src: Buf::Slot(d),
                    }
                }
            }
            9 => Act::KeepAlive {
                b: pick(self, true)?,
            },
            _ => Act::HostFn,
        })
    }

    /// Work on stream `s` on buffer slots (top level, or a scope's body).
    fn slot_act(&mut self, s: usize) -> Option<Act> {
        let ctx = self.ctx_of(s);
        let mut pick = |g: &mut Self, _write: bool| {
            let c = g.bufs_where(|b, _| g.p.buffers[b] == ctx);
            g.rng.pick(&c).map(Buf::Slot)
        };
        self.act(ctx, &mut pick)
    }

    fn note_act(&mut self, s: usize, act: &Act) {
        for (b, w) in act.buffers() {
            self.used(b, s, w);
        }
    }

    fn capture(&mut self, thread: usize) -> Option<OpKind> {
        let s = self
            .rng
            .pick(&self.streams_where(|_, sp| sp.kind.owned()))?;
        let ctx = self.ctx_of(s);
        let exec = self.rng.below(self.p.execs);
        let mode = match self.rng.below(3) {
            0 if self.p.threads == 1 => Mode::Global,
            0 | 1 => Mode::ThreadLocal,
            _ => Mode::Relaxed,
        };
        let forks = self.rng.below(3) as u8;
        let graph_buffers = if self.cfg.pools[ctx] {
            self.rng.below(3)
        } else {
            0
        };
        let mut pre = Vec::new();
        let mut scoped = Vec::new();
        let mut post = Vec::new();
        for g in 0..graph_buffers {
            let zeroed = self.rng.chance(1, 2);
            pre.push(Step {
                lane: 0,
                act: CapAct::GraphAlloc { g, zeroed },
            });
        }
        // Buffer slots the scope writes on one lane (hole 8: no other lane may use them).
        let mut lane_of: Vec<(usize, u8, bool)> = Vec::new();
        let mut dropped: Vec<usize> = Vec::new();
        let parts = [
            (0u8, self.rng.below(4)),
            (forks, self.rng.below(6)),
            (0, self.rng.below(3)),
        ];
        for (part, (lanes, n)) in parts.into_iter().enumerate() {
            for _ in 0..n {
                let lane = if part == 1 {
                    self.rng.below(lanes as usize + 1) as u8
                } else {
                    0
                };
                let step = if part != 1
                    && self.rng.chance(1, 10)
                    && !self.excluded(Hole::LazyMarkInCapture)
                {
                    // Hole 1: work outside the capture from inside the closure, or a drop.
                    if self.rng.chance(1, 2) {
                        let t = self
                            .rng
                            .pick(&self.streams_where(|t, sp| t != s && sp.ctx == ctx))?;
                        let act = self.slot_act(t)?;
                        if act.buffers().iter().any(|(b, _)| {
                            dropped.contains(b) || self.bufs[*b].borrowed || self.bufs[*b].managed
                        }) {
                            continue;
                        }
                        CapAct::Outside { s: t, act }
                    } else {
                        let b = self.rng.pick(&self.bufs_where(|b, st| {
                            !st.borrowed && !st.managed && !dropped.contains(&b)
                        }))?;
                        dropped.push(b);
                        CapAct::DropInside { b }
                    }
                } else {
                    let held = graph_buffers;
                    let mut pick = |g: &mut Self, write: bool| -> Option<Buf> {
                        if held > 0 && g.rng.chance(1, 3) {
                            return Some(Buf::Graph(g.rng.below(held)));
                        }
                        let c = g.bufs_where(|b, st| {
                            g.p.buffers[b] == ctx
                                && !st.borrowed
                                && !st.managed
                                && !dropped.contains(&b)
                                && (lane == 0 || g.fork_may_use(b, s, write))
                        });
                        g.rng.pick(&c).map(Buf::Slot)
                    };
                    let act = self.act(ctx, &mut pick)?;
                    if matches!(act, Act::Peer { .. }) && self.excluded(Hole::ReplayedPeerCopy) {
                        continue;
                    }
                    // A peer copy's source is picked from the other context, past `pick`: no
                    // step uses a slot an earlier step dropped.
                    if act.buffers().iter().any(|(b, _)| dropped.contains(b)) {
                        continue;
                    }
                    if part == 1 && self.excluded(Hole::ForkConflicts) {
                        let mut ok = true;
                        for (b, w) in act.buffers() {
                            for &(b2, l2, w2) in &lane_of {
                                if b2 == b && l2 != lane && (w || w2) {
                                    ok = false;
                                }
                            }
                        }
                        if !ok {
                            continue;
                        }
                        for (b, w) in act.buffers() {
                            lane_of.push((b, lane, w));
                        }
                    }
                    CapAct::Act(act)
                };
                let st = Step { lane, act: step };
                match part {
                    0 => pre.push(st),
                    1 => scoped.push(st),
                    _ => post.push(st),
                }
            }
        }
        if graph_buffers > 0 && self.rng.chance(1, 2) {
            post.push(Step {
                lane: 0,
                act: CapAct::GraphFree { g: 0 },
            });
        }
        // The graph holds every slot its steps touch; outside work takes effect now.
        let mut held = Vec::new();
        for st in pre.iter().chain(&scoped).chain(&post) {
            match &st.act {
                CapAct::Act(a) => held.extend(a.buffers().into_iter().map(|(b, _)| b)),
                CapAct::Outside { s: t, act } => {
                    let act = act.clone();
                    self.note_act(*t, &act);
                }
                _ => {}
            }
        }
        held.sort_unstable();
        held.dedup();
        for b in &dropped {
            self.bufs[*b].alive = false;
        }
        let held = held
            .into_iter()
            .map(|b| (b, self.bufs[b].generation))
            .collect();
        self.execs[exec] = Some((ctx, held));
        // Hole 2: a capture on one thread, work on another thread on a buffer last used on the
        // captured stream: ordered after each other when the hole is excluded.
        let serialize = if self.p.threads > 1 && self.excluded(Hole::OtherThreadsCapture) {
            (0..self.bufs.len()).collect()
        } else {
            Vec::new()
        };
        let _ = thread;
        Some(OpKind::Capture {
            s,
            mode,
            exec,
            forks,
            graph_buffers,
            pre,
            scoped,
            post,
            serialize,
        })
    }

    /// One operation for `thread` (`None`: the choice did not fit; try another).
    fn op(&mut self, thread: usize) -> Option<(OpKind, bool)> {
        let n_streams = self.p.streams.len();
        let any_stream = |g: &mut Self| g.rng.pick(&g.streams_where(|_, _| true));
        let kind = match self.rng.below(40) {
            0..=3 => {
                let b = self.rng.pick(
                    &(0..self.bufs.len())
                        .filter(|&b| !self.bufs[b].alive)
                        .collect::<Vec<_>>(),
                )?;
                let ctx = self.p.buffers[b];
                if self.cfg.borrow && self.rng.chance(1, 6) {
                    self.bufs[b] = BufState {
                        alive: true,
                        borrowed: true,
                        write_on: Some(NO_SLOT),
                        generation: self.bufs[b].generation + 1,
                        ..BufState::default()
                    };
                    return Some((OpKind::Borrow { b, v: self.val() }, false));
                }
                let s = self.rng.pick(&self.streams_where(|_, sp| sp.ctx == ctx))?;
                let pool = self.cfg.pools[ctx];
                if self.rng.chance(1, 8) {
                    self.bufs[b] = BufState {
                        alive: true,
                        managed: true,
                        write_on: Some(NO_SLOT),
                        streams: vec![s],
                        generation: self.bufs[b].generation + 1,
                        ..BufState::default()
                    };
                    return Some((
                        OpKind::Alloc {
                            b,
                            how: AllocHow::Managed,
                            s,
                        },
                        false,
                    ));
                }
                let how = match self.rng.below(6) {
                    0 => AllocHow::Unordered,
                    1 => AllocHow::AllocOn,
                    2 if pool => AllocHow::AllocIn,
                    3 => AllocHow::Zeroed,
                    4 if pool => AllocHow::ZeroedIn,
                    _ => AllocHow::FromHost(self.val()),
                };
                self.bufs[b] = BufState {
                    alive: true,
                    write_on: Some(if how == AllocHow::Unordered {
                        NO_SLOT
                    } else {
                        s
                    }),
                    streams: vec![s],
                    generation: self.bufs[b].generation + 1,
                    ..BufState::default()
                };
                OpKind::Alloc { b, how, s }
            }
            4..=14 => {
                let s = any_stream(self)?;
                let act = self.slot_act(s)?;
                self.note_act(s, &act);
                // (A fill through two views is two calls: a fault between them leaves the halves
                // apart, which no read of one value describes.)
                let two_calls = matches!(act, Act::FillHalves { .. });
                if self.cfg.faults && self.p.threads == 1 && !two_calls && self.rng.chance(1, 40) {
                    for (b, _) in act.buffers() {
                        self.bufs[b].lost = true;
                    }
                    return Some((OpKind::FaultyAct { s, act }, false));
                }
                OpKind::Act { s, act }
            }
            15 | 16 => {
                let b = self.rng.pick(&self.bufs_where(|_, _| true))?;
                let s = self
                    .rng
                    .pick(&self.streams_where(|_, sp| sp.ctx == self.p.buffers[b]))?;
                self.used(b, s, true);
                self.completed_on(b, s);
                OpKind::CopyFromHost {
                    b,
                    s,
                    v: self.val(),
                }
            }
            17..=19 => {
                let b = self.rng.pick(&self.bufs_where(|_, _| true))?;
                let s = self
                    .rng
                    .pick(&self.streams_where(|_, sp| sp.ctx == self.p.buffers[b]))?;
                self.used(b, s, false);
                self.completed_on(b, s);
                OpKind::ToVec {
                    b,
                    s,
                    into_slice: self.rng.chance(1, 3),
                }
            }
            20 | 21 if self.p.pinned > 0 => {
                let b = self.rng.pick(&self.bufs_where(|_, _| true))?;
                let s = self
                    .rng
                    .pick(&self.streams_where(|_, sp| sp.ctx == self.p.buffers[b]))?;
                let p = self.rng.below(self.p.pinned);
                let to = self.rng.chance(1, 2);
                self.used(b, s, !to);
                if to {
                    OpKind::ToPinned { b, p, s }
                } else {
                    OpKind::FromPinned { b, p, s }
                }
            }
            22 | 23 if self.rng.chance(1, 2) => {
                let b = self.rng.pick(&self.bufs_where(|_, st| st.managed))?;
                // The host waits for every recorded use: whatever came before on any stream.
                self.bufs[b].write_on = None;
                self.bufs[b].reads_on.clear();
                if self.rng.chance(1, 2) {
                    OpKind::ManagedWrite { b, v: self.val() }
                } else {
                    OpKind::ManagedRead { b }
                }
            }
            22 if self.p.pinned > 0 => OpKind::PinnedWrite {
                p: self.rng.below(self.p.pinned),
                v: self.val(),
            },
            23 if self.p.pinned > 0 => OpKind::PinnedRead {
                p: self.rng.below(self.p.pinned),
            },
            24 | 25 => {
                let b = self.rng.pick(&self.bufs_where(|_, st| !st.borrowed))?;
                self.bufs[b].alive = false;
                if self.bufs[b].managed {
                    return Some((OpKind::Drop { b }, false));
                }
                let lost = self.bufs[b].lost && self.excluded(Hole::IntoRawFailure);
                match self.rng.below(6) {
                    0 => OpKind::Free { b },
                    1 if !lost => OpKind::IntoRaw { b },
                    2 if self.cfg.faults
                        && self.p.threads == 1
                        && !self.excluded(Hole::IntoRawFailure) =>
                    {
                        // Handed over if no use needed a wait, else back with the error: either
                        // way not used again (a later allocation of the slot, or the teardown,
                        // drops what came back, after its uses).
                        OpKind::IntoRawFails { b }
                    }
                    _ => OpKind::Drop { b },
                }
            }
            26 => {
                let b = self.rng.pick(&self.bufs_where(|_, st| st.borrowed))?;
                self.bufs[b].alive = false;
                OpKind::Release { b }
            }
            27 => OpKind::Sync {
                s: any_stream(self)?,
            },
            28 => match self.rng.below(4) {
                0 => OpKind::Query {
                    s: any_stream(self)?,
                },
                1 => OpKind::EventSync {
                    s: any_stream(self)?,
                },
                2 => OpKind::Completion {
                    s: any_stream(self)?,
                },
                _ => OpKind::CtxSync {
                    ctx: self.rng.below(self.cfg.devices),
                },
            },
            29 => {
                let s = any_stream(self)?;
                let ctx = self.ctx_of(s);
                let other = self
                    .rng
                    .pick(&self.streams_where(|o, sp| o != s && sp.ctx == ctx))?;
                OpKind::WaitStream { s, other }
            }
            30 | 31 => {
                let s = self.rng.below(n_streams);
                if !self.p.streams[s].kind.owned() {
                    return None;
                }
                if !self.stream_alive[s] {
                    self.stream_alive[s] = true;
                    return Some((OpKind::NewStream { s }, false));
                }
                self.stream_alive[s] = false;
                if self.p.streams[s].kind == StreamKind::Owned && self.rng.chance(1, 3) {
                    let into_raw = self.rng.chance(1, 2);
                    if into_raw {
                        // Its uses are covered by the context's completion only now (a lost
                        // end): `into_raw` of such a buffer fails, and forgets them (hole 4).
                        for b in 0..self.bufs.len() {
                            if self.bufs[b].streams.contains(&s) {
                                self.bufs[b].lost = true;
                            }
                        }
                    }
                    match self.rng.pick(&self.streams_where(|_, _| true)) {
                        Some(on) => OpKind::DropStreamInHostFn { s, on, into_raw },
                        None => OpKind::DropStream { s },
                    }
                } else {
                    OpKind::DropStream { s }
                }
            }
            32 | 33 => {
                let s = any_stream(self)?;
                let forks = 1 + self.rng.below(2) as u8;
                let mut body = Vec::new();
                for _ in 0..1 + self.rng.below(5) {
                    let lane = self.rng.below(forks as usize + 1) as u8;
                    if let Some(act) = self.slot_act(s) {
                        // A fork is a stream of the context's pool, no slot.
                        let on = if lane == 0 { s } else { NO_SLOT };
                        self.note_act(on, &act);
                        body.push(Step { lane, act });
                    }
                }
                OpKind::Scope { s, forks, body }
            }
            34 | 35 => self.capture(thread)?,
            36..=38 => {
                let exec = self.rng.below(self.p.execs);
                let (ctx, held) = self.execs[exec].clone()?;
                let s = self.rng.pick(&self.streams_where(|_, sp| sp.ctx == ctx))?;
                for (b, generation) in held {
                    if self.bufs[b].alive && self.bufs[b].generation == generation {
                        self.used(b, s, true);
                    }
                }
                OpKind::Replay { exec, s }
            }
            _ => {
                let exec = self.rng.below(self.p.execs);
                self.execs[exec].take()?;
                OpKind::DropExec { exec }
            }
        };
        Some((kind, true))
    }
}

/// A program for `seed`.
pub fn generate(seed: u64, cfg: &Config) -> Program {
    let mut rng = Rng::new(seed);
    let threads = 1 + rng.below(cfg.max_threads);
    let len = cfg.lens[rng.below(cfg.lens.len())];
    let mut streams = Vec::new();
    for _ in 0..3 + rng.below(4) {
        let ctx = if cfg.devices > 1 && rng.chance(1, 3) {
            1
        } else {
            0
        };
        let kind = match rng.below(10) {
            0..=3 => StreamKind::Owned,
            4 | 5 => StreamKind::Pooled,
            6 | 7 => StreamKind::Borrowed,
            8 => StreamKind::Legacy,
            _ => StreamKind::PerThread,
        };
        streams.push(StreamSpec { kind, ctx });
    }
    // A stream of each context.
    for ctx in 0..cfg.devices {
        if !streams.iter().any(|s| s.ctx == ctx) {
            streams.push(StreamSpec {
                kind: StreamKind::Owned,
                ctx,
            });
        }
    }
    let buffers: Vec<usize> = (0..3 + rng.below(4))
        .map(|_| {
            if cfg.devices > 1 && rng.chance(1, 3) {
                1
            } else {
                0
            }
        })
        .collect();
    let n_ops = cfg.ops.0 + rng.below(cfg.ops.1 - cfg.ops.0 + 1);
    let n_streams = streams.len();
    let n_bufs = buffers.len();
    let mut g = Gen {
        rng,
        cfg,
        p: Program {
            seed,
            threads,
            len,
            streams,
            buffers,
            pinned: 2,
            execs: 2,
            ops: Vec::new(),
            to_vec_exclusive: cfg.excluded.contains(&Hole::CompletedOn),
            drops_exclusive: cfg.excluded.contains(&Hole::StreamEndDuringFree),
            captures_alone: cfg.captures_alone,
            cache_limit: 0,
        },
        stream_alive: vec![true; n_streams],
        bufs: vec![BufState::default(); n_bufs],
        execs: vec![None; 2],
    };
    g.p.cache_limit = CACHE_LIMITS[g.rng.below(CACHE_LIMITS.len())];
    let mut tries = 0;
    while g.p.ops.len() < n_ops && tries < n_ops * 20 {
        tries += 1;
        let thread = g.rng.below(threads);
        let before = (g.stream_alive.clone(), g.bufs.clone(), g.execs.clone());
        let Some((kind, can_loose)) = g.op(thread) else {
            (g.stream_alive, g.bufs, g.execs) = before;
            continue;
        };
        g.p.ops.push(Op {
            thread,
            kind,
            loose: false,
        });
        let i = g.p.ops.len() - 1;
        if can_loose && g.rng.chance(1, 3) {
            g.p.ops[i].loose = g.p.loose_ok(i, g.excluded(Hole::CompletedOn));
        }
    }
    g.p
}
