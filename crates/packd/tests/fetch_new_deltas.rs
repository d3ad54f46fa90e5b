//! A fetch of objects stored whole (a repository packed with `pack.window=0`) comes out with
//! deltas: the writer's delta search (packd_pack::delta_search) makes them, against objects
//! sent before and, in a thin pack, against the client's versions of the same paths. git must
//! accept the pack, and its bytes must be within 1.1x of git's own answer.

mod common;

use common::*;
use std::process::Command;

/// 40 commits editing a 6 KB file and a small one, line by line.
fn history(sb: &Sandbox) -> Repo {
    let repo = sb.init_bare("whole.git");
    let mut s = String::new();
    let mut lines: Vec<String> = (0..200)
        .map(|l| format!("line {l}: some text of the file\n"))
        .collect();
    let mut small: Vec<String> = (0..40).map(|l| format!("small {l}\n")).collect();
    for c in 1..=40usize {
        // Files grow as they change, as most do: git's window and its write order (newest
        // first) then agree, and a fetch's deltas can go against objects sent before them.
        lines[(c * 37) % 200] = format!("line {c} edited in commit {c}, a longer line\n");
        lines.push(format!("line added by commit {c}\n"));
        small[(c * 7) % 40] = format!("small edited {c}\n");
        small.push(format!("small added {c}\n"));
        let big = lines.concat();
        let little = small.concat();
        s.push_str(&format!(
            "commit refs/heads/main\nmark :{c}\ncommitter C <c@example.com> {} +0000\ndata 9\ncommit {c:02}\n",
            1_600_000_000 + c * 60
        ));
        if c > 1 {
            s.push_str(&format!("from :{}\n", c - 1));
        }
        s.push_str(&format!(
            "M 100644 inline big.txt\ndata {}\n{big}\n",
            big.len()
        ));
        s.push_str(&format!(
            "M 100644 inline dir/small.txt\ndata {}\n{little}\n",
            little.len()
        ));
        if c == 20 {
            s.push_str("reset refs/tags/old\nfrom :20\n\n");
        }
    }
    repo.fast_import(s.as_bytes());
    repo.git(&["-c", "pack.window=0", "repack", "-adFb", "-q"]);
    repo
}

/// The deltas of `pack` once `git index-pack --fix-thin --strict` stored it in a copy of the
/// server (which has every base).
fn delta_count(sb: &Sandbox, server: &Repo, pack: &[u8]) -> usize {
    static CLIENTS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = CLIENTS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let client = sb.clone_bare(server, &format!("client-{n}.git"));
    let out = client.git_stdin(&["index-pack", "--stdin", "--fix-thin", "--strict"], pack);
    let name = String::from_utf8(out).unwrap();
    let name = name.split_whitespace().last().unwrap().to_string();
    let idx = client.pack_dir().join(format!("pack-{name}.idx"));
    let verify = client.git_str(&["verify-pack", "-v", idx.to_str().unwrap()]);
    verify
        .lines()
        .filter(|l| l.split_whitespace().count() == 7 && l.len() > 40)
        .count()
}

fn pack_of(cmd: &mut Command, stdin: &str) -> Vec<u8> {
    let run = run_cmd(
        std::mem::replace(cmd, Command::new("true")),
        Some(stdin.as_bytes()),
        GIT_TIMEOUT,
    );
    run.assert_success();
    run.stdout
}

#[test]
fn a_fetch_of_whole_objects_gets_deltas() {
    let sb = Sandbox::new();
    let repo = history(&sb);
    // Stored whole: verify-pack lists no deltas.
    let stored = repo.packs();
    let idx = stored[0].with_extension("idx");
    let listing = repo.git_str(&["verify-pack", "-v", idx.to_str().unwrap()]);
    assert!(!listing.contains("chain length = 1"), "{listing}");

    for thin in [true, false] {
        let input = "main\n^old\n";
        let mut packd = Command::new(PACKD);
        apply_env(&mut packd, &repo.home);
        packd.arg("-C").arg(&repo.path).arg("pack-objects");
        if thin {
            packd.arg("--thin");
        }
        let ours = pack_of(&mut packd, input);
        // git with its bitmap sends the stored entries as they are (no deltas at all); without
        // it, it searches as packd does.
        let mut git = repo.git_cmd();
        git.args([
            "-c",
            "pack.useBitmaps=false",
            "pack-objects",
            "--revs",
            "--stdout",
            "--delta-base-offset",
            "-q",
        ]);
        if thin {
            git.arg("--thin");
        }
        let theirs = pack_of(&mut git, input);
        let (our_deltas, their_deltas) = (
            delta_count(&sb, &repo, &ours),
            delta_count(&sb, &repo, &theirs),
        );
        eprintln!(
            "thin {thin}: packd {} bytes, {our_deltas} deltas; git {} bytes, {their_deltas} deltas",
            ours.len(),
            theirs.len()
        );
        // Two blobs changed by each of 20 commits: nearly all of them deltas (the root trees
        // are too small to be worth one); without a thin pack the oldest of each has no base.
        assert!(our_deltas >= 2 * 20 - 3, "{our_deltas} deltas");
        assert!(
            ours.len() as f64 <= 1.1 * theirs.len() as f64,
            "packd's {} bytes against git's {}",
            ours.len(),
            theirs.len()
        );
    }
}

/// A fetch whose objects are exactly one pack of whole objects (the pushed commits packed
/// with `pack.window=0`) is not sent as that pack: its objects get deltas against what the
/// client has, as git's upload-pack without bitmaps gives them.
#[test]
fn a_pack_of_whole_objects_is_not_sent_as_it_is_to_a_fetch() {
    let sb = Sandbox::new();
    let repo = history(&sb);
    let old_objects = repo.git_str(&["rev-list", "--objects", "old"]);
    let new_objects = repo.git_str(&["rev-list", "--objects", "old..main"]);
    let prefix = repo.pack_dir().join("pack");
    let prefix = prefix.to_str().unwrap();
    let before = repo.packs();
    repo.git_stdin(&["pack-objects", "-q", prefix], old_objects.as_bytes());
    new_objects_whole_instead_of(&repo, &new_objects, before);
    let mut packd = Command::new(PACKD);
    apply_env(&mut packd, &repo.home);
    packd
        .arg("-C")
        .arg(&repo.path)
        .args(["pack-objects", "--thin"]);
    let ours = pack_of(&mut packd, "main\n^old\n");
    let deltas = delta_count(&sb, &repo, &ours);
    // Two blobs changed by each of 20 commits: most against the client's versions (36
    // here; 0 when the pack went out as it is).
    assert!(deltas >= 30, "{deltas} deltas in {} bytes", ours.len());
}

/// The same with the client's history in a bitmapped pack (git's) and the new objects whole
/// in a pack outside it (pushed since the bitmap was written): the bitmap's name-hash cache
/// names none of them, so their bases come from the client's version of each path.
#[test]
fn whole_objects_past_the_bitmap_get_deltas_against_what_the_client_has() {
    let sb = Sandbox::new();
    let repo = history(&sb);
    let old_objects = repo.git_str(&["rev-list", "--objects", "old"]);
    let new_objects = repo.git_str(&["rev-list", "--objects", "old..main"]);
    let before = repo.packs();
    // old's history repacked with a bitmap by git in a copy of its own, its pack moved in.
    let old_only = sb.path().join("old-only.git");
    sb.git_in(
        sb.path(),
        &[
            "clone",
            "-q",
            "--bare",
            "--single-branch",
            "-b",
            "old",
            repo.path.to_str().unwrap(),
            old_only.to_str().unwrap(),
        ],
    );
    sb.git_in(&old_only, &["repack", "-adbq"]);
    for entry in std::fs::read_dir(old_only.join("objects/pack")).unwrap() {
        let path = entry.unwrap().path();
        std::fs::copy(&path, repo.pack_dir().join(path.file_name().unwrap())).unwrap();
    }
    new_objects_whole_instead_of(&repo, &new_objects, before);
    let bitmaps = std::fs::read_dir(repo.pack_dir())
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .path()
                .extension()
                .is_some_and(|x| x == "bitmap")
        })
        .count();
    assert_eq!(bitmaps, 1, "old's pack has a bitmap");
    assert!(!old_objects.is_empty());
    let mut packd = Command::new(PACKD);
    apply_env(&mut packd, &repo.home);
    packd
        .arg("-C")
        .arg(&repo.path)
        .args(["pack-objects", "--thin"]);
    let ours = pack_of(&mut packd, "main\n^old\n");
    let sent = u32::from_be_bytes(ours[8..12].try_into().unwrap()) as usize;
    // Completed by the client, the pack holds the client's versions it deltas against too.
    let client = sb.clone_bare(&repo, "client-thin.git");
    let out = client.git_stdin(&["index-pack", "--stdin", "--fix-thin", "--strict"], &ours);
    let name = String::from_utf8(out).unwrap();
    let idx = client.pack_dir().join(format!(
        "pack-{}.idx",
        name.split_whitespace().last().unwrap()
    ));
    let completed = client
        .git_stdin(&["show-index"], &std::fs::read(&idx).unwrap())
        .split(|&b| b == b'\n')
        .filter(|l| !l.is_empty())
        .count();
    // What the client has of those paths is a base (none without the client's version of
    // each path: the search then finds bases among the sent objects alone, 7,461 bytes
    // against 7,024 here).
    assert!(
        completed - sent >= 1,
        "{} client objects used as bases ({sent} objects in {} bytes)",
        completed - sent,
        ours.len()
    );
    let deltas = delta_count(&sb, &repo, &ours);
    assert!(deltas >= 30, "{deltas} deltas in {} bytes", ours.len());
}

/// Packs `new_objects` (a `rev-list --objects` listing) whole into a pack of `repo`'s own
/// (git's `pack-objects --window=0`), then removes the packs `before` named: the repository is
/// left with that pack and the one its caller wrote.
fn new_objects_whole_instead_of(repo: &Repo, new_objects: &str, before: Vec<std::path::PathBuf>) {
    let prefix = repo.pack_dir().join("pack");
    repo.git_stdin(
        &["pack-objects", "-q", "--window=0", prefix.to_str().unwrap()],
        new_objects.as_bytes(),
    );
    for pack in before {
        for ext in ["pack", "idx", "bitmap", "rev"] {
            let _ = std::fs::remove_file(pack.with_extension(ext));
        }
    }
    assert_eq!(repo.packs().len(), 2);
}
