//! `packd maintenance run`: the maintenance `packd serve` runs after pushes, once, by hand
//! (a geometric repack with a multi-pack-index and its bitmap), or a full repack
//! (`--full`). It takes the repository's maintenance lock, so it never runs beside the
//! server's maintenance of the same repository, nor beside `packd repack`: while one runs it
//! is refused.

use anyhow::{bail, Result};
use packd_maint::maintenance::{run_auto, run_full, run_settled, Kind, Report};
use std::process::ExitCode;

/// Arguments of `packd maintenance`.
#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(subcommand)]
    command: Sub,
}

#[derive(Debug, clap::Subcommand)]
enum Sub {
    /// Run the maintenance once: a geometric repack (factor 2) of the packs pushes made,
    /// loose objects packed, a multi-pack-index and its bitmap written, the rolled-up packs
    /// and packed loose objects deleted. Refused while another maintenance of the repository
    /// (`packd serve`'s, `packd repack`) runs.
    Run(RunArgs),
}

/// Arguments of `packd maintenance run`.
#[derive(Debug, clap::Args)]
struct RunArgs {
    /// A full repack instead: every reachable object rewritten into one pack (a default
    /// clone's objects first), with a bitmap, unreachable ones into a cruft pack, the
    /// commit-graph (as `packd repack -adb` would without the bitmapped pack to append to).
    #[arg(long)]
    full: bool,
    /// What `packd serve` runs once a repository's pushes settled instead: the objects
    /// outside its bitmapped pack appended to it, with bitmaps for the new commits (nothing
    /// when nothing lies outside, or no pack has a bitmap).
    #[arg(long, conflicts_with = "full")]
    settled: bool,
    /// Print nothing but warnings and errors.
    #[arg(short, long)]
    quiet: bool,
}

/// Runs `packd maintenance`.
pub fn run(repo: &packd_odb::Repository, args: &Args) -> Result<ExitCode> {
    let Sub::Run(run) = &args.command;
    let git_dir = repo.git_dir();
    let result = if run.full {
        run_full(git_dir).map(Some)
    } else if run.settled {
        run_settled(git_dir)
    } else {
        run_auto(git_dir).map(Some)
    };
    let report: Report = match result {
        Ok(Some(report)) => report,
        Ok(None) => {
            if !run.quiet {
                eprintln!("nothing to append: no object outside the bitmapped pack, or no pack has a bitmap");
            }
            return Ok(ExitCode::SUCCESS);
        }
        Err(e) if e.is_busy() => bail!("{e}; not run"),
        Err(e) => return Err(e.into()),
    };
    if !run.quiet {
        eprintln!(
            "{} maintenance: {} packs -> {} ({} rolled up, {} loose objects packed, {} objects written){}; {} ms CPU, {} ms",
            report.kind.name(),
            report.packs_before,
            report.packs_after,
            report.rolled_up,
            report.loose,
            report.new_objects,
            match report.kind {
                Kind::Geometric if report.bitmap => ", multi-pack-index and its bitmap written",
                Kind::Geometric => ", multi-pack-index written",
                Kind::Append | Kind::Full if report.bitmap => ", bitmap written",
                _ => "",
            },
            report.cpu.as_millis(),
            report.wall.as_millis()
        );
    }
    Ok(ExitCode::SUCCESS)
}
