//! Host functions that become graph nodes: `Fn` closures run on every replay, kept alive by
//! driver user objects (`cuUserObjectCreate`, `cuGraphRetainUserObject`) for as long as any graph
//! or executable graph that can run them exists, and freed by the user object's destructor (on a
//! driver thread, after the last launch that can run them has finished).
//!
//! A panic in a node is caught and recorded against the stream its [`HostRoute`] names: the
//! capturing stream until an executable graph holding the route is launched, then the stream of
//! its latest launch (`graph.rs` updates it).

use std::ffi::c_void;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::ptr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::error::{Result, check, driver_fn};
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

/// Runs `f`, which runs on a driver thread (a host node or a user object's destructor). The one
/// place to mark "inside a host function" for code that must not call the driver there (such as
/// a destroy deferred by the crate): wrap `f()` with that flag here.
#[inline(always)]
fn on_driver_thread<R>(f: impl FnOnce() -> R) -> R {
    f()
}

/// What a host node's user data points to.
struct HostNode<F> {
    f: F,
    route: Arc<HostRoute>,
}

unsafe extern "C" fn node_trampoline<F: Fn() + Send + Sync + 'static>(data: *mut c_void) {
    // SAFETY: `data` is the `HostNode<F>` that `enqueue_host_node` leaked; a user object held by
    // every graph and executable graph that contains this node frees it only after the last of
    // them is destroyed and their launches have finished, so it is live for this call. Only
    // shared references are made to it (the closure is `Fn + Sync`).
    let node = unsafe { &*data.cast::<HostNode<F>>() };
    on_driver_thread(|| {
        if let Err(payload) = catch_unwind(AssertUnwindSafe(&node.f)) {
            let (stream, ctx) = node.route.get();
            crate::panics::record(stream, ctx, payload);
        }
    });
}

unsafe extern "C" fn node_destructor<F: Fn() + Send + Sync + 'static>(data: *mut c_void) {
    // SAFETY: the user object's destructor runs once, when its last reference is gone: no graph
    // can run the node any more, so the box leaked by `enqueue_host_node` is taken back once.
    let node = unsafe { Box::from_raw(data.cast::<HostNode<F>>()) };
    let route = node.route.clone();
    on_driver_thread(move || {
        // The closure's captures may panic on drop: never unwind into the driver.
        if let Err(payload) = catch_unwind(AssertUnwindSafe(move || drop(node))) {
            let (stream, ctx) = route.get();
            crate::panics::record(stream, ctx, payload);
        }
    });
}

/// Enqueues `f` as a host node of the capture `graph` that `stream` is being captured into:
/// a user object owning the closure is created, its reference moved to the graph (which hands
/// references on to graphs and executable graphs made from it), then the node is enqueued.
///
/// On an error nothing is leaked: before the graph holds the object, the closure is dropped
/// here (or by the destructor when the object is released); after, the graph owns it.
pub(crate) fn enqueue_host_node<F: Fn() + Send + Sync + 'static>(
    stream: ffi::CUstream,
    graph: ffi::CUgraph,
    route: &Arc<HostRoute>,
    f: F,
) -> Result<()> {
    let create = driver_fn!(cuUserObjectCreate);
    let retain = driver_fn!(cuGraphRetainUserObject);
    let release = driver_fn!(cuUserObjectRelease);
    let launch = driver_fn!(cuLaunchHostFunc);
    let data = Box::into_raw(Box::new(HostNode {
        f,
        route: route.clone(),
    }));
    let mut object = ptr::null_mut();
    // SAFETY: `object` is a valid out-pointer; `data` is passed to `node_destructor::<F>`, which
    // takes it back; one initial reference, owned here; the flag is the one the driver requires.
    let rc = unsafe {
        create(
            &mut object,
            data.cast(),
            Some(node_destructor::<F>),
            1,
            ffi::CUuserObject_flags::CU_USER_OBJECT_NO_DESTRUCTOR_SYNC.0,
        )
    };
    if let Err(e) = check(rc, "cuUserObjectCreate") {
        // SAFETY: no user object owns `data`: taken back once.
        drop(unsafe { Box::from_raw(data) });
        return Err(e);
    }
    // SAFETY: `graph` is the live capture graph; `object` is live with the one reference this
    // function owns, which MOVE hands to the graph.
    let rc = unsafe {
        retain(
            graph,
            object,
            1,
            ffi::CUuserObjectRetain_flags::CU_GRAPH_USER_OBJECT_MOVE.0,
        )
    };
    if let Err(e) = check(rc, "cuGraphRetainUserObject") {
        // The reference is still ours: releasing it runs the destructor, which frees `data`. If
        // even that fails the closure is leaked, never freed twice.
        // SAFETY: `object` is live with the one reference this function owns.
        let _ = unsafe { release(object, 1) };
        return Err(e);
    }
    // SAFETY: the stream is live and capturing into `graph`; the trampoline matches `CUhostFn`
    // and only borrows `data`, which the graph's user object keeps alive.
    let rc = unsafe { launch(stream, Some(node_trampoline::<F>), data.cast()) };
    // On an error the node does not exist; the graph still owns the closure and frees it when
    // destroyed.
    check(rc, "cuLaunchHostFunc")
}
