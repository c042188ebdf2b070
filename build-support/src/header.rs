//! The pinned inputs: the NVIDIA wheels that carry `cuda.h`, `nccl.h` and `nvrtc.h`, their and
//! the headers' sha256, fetching and unpacking a wheel, and the banners that name them in every
//! output.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::Result;
use crate::sha256::sha256_hex;

/// The header's `CUDA_VERSION` and where it comes from.
const HEADER_VERSION: &str = "13.0 (nvidia-cuda-runtime 13.0.96)";
const WHEEL_NAME: &str = "nvidia-cuda-runtime";
const WHEEL_VERSION: &str = "13.0.96";
const WHEEL_FILE: &str =
    "nvidia_cuda_runtime-13.0.96-py3-none-manylinux2014_x86_64.manylinux_2_17_x86_64.whl";
const WHEEL_SHA256: &str = "7f82250d7782aa23b6cfe765ecc7db554bd3c2870c43f3d1821f1d18aebf0548";
const WHEEL_INCLUDE: &str = "nvidia/cu13/include";
/// sha256 of the pinned `cuda.h`.
pub(crate) const HEADER_SHA256: &str =
    "64025f81a9d6d2b10e9e11654f3523e5b046d01b883f0b9ca474e463274b80d4";
/// Must match the exact version pinned in `build-support/Cargo.toml`.
const BINDGEN_VERSION: &str = "0.72.1";
pub(crate) const REGENERATE: &str = "cargo run -p build-support -- generate";

/// `nccl.h` and where it comes from: the NCCL runtime wheel for CUDA 13.
const NCCL_HEADER_VERSION: &str = "NCCL 2.27.7 (nvidia-nccl-cu13 2.27.7)";
const NCCL_WHEEL: Wheel = Wheel {
    name: "nvidia-nccl-cu13",
    version: "2.27.7",
    file: "nvidia_nccl_cu13-2.27.7-py3-none-manylinux2014_x86_64.manylinux_2_17_x86_64.whl",
    sha256: "b28a524abd8389b76a4a3f133c76a7aaa7005e47fcaa9d9603b90103927a3f93",
    include: "nvidia/nccl/include",
};
/// sha256 of the pinned `nccl.h`.
pub(crate) const NCCL_HEADER_SHA256: &str =
    "32f93de5a3f816ff34374defec376374e111784469fd093c6faf16b33aac4743";

/// `nvrtc.h` and where it comes from: the NVRTC wheel of CUDA 13.0, the newest 13.0 release.
/// 13.0 and not newer: the GPU machines run driver 580 (CUDA 13.0), beside PyTorch cu130, whose
/// NVRTC is a 13.0 one. The bindings only need a header whose functions every NVRTC 13 has; but
/// the same wheel is what CI loads to compile test programs, and PTX from a newer NVRTC carries
/// a PTX ISA version the 13.0 driver's JIT rejects (CUBIN would load under minor-version
/// compatibility), so CI tests the NVRTC the GPU machines find. (`.ci/run` reads the version
/// and sha256 from here to install the wheel.)
const NVRTC_HEADER_VERSION: &str = "CUDA 13.0 (nvidia-cuda-nvrtc 13.0.88)";
const NVRTC_WHEEL: Wheel = Wheel {
    name: "nvidia-cuda-nvrtc",
    version: "13.0.88",
    file: "nvidia_cuda_nvrtc-13.0.88-py3-none-manylinux2010_x86_64.manylinux_2_12_x86_64.whl",
    sha256: "ad9b6d2ead2435f11cbb6868809d2adeeee302e9bb94bcf0539c7a40d80e8575",
    include: "nvidia/cu13/include",
};
/// sha256 of the pinned `nvrtc.h`.
pub(crate) const NVRTC_HEADER_SHA256: &str =
    "9e4415b5ff5a2c58ec2b1a02eefcc743187c94ce48b00743c68092efe8c0f86e";

/// A pinned wheel: what `pip download` fetches, its sha256, and the folder of headers in it.
struct Wheel {
    name: &'static str,
    version: &'static str,
    file: &'static str,
    sha256: &'static str,
    include: &'static str,
}

/// Downloads the pinned runtime wheel (once), checks it, and unpacks its include folder.
pub(crate) fn fetch_wheel(root: &Path) -> Result<PathBuf> {
    fetch(
        root,
        &Wheel {
            name: WHEEL_NAME,
            version: WHEEL_VERSION,
            file: WHEEL_FILE,
            sha256: WHEEL_SHA256,
            include: WHEEL_INCLUDE,
        },
    )
}

/// Downloads the pinned NCCL wheel (once), checks it, and unpacks its include folder.
pub(crate) fn fetch_nccl_wheel(root: &Path) -> Result<PathBuf> {
    fetch(root, &NCCL_WHEEL)
}

/// Downloads the pinned NVRTC wheel (once), checks it, and unpacks its include folder.
pub(crate) fn fetch_nvrtc_wheel(root: &Path) -> Result<PathBuf> {
    fetch(root, &NVRTC_WHEEL)
}

fn fetch(root: &Path, w: &Wheel) -> Result<PathBuf> {
    let cache = root.join(".header-cache");
    let wheel = cache.join(w.file);
    if !wheel.exists() {
        let status = Command::new("python3")
            .args([
                "-m",
                "pip",
                "download",
                "--quiet",
                "--no-deps",
                "--only-binary=:all:",
            ])
            .args([
                "--platform",
                "manylinux2014_x86_64",
                "--python-version",
                "3.11",
            ])
            .arg("-d")
            .arg(&cache)
            .arg(format!("{}=={}", w.name, w.version))
            .status()
            .map_err(|e| format!("python3 -m pip: {e}"))?;
        if !status.success() {
            return Err(format!("pip download {}=={} failed", w.name, w.version));
        }
    }
    let bytes = std::fs::read(&wheel).map_err(|e| format!("{}: {e}", wheel.display()))?;
    let sum = sha256_hex(&bytes);
    if sum != w.sha256 {
        return Err(format!("{}: sha256 {sum}, expected {}", w.file, w.sha256));
    }
    let unpacked = cache.join("unpacked");
    let script = format!(
        "import zipfile,sys; z=zipfile.ZipFile(sys.argv[1]); \
         [z.extract(n, sys.argv[2]) for n in z.namelist() if n.startswith('{}/')]",
        w.include
    );
    let status = Command::new("python3")
        .args(["-c", &script])
        .arg(&wheel)
        .arg(&unpacked)
        .status()
        .map_err(|e| format!("python3: {e}"))?;
    if !status.success() {
        return Err("unpacking the wheel failed".into());
    }
    Ok(unpacked.join(w.include))
}

/// The banner of the generated NCCL bindings.
pub(crate) fn nccl_banner() -> String {
    format!(
        "// @generated by build-support with bindgen {BINDGEN_VERSION} from nccl.h of \
         {NCCL_HEADER_VERSION},\n// sha256 {NCCL_HEADER_SHA256}.\n// Do not edit: regenerate with \
         `{REGENERATE}`; `build-support check` fails on drift.\n"
    )
}

/// The banner of the generated NVRTC bindings.
pub(crate) fn nvrtc_banner() -> String {
    format!(
        "// @generated by build-support with bindgen {BINDGEN_VERSION} from nvrtc.h of \
         {NVRTC_HEADER_VERSION},\n// sha256 {NVRTC_HEADER_SHA256}.\n// Do not edit: regenerate with \
         `{REGENERATE}`; `build-support check` fails on drift.\n"
    )
}

pub(crate) fn banner() -> String {
    format!(
        "// @generated by build-support with bindgen {BINDGEN_VERSION} from cuda.h of CUDA \
         {HEADER_VERSION},\n// sha256 {HEADER_SHA256}.\n// Do not edit: regenerate with \
         `{REGENERATE}`; `build-support check` fails on drift.\n"
    )
}
