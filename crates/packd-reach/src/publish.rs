//! Putting the files this crate writes into the repository's objects storage, through the
//! storage layer's write operations (`packd_storage::write`), so that the same writers fill a
//! local `objects/` directory and a bucket prefix.
//!
//! ```text
//! pack/pack-<checksum>.rev          put_read_only: named for the pack it describes; created
//! pack/pack-<checksum>.bitmap       if absent, kept if it holds the same bytes, else replaced
//! pack/multi-pack-index-<c>.bitmap  by compare-and-swap against the bytes just read (0444)
//! pack/multi-pack-index             Storage::replace against the version read before the
//!                                   writer planned it (0644, as git's lock file leaves it)
//! info/commit-graph                 Storage::replace_read_only, likewise (0444, as git)
//! ```
//!
//! A `.bitmap` is named for its pack, not for its own bytes: written again (other refs, other
//! options) it holds other bytes under the same name, which git's `repack` renames over the old
//! file. Either file describes the same pack correctly, so replacing it is safe for readers;
//! doing it by compare-and-swap makes two writers racing on it fail rather than interleave.

use packd_storage::{Storage, StorageError};
use std::io::Write;

/// Publishes `bytes` as blob `name`, a file git keeps read-only that is named for what it
/// describes (see the module documentation): created if absent, left alone if it holds exactly
/// these bytes, else replaced if it is still what was read here. A writer that created or
/// changed it in between makes this [`StorageError::Conflict`].
pub(crate) fn put_read_only(
    storage: &dyn Storage,
    name: &str,
    bytes: &[u8],
) -> Result<(), StorageError> {
    match storage.read_versioned(name)? {
        None => {
            let mut blob = storage.create(name)?;
            blob.write_all(bytes).map_err(|source| StorageError::Io {
                name: storage.describe(name),
                source,
            })?;
            match blob.publish() {
                Ok(()) => Ok(()),
                // Created by another writer since it was found absent.
                Err(StorageError::AlreadyExists { name }) => Err(StorageError::Conflict { name }),
                Err(e) => Err(e),
            }
        }
        Some((old, _)) if old[..] == *bytes => Ok(()),
        Some((_, version)) => storage
            .replace_read_only(name, Some(&version), bytes)
            .map(|_| ()),
    }
}

/// Deletes the blobs of directory `dir` whose names `stale` picks, logging (not failing on)
/// what cannot be listed or deleted: files left behind by an earlier write, which nothing
/// reads once the file naming them is replaced.
pub(crate) fn delete_stale(storage: &dyn Storage, dir: &str, stale: impl Fn(&str) -> bool) {
    let names = match storage.list(dir) {
        Ok(names) => names,
        Err(e) => {
            tracing::warn!("could not list {}: {e}", storage.describe(dir));
            return;
        }
    };
    for name in names.iter().filter(|n| stale(n)) {
        if let Err(e) = storage.delete(&format!("{dir}/{name}")) {
            tracing::warn!("could not remove the stale {name}: {e}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use packd_storage::LocalStorage;

    #[test]
    fn a_read_only_file_is_created_kept_or_replaced_and_a_race_is_a_conflict() {
        let dir = tempfile::tempdir().unwrap();
        let s = LocalStorage::new(dir.path());
        let path = dir.path().join("pack/pack-1.bitmap");
        put_read_only(&s, "pack/pack-1.bitmap", b"one").unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"one");
        assert!(std::fs::metadata(&path).unwrap().permissions().readonly());
        put_read_only(&s, "pack/pack-1.bitmap", b"one").unwrap();
        put_read_only(&s, "pack/pack-1.bitmap", b"two").unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"two");
        assert!(std::fs::metadata(&path).unwrap().permissions().readonly());
        // Git's lock on the file (or another writer's) is a refusal, not an overwrite.
        std::fs::write(dir.path().join("pack/pack-1.bitmap.lock"), b"").unwrap();
        assert!(matches!(
            put_read_only(&s, "pack/pack-1.bitmap", b"three"),
            Err(StorageError::Locked { .. })
        ));
        assert_eq!(std::fs::read(&path).unwrap(), b"two");
        let names = s.list("pack").unwrap();
        assert_eq!(names, ["pack-1.bitmap", "pack-1.bitmap.lock"]);
        delete_stale(&s, "pack", |n| n.ends_with(".lock"));
        assert_eq!(s.list("pack").unwrap(), ["pack-1.bitmap"]);
    }
}
