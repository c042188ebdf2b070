//! `--time`: two cases in alternating batches, and the medians and ratios it prints.

use std::sync::atomic::Ordering;
use std::time::Instant;

use crate::Fixture;
use crate::host_fns::IN_FLIGHT;

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// ns per iteration of one batch, and (throughput cases) the host functions still queued when
/// its launches ended.
fn time(fx: &Fixture, case: &str, iters: u64) -> (f64, f64) {
    IN_FLIGHT.store(0, Ordering::Relaxed);
    let t = Instant::now();
    fx.run(case, iters);
    let ns = t.elapsed().as_nanos() as f64 / iters as f64;
    let in_flight = IN_FLIGHT.load(Ordering::Relaxed) as f64;
    // Untimed: drain what the batch queued, so the next batch starts on an idle GPU.
    fx.stream.synchronize().expect("synchronize");
    (ns, in_flight)
}

pub(crate) fn compare(fx: &Fixture, a: &str, b: &str, iters: u64, reps: usize) {
    fx.run(a, iters.min(1_000));
    fx.run(b, iters.min(1_000));
    let (mut ta, mut tb, mut qa, mut qb) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let (mut a_first, mut b_first) = (Vec::new(), Vec::new());
    for rep in 0..reps {
        let ((x, qx), (y, qy)) = if rep % 2 == 0 {
            let x = time(fx, a, iters);
            (x, time(fx, b, iters))
        } else {
            let y = time(fx, b, iters);
            (time(fx, a, iters), y)
        };
        ta.push(x);
        tb.push(y);
        qa.push(qx);
        qb.push(qy);
        if rep % 2 == 0 {
            a_first.push(y / x);
        } else {
            b_first.push(y / x);
        }
    }
    let mut all: Vec<f64> = a_first.iter().chain(&b_first).copied().collect();
    let mut sorted = all.clone();
    sorted.sort_by(f64::total_cmp);
    let (ra, rb) = (median(&mut a_first), median(&mut b_first));
    let in_flight = if name_of(a).starts_with("host-") || name_of(b).starts_with("host-") {
        format!(
            "; still queued after the launches: {a} {:.0}, {b} {:.0}",
            median(&mut qa),
            median(&mut qb)
        )
    } else {
        String::new()
    };
    println!(
        "{a}: {:.1} ns/iter | {b}: {:.1} ns/iter | {b}/{a}: median {:.3} [min {:.3}, max {:.3}], \
         {a} first {:.3}, {b} first {:.3}, balanced {:.3} ({reps} reps x {iters}){in_flight}",
        median(&mut ta),
        median(&mut tb),
        median(&mut all),
        sorted[0],
        sorted[sorted.len() - 1],
        ra,
        rb,
        (ra * rb).sqrt(),
    );
}

fn name_of(case: &str) -> &str {
    case.split(':').next().unwrap_or_default()
}
