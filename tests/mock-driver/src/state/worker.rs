//! The lock on the state, the queue and the one worker thread that runs it in order. A finished
//! graph launch releases its user objects, and a user object's destructor is a job again.

use std::ffi::c_void;
use std::sync::{Condvar, LazyLock, Mutex, MutexGuard};
use std::time::Instant;

use cuda_stream_sys::{CUresult, CUstream};

use super::store::State;
use super::threads::become_worker;
use crate::model::device;
use crate::model::graph::GraphJob;
use crate::model::jobs::{Job, Work};
use crate::model::records::{Key, StreamRef};

const INVALID_VALUE: CUresult = CUresult::CUDA_ERROR_INVALID_VALUE;

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

impl State {
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
}

/// The one thread that runs host functions and stream callbacks, in the order they were queued.
fn worker() {
    become_worker();
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
            Work::Device(work) => {
                let what = if std::env::var_os("CUDA_MOCK_TRACE_BAD_USES").is_some() {
                    let mut w = format!("{work:?}");
                    w.truncate(200);
                    w
                } else {
                    String::new()
                };
                if !device::run(&mut st.device, work) {
                    st.counters.bad_uses += 1;
                    crate::base::trace_bad_use(file!(), line!());
                    if !what.is_empty() {
                        eprintln!("mock driver: the work that found no memory: {what}");
                    }
                }
            }
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
            Work::Graph(job) => st = run_job(st, job),
        }
        st.completed = job.seq;
        SHARED.done.notify_all();
    }
}

/// Drops `count` references to `object`; at zero its destructor is queued on the worker.
pub(crate) fn release(st: &mut State, object: usize, count: u64) -> Result<(), CUresult> {
    let Some(obj) = st.graphs.objects.get_mut(&object) else {
        st.counters.bad_destroys += 1;
        return Err(INVALID_VALUE);
    };
    if obj.refs < count || count == 0 {
        st.counters.bad_destroys += 1;
        return Err(INVALID_VALUE);
    }
    obj.refs -= count;
    if obj.refs == 0 {
        let obj = st.graphs.objects.remove(&object).expect("present");
        st.graphs.live_user_objects -= 1;
        st.enqueue_detached(Work::Graph(GraphJob::Destroy(obj.destroy, obj.ptr)))?;
    }
    Ok(())
}

pub(crate) fn release_all(st: &mut State, objects: Vec<(usize, u64)>) {
    for (o, n) in objects {
        let _ = release(st, o, n);
    }
}

/// Destroys a graph (the capture's, when it ends without one, or the caller's).
pub(crate) fn destroy_graph(st: &mut State, h: usize) -> Result<(), CUresult> {
    match st.graphs.graphs.get_mut(&h) {
        Some(g) if g.alive => {
            g.alive = false;
            let objects = std::mem::take(&mut g.objects);
            g.nodes.clear();
            st.graphs.live_graphs -= 1;
            release_all(st, objects);
            Ok(())
        }
        _ => {
            st.counters.bad_destroys += 1;
            Err(INVALID_VALUE)
        }
    }
}

/// Runs a graph job on the worker; the state is unlocked while a destructor runs.
fn run_job(mut st: MutexGuard<'static, State>, job: GraphJob) -> MutexGuard<'static, State> {
    match job {
        GraphJob::Destroy(f, ptr) => {
            drop(st);
            // SAFETY: `cuUserObjectCreate`'s caller gave a destructor to call once with this
            // pointer, from a driver thread, when the last reference is gone: now.
            unsafe { f(ptr as *mut c_void) };
            st = lock();
            st.graphs.destructors_run += 1;
        }
        GraphJob::LaunchDone(h) => {
            let mut release_now = Vec::new();
            if let Some(e) = st.graphs.execs.get_mut(&h) {
                e.in_flight -= 1;
                if e.in_flight == 0 {
                    release_now = std::mem::take(&mut e.held);
                    if !e.alive {
                        release_now.extend(std::mem::take(&mut e.objects));
                    }
                }
            }
            release_all(&mut st, release_now);
        }
    }
    st
}
