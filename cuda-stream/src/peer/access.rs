//! Peer access: whether one device can address another's memory, and enabling it for a context.

use crate::base::error::{Result, check, driver_fn};
use crate::driver::context::{Context, bind};
use crate::driver::device::Device;
use crate::ffi;

impl Device {
    /// Whether this device can address `peer`'s memory directly (`cuDeviceCanAccessPeer`):
    /// NVLink or PCIe peer-to-peer between the two. A device is not its own peer: the driver
    /// answers `false` for `peer == self`, and so does this (on one GPU every answer is `false`).
    pub fn can_access_peer(self, peer: Device) -> Result<bool> {
        crate::driver::device::init()?;
        let f = driver_fn!(cuDeviceCanAccessPeer);
        let mut can = 0;
        // SAFETY: `can` is a valid out-pointer; the driver checks both ordinals.
        let rc = unsafe { f(&mut can, self.raw(), peer.raw()) };
        check(rc, "cuDeviceCanAccessPeer")?;
        Ok(can != 0)
    }
}

impl Context {
    /// Lets this context's work address `peer`'s memory (`cuCtxEnablePeerAccess`), one
    /// direction: call it on both contexts for copies and kernels both ways. Idempotent: access
    /// that is already enabled (`CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED`) is `Ok`. Two devices
    /// that cannot be peers ([`Device::can_access_peer`]) give the driver's
    /// `CUDA_ERROR_PEER_ACCESS_UNSUPPORTED`, and a context of the same device
    /// `CUDA_ERROR_INVALID_DEVICE`, as errors.
    ///
    /// Peer copies ([`DeviceBuffer::copy_from_peer`](crate::DeviceBuffer::copy_from_peer)) work
    /// without it (the driver stages them); enabling it makes them direct.
    pub fn enable_peer_access(&self, peer: &Context) -> Result<()> {
        let _bound = bind(self.raw())?;
        let f = driver_fn!(cuCtxEnablePeerAccess);
        // SAFETY: `peer` is a live context (held by `peer`); the flags word must be 0.
        let rc = unsafe { f(peer.raw(), 0) };
        if rc == ffi::CUresult::CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED {
            return Ok(());
        }
        check(rc, "cuCtxEnablePeerAccess")
    }
}
