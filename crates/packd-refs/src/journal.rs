//! Transaction journals: what makes a ref transaction crash-atomic, and what lets a dead
//! transaction's lock files be broken safely.
//!
//! ```text
//! <common>/packd-transactions/<token>     token = <pid>-<unix nanos>-<counter>
//!   lock <ref>|packed-refs                before each lock file is made (names its locks)
//!   update <old hex|-> <new hex|-> <ref>  the transaction's changes, then
//!   commit                                the commit point (fsynced with the updates before it)
//! <common>/packd-transactions/<token>.*   its temp files (lock staging, new ref values)
//! ```
//! The owner holds `flock(LOCK_EX)` on its journal from creation (made as `<token>.new`, locked,
//! then renamed, so that no journal is ever seen unlocked while its owner lives) until it
//! removes it. The kernel drops the flock when the process dies, however it dies: a journal
//! whose flock can be taken has no owner any more. Its recoverer holds that flock while it
//! works (so two never recover one journal) and:
//! - rolls every committed update forward: each ref whose lock still holds the dead token gets
//!   its new value (a deletion: out of packed-refs, then its loose file), then the lock goes;
//!   a ref whose lock is gone was finished by its owner (the lock goes only after the ref is
//!   written) and is left as it is;
//! - rolls back the rest: removes the locks holding the dead token (no ref changes before the
//!   commit point);
//! - removes the temp files and then the journal.
//!
//! git ignores the directory: it is not under `refs/`, and holds no `*.lock` of git's. Locks
//! without a token (git's own) are never touched.
//!
//! What others see: git and packd read each ref old or new at every instant (every change is
//! a rename or a removal), and a lock file or a journal confuses neither `git`, `git fsck` nor
//! packd's ref listing. An atomic push's refs are a mix only while they are being written, as
//! with git, and after a crash past the commit point until someone recovers: every
//! transaction, and receive-pack's advertisement, start by recovering dead journals
//! ([`recover`]); a reader that wants never to see that mix calls it too. Until then the dead
//! owner's locks also refuse git's own writers, as a crashed git's locks do.

use crate::lock::{is_token, lock_path, owner, LockFile};
use crate::{loose, packed, RefUpdate};
use packd_odb::ObjectId;
use std::fs::{File, OpenOptions};
use std::io::{ErrorKind, Read, Write};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// The journal directory's name in the common directory.
pub const JOURNAL_DIR: &str = "packd-transactions";

/// The lock target that names `packed-refs.lock` in a journal.
pub(crate) const PACKED_REFS: &str = "packed-refs";

/// Largest journal a recoverer reads (a push of a million refs writes about 100 MB).
const MAX_JOURNAL: u64 = 256 << 20;

/// Temp files of no live journal older than this are swept.
const STALE_TEMP: Duration = Duration::from_secs(600);

static COUNTER: AtomicU64 = AtomicU64::new(0);

/// A live transaction's journal, flock'ed while this value lives. Dropping it without
/// [`Journal::finish`] leaves the file for recovery (what a crash leaves).
#[derive(Debug)]
pub(crate) struct Journal {
    dir: PathBuf,
    path: PathBuf,
    token: String,
    file: File,
    temps: u64,
}

impl Journal {
    /// Creates and locks a new journal in `<common>/packd-transactions/`.
    pub(crate) fn create(common: &Path) -> std::io::Result<Journal> {
        let dir = common.join(JOURNAL_DIR);
        match std::fs::create_dir(&dir) {
            Ok(()) => loose::sync_dir(common),
            Err(e) if e.kind() == ErrorKind::AlreadyExists => {}
            Err(e) => return Err(e),
        }
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        let token = format!(
            "{}-{nanos}-{}",
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::Relaxed)
        );
        let path = dir.join(&token);
        let staged = dir.join(format!("{token}.new"));
        let file = OpenOptions::new()
            .read(true)
            .append(true)
            .create_new(true)
            .open(&staged)?;
        file.lock()?;
        std::fs::rename(&staged, &path)?;
        // The journal's name is durable before any lock it will own exists.
        loose::sync_dir(&dir);
        Ok(Journal {
            dir,
            path,
            token,
            file,
            temps: 0,
        })
    }

    /// The owner token written into this transaction's locks.
    pub(crate) fn token(&self) -> &str {
        &self.token
    }

    /// A fresh temp file name of this transaction (in the journal directory).
    pub(crate) fn temp(&mut self) -> PathBuf {
        self.temps += 1;
        self.dir.join(format!("{}.t{}", self.token, self.temps))
    }

    /// Records that a lock for `target` (a ref name, or [`PACKED_REFS`]) is about to be made.
    pub(crate) fn note_lock(&mut self, target: &str) -> std::io::Result<()> {
        self.file.write_all(format!("lock {target}\n").as_bytes())
    }

    /// The commit point: records `updates` and the commit mark, fsynced. After this, a crash
    /// leaves them to be rolled forward.
    pub(crate) fn commit(&mut self, updates: &[&RefUpdate]) -> std::io::Result<()> {
        let mut text = String::new();
        for u in updates {
            let hex = |id: Option<ObjectId>| id.map_or("-".to_string(), |id| id.to_hex());
            text.push_str(&format!(
                "update {} {} {}\n",
                hex(u.old),
                hex(u.new),
                u.name
            ));
        }
        text.push_str("commit\n");
        self.file.write_all(text.as_bytes())?;
        self.file.sync_data()
    }

    /// Removes the journal: the transaction is over, every lock released.
    pub(crate) fn finish(self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// What a dead journal says.
#[derive(Debug, Default)]
struct Record {
    locks: Vec<String>,
    committed: Vec<RefUpdate>,
}

fn parse(text: &str) -> Record {
    let mut record = Record::default();
    let mut pending = Vec::new();
    for line in text.split_inclusive('\n') {
        // A line cut short (the machine stopped mid-write) ends the record.
        let Some(line) = line.strip_suffix('\n') else {
            break;
        };
        if let Some(target) = line.strip_prefix("lock ") {
            if target == PACKED_REFS || crate::check_ref_name(target).is_ok() {
                record.locks.push(target.to_string());
            }
        } else if let Some(rest) = line.strip_prefix("update ") {
            let mut parts = rest.splitn(3, ' ');
            let id = |p: Option<&str>| match p {
                Some("-") => Some(None),
                Some(h) => ObjectId::from_hex(h).map(Some),
                None => None,
            };
            if let (Some(old), Some(new), Some(name)) =
                (id(parts.next()), id(parts.next()), parts.next())
            {
                if crate::check_ref_name(name).is_ok() {
                    pending.push(RefUpdate {
                        name: name.to_string(),
                        old,
                        new,
                    });
                }
            }
        } else if line == "commit" {
            record.committed.append(&mut pending);
        }
    }
    record
}

/// Recovers every journal under `common` whose owner is gone (see the module doc): rolls
/// committed ones forward and the others back, so that their locks stop blocking. Returns how
/// many were recovered. `packed_refs_timeout` bounds the wait for `packed-refs.lock` when a
/// deletion is rolled forward. Costs one directory read when there is nothing to do.
pub fn recover(common: &Path, packed_refs_timeout: Duration) -> usize {
    recover_except(common, None, packed_refs_timeout)
}

/// [`recover`], skipping the journal `own` (the caller's).
pub(crate) fn recover_except(common: &Path, own: Option<&str>, packed_timeout: Duration) -> usize {
    let dir = common.join(JOURNAL_DIR);
    let Ok(entries) = std::fs::read_dir(&dir) else {
        return 0;
    };
    let mut recovered = 0;
    let mut temps = Vec::new();
    let mut journals = Vec::new();
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if is_token(&name) {
            journals.push(name);
        } else {
            temps.push(name);
        }
    }
    for token in &journals {
        if Some(token.as_str()) != own && recover_one(common, token, None, packed_timeout) {
            recovered += 1;
        }
    }
    // Temp files of no journal (a writer that died while creating its journal), once old.
    for name in temps {
        let token = name.split('.').next().unwrap_or("");
        if journals.iter().any(|j| j == token) || Some(token) == own {
            continue;
        }
        let path = dir.join(&name);
        let old = std::fs::metadata(&path)
            .and_then(|m| m.modified())
            .is_ok_and(|t| t.elapsed().is_ok_and(|age| age > STALE_TEMP));
        if old && !dir.join(token).exists() {
            let _ = std::fs::remove_file(path);
        }
    }
    recovered
}

/// Whether the journal `token` exists (its owner lives, or died and is not recovered yet).
pub(crate) fn exists(common: &Path, token: &str) -> bool {
    common.join(JOURNAL_DIR).join(token).exists()
}

/// Recovers the journal `token` if its owner is gone; whether it did. `met` is a lock file
/// found holding that token: removed too, even if the journal does not name it (its `lock`
/// line is not fsynced: a machine that stopped may have kept the lock and lost the line).
pub(crate) fn recover_one(
    common: &Path,
    token: &str,
    met: Option<&Path>,
    packed_timeout: Duration,
) -> bool {
    let dir = common.join(JOURNAL_DIR);
    let path = dir.join(token);
    let Ok(mut file) = OpenOptions::new().read(true).open(&path) else {
        return false;
    };
    if file.try_lock().is_err() {
        return false; // its owner (or another recoverer) lives
    }
    // Still the journal at that name (not one a recoverer finished and removed meanwhile).
    let same = match (file.metadata(), std::fs::metadata(&path)) {
        (Ok(a), Ok(b)) => a.ino() == b.ino() && a.dev() == b.dev(),
        _ => false,
    };
    if !same {
        return false;
    }
    let mut text = String::new();
    if (&mut file)
        .take(MAX_JOURNAL)
        .read_to_string(&mut text)
        .is_err()
    {
        return false;
    }
    let record = parse(&text);
    let mut temps = 0u64;
    let mut temp = || {
        temps += 1;
        dir.join(format!("{token}.r{temps}"))
    };
    if roll_forward(common, token, &record.committed, packed_timeout, &mut temp).is_err() {
        tracing::warn!(token, "cannot roll a dead ref transaction forward yet");
        return false;
    }
    for target in &record.locks {
        let lock = if target == PACKED_REFS {
            lock_path(&common.join(PACKED_REFS))
        } else {
            lock_path(&common.join(target))
        };
        LockFile::adopt(&lock, token).release();
    }
    if let Some(lock) = met {
        LockFile::adopt(lock, token).release();
    }
    if let Ok(entries) = std::fs::read_dir(&dir) {
        let prefix = format!("{token}.");
        for entry in entries.flatten() {
            if entry.file_name().to_string_lossy().starts_with(&prefix) {
                let _ = std::fs::remove_file(entry.path());
            }
        }
    }
    let _ = std::fs::remove_file(&path);
    tracing::info!(
        token,
        committed = record.committed.len(),
        "recovered the journal of a dead ref transaction"
    );
    true
}

/// Sets every committed update whose lock still holds `token` to its new value.
fn roll_forward(
    common: &Path,
    token: &str,
    committed: &[RefUpdate],
    packed_timeout: Duration,
    temp: &mut dyn FnMut() -> PathBuf,
) -> std::io::Result<()> {
    let ours = |name: &str| owner(&lock_path(&common.join(name))).as_deref() == Some(token);
    let todo: Vec<&RefUpdate> = committed.iter().filter(|u| ours(&u.name)).collect();
    if todo.is_empty() {
        return Ok(());
    }
    for u in &todo {
        if let Some(new) = u.new {
            // A ref that cannot be written (a directory of refs made at its place meanwhile,
            // by git, which does not see packd's locks as refs) stays old: better than a
            // journal that can never be finished and a lock that blocks forever.
            if let Err(e) = loose::write(common, &u.name, &new, &temp()) {
                tracing::warn!(token, name = %u.name, "cannot roll a ref forward: {e}");
            }
        }
    }
    let deleted: Vec<&str> = todo
        .iter()
        .filter(|u| u.new.is_none())
        .map(|u| u.name.as_str())
        .collect();
    if !deleted.is_empty() {
        let packed_lock = lock_path(&common.join(PACKED_REFS));
        // The dead owner's packed-refs.lock is the recoverer's now; else take it in the dead
        // owner's name, so that a recoverer that dies too leaves a lock the next one breaks.
        let lock = if owner(&packed_lock).as_deref() == Some(token) {
            LockFile::adopt(&packed_lock, token)
        } else {
            let start = Instant::now();
            loop {
                match LockFile::try_create(&packed_lock, token, &temp()) {
                    Ok(l) => break l,
                    Err(_) if start.elapsed() < packed_timeout => {
                        std::thread::sleep(Duration::from_millis(5))
                    }
                    Err(_) => {
                        return Err(std::io::Error::new(
                            ErrorKind::WouldBlock,
                            "packed-refs.lock is held",
                        ))
                    }
                }
            }
        };
        packed::remove_refs(common, &deleted, &temp())?;
        for name in &deleted {
            loose::remove(common, name)?;
        }
        lock.release();
    }
    loose::sync_dirs(
        common,
        todo.iter().map(|u| u.name.as_str()),
        !deleted.is_empty(),
    );
    for u in &todo {
        LockFile::adopt(&lock_path(&common.join(&u.name)), token).release();
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_counts_only_updates_before_a_commit_mark() {
        let a = "a".repeat(40);
        let text = format!(
            "lock refs/heads/x\nupdate - {a} refs/heads/x\ncommit\nlock refs/heads/y\nupdate {a} - refs/heads/y\ncomm"
        );
        let r = parse(&text);
        assert_eq!(r.locks, ["refs/heads/x", "refs/heads/y"]);
        assert_eq!(r.committed.len(), 1);
        assert_eq!(r.committed[0].name, "refs/heads/x");
        assert_eq!(r.committed[0].old, None);
        // Names that would leave refs/ are ignored.
        let r = parse("lock ../../etc/passwd\nupdate - - refs/../x\ncommit\n");
        assert!(r.locks.is_empty() && r.committed.is_empty());
    }
}
