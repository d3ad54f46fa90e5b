//! `packd rev-list` against `git rev-list` on the same repository: the same objects and counts
//! for commit-only and `--objects` queries, with `--not`, `^rev`, `--all`, `--branches`,
//! `--tags`, `~N` and `^`, with and without git's bitmaps. The history includes the case where
//! the two differ (a branch that rewrites files to content only the excluded tip has): git's
//! plain walk lists those objects, its bitmap walk does not, and packd must match each.

mod common;

use common::*;

fn history(sb: &Sandbox) -> Repo {
    let repo = sb.init_bare("walk.git");
    let mut fi = FastImport::new();
    let mut gen = HistoryGen::new(7, 12, 40);
    let main = gen.commits(&mut fi, "refs/heads/main", 30, false);
    // A topic branch forked from the 10th commit of main.
    fi.commit(
        "refs/heads/topic",
        Some(&format!(":{}", main[9])),
        "fork\n",
        &[inline("topic.txt", "topic start\n")],
    );
    gen.commits(&mut fi, "refs/heads/topic", 12, false);
    repo.fast_import(&fi.finish());
    repo.git(&["tag", "-a", "-m", "release", "v1", "main~5"]);
    repo.git(&["tag", "light", "topic~3"]);
    // More than 16 tips, so that `--all` and `--tags` take the many-tips path (tip bitmaps in
    // pack order, covered tips skipped), with annotated tags on old and new commits.
    for i in 0..18 {
        let target = format!("main~{}", i + 2);
        if i % 2 == 0 {
            repo.git(&["tag", "-a", "-m", "old release", &format!("r{i}"), &target]);
        } else {
            repo.git(&["tag", &format!("l{i}"), &target]);
        }
    }
    repo
}

/// Commits added on top of `history`, in a pack of their own (fast-import writes one per run).
fn more_history(repo: &Repo) {
    let mut fi = FastImport::with_time(1_800_000_000);
    let mut gen = HistoryGen::new(11, 12, 40);
    fi.reset("refs/heads/main", &repo.git_str(&["rev-parse", "main"]));
    gen.commits(&mut fi, "refs/heads/main", 8, false);
    repo.git_stdin(
        &["-c", "fastimport.unpackLimit=0", "fast-import", "--quiet"],
        &fi.finish(),
    );
}

/// `packd rev-list` with `PACKD_LOG=debug`: its stderr tells which bitmap it opened.
fn packd_debug(repo: &Repo, args: &[&str]) -> Run {
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_packd"));
    apply_env(&mut cmd, &repo.home);
    cmd.env("PACKD_LOG", "debug");
    cmd.arg("-C").arg(&repo.path).args(args);
    run_cmd(cmd, None, std::time::Duration::from_secs(60))
}

fn compare(repo: &Repo, query: &[&str], bitmaps: bool) {
    let mut git_args = vec!["rev-list"];
    if bitmaps {
        git_args.push("--use-bitmap-index");
    }
    git_args.extend_from_slice(query);
    let mut packd_args = vec!["rev-list"];
    if bitmaps {
        packd_args.push("--use-bitmap-index");
    }
    packd_args.extend_from_slice(query);
    let ids = |bytes: &[u8]| -> Vec<String> {
        let mut v: Vec<String> = String::from_utf8_lossy(bytes)
            .lines()
            .map(|l| l.split(' ').next().unwrap().to_string())
            .collect();
        v.sort();
        v
    };
    let expected = repo.git(&git_args);
    let run = repo.packd(&packd_args, None);
    run.assert_success();
    let got = run.out().into_bytes();
    let only_git: Vec<String> = String::from_utf8_lossy(&expected)
        .lines()
        .filter(|l| !ids(&got).contains(&l.split(' ').next().unwrap().to_string()))
        .map(str::to_string)
        .collect();
    let only_packd: Vec<String> = run
        .out()
        .lines()
        .filter(|l| !ids(&expected).contains(&l.split(' ').next().unwrap().to_string()))
        .map(str::to_string)
        .collect();
    assert!(
        only_git.is_empty() && only_packd.is_empty(),
        "rev-list {query:?} (bitmaps: {bitmaps}): only git lists {only_git:#?}; only packd lists {only_packd:#?}"
    );
    assert_eq!(
        ids(&expected),
        ids(&got),
        "rev-list {query:?} (bitmaps: {bitmaps})"
    );
    let mut count_args = vec!["rev-list", "--count"];
    if bitmaps {
        count_args.push("--use-bitmap-index");
    }
    count_args.extend_from_slice(query);
    let git_count = repo.git_str(&count_args);
    let packd_count = repo.packd(&count_args, None).assert_success().out();
    assert_eq!(
        git_count.trim(),
        packd_count.trim(),
        "rev-list --count {query:?}"
    );
}

const QUERIES: &[&[&str]] = &[
    &["main"],
    &["--objects", "main"],
    &["--objects", "topic", "--not", "main"],
    &["--objects", "main", "^topic"],
    &["main~3", "^main~10"],
    &["--objects", "main", "--not", "main~1"],
    &["--objects", "--all"],
    &["--branches"],
    &["--objects", "--tags", "--not", "--branches"],
    &["--objects", "v1"],
    &["--objects", "topic^", "--not", "light"],
];

#[test]
fn same_objects_as_git_without_bitmaps() {
    let sb = Sandbox::new();
    let repo = history(&sb);
    repo.git(&["repack", "-adq"]);
    for q in QUERIES {
        compare(&repo, q, false);
    }
}

#[test]
fn same_objects_as_git_with_its_bitmaps() {
    let sb = Sandbox::new();
    let repo = history(&sb);
    repo.git(&["repack", "-adbq"]);
    assert!(
        repo.packs()
            .iter()
            .any(|p| p.with_extension("bitmap").exists()),
        "git wrote no bitmap"
    );
    for q in QUERIES {
        compare(&repo, q, true);
    }
}

/// History added since the last repack (a second pack, outside the bitmapped one, as a push
/// leaves it): the bitmaps still answer, the new objects walked until the walk enters the
/// bitmapped pack, and every answer is git's.
#[test]
fn same_objects_as_git_with_bitmaps_and_history_since() {
    let sb = Sandbox::new();
    let repo = history(&sb);
    repo.git(&["repack", "-adbq"]);
    more_history(&repo);
    assert!(repo.packs().len() >= 2, "{:?}", repo.packs());
    for q in QUERIES {
        compare(&repo, q, true);
    }
    let run = packd_debug(
        &repo,
        &["rev-list", "--use-bitmap-index", "--objects", "main"],
    );
    run.assert_success();
    assert!(
        run.err().contains("outside the bitmapped objects"),
        "the new history was not walked into the bitmapped pack: {}",
        run.err()
    );
    // A negative tip that is a tag made since (loose) of a packed commit: git keeps its bitmaps
    // (what the tag peels to is in the bitmapped pack), and so must packd.
    repo.git(&["tag", "-a", "-m", "since", "t-since", "topic~1"]);
    let query = ["--objects", "main", "--not", "t-since"];
    compare(&repo, &query, true);
    let mut args = vec!["rev-list", "--use-bitmap-index"];
    args.extend_from_slice(&query);
    let run = packd_debug(&repo, &args);
    run.assert_success();
    assert!(
        run.err().contains("outside the bitmapped objects"),
        "bitmaps were given up for a loose tag of a packed commit: {}",
        run.err()
    );
}

#[test]
fn same_objects_as_git_with_reverse_index_files() {
    let sb = Sandbox::new();
    let repo = history(&sb);
    repo.git(&["-c", "pack.writeReverseIndex=true", "repack", "-adbq"]);
    assert!(
        repo.packs()
            .iter()
            .any(|p| p.with_extension("rev").exists()),
        "git wrote no .rev"
    );
    for q in QUERIES {
        compare(&repo, q, true);
    }
}

#[test]
fn same_objects_as_git_with_a_multi_pack_index_bitmap() {
    let sb = Sandbox::new();
    let repo = history(&sb);
    // (A bare repository's repack writes a bitmap unless told not to.)
    repo.git(&["-c", "repack.writeBitmaps=false", "repack", "-adq"]);
    more_history(&repo);
    assert!(repo.packs().len() >= 2, "{:?}", repo.packs());
    repo.git(&["multi-pack-index", "write", "--bitmap"]);
    let midx_bitmap = std::fs::read_dir(repo.pack_dir())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .find(|n| n.starts_with("multi-pack-index-") && n.ends_with(".bitmap"))
        .expect("git wrote a multi-pack-index bitmap");
    assert!(
        !repo
            .packs()
            .iter()
            .any(|p| p.with_extension("bitmap").exists()),
        "only the multi-pack-index has a bitmap"
    );
    let run = packd_debug(
        &repo,
        &[
            "rev-list",
            "--use-bitmap-index",
            "--count",
            "--objects",
            "main",
        ],
    );
    run.assert_success();
    assert!(
        run.err().contains("opened ") && run.err().contains(&format!("/{midx_bitmap} (")),
        "packd did not use {midx_bitmap}: {}",
        run.err()
    );
    for q in QUERIES {
        compare(&repo, q, true);
    }
}

/// `--all` with packed refs: tags are taken from packed-refs' peeled values when every tag in
/// the bitmapped pack is a tip (a tag of a tag included), and read when one is not (a tag only
/// another tag points at), or when a loose ref overrides a packed one.
#[test]
fn packed_refs_peeled_values_give_gits_answer() {
    let sb = Sandbox::new();
    let repo = history(&sb);
    repo.git(&["tag", "-a", "-m", "inner", "inner", "topic~5"]);
    repo.git(&["tag", "-a", "-m", "outer", "outer", "inner"]);
    repo.git(&["tag", "-a", "-m", "of a tree", "treetag", "main~4^{tree}"]);
    repo.git(&["repack", "-adbq"]);
    repo.git(&["pack-refs", "--all"]);
    let peeled_used = |repo: &Repo| {
        let run = packd_debug(
            repo,
            &[
                "rev-list",
                "--use-bitmap-index",
                "--count",
                "--objects",
                "--all",
            ],
        );
        run.assert_success();
        run.err().contains("tags peeled from packed-refs")
    };
    let queries: &[&[&str]] = &[
        &["--objects", "--all"],
        &["--all"],
        &["--objects", "--tags", "--not", "--branches"],
        &["--objects", "main", "--not", "--all"],
    ];
    assert!(peeled_used(&repo), "every tag is a tip: peeled values");
    for q in queries {
        compare(&repo, q, true);
    }
    // A loose ref moved away from its packed value (a newer tag under the same name).
    repo.git(&["tag", "-f", "-a", "-m", "moved", "r0", "topic~1"]);
    repo.git(&["repack", "-adbq"]);
    for q in queries {
        compare(&repo, q, true);
    }
    // The inner tag is no longer a ref: only the outer one reaches it.
    repo.git(&["update-ref", "-d", "refs/tags/inner"]);
    repo.git(&["repack", "-adbq"]);
    repo.git(&["pack-refs", "--all"]);
    assert!(!peeled_used(&repo), "a tag that is no tip: tags are read");
    for q in queries {
        compare(&repo, q, true);
    }
}

#[test]
fn bad_revisions_fail_clearly() {
    let sb = Sandbox::new();
    let repo = history(&sb);
    let run = repo.packd(&["rev-list", "no-such-branch"], None);
    assert_eq!(run.code(), Some(128));
    // git's words (tests/cli_parity.rs compares them with git's own).
    assert!(
        run.err()
            .contains("ambiguous argument 'no-such-branch': unknown revision"),
        "{}",
        run.err()
    );
    let run = repo.packd(&["rev-list", "^no-such-branch"], None);
    assert_eq!(run.code(), Some(128));
    assert!(
        run.err().contains("bad revision '^no-such-branch'"),
        "{}",
        run.err()
    );
}

/// The repository's only `.bitmap`.
fn only_bitmap(repo: &Repo) -> std::path::PathBuf {
    let bitmaps: Vec<_> = repo
        .packs()
        .iter()
        .map(|p| p.with_extension("bitmap"))
        .filter(|b| b.exists())
        .collect();
    assert_eq!(bitmaps.len(), 1, "{bitmaps:?}");
    bitmaps[0].clone()
}

#[test]
fn a_bitmap_for_another_pack_or_truncated_is_skipped_with_one_warning() {
    let sb = Sandbox::new();
    let repo = history(&sb);
    let query = [
        "rev-list",
        "--use-bitmap-index",
        "--objects",
        "topic",
        "--not",
        "main",
    ];
    let plain = ["rev-list", "--objects", "topic", "--not", "main"];
    type Damage = fn(&mut Vec<u8>);
    let damages: [(&str, Damage); 2] = [
        ("records another pack's checksum", |b| b[20] ^= 0x40),
        ("is truncated", |b| b.truncate(b.len() / 2)),
    ];
    for (what, damage) in damages {
        repo.git(&["repack", "-adbq"]);
        let bitmap = only_bitmap(&repo);
        rewrite(&bitmap, damage);
        let run = repo.packd(&query, None);
        run.assert_success();
        let name = bitmap.file_name().unwrap().to_string_lossy().to_string();
        let err = run.err();
        let warnings: Vec<&str> = err.lines().filter(|l| l.contains("WARN")).collect();
        assert_eq!(warnings.len(), 1, "a bitmap that {what}: {err}");
        assert!(warnings[0].contains(&name), "{}", warnings[0]);
        // The answer is the plain walk's, as git gives when it cannot use the bitmap.
        let mut expected: Vec<String> = String::from_utf8(repo.git(&plain))
            .unwrap()
            .lines()
            .map(str::to_string)
            .collect();
        let mut got: Vec<String> = run.out().lines().map(str::to_string).collect();
        expected.sort();
        got.sort();
        assert_eq!(expected, got, "a bitmap that {what}");
    }
}

#[test]
fn a_corrupt_commit_bitmap_is_an_error_naming_the_file() {
    let sb = Sandbox::new();
    let repo = history(&sb);
    repo.git(&["-c", "pack.writeBitmapLookupTable=true", "repack", "-adbq"]);
    let bitmap = only_bitmap(&repo);
    // Every commit's bitmap entry gets an impossible word count; the type bitmaps stay intact,
    // so opening succeeds and the query fails when it decodes a commit's bitmap.
    let bytes = std::fs::read(&bitmap).unwrap();
    let mut at = 32;
    for _ in 0..4 {
        let words = u32::from_be_bytes(bytes[at + 4..at + 8].try_into().unwrap()) as usize;
        at += 12 + 8 * words;
    }
    rewrite(&bitmap, |b| {
        b[at + 6 + 4..at + 6 + 8].copy_from_slice(&0x7fff_fff0u32.to_be_bytes())
    });
    let run = repo.packd(
        &[
            "rev-list",
            "--use-bitmap-index",
            "--count",
            "--objects",
            "--all",
        ],
        None,
    );
    assert!(!run.success(), "{}", run.out());
    assert_eq!(run.code(), Some(128));
    let name = bitmap.file_name().unwrap().to_string_lossy().to_string();
    assert!(run.err().contains(&name), "{}", run.err());
    assert!(!run.err().contains("panicked"), "{}", run.err());
}

#[test]
fn lines_equal_gits_with_names() {
    // Not only the ids: tags given by --all/--tags print under their short names, trees and
    // blobs under their paths (root trees under an empty one).
    let sb = Sandbox::new();
    let repo = history(&sb);
    repo.git(&["-c", "repack.writeBitmaps=false", "repack", "-adq"]);
    for query in [
        &["--objects", "--all", "--not", "main~4"][..],
        &["--objects", "--tags", "--not", "main~12"],
        &["--objects", "topic", "v1", "--not", "main~2"],
    ] {
        let mut args = vec!["rev-list"];
        args.extend_from_slice(query);
        let lines = |b: Vec<u8>| {
            let mut v: Vec<String> = String::from_utf8(b)
                .unwrap()
                .lines()
                .map(str::to_string)
                .collect();
            v.sort();
            v
        };
        let expected = lines(repo.git(&args));
        let got = lines(repo.packd(&args, None).assert_success().stdout.clone());
        assert_eq!(expected, got, "rev-list {query:?}");
    }
}

/// A fill-in walk of many commits (git bitmaps every one of the newest 100 commits, then only
/// some): the tree walk starts from many commits' trees, and the rank index is still being
/// built while the commits are walked. Both with git's pack alone and with a `.rev`, the
/// answers must be git's.
#[test]
fn long_fill_in_walks_match_git() {
    let sb = Sandbox::new();
    let repo = sb.init_bare("long.git");
    let mut stream = String::new();
    for i in 0..700 {
        stream.push_str(&format!(
            "commit refs/heads/main\nmark :{}\ncommitter C <c@example.com> {} +0000\ndata 2\nc\n",
            i + 1,
            1_600_000_000 + i
        ));
        if i > 0 {
            stream.push_str(&format!("from :{i}\n"));
        }
        let content = format!("{i}\n");
        stream.push_str(&format!(
            "M 100644 inline d{}/e{}/f{}.txt\ndata {}\n{content}\n",
            i % 7,
            i % 3,
            i % 13,
            content.len()
        ));
    }
    repo.fast_import(stream.as_bytes());
    for rev in [false, true] {
        let write_rev = format!("pack.writeReverseIndex={rev}");
        repo.git(&["-c", &write_rev, "repack", "-adbq"]);
        let mut longest = 0;
        for tip in ["main~200", "main~300", "main~450"] {
            for query in [vec![tip], vec![tip, "--not", "main~520"]] {
                let mut args = vec!["rev-list", "--objects", "--use-bitmap-index"];
                args.extend(&query);
                let expected = common::sorted_ids(&repo.git(&args));
                let got =
                    common::sorted_ids(repo.packd(&args, None).assert_success().out().as_bytes());
                assert!(!expected.is_empty());
                assert!(
                    expected == got,
                    "rev-list {query:?} (.rev: {rev}) differs from git's"
                );
            }
            let run = packd_debug(
                &repo,
                &[
                    "rev-list",
                    "--objects",
                    "--count",
                    "--use-bitmap-index",
                    tip,
                ],
            );
            let err = run.assert_success().err();
            let walked = err
                .lines()
                .filter_map(|l| l.split(" commits and ").next()?.rsplit(' ').next())
                .filter_map(|n| n.parse::<usize>().ok())
                .max()
                .unwrap_or(0);
            longest = longest.max(walked);
        }
        // Walks of this many commits once split their trees over two threads; the test still
        // asks for long walks, which also overlap the rank index's building.
        assert!(
            longest >= 16,
            "no query walked 16 commits (.rev: {rev}), a long fill-in walk went untested"
        );
    }
}
