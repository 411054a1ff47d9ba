//! Reading a sweep's `plan.csv` back, for the trainer: the schema version,
//! the required columns and their types are checked, and every error names
//! the file, the line and the column. Extra and reordered columns are fine,
//! so a plan saved back by a spreadsheet still loads.
use std::path::{Path, PathBuf};
use std::str::FromStr;

use crate::measure::command::{UserCommand, BATCH};
use crate::measure::device::DeviceRequest;
use crate::measure::optim::OptimizerKind;
use crate::measure::precision::{Mode, Precision};
use crate::report::csv::PLAN_SCHEMA_VERSION;
use crate::units;

/// The columns the trainer needs.
pub const REQUIRED: [&str; 7] =
    ["schema_version", "model", "input", "classes", "device", "optimizer", "recommended_batch"];

/// A plan file that cannot be used, with where and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}: {}{message}", crate::error::file_line(.path, *.line), .column.as_ref().map(|c| format!("column {c}: ")).unwrap_or_default())]
pub struct PlanError {
    pub path: PathBuf,
    pub line: u64,
    pub column: Option<String>,
    pub message: String,
}

/// One plan row, as the trainer uses it.
#[derive(Debug, Clone, PartialEq)]
pub struct PlanEntry {
    /// A command-mode row: the user's command, which the row was measured
    /// with (its model column holds the command; input, classes, optimizer,
    /// precision and mode are the command's own business).
    pub command: Option<UserCommand>,
    /// The line of the file it came from.
    pub line: u64,
    pub model: String,
    pub input: Vec<i64>,
    pub classes: i64,
    pub device: DeviceRequest,
    pub optimizer: OptimizerKind,
    pub precision: Precision,
    pub mode: Mode,
    pub recommended_batch: u64,
    /// The row's memory line, when it has one (optional columns).
    pub fixed_bytes: Option<i64>,
    pub per_sample_bytes: Option<i64>,
    /// A distributed command's ranks (its `{nproc}`); the batch is per rank.
    pub world_size: Option<u32>,
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
        fn parse<T: FromStr>(text: &str) -> Option<T> {
            text.parse().ok()
        }
        let version: u32 = parse(field("schema_version")).ok_or_else(|| {
            err(line, Some("schema_version"), format!("'{}' is not a whole number", field("schema_version")))
        })?;
        // Versions 2 and 3 only added columns at the end, so older plans still read.
        if !(1..=PLAN_SCHEMA_VERSION).contains(&version) {
            return Err(err(
                line,
                Some("schema_version"),
                format!("unknown schema version {version}: this vramprobe reads versions 1 to {PLAN_SCHEMA_VERSION}"),
            ));
        }
        let model = field("model").to_string();
        let recommended_batch: u64 = parse(field("recommended_batch")).filter(|&b| b >= 1).ok_or_else(|| {
            err(
                line,
                Some("recommended_batch"),
                format!("'{}' is not a batch size (a whole number of at least 1)", field("recommended_batch")),
            )
        })?;
        let device: DeviceRequest = field("device").parse().map_err(|e| err(line, Some("device"), format!("{e}")))?;
        let world_size: Option<u32> = match field("world_size") {
            "" => None,
            text => Some(parse(text).filter(|&w| w >= 1).ok_or_else(|| {
                err(line, Some("world_size"), format!("'{text}' is not a number of ranks (at least 1)"))
            })?),
        };
        if model.contains(BATCH) {
            let command = UserCommand::from_line(&model).map_err(|e| err(line, Some("model"), e.to_string()))?;
            // A sweep over --seq-lens gives each length its row.
            let input = match field("input") {
                "" => Vec::new(),
                text => units::parse_input(text).map_err(|e| err(line, Some("input"), e.to_string()))?,
            };
            entries.push(PlanEntry {
                command: Some(command),
                line,
                model,
                input,
                classes: 0,
                device,
                optimizer: OptimizerKind::Sgd,
                precision: Precision::Fp32,
                mode: Mode::Train,
                recommended_batch,
                fixed_bytes: None,
                per_sample_bytes: None,
                world_size,
            });
            continue;
        }
        crate::measure::model::source(&model).map_err(|e| err(line, Some("model"), e.to_string()))?;
        let input = units::parse_input(field("input")).map_err(|e| err(line, Some("input"), e.to_string()))?;
        let classes: i64 = parse(field("classes")).filter(|&c| c >= 1).ok_or_else(|| {
            err(line, Some("classes"), format!("'{}' is not a positive whole number", field("classes")))
        })?;
        let optimizer = match field("optimizer") {
            "sgd" => OptimizerKind::Sgd,
            "adam" => OptimizerKind::Adam,
            "adamw" => OptimizerKind::Adamw,
            other => return Err(err(line, Some("optimizer"), format!("'{other}' is not one of sgd, adam, adamw"))),
        };
        // Optional columns (plans from before mixed precision lack them).
        let precision = match field("precision") {
            "" => Precision::Fp32,
            text => Precision::parse(text).ok_or_else(|| {
                err(line, Some("precision"), format!("'{text}' is not one of fp32, bf16, fp16-amp, bf16-amp"))
            })?,
        };
        let mode = match field("mode") {
            "" => Mode::Train,
            text => Mode::parse(text)
                .ok_or_else(|| err(line, Some("mode"), format!("'{text}' is not one of train, eval")))?,
        };
        // Optional: the memory line, for "the largest batch the fit allows".
        let optional = |name: &str| -> Result<Option<i64>, PlanError> {
            match field(name) {
                "" => Ok(None),
                text => text
                    .parse()
                    .map(Some)
                    .map_err(|_| err(line, Some(name), format!("'{text}' is not a whole number of bytes"))),
            }
        };
        let fixed_bytes = optional("fixed_bytes")?;
        let per_sample_bytes = optional("per_sample_bytes")?;
        entries.push(PlanEntry {
            command: None,
            line,
            model,
            input,
            classes,
            device,
            optimizer,
            precision,
            mode,
            recommended_batch,
            fixed_bytes,
            per_sample_bytes,
            world_size,
        });
    }
    if entries.is_empty() {
        return Err(err(1, None, "no plan rows below the header".into()));
    }
    Ok(entries)
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
    match (row, model) {
        (Some(n), _) => entries
            .into_iter()
            .nth(n.wrapping_sub(1))
            .ok_or_else(|| err(format!("--row {n}: the plan has {count} row(s)"))),
        (None, Some(m)) => {
            entries.into_iter().find(|e| e.model == m).ok_or_else(|| err(format!("no plan row for model '{m}'")))
        }
        (None, None) if count == 1 => Ok(entries.into_iter().next().expect("one row")),
        (None, None) => {
            let models: Vec<String> = entries.iter().map(|e| e.model.clone()).collect();
            Err(err(format!("the plan has {count} rows ({}): choose one with --row N or --model M", models.join(", "))))
        }
    }
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
        assert_eq!((rows[0].model.as_str(), rows[0].recommended_batch, rows[0].line), ("resnet18", 48, 2));
        assert_eq!(rows[0].input, vec![3, 32, 32]);
    }

    #[test]
    fn spreadsheet_quirks_are_accepted() {
        // BOM, CRLF, quoted fields, reordered and extra columns.
        let text = "\u{FEFF}\"recommended_batch\",notes,schema_version,model,input,classes,device,optimizer\r\n\"48\",\"hello, world\",1,resnet18,3x32x32,10,cpu,sgd\r\n";
        let rows = read_text(text).unwrap();
        assert_eq!((rows[0].recommended_batch, rows[0].optimizer), (48, OptimizerKind::Sgd));
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
            "plan.csv:2: column schema_version: unknown schema version 7: this vramprobe reads versions 1 to 3"
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
        assert_eq!(select(p, rows.clone(), Some(2), None).unwrap().model, "alexnet");
        assert_eq!(select(p, rows.clone(), None, Some("resnet18")).unwrap().recommended_batch, 48);
        assert!(select(p, rows.clone(), None, None).unwrap_err().message.contains("choose one"));
        assert!(select(p, rows, Some(3), None).is_err());
    }
}
