//! How a step runs: its numeric precision and whether it trains or only
//! infers. Each (precision, mode) pair is its own sweep, table row and
//! plan.csv row, because memory differs a lot between them.
use serde::{Deserialize, Serialize};

/// Numeric precision of a step, as PyTorch users choose it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize, clap::ValueEnum)]
pub enum Precision {
    /// Everything in float32 (PyTorch's default).
    #[default]
    #[serde(rename = "fp32")]
    #[value(name = "fp32")]
    Fp32,
    /// Parameters, activations and optimizer state in bfloat16 (`model.bfloat16()`).
    #[serde(rename = "bf16")]
    #[value(name = "bf16")]
    Bf16,
    /// float32 parameters, float16 autocast in forward and the loss, a
    /// dynamic loss scale (`torch.autocast` + `GradScaler`).
    #[serde(rename = "fp16-amp")]
    #[value(name = "fp16-amp")]
    Fp16Amp,
    /// float32 parameters, bfloat16 autocast in forward and the loss (no scaling needed).
    #[serde(rename = "bf16-amp")]
    #[value(name = "bf16-amp")]
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

    /// Parses a plan.csv or profile value.
    pub fn parse(text: &str) -> Option<Precision> {
        [Precision::Fp32, Precision::Bf16, Precision::Fp16Amp, Precision::Bf16Amp]
            .into_iter()
            .find(|p| p.name() == text)
    }
}

/// The lower-precision type autocast runs eligible ops in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AutocastDtype {
    Half,
    BFloat16,
}

/// Training steps, or inference only.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// Forward, loss, backward and the optimizer step.
    #[default]
    Train,
    /// Forward only, without gradients, the model in eval mode: for inference batch sizes.
    Eval,
}

impl Mode {
    pub fn name(self) -> &'static str {
        match self {
            Mode::Train => "train",
            Mode::Eval => "eval",
        }
    }

    pub fn parse(text: &str) -> Option<Mode> {
        [Mode::Train, Mode::Eval].into_iter().find(|m| m.name() == text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for p in [Precision::Fp32, Precision::Bf16, Precision::Fp16Amp, Precision::Bf16Amp] {
            assert_eq!(Precision::parse(p.name()), Some(p));
            assert_eq!(serde_json::to_string(&p).unwrap(), format!("\"{}\"", p.name()));
        }
        for m in [Mode::Train, Mode::Eval] {
            assert_eq!(Mode::parse(m.name()), Some(m));
        }
        assert_eq!(Precision::parse("fp16"), None);
    }
}
