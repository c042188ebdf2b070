//! The process-wide [`State`]: contexts, streams, events, failure rules and counters, and how
//! handles resolve.

use std::collections::{HashMap, VecDeque};
use std::io::Write as _;
use std::thread::ThreadId;

use cuda_stream_sys::{CUresult, CUstream};

use super::threads::current;
use crate::base::config::{
    CONFIG_VAR, Config, DEFAULT_DEVICES, MAX_DEVICES, RaceMode, Rule, parse_config,
};
use crate::base::flavour::DEFAULT_VERSION;
use crate::model::device::{self, DeviceState};
use crate::model::graph::Graphs;
use crate::model::jobs::Job;
use crate::model::races::Detector;
use crate::model::records::{Core, Counters, Ctx, Key, Object, StreamRef, new_address};

#[derive(Debug)]
pub(crate) struct State {
    pub(crate) initialized: bool,
    pub(crate) version: i32,
    pub(crate) devices: usize,
    /// The configuration `CUDA_MOCK_CONFIG` asked for; `cuda_mock_reset` returns to it.
    pub(crate) baseline: Config,
    pub(crate) rules: Vec<Rule>,
    pub(crate) calls: HashMap<&'static str, u64>,
    pub(crate) counters: Counters,
    pub(crate) live_streams: u64,
    pub(crate) live_events: u64,
    pub(crate) ctxs: Vec<Ctx>,
    pub(crate) objects: HashMap<usize, Object>,
    pub(crate) cores: HashMap<u64, Core>,
    next_id: u64,
    per_thread_ids: HashMap<(ThreadId, usize), u64>,
    pub(crate) queue: VecDeque<Job>,
    pub(crate) next_seq: u64,
    /// Every job up to this one has finished (jobs finish in order: there is one worker).
    pub(crate) completed: u64,
    /// The last job of each queue, and of each context.
    pub(crate) last_job: HashMap<Key, u64>,
    pub(crate) ctx_last_job: HashMap<usize, u64>,
    pub(crate) worker_started: bool,
    /// Modules, kernels and memory (`model/device.rs`).
    pub(crate) device: DeviceState,
    /// Captures, graphs, executable graphs and user objects (`model/capture.rs`, `model/graph.rs`).
    pub(crate) graphs: Graphs,
    /// Peer access enabled: (context, peer context), until the context is released.
    pub(crate) peers: Vec<(usize, usize)>,
    /// The race detector (`model/races.rs`, `state/races.rs`).
    pub(crate) races: Detector,
}

impl State {
    pub(crate) fn new() -> State {
        let baseline = match std::env::var(CONFIG_VAR) {
            Ok(spec) => parse_config(&spec).unwrap_or_else(|e| {
                // A misconfigured test must not run on silently.
                let _ = writeln!(std::io::stderr(), "cuda-mock-driver: {CONFIG_VAR}: {e}");
                std::process::abort();
            }),
            Err(_) => Config::default(),
        };
        let ctxs = (0..MAX_DEVICES)
            .map(|d| Ctx {
                handle: new_address(),
                device: d as i32,
                refs: 0,
            })
            .collect();
        let mut st = State {
            initialized: false,
            version: DEFAULT_VERSION,
            devices: DEFAULT_DEVICES,
            baseline: Config::default(),
            rules: Vec::new(),
            calls: HashMap::new(),
            counters: Counters::default(),
            live_streams: 0,
            live_events: 0,
            ctxs,
            objects: HashMap::new(),
            cores: HashMap::new(),
            next_id: 1000,
            per_thread_ids: HashMap::new(),
            queue: VecDeque::new(),
            next_seq: 1,
            completed: 0,
            last_job: HashMap::new(),
            ctx_last_job: HashMap::new(),
            worker_started: false,
            device: Default::default(),
            graphs: Graphs::default(),
            peers: Vec::new(),
            races: Detector::default(),
        };
        st.baseline = baseline;
        st.reset();
        // A property of the devices, which drivers' clients ask once: kept across resets.
        st.set_pools(st.baseline.pools.unwrap_or(true));
        st
    }

    /// Back to the `CUDA_MOCK_CONFIG` configuration, with zeroed counters; handles, contexts,
    /// queued host functions and which devices have memory pools are untouched.
    pub(crate) fn reset(&mut self) {
        self.rules = self.baseline.rules.clone();
        self.version = self.baseline.version.unwrap_or(DEFAULT_VERSION);
        self.devices = self.baseline.devices.unwrap_or(DEFAULT_DEVICES);
        self.calls.clear();
        self.counters = Counters::default();
        self.races.clear();
        self.set_races(self.baseline.races.unwrap_or_default());
    }

    fn set_races(&mut self, mode: RaceMode) {
        self.races.print = mode == RaceMode::Print;
        self.races.off = mode == RaceMode::Off;
    }

    /// Every device with memory pools, or none.
    fn set_pools(&mut self, supported: bool) {
        self.device.pools.unsupported = if supported {
            Vec::new()
        } else {
            (0..MAX_DEVICES as i32).collect()
        };
    }

    pub(crate) fn apply(&mut self, cfg: Config) {
        self.rules.extend(cfg.rules);
        if let Some(v) = cfg.version {
            self.version = v;
        }
        if let Some(n) = cfg.devices {
            self.devices = n;
        }
        if let Some(p) = cfg.pools {
            self.set_pools(p);
        }
        if let Some(m) = cfg.races {
            self.set_races(m);
        }
    }

    /// Counts a call of `symbol` against the rules; the first rule that fires gives the code.
    pub(crate) fn injected_failure(&mut self, symbol: &str) -> Option<CUresult> {
        let mut fired = None;
        for r in self.rules.iter_mut().filter(|r| r.symbol == symbol) {
            r.seen += 1;
            let fires = r.nth.is_none_or(|n| n == r.seen);
            if fires && fired.is_none() {
                fired = Some(r.code);
            }
        }
        fired
    }

    pub(crate) fn next_id(&mut self) -> u64 {
        self.next_id += 1;
        self.next_id
    }

    pub(crate) fn new_handle(&mut self, obj: Object) -> usize {
        let h = new_address();
        self.objects.insert(h, obj);
        h
    }

    pub(crate) fn ctx(&self, handle: usize) -> Option<&Ctx> {
        self.ctxs.iter().find(|c| c.handle == handle)
    }

    pub(crate) fn device_ctx(&mut self, device: i32) -> Option<&mut Ctx> {
        let n = self.devices;
        self.ctxs
            .iter_mut()
            .find(|c| c.device == device && (c.device as usize) < n)
    }

    /// The calling thread's current context, which must be an active one.
    pub(crate) fn current_ctx(&self) -> Result<usize, CUresult> {
        let h = current().ok_or(CUresult::CUDA_ERROR_INVALID_CONTEXT)?;
        match self.ctx(h) {
            Some(c) if c.refs > 0 => Ok(h),
            Some(_) => Err(CUresult::CUDA_ERROR_CONTEXT_IS_DESTROYED),
            None => Err(CUresult::CUDA_ERROR_INVALID_CONTEXT),
        }
    }

    pub(crate) fn ctx_device(&self, ctx: usize) -> i32 {
        self.ctx(ctx).map_or(-1, |c| c.device)
    }

    /// Resolves a stream handle; 0x0 (the NULL stream), 0x1 (`CU_STREAM_LEGACY`) and 0x2
    /// (`CU_STREAM_PER_THREAD`) go through the calling thread's current context. An unknown or
    /// destroyed handle is counted as a bad use.
    pub(crate) fn stream(&mut self, h: CUstream) -> Result<StreamRef, CUresult> {
        let addr = h as usize;
        if addr <= 2 {
            let ctx = self.current_ctx()?;
            let id_base = 1 + 2 * self.ctx_device(ctx) as u64;
            return Ok(if addr == 2 {
                let tid = std::thread::current().id();
                let id = match self.per_thread_ids.get(&(tid, ctx)) {
                    Some(id) => *id,
                    None => {
                        let id = self.next_id();
                        self.per_thread_ids.insert((tid, ctx), id);
                        id
                    }
                };
                StreamRef {
                    key: Key::PerThread(ctx, tid),
                    ctx,
                    flags: 0,
                    priority: 0,
                    id,
                }
            } else {
                StreamRef {
                    key: Key::Legacy(ctx),
                    ctx,
                    flags: 0,
                    priority: 0,
                    id: id_base,
                }
            });
        }
        match self.objects.get(&addr) {
            Some(Object::Stream(s)) if s.alive => Ok(StreamRef {
                key: Key::Stream(addr),
                ctx: s.ctx,
                flags: s.flags,
                priority: s.priority,
                id: s.id,
            }),
            _ => {
                self.counters.bad_uses += 1;
                Err(CUresult::CUDA_ERROR_INVALID_HANDLE)
            }
        }
    }

    /// Resolves an event handle; an unknown or destroyed one is counted as a bad use.
    pub(crate) fn event(&mut self, h: usize) -> Result<(usize, u32, u64), CUresult> {
        match self.objects.get(&h) {
            Some(Object::Event(e)) if e.alive => Ok((e.ctx, e.flags, e.core)),
            _ => {
                self.counters.bad_uses += 1;
                Err(CUresult::CUDA_ERROR_INVALID_HANDLE)
            }
        }
    }

    /// Whether a queue's work has all run.
    pub(crate) fn idle(&self, key: Key) -> bool {
        self.last_job.get(&key).is_none_or(|&s| s <= self.completed)
    }

    pub(crate) fn pending_jobs(&self) -> u64 {
        self.next_seq - 1 - self.completed
    }

    /// Releases one reference to a primary context; at zero the context is destroyed, and every
    /// stream and event still alive in it with it (each counted as an orphan).
    pub(crate) fn release_ctx(&mut self, device: i32) -> Result<(), CUresult> {
        let Some(c) = self.device_ctx(device) else {
            return Err(CUresult::CUDA_ERROR_INVALID_DEVICE);
        };
        if c.refs == 0 {
            self.counters.bad_destroys += 1;
            return Err(CUresult::CUDA_ERROR_INVALID_CONTEXT);
        }
        c.refs -= 1;
        if c.refs > 0 {
            return Ok(());
        }
        let handle = c.handle;
        self.peers.retain(|&(c, p)| c != handle && p != handle);
        for obj in self.objects.values_mut() {
            match obj {
                Object::Stream(s) if s.alive && s.ctx == handle => {
                    s.alive = false;
                    self.live_streams -= 1;
                    self.counters.orphans += 1;
                }
                Object::Event(e) if e.alive && e.ctx == handle => {
                    e.alive = false;
                    self.live_events -= 1;
                    self.counters.orphans += 1;
                }
                _ => {}
            }
        }
        self.counters.orphans += device::release_ctx(&mut self.device, handle);
        Ok(())
    }
}
