//! `packd receive-pack`: git's receive-pack on stdin/stdout, for ssh and `git push
//! --receive-pack='packd receive-pack'`. Protocol v0 only, as git push speaks it.

use crate::upload_pack::open_repository;
use anyhow::{Context, Result};
use packd_protocol::{ReceivePack, ReceivePackOptions};
use packd_serve::stamp::Stamp;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

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

    /// Do not run the repository's hooks (pre-receive, update, post-receive, ...).
    #[arg(long)]
    no_hooks: bool,

    /// A hook still running after this many seconds is killed, with its process group, and
    /// the push refused as by a failed hook.
    #[arg(long, value_name = "SECS", default_value_t = packd_protocol::hooks::DEFAULT_HOOK_TIMEOUT_SECS)]
    hook_timeout: u64,

    /// The repository: a bare repository, a git directory, or a work tree.
    #[arg(value_name = "DIR")]
    dir: PathBuf,
}

/// Runs `packd receive-pack`; `workdir` is where a relative DIR starts.
pub fn run(workdir: &Path, args: &Args) -> Result<ExitCode> {
    let dir = workdir.join(&args.dir);
    // Opened once for the advertisement and the push (opening maps the packs of the repository
    // and its alternates: a good part of a small push's cost).
    let stamp = pack_dir_stamp(&dir);
    let repo = Arc::new(open_repository(&dir)?);
    let git_dir = repo.git_dir().to_path_buf();
    let options = ReceivePackOptions {
        hooks: packd_protocol::hooks::HookOptions {
            enabled: !args.no_hooks,
            timeout: std::time::Duration::from_secs(args.hook_timeout.max(1)),
        },
        ..ReceivePackOptions::default()
    };
    let receive = ReceivePack::new(&git_dir, options);
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::with_capacity(64 * 1024, stdout.lock());
    if args.advertise_refs || !args.stateless_rpc {
        receive
            .advertise_repository(&repo, &mut out)
            .context("cannot write the advertisement")?;
    }
    if args.advertise_refs {
        out.flush()?;
        return Ok(ExitCode::SUCCESS);
    }
    let stdin = std::io::stdin();
    let mut input = stdin.lock();
    // The client may take long to send its pack: if packs came or went meanwhile (another
    // push, a repack), the push is checked against a fresh view of the objects.
    // Repositories are left for the process's exit to unmap, all at once: cheaper than pack by
    // pack (a twentieth of a small push's time).
    let mut repository = || {
        if stamp.is_some() && pack_dir_stamp(&dir) == stamp {
            return Ok(repo.clone());
        }
        let fresh = Arc::new(packd_odb::Repository::open(&git_dir, &Default::default())?);
        std::mem::forget(fresh.clone());
        Ok(fresh)
    };
    let stats = receive.serve_with(&mut repository, &mut input, &mut out)?;
    out.flush()?;
    std::mem::forget(repo);
    if let Some(e) = &stats.unpack_error {
        tracing::warn!("push refused: {e}");
    }
    Ok(ExitCode::SUCCESS)
}

/// The stamp of the repository at `dir` (the names of its pack files and a few files'
/// identity: `packd_serve::stamp`), taken before the repository is opened, so that any change
/// after the open changes it, whatever the clocks (a directory's modification time comes from
/// a coarse clock: a pack added within its tick went unseen). `None` (the repository is
/// elsewhere: a gitfile, a worktree, `DIR.git`) makes the push reopen it.
fn pack_dir_stamp(dir: &Path) -> Option<Stamp> {
    [dir.to_path_buf(), dir.join(".git")]
        .into_iter()
        .find(|git_dir| git_dir.join("objects/pack").is_dir())
        .map(|git_dir| Stamp::of(&git_dir))
}
