//! `vramprobe models` and `vramprobe devices`.
use anyhow::Result;
use comfy_table::{presets::UTF8_FULL_CONDENSED, Table};
use serde::Serialize;

use crate::commands::cli::ListArgs;
use crate::measure::{device, model};
use crate::units::{format_input, human_bytes};

#[derive(Serialize)]
struct ModelLine {
    name: &'static str,
    family: &'static str,
    input: String,
    classes: i64,
    /// Counted by building the model: only where libtorch is linked.
    parameters: Option<i64>,
}

pub fn models(args: ListArgs) -> Result<i32> {
    let lines: Vec<ModelLine> = model::all()
        .iter()
        .map(|m| ModelLine {
            name: m.name,
            family: m.family,
            input: format_input(m.default_input),
            classes: m.default_classes,
            parameters: crate::measure::child::parameter_count(m),
        })
        .collect();
    if args.json {
        println!("{}", serde_json::to_string_pretty(&lines)?);
        return Ok(0);
    }
    let mut t = Table::new();
    t.load_preset(UTF8_FULL_CONDENSED).set_header(vec!["model", "family", "default input", "classes", "parameters"]);
    for l in &lines {
        t.add_row(vec![
            l.name.to_string(),
            l.family.to_string(),
            l.input.clone(),
            l.classes.to_string(),
            l.parameters.map_or_else(|| "-".into(), group_thousands),
        ]);
    }
    println!("{t}");
    if lines.iter().any(|l| l.parameters.is_none()) {
        println!("parameters: counted by building each model, which needs the built-in models (libtorch)");
    }
    Ok(0)
}

fn group_thousands(n: i64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

pub fn devices(args: ListArgs) -> Result<i32> {
    let list = device::list();
    if args.json {
        println!("{}", serde_json::to_string_pretty(&list)?);
        return Ok(0);
    }
    let mut t = Table::new();
    t.load_preset(UTF8_FULL_CONDENSED).set_header(vec!["device", "name", "total memory", "versions"]);
    for d in &list {
        t.add_row(vec![
            d.device.to_string(),
            d.name.clone(),
            d.total_bytes.map_or("?".into(), |b| human_bytes(b as f64)),
            d.detail.clone(),
        ]);
    }
    println!("{t}");
    if list.iter().all(|d| !d.device.is_cuda()) {
        println!("No CUDA device found (no GPU, or no NVIDIA driver): vramprobe measures on the CPU.");
    }
    Ok(0)
}

#[cfg(test)]
mod tests {
    #[test]
    fn thousands_are_grouped() {
        assert_eq!(super::group_thousands(11_689_512), "11,689,512");
        assert_eq!(super::group_thousands(512), "512");
    }
}
