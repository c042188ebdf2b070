//! Several devices against the mock: peer queries, idempotent peer access, peer copies both ways
//! with their results, and what a peer copy refuses.

use std::sync::{Mutex, OnceLock};

use cuda_mock_driver::{MockDriver, Serialized};
use cuda_stream::ffi::CUresult;
use cuda_stream::{Context, DeviceBuffer, Error};

static LOCK: Mutex<()> = Mutex::new(());

/// Serialises the tests and resets the mock. Both primary contexts stay retained for the whole
/// process, as the fault suite's fixture keeps them: the mock frees a context's memory when its
/// last retain goes, even under work still queued, which a later test would count.
fn mock() -> (Serialized, &'static MockDriver) {
    let guard = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let m = MockDriver::global();
    static KEEP: OnceLock<(Context, Context)> = OnceLock::new();
    KEEP.get_or_init(|| {
        m.set_memory_pools(1, false);
        (Context::primary(0).unwrap(), Context::primary(1).unwrap())
    });
    for c in KEEP.get().into_iter().flat_map(|(a, b)| [a, b]) {
        c.synchronize().unwrap();
    }
    m.reset();
    (m.checked(guard), m)
}

#[test]
fn peer_access_is_idempotent_and_refused_on_one_device() {
    let (_g, m) = mock();
    let (c0, c1) = (Context::primary(0).unwrap(), Context::primary(1).unwrap());
    assert!(c0.device().can_access_peer(c1.device()).unwrap());
    assert!(!c1.device().can_access_peer(c1.device()).unwrap());
    c0.enable_peer_access(&c1).unwrap();
    c0.enable_peer_access(&c1).unwrap(); // already enabled: not an error
    c1.enable_peer_access(&c0).unwrap();
    let same = c0.enable_peer_access(&c0).unwrap_err();
    assert_eq!(
        same.driver_code(),
        Some(CUresult::CUDA_ERROR_INVALID_DEVICE),
        "{same}"
    );
    assert_eq!(
        same.to_string(),
        "cuCtxEnablePeerAccess: CUDA_ERROR_INVALID_DEVICE"
    );
    assert_eq!(m.bad_uses(), 0);
}

#[test]
fn peer_copies_both_ways_carry_the_values() {
    let (_g, m) = mock();
    let (c0, c1) = (Context::primary(0).unwrap(), Context::primary(1).unwrap());
    let (s0, s1) = (c0.new_stream().unwrap(), c1.new_stream().unwrap());
    let src: Vec<u32> = (0..1000).collect();
    let a = DeviceBuffer::from_host(&c0, &s0, &src).unwrap();
    let b = DeviceBuffer::<u32>::alloc_on(&c1, &s1, 1000).unwrap();
    b.copy_from_peer(&s1, &a).unwrap(); // on the destination's stream
    let back = DeviceBuffer::<u32>::zeroed(&c0, &s0, 1000).unwrap();
    back.copy_from_peer(&s1, &b).unwrap(); // on the source's stream
    assert_eq!(back.to_vec(&s0).unwrap(), src);
    assert_eq!(b.to_vec(&s1).unwrap(), src);
    drop((a, b, back));
    s0.synchronize().unwrap();
    s1.synchronize().unwrap();
    assert_eq!(m.bad_uses(), 0);
}

#[test]
fn peer_copies_refuse_one_device_other_lengths_and_other_streams() {
    let (_g, _m) = mock();
    let (c0, c1) = (Context::primary(0).unwrap(), Context::primary(1).unwrap());
    let s0 = c0.new_stream().unwrap();
    let a = DeviceBuffer::<u8>::zeroed(&c0, &s0, 8).unwrap();
    let b = DeviceBuffer::<u8>::zeroed(&c0, &s0, 8).unwrap();
    match b.copy_from_peer(&s0, &a) {
        Err(Error::InvalidArgument { reason }) => {
            assert!(reason.contains("copy_from"), "{reason}")
        }
        other => panic!("one device: {other:?}"),
    }
    let s1 = c1.new_stream().unwrap();
    let short = DeviceBuffer::<u8>::alloc_on(&c1, &s1, 4).unwrap();
    assert!(matches!(
        short.copy_from_peer(&s1, &a),
        Err(Error::LengthMismatch {
            expected: 4,
            actual: 8
        })
    ));
    let c = DeviceBuffer::<u8>::alloc_on(&c1, &s1, 8).unwrap();
    // A stream of the source's context works as well as one of the destination's.
    c.copy_from_peer(&s0, &a).unwrap();
    assert_eq!(c.to_vec(&s1).unwrap(), [0; 8]);
}
