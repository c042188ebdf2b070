//! Structured fork/join on streams, in the manner of `std::thread::scope`.

use std::cell::RefCell;
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
    pool: Arc<StreamPool>,
    forks: RefCell<Vec<usize>>,
    // Invariant in 'scope, as in `std::thread::Scope`, so forks cannot escape.
    _scope: PhantomData<&'scope mut &'scope ()>,
    _env: PhantomData<&'env mut &'env ()>,
}

impl std::fmt::Debug for Scope<'_, '_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Scope")
            .field("parent", &self.parent)
            .field("forks", &self.forks.borrow().len())
            .finish()
    }
}

impl<'scope, 'env> Scope<'scope, 'env> {
    /// A stream leased from the context's pool that starts after the parent's work enqueued so
    /// far. The parent waits for it when the scope ends. The view cannot leave the scope.
    pub fn fork(&'scope self) -> Result<Stream<'scope>> {
        let lease = self.pool.acquire()?;
        let view = lease.as_stream();
        let raw = view.raw();
        let ctx = view.context_raw();
        // The scope returns the stream to the pool itself, after the join.
        std::mem::forget(lease);
        self.forks.borrow_mut().push(raw as usize);
        let fork = Stream::from_parts(raw, ctx);
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
        let forks = std::mem::take(&mut *self.forks.borrow_mut());
        let mut first = Ok(());
        for raw in forks {
            let fork = Stream::from_parts(raw as _, self.parent.context_raw());
            let joined = self.parent.wait_stream(fork);
            if first.is_ok() {
                first = joined;
            }
            self.pool.give_back(raw);
        }
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
        let pool = shared_pool(self.context_raw(), priority)?;
        let scope = Scope {
            parent: self,
            pool,
            forks: RefCell::new(Vec::new()),
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

/// The process-wide pools used by [`Stream::scope`]: one per (context, priority), kept for the
/// life of the process (each holds a retain of its primary context). For a context that is
/// not primary, a pool of the caller's own.
pub(crate) fn shared_pool(ctx: ffi::CUcontext, priority: i32) -> Result<Arc<StreamPool>> {
    static POOLS: Mutex<Vec<(usize, i32, Arc<StreamPool>)>> = Mutex::new(Vec::new());
    let mut pools = POOLS.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((_, _, p)) = pools
        .iter()
        .find(|(c, p, _)| *c == ctx as usize && *p == priority)
    {
        return Ok(p.clone());
    }
    let options = StreamOptions::new().priority(priority);
    match Context::retain_if_primary(ctx)? {
        Some(keep) => {
            let pool = Arc::new(StreamPool::build(ctx, Some(keep), options, None));
            pools.push((ctx as usize, priority, pool.clone()));
            Ok(pool)
        }
        // A context this crate cannot retain may be destroyed at any time: no caching.
        None => Ok(Arc::new(StreamPool::build(ctx, None, options, None))),
    }
}
