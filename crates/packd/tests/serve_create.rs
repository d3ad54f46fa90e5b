//! `packd serve --create-on-push`: which requests may make a repository, where, and what a
//! first push that takes no ref leaves behind, over HTTP and git://, driven by the real git
//! client and by raw requests (bad packs, refused commands, a client hanging up mid-pack).

mod common;
mod serve_support;

use common::{hex, PackWriter, Repo, Sandbox};
use serve_support::{http, pkt, Server};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::time::Duration;

const OBJ_COMMIT: u8 = 1;
const OBJ_TREE: u8 = 2;
const OBJ_BLOB: u8 = 3;
const ZERO: &str = "0000000000000000000000000000000000000000";

/// A served root (`ROOT/victim.git` filled by git itself) and a client with two commits.
fn setup(sb: &Sandbox) -> (PathBuf, Repo) {
    let root = sb.path().join("root");
    std::fs::create_dir_all(&root).unwrap();
    let client = sb.init("client");
    for text in ["one\n", "two\n"] {
        std::fs::write(client.path.join("f"), text).unwrap();
        client.git(&["add", "f"]);
        client.git(&["commit", "-q", "-m", text.trim()]);
    }
    sb.git_in(&root, &["init", "-q", "--bare", "victim.git"]);
    let victim = root.join("victim.git");
    client.git(&["push", "-q", victim.to_str().unwrap(), "main"]);
    (root, client)
}

/// Every path under `dir` (directories too), relative, sorted.
fn tree(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        // The server may be removing what a refused push made while this walks: what is gone
        // by the time it is looked at is left out (the callers poll until the tree settles).
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for entry in entries {
            let Ok(entry) = entry else { continue };
            let path = entry.path();
            let Ok(meta) = path.symlink_metadata() else {
                continue;
            };
            if meta.is_dir() {
                todo.push(path.clone());
            }
            out.push(path.strip_prefix(dir).unwrap().display().to_string());
        }
    }
    out.sort();
    out
}

/// A pack of one commit (a blob, a tree, the commit) made by hand, and the commit's id.
fn commit_pack(message: &str) -> (Vec<u8>, String) {
    let mut w = PackWriter::new();
    let (blob, _) = w.object(OBJ_BLOB, message.as_bytes());
    let mut tree = b"100644 f\0".to_vec();
    tree.extend_from_slice(&blob);
    let (tree, _) = w.object(OBJ_TREE, &tree);
    let commit = format!(
        "tree {}\nauthor A <a@b> 1700000000 +0000\ncommitter A <a@b> 1700000000 +0000\n\n{message}\n",
        hex(&tree)
    );
    let (commit, _) = w.object(OBJ_COMMIT, commit.as_bytes());
    (w.finish().0, hex(&commit))
}

/// A push request: `command` (with report-status), a flush, then `pack`.
fn push_body(command: &str, pack: &[u8]) -> Vec<u8> {
    let mut body = pkt(&format!("{command}\0report-status\n"));
    body.extend_from_slice(b"0000");
    body.extend_from_slice(pack);
    body
}

/// `POST /PATH/git-receive-pack` with `body`; the status and the answer.
fn http_push(server: &Server, path: &str, body: &[u8]) -> (u16, String) {
    let head = format!(
        "POST /{path}/git-receive-pack HTTP/1.1\r\n\
         Content-Type: application/x-git-receive-pack-request"
    );
    let resp = http(&server.http, &head, body);
    (resp.status, resp.text())
}

/// A git:// push to `/PATH`: reads the advertisement, sends `body` (then closes the sending
/// half when `hang_up`), and returns the advertisement and what came after it.
fn daemon_push(server: &Server, path: &str, body: &[u8], hang_up: bool) -> (String, String) {
    let mut s = TcpStream::connect(&server.git).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    s.write_all(&pkt(&format!("git-receive-pack /{path}\0host=localhost\0")))
        .unwrap();
    let mut advertisement = Vec::new();
    loop {
        let mut len = [0u8; 4];
        if s.read_exact(&mut len).is_err() {
            break;
        }
        advertisement.extend_from_slice(&len);
        let n = usize::from_str_radix(std::str::from_utf8(&len).unwrap(), 16).unwrap();
        if n == 0 {
            break;
        }
        let mut payload = vec![0u8; n - 4];
        s.read_exact(&mut payload).unwrap();
        advertisement.extend_from_slice(&payload);
        if payload.starts_with(b"ERR ") {
            break;
        }
    }
    let _ = s.write_all(body);
    if hang_up {
        let _ = s.shutdown(std::net::Shutdown::Write);
    }
    let mut rest = Vec::new();
    let _ = s.read_to_end(&mut rest);
    (
        String::from_utf8_lossy(&advertisement).into_owned(),
        String::from_utf8_lossy(&rest).into_owned(),
    )
}

#[test]
fn a_push_inside_a_repository_is_refused_and_a_get_creates_nothing() {
    let sb = Sandbox::new();
    let (root, client) = setup(&sb);
    let server = Server::start(&sb, &root, &["--allow-push", "--create-on-push"]);
    let before = tree(&root);
    let (pack, tip) = commit_pack("intruder");
    for target in [
        "victim.git/refs/heads/x.git",
        "victim.git/refs/heads/x",
        "victim.git/objects/x.git",
        "victim.git/new.git",
    ] {
        for query in [
            "info/refs?service=git-receive-pack",
            "info/refs?service=git-upload-pack",
            "info/refs",
            "HEAD",
        ] {
            let resp = http(
                &server.http,
                &format!("GET /{target}/{query} HTTP/1.1"),
                b"",
            );
            assert!(resp.status >= 400, "GET {target}/{query}: {}", resp.status);
        }
        let resp = http(
            &server.http,
            &format!("GET /{target}/info/refs?service=git-receive-pack HTTP/1.1"),
            b"",
        );
        assert_eq!(resp.status, 403, "{target}: {}", resp.text());
        assert!(
            resp.text().contains("inside the repository"),
            "{}",
            resp.text()
        );
        let run = client.git_run(&["push", &server.http_url(target), "main"], None);
        assert!(!run.success(), "{target}: pushed");
        let run = client.git_run(&["push", &server.git_url(target), "main"], None);
        assert!(!run.success(), "{target}: pushed over git://");
        assert!(run.err().contains("inside the repository"), "{}", run.err());
        // Straight to the POST, as git never would.
        let (status, answer) = http_push(
            &server,
            target,
            &push_body(&format!("{ZERO} {tip} refs/heads/main"), &pack),
        );
        assert_eq!(status, 403, "{target}: {answer}");
        assert_eq!(tree(&root), before, "{target}: something was made");
    }
    // An advertisement of a path a push may create is an empty repository's, and makes
    // nothing.
    let resp = http(
        &server.http,
        "GET /fresh.git/info/refs?service=git-receive-pack HTTP/1.1",
        b"",
    );
    assert_eq!(resp.status, 200, "{}", resp.text());
    assert!(
        resp.text().contains(&format!("{ZERO} capabilities^{{}}\0")),
        "{}",
        resp.text()
    );
    let resp = http(
        &server.http,
        "GET /fresh.git/info/refs?service=git-upload-pack HTTP/1.1",
        b"",
    );
    assert_eq!(resp.status, 404, "{}", resp.text());
    assert_eq!(tree(&root), before, "an advertisement made something");
    // victim is untouched and still clones.
    let back = sb.path().join("back");
    sb.git_in(
        sb.path(),
        &[
            "clone",
            "-q",
            &server.http_url("victim.git"),
            back.to_str().unwrap(),
        ],
    );
    assert_eq!(
        sb.git_in(&back, &["rev-parse", "origin/main"]),
        client.git(&["rev-parse", "main"])
    );
}

#[test]
fn git_daemon_creates_on_push_with_allow_push_only() {
    let sb = Sandbox::new();
    let (root, client) = setup(&sb);
    let server = Server::start(&sb, &root, &["--create-on-push"]);
    let run = client.git_run(&["push", &server.git_url("team/new.git"), "main"], None);
    assert!(!run.success());
    assert!(
        run.err().contains("pushing is not enabled"),
        "{}",
        run.err()
    );
    assert!(!root.join("team").exists());
    drop(server);

    let server = Server::start(&sb, &root, &["--allow-push", "--create-on-push"]);
    client
        .git_run(&["push", &server.git_url("team/new.git"), "main"], None)
        .assert_success();
    let created = root.join("team/new.git");
    let main = sb.git_in(&created, &["rev-parse", "refs/heads/main"]);
    assert_eq!(main, client.git(&["rev-parse", "main"]));
    sb.git_in(&created, &["fsck", "--strict", "--no-progress"]);
    // The next push goes into it, and it clones over both transports.
    client.git(&["commit", "-q", "--allow-empty", "-m", "three"]);
    client
        .git_run(&["push", &server.git_url("team/new"), "main"], None)
        .assert_success();
    for url in [
        server.git_url("team/new.git"),
        server.http_url("team/new.git"),
    ] {
        let out = sb.git_in(sb.path(), &["ls-remote", &url, "refs/heads/main"]);
        assert!(
            String::from_utf8_lossy(&out)
                .starts_with(client.git_str(&["rev-parse", "main"]).as_str()),
            "{url}"
        );
    }
}

#[test]
fn a_first_push_that_takes_no_ref_leaves_nothing_over_both_transports() {
    let sb = Sandbox::new();
    let (root, client) = setup(&sb);
    std::fs::create_dir_all(root.join("team")).unwrap();
    std::fs::write(root.join("file.git"), "not a repository\n").unwrap();
    let server = Server::start(&sb, &root, &["--allow-push", "--create-on-push"]);
    let before = tree(&root);

    // Something in the way: refused before anything is made.
    for url in [server.http_url("file.git"), server.git_url("file.git")] {
        let run = client.git_run(&["push", &url, "main"], None);
        assert!(!run.success(), "{url}");
    }
    assert_eq!(
        std::fs::read_to_string(root.join("file.git")).unwrap(),
        "not a repository\n"
    );
    assert_eq!(tree(&root), before);

    let (pack, tip) = commit_pack("first");
    let mut bad = pack.clone();
    let last = bad.len() - 1;
    bad[last] ^= 0xff;
    let create = format!("{ZERO} {tip} refs/heads/main");
    // The old value claimed does not match (the ref does not exist): refused.
    let stale = format!("{tip} {tip} refs/heads/main");
    let cases: [(&str, &str, &[u8]); 3] = [
        ("a bad pack", &create, &bad),
        ("a refused command", &stale, &pack),
        ("half a pack", &create, &pack[..pack.len() / 2]),
    ];
    for (i, (what, command, pack)) in cases.into_iter().enumerate() {
        let body = push_body(command, pack);
        let hang_up = what == "half a pack";
        // Into a parent that exists (it stays) and into parents that do not (they go).
        for path in [format!("team/new{i}.git"), format!("a{i}/b/new.git")] {
            let (advertisement, report) = daemon_push(&server, &path, &body, hang_up);
            assert!(
                advertisement.contains("capabilities^{}"),
                "{what}, {path}: {advertisement}"
            );
            if !hang_up {
                assert!(
                    report.contains("ng refs/heads/main"),
                    "{what}, {path}: {report}"
                );
            }
            if hang_up {
                // Wait for the server to see the end of the pack and clean up.
                let deadline = std::time::Instant::now() + Duration::from_secs(10);
                while tree(&root) != before && std::time::Instant::now() < deadline {
                    std::thread::sleep(Duration::from_millis(20));
                }
            }
            assert_eq!(tree(&root), before, "git://, {what}, {path}: left behind");

            if !hang_up {
                let (status, report) = http_push(&server, &path, &body);
                assert_eq!(status, 200, "{what}, {path}: {report}");
                assert!(
                    report.contains("ng refs/heads/main"),
                    "{what}, {path}: {report}"
                );
                assert_eq!(tree(&root), before, "HTTP, {what}, {path}: left behind");
            }
        }
    }
    // A client that hangs up mid-body over HTTP.
    let mut s = TcpStream::connect(&server.http).unwrap();
    let body = push_body(&create, &pack);
    let head = format!(
        "POST /team/gone.git/git-receive-pack HTTP/1.1\r\nHost: x\r\n\
         Content-Type: application/x-git-receive-pack-request\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    s.write_all(head.as_bytes()).unwrap();
    s.write_all(&body[..body.len() / 2]).unwrap();
    std::thread::sleep(Duration::from_millis(200));
    drop(s);
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while tree(&root) != before && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(tree(&root), before, "HTTP, hung up: left behind");

    // git's own push, every command refused (a ref hidden by the server's configuration):
    // the client, which exits once it read the report, finds nothing left.
    let mut config = std::fs::read_to_string(sb.home.join(".gitconfig")).unwrap();
    config.push_str("[receive]\n\thideRefs = refs/hidden\n");
    std::fs::write(sb.home.join(".gitconfig"), config).unwrap();
    for url in [
        server.http_url("team/hidden.git"),
        server.git_url("a/hidden.git"),
    ] {
        let run = client.git_run(&["push", &url, "main:refs/hidden/x"], None);
        assert!(!run.success(), "{url}");
        assert!(
            run.err().contains("deny updating a hidden ref"),
            "{}",
            run.err()
        );
        assert_eq!(tree(&root), before, "{url}: left behind");
    }

    // The same pack and command, whole, create the repository over both.
    for (path, url) in [
        ("team/http.git", server.http_url("team/http.git")),
        ("team/git.git", server.git_url("team/git.git")),
    ] {
        client
            .git_run(&["push", &url, "main"], None)
            .assert_success();
        assert_eq!(
            sb.git_in(&root.join(path), &["rev-parse", "main"]),
            client.git(&["rev-parse", "main"])
        );
    }
}
