//! Installing vramprobe the way PyTorch users install tools: the Python
//! wheel (pyproject.toml, maturin with `bindings = "bin"`), built from this
//! crate without its `builtin` feature, so with no libtorch at build or run
//! time, installed with pip into a fresh venv that sees the cached torch
//! (as a user's own environment has its torch), sweeps and checks a
//! command through the installed `vramprobe`; `cargo install --locked --path .`
//! builds the same binary without libtorch.
//!
//! Needs maturin (./scripts/test installs it into the cache and names it in
//! VRAMPROBE_MATURIN) and the cached torch with torchvision; without them
//! the test is counted as skipped. Builds the wheel into target/wheel (about
//! 2 minutes on 2 cores the first time).
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use crate::common;

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

fn run(command: &mut Command) -> Output {
    command.output().unwrap_or_else(|e| panic!("{command:?}: {e}"))
}

fn text(output: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr))
}

/// Builds the wheel with maturin, without libtorch in the environment.
fn build_wheel(maturin: &Path, out: &Path) -> PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR").map_or_else(|| Path::new(ROOT).join("target"), PathBuf::from);
    let built = run(Command::new(maturin)
        .args(["build", "--release", "--quiet", "--target-dir"])
        .arg(target.join("wheel"))
        .arg("--out")
        .arg(out)
        .current_dir(ROOT)
        .env_remove("LIBTORCH")
        .env_remove("LD_LIBRARY_PATH"));
    assert!(built.status.success(), "maturin build: {}", text(&built));
    let wheels: Vec<PathBuf> = std::fs::read_dir(out)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "whl"))
        .collect();
    assert_eq!(wheels.len(), 1, "{wheels:?}");
    wheels[0].clone()
}

#[test]
fn the_wheel_installs_a_vramprobe_without_libtorch_that_sweeps_and_checks_a_command() {
    let test = "the_wheel_installs_a_vramprobe_without_libtorch_that_sweeps_and_checks_a_command";
    let Some(torch_python) = common::torch_python(test) else { return };
    let maturin = std::env::var_os("VRAMPROBE_MATURIN").map(PathBuf::from).filter(|m| m.is_file());
    let Some(maturin) = maturin else {
        common::skip(test, "maturin is not installed (./scripts/test installs it and sets VRAMPROBE_MATURIN)");
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let wheel = build_wheel(&maturin, &dir.path().join("dist"));
    let name = wheel.file_name().unwrap().to_string_lossy().into_owned();
    assert!(name.starts_with("vramprobe-") && name.contains("-py3-none-"), "one wheel for every Python: {name}");

    // A fresh venv: the user's environment, whose torch is the cached one.
    let venv = dir.path().join("venv");
    let made = run(Command::new("python3").args(["-m", "venv"]).arg(&venv));
    assert!(made.status.success(), "{}", text(&made));
    let torch_site = run(Command::new(&torch_python)
        .args(["-c", "import os, torch; print(os.path.dirname(os.path.dirname(torch.__file__)))"]));
    let torch_site = String::from_utf8_lossy(&torch_site.stdout).trim().to_string();
    let probe =
        run(Command::new(venv.join("bin/python"))
            .args(["-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]));
    let site = PathBuf::from(String::from_utf8_lossy(&probe.stdout).trim());
    std::fs::write(site.join("users-torch.pth"), format!("{torch_site}\n")).unwrap();
    let installed =
        run(Command::new(venv.join("bin/pip")).args(["install", "--quiet", "--no-deps", "--no-index"]).arg(&wheel));
    assert!(installed.status.success(), "pip install: {}", text(&installed));

    // The installed command links no libtorch, and runs with none in sight.
    let vramprobe = venv.join("bin/vramprobe");
    let linked = run(Command::new("ldd").arg(&vramprobe));
    let linked = String::from_utf8_lossy(&linked.stdout).into_owned();
    assert!(!linked.contains("torch") && !linked.contains("libc10"), "{linked}");
    let installed_command = |args: &[&str]| {
        let mut command = Command::new(&vramprobe);
        // The venv activated: its bin first on the PATH.
        let path = std::env::join_paths(
            std::iter::once(venv.join("bin"))
                .chain(std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default())),
        )
        .unwrap();
        command.args(args).env_remove("LIBTORCH").env_remove("LD_LIBRARY_PATH").env("PATH", path);
        run(&mut command)
    };

    let python = venv.join("bin/python").to_string_lossy().into_owned();
    let script = format!("{ROOT}/examples/train_resnet18.py");
    let out = dir.path().join("run");
    let out_arg = out.to_string_lossy().into_owned();
    let sweep = installed_command(&[
        "sweep",
        "--device",
        "cpu",
        "--batches",
        "4,8",
        "--breakdown",
        "off",
        "--rehearsal",
        "off",
        "--out",
        &out_arg,
        "--",
        &python,
        &script,
        "--batch-size",
        "{batch}",
    ]);
    assert!(sweep.status.success(), "{}", text(&sweep));
    let plan = std::fs::read_to_string(out.join("plan.csv")).unwrap();
    let row: vramprobe::report::csv::PlanRow =
        csv::Reader::from_reader(plan.as_bytes()).deserialize().next().unwrap().unwrap();
    assert_eq!((row.max_batch, row.recommended_batch), (8, 8), "{plan}");
    let report: serde_json::Value = serde_json::from_slice(&std::fs::read(out.join("report.json")).unwrap()).unwrap();
    assert_eq!(report["environment"]["torch_version"], "not linked", "the command ran the user's own torch");

    let check = installed_command(&[
        "check",
        "--device",
        "cpu",
        "--batch",
        "8",
        "--",
        &python,
        &script,
        "--batch-size",
        "{batch}",
    ]);
    assert_eq!(check.status.code(), Some(0), "{}", text(&check));
    assert!(String::from_utf8_lossy(&check.stdout).starts_with("FITS: "), "{}", text(&check));

    // `cargo install --locked --path .` builds the same command-mode binary
    // with no libtorch in sight. In the wheel's build folder with the same
    // Cargo.lock it reuses maturin's build (without --locked, cargo install
    // resolves its own versions and compiled the crate again: 39 s here).
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let root = dir.path().join("cargo-root");
    let target = std::env::var_os("CARGO_TARGET_DIR").map_or_else(|| Path::new(ROOT).join("target"), PathBuf::from);
    let cargo_install = run(Command::new(cargo)
        .args(["install", "--locked", "--quiet", "--path", ROOT, "--root"])
        .arg(&root)
        .arg("--target-dir")
        .arg(target.join("wheel"))
        .env_remove("LIBTORCH")
        .env_remove("LD_LIBRARY_PATH"));
    assert!(cargo_install.status.success(), "cargo install: {}", text(&cargo_install));
    let linked = run(Command::new("ldd").arg(root.join("bin/vramprobe")));
    assert!(!String::from_utf8_lossy(&linked.stdout).contains("torch"), "{}", text(&linked));

    // The built-in models need libtorch: one line says how to get them.
    let built_in = installed_command(&["sweep", "--model", "resnet18"]);
    let said = String::from_utf8_lossy(&built_in.stderr).into_owned();
    assert_eq!(built_in.status.code(), Some(2), "{said}");
    assert_eq!(said.lines().count(), 1, "{said}");
    assert!(said.contains("built without the built-in models") && said.contains("--features builtin"), "{said}");
}
