//! `packd repack` against stock git's `git repack` on copies of one repository: the objects
//! of each pack after (`git show-index`), which packs stay, and `git fsck --strict`, for
//! kept packs (`.keep`, `--keep-pack`), `--write-midx` without `--geometric`, and the
//! incremental repack's object set (loose objects reachable from refs, reflogs and the
//! index; unreachable ones stay loose).

mod common;

use common::*;
use std::collections::BTreeSet;

/// Five commits on `main` (a file each, changed each time) and an annotated tag at the third.
fn stream() -> Vec<u8> {
    let mut s = String::new();
    for c in 1..=5u32 {
        s += &format!(
            "commit refs/heads/main\nmark :{c}\ncommitter A <a@e.com> {} +0000\ndata 4\nc{c:02}\n",
            1_700_000_000 + c
        );
        for f in 1..=2u32 {
            let body: String = (1..=40u32)
                .map(|l| format!("line {l} of {f}{}\n", if l == c { " changed" } else { "" }))
                .collect();
            s += &format!("M 644 inline d{f}/f{f}\ndata {}\n{body}\n", body.len());
        }
    }
    s += "tag v1\nfrom :3\ntagger T <t@e.com> 1700002000 +0000\ndata 4\nv1!\n";
    s.into_bytes()
}

/// The test repository, every object reachable: `main`'s first three commits (and the tag)
/// in one pack, the other two in a second, and a loose commit on top of `main`.
fn two_packs(sb: &Sandbox, name: &str) -> Repo {
    let repo = sb.init_bare(name);
    repo.fast_import(&stream());
    repo.git(&["symbolic-ref", "HEAD", "refs/heads/main"]);
    let imported = repo.packs();
    repo.git_stdin(
        &["pack-objects", "-q", "--revs", "objects/pack/pack"],
        b"refs/tags/v1\n",
    );
    repo.git_stdin(
        &["pack-objects", "-q", "--revs", "objects/pack/pack"],
        b"refs/heads/main\n^refs/tags/v1\n",
    );
    // What fast-import wrote (loose objects, or a pack when many) goes.
    for pack in imported {
        for ext in ["pack", "idx"] {
            std::fs::remove_file(pack.with_extension(ext)).unwrap();
        }
    }
    repo.git(&["prune-packed"]);
    repo.commit_on_main("loose on top\n");
    assert_eq!(repo.packs().len(), 2);
    assert_eq!(repo.loose_count(), 1);
    repo
}

/// The objects of each pack (sorted ids, one set a pack), the packs sorted.
fn pack_contents(repo: &Repo) -> BTreeSet<Vec<String>> {
    repo.packs()
        .iter()
        .map(|pack| pack_ids(repo, &pack.with_extension("idx")))
        .collect()
}

/// The ids `git show-index` lists for the index `idx`, sorted.
fn pack_ids(repo: &Repo, idx: &std::path::Path) -> Vec<String> {
    let out = repo.git_stdin(&["show-index"], &std::fs::read(idx).unwrap());
    let mut ids: Vec<String> = String::from_utf8(out)
        .unwrap()
        .lines()
        .map(|l| l.split(' ').nth(1).unwrap().to_string())
        .collect();
    ids.sort();
    ids
}

/// The pack whose commits the tag reaches (the older one), as `pack-<hex>.pack`.
fn older_pack(repo: &Repo) -> String {
    let tag = repo.git_str(&["rev-parse", "refs/tags/v1"]);
    let pack = repo
        .packs()
        .into_iter()
        .find(|p| pack_ids(repo, &p.with_extension("idx")).contains(&tag))
        .unwrap();
    file_name(&pack)
}

/// Runs `git repack ARGS` on one copy of a fresh repository and `packd repack ARGS` on
/// another, with `prepare` run on each first (given the older pack's name); checks both with
/// `git fsck --strict` and returns each one's pack contents, and whether the older pack is
/// still there.
fn both(args: &[&str], prepare: impl Fn(&Repo, &str)) -> [(BTreeSet<Vec<String>>, bool); 2] {
    let sb = Sandbox::new();
    let theirs = two_packs(&sb, "theirs.git");
    let ours = theirs.copy_as(&sb, "ours.git");
    let older = older_pack(&theirs);
    let mut out = Vec::new();
    for (repo, by_git) in [(&theirs, true), (&ours, false)] {
        prepare(repo, &older);
        let owned: Vec<String> = args.iter().map(|a| a.replace("OLDER", &older)).collect();
        let mut full = vec!["repack"];
        full.extend(owned.iter().map(String::as_str));
        if by_git {
            repo.git(&full);
        } else {
            repo.packd(&full, None).assert_success();
        }
        repo.git(&["fsck", "--strict", "--no-dangling"]);
        out.push((pack_contents(repo), repo.pack_dir().join(&older).exists()));
    }
    [out.remove(0), out.remove(0)]
}

fn keep_file(repo: &Repo, older: &str) {
    std::fs::write(repo.pack_dir().join(older.replace(".pack", ".keep")), b"").unwrap();
}

#[test]
fn a_kept_packs_objects_are_not_packed_again_as_git_does() {
    for args in [&["-a", "-d"][..], &["-a"][..]] {
        let [git, packd] = both(args, keep_file);
        assert!(git.1, "git keeps the kept pack");
        assert_eq!(git.0.len(), if args.len() == 2 { 2 } else { 3 });
        assert_eq!(packd, git, "{args:?}: packs after");
    }
}

#[test]
fn keep_pack_names_a_pack_to_keep_as_git_does() {
    let [git, packd] = both(&["-a", "-d", "--keep-pack=OLDER"], |_, _| {});
    assert!(git.1);
    assert_eq!(git.0.len(), 2);
    assert_eq!(packd, git);
}

#[test]
fn with_a_bitmap_kept_objects_are_packed_too_as_git_does() {
    // git's default: -b packs the kept packs' objects, so that the bitmap covers them all.
    let [git, packd] = both(&["-a", "-d", "-b"], keep_file);
    assert!(git.1);
    assert_eq!(packd, git);
    let [git, packd] = both(&["-a", "-d", "--no-pack-kept-objects"], |repo, older| {
        keep_file(repo, older);
        repo.git(&["config", "repack.packKeptObjects", "true"]);
    });
    assert_eq!(packd, git, "the option over the config");
    let [git, packd] = both(&["-a", "-d"], |repo, older| {
        keep_file(repo, older);
        repo.git(&["config", "repack.packKeptObjects", "true"]);
    });
    assert_eq!(packd, git, "repack.packKeptObjects");
}

/// The loose objects, sorted.
fn loose_ids(repo: &Repo) -> Vec<String> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(repo.objects_dir()).unwrap() {
        let entry = entry.unwrap();
        let dir = entry.file_name().to_string_lossy().into_owned();
        if dir.len() == 2 && dir.chars().all(|c| c.is_ascii_hexdigit()) {
            for file in std::fs::read_dir(entry.path()).unwrap() {
                out.push(format!(
                    "{dir}{}",
                    file.unwrap().file_name().to_string_lossy()
                ));
            }
        }
    }
    out.sort();
    out
}

/// A loose commit of a new file `name` (blob and tree loose too) on top of `parent`.
fn loose_commit(repo: &Repo, parent: &str, name: &str) -> String {
    let blob = String::from_utf8(repo.git_stdin(
        &["hash-object", "-w", "--stdin"],
        format!("{name} only\n").as_bytes(),
    ))
    .unwrap();
    let tree = String::from_utf8(repo.git_stdin(
        &["mktree"],
        format!("100644 blob {}\t{name}\n", blob.trim()).as_bytes(),
    ))
    .unwrap();
    let parent = repo.git_str(&["rev-parse", parent]);
    repo.git_str(&["commit-tree", "-m", name, "-p", &parent, tree.trim()])
}

/// Loose objects of every kind of reachability on top of [`two_packs`]: a commit on `main`
/// (reachable), one only `main`'s reflog names, a dangling blob, an annotated tag of a packed
/// commit, a blob only a packed commit's tree names, a blob only the index names and a tree
/// only its cache-tree names; the index written in `index_version`.
fn loose_of_every_kind(sb: &Sandbox, index_version: &str) -> Repo {
    let repo = two_packs(sb, "base.git");
    repo.git(&["config", "core.logAllRefUpdates", "always"]);
    let main = repo.git_str(&["rev-parse", "refs/heads/main"]);
    let only_in_reflog = loose_commit(&repo, &main, "reflog");
    repo.git(&[
        "update-ref",
        "-m",
        "away",
        "refs/heads/main",
        &only_in_reflog,
    ]);
    repo.git(&["update-ref", "-m", "back", "refs/heads/main", &main]);
    let on_main = loose_commit(&repo, &main, "main");
    repo.git(&["update-ref", "refs/heads/main", &on_main]);
    repo.git_stdin(&["hash-object", "-w", "--stdin"], b"dangling\n");
    repo.git(&["tag", "-a", "-m", "annotated", "t2", "refs/tags/v1^{}"]);
    // A packed commit and tree whose blob stays loose: git does not enter a packed commit.
    let odd = loose_commit(&repo, &main, "odd");
    let odd_tree = repo.git_str(&["rev-parse", &format!("{odd}^{{tree}}")]);
    repo.git_stdin(
        &["pack-objects", "-q", "objects/pack/pack"],
        format!("{odd}\n{odd_tree}\n").as_bytes(),
    );
    repo.git(&["prune-packed"]);
    repo.git(&["update-ref", "refs/heads/odd", &odd]);
    // The index: a blob of its own and, from write-tree, a cache-tree tree.
    let indexed = String::from_utf8(
        repo.git_stdin(&["hash-object", "-w", "--stdin"], b"only in the index\n"),
    )
    .unwrap();
    let info = format!("100644,{},sub/indexed", indexed.trim());
    repo.git(&["update-index", "--add", "--cacheinfo", &info]);
    repo.git(&["update-index", "--index-version", index_version]);
    repo.git(&["write-tree"]);
    repo
}

#[test]
fn an_incremental_repack_packs_what_gits_packs() {
    for (index_version, args) in [("2", &["repack"][..]), ("4", &["repack", "-d"][..])] {
        let sb = Sandbox::new();
        let base = loose_of_every_kind(&sb, index_version);
        let loose_before = loose_ids(&base);
        let theirs = base.copy_as(&sb, "theirs.git");
        let ours = base.copy_as(&sb, "ours.git");
        theirs.git(args);
        ours.packd(args, None).assert_success();
        for repo in [&theirs, &ours] {
            repo.git(&["fsck", "--strict", "--no-dangling"]);
        }
        let (git, packd) = (pack_contents(&theirs), pack_contents(&ours));
        let old = pack_contents(&base);
        let new: Vec<_> = git.difference(&old).collect();
        assert_eq!(new.len(), 1, "git wrote one pack");
        // All but the dangling blob and the one only a packed tree names.
        assert_eq!(new[0].len(), loose_before.len() - 2, "{new:?}");
        assert_eq!(packd, git, "index v{index_version}, {args:?}: the packs");
        assert_eq!(
            loose_ids(&ours),
            loose_ids(&theirs),
            "{args:?}: loose after"
        );
    }
}

/// The packs (`pack-<hex>.idx`) the multi-pack-index names: its PNAM chunk.
fn midx_packs(repo: &Repo) -> Vec<String> {
    let midx = std::fs::read(repo.pack_dir().join("multi-pack-index")).unwrap();
    assert_eq!(&midx[..4], b"MIDX");
    let chunks = midx[6] as usize;
    let table = |i: usize| {
        let at = 12 + 12 * i;
        let offset = u64::from_be_bytes(midx[at + 4..at + 12].try_into().unwrap()) as usize;
        (&midx[at..at + 4], offset)
    };
    let i = (0..chunks).find(|&i| table(i).0 == b"PNAM").unwrap();
    let (start, end) = (table(i).1, table(i + 1).1);
    midx[start..end]
        .split(|&b| b == 0)
        .filter(|n| !n.is_empty())
        .map(|n| String::from_utf8(n.to_vec()).unwrap())
        .collect()
}

/// The objects of each pack the multi-pack-index names, as [`pack_contents`].
fn midx_contents(repo: &Repo) -> BTreeSet<Vec<String>> {
    midx_packs(repo)
        .iter()
        .map(|idx| pack_ids(repo, &repo.pack_dir().join(idx)))
        .collect()
}

/// The pack bitmaps left.
fn pack_bitmaps(repo: &Repo) -> usize {
    std::fs::read_dir(repo.pack_dir())
        .unwrap()
        .filter(|e| {
            let name = e
                .as_ref()
                .unwrap()
                .file_name()
                .to_string_lossy()
                .into_owned();
            name.starts_with("pack-") && name.ends_with(".bitmap")
        })
        .count()
}

#[test]
fn write_midx_without_geometric_covers_the_packs_that_stay_as_gits() {
    for args in [
        &["repack", "-a", "-d", "--write-midx"][..],
        &["repack", "-a", "-d", "--write-midx", "-b"][..],
        &["repack", "-a", "--write-midx", "-b"][..],
        &["repack", "--write-midx"][..],
        &["repack", "-d", "--write-midx", "-b"][..],
    ] {
        let sb = Sandbox::new();
        let theirs = two_packs(&sb, "theirs.git");
        // A kept pack: it stays, and the multi-pack-index names it.
        let ours = theirs.copy_as(&sb, "ours.git");
        keep_file(&theirs, &older_pack(&theirs));
        keep_file(&ours, &older_pack(&ours));
        theirs.git(args);
        ours.packd(args, None).assert_success();
        for repo in [&theirs, &ours] {
            repo.git(&["fsck", "--strict", "--no-dangling"]);
            repo.git(&["multi-pack-index", "verify"]);
            if args.contains(&"-b") {
                let out = repo.git_run(&["rev-list", "--test-bitmap", "HEAD"], None);
                out.assert_success();
                assert!(out.err().contains("OK!"), "{}", out.err());
            }
        }
        assert_eq!(
            pack_contents(&ours),
            pack_contents(&theirs),
            "{args:?}: packs"
        );
        assert_eq!(
            midx_contents(&ours),
            midx_contents(&theirs),
            "{args:?}: midx"
        );
        assert_eq!(
            pack_bitmaps(&ours),
            pack_bitmaps(&theirs),
            "{args:?}: pack bitmaps"
        );
    }
}

#[test]
fn keep_unreachable_packs_what_gits_packs() {
    for kept in [false, true] {
        let sb = Sandbox::new();
        let base = loose_of_every_kind(&sb, "2");
        // The odd branch's packed commit and tree become unreachable too.
        base.git(&["update-ref", "-d", "refs/heads/odd"]);
        if kept {
            keep_file(&base, &older_pack(&base));
        }
        let theirs = base.copy_as(&sb, "theirs.git");
        let ours = base.copy_as(&sb, "ours.git");
        let args = ["repack", "-a", "-d", "-k"];
        theirs.git(&args);
        ours.packd(&args, None).assert_success();
        for repo in [&theirs, &ours] {
            repo.git(&["fsck", "--strict", "--no-dangling"]);
            assert_eq!(repo.all_ids(), base.all_ids(), "nothing is lost");
        }
        assert_eq!(pack_contents(&ours), pack_contents(&theirs), "kept {kept}");
        assert_eq!(
            loose_ids(&ours),
            loose_ids(&theirs),
            "kept {kept}: loose after"
        );
    }
}

/// The objects of each pack but cruft packs (those with a `.mtimes`), as [`pack_contents`].
fn non_cruft_contents(repo: &Repo) -> BTreeSet<Vec<String>> {
    repo.packs()
        .iter()
        .filter(|p| !p.with_extension("mtimes").exists())
        .map(|p| pack_ids(repo, &p.with_extension("idx")))
        .collect()
}

#[test]
fn a_full_repack_packs_what_reflogs_and_the_index_reach_as_git() {
    let sb = Sandbox::new();
    let base = loose_of_every_kind(&sb, "2");
    let theirs = base.copy_as(&sb, "theirs.git");
    let ours = base.copy_as(&sb, "ours.git");
    theirs.git(&["repack", "-a", "-d"]);
    ours.packd(&["repack", "-a", "-d"], None).assert_success();
    for repo in [&theirs, &ours] {
        repo.git(&["fsck", "--strict", "--no-dangling"]);
    }
    // git's -a -d leaves the dangling blob loose; packd keeps it in a cruft pack.
    assert_eq!(non_cruft_contents(&ours), pack_contents(&theirs));
}

#[test]
fn counted_with_a_bitmap_a_full_repack_still_packs_what_reflogs_and_the_index_reach() {
    let sb = Sandbox::new();
    let base = loose_of_every_kind(&sb, "2");
    base.git(&["repack", "-a", "-d", "-b"]);
    // After the bitmapped pack: a commit only the reflog names, a blob only the index names.
    let main = base.git_str(&["rev-parse", "refs/heads/main"]);
    let away = loose_commit(&base, &main, "away again");
    base.git(&["update-ref", "-m", "away", "refs/heads/main", &away]);
    base.git(&["update-ref", "-m", "back", "refs/heads/main", &main]);
    let blob =
        String::from_utf8(base.git_stdin(&["hash-object", "-w", "--stdin"], b"index 2\n")).unwrap();
    let info = format!("100644,{},sub/second", blob.trim());
    base.git(&["update-index", "--add", "--cacheinfo", &info]);
    let theirs = base.copy_as(&sb, "theirs.git");
    let ours = base.copy_as(&sb, "ours.git");
    theirs.git(&["repack", "-a", "-d", "-b"]);
    ours.packd(&["repack", "-a", "-d", "-b"], None)
        .assert_success();
    for repo in [&theirs, &ours] {
        repo.git(&["fsck", "--strict", "--no-dangling"]);
    }
    assert_eq!(non_cruft_contents(&ours), pack_contents(&theirs));
}
