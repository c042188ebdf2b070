//! The README's table of the oldest driver each operation needs is derived from the bindings'
//! ABI versions, and names the driver functions `cuda-stream/src` calls:
//!
//! - each row's version is the newest of its functions' versions, where `A` or `B` (a fallback)
//!   counts as the older of the two (`cuda_sys::SymbolInfo::since`, from `cudaTypedefs.h`);
//! - every driver function the source calls (`driver_fn!(cuX)`, `ffi::fns::cuX`) is in the table,
//!   and every function in the table is called by the source.

use std::collections::BTreeSet;
use std::path::Path;

use cuda_stream::ffi::{SymbolInfo, format_version};

const BIND: &[&str] = &["cuCtxGetCurrent", "cuCtxPushCurrent", "cuCtxPopCurrent"];
const PRIMARY: &[&str] = &[
    "cuCtxGetDevice",
    "cuDevicePrimaryCtxGetState",
    "cuDevicePrimaryCtxRetain",
    "cuDevicePrimaryCtxRelease",
];

/// One row: the operations, the functions (each a list of alternatives), the stated version.
struct Row {
    operations: String,
    functions: Vec<Vec<String>>,
    oldest: String,
}

/// Built in, so that the test binary also runs away from the checkout (the GPU bundle).
fn readme() -> String {
    include_str!("../../README.md").to_string()
}

/// The rows of the table under `## Which driver each operation needs`.
fn table(readme: &str) -> Vec<Row> {
    let section = readme
        .split("## Which driver each operation needs")
        .nth(1)
        .expect("the README has the section")
        .split("\n## ")
        .next()
        .unwrap();
    let mut rows = Vec::new();
    for line in section.lines().filter(|l| l.starts_with("| `")) {
        let cells: Vec<&str> = line.trim_matches('|').split(" | ").map(str::trim).collect();
        assert_eq!(cells.len(), 3, "{line}");
        let mut functions = Vec::new();
        for item in cells[1].split(", ") {
            match item {
                "*bind*" => functions.extend(BIND.iter().map(|f| vec![f.to_string()])),
                "*primary*" => {
                    functions.extend(BIND.iter().chain(PRIMARY).map(|f| vec![f.to_string()]))
                }
                _ => functions.push(
                    item.split(" or ")
                        .map(|f| f.trim_matches('`').to_string())
                        .collect(),
                ),
            }
        }
        rows.push(Row {
            operations: cells[0].to_string(),
            functions,
            oldest: cells[2].to_string(),
        });
    }
    rows
}

fn since(binding: &str) -> u32 {
    SymbolInfo::find(binding)
        .unwrap_or_else(|| panic!("{binding} is not a binding of cuda-sys"))
        .since
}

#[test]
fn every_rows_version_is_what_its_functions_need() {
    let rows = table(&readme());
    assert!(rows.len() >= 20, "only {} rows", rows.len());
    for row in &rows {
        let needed = row
            .functions
            .iter()
            .map(|alternatives| alternatives.iter().map(|f| since(f)).min().unwrap())
            .max()
            .unwrap();
        assert!(
            needed > 0,
            "{}: a function without a recorded version",
            row.operations
        );
        assert_eq!(
            row.oldest,
            format!("CUDA {}", format_version(needed as i32)),
            "{}",
            row.operations
        );
    }
    // The fallbacks are what make the oldest drivers work.
    let elapsed = rows
        .iter()
        .find(|r| r.operations == "`Event::elapsed_since`")
        .unwrap();
    assert_eq!(elapsed.oldest, "CUDA 2.0");
    assert_eq!(since("cuEventElapsedTime"), 12080);
}

/// The driver functions named in `cuda-stream/src` (where it was built, or under the current
/// folder); `None` where neither has it.
fn called_by_the_source() -> Option<BTreeSet<String>> {
    let src = [
        Path::new(env!("CARGO_MANIFEST_DIR")).join("src"),
        Path::new("cuda-stream/src").to_path_buf(),
    ]
    .into_iter()
    .find(|p| p.join("lib.rs").is_file())?;
    let mut names = BTreeSet::new();
    for entry in std::fs::read_dir(&src).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|e| e != "rs") {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        // Code only: doc examples may name functions no code calls.
        let code: String = text
            .lines()
            .filter(|l| !l.trim_start().starts_with("//"))
            .collect::<Vec<_>>()
            .join("\n");
        for marker in ["driver_fn!(", "fns::"] {
            for piece in code.split(marker).skip(1) {
                let name: String = piece
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect();
                if name.starts_with("cu") {
                    names.insert(name);
                }
            }
        }
    }
    Some(names)
}

#[test]
fn the_table_names_exactly_the_driver_functions_the_source_calls() {
    let in_table: BTreeSet<String> = table(&readme())
        .into_iter()
        .flat_map(|r| r.functions.into_iter().flatten())
        .collect();
    let Some(in_source) = called_by_the_source() else {
        println!("skipped: cuda-stream/src is not here (a test binary away from its checkout)");
        return;
    };
    assert!(in_source.len() >= 30, "{in_source:?}");
    let missing: Vec<_> = in_source.difference(&in_table).collect();
    let extra: Vec<_> = in_table.difference(&in_source).collect();
    assert!(
        missing.is_empty() && extra.is_empty(),
        "called but not in the README's table: {missing:?}; in the table but not called: \
         {extra:?}"
    );
}
