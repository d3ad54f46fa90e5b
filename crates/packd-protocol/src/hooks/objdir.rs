//! The quarantined pack as an object directory that git reads, for the hooks that run
//! before the objects enter the repository (`pre-receive`, `proc-receive`):
//!
//! ```text
//! objects/tmp_objdir-incoming-<6 chars>/     GIT_OBJECT_DIRECTORY, GIT_QUARANTINE_PATH
//!   pack/pack-<hex>.pack                     hard links to packd's quarantine files
//!   pack/pack-<hex>.idx                      (copies where links cannot be made)
//! objects/                                   GIT_ALTERNATE_OBJECT_DIRECTORIES
//! ```
//!
//! git's receive-pack names its quarantine so (`tmp_objdir-incoming-XXXXXX`), and `git gc`
//! knows the `tmp_` prefix as temporary. packd's own quarantine (two files in `objects/pack`)
//! stays the one migrated: this directory is removed when the hook has run (on drop), whatever
//! it answered, so a refused push leaves nothing.

use packd_odb::quarantine::Quarantine;
use std::path::{Path, PathBuf};

/// A git-readable copy of a quarantine, removed on drop.
#[derive(Debug)]
pub struct ExposedQuarantine {
    dir: PathBuf,
    objects: PathBuf,
}

impl ExposedQuarantine {
    /// Exposes `quarantine` (whose pack was received) under `objects_dir`; `None` when no
    /// pack was received (a push of deletions only: git has no quarantine then either).
    pub fn create(
        objects_dir: &Path,
        quarantine: &Quarantine,
    ) -> std::io::Result<Option<ExposedQuarantine>> {
        let Some((pack, idx, hex)) = quarantine.received_files() else {
            return Ok(None);
        };
        let (dir, pack_dir) = make_unique_dir(objects_dir)?;
        // From here on, drop removes the directory whatever fails.
        let exposed = ExposedQuarantine {
            dir,
            objects: objects_dir.to_path_buf(),
        };
        for (from, ext) in [(pack, "pack"), (idx, "idx")] {
            let to = pack_dir.join(format!("pack-{hex}.{ext}"));
            if std::fs::hard_link(&from, &to).is_err() {
                std::fs::copy(&from, &to)?;
            }
        }
        Ok(Some(exposed))
    }

    /// The variables git's receive-pack gives a hook that runs in its quarantine, spelt as
    /// git spells them: git names the objects directory `<git dir>/./objects` (its own
    /// `./objects`, made absolute, having moved into the git directory).
    pub fn env(&self) -> Vec<(String, Option<String>)> {
        let objects = match (self.objects.parent(), self.objects.file_name()) {
            (Some(parent), Some(name)) => {
                format!("{}/./{}", parent.display(), Path::new(name).display())
            }
            _ => self.objects.display().to_string(),
        };
        let dir = match self.dir.file_name() {
            Some(name) => format!("{objects}/{}", Path::new(name).display()),
            None => self.dir.display().to_string(),
        };
        // Appended to alternates this process was given, as git's env_append does.
        let alternates = match std::env::var("GIT_ALTERNATE_OBJECT_DIRECTORIES") {
            Ok(old) if !old.is_empty() => format!("{old}:{objects}"),
            _ => objects,
        };
        vec![
            ("GIT_QUARANTINE_PATH".into(), Some(dir.clone())),
            ("GIT_OBJECT_DIRECTORY".into(), Some(dir)),
            ("GIT_ALTERNATE_OBJECT_DIRECTORIES".into(), Some(alternates)),
        ]
    }
}

impl Drop for ExposedQuarantine {
    fn drop(&mut self) {
        if let Err(e) = std::fs::remove_dir_all(&self.dir) {
            tracing::warn!("cannot remove {}: {e}", self.dir.display());
        }
    }
}

/// Makes `objects/tmp_objdir-incoming-XXXXXX/pack` with a name no one else has.
fn make_unique_dir(objects_dir: &Path) -> std::io::Result<(PathBuf, PathBuf)> {
    const LETTERS: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
    let mut seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0)
        ^ (u64::from(std::process::id()) << 32);
    for _ in 0..100 {
        let mut name = String::from("tmp_objdir-incoming-");
        for _ in 0..6 {
            // xorshift: enough to avoid collisions, which create_dir detects anyway.
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            name.push(LETTERS[(seed % LETTERS.len() as u64) as usize] as char);
        }
        let dir = objects_dir.join(name);
        match std::fs::create_dir(&dir) {
            Ok(()) => {
                let pack = dir.join("pack");
                if let Err(e) = std::fs::create_dir(&pack) {
                    let _ = std::fs::remove_dir_all(&dir);
                    return Err(e);
                }
                return Ok((dir, pack));
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e),
        }
    }
    Err(std::io::Error::new(
        std::io::ErrorKind::AlreadyExists,
        "no free name for a quarantine directory",
    ))
}
