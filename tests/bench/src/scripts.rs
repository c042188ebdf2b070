//! Tests of the Python scripts beside this crate, which the GPU bundle runs after the benchmark:
//! `combine.py` must read this crate's `--json` output and give the two-run verdict, and
//! `peers.py` must report frameworks it cannot import as missing and exit cleanly. They need
//! `python3` and skip, saying so, where there is none.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use crate::method::{Config, Measured, Peer, Side, Spread};
use crate::report::{self, Machine, Rows, Target};

fn script(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(name)
}

/// Whether the scripts and the row sources are where this crate was built; if not (the test
/// binary runs away from its checkout, as in the GPU bundle), says so: the test then skips.
fn source_here() -> bool {
    let here = script("combine.py").is_file() && script("peers.py").is_file();
    if !here {
        println!(
            "skipped: the scripts are not at {} (run away from the checkout)",
            script("").display()
        );
    }
    here
}

/// Runs `python3 args...`, or `None` (printed) where there is no python3.
fn python(args: &[&std::ffi::OsStr], env: &[(&str, &str)]) -> Option<Output> {
    let mut cmd = Command::new("python3");
    cmd.args(args);
    for (k, v) in env {
        cmd.env(k, v);
    }
    match cmd.output() {
        Ok(out) => Some(out),
        Err(e) => {
            println!("skipped: no python3 ({e})");
            None
        }
    }
}

fn side(ns: f64, ratio: f64) -> Side {
    Side {
        ns,
        ratio,
        spread: Spread::of(&[ratio - 0.02, ratio, ratio + 0.03]),
        raw_first: ratio - 0.005,
        side_first: ratio + 0.005,
    }
}

fn run_json(query_ratio: f64, cudarc_ran: bool) -> String {
    let mut rows = Rows::default();
    rows.add(
        "stream_create",
        "stream create + destroy",
        Target::Ratio(1.05),
        Measured {
            raw_ns: 4000.0,
            safe: side(4040.0, 1.01),
            peer: if cudarc_ran {
                Peer::Measured(side(4400.0, 1.1))
            } else {
                Peer::NotRun
            },
        },
    );
    rows.add(
        "query",
        "query (idle stream)",
        Target::Ratio(1.05),
        Measured {
            raw_ns: 150.0,
            safe: side(150.0 * query_ratio, query_ratio),
            peer: Peer::NoEquivalent("no query"),
        },
    );
    rows.add(
        "pool_acquire",
        "pool acquire + release, warm",
        Target::BelowNs(50.0),
        Measured {
            raw_ns: 4000.0,
            safe: side(25.0, 0.006),
            peer: Peer::NoEquivalent("no stream pool"),
        },
    );
    rows.add(
        "completed",
        "completed()",
        Target::None,
        Measured {
            raw_ns: 10000.0,
            safe: side(21000.0, 2.1),
            peer: Peer::NoEquivalent("no completion future"),
        },
    );
    let machine = Machine {
        gpu: "Test GPU".into(),
        driver_version: 13000,
        kernel_module: Some("580.159.04".into()),
        cudarc: if cudarc_ran {
            Ok(())
        } else {
            Err("not here".into())
        },
        pinned_cpu: Some(15),
    };
    report::json(
        &Config::full(),
        &machine,
        &rows,
        &Ok(vec![(1.0, 1.0, 1.0); 7]),
    )
}

fn line_of<'a>(text: &'a str, start: &str) -> &'a str {
    text.lines()
        .find(|l| l.starts_with(start))
        .unwrap_or_else(|| panic!("no line starting {start:?} in\n{text}"))
}

#[test]
fn combine_py_gives_met_only_when_both_runs_are_within_the_target() {
    if !source_here() {
        return;
    }
    let dir = std::env::temp_dir().join(format!("cuda-stream-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (r1, r2, peers) = (
        dir.join("run1.json"),
        dir.join("run2.json"),
        dir.join("peers.json"),
    );
    // `query` is within its target in run 1 only.
    std::fs::write(&r1, run_json(1.02, true)).unwrap();
    std::fs::write(&r2, run_json(1.07, true)).unwrap();
    std::fs::write(
        &peers,
        r#"{"tool": "peers", "quick": false, "frameworks": {
            "torch": {"label": "PyTorch", "status": "ok", "version": "2.11", "gpu": "Test GPU",
                      "rows": {"query": {"ns": 2100.5, "min": 2000, "max": 2300, "call": "s.query()"}}},
            "cupy": {"label": "CuPy", "status": "missing", "detail": "No module named 'cupy'", "rows": {}}
        }}"#,
    )
    .unwrap();
    let Some(out) = python(
        &[
            script("combine.py").as_os_str(),
            r1.as_os_str(),
            r2.as_os_str(),
            "--peers".as_ref(),
            peers.as_os_str(),
        ],
        &[],
    ) else {
        return;
    };
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(line_of(&text, "| stream create + destroy | <= 1.05 |").ends_with("| met |"));
    let query = line_of(&text, "| query (idle stream) | <= 1.05 |");
    assert!(
        query.contains("| 1.020 (1.000–1.050; 1.015 / 1.025) |") && query.contains("| 1.070 ("),
        "{query}"
    );
    assert!(query.ends_with("| MISSED |"), "{query}");
    assert!(line_of(&text, "| pool acquire + release, warm | < 50 ns |").ends_with("| met |"));
    assert!(line_of(&text, "| completed() | — |").ends_with("| — |"));
    assert!(text.contains("Targets met in every run: 2 of 3."), "{text}");
    // The table of every column: run 1's Rust numbers, the peers' cells, and the reasons.
    assert_eq!(
        line_of(&text, "| query (idle stream) | 150.0 |"),
        "| query (idle stream) | 150.0 | 153.0 | n/a [a] | 2100.5 | missing | not run |"
    );
    assert!(line_of(&text, "| stream create + destroy | 4000.0 |").contains("| 4400.0 |"));
    assert!(text.contains("- [a] no query"), "{text}");
    assert!(
        text.contains("CuPy: missing (No module named 'cupy')."),
        "{text}"
    );
    assert!(
        text.contains("- query (idle stream): PyTorch `s.query()`"),
        "{text}"
    );

    // One run alone cannot meet a target.
    let Some(out) = python(&[script("combine.py").as_os_str(), r1.as_os_str()], &[]) else {
        return;
    };
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        line_of(&text, "| stream create + destroy | <= 1.05 |")
            .ends_with("| met in 1 run (2 needed) |"),
        "{text}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn combine_py_says_why_the_cudarc_column_did_not_run() {
    if !source_here() {
        return;
    }
    let dir = std::env::temp_dir().join(format!("cuda-stream-bench-nc-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let r1 = dir.join("run1.json");
    std::fs::write(&r1, run_json(1.0, false)).unwrap();
    let Some(out) = python(&[script("combine.py").as_os_str(), r1.as_os_str()], &[]) else {
        return;
    };
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(line_of(&text, "| stream create + destroy | 4000.0 |").contains("| not run |"));
    assert!(text.contains("cudarc: not run (not here)."), "{text}");
    assert!(text.contains("PyTorch: not run (no peers file)."), "{text}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn peers_py_reports_frameworks_it_cannot_import_as_missing() {
    if !source_here() {
        return;
    }
    // An empty module path, so that no framework imports even where one is installed.
    let dir = std::env::temp_dir().join(format!("cuda-stream-bench-peers-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let json = dir.join("peers.json");
    let Some(out) = python(
        &[
            "-S".as_ref(),
            script("peers.py").as_os_str(),
            "--quick".as_ref(),
            "--json".as_ref(),
            json.as_os_str(),
        ],
        &[("PYTHONPATH", ""), ("PYTHONNOUSERSITE", "1")],
    ) else {
        return;
    };
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for label in ["PyTorch", "CuPy", "cuda.core"] {
        assert!(text.contains(&format!("- {label}: missing (")), "{text}");
    }
    assert!(
        line_of(&text, "| query (idle stream) |").ends_with("| missing | missing | missing |"),
        "{text}"
    );
    let doc = std::fs::read_to_string(&json).unwrap();
    assert!(doc.contains(r#""status": "missing""#), "{doc}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The row ids `peers.py` lists (its `ROWS`).
fn peers_py_ids() -> Vec<String> {
    let text = std::fs::read_to_string(script("peers.py")).unwrap();
    let start = text.find("\nROWS = [\n").expect("ROWS in peers.py");
    let block = &text[start..];
    let block = &block[..block.find("\n]\n").expect("the end of ROWS")];
    block
        .lines()
        .filter_map(|l| l.trim().strip_prefix("(\""))
        .map(|l| l[..l.find('"').unwrap()].to_string())
        .collect()
}

#[test]
fn every_row_id_of_peers_py_is_a_row_of_the_benchmark() {
    if !source_here() {
        return;
    }
    // The ids are string literals in the row modules (given to `rows.add` or listed beside it).
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/rows");
    let mut sources = String::new();
    for entry in std::fs::read_dir(&dir).unwrap() {
        sources.push_str(&std::fs::read_to_string(entry.unwrap().path()).unwrap());
    }
    let ids = peers_py_ids();
    assert!(ids.len() > 20, "{ids:?}");
    for id in &ids {
        assert!(
            sources.contains(&format!("\"{id}\"")),
            "peers.py lists {id:?}, which no row of the benchmark has"
        );
    }
    for id in [
        "stream_create_aa",
        "event_create_close",
        "record_event",
        "host_throughput_boxed_raw_box",
        "completed_after_kernel_nospin",
    ] {
        assert!(ids.iter().any(|i| i == id), "{id} not in peers.py");
    }
}
