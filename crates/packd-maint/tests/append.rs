//! Appending to the bitmapped pack, failing just before the new pack's `.idx` is published:
//! the repository is left as it was (same files, every object where it was, git finds it
//! whole), and appending again then succeeds. A pushed delta copied onto B's deepest chain
//! keeps the new pack's chains within `pack.depth`.

use packd_maint::append::{append_surveyed, survey};
use packd_maint::lock;
use packd_maint::pack_file::PackFileError;
use packd_odb::{Repository, RepositoryOptions};
use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};

/// Runs git in `dir` with `stdin`; its stdout, trimmed, on success.
fn git(dir: &Path, args: &[&str], stdin: &[u8]) -> String {
    let mut child = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(args)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("HOME", dir)
        .env("GIT_COMMITTER_NAME", "A")
        .env("GIT_COMMITTER_EMAIL", "a@example.com")
        .env("GIT_AUTHOR_NAME", "A")
        .env("GIT_AUTHOR_EMAIL", "a@example.com")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("git runs");
    child.stdin.take().unwrap().write_all(stdin).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

/// The names in `dir`, sorted.
fn listing(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    names
}

/// Every file under `objects/` with its bytes.
fn objects_files(repo: &Path) -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    let objects = repo.join("objects");
    for dir in listing(&objects) {
        let path = objects.join(&dir);
        if !path.is_dir() {
            continue;
        }
        for name in listing(&path) {
            let file = path.join(&name);
            if file.is_file() {
                out.push((format!("{dir}/{name}"), std::fs::read(file).unwrap()));
            }
        }
    }
    out
}

/// A repository packed by `git repack -adb` (forty commits), then two commits made since
/// (loose).
fn repository(dir: &Path) -> std::path::PathBuf {
    let repo = dir.join("r.git");
    git(dir, &["init", "-q", "--bare", "r.git"], b"");
    let mut s = String::new();
    for c in 1..=40u32 {
        s += &format!(
            "commit refs/heads/main\ncommitter A <a@e.com> {} +0000\ndata 4\nc{c:02}\n",
            1_700_000_000 + c
        );
        let body: String = (1..=60u32)
            .map(|l| format!("line {l}{}\n", if l == c { " changed" } else { "" }))
            .collect();
        s += &format!("M 644 inline f\ndata {}\n{body}\n", body.len());
    }
    git(&repo, &["fast-import", "--quiet"], s.as_bytes());
    git(&repo, &["symbolic-ref", "HEAD", "refs/heads/main"], b"");
    git(&repo, &["repack", "-adbq"], b"");
    for message in ["one\n", "two\n"] {
        let tree = git(&repo, &["rev-parse", "main^{tree}"], b"");
        let commit = git(
            &repo,
            &["commit-tree", &tree, "-p", "main"],
            message.as_bytes(),
        );
        git(&repo, &["update-ref", "refs/heads/main", &commit], b"");
    }
    repo
}

#[test]
fn a_failure_before_the_index_is_published_leaves_the_repository_as_it_was() {
    let dir = tempfile::tempdir().unwrap();
    let repo_dir = repository(dir.path());
    let before = objects_files(&repo_dir);
    let open = || Repository::open(&repo_dir, &RepositoryOptions::default()).unwrap();
    let held = lock::try_maintenance(&repo_dir.join("objects")).unwrap();

    let repo = open();
    let surveyed = survey(&repo).unwrap();
    assert!(surveyed.base_all_reachable());
    assert_eq!(surveyed.outside(), 2);
    let failed = append_surveyed(&repo, &held, surveyed, &|| {
        Err(PackFileError::Misuse("injected".into()))
    });
    assert!(failed.unwrap_err().to_string().contains("injected"));
    drop(repo);
    let after: Vec<(String, Vec<u8>)> = objects_files(&repo_dir)
        .into_iter()
        .filter(|(name, _)| !name.ends_with(".lock"))
        .collect();
    let before: Vec<(String, Vec<u8>)> = before
        .into_iter()
        .filter(|(name, _)| !name.ends_with(".lock"))
        .collect();
    assert_eq!(
        after.iter().map(|(n, _)| n).collect::<Vec<_>>(),
        before.iter().map(|(n, _)| n).collect::<Vec<_>>()
    );
    assert!(after == before, "the same bytes");
    git(&repo_dir, &["fsck", "--strict", "--no-dangling"], b"");

    // Without the failure: one pack, every object, the two commits appended.
    let repo = open();
    let outcome = append_surveyed(&repo, &held, survey(&repo).unwrap(), &|| Ok(())).unwrap();
    assert_eq!(outcome.appended, 2);
    assert_eq!(outcome.loose_removed, 2);
    assert!(!outcome.unchanged);
    drop(repo);
    git(&repo_dir, &["fsck", "--strict", "--no-dangling"], b"");
    let out = Command::new("git")
        .arg("-C")
        .arg(&repo_dir)
        .args(["rev-list", "--test-bitmap", "main"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let packs: Vec<String> = listing(&repo_dir.join("objects/pack"))
        .into_iter()
        .filter(|n| n.ends_with(".pack"))
        .collect();
    assert_eq!(packs.len(), 1, "{packs:?}");
}

/// The delta chain lengths `git verify-pack -v` reports for `idx`, with each entry's depth:
/// (id, kind, depth, base) of every delta.
fn deltas_of(repo: &Path, idx: &Path) -> Vec<(String, String, u32, String)> {
    git(repo, &["verify-pack", "-v", idx.to_str().unwrap()], b"")
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            if f.len() != 7 || f[0].len() != 40 {
                return None;
            }
            Some((f[0].into(), f[1].into(), f[5].parse().ok()?, f[6].into()))
        })
        .collect()
}

#[test]
fn a_pushed_delta_on_the_deepest_chain_of_the_bitmapped_pack_is_appended_within_depth() {
    // B: one file's 60 versions, packed by git at pack.depth 5 (the depth the append keeps
    // to). A push: a new version of the file whose base, in the pushed pack, is one of B's
    // blobs 5 deep. Copied as it is, the delta would make a chain of 6 in the new pack.
    let dir = tempfile::tempdir().unwrap();
    let repo = dir.path().join("r.git");
    git(dir.path(), &["init", "-q", "--bare", "r.git"], b"");
    let mut s = String::new();
    let mut lines: Vec<String> = Vec::new();
    for c in 1..=60u32 {
        // A line added by each commit, an older one changed by every seventh: git chains
        // the versions into deltas up to the depth.
        lines.push(format!(
            "line {c} of the growing file, added by commit {c}\n"
        ));
        if c % 7 == 0 {
            lines[(c / 2) as usize] = format!("line {} changed by commit {c}\n", c / 2);
        }
        let body = lines.concat();
        s += &format!(
            "commit refs/heads/main\ncommitter A <a@e.com> {} +0000\ndata 4\nc{c:02}\nM 644 inline f\ndata {}\n{body}\n",
            1_700_000_000 + c,
            body.len()
        );
    }
    git(&repo, &["fast-import", "--quiet"], s.as_bytes());
    git(&repo, &["symbolic-ref", "HEAD", "refs/heads/main"], b"");
    git(
        &repo,
        &["repack", "-adbfq", "--depth=5", "--window=50"],
        b"",
    );
    git(&repo, &["config", "pack.depth", "5"], b"");
    let pack_dir = repo.join("objects/pack");
    let idx_of = |dir: &Path| -> Vec<std::path::PathBuf> {
        listing(dir)
            .into_iter()
            .filter(|n| n.ends_with(".idx"))
            .map(|n| dir.join(n))
            .collect()
    };
    let b_idx = idx_of(&pack_dir).remove(0);
    let deep: Vec<String> = deltas_of(&repo, &b_idx)
        .into_iter()
        .filter(|(_, kind, depth, _)| kind == "blob" && *depth == 5)
        .map(|(id, ..)| id)
        .collect();
    let commits = git(&repo, &["rev-list", "main"], b"");
    let (commit, blob) = commits
        .lines()
        .find_map(|c| {
            let blob = git(&repo, &["rev-parse", &format!("{c}:f")], b"");
            deep.contains(&blob).then(|| (c.to_string(), blob))
        })
        .expect("a version of f 5 deep in B");
    // The pushed commit, on that version less its first line, in a pack of its own with the
    // version it came from (as a thin push indexed with --fix-thin leaves it): the smaller
    // new version is a delta against the deep one, which B also holds.
    let content = git(&repo, &["cat-file", "blob", &blob], b"");
    let (_, kept) = content.split_once('\n').expect("lines");
    let new_blob = git(
        &repo,
        &["hash-object", "-w", "--stdin"],
        format!("{kept}\n").as_bytes(),
    );
    let tree = git(
        &repo,
        &["mktree"],
        format!("100644 blob {new_blob}\tf\n").as_bytes(),
    );
    let pushed = git(&repo, &["commit-tree", &tree, "-p", &commit], b"pushed\n");
    git(&repo, &["update-ref", "refs/heads/pushed", &pushed], b"");
    let list = format!("{pushed}\n{tree}\n{new_blob} f\n{blob} f\n");
    let prefix = pack_dir.join("pack");
    git(
        &repo,
        &["pack-objects", "-q", prefix.to_str().unwrap()],
        list.as_bytes(),
    );
    git(&repo, &["prune-packed"], b"");
    let pushed_idx = idx_of(&pack_dir).into_iter().find(|i| *i != b_idx).unwrap();
    assert!(
        deltas_of(&repo, &pushed_idx)
            .iter()
            .any(|(id, _, _, base)| *id == new_blob && *base == blob),
        "the pushed blob is a delta against the deep one"
    );

    let held = lock::try_maintenance(&repo.join("objects")).unwrap();
    let opened = Repository::open(&repo, &RepositoryOptions::default()).unwrap();
    let surveyed = survey(&opened).unwrap();
    assert_eq!(surveyed.outside(), 3, "the pushed commit, tree and blob");
    let outcome = append_surveyed(&opened, &held, surveyed, &|| Ok(())).unwrap();
    assert!(!outcome.unchanged);
    drop(opened);
    git(&repo, &["fsck", "--strict", "--no-dangling"], b"");
    for idx in idx_of(&pack_dir) {
        let deepest = deltas_of(&repo, &idx).iter().map(|d| d.2).max();
        assert!(
            deepest <= Some(5),
            "a chain of {deepest:?} in {}",
            idx.display()
        );
    }
}
