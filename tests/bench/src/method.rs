//! The measurement method: batches, repetitions, interleaving and medians.
//!
//! A [`Case`] holds one row's bodies: the raw driver call and the safe call (and the peer's), each
//! run as a batch of many iterations per repetition. The number of repetitions is even, and each
//! pair of repetitions runs the sides in one order and then in the reverse order, so every side
//! runs before the raw side in exactly half of them. The ratio is the median of the repetitions'
//! own side/raw ratios, each from batches run back to back, so drift of the machine between
//! repetitions cancels out; the medians of the raw-first and the side-first halves are reported
//! too, so an effect of running first or second shows instead of hiding in the median.

use std::time::Instant;

/// How much to run.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Config {
    pub(crate) quick: bool,
    /// Repetitions per operation (the median is reported): even, half of them with the raw side
    /// first.
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
    /// Whether to run the cudarc column (`--no-cudarc` leaves it out).
    pub(crate) cudarc: bool,
    /// The groups of rows to run (`--only`), a bit per entry of `rows::GROUPS`; all when 0.
    /// With a choice, the first-use children and the bandwidth lines are left out too.
    pub(crate) only: u32,
}

impl Config {
    /// Whether the group of rows `group` (an entry of `rows::GROUPS`) runs.
    pub(crate) fn runs(&self, group: &str) -> bool {
        let bit = crate::rows::group_index(group);
        self.only == 0 || bit.is_some_and(|b| self.only & (1 << b) != 0)
    }
}

impl Config {
    pub(crate) fn full() -> Config {
        Config {
            quick: false,
            reps: 16,
            fast: 20_000,
            medium: 5_000,
            slow: 2_000,
            host_batch: 100_000,
            children: 5,
            cudarc: true,
            only: 0,
        }
    }

    pub(crate) fn quick() -> Config {
        Config {
            quick: true,
            reps: 4,
            fast: 500,
            medium: 200,
            slow: 50,
            host_batch: 1_000,
            children: 2,
            cudarc: true,
            only: 0,
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

/// The spread of a row's per-repetition ratios.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Spread {
    pub(crate) min: f64,
    /// The first quartile.
    pub(crate) q1: f64,
    /// The third quartile.
    pub(crate) q3: f64,
    pub(crate) max: f64,
}

/// The `q` quantile (0 to 1) of sorted `v`, interpolated linearly between the closest ranks.
fn quantile(sorted: &[f64], q: f64) -> f64 {
    match sorted.len() {
        0 => f64::NAN,
        1 => sorted[0],
        n => {
            let pos = q * (n - 1) as f64;
            let (lo, frac) = (pos.floor() as usize, pos.fract());
            let hi = (lo + 1).min(n - 1);
            sorted[lo] + (sorted[hi] - sorted[lo]) * frac
        }
    }
}

impl Spread {
    /// Min, quartiles and max of `v`.
    pub(crate) fn of(v: &[f64]) -> Spread {
        let mut sorted = v.to_vec();
        sorted.sort_by(f64::total_cmp);
        Spread {
            min: quantile(&sorted, 0.0),
            q1: quantile(&sorted, 0.25),
            q3: quantile(&sorted, 0.75),
            max: quantile(&sorted, 1.0),
        }
    }
}

/// One side's result: the median ns per operation and, for a side compared with the raw one,
/// the median and spread of the per-repetition ratios to it, and their median in each order.
#[derive(Debug, Clone)]
pub(crate) struct Side {
    pub(crate) ns: f64,
    pub(crate) ratio: f64,
    pub(crate) spread: Spread,
    /// The median ratio over the repetitions in which the raw side ran before this one.
    pub(crate) raw_first: f64,
    /// The median ratio over the repetitions in which this side ran before the raw one.
    pub(crate) side_first: f64,
}

/// What the peer column of a row holds.
#[derive(Debug, Clone)]
pub(crate) enum Peer {
    Measured(Side),
    /// The peer has no equivalent of the operation: why.
    NoEquivalent(&'static str),
    /// The peer is not available in this run.
    NotRun,
}

/// What one row measured.
#[derive(Debug, Clone)]
pub(crate) struct Measured {
    /// Median ns per operation of the raw side.
    pub(crate) raw_ns: f64,
    /// The safe side, with its ratios to the raw side.
    pub(crate) safe: Side,
    /// The peer side (cudarc), with its ratios to the raw side.
    pub(crate) peer: Peer,
}

fn nothing() {}

/// The orders the sides run in, one per repetition, cycling. Each even-numbered order is followed
/// by its reverse, so any even number of repetitions runs each pair of sides in either order
/// equally often. Two sides alternate; three go through all six orders, so over six repetitions
/// each side also runs first, second and last equally often.
const ORDERS_2: [&[usize]; 2] = [&[0, 1], &[1, 0]];
const ORDERS_3: [&[usize]; 6] = [
    &[0, 1, 2],
    &[2, 1, 0],
    &[1, 2, 0],
    &[0, 2, 1],
    &[2, 0, 1],
    &[1, 0, 2],
];

/// The order of repetition `rep` with `sides` sides (2 or 3).
fn order(sides: usize, rep: usize) -> &'static [usize] {
    let orders: &[&'static [usize]] = if sides == 3 { &ORDERS_3 } else { &ORDERS_2 };
    orders[rep % orders.len()]
}

/// Whether the raw side (0) runs before `side` in `order`.
fn raw_before(order: &[usize], side: usize) -> bool {
    let at = |s: usize| order.iter().position(|&x| x == s);
    at(0) < at(side)
}

/// One side's [`Side`] from the raw side's and its own ns per batch, repetition by repetition
/// (`sides` sides ran in [`order`]; this is side `which`; `per` operations per iteration).
fn summarize(raw: &[f64], v: &mut [f64], sides: usize, which: usize, per: f64) -> Side {
    let ratios: Vec<f64> = raw.iter().zip(v.iter()).map(|(r, x)| x / r).collect();
    let (mut raw_first, mut side_first) = (Vec::new(), Vec::new());
    for (rep, &ratio) in ratios.iter().enumerate() {
        if raw_before(order(sides, rep), which) {
            raw_first.push(ratio);
        } else {
            side_first.push(ratio);
        }
    }
    Side {
        ns: median(v) / per,
        spread: Spread::of(&ratios),
        ratio: median(&mut ratios.clone()),
        raw_first: median(&mut raw_first),
        side_first: median(&mut side_first),
    }
}

/// One row's bodies and iteration counts, run by [`Case::run`].
///
/// ```ignore
/// case(cfg.fast, || raw_call(), || safe_call())
///     .peer(fx.cudarc().map(|c| move || cudarc_call(c)))
///     .settle(|| drain())
///     .run(cfg)
/// ```
#[derive(Debug)]
#[must_use = "a case measures nothing until `run`"]
pub(crate) struct Case<R, S, P, T> {
    raw_iters: u64,
    safe_iters: u64,
    per_iter: u64,
    raw: R,
    safe: S,
    peer: Option<P>,
    peer_note: Option<&'static str>,
    settle: T,
}

/// A case whose two bodies each run `iters` times per repetition, one operation per iteration,
/// with no peer and nothing to drain between batches.
pub(crate) fn case<R: FnMut(), S: FnMut()>(iters: u64, raw: R, safe: S) -> Case<R, S, fn(), fn()> {
    Case {
        raw_iters: iters,
        safe_iters: iters,
        per_iter: 1,
        raw,
        safe,
        peer: None,
        peer_note: None,
        settle: nothing,
    }
}

impl<R: FnMut(), S: FnMut(), P: FnMut(), T: FnMut()> Case<R, S, P, T> {
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

    /// The peer's body (as many iterations as the raw body), interleaved with the other two;
    /// `None` where the peer is not available in this run.
    pub(crate) fn peer<P2: FnMut()>(self, body: Option<P2>) -> Case<R, S, P2, T> {
        Case {
            raw_iters: self.raw_iters,
            safe_iters: self.safe_iters,
            per_iter: self.per_iter,
            raw: self.raw,
            safe: self.safe,
            peer: body,
            peer_note: self.peer_note,
            settle: self.settle,
        }
    }

    /// The peer has no equivalent of this operation: `why`, as printed under the table.
    pub(crate) fn no_peer(mut self, why: &'static str) -> Self {
        self.peer_note = Some(why);
        self
    }

    /// Runs `settle`, untimed, after every batch, to drain what the batch enqueued.
    pub(crate) fn settle<T2: FnMut()>(self, settle: T2) -> Case<R, S, P, T2> {
        Case {
            raw_iters: self.raw_iters,
            safe_iters: self.safe_iters,
            per_iter: self.per_iter,
            raw: self.raw,
            safe: self.safe,
            peer: self.peer,
            peer_note: self.peer_note,
            settle,
        }
    }

    /// Median ns per operation of each side, and the median, spread and per-order medians of the
    /// repetitions' own ratios to the raw side. Repetitions interleave the sides, each order
    /// followed by its reverse (`cfg.reps` is even, so every side runs before the raw side in
    /// exactly half of them).
    pub(crate) fn run(self, cfg: &Config) -> Measured {
        debug_assert!(
            cfg.reps % 2 == 0,
            "an odd number of repetitions unbalances the order"
        );
        let Case {
            raw_iters,
            safe_iters,
            per_iter,
            mut raw,
            mut safe,
            mut peer,
            peer_note,
            mut settle,
        } = self;
        let (mut r, mut s, mut p) = (
            Vec::with_capacity(cfg.reps),
            Vec::with_capacity(cfg.reps),
            Vec::with_capacity(cfg.reps),
        );
        let has_peer = peer.is_some();
        let sides = if has_peer { 3 } else { 2 };
        // One batch of side `side`; `warm` batches are untimed warm-ups.
        let mut run_side = |side: usize, warm: bool| {
            let iters = |n: u64| if warm { n.clamp(1, 1_000) } else { n };
            let ns = match side {
                0 => batch(iters(raw_iters), &mut raw),
                1 => batch(iters(safe_iters), &mut safe),
                _ => match peer.as_mut() {
                    Some(body) => batch(iters(raw_iters), body),
                    None => return,
                },
            };
            settle();
            if !warm {
                [&mut r, &mut s, &mut p][side].push(ns);
            }
        };
        // Warm-up: caches, lazily resolved symbols, the driver's own free lists.
        for &side in order(sides, 0) {
            run_side(side, true);
        }
        for rep in 0..cfg.reps {
            for &side in order(sides, rep) {
                run_side(side, false);
            }
        }
        let per = per_iter as f64;
        // A ratio is the median of each repetition's own ratio: the batches of a repetition run
        // back to back, so drift of the machine between repetitions cancels out.
        let side = |v: &mut Vec<f64>, which: usize| summarize(&r, v, sides, which, per);
        let safe = side(&mut s, 1);
        let peer = if has_peer {
            Peer::Measured(side(&mut p, 2))
        } else if let Some(why) = peer_note {
            Peer::NoEquivalent(why)
        } else {
            Peer::NotRun
        };
        Measured {
            raw_ns: median(&mut r) / per,
            safe,
            peer,
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
            reps: 4,
            ..Config::quick()
        };
        let (mut raw, mut safe, mut settled) = (0u64, 0u64, 0u64);
        let m = case(10, || raw += 1, || safe += 1)
            .safe_iters(20)
            .settle(|| settled += 1)
            .run(&cfg);
        // One warm-up batch each (clamped to the iteration count), then 4 repetitions.
        assert_eq!(raw, 10 + 4 * 10);
        assert_eq!(safe, 20 + 4 * 20);
        assert_eq!(settled, 2 + 2 * 4);
        assert!(m.raw_ns >= 0.0 && m.safe.ns >= 0.0);
        assert!(matches!(m.peer, Peer::NotRun));
    }

    #[test]
    fn a_peer_runs_as_often_as_the_raw_side_and_gets_its_own_ratios() {
        let cfg = Config {
            reps: 6,
            ..Config::quick()
        };
        let (mut raw, mut safe, mut peer, mut settled) = (0u64, 0u64, 0u64, 0u64);
        let m = case(10, || raw += 1, || safe += 1)
            .peer(Some(|| peer += 1))
            .settle(|| settled += 1)
            .run(&cfg);
        assert_eq!(raw, 10 + 6 * 10);
        assert_eq!(safe, 10 + 6 * 10);
        assert_eq!(peer, 10 + 6 * 10);
        assert_eq!(settled, 3 + 3 * 6);
        let Peer::Measured(p) = m.peer else {
            panic!("the peer was not measured: {:?}", m.peer)
        };
        assert!(p.spread.min <= p.ratio && p.ratio <= p.spread.max);
    }

    #[test]
    fn a_peer_without_an_equivalent_keeps_its_reason() {
        let m = case(1, || {}, || {}).no_peer("none").run(&Config::quick());
        assert!(matches!(m.peer, Peer::NoEquivalent("none")));
    }

    #[test]
    fn each_order_of_three_sides_appears_once_and_every_side_leads_twice() {
        let mut seen: Vec<&[usize]> = ORDERS_3.to_vec();
        seen.sort();
        seen.dedup();
        assert_eq!(seen.len(), 6);
        for side in 0..3 {
            assert_eq!(ORDERS_3.iter().filter(|o| o[0] == side).count(), 2);
        }
    }

    #[test]
    fn any_even_number_of_repetitions_runs_each_pair_of_sides_in_either_order_equally_often() {
        for sides in [2, 3] {
            for reps in (2..=20).step_by(2) {
                for a in 0..sides {
                    for b in (a + 1)..sides {
                        let a_first = (0..reps)
                            .filter(|&rep| {
                                let o = order(sides, rep);
                                let at = |s| o.iter().position(|&x| x == s);
                                at(a) < at(b)
                            })
                            .count();
                        assert_eq!(a_first * 2, reps, "{sides} sides, {reps} reps, {a} vs {b}");
                    }
                }
            }
        }
        assert!(Config::full().reps % 2 == 0 && Config::quick().reps % 2 == 0);
    }

    #[test]
    fn the_per_order_medians_split_the_repetitions_by_which_side_ran_first() {
        // Whichever side runs second in a repetition takes 15 ns, the first 10: with two sides,
        // even repetitions run raw first.
        let raw: Vec<f64> = (0..6)
            .map(|rep| if rep % 2 == 0 { 10.0 } else { 15.0 })
            .collect();
        let mut safe: Vec<f64> = (0..6)
            .map(|rep| if rep % 2 == 0 { 15.0 } else { 10.0 })
            .collect();
        let s = summarize(&raw, &mut safe, 2, 1, 1.0);
        assert_eq!((s.raw_first, s.side_first), (1.5, 10.0 / 15.0));
        assert_eq!(s.ns, 12.5);
        // The plain median sits between the two orders.
        assert!(s.ratio > s.side_first && s.ratio < s.raw_first);
        assert_eq!((s.spread.min, s.spread.max), (10.0 / 15.0, 1.5));
        // With three sides, the peer (side 2) is split by its own position against raw: orders
        // [0,1,2] [2,1,0] [1,2,0] [0,2,1] put raw first, last, last, first.
        let raw = [10.0; 4];
        let mut peer = [20.0, 30.0, 30.0, 20.0];
        let p = summarize(&raw, &mut peer, 3, 2, 2.0);
        assert_eq!((p.raw_first, p.side_first), (2.0, 3.0));
        assert_eq!(p.ns, 12.5);
    }

    #[test]
    fn spread_gives_min_quartiles_and_max() {
        let s = Spread::of(&[5.0, 1.0, 3.0, 2.0, 4.0]);
        assert_eq!(
            s,
            Spread {
                min: 1.0,
                q1: 2.0,
                q3: 4.0,
                max: 5.0
            }
        );
        let s = Spread::of(&[1.0, 2.0]);
        assert_eq!((s.q1, s.q3), (1.25, 1.75));
        assert_eq!(Spread::of(&[7.0]).q3, 7.0);
    }
}
