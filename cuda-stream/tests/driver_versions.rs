//! The table of the oldest driver each operation needs (`cuda-stream/doc/driver-versions.md`, part
//! of the crate's documentation) is derived from the bindings' ABI versions, and names the driver
//! functions `cuda-stream/src` calls:
//!
//! - each row's version is the newest of its functions' versions, where `A` or `B` (a fallback)
//!   counts as the older of the two (`cuda_stream_sys::SymbolInfo::since`, from `cudaTypedefs.h`);
//! - every driver function the source calls (`driver_fn!(cuX)`, `ffi::fns::cuX`) is in the table,
//!   and every function in the table is called by the source.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

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
const DOC: &str = include_str!("../doc/driver-versions.md");

/// The rows of the table under `# Which driver each operation needs`, up to the next heading.
fn table(doc: &str) -> Vec<Row> {
    let section = doc
        .split("# Which driver each operation needs\n")
        .nth(1)
        .expect("the document has the section")
        .split("\n#")
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
        .unwrap_or_else(|| panic!("{binding} is not a binding of cuda-stream-sys"))
        .since
}

#[test]
fn every_rows_version_is_what_its_functions_need() {
    let rows = table(DOC);
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

/// The `.rs` files under `dir`, in subfolders too, in a stable order.
fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|entry| entry.unwrap().path())
        .collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            files.extend(rust_files(&path));
        } else if path.extension().is_some_and(|e| e == "rs") {
            files.push(path);
        }
    }
    files
}

/// The driver functions named in `cuda-stream/src` (where it was built, or under the current
/// folder), every module at any depth; `None` where neither has it.
fn called_by_the_source() -> Option<BTreeSet<String>> {
    let src = [
        Path::new(env!("CARGO_MANIFEST_DIR")).join("src"),
        Path::new("cuda-stream/src").to_path_buf(),
    ]
    .into_iter()
    .find(|p| p.join("lib.rs").is_file())?;
    let mut names = BTreeSet::new();
    for path in rust_files(&src) {
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
    let in_table: BTreeSet<String> = table(DOC)
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
        "called but not in the table: {missing:?}; in the table but not called: \
         {extra:?}"
    );
}

#[test]
fn the_source_scan_walks_subfolders() {
    let root = std::env::temp_dir().join(format!("driver-versions-scan-{}", std::process::id()));
    let nested = root.join("stream").join("view");
    std::fs::create_dir_all(&nested).unwrap();
    for file in ["lib.rs", "notes.md", "stream/mod.rs", "stream/view/raw.rs"] {
        std::fs::write(root.join(file), "").unwrap();
    }
    let found: Vec<PathBuf> = rust_files(&root)
        .into_iter()
        .map(|p| p.strip_prefix(&root).unwrap().to_path_buf())
        .collect();
    std::fs::remove_dir_all(&root).unwrap();
    let expected: Vec<PathBuf> = ["lib.rs", "stream/mod.rs", "stream/view/raw.rs"]
        .iter()
        .map(PathBuf::from)
        .collect();
    assert_eq!(found, expected);
}
