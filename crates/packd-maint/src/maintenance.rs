//! The maintenance that keeps a repository fast by itself: what `packd serve` runs after
//! pushes and `packd maintenance run` runs by hand.
//!
//! ```text
//! run_auto   maintenance lock (try) -> the policy (crate::auto_policy) decides:
//!            full:    with a bitmapped pack: every object outside it appended to it, with
//!                     bitmaps for the new commits (crate::append); without one: geometric
//!                     repack, factor 2: the small packs and the loose objects rolled up,
//!                     multi-pack-index and its bitmap, rolled-up packs and packed loose
//!                     objects deleted; then, still under the lock, the commit-graph written
//!                     again (its failure, `core.commitGraph=false` included, is logged and
//!                     ends nothing)
//!            roll-up: few objects outside the bitmap: a geometric repack of the packs
//!                     outside it and the loose objects only; nothing else written
//! run_settled the repository had no push for a while (`packd serve --maintenance-settle`):
//!            whatever lies outside the bitmapped pack appended to it (crate::append), so
//!            that a quiet repository is one pack with bitmaps; nothing when nothing lies
//!            outside, or no pack has a bitmap
//! run_full   full repack (`packd_maint::repack::repack`, as `packd repack -adb`: unreachable
//!            objects into a cruft pack), which takes the lock itself
//! both       one log line, target `packd_maint`:
//!            maintenance done repo=<git dir> kind=geometric|roll-up|append|full cpu_ms=.. wall_ms=..
//!                packs_before=.. packs_after=.. rolled_up=.. new_objects=.. loose=.. bitmap=..
//! ```
//!
//! `cpu_ms` is the CPU time of the thread that ran it (`CLOCK_THREAD_CPUTIME_ID`): a
//! maintenance runs on one thread, and serving's threads are not counted.

use crate::append::{append_to_bitmapped, AppendError, AppendOutcome};
use crate::auto_policy::{Coverage, Decision};
use crate::geometric::{
    geometric_repack_leaving, geometric_repack_locked, GeometricError, GeometricOptions,
    GeometricOutcome,
};
use crate::lock::{self, LockError};
use packd_odb::{Repository, RepositoryOptions};
use std::path::Path;
use std::time::{Duration, Instant};

/// The tracing target of maintenance's log lines.
pub const TARGET: &str = "packd_maint";

/// Which maintenance ran.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A geometric repack with a multi-pack-index, its bitmap and the commit-graph (after
    /// pushes, once enough objects lie outside the bitmap).
    Geometric,
    /// A geometric repack of the packs outside the bitmap only (after a small push).
    RollUp,
    /// The objects outside the bitmapped pack appended to it (past the threshold, or once
    /// pushes settled).
    Append,
    /// A full repack (on demand).
    Full,
}

impl Kind {
    /// Its name in log lines.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Geometric => "geometric",
            Kind::RollUp => "roll-up",
            Kind::Append => "append",
            Kind::Full => "full",
        }
    }
}

/// What a maintenance did and cost.
#[derive(Debug, Clone)]
pub struct Report {
    /// Which one.
    pub kind: Kind,
    /// The repository's packs before.
    pub packs_before: usize,
    /// Its packs after.
    pub packs_after: usize,
    /// Packs rolled up into the new one.
    pub rolled_up: usize,
    /// Objects in the new pack (0: none written).
    pub new_objects: u32,
    /// Loose objects packed.
    pub loose: usize,
    /// Whether a multi-pack-index bitmap was written.
    pub bitmap: bool,
    /// CPU time of the thread that ran it.
    pub cpu: Duration,
    /// Time it took.
    pub wall: Duration,
}

/// Why a maintenance did not run or failed.
#[derive(Debug, thiserror::Error)]
pub enum MaintenanceError {
    /// Another maintenance of the repository holds its lock (this one did nothing).
    #[error(transparent)]
    Lock(#[from] LockError),
    /// The repository could not be opened.
    #[error(transparent)]
    Odb(#[from] packd_odb::Error),
    /// The geometric repack failed.
    #[error(transparent)]
    Geometric(#[from] GeometricError),
    /// The full repack failed.
    #[error(transparent)]
    Repack(#[from] crate::repack::RepackError),
    /// Appending to the bitmapped pack failed.
    #[error(transparent)]
    Append(#[from] AppendError),
}

impl MaintenanceError {
    /// Whether it failed only because another maintenance was running.
    pub fn is_busy(&self) -> bool {
        matches!(
            self,
            MaintenanceError::Lock(LockError::Busy { .. })
                | MaintenanceError::Geometric(GeometricError::Lock(LockError::Busy { .. }))
                | MaintenanceError::Repack(crate::repack::RepackError::Busy(_))
        )
    }
}

/// The CPU time this thread has used so far.
pub fn thread_cpu_time() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes the timespec it is given and nothing else.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    if rc != 0 {
        return Duration::ZERO;
    }
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

/// The maintenance after pushes for the repository at `git_dir`: a geometric repack with
/// factor 2, loose objects packed, a multi-pack-index, its bitmap and the commit-graph; or,
/// while few objects lie outside the bitmap ([`crate::auto_policy`]), a geometric repack of
/// the packs outside it only (the repository-wide files cost seconds to write, a push's
/// objects are counted past the bitmap cheaply). Refused with
/// [`LockError::Busy`] (see [`MaintenanceError::is_busy`]) while another maintenance of the
/// repository runs. Logs one line (see the module documentation).
pub fn run_auto(git_dir: &Path) -> Result<Report, MaintenanceError> {
    let started = Instant::now();
    let cpu_start = thread_cpu_time();
    let repo = Repository::open(git_dir, &RepositoryOptions::default())?;
    let held = lock::try_maintenance(&repo.common_dir().join("objects"))?;
    let cost = Cost { started, cpu_start };
    let packs_before = pack_count(git_dir)?;
    let report = match Coverage::of(&repo)?.decide() {
        Decision::Full => match append_to_bitmapped(&repo, &held) {
            Ok(appended) => cost.appended(git_dir, packs_before, &appended),
            Err(AppendError::NoBitmappedPack) => {
                let outcome = geometric_repack_locked(&repo, &GeometricOptions::default(), &held)?;
                let graph = write_commit_graph(git_dir);
                if let Err(why) = graph {
                    tracing::warn!(target: TARGET, "{}: no commit-graph written: {why}", git_dir.display());
                }
                cost.geometric(Kind::Geometric, git_dir, &outcome)
            }
            Err(e) => return Err(e.into()),
        },
        Decision::RollUpOutside { covered } => {
            let options = GeometricOptions {
                write_midx: false,
                write_bitmap: false,
                ..GeometricOptions::default()
            };
            let outcome = geometric_repack_leaving(&repo, &options, &held, &covered)?;
            cost.geometric(Kind::RollUp, git_dir, &outcome)
        }
    };
    drop(held);
    log(git_dir, &report);
    Ok(report)
}

/// The maintenance of the repository at `git_dir` once its pushes settled: the objects
/// outside its bitmapped pack (the pushes' rolled-up packs, loose objects) appended to it,
/// with bitmaps for the new commits, so that it is one pack with bitmaps again. `None`, and
/// nothing logged, when nothing lies outside or no pack has a bitmap (the next push's
/// maintenance then decides). Refused as [`run_auto`] while another maintenance runs.
pub fn run_settled(git_dir: &Path) -> Result<Option<Report>, MaintenanceError> {
    let started = Instant::now();
    let cpu_start = thread_cpu_time();
    let repo = Repository::open(git_dir, &RepositoryOptions::default())?;
    let held = lock::try_maintenance(&repo.common_dir().join("objects"))?;
    if Coverage::of(&repo)?.outside_objects == 0 {
        return Ok(None);
    }
    let packs_before = pack_count(git_dir)?;
    let appended = match append_to_bitmapped(&repo, &held) {
        Ok(appended) => appended,
        Err(AppendError::NoBitmappedPack) => return Ok(None),
        Err(e) => return Err(e.into()),
    };
    drop(held);
    let report = Cost { started, cpu_start }.appended(git_dir, packs_before, &appended);
    log(git_dir, &report);
    Ok(Some(report))
}

/// When a maintenance started, for its report.
struct Cost {
    started: Instant,
    cpu_start: Duration,
}

impl Cost {
    /// The report of a geometric repack of `kind`.
    fn geometric(&self, kind: Kind, git_dir: &Path, outcome: &GeometricOutcome) -> Report {
        if let Some(why) = &outcome.bitmap_error {
            tracing::warn!(target: TARGET, "{}: multi-pack-index written without a bitmap: {why}", git_dir.display());
        }
        Report {
            kind,
            packs_before: outcome.packs_before,
            packs_after: outcome.packs_after,
            rolled_up: outcome.rolled_up.len(),
            new_objects: outcome.new_pack_objects,
            loose: outcome.loose_packed,
            bitmap: outcome.bitmap,
            cpu: thread_cpu_time().saturating_sub(self.cpu_start),
            wall: self.started.elapsed(),
        }
    }

    /// The report of an append; `packs_before` counted before it.
    fn appended(&self, git_dir: &Path, packs_before: usize, outcome: &AppendOutcome) -> Report {
        Report {
            kind: Kind::Append,
            packs_before,
            packs_after: pack_count(git_dir).unwrap_or(0),
            rolled_up: outcome.packs_removed as usize,
            new_objects: u32::try_from(outcome.appended).unwrap_or(u32::MAX),
            loose: outcome.loose_removed as usize,
            bitmap: outcome.bitmaps_added > 0,
            cpu: thread_cpu_time().saturating_sub(self.cpu_start),
            wall: self.started.elapsed(),
        }
    }
}

/// Writes the commit-graph of the repository at `git_dir` afresh (git's default options).
fn write_commit_graph(git_dir: &Path) -> Result<(), String> {
    let repo =
        Repository::open(git_dir, &RepositoryOptions::default()).map_err(|e| e.to_string())?;
    let storage = repo
        .objects()
        .own_storage()
        .cloned()
        .ok_or_else(|| format!("{}: no objects directory of its own", git_dir.display()))?;
    packd_reach::commit_graph::write_for_refs(&repo, &*storage)
        .map(|_| ())
        .map_err(|e| e.to_string())
}

/// The number of the repository's own packs.
fn pack_count(git_dir: &Path) -> Result<usize, MaintenanceError> {
    let repo = Repository::open(git_dir, &RepositoryOptions::default())?;
    let own = repo.objects().own_storage().cloned();
    Ok(repo
        .objects()
        .packs_with_storage()
        .filter(|(s, _)| own.as_ref().is_some_and(|o| std::sync::Arc::ptr_eq(o, s)))
        .count())
}

/// A full repack of the repository at `git_dir` on demand, as `packd repack -adb` (all
/// reachable objects into one pack with a bitmap, unreachable ones into a cruft pack, the
/// commit-graph written). Refused while another maintenance runs, as [`run_auto`].
pub fn run_full(git_dir: &Path) -> Result<Report, MaintenanceError> {
    let started = Instant::now();
    let cpu_start = thread_cpu_time();
    let packs_before = pack_count(git_dir)?;
    let options = crate::repack::RepackOptions {
        all: true,
        delete_redundant: true,
        bitmap: true,
        rewrite: true,
        ..Default::default()
    };
    let repacked = crate::repack::repack(git_dir, &options, &packd_reach::progress::NoProgress)?;
    let report = Report {
        kind: Kind::Full,
        packs_before,
        packs_after: pack_count(git_dir)?,
        rolled_up: repacked.packs_removed as usize,
        new_objects: repacked.objects as u32,
        loose: repacked.loose_removed as usize,
        bitmap: repacked.bitmap.is_some(),
        cpu: thread_cpu_time().saturating_sub(cpu_start),
        wall: started.elapsed(),
    };
    log(git_dir, &report);
    Ok(report)
}

/// Logs the one line of a maintenance done.
fn log(git_dir: &Path, report: &Report) {
    tracing::info!(
        target: TARGET,
        repo = %git_dir.display(),
        kind = report.kind.name(),
        cpu_ms = report.cpu.as_millis() as u64,
        wall_ms = report.wall.as_millis() as u64,
        packs_before = report.packs_before,
        packs_after = report.packs_after,
        rolled_up = report.rolled_up,
        new_objects = report.new_objects,
        loose = report.loose,
        bitmap = report.bitmap,
        "maintenance done"
    );
}

#[cfg(test)]
mod tests {
    use super::thread_cpu_time;

    #[test]
    fn thread_cpu_time_counts_this_thread_only() {
        let before = thread_cpu_time();
        let mut x = 0u64;
        for i in 0..20_000_000u64 {
            x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(i));
        }
        std::hint::black_box(x);
        let spent = thread_cpu_time() - before;
        assert!(spent > std::time::Duration::ZERO);
        // A sleeping thread spends none.
        let before = thread_cpu_time();
        std::thread::sleep(std::time::Duration::from_millis(50));
        assert!(thread_cpu_time() - before < std::time::Duration::from_millis(20));
    }
}
