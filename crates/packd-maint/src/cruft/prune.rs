//! The delete step of a cruft repack: old packs and loose objects removed, without losing an
//! object a push made reachable meanwhile.
//!
//! ```text
//! prune lock taken exclusively  (waits for every push between "pack received" and
//!                                "refs updated": they hold it shared, see crate::lock)
//! refs read again               the refs as they are now, after those pushes
//! walk from each ref            through everything the repack did not keep (new objects of
//!                               a push, dropped objects), stopping at objects the new packs
//!                               or the cruft pack hold
//! dropped objects it reaches    rescued: written back as loose objects (or their loose
//!                               file left in place)
//! old packs, loose files        deleted
//! prune lock released
//! ```
//!
//! How the race is closed: collection decided "unreachable" from refs read before it, and a
//! push may since have received a pack naming one of those objects (a thin pack's base, a
//! deleted branch pushed again) and be about to update its ref. Such a push holds the prune
//! lock shared from before its connectivity check until its ref transaction is done
//! (`packd_protocol::receive_pack`); the exclusive lock here therefore waits for it, and the
//! refs read after that include its update, so the walk finds and rescues what it reaches. A
//! push that takes the lock after this step sees the repository after the deletion: its
//! connectivity check finds a deleted object missing and refuses the push, rather than a ref
//! pointing at nothing. Objects a push wrote (its migrated pack, its loose objects) are in no
//! old pack and in no listing made before they were written, so they are never deleted. The
//! lock is held only for the walk (short: refs that did not move stop it at once), the
//! rescue and the unlinks, never while packs are written.

use super::{expire::links, CruftError, CruftOutcome};
use crate::lock;
use packd_odb::pack::Pack;
use packd_odb::{IdSet, ObjectId, Repository};
use packd_storage::{Storage, StorageError};
use std::collections::HashSet;
use std::io::Write;
use std::sync::Arc;

/// What the delete step did.
#[derive(Debug, Default)]
pub struct Pruned {
    /// Dropped objects that refs updated meanwhile reach: kept as loose objects.
    pub rescued: Vec<ObjectId>,
    /// Files of old packs deleted (`.pack`, `.idx`, `.rev`, `.bitmap`, `.mtimes`).
    pub pack_files: usize,
    /// Loose objects deleted.
    pub loose: usize,
}

/// The suffixes of a pack's files that go with it.
const PACK_FILES: [&str; 5] = ["idx", "rev", "bitmap", "mtimes", "pack"];

/// Under the prune lock: reads the refs again, rescues the objects `outcome` dropped that
/// they now reach, then deletes `old_packs` (but never the cruft pack or one named in
/// `new_packs`: a pack written again with the same objects has the same name) and the loose objects listed at
/// collection. `reachable` is the one given to [`super::write_cruft_pack`]: what the new packs
/// hold; the walk stops there and at the cruft pack's objects.
pub fn prune(
    repo: &Repository,
    reachable: &dyn Fn(&ObjectId) -> bool,
    outcome: &CruftOutcome,
    old_packs: &[Arc<Pack>],
    new_packs: &[&str],
) -> Result<Pruned, CruftError> {
    let stays = |id: &ObjectId| reachable(id) || outcome.keeps(id);
    let (dropped, loose) = (&outcome.dropped, &outcome.loose);
    let objects_dir = repo.common_dir().join("objects");
    let storage =
        repo.objects().own_storage().cloned().ok_or_else(|| {
            CruftError::Unsupported("a repository without its own objects".into())
        })?;
    let _prune = lock::prune_guard(&objects_dir)?;
    let dropped_set: IdSet = dropped.iter().copied().collect();
    let rescued = rescue_reached(repo, &stays, &dropped_set)?;
    let loose_set: HashSet<ObjectId> = loose.iter().copied().collect();
    for id in &rescued {
        if !loose_set.contains(id) {
            write_loose(repo, &*storage, id)?;
        }
    }
    let rescued_set: HashSet<ObjectId> = rescued.iter().copied().collect();
    let mut pruned = Pruned {
        rescued,
        ..Pruned::default()
    };
    let written = outcome.pack.as_ref().map(|p| p.name.as_str());
    let replaced = |p: &&Arc<Pack>| !new_packs.contains(&p.name()) && written != Some(p.name());
    for pack in old_packs.iter().filter(replaced) {
        let Some(stem) = pack.name().strip_suffix(".pack") else {
            continue;
        };
        for ext in PACK_FILES {
            if storage.delete(&format!("{stem}.{ext}"))? {
                pruned.pack_files += 1;
            }
        }
    }
    for id in loose {
        if rescued_set.contains(id) {
            continue;
        }
        let hex = id.to_hex();
        if storage.delete(&format!("{}/{}", &hex[..2], &hex[2..]))? {
            pruned.loose += 1;
        }
    }
    tracing::debug!(
        rescued = pruned.rescued.len(),
        pack_files = pruned.pack_files,
        loose = pruned.loose,
        "cruft prune"
    );
    Ok(pruned)
}

/// The objects of `dropped` the repository's refs reach now, walking from every ref through
/// whatever does not stay (a push's new objects, dropped ones).
fn rescue_reached(
    repo: &Repository,
    stays: &dyn Fn(&ObjectId) -> bool,
    dropped: &IdSet,
) -> Result<Vec<ObjectId>, CruftError> {
    let mut todo: Vec<ObjectId> = repo
        .refs()
        .list("refs/")?
        .into_iter()
        .map(|(_, id)| id)
        .collect();
    if let Some(head) = repo.refs().resolve_full("HEAD")? {
        todo.push(head);
    }
    let mut seen: HashSet<ObjectId> = HashSet::new();
    let mut rescued = Vec::new();
    while let Some(id) = todo.pop() {
        if stays(&id) || !seen.insert(id) {
            continue;
        }
        if dropped.contains(&id) {
            rescued.push(id);
        }
        todo.extend(links(repo.objects(), &id)?);
    }
    rescued.sort_unstable();
    Ok(rescued)
}

/// Writes `id` (still readable from its old pack) as a loose object, zlib-compressed as git
/// writes them; one that exists already is left as it is.
fn write_loose(repo: &Repository, storage: &dyn Storage, id: &ObjectId) -> Result<(), CruftError> {
    let Some(object) = repo.objects().read(id)? else {
        return Ok(());
    };
    let mut raw = format!("{} {}\0", object.kind.name(), object.data.len()).into_bytes();
    raw.extend_from_slice(&object.data);
    let mut compressor = libdeflater::Compressor::new(libdeflater::CompressionLvl::default());
    let mut compressed = vec![0u8; compressor.zlib_compress_bound(raw.len())];
    let n = compressor
        .zlib_compress(&raw, &mut compressed)
        .map_err(|e| CruftError::Unsupported(format!("compressing {id}: {e}")))?;
    let hex = id.to_hex();
    let name = format!("{}/{}", &hex[..2], &hex[2..]);
    let mut blob = storage.create(&name)?;
    blob.write_all(&compressed[..n])
        .map_err(|source| CruftError::Io {
            path: storage.describe(&name),
            source,
        })?;
    match blob.publish() {
        Ok(()) | Err(StorageError::AlreadyExists { .. }) => Ok(()),
        Err(e) => Err(e.into()),
    }
}
