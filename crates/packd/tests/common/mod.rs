//! Shared helpers for packd's integration tests: running git and packd in a sandbox (with a
//! deadline), building repositories with `git fast-import`, a small deterministic PRNG, and a
//! minimal pack / idx v2 writer for hand-crafted (and deliberately broken) packs.

#![allow(dead_code)]

use std::fmt::Write as _;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// How long one packd run may take before the test fails.
pub const PACKD_TIMEOUT: Duration = Duration::from_secs(20);
/// How long one git run may take.
pub const GIT_TIMEOUT: Duration = Duration::from_secs(120);

pub const PACKD: &str = env!("CARGO_BIN_EXE_packd");

// ---------------------------------------------------------------------------------------------
// Processes
// ---------------------------------------------------------------------------------------------

/// The result of one finished process.
#[derive(Debug)]
pub struct Run {
    pub desc: String,
    pub status: ExitStatus,
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
}

impl Run {
    pub fn success(&self) -> bool {
        self.status.success()
    }
    pub fn code(&self) -> Option<i32> {
        self.status.code()
    }
    pub fn out(&self) -> String {
        String::from_utf8_lossy(&self.stdout).into_owned()
    }
    pub fn err(&self) -> String {
        String::from_utf8_lossy(&self.stderr).into_owned()
    }
    /// Panics (with the command and its stderr) unless the process exited 0.
    pub fn assert_success(&self) -> &Self {
        assert!(
            self.success(),
            "command failed ({}): {}\nstderr:\n{}\nstdout (start):\n{}",
            self.status,
            self.desc,
            self.err(),
            truncate(&self.out(), 2000)
        );
        self
    }
    /// Panics unless the process ended by itself (not killed by a signal: abort, segfault,
    /// stack overflow) and printed no Rust panic.
    pub fn assert_no_crash(&self) -> &Self {
        assert!(
            self.status.code().is_some(),
            "process was killed by a signal ({}): {}\nstderr:\n{}",
            self.status,
            self.desc,
            self.err()
        );
        assert!(
            !self.err().contains("panicked"),
            "process panicked: {}\nstderr:\n{}",
            self.desc,
            self.err()
        );
        self
    }
}

/// The names of the entries of `dir`, sorted.
pub fn files_in(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

pub fn truncate(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_string();
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}... ({} bytes in all)", &s[..end], s.len())
}

/// Runs `cmd`, feeding it `stdin`, and waits at most `timeout`; on timeout kills it and panics.
pub fn run_cmd(mut cmd: Command, stdin: Option<&[u8]>, timeout: Duration) -> Run {
    let desc = format!("{cmd:?}");
    cmd.stdin(if stdin.is_some() {
        Stdio::piped()
    } else {
        Stdio::null()
    });
    cmd.stdout(Stdio::piped());
    cmd.stderr(Stdio::piped());
    let mut child = cmd
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {desc}: {e}"));
    let input = stdin.map(|s| s.to_vec());
    let child_stdin = child.stdin.take();
    let writer = std::thread::spawn(move || {
        if let (Some(mut w), Some(data)) = (child_stdin, input) {
            // The child may exit without reading everything: ignore EPIPE.
            let _ = w.write_all(&data);
        }
    });
    let mut out = child.stdout.take().expect("piped stdout");
    let mut err = child.stderr.take().expect("piped stderr");
    let out_reader = std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = out.read_to_end(&mut v);
        v
    });
    let err_reader = std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = err.read_to_end(&mut v);
        v
    });
    let deadline = Instant::now() + timeout;
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait for child") {
            break status;
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            let _ = writer.join();
            let _ = out_reader.join();
            let stderr = err_reader.join().unwrap_or_default();
            panic!(
                "timed out after {timeout:?} (killed): {desc}\nstderr:\n{}",
                truncate(&String::from_utf8_lossy(&stderr), 4000)
            );
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    let _ = writer.join();
    let stdout = out_reader.join().expect("stdout reader");
    let stderr = err_reader.join().expect("stderr reader");
    Run {
        desc,
        status,
        stdout,
        stderr,
    }
}

/// A clean, deterministic environment for git and packd: no system or user configuration, fixed
/// identities and dates.
pub fn apply_env(cmd: &mut Command, home: &Path) {
    cmd.env_clear();
    if let Some(path) = std::env::var_os("PATH") {
        cmd.env("PATH", path);
    }
    cmd.env("HOME", home)
        .env("XDG_CONFIG_HOME", home.join(".config"))
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("LC_ALL", "C")
        .env("LANG", "C")
        .env("TZ", "UTC")
        .env("GIT_AUTHOR_NAME", "A U Thor")
        .env("GIT_AUTHOR_EMAIL", "author@example.com")
        .env("GIT_AUTHOR_DATE", "1700000000 +0000")
        .env("GIT_COMMITTER_NAME", "C O Mitter")
        .env("GIT_COMMITTER_EMAIL", "committer@example.com")
        .env("GIT_COMMITTER_DATE", "1700000000 +0000")
        .env("GIT_TERMINAL_PROMPT", "0");
}

/// A temporary directory with a private HOME.
pub struct Sandbox {
    pub dir: tempfile::TempDir,
    pub home: PathBuf,
}

impl Sandbox {
    pub fn new() -> Sandbox {
        let dir = tempfile::Builder::new()
            .prefix("packd-test-")
            .tempdir()
            .expect("tempdir");
        let home = dir.path().join("home");
        std::fs::create_dir_all(home.join(".config")).unwrap();
        std::fs::write(
            home.join(".gitconfig"),
            "[user]\n\tname = Test User\n\temail = test@example.com\n\
             [init]\n\tdefaultBranch = main\n\
             [gc]\n\tauto = 0\n\
             [maintenance]\n\tauto = false\n\
             [core]\n\tautocrlf = false\n\
             [pack]\n\tthreads = 1\n\
             [advice]\n\tdetachedHead = false\n",
        )
        .unwrap();
        Sandbox { dir, home }
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// A git command run in `cwd`.
    pub fn git_cmd(&self, cwd: &Path) -> Command {
        let mut cmd = Command::new("git");
        apply_env(&mut cmd, &self.home);
        cmd.current_dir(cwd);
        cmd
    }

    /// Runs git in `cwd` and requires success; returns stdout.
    pub fn git_in(&self, cwd: &Path, args: &[&str]) -> Vec<u8> {
        let mut cmd = self.git_cmd(cwd);
        cmd.args(args);
        run_cmd(cmd, None, GIT_TIMEOUT)
            .assert_success()
            .stdout
            .clone()
    }

    /// Runs git in `cwd` (no success required).
    pub fn git_run_in(&self, cwd: &Path, args: &[&str], stdin: Option<&[u8]>) -> Run {
        let mut cmd = self.git_cmd(cwd);
        cmd.args(args);
        run_cmd(cmd, stdin, GIT_TIMEOUT)
    }

    /// Runs packd with current directory `cwd`.
    pub fn packd_in(&self, cwd: &Path, args: &[&str], stdin: Option<&[u8]>) -> Run {
        let mut cmd = Command::new(PACKD);
        apply_env(&mut cmd, &self.home);
        cmd.current_dir(cwd);
        cmd.args(args);
        run_cmd(cmd, stdin, PACKD_TIMEOUT)
    }

    /// `git init --bare NAME`.
    pub fn init_bare(&self, name: &str) -> Repo {
        self.git_in(self.path(), &["init", "-q", "--bare", name]);
        self.bare_repo(name)
    }

    /// `git clone --bare SOURCE NAME`.
    pub fn clone_bare(&self, source: &Repo, name: &str) -> Repo {
        let source = source.path.to_str().unwrap();
        self.git_in(self.path(), &["clone", "-q", "--bare", source, name]);
        self.bare_repo(name)
    }

    /// The bare repository NAME in the sandbox.
    fn bare_repo(&self, name: &str) -> Repo {
        let path = self.path().join(name);
        Repo {
            git_dir: path.clone(),
            path,
            home: self.home.clone(),
        }
    }

    /// `git init NAME` (with a work tree).
    pub fn init(&self, name: &str) -> Repo {
        let path = self.path().join(name);
        self.git_in(self.path(), &["init", "-q", name]);
        Repo {
            git_dir: path.join(".git"),
            path,
            home: self.home.clone(),
        }
    }

    /// `git init NAME` with two commits on main, `f` holding "one\n" then "two\n": the client
    /// of the push tests.
    pub fn client_with_two_commits(&self, name: &str) -> Repo {
        let client = self.init(name);
        std::fs::write(client.path.join("f"), "one\n").unwrap();
        client.git(&["add", "f"]);
        client.git(&["commit", "-q", "-m", "one"]);
        std::fs::write(client.path.join("f"), "two\n").unwrap();
        client.git(&["commit", "-q", "-am", "two"]);
        client
    }
}

/// A repository in a sandbox. `path` is what `-C` gets (the work tree, or the bare repository).
#[derive(Clone, Debug)]
pub struct Repo {
    pub path: PathBuf,
    pub git_dir: PathBuf,
    pub home: PathBuf,
}

impl Repo {
    /// A copy of this bare repository (`cp -a`) named `name` in `sb`.
    pub fn copy_as(&self, sb: &Sandbox, name: &str) -> Repo {
        let path = sb.path().join(name);
        let mut cp = Command::new("cp");
        cp.arg("-a").arg(&self.path).arg(&path);
        run_cmd(cp, None, GIT_TIMEOUT).assert_success();
        Repo {
            path: path.clone(),
            git_dir: path,
            home: self.home.clone(),
        }
    }

    pub fn objects_dir(&self) -> PathBuf {
        self.git_dir.join("objects")
    }
    pub fn pack_dir(&self) -> PathBuf {
        self.objects_dir().join("pack")
    }

    pub fn git_cmd(&self) -> Command {
        let mut cmd = Command::new("git");
        apply_env(&mut cmd, &self.home);
        cmd.current_dir(&self.path);
        cmd
    }

    /// Runs git in the repository and requires success; returns stdout.
    pub fn git(&self, args: &[&str]) -> Vec<u8> {
        self.git_run(args, None).assert_success().stdout.clone()
    }

    /// Like `git`, stdout as a trimmed string.
    pub fn git_str(&self, args: &[&str]) -> String {
        String::from_utf8(self.git(args))
            .unwrap()
            .trim()
            .to_string()
    }

    /// Runs git with stdin and requires success; returns stdout.
    pub fn git_stdin(&self, args: &[&str], stdin: &[u8]) -> Vec<u8> {
        self.git_run(args, Some(stdin))
            .assert_success()
            .stdout
            .clone()
    }

    pub fn git_run(&self, args: &[&str], stdin: Option<&[u8]>) -> Run {
        let mut cmd = self.git_cmd();
        cmd.args(args);
        run_cmd(cmd, stdin, GIT_TIMEOUT)
    }

    /// `packd GLOBAL... -C PATH ARGS...`, from the sandbox's parent directory.
    pub fn packd_with(&self, global: &[&str], args: &[&str], stdin: Option<&[u8]>) -> Run {
        let mut cmd = Command::new(PACKD);
        apply_env(&mut cmd, &self.home);
        cmd.current_dir(self.path.parent().unwrap_or(Path::new("/")));
        cmd.args(global);
        cmd.arg("-C").arg(&self.path);
        cmd.args(args);
        run_cmd(cmd, stdin, PACKD_TIMEOUT)
    }

    pub fn packd(&self, args: &[&str], stdin: Option<&[u8]>) -> Run {
        self.packd_with(&[], args, stdin)
    }

    /// Feeds a fast-import stream to `git fast-import`.
    pub fn fast_import(&self, stream: &[u8]) {
        self.git_stdin(&["fast-import", "--quiet"], stream);
    }

    /// Every object id git sees, sorted.
    pub fn all_ids(&self) -> Vec<String> {
        let out = self.git(&[
            "cat-file",
            "--batch-all-objects",
            "--batch-check=%(objectname)",
        ]);
        String::from_utf8(out)
            .unwrap()
            .lines()
            .map(str::to_string)
            .collect()
    }

    /// The .pack files in objects/pack, sorted by name.
    pub fn packs(&self) -> Vec<PathBuf> {
        let mut v: Vec<PathBuf> = std::fs::read_dir(self.pack_dir())
            .map(|rd| {
                rd.map(|e| e.unwrap().path())
                    .filter(|p| p.extension().is_some_and(|e| e == "pack"))
                    .collect()
            })
            .unwrap_or_default();
        v.sort();
        v
    }

    /// A new commit on `main` (its tree, `message`), as a small push leaves it: loose. Its id.
    pub fn commit_on_main(&self, message: &str) -> String {
        let new = self.commit_on("main", message);
        self.git(&["update-ref", "refs/heads/main", &new]);
        new
    }

    /// A new commit with `parent`'s tree on top of `parent` (a revision), on no ref: its id.
    pub fn commit_on(&self, parent: &str, message: &str) -> String {
        let tree = self.git_str(&["rev-parse", &format!("{parent}^{{tree}}")]);
        let parent = self.git_str(&["rev-parse", parent]);
        let out = self.git_stdin(&["commit-tree", &tree, "-p", &parent], message.as_bytes());
        String::from_utf8(out).unwrap().trim().to_string()
    }

    /// Number of loose objects.
    pub fn loose_count(&self) -> usize {
        let mut n = 0;
        for entry in std::fs::read_dir(self.objects_dir()).unwrap() {
            let entry = entry.unwrap();
            let name = entry.file_name().to_string_lossy().into_owned();
            if name.len() == 2 && name.chars().all(|c| c.is_ascii_hexdigit()) {
                n += std::fs::read_dir(entry.path()).unwrap().count();
            }
        }
        n
    }

    /// Runs `git cat-file ARGS` and `packd GLOBAL cat-file ARGS` with the same stdin, and
    /// requires both to succeed with identical stdout. Returns git's stdout.
    pub fn compare_cat_file(
        &self,
        global: &[&str],
        args: &[&str],
        stdin: Option<&[u8]>,
    ) -> Vec<u8> {
        let mut git_args = vec!["cat-file"];
        git_args.extend_from_slice(args);
        let git = self.git_run(&git_args, stdin);
        git.assert_success();
        let packd = self.packd_with(global, &git_args, stdin);
        packd.assert_no_crash();
        packd.assert_success();
        assert_same_bytes(
            &format!("packd {} {}", global.join(" "), git_args.join(" ")),
            &git.stdout,
            &packd.stdout,
        );
        git.stdout
    }
}

/// Asserts `actual == expected`, describing the first differing line on failure.
pub fn assert_same_bytes(what: &str, expected: &[u8], actual: &[u8]) {
    if expected == actual {
        return;
    }
    let exp_lines: Vec<&[u8]> = expected.split(|&b| b == b'\n').collect();
    let act_lines: Vec<&[u8]> = actual.split(|&b| b == b'\n').collect();
    let first = exp_lines
        .iter()
        .zip(act_lines.iter())
        .position(|(a, b)| a != b)
        .unwrap_or(exp_lines.len().min(act_lines.len()));
    let show = |lines: &[&[u8]], i: usize| -> String {
        let mut s = String::new();
        let start = i.saturating_sub(2);
        for (j, line) in lines.iter().enumerate().skip(start).take(i + 3 - start) {
            let _ = writeln!(
                s,
                "  {j:6}: {}",
                truncate(&String::from_utf8_lossy(line), 200)
            );
        }
        s
    };
    panic!(
        "{what}: output differs from git's.\n\
         git: {} bytes, {} lines; packd: {} bytes, {} lines.\n\
         first difference at line {first}:\n--- git:\n{}--- packd:\n{}",
        expected.len(),
        exp_lines.len(),
        actual.len(),
        act_lines.len(),
        show(&exp_lines, first),
        show(&act_lines, first),
    );
}

/// Sorted lines, for comparing outputs whose order is unspecified.
pub fn sorted_lines(bytes: &[u8]) -> Vec<Vec<u8>> {
    let mut v: Vec<Vec<u8>> = bytes.split(|&b| b == b'\n').map(<[u8]>::to_vec).collect();
    v.sort();
    v
}

/// The object ids of `rev-list --objects` output (the first word of each line), sorted.
pub fn sorted_ids(out: &[u8]) -> Vec<String> {
    let mut ids: Vec<String> = String::from_utf8_lossy(out)
        .lines()
        .map(|l| l.split(' ').next().unwrap_or("").to_string())
        .collect();
    ids.sort();
    ids
}

/// Names on stdin: one per line.
pub fn lines_input<S: AsRef<str>>(names: &[S]) -> Vec<u8> {
    let mut s = String::new();
    for n in names {
        s.push_str(n.as_ref());
        s.push('\n');
    }
    s.into_bytes()
}

/// The deepest delta chain `git verify-pack -v` reports for `idx`.
pub fn max_chain_length(repo: &Repo, idx: &Path) -> usize {
    let out = String::from_utf8(repo.git(&["verify-pack", "-v", idx.to_str().unwrap()])).unwrap();
    out.lines()
        .filter_map(|l| l.strip_prefix("chain length = "))
        .filter_map(|l| l.split(':').next()?.trim().parse().ok())
        .max()
        .unwrap_or(0)
}

/// One line of `git verify-pack -v`.
#[derive(Clone, Debug)]
pub struct PackEntry {
    pub id: String,
    pub kind: String,
    pub size: u64,
    pub size_in_pack: u64,
    pub offset: u64,
    pub depth: Option<u32>,
    pub base: Option<String>,
}

/// Rewrites the file at `path` (a pack, index or bitmap git wrote read-only) with `edit`
/// applied to its bytes: how tests damage a repository's files.
pub fn rewrite(path: &Path, edit: impl FnOnce(&mut Vec<u8>)) {
    let mut bytes = std::fs::read(path).unwrap();
    edit(&mut bytes);
    let mut perms = std::fs::metadata(path).unwrap().permissions();
    #[allow(clippy::permissions_set_readonly_false)]
    perms.set_readonly(false);
    std::fs::set_permissions(path, perms).unwrap();
    std::fs::write(path, bytes).unwrap();
}

/// Flips a byte in the middle of `entry`'s data in the pack file `pack`: damage only the
/// index's CRC-32 of the entry (or inflating it) can reveal.
pub fn damage_entry(pack: &Path, entry: &PackEntry) {
    rewrite(pack, |bytes| {
        bytes[(entry.offset + entry.size_in_pack / 2) as usize] ^= 0x55
    });
}

pub fn verify_pack_entries(repo: &Repo, idx: &Path) -> Vec<PackEntry> {
    let out = String::from_utf8(repo.git(&["verify-pack", "-v", idx.to_str().unwrap()])).unwrap();
    let mut v = Vec::new();
    for line in out.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() < 5 || f[0].len() != 40 || !f[0].chars().all(|c| c.is_ascii_hexdigit()) {
            continue;
        }
        v.push(PackEntry {
            id: f[0].to_string(),
            kind: f[1].to_string(),
            size: f[2].parse().unwrap(),
            size_in_pack: f[3].parse().unwrap(),
            offset: f[4].parse().unwrap(),
            depth: f.get(5).map(|d| d.parse().unwrap()),
            base: f.get(6).map(|b| b.to_string()),
        });
    }
    v
}

/// Whether `text` mentions `offset` as a decimal number or in hex (0x...), ignoring the
/// digits inside 40-hex ids and pack names.
pub fn mentions_offset(text: &str, offset: u64) -> bool {
    let dec = offset.to_string();
    let hex = format!("{offset:x}");
    for token in text.split(|c: char| !c.is_ascii_alphanumeric()) {
        if token.is_empty() {
            continue;
        }
        if token == dec {
            return true;
        }
        if let Some(h) = token
            .strip_prefix("0x")
            .or_else(|| token.strip_prefix("0X"))
        {
            if h.trim_start_matches('0')
                .eq_ignore_ascii_case(hex.trim_start_matches('0'))
                && !h.is_empty()
            {
                return true;
            }
            if offset == 0 && h.chars().all(|c| c == '0') && !h.is_empty() {
                return true;
            }
        }
    }
    false
}

// ---------------------------------------------------------------------------------------------
// Deterministic PRNG
// ---------------------------------------------------------------------------------------------

/// splitmix64.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed ^ 0x9e37_79b9_7f4a_7c15)
    }
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    /// Uniform in 0..n (n > 0).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }
    pub fn shuffle<T>(&mut self, v: &mut [T]) {
        for i in (1..v.len()).rev() {
            let j = self.below(i + 1);
            v.swap(i, j);
        }
    }
    pub fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next_u64() as u8).collect()
    }
}

const WORDS: &[&str] = &[
    "alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india", "juliet",
    "kilo", "lima", "mike", "november", "oscar", "papa", "quebec", "romeo", "sierra", "tango",
    "uniform", "victor", "whiskey", "xray", "yankee", "zulu", "pack", "index", "object", "tree",
    "blob", "commit", "tag", "delta", "chain", "base", "offset", "cache", "hash", "zlib",
    "inflate", "deflate", "window", "depth", "fanout", "trailer", "header", "varint",
];

pub fn random_line(rng: &mut Rng) -> String {
    let n = 4 + rng.below(9);
    let mut words: Vec<&str> = (0..n).map(|_| WORDS[rng.below(WORDS.len())]).collect();
    if rng.below(4) == 0 {
        words.push("0123456789");
    }
    let mut line = words.join(" ");
    let _ = write!(line, " {}", rng.next_u64() % 100_000);
    line
}

// ---------------------------------------------------------------------------------------------
// fast-import streams
// ---------------------------------------------------------------------------------------------

/// A change in a fast-import commit.
pub enum Change {
    /// `M MODE inline PATH` + data.
    Inline {
        mode: &'static str,
        path: String,
        data: Vec<u8>,
    },
    /// `M MODE DATAREF PATH` (a mark ":N" or a hex id).
    Ref {
        mode: &'static str,
        path: String,
        dataref: String,
    },
    /// `D PATH`.
    Delete(String),
}

pub fn inline(path: &str, data: impl Into<Vec<u8>>) -> Change {
    Change::Inline {
        mode: "100644",
        path: path.to_string(),
        data: data.into(),
    }
}

/// Builds a `git fast-import` stream.
pub struct FastImport {
    buf: Vec<u8>,
    next_mark: u32,
    time: u64,
}

impl Default for FastImport {
    fn default() -> Self {
        Self::new()
    }
}

impl FastImport {
    pub fn new() -> FastImport {
        FastImport {
            buf: Vec::new(),
            next_mark: 1,
            time: 1_700_000_000,
        }
    }

    /// Starts the commit times at `time` (use distinct values across separate imports).
    pub fn with_time(time: u64) -> FastImport {
        FastImport {
            time,
            ..FastImport::new()
        }
    }

    fn data(&mut self, d: &[u8]) {
        self.buf
            .extend_from_slice(format!("data {}\n", d.len()).as_bytes());
        self.buf.extend_from_slice(d);
        self.buf.push(b'\n');
    }

    fn mark(&mut self) -> u32 {
        let m = self.next_mark;
        self.next_mark += 1;
        self.buf
            .extend_from_slice(format!("mark :{m}\n").as_bytes());
        m
    }

    /// A blob; returns its mark.
    pub fn blob(&mut self, d: &[u8]) -> u32 {
        self.buf.extend_from_slice(b"blob\n");
        let m = self.mark();
        self.data(d);
        m
    }

    /// A commit on `branch` (e.g. "refs/heads/main"); `from` is a mark ":N", an id, or
    /// "refs/heads/x^0". Returns its mark.
    pub fn commit(
        &mut self,
        branch: &str,
        from: Option<&str>,
        msg: &str,
        changes: &[Change],
    ) -> u32 {
        self.time += 60;
        let t = self.time;
        self.buf
            .extend_from_slice(format!("commit {branch}\n").as_bytes());
        let m = self.mark();
        self.buf.extend_from_slice(
            format!(
                "author A U Thor <author@example.com> {t} +0000\n\
                 committer C O Mitter <committer@example.com> {t} +0000\n"
            )
            .as_bytes(),
        );
        self.data(msg.as_bytes());
        if let Some(f) = from {
            self.buf.extend_from_slice(format!("from {f}\n").as_bytes());
        }
        for c in changes {
            match c {
                Change::Inline { mode, path, data } => {
                    self.buf
                        .extend_from_slice(format!("M {mode} inline {path}\n").as_bytes());
                    self.data(data);
                }
                Change::Ref {
                    mode,
                    path,
                    dataref,
                } => self
                    .buf
                    .extend_from_slice(format!("M {mode} {dataref} {path}\n").as_bytes()),
                Change::Delete(path) => {
                    self.buf.extend_from_slice(format!("D {path}\n").as_bytes())
                }
            }
        }
        self.buf.push(b'\n');
        m
    }

    /// An annotated tag `name` on `from` (a mark ":N" or id).
    pub fn tag(&mut self, name: &str, from: &str, msg: &str) {
        self.time += 60;
        let t = self.time;
        self.buf.extend_from_slice(
            format!("tag {name}\nfrom {from}\ntagger T Agger <tagger@example.com> {t} +0000\n")
                .as_bytes(),
        );
        self.data(msg.as_bytes());
    }

    /// Points `refname` at `from` (lightweight tag or branch).
    pub fn reset(&mut self, refname: &str, from: &str) {
        self.buf
            .extend_from_slice(format!("reset {refname}\nfrom {from}\n\n").as_bytes());
    }

    pub fn finish(mut self) -> Vec<u8> {
        self.buf.extend_from_slice(b"done\n");
        self.buf
    }
}

/// Generates histories of a few text files edited a little in each commit (so packs get long
/// delta chains).
pub struct HistoryGen {
    pub rng: Rng,
    pub files: Vec<(String, Vec<String>)>,
    started: std::collections::HashSet<String>,
    commits: usize,
}

impl HistoryGen {
    pub fn new(seed: u64, nfiles: usize, lines: usize) -> HistoryGen {
        let mut rng = Rng::new(seed);
        let dirs = ["", "src/", "src/deep/", "docs/"];
        let files = (0..nfiles)
            .map(|i| {
                let path = format!("{}file{i}.txt", dirs[i % dirs.len()]);
                let content = (0..lines).map(|_| random_line(&mut rng)).collect();
                (path, content)
            })
            .collect();
        HistoryGen {
            rng,
            files,
            started: Default::default(),
            commits: 0,
        }
    }

    fn content(&self, i: usize) -> Vec<u8> {
        let mut s = self.files[i].1.join("\n");
        s.push('\n');
        s.into_bytes()
    }

    fn edit(&mut self, i: usize) {
        let n = self.files[i].1.len();
        let pos = self.rng.below(n.max(1));
        let line = random_line(&mut self.rng);
        match self.rng.below(3) {
            0 => self.files[i].1[pos] = line,
            1 => self.files[i].1.insert(pos, line),
            _ if n > 10 => {
                self.files[i].1.remove(pos);
            }
            _ => self.files[i].1.push(line),
        }
    }

    /// Appends `n` commits on `branch` to `fi`; returns their marks. The first commit of a
    /// branch writes every file; later ones edit one or two. If the branch already exists in the
    /// repository from an earlier import, pass `continue_existing`.
    pub fn commits(
        &mut self,
        fi: &mut FastImport,
        branch: &str,
        n: usize,
        continue_existing: bool,
    ) -> Vec<u32> {
        let mut marks = Vec::new();
        for k in 0..n {
            self.commits += 1;
            let mut changes = Vec::new();
            let first = !self.started.contains(branch);
            if first && !continue_existing {
                for i in 0..self.files.len() {
                    changes.push(inline(&self.files[i].0.clone(), self.content(i)));
                }
            } else {
                let k = 1 + self.rng.below(2);
                for _ in 0..k {
                    let i = self.rng.below(self.files.len());
                    for _ in 0..1 + self.rng.below(3) {
                        self.edit(i);
                    }
                    changes.push(inline(&self.files[i].0.clone(), self.content(i)));
                }
            }
            let from = if k == 0 && continue_existing {
                Some(format!("{branch}^0"))
            } else {
                None
            };
            self.started.insert(branch.to_string());
            let msg = format!(
                "commit {}\n\n{}\n",
                self.commits,
                random_line(&mut self.rng)
            );
            marks.push(fi.commit(branch, from.as_deref(), &msg, &changes));
        }
        marks
    }
}

/// A bare repository whose single pack has deep delta chains (`git repack -adf --depth=50
/// --window=50` over ~300 revisions of four files), plus annotated and lightweight tags.
pub fn deep_chain_repo(sb: &Sandbox, name: &str) -> Repo {
    let repo = sb.init_bare(name);
    let mut gen = HistoryGen::new(0xdee9, 4, 150);
    let mut fi = FastImport::new();
    let marks = gen.commits(&mut fi, "refs/heads/main", 300, false);
    fi.tag("v1.0", &format!(":{}", marks[100]), "release 1.0\n");
    fi.tag("v2.0", &format!(":{}", marks[250]), "release 2.0\n");
    fi.reset("refs/tags/light", &format!(":{}", marks[10]));
    gen.commits(&mut fi, "refs/heads/side", 20, false);
    repo.fast_import(&fi.finish());
    repo.git(&["repack", "-adf", "--depth=50", "--window=50"]);
    assert_eq!(repo.packs().len(), 1, "one pack after repack -adf");
    assert_eq!(repo.loose_count(), 0);
    repo
}

/// A bare repository with a simple history (one fast-import pack, no repack).
pub fn simple_repo(sb: &Sandbox, name: &str, seed: u64, commits: usize) -> Repo {
    let repo = sb.init_bare(name);
    let mut gen = HistoryGen::new(seed, 3, 40);
    let mut fi = FastImport::new();
    let marks = gen.commits(&mut fi, "refs/heads/main", commits, false);
    fi.tag("v1", &format!(":{}", marks[commits / 2]), "tag v1\n");
    repo.fast_import(&fi.finish());
    repo
}

// ---------------------------------------------------------------------------------------------
// Hashing, hex, zlib, loose objects
// ---------------------------------------------------------------------------------------------

pub fn sha1(data: &[u8]) -> [u8; 20] {
    sha1dc::digest(data).expect("no SHA-1 collision").into()
}

pub use packd_odb::hex;

pub fn unhex(s: &str) -> Vec<u8> {
    (0..s.len() / 2)
        .map(|i| u8::from_str_radix(&s[2 * i..2 * i + 2], 16).expect("hex"))
        .collect()
}

pub fn id_from_hex(s: &str) -> [u8; 20] {
    unhex(s).try_into().expect("40 hex digits")
}

/// The id git gives an object of type `kind` ("blob", ...) with content `data`.
pub fn object_id(kind: &str, data: &[u8]) -> [u8; 20] {
    let mut h = sha1dc::Hasher::new();
    h.update(format!("{kind} {}\0", data.len()).as_bytes());
    h.update(data);
    h.finalize().expect("no collision").into()
}

pub fn zlib(data: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::default());
    e.write_all(data).unwrap();
    e.finish().unwrap()
}

/// The zlib-compressed bytes of a loose object file.
pub fn loose_bytes(kind: &str, data: &[u8]) -> Vec<u8> {
    let mut raw = format!("{kind} {}\0", data.len()).into_bytes();
    raw.extend_from_slice(data);
    zlib(&raw)
}

/// Writes `bytes` as the loose object file for `id_hex`; returns its path.
pub fn write_loose_file(objects: &Path, id_hex: &str, bytes: &[u8]) -> PathBuf {
    let dir = objects.join(&id_hex[..2]);
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(&id_hex[2..]);
    std::fs::write(&path, bytes).unwrap();
    path
}

// ---------------------------------------------------------------------------------------------
// A minimal pack v2 / idx v2 writer
// ---------------------------------------------------------------------------------------------

pub const OBJ_COMMIT: u8 = 1;
pub const OBJ_TREE: u8 = 2;
pub const OBJ_BLOB: u8 = 3;
pub const OBJ_TAG: u8 = 4;
pub const OBJ_OFS_DELTA: u8 = 6;
pub const OBJ_REF_DELTA: u8 = 7;

pub fn type_name(t: u8) -> &'static str {
    match t {
        OBJ_COMMIT => "commit",
        OBJ_TREE => "tree",
        OBJ_BLOB => "blob",
        OBJ_TAG => "tag",
        _ => panic!("not a base type: {t}"),
    }
}

/// One entry of an index: id, offset in the pack, CRC32 of the entry's bytes.
#[derive(Clone, Debug)]
pub struct IdxEntry {
    pub id: [u8; 20],
    pub offset: u64,
    pub crc: u32,
}

/// The type-and-size header of a pack entry.
pub fn entry_header(kind: u8, size: u64) -> Vec<u8> {
    let mut v = Vec::new();
    let mut c = (kind << 4) | (size & 0x0f) as u8;
    let mut s = size >> 4;
    while s != 0 {
        v.push(c | 0x80);
        c = (s & 0x7f) as u8;
        s >>= 7;
    }
    v.push(c);
    v
}

/// The encoding of an ofs-delta's distance back to its base.
pub fn ofs_encoding(mut distance: u64) -> Vec<u8> {
    let mut buf = vec![(distance & 0x7f) as u8];
    distance >>= 7;
    while distance != 0 {
        distance -= 1;
        buf.push(0x80 | (distance & 0x7f) as u8);
        distance >>= 7;
    }
    buf.reverse();
    buf
}

/// A little-endian base-128 varint, as in delta headers.
pub fn delta_varint(mut n: u64) -> Vec<u8> {
    let mut v = Vec::new();
    loop {
        let b = (n & 0x7f) as u8;
        n >>= 7;
        if n == 0 {
            v.push(b);
            return v;
        }
        v.push(b | 0x80);
    }
}

/// A delta's header: base size and result size.
pub fn delta_header(base_size: u64, result_size: u64) -> Vec<u8> {
    let mut v = delta_varint(base_size);
    v.extend(delta_varint(result_size));
    v
}

/// A copy-from-base instruction.
pub fn delta_copy(offset: u32, size: u32) -> Vec<u8> {
    let mut op = 0x80u8;
    let mut v = vec![0];
    for i in 0..4 {
        let b = (offset >> (8 * i)) as u8;
        if b != 0 {
            op |= 1 << i;
            v.push(b);
        }
    }
    let size = if size == 0x10000 { 0 } else { size };
    for i in 0..3 {
        let b = (size >> (8 * i)) as u8;
        if b != 0 {
            op |= 0x10 << i;
            v.push(b);
        }
    }
    v[0] = op;
    v
}

/// Insert instructions for `data` (chunks of at most 127 bytes).
pub fn delta_insert(data: &[u8]) -> Vec<u8> {
    let mut v = Vec::new();
    for chunk in data.chunks(127) {
        v.push(chunk.len() as u8);
        v.extend_from_slice(chunk);
    }
    v
}

/// Writes packs entry by entry; any entry may be deliberately wrong.
pub struct PackWriter {
    pub buf: Vec<u8>,
    pub entries: Vec<IdxEntry>,
    /// The object count written in the header (default: the number of entries).
    pub count_override: Option<u32>,
}

impl Default for PackWriter {
    fn default() -> Self {
        Self::new()
    }
}

impl PackWriter {
    pub fn new() -> PackWriter {
        let mut buf = b"PACK".to_vec();
        buf.extend_from_slice(&2u32.to_be_bytes());
        buf.extend_from_slice(&0u32.to_be_bytes());
        PackWriter {
            buf,
            entries: Vec::new(),
            count_override: None,
        }
    }

    pub fn offset(&self) -> u64 {
        self.buf.len() as u64
    }

    /// Writes `header || extra || payload` as an entry indexed under `id`; returns its offset.
    pub fn raw_entry(&mut self, id: [u8; 20], header: &[u8], extra: &[u8], payload: &[u8]) -> u64 {
        let offset = self.offset();
        let start = self.buf.len();
        self.buf.extend_from_slice(header);
        self.buf.extend_from_slice(extra);
        self.buf.extend_from_slice(payload);
        let crc = crc32fast::hash(&self.buf[start..]);
        self.entries.push(IdxEntry { id, offset, crc });
        offset
    }

    /// A whole object; returns (id, offset).
    pub fn object(&mut self, kind: u8, data: &[u8]) -> ([u8; 20], u64) {
        let id = object_id(type_name(kind), data);
        let off = self.raw_entry(id, &entry_header(kind, data.len() as u64), &[], &zlib(data));
        (id, off)
    }

    /// An ofs-delta indexed under `id` whose base is `distance` bytes before it.
    pub fn ofs_delta_distance(&mut self, id: [u8; 20], distance: u64, delta: &[u8]) -> u64 {
        self.raw_entry(
            id,
            &entry_header(OBJ_OFS_DELTA, delta.len() as u64),
            &ofs_encoding(distance),
            &zlib(delta),
        )
    }

    /// An ofs-delta indexed under `id` whose base is at `base_offset`.
    pub fn ofs_delta(&mut self, id: [u8; 20], base_offset: u64, delta: &[u8]) -> u64 {
        let distance = self.offset() - base_offset;
        self.ofs_delta_distance(id, distance, delta)
    }

    /// A ref-delta indexed under `id` against `base`.
    pub fn ref_delta(&mut self, id: [u8; 20], base: [u8; 20], delta: &[u8]) -> u64 {
        self.raw_entry(
            id,
            &entry_header(OBJ_REF_DELTA, delta.len() as u64),
            &base,
            &zlib(delta),
        )
    }

    /// Patches the count, appends the SHA-1 trailer; returns (pack bytes, entries, checksum).
    pub fn finish(mut self) -> (Vec<u8>, Vec<IdxEntry>, [u8; 20]) {
        let count = self.count_override.unwrap_or(self.entries.len() as u32);
        self.buf[8..12].copy_from_slice(&count.to_be_bytes());
        let sum = sha1(&self.buf);
        self.buf.extend_from_slice(&sum);
        (self.buf, self.entries, sum)
    }
}

/// An idx v2 for `entries` (sorted here), with 64-bit offsets for offsets >= 2^31.
pub fn write_idx_v2(entries: &[IdxEntry], pack_checksum: &[u8; 20]) -> Vec<u8> {
    let mut e = entries.to_vec();
    e.sort_by_key(|a| a.id);
    let mut v = vec![0xff, b't', b'O', b'c', 0, 0, 0, 2];
    for i in 0..256usize {
        let n = e.iter().filter(|x| (x.id[0] as usize) <= i).count() as u32;
        v.extend_from_slice(&n.to_be_bytes());
    }
    for x in &e {
        v.extend_from_slice(&x.id);
    }
    for x in &e {
        v.extend_from_slice(&x.crc.to_be_bytes());
    }
    let mut large = Vec::new();
    for x in &e {
        if x.offset < 0x8000_0000 {
            v.extend_from_slice(&(x.offset as u32).to_be_bytes());
        } else {
            v.extend_from_slice(&(0x8000_0000u32 | large.len() as u32).to_be_bytes());
            large.push(x.offset);
        }
    }
    for o in large {
        v.extend_from_slice(&o.to_be_bytes());
    }
    v.extend_from_slice(pack_checksum);
    let sum = sha1(&v);
    v.extend_from_slice(&sum);
    v
}

/// Recomputes an idx's own trailing checksum after editing it.
pub fn fix_idx_checksum(idx: &mut [u8]) {
    let n = idx.len();
    let sum = sha1(&idx[..n - 20]);
    idx[n - 20..].copy_from_slice(&sum);
}

/// Recomputes a pack's trailer after editing it, and stores the new checksum in `idx` (v2 or
/// v1) with its own checksum fixed too.
pub fn fix_pack_and_idx_checksums(pack: &mut [u8], idx: &mut [u8]) {
    let n = pack.len();
    let sum = sha1(&pack[..n - 20]);
    pack[n - 20..].copy_from_slice(&sum);
    let m = idx.len();
    idx[m - 40..m - 20].copy_from_slice(&sum);
    fix_idx_checksum(idx);
}

/// Installs a pack and its idx in `objects/pack` as pack-<checksum>.{pack,idx}; returns the
/// paths.
pub fn install_pack(objects: &Path, pack: &[u8], idx: &[u8]) -> (PathBuf, PathBuf) {
    let dir = objects.join("pack");
    std::fs::create_dir_all(&dir).unwrap();
    let name = format!("pack-{}", hex(&pack[pack.len().saturating_sub(20)..]));
    let p = dir.join(format!("{name}.pack"));
    let i = dir.join(format!("{name}.idx"));
    std::fs::write(&p, pack).unwrap();
    std::fs::write(&i, idx).unwrap();
    (p, i)
}

/// Builds a pack with `PackWriter` and installs it with a matching idx v2.
pub fn install_written_pack(objects: &Path, w: PackWriter) -> (PathBuf, PathBuf, Vec<IdxEntry>) {
    let (pack, entries, sum) = w.finish();
    let idx = write_idx_v2(&entries, &sum);
    let (p, i) = install_pack(objects, &pack, &idx);
    (p, i, entries)
}

/// The path's file name as a string.
pub fn file_name(p: &Path) -> String {
    p.file_name().unwrap().to_string_lossy().into_owned()
}
