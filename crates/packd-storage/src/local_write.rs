//! [`crate::write`]'s operations on a local directory: temporary file, fsync, link into place
//! for immutable blobs; git's lock-file protocol for mutable ones.

use crate::write::{local_version, NewBlob, Version};
use crate::StorageError;
use std::fs::{File, OpenOptions};
use std::io::{ErrorKind, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// Distinguishes the temporary files of one process's concurrent writes.
static NEXT_TEMP: AtomicU64 = AtomicU64::new(0);

fn io_error(path: &Path, source: std::io::Error) -> StorageError {
    StorageError::Io {
        name: path.display().to_string(),
        source,
    }
}

/// Syncs directory `dir`, so that a name just linked or renamed into it survives a crash.
pub(crate) fn sync_dir(dir: &Path) -> Result<(), StorageError> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| io_error(dir, e))
}

/// Creates the parent directories of `path`.
fn make_parent(path: &Path) -> Result<&Path, StorageError> {
    let parent = path.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(parent).map_err(|e| io_error(parent, e))?;
    Ok(parent)
}

/// An immutable blob being written to `temp`, beside `path`.
#[derive(Debug)]
pub(crate) struct LocalNewBlob {
    name: String,
    path: PathBuf,
    temp: PathBuf,
    file: Option<File>,
}

impl LocalNewBlob {
    /// Starts blob `name` at `path` (its directories are made).
    pub(crate) fn start(name: &str, path: PathBuf) -> Result<LocalNewBlob, StorageError> {
        let parent = make_parent(&path)?;
        let temp = parent.join(format!(
            "tmp_packd_{}_{}",
            std::process::id(),
            NEXT_TEMP.fetch_add(1, Ordering::Relaxed)
        ));
        let file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&temp)
            .map_err(|e| io_error(&temp, e))?;
        Ok(LocalNewBlob {
            name: name.to_string(),
            path,
            temp,
            file: Some(file),
        })
    }
}

impl Write for LocalNewBlob {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        match &mut self.file {
            Some(f) => f.write(buf),
            None => Err(std::io::Error::other("blob already published")),
        }
    }
    fn flush(&mut self) -> std::io::Result<()> {
        match &mut self.file {
            Some(f) => f.flush(),
            None => Ok(()),
        }
    }
}

impl NewBlob for LocalNewBlob {
    fn name(&self) -> &str {
        &self.name
    }

    fn rename(&mut self, name: &str) -> Result<(), StorageError> {
        let old_dir = Path::new(&self.name).parent();
        if Path::new(name).parent() != old_dir {
            return Err(io_error(
                &self.path,
                std::io::Error::other(format!("cannot be renamed to {name}: another directory")),
            ));
        }
        let file_name = Path::new(name).file_name().unwrap_or_default();
        self.path = self.path.with_file_name(file_name);
        self.name = name.to_string();
        Ok(())
    }

    fn publish(mut self: Box<Self>) -> Result<(), StorageError> {
        let file = self.file.take().expect("a blob is published once");
        file.sync_all().map_err(|e| io_error(&self.temp, e))?;
        #[cfg(unix)]
        {
            // 0444 less the umask, as git makes packs: the write bits of the mode the file
            // was created with (0666 less the umask) dropped.
            use std::os::unix::fs::PermissionsExt;
            let created = file
                .metadata()
                .map_err(|e| io_error(&self.temp, e))?
                .permissions()
                .mode();
            file.set_permissions(std::fs::Permissions::from_mode(created & 0o444))
                .map_err(|e| io_error(&self.temp, e))?;
        }
        drop(file);
        // A hard link never replaces: it fails if the name exists, which is put-if-absent.
        // Where links are not supported, a rename after a check (git's fallback too).
        match std::fs::hard_link(&self.temp, &self.path) {
            Ok(()) => {
                let _ = std::fs::remove_file(&self.temp);
            }
            Err(e) if e.kind() == ErrorKind::AlreadyExists => {
                let _ = std::fs::remove_file(&self.temp);
                return Err(StorageError::AlreadyExists {
                    name: self.path.display().to_string(),
                });
            }
            Err(_) => {
                if self.path.exists() {
                    let _ = std::fs::remove_file(&self.temp);
                    return Err(StorageError::AlreadyExists {
                        name: self.path.display().to_string(),
                    });
                }
                std::fs::rename(&self.temp, &self.path).map_err(|e| io_error(&self.path, e))?;
            }
        }
        sync_dir(self.path.parent().unwrap_or(Path::new(".")))
    }
}

impl Drop for LocalNewBlob {
    fn drop(&mut self) {
        if self.file.take().is_some() {
            let _ = std::fs::remove_file(&self.temp);
        }
    }
}

/// Removes the lock file when dropped, unless it was renamed into place.
struct Lock {
    path: PathBuf,
    held: bool,
}

impl Drop for Lock {
    fn drop(&mut self) {
        if self.held {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

/// [`crate::Storage::replace`] for the file at `path`, by git's lock-file protocol; the lock
/// (then the file) is created with `mode` (less the umask) when given, 0666 otherwise.
pub(crate) fn replace(
    path: &Path,
    expected: Option<&Version>,
    bytes: &[u8],
    mode: Option<u32>,
) -> Result<Version, StorageError> {
    let parent = make_parent(path)?;
    let mut lock_name = path.as_os_str().to_owned();
    lock_name.push(".lock");
    let lock_path = PathBuf::from(lock_name);
    let mut options = OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    if let Some(mode) = mode {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(mode);
    }
    #[cfg(not(unix))]
    let _ = mode;
    let mut file = match options.open(&lock_path) {
        Ok(f) => f,
        Err(e) if e.kind() == ErrorKind::AlreadyExists => {
            return Err(StorageError::Locked {
                name: path.display().to_string(),
                lock: lock_path.display().to_string(),
            })
        }
        Err(e) => return Err(io_error(&lock_path, e)),
    };
    let mut lock = Lock {
        path: lock_path,
        held: true,
    };
    let current = match std::fs::read(path) {
        Ok(b) => Some(local_version(&b)),
        Err(e) if e.kind() == ErrorKind::NotFound => None,
        Err(e) => return Err(io_error(path, e)),
    };
    if current.as_ref() != expected {
        return Err(StorageError::Conflict {
            name: path.display().to_string(),
        });
    }
    file.write_all(bytes)
        .and_then(|()| file.sync_all())
        .map_err(|e| io_error(&lock.path, e))?;
    drop(file);
    std::fs::rename(&lock.path, path).map_err(|e| io_error(path, e))?;
    lock.held = false;
    sync_dir(parent)?;
    Ok(local_version(bytes))
}

/// [`crate::Storage::delete`] for the file at `path`.
pub(crate) fn delete(path: &Path) -> Result<bool, StorageError> {
    match std::fs::remove_file(path) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == ErrorKind::NotFound => Ok(false),
        Err(e) => Err(io_error(path, e)),
    }
}

#[cfg(test)]
mod tests {
    use crate::{LocalStorage, Storage, StorageError};
    use std::io::Write;

    #[test]
    fn an_immutable_blob_appears_only_when_published_and_never_replaces() {
        let dir = tempfile::tempdir().unwrap();
        let s = LocalStorage::new(dir.path());
        let mut b = s.create("pack/pack-1.pack").unwrap();
        b.write_all(b"first").unwrap();
        assert!(!s.exists("pack/pack-1.pack"));
        b.publish().unwrap();
        assert_eq!(
            &s.open("pack/pack-1.pack").unwrap().read_all().unwrap()[..],
            b"first"
        );
        let mut again = s.create("pack/pack-1.pack").unwrap();
        again.write_all(b"second").unwrap();
        assert!(matches!(
            again.publish(),
            Err(StorageError::AlreadyExists { .. })
        ));
        assert_eq!(
            &s.open("pack/pack-1.pack").unwrap().read_all().unwrap()[..],
            b"first"
        );
        drop(s.create("pack/pack-2.pack").unwrap());
        let mut named = s.create("pack/tmp.pack").unwrap();
        named.write_all(b"third").unwrap();
        named.rename("pack/pack-3.pack").unwrap();
        assert!(named.rename("other/pack-3.pack").is_err());
        named.publish().unwrap();
        assert_eq!(
            &s.open("pack/pack-3.pack").unwrap().read_all().unwrap()[..],
            b"third"
        );
        assert_eq!(s.list("pack").unwrap(), vec!["pack-1.pack", "pack-3.pack"]);
    }

    #[test]
    fn a_replace_swaps_only_the_version_it_read() {
        let dir = tempfile::tempdir().unwrap();
        let s = LocalStorage::new(dir.path());
        assert!(s.read_versioned("list").unwrap().is_none());
        let v1 = s.replace("list", None, b"one").unwrap();
        assert!(matches!(
            s.replace("list", None, b"again"),
            Err(StorageError::Conflict { .. })
        ));
        let (bytes, read) = s.read_versioned("list").unwrap().unwrap();
        assert_eq!((&bytes[..], &read), (&b"one"[..], &v1));
        let v2 = s.replace("list", Some(&v1), b"two").unwrap();
        assert!(matches!(
            s.replace("list", Some(&v1), b"three"),
            Err(StorageError::Conflict { .. })
        ));
        std::fs::write(dir.path().join("list.lock"), b"").unwrap();
        assert!(matches!(
            s.replace("list", Some(&v2), b"three"),
            Err(StorageError::Locked { .. })
        ));
        std::fs::remove_file(dir.path().join("list.lock")).unwrap();
        assert_eq!(std::fs::read(dir.path().join("list")).unwrap(), b"two");
        assert!(s.delete("list").unwrap());
        assert!(!s.delete("list").unwrap());
    }

    #[cfg(unix)]
    #[test]
    fn a_read_only_replace_leaves_the_file_read_only_as_git_does() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let s = LocalStorage::new(dir.path());
        let mode = |name: &str| {
            let meta = std::fs::metadata(dir.path().join(name)).unwrap();
            meta.permissions().mode() & 0o222
        };
        let v1 = s
            .replace_read_only("info/commit-graph", None, b"one")
            .unwrap();
        assert_eq!(mode("info/commit-graph"), 0, "no write bit");
        assert!(matches!(
            s.replace_read_only("info/commit-graph", None, b"again"),
            Err(StorageError::Conflict { .. })
        ));
        s.replace_read_only("info/commit-graph", Some(&v1), b"two")
            .unwrap();
        assert_eq!(mode("info/commit-graph"), 0);
        assert_eq!(
            std::fs::read(dir.path().join("info/commit-graph")).unwrap(),
            b"two"
        );
        s.replace("list", None, b"x").unwrap();
        assert_ne!(mode("list"), 0, "a plain replace stays writable");
        assert!(!dir.path().join("info/commit-graph.lock").exists());
    }
}
