//! The import direction of the crates, checked from their sources: no module imports a layer
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
    &["text_escape", "invoker", "safe_fs", "model"],
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
        } else if b[i] == b'r' && raw_string_at(b, i).is_some() {
            i = raw_string_at(b, i).unwrap();
            out.push_str("\"\"");
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

/// Where the raw string literal starting at `i` (`r"…"`, `r#"…"#`, …) ends, if one starts there.
fn raw_string_at(b: &[u8], i: usize) -> Option<usize> {
    if i > 0 && (b[i - 1].is_ascii_alphanumeric() || b[i - 1] == b'_') {
        return None;
    }
    let mut j = i + 1;
    while j < b.len() && b[j] == b'#' {
        j += 1;
    }
    let hashes = j - i - 1;
    if b.get(j) != Some(&b'"') {
        return None;
    }
    let mut k = j + 1;
    while k < b.len() {
        if b[k] == b'"'
            && b[k + 1..]
                .iter()
                .take(hashes)
                .filter(|&&c| c == b'#')
                .count()
                == hashes
        {
            return Some(k + 1 + hashes);
        }
        k += 1;
    }
    Some(b.len())
}

/// Every path a `use` tree names, with the name it is known by (its last segment, its `as`
/// name, or `*` for a glob): `a::{b, c::{d as e}}` gives `a::b` (b) and `a::c::d` (e).
fn expand(tree: &str, out: &mut Vec<(String, String)>) {
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
            for (path, name) in sub {
                let path = if prefix.is_empty() {
                    path
                } else {
                    format!("{prefix}::{path}")
                };
                out.push((path, name));
            }
        }
    } else {
        let (path, alias) = match tree.split_once(" as ") {
            Some((path, alias)) => (path.trim(), Some(alias.trim())),
            None => (tree, None),
        };
        let name = alias.unwrap_or_else(|| path.rsplit("::").next().unwrap_or(path));
        out.push((path.to_owned(), name.to_owned()));
    }
}

fn is_ident(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// A file's `use` trees, as (path, the name it is known by: its last segment, its `as` name,
/// or `*` for a glob).
fn use_paths(code: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut rest = code;
    while let Some(at) = rest.find("use ") {
        let before = rest[..at].chars().next_back();
        rest = &rest[at + 4..];
        if before.is_some_and(is_ident) {
            continue;
        }
        let end = rest.find(';').unwrap_or(rest.len());
        expand(&rest[..end], &mut out);
        rest = &rest[end..];
    }
    out
}

/// Every `a::b…` path in the code whose first segment is `crate`, `super`, `self` or a name in
/// `known`, as written.
fn inline_paths(code: &str, known: &BTreeSet<String>) -> Vec<String> {
    let mut out = Vec::new();
    let chars: Vec<(usize, char)> = code.char_indices().collect();
    let mut k = 0;
    while k < chars.len() {
        let (start, c) = chars[k];
        let prev = code[..start].chars().next_back();
        if !(c.is_ascii_alphabetic() || c == '_') || prev.is_some_and(|p| is_ident(p) || p == ':') {
            k += 1;
            continue;
        }
        let end = code[start..]
            .find(|c: char| !(is_ident(c) || c == ':'))
            .map_or(code.len(), |e| start + e);
        let path = code[start..end].trim_end_matches(':');
        let first = path.split("::").next().unwrap_or("");
        if path.contains("::")
            && (["crate", "super", "self"].contains(&first) || known.contains(first))
        {
            out.push(path.to_owned());
        }
        k += code[start..end].chars().count().max(1);
    }
    out
}

/// Inside an inline `mod name { … }` (tests), `super` is the file's own module: written as
/// `self` there, so that the file's paths all resolve from one place.
fn inline_modules_as_self(code: &str) -> String {
    let mut out = String::with_capacity(code.len());
    let mut rest = code;
    while let Some(at) = rest.find("mod ") {
        let head = &rest[at + 4..];
        let name_len = head.find(|c: char| !is_ident(c)).unwrap_or(head.len());
        let after = head[name_len..].trim_start();
        let is_word = !rest[..at].chars().next_back().is_some_and(is_ident);
        if !(is_word && name_len > 0 && after.starts_with('{')) {
            out.push_str(&rest[..at + 4]);
            rest = &rest[at + 4..];
            continue;
        }
        let open = at + 4 + name_len + (head[name_len..].len() - after.len());
        let mut depth = 0;
        let mut close = rest.len();
        for (i, c) in rest[open..].char_indices() {
            match c {
                '{' => depth += 1,
                '}' => {
                    depth -= 1;
                    if depth == 0 {
                        close = open + i + 1;
                        break;
                    }
                }
                _ => {}
            }
        }
        out.push_str(&rest[..open]);
        let body = &rest[open..close];
        let mut from = 0;
        while let Some(i) = body[from..].find("super::") {
            let i = from + i;
            let prev = body[..i].chars().next_back();
            out.push_str(&body[from..i]);
            out.push_str(if prev.is_some_and(|p| is_ident(p) || p == ':') {
                "super::"
            } else {
                "self::"
            });
            from = i + "super::".len();
        }
        out.push_str(&body[from..]);
        rest = &rest[close..];
    }
    out.push_str(rest);
    out
}

/// The file-level import graph of one crate: module -> modules it imports. Paths are resolved
/// as rustc would for modules: `crate::`, any number of `super::`, `self::`, names a `use`
/// brought in (by its last segment or `as`), the children of a module a glob brought in, and
/// this file's own `mod` children. A module and its own ancestors or descendants are the module
/// tree, not an import between files (a folder's `mod.rs` and its files).
fn graph(src: &Path) -> BTreeMap<Vec<String>, BTreeSet<Vec<String>>> {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    let modules: BTreeMap<Vec<String>, PathBuf> = files
        .iter()
        .filter(|f| !f.strip_prefix(src).unwrap().starts_with("bin"))
        // main.rs is the binary's root beside lib.rs: it is checked as the crate root too.
        .filter(|f| !(f.file_name().is_some_and(|n| n == "main.rs") && src.join("lib.rs").exists()))
        .map(|f| (module_of(src, f), f.clone()))
        .collect();
    let resolve = |segs: &[String]| -> Option<Vec<String>> {
        (0..=segs.len())
            .rev()
            .map(|n| segs[..n].to_vec())
            .find(|m| modules.contains_key(m))
    };
    let children = |m: &[String]| -> Vec<String> {
        modules
            .keys()
            .filter(|k| k.len() == m.len() + 1 && k.starts_with(m))
            .map(|k| k[m.len()].clone())
            .collect()
    };
    let mut edges = BTreeMap::new();
    for (module, file) in &modules {
        let code = inline_modules_as_self(&code_only(&fs::read_to_string(file).unwrap()));
        let parent = module[..module.len().saturating_sub(1)].to_vec();
        // Names this file can start a path with, and the module path each stands for.
        let mut aliases: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for child in children(module) {
            let mut full = module.clone();
            full.push(child.clone());
            aliases.insert(child, full);
        }
        // Resolves a written path's leading `crate`/`super…`/`self`/alias into a full path.
        let absolute = |p: &str, aliases: &BTreeMap<String, Vec<String>>| -> Option<Vec<String>> {
            let mut segs: Vec<String> = p.split("::").map(str::to_owned).collect();
            let mut base = match segs.first()?.as_str() {
                "crate" => Vec::new(),
                "self" => module.clone(),
                "super" => parent.clone(),
                name => aliases.get(name)?.clone(),
            };
            segs.remove(0);
            while segs.first().is_some_and(|s| s == "super") {
                base.pop();
                segs.remove(0);
            }
            base.extend(segs);
            Some(base)
        };
        let uses = use_paths(&code);
        // Twice: a `use` may name a module another `use` of the file brought in.
        for _ in 0..2 {
            for (p, alias) in &uses {
                let Some(full) = absolute(p.trim_end_matches("::*"), &aliases) else {
                    continue;
                };
                if p.ends_with('*') {
                    if resolve(&full).as_deref() == Some(full.as_slice()) {
                        for child in children(&full) {
                            let mut c = full.clone();
                            c.push(child.clone());
                            aliases.entry(child).or_insert(c);
                        }
                    }
                } else {
                    aliases.insert(alias.clone(), full);
                }
            }
        }
        let known: BTreeSet<String> = aliases.keys().cloned().collect();
        let written = uses
            .iter()
            .map(|(p, _)| p.trim_end_matches("::*").to_owned())
            .chain(inline_paths(&code, &known));
        let mut to = BTreeSet::new();
        for p in written {
            let Some(target) = absolute(&p, &aliases).and_then(|f| resolve(&f)) else {
                continue;
            };
            if target.starts_with(module) || module.starts_with(&target) {
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
    expand(
        "crate::{a::{b, c as d}, e::*, f::{g as h, i::g}}",
        &mut paths,
    );
    let pair = |p: &str, n: &str| (p.to_owned(), n.to_owned());
    assert_eq!(
        paths,
        [
            pair("crate::a::b", "b"),
            pair("crate::a::c", "d"),
            pair("crate::e::*", "*"),
            pair("crate::f::g", "h"),
            pair("crate::f::i::g", "g"),
        ]
    );
    let v = |s: &str| vec![s.to_owned()];
    let loop_ = BTreeMap::from([
        (v("a"), BTreeSet::from([v("b")])),
        (v("b"), BTreeSet::from([v("a")])),
        (v("c"), BTreeSet::from([v("a")])),
    ]);
    assert_eq!(circles(&loop_), [["a", "b"]]);

    // Every way to name a module that the graph must see, in a crate of its own.
    let dir = std::env::temp_dir().join(format!("numatrace-layers-{}", std::process::id()));
    let _ = fs::remove_dir_all(&dir);
    let files = [
        ("lib.rs", "pub mod cmd; pub mod kernel; pub mod model;"),
        ("cmd/mod.rs", "pub mod stat; pub mod top; pub mod record;"),
        ("cmd/stat.rs", "use super::*; fn f() { record::run(); }"),
        (
            "cmd/record.rs",
            "pub fn run() {} mod tests { use super::*; fn t() { run(); stat::x(); } }",
        ),
        (
            "cmd/top/mod.rs",
            "mod ui; use crate::cmd; fn f() { cmd::stat::run(); }",
        ),
        (
            "cmd/top/ui.rs",
            "fn f() { super::super::record::run(); let s = r#\"a\"b\"#; }",
        ),
        ("kernel/mod.rs", "use crate::*; fn f() { model::x(); }"),
        ("model/mod.rs", "use crate::kernel as k; fn x() { k::f(); }"),
    ];
    for (f, code) in files {
        fs::create_dir_all(dir.join(f).parent().unwrap()).unwrap();
        fs::write(dir.join(f), code).unwrap();
    }
    let e = graph(&dir);
    let m = |p: &str| p.split("::").map(str::to_owned).collect::<Vec<_>>();
    for (from, to) in [
        ("cmd::stat", "cmd::record"),
        ("cmd::top", "cmd::stat"),
        ("cmd::top::ui", "cmd::record"),
        ("kernel", "model"),
        ("model", "kernel"),
    ] {
        assert!(
            e[&m(from)].contains(&m(to)),
            "{from} -> {to} not seen: {e:?}"
        );
    }
    // In record's inline test module `super` is record itself: its `stat` is no sibling.
    assert!(!e[&m("cmd::record")].contains(&m("cmd::stat")), "{e:?}");
    assert_eq!(circles(&e), [["kernel", "model"]]);
    fs::remove_dir_all(&dir).unwrap();
    assert_eq!(
        code_only("let s = \"crate::x\"; // crate::y\nc"),
        "let s = \"\"; \nc"
    );
}
