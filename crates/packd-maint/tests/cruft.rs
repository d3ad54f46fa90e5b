//! Cruft packs checked against git: git's `.mtimes` read and written byte for byte, packd's
//! cruft pack verified and aged by git itself, expiry, and the race with a push.

use packd_maint::cruft::mtimes::{self, Mtimes};
use packd_maint::cruft::{prune, write_cruft_pack, CruftOptions};
use packd_odb::{ObjectId, Repository, RepositoryOptions};
use std::collections::HashSet;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

const DAY: u64 = 86_400;

fn run_git(dir: &Path, args: &[&str], stdin: Option<&[u8]>) -> std::process::Output {
    let mut child = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(args)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("HOME", dir)
        .env("TZ", "UTC")
        .env("GIT_AUTHOR_NAME", "A")
        .env("GIT_AUTHOR_EMAIL", "a@example.com")
        .env("GIT_COMMITTER_NAME", "A")
        .env("GIT_COMMITTER_EMAIL", "a@example.com")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("git runs");
    if let Some(input) = stdin {
        child.stdin.take().unwrap().write_all(input).unwrap();
    }
    drop(child.stdin.take());
    child.wait_with_output().unwrap()
}

/// Runs git in `dir`; its stdout, trimmed, on success.
fn git(dir: &Path, args: &[&str], stdin: Option<&[u8]>) -> String {
    let out = run_git(dir, args, stdin);
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

fn has_object(repo: &Path, id: &str) -> bool {
    run_git(repo, &["cat-file", "-e", id], None)
        .status
        .success()
}

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

fn touch(path: &Path, secs: u64) {
    let status = Command::new("touch")
        .arg("-d")
        .arg(format!("@{secs}"))
        .arg(path)
        .status()
        .unwrap();
    assert!(status.success());
}

fn loose_path(repo: &Path, id: &str) -> PathBuf {
    repo.join("objects").join(&id[..2]).join(&id[2..])
}

/// The unreachable objects of the test repository, by what they are.
struct Fixture {
    repo: PathBuf,
    /// The commit of a deleted branch, its tree and blob, in a pack dated 3 days ago.
    branch: Vec<String>,
    /// A loose blob written 30 days ago.
    old_blob: String,
    /// A loose blob written 1 day ago.
    recent_blob: String,
    /// When the test started (seconds since the epoch).
    now: u64,
}

/// A bare repository: `main` (3 commits), a deleted branch `gone` whose objects are in the
/// same pack (dated 3 days ago), and two unreachable loose blobs (30 days and 1 day old).
fn fixture(dir: &Path) -> Fixture {
    let mut stream = String::new();
    for c in 0..3 {
        stream.push_str(&format!(
            "commit refs/heads/main\ncommitter A <a@example.com> {} +0000\ndata 2\nc\n\
             M 644 inline f\ndata 8\nmain {c}\n\n",
            1_700_000_000 + c
        ));
    }
    stream.push_str(
        "commit refs/heads/gone\ncommitter A <a@example.com> 1700000100 +0000\ndata 2\ng\n\
         from refs/heads/main\nM 644 inline g\ndata 12\nonly in gone\n\n",
    );
    git(dir, &["init", "-q", "--bare", "r.git"], None);
    let repo = dir.join("r.git");
    git(
        &repo,
        &["-c", "fastimport.unpackLimit=0", "fast-import", "--quiet"],
        Some(stream.as_bytes()),
    );
    let tip = git(&repo, &["rev-parse", "refs/heads/gone"], None);
    let branch = vec![
        tip.clone(),
        git(&repo, &["rev-parse", &format!("{tip}^{{tree}}")], None),
        git(&repo, &["rev-parse", &format!("{tip}:g")], None),
    ];
    git(&repo, &["update-ref", "-d", "refs/heads/gone"], None);
    let now = now();
    for entry in std::fs::read_dir(repo.join("objects/pack")).unwrap() {
        touch(&entry.unwrap().path(), now - 3 * DAY);
    }
    let old_blob = git(
        &repo,
        &["hash-object", "-w", "--stdin"],
        Some(b"old loose\n"),
    );
    let recent_blob = git(
        &repo,
        &["hash-object", "-w", "--stdin"],
        Some(b"recent loose\n"),
    );
    touch(&loose_path(&repo, &old_blob), now - 30 * DAY);
    touch(&loose_path(&repo, &recent_blob), now - DAY);
    Fixture {
        repo,
        branch,
        old_blob,
        recent_blob,
        now,
    }
}

/// Packs what the refs reach into a new pack with git (standing in for `packd repack`'s
/// reachable pack); returns its name (`pack/pack-X.pack`) and the set it holds.
fn reachable_pack(repo: &Path) -> (String, HashSet<ObjectId>) {
    let listed = git(repo, &["rev-list", "--objects", "--all"], None);
    let ids: Vec<&str> = listed
        .lines()
        .map(|l| l.split(' ').next().unwrap())
        .collect();
    let input = ids.join("\n") + "\n";
    let hash = git(
        repo,
        &["pack-objects", "-q", "objects/pack/pack"],
        Some(input.as_bytes()),
    );
    let set = ids.iter().map(|h| ObjectId::from_hex(h).unwrap()).collect();
    (format!("pack/pack-{hash}.pack"), set)
}

fn open(repo: &Path) -> Repository {
    Repository::open(repo, &RepositoryOptions::default()).unwrap()
}

fn cruft_files(repo: &Path) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = std::fs::read_dir(repo.join("objects/pack"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "mtimes"))
        .collect();
    out.sort();
    out
}

/// The id -> mtime table of the cruft pack whose `.mtimes` is `path`, read with packd.
fn read_mtimes(repo: &Repository, path: &Path) -> Vec<(String, u32)> {
    let pack_name = format!(
        "pack/{}",
        path.with_extension("pack")
            .file_name()
            .unwrap()
            .to_str()
            .unwrap()
    );
    let pack = repo
        .objects()
        .packs()
        .find(|p| p.name() == pack_name)
        .expect("the cruft pack is open")
        .clone();
    let bytes = std::fs::read(path).unwrap();
    let m = Mtimes::parse(&path.display().to_string(), &bytes, pack.len()).unwrap();
    let checksum: [u8; 20] = pack.index().pack_checksum().try_into().unwrap();
    m.check_pack("x", &checksum).unwrap();
    (0..pack.len())
        .map(|i| (pack.index().id(i).to_hex(), m.get(i).unwrap()))
        .collect()
}

#[test]
fn git_cruft_mtimes_parse_and_encode_byte_for_byte() {
    let dir = tempfile::tempdir().unwrap();
    let f = fixture(dir.path());
    git(&f.repo, &["repack", "--cruft", "-d", "-q"], None);
    let files = cruft_files(&f.repo);
    assert_eq!(files.len(), 1, "git wrote one cruft pack");
    let repo = open(&f.repo);
    let table = read_mtimes(&repo, &files[0]);
    let time_of = |id: &str| table.iter().find(|(h, _)| h == id).map(|(_, t)| *t);
    assert_eq!(time_of(&f.old_blob), Some((f.now - 30 * DAY) as u32));
    assert_eq!(time_of(&f.recent_blob), Some((f.now - DAY) as u32));
    for id in &f.branch {
        assert_eq!(time_of(id), Some((f.now - 3 * DAY) as u32), "{id}");
    }
    assert_eq!(table.len(), 5);
    let bytes = std::fs::read(&files[0]).unwrap();
    let pack = repo.objects().packs().find(|p| p.len() == 5).unwrap();
    let checksum: [u8; 20] = pack.index().pack_checksum().try_into().unwrap();
    let times: Vec<u32> = table.iter().map(|(_, t)| *t).collect();
    assert_eq!(mtimes::encode(&times, &checksum), bytes);
}

/// Writes packd's cruft pack and prunes, as `packd repack --cruft` will: returns the names of
/// the files git sees after.
fn packd_cruft(repo: &Path, expire: Option<u64>) -> packd_maint::cruft::CruftOutcome {
    let (new_pack, reachable) = reachable_pack(repo);
    let repo = open(repo);
    let old: Vec<Arc<packd_odb::pack::Pack>> = repo
        .objects()
        .packs()
        .filter(|p| p.name() != new_pack)
        .cloned()
        .collect();
    let is_reachable = |id: &ObjectId| reachable.contains(id);
    let options = CruftOptions {
        expire: expire.map(|s| UNIX_EPOCH + Duration::from_secs(s)),
    };
    let outcome = write_cruft_pack(&repo, &is_reachable, &old, &options).unwrap();
    let mut keep = vec![new_pack.as_str()];
    if let Some(p) = &outcome.pack {
        keep.push(&p.name);
    }
    prune(&repo, &is_reachable, &outcome, &old, &keep).unwrap();
    outcome
}

#[test]
fn packd_cruft_pack_keeps_recent_drops_expired_and_git_ages_it() {
    let dir = tempfile::tempdir().unwrap();
    let f = fixture(dir.path());
    // gc.pruneExpire's default: two weeks.
    let outcome = packd_cruft(&f.repo, Some(f.now - 14 * DAY));
    assert_eq!(outcome.kept.len(), 4);
    assert_eq!(outcome.dropped.len(), 1);
    assert!(!has_object(&f.repo, &f.old_blob), "30 days old: dropped");
    assert!(has_object(&f.repo, &f.recent_blob));
    for id in &f.branch {
        assert!(has_object(&f.repo, id), "{id}");
    }
    assert!(!loose_path(&f.repo, &f.recent_blob).exists(), "now packed");
    git(&f.repo, &["fsck", "--strict", "--no-progress"], None);
    let files = cruft_files(&f.repo);
    assert_eq!(files.len(), 1);
    git(
        &f.repo,
        &[
            "verify-pack",
            files[0].with_extension("idx").to_str().unwrap(),
        ],
        None,
    );
    let table = read_mtimes(&open(&f.repo), &files[0]);
    let time_of = |id: &str| table.iter().find(|(h, _)| h == id).map(|(_, t)| *t);
    assert_eq!(time_of(&f.recent_blob), Some((f.now - DAY) as u32));
    assert_eq!(time_of(&f.branch[0]), Some((f.now - 3 * DAY) as u32));

    // git reads packd's times: 2 days ago expires the branch (3 days old), not the blob
    // (1 day). The cruft pack's own file is new: a git that ignored the .mtimes would keep all.
    let two_days_ago = format!("--cruft-expiration=@{}", f.now - 2 * DAY);
    git(
        &f.repo,
        &["repack", "--cruft", "-d", "-q", &two_days_ago],
        None,
    );
    assert!(has_object(&f.repo, &f.recent_blob));
    for id in &f.branch {
        assert!(!has_object(&f.repo, id), "git expired {id} by packd's time");
    }
    git(&f.repo, &["fsck", "--strict", "--no-progress"], None);
}

#[test]
fn packd_reads_its_own_and_gits_cruft_times_again() {
    let dir = tempfile::tempdir().unwrap();
    let f = fixture(dir.path());
    // git's cruft pack first; packd's run then takes the times from git's .mtimes.
    git(&f.repo, &["repack", "--cruft", "-d", "-q"], None);
    let outcome = packd_cruft(&f.repo, None);
    let time_of = |id: &str| {
        let id = ObjectId::from_hex(id).unwrap();
        outcome.kept.iter().find(|(k, _)| *k == id).map(|(_, t)| *t)
    };
    assert_eq!(time_of(&f.old_blob), Some((f.now - 30 * DAY) as u32));
    assert_eq!(time_of(&f.branch[1]), Some((f.now - 3 * DAY) as u32));
    // A second packd run over its own cruft pack keeps the same times (never expiring).
    let again = packd_cruft(&f.repo, None);
    assert_eq!(again.kept, outcome.kept);
    assert_eq!(cruft_files(&f.repo).len(), 1);
    git(&f.repo, &["fsck", "--strict", "--no-progress"], None);
}

#[test]
fn old_objects_a_recent_one_reaches_are_kept() {
    let dir = tempfile::tempdir().unwrap();
    let f = fixture(dir.path());
    // A recent unreachable commit whose tree names the 30-day-old blob.
    let tree = git(
        &f.repo,
        &["mktree"],
        Some(format!("100644 blob {}\told\n", f.old_blob).as_bytes()),
    );
    let commit = git(&f.repo, &["commit-tree", &tree, "-m", "recent"], None);
    let outcome = packd_cruft(&f.repo, Some(f.now - 14 * DAY));
    assert!(outcome.dropped.is_empty(), "{:?}", outcome.dropped);
    let kept_time = |id: &str| {
        let id = ObjectId::from_hex(id).unwrap();
        outcome.kept.iter().find(|(k, _)| *k == id).map(|(_, t)| *t)
    };
    assert_eq!(kept_time(&f.old_blob), Some((f.now - 14 * DAY) as u32));
    assert!(kept_time(&commit).unwrap() as u64 >= f.now - 60);
    git(&f.repo, &["fsck", "--strict", "--no-progress"], None);
}

/// The race: a push whose ref update happens between the collection and the prune. The push
/// holds the push guard; the prune must wait for it, see its ref and keep what it reaches.
#[test]
fn a_ref_updated_by_a_push_in_progress_keeps_its_objects() {
    let dir = tempfile::tempdir().unwrap();
    let f = fixture(dir.path());
    let (new_pack, reachable) = reachable_pack(&f.repo);
    let repo = open(&f.repo);
    let old: Vec<_> = repo
        .objects()
        .packs()
        .filter(|p| p.name() != new_pack)
        .cloned()
        .collect();
    let is_reachable = |id: &ObjectId| reachable.contains(id);
    // Everything unreachable expires.
    let options = CruftOptions {
        expire: Some(SystemTime::now()),
    };
    let outcome = write_cruft_pack(&repo, &is_reachable, &old, &options).unwrap();
    assert!(outcome.pack.is_none() && outcome.dropped.len() == 5);

    // The push: its pack is received (guard taken), then its ref moves to the deleted branch.
    let objects_dir = f.repo.join("objects");
    let push = packd_maint::lock::push_guard(&objects_dir).unwrap();
    let (done_tx, done_rx) = std::sync::mpsc::channel();
    std::thread::scope(|s| {
        s.spawn(|| {
            let keep = [new_pack.as_str()];
            let pruned = prune(&repo, &is_reachable, &outcome, &old, &keep).unwrap();
            done_tx.send(pruned).unwrap();
        });
        std::thread::sleep(Duration::from_millis(200));
        assert!(done_rx.try_recv().is_err(), "the prune waits for the push");
        git(
            &f.repo,
            &["update-ref", "refs/heads/revived", &f.branch[0]],
            None,
        );
        drop(push);
        let pruned = done_rx.recv_timeout(Duration::from_secs(30)).unwrap();
        assert_eq!(
            pruned.rescued.len(),
            3,
            "commit, tree and blob of the revived branch"
        );
    });
    for id in &f.branch {
        assert!(has_object(&f.repo, id), "{id} kept for the pushed ref");
    }
    assert!(!has_object(&f.repo, &f.old_blob));
    assert!(!has_object(&f.repo, &f.recent_blob), "expired: now");
    git(&f.repo, &["fsck", "--strict", "--no-progress"], None);
}

#[test]
fn deltas_of_a_deleted_branch_stay_deltas() {
    let dir = tempfile::tempdir().unwrap();
    let mut stream = String::from(
        "commit refs/heads/main\ncommitter A <a@example.com> 1700000000 +0000\ndata 2\nc\n\
         M 644 inline f\ndata 5\nmain\n\n",
    );
    for c in 0..4 {
        let body: String = (0..300)
            .map(|l| format!("line {l} of a long file {}\n", l == c * 50))
            .collect();
        stream.push_str(&format!(
            "commit refs/heads/gone\ncommitter A <a@example.com> {} +0000\ndata 2\ng\n\
             M 644 inline big\ndata {}\n{body}\n",
            1_700_000_100 + c,
            body.len()
        ));
    }
    git(dir.path(), &["init", "-q", "--bare", "r.git"], None);
    let repo = dir.path().join("r.git");
    git(
        &repo,
        &["-c", "fastimport.unpackLimit=0", "fast-import", "--quiet"],
        Some(stream.as_bytes()),
    );
    git(&repo, &["update-ref", "-d", "refs/heads/gone"], None);
    let outcome = packd_cruft(&repo, None);
    assert_eq!(outcome.kept.len(), 12, "4 commits, trees and blobs");
    let files = cruft_files(&repo);
    let idx = files[0].with_extension("idx");
    let verified = git(&repo, &["verify-pack", "-v", idx.to_str().unwrap()], None);
    assert!(
        verified.contains("chain length = 1: "),
        "the blobs' deltas were kept: {verified}"
    );
    git(&repo, &["fsck", "--strict", "--no-progress"], None);
}

/// `git gc` with cruft packs and its default `gc.pruneExpire` (2.weeks.ago) keeps the same
/// objects packd's collection and expiry keep, with the same times.
#[test]
fn packd_keeps_what_git_gc_keeps() {
    let dir = tempfile::tempdir().unwrap();
    let f = fixture(dir.path());
    let repo = open(&f.repo);
    let listed = git(&f.repo, &["rev-list", "--objects", "--all"], None);
    let reachable: HashSet<ObjectId> = listed
        .lines()
        .map(|l| ObjectId::from_hex(l.split(' ').next().unwrap()).unwrap())
        .collect();
    let old: Vec<_> = repo.objects().packs().cloned().collect();
    let collected =
        packd_maint::cruft::collect::collect(&repo, &|id| reachable.contains(id), &old).unwrap();
    let options = CruftOptions::from_config(&repo, SystemTime::now()).unwrap();
    let selection =
        packd_maint::cruft::expire::select(repo.objects(), collected.unreachable, options.expire)
            .unwrap();
    drop(repo);

    git(&f.repo, &["-c", "gc.cruftPacks=true", "gc", "-q"], None);
    let files = cruft_files(&f.repo);
    assert_eq!(files.len(), 1);
    let gits = read_mtimes(&open(&f.repo), &files[0]);
    let packds: Vec<(String, u32)> = selection
        .kept
        .iter()
        .map(|(id, t)| (id.to_hex(), *t))
        .collect();
    assert_eq!(packds, gits);
    assert_eq!(
        selection.dropped,
        vec![ObjectId::from_hex(&f.old_blob).unwrap()]
    );
}

/// A damaged `.mtimes` of an old cruft pack stops the run with the file and offset named, and
/// nothing is written or deleted.
#[test]
fn a_damaged_mtimes_is_named_and_nothing_changes() {
    let dir = tempfile::tempdir().unwrap();
    let f = fixture(dir.path());
    git(&f.repo, &["repack", "--cruft", "-d", "-q"], None);
    let files = cruft_files(&f.repo);
    let mut bytes = std::fs::read(&files[0]).unwrap();
    bytes[14] ^= 0x40;
    std::fs::remove_file(&files[0]).unwrap();
    std::fs::write(&files[0], &bytes).unwrap();
    let listing = |repo: &Path| {
        let mut names: Vec<String> = std::fs::read_dir(repo.join("objects/pack"))
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    };
    let before = listing(&f.repo);
    let repo = open(&f.repo);
    let old: Vec<_> = repo.objects().packs().cloned().collect();
    let err = write_cruft_pack(&repo, &|_| false, &old, &CruftOptions::default()).unwrap_err();
    let message = err.to_string();
    assert!(
        message.contains(files[0].file_name().unwrap().to_str().unwrap())
            && message.contains("offset 52: checksum"),
        "{message}"
    );
    assert_eq!(listing(&f.repo), before);
}

/// What a push writes after the collection (a loose object, a quarantined pack) is in no
/// listing the prune deletes from, however old the expiry makes everything.
#[test]
fn objects_written_after_the_collection_are_never_pruned() {
    let dir = tempfile::tempdir().unwrap();
    let f = fixture(dir.path());
    let (new_pack, reachable) = reachable_pack(&f.repo);
    let repo = open(&f.repo);
    let old: Vec<_> = repo
        .objects()
        .packs()
        .filter(|p| p.name() != new_pack)
        .cloned()
        .collect();
    let is_reachable = |id: &ObjectId| reachable.contains(id);
    let options = CruftOptions {
        expire: Some(SystemTime::now() + Duration::from_secs(DAY)),
    };
    let outcome = write_cruft_pack(&repo, &is_reachable, &old, &options).unwrap();
    assert_eq!(outcome.dropped.len(), 5);
    // A push meanwhile: a loose object migrated, a pack still in its quarantine.
    let fresh = git(
        &f.repo,
        &["hash-object", "-w", "--stdin"],
        Some(b"pushed\n"),
    );
    let quarantined = f.repo.join("objects/pack/tmp_incoming_1_pack");
    std::fs::write(&quarantined, b"PACK").unwrap();
    let keep = [new_pack.as_str()];
    let pruned = prune(&repo, &is_reachable, &outcome, &old, &keep).unwrap();
    assert_eq!(pruned.loose, 2, "the two loose blobs listed");
    assert!(has_object(&f.repo, &fresh), "written after the listing");
    assert!(quarantined.exists());
    assert!(!has_object(&f.repo, &f.recent_blob));
}

/// The `.mtimes` is in place before the `.idx` appears, as git's pack-objects publishes them:
/// when the `.mtimes` cannot be published (a directory in its place, on a copy of the
/// repository whose cruft pack's name a first run learnt), the write fails and no index is
/// published, so git sees no new pack, rather than an ordinary pack of unreachable objects.
#[test]
fn no_cruft_index_is_published_without_its_mtimes() {
    let dir = tempfile::tempdir().unwrap();
    let f = fixture(dir.path());
    let copy = dir.path().join("copy.git");
    let status = Command::new("cp")
        .arg("-a")
        .arg(&f.repo)
        .arg(&copy)
        .status()
        .unwrap();
    assert!(status.success());
    let reachable: HashSet<ObjectId> = git(&f.repo, &["rev-list", "--objects", "--all"], None)
        .lines()
        .map(|l| ObjectId::from_hex(l.split(' ').next().unwrap()).unwrap())
        .collect();
    let is_reachable = |id: &ObjectId| reachable.contains(id);
    let write = |path: &Path| {
        let repo = open(path);
        let old: Vec<_> = repo.objects().packs().cloned().collect();
        write_cruft_pack(&repo, &is_reachable, &old, &CruftOptions::default())
    };
    let first = write(&f.repo).unwrap();
    let name = first.pack.expect("a cruft pack").name;
    let stem = name.strip_suffix(".pack").unwrap();
    let packs_seen = |repo: &Path| {
        let counted = git(repo, &["count-objects", "-v"], None);
        counted
            .lines()
            .find(|l| l.starts_with("packs: "))
            .unwrap()
            .to_string()
    };
    let before = packs_seen(&copy);
    std::fs::create_dir(copy.join(format!("objects/{stem}.mtimes"))).unwrap();
    assert!(write(&copy).is_err(), "the .mtimes cannot be published");
    assert!(
        !copy.join(format!("objects/{stem}.idx")).exists(),
        "an index published without its .mtimes"
    );
    assert_eq!(packs_seen(&copy), before, "git sees no new pack");
    git(&copy, &["fsck", "--strict", "--no-progress"], None);
}
