//! `packd import` and `packd export` against a real S3 server (versitygw on 127.0.0.1, started
//! by `packd-test-s3`): a repository git made (packs with a bitmap, a commit-graph, loose
//! objects, an annotated tag, a symbolic ref, a detached or symbolic HEAD) goes into a bucket
//! and comes back out as a repository that `git fsck --strict` passes, with the same refs, the
//! same HEAD, the same objects, byte-for-byte the same packs, indexes, bitmaps and graphs, and
//! its loose objects as one more pack. In the bucket the refs
//! are a reftable stack and HEAD is git's reftable placeholder. An import over a repository
//! already in the bucket, an export into a directory that is not empty, and an import of a
//! repository borrowing objects (alternates) are refused, changing nothing.

mod common;

use common::*;
use packd_test_s3::S3Server;
use std::path::Path;
use std::process::Command;

/// `packd ARGS` with the server's endpoint and keys in the AWS environment variables.
fn packd_s3(sb: &Sandbox, server: &S3Server, args: &[&str]) -> Run {
    let mut cmd = Command::new(PACKD);
    apply_env(&mut cmd, &sb.home);
    cmd.current_dir(sb.path())
        .env("AWS_ENDPOINT_URL", server.endpoint())
        .env("AWS_REGION", packd_test_s3::REGION)
        .env("AWS_ACCESS_KEY_ID", server.access_key_id())
        .env("AWS_SECRET_ACCESS_KEY", server.secret_access_key())
        .args(args);
    run_cmd(cmd, None, PACKD_TIMEOUT)
}

/// A repository with what an import must carry: two packs (one with a bitmap), a
/// commit-graph, loose objects, an annotated tag, a branch and a symbolic ref.
fn source_repo(sb: &Sandbox) -> Repo {
    let repo = simple_repo(sb, "src.git", 7, 30);
    repo.git(&["repack", "-adb", "-q"]);
    repo.git(&["commit-graph", "write", "--reachable"]);
    let mut gen = HistoryGen::new(8, 3, 20);
    let mut fi = FastImport::with_time(1_800_000_000);
    gen.commits(&mut fi, "refs/heads/side", 5, false);
    repo.fast_import(&fi.finish());
    // fast-import wrote a pack; loose objects too.
    let blob = repo.git_stdin(&["hash-object", "-w", "--stdin"], b"a loose blob\n");
    let blob = String::from_utf8(blob).unwrap().trim().to_string();
    repo.git(&["update-ref", "refs/loose/blob", &blob]);
    repo.git(&[
        "symbolic-ref",
        "refs/remotes/origin/HEAD",
        "refs/heads/side",
    ]);
    repo.git(&["pack-refs", "--all"]);
    repo.git(&["update-ref", "refs/heads/loose-branch", "refs/heads/main~3"]);
    assert!(repo.loose_count() > 0, "the source has loose objects");
    repo
}

/// Every file under `dir/objects` (its path there) with its SHA-1, sorted, but for
/// `info/packs` (dumb HTTP's list of packs, which `git update-server-info` derives: not
/// imported).
fn object_files(dir: &Path) -> Vec<(String, String)> {
    let root = dir.join("objects");
    let mut out = Vec::new();
    let mut dirs = vec![root.clone()];
    while let Some(d) = dirs.pop() {
        for entry in std::fs::read_dir(&d).unwrap().flatten() {
            let path = entry.path();
            if path.is_dir() {
                dirs.push(path);
            } else {
                let name = path.strip_prefix(&root).unwrap().display().to_string();
                if name == "info/packs" {
                    continue;
                }
                out.push((name, hex(&sha1(&std::fs::read(&path).unwrap()))));
            }
        }
    }
    out.sort();
    out
}

/// Whether `name` (under `objects/`) is a loose object's.
fn is_loose(name: &str) -> bool {
    name.len() == 41 && name.as_bytes()[2] == b'/'
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// What git says of a repository's refs, HEAD and objects.
fn git_view(sb: &Sandbox, dir: &Path) -> (String, String, Vec<Vec<u8>>) {
    let refs = sb.git_in(
        dir,
        &[
            "for-each-ref",
            "--format=%(objectname) %(objecttype) %(refname) %(symref) %(*objectname)",
        ],
    );
    let head = sb.git_in(dir, &["symbolic-ref", "HEAD"]);
    let objects = sb.git_in(dir, &["rev-list", "--objects", "--all"]);
    (
        String::from_utf8(refs).unwrap(),
        String::from_utf8(head).unwrap(),
        sorted_lines(&objects),
    )
}

#[test]
fn a_repository_goes_into_a_bucket_and_comes_back_out_as_git_made_it() {
    let sb = Sandbox::new();
    let server = S3Server::start();
    server.create_bucket("packd");
    let src = source_repo(&sb);
    let url = "s3://packd/repos/src.git";

    let import = packd_s3(&sb, &server, &["import", "src.git", url]);
    import.assert_success();
    assert!(import.out().contains("refs"), "{}", import.out());

    // In the bucket: git's layout, the refs as a reftable stack, HEAD git's placeholder.
    let in_bucket = server.bucket_dir("packd").join("repos/src.git");
    assert_eq!(
        std::fs::read(in_bucket.join("HEAD")).unwrap(),
        b"ref: refs/heads/.invalid\n"
    );
    let list = std::fs::read_to_string(in_bucket.join("reftable/tables.list")).unwrap();
    assert_eq!(list.lines().count(), 1, "{list}");
    let config = std::fs::read_to_string(in_bucket.join("config")).unwrap();
    assert!(config.contains("refStorage = reftable"), "{config}");
    assert!(!in_bucket.join("packed-refs").exists());

    let export = packd_s3(&sb, &server, &["export", url, "out.git"]);
    export.assert_success();
    let out = sb.path().join("out.git");
    let fsck = sb.git_run_in(&out, &["fsck", "--strict", "--no-dangling"], None);
    fsck.assert_success();
    assert_eq!(git_view(&sb, &out), git_view(&sb, &src.path));
    // The source's object files, byte for byte, but its loose objects: those came as one pack
    // (its .pack, .rev and .idx), and every object, unreachable ones too, is there.
    let (src_files, out_files) = (object_files(&src.path), object_files(&out));
    let src_not_loose: Vec<_> = src_files.iter().filter(|(n, _)| !is_loose(n)).collect();
    assert!(
        src_files.iter().any(|(n, _)| is_loose(n)),
        "the source had loose objects"
    );
    assert!(out_files.iter().all(|(n, _)| !is_loose(n)), "{out_files:?}");
    for file in &src_not_loose {
        assert!(out_files.contains(file), "{} missing or changed", file.0);
    }
    let extra: Vec<_> = out_files
        .iter()
        .filter(|f| !src_files.contains(f))
        .collect();
    assert_eq!(extra.len(), 3, "one pack of the loose objects: {extra:?}");
    let all = ["cat-file", "--batch-all-objects", "--batch-check"];
    assert_eq!(sb.git_in(&out, &all), sb.git_in(&src.path, &all));
    // The config is the repository's own again.
    assert_eq!(
        std::fs::read_to_string(out.join("config")).unwrap(),
        std::fs::read_to_string(src.path.join("config")).unwrap()
    );
    assert_eq!(
        sb.git_in(&out, &["symbolic-ref", "refs/remotes/origin/HEAD"]),
        b"refs/heads/side\n"
    );
    sb.git_in(&out, &["rev-list", "--test-bitmap", "main"]);
    sb.git_in(&out, &["commit-graph", "verify"]);
    // Nothing is left beside the exported repository.
    let beside: Vec<String> = std::fs::read_dir(sb.path())
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str().map(str::to_string))
        .filter(|n| n.contains("packd-export"))
        .collect();
    assert!(beside.is_empty(), "{beside:?}");
}

#[test]
fn a_detached_head_round_trips() {
    let sb = Sandbox::new();
    let server = S3Server::start();
    server.create_bucket("packd");
    let src = simple_repo(&sb, "src.git", 3, 8);
    let id = src.git_str(&["rev-parse", "main~2"]);
    std::fs::write(src.path.join("HEAD"), format!("{id}\n")).unwrap();
    packd_s3(&sb, &server, &["import", "src.git", "s3://packd/d.git"]).assert_success();
    packd_s3(&sb, &server, &["export", "s3://packd/d.git", "out.git"]).assert_success();
    let out = sb.path().join("out.git");
    assert_eq!(
        std::fs::read_to_string(out.join("HEAD")).unwrap(),
        format!("{id}\n")
    );
    sb.git_run_in(&out, &["fsck", "--strict"], None)
        .assert_success();
}

#[test]
fn imports_and_exports_that_would_overwrite_or_borrow_are_refused() {
    let sb = Sandbox::new();
    let server = S3Server::start();
    server.create_bucket("packd");
    let src = simple_repo(&sb, "src.git", 5, 6);
    let url = "s3://packd/r.git";
    packd_s3(&sb, &server, &["import", "src.git", url]).assert_success();
    let list = server
        .bucket_dir("packd")
        .join("r.git/reftable/tables.list");
    let before = std::fs::read(&list).unwrap();

    // A second import onto the same prefix: refused, the refs untouched.
    src.commit_on_main("more");
    let again = packd_s3(&sb, &server, &["import", "src.git", url]);
    assert!(!again.success());
    assert!(
        again.err().contains("a repository is there already"),
        "{}",
        again.err()
    );
    assert_eq!(std::fs::read(&list).unwrap(), before);

    // An export into a directory with something in it: refused, the directory untouched.
    std::fs::create_dir(sb.path().join("full")).unwrap();
    std::fs::write(sb.path().join("full/keep"), b"mine").unwrap();
    let export = packd_s3(&sb, &server, &["export", url, "full"]);
    assert!(!export.success());
    assert!(export.err().contains("is not empty"), "{}", export.err());
    assert_eq!(files_in(&sb.path().join("full")), vec!["keep".to_string()]);

    // An export of a prefix holding no repository.
    let none = packd_s3(&sb, &server, &["export", "s3://packd/none.git", "none.git"]);
    assert!(!none.success());
    assert!(none.err().contains("no repository there"), "{}", none.err());
    assert!(!sb.path().join("none.git").exists());

    // A repository with alternates: its objects are not all its own.
    sb.git_in(
        sb.path(),
        &["clone", "-q", "--bare", "--shared", "src.git", "shared.git"],
    );
    let shared = packd_s3(
        &sb,
        &server,
        &["import", "shared.git", "s3://packd/shared.git"],
    );
    assert!(!shared.success());
    assert!(shared.err().contains("alternates"), "{}", shared.err());
    assert!(!server.bucket_dir("packd").join("shared.git").exists());

    // A URL without a path in the bucket.
    let bad = packd_s3(&sb, &server, &["import", "src.git", "s3://packd"]);
    assert!(!bad.success());
    assert!(bad.err().contains("s3://BUCKET/PATH"), "{}", bad.err());
}
