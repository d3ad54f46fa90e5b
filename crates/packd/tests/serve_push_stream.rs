//! Pushes over smart HTTP whose pack is streamed into receive-pack: a pack larger than
//! `--max-request-bytes` lands (the commands alone are bounded by it), `--max-push-bytes`
//! refuses a larger pack with git's own error and leaves nothing behind, a client that hangs up
//! mid-body leaves no quarantine, progress reaches git's stderr unless it is quiet, and the
//! access log lines carry RFC 3339 UTC times. Real git client throughout.

mod common;
mod serve_support;

use common::{FastImport, Repo, Rng, Sandbox};
use serve_support::{http, pkt, Server};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::time::{Duration, Instant};

const ZERO: &str = "0000000000000000000000000000000000000000";

/// A served root with an empty bare `srv.git`, and a client repository whose `main` holds
/// `mib` MiB of random (incompressible) blobs on top of a small first commit `small`.
fn setup(sb: &Sandbox, mib: usize) -> (PathBuf, Repo, Repo) {
    let root = sb.path().join("root");
    std::fs::create_dir_all(&root).unwrap();
    let server = sb.init_bare("root/srv.git");
    let client = sb.init_bare("client.git");
    let mut rng = Rng::new(33);
    let mut fi = FastImport::new();
    let first = fi.commit(
        "refs/heads/main",
        None,
        "small\n",
        &[common::inline("readme", "hello\n")],
    );
    fi.reset("refs/heads/small", &format!(":{first}"));
    let blobs: Vec<common::Change> = (0..mib)
        .map(|i| common::inline(&format!("blob{i}.bin"), rng.bytes(1 << 20)))
        .collect();
    fi.commit(
        "refs/heads/main",
        Some(&format!(":{first}")),
        "big\n",
        &blobs,
    );
    client.fast_import(&fi.finish());
    (root, server, client)
}

fn refs(repo: &Repo) -> String {
    String::from_utf8(repo.git_run(&["show-ref"], None).stdout).unwrap()
}

fn quarantines(repo: &Repo) -> Vec<String> {
    let names = |dir: std::path::PathBuf| -> Vec<String> {
        std::fs::read_dir(dir)
            .map(|d| {
                d.flatten()
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default()
    };
    let mut found: Vec<String> = names(repo.objects_dir())
        .into_iter()
        .filter(|n| n.starts_with("incoming-"))
        .collect();
    found.extend(
        names(repo.objects_dir().join("pack"))
            .into_iter()
            .filter(|n| n.starts_with("tmp_incoming_")),
    );
    found
}

fn fsck(repo: &Repo) {
    repo.git(&["fsck", "--strict", "--no-progress", "--no-dangling"]);
    assert_eq!(quarantines(repo), Vec::<String>::new(), "quarantine left");
}

/// Whether `line` starts with an RFC 3339 UTC time (`2026-11-23T11:15:13.485096Z`).
fn starts_with_utc_time(line: &str) -> bool {
    let Some((time, _)) = line.split_once(' ') else {
        return false;
    };
    let b = time.as_bytes();
    b.len() >= 20
        && b[4] == b'-'
        && b[7] == b'-'
        && b[10] == b'T'
        && b[13] == b':'
        && b[16] == b':'
        && time.ends_with('Z')
        && [0, 1, 2, 3, 5, 6, 8, 9, 11, 12, 14, 15, 17, 18]
            .iter()
            .all(|&i| b[i].is_ascii_digit())
}

/// Waits (a few seconds at most) until the server's log mentions `what`.
fn wait_for_log(server: &Server, what: &str) -> String {
    let start = Instant::now();
    loop {
        let log = server.log_text();
        if log.contains(what) || start.elapsed() > Duration::from_secs(20) {
            return log;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn pack_larger_than_the_request_limit_is_streamed_in_with_progress() {
    let sb = Sandbox::new();
    let (root, server, client) = setup(&sb, 5);
    let srv = Server::start(&sb, &root, &["--allow-push", "--max-request-bytes", "1m"]);
    let url = srv.http_url("srv.git");
    // stderr is not a terminal: git asks for quiet, unless --progress.
    let quiet = client.git_run(&["push", &url, "small"], None);
    quiet.assert_success();
    assert!(
        !quiet.err().contains("Resolving deltas") && !quiet.err().contains("remote: Checking"),
        "progress despite quiet:\n{}",
        quiet.err()
    );
    let run = client.git_run(&["push", "--progress", &url, "main"], None);
    run.assert_success();
    let err = run.err();
    assert!(
        err.contains("remote: Resolving deltas: 100% (") && err.contains(", done."),
        "no resolving progress:\n{err}"
    );
    assert!(
        err.contains("remote: Checking connectivity: "),
        "no connectivity progress:\n{err}"
    );
    assert_eq!(
        server.git_str(&["rev-parse", "refs/heads/main"]),
        client.git_str(&["rev-parse", "refs/heads/main"])
    );
    let pack_bytes: u64 = server
        .packs()
        .iter()
        .map(|p| std::fs::metadata(p).unwrap().len())
        .sum();
    assert!(pack_bytes > 5 << 20, "{pack_bytes} bytes of packs");
    fsck(&server);

    // Every access log line starts with its time.
    let log = srv.log_text();
    let lines: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("packd_serve::access"))
        .collect();
    assert!(lines.len() >= 4, "{log}");
    for line in lines {
        assert!(starts_with_utc_time(line), "no RFC 3339 time: {line}");
    }
}

#[test]
fn pack_over_max_push_bytes_is_refused_and_leaves_nothing() {
    let sb = Sandbox::new();
    let (root, server, client) = setup(&sb, 5);
    let srv = Server::start(&sb, &root, &["--allow-push", "--max-push-bytes", "1m"]);
    let url = srv.http_url("srv.git");
    client
        .git_run(&["push", &url, "small:refs/heads/main"], None)
        .assert_success();
    let before_refs = refs(&server);
    let before_packs = server.packs();
    let run = client.git_run(&["push", &url, "main"], None);
    assert!(!run.success(), "a push over the limit went through");
    assert!(
        run.err()
            .contains("the pack is larger than the 1048576 bytes allowed"),
        "unclear refusal:\n{}",
        run.err()
    );
    assert!(run.err().contains("[remote rejected]"), "{}", run.err());
    assert!(
        !run.err().contains(root.to_str().unwrap()),
        "the refusal names the server's own paths:\n{}",
        run.err()
    );
    assert_eq!(refs(&server), before_refs);
    assert_eq!(server.packs(), before_packs);
    fsck(&server);
    // git:// has the same bound.
    let run = client.git_run(&["push", &srv.git_url("srv.git"), "main"], None);
    assert!(!run.success(), "a push over the limit went through git://");
    assert!(
        run.err()
            .contains("the pack is larger than the 1048576 bytes allowed"),
        "unclear refusal over git://:\n{}",
        run.err()
    );
    assert_eq!(refs(&server), before_refs);
    assert_eq!(server.packs(), before_packs);
    fsck(&server);
    let help = server.packd(&["serve", "--help"], None);
    assert!(
        help.out().contains("--max-push-bytes <BYTES>") && help.out().contains("[default: 4g]"),
        "{}",
        help.out()
    );
}

/// Sends a push of `pack`'s first `send` bytes (of a body declaring all of it), waits `wait`
/// and hangs up.
fn hang_up_mid_body(addr: &str, tip: &str, pack: &[u8], send: usize, wait: Duration) {
    let mut body = pkt(&format!(
        "{ZERO} {tip} refs/heads/main\0report-status side-band-64k\n"
    ));
    body.extend_from_slice(b"0000");
    let total = body.len() + pack.len();
    body.extend_from_slice(&pack[..send]);
    let mut s = TcpStream::connect(addr).unwrap();
    write!(
        s,
        "POST /srv.git/git-receive-pack HTTP/1.1\r\nHost: {addr}\r\n\
         Content-Type: application/x-git-receive-pack-request\r\n\
         Content-Length: {total}\r\n\r\n"
    )
    .unwrap();
    s.write_all(&body).unwrap();
    s.flush().unwrap();
    std::thread::sleep(wait);
    drop(s);
}

#[test]
fn client_gone_mid_body_leaves_no_quarantine() {
    let sb = Sandbox::new();
    let (root, server, client) = setup(&sb, 3);
    let srv = Server::start(&sb, &root, &["--allow-push"]);
    let tip = client.git_str(&["rev-parse", "refs/heads/main"]);
    let pack = client.git_stdin(
        &["pack-objects", "--stdout", "--revs"],
        b"refs/heads/main\n",
    );
    assert!(pack.len() > 3 << 20);
    hang_up_mid_body(
        &srv.http,
        &tip,
        &pack,
        pack.len() / 2,
        Duration::from_millis(200),
    );
    let log = wait_for_log(&srv, "client gone");
    assert!(log.contains("client gone"), "{log}");
    assert_eq!(refs(&server), "");
    assert_eq!(quarantines(&server), Vec::<String>::new());
    assert!(server.packs().is_empty());

    // The next push is whole.
    let url = srv.http_url("srv.git");
    client
        .git_run(&["push", &url, "main"], None)
        .assert_success();
    assert_eq!(server.git_str(&["rev-parse", "refs/heads/main"]), tip);
    fsck(&server);
    assert!(srv.log_text().contains("objects="), "{}", srv.log_text());
}

#[test]
fn commands_over_the_request_limit_get_413_and_gzip_bodies_stream() {
    let sb = Sandbox::new();
    let (root, server, client) = setup(&sb, 1);
    let srv = Server::start(&sb, &root, &["--allow-push", "--max-request-bytes", "2k"]);
    let tip = client.git_str(&["rev-parse", "refs/heads/main"]);
    let mut body = Vec::new();
    for i in 0..100 {
        body.extend(pkt(&format!("{ZERO} {tip} refs/heads/b{i}\n")));
    }
    body.extend_from_slice(b"0000");
    let resp = http(
        &srv.http,
        "POST /srv.git/git-receive-pack HTTP/1.1\r\n\
         Content-Type: application/x-git-receive-pack-request",
        &body,
    );
    assert_eq!(resp.status, 413, "{}", resp.text());
    assert!(
        resp.text().contains("limit of 2048 bytes"),
        "{}",
        resp.text()
    );
    assert_eq!(refs(&server), "");

    // A gzip body (commands and a 1 MiB pack, well over the 2k limit) is inflated as it is read.
    let pack = client.git_stdin(
        &["pack-objects", "--stdout", "--revs"],
        b"refs/heads/main\n",
    );
    let mut plain = pkt(&format!(
        "{ZERO} {tip} refs/heads/main\0report-status quiet\n"
    ));
    plain.extend_from_slice(b"0000");
    plain.extend_from_slice(&pack);
    let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    enc.write_all(&plain).unwrap();
    let gz = enc.finish().unwrap();
    let resp = http(
        &srv.http,
        "POST /srv.git/git-receive-pack HTTP/1.1\r\n\
         Content-Type: application/x-git-receive-pack-request\r\n\
         Content-Encoding: gzip",
        &gz,
    );
    assert_eq!(resp.status, 200, "{}", resp.text());
    let text = resp.text();
    assert!(text.contains("unpack ok"), "{text}");
    assert!(text.contains("ok refs/heads/main"), "{text}");
    assert_eq!(server.git_str(&["rev-parse", "refs/heads/main"]), tip);
    fsck(&server);
}

#[test]
fn client_stalled_mid_body_times_out_and_leaves_no_quarantine() {
    let sb = Sandbox::new();
    let (root, server, client) = setup(&sb, 1);
    let srv = Server::start(&sb, &root, &["--allow-push", "--idle-timeout", "1"]);
    let tip = client.git_str(&["rev-parse", "refs/heads/main"]);
    let pack = client.git_stdin(
        &["pack-objects", "--stdout", "--revs"],
        b"refs/heads/main\n",
    );
    // Stalls well past the idle timeout before hanging up.
    hang_up_mid_body(
        &srv.http,
        &tip,
        &pack,
        pack.len() / 3,
        Duration::from_secs(3),
    );
    let log = wait_for_log(&srv, "client gone");
    assert!(log.contains("the client sent nothing for 1s"), "{log}");
    assert_eq!(refs(&server), "");
    assert_eq!(quarantines(&server), Vec::<String>::new());
    assert!(server.packs().is_empty());
}

/// A TCP relay between git and the server that passes `cut_after` bytes from git upstream,
/// then stops reading, tells `cut` and, once told on `go`, closes the server's side.
fn cutting_relay(
    upstream: String,
    cut_after: u64,
) -> (
    String,
    std::sync::mpsc::Receiver<()>,
    std::sync::mpsc::Sender<()>,
) {
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::{mpsc, Arc, Mutex};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let (cut_tx, cut_rx) = mpsc::channel();
    let (go_tx, go_rx) = mpsc::channel::<()>();
    let go_rx = Arc::new(Mutex::new(go_rx));
    let sent = Arc::new(AtomicU64::new(0));
    std::thread::spawn(move || {
        for client in listener.incoming() {
            let Ok(mut client) = client else { return };
            let Ok(mut server) = TcpStream::connect(&upstream) else {
                return;
            };
            let (mut back_from, mut back_to) =
                (server.try_clone().unwrap(), client.try_clone().unwrap());
            std::thread::spawn(move || {
                let _ = std::io::copy(&mut back_from, &mut back_to);
            });
            let (sent, cut_tx, go_rx) = (sent.clone(), cut_tx.clone(), go_rx.clone());
            std::thread::spawn(move || {
                let mut buf = [0u8; 16 * 1024];
                loop {
                    let n = match client.read(&mut buf) {
                        Ok(0) | Err(_) => return,
                        Ok(n) => n,
                    };
                    if server.write_all(&buf[..n]).is_err() {
                        return;
                    }
                    if sent.fetch_add(n as u64, Ordering::SeqCst) + n as u64 > cut_after {
                        let _ = cut_tx.send(());
                        let _ = go_rx.lock().unwrap().recv();
                        let _ = server.shutdown(std::net::Shutdown::Both);
                        return;
                    }
                }
            });
        }
    });
    (addr, cut_rx, go_tx)
}

#[test]
fn git_killed_mid_push_leaves_no_quarantine() {
    let sb = Sandbox::new();
    let (root, server, client) = setup(&sb, 5);
    let srv = Server::start(&sb, &root, &["--allow-push"]);
    let (relay, cut, go) = cutting_relay(srv.http.clone(), 2 << 20);
    let mut git = client.git_cmd();
    git.args(["push", &format!("http://{relay}/srv.git"), "main"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    let mut git = git.spawn().unwrap();
    cut.recv_timeout(Duration::from_secs(60))
        .expect("git never sent 2 MiB");
    git.kill().unwrap();
    let _ = git.wait();
    go.send(()).unwrap();
    let log = wait_for_log(&srv, "client gone");
    assert!(log.contains("client gone"), "{log}");
    assert_eq!(refs(&server), "");
    assert!(server.packs().is_empty());

    // The next push lands, and nothing of the killed one is left.
    client
        .git_run(&["push", &srv.http_url("srv.git"), "main"], None)
        .assert_success();
    assert_eq!(
        server.git_str(&["rev-parse", "refs/heads/main"]),
        client.git_str(&["rev-parse", "refs/heads/main"])
    );
    fsck(&server);
}
