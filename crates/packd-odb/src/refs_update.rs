//! Changing refs safely: git's ref-name rules, and batches of compare-and-swap updates under
//! lock files.
//!
//! ```text
//! <common>/refs/heads/main.lock   created with O_EXCL: whoever creates it owns the ref
//!   1. lock       create <ref>.lock (exists already: "failed to lock")
//!   2. verify     current value (loose file, else packed-refs) == expected old ("stale info")
//!   3. commit     write "<hex>\n" into the lock, fsync, rename over <ref>
//!                 delete: drop the ref from packed-refs (rewritten under packed-refs.lock),
//!                 then remove the loose file and the lock
//! packed-refs     "# pack-refs with: peeled fully-peeled sorted\n"
//!                 "<hex> refs/tags/v1\n" "^<peeled hex>\n"
//! ```
//! An atomic batch locks and verifies every ref before committing any; if one step fails, every
//! lock is released and every ref fails. A non-atomic batch treats each ref on its own.
//! Whether an update is a fast-forward is the caller's business: it needs the object graph.

use crate::hash::ObjectId;
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// How long to wait for `packed-refs.lock` (git's `core.packedRefsTimeout` default).
const PACKED_REFS_TIMEOUT: Duration = Duration::from_millis(1000);

/// Why a ref name is invalid, or `Ok` when git's receive-pack would accept it: `refs/`
/// followed by at least two components (`refs/heads/main`, not `refs/main`), each by
/// `check-ref-format`'s rules.
pub fn check_ref_name(name: &str) -> Result<(), String> {
    let Some(rest) = name.strip_prefix("refs/") else {
        return Err(format!(
            "invalid ref name '{name}': it must start with refs/"
        ));
    };
    if !rest.contains('/') {
        return Err(format!(
            "invalid ref name '{name}': it needs a component after refs/{rest}/"
        ));
    }
    crate::refs::check_ref_format(name)
}

/// One ref change: compare with `old`, then set to `new`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RefUpdate {
    /// Full ref name (`refs/heads/main`).
    pub name: String,
    /// The value the ref must have now; `None`: it must not exist (the protocol's zero id).
    pub old: Option<ObjectId>,
    /// The value to set; `None` deletes the ref.
    pub new: Option<ObjectId>,
}

/// The outcome of one update: `Err` holds the reason as git words it in report-status.
pub type RefResult = Result<(), String>;

/// git's reason for the refs of a failed atomic batch that were fine themselves.
pub const ATOMIC_FAILED: &str = "atomic transaction failed";

/// A held `<ref>.lock`, removed on drop unless committed.
struct Lock {
    path: PathBuf,
    file: Option<File>,
}

impl Drop for Lock {
    fn drop(&mut self) {
        if self.file.take().is_some() {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

fn lock_path(path: &Path) -> PathBuf {
    let mut s = path.as_os_str().to_owned();
    s.push(".lock");
    PathBuf::from(s)
}

fn take_lock(path: &Path) -> Result<Lock, String> {
    let lock = lock_path(path);
    let open = || OpenOptions::new().write(true).create_new(true).open(&lock);
    // The directory usually exists: made only when the lock cannot be created without it.
    let opened = match open() {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => match lock.parent() {
            Some(parent) => {
                std::fs::create_dir_all(parent).map_err(|_| "failed to lock".to_string())?;
                open()
            }
            None => Err(e),
        },
        other => other,
    };
    match opened {
        Ok(file) => Ok(Lock {
            path: lock,
            file: Some(file),
        }),
        Err(_) => Err("failed to lock".to_string()),
    }
}

/// Takes `packed-refs.lock`, waiting up to [`PACKED_REFS_TIMEOUT`] for another writer.
fn take_packed_lock(common: &Path) -> Result<Lock, String> {
    let start = Instant::now();
    loop {
        match take_lock(&common.join("packed-refs")) {
            Ok(lock) => return Ok(lock),
            Err(e) if start.elapsed() >= PACKED_REFS_TIMEOUT => return Err(e),
            Err(_) => std::thread::sleep(Duration::from_millis(10)),
        }
    }
}

/// The packed value of `name`, if packed.
fn packed_value(common: &Path, name: &str) -> Result<Option<ObjectId>, String> {
    crate::packed_refs::PackedRefs::read(common)
        .map(|p| p.and_then(|p| p.find(name)))
        .map_err(|e| format!("cannot read packed-refs: {e}"))
}

/// The current value of `name`: its loose file, else its packed-refs line.
fn current_value(common: &Path, name: &str) -> Result<Option<ObjectId>, String> {
    let path = common.join(name);
    match std::fs::read_to_string(&path) {
        Ok(text) => {
            let text = text.trim_end();
            if text.starts_with("ref:") {
                return Err("cannot update a symbolic ref".to_string());
            }
            ObjectId::from_hex(text.get(..40).unwrap_or(""))
                .map(Some)
                .ok_or_else(|| format!("{name} is not a valid ref file"))
        }
        Err(_) if path.is_dir() => Err(format!("{name} is a directory of refs")),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => packed_value(common, name),
        // A file where a directory should be (refs/heads/a while writing refs/heads/a/b).
        Err(_) => Err("failed to lock".to_string()),
    }
}

/// Locks and verifies one update.
fn prepare(common: &Path, update: &RefUpdate) -> Result<Lock, String> {
    check_ref_name(&update.name)?;
    let lock = take_lock(&common.join(&update.name))?;
    let current = current_value(common, &update.name)?;
    if current != update.old {
        return Err(match update.old {
            None => "reference already exists".to_string(),
            Some(_) => "stale info".to_string(),
        });
    }
    if update.new.is_none() && current.is_none() {
        return Err("unable to delete: the ref does not exist".to_string());
    }
    Ok(lock)
}

/// Rewrites packed-refs without `names` (a ref's peeled line goes with it). The caller holds
/// the locks of those refs.
fn remove_packed(common: &Path, names: &[&str]) -> Result<(), String> {
    let path = common.join("packed-refs");
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(format!("cannot read packed-refs: {e}")),
    };
    let mut out = String::with_capacity(text.len());
    let mut skipping = false;
    let mut changed = false;
    for line in text.lines() {
        if line.starts_with('^') && skipping {
            continue;
        }
        skipping = !line.starts_with('#')
            && line
                .split_once(' ')
                .is_some_and(|(_, refname)| names.contains(&refname));
        if skipping {
            changed = true;
            continue;
        }
        out.push_str(line);
        out.push('\n');
    }
    if !changed {
        return Ok(());
    }
    let mut lock = take_packed_lock(common)?;
    let file = lock.file.as_mut().ok_or("failed to lock")?;
    file.write_all(out.as_bytes())
        .and_then(|()| file.sync_all())
        .map_err(|e| format!("cannot write packed-refs: {e}"))?;
    std::fs::rename(&lock.path, &path).map_err(|e| format!("cannot write packed-refs: {e}"))?;
    lock.file = None;
    Ok(())
}

/// Removes now-empty directories between a deleted ref and `refs/`.
fn prune_dirs(common: &Path, name: &str) {
    let mut dir = Path::new(name).parent();
    while let Some(d) = dir {
        if d.as_os_str().len() <= "refs/heads".len() || std::fs::remove_dir(common.join(d)).is_err()
        {
            break;
        }
        dir = d.parent();
    }
}

/// Commits one locked update.
fn commit(common: &Path, update: &RefUpdate, mut lock: Lock) -> RefResult {
    let path = common.join(&update.name);
    match update.new {
        Some(new) => {
            let file = lock.file.as_mut().ok_or("failed to lock")?;
            file.write_all(format!("{}\n", new.to_hex()).as_bytes())
                .and_then(|()| file.sync_all())
                .map_err(|e| format!("failed to write: {e}"))?;
            std::fs::rename(&lock.path, &path).map_err(|e| format!("failed to write: {e}"))?;
            lock.file = None;
        }
        None => {
            remove_packed(common, &[update.name.as_str()])?;
            match std::fs::remove_file(&path) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(format!("failed to delete: {e}")),
            }
            drop(lock);
            prune_dirs(common, &update.name);
        }
    }
    Ok(())
}

fn sync_dir(dir: &Path) {
    if let Ok(d) = File::open(dir) {
        let _ = d.sync_all();
    }
}

/// Makes the renames and removals of the applied `updates` durable: fsyncs the directory of
/// each ref that changed (a rename is durable once its directory is), and the common
/// directory when a deletion may have rewritten `packed-refs`. Each directory once.
fn sync_ref_dirs(common: &Path, updates: &[RefUpdate], results: &[RefResult]) {
    let mut dirs: Vec<PathBuf> = Vec::new();
    for (u, r) in updates.iter().zip(results) {
        if r.is_err() {
            continue;
        }
        let path = common.join(&u.name);
        let mut dir = path.parent().map(Path::to_path_buf);
        if u.new.is_none() {
            // Its directory may have been pruned: the nearest one left.
            while dir.as_ref().is_some_and(|d| !d.is_dir()) {
                dir = dir.and_then(|d| d.parent().map(Path::to_path_buf));
            }
            if !dirs.iter().any(|d| d == common) {
                dirs.push(common.to_path_buf());
            }
        }
        if let Some(d) = dir {
            if !dirs.contains(&d) {
                dirs.push(d);
            }
        }
    }
    for d in &dirs {
        sync_dir(d);
    }
}

/// Applies `updates` to the refs under `common` (the repository's common directory). Returns
/// one result per update, in order. With `atomic`, either all succeed or none changes.
pub fn apply(common: &Path, updates: &[RefUpdate], atomic: bool) -> Vec<RefResult> {
    let mut results: Vec<RefResult> = vec![Ok(()); updates.len()];
    for (i, u) in updates.iter().enumerate() {
        if updates[..i].iter().any(|o| o.name == u.name) {
            results[i] = Err("duplicate ref in one push".to_string());
        }
    }
    if !atomic {
        for (i, u) in updates.iter().enumerate() {
            if results[i].is_ok() {
                results[i] = prepare(common, u).and_then(|lock| commit(common, u, lock));
            }
        }
        sync_ref_dirs(common, updates, &results);
        return results;
    }
    let mut locks = Vec::with_capacity(updates.len());
    for (i, u) in updates.iter().enumerate() {
        if results[i].is_err() {
            break;
        }
        match prepare(common, u) {
            Ok(lock) => locks.push(lock),
            Err(e) => {
                results[i] = Err(e);
                break;
            }
        }
    }
    if results.iter().any(|r| r.is_err()) {
        drop(locks);
        for r in results.iter_mut() {
            if r.is_ok() {
                *r = Err(ATOMIC_FAILED.to_string());
            }
        }
        return results;
    }
    // Deletions of packed refs first, in one rewrite, so that a failure there moves nothing.
    let deleted: Vec<&str> = updates
        .iter()
        .filter(|u| u.new.is_none())
        .map(|u| u.name.as_str())
        .collect();
    if !deleted.is_empty() {
        if let Err(e) = remove_packed(common, &deleted) {
            drop(locks);
            return updates.iter().map(|_| Err(e.clone())).collect();
        }
    }
    for ((u, lock), r) in updates.iter().zip(locks).zip(results.iter_mut()) {
        *r = commit(common, u, lock);
    }
    sync_ref_dirs(common, updates, &results);
    results
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    fn git(dir: &Path, args: &[&str]) -> String {
        let out = Command::new("git")
            .args(args)
            .current_dir(dir)
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("HOME", dir)
            .output()
            .unwrap();
        assert!(out.status.success(), "git {args:?}: {out:?}");
        String::from_utf8(out.stdout).unwrap()
    }

    /// A bare repository with two commits; returns (dir, first, second).
    fn repo() -> (tempfile::TempDir, ObjectId, ObjectId) {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        git(d, &["init", "-q", "--bare", "."]);
        let tree = git(d, &["mktree"]);
        let tree = tree.trim();
        let env = [
            ("GIT_AUTHOR_NAME", "a"),
            ("GIT_AUTHOR_EMAIL", "a@b"),
            ("GIT_COMMITTER_NAME", "a"),
            ("GIT_COMMITTER_EMAIL", "a@b"),
        ];
        let commit = |parent: Option<&str>| {
            let mut c = Command::new("git");
            c.current_dir(d)
                .args(["commit-tree", tree, "-m", "x"])
                .envs(env);
            if let Some(p) = parent {
                c.args(["-p", p]);
            }
            let out = c.output().unwrap();
            String::from_utf8(out.stdout).unwrap().trim().to_string()
        };
        let a = commit(None);
        let b = commit(Some(&a));
        (
            dir,
            ObjectId::from_hex(&a).unwrap(),
            ObjectId::from_hex(&b).unwrap(),
        )
    }

    fn up(name: &str, old: Option<ObjectId>, new: Option<ObjectId>) -> RefUpdate {
        RefUpdate {
            name: name.to_string(),
            old,
            new,
        }
    }

    #[test]
    fn ref_names_follow_check_ref_format() {
        for good in [
            "refs/heads/main",
            "refs/tags/v1.0",
            "refs/pull/12/head",
            "refs/a/b@c",
        ] {
            assert!(check_ref_name(good).is_ok(), "{good}");
        }
        for bad in [
            "HEAD",
            "refs/a@b",
            "refs/main",
            "refs/heads/a..b",
            "refs/heads/a@{1}",
            "refs/heads/a b",
            "refs/heads/a~1",
            "refs/heads/a^",
            "refs/heads/a:b",
            "refs/heads/a?",
            "refs/heads/a*",
            "refs/heads/a[",
            "refs/heads/a\\b",
            "refs/heads/.hidden",
            "refs/heads/x.lock",
            "refs/heads/x/",
            "refs/heads/x.",
            "refs/heads//x",
            "refs/heads/\x01",
        ] {
            assert!(check_ref_name(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn creates_updates_and_deletes_refs_git_reads() {
        let (dir, a, b) = repo();
        let d = dir.path();
        let r = apply(d, &[up("refs/heads/main", None, Some(a))], false);
        assert_eq!(r, vec![Ok(())]);
        assert!(git(d, &["show-ref"]).contains(&format!("{} refs/heads/main", a.to_hex())));
        // Stale old value.
        let r = apply(d, &[up("refs/heads/main", Some(b), Some(b))], false);
        assert_eq!(r, vec![Err("stale info".to_string())]);
        // Creating what exists.
        let r = apply(d, &[up("refs/heads/main", None, Some(b))], false);
        assert!(r[0].is_err());
        let r = apply(d, &[up("refs/heads/main", Some(a), Some(b))], false);
        assert_eq!(r, vec![Ok(())]);
        assert!(git(d, &["show-ref"]).contains(&format!("{} refs/heads/main", b.to_hex())));
        // Packed refs: update and delete.
        git(d, &["update-ref", "refs/tags/t", &a.to_hex()]);
        git(d, &["pack-refs", "--all"]);
        let r = apply(
            d,
            &[
                up("refs/tags/t", Some(a), None),
                up("refs/heads/main", Some(b), None),
            ],
            true,
        );
        assert_eq!(r, vec![Ok(()), Ok(())]);
        assert_eq!(
            Command::new("git")
                .args(["show-ref"])
                .current_dir(d)
                .output()
                .unwrap()
                .stdout,
            b""
        );
        assert!(!d.join("packed-refs.lock").exists());
        git(d, &["fsck", "--no-progress"]);
    }

    #[test]
    fn atomic_batches_are_all_or_nothing() {
        let (dir, a, b) = repo();
        let d = dir.path();
        apply(d, &[up("refs/heads/x", None, Some(a))], false);
        let r = apply(
            d,
            &[
                up("refs/heads/new", None, Some(b)),
                up("refs/heads/x", Some(b), Some(a)),
            ],
            true,
        );
        assert_eq!(
            r,
            vec![
                Err(ATOMIC_FAILED.to_string()),
                Err("stale info".to_string())
            ]
        );
        let refs = git(d, &["show-ref"]);
        assert!(!refs.contains("refs/heads/new"), "{refs}");
        assert!(!d.join("refs/heads/new.lock").exists());
        // Non-atomic: the good one goes through.
        let r = apply(
            d,
            &[
                up("refs/heads/new", None, Some(b)),
                up("refs/heads/x", Some(b), Some(a)),
            ],
            false,
        );
        assert!(r[0].is_ok() && r[1].is_err());
        // A held lock refuses.
        std::fs::write(d.join("refs/heads/x.lock"), "").unwrap();
        let r = apply(d, &[up("refs/heads/x", Some(a), Some(b))], false);
        assert_eq!(r, vec![Err("failed to lock".to_string())]);
        // Invalid names.
        let r = apply(d, &[up("refs/heads/a..b", None, Some(b))], false);
        assert!(r[0].as_ref().unwrap_err().contains("invalid ref name"));
    }

    #[test]
    fn concurrent_updates_of_one_ref_have_one_winner() {
        let (dir, a, b) = repo();
        let d = dir.path().to_path_buf();
        apply(&d, &[up("refs/heads/main", None, Some(a))], false);
        for _ in 0..20 {
            let current = git(&d, &["rev-parse", "refs/heads/main"]);
            let current = ObjectId::from_hex(current.trim()).unwrap();
            let next = if current == a { b } else { a };
            let barrier = std::sync::Arc::new(std::sync::Barrier::new(8));
            let handles: Vec<_> = (0..8)
                .map(|_| {
                    let d = d.clone();
                    let barrier = barrier.clone();
                    std::thread::spawn(move || {
                        barrier.wait();
                        apply(
                            &d,
                            &[up("refs/heads/main", Some(current), Some(next))],
                            false,
                        )
                    })
                })
                .collect();
            let results: Vec<RefResult> = handles
                .into_iter()
                .map(|h| h.join().unwrap().remove(0))
                .collect();
            assert_eq!(
                results.iter().filter(|r| r.is_ok()).count(),
                1,
                "{results:?}"
            );
            for r in results.iter().filter_map(|r| r.as_ref().err()) {
                assert!(r == "failed to lock" || r == "stale info", "{r}");
            }
            let now = git(&d, &["rev-parse", "refs/heads/main"]);
            assert_eq!(now.trim(), next.to_hex());
        }
    }
}
