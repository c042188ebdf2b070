//! The layout of the source is the architecture, and this test keeps it so:
//!
//! - `cuda-stream/src` is a stack of folders (`base`, `driver`, `stream`, ...) whose imports only
//!   point down: a module may import from a folder that `lib.rs` declares before its own, and,
//!   inside its folder, from a module that the folder's `mod.rs` declares before it. Any import
//!   against that order fails the test, and so does a circle. The test driver's source
//!   (`tests/mock-driver/src`) is held to the same rule.
//! - No hand-written `.rs` file of the workspace is longer than [`MAX_LINES`] (the generated
//!   bindings under `cuda-sys/src/generated` excepted).
//!
//! An import is any `crate::a::b` path in a module's code (grouped `use crate::{a, b::c}` and
//! `super::` paths included; comments and a trailing `#[cfg(test)] mod tests { .. }` are not
//! read: unit tests may look up). A submodule counts towards the module it is declared in. This
//! is a text scan, like `../shared/tools/layers.py`, which prints the same graph:
//!
//! ```sh
//! cargo test -p cuda-stream --test layers -- --nocapture
//! ```
//!
//! The test binary reads the source tree: run away from the checkout (the GPU bundle), it says
//! so and passes without checking.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The longest a hand-written `.rs` file may be.
const MAX_LINES: usize = 700;

type Graph = BTreeMap<String, BTreeSet<String>>;

/// A crate's source: every module (`a::b` for `src/a/b.rs` or `src/a/b/mod.rs`) and its file.
struct Source {
    root: PathBuf,
    modules: BTreeMap<String, PathBuf>,
}

impl Source {
    fn read(root: &Path) -> Source {
        let mut modules = BTreeMap::new();
        for path in rust_files(root) {
            let rel = path.strip_prefix(root).expect("under src");
            let mut parts: Vec<String> = rel
                .iter()
                .map(|c| c.to_str().expect("a UTF-8 file name").to_string())
                .collect();
            let file = parts.pop().expect("a file name");
            let stem = file.trim_end_matches(".rs");
            if stem != "mod" {
                parts.push(stem.to_string());
            }
            let name = parts.join("::");
            if name.is_empty() || name == "lib" || name == "main" {
                continue;
            }
            modules.insert(name, path);
        }
        Source {
            root: root.to_path_buf(),
            modules,
        }
    }

    /// The file that declares the children of `parent` ("" for the crate root).
    fn declaring_file(&self, parent: &str) -> Option<PathBuf> {
        if parent.is_empty() {
            return Some(self.root.join("lib.rs"));
        }
        let path = self.modules.get(parent)?;
        Some(path.clone())
    }

    /// The children of `parent` in the order its file declares them (`mod x;`, any visibility).
    fn declared_order(&self, parent: &str) -> Vec<String> {
        let Some(file) = self.declaring_file(parent) else {
            return Vec::new();
        };
        let text = std::fs::read_to_string(&file).expect("read a module");
        text.lines()
            .filter_map(|line| {
                let line = line.trim();
                let rest = line.strip_prefix("pub(crate) ").unwrap_or(line);
                let rest = rest.strip_prefix("pub ").unwrap_or(rest);
                let name = rest.strip_prefix("mod ")?.strip_suffix(';')?;
                Some(name.trim().to_string())
            })
            .collect()
    }

    /// Every import edge between modules, as (from, to) module paths.
    fn edges(&self) -> BTreeSet<(String, String)> {
        let mut out = BTreeSet::new();
        for (m, path) in &self.modules {
            let text = code_of(&std::fs::read_to_string(path).expect("read a module"));
            let parent = m.rsplit_once("::").map_or("", |(p, _)| p);
            for p in paths(&text, parent) {
                if let Some(t) = self.resolve(&p) {
                    if t != *m && !m.starts_with(&format!("{t}::")) {
                        out.insert((m.clone(), t));
                    }
                }
            }
        }
        out
    }

    /// The longest module that `path` (`a::b::Name`) starts with.
    fn resolve(&self, path: &str) -> Option<String> {
        let parts: Vec<&str> = path.split("::").filter(|p| !p.is_empty()).collect();
        (1..=parts.len())
            .rev()
            .map(|k| parts[..k].join("::"))
            .find(|cand| self.modules.contains_key(cand))
    }
}

/// Every `.rs` file under `dir`, sorted, skipping build output and version control.
fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut dirs = vec![dir.to_path_buf()];
    while let Some(d) = dirs.pop() {
        for entry in std::fs::read_dir(&d).expect("read a folder") {
            let path = entry.expect("read a folder entry").path();
            let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
            if path.is_dir() {
                if !matches!(name, "target" | ".git" | "gpu-bundle" | ".header-cache") {
                    dirs.push(path);
                }
            } else if name.ends_with(".rs") {
                out.push(path);
            }
        }
    }
    out.sort();
    out
}

/// The code of a module: comments removed, and a trailing unit-test module cut off.
fn code_of(text: &str) -> String {
    let text = match text.find("#[cfg(test)]\nmod tests {") {
        Some(i) => &text[..i],
        None => text,
    };
    text.lines()
        .map(|line| match line.find("//") {
            Some(i) => &line[..i],
            None => line,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The module paths a text names: `crate::a::b::Name`, the items of `crate::{a, b::{c, d}}`,
/// and `super::x` (relative to `parent`, the module's parent).
fn paths(text: &str, parent: &str) -> Vec<String> {
    let mut out = Vec::new();
    for (prefix, base) in [("crate::", ""), ("super::", parent)] {
        let mut rest = text;
        while let Some(i) = rest.find(prefix) {
            let before = rest[..i].chars().next_back();
            rest = &rest[i + prefix.len()..];
            // `mycrate::x` is another crate; `$crate::x`, `(crate::x`, ` crate::x` are this one.
            if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
                continue;
            }
            let path: String = rest
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_' || *c == ':')
                .collect();
            let items = match rest[path.len()..].strip_prefix('{') {
                // `crate::a::{b, c::d}`: each item under the path before the brace.
                Some(body) => grouped(&body[..closing(body)])
                    .into_iter()
                    .map(|item| format!("{path}{item}"))
                    .collect(),
                None => vec![path],
            };
            for item in items {
                let full = if base.is_empty() {
                    item
                } else {
                    format!("{base}::{item}")
                };
                out.push(full);
            }
        }
    }
    out
}

/// Where the group that `body` opens ends (the index of its closing brace).
fn closing(body: &str) -> usize {
    let mut depth = 1;
    for (i, c) in body.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => {
                depth -= 1;
                if depth == 0 {
                    return i;
                }
            }
            _ => {}
        }
    }
    body.len()
}

/// The paths in the body of a `crate::{...}` group: `a, b::{c, d}, e::f` gives a, b::c, b::d,
/// e::f.
fn grouped(body: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut prefix: Vec<String> = Vec::new();
    let mut item = String::new();
    for c in body.chars().chain([',']) {
        match c {
            '{' => {
                prefix.push(item.trim().trim_end_matches(':').to_string());
                item.clear();
            }
            ',' | '}' => {
                let name = item.trim();
                if !name.is_empty() {
                    let mut parts: Vec<&str> = prefix.iter().map(String::as_str).collect();
                    parts.push(name);
                    out.push(parts.join("::"));
                }
                item.clear();
                if c == '}' {
                    prefix.pop();
                }
            }
            _ => item.push(c),
        }
    }
    out
}

/// The edges between the children of `parent` ("" for the top level): each module counts as
/// the child of `parent` it lies under.
fn level(edges: &BTreeSet<(String, String)>, parent: &str) -> Graph {
    let child = |m: &str| -> Option<String> {
        let rest = if parent.is_empty() {
            m
        } else {
            m.strip_prefix(parent)?.strip_prefix("::")?
        };
        Some(rest.split("::").next().expect("a name").to_string())
    };
    let mut g = Graph::new();
    for (from, to) in edges {
        if let (Some(a), Some(b)) = (child(from), child(to)) {
            if a != b {
                g.entry(a).or_default().insert(b);
            }
        }
    }
    g
}

/// The strongly connected components with more than one module (Tarjan), each sorted.
fn circles(g: &Graph) -> Vec<Vec<String>> {
    struct Walk<'g> {
        g: &'g Graph,
        index: BTreeMap<&'g str, usize>,
        low: BTreeMap<&'g str, usize>,
        stack: Vec<&'g str>,
        on_stack: BTreeSet<&'g str>,
        found: Vec<Vec<String>>,
    }
    impl<'g> Walk<'g> {
        fn visit(&mut self, v: &'g str) {
            let n = self.index.len();
            self.index.insert(v, n);
            self.low.insert(v, n);
            self.stack.push(v);
            self.on_stack.insert(v);
            for w in self.g.get(v).into_iter().flatten() {
                let w = w.as_str();
                if !self.index.contains_key(w) {
                    self.visit(w);
                    let lw = self.low[w];
                    let lv = self.low.get_mut(v).expect("visited");
                    *lv = (*lv).min(lw);
                } else if self.on_stack.contains(w) {
                    let iw = self.index[w];
                    let lv = self.low.get_mut(v).expect("visited");
                    *lv = (*lv).min(iw);
                }
            }
            if self.low[v] == self.index[v] {
                let mut comp = Vec::new();
                loop {
                    let w = self.stack.pop().expect("on the stack");
                    self.on_stack.remove(w);
                    comp.push(w.to_string());
                    if w == v {
                        break;
                    }
                }
                if comp.len() > 1 {
                    comp.sort();
                    self.found.push(comp);
                }
            }
        }
    }
    let mut walk = Walk {
        g,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        found: Vec::new(),
    };
    for v in g.keys() {
        if !walk.index.contains_key(v.as_str()) {
            walk.visit(v);
        }
    }
    walk.found
}

/// The imports of one level that point up (or sideways to something undeclared), given the
/// declared order bottom to top.
fn upward(g: &Graph, order: &[String]) -> Vec<String> {
    let pos = |m: &str| order.iter().position(|o| o == m);
    let mut out = Vec::new();
    for (from, targets) in g {
        for to in targets {
            match (pos(from), pos(to)) {
                (Some(a), Some(b)) if b < a => {}
                _ => out.push(format!("{from} -> {to}")),
            }
        }
    }
    out
}

/// Prints a crate's layers and returns every violation: circles, and imports against the
/// declared order, at the top level and inside each folder.
fn check_layers(src: &Path) -> Vec<String> {
    let source = Source::read(src);
    let edges = source.edges();
    let mut problems = Vec::new();
    let mut parents: Vec<String> = vec![String::new()];
    parents.extend(
        source
            .modules
            .keys()
            .filter(|m| !source.declared_order(m).is_empty())
            .cloned(),
    );
    for parent in parents {
        let order = source.declared_order(&parent);
        let g = level(&edges, &parent);
        let title = if parent.is_empty() {
            "top level".to_string()
        } else {
            format!("{parent}/")
        };
        println!("{title} (bottom to top):");
        for m in &order {
            let t: Vec<&str> = g.get(m).into_iter().flatten().map(String::as_str).collect();
            let t = if t.is_empty() {
                "(nothing)".to_string()
            } else {
                t.join(", ")
            };
            println!("  {m} -> {t}");
        }
        for c in circles(&g) {
            problems.push(format!("{}: circle {}", title, c.join(" <-> ")));
        }
        for e in upward(&g, &order) {
            problems.push(format!(
                "{title}: {e} points up (declared order: {})",
                order.join(", ")
            ));
        }
    }
    problems
}

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the workspace")
        .to_path_buf()
}

/// `None`, with the reason printed, where the source tree is not at its build path.
fn source_tree(dir: &Path) -> Option<PathBuf> {
    if dir.join("lib.rs").is_file() {
        Some(dir.to_path_buf())
    } else {
        println!(
            "skipped: the source is not at {} (run away from the checkout)",
            dir.display()
        );
        None
    }
}

#[test]
fn cuda_stream_folders_and_modules_import_only_downwards() {
    let Some(src) = source_tree(&Path::new(env!("CARGO_MANIFEST_DIR")).join("src")) else {
        return;
    };
    let source = Source::read(&src);
    assert!(
        source.modules.len() >= 20,
        "found only {} modules under {}: the scan is broken",
        source.modules.len(),
        src.display()
    );
    let folders = source.declared_order("");
    assert!(
        folders.len() >= 5 && folders.iter().all(|f| src.join(f).is_dir()),
        "lib.rs should declare the layer folders, bottom to top; it declares {folders:?}"
    );
    let problems = check_layers(&src);
    assert!(problems.is_empty(), "{problems:#?}");
    println!("no circles: every import points down");
}

#[test]
fn the_test_drivers_modules_import_only_downwards() {
    let Some(src) = source_tree(&workspace().join("tests/mock-driver/src")) else {
        return;
    };
    let problems = check_layers(&src);
    assert!(problems.is_empty(), "{problems:#?}");
    println!("no circles: every import points down");
}

#[test]
fn no_hand_written_file_is_over_the_limit() {
    let root = workspace();
    if source_tree(&root.join("cuda-stream/src")).is_none() {
        return;
    }
    let generated = root.join("cuda-sys/src/generated");
    let mut long = Vec::new();
    let mut seen = 0;
    for path in rust_files(&root) {
        if path.starts_with(&generated) {
            continue;
        }
        seen += 1;
        let lines = std::fs::read_to_string(&path)
            .expect("read")
            .lines()
            .count();
        if lines > MAX_LINES {
            long.push(format!(
                "{}: {lines} lines",
                path.strip_prefix(&root).unwrap_or(&path).display()
            ));
        }
    }
    assert!(
        seen >= 50,
        "found only {seen} .rs files: the scan is broken"
    );
    println!("{seen} hand-written .rs files, none over {MAX_LINES} lines");
    assert!(
        long.is_empty(),
        "files over {MAX_LINES} lines (split them by topic): {long:#?}"
    );
}

#[test]
fn the_scan_sees_imports_and_the_check_sees_circles_and_upward_imports() {
    let text = "use crate::base::error::{Error, Result};\n\
                use crate::{driver::context::Context, stream::{view, owned::X}};\n\
                use crate::kernel::{launch::{A, B}, module};\n\
                fn f() { crate::panics::report(a, b); $crate::stream::x!(); super::sibling::y(); }\n\
                // crate::commented::out is not read\n\
                let _ = mycrate::other::thing;\n";
    let mut found = paths(&code_of(text), "graph");
    found.sort();
    assert_eq!(
        found,
        [
            "base::error::Error",
            "base::error::Result",
            "driver::context::Context",
            "graph::sibling::y",
            "kernel::launch::A",
            "kernel::launch::B",
            "kernel::module",
            "panics::report",
            "stream::owned::X",
            "stream::view",
            "stream::x",
        ]
    );

    let edge = |a: &str, b: &[&str]| (a.to_string(), b.iter().map(|s| s.to_string()).collect());
    let layered: Graph = [edge("a", &["b", "c"]), edge("b", &["c"]), edge("c", &[])]
        .into_iter()
        .collect();
    assert!(circles(&layered).is_empty());
    let order = |o: &[&str]| o.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    assert!(upward(&layered, &order(&["c", "b", "a"])).is_empty());
    assert_eq!(
        upward(&layered, &order(&["c", "a", "b"])),
        ["a -> b".to_string()]
    );
    let circular: Graph = [
        edge("a", &["b"]),
        edge("b", &["c"]),
        edge("c", &["a"]),
        edge("d", &["a"]),
    ]
    .into_iter()
    .collect();
    assert_eq!(circles(&circular), vec![vec!["a", "b", "c"]]);

    let edges: BTreeSet<(String, String)> = [
        ("stream::view".to_string(), "base::error".to_string()),
        (
            "stream::owned::inner".to_string(),
            "stream::view".to_string(),
        ),
    ]
    .into_iter()
    .collect();
    assert_eq!(level(&edges, "")["stream"], ["base".to_string()].into());
    assert_eq!(
        level(&edges, "stream")["owned"],
        ["view".to_string()].into()
    );
}
