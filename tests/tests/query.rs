//! `query` reports pending work as `false` and finished work as `true`.

use std::time::Duration;

use cuda_stream::{AsStream, EventOptions};
use cuda_stream_tests::{Kernels, Window, gpu};

const SPIN: Duration = Duration::from_millis(200);

#[test]
fn query_is_false_while_a_kernel_runs_and_true_after_synchronize() {
    let Some(ctx) = gpu() else { return };
    let k = Kernels::load(&ctx);
    let s = ctx.new_stream().unwrap();
    assert!(s.query().unwrap(), "an empty stream is idle");

    let w = Window::start(SPIN);
    k.spin(&s, SPIN);
    let stream_done = s.query().unwrap();
    let view_done = s.as_stream().query().unwrap();
    let ev = s.record_event().unwrap();
    let event_done = ev.query().unwrap();
    println!("while spinning: stream={stream_done} view={view_done} event={event_done}");
    w.assert_pending(!stream_done, "stream query");
    w.assert_pending(!view_done, "view query");
    w.assert_pending(!event_done, "event query");

    s.synchronize().unwrap();
    assert!(
        w.elapsed() >= SPIN * 9 / 10,
        "synchronize returned before the spin: {:?}",
        w.elapsed()
    );
    assert!(s.query().unwrap());
    assert!(s.as_stream().query().unwrap());
    assert!(ev.query().unwrap());
}

#[test]
fn event_synchronize_waits_for_the_captured_work_only() {
    let Some(ctx) = gpu() else { return };
    let k = Kernels::load(&ctx);
    let s = ctx.new_stream().unwrap();
    let unrecorded = ctx
        .new_event(EventOptions::new().blocking_sync(true))
        .unwrap();
    assert!(
        unrecorded.query().unwrap(),
        "a never-recorded event is complete"
    );

    k.spin(&s, SPIN);
    let first = s.record_event().unwrap();
    let w = Window::start(SPIN * 4);
    k.spin(&s, SPIN * 4);
    first.synchronize().unwrap();
    let stream_done = s.query().unwrap();
    assert!(first.query().unwrap());
    // The second spin was enqueued after the record: the event does not wait for it.
    w.assert_pending(!stream_done, "work after the event's record");
    s.synchronize().unwrap();
    assert!(s.query().unwrap());
}
