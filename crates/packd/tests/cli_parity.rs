//! packd's command line against git's on the same repository: revision syntax (ranges,
//! symmetric differences, `^rev`, `~N`, `^N`, `^@`, `^!`, `^-N`) in `packd rev-list` and on
//! `packd pack-objects`' stdin, usage errors (129), errors for names that resolve to nothing
//! (128, git's words), and a reader that goes away (killed by SIGPIPE without a word, as git).

mod common;

use common::*;
use std::io::{BufRead, BufReader};
use std::os::unix::process::ExitStatusExt;
use std::process::{Command, Stdio};

/// main: c1..c6 with a merge of `side` (two commits from c2) at c5; `other` from c4; an
/// annotated tag v1 on c3; a lightweight tag on side.
fn history(sb: &Sandbox) -> Repo {
    let repo = sb.init("src");
    let mut cmd = Command::new("sh");
    apply_env(&mut cmd, &repo.home);
    cmd.current_dir(&repo.path).arg("-c").arg(
        r#"
        set -e
        c() { echo "$1" > "$1"; git add "$1"; git commit -q -m "$1"; }
        c c1; c c2
        git checkout -q -b side; c s1; c s2; git tag light
        git checkout -q main; c c3; git tag -a v1 -m v1; c c4
        git checkout -q -b other; c o1
        git checkout -q main; git merge -q --no-ff -m c5 side; c c6
        "#,
    );
    run_cmd(cmd, None, GIT_TIMEOUT).assert_success();
    repo
}

/// `git rev-list ARGS` and `packd rev-list ARGS` in `repo`.
fn both_rev_lists(repo: &Repo, args: &[&str]) -> (Run, Run) {
    let mut git_args = vec!["rev-list"];
    git_args.extend(args);
    let git = repo.git_run(&git_args, None);
    let packd = repo.packd(&git_args, None);
    (git, packd)
}

#[test]
fn rev_list_reads_gits_revision_syntax() {
    let sb = Sandbox::new();
    let repo = history(&sb);
    let cases: &[&[&str]] = &[
        &["main~3..main"],
        &["main..other"],
        &["other..main"],
        &["..other"],
        &["other.."],
        &["side...main"],
        &["other...side"],
        &["main...other"],
        &["--count", "other...side"],
        &["^main~2", "main"],
        &["main", "^HEAD^^"],
        &["main~1^2"],
        &["main~1^2~1"],
        &["main^@"],
        &["main~1^@"],
        &["main~1^!"],
        &["main~1^-"],
        &["main~1^-2"],
        &["v1..main"],
        &["v1...other"],
        &["--objects", "main~2..main"],
        &["--objects", "v1..other"],
        &["--objects", "side...other"],
        &["main", "--not", "side", "other~1..other"],
        &["--not", "main~3..main", "--not", "other"],
        &["--all", "^main~1"],
        &["light..main", "^v1"],
        &["@~2..@"],
        &["other", "^@"],
        &["--count", "..."],
    ];
    for args in cases {
        let (git, packd) = both_rev_lists(&repo, args);
        git.assert_success();
        packd.assert_success();
        assert!(
            !git.stdout.is_empty() || args.contains(&"--count"),
            "{args:?}"
        );
        assert_eq!(
            sorted_lines(&packd.stdout),
            sorted_lines(&git.stdout),
            "rev-list {args:?}: packd\n{}git\n{}",
            packd.out(),
            git.out()
        );
    }
}

#[test]
fn rev_list_errors_are_gits() {
    let sb = Sandbox::new();
    let repo = history(&sb);
    // Usage errors: git's exit code, the usage on stderr, nothing on stdout.
    for args in [
        &[][..],
        &["--count"],
        &["--not"],
        &["--no-such-option", "main"],
    ] {
        let (git, packd) = both_rev_lists(&repo, args);
        assert_eq!(git.code(), Some(129), "git {args:?}");
        assert_eq!(packd.code(), Some(129), "packd {args:?}: {}", packd.err());
        assert!(packd.stdout.is_empty());
        assert!(
            packd.err().starts_with("usage: packd rev-list"),
            "{}",
            packd.err()
        );
    }
    // Names that resolve to nothing: 128 and git's message, word for word.
    for args in [
        &["nope"][..],
        &["^nope", "main"],
        &["^main~2..main"],
        &["main", "nope..main"],
        &["main...nope"],
        &["main:c1...main"],
        &["main~1^-3"],
    ] {
        let (git, packd) = both_rev_lists(&repo, args);
        assert_eq!(git.code(), Some(128), "git {args:?}");
        assert_eq!(packd.code(), Some(128), "packd {args:?}");
        assert!(packd.stdout.is_empty());
        assert_eq!(packd.err(), git.err(), "{args:?}");
    }
    // Only excluded tips is a revision all the same, and --objects alone lists nothing
    // rather than show the usage: nothing listed, success.
    for args in [&["^main"][..], &["--objects"], &["--objects", "--not"]] {
        let (git, packd) = both_rev_lists(&repo, args);
        assert_eq!((git.code(), packd.code()), (Some(0), Some(0)), "{args:?}");
        assert!(git.stdout.is_empty() && packd.stdout.is_empty(), "{args:?}");
    }
}

/// The ids in the pack `bytes`, sorted, as git's index-pack and show-index read it.
fn pack_ids(sb: &Sandbox, name: &str, bytes: &[u8]) -> Vec<String> {
    let pack = sb.path().join(format!("{name}.pack"));
    std::fs::write(&pack, bytes).unwrap();
    sb.git_in(sb.path(), &["index-pack", pack.to_str().unwrap()]);
    let idx = std::fs::read(pack.with_extension("idx")).unwrap();
    let listed = sb.git_run_in(sb.path(), &["show-index"], Some(&idx));
    listed.assert_success();
    let mut ids: Vec<String> = listed
        .out()
        .lines()
        .map(|l| l.split(' ').nth(1).unwrap().to_string())
        .collect();
    ids.sort();
    ids
}

#[test]
fn pack_objects_reads_revisions_as_git_pack_objects_revs() {
    let sb = Sandbox::new();
    let repo = history(&sb);
    let inputs = [
        "HEAD~1\n",
        "main\n^HEAD^^\n",
        "main~3..main\n",
        "side...other\n",
        "other\n--not\nmain~2\n--not\nmain~1^@\n",
        "main~1^!\n",
        "v1..main\n",
    ];
    for (n, input) in inputs.iter().enumerate() {
        let git = repo.git_stdin(
            &["pack-objects", "--revs", "--stdout", "-q"],
            input.as_bytes(),
        );
        let packd = repo.packd(&["pack-objects"], Some(input.as_bytes()));
        packd.assert_success();
        assert_eq!(
            pack_ids(&sb, &format!("packd{n}"), &packd.stdout),
            pack_ids(&sb, &format!("git{n}"), &git),
            "pack-objects with {input:?}"
        );
    }
    for input in ["nope\n", "main\n^nope\n", "--bogus\n", "main:c1...main\n"] {
        let git = repo.git_run(
            &["pack-objects", "--revs", "--stdout", "-q"],
            Some(input.as_bytes()),
        );
        let packd = repo.packd(&["pack-objects"], Some(input.as_bytes()));
        assert_eq!(git.code(), Some(128), "git {input:?}");
        assert_eq!(packd.code(), Some(128), "packd {input:?}");
        let last = |r: &Run| r.err().lines().last().unwrap_or("").to_string();
        assert_eq!(last(&packd), last(&git), "{input:?}");
    }
}

/// Runs `program args` with stdout piped, reads one line, closes the pipe and returns how the
/// program ended and what it wrote to stderr.
fn read_one_line_and_hang_up(
    repo: &Repo,
    program: &str,
    args: &[&str],
    stdin: &[u8],
) -> (std::process::ExitStatus, String) {
    let mut cmd = Command::new(program);
    apply_env(&mut cmd, &repo.home);
    cmd.current_dir(&repo.path)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().unwrap();
    {
        use std::io::Write;
        let mut input = child.stdin.take().unwrap();
        input.write_all(stdin).unwrap();
    }
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut line = Vec::new();
    out.read_until(b'\n', &mut line).unwrap();
    assert!(!line.is_empty());
    drop(out);
    let output = child.wait_with_output().unwrap();
    (
        output.status,
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

#[test]
fn a_reader_that_goes_away_ends_packd_as_it_ends_git() {
    let sb = Sandbox::new();
    let repo = sb.init("big");
    // Far more output than a pipe holds (64 KiB): the writer must meet the closed pipe.
    let mut fi = FastImport::new();
    let mut files = Vec::new();
    for i in 0..4000 {
        files.push(inline(&format!("f{i}"), format!("{i}\n")));
    }
    fi.commit("refs/heads/main", None, "many", &files);
    repo.fast_import(&fi.finish());

    let names: String = (0..4000).map(|i| format!("main:f{i}\n")).collect();
    let cases: [(&[&str], &[u8]); 3] = [
        (&["rev-list", "--objects", "--all"], b""),
        (&["cat-file", "--batch-all-objects", "--batch-check"], b""),
        (&["cat-file", "--batch"], names.as_bytes()),
    ];
    for (args, stdin) in cases {
        let (git, git_err) = read_one_line_and_hang_up(&repo, "git", args, stdin);
        let (packd, packd_err) = read_one_line_and_hang_up(&repo, PACKD, args, stdin);
        assert_eq!(git.signal(), Some(libc_sigpipe()), "git {args:?}: {git:?}");
        assert_eq!(
            packd.signal(),
            git.signal(),
            "packd {args:?}: {packd:?}, {packd_err}"
        );
        assert_eq!(packd_err, git_err, "{args:?}");
    }
}

/// SIGPIPE's number on Linux.
fn libc_sigpipe() -> i32 {
    13
}

#[test]
fn usage_errors_exit_as_gits() {
    let sb = Sandbox::new();
    let repo = history(&sb);
    // (git's arguments, packd's): the same mistake made to both.
    let cases: [(&[&str], &[&str]); 6] = [
        (
            &["index-pack", "--no-such-option"],
            &["index-pack", "--no-such-option"],
        ),
        (&["cat-file"], &["cat-file"]),
        (
            &["cat-file", "--batch", "main"],
            &["cat-file", "--batch", "main"],
        ),
        (&["upload-pack"], &["upload-pack"]),
        (
            &["receive-pack", "--no-such-option", "."],
            &["receive-pack", "--no-such-option", "."],
        ),
        (&["no-such-command"], &["no-such-command"]),
    ];
    for (git_args, packd_args) in cases {
        let git = repo.git_run(git_args, None);
        let packd = repo.packd(packd_args, None);
        assert!(
            matches!(git.code(), Some(129) | Some(1)),
            "git {git_args:?}: {:?}",
            git.code()
        );
        assert_eq!(
            packd.code(),
            git.code(),
            "packd {packd_args:?}: {}",
            packd.err()
        );
        assert!(packd.stdout.is_empty(), "{packd_args:?}");
        assert!(!packd.stderr.is_empty(), "{packd_args:?}");
    }
    for args in [&["--help"][..], &["--version"], &["cat-file", "--help"]] {
        let packd = repo.packd(args, None);
        assert_eq!(packd.code(), Some(0), "{args:?}");
        assert!(!packd.stdout.is_empty(), "{args:?}");
    }
}
