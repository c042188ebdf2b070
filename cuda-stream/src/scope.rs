//! Structured fork/join on streams, in the manner of `std::thread::scope`.

use std::cell::{Cell, RefCell};
use std::marker::PhantomData;
use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};
use std::sync::{Arc, Mutex};

use crate::context::Context;
use crate::error::Result;
use crate::ffi;
use crate::owned::{OwnedStream, StreamOptions};
use crate::pool::{PooledStream, StreamPool};
use crate::stream::{AsStream, Stream};

/// A fork/join scope over a parent stream; see [`Stream::scope`].
pub struct Scope<'scope, 'env: 'scope> {
    parent: Stream<'env>,
    pool: PoolRef,
    forks: Forks,
    // Invariant in 'scope, as in `std::thread::Scope`, so forks cannot escape.
    _scope: PhantomData<&'scope mut &'scope ()>,
    _env: PhantomData<&'env mut &'env ()>,
}

/// The pool a scope leases its forks from: a primary context's shared pool, which lives for the
/// rest of the process, or a pool of the scope's own.
pub(crate) enum PoolRef {
    Shared(&'static StreamPool),
    Own(Arc<StreamPool>),
}

impl std::ops::Deref for PoolRef {
    type Target = StreamPool;

    #[inline]
    fn deref(&self) -> &StreamPool {
        match self {
            PoolRef::Shared(p) => p,
            PoolRef::Own(p) => p,
        }
    }
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
        let raw = self.pool.take_raw()?;
        // The scope returns the stream to the pool itself, after the join.
        self.forks.push(raw as usize);
        let fork = Stream::from_parts(raw, self.parent.context_raw());
        fork.wait_stream(self.parent)?;
        Ok(fork)
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
            let fork = Stream::from_parts(raw as _, self.parent.context_raw());
            let joined = self.parent.wait_stream(fork);
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
        let priority = self.priority()?;
        let pool = fork_pool(self.context_raw(), priority)?;
        let scope = Scope {
            parent: self,
            pool,
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

/// Forwards [`Stream::scope`] to an owner that lends a [`Stream`].
macro_rules! forward_scope {
    ($ty:ty) => {
        impl $ty {
            /// See [`Stream::scope`].
            pub fn scope<'env, R>(
                &'env self,
                f: impl for<'scope> FnOnce(&'scope Scope<'scope, 'env>) -> Result<R>,
            ) -> Result<R> {
                self.as_stream().scope(f)
            }
        }
    };
}

forward_scope!(OwnedStream);
forward_scope!(PooledStream<'_>);

/// The shared pool of one (primary context, priority): created on first use and kept for the
/// life of the process (it holds a retain of its primary context), so a `'static` view of it
/// is sound.
struct SharedPool {
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
            return Ok(PoolRef::Shared(&last.pool));
        }
    }
    Ok(match registered(ctx, priority)? {
        Some(entry) => {
            let _ = LAST_POOL.try_with(|last| last.set(Some(entry)));
            PoolRef::Shared(&entry.pool)
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
