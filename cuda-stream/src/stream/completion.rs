//! `Future`s that resolve when GPU work completes, woken from a host function: std only, no
//! runtime, any executor. Adds `completed` to streams, their owners and events, and keeps the
//! notifier streams that event completions wait on.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context as TaskContext, Poll, Waker};
use std::time::{Duration, Instant};

use crate::base::error::{Error, Result};
use crate::driver::context::{Context, bind};
use crate::driver::event::Event;
use crate::ffi;
use crate::stream::owned::{OwnedStream, StreamOptions};
use crate::stream::pool::PooledStream;
use crate::stream::view::{AsStream, Stream};

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
/// called has finished. Dropping it early is safe: a host function that would complete it still
/// runs and finds nobody waiting.
///
/// When it has to wait, it is woken from a host function, so the waker runs on the driver's
/// thread, where no CUDA call may be made: a waker should only schedule the task (as every
/// executor's does). A task whose last reference the waker drops there may own streams, events or
/// contexts: their destroys are deferred to an ordinary thread (see
/// [`Stream::launch_host_func`](crate::Stream::launch_host_func)), as is anything a
/// `Completion` dropped inside a host function owns.
///
/// # How it waits
///
/// `completed` records an event (one of the context's spare events, so one `cuEventRecord`); the
/// GPU marks it complete as soon as the work ends. **The first poll that finds it unfinished
/// spins** (a busy loop querying the event, as a spinning `synchronize` watches the stream) for
/// up to [`Completion::DEFAULT_SPIN`] (20 µs). Only if the work is still running then does it
/// enqueue a host function, on a notifier stream of the context that waits for the event, which
/// wakes the task; it returns `Poll::Pending`.
///
/// - Work that finishes within the limit, such as an idle stream's round trip or a short kernel,
///   resolves in that poll, about as fast as `synchronize`, and no host function runs at all:
///   the driver's host-function thread, which on an H100 ran a host function 40-80 µs after the
///   kernel before it had finished, is not involved, nor does a pending host function hold back
///   the next work on the stream.
/// - Longer work costs the polling thread up to the limit, once per future, then waits without
///   blocking anything; later polls never spin (they query the event once).
/// - [`Completion::spin_limit`] sets the limit per future: `Duration::ZERO` queries once and
///   then waits (for executors whose threads must not be held at all, or machines with more busy
///   threads than cores, where the spin holds a core the driver's thread may need); a longer
///   limit suits work known to take a bit longer.
///
/// On a stream that is being captured into a graph (by other code), where an event record would
/// become a graph node, `completed` falls back to a host function on the stream itself, which a
/// capture refuses: the future resolves to that error.
///
/// ```no_run
/// # async fn f(stream: cuda_stream::OwnedStream) -> cuda_stream::Result<()> {
/// use std::time::Duration;
/// stream.completed().spin_limit(Duration::ZERO).await?; // never holds the executor's thread
/// # Ok(()) }
/// ```
#[must_use = "futures do nothing unless awaited"]
pub struct Completion {
    /// Set once a host function will complete it: at creation where no event could be
    /// recorded, else by the first poll that gives up spinning.
    shared: Option<Arc<Shared>>,
    error: Option<Error>,
    stream: Option<(usize, usize)>,
    /// How long the next poll that finds the work unfinished may spin; zero once it has.
    spin: Duration,
    /// The event recorded by `completed`, which completes with the work.
    event: Option<Event>,
    /// The event has been seen complete.
    seen: bool,
}

impl std::fmt::Debug for Completion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Completion")
            .field("done", &self.done_without_asking())
            .field("error", &self.error)
            .finish()
    }
}

impl Completion {
    pub(crate) fn on(stream: Stream<'_>) -> Completion {
        match Completion::try_on(stream) {
            Ok(c) => c,
            Err(e) => Completion::failed(e),
        }
    }

    fn try_on(stream: Stream<'_>) -> Result<Completion> {
        let parts = Some((stream.handle() as usize, stream.context_raw() as usize));
        // A default stream resolves through the current context, for the capture check too.
        let bound = if stream.is_default() {
            Some(bind(stream.context_raw())?)
        } else {
            None
        };
        let capturing = crate::driver::capture_query::is_capturing(stream.handle())?;
        // In a capture the event would become a graph node: the host function refuses instead.
        let event = if capturing {
            None
        } else {
            stream.record_event().ok()
        };
        drop(bound);
        if event.is_some() {
            return Ok(Completion {
                shared: None,
                error: None,
                stream: parts,
                spin: Completion::DEFAULT_SPIN,
                event,
                seen: false,
            });
        }
        // No event (a capture, or none could be had): a host function on the stream itself.
        let shared = Arc::new(Shared::default());
        let notify = shared.clone();
        stream.launch_host_func(move || notify.complete())?;
        Ok(Completion {
            shared: Some(shared),
            error: None,
            stream: parts,
            spin: Completion::DEFAULT_SPIN,
            event: None,
            seen: false,
        })
    }

    fn failed(e: Error) -> Completion {
        Completion {
            shared: None,
            error: Some(e),
            stream: None,
            spin: Duration::ZERO,
            event: None,
            seen: false,
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
        if self.error.is_none() {
            self.spin = limit;
        }
        self
    }

    /// Whether the work has completed (never blocks; may query the event).
    pub fn is_complete(&self) -> bool {
        self.done_without_asking()
            || self
                .event
                .as_ref()
                .is_some_and(|e| e.query().is_ok_and(|d| d))
    }

    fn done_without_asking(&self) -> bool {
        self.error.is_some()
            || self.seen
            || self
                .shared
                .as_ref()
                .is_some_and(|s| s.done.load(Ordering::Acquire))
    }

    /// Whether the work is done: the host function has run, or the event has completed.
    fn check(&mut self) -> Result<bool> {
        if self.done_without_asking() {
            return Ok(true);
        }
        if let Some(e) = &self.event {
            self.seen = e.query()?;
        }
        Ok(self.seen)
    }

    /// Spins until the work is done or the limit has passed, then sets the limit to zero, so a
    /// future spins once. Returns whether the work is done.
    ///
    /// A plain busy loop, as the driver's own default wait (`CU_CTX_SCHED_SPIN` where there are
    /// more cores than contexts): yielding between checks was measured to delay the wake-up by
    /// several microseconds on an idle machine (`tests/perf`, BENCHMARKS.md). The event is
    /// queried about once per 100 ns; the flag of a host function, where there is one, between.
    fn spin(&mut self) -> Result<bool> {
        let limit = std::mem::take(&mut self.spin);
        if limit.is_zero() {
            return Ok(false);
        }
        let start = Instant::now();
        loop {
            if let Some(shared) = &self.shared {
                for _ in 0..8 {
                    if shared.done.load(Ordering::Acquire) {
                        return Ok(true);
                    }
                    std::hint::spin_loop();
                }
            }
            if self.check()? {
                return Ok(true);
            }
            if start.elapsed() >= limit {
                return Ok(false);
            }
        }
    }

    /// Makes sure a host function will complete the future: one on the context's notifier
    /// stream, after a wait for the event.
    fn arm(&mut self) -> Result<()> {
        if self.shared.is_some() {
            return Ok(());
        }
        let Some(event) = &self.event else {
            return Ok(());
        };
        let shared = Arc::new(Shared::default());
        let notify = shared.clone();
        let notifier = notifier(event.context_raw())?;
        let s = notifier.as_stream();
        s.wait_event(event)?;
        s.launch_host_func(move || notify.complete())?;
        self.shared = Some(shared);
        Ok(())
    }

    fn poll_inner(&mut self, cx: &mut TaskContext<'_>) -> Result<bool> {
        if let Some(e) = self.error.take() {
            return Err(e);
        }
        if self.check()? || self.spin()? {
            return Ok(true);
        }
        self.arm()?;
        let Some(shared) = self.shared.as_deref() else {
            return Ok(true);
        };
        let mut slot = shared.waker.lock().unwrap_or_else(|e| e.into_inner());
        match &*slot {
            Some(w) if w.will_wake(cx.waker()) => {}
            _ => *slot = Some(cx.waker().clone()),
        }
        drop(slot);
        // Completed between the check and storing the waker: don't sleep on it.
        Ok(shared.done.load(Ordering::Acquire))
    }
}

impl Future for Completion {
    type Output = Result<()>;

    fn poll(self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<Result<()>> {
        let this = self.get_mut();
        match this.poll_inner(cx) {
            Ok(false) => return Poll::Pending,
            Ok(true) => {}
            Err(e) => {
                this.error = None;
                this.seen = true;
                return Poll::Ready(Err(e));
            }
        }
        this.seen = true;
        // Report a panic of a host function that ran before the work completed on the stream
        // (the event completes after every earlier host function).
        if let Some((raw, ctx)) = this.stream {
            let view = Stream::from_parts(raw as _, ctx as _);
            crate::stream::host_panics::report(view.handle(), view.context_raw())?;
        }
        Poll::Ready(Ok(()))
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
            let _ = crate::stream::owned::destroy_or_defer(self.raw);
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
    let raw = crate::stream::owned::create_raw(ctx, keep.as_ref(), StreamOptions::new())?;
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
