//! `packd receive-pack`: git's receive-pack on stdin/stdout, for ssh and `git push
//! --receive-pack='packd receive-pack'`. Protocol v0 only, as git push speaks it.

use crate::upload_pack::open_repository;
use anyhow::{Context, Result};
use packd_protocol::{ReceivePack, ReceivePackOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// Arguments of `packd receive-pack`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Serve one request and exit (the HTTP transport's mode): no advertisement unless
    /// --advertise-refs is given too.
    #[arg(long)]
    stateless_rpc: bool,

    /// Only write the advertisement, then exit.
    #[arg(long, alias = "http-backend-info-refs")]
    advertise_refs: bool,

    /// The repository: a bare repository, a git directory, or a work tree.
    #[arg(value_name = "DIR")]
    dir: PathBuf,
}

/// Runs `packd receive-pack`; `workdir` is where a relative DIR starts.
pub fn run(workdir: &Path, args: &Args) -> Result<ExitCode> {
    let dir = workdir.join(&args.dir);
    let repo = open_repository(&dir)?;
    let receive = ReceivePack::new(repo.git_dir(), ReceivePackOptions::default());
    drop(repo);
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::with_capacity(64 * 1024, stdout.lock());
    if args.advertise_refs || !args.stateless_rpc {
        receive
            .advertise(&mut out)
            .context("cannot write the advertisement")?;
    }
    if args.advertise_refs {
        out.flush()?;
        return Ok(ExitCode::SUCCESS);
    }
    let stdin = std::io::stdin();
    let mut input = stdin.lock();
    let stats = receive.serve(&mut input, &mut out)?;
    out.flush()?;
    if let Some(e) = &stats.unpack_error {
        tracing::warn!("push refused: {e}");
    }
    Ok(ExitCode::SUCCESS)
}
