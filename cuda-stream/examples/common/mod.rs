//! What the ports of cudarc's examples share: how each ends. `0` with `NAME: ok (what was
//! checked)`, `1` with the error and its causes, `2` where no CUDA driver (or device) is found,
//! and a skip (status 0, saying why) where the example needs more devices than there are.

use std::process::ExitCode;

use cuda_stream::ffi::CUresult;
use cuda_stream::{Device, Error};

/// Runs `run` where at least `devices` devices are found, and reports its outcome as above.
pub fn main(name: &str, devices: usize, run: impl FnOnce() -> Result<String, Error>) -> ExitCode {
    let result = match Device::count() {
        Ok(0) => return no_driver(name, "the driver sees no device"),
        Err(Error::Load(e)) => return no_driver(name, e),
        Err(e) if e.driver_code() == Some(CUresult::CUDA_ERROR_NO_DEVICE) => {
            return no_driver(name, e);
        }
        Ok(n) if n < devices => {
            println!("{name}: skipped: needs {devices} GPUs, {n} found");
            return ExitCode::SUCCESS;
        }
        Ok(_) => run(),
        Err(e) => Err(e),
    };
    match result {
        Ok(checked) => {
            println!("{name}: ok ({checked})");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("{name}: error: {e}");
            let mut source = std::error::Error::source(&e);
            while let Some(s) = source {
                eprintln!("  caused by: {s}");
                source = s.source();
            }
            ExitCode::FAILURE
        }
    }
}

fn no_driver(name: &str, why: impl std::fmt::Display) -> ExitCode {
    eprintln!("{name}: no CUDA driver found: {why}");
    ExitCode::from(2)
}
