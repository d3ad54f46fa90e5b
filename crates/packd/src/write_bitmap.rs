//! `packd write-bitmap` (being written).

use anyhow::{bail, Result};
use std::process::ExitCode;

/// Arguments of `packd write-bitmap`.
#[derive(Debug, clap::Args)]
pub struct Args {}

/// Runs `packd write-bitmap`.
pub fn run(_repo: &packd_odb::Repository, _args: &Args) -> Result<ExitCode> {
    bail!("packd write-bitmap is not implemented yet")
}
