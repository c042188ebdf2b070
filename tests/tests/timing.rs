//! Elapsed time between events, and its errors.

use std::io::Write as _;
use std::time::{Duration, Instant};

use cuda_stream::{Error, Event, EventOptions};
use cuda_stream_tests::{Kernels, Window, gpu, sys};

fn timed() -> EventOptions {
    EventOptions::new().timing(true)
}

/// Checks an interval the GPU measured between two events: at least `min` (the spin between
/// them, timed on the GPU), and within the host time from just before the first record to just
/// after the second event completed (`host`). The upper bound holds under any load (a slow host
/// only widens it); the slack covers the two clocks' resolutions.
#[track_caller]
fn assert_brackets(d: Duration, min: Duration, host: Duration) {
    let slack = Duration::from_millis(1);
    assert!(
        d >= min && d <= host + slack,
        "elapsed {d:?} outside [{min:?}, {host:?} + {slack:?}] (the spin; the host's interval)"
    );
}

#[test]
fn elapsed_time_brackets_a_100ms_spin() {
    let Some(ctx) = gpu() else { return };
    let k = Kernels::load(&ctx);
    let s = ctx.new_stream().unwrap();
    let spin = Duration::from_millis(100);

    let host = Instant::now();
    let start = s.record_event_with(timed()).unwrap();
    k.spin(&s, spin);
    let end = s.record_event_with(timed()).unwrap();
    end.synchronize().unwrap();
    let host = host.elapsed();
    let d = end.elapsed_since(&start).unwrap();
    println!("a 100 ms spin measured {d:?} (host: {host:?})");
    assert_brackets(d, Duration::from_millis(90), host);

    // Reused events, recorded explicitly.
    let (a, b) = (
        Event::new(&ctx, timed()).unwrap(),
        Event::new(&ctx, timed()).unwrap(),
    );
    let host = Instant::now();
    s.record(&a).unwrap();
    k.spin(&s, spin);
    s.record(&b).unwrap();
    s.synchronize().unwrap();
    let host = host.elapsed();
    let d = b.elapsed_since(&a).unwrap();
    println!("again: {d:?} (host: {host:?})");
    assert_brackets(d, Duration::from_millis(90), host);

    // Reversed: never reported as a positive duration.
    let reversed = a.elapsed_since(&b);
    println!("reversed interval: {reversed:?}");
    assert!(
        !matches!(reversed, Ok(d) if d > Duration::ZERO),
        "a reversed interval came out positive: {reversed:?}"
    );
}

/// `elapsed_since` on whichever ABI the bindings resolve: `cuEventElapsedTime_v12080` on a CUDA
/// 12.8 driver and later, the original `cuEventElapsedTime_v2000` on older drivers and when the
/// bindings are limited below 12.8 (`CUDA_SYS_ABI_VERSION=12000`, the GPU bundle's `--abi 12000`
/// pass). Prints which ran.
#[test]
fn elapsed_time_through_the_abi_the_bindings_resolve() {
    let Some(ctx) = gpu() else { return };
    let d = sys::Driver::global().unwrap();
    let abi = d.abi_version();
    if let Ok(limit) = std::env::var(sys::ABI_VERSION_VAR) {
        let limit = sys::parse_cuda_version(&limit).expect("a valid CUDA_SYS_ABI_VERSION");
        assert_eq!(d.abi_limit(), Some(limit));
        assert!(abi <= limit);
    }
    let newest = d.has("cuEventElapsedTime_v12080");
    assert_eq!(
        newest,
        abi >= 12080,
        "the 12.8 ABI resolves exactly from CUDA 12.8"
    );
    assert!(
        d.has("cuEventElapsedTime_v2000"),
        "every driver has the original ABI"
    );
    let k = Kernels::load(&ctx);
    let s = ctx.new_stream().unwrap();
    let host = Instant::now();
    let start = s.record_event_with(timed()).unwrap();
    k.spin(&s, Duration::from_millis(20));
    let end = s.record_event_with(timed()).unwrap();
    end.synchronize().unwrap();
    let host = host.elapsed();
    let elapsed = end.elapsed_since(&start).unwrap();
    // Past the harness's capture, so that the GPU bundle's log shows it for a passing test.
    let _ = writeln!(
        std::io::stdout().lock(),
        "driver CUDA {}, ABIs up to CUDA {} ({}): elapsed_since ran through {} and measured {:?}",
        sys::format_version(d.driver_version().unwrap_or(0)),
        sys::format_version(abi as i32),
        d.resolver(),
        if newest {
            "cuEventElapsedTime_v12080"
        } else {
            "cuEventElapsedTime_v2000"
        },
        elapsed
    );
    assert_brackets(elapsed, Duration::from_millis(15), host);
    // The other operations with a version threshold, on the same ABI.
    assert_eq!(
        s.device().unwrap(),
        ctx.device(),
        "cuStreamGetDevice or the context"
    );
    match s.id() {
        Ok(_) => assert!(abi >= 12000),
        Err(e) => {
            assert!(abi < 12000 && e.is_unsupported(), "{e:?}");
        }
    }
}

#[test]
fn timing_disabled_is_reported() {
    let Some(ctx) = gpu() else { return };
    let s = ctx.new_stream().unwrap();
    let timed = s.record_event_with(timed()).unwrap();
    let untimed = s.record_event().unwrap();
    assert!(!untimed.options().has_timing());
    s.synchronize().unwrap();
    assert!(matches!(
        untimed.elapsed_since(&timed),
        Err(Error::TimingDisabled)
    ));
    assert!(matches!(
        timed.elapsed_since(&untimed),
        Err(Error::TimingDisabled)
    ));
}

#[test]
fn not_recorded_is_reported() {
    let Some(ctx) = gpu() else { return };
    let s = ctx.new_stream().unwrap();
    let never = Event::new(&ctx, timed()).unwrap();
    let recorded = s.record_event_with(timed()).unwrap();
    s.synchronize().unwrap();
    assert!(!never.is_recorded());
    assert!(recorded.is_recorded());
    assert!(matches!(
        recorded.elapsed_since(&never),
        Err(Error::NotRecorded)
    ));
    assert!(matches!(
        never.elapsed_since(&recorded),
        Err(Error::NotRecorded)
    ));
}

#[test]
fn not_completed_is_reported_while_the_end_event_is_pending() {
    let Some(ctx) = gpu() else { return };
    let k = Kernels::load(&ctx);
    let s = ctx.new_stream().unwrap();
    let spin = Duration::from_millis(500);
    let start = s.record_event_with(timed()).unwrap();
    let w = Window::start(spin);
    k.spin(&s, spin);
    let end = s.record_event_with(timed()).unwrap();
    let end_done = end.query().unwrap();
    let r = end.elapsed_since(&start);
    if w.open() {
        assert!(!end_done, "the end event completed during the spin");
        assert!(matches!(r, Err(Error::NotCompleted)), "{r:?}");
    } else {
        println!("note: host too slow to observe the pending end event; got {r:?}");
    }
    end.synchronize().unwrap();
    let d = end.elapsed_since(&start).unwrap();
    assert!(d >= Duration::from_millis(450), "{d:?}");
}
