//! Pushes into packd's receive-pack with the real git client, through `git push
//! --receive-pack='packd receive-pack'` and over smart HTTP (`packd serve --allow-push`), plus
//! hand-made requests git would never send (stale atomic batches, bad packs). After every push
//! `git fsck` must find the repository clean.

mod common;
mod serve_support;

use common::{hex, sha1, PackWriter, Repo, Run, Sandbox};
use serve_support::Server;

const OBJ_COMMIT: u8 = 1;
const OBJ_TREE: u8 = 2;
const OBJ_BLOB: u8 = 3;
const ZERO: &str = "0000000000000000000000000000000000000000";

/// A server repository and a client work tree with two commits on main.
fn setup(sb: &Sandbox) -> (Repo, Repo) {
    (
        sb.init_bare("srv.git"),
        sb.client_with_two_commits("client"),
    )
}

/// `git push --receive-pack='packd receive-pack' <server> ARGS...` from the client.
fn push(client: &Repo, server: &Repo, args: &[&str]) -> Run {
    let rp = format!("--receive-pack={} receive-pack", common::PACKD);
    let target = server.git_dir.to_str().unwrap().to_string();
    let mut all = vec!["push", rp.as_str(), target.as_str()];
    all.extend_from_slice(args);
    client.git_run(&all, None)
}

fn refs(repo: &Repo) -> String {
    String::from_utf8(
        repo.git_run(&["show-ref"], None).stdout, // empty (exit 1) when there are no refs
    )
    .unwrap()
}

fn rev(repo: &Repo, name: &str) -> String {
    repo.git_str(&["rev-parse", name])
}

fn fsck(repo: &Repo) {
    repo.git(&["fsck", "--strict", "--no-progress", "--no-dangling"]);
    // Nothing left in quarantine.
    let leftovers: Vec<_> = std::fs::read_dir(repo.objects_dir())
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with("incoming-"))
        .collect();
    assert!(
        leftovers.is_empty(),
        "quarantine left behind: {leftovers:?}"
    );
    let quarantined: Vec<_> = pack_files(repo)
        .into_iter()
        .filter(|n| n.starts_with("tmp_"))
        .collect();
    assert!(
        quarantined.is_empty(),
        "quarantine files left behind: {quarantined:?}"
    );
}

#[test]
fn push_new_branch_fast_forward_forced_and_delete() {
    let sb = Sandbox::new();
    let (server, client) = setup(&sb);
    push(&client, &server, &["main"]).assert_success();
    assert_eq!(rev(&server, "refs/heads/main"), rev(&client, "HEAD"));
    fsck(&server);

    std::fs::write(client.path.join("g"), "three\n").unwrap();
    client.git(&["add", "g"]);
    client.git(&["commit", "-q", "-m", "three"]);
    let run = push(&client, &server, &["main"]);
    run.assert_success();
    assert!(run.err().contains("main -> main"), "{}", run.err());
    assert_eq!(rev(&server, "refs/heads/main"), rev(&client, "HEAD"));
    fsck(&server);

    // A new branch pointing at an existing commit, and a tag.
    push(
        &client,
        &server,
        &["HEAD~1:refs/heads/old", "HEAD:refs/tags/t"],
    )
    .assert_success();
    assert_eq!(rev(&server, "refs/heads/old"), rev(&client, "HEAD~1"));
    fsck(&server);

    // Forced (non-fast-forward) update is accepted by default.
    client.git(&["reset", "-q", "--hard", "HEAD~2"]);
    client.git(&["commit", "-q", "--allow-empty", "-m", "diverged"]);
    assert!(!push(&client, &server, &["main"]).success());
    push(&client, &server, &["-f", "main"]).assert_success();
    assert_eq!(rev(&server, "refs/heads/main"), rev(&client, "HEAD"));
    fsck(&server);

    // Delete.
    push(&client, &server, &[":refs/heads/old"]).assert_success();
    assert!(!refs(&server).contains("refs/heads/old"));
    fsck(&server);
}

#[test]
fn repository_rules_refuse_non_fast_forward_and_deletes() {
    let sb = Sandbox::new();
    let (server, client) = setup(&sb);
    push(&client, &server, &["main", "main:refs/heads/keep"]).assert_success();
    server.git(&["config", "receive.denyNonFastForwards", "true"]);
    server.git(&["config", "receive.denyDeletes", "true"]);
    let before = refs(&server);

    client.git(&["reset", "-q", "--hard", "HEAD~1"]);
    client.git(&["commit", "-q", "--allow-empty", "-m", "other"]);
    let run = push(&client, &server, &["-f", "main"]);
    assert!(!run.success());
    assert!(run.err().contains("non-fast-forward"), "{}", run.err());

    let run = push(&client, &server, &[":refs/heads/keep"]);
    assert!(!run.success());
    assert!(run.err().contains("deletion prohibited"), "{}", run.err());
    assert_eq!(refs(&server), before);
    fsck(&server);

    // A fast-forward still goes through.
    let keep = rev(&server, "refs/heads/keep");
    client.git(&["reset", "-q", "--hard", &keep]);
    client.git(&["commit", "-q", "--allow-empty", "-m", "ff"]);
    push(&client, &server, &["main"]).assert_success();
    assert_eq!(rev(&server, "refs/heads/main"), rev(&client, "HEAD"));
    fsck(&server);
}

#[test]
fn checked_out_branch_of_a_non_bare_repository_is_refused() {
    let sb = Sandbox::new();
    let (_, client) = setup(&sb);
    let target = sb.init("worktree");
    target.git(&["commit", "-q", "--allow-empty", "-m", "base"]);
    let rp = format!("--receive-pack={} receive-pack", common::PACKD);
    let path = target.path.to_str().unwrap();
    let run = client.git_run(&["push", "-f", &rp, path, "main:refs/heads/main"], None);
    assert!(!run.success());
    assert!(
        run.err().contains("branch is currently checked out"),
        "{}",
        run.err()
    );
    client
        .git_run(&["push", &rp, path, "main:refs/heads/other"], None)
        .assert_success();
}

#[test]
fn many_refs_and_a_thin_pack() {
    let sb = Sandbox::new();
    let (server, client) = setup(&sb);
    // A big file so that the next push sends it as a delta against the server's copy.
    let big: String = (0..2000).map(|i| format!("line {i}\n")).collect();
    std::fs::write(client.path.join("big"), &big).unwrap();
    client.git(&["add", "big"]);
    client.git(&["commit", "-q", "-m", "big"]);
    push(&client, &server, &["main"]).assert_success();

    std::fs::write(client.path.join("big"), format!("{big}one more\n")).unwrap();
    client.git(&["commit", "-q", "-am", "bigger"]);
    let head = rev(&client, "HEAD");
    let mut stdin = String::new();
    for i in 0..300 {
        stdin.push_str(&format!("create refs/heads/many/{i:03} {head}\n"));
    }
    client.git_stdin(&["update-ref", "--stdin"], stdin.as_bytes());
    let run = push(&client, &server, &["--thin", "main", "refs/heads/many/*"]);
    run.assert_success();
    let server_refs = refs(&server);
    assert_eq!(server_refs.matches("refs/heads/many/").count(), 300);
    assert_eq!(rev(&server, "refs/heads/main"), head);
    assert_eq!(
        server.git_str(&["cat-file", "-p", "main:big"]),
        format!("{big}one more").trim_end()
    );
    fsck(&server);
}

/// A pkt-line.
fn pkt(payload: &[u8]) -> Vec<u8> {
    let mut v = format!("{:04x}", payload.len() + 4).into_bytes();
    v.extend_from_slice(payload);
    v
}

/// Sends commands (the first with `caps`) and `pack` to `packd receive-pack`; returns its
/// report (the output after the advertisement).
fn raw_push(server: &Repo, commands: &[String], caps: &str, pack: Option<&[u8]>) -> String {
    let mut input = Vec::new();
    for (i, c) in commands.iter().enumerate() {
        let line = if i == 0 {
            format!("{c}\0{caps}\n")
        } else {
            format!("{c}\n")
        };
        input.extend(pkt(line.as_bytes()));
    }
    input.extend_from_slice(b"0000");
    if let Some(p) = pack {
        input.extend_from_slice(p);
    }
    let run = server.packd(&["receive-pack", "."], Some(&input));
    run.assert_no_crash();
    let out = run.out();
    let advert_end = out.find("0000").expect("advertisement flush");
    out[advert_end + 4..].to_string()
}

fn empty_pack() -> Vec<u8> {
    PackWriter::new().finish().0
}

fn pack_files(repo: &Repo) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(repo.pack_dir())
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

#[test]
fn atomic_batch_with_a_stale_ref_moves_nothing() {
    let sb = Sandbox::new();
    let (server, client) = setup(&sb);
    push(&client, &server, &["main", "main:refs/heads/b"]).assert_success();
    let one = rev(&client, "HEAD~1");
    let two = rev(&client, "HEAD");
    let before = refs(&server);
    let commands = [
        format!("{two} {one} refs/heads/main"),
        format!("{one} {one} refs/heads/b"), // stale: b is at `two`
        format!("{ZERO} {one} refs/heads/new"),
    ];
    let report = raw_push(
        &server,
        &commands,
        "report-status atomic",
        Some(&empty_pack()),
    );
    assert!(report.contains("unpack ok"), "{report}");
    // git's receive-pack: every ref of the failed transaction has its reason.
    assert!(
        report.contains("ng refs/heads/b atomic transaction failed"),
        "{report}"
    );
    assert!(
        report.contains("ng refs/heads/main atomic transaction failed"),
        "{report}"
    );
    assert!(report.contains("ng refs/heads/new"), "{report}");
    assert_eq!(refs(&server), before);

    // Without atomic the others go through.
    let report = raw_push(&server, &commands, "report-status", Some(&empty_pack()));
    assert!(report.contains("ok refs/heads/main"), "{report}");
    assert!(
        report.contains("ng refs/heads/b failed to update ref"),
        "{report}"
    );
    assert!(report.contains("ok refs/heads/new"), "{report}");
    assert_eq!(rev(&server, "refs/heads/main"), one);
    fsck(&server);

    // Over side-band-64k the report comes in band 1.
    let report = raw_push(
        &server,
        &[format!("{one} {two} refs/heads/main")],
        "report-status side-band-64k",
        Some(&empty_pack()),
    );
    assert!(report.contains("\x01000eunpack ok\n"), "{report:?}");
    assert_eq!(rev(&server, "refs/heads/main"), two);
}

#[test]
fn bad_packs_are_refused_and_leave_nothing() {
    let sb = Sandbox::new();
    let (server, client) = setup(&sb);
    push(&client, &server, &["main"]).assert_success();
    let head = rev(&server, "refs/heads/main");
    let tree = server.git_str(&["rev-parse", "main^{tree}"]);
    let packs_before = pack_files(&server);
    let refs_before = refs(&server);

    let commit_to = |tree_hex: &str, parent: &str| {
        format!(
            "tree {tree_hex}\nparent {parent}\nauthor A <a@b> 1700000001 +0000\ncommitter A <a@b> 1700000001 +0000\n\nbad\n"
        )
    };
    let mut cases: Vec<(&str, Vec<u8>, String)> = Vec::new();

    // A commit whose tree is missing.
    let mut w = PackWriter::new();
    let missing = hex(&sha1(b"no such tree"));
    let (c, _) = w.object(OBJ_COMMIT, commit_to(&missing, &head).as_bytes());
    // Answered as git's unpack-objects does with receive.fsckObjects (packd's default).
    cases.push(("unpack-objects abnormal exit", w.finish().0, hex(&c)));

    // A malformed tree (unsorted entries).
    let mut w = PackWriter::new();
    let (blob, _) = w.object(OBJ_BLOB, b"x\n");
    let mut t = Vec::new();
    for name in ["b", "a"] {
        t.extend_from_slice(format!("100644 {name}\0").as_bytes());
        t.extend_from_slice(&blob);
    }
    let (bad_tree, _) = w.object(OBJ_TREE, &t);
    let (c, _) = w.object(OBJ_COMMIT, commit_to(&hex(&bad_tree), &head).as_bytes());
    // Refused by the fsck checks, answered as git's unpack-objects does.
    cases.push(("unpack-objects abnormal exit", w.finish().0, hex(&c)));

    // A malformed commit (no author).
    let mut w = PackWriter::new();
    let (c, _) = w.object(
        OBJ_COMMIT,
        format!("tree {tree}\nparent {head}\n\nno author\n").as_bytes(),
    );
    cases.push(("unpack-objects abnormal exit", w.finish().0, hex(&c)));

    // A wrong trailer checksum.
    let mut w = PackWriter::new();
    let (c, _) = w.object(OBJ_COMMIT, commit_to(&tree, &head).as_bytes());
    let mut bytes = w.finish().0;
    let last = bytes.len() - 1;
    bytes[last] ^= 0xff;
    cases.push(("", bytes, hex(&c)));

    // A truncated pack.
    let mut w = PackWriter::new();
    let (c, _) = w.object(OBJ_COMMIT, commit_to(&tree, &head).as_bytes());
    let bytes = w.finish().0;
    cases.push(("", bytes[..bytes.len() - 30].to_vec(), hex(&c)));

    // The new tip is in neither the pack nor the repository.
    cases.push(("missing object", empty_pack(), hex(&sha1(b"nowhere"))));

    for (what, pack, new) in &cases {
        let report = raw_push(
            &server,
            &[format!("{head} {new} refs/heads/main")],
            "report-status",
            Some(pack),
        );
        assert!(report.contains("unpack "), "{report}");
        assert!(!report.contains("unpack ok"), "{report}");
        assert!(report.contains(what), "expected '{what}' in {report}");
        assert!(report.contains("ng refs/heads/main"), "{report}");
        assert_eq!(pack_files(&server), packs_before, "after {what}");
        assert_eq!(refs(&server), refs_before);
        fsck(&server);
    }
}

#[test]
fn push_over_http_with_allow_push() {
    let sb = Sandbox::new();
    let (server, client) = setup(&sb);
    let root = server.git_dir.parent().unwrap();
    let srv = Server::start(&sb, root, &["--allow-push"]);
    let url = srv.http_url("srv.git");
    client
        .git_run(&["push", &url, "main"], None)
        .assert_success();
    assert_eq!(rev(&server, "refs/heads/main"), rev(&client, "HEAD"));
    fsck(&server);
    client.git(&["commit", "-q", "--allow-empty", "-m", "more"]);
    client
        .git_run(&["push", &url, "main", "main:refs/heads/x"], None)
        .assert_success();
    assert_eq!(rev(&server, "refs/heads/x"), rev(&client, "HEAD"));
    client
        .git_run(&["push", "--atomic", &url, ":refs/heads/x"], None)
        .assert_success();
    assert!(!refs(&server).contains("refs/heads/x"));
    fsck(&server);
    // Cloning back what was pushed.
    let back = sb.path().join("back");
    sb.git_in(sb.path(), &["clone", "-q", &url, back.to_str().unwrap()]);
    assert_eq!(
        sb.git_in(&back, &["rev-parse", "origin/main"]),
        client.git(&["rev-parse", "HEAD"])
    );
    drop(srv);

    // Without --allow-push the push is refused and nothing changes.
    let srv = Server::start(&sb, root, &[]);
    let before = refs(&server);
    client.git(&["commit", "-q", "--allow-empty", "-m", "refused"]);
    let run = client.git_run(&["push", &srv.http_url("srv.git"), "main"], None);
    assert!(!run.success());
    assert_eq!(refs(&server), before);
}

#[test]
fn hidden_refs_are_not_advertised_and_not_updated() {
    let sb = Sandbox::new();
    let (server, client) = setup(&sb);
    push(
        &client,
        &server,
        &[
            "main:main",
            "main:refs/pull/1/head",
            "main:refs/pull/2/head",
        ],
    )
    .assert_success();
    server.git(&["config", "--add", "transfer.hideRefs", "refs/pull"]);
    server.git(&["config", "--add", "transfer.hideRefs", "!refs/pull/2"]);
    // The advertisement (what `packd receive-pack` says before reading commands).
    let mut cmd = std::process::Command::new(common::PACKD);
    cmd.arg("receive-pack").arg(&server.git_dir);
    let run = common::run_cmd(cmd, Some(b"0000"), common::PACKD_TIMEOUT);
    run.assert_success();
    let advertised = run.out();
    assert!(advertised.contains("refs/heads/main"), "{advertised}");
    assert!(!advertised.contains("refs/pull/1/head"), "{advertised}");
    assert!(advertised.contains("refs/pull/2/head"), "{advertised}");
    // A push to a hidden ref is refused; the others go through.
    std::fs::write(client.path.join("f"), "three\n").unwrap();
    client.git(&["commit", "-q", "-am", "three"]);
    let before = rev(&server, "refs/pull/1/head");
    let run = push(&client, &server, &["main:refs/pull/1/head", "main:main"]);
    assert!(!run.success());
    assert!(
        run.err().contains("deny updating a hidden ref"),
        "{}",
        run.err()
    );
    assert_eq!(rev(&server, "refs/pull/1/head"), before);
    assert_eq!(rev(&server, "main"), rev(&client, "main"));
    fsck(&server);
}

#[test]
fn a_receiver_killed_mid_push_leaves_the_old_refs_and_a_clean_repository() {
    let sb = Sandbox::new();
    let (server, client) = setup(&sb);
    push(&client, &server, &["main:main"]).assert_success();
    let old = rev(&server, "main");
    let packs_before = pack_files(&server);
    // A new commit with enough data that its pack takes a while to arrive.
    for i in 0..50 {
        let body: String = (0..2000).map(|j| format!("{i} {j} line\n")).collect();
        std::fs::write(client.path.join(format!("big{i}.txt")), body).unwrap();
    }
    client.git(&["add", "."]);
    client.git(&["commit", "-q", "-m", "big"]);
    let new = rev(&client, "main");
    let pack = client.git_stdin(
        &["pack-objects", "--revs", "--stdout", "-q"],
        format!("{new}\n^{old}\n").as_bytes(),
    );
    assert!(pack.len() > 10_000, "pack of {} bytes", pack.len());

    let mut child = std::process::Command::new(common::PACKD)
        .arg("receive-pack")
        .arg(&server.git_dir)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let mut input = pkt(format!("{old} {new} refs/heads/main\0report-status\n").as_bytes());
    input.extend_from_slice(b"0000");
    // Half of the pack: the receiver is inside index-pack, with a quarantine, when killed.
    input.extend_from_slice(&pack[..pack.len() / 2]);
    use std::io::Write as _;
    stdin.write_all(&input).unwrap();
    stdin.flush().unwrap();
    std::thread::sleep(std::time::Duration::from_millis(300));
    child.kill().unwrap(); // SIGKILL
    let _ = child.wait();
    drop(stdin);

    assert_eq!(rev(&server, "main"), old, "the ref moved");
    // What the killed receiver was writing is left (as git's index-pack leaves its tmp_pack_*),
    // under a name no reader takes for a pack; the next push sweeps it.
    let installed: Vec<String> = pack_files(&server)
        .into_iter()
        .filter(|n| !n.starts_with("tmp_incoming_"))
        .collect();
    assert_eq!(installed, packs_before, "a pack was installed");
    server.git(&["fsck", "--strict", "--no-progress", "--no-dangling"]);
    // The next push cleans what the killed one left and goes through.
    push(&client, &server, &["main:main"]).assert_success();
    assert_eq!(rev(&server, "main"), new);
    fsck(&server);
}

#[test]
fn create_on_push_makes_the_repository_only_when_enabled() {
    let sb = Sandbox::new();
    let (server, client) = setup(&sb);
    let root = server.git_dir.parent().unwrap();
    // Without --create-on-push: 404, nothing created.
    let srv = Server::start(&sb, root, &["--allow-push"]);
    let run = client.git_run(&["push", &srv.http_url("team/new.git"), "main"], None);
    assert!(!run.success());
    assert!(!root.join("team").exists());
    drop(srv);
    // With it: a bare repository appears, takes the push, and git finds it sound.
    let srv = Server::start(&sb, root, &["--allow-push", "--create-on-push"]);
    client
        .git_run(&["push", &srv.http_url("team/new.git"), "main"], None)
        .assert_success();
    let created = Repo {
        path: root.join("team/new.git"),
        git_dir: root.join("team/new.git"),
        home: server.home.clone(),
    };
    assert_eq!(rev(&created, "refs/heads/main"), rev(&client, "HEAD"));
    fsck(&created);
    // Paths out of the root are still refused (git's client folds a plain `..` away itself).
    let run = client.git_run(&["push", &srv.http_url("%2e%2e/escape.git"), "main"], None);
    assert!(!run.success(), "{}", run.err());
    assert!(!root.parent().unwrap().join("escape.git").exists());
}

/// packd starts at its own entry point rather than std's (a push starts one process): it must
/// still ignore SIGPIPE, so that a client gone before the advertisement is an error exit, not a
/// death by signal; and `receive-pack DIR`, parsed by that subcommand's own parser, must
/// advertise exactly what the full parser's `-C DIR receive-pack .` does.
#[test]
fn start_up_survives_a_closed_pipe_and_both_parsers_agree() {
    use std::os::fd::FromRawFd;
    use std::os::unix::process::ExitStatusExt;
    use std::process::{Command, Stdio};

    let sb = Sandbox::new();
    let (server, client) = setup(&sb);
    push(&client, &server, &["HEAD:refs/heads/main"]).assert_success();

    let advertise = |args: &[&std::ffi::OsStr]| {
        let out = Command::new(common::PACKD)
            .args(args)
            .stdin(Stdio::null())
            .output()
            .unwrap();
        assert!(out.status.success(), "{args:?}: {out:?}");
        out.stdout
    };
    let dir = server.git_dir.as_os_str();
    let fast = advertise(&["receive-pack".as_ref(), dir]);
    let full = advertise(&["-C".as_ref(), dir, "receive-pack".as_ref(), ".".as_ref()]);
    assert!(
        String::from_utf8_lossy(&fast).contains(&rev(&server, "main")),
        "no main in the advertisement: {}",
        String::from_utf8_lossy(&fast)
    );
    assert_eq!(fast, full);

    // A pipe whose reader is already closed: the first write gets EPIPE (or SIGPIPE).
    let mut fds = [0; 2];
    // SAFETY: pipe fills the two descriptors; the read end is closed at once and the write end
    // is owned by the File handed to the child.
    let writer = unsafe {
        assert_eq!(libc::pipe(fds.as_mut_ptr()), 0);
        libc::close(fds[0]);
        std::fs::File::from_raw_fd(fds[1])
    };
    let out = Command::new(common::PACKD)
        .args(["receive-pack".as_ref(), dir])
        .stdin(Stdio::null())
        .stdout(writer)
        .stderr(Stdio::piped())
        .output()
        .unwrap();
    assert_eq!(out.status.signal(), None, "killed by a signal: {out:?}");
    assert!(!out.status.success(), "{out:?}");
}

/// Clones or fetches from `server` through `packd upload-pack` with the counting logged;
/// returns the client's stderr (packd's log among it).
fn upload_logged(client_dir: &std::path::Path, sb: &Sandbox, args: &[&str]) -> String {
    let up = format!("--upload-pack={} upload-pack", common::PACKD);
    let mut cmd = sb.git_cmd(client_dir);
    cmd.env("PACKD_LOG", "packd_reach=debug,packd_pack=debug")
        .args(["-c", "protocol.version=2"])
        .arg(args[0])
        .arg(&up)
        .args(&args[1..]);
    let run = common::run_cmd(cmd, None, common::GIT_TIMEOUT);
    run.assert_success();
    run.err()
}

/// `git clone --bare` of `target` into `dest` through `packd upload-pack`, logged.
fn clone_logged(sb: &Sandbox, target: &str, dest: &std::path::Path) -> String {
    let dest = dest.to_str().unwrap();
    upload_logged(
        sb.path(),
        sb,
        &["clone", "-q", "--bare", "--no-local", target, dest],
    )
}

/// After a push, until the next repack, the new objects are outside the bitmapped pack (in the
/// pack the push wrote): a clone and a fetch still count with the bitmap (the new objects are
/// walked until the walk enters the bitmapped pack), never by walking the whole history, and
/// git finds the results complete.
#[test]
fn clone_and_fetch_after_a_push_count_with_the_bitmap() {
    let sb = Sandbox::new();
    let (server, client) = setup(&sb);
    for i in 0..20 {
        std::fs::write(client.path.join(format!("f{i}")), format!("{i}\n")).unwrap();
        client.git(&["add", "."]);
        client.git(&["commit", "-q", "-m", &format!("c{i}")]);
    }
    push(&client, &server, &["main"]).assert_success();
    server.git(&["repack", "-adbq"]);
    let bitmaps: Vec<String> = pack_files(&server)
        .into_iter()
        .filter(|n| n.ends_with(".bitmap"))
        .collect();
    assert_eq!(bitmaps.len(), 1, "{:?}", pack_files(&server));

    // An early clone, to fetch into later.
    let early = sb.path().join("early");
    let target = server.git_dir.to_str().unwrap().to_string();
    clone_logged(&sb, &target, &early);

    // The push: new files, a changed one, a new branch and an annotated tag.
    std::fs::write(client.path.join("f3"), "changed\n").unwrap();
    std::fs::create_dir_all(client.path.join("dir")).unwrap();
    std::fs::write(client.path.join("dir/new"), "new\n").unwrap();
    client.git(&["add", "."]);
    client.git(&["commit", "-q", "-m", "pushed"]);
    client.git(&["tag", "-a", "-m", "pushed tag", "v-pushed"]);
    client.git(&["branch", "side", "HEAD~5"]);
    push(&client, &server, &["main", "side", "v-pushed"]).assert_success();
    assert!(
        pack_files(&server)
            .iter()
            .filter(|n| n.ends_with(".pack"))
            .count()
            >= 2
            || server.loose_count() > 0,
        "the push is outside the bitmapped pack"
    );

    let clone = sb.path().join("after");
    let log = clone_logged(&sb, &target, &clone);
    assert!(
        log.contains("objects outside the bitmapped objects"),
        "the clone walked the push's objects: {log}"
    );
    assert!(
        !log.contains("cannot answer"),
        "the clone counted with the bitmap: {log}"
    );
    let after = Repo {
        path: clone.clone(),
        git_dir: clone.clone(),
        home: sb.home.clone(),
    };
    after.git(&["fsck", "--strict", "--no-progress", "--no-dangling"]);
    assert_eq!(refs(&after), refs(&server));

    let early = Repo {
        path: early.clone(),
        git_dir: early.clone(),
        home: sb.home.clone(),
    };
    let log = upload_logged(
        &early.path,
        &sb,
        &["fetch", "-q", &target, "+refs/*:refs/*"],
    );
    assert!(
        log.contains("objects outside the bitmapped objects") && !log.contains("cannot answer"),
        "the fetch counted with the bitmap: {log}"
    );
    early.git(&["fsck", "--strict", "--no-progress", "--no-dangling"]);
    assert_eq!(refs(&early), refs(&server));

    // A partial clone's lazy fetches want blobs, which are not ref tips: whether some ref
    // reaches them is answered with the bitmap too, for a pushed blob and a packed one.
    server.git(&["config", "uploadpack.allowFilter", "true"]);
    let partial = sb.path().join("partial");
    upload_logged(
        sb.path(),
        &sb,
        &[
            "clone",
            "-q",
            "--bare",
            "--no-local",
            "--filter=blob:none",
            &target,
            partial.to_str().unwrap(),
        ],
    );
    let up = format!("{} upload-pack", common::PACKD);
    sb.git_in(&partial, &["config", "remote.origin.uploadpack", &up]);
    for (path, content) in [("dir/new", "new\n"), ("f5", "5\n")] {
        let blob = rev(&server, &format!("main:{path}"));
        let mut cmd = sb.git_cmd(&partial);
        cmd.env("PACKD_LOG", "packd_protocol=debug").args([
            "-c",
            "protocol.version=2",
            "cat-file",
            "-p",
            &blob,
        ]);
        let run = common::run_cmd(cmd, None, common::GIT_TIMEOUT);
        run.assert_success();
        assert_eq!(run.out(), content, "{path} fetched lazily");
        assert!(
            run.err()
                .contains("1 wanted objects that are not ref tips checked with the bitmap"),
            "{path}: {}",
            run.err()
        );
    }
}
