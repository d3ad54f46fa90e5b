//! `packd serve --git-daemon`: the git:// protocol driven by the real git client (ls-remote and
//! clone with protocol v0 and v2) and by raw connections (paths leaving the root, pushes,
//! malformed requests, idle connections).

mod common;
mod serve_support;

use serve_support::{only_pack_of, pkt, Fixture, Server};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

#[test]
fn ls_remote_matches_git_v0_and_v2() {
    let f = Fixture::new();
    let server = Server::start(&f.sandbox, &f.root, &[]);
    let local = f.repo.path.to_str().unwrap().to_string();
    for version in ["0", "2"] {
        let expected = f.ls_remote(version, &local);
        assert!(expected.contains("refs/heads/side"), "{expected}");
        assert_eq!(
            f.ls_remote(version, &server.git_url("repo.git")),
            expected,
            "protocol v{version}"
        );
        assert_eq!(
            f.ls_remote(version, &server.git_url("repo")),
            expected,
            "protocol v{version}, no .git"
        );
    }
    assert!(
        server.log_text().contains("method=git"),
        "{}",
        server.log_text()
    );
}

/// Over git:// too, a mirror clone that is the repository's pack file as it is goes out from
/// the file (`sendfile`), byte for byte.
#[test]
fn whole_pack_clone_over_git_protocol_is_sent_from_the_file() {
    let f = Fixture::new();
    let served = f.repack_whole();
    let server = f.pack_logging_server(&["--clone-cache-bytes", "0"]);
    for version in ["0", "2"] {
        let dst = mirror_clone(&f, &server, version, &format!("whole-v{version}.git"));
        assert!(
            only_pack_of(&dst) == served,
            "v{version}: the clone's pack is the served file"
        );
    }
    let log = server.log_text();
    assert_eq!(
        log.matches("sent as file ranges").count(),
        2,
        "the packs went out from the file:\n{log}"
    );
}

#[test]
fn clone_over_git_protocol_v0_and_v2() {
    let f = Fixture::new();
    let server = Server::start(&f.sandbox, &f.root, &[]);
    for version in ["0", "2"] {
        mirror_clone(&f, &server, version, &format!("clone-v{version}.git"));
    }
    // An incremental fetch negotiates with haves.
    let dst = f.clone_work(&server.git_url("repo.git"));
    let new = f.commit_on_main("more\n");
    f.sandbox
        .git_run_in(&dst, &["fetch", "-q", "origin"], None)
        .assert_success();
    let got = f
        .sandbox
        .git_run_in(&dst, &["rev-parse", "origin/main"], None);
    assert_eq!(got.out().trim(), new.trim());
}

/// Over git:// (a blocking `sendfile`), a one-branch clone that is not a whole pack sends its
/// runs of reused entries of 64 KiB or more from the files of two packs (the bitmapped one and
/// one written since, each with a 256 KiB incompressible file), and git finds it complete.
#[test]
fn runs_from_two_packs_go_out_by_sendfile_over_git_protocol() {
    let f = Fixture::new();
    f.repack_whole();
    f.commit_big_file("big2.bin", 12, 1_850_000_000);
    // fast-import leaves a few objects loose: `repack -d` (without `-a`) packs them apart.
    f.repo.git(&["repack", "-dq"]);
    assert_eq!(f.repo.packs().len(), 2);
    let server = f.pack_logging_server(&["--clone-cache-bytes", "0"]);
    f.clone_main("2", &server.git_url("repo.git"), "one-branch.git");
    let log = server.log_text();
    let runs: u64 = log
        .lines()
        .find_map(|l| {
            let (before, _) = l.split_once(" runs of reused entries")?;
            before.rsplit(' ').next()?.parse().ok()
        })
        .unwrap_or_else(|| panic!("no runs went out by sendfile:\n{log}"));
    assert!(runs >= 2, "one run in each pack at least:\n{log}");
}

/// `git clone --mirror` of `repo.git` over git:// with protocol `version` into NAME, checked
/// (see `Fixture::mirror_clone`).
fn mirror_clone(f: &Fixture, server: &Server, version: &str, name: &str) -> std::path::PathBuf {
    f.mirror_clone(version, &server.git_url("repo.git"), name)
}

/// Sends a raw git:// request line and returns everything the server answers before closing.
fn raw_request(server: &Server, payload: &[u8]) -> String {
    let mut s = TcpStream::connect(&server.git).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(payload).unwrap();
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    String::from_utf8_lossy(&out).into_owned()
}

fn request_line(service: &str, path: &str) -> Vec<u8> {
    pkt(&format!("{service} {path}\0host=localhost\0"))
}

#[test]
fn refusals() {
    let f = Fixture::new();
    let outside = f.sandbox.init_bare("outside.git");
    std::os::unix::fs::symlink(&outside.path, f.root.join("link.git")).unwrap();
    let mut server = Server::start(&f.sandbox, &f.root, &[]);
    let abs = outside.path.to_str().unwrap().to_string();
    for path in [
        "/../outside.git",
        "/repo.git/../../outside.git",
        &format!("/{abs}"),
        "/link.git",
        "/link",
        "/~root/repo.git",
    ] {
        let answer = raw_request(&server, &request_line("git-upload-pack", path));
        assert!(
            answer.contains("ERR ") && answer.contains("forbidden"),
            "{path}: {answer:?}"
        );
    }
    let answer = raw_request(&server, &request_line("git-upload-pack", "/nothere.git"));
    assert!(
        answer.contains("ERR ") && answer.contains("not found"),
        "{answer:?}"
    );
    let answer = raw_request(&server, &request_line("git-receive-pack", "/repo.git"));
    assert!(answer.contains("ERR pushing is not enabled"), "{answer:?}");
    let answer = raw_request(&server, &request_line("git-upload-archive", "/repo.git"));
    assert!(
        answer.starts_with("00") && answer.contains("ERR "),
        "{answer:?}"
    );
    // Malformed first lines: closed with an error, the server stays up.
    for bad in [&b"zzzz"[..], b"ffff", b"0003", b"000ahello!", b"0000"] {
        let _ = raw_request(&server, bad);
    }
    assert!(server.alive());
    // git's own client reports the refusal.
    let run = f.git(&["ls-remote", &server.git_url("link.git")]);
    assert!(!run.success());
    assert!(run.err().contains("forbidden"), "{}", run.err());
    let dst = f.sandbox.path().join("w");
    f.git(&[
        "clone",
        "-q",
        &server.git_url("repo.git"),
        dst.to_str().unwrap(),
    ])
    .assert_success();
    let run = f
        .sandbox
        .git_run_in(&dst, &["push", "origin", "HEAD:refs/heads/new"], None);
    assert!(!run.success());
    assert!(
        run.err().contains("pushing is not enabled"),
        "{}",
        run.err()
    );
    let expected = f.ls_remote("2", f.repo.path.to_str().unwrap());
    assert_eq!(f.ls_remote("2", &server.git_url("repo.git")), expected);
}

#[test]
fn idle_connection_closed() {
    let f = Fixture::new();
    let server = Server::start(&f.sandbox, &f.root, &["--idle-timeout", "1"]);
    // Nothing sent at all, and a conversation left hanging after the advertisement.
    for payload in [Vec::new(), request_line("git-upload-pack", "/repo.git")] {
        let mut s = TcpStream::connect(&server.git).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        s.write_all(&payload).unwrap();
        let start = Instant::now();
        let mut buf = [0u8; 4096];
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
}

/// A repository that cannot be opened (its pack's index cut short) is refused with an ERR line
/// that names the file from the repository's directory, as git would, not by the server's
/// absolute path; packd's log has the full path.
#[test]
fn a_repository_that_cannot_be_opened_is_named_from_its_own_directory() {
    let f = Fixture::new();
    let (dir, name) = f.broken_repo();
    let server = Server::start(&f.sandbox, &f.root, &[]);
    let answer = raw_request(&server, &request_line("git-upload-pack", "/broken.git"));
    assert!(
        answer.contains("ERR cannot open the repository: "),
        "{answer:?}"
    );
    Fixture::assert_named_from_repo(&server, &answer, &dir, &name);
}
