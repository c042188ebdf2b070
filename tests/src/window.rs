//! Whether a "still pending" observation is meaningful.

use std::time::{Duration, Instant};

/// Host time since just before GPU work that takes at least `min` was enqueued. While less than
/// half of `min` has passed on the host, the work cannot have finished, so an observation made
/// before [`Window::open`] returns true that says "done" is a real failure; an observation made
/// later proves nothing either way (the host was descheduled) and is only reported.
#[derive(Debug, Clone, Copy)]
pub struct Window {
    start: Instant,
    min: Duration,
}

impl Window {
    /// Starts the window; call it right before enqueueing the work.
    pub fn start(min: Duration) -> Window {
        Window {
            start: Instant::now(),
            min,
        }
    }

    /// Whether the work enqueued after [`Window::start`] surely has not finished yet.
    pub fn open(&self) -> bool {
        self.start.elapsed() < self.min / 2
    }

    /// Host time since the start.
    pub fn elapsed(&self) -> Duration {
        self.start.elapsed()
    }

    /// Asserts `pending` if the observation just made fell inside the window, else reports it.
    #[track_caller]
    pub fn assert_pending(&self, pending: bool, what: &str) {
        if self.open() {
            assert!(pending, "{what}: reported done while the work surely runs");
        } else {
            eprintln!(
                "note: {what}: observed after {:?} (window {:?}), pending={pending}: not checked",
                self.elapsed(),
                self.min / 2
            );
        }
    }
}
