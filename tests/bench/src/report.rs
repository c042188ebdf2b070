//! The report: rows, targets, the Markdown tables printed for `BENCHMARKS.md`, and the same
//! results as JSON (`--json FILE`) for the GPU bundle's combined table.

use std::fmt::Write as _;

use crate::first_use::{FIRST_USE_STEPS, FirstUse};
use crate::method::{Config, Measured, Peer, Side, Spread};

/// What a row's cuda-stream column must achieve.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Target {
    /// cuda-stream / raw at most this.
    Ratio(f64),
    /// cuda-stream below this many ns.
    BelowNs(f64),
    /// No target; reported for information.
    None,
}

/// One line of the main table.
#[derive(Debug, Clone)]
pub(crate) struct Row {
    /// A stable name for the row, for machine-readable output and the peers' results.
    pub(crate) id: &'static str,
    /// What the row measures, as printed.
    pub(crate) op: String,
    pub(crate) measured: Measured,
    pub(crate) target: Target,
}

impl Row {
    /// `Some(true)` when the row meets its target, `None` when it has none.
    pub(crate) fn met(&self) -> Option<bool> {
        let safe = &self.measured.safe;
        match self.target {
            Target::Ratio(t) => Some(safe.ratio <= t),
            Target::BelowNs(t) => Some(safe.ns < t),
            Target::None => None,
        }
    }

    fn target_cell(&self) -> String {
        let verdict = if self.met() == Some(true) {
            "met"
        } else {
            "MISSED"
        };
        match self.target {
            Target::Ratio(t) => format!("<= {t:.2} ({verdict})"),
            Target::BelowNs(t) => format!("< {t:.0} ns (cuda-stream; {verdict})"),
            Target::None => "—".to_string(),
        }
    }
}

/// The rows in the order they are measured and printed.
#[derive(Debug, Default)]
pub(crate) struct Rows(pub(crate) Vec<Row>);

impl Rows {
    /// Adds a row.
    pub(crate) fn add(
        &mut self,
        id: &'static str,
        op: impl Into<String>,
        target: Target,
        measured: Measured,
    ) {
        debug_assert!(self.0.iter().all(|r| r.id != id), "two rows named {id:?}");
        self.0.push(Row {
            id,
            op: op.into(),
            measured,
            target,
        });
    }
}

/// `ns` with a unit that keeps it short.
pub(crate) fn fmt_ns(ns: f64) -> String {
    if ns < 1e3 {
        format!("{ns:.1} ns")
    } else if ns < 1e6 {
        format!("{:.2} µs", ns / 1e3)
    } else {
        format!("{:.2} ms", ns / 1e6)
    }
}

/// `min–max (IQR q1–q3)`.
fn fmt_spread(s: &Spread) -> String {
    format!("{:.3}–{:.3} (IQR {:.3}–{:.3})", s.min, s.max, s.q1, s.q3)
}

/// `raw-first / side-first`: the median ratio of each order.
fn fmt_orders(s: &Side) -> String {
    format!("{:.3} / {:.3}", s.raw_first, s.side_first)
}

/// The NVIDIA kernel module's version, where the OS exposes it (Linux).
pub(crate) fn kernel_module_version() -> Option<String> {
    let text = std::fs::read_to_string("/proc/driver/nvidia/version").ok()?;
    let line = text.lines().next()?;
    // "NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.65.06  Sun Jul 27 ..."
    // ... or "NVIDIA UNIX Open Kernel Module for x86_64  580.159.04  Release Build ...": take the
    // first word that looks like a version number.
    let after = line.split("Kernel Module").nth(1)?;
    after
        .split_whitespace()
        .find(|w| w.contains('.') && w.chars().all(|c| c.is_ascii_digit() || c == '.'))
        .map(str::to_string)
}

/// The machine the numbers come from, and what ran.
#[derive(Debug, Clone)]
pub(crate) struct Machine {
    pub(crate) gpu: String,
    /// `cuDriverGetVersion`'s value (13000 for CUDA 13.0).
    pub(crate) driver_version: i32,
    pub(crate) kernel_module: Option<String>,
    /// `Ok` when the cudarc column ran, else why not.
    pub(crate) cudarc: Result<(), String>,
    /// The CPU the measuring thread was pinned to (`--pin-cpu`), if any.
    pub(crate) pinned_cpu: Option<usize>,
}

/// The lines above the main table: the machine and the iteration counts.
pub(crate) fn print_header(cfg: &Config, machine: &Machine) {
    let kernel = machine
        .kernel_module
        .as_ref()
        .map(|v| format!(", kernel module {v}"))
        .unwrap_or_default();
    let sides = if machine.cudarc.is_ok() {
        "raw/cuda-stream/cudarc"
    } else {
        "raw/safe"
    };
    println!(
        "GPU: {} (device 0); driver: CUDA {} ({}){kernel}; {} repetitions per op, \
         {sides} interleaved (each order, then its reverse: half the repetitions run raw first), \
         median reported{}{}.",
        machine.gpu,
        cuda_stream_sys::format_version(machine.driver_version),
        machine.driver_version,
        cfg.reps,
        if cfg.quick {
            " (--quick: smoke test, numbers not meaningful)"
        } else {
            ""
        },
        machine
            .pinned_cpu
            .map(|c| format!("; the measuring thread pinned to CPU {c}"))
            .unwrap_or_default(),
    );
    println!(
        "Iterations per repetition: {} (query, record, wait on an event, wait_stream, pool \
         acquire), {} (event create and record_event, synchronize, scope), {} (stream create, \
         host fn round trip, completed(), the pool row's raw column); throughput: {} host fns \
         per repetition.",
        cfg.fast, cfg.medium, cfg.slow, cfg.host_batch
    );
    match &machine.cudarc {
        Ok(()) => println!(
            "cudarc {}: its safe driver API (features driver + dynamic-loading), same process, \
             same primary context.",
            crate::cudarc_column::CUDARC_VERSION
        ),
        Err(why) => println!("cudarc column not run: {why}."),
    }
}

/// The main table and the notes under it.
pub(crate) fn print_rows(rows: &Rows) {
    // The reasons cudarc has no equivalent, each printed once, as footnotes.
    let mut notes: Vec<&'static str> = Vec::new();
    let mut mark = |why: &'static str| {
        let i = notes.iter().position(|n| *n == why).unwrap_or_else(|| {
            notes.push(why);
            notes.len() - 1
        });
        format!("n/a [{}]", note_letter(i))
    };
    println!();
    println!(
        "| op | raw ns | cuda-stream ns | ratio | ratio spread: min–max (IQR) | ratio by order: raw first / cuda-stream first | cudarc ns | cudarc / raw | target |"
    );
    println!("|---|---:|---:|---:|---|---:|---:|---:|---|");
    for r in &rows.0 {
        let m = &r.measured;
        let (peer_ns, peer_ratio) = match &m.peer {
            Peer::Measured(p) => (format!("{:.1}", p.ns), format!("{:.3}", p.ratio)),
            Peer::NoEquivalent(why) => (mark(why), "—".to_string()),
            Peer::NotRun => ("—".to_string(), "—".to_string()),
        };
        println!(
            "| {} | {:.1} | {:.1} | {:.3} | {} | {} | {peer_ns} | {peer_ratio} | {} |",
            r.op,
            m.raw_ns,
            m.safe.ns,
            m.safe.ratio,
            fmt_spread(&m.safe.spread),
            fmt_orders(&m.safe),
            r.target_cell()
        );
    }
    println!();
    println!("{}", targets_line(rows));
    println!();
    println!(
        "raw: the driver's function pointers, resolved once before timing (what C code calling \
         libcuda pays); cuda-stream: the safe call; cudarc: cudarc's safe call; ratio: the median \
         over repetitions of cuda-stream / raw, each from batches run back to back; spread: the \
         lowest and highest of those per-repetition ratios and their interquartile range; by \
         order: the median ratio over the half of the repetitions that ran the raw side first, \
         and over the half that ran cuda-stream first (far apart: running first or second \
         matters, and the median sits between them). A/A rows run the same raw code on both \
         sides: their ratio and spread are the method's own noise. The primary context is \
         current on the benchmark thread throughout."
    );
    if !notes.is_empty() {
        println!();
        let list: Vec<String> = notes
            .iter()
            .enumerate()
            .map(|(i, why)| format!("[{}] {why}", note_letter(i)))
            .collect();
        println!("cudarc n/a: {}.", list.join("; "));
    }
}

/// `Targets met in this run: N of M (missed: ...)`.
pub(crate) fn targets_line(rows: &Rows) -> String {
    let with_target: Vec<&Row> = rows.0.iter().filter(|r| r.met().is_some()).collect();
    let missed: Vec<&str> = with_target
        .iter()
        .filter(|r| r.met() == Some(false))
        .map(|r| r.id)
        .collect();
    let mut line = format!(
        "Targets met in this run: {} of {}",
        with_target.len() - missed.len(),
        with_target.len()
    );
    if !missed.is_empty() {
        let _ = write!(line, " (missed: {})", missed.join(", "));
    }
    line.push_str(
        ". A target counts as met only when it is met in two consecutive full runs \
         (tests/bench/combine.py).",
    );
    line
}

fn note_letter(i: usize) -> char {
    char::from(b'a' + (i % 26) as u8)
}

// ---------------------------------------------------------------------------------------------
// JSON, written by hand: a handful of flat records, no dependency needed.

/// `s` as a JSON string.
fn js(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if u32::from(c) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", u32::from(c));
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// `x` as a JSON number (`null` where it is not finite).
fn jn(x: f64) -> String {
    if x.is_finite() {
        format!("{x}")
    } else {
        "null".to_string()
    }
}

fn json_spread(s: &Spread) -> String {
    format!(
        r#"{{"min": {}, "q1": {}, "q3": {}, "max": {}}}"#,
        jn(s.min),
        jn(s.q1),
        jn(s.q3),
        jn(s.max)
    )
}

fn json_side(s: &Side) -> String {
    format!(
        r#"{{"ns": {}, "ratio": {}, "spread": {}, "raw_first": {}, "side_first": {}}}"#,
        jn(s.ns),
        jn(s.ratio),
        json_spread(&s.spread),
        jn(s.raw_first),
        jn(s.side_first)
    )
}

fn json_row(r: &Row) -> String {
    let m = &r.measured;
    let target = match r.target {
        Target::Ratio(t) => format!(r#"{{"kind": "ratio", "value": {}}}"#, jn(t)),
        Target::BelowNs(t) => format!(r#"{{"kind": "below_ns", "value": {}}}"#, jn(t)),
        Target::None => "null".to_string(),
    };
    let met = match r.met() {
        Some(m) => m.to_string(),
        None => "null".to_string(),
    };
    let cudarc = match &m.peer {
        Peer::Measured(p) => json_side(p),
        Peer::NoEquivalent(why) => format!(r#"{{"na": {}}}"#, js(why)),
        Peer::NotRun => "null".to_string(),
    };
    format!(
        r#"{{"id": {}, "op": {}, "raw_ns": {}, "safe": {}, "target": {target}, "met": {met}, "cudarc": {cudarc}}}"#,
        js(r.id),
        js(&r.op),
        jn(m.raw_ns),
        json_side(&m.safe),
    )
}

/// The whole run as one JSON document.
pub(crate) fn json(
    cfg: &Config,
    machine: &Machine,
    rows: &Rows,
    first: &Result<FirstUse, String>,
) -> String {
    let mut out = String::new();
    out.push_str("{\n");
    let _ = writeln!(out, r#"  "tool": "cuda-stream-bench","#);
    let _ = writeln!(out, r#"  "format": 1,"#);
    let _ = writeln!(out, r#"  "quick": {},"#, cfg.quick);
    let _ = writeln!(
        out,
        r#"  "machine": {{"gpu": {}, "driver_version": {}, "kernel_module": {}, "pinned_cpu": {}}},"#,
        js(&machine.gpu),
        machine.driver_version,
        machine.kernel_module.as_deref().map_or("null".into(), js),
        machine.pinned_cpu.map_or("null".into(), |c| c.to_string())
    );
    let _ = writeln!(
        out,
        r#"  "reps": {}, "iterations": {{"fast": {}, "medium": {}, "slow": {}, "host_batch": {}}},"#,
        cfg.reps, cfg.fast, cfg.medium, cfg.slow, cfg.host_batch
    );
    let cudarc = match &machine.cudarc {
        Ok(()) => format!(
            r#"{{"ran": true, "version": {}}}"#,
            js(crate::cudarc_column::CUDARC_VERSION)
        ),
        Err(why) => format!(r#"{{"ran": false, "why": {}}}"#, js(why)),
    };
    let _ = writeln!(out, r#"  "cudarc": {cudarc},"#);
    out.push_str("  \"rows\": [\n");
    let lines: Vec<String> = rows
        .0
        .iter()
        .map(|r| format!("    {}", json_row(r)))
        .collect();
    out.push_str(&lines.join(",\n"));
    out.push_str("\n  ],\n");
    let first = match first {
        Ok(stats) => {
            let steps: Vec<String> = FIRST_USE_STEPS
                .iter()
                .zip(stats)
                .map(|(step, &(med, lo, hi))| {
                    format!(
                        r#"{{"step": {}, "median_ns": {}, "min_ns": {}, "max_ns": {}}}"#,
                        js(step),
                        jn(med),
                        jn(lo),
                        jn(hi)
                    )
                })
                .collect();
            format!("[\n    {}\n  ]", steps.join(",\n    "))
        }
        Err(e) => format!(r#"{{"error": {}}}"#, js(e)),
    };
    let _ = writeln!(out, r#"  "first_use": {first}"#);
    out.push_str("}\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_strings_and_numbers_are_escaped() {
        assert_eq!(js("a\"b\\c\nd\u{1}"), r#""a\"b\\c\nd\u0001""#);
        assert_eq!(js("µs – ok"), "\"µs – ok\"");
        assert_eq!(jn(1.5), "1.5");
        assert_eq!(jn(f64::NAN), "null");
        assert_eq!(jn(f64::INFINITY), "null");
    }

    fn side(ns: f64, ratio: f64) -> Side {
        Side {
            ns,
            ratio,
            spread: Spread {
                min: ratio - 0.1,
                q1: ratio,
                q3: ratio,
                max: ratio + 0.1,
            },
            raw_first: ratio - 0.01,
            side_first: ratio + 0.01,
        }
    }

    #[test]
    fn a_row_meets_its_target_only_within_it() {
        let row = |ratio, safe_ns, target| Row {
            id: "x",
            op: "x".into(),
            measured: Measured {
                raw_ns: 100.0,
                safe: side(safe_ns, ratio),
                peer: Peer::NotRun,
            },
            target,
        };
        assert_eq!(row(1.05, 105.0, Target::Ratio(1.05)).met(), Some(true));
        assert_eq!(row(1.051, 105.1, Target::Ratio(1.05)).met(), Some(false));
        assert_eq!(row(0.2, 49.9, Target::BelowNs(50.0)).met(), Some(true));
        assert_eq!(row(0.2, 50.0, Target::BelowNs(50.0)).met(), Some(false));
        assert_eq!(row(9.0, 900.0, Target::None).met(), None);
    }

    #[test]
    fn a_side_in_json_carries_its_spread_and_its_median_per_order() {
        let s = Side {
            ns: 10.0,
            ratio: 1.5,
            spread: Spread {
                min: 1.0,
                q1: 1.25,
                q3: 1.75,
                max: 2.0,
            },
            raw_first: 1.75,
            side_first: 1.25,
        };
        assert_eq!(
            json_side(&s),
            r#"{"ns": 10, "ratio": 1.5, "spread": {"min": 1, "q1": 1.25, "q3": 1.75, "max": 2}, "raw_first": 1.75, "side_first": 1.25}"#
        );
        assert_eq!(fmt_orders(&s), "1.750 / 1.250");
    }

    #[test]
    fn the_targets_line_counts_the_rows_with_a_target_and_names_the_missed_ones() {
        let mut rows = Rows::default();
        for (id, ratio, target) in [
            ("a", 1.01, Target::Ratio(1.05)),
            ("b", 1.2, Target::Ratio(1.05)),
            ("c", 9.0, Target::None),
            ("d", 0.5, Target::Ratio(1.0)),
        ] {
            rows.add(
                id,
                id,
                target,
                Measured {
                    raw_ns: 100.0,
                    safe: side(100.0 * ratio, ratio),
                    peer: Peer::NotRun,
                },
            );
        }
        let line = targets_line(&rows);
        assert!(
            line.starts_with("Targets met in this run: 2 of 3 (missed: b)."),
            "{line}"
        );
    }

    #[test]
    fn the_json_holds_every_row_with_its_target_and_peer() {
        let mut rows = Rows::default();
        rows.add(
            "query",
            "query (idle \"stream\")",
            Target::Ratio(1.05),
            Measured {
                raw_ns: 150.0,
                safe: side(151.0, 1.01),
                peer: Peer::Measured(side(170.0, 1.13)),
            },
        );
        rows.add(
            "pool",
            "pool",
            Target::BelowNs(50.0),
            Measured {
                raw_ns: 3000.0,
                safe: side(25.0, 0.008),
                peer: Peer::NoEquivalent("no pool"),
            },
        );
        let machine = Machine {
            gpu: "GPU".into(),
            driver_version: 13000,
            kernel_module: None,
            pinned_cpu: None,
            cudarc: Err("absent".into()),
        };
        let text = json(
            &Config::quick(),
            &machine,
            &rows,
            &Err("no children".into()),
        );
        for needle in [
            r#""id": "query", "op": "query (idle \"stream\")", "raw_ns": 150, "safe": {"ns": 151, "ratio": 1.01"#,
            r#""target": {"kind": "ratio", "value": 1.05}, "met": true, "cudarc": {"ns": 170, "ratio": 1.13"#,
            r#""target": {"kind": "below_ns", "value": 50}, "met": true, "cudarc": {"na": "no pool"}"#,
            r#""cudarc": {"ran": false, "why": "absent"}"#,
            r#""first_use": {"error": "no children"}"#,
            r#""quick": true"#,
        ] {
            assert!(text.contains(needle), "{needle} not in\n{text}");
        }
    }
}
