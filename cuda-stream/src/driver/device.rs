//! The driver's initialisation and version, and devices.

use std::ffi::c_char;
use std::fmt;
use std::sync::OnceLock;

use crate::base::error::{Error, Result, check, driver_fn, refuse_in_host_fn};
use crate::ffi;

/// Initialises the driver once per process (`cuInit(0)`); later calls return the first outcome.
pub fn init() -> Result<()> {
    static INIT: OnceLock<Result<()>> = OnceLock::new();
    // Inside a host function the refusal is returned, never remembered as the outcome.
    refuse_in_host_fn("cuInit")?;
    INIT.get_or_init(|| {
        let f = driver_fn!(cuInit);
        // SAFETY: cuInit takes a flags word, which must be 0.
        check(unsafe { f(0) }, "cuInit")
    })
    .clone()
}

/// The driver's version (`1000 * major + 10 * minor`, e.g. 13000 for CUDA 13.0).
pub fn driver_version() -> Result<i32> {
    let f = driver_fn!(cuDriverGetVersion);
    let mut v = 0;
    // SAFETY: `v` is a valid out-pointer.
    check(unsafe { f(&mut v) }, "cuDriverGetVersion")?;
    Ok(v)
}

/// A CUDA device, by ordinal.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Device {
    raw: ffi::CUdevice,
}

impl fmt::Debug for Device {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Device({})", self.raw)
    }
}

impl Device {
    /// How many CUDA devices the driver sees.
    pub fn count() -> Result<usize> {
        init()?;
        let f = driver_fn!(cuDeviceGetCount);
        let mut n = 0;
        // SAFETY: `n` is a valid out-pointer.
        check(unsafe { f(&mut n) }, "cuDeviceGetCount")?;
        Ok(n.max(0) as usize)
    }

    /// The device with this ordinal.
    pub fn new(ordinal: usize) -> Result<Device> {
        let count = Device::count()?;
        if ordinal >= count {
            return Err(Error::NoSuchDevice { ordinal, count });
        }
        let f = driver_fn!(cuDeviceGet);
        let mut raw = 0;
        // SAFETY: `raw` is a valid out-pointer; the ordinal is in range.
        check(unsafe { f(&mut raw, ordinal as i32) }, "cuDeviceGet")?;
        Ok(Device { raw })
    }

    /// Wraps a raw `CUdevice` (a device ordinal). Any value is safe: the driver checks the
    /// ordinal of every call that takes one, so a bogus one (`-1`, `0x1234`) makes each method
    /// return `CUDA_ERROR_INVALID_DEVICE` (shown on a GPU by `tests/tests/bogus_values.rs`).
    pub fn from_raw(raw: ffi::CUdevice) -> Device {
        Device { raw }
    }

    /// The raw `CUdevice` (its ordinal).
    pub fn raw(self) -> ffi::CUdevice {
        self.raw
    }

    /// The device's ordinal.
    pub fn ordinal(self) -> usize {
        self.raw.max(0) as usize
    }

    /// The device's name, such as `NVIDIA H100 80GB HBM3`.
    pub fn name(self) -> Result<String> {
        let f = driver_fn!(cuDeviceGetName);
        let mut buf = [0 as c_char; 256];
        check(
            // SAFETY: the buffer is writable for its full length, which is passed; the driver
            // checks the ordinal.
            unsafe { f(buf.as_mut_ptr(), buf.len() as i32, self.raw) },
            "cuDeviceGetName",
        )?;
        let bytes: Vec<u8> = buf
            .iter()
            .take_while(|&&c| c != 0)
            .map(|&c| c as u8)
            .collect();
        Ok(String::from_utf8_lossy(&bytes).into_owned())
    }

    /// A device attribute (`cuDeviceGetAttribute`).
    pub fn attribute(self, attribute: ffi::CUdevice_attribute) -> Result<i32> {
        let f = driver_fn!(cuDeviceGetAttribute);
        let mut v = 0;
        check(
            // SAFETY: `v` is a valid out-pointer; the driver checks the attribute and the ordinal.
            unsafe { f(&mut v, attribute, self.raw) },
            "cuDeviceGetAttribute",
        )?;
        Ok(v)
    }
}

impl Device {
    /// Whether this device can address `peer`'s memory directly (`cuDeviceCanAccessPeer`):
    /// NVLink or PCIe peer-to-peer between the two. A device is not its own peer: the driver
    /// answers `false` for `peer == self`, and so does this (on one GPU every answer is `false`).
    pub fn can_access_peer(self, peer: Device) -> Result<bool> {
        init()?;
        let f = driver_fn!(cuDeviceCanAccessPeer);
        let mut can = 0;
        // SAFETY: `can` is a valid out-pointer; the driver checks both ordinals.
        let rc = unsafe { f(&mut can, self.raw(), peer.raw()) };
        check(rc, "cuDeviceCanAccessPeer")?;
        Ok(can != 0)
    }
}
