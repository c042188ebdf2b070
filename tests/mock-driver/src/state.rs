//! The model behind the exports: contexts, handles, the host-function queue, failure rules and
//! counters, all in one process-wide [`State`] behind one mutex.

use std::cell::{Cell, RefCell};
use std::collections::{HashMap, VecDeque};
use std::ffi::c_void;
use std::io::Write as _;
use std::sync::{Condvar, LazyLock, Mutex, MutexGuard};
use std::thread::ThreadId;
use std::time::Instant;

use std::ffi::c_int;

use cuda_sys::{CUdriverProcAddressQueryResult, CUresult, CUstream, SymbolInfo};

use crate::Flavour;

/// The environment variable read once, at the first call into the library.
pub(crate) const CONFIG_VAR: &str = "CUDA_MOCK_CONFIG";

/// How many devices the mock can pretend to have.
pub(crate) const MAX_DEVICES: usize = 8;
/// How many it has unless configured otherwise.
pub(crate) const DEFAULT_DEVICES: usize = 2;
/// `cuCtxGetStreamPriorityRange`'s answer.
pub(crate) const LEAST_PRIORITY: i32 = 0;
pub(crate) const GREATEST_PRIORITY: i32 = -5;

include!(concat!(env!("OUT_DIR"), "/flavour.rs"));

/// The version `cuDriverGetVersion` reports unless configured otherwise: the flavour's.
pub(crate) const DEFAULT_VERSION: i32 = FLAVOUR.version;

/// Whether this flavour exports the driver symbol `symbol`.
pub(crate) fn exported(symbol: &str) -> bool {
    EXPORTED.binary_search(&symbol).is_ok()
}

/// The mock's function for `symbol`, if this flavour exports it.
fn implemented(symbol: &str) -> Option<(&'static str, usize)> {
    crate::exports::driver_functions()
        .iter()
        .find(|(name, _)| *name == symbol)
        .filter(|(name, _)| exported(name))
        .copied()
}

/// The exported symbol meant by `name`: for a binding name of cuda-sys, that binding's symbol
/// (the name C code writes, `cuStreamDestroy` for `cuStreamDestroy_v2`, or an ABI variant such
/// as `cuEventElapsedTime_v2000` for `cuEventElapsedTime`); for another name, the exported name
/// itself (`cuStreamDestroy_v2`). `None` unless this flavour exports it.
pub(crate) fn canonical(name: &str) -> Option<&'static str> {
    let symbol = match SymbolInfo::find(name) {
        Some(s) => s.symbol.to_str().ok()?,
        None => name,
    };
    implemented(symbol).map(|(symbol, _)| symbol)
}

/// `cuGetProcAddress`'s search, as the driver does it: of the ABIs of the function `base` that
/// this flavour's CUDA version has (its per-thread variants, if `per_thread` and it has any), the
/// newest no newer than `version`. Where the mock does not implement that ABI the answer is "not
/// found", never an older ABI in its place.
pub(crate) fn proc_address(
    base: &str,
    version: c_int,
    per_thread: bool,
) -> Result<usize, CUdriverProcAddressQueryResult> {
    let abis = |pt: bool| -> Vec<&'static SymbolInfo> {
        SymbolInfo::all()
            .iter()
            .filter(|s| s.base.to_str() == Ok(base) && s.per_thread == pt)
            .filter(|s| s.symbol.to_str().is_ok_and(exported))
            .collect()
    };
    let mut found = if per_thread { abis(true) } else { Vec::new() };
    if found.is_empty() {
        found = abis(false);
    }
    if found.is_empty() {
        return Err(CUdriverProcAddressQueryResult::CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND);
    }
    let newest = found
        .into_iter()
        .filter(|s| i64::from(s.since) <= i64::from(version))
        .max_by_key(|s| s.since)
        .ok_or(CUdriverProcAddressQueryResult::CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT)?;
    newest
        .symbol
        .to_str()
        .ok()
        .and_then(implemented)
        .map(|(_, address)| address)
        .ok_or(CUdriverProcAddressQueryResult::CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND)
}

/// A `CUresult` given as a number or as its enumerator name (`CUDA_ERROR_OUT_OF_MEMORY`).
pub(crate) fn parse_code(s: &str) -> Option<CUresult> {
    let s = s.trim();
    if let Ok(n) = s.parse::<u32>() {
        return Some(CUresult(n));
    }
    // Every code the header defines is below 1000.
    (0..1000)
        .map(CUresult)
        .find(|&c| cuda_sys::result_name(c) == s)
}

/// Fail calls of `symbol` with `code`: the `nth` call counted from when the rule was set, or every
/// call when `nth` is `None`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Rule {
    pub(crate) symbol: &'static str,
    pub(crate) nth: Option<u64>,
    pub(crate) code: CUresult,
    pub(crate) seen: u64,
}

impl Rule {
    pub(crate) fn new(symbol: &'static str, nth: Option<u64>, code: CUresult) -> Rule {
        Rule {
            symbol,
            nth,
            code,
            seen: 0,
        }
    }
}

/// What a `CUDA_MOCK_CONFIG` string (or `cuda_mock_configure`) asks for.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Config {
    pub(crate) rules: Vec<Rule>,
    pub(crate) version: Option<i32>,
    pub(crate) devices: Option<usize>,
}

/// Parses `key=value` entries separated by `;`:
/// `fail=SYMBOL:N:CODE` (N 1-based, or `*` for every call; CODE a number or a `CUDA_*` name),
/// `version=12040`, `devices=1`.
pub(crate) fn parse_config(spec: &str) -> Result<Config, String> {
    let mut cfg = Config::default();
    for entry in spec.split(';').map(str::trim).filter(|e| !e.is_empty()) {
        let (key, value) = entry
            .split_once('=')
            .ok_or_else(|| format!("`{entry}` is not key=value"))?;
        let value = value.trim();
        match key.trim() {
            "fail" => {
                let mut parts = value.split(':');
                let (Some(name), Some(nth), Some(code), None) =
                    (parts.next(), parts.next(), parts.next(), parts.next())
                else {
                    return Err(format!("`{entry}`: expected fail=SYMBOL:N:CODE"));
                };
                let symbol = canonical(name.trim())
                    .ok_or_else(|| format!("`{entry}`: the mock does not export `{name}`"))?;
                let nth = match nth.trim() {
                    "*" => None,
                    n => match n.parse::<u64>() {
                        Ok(n) if n >= 1 => Some(n),
                        _ => return Err(format!("`{entry}`: N must be 1, 2, ... or `*`")),
                    },
                };
                let code = parse_code(code)
                    .ok_or_else(|| format!("`{entry}`: unknown CUresult `{code}`"))?;
                cfg.rules.push(Rule::new(symbol, nth, code));
            }
            "version" => {
                let v = value
                    .parse::<i32>()
                    .ok()
                    .filter(|v| *v > 0)
                    .ok_or_else(|| format!("`{entry}`: expected a version such as 12040"))?;
                cfg.version = Some(v);
            }
            "devices" => {
                let n = value
                    .parse::<usize>()
                    .ok()
                    .filter(|n| *n <= MAX_DEVICES)
                    .ok_or_else(|| format!("`{entry}`: expected 0 to {MAX_DEVICES} devices"))?;
                cfg.devices = Some(n);
            }
            "omit" => {
                return Err(format!(
                    "`{entry}`: symbols cannot be omitted at run time (a loaded library cannot \
                     take back an export); load the flavour of the CUDA version without it \
                     (cuda_mock_driver::FLAVOURS)"
                ));
            }
            other => return Err(format!("`{entry}`: unknown key `{other}`")),
        }
    }
    Ok(cfg)
}

/// Counters that `cuda_mock_reset` zeroes.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Counters {
    pub(crate) destroyed_streams: u64,
    pub(crate) destroyed_events: u64,
    pub(crate) bad_destroys: u64,
    pub(crate) bad_uses: u64,
    pub(crate) orphans: u64,
    pub(crate) host_fn_api_calls: u64,
}

/// A device's primary context.
#[derive(Debug)]
pub(crate) struct Ctx {
    pub(crate) handle: usize,
    pub(crate) device: i32,
    pub(crate) refs: u64,
}

#[derive(Debug)]
pub(crate) struct StreamRec {
    pub(crate) ctx: usize,
    pub(crate) flags: u32,
    pub(crate) priority: i32,
    pub(crate) id: u64,
    pub(crate) alive: bool,
}

#[derive(Debug)]
pub(crate) struct EventRec {
    pub(crate) ctx: usize,
    pub(crate) flags: u32,
    pub(crate) core: u64,
    pub(crate) alive: bool,
}

/// A stream or an event, alive or destroyed: records are never removed, and handle memory is
/// never freed, so a handle value is never reused and a double destroy is always recognised.
#[derive(Debug)]
pub(crate) enum Object {
    Stream(StreamRec),
    Event(EventRec),
}

/// The recorded state of an event, shared by the event and handles opened from its IPC handle.
#[derive(Debug, Default)]
pub(crate) struct Core {
    /// The last record: complete once job `seq` has run (0: complete at once), and when.
    pub(crate) record: Option<(u64, Option<Instant>)>,
}

/// Which queue a job belongs to: a created stream, or a context's legacy or per-thread default
/// stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Key {
    Stream(usize),
    Legacy(usize),
    PerThread(usize, ThreadId),
}

/// A stream handle resolved to what it stands for.
#[derive(Debug, Clone, Copy)]
pub(crate) struct StreamRef {
    pub(crate) key: Key,
    pub(crate) ctx: usize,
    pub(crate) flags: u32,
    pub(crate) priority: i32,
    /// Read by `cuStreamGetId`.
    pub(crate) id: u64,
}

pub(crate) type HostFn = unsafe extern "C" fn(*mut c_void);
pub(crate) type StreamCallback = unsafe extern "C" fn(CUstream, CUresult, *mut c_void);

#[derive(Debug)]
pub(crate) enum Work {
    Host(HostFn, usize),
    Callback(StreamCallback, usize, usize),
    /// Marks an event's record complete.
    Marker(u64),
    /// A memset, a copy or a kernel (`device_model.rs`).
    Device(crate::device_model::DeviceWork),
    /// A graph launch's end, or a user object's destructor (graph.rs).
    Graph(crate::graph::GraphJob),
}

#[derive(Debug)]
pub(crate) struct Job {
    pub(crate) seq: u64,
    pub(crate) work: Work,
}

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
    next_seq: u64,
    /// Every job up to this one has finished (jobs finish in order: there is one worker).
    pub(crate) completed: u64,
    /// The last job of each queue, and of each context.
    pub(crate) last_job: HashMap<Key, u64>,
    pub(crate) ctx_last_job: HashMap<usize, u64>,
    worker_started: bool,
    /// Modules, kernels and memory (`device_model.rs`).
    pub(crate) device: crate::device_model::DeviceState,
    /// Captures, graphs, executable graphs and user objects (capture.rs, graph.rs).
    pub(crate) graphs: crate::graph::Graphs,
}

/// A fresh, never-freed heap address to serve as a handle.
fn new_address() -> usize {
    let cell: &'static mut u64 = Box::leak(Box::new(0));
    cell as *mut u64 as usize
}

impl State {
    fn new() -> State {
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
            graphs: crate::graph::Graphs::default(),
        };
        st.baseline = baseline;
        st.reset();
        st
    }

    /// Back to the `CUDA_MOCK_CONFIG` configuration, with zeroed counters; handles, contexts and
    /// queued host functions are untouched.
    pub(crate) fn reset(&mut self) {
        self.rules = self.baseline.rules.clone();
        self.version = self.baseline.version.unwrap_or(DEFAULT_VERSION);
        self.devices = self.baseline.devices.unwrap_or(DEFAULT_DEVICES);
        self.calls.clear();
        self.counters = Counters::default();
    }

    pub(crate) fn apply(&mut self, cfg: Config) {
        self.rules.extend(cfg.rules);
        if let Some(v) = cfg.version {
            self.version = v;
        }
        if let Some(n) = cfg.devices {
            self.devices = n;
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

    /// Queues `work` on stream `s`, starting the worker thread if needed.
    pub(crate) fn enqueue(&mut self, s: StreamRef, work: Work) -> Result<u64, CUresult> {
        let seq = self.enqueue_detached(work)?;
        self.last_job.insert(s.key, seq);
        self.ctx_last_job.insert(s.ctx, seq);
        Ok(seq)
    }

    /// Queues `work` on no stream (after everything queued so far).
    pub(crate) fn enqueue_detached(&mut self, work: Work) -> Result<u64, CUresult> {
        if !self.worker_started {
            std::thread::Builder::new()
                .name("cuda-mock-host-fns".into())
                .spawn(worker)
                .map_err(|_| CUresult::CUDA_ERROR_OUT_OF_MEMORY)?;
            self.worker_started = true;
        }
        let seq = self.next_seq;
        self.next_seq += 1;
        self.queue.push_back(Job { seq, work });
        SHARED.work.notify_one();
        Ok(seq)
    }

    /// Makes queue `key` (of context `ctx`) wait for job `seq` too.
    pub(crate) fn wait_for_job(&mut self, key: Key, ctx: usize, seq: u64) {
        let last = self.last_job.entry(key).or_insert(0);
        *last = (*last).max(seq);
        let last = self.ctx_last_job.entry(ctx).or_insert(0);
        *last = (*last).max(seq);
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
        crate::device_model::release_ctx(self, handle);
        Ok(())
    }
}

/// The state and the two condition variables: `work` wakes the worker, `done` wakes waiters
/// when a job finishes.
#[derive(Debug)]
pub(crate) struct Shared {
    state: Mutex<State>,
    work: Condvar,
    done: Condvar,
}

pub(crate) static SHARED: LazyLock<Shared> = LazyLock::new(|| Shared {
    state: Mutex::new(State::new()),
    work: Condvar::new(),
    done: Condvar::new(),
});

/// Locks the state; a panic elsewhere never makes this panic.
pub(crate) fn lock() -> MutexGuard<'static, State> {
    SHARED.state.lock().unwrap_or_else(|e| e.into_inner())
}

fn wait<'a>(cv: &Condvar, g: MutexGuard<'a, State>) -> MutexGuard<'a, State> {
    cv.wait(g).unwrap_or_else(|e| e.into_inner())
}

/// Blocks until job `seq` (and so every job before it) has finished.
pub(crate) fn wait_until_done(
    mut st: MutexGuard<'static, State>,
    seq: u64,
) -> MutexGuard<'static, State> {
    while st.completed < seq {
        st = wait(&SHARED.done, st);
    }
    st
}

thread_local! {
    /// This thread's context stack; the top is the current context.
    static CTX_STACK: RefCell<Vec<usize>> = const { RefCell::new(Vec::new()) };
    static IS_WORKER: Cell<bool> = const { Cell::new(false) };
}

pub(crate) fn current() -> Option<usize> {
    CTX_STACK
        .try_with(|s| s.borrow().last().copied())
        .ok()
        .flatten()
}

/// Runs `f` on this thread's context stack.
pub(crate) fn with_stack<R>(f: impl FnOnce(&mut Vec<usize>) -> R) -> Option<R> {
    CTX_STACK.try_with(|s| f(&mut s.borrow_mut())).ok()
}

pub(crate) fn on_worker() -> bool {
    IS_WORKER.try_with(Cell::get).unwrap_or(false)
}

/// The one thread that runs host functions and stream callbacks, in the order they were queued.
fn worker() {
    let _ = IS_WORKER.try_with(|w| w.set(true));
    let mut st = lock();
    loop {
        let job = loop {
            if let Some(j) = st.queue.pop_front() {
                break j;
            }
            st = wait(&SHARED.work, st);
        };
        match job.work {
            Work::Marker(core) => {
                if let Some(c) = st.cores.get_mut(&core) {
                    if let Some((seq, at)) = &mut c.record {
                        if *seq == job.seq {
                            *at = Some(Instant::now());
                        }
                    }
                }
            }
            Work::Host(f, data) => {
                drop(st);
                // SAFETY: `cuLaunchHostFunc`'s caller gave a function to call with this argument
                // from a driver thread; that is its contract.
                unsafe { f(data as *mut c_void) };
                st = lock();
            }
            Work::Device(work) => crate::device_model::run(&mut st, work),
            Work::Callback(f, stream, data) => {
                drop(st);
                // SAFETY: as above, for `cuStreamAddCallback`: the callback gets the stream as
                // given, the status and the user data.
                unsafe {
                    f(
                        stream as CUstream,
                        CUresult::CUDA_SUCCESS,
                        data as *mut c_void,
                    )
                };
                st = lock();
            }
            Work::Graph(job) => st = crate::graph::run_job(st, job),
        }
        st.completed = job.seq;
        SHARED.done.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_every_key() {
        let c = parse_config(
            " fail=cuStreamCreate:1:2; fail=cuStreamDestroy:*:CUDA_ERROR_INVALID_HANDLE;\
             version=12040;devices=1;",
        )
        .unwrap();
        assert_eq!(
            c.rules,
            vec![
                Rule::new(
                    "cuStreamCreate",
                    Some(1),
                    CUresult::CUDA_ERROR_OUT_OF_MEMORY
                ),
                Rule::new(
                    "cuStreamDestroy_v2",
                    None,
                    CUresult::CUDA_ERROR_INVALID_HANDLE
                ),
            ]
        );
        assert_eq!(c.version, Some(12040));
        assert_eq!(c.devices, Some(1));
        assert_eq!(parse_config("").unwrap(), Config::default());
    }

    #[test]
    fn rejects_what_it_cannot_do() {
        for bad in [
            "fail=cuStreamCreate:0:2",
            "fail=cuStreamCreate:1",
            "fail=cuTexObjectCreate:1:2",
            "fail=cuStreamCreate:1:CUDA_ERROR_NOPE",
            "version=abc",
            "devices=9",
            "omit=cuStreamGetId",
            "colour=blue",
            "nonsense",
        ] {
            assert!(parse_config(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn names_map_to_exports() {
        assert_eq!(
            FLAVOUR.version, 13000,
            "the unit tests run in the full flavour"
        );
        assert_eq!(canonical("cuStreamDestroy"), Some("cuStreamDestroy_v2"));
        assert_eq!(canonical("cuStreamDestroy_v2"), Some("cuStreamDestroy_v2"));
        assert_eq!(canonical("cuStreamDestroy_v2000"), Some("cuStreamDestroy"));
        assert_eq!(
            canonical("cuEventElapsedTime"),
            Some("cuEventElapsedTime_v2")
        );
        assert_eq!(
            canonical("cuEventElapsedTime_v2000"),
            Some("cuEventElapsedTime")
        );
        assert_eq!(canonical("cuMemGetInfo"), Some("cuMemGetInfo_v2"));
        assert_eq!(canonical("cuMemAlloc"), Some("cuMemAlloc_v2"));
        assert_eq!(canonical("cuTexObjectCreate"), None);
        assert_eq!(parse_code("600"), Some(CUresult::CUDA_ERROR_NOT_READY));
        assert_eq!(
            parse_code("CUDA_ERROR_NOT_READY"),
            Some(CUresult::CUDA_ERROR_NOT_READY)
        );
    }

    #[test]
    fn the_flavour_exports_what_its_version_had() {
        assert!(EXPORTED.windows(2).all(|w| w[0] < w[1]), "sorted");
        for e in EXPORTED {
            let since = SymbolInfo::all()
                .iter()
                .filter(|s| s.symbol.to_str() == Ok(*e))
                .map(|s| s.since)
                .max();
            assert!(since.is_some_and(|v| v <= FLAVOUR.version as u32), "{e}");
        }
        assert!(exported("cuGetProcAddress_v2") && exported("cuGetProcAddress"));
    }

    #[test]
    fn proc_address_answers_by_base_name_version_and_flag() {
        type S = CUdriverProcAddressQueryResult;
        let v1 = implemented("cuEventElapsedTime").unwrap().1;
        let v2 = implemented("cuEventElapsedTime_v2").unwrap().1;
        assert_eq!(proc_address("cuEventElapsedTime", 12080, false), Ok(v2));
        assert_eq!(proc_address("cuEventElapsedTime", 13000, false), Ok(v2));
        assert_eq!(proc_address("cuEventElapsedTime", 12020, false), Ok(v1));
        assert_eq!(proc_address("cuEventElapsedTime", 2000, false), Ok(v1));
        assert_eq!(
            proc_address("cuEventElapsedTime", 1000, false),
            Err(S::CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT)
        );
        assert_eq!(
            proc_address("cuTexObjectCreate", 13000, false),
            Err(S::CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND)
        );
        let query = implemented("cuStreamQuery").unwrap().1;
        let query_ptsz = implemented("cuStreamQuery_ptsz").unwrap().1;
        assert_eq!(proc_address("cuStreamQuery", 13000, false), Ok(query));
        assert_eq!(proc_address("cuStreamQuery", 13000, true), Ok(query_ptsz));
        // No per-thread variant: the legacy one.
        let init = implemented("cuInit").unwrap().1;
        assert_eq!(proc_address("cuInit", 13000, true), Ok(init));
        // The 13.0 ABI of cuCtxGetDevice is not implemented: not found, not the 2.0 one.
        assert_eq!(
            proc_address("cuCtxGetDevice", 13000, false),
            Err(S::CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND)
        );
        let get_device = implemented("cuCtxGetDevice").unwrap().1;
        assert_eq!(proc_address("cuCtxGetDevice", 12080, false), Ok(get_device));
    }
}
