//! Geometric repacking, as `git repack --geometric=<factor> -d --write-midx`: the packs are
//! kept in a geometric progression of object counts (each at least `factor` times the one
//! below), so that a repository receiving pushes rewrites only its small new packs, never the
//! large old ones, and the number of packs grows with the logarithm of the objects.
//!
//! ```text
//! packs by object count   1  1  3  8  20 200          (keep packs and cruft packs left out)
//! split (factor 2)        [1  1  3] 8  20 200         the largest ones in progression stay;
//!                                                     what is below, and whatever must join it
//!                                                     for the progression to hold, is rolled up
//! roll up                 5 + loose objects -> one new pack (roll_up: entries reused)
//! multi-pack-index        over every pack but the rolled-up ones, and its bitmap
//! delete                  rolled-up packs (.idx first), then the loose objects packed
//! ```
//!
//! Files are deleted only once the new pack and the multi-pack-index naming the packs that
//! stay are durable; a reader that opened a deleted pack keeps reading it (the file stays open
//! or mapped). Everything runs under the maintenance lock ([`crate::lock`]), so it never runs
//! beside another maintenance of the same repository, in this process or another.

use crate::lock::{self, Held, LockError};
use crate::roll_up::{roll_up, RollUpError};
use packd_odb::loose::LooseStore;
use packd_odb::pack::multi_index::write::{MidxPack, MidxPlan};
use packd_odb::pack::Pack;
use packd_odb::{ObjectId, Repository, RepositoryOptions};
use packd_reach::bitmap::write::{write_midx_bitmap_leaving_out, WriteError, WriteOptions};
use packd_reach::progress::NoProgress;
use packd_storage::{Storage, StorageError};
use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// What a geometric repack does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GeometricOptions {
    /// Each pack that stays holds at least this many times the objects of the next smaller
    /// one (git's `--geometric=<factor>`); at least 1.
    pub factor: u32,
    /// Write a multi-pack-index over the packs that stay and the new one (`--write-midx`).
    pub write_midx: bool,
    /// Write the multi-pack-index's bitmap too (needs `write_midx`).
    pub write_bitmap: bool,
    /// Delete the rolled-up packs and the loose objects packed (`-d`).
    pub delete: bool,
}

impl Default for GeometricOptions {
    /// Factor 2, multi-pack-index, bitmap, deleting: what maintenance after pushes does.
    fn default() -> Self {
        GeometricOptions {
            factor: 2,
            write_midx: true,
            write_bitmap: true,
            delete: true,
        }
    }
}

/// What a geometric repack did.
#[derive(Debug, Clone, Default)]
pub struct GeometricOutcome {
    /// The repository's own packs before.
    pub packs_before: usize,
    /// Its packs after.
    pub packs_after: usize,
    /// The packs rolled up (`pack-<hex>.idx` names).
    pub rolled_up: Vec<String>,
    /// The pack written (`pack-<hex>.idx`), if any.
    pub new_pack: Option<String>,
    /// Objects in it.
    pub new_pack_objects: u32,
    /// Loose objects packed into it.
    pub loose_packed: usize,
    /// Whether a multi-pack-index was written.
    pub midx: bool,
    /// Whether its bitmap was written.
    pub bitmap: bool,
    /// Why the bitmap could not be written (the multi-pack-index was written without one).
    pub bitmap_error: Option<String>,
}

/// Why a geometric repack failed. Nothing was deleted unless the new pack and
/// multi-pack-index were in place first.
#[derive(Debug, thiserror::Error)]
pub enum GeometricError {
    /// The factor is 0.
    #[error("--geometric: the factor must be at least 1, not {0}")]
    BadFactor(u32),
    /// Another maintenance holds the repository, or its lock failed.
    #[error(transparent)]
    Lock(#[from] LockError),
    /// Reading the repository failed.
    #[error(transparent)]
    Odb(#[from] packd_odb::Error),
    /// Writing the new pack failed.
    #[error(transparent)]
    RollUp(#[from] RollUpError),
    /// Writing the multi-pack-index or its bitmap failed.
    #[error(transparent)]
    Midx(#[from] WriteError),
    /// Writing or deleting a file failed.
    #[error(transparent)]
    Storage(#[from] StorageError),
    /// The repository's objects are not in a writable local directory.
    #[error("{0}: not a local objects directory; only local repositories can be repacked")]
    NotLocal(String),
}

/// How many of the packs whose object counts are `weights` (in ascending order) a geometric
/// repack with `factor` rolls up: always the smallest ones. git's `split_pack_geometry`:
/// from the largest pack down, the packs that already form a progression stay; the pack
/// where it breaks and all below are rolled up; then the next larger packs join them while
/// the rolled-up total times `factor` exceeds them, so that the new pack keeps the
/// progression (counts in u64, which cannot overflow for u32 counts and factors).
pub fn split(weights: &[u32], factor: u32) -> usize {
    debug_assert!(weights.windows(2).all(|w| w[0] <= w[1]));
    let factor = u64::from(factor);
    let n = weights.len();
    if n == 0 {
        return 0;
    }
    let mut i = n - 1;
    while i > 0 && u64::from(weights[i]) >= factor * u64::from(weights[i - 1]) {
        i -= 1;
    }
    let mut split = if i > 0 { i + 1 } else { 0 };
    let mut total: u64 = weights[..split].iter().map(|&w| u64::from(w)).sum();
    while split < n && u64::from(weights[split]) < factor * total {
        total += u64::from(weights[split]);
        split += 1;
    }
    split
}

/// One of the repository's own packs, as the repack sees it.
struct PackInfo {
    pack: Arc<Pack>,
    /// `pack-<hex>.idx`.
    idx_name: String,
    /// Has a `.keep` file: never rolled up (and not counted in the progression).
    keep: bool,
    /// Has a `.mtimes` file (a cruft pack): left alone.
    cruft: bool,
}

/// The `.idx` file name of a pack, `pack-<hex>.idx`.
fn idx_file_name(pack: &Pack) -> String {
    let name = pack.name().rsplit('/').next().unwrap_or(pack.name());
    format!("{}.idx", name.strip_suffix(".pack").unwrap_or(name))
}

/// The objects directory of a repository.
fn objects_dir(repo: &Repository) -> PathBuf {
    repo.common_dir().join("objects")
}

/// The repository's own storage (its objects directory, not its alternates').
fn own_storage(repo: &Repository) -> Result<Arc<dyn Storage>, GeometricError> {
    repo.objects()
        .own_storage()
        .cloned()
        .ok_or_else(|| GeometricError::NotLocal(objects_dir(repo).display().to_string()))
}

/// The repository's own packs with their `.keep` and cruft marks, in name order.
fn own_packs(repo: &Repository, storage: &Arc<dyn Storage>) -> Vec<PackInfo> {
    repo.objects()
        .packs_with_storage()
        .filter(|(s, _)| Arc::ptr_eq(s, storage))
        .map(|(_, p)| {
            let idx_name = idx_file_name(p);
            let stem = idx_name.trim_end_matches(".idx");
            PackInfo {
                pack: p.clone(),
                keep: storage.exists(&format!("pack/{stem}.keep")),
                cruft: storage.exists(&format!("pack/{stem}.mtimes")),
                idx_name,
            }
        })
        .collect()
}

/// Runs a geometric repack of `repo` (git's `repack --geometric=<factor>`, with
/// `--write-midx` and `-d` as `options` say), taking the repository's maintenance lock
/// first: [`LockError::Busy`] if another maintenance holds it.
pub fn geometric_repack(
    repo: &Repository,
    options: &GeometricOptions,
) -> Result<GeometricOutcome, GeometricError> {
    let held = lock::try_maintenance(&objects_dir(repo))?;
    geometric_repack_locked(repo, options, &held)
}

/// [`geometric_repack`] for a caller that holds the maintenance lock already (maintenance
/// that does more under the same lock). The repository is read afresh from disk; `repo`
/// only says where it is.
pub fn geometric_repack_locked(
    repo: &Repository,
    options: &GeometricOptions,
    held: &Held,
) -> Result<GeometricOutcome, GeometricError> {
    geometric_repack_leaving(repo, options, held, &HashSet::new())
}

/// [`geometric_repack_locked`] that leaves the packs named in `untouched` (`pack-<hex>.idx`)
/// out of the progression: they are neither rolled up nor counted, as `.keep` packs. Maintenance
/// after a small push rolls up only the packs outside the multi-pack-index this way (with
/// `write_midx` off), so that the multi-pack-index and its bitmap stay valid unwritten.
pub fn geometric_repack_leaving(
    repo: &Repository,
    options: &GeometricOptions,
    _held: &Held,
    untouched: &HashSet<String>,
) -> Result<GeometricOutcome, GeometricError> {
    if options.factor == 0 {
        return Err(GeometricError::BadFactor(options.factor));
    }
    let repo = Repository::open(repo.git_dir(), &RepositoryOptions::default())?;
    let storage = own_storage(&repo)?;
    let packs = own_packs(&repo, &storage);
    let mut outcome = GeometricOutcome {
        packs_before: packs.len(),
        ..Default::default()
    };

    let mut candidates: Vec<&PackInfo> = packs
        .iter()
        .filter(|p| !p.keep && !p.cruft && !untouched.contains(&p.idx_name))
        .collect();
    candidates.sort_by(|a, b| (a.pack.len(), &a.idx_name).cmp(&(b.pack.len(), &b.idx_name)));
    let weights: Vec<u32> = candidates.iter().map(|p| p.pack.len()).collect();
    let rolled: Vec<&PackInfo> = candidates[..split(&weights, options.factor)].to_vec();
    let mut loose: Vec<ObjectId> = Vec::new();
    LooseStore::new(storage.clone()).all_ids(&mut loose)?;
    loose.sort_unstable();

    // One pack alone and nothing loose: rolling it up would write the same pack again.
    let roll = rolled.len() > 1 || !loose.is_empty();
    if roll {
        // Oldest first: a push's thin pack holds deltas against bases it carries again
        // whole at its end, which an older pack has already; written first, those keep their
        // deltas, and the later pack's deltas are reused against them.
        let mut sources: Vec<(std::time::SystemTime, &str, Arc<Pack>)> = rolled
            .iter()
            .map(|p| {
                (
                    modified(Path::new(p.pack.data_name())),
                    p.idx_name.as_str(),
                    p.pack.clone(),
                )
            })
            .collect();
        sources.sort_by(|a, b| (a.0, a.1).cmp(&(b.0, b.1)));
        let sources: Vec<Arc<Pack>> = sources.into_iter().map(|(_, _, p)| p).collect();
        if let Some(new) = roll_up(&storage, repo.objects(), &sources, &loose)? {
            outcome.new_pack_objects = new.objects;
            outcome.new_pack = Some(new.idx_name);
        }
        outcome.rolled_up = rolled.iter().map(|p| p.idx_name.clone()).collect();
        outcome.loose_packed = loose.len();
    }
    // A rolled-up pack the new one is identical to stays.
    let leave_out: Vec<String> = outcome
        .rolled_up
        .iter()
        .filter(|n| Some(*n) != outcome.new_pack.as_ref())
        .cloned()
        .collect();

    if options.write_midx {
        // Read again: the new pack, and any a push added meanwhile, are in.
        let fresh = Repository::open(repo.git_dir(), &RepositoryOptions::default())?;
        write_midx(&fresh, options.write_bitmap, &leave_out, &mut outcome)?;
    }
    if options.delete {
        delete_rolled_up(storage.as_ref(), &leave_out)?;
        if outcome.new_pack.is_some() {
            for id in &loose {
                let hex = id.to_hex();
                storage.delete(&format!("{}/{}", &hex[..2], &hex[2..]))?;
            }
        }
    }
    let after = Repository::open(repo.git_dir(), &RepositoryOptions::default())?;
    outcome.packs_after = own_storage(&after).map(|s| own_packs(&after, &s).len())?;
    Ok(outcome)
}

/// Writes the multi-pack-index over the repository's packs but `leave_out` (`pack-<hex>.idx`
/// names), with its bitmap if `write_bitmap` and possible (else without, the reason kept in
/// `outcome`). `packd repack --write-midx` without `--geometric` writes it this way too.
pub(crate) fn write_midx(
    repo: &Repository,
    write_bitmap: bool,
    leave_out: &[String],
    outcome: &mut GeometricOutcome,
) -> Result<(), GeometricError> {
    let storage = own_storage(repo)?;
    if write_bitmap {
        let bitmap_options = WriteOptions {
            midx: true,
            ..WriteOptions::default()
        };
        let written =
            write_midx_bitmap_leaving_out(repo, &*storage, &bitmap_options, &NoProgress, leave_out);
        match written {
            Ok(_) => {
                outcome.midx = true;
                outcome.bitmap = true;
                return Ok(());
            }
            // No ref reaches the packs, or they are not closed (a push's objects still
            // loose, a ref to an object in an alternate): a multi-pack-index alone.
            Err(e @ (WriteError::NoTips { .. } | WriteError::PacksNotClosed { .. })) => {
                outcome.bitmap_error = Some(e.to_string());
            }
            Err(e) => return Err(e.into()),
        }
    }
    // The version replaced, read before the packs are listed (compare-and-swap: another
    // writer's multi-pack-index put there since fails this write rather than being lost).
    let name = "pack/multi-pack-index";
    let current = storage.read_versioned(name)?.map(|(_, version)| version);
    let mut inputs = Vec::new();
    for info in own_packs(repo, &storage) {
        if leave_out.contains(&info.idx_name) {
            continue;
        }
        let mtime = mtime_seconds(Path::new(info.pack.data_name()));
        inputs.push(MidxPack::from_index(
            &info.idx_name,
            mtime,
            info.pack.index(),
        )?);
    }
    if inputs.is_empty() {
        return Ok(());
    }
    let bytes = MidxPlan::new(inputs, None)?.to_bytes(true);
    storage.replace(name, current.as_ref(), &bytes)?;
    outcome.midx = true;
    Ok(())
}

/// A file's modification time (the epoch if unknown).
fn modified(path: &Path) -> std::time::SystemTime {
    std::fs::metadata(path)
        .and_then(|m| m.modified())
        .unwrap_or(std::time::UNIX_EPOCH)
}

/// A file's modification time in whole seconds since the epoch (0 if unknown).
fn mtime_seconds(path: &Path) -> i64 {
    std::fs::metadata(path)
        .and_then(|m| m.modified())
        .ok()
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map_or(0, |d| d.as_secs() as i64)
}

/// Deletes the packs named (`pack-<hex>.idx`): the index first, so that no reader opens the
/// pack any more, then its data, reverse index and bitmap.
fn delete_rolled_up(storage: &dyn Storage, idx_names: &[String]) -> Result<(), StorageError> {
    for idx in idx_names {
        let stem = idx.trim_end_matches(".idx");
        for ext in ["idx", "pack", "rev", "bitmap"] {
            storage.delete(&format!("pack/{stem}.{ext}"))?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::split;

    #[test]
    fn an_intact_progression_stays() {
        // t7703 "--geometric with an intact progression": 3, 6 and 12 objects.
        assert_eq!(split(&[3, 6, 12], 2), 0);
        assert_eq!(split(&[], 2), 0);
        assert_eq!(split(&[5], 2), 0);
        assert_eq!(split(&[1, 2, 4, 8, 16], 2), 0);
    }

    #[test]
    fn the_small_packs_roll_up() {
        // t7703 "--geometric with small-pack rollup": 3, 3, 12 and 24 objects (one commit of
        // three objects, another, then 4 and 8): the two small ones become one of 6.
        assert_eq!(split(&[3, 3, 12, 24], 2), 2);
        // Equal packs at the top: the progression breaks at once, everything rolls up.
        assert_eq!(split(&[3, 3, 12, 24, 24], 2), 5);
    }

    #[test]
    fn a_large_pack_joins_when_the_rolled_up_one_would_outgrow_it() {
        // t7703 "--geometric with small- and large-pack rollup" in spirit: 1 and 1 break
        // the progression at the bottom; their total (2) times 2 is 4, more than the next
        // pack (3), which joins them; 5 times 2 is 10, less than 20, which stays.
        assert_eq!(split(&[1, 1, 3, 20, 100], 2), 3);
        // A chain of joins: 2, then 3 < 4 joins (5), 7 < 10 (12), 15 < 24 (27); 100 stays.
        assert_eq!(split(&[1, 1, 3, 7, 15, 100], 2), 5);
    }

    #[test]
    fn the_factor_counts() {
        assert_eq!(split(&[1, 2, 4], 3), 3);
        assert_eq!(split(&[1, 3, 9], 3), 0);
        assert_eq!(split(&[1, 1, 1], 1), 0);
        assert_eq!(split(&[u32::MAX, u32::MAX], u32::MAX), 2);
    }
}
