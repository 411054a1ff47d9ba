use clap::Parser;

fn main() {
    vramprobe::workload::install_panic_hook();
    let cli = vramprobe::cli::Cli::parse();
    let code = match vramprobe::commands::run(cli) {
        Ok(code) => code,
        Err(err) => {
            eprintln!("Error: {err:#}");
            vramprobe::error::exit_code(&err)
        }
    };
    std::process::exit(code);
}
