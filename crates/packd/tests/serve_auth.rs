//! `packd serve --auth-file`: the real git client with credentials in the URL
//! (`http://user:token@ADDR/repo.git`) clones as a reader, is refused with a wrong token or
//! without a right on the repository, pushes only as a writer; git:// refuses everything.

mod common;
mod serve_support;

use serve_support::{http, Fixture, Server};

/// Writes an auth file for `users` (name, token, rights) with PHC hashes made by
/// `packd serve --hash-token`, and returns its path.
fn auth_file(f: &Fixture, users: &[(&str, &str, &str)]) -> String {
    let mut text = String::from("# test users\n\n");
    for (name, token, rights) in users {
        let run = f.sandbox.packd_in(
            f.sandbox.path(),
            &["serve", "--hash-token"],
            Some(format!("{token}\n").as_bytes()),
        );
        run.assert_success();
        let hash = run.out().trim().to_string();
        assert!(hash.starts_with("$argon2id$"), "{hash}");
        text.push_str(&format!("{name}:{hash}:{rights}\n"));
    }
    let path = f.sandbox.path().join("users");
    std::fs::write(&path, text).unwrap();
    path.to_str().unwrap().to_string()
}

fn users(f: &Fixture) -> String {
    auth_file(
        f,
        &[
            ("reader", "r-token", "read:*"),
            ("writer", "w-token", "write:repo.git"),
            ("stranger", "s-token", "read:other.git"),
        ],
    )
}

/// `http://USER:TOKEN@ADDR/repo.git`.
fn url(server: &Server, user: &str, token: &str) -> String {
    format!("http://{user}:{token}@{}/repo.git", server.http)
}

#[test]
fn clone_needs_valid_credentials_and_a_read_right() {
    let f = Fixture::new();
    let file = users(&f);
    let server = Server::start(&f.sandbox, &f.root, &["--auth-file", &file]);

    let dst = f.sandbox.path().join("ok");
    f.git(&[
        "clone",
        "-q",
        "--bare",
        &url(&server, "reader", "r-token"),
        dst.to_str().unwrap(),
    ])
    .assert_success();
    assert_eq!(
        f.refs_of(&dst),
        f.refs_of(&f.repo.path),
        "the clone has the server's refs"
    );

    let bad = f.sandbox.path().join("bad");
    let run = f.git(&[
        "clone",
        "-q",
        &url(&server, "reader", "wrong"),
        bad.to_str().unwrap(),
    ]);
    assert!(!run.success(), "clone with a wrong token succeeded");
    assert!(
        run.err().contains("Authentication failed") || run.err().contains("401"),
        "{}",
        run.err()
    );
    assert!(!bad.join("HEAD").exists() && !bad.join(".git/HEAD").exists());
    let log = server.log_text();
    assert!(
        log.contains("status=401") && log.contains("refused: authentication failed"),
        "{log}"
    );
    // The log never shows a token or hash.
    assert!(!log.contains("wrong") && !log.contains("argon2"), "{log}");

    // No credentials at all.
    let run = f.git(&[
        "clone",
        "-q",
        &server.http_url("repo.git"),
        f.sandbox.path().join("anon").to_str().unwrap(),
    ]);
    assert!(!run.success(), "anonymous clone succeeded");
    let r = http(
        &server.http,
        "GET /repo.git/info/refs?service=git-upload-pack HTTP/1.1",
        b"",
    );
    assert_eq!(r.status, 401);
    assert_eq!(r.header("www-authenticate"), Some("Basic realm=\"packd\""));
    assert_eq!(r.text(), "authentication required\n");

    // A user whose rights cover other.git only.
    let run = f.git(&[
        "clone",
        "-q",
        &url(&server, "stranger", "s-token"),
        f.sandbox.path().join("stranger").to_str().unwrap(),
    ]);
    assert!(!run.success(), "clone without a read right succeeded");
    let log = server.log_text();
    assert!(
        log.contains("refused: user 'stranger' may not read this repository"),
        "{log}"
    );
}

#[test]
fn push_needs_a_write_right() {
    let f = Fixture::new();
    let file = users(&f);
    // No --allow-push: the auth file opens pushes to writers.
    let server = Server::start(&f.sandbox, &f.root, &["--auth-file", &file]);
    let work = f.sandbox.path().join("work");
    f.git(&[
        "clone",
        "-q",
        &url(&server, "reader", "r-token"),
        work.to_str().unwrap(),
    ])
    .assert_success();
    std::fs::write(work.join("new.txt"), "pushed\n").unwrap();
    let git = |args: &[&str]| f.sandbox.git_run_in(&work, args, None);
    git(&["add", "new.txt"]).assert_success();
    git(&["commit", "-q", "-m", "pushed"]).assert_success();
    let head = git(&["rev-parse", "HEAD"]).out().trim().to_string();

    // The reader may not push.
    let run = git(&["push", "origin", "HEAD:refs/heads/pushed"]);
    assert!(!run.success(), "a reader's push succeeded");
    assert!(run.err().contains("403"), "{}", run.err());
    assert!(server
        .log_text()
        .contains("refused: user 'reader' may not push to this repository"));
    let refs = f.repo.git_str(&["for-each-ref", "--format=%(refname)"]);
    assert!(!refs.contains("refs/heads/pushed"), "{refs}");

    // The writer may.
    let run = git(&[
        "push",
        &url(&server, "writer", "w-token"),
        "HEAD:refs/heads/pushed",
    ]);
    run.assert_success();
    assert_eq!(
        f.repo.git_str(&["rev-parse", "refs/heads/pushed"]).trim(),
        head
    );
    f.sandbox
        .git_run_in(&f.repo.path, &["fsck", "--strict", "--no-dangling"], None)
        .assert_success();
}

#[test]
fn git_daemon_refuses_everything() {
    let f = Fixture::new();
    let file = users(&f);
    let server = Server::start(&f.sandbox, &f.root, &["--auth-file", &file]);
    let run = f.git(&["ls-remote", &server.git_url("repo.git")]);
    assert!(!run.success(), "git:// served with --auth-file");
    assert!(
        run.err().contains("authentication required"),
        "{}",
        run.err()
    );
}
