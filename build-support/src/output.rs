//! The two modes' outputs: `generate` writes the files into `cuda-sys/src/generated/`, `check`
//! compares them with the committed ones and fails on any difference.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::Result;
use crate::generate::generate;
use crate::header::REGENERATE;
use crate::nccl::generate_nccl;
use crate::nvrtc::generate_nvrtc;

/// Where each pinned header lies.
pub(crate) struct Includes {
    /// The folder of `cuda.h`.
    pub(crate) cuda: PathBuf,
    /// The folder of `nccl.h`.
    pub(crate) nccl: PathBuf,
    /// The folder of `nvrtc.h`.
    pub(crate) nvrtc: PathBuf,
}

/// Generated files: each name with its text.
type Files = Vec<(String, String)>;

/// Every generated file, and the driver bindings' report.
fn generate_all(includes: &Includes) -> Result<(Files, Vec<String>)> {
    let (mut files, report) = generate(&includes.cuda)?;
    files.extend(generate_nccl(&includes.nccl)?);
    files.extend(generate_nvrtc(&includes.nvrtc)?);
    Ok((files, report.lines))
}

/// Generates the bindings and writes them over the committed ones.
pub(crate) fn write(includes: &Includes, out_dir: &Path) -> Result<()> {
    let (files, report) = generate_all(includes)?;
    for line in &report {
        println!("{line}");
    }
    for (name, text) in &files {
        std::fs::write(out_dir.join(name), text).map_err(|e| format!("{name}: {e}"))?;
    }
    println!("wrote {} files to {}", files.len(), out_dir.display());
    Ok(())
}

/// Generates the bindings into a temporary folder and fails, showing a diff, if any file differs
/// from the committed one.
pub(crate) fn check(includes: &Includes, out_dir: &Path) -> Result<()> {
    let (files, _) = generate_all(includes)?;
    let tmp = std::env::temp_dir().join(format!("cuda-stream-sys-check-{}", std::process::id()));
    std::fs::create_dir_all(&tmp).map_err(|e| e.to_string())?;
    let mut stale = Vec::new();
    for (name, text) in &files {
        std::fs::write(tmp.join(name), text).map_err(|e| e.to_string())?;
        let committed = std::fs::read_to_string(out_dir.join(name)).unwrap_or_default();
        if committed != *text {
            stale.push(name.clone());
            let _ = Command::new("diff")
                .arg("-u")
                .arg(out_dir.join(name))
                .arg(tmp.join(name))
                .status();
        }
    }
    let _ = std::fs::remove_dir_all(&tmp);
    if stale.is_empty() {
        println!("bindings are current ({} files)", files.len());
        Ok(())
    } else {
        Err(format!(
            "stale generated files: {stale:?}; run `{REGENERATE}`"
        ))
    }
}
