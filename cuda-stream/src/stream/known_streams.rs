//! The streams this crate created and has not destroyed or handed over, and the values of the
//! layers above that refer to one of them by handle alone (a buffer's last use on it, with no
//! event recorded after it). Such a value is told before the stream goes
//! ([`StreamUser::stream_ending`]), while the handle is still valid, so it can record the event
//! it skipped: a buffer used on one stream only never pays for one.
//!
//! A stream that is not here (borrowed from another library, or the per-thread default stream,
//! which is another stream on every thread) can end without notice, so its users record an event
//! after every use instead. Creating and destroying a stream costs one uncontended lock here.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::{Mutex, MutexGuard, Weak};

use crate::ffi;

/// A value that refers to a stream of this crate by handle and must hear of its end.
pub(crate) trait StreamUser: Send + Sync {
    /// `stream` is about to be destroyed or handed over: after this returns the handle must not
    /// be used. Called on an ordinary thread, or inside a host function (`in_host_fn`), where no
    /// CUDA call may be made.
    fn stream_ending(&self, stream: ffi::CUstream);
}

type Users = Vec<Weak<dyn StreamUser>>;

/// Hashes a stream handle (an address: already well spread) as itself.
#[derive(Default)]
struct HandleHasher(u64);

impl Hasher for HandleHasher {
    fn finish(&self) -> u64 {
        // Addresses are aligned: the low bits carry little.
        (self.0 >> 4) ^ (self.0 >> 20)
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(b);
        }
    }
    fn write_usize(&mut self, n: usize) {
        self.0 = n as u64;
    }
}

type Map = HashMap<usize, Users, BuildHasherDefault<HandleHasher>>;

/// Known streams, each with the users that asked to hear of its end.
static KNOWN: Mutex<Option<Map>> = Mutex::new(None);

fn known() -> MutexGuard<'static, Option<Map>> {
    KNOWN.lock().unwrap_or_else(|e| e.into_inner())
}

/// This crate created `raw` and will tell its users before it goes.
pub(crate) fn created(raw: ffi::CUstream) {
    known()
        .get_or_insert_with(Map::default)
        .insert(raw as usize, Vec::new());
}

/// `raw` is about to be destroyed or handed over: forgets it and tells its users. The users are
/// told after the lock is released (they take locks of their own).
pub(crate) fn ending(raw: ffi::CUstream) {
    let users = known()
        .as_mut()
        .and_then(|m| m.remove(&(raw as usize)))
        .unwrap_or_default();
    for user in users.iter().filter_map(Weak::upgrade) {
        user.stream_ending(raw);
    }
}

/// Registers `user` to hear of the end of `raw` if this crate created `raw`; `false` (nothing
/// registered) for any other stream, which may end without notice. A user registers once per
/// stream.
pub(crate) fn add_user(raw: ffi::CUstream, user: Weak<dyn StreamUser>) -> bool {
    let mut guard = known();
    let Some(users) = guard.as_mut().and_then(|m| m.get_mut(&(raw as usize))) else {
        return false;
    };
    // Users that are gone are dropped here, when the list has doubled since (amortised O(1)
    // per registration, and at most twice the live users kept). Each user registers once per
    // stream (it remembers the streams it asked about), so no duplicate check is needed.
    if users.len() >= 8 && users.len().is_power_of_two() {
        users.retain(|u| u.strong_count() > 0);
    }
    users.push(user);
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    struct Counter(AtomicUsize);
    impl StreamUser for Counter {
        fn stream_ending(&self, _: ffi::CUstream) {
            self.0.fetch_add(1, Ordering::Relaxed);
        }
    }

    #[test]
    fn users_of_a_known_stream_hear_of_its_end_once() {
        let raw = 0x7000_0010usize as ffi::CUstream;
        let user = Arc::new(Counter(AtomicUsize::new(0)));
        let weak: Weak<dyn StreamUser> = Arc::downgrade(&user) as Weak<dyn StreamUser>;
        assert!(
            !add_user(raw, weak.clone()),
            "an unknown stream takes no users"
        );
        created(raw);
        assert!(add_user(raw, weak));
        ending(raw);
        assert_eq!(user.0.load(Ordering::Relaxed), 1);
        ending(raw);
        assert_eq!(
            user.0.load(Ordering::Relaxed),
            1,
            "an ended stream is forgotten"
        );
        let weak: Weak<dyn StreamUser> = Arc::downgrade(&user) as Weak<dyn StreamUser>;
        assert!(!add_user(raw, weak));
    }
}
