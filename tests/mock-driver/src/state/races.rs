//! The race detector on the process-wide state: what each driver call does to the clocks and
//! which memory it touches. The model is `model/races.rs`; the exports call these at the point
//! where work is enqueued (never for work a capture records: that runs when a graph is launched,
//! through [`State::race_graph_launch`]).

use super::store::State;
use crate::model::device::DeviceWork;
use crate::model::graph::{Node, NodeKind};
use crate::model::races::{Acc, Clock, Comp, ExecClocks, Op, Who};
use crate::model::records::{Key, StreamRef};

const CU_STREAM_NON_BLOCKING: u32 = 1;

fn blocking(s: &StreamRef) -> bool {
    match s.key {
        Key::Stream(_) => s.flags & CU_STREAM_NON_BLOCKING == 0,
        Key::PerThread(..) => true,
        Key::Legacy(_) => false,
    }
}

impl State {
    /// Checks `accs`, made by `op` with `clock` at `epoch`, and records them.
    fn race_check(&mut self, accs: &[Acc], clock: &Clock, epoch: (Comp, u32), op: Op) {
        if self.races.off {
            return;
        }
        for acc in accs {
            if let Some(base) = self.device.base_of(acc) {
                self.races.access(base, *acc, clock, epoch, op);
            }
        }
    }

    /// New work `call` on `s` touching `accs`: the stream's clock advances.
    pub(crate) fn race_op(&mut self, s: StreamRef, call: &'static str, accs: &[Acc]) {
        if self.races.off {
            return;
        }
        let mut clock = self.races.enter(s.key, s.ctx, blocking(&s));
        let epoch = self.races.tick_queue(s.key, &mut clock);
        let op = Op {
            call,
            who: Who::Stream(s.key),
        };
        self.race_check(accs, &clock, epoch, op);
        self.races.store(s.key, clock);
    }

    /// [`race_op`](State::race_op) for a memset, copy or kernel about to be queued.
    pub(crate) fn race_work(&mut self, s: StreamRef, call: &'static str, work: &DeviceWork) {
        if self.races.off {
            return;
        }
        let accs = self.device.accesses(work);
        self.race_op(s, call, &accs);
    }

    /// An event record of `core` on `s`: the event stands for the stream's work so far.
    pub(crate) fn race_record(&mut self, s: StreamRef, core: u64) {
        if self.races.off {
            return;
        }
        let clock = self.races.enter(s.key, s.ctx, blocking(&s));
        self.races.events.insert(core, clock.clone());
        self.races.store(s.key, clock);
    }

    /// `s` waits for the event of `core`'s last record.
    pub(crate) fn race_wait(&mut self, s: StreamRef, core: u64) {
        if self.races.off {
            return;
        }
        let mut clock = self.races.enter(s.key, s.ctx, blocking(&s));
        if let Some(e) = self.races.events.get(&core) {
            clock.join(e);
        }
        self.races.store(s.key, clock);
    }

    /// What the host learns when a synchronisation of `s` returns (taken at the call).
    pub(crate) fn race_stream_clock(&self, s: StreamRef) -> Clock {
        self.races.queue_clock(s.key)
    }

    /// What the host learns when a synchronisation of the event of `core` returns.
    pub(crate) fn race_event_clock(&self, core: u64) -> Clock {
        self.races.events.get(&core).cloned().unwrap_or_default()
    }

    /// What the host learns when a synchronisation of context `ctx` returns.
    pub(crate) fn race_ctx_clock(&self, ctx: usize) -> Clock {
        self.races.ctx_clock(ctx)
    }

    /// A synchronisation returned: the host knows `clock`'s work completed.
    pub(crate) fn race_host_learns(&mut self, clock: &Clock) {
        if self.races.off {
            return;
        }
        self.races.host_learns(clock);
    }

    /// An access of the host (`cuMemFree`, `cuMemFreeHost`, or one a test declares), ordered
    /// after what the host knows.
    pub(crate) fn race_host_op(&mut self, call: &'static str, accs: &[Acc]) {
        if self.races.off {
            return;
        }
        let (clock, epoch) = self.races.host_event();
        let op = Op {
            call,
            who: Who::Host,
        };
        self.race_check(accs, &clock, epoch, op);
    }

    /// A launch of executable graph `exec` (its `nodes`) on `s`: after the stream's earlier work
    /// and the previous launch of `exec`; each node after its dependencies, on its lane; the
    /// stream's later work after every node.
    pub(crate) fn race_graph_launch(&mut self, s: StreamRef, exec: usize, nodes: &[Node]) {
        if self.races.off {
            return;
        }
        let mut start = self.races.enter(s.key, s.ctx, blocking(&s));
        let mut lanes = match self.races.execs.remove(&exec) {
            Some(e) => {
                start.join(&e.last_end);
                e.lanes
            }
            None => Vec::new(),
        };
        let mut clocks: Vec<Clock> = Vec::with_capacity(nodes.len());
        let mut end = start.clone();
        for (i, n) in nodes.iter().enumerate() {
            let mut c = start.clone();
            for &d in &n.deps {
                if let Some(dc) = clocks.get(d) {
                    c.join(dc);
                }
            }
            if let NodeKind::EventWait(core) = n.kind {
                if let Some(e) = self.races.events.get(&core) {
                    c.join(e);
                }
            }
            while lanes.len() <= n.lane {
                let fresh = self.races.fresh();
                lanes.push(fresh);
            }
            let mut comp = lanes[n.lane];
            let epoch = self.races.tick(&mut c, &mut comp);
            lanes[n.lane] = comp;
            match &n.kind {
                NodeKind::Device(work) => {
                    let accs = self.device.accesses(work);
                    let op = Op {
                        call: node_call(work),
                        who: Who::Node {
                            exec,
                            node: i as u32,
                            stream: s.key,
                        },
                    };
                    self.race_check(&accs, &c, epoch, op);
                    if let DeviceWork::GraphAlloc { ptr } = work {
                        self.races.restart(*ptr);
                    }
                }
                NodeKind::EventRecord(core) => {
                    self.races.events.insert(*core, c.clone());
                }
                _ => {}
            }
            end.join(&c);
            clocks.push(c);
        }
        self.races.store(s.key, end.clone());
        self.races.execs.insert(
            exec,
            ExecClocks {
                lanes,
                last_end: end,
            },
        );
    }
}

/// The driver call a captured node stands for, as a race report names it.
fn node_call(work: &DeviceWork) -> &'static str {
    match work {
        DeviceWork::Memset { width: 1, .. } => "cuMemsetD8Async",
        DeviceWork::Memset { width: 2, .. } => "cuMemsetD16Async",
        DeviceWork::Memset { .. } => "cuMemsetD32Async",
        DeviceWork::CopyDtoD { .. } => "cuMemcpyDtoDAsync",
        DeviceWork::CopyHtoD { .. } | DeviceWork::CopyHtoDAt { .. } => "cuMemcpyHtoDAsync",
        DeviceWork::CopyDtoH { .. } => "cuMemcpyDtoHAsync",
        DeviceWork::Pinned { to_host: true, .. } => "cuMemcpyDtoHAsync",
        DeviceWork::Pinned { .. } => "cuMemcpyHtoDAsync",
        DeviceWork::Free { .. } => "cuMemFreeAsync",
        DeviceWork::GraphAlloc { .. } => "cuMemAllocAsync",
        DeviceWork::Kernel { .. } => "cuLaunchKernel",
        DeviceWork::External { name, .. } => name,
    }
}
