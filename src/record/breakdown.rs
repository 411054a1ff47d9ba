//! What a step's peak is made of: bytes by category (parameters, gradients,
//! optimizer state, activations, temporaries, inputs, other) at the moment
//! the peak is reached, the phase and op that reach it, and the step's
//! memory timeline by category. The built-in trial fills it from the shim's
//! ledger (measure/breakdown.rs), the hook from torch's memory profile.
use serde::{Deserialize, Serialize};

/// What a byte at the peak is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Category {
    Parameters,
    Gradients,
    OptimizerState,
    /// Made in the forward pass and kept past it (saved for backward, the output, the loss).
    Activations,
    /// Made and freed within a phase: workspaces, autograd's intermediate gradients, optimizer scratch.
    Temporaries,
    Inputs,
    /// Held before the step and none of the above (buffers, RNG state), or not attributed.
    Other,
}

impl Category {
    /// Every category, in the order of the CSV, the table and the plot's stack.
    pub const ALL: [Category; 7] = [
        Category::Parameters,
        Category::Gradients,
        Category::OptimizerState,
        Category::Activations,
        Category::Temporaries,
        Category::Inputs,
        Category::Other,
    ];

    /// The name in the CSV and JSON files.
    pub fn id(self) -> &'static str {
        match self {
            Category::Parameters => "parameters",
            Category::Gradients => "gradients",
            Category::OptimizerState => "optimizer_state",
            Category::Activations => "activations",
            Category::Temporaries => "temporaries",
            Category::Inputs => "inputs",
            Category::Other => "other",
        }
    }

    /// The name a person reads.
    pub fn label(self) -> &'static str {
        match self {
            Category::Parameters => "parameters",
            Category::Gradients => "gradients",
            Category::OptimizerState => "optimizer state",
            Category::Activations => "activations",
            Category::Temporaries => "temporaries",
            Category::Inputs => "inputs",
            Category::Other => "other",
        }
    }

    /// Its place in [`Category::ALL`].
    pub fn index(self) -> usize {
        Category::ALL.iter().position(|&c| c == self).unwrap_or(Category::ALL.len() - 1)
    }
}

/// Bytes per category, in [`Category::ALL`]'s order.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CategoryBytes(pub [u64; 7]);

impl CategoryBytes {
    pub fn get(&self, c: Category) -> u64 {
        self.0[c.index()]
    }

    pub fn total(&self) -> u64 {
        self.0.iter().sum()
    }

    pub fn add(&mut self, c: Category, delta: i64) {
        let v = &mut self.0[c.index()];
        *v = (*v as i64 + delta).max(0) as u64;
    }
}

/// One point of a step's memory timeline: milliseconds since the step began
/// and the bytes held by category just after that moment.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct TimelinePoint(pub f64, pub CategoryBytes);

/// Where the categories come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Method {
    /// vramprobe's own allocation ledger over the tensors it built.
    Ledger,
    /// torch's memory profile (`torch.profiler._memory_profiler`) of the user's step.
    TorchMemoryProfile,
}

impl Method {
    pub fn id(self) -> &'static str {
        match self {
            Method::Ledger => "ledger",
            Method::TorchMemoryProfile => "torch-memory-profile",
        }
    }
}

/// The part of a training step a peak falls in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PeakPhase {
    Data,
    ZeroGrad,
    Forward,
    Backward,
    Optimizer,
    /// Outside every phase the profile tells apart (command mode).
    Other,
}

impl PeakPhase {
    pub fn name(self) -> &'static str {
        match self {
            PeakPhase::Data => "data",
            PeakPhase::ZeroGrad => "zero_grad",
            PeakPhase::Forward => "forward",
            PeakPhase::Backward => "backward",
            PeakPhase::Optimizer => "optimizer",
            PeakPhase::Other => "other",
        }
    }
}

impl std::fmt::Display for PeakPhase {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// A step's peak, broken down.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Breakdown {
    /// The step's measured peak; the categories sum to it exactly.
    pub peak_bytes: u64,
    pub bytes: CategoryBytes,
    /// The part of other that no record explains (made before the ledger
    /// began, or on a thread it does not see); 0 when every byte is known.
    #[serde(default)]
    pub unattributed_bytes: u64,
    /// The phase the peak is reached in.
    pub phase: Option<PeakPhase>,
    /// The op whose allocation reaches the peak (outermost op; an autograd node in backward).
    pub op: Option<String>,
    /// Command mode: the script's own line that runs that op, as `file:line`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
    /// Milliseconds from the step's start to the peak.
    pub peak_ms: f64,
    pub method: Method,
    /// At most [`TIMELINE_POINTS`] points; the peak is one of them. Kept for
    /// the trial's peak step only.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub timeline: Vec<TimelinePoint>,
}

/// How many points a timeline keeps (each a bucket's highest).
pub const TIMELINE_POINTS: usize = 240;
