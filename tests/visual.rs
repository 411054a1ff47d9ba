//! What a person looks at: the plots and the HTML page a sweep writes,
//! `vramprobe report` reproducing them from a saved run, the page rendered
//! by headless Chromium, progress that stays out of scripts' output, shell
//! completions and help examples.
#![cfg(feature = "builtin")]
use std::path::{Path, PathBuf};
use std::process::Command as Process;

use common::{capacity_for_max, vramprobe, DEFAULT_MARGIN};
use vramprobe::report::csv::PlanRow;

use crate::common;

const FILES: [&str; 9] = [
    "steps.csv",
    "sweep.csv",
    "breakdown.csv",
    "plan.csv",
    "report.json",
    "memory.svg",
    "throughput.svg",
    "timeline.svg",
    "index.html",
];

const WORKLOAD: [&str; 10] =
    ["--model", "squeezenet1_1", "--input", "3x32x32", "--classes", "10", "--device", "cpu", "--optimizer", "sgd"];

/// A capacity where batch 16 would be the max on this machine, so that the
/// sweep's largest batch, 8, is the recommended one; measured once.
fn capacity() -> u64 {
    static CAPACITY: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    *CAPACITY.get_or_init(|| capacity_for_max(&WORKLOAD, (2, 4), 16, DEFAULT_MARGIN))
}

/// A small real CPU sweep (squeezenet at 32x32, three batches) into `out`.
fn small_sweep(out: &Path, extra: &[&str]) -> std::process::Output {
    vramprobe()
        .arg("sweep")
        .args(WORKLOAD)
        .args(["--batches", "2,4,8", "--capacity", &capacity().to_string(), "--out"])
        .arg(out)
        .args(extra)
        .output()
        .unwrap()
}

fn plan(out: &Path) -> PlanRow {
    let mut r = csv::Reader::from_path(out.join("plan.csv")).unwrap();
    r.deserialize().next().unwrap().unwrap()
}

/// Parses the file as XML (a broken SVG fails here) and returns its text.
fn svg(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap();
    let doc = roxmltree::Document::parse(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    assert_eq!(doc.root_element().tag_name().name(), "svg");
    text
}

#[test]
fn a_sweep_writes_plots_and_a_page_and_report_reproduces_them() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run");
    let run = small_sweep(&out, &["--quiet"]);
    assert!(run.status.success(), "{}", String::from_utf8_lossy(&run.stderr));
    let p = plan(&out);
    assert_eq!(p.recommended_batch, 8);

    let memory = svg(&out.join("memory.svg"));
    let capacity_label = format!("capacity: {}", vramprobe::units::human_bytes(capacity() as f64));
    for series in ["peak allocated (measured)", "fit of peak_allocated", &capacity_label, "budget ("] {
        assert!(memory.contains(series), "memory.svg lacks {series}");
    }
    assert!(memory.contains(&format!("recommended {}", p.recommended_batch)), "no recommended marker");

    // The fastest batch is a measured batch and is marked where throughput is plotted.
    let fastest = p.fastest_batch.expect("a fastest batch");
    assert!([2, 4, 8].contains(&fastest), "{fastest}");
    assert!(p.fastest_samples_per_second.unwrap() > 0.0);
    let throughput = svg(&out.join("throughput.svg"));
    assert!(throughput.contains("samples/s (measured"));
    assert!(
        throughput.contains(&format!("fastest {fastest}"))
            || throughput.contains(&format!("fastest = largest {fastest}"))
    );

    let html = std::fs::read_to_string(out.join("index.html")).unwrap();
    assert_eq!(html.matches("<svg").count(), 3, "the three plots inline");
    assert!(html.contains("Recommendation") && html.contains("fastest batch") && html.contains("squeezenet1_1"));
    assert!(html.contains("--batches 2,4,8"), "the exact command line");
    assert!(!html.contains("<script") && !html.contains("src=\"http"), "self-contained");

    // `report` rewrites every file from report.json alone, byte for byte.
    let originals: Vec<Vec<u8>> = FILES.iter().map(|f| std::fs::read(out.join(f)).unwrap()).collect();
    let copy = dir.path().join("copy");
    std::fs::create_dir(&copy).unwrap();
    std::fs::copy(out.join("report.json"), copy.join("report.json")).unwrap();
    let again = vramprobe().arg("report").arg(&copy).output().unwrap();
    assert!(again.status.success(), "{}", String::from_utf8_lossy(&again.stderr));
    assert!(String::from_utf8_lossy(&again.stdout).contains("recommended batch"));
    for (name, original) in FILES.iter().zip(&originals) {
        assert_eq!(&std::fs::read(copy.join(name)).unwrap(), original, "{name} differs after report");
    }

    // A failure far past the boundary (a search's overshoot) stays off the
    // batch axis, named at its edge, so the measured points keep the width.
    let mut report: serde_json::Value = serde_json::from_slice(&originals[4]).unwrap();
    let trials = report["trials"].as_array_mut().unwrap();
    let mut far = trials[0].clone();
    far["batch"] = 800.into();
    far["outcome"] = "oom".into();
    far["steps"] = serde_json::json!([]);
    trials.push(far);
    // A command's title keeps its file names, not its paths, on one line.
    report["subject"]["model"] = "/usr/bin/python3 /home/me/project/train.py --batch-size {batch} --epochs 90".into();
    std::fs::write(copy.join("report.json"), serde_json::to_vec(&report).unwrap()).unwrap();
    assert!(vramprobe().arg("report").arg(&copy).arg("--quiet").output().unwrap().status.success());
    let memory = svg(&copy.join("memory.svg"));
    assert!(memory.contains("batch 800 (off the axis)"), "the far failure is named at the edge");
    assert!(!memory.contains(">100<"), "the axis ends near batch 8, not at 800");
    assert!(
        memory.contains("python3 train.py --batch-size {batch}... 3x32x32: peak memory"),
        "the title names the command"
    );
    assert!(!memory.contains("/home/me"), "no paths in the title");
}

#[test]
fn report_on_a_folder_that_is_not_a_run_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let out = vramprobe().arg("report").arg(dir.path()).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("no report.json") && !stderr.contains("panicked"), "{stderr}");
    let version = vramprobe::analyze::run::REPORT_SCHEMA_VERSION;
    std::fs::write(dir.path().join("report.json"), format!("{{\"schema_version\": {version},\n \"status\": 3}}"))
        .unwrap();
    let out = vramprobe().arg("report").arg(dir.path()).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("report.json:2: not a vramprobe report"), "{stderr}");
}

#[test]
fn progress_is_absent_when_stderr_is_not_a_terminal() {
    let dir = tempfile::tempdir().unwrap();
    let run = small_sweep(&dir.path().join("run"), &[]);
    assert!(run.status.success());
    let stderr = String::from_utf8_lossy(&run.stderr);
    // One plain line per trial, and nothing a terminal would need to redraw.
    assert_eq!(stderr.lines().filter(|l| l.starts_with("trial ")).count(), 3, "{stderr}");
    for output in [&run.stdout, &run.stderr] {
        let text = String::from_utf8_lossy(output);
        assert!(!text.contains('\r') && !text.contains('\x1b'), "control characters: {text:?}");
        assert!(!text.chars().any(|c| ('\u{2800}'..='\u{28ff}').contains(&c)), "a spinner: {text:?}");
    }
}

/// `script` (util-linux) runs a command on a pseudo-terminal; None where it is missing.
fn on_a_terminal(command: &str, no_color: bool) -> Option<String> {
    let has_script = Process::new("script").arg("--version").output().is_ok_and(|o| o.status.success());
    if !has_script {
        common::skip("on_a_terminal", "`script` (util-linux) is not installed, so no pseudo-terminal can be made");
        return None;
    }
    let mut p = Process::new("script");
    p.args(["-q", "-e", "-c", command, "/dev/null"]).env_remove("NO_COLOR");
    if no_color {
        p.env("NO_COLOR", "1");
    }
    let out = p.output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    Some(String::from_utf8_lossy(&out.stdout).into_owned())
}

#[test]
fn on_a_terminal_the_trainer_shows_a_bar_and_no_color_turns_colours_off() {
    let dir = tempfile::tempdir().unwrap();
    let plan = dir.path().join("plan.csv");
    std::fs::write(
        &plan,
        "schema_version,model,input,classes,device,optimizer,recommended_batch\n2,squeezenet1_1,3x32x32,10,cpu,sgd,4\n",
    )
    .unwrap();
    let log = dir.path().join("train.csv");
    let command = format!(
        "{} train --plan {} --steps 3 --log-every 1 --log {}",
        env!("CARGO_BIN_EXE_vramprobe"),
        plan.display(),
        log.display()
    );
    let Some(coloured) = on_a_terminal(&command, false) else { return };
    assert!(coloured.contains("3/3 steps"), "{coloured:?}");
    assert!(coloured.contains("\x1b[36m"), "a cyan bar: {coloured:?}");
    let plain = on_a_terminal(&command, true).unwrap();
    assert!(plain.contains("3/3 steps") && !plain.contains("\x1b[36m"), "{plain:?}");
    // The trainer's plot: loss and memory over the steps.
    let plot = svg(&log.with_extension("svg"));
    assert!(plot.contains("loss") && plot.contains("peak allocated"));
}

fn chromium() -> Option<PathBuf> {
    let candidates =
        [std::env::var("CHROMIUM").ok(), Some("/usr/bin/chromium".into()), Some("/usr/bin/chromium-browser".into())];
    candidates.into_iter().flatten().map(PathBuf::from).find(|p| p.is_file())
}

#[test]
fn the_page_renders_in_headless_chromium_with_its_plots() {
    let Some(browser) = chromium() else {
        common::skip(
            "the_page_renders_in_headless_chromium_with_its_plots",
            "Chromium is not installed (./scripts/test installs Debian's chromium package where apt works)",
        );
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run");
    assert!(small_sweep(&out, &["--quiet"]).status.success());
    let url = format!("file://{}", out.join("index.html").display());
    let profile = dir.path().join("profile");
    let flags = [
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--window-size=1100,1800",
    ];
    let run = |extra: &str| {
        Process::new(&browser)
            .args(flags)
            .arg(format!("--user-data-dir={}", profile.display()))
            .arg(extra)
            .arg(&url)
            .output()
            .unwrap()
    };
    // The DOM as the browser parsed it: the three plots are SVG elements with their marks.
    let dom = run("--dump-dom");
    assert!(dom.status.success(), "{}", String::from_utf8_lossy(&dom.stderr));
    let dom = String::from_utf8_lossy(&dom.stdout);
    assert_eq!(dom.matches("<svg").count(), 3, "{dom}");
    assert!(dom.contains("recommended 8") && dom.contains("<table>"), "{dom}");
    // And it paints: a screenshot of the page.
    let shot = dir.path().join("page.png");
    let painted = run(&format!("--screenshot={}", shot.display()));
    assert!(painted.status.success(), "{}", String::from_utf8_lossy(&painted.stderr));
    let png = std::fs::read(&shot).unwrap();
    assert!(png.starts_with(b"\x89PNG") && png.len() > 20_000, "{} bytes", png.len());
}

#[test]
fn completions_for_each_shell_and_an_example_in_every_help() {
    for shell in ["bash", "zsh", "fish"] {
        let out = vramprobe().args(["completions", shell]).output().unwrap();
        assert!(out.status.success(), "{shell}");
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(text.contains("sweep") && text.contains("--capacity") && text.contains("report"), "{shell}");
    }
    let bad = vramprobe().args(["completions", "tcsh"]).output().unwrap();
    assert_eq!(bad.status.code(), Some(2));
    for command in ["sweep", "train", "check", "plan", "report", "models", "devices", "completions"] {
        let out = vramprobe().args([command, "--help"]).output().unwrap();
        assert!(out.status.success(), "{command}");
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(text.contains("Example"), "{command} --help has no example");
    }
}
