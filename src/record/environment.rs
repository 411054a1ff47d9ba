//! The machine a run measured on, as report.json keeps it (measure/environment.rs reads it).
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Environment {
    pub vramprobe_version: String,
    pub torch_version: String,
    pub tch_version: String,
    pub torch_cuda_version: Option<String>,
    pub nvidia_driver_version: Option<String>,
    pub cuda_driver_version: Option<String>,
    pub os: String,
    pub hostname: String,
    /// The CPU's model name: CPU peaks differ between CPU families (oneDNN
    /// picks other kernels and workspaces), so every CPU figure names it.
    #[serde(default)]
    pub cpu_model: String,
    pub cpu_threads: usize,
}

impl Environment {
    /// The machine in words, e.g. "AMD EPYC, 2 threads".
    pub fn machine(&self) -> String {
        format!("{}, {} threads", self.cpu_model, self.cpu_threads)
    }
}
