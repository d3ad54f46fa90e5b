//! `packd serve`: once a push is acknowledged, every later request, on any connection, sees
//! its objects. Raw HTTP requests (a push of a hand-made pack, then a protocol v2 fetch of its
//! tip on a new connection) in a loop, while another connection keeps asking for the
//! advertisement (each request takes the repository from the server's cache, reopening it when
//! its packs changed).

mod common;
mod serve_support;

use common::{hex, PackWriter, Sandbox};
use serve_support::{http, pkt, Server};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

const OBJ_COMMIT: u8 = 1;
const OBJ_TREE: u8 = 2;
const OBJ_BLOB: u8 = 3;
const ZERO: &str = "0000000000000000000000000000000000000000";

/// A pack of commit number `n` on top of `parent` (a blob of its own, a tree, the commit),
/// and the commit's id.
fn commit_pack(n: usize, parent: &str) -> (Vec<u8>, String) {
    let mut w = PackWriter::new();
    let (blob, _) = w.object(OBJ_BLOB, format!("version {n}\n").as_bytes());
    let mut tree = b"100644 f\0".to_vec();
    tree.extend_from_slice(&blob);
    let (tree, _) = w.object(OBJ_TREE, &tree);
    let parent_line = if parent == ZERO {
        String::new()
    } else {
        format!("parent {parent}\n")
    };
    let commit = format!(
        "tree {}\n{parent_line}author A <a@b> 1700000000 +0000\n\
         committer A <a@b> 1700000000 +0000\n\n{n}\n",
        hex(&tree)
    );
    let (commit, _) = w.object(OBJ_COMMIT, commit.as_bytes());
    (w.finish().0, hex(&commit))
}

#[test]
fn a_fetch_right_after_an_acknowledged_push_finds_its_objects() {
    let sb = Sandbox::new();
    let root = sb.path().join("root");
    std::fs::create_dir_all(&root).unwrap();
    sb.git_in(&root, &["init", "-q", "--bare", "r.git"]);
    let server = Server::start(&sb, &root, &["--allow-push"]);
    let stop = AtomicBool::new(false);
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut failures = Vec::new();
    let mut rounds = 0;
    std::thread::scope(|scope| {
        scope.spawn(|| {
            while !stop.load(Ordering::Relaxed) {
                let resp = http(
                    &server.http,
                    "GET /r.git/info/refs?service=git-upload-pack HTTP/1.1",
                    b"",
                );
                assert_eq!(resp.status, 200, "{}", resp.text());
            }
        });
        let mut old = ZERO.to_string();
        for n in 0..300 {
            if Instant::now() > deadline {
                break;
            }
            let (pack, tip) = commit_pack(n, &old);
            let mut push = pkt(&format!("{old} {tip} refs/heads/main\0report-status\n"));
            push.extend_from_slice(b"0000");
            push.extend_from_slice(&pack);
            let resp = http(
                &server.http,
                "POST /r.git/git-receive-pack HTTP/1.1\r\n\
                 Content-Type: application/x-git-receive-pack-request",
                &push,
            );
            assert!(
                resp.text().contains("ok refs/heads/main"),
                "push {n}: {}",
                resp.text()
            );
            let mut fetch = pkt("command=fetch\n");
            fetch.extend_from_slice(b"0001");
            fetch.extend(pkt("no-progress\n"));
            fetch.extend(pkt(&format!("want {tip}\n")));
            fetch.extend(pkt("done\n"));
            fetch.extend_from_slice(b"0000");
            let resp = http(
                &server.http,
                "POST /r.git/git-upload-pack HTTP/1.1\r\n\
                 Content-Type: application/x-git-upload-pack-request\r\nGit-Protocol: version=2",
                &fetch,
            );
            let got_pack = resp.status == 200 && resp.body.windows(4).any(|w| w == b"PACK");
            if !got_pack {
                failures.push(format!(
                    "fetch {n}: {}",
                    common::truncate(&resp.text(), 300)
                ));
            }
            old = tip;
            rounds += 1;
        }
        stop.store(true, Ordering::Relaxed);
    });
    assert!(
        failures.is_empty(),
        "{} of {rounds} fetches failed: {failures:#?}",
        failures.len()
    );
    assert!(rounds >= 50, "only {rounds} rounds in the time given");
}

/// A protocol v2 fetch of `tip` from `r.git` over HTTP: whether a pack came.
fn fetch_gets_a_pack(server: &Server, tip: &str) -> Result<(), String> {
    let mut fetch = pkt("command=fetch\n");
    fetch.extend_from_slice(b"0001");
    fetch.extend(pkt("no-progress\n"));
    fetch.extend(pkt(&format!("want {tip}\n")));
    fetch.extend(pkt("done\n"));
    fetch.extend_from_slice(b"0000");
    let resp = http(
        &server.http,
        "POST /r.git/git-upload-pack HTTP/1.1\r\n\
         Content-Type: application/x-git-upload-pack-request\r\nGit-Protocol: version=2",
        &fetch,
    );
    if resp.status == 200 && resp.body.windows(4).any(|w| w == b"PACK") {
        Ok(())
    } else {
        Err(common::truncate(&resp.text(), 300))
    }
}

/// No stamp of `r.git` shows a pack added to the repository its objects borrow from
/// (`objects/info/alternates`): a want the cached repository lacks makes the server look again,
/// as git does.
#[test]
fn a_want_missing_from_the_cached_repository_is_looked_for_again() {
    let sb = Sandbox::new();
    let root = sb.path().join("root");
    std::fs::create_dir_all(&root).unwrap();
    sb.git_in(&root, &["init", "-q", "--bare", "shared.git"]);
    let shared = root.join("shared.git");
    // Pushes into it stay packs (git would store a few objects loose).
    sb.git_in(&shared, &["config", "transfer.unpackLimit", "1"]);
    let client = sb.init("client");
    client.git(&["commit", "-q", "--allow-empty", "-m", "one"]);
    client.git(&["push", "-q", shared.to_str().unwrap(), "main"]);
    sb.git_in(&root, &["init", "-q", "--bare", "r.git"]);
    let r = root.join("r.git");
    let alternate = format!("{}\n", shared.join("objects").display());
    std::fs::write(r.join("objects/info/alternates"), alternate).unwrap();
    let one = client.git_str(&["rev-parse", "main"]);
    sb.git_in(&r, &["update-ref", "refs/heads/main", &one]);
    let server = Server::start(&sb, &root, &[]);
    fetch_gets_a_pack(&server, &one).unwrap();
    // A new commit lands in the alternate, and r.git's ref moves to it.
    client.git(&["commit", "-q", "--allow-empty", "-m", "two"]);
    client.git(&["push", "-q", shared.to_str().unwrap(), "main"]);
    let two = client.git_str(&["rev-parse", "main"]);
    sb.git_in(&r, &["update-ref", "refs/heads/main", &two]);
    fetch_gets_a_pack(&server, &two).unwrap();
}
