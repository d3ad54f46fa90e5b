//! Transactions against real repositories, read back by git.

use crate::journal::Journal;
use crate::lock::{lock_path, LockFile};
use crate::*;
use packd_odb::ObjectId;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

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

fn run(d: &Path, updates: &[RefUpdate], atomic: bool) -> Vec<RefResult> {
    apply(
        d,
        updates,
        atomic,
        &TransactionOptions::default(),
        &mut NoHook,
    )
}

fn failed(error: &str) -> RefResult {
    Err(Refusal::with_error(UPDATE_FAILED, error))
}

fn show_ref(d: &Path) -> String {
    let out = Command::new("git")
        .args(["show-ref"])
        .current_dir(d)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .output()
        .unwrap();
    String::from_utf8(out.stdout).unwrap()
}

/// What is left in the journal directory.
fn journal_files(d: &Path) -> Vec<String> {
    std::fs::read_dir(d.join(JOURNAL_DIR))
        .map(|r| {
            r.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn creates_updates_and_deletes_refs_git_reads() {
    let (dir, a, b) = repo();
    let d = dir.path();
    assert_eq!(
        run(d, &[up("refs/heads/main", None, Some(a))], false),
        vec![Ok(())]
    );
    assert!(show_ref(d).contains(&format!("{} refs/heads/main", a.to_hex())));
    assert_eq!(
        run(d, &[up("refs/heads/main", Some(b), Some(b))], false),
        vec![failed(&format!(
            "cannot lock ref 'refs/heads/main': is at {} but expected {}",
            a.to_hex(),
            b.to_hex()
        ))]
    );
    assert_eq!(
        run(d, &[up("refs/heads/main", None, Some(b))], false),
        vec![failed(
            "cannot lock ref 'refs/heads/main': reference already exists"
        )]
    );
    assert_eq!(
        run(d, &[up("refs/heads/gone", Some(a), Some(b))], false),
        vec![failed(
            "cannot lock ref 'refs/heads/gone': unable to resolve reference 'refs/heads/gone'"
        )]
    );
    assert_eq!(
        run(d, &[up("refs/heads/main", Some(a), Some(b))], false),
        vec![Ok(())]
    );
    // Packed refs: update and delete; a deletion without an old value of a missing ref.
    git(d, &["update-ref", "refs/tags/t", &a.to_hex()]);
    git(d, &["pack-refs", "--all"]);
    let r = run(
        d,
        &[
            up("refs/tags/t", Some(a), None),
            up("refs/heads/main", Some(b), None),
            up("refs/heads/never", None, None),
        ],
        true,
    );
    assert_eq!(r, vec![Ok(()), Ok(()), Ok(())]);
    assert_eq!(show_ref(d), "");
    assert!(!d.join("packed-refs.lock").exists());
    assert_eq!(journal_files(d), Vec::<String>::new());
    git(d, &["fsck", "--no-progress"]);
}

#[test]
fn atomic_batches_are_all_or_nothing() {
    let (dir, a, b) = repo();
    let d = dir.path();
    run(d, &[up("refs/heads/x", None, Some(a))], false);
    let r = run(
        d,
        &[
            up("refs/heads/new", None, Some(b)),
            up("refs/heads/x", Some(b), Some(a)),
        ],
        true,
    );
    let stale = format!(
        "cannot lock ref 'refs/heads/x': is at {} but expected {}",
        a.to_hex(),
        b.to_hex()
    );
    assert_eq!(
        r,
        vec![
            Err(Refusal::reason(ATOMIC_FAILED)),
            Err(Refusal::with_error(ATOMIC_FAILED, stale.clone()))
        ]
    );
    let refs = show_ref(d);
    assert!(!refs.contains("refs/heads/new"), "{refs}");
    assert!(!d.join("refs/heads/new.lock").exists());
    // Non-atomic: the good one goes through.
    let r = run(
        d,
        &[
            up("refs/heads/new", None, Some(b)),
            up("refs/heads/x", Some(b), Some(a)),
        ],
        false,
    );
    assert_eq!(r, vec![Ok(()), failed(&stale)]);
    // Two updates of one ref in an atomic batch.
    let r = run(
        d,
        &[
            up("refs/heads/d", None, Some(a)),
            up("refs/heads/d", None, Some(b)),
        ],
        true,
    );
    assert_eq!(
        r[0],
        Err(Refusal::with_error(
            ATOMIC_FAILED,
            "multiple updates for ref 'refs/heads/d' not allowed"
        ))
    );
}

#[test]
fn directory_file_conflicts_are_refused_loose_packed_and_within_a_batch() {
    let (dir, a, _) = repo();
    let d = dir.path();
    run(d, &[up("refs/heads/main", None, Some(a))], false);
    run(d, &[up("refs/heads/p/q", None, Some(a))], false);
    for packed in [false, true] {
        if packed {
            git(d, &["pack-refs", "--all"]);
            assert!(!d.join("refs/heads/main").exists());
        }
        assert_eq!(
            run(d, &[up("refs/heads/main/sub", None, Some(a))], false),
            vec![failed(
                "cannot lock ref 'refs/heads/main/sub': 'refs/heads/main' exists; cannot create 'refs/heads/main/sub'"
            )],
            "packed: {packed}"
        );
        assert_eq!(
            run(d, &[up("refs/heads/p", None, Some(a))], false),
            vec![failed(
                "cannot lock ref 'refs/heads/p': 'refs/heads/p/q' exists; cannot create 'refs/heads/p'"
            )],
            "packed: {packed}"
        );
    }
    // Within one push: in order without atomic, at once with it.
    assert_eq!(
        run(
            d,
            &[up("refs/heads/c", None, Some(a)), up("refs/heads/c/d", None, Some(a))],
            false
        ),
        vec![
            Ok(()),
            failed("cannot lock ref 'refs/heads/c/d': 'refs/heads/c' exists; cannot create 'refs/heads/c/d'")
        ]
    );
    let r = run(
        d,
        &[
            up("refs/heads/e/d", None, Some(a)),
            up("refs/heads/e", None, Some(a)),
        ],
        true,
    );
    assert_eq!(
        r,
        vec![
            Err(Refusal::reason(ATOMIC_FAILED)),
            Err(Refusal::with_error(
                ATOMIC_FAILED,
                "cannot lock ref 'refs/heads/e': cannot process 'refs/heads/e' and 'refs/heads/e/d' at the same time"
            ))
        ]
    );
    // Deleting a and creating a/b: in order it works, atomically it does not (as in git).
    let r = run(
        d,
        &[
            up("refs/heads/c", Some(a), None),
            up("refs/heads/c/d", None, Some(a)),
        ],
        false,
    );
    assert_eq!(r, vec![Ok(()), Ok(())]);
    let r = run(
        d,
        &[
            up("refs/heads/c/d", Some(a), None),
            up("refs/heads/c", None, Some(a)),
        ],
        true,
    );
    assert_eq!(
        r[1],
        Err(Refusal::with_error(
            ATOMIC_FAILED,
            "cannot lock ref 'refs/heads/c': 'refs/heads/c/d' exists; cannot create 'refs/heads/c'"
        ))
    );
    git(d, &["fsck", "--no-progress"]);
    // git itself still lists every ref.
    assert!(show_ref(d).contains("refs/heads/c/d"));
}

#[test]
fn branches_name_only_commits() {
    let (dir, a, b) = repo();
    let d = dir.path();
    let is_commit = |id: &ObjectId| *id == a;
    let options = TransactionOptions {
        is_commit: Some(&is_commit),
        ..TransactionOptions::default()
    };
    let r = apply(
        d,
        &[
            up("refs/heads/x", None, Some(b)),
            up("refs/tags/x", None, Some(b)),
        ],
        false,
        &options,
        &mut NoHook,
    );
    assert_eq!(
        r,
        vec![
            failed(&format!(
                "cannot update ref 'refs/heads/x': trying to write non-commit object {0} to branch 'refs/heads/x'",
                b.to_hex()
            )),
            Ok(())
        ]
    );
}

/// A hook that records its calls and refuses `prepared` when told to.
struct Recorder {
    calls: Vec<(HookState, usize)>,
    refuse: bool,
}

impl TransactionHook for Recorder {
    fn run(&mut self, state: HookState, updates: &[RefUpdate]) -> Result<(), String> {
        self.calls.push((state, updates.len()));
        if self.refuse && state == HookState::Prepared {
            return Err("no".to_string());
        }
        Ok(())
    }
}

#[test]
fn the_hook_runs_at_git_s_points_and_can_abort() {
    let (dir, a, b) = repo();
    let d = dir.path();
    let two = [
        up("refs/heads/x", None, Some(a)),
        up("refs/heads/y", None, Some(b)),
    ];
    let mut hook = Recorder {
        calls: Vec::new(),
        refuse: false,
    };
    let r = apply(d, &two, true, &TransactionOptions::default(), &mut hook);
    assert_eq!(r, vec![Ok(()), Ok(())]);
    assert_eq!(
        hook.calls,
        [(HookState::Prepared, 2), (HookState::Committed, 2)]
    );
    let mut hook = Recorder {
        calls: Vec::new(),
        refuse: true,
    };
    let r = apply(
        d,
        &[up("refs/heads/z", None, Some(a))],
        false,
        &TransactionOptions::default(),
        &mut hook,
    );
    assert_eq!(r, vec![failed("ref updates aborted by hook: no")]);
    assert_eq!(
        hook.calls,
        [(HookState::Prepared, 1), (HookState::Aborted, 1)]
    );
    assert!(!show_ref(d).contains("refs/heads/z"));
    assert!(!d.join("refs/heads/z.lock").exists());
    // A transaction that fails while locking runs no hook.
    let mut hook = Recorder {
        calls: Vec::new(),
        refuse: false,
    };
    apply(
        d,
        &[up("refs/heads/x", None, Some(a))],
        false,
        &TransactionOptions::default(),
        &mut hook,
    );
    assert!(hook.calls.is_empty());
}

/// Leaves what a transaction killed at its commit point (`committed`) or before it leaves: its
/// journal, its locks on `updates`, nothing written; the owner "dies" (its flock dropped).
fn crash(d: &Path, updates: &[RefUpdate], committed: bool) -> String {
    let mut journal = Journal::create(d).unwrap();
    let token = journal.token().to_string();
    for u in updates {
        journal.note_lock(&u.name).unwrap();
        let temp = journal.temp();
        LockFile::try_create(&lock_path(&d.join(&u.name)), &token, &temp)
            .unwrap()
            .leave();
    }
    if updates.iter().any(|u| u.new.is_none()) {
        journal.note_lock("packed-refs").unwrap();
        let temp = journal.temp();
        LockFile::try_create(&d.join("packed-refs.lock"), &token, &temp)
            .unwrap()
            .leave();
    }
    if committed {
        journal.commit(&updates.iter().collect::<Vec<_>>()).unwrap();
    }
    drop(journal);
    wait_until_dead(d, &token);
    token
}

/// Waits until the journal `token`'s flock is free: a `git` that another test thread forks
/// holds a copy of every open descriptor until it execs, so the "dead" owner's flock can
/// outlive the drop for an instant (harmless in a server: recovery then waits for a later
/// transaction; here it would make a test's one recovery miss it).
fn wait_until_dead(d: &Path, token: &str) {
    let path = d.join(JOURNAL_DIR).join(token);
    for _ in 0..10_000 {
        match std::fs::File::open(&path) {
            Ok(f) if f.try_lock().is_err() => std::thread::sleep(Duration::from_millis(1)),
            _ => return,
        }
    }
    panic!("the journal {token} stays locked");
}

#[test]
fn a_dead_transaction_past_its_commit_point_is_rolled_forward() {
    let (dir, a, b) = repo();
    let d = dir.path();
    run(
        d,
        &[
            up("refs/heads/main", None, Some(a)),
            up("refs/tags/t", None, Some(a)),
        ],
        false,
    );
    git(d, &["pack-refs", "--all"]);
    let updates = [
        up("refs/heads/main", Some(a), Some(b)),
        up("refs/tags/t", Some(a), None),
        up("refs/heads/new", None, Some(b)),
    ];
    crash(d, &updates, true);
    // The locks block git meanwhile, as any held lock does.
    assert!(d.join("refs/heads/main.lock").exists());
    // The next transaction (of another ref) finishes the dead one first.
    assert_eq!(
        run(d, &[up("refs/heads/other", None, Some(a))], false),
        vec![Ok(())]
    );
    let refs = show_ref(d);
    assert!(
        refs.contains(&format!("{} refs/heads/main", b.to_hex())),
        "{refs}"
    );
    assert!(
        refs.contains(&format!("{} refs/heads/new", b.to_hex())),
        "{refs}"
    );
    assert!(!refs.contains("refs/tags/t"), "{refs}");
    for lock in [
        "refs/heads/main.lock",
        "refs/tags/t.lock",
        "refs/heads/new.lock",
        "packed-refs.lock",
    ] {
        assert!(!d.join(lock).exists(), "{lock}");
    }
    assert_eq!(journal_files(d), Vec::<String>::new());
    git(d, &["fsck", "--no-progress"]);
}

#[test]
fn a_dead_transaction_before_its_commit_point_is_rolled_back() {
    let (dir, a, b) = repo();
    let d = dir.path();
    run(d, &[up("refs/heads/main", None, Some(a))], false);
    crash(
        d,
        &[
            up("refs/heads/main", Some(a), Some(b)),
            up("refs/heads/gone", Some(a), None),
        ],
        false,
    );
    // The push that meets the dead lock breaks it and goes through.
    assert_eq!(
        run(d, &[up("refs/heads/main", Some(a), Some(b))], false),
        vec![Ok(())]
    );
    assert!(!d.join("refs/heads/gone.lock").exists());
    assert!(!d.join("packed-refs.lock").exists());
    assert!(show_ref(d).contains(&format!("{} refs/heads/main", b.to_hex())));
    assert_eq!(journal_files(d), Vec::<String>::new());
    // recover() alone does it too.
    crash(d, &[up("refs/heads/main", Some(b), Some(a))], false);
    assert_eq!(recover(d, Duration::from_secs(1)), 1);
    assert!(!d.join("refs/heads/main.lock").exists());
    assert!(show_ref(d).contains(&format!("{} refs/heads/main", b.to_hex())));
}

#[test]
fn a_live_owner_s_lock_is_waited_for_then_refused() {
    let (dir, a, b) = repo();
    let d = dir.path();
    run(d, &[up("refs/heads/main", None, Some(a))], false);
    let mut journal = Journal::create(d).unwrap();
    let temp = journal.temp();
    let lock =
        LockFile::try_create(&d.join("refs/heads/main.lock"), journal.token(), &temp).unwrap();
    let start = Instant::now();
    let r = run(d, &[up("refs/heads/main", Some(a), Some(b))], false);
    assert!(
        start.elapsed() >= Duration::from_millis(100),
        "waited {:?}",
        start.elapsed()
    );
    let lock_file = d.join("refs/heads/main.lock");
    assert_eq!(
        r,
        vec![failed(&format!(
            "cannot lock ref 'refs/heads/main': Unable to create '{}': File exists.\n\n\
             Another git process seems to be running in this repository, e.g.\n\
             an editor opened by 'git commit'. Please make sure all processes\n\
             are terminated then try again. If it still fails, a git process\n\
             may have crashed in this repository earlier:\n\
             remove the file manually to continue.",
            lock_file.display()
        ))]
    );
    assert!(lock_file.exists(), "a live owner's lock was broken");
    // Released while the next one waits: it goes through.
    let releaser = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(50));
        lock.release();
        journal.finish();
    });
    let options = TransactionOptions {
        lock_timeout: Some(Duration::from_secs(10)),
        ..TransactionOptions::default()
    };
    let r = apply(
        d,
        &[up("refs/heads/main", Some(a), Some(b))],
        false,
        &options,
        &mut NoHook,
    );
    releaser.join().unwrap();
    assert_eq!(r, vec![Ok(())]);
}

#[test]
fn git_s_own_locks_are_never_broken() {
    let (dir, a, b) = repo();
    let d = dir.path();
    run(d, &[up("refs/heads/main", None, Some(a))], false);
    for content in ["", "garbage\n", &format!("{}\n", b.to_hex())] {
        std::fs::write(d.join("refs/heads/main.lock"), content).unwrap();
        let r = run(d, &[up("refs/heads/main", Some(a), Some(b))], false);
        assert!(
            r[0].as_ref()
                .unwrap_err()
                .error
                .as_ref()
                .unwrap()
                .contains("File exists"),
            "{r:?}"
        );
        assert_eq!(
            std::fs::read_to_string(d.join("refs/heads/main.lock")).unwrap(),
            content
        );
    }
    std::fs::remove_file(d.join("refs/heads/main.lock")).unwrap();
    std::fs::write(d.join("packed-refs.lock"), "").unwrap();
    let r = run(d, &[up("refs/heads/main", Some(a), None)], false);
    assert_eq!(
        r[0].as_ref().unwrap_err().error.as_deref(),
        Some(
            format!(
                "Unable to create '{}': File exists.\n\n\
                 Another git process seems to be running in this repository, e.g.\n\
                 an editor opened by 'git commit'. Please make sure all processes\n\
                 are terminated then try again. If it still fails, a git process\n\
                 may have crashed in this repository earlier:\n\
                 remove the file manually to continue.",
                d.join("packed-refs.lock").display()
            )
            .as_str()
        )
    );
    assert!(d.join("packed-refs.lock").exists());
    assert!(show_ref(d).contains("refs/heads/main"));
}

#[test]
fn concurrent_updates_of_one_ref_have_one_winner() {
    let (dir, a, b) = repo();
    let d = dir.path().to_path_buf();
    run(&d, &[up("refs/heads/main", None, Some(a))], false);
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
                    run(
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
            let e = r.error.as_deref().unwrap();
            assert!(
                e.contains("File exists") || e.contains("but expected"),
                "{e}"
            );
        }
        let now = git(&d, &["rev-parse", "refs/heads/main"]);
        assert_eq!(now.trim(), next.to_hex());
    }
    assert_eq!(journal_files(&d), Vec::<String>::new());
}

#[test]
fn a_dead_owner_s_lock_its_journal_does_not_name_is_broken_when_met() {
    // What a machine that stopped may leave: the lock file kept, its journal line lost.
    let (dir, a, b) = repo();
    let d = dir.path();
    run(d, &[up("refs/heads/main", None, Some(a))], false);
    let mut journal = Journal::create(d).unwrap();
    let temp = journal.temp();
    LockFile::try_create(&d.join("refs/heads/main.lock"), journal.token(), &temp)
        .unwrap()
        .leave();
    let token = journal.token().to_string();
    drop(journal);
    wait_until_dead(d, &token);
    assert_eq!(
        run(d, &[up("refs/heads/main", Some(a), Some(b))], false),
        vec![Ok(())]
    );
    assert!(!d.join("refs/heads/main.lock").exists());
    assert_eq!(journal_files(d), Vec::<String>::new());
}

#[test]
fn a_ref_that_cannot_be_rolled_forward_does_not_block_forever() {
    let (dir, a, b) = repo();
    let d = dir.path();
    run(d, &[up("refs/heads/main", None, Some(a))], false);
    crash(
        d,
        &[
            up("refs/heads/main", Some(a), Some(b)),
            up("refs/heads/x", None, Some(b)),
        ],
        true,
    );
    // git, which does not see packd's lock of refs/heads/x as a ref, made refs/heads/x/y.
    git(d, &["update-ref", "refs/heads/x/y", &a.to_hex()]);
    assert_eq!(recover(d, Duration::from_secs(1)), 1);
    let refs = show_ref(d);
    assert!(
        refs.contains(&format!("{} refs/heads/main", b.to_hex())),
        "{refs}"
    );
    assert!(!d.join("refs/heads/x.lock").exists());
    assert_eq!(journal_files(d), Vec::<String>::new());
    git(d, &["fsck", "--no-progress"]);
}

#[test]
fn lock_timeouts_come_from_the_configuration() {
    let mut config = packd_odb::config::Config::default();
    config
        .parse(
            "[core]\n\tfilesRefLockTimeout = 250\n\tpackedRefsTimeout = -1\n",
            "config",
        )
        .unwrap();
    let options = TransactionOptions::from_config(&config);
    assert_eq!(options.lock_timeout, Some(Duration::from_millis(250)));
    assert_eq!(
        options.packed_refs_timeout, None,
        "negative: wait as long as it takes"
    );
    let defaults = TransactionOptions::from_config(&packd_odb::config::Config::default());
    assert_eq!(defaults.lock_timeout, Some(Duration::from_millis(100)));
    assert_eq!(
        defaults.packed_refs_timeout,
        Some(Duration::from_millis(1000))
    );
}
