//! The per-thread current stream (CuPy's `with stream:`, `torch.cuda.stream(s)`).

use std::cell::RefCell;
use std::marker::PhantomData;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::context::Context;
use crate::ffi;
use crate::stream::Stream;

struct Entry {
    token: u64,
    raw: ffi::CUstream,
    ctx: ffi::CUcontext,
    _keep: Option<Context>,
}

thread_local! {
    static STACK: RefCell<(u64, Vec<Entry>)> = const { RefCell::new((0, Vec::new())) };
}

/// Streams named by a live guard, process-wide, so that dropping an `OwnedStream` whose guard
/// was leaked (`mem::forget`) keeps the handle valid instead of leaving a dangling current stream.
static INSTALLED_COUNT: AtomicUsize = AtomicUsize::new(0);
static INSTALLED: Mutex<Vec<usize>> = Mutex::new(Vec::new());

pub(crate) fn is_installed(raw: ffi::CUstream) -> bool {
    if INSTALLED_COUNT.load(Ordering::Acquire) == 0 {
        return false;
    }
    let list = INSTALLED.lock().unwrap_or_else(|e| e.into_inner());
    list.contains(&(raw as usize))
}

/// While alive, makes a stream the current stream of its context on this thread; dropping it
/// restores the previous one. Guards nest, and may be dropped in any order. Not `Send`: the
/// setting belongs to the thread that made it.
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
    pub(crate) fn install(stream: Stream<'a>, keep: Option<Context>) -> CurrentStreamGuard<'a> {
        // Keep the context alive while the entry exists (a primary one can be retained).
        let keep = keep.or_else(|| {
            Context::retain_if_primary(stream.context_raw())
                .ok()
                .flatten()
        });
        let raw = stream.raw();
        {
            let mut list = INSTALLED.lock().unwrap_or_else(|e| e.into_inner());
            list.push(raw as usize);
            INSTALLED_COUNT.fetch_add(1, Ordering::Release);
        }
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
        let mut list = INSTALLED.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(i) = list.iter().position(|&r| r == self.raw as usize) {
            list.swap_remove(i);
            INSTALLED_COUNT.fetch_sub(1, Ordering::Release);
        }
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
