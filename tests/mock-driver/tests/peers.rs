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

/// Copies of a buffer of device 0 into one of device 1, `copies` times on `s1`, after two
/// copies that settle the marks: the `cuStreamWaitEvent` and `cuEventRecord` calls they made.
fn waits_and_records_of_copies(
    m: &MockDriver,
    s1: &cuda_stream::OwnedStream,
    dst: &DeviceBuffer<u32>,
    src: &DeviceBuffer<u32>,
    copies: u64,
) -> (u64, u64) {
    for _ in 0..2 {
        dst.copy_from_peer(s1, src).unwrap();
    }
    let (waits, records) = (m.calls("cuStreamWaitEvent"), m.calls("cuEventRecord"));
    for _ in 0..copies {
        dst.copy_from_peer(s1, src).unwrap();
    }
    (
        m.calls("cuStreamWaitEvent") - waits,
        m.calls("cuEventRecord") - records,
    )
}

/// A peer copy repeated on one stream, reading a buffer of the other device: the copy's stream
/// waits for the source's last write itself (an event of the source's context) and never for
/// the source context's service stream, which stands for the copies there. A wait for the
/// service stream followed the service stream's own wait for the previous copy: a round trip
/// between the two devices before every copy (0.953-0.970 of raw `cuMemcpyPeerAsync` at 64 MiB
/// on two H100s). Per copy, with the source's write known complete: the copy and the service
/// stream's wait for it (an event recorded on the copy's stream), one wait and one record,
/// where the round trip made two of each; with the write still pending (an event marks it,
/// and the read is then marked by an event too): two of each, where it made three.
#[test]
fn a_repeated_peer_copy_waits_only_for_the_sources_write() {
    let (_g, m) = mock();
    let (c0, c1) = (Context::primary(0).unwrap(), Context::primary(1).unwrap());
    let (s0, s1) = (c0.new_stream().unwrap(), c1.new_stream().unwrap());
    let src: Vec<u32> = (0..1000).collect();
    // `from_host` waits for its copy: the write is known complete.
    let a = DeviceBuffer::from_host(&c0, &s0, &src).unwrap();
    let b = DeviceBuffer::<u32>::alloc_on(&c1, &s1, 1000).unwrap();
    const COPIES: u64 = 10;
    assert_eq!(
        waits_and_records_of_copies(m, &s1, &b, &a, COPIES),
        (COPIES, COPIES),
        "waits and records of {COPIES} copies of a source written and waited for"
    );
    assert_eq!(b.to_vec(&s1).unwrap(), src);
    // A write not waited for: each copy waits for its event.
    a.fill(&s0, 7).unwrap();
    assert_eq!(
        waits_and_records_of_copies(m, &s1, &b, &a, COPIES),
        (2 * COPIES, 2 * COPIES),
        "waits and records of {COPIES} copies of a source written on its own stream"
    );
    assert_eq!(b.to_vec(&s1).unwrap(), vec![7; 1000]);
    drop((a, b));
    s0.synchronize().unwrap();
    s1.synchronize().unwrap();
    assert_eq!(m.bad_uses(), 0);
}
