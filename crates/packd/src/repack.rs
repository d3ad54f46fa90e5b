//! `packd repack`: git's `git repack` (see `packd_maint::repack`), with git's progress phases
//! on a terminal and its summary line.

use anyhow::Result;
use indicatif::{ProgressBar, ProgressStyle};
use packd_maint::repack::{repack, NoProgress, Phase, RepackOptions, RepackProgress};
use std::io::IsTerminal;
use std::process::ExitCode;

/// Arguments of `packd repack`.
#[derive(Debug, clap::Args)]
#[command(
    after_help = "Packs the repository's objects as `git repack` does. Without -a, packs the \
loose objects into a new pack. With -a, writes everything HEAD and refs/* reach into one pack, \
what a default clone wants (HEAD, refs/heads/*, refs/tags/*) first, so that such a clone is \
one range of the file. With -a -d, objects of the old packs that nothing reaches are kept in a \
second pack, never dropped. A commit-graph is written after -a. Takes the repository's \
maintenance lock: a second repack at the same time fails. --geometric and --write-midx are \
not implemented yet."
)]
pub struct Args {
    /// Pack everything reachable into a single pack.
    #[arg(short = 'a')]
    all: bool,
    /// After packing, remove redundant packs and loose objects now packed.
    #[arg(short = 'd')]
    delete: bool,
    /// Do not reuse existing deltas: search for every object.
    #[arg(short = 'f')]
    no_reuse_delta: bool,
    /// Do not reuse existing entries at all (implies -f).
    #[arg(short = 'F')]
    no_reuse_object: bool,
    /// Write a reachability bitmap (with -a).
    #[arg(short = 'b', long = "write-bitmap-index")]
    bitmap: bool,
    /// Objects each is compared with in the delta search (pack.window; default 10).
    #[arg(long)]
    window: Option<usize>,
    /// The longest delta chain (pack.depth; default 50).
    #[arg(long)]
    depth: Option<u32>,
    /// Do not write a commit-graph after the repack.
    #[arg(long)]
    no_write_commit_graph: bool,
    /// Print nothing but errors.
    #[arg(short = 'q', long)]
    quiet: bool,
}

/// Phases on a progress bar, each finished with git's "done." line.
struct Bar {
    bar: ProgressBar,
    phase: std::sync::Mutex<Option<Phase>>,
}

impl Bar {
    fn end_phase(&self) {
        if let Some(phase) = self.phase.lock().unwrap_or_else(|e| e.into_inner()).take() {
            let (pos, len) = (self.bar.position(), self.bar.length().unwrap_or(0));
            self.bar.finish_and_clear();
            if len > 0 {
                eprintln!("{}: 100% ({pos}/{len}), done.", phase.label());
            } else {
                eprintln!("{}: {pos}, done.", phase.label());
            }
        }
    }
}

impl RepackProgress for Bar {
    fn start(&self, phase: Phase, total: u64) {
        self.end_phase();
        *self.phase.lock().unwrap_or_else(|e| e.into_inner()) = Some(phase);
        self.bar.reset();
        self.bar.set_message(phase.label());
        self.bar.set_length(total);
        self.bar.set_position(0);
    }
    fn update(&self, done: u64) {
        if self.bar.length().is_some_and(|l| l > 0 && l < done) {
            self.bar.set_length(done);
        }
        self.bar.set_position(done);
    }
}

/// Runs `packd repack`.
pub fn run(repo: &packd_odb::Repository, args: &Args) -> Result<ExitCode> {
    let options = RepackOptions {
        all: args.all,
        delete_redundant: args.delete,
        no_reuse_delta: args.no_reuse_delta || args.no_reuse_object,
        no_reuse_object: args.no_reuse_object,
        bitmap: args.bitmap,
        window: args.window,
        depth: args.depth,
        commit_graph: !args.no_write_commit_graph,
    };
    if args.bitmap && !args.all {
        eprintln!("warning: -b needs -a: no bitmap written");
    }
    // As git: progress (and the summary) only on a terminal.
    let show = !args.quiet && std::io::stderr().is_terminal();
    let bar = show.then(|| {
        let bar = ProgressBar::new(0);
        bar.set_style(
            ProgressStyle::with_template("{msg}: {percent:>3}% ({pos}/{len})")
                .expect("a valid template"),
        );
        Bar {
            bar,
            phase: std::sync::Mutex::new(None),
        }
    });
    let report = match &bar {
        Some(bar) => repack(repo.git_dir(), &options, bar),
        None => repack(repo.git_dir(), &options, &NoProgress),
    };
    if let Some(bar) = &bar {
        bar.end_phase();
    }
    let report = report?;
    if show {
        eprintln!(
            "Total {} (delta {}), reused {} (delta {}), pack-reused 0",
            report.objects, report.deltas, report.reused, report.reused_deltas
        );
    }
    if report.objects == 0 && !args.quiet {
        eprintln!("Nothing new to pack.");
    }
    tracing::debug!("{report:?}");
    Ok(ExitCode::SUCCESS)
}
