//! `packd write-bitmap` over several packs: a multi-pack-index and its bitmap, checked by stock
//! git (`multi-pack-index verify`, `rev-list --test-bitmap`, counts with and without bitmaps,
//! `fsck`) and against `git multi-pack-index write --bitmap` on a copy: the same objects, and
//! the same answers from git with either file and from packd with packd's. The repository has
//! three packs closed only together (two fast-import runs and a hand-made pack holding a merge
//! and copies of objects from the first pack), annotated and lightweight tags, merges. Also:
//! `--midx` over one pack, `--preferred-pack`, stale bitmaps removed, missing objects refused.

mod common;

use common::*;
use packd_odb::pack::multi_index::MultiPackIndex;
use std::path::Path;

/// A bare repository with three packs (none with a bitmap) and no loose objects; returns it and
/// the ids duplicated across two packs.
fn three_packs(sb: &Sandbox, name: &str) -> (Repo, Vec<String>) {
    let repo = sb.init_bare(name);
    let mut gen = HistoryGen::new(0x3d1d, 8, 25);
    // Pack 1: main, a topic branch, an annotated tag.
    let mut fi = FastImport::new();
    let main = gen.commits(&mut fi, "refs/heads/main", 40, false);
    fi.reset("refs/heads/topic", &format!(":{}", main[30]));
    gen.commits(&mut fi, "refs/heads/topic", 8, false);
    fi.tag("v1.0", &format!(":{}", main[20]), "release 1.0\n");
    repo.fast_import(&fi.finish());
    // A merge of topic into main (a loose commit for now).
    let tree = repo.git_str(&["rev-parse", "main^{tree}"]);
    let merge = repo.git_str(&[
        "commit-tree",
        &tree,
        "-p",
        "main",
        "-p",
        "topic",
        "-m",
        "merge topic",
    ]);
    // Pack 2: more history on main after the merge, a side branch, tags.
    let mut fi = FastImport::with_time(1_800_000_000);
    fi.reset("refs/heads/main", &merge);
    let more = gen.commits(&mut fi, "refs/heads/main", 20, false);
    fi.tag("v2.0", &format!(":{}", more[10]), "release 2.0\n");
    fi.reset("refs/tags/light", &format!(":{}", more[5]));
    fi.reset("refs/heads/side", &format!(":{}", more[3]));
    gen.commits(&mut fi, "refs/heads/side", 5, false);
    repo.fast_import(&fi.finish());
    // Pack 3: the merge, and copies of a commit, its tree and a blob from pack 1.
    let dups: Vec<String> = ["main~30", "main~30^{tree}", "main~30:file0.txt"]
        .iter()
        .map(|r| repo.git_str(&["rev-parse", r]))
        .collect();
    let mut list = format!("{merge}\n");
    for d in &dups {
        list.push_str(d);
        list.push('\n');
    }
    let prefix = repo.pack_dir().join("pack");
    repo.git_stdin(
        &["pack-objects", "-q", prefix.to_str().unwrap()],
        list.as_bytes(),
    );
    repo.git(&["prune-packed"]);
    assert_eq!(repo.packs().len(), 3);
    assert_eq!(repo.loose_count(), 0);
    let holding = |id: &str| {
        repo.packs()
            .iter()
            .filter(|p| {
                let idx = p.with_extension("idx");
                let out = repo.git_stdin(&["show-index"], &std::fs::read(&idx).unwrap());
                String::from_utf8_lossy(&out).contains(id)
            })
            .count()
    };
    for d in &dups {
        assert_eq!(holding(d), 2, "{d} is in two packs");
    }
    (repo, dups)
}

fn midx_bitmaps(repo: &Repo) -> Vec<String> {
    files_in(&repo.pack_dir())
        .into_iter()
        .filter(|n| n.starts_with("multi-pack-index-") && n.ends_with(".bitmap"))
        .collect()
}

fn open_midx(repo: &Repo) -> MultiPackIndex {
    let path = repo.pack_dir().join("multi-pack-index");
    MultiPackIndex::from_bytes("midx", std::fs::read(path).unwrap().into()).unwrap()
}

fn write_bitmap(repo: &Repo, args: &[&str]) -> Run {
    let mut all = vec!["write-bitmap"];
    all.extend_from_slice(args);
    let run = repo.packd(&all, None);
    run.assert_no_crash();
    run
}

/// `git rev-list --test-bitmap COMMIT` passes, on a bitmap of `entries` entries when given.
fn assert_git_verifies(repo: &Repo, commit: &str, entries: Option<usize>) {
    let run = repo.git_run(&["rev-list", "--test-bitmap", commit], None);
    let err = run.err();
    assert!(
        run.success() && err.lines().any(|l| l.trim() == "OK!"),
        "git rev-list --test-bitmap {commit} failed:\n{err}"
    );
    if let Some(n) = entries {
        assert!(
            err.contains(&format!("Bitmap v1 test ({n} entries)")),
            "git did not use the bitmap with {n} entries:\n{err}"
        );
    }
}

/// The number of entries in a `.bitmap` (its header).
fn entry_count(path: &Path) -> usize {
    let b = std::fs::read(path).unwrap();
    assert_eq!(&b[..4], b"BITM");
    u32::from_be_bytes(b[8..12].try_into().unwrap()) as usize
}

const QUERIES: &[&[&str]] = &[
    &["--objects", "main"],
    &["main"],
    &["--objects", "--all"],
    &["--all"],
    &["--objects", "main", "--not", "main~12"],
    &["--objects", "topic", "--not", "main~25"],
    &["--objects", "side", "--not", "main"],
    &["--objects", "v1.0"],
    &["--objects", "--branches", "--not", "--tags"],
    &["--objects", "--tags"],
    &["--objects", "main~20^2"],
];

/// Git with `ours`' bitmap, git with `theirs`', and packd with `ours`' give the same counts;
/// so does git without bitmaps when nothing is excluded (with exclusions, a walk may count
/// objects the excluded side reaches only through older trees, which bitmaps leave out).
fn compare_counts(ours: &Repo, theirs: &Repo, query: &[&str]) {
    let mut args = vec!["rev-list", "--count", "--use-bitmap-index"];
    args.extend_from_slice(query);
    let git_ours = ours.git_run(&args, None);
    git_ours.assert_success();
    assert_eq!(git_ours.err(), "", "git warned about {query:?}");
    let want = theirs.git_str(&args);
    assert_eq!(
        git_ours.out().trim(),
        want,
        "git with packd's bitmap vs with its own, {query:?}"
    );
    let packd = ours.packd(&args, None);
    packd.assert_success();
    assert_eq!(
        packd.out().trim(),
        want,
        "packd with packd's bitmap, {query:?}"
    );
    if !query.contains(&"--not") {
        args.remove(2);
        assert_eq!(ours.git_str(&args), want, "git without bitmaps, {query:?}");
    }
}

#[test]
fn git_accepts_packds_multi_pack_index_bitmap_and_agrees_with_its_own() {
    let sb = Sandbox::new();
    let (repo, _dups) = three_packs(&sb, "three.git");
    let theirs = repo.copy_as(&sb, "theirs.git");
    theirs.git(&["multi-pack-index", "write", "--bitmap"]);
    assert_eq!(midx_bitmaps(&theirs).len(), 1);

    let run = write_bitmap(&repo, &[]);
    run.assert_success();
    assert!(run.err().contains("3 packs"), "{}", run.err());
    let files = files_in(&repo.pack_dir());
    assert!(
        files.iter().all(|n| n.starts_with("pack-")
            || n == "multi-pack-index"
            || (n.starts_with("multi-pack-index-") && n.ends_with(".bitmap"))),
        "unexpected files: {files:?}"
    );
    let bitmaps = midx_bitmaps(&repo);
    assert_eq!(bitmaps.len(), 1, "{files:?}");
    let bitmap_path = repo.pack_dir().join(&bitmaps[0]);
    assert!(std::fs::metadata(&bitmap_path)
        .unwrap()
        .permissions()
        .readonly());
    // The multi-pack-index itself stays writable, as git leaves it (tests/file_modes.rs).
    let midx_mode = |r: &Repo| {
        use std::os::unix::fs::PermissionsExt;
        let path = r.pack_dir().join("multi-pack-index");
        std::fs::metadata(path).unwrap().permissions().mode() & 0o777
    };
    assert_eq!(midx_mode(&repo), midx_mode(&theirs));

    // The same object set as git's multi-pack-index, one entry per object; a RIDX chunk.
    let ours = open_midx(&repo);
    let gits = open_midx(&theirs);
    assert_eq!(ours.len(), gits.len());
    assert_eq!(ours.pack_names(), gits.pack_names());
    assert!(ours.has_reverse_index());
    for i in 0..ours.len() {
        assert_eq!(ours.id(i), gits.id(i));
    }
    assert_eq!(ours.len() as usize, repo.all_ids().len());
    // The bitmap is the multi-pack-index's.
    assert!(bitmaps[0].contains(&hex(ours.checksum())));

    repo.git(&["multi-pack-index", "verify"]);
    repo.git(&["fsck", "--no-progress", "--strict"]);
    let entries = entry_count(&bitmap_path);
    for tip in [
        "main",
        "main~20^2",
        "topic",
        "side",
        "v1.0",
        "v2.0",
        "light",
        "main~3",
    ] {
        let id = repo.git_str(&["rev-parse", &format!("{tip}^{{commit}}")]);
        assert_git_verifies(&repo, &id, Some(entries));
    }
    for q in QUERIES {
        compare_counts(&repo, &theirs, q);
    }
    // Object lists, not just counts: packd's equal git's.
    let args = ["rev-list", "--objects", "--use-bitmap-index", "--all"];
    let git_list = sorted_lines(&repo.git(&args));
    let packd = repo.packd(&args, None);
    packd.assert_success();
    let packd_list = sorted_lines(&packd.stdout);
    let ids = |v: &[Vec<u8>]| -> Vec<Vec<u8>> {
        v.iter()
            .filter(|l| !l.is_empty())
            .map(|l| l.split(|&b| b == b' ').next().unwrap_or_default().to_vec())
            .collect()
    };
    let (git_ids, packd_ids) = (ids(&git_list), ids(&packd_list));
    let walked = ids(&sorted_lines(&repo.git(&[
        "rev-list",
        "--objects",
        "--all",
    ])));
    assert_eq!(git_ids, walked);
    assert_eq!(packd_ids, git_ids);

    // Over git's own multi-pack-index and bitmap: both replaced, the stale bitmap removed.
    let run = write_bitmap(&theirs, &["-q"]);
    run.assert_success();
    let replaced = midx_bitmaps(&theirs);
    assert_eq!(replaced.len(), 1, "{:?}", files_in(&theirs.pack_dir()));
    assert_eq!(replaced, bitmaps, "the same midx, the same name");
    let main = theirs.git_str(&["rev-parse", "main"]);
    assert_git_verifies(&theirs, &main, Some(entries));
}

#[test]
fn one_pack_with_midx_and_a_preferred_pack() {
    let sb = Sandbox::new();
    let (repo, _) = three_packs(&sb, "one.git");
    let one = repo.copy_as(&sb, "one-pack.git");
    one.git(&["-c", "repack.writeBitmaps=false", "repack", "-adq"]);
    assert_eq!(one.packs().len(), 1);
    write_bitmap(&one, &["--midx"]).assert_success();
    assert_eq!(midx_bitmaps(&one).len(), 1);
    assert!(
        !files_in(&one.pack_dir())
            .iter()
            .any(|n| n.starts_with("pack-") && (n.ends_with(".bitmap") || n.ends_with(".rev"))),
        "{:?}",
        files_in(&one.pack_dir())
    );
    let midx = open_midx(&one);
    assert_eq!(midx.pack_names().len(), 1);
    one.git(&["multi-pack-index", "verify"]);
    let entries = entry_count(&one.pack_dir().join(&midx_bitmaps(&one)[0]));
    for tip in ["main", "side", "v2.0^{commit}"] {
        let id = one.git_str(&["rev-parse", tip]);
        assert_git_verifies(&one, &id, Some(entries));
    }
    for q in &QUERIES[..5] {
        compare_counts(&one, &repo, q);
    }

    // --preferred-pack: the named pack's objects come first in the pseudo-pack order.
    let packs = repo.packs();
    let smallest = packs
        .iter()
        .min_by_key(|p| std::fs::metadata(p).unwrap().len())
        .unwrap();
    let name = file_name(smallest);
    write_bitmap(&repo, &["-q", "--preferred-pack", &name]).assert_success();
    let midx = open_midx(&repo);
    let first = midx.reverse_position(0).unwrap();
    let (pack, _) = midx.location(first).unwrap();
    assert_eq!(
        midx.pack_names()[pack as usize],
        name.replace(".pack", ".idx")
    );
    repo.git(&["multi-pack-index", "verify"]);
    let main = repo.git_str(&["rev-parse", "main"]);
    assert_git_verifies(&repo, &main, None);
    compare_counts(&repo, &one, &["--objects", "--all"]);
    // Writing again with the default preferred pack: a new midx, the stale bitmap removed.
    write_bitmap(&repo, &["-q"]).assert_success();
    assert_eq!(midx_bitmaps(&repo).len(), 1);
    assert_git_verifies(&repo, &main, None);

    let run = write_bitmap(&repo, &["--preferred-pack", "pack-nope.pack"]);
    assert!(!run.success());
    assert!(run.err().contains("pack-nope"), "{}", run.err());
}

#[test]
fn packs_missing_an_object_are_refused_naming_it() {
    let sb = Sandbox::new();
    let (repo, _) = three_packs(&sb, "holes.git");
    // Rewrite the pack holding `side`'s tip without its root tree (new in that commit, reached
    // from no other); keep the tree loose, so the repository stays whole.
    let blob = repo.git_str(&["rev-parse", "side^{tree}"]);
    let holder = repo
        .packs()
        .into_iter()
        .find(|p| {
            let out = repo.git_stdin(
                &["show-index"],
                &std::fs::read(p.with_extension("idx")).unwrap(),
            );
            String::from_utf8_lossy(&out).contains(&blob)
        })
        .unwrap();
    let out = repo.git_stdin(
        &["show-index"],
        &std::fs::read(holder.with_extension("idx")).unwrap(),
    );
    let mut list = String::new();
    for line in String::from_utf8_lossy(&out).lines() {
        let id = line.split_whitespace().nth(1).unwrap();
        if id != blob {
            list.push_str(id);
            list.push('\n');
        }
    }
    let kind = repo.git_str(&["cat-file", "-t", &blob]);
    let content = repo.git(&["cat-file", &kind, &blob]);
    write_loose_file(&repo.objects_dir(), &blob, &loose_bytes(&kind, &content));
    let prefix = repo.pack_dir().join("pack");
    repo.git_stdin(
        &["pack-objects", "-q", prefix.to_str().unwrap()],
        list.as_bytes(),
    );
    for ext in ["pack", "idx"] {
        std::fs::remove_file(holder.with_extension(ext)).unwrap();
    }
    assert_eq!(repo.packs().len(), 3);
    repo.git(&["fsck", "--no-progress"]);

    let before = files_in(&repo.pack_dir());
    let run = write_bitmap(&repo, &[]);
    assert!(!run.success());
    assert!(
        run.err().contains(&blob) && run.err().contains("not closed"),
        "{}",
        run.err()
    );
    assert_eq!(files_in(&repo.pack_dir()), before, "nothing written");
}
