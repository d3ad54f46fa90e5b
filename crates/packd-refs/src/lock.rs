//! Lock files with owners: `<ref>.lock` and `packed-refs.lock`, as git names them, so that git
//! and packd exclude each other, holding the token of the packd transaction that made them.
//!
//! ```text
//! <common>/packd-transactions/<token>.l<n>   1. write "<token>\n" into a new temp file
//! <common>/refs/heads/main.lock              2. link() it here: fails if the lock exists
//!                                            3. unlink the temp file
//! ```
//! A lock therefore never exists without its owner's name in it (git's `O_EXCL` create would
//! leave an empty lock for an instant). The content stays the token until the lock is removed:
//! a new value is written to a temp file renamed over the ref, never into the lock, so whoever
//! finds a lock can always tell whose it is. A lock whose content is not a token (git's own,
//! empty or holding a value) belongs to git and is never broken.
//!
//! A lock holding the token of a journal that no longer exists is an orphan (a live owner's
//! journal exists from before its first lock until after its last; a machine that stopped can
//! keep a lock whose journal line it lost): it is broken when met.
//!
//! On a file system without hard links the lock is created with `O_EXCL` and the token written
//! after (the empty instant returns).

use std::fs::{File, OpenOptions};
use std::io::{ErrorKind, Read, Write};
use std::path::{Path, PathBuf};

/// Why a lock could not be taken.
#[derive(Debug)]
pub(crate) enum LockError {
    /// The lock file exists: someone holds it.
    Exists,
    /// A file stands where a directory of the lock's path should be (`refs/heads/a` while
    /// locking `refs/heads/a/b`), or the path cannot be made.
    Blocked(std::io::Error),
}

/// A held lock file, removed on drop (if it still holds its owner's token).
#[derive(Debug)]
pub(crate) struct LockFile {
    path: PathBuf,
    token: String,
    held: bool,
}

/// `<path>.lock`.
pub(crate) fn lock_path(path: &Path) -> PathBuf {
    let mut s = path.as_os_str().to_owned();
    s.push(".lock");
    PathBuf::from(s)
}

/// Whether `text` is a transaction token (`<pid>-<nanos>-<counter>`, see
/// [`crate::journal::Journal`]).
pub(crate) fn is_token(text: &str) -> bool {
    let mut parts = text.split('-');
    let ok = (0..3).all(|_| {
        parts.next().is_some_and(|p| {
            !p.is_empty() && p.len() <= 20 && p.bytes().all(|b| b.is_ascii_digit())
        })
    });
    ok && parts.next().is_none()
}

/// The token in the lock file at `path`: `None` when it is gone, or is not a packd owner's
/// (git's own lock). Reads at most a token's length.
pub(crate) fn owner(path: &Path) -> Option<String> {
    let file = File::open(path).ok()?;
    let mut text = String::new();
    file.take(80).read_to_string(&mut text).ok()?;
    let token = text.strip_suffix('\n')?;
    is_token(token).then(|| token.to_string())
}

/// Removes the lock file `path` of `token`, an owner whose journal is gone (a lock its
/// journal did not name, kept by a machine that stopped): moved aside to `temp` first, and put
/// back if what was moved is not that owner's (replaced since it was read). Whether it went.
pub(crate) fn break_orphan(path: &Path, token: &str, temp: &Path) -> bool {
    if std::fs::rename(path, temp).is_err() {
        return false;
    }
    if owner(temp).as_deref() == Some(token) {
        let _ = std::fs::remove_file(temp);
        return true;
    }
    if let Err(e) = std::fs::hard_link(temp, path) {
        tracing::error!(lock = %path.display(), "cannot put back a lock file moved aside: {e}");
    }
    let _ = std::fs::remove_file(temp);
    false
}

impl LockFile {
    /// Tries once to create the lock file `path` holding `token`; `temp` is a fresh name in
    /// the journal directory to stage it in.
    pub(crate) fn try_create(path: &Path, token: &str, temp: &Path) -> Result<LockFile, LockError> {
        let content = format!("{token}\n");
        let staged = OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(temp)
            .and_then(|mut f| f.write_all(content.as_bytes()));
        if let Err(e) = staged {
            let _ = std::fs::remove_file(temp);
            return Err(LockError::Blocked(e));
        }
        let linked = link_making_dirs(temp, path);
        let _ = std::fs::remove_file(temp);
        match linked {
            Ok(()) => Ok(LockFile {
                path: path.to_path_buf(),
                token: token.to_string(),
                held: true,
            }),
            Err(e) if e.kind() == ErrorKind::AlreadyExists => Err(LockError::Exists),
            // No hard links here (or across these directories): O_EXCL, then the token.
            Err(e) if e.raw_os_error() == Some(18) || e.kind() == ErrorKind::PermissionDenied => {
                match OpenOptions::new().write(true).create_new(true).open(path) {
                    Ok(mut f) => {
                        let lock = LockFile {
                            path: path.to_path_buf(),
                            token: token.to_string(),
                            held: true,
                        };
                        f.write_all(content.as_bytes())
                            .map_err(LockError::Blocked)?;
                        Ok(lock)
                    }
                    Err(e) if e.kind() == ErrorKind::AlreadyExists => Err(LockError::Exists),
                    Err(e) => Err(LockError::Blocked(e)),
                }
            }
            Err(e) => Err(LockError::Blocked(e)),
        }
    }

    /// A lock of a dead owner, taken over by its recoverer (who holds that owner's journal).
    pub(crate) fn adopt(path: &Path, token: &str) -> LockFile {
        LockFile {
            path: path.to_path_buf(),
            token: token.to_string(),
            held: true,
        }
    }

    /// Removes the lock file, if it is still this owner's.
    pub(crate) fn release(mut self) {
        self.remove();
    }

    /// Leaves the lock file in place for recovery (a committed transaction that could not
    /// finish: its journal rolls it forward).
    pub(crate) fn leave(mut self) {
        self.held = false;
    }

    fn remove(&mut self) {
        if std::mem::take(&mut self.held) && owner(&self.path).as_deref() == Some(&self.token) {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

impl Drop for LockFile {
    fn drop(&mut self) {
        self.remove();
    }
}

/// `link(from, to)`, making `to`'s directory when missing (the directories of a new ref).
fn link_making_dirs(from: &Path, to: &Path) -> std::io::Result<()> {
    match std::fs::hard_link(from, to) {
        Err(e) if e.kind() == ErrorKind::NotFound => {
            if let Some(parent) = to.parent() {
                std::fs::create_dir_all(parent)?;
            }
            std::fs::hard_link(from, to)
        }
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lock_holds_its_token_and_excludes_a_second() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let lock = d.join("refs/heads/main.lock");
        let l = LockFile::try_create(&lock, "1-2-3", &d.join("t1")).unwrap();
        assert_eq!(owner(&lock).as_deref(), Some("1-2-3"));
        assert!(!d.join("t1").exists());
        assert!(matches!(
            LockFile::try_create(&lock, "4-5-6", &d.join("t2")),
            Err(LockError::Exists)
        ));
        assert_eq!(owner(&lock).as_deref(), Some("1-2-3"));
        l.release();
        assert!(!lock.exists());
        // A file where a directory should be.
        std::fs::write(d.join("refs/heads/a"), "x\n").unwrap();
        assert!(matches!(
            LockFile::try_create(&d.join("refs/heads/a/b.lock"), "1-2-3", &d.join("t3")),
            Err(LockError::Blocked(_))
        ));
        // git's own lock has no owner.
        std::fs::write(d.join("git.lock"), "").unwrap();
        assert_eq!(owner(&d.join("git.lock")), None);
        std::fs::write(d.join("v.lock"), format!("{}\n", "a".repeat(40))).unwrap();
        assert_eq!(owner(&d.join("v.lock")), None);
    }

    #[test]
    fn a_lock_taken_over_by_someone_else_is_not_removed() {
        let dir = tempfile::tempdir().unwrap();
        let lock = dir.path().join("x.lock");
        let l = LockFile::try_create(&lock, "1-2-3", &dir.path().join("t")).unwrap();
        std::fs::write(&lock, "7-8-9\n").unwrap();
        drop(l);
        assert_eq!(owner(&lock).as_deref(), Some("7-8-9"));
    }
}
