//! Removing what a repack made redundant, only once the new packs are published (durable):
//! a multi-pack-index over removed packs, loose objects now packed, and the temporary files of
//! writers killed long ago (old packs go through `crate::cruft::prune`).

use super::RepackError;
use packd_odb::Repository;
use packd_storage::Storage;
use std::path::Path;
use std::time::{Duration, SystemTime};

/// Temporary files and index-less packs younger than this may belong to a writer still
/// running (a push's `index-pack`, another process's write): left alone.
const STALE: Duration = Duration::from_secs(3600);

/// Removes `tmp_packd_*` files, lock files (`*.lock`: `commit-graph.lock`,
/// `multi-pack-index.lock`, a `.bitmap`'s) and packs without an index over an hour old from
/// `objects/pack` and `objects/info`: what writers killed mid-write leave (a writer holds a
/// lock for seconds; one an hour old would refuse every later write of its file, packd's and
/// git's). Errors are logged, not fatal: nothing depends on these files being gone. A local
/// disk's leftovers only: a bucket has no temporary files, and its listing carries no ages.
pub(super) fn remove_stale_temporaries(objects: &Path) {
    let now = SystemTime::now();
    for dir in ["pack", "info"] {
        let Ok(entries) = std::fs::read_dir(objects.join(dir)) else {
            continue;
        };
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            let orphan = name.starts_with("pack-")
                && name.ends_with(".pack")
                && !objects
                    .join(dir)
                    .join(name.replace(".pack", ".idx"))
                    .exists();
            if !(name.starts_with("tmp_packd_") || name.ends_with(".lock") || orphan) {
                continue;
            }
            let old = entry
                .metadata()
                .and_then(|m| m.modified())
                .ok()
                .and_then(|m| now.duration_since(m).ok())
                .is_some_and(|age| age > STALE);
            if old {
                match std::fs::remove_file(entry.path()) {
                    Ok(()) => tracing::info!("removed stale {}", entry.path().display()),
                    Err(e) => tracing::warn!("{}: {e}", entry.path().display()),
                }
            }
        }
    }
}

/// Removes the multi-pack-index and its bitmap and `.rev` (they name packs just removed).
pub(super) fn remove_midx(storage: &dyn Storage) -> Result<(), RepackError> {
    storage.delete("pack/multi-pack-index")?;
    for name in storage.list("pack")? {
        if name.starts_with("multi-pack-index-") {
            storage.delete(&format!("pack/{name}"))?;
        }
    }
    Ok(())
}

/// `git prune-packed`: removes the loose objects that a pack holds; returns how many.
pub(super) fn prune_packed(repo: &Repository, storage: &dyn Storage) -> Result<u64, RepackError> {
    let odb = repo.objects();
    let mut removed = 0;
    let mut dirs = std::collections::BTreeSet::new();
    for id in odb.loose_ids()? {
        if odb.locate_packed(&id)?.is_none() {
            continue;
        }
        let hex = id.to_string();
        if storage.delete(&format!("{}/{}", &hex[..2], &hex[2..]))? {
            removed += 1;
            dirs.insert(hex[..2].to_string());
        }
    }
    // Emptied fan-out directories go, as git's prune-packed removes them.
    let objects = repo.common_dir().join("objects");
    for dir in dirs {
        let _ = std::fs::remove_dir(objects.join(dir));
    }
    Ok(removed)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Sets `path`'s mtime to `ago` before now (with touch: no crate for it here).
    fn age(path: &Path, ago: &str) {
        let status = std::process::Command::new("touch")
            .arg("-d")
            .arg(ago)
            .arg(path)
            .status()
            .unwrap();
        assert!(status.success());
    }

    #[test]
    fn stale_temporaries_and_orphan_packs_go_young_ones_stay() {
        let dir = tempfile::tempdir().unwrap();
        let pack = dir.path().join("pack");
        std::fs::create_dir_all(&pack).unwrap();
        for name in [
            "tmp_packd_1_0",
            "tmp_packd_1_1",
            "pack-aa.pack",
            "pack-bb.pack",
            "pack-bb.idx",
            "tmp_pack_git",
            "multi-pack-index.lock",
            "pack-bb.bitmap.lock",
        ] {
            std::fs::write(pack.join(name), b"x").unwrap();
        }
        for name in [
            "tmp_packd_1_0",
            "pack-aa.pack",
            "pack-bb.pack",
            "tmp_pack_git",
            "multi-pack-index.lock",
        ] {
            age(&pack.join(name), "2 hours ago");
        }
        remove_stale_temporaries(dir.path());
        let mut left: Vec<String> = std::fs::read_dir(&pack)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        left.sort();
        assert_eq!(
            left,
            [
                "pack-bb.bitmap.lock",
                "pack-bb.idx",
                "pack-bb.pack",
                "tmp_pack_git",
                "tmp_packd_1_1"
            ]
        );
    }
}
