//! `packd upload-pack` (being written).

use anyhow::{bail, Result};
use std::process::ExitCode;

/// Arguments of `packd upload-pack`.
#[derive(Debug, clap::Args)]
pub struct Args {}

/// Runs `packd upload-pack`.
pub fn run(_dir: &std::path::Path, _args: &Args) -> Result<ExitCode> {
    bail!("packd upload-pack is not implemented yet")
}
