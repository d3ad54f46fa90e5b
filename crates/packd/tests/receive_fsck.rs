//! git's fsck checks on push: a corpus of crafted objects (made with `git hash-object
//! --literally`, after git's own t1450, t7415, t7416, t7417 and t0060 cases) pushed with the
//! real git client both to git's receive-pack with `receive.fsckObjects=true` and to packd's.
//! Each must be refused by packd exactly when by git, with the same `remote: error:` /
//! `warning:` / `fatal:` lines (so the same msgId) and unpack status, the refs unchanged.

mod common;
mod fsck_corpus;

use common::{Repo, Run, Sandbox};
use fsck_corpus::{corpus, raw_tree, Corpus, WHO};

pub(crate) const ZERO: &str = "0000000000000000000000000000000000000000";
/// An id no object has.
pub(crate) const ABSENT: &str = "1234567890123456789012345678901234567890";

/// What the client shows of a push: its exit, the relayed lines and the unpack status.
#[derive(Debug, PartialEq, Eq)]
struct Outcome {
    accepted: bool,
    lines: Vec<String>,
}

fn outcome(run: &Run) -> Outcome {
    let err = run.err();
    let mut lines: Vec<String> = err
        .lines()
        .filter_map(|l| {
            let l = l.trim_end();
            if let Some(remote) = l.strip_prefix("remote: ") {
                let keep = ["error:", "warning:", "fatal:"]
                    .iter()
                    .any(|p| remote.starts_with(p));
                return keep.then(|| remote.to_string());
            }
            l.starts_with("error: remote unpack failed")
                .then(|| l.to_string())
        })
        .collect();
    lines.sort();
    Outcome {
        accepted: run.success(),
        lines,
    }
}

/// The message ids in `lines` (`error: object <id>: <msgId>: ...`).
fn msg_ids(lines: &[String]) -> Vec<String> {
    lines
        .iter()
        .filter_map(|l| l.split(": ").nth(2).map(str::to_string))
        .filter(|id| id.chars().all(|c| c.is_ascii_alphanumeric()))
        .collect()
}

/// Two servers (git's, packd's) holding the base commit, configured alike with `config`.
struct Servers {
    git: Repo,
    packd: Repo,
}

fn servers(sb: &Sandbox, corpus: &Corpus, tag: &str, config: &[(&str, &str)]) -> Servers {
    let git = sb.init_bare(&format!("git-{tag}.git"));
    let packd = sb.init_bare(&format!("packd-{tag}.git"));
    for server in [&git, &packd] {
        let target = server.git_dir.to_str().unwrap();
        corpus.client.git(&[
            "push",
            "-q",
            target,
            &format!("{}:refs/heads/main", corpus.base),
        ]);
        for (key, value) in config {
            server.git(&["config", key, value]);
        }
    }
    Servers { git, packd }
}

fn push_to(client: &Repo, server: &Repo, receive_pack: &str, reference: &str) -> Run {
    let rp = format!("--receive-pack={receive_pack}");
    let target = server.git_dir.to_str().unwrap();
    client.git_run(
        &["push", &rp, target, &format!("{reference}:{reference}")],
        None,
    )
}

fn show_ref(repo: &Repo) -> String {
    String::from_utf8(repo.git_run(&["show-ref"], None).stdout).unwrap()
}

/// Pushes every case to both servers; returns the cases where they differ (with both
/// outcomes) and git's outcome of each case by name.
fn compare(corpus: &Corpus, servers: &Servers) -> (Vec<String>, Vec<(String, Outcome)>) {
    let packd_rp = format!("{} receive-pack", common::PACKD);
    let mut differences = Vec::new();
    let mut outcomes = Vec::new();
    for case in &corpus.cases {
        let git_refs = show_ref(&servers.git);
        let packd_refs = show_ref(&servers.packd);
        let by_git = outcome(&push_to(
            &corpus.client,
            &servers.git,
            "git receive-pack",
            &case.reference,
        ));
        let by_packd = outcome(&push_to(
            &corpus.client,
            &servers.packd,
            &packd_rp,
            &case.reference,
        ));
        // git's index-pack writes a missing .gitmodules' id to receive-pack, which has
        // stopped reading by then: git refuses only when that write dies of SIGPIPE before
        // index-pack exits, a race whose outcome depends on the machine's load. packd always
        // refuses it (silently, as git does when the race is lost).
        let racy = case.name == "gitmodules-missing"
            && servers.git.git_dir.to_string_lossy().contains("index-pack")
            && by_git.accepted
            && by_git.lines.is_empty();
        if by_git != by_packd && !racy {
            differences.push(format!(
                "{}:\n  git:   {by_git:?}\n  packd: {by_packd:?}",
                case.name
            ));
        }
        if !by_packd.accepted {
            assert_eq!(
                show_ref(&servers.packd),
                packd_refs,
                "{}: refs moved",
                case.name
            );
        }
        if !by_git.accepted {
            assert_eq!(show_ref(&servers.git), git_refs);
        }
        outcomes.push((case.name.clone(), by_git));
    }
    (differences, outcomes)
}

#[test]
fn packd_refuses_what_git_refuses_with_the_same_messages() {
    let sb = Sandbox::new();
    let corpus = corpus(&sb);
    for (tag, limit) in [("unpack-objects", "100"), ("index-pack", "1")] {
        let servers = servers(
            &sb,
            &corpus,
            tag,
            &[
                ("receive.fsckObjects", "true"),
                ("receive.unpackLimit", limit),
            ],
        );
        let (differences, outcomes) = compare(&corpus, &servers);
        assert!(differences.is_empty(), "{tag}:\n{}", differences.join("\n"));
        // The corpus exercises what it means to: refusals and warnings of many ids.
        let refused = outcomes.iter().filter(|(_, o)| !o.accepted).count();
        let mut ids: Vec<String> = outcomes
            .iter()
            .flat_map(|(_, o)| msg_ids(&o.lines))
            .collect();
        ids.sort();
        ids.dedup();
        assert!(refused >= 60, "{tag}: only {refused} refusals");
        assert!(ids.len() >= 38, "{tag}: ids seen: {ids:?}");
    }
}

#[test]
fn fsck_objects_off_lets_through_what_git_lets_through() {
    let sb = Sandbox::new();
    let corpus = corpus(&sb);
    for (tag, config) in [
        (
            "receive-off",
            [
                ("receive.fsckObjects", "false"),
                ("transfer.fsckObjects", "true"),
            ],
        ),
        (
            "transfer-off",
            [
                ("transfer.fsckObjects", "false"),
                ("receive.unpackLimit", "1"),
            ],
        ),
    ] {
        let servers = servers(&sb, &corpus, tag, &config);
        let (differences, outcomes) = compare(&corpus, &servers);
        assert!(differences.is_empty(), "{tag}:\n{}", differences.join("\n"));
        assert!(
            outcomes.iter().all(|(_, o)| o.accepted),
            "{tag}: {outcomes:?}"
        );
    }
}

#[test]
fn severities_skip_list_and_the_default() {
    let sb = Sandbox::new();
    let corpus = corpus(&sb);
    let find = |name: &str| corpus.cases.iter().find(|c| c.name == name).unwrap();
    let bad_tree = corpus.client.git_str(&[
        "rev-parse",
        &format!("{}^{{tree}}", find("dotgit-0").reference),
    ]);
    std::fs::write(sb.path().join("skip"), format!("# skipped\n{bad_tree}\n")).unwrap();
    let skip = sb.path().join("skip");
    let skip = skip.to_str().unwrap();
    let configs: Vec<(&str, Vec<(&str, &str)>)> = vec![
        (
            "ignore",
            vec![
                ("receive.fsckObjects", "true"),
                ("receive.fsck.hasDotgit", "ignore"),
            ],
        ),
        (
            "warn",
            vec![
                ("receive.fsckObjects", "true"),
                ("receive.fsck.hasdotgit", "warn"),
            ],
        ),
        (
            "error",
            vec![
                ("receive.fsckObjects", "true"),
                ("receive.fsck.badFilemode", "error"),
            ],
        ),
        (
            "skip",
            vec![
                ("receive.fsckObjects", "true"),
                ("receive.fsck.skipList", skip),
            ],
        ),
        (
            "not-fsck",
            vec![
                ("receive.fsckObjects", "true"),
                ("fsck.hasDotgit", "ignore"),
            ],
        ),
    ];
    let packd_rp = format!("{} receive-pack", common::PACKD);
    for (tag, config) in &configs {
        let servers = servers(&sb, &corpus, tag, config);
        for name in ["dotgit-0", "mode-664", "has-dot"] {
            let reference = &find(name).reference;
            let by_git = outcome(&push_to(
                &corpus.client,
                &servers.git,
                "git receive-pack",
                reference,
            ));
            let by_packd = outcome(&push_to(
                &corpus.client,
                &servers.packd,
                &packd_rp,
                reference,
            ));
            assert_eq!(by_git, by_packd, "{tag} {name}");
            match (*tag, name) {
                ("ignore" | "skip", "dotgit-0") => {
                    assert!(by_git.accepted && by_git.lines.is_empty())
                }
                ("warn", "dotgit-0") => {
                    assert!(by_git.accepted);
                    assert!(by_git.lines[0].starts_with("warning: "), "{by_git:?}");
                }
                ("error", "mode-664") => assert!(!by_git.accepted),
                (_, "mode-664") => assert!(by_git.accepted && !by_git.lines.is_empty()),
                _ => assert!(!by_git.accepted, "{tag} {name}: {by_git:?}"),
            }
        }
    }
    // Nothing configured: packd checks (git, whose default is off, would not).
    let servers = servers(&sb, &corpus, "default", &[]);
    let reference = &find("dotgit-0").reference;
    let by_packd = outcome(&push_to(
        &corpus.client,
        &servers.packd,
        &packd_rp,
        reference,
    ));
    assert!(!by_packd.accepted);
    assert_eq!(msg_ids(&by_packd.lines), ["hasDotgit"]);
    let by_git = outcome(&push_to(
        &corpus.client,
        &servers.git,
        "git receive-pack",
        reference,
    ));
    assert!(by_git.accepted);
}

#[test]
fn a_marked_blob_the_repository_has_is_checked_and_quiet_does_not_hide_messages() {
    let sb = Sandbox::new();
    let corpus = corpus(&sb);
    let servers = servers(&sb, &corpus, "marked", &[("receive.fsckObjects", "true")]);
    // First the blob under an innocent name (not checked), then a tree naming it .gitmodules:
    // the second pack does not carry the blob, the servers' repositories have it.
    let blob = corpus.write("blob", b"[submodule \"../../hooks\"]\n\turl = ./x\n");
    let first = corpus.write("tree", &raw_tree(&[("100644", b"x", &blob)]));
    let first = corpus.commit_of_tree(&first);
    let second = corpus.write("tree", &raw_tree(&[("100644", b".gitmodules", &blob)]));
    let second = corpus
        .client
        .git_str(&["commit-tree", "-p", &first, "-m", "marked", &second]);
    corpus
        .client
        .git(&["update-ref", "refs/heads/innocent", &first]);
    corpus
        .client
        .git(&["update-ref", "refs/heads/marked", &second]);
    let packd_rp = format!("--receive-pack={} receive-pack", common::PACKD);
    let push = |rp: &str, server: &Repo, reference: &str| {
        let target = server.git_dir.to_str().unwrap();
        outcome(
            &corpus
                .client
                .git_run(&["push", "-q", rp, target, reference], None),
        )
    };
    for reference in ["refs/heads/innocent", "refs/heads/marked"] {
        let by_git = push("--receive-pack=git receive-pack", &servers.git, reference);
        let by_packd = push(&packd_rp, &servers.packd, reference);
        assert_eq!(by_git, by_packd, "{reference}");
        if reference.ends_with("marked") {
            assert!(!by_git.accepted);
            assert_eq!(msg_ids(&by_git.lines), ["gitmodulesName"]);
        } else {
            assert!(by_git.accepted);
        }
    }
    assert!(!show_ref(&servers.packd).contains("refs/heads/marked"));
}

/// A pkt-line.
fn pkt(data: &[u8]) -> Vec<u8> {
    let mut out = format!("{:04x}", data.len() + 4).into_bytes();
    out.extend_from_slice(data);
    out
}

/// What a receive-pack answered a hand-made push: the unpack status and the `error:` /
/// `warning:` / `fatal:` lines of side-band 2, sorted.
fn raw_answer(stdout: &[u8]) -> Vec<String> {
    let mut rest = stdout;
    let mut seen_flush = false;
    let mut lines = Vec::new();
    let mut band1 = Vec::new();
    let mut band2 = Vec::new();
    while rest.len() >= 4 {
        let len = usize::from_str_radix(std::str::from_utf8(&rest[..4]).unwrap(), 16).unwrap();
        if len == 0 {
            rest = &rest[4..];
            seen_flush = true;
            continue;
        }
        let payload = &rest[4..len];
        rest = &rest[len..];
        if !seen_flush {
            continue; // the advertisement
        }
        // A message may span packets (git's relay cuts where its reads end).
        match payload[0] {
            1 => band1.extend_from_slice(&payload[1..]),
            2 => band2.extend_from_slice(&payload[1..]),
            _ => {}
        }
    }
    for line in String::from_utf8_lossy(&band2).lines() {
        if ["error:", "warning:", "fatal:"]
            .iter()
            .any(|p| line.starts_with(p))
        {
            lines.push(line.to_string());
        }
    }
    let report = String::from_utf8_lossy(&band1).to_string();
    let unpack = report
        .lines()
        .find_map(|l| l.find("unpack ").map(|i| l[i..].to_string()))
        .unwrap_or_default();
    lines.sort();
    lines.insert(0, unpack);
    lines
}

#[test]
fn objects_git_push_cannot_send_are_answered_as_git_answers_them() {
    use common::PackWriter;
    let sb = Sandbox::new();
    let corpus = corpus(&sb);
    let base = &corpus.base;
    let tree = "4b825dc642cb6eb9a060e54bf8d69288fbee4904";
    let body = |head: &str| format!("{head}author {WHO}\ncommitter {WHO}\n\nm\n");
    let cases: Vec<(&str, u8, Vec<u8>)> = vec![
        (
            "bad-tree-sha1",
            1,
            body(&format!("tree 4b825dc6\nparent {base}\n")).into_bytes(),
        ),
        (
            "missing-tree",
            1,
            body(&format!("parent {base}\n")).into_bytes(),
        ),
        (
            "bad-parent",
            1,
            body(&format!("tree {tree}\nparent 1234\n")).into_bytes(),
        ),
        (
            "nul-in-header",
            1,
            format!("tree {tree}\nparent {base}\nauthor {WHO}\0\ncommitter {WHO}\n\nm\n")
                .into_bytes(),
        ),
        ("short-tree", 2, b"100644 a\0".to_vec()),
        ("bad-mode", 2, {
            let mut t = b"10x644 a\0".to_vec();
            t.extend_from_slice(&[7; 20]);
            t
        }),
        (
            "tag-no-object",
            4,
            "type commit\ntag t\n\nm\n".to_string().into_bytes(),
        ),
        (
            "tag-bad-object",
            4,
            "object 1234\ntype commit\ntag t\n\nm\n"
                .to_string()
                .into_bytes(),
        ),
        (
            "tag-no-type",
            4,
            format!("object {base}\ntag t\n\nm\n").into_bytes(),
        ),
        (
            "tag-bad-type",
            4,
            format!("object {base}\ntype bush\ntag t\ntagger {WHO}\n\nm\n").into_bytes(),
        ),
        (
            "tag-no-tag",
            4,
            format!("object {base}\ntype commit\ntagger {WHO}\n\nm\n").into_bytes(),
        ),
        (
            "missing-tree",
            1,
            body(&format!("tree {ABSENT}\nparent {base}\n")).into_bytes(),
        ),
        ("missing-blob", 2, raw_tree(&[("100644", b"a", ABSENT)])),
    ];
    let mut differences = Vec::new();
    for (tag, limit) in [("raw-unpack-objects", "100"), ("raw-index-pack", "1")] {
        let servers = servers(
            &sb,
            &corpus,
            tag,
            &[
                ("receive.fsckObjects", "true"),
                ("receive.unpackLimit", limit),
            ],
        );
        for (name, kind, data) in &cases {
            let mut w = PackWriter::new();
            let (id, _) = w.object(*kind, data);
            let id: String = id.iter().map(|b| format!("{b:02x}")).collect();
            let pack = w.finish().0;
            let (reference, old) = match kind {
                1 => (format!("refs/heads/{name}"), ZERO),
                _ => (format!("refs/tags/{name}"), ZERO),
            };
            let mut input = pkt(format!(
                "{old} {id} {reference}\0report-status side-band-64k quiet\n"
            )
            .as_bytes());
            input.extend_from_slice(b"0000");
            input.extend_from_slice(&pack);
            let by_git = raw_answer(
                &servers
                    .git
                    .git_run(&["receive-pack", "."], Some(&input))
                    .stdout,
            );
            let run = servers.packd.packd(&["receive-pack", "."], Some(&input));
            run.assert_no_crash();
            let by_packd = raw_answer(&run.stdout);
            if by_git != by_packd {
                differences.push(format!(
                    "{tag} {name}:\n  git:   {by_git:?}\n  packd: {by_packd:?}"
                ));
            }
            assert!(
                by_git[0].ends_with("abnormal exit"),
                "{tag} {name}: {by_git:?}"
            );
            assert!(!show_ref(&servers.packd).contains(&reference));
        }
    }
    assert!(differences.is_empty(), "{}", differences.join("\n"));
}

/// Hex of an id.
fn hex(id: &[u8; 20]) -> String {
    id.iter().map(|b| format!("{b:02x}")).collect()
}

/// One hand-made push of links to objects of the wrong kind: the pack's objects in order
/// (kind, content); the first commit or tag is the ref's new tip.
struct KindCase {
    name: &'static str,
    objects: Vec<(u8, Vec<u8>)>,
}

fn kind_cases(corpus: &Corpus) -> Vec<KindCase> {
    let base = corpus.base.clone();
    let base_tree = corpus
        .client
        .git_str(&["rev-parse", &format!("{base}^{{tree}}")]);
    let base_blob = corpus.client.git_str(&["rev-parse", &format!("{base}:f")]);
    let id = |kind: u8, data: &[u8]| {
        let mut w = common::PackWriter::new();
        hex(&w.object(kind, data).0)
    };
    let commit = |tree: &str, parents: &[&str]| {
        let mut text = format!("tree {tree}\n");
        for p in parents {
            text.push_str(&format!("parent {p}\n"));
        }
        text.push_str(&format!("author {WHO}\ncommitter {WHO}\n\nm\n"));
        text.into_bytes()
    };
    let tag = |object: &str, kind: &str| {
        format!("object {object}\ntype {kind}\ntag t\ntagger {WHO}\n\nm\n").into_bytes()
    };
    // New objects of each kind: a blob, a tree of it, a commit of that tree.
    let blob = b"new blob\n".to_vec();
    let nb = id(3, &blob);
    let tree = raw_tree(&[("100644", b"x", &nb)]);
    let nt = id(2, &tree);
    let new_commit = commit(&nt, &[&base]);
    let nc = id(1, &new_commit);
    let b = || (3u8, blob.clone());
    let t = || (2u8, tree.clone());
    let c = || (1u8, new_commit.clone());
    // A commit of a one-entry root tree (mode, target), then that tree.
    let with_named = |mode: &str, name: &[u8], target: &str, parents: &[&str]| {
        let root = raw_tree(&[(mode, name, target)]);
        vec![(1u8, commit(&id(2, &root), parents)), (2u8, root)]
    };
    let with_entry =
        |mode: &str, target: &str, parents: &[&str]| with_named(mode, b"a", target, parents);
    let cat = |parts: Vec<Vec<(u8, Vec<u8>)>>| parts.concat();
    let tagged = tag(&nb, "blob");
    vec![
        // The target in the pack, after the object naming it.
        KindCase {
            name: "commit-tree-is-new-blob",
            objects: vec![(1, commit(&nb, &[&base])), b()],
        },
        KindCase {
            name: "commit-parent-is-new-tree",
            objects: vec![(1, commit(&base_tree, &[&nt])), t(), b()],
        },
        KindCase {
            name: "blob-mode-is-new-tree",
            objects: cat(vec![with_entry("100644", &nt, &[&base]), vec![t(), b()]]),
        },
        KindCase {
            name: "symlink-mode-is-new-commit",
            objects: cat(vec![
                with_entry("120000", &nc, &[&base]),
                vec![c(), t(), b()],
            ]),
        },
        KindCase {
            name: "tree-mode-is-new-blob",
            objects: cat(vec![with_entry("40000", &nb, &[&base]), vec![b()]]),
        },
        KindCase {
            name: "tag-commit-is-new-blob",
            objects: vec![(4, tag(&nb, "commit")), b()],
        },
        KindCase {
            name: "tag-blob-is-new-commit",
            objects: vec![(4, tag(&nc, "blob")), c(), t(), b()],
        },
        KindCase {
            name: "tag-commit-is-new-tag",
            objects: vec![
                (4, tag(&id(4, &tagged), "commit")),
                (4, tagged.clone()),
                b(),
            ],
        },
        // The target in the pack, before the object naming it.
        KindCase {
            name: "before-commit-tree-is-new-blob",
            objects: vec![b(), (1, commit(&nb, &[&base]))],
        },
        KindCase {
            name: "before-commit-parent-is-new-tree",
            objects: vec![t(), b(), (1, commit(&base_tree, &[&nt]))],
        },
        KindCase {
            name: "before-blob-mode-is-new-tree",
            objects: cat(vec![vec![t(), b()], with_entry("100644", &nt, &[&base])]),
        },
        KindCase {
            name: "before-tree-mode-is-new-blob",
            objects: cat(vec![vec![b()], with_entry("40000", &nb, &[&base])]),
        },
        KindCase {
            name: "before-tag-commit-is-new-blob",
            objects: vec![b(), (4, tag(&nb, "commit"))],
        },
        // The target in the repository.
        KindCase {
            name: "commit-tree-is-old-blob",
            objects: vec![(1, commit(&base_blob, &[&base]))],
        },
        KindCase {
            name: "commit-tree-is-old-commit",
            objects: vec![(1, commit(&base, &[]))],
        },
        KindCase {
            name: "commit-parent-is-old-blob",
            objects: vec![(1, commit(&base_tree, &[&base_blob]))],
        },
        KindCase {
            name: "blob-mode-is-old-tree",
            objects: with_entry("100644", &base_tree, &[&base]),
        },
        KindCase {
            name: "executable-mode-is-old-commit",
            objects: with_entry("100755", &base, &[]),
        },
        KindCase {
            name: "tree-mode-is-old-blob",
            objects: with_entry("40000", &base_blob, &[&base]),
        },
        KindCase {
            name: "tag-blob-is-old-commit",
            objects: vec![(4, tag(&base, "blob"))],
        },
        KindCase {
            name: "tag-commit-is-old-tree",
            objects: vec![(4, tag(&base_tree, "commit"))],
        },
        // A .gitmodules entry naming a tree (the fsck checks would refuse it too).
        KindCase {
            name: "gitmodules-is-new-tree",
            objects: cat(vec![
                with_named("100644", b".gitmodules", &nt, &[&base]),
                vec![t(), b()],
            ]),
        },
        KindCase {
            name: "gitmodules-is-old-tree",
            objects: with_named("100644", b".gitmodules", &base_tree, &[&base]),
        },
        // Right kinds: accepted.
        KindCase {
            name: "ok-tag-tree-is-new-tree",
            objects: vec![(4, tag(&nt, "tree")), t(), b()],
        },
        KindCase {
            name: "ok-gitlink-is-old-blob",
            objects: with_entry("160000", &base_blob, &[&base]),
        },
    ]
}

/// Sends `case` as a hand-made push to `server` (git's receive-pack or packd's); returns the
/// answer (see [`raw_answer`]) and whether the ref was created.
fn push_kind_case(server: &Repo, by_git: bool, case: &KindCase) -> (Vec<String>, bool) {
    let mut w = common::PackWriter::new();
    let mut tip = None;
    for (kind, data) in &case.objects {
        let (id, _) = w.object(*kind, data);
        if matches!(kind, 1 | 4) && tip.is_none() {
            tip = Some((hex(&id), *kind));
        }
    }
    let (tip, kind) = tip.unwrap();
    let pack = w.finish().0;
    let reference = match kind {
        4 => format!("refs/tags/{}", case.name),
        _ => format!("refs/heads/{}", case.name),
    };
    let mut input =
        pkt(format!("{ZERO} {tip} {reference}\0report-status side-band-64k quiet\n").as_bytes());
    input.extend_from_slice(b"0000");
    input.extend_from_slice(&pack);
    let stdout = if by_git {
        server.git_run(&["receive-pack", "."], Some(&input)).stdout
    } else {
        let run = server.packd(&["receive-pack", "."], Some(&input));
        run.assert_no_crash();
        run.stdout
    };
    let answer = raw_answer(&stdout)
        .into_iter()
        .map(|l| l.replace(&tip, "<tip>"))
        .collect();
    let created = show_ref(server).contains(&reference);
    (answer, created)
}

#[test]
fn links_to_objects_of_the_wrong_kind_are_refused_as_git_refuses_them() {
    let sb = Sandbox::new();
    let corpus = corpus(&sb);
    let cases = kind_cases(&corpus);
    let mut differences = Vec::new();
    for (tag, limit) in [("kinds-unpack-objects", "100"), ("kinds-index-pack", "1")] {
        let servers = servers(
            &sb,
            &corpus,
            tag,
            &[
                ("receive.fsckObjects", "true"),
                ("receive.unpackLimit", limit),
            ],
        );
        for case in &cases {
            let (by_git, git_created) = push_kind_case(&servers.git, true, case);
            let (by_packd, packd_created) = push_kind_case(&servers.packd, false, case);
            if by_git != by_packd || git_created != packd_created {
                differences.push(format!(
                    "{tag} {}:\n  git:   {by_git:?}\n  packd: {by_packd:?}",
                    case.name
                ));
            }
            let right = case.name.starts_with("ok-");
            assert_eq!(git_created, right, "{tag} {}: {by_git:?}", case.name);
            assert_eq!(by_git[0] == "unpack ok", right, "{tag} {}", case.name);
        }
    }
    assert!(differences.is_empty(), "{}", differences.join("\n"));
}

#[test]
fn with_fsck_off_links_of_the_wrong_kind_are_refused_where_git_breaks_the_repository() {
    let sb = Sandbox::new();
    let corpus = corpus(&sb);
    let cases = kind_cases(&corpus);
    for (tag, limit) in [
        ("kinds-off-unpack-objects", "100"),
        ("kinds-off-index-pack", "1"),
    ] {
        let servers = servers(
            &sb,
            &corpus,
            tag,
            &[
                ("receive.fsckObjects", "false"),
                ("receive.unpackLimit", limit),
            ],
        );
        for case in &cases {
            let (by_git, git_created) = push_kind_case(&servers.git, true, case);
            let (by_packd, packd_created) = push_kind_case(&servers.packd, false, case);
            let right = case.name.starts_with("ok-");
            assert_eq!(packd_created, right, "{tag} {}: {by_packd:?}", case.name);
            // git's connectivity check (rev-list --objects) reads the trees and commits a
            // link names, never a blob: a blob-mode entry naming a new tree or commit gets
            // through, and git's own fsck then finds the repository broken.
            let git_lets_through = matches!(
                case.name,
                "blob-mode-is-new-tree"
                    | "symlink-mode-is-new-commit"
                    | "before-blob-mode-is-new-tree"
                    | "gitmodules-is-new-tree"
            );
            assert_eq!(
                git_created,
                right || git_lets_through,
                "{tag} {}: {by_git:?}",
                case.name
            );
            assert_eq!(by_git[0], "unpack ok", "{tag} {}", case.name);
            if !right {
                assert_ne!(by_packd[0], "unpack ok", "{tag} {}", case.name);
            }
        }
        // git's fsck finds its repository broken (an object of one kind named as another).
        let fsck = servers.git.git_run(&["fsck"], None);
        assert!(!fsck.success(), "{tag}: git's repository is not broken");
        assert!(
            fsck.err().contains(", not a "),
            "{tag}: {}{}",
            fsck.out(),
            fsck.err()
        );
        assert!(servers.packd.git_run(&["fsck"], None).success());
    }
}
