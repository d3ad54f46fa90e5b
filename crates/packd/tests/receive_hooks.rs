//! receive-pack's hooks, run by packd as git 2.39's receive-pack runs them: the same hook
//! scripts in three repositories, pushed to by the real git client through git's own
//! receive-pack, through `git push --receive-pack='packd receive-pack'`, and over `packd serve
//! --allow-push` (HTTP). What the hooks saw (arguments, stdin, cwd, environment, whether the
//! pushed objects could be read) and what the client was told must be the same.

mod common;
mod serve_support;

use common::{Repo, Run, Sandbox};
use serve_support::Server;
use std::path::{Path, PathBuf};

const ZERO: &str = "0000000000000000000000000000000000000000";

/// How a target repository is pushed to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Via {
    /// git's own receive-pack (`git push /path`).
    Git,
    /// `git push --receive-pack='packd receive-pack ARGS'`.
    Packd,
    /// `packd serve --allow-push`, over HTTP.
    Http,
}

/// One repository receiving pushes, with its hooks and where they write what they saw.
struct Target {
    via: Via,
    repo: Repo,
    /// Where the hooks write: `log` (what each saw, in order).
    dumps: PathBuf,
}

/// The hook that writes down what it was given: its name and arguments, the directory it runs
/// in, git's variables, its stdin, and whether git can read each object it is told of (from
/// the quarantine for pre-receive); then it says hello on stdout and stderr and exits `EXIT`.
const DUMP_HOOK: &str = r#"#!/bin/sh
{
  echo "== @NAME@ $*"
  echo "pwd $(pwd)"
  echo "dashed git: $(git-rev-parse --is-bare-repository 2>&1)"
  env | grep -E '^GIT_(DIR|PUSH_OPTION|QUARANTINE_PATH|OBJECT_DIRECTORY|ALTERNATE_OBJECT_DIRECTORIES|PUSH_CERT)' | sort
  while read old new ref; do
    echo "stdin $old $new $ref"
    [ "$new" = @ZERO@ ] || echo "cat-file $new: $(git cat-file -t $new 2>&1)"
  done
  [ "@NAME@" = update ] && [ "$3" != @ZERO@ ] && echo "cat-file $3: $(git cat-file -t $3 2>&1)"
} >> "@DUMPS@/log" 2>&1
echo "@NAME@: hello on stdout"
echo "@NAME@: hello on stderr" >&2
exit 0
"#;

const ALL_HOOKS: [&str; 5] = [
    "pre-receive",
    "update",
    "reference-transaction",
    "post-receive",
    "post-update",
];

fn write_hook(dir: &Path, name: &str, script: &str, dumps: &Path) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::create_dir_all(dir).unwrap();
    let path = dir.join(name);
    let text = script
        .replace("@NAME@", name)
        .replace("@DUMPS@", dumps.to_str().unwrap())
        .replace("@ZERO@", ZERO);
    std::fs::write(&path, text).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

impl Target {
    /// A new empty bare repository `<via>.git` under `root`, configured with `config` and the
    /// hooks `(name, script)` in `hooks/` (or in `core.hooksPath` when `config` sets it).
    fn new(
        sb: &Sandbox,
        root: &Path,
        via: Via,
        config: &[(&str, &str)],
        hooks: &[(&str, &str)],
    ) -> Target {
        std::fs::create_dir_all(root).unwrap();
        let name = format!("{via:?}.git").to_lowercase();
        sb.git_in(root, &["init", "-q", "--bare", &name]);
        let path = root.join(&name);
        let repo = Repo {
            git_dir: path.clone(),
            path: path.clone(),
            home: sb.home.clone(),
        };
        repo.git(&["config", "receive.advertisePushOptions", "true"]);
        let mut hooks_dir = path.join("hooks");
        for (key, value) in config {
            repo.git(&["config", key, value]);
            if key.eq_ignore_ascii_case("core.hooksPath") {
                hooks_dir = path.join(value);
            }
        }
        // No sample hooks: only ours.
        let _ = std::fs::remove_dir_all(path.join("hooks"));
        let dumps = root.join(format!("{name}-dumps"));
        std::fs::create_dir_all(&dumps).unwrap();
        for (hook, script) in hooks {
            write_hook(&hooks_dir, hook, script, &dumps);
        }
        Target { via, repo, dumps }
    }

    /// `git push [--receive-pack=...] <url> ARGS...` from `client`.
    fn push(&self, client: &Repo, server: Option<&Server>, packd_args: &str, args: &[&str]) -> Run {
        self.push_with_env(client, server, packd_args, args, &[])
    }

    /// [`Target::push`] with variables `env` set for git.
    fn push_with_env(
        &self,
        client: &Repo,
        server: Option<&Server>,
        packd_args: &str,
        args: &[&str],
        env: &[(&str, &str)],
    ) -> Run {
        let path = self.repo.git_dir.to_str().unwrap().to_string();
        let (rp, url) = match self.via {
            Via::Git => (None, path),
            Via::Packd => (
                Some(format!(
                    "--receive-pack={} receive-pack {packd_args}",
                    common::PACKD
                )),
                path,
            ),
            Via::Http => (
                None,
                server
                    .expect("a server for HTTP")
                    .http_url(self.repo.git_dir.file_name().unwrap().to_str().unwrap()),
            ),
        };
        let mut all = vec!["push"];
        if let Some(rp) = &rp {
            all.push(rp);
        }
        all.push(&url);
        all.extend_from_slice(args);
        let mut cmd = client.git_cmd();
        cmd.args(&all);
        for (key, value) in env {
            cmd.env(key, value);
        }
        common::run_cmd(cmd, None, common::GIT_TIMEOUT)
    }

    /// What the hooks wrote, with this repository's own names made common: its path is
    /// `REPO`, a quarantine's random name `tmp_objdir-incoming-XXXXXX`.
    ///
    /// Left out: the `reference-transaction` runs git 2.39's files backend makes for its
    /// packed-refs transaction when a ref is deleted, whose every line is `<zero> <zero> <ref>`
    /// (an `aborted` one when the ref was loose); packd tells the hook of the deletion itself.
    fn log(&self) -> String {
        let text = std::fs::read_to_string(self.dumps.join("log")).unwrap_or_default();
        let packed_only = format!("stdin {ZERO} {ZERO} ");
        let mut kept = String::new();
        for block in text
            .split_inclusive('\n')
            .fold(Vec::<String>::new(), |mut blocks, line| {
                if line.starts_with("== ") || blocks.is_empty() {
                    blocks.push(String::new());
                }
                blocks.last_mut().unwrap().push_str(line);
                blocks
            })
        {
            let stdin: Vec<&str> = block.lines().filter(|l| l.starts_with("stdin ")).collect();
            let phantom = block.starts_with("== reference-transaction")
                && !stdin.is_empty()
                && stdin.iter().all(|l| l.starts_with(&packed_only));
            if !phantom {
                kept.push_str(&block);
            }
        }
        self.normalize(&kept)
    }

    fn normalize(&self, text: &str) -> String {
        let path = self.repo.git_dir.to_str().unwrap();
        let canonical = std::fs::canonicalize(&self.repo.git_dir).unwrap();
        let mut text = text
            .replace(canonical.to_str().unwrap(), "REPO")
            .replace(path, "REPO");
        let marker = "tmp_objdir-incoming-";
        let mut at = 0;
        while let Some(i) = text[at..].find(marker) {
            let start = at + i + marker.len();
            let end = (start + 6).min(text.len());
            text.replace_range(start..end, "XXXXXX");
            at = start;
        }
        text
    }

    fn refs(&self) -> String {
        String::from_utf8(self.repo.git_run(&["show-ref"], None).stdout).unwrap()
    }

    /// Every file and directory under `objects/`, relative to it.
    fn objects_listing(&self) -> Vec<String> {
        fn walk(dir: &Path, base: &Path, out: &mut Vec<String>) {
            for entry in std::fs::read_dir(dir).unwrap().flatten() {
                let path = entry.path();
                // packd's maintenance locks (packd_maint::lock) stay once a push took one:
                // they are not objects received.
                let name = entry.file_name().to_string_lossy().into_owned();
                if name.starts_with("packd-") && name.ends_with(".lock") {
                    continue;
                }
                out.push(path.strip_prefix(base).unwrap().display().to_string());
                if path.is_dir() {
                    walk(&path, base, out);
                }
            }
        }
        let objects = self.repo.objects_dir();
        let mut out = Vec::new();
        walk(&objects, &objects, &mut out);
        out.sort();
        out
    }
}

/// Panics at the first line where `got` differs from `want` (git's), showing both around it.
fn assert_same_lines(what: &str, got: &str, want: &str) {
    let got_lines: Vec<&str> = got.lines().collect();
    let want_lines: Vec<&str> = want.lines().collect();
    let first =
        (0..got_lines.len().max(want_lines.len())).find(|&i| got_lines.get(i) != want_lines.get(i));
    if let Some(i) = first {
        let around = |lines: &[&str]| {
            lines[i.saturating_sub(3).min(lines.len())..(i + 3).min(lines.len())].join("\n")
        };
        panic!(
            "{what}: line {i} differs.\npackd:\n{}\ngit:\n{}\n\nall of packd's:\n{got}",
            around(&got_lines),
            around(&want_lines)
        );
    }
}

/// What the client showed of the remote side: `remote:` lines (trailing padding cut), and the
/// rejections.
fn told(run: &Run) -> Vec<String> {
    run.err()
        .lines()
        .filter(|l| l.starts_with("remote:") || l.contains("[remote rejected]"))
        .map(|l| l.trim_end().to_string())
        .collect()
}

/// The lines git or packd printed itself on the client's stderr (what a local or ssh
/// receive-pack writes there: `reference-transaction`'s output, hints).
fn printed_raw(run: &Run) -> Vec<String> {
    run.err()
        .lines()
        .filter(|l| l.starts_with("reference-transaction:") || l.starts_with("hint:"))
        .map(str::to_string)
        .collect()
}

/// A client work tree with two commits on main.
fn client(sb: &Sandbox) -> Repo {
    sb.client_with_two_commits("client")
}

/// The three targets (git, packd receive-pack, packd serve) with the same configuration and
/// hooks, and the server (started with `serve_args`).
fn three(
    sb: &Sandbox,
    config: &[(&str, &str)],
    hooks: &[(&str, &str)],
    serve_args: &[&str],
) -> (Vec<Target>, Server) {
    let targets: Vec<Target> = [Via::Git, Via::Packd, Via::Http]
        .into_iter()
        .map(|via| {
            Target::new(
                sb,
                &sb.path().join(format!("{via:?}-root")),
                via,
                config,
                hooks,
            )
        })
        .collect();
    let mut args = vec!["--allow-push"];
    args.extend_from_slice(serve_args);
    let server = Server::start(sb, &sb.path().join("Http-root"), &args);
    (targets, server)
}

#[test]
fn every_hook_sees_what_git_shows_it() {
    let sb = Sandbox::new();
    let client = client(&sb);
    let hooks: Vec<(&str, &str)> = ALL_HOOKS.iter().map(|h| (*h, DUMP_HOOK)).collect();
    let (targets, server) = three(&sb, &[], &hooks, &[]);
    let pushes: [&[&str]; 2] = [
        // Two creations, with push options.
        &[
            "-o",
            "first option",
            "-o",
            "second",
            "main",
            "main:refs/heads/b",
        ],
        // An update, a deletion and a tag, with no options.
        &["main", ":refs/heads/b", "main~1:refs/tags/t"],
    ];
    for (n, args) in pushes.iter().enumerate() {
        if n == 1 {
            client.git(&["commit", "-q", "--allow-empty", "-m", "three"]);
        }
        let runs: Vec<Run> = targets
            .iter()
            .map(|t| {
                let run = t.push(&client, Some(&server), "", args);
                run.assert_success();
                run
            })
            .collect();
        let git = &targets[0];
        for (t, run) in targets.iter().zip(&runs).skip(1) {
            assert_same_lines(
                &format!("what the hooks saw, push {n}, {:?}", t.via),
                &t.log(),
                &git.log(),
            );
            assert_eq!(
                told(run),
                told(&runs[0]),
                "what the client was told, push {n}, {:?}",
                t.via
            );
            assert_eq!(t.refs(), git.refs(), "refs after push {n}, {:?}", t.via);
        }
        // Over ssh or a local path, reference-transaction's output reaches the client's
        // stderr unframed, as git's (where a deletion ran git's hook once more, see
        // Target::log, only the lines can be compared, not how many).
        let (mut packd_raw, mut git_raw) = (printed_raw(&runs[1]), printed_raw(&runs[0]));
        assert!(!git_raw.is_empty());
        if n == 1 {
            for raw in [&mut packd_raw, &mut git_raw] {
                raw.sort();
                raw.dedup();
            }
        }
        assert_eq!(packd_raw, git_raw, "push {n}");
    }
    let log = targets[1].log();
    // The quarantine was real: pre-receive read the pushed commit.
    assert!(
        log.contains("GIT_QUARANTINE_PATH=REPO/./objects/tmp_objdir-incoming-XXXXXX"),
        "{log}"
    );
    assert!(log.contains("GIT_PUSH_OPTION_0=first option"), "{log}");
    let read: Vec<&str> = log.lines().filter(|l| l.starts_with("cat-file")).collect();
    assert!(!read.is_empty(), "{log}");
    assert!(
        read.iter().all(|l| l.ends_with(": commit")),
        "a hook could not read a pushed object: {log}"
    );
    // No quarantine left behind.
    for t in &targets {
        assert!(
            !t.objects_listing().iter().any(|e| e.starts_with("tmp_")),
            "{:?}: {:?}",
            t.via,
            t.objects_listing()
        );
    }
}

/// A pre-receive that refuses, in `core.hooksPath` (relative: from the git directory).
const REFUSING_PRE_RECEIVE: &str = r#"#!/bin/sh
echo "@NAME@ in $(pwd) refuses $(wc -l) updates" >&2
exit 1
"#;

#[test]
fn a_refusing_pre_receive_refuses_every_command_and_leaves_nothing() {
    let sb = Sandbox::new();
    let client = client(&sb);
    let (targets, server) = three(
        &sb,
        &[("core.hooksPath", "custom-hooks")],
        &[
            ("pre-receive", REFUSING_PRE_RECEIVE),
            ("post-receive", DUMP_HOOK),
        ],
        &[],
    );
    let runs: Vec<Run> = targets
        .iter()
        .map(|t| t.push(&client, Some(&server), "", &["main", "main:refs/heads/b"]))
        .collect();
    for (t, run) in targets.iter().zip(&runs) {
        assert!(!run.success(), "{:?}", t.via);
        let told = told(run);
        assert!(
            told.iter()
                .any(|l| l.contains("(pre-receive hook declined)")),
            "{:?}: {told:?}",
            t.via
        );
        assert_eq!(t.refs(), "", "{:?}", t.via);
        // Nothing received is kept, no quarantine left, and post-receive did not run.
        assert_eq!(t.objects_listing(), ["info", "pack"], "{:?}", t.via);
        assert_eq!(t.log(), "", "{:?}", t.via);
        let told_git: Vec<String> = normalized(&targets[0], &self::told(&runs[0]));
        assert_eq!(normalized(t, &told), told_git, "{:?}", t.via);
    }
}

/// `lines` with `target`'s paths made common.
fn normalized(target: &Target, lines: &[String]) -> Vec<String> {
    lines.iter().map(|l| target.normalize(l)).collect()
}

/// An update hook that declines refs/heads/b.
const DECLINING_UPDATE: &str = r#"#!/bin/sh
echo "@NAME@ looks at $1"
[ "$1" = refs/heads/b ] && exit 1
exit 0
"#;

#[test]
fn an_update_hook_declines_its_ref_alone() {
    let sb = Sandbox::new();
    let client = client(&sb);
    let (targets, server) = three(&sb, &[], &[("update", DECLINING_UPDATE)], &[]);
    // Alone, then atomic: git stops at the refusal and refuses the rest with its reason.
    let pushes: [&[&str]; 2] = [
        &["main", "main:refs/heads/b", "main:refs/heads/c"],
        &[
            "--atomic",
            "main:refs/heads/d",
            "main:refs/heads/b",
            "main:refs/heads/e",
        ],
    ];
    for args in pushes {
        let runs: Vec<Run> = targets
            .iter()
            .map(|t| t.push(&client, Some(&server), "", args))
            .collect();
        for (t, run) in targets.iter().zip(&runs) {
            assert!(!run.success(), "{:?}", t.via);
            assert_eq!(told(run), told(&runs[0]), "{:?} {args:?}", t.via);
            assert_eq!(t.refs(), targets[0].refs(), "{:?} {args:?}", t.via);
        }
        let told_git = told(&runs[0]);
        assert!(
            told_git.contains(&"remote: error: hook declined to update refs/heads/b".to_string())
        );
    }
    let refs = targets[0].refs();
    assert!(!refs.contains("refs/heads/b") && !refs.contains("refs/heads/d"));
    assert!(refs.contains("refs/heads/c"));
}

/// A pre-receive that hangs, leaving a child of its own, whose pid it writes down.
const HANGING_PRE_RECEIVE: &str = r#"#!/bin/sh
sleep 1000 &
echo $! > "@DUMPS@/pid"
wait
"#;

/// Whether process `pid` is gone (or a zombie waiting for its reaper).
fn is_gone(pid: &str) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z')),
    }
}

#[test]
fn a_hook_that_hangs_is_ended_with_its_children_and_the_push_refused() {
    let sb = Sandbox::new();
    let client = client(&sb);
    let (mut targets, server) = three(
        &sb,
        &[],
        &[("pre-receive", HANGING_PRE_RECEIVE)],
        &["--hook-timeout", "1"],
    );
    targets.remove(0); // git has no timeout
    for t in &targets {
        let run = t.push(&client, Some(&server), "--hook-timeout 1", &["main"]);
        assert!(!run.success(), "{:?}", t.via);
        let told = told(&run);
        assert!(
            told.iter()
                .any(|l| l.contains("(pre-receive hook declined)")),
            "{:?}: {told:?}",
            t.via
        );
        assert!(
            told.iter().any(
                |l| l.contains("error: the pre-receive hook ran longer than 1 s and was ended")
            ),
            "{:?}: {told:?}",
            t.via
        );
        assert_eq!(t.refs(), "");
        assert_eq!(t.objects_listing(), ["info", "pack"], "{:?}", t.via);
        let pid = std::fs::read_to_string(t.dumps.join("pid")).unwrap();
        let pid = pid.trim();
        // SIGKILL is delivered at once; the reaper may take a moment.
        let gone = (0..100).any(|_| {
            std::thread::sleep(std::time::Duration::from_millis(50));
            is_gone(pid)
        });
        assert!(gone, "{:?}: the hook's child {pid} still runs", t.via);
    }
}

#[test]
fn no_hooks_turns_hooks_off() {
    let sb = Sandbox::new();
    let client = client(&sb);
    let hooks = [
        ("pre-receive", REFUSING_PRE_RECEIVE),
        ("post-receive", DUMP_HOOK),
    ];
    let (mut targets, server) = three(&sb, &[], &hooks, &["--no-hooks"]);
    targets.remove(0);
    for t in &targets {
        let run = t.push(&client, Some(&server), "--no-hooks", &["main"]);
        run.assert_success();
        assert!(t.refs().contains("refs/heads/main"), "{:?}", t.via);
        assert_eq!(t.log(), "", "{:?}: a hook ran", t.via);
    }
}

#[test]
fn a_hook_that_is_not_executable_is_ignored_with_gits_hint() {
    use std::os::unix::fs::PermissionsExt;
    let sb = Sandbox::new();
    let client = client(&sb);
    let (targets, server) = three(&sb, &[], &[("pre-receive", REFUSING_PRE_RECEIVE)], &[]);
    for t in &targets {
        let hook = t.repo.git_dir.join("hooks/pre-receive");
        std::fs::set_permissions(&hook, std::fs::Permissions::from_mode(0o644)).unwrap();
    }
    let runs: Vec<Run> = targets
        .iter()
        .map(|t| t.push(&client, Some(&server), "", &["main"]))
        .collect();
    for (t, run) in targets.iter().zip(&runs) {
        run.assert_success();
        assert!(t.refs().contains("refs/heads/main"), "{:?}", t.via);
    }
    let hint = printed_raw(&runs[0]);
    assert!(!hint.is_empty(), "git printed no hint: {}", runs[0].err());
    assert_eq!(printed_raw(&runs[1]), hint);
    // Over HTTP the hint goes to the server's stderr, as git http-backend's would.
    assert!(
        server.log_text().contains(&hint[0]),
        "{}",
        server.log_text()
    );
}

/// A proc-receive hook (git's pkt-line conversation, in sh): writes down what it is sent, then
/// answers by the ref's last component: `refuse` (ng), `fall` (handed back), `silent` (no
/// answer), others: it creates `refs/changes/<name>` itself and reports that, then a second
/// report of a forced `refs/changes/<name>-again`.
const PROC_RECEIVE: &str = r#"#!/bin/sh
log="@DUMPS@/log"
readpkt() {
  len=$(head -c 4)
  if [ "$len" = 0000 ]; then return 1; fi
  head -c $((0x$len - 4)) | tr '\0' '|'
}
pkt() { printf '%04x%s\n' $((${#1} + 5)) "$1"; }
echo "== proc-receive" >> "$log"
while line=$(readpkt); do echo "version: $line" >> "$log"; done
printf '001bversion=1\000push-options\n0000'
cmds=""
while line=$(readpkt); do echo "command: $line" >> "$log"; cmds="$cmds
$line"; done
while line=$(readpkt); do echo "push option: $line" >> "$log"; done
echo "proc-receive: hello on stderr" >&2
echo "$cmds" | while read old new ref; do
  [ -z "$ref" ] && continue
  case "$ref" in
  */refuse) pkt "ng $ref not today" ;;
  */fall) pkt "ok $ref"; pkt "option fall-through" ;;
  */silent) ;;
  *) name=refs/changes/${ref##*/}
     git update-ref "$name" "$new"
     pkt "ok $ref"; pkt "option refname $name"; pkt "option new-oid $new"
     pkt "ok $ref"; pkt "option refname $name-again"; pkt "option forced-update" ;;
  esac
done
printf 0000
"#;

#[test]
fn proc_receive_takes_the_refs_it_is_configured_for() {
    let sb = Sandbox::new();
    let client = client(&sb);
    let hooks = [
        ("proc-receive", PROC_RECEIVE),
        ("post-receive", DUMP_HOOK),
        ("update", DUMP_HOOK),
    ];
    let (targets, server) = three(&sb, &[("receive.procReceiveRefs", "refs/for")], &hooks, &[]);
    let pushes: [&[&str]; 3] = [
        &[
            "-o",
            "topic=x",
            "main",
            "main:refs/for/main",
            "main:refs/for/refuse",
            "main:refs/for/fall",
        ],
        // An unanswered command of an atomic push fails it all.
        &["--atomic", "main:refs/heads/other", "main:refs/for/silent"],
        // Without the hook, its commands are refused.
        &["main:refs/heads/third", "main:refs/for/none"],
    ];
    for (n, args) in pushes.iter().enumerate() {
        if n == 2 {
            for t in &targets {
                std::fs::remove_file(t.repo.git_dir.join("hooks/proc-receive")).unwrap();
            }
        }
        let runs: Vec<Run> = targets
            .iter()
            .map(|t| t.push(&client, Some(&server), "", args))
            .collect();
        for (t, run) in targets.iter().zip(&runs).skip(1) {
            assert_same_lines(
                &format!("what the hooks saw, push {n}, {:?}", t.via),
                &t.log(),
                &targets[0].log(),
            );
            assert_eq!(told(run), told(&runs[0]), "push {n}, {:?}", t.via);
            // The lines the client printed of the refs proc-receive reported.
            let reported = |run: &Run| -> Vec<String> {
                run.err()
                    .lines()
                    .filter(|l| l.contains("refs/changes/"))
                    .map(str::to_string)
                    .collect()
            };
            assert_eq!(reported(run), reported(&runs[0]), "push {n}, {:?}", t.via);
            assert_eq!(t.refs(), targets[0].refs(), "push {n}, {:?}", t.via);
        }
    }
    let log = targets[1].log();
    assert!(log.contains("version: version=1|push-options"), "{log}");
    assert!(log.contains("push option: topic=x"), "{log}");
    let refs = targets[1].refs();
    assert!(
        refs.contains("refs/changes/main") && refs.contains("refs/for/fall"),
        "{refs}"
    );
    assert!(
        !refs.contains("refs/for/main") && !refs.contains("refs/heads/other"),
        "{refs}"
    );
}

#[test]
fn a_silent_hook_gets_keepalives_as_under_git() {
    let sb = Sandbox::new();
    let client = client(&sb);
    let silent = "#!/bin/sh\necho start\nsleep 2\necho end\n";
    let (targets, server) = three(
        &sb,
        &[("receive.keepAlive", "1")],
        &[("pre-receive", silent)],
        &[],
    );
    for t in &targets {
        let run = t.push_with_env(
            &client,
            Some(&server),
            "",
            &["main"],
            &[("GIT_TRACE_PACKET", "1")],
        );
        run.assert_success();
        let packets: Vec<String> = run
            .err()
            .lines()
            .filter_map(|l| l.split_once("sideband< ").map(|(_, p)| p.to_string()))
            .collect();
        // The empty band-1 packets git's receive-pack sends while a hook is silent, between
        // the hook's two lines (how many depends on timing: at least one).
        let start = packets.iter().position(|p| p == "\\2start");
        let end = packets.iter().position(|p| p == "\\2end");
        let (Some(start), Some(end)) = (start, end) else {
            panic!("{:?}: no hook output in {packets:?}", t.via);
        };
        assert!(
            end > start + 1 && packets[start + 1..end].iter().all(|p| p == "\\1"),
            "{:?}: {packets:?}",
            t.via
        );
    }
}
