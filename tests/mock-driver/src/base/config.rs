//! `CUDA_MOCK_CONFIG` and `cuda_mock_configure`: failure rules, the reported version and the
//! number of devices, and the fixed limits of the model.

use cuda_stream_sys::CUresult;

use super::flavour::canonical;

/// The environment variable read once, at the first call into the library.
pub(crate) const CONFIG_VAR: &str = "CUDA_MOCK_CONFIG";

/// How many devices the mock can pretend to have.
pub(crate) const MAX_DEVICES: usize = 8;
/// How many it has unless configured otherwise.
pub(crate) const DEFAULT_DEVICES: usize = 2;
/// `cuCtxGetStreamPriorityRange`'s answer.
pub(crate) const LEAST_PRIORITY: i32 = 0;
pub(crate) const GREATEST_PRIORITY: i32 = -5;

/// A `CUresult` given as a number or as its enumerator name (`CUDA_ERROR_OUT_OF_MEMORY`).
pub(crate) fn parse_code(s: &str) -> Option<CUresult> {
    let s = s.trim();
    if let Ok(n) = s.parse::<u32>() {
        return Some(CUresult(n));
    }
    // Every code the header defines is below 1000.
    (0..1000)
        .map(CUresult)
        .find(|&c| cuda_stream_sys::result_name(c) == s)
}

/// Fail calls of `symbol` with `code`: the `nth` call counted from when the rule was set, or every
/// call when `nth` is `None`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Rule {
    pub(crate) symbol: &'static str,
    pub(crate) nth: Option<u64>,
    pub(crate) code: CUresult,
    pub(crate) seen: u64,
}

impl Rule {
    pub(crate) fn new(symbol: &'static str, nth: Option<u64>, code: CUresult) -> Rule {
        Rule {
            symbol,
            nth,
            code,
            seen: 0,
        }
    }
}

/// What a `CUDA_MOCK_CONFIG` string (or `cuda_mock_configure`) asks for.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Config {
    pub(crate) rules: Vec<Rule>,
    pub(crate) version: Option<i32>,
    pub(crate) devices: Option<usize>,
    /// `pools=0`: no device has memory pools.
    pub(crate) pools: Option<bool>,
    /// `races=print`: each race the detector finds is also printed to stderr (for a child
    /// process, whose races no control function of the test's process can read); `races=off`:
    /// no detector (to measure what it costs).
    pub(crate) races: Option<RaceMode>,
}

/// What the race detector does (`races=`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) enum RaceMode {
    /// Records the races (the default).
    #[default]
    Count,
    /// Records them and prints each to stderr.
    Print,
    /// No detector.
    Off,
}

/// Parses `key=value` entries separated by `;`:
/// `fail=SYMBOL:N:CODE` (N 1-based, or `*` for every call; CODE a number or a `CUDA_*` name),
/// `version=12040`, `devices=1`, `pools=0` (no device has memory pools; `pools=1`, all do),
/// `races=print` (each race found is printed to stderr; `races=count`, only counted; `races=off`,
/// no race detector).
pub(crate) fn parse_config(spec: &str) -> Result<Config, String> {
    let mut cfg = Config::default();
    for entry in spec.split(';').map(str::trim).filter(|e| !e.is_empty()) {
        let (key, value) = entry
            .split_once('=')
            .ok_or_else(|| format!("`{entry}` is not key=value"))?;
        let value = value.trim();
        match key.trim() {
            "fail" => {
                let mut parts = value.split(':');
                let (Some(name), Some(nth), Some(code), None) =
                    (parts.next(), parts.next(), parts.next(), parts.next())
                else {
                    return Err(format!("`{entry}`: expected fail=SYMBOL:N:CODE"));
                };
                let symbol = canonical(name.trim())
                    .ok_or_else(|| format!("`{entry}`: the mock does not export `{name}`"))?;
                let nth = match nth.trim() {
                    "*" => None,
                    n => match n.parse::<u64>() {
                        Ok(n) if n >= 1 => Some(n),
                        _ => return Err(format!("`{entry}`: N must be 1, 2, ... or `*`")),
                    },
                };
                let code = parse_code(code)
                    .ok_or_else(|| format!("`{entry}`: unknown CUresult `{code}`"))?;
                cfg.rules.push(Rule::new(symbol, nth, code));
            }
            "version" => {
                let v = value
                    .parse::<i32>()
                    .ok()
                    .filter(|v| *v > 0)
                    .ok_or_else(|| format!("`{entry}`: expected a version such as 12040"))?;
                cfg.version = Some(v);
            }
            "devices" => {
                let n = value
                    .parse::<usize>()
                    .ok()
                    .filter(|n| *n <= MAX_DEVICES)
                    .ok_or_else(|| format!("`{entry}`: expected 0 to {MAX_DEVICES} devices"))?;
                cfg.devices = Some(n);
            }
            "pools" => {
                cfg.pools = Some(match value {
                    "0" => false,
                    "1" => true,
                    _ => return Err(format!("`{entry}`: expected pools=0 or pools=1")),
                });
            }
            "races" => {
                cfg.races = Some(match value {
                    "print" => RaceMode::Print,
                    "count" => RaceMode::Count,
                    "off" => RaceMode::Off,
                    _ => {
                        return Err(format!(
                            "`{entry}`: expected races=print, races=count or races=off"
                        ));
                    }
                });
            }
            "omit" => {
                return Err(format!(
                    "`{entry}`: symbols cannot be omitted at run time (a loaded library cannot \
                     take back an export); load the flavour of the CUDA version without it \
                     (cuda_mock_driver::FLAVOURS)"
                ));
            }
            other => return Err(format!("`{entry}`: unknown key `{other}`")),
        }
    }
    Ok(cfg)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::base::flavour::{FLAVOUR, canonical};

    #[test]
    fn parses_every_key() {
        let c = parse_config(
            " fail=cuStreamCreate:1:2; fail=cuStreamDestroy:*:CUDA_ERROR_INVALID_HANDLE;\
             version=12040;devices=1;",
        )
        .unwrap();
        assert_eq!(
            c.rules,
            vec![
                Rule::new(
                    "cuStreamCreate",
                    Some(1),
                    CUresult::CUDA_ERROR_OUT_OF_MEMORY
                ),
                Rule::new(
                    "cuStreamDestroy_v2",
                    None,
                    CUresult::CUDA_ERROR_INVALID_HANDLE
                ),
            ]
        );
        assert_eq!(c.version, Some(12040));
        assert_eq!(c.devices, Some(1));
        assert_eq!(parse_config("").unwrap(), Config::default());
    }

    #[test]
    fn races_are_printed_or_counted() {
        assert_eq!(
            parse_config("races=print").unwrap().races,
            Some(RaceMode::Print)
        );
        assert_eq!(
            parse_config("races=count").unwrap().races,
            Some(RaceMode::Count)
        );
        assert_eq!(
            parse_config("races=off").unwrap().races,
            Some(RaceMode::Off)
        );
        assert_eq!(parse_config("").unwrap().races, None);
    }

    #[test]
    fn rejects_what_it_cannot_do() {
        for bad in [
            "fail=cuStreamCreate:0:2",
            "fail=cuStreamCreate:1",
            "fail=cuTexObjectCreate:1:2",
            "fail=cuStreamCreate:1:CUDA_ERROR_NOPE",
            "version=abc",
            "devices=9",
            "pools=2",
            "races=loud",
            "omit=cuStreamGetId",
            "colour=blue",
            "nonsense",
        ] {
            assert!(parse_config(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn names_map_to_exports() {
        assert_eq!(
            FLAVOUR.version, 13000,
            "the unit tests run in the full flavour"
        );
        assert_eq!(canonical("cuStreamDestroy"), Some("cuStreamDestroy_v2"));
        assert_eq!(canonical("cuStreamDestroy_v2"), Some("cuStreamDestroy_v2"));
        assert_eq!(canonical("cuStreamDestroy_v2000"), Some("cuStreamDestroy"));
        assert_eq!(
            canonical("cuEventElapsedTime"),
            Some("cuEventElapsedTime_v2")
        );
        assert_eq!(
            canonical("cuEventElapsedTime_v2000"),
            Some("cuEventElapsedTime")
        );
        assert_eq!(canonical("cuMemGetInfo"), Some("cuMemGetInfo_v2"));
        assert_eq!(canonical("cuMemAlloc"), Some("cuMemAlloc_v2"));
        assert_eq!(canonical("cuTexObjectCreate"), None);
        assert_eq!(parse_code("600"), Some(CUresult::CUDA_ERROR_NOT_READY));
        assert_eq!(
            parse_code("CUDA_ERROR_NOT_READY"),
            Some(CUresult::CUDA_ERROR_NOT_READY)
        );
    }
}
