//! `packd serve` over smart HTTP, driven by the real git client (ls-remote, clone, fetch with
//! protocol v0 and v2) and by raw requests for what git never sends (dumb HTTP, paths leaving
//! the root, pushes, oversized and gzip bodies, idle connections, too many connections).

mod common;
mod serve_support;

use common::assert_same_bytes;
use serve_support::{assert_pack_then, http, only_pack_of, pkt, Fixture, Server};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

#[test]
fn ls_remote_matches_git_v0_v1_v2() {
    let f = Fixture::new();
    let server = Server::start(&f.sandbox, &f.root, &[]);
    let local = f.repo.path.to_str().unwrap().to_string();
    for version in ["0", "1", "2"] {
        let expected = f.ls_remote(version, &local);
        assert!(expected.contains("refs/tags/v1.0^{}"), "{expected}");
        let got = f.ls_remote(version, &server.http_url("repo.git"));
        assert_eq!(got, expected, "protocol v{version}");
        // Without the .git suffix too.
        let got = f.ls_remote(version, &server.http_url("repo"));
        assert_eq!(got, expected, "protocol v{version}, no .git");
    }
    let log = server.log_text();
    assert!(
        log.contains("service=ls-refs"),
        "no access log line:\n{log}"
    );
}

/// A running server sees a configuration change without a repack: a `uploadpack.hideRefs`
/// set after the repository was opened hides the ref from the next `git ls-remote`, as from
/// git's own.
#[test]
fn a_new_hide_refs_setting_is_seen_by_a_running_server() {
    let f = Fixture::new();
    let server = Server::start(&f.sandbox, &f.root, &[]);
    let url = server.http_url("repo.git");
    assert!(f.ls_remote("2", &url).contains("refs/heads/side"));
    f.repo
        .git(&["config", "uploadpack.hideRefs", "refs/heads/side"]);
    let local = f.repo.path.to_str().unwrap().to_string();
    for version in ["0", "2"] {
        let got = f.ls_remote(version, &url);
        assert!(!got.contains("refs/heads/side"), "v{version}: {got}");
        assert_eq!(got, f.ls_remote(version, &local), "v{version}");
    }
}

/// With the refs packed, packd takes what `packed-refs` says a ref peels to, and reads the
/// object only where the file's traits promise nothing, as git does: `git ls-remote` (v0 and
/// v2, with `--symref`) answers as git's own for the file as git wrote it, for one whose
/// `fully-peeled` trait and the `^` line of a ref outside `refs/tags/` were removed (it points at an
/// annotated tag, so it must still be peeled), and for one with no traits and no `^` line at
/// all; and the other way, for a file that promises a peeled line it lacks (git trusts the
/// promise) and for a loose ref over a packed tag (whose `^` line no longer counts). A clone of
/// `main` following tags gets the packed tags on `main` (and the tag of a tag among them), not
/// the one on `side`.
#[test]
fn packed_refs_peeled_lines_are_trusted_only_as_far_as_promised() {
    let f = Fixture::new();
    let repo = &f.repo;
    repo.git(&["tag", "-a", "-m", "outer", "outer", "v1.0"]);
    repo.git(&["tag", "-a", "-m", "on side", "side-tag", "side"]);
    let tag = repo.git_str(&["rev-parse", "refs/tags/v1.0"]);
    repo.git(&["update-ref", "refs/review/tagged", &tag]);
    repo.git(&["pack-refs", "--all"]);
    repo.git(&["symbolic-ref", "refs/heads/alias", "refs/heads/main"]);
    let packed_refs = repo.path.join("packed-refs");
    let written = std::fs::read_to_string(&packed_refs).unwrap();
    assert!(
        written.starts_with("# pack-refs with: peeled fully-peeled sorted"),
        "{written}"
    );
    let tagged_line = format!("{tag} refs/review/tagged\n");
    assert!(written.contains(&format!("{tagged_line}^")), "{written}");
    let server = Server::start(&f.sandbox, &f.root, &[]);
    let local = repo.path.to_str().unwrap().to_string();
    let ls_remote = |version: &str, target: &str| {
        let run = f.git(&[
            "-c",
            &format!("protocol.version={version}"),
            "ls-remote",
            "--symref",
            target,
        ]);
        run.assert_success();
        run.out()
    };
    // Each file replaces the last as git replaces it: a new file renamed over the old one.
    let replace = |text: &str| {
        let new = repo.path.join("packed-refs.new");
        std::fs::write(&new, text).unwrap();
        std::fs::rename(&new, &packed_refs).unwrap();
    };
    // The file as git wrote it, less the review ref's `^` line.
    let dropped_peel = {
        let at = written.find(&tagged_line).unwrap() + tagged_line.len();
        let peel_end = at + written[at..].find('\n').unwrap() + 1;
        format!("{}{}", &written[..at], &written[peel_end..])
    };
    let without_tagged_peel = dropped_peel.replace("peeled fully-peeled sorted", "peeled sorted");
    let bare: String = written
        .lines()
        .filter(|l| !l.starts_with('^') && !l.starts_with('#'))
        .map(|l| format!("{l}\n"))
        .collect();
    for (what, text) in [
        ("as git wrote it", written.clone()),
        ("peeled, a review ref's ^ line removed", without_tagged_peel),
        ("no traits, no ^ lines", bare),
    ] {
        replace(&text);
        for version in ["0", "2"] {
            let expected = ls_remote(version, &local);
            assert!(
                expected.contains("refs/review/tagged^{}") && expected.contains("outer^{}"),
                "{what}: {expected}"
            );
            assert_eq!(
                ls_remote(version, &server.http_url("repo.git")),
                expected,
                "{what}, protocol v{version}"
            );
        }
    }
    // A file that promises more than it holds (`fully-peeled`, and the review ref's `^` line
    // gone): git trusts it and gives that ref no peeled line, and so must packd, which would
    // give one if it read the object. Then a loose ref over a packed tag: its packed `^` line
    // no longer counts.
    replace(&dropped_peel);
    let commit = repo.git_str(&["rev-parse", "main~1"]);
    for step in [
        "a promise the file does not keep",
        "a loose ref over a packed tag",
    ] {
        if step == "a loose ref over a packed tag" {
            replace(&written);
            repo.git(&["update-ref", "refs/tags/v1.0", &commit]);
        }
        for version in ["0", "2"] {
            let expected = ls_remote(version, &local);
            let unpeeled = match step {
                "a loose ref over a packed tag" => "refs/tags/v1.0^{}",
                _ => "refs/review/tagged^{}",
            };
            assert!(!expected.contains(unpeeled), "{step}: {expected}");
            assert_eq!(
                ls_remote(version, &server.http_url("repo.git")),
                expected,
                "{step}, protocol v{version}"
            );
        }
    }
    // The loose ref goes: the packed `v1.0` and its `^` line count again for the clone.
    std::fs::remove_file(repo.path.join("refs/tags/v1.0")).unwrap();
    assert_eq!(
        repo.git_str(&["rev-parse", "refs/tags/v1.0"]),
        tag,
        "the packed v1.0 is back"
    );
    for version in ["0", "2"] {
        let dst = f.clone_main_with(
            version,
            &server.http_url("repo.git"),
            &format!("tags-v{version}.git"),
            true,
        );
        let tags = f
            .sandbox
            .git_run_in(&dst, &["tag", "--list"], None)
            .out()
            .split_whitespace()
            .map(String::from)
            .collect::<Vec<_>>();
        assert_eq!(tags, ["light", "outer", "v1.0"], "v{version}");
        for name in ["outer", "v1.0"] {
            f.assert_same_tag(&dst, name, &format!("v{version}"));
        }
    }
}

fn clone_and_check(f: &Fixture, server: &Server, version: &str) -> std::path::PathBuf {
    mirror_clone_checked(f, server, version, &format!("clone-v{version}.git"))
}

/// `git clone --mirror` of `repo.git` over HTTP with protocol `version` into NAME, checked
/// (see `Fixture::mirror_clone`).
fn mirror_clone_checked(
    f: &Fixture,
    server: &Server,
    version: &str,
    name: &str,
) -> std::path::PathBuf {
    f.mirror_clone(version, &server.http_url("repo.git"), name)
}

#[test]
fn clone_v0_over_http() {
    let f = Fixture::new();
    let server = Server::start(&f.sandbox, &f.root, &[]);
    clone_and_check(&f, &server, "0");
    assert!(
        server.log_text().contains("objects="),
        "{}",
        server.log_text()
    );
}

#[test]
fn clone_v2_over_http() {
    let f = Fixture::new();
    let server = Server::start(&f.sandbox, &f.root, &[]);
    clone_and_check(&f, &server, "2");
}

/// A mirror clone of a repository just repacked with bitmaps is its pack file as it is, which
/// the connection sends with `sendfile` (the bytes never pass through packd): over protocol v0
/// and v2 git finds the clone complete, and its pack is the served file byte for byte. A client
/// that hangs up in the middle leaves the server serving the next clone.
#[test]
fn whole_pack_clone_is_sent_from_the_file() {
    let f = Fixture::new();
    let served = f.repack_whole();
    let mut server = f.pack_logging_server(&["--clone-cache-bytes", "0"]);
    hang_up_mid_clone(&f, &server);
    for version in ["0", "2"] {
        let dst = clone_and_check(&f, &server, version);
        assert_same_bytes(
            &format!("v{version}: the clone's pack, against the served file"),
            &served,
            &only_pack_of(&dst),
        );
    }
    let log = server.log_text();
    assert!(
        log.matches("sent as file ranges").count() >= 2,
        "the packs went out as file ranges:\n{log}"
    );
    assert!(server.alive(), "{log}");
}

/// A mirror clone after a push (a loose commit, tree and blob on `main`, and a loose annotated
/// tag of a packed commit) sends the bitmapped pack's entries as they are, then the four pushed
/// objects, under the stream's own header and trailer: over protocol v0 and v2 git finds the
/// clone complete, and its pack is the served file but for the object count and what follows
/// the entries. The entries go out from the file (`sendfile`) once checked and hashed.
#[test]
fn mirror_clone_after_a_push_sends_the_pack_then_what_was_pushed() {
    let f = Fixture::new();
    let served = f.repack_whole();
    let out = |args: &[&str], stdin: &str| {
        String::from_utf8(f.repo.git_stdin(args, stdin.as_bytes()))
            .unwrap()
            .trim()
            .to_string()
    };
    let blob = out(&["hash-object", "-w", "--stdin"], "pushed\n");
    let tree = out(&["mktree"], &format!("100644 blob {blob}\tpushed.txt\n"));
    let parent = f.repo.git_str(&["rev-parse", "main"]);
    let commit = out(&["commit-tree", &tree, "-p", &parent], "pushed\n");
    f.repo.git(&["update-ref", "refs/heads/main", &commit]);
    f.repo
        .git(&["tag", "-a", "-m", "pushed tag", "pushed-tag", &parent]);
    assert_eq!(f.repo.packs().len(), 1, "the pushed objects are loose");
    let server = f.pack_logging_server(&["--clone-cache-bytes", "0"]);
    for version in ["0", "2"] {
        let dst = clone_and_check(&f, &server, version);
        assert_pack_then(&format!("v{version}"), &served, &only_pack_of(&dst), 4);
    }
    let log = server.log_text();
    assert_eq!(
        log.matches("sent as it is, then 4 objects stored elsewhere")
            .count(),
        2,
        "{log}"
    );
    // The entries went from the file by the kernel, once checked and hashed.
    assert_eq!(
        log.matches("bytes of its entries went out by sendfile")
            .count(),
        2,
        "{log}"
    );
}

/// A clone of `main` alone that follows tags (include-tag), when the bitmapped pack is just
/// `main`'s objects and an annotated tag was made since (a loose tag object, which the client
/// does not ask for): the pack's entries go out as they are, then the tag; over protocol v0 and
/// v2 the clone is complete and has the tag.
#[test]
fn a_followed_tag_stored_outside_the_pack_goes_after_its_entries() {
    let f = Fixture::new();
    f.repo.git(&["update-ref", "-d", "refs/heads/side"]);
    f.repo.git(&["tag", "-d", "v1.0", "light"]);
    let served = f.repack_whole();
    f.repo
        .git(&["tag", "-a", "-m", "since the repack", "v2", "main~3"]);
    assert_eq!(f.repo.packs().len(), 1, "the tag object is loose");
    let server = f.pack_logging_server(&["--clone-cache-bytes", "0"]);
    for version in ["0", "2"] {
        let dst = f.clone_main_with(
            version,
            &server.http_url("repo.git"),
            &format!("followed-v{version}.git"),
            true,
        );
        f.assert_same_tag(&dst, "v2", &format!("v{version}: the tag was followed"));
        // The tag after the pack's entries.
        assert_pack_then(&format!("v{version}"), &served, &only_pack_of(&dst), 1);
    }
    let log = server.log_text();
    assert_eq!(
        log.matches("sent as it is, then 1 objects stored elsewhere")
            .count(),
        2,
        "{log}"
    );
}

/// A push through packd itself (which keeps it as a pack of its own) to a repository just
/// repacked with bitmaps, then a mirror clone: the bitmapped pack's entries go out as they
/// are, then the three pushed objects, read from the pushed pack; git finds the clone
/// complete. (Maintenance is off: it would roll the pushed pack into a multi-pack-index.)
#[test]
fn mirror_clone_after_a_push_through_packd() {
    let f = Fixture::new();
    let served = f.repack_whole();
    let server = f.pack_logging_server(&[
        "--allow-push",
        "--clone-cache-bytes",
        "0",
        "--no-maintenance",
    ]);
    let work = f.clone_work(&server.http_url("repo.git"));
    std::fs::write(work.join("pushed.txt"), "pushed through packd\n").unwrap();
    for args in [
        &["add", "pushed.txt"][..],
        &["commit", "-q", "-m", "pushed"],
        &["push", "-q", "origin", "HEAD:refs/heads/main"],
    ] {
        f.sandbox.git_run_in(&work, args, None).assert_success();
    }
    assert_eq!(f.repo.packs().len(), 2, "the push is kept as a pack");
    let dst = clone_and_check(&f, &server, "2");
    // A commit, its tree and a blob.
    assert_pack_then("the clone", &served, &only_pack_of(&dst), 3);
    let log = server.log_text();
    assert!(
        log.contains("sent as it is, then 3 objects stored elsewhere"),
        "{log}"
    );
}

/// The objects in the packs of the repository at `dst`, as `git count-objects -v` says.
fn objects_in_pack(f: &Fixture, dst: &std::path::Path) -> String {
    let held = f.sandbox.git_run_in(dst, &["count-objects", "-v"], None);
    held.out()
        .lines()
        .find_map(|l| l.strip_prefix("in-pack: "))
        .unwrap()
        .trim()
        .to_string()
}

/// Adds `n` pull-request refs (`refs/pull/<i>/head`) to `fi`, the `i`th a commit on
/// `from(i)` that adds a file under `pulls/` (30 paths, so that they share trees).
fn add_pull_requests<'a>(fi: &mut common::FastImport, n: usize, from: impl Fn(usize) -> &'a str) {
    for i in 0..n {
        fi.commit(
            &format!("refs/pull/{i}/head"),
            Some(from(i)),
            "pull request\n",
            &[common::inline(
                &format!("pulls/{}.txt", i % 30),
                format!("pull request {i}\n"),
            )],
        );
    }
}

/// A fixture with `n` pull-request refs on `main` (see [`add_pull_requests`]).
fn with_pull_requests_on_main(n: usize) -> Fixture {
    let f = Fixture::new();
    let main = f.repo.git_str(&["rev-parse", "main"]);
    let mut fi = common::FastImport::with_time(1_900_000_000);
    add_pull_requests(&mut fi, n, |_| &main);
    f.repo.fast_import(&fi.finish());
    f
}

/// A host with hundreds of pull-request refs whose bitmaps `packd write-bitmap --every-tip`
/// wrote: a mirror clone over HTTP takes the union of every ref's bitmap in one pass, walks no
/// commit, and sends the pack file as it is; git finds the clone complete.
#[test]
fn mirror_clone_with_every_tip_bitmaps_walks_nothing() {
    let f = with_pull_requests_on_main(300);
    let served = f.repack_whole();
    f.repo
        .packd(&["write-bitmap", "--every-tip", "-q"], None)
        .assert_success();
    let server = Server::start_logging(
        &f.sandbox,
        &f.root,
        &["--clone-cache-bytes", "0"],
        "info,packd_pack=debug,packd_reach=debug",
    );
    let dst = clone_and_check(&f, &server, "2");
    assert_same_bytes(
        "the clone's pack, against the served file",
        &served,
        &only_pack_of(&dst),
    );
    let log = server.log_text();
    for line in [
        "tips' bitmaps taken in one pass",
        " 0 commits and 0 trees",
        "sent as file ranges",
    ] {
        assert!(log.contains(line), "{line:?} not in the log:\n{log}");
    }
}

/// A host with hundreds of pull-request refs that git's bitmaps leave out: the running
/// server keeps what the fill-in walk from them found, and the next mirror clone starts from
/// it, also after a push to `main`, and so does a mirror's fetch, for what it has and what it
/// wants. When a deleted branch's bitmap was part of that answer it
/// walks again, and a deleted pull-request ref is not taken from it: each clone is complete and
/// has exactly the objects git counts from the refs left.
#[test]
fn mirror_clones_start_from_the_last_fill_in_walk() {
    let f = Fixture::new();
    let main = f.repo.git_str(&["rev-parse", "main"]);
    let mut fi = common::FastImport::with_time(1_900_000_000);
    let first = format!(
        ":{}",
        fi.commit(
            "refs/heads/feature",
            Some(&main),
            "feature\n",
            &[common::inline("feature-1.txt", "first on feature\n")],
        )
    );
    let second = format!(
        ":{}",
        fi.commit(
            "refs/heads/feature",
            Some(&first),
            "feature 2\n",
            &[common::inline("feature-2.txt", "second on feature\n")],
        )
    );
    // Some of the older pull requests (which git's bitmaps leave out: it takes the newest
    // hundred or so) sit on `feature`'s tip; no newer one does.
    add_pull_requests(&mut fi, 300, |i| {
        if i < 150 && i % 3 == 0 {
            &second
        } else {
            &main
        }
    });
    f.repo.fast_import(&fi.finish());
    f.repo
        .git(&["config", "pack.preferBitmapTips", "refs/heads/"]);
    f.repack_whole();
    let test_bitmap = f.sandbox.git_run_in(
        &f.repo.path,
        &["rev-list", "--test-bitmap", "refs/heads/feature"],
        None,
    );
    assert!(
        test_bitmap.err().contains("Found bitmap for"),
        "feature has a bitmap: {}",
        test_bitmap.err()
    );
    let server = Server::start_logging(
        &f.sandbox,
        &f.root,
        &["--clone-cache-bytes", "0"],
        "info,packd_reach=debug",
    );
    let kept_walks = || server.log_text().matches("a kept walk from").count();
    let clone = |name: &str| {
        let dst = mirror_clone_checked(&f, &server, "2", name);
        let expected = f
            .repo
            .git_str(&["rev-list", "--all", "--objects", "--count"]);
        // Exactly those: nothing the refs left no longer reach.
        assert_eq!(
            objects_in_pack(&f, &dst),
            expected,
            "objects sent to {name}"
        );
    };
    clone("first.git");
    assert_eq!(kept_walks(), 0, "{}", server.log_text());
    clone("second.git");
    assert_eq!(kept_walks(), 1, "{}", server.log_text());
    // A push to main (a loose commit): its walk stops at main's old tip.
    f.commit_on_main("pushed\n");
    clone("after-push.git");
    assert_eq!(kept_walks(), 2, "{}", server.log_text());
    // The first mirror fetches (git sends the haves it negotiated, not every ref): the answer
    // is complete.
    let first = f.sandbox.path().join("first.git");
    f.sandbox
        .git_run_in(&first, &["-c", "protocol.version=2", "fetch", "-q"], None)
        .assert_success();
    f.fsck(&first);
    assert_eq!(
        f.refs_of(&first),
        f.refs_of(&f.repo.path),
        "refs after the fetch"
    );
    // `feature`'s bitmap was taken for its own tip, and the kept answer has none of its objects:
    // without the branch it does not hold (the pull requests on feature's tip reach them, and
    // no bitmap of this request has them), so the clone walks again.
    f.repo.git(&["update-ref", "-d", "refs/heads/feature"]);
    clone("no-side.git");
    assert!(
        server.log_text().contains("walking again"),
        "{}",
        server.log_text()
    );
    let after_side = kept_walks();
    // A deleted pull request: the last answer has its tip, so it is not used.
    f.repo.git(&["update-ref", "-d", "refs/pull/0/head"]);
    clone("no-pull-0.git");
    assert_eq!(kept_walks(), after_side, "{}", server.log_text());
    clone("again.git");
    assert_eq!(kept_walks(), after_side + 1, "{}", server.log_text());
}

/// 300 pull-request refs on `main`, packed with git preferring bitmaps on branches (so that a
/// mirror clone walks from most pull requests), and the number of objects a mirror clone must
/// get.
fn pull_requests_left_to_a_fill_in_walk() -> (Fixture, String) {
    let f = with_pull_requests_on_main(300);
    f.repo
        .git(&["config", "pack.preferBitmapTips", "refs/heads/"]);
    f.repack_whole();
    let expected = f
        .repo
        .git_str(&["rev-list", "--all", "--objects", "--count"]);
    (f, expected)
}

/// Mirror clones that reach a fresh server together share one opened repository and make its
/// fill-in walk once: the others wait for it and start from its answer. Each clone is
/// complete.
#[test]
fn mirror_clones_that_come_together_walk_once() {
    let (f, _) = pull_requests_left_to_a_fill_in_walk();
    let server = Server::start_logging(
        &f.sandbox,
        &f.root,
        &["--clone-cache-bytes", "0"],
        "info,packd_reach=debug",
    );
    std::thread::scope(|scope| {
        for i in 0..3 {
            let (f, server) = (&f, &server);
            scope.spawn(move || mirror_clone_checked(f, server, "2", &format!("together-{i}")));
        }
    });
    let log = server.log_text();
    let opened = log
        .lines()
        .filter(|l| l.contains("opened ") && l.contains(".bitmap ("));
    assert_eq!(opened.count(), 1, "one bitmap opened: {log}");
    // Each walk's summary starts with its tips and says how many commits it read: one read
    // the pull requests', the others none (the walks of the clients' side have no tips).
    let number_before = |text: &str, what: &str| -> Option<u64> {
        text.split(what).next()?.rsplit(' ').next()?.parse().ok()
    };
    let commits_read: Vec<u64> = log
        .lines()
        .filter_map(|line| line.split("bitmap_walk: ").nth(1))
        .filter(|summary| number_before(summary, " tips").is_some_and(|tips| tips > 0))
        .filter_map(|summary| number_before(summary, " commits and "))
        .collect();
    assert_eq!(commits_read.len(), 3, "a walk per clone: {log}");
    assert_eq!(
        commits_read.iter().filter(|&&n| n > 0).count(),
        1,
        "one walk read commits: {log}"
    );
}

/// Asserts that the debug log `log` of a mirror clone shows the kept fill-in walk read back
/// from its file and used, with nothing walked.
fn assert_walk_read_back(log: &str) {
    assert!(log.contains("read back from"), "{log}");
    assert!(log.contains("a kept walk from"), "{log}");
    assert!(
        log.contains(" 0 commits and 0 trees "),
        "started from the kept answer, the walk reads nothing: {log}"
    );
}

/// A large fill-in walk's answer is kept in `packd-cache/walk/` too: a server started again
/// reads it back and does not walk again; a damaged file is not used, and the clone is still
/// complete.
#[test]
fn a_server_started_again_reads_the_last_fill_in_walk_back() {
    let (f, expected) = pull_requests_left_to_a_fill_in_walk();
    let serve_one = |name: &str| -> String {
        let server = Server::start_logging(
            &f.sandbox,
            &f.root,
            &["--clone-cache-bytes", "0"],
            "info,packd_reach=debug",
        );
        let dst = mirror_clone_checked(&f, &server, "2", name);
        assert_eq!(
            objects_in_pack(&f, &dst),
            expected,
            "objects sent to {name}"
        );
        server.log_text()
    };
    let walk_dir = f.repo.path.join("packd-cache").join("walk");
    let first = serve_one("first.git");
    assert!(first.contains("kept in"), "{first}");
    assert!(!first.contains("a kept walk from"), "{first}");
    let files: Vec<_> = std::fs::read_dir(&walk_dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(files.len(), 1, "{files:?}");
    let second = serve_one("second.git");
    assert_walk_read_back(&second);
    // Damaged: not used, and walked again (which keeps a good file again).
    let good = std::fs::read(&files[0]).unwrap();
    let mut bytes = good.clone();
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0x40;
    // The file is read-only, as the bitmap writer leaves its files: replaced, not written to.
    std::fs::remove_file(&files[0]).unwrap();
    std::fs::write(&files[0], &bytes).unwrap();
    let third = serve_one("third.git");
    assert!(third.contains("is not used"), "{third}");
    assert!(!third.contains("a kept walk from"), "{third}");
    assert_eq!(
        std::fs::read(&files[0]).unwrap(),
        good,
        "the walk again kept the same good file: {third}"
    );
}

/// `git clone --mirror` of the repository at `src` into `dst`, through `packd upload-pack` (a
/// process, as over ssh) with the walk's debug lines on git's stderr; checks that it succeeds,
/// that fsck finds it whole, that it has `src`'s refs and that `expected` objects were sent;
/// returns git's stderr.
fn mirror_clone_by_upload_pack(
    f: &Fixture,
    src: &std::path::Path,
    dst: &std::path::Path,
    expected: &str,
) -> String {
    let mut cmd = f.sandbox.git_cmd(f.sandbox.path());
    cmd.env("PACKD_LOG", "info,packd_reach=debug");
    cmd.args([
        "clone",
        "--mirror",
        &format!("--upload-pack={} upload-pack", common::PACKD),
        &format!("file://{}", src.display()),
        dst.to_str().unwrap(),
    ]);
    let run = common::run_cmd(cmd, None, common::GIT_TIMEOUT);
    run.assert_success();
    f.fsck(dst);
    assert_eq!(f.refs_of(dst), f.refs_of(src), "refs of {}", dst.display());
    assert_eq!(
        objects_in_pack(f, dst),
        expected,
        "objects sent to {}",
        dst.display()
    );
    run.err()
}

/// `packd upload-pack`, a process per request as over ssh, keeps a large fill-in walk's answer
/// in `packd-cache/walk/` as a server does, and the next process reads it back instead of
/// walking: both mirror clones are complete.
#[test]
fn upload_pack_processes_share_the_kept_fill_in_walk() {
    let (f, expected) = pull_requests_left_to_a_fill_in_walk();
    let clone = |name: &str| -> String {
        let dst = f.sandbox.path().join(name);
        mirror_clone_by_upload_pack(&f, &f.repo.path, &dst, &expected)
    };
    let first = clone("first.git");
    assert!(first.contains("kept in"), "{first}");
    assert!(!first.contains("a kept walk from"), "{first}");
    let walk_dir = f.repo.path.join("packd-cache").join("walk");
    assert_eq!(std::fs::read_dir(&walk_dir).unwrap().count(), 1);
    let second = clone("second.git");
    assert_walk_read_back(&second);
}

/// A clone that is not the whole pack (one branch, no tags) still sends the runs of reused
/// entries of 64 KiB or more from the file (here the 256 KiB file's entry), over protocol v0
/// and v2: git finds the clone complete, with the objects `main` reaches.
#[test]
fn runs_of_reused_entries_go_out_as_file_ranges() {
    let f = Fixture::new();
    f.repack_whole();
    let server = f.pack_logging_server(&["--clone-cache-bytes", "0"]);
    for version in ["0", "2"] {
        f.clone_main(
            version,
            &server.http_url("repo.git"),
            &format!("one-branch-v{version}.git"),
        );
    }
    let log = server.log_text();
    assert_eq!(
        log.matches("runs of reused entries").count(),
        2,
        "each clone sent runs as file ranges:\n{log}"
    );
}

#[test]
fn parallel_clones() {
    let f = Fixture::new();
    let server = Server::start(&f.sandbox, &f.root, &[]);
    std::thread::scope(|scope| {
        let handles: Vec<_> = (0..6)
            .map(|i| {
                let (f, server) = (&f, &server);
                scope.spawn(move || {
                    let version = if i % 2 == 0 { "0" } else { "2" };
                    f.mirror_clone(
                        version,
                        &server.http_url("repo.git"),
                        &format!("parallel-{i}.git"),
                    );
                })
            })
            .collect();
        for h in handles {
            h.join().expect("clone thread");
        }
    });
}

#[test]
fn fetch_after_repack_sees_new_history() {
    let f = Fixture::new();
    let server = Server::start(&f.sandbox, &f.root, &[]);
    let dst = f.clone_work(&server.http_url("repo.git"));
    // New history in the served repository, then a repack (new pack, old ones gone): the
    // server must reopen it.
    let new = f.commit_on_main("after repack\n");
    let new = new.as_str();
    f.repo.git(&["repack", "-adq"]);
    for version in ["0", "2"] {
        let run = f.sandbox.git_run_in(
            &dst,
            &[
                "-c",
                &format!("protocol.version={version}"),
                "fetch",
                "-q",
                "origin",
            ],
            None,
        );
        run.assert_success();
        let got = f
            .sandbox
            .git_run_in(&dst, &["rev-parse", "origin/main"], None);
        assert_eq!(got.out().trim(), new);
    }
    f.sandbox
        .git_run_in(&dst, &["fsck", "--no-dangling"], None)
        .assert_success();
}

#[test]
fn dumb_http_refused() {
    let f = Fixture::new();
    let server = Server::start(&f.sandbox, &f.root, &[]);
    for path in [
        "/repo.git/info/refs",
        "/repo.git/HEAD",
        "/repo.git/objects/info/packs",
        "/repo.git/objects/12/3456789012345678901234567890123456789",
    ] {
        let r = http(&server.http, &format!("GET {path} HTTP/1.1"), b"");
        assert_eq!(r.status, 403, "{path}: {}", r.text());
        assert!(r.text().contains("smart HTTP"), "{path}: {}", r.text());
    }
    // git itself, told to use dumb HTTP, fails.
    let mut cmd = f.sandbox.git_cmd(f.sandbox.path());
    cmd.env("GIT_SMART_HTTP", "0")
        .args(["ls-remote", &server.http_url("repo.git")]);
    let run = common::run_cmd(cmd, None, common::GIT_TIMEOUT);
    assert!(!run.success(), "dumb ls-remote succeeded: {}", run.out());
}

#[test]
fn advertisement_headers_and_unknown_repo() {
    let f = Fixture::new();
    let server = Server::start(&f.sandbox, &f.root, &[]);
    let r = http(
        &server.http,
        "GET /repo.git/info/refs?service=git-upload-pack HTTP/1.1",
        b"",
    );
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(
        r.header("content-type"),
        Some("application/x-git-upload-pack-advertisement")
    );
    assert!(r.header("cache-control").unwrap_or("").contains("no-cache"));
    assert!(r.body.starts_with(b"001e# service=git-upload-pack\n0000"));
    let r = http(
        &server.http,
        "GET /nothere.git/info/refs?service=git-upload-pack HTTP/1.1",
        b"",
    );
    assert_eq!(r.status, 404);
    assert!(r.text().contains("not found"), "{}", r.text());
    let run = f.git(&["ls-remote", &server.http_url("nothere.git")]);
    assert!(!run.success());
    assert!(run.err().contains("not found"), "{}", run.err());
}

/// A repository that cannot be opened (its pack's index cut short) gets a 500 whose reason
/// names the file from the repository's directory, as git would, not by the server's absolute
/// path (which tells a client where the server keeps its repositories); packd's log has it.
#[test]
fn a_repository_that_cannot_be_opened_is_named_from_its_own_directory() {
    let f = Fixture::new();
    let (dir, name) = f.broken_repo();
    let server = Server::start(&f.sandbox, &f.root, &[]);
    let r = http(
        &server.http,
        "GET /broken.git/info/refs?service=git-upload-pack HTTP/1.1",
        b"",
    );
    assert_eq!(r.status, 500, "{}", r.text());
    Fixture::assert_named_from_repo(&server, &r.text(), &dir, &name);
}

#[test]
fn paths_outside_the_root_refused() {
    let f = Fixture::new();
    // A repository outside the root, reachable by `..` and by a symlink inside the root.
    let outside = f.sandbox.init_bare("outside.git");
    std::os::unix::fs::symlink(&outside.path, f.root.join("link.git")).unwrap();
    let server = Server::start(&f.sandbox, &f.root, &[]);
    let abs = outside.path.to_str().unwrap().to_string();
    let paths = [
        "/../outside.git".to_string(),
        "/%2e%2e/outside.git".to_string(),
        "/%2E%2E%2Foutside.git".to_string(),
        "/repo.git/../../outside.git".to_string(),
        format!("/{abs}"),
        format!("/{}", abs.replace('/', "%2f")),
        "/link.git".to_string(),
        "/link".to_string(),
        "/~root/x".to_string(),
    ];
    for p in &paths {
        for route in ["info/refs?service=git-upload-pack", "git-upload-pack"] {
            let method = if route.starts_with("info") {
                "GET"
            } else {
                "POST"
            };
            let r = http(
                &server.http,
                &format!(
                    "{method} {p}/{route} HTTP/1.1\r\nContent-Type: application/x-git-upload-pack-request"
                ),
                b"0000",
            );
            assert_eq!(r.status, 403, "{method} {p}/{route}: {}", r.text());
            assert!(r.text().contains("forbidden"), "{p}: {}", r.text());
        }
    }
    assert!(
        server.log_text().contains("forbidden path"),
        "refusals not logged"
    );
    // The symlink is refused by git too.
    let run = f.git(&["ls-remote", &server.http_url("link.git")]);
    assert!(!run.success());
}

#[test]
fn push_refused() {
    let f = Fixture::new();
    let server = Server::start(&f.sandbox, &f.root, &[]);
    let r = http(
        &server.http,
        "GET /repo.git/info/refs?service=git-receive-pack HTTP/1.1",
        b"",
    );
    assert_eq!(r.status, 403);
    assert!(r.text().contains("pushing is not enabled"), "{}", r.text());
    let r = http(
        &server.http,
        "POST /repo.git/git-receive-pack HTTP/1.1\r\nContent-Type: application/x-git-receive-pack-request",
        b"0000",
    );
    assert_eq!(r.status, 403);
    assert!(r.text().contains("pushing is not enabled"), "{}", r.text());
    let dst = f.sandbox.path().join("w");
    f.git(&[
        "clone",
        "-q",
        &server.http_url("repo.git"),
        dst.to_str().unwrap(),
    ])
    .assert_success();
    let run = f
        .sandbox
        .git_run_in(&dst, &["push", "origin", "HEAD:refs/heads/new"], None);
    assert!(!run.success(), "push succeeded");
    assert!(run.err().contains("403"), "{}", run.err());
}

fn gzip(data: &[u8]) -> Vec<u8> {
    let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    enc.write_all(data).unwrap();
    enc.finish().unwrap()
}

fn ls_refs_body() -> Vec<u8> {
    let mut body = pkt("command=ls-refs\n");
    body.extend_from_slice(b"0001");
    body.extend(pkt("peel\n"));
    body.extend(pkt("symrefs\n"));
    body.extend_from_slice(b"0000");
    body
}

const V2_POST: &str = "POST /repo.git/git-upload-pack HTTP/1.1\r\n\
    Content-Type: application/x-git-upload-pack-request\r\nGit-Protocol: version=2";

#[test]
fn gzip_request_bodies_accepted() {
    let f = Fixture::new();
    let server = Server::start(&f.sandbox, &f.root, &[]);
    let plain = http(&server.http, V2_POST, &ls_refs_body());
    assert_eq!(plain.status, 200, "{}", plain.text());
    assert_eq!(
        plain.header("content-type"),
        Some("application/x-git-upload-pack-result")
    );
    assert!(plain.text().contains("refs/heads/main"), "{}", plain.text());
    let zipped = http(
        &server.http,
        &format!("{V2_POST}\r\nContent-Encoding: gzip"),
        &gzip(&ls_refs_body()),
    );
    assert_eq!(zipped.status, 200, "{}", zipped.text());
    assert_eq!(zipped.body, plain.body);
    let bad = http(
        &server.http,
        &format!("{V2_POST}\r\nContent-Encoding: gzip"),
        b"not gzip at all",
    );
    assert_eq!(bad.status, 400, "{}", bad.text());
}

#[test]
fn request_body_limit() {
    let f = Fixture::new();
    let server = Server::start(&f.sandbox, &f.root, &["--max-request-bytes", "1000"]);
    let ok = http(&server.http, V2_POST, &ls_refs_body());
    assert_eq!(ok.status, 200, "{}", ok.text());
    // Too large as sent.
    let mut big = ls_refs_body();
    big.resize(5000, b'0');
    let r = http(&server.http, V2_POST, &big);
    assert_eq!(r.status, 413, "{}", r.text());
    // Small compressed, too large inflated.
    let bomb = gzip(&vec![b'0'; 500_000]);
    assert!(bomb.len() < 1000);
    let r = http(
        &server.http,
        &format!("{V2_POST}\r\nContent-Encoding: gzip"),
        &bomb,
    );
    assert_eq!(r.status, 413, "{}", r.text());
    // Chunked (no Content-Length) and too large.
    let mut s = TcpStream::connect(&server.http).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let head =
        format!("{V2_POST}\r\nHost: x\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n");
    s.write_all(head.as_bytes()).unwrap();
    for _ in 0..5 {
        let _ = s.write_all(format!("{:x}\r\n{}\r\n", 500, "0".repeat(500)).as_bytes());
    }
    let _ = s.write_all(b"0\r\n\r\n");
    let mut raw = Vec::new();
    let _ = s.read_to_end(&mut raw);
    assert_eq!(serve_support::parse_response(&raw).status, 413);
}

#[test]
fn idle_connections_closed() {
    let f = Fixture::new();
    let server = Server::start(&f.sandbox, &f.root, &["--idle-timeout", "1"]);
    for partial in [&b""[..], b"GET /repo.git/info/refs?serv"] {
        let mut s = TcpStream::connect(&server.http).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        s.write_all(partial).unwrap();
        let start = Instant::now();
        let mut buf = [0u8; 1024];
        // Closed (EOF, or a reset, or a 408 then EOF): never a timeout.
        loop {
            match s.read(&mut buf) {
                Ok(0) => break,
                Ok(_) => continue,
                Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => break,
                Err(e) => panic!("connection not closed: {e} after {:?}", start.elapsed()),
            }
        }
        let waited = start.elapsed();
        assert!(
            waited >= Duration::from_millis(800) && waited < Duration::from_secs(5),
            "closed after {waited:?}"
        );
    }
    // A kept-alive connection that goes quiet after a request is closed too.
    let mut s = TcpStream::connect(&server.http).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(b"GET /repo.git/info/refs?service=git-upload-pack HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    let start = Instant::now();
    let mut raw = Vec::new();
    let _ = s.read_to_end(&mut raw);
    assert!(raw.starts_with(b"HTTP/1.1 200"));
    assert!(
        start.elapsed() < Duration::from_secs(5),
        "{:?}",
        start.elapsed()
    );
}

#[test]
fn connection_limit() {
    let f = Fixture::new();
    let server = Server::start(&f.sandbox, &f.root, &["--max-connections", "1"]);
    let mut held = TcpStream::connect(&server.http).unwrap();
    held.write_all(b"GET /repo.git/info/refs?service=git-upload-pack HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    // Once the first connection is served, it holds the only slot (keep-alive).
    let mut buf = [0u8; 12];
    held.read_exact(&mut buf).unwrap();
    assert_eq!(&buf, b"HTTP/1.1 200");
    let r = http(
        &server.http,
        "GET /repo.git/info/refs?service=git-upload-pack HTTP/1.1",
        b"",
    );
    assert_eq!(r.status, 503, "{}", r.text());
    drop(held);
    // The slot comes back.
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let r = http(
            &server.http,
            "GET /repo.git/info/refs?service=git-upload-pack HTTP/1.1",
            b"",
        );
        if r.status == 200 {
            break;
        }
        assert!(Instant::now() < deadline, "slot never freed: {}", r.status);
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Asks for a clone of `main` over a raw connection and hangs up after the first bytes of
/// the answer.
fn hang_up_mid_clone(f: &Fixture, server: &Server) {
    let head = f.repo.git_str(&["rev-parse", "main"]);
    let mut body = pkt("command=fetch\n");
    body.extend_from_slice(b"0001");
    body.extend(pkt(&format!("want {head}\n")));
    body.extend(pkt("done\n"));
    body.extend_from_slice(b"0000");
    let mut s = TcpStream::connect(&server.http).unwrap();
    let req = format!(
        "{V2_POST}\r\nHost: x\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    s.write_all(req.as_bytes()).unwrap();
    s.write_all(&body).unwrap();
    let mut buf = [0u8; 100];
    let _ = s.read(&mut buf);
}

#[test]
fn client_hangup_mid_clone_leaves_server_healthy() {
    let f = Fixture::new();
    let mut server = Server::start(&f.sandbox, &f.root, &[]);
    for _ in 0..5 {
        hang_up_mid_clone(&f, &server);
    }
    assert!(server.alive(), "server died:\n{}", server.log_text());
    let expected = f.ls_remote("2", f.repo.path.to_str().unwrap());
    assert_eq!(f.ls_remote("2", &server.http_url("repo.git")), expected);
    assert!(
        !server.log_text().contains("panicked"),
        "{}",
        server.log_text()
    );
}

#[test]
fn client_that_stops_reading_is_dropped_after_idle_timeout() {
    let f = Fixture::new();
    // 8 MB of incompressible blobs: more than the socket buffers and the server's queue hold.
    let mut fi = common::FastImport::with_time(1_800_000_000);
    let mut rng = common::Rng::new(7);
    let changes: Vec<common::Change> = (0..8)
        .map(|i| common::inline(&format!("big{i}.bin"), rng.bytes(1 << 20)))
        .collect();
    fi.commit("refs/heads/big", None, "big\n", &changes);
    f.repo.fast_import(&fi.finish());
    let big = f.repo.git_str(&["rev-parse", "big"]);
    let mut server = Server::start(&f.sandbox, &f.root, &["--idle-timeout", "1"]);
    let mut body = pkt("command=fetch\n");
    body.extend_from_slice(b"0001");
    body.extend(pkt(&format!("want {big}\n")));
    body.extend(pkt("no-progress\n"));
    body.extend(pkt("done\n"));
    body.extend_from_slice(b"0000");
    let mut s = TcpStream::connect(&server.http).unwrap();
    let req = format!(
        "{V2_POST}\r\nHost: x\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    s.write_all(req.as_bytes()).unwrap();
    s.write_all(&body).unwrap();
    // Read nothing: the server must give up on this request within a few idle timeouts.
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let log = server.log_text();
        if log.contains("method=POST") {
            assert!(
                log.contains("client") || log.contains("failed"),
                "a stalled request was logged as fine:\n{log}"
            );
            break;
        }
        assert!(
            Instant::now() < deadline,
            "stalled request never ended:\n{log}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    drop(s);
    assert!(server.alive());
    let expected = f.ls_remote("2", f.repo.path.to_str().unwrap());
    assert_eq!(f.ls_remote("2", &server.http_url("repo.git")), expected);
}

/// A repository whose bitmap is in its alternate's pack (`git clone --shared`) keeps its
/// fill-in walk too, and cleans up against the alternate's bitmaps: a walk file kept for a
/// bitmap that is not there is removed when the walk is kept (the walk's own file is written).
/// (Listed against the repository's own `pack/`, which is empty, nothing would be removed.)
#[test]
fn a_walk_kept_for_an_alternates_bitmap_is_cleaned_up_against_the_alternate() {
    let (f, expected) = pull_requests_left_to_a_fill_in_walk();
    let shared = f.sandbox.path().join("shared.git");
    f.git(&[
        "clone",
        "-q",
        "--mirror",
        "--shared",
        f.repo.path.to_str().unwrap(),
        shared.to_str().unwrap(),
    ])
    .assert_success();
    assert!(
        common::files_in(&shared.join("objects").join("pack")).is_empty(),
        "no pack of its own"
    );
    let walk_dir = shared.join("packd-cache").join("walk");
    std::fs::create_dir_all(&walk_dir).unwrap();
    let stale = walk_dir.join(format!("{}.walk", "ab".repeat(20)));
    std::fs::write(&stale, b"kept for a bitmap long gone").unwrap();
    let dst = f.sandbox.path().join("from-shared.git");
    let err = mirror_clone_by_upload_pack(&f, &shared, &dst, &expected);
    assert!(err.contains("kept in"), "{err}");
    assert!(!stale.exists(), "the stale walk file is removed");
    assert_eq!(
        common::files_in(&walk_dir).len(),
        1,
        "only the walk's own file, just written: {:?}",
        common::files_in(&walk_dir)
    );
}
