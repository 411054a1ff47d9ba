//! With the `builtin` feature: compiles the C++ shim in `csrc/` against the
//! libtorch that torch-sys found (handed to us as `DEP_TCH_LIBTORCH_LIB`,
//! torch-sys's `links = "tch"`), and links so that CUDA stays visible on GPU
//! hosts. Without it there is nothing to compile or link.
use std::env;
use std::path::PathBuf;

fn main() {
    println!("cargo:rerun-if-changed=csrc/vramprobe_shim.cpp");
    println!("cargo:rerun-if-changed=csrc/vramprobe_shim.h");
    println!("cargo:rerun-if-env-changed=DEP_TCH_LIBTORCH_LIB");
    println!("cargo:rerun-if-env-changed=VRAMPROBE_TCH_VERSION");
    // Recorded in report.json; scripts/build-gpu-kit sets 0.24.
    let tch = env::var("VRAMPROBE_TCH_VERSION").unwrap_or_else(|_| "0.26".into());
    println!("cargo:rustc-env=VRAMPROBE_TCH_VERSION={tch}");

    // Without the `builtin` feature nothing links libtorch: command mode only.
    if env::var_os("CARGO_FEATURE_BUILTIN").is_none() {
        return;
    }
    let Some(lib_dir) = env::var_os("DEP_TCH_LIBTORCH_LIB").map(PathBuf::from) else {
        panic!("torch-sys did not report its libtorch lib dir (DEP_TCH_LIBTORCH_LIB); run ./scripts/vramprobe or source scripts/env.sh first");
    };
    let include = lib_dir.join("..").join("include");
    cc::Build::new()
        .cpp(true)
        .pic(true)
        .warnings(false)
        .include(&include)
        .include(include.join("torch/csrc/api/include"))
        .flag("-std=c++17")
        .flag("-D_GLIBCXX_USE_CXX11_ABI=1")
        .file("csrc/vramprobe_shim.cpp")
        .compile("vramprobe_shim");

    // rustc passes --as-needed, which would drop libtorch_cuda.so (nothing
    // references it by symbol) and leave CUDA invisible on a GPU host.
    println!("cargo:rustc-link-search=native={}", lib_dir.display());
    println!("cargo:rustc-link-arg=-Wl,--no-as-needed");
    if lib_dir.join("libtorch_cuda.so").exists() {
        println!("cargo:rustc-link-arg=-ltorch_cuda");
    }
    println!("cargo:rustc-link-arg=-ltorch_cpu");
    println!("cargo:rustc-link-arg=-lc10");
    println!("cargo:rustc-link-arg=-Wl,-rpath,{}", lib_dir.display());
    println!("cargo:rustc-link-lib=dylib=torch_cpu");
    println!("cargo:rustc-link-lib=dylib=c10");
}
