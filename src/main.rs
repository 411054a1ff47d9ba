use clap::Parser;

fn main() {
    vramprobe::measure::failure::install_panic_hook();
    let cli = vramprobe::commands::cli::Cli::parse();
    let code = match vramprobe::commands::run(cli) {
        Ok(code) => code,
        Err(err) => {
            eprintln!("Error: {err:#}");
            vramprobe::error::exit_code(&err)
        }
    };
    std::process::exit(code);
}
