//! packd cat-file -t/-s/-p/-e and name resolution (full ids, abbreviations, ambiguous prefixes,
//! refs), compared with git cat-file.

mod common;
use common::*;
use std::collections::HashMap;

/// A repository with every kind of object and tree entry: nested trees, an executable, a
/// symlink, a submodule link, an annotated tag, a tag of a tag, a lightweight tag, a second
/// branch, packed and loose refs.
fn rich_repo(sb: &Sandbox) -> Repo {
    let repo = sb.init_bare("rich.git");
    let mut fi = FastImport::new();
    let c1 = fi.commit(
        "refs/heads/main",
        None,
        "first commit\n\nwith a body\n",
        &[
            inline("README", "hello\n"),
            inline("src/main.c", "int main(void) { return 0; }\n"),
            inline("src/lib/deep.h", "#define DEEP 1\n"),
            Change::Inline {
                mode: "100755",
                path: "run.sh".into(),
                data: b"#!/bin/sh\necho hi\n".to_vec(),
            },
            Change::Inline {
                mode: "120000",
                path: "link".into(),
                data: b"src/main.c".to_vec(),
            },
            Change::Ref {
                mode: "160000",
                path: "sub".into(),
                dataref: "1234567890123456789012345678901234567890".into(),
            },
            inline("empty", ""),
            inline("with space.txt", "spaces\n"),
            inline("binary.bin", vec![0u8, 1, 2, 255, 254, 0, b'\n', 0]),
            // C-quoted in the stream: a UTF-8 name and one with a tab (git -p quotes them).
            inline("\"caf\\303\\251.txt\"", "accent\n"),
            inline("\"tab\\there\"", "tab\n"),
        ],
    );
    let c2 = fi.commit(
        "refs/heads/main",
        None,
        "second\n",
        &[
            inline("README", "hello again\n"),
            Change::Delete("empty".into()),
        ],
    );
    fi.tag("v1", &format!(":{c1}"), "version one\n");
    fi.tag("v2", &format!(":{c2}"), "version two\n");
    fi.reset("refs/tags/light", &format!(":{c1}"));
    fi.commit(
        "refs/heads/topic",
        Some(&format!(":{c1}")),
        "topic\n",
        &[inline("topic.txt", "topic\n")],
    );
    repo.fast_import(&fi.finish());
    // A tag of a tag, and refs both in packed-refs and loose.
    repo.git(&["tag", "-a", "-m", "tag of a tag", "v2-outer", "v2"]);
    repo.git(&["pack-refs", "--all"]);
    repo.git(&["update-ref", "refs/heads/loose-branch", "topic"]);
    repo
}

/// Compares one `cat-file OPTS NAME` run: exit status (success or not, or exactly) and stdout.
fn compare_one(repo: &Repo, args: &[&str], exact_code: bool) {
    let mut full = vec!["cat-file"];
    full.extend_from_slice(args);
    let git = repo.git_run(&full, None);
    let packd = repo.packd(&full, None);
    packd.assert_no_crash();
    let what = format!("packd {}", full.join(" "));
    if exact_code {
        assert_eq!(
            git.code(),
            packd.code(),
            "{what}: exit code differs from git's (git stderr: {}; packd stderr: {})",
            git.err(),
            packd.err()
        );
    } else {
        assert_eq!(
            git.success(),
            packd.success(),
            "{what}: git exited {:?}, packd {:?} (git stderr: {}; packd stderr: {})",
            git.code(),
            packd.code(),
            git.err(),
            packd.err()
        );
    }
    assert_same_bytes(&what, &git.stdout, &packd.stdout);
}

fn ids_by_type(repo: &Repo) -> HashMap<String, Vec<String>> {
    let out = repo.git(&[
        "cat-file",
        "--batch-all-objects",
        "--batch-check=%(objecttype) %(objectname)",
    ]);
    let mut m: HashMap<String, Vec<String>> = HashMap::new();
    for line in String::from_utf8(out).unwrap().lines() {
        let (t, id) = line.split_once(' ').unwrap();
        m.entry(t.to_string()).or_default().push(id.to_string());
    }
    m
}

#[test]
fn single_object_modes_for_each_type() {
    let sb = Sandbox::new();
    let repo = rich_repo(&sb);
    let by_type = ids_by_type(&repo);
    for t in ["commit", "tree", "blob", "tag"] {
        assert!(by_type.contains_key(t), "no {t} in the test repository");
        for id in &by_type[t] {
            for opt in ["-t", "-s", "-p"] {
                compare_one(&repo, &[opt, id], true);
            }
            compare_one(&repo, &["-e", id], true);
        }
    }
}

#[test]
fn single_object_modes_with_packed_and_loose() {
    // Same, after a repack (packed objects) plus loose objects added on top.
    let sb = Sandbox::new();
    let repo = rich_repo(&sb);
    repo.git(&["repack", "-adf"]);
    let blob = String::from_utf8(repo.git_stdin(&["hash-object", "-w", "--stdin"], b"loose one\n"))
        .unwrap()
        .trim()
        .to_string();
    for id in repo.all_ids().iter().chain([&blob]) {
        for opt in ["-t", "-s", "-p", "-e"] {
            compare_one(&repo, &[opt, id], true);
        }
    }
}

#[test]
fn missing_objects() {
    let sb = Sandbox::new();
    let repo = rich_repo(&sb);
    let missing = "deadbeefdeadbeefdeadbeefdeadbeefdeadbeef";
    // -e on a full, well-formed id that is absent: exit 1, nothing printed.
    compare_one(&repo, &["-e", missing], true);
    for opt in ["-t", "-s", "-p"] {
        compare_one(&repo, &[opt, missing], false);
    }
    // Names that resolve to nothing.
    for name in ["deadbeef", "no-such-branch", "refs/heads/nope", "zzzz"] {
        for opt in ["-t", "-s", "-p", "-e"] {
            compare_one(&repo, &[opt, name], false);
        }
    }
    // In batch mode: "<name> missing".
    let input = lines_input(&[missing, "deadbeef", "no-such-branch", "zzzz"]);
    repo.compare_cat_file(&[], &["--batch-check"], Some(&input));
    repo.compare_cat_file(&[], &["--batch"], Some(&input));
}

#[test]
fn abbreviated_ids() {
    let sb = Sandbox::new();
    let repo = rich_repo(&sb);
    let ids = repo.all_ids();
    // Shortest unique prefixes down to 4 hex digits, and longer ones, upper case too.
    let mut names = Vec::new();
    for id in &ids {
        for len in [4usize, 5, 7, 12, 39] {
            let p = &id[..len];
            if ids.iter().filter(|x| x.starts_with(p)).count() == 1 {
                names.push(p.to_string());
            }
        }
    }
    assert!(names.len() > ids.len() * 3);
    for n in names.iter().step_by(3) {
        compare_one(&repo, &["-t", n], true);
        compare_one(&repo, &["-p", n], true);
    }
    repo.compare_cat_file(&[], &["--batch"], Some(&lines_input(&names)));
    repo.compare_cat_file(&[], &["--batch-check"], Some(&lines_input(&names)));
}

/// Finds two blob contents whose ids share their first four hex digits.
fn colliding_blobs() -> (String, String, String) {
    let mut seen: HashMap<[u8; 2], usize> = HashMap::new();
    for i in 0.. {
        let content = format!("ambiguous candidate {i}\n");
        let id = object_id("blob", content.as_bytes());
        let key = [id[0], id[1]];
        if let Some(&j) = seen.get(&key) {
            let other = format!("ambiguous candidate {j}\n");
            return (hex(&key), other, content);
        }
        seen.insert(key, i);
    }
    unreachable!()
}

#[test]
fn ambiguous_prefix() {
    let sb = Sandbox::new();
    let repo = rich_repo(&sb);
    let (prefix, a, b) = colliding_blobs();
    let ida =
        String::from_utf8(repo.git_stdin(&["hash-object", "-w", "--stdin"], a.as_bytes())).unwrap();
    let idb =
        String::from_utf8(repo.git_stdin(&["hash-object", "-w", "--stdin"], b.as_bytes())).unwrap();
    assert!(ida.starts_with(&prefix) && idb.starts_with(&prefix));
    // git's view: the prefix is ambiguous.
    let git = repo.git_stdin(&["cat-file", "--batch-check"], prefix.as_bytes());
    assert_eq!(
        String::from_utf8_lossy(&git),
        format!("{prefix} ambiguous\n")
    );
    let input = lines_input(&[
        &prefix,
        &ida.trim()[..5],
        &idb.trim()[..5],
        ida.trim(),
        idb.trim(),
    ]);
    repo.compare_cat_file(&[], &["--batch-check"], Some(&input));
    repo.compare_cat_file(&[], &["--batch"], Some(&input));
    for opt in ["-t", "-s", "-p", "-e"] {
        compare_one(&repo, &[opt, &prefix], false);
        let run = repo.packd(&["cat-file", opt, &prefix], None);
        assert!(
            !run.success(),
            "packd cat-file {opt} {prefix}: ambiguous, should fail"
        );
    }
    // Now packed: still ambiguous.
    repo.git(&["repack", "-adf"]);
    repo.compare_cat_file(&[], &["--batch-check"], Some(&input));
    // One loose, one packed: still ambiguous.
    write_loose_file(
        &repo.objects_dir(),
        ida.trim(),
        &loose_bytes("blob", a.as_bytes()),
    );
    repo.compare_cat_file(&[], &["--batch-check"], Some(&input));
}

#[test]
fn ref_names() {
    let sb = Sandbox::new();
    let repo = rich_repo(&sb);
    let names = [
        "HEAD",
        "main",
        "topic",
        "refs/heads/main",
        "heads/main",
        "refs/heads/topic",
        "loose-branch",
        "refs/heads/loose-branch",
        "v1",
        "v2",
        "v2-outer",
        "light",
        "tags/v1",
        "refs/tags/v2",
        "refs/tags/light",
    ];
    for n in names {
        for opt in ["-t", "-s", "-p", "-e"] {
            compare_one(&repo, &[opt, n], true);
        }
    }
    repo.compare_cat_file(&[], &["--batch"], Some(&lines_input(&names)));
    // HEAD after switching branches.
    repo.git(&["symbolic-ref", "HEAD", "refs/heads/topic"]);
    compare_one(&repo, &["-p", "HEAD"], true);
    // Detached HEAD.
    let c = repo.git_str(&["rev-parse", "main~1"]);
    std::fs::write(repo.git_dir.join("HEAD"), format!("{c}\n")).unwrap();
    compare_one(&repo, &["-p", "HEAD"], true);
}

#[test]
fn ref_name_wins_over_short_hex() {
    // git resolves a name that is both a ref and a hex prefix as the ref.
    let sb = Sandbox::new();
    let repo = rich_repo(&sb);
    let ids = repo.all_ids();
    let blob = ids
        .iter()
        .find(|id| repo.git_str(&["cat-file", "-t", id]) == "blob")
        .unwrap()
        .clone();
    let prefix = &blob[..8];
    repo.git(&["update-ref", &format!("refs/heads/{prefix}"), "main"]);
    compare_one(&repo, &["-t", prefix], true);
    compare_one(&repo, &["-p", prefix], true);
    repo.compare_cat_file(&[], &["--batch-check"], Some(&lines_input(&[prefix])));
}

#[test]
fn batch_rest_and_odd_lines() {
    let sb = Sandbox::new();
    let repo = rich_repo(&sb);
    let ids = repo.all_ids();
    let input = format!(
        "{} some rest of line\n{}\tafter tab\nmain   spaced\nHEAD\n{} \n",
        ids[0], ids[1], ids[2]
    );
    repo.compare_cat_file(
        &[],
        &["--batch-check=%(objectname) %(rest)"],
        Some(input.as_bytes()),
    );
    repo.compare_cat_file(
        &[],
        &["--batch=%(objecttype) [%(rest)] %(objectsize)"],
        Some(input.as_bytes()),
    );
    // Without %(rest), the whole line is the name.
    repo.compare_cat_file(&[], &["--batch-check"], Some(input.as_bytes()));
    // Literal text and %% in the format.
    repo.compare_cat_file(
        &[],
        &["--batch-check=<%(objectname)> 100%% %(objecttype)!"],
        Some(lines_input(&ids[..5]).as_slice()),
    );
    // Last line without a newline.
    let mut partial = lines_input(&ids[..3]);
    partial.extend_from_slice(ids[3].as_bytes());
    repo.compare_cat_file(&[], &["--batch"], Some(&partial));
    // Empty input.
    repo.compare_cat_file(&[], &["--batch"], Some(b""));
}

#[test]
fn typed_cat_file() {
    let sb = Sandbox::new();
    let repo = rich_repo(&sb);
    let blob = repo.git_str(&["rev-parse", "main:README"]);
    let tree = repo.git_str(&["rev-parse", "main^{tree}"]);
    compare_one(&repo, &["blob", &blob], true);
    compare_one(&repo, &["tree", &tree], true);
    compare_one(&repo, &["commit", "main"], true);
    compare_one(&repo, &["tag", "v1"], true);
    compare_one(&repo, &["blob", &tree], false);
}

#[test]
fn typed_cat_file_peels_like_git() {
    // git cat-file <type> <object> dereferences tags and commits to the requested type.
    let sb = Sandbox::new();
    let repo = rich_repo(&sb);
    compare_one(&repo, &["commit", "v1"], true);
    compare_one(&repo, &["tree", "main"], true);
    compare_one(&repo, &["tree", "v2-outer"], true);
}

/// git answers each --batch request as soon as it is read (without --buffer): a script can
/// send a name, wait for the answer, then send the next. packd must not wait for EOF.
#[test]
fn batch_answers_interactively() {
    use std::io::{BufRead, BufReader, Read, Write};
    use std::process::{Command, Stdio};
    use std::time::Duration;
    let sb = Sandbox::new();
    let repo = rich_repo(&sb);
    let head = repo.git_str(&["rev-parse", "HEAD"]);
    let size: usize = repo.git_str(&["cat-file", "-s", "HEAD"]).parse().unwrap();
    for mode in ["--batch-check", "--batch"] {
        let mut cmd = Command::new(PACKD);
        apply_env(&mut cmd, &sb.home);
        cmd.arg("-C")
            .arg(&repo.path)
            .args(["cat-file", mode])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null());
        let mut child = cmd.spawn().unwrap();
        let mut stdin = child.stdin.take().unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel::<Vec<u8>>();
        let with_content = mode == "--batch";
        std::thread::spawn(move || {
            let mut r = BufReader::new(stdout);
            loop {
                let mut line = Vec::new();
                if r.read_until(b'\n', &mut line).unwrap_or(0) == 0 {
                    break;
                }
                if with_content && !line.ends_with(b"missing\n") {
                    let n: usize = String::from_utf8_lossy(&line)
                        .trim()
                        .rsplit(' ')
                        .next()
                        .unwrap()
                        .parse()
                        .unwrap();
                    let mut body = vec![0; n + 1];
                    r.read_exact(&mut body).unwrap();
                    line.extend(body);
                }
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        for name in ["HEAD", "no-such-thing", "HEAD"] {
            stdin.write_all(format!("{name}\n").as_bytes()).unwrap();
            stdin.flush().unwrap();
            let answer = rx.recv_timeout(Duration::from_secs(10));
            let Ok(answer) = answer else {
                let _ = child.kill();
                let _ = child.wait();
                panic!("packd cat-file {mode}: no answer to {name:?} within 10 s while stdin stays open");
            };
            let text = String::from_utf8_lossy(&answer).into_owned();
            if name == "HEAD" {
                assert!(
                    text.starts_with(&format!("{head} commit {size}\n")),
                    "{mode}: {text}"
                );
            } else {
                assert_eq!(text, format!("{name} missing\n"));
            }
        }
        drop(stdin);
        let status = child.wait().unwrap();
        assert!(status.success());
    }
}

/// An empty line and whitespace-only lines in batch input, as git treats them.
#[test]
fn batch_empty_lines() {
    let sb = Sandbox::new();
    let repo = rich_repo(&sb);
    let input = b"\nHEAD\n   \n\nmain\n";
    repo.compare_cat_file(&[], &["--batch-check"], Some(input));
    repo.compare_cat_file(&[], &["--batch-check=%(objectname) %(rest)"], Some(input));
}

/// CR LF line ends in batch input (git strips the CR).
#[test]
fn batch_crlf_lines() {
    let sb = Sandbox::new();
    let repo = rich_repo(&sb);
    let id = repo.git_str(&["rev-parse", "main"]);
    let input = format!("HEAD\r\n{id}\r\nmain some rest\r\nnope\r\n");
    repo.compare_cat_file(&[], &["--batch-check"], Some(input.as_bytes()));
    repo.compare_cat_file(
        &[],
        &["--batch-check=%(objectname) [%(rest)]"],
        Some(input.as_bytes()),
    );
}

/// Names that are not UTF-8 are echoed back byte for byte in "missing" lines, and %(rest) is
/// copied byte for byte.
#[test]
fn batch_non_utf8_bytes() {
    let sb = Sandbox::new();
    let repo = rich_repo(&sb);
    let id = repo.git_str(&["rev-parse", "main"]);
    let mut input = b"caf\xe9\n\xff\xfe\xfd\n".to_vec();
    input.extend_from_slice(format!("{id} r\u{e9}sum\u{e9} ").as_bytes());
    input.extend_from_slice(b"\xe9\xff\n");
    repo.compare_cat_file(&[], &["--batch-check"], Some(&input));
    repo.compare_cat_file(&[], &["--batch-check=%(objectname) %(rest)"], Some(&input));
}

/// Trees with non-canonical modes (written with hash-object --literally): git -p prints them
/// the way ls-tree does, with canonical modes.
#[test]
fn tree_with_unusual_modes() {
    let sb = Sandbox::new();
    let repo = rich_repo(&sb);
    let blob = id_from_hex(&repo.git_str(&["rev-parse", "main:README"]));
    let tree = id_from_hex(&repo.git_str(&["rev-parse", "main:src"]));
    let mut raw = Vec::new();
    for (mode, name, id) in [
        ("100664", "group-writable", blob),
        ("100775", "group-exec", blob),
        ("100755", "exec", blob),
        ("40000", "dir", tree),
        ("120000", "link", blob),
        ("160000", "module", blob),
        ("100644", "plain", blob),
    ] {
        raw.extend_from_slice(format!("{mode} {name}\0").as_bytes());
        raw.extend_from_slice(&id);
    }
    // Entries must be sorted by name for git; sort them the way git does (dirs as "name/").
    let mut entries: Vec<(Vec<u8>, Vec<u8>)> = Vec::new();
    let mut rest = raw.as_slice();
    while !rest.is_empty() {
        let nul = rest.iter().position(|&b| b == 0).unwrap();
        let entry = rest[..nul + 21].to_vec();
        let header = String::from_utf8(rest[..nul].to_vec()).unwrap();
        let (mode, name) = header.split_once(' ').unwrap();
        let mut key = name.as_bytes().to_vec();
        if mode == "40000" {
            key.push(b'/');
        }
        entries.push((key, entry));
        rest = &rest[nul + 21..];
    }
    entries.sort();
    let sorted: Vec<u8> = entries.into_iter().flat_map(|(_, e)| e).collect();
    let id = String::from_utf8(repo.git_stdin(
        &["hash-object", "-t", "tree", "--literally", "-w", "--stdin"],
        &sorted,
    ))
    .unwrap()
    .trim()
    .to_string();
    for opt in ["-p", "-t", "-s"] {
        let git = repo.git_run(&["cat-file", opt, &id], None);
        git.assert_success();
        let packd = repo.packd(&["cat-file", opt, &id], None);
        packd.assert_no_crash().assert_success();
        assert_same_bytes(
            &format!("packd cat-file {opt} <tree with odd modes>"),
            &git.stdout,
            &packd.stdout,
        );
    }
    repo.compare_cat_file(&[], &["--batch"], Some(&lines_input(&[&id])));
}

/// More ref-name rules: remote HEAD symrefs, a tag and a branch of the same name, symbolic
/// refs to symbolic refs.
#[test]
fn ref_names_dwim_rules() {
    let sb = Sandbox::new();
    let repo = rich_repo(&sb);
    repo.git(&["update-ref", "refs/remotes/origin/main", "topic"]);
    repo.git(&[
        "symbolic-ref",
        "refs/remotes/origin/HEAD",
        "refs/remotes/origin/main",
    ]);
    repo.git(&["update-ref", "refs/heads/dup", "main"]);
    repo.git(&["update-ref", "refs/tags/dup", "topic"]);
    repo.git(&["symbolic-ref", "refs/heads/sym", "refs/heads/topic"]);
    repo.git(&["symbolic-ref", "refs/heads/sym2", "refs/heads/sym"]);
    repo.git(&["update-ref", "refs/other/thing", "main~1"]);
    let names = [
        "origin",
        "origin/main",
        "remotes/origin/main",
        "refs/remotes/origin/HEAD",
        "dup",
        "heads/dup",
        "tags/dup",
        "sym",
        "sym2",
        "refs/other/thing",
        "other/thing",
    ];
    for n in names {
        compare_one(&repo, &["-t", n], true);
        compare_one(&repo, &["-p", n], true);
    }
    repo.compare_cat_file(&[], &["--batch-check"], Some(&lines_input(&names)));
    // After pack-refs, the same.
    repo.git(&["pack-refs", "--all"]);
    repo.compare_cat_file(&[], &["--batch-check"], Some(&lines_input(&names)));
}
