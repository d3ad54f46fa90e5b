//! The two locks that keep maintenance safe beside serving, taken with `flock` on files in the
//! repository, so that they hold across processes (`packd serve`, `packd repack` started by
//! hand, `packd receive-pack` over ssh) and vanish when their holder dies, however it dies.
//!
//! ```text
//! objects/packd-maintenance.lock   exclusive: at most one maintenance (repack, geometric
//!                                  repack, cruft pack, prune) per repository at a time
//! objects/packd-prune.lock         shared: held by a push from the moment its objects may
//!                                  name existing ones (its pack is received) until its refs
//!                                  are updated; exclusive: held by maintenance only while it
//!                                  re-reads the refs and deletes objects nothing reaches
//! ```
//!
//! Why the prune lock closes the race: a push may reference an object that maintenance found
//! unreachable (a commit of a deleted branch pushed again, a thin pack's base). Maintenance
//! decides what to drop from the refs it read at its start, which a push may have changed
//! since; before it deletes anything it takes the prune lock exclusively, so every push whose
//! objects are received but whose refs are not yet updated has finished, reads the refs again,
//! and keeps whatever the changed refs reach. A push that starts after that waits for the lock
//! at its start, and by then the objects it can see are the ones that stay. The lock files are
//! never removed (removing a flock'ed file lets two holders lock two different files).

use std::fs::{File, OpenOptions};
use std::path::{Path, PathBuf};

/// The name of the maintenance lock, in the objects directory.
pub const MAINTENANCE_LOCK: &str = "packd-maintenance.lock";
/// The name of the prune lock, in the objects directory.
pub const PRUNE_LOCK: &str = "packd-prune.lock";

/// Why a lock could not be taken.
#[derive(Debug, thiserror::Error)]
pub enum LockError {
    /// Another process or thread holds it (only from the `try_` functions).
    #[error("{path}: another maintenance of this repository is running")]
    Busy { path: PathBuf },
    /// The lock file could not be opened or locked.
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// A held lock; dropping it releases the lock.
#[derive(Debug)]
pub struct Held {
    _file: File,
    path: PathBuf,
}

impl Held {
    /// The lock file.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

fn open(objects_dir: &Path, name: &str) -> Result<(File, PathBuf), LockError> {
    let path = objects_dir.join(name);
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(&path)
        .map_err(|source| LockError::Io {
            path: path.clone(),
            source,
        })?;
    Ok((file, path))
}

/// Takes the maintenance lock of the repository whose objects directory is `objects_dir`
/// without waiting: [`LockError::Busy`] when a maintenance already runs.
pub fn try_maintenance(objects_dir: &Path) -> Result<Held, LockError> {
    let (file, path) = open(objects_dir, MAINTENANCE_LOCK)?;
    match file.try_lock() {
        Ok(()) => Ok(Held { _file: file, path }),
        Err(std::fs::TryLockError::WouldBlock) => Err(LockError::Busy { path }),
        Err(std::fs::TryLockError::Error(source)) => Err(LockError::Io { path, source }),
    }
}

/// Takes the maintenance lock, waiting for a running maintenance to finish.
pub fn maintenance(objects_dir: &Path) -> Result<Held, LockError> {
    let (file, path) = open(objects_dir, MAINTENANCE_LOCK)?;
    file.lock().map_err(|source| LockError::Io {
        path: path.clone(),
        source,
    })?;
    Ok(Held { _file: file, path })
}

/// Takes the prune lock shared, as a push does from receiving its pack until its refs are
/// updated (waits while maintenance deletes objects, which is brief).
pub fn push_guard(objects_dir: &Path) -> Result<Held, LockError> {
    let (file, path) = open(objects_dir, PRUNE_LOCK)?;
    file.lock_shared().map_err(|source| LockError::Io {
        path: path.clone(),
        source,
    })?;
    Ok(Held { _file: file, path })
}

/// Takes the prune lock exclusively, as maintenance does around re-reading the refs and
/// deleting what they do not reach (waits for pushes between receiving and updating refs).
pub fn prune_guard(objects_dir: &Path) -> Result<Held, LockError> {
    let (file, path) = open(objects_dir, PRUNE_LOCK)?;
    file.lock().map_err(|source| LockError::Io {
        path: path.clone(),
        source,
    })?;
    Ok(Held { _file: file, path })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_maintenance_at_a_time_and_pushes_exclude_the_prune() {
        let dir = tempfile::tempdir().unwrap();
        let first = try_maintenance(dir.path()).unwrap();
        assert!(matches!(
            try_maintenance(dir.path()),
            Err(LockError::Busy { .. })
        ));
        drop(first);
        let _again = try_maintenance(dir.path()).unwrap();

        let push = push_guard(dir.path()).unwrap();
        let _other_push = push_guard(dir.path()).unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        let d = dir.path().to_path_buf();
        let pruner = std::thread::spawn(move || {
            let _g = prune_guard(&d).unwrap();
            tx.send(()).unwrap();
        });
        std::thread::sleep(std::time::Duration::from_millis(100));
        assert!(rx.try_recv().is_err(), "the prune waited for the pushes");
        drop(push);
        drop(_other_push);
        rx.recv_timeout(std::time::Duration::from_secs(10)).unwrap();
        pruner.join().unwrap();
    }
}
