//! Where a group's host time goes (feature `test-hooks`; hidden): the calling thread's running
//! totals of the phases of [`Group::run`](crate::nccl::Group::run), for the benchmark's
//! diagnosis of the all-reduce at 1 MiB (`cuda-stream-bench --multi-gpu`, built with its
//! `phases` feature). Each boundary reads the clock (`Instant::now`, some 20 ns), so the totals
//! include that cost; without the feature the marks compile to nothing.

use std::cell::Cell;
use std::time::Instant;

/// The phases, in the order a group passes them.
pub const NAMES: [&str; 8] = [
    "building the group (plans, from Group::new)",
    "asynchronous-error checks (ncclCommGetAsyncError per call)",
    "capture checks (cuStreamIsCapturing per call) and the list of uses",
    "trackers locked, waits for earlier uses",
    "context bound for NCCL (cuCtxGetCurrent, push if needed)",
    "ncclGroupStart, the calls, ncclGroupEnd",
    "binding undone, uses recorded, trackers unlocked",
    "the rest of Group::run",
];

thread_local! {
    static TOTALS: [Cell<u64>; NAMES.len()] = const { [const { Cell::new(0) }; NAMES.len()] };
    static GROUPS: Cell<u64> = const { Cell::new(0) };
    static LAST: Cell<Option<Instant>> = const { Cell::new(None) };
}

/// Starts a group's timing.
pub(crate) fn start() {
    LAST.with(|l| l.set(Some(Instant::now())));
}

/// Ends phase `i` (adds the time since the last mark to it).
pub(crate) fn mark(i: usize) {
    let now = Instant::now();
    if let Some(last) = LAST.with(|l| l.replace(Some(now))) {
        let ns = u64::try_from(now.duration_since(last).as_nanos()).unwrap_or(u64::MAX);
        TOTALS.with(|t| t[i].set(t[i].get().saturating_add(ns)));
    }
    if i == NAMES.len() - 1 {
        GROUPS.with(|g| g.set(g.get() + 1));
        LAST.with(|l| l.set(None));
    }
}

/// This thread's totals in nanoseconds by phase, and the groups counted, since the last call
/// (which resets them).
pub fn take() -> ([u64; NAMES.len()], u64) {
    let totals = TOTALS.with(|t| std::array::from_fn(|i| t[i].replace(0)));
    (totals, GROUPS.with(|g| g.replace(0)))
}
