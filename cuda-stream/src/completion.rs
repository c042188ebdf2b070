//! `Future`s that resolve when GPU work completes, woken from a host function: std only, no
//! runtime, any executor. Adds `completed` to streams, their owners and events, and keeps the
//! notifier streams that event completions wait on.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context as TaskContext, Poll, Waker};
use std::time::{Duration, Instant};

use crate::context::Context;
use crate::error::{Error, Result};
use crate::event::Event;
use crate::ffi;
use crate::owned::{OwnedStream, StreamOptions};
use crate::pool::PooledStream;
use crate::stream::{AsStream, Stream};

#[derive(Default)]
struct Shared {
    done: AtomicBool,
    waker: Mutex<Option<Waker>>,
}

impl Shared {
    fn complete(&self) {
        self.done.store(true, Ordering::Release);
        let waker = self.waker.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(w) = waker {
            w.wake();
        }
    }
}

/// Resolves once the work enqueued before [`Stream::completed`] or [`Event::completed`] was
/// called has finished. Dropping it early is safe: the host function that completes it still
/// runs and finds nobody waiting.
///
/// It is woken from a host function, so the waker runs on the driver's thread, where no CUDA
/// call may be made: a waker should only schedule the task (as every executor's does). A task
/// whose last reference the waker drops there may own streams, events or contexts: their
/// destroys are deferred to an ordinary thread (see
/// [`Stream::launch_host_func`](crate::Stream::launch_host_func)), as is anything a
/// `Completion` dropped inside a host function owns.
///
/// # How it waits
///
/// A host function enqueued by `completed` marks the future done and wakes the task. A task whose
/// thread has gone to sleep then pays a wake-up (a futex wake from the driver's thread, then the
/// scheduler), about as long again as the host function's own round trip, where `synchronize`
/// spins and sees the work finish at once. So **the first poll that finds the work unfinished
/// spins** (a busy loop reading one atomic flag, as `synchronize` spins by default) for up to
/// [`Completion::DEFAULT_SPIN`] (20 µs) before it registers the waker and returns
/// `Poll::Pending`.
///
/// - Work that finishes within the limit, such as an idle stream's round trip, resolves in that
///   poll, about as fast as `synchronize`.
/// - Longer work costs the polling thread up to the limit, once per future, then waits without
///   blocking anything; later polls never spin.
/// - [`Completion::spin_limit`] sets the limit per future: `Duration::ZERO` never spins (for
///   executors whose threads must not be held at all, or machines with more busy threads than
///   cores, where the spin holds a core the driver's thread may need and parking at once wakes
///   sooner); a longer limit suits work known to take a bit longer than an idle round trip.
///
/// ```no_run
/// # async fn f(stream: cuda_stream::OwnedStream) -> cuda_stream::Result<()> {
/// use std::time::Duration;
/// stream.completed().spin_limit(Duration::ZERO).await?; // never holds the executor's thread
/// # Ok(()) }
/// ```
#[must_use = "futures do nothing unless awaited"]
pub struct Completion {
    shared: Option<Arc<Shared>>,
    error: Option<Error>,
    stream: Option<(usize, usize)>,
    /// How long the next poll that finds the work unfinished may spin; zero once it has.
    spin: Duration,
}

impl std::fmt::Debug for Completion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let done = self
            .shared
            .as_ref()
            .is_some_and(|s| s.done.load(Ordering::Acquire));
        f.debug_struct("Completion")
            .field("done", &done)
            .field("error", &self.error)
            .finish()
    }
}

impl Completion {
    pub(crate) fn on(stream: Stream<'_>) -> Completion {
        let shared = Arc::new(Shared::default());
        let notify = shared.clone();
        match stream.launch_host_func(move || notify.complete()) {
            Ok(()) => Completion {
                shared: Some(shared),
                error: None,
                stream: Some((stream.raw() as usize, stream.context_raw() as usize)),
                spin: Completion::DEFAULT_SPIN,
            },
            Err(e) => Completion::failed(e),
        }
    }

    fn failed(e: Error) -> Completion {
        Completion {
            shared: None,
            error: Some(e),
            stream: None,
            spin: Duration::ZERO,
        }
    }

    /// How long the first poll that finds the work unfinished spins before returning
    /// `Poll::Pending`, unless [`Completion::spin_limit`] says otherwise: about twice an idle
    /// stream's host-function round trip.
    pub const DEFAULT_SPIN: Duration = Duration::from_micros(20);

    /// Sets how long the first poll that finds the work unfinished may spin, waiting for it,
    /// before it returns `Poll::Pending` (see [How it waits](Completion#how-it-waits)).
    /// `Duration::ZERO` never spins.
    pub fn spin_limit(mut self, limit: Duration) -> Completion {
        if self.shared.is_some() {
            self.spin = limit;
        }
        self
    }

    /// Whether the work has completed (never blocks).
    pub fn is_complete(&self) -> bool {
        self.error.is_some()
            || self
                .shared
                .as_ref()
                .is_some_and(|s| s.done.load(Ordering::Acquire))
    }
}

impl Future for Completion {
    type Output = Result<()>;

    fn poll(self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<Result<()>> {
        let this = self.get_mut();
        if let Some(e) = this.error.take() {
            return Poll::Ready(Err(e));
        }
        let Some(shared) = this.shared.as_deref() else {
            return Poll::Ready(Ok(()));
        };
        if !shared.done.load(Ordering::Acquire) && !spin_until_done(shared, &mut this.spin) {
            let mut slot = shared.waker.lock().unwrap_or_else(|e| e.into_inner());
            match &*slot {
                Some(w) if w.will_wake(cx.waker()) => {}
                _ => *slot = Some(cx.waker().clone()),
            }
            drop(slot);
            // Completed between the check and storing the waker: don't sleep on it.
            if !shared.done.load(Ordering::Acquire) {
                return Poll::Pending;
            }
        }
        // Report a panic of a host function that ran before this one on the stream.
        if let Some((raw, ctx)) = this.stream {
            let view = Stream::from_parts(raw as _, ctx as _);
            crate::panics::report(view.raw(), view.context_raw())?;
        }
        Poll::Ready(Ok(()))
    }
}

/// Spins until the host function has run or `limit` has passed, then sets `limit` to zero, so a
/// future spins once. Returns whether the work is done.
///
/// A plain busy loop, as the driver's own default wait (`CU_CTX_SCHED_SPIN` where there are more
/// cores than contexts): yielding between checks was measured to delay the wake-up by several
/// microseconds on an idle machine (`tests/perf`, BENCHMARKS.md).
fn spin_until_done(shared: &Shared, limit: &mut Duration) -> bool {
    let limit = std::mem::take(limit);
    if limit.is_zero() {
        return false;
    }
    let start = Instant::now();
    loop {
        // Reading the clock costs more than a check of the flag: check a few times per read.
        for _ in 0..8 {
            if shared.done.load(Ordering::Acquire) {
                return true;
            }
            std::hint::spin_loop();
        }
        if start.elapsed() >= limit {
            return shared.done.load(Ordering::Acquire);
        }
    }
}

impl<'a> Stream<'a> {
    /// A future that resolves when the work enqueued on this stream so far has finished. It is
    /// woken from a host function enqueued now, so no thread blocks; it works under any executor.
    /// Its first poll that finds the work unfinished spins briefly before it returns
    /// `Poll::Pending`; see [`Completion`] for the trade-off and [`Completion::spin_limit`].
    ///
    /// ```no_run
    /// # async fn f(ctx: cuda_stream::Context) -> cuda_stream::Result<()> {
    /// let stream = ctx.new_stream()?;
    /// // ... enqueue work ...
    /// stream.completed().await?; // the executor's thread is free meanwhile
    /// # Ok(()) }
    /// ```
    pub fn completed(self) -> Completion {
        Completion::on(self)
    }
}

impl Event {
    /// A future that resolves when the work this event captured has finished (for its latest
    /// record before this call). It is woken from a host function on a notifier stream of the
    /// event's context that waits for the event; futures of one context resolve in the order
    /// their `completed` calls were made.
    pub fn completed(&self) -> Completion {
        match notifier(self.context_raw()) {
            Ok(notifier) => {
                let s = notifier.as_stream();
                match s.wait_event(self) {
                    Ok(()) => Completion::on(s),
                    Err(e) => Completion::failed(e),
                }
            }
            Err(e) => Completion::failed(e),
        }
    }
}

impl OwnedStream {
    /// See [`Stream::completed`].
    pub fn completed(&self) -> Completion {
        self.as_stream().completed()
    }
}

impl PooledStream<'_> {
    /// See [`Stream::completed`].
    pub fn completed(&self) -> Completion {
        self.as_stream().completed()
    }
}

/// A stream used only to wait for events and run completion host functions: shared per primary
/// context for the life of the process, or temporary (destroyed right after use; the driver
/// finishes its pending work first) for other contexts.
struct Notifier {
    raw: ffi::CUstream,
    ctx: ffi::CUcontext,
    temporary: bool,
}

impl AsStream for Notifier {
    fn as_stream(&self) -> Stream<'_> {
        Stream::from_parts(self.raw, self.ctx)
    }
}

impl Drop for Notifier {
    fn drop(&mut self) {
        if self.temporary {
            // Created by `notifier` for this value alone; destroyed (or queued) once.
            let _ = crate::owned::destroy_or_defer(self.raw);
        }
    }
}

fn notifier(ctx: ffi::CUcontext) -> Result<Notifier> {
    static SHARED: Mutex<Vec<(usize, usize, Context)>> = Mutex::new(Vec::new());
    let mut shared = SHARED.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((_, raw, _)) = shared.iter().find(|(c, _, _)| *c == ctx as usize) {
        return Ok(Notifier {
            raw: *raw as ffi::CUstream,
            ctx,
            temporary: false,
        });
    }
    let keep = Context::retain_if_primary(ctx)?;
    let raw = crate::owned::create_raw(ctx, keep.as_ref(), StreamOptions::new())?;
    match keep {
        Some(keep) => {
            shared.push((ctx as usize, raw as usize, keep));
            Ok(Notifier {
                raw,
                ctx,
                temporary: false,
            })
        }
        None => Ok(Notifier {
            raw,
            ctx,
            temporary: true,
        }),
    }
}
