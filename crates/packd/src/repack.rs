//! `packd repack`: git's `git repack` (see `packd_maint::repack`), with git's progress phases
//! on a terminal and its summary line.

use anyhow::Result;
use indicatif::{ProgressBar, ProgressStyle};
use packd_maint::repack::{repack, RepackOptions};
use packd_reach::progress::{NoProgress, Progress};
use std::io::IsTerminal;
use std::process::ExitCode;

/// Arguments of `packd repack`.
#[derive(Debug, clap::Args)]
#[command(
    after_help = "Packs the repository's objects as `git repack` does. Without -a, packs the \
loose objects that HEAD, refs/*, the reflogs and the index reach into a new pack (unreachable \
ones stay loose), as git does. With -a, writes everything HEAD, refs/*, the reflogs and the index reach into one pack, \
what a default clone wants (HEAD, refs/heads/*, refs/tags/*) first, so that such a clone is \
one range of the file. With -a -d, objects of the old packs and loose ones that nothing reaches go to a \
cruft pack with their mtimes (gc.pruneExpire drops the old ones), as `git gc` does. A \
commit-graph is written after -a. With --write-midx, a multi-pack-index over the packs that \
stay (-b: its bitmap instead of the pack's). With --geometric=N, rolls small packs up as `git \
repack --geometric=N` does (with --write-midx, a multi-pack-index; -b, its bitmap too; -d, \
the rolled-up packs removed). Takes the repository's maintenance lock: a second repack at the \
same time fails."
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
    /// Roll packs up so that each holds at least N times the objects of the next smaller.
    #[arg(long, value_name = "N")]
    geometric: Option<u32>,
    /// Write a multi-pack-index over the packs that stay (with -b, its bitmap instead of the
    /// pack's).
    #[arg(short = 'm', long)]
    write_midx: bool,
    /// With -a: leave this pack (`pack-<hex>.pack`) as it is, as if it had a `.keep` file.
    #[arg(long = "keep-pack", value_name = "NAME")]
    keep_pack: Vec<String>,
    /// With -a: pack the objects of kept packs too (repack.packKeptObjects; default: with -b).
    #[arg(long, overrides_with = "no_pack_kept_objects")]
    pack_kept_objects: bool,
    /// With -a: leave the objects of kept packs out of the new pack.
    #[arg(long, overrides_with = "pack_kept_objects")]
    no_pack_kept_objects: bool,
    /// With -a -d: pack the unreachable objects too (old packs' and loose), no cruft pack.
    #[arg(short = 'k', long)]
    keep_unreachable: bool,
    /// Do not write a commit-graph after the repack.
    #[arg(long)]
    no_write_commit_graph: bool,
    /// Print nothing but errors.
    #[arg(short = 'q', long)]
    quiet: bool,
}

/// Phases on progress bars, one a phase, each finished with git's "done." line.
struct Bar {
    current: std::sync::Mutex<Option<(String, ProgressBar)>>,
}

impl Bar {
    fn end_phase(&self) {
        let taken = self
            .current
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        if let Some((phase, bar)) = taken {
            let (pos, len) = (bar.position(), bar.length().unwrap_or(0));
            bar.finish_and_clear();
            if len > 0 {
                eprintln!("{phase}: 100% ({pos}/{len}), done.");
            } else {
                eprintln!("{phase}: {pos}, done.");
            }
        }
    }
}

impl Progress for Bar {
    fn start(&self, phase: &str, total: u64) {
        self.end_phase();
        let template = if total > 0 {
            "{msg}: {percent:>3}% ({pos}/{len})"
        } else {
            "{msg}: {pos}"
        };
        let bar = ProgressBar::new(total);
        bar.set_style(ProgressStyle::with_template(template).expect("a valid template"));
        bar.set_message(phase.to_string());
        *self.current.lock().unwrap_or_else(|e| e.into_inner()) = Some((phase.to_string(), bar));
    }
    fn update(&self, done: u64) {
        if let Some((_, bar)) = &*self.current.lock().unwrap_or_else(|e| e.into_inner()) {
            if bar.length().is_some_and(|l| l > 0 && l < done) {
                bar.set_length(done);
            }
            bar.set_position(done);
        }
    }
    fn finish(&self, done: u64) {
        self.update(done);
        self.end_phase();
    }
}

/// Blocks of at least this size get their own map from the allocator, returned to the system
/// when freed: the delta search inflates objects and builds their indexes by the hundred
/// thousand, and with glibc's adaptive threshold (which climbs to 32 MiB once a large block is
/// freed) they came from the arenas, which stayed large after them.
const MMAP_THRESHOLD: i32 = 128 << 10;

/// Free memory at the top of an arena beyond this is handed back (a fixed mmap threshold
/// would otherwise leave glibc's 128 KiB, and arenas shrinking and growing all the time).
const TRIM_THRESHOLD: i32 = 4 << 20;

/// Sets glibc's allocator for a repack (see [`MMAP_THRESHOLD`]), with at most one arena a
/// core: each arena keeps the free memory its thread's short-lived blocks leave among
/// long-lived ones. On git/git's `repack -adf` (841,300 objects; each delta then kept in a
/// vector of its own), 345 MB of the arenas were free after the search of the clone's part
/// with glibc's defaults, 319 MB with the threshold fixed, 209 MB with two arenas as well.
fn tune_allocator() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
        let arenas = i32::try_from(cores.max(2)).unwrap_or(i32::MAX);
        // SAFETY: mallopt only sets parameters of the allocator; it is called before the
        // repack starts its threads.
        unsafe {
            libc::mallopt(libc::M_MMAP_THRESHOLD, MMAP_THRESHOLD);
            libc::mallopt(libc::M_TRIM_THRESHOLD, TRIM_THRESHOLD);
            libc::mallopt(libc::M_ARENA_MAX, arenas);
        }
    }
}

/// Runs `packd repack`.
pub fn run(repo: &packd_odb::Repository, args: &Args) -> Result<ExitCode> {
    tune_allocator();
    let options = RepackOptions {
        all: args.all,
        delete_redundant: args.delete,
        no_reuse_delta: args.no_reuse_delta || args.no_reuse_object,
        no_reuse_object: args.no_reuse_object,
        bitmap: args.bitmap,
        window: args.window,
        depth: args.depth,
        commit_graph: !args.no_write_commit_graph,
        keep_packs: args.keep_pack.clone(),
        write_midx: args.write_midx,
        keep_unreachable: args.keep_unreachable,
        pack_kept_objects: match (args.pack_kept_objects, args.no_pack_kept_objects) {
            (true, _) => Some(true),
            (_, true) => Some(false),
            _ => None,
        },
        rewrite: false,
    };
    if let Some(factor) = args.geometric {
        return geometric(repo, args, factor);
    }
    if args.bitmap && !args.all && !args.write_midx {
        eprintln!("warning: -b needs -a or --write-midx: no bitmap written");
    }
    // As git: progress (and the summary) only on a terminal.
    let show = !args.quiet && std::io::stderr().is_terminal();
    let bar = show.then(|| Bar {
        current: std::sync::Mutex::new(None),
    });
    let report = match &bar {
        Some(bar) => repack(repo.git_dir(), &options, bar),
        None => repack(repo.git_dir(), &options, &NoProgress),
    };
    if let Some(bar) = &bar {
        bar.end_phase();
    }
    let report = report?;
    if let Some(e) = &report.midx_bitmap_error {
        eprintln!("warning: no multi-pack-index bitmap: {e}");
    }
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

/// `packd repack --geometric=N` (helper `packd_maint::geometric`).
fn geometric(repo: &packd_odb::Repository, args: &Args, factor: u32) -> Result<ExitCode> {
    let options = packd_maint::geometric::GeometricOptions {
        factor,
        write_midx: args.write_midx,
        write_bitmap: args.write_midx && args.bitmap,
        delete: args.delete,
    };
    let outcome = packd_maint::geometric::geometric_repack(repo, &options)?;
    if let Some(e) = &outcome.bitmap_error {
        eprintln!("warning: no multi-pack-index bitmap: {e}");
    }
    if !args.quiet && std::io::stderr().is_terminal() {
        eprintln!(
            "{} packs -> {} ({} rolled up into {}, {} objects)",
            outcome.packs_before,
            outcome.packs_after,
            outcome.rolled_up.len(),
            outcome.new_pack.as_deref().unwrap_or("no new pack"),
            outcome.new_pack_objects
        );
    }
    Ok(ExitCode::SUCCESS)
}
