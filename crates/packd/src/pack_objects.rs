//! `packd pack-objects`: the pack a fetch would send, written to stdout, for given wants and
//! haves. It exercises pack generation without a client (tests, `bench/fetch.sh`) and takes
//! its input the way `git pack-objects --revs` does.

use anyhow::{bail, Context, Result};
use packd_odb::revision_arg::RevisionArgError;
use packd_odb::{NameMatch, ObjectId, Repository};
use packd_pack::{Deepen, FetchRequest, Filter, PackServer};
use packd_reach::progress::Progress;
use std::io::{BufRead, Write};
use std::process::ExitCode;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

/// Arguments of `packd pack-objects`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Allow deltas against objects the haves reach that are not in the pack (as `--thin`).
    #[arg(long)]
    thin: bool,
    /// Write deltas as ref-deltas only (for clients without ofs-delta).
    #[arg(long)]
    no_ofs_delta: bool,
    /// Add annotated tags under refs/tags/ that point at objects being sent.
    #[arg(long)]
    include_tag: bool,
    /// A partial-clone filter: blob:none, blob:limit=N, tree:N.
    #[arg(long, value_name = "SPEC")]
    filter: Option<String>,
    /// Send at most N commits of history from each want, as `deepen N`.
    #[arg(long, value_name = "N")]
    depth: Option<u32>,
    /// The client's shallow commits (repeatable).
    #[arg(long, value_name = "ID")]
    shallow: Vec<String>,
}

/// A partial-clone filter as git spells it.
pub fn parse_filter(spec: &str) -> Option<Filter> {
    if spec == "blob:none" {
        return Some(Filter::BlobNone);
    }
    if let Some(n) = spec.strip_prefix("blob:limit=") {
        return packd_odb::config::parse_size(n).map(Filter::BlobLimit);
    }
    if let Some(n) = spec.strip_prefix("tree:") {
        return n.parse().ok().map(Filter::TreeDepth);
    }
    None
}

fn resolve(repo: &Repository, rev: &str) -> Result<ObjectId> {
    match repo.resolve_name(rev)? {
        NameMatch::Found(id) => Ok(id),
        NameMatch::Ambiguous => bail!("ambiguous argument '{rev}'"),
        NameMatch::Missing => bail!("bad revision '{rev}'"),
    }
}

/// Progress on stderr, only when it is a terminal: each stage's done line.
struct StderrProgress {
    terminal: bool,
    /// The stage started last.
    stage: std::sync::Mutex<String>,
}

impl Progress for StderrProgress {
    fn start(&self, stage: &str, _total: u64) {
        *self.stage.lock().unwrap_or_else(|e| e.into_inner()) = stage.to_string();
    }
    fn update(&self, _done: u64) {}
    fn finish(&self, done: u64) {
        if self.terminal {
            let stage = self.stage.lock().unwrap_or_else(|e| e.into_inner());
            eprintln!("{stage}: {done}, done.");
        }
    }
}

/// Runs `packd pack-objects`: reads revisions (`<rev>` wanted, `^<rev>` had) from stdin.
pub fn run(repo: Repository, args: &Args) -> Result<ExitCode> {
    let mut request = FetchRequest {
        thin: args.thin,
        ofs_delta: !args.no_ofs_delta,
        include_tag: args.include_tag,
        ..FetchRequest::default()
    };
    if let Some(spec) = &args.filter {
        request.filter =
            Some(parse_filter(spec).with_context(|| format!("invalid filter '{spec}'"))?);
    }
    if let Some(depth) = args.depth {
        request.deepen = Some(Deepen::Depth {
            depth,
            relative: false,
        });
    }
    for s in &args.shallow {
        request.client_shallow.push(resolve(&repo, s)?);
    }
    // As `git pack-objects --revs` reads its stdin: a revision per line (ranges and `^rev`
    // included), `--not` flipping the sense of the lines after it, `--shallow <id>` lines.
    let mut negate = false;
    for line in std::io::stdin().lock().lines() {
        let line = line.context("reading revisions from stdin")?;
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        if line == "--not" {
            negate = !negate;
            continue;
        }
        if let Some(id) = line.strip_prefix("--shallow ") {
            request.client_shallow.push(resolve(&repo, id)?);
            continue;
        }
        if line.starts_with('-') {
            bail!("not a rev '{line}'");
        }
        let tips = match repo.revision_arg(line)? {
            Ok(tips) => tips,
            Err(RevisionArgError::NotCommits(sides)) => {
                crate::not_commits(&sides);
                bail!("Invalid symmetric difference expression {line}")
            }
            Err(_) => bail!("bad revision '{line}'"),
        };
        for tip in tips {
            if tip.exclude != negate {
                request.haves.push(tip.id);
            } else {
                request.wants.push(tip.id);
            }
        }
    }
    let server = PackServer::open(Arc::new(repo)).for_one_request();
    let cancel = AtomicBool::new(false);
    let progress = StderrProgress {
        terminal: std::io::IsTerminal::is_terminal(&std::io::stderr()),
        stage: std::sync::Mutex::new(String::new()),
    };
    let plan = server.plan(&request, &progress, &cancel)?;
    for update in &plan.shallow {
        tracing::info!("{update:?}");
    }
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    let stats = server.write(plan, &mut out, &progress, &cancel)?;
    out.flush()?;
    eprintln!(
        "Total {} (delta {}), reused {} (delta {}), new deltas {}, {} bytes",
        stats.objects,
        stats.reused_deltas + stats.new_deltas,
        stats.reused,
        stats.reused_deltas,
        stats.new_deltas,
        stats.bytes
    );
    Ok(ExitCode::SUCCESS)
}
