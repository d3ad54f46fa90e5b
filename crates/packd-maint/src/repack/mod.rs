//! `packd repack`: git's `git repack` (builtin/repack.c with pack-objects), written through
//! the storage layer.
//!
//! ```text
//! lock (objects/packd-maintenance.lock) ─> remove stale tmp_packd_* (over an hour old)
//! count   -a: every object reachable from HEAD and refs/*, by the bitmap when there is one
//!             (count_bitmap), else walking commits and trees:
//!             part 0 = what HEAD, refs/heads/* and refs/tags/* reach (a default clone),
//!             part 1 = what only the other refs, the reflogs and the index reach
//!             (refs/pull/*, notes, ...; git's --all --reflog --indexed-objects);
//!             objects of kept packs (a .keep file, --keep-pack) left out, as git's
//!             --honor-pack-keep, unless kept objects are packed (-b, repack.packKeptObjects)
//!             with -d -k: every other object of the old packs and loose one, in part 1
//!         else: the loose objects that refs, reflogs and the index reach (git's
//!             incremental repack, see incremental)
//! plan    reuse an on-disk delta when its base is written too, no later a part (and no -f);
//!         every other object goes to the delta search (one per part), whose whole answers
//!         reuse their on-disk whole entry unless -F
//! write   part 0 then part 1, commits, tags, trees, blobs in walk order, each delta's base
//!         written just before it when not written yet (git's compute_write_order): every
//!         delta of part 0 has its base in part 0, so a default clone is one range of the pack
//! publish pack, .rev, .idx (pack_file) ─> -a -d: the objects of the old packs and the loose
//!         ones that nothing reaches go to a cruft pack (crate::cruft, gc.pruneExpire drops
//!         the old ones; with -k there are none: the new pack took them), then under the
//!         prune lock the old packs (.idx first, so that readers stop seeing a pack before
//!         its data goes) and loose objects are removed
//!         (cruft::prune); -d alone: loose objects now packed ─> multi-pack-index over removed
//!         packs ─> -b: bitmap (packd_reach::bitmap::write) ─> --write-midx: a
//!         multi-pack-index over the packs that stay (-b: its bitmap instead of the pack's)
//!         ─> commit-graph
//! ```
//!
//! **The append path.** With `-a -d -b`, without `-f`/`-F`, without a depth asked for
//! (`--depth`, `pack.depth`: B's chains may be longer) and without
//! [`RepackOptions::rewrite`] (which `maintenance::run_full` sets), when the repository has a
//! pack of its own with a `.bitmap` (not `.keep`, not cruft) and the refs reach every one of
//! its objects (counted with that bitmap: the refs' bitmaps together cover all its bits), that
//! pack is what a full repack would keep, and `crate::append` does instead of the above: the
//! pack's bytes as they are, then the reachable objects outside it, its bitmap extended; or,
//! with nothing outside it, the pack kept unchanged, and the commit-graph left as it is when
//! it holds exactly the reachable commits. Unreachable objects of the other packs and loose
//! ones go to a cruft pack as with `-a -d`. Otherwise (no such pack, or one holding objects
//! nothing reaches, which only a rewrite drops) the full repack above runs. The cost: a
//! default clone is no longer the first range of the pack once objects were appended (a
//! mirror clone is still the whole file).
//!
//! A repack killed anywhere leaves a repository git reads as before: until the new `.idx` is
//! published, only a temporary file exists; after, the new pack and the old ones hold the same
//! objects, and a half-done deletion leaves packs whose objects are in the new one.
//!
//! Measured on a copy of git/git (refs/pull/* dropped: 1,017 refs, 489,186 reachable of 849k
//! objects, one 496 MB pack without bitmap), release build, one run each on a shared 2-core
//! machine: `packd repack -adb` 16.2 s wall, 12.9 s CPU, 667 MB peak RSS (commit-graph
//! included, 0.4 s), a 288.6 MB pack; `git repack -adb` 13.1 s, 10.4 s CPU, 580 MB, a
//! 324.4 MB pack. Counting and planning (the walk, locating every object) take 11.2 s of it.
//! Repacking that result again (its bitmap counts, in 0.14 s instead of the walk's 5.1 s):
//! `packd repack -adb` 6.3 s wall, 7.5 s CPU, 586 MB; `git repack -adb` on git's own result
//! 6.5 s, 6.2 s CPU, 568 MB.

mod cleanup;
mod count_bitmap;
mod incremental;
mod index_file;
mod plan;
mod write;

use crate::lock::{self, LockError};
use crate::pack_file::PackFileError;
use packd_odb::Repository;
use packd_reach::progress::{NoProgress, Progress};
use std::path::PathBuf;
use std::time::SystemTime;

/// What a repack does: `git repack`'s options of the same letters.
#[derive(Debug, Clone)]
pub struct RepackOptions {
    /// `-a`: every reachable object into one pack (else only the loose objects).
    pub all: bool,
    /// `-d`: then remove the packs and loose objects the new pack makes redundant.
    pub delete_redundant: bool,
    /// `-f`: do not reuse on-disk deltas; search for every object.
    pub no_reuse_delta: bool,
    /// `-F`: do not reuse any on-disk entry (implies `-f`).
    pub no_reuse_object: bool,
    /// `-b`: write a reachability bitmap (with `-a`).
    pub bitmap: bool,
    /// `--window`; `None`: `pack.window` or 10.
    pub window: Option<usize>,
    /// `--depth`; `None`: `pack.depth` or 50.
    pub depth: Option<u32>,
    /// Write a commit-graph after (git does with `gc`, and `fetch.writeCommitGraph`).
    pub commit_graph: bool,
    /// `--keep-pack=<name>` (each `pack-<hex>.pack`): packs treated as if they had a `.keep`
    /// file: neither replaced nor removed, and (unless kept objects are packed) their objects
    /// left out of the new pack.
    pub keep_packs: Vec<String>,
    /// `--pack-kept-objects` / `--no-pack-kept-objects`; `None`: `repack.packKeptObjects`,
    /// else git's default, packed exactly when `-b` writes a pack bitmap (so that the bitmap
    /// covers every reachable object).
    pub pack_kept_objects: Option<bool>,
    /// `--write-midx`: then a multi-pack-index over the packs that stay (kept ones, the new
    /// ones, and with `-a` but not `-d` the old ones); with `-b` the bitmap is the
    /// multi-pack-index's (no pack bitmap, the packs' old ones removed), with or without `-a`.
    pub write_midx: bool,
    /// `-k`/`--keep-unreachable` (with `-a -d`): the unreachable objects of the old packs and
    /// the loose ones go into the new pack, rather than a cruft pack: nothing is dropped.
    pub keep_unreachable: bool,
    /// Rewrite every object even when the bitmapped pack could be kept and appended to
    /// (`maintenance::run_full`: a full repack on demand lays the default clone's objects
    /// first, which appending does not).
    pub rewrite: bool,
}

impl Default for RepackOptions {
    fn default() -> Self {
        RepackOptions {
            all: false,
            delete_redundant: false,
            no_reuse_delta: false,
            no_reuse_object: false,
            bitmap: false,
            window: None,
            depth: None,
            commit_graph: true,
            keep_packs: Vec::new(),
            pack_kept_objects: None,
            write_midx: false,
            keep_unreachable: false,
            rewrite: false,
        }
    }
}

/// What a repack did, for git's summary line (`Total N (delta M), reused R (delta D)`).
#[derive(Debug, Clone, Default)]
pub struct RepackReport {
    /// Objects written (all new packs).
    pub objects: u64,
    /// Of them, written as deltas.
    pub deltas: u64,
    /// Entries copied from old packs.
    pub reused: u64,
    /// Of them, deltas.
    pub reused_deltas: u64,
    /// The packs written (`pack/pack-<checksum>.pack`), the reachable objects' first.
    pub packs_written: Vec<String>,
    /// Objects nothing reaches, kept in the cruft pack (-a -d).
    pub unreachable_kept: u64,
    /// Objects nothing reaches, dropped as expired (-a -d).
    pub unreachable_dropped: u64,
    /// Packs removed (-d).
    pub packs_removed: u64,
    /// Loose objects removed because they are packed (-d).
    pub loose_removed: u64,
    /// Objects of the default clone's part (part 0) and its bytes in the pack (header
    /// included): a default clone is the pack's first `clone_bytes` bytes.
    pub clone_objects: u64,
    /// See [`RepackReport::clone_objects`].
    pub clone_bytes: u64,
    /// The bitmap written (-b).
    pub bitmap: Option<PathBuf>,
    /// The commit-graph written.
    pub commit_graph: Option<PathBuf>,
    /// With --write-midx -b: why the multi-pack-index was written without a bitmap.
    pub midx_bitmap_error: Option<String>,
}

/// Why a repack failed.
#[derive(Debug, thiserror::Error)]
pub enum RepackError {
    /// Another maintenance (repack) of the repository runs.
    #[error("another repack is running ({0})")]
    Busy(PathBuf),
    /// The lock could not be taken.
    #[error(transparent)]
    Lock(LockError),
    /// Reading objects or refs failed.
    #[error(transparent)]
    Odb(#[from] packd_odb::Error),
    /// The storage layer failed.
    #[error(transparent)]
    Storage(#[from] packd_storage::StorageError),
    /// Writing a pack failed.
    #[error(transparent)]
    Pack(#[from] PackFileError),
    /// Writing the cruft pack or removing the old packs failed.
    #[error(transparent)]
    Cruft(#[from] crate::cruft::CruftError),
    /// Writing the bitmap failed.
    #[error("writing the bitmap: {0}")]
    Bitmap(String),
    /// Writing the commit-graph failed.
    #[error("writing the commit-graph: {0}")]
    CommitGraph(String),
    /// Writing the multi-pack-index (--write-midx) failed.
    #[error("writing the multi-pack-index: {0}")]
    Midx(String),
    /// The repository has no objects storage of its own.
    #[error("{0}: no objects directory of its own")]
    NoStorage(String),
    /// Appending to the bitmapped pack failed.
    #[error(transparent)]
    Append(Box<crate::append::AppendError>),
}

impl From<LockError> for RepackError {
    fn from(e: LockError) -> Self {
        match e {
            LockError::Busy { path } => RepackError::Busy(path),
            other => RepackError::Lock(other),
        }
    }
}

/// The resident pages each mapped file of the repository may keep during a repack (see
/// `LocalStorage::with_map_budget`). A full repack reads every entry of the old packs, so
/// with no bound all of them stay mapped: git/git's whole 489 MB pack (RssFile) on top of
/// the heap, a third of the peak of `repack -adf`.
const MAP_BUDGET: u64 = 64 << 20;

/// How a repack opens the repository: the default delta base cache, a bound on mapped pages.
fn open_options() -> packd_odb::RepositoryOptions {
    packd_odb::RepositoryOptions {
        map_budget: Some(MAP_BUDGET),
        ..Default::default()
    }
}

/// The objects directory of `repo`.
fn objects_dir(repo: &Repository) -> PathBuf {
    repo.common_dir().join("objects")
}

/// Repacks the repository at `git_dir` (see the module documentation). The repository is
/// opened here, and again after the packs change (for the bitmap and the commit-graph).
pub fn repack(
    git_dir: &std::path::Path,
    options: &RepackOptions,
    progress: &dyn Progress,
) -> Result<RepackReport, RepackError> {
    let open = || Repository::open(git_dir, &open_options());
    let repo = open()?;
    let objects = objects_dir(&repo);
    let held = lock::try_maintenance(&objects)?;
    cleanup::remove_stale_temporaries(&objects);
    let storage = repo
        .objects()
        .own_storage()
        .ok_or_else(|| RepackError::NoStorage(git_dir.display().to_string()))?
        .clone();
    if let Some((report, graph_current)) = append_path(&repo, &held, options)? {
        // The old packs' maps and caches go before the commit-graph reads the new one.
        drop(repo);
        return after_append(git_dir, options, report, graph_current);
    }
    let settings = plan::Settings::from_config(&repo, options);
    let started = std::time::Instant::now();
    let planned = plan::plan(&repo, options, &settings, progress)?;
    tracing::debug!(
        "repack: {} objects counted and planned in {:.2?}",
        planned.objs.len(),
        started.elapsed()
    );
    let prior = if options.bitmap && options.all && !options.write_midx {
        prior_bitmaps(&planned.replaced_packs, &*storage)
    } else {
        None
    };
    let mut report = RepackReport::default();
    let mut written =
        write::write_packs(&repo, &storage, &planned, &settings, progress, &mut report)?;
    tracing::debug!("repack: written at {:.2?}", started.elapsed());
    if options.all && options.delete_redundant {
        // What the walk reached: the new pack's objects and those left in kept packs.
        let mut reachable_set: packd_odb::IdSet = planned.objs.iter().map(|o| o.id).collect();
        reachable_set.extend(planned.left_in_kept.iter().copied());
        let reachable = |id: &packd_odb::ObjectId| reachable_set.contains(id);
        let old = &planned.replaced_packs;
        let cruft_options = crate::cruft::CruftOptions::from_config(&repo, SystemTime::now())?;
        let outcome = crate::cruft::write_cruft_pack(&repo, &reachable, old, &cruft_options)?;
        report.unreachable_kept = outcome.kept.len() as u64;
        report.unreachable_dropped = outcome.dropped.len() as u64;
        if let Some(pack) = &outcome.pack {
            written.push(pack.clone());
        }
        let new_names: Vec<&str> = written.iter().map(|w| w.name.as_str()).collect();
        let pruned = crate::cruft::prune(&repo, &reachable, &outcome, old, &new_names)?;
        report.packs_removed = old
            .iter()
            .filter(|p| !new_names.contains(&p.name()))
            .count() as u64;
        report.loose_removed = pruned.loose as u64;
        if report.packs_removed > 0 {
            cleanup::remove_midx(&*storage)?;
        }
        tracing::debug!(
            "repack: cruft pack and prune done at {:.2?}",
            started.elapsed()
        );
    }
    let bitmap =
        options.bitmap && options.all && !options.write_midx && planned.left_in_kept.is_empty();
    if options.bitmap && options.all && !options.write_midx && !bitmap {
        // git's pack-objects: "disabling bitmap writing, as some objects are not being
        // packed" (a pack bitmap must cover everything its pack's commits reach).
        tracing::warn!(
            "no bitmap written: {} objects stay in kept packs",
            planned.left_in_kept.len()
        );
    }
    drop(planned);
    drop(repo);
    if options.delete_redundant {
        let repo = open()?;
        report.loose_removed += cleanup::prune_packed(&repo, &*storage)?;
    }
    if bitmap {
        let repo = open()?;
        let written = packd_reach::bitmap::write::write_bitmap_reusing(
            &repo,
            &*storage,
            &Default::default(),
            &NoProgress,
            prior.as_ref(),
        )
        .map_err(|e| RepackError::Bitmap(e.to_string()))?;
        drop(prior);
        report.bitmap = Some(written.bitmap_path);
        tracing::debug!("repack: bitmap written at {:.2?}", started.elapsed());
    }
    if options.write_midx {
        let repo = open()?;
        report.midx_bitmap_error = write_midx(&repo, &*storage, options.bitmap)?;
        tracing::debug!(
            "repack: multi-pack-index written at {:.2?}",
            started.elapsed()
        );
    }
    if options.commit_graph && options.all {
        let repo = open()?;
        report.commit_graph = write_commit_graph(&repo, &*storage)?;
        tracing::debug!("repack: commit-graph written at {:.2?}", started.elapsed());
    }
    report.packs_written = written.into_iter().map(|w| w.name).collect();
    Ok(report)
}

/// The commit-graph of what the refs reach, written into `storage`; where it is, if it holds
/// any commit. Another writer's graph put there meanwhile (a conflict), or its lock held (git's
/// `commit-graph write`, or a packd killed while writing, whose lock `cleanup` removes once it
/// is an hour old), leaves the graph there as it is, with a warning: a commit-graph is an
/// index that may lack commits, and the packs this repack wrote are in place already.
fn write_commit_graph(
    repo: &Repository,
    storage: &dyn packd_storage::Storage,
) -> Result<Option<PathBuf>, RepackError> {
    use packd_reach::commit_graph::CommitGraphError;
    use packd_storage::StorageError;
    match packd_reach::commit_graph::write_for_refs(repo, storage) {
        Ok(graph) => Ok((graph.commits > 0).then_some(graph.path)),
        Err(CommitGraphError::Storage(
            e @ (StorageError::Conflict { .. } | StorageError::Locked { .. }),
        )) => {
            tracing::warn!("repack: the commit-graph is left as it is: {e}");
            Ok(None)
        }
        Err(e) => Err(RepackError::CommitGraph(e.to_string())),
    }
}

/// `--write-midx`: the multi-pack-index over every pack of the repository now (git's
/// `midx_included_packs` without `--geometric`: the kept packs, the new ones and the old ones
/// not removed), with its bitmap if `bitmap` (then the packs' own bitmaps go, as git removes
/// those the multi-pack-index covers). The reason a bitmap could not be written (the packs
/// not closed under reachability: reachable objects loose), if so.
fn write_midx(
    repo: &Repository,
    storage: &dyn packd_storage::Storage,
    bitmap: bool,
) -> Result<Option<String>, RepackError> {
    let mut outcome = crate::geometric::GeometricOutcome::default();
    crate::geometric::write_midx(repo, bitmap, &[], &mut outcome)
        .map_err(|e| RepackError::Midx(e.to_string()))?;
    if outcome.bitmap {
        for name in storage.list("pack")? {
            if name.starts_with("pack-") && name.ends_with(".bitmap") {
                storage.delete(&format!("pack/{name}"))?;
            }
        }
    }
    Ok(outcome.bitmap_error)
}

/// The bitmap of the one pack a full repack replaces, when it has one, kept (with the ids it
/// numbers) so that the new bitmap reuses its commits' bitmaps; `None` otherwise, or when it
/// cannot be read (the new bitmap is then built from nothing).
fn prior_bitmaps(
    replaced: &[std::sync::Arc<packd_odb::pack::Pack>],
    storage: &dyn packd_storage::Storage,
) -> Option<packd_reach::bitmap::reuse::PriorBitmaps> {
    let [pack] = replaced else { return None };
    let opened = packd_reach::bitmap::PackBitmap::open_for_pack(storage, pack)
        .map_err(|e| e.to_string())
        .and_then(|b| {
            b.map(|b| packd_reach::bitmap::reuse::PriorBitmaps::of_pack(b, pack))
                .transpose()
                .map_err(|e| e.to_string())
        });
    match opened {
        Ok(prior) => prior,
        Err(e) => {
            tracing::debug!("repack: the old bitmap is not reused: {e}");
            None
        }
    }
}

/// The append path (see the module documentation): `Some(report)` when it was taken, with
/// whether the commit-graph holds the reachable commits already and B was kept unchanged (then
/// it is not written again).
fn append_path(
    repo: &Repository,
    held: &lock::Held,
    options: &RepackOptions,
) -> Result<Option<(RepackReport, bool)>, RepackError> {
    if !(options.all && options.delete_redundant && options.bitmap)
        || options.no_reuse_delta
        || options.no_reuse_object
        || options.rewrite
        // These ask for other packs than one (kept ones named here, a multi-pack-index over
        // several, the unreachable objects packed too): the full repack handles them.
        || !options.keep_packs.is_empty()
        || options.write_midx
        || options.keep_unreachable
        // A depth asked for (--depth, pack.depth) may be below the chains of B, which the
        // append path keeps as they are: the full repack cuts them to it.
        || options.depth.is_some()
        || repo.config().get("pack.depth").is_some()
    {
        return Ok(None);
    }
    let started = std::time::Instant::now();
    let surveyed = match crate::append::survey(repo) {
        Ok(s) => s,
        Err(e) => {
            tracing::debug!("repack: not appending: {e}");
            return Ok(None);
        }
    };
    if !surveyed.base_all_reachable() {
        tracing::debug!(
            "repack: not appending: {} holds unreachable objects",
            surveyed.base().name()
        );
        return Ok(None);
    }
    let graph_current = options.commit_graph && commit_graph_holds(repo, &surveyed);
    let base_objects = surveyed.base().len() as u64;
    let outcome = crate::append::append_surveyed(repo, held, surveyed, &|| Ok(()))
        .map_err(|e| RepackError::Append(Box::new(e)))?;
    tracing::debug!(
        "repack: appended to the bitmapped pack in {:.2?}: {outcome:?}",
        started.elapsed()
    );
    let objects_dir = objects_dir(repo);
    let mut report = RepackReport {
        objects: base_objects + outcome.appended,
        reused: base_objects + outcome.reused,
        deltas: outcome.deltas,
        reused_deltas: outcome.deltas,
        unreachable_kept: outcome.unreachable_kept,
        unreachable_dropped: outcome.unreachable_dropped,
        packs_removed: outcome.packs_removed,
        loose_removed: outcome.loose_removed,
        bitmap: packd_reach::bitmap::bitmap_name(&outcome.pack).map(|n| objects_dir.join(n)),
        ..Default::default()
    };
    report.packs_written = std::iter::once(outcome.pack.clone())
        .chain(outcome.cruft_pack.clone())
        .collect();
    Ok(Some((report, graph_current && outcome.unchanged)))
}

/// What the append path does once the packs are in place: loose objects now packed removed,
/// the commit-graph written unless `graph_current`.
fn after_append(
    git_dir: &std::path::Path,
    options: &RepackOptions,
    mut report: RepackReport,
    graph_current: bool,
) -> Result<RepackReport, RepackError> {
    let open = || Repository::open(git_dir, &Default::default());
    let storage = {
        let repo = open()?;
        let storage = repo
            .objects()
            .own_storage()
            .ok_or_else(|| RepackError::NoStorage(git_dir.display().to_string()))?
            .clone();
        report.loose_removed += cleanup::prune_packed(&repo, &*storage)?;
        storage
    };
    if options.commit_graph && !graph_current {
        let repo = open()?;
        report.commit_graph = write_commit_graph(&repo, &*storage)?;
    } else if options.commit_graph {
        tracing::debug!("repack: the commit-graph holds the reachable commits already");
    }
    Ok(report)
}

/// Whether the repository's commit-graph holds exactly the commits the refs reach.
fn commit_graph_holds(repo: &Repository, surveyed: &crate::append::Survey) -> bool {
    let Some(graph) = repo.commit_graph() else {
        return false;
    };
    let commits = surveyed.reachable_commits();
    graph.len() as usize == commits.len() && commits.iter().all(|c| graph.lookup(c).is_some())
}
