//! plan.csv: the one row type ([`PlanRow`]) that the sweep and `plan`
//! write and that check, exec and train read back. Reading checks the
//! schema version, the required columns and every cell's type, and each
//! error names the file, the line and the column. Extra and reordered
//! columns are fine, so a plan saved back by a spreadsheet still loads;
//! columns newer than the file's version take their defaults.
use std::fmt::Display;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::analyze::analysis::{FitBasis, StrategyName};
use crate::record::device::{Device, DeviceRequest};
use crate::record::subject::{CommandSubject, Placeholders, Subject, SubjectKind, UserCommand};
use crate::record::workload::{Mode, OptimizerKind, Precision, WorkloadConfig};
use crate::units;

/// Version of the plan.csv columns; bump it when they change.
/// 2: added `fastest_batch` and `fastest_samples_per_second` at the end.
/// 3: added `world_size` and `global_batch` at the end (distributed commands).
/// 4: added `subject` at the end (built-in, torchscript or command); a
///    command's row leaves classes, mode, precision and optimizer empty.
pub const PLAN_SCHEMA_VERSION: u32 = 4;

/// The columns the trainer needs.
pub const REQUIRED: [&str; 7] =
    ["schema_version", "model", "input", "classes", "device", "optimizer", "recommended_batch"];

/// One recommendation: the contract with the companion trainer, check and
/// exec, and a spreadsheet's row. Empty cells are "not known" or "not true
/// of this subject" (a command's optimizer).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct PlanRow {
    pub schema_version: u32,
    /// The built-in model's name, the TorchScript file's path, or the command line.
    pub model: String,
    /// Channels x height x width (3x224x224) or a sequence length; empty
    /// when a command decides its own input.
    #[serde(with = "input_cell")]
    pub input: Vec<i64>,
    pub classes: Option<i64>,
    /// cpu or cuda:N.
    #[serde(with = "text_cell")]
    pub device: DeviceRequest,
    pub device_name: String,
    pub mode: Option<Mode>,
    pub precision: Option<Precision>,
    pub optimizer: Option<OptimizerKind>,
    pub capacity_bytes: u64,
    pub margin_fraction: f64,
    pub non_pytorch_bytes: u64,
    pub budget_bytes: u64,
    /// peak_allocated (CPU) or peak_reserved (CUDA).
    pub fit_basis: Option<FitBasis>,
    pub fixed_bytes: Option<i64>,
    pub per_sample_bytes: Option<i64>,
    pub r2: Option<f64>,
    pub fit_points: usize,
    /// How the row's batch was found: a search, or a prediction.
    #[serde(with = "opt_text_cell")]
    pub strategy: Option<PlanStrategy>,
    pub trials: usize,
    /// The largest batch the search verified (0: nothing fits).
    pub max_batch: u64,
    /// max_batch fits and max_batch + 1 does not (or it is --max-batch).
    #[serde(deserialize_with = "bool_cell")]
    pub exact: bool,
    /// The largest batch the fit allows within the budget (a prediction).
    pub predicted_max_batch: Option<u64>,
    pub recommended_batch: u64,
    #[serde(deserialize_with = "bool_cell")]
    pub recommended_verified: bool,
    pub recommended_peak_bytes: Option<i64>,
    pub headroom_bytes: Option<i64>,
    /// The smallest measured batch within 5% of the best samples/s (measured).
    pub fastest_batch: Option<u64>,
    pub fastest_samples_per_second: Option<f64>,
    /// A distributed command's ranks; batches are then per rank.
    pub world_size: Option<u32>,
    /// The recommended batch of the whole job: per rank x world size.
    pub global_batch: Option<u64>,
    /// What the row measured (from version 4; older rows are read by their model column).
    pub subject: SubjectKind,
}

/// How a plan row's batch was found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PlanStrategy {
    /// Measured by a sweep with this search (or `--batches`).
    Measured(StrategyName),
    /// `vramprobe plan`: predicted for a GPU from a run on this device.
    PredictedFrom(Device),
    /// `--world-sizes`: predicted for a world size that was not run.
    PredictedForWorldSize,
}

impl Display for PlanStrategy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PlanStrategy::Measured(s) => write!(f, "{s}"),
            PlanStrategy::PredictedFrom(d) => write!(f, "predicted-from-{d}"),
            PlanStrategy::PredictedForWorldSize => f.write_str("predicted-for-world-size"),
        }
    }
}

impl FromStr for PlanStrategy {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        if text == "predicted-for-world-size" {
            return Ok(PlanStrategy::PredictedForWorldSize);
        }
        if let Some(device) = text.strip_prefix("predicted-from-") {
            return Device::try_from(device.to_string()).map(PlanStrategy::PredictedFrom).map_err(|e| e.to_string());
        }
        StrategyName::try_from(text.to_string()).map(PlanStrategy::Measured)
    }
}

impl PlanRow {
    /// The workload a built-in or TorchScript row was measured with (the
    /// plan does not keep the learning rate: `lr` is the caller's).
    pub fn workload(&self, lr: f64) -> Option<WorkloadConfig> {
        if self.subject == SubjectKind::Command {
            return None;
        }
        Some(WorkloadConfig {
            model: self.model.clone(),
            input: self.input.clone(),
            classes: self.classes?,
            optimizer: self.optimizer?,
            lr,
            precision: self.precision.unwrap_or_default(),
            mode: self.mode.unwrap_or_default(),
        })
    }

    /// A command row's command, at the row's sequence length and world size.
    pub fn command(&self) -> Option<CommandSubject> {
        if self.subject != SubjectKind::Command {
            return None;
        }
        let at = Placeholders { seq_len: self.input.first().copied(), nproc: self.world_size };
        Some(CommandSubject::new(UserCommand::from_line(&self.model).ok()?, at))
    }

    /// The subject the row was measured with.
    pub fn subject(&self, lr: f64) -> Option<Subject> {
        match self.subject {
            SubjectKind::BuiltIn => self.workload(lr).map(Subject::BuiltIn),
            SubjectKind::TorchScript => self.workload(lr).map(Subject::TorchScript),
            SubjectKind::Command => self.command().map(Subject::Command),
        }
    }
}

/// Cells read and written through a type's text form.
mod text_cell {
    use super::*;

    pub fn serialize<T: Display, S: serde::Serializer>(value: &T, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(value)
    }

    pub fn deserialize<'de, T: FromStr, D: serde::Deserializer<'de>>(d: D) -> Result<T, D::Error>
    where
        T::Err: Display,
    {
        let text = String::deserialize(d)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

/// The same, with an empty cell for `None`.
mod opt_text_cell {
    use super::*;

    pub fn serialize<T: Display, S: serde::Serializer>(value: &Option<T>, s: S) -> Result<S::Ok, S::Error> {
        match value {
            Some(v) => s.collect_str(v),
            None => s.serialize_str(""),
        }
    }

    pub fn deserialize<'de, T: FromStr, D: serde::Deserializer<'de>>(d: D) -> Result<Option<T>, D::Error>
    where
        T::Err: Display,
    {
        match String::deserialize(d)?.as_str() {
            "" => Ok(None),
            text => text.parse().map(Some).map_err(serde::de::Error::custom),
        }
    }
}

/// An input shape as `3x224x224`, empty when unknown.
mod input_cell {
    use super::*;

    pub fn serialize<S: serde::Serializer>(input: &[i64], s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&units::format_input(input))
    }

    pub fn deserialize<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Vec<i64>, D::Error> {
        match String::deserialize(d)?.as_str() {
            "" => Ok(Vec::new()),
            text => units::parse_input(text).map_err(serde::de::Error::custom),
        }
    }
}

/// true/false as a spreadsheet may save them (TRUE, False).
fn bool_cell<'de, D: serde::Deserializer<'de>>(d: D) -> Result<bool, D::Error> {
    let text = String::deserialize(d)?;
    match text.to_ascii_lowercase().as_str() {
        "true" => Ok(true),
        "false" | "" => Ok(false),
        _ => Err(serde::de::Error::custom(format!("'{text}' is not true or false"))),
    }
}

/// A plan file that cannot be used, with where and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}: {}{message}", crate::error::file_line(.path, *.line), .column.as_ref().map(|c| format!("column {c}: ")).unwrap_or_default())]
pub struct PlanError {
    pub path: PathBuf,
    pub line: u64,
    pub column: Option<String>,
    pub message: String,
}

/// One row as read, with the line it came from (for messages).
#[derive(Debug, Clone, PartialEq)]
pub struct PlanEntry {
    pub line: u64,
    pub row: PlanRow,
}

/// Reads every row of a plan file.
pub fn read(path: &Path) -> Result<Vec<PlanEntry>, PlanError> {
    let bytes = std::fs::read(path).map_err(|e| PlanError {
        path: path.to_path_buf(),
        line: 0,
        column: None,
        message: format!("cannot read the plan: {e}"),
    })?;
    parse(path, &bytes)
}

/// What a column holds, for "'x' is not ..." messages.
fn expected(column: &str) -> &'static str {
    match column {
        "schema_version" => "a whole number",
        "recommended_batch" | "max_batch" => "a batch size (a whole number of at least 1)",
        "classes" => "a positive whole number",
        "optimizer" => "one of sgd, adam, adamw",
        "precision" => "one of fp32, bf16, fp16-amp, bf16-amp",
        "mode" => "one of train, eval",
        "world_size" => "a number of ranks (at least 1)",
        "subject" => "one of built-in, torchscript, command",
        c if c.ends_with("_bytes") => "a whole number of bytes",
        _ => "a value of this column",
    }
}

/// The column whose cell does not read as its type: each cell read on its
/// own (serde's own errors do not say which field they came from).
fn failing_column(headers: &csv::StringRecord, record: &csv::StringRecord) -> Option<String> {
    headers
        .iter()
        .zip(record.iter())
        .find(|(name, cell)| {
            let one = csv::StringRecord::from(vec![*cell]);
            one.deserialize::<PlanRow>(Some(&csv::StringRecord::from(vec![*name]))).is_err()
        })
        .map(|(name, _)| name.to_string())
}

/// Parses a plan's bytes; `path` names the file in errors. Pure (and fuzzed).
pub fn parse(path: &Path, bytes: &[u8]) -> Result<Vec<PlanEntry>, PlanError> {
    let err = |line: u64, column: Option<&str>, message: String| PlanError {
        path: path.to_path_buf(),
        line,
        column: column.map(str::to_string),
        message,
    };
    // A spreadsheet may save a UTF-8 byte-order mark in front of the header.
    let bytes = bytes.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(bytes);
    let mut reader = csv::ReaderBuilder::new().trim(csv::Trim::All).from_reader(bytes);
    let headers = reader.headers().map_err(|e| err(1, None, format!("unreadable header: {e}")))?.clone();
    if headers.is_empty() || headers.iter().all(str::is_empty) {
        return Err(err(1, None, "the file is empty: expected a header row and at least one plan row".into()));
    }
    let index = |name: &str| headers.iter().position(|h| h == name);
    for name in REQUIRED {
        if index(name).is_none() {
            return Err(err(1, Some(name), "missing column (is this a vramprobe plan.csv?)".into()));
        }
    }
    let mut entries = Vec::new();
    for record in reader.records() {
        let record = record.map_err(|e| {
            let line = e.position().map_or(0, |p| p.line());
            err(line, None, format!("malformed CSV: {e}"))
        })?;
        let line = record.position().map_or(0, |p| p.line());
        let field = |name: &str| index(name).and_then(|i| record.get(i)).unwrap_or("");
        let not = |name: &str| err(line, Some(name), format!("'{}' is not {}", field(name), expected(name)));
        // The version first: it says how to read the rest.
        let version: u32 = field("schema_version").parse().map_err(|_| not("schema_version"))?;
        if !(1..=PLAN_SCHEMA_VERSION).contains(&version) {
            return Err(err(
                line,
                Some("schema_version"),
                format!("unknown schema version {version}: this vramprobe reads versions 1 to {PLAN_SCHEMA_VERSION}"),
            ));
        }
        let mut row: PlanRow =
            record.deserialize(Some(&headers)).map_err(|e| match failing_column(&headers, &record) {
                Some(name) => not(&name),
                None => err(line, None, e.to_string()),
            })?;
        check_row(&mut row, index("subject").is_some(), line, &not, &err)?;
        entries.push(PlanEntry { line, row });
    }
    if entries.is_empty() {
        return Err(err(1, None, "no plan rows below the header".into()));
    }
    Ok(entries)
}

/// A parsed row's own checks: its subject (told by its {batch} before
/// version 4), its batch and world size, and what a model's row needs.
fn check_row(
    row: &mut PlanRow,
    has_subject: bool,
    line: u64,
    not: &dyn Fn(&str) -> PlanError,
    err: &dyn Fn(u64, Option<&str>, String) -> PlanError,
) -> Result<(), PlanError> {
    // Before version 4 a command's row was told by its {batch}.
    if !has_subject {
        row.subject = if row.model.contains(crate::record::subject::BATCH) {
            SubjectKind::Command
        } else if crate::record::subject::is_path(&row.model) {
            SubjectKind::TorchScript
        } else {
            SubjectKind::BuiltIn
        };
    }
    // 0 only where the sweep found nothing that fits (select refuses it).
    if row.recommended_batch < 1 && !(row.recommended_batch == 0 && row.max_batch == 0) {
        return Err(not("recommended_batch"));
    }
    if row.world_size == Some(0) {
        return Err(not("world_size"));
    }
    match row.subject {
        SubjectKind::Command => {
            UserCommand::from_line(&row.model).map_err(|e| err(line, Some("model"), e.to_string()))?;
        }
        SubjectKind::BuiltIn | SubjectKind::TorchScript => {
            crate::measure::model::source(&row.model).map_err(|e| err(line, Some("model"), e.to_string()))?;
            if row.input.is_empty() {
                return Err(err(line, Some("input"), "empty: a model's row needs its input shape".into()));
            }
            if row.classes.is_none_or(|c| c < 1) {
                return Err(not("classes"));
            }
            if row.optimizer.is_none() {
                return Err(not("optimizer"));
            }
        }
    }
    Ok(())
}

/// Picks the row to train: `--row N` (1-based), else the first row for
/// `--model`, else the only row.
pub fn select(
    path: &Path,
    entries: Vec<PlanEntry>,
    row: Option<usize>,
    model: Option<&str>,
) -> Result<PlanEntry, PlanError> {
    let err = |message: String| PlanError { path: path.to_path_buf(), line: 0, column: None, message };
    let count = entries.len();
    let chosen = match (row, model) {
        (Some(n), _) => entries
            .into_iter()
            .nth(n.wrapping_sub(1))
            .ok_or_else(|| err(format!("--row {n}: the plan has {count} row(s)"))),
        (None, Some(m)) => {
            entries.into_iter().find(|e| e.row.model == m).ok_or_else(|| err(format!("no plan row for model '{m}'")))
        }
        (None, None) if count == 1 => entries.into_iter().next().ok_or_else(|| err("no plan rows".into())),
        (None, None) => {
            let models: Vec<String> = entries.iter().map(|e| e.row.model.clone()).collect();
            Err(err(format!("the plan has {count} rows ({}): choose one with --row N or --model M", models.join(", "))))
        }
    }?;
    if chosen.row.recommended_batch == 0 {
        return Err(PlanError {
            path: path.to_path_buf(),
            line: chosen.line,
            column: Some("recommended_batch".into()),
            message: "0: the sweep found no batch that fits (max_batch 0), so there is nothing to run".into(),
        });
    }
    Ok(chosen)
}

#[cfg(test)]
mod tests {
    use super::*;

    const HEADER: &str = "schema_version,model,input,classes,device,optimizer,recommended_batch";

    fn read_text(text: &str) -> Result<Vec<PlanEntry>, PlanError> {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("plan.csv");
        std::fs::write(&path, text).unwrap();
        read(&path)
    }

    fn message(text: &str) -> String {
        let e = read_text(text).unwrap_err();
        format!("plan.csv:{}: {}{}", e.line, e.column.map(|c| format!("column {c}: ")).unwrap_or_default(), e.message)
    }

    #[test]
    fn a_sweep_plan_row_reads_back() {
        let rows = read_text(&format!("{HEADER}\n1,resnet18,3x32x32,10,cpu,adam,48\n")).unwrap();
        assert_eq!(rows.len(), 1);
        assert_eq!((rows[0].row.model.as_str(), rows[0].row.recommended_batch, rows[0].line), ("resnet18", 48, 2));
        assert_eq!(rows[0].row.input, vec![3, 32, 32]);
        assert_eq!(rows[0].row.subject, SubjectKind::BuiltIn);
    }

    #[test]
    fn spreadsheet_quirks_are_accepted() {
        // BOM, CRLF, quoted fields, reordered and extra columns.
        let text = "\u{FEFF}\"recommended_batch\",notes,schema_version,model,input,classes,device,optimizer\r\n\"48\",\"hello, world\",1,resnet18,3x32x32,10,cpu,sgd\r\n";
        let rows = read_text(text).unwrap();
        assert_eq!((rows[0].row.recommended_batch, rows[0].row.optimizer), (48, Some(OptimizerKind::Sgd)));
    }

    #[test]
    fn errors_name_the_line_and_column() {
        assert_eq!(
            message("schema_version,model,input,classes,device,optimizer\n1,resnet18,3x32x32,10,cpu,adam\n"),
            "plan.csv:1: column recommended_batch: missing column (is this a vramprobe plan.csv?)"
        );
        assert_eq!(
            message(&format!("{HEADER}\n1,resnet18,3x32x32,10,cpu,adam,48\n1,resnet18,3x32x32,10,cpu,adam,many\n")),
            "plan.csv:3: column recommended_batch: 'many' is not a batch size (a whole number of at least 1)"
        );
        assert_eq!(
            message(&format!("{HEADER}\n7,resnet18,3x32x32,10,cpu,adam,48\n")),
            "plan.csv:2: column schema_version: unknown schema version 7: this vramprobe reads versions 1 to 4"
        );
        assert!(message(&format!("{HEADER}\n1,resnet18,3x32x32,0,cpu,adam,48\n")).contains("column classes"));
        assert!(message(&format!("{HEADER}\n1,resnet18,3x32x32,10,cpu,adam,-4\n")).contains("column recommended_batch"));
        assert!(message(&format!("{HEADER}\n1,resnet18,3x32,10,cpu,adam,4\n")).contains("column input"));
        assert!(
            message(&format!("{HEADER}\n1,resnet99,3x32x32,10,cpu,adam,4\n")).contains("column model: unknown model")
        );
        assert!(message("").contains("empty"));
        assert!(message(&format!("{HEADER}\n")).contains("no plan rows"));
    }

    #[test]
    fn rows_are_selected_by_number_or_model() {
        let rows =
            read_text(&format!("{HEADER}\n1,resnet18,3x32x32,10,cpu,adam,48\n1,alexnet,3x224x224,10,cpu,sgd,8\n"))
                .unwrap();
        let p = Path::new("plan.csv");
        assert_eq!(select(p, rows.clone(), Some(2), None).unwrap().row.model, "alexnet");
        assert_eq!(select(p, rows.clone(), None, Some("resnet18")).unwrap().row.recommended_batch, 48);
        assert!(select(p, rows.clone(), None, None).unwrap_err().message.contains("choose one"));
        assert!(select(p, rows, Some(3), None).is_err());
    }

    /// A row of every kind the sweep and `plan` write, with every column set.
    fn rows_of_every_kind() -> Vec<PlanRow> {
        use crate::analyze::search::StrategyKind;
        let dir = tempfile::Builder::new().prefix("vramprobe-plan-roundtrip-").tempdir().unwrap().keep();
        let script = dir.join("net.pt");
        std::fs::write(&script, b"not read here").unwrap();
        let built_in = PlanRow {
            schema_version: PLAN_SCHEMA_VERSION,
            model: "resnet18".into(),
            input: vec![3, 32, 32],
            classes: Some(10),
            device: DeviceRequest::Cpu,
            device_name: "Intel(R) Xeon(R), 2 threads".into(),
            mode: Some(Mode::Train),
            precision: Some(Precision::Bf16Amp),
            optimizer: Some(OptimizerKind::Adam),
            capacity_bytes: 1 << 30,
            margin_fraction: 0.1,
            non_pytorch_bytes: 12_345,
            budget_bytes: 900_000_000,
            fit_basis: Some(FitBasis::PeakAllocated),
            fixed_bytes: Some(123_456_789),
            per_sample_bytes: Some(2_345_678),
            r2: Some(0.999_987_654_321),
            fit_points: 5,
            strategy: Some(PlanStrategy::Measured(StrategyName::Search(StrategyKind::Vramprobe))),
            trials: 7,
            max_batch: 321,
            exact: true,
            predicted_max_batch: Some(322),
            recommended_batch: 320,
            recommended_verified: true,
            recommended_peak_bytes: Some(876_543_210),
            headroom_bytes: Some(-5),
            fastest_batch: Some(64),
            fastest_samples_per_second: Some(1234.5678),
            world_size: None,
            global_batch: None,
            subject: SubjectKind::BuiltIn,
        };
        let torchscript = PlanRow {
            model: script.display().to_string(),
            subject: SubjectKind::TorchScript,
            strategy: Some(PlanStrategy::Measured(StrategyName::ListedBatches)),
            ..built_in.clone()
        };
        let command = PlanRow {
            model: "python train.py --batch-size '{batch}' --note 'a b'".into(),
            input: Vec::new(),
            classes: None,
            mode: None,
            precision: None,
            optimizer: None,
            subject: SubjectKind::Command,
            ..built_in.clone()
        };
        let seq_len = PlanRow {
            model: "python gpt.py --batch-size {batch} --seq-len {seq_len}".into(),
            input: vec![512],
            ..command.clone()
        };
        let world_size = PlanRow {
            model: "torchrun --nproc-per-node {nproc} ddp.py --batch-size {batch}".into(),
            strategy: Some(PlanStrategy::PredictedForWorldSize),
            r2: None,
            fit_points: 0,
            world_size: Some(4),
            global_batch: Some(1280),
            ..command.clone()
        };
        let gpu = PlanRow {
            device: DeviceRequest::Cuda(0),
            device_name: "NVIDIA H100 80GB HBM3".into(),
            strategy: Some(PlanStrategy::PredictedFrom(Device::Cpu)),
            recommended_verified: false,
            exact: false,
            fit_basis: Some(FitBasis::PeakReserved),
            ..built_in.clone()
        };
        let nothing_fits = PlanRow {
            max_batch: 0,
            recommended_batch: 0,
            predicted_max_batch: None,
            fixed_bytes: None,
            per_sample_bytes: None,
            r2: None,
            ..built_in.clone()
        };
        vec![built_in, torchscript, command, seq_len, world_size, gpu, nothing_fits]
    }

    #[test]
    fn every_kind_of_row_reads_back_as_written() {
        let rows = rows_of_every_kind();
        let mut writer = ::csv::Writer::from_writer(Vec::new());
        rows.iter().for_each(|r| writer.serialize(r).unwrap());
        let bytes = writer.into_inner().unwrap();
        let back: Vec<PlanRow> = parse(Path::new("plan.csv"), &bytes).unwrap().into_iter().map(|e| e.row).collect();
        assert_eq!(back, rows);
        // Each kind's subject comes back whole: a command's without invented fields.
        let command = back[4].subject(1e-3).unwrap();
        assert_eq!(command.command().unwrap().world_size, Some(4));
        assert!(command.workload().is_none());
        assert_eq!(back[3].subject(1e-3).unwrap().seq_len(), Some(512));
        assert_eq!(back[1].subject(1e-3).unwrap().kind(), SubjectKind::TorchScript);
        // A command's row has empty cells where the command decides.
        let text = String::from_utf8(bytes).unwrap();
        let command_line = text.lines().nth(3).unwrap();
        assert!(command_line.contains(",,cpu,"), "{command_line}");
    }

    #[test]
    fn a_row_where_nothing_fits_reads_but_is_not_run() {
        let rows = read_text(&format!("{HEADER},max_batch\n1,resnet18,3x32x32,10,cpu,adam,0,0\n")).unwrap();
        let e = select(Path::new("plan.csv"), rows, None, None).unwrap_err();
        assert!(e.to_string().contains("no batch that fits"), "{e}");
    }

    #[test]
    fn a_version_3_command_row_reads_as_a_command() {
        let text = format!(
            "{HEADER},precision,mode\n3,python train.py --bs {{batch}},,0,cpu,,16,,\n3,resnet18,3x32x32,10,cpu,sgd,8,fp32,train\n"
        );
        let rows = read_text(&text).unwrap();
        assert_eq!(rows[0].row.subject, SubjectKind::Command);
        assert_eq!(rows[0].row.command().unwrap().command.argv, ["python", "train.py", "--bs", "{batch}"]);
        assert_eq!(rows[1].row.subject, SubjectKind::BuiltIn);
    }
}
