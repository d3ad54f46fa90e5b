//! `packd write-bitmap` checked by stock git: `git rev-list --test-bitmap` passes for tips and
//! spaced commits; object counts with packd's bitmaps equal git's counts with git's own bitmaps
//! (for git and for packd's reader); `git fsck` and `git verify-pack` still pass; git uses the
//! `.rev`. Histories are built with fast-import: linear history, a merge, annotated tags (on
//! commits and on a tree), a submodule entry, files in subdirectories, and hundreds of
//! `refs/pull/*` spikes. Bad cases: a pack missing what a tip needs, an existing
//! bitmap to replace.

mod common;

use common::*;
use packd_odb::pack::Pack;
use packd_odb::HashKind;
use packd_reach::bitmap::{name_hash, PackBitmap};
use packd_storage::{LocalStorage, Storage};
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// A commit id the submodule entry points at (it lives in another repository).
const SUBMODULE_COMMIT: &str = "0123456789abcdef0123456789abcdef01234567";

/// A bare repository in one pack (no bitmap): `main` with 160 commits, a submodule entry,
/// a `topic` branch merged back, more commits after the merge, tags (annotated on commits and
/// on a tree, lightweight), and `spikes` refs `refs/pull/N/head` of one or two commits each
/// forking off `main`.
fn history(sb: &Sandbox, name: &str, spikes: usize) -> Repo {
    let repo = sb.init_bare(name);
    let mut fi = FastImport::new();
    let mut gen = HistoryGen::new(0xb17a, 9, 30);
    let mut main = gen.commits(&mut fi, "refs/heads/main", 160, false);
    main.push(fi.commit(
        "refs/heads/main",
        None,
        "add a submodule\n",
        &[Change::Ref {
            mode: "160000",
            path: "vendor/sub".into(),
            dataref: SUBMODULE_COMMIT.into(),
        }],
    ));
    fi.commit(
        "refs/heads/topic",
        Some(&format!(":{}", main[100])),
        "fork\n",
        &[inline("topic/start.txt", "topic\n")],
    );
    gen.commits(&mut fi, "refs/heads/topic", 12, false);
    fi.tag("v1.0", &format!(":{}", main[50]), "release 1.0\n");
    fi.tag("v2.0", &format!(":{}", main[150]), "release 2.0\n");
    fi.reset("refs/tags/light", &format!(":{}", main[20]));
    let mut rng = Rng::new(99);
    for k in 0..spikes {
        let base = main[rng.below(main.len())];
        let refname = format!("refs/pull/{k}/head");
        fi.commit(
            &refname,
            Some(&format!(":{base}")),
            &format!("pull {k}\n"),
            &[inline(&format!("pr/{k}.txt"), format!("change {k}\n"))],
        );
        if k % 2 == 0 {
            fi.commit(
                &refname,
                None,
                &format!("pull {k} again\n"),
                &[inline(&format!("src/pr{k}.txt"), random_line(&mut rng))],
            );
        }
    }
    repo.fast_import(&fi.finish());
    // A merge of topic into main, then more history on main.
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
    let mut fi = FastImport::with_time(1_800_000_000);
    fi.reset("refs/heads/main", &merge);
    gen.commits(&mut fi, "refs/heads/main", 20, false);
    repo.fast_import(&fi.finish());
    let tree = repo.git_str(&["rev-parse", "main~3^{tree}"]);
    repo.git(&["tag", "-a", "-m", "a tree", "treetag", &tree]);
    repo.git(&["-c", "repack.writeBitmaps=false", "repack", "-adq"]);
    // (A file edited twice in one generated commit leaves an unreachable blob.)
    repo.git(&["prune", "--expire=now"]);
    assert_eq!(repo.packs().len(), 1);
    assert_eq!(
        repo.loose_count(),
        0,
        "{}",
        String::from_utf8_lossy(&repo.git(&["fsck", "--unreachable", "--no-reflogs"]))
    );
    repo
}

fn write_bitmap(repo: &Repo, args: &[&str]) -> Run {
    let mut all = vec!["write-bitmap"];
    all.extend_from_slice(args);
    let run = repo.packd(&all, None);
    run.assert_no_crash();
    run
}

/// `git rev-list --test-bitmap COMMIT` passes.
fn assert_git_verifies(repo: &Repo, commit: &str) {
    let run = repo.git_run(&["rev-list", "--test-bitmap", commit], None);
    assert!(
        run.success() && run.err().lines().any(|l| l.trim() == "OK!"),
        "git rev-list --test-bitmap {commit} failed:\n{}",
        run.err()
    );
}

/// The pack and its bitmap as packd's reader opens them.
fn open_bitmap(repo: &Repo, use_table: bool) -> (Pack, PackBitmap) {
    let storage = LocalStorage::new(repo.objects_dir());
    let pack_file = file_name(&repo.packs()[0]);
    let stem = pack_file.strip_suffix(".pack").unwrap();
    let pack = Pack::open(&storage, &format!("pack/{stem}.idx"), 0, HashKind::Sha1).unwrap();
    let blob = storage.open(&format!("pack/{stem}.bitmap")).unwrap();
    let bitmap =
        PackBitmap::open_with(blob, pack.index().pack_checksum(), pack.len(), use_table).unwrap();
    (pack, bitmap)
}

/// Ids of the bitmapped commits.
fn bitmapped(repo: &Repo) -> Vec<String> {
    let (pack, bitmap) = open_bitmap(repo, true);
    bitmap
        .commit_positions()
        .map(|p| pack.index().id(p).to_hex())
        .collect()
}

/// A copy of `repo` (all files), for git to write its own bitmap in.
fn with_ext(pack: &Path, ext: &str) -> PathBuf {
    pack.with_extension(ext)
}

const QUERIES: &[&[&str]] = &[
    &["--objects", "main"],
    &["main"],
    &["--objects", "--all"],
    &["--objects", "main", "--not", "main~30"],
    &["--objects", "main~25", "--not", "main~90"],
    &["--objects", "topic", "--not", "main"],
    &["--objects", "main", "^topic"],
    &["--objects", "v1.0"],
    &["--objects", "treetag"],
    &["--objects", "--branches", "--not", "--tags"],
    &["--objects", "refs/pull/7/head", "--not", "main"],
    &[
        "--objects",
        "refs/pull/12/head",
        "refs/pull/13/head",
        "--not",
        "main~10",
    ],
    &["--objects", "--all", "--not", "main"],
];

/// `rev-list --count --use-bitmap-index Q`: git with packd's bitmaps, git with its own (in a
/// copy repacked with `-b`), and packd with packd's bitmaps all agree.
fn compare_counts(ours: &Repo, gits: &Repo, query: &[&str]) {
    let mut args = vec!["rev-list", "--count", "--use-bitmap-index"];
    args.extend_from_slice(query);
    let git_ours = ours.git_run(&args, None);
    git_ours.assert_success();
    assert_eq!(
        git_ours.err(),
        "",
        "git warned about packd's bitmap for {query:?}"
    );
    let git_theirs = gits.git_str(&args);
    let packd = ours.packd(&args, None);
    packd.assert_success();
    assert_eq!(
        git_ours.out().trim(),
        git_theirs,
        "git's count for {query:?} with packd's bitmaps vs its own"
    );
    assert_eq!(
        packd.out().trim(),
        git_theirs,
        "packd's count for {query:?} with packd's bitmaps vs git's with its own"
    );
}

#[test]
fn git_accepts_the_bitmaps_of_a_repository_with_many_spikes() {
    let sb = Sandbox::new();
    let repo = history(&sb, "spiky.git", 300);
    let run = write_bitmap(&repo, &[]);
    run.assert_success();
    eprintln!("{}", run.err());
    let pack = repo.packs()[0].clone();
    let bitmap_file = with_ext(&pack, "bitmap");
    let rev_file = with_ext(&pack, "rev");
    assert!(bitmap_file.is_file() && rev_file.is_file(), "{}", run.err());
    for f in [&bitmap_file, &rev_file] {
        assert!(std::fs::metadata(f).unwrap().permissions().readonly());
    }
    assert!(
        files_in(&repo.pack_dir())
            .iter()
            .all(|n| n.starts_with("pack-")),
        "temporary files left: {:?}",
        files_in(&repo.pack_dir())
    );

    // The selection: every branch and tag tip, history, not every spike.
    let selected = bitmapped(&repo);
    let n_pulls = 300;
    assert!(
        selected.len() > 100 && selected.len() < 100 + n_pulls / 2,
        "{} bitmaps",
        selected.len()
    );
    for tip in ["main", "topic", "v1.0^{commit}", "v2.0^{commit}", "light"] {
        let id = repo.git_str(&["rev-parse", tip]);
        assert!(selected.contains(&id), "{tip} has no bitmap");
        assert_git_verifies(&repo, &id);
    }
    // Where two or more spikes fork off, a bitmap (the spikes' own tips get none).
    let bases: Vec<String> = (0..n_pulls)
        .map(|k| format!("refs/pull/{k}/head~{}", if k % 2 == 0 { 2 } else { 1 }))
        .collect();
    let mut args = vec!["rev-parse"];
    args.extend(bases.iter().map(String::as_str));
    let mut forks: HashMap<String, usize> = HashMap::new();
    for id in repo.git_str(&args).lines() {
        *forks.entry(id.to_string()).or_default() += 1;
    }
    let shared: Vec<&String> = forks
        .iter()
        .filter(|(_, n)| **n >= 2)
        .map(|(id, _)| id)
        .collect();
    assert!(shared.len() > 20, "{} shared fork points", shared.len());
    for id in shared {
        assert!(selected.contains(id), "fork point {id} has no bitmap");
    }
    let pull = repo.git_str(&["rev-parse", "refs/pull/7/head"]);
    assert!(!selected.contains(&pull));
    // A sample of the others (spaced history, fork points).
    for id in selected.iter().step_by(9) {
        assert_git_verifies(&repo, id);
    }

    let gits = repo.copy_as(&sb, "gits.git");
    for f in [&bitmap_file, &rev_file] {
        std::fs::remove_file(gits.pack_dir().join(f.file_name().unwrap())).unwrap();
    }
    gits.git(&["repack", "-adbq"]);
    assert!(gits.packs().iter().any(|p| with_ext(p, "bitmap").is_file()));
    for q in QUERIES {
        compare_counts(&repo, &gits, q);
    }

    repo.git(&["fsck", "--no-progress", "--strict"]);
    repo.git(&["verify-pack", with_ext(&pack, "idx").to_str().unwrap()]);

    // git reads the .rev (sizes on disk come from it: with GIT_TEST_REV_INDEX_DIE_IN_MEMORY
    // git dies rather than build the order itself) and gets what it gets without it.
    let sizes = |r: &Repo, rev_file_only: bool| {
        let mut cmd = r.git_cmd();
        if rev_file_only {
            cmd.env("GIT_TEST_REV_INDEX_DIE_IN_MEMORY", "1");
        }
        cmd.args([
            "cat-file",
            "--batch-all-objects",
            "--batch-check=%(objectname) %(objectsize:disk)",
        ]);
        run_cmd(cmd, None, GIT_TIMEOUT)
            .assert_success()
            .stdout
            .clone()
    };
    let with_rev = sizes(&repo, true);
    let aside = repo.path.join("rev.aside");
    std::fs::rename(&rev_file, &aside).unwrap();
    let without_rev = sizes(&repo, false);
    assert!(
        !repo
            .git_cmd()
            .env("GIT_TEST_REV_INDEX_DIE_IN_MEMORY", "1")
            .args([
                "cat-file",
                "--batch-all-objects",
                "--batch-check=%(objectsize:disk)"
            ])
            .output()
            .unwrap()
            .status
            .success(),
        "without a .rev, git builds the order in memory (and dies as asked)"
    );
    std::fs::rename(&aside, &rev_file).unwrap();
    assert_same_bytes("objectsize:disk with packd's .rev", &without_rev, &with_rev);
}

#[test]
fn every_tip_gets_a_bitmap_when_there_are_few() {
    let sb = Sandbox::new();
    let repo = history(&sb, "few.git", 10);
    write_bitmap(&repo, &[]).assert_success();
    let selected = bitmapped(&repo);
    let tips = repo.git_str(&[
        "for-each-ref",
        "--format=%(objectname)%(if)%(*objectname)%(then) %(*objectname)%(end) %(*objecttype)",
    ]);
    let mut tip_commits = Vec::new();
    for line in tips.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        match f.as_slice() {
            [id] => tip_commits.push(id.to_string()),
            [_, peeled, "commit"] => tip_commits.push(peeled.to_string()),
            _ => {} // the tag on a tree
        }
    }
    assert!(tip_commits.len() >= 14, "{tips}");
    for id in &tip_commits {
        assert!(selected.contains(id), "tip {id} has no bitmap");
        assert_git_verifies(&repo, id);
    }
}

/// With `--every-tip`, every tip gets a bitmap however many refs there are (300 pull-request
/// refs, which the default selection leaves to their fork points), git verifies them, and a
/// query from every ref takes the union of their bitmaps in one pass over the file and walks
/// no commit: its objects are git's.
#[test]
fn every_tip_option_gives_every_spike_a_bitmap() {
    let sb = Sandbox::new();
    let repo = history(&sb, "spiky.git", 300);
    write_bitmap(&repo, &[]).assert_success();
    let spikes = repo.git_str(&["for-each-ref", "--format=%(objectname)", "refs/pull"]);
    let spikes: Vec<&str> = spikes.lines().collect();
    assert!(spikes.len() >= 300, "{}", spikes.len());
    let default = bitmapped(&repo);
    assert!(
        spikes
            .iter()
            .filter(|id| default.contains(&id.to_string()))
            .count()
            < 100
    );
    write_bitmap(&repo, &["--every-tip"]).assert_success();
    let selected = bitmapped(&repo);
    for id in &spikes {
        assert!(
            selected.contains(&id.to_string()),
            "spike {id} has no bitmap"
        );
    }
    for id in spikes.iter().step_by(60) {
        assert_git_verifies(&repo, id);
    }
    // The union in one pass over packd's entries (XORed with the best of the ten before
    // them) is the union of the bitmaps resolved one by one.
    let never = std::sync::atomic::AtomicBool::new(false);
    for use_table in [true, false] {
        let (_, bm) = open_bitmap(&repo, use_table);
        let all: Vec<u32> = bm.commit_positions().collect();
        let mut expected = packd_reach::ewah::Bitmap::new();
        for &pos in &all {
            expected.or_assign(&bm.commit_bitmap(pos).unwrap().unwrap());
        }
        assert_eq!(bm.union_of(&all, &never).unwrap().unwrap(), expected);
    }
    let mut cmd = std::process::Command::new(PACKD);
    apply_env(&mut cmd, &repo.home);
    cmd.env("PACKD_LOG", "packd_reach=debug").args([
        "-C",
        repo.path.to_str().unwrap(),
        "rev-list",
        "--objects",
        "--all",
        "--use-bitmap-index",
    ]);
    let run = run_cmd(cmd, None, PACKD_TIMEOUT);
    run.assert_success();
    assert!(
        run.err().contains("tips' bitmaps taken in one pass"),
        "{}",
        run.err()
    );
    assert!(
        run.err().contains(" 0 commits and 0 trees"),
        "{}",
        run.err()
    );
    let sorted = |text: &str| {
        let mut ids: Vec<String> = text.lines().map(|l| l[..40].to_string()).collect();
        ids.sort();
        ids
    };
    let git = repo.git_str(&["rev-list", "--objects", "--all"]);
    assert_eq!(sorted(&run.out()), sorted(&git));
}

#[test]
fn options_leave_out_the_table_the_hash_cache_and_the_rev() {
    let sb = Sandbox::new();
    let repo = history(&sb, "opts.git", 3);
    write_bitmap(
        &repo,
        &["--no-lookup-table", "--no-hash-cache", "--no-rev", "-q"],
    )
    .assert_success();
    let pack = repo.packs()[0].clone();
    assert!(!with_ext(&pack, "rev").exists());
    let (_, bitmap) = open_bitmap(&repo, true);
    assert!(!bitmap.has_lookup_table() && !bitmap.has_name_hash_cache());
    let main = repo.git_str(&["rev-parse", "main"]);
    assert_git_verifies(&repo, &main);
    let gits = repo.copy_as(&sb, "gits.git");
    std::fs::remove_file(with_ext(&gits.packs()[0], "bitmap")).unwrap();
    gits.git(&["repack", "-adbq"]);
    for q in &QUERIES[..4] {
        compare_counts(&repo, &gits, q);
    }
}

#[test]
fn the_lookup_table_and_name_hashes_read_back() {
    let sb = Sandbox::new();
    let repo = history(&sb, "names.git", 40);
    write_bitmap(&repo, &[]).assert_success();
    let (pack, with_table) = open_bitmap(&repo, true);
    let (_, scanned) = open_bitmap(&repo, false);
    assert!(with_table.used_lookup_table() && !scanned.used_lookup_table());
    with_table.verify_checksum().unwrap();
    let a: Vec<u32> = with_table.commit_positions().collect();
    let b: Vec<u32> = scanned.commit_positions().collect();
    assert_eq!(a, b, "the table lists the entries the file has");
    for &p in &a {
        assert_eq!(
            with_table.commit_bitmap(p).unwrap(),
            scanned.commit_bitmap(p).unwrap(),
            "commit position {p}"
        );
    }

    // Name hashes: git's pack_name_hash of the name `git rev-list --objects` gives an object
    // (the path of a tree or blob, the name of a tag). Objects with one name only must carry
    // its hash (0 for root trees); commits carry 0.
    let listing = repo.git_str(&["rev-list", "--objects", "--all"]);
    let mut paths: HashMap<String, Vec<String>> = HashMap::new();
    for line in listing.lines() {
        let (id, path) = line.split_once(' ').unwrap_or((line, ""));
        let v = paths.entry(id.to_string()).or_default();
        if !v.iter().any(|p| p == path) {
            v.push(path.to_string());
        }
    }
    let kinds = repo.git_str(&[
        "cat-file",
        "--batch-all-objects",
        "--batch-check=%(objectname) %(objecttype)",
    ]);
    let mut checked = 0;
    for line in kinds.lines() {
        let (id, kind) = line.split_once(' ').unwrap();
        let pos = pack
            .index()
            .find(&packd_odb::ObjectId::from_hex(id).unwrap())
            .unwrap();
        let hash = with_table.name_hash(pos).unwrap().unwrap();
        match kind {
            "commit" => assert_eq!(hash, 0, "{kind} {id}"),
            _ => match paths.get(id).map(Vec::as_slice) {
                Some([path]) => {
                    assert_eq!(hash, name_hash(path.as_bytes()), "{kind} {id} at {path:?}");
                    checked += 1;
                }
                Some(_) => {}
                None => panic!("{kind} {id} is in the pack but no ref reaches it"),
            },
        }
    }
    assert!(checked > 500, "only {checked} objects with one path");
}

#[test]
fn several_packs_get_a_multi_pack_index_and_its_bitmap() {
    let sb = Sandbox::new();
    let repo = history(&sb, "two.git", 0);
    let mut fi = FastImport::with_time(1_900_000_000);
    fi.reset("refs/heads/main", &repo.git_str(&["rev-parse", "main"]));
    fi.commit(
        "refs/heads/main",
        None,
        "more\n",
        &[inline("more.txt", "x\n")],
    );
    repo.git_stdin(
        &["-c", "fastimport.unpackLimit=0", "fast-import", "--quiet"],
        &fi.finish(),
    );
    assert_eq!(repo.packs().len(), 2);
    let run = write_bitmap(&repo, &[]);
    run.assert_success();
    let files = files_in(&repo.pack_dir());
    assert!(files.contains(&"multi-pack-index".to_string()), "{files:?}");
    assert!(
        files
            .iter()
            .any(|n| n.starts_with("multi-pack-index-") && n.ends_with(".bitmap")),
        "{files:?}"
    );
    assert!(
        !files
            .iter()
            .any(|n| n.starts_with("pack-") && n.ends_with(".bitmap")),
        "{files:?}"
    );
    repo.git(&["multi-pack-index", "verify"]);
    let main = repo.git_str(&["rev-parse", "main"]);
    assert_git_verifies(&repo, &main);
}

/// Rewrites `repo`'s pack without `blob`, which is kept as a loose object (so the repository
/// stays whole, but the pack is not closed under reachability).
fn pack_without(repo: &Repo, blob: &str) {
    let old = repo.packs();
    let all = repo.git_str(&["rev-list", "--objects", "--all"]);
    let mut list = String::new();
    for line in all.lines() {
        let id = line.split(' ').next().unwrap();
        if id != blob {
            list.push_str(id);
            list.push('\n');
        }
    }
    // (`git hash-object -w` would not write it: the pack has it still.)
    let content = repo.git(&["cat-file", "blob", blob]);
    assert_eq!(hex(&object_id("blob", &content)), blob);
    write_loose_file(&repo.objects_dir(), blob, &loose_bytes("blob", &content));
    let prefix = repo.pack_dir().join("pack");
    repo.git_stdin(
        &["pack-objects", "-q", prefix.to_str().unwrap()],
        list.as_bytes(),
    );
    for p in old {
        for ext in ["pack", "idx"] {
            std::fs::remove_file(with_ext(&p, ext)).unwrap();
        }
    }
    assert_eq!(repo.packs().len(), 1);
}

#[test]
fn a_tip_reaching_an_object_outside_the_pack_is_skipped() {
    let sb = Sandbox::new();
    let repo = history(&sb, "holes.git", 0);
    // A branch whose tip adds a file; the pack lacks that file's blob.
    let mut fi = FastImport::with_time(1_900_000_000);
    fi.reset("refs/heads/side", &repo.git_str(&["rev-parse", "topic"]));
    fi.commit(
        "refs/heads/side",
        None,
        "side\n",
        &[inline("side-only.txt", "only on side\n")],
    );
    repo.fast_import(&fi.finish());
    repo.git(&["-c", "repack.writeBitmaps=false", "repack", "-adq"]);
    let blob = repo.git_str(&["rev-parse", "side:side-only.txt"]);
    pack_without(&repo, &blob);
    let side = repo.git_str(&["rev-parse", "side"]);

    let run = write_bitmap(&repo, &[]);
    run.assert_success();
    assert!(
        run.err().contains(&side) && run.err().contains(&blob),
        "the warning names the commit and the missing object: {}",
        run.err()
    );
    let selected = bitmapped(&repo);
    assert!(!selected.contains(&side));
    for tip in ["main", "topic"] {
        let id = repo.git_str(&["rev-parse", tip]);
        assert!(selected.contains(&id), "{tip}");
        assert_git_verifies(&repo, &id);
    }
    repo.git(&["fsck", "--no-progress"]);
}

#[test]
fn a_pack_no_tip_can_be_bitmapped_in_is_a_clear_error() {
    let sb = Sandbox::new();
    let repo = sb.init_bare("hole.git");
    // LICENSE, added first and never changed, is reached by every commit.
    let mut fi = FastImport::new();
    let first = fi.commit(
        "refs/heads/main",
        None,
        "start\n",
        &[inline("LICENSE", "license\n"), inline("a.txt", "0\n")],
    );
    for k in 1..5 {
        fi.commit(
            "refs/heads/main",
            None,
            "edit\n",
            &[inline("a.txt", format!("{k}\n"))],
        );
    }
    fi.commit(
        "refs/heads/b",
        Some(&format!(":{first}")),
        "b\n",
        &[inline("b.txt", "b\n")],
    );
    repo.fast_import(&fi.finish());
    repo.git(&["-c", "repack.writeBitmaps=false", "repack", "-adq"]);
    let blob = repo.git_str(&["rev-parse", "main:LICENSE"]);
    pack_without(&repo, &blob);
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

#[test]
fn an_existing_bitmap_is_replaced() {
    let sb = Sandbox::new();
    let repo = history(&sb, "replace.git", 5);
    repo.git(&["-c", "pack.writeReverseIndex=true", "repack", "-adbq"]);
    let pack = repo.packs()[0].clone();
    let gits_bitmap = std::fs::read(with_ext(&pack, "bitmap")).unwrap();
    assert!(with_ext(&pack, "rev").is_file());
    write_bitmap(&repo, &[]).assert_success();
    let ours = std::fs::read(with_ext(&pack, "bitmap")).unwrap();
    assert_ne!(ours, gits_bitmap, "the bitmap was rewritten");
    // packd's has a lookup table; git 2.39's does not by default.
    assert_eq!(u16::from_be_bytes([ours[6], ours[7]]) & 0x10, 0x10);
    assert_eq!(
        files_in(&repo.pack_dir()).len(),
        4,
        "{:?}",
        files_in(&repo.pack_dir())
    );
    let main = repo.git_str(&["rev-parse", "main"]);
    assert_git_verifies(&repo, &main);
    // And again over packd's own.
    write_bitmap(&repo, &["-q"]).assert_success();
    assert_eq!(
        std::fs::read(with_ext(&pack, "bitmap")).unwrap(),
        ours,
        "deterministic"
    );
    assert_git_verifies(&repo, &main);
}

#[test]
fn notes_and_separate_histories_get_bitmaps_among_many_spikes() {
    let sb = Sandbox::new();
    let repo = history(&sb, "separate.git", 150);
    // A notes history of a few commits, and an orphan history under a spike-like namespace
    // (as Gerrit's refs/meta/config), neither sharing a commit with HEAD's history.
    for rev in ["main", "main~5", "main~9", "topic"] {
        repo.git(&[
            "notes",
            "--ref=refs/notes/commits",
            "add",
            "-m",
            &format!("note on {rev}"),
            rev,
        ]);
    }
    let mut fi = FastImport::with_time(1_850_000_000);
    for k in 0..4 {
        fi.commit(
            "refs/meta/config",
            None,
            &format!("config {k}\n"),
            &[inline("project.config", format!("[k]\n\tv = {k}\n"))],
        );
    }
    repo.fast_import(&fi.finish());
    repo.git(&["-c", "repack.writeBitmaps=false", "repack", "-adq"]);
    assert_eq!(repo.packs().len(), 1);
    write_bitmap(&repo, &[]).assert_success();
    let selected = bitmapped(&repo);
    for tip in ["refs/notes/commits", "refs/meta/config"] {
        let id = repo.git_str(&["rev-parse", tip]);
        assert!(selected.contains(&id), "{tip} has no bitmap");
        assert_git_verifies(&repo, &id);
    }
    // The notes' older commits are no spikes, and do not take the history spacing's picks.
    let older = repo.git_str(&["rev-parse", "refs/notes/commits~1"]);
    assert!(!selected.contains(&older));
    // `--all` with bitmaps: git's answer equals the walk's, and packd's equals git's.
    let args = ["rev-list", "--objects", "--count", "--all"];
    let walked = repo.git_str(&args);
    let mut with = args.to_vec();
    with.insert(1, "--use-bitmap-index");
    assert_eq!(repo.git_str(&with), walked);
    let packd = repo.packd(&with, None);
    packd.assert_success();
    assert_eq!(packd.out().trim(), walked);
}
