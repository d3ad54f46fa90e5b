//! `packd serve --store s3://BUCKET/PREFIX` against a real S3 server (versitygw on 127.0.0.1,
//! started by `packd-test-s3`): a repository `packd import` put into the bucket is served to
//! the real git client over HTTP and git:// as the same repository on a local disk is:
//! `ls-remote` (protocol v0 and v2) says what git's says of the original, mirror, single-branch,
//! shallow and partial clones and an incremental fetch get every object they ask for (`git
//! fsck --strict`), the refs and the counts of the original. A repository imported while the
//! server runs is served at once; a name that is not in the bucket is not found, and a push
//! cannot create it. Pushes land in the bucket (the pack there, the refs in the reftable
//! stack, an annotated tag with its peeled value; exported, git finds the repository whole),
//! and the refusals (a directory/file conflict, a tree for a branch) read as git's own
//! receive-pack's. Two servers on one bucket: a push through one is served by the other at
//! once, pushes to different refs racing through both all land, and two racing pushes of one
//! ref from one old value leave exactly one winner. The server keeps nothing but derived
//! data on its local disk. Its access log says what each fetch and push cost the bucket
//! (GETs, bytes fetched and used, PUTs), and a clone again with a warm cache costs fewer GETs.

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
fn a_repository_imported_while_serving_is_served_and_a_push_cannot_create_one() {
    let f = Fixture::new();
    let (s3, server) = served(&f, &["--allow-push", "--create-on-push"]);
    let url = server.http_url("later.git");
    let missing = f.git(&["ls-remote", &url]);
    assert!(!missing.success(), "an absent repository was listed");

    // A push to a name with no repository: refused (an import makes repositories), nothing
    // made in the bucket.
    let work = f.clone_work(&server.http_url("repo.git"));
    let push = f.sandbox.git_run_in(
        &work,
        &["push", &server.http_url("new.git"), "HEAD:main"],
        None,
    );
    assert!(
        !push.success(),
        "a push created a repository: {}",
        push.err()
    );
    assert!(!s3.bucket_dir("packd").join("repos/new.git").exists());

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
}

/// The `remote:` and ` ! ` lines of a push's stderr, with the URL taken out.
fn rejections(err: &str) -> Vec<String> {
    err.lines()
        .filter(|l| l.starts_with("remote: error") || l.starts_with(" ! "))
        .map(str::to_string)
        .collect()
}

#[test]
fn pushes_to_a_bucket_land_in_it_and_refusals_read_as_git_s() {
    let f = Fixture::new();
    let (s3, server) = served(&f, &["--allow-push"]);
    let url = server.http_url("repo.git");
    let work = f.clone_work(&url);
    std::fs::write(work.join("new.txt"), "new\n").unwrap();
    f.sandbox.git_in(&work, &["add", "new.txt"]);
    f.sandbox.git_in(&work, &["commit", "-qm", "new"]);
    f.sandbox
        .git_in(&work, &["tag", "-a", "-m", "pushed tag", "v2.0"]);
    f.sandbox.git_in(
        &work,
        &[
            "push",
            "-q",
            "origin",
            "HEAD:main",
            "v2.0",
            "HEAD:refs/heads/topic",
        ],
    );
    let head = f
        .sandbox
        .git_run_in(&work, &["rev-parse", "HEAD"], None)
        .out();
    let tag = f
        .sandbox
        .git_run_in(&work, &["rev-parse", "v2.0"], None)
        .out();
    let listed = f.ls_remote("2", &url);
    for line in [
        format!("{}\trefs/heads/main", head.trim()),
        format!("{}\trefs/heads/topic", head.trim()),
        format!("{}\trefs/tags/v2.0", tag.trim()),
        format!("{}\trefs/tags/v2.0^{{}}", head.trim()),
    ] {
        assert!(listed.contains(&line), "{line} not in\n{listed}");
    }
    // The pack went to the bucket, not to this machine's disk.
    let packs = s3.bucket_dir("packd").join("repos/repo.git/objects/pack");
    let idx = std::fs::read_dir(&packs)
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().ends_with(".idx"))
        .count();
    assert_eq!(idx, 2, "the imported pack and the pushed one");
    let local_pack = f
        .sandbox
        .path()
        .join("store-cache/repos/repo.git/objects/pack");
    let left: Vec<String> = std::fs::read_dir(&local_pack)
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    assert!(left.is_empty(), "quarantine files left: {left:?}");

    // Exported, it is a repository git finds whole, with the pushed refs.
    let mut cmd = Command::new(PACKD);
    apply_env(&mut cmd, &f.sandbox.home);
    cmd.envs(s3_env(&s3)).current_dir(f.sandbox.path()).args([
        "export",
        "s3://packd/repos/repo.git",
        "exported.git",
    ]);
    run_cmd(cmd, None, PACKD_TIMEOUT).assert_success();
    let exported = f.sandbox.path().join("exported.git");
    f.fsck(&exported);
    assert_eq!(
        f.sandbox
            .git_run_in(&exported, &["rev-parse", "topic", "v2.0^{}"], None)
            .out(),
        format!("{}{}", head, head)
    );

    // Refusals, against git's own receive-pack on a copy in the same state.
    let copy = f.sandbox.path().join("copy.git");
    f.git(&[
        "clone",
        "-q",
        "--bare",
        "--mirror",
        &url,
        copy.to_str().unwrap(),
    ])
    .assert_success();
    let copy_url = copy.to_str().unwrap().to_string();
    for refspec in [
        "HEAD:refs/heads/main/sub",
        "HEAD:refs/heads/v1",
        "HEAD^{tree}:refs/heads/tree",
    ] {
        let theirs = f
            .sandbox
            .git_run_in(&work, &["push", &copy_url, refspec], None);
        let ours = f.sandbox.git_run_in(&work, &["push", &url, refspec], None);
        assert_eq!(
            ours.success(),
            theirs.success(),
            "{refspec}: {}",
            ours.err()
        );
        let strip = |err: &str, what: &str| rejections(err).join("\n").replace(what, "URL");
        assert_eq!(
            strip(&ours.err(), &url),
            strip(&theirs.err(), &copy_url),
            "{refspec}"
        );
    }
    // A deletion.
    f.sandbox
        .git_in(&work, &["push", "-q", &url, ":refs/heads/topic"]);
    assert!(!f.ls_remote("2", &url).contains("refs/heads/topic"));
}

#[test]
fn two_servers_on_one_bucket_see_each_other_s_pushes_and_race_without_loss() {
    let f = Fixture::new();
    let (s3, a) = served(&f, &["--allow-push"]);
    let cache_b = f.sandbox.path().join("store-cache-b");
    let args: Vec<OsString> = vec![
        "--store".into(),
        "s3://packd/repos".into(),
        "--cache-dir".into(),
        cache_b.into(),
        "--allow-push".into(),
    ];
    let b = Server::start_with(&f.sandbox, &args, &s3_env(&s3), "info");
    let work_a = f.clone_work(&a.http_url("repo.git"));
    let work_b = f.sandbox.path().join("work-b");
    f.git(&[
        "clone",
        "-q",
        &b.http_url("repo.git"),
        work_b.to_str().unwrap(),
    ])
    .assert_success();

    // A push through A is what B serves next.
    f.sandbox
        .git_in(&work_a, &["commit", "--allow-empty", "-qm", "via a"]);
    f.sandbox
        .git_in(&work_a, &["push", "-q", "origin", "HEAD:main"]);
    let pushed = f
        .sandbox
        .git_run_in(&work_a, &["rev-parse", "HEAD"], None)
        .out();
    assert!(
        f.ls_remote("2", &b.http_url("repo.git"))
            .starts_with(pushed.trim()),
        "B does not serve A's push"
    );

    // Pushes to different refs through the two servers at once: none fails, none is lost.
    let rounds = 6;
    std::thread::scope(|scope| {
        for (work, server, branch) in [(&work_a, &a, "from-a"), (&work_b, &b, "from-b")] {
            let f = &f;
            scope.spawn(move || {
                for round in 0..rounds {
                    f.sandbox.git_in(
                        work,
                        &[
                            "commit",
                            "--allow-empty",
                            "-qm",
                            &format!("{branch} {round}"),
                        ],
                    );
                    let refspec = format!("HEAD:refs/heads/{branch}-{round}");
                    let push = f.sandbox.git_run_in(
                        work,
                        &["push", "-q", &server.http_url("repo.git"), &refspec],
                        None,
                    );
                    assert!(push.success(), "{branch} round {round}: {}", push.err());
                }
            });
        }
    });
    let listed = f.ls_remote("2", &a.http_url("repo.git"));
    for branch in ["from-a", "from-b"] {
        for round in 0..rounds {
            assert!(
                listed.contains(&format!("refs/heads/{branch}-{round}\n")),
                "{branch}-{round} lost:\n{listed}"
            );
        }
    }
    // Two pushes of one ref from the same old value, through the two servers at once: one
    // lands, the other is refused, and the ref is the winner's.
    f.sandbox.git_in(&work_a, &["fetch", "-q", "origin"]);
    f.sandbox.git_in(&work_b, &["fetch", "-q", "origin"]);
    let mut tips = Vec::new();
    for (work, side) in [(&work_a, "a"), (&work_b, "b")] {
        f.sandbox
            .git_in(work, &["reset", "-q", "--hard", "origin/main"]);
        f.sandbox.git_in(
            work,
            &["commit", "--allow-empty", "-qm", &format!("race {side}")],
        );
        tips.push(
            f.sandbox
                .git_run_in(work, &["rev-parse", "HEAD"], None)
                .out(),
        );
    }
    let results: Vec<bool> = std::thread::scope(|scope| {
        let pushes: Vec<_> = [(&work_a, &a), (&work_b, &b)]
            .into_iter()
            .map(|(work, server)| {
                let f = &f;
                scope.spawn(move || {
                    f.sandbox
                        .git_run_in(
                            work,
                            &["push", "-q", &server.http_url("repo.git"), "HEAD:main"],
                            None,
                        )
                        .success()
                })
            })
            .collect();
        pushes.into_iter().map(|p| p.join().unwrap()).collect()
    });
    assert_eq!(results.iter().filter(|ok| **ok).count(), 1, "{results:?}");
    let winner = &tips[results.iter().position(|ok| *ok).unwrap()];
    assert!(
        f.ls_remote("2", &b.http_url("repo.git"))
            .contains(&format!("{}\trefs/heads/main", winner.trim())),
        "main is not the winner's"
    );
}

/// The figure `name=N` of an access log line, 0 when the line has none.
fn figure(line: &str, name: &str) -> u64 {
    line.split_whitespace()
        .find_map(|field| field.strip_prefix(name)?.strip_prefix('='))
        .map_or(0, |n| n.parse().unwrap())
}

/// The one access log line of `server` past its first `from` bytes of a `service` request
/// over `method`. A line is written as its response ends, which a client may not wait for:
/// waited for, up to 10 s.
fn access_line(server: &Server, from: usize, method: &str, service: &str) -> String {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let log = server.log_text();
        let lines: Vec<&str> = log[from..]
            .lines()
            .filter(|l| l.contains("packd_serve::access"))
            .filter(|l| {
                l.contains(&format!("method={method} "))
                    && l.contains(&format!("service={service} "))
            })
            .collect();
        if !lines.is_empty() || std::time::Instant::now() > deadline {
            assert_eq!(lines.len(), 1, "one {service} over {method} in:\n{log}");
            return lines[0].to_string();
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

#[test]
fn the_access_log_says_what_each_fetch_and_push_cost_the_bucket() {
    let f = Fixture::new();
    let (_s3, server) = served(&f, &["--allow-push"]);
    let url = server.http_url("repo.git");
    f.mirror_clone("2", &url, "first");
    let first = access_line(&server, 0, "POST", "fetch");
    for name in ["store_gets", "store_fetched", "store_used"] {
        assert!(figure(&first, name) > 0, "{name} in {first}");
    }
    // The same clone again: what it reads is in the block cache now, and the repository
    // open (its advertisement's request opened it, so the first clone's whole cost is the
    // sum of its requests' figures).
    let before = server.log_text().len();
    f.mirror_clone("2", &url, "second");
    let second = access_line(&server, before, "POST", "fetch");
    let log = server.log_text();
    let gets = |text: &str| -> u64 {
        text.lines()
            .filter(|l| l.contains("packd_serve::access"))
            .map(|l| figure(l, "store_gets"))
            .sum()
    };
    let (first_gets, second_gets) = (gets(&log[..before]), gets(&log[before..]));
    assert!(
        second_gets < first_gets,
        "the block cache is warm: fewer GETs ({first_gets} then {second_gets})\n{log}"
    );
    assert!(figure(&second, "store_used") > 0, "{second}");
    // git:// serves on a thread of its own: its reads count too.
    let before = server.log_text().len();
    f.mirror_clone("2", &server.git_url("repo.git"), "daemon");
    let daemon = access_line(&server, before, "git", "fetch");
    assert!(figure(&daemon, "store_used") > 0, "{daemon}");

    // A push: its pack and its reftable are PUT, on receive-pack's thread.
    let work = f.clone_work(&url);
    std::fs::write(work.join("new.txt"), "new\n").unwrap();
    f.sandbox.git_in(&work, &["add", "new.txt"]);
    f.sandbox.git_in(&work, &["commit", "-qm", "new"]);
    let before = server.log_text().len();
    f.sandbox
        .git_in(&work, &["push", "-q", "origin", "HEAD:main"]);
    let pushed = access_line(&server, before, "POST", "git-receive-pack");
    for name in ["store_puts", "store_put_bytes"] {
        assert!(figure(&pushed, name) > 0, "{name} in {pushed}");
    }
}
