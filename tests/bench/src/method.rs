//! The measurement method: batches, repetitions, interleaving and medians.
//!
//! A [`Case`] holds one row's bodies: the raw driver call and the safe call, each run as a batch
//! of many iterations per repetition. Repetitions alternate which side goes first, and the ratio
//! is the median of the repetitions' own safe/raw ratios, each from two batches run back to back,
//! so drift of the machine between repetitions cancels out.

use std::time::Instant;

/// How much to run.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Config {
    pub(crate) quick: bool,
    /// Repetitions per operation (the median is reported).
    pub(crate) reps: usize,
    /// Iterations per repetition for operations of about 100 ns.
    pub(crate) fast: u64,
    /// Iterations per repetition for operations of about a microsecond.
    pub(crate) medium: u64,
    /// Iterations per repetition for operations of several microseconds (create, round trips).
    pub(crate) slow: u64,
    /// Host functions per throughput batch.
    pub(crate) host_batch: u64,
    /// First-use child processes.
    pub(crate) children: usize,
}

impl Config {
    pub(crate) fn full() -> Config {
        Config {
            quick: false,
            reps: 15,
            fast: 20_000,
            medium: 5_000,
            slow: 2_000,
            host_batch: 100_000,
            children: 5,
        }
    }

    pub(crate) fn quick() -> Config {
        Config {
            quick: true,
            reps: 3,
            fast: 500,
            medium: 200,
            slow: 50,
            host_batch: 1_000,
            children: 2,
        }
    }
}

/// The median of `v` (sorts it).
pub(crate) fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n == 0 {
        return f64::NAN;
    }
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// Runs `body` `iters` times; returns ns per iteration.
#[inline(always)]
fn batch(iters: u64, body: &mut impl FnMut()) -> f64 {
    let t = Instant::now();
    for _ in 0..iters {
        body();
    }
    t.elapsed().as_nanos() as f64 / iters as f64
}

/// What one row measured.
#[derive(Debug, Clone)]
pub(crate) struct Measured {
    /// Median ns per operation of the raw side.
    pub(crate) raw_ns: f64,
    /// Median ns per operation of the safe side.
    pub(crate) safe_ns: f64,
    /// The median of the repetitions' own safe/raw ratios.
    pub(crate) ratio: f64,
}

fn nothing() {}

/// One row's bodies and iteration counts, run by [`Case::run`].
///
/// ```ignore
/// case(cfg.fast, || raw_call(), || safe_call()).settle(|| drain()).run(cfg)
/// ```
#[derive(Debug)]
#[must_use = "a case measures nothing until `run`"]
pub(crate) struct Case<R, S, T> {
    raw_iters: u64,
    safe_iters: u64,
    per_iter: u64,
    raw: R,
    safe: S,
    settle: T,
}

/// A case whose two bodies each run `iters` times per repetition, one operation per iteration,
/// with nothing to drain between batches.
pub(crate) fn case<R: FnMut(), S: FnMut()>(iters: u64, raw: R, safe: S) -> Case<R, S, fn()> {
    Case {
        raw_iters: iters,
        safe_iters: iters,
        per_iter: 1,
        raw,
        safe,
        settle: nothing,
    }
}

impl<R: FnMut(), S: FnMut(), T: FnMut()> Case<R, S, T> {
    /// Iterations of the safe body per repetition, where it differs from the raw body's (a much
    /// cheaper safe call needs more iterations for a measurable batch).
    pub(crate) fn safe_iters(mut self, iters: u64) -> Self {
        self.safe_iters = iters;
        self
    }

    /// Operations one iteration performs (ns are reported per operation).
    pub(crate) fn per_iter(mut self, ops: u64) -> Self {
        self.per_iter = ops;
        self
    }

    /// Runs `settle`, untimed, after every batch, to drain what the batch enqueued.
    pub(crate) fn settle<T2: FnMut()>(self, settle: T2) -> Case<R, S, T2> {
        Case {
            raw_iters: self.raw_iters,
            safe_iters: self.safe_iters,
            per_iter: self.per_iter,
            raw: self.raw,
            safe: self.safe,
            settle,
        }
    }

    /// Median ns per operation of each side, and the median of the repetitions' own safe/raw
    /// ratios. Repetitions interleave the two sides, alternating which goes first.
    pub(crate) fn run(self, cfg: &Config) -> Measured {
        let Case {
            raw_iters,
            safe_iters,
            per_iter,
            mut raw,
            mut safe,
            mut settle,
        } = self;
        // Warm-up: caches, lazily resolved symbols, the driver's own free lists.
        batch(raw_iters.clamp(1, 1_000), &mut raw);
        settle();
        batch(safe_iters.clamp(1, 1_000), &mut safe);
        settle();
        let (mut r, mut s) = (Vec::with_capacity(cfg.reps), Vec::with_capacity(cfg.reps));
        for rep in 0..cfg.reps {
            if rep % 2 == 0 {
                r.push(batch(raw_iters, &mut raw));
                settle();
                s.push(batch(safe_iters, &mut safe));
                settle();
            } else {
                s.push(batch(safe_iters, &mut safe));
                settle();
                r.push(batch(raw_iters, &mut raw));
                settle();
            }
        }
        let per = per_iter as f64;
        // The ratio is the median of each repetition's own ratio: the two batches of a
        // repetition run back to back, so drift of the machine between repetitions cancels out.
        let mut ratios: Vec<f64> = r.iter().zip(&s).map(|(raw, safe)| safe / raw).collect();
        let ratio = median(&mut ratios);
        Measured {
            raw_ns: median(&mut r) / per,
            safe_ns: median(&mut s) / per,
            ratio,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_of_odd_and_even_counts() {
        assert_eq!(median(&mut [3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&mut [4.0, 1.0, 3.0, 2.0]), 2.5);
        assert!(median(&mut []).is_nan());
    }

    #[test]
    fn a_case_runs_warm_up_and_every_repetition_and_settles_after_each_batch() {
        let cfg = Config {
            reps: 5,
            ..Config::quick()
        };
        let (mut raw, mut safe, mut settled) = (0u64, 0u64, 0u64);
        let m = case(10, || raw += 1, || safe += 1)
            .safe_iters(20)
            .settle(|| settled += 1)
            .run(&cfg);
        // One warm-up batch each (clamped to the iteration count), then 5 repetitions.
        assert_eq!(raw, 10 + 5 * 10);
        assert_eq!(safe, 20 + 5 * 20);
        assert_eq!(settled, 2 + 2 * 5);
        assert!(m.raw_ns >= 0.0 && m.safe_ns >= 0.0);
    }
}
