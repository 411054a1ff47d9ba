//! The folder layout is the architecture, and stays so: every `crate::` path
//! in src/ is read, per top-level module, and an import that runs sideways,
//! upward or in a circle fails this test. The layers, top to bottom:
//!
//! 1. commands
//! 2. sweep, train, bench (side by side: none imports another)
//! 3. report
//! 4. analyze, measure (side by side: the pure analysis knows nothing of
//!    how trials run, and the trials nothing of the analysis)
//! 5. record (the values both share: the trial protocol, results, subjects)
//! 6. units, interrupt
//! 7. error
#![cfg(feature = "builtin")]
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

const LAYERS: [(&str, u32); 12] = [
    ("commands", 1),
    ("sweep", 2),
    ("train", 2),
    ("bench", 2),
    ("report", 3),
    ("analyze", 4),
    ("measure", 4),
    ("record", 5),
    ("units", 6),
    ("interrupt", 6),
    ("error", 7),
    // lib.rs and main.rs: the root declares the modules and calls commands.
    ("", 0),
];

fn layer(module: &str) -> Option<u32> {
    LAYERS.iter().find(|(m, _)| *m == module).map(|(_, l)| *l)
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The top-level module a file under src/ belongs to ("" for lib.rs, main.rs).
fn module_of(src: &Path, file: &Path) -> String {
    let rel = file.strip_prefix(src).unwrap();
    let first = rel.components().next().unwrap().as_os_str().to_string_lossy().into_owned();
    match first.strip_suffix(".rs") {
        Some("lib" | "main") => String::new(),
        Some(name) => name.to_string(),
        None => first,
    }
}

/// The top-level modules a file's text names through `crate::` (grouped
/// `use crate::{a, b::c}` included). Comments are skipped.
fn imports(text: &str) -> BTreeSet<String> {
    let mut found = BTreeSet::new();
    for line in text.lines() {
        let code = line.split("//").next().unwrap_or("");
        let mut rest = code;
        while let Some(i) = rest.find("crate::") {
            rest = &rest[i + "crate::".len()..];
            if let Some(group) = rest.strip_prefix('{') {
                let inner = group.split('}').next().unwrap_or("");
                for item in inner.split(',') {
                    let name: String = item.trim().chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
                    if !name.is_empty() && name != "self" {
                        found.insert(name);
                    }
                }
            } else {
                let name: String = rest.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
                if !name.is_empty() {
                    found.insert(name);
                }
            }
        }
    }
    found
}

/// module -> the modules it imports, with one file that does it.
fn graph(src: &Path) -> BTreeMap<String, BTreeMap<String, PathBuf>> {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    let mut edges: BTreeMap<String, BTreeMap<String, PathBuf>> = BTreeMap::new();
    for file in files {
        let from = module_of(src, &file);
        let entry = edges.entry(from.clone()).or_default();
        for to in imports(&std::fs::read_to_string(&file).unwrap()) {
            if to != from && to.chars().next().is_some_and(|c| c.is_lowercase()) {
                entry.entry(to).or_insert_with(|| file.clone());
            }
        }
    }
    edges
}

/// Every import that breaks the layering: unknown modules, sideways and upward arrows.
fn violations(edges: &BTreeMap<String, BTreeMap<String, PathBuf>>) -> Vec<String> {
    let mut bad = Vec::new();
    for (from, tos) in edges {
        let Some(from_layer) = layer(from) else {
            bad.push(format!("src/{from}: a top-level module with no layer (add it to LAYERS and the README map)"));
            continue;
        };
        for (to, file) in tos {
            match layer(to) {
                None => bad.push(format!("{}: imports crate::{to}, which has no layer", file.display())),
                Some(to_layer) if to_layer <= from_layer => bad.push(format!(
                    "{}: {from} (layer {from_layer}) imports {to} (layer {to_layer}): {}",
                    file.display(),
                    if to_layer == from_layer { "sideways" } else { "upward" }
                )),
                Some(_) => {}
            }
        }
    }
    bad
}

/// One circle among the modules, if there is one (as a path a -> b -> a).
fn circle(edges: &BTreeMap<String, BTreeMap<String, PathBuf>>) -> Option<Vec<String>> {
    fn visit(
        node: &str,
        edges: &BTreeMap<String, BTreeMap<String, PathBuf>>,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(i) = path.iter().position(|p| p == node) {
            let mut c = path[i..].to_vec();
            c.push(node.to_string());
            return Some(c);
        }
        if done.contains(node) {
            return None;
        }
        path.push(node.to_string());
        for next in edges.get(node).into_iter().flat_map(|t| t.keys()) {
            if let Some(c) = visit(next, edges, path, done) {
                return Some(c);
            }
        }
        path.pop();
        done.insert(node.to_string());
        None
    }
    let mut done = BTreeSet::new();
    edges.keys().find_map(|start| visit(start, edges, &mut Vec::new(), &mut done))
}

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

#[test]
fn imports_run_one_way_down_the_layers_with_no_circle() {
    let edges = graph(&src());
    assert_eq!(circle(&edges), None, "an import circle between top-level modules");
    let bad = violations(&edges);
    assert!(bad.is_empty(), "imports against the layering:\n{}", bad.join("\n"));
}

/// Inside one folder: its files and subfolders (mod.rs aside) -> the ones
/// they import through `crate::folder::x` or, from a file directly in the
/// folder, `super::x`.
fn folder_graph(src: &Path, folder: &str) -> BTreeMap<String, BTreeMap<String, PathBuf>> {
    let root = src.join(folder);
    let mut files = Vec::new();
    rust_files(&root, &mut files);
    let mut edges: BTreeMap<String, BTreeMap<String, PathBuf>> = BTreeMap::new();
    for file in files {
        let rel = file.strip_prefix(&root).unwrap();
        let first = rel.components().next().unwrap().as_os_str().to_string_lossy().into_owned();
        let from = first.trim_end_matches(".rs").to_string();
        if from == "mod" {
            continue;
        }
        let direct = rel.components().count() == 1;
        let text = std::fs::read_to_string(&file).unwrap();
        let mut names = BTreeSet::new();
        for line in text.lines() {
            let code = line.split("//").next().unwrap_or("");
            for (prefix, allowed) in [(format!("crate::{folder}::"), true), ("super::".to_string(), direct)] {
                let mut rest = code;
                while let (true, Some(i)) = (allowed, rest.find(&prefix)) {
                    rest = &rest[i + prefix.len()..];
                    let name: String = rest.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
                    names.insert(name);
                }
            }
        }
        let entry = edges.entry(from.clone()).or_default();
        for to in names {
            let exists = root.join(format!("{to}.rs")).is_file() || root.join(&to).is_dir();
            if to != from && exists {
                entry.entry(to).or_insert_with(|| file.clone());
            }
        }
    }
    edges
}

#[test]
fn no_folder_has_a_circle_among_its_files() {
    for entry in std::fs::read_dir(src()).unwrap() {
        let dir = entry.unwrap().path();
        if dir.is_dir() {
            let folder = dir.file_name().unwrap().to_string_lossy().into_owned();
            let edges = folder_graph(&src(), &folder);
            assert_eq!(circle(&edges), None, "an import circle inside src/{folder}");
        }
    }
}

#[test]
fn the_tree_has_few_files_at_the_top_and_a_map_in_every_folder() {
    let top: Vec<String> = std::fs::read_dir(src())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_file())
        .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    assert!(top.len() <= 6, "files directly in src/: {top:?}");
    let floors: BTreeSet<u32> = LAYERS.iter().map(|(_, l)| *l).filter(|l| *l > 0).collect();
    assert!(floors.len() <= 7, "{} floors", floors.len());
    for entry in std::fs::read_dir(src()).unwrap() {
        let dir = entry.unwrap().path();
        if dir.is_dir() {
            let text = std::fs::read_to_string(dir.join("mod.rs"))
                .unwrap_or_else(|_| panic!("{} has no mod.rs", dir.display()));
            assert!(
                text.starts_with("//!"),
                "{}/mod.rs opens without a doc comment saying what the layer is for",
                dir.display()
            );
        }
    }
}

#[test]
fn the_check_finds_a_circle_and_an_upward_arrow() {
    let edge = |from: &str, to: &str| (from.to_string(), to.to_string());
    let build = |pairs: &[(String, String)]| {
        let mut g: BTreeMap<String, BTreeMap<String, PathBuf>> = BTreeMap::new();
        for (from, to) in pairs {
            g.entry(from.clone()).or_default().insert(to.clone(), PathBuf::from(format!("src/{from}/x.rs")));
            g.entry(to.clone()).or_default();
        }
        g
    };
    let circular = build(&[edge("analyze", "report"), edge("report", "analyze")]);
    assert_eq!(circle(&circular), Some(vec!["analyze".into(), "report".into(), "analyze".into()]));
    assert_eq!(violations(&circular).len(), 1, "{:?}", violations(&circular));
    // The analysis and the trials stand side by side: neither imports the other.
    let side = build(&[edge("analyze", "measure")]);
    assert!(violations(&side)[0].contains("sideways"));
    let sideways = build(&[edge("sweep", "bench")]);
    assert!(violations(&sideways)[0].contains("sideways"));
    let fine = build(&[edge("commands", "sweep"), edge("sweep", "report"), edge("report", "measure")]);
    assert_eq!((circle(&fine), violations(&fine).len()), (None, 0));
    assert_eq!(
        imports("use crate::{analyze::fit, measure::record}; // crate::report\nlet x = crate::units::parse(y);"),
        ["analyze", "measure", "units"].map(String::from).into_iter().collect()
    );
}

#[test]
fn only_the_commands_know_the_command_line() {
    let mut files = Vec::new();
    rust_files(&src(), &mut files);
    for file in files {
        let rel = file.strip_prefix(src()).unwrap();
        if rel.starts_with("commands") || rel == Path::new("main.rs") {
            continue;
        }
        let text = std::fs::read_to_string(&file).unwrap();
        let code: Vec<&str> = text.lines().map(|l| l.split("//").next().unwrap_or("")).collect();
        assert!(!code.iter().any(|l| l.contains("clap::") || l.contains("use clap")), "{} uses clap", rel.display());
    }
}

/// Each file's code lines (comments cut), by its path under src/.
fn code_of_every_file() -> Vec<(PathBuf, Vec<String>)> {
    let mut files = Vec::new();
    rust_files(&src(), &mut files);
    files
        .into_iter()
        .map(|file| {
            let text = std::fs::read_to_string(&file).unwrap();
            let code = text.lines().map(|l| l.split("//").next().unwrap_or("").to_string()).collect();
            (file.strip_prefix(src()).unwrap().to_path_buf(), code)
        })
        .collect()
}

#[test]
fn the_writers_of_a_sweep_live_in_report() {
    // The Sink and Outlet a sweep reports to are implemented with the formats;
    // a test's scripted one (sweep/tests.rs) is the one exception.
    for (rel, code) in code_of_every_file() {
        if rel.starts_with("report") || rel.ends_with("tests.rs") {
            continue;
        }
        let writer = code.iter().any(|l| l.contains("impl Sink for") || l.contains("impl Outlet for"));
        assert!(!writer, "{} implements a sweep's writer outside report/", rel.display());
    }
}

#[test]
fn the_analysis_knows_nothing_of_how_trials_run_or_are_shown() {
    for (rel, code) in code_of_every_file() {
        if !rel.starts_with("analyze") {
            continue;
        }
        let imports = code.iter().any(|l| l.contains("crate::measure") || l.contains("crate::report"));
        assert!(!imports, "{} imports measure/ or report/", rel.display());
    }
}
