//! A quarantine for received objects: they are written and checked in a directory of their own,
//! and enter the repository only when every check has passed.
//!
//! ```text
//! objects/
//!   incoming-<pid>-<nanos>-<n>/       the quarantine (removed on drop)
//!     pack/pack-<hex>.pack            written by index_pack, read by the checks
//!     pack/pack-<hex>.idx
//!   pack/                             migrate(): .pack (and .rev) first, .idx last, then fsync
//! ```
//! Readers of the repository never see a quarantined object: they look in `objects/pack`, and a
//! pack there becomes visible only once its `.idx` appears, after its data is in place.

use crate::{Error, ObjectDb, OpenOptions, Result};
use std::fs::File;
use std::path::{Path, PathBuf};

/// A quarantine directory under a repository's objects directory.
#[derive(Debug)]
pub struct Quarantine {
    dir: PathBuf,
    objects_dir: PathBuf,
}

fn io(path: &Path) -> impl Fn(std::io::Error) -> Error + '_ {
    move |source| Error::Io {
        path: path.display().to_string(),
        source,
    }
}

fn sync_dir(dir: &Path) -> Result<()> {
    File::open(dir).and_then(|d| d.sync_all()).map_err(io(dir))
}

impl Quarantine {
    /// Creates `objects_dir/incoming-<unique>/pack`.
    pub fn create(objects_dir: &Path) -> Result<Quarantine> {
        sweep_abandoned(objects_dir);
        use std::sync::atomic::{AtomicU32, Ordering};
        static COUNTER: AtomicU32 = AtomicU32::new(0);
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0);
        let dir = objects_dir.join(format!(
            "incoming-{}-{nanos}-{}",
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir(&dir).map_err(io(&dir))?;
        let quarantine = Quarantine {
            dir,
            objects_dir: objects_dir.to_path_buf(),
        };
        let pack = quarantine.pack_dir();
        std::fs::create_dir(&pack).map_err(io(&pack))?;
        Ok(quarantine)
    }

    /// The quarantine directory (an objects directory of its own).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Where received packs go: pass this to `index_pack` as its pack directory.
    pub fn pack_dir(&self) -> PathBuf {
        self.dir.join("pack")
    }

    /// The quarantined objects alone, for the checks that run before migration.
    pub fn objects(&self) -> Result<ObjectDb> {
        ObjectDb::open(
            &self.dir,
            &OpenOptions {
                cache_budget: 16 << 20,
                ..OpenOptions::default()
            },
        )
    }

    /// Moves the quarantined packs into the repository's `objects/pack`: each pack's data (and
    /// `.rev`) first, its `.idx` last, then fsyncs the directory, which makes every name
    /// durable at once. A pack the repository already has is left where it is. The quarantine
    /// directory is removed when `self` drops.
    ///
    /// No fsync between the data's rename and the index's: a crash between them can at worst
    /// leave an index without its pack, which git and packd skip (a pack is opened only when
    /// its `.pack` is there), and the push was not acknowledged (its refs move only after this
    /// returns). git's own pack installation orders the renames the same way, without fsyncs.
    pub fn migrate(self) -> Result<()> {
        let target = self.objects_dir.join("pack");
        if !target.is_dir() {
            std::fs::create_dir_all(&target).map_err(io(&target))?;
        }
        let source = self.pack_dir();
        let mut stems = Vec::new();
        for entry in std::fs::read_dir(&source).map_err(io(&source))? {
            let entry = entry.map_err(io(&source))?;
            if let Some(stem) = entry
                .file_name()
                .to_str()
                .and_then(|n| n.strip_suffix(".idx"))
                .filter(|s| s.starts_with("pack-"))
            {
                stems.push(stem.to_string());
            }
        }
        for stem in &stems {
            if target.join(format!("{stem}.idx")).exists() {
                continue;
            }
            for ext in ["pack", "rev", "idx"] {
                let from = source.join(format!("{stem}.{ext}"));
                let to = target.join(format!("{stem}.{ext}"));
                match std::fs::rename(&from, &to) {
                    Ok(()) => {}
                    // Only the .rev is optional; a missing .pack or .idx is an error.
                    Err(e) if ext == "rev" && e.kind() == std::io::ErrorKind::NotFound => {}
                    Err(e) => return Err(io(&to)(e)),
                }
            }
        }
        sync_dir(&target)
    }
}

impl Drop for Quarantine {
    fn drop(&mut self) {
        // After a migration both directories are empty: two removals, no listing. Otherwise
        // (a refused push) whatever is left.
        let emptied =
            std::fs::remove_dir(self.pack_dir()).is_ok() && std::fs::remove_dir(&self.dir).is_ok();
        if !emptied {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

/// Removes the quarantines of receivers that died without cleaning up (killed mid-push): those
/// whose process is gone (Linux: no `/proc/<pid>`), or, where that cannot be known, older than
/// a day. Nothing in them was ever visible to readers, so removing them loses nothing.
fn sweep_abandoned(objects_dir: &Path) {
    let Ok(entries) = std::fs::read_dir(objects_dir) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(rest) = name.to_str().and_then(|n| n.strip_prefix("incoming-")) else {
            continue;
        };
        let Some(pid) = rest.split('-').next().and_then(|p| p.parse::<u32>().ok()) else {
            continue;
        };
        if pid == std::process::id() {
            continue;
        }
        let proc_root = Path::new("/proc/self");
        let abandoned = if proc_root.exists() {
            !Path::new(&format!("/proc/{pid}")).exists()
        } else {
            entry
                .metadata()
                .and_then(|m| m.modified())
                .ok()
                .and_then(|t| t.elapsed().ok())
                .is_some_and(|age| age > std::time::Duration::from_secs(24 * 3600))
        };
        if abandoned {
            tracing::info!(
                "removing the abandoned quarantine {}",
                entry.path().display()
            );
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn drop_removes_and_migrate_moves_packs() {
        let repo = tempfile::tempdir().unwrap();
        let objects = repo.path().join("objects");
        std::fs::create_dir_all(objects.join("pack")).unwrap();
        let q = Quarantine::create(&objects).unwrap();
        let dir = q.dir().to_path_buf();
        std::fs::write(q.pack_dir().join("pack-1.pack"), b"x").unwrap();
        drop(q);
        assert!(!dir.exists());
        let q = Quarantine::create(&objects).unwrap();
        let dir = q.dir().to_path_buf();
        std::fs::write(q.pack_dir().join("pack-1.pack"), b"x").unwrap();
        std::fs::write(q.pack_dir().join("pack-1.idx"), b"y").unwrap();
        q.migrate().unwrap();
        assert!(!dir.exists());
        assert!(objects.join("pack/pack-1.pack").exists());
        assert!(objects.join("pack/pack-1.idx").exists());
    }
}
