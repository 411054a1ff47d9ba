//! Following a trial's records files: the hook appends to one file per
//! measured process (`records.jsonl`, or `records-rank-R.jsonl` for each
//! rank of a distributed job), which appear while the trial runs.
use std::fs::File;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::time::Duration;

use super::ranks::Source;

/// One records file being followed.
struct Followed {
    source: Source,
    reader: BufReader<File>,
    /// Half a line: the rest is still being written.
    partial: String,
}

/// Sends each complete line of every records file in `dir` with its source,
/// until `exited` is set and everything written has been read.
pub fn follow(dir: &Path, exited: &AtomicBool, tx: &mpsc::Sender<(Source, String)>) {
    let mut files: Vec<Followed> = Vec::new();
    loop {
        // Read before looking: whatever was written before `exited` was set
        // is read in this pass.
        let done = exited.load(Ordering::SeqCst);
        for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
            let Some(source) = entry.file_name().to_str().and_then(Source::of_file) else { continue };
            if files.iter().any(|f| f.source == source) {
                continue;
            }
            if let Ok(file) = File::open(entry.path()) {
                files.push(Followed { source, reader: BufReader::new(file), partial: String::new() });
            }
        }
        let mut progressed = false;
        for f in &mut files {
            let mut line = String::new();
            while matches!(f.reader.read_line(&mut line), Ok(n) if n > 0) {
                progressed = true;
                f.partial.push_str(&line);
                line.clear();
                if f.partial.ends_with('\n') {
                    let complete = std::mem::take(&mut f.partial);
                    if tx.send((f.source, complete.trim_end().to_string())).is_err() {
                        return;
                    }
                }
            }
        }
        if done && !progressed {
            return;
        }
        if !progressed {
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}
