//! The modules of `cuda-stream/src` must form layers whose imports only point down: this test
//! prints which module imports which and fails if any of them import each other in a circle.
//!
//! An import is any `crate::<module>` path in a module's text (`use crate::error::Error;`,
//! `crate::panics::report(..)`, `$crate::stream::..` in a macro), outside a trailing
//! `#[cfg(test)] mod tests { .. }` (unit tests may look up). A submodule counts towards its
//! top-level module. This is a text scan, like `../shared/tools/layers.py`, which it mirrors so
//! that a clone without that folder keeps the check:
//!
//! ```sh
//! cargo test -p cuda-stream --test layers -- --nocapture
//! ```

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

type Graph = BTreeMap<String, BTreeSet<String>>;

/// Every `.rs` file under `src`, as (top-level module name, path); `lib.rs` and `main.rs` are the
/// crate root, not a module.
fn modules(src: &Path) -> Vec<(String, PathBuf)> {
    let mut out = Vec::new();
    let mut dirs = vec![src.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).expect("read src folder") {
            let path = entry.expect("read folder entry").path();
            if path.is_dir() {
                dirs.push(path);
                continue;
            }
            if path.extension().is_none_or(|e| e != "rs") {
                continue;
            }
            let rel = path.strip_prefix(src).expect("under src");
            let top = rel
                .components()
                .next()
                .and_then(|c| c.as_os_str().to_str())
                .expect("a UTF-8 file name")
                .trim_end_matches(".rs")
                .to_string();
            if top == "lib" || top == "main" {
                continue;
            }
            out.push((top, path));
        }
    }
    out.sort();
    out
}

/// The module names a text refers to as `crate::<name>` (lowercase names only: `crate::Error`
/// is a re-export, not a module path).
fn referenced(text: &str) -> BTreeSet<String> {
    let text = match text.find("#[cfg(test)]\nmod tests {") {
        Some(i) => &text[..i],
        None => text,
    };
    let mut out = BTreeSet::new();
    let mut rest = text;
    while let Some(i) = rest.find("crate::") {
        let before = rest[..i].chars().next_back();
        rest = &rest[i + "crate::".len()..];
        // `mycrate::x` is another crate; `$crate::x`, `(crate::x` and ` crate::x` are this one.
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
            continue;
        }
        let name: String = rest
            .chars()
            .take_while(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '_')
            .collect();
        let next = rest[name.len()..].chars().next();
        if !name.is_empty()
            && name.starts_with(|c: char| c.is_ascii_lowercase() || c == '_')
            && next != Some('(')
        {
            out.insert(name);
        }
    }
    out
}

/// The import graph between the top-level modules of `src`.
fn graph(src: &Path) -> Graph {
    let mods = modules(src);
    let names: BTreeSet<String> = mods.iter().map(|(m, _)| m.clone()).collect();
    let mut g: Graph = names.iter().map(|m| (m.clone(), BTreeSet::new())).collect();
    for (m, path) in &mods {
        let text = std::fs::read_to_string(path).expect("read module");
        for target in referenced(&text) {
            if names.contains(&target) && &target != m {
                g.get_mut(m).expect("known module").insert(target);
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

fn render(g: &Graph) -> String {
    let mut s = String::new();
    for (m, targets) in g {
        let t: Vec<&str> = targets.iter().map(String::as_str).collect();
        let t = if t.is_empty() {
            "(nothing)".to_string()
        } else {
            t.join(", ")
        };
        s.push_str(&format!("{m} -> {t}\n"));
    }
    s
}

#[test]
fn cuda_stream_modules_import_only_downwards() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let g = graph(&src);
    print!("{}", render(&g));
    assert!(
        g.len() >= 10,
        "found only {} modules under {}: the scan is broken",
        g.len(),
        src.display()
    );
    let cs = circles(&g);
    for c in &cs {
        println!("circle: {}", c.join(" <-> "));
    }
    assert!(
        cs.is_empty(),
        "modules of cuda-stream/src import each other in a circle: {cs:?}"
    );
    println!("no circles: every import points down");
}

#[test]
fn the_scan_sees_imports_and_the_check_sees_circles() {
    let text = "use crate::error::{Error, Result};\n\
                fn f() { crate::panics::report(a, b); $crate::stream::x!(); }\n\
                // mycrate::other is another crate; crate::Error is a re-export\n\
                let _ = crate::init();\n\
                #[cfg(test)]\nmod tests {\n    use crate::pool::X;\n}\n";
    let found: Vec<String> = referenced(text).into_iter().collect();
    assert_eq!(found, ["error", "panics", "stream"]);

    let edge = |a: &str, b: &[&str]| (a.to_string(), b.iter().map(|s| s.to_string()).collect());
    let layered: Graph = [edge("a", &["b", "c"]), edge("b", &["c"]), edge("c", &[])]
        .into_iter()
        .collect();
    assert!(circles(&layered).is_empty());
    let circular: Graph = [
        edge("a", &["b"]),
        edge("b", &["c"]),
        edge("c", &["a"]),
        edge("d", &["a"]),
    ]
    .into_iter()
    .collect();
    assert_eq!(circles(&circular), vec![vec!["a", "b", "c"]]);
}
