//! What other code leaves current, against the mock, which fails copies of pool memory while a
//! context of another device is current (as the driver does: `check_copy_context` in the mock's
//! `exports/memory.rs`) and `cuMemcpyPeerAsync` with no context current (where the driver
//! crashed): every copy binds the stream's context where it must, peer copies always do, and
//! they grant the pools' access to the other device once; `MemPool::set_access` / `access`;
//! `Context::enable_peer_access` reaching the default pool; typed kernels taking a peer's
//! buffer only where its pool grants the launching device the access the kernel needs.

use std::sync::{Mutex, MutexGuard, OnceLock};

use cuda_mock_driver::MockDriver;
use cuda_stream::{
    Context, DeviceBuffer, Error, LaunchConfig, MemPool, Module, PinnedHostBuffer, PoolAccess,
    current_context_raw,
};

static LOCK: Mutex<()> = Mutex::new(());

/// Serialises the tests and resets the mock; both primary contexts stay retained for the whole
/// process (see `peers.rs`), and both devices have memory pools.
fn mock() -> (
    MutexGuard<'static, ()>,
    &'static MockDriver,
    Context,
    Context,
) {
    let guard = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let m = MockDriver::global();
    static KEEP: OnceLock<(Context, Context)> = OnceLock::new();
    let (c0, c1) =
        KEEP.get_or_init(|| (Context::primary(0).unwrap(), Context::primary(1).unwrap()));
    c0.synchronize().unwrap();
    c1.synchronize().unwrap();
    m.reset();
    (guard, m, c0.clone(), c1.clone())
}

/// Every copy of a buffer of device 1, with device 0's context current (what NCCL and the
/// CUDA runtime leave behind): each must work and carry its values.
#[test]
fn copies_of_pool_memory_work_whatever_context_is_current() {
    let (_g, m, c0, c1) = mock();
    let s1 = c1.new_stream().unwrap();
    let data: Vec<u32> = (0..4096).collect();
    let _other = c0.bind().unwrap();
    assert_eq!(current_context_raw().unwrap(), c0.raw());
    let x = DeviceBuffer::from_host(&c1, &s1, &data).unwrap();
    let y = DeviceBuffer::<u32>::zeroed(&c1, &s1, data.len()).unwrap();
    y.copy_from(&s1, &x).unwrap();
    assert_eq!(y.to_vec(&s1).unwrap(), data);
    let twice: Vec<u32> = data.iter().map(|v| v * 2).collect();
    x.copy_from_host(&s1, &twice).unwrap();
    let mut back = vec![0u32; data.len()];
    x.copy_to_host(&s1, &mut back).unwrap();
    assert_eq!(back, twice);
    let mut pinned = PinnedHostBuffer::<u32>::zeroed(&c1, data.len()).unwrap();
    x.copy_to_pinned(&s1, &mut pinned).unwrap();
    s1.synchronize().unwrap();
    assert_eq!(pinned.as_slice().unwrap(), &twice[..]);
    y.copy_from_pinned(&s1, &pinned).unwrap();
    assert_eq!(y.to_vec(&s1).unwrap(), twice);
    // A default stream of device 1 too (bound for the call, as before).
    let legacy = c1.legacy_stream();
    assert_eq!(y.to_vec(&legacy).unwrap(), twice);
    // The raw copies bind as the safe ones do.
    // SAFETY: `back` outlives the copy (the stream is synchronised before it is read); the
    // buffer holds `data.len()` values.
    unsafe { cuda_stream::memcpy_dtoh_async(&s1, &mut back, y.device_ptr()) }.unwrap();
    s1.synchronize().unwrap();
    assert_eq!(back, twice);
    // Device 0's context is still the current one.
    assert_eq!(current_context_raw().unwrap(), c0.raw());
    drop((x, y, pinned));
    s1.synchronize().unwrap();
    assert_eq!(m.bad_uses(), 0);
}

/// Where nothing is current, a copy needs no binding: no push, no pop.
#[test]
fn copies_with_nothing_current_bind_nothing() {
    let (_g, m, _c0, c1) = mock();
    std::thread::scope(|s| {
        s.spawn(|| {
            assert!(current_context_raw().unwrap().is_null());
            let s1 = c1.new_stream().unwrap();
            let x = DeviceBuffer::from_host(&c1, &s1, &[7u8; 64]).unwrap();
            let pushes = m.calls("cuCtxPushCurrent_v2");
            assert_eq!(x.to_vec(&s1).unwrap(), vec![7u8; 64]);
            assert_eq!(m.calls("cuCtxPushCurrent_v2"), pushes);
            assert!(current_context_raw().unwrap().is_null());
        });
    });
}

/// A peer copy from a thread with no context current (where the driver crashed) works both
/// ways, and grants each pool's access to the other device once.
#[test]
fn peer_copies_bind_a_context_and_grant_pool_access_once() {
    let (_g, m, c0, c1) = mock();
    let (p0, p1) = (MemPool::new(&c0).unwrap(), MemPool::new(&c1).unwrap());
    std::thread::scope(|s| {
        s.spawn(|| {
            assert!(current_context_raw().unwrap().is_null());
            let (s0, s1) = (c0.new_stream().unwrap(), c1.new_stream().unwrap());
            let src: Vec<u32> = (0..1000).collect();
            let a = DeviceBuffer::<u32>::alloc_in(&p0, &s0, src.len()).unwrap();
            a.copy_from_host(&s0, &src).unwrap();
            let b = DeviceBuffer::<u32>::zeroed_in(&p1, &s1, src.len()).unwrap();
            assert_eq!(p0.access(c1.device()).unwrap(), PoolAccess::None);
            let grants = m.calls("cuMemPoolSetAccess");
            b.copy_from_peer(&s1, &a).unwrap();
            assert_eq!(m.calls("cuMemPoolSetAccess"), grants + 2);
            assert_eq!(p0.access(c1.device()).unwrap(), PoolAccess::ReadWrite);
            assert_eq!(p1.access(c0.device()).unwrap(), PoolAccess::ReadWrite);
            let back = DeviceBuffer::<u32>::zeroed_in(&p0, &s0, src.len()).unwrap();
            back.copy_from_peer(&s1, &b).unwrap(); // on the source's stream
            assert_eq!(m.calls("cuMemPoolSetAccess"), grants + 2, "granted once");
            assert_eq!(back.to_vec(&s0).unwrap(), src);
            assert!(current_context_raw().unwrap().is_null());
            drop((a, b, back));
            s0.synchronize().unwrap();
            s1.synchronize().unwrap();
        });
    });
    assert_eq!(m.bad_uses(), 0);
}

#[test]
fn pool_access_is_set_and_read_back() {
    let (_g, m, c0, c1) = mock();
    let p = MemPool::new(&c0).unwrap();
    let (d0, d1) = (c0.device(), c1.device());
    assert_eq!(p.access(d0).unwrap(), PoolAccess::ReadWrite);
    assert_eq!(p.access(d1).unwrap(), PoolAccess::None);
    for a in [PoolAccess::Read, PoolAccess::ReadWrite, PoolAccess::None] {
        p.set_access(d1, a).unwrap();
        assert_eq!(p.access(d1).unwrap(), a);
    }
    let calls = m.calls("cuMemPoolSetAccess");
    match p.set_access(d0, PoolAccess::None) {
        Err(Error::InvalidArgument { reason }) => assert!(reason.contains("owns"), "{reason}"),
        other => panic!("the pool's own device: {other:?}"),
    }
    assert_eq!(
        m.calls("cuMemPoolSetAccess"),
        calls,
        "refused before the driver"
    );
}

#[test]
fn enabling_peer_access_grants_the_default_pool() {
    let (_g, _m, c0, c1) = mock();
    let pool0 = MemPool::default_for(&c0).unwrap();
    pool0.set_access(c1.device(), PoolAccess::None).unwrap();
    c1.enable_peer_access(&c0).unwrap();
    assert_eq!(pool0.access(c1.device()).unwrap(), PoolAccess::ReadWrite);
    c1.enable_peer_access(&c0).unwrap(); // idempotent
    assert_eq!(pool0.access(c1.device()).unwrap(), PoolAccess::ReadWrite);
}

const PTX: &str = r#"
.version 7.8
.target sm_90
.address_size 64

.visible .entry copy_u32(
    .param .u64 copy_u32_dst,
    .param .u64 copy_u32_src
)
{
    ret;
}
"#;

/// A kernel of device 1 reading (then writing) a buffer of device 0: refused until the buffer's
/// pool grants device 1 the access the kernel needs, then ordered after the buffer's uses on
/// device 0 and recorded there.
#[test]
fn kernels_take_a_peer_buffer_where_its_pool_grants_access() {
    let (_g, m, c0, c1) = mock();
    let p0 = MemPool::new(&c0).unwrap();
    let (s0, s1) = (c0.new_stream().unwrap(), c1.new_stream().unwrap());
    let module = Module::from_ptx(&c1, PTX).unwrap();
    let copy = module
        .function("copy_u32")
        .unwrap()
        .typed::<(&mut DeviceBuffer<u32>, &DeviceBuffer<u32>)>()
        .unwrap();
    let mut x0 = DeviceBuffer::<u32>::alloc_in(&p0, &s0, 1).unwrap();
    x0.fill(&s0, 41).unwrap();
    let mut y1 = DeviceBuffer::<u32>::zeroed(&c1, &s1, 1).unwrap();
    let one = LaunchConfig::for_elements(1, 1);
    let refused = |e: Error| match e {
        Error::ContextMismatch { what } => assert!(what.contains("may not"), "{what}"),
        other => panic!("{other}"),
    };
    let launches = m.calls("cuLaunchKernel");
    // SAFETY: copy_u32 reads one u32 of its source and writes one of its destination.
    refused(unsafe { copy.launch(&s1, one, (&mut y1, &x0)) }.unwrap_err());
    assert_eq!(
        m.calls("cuLaunchKernel"),
        launches,
        "refused before the driver"
    );
    p0.set_access(c1.device(), PoolAccess::Read).unwrap();
    // SAFETY: as above.
    unsafe { copy.launch(&s1, one, (&mut y1, &x0)) }.unwrap();
    assert_eq!(y1.to_vec(&s1).unwrap(), vec![41]);
    // A write needs read-write access.
    y1.fill(&s1, 7).unwrap();
    // SAFETY: as above.
    refused(unsafe { copy.launch(&s1, one, (&mut x0, &y1)) }.unwrap_err());
    p0.set_access(c1.device(), PoolAccess::ReadWrite).unwrap();
    // SAFETY: as above.
    unsafe { copy.launch(&s1, one, (&mut x0, &y1)) }.unwrap();
    // Read on device 0's own stream: waits for the kernel on device 1.
    assert_eq!(x0.to_vec(&s0).unwrap(), vec![7]);
    drop((x0, y1));
    s0.synchronize().unwrap();
    s1.synchronize().unwrap();
    assert_eq!(m.bad_uses(), 0);
}

/// A peer copy recorded into a capture as the first copy between its pools: the grant is a
/// potentially unsafe call, which the driver refuses on a capturing thread (seen on two H200s:
/// `cuMemPoolSetAccess: CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED`, the capture lost); made with the
/// thread's capture mode relaxed, the capture records the copy and its replay carries the values.
#[test]
fn a_first_peer_copy_in_a_capture_grants_its_pools() {
    let (_g, m, c0, c1) = mock();
    let (p0, p1) = (MemPool::new(&c0).unwrap(), MemPool::new(&c1).unwrap());
    let (mut s0, s1) = (c0.new_stream().unwrap(), c1.new_stream().unwrap());
    let x = DeviceBuffer::<u32>::alloc_in(&p1, &s1, 64).unwrap();
    x.fill(&s1, 9).unwrap();
    let y = DeviceBuffer::<u32>::zeroed_in(&p0, &s0, 64).unwrap();
    let graph = s0
        .capture(cuda_stream::CaptureMode::ThreadLocal, |cap| {
            y.copy_from_peer(&cap, &x)
        })
        .unwrap();
    assert_eq!(p1.access(c0.device()).unwrap(), PoolAccess::ReadWrite);
    let exec = graph.instantiate().unwrap();
    exec.launch(&s0).unwrap();
    assert_eq!(y.to_vec(&s0).unwrap(), vec![9; 64]);
    drop((exec, graph, x, y));
    s0.synchronize().unwrap();
    s1.synchronize().unwrap();
    assert_eq!(m.bad_uses(), 0);
}
