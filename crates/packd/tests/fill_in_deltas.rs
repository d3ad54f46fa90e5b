//! Fill-in walks over trees stored as deltas of each other: a tree whose delta base the walk has
//! read is compared with it, and only the entries the base lacks are looked up. The answers
//! must still be git's, for histories where trees differ from their bases by an id, a mode, a
//! kind (a file become a directory), an added or removed entry, or a gitlink.

mod common;

use common::*;

/// A main line of 300 commits over wide directories (so that trees are large and git stores
/// most of them as deltas), and 40 pull-request refs forked from it, each changing a few entries
/// in the ways listed in the module doc. Packed with `repack -adf --window=50` and bitmaps: git
/// bitmaps some commits only, so queries from the pull-request tips take fill-in walks.
fn pull_request_history(sb: &Sandbox) -> Repo {
    let repo = sb.init_bare("prs.git");
    let mut s = String::new();
    let mut time = 1_600_000_000u64;
    let blob = |s: &mut String, mark: usize, content: &str| {
        s.push_str(&format!(
            "blob\nmark :{mark}\ndata {}\n{content}\n",
            content.len()
        ));
    };
    // Shared blobs for the pull requests (marks from 100000).
    for j in 0..20 {
        blob(&mut s, 100_000 + j, &format!("shared blob {j}\n"));
    }
    let path = |i: usize| match i % 3 {
        0 => format!("f{:03}", i % 120),
        1 => format!("d/g{:03}", i % 80),
        _ => format!("d/e/h{:03}", i % 40),
    };
    for i in 0..300usize {
        time += 60;
        s.push_str(&format!(
            "commit refs/heads/main\nmark :{}\ncommitter C <c@example.com> {time} +0000\ndata 2\nc\n",
            i + 1
        ));
        if i > 0 {
            s.push_str(&format!("from :{i}\n"));
            let content = format!("version {i} of {}\n", path(i));
            s.push_str(&format!(
                "M 100644 inline {}\ndata {}\n{content}\n",
                path(i),
                content.len()
            ));
        } else {
            for n in 0..240 {
                let content = format!("first version of {}\n", path(n));
                s.push_str(&format!(
                    "M 100644 inline {}\ndata {}\n{content}\n",
                    path(n),
                    content.len()
                ));
            }
        }
    }
    for k in 0..40usize {
        let fork = 60 + 6 * k;
        let r = format!("refs/pull/{k}/head");
        let shared = 100_000 + k % 20;
        for step in 0..3usize {
            time += 60;
            s.push_str(&format!(
                "commit {r}\ncommitter P <p@example.com> {time} +0000\ndata 3\npr\n"
            ));
            if step == 0 {
                s.push_str(&format!("from :{fork}\n"));
            }
            let target = path(k * 7 + 1);
            match (k % 5, step) {
                // The same path, another id.
                (0, _) => {
                    let content = format!("pr {k} step {step}\n");
                    s.push_str(&format!(
                        "M 100644 inline {target}\ndata {}\n{content}\n",
                        content.len()
                    ));
                }
                // The same id, then another mode.
                (1, 0) => s.push_str(&format!("M 100644 :{shared} {target}\n")),
                (1, _) => s.push_str(&format!(
                    "M {} :{shared} {target}\n",
                    if step == 1 { "100755" } else { "100644" }
                )),
                // A file becomes a directory of the same name, then a file again.
                (2, 0) => s.push_str(&format!("D {target}\nM 100644 :{shared} {target}/x\n")),
                (2, 1) => s.push_str(&format!("M 100644 :{shared} {target}/y\n")),
                (2, _) => s.push_str(&format!("D {target}\nM 100644 :{shared} {target}\n")),
                // Entries added and removed around the changed one.
                (3, _) => s.push_str(&format!(
                    "M 100644 :{shared} {target}-{step}\nD {}\n",
                    path(k * 7 + 4 + 3 * step)
                )),
                // A gitlink beside a changed file.
                (_, _) => s.push_str(&format!(
                    "M 160000 {:040x} d/sub{step}\nM 100644 :{} {target}\n",
                    k * 10 + step + 1,
                    100_000 + (k + step) % 20
                )),
            }
        }
    }
    repo.fast_import(s.as_bytes());
    repo
}

/// The debug log's count of trees compared with their delta base (`what` = "their delta
/// base") or with the last tree read at their path ("the last tree at their path"), summed over
/// the walks.
fn trees_against(err: &str, what: &str) -> usize {
    let marker = format!(" against {what}");
    err.lines()
        .filter_map(|l| {
            let before = l.split(&marker).next().filter(|b| b.len() < l.len())?;
            let n = before.rsplit([' ', '(']).next()?;
            let n = if n == "trees" {
                before.strip_suffix(" trees")?.rsplit([' ', '(']).next()?
            } else {
                n
            };
            n.parse::<usize>().ok()
        })
        .sum()
}

/// Repacks `repo` with `repack` (after `-adfbq`) and runs rev-list queries from pull-request
/// tips, with and without a `.rev`, asserting packd's answers are git's. Returns the trees
/// compared with their delta base and those compared with the last tree at their path.
fn queries_match_git(repo: &Repo, repack: &[&str]) -> (usize, usize) {
    let (mut against_base, mut by_path) = (0, 0);
    for rev in [false, true] {
        let write_rev = format!("pack.writeReverseIndex={rev}");
        let mut args = vec!["-c", &write_rev, "repack", "-adfbq"];
        args.extend(repack);
        repo.git(&args);
        for query in [
            vec!["--all"],
            vec!["--branches", "--not", "main~100"],
            vec!["refs/pull/3/head", "refs/pull/17/head", "--not", "main"],
            vec!["refs/pull/0/head", "refs/pull/1/head", "refs/pull/2/head"],
            vec![
                "refs/pull/5/head",
                "refs/pull/22/head",
                "refs/pull/39/head",
                "--not",
                "main~250",
            ],
        ] {
            let mut args = vec!["rev-list", "--objects", "--use-bitmap-index"];
            args.extend(&query);
            let expected = sorted_ids(&repo.git(&args));
            let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_packd"));
            apply_env(&mut cmd, &repo.home);
            cmd.env("PACKD_LOG", "packd_reach=debug");
            cmd.arg("-C").arg(&repo.path).args(&args);
            let run = run_cmd(cmd, None, std::time::Duration::from_secs(60));
            run.assert_success();
            let got = sorted_ids(run.out().as_bytes());
            assert!(!expected.is_empty());
            assert!(
                expected == got,
                "rev-list {query:?} (repack {repack:?}, .rev: {rev}): {} objects from git, {} from packd",
                expected.len(),
                got.len()
            );
            against_base += trees_against(&run.err(), "their delta base");
            by_path += trees_against(&run.err(), "the last tree at their path");
        }
        // And the whole count, without bitmaps on git's side.
        let plain = repo.git_str(&["rev-list", "--objects", "--all", "--count"]);
        let ours = repo
            .packd(
                &[
                    "rev-list",
                    "--objects",
                    "--all",
                    "--count",
                    "--use-bitmap-index",
                ],
                None,
            )
            .assert_success()
            .out();
        assert_eq!(plain.trim(), ours.trim(), "repack {repack:?}, .rev: {rev}");
    }
    (against_base, by_path)
}

#[test]
fn fill_in_walks_over_delta_trees_match_git() {
    let sb = Sandbox::new();
    let repo = pull_request_history(&sb);
    let (against_base, _) = queries_match_git(&repo, &["--window=50", "--depth=50"]);
    assert!(
        against_base > 0,
        "no tree was compared with its delta base: the test lost its point"
    );
}

/// Without deltas, every tree read after the first at its path is compared with the previous
/// one read there (the same directory in another commit), and the answers are still git's.
#[test]
fn fill_in_walks_compare_trees_with_the_last_at_their_path() {
    let sb = Sandbox::new();
    let repo = pull_request_history(&sb);
    let (against_base, by_path) = queries_match_git(&repo, &["--window=0"]);
    assert_eq!(against_base, 0, "a pack without deltas");
    assert!(
        by_path > 0,
        "no tree was compared with the last at its path: the test lost its point"
    );
}
