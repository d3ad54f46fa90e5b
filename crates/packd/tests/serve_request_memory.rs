//! What one request may cost `packd serve` in memory, whatever its size under
//! `--max-request-bytes`: protocol v2 arguments are taken one line at a time (flags as booleans,
//! ids as they arrive, each common one once), `ref-prefix` lines capped, and a push's commands
//! held up to 8 MiB at most.

mod common;
mod serve_support;

use serve_support::{http, pkt, Fixture, Server};

/// A protocol v2 request for `command`, with `args` repeated `times` each, in order.
fn v2_request(command: &str, args: &[(&str, usize)]) -> Vec<u8> {
    let mut body = pkt(&format!("command={command}\n"));
    body.extend_from_slice(&pkt("agent=git/2.39.5\n"));
    body.extend_from_slice(b"0001");
    for (arg, times) in args {
        let line = pkt(&format!("{arg}\n"));
        for _ in 0..*times {
            body.extend_from_slice(&line);
        }
    }
    body.extend_from_slice(b"0000");
    body
}

fn post_v2(server: &Server, body: &[u8]) -> serve_support::HttpResponse {
    let head = "POST /repo.git/git-upload-pack HTTP/1.1\r\nGit-Protocol: version=2\r\n\
                Content-Type: application/x-git-upload-pack-request";
    http(&server.http, head, body)
}

/// Most the server's peak memory may grow by for one flood (it grew by 70 to 150 MB when every
/// argument line was kept).
const BOUND_KIB: u64 = 24 * 1024;

/// An `ls-refs` of 2 million `peel` lines and 65,536 long `ref-prefix` lines (35 MB) costs the
/// server no more than a few buffers, and is answered as git answers it: past git's limit of
/// prefixes, every ref.
#[test]
fn an_ls_refs_flood_costs_a_few_buffers() {
    let f = Fixture::new();
    let server = Server::start(&f.sandbox, &f.root, &["--max-request-bytes", "100m"]);
    f.ls_remote("2", &server.http_url("repo.git"));
    let before = server.peak_rss_kib();
    let prefix = format!("ref-prefix refs/heads/{}", "x".repeat(200));
    let body = v2_request(
        "ls-refs",
        &[
            ("peel", 2_000_000),
            ("symrefs", 1000),
            (&prefix, 65_537),
            ("ref-prefix refs/tags/", 1),
        ],
    );
    let r = post_v2(&server, &body);
    assert_eq!(r.status, 200, "{}", r.text());
    let text = r.text();
    assert!(text.contains(" refs/heads/main\n"), "every ref: {text}");
    assert!(text.contains(" refs/tags/v1.0 peeled:"), "peeled: {text}");
    let after = server.peak_rss_kib();
    assert!(
        after < before + BOUND_KIB,
        "peak RSS went from {before} KiB to {after} KiB"
    );
}

/// A fetch naming its want 200,000 times and its have 800,000 times is answered with one ACK
/// for the common have, and costs the server no more than a few buffers; with `done`, the pack.
#[test]
fn a_fetch_of_repeated_wants_and_haves_costs_a_few_buffers() {
    let f = Fixture::new();
    let server = Server::start(&f.sandbox, &f.root, &["--max-request-bytes", "100m"]);
    f.ls_remote("2", &server.http_url("repo.git"));
    let tip = f.repo.git_str(&["rev-parse", "main"]);
    let base = f.repo.git_str(&["rev-parse", "main~5"]);
    let before = server.peak_rss_kib();
    let (want, have) = (format!("want {tip}"), format!("have {base}"));
    let body = v2_request(
        "fetch",
        &[
            (&want, 200_000),
            ("thin-pack", 100_000),
            ("ofs-delta", 100_000),
            (&have, 800_000),
        ],
    );
    let r = post_v2(&server, &body);
    assert_eq!(r.status, 200, "{}", r.text());
    let text = r.text();
    assert!(
        text.contains(&format!("acknowledgments\n0031ACK {base}\n")),
        "{text}"
    );
    assert_eq!(text.matches("ACK ").count(), 1, "one ACK: {text}");
    let after = server.peak_rss_kib();
    assert!(
        after < before + BOUND_KIB,
        "peak RSS went from {before} KiB to {after} KiB"
    );
    let body = v2_request("fetch", &[(&want, 1000), (&have, 1000), ("done", 2)]);
    let r = post_v2(&server, &body);
    let has = |needle: &[u8]| r.body.windows(needle.len()).any(|w| w == needle);
    assert!(has(b"packfile\n") && has(b"\x01PACK"), "{}", r.text());
    // A want of an object the repository lacks is refused, as git refuses it.
    let missing = format!("want {}", "1".repeat(40));
    let r = post_v2(&server, &v2_request("fetch", &[(&missing, 1), ("done", 1)]));
    assert!(
        r.text()
            .contains(&format!("not our ref {}", "1".repeat(40))),
        "{}",
        r.text()
    );
}

/// A push's commands are held up to 8 MiB whatever `--max-request-bytes` allows: past that the
/// push is refused (413) before receive-pack runs, and nothing moves.
#[test]
fn a_push_of_too_many_commands_is_refused() {
    let f = Fixture::new();
    let server = Server::start(
        &f.sandbox,
        &f.root,
        &["--max-request-bytes", "100m", "--allow-push"],
    );
    let tip = f.repo.git_str(&["rev-parse", "main"]);
    let zero = "0".repeat(40);
    let mut body = pkt(&format!(
        "{zero} {tip} refs/heads/b0\0report-status side-band-64k\n"
    ));
    let mut i = 1;
    while body.len() < 9 << 20 {
        body.extend_from_slice(&pkt(&format!("{zero} {tip} refs/heads/b{i}\n")));
        i += 1;
    }
    body.extend_from_slice(b"0000");
    let head = "POST /repo.git/git-receive-pack HTTP/1.1\r\n\
                Content-Type: application/x-git-receive-pack-request";
    let r = http(&server.http, head, &body);
    assert_eq!(r.status, 413, "{}", r.text());
    assert!(r.text().contains("limit of 8388608 bytes"), "{}", r.text());
    assert!(f
        .repo
        .git_str(&["for-each-ref", "refs/heads/b0"])
        .is_empty());
}

/// `packd receive-pack` (git's `--receive-pack`, ssh) holds a push's commands up to 8 MiB of
/// ref names (and 40 bytes a command) too: past that it refuses the push, and nothing moves.
#[test]
fn receive_pack_refuses_too_many_commands() {
    let f = Fixture::new();
    let tip = f.repo.git_str(&["rev-parse", "main"]);
    let zero = "0".repeat(40);
    let mut body = pkt(&format!("{zero} {tip} refs/heads/b0\0report-status\n"));
    let mut i = 1;
    while body.len() < 12 << 20 {
        body.extend_from_slice(&pkt(&format!(
            "{zero} {tip} refs/heads/{}{i}\n",
            "x".repeat(100)
        )));
        i += 1;
    }
    body.extend_from_slice(b"0000");
    let run = f.repo.packd(&["receive-pack", "."], Some(&body));
    let out = format!(
        "{}{}",
        String::from_utf8_lossy(&run.stdout),
        String::from_utf8_lossy(&run.stderr)
    );
    let start: String = out.chars().take(2000).collect();
    assert!(!run.success(), "{start}");
    assert!(
        out.contains("push commands larger than 8388608 bytes in all"),
        "{start}"
    );
    assert!(f
        .repo
        .git_str(&["for-each-ref", "refs/heads/b0"])
        .is_empty());
}
