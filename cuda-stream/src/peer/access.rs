//! Peer access: enabling it for a context, to the peer's `cuMemAlloc` memory and to its
//! default pool ([`Device::can_access_peer`](crate::Device::can_access_peer) is the driver
//! layer's, [`MemPool::set_access`](crate::MemPool::set_access) the memory layer's).

use crate::base::error::{Result, check, driver_fn};
use crate::driver::context::{Context, bind};
use crate::ffi;
use crate::memory::pool::{PoolAccess, default_pool_raw, pools_supported, set_access_raw};

impl Context {
    /// Lets this context's work address `peer`'s memory, one direction: call it on both
    /// contexts for copies and kernels both ways.
    ///
    /// It enables context peer access (`cuCtxEnablePeerAccess`), which maps `peer`'s
    /// `cuMemAlloc` memory, and grants this device read-write access to `peer`'s device's
    /// default pool (`cuMemPoolSetAccess`), which maps its stream-ordered memory: on two H100s
    /// context peer access alone left peer copies of pool memory staged at 37 GB/s, and the
    /// grant made them 391 GB/s. Pools of the caller's ([`MemPool::new`](crate::MemPool::new))
    /// are granted with [`MemPool::set_access`](crate::MemPool::set_access), or by a peer copy
    /// on first use.
    ///
    /// Which memory of `peer` this device's work may touch afterwards:
    /// - copies ([`DeviceBuffer::copy_from_peer`](crate::DeviceBuffer::copy_from_peer)) work
    ///   on any memory with or without it; it makes them direct instead of staged;
    /// - kernels: buffers of the default pool (and of other pools once granted) may be passed
    ///   to a typed launch on this device; buffers from no pool are refused there (the driver
    ///   cannot be asked whether context peer access is still enabled), and raw pointers are
    ///   the caller's business.
    ///
    /// Idempotent: access that is already enabled (`CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED`) is
    /// `Ok`. Two devices that cannot be peers ([`Device::can_access_peer`](crate::Device::can_access_peer))
    /// give the driver's `CUDA_ERROR_PEER_ACCESS_UNSUPPORTED`, and a context of the same device
    /// `CUDA_ERROR_INVALID_DEVICE`, as errors.
    pub fn enable_peer_access(&self, peer: &Context) -> Result<()> {
        {
            let _bound = bind(self.raw())?;
            let f = driver_fn!(cuCtxEnablePeerAccess);
            // SAFETY: `peer` is a live context (held by `peer`); the flags word must be 0.
            let rc = unsafe { f(peer.raw(), 0) };
            if rc != ffi::CUresult::CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED {
                check(rc, "cuCtxEnablePeerAccess")?;
            }
        }
        if pools_supported(peer) {
            let pool = default_pool_raw(peer.device())?;
            set_access_raw(pool, self.device(), PoolAccess::ReadWrite)?;
        }
        Ok(())
    }
}
