//! The cudarc column: the same operations through cudarc's safe driver API, written as a cudarc
//! user writes them (`ctx.new_stream()`, `ctx.new_event(None)`, `event.record(&stream)`,
//! `stream.record_event(None)`, `stream.wait(&event)`, `stream.join(&other)`, `stream.fork()`, `stream.synchronize()`), in
//! the same process and on the same primary context as the raw and cuda-stream columns.
//!
//! cudarc opens libcuda itself (by the names `libcuda.so`, ..., `libcuda.so.1`) and panics where
//! the library or a symbol is missing, so [`Cudarc::open`] first asks whether it can find the
//! library, then makes every call the rows will make once, under `catch_unwind`, and checks that
//! cudarc's primary context is cuda-stream's (the same loaded driver): anything else leaves the
//! column out with the reason, and the raw and cuda-stream columns run as before.

use std::panic::{self, AssertUnwindSafe};
use std::sync::Arc;

use cudarc::driver::{CudaContext, CudaEvent, CudaStream, DriverError};

use crate::fail::must_cudarc;

/// The cudarc version this column is built with (a test keeps it in step with Cargo.lock).
pub(crate) const CUDARC_VERSION: &str = "0.19.10";

/// cudarc's context, two streams and one reused event (timing disabled, cudarc's default).
pub(crate) struct Cudarc {
    pub(crate) ctx: Arc<CudaContext>,
    pub(crate) s1: Arc<CudaStream>,
    pub(crate) s2: Arc<CudaStream>,
    pub(crate) event: CudaEvent,
}

/// Makes, once, every cudarc call the rows make. cudarc resolves each driver symbol on the first
/// call that needs it (and panics if it is missing), so once this succeeded the rows' cudarc
/// bodies cannot panic.
fn probe(ctx: &Arc<CudaContext>) -> Result<(Arc<CudaStream>, Arc<CudaStream>, CudaEvent), String> {
    fn e(what: &'static str) -> impl Fn(DriverError) -> String {
        move |err| format!("{what}: {err}")
    }
    let s1 = ctx.new_stream().map_err(e("CudaContext::new_stream"))?;
    let s2 = ctx.new_stream().map_err(e("CudaContext::new_stream"))?;
    let event = ctx.new_event(None).map_err(e("CudaContext::new_event"))?;
    drop(ctx.new_event(None).map_err(e("CudaContext::new_event"))?);
    drop(
        s1.record_event(None)
            .map_err(e("CudaStream::record_event"))?,
    );
    event.record(&s2).map_err(e("CudaEvent::record"))?;
    s1.wait(&event).map_err(e("CudaStream::wait"))?;
    s1.join(&s2).map_err(e("CudaStream::join"))?;
    let fork = s1.fork().map_err(e("CudaStream::fork"))?;
    s1.join(&fork).map_err(e("CudaStream::join"))?;
    drop(fork);
    // SAFETY: the slice is never read, and dropped at once.
    drop(unsafe { s1.alloc::<u8>(1 << 20) }.map_err(e("CudaStream::alloc"))?);
    drop(
        s1.alloc_zeros::<u32>(1 << 10)
            .map_err(e("CudaStream::alloc_zeros"))?,
    );
    s1.synchronize().map_err(e("CudaStream::synchronize"))?;
    s2.synchronize().map_err(e("CudaStream::synchronize"))?;
    Ok((s1, s2, event))
}

impl Cudarc {
    /// cudarc on device 0's primary context, which `cuda_ctx` (cuda-stream's primary context of
    /// device 0) must be; `Err` says why the column is left out.
    pub(crate) fn open(cuda_ctx: &cuda_stream::Context) -> Result<Cudarc, String> {
        // SAFETY: only tries to dlopen the candidate names and closes what it opened.
        if !unsafe { cudarc::driver::sys::is_culib_present() } {
            return Err("cudarc found no libcuda under the names it loads \
                        (libcuda.so, libcuda.so.1, ...)"
                .into());
        }
        // cudarc panics on a missing symbol: keep that from printing, and report it instead.
        let hook = panic::take_hook();
        panic::set_hook(Box::new(|_| {}));
        let opened = panic::catch_unwind(AssertUnwindSafe(|| {
            let ctx = CudaContext::new(0).map_err(|e| format!("CudaContext::new(0): {e}"))?;
            if !std::ptr::eq(ctx.cu_ctx().cast::<()>(), cuda_ctx.raw().cast::<()>()) {
                return Err(format!(
                    "cudarc's primary context {:p} is not cuda-stream's {:p}: \
                     cudarc loaded another libcuda",
                    ctx.cu_ctx(),
                    cuda_ctx.raw()
                ));
            }
            let (s1, s2, event) = probe(&ctx)?;
            Ok(Cudarc { ctx, s1, s2, event })
        }));
        panic::set_hook(hook);
        match opened {
            Ok(r) => r,
            Err(payload) => {
                let msg = payload
                    .downcast_ref::<String>()
                    .map(String::as_str)
                    .or_else(|| payload.downcast_ref::<&str>().copied())
                    .unwrap_or("(no message)");
                Err(format!("cudarc panicked: {msg}"))
            }
        }
    }

    /// Drains cudarc's streams (untimed, between batches).
    pub(crate) fn settle(&self) {
        must_cudarc(self.s1.synchronize(), "CudaStream::synchronize");
        must_cudarc(self.s2.synchronize(), "CudaStream::synchronize");
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_printed_cudarc_version_is_the_locked_one() {
        let lock = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../Cargo.lock");
        if !lock.is_file() {
            // The test binary runs away from its checkout (the GPU bundle).
            println!("skipped: no Cargo.lock at {}", lock.display());
            return;
        }
        let lock = std::fs::read_to_string(lock).expect("the workspace's Cargo.lock");
        let entry = "name = \"cudarc\"\nversion = ";
        let at = lock.find(entry).expect("cudarc in Cargo.lock") + entry.len();
        let version = lock[at..].lines().next().unwrap().trim_matches('"');
        assert_eq!(version, super::CUDARC_VERSION);
    }
}
