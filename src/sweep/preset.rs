//! Workload presets for `sweep --profile` (`profiles/models/*.toml`: model,
//! input, classes, optimizer, learning rate, precision, mode): read here,
//! where the options they stand for are, with every error naming the file,
//! the line and the field.
use std::path::Path;

use serde::Deserialize;
use toml::Spanned;

use crate::analyze::profile::{line_of, parse, read, ProfileError, SpanOf};
use crate::record::workload::{Mode, OptimizerKind, Precision};
use crate::units;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawWorkload {
    model: Spanned<String>,
    input: Spanned<String>,
    classes: Spanned<i64>,
    mode: Spanned<String>,
    precision: Spanned<String>,
    optimizer: Spanned<String>,
    lr: Spanned<f64>,
}

/// A workload preset for `sweep --profile`.
#[derive(Debug, Clone, PartialEq)]
pub struct WorkloadProfile {
    pub model: String,
    pub input: Vec<i64>,
    pub classes: i64,
    pub optimizer: OptimizerKind,
    pub lr: f64,
    pub precision: Precision,
    pub mode: Mode,
}

pub fn parse_workload(path: &Path, text: &str) -> Result<WorkloadProfile, ProfileError> {
    let raw: RawWorkload = parse(path, text)?;
    let err = |name: &str, v: &dyn SpanOf, message: String| ProfileError {
        path: path.to_path_buf(),
        line: line_of(text, v.start()),
        field: Some(name.into()),
        message,
    };
    crate::measure::model::source(raw.model.get_ref()).map_err(|e| err("model", &raw.model, e.to_string()))?;
    let input = units::parse_input(raw.input.get_ref()).map_err(|e| err("input", &raw.input, e.to_string()))?;
    if *raw.classes.get_ref() < 1 {
        return Err(err("classes", &raw.classes, "must be at least 1".into()));
    }
    let mode = Mode::parse(raw.mode.get_ref())
        .ok_or_else(|| err("mode", &raw.mode, format!("'{}' is not one of train, eval", raw.mode.get_ref())))?;
    let precision = Precision::parse(raw.precision.get_ref()).ok_or_else(|| {
        err(
            "precision",
            &raw.precision,
            format!("'{}' is not one of fp32, bf16, fp16-amp, bf16-amp", raw.precision.get_ref()),
        )
    })?;
    let optimizer = match raw.optimizer.get_ref().as_str() {
        "sgd" => OptimizerKind::Sgd,
        "adam" => OptimizerKind::Adam,
        "adamw" => OptimizerKind::Adamw,
        other => return Err(err("optimizer", &raw.optimizer, format!("'{other}' is not one of sgd, adam, adamw"))),
    };
    let lr = *raw.lr.get_ref();
    if !(lr.is_finite() && lr > 0.0) {
        return Err(err("lr", &raw.lr, "must be a positive number".into()));
    }
    Ok(WorkloadProfile {
        model: raw.model.into_inner(),
        input,
        classes: *raw.classes.get_ref(),
        optimizer,
        lr,
        precision,
        mode,
    })
}

pub fn load_workload(path: &Path) -> Result<WorkloadProfile, ProfileError> {
    parse_workload(path, &read(path)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn malformed_workload_profiles_name_the_line_and_field() {
        let good = "model = \"resnet18\"\ninput = \"3x32x32\"\nclasses = 10\nmode = \"train\"\nprecision = \"fp32\"\noptimizer = \"sgd\"\nlr = 0.1\n";
        let p = Path::new("w.toml");
        assert_eq!(parse_workload(p, good).unwrap().input, vec![3, 32, 32]);
        let e = |t: String| parse_workload(p, &t).unwrap_err().to_string();
        assert!(e(good.replace("resnet18", "resnet19")).starts_with("w.toml:1: field model: unknown model"));
        assert!(e(good.replace("3x32x32", "3x32")).starts_with("w.toml:2: field input:"));
        assert_eq!(
            e(good.replace("\"fp32\"", "\"fp8\"")),
            "w.toml:5: field precision: 'fp8' is not one of fp32, bf16, fp16-amp, bf16-amp"
        );
        assert!(e(good.replace("0.1", "-0.1")).starts_with("w.toml:7: field lr:"));
    }
}
