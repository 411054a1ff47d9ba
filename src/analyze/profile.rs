//! GPU profiles (`profiles/gpus/*.toml`: memory and typical overhead, for
//! planning on a GPU you do not have): those shipped in the repository are
//! compiled into the binary; any path to a TOML file works too. Every error
//! names the file, the line and the field. (Workload presets, a command-line
//! matter, are read by sweep/preset.rs with the same helpers.)
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use toml::Spanned;

/// A profile file that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}: {}{message}", crate::error::file_line(.path, *.line as u64), .field.as_ref().map(|f| format!("field {f}: ")).unwrap_or_default())]
pub struct ProfileError {
    pub path: PathBuf,
    pub line: usize,
    pub field: Option<String>,
    pub message: String,
}

pub(crate) fn line_of(text: &str, offset: usize) -> usize {
    text[..offset.min(text.len())].matches('\n').count() + 1
}

/// The key on a line such as `memory_bytes = 12`.
fn key_on_line(text: &str, line: usize) -> Option<String> {
    let l = text.lines().nth(line.checked_sub(1)?)?;
    let (key, _) = l.split_once('=')?;
    Some(key.trim().to_string()).filter(|k| !k.is_empty() && !k.starts_with('#'))
}

pub(crate) fn parse<T: for<'de> Deserialize<'de>>(path: &Path, text: &str) -> Result<T, ProfileError> {
    toml::from_str(text).map_err(|e| {
        let line = e.span().map_or(1, |s| line_of(text, s.start));
        let message = e.message().to_string();
        // serde names a missing field itself; otherwise the span's line has the key.
        let field =
            if message.starts_with("missing field") { None } else { e.span().and_then(|_| key_on_line(text, line)) };
        ProfileError { path: path.to_path_buf(), line, field, message }
    })
}

fn field_error<T>(path: &Path, text: &str, name: &str, value: &Spanned<T>, message: String) -> ProfileError {
    ProfileError {
        path: path.to_path_buf(),
        line: line_of(text, value.span().start),
        field: Some(name.into()),
        message,
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawGpu {
    name: Spanned<String>,
    memory_bytes: Spanned<i64>,
    context_overhead_bytes: Spanned<i64>,
    overhead_source: Spanned<String>,
    #[serde(default)]
    cublas_workspace_bytes: Option<Spanned<i64>>,
    bf16: bool,
}

/// PyTorch's cuBLAS workspace before Hopper: `CUBLAS_WORKSPACE_CONFIG`'s
/// default `:4096:2:16:8` (2 x 4 MiB + 8 x 16 KiB), allocated through the
/// caching allocator on a thread's first matmul and kept
/// (aten/src/ATen/cuda/CublasHandlePool.cpp, `parseChosenWorkspaceSize`;
/// Hopper and later: `:4096:8`, 32 MiB). cuBLASLt shares it.
pub const DEFAULT_CUBLAS_WORKSPACE_BYTES: u64 = 2 * (4 << 20) + 8 * (16 << 10);

/// Threads that run matmuls in a training step on one GPU, each with its
/// own workspace: the forward's (the caller's) and the autograd engine's
/// device thread, which runs the backward.
const CUBLAS_THREADS: u64 = 2;

/// A GPU to plan for.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GpuProfile {
    /// The file name without `.toml`, e.g. `rtx3070`.
    pub id: String,
    pub name: String,
    pub memory_bytes: u64,
    /// Memory outside PyTorch's allocator: the CUDA context and library handles.
    pub context_overhead_bytes: u64,
    pub overhead_source: String,
    /// The cuBLAS workspace PyTorch allocates on the first matmul, in the
    /// caching allocator (a GPU run's reserved bytes hold it, a CPU trace
    /// does not) [default: [`DEFAULT_CUBLAS_WORKSPACE_BYTES`]].
    pub cublas_workspace_bytes: u64,
    pub bf16: bool,
}

impl GpuProfile {
    /// What the cuBLAS workspaces reserve: one per matmul thread, in the
    /// caching allocator's segments (under 10 MiB: 20 MiB segments they
    /// share; else each rounded up to 2 MiB).
    pub fn cublas_workspace_reserved_bytes(&self) -> u64 {
        const LARGE_SEGMENT: u64 = 20 << 20;
        let ws = self.cublas_workspace_bytes.div_ceil(512) * 512;
        match ws {
            0 => 0,
            ws if ws < 10 << 20 => CUBLAS_THREADS.div_ceil(LARGE_SEGMENT / ws) * LARGE_SEGMENT,
            ws => CUBLAS_THREADS * ws.div_ceil(2 << 20) * (2 << 20),
        }
    }
}

pub fn parse_gpu(path: &Path, text: &str) -> Result<GpuProfile, ProfileError> {
    let raw: RawGpu = parse(path, text)?;
    let positive = |name: &str, v: &Spanned<i64>, min: i64| {
        if *v.get_ref() < min {
            Err(field_error(path, text, name, v, format!("{} is not a valid byte count", v.get_ref())))
        } else {
            Ok(*v.get_ref() as u64)
        }
    };
    let memory_bytes = positive("memory_bytes", &raw.memory_bytes, 1)?;
    let context_overhead_bytes = positive("context_overhead_bytes", &raw.context_overhead_bytes, 0)?;
    let cublas_workspace_bytes = match &raw.cublas_workspace_bytes {
        Some(v) => positive("cublas_workspace_bytes", v, 0)?,
        None => DEFAULT_CUBLAS_WORKSPACE_BYTES,
    };
    if context_overhead_bytes >= memory_bytes {
        return Err(field_error(
            path,
            text,
            "context_overhead_bytes",
            &raw.context_overhead_bytes,
            "must be less than memory_bytes".into(),
        ));
    }
    for (name, v) in [("name", &raw.name), ("overhead_source", &raw.overhead_source)] {
        if v.get_ref().trim().is_empty() {
            return Err(field_error(path, text, name, v, "must not be empty".into()));
        }
    }
    let id = path.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
    Ok(GpuProfile {
        id,
        name: raw.name.into_inner(),
        memory_bytes,
        context_overhead_bytes,
        overhead_source: raw.overhead_source.into_inner(),
        cublas_workspace_bytes,
        bf16: raw.bf16,
    })
}

/// Where a spanned value starts, whatever its type.
pub(crate) trait SpanOf {
    fn start(&self) -> usize;
}

impl<T> SpanOf for Spanned<T> {
    fn start(&self) -> usize {
        self.span().start
    }
}

pub(crate) fn read(path: &Path) -> Result<String, ProfileError> {
    std::fs::read_to_string(path).map_err(|e| ProfileError {
        path: path.to_path_buf(),
        line: 0,
        field: None,
        message: format!("cannot read: {e}"),
    })
}

/// The GPU profiles compiled into the binary (the files in profiles/gpus).
const BUILT_IN_GPUS: [(&str, &str); 15] = [
    ("gtx1660ti", include_str!("../../profiles/gpus/gtx1660ti.toml")),
    ("rtx3060", include_str!("../../profiles/gpus/rtx3060.toml")),
    ("rtx3070", include_str!("../../profiles/gpus/rtx3070.toml")),
    ("rtx3090", include_str!("../../profiles/gpus/rtx3090.toml")),
    ("rtx4090", include_str!("../../profiles/gpus/rtx4090.toml")),
    ("t4", include_str!("../../profiles/gpus/t4.toml")),
    ("v100-16gb", include_str!("../../profiles/gpus/v100-16gb.toml")),
    ("v100-32gb", include_str!("../../profiles/gpus/v100-32gb.toml")),
    ("a10", include_str!("../../profiles/gpus/a10.toml")),
    ("l4", include_str!("../../profiles/gpus/l4.toml")),
    ("l40s", include_str!("../../profiles/gpus/l40s.toml")),
    ("a100-40gb", include_str!("../../profiles/gpus/a100-40gb.toml")),
    ("a100-80gb", include_str!("../../profiles/gpus/a100-80gb.toml")),
    ("h100-80gb", include_str!("../../profiles/gpus/h100-80gb.toml")),
    ("h200", include_str!("../../profiles/gpus/h200.toml")),
];

pub fn built_in_gpus() -> Result<Vec<GpuProfile>, ProfileError> {
    BUILT_IN_GPUS.iter().map(|(id, text)| parse_gpu(&PathBuf::from(format!("profiles/gpus/{id}.toml")), text)).collect()
}

/// `--gpu`: a built-in id, `all`, or a path to a TOML file.
pub fn resolve_gpus(spec: &str) -> Result<Vec<GpuProfile>, ProfileError> {
    if spec == "all" {
        return built_in_gpus();
    }
    if let Some((id, text)) = BUILT_IN_GPUS.iter().find(|(id, _)| *id == spec) {
        return Ok(vec![parse_gpu(&PathBuf::from(format!("profiles/gpus/{id}.toml")), text)?]);
    }
    let path = Path::new(spec);
    if path.exists() {
        return Ok(vec![parse_gpu(path, &read(path)?)?]);
    }
    let known: Vec<&str> = BUILT_IN_GPUS.iter().map(|(id, _)| *id).collect();
    Err(ProfileError {
        path: path.to_path_buf(),
        line: 0,
        field: None,
        message: format!("no such GPU profile; built in: {}, or all, or a path to a .toml file", known.join(", ")),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = "name = \"Test GPU\"\nmemory_bytes = 8589934592\ncontext_overhead_bytes = 536870912\noverhead_source = \"measured\"\nbf16 = true\n";

    fn gpu_error(text: &str) -> String {
        parse_gpu(Path::new("x.toml"), text).unwrap_err().to_string()
    }

    #[test]
    fn a_gpu_profile_parses() {
        let g = parse_gpu(Path::new("profiles/gpus/test.toml"), GOOD).unwrap();
        assert_eq!(
            (g.id.as_str(), g.memory_bytes, g.context_overhead_bytes, g.bf16),
            ("test", 8 << 30, 512 << 20, true)
        );
    }

    #[test]
    fn cublas_workspaces_reserve_by_the_allocator_s_segments() {
        let mut g = parse_gpu(Path::new("g.toml"), GOOD).unwrap();
        // Two 8.125 MiB workspaces share one 20 MiB segment.
        assert_eq!(g.cublas_workspace_bytes, DEFAULT_CUBLAS_WORKSPACE_BYTES);
        assert_eq!(g.cublas_workspace_reserved_bytes(), 20 << 20);
        g.cublas_workspace_bytes = 32 << 20;
        assert_eq!(g.cublas_workspace_reserved_bytes(), 64 << 20);
        g.cublas_workspace_bytes = 11 << 20;
        assert_eq!(g.cublas_workspace_reserved_bytes(), 24 << 20);
        g.cublas_workspace_bytes = 0;
        assert_eq!(g.cublas_workspace_reserved_bytes(), 0);
        let hopper = resolve_gpus("h100-80gb").unwrap().remove(0);
        assert_eq!(hopper.cublas_workspace_bytes, 32 << 20);
    }

    #[test]
    fn malformed_gpu_profiles_name_the_line_and_field() {
        assert!(
            gpu_error(&GOOD.replace("8589934592", "\"8GB\"")).starts_with("x.toml:2: field memory_bytes: invalid type")
        );
        assert_eq!(
            gpu_error(&GOOD.replace("536870912", "-1")),
            "x.toml:3: field context_overhead_bytes: -1 is not a valid byte count"
        );
        assert!(gpu_error(&GOOD.replace("bf16 = true\n", "")).contains("missing field `bf16`"));
        assert!(gpu_error(&format!("{GOOD}colour = 1\n")).starts_with("x.toml:6: field colour: unknown field"));
        assert!(gpu_error("name = \"x\nmemory").starts_with("x.toml:1:"));
        assert!(gpu_error(&GOOD.replace("536870912", "9999999999")).contains("less than memory_bytes"));
    }

    #[test]
    fn gpus_resolve_by_id_all_or_path() {
        assert_eq!(resolve_gpus("rtx3070").unwrap()[0].memory_bytes, 8 << 30);
        assert_eq!(resolve_gpus("all").unwrap().len(), 15);
        assert!(resolve_gpus("rtx9999").unwrap_err().to_string().contains("built in: gtx1660ti"));
    }
}
