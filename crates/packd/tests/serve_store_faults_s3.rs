//! `packd serve --store` when the store fails (a real S3 server, versitygw, and a TCP proxy
//! that cuts answers short): a store that went away fails requests with an error within the
//! read retry budget, the server keeps running and serves again once the store is back; a
//! push while it is away is refused and moves no ref; fetches whose answers from the store
//! are cut short either fail or arrive whole (`git fsck --strict`), never corrupt.

mod common;
mod serve_support;

use common::*;
use packd_test_s3::{FaultProxy, S3Server};
use serve_support::{Fixture, Server};
use std::ffi::OsString;
use std::process::Command;
use std::time::{Duration, Instant};

/// The AWS variables that point packd at `endpoint` with `server`'s keys.
fn s3_env(server: &S3Server, endpoint: String) -> Vec<(String, String)> {
    vec![
        ("AWS_ENDPOINT_URL".into(), endpoint),
        ("AWS_REGION".into(), packd_test_s3::REGION.into()),
        ("AWS_ACCESS_KEY_ID".into(), server.access_key_id().into()),
        (
            "AWS_SECRET_ACCESS_KEY".into(),
            server.secret_access_key().into(),
        ),
    ]
}

/// The fixture's repository imported into bucket `packd` at `repos/repo.git`.
fn import(f: &Fixture, s3: &S3Server) {
    f.repo.git(&["repack", "-adbq"]);
    let mut cmd = Command::new(PACKD);
    apply_env(&mut cmd, &f.sandbox.home);
    cmd.envs(s3_env(s3, s3.endpoint()))
        .arg("import")
        .arg(&f.repo.path)
        .arg("s3://packd/repos/repo.git");
    run_cmd(cmd, None, PACKD_TIMEOUT).assert_success();
}

/// A packd serving `s3://packd/repos` through `endpoint`, its cache in `cache`.
fn serve(f: &Fixture, s3: &S3Server, endpoint: String, cache: &str) -> Server {
    let args: Vec<OsString> = vec![
        "--store".into(),
        "s3://packd/repos".into(),
        "--cache-dir".into(),
        f.sandbox.path().join(cache).into(),
        "--allow-push".into(),
    ];
    Server::start_with(&f.sandbox, &args, &s3_env(s3, endpoint), "info")
}

#[test]
fn a_store_gone_fails_requests_and_serving_resumes_when_it_is_back() {
    let f = Fixture::new();
    let mut s3 = S3Server::start();
    s3.create_bucket("packd");
    import(&f, &s3);
    let mut server = serve(&f, &s3, s3.endpoint(), "cache");
    let url = server.http_url("repo.git");
    let before = f.ls_remote("2", &url);
    let work = f.clone_work(&url);

    s3.stop();
    let started = Instant::now();
    let listed = f.git(&["ls-remote", &url]);
    assert!(
        !listed.success(),
        "listed with the store gone: {}",
        listed.out()
    );
    assert!(
        started.elapsed() < Duration::from_secs(60),
        "the failure took {:?}",
        started.elapsed()
    );
    std::fs::write(work.join("while-down.txt"), "x\n").unwrap();
    f.sandbox.git_in(&work, &["add", "while-down.txt"]);
    f.sandbox
        .git_in(&work, &["commit", "-qm", "while the store is down"]);
    let push = f
        .sandbox
        .git_run_in(&work, &["push", "origin", "HEAD:main"], None);
    assert!(
        !push.success(),
        "a push with the store gone: {}",
        push.err()
    );
    assert!(server.alive(), "the server died with the store");
    let log = server.log_text();
    assert!(
        log.contains("s3://packd/"),
        "the log names the store: {log}"
    );

    s3.restart();
    assert_eq!(
        f.ls_remote("2", &url),
        before,
        "the refs moved or are not served"
    );
    // The same push, with the store back, lands.
    f.sandbox
        .git_in(&work, &["push", "-q", "origin", "HEAD:main"]);
    let head = f
        .sandbox
        .git_run_in(&work, &["rev-parse", "HEAD"], None)
        .out();
    assert!(f
        .ls_remote("2", &url)
        .contains(&format!("{}\trefs/heads/main", head.trim())));
}

#[test]
fn answers_cut_short_fail_a_clone_or_leave_it_whole() {
    let f = Fixture::new();
    // Big enough that a clone reads many blocks.
    f.repo.commit_on_main("before");
    f.repack_whole();
    let s3 = S3Server::start();
    s3.create_bucket("packd");
    import(&f, &s3);
    let proxy = FaultProxy::start(s3.port());
    let server = serve(&f, &s3, proxy.endpoint(), "cache");
    let url = server.http_url("repo.git");
    for (round, cut) in [(0, 200), (1, 4_000), (2, 40_000)] {
        proxy.cut_next_answers_after(3, cut);
        let dst = f.sandbox.path().join(format!("clone-{round}"));
        let run = f.git(&["clone", "-q", "--mirror", &url, dst.to_str().unwrap()]);
        if run.success() {
            f.fsck(&dst);
            assert_eq!(f.refs_of(&dst), f.refs_of(&f.repo.path), "round {round}");
        } else {
            assert!(!run.err().is_empty(), "a failed clone said nothing");
        }
    }
    // With the faults spent, clones are whole.
    let dst = f.mirror_clone("2", &url, "clone-after");
    f.fsck(&dst);
}
