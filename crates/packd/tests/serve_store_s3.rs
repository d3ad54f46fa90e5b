//! `packd serve --store s3://BUCKET/PREFIX` against a real S3 server (versitygw on 127.0.0.1,
//! started by `packd-test-s3`): a repository `packd import` put into the bucket is served to
//! the real git client over HTTP and git:// as the same repository on a local disk is:
//! `ls-remote` (protocol v0 and v2) says what git's says of the original, mirror, single-branch,
//! shallow and partial clones and an incremental fetch get every object they ask for (`git
//! fsck --strict`), the refs and the counts of the original. A repository imported while the
//! server runs is served at once; a name that is not in the bucket is not found; pushes are
//! refused and change nothing in the bucket. The server keeps nothing but derived data on
//! its local disk.

mod common;
mod serve_support;

use common::*;
use packd_test_s3::S3Server;
use serve_support::{Fixture, Server};
use std::ffi::OsString;
use std::path::Path;
use std::process::Command;

/// The AWS variables that point packd at `server`.
fn s3_env(server: &S3Server) -> Vec<(String, String)> {
    vec![
        ("AWS_ENDPOINT_URL".into(), server.endpoint()),
        ("AWS_REGION".into(), packd_test_s3::REGION.into()),
        ("AWS_ACCESS_KEY_ID".into(), server.access_key_id().into()),
        (
            "AWS_SECRET_ACCESS_KEY".into(),
            server.secret_access_key().into(),
        ),
    ]
}

/// `packd import DIR URL`, which must succeed.
fn import(f: &Fixture, server: &S3Server, dir: &Path, url: &str) {
    let mut cmd = Command::new(PACKD);
    apply_env(&mut cmd, &f.sandbox.home);
    cmd.envs(s3_env(server)).arg("import").arg(dir).arg(url);
    run_cmd(cmd, None, PACKD_TIMEOUT).assert_success();
}

/// A bucket holding the fixture's repository (bitmapped) at `repos/repo.git`, and a packd
/// serving `s3://packd/repos` with `extra` options.
fn served(f: &Fixture, extra: &[&str]) -> (S3Server, Server) {
    f.repo.git(&["repack", "-adbq"]);
    let s3 = S3Server::start();
    s3.create_bucket("packd");
    import(f, &s3, &f.repo.path, "s3://packd/repos/repo.git");
    let cache = f.sandbox.path().join("store-cache");
    let mut args: Vec<OsString> = vec![
        "--store".into(),
        "s3://packd/repos".into(),
        "--cache-dir".into(),
        cache.into(),
    ];
    args.extend(extra.iter().map(OsString::from));
    let server = Server::start_with(&f.sandbox, &args, &s3_env(&s3), "info");
    assert!(f.sandbox.path().join("store-cache/repos").is_dir());
    (s3, server)
}

#[test]
fn clones_and_fetches_from_a_bucket_get_what_the_local_repository_holds() {
    let f = Fixture::new();
    let (_s3, server) = served(&f, &[]);
    let local = f.repo.path.to_str().unwrap().to_string();
    for version in ["0", "2"] {
        let expected = f.ls_remote(version, &local);
        assert!(expected.contains("refs/tags/v1.0^{}"), "{expected}");
        assert_eq!(
            f.ls_remote(version, &server.http_url("repo.git")),
            expected,
            "ls-remote v{version} over HTTP"
        );
        assert_eq!(
            f.ls_remote(version, &server.http_url("repo")),
            expected,
            "ls-remote v{version}, no .git"
        );
        assert_eq!(
            f.ls_remote(version, &server.git_url("repo.git")),
            expected,
            "ls-remote v{version} over git://"
        );
        f.mirror_clone(
            version,
            &server.http_url("repo.git"),
            &format!("mirror-v{version}"),
        );
        f.clone_main(
            version,
            &server.http_url("repo.git"),
            &format!("main-v{version}"),
        );
    }
    f.mirror_clone("2", &server.git_url("repo.git"), "mirror-daemon");

    // Shallow: one commit, complete to git.
    let shallow = f.sandbox.path().join("shallow");
    f.git(&[
        "clone",
        "-q",
        "--bare",
        "--depth",
        "1",
        &server.http_url("repo.git"),
        shallow.to_str().unwrap(),
    ])
    .assert_success();
    f.fsck(&shallow);
    assert_eq!(
        f.sandbox
            .git_run_in(&shallow, &["rev-list", "--count", "main"], None)
            .out()
            .trim(),
        "1"
    );
    assert_eq!(
        f.sandbox
            .git_run_in(&shallow, &["rev-parse", "main"], None)
            .out()
            .trim(),
        f.repo.git_str(&["rev-parse", "main"])
    );

    // Partial: no blobs but those checked out.
    let partial = f.sandbox.path().join("partial");
    f.git(&[
        "clone",
        "-q",
        "--filter=blob:none",
        &server.http_url("repo.git"),
        partial.to_str().unwrap(),
    ])
    .assert_success();
    assert_eq!(
        std::fs::read_to_string(partial.join("counter")).unwrap(),
        f.repo.git_str(&["show", "main:counter"]) + "\n"
    );
    f.sandbox
        .git_run_in(&partial, &["fsck", "--strict"], None)
        .assert_success();

    // An incremental fetch: a copy five commits behind catches up.
    let behind = f.sandbox.path().join("behind.git");
    f.git(&["clone", "-q", "--bare", &local, behind.to_str().unwrap()])
        .assert_success();
    let old = f.repo.git_str(&["rev-parse", "main~5"]);
    f.sandbox
        .git_in(&behind, &["update-ref", "refs/heads/main", &old]);
    f.sandbox.git_in(&behind, &["repack", "-adq"]);
    f.sandbox.git_in(&behind, &["prune", "--expire=now"]);
    f.sandbox.git_in(
        &behind,
        &["fetch", "-q", &server.http_url("repo.git"), "+main:main"],
    );
    assert_eq!(
        f.sandbox
            .git_run_in(&behind, &["rev-parse", "main"], None)
            .out()
            .trim(),
        f.repo.git_str(&["rev-parse", "main"])
    );
    f.fsck(&behind);

    // Nothing but derived data was written on this machine: the cache holds no git files.
    let cache = f.sandbox.path().join("store-cache/repos/repo.git");
    for name in ["HEAD", "objects", "refs", "config", "packed-refs"] {
        assert!(!cache.join(name).exists(), "{name} in the server's cache");
    }
}

#[test]
fn a_repository_imported_while_serving_is_served_and_pushes_are_refused() {
    let f = Fixture::new();
    let (s3, server) = served(&f, &["--allow-push"]);
    let url = server.http_url("later.git");
    let missing = f.git(&["ls-remote", &url]);
    assert!(!missing.success(), "an absent repository was listed");

    let later = f.sandbox.clone_bare(&f.repo, "later-src.git");
    later.commit_on_main("only in later");
    import(&f, &s3, &later.path, "s3://packd/repos/later.git");
    let listed = f.git(&["ls-remote", &url, "refs/heads/main"]);
    listed.assert_success();
    assert!(
        listed
            .out()
            .starts_with(&later.git_str(&["rev-parse", "main"])),
        "{}",
        listed.out()
    );

    // A push: refused, the bucket's refs as they were.
    let list = s3
        .bucket_dir("packd")
        .join("repos/repo.git/reftable/tables.list");
    let before = std::fs::read(&list).unwrap();
    let work = f.clone_work(&server.http_url("repo.git"));
    std::fs::write(work.join("new.txt"), "new\n").unwrap();
    f.sandbox.git_in(&work, &["add", "new.txt"]);
    f.sandbox.git_in(&work, &["commit", "-qm", "new"]);
    let push = f
        .sandbox
        .git_run_in(&work, &["push", "origin", "HEAD:main"], None);
    assert!(
        !push.success(),
        "a push to the bucket was taken: {}",
        push.err()
    );
    assert_eq!(std::fs::read(&list).unwrap(), before);
    assert!(
        server.log_text().contains("not served yet"),
        "{}",
        server.log_text()
    );
}
