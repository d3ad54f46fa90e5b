//! `Walker::commits_close`: whether the limited walk of a fetch's commits reads few enough,
//! on a history git's fast-import makes (a line of 60 commits, a side branch of 5 merged at
//! commit 40).

use packd_odb::{ObjectId, Repository, RepositoryOptions};
use packd_reach::walk::Walker;
use std::io::Write as _;
use std::process::{Command, Stdio};

/// A bare repository with `main`'s commits c1..c60 (one a second) and `side` (s1..s5, off
/// c35, merged by c40); returns it with the commits' ids by mark name.
fn history() -> (
    tempfile::TempDir,
    std::collections::HashMap<String, ObjectId>,
) {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("r.git");
    let git = |args: &[&str]| {
        let mut cmd = Command::new("git");
        cmd.args(args)
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("HOME", tmp.path());
        cmd
    };
    assert!(git(&["init", "-q", "--bare", dir.to_str().unwrap()])
        .status()
        .unwrap()
        .success());
    let mut stream = String::new();
    let commit = |stream: &mut String, branch: &str, mark: &str, t: u32, from: &[&str]| {
        *stream += &format!(
            "commit refs/heads/{branch}\nmark :{}\ncommitter C <c@c> {} +0000\ndata {}\n{mark}\n",
            mark_number(mark),
            1_700_000_000 + t,
            mark.len() + 1
        );
        for (i, f) in from.iter().enumerate() {
            let verb = if i == 0 { "from" } else { "merge" };
            *stream += &format!("{verb} :{}\n", mark_number(f));
        }
        *stream += &format!("M 100644 inline f\ndata {}\n{mark}\n\n", mark.len() + 1);
    };
    for i in 1..=35 {
        let parent = format!("c{}", i - 1);
        let from: Vec<&str> = if i == 1 { vec![] } else { vec![&parent] };
        commit(&mut stream, "main", &format!("c{i}"), i, &from);
    }
    for i in 1..=5 {
        let parent = if i == 1 {
            "c35".to_string()
        } else {
            format!("s{}", i - 1)
        };
        commit(&mut stream, "side", &format!("s{i}"), 35 + i, &[&parent]);
    }
    for i in 36..=60 {
        let parent = format!("c{}", i - 1);
        let from: Vec<&str> = if i == 40 {
            vec![&parent, "s5"]
        } else {
            vec![&parent]
        };
        commit(&mut stream, "main", &format!("c{i}"), 5 + i, &from);
    }
    let marks = tmp.path().join("marks");
    let mut child = git(&[
        "-C",
        dir.to_str().unwrap(),
        "fast-import",
        "--quiet",
        &format!("--export-marks={}", marks.display()),
    ])
    .stdin(Stdio::piped())
    .spawn()
    .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(stream.as_bytes())
        .unwrap();
    assert!(child.wait().unwrap().success());
    let mut ids = std::collections::HashMap::new();
    for line in std::fs::read_to_string(&marks).unwrap().lines() {
        let (mark, hex) = line.split_once(' ').unwrap();
        let n: u32 = mark.trim_start_matches(':').parse().unwrap();
        let name = if n > 1000 {
            format!("s{}", n - 1000)
        } else {
            format!("c{n}")
        };
        ids.insert(name, ObjectId::from_hex(hex).unwrap());
    }
    (tmp, ids)
}

/// The fast-import mark of a commit name: c<i> is i, s<i> is 1000 + i.
fn mark_number(name: &str) -> u32 {
    let n: u32 = name[1..].parse().unwrap();
    if name.starts_with('s') {
        1000 + n
    } else {
        n
    }
}

#[test]
fn wants_near_the_haves_are_close_and_far_ones_are_not() {
    let (tmp, ids) = history();
    let repo = Repository::open(&tmp.path().join("r.git"), &RepositoryOptions::default()).unwrap();
    let walker = Walker::new(&repo);
    let id = |n: &str| ids[n];
    // One commit behind: the tip, its parent and a few of slop.
    assert!(walker
        .commits_close(&[id("c60")], &[id("c59")], 10)
        .unwrap());
    // Across the merge: c41..c36 and the side branch, within 20.
    assert!(walker
        .commits_close(&[id("c41")], &[id("c35")], 20)
        .unwrap());
    // 55 commits apart: more than 20 read, given up.
    assert!(!walker.commits_close(&[id("c60")], &[id("c5")], 20).unwrap());
    // No haves: the whole history, more than 20.
    assert!(!walker.commits_close(&[id("c60")], &[], 20).unwrap());
    assert!(walker.commits_close(&[id("c60")], &[], 100).unwrap());
}
