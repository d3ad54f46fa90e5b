//! Finding the repository: -C, the current directory (work tree root and subdirectories, bare
//! repositories), .git files (separate git dirs, linked worktrees), nested repositories; and the
//! clear refusal of SHA-256 repositories and of missing directories.

mod common;
use common::*;
use std::path::Path;

/// A non-bare repository with two commits and nested directories.
fn work_tree_repo(sb: &Sandbox, name: &str) -> Repo {
    let repo = sb.init(name);
    let mut fi = FastImport::new();
    fi.commit(
        "refs/heads/main",
        None,
        "one\n",
        &[inline("a/b/c.txt", "c\n"), inline("top.txt", "top\n")],
    );
    fi.commit(
        "refs/heads/main",
        None,
        "two\n",
        &[inline("top.txt", "top 2\n")],
    );
    repo.fast_import(&fi.finish());
    repo.git(&["checkout", "-q", "-f", "main"]);
    assert!(repo.path.join("a/b/c.txt").exists());
    repo
}

/// Runs `cat-file ARGS` with git and packd, both with current directory `cwd` and `pre` before
/// the subcommand (e.g. ["-C", "x"]); requires the same success and stdout.
fn compare_in(sb: &Sandbox, cwd: &Path, pre: &[&str], args: &[&str]) {
    let mut full: Vec<&str> = pre.to_vec();
    full.push("cat-file");
    full.extend_from_slice(args);
    let git = sb.git_run_in(cwd, &full, None);
    let packd = sb.packd_in(cwd, &full, None);
    packd.assert_no_crash();
    let what = format!("(in {}) packd {}", cwd.display(), full.join(" "));
    assert_eq!(
        git.success(),
        packd.success(),
        "{what}: git success={} packd success={}\ngit stderr: {}\npackd stderr: {}",
        git.success(),
        packd.success(),
        git.err(),
        packd.err()
    );
    assert_same_bytes(&what, &git.stdout, &packd.stdout);
}

#[test]
fn work_tree_root_and_subdirectories() {
    let sb = Sandbox::new();
    let repo = work_tree_repo(&sb, "wt");
    for dir in ["", "a", "a/b"] {
        let cwd = repo.path.join(dir);
        compare_in(&sb, &cwd, &[], &["-p", "HEAD"]);
        compare_in(&sb, &cwd, &[], &["-t", "main"]);
        let git = sb.git_run_in(&cwd, &["cat-file", "-p", "HEAD"], None);
        assert!(git.success(), "git itself works from {dir:?}");
    }
}

#[test]
fn dash_c_options() {
    let sb = Sandbox::new();
    let repo = work_tree_repo(&sb, "wt");
    // Absolute -C to a subdirectory of a work tree, from outside.
    let sub = repo.path.join("a/b");
    compare_in(
        &sb,
        sb.path(),
        &["-C", sub.to_str().unwrap()],
        &["-p", "HEAD"],
    );
    // Relative -C from the sandbox, and chained -C.
    compare_in(&sb, sb.path(), &["-C", "wt/a"], &["-p", "HEAD"]);
    compare_in(&sb, sb.path(), &["-C", "wt", "-C", "a/b"], &["-p", "HEAD"]);
    // Relative -C from inside the work tree.
    compare_in(&sb, &repo.path.join("a"), &["-C", "b"], &["-p", "HEAD"]);
    // -C to somewhere that is no repository: both fail.
    let empty = sb.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    compare_in(&sb, sb.path(), &["-C", "empty"], &["-p", "HEAD"]);
}

#[test]
fn bare_repository_and_its_subdirectories() {
    let sb = Sandbox::new();
    let repo = simple_repo(&sb, "bare.git", 3, 5);
    compare_in(&sb, &repo.path, &[], &["-p", "HEAD"]);
    compare_in(&sb, &repo.path.join("refs/heads"), &[], &["-p", "HEAD"]);
    compare_in(&sb, &repo.path.join("objects"), &[], &["-t", "main"]);
    compare_in(&sb, sb.path(), &["-C", "bare.git"], &["-p", "v1"]);
}

#[test]
fn separate_git_dir_via_git_file() {
    let sb = Sandbox::new();
    let src = simple_repo(&sb, "src.git", 4, 5);
    sb.git_in(
        sb.path(),
        &["init", "-q", "--separate-git-dir", "store.git", "wt"],
    );
    let wt = sb.path().join("wt");
    assert!(wt.join(".git").is_file(), "expected a .git file");
    let wt_repo = Repo {
        path: wt.clone(),
        git_dir: sb.path().join("store.git"),
        home: sb.home.clone(),
    };
    wt_repo.git(&[
        "fetch",
        "-q",
        "--update-head-ok",
        src.path.to_str().unwrap(),
        "main:main",
    ]);
    wt_repo.git(&["checkout", "-q", "-f", "main"]);
    std::fs::create_dir_all(wt.join("x/y")).unwrap();
    compare_in(&sb, &wt, &[], &["-p", "HEAD"]);
    compare_in(&sb, &wt.join("x/y"), &[], &["-p", "HEAD"]);
    compare_in(&sb, sb.path(), &["-C", "wt/x"], &["-p", "main"]);
}

#[test]
fn linked_worktree_has_its_own_head() {
    let sb = Sandbox::new();
    let repo = work_tree_repo(&sb, "main-wt");
    repo.git(&[
        "worktree",
        "add",
        "-q",
        "-b",
        "older",
        "../linked",
        "main~1",
    ]);
    let linked = sb.path().join("linked");
    assert!(linked.join(".git").is_file());
    let main_head = repo.git_str(&["rev-parse", "HEAD"]);
    let linked_head = sb.git_in(&linked, &["rev-parse", "HEAD"]);
    assert_ne!(main_head.as_bytes(), linked_head.trim_ascii());
    compare_in(&sb, &linked, &[], &["-p", "HEAD"]);
    compare_in(&sb, &linked.join("a"), &[], &["-p", "HEAD"]);
    compare_in(&sb, &linked, &[], &["-p", "main"]);
    compare_in(&sb, &linked, &[], &["-p", "older"]);
    compare_in(&sb, &repo.path, &[], &["-p", "HEAD"]);
}

#[test]
fn nested_repository_wins() {
    let sb = Sandbox::new();
    let outer = work_tree_repo(&sb, "outer");
    let inner_path = outer.path.join("a/inner");
    sb.git_in(&outer.path.join("a"), &["init", "-q", "inner"]);
    let inner = Repo {
        path: inner_path.clone(),
        git_dir: inner_path.join(".git"),
        home: sb.home.clone(),
    };
    let mut fi = FastImport::with_time(1_750_000_000);
    fi.commit(
        "refs/heads/main",
        None,
        "inner\n",
        &[inline("i.txt", "inner\n")],
    );
    inner.fast_import(&fi.finish());
    std::fs::create_dir_all(inner_path.join("deeper")).unwrap();
    compare_in(&sb, &inner_path.join("deeper"), &[], &["-p", "HEAD"]);
    compare_in(&sb, &outer.path.join("a/b"), &[], &["-p", "HEAD"]);
}

#[test]
fn not_a_repository() {
    let sb = Sandbox::new();
    let dir = sb.path().join("nothing/here");
    std::fs::create_dir_all(&dir).unwrap();
    let run = sb.packd_in(&dir, &["cat-file", "-t", "HEAD"], None);
    run.assert_no_crash();
    assert!(!run.success(), "packd outside any repository should fail");
    assert!(run.stdout.is_empty());
    assert!(!run.stderr.is_empty(), "an error message is expected");
}

#[test]
fn a_missing_directory_is_named_once_with_its_reason_once() {
    let sb = Sandbox::new();
    let missing = sb.path().join("missing");
    let run = sb.packd_in(
        sb.path(),
        &["-C", missing.to_str().unwrap(), "rev-list", "HEAD"],
        None,
    );
    run.assert_no_crash();
    assert!(!run.success());
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert_eq!(
        stderr.trim_end(),
        format!(
            "fatal: {}: No such file or directory (os error 2)",
            missing.display()
        ),
        "the cause is said once"
    );
}

#[test]
fn sha256_repository_is_refused_clearly() {
    let sb = Sandbox::new();
    sb.git_in(
        sb.path(),
        &["init", "-q", "--bare", "--object-format=sha256", "s256.git"],
    );
    let repo = Repo {
        path: sb.path().join("s256.git"),
        git_dir: sb.path().join("s256.git"),
        home: sb.home.clone(),
    };
    let mut fi = FastImport::new();
    fi.commit("refs/heads/main", None, "sha256\n", &[inline("f", "x\n")]);
    repo.fast_import(&fi.finish());
    let head = repo.git_str(&["rev-parse", "HEAD"]);
    assert_eq!(head.len(), 64);
    let blob =
        String::from_utf8(repo.git_stdin(&["hash-object", "-w", "--stdin"], b"loose\n")).unwrap();
    let cases: Vec<(Vec<&str>, Option<Vec<u8>>)> = vec![
        (vec!["cat-file", "-t", "HEAD"], None),
        (vec!["cat-file", "-p", &head], None),
        (vec!["cat-file", "-e", blob.trim()], None),
        (
            vec!["cat-file", "--batch-check"],
            Some(lines_input(&[&head])),
        ),
        (vec!["cat-file", "--batch-all-objects", "--batch"], None),
    ];
    for (args, stdin) in cases {
        let run = repo.packd(&args, stdin.as_deref());
        run.assert_no_crash();
        assert!(
            !run.success(),
            "packd {args:?} on a sha256 repository should fail"
        );
        assert!(
            run.err().to_lowercase().contains("sha256")
                || run.err().to_lowercase().contains("sha-256"),
            "packd {args:?}: the error should mention sha256, got: {}",
            run.err()
        );
    }
    // From a subdirectory too.
    let run = sb.packd_in(&repo.path.join("refs"), &["cat-file", "-t", "HEAD"], None);
    run.assert_no_crash();
    assert!(!run.success());
    assert!(
        run.err().to_lowercase().contains("sha256") || run.err().to_lowercase().contains("sha-256")
    );
}

#[test]
fn explicit_sha1_object_format_is_fine() {
    let sb = Sandbox::new();
    let repo = simple_repo(&sb, "v1.git", 6, 5);
    repo.git(&["config", "core.repositoryformatversion", "1"]);
    repo.git(&["config", "extensions.objectFormat", "sha1"]);
    compare_in(&sb, &repo.path, &[], &["-p", "HEAD"]);
    repo.compare_cat_file(&[], &["--batch-all-objects", "--batch-check"], None);
}
