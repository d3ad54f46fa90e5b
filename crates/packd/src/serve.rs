//! `packd serve` (being written).

use anyhow::{bail, Result};
use std::process::ExitCode;

/// Arguments of `packd serve`.
#[derive(Debug, clap::Args)]
pub struct Args {}

/// Runs `packd serve`.
pub fn run(_args: &Args) -> Result<ExitCode> {
    bail!("packd serve is not implemented yet")
}
