//! The client matrix: stock git (HTTP with protocol v0 and v2, git:// with both) and four other
//! implementations of git's protocols (dulwich and pygit2/libgit2 from PyPI, JGit from Maven
//! Central, go-git from the Go module proxy) each clone, make a shallow clone, fetch what the
//! server gained since, and push, against `packd serve --allow-push` over HTTP and git://.
//!
//! Every step is checked on real output, never on a client's exit status alone: the client's
//! copy passes `git fsck --strict` and holds the server's refs and as many objects as the server
//! has for them; a shallow copy holds one commit; after a push, the server's `git
//! for-each-ref` is what it was with `main` moved to the pushed commit, and the server passes
//! `git fsck --strict`; a push that would rewind `main` fails and changes nothing; each client
//! fetches with the protocol version it should (the access log tells v2 from v0). That these
//! checks can fail is shown for every client: through a git:// proxy that lies about `main` (it
//! advertises `main~1`), the client's clone is caught.
//!
//! The clients other than git are installed (pinned, cached) by
//! `scripts/install-test-clients.sh`, run once per test binary; their drivers, one small
//! program per implementation doing the four operations, are under `tests/clients/`.

mod common;
mod serve_support;

use common::{FastImport, Repo, Run};
use serve_support::{Fixture, Server};
use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::Duration;

/// How long one client operation may take.
const CLIENT_TIMEOUT: Duration = Duration::from_secs(120);

// ---------------------------------------------------------------------------------------------
// The clients
// ---------------------------------------------------------------------------------------------

/// How a client reaches the server.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Transport {
    Http,
    Daemon,
}

/// One implementation of git's client side.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Client {
    /// Stock git with `protocol.version` set to this.
    Git(&'static str),
    Dulwich,
    Pygit2,
    JGit,
    GoGit,
}

/// The four operations every driver implements.
#[derive(Clone, Copy, Debug)]
enum Op<'a> {
    /// A full clone of URL into DIR.
    Clone(&'a str, &'a Path),
    /// A clone of depth 1 of URL into DIR.
    Shallow(&'a str, &'a Path),
    /// A fetch from origin into DIR.
    Fetch(&'a Path),
    /// A push of REFSPEC from DIR to origin.
    Push(&'a Path, &'a str),
}

impl Client {
    /// A short name for paths and messages.
    fn name(self) -> String {
        match self {
            Client::Git(v) => format!("git-v{v}"),
            Client::Dulwich => "dulwich".into(),
            Client::Pygit2 => "pygit2".into(),
            Client::JGit => "jgit".into(),
            Client::GoGit => "go-git".into(),
        }
    }

    /// The protocol version the client speaks to fetch (the pinned libraries' defaults:
    /// dulwich and JGit ask for v2, libgit2 and go-git speak only v0).
    fn protocol(self) -> &'static str {
        match self {
            Client::Git(version) => version,
            Client::Dulwich | Client::JGit => "2",
            Client::Pygit2 | Client::GoGit => "0",
        }
    }

    /// The installed part of `scripts/install-test-clients.sh` this client needs.
    fn part(self) -> Option<&'static str> {
        match self {
            Client::Git(_) => None,
            Client::Dulwich | Client::Pygit2 => Some("python"),
            Client::JGit => Some("jgit"),
            Client::GoGit => Some("go-git"),
        }
    }

    /// Runs `op` with this client, in the sandbox's environment (its HOME, no user config).
    fn run(self, f: &Fixture, op: Op) -> Run {
        let mut cmd = match self {
            Client::Git(version) => {
                let mut cmd = Command::new("git");
                cmd.args(["-c", &format!("protocol.version={version}")]);
                match op {
                    Op::Clone(url, dir) => {
                        cmd.args(["clone", "-q", "--no-checkout", url]).arg(dir);
                    }
                    Op::Shallow(url, dir) => {
                        cmd.args(["clone", "-q", "--no-checkout", "--depth", "1", url]);
                        cmd.arg(dir);
                    }
                    Op::Fetch(dir) => {
                        cmd.arg("-C").arg(dir).args(["fetch", "-q", "origin"]);
                    }
                    Op::Push(dir, spec) => {
                        cmd.arg("-C").arg(dir).args(["push", "-q", "origin", spec]);
                    }
                }
                cmd
            }
            _ => {
                let mut cmd = self.driver(&f.sandbox.home);
                match op {
                    Op::Clone(url, dir) => cmd.args(["clone", url]).arg(dir),
                    Op::Shallow(url, dir) => cmd.args(["shallow", url]).arg(dir),
                    Op::Fetch(dir) => cmd.arg("fetch").arg(dir),
                    Op::Push(dir, spec) => cmd.arg("push").arg(dir).arg(spec),
                };
                cmd
            }
        };
        common::apply_env(&mut cmd, &f.sandbox.home);
        cmd.current_dir(f.sandbox.path());
        common::run_cmd(cmd, None, CLIENT_TIMEOUT)
    }

    /// The driver program of a client other than git, up to its operation.
    fn driver(self, home: &Path) -> Command {
        let cache = installed(self.part().expect("a client with a driver"));
        let clients = repo_root().join("tests/clients");
        match self {
            Client::Dulwich | Client::Pygit2 => {
                let mut cmd = Command::new(cache.join("python/venv/bin/python"));
                cmd.arg(clients.join("python/client.py"));
                cmd.arg(if self == Client::Dulwich {
                    "dulwich"
                } else {
                    "pygit2"
                });
                cmd
            }
            Client::JGit => {
                let mut cmd = Command::new("java");
                // JGit finds the user's config from `user.home`, not HOME: the sandbox's.
                cmd.arg(format!("-Duser.home={}", home.display()));
                cmd.args(["-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC", "-cp"]);
                cmd.arg(format!(
                    "{}:{}",
                    cache.join("jgit/lib/*").display(),
                    cache.join("jgit/classes").display()
                ));
                cmd.arg("Client");
                cmd
            }
            Client::GoGit => Command::new(cache.join("go-git/go-git-client")),
            Client::Git(_) => unreachable!("git has no driver"),
        }
    }
}

/// The workspace's root directory.
fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .unwrap()
}

/// What `scripts/install-test-clients.sh` said, run once per test binary.
struct Install {
    cache: PathBuf,
    output: String,
}

/// The cache directory holding `part`, installed (once per test run) by
/// `scripts/install-test-clients.sh`; panics with the script's output if that part failed.
fn installed(part: &str) -> PathBuf {
    static INSTALL: OnceLock<Install> = OnceLock::new();
    let install = INSTALL.get_or_init(|| {
        let cache = match std::env::var_os("PACKD_TEST_CLIENTS_DIR") {
            Some(dir) => PathBuf::from(dir),
            None => match std::env::var_os("HOME") {
                Some(home) => PathBuf::from(home).join(".cache/packd-test-clients"),
                None => PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("test-clients"),
            },
        };
        let mut cmd = Command::new("bash");
        cmd.arg(repo_root().join("scripts/install-test-clients.sh"));
        cmd.arg(&cache);
        let run = common::run_cmd(cmd, None, Duration::from_secs(900));
        Install {
            cache,
            output: format!("{}{}", run.out(), run.err()),
        }
    });
    let ready = install
        .output
        .lines()
        .any(|l| l == format!("{part}: ready") || l.starts_with(&format!("{part}: installed")));
    assert!(
        ready,
        "scripts/install-test-clients.sh could not install {part}:\n{}",
        install.output
    );
    install.cache.clone()
}

// ---------------------------------------------------------------------------------------------
// Checks on real output
// ---------------------------------------------------------------------------------------------

/// `git ARGS` in `dir`: its stdout, or an error naming the command and its stderr.
fn git_in(f: &Fixture, dir: &Path, args: &[&str]) -> Result<String, String> {
    let run = f.sandbox.git_run_in(dir, args, None);
    if run.success() {
        Ok(run.out())
    } else {
        Err(format!(
            "git {} in {} failed: {}",
            args.join(" "),
            dir.display(),
            run.err()
        ))
    }
}

/// `git fsck --strict --no-dangling` of `dir`.
fn fsck(f: &Fixture, dir: &Path) -> Result<(), String> {
    git_in(f, dir, &["fsck", "--strict", "--no-dangling"]).map(drop)
}

/// The id a ref names in `dir`, if it has that ref.
fn ref_in(f: &Fixture, dir: &Path, name: &str) -> Option<String> {
    let out = git_in(f, dir, &["rev-parse", "--verify", "-q", name]).ok()?;
    Some(out.trim().to_string())
}

/// The id the client's copy `dir` holds for the server's branch `branch`: its remote-tracking
/// ref, or (a bare clone that mirrors branches) its own branch.
fn client_branch(f: &Fixture, dir: &Path, branch: &str) -> Result<String, String> {
    ref_in(f, dir, &format!("refs/remotes/origin/{branch}"))
        .or_else(|| ref_in(f, dir, &format!("refs/heads/{branch}")))
        .ok_or_else(|| format!("{} has no ref for the server's {branch}", dir.display()))
}

/// The server's refs as `git for-each-ref` prints them (`ID TYPE NAME` lines).
fn server_refs(f: &Fixture, server_repo: &Repo) -> String {
    git_in(f, &server_repo.path, &["for-each-ref"]).unwrap()
}

/// `git rev-list --objects --count REV` in `dir`.
fn object_count(f: &Fixture, dir: &Path, rev: &str) -> Result<String, String> {
    git_in(f, dir, &["rev-list", "--objects", "--count", rev]).map(|s| s.trim().to_string())
}

/// A full clone: fsck passes, every server branch and tag is there with the server's id, and
/// `main` has as many objects as on the server.
fn check_clone(f: &Fixture, server_repo: &Repo, dir: &Path) -> Result<(), String> {
    fsck(f, dir)?;
    for line in server_refs(f, server_repo).lines() {
        let (id, name) = line.split_once(' ').unwrap();
        let name = name.split_once('\t').unwrap().1;
        let got = if let Some(branch) = name.strip_prefix("refs/heads/") {
            client_branch(f, dir, branch)?
        } else {
            ref_in(f, dir, name).ok_or_else(|| format!("the clone lacks {name}"))?
        };
        if got != id {
            return Err(format!("{name}: the server has {id}, the clone {got}"));
        }
    }
    let main = client_branch(f, dir, "main")?;
    let (got, want) = (
        object_count(f, dir, &main)?,
        object_count(f, &server_repo.path, &main)?,
    );
    if got != want {
        return Err(format!(
            "main has {got} objects in the clone, {want} on the server"
        ));
    }
    Ok(())
}

/// A clone of depth 1: fsck passes, `main` is the server's, its history is one commit which
/// the shallow file lists, and its tree is whole.
fn check_shallow(f: &Fixture, server_repo: &Repo, dir: &Path) -> Result<(), String> {
    fsck(f, dir)?;
    let main = client_branch(f, dir, "main")?;
    let want = server_repo.git_str(&["rev-parse", "main"]);
    if main != want {
        return Err(format!(
            "main: the server has {want}, the shallow clone {main}"
        ));
    }
    let git_dir = git_in(f, dir, &["rev-parse", "--absolute-git-dir"])?;
    let shallow = std::fs::read_to_string(Path::new(git_dir.trim()).join("shallow"))
        .map_err(|e| format!("no shallow file in {}: {e}", dir.display()))?;
    if !shallow.lines().any(|l| l == main) {
        return Err(format!("the shallow file does not list main: {shallow:?}"));
    }
    let commits = git_in(f, dir, &["rev-list", "--count", &main])?;
    if commits.trim() != "1" {
        return Err(format!("main has {} commits, not 1", commits.trim()));
    }
    let tree = format!("{main}^{{tree}}");
    let (got, want) = (
        object_count(f, dir, &tree)?,
        object_count(f, &server_repo.path, &tree)?,
    );
    if got != want {
        return Err(format!("main's tree: {got} objects, {want} on the server"));
    }
    Ok(())
}

/// After a fetch: fsck passes and `main` is the server's, with all its objects.
fn check_fetch(f: &Fixture, server_repo: &Repo, dir: &Path) -> Result<(), String> {
    fsck(f, dir)?;
    let main = client_branch(f, dir, "main")?;
    let want = server_repo.git_str(&["rev-parse", "main"]);
    if main != want {
        return Err(format!(
            "main: the server has {want}, the fetch left {main}"
        ));
    }
    let (got, want) = (
        object_count(f, dir, &main)?,
        object_count(f, &server_repo.path, &main)?,
    );
    if got != want {
        return Err(format!(
            "main: {got} objects after the fetch, {want} on the server"
        ));
    }
    Ok(())
}

/// After a push of `pushed` to `main`: the server's refs are `before` with main moved to it,
/// the server passes fsck, and it has every object of `pushed` the client has.
fn check_push(
    f: &Fixture,
    server_repo: &Repo,
    dir: &Path,
    before: &str,
    pushed: &str,
) -> Result<(), String> {
    let old_main = server_line(before, "refs/heads/main");
    let want = before.replace(&old_main, &format!("{pushed} commit\trefs/heads/main"));
    let got = server_refs(f, server_repo);
    if got != want {
        return Err(format!(
            "the server's refs after the push:\n{got}\nexpected:\n{want}"
        ));
    }
    fsck(f, &server_repo.path)?;
    let (got, want) = (
        object_count(f, &server_repo.path, pushed)?,
        object_count(f, dir, pushed)?,
    );
    if got != want {
        return Err(format!(
            "pushed main: {got} objects on the server, {want} in the client"
        ));
    }
    Ok(())
}

/// The `for-each-ref` line of `name` in `refs`.
fn server_line(refs: &str, name: &str) -> String {
    refs.lines()
        .find(|l| l.ends_with(&format!("\t{name}")))
        .unwrap_or_else(|| panic!("no {name} in {refs}"))
        .to_string()
}

// ---------------------------------------------------------------------------------------------
// The matrix
// ---------------------------------------------------------------------------------------------

/// Runs `op` with `client`, which must succeed: panics with its output otherwise.
fn run_ok(f: &Fixture, client: Client, op: Op, what: &str) {
    let run = client.run(f, op);
    assert!(
        run.success(),
        "{} {what} failed ({}):\nstderr:\n{}\nstdout:\n{}",
        client.name(),
        run.status,
        run.err(),
        common::truncate(&run.out(), 2000)
    );
}

/// Panics with `what` unless `result` is Ok.
fn check(result: Result<(), String>, client: Client, what: &str) {
    if let Err(e) = result {
        panic!("{} {what}: {e}", client.name());
    }
}

/// Commits in the client's copy `dir` (by git, on top of its `main`) a new file, and points
/// `refs/heads/topic` at it: the commit's id.
fn commit_in_client(f: &Fixture, dir: &Path, name: &str) -> String {
    let main = client_branch(f, dir, "main").unwrap();
    let content = format!("pushed by {name}\n").repeat(100);
    let blob = f.sandbox.git_run_in(
        dir,
        &["hash-object", "-w", "--stdin"],
        Some(content.as_bytes()),
    );
    blob.assert_success();
    let entries = git_in(f, dir, &["ls-tree", &main]).unwrap()
        + &format!("100644 blob {}\tpushed-{name}.txt\n", blob.out().trim());
    let tree = f
        .sandbox
        .git_run_in(dir, &["mktree"], Some(entries.as_bytes()));
    tree.assert_success();
    let commit = f.sandbox.git_run_in(
        dir,
        &["commit-tree", tree.out().trim(), "-p", &main],
        Some(format!("pushed by {name}\n").as_bytes()),
    );
    commit.assert_success();
    let id = commit.out().trim().to_string();
    git_in(f, dir, &["update-ref", "refs/heads/topic", &id]).unwrap();
    id
}

/// Commits on the server repository's `main` a new file (by fast-import): what a fetch gets.
fn server_gains_commit(repo: &Repo, name: &str) {
    let tip = repo.git_str(&["rev-parse", "main"]);
    let mut fi = FastImport::with_time(1_800_000_000);
    fi.commit(
        "refs/heads/main",
        Some(&tip),
        "the server gains a commit\n",
        &[common::inline(
            &format!("server-{name}.txt"),
            format!("for {name}\n").repeat(50),
        )],
    );
    repo.fast_import(&fi.finish());
}

/// The URL of `repo` (a name under the root) on `server` by `transport`.
fn url(server: &Server, transport: Transport, repo: &str) -> String {
    match transport {
        Transport::Http => server.http_url(repo),
        Transport::Daemon => server.git_url(repo),
    }
}

/// Clone, shallow clone, fetch and push with `client` over `transport`, each checked, on a
/// copy of the fixture's repository served as `CLIENT-TRANSPORT.git`.
fn matrix_case(f: &Fixture, server: &Server, client: Client, transport: Transport) {
    let name = format!("{}-{transport:?}", client.name()).to_lowercase();
    let server_repo = f.repo.copy_as(&f.sandbox, &format!("root/{name}.git"));
    let url = url(server, transport, &format!("{name}.git"));
    let what = |op: &str| format!("{op} over {transport:?}");

    let full = f.sandbox.path().join(format!("{name}-clone"));
    run_ok(f, client, Op::Clone(&url, &full), &what("clone"));
    check(check_clone(f, &server_repo, &full), client, &what("clone"));

    let shallow = f.sandbox.path().join(format!("{name}-shallow"));
    let run = client.run(f, Op::Shallow(&url, &shallow));
    assert!(
        run.success(),
        "{} shallow clone over {transport:?} failed:\n{}",
        client.name(),
        run.err()
    );
    check(
        check_shallow(f, &server_repo, &shallow),
        client,
        &what("shallow clone"),
    );

    server_gains_commit(&server_repo, &name);
    run_ok(f, client, Op::Fetch(&full), &what("fetch"));
    check(check_fetch(f, &server_repo, &full), client, &what("fetch"));

    let before = server_refs(f, &server_repo);
    let pushed = commit_in_client(f, &full, &name);
    run_ok(
        f,
        client,
        Op::Push(&full, "refs/heads/topic:refs/heads/main"),
        &what("push"),
    );
    check(
        check_push(f, &server_repo, &full, &before, &pushed),
        client,
        &what("push"),
    );

    // A push that would rewind main (to the commit under the one pushed) is refused, by the
    // client or the server, and the driver says so; the server's refs stay as they are.
    let after = server_refs(f, &server_repo);
    git_in(
        f,
        &full,
        &["update-ref", "refs/heads/behind", &format!("{pushed}~1")],
    )
    .unwrap();
    let run = client.run(f, Op::Push(&full, "refs/heads/behind:refs/heads/main"));
    assert!(
        !run.success(),
        "{} {}: a non-fast-forward push succeeded",
        client.name(),
        what("push")
    );
    assert_eq!(
        server_refs(f, &server_repo),
        after,
        "{}: the server's refs after a refused push",
        client.name()
    );
}

/// The checks can fail: through a git:// proxy that advertises `main~1` for `main`, the
/// client's clone, which the client takes as it comes, does not pass [`check_clone`].
fn lie_is_caught(f: &Fixture, server: &Server, client: Client) {
    let truth = f.repo.git_str(&["rev-parse", "main"]);
    let lie = f.repo.git_str(&["rev-parse", "main~1"]);
    let proxy = lying_proxy(&server.git, &truth, &lie);
    let dir = f.sandbox.path().join(format!("{}-lied-to", client.name()));
    let run = client.run(f, Op::Clone(&format!("git://{proxy}/repo.git"), &dir));
    assert!(
        run.success(),
        "{}: the clone through the lying proxy failed:\n{}",
        client.name(),
        run.err()
    );
    let err = check_clone(f, &f.repo, &dir).expect_err("the clone from a lying server passed");
    assert!(err.contains("refs/heads/main"), "{err}");
}

/// Starts a git:// proxy to `target` that replaces the hex id `truth` by `lie` in every
/// pkt-line the server sends (the ids have the same length, so the lengths stay right); its
/// address. The proxy lives as long as the test process.
fn lying_proxy(target: &str, truth: &str, lie: &str) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let (target, truth, lie) = (target.to_string(), truth.to_string(), lie.to_string());
    std::thread::spawn(move || {
        for client in listener.incoming() {
            let Ok(client) = client else { return };
            let Ok(upstream) = TcpStream::connect(&target) else {
                return;
            };
            let (truth, lie) = (truth.clone(), lie.clone());
            let (mut c_read, mut u_write) =
                (client.try_clone().unwrap(), upstream.try_clone().unwrap());
            std::thread::spawn(move || {
                let _ = std::io::copy(&mut c_read, &mut u_write);
                let _ = u_write.shutdown(Shutdown::Write);
            });
            std::thread::spawn(move || {
                relay_pkt_lines(upstream, client, truth.as_bytes(), lie.as_bytes());
            });
        }
    });
    addr
}

/// Copies pkt-lines from `from` to `to` with `truth` replaced by `lie`, then (at a length that
/// is not a pkt-line's) the rest as it is.
fn relay_pkt_lines(mut from: TcpStream, mut to: TcpStream, truth: &[u8], lie: &[u8]) {
    let mut head = [0u8; 4];
    while from.read_exact(&mut head).is_ok() {
        let len = std::str::from_utf8(&head)
            .ok()
            .and_then(|h| usize::from_str_radix(h, 16).ok());
        let mut line = head.to_vec();
        match len {
            Some(len) if len >= 4 => {
                let mut body = vec![0u8; len - 4];
                if from.read_exact(&mut body).is_err() {
                    break;
                }
                line.extend(replace(&body, truth, lie));
            }
            Some(_) => {}
            None => {
                let _ = to.write_all(&line);
                let _ = std::io::copy(&mut from, &mut to);
                break;
            }
        }
        if to.write_all(&line).is_err() {
            break;
        }
    }
    let _ = to.shutdown(Shutdown::Write);
}

/// `data` with every `from` replaced by `to` (of the same length).
fn replace(data: &[u8], from: &[u8], to: &[u8]) -> Vec<u8> {
    let mut out = data.to_vec();
    let mut i = 0;
    while i + from.len() <= out.len() {
        if &out[i..i + from.len()] == from {
            out[i..i + from.len()].copy_from_slice(to);
            i += from.len();
        } else {
            i += 1;
        }
    }
    out
}

/// The whole matrix row of `client`: both transports (in parallel, each on its own copy of
/// the repository), then the lying server.
fn matrix_row(client: Client, transports: &[Transport]) {
    if let Some(part) = client.part() {
        installed(part);
    }
    let f = Fixture::new();
    let server = Server::start(&f.sandbox, &f.root, &["--allow-push"]);
    std::thread::scope(|s| {
        for &transport in transports {
            let (f, server) = (&f, &server);
            s.spawn(move || matrix_case(f, server, client, transport));
        }
        lie_is_caught(&f, &server, client);
    });
    // Protocol v2 fetches are logged by their command (`ls-refs`, `fetch`), v0's by service.
    let log = server.log_text();
    let spoke_v2 = log.contains("service=ls-refs");
    let spoke_v0 = log.contains("service=upload-pack");
    assert_eq!(
        (spoke_v0, spoke_v2),
        (client.protocol() == "0", client.protocol() == "2"),
        "{} fetches with protocol v{} only:\n{log}",
        client.name(),
        client.protocol()
    );
}

#[test]
fn git_protocol_v0_over_http_and_git_daemon() {
    matrix_row(Client::Git("0"), &[Transport::Http, Transport::Daemon]);
}

#[test]
fn git_protocol_v2_over_http_and_git_daemon() {
    matrix_row(Client::Git("2"), &[Transport::Http, Transport::Daemon]);
}

#[test]
fn dulwich_over_http_and_git_daemon() {
    matrix_row(Client::Dulwich, &[Transport::Http, Transport::Daemon]);
}

#[test]
fn pygit2_over_http_and_git_daemon() {
    matrix_row(Client::Pygit2, &[Transport::Http, Transport::Daemon]);
}

#[test]
fn jgit_over_http_and_git_daemon() {
    matrix_row(Client::JGit, &[Transport::Http, Transport::Daemon]);
}

#[test]
fn go_git_over_http_and_git_daemon() {
    matrix_row(Client::GoGit, &[Transport::Http, Transport::Daemon]);
}
