//! Structured fork/join on streams, in the manner of `std::thread::scope`.

use std::cell::{Cell, RefCell};
use std::marker::PhantomData;
use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};
use std::sync::{Arc, Mutex};

use crate::context::Context;
use crate::error::{Result, check, driver_fn};
use crate::ffi;
use crate::owned::{OwnedStream, StreamOptions};
use crate::pool::{PooledStream, StreamPool};
use crate::stream::{AsStream, Stream, bind_if_special};

/// A fork/join scope over a parent stream; see [`Stream::scope`].
pub struct Scope<'scope, 'env: 'scope> {
    parent: Stream<'env>,
    pool: PoolRef,
    /// This thread's wait event for the parent's context (`None`: each link uses
    /// `Stream::wait_stream`). A scope is used on its own thread only (`Scope` is not `Sync`).
    event: Option<ffi::CUevent>,
    forks: Forks,
    // Invariant in 'scope, as in `std::thread::Scope`, so forks cannot escape.
    _scope: PhantomData<&'scope mut &'scope ()>,
    _env: PhantomData<&'env mut &'env ()>,
}

// `Scope::link` uses the thread's wait event: a scope must stay on its thread.
static_assertions::assert_not_impl_any!(Scope<'static, 'static>: Sync, Send);

/// The pool a scope leases its forks from: a primary context's shared pool, which lives for the
/// rest of the process, or a pool of the scope's own.
pub(crate) enum PoolRef {
    Shared(&'static SharedPool),
    Own(Arc<StreamPool>),
}

impl PoolRef {
    /// A stream for a fork: from this thread's stash for a shared pool, else from the pool.
    #[inline]
    fn take(&self) -> Result<ffi::CUstream> {
        match self {
            PoolRef::Shared(entry) => match STASH.try_with(|s| s.take(entry)) {
                Ok(Some(raw)) => Ok(raw as ffi::CUstream),
                _ => entry.pool.take_raw(),
            },
            PoolRef::Own(pool) => pool.take_raw(),
        }
    }

    /// Returns a fork's stream: to this thread's stash for a shared pool (up to
    /// [`STASH_LIMIT`]), else to the pool.
    #[inline]
    fn give_back(&self, raw: usize) {
        match self {
            PoolRef::Shared(entry) => {
                if STASH.try_with(|s| s.put(entry, raw)) != Ok(true) {
                    entry.pool.give_back(raw);
                }
            }
            PoolRef::Own(pool) => pool.give_back(raw),
        }
    }
}

/// How many fork streams a thread keeps for its next scopes.
const STASH_LIMIT: usize = 8;

/// Fork streams a thread took from shared pools and keeps for its next scopes, so a scope in a
/// loop touches no shared state: (pool, stream) pairs. At thread exit they go back to their
/// pools (no driver call: a pool is a list of handles).
struct Stash(RefCell<Vec<(&'static SharedPool, usize)>>);

impl Stash {
    #[inline]
    fn take(&self, entry: &'static SharedPool) -> Option<usize> {
        let mut v = self.0.try_borrow_mut().ok()?;
        let i = v.iter().rposition(|(e, _)| std::ptr::eq(*e, entry))?;
        Some(v.swap_remove(i).1)
    }

    /// Keeps `raw` unless the stash is full (or busy): `false` then.
    #[inline]
    fn put(&self, entry: &'static SharedPool, raw: usize) -> bool {
        match self.0.try_borrow_mut() {
            Ok(mut v) if v.len() < STASH_LIMIT => {
                v.push((entry, raw));
                true
            }
            _ => false,
        }
    }
}

impl Drop for Stash {
    fn drop(&mut self) {
        for (entry, raw) in self.0.get_mut().drain(..) {
            entry.pool.give_back(raw);
        }
    }
}

thread_local! {
    static STASH: Stash = const { Stash(RefCell::new(Vec::new())) };
}

/// How many forks a scope keeps without allocating.
const INLINE_FORKS: usize = 4;

/// The forks of a scope, in order: the first [`INLINE_FORKS`] in place, the rest in a vector.
struct Forks {
    inline: [Cell<usize>; INLINE_FORKS],
    len: Cell<usize>,
    more: RefCell<Vec<usize>>,
}

impl Forks {
    fn new() -> Forks {
        Forks {
            inline: [const { Cell::new(0) }; INLINE_FORKS],
            len: Cell::new(0),
            more: RefCell::new(Vec::new()),
        }
    }

    #[inline]
    fn push(&self, raw: usize) {
        let n = self.len.get();
        match self.inline.get(n) {
            Some(slot) => slot.set(raw),
            None => self.more.borrow_mut().push(raw),
        }
        self.len.set(n + 1);
    }

    /// Takes every fork out, in order, leaving the list empty.
    #[inline]
    fn take(&self, mut each: impl FnMut(usize)) {
        let n = self.len.replace(0);
        for slot in &self.inline[..n.min(INLINE_FORKS)] {
            each(slot.get());
        }
        if n > INLINE_FORKS {
            for raw in std::mem::take(&mut *self.more.borrow_mut()) {
                each(raw);
            }
        }
    }
}

impl std::fmt::Debug for Scope<'_, '_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Scope")
            .field("parent", &self.parent)
            .field("forks", &self.forks.len.get())
            .finish()
    }
}

impl<'scope, 'env> Scope<'scope, 'env> {
    /// A stream leased from the context's pool that starts after the parent's work enqueued so
    /// far. The parent waits for it when the scope ends. The view cannot leave the scope.
    pub fn fork(&'scope self) -> Result<Stream<'scope>> {
        let raw = self.pool.take()?;
        // The scope returns the stream to the pool itself, after the join.
        self.forks.push(raw as usize);
        self.link(self.parent.raw(), raw)?;
        Ok(Stream::from_parts(raw, self.parent.context_raw()))
    }

    /// Makes `to` wait for the work enqueued on `from` so far (both streams of the parent's
    /// context; only the parent can be a default stream).
    #[inline]
    fn link(&self, from: ffi::CUstream, to: ffi::CUstream) -> Result<()> {
        let ctx = self.parent.context_raw();
        let Some(event) = self.event else {
            return Stream::from_parts(to, ctx).wait_stream(Stream::from_parts(from, ctx));
        };
        let record = driver_fn!(cuEventRecord);
        let wait = driver_fn!(cuStreamWaitEvent);
        {
            let _bound = bind_if_special(from, ctx)?;
            // SAFETY: the event is this thread's, of the streams' context, and lives until the
            // thread exits; `from` is the live parent or a fork the scope holds.
            check(unsafe { record(event, from) }, "cuEventRecord")?;
        }
        let _bound = bind_if_special(to, ctx)?;
        // SAFETY: as above; the wait takes the event's state now, so reusing the event later
        // cannot change what `to` waits for.
        check(unsafe { wait(to, event, 0) }, "cuStreamWaitEvent")
    }

    /// The parent stream.
    pub fn parent(&self) -> Stream<'env> {
        self.parent
    }

    /// Makes the parent wait for every fork and returns them to the pool. Returns the first
    /// error; every fork is joined regardless.
    fn join(&self) -> Result<()> {
        let mut first = Ok(());
        self.forks.take(|raw| {
            let joined = self.link(raw as _, self.parent.raw());
            if first.is_ok() {
                first = joined;
            }
            self.pool.give_back(raw);
        });
        first
    }
}

impl<'env> Stream<'env> {
    /// Runs `f` with a scope whose [`Scope::fork`]s start after this stream's work so far; when
    /// the scope ends — normally, by an early return of an error, or by a panic — this stream
    /// waits for every fork, so work enqueued here afterwards runs after all of theirs.
    ///
    /// ```no_run
    /// # fn enqueue_left(_: cuda_stream::Stream<'_>) -> cuda_stream::Result<()> { Ok(()) }
    /// # fn enqueue_right(_: cuda_stream::Stream<'_>) -> cuda_stream::Result<()> { Ok(()) }
    /// # let ctx = cuda_stream::Context::primary(0)?;
    /// let main = ctx.new_stream()?;
    /// main.scope(|s| {
    ///     let (a, b) = (s.fork()?, s.fork()?);
    ///     enqueue_left(a)?;
    ///     enqueue_right(b)?; // runs concurrently with `a`
    ///     Ok(())
    /// })?;
    /// // work enqueued on `main` now runs after both forks
    /// # Ok::<(), cuda_stream::Error>(())
    /// ```
    pub fn scope<R>(
        self,
        f: impl for<'scope> FnOnce(&'scope Scope<'scope, 'env>) -> Result<R>,
    ) -> Result<R> {
        self.scope_at(self.priority()?, f)
    }

    /// [`Stream::scope`] for a parent whose priority is known: forks have `priority`.
    #[inline]
    pub(crate) fn scope_at<R>(
        self,
        priority: i32,
        f: impl for<'scope> FnOnce(&'scope Scope<'scope, 'env>) -> Result<R>,
    ) -> Result<R> {
        let pool = fork_pool(self.context_raw(), priority)?;
        let scope = Scope {
            parent: self,
            pool,
            event: crate::wait_events::WAIT_EVENTS.thread_event(self.context_raw())?,
            forks: Forks::new(),
            _scope: PhantomData,
            _env: PhantomData,
        };
        // Join even if `f` panics, then let the panic continue.
        let result = catch_unwind(AssertUnwindSafe(|| f(&scope)));
        let joined = scope.join();
        let result = match result {
            Ok(r) => r,
            Err(payload) => resume_unwind(payload),
        };
        let value = result?;
        joined?;
        Ok(value)
    }
}

impl OwnedStream {
    /// See [`Stream::scope`]. The stream's priority (which forks get) is asked of the driver
    /// once per stream, not once per scope.
    pub fn scope<'env, R>(
        &'env self,
        f: impl for<'scope> FnOnce(&'scope Scope<'scope, 'env>) -> Result<R>,
    ) -> Result<R> {
        self.as_stream().scope_at(self.cached_priority()?, f)
    }
}

impl PooledStream<'_> {
    /// See [`Stream::scope`].
    pub fn scope<'env, R>(
        &'env self,
        f: impl for<'scope> FnOnce(&'scope Scope<'scope, 'env>) -> Result<R>,
    ) -> Result<R> {
        self.as_stream().scope(f)
    }
}

/// The shared pool of one (primary context, priority): created on first use and kept for the
/// life of the process (it holds a retain of its primary context), so a `'static` view of it
/// is sound.
pub(crate) struct SharedPool {
    ctx: usize,
    priority: i32,
    pool: Arc<StreamPool>,
}

/// Every shared pool made so far; an entry is never removed.
static POOLS: Mutex<Vec<&'static SharedPool>> = Mutex::new(Vec::new());

thread_local! {
    /// The shared pool this thread used last, so a scope in a loop takes no lock.
    static LAST_POOL: Cell<Option<&'static SharedPool>> = const { Cell::new(None) };
}

/// The shared pool of a primary context (created on first use), or `None` for a context this
/// crate cannot retain: such a context may be destroyed at any time, so nothing is cached.
fn registered(ctx: ffi::CUcontext, priority: i32) -> Result<Option<&'static SharedPool>> {
    let mut pools = POOLS.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(found) = pools
        .iter()
        .find(|e| e.ctx == ctx as usize && e.priority == priority)
    {
        return Ok(Some(*found));
    }
    let Some(keep) = Context::retain_if_primary(ctx)? else {
        return Ok(None);
    };
    let options = StreamOptions::new().priority(priority);
    let entry: &'static SharedPool = Box::leak(Box::new(SharedPool {
        ctx: ctx as usize,
        priority,
        pool: Arc::new(StreamPool::build(ctx, Some(keep), options, None)),
    }));
    pools.push(entry);
    Ok(Some(entry))
}

/// A pool of its own for a stream of a context that is not primary.
fn own_pool(ctx: ffi::CUcontext, priority: i32) -> Arc<StreamPool> {
    let options = StreamOptions::new().priority(priority);
    Arc::new(StreamPool::build(ctx, None, options, None))
}

/// The pool [`Stream::scope`] leases the forks of a stream of `ctx` with `priority` from: the
/// context's shared pool (from this thread's last-used entry, without a lock, when it matches),
/// or for a context that is not primary, a pool of the scope's own.
pub(crate) fn fork_pool(ctx: ffi::CUcontext, priority: i32) -> Result<PoolRef> {
    if let Ok(Some(last)) = LAST_POOL.try_with(Cell::get) {
        if last.ctx == ctx as usize && last.priority == priority {
            return Ok(PoolRef::Shared(last));
        }
    }
    Ok(match registered(ctx, priority)? {
        Some(entry) => {
            let _ = LAST_POOL.try_with(|last| last.set(Some(entry)));
            PoolRef::Shared(entry)
        }
        None => PoolRef::Own(own_pool(ctx, priority)),
    })
}

/// The shared pool for `ctx` and `priority` as a counted reference (a capture keeps its forks
/// with their pool until it ends); for a context that is not primary, a pool of the caller's own.
pub(crate) fn shared_pool(ctx: ffi::CUcontext, priority: i32) -> Result<Arc<StreamPool>> {
    Ok(match registered(ctx, priority)? {
        Some(entry) => entry.pool.clone(),
        None => own_pool(ctx, priority),
    })
}
