//! Host functions that become graph nodes: `Fn` closures run on every replay, kept alive by
//! driver user objects (`cuUserObjectCreate`, `cuGraphRetainUserObject`) for as long as any graph
//! or executable graph that can run them exists, and freed by the user object's destructor (on a
//! driver thread, after the last launch that can run them has finished).
//!
//! A panic in a node is caught and recorded against the stream its [`HostRoute`] names: the
//! capturing stream until an executable graph holding the route is launched, then the stream of
//! its latest launch (`graph::replay` updates it).
//!
//! Other values that a graph's nodes use by handle (the events of event record and wait nodes)
//! are kept alive the same way ([`keep_alive`]). The closures and values are dropped inside the
//! host-function rule (`driver::deferred_destroy`): what they own is destroyed later on an ordinary thread.
//!
//! # One graph call at a time
//!
//! The driver does not synchronise graph objects: calls on one graph must not overlap (the
//! reason `Graph` is not `Sync`). A capture's graph is reached from many threads at once,
//! though: a `CaptureStream` is `Copy + Send + Sync`, so scoped threads may each enqueue into one
//! capture, and what they enqueue gives the graph a user object (a host node, a kept value, an
//! external event, the buffers a fill or a collective ties to it). Every such
//! `cuGraphRetainUserObject` therefore holds the lock of its graph ([`graph_lock`]): one of a few
//! process-wide locks, picked by the graph's handle, so that the memory and NCCL layers, which
//! find a capture's graph from its stream (`cuStreamGetCaptureInfo`) rather than from a view,
//! take the same lock. The work the views enqueue on their streams (kernels, copies, the nodes
//! themselves) is stream capture, which the driver orders itself, and takes no lock.

use std::ffi::c_void;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::ptr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use crate::base::error::{Result, check, driver_fn, lookup};
use crate::driver::context::bind;
use crate::ffi;

/// Where the panics of a capture's host nodes are reported: a stream and its context, as raw
/// values. Shared by the nodes of one capture and by every graph and executable graph made from
/// it. With concurrent launches on several streams the latest launch wins: attribution, not
/// memory safety, is at stake.
#[derive(Debug)]
pub(crate) struct HostRoute {
    stream: AtomicUsize,
    ctx: AtomicUsize,
}

impl HostRoute {
    pub(crate) fn new(stream: ffi::CUstream, ctx: ffi::CUcontext) -> Arc<HostRoute> {
        Arc::new(HostRoute {
            stream: AtomicUsize::new(stream as usize),
            ctx: AtomicUsize::new(ctx as usize),
        })
    }

    /// Routes later panics to `stream` (of `ctx`): two loads when nothing changes.
    #[inline(always)]
    pub(crate) fn set(&self, stream: ffi::CUstream, ctx: ffi::CUcontext) {
        if self.stream.load(Ordering::Relaxed) != stream as usize {
            self.stream.store(stream as usize, Ordering::Relaxed);
        }
        if self.ctx.load(Ordering::Relaxed) != ctx as usize {
            self.ctx.store(ctx as usize, Ordering::Relaxed);
        }
    }

    fn get(&self) -> (usize, usize) {
        (
            self.stream.load(Ordering::Relaxed),
            self.ctx.load(Ordering::Relaxed),
        )
    }
}

/// Runs `f`, which runs on a driver thread (a host node or a user object's destructor), marked
/// as inside a host function: what it drops is destroyed later on an ordinary thread
/// (`driver::deferred_destroy`), since no CUDA call may be made here.
#[inline(always)]
fn on_driver_thread<R>(f: impl FnOnce() -> R) -> R {
    let _in_host_fn = crate::driver::deferred_destroy::HostFnScope::enter();
    f()
}

/// What a host node's user data points to.
struct HostNode<F> {
    f: F,
    route: Arc<HostRoute>,
}

unsafe extern "C" fn node_trampoline<F: Fn() + Send + Sync + 'static>(data: *mut c_void) {
    // SAFETY: `data` is the `HostNode<F>` that `enqueue_host_node` gave to a user object; every
    // graph and executable graph that contains this node holds that object, which frees the
    // node only after the last of them is destroyed and their launches have finished, so it is
    // live for this call. Only shared references are made to it (the closure is `Fn + Sync`).
    let node = unsafe { &*data.cast::<HostNode<F>>() };
    on_driver_thread(|| {
        if let Err(payload) = catch_unwind(AssertUnwindSafe(&node.f)) {
            let (stream, ctx) = node.route.get();
            crate::stream::host_panics::record(stream, ctx, payload);
        }
    });
}

unsafe extern "C" fn drop_node<F: Fn() + Send + Sync + 'static>(data: *mut c_void) {
    // SAFETY: the user object's destructor runs once, when its last reference is gone: no graph
    // can run the node any more, so the box given to the object is taken back once.
    let node = unsafe { Box::from_raw(data.cast::<HostNode<F>>()) };
    let route = node.route.clone();
    on_driver_thread(move || {
        // The closure's captures may panic on drop: never unwind into the driver.
        if let Err(payload) = catch_unwind(AssertUnwindSafe(move || drop(node))) {
            let (stream, ctx) = route.get();
            crate::stream::host_panics::record(stream, ctx, payload);
        }
    });
}

unsafe extern "C" fn drop_value<T: Send + 'static>(data: *mut c_void) {
    // SAFETY: as in `drop_node`: the box given to the user object, taken back once.
    let value = unsafe { Box::from_raw(data.cast::<T>()) };
    on_driver_thread(move || {
        if let Err(payload) = catch_unwind(AssertUnwindSafe(move || drop(value))) {
            // Nobody to report it to; its own destructor must not unwind either.
            if let Err(again) = catch_unwind(AssertUnwindSafe(move || drop(payload))) {
                std::mem::forget(again);
            }
        }
    });
}

/// How many locks serialise the graph calls ([`graph_lock`]): two graphs share one only by chance
/// (their calls then wait for each other, which is correct, merely less concurrent).
const GRAPH_LOCKS: usize = 16;

static GRAPH_LOCK: [Mutex<()>; GRAPH_LOCKS] = [const { Mutex::new(()) }; GRAPH_LOCKS];

/// The lock this crate holds across an explicit call on `graph` that can run while other threads
/// use the same graph (see "One graph call at a time" above).
pub(crate) fn graph_lock(graph: ffi::CUgraph) -> MutexGuard<'static, ()> {
    let h = graph as usize;
    // Handles are heap addresses: the low bits are alignment.
    let i = ((h >> 4) ^ (h >> 12)) % GRAPH_LOCKS;
    GRAPH_LOCK[i].lock().unwrap_or_else(|e| e.into_inner())
}

/// Gives `data` (a leaked box that `destroy` takes back) to a new user object whose only
/// reference moves to `graph` (`cuUserObjectCreate`, `cuGraphRetainUserObject` with
/// `CU_GRAPH_USER_OBJECT_MOVE`): the graph, and every graph and executable graph made from it,
/// then keep it alive, and the driver runs `destroy` once none does.
///
/// On an error nothing is leaked or freed twice: before the object exists the box is taken back
/// here (by calling `destroy`, on this thread); once it exists, releasing the one reference runs
/// `destroy` (if even that release fails, the box is leaked, never freed twice).
///
/// # Safety
/// `graph` is a live graph; `data` is a box leaked for `destroy`, which takes it back when called
/// once with it, on any thread.
unsafe fn give_to_graph(
    graph: ffi::CUgraph,
    data: *mut c_void,
    destroy: unsafe extern "C" fn(*mut c_void),
) -> Result<()> {
    let (create, retain, release) = match (
        lookup("cuUserObjectCreate", ffi::fns::cuUserObjectCreate),
        lookup("cuGraphRetainUserObject", ffi::fns::cuGraphRetainUserObject),
        lookup("cuUserObjectRelease", ffi::fns::cuUserObjectRelease),
    ) {
        (Ok(c), Ok(r), Ok(l)) => (c, r, l),
        (c, r, l) => {
            // SAFETY: the caller leaked `data` for `destroy`; nothing else has it.
            unsafe { destroy(data) };
            return Err(match (c, r, l) {
                (Err(e), _, _) | (_, Err(e), _) | (_, _, Err(e)) => e,
                _ => unreachable!("one of them failed"),
            });
        }
    };
    let mut object = ptr::null_mut();
    // SAFETY: `object` is a valid out-pointer; `destroy` takes `data` back; one initial
    // reference, owned here; the flag is the one the driver requires.
    let rc = unsafe {
        create(
            &mut object,
            data,
            Some(destroy),
            1,
            ffi::CUuserObject_flags::CU_USER_OBJECT_NO_DESTRUCTOR_SYNC.0,
        )
    };
    if let Err(e) = check(rc, "cuUserObjectCreate") {
        // SAFETY: no user object owns `data`: taken back once.
        unsafe { destroy(data) };
        return Err(e);
    }
    let rc = {
        // Other threads may be giving the same capture's graph objects now.
        let _one_at_a_time = graph_lock(graph);
        // SAFETY: the caller's graph is live; `object` is live with the one reference owned
        // here, which MOVE hands to the graph.
        unsafe {
            retain(
                graph,
                object,
                1,
                ffi::CUuserObjectRetain_flags::CU_GRAPH_USER_OBJECT_MOVE.0,
            )
        }
    };
    if let Err(e) = check(rc, "cuGraphRetainUserObject") {
        // SAFETY: `object` is live with the one reference this function owns: releasing it runs
        // `destroy`.
        let _ = unsafe { release(object, 1) };
        return Err(e);
    }
    Ok(())
}

/// Keeps `value` alive for as long as `graph`, or any graph or executable graph made from it,
/// exists; it is dropped on a driver thread (inside the host-function rule) afterwards.
pub(crate) fn keep_alive<T: Send + Sync + 'static>(
    ctx: ffi::CUcontext,
    graph: ffi::CUgraph,
    value: T,
) -> Result<()> {
    // User objects are not made on a stream: the capture's context is made current for them.
    let _bound = bind(ctx)?;
    let data = Box::into_raw(Box::new(value));
    // SAFETY: the caller's capture graph is live; `data` is leaked for `drop_value::<T>`.
    unsafe { give_to_graph(graph, data.cast(), drop_value::<T>) }
}

/// Enqueues `f` as a host node of the capture `graph` that `stream` is being captured into: the
/// closure is given to a user object of the graph, then the node is enqueued. On an error nothing
/// is leaked: a closure the graph does not own yet is dropped (on this thread, or by the user
/// object's destructor); one it owns is freed with it.
pub(crate) fn enqueue_host_node<F: Fn() + Send + Sync + 'static>(
    (stream, ctx): (ffi::CUstream, ffi::CUcontext),
    graph: ffi::CUgraph,
    route: &Arc<HostRoute>,
    f: F,
) -> Result<()> {
    let launch = driver_fn!(cuLaunchHostFunc);
    // User objects are not made on a stream: the capture's context is made current for them.
    let _bound = bind(ctx)?;
    let data = Box::into_raw(Box::new(HostNode {
        f,
        route: route.clone(),
    }));
    // SAFETY: the capture graph is live; `data` is leaked for `drop_node::<F>`.
    unsafe { give_to_graph(graph, data.cast(), drop_node::<F>) }?;
    // SAFETY: the stream is live and capturing into `graph`; the trampoline matches `CUhostFn`
    // and only borrows `data`, which the graph's user object keeps alive.
    let rc = unsafe { launch(stream, Some(node_trampoline::<F>), data.cast()) };
    // On an error the node does not exist; the graph still owns the closure and frees it when
    // destroyed.
    check(rc, "cuLaunchHostFunc")
}

/// Probes of this module's locks (see `base::lock_probe`).
#[cfg(feature = "test-hooks")]
pub(crate) fn report_locks(out: &mut Vec<String>) {
    for (i, m) in GRAPH_LOCK.iter().enumerate() {
        crate::base::lock_probe::probe(out, &format!("user_objects::GRAPH_LOCK[{i}]"), m);
    }
}
