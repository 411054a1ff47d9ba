//! What vramprobe trains: the workload (model, input, classes, optimizer,
//! learning rate), its numeric precision and whether it trains or only
//! infers. Each (precision, mode) pair is its own sweep, table row and
//! plan.csv row, because memory differs a lot between them.
use serde::{Deserialize, Serialize};

/// What to train and how.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WorkloadConfig {
    pub model: String,
    /// Channels x height x width.
    pub input: Vec<i64>,
    pub classes: i64,
    pub optimizer: OptimizerKind,
    pub lr: f64,
    #[serde(default)]
    pub precision: Precision,
    #[serde(default)]
    pub mode: Mode,
}

/// The optimizers a sweep can train with, with PyTorch's default settings
/// (SGD with momentum 0.9, the common training recipe).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OptimizerKind {
    Sgd,
    Adam,
    Adamw,
}

impl OptimizerKind {
    pub const ALL: [OptimizerKind; 3] = [OptimizerKind::Sgd, OptimizerKind::Adam, OptimizerKind::Adamw];

    pub fn name(self) -> &'static str {
        match self {
            OptimizerKind::Sgd => "sgd",
            OptimizerKind::Adam => "adam",
            OptimizerKind::Adamw => "adamw",
        }
    }
}

/// Numeric precision of a step, as PyTorch users choose it.
/// Its names (`fp32`, `bf16`, `fp16-amp`, `bf16-amp`) come from the variants,
/// kebab-cased alike by serde and [`Precision::name`] (commands/cli.rs offers the same names).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Precision {
    /// Everything in float32 (PyTorch's default).
    #[default]
    Fp32,
    /// Parameters, activations and optimizer state in bfloat16 (`model.bfloat16()`).
    Bf16,
    /// float32 parameters, float16 autocast in forward and the loss, a
    /// dynamic loss scale (`torch.autocast` + `GradScaler`).
    Fp16Amp,
    /// float32 parameters, bfloat16 autocast in forward and the loss (no scaling needed).
    Bf16Amp,
}

impl Precision {
    pub fn name(self) -> &'static str {
        match self {
            Precision::Fp32 => "fp32",
            Precision::Bf16 => "bf16",
            Precision::Fp16Amp => "fp16-amp",
            Precision::Bf16Amp => "bf16-amp",
        }
    }

    /// The autocast dtype, for the mixed-precision modes.
    pub fn autocast(self) -> Option<AutocastDtype> {
        match self {
            Precision::Fp16Amp => Some(AutocastDtype::Half),
            Precision::Bf16Amp => Some(AutocastDtype::BFloat16),
            Precision::Fp32 | Precision::Bf16 => None,
        }
    }

    pub const ALL: [Precision; 4] = [Precision::Fp32, Precision::Bf16, Precision::Fp16Amp, Precision::Bf16Amp];

    /// Parses a plan.csv or profile value.
    pub fn parse(text: &str) -> Option<Precision> {
        Precision::ALL.into_iter().find(|p| p.name() == text)
    }
}

/// The lower-precision type autocast runs eligible ops in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AutocastDtype {
    Half,
    BFloat16,
}

/// Training steps, or inference only.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// Forward, loss, backward and the optimizer step.
    #[default]
    Train,
    /// Forward only, without gradients, the model in eval mode: for inference batch sizes.
    Eval,
}

impl Mode {
    pub const ALL: [Mode; 2] = [Mode::Train, Mode::Eval];

    pub fn name(self) -> &'static str {
        match self {
            Mode::Train => "train",
            Mode::Eval => "eval",
        }
    }

    pub fn parse(text: &str) -> Option<Mode> {
        Mode::ALL.into_iter().find(|m| m.name() == text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        let names: Vec<&str> = Precision::ALL.iter().map(|p| p.name()).collect();
        assert_eq!(names, ["fp32", "bf16", "fp16-amp", "bf16-amp"]);
        for p in Precision::ALL {
            // One name per precision, whoever reads or writes it.
            assert_eq!(Precision::parse(p.name()), Some(p));
            assert_eq!(serde_json::to_string(&p).unwrap(), format!("\"{}\"", p.name()));
        }
        for m in [Mode::Train, Mode::Eval] {
            assert_eq!(Mode::parse(m.name()), Some(m));
        }
        assert_eq!(Precision::parse("fp16"), None);
    }
}
