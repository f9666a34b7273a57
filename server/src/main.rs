//! `flash-indexer-server`: see the crate's README, or `--help`.

use std::process::ExitCode;

use clap::Parser;
use flash_indexer_server::config::{Cli, Settings};

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .init();
    let settings = match Settings::from_cli(Cli::parse()) {
        Ok(settings) => settings,
        Err(error) => {
            eprintln!("flash-indexer-server: {error}");
            return ExitCode::from(2);
        }
    };
    match flash_indexer_server::run::serve(settings) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("flash-indexer-server: {error}");
            ExitCode::FAILURE
        }
    }
}
