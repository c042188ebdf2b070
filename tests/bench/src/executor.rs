//! A minimal executor for the `completed()` row: the thread parks until the future's waker
//! unparks it (a 20-line std-only `block_on`).

use std::future::Future;
use std::pin::pin;
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};
use std::thread::{self, Thread};

/// Wakes by unparking the thread that will poll.
pub(crate) struct ThreadWaker(pub(crate) Thread);

impl Wake for ThreadWaker {
    fn wake(self: Arc<Self>) {
        self.0.unpark();
    }
    fn wake_by_ref(self: &Arc<Self>) {
        self.0.unpark();
    }
}

/// A waker that unparks the calling thread.
pub(crate) fn current_thread_waker() -> Waker {
    Waker::from(Arc::new(ThreadWaker(thread::current())))
}

/// Polls `fut` on this thread, parking between polls, until it is ready.
pub(crate) fn block_on<F: Future>(fut: F, waker: &Waker) -> F::Output {
    let mut fut = pin!(fut);
    let mut cx = Context::from_waker(waker);
    loop {
        match fut.as_mut().poll(&mut cx) {
            Poll::Ready(v) => return v,
            // A stale unpark only costs one more poll.
            Poll::Pending => thread::park(),
        }
    }
}
