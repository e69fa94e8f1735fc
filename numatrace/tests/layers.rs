//! The import direction of both crates, checked from their sources: no module imports a layer
//! above its own, frontends do not import each other, and no two files import each other
//! (through any loop). A new upward import fails here with the file, the path and both layers.
//! See docs/architecture.md for what each layer holds.

use std::{
    collections::{BTreeMap, BTreeSet},
    fs,
    path::{Path, PathBuf},
};

/// numatrace's layers, lowest first: a module may import its own layer and those below.
const LAYERS: &[&[&str]] = &[
    &["text_escape", "safe_fs", "model"],
    &["kernel", "identity"],
    &["spawn", "plan"],
    &["bpf"],
    &["sources"],
    &["engine"],
    &["session"],
    &["capture"],
    &["report"],
    &["cli"],
    &["cmd"],
];

/// The folder whose children are frontends: siblings that share only the layers below.
const FRONTENDS: &str = "cmd";

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// `a/b/mod.rs` and `a/b.rs` are module `a::b`; `lib.rs` and `main.rs` the crate root.
fn module_of(src: &Path, file: &Path) -> Vec<String> {
    let rel = file.strip_prefix(src).unwrap().with_extension("");
    let mut parts: Vec<String> = rel
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    if parts.last().is_some_and(|p| p == "mod") {
        parts.pop();
    }
    if parts.len() == 1 && (parts[0] == "lib" || parts[0] == "main") {
        parts.clear();
    }
    parts
}

/// The source without comments and string literals (a path in a doc or a message is no import).
fn code_only(s: &str) -> String {
    let b = s.as_bytes();
    let (mut out, mut i) = (String::with_capacity(s.len()), 0);
    while i < b.len() {
        if b[i..].starts_with(b"//") {
            while i < b.len() && b[i] != b'\n' {
                i += 1;
            }
        } else if b[i..].starts_with(b"/*") {
            i += 2;
            while i < b.len() && !b[i..].starts_with(b"*/") {
                i += 1;
            }
            i += 2;
        } else if b[i] == b'"' {
            i += 1;
            while i < b.len() && b[i] != b'"' {
                i += if b[i] == b'\\' { 2 } else { 1 };
            }
            i += 1;
            out.push_str("\"\"");
        } else if b[i] == b'\'' && i + 2 < b.len() && (b[i + 2] == b'\'' || b[i + 1] == b'\\') {
            // A char literal ('"', '\'', '{'): skipped whole. Lifetimes have no closing quote.
            i += 1;
            while i < b.len() && b[i] != b'\'' {
                i += if b[i] == b'\\' { 2 } else { 1 };
            }
            i += 1;
        } else {
            let ch = s[i..].chars().next().unwrap();
            out.push(ch);
            i += ch.len_utf8();
        }
    }
    out
}

/// Every path a `use` tree names: `a::{b, c::{d, e}}` gives `a::b`, `a::c::d`, `a::c::e`.
fn expand(tree: &str, out: &mut Vec<String>) {
    let tree = tree.trim();
    if let Some(open) = tree.find('{') {
        let prefix = tree[..open].trim().trim_end_matches("::");
        let inner = &tree[open + 1..tree.rfind('}').unwrap()];
        let (mut depth, mut start) = (0, 0);
        let mut items = Vec::new();
        for (i, c) in inner.char_indices() {
            match c {
                '{' => depth += 1,
                '}' => depth -= 1,
                ',' if depth == 0 => {
                    items.push(&inner[start..i]);
                    start = i + 1;
                }
                _ => {}
            }
        }
        items.push(&inner[start..]);
        for item in items.iter().map(|s| s.trim()).filter(|s| !s.is_empty()) {
            let mut sub = Vec::new();
            expand(item, &mut sub);
            for s in sub {
                out.push(if prefix.is_empty() {
                    s
                } else {
                    format!("{prefix}::{s}")
                });
            }
        }
    } else {
        out.push(tree.split(" as ").next().unwrap().trim().to_owned());
    }
}

fn is_ident(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// The paths a file names: its `use` trees and every inline `crate::`/`super::` path.
fn named_paths(code: &str) -> Vec<String> {
    let mut paths = Vec::new();
    let mut rest = code;
    while let Some(at) = rest.find("use ") {
        let before = rest[..at].chars().next_back();
        rest = &rest[at + 4..];
        if before.is_some_and(is_ident) {
            continue;
        }
        let end = rest.find(';').unwrap_or(rest.len());
        expand(&rest[..end], &mut paths);
        rest = &rest[end..];
    }
    for root in ["crate::", "super::"] {
        let mut from = 0;
        while let Some(at) = code[from..].find(root) {
            let start = from + at;
            from = start + root.len();
            if code[..start]
                .chars()
                .next_back()
                .is_some_and(|c| is_ident(c) || c == ':')
            {
                continue;
            }
            let end = code[start..]
                .find(|c: char| !(is_ident(c) || c == ':'))
                .map_or(code.len(), |e| start + e);
            paths.push(code[start..end].trim_end_matches(':').to_owned());
        }
    }
    paths
}

/// The file-level import graph of one crate: module -> modules it imports.
fn graph(src: &Path) -> BTreeMap<Vec<String>, BTreeSet<Vec<String>>> {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    let modules: BTreeMap<Vec<String>, PathBuf> = files
        .iter()
        .filter(|f| !f.strip_prefix(src).unwrap().starts_with("bin"))
        .map(|f| (module_of(src, f), f.clone()))
        .collect();
    let resolve = |segs: &[String]| -> Option<Vec<String>> {
        (1..=segs.len())
            .rev()
            .map(|n| segs[..n].to_vec())
            .find(|m| modules.contains_key(m))
    };
    let mut edges = BTreeMap::new();
    for (module, file) in &modules {
        let code = code_only(&fs::read_to_string(file).unwrap());
        let is_folder = file
            .file_name()
            .is_some_and(|n| n == "mod.rs" || n == "lib.rs");
        // `super` of a.rs and of a/mod.rs alike is a's parent.
        let parent = &module[..module.len().saturating_sub(1)];
        let mut to = BTreeSet::new();
        for p in named_paths(&code) {
            let mut segs: Vec<String> = p.split("::").map(str::to_owned).collect();
            let first = segs.remove(0);
            let full: Vec<String> = match first.as_str() {
                "crate" => segs,
                "super" => parent.iter().cloned().chain(segs).collect(),
                "self" => module.iter().cloned().chain(segs).collect(),
                _ => continue,
            };
            let Some(target) = resolve(&full) else {
                continue;
            };
            // A folder's own children, and anything a child takes from its ancestors through
            // `super::*`, are the module tree itself, not an import between rooms.
            let own_child = is_folder && target.starts_with(module);
            if target.is_empty() || &target == module || module.starts_with(&target) || own_child {
                continue;
            }
            to.insert(target);
        }
        edges.insert(module.clone(), to);
    }
    edges
}

fn name(m: &[String]) -> String {
    if m.is_empty() {
        "crate".into()
    } else {
        m.join("::")
    }
}

/// Strongly connected components with more than one member (Tarjan).
fn circles(edges: &BTreeMap<Vec<String>, BTreeSet<Vec<String>>>) -> Vec<Vec<String>> {
    struct T<'a> {
        e: &'a BTreeMap<Vec<String>, BTreeSet<Vec<String>>>,
        index: BTreeMap<&'a [String], usize>,
        low: BTreeMap<&'a [String], usize>,
        stack: Vec<&'a [String]>,
        on: BTreeSet<&'a [String]>,
        out: Vec<Vec<String>>,
    }
    fn visit<'a>(t: &mut T<'a>, v: &'a [String]) {
        let i = t.index.len();
        t.index.insert(v, i);
        t.low.insert(v, i);
        t.stack.push(v);
        t.on.insert(v);
        for w in t.e.get(v).into_iter().flatten() {
            let w = w.as_slice();
            if !t.index.contains_key(w) {
                visit(t, w);
                let lw = t.low[w];
                let lv = t.low.get_mut(v).unwrap();
                *lv = (*lv).min(lw);
            } else if t.on.contains(w) {
                let iw = t.index[w];
                let lv = t.low.get_mut(v).unwrap();
                *lv = (*lv).min(iw);
            }
        }
        if t.low[v] == t.index[v] {
            let mut c = Vec::new();
            while let Some(w) = t.stack.pop() {
                t.on.remove(w);
                c.push(name(w));
                if w == v {
                    break;
                }
            }
            if c.len() > 1 {
                c.sort();
                t.out.push(c);
            }
        }
    }
    let mut t = T {
        e: edges,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on: BTreeSet::new(),
        out: Vec::new(),
    };
    for v in edges.keys() {
        if !t.index.contains_key(v.as_slice()) {
            visit(&mut t, v);
        }
    }
    t.out
}

fn crate_src(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join(name)
        .join("src")
}

fn layer_of(m: &[String]) -> Option<usize> {
    let top = m.first()?;
    LAYERS.iter().position(|l| l.contains(&top.as_str()))
}

#[test]
fn no_module_imports_a_higher_layer_or_a_sibling_frontend() {
    let edges = graph(&crate_src("numatrace"));
    let mut wrong = Vec::new();
    for (from, tos) in &edges {
        let Some(lf) = layer_of(from) else {
            assert!(
                from.is_empty(),
                "{} is in no layer: add it to LAYERS",
                name(from)
            );
            continue;
        };
        for to in tos {
            let lt = layer_of(to).unwrap_or_else(|| panic!("{} is in no layer", name(to)));
            if lt > lf {
                wrong.push(format!(
                    "{} (layer {lf}: {:?}) imports {} (layer {lt}: {:?})",
                    name(from),
                    LAYERS[lf],
                    name(to),
                    LAYERS[lt]
                ));
            }
            let frontend = |m: &[String]| (m.len() > 1 && m[0] == FRONTENDS).then(|| m[1].clone());
            if let (Some(a), Some(b)) = (frontend(from), frontend(to))
                && a != b
            {
                wrong.push(format!(
                    "frontend {} imports frontend {}: share it through a lower layer",
                    name(from),
                    name(to)
                ));
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "imports against the layers:\n{}",
        wrong.join("\n")
    );
}

#[test]
fn no_two_files_import_each_other() {
    for krate in ["numatrace", "numatrace-ebpf", "numatrace-common"] {
        let c = circles(&graph(&crate_src(krate)));
        assert!(c.is_empty(), "{krate}: files that import each other: {c:?}");
    }
}

#[test]
fn the_checker_sees_imports_and_circles() {
    // Guards the guard: a parser that found nothing would pass every check above.
    let edges = graph(&crate_src("numatrace"));
    let stat: Vec<String> = ["cmd", "stat"].map(str::to_owned).to_vec();
    let session: Vec<String> = vec!["session".to_owned()];
    assert!(edges[&stat].contains(&session), "cmd::stat imports session");
    let mut paths = Vec::new();
    expand("crate::{a::{b, c as d}, e}", &mut paths);
    assert_eq!(paths, ["crate::a::b", "crate::a::c", "crate::e"]);
    let v = |s: &str| vec![s.to_owned()];
    let loop_ = BTreeMap::from([
        (v("a"), BTreeSet::from([v("b")])),
        (v("b"), BTreeSet::from([v("a")])),
        (v("c"), BTreeSet::from([v("a")])),
    ]);
    assert_eq!(circles(&loop_), [["a", "b"]]);
    assert_eq!(
        code_only("let s = \"crate::x\"; // crate::y\nc"),
        "let s = \"\"; \nc"
    );
}
