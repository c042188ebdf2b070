//! The report: rows, targets and the Markdown tables printed for `BENCHMARKS.md`.

use crate::method::{Config, Measured};

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
    #[expect(dead_code, reason = "read by the machine-readable output")]
    pub(crate) id: &'static str,
    /// What the row measures, as printed.
    pub(crate) op: String,
    pub(crate) measured: Measured,
    pub(crate) target: Target,
}

impl Row {
    /// `Some(true)` when the row meets its target, `None` when it has none.
    pub(crate) fn met(&self) -> Option<bool> {
        match self.target {
            Target::Ratio(t) => Some(self.measured.ratio <= t),
            Target::BelowNs(t) => Some(self.measured.safe_ns < t),
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

/// The machine the numbers come from.
#[derive(Debug, Clone)]
pub(crate) struct Machine {
    pub(crate) gpu: String,
    /// `cuDriverGetVersion`'s value (13000 for CUDA 13.0).
    pub(crate) driver_version: i32,
    pub(crate) kernel_module: Option<String>,
}

/// The lines above the main table: the machine and the iteration counts.
pub(crate) fn print_header(cfg: &Config, machine: &Machine) {
    let kernel = machine
        .kernel_module
        .as_ref()
        .map(|v| format!(", kernel module {v}"))
        .unwrap_or_default();
    println!(
        "GPU: {} (device 0); driver: CUDA {} ({}){kernel}; {} repetitions per op, \
         raw/safe interleaved, median reported{}.",
        machine.gpu,
        cuda_sys::format_version(machine.driver_version),
        machine.driver_version,
        cfg.reps,
        if cfg.quick {
            " (--quick: smoke test, numbers not meaningful)"
        } else {
            ""
        },
    );
    println!(
        "Iterations per repetition: {} (query, record, wait on an event, wait_stream, pool \
         acquire), {} (event create, synchronize, scope), {} (stream create, host fn round trip, \
         completed(), the pool row's raw column); throughput: {} host fns per repetition.",
        cfg.fast, cfg.medium, cfg.slow, cfg.host_batch
    );
}

/// The main table and the note under it.
pub(crate) fn print_rows(rows: &Rows) {
    println!();
    println!("| op | raw ns | cuda-stream ns | ratio | target |");
    println!("|---|---:|---:|---:|---|");
    for r in &rows.0 {
        let m = &r.measured;
        println!(
            "| {} | {:.1} | {:.1} | {:.3} | {} |",
            r.op,
            m.raw_ns,
            m.safe_ns,
            m.ratio,
            r.target_cell()
        );
    }
    println!();
    println!(
        "raw: the driver's function pointers, resolved once before timing (what C code calling \
         libcuda pays); cuda-stream: the safe call; ratio: the median over repetitions of cuda-stream / raw, each from two back-to-back batches. The primary context \
         is current on the benchmark thread throughout."
    );
}
