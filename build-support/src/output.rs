//! The two modes' outputs: `generate` writes the files into `cuda-sys/src/generated/`, `check`
//! compares them with the committed ones and fails on any difference.

use std::path::Path;
use std::process::Command;

use crate::Result;
use crate::generate::generate;
use crate::header::REGENERATE;
use crate::nccl::generate_nccl;

/// Generates the bindings and writes them over the committed ones.
pub(crate) fn write(include: &Path, nccl_include: &Path, out_dir: &Path) -> Result<()> {
    let (mut files, report) = generate(include)?;
    files.extend(generate_nccl(nccl_include)?);
    for line in &report.lines {
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
pub(crate) fn check(include: &Path, nccl_include: &Path, out_dir: &Path) -> Result<()> {
    let (mut files, _) = generate(include)?;
    files.extend(generate_nccl(nccl_include)?);
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
