//! [`DriverOptions`] and the ABI limit: `CUDA_SYS_ABI_VERSION`, and the CUDA version spellings
//! it accepts ([`parse_cuda_version`]).

use super::LoadError;

/// The environment variable that limits the ABI the process-wide driver's bindings resolve
/// (`12000` or `12.0`): a binding of a newer ABI is reported missing, as on an older driver.
pub const ABI_VERSION_VAR: &str = "CUDA_SYS_ABI_VERSION";

/// Parses a CUDA version as `12000`, `12.0` or `12` (each meaning CUDA 12.0): `1000 * major +
/// 10 * minor`. `None` for anything else.
pub fn parse_cuda_version(text: &str) -> Option<u32> {
    let text = text.trim();
    let digits = |s: &str| !s.is_empty() && s.len() <= 6 && s.bytes().all(|b| b.is_ascii_digit());
    if let Some((major, minor)) = text.split_once('.') {
        if !digits(major) || !digits(minor) || minor.len() > 2 {
            return None;
        }
        let (major, minor): (u32, u32) = (major.parse().ok()?, minor.parse().ok()?);
        return (1..100)
            .contains(&major)
            .then_some(1000 * major + 10 * minor);
    }
    if !digits(text) {
        return None;
    }
    match text.parse::<u32>().ok()? {
        major @ 1..=99 => Some(1000 * major),
        v @ 1000..=99_990 if v % 10 == 0 => Some(v),
        _ => None,
    }
}

/// How a [`Driver`](super::Driver) is opened.
///
/// ```no_run
/// use cuda_stream_sys::{Driver, DriverOptions};
///
/// // Resolve every binding as on a CUDA 12.0 driver, whatever the installed driver is.
/// let driver = Driver::open_default_with(DriverOptions::new().abi_version(12000))?;
/// assert!(driver.abi_version() <= 12000);
/// assert!(driver.cuEventElapsedTime().is_err()); // the 12.8 ABI
/// assert!(driver.cuEventElapsedTime_v2000().is_ok()); // the original one
/// # Ok::<(), cuda_stream_sys::LoadError>(())
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DriverOptions {
    pub(super) abi_version: Option<u32>,
    pub(super) from_env: bool,
}

impl DriverOptions {
    /// No ABI limit: every binding the driver has resolves.
    pub const fn new() -> DriverOptions {
        DriverOptions {
            abi_version: None,
            from_env: false,
        }
    }

    /// What the environment asks for: the ABI limit of `CUDA_SYS_ABI_VERSION` (`12000` or
    /// `12.0`), if set and not empty. An unparsable value is [`LoadError::InvalidAbiVersion`].
    pub fn from_env() -> Result<DriverOptions, LoadError> {
        let Some(value) = std::env::var_os(ABI_VERSION_VAR).filter(|v| !v.is_empty()) else {
            return Ok(DriverOptions::new());
        };
        let text = value.to_string_lossy();
        match parse_cuda_version(&text) {
            Some(v) => Ok(DriverOptions {
                abi_version: Some(v),
                from_env: true,
            }),
            None => Err(LoadError::InvalidAbiVersion {
                setting: ABI_VERSION_VAR,
                value: text.into_owned(),
            }),
        }
    }

    /// Resolves no binding whose ABI is newer than CUDA `version` (`1000 * major + 10 * minor`,
    /// such as 12000): each is reported missing, as it would be on a driver of that version, and
    /// code that falls back to older ABIs takes the fallback. A version below 1000 is refused
    /// when the driver is opened ([`LoadError::InvalidAbiVersion`]).
    pub const fn abi_version(mut self, version: u32) -> DriverOptions {
        self.abi_version = Some(version);
        self.from_env = false;
        self
    }

    /// The configured ABI limit, if any.
    pub const fn abi_limit(&self) -> Option<u32> {
        self.abi_version
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_parse_in_both_spellings() {
        assert_eq!(parse_cuda_version("12000"), Some(12000));
        assert_eq!(parse_cuda_version("12.0"), Some(12000));
        assert_eq!(parse_cuda_version(" 12.8 "), Some(12080));
        assert_eq!(parse_cuda_version("11.4"), Some(11040));
        assert_eq!(parse_cuda_version("13"), Some(13000));
        assert_eq!(parse_cuda_version("12080"), Some(12080));
        for bad in [
            "", "abc", "12.", ".5", "12.0.1", "120", "12005", "-12", "12.100", "1e4",
        ] {
            assert_eq!(parse_cuda_version(bad), None, "{bad}");
        }
    }
}
