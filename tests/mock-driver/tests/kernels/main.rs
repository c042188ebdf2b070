//! `cuda-stream`'s modules, launches and device memory against the mock driver: what each
//! operation asks the driver for (arguments as bytes, dimensions), what it refuses before calling
//! it, the bytes that memsets and copies leave in (host-backed) device memory, that a buffer's
//! free never waits for the device yet is made after the work recorded on it, and that a
//! module's unload waits for the work still using it.
//!
//! One topic a file: [`modules`], [`launches`], [`buffers`], [`frees`] and [`captures`]; the
//! PTX they share, the mock lock and the helpers are here.

mod buffers;
mod captures;
mod frees;
mod launches;
mod modules;

use std::sync::Mutex;

use cuda_mock_driver::{MockDriver, Serialized};
use cuda_stream::ffi::CUresult;
use cuda_stream_tests::gate;

const SUCCESS: CUresult = CUresult::CUDA_SUCCESS;

/// Three kernels: parameters of several sizes, none, and a `.maxntid` limit.
const PTX: &str = r#"
.version 7.0
.target sm_50
.address_size 64

.visible .entry saxpy(
    .param .u32 saxpy_n,
    .param .f32 saxpy_a,
    .param .u64 saxpy_x,
    .param .u64 saxpy_y
)
{
    ret;
}

.visible .entry nothing()
{
    ret;
}

.visible .entry small(.param .align 8 .b8 small_p[16])
.maxntid 128, 1, 1
{
    ret;
}
"#;

static LOCK: Mutex<()> = Mutex::new(());

/// Serialises the test, installs the mock as the process-wide driver (once) and resets it.
fn mock() -> (Serialized, &'static MockDriver) {
    let guard = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let m = MockDriver::global();
    // Device 0 has memory pools (the main path: stream-ordered allocations, frees enqueued
    // behind their uses); device 1 has none (`cuMemAlloc`, frees made once the uses' events have
    // completed). Set on every test, before anything allocates: `cuda-stream` asks once a
    // device for the process.
    m.set_memory_pools(0, true);
    m.set_memory_pools(1, false);
    m.reset();
    no_kept_blocks();
    (m.checked(guard), m)
}

/// The tests here follow each free to the driver: device 0's default pool keeps no freed block
/// for reuse (set before anything allocates; the pool outlives its contexts).
fn no_kept_blocks() {
    let ctx = cuda_stream::Context::primary(0).expect("device 0");
    cuda_stream::MemPool::default_for(&ctx)
        .expect("device 0 has pools")
        .set_cache_limit(0);
}

/// Runs `f` on a fresh thread (no context current there) and joins it; a panic continues here.
fn isolated<R: Send>(f: impl FnOnce() -> R + Send) -> R {
    std::thread::scope(|s| s.spawn(f).join()).unwrap_or_else(|p| std::panic::resume_unwind(p))
}

/// Waits until the mock's worker has run everything queued: host functions, user-object
/// destructors, and device work such as a stream-ordered free.
fn idle(m: &MockDriver) {
    let start = std::time::Instant::now();
    while m.pending_host_fns() != 0 {
        assert!(
            start.elapsed() < std::time::Duration::from_secs(60),
            "the worker never went idle"
        );
        std::thread::yield_now();
    }
}

fn assert_clean(m: &MockDriver) {
    assert_eq!(
        (m.bad_destroys(), m.bad_uses(), m.orphans()),
        (0, 0, 0),
        "bad destroys, bad uses, orphans"
    );
}
