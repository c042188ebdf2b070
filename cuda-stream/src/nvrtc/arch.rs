//! [`Arch`]: the GPU architecture a program is compiled for, the architectures the loaded NVRTC
//! can compile for, and which code ([`CodeKind`]) a compilation makes for a device.

use std::fmt;

use crate::base::error::Result;
use crate::driver::device::Device;
use crate::nvrtc::call::{nvrtc_check, nvrtc_fn};

/// A GPU architecture: a compute capability, such as 9.0 (`sm_90`, H100) or 8.6 (`sm_86`).
/// `Display` gives the real architecture's name, `sm_90`.
///
/// ```
/// use cuda_stream::nvrtc::Arch;
///
/// let hopper = Arch::new(9, 0);
/// assert_eq!(hopper.to_string(), "sm_90");
/// assert_eq!(hopper.compute_name(), "compute_90");
/// assert!(Arch::new(8, 6) < hopper);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Arch {
    major: u32,
    minor: u32,
}

impl Arch {
    /// The architecture of compute capability `major.minor`.
    pub fn new(major: u32, minor: u32) -> Arch {
        Arch { major, minor }
    }

    /// `device`'s architecture, from its compute capability
    /// ([`Device::compute_capability`]).
    pub fn of(device: Device) -> Result<Arch> {
        let (major, minor) = device.compute_capability()?;
        Ok(Arch::new(major, minor))
    }

    /// The major version of the compute capability (9 for `sm_90`).
    pub fn major(self) -> u32 {
        self.major
    }

    /// The minor version of the compute capability (0 for `sm_90`).
    pub fn minor(self) -> u32 {
        self.minor
    }

    /// The real architecture's name, for CUBIN: `sm_90`.
    pub fn sm_name(self) -> String {
        format!("sm_{}{}", self.major, self.minor)
    }

    /// The virtual architecture's name, for PTX: `compute_90`.
    pub fn compute_name(self) -> String {
        format!("compute_{}{}", self.major, self.minor)
    }

    /// The number NVRTC's `nvrtcGetSupportedArchs` writes for it (90).
    fn number(self) -> u32 {
        self.major * 10 + self.minor
    }
}

impl fmt::Display for Arch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.sm_name())
    }
}

/// What a compilation makes: PTX text, which the driver JIT-compiles for the device when the
/// module is loaded, or CUBIN, machine code for one architecture that loads as it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum CodeKind {
    /// PTX for the virtual architecture (`-arch=compute_90`). A driver older than the NVRTC
    /// that wrote it may refuse it (its PTX ISA version is newer than the driver's JIT).
    Ptx,
    /// CUBIN for the real architecture (`-arch=sm_90`): no JIT when loaded, and it loads on a
    /// driver of the same major version as the NVRTC, older ones included.
    Cubin,
}

/// The architectures the loaded NVRTC can compile for (`nvrtcGetSupportedArchs`), oldest
/// first: `sm_75` to `sm_121` for NVRTC 13.0.
///
/// ```no_run
/// let archs = cuda_stream::nvrtc::supported_archs()?;
/// println!("{}", archs.iter().map(|a| a.to_string()).collect::<Vec<_>>().join(" "));
/// # Ok::<(), cuda_stream::Error>(())
/// ```
pub fn supported_archs() -> Result<Vec<Arch>> {
    let count = nvrtc_fn!(nvrtcGetNumSupportedArchs);
    let list = nvrtc_fn!(nvrtcGetSupportedArchs);
    let mut n = 0;
    // SAFETY: `n` is a valid out-pointer.
    nvrtc_check(unsafe { count(&mut n) }, "nvrtcGetNumSupportedArchs")?;
    let mut numbers = vec![0; usize::try_from(n).unwrap_or(0)];
    if !numbers.is_empty() {
        // SAFETY: the buffer holds the `n` entries NVRTC said it writes.
        let rc = unsafe { list(numbers.as_mut_ptr()) };
        nvrtc_check(rc, "nvrtcGetSupportedArchs")?;
    }
    let mut archs: Vec<Arch> = numbers
        .into_iter()
        .filter_map(|v| u32::try_from(v).ok())
        .map(|v| Arch::new(v / 10, v % 10))
        .collect();
    archs.sort();
    Ok(archs)
}

/// What a compilation for `arch` makes when the program leaves the choice open: CUBIN where the
/// loaded NVRTC supports `arch`, else PTX for the newest architecture it supports up to `arch`
/// (which the driver JIT-compiles for the device). With no such architecture, or no list (an
/// NVRTC before 11.2), PTX for `arch` itself, which NVRTC refuses with its log if it must.
pub(crate) fn choose(arch: Arch, supported: Result<Vec<Arch>>) -> (CodeKind, Arch) {
    let Ok(supported) = supported else {
        return (CodeKind::Ptx, arch);
    };
    if supported.contains(&arch) {
        return (CodeKind::Cubin, arch);
    }
    let below = supported
        .iter()
        .copied()
        .filter(|a| a.number() <= arch.number())
        .max();
    (CodeKind::Ptx, below.unwrap_or(arch))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::base::error::Error;

    #[test]
    fn cubin_where_supported_else_ptx_for_the_newest_below() {
        let supported = || Ok(vec![Arch::new(7, 5), Arch::new(8, 0), Arch::new(9, 0)]);
        assert_eq!(
            choose(Arch::new(9, 0), supported()),
            (CodeKind::Cubin, Arch::new(9, 0))
        );
        assert_eq!(
            choose(Arch::new(8, 6), supported()),
            (CodeKind::Ptx, Arch::new(8, 0))
        );
        assert_eq!(
            choose(Arch::new(12, 0), supported()),
            (CodeKind::Ptx, Arch::new(9, 0))
        );
        assert_eq!(
            choose(Arch::new(5, 0), supported()),
            (CodeKind::Ptx, Arch::new(5, 0))
        );
        let missing = Err(Error::InvalidArgument {
            reason: String::new(),
        });
        assert_eq!(
            choose(Arch::new(9, 0), missing),
            (CodeKind::Ptx, Arch::new(9, 0))
        );
    }
}
