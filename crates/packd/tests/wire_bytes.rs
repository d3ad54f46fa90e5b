//! The pkt-lines `packd upload-pack` writes, compared byte for byte with what git's own
//! `git upload-pack` writes for the same request (v0 and v2): shallow and unshallow lines,
//! acknowledgments, ready, wanted-refs, ls-refs, object-info and the advertisement. Some
//! clients (libgit2) accept only git's exact bytes, so "the same meaning" is not enough.
//!
//! Everything after the pack starts (its bytes depend on compression choices) is left out.

mod common;

use common::*;
use std::process::Command;

/// One pkt-line as read back: a payload, or a special packet.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Pkt {
    Data(Vec<u8>),
    Flush,
    Delim,
}

impl std::fmt::Display for Pkt {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Pkt::Data(d) => write!(f, "{:?}", String::from_utf8_lossy(d)),
            Pkt::Flush => write!(f, "0000"),
            Pkt::Delim => write!(f, "0001"),
        }
    }
}

/// The pkt-lines of `out` up to (not including) the first pack data: a side-band 1 packet,
/// or a bare `PACK` without side-band.
fn pkts_before_pack(out: &[u8]) -> Vec<Pkt> {
    let mut pkts = Vec::new();
    let mut rest = out;
    while rest.len() >= 4 && !rest.starts_with(b"PACK") {
        let len = usize::from_str_radix(std::str::from_utf8(&rest[..4]).unwrap(), 16)
            .unwrap_or_else(|_| panic!("not a pkt-line: {:?}", String::from_utf8_lossy(rest)));
        match len {
            0 => pkts.push(Pkt::Flush),
            1 => pkts.push(Pkt::Delim),
            _ => {
                let payload = &rest[4..len];
                if payload.first() == Some(&1) {
                    break;
                }
                pkts.push(Pkt::Data(payload.to_vec()));
            }
        }
        rest = &rest[len.max(4)..];
    }
    pkts
}

/// A request made of text pkt-lines; `"0000"` and `"0001"` stand for flush and delim.
fn request(lines: &[&str]) -> Vec<u8> {
    let mut out = Vec::new();
    for line in lines {
        match *line {
            "0000" | "0001" => out.extend_from_slice(line.as_bytes()),
            text => {
                out.extend_from_slice(format!("{:04x}", text.len() + 4).as_bytes());
                out.extend_from_slice(text.as_bytes());
            }
        }
    }
    out
}

/// The output of git's upload-pack and of packd's for `input`, with `GIT_PROTOCOL=protocol`
/// (empty: v0) and `args` (e.g. `--stateless-rpc`), git configured with `git_config`.
fn both(
    sb: &Sandbox,
    repo: &Repo,
    protocol: &str,
    args: &[&str],
    git_config: &[&str],
    input: &[u8],
) -> (Vec<u8>, Vec<u8>) {
    let mut git = sb.git_cmd(&repo.path);
    for c in git_config {
        git.args(["-c", c]);
    }
    git.arg("upload-pack").args(args).arg(".");
    let mut packd = Command::new(PACKD);
    apply_env(&mut packd, &sb.home);
    packd
        .current_dir(&repo.path)
        .arg("upload-pack")
        .args(args)
        .arg(".");
    if !protocol.is_empty() {
        git.env("GIT_PROTOCOL", protocol);
        packd.env("GIT_PROTOCOL", protocol);
    }
    let git = run_cmd(git, Some(input), GIT_TIMEOUT);
    git.assert_success();
    let packd = run_cmd(packd, Some(input), PACKD_TIMEOUT);
    packd.assert_success();
    (git.stdout, packd.stdout)
}

/// Asserts that both answers are the same pkt-lines before their packs, `skip` lines of the
/// start (the advertisement) left out.
fn assert_same_lines(what: &str, git: &[u8], packd: &[u8], skip: usize) {
    let git: Vec<Pkt> = pkts_before_pack(git).into_iter().skip(skip).collect();
    let packd: Vec<Pkt> = pkts_before_pack(packd).into_iter().skip(skip).collect();
    let show = |p: &[Pkt]| p.iter().map(|p| format!("  {p}\n")).collect::<String>();
    assert_eq!(
        git,
        packd,
        "{what}: packd's pkt-lines differ from git's\ngit:\n{}packd:\n{}",
        show(&git),
        show(&packd)
    );
}

/// How many pkt-lines the v0 advertisement of `repo` takes (its refs and the flush).
fn v0_advertisement_len(sb: &Sandbox, repo: &Repo) -> usize {
    let (git, _) = both(sb, repo, "", &["--advertise-refs"], &[], b"");
    pkts_before_pack(&git).len()
}

/// Six commits on main (c1..c6), a branch `side` from c5, an annotated tag on c3.
fn history(sb: &Sandbox) -> Repo {
    let repo = sb.init("src");
    run_script(
        &repo,
        r#"
        set -e
        for i in 1 2 3 4 5 6; do
            echo $i > f$i; git add f$i
            GIT_COMMITTER_DATE="$((1700000000 + i * 100)) +0000" git commit -q -m c$i
        done
        git tag -a v1 -m v1 HEAD~3
        git checkout -q -b side HEAD~1
        echo s > s; git add s; git commit -q -m side
        git checkout -q main
        "#,
    );
    repo
}

/// Runs `script` with sh in `repo`'s work tree.
fn run_script(repo: &Repo, script: &str) {
    let mut cmd = Command::new("sh");
    apply_env(&mut cmd, &repo.home);
    cmd.current_dir(&repo.path).arg("-c").arg(script);
    run_cmd(cmd, None, GIT_TIMEOUT).assert_success();
}

fn rev(repo: &Repo, name: &str) -> String {
    repo.git_str(&["rev-parse", name])
}

#[test]
fn v0_shallow_lines_are_gits_bytes() {
    let sb = Sandbox::new();
    let repo = history(&sb);
    let main = rev(&repo, "main");
    let skip = v0_advertisement_len(&sb, &repo);
    let want =
        format!("want {main} multi_ack_detailed side-band-64k ofs-delta shallow no-progress\n");
    let input = request(&[&want, "deepen 2\n", "0000", "done\n"]);
    let (git, packd) = both(&sb, &repo, "", &[], &[], &input);
    assert_same_lines("v0 deepen 2", &git, &packd, skip);
    // The line itself, spelled out: libgit2 takes no other form.
    let lines = pkts_before_pack(&packd);
    let shallow = format!("shallow {}", rev(&repo, "main~1"));
    assert!(
        lines.contains(&Pkt::Data(shallow.into_bytes())),
        "{lines:?}"
    );

    // A client at depth 2 deepening to 4: its old boundary is unshallowed.
    let boundary = rev(&repo, "main~1");
    let shallow_line = format!("shallow {boundary}\n");
    let input = request(&[&want, &shallow_line, "deepen 4\n", "0000", "done\n"]);
    let (git, packd) = both(&sb, &repo, "", &[], &[], &input);
    assert_same_lines("v0 unshallow", &git, &packd, skip);
    let unshallow = format!("unshallow {boundary}");
    assert!(pkts_before_pack(&packd).contains(&Pkt::Data(unshallow.into_bytes())));
}

#[test]
fn v2_shallow_info_is_gits_bytes() {
    let sb = Sandbox::new();
    let repo = history(&sb);
    let main = rev(&repo, "main");
    let want = format!("want {main}\n");
    let stateless = ["--stateless-rpc"];
    let input = request(&[
        "command=fetch\n",
        "0001",
        &want,
        "deepen 1\n",
        "no-progress\n",
        "done\n",
        "0000",
    ]);
    let (git, packd) = both(&sb, &repo, "version=2", &stateless, &[], &input);
    assert_same_lines("v2 deepen 1", &git, &packd, 0);
    let shallow = format!("shallow {main}");
    assert!(pkts_before_pack(&packd).contains(&Pkt::Data(shallow.into_bytes())));

    let boundary = rev(&repo, "main~2");
    let shallow_line = format!("shallow {boundary}\n");
    let input = request(&[
        "command=fetch\n",
        "0001",
        &want,
        &shallow_line,
        "deepen 5\n",
        "no-progress\n",
        "done\n",
        "0000",
    ]);
    let (git, packd) = both(&sb, &repo, "version=2", &stateless, &[], &input);
    assert_same_lines("v2 unshallow", &git, &packd, 0);
    let unshallow = format!("unshallow {boundary}");
    assert!(pkts_before_pack(&packd).contains(&Pkt::Data(unshallow.into_bytes())));
}

#[test]
fn v0_acknowledgments_are_gits_bytes() {
    let sb = Sandbox::new();
    let repo = history(&sb);
    let main = rev(&repo, "main");
    let skip = v0_advertisement_len(&sb, &repo);
    let haves = [
        format!("have {}\n", rev(&repo, "main~3")),
        format!("have {}\n", "1234567890".repeat(4)),
        format!("have {}\n", rev(&repo, "main~4")),
    ];
    for caps in [
        "multi_ack_detailed",
        "multi_ack",
        "multi_ack_detailed no-done",
    ] {
        let want = format!("want {main} {caps} side-band-64k ofs-delta no-progress\n");
        let mut lines: Vec<&str> = vec![&want, "0000"];
        lines.extend(haves.iter().map(String::as_str));
        lines.extend(["0000", "done\n"]);
        let (git, packd) = both(&sb, &repo, "", &[], &[], &request(&lines));
        assert_same_lines(caps, &git, &packd, skip);
    }
    // Nothing in common: NAK, then (after done) NAK again.
    let want = format!("want {main} multi_ack_detailed side-band-64k no-progress\n");
    let none = format!("have {}\n", "1234567890".repeat(4));
    let input = request(&[&want, "0000", &none, "0000", "done\n"]);
    let (git, packd) = both(&sb, &repo, "", &[], &[], &input);
    assert_same_lines("no common commit", &git, &packd, skip);
}

#[test]
fn v2_acknowledgments_and_wanted_refs_are_gits_bytes() {
    let sb = Sandbox::new();
    let repo = history(&sb);
    let main = rev(&repo, "main");
    let want = format!("want {main}\n");
    let stateless = ["--stateless-rpc"];
    let common = format!("have {}\n", rev(&repo, "main~3"));
    let unknown = format!("have {}\n", "1234567890".repeat(4));
    for haves in [vec![&common, &unknown], vec![&unknown]] {
        let mut lines: Vec<&str> = vec!["command=fetch\n", "0001", &want];
        lines.extend(haves.iter().map(|h| h.as_str()));
        lines.extend(["no-progress\n", "0000"]);
        let (git, packd) = both(&sb, &repo, "version=2", &stateless, &[], &request(&lines));
        assert_same_lines("v2 acknowledgments", &git, &packd, 0);
    }
    let input = request(&[
        "command=fetch\n",
        "0001",
        "want-ref refs/heads/side\n",
        "no-progress\n",
        "done\n",
        "0000",
    ]);
    let allow = ["uploadpack.allowRefInWant=true"];
    let (git, packd) = both(&sb, &repo, "version=2", &stateless, &allow, &input);
    assert_same_lines("v2 wanted-refs", &git, &packd, 0);
}

#[test]
fn v2_ls_refs_is_gits_bytes() {
    let sb = Sandbox::new();
    let repo = history(&sb);
    let stateless = ["--stateless-rpc"];
    for args in [
        vec![
            "peel\n",
            "symrefs\n",
            "ref-prefix refs/\n",
            "ref-prefix HEAD\n",
        ],
        vec!["unborn\n", "symrefs\n"],
        vec!["ref-prefix refs/tags/\n"],
    ] {
        let mut lines = vec!["command=ls-refs\n", "object-format=sha1\n", "0001"];
        lines.extend(args);
        lines.push("0000");
        let (git, packd) = both(&sb, &repo, "version=2", &stateless, &[], &request(&lines));
        assert_same_lines("ls-refs", &git, &packd, 0);
    }
}

#[test]
fn v2_advertisement_has_gits_commands() {
    let sb = Sandbox::new();
    let repo = history(&sb);
    let args = ["--advertise-refs"];
    let (git, packd) = both(&sb, &repo, "version=2", &args, &[], b"");
    // The command names (what a client decides on); agent and fetch's features are packd's.
    let names = |out: &[u8]| -> Vec<String> {
        pkts_before_pack(out)
            .iter()
            .filter_map(|p| match p {
                Pkt::Data(d) => Some(String::from_utf8_lossy(d).trim_end().to_string()),
                _ => None,
            })
            .map(|l| l.split('=').next().unwrap().to_string())
            .filter(|name| name != "agent")
            .collect()
    };
    assert_eq!(names(&git), names(&packd));
    assert!(names(&packd).contains(&"object-info".to_string()));
}

#[test]
fn v2_object_info_answers_as_git() {
    let sb = Sandbox::new();
    let repo = history(&sb);
    let stateless = ["--stateless-rpc"];
    let ids = [
        rev(&repo, "main"),
        rev(&repo, "main:f1"),
        rev(&repo, "main^{tree}"),
        rev(&repo, "v1"),
        // Not in the repository: an empty size, as git.
        "1234567890".repeat(4),
        rev(&repo, "main"),
    ];
    let oids: Vec<String> = ids.iter().map(|id| format!("oid {id}\n")).collect();
    let mut lines = vec!["command=object-info\n", "0001", "size\n"];
    lines.extend(oids.iter().map(String::as_str));
    lines.push("0000");
    let (git, packd) = both(&sb, &repo, "version=2", &stateless, &[], &request(&lines));
    assert_same_lines("object-info size", &git, &packd, 0);
    let blob = format!("{} 2", rev(&repo, "main:f1"));
    assert!(pkts_before_pack(&packd).contains(&Pkt::Data(blob.into_bytes())));

    // No id: a lone flush.
    let input = request(&["command=object-info\n", "0001", "size\n", "0000"]);
    let (git, packd) = both(&sb, &repo, "version=2", &stateless, &[], &input);
    assert_same_lines("object-info without ids", &git, &packd, 0);

    // A line git does not know: git's words, as an ERR packet.
    let input = request(&["command=object-info\n", "0001", "type\n", "0000"]);
    let mut packd = Command::new(PACKD);
    apply_env(&mut packd, &sb.home);
    packd
        .current_dir(&repo.path)
        .env("GIT_PROTOCOL", "version=2")
        .args(["upload-pack", "--stateless-rpc", "."]);
    let run = run_cmd(packd, Some(&input), PACKD_TIMEOUT);
    run.assert_no_crash();
    assert!(
        run.out()
            .contains("ERR object-info: unexpected line: 'type'"),
        "{}",
        run.out()
    );
}

/// `both` for a request both servers refuse: their outputs, whatever their exit codes.
fn both_refusing(
    sb: &Sandbox,
    repo: &Repo,
    protocol: &str,
    args: &[&str],
    input: &[u8],
) -> (Vec<u8>, Vec<u8>) {
    let mut git = sb.git_cmd(&repo.path);
    git.arg("upload-pack").args(args).arg(".");
    let mut packd = Command::new(PACKD);
    apply_env(&mut packd, &sb.home);
    packd
        .current_dir(&repo.path)
        .arg("upload-pack")
        .args(args)
        .arg(".");
    if !protocol.is_empty() {
        git.env("GIT_PROTOCOL", protocol);
        packd.env("GIT_PROTOCOL", protocol);
    }
    let git = run_cmd(git, Some(input), GIT_TIMEOUT);
    let packd = run_cmd(packd, Some(input), PACKD_TIMEOUT);
    packd.assert_no_crash();
    assert_eq!(git.success(), packd.success());
    (git.stdout, packd.stdout)
}

#[test]
fn err_packets_are_gits_bytes() {
    let sb = Sandbox::new();
    let repo = history(&sb);
    let unknown = "1234567890".repeat(4);
    let skip = v0_advertisement_len(&sb, &repo);
    let want = format!("want {unknown} multi_ack_detailed side-band-64k\n");
    let input = request(&[&want, "0000", "done\n"]);
    let (git, packd) = both_refusing(&sb, &repo, "", &[], &input);
    assert_same_lines("v0 not our ref", &git, &packd, skip);
    let err = format!("ERR upload-pack: not our ref {unknown}");
    assert!(pkts_before_pack(&packd).contains(&Pkt::Data(err.into_bytes())));

    let want = format!("want {unknown}\n");
    let input = request(&["command=fetch\n", "0001", &want, "done\n", "0000"]);
    let (git, packd) = both_refusing(&sb, &repo, "version=2", &["--stateless-rpc"], &input);
    assert_same_lines("v2 not our ref", &git, &packd, 0);
}

/// Where packd departs from git's server on purpose: with both `want-ref` and `deepen`, git
/// 2.39's upload-pack sends `wanted-refs` before `shallow-info`, which git's own client refuses
/// ("expected 'packfile', received 'shallow-info'": `git clone --depth 1` from a git server
/// with uploadpack.allowRefInWant fails). packd sends them in the order of protocol-v2.txt,
/// which git's client reads, and git's client does use `want-ref` against packd.
#[test]
fn shallow_info_comes_before_wanted_refs_as_gits_client_reads_them() {
    let sb = Sandbox::new();
    let repo = history(&sb);
    let input = request(&[
        "command=fetch\n",
        "0001",
        "want-ref refs/heads/side\n",
        "deepen 1\n",
        "no-progress\n",
        "done\n",
        "0000",
    ]);
    let mut cmd = Command::new(PACKD);
    apply_env(&mut cmd, &sb.home);
    cmd.current_dir(&repo.path)
        .env("GIT_PROTOCOL", "version=2")
        .args(["upload-pack", "--stateless-rpc", "."]);
    let run = run_cmd(cmd, Some(&input), PACKD_TIMEOUT);
    run.assert_success();
    let packd = run.stdout;
    let sections: Vec<String> = pkts_before_pack(&packd)
        .iter()
        .filter_map(|p| match p {
            Pkt::Data(d) if !d.starts_with(b"shallow ") && !d.contains(&b' ') => {
                Some(String::from_utf8_lossy(d).trim_end().to_string())
            }
            _ => None,
        })
        .collect();
    assert_eq!(sections, ["shallow-info", "wanted-refs", "packfile"]);

    // git's client, with want-ref and a depth, takes packd's answer.
    let url = format!("file://{}", repo.path.display());
    let up = format!("--upload-pack={PACKD} upload-pack");
    let clone = sb.git_run_in(
        sb.path(),
        &[
            "-c",
            "protocol.version=2",
            "clone",
            "-q",
            "--depth",
            "1",
            &up,
            &url,
            "shallow",
        ],
        None,
    );
    clone.assert_success();
    let shallow = std::fs::read_to_string(sb.path().join("shallow/.git/shallow")).unwrap();
    assert_eq!(shallow.trim(), rev(&repo, "main"));
}
