//! `packd commit-graph write`: git's commit-graph (`objects/info/commit-graph`) for the commits
//! the refs reach, or those listed on stdin, as `git commit-graph write` writes it.

use anyhow::{bail, Context, Result};
use indicatif::{ProgressBar, ProgressStyle};
use packd_odb::{ObjectId, Repository};
use packd_reach::commit_graph::{
    reachable_tips, write_commit_graph, CommitGraphError, GraphOptions,
};
use packd_reach::progress::Progress;
use std::io::{BufRead, IsTerminal};
use std::process::ExitCode;

/// Arguments of `packd commit-graph`.
#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(subcommand)]
    command: GraphCommand,
}

#[derive(Debug, clap::Subcommand)]
enum GraphCommand {
    /// Write objects/info/commit-graph (one file; a split chain is removed).
    #[command(
        after_help = "Writes the commit-graph git 2.39 writes by default: OIDF, OIDL, \
CDAT (topological levels), GDA2/GDO2 (corrected commit dates; commitGraph.generationVersion=1 \
leaves them out), EDGE for octopus merges, no Bloom filters. The file is written to a temporary \
file, synced and renamed into place."
    )]
    Write(WriteArgs),
}

/// Arguments of `packd commit-graph write`.
#[derive(Debug, clap::Args)]
struct WriteArgs {
    /// Start at every ref and HEAD (the default).
    #[arg(long)]
    reachable: bool,
    /// Start at the commits (or tags) whose full ids stdin lists, one a line.
    #[arg(long)]
    stdin_commits: bool,
    /// Show progress even when stderr is not a terminal.
    #[arg(long, overrides_with = "no_progress")]
    progress: bool,
    /// Show no progress.
    #[arg(long)]
    no_progress: bool,
}

/// A progress bar on stderr, one stage after another.
struct Bar(ProgressBar);

impl Progress for Bar {
    fn start(&self, stage: &str, total: u64) {
        self.0.set_message(stage.to_string());
        self.0.set_length(total);
        self.0.set_position(0);
    }
    fn update(&self, done: u64) {
        if self.0.length().is_some_and(|l| l < done) {
            self.0.set_length(done);
        }
        self.0.set_position(done);
    }
}

/// Runs `packd commit-graph`.
pub fn run(repo: &Repository, args: &Args) -> Result<ExitCode> {
    let GraphCommand::Write(args) = &args.command;
    if args.reachable && args.stdin_commits {
        bail!("use at most one of --reachable or --stdin-commits");
    }
    let tips = if args.stdin_commits {
        read_stdin_commits()?
    } else {
        reachable_tips(repo)?
    };
    let show = !args.no_progress && (args.progress || std::io::stderr().is_terminal());
    let bar = show.then(|| {
        let bar = ProgressBar::new(0);
        bar.set_style(
            ProgressStyle::with_template("{msg:16} {bar:40} {pos}/{len} {elapsed}")
                .expect("a valid template"),
        );
        Bar(bar)
    });
    let options = GraphOptions {
        progress: bar.as_ref().map(|b| b as &dyn Progress),
        ..GraphOptions::for_repository(repo)
    };
    let started = std::time::Instant::now();
    let storage = repo
        .objects()
        .own_storage()
        .cloned()
        .context("the repository has no objects directory of its own")?;
    let written = write_commit_graph(repo, &*storage, &tips, &options);
    if let Some(bar) = &bar {
        bar.0.finish_and_clear();
    }
    let written = match written {
        Err(CommitGraphError::Incompatible(why)) => {
            // git warns and succeeds without writing.
            eprintln!("warning: not writing a commit-graph: {why}");
            return Ok(ExitCode::SUCCESS);
        }
        other => other?,
    };
    if show {
        eprintln!(
            "{}: {} commits ({} octopus edges, {} date overflows), {} bytes in {:.2?}",
            written.path.display(),
            written.commits,
            written.extra_edges,
            written.overflows,
            written.bytes,
            started.elapsed()
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// The ids stdin lists, as git's `--stdin-commits` reads them: each line starts with a full
/// hex id (what follows it is ignored).
fn read_stdin_commits() -> Result<Vec<ObjectId>> {
    let mut tips = Vec::new();
    for line in std::io::stdin().lock().lines() {
        let line = line.context("reading stdin")?;
        let id = line
            .get(..40)
            .and_then(ObjectId::from_hex)
            .with_context(|| format!("unexpected non-hex object ID: {line}"))?;
        tips.push(id);
    }
    Ok(tips)
}
