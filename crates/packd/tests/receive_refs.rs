//! Ref rules of a push, against git's own receive-pack: every push goes to two identical bare
//! repositories, one served by `git receive-pack`, one by `packd receive-pack`, and the client's
//! stderr (its `[remote rejected]` reasons and the `remote: error:` lines), the report and the
//! resulting refs must be the same. Each case with loose refs and after `git pack-refs --all`
//! (the state after a clone or gc). git's client refuses to send some names (`..`, `HEAD`):
//! those go through a hand-made request to both receivers. Clones of the result still work.

mod common;

use common::{run_cmd, Repo, Run, Sandbox};
use std::process::Command;

const ZERO: &str = "0000000000000000000000000000000000000000";

/// A client with two commits on main and a blob, and two servers (git's, packd's) holding
/// main, old (main~1) and p/q, with their refs loose or packed.
struct Twin {
    sb: Sandbox,
    client: Repo,
    by_git: Repo,
    by_packd: Repo,
}

impl Twin {
    fn new(packed: bool) -> Twin {
        let sb = Sandbox::new();
        let client = sb.init("client");
        client.git(&["commit", "-q", "--allow-empty", "-m", "one"]);
        client.git(&["commit", "-q", "--allow-empty", "-m", "two"]);
        let by_git = sb.init_bare("by-git.git");
        let by_packd = sb.init_bare("by-packd.git");
        for server in [&by_git, &by_packd] {
            let target = server.git_dir.to_str().unwrap();
            client.git(&[
                "push",
                "-q",
                target,
                "main",
                "main~1:refs/heads/old",
                "main:refs/heads/p/q",
            ]);
            if packed {
                server.git(&["pack-refs", "--all"]);
                assert!(!server.git_dir.join("refs/heads/main").exists());
            }
        }
        Twin {
            sb,
            client,
            by_git,
            by_packd,
        }
    }

    fn blob(&self) -> String {
        let id = self
            .client
            .git_stdin(&["hash-object", "-w", "--stdin"], b"a blob\n");
        String::from_utf8(id).unwrap().trim().to_string()
    }

    /// `git push ARGS` to each server; each side's stderr with the server's path named
    /// `SERVER` (and git's `<dir>/./` in lock paths as packd's `./`).
    fn push(&self, args: &[&str]) -> (String, String) {
        let run = |server: &Repo, packd: bool| {
            let target = server.git_dir.to_str().unwrap().to_string();
            let rp = format!("--receive-pack={} receive-pack", common::PACKD);
            let mut all = vec!["push"];
            if packd {
                all.push(&rp);
            }
            all.push(&target);
            all.extend_from_slice(args);
            let run = self.client.git_run(&all, None);
            run.assert_no_crash();
            run.err()
                .replace(&format!("{target}/./"), "./")
                .replace(&target, "SERVER")
        };
        (run(&self.by_git, false), run(&self.by_packd, true))
    }

    /// Asserts both sides answered `args` alike, with `expected` among the lines, and left the
    /// same refs; returns packd's stderr.
    fn same(&self, args: &[&str], expected: &[impl AsRef<str>]) -> String {
        let (git, packd) = self.push(args);
        assert_eq!(
            packd, git,
            "packd's answer (left) differs from git's (right) to {args:?}"
        );
        for line in expected.iter().map(AsRef::as_ref) {
            assert!(
                git.contains(line),
                "git's answer to {args:?} lacks {line:?}:\n{git}"
            );
        }
        assert_eq!(
            show_ref(&self.by_packd),
            show_ref(&self.by_git),
            "refs after {args:?}"
        );
        packd
    }

    /// Both servers' answers to hand-made commands (`<old> <new> <ref>`): report-status lines
    /// and side-band 2 lines, in order.
    fn raw(&self, commands: &[String], caps: &str) -> (Vec<String>, Vec<String>) {
        let mut input = Vec::new();
        for (i, c) in commands.iter().enumerate() {
            let line = if i == 0 {
                format!("{c}\0report-status side-band-64k {caps}\n")
            } else {
                format!("{c}\n")
            };
            input.extend(pkt(line.as_bytes()));
        }
        input.extend_from_slice(b"0000");
        input.extend(empty_pack());
        let by = |server: &Repo, program: &str, first: &str| {
            let mut cmd = Command::new(program);
            common::apply_env(&mut cmd, &self.sb.home);
            cmd.arg(first).arg(&server.git_dir);
            let run = run_cmd(cmd, Some(&input), common::GIT_TIMEOUT);
            run.assert_no_crash();
            demux(&run.stdout)
                .into_iter()
                .map(|l| l.replace(&format!("{}/./", server.git_dir.display()), "./"))
                .filter(|l| !l.contains("Checking connectivity"))
                .collect::<Vec<_>>()
        };
        let git = by(&self.by_git, "git", "receive-pack");
        let packd = by(&self.by_packd, common::PACKD, "receive-pack");
        (git, packd)
    }

    fn rev(&self, name: &str) -> String {
        self.client.git_str(&["rev-parse", name])
    }

    /// A clone of packd's repository (by git, and through packd's upload-pack) works and
    /// is sound.
    fn clones_work(&self) {
        let source = self.by_packd.git_dir.to_str().unwrap();
        let up = format!("--upload-pack={} upload-pack", common::PACKD);
        for (name, args) in [
            ("clone-git", vec!["clone", "-q", "--bare", source]),
            (
                "clone-packd",
                vec!["clone", "-q", "--bare", up.as_str(), source],
            ),
        ] {
            let mut all = args.clone();
            all.push(name);
            self.sb.git_in(self.sb.path(), &all);
            let clone = self.sb.path().join(name);
            self.sb.git_in(
                &clone,
                &["fsck", "--strict", "--no-progress", "--no-dangling"],
            );
            std::fs::remove_dir_all(clone).unwrap();
        }
        self.by_packd
            .git(&["fsck", "--strict", "--no-progress", "--no-dangling"]);
    }
}

fn show_ref(repo: &Repo) -> String {
    let run: Run = repo.git_run(&["show-ref"], None);
    run.out()
}

fn pkt(payload: &[u8]) -> Vec<u8> {
    let mut v = format!("{:04x}", payload.len() + 4).into_bytes();
    v.extend_from_slice(payload);
    v
}

/// A pack of no objects.
fn empty_pack() -> Vec<u8> {
    common::PackWriter::new().finish().0
}

/// The lines of a receive-pack's answer after its advertisement: `report: <line>` from the
/// report-status in band 1, `remote: <line>` from band 2.
fn demux(out: &[u8]) -> Vec<String> {
    let mut lines = Vec::new();
    let mut rest = skip_pkts(out);
    while rest.len() >= 4 {
        let len = usize::from_str_radix(std::str::from_utf8(&rest[..4]).unwrap(), 16).unwrap();
        if len == 0 {
            rest = &rest[4..];
            continue;
        }
        let (band, data) = (rest[4], &rest[5..len]);
        match band {
            1 => {
                let mut report = data;
                while report.len() >= 4 {
                    let n = usize::from_str_radix(std::str::from_utf8(&report[..4]).unwrap(), 16)
                        .unwrap();
                    if n == 0 {
                        report = &report[4..];
                        continue;
                    }
                    let text = String::from_utf8_lossy(&report[4..n]);
                    lines.push(format!("report: {}", text.trim_end()));
                    report = &report[n..];
                }
            }
            2 => {
                for l in String::from_utf8_lossy(data).lines() {
                    lines.push(format!("remote: {l}"));
                }
            }
            _ => panic!("band {band}"),
        }
        rest = &rest[len..];
    }
    lines
}

/// `out` after its first flush packet (the advertisement).
fn skip_pkts(mut out: &[u8]) -> &[u8] {
    while out.len() >= 4 {
        let len = usize::from_str_radix(std::str::from_utf8(&out[..4]).unwrap(), 16).unwrap();
        if len == 0 {
            return &out[4..];
        }
        out = &out[len..];
    }
    out
}

#[test]
fn directory_file_conflicts_are_refused_as_git_refuses_them() {
    for packed in [false, true] {
        let t = Twin::new(packed);
        t.same(
            &["main:refs/heads/main/sub"],
            &[
                "remote: error: cannot lock ref 'refs/heads/main/sub': 'refs/heads/main' exists; cannot create 'refs/heads/main/sub'",
                "! [remote rejected] main -> main/sub (failed to update ref)",
            ],
        );
        t.same(
            &["main:refs/heads/p"],
            &["remote: error: cannot lock ref 'refs/heads/p': 'refs/heads/p/q' exists; cannot create 'refs/heads/p'"],
        );
        // Two such names in one push: in order without --atomic, refused together with it.
        t.same(
            &["main:refs/heads/c", "main:refs/heads/c/d"],
            &["cannot lock ref 'refs/heads/c/d': 'refs/heads/c' exists; cannot create 'refs/heads/c/d'"],
        );
        t.same(
            &["--atomic", "main:refs/heads/e", "main:refs/heads/e/d"],
            &[
                "remote: error: cannot lock ref 'refs/heads/e': cannot process 'refs/heads/e' and 'refs/heads/e/d' at the same time",
                "! [remote rejected] main -> e (atomic transaction failed)",
                "! [remote rejected] main -> e/d (atomic transaction failed)",
            ],
        );
        t.same(
            &["--atomic", "main:refs/heads/f", "main:refs/heads/main/x"],
            &["! [remote rejected] main -> f (atomic transaction failed)"],
        );
        // Deleting a ref and creating one below it: in order it works, atomically it does not.
        t.same(
            &["--atomic", ":refs/heads/old", "main:refs/heads/old/b"],
            &["cannot lock ref 'refs/heads/old/b': 'refs/heads/old' exists; cannot create 'refs/heads/old/b'"],
        );
        t.same(
            &[":refs/heads/old", "main:refs/heads/old/b"],
            &["* [new branch]      main -> old/b"],
        );
        assert_eq!(
            t.by_packd.git_str(&["rev-parse", "refs/heads/old/b"]),
            t.rev("main")
        );
        t.clones_work();
    }
}

#[test]
fn branches_may_only_name_commits() {
    for packed in [false, true] {
        let t = Twin::new(packed);
        let blob = t.blob();
        let tree = t.rev("main^{tree}");
        let to = |id: &str, name: &str| format!("{id}:{name}");
        t.same(
            &[
                &to(&blob, "refs/heads/blob"),
                &to(&tree, "refs/heads/tree"),
                &to(&blob, "refs/tags/blob"),
                &to(&blob, "refs/other/blob"),
            ],
            &[
                format!("remote: error: cannot update ref 'refs/heads/blob': trying to write non-commit object {blob} to branch 'refs/heads/blob'"),
                format!("remote: error: cannot update ref 'refs/heads/tree': trying to write non-commit object {tree} to branch 'refs/heads/tree'"),
                "(failed to update ref)".to_string(),
            ],
        );
        // Tags and other refs may name anything.
        let refs = show_ref(&t.by_packd);
        assert!(refs.contains(&format!("{blob} refs/tags/blob")), "{refs}");
        assert!(refs.contains(&format!("{blob} refs/other/blob")), "{refs}");
        t.same(
            &[
                "--atomic",
                &to(&blob, "refs/heads/blob"),
                "main:refs/heads/fine",
            ],
            &["main -> fine (atomic transaction failed)"],
        );
        assert!(!show_ref(&t.by_packd).contains("refs/heads/blob"));
        t.clones_work();
    }
}

#[test]
fn names_git_refuses_are_funny_refnames() {
    let t = Twin::new(false);
    let main = t.rev("main");
    for name in [
        "refs/heads/a..b",
        "refs/heads/x.lock",
        "refs/heads/x.lock/y",
        "refs/main",
        "HEAD",
        "../x",
        "/abs",
        "refs/heads/../../x",
        "refs/heads/x/",
        "refs//heads/x",
        "refs/heads/a b",
        "refs/heads/.x",
        "refs/heads/a@{1}",
        "refs/heads/*",
        "refs/heads/a.",
        "refs/heads/a\\b",
    ] {
        let (git, packd) = t.raw(&[format!("{ZERO} {main} {name}")], "");
        assert_eq!(packd, git, "{name}");
        assert_eq!(
            git,
            [
                format!("remote: error: refusing to create funny ref '{name}' remotely"),
                "report: unpack ok".to_string(),
                format!("report: ng {name} funny refname"),
            ],
            "{name}"
        );
    }
    // In an atomic push the first refusal stops the checks: "atomic push failure" for the rest.
    let (git, packd) = t.raw(
        &[
            format!("{ZERO} {main} refs/heads/ok"),
            format!("{ZERO} {main} refs/heads/a..b"),
            format!("{ZERO} {ZERO} refs/heads/never"),
        ],
        "atomic",
    );
    assert_eq!(packd, git);
    assert!(
        git.contains(&"report: ng refs/heads/ok atomic push failure".to_string()),
        "{git:?}"
    );
    // Deleting what is not there: allowed, with git's warning; stale and missing old values.
    let old = t.rev("main~1");
    let (git, packd) = t.raw(
        &[
            format!("{ZERO} {ZERO} refs/heads/never"),
            format!("{old} {main} refs/heads/main"),
            format!("{old} {main} refs/heads/missing"),
            format!("{ZERO} {main} refs/heads/old"),
        ],
        "",
    );
    assert_eq!(packd, git);
    assert!(
        git.contains(&"remote: warning: deleting a non-existent ref".to_string()),
        "{git:?}"
    );
    assert_eq!(show_ref(&t.by_packd), show_ref(&t.by_git));
    // refs/tags/@ is a fine name.
    let (git, packd) = t.raw(&[format!("{ZERO} {main} refs/tags/@")], "");
    assert_eq!(packd, git);
    assert!(
        git.contains(&"report: ok refs/tags/@".to_string()),
        "{git:?}"
    );
    t.clones_work();
}

#[test]
fn a_lock_git_holds_refuses_the_push_as_git_does() {
    for packed in [false, true] {
        let t = Twin::new(packed);
        t.client
            .git(&["commit", "-q", "--allow-empty", "-m", "three"]);
        for server in [&t.by_git, &t.by_packd] {
            std::fs::write(server.git_dir.join("refs/heads/main.lock"), "").unwrap();
            std::fs::write(server.git_dir.join("packed-refs.lock"), "").unwrap();
        }
        let err = t.same(
            &["main"],
            &[
                "remote: error: cannot lock ref 'refs/heads/main': Unable to create './refs/heads/main.lock': File exists.",
                "remote: may have crashed in this repository earlier:",
                "(failed to update ref)",
            ],
        );
        assert!(err.contains("rejected"), "{err}");
        t.same(
            &[":refs/heads/old"],
            &["remote: error: Unable to create './packed-refs.lock': File exists."],
        );
        for server in [&t.by_git, &t.by_packd] {
            // git's locks are still there: never broken.
            assert!(server.git_dir.join("refs/heads/main.lock").exists());
            std::fs::remove_file(server.git_dir.join("refs/heads/main.lock")).unwrap();
            std::fs::remove_file(server.git_dir.join("packed-refs.lock")).unwrap();
        }
        t.same(&["main", ":refs/heads/old"], &["main -> main", "[deleted]"]);
        t.clones_work();
    }
}

#[test]
fn a_hidden_ref_in_an_atomic_push_is_refused_alone_as_git_does() {
    let t = Twin::new(false);
    for server in [&t.by_git, &t.by_packd] {
        server.git(&["config", "receive.hideRefs", "refs/heads/old"]);
    }
    let (main, old) = (t.rev("main"), t.rev("main~1"));
    // git's receive-pack refuses the hidden ref and still applies the rest.
    let (git, packd) = t.raw(
        &[
            format!("{old} {main} refs/heads/old"),
            format!("{ZERO} {main} refs/heads/fine"),
        ],
        "atomic",
    );
    assert_eq!(packd, git);
    assert_eq!(
        git,
        [
            "report: unpack ok",
            "report: ng refs/heads/old deny updating a hidden ref",
            "report: ok refs/heads/fine"
        ]
    );
    assert_eq!(show_ref(&t.by_packd), show_ref(&t.by_git));
}
