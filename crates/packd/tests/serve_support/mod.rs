//! Shared by the `packd serve` tests: a running server (killed on drop) started on port 0 with
//! its printed addresses read back, a repository worth cloning, and a raw HTTP/1.1 client for
//! requests git would never send.

#![allow(dead_code)]

use crate::common::{self, FastImport, Repo, Sandbox};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

/// A `packd serve` process, killed when dropped.
pub struct Server {
    child: Child,
    /// `127.0.0.1:PORT` of the HTTP listener.
    pub http: String,
    /// `127.0.0.1:PORT` of the git:// listener.
    pub git: String,
    /// Where its stderr (the access log) goes.
    pub log: PathBuf,
}

impl Server {
    /// The server's peak resident memory so far (VmHWM), in KiB.
    pub fn peak_rss_kib(&self) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid())).unwrap();
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmHWM:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .expect("VmHWM")
    }

    /// Starts `packd serve --root ROOT --listen 127.0.0.1:0 --git-daemon 127.0.0.1:0 EXTRA...`.
    pub fn start(sandbox: &Sandbox, root: &Path, extra: &[&str]) -> Server {
        Server::start_logging(sandbox, root, extra, "info")
    }

    /// [`Server::start`] with `PACKD_LOG=FILTER` (the access log is at info); an empty FILTER
    /// leaves `PACKD_LOG` unset, for the default filter.
    pub fn start_logging(sandbox: &Sandbox, root: &Path, extra: &[&str], filter: &str) -> Server {
        let mut args = vec![std::ffi::OsString::from("--root"), root.into()];
        args.extend(extra.iter().map(std::ffi::OsString::from));
        Server::start_with(sandbox, &args, &[], filter)
    }

    /// `packd serve --listen 127.0.0.1:0 --git-daemon 127.0.0.1:0 ARGS...` with `env` added
    /// to its environment and `PACKD_LOG=FILTER` (see [`Server::start_logging`]).
    pub fn start_with(
        sandbox: &Sandbox,
        args: &[std::ffi::OsString],
        env: &[(String, String)],
        filter: &str,
    ) -> Server {
        let log = sandbox.path().join(format!(
            "serve-{}.log",
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos()
        ));
        let mut cmd = Command::new(common::PACKD);
        common::apply_env(&mut cmd, &sandbox.home);
        if filter.is_empty() {
            cmd.env_remove("PACKD_LOG");
        } else {
            cmd.env("PACKD_LOG", filter);
        }
        cmd.arg("serve");
        cmd.args(["--listen", "127.0.0.1:0", "--git-daemon", "127.0.0.1:0"]);
        cmd.args(args);
        cmd.envs(env.iter().map(|(k, v)| (k, v)));
        cmd.stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&log).unwrap());
        let mut child = cmd.spawn().expect("start packd serve");
        let stdout = child.stdout.take().expect("piped stdout");
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let mut server = Server {
            child,
            http: String::new(),
            git: String::new(),
            log,
        };
        for _ in 0..2 {
            let line = match rx.recv_timeout(Duration::from_secs(20)) {
                Ok(line) => line,
                Err(_) => panic!(
                    "packd serve printed no address; stderr:\n{}",
                    server.log_text()
                ),
            };
            if let Some(a) = line.strip_prefix("listening on http://") {
                server.http = a.to_string();
            } else if let Some(a) = line.strip_prefix("listening on git://") {
                server.git = a.to_string();
            } else {
                panic!("unexpected first lines from packd serve: {line}");
            }
        }
        assert!(!server.http.is_empty() && !server.git.is_empty());
        server
    }

    /// `http://ADDR/PATH`.
    pub fn http_url(&self, path: &str) -> String {
        format!("http://{}/{path}", self.http)
    }

    /// `git://ADDR/PATH`.
    pub fn git_url(&self, path: &str) -> String {
        format!("git://{}/{path}", self.git)
    }

    /// The access log so far.
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The server's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Sends `signal` (`libc::SIGTERM`, ...) to the server.
    pub fn signal(&self, signal: i32) {
        // SAFETY: kill only sends a signal to the child, which is not reaped yet.
        let r = unsafe { libc::kill(self.child.id() as i32, signal) };
        assert_eq!(r, 0, "kill failed");
    }

    /// Waits at most `limit` for the server to exit; its status, or `None` if it still runs.
    pub fn wait_exit(&mut self, limit: Duration) -> Option<std::process::ExitStatus> {
        let deadline = std::time::Instant::now() + limit;
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Some(status);
            }
            if std::time::Instant::now() >= deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Whether the process is still running (no crash).
    pub fn alive(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The bytes of the one pack file of the repository at `git_dir`.
pub fn only_pack_of(git_dir: &Path) -> Vec<u8> {
    let packs: Vec<PathBuf> = std::fs::read_dir(git_dir.join("objects/pack"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "pack"))
        .collect();
    assert_eq!(packs.len(), 1, "{packs:?}");
    std::fs::read(&packs[0]).unwrap()
}

/// The object count a pack's header says.
pub fn pack_object_count(pack: &[u8]) -> u32 {
    assert!(pack.len() >= 32, "a pack of {} bytes", pack.len());
    u32::from_be_bytes(pack[8..12].try_into().unwrap())
}

/// Asserts that `got` is the pack file `served`'s entries as they are, under a header that
/// counts `extra` objects more, then those objects and a trailer: what a mirror clone after a
/// push receives.
pub fn assert_pack_then(what: &str, served: &[u8], got: &[u8], extra: u32) {
    assert_eq!(
        pack_object_count(got),
        pack_object_count(served) + extra,
        "{what}: object count"
    );
    let entries_end = served.len() - 20;
    assert!(got.len() > entries_end, "{what}: {} bytes", got.len());
    common::assert_same_bytes(
        &format!("{what}: the pack's entries"),
        &served[12..entries_end],
        &got[12..entries_end],
    );
}

/// A served root with `repo.git` (branches, annotated and lightweight tags, a packed history
/// plus loose commits) in it.
pub struct Fixture {
    pub sandbox: Sandbox,
    pub root: PathBuf,
    pub repo: Repo,
}

impl Fixture {
    /// `root/broken.git`: `main` of `repo.git` in one pack whose index is cut short, so that
    /// the repository cannot be opened. Returns the repository's resolved path (as the server
    /// names it) and the index's file name.
    pub fn broken_repo(&self) -> (String, String) {
        let broken = self.sandbox.init_bare("root/broken.git");
        broken.git(&["fetch", "-q", self.repo.path.to_str().unwrap(), "main:main"]);
        broken.git(&["repack", "-adq"]);
        let idx = broken.packs()[0].with_extension("idx");
        let name = idx.file_name().unwrap().to_str().unwrap().to_string();
        common::rewrite(&idx, |bytes| bytes.truncate(500));
        let dir = broken.path.canonicalize().unwrap();
        (dir.to_str().unwrap().to_string(), name)
    }

    /// Asserts that `told` (what a client of `server` was told about [`Fixture::broken_repo`]'s
    /// repository at `dir`, with index `name`) names the index from the repository's directory
    /// and not `dir`, and that the server's log names its full path.
    pub fn assert_named_from_repo(server: &Server, told: &str, dir: &str, name: &str) {
        assert!(
            told.contains(&format!("./objects/pack/{name}")),
            "the reason names the index: {told:?}"
        );
        assert!(!told.contains(dir), "the client is told {dir}: {told:?}");
        let log = server.log_text();
        assert!(
            log.contains(&format!("{dir}/objects/pack/{name}")),
            "packd's log names the full path: {log}"
        );
    }

    pub fn new() -> Fixture {
        let sandbox = Sandbox::new();
        let root = sandbox.path().join("root");
        std::fs::create_dir_all(&root).unwrap();
        let repo = sandbox.init_bare("root/repo.git");
        let mut fi = FastImport::new();
        let mut last = None;
        for i in 0..30 {
            let body = (0..50)
                .map(|j| format!("line {j} of file {} at commit {i}\n", i % 4))
                .collect::<String>();
            let from = last.map(|m: u32| format!(":{m}"));
            let m = fi.commit(
                "refs/heads/main",
                from.as_deref(),
                &format!("commit {i}\n"),
                &[
                    common::inline(&format!("dir{}/file{}.txt", i % 3, i % 4), body),
                    common::inline("counter", format!("{i}\n")),
                ],
            );
            last = Some(m);
            if i == 10 {
                fi.tag("v1.0", &format!(":{m}"), "release 1.0\n");
            }
            if i == 20 {
                fi.reset("refs/tags/light", &format!(":{m}"));
                let side = fi.commit(
                    "refs/heads/side",
                    Some(&format!(":{m}")),
                    "side\n",
                    &[common::inline("side.txt", "side\n")],
                );
                let _ = side;
            }
        }
        repo.fast_import(&fi.finish());
        // A couple of loose commits on top of the pack.
        let tree = repo.git_str(&["rev-parse", "main^{tree}"]);
        let mut head = repo.git_str(&["rev-parse", "main"]);
        for i in 0..2 {
            head = String::from_utf8(repo.git_stdin(
                &["commit-tree", &tree, "-p", &head],
                format!("loose {i}\n").as_bytes(),
            ))
            .unwrap()
            .trim()
            .to_string();
        }
        repo.git(&["update-ref", "refs/heads/main", &head]);
        Fixture {
            sandbox,
            root,
            repo,
        }
    }

    /// `git ARGS` run in the sandbox (not inside a repository).
    pub fn git(&self, args: &[&str]) -> common::Run {
        self.sandbox.git_run_in(self.sandbox.path(), args, None)
    }

    /// Adds a commit of a 256 KiB incompressible file (a pack file of less than 64 KiB is read
    /// whole, never sent from the file) and repacks with a bitmap: a mirror clone is then the
    /// one pack file as it is, whose bytes this returns.
    pub fn repack_whole(&self) -> Vec<u8> {
        self.commit_big_file("big.bin", 11, 1_800_000_000);
        self.repo.git(&["repack", "-adbq"]);
        let packs = self.repo.packs();
        assert_eq!(packs.len(), 1);
        std::fs::read(&packs[0]).unwrap()
    }

    /// Commits on `main` a 256 KiB incompressible file `name` (random bytes from `seed`) at
    /// `time`, by fast-import (which leaves it packed, with a few objects loose).
    pub fn commit_big_file(&self, name: &str, seed: u64, time: u64) {
        let tip = self.repo.git_str(&["rev-parse", "main"]);
        let mut fi = FastImport::with_time(time);
        let mut rng = common::Rng::new(seed);
        fi.commit(
            "refs/heads/main",
            Some(&tip),
            &format!("{name}\n"),
            &[common::inline(name, rng.bytes(256 << 10))],
        );
        self.repo.fast_import(&fi.finish());
    }

    /// `git clone --mirror URL` with protocol `version` into the sandbox's NAME, checked by
    /// `git fsck --strict`, against the served refs and against git's count of their objects:
    /// its path.
    pub fn mirror_clone(&self, version: &str, url: &str, name: &str) -> PathBuf {
        let dst = self.sandbox.path().join(name);
        self.git(&[
            "-c",
            &format!("protocol.version={version}"),
            "clone",
            "--mirror",
            url,
            dst.to_str().unwrap(),
        ])
        .assert_success();
        self.fsck(&dst);
        assert_eq!(
            self.refs_of(&dst),
            self.refs_of(&self.repo.path),
            "refs after clone v{version}"
        );
        self.assert_same_count(&dst, "--all", &format!("objects of {name}"));
        dst
    }

    /// Asserts that tag `name` of the sandbox's repository `dst` names what the served one's does
    /// (a tag followed by a clone).
    pub fn assert_same_tag(&self, dst: &Path, name: &str, what: &str) {
        let tag = format!("refs/tags/{name}");
        assert_eq!(
            self.sandbox
                .git_run_in(dst, &["rev-parse", &tag], None)
                .out()
                .trim(),
            self.repo.git_str(&["rev-parse", &tag]),
            "{what}: {tag}"
        );
    }

    /// `git fsck --strict --no-dangling` of the sandbox's repository `dst`, which must pass.
    pub fn fsck(&self, dst: &Path) {
        self.sandbox
            .git_run_in(dst, &["fsck", "--strict", "--no-dangling"], None)
            .assert_success();
    }

    /// Asserts that `dst` holds as many objects reachable from `revs` (`--all`, or a branch) as
    /// the served repository.
    pub fn assert_same_count(&self, dst: &Path, revs: &str, what: &str) {
        let count = ["rev-list", "--objects", "--count", revs];
        assert_eq!(
            self.sandbox.git_run_in(dst, &count, None).out().trim(),
            self.repo.git_str(&count),
            "{what}"
        );
    }

    /// A `packd serve` of the root with `extra` options, logging the pack writer's debug lines
    /// (which say how each pack went out).
    pub fn pack_logging_server(&self, extra: &[&str]) -> Server {
        Server::start_logging(&self.sandbox, &self.root, extra, "info,packd_pack=debug")
    }

    /// `git clone -q URL` into the sandbox's `work` directory, which must succeed: its path.
    pub fn clone_work(&self, url: &str) -> PathBuf {
        let dst = self.sandbox.path().join("work");
        self.git(&["clone", "-q", url, dst.to_str().unwrap()])
            .assert_success();
        dst
    }

    /// `git clone --bare --single-branch --branch main --no-tags URL` with protocol `version`
    /// into the sandbox's NAME, which must succeed, pass `git fsck --strict` and hold as many
    /// objects reachable from `main` as the served repository: its path.
    pub fn clone_main(&self, version: &str, url: &str, name: &str) -> PathBuf {
        self.clone_main_with(version, url, name, false)
    }

    /// [`Fixture::clone_main`], following tags (without `--no-tags`) when `follow_tags`.
    pub fn clone_main_with(
        &self,
        version: &str,
        url: &str,
        name: &str,
        follow_tags: bool,
    ) -> PathBuf {
        let dst = self.sandbox.path().join(name);
        let version_config = format!("protocol.version={version}");
        let mut args = vec![
            "-c",
            &version_config,
            "clone",
            "-q",
            "--bare",
            "--single-branch",
            "--branch",
            "main",
        ];
        if !follow_tags {
            args.push("--no-tags");
        }
        args.extend([url, dst.to_str().unwrap()]);
        self.git(&args).assert_success();
        self.fsck(&dst);
        self.assert_same_count(
            &dst,
            "main",
            &format!("objects of main after a v{version} clone"),
        );
        dst
    }

    /// A new commit on the served repository's `main` (same tree, `message`): its id.
    pub fn commit_on_main(&self, message: &str) -> String {
        self.repo.commit_on_main(message)
    }

    /// `git -c protocol.version=VERSION ls-remote TARGET`, which must succeed: its output.
    pub fn ls_remote(&self, version: &str, target: &str) -> String {
        let run = self.git(&[
            "-c",
            &format!("protocol.version={version}"),
            "ls-remote",
            target,
        ]);
        run.assert_success();
        run.out()
    }

    /// `git show-ref --head` of a repository, sorted, plus its HEAD symref.
    pub fn refs_of(&self, path: &Path) -> String {
        let run = self.sandbox.git_run_in(path, &["show-ref", "--head"], None);
        run.assert_success();
        let head = self
            .sandbox
            .git_run_in(path, &["symbolic-ref", "HEAD"], None);
        format!("{}symbolic HEAD: {}", run.out(), head.out())
    }
}

/// A parsed HTTP response.
#[derive(Debug)]
pub struct HttpResponse {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl HttpResponse {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

/// Sends `head` (request line and headers, without the blank line; `Connection: close` is
/// added) and `body`, reads the whole response and parses it (chunked bodies decoded).
pub fn http(addr: &str, head: &str, body: &[u8]) -> HttpResponse {
    let mut s = TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let mut req = format!("{head}\r\nHost: {addr}\r\nConnection: close\r\n");
    if !body.is_empty() {
        req.push_str(&format!("Content-Length: {}\r\n", body.len()));
    }
    req.push_str("\r\n");
    s.write_all(req.as_bytes()).unwrap();
    // The server may answer (and close) before taking a body it refuses.
    let _ = s.write_all(body);
    let mut raw = Vec::new();
    let _ = s.read_to_end(&mut raw);
    parse_response(&raw)
}

pub fn parse_response(raw: &[u8]) -> HttpResponse {
    let end = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .unwrap_or_else(|| panic!("no HTTP head in {:?}", String::from_utf8_lossy(raw)));
    let head = String::from_utf8_lossy(&raw[..end]).into_owned();
    let mut lines = head.split("\r\n");
    let status_line = lines.next().unwrap();
    let status: u16 = status_line
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("bad status line {status_line}"));
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .collect();
    let mut body = raw[end + 4..].to_vec();
    let chunked = headers.iter().any(|(k, v)| {
        k.eq_ignore_ascii_case("transfer-encoding") && v.eq_ignore_ascii_case("chunked")
    });
    if chunked {
        body = dechunk(&body);
    }
    HttpResponse {
        status,
        headers,
        body,
    }
}

fn dechunk(mut data: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    loop {
        let Some(eol) = data.windows(2).position(|w| w == b"\r\n") else {
            panic!("truncated chunked body");
        };
        let size_text = String::from_utf8_lossy(&data[..eol]).into_owned();
        let size = usize::from_str_radix(size_text.split(';').next().unwrap().trim(), 16)
            .unwrap_or_else(|_| panic!("bad chunk size {size_text:?}"));
        data = &data[eol + 2..];
        if size == 0 {
            return out;
        }
        assert!(data.len() >= size + 2, "truncated chunk");
        out.extend_from_slice(&data[..size]);
        data = &data[size + 2..];
    }
}

/// A TCP connection to `dst` from the local address `src` (any of 127.0.0.0/8 is this
/// machine), for tests of limits per client address.
pub fn connect_from(src: &str, dst: &str) -> TcpStream {
    use std::os::fd::FromRawFd;
    let src: std::net::Ipv4Addr = src.parse().unwrap();
    let dst: std::net::SocketAddrV4 = dst.parse().unwrap();
    let sockaddr = |ip: std::net::Ipv4Addr, port: u16| libc::sockaddr_in {
        sin_family: libc::AF_INET as libc::sa_family_t,
        sin_port: port.to_be(),
        sin_addr: libc::in_addr {
            s_addr: u32::from(ip).to_be(),
        },
        sin_zero: [0; 8],
    };
    let len = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
    // SAFETY: a fresh socket, bound and connected with initialised addresses of their size,
    // then owned by the TcpStream.
    unsafe {
        let fd = libc::socket(libc::AF_INET, libc::SOCK_STREAM, 0);
        assert!(fd >= 0, "socket");
        let local = sockaddr(src, 0);
        assert_eq!(
            libc::bind(fd, &local as *const _ as *const libc::sockaddr, len),
            0,
            "bind {src}"
        );
        let remote = sockaddr(*dst.ip(), dst.port());
        assert_eq!(
            libc::connect(fd, &remote as *const _ as *const libc::sockaddr, len),
            0,
            "connect {dst}"
        );
        TcpStream::from_raw_fd(fd)
    }
}

/// One pkt-line.
pub fn pkt(s: &str) -> Vec<u8> {
    format!("{:04x}{s}", s.len() + 4).into_bytes()
}
