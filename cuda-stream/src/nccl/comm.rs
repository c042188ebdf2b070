//! [`Communicator`]: one rank of an NCCL communicator, on one device; made for the GPUs of one
//! process or one rank per process, destroyed (or aborted) on `Drop`.

use std::ffi::c_int;
use std::fmt;
use std::marker::PhantomData;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::base::error::{Error, Result};
use crate::driver::context::Context;
use crate::driver::deferred_destroy::{Deferred, defer, in_host_fn};
use crate::driver::device::Device;
use crate::ffi::nccl::{ncclComm_t, ncclResult_t};
use crate::nccl::call::{KeepCurrent, bind_for_nccl, nccl_check, nccl_fn};
use crate::nccl::types::NcclId;

/// One rank of an NCCL communicator, on the device of its [`Context`].
///
/// Its collectives take streams of that context (see [`crate::nccl`]). It is `Send` but not
/// `Sync`: NCCL does not allow two threads to call into one communicator at once. On `Drop` it
/// is destroyed (`ncclCommDestroy`), or aborted (`ncclCommAbort`) if it has reported an
/// asynchronous error; [`close`](Communicator::close) and [`abort`](Communicator::abort) give the
/// answer. Inside a host function the destroy is queued for an ordinary thread (NCCL makes
/// CUDA calls).
///
/// A graph that captured work of the communicator (a collective on a capturing stream) holds
/// its resources: the NCCL communicator is destroyed only once the `Communicator` and every
/// graph and executable graph holding its work are gone, so a replay never runs on freed NCCL
/// state. [`close`](Communicator::close) and [`abort`](Communicator::abort) then answer
/// [`Error::Refused`], and the destroy (or abort) happens with the last graph.
pub struct Communicator {
    inner: Arc<CommInner>,
    /// Copies of `inner`'s handle and context handle, read by every call from the
    /// `Communicator` itself: a group issued after NCCL's own host work finds little of the
    /// crate's data in the caches, and each pointer followed costs a miss there.
    /// (Addresses, so that the `Communicator` stays `Send`.)
    raw: usize,
    ctx_raw: usize,
    /// Whether NCCL refuses a call on a communicator that reported an asynchronous error
    /// itself (`ncclCommEnsureReady` in every call since NCCL 2.14), so that a call need not
    /// ask first.
    nccl_checks_ready: bool,
    rank: usize,
    size: usize,
    // Not `Sync`: NCCL does not allow two threads to call into one communicator at once.
    _not_sync: NotSync,
}

/// `Send` but not `Sync` (and unwind-safe, as a raw handle is).
#[derive(Debug, Clone, Copy)]
struct NotSync(PhantomData<*const ()>);

// SAFETY: a marker without data; `Communicator` is `Send` (one thread at a time calls into it).
unsafe impl Send for NotSync {}

/// The NCCL communicator and its context, shared by its [`Communicator`] and the graphs that hold
/// its work; the last owner destroys it (aborts it, if asked or if it is broken).
struct CommInner {
    raw: ncclComm_t,
    ctx: Context,
    /// Abort instead of destroy at the end ([`Communicator::abort`] while graphs held it).
    abort: AtomicBool,
}

// SAFETY: an NCCL communicator may be used from any thread, one at a time: calls go through the
// `Communicator` (`Send`, not `Sync`); graphs only hold the value, and the last owner destroys it
// once.
unsafe impl Send for CommInner {}
// SAFETY: as above; shared references make no NCCL call.
unsafe impl Sync for CommInner {}

impl CommInner {
    fn new(raw: ncclComm_t, ctx: Context) -> Arc<CommInner> {
        Arc::new(CommInner {
            raw,
            ctx,
            abort: AtomicBool::new(false),
        })
    }

    /// The handle, leaving a value whose drop does nothing.
    fn take(mut self) -> ncclComm_t {
        std::mem::replace(&mut self.raw, std::ptr::null_mut())
    }
}

impl Drop for CommInner {
    fn drop(&mut self) {
        if self.raw.is_null() {
            return;
        }
        let abort = self.abort.load(Ordering::Relaxed);
        if in_host_fn() {
            let f = if abort {
                abort_deferred
            } else {
                destroy_or_abort_deferred
            };
            defer([Deferred::new(self.raw as usize, f)]);
            return;
        }
        let _bound = bind_for_nccl(self.ctx.raw());
        destroy_raw(self.raw, abort);
    }
}

impl fmt::Debug for Communicator {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Communicator")
            .field("raw", &self.inner.raw)
            .field("device", &self.inner.ctx.device())
            .field("rank", &self.rank)
            .field("size", &self.size)
            .finish()
    }
}

/// The first NCCL whose every call checks its communicator's asynchronous error
/// (`ncclCommEnsureReady`, with the non-blocking communicators of 2.14.3).
const NCCL_CHECKS_READY: i32 = 21403;

fn count(n: usize, what: &str) -> Result<c_int> {
    c_int::try_from(n)
        .ok()
        .filter(|&n| n > 0)
        .ok_or_else(|| Error::InvalidArgument {
            reason: format!("{what} must be between 1 and {}, {n} given", c_int::MAX),
        })
}

impl Communicator {
    /// One communicator per device of `devices`, all in this process (`ncclCommInitAll`): rank
    /// `i` is on `devices[i]`, in its primary context. Use them together: a collective on
    /// one waits for the others, so issue them as one [`Group`](crate::nccl::Group) (or from
    /// one thread per rank).
    pub fn init_all(devices: &[Device]) -> Result<Vec<Communicator>> {
        let n = count(devices.len(), "the number of devices")?;
        let list: Vec<c_int> = devices.iter().map(|d| d.raw()).collect();
        crate::driver::device::init()?;
        let f = nccl_fn!(ncclCommInitAll);
        // The contexts first (a device that does not exist is refused here, before NCCL):
        // the first is bound for the call.
        let ctxs = devices
            .iter()
            .map(|d| d.primary_context())
            .collect::<Result<Vec<Context>>>()?;
        let mut raws: Vec<ncclComm_t> = vec![std::ptr::null_mut(); devices.len()];
        {
            // NCCL makes each device current in turn, then the one it found current again:
            // with the first device's context bound it finds that one, and the calling
            // thread's current context is the caller's afterwards (see `plan::issue`).
            let _bound = bind_for_nccl(ctxs[0].raw())?;
            // SAFETY: `raws` has room for `n` handles and `list` holds `n` ordinals (NCCL
            // checks them).
            let rc = unsafe { f(raws.as_mut_ptr(), n, list.as_ptr()) };
            nccl_check(rc, "ncclCommInitAll")?;
        }
        Ok(raws
            .into_iter()
            .zip(ctxs)
            .enumerate()
            .map(|(i, (raw, ctx))| Communicator::new(raw, ctx, i, devices.len()))
            .collect())
    }

    /// Rank `rank` of `nranks` on `ctx`'s device (`ncclCommInitRank`), joined by `id` (the same
    /// for every rank; see [`NcclId`]). Blocks until every rank has joined: in one process,
    /// call it from one thread per rank. A rank outside `0..nranks` is refused
    /// ([`Error::InvalidArgument`]).
    pub fn init_rank(
        ctx: &Context,
        nranks: usize,
        id: &NcclId,
        rank: usize,
    ) -> Result<Communicator> {
        let n = count(nranks, "the number of ranks")?;
        if rank >= nranks {
            return Err(Error::InvalidArgument {
                reason: format!("rank {rank} of a communicator of {nranks}"),
            });
        }
        let f = nccl_fn!(ncclCommInitRank);
        // NCCL works on the current device: the context's, for the call.
        let _bound = bind_for_nccl(ctx.raw())?;
        let mut raw: ncclComm_t = std::ptr::null_mut();
        // SAFETY: `raw` is a valid out-pointer; the rank is in range.
        let rc = unsafe { f(&mut raw, n, id.raw(), rank as c_int) };
        nccl_check(rc, "ncclCommInitRank")?;
        Ok(Communicator::new(raw, ctx.clone(), rank, nranks))
    }

    fn new(raw: ncclComm_t, ctx: Context, rank: usize, size: usize) -> Communicator {
        // The library is loaded: the communicator was made through it.
        let version = crate::nccl::call::nccl("ncclGetVersion").map_or(0, |n| n.version());
        Communicator {
            raw: raw as usize,
            ctx_raw: ctx.raw() as usize,
            nccl_checks_ready: version >= NCCL_CHECKS_READY,
            inner: CommInner::new(raw, ctx),
            rank,
            size,
            _not_sync: NotSync(PhantomData),
        }
    }

    /// What a graph holding work of this communicator keeps alive (see [`Communicator`]).
    pub(crate) fn keep_alive_value(&self) -> impl Send + Sync + 'static + use<> {
        self.inner.clone()
    }

    /// This rank.
    pub fn rank(&self) -> usize {
        self.rank
    }

    /// How many ranks the communicator has.
    pub fn size(&self) -> usize {
        self.size
    }

    /// The context (and so the device) of this rank.
    pub fn context(&self) -> &Context {
        &self.inner.ctx
    }

    /// The raw `ncclComm_t`, for raw NCCL calls (work they enqueue is not recorded as a use).
    #[inline]
    pub fn raw(&self) -> ncclComm_t {
        self.raw as ncclComm_t
    }

    /// The context's handle (`context().raw()` without reaching the context).
    #[inline]
    pub(crate) fn ctx_raw(&self) -> crate::ffi::CUcontext {
        self.ctx_raw as crate::ffi::CUcontext
    }

    /// The error the communicator has reported asynchronously, if any
    /// (`ncclCommGetAsyncError`): [`Error::Nccl`] with `call` `ncclCommGetAsyncError` and the
    /// error. A collective on a communicator with such an error fails with it, and enqueues
    /// nothing: NCCL refuses the call itself (since 2.14; before, the crate asks first), and
    /// the crate reports the communicator's error rather than the call's.
    pub fn check_async(&self) -> Result<()> {
        let f = nccl_fn!(ncclCommGetAsyncError);
        let mut state = ncclResult_t::ncclSuccess;
        // SAFETY: the communicator is live (owned); `state` is a valid out-pointer.
        let rc = unsafe { f(self.raw(), &mut state) };
        nccl_check(rc, "ncclCommGetAsyncError")?;
        nccl_check(state, "ncclCommGetAsyncError")
    }

    /// Before a call: the asynchronous error, where NCCL would not refuse the call itself.
    #[inline]
    pub(crate) fn check_async_before_call(&self) -> Result<()> {
        if self.nccl_checks_ready {
            return Ok(());
        }
        self.check_async()
    }

    /// After a call that failed with `err`: the communicator's asynchronous error if it has
    /// one (what made NCCL refuse the call), else `err`.
    #[cold]
    pub(crate) fn explain_failure(&self, err: Error) -> Error {
        self.async_error().unwrap_or(err)
    }

    /// The communicator's asynchronous error, if NCCL reports one.
    #[cold]
    pub(crate) fn async_error(&self) -> Option<Error> {
        match self.check_async() {
            Err(e @ Error::Nccl { .. }) => Some(e),
            _ => None,
        }
    }

    /// Destroys the communicator (`ncclCommDestroy`, after its work), returning NCCL's answer.
    /// While a graph holds work of the communicator it cannot be destroyed: the answer is
    /// [`Error::Refused`], and it is destroyed with the last such graph.
    pub fn close(self) -> Result<()> {
        let inner = self.exclusive("ncclCommDestroy", false)?;
        // No CUDA call inside a host function (NCCL's destroy makes some): queued.
        if in_host_fn() {
            defer([Deferred::new(inner.take() as usize, destroy_deferred)]);
            return Err(Error::InHostFunction {
                call: "ncclCommDestroy",
            });
        }
        let _bound = bind_for_nccl(inner.ctx.raw());
        let ctx = inner.ctx.clone();
        let r = destroy(inner.take(), false);
        drop(ctx);
        r
    }

    /// Aborts the communicator (`ncclCommAbort`): its work in flight is stopped, and the other
    /// ranks' calls fail. For a rank that gives up after an error. While a graph holds work of
    /// the communicator the abort would free what its replays use: the answer is
    /// [`Error::Refused`], and it is aborted (not destroyed) with the last such graph.
    pub fn abort(self) -> Result<()> {
        let inner = self.exclusive("ncclCommAbort", true)?;
        // No CUDA call inside a host function (NCCL's destroy makes some): queued.
        if in_host_fn() {
            defer([Deferred::new(inner.take() as usize, abort_deferred)]);
            return Err(Error::InHostFunction {
                call: "ncclCommAbort",
            });
        }
        let _bound = bind_for_nccl(inner.ctx.raw());
        let ctx = inner.ctx.clone();
        let r = destroy(inner.take(), true);
        drop(ctx);
        r
    }

    /// The shared state, if no graph holds it; else [`Error::Refused`] naming `call`, with the
    /// end left to the last graph (an abort if `abort`).
    fn exclusive(self, call: &'static str, abort: bool) -> Result<CommInner> {
        let inner = self.inner;
        if abort {
            inner.abort.store(true, Ordering::Relaxed);
        }
        Arc::try_unwrap(inner).map_err(|_| Error::Refused {
            call,
            reason: "graphs hold work of this communicator: it ends with the last of them",
        })
    }
}

fn destroy(raw: ncclComm_t, abort: bool) -> Result<()> {
    if abort {
        let f = nccl_fn!(ncclCommAbort);
        // SAFETY: the communicator is live and handed over by its owner.
        nccl_check(unsafe { f(raw) }, "ncclCommAbort")
    } else {
        let f = nccl_fn!(ncclCommDestroy);
        // SAFETY: as above.
        nccl_check(unsafe { f(raw) }, "ncclCommDestroy")
    }
}

/// Destroys `raw`, aborting it instead if it has an asynchronous error (or if `abort`); errors
/// have nobody to go to.
fn destroy_raw(raw: ncclComm_t, abort: bool) {
    let _ = destroy(raw, abort || is_broken(raw));
}

/// Whether `raw` has an asynchronous error (or cannot say).
fn is_broken(raw: ncclComm_t) -> bool {
    let f =
        match crate::nccl::call::nccl("ncclCommGetAsyncError").map(|n| n.ncclCommGetAsyncError()) {
            Ok(Ok(f)) => f,
            _ => return false,
        };
    let mut state = ncclResult_t::ncclSuccess;
    // SAFETY: the communicator is live; `state` is a valid out-pointer.
    let rc = unsafe { f(raw, &mut state) };
    rc != ncclResult_t::ncclSuccess || state != ncclResult_t::ncclSuccess
}

// The deferred destroys run on whichever ordinary thread drains the queue next. NCCL tears a
// communicator down on its device and then makes the device it found current (device 0 when
// nothing was: measured on two H100s, where a test thread was left with device 0's primary
// context current), so each keeps the draining thread's current context.

fn destroy_deferred(raw: usize) -> Result<()> {
    let _keep = KeepCurrent::new();
    destroy(raw as ncclComm_t, false)
}

fn abort_deferred(raw: usize) -> Result<()> {
    let _keep = KeepCurrent::new();
    destroy(raw as ncclComm_t, true)
}

fn destroy_or_abort_deferred(raw: usize) -> Result<()> {
    let _keep = KeepCurrent::new();
    destroy_raw(raw as ncclComm_t, false);
    Ok(())
}
