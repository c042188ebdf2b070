//! The shapes a newcomer from cudarc reaches for, against the test driver: `OwnedStream::fork`
//! outside a scope (a new stream of the same context, flags and priority, whose work waits for
//! the parent's; joined back with `wait_stream`: raw work on both ordered, as the race detector
//! checks), `Context::default_stream` (the legacy default stream) and `DeviceBuffer::duplicate`
//! (cudarc's `clone`: a new buffer filled by a device copy, ordered after the last write).

use std::sync::Mutex;

use cuda_mock_driver::{MockDriver, Serialized};
use cuda_stream::{Context, DeviceBuffer, StreamOptions, memset_d32_async};

static LOCK: Mutex<()> = Mutex::new(());

fn mock() -> (Serialized, &'static MockDriver) {
    let guard = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let m = MockDriver::global();
    m.reset();
    (m.checked(guard), m)
}

#[test]
fn a_fork_outside_a_scope_waits_for_its_parent_and_joins_back() {
    let (_lock, m) = mock();
    let ctx = Context::primary(0).unwrap();
    let s = ctx
        .new_stream_with(StreamOptions::new().blocking(true).priority_clamped(-1))
        .unwrap();
    let x = DeviceBuffer::<u32>::zeroed(&ctx, &s, 256).unwrap();
    s.synchronize().unwrap();
    let p = x.device_ptr();
    for round in 0..10u32 {
        // SAFETY: 256 values at `p`, alive until the end; the order is the fork's and the join's.
        unsafe { memset_d32_async(&s, p, round, 256) }.unwrap();
        let f = s.fork().unwrap();
        assert_eq!(f.priority().unwrap(), s.priority().unwrap());
        assert_eq!(f.flags().unwrap(), s.flags().unwrap());
        // SAFETY: as above: after the parent's memset (the fork waits for it).
        unsafe { memset_d32_async(&f, p, round + 100, 256) }.unwrap();
        s.wait_stream(&f).unwrap();
        // SAFETY: as above: after the fork's memset (joined).
        unsafe { memset_d32_async(&s, p, round + 200, 256) }.unwrap();
        assert_eq!(x.to_vec(&s).unwrap(), vec![round + 200; 256]);
    }
    assert_eq!(m.races(), 0, "{:?}", m.race_reports());
    assert_eq!(ctx.default_stream().raw(), ctx.legacy_stream().raw());
}

#[test]
fn a_buffer_is_duplicated_in_one_call_after_its_last_write() {
    let (_lock, m) = mock();
    let ctx = Context::primary(0).unwrap();
    let (s, t) = (ctx.new_stream().unwrap(), ctx.new_stream().unwrap());
    let x = DeviceBuffer::from_host(&ctx, &s, &[1u32, 2, 3, 4]).unwrap();
    x.fill(&s, 9).unwrap();
    // On another stream: waits for the fill.
    let y = x.duplicate(&t).unwrap();
    assert_eq!(y.len(), 4);
    assert_ne!(y.device_ptr(), x.device_ptr());
    assert_eq!(y.to_vec(&t).unwrap(), [9; 4]);
    // A write of the original afterwards leaves the copy alone.
    x.fill(&s, 1).unwrap();
    assert_eq!(y.to_vec(&s).unwrap(), [9; 4]);
    assert_eq!(m.races(), 0, "{:?}", m.race_reports());
}
