//! Fetches whose wants lie past the bitmap (pushed since the last repack), counted by
//! `packd pack-objects` and checked against git. With a have in the bitmapped pack, git's
//! answer (`rev-list --objects --use-bitmap-index`) is the set difference (`rev-list
//! --objects` of each side), and packd's must be too. With none, git walks and sends again
//! what only the haves' older commits hold; packd then walks as git does for commit wants
//! (the same objects as git), and counts tags of trees and blobs from the bitmap (the
//! difference: git's walk, with no commit to send, leaves out nothing the haves hold).
//!
//! The history: `main` (and `old`, its tip then) imported and repacked with a bitmap; then a
//! second import (a pack the bitmap does not cover) moves `main` on, forks `side`, and brings
//! back on `main` a version of a file only the bitmapped history holds and one only older
//! commits of the newer pack hold; loose annotated tags of `main`, of an older root tree and of
//! an older blob. Wants: branch tips and those tags; haves: `old` (on the bitmap) and `main~3`
//! (off it).

mod common;

use common::*;
use std::collections::BTreeSet;

type Ids = BTreeSet<String>;

/// The first word of each line.
fn id_set(out: &[u8]) -> Ids {
    String::from_utf8_lossy(out)
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .map(str::to_string)
        .collect()
}

/// `git rev-list --objects EXTRA... <wants> --not <haves>`.
fn rev_list(repo: &Repo, extra: &[&str], wants: &[String], haves: &[String]) -> Ids {
    let mut input = String::new();
    for w in wants {
        input.push_str(&format!("{w}\n"));
    }
    for h in haves {
        input.push_str(&format!("^{h}\n"));
    }
    let mut args = vec!["rev-list", "--objects"];
    args.extend_from_slice(extra);
    args.push("--stdin");
    id_set(&repo.git_stdin(&args, input.as_bytes()))
}

/// The objects of the pack `packd pack-objects` writes for `wants` and `haves`.
fn packd_sends(repo: &Repo, sb: &Sandbox, n: usize, wants: &[String], haves: &[String]) -> Ids {
    let mut input = String::new();
    for w in wants {
        input.push_str(&format!("{w}\n"));
    }
    for h in haves {
        input.push_str(&format!("^{h}\n"));
    }
    let run = repo.packd(&["pack-objects"], Some(input.as_bytes()));
    run.assert_no_crash().assert_success();
    let dest = sb.init_bare(&format!("dest-{n}"));
    let pack = sb.path().join(format!("sent-{n}.pack"));
    std::fs::write(&pack, &run.stdout).unwrap();
    let pack = pack.to_str().unwrap();
    dest.git(&["index-pack", pack]);
    let idx = pack.replace(".pack", ".idx");
    dest.git(&["verify-pack", &idx]);
    let listed = dest.git(&["verify-pack", "-v", &idx]);
    String::from_utf8_lossy(&listed)
        .lines()
        .filter_map(|l| {
            let mut words = l.split_whitespace();
            let id = words.next()?;
            let kind = words.next()?;
            matches!(kind, "commit" | "tree" | "blob" | "tag").then(|| id.to_string())
        })
        .collect()
}

/// Builds the repository: older history in a bitmapped pack, newer history in a pack the
/// bitmap does not cover, tags loose.
fn build(sb: &Sandbox) -> Repo {
    let repo = sb.init_bare("served");
    let mut gen = HistoryGen::new(0x5eed, 8, 30);
    let mut fi = FastImport::with_time(1_700_000_000);
    gen.commits(&mut fi, "refs/heads/main", 40, false);
    repo.fast_import(&fi.finish());
    repo.git(&["update-ref", "refs/heads/old", "main"]);
    repo.git(&["repack", "-adbq"]);
    let bitmapped = repo.packs();
    assert_eq!(bitmapped.len(), 1);
    assert!(bitmapped[0].with_extension("bitmap").exists());

    // A version of src/file1.txt that only the bitmapped history holds, to bring back.
    let from_bitmap = repo.git_str(&["rev-parse", "old~5:src/file1.txt"]);
    let mut fi = FastImport::with_time(1_700_100_000);
    gen.commits(&mut fi, "refs/heads/main", 6, true);
    fi.commit(
        "refs/heads/main",
        None,
        "notes, first version\n",
        &[inline("notes.txt", "version 1\n")],
    );
    gen.commits(&mut fi, "refs/heads/main", 6, false);
    fi.commit(
        "refs/heads/main",
        None,
        "notes, second version\n",
        &[inline("notes.txt", "version 2\n")],
    );
    fi.commit(
        "refs/heads/main",
        None,
        "a new src/file1.txt\n",
        &[inline("src/file1.txt", "rewritten\n")],
    );
    gen.commits(&mut fi, "refs/heads/main", 8, false);
    fi.reset("refs/heads/side", "refs/heads/main^0");
    gen.commits(&mut fi, "refs/heads/side", 4, false);
    // Back on main: the bitmapped version of src/file1.txt, then the first notes (the newer
    // pack's), then one more commit.
    fi.commit(
        "refs/heads/main",
        None,
        "bring back an old src/file1.txt\n",
        &[Change::Ref {
            mode: "100644",
            path: "src/file1.txt".into(),
            dataref: from_bitmap,
        }],
    );
    fi.commit(
        "refs/heads/main",
        None,
        "bring back the first notes\n",
        &[inline("notes.txt", "version 1\n")],
    );
    gen.commits(&mut fi, "refs/heads/main", 1, false);
    repo.fast_import(&fi.finish());
    assert_eq!(
        repo.packs().len(),
        2,
        "the newer history is a pack of its own"
    );

    // Tags (loose): of a commit; of the root tree of the first notes' commit and of the first
    // notes' blob, which main~3 has only in its history.
    let first_notes = repo.git_str(&["rev-parse", "main^{/notes, first version}"]);
    repo.git(&["tag", "-a", "-m", "a commit", "v-commit", "main"]);
    let tree = format!("{first_notes}^{{tree}}");
    repo.git(&["tag", "-a", "-m", "an old tree", "v-tree", &tree]);
    let blob = format!("{first_notes}:notes.txt");
    repo.git(&["tag", "-a", "-m", "an old blob", "v-blob", &blob]);
    repo
}

/// What a case's answer must be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Expect {
    /// The set difference (git's answer with a have in its bitmapped pack, which packd's
    /// bitmap gives; also packd's for tags of trees and blobs, where git's walk sends more).
    Difference,
    /// git's answer, `rev-list --objects --use-bitmap-index`: with no have in the bitmapped
    /// pack git walks, and leaves out only what the edge commits' trees hold.
    Git,
}

#[test]
fn a_fetch_past_the_bitmap_sends_what_git_sends() {
    let sb = Sandbox::new();
    let repo = build(&sb);
    let r = |rev: &str| repo.git_str(&["rev-parse", "--verify", rev]);
    let tree_of = |rev: &str| -> Ids {
        String::from_utf8(repo.git(&["ls-tree", "-r", "-t", rev]))
            .unwrap()
            .lines()
            .filter_map(|l| l.split_whitespace().nth(2).map(str::to_string))
            .collect()
    };
    // The fixture makes the cases it means to: what main and the tags bring back is not in
    // main~3's root tree (only in its history).
    let have_root = tree_of("main~3");
    for (what, rev) in [
        ("the tagged tree", "v-tree^{}"),
        ("the tagged blob", "v-blob^{}"),
        (
            "the bitmapped blob main brings back",
            "main~2:src/file1.txt",
        ),
        ("the newer blob main brings back", "main~1:notes.txt"),
    ] {
        assert!(
            !have_root.contains(&r(rev)),
            "{what} is in main~3's root tree"
        );
    }

    use Expect::*;
    let cases: Vec<(&str, Vec<&str>, Vec<&str>, Expect)> = vec![
        (
            "branch tips, have off the bitmap",
            vec!["main", "side"],
            vec!["main~3"],
            Git,
        ),
        (
            "branch tips, have on the bitmap",
            vec!["main", "side"],
            vec!["old"],
            Difference,
        ),
        (
            "branch tips, haves on and off",
            vec!["main", "side"],
            vec!["old", "main~3"],
            Difference,
        ),
        (
            "a tag of a commit, have off",
            vec!["v-commit"],
            vec!["main~3"],
            Git,
        ),
        (
            "a tag of a commit, have on",
            vec!["v-commit"],
            vec!["old"],
            Difference,
        ),
        (
            "tags of a tree and a blob, have off",
            vec!["v-tree", "v-blob"],
            vec!["main~3"],
            Difference,
        ),
        (
            "tags of a tree and a blob, have on",
            vec!["v-tree", "v-blob"],
            vec!["old"],
            Difference,
        ),
        (
            "tags and branches, have off",
            vec!["main", "v-tree", "v-blob"],
            vec!["main~3"],
            Difference,
        ),
    ];
    for (n, (name, wants, haves, expect)) in cases.into_iter().enumerate() {
        let wants: Vec<String> = wants.iter().map(|w| r(w)).collect();
        let haves: Vec<String> = haves.iter().map(|h| r(h)).collect();
        let reach = rev_list(&repo, &[], &wants, &[]);
        let had = rev_list(&repo, &[], &haves, &[]);
        let difference: Ids = reach.difference(&had).cloned().collect();
        let git = rev_list(&repo, &["--use-bitmap-index"], &wants, &haves);
        let expected = match expect {
            Difference => &difference,
            Git => &git,
        };
        if haves.contains(&r("old")) {
            assert_eq!(
                git, difference,
                "{name}: git's bitmap answer is the set difference"
            );
        } else {
            // git's walk sends again what only the have's history holds.
            assert!(
                git.is_superset(&difference) && git != difference,
                "{name}: git's walk"
            );
        }
        let sent = packd_sends(&repo, &sb, n, &wants, &haves);
        let extra: Ids = sent.difference(expected).cloned().collect();
        let lacks: Ids = expected.difference(&sent).cloned().collect();
        assert!(
            extra.is_empty() && lacks.is_empty(),
            "{name}: {expect:?} expected; sends {} more: {extra:?}; lacks {lacks:?}",
            extra.len()
        );
    }
}
