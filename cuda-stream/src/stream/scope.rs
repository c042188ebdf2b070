//! Structured fork/join on streams, in the manner of `std::thread::scope`.
//!
//! A scope in a loop is the common case, so its fast path touches nothing shared and copies
//! nothing: a thread keeps one entry per (context, priority) it has scoped on, holding the
//! thread's own event for the links, the two driver functions a link calls, and the streams its
//! scopes fork, in order (fork `i` gets the same stream each time). A scope claims the entry it
//! starts from and works in it in place until it ends; a scope nested in another on the same
//! pool leases streams of its own.

use std::cell::{Cell, RefCell};
use std::marker::PhantomData;
use std::ptr::NonNull;
use std::sync::{Arc, Mutex};

use crate::base::error::{Error, Result, check, driver_fn, refuse_in_host_fn};
use crate::driver::context::Context;
use crate::driver::context::create_plain_event;
use crate::ffi;
use crate::stream::owned::{OwnedStream, StreamOptions};
use crate::stream::pool::{PooledStream, StreamPool};
use crate::stream::view::{AsStream, Stream, bind_if_special, is_special};

/// How many fork streams a thread's entry keeps (a scope's forks past these come from the pool
/// each time).
const SLOTS: usize = 8;

/// A fork/join scope over a parent stream; see [`Stream::scope`].
pub struct Scope<'scope, 'env: 'scope> {
    parent: Stream<'env>,
    forks: Forks,
    // Invariant in 'scope, as in `std::thread::Scope`, so forks cannot escape.
    _scope: PhantomData<&'scope mut &'scope ()>,
    _env: PhantomData<&'env mut &'env ()>,
}

// A scope works in its thread's entry and links with the thread's event: it stays on its
// thread.
static_assertions::assert_not_impl_any!(Scope<'static, 'static>: Sync, Send);

/// What a link records and waits with: an event of the parent's context that only this thread
/// uses (reusing it is safe: a wait takes the event's state at the time of the call), and the
/// two driver functions, resolved once.
#[derive(Clone, Copy)]
struct Links {
    event: ffi::CUevent,
    record: ffi::pfn::cuEventRecord,
    wait: ffi::pfn::cuStreamWaitEvent,
}

impl Links {
    /// Makes `to` wait for the work enqueued on `from` so far; the call that failed and its
    /// result otherwise.
    ///
    /// # Safety
    ///
    /// `from` and `to` are live streams of the event's context, neither a default stream (those
    /// need their context bound), and the caller is on the thread the event belongs to.
    #[inline(always)]
    unsafe fn link(
        &self,
        from: ffi::CUstream,
        to: ffi::CUstream,
    ) -> std::result::Result<(), (&'static str, ffi::CUresult)> {
        // SAFETY: per the contract; the event lives until the thread exits and `record` is the
        // driver's `cuEventRecord`.
        let code = unsafe { (self.record)(self.event, from) };
        if code != ffi::CUresult::CUDA_SUCCESS {
            return Err(("cuEventRecord", code));
        }
        // SAFETY: as above (`wait` is `cuStreamWaitEvent`); the wait takes the event's state
        // now, so reusing the event later cannot change what `to` waits for.
        let code = unsafe { (self.wait)(to, self.event, 0) };
        if code != ffi::CUresult::CUDA_SUCCESS {
            return Err(("cuStreamWaitEvent", code));
        }
        Ok(())
    }
}

/// The pool a scope leases its forks from: a primary context's shared pool, which lives for the
/// rest of the process, or a pool of the scope's own.
pub(crate) enum PoolRef {
    Shared(&'static SharedPool),
    Own(Arc<StreamPool>),
}

impl PoolRef {
    fn pool(&self) -> &StreamPool {
        match self {
            PoolRef::Shared(entry) => &entry.pool,
            PoolRef::Own(pool) => pool,
        }
    }
}

/// A thread's state for scopes on one shared pool (see the module's documentation). Freed at
/// thread exit: the event is destroyed (the pool's retain keeps its context alive) and the
/// streams go back to the pool (no driver call: a pool is a list of handles).
struct ThreadEntry {
    ctx: usize,
    priority: i32,
    pool: &'static SharedPool,
    links: Links,
    /// `streams[..len]`: the entry's streams, in fork order.
    streams: [Cell<usize>; SLOTS],
    len: Cell<usize>,
    /// Whether a scope works in the entry now.
    claimed: Cell<bool>,
}

impl Drop for ThreadEntry {
    fn drop(&mut self) {
        for raw in &self.streams[..self.len.get()] {
            self.pool.pool.give_back(raw.get());
        }
        let event = self.links.event as usize;
        if crate::driver::deferred_destroy::in_host_fn() {
            let e = crate::driver::deferred_destroy::Deferred::new(
                event,
                crate::driver::recycled_events::destroy,
            );
            crate::driver::deferred_destroy::defer([e]);
        } else {
            let _ = crate::driver::recycled_events::destroy(event);
        }
    }
}

/// This thread's entries, the one used last first. Each is a leaked `Box`, so that reordering
/// the list moves no entry, and freed only when the thread exits: a scope holds
/// a pointer to the entry it claimed, and no scope runs on a thread whose thread-locals are
/// being destroyed once this list is (destructors of thread-locals run one after another).
struct Entries(RefCell<Vec<NonNull<ThreadEntry>>>);

impl Drop for Entries {
    fn drop(&mut self) {
        for entry in self.0.get_mut().drain(..) {
            // SAFETY: made by `Box::leak` in `start_slow`, freed only here, once.
            drop(unsafe { Box::from_raw(entry.as_ptr()) });
        }
    }
}

thread_local! {
    static ENTRIES: Entries = const { Entries(RefCell::new(Vec::new())) };
}

/// Where a scope's fork streams are.
enum Home {
    /// The thread's entry, claimed by the scope: its forks are `streams[..forks]` there.
    Entry(NonNull<ThreadEntry>),
    /// Streams of the scope's own, leased from `pool` (a context that is not primary, a scope
    /// nested in another on the same pool, thread teardown), linked with the thread's `links`
    /// where it has them, else through `Stream::wait_stream`.
    Own { pool: PoolRef, links: Option<Links> },
}

/// A scope's forks: where they live and how many there are. Forks past an entry's [`SLOTS`],
/// and every fork of a scope with streams of its own, are in `more`. Dropping gives back what
/// the entry does not keep and releases the entry.
struct Forks {
    home: Home,
    count: Cell<usize>,
    more: RefCell<Vec<usize>>,
}

impl Forks {
    /// The claimed entry, if the scope has one.
    #[inline(always)]
    fn entry(&self) -> Option<&ThreadEntry> {
        match self.home {
            // SAFETY: the entry lives until the thread's thread-locals are destroyed, and a
            // scope (not `Send`) does not outlive its thread's running code (see `Entries`).
            Home::Entry(entry) => Some(unsafe { entry.as_ref() }),
            Home::Own { .. } => None,
        }
    }

    fn pool(&self) -> &StreamPool {
        match &self.home {
            // SAFETY: as in `entry`.
            Home::Entry(entry) => &unsafe { entry.as_ref() }.pool.pool,
            Home::Own { pool, .. } => pool.pool(),
        }
    }

    fn links(&self) -> Option<Links> {
        match &self.home {
            Home::Entry(_) => self.entry().map(|e| e.links),
            Home::Own { links, .. } => *links,
        }
    }

    /// Every fork, in order.
    fn each(&self, mut f: impl FnMut(ffi::CUstream)) {
        if let Some(entry) = self.entry() {
            let n = self.count.get().min(SLOTS);
            for raw in &entry.streams[..n] {
                f(raw.get() as ffi::CUstream);
            }
        }
        for &raw in self.more.borrow().iter() {
            f(raw as ffi::CUstream);
        }
    }
}

impl Drop for Forks {
    #[inline]
    fn drop(&mut self) {
        if let Some(entry) = self.entry() {
            entry.claimed.set(false);
        }
        if !self.more.get_mut().is_empty() {
            self.give_back_more();
        }
    }
}

impl Forks {
    /// Gives the forks in `more` back to the pool.
    #[cold]
    #[inline(never)]
    fn give_back_more(&mut self) {
        for raw in std::mem::take(self.more.get_mut()) {
            self.pool().give_back(raw);
        }
    }
}

/// How a scope starts: claims this thread's entry for (`ctx`, `priority`) when it is the one
/// used last (in a loop: one thread-local read, no search).
#[inline(always)]
fn start(ctx: ffi::CUcontext, priority: i32) -> Result<Home> {
    let claimed = ENTRIES.try_with(|entries| {
        let entries = entries.0.try_borrow().ok()?;
        let first = *entries.first()?;
        // SAFETY: a live entry of this thread (see `Entries`).
        let e = unsafe { first.as_ref() };
        if e.ctx != ctx as usize || e.priority != priority || e.claimed.get() {
            return None;
        }
        e.claimed.set(true);
        Some(first)
    });
    match claimed {
        Ok(Some(entry)) => Ok(Home::Entry(entry)),
        _ => start_slow(ctx, priority),
    }
}

/// [`start`] when the entry used last is not free or not the one: another entry (moved to the
/// front), a new one, or streams of the scope's own.
#[cold]
#[inline(never)]
fn start_slow(ctx: ffi::CUcontext, priority: i32) -> Result<Home> {
    // An entry of this thread's for (ctx, priority), moved to the front, and whether it was free.
    let found = ENTRIES.try_with(|entries| {
        let mut entries = entries.0.try_borrow_mut().ok()?;
        let i = entries.iter().position(|e| {
            // SAFETY: a live entry of this thread (see `Entries`).
            let e = unsafe { e.as_ref() };
            e.ctx == ctx as usize && e.priority == priority
        })?;
        entries[..=i].rotate_right(1);
        let first = entries[0];
        // SAFETY: as above.
        let e = unsafe { first.as_ref() };
        if e.claimed.replace(true) {
            // A scope nested in another on the same pool: the pool, the thread's links.
            return Some(Err((e.pool, e.links)));
        }
        Some(Ok(first))
    });
    match found {
        Ok(Some(Ok(entry))) => return Ok(Home::Entry(entry)),
        Ok(Some(Err((pool, links)))) => {
            return Ok(Home::Own {
                pool: PoolRef::Shared(pool),
                links: Some(links),
            });
        }
        _ => {}
    }
    let Some(pool) = registered(ctx, priority)? else {
        return Ok(Home::Own {
            pool: PoolRef::Own(own_pool(ctx, priority)),
            links: None,
        });
    };
    let links = Links {
        record: driver_fn!(cuEventRecord),
        wait: driver_fn!(cuStreamWaitEvent),
        event: create_plain_event(ctx)?,
    };
    let entry = NonNull::from(Box::leak(Box::new(ThreadEntry {
        ctx: ctx as usize,
        priority,
        pool,
        links,
        streams: [const { Cell::new(0) }; SLOTS],
        len: Cell::new(0),
        claimed: Cell::new(true),
    })));
    let stored = ENTRIES.try_with(|entries| match entries.0.try_borrow_mut() {
        Ok(mut entries) => {
            entries.insert(0, entry);
            true
        }
        Err(_) => false,
    });
    if stored == Ok(true) {
        return Ok(Home::Entry(entry));
    }
    // Thread teardown (or, never in practice, a busy list): the entry is freed here, with its
    // event, and this scope links through `Stream::wait_stream`.
    // SAFETY: made by `Box::leak` above and not stored anywhere.
    drop(unsafe { Box::from_raw(entry.as_ptr()) });
    Ok(Home::Own {
        pool: PoolRef::Shared(pool),
        links: None,
    })
}

impl std::fmt::Debug for Scope<'_, '_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Scope")
            .field("parent", &self.parent)
            .field("forks", &self.forks.count.get())
            .finish()
    }
}

impl<'scope, 'env> Scope<'scope, 'env> {
    /// A stream leased from the context's pool that starts after the parent's work enqueued so
    /// far. The parent waits for it when the scope ends. The view cannot leave the scope.
    #[inline]
    pub fn fork(&'scope self) -> Result<Stream<'scope>> {
        // The common case, kept small: the entry's next stream and the thread's links.
        let n = self.forks.count.get();
        let parent = self.parent.handle();
        if let Some(entry) = self.forks.entry() {
            if n < entry.len.get() && !is_special(parent) {
                // Held from here on: the scope joins it and leaves it in the entry.
                let raw = entry.streams[n].get() as ffi::CUstream;
                self.forks.count.set(n + 1);
                // SAFETY: the live parent (not a default stream) and a stream the scope holds,
                // both of the parent's context; a scope stays on its thread.
                return match unsafe { entry.links.link(parent, raw) } {
                    Ok(()) => Ok(Stream::from_parts(raw, self.parent.context_raw())),
                    Err((call, code)) => Err(Error::driver(call, code)),
                };
            }
        }
        self.fork_slow()
    }

    /// [`fork`](Scope::fork) with a stream from the pool, a default stream as the parent, or
    /// streams of the scope's own.
    #[cold]
    #[inline(never)]
    fn fork_slow(&'scope self) -> Result<Stream<'scope>> {
        let n = self.forks.count.get();
        let raw = match self.forks.entry() {
            Some(entry) if n < entry.len.get() => entry.streams[n].get(),
            Some(entry) if n < SLOTS => {
                // The entry keeps it for the thread's next scopes (`len == n` here).
                let raw = entry.pool.pool.take_raw()? as usize;
                entry.streams[n].set(raw);
                entry.len.set(n + 1);
                raw
            }
            _ => {
                let raw = self.forks.pool().take_raw()? as usize;
                self.forks.more.borrow_mut().push(raw);
                raw
            }
        };
        // Held from here on: the scope joins it, then gives it back or leaves it in the entry.
        self.forks.count.set(n + 1);
        let raw = raw as ffi::CUstream;
        self.link(self.parent.handle(), raw)?;
        Ok(Stream::from_parts(raw, self.parent.context_raw()))
    }

    /// Makes `to` wait for the work enqueued on `from` so far (both streams of the parent's
    /// context; only the parent can be a default stream, whose context is bound for the call
    /// on it); through `Stream::wait_stream` where the thread has no links.
    fn link(&self, from: ffi::CUstream, to: ffi::CUstream) -> Result<()> {
        let ctx = self.parent.context_raw();
        let Some(links) = self.forks.links() else {
            return Stream::from_parts(to, ctx).wait_stream(&Stream::from_parts(from, ctx));
        };
        {
            let _bound = bind_if_special(from, ctx)?;
            // SAFETY: as in `Links::link` (a default stream's context is bound).
            let code = unsafe { (links.record)(links.event, from) };
            check(code, "cuEventRecord")?;
        }
        let _bound = bind_if_special(to, ctx)?;
        // SAFETY: as in `Links::link` (a default stream's context is bound).
        let code = unsafe { (links.wait)(to, links.event, 0) };
        check(code, "cuStreamWaitEvent")
    }

    /// The parent stream.
    pub fn parent(&self) -> Stream<'env> {
        self.parent
    }

    /// Makes the parent wait for every fork. Returns the first error; every fork is joined
    /// regardless.
    #[inline(always)]
    fn join(&self) -> Result<()> {
        let n = self.forks.count.get();
        let parent = self.parent.handle();
        if let Some(entry) = self.forks.entry() {
            if n <= SLOTS && !is_special(parent) {
                for (i, raw) in entry.streams[..n].iter().enumerate() {
                    // SAFETY: a stream the scope holds and the live parent (not a default
                    // stream), both of the parent's context; a scope stays on its thread.
                    if let Err((call, code)) = unsafe { entry.links.link(raw.get() as _, parent) } {
                        return self.join_from(i + 1, Err(Error::driver(call, code)));
                    }
                }
                return Ok(());
            }
        }
        self.join_from(0, Ok(()))
    }

    /// Joins the forks from the `i`-th on, one by one, after `first` (the result so far).
    #[cold]
    #[inline(never)]
    fn join_from(&self, i: usize, mut first: Result<()>) -> Result<()> {
        let parent = self.parent.handle();
        let mut k = 0;
        self.forks.each(|raw| {
            if k >= i {
                let joined = self.link(raw, parent);
                if first.is_ok() {
                    first = joined;
                }
            }
            k += 1;
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
    ///
    /// Forks are streams of the context's shared pool with this stream's priority. A thread
    /// keeps the streams its scopes forked (up to 8 per context and priority), in order, and an
    /// event for the links, so a scope in a loop makes no driver call beyond its records and
    /// waits and fork `i` is the same stream each time; they go back to the pool (the event is
    /// destroyed) when the thread exits. A scope nested in another on the same pool forks other
    /// streams, leased for the nested scope only. For a context that is not a primary context,
    /// each scope leases its forks from a pool of its own.
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
        // The links call the driver through pointers resolved once per thread, past the lookup
        // that refuses calls inside a host function: the scope asks here instead, once. (A scope
        // is not `Send`, so its forks and joins run on this thread, outside any host function.)
        refuse_in_host_fn("cuEventRecord")?;
        let home = start(self.context_raw(), priority)?;
        let scope = Scope {
            parent: self,
            forks: Forks {
                home,
                count: Cell::new(0),
                more: RefCell::new(Vec::new()),
            },
            _scope: PhantomData,
            _env: PhantomData,
        };
        // Join even if `f` panics: the guard joins while the panic unwinds (its error, if
        // any, is dropped: the panic goes on).
        let guard = JoinOnUnwind(&scope);
        let result = f(&scope);
        std::mem::forget(guard);
        let joined = scope.join();
        let value = result?;
        joined?;
        Ok(value)
    }
}

/// Joins a scope's forks when dropped: only while a panic unwinds out of the scope's closure
/// (on the normal path it is forgotten).
struct JoinOnUnwind<'a, 'scope, 'env>(&'a Scope<'scope, 'env>);

impl Drop for JoinOnUnwind<'_, '_, '_> {
    fn drop(&mut self) {
        let _ = self.0.join();
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

/// The shared pool for `ctx` and `priority` as a counted reference (a capture keeps its forks
/// with their pool until it ends); for a context that is not primary, a pool of the caller's own.
pub(crate) fn shared_pool(ctx: ffi::CUcontext, priority: i32) -> Result<Arc<StreamPool>> {
    Ok(match registered(ctx, priority)? {
        Some(entry) => entry.pool.clone(),
        None => own_pool(ctx, priority),
    })
}
