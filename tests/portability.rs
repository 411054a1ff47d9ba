//! The suite stays true on every CPU: no test or script states a memory
//! size that a measurement is judged against. The same step peaks
//! differently on Intel and AMD machines (oneDNN picks other kernels and
//! workspaces), so a capacity is derived from a measurement on the machine
//! at hand (tests/common) or from the data types, never written down.
//!
//! This reads tests/ and scripts/ for `--capacity` given a literal size, and
//! for literal byte counts in `assert` lines. A line that states a size on
//! purpose (a usage error, a GPU's advertised memory) says why with a
//! `not a measurement` comment.
#![cfg(feature = "builtin")]
use std::path::{Path, PathBuf};

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

fn files() -> Vec<PathBuf> {
    let mut files = Vec::new();
    for dir in ["tests", "tests/common", "scripts"] {
        for entry in std::fs::read_dir(Path::new(ROOT).join(dir)).unwrap() {
            let path = entry.unwrap().path();
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            // This file names the patterns it looks for.
            if path.is_file() && name != "portability.rs" && !name.ends_with(".pt") && !name.ends_with(".pyc") {
                files.push(path);
            }
        }
    }
    files.sort();
    files
}

/// A literal memory size: digits with a unit, e.g. 185MiB or 8GiB.
fn is_size_literal(word: &str) -> bool {
    let w = word.trim_matches(|c: char| "\"'()[],;".contains(c));
    let digits = w.trim_end_matches(|c: char| c.is_ascii_alphabetic());
    let unit = &w[digits.len()..];
    !digits.is_empty()
        && digits.chars().all(|c| c.is_ascii_digit() || c == '.')
        && ["KiB", "MiB", "GiB", "KB", "MB", "GB"].contains(&unit)
}

/// The offending lines of one file's text: a literal size given to
/// `--capacity`, or an assertion on a byte count of 7 or more digits.
fn offences(text: &str) -> Vec<(usize, String)> {
    let mut found = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.contains("not a measurement") {
            continue;
        }
        let words: Vec<&str> = line.split_whitespace().collect();
        let capacity = words
            .windows(2)
            .any(|w| w[0].trim_matches(|c: char| "\"',".contains(c)).ends_with("--capacity") && is_size_literal(w[1]));
        let asserted_bytes = line.trim_start().starts_with("assert")
            && line.split(|c: char| !c.is_ascii_digit() && c != '_').any(|n| n.replace('_', "").len() >= 7);
        if capacity || asserted_bytes {
            found.push((i + 1, line.trim().to_string()));
        }
    }
    found
}

#[test]
fn no_test_or_script_states_a_capacity_or_a_measured_byte_count() {
    let mut all = Vec::new();
    for path in files() {
        let Ok(text) = std::fs::read_to_string(&path) else { continue };
        for (line, code) in offences(&text) {
            all.push(format!("{}:{line}: {code}", path.strip_prefix(ROOT).unwrap().display()));
        }
    }
    assert!(
        all.is_empty(),
        "memory sizes written into tests or scripts (derive them from a measurement, or mark why a line is `not a measurement`):\n{}",
        all.join("\n")
    );
}

#[test]
fn the_check_itself_finds_what_it_is_for() {
    assert_eq!(offences("  .args([\"--capacity\", \"185MiB\"])").len(), 1);
    assert_eq!(offences("  whole=(--capacity 185MiB)").len(), 1);
    assert_eq!(offences("    assert_eq!(peak, 201_065_088);").len(), 1);
    assert!(offences("  .args([\"--capacity\", &capacity])").is_empty());
    assert!(offences("  small=(--capacity 8GiB)  # not a measurement: the GPU size to emulate").is_empty());
    assert!(offences("    assert_eq!(rows.len(), 14);").is_empty());
}
