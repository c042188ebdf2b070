//! For this workspace's tests (feature `test-hooks`): named points inside the crate where a test
//! can hold the thread that reaches one, to decide what another thread does in a window that has
//! no driver call in it (where the test driver's `pause_after` cannot reach).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

/// The point between a use found to repeat its last one on a stream (the tracker locked) and the
/// enqueueing of its work (`Uses::run_repeated`).
pub(crate) const REPEATED_USE: &str = "repeated use";

/// The point where a stream's epoch that no value holds ends (its handle taken, or the stream
/// destroyed), found unheld and not locked yet (`known_streams::ending`).
pub(crate) const UNHELD_END: &str = "unheld end";

struct Hold {
    /// The point armed: the next thread to reach it is held.
    armed: Option<&'static str>,
    held: bool,
}

static HOLD: Mutex<Hold> = Mutex::new(Hold {
    armed: None,
    held: false,
});
static CHANGED: Condvar = Condvar::new();
/// Whether a point is armed (read without the lock on every pass).
static ARMED: AtomicBool = AtomicBool::new(false);

fn hold() -> std::sync::MutexGuard<'static, Hold> {
    HOLD.lock().unwrap_or_else(|e| e.into_inner())
}

/// Holds the calling thread here if `point` is armed, until [`release`].
pub(crate) fn reached(point: &'static str) {
    if !ARMED.load(Ordering::Acquire) {
        return;
    }
    let mut h = hold();
    if h.armed != Some(point) {
        return;
    }
    h.armed = None;
    ARMED.store(false, Ordering::Release);
    h.held = true;
    CHANGED.notify_all();
    while h.held {
        h = CHANGED.wait(h).unwrap_or_else(|e| e.into_inner());
    }
}

/// Arms `point` (one of this module's names): the next thread to reach it is held.
pub fn hold_at(point: &str) {
    let known = [REPEATED_USE, UNHELD_END];
    let p = known
        .into_iter()
        .find(|k| *k == point)
        .unwrap_or_else(|| panic!("no hold point {point:?}"));
    hold().armed = Some(p);
    ARMED.store(true, Ordering::Release);
}

/// Waits (60 s at most, then panics naming `what`) until a thread is held.
pub fn wait_until_held(what: &str) {
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut h = hold();
    while !h.held {
        let left = deadline.saturating_duration_since(Instant::now());
        assert!(!left.is_zero(), "{what}");
        h = CHANGED
            .wait_timeout(h, left)
            .unwrap_or_else(|e| e.into_inner())
            .0;
    }
}

/// Lets the held thread go on, and disarms a point not reached yet.
pub fn release() {
    let mut h = hold();
    h.armed = None;
    ARMED.store(false, Ordering::Release);
    h.held = false;
    CHANGED.notify_all();
}
