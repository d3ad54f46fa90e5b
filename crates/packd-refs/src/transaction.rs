//! Applying ref updates as git's files backend does, crash-atomically.
//!
//! ```text
//! apply(updates, atomic)
//!   recover dead journals (one directory read when there are none)
//!   journal = packd-transactions/<token>, flock'ed        (see journal.rs)
//!   atomic: one transaction of every update, locked in name order
//!   else:   one transaction per update, in the push's order (git 2.39's receive-pack)
//! transaction:
//!   1. prepare each ref:  directory/file conflicts (new refs), note + take <ref>.lock
//!                         (waiting core.filesRefLockTimeout), compare the old value, refuse a
//!                         non-commit under refs/heads/
//!      deletions:         note + take packed-refs.lock (core.packedRefsTimeout)
//!   2. hook "prepared"    an Err aborts (hook "aborted"), nothing written
//!   3. commit point:      journal gets the updates and "commit", fsynced (several refs only)
//!   4. write:             each new value to a temp file, fsync, rename over the ref;
//!                         deletions: packed-refs rewritten without them, then loose files go;
//!                         locks removed
//!                         (several refs: their directories fsynced before the locks go)
//!   5. hook "committed"
//! then: the directories of one-ref transactions' refs fsynced (each once), the journal removed
//! ```
//! A crash before 3 leaves every ref old (the next transaction removes the dead locks); a
//! crash after 3 leaves the journal to roll every ref of it forward. A transaction of one ref
//! has no step 3: its rename is its commit point (a deletion leaves it old, its loose file,
//! until the file goes), so a crash leaves it old or new and only its lock to remove. A failure
//! in step 4 leaves the journal, for the next transaction to finish. Readers (git or packd)
//! never see a torn value: every change is a rename or a removal.
//!
//! Failures are worded as git's: each refused ref gets the report-status reason
//! ([`crate::UPDATE_FAILED`], or [`crate::ATOMIC_FAILED`] for every ref of an atomic push) and
//! the ref that caused it git's error line (`cannot lock ref 'refs/heads/a/b': 'refs/heads/a'
//! exists; cannot create 'refs/heads/a/b'`).
//!
//! The hook runs as git's reference-transaction hook: `prepared` after step 1, `committed`
//! after step 4, `aborted` when the transaction fails after `prepared` ran (a failure while
//! locking runs no hook, as in git). git's receive-pack dies when `prepared` refuses ("ref
//! updates aborted by hook"); here that ref (every ref, atomic) is refused with that error.

use crate::conflict;
use crate::hook::{HookState, TransactionHook};
use crate::journal::{self, Journal, PACKED_REFS};
use crate::lock::{break_orphan, lock_path, owner, LockError, LockFile};
use crate::loose::{self, Current, ReadError};
use crate::{packed, RefResult, RefUpdate, Refusal, ATOMIC_FAILED, UPDATE_FAILED};
use packd_odb::config::Config;
use packd_odb::packed_refs::PackedRefs;
use packd_odb::ObjectId;
use std::collections::BTreeSet;
use std::path::Path;
use std::time::{Duration, Instant};

/// git's advice after "Unable to create '<lock>': File exists.".
const LOCK_ADVICE: &str = "Another git process seems to be running in this repository, e.g.\n\
an editor opened by 'git commit'. Please make sure all processes\n\
are terminated then try again. If it still fails, a git process\n\
may have crashed in this repository earlier:\n\
remove the file manually to continue.";

/// How a transaction waits and what it may ask of the object store.
#[derive(Clone, Copy)]
pub struct TransactionOptions<'a> {
    /// How long to wait for a `<ref>.lock` held by a live writer (`core.filesRefLockTimeout`,
    /// git's default 100 ms). `None`: wait as long as it takes (a negative value in git).
    pub lock_timeout: Option<Duration>,
    /// How long to wait for `packed-refs.lock` (`core.packedRefsTimeout`, default 1000 ms).
    pub packed_refs_timeout: Option<Duration>,
    /// Whether an object is a commit: refs under `refs/heads/` may only name commits (git:
    /// "trying to write non-commit object"). `None` skips the check.
    pub is_commit: Option<&'a dyn Fn(&ObjectId) -> bool>,
}

impl std::fmt::Debug for TransactionOptions<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TransactionOptions")
            .field("lock_timeout", &self.lock_timeout)
            .field("packed_refs_timeout", &self.packed_refs_timeout)
            .field("is_commit", &self.is_commit.is_some())
            .finish()
    }
}

impl Default for TransactionOptions<'_> {
    fn default() -> Self {
        TransactionOptions {
            lock_timeout: Some(Duration::from_millis(100)),
            packed_refs_timeout: Some(Duration::from_millis(1000)),
            is_commit: None,
        }
    }
}

impl TransactionOptions<'_> {
    /// The timeouts a repository's configuration sets (`core.filesRefLockTimeout`,
    /// `core.packedRefsTimeout`, in milliseconds; negative: forever), git's defaults else.
    pub fn from_config(config: &Config) -> TransactionOptions<'static> {
        let ms = |key: &str, default: u64| match config.get(key).map(|v| v.trim().parse::<i64>()) {
            Some(Ok(v)) if v < 0 => None,
            Some(Ok(v)) => Some(Duration::from_millis(v as u64)),
            _ => Some(Duration::from_millis(default)),
        };
        TransactionOptions {
            lock_timeout: ms("core.filesreflocktimeout", 100),
            packed_refs_timeout: ms("core.packedrefstimeout", 1000),
            is_commit: None,
        }
    }
}

/// Applies `updates` to the refs under `common` (the repository's common directory) and
/// returns one result per update, in order. With `atomic`, all succeed or none changes, across
/// crashes too; without, each update is its own transaction, in order. `hook` is called as
/// git calls the reference-transaction hook.
pub fn apply(
    common: &Path,
    updates: &[RefUpdate],
    atomic: bool,
    options: &TransactionOptions<'_>,
    hook: &mut dyn TransactionHook,
) -> Vec<RefResult> {
    if updates.is_empty() {
        return Vec::new();
    }
    let packed_timeout = options.packed_refs_timeout.unwrap_or(Duration::MAX);
    journal::recover(common, packed_timeout);
    let reason = if atomic { ATOMIC_FAILED } else { UPDATE_FAILED };
    let mut journal = match Journal::create(common) {
        Ok(j) => j,
        Err(e) => {
            let error = format!("cannot start a ref transaction: {e}");
            return updates
                .iter()
                .enumerate()
                .map(|(i, _)| Err(refusal(reason, (i == 0).then(|| error.clone()))))
                .collect();
        }
    };
    let mut keep_journal = false;
    let results = if atomic {
        let mut order: Vec<usize> = (0..updates.len()).collect();
        order.sort_by(|&a, &b| updates[a].name.cmp(&updates[b].name));
        let duplicate = order
            .windows(2)
            .find(|w| updates[w[0]].name == updates[w[1]].name)
            .map(|w| w[0]);
        let outcome = match duplicate {
            Some(i) => Err(Failure::at(
                i,
                format!("multiple updates for ref '{}' not allowed", updates[i].name),
            )),
            None => run(common, &mut journal, updates, &order, options, hook),
        };
        match outcome {
            Ok(()) => vec![Ok(()); updates.len()],
            Err(f) => {
                keep_journal |= f.keep_journal;
                (0..updates.len())
                    .map(|i| Err(refusal(ATOMIC_FAILED, f.error_for(i))))
                    .collect()
            }
        }
    } else {
        (0..updates.len())
            .map(|i| {
                run(common, &mut journal, updates, &[i], options, hook).map_err(|f| {
                    keep_journal |= f.keep_journal;
                    refusal(UPDATE_FAILED, Some(f.error))
                })
            })
            .collect()
    };
    // The renames and removals of one-ref transactions made durable, each directory once,
    // before the journal goes (a transaction of several did it before releasing its locks).
    let done = updates
        .iter()
        .zip(&results)
        .filter(|(_, r)| r.is_ok() && (!atomic || updates.len() == 1));
    let deleted = done.clone().any(|(u, _)| u.new.is_none());
    loose::sync_dirs(common, done.map(|(u, _)| u.name.as_str()), deleted);
    if !keep_journal {
        journal.finish();
    }
    results
}

fn refusal(reason: &str, error: Option<String>) -> Refusal {
    Refusal {
        reason: reason.to_string(),
        error,
    }
}

/// Why a transaction failed: git's error text, the update it is about, and whether the
/// journal must stay for recovery (a failure after the commit point).
#[derive(Debug)]
struct Failure {
    index: Option<usize>,
    error: String,
    keep_journal: bool,
}

impl Failure {
    fn at(index: usize, error: String) -> Failure {
        Failure {
            index: Some(index),
            error,
            keep_journal: false,
        }
    }

    /// The error line, on the update it is about (the first when it is about none).
    fn error_for(&self, i: usize) -> Option<String> {
        (self.index.unwrap_or(0) == i).then(|| self.error.clone())
    }
}

/// One transaction of `updates[order...]`, locked in that order.
fn run(
    common: &Path,
    journal: &mut Journal,
    updates: &[RefUpdate],
    order: &[usize],
    options: &TransactionOptions<'_>,
    hook: &mut dyn TransactionHook,
) -> Result<(), Failure> {
    let batch: Vec<&RefUpdate> = order.iter().map(|&i| &updates[i]).collect();
    let batch_names: BTreeSet<&str> = batch.iter().map(|u| u.name.as_str()).collect();
    let mut packed_refs: Option<Option<PackedRefs>> = None;
    let mut locks = Vec::with_capacity(batch.len());
    for (k, u) in batch.iter().enumerate() {
        match prepare(common, journal, u, &batch_names, &mut packed_refs, options) {
            Ok(lock) => locks.push(lock),
            Err(error) => return Err(Failure::at(order[k], error)),
        }
    }
    let deletes = batch.iter().any(|u| u.new.is_none());
    let packed_lock = if deletes {
        let timeout = options.packed_refs_timeout;
        let lock = common.join(PACKED_REFS);
        match take_lock(
            common,
            journal,
            PACKED_REFS,
            &lock_path(&lock),
            timeout,
            options,
        ) {
            Ok(l) => Some(l),
            Err(LockError::Exists) => {
                return Err(Failure {
                    index: None,
                    error: format!(
                        "Unable to create '{}': File exists.\n\n{LOCK_ADVICE}",
                        lock_path(&lock).display()
                    ),
                    keep_journal: false,
                })
            }
            Err(LockError::Blocked(e)) => {
                return Err(Failure {
                    index: None,
                    error: format!("cannot lock packed-refs: {e}"),
                    keep_journal: false,
                })
            }
        }
    } else {
        None
    };
    let owned: Vec<RefUpdate> = batch.iter().map(|u| (*u).clone()).collect();
    if let Err(message) = hook.run(HookState::Prepared, &owned) {
        drop(locks);
        drop(packed_lock);
        let _ = hook.run(HookState::Aborted, &owned);
        let mut error = "ref updates aborted by hook".to_string();
        if !message.trim().is_empty() {
            error.push_str(&format!(": {}", message.trim_end()));
        }
        return Err(Failure {
            index: None,
            error,
            keep_journal: false,
        });
    }
    // The commit point of a transaction of several refs. One ref needs none: its rename (a
    // deletion's packed-refs rewrite, then its removal) leaves it old or new, whatever stops
    // where, and a dead owner's lock is all there is to undo.
    if batch.len() > 1 {
        if let Err(e) = journal.commit(&batch) {
            drop(locks);
            drop(packed_lock);
            let _ = hook.run(HookState::Aborted, &owned);
            return Err(Failure {
                index: None,
                error: format!("cannot record the ref transaction: {e}"),
                keep_journal: false,
            });
        }
    }
    // Past the commit point: a failure now leaves the locks and the journal, whose recovery
    // finishes the transaction.
    let leave = |locks: Vec<LockFile>, packed_lock: Option<LockFile>, error: String| {
        locks.into_iter().for_each(LockFile::leave);
        packed_lock.into_iter().for_each(LockFile::leave);
        Failure {
            index: None,
            error,
            keep_journal: true,
        }
    };
    for u in &batch {
        if let Some(new) = u.new {
            if let Err(e) = loose::write(common, &u.name, &new, &journal.temp()) {
                let _ = hook.run(HookState::Aborted, &owned);
                return Err(leave(
                    locks,
                    packed_lock,
                    format!("cannot update ref '{}': {e}", u.name),
                ));
            }
        }
    }
    let deleted: Vec<&str> = batch
        .iter()
        .filter(|u| u.new.is_none())
        .map(|u| u.name.as_str())
        .collect();
    if !deleted.is_empty() {
        let removed = packed::remove_refs(common, &deleted, &journal.temp())
            .and_then(|_| deleted.iter().try_for_each(|n| loose::remove(common, n)));
        if let Err(e) = removed {
            let _ = hook.run(HookState::Aborted, &owned);
            return Err(leave(
                locks,
                packed_lock,
                format!("cannot delete refs: {e}"),
            ));
        }
    }
    // Several refs: their renames durable before their locks go, as recovery after a machine
    // stopped rolls forward only the refs still locked. (One ref: at the end of apply.)
    if batch.len() > 1 {
        let names = batch.iter().map(|u| u.name.as_str());
        loose::sync_dirs(common, names, !deleted.is_empty());
    }
    drop(packed_lock);
    drop(locks);
    let _ = hook.run(HookState::Committed, &owned);
    Ok(())
}

/// Locks and verifies one update: git's error text when it cannot.
fn prepare(
    common: &Path,
    journal: &mut Journal,
    u: &RefUpdate,
    batch_names: &BTreeSet<&str>,
    packed_refs: &mut Option<Option<PackedRefs>>,
    options: &TransactionOptions<'_>,
) -> Result<LockFile, String> {
    let name = &u.name;
    let cannot = |detail: String| format!("cannot lock ref '{name}': {detail}");
    crate::check_ref_name(name).map_err(cannot)?;
    let conflict = |packed_refs: &mut Option<Option<PackedRefs>>| {
        if packed_refs.is_none() {
            *packed_refs = Some(PackedRefs::read(common).ok().flatten());
        }
        let packed = packed_refs.as_ref().and_then(|p| p.as_ref());
        conflict::check(common, name, packed, batch_names)
    };
    if u.new.is_some() && !loose::is_loose_file(common, name) {
        conflict(packed_refs).map_err(cannot)?;
    }
    let path = lock_path(&common.join(name));
    let lock = match take_lock(common, journal, name, &path, options.lock_timeout, options) {
        Ok(lock) => lock,
        Err(LockError::Exists) => {
            return Err(cannot(format!(
                "Unable to create '{}': File exists.\n\n{LOCK_ADVICE}",
                path.display()
            )))
        }
        Err(LockError::Blocked(e)) => {
            return Err(cannot(match conflict(packed_refs) {
                Err(detail) => detail,
                Ok(()) => format!("unable to create '{}': {e}", path.display()),
            }))
        }
    };
    let current = match loose::current(common, name) {
        Ok(c) => c,
        Err(ReadError::Symbolic) => return Err(cannot("it is a symbolic ref".to_string())),
        Err(ReadError::Broken(why)) => return Err(cannot(why)),
    };
    let now = match current {
        Current::Missing => None,
        Current::Id(id) => Some(id),
    };
    check_values(u, now, options)?;
    Ok(lock)
}

/// Checks update `u` against `current`, the ref's value now (`None`: it does not exist), as
/// git's ref backends do: the old value it expects, and no non-commit under `refs/heads/`;
/// git's `error:` text if refused. Shared by the files backend and the reftable one
/// (`crate::reftable_update`).
pub(crate) fn check_values(
    u: &RefUpdate,
    current: Option<ObjectId>,
    options: &TransactionOptions<'_>,
) -> Result<(), String> {
    let name = &u.name;
    let cannot = |detail: String| format!("cannot lock ref '{name}': {detail}");
    match (u.old, current) {
        (Some(_), None) => return Err(cannot(format!("unable to resolve reference '{name}'"))),
        (Some(old), Some(now)) if now != old => {
            return Err(cannot(format!(
                "is at {} but expected {}",
                now.to_hex(),
                old.to_hex()
            )))
        }
        (None, Some(_)) if u.new.is_some() => {
            return Err(cannot("reference already exists".to_string()))
        }
        _ => {}
    }
    if let (Some(new), Some(is_commit)) = (u.new, options.is_commit) {
        if name.starts_with("refs/heads/") && !is_commit(&new) {
            return Err(format!(
                "cannot update ref '{name}': trying to write non-commit object {} to branch '{name}'",
                new.to_hex()
            ));
        }
    }
    Ok(())
}

/// Takes the lock file `path` for `target`, noting it in the journal first. A lock of a dead
/// packd transaction is broken by recovering that transaction; one of a live writer (or of
/// git, which writes no token) is waited for up to `timeout`.
fn take_lock(
    common: &Path,
    journal: &mut Journal,
    target: &str,
    path: &Path,
    timeout: Option<Duration>,
    options: &TransactionOptions<'_>,
) -> Result<LockFile, LockError> {
    let packed_timeout = options.packed_refs_timeout.unwrap_or(Duration::MAX);
    journal.note_lock(target).map_err(LockError::Blocked)?;
    let start = Instant::now();
    let mut pause = Duration::from_millis(1);
    loop {
        let temp = journal.temp();
        match LockFile::try_create(path, journal.token(), &temp) {
            Err(LockError::Exists) => {}
            other => return other,
        }
        if let Some(token) = owner(path).filter(|t| t != journal.token()) {
            if journal::recover_one(common, &token, Some(path), packed_timeout) {
                continue;
            }
            if !journal::exists(common, &token) && break_orphan(path, &token, &journal.temp()) {
                continue;
            }
        }
        if timeout.is_some_and(|t| start.elapsed() >= t) {
            return Err(LockError::Exists);
        }
        std::thread::sleep(pause);
        pause = (pause * 2).min(Duration::from_millis(20));
    }
}
