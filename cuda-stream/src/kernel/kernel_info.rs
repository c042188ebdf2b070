//! What a [`Module`](crate::Module) remembers of each kernel it has handed out: its name and its
//! parameters, read once (from `cuFuncGetParamInfo` where the driver has it, else from the PTX
//! the module was loaded from), so that launches check their arguments without a driver call.

use std::sync::{Mutex, OnceLock};

use crate::base::error::{Error, Result, lookup};
use crate::base::params::{ParamInfo, ParamKind};
use crate::driver::device::Device;
use crate::ffi;

/// The most parameters a kernel can have (4 KiB of parameters before CUDA 12.1, 32 KiB after,
/// of at least one byte each): where the loop over `cuFuncGetParamInfo` gives up.
const MAX_PARAMS: usize = 32 * 1024;

/// One kernel's name and parameters (`None`: unknown, launches unchecked), and what its
/// device was found to support for launch attributes (asked once each).
#[derive(Debug)]
pub(crate) struct KernelInfo {
    pub(crate) name: String,
    pub(crate) params: Option<Vec<ParamInfo>>,
    pub(crate) device: Device,
    pub(crate) features: [OnceLock<bool>; 4],
}

/// A launch attribute, with what it needs of the driver and the device.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Feature {
    Cluster,
    Cooperative,
    Programmatic,
    Priority,
}

impl Feature {
    /// The header's name of the attribute.
    pub(crate) fn attribute(self) -> &'static str {
        match self {
            Feature::Cluster => "CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION",
            Feature::Cooperative => "CU_LAUNCH_ATTRIBUTE_COOPERATIVE",
            Feature::Programmatic => "CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION",
            Feature::Priority => "CU_LAUNCH_ATTRIBUTE_PRIORITY",
        }
    }

    /// The first CUDA version whose driver takes the attribute.
    pub(crate) fn since(self) -> i32 {
        match self {
            Feature::Cooperative => 11060,
            Feature::Cluster | Feature::Programmatic => 11080,
            Feature::Priority => 12000,
        }
    }

    /// What the device must have, in words.
    pub(crate) fn device_needs(self) -> &'static str {
        match self {
            Feature::Cluster => "CU_DEVICE_ATTRIBUTE_CLUSTER_LAUNCH",
            Feature::Cooperative => "CU_DEVICE_ATTRIBUTE_COOPERATIVE_LAUNCH",
            Feature::Programmatic => "compute capability 9.0",
            Feature::Priority => "nothing",
        }
    }
}

impl KernelInfo {
    /// A record of `name` on `device`.
    pub(crate) fn new(name: &str, params: Option<Vec<ParamInfo>>, device: Device) -> KernelInfo {
        KernelInfo {
            name: name.to_string(),
            params,
            device,
            features: Default::default(),
        }
    }

    /// Whether the device supports `feature` (`cuDeviceGetAttribute`, asked once).
    pub(crate) fn supports(&self, feature: Feature) -> Result<bool> {
        let cell = &self.features[feature as usize];
        if let Some(&yes) = cell.get() {
            return Ok(yes);
        }
        use ffi::CUdevice_attribute as A;
        let yes = match feature {
            Feature::Cluster => {
                self.device
                    .attribute(A::CU_DEVICE_ATTRIBUTE_CLUSTER_LAUNCH)?
                    != 0
            }
            Feature::Cooperative => {
                self.device
                    .attribute(A::CU_DEVICE_ATTRIBUTE_COOPERATIVE_LAUNCH)?
                    != 0
            }
            Feature::Programmatic => {
                self.device
                    .attribute(A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)?
                    >= 9
            }
            Feature::Priority => true,
        };
        Ok(*cell.get_or_init(|| yes))
    }
}

/// The kernels a module has handed out, each boxed once and never moved or removed while the
/// module lives, so that `Function<'m>` can hold a `&'m KernelInfo`.
#[derive(Debug, Default)]
// Boxed so that an entry stays put when the list grows.
#[allow(clippy::vec_box)]
pub(crate) struct KernelInfos(Mutex<Vec<Box<KernelInfo>>>);

impl KernelInfos {
    /// The entry of `name`, made by `make` if there is none yet.
    pub(crate) fn get_or_try_insert(
        &self,
        name: &str,
        make: impl FnOnce() -> Result<KernelInfo>,
    ) -> Result<&KernelInfo> {
        let lock = || self.0.lock().unwrap_or_else(|e| e.into_inner());
        let found = lock()
            .iter()
            .find(|k| k.name == name)
            .map(|k| &**k as *const KernelInfo);
        let ptr = match found {
            Some(p) => p,
            None => {
                // Made without the lock held (it may call the driver); a racing thread's entry
                // wins, and this one is dropped.
                let made = Box::new(make()?);
                let mut list = lock();
                match list.iter().find(|k| k.name == name) {
                    Some(k) => &**k as *const KernelInfo,
                    None => {
                        let p = &*made as *const KernelInfo;
                        list.push(made);
                        p
                    }
                }
            }
        };
        // SAFETY: the box is in the list, which only grows, and is dropped with `self`; its
        // content is never mutated. The reference borrows `self`.
        Ok(unsafe { &*ptr })
    }
}

/// The parameters of `raw` by `cuFuncGetParamInfo` (CUDA 12.4), with the kinds of `ptx` where
/// it agrees on the sizes; `Ok(None)` where the driver lacks the function.
///
/// Where the PTX gives the parameters, only their indices are asked: the driver compiled the
/// same declaration, and asking one past the end fails with `CUDA_ERROR_INVALID_VALUE`, an API
/// error that plain `compute-sanitizer` reports. A kernel whose PTX was not read (a cubin, or a
/// declaration the parser could not read) is asked index by index until that error: the one
/// probe that remains, reported by compute-sanitizer where its API errors are shown.
pub(crate) fn driver_params(
    raw: ffi::CUfunction,
    ptx: Option<&[ParamInfo]>,
) -> Result<Option<Vec<ParamInfo>>> {
    let f = match lookup("cuFuncGetParamInfo", ffi::fns::cuFuncGetParamInfo) {
        Ok(f) => f,
        Err(e @ Error::InHostFunction { .. }) => return Err(e),
        Err(_) => return Ok(None),
    };
    let mut params = Vec::new();
    let known = ptx.map_or(MAX_PARAMS, <[ParamInfo]>::len);
    for index in 0..known {
        let (mut offset, mut size) = (0usize, 0usize);
        // SAFETY: the function's module is loaded (the caller holds it); the out-pointers are
        // valid.
        let rc = unsafe { f(raw, index, &mut offset, &mut size) };
        match rc {
            ffi::CUresult::CUDA_SUCCESS => params.push(ParamInfo {
                size: u32::try_from(size).unwrap_or(u32::MAX),
                kind: ParamKind::Any,
            }),
            // Past the last parameter.
            ffi::CUresult::CUDA_ERROR_INVALID_VALUE => break,
            // A driver that cannot say for this kernel: the PTX (or nothing) answers instead.
            ffi::CUresult::CUDA_ERROR_NOT_SUPPORTED if index == 0 => return Ok(None),
            rc => return Err(Error::driver("cuFuncGetParamInfo", rc)),
        }
    }
    if let Some(ptx) = ptx {
        let same_sizes =
            ptx.len() == params.len() && ptx.iter().zip(&params).all(|(a, b)| a.size == b.size);
        if same_sizes {
            params.copy_from_slice(ptx);
        }
    }
    Ok(Some(params))
}
