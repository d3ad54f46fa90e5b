//! `packd serve` stopped by SIGTERM or SIGINT: requests in flight finish within
//! `--shutdown-grace`, then it exits 0 with a log line; past the grace a push is cut off and
//! leaves nothing; a second signal stops it at once.

mod common;
mod serve_support;

use serve_support::{pkt, Fixture, Server};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

/// A v2 ls-refs request, whose body is sent in two halves around the signal.
fn ls_refs_request() -> (String, Vec<u8>) {
    let mut body = pkt("command=ls-refs\n");
    body.extend_from_slice(b"0001");
    body.extend(pkt("peel\n"));
    body.extend_from_slice(b"0000");
    let head = format!(
        "POST /repo.git/git-upload-pack HTTP/1.1\r\nHost: x\r\nGit-Protocol: version=2\r\n\
         Content-Type: application/x-git-upload-pack-request\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    (head, body)
}

#[test]
fn sigterm_lets_a_request_in_flight_finish_then_exits_0() {
    let f = Fixture::new();
    // The default log filter: the stop is logged without PACKD_LOG.
    let mut server = Server::start_logging(&f.sandbox, &f.root, &["--shutdown-grace", "20"], "");
    let (head, body) = ls_refs_request();
    let mut s = TcpStream::connect(&server.http).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    s.write_all(head.as_bytes()).unwrap();
    s.write_all(&body[..10]).unwrap();
    // An idle kept-alive connection does not hold the stop up.
    let mut idle = TcpStream::connect(&server.http).unwrap();
    idle.set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    std::thread::sleep(Duration::from_millis(300));
    server.signal(libc::SIGTERM);
    std::thread::sleep(Duration::from_millis(500));
    assert!(server.alive(), "stopped with a request in flight");
    // No new connection is taken.
    assert!(
        TcpStream::connect(&server.http).is_err() || server.wait_exit(Duration::ZERO).is_none()
    );
    s.write_all(&body[10..]).unwrap();
    let mut raw = Vec::new();
    let _ = s.read_to_end(&mut raw);
    let r = serve_support::parse_response(&raw);
    assert_eq!(r.status, 200);
    assert!(r.text().contains("refs/heads/main"), "{}", r.text());
    let status = server
        .wait_exit(Duration::from_secs(10))
        .expect("still running");
    assert_eq!(status.code(), Some(0), "{status}");
    let log = server.log_text();
    assert!(log.contains("SIGTERM: stopping"), "{log}");
    assert!(
        log.contains("stopped (0 connections were cut off)"),
        "{log}"
    );
    let mut buf = [0u8; 1];
    assert_eq!(
        idle.read(&mut buf).unwrap_or(0),
        0,
        "idle connection not closed"
    );
}

#[test]
fn sigint_on_an_idle_server_exits_0_at_once_even_with_silent_git_sockets() {
    let f = Fixture::new();
    let mut server = Server::start(&f.sandbox, &f.root, &["--shutdown-grace", "30"]);
    let _silent = TcpStream::connect(&server.git).unwrap();
    std::thread::sleep(Duration::from_millis(200));
    server.signal(libc::SIGINT);
    let status = server
        .wait_exit(Duration::from_secs(10))
        .expect("a silent git:// socket held the stop up");
    assert_eq!(status.code(), Some(0), "{status}");
    assert!(server.log_text().contains("SIGINT: stopping"));
}

#[test]
fn a_second_signal_stops_at_once() {
    let f = Fixture::new();
    let mut server = Server::start(&f.sandbox, &f.root, &["--shutdown-grace", "60"]);
    let (head, body) = ls_refs_request();
    let mut s = TcpStream::connect(&server.http).unwrap();
    s.write_all(head.as_bytes()).unwrap();
    s.write_all(&body[..10]).unwrap();
    std::thread::sleep(Duration::from_millis(300));
    server.signal(libc::SIGTERM);
    std::thread::sleep(Duration::from_millis(300));
    assert!(server.alive());
    server.signal(libc::SIGTERM);
    let status = server
        .wait_exit(Duration::from_secs(10))
        .expect("still running");
    assert_eq!(status.code(), Some(128 + libc::SIGTERM), "{status}");
    assert!(server
        .log_text()
        .contains("SIGTERM again: stopping at once"));
}

/// A push still sending its pack when the grace runs out is cut off: it fails like a broken
/// push, its quarantine is removed and no ref moves.
#[test]
fn a_push_cut_off_by_the_grace_leaves_nothing() {
    let f = Fixture::new();
    let mut server = Server::start(
        &f.sandbox,
        &f.root,
        &["--allow-push", "--shutdown-grace", "1"],
    );
    let before_refs = f.repo.git_str(&["for-each-ref"]);
    let pack_dir = f.repo.path.join("objects/pack");
    let before_files = common::files_in(&pack_dir);
    // A real pack, of which only the first half is sent.
    let tree = f.repo.git_str(&["rev-parse", "main^{tree}"]);
    let main = f.repo.git_str(&["rev-parse", "main"]);
    let commit = String::from_utf8(
        f.repo
            .git_stdin(&["commit-tree", &tree, "-p", &main], b"cut off\n"),
    )
    .unwrap()
    .trim()
    .to_string();
    let pack = f.repo.git_stdin(
        &["pack-objects", "--stdout", "--revs"],
        format!("{commit}\n^{main}\n").as_bytes(),
    );
    let mut body = pkt(&format!(
        "{main} {commit} refs/heads/main\0report-status side-band-64k\n"
    ));
    body.extend_from_slice(b"0000");
    body.extend_from_slice(&pack);
    let head = format!(
        "POST /repo.git/git-receive-pack HTTP/1.1\r\nHost: x\r\n\
         Content-Type: application/x-git-receive-pack-request\r\nContent-Length: {}\r\n\r\n",
        body.len() + 1000
    );
    let mut s = TcpStream::connect(&server.http).unwrap();
    s.write_all(head.as_bytes()).unwrap();
    s.write_all(&body[..body.len() - 10]).unwrap();
    std::thread::sleep(Duration::from_millis(500));
    server.signal(libc::SIGTERM);
    let status = server
        .wait_exit(Duration::from_secs(10))
        .expect("still running");
    assert_eq!(status.code(), Some(0), "{status}");
    let log = server.log_text();
    assert!(log.contains("cutting off 1 connections"), "{log}");
    assert_eq!(f.repo.git_str(&["for-each-ref"]), before_refs);
    assert_eq!(
        common::files_in(&pack_dir),
        before_files,
        "left in objects/pack"
    );
    let fsck = f.repo.git_run(&["fsck", "--strict"], None);
    fsck.assert_success();
}
