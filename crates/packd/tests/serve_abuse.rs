//! `packd serve` under abuse: gzip bombs, trickled requests, bad passwords, slots held by
//! silent sockets, and what git is told past the connection limits (HTTP 503, git:// ERR).

mod common;
mod serve_support;

use serve_support::{connect_from, http, pkt, Fixture, Server};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

const GET_REFS: &str = "GET /repo.git/info/refs?service=git-upload-pack HTTP/1.1";

/// `n` MiB of zeros, gzipped (about 1 KiB of gzip per MiB).
fn gzip_zeros(mib: usize) -> Vec<u8> {
    let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    let zeros = vec![0u8; 1 << 20];
    for _ in 0..mib {
        enc.write_all(&zeros).unwrap();
    }
    enc.finish().unwrap()
}

/// A gzip body that inflates to 256 MiB is inflated as a stream: the server's memory does not
/// grow by what it inflates to (held whole, it took the limit's worth, 200 MB, and more).
#[test]
fn a_gzip_bomb_costs_no_more_than_a_buffer() {
    let f = Fixture::new();
    let server = Server::start(&f.sandbox, &f.root, &["--max-request-bytes", "200m"]);
    let before = server.peak_rss_kib();
    let bomb = gzip_zeros(256);
    for _ in 0..2 {
        let head = "POST /repo.git/git-upload-pack HTTP/1.1\r\n\
                    Content-Type: application/x-git-upload-pack-request\r\n\
                    Content-Encoding: gzip";
        let r = http(&server.http, head, &bomb);
        // Not a pkt-line: upload-pack refuses it at once, or the inflated size is past the
        // limit; either way it is refused.
        assert!(r.status == 200 || r.status >= 400, "{}", r.status);
    }
    let after = server.peak_rss_kib();
    assert!(
        after < before + 64 * 1024,
        "peak RSS went from {before} KiB to {after} KiB"
    );
    // A bomb of a real request is refused at the limit, and the server still serves.
    let mut request = pkt("command=ls-refs\n");
    request.extend_from_slice(b"0001");
    let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    enc.write_all(&request).unwrap();
    let arg = pkt("peel\n");
    for _ in 0..(3 << 20) / arg.len() {
        enc.write_all(&arg).unwrap();
    }
    let gz = enc.finish().unwrap();
    let server = Server::start(&f.sandbox, &f.root, &["--max-request-bytes", "100k"]);
    let head = "POST /repo.git/git-upload-pack HTTP/1.1\r\nGit-Protocol: version=2\r\n\
                Content-Type: application/x-git-upload-pack-request\r\nContent-Encoding: gzip";
    let r = http(&server.http, head, &gz);
    assert_eq!(r.status, 413, "{}", r.text());
    assert!(r.text().contains("inflates to more than"), "{}", r.text());
    f.ls_remote("2", &server.http_url("repo.git"));
}

/// Sends `bytes` one at a time, `gap` apart, until the server answers or closes; what it
/// answered (empty when it closed without a word) and when.
fn trickle(addr: &str, bytes: &[u8], gap: Duration) -> (Vec<u8>, Duration) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let mut reader = s.try_clone().unwrap();
    let start = Instant::now();
    let got = std::thread::spawn(move || {
        let mut raw = Vec::new();
        let _ = reader.read_to_end(&mut raw);
        (raw, start.elapsed())
    });
    for b in bytes {
        if got.is_finished() || s.write_all(&[*b]).is_err() {
            break;
        }
        std::thread::sleep(gap);
    }
    got.join().unwrap()
}

/// A body trickled a byte at a time is cut off once it falls behind the minimum rate, though
/// each byte comes well within the idle timeout.
#[test]
fn a_trickled_body_is_cut_off() {
    let f = Fixture::new();
    let server = Server::start(
        &f.sandbox,
        &f.root,
        &["--idle-timeout", "1", "--min-request-rate", "100"],
    );
    let mut request = b"POST /repo.git/git-upload-pack HTTP/1.1\r\nHost: x\r\n\
                        Content-Type: application/x-git-upload-pack-request\r\n\
                        Content-Length: 200\r\n\r\n"
        .to_vec();
    let head_len = request.len();
    request.extend(std::iter::repeat_n(b'0', 200));
    // The head goes at once, then the body a byte every 400 ms (2.5 bytes/s).
    let mut s = TcpStream::connect(&server.http).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    s.write_all(&request[..head_len]).unwrap();
    let mut reader = s.try_clone().unwrap();
    let start = Instant::now();
    let got = std::thread::spawn(move || {
        let mut raw = Vec::new();
        let _ = reader.read_to_end(&mut raw);
        (raw, start.elapsed())
    });
    for b in &request[head_len..] {
        if got.is_finished() || s.write_all(&[*b]).is_err() {
            break;
        }
        std::thread::sleep(Duration::from_millis(400));
    }
    let (raw, when) = got.join().unwrap();
    let r = serve_support::parse_response(&raw);
    assert_eq!(r.status, 408, "{}", r.text());
    assert!(
        r.text().contains("minimum of 100 bytes a second"),
        "{}",
        r.text()
    );
    assert!(when < Duration::from_secs(10), "cut off after {when:?}");
}

/// Request headers trickled a byte at a time must arrive whole within the idle timeout (hyper's
/// header read timeout, a deadline for the whole head).
#[test]
fn trickled_headers_are_cut_off() {
    let f = Fixture::new();
    let server = Server::start(&f.sandbox, &f.root, &["--idle-timeout", "1"]);
    let request = format!("{GET_REFS}\r\nHost: x\r\nUser-Agent: slow\r\n\r\n");
    let (raw, when) = trickle(&server.http, request.as_bytes(), Duration::from_millis(200));
    let text = String::from_utf8_lossy(&raw);
    assert!(!text.contains("200 OK"), "served: {text}");
    assert!(when < Duration::from_secs(6), "cut off after {when:?}");
}

/// A git:// request line trickled a byte at a time must arrive whole within the idle timeout.
#[test]
fn a_trickled_git_request_line_is_cut_off() {
    let f = Fixture::new();
    let server = Server::start(&f.sandbox, &f.root, &["--idle-timeout", "1"]);
    let line = pkt("git-upload-pack /repo.git\0host=x\0");
    let (raw, when) = trickle(&server.git, &line, Duration::from_millis(300));
    let text = String::from_utf8_lossy(&raw);
    assert!(!text.contains("refs/heads/main"), "served: {text}");
    assert!(when < Duration::from_secs(6), "cut off after {when:?}");
}

/// A connection past `--max-connections` gets git's answers: over HTTP a 503 once its request
/// (body too) is read, so that the client reads it instead of a broken pipe; over git:// an
/// ERR line, which git shows as a remote error.
#[test]
fn past_the_limit_git_is_told_why() {
    let f = Fixture::new();
    let server = Server::start(&f.sandbox, &f.root, &["--max-connections", "1"]);
    let mut held = TcpStream::connect(&server.http).unwrap();
    held.write_all(format!("{GET_REFS}\r\nHost: x\r\n\r\n").as_bytes())
        .unwrap();
    let mut buf = [0u8; 12];
    held.read_exact(&mut buf).unwrap();
    assert_eq!(&buf, b"HTTP/1.1 200");

    // A POST of 2 MiB: every byte of it is taken, then the 503 read.
    let body = vec![b'0'; 2 << 20];
    let mut s = TcpStream::connect(&server.http).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let head = format!(
        "POST /repo.git/git-upload-pack HTTP/1.1\r\nHost: x\r\n\
         Content-Type: application/x-git-upload-pack-request\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    s.write_all(head.as_bytes()).unwrap();
    s.write_all(&body).expect("the refused body is taken whole");
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).expect("the 503 is read, no reset");
    let r = serve_support::parse_response(&raw);
    assert_eq!(r.status, 503, "{}", r.text());
    assert_eq!(r.header("Retry-After"), Some("1"));

    let run = f.git(&["ls-remote", &server.http_url("repo.git")]);
    assert!(!run.success());
    assert!(run.err().contains("503"), "{}", run.err());
    let run = f.git(&["ls-remote", &server.git_url("repo.git")]);
    assert!(!run.success());
    assert!(
        run.err()
            .contains("remote error: too many connections; try again later"),
        "{}",
        run.err()
    );
    assert!(run.code() == Some(128), "{:?}: {}", run.status, run.err());
    drop(held);
}

/// Silent sockets from one address take at most `--max-connections-per-address` slots: a
/// client from another address still gets in, and the next silent one is told why.
#[test]
fn one_address_cannot_take_every_slot() {
    let f = Fixture::new();
    let server = Server::start(
        &f.sandbox,
        &f.root,
        &[
            "--max-connections",
            "3",
            "--max-connections-per-address",
            "2",
        ],
    );
    let silent: Vec<TcpStream> = (0..2)
        .map(|_| connect_from("127.0.0.2", &server.http))
        .collect();
    // Both are accepted before the next one comes (another listener's accept may go first).
    std::thread::sleep(Duration::from_millis(500));
    let mut git_silent = connect_from("127.0.0.2", &server.git);
    git_silent
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    // The third from 127.0.0.2 is refused (its silent request read for a moment).
    let mut raw = Vec::new();
    let _ = git_silent.read_to_end(&mut raw);
    assert!(
        String::from_utf8_lossy(&raw).contains("ERR too many connections from your address"),
        "{:?}",
        String::from_utf8_lossy(&raw)
    );
    let mut third = connect_from("127.0.0.2", &server.http);
    third
        .write_all(format!("{GET_REFS}\r\nHost: x\r\n\r\n").as_bytes())
        .unwrap();
    let mut raw = Vec::new();
    let _ = third.read_to_end(&mut raw);
    let r = serve_support::parse_response(&raw);
    assert_eq!(r.status, 503);
    assert!(r.text().contains("from your address"), "{}", r.text());
    // git from 127.0.0.1 is served, over HTTP and git://, one after the other.
    let expected = f.ls_remote("2", f.repo.path.to_str().unwrap());
    assert_eq!(f.ls_remote("2", &server.http_url("repo.git")), expected);
    assert_eq!(f.ls_remote("0", &server.git_url("repo.git")), expected);
    drop(silent);
}

/// An address that keeps sending wrong passwords is answered 429 without any verification,
/// while a user from another address is served.
#[test]
fn bad_passwords_are_throttled_per_address() {
    let f = Fixture::new();
    let run = f.sandbox.packd_in(
        f.sandbox.path(),
        &["serve", "--hash-token"],
        Some(b"good-token\n"),
    );
    run.assert_success();
    let users = f.sandbox.path().join("users");
    std::fs::write(&users, format!("alice:{}:read:*\n", run.out().trim())).unwrap();
    let server = Server::start(
        &f.sandbox,
        &f.root,
        &["--auth-file", users.to_str().unwrap()],
    );
    let bad = "Authorization: Basic YWxpY2U6d3Jvbmc="; // alice:wrong
    let mut statuses = Vec::new();
    for _ in 0..12 {
        let mut s = connect_from("127.0.0.3", &server.http);
        s.write_all(
            format!("{GET_REFS}\r\nHost: x\r\n{bad}\r\nConnection: close\r\n\r\n").as_bytes(),
        )
        .unwrap();
        let mut raw = Vec::new();
        let _ = s.read_to_end(&mut raw);
        statuses.push(serve_support::parse_response(&raw).status);
    }
    assert_eq!(&statuses[..10], &[401; 10], "{statuses:?}");
    assert_eq!(&statuses[10..], &[429; 2], "{statuses:?}");
    let url = format!("http://alice:good-token@{}/repo.git", server.http);
    let expected = f.ls_remote("2", f.repo.path.to_str().unwrap());
    assert_eq!(f.ls_remote("2", &url), expected);
    let r = http(&server.http, GET_REFS, b"");
    assert_eq!(r.status, 401);
}
