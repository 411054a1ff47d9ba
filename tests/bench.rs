//! The search benchmark runs end to end (its SYNTHETIC part; the real part
//! takes minutes and is run by ./scripts/bench-search) and writes the columns
//! the issue promises.
#![cfg(feature = "builtin")]
use assert_cmd::Command;

#[test]
fn bench_search_writes_one_labelled_row_per_case_and_strategy() {
    let dir = tempfile::tempdir().unwrap();
    let csv_path = dir.path().join("bench/search.csv");
    let out = Command::cargo_bin("vramprobe")
        .unwrap()
        .args(["bench-search", "--synthetic-only", "--out"])
        .arg(&csv_path)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("SYNTHETIC curves (modelled, not measured)"), "{stdout}");

    let mut reader = csv::Reader::from_path(&csv_path).unwrap();
    let header: Vec<String> = reader.headers().unwrap().iter().map(str::to_string).collect();
    assert_eq!(
        header,
        [
            "case",
            "kind",
            "machine",
            "capacity_bytes",
            "strategy",
            "trials",
            "steps",
            "samples",
            "found",
            "true_max",
            "would_oom"
        ]
    );
    let rows: Vec<vramprobe::bench::BenchRow> = reader.deserialize().collect::<Result<_, _>>().unwrap();
    assert_eq!(rows.len(), vramprobe::analyze::search::synthetic::suite().len() * 4);
    assert!(rows.iter().all(|r| r.kind == "synthetic" && r.machine.is_empty() && r.capacity_bytes.is_none()));
    for r in rows.iter().filter(|r| r.strategy == "vramprobe") {
        assert_eq!(r.found, r.true_max, "{}", r.case);
        assert!(!r.would_oom);
    }
}
