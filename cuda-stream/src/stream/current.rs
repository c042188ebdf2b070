//! The per-thread current stream (CuPy's `with stream:`, `torch.cuda.stream(s)`): the guard, the
//! lookup, and `make_current` on streams and their owners.

use std::cell::RefCell;
use std::marker::PhantomData;

use crate::driver::context::Context;
use crate::ffi;
use crate::stream::owned::OwnedStream;
use crate::stream::pool::PooledStream;
use crate::stream::view::{AsStream, Stream};

struct Entry {
    token: u64,
    raw: ffi::CUstream,
    ctx: ffi::CUcontext,
    _keep: Option<Context>,
}

thread_local! {
    static STACK: RefCell<(u64, Vec<Entry>)> = const { RefCell::new((0, Vec::new())) };
}

/// While alive, makes a stream the current stream of its context on this thread; dropping it
/// restores the previous one. Guards nest, and may be dropped in any order. Not `Send`: the
/// setting belongs to the thread that made it.
///
/// A guard leaked with `mem::forget` names its stream for the rest of the process: the stream is
/// never destroyed, no [`StreamPool`](crate::StreamPool) (nor a scope's) lends it again, and no
/// graph capture begins on it or forks it, so that [`current_stream`] never lends a view of a
/// stream that is being captured.
///
/// ```no_run
/// use cuda_stream::{Context, current_stream};
///
/// let ctx = Context::primary(0)?;
/// let s = ctx.new_stream()?;
/// {
///     let _guard = s.make_current();
///     current_stream(&ctx, |cur| assert_eq!(cur, s.as_stream()));
/// }
/// current_stream(&ctx, |cur| assert_eq!(cur, ctx.legacy_stream()));
/// # use cuda_stream::AsStream;
/// # Ok::<(), cuda_stream::Error>(())
/// ```
#[must_use = "the stream is current only while the guard lives"]
pub struct CurrentStreamGuard<'a> {
    token: u64,
    raw: ffi::CUstream,
    _stream: PhantomData<Stream<'a>>,
    _not_send: PhantomData<*const ()>,
}

impl std::fmt::Debug for CurrentStreamGuard<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CurrentStreamGuard")
            .field("raw", &self.raw)
            .finish()
    }
}

impl<'a> CurrentStreamGuard<'a> {
    fn install(stream: Stream<'a>, keep: Option<Context>) -> CurrentStreamGuard<'a> {
        // Keep the context alive while the entry exists (a primary one can be retained).
        let keep = keep.or_else(|| {
            Context::retain_if_primary(stream.context_raw())
                .ok()
                .flatten()
        });
        let raw = stream.handle();
        crate::stream::guarded_streams::add(raw);
        let token = STACK.with(|s| {
            let mut s = s.borrow_mut();
            s.0 += 1;
            let token = s.0;
            s.1.push(Entry {
                token,
                raw,
                ctx: stream.context_raw(),
                _keep: keep,
            });
            token
        });
        CurrentStreamGuard {
            token,
            raw,
            _stream: PhantomData,
            _not_send: PhantomData,
        }
    }
}

impl Drop for CurrentStreamGuard<'_> {
    fn drop(&mut self) {
        let _ = STACK.try_with(|s| {
            if let Ok(mut s) = s.try_borrow_mut() {
                if let Some(i) = s.1.iter().rposition(|e| e.token == self.token) {
                    s.1.remove(i);
                }
            }
        });
        crate::stream::guarded_streams::remove(self.raw);
    }
}

/// Calls `f` with this thread's current stream for `ctx`: the stream of the innermost live
/// [`CurrentStreamGuard`] for that context, or the context's legacy default stream if none.
/// The view is lent to a closure because the guard that keeps it alive may end right after.
pub fn current_stream<R>(ctx: &Context, f: impl FnOnce(Stream<'_>) -> R) -> R {
    let ctx_raw = ctx.raw();
    let found = STACK
        .try_with(|s| {
            s.borrow()
                .1
                .iter()
                .rev()
                .find(|e| e.ctx == ctx_raw)
                .map(|e| e.raw)
        })
        .ok()
        .flatten();
    match found {
        Some(raw) => f(Stream::from_parts(raw, ctx_raw)),
        None => f(ctx.legacy_stream()),
    }
}

/// The raw handle of [`current_stream`], for passing to C libraries that take a `cudaStream_t`.
pub fn current_stream_raw(ctx: &Context) -> ffi::CUstream {
    current_stream(ctx, |s| s.raw())
}

impl<'a> Stream<'a> {
    /// Makes this stream the calling thread's current stream for its context until the guard is
    /// dropped (CuPy's `with stream:`, `torch.cuda.stream(s)`); see [`current_stream`].
    pub fn make_current(self) -> CurrentStreamGuard<'a> {
        CurrentStreamGuard::install(self, None)
    }
}

impl OwnedStream {
    /// Makes this stream the calling thread's current stream for its context until the guard is
    /// dropped; see [`Stream::make_current`].
    pub fn make_current(&self) -> CurrentStreamGuard<'_> {
        CurrentStreamGuard::install(self.as_stream(), Some(self.context().clone()))
    }
}

impl PooledStream<'_> {
    /// Makes this stream the calling thread's current stream; see [`Stream::make_current`].
    pub fn make_current(&self) -> CurrentStreamGuard<'_> {
        self.as_stream().make_current()
    }
}
