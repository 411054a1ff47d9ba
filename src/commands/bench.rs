//! `vramprobe bench-search` (hidden; `./scripts/bench-search` runs it).
use anyhow::{Context, Result};

use crate::bench::{self, Measurement};
use crate::commands::cli::BenchArgs;

pub fn run(args: BenchArgs) -> Result<i32> {
    let mut rows = bench::synthetic_rows();
    if !args.synthetic_only {
        let exe = std::env::current_exe().context("locating the vramprobe binary to run trials")?;
        let recorded: Vec<Measurement> = match &args.reuse {
            Some(path) => csv::Reader::from_path(path)
                .with_context(|| format!("reading {}", path.display()))?
                .deserialize()
                .collect::<Result<_, _>>()
                .with_context(|| format!("reading {}", path.display()))?,
            None => Vec::new(),
        };
        eprintln!("measuring the real cases (every batch is a real CPU trial; the true max is an exhaustive scan)");
        let machine = crate::measure::environment::capture().machine();
        eprintln!("machine: {machine}");
        let (real, measured) = bench::real_rows(&exe, &machine, &recorded, &mut |line| eprintln!("{line}"))?;
        rows.extend(real);
        let path = args.out.with_file_name("real-measurements.csv");
        bench::write_csv(&measured, &path)?;
        println!("Wrote {} ({} measurements)", path.display(), measured.len());
    }
    bench::write_csv(&rows, &args.out)?;
    print!("{}", bench::format_table(&rows));
    println!("Wrote {} ({} rows)", args.out.display(), rows.len());
    Ok(0)
}
