//! `packd upload-pack` against the real git client: ls-remote, clone, fetch, shallow and
//! partial clones over protocol v0 and v2 (`--upload-pack`), the progress lines git shows, and
//! bad input.

mod common;

use common::*;
use std::path::Path;
use std::process::Command;

/// A repository with history across several days, two branches, an annotated and a
/// lightweight tag, and a few directories.
fn history(sb: &Sandbox) -> Repo {
    let repo = sb.init("src");
    let script = r#"
        set -e
        for i in $(seq 1 12); do
            mkdir -p d$((i % 3))
            seq $i 300 > d$((i % 3))/f$i.txt
            echo $i >> common.txt
            git add -A
            GIT_COMMITTER_DATE="$((1700000000 + i * 86400)) +0000" git commit -q -m "commit $i"
        done
        git tag -a v1 -m "version one" HEAD~6
        git tag light HEAD~3
        git checkout -q -b side HEAD~4
        echo side > side.txt
        git add side.txt
        GIT_COMMITTER_DATE="1701500000 +0000" git commit -q -m side
        git checkout -q main
    "#;
    run_script(&repo, script);
    repo
}

/// The `--upload-pack` value that runs packd.
fn upload_pack_cmd() -> String {
    format!("{PACKD} upload-pack")
}

/// git with `protocol.version=V` in `cwd`.
fn git_v(sb: &Sandbox, cwd: &Path, version: u8, args: &[&str]) -> Run {
    git_v_with(sb, cwd, version, args, None)
}

/// [`git_v`] with the pack writer's debug lines of the packd it runs on its stderr (which say
/// how each pack went out).
fn git_v_logged(sb: &Sandbox, cwd: &Path, version: u8, args: &[&str]) -> Run {
    git_v_with(sb, cwd, version, args, Some("packd_pack=debug"))
}

/// A quiet `git clone --bare --single-branch --no-tags` of `repo` (its HEAD's branch alone)
/// into the sandbox's `name`, through `packd upload-pack`, over protocol `version`. With `log`,
/// packd logs that (`PACKD_LOG`) on git's stderr; without, packd's own stderr goes to the
/// sandbox's `name.packd-stderr` (see [`packd_stderr`]), so that git's holds only what git
/// says (and what came to it on the side-band).
fn clone_one_branch(sb: &Sandbox, repo: &Repo, version: u8, name: &str, log: Option<&str>) -> Run {
    let url = format!("file://{}", repo.path.to_str().unwrap());
    let up = match log {
        Some(_) => format!("--upload-pack={}", upload_pack_cmd()),
        None => format!(
            "--upload-pack={} 2>>{}",
            upload_pack_cmd(),
            sb.path().join(format!("{name}.packd-stderr")).display()
        ),
    };
    let args = [
        "clone",
        "-q",
        "--bare",
        "--single-branch",
        "--no-tags",
        &up,
        &url,
        name,
    ];
    git_v_with(sb, sb.path(), version, &args, log)
}

/// What packd wrote to its stderr during [`clone_one_branch`]`(.., name, None)`.
fn packd_stderr(sb: &Sandbox, name: &str) -> String {
    std::fs::read_to_string(sb.path().join(format!("{name}.packd-stderr"))).unwrap_or_default()
}

/// `git -c protocol.version=VERSION ARGS` in `cwd`, with `PACKD_LOG` set to `log` if given.
fn git_v_with(sb: &Sandbox, cwd: &Path, version: u8, args: &[&str], log: Option<&str>) -> Run {
    let mut cmd = sb.git_cmd(cwd);
    if let Some(log) = log {
        cmd.env("PACKD_LOG", log);
    }
    cmd.arg("-c").arg(format!("protocol.version={version}"));
    cmd.args(args);
    run_cmd(cmd, None, GIT_TIMEOUT)
}

/// Commits a file `name` of `len` random bytes (from `seed`) on the current branch of `repo`.
fn commit_random_file(repo: &Repo, name: &str, seed: u64, len: usize) {
    let mut rng = Rng::new(seed);
    std::fs::write(repo.path.join(name), rng.bytes(len)).unwrap();
    repo.git(&["add", name]);
    repo.git(&["commit", "-q", "-m", name]);
}

/// `packd upload-pack ARGS` with GIT_PROTOCOL and stdin.
fn packd_upload_pack(sb: &Sandbox, protocol: Option<&str>, args: &[&str], stdin: &[u8]) -> Run {
    upload_pack(sb, false, protocol, args, stdin)
}

/// `upload-pack ARGS` with `stdin` and `GIT_PROTOCOL` set to `protocol`: git's
/// (`git upload-pack`) or packd's.
fn upload_pack(
    sb: &Sandbox,
    git: bool,
    protocol: Option<&str>,
    args: &[&str],
    stdin: &[u8],
) -> Run {
    let (mut cmd, timeout) = upload_pack_command(sb, git);
    if let Some(p) = protocol {
        cmd.env("GIT_PROTOCOL", p);
    }
    cmd.args(args);
    run_cmd(cmd, Some(stdin), timeout)
}

/// The `upload-pack` command (git's or packd's) in the sandbox, with how long it may take.
fn upload_pack_command(sb: &Sandbox, git: bool) -> (Command, std::time::Duration) {
    let mut cmd = Command::new(if git { "git" } else { PACKD });
    apply_env(&mut cmd, &sb.home);
    cmd.current_dir(sb.path()).arg("upload-pack");
    (cmd, if git { GIT_TIMEOUT } else { PACKD_TIMEOUT })
}

/// A v0 request wanting `id` and nothing had: the want, a flush, `done`.
fn want_request(id: &str) -> Vec<u8> {
    let mut input = pkt(&format!(
        "want {id} multi_ack_detailed side-band-64k ofs-delta\n"
    ));
    input.extend_from_slice(b"0000");
    input.extend(pkt("done\n"));
    input
}

fn pkt(text: &str) -> Vec<u8> {
    let mut v = format!("{:04x}", text.len() + 4).into_bytes();
    v.extend_from_slice(text.as_bytes());
    v
}

fn refs_of(sb: &Sandbox, dir: &Path) -> String {
    String::from_utf8(sb.git_in(dir, &["for-each-ref", "--format=%(objectname) %(refname)"]))
        .unwrap()
}

fn objects_of(sb: &Sandbox, dir: &Path) -> String {
    let out = sb.git_in(
        dir,
        &[
            "cat-file",
            "--batch-all-objects",
            "--batch-check=%(objectname) %(objecttype)",
        ],
    );
    String::from_utf8(out).unwrap()
}

fn fsck(sb: &Sandbox, dir: &Path) {
    let run = sb.git_run_in(dir, &["fsck", "--strict", "--no-dangling"], None);
    run.assert_success();
    assert!(
        !run.err().contains("error") && !run.err().contains("missing"),
        "fsck complained in {}: {}",
        dir.display(),
        run.err()
    );
}

#[test]
fn ls_remote_equals_gits() {
    let sb = Sandbox::new();
    let repo = history(&sb);
    // A symbolic ref under refs/ too: protocol v2 names its target, as it does HEAD's; and one
    // that points at another symbolic ref, whose target is where the chain ends.
    repo.git(&[
        "symbolic-ref",
        "refs/remotes/origin/HEAD",
        "refs/heads/main",
    ]);
    repo.git(&[
        "symbolic-ref",
        "refs/remotes/mirror/HEAD",
        "refs/remotes/origin/HEAD",
    ]);
    let src = repo.path.to_str().unwrap();
    let up = upload_pack_cmd();
    for version in [0u8, 1, 2] {
        for symref in [false, true] {
            let mut args = vec!["ls-remote"];
            if symref {
                args.push("--symref");
            }
            let theirs = git_v(&sb, sb.path(), version, &[&args[..], &[src]].concat());
            theirs.assert_success();
            let up_arg = format!("--upload-pack={up}");
            let ours = git_v(
                &sb,
                sb.path(),
                version,
                &[&args[..], &[up_arg.as_str(), src]].concat(),
            );
            ours.assert_success();
            assert!(theirs.out().contains("refs/tags/v1^{}"));
            if symref {
                assert!(
                    ours.out().contains("ref: refs/heads/main\tHEAD"),
                    "{}",
                    ours.out()
                );
                if version == 2 {
                    assert!(
                        ours.out()
                            .contains("ref: refs/heads/main\trefs/remotes/origin/HEAD"),
                        "{}",
                        ours.out()
                    );
                    assert!(
                        ours.out()
                            .contains("ref: refs/heads/main\trefs/remotes/mirror/HEAD"),
                        "{}",
                        ours.out()
                    );
                }
            }
            assert_same_bytes(
                &format!("ls-remote v{version} symref={symref}"),
                &theirs.stdout,
                &ours.stdout,
            );
        }
    }
}

/// A process that only lists refs (`git ls-remote` over ssh) does not read the bitmap index;
/// one that counts objects does. Seen through a bitmap that cannot be used: reading it warns.
#[test]
fn listing_refs_does_not_read_the_bitmap() {
    let sb = Sandbox::new();
    let repo = history(&sb);
    repo.git(&["repack", "-adbq"]);
    let bitmap = repo.packs()[0].with_extension("bitmap");
    std::fs::remove_file(&bitmap).expect("repack -adb wrote a bitmap");
    std::fs::create_dir(&bitmap).unwrap();
    let url = format!("file://{}", repo.path.to_str().unwrap());
    let up = format!("--upload-pack={}", upload_pack_cmd());
    for version in [0u8, 2] {
        let listed = git_v(&sb, sb.path(), version, &["ls-remote", &up, &url]);
        listed.assert_success();
        assert!(
            listed.out().contains("refs/tags/v1"),
            "v{version}: {}",
            listed.out()
        );
        assert!(
            !listed.err().contains("bitmap"),
            "v{version}: listing refs read the bitmap: {}",
            listed.err()
        );
        let dir = format!("clone-{version}");
        let cloned = git_v(&sb, sb.path(), version, &["clone", "-q", &up, &url, &dir]);
        cloned.assert_success();
        assert!(
            cloned.err().contains("ignoring the bitmap"),
            "v{version}: the clone did not count with the bitmap: {}",
            cloned.err()
        );
        fsck(&sb, &sb.path().join(&dir));
    }
}

#[test]
fn an_empty_repository_is_advertised_and_cloned() {
    let sb = Sandbox::new();
    let empty = sb.init_bare("empty.git");
    let up = format!("--upload-pack={}", upload_pack_cmd());
    let src = empty.path.to_str().unwrap();
    for version in [0u8, 2] {
        let ours = git_v(&sb, sb.path(), version, &["ls-remote", &up, src]);
        ours.assert_success();
        assert_eq!(ours.out(), "");
        let clone = format!("clone{version}");
        let run = git_v(&sb, sb.path(), version, &["clone", &up, src, &clone]);
        run.assert_success();
        assert!(run.err().contains("empty repository"), "{}", run.err());
    }
    // The raw v0 advertisement names no ref but still carries the capabilities.
    let adv = packd_upload_pack(&sb, None, &["--advertise-refs", src], b"");
    adv.assert_success();
    let text = adv.out();
    assert!(
        text.contains("0000000000000000000000000000000000000000 capabilities^{}\0"),
        "{text:?}"
    );
    assert!(text.contains("side-band-64k") && text.contains("agent=packd/"));
    assert!(text.ends_with("0000"));
}

#[test]
fn clones_equal_plain_git_clones_and_fetch_increments() {
    let sb = Sandbox::new();
    let repo = history(&sb);
    let src = repo.path.to_str().unwrap();
    let up = format!("--upload-pack={}", upload_pack_cmd());
    git_v(
        &sb,
        sb.path(),
        2,
        &["clone", "-q", "--no-local", "--mirror", src, "plain"],
    )
    .assert_success();
    let plain = sb.path().join("plain");
    for version in [0u8, 1, 2] {
        let name = format!("mirror{version}");
        let run = git_v(
            &sb,
            sb.path(),
            version,
            &["clone", "--no-local", "--mirror", &up, src, &name],
        );
        run.assert_success();
        let dir = sb.path().join(&name);
        fsck(&sb, &dir);
        assert_eq!(
            refs_of(&sb, &dir),
            refs_of(&sb, &plain),
            "refs after a v{version} clone"
        );
        assert_eq!(
            objects_of(&sb, &dir),
            objects_of(&sb, &plain),
            "objects after a v{version} clone"
        );

        // A work-tree clone, then new commits and a fetch.
        let work = format!("work{version}");
        let url = format!("file://{src}");
        git_v(&sb, sb.path(), version, &["clone", "-q", &up, &url, &work]).assert_success();
    }
    repo.git(&["commit", "-q", "--allow-empty", "-m", "new one"]);
    std::fs::write(repo.path.join("new.txt"), "new file\n").unwrap();
    repo.git(&["add", "new.txt"]);
    repo.git(&["commit", "-q", "-m", "new two"]);
    repo.git(&["tag", "-a", "v2", "-m", "version two"]);
    let head = repo.git_str(&["rev-parse", "HEAD"]);
    for version in [0u8, 1, 2] {
        let dir = sb.path().join(format!("work{version}"));
        let run = git_v(&sb, &dir, version, &["fetch", &up, "origin"]);
        run.assert_success();
        assert_eq!(
            String::from_utf8(sb.git_in(&dir, &["rev-parse", "origin/main"]))
                .unwrap()
                .trim(),
            head,
            "v{version} fetch"
        );
        let tags = String::from_utf8(sb.git_in(&dir, &["tag"])).unwrap();
        assert!(
            tags.contains("v2"),
            "v{version}: include-tag/auto-follow: {tags}"
        );
        fsck(&sb, &dir);
    }
}

/// A fetch of a few objects out of a large pack, by a process that has sorted nothing (a
/// process per request, as over ssh), finds each entry one by one rather than sorting every
/// offset of the pack: the client ends up with the objects and refs git's own upload-pack
/// gives it, some of them received as deltas (the files shrink, so git's repack makes the
/// newer versions deltas against the older). Its sizes follow `Pack::few_enough_one_by_one`: the
/// fetch (the last 2 of 1,200 commits) must be at most a 256th of the pack's objects. Each
/// entry is found through the pack's rank index, or where the pack has a `.rev` (git's `repack`
/// writes one from git 2.41 on), through the order it gives, and no rank index is built.
#[test]
fn a_small_fetch_by_a_fresh_process_finds_entries_one_by_one() {
    let sb = Sandbox::new();
    let repo = sb.init_bare("src.git");
    let mut fi = FastImport::new();
    let mut last: Option<u32> = None;
    for i in 0..1200u32 {
        let body: String = (0..1300 - i).map(|j| format!("{j}\n")).collect();
        let from = last.map(|m| format!(":{m}"));
        let m = fi.commit(
            "refs/heads/main",
            from.as_deref(),
            &format!("commit {i}\n"),
            &[inline(&format!("d{}/f{}.txt", i % 5, i % 7), body)],
        );
        last = Some(m);
        if i == 1197 {
            fi.reset("refs/heads/old", &format!(":{m}"));
        }
    }
    repo.fast_import(&fi.finish());
    // No `.rev` (git 2.41 and later write one unless told not to): the rank index is built.
    repo.git(&["-c", "pack.writeReverseIndex=false", "repack", "-adbfq"]);
    let src = repo.path.to_str().unwrap();
    let up = format!("--upload-pack={}", upload_pack_cmd());
    let fetch_old_then_main = |name: &str, packd: bool| -> String {
        git_v(
            &sb,
            sb.path(),
            2,
            &[
                "clone",
                "-q",
                "--bare",
                "--no-local",
                "--single-branch",
                "--branch",
                "old",
                src,
                name,
            ],
        )
        .assert_success();
        let dir = sb.path().join(name);
        // Objects stored as deltas, in the clone's packs.
        let deltas = || {
            let bases = sb.git_in(
                &dir,
                &[
                    "cat-file",
                    "--batch-all-objects",
                    "--batch-check=%(deltabase)",
                ],
            );
            let zero = "0".repeat(40);
            String::from_utf8(bases)
                .unwrap()
                .lines()
                .filter(|base| *base != zero)
                .count()
        };
        let before = deltas();
        // The fetched objects stay a pack (not loose), so that its deltas can be seen.
        let mut args = vec!["-c", "fetch.unpackLimit=1", "fetch", "-q"];
        if packd {
            args.push(&up);
        }
        args.extend(["origin", "main:refs/heads/main"]);
        let log = "packd_pack=debug,packd_reach=debug,packd_odb::pack=debug";
        let run = git_v_with(&sb, &dir, 2, &args, Some(log));
        run.assert_success();
        fsck(&sb, &dir);
        if packd {
            // The same objects and refs as the fetch from git made (run first).
            assert_eq!(
                objects_of(&sb, &dir),
                objects_of(&sb, &sb.path().join("by-git"))
            );
            assert_eq!(refs_of(&sb, &dir), refs_of(&sb, &sb.path().join("by-git")));
        }
        assert!(deltas() > before, "{name}: no object came as a delta");
        run.err()
    };
    fetch_old_then_main("by-git", false);
    let stderr = fetch_old_then_main("by-packd", true);
    assert!(stderr.contains("found entry by entry"), "{stderr}");
    assert!(stderr.contains("rank index built"), "{stderr}");
    assert!(!stderr.contains("taken from its .rev"), "{stderr}");
    // With a `.rev`.
    let pack = repo.packs()[0].clone();
    sb.git_run_in(
        &repo.path,
        &["index-pack", "--rev-index", pack.to_str().unwrap()],
        None,
    )
    .assert_success();
    assert!(pack.with_extension("rev").exists());
    let stderr = fetch_old_then_main("by-packd-rev", true);
    assert!(stderr.contains("taken from its .rev"), "{stderr}");
    assert!(stderr.contains("found entry by entry"), "{stderr}");
    assert!(!stderr.contains("rank index built"), "{stderr}");
}

#[test]
fn shallow_clones_and_deepening() {
    let sb = Sandbox::new();
    let repo = history(&sb);
    let src = repo.path.to_str().unwrap();
    let url = format!("file://{src}");
    let up = format!("--upload-pack={}", upload_pack_cmd());
    for version in [0u8, 2] {
        let d1 = format!("depth1-{version}");
        git_v(
            &sb,
            sb.path(),
            version,
            &["clone", "-q", "--depth=1", &up, &url, &d1],
        )
        .assert_success();
        let dir = sb.path().join(&d1);
        let count = sb.git_in(&dir, &["rev-list", "--count", "HEAD"]);
        assert_eq!(
            String::from_utf8(count).unwrap().trim(),
            "1",
            "v{version} --depth=1"
        );
        let shallow = std::fs::read_to_string(dir.join(".git/shallow")).unwrap();
        assert_eq!(shallow.trim(), repo.git_str(&["rev-parse", "HEAD"]));
        fsck(&sb, &dir);

        // Commits 7..12 are newer than this date (one a day from 1700000000 + 86400).
        let since = format!("depth-since-{version}");
        git_v(
            &sb,
            sb.path(),
            version,
            &[
                "clone",
                "-q",
                "--shallow-since=1700500000",
                &up,
                &url,
                &since,
            ],
        )
        .assert_success();
        let dir_since = sb.path().join(&since);
        git_v(
            &sb,
            sb.path(),
            version,
            &[
                "clone",
                "-q",
                "--shallow-since=1700500000",
                &url,
                "plain-since",
            ],
        );
        let ours = sb.git_in(&dir_since, &["rev-list", "HEAD"]);
        let theirs = sb.git_in(&sb.path().join("plain-since"), &["rev-list", "HEAD"]);
        assert_eq!(ours, theirs, "v{version} --shallow-since");
        let _ = std::fs::remove_dir_all(sb.path().join("plain-since"));
        fsck(&sb, &dir_since);
    }
}

/// Runs the shell `script` in `repo`'s work tree, with the sandbox's git settings.
fn run_script(repo: &Repo, script: &str) {
    let mut cmd = Command::new("sh");
    apply_env(&mut cmd, &repo.home);
    cmd.current_dir(&repo.path).arg("-c").arg(script);
    run_cmd(cmd, None, GIT_TIMEOUT).assert_success();
}

/// Clones `url`'s default branch alone, without tags, with the options `cut` (split at
/// spaces) over protocol `version`: once from packd and once from git's upload-pack. Returns
/// the two clones' directories (packd's first), named after `prefix`, the version and `cut`.
fn clone_both_ways(
    sb: &Sandbox,
    url: &str,
    version: u8,
    cut: &str,
    prefix: &str,
) -> (std::path::PathBuf, std::path::PathBuf) {
    let up = format!("--upload-pack={}", upload_pack_cmd());
    let name = |who: &str| format!("{prefix}{who}-{version}{}", cut.replace(' ', ""));
    let (ours, theirs) = (name("ours"), name("theirs"));
    let mut clone = vec!["clone", "-q", "--single-branch", "--no-tags"];
    clone.extend(cut.split(' '));
    let mut args = clone.clone();
    args.extend([up.as_str(), url, ours.as_str()]);
    git_v(sb, sb.path(), version, &args).assert_success();
    let mut args = clone;
    args.extend([url, theirs.as_str()]);
    git_v(sb, sb.path(), version, &args).assert_success();
    (sb.path().join(ours), sb.path().join(theirs))
}

/// A commit newer than the cut whose only way from the tip is through a new shallow commit:
/// `s` (new) merges `q` (old) and `p1` (new), both on the old root `o`. A `--shallow-since`
/// between the dates, or a `--shallow-exclude` of `q`, keeps `s` and `p1` and makes both
/// shallow; `s` then has no parents for the client, so git sends `s` alone, and so must packd
/// (it sent `p1` too, a dangling commit in the clone: 305 objects more than git's for a
/// `--shallow-since=2024-01-01` clone of git/git's master). The same when a client with `s`
/// shallow deepens by date. Both options together cut both sides: `s` alone is kept.
#[test]
fn a_kept_commit_behind_a_new_shallow_commit_is_not_sent() {
    let sb = Sandbox::new();
    let repo = sb.init("src");
    let script = r#"
        set -e
        echo o > o; git add o
        GIT_COMMITTER_DATE="1600000000 +0000" git commit -q -m o
        git checkout -q -b p1
        echo p > p; git add p
        GIT_COMMITTER_DATE="1710000000 +0000" git commit -q -m p1
        git tag p1
        git checkout -q main
        echo q > q; git add q
        GIT_COMMITTER_DATE="1650000000 +0000" git commit -q -m q
        git tag q
        GIT_COMMITTER_DATE="1720000000 +0000" git merge -q --no-ff -m s p1
        git branch -q -D p1
    "#;
    run_script(&repo, script);
    let url = format!("file://{}", repo.path.to_str().unwrap());
    let up = format!("--upload-pack={}", upload_pack_cmd());
    let s = repo.git_str(&["rev-parse", "HEAD"]);
    let p1 = repo.git_str(&["rev-parse", "HEAD^2"]);
    let shallow = |dir: &Path| std::fs::read_to_string(dir.join(".git/shallow")).unwrap();
    // Asserts that `ours` (served by packd) and `theirs` (by git) hold the same objects and
    // shallow commits, `s` and its tree and blobs; returns the shallow commits.
    let same = |ours: &Path, theirs: &Path, what: &str| {
        assert_eq!(shallow(ours), shallow(theirs), "{what}: shallow commits");
        let objects = objects_of(&sb, ours);
        assert_eq!(objects, objects_of(&sb, theirs), "{what}: objects");
        assert!(!objects.contains(&p1), "{what}: p1 sent");
        assert_eq!(
            objects.lines().count(),
            5,
            "{what}: s, its tree, three blobs"
        );
        fsck(&sb, ours);
        shallow(ours)
    };
    for version in [0u8, 2] {
        for (cut, p1_shallow) in [
            ("--shallow-since=1700000000", true),
            ("--shallow-exclude=q", true),
            ("--shallow-since=1700000000 --shallow-exclude=p1", false),
            ("--depth=1", false),
        ] {
            let (ours, theirs) = clone_both_ways(&sb, &url, version, cut, "");
            let what = format!("v{version} {cut}");
            let shallow = same(&ours, &theirs, &what);
            assert!(shallow.contains(&s), "{what}: s is shallow");
            assert_eq!(shallow.contains(&p1), p1_shallow, "{what}: p1 shallow");
            if cut == "--depth=1" {
                // `s` shallow on the client and within the new cut, still shallow.
                let deepen = ["fetch", "-q", "--shallow-since=1700000000"];
                let mut args = deepen.to_vec();
                args.push(up.as_str());
                git_v(&sb, &ours, version, &args).assert_success();
                git_v(&sb, &theirs, version, &deepen).assert_success();
                same(&ours, &theirs, &format!("{what} then --shallow-since"));
            }
        }
    }
}

/// Dates going back in history: `t` merges `d` (new) and `o` (old), both on the root `c`,
/// which is newer than `o`. git's rev-list `--max-age` alone skips `o` and still reaches `c`
/// through `d`, so only `t` is shallow; with `--not` (a `--shallow-exclude`) it limits its
/// walk, `o` makes `c` uninteresting too, and `d` becomes shallow as well. packd kept `c` in
/// both cases, so its answer to the second lacked `shallow d`.
#[test]
fn an_old_commit_cuts_what_it_reaches_when_refs_are_excluded() {
    let sb = Sandbox::new();
    let repo = sb.init("src");
    let script = r#"
        set -e
        echo c > c; git add c
        GIT_COMMITTER_DATE="1700000000 +0000" git commit -q -m c
        git checkout -q -b d
        echo d > d; git add d
        GIT_COMMITTER_DATE="1710000000 +0000" git commit -q -m d
        git checkout -q main
        echo o > o; git add o
        GIT_COMMITTER_DATE="1600000000 +0000" git commit -q -m o
        GIT_COMMITTER_DATE="1720000000 +0000" git merge -q --no-ff -m t d
        git branch -q -D d
        git checkout -q --orphan other
        git rm -rqf .
        echo z > z; git add z
        GIT_COMMITTER_DATE="1720000000 +0000" git commit -q -m z
        git checkout -q main
    "#;
    run_script(&repo, script);
    let url = format!("file://{}", repo.path.to_str().unwrap());
    let t = repo.git_str(&["rev-parse", "HEAD"]);
    let d = repo.git_str(&["rev-parse", "HEAD^2"]);
    let shallow = |dir: &Path| std::fs::read_to_string(dir.join(".git/shallow")).unwrap();
    for version in [0u8, 2] {
        for (cut, d_shallow) in [
            ("--shallow-since=1650000000", false),
            ("--shallow-since=1650000000 --shallow-exclude=other", true),
        ] {
            let (ours, theirs) = clone_both_ways(&sb, &url, version, cut, "back-");
            let what = format!("v{version} {cut}");
            assert_eq!(shallow(&ours), shallow(&theirs), "{what}: shallow commits");
            assert_eq!(
                objects_of(&sb, &ours),
                objects_of(&sb, &theirs),
                "{what}: objects"
            );
            assert!(shallow(&ours).contains(&t), "{what}: t is shallow");
            assert_eq!(shallow(&ours).contains(&d), d_shallow, "{what}: d shallow");
            fsck(&sb, &ours);
        }
    }
}

#[test]
fn fetch_deepen_extends_a_shallow_clone() {
    let sb = Sandbox::new();
    let repo = history(&sb);
    let url = format!("file://{}", repo.path.to_str().unwrap());
    let up = format!("--upload-pack={}", upload_pack_cmd());
    for version in [0u8, 2] {
        let name = format!("deepen-{version}");
        git_v(
            &sb,
            sb.path(),
            version,
            &["clone", "-q", "--depth=1", &up, &url, &name],
        )
        .assert_success();
        let dir = sb.path().join(&name);
        git_v(&sb, &dir, version, &["fetch", "-q", "--deepen=3", &up]).assert_success();
        let count = sb.git_in(&dir, &["rev-list", "--count", "HEAD"]);
        assert_eq!(
            String::from_utf8(count).unwrap().trim(),
            "4",
            "v{version} --deepen=3"
        );
        fsck(&sb, &dir);
        git_v(&sb, &dir, version, &["fetch", "-q", "--depth=6", &up]).assert_success();
        let count = sb.git_in(&dir, &["rev-list", "--count", "HEAD"]);
        assert_eq!(
            String::from_utf8(count).unwrap().trim(),
            "6",
            "v{version} --depth=6"
        );
        git_v(&sb, &dir, version, &["fetch", "-q", "--unshallow", &up]).assert_success();
        let count = sb.git_in(&dir, &["rev-list", "--count", "HEAD"]);
        assert_eq!(
            String::from_utf8(count).unwrap().trim(),
            "12",
            "v{version} --unshallow"
        );
        assert!(!dir.join(".git/shallow").exists());
        fsck(&sb, &dir);
    }
}

#[test]
fn partial_clone_fetches_blobs_lazily() {
    let sb = Sandbox::new();
    let repo = history(&sb);
    repo.git(&["config", "uploadpack.allowFilter", "true"]);
    let url = format!("file://{}", repo.path.to_str().unwrap());
    let up_cmd = upload_pack_cmd();
    let up = format!("--upload-pack={up_cmd}");
    for version in [0u8, 2] {
        let name = format!("partial-{version}");
        git_v(
            &sb,
            sb.path(),
            version,
            &[
                "clone",
                "-q",
                "--filter=blob:none",
                "--no-checkout",
                &up,
                &url,
                &name,
            ],
        )
        .assert_success();
        let dir = sb.path().join(&name);
        let objects = objects_of(&sb, &dir);
        assert!(
            !objects.contains(" blob"),
            "v{version}: blobs came with blob:none"
        );
        assert!(objects.contains(" tree") && objects.contains(" commit"));
        sb.git_in(&dir, &["config", "remote.origin.uploadpack", &up_cmd]);
        git_v(&sb, &dir, version, &["checkout", "-q", "main"]).assert_success();
        let text = std::fs::read_to_string(dir.join("common.txt")).unwrap();
        assert_eq!(text.lines().count(), 12);
        let status = sb.git_in(&dir, &["status", "--porcelain"]);
        assert!(status.is_empty(), "{}", String::from_utf8_lossy(&status));
    }
}

/// A mirror clone that is the repository's pack file as it is goes to `packd upload-pack`'s
/// stdout (a pipe to git) from the file, by the kernel (`sendfile`): the clone's pack is the
/// file byte for byte, over protocol v0 and v2.
#[test]
fn a_whole_pack_goes_out_from_the_file() {
    let sb = Sandbox::new();
    let repo = history(&sb);
    // A pack of more than 64 KiB (smaller files are read whole, never sent from the file).
    commit_random_file(&repo, "big.bin", 5, 256 << 10);
    repo.git(&["repack", "-adbq"]);
    let packs = repo.packs();
    assert_eq!(packs.len(), 1);
    let served = std::fs::read(&packs[0]).unwrap();
    let url = format!("file://{}", repo.path.to_str().unwrap());
    let up = format!("--upload-pack={}", upload_pack_cmd());
    for version in [0u8, 2] {
        let name = format!("whole-{version}.git");
        let run = git_v_logged(
            &sb,
            sb.path(),
            version,
            &["clone", "-q", "--mirror", &up, &url, &name],
        );
        run.assert_success();
        assert!(
            run.err().contains("sent as file ranges"),
            "v{version}: {}",
            run.err()
        );
        let dir = sb.path().join(&name);
        fsck(&sb, &dir);
        let got: Vec<_> = std::fs::read_dir(dir.join("objects/pack"))
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|e| e == "pack"))
            .collect();
        assert_eq!(got.len(), 1);
        assert!(
            std::fs::read(&got[0]).unwrap() == served,
            "v{version}: the clone's pack is the served file"
        );
    }
}

/// A clone that is not the whole pack (one branch of two) still sends its runs of reused
/// entries of 64 KiB or more (here the 1.5 MiB file's entry, in pieces of the writer's window)
/// to `packd upload-pack`'s stdout from the pack file, by the kernel: the clone is complete,
/// over protocol v0 and v2.
#[test]
fn runs_of_entries_go_out_from_the_file_to_stdout() {
    let sb = Sandbox::new();
    let repo = history(&sb);
    // Larger than the writer's 1 MiB window: its entry goes out in pieces.
    commit_random_file(&repo, "big.bin", 6, 1536 << 10);
    // The history's branch `side` is left out.
    repo.git(&["repack", "-adbq"]);
    for version in [0u8, 2] {
        let name = format!("one-branch-{version}.git");
        let run = clone_one_branch(&sb, &repo, version, &name, Some("packd_pack=debug"));
        run.assert_success();
        assert!(
            run.err().contains("runs of reused entries"),
            "v{version}: {}",
            run.err()
        );
        let dir = sb.path().join(&name);
        fsck(&sb, &dir);
        let count = ["rev-list", "--objects", "--count", "HEAD"];
        assert_eq!(
            sb.git_run_in(&dir, &count, None).out().trim(),
            repo.git_str(&count),
            "v{version}: the branch's objects"
        );
    }
}

#[test]
fn an_unknown_want_is_refused_readably() {
    let sb = Sandbox::new();
    let repo = history(&sb);
    let src = repo.path.to_str().unwrap();
    let bogus = "0123456789abcdef0123456789abcdef01234567";
    let run = v0_want(&sb, false, src, bogus);
    run.assert_no_crash();
    assert_eq!(run.code(), Some(128));
    let expected = format!("ERR upload-pack: not our ref {bogus}");
    assert!(run.out().contains(&expected), "stdout: {:?}", run.out());
    assert!(run.err().starts_with("fatal: "), "stderr: {}", run.err());

    // Through git: a v2 fetch of an unknown object.
    let up = format!("--upload-pack={}", upload_pack_cmd());
    git_v(&sb, sb.path(), 2, &["init", "-q", "dst"]).assert_success();
    let dst = sb.path().join("dst");
    let run = git_v(&sb, &dst, 2, &["fetch", &up, src, bogus]);
    assert!(!run.success());
    assert!(
        run.err().contains(&format!("not our ref {bogus}")),
        "{}",
        run.err()
    );
}

#[test]
fn garbage_input_is_an_error_naming_the_line() {
    let sb = Sandbox::new();
    let repo = history(&sb);
    let src = repo.path.to_str().unwrap();
    for (protocol, input) in [
        (None, b"zzzzwant junk".to_vec()),
        (Some("version=2"), b"00ffcommand=fetch".to_vec()),
        (Some("version=2"), pkt("hello\n")),
        (None, pkt("want nothex\n")),
    ] {
        let run = packd_upload_pack(&sb, protocol, &[src], &input);
        run.assert_no_crash();
        assert_eq!(run.code(), Some(128), "{input:?}: {}", run.err());
        let shown = String::from_utf8_lossy(&input[..4.min(input.len())]).into_owned();
        let err = run.err();
        assert!(err.starts_with("fatal: "), "{err}");
        let named = err.contains(&shown)
            || err.contains("hello")
            || err.contains("nothex")
            || err.contains("command=fetch");
        assert!(named, "the error should name the line: {err}");
    }
}

#[test]
fn stateless_v2_requests_are_served_one_at_a_time() {
    let sb = Sandbox::new();
    let repo = history(&sb);
    let src = repo.path.to_str().unwrap();
    // No advertisement in stateless mode without --advertise-refs: the reply is the response.
    let mut input = pkt("command=ls-refs\n");
    input.extend(pkt("object-format=sha1\n"));
    input.extend_from_slice(b"0001");
    input.extend(pkt("peel\n"));
    input.extend(pkt("symrefs\n"));
    input.extend(pkt("ref-prefix refs/tags/\n"));
    input.extend(pkt("ref-prefix HEAD\n"));
    input.extend_from_slice(b"0000");
    let run = packd_upload_pack(&sb, Some("version=2"), &["--stateless-rpc", src], &input);
    run.assert_success();
    let head = repo.git_str(&["rev-parse", "HEAD"]);
    let v1 = repo.git_str(&["rev-parse", "v1"]);
    let v1_peeled = repo.git_str(&["rev-parse", "v1^{}"]);
    let light = repo.git_str(&["rev-parse", "light"]);
    let mut expected = pkt(&format!("{head} HEAD symref-target:refs/heads/main\n"));
    expected.extend(pkt(&format!("{light} refs/tags/light\n")));
    expected.extend(pkt(&format!("{v1} refs/tags/v1 peeled:{v1_peeled}\n")));
    expected.extend_from_slice(b"0000");
    assert_same_bytes("stateless ls-refs", &expected, &run.stdout);

    // The v2 capability advertisement.
    let adv = packd_upload_pack(&sb, Some("version=2"), &["--advertise-refs", src], b"");
    adv.assert_success();
    assert!(adv.out().starts_with("000eversion 2\n"), "{}", adv.out());
    assert!(adv.out().contains("ls-refs=unborn") && adv.out().contains("fetch=shallow"));

    // An unsupported filter is refused with a clear ERR.
    let mut input = pkt("command=fetch\n");
    input.extend_from_slice(b"0001");
    input.extend(pkt(&format!("want {head}\n")));
    input.extend(pkt("filter sparse:oid=1234\n"));
    input.extend(pkt("done\n"));
    input.extend_from_slice(b"0000");
    let run = packd_upload_pack(&sb, Some("version=2"), &["--stateless-rpc", src], &input);
    assert_eq!(run.code(), Some(128));
    assert!(
        run.out()
            .contains("ERR filter 'sparse:oid=1234' not supported"),
        "{}",
        run.out()
    );
}

#[test]
fn stateless_v0_round_then_done_sends_a_pack() {
    let sb = Sandbox::new();
    let repo = history(&sb);
    let src = repo.path.to_str().unwrap();
    let head = repo.git_str(&["rev-parse", "HEAD"]);
    let old = repo.git_str(&["rev-parse", "HEAD~2"]);
    // First POST: wants and one have round, no done: only acknowledgements (ready: every
    // want reaches the common commit).
    let mut input = pkt(&format!(
        "want {head} multi_ack_detailed side-band-64k ofs-delta\n"
    ));
    input.extend_from_slice(b"0000");
    input.extend(pkt(&format!("have {old}\n")));
    input.extend_from_slice(b"0000");
    let run = packd_upload_pack(&sb, None, &["--stateless-rpc", src], &input);
    run.assert_success();
    let text = run.out();
    assert!(text.contains(&format!("ACK {old} common")), "{text}");
    assert!(text.contains(&format!("ACK {old} ready")), "{text}");
    assert!(text.ends_with("0008NAK\n"), "{text}");
    // With no-done, ready is followed by the final ACK and the pack at once.
    let mut input = pkt(&format!(
        "want {head} multi_ack_detailed no-done side-band-64k ofs-delta\n"
    ));
    input.extend_from_slice(b"0000");
    input.extend(pkt(&format!("have {old}\n")));
    input.extend_from_slice(b"0000");
    let run = packd_upload_pack(&sb, None, &["--stateless-rpc", src], &input);
    run.assert_success();
    assert!(
        run.stdout.windows(5).any(|w| w == b"\x01PACK"),
        "no-done: a pack follows ready"
    );
    // A have the server lacks is not acknowledged, and no ready comes of it.
    let mut input = pkt(&format!(
        "want {head} multi_ack_detailed side-band-64k ofs-delta\n"
    ));
    input.extend_from_slice(b"0000");
    input.extend(pkt("have 0123456789abcdef0123456789abcdef01234567\n"));
    input.extend_from_slice(b"0000");
    let run = packd_upload_pack(&sb, None, &["--stateless-rpc", src], &input);
    run.assert_success();
    assert_eq!(run.out(), "0008NAK\n");
    // Second POST: the same, then done: a pack follows the final ACK.
    let mut input = pkt(&format!(
        "want {head} multi_ack_detailed side-band-64k ofs-delta\n"
    ));
    input.extend_from_slice(b"0000");
    input.extend(pkt(&format!("have {old}\n")));
    input.extend(pkt("done\n"));
    let run = packd_upload_pack(&sb, None, &["--stateless-rpc", src], &input);
    run.assert_success();
    let out = run.stdout;
    let ack = format!("ACK {old}\n");
    let pos = out.windows(ack.len()).position(|w| w == ack.as_bytes());
    assert!(pos.is_some(), "{}", String::from_utf8_lossy(&out));
    assert!(
        out.windows(5).any(|w| w == b"\x01PACK"),
        "a side-band pack follows"
    );
    assert!(out.ends_with(b"0000"));
}

/// The refs `upload-pack DIR` lists for `stdin` with `GIT_PROTOCOL` set to `protocol`: git's
/// (`git upload-pack`) or packd's.
fn listing(sb: &Sandbox, git: bool, protocol: Option<&str>, dir: &str, stdin: &[u8]) -> Run {
    // A request with a protocol named is one stateless request, as over HTTP.
    let args: &[&str] = if protocol.is_some() {
        &["--stateless-rpc", dir]
    } else {
        &[dir]
    };
    upload_pack(sb, git, protocol, args, stdin)
}

/// What a v0 advertisement says of its refs, without the capabilities the two servers word
/// differently: every line as sent, the first without its length and cut at its
/// capabilities, plus the `symref=` capabilities (what a client learns HEAD points at).
fn v0_refs(advertisement: &[u8]) -> String {
    let text = String::from_utf8_lossy(advertisement).into_owned();
    let mut out = String::new();
    for (i, line) in text.split('\n').enumerate() {
        match line.split_once('\0') {
            Some((named, caps)) if i == 0 => {
                out.push_str(named.get(4..).unwrap_or(named));
                out.push('\n');
                for cap in caps.split(' ').filter(|c| c.starts_with("symref=")) {
                    out.push_str(cap);
                    out.push('\n');
                }
            }
            _ => {
                out.push_str(line);
                out.push('\n');
            }
        }
    }
    out
}

/// `listing` without the line git 2.39 lists a broken ref on, with a null id (and which a
/// client then refuses: `git clone --mirror` stops at "'refs/heads/broken' has a null OID").
/// packd leaves a broken ref out, with a warning, as `git for-each-ref` does: the one place
/// its listing differs from git's on purpose.
fn without_broken(listing: &[u8], broken: bool) -> Vec<u8> {
    if !broken {
        return listing.to_vec();
    }
    let line = format!("003f{} refs/heads/broken\n", "0".repeat(40));
    let text = String::from_utf8_lossy(listing);
    assert!(text.contains(&line), "git lists the broken ref: {text}");
    text.replacen(&line, "", 1).into_bytes()
}

/// A protocol v0 request wanting `id` (nothing had), answered by git's upload-pack or packd's
/// over one connection (as over ssh).
fn v0_want(sb: &Sandbox, git: bool, dir: &str, id: &str) -> Run {
    upload_pack(sb, git, None, &[dir], &want_request(id))
}

/// Whether an upload-pack answer refused a want as not a ref's ("not our ref").
fn refused(run: &Run) -> bool {
    let out = String::from_utf8_lossy(&run.stdout).into_owned() + &run.err();
    !run.success() && out.contains("not our ref")
}

/// HEAD in the states a served repository can be left in (a branch, a detached id, an
/// unborn branch, a chain of symbolic refs, a chain ending at a name git refuses, content
/// that is no ref at all) and a broken ref beside it: packd lists what git lists, in protocol
/// v2 (`ls-refs` with `symrefs`, `peel` and `unborn`) and in the v0 advertisement, byte for
/// byte but for v0's capability wording and the broken ref (see `without_broken`).
#[test]
fn unusual_heads_and_broken_refs_are_listed_as_git_lists_them() {
    let sb = Sandbox::new();
    let src = history(&sb);
    let bare = sb.clone_bare(&src, "served.git").path;
    let dir = bare.to_str().unwrap();
    let main = src.git_str(&["rev-parse", "main"]);
    let mut ls_refs = pkt("command=ls-refs\n");
    ls_refs.extend_from_slice(b"0001");
    for arg in ["peel\n", "symrefs\n", "unborn\n"] {
        ls_refs.extend(pkt(arg));
    }
    ls_refs.extend_from_slice(b"0000");
    let link = bare.join("refs/heads/link");
    let broken = bare.join("refs/heads/broken");
    // (what HEAD holds, what refs/heads/link holds (none: no such file), a broken ref beside)
    let states: [(String, Option<&str>, bool); 8] = [
        ("ref: refs/heads/main\n".into(), None, false),
        (format!("{main}\n"), None, false),
        ("ref: refs/heads/unborn\n".into(), None, false),
        (
            "ref: refs/heads/link\n".into(),
            Some("ref: refs/heads/main\n"),
            false,
        ),
        (
            "ref: refs/heads/link\n".into(),
            Some("ref: refs/heads/bad..name\n"),
            false,
        ),
        ("ref: refs/heads/bad..name\n".into(), None, false),
        ("no ref at all\n".into(), None, false),
        ("ref: refs/heads/main\n".into(), None, true),
    ];
    for (head, linked, with_broken) in &states {
        std::fs::write(bare.join("HEAD"), head).unwrap();
        match linked {
            Some(text) => std::fs::write(&link, text).unwrap(),
            None => {
                let _ = std::fs::remove_file(&link);
            }
        }
        if *with_broken {
            std::fs::write(&broken, "not an id\n").unwrap();
        } else {
            let _ = std::fs::remove_file(&broken);
        }
        let what = format!("HEAD {head:?}, link {linked:?}, broken ref {with_broken}");
        let theirs = listing(&sb, true, Some("version=2"), dir, &ls_refs);
        let ours = listing(&sb, false, Some("version=2"), dir, &ls_refs);
        if head.starts_with("no ref") {
            // git does not call the directory a repository; neither does packd.
            assert!(!theirs.success(), "{what}: git served it");
            ours.assert_no_crash();
            assert!(!ours.success(), "{what}: packd served it: {}", ours.out());
            assert!(
                ours.err()
                    .contains("served.git' does not appear to be a git repository"),
                "{what}: {}",
                ours.err()
            );
            continue;
        }
        theirs.assert_success();
        ours.assert_success();
        assert_same_bytes(
            &format!("v2 ls-refs, {what}"),
            &without_broken(&theirs.stdout, *with_broken),
            &ours.stdout,
        );
        let theirs = listing(&sb, true, None, dir, b"0000");
        let ours = listing(&sb, false, None, dir, b"0000");
        theirs.assert_success();
        ours.assert_success();
        assert_eq!(
            v0_refs(&without_broken(&theirs.stdout, *with_broken)),
            v0_refs(&ours.stdout),
            "v0 advertisement, {what}"
        );
        if *with_broken {
            assert!(
                ours.err().contains("ignoring broken ref refs/heads/broken"),
                "{}",
                ours.err()
            );
        }
    }
}

/// Refs hidden by `uploadpack.hideRefs` and `transfer.hideRefs` (with a `!` rule showing one
/// again, and HEAD hidden in the second round) are left out of both advertisements as git
/// leaves them out, and the v0 advertisement is git's ref for ref (its `symref=` capability
/// included, which git still sends for a hidden HEAD). `want-ref` knows a shown ref, not a
/// hidden or broken one. A hidden ref's tip is fetched by id over v2 (git checks no v2 want)
/// and passes `git fsck`; over v0 it is served when `uploadpack.allowTipSHA1InWant` or
/// `uploadpack.allowReachableSHA1InWant` is on and refused when both are off, by git and by
/// packd alike.
#[test]
fn hidden_refs_are_left_out_as_git_leaves_them_out() {
    let sb = Sandbox::new();
    let src = history(&sb);
    // A commit no shown ref reaches, under a hidden ref.
    let main = src.git_str(&["rev-parse", "main"]);
    let hidden_tip = src.commit_on("main", "hidden\n");
    for (name, id) in [
        ("refs/pull/1/head", hidden_tip.as_str()),
        ("refs/pull/2/head", main.as_str()),
        ("refs/keep/a", main.as_str()),
    ] {
        src.git(&["update-ref", name, id]);
    }
    src.git(&["config", "--add", "uploadpack.hideRefs", "refs/pull"]);
    src.git(&["config", "--add", "uploadpack.hideRefs", "!refs/pull/2"]);
    src.git(&["config", "--add", "transfer.hideRefs", "refs/keep/"]);
    let dir = src.path.to_str().unwrap();
    let up = format!("--upload-pack={}", upload_pack_cmd());
    for round in 0..2 {
        if round == 1 {
            src.git(&["config", "--add", "transfer.hideRefs", "HEAD"]);
        }
        for version in [0u8, 2] {
            let theirs = git_v(&sb, sb.path(), version, &["ls-remote", "--symref", dir]);
            let ours = git_v(
                &sb,
                sb.path(),
                version,
                &["ls-remote", "--symref", &up, dir],
            );
            theirs.assert_success();
            ours.assert_success();
            assert!(ours.out().contains("refs/pull/2/head"), "{}", ours.out());
            assert!(!ours.out().contains("refs/pull/1/") && !ours.out().contains("refs/keep/"));
            assert_eq!(ours.out().contains("HEAD"), round == 0, "{}", ours.out());
            assert_same_bytes(
                &format!("ls-remote v{version}, round {round}"),
                &theirs.stdout,
                &ours.stdout,
            );
        }
        let theirs = listing(&sb, true, None, dir, b"0000");
        let ours = listing(&sb, false, None, dir, b"0000");
        assert_eq!(
            v0_refs(&theirs.stdout),
            v0_refs(&ours.stdout),
            "v0 advertisement, round {round}"
        );
        assert!(v0_refs(&ours.stdout).contains("symref=HEAD:refs/heads/main"));
    }
    // `want-ref` names a shown ref, not a hidden or broken one (git: "unknown ref").
    std::fs::write(src.git_dir.join("refs/heads/broken"), "not an id\n").unwrap();
    for (name, shown) in [
        ("refs/pull/2/head", true),
        ("refs/pull/1/head", false),
        ("refs/heads/broken", false),
    ] {
        let mut input = pkt("command=fetch\n");
        input.extend_from_slice(b"0001");
        input.extend(pkt(&format!("want-ref {name}\n")));
        input.extend(pkt("done\n"));
        input.extend_from_slice(b"0000");
        let run = packd_upload_pack(&sb, Some("version=2"), &["--stateless-rpc", dir], &input);
        run.assert_no_crash();
        let out = String::from_utf8_lossy(&run.stdout).into_owned();
        if shown {
            run.assert_success();
            assert!(out.contains("wanted-refs") && out.contains(name), "{out}");
        } else {
            assert!(
                out.contains(&format!("ERR unknown ref {name}")),
                "{out}{}",
                run.err()
            );
            assert!(!out.contains("packfile"), "{out}");
        }
    }

    // The hidden tip, fetched by id from packd.
    let client = sb.init_bare("client.git");
    let fetched = git_v(
        &sb,
        &client.path,
        2,
        &[
            "fetch",
            "-q",
            &up,
            dir,
            &format!("{hidden_tip}:refs/heads/got"),
        ],
    );
    fetched.assert_success();
    assert_eq!(client.git_str(&["rev-parse", "refs/heads/got"]), hidden_tip);
    fsck(&sb, &client.path);
    std::fs::remove_file(src.git_dir.join("refs/heads/broken")).unwrap();

    // Over v0: served with either setting on, refused with both off.
    for (tip, reachable) in [(true, false), (false, true), (false, false)] {
        src.git(&["config", "uploadpack.allowTipSHA1InWant", &tip.to_string()]);
        src.git(&[
            "config",
            "uploadpack.allowReachableSHA1InWant",
            &reachable.to_string(),
        ]);
        for git in [true, false] {
            let run = v0_want(&sb, git, dir, &hidden_tip);
            let who = if git { "git" } else { "packd" };
            assert_eq!(
                refused(&run),
                !tip && !reachable,
                "{who}, allowTip {tip}, allowReachable {reachable}: {}",
                run.err()
            );
            if !refused(&run) {
                run.assert_success();
                assert!(
                    String::from_utf8_lossy(&run.stdout).contains("PACK"),
                    "{who}"
                );
            }
        }
    }
}

/// `uploadpack.allowFilter`, `uploadpack.allowTipSHA1InWant` and
/// `uploadpack.allowReachableSHA1InWant` set to false turn off what they turn off in git:
/// neither advertisement offers them, a partial clone is a whole clone (as from git, which
/// warns the same), and a v0 fetch of an unadvertised commit is refused as git refuses it.
/// Unset, packd offers all three.
#[test]
fn uploadpack_config_turns_off_what_it_turns_off_in_git() {
    let sb = Sandbox::new();
    let src = history(&sb);
    let dir = src.path.to_str().unwrap();
    let up = format!("--upload-pack={}", upload_pack_cmd());
    let v2_caps = |sb: &Sandbox| {
        let run = packd_upload_pack(sb, Some("version=2"), &["--advertise-refs", dir], b"");
        run.assert_success();
        run.out()
    };
    let v0_caps = |sb: &Sandbox| {
        let run = packd_upload_pack(sb, None, &[dir], b"0000");
        run.assert_success();
        run.out()
    };
    let offered = [
        "allow-tip-sha1-in-want",
        "allow-reachable-sha1-in-want",
        " filter",
    ];
    assert!(v2_caps(&sb).contains(" filter"));
    let v0 = v0_caps(&sb);
    assert!(offered.iter().all(|c| v0.contains(c)), "{v0}");

    for key in [
        "allowFilter",
        "allowTipSHA1InWant",
        "allowReachableSHA1InWant",
    ] {
        src.git(&["config", &format!("uploadpack.{key}"), "false"]);
    }
    assert!(!v2_caps(&sb).contains("filter"), "{}", v2_caps(&sb));
    let v0 = v0_caps(&sb);
    assert!(offered.iter().all(|c| !v0.contains(c)), "{v0}");

    // A partial clone is whole, from git and from packd, with the same warning.
    let url = format!("file://{dir}");
    for (name, extra) in [("from-git", None), ("from-packd", Some(up.as_str()))] {
        let mut args = vec!["clone", "-q", "--bare", "--filter=blob:none"];
        args.extend(extra);
        args.extend([url.as_str(), name]);
        let run = git_v(&sb, sb.path(), 2, &args);
        run.assert_success();
        assert!(
            run.err().contains("filtering not recognized by server"),
            "{name}: {}",
            run.err()
        );
        let clone = sb.path().join(name);
        assert_eq!(
            objects_of(&sb, &clone),
            objects_of(&sb, &src.path),
            "{name}"
        );
        fsck(&sb, &clone);
    }

    // An unadvertised commit wanted over v0 anyway: refused by git's check and by packd's.
    let old = src.git_str(&["rev-parse", "main~1"]);
    for git in [true, false] {
        assert!(refused(&v0_want(&sb, git, dir, &old)), "git {git}");
    }
    // And through the client, which refuses to ask when nothing is offered.
    let client = sb.init_bare("client.git");
    for extra in [None, Some(up.as_str())] {
        let mut args = vec!["fetch", "-q"];
        args.extend(extra);
        args.extend([url.as_str(), old.as_str()]);
        let run = git_v(&sb, &client.path, 0, &args);
        assert!(!run.success(), "{extra:?}: the fetch of {old} succeeded");
        assert!(
            run.err()
                .contains("not allow request for unadvertised object"),
            "{}",
            run.err()
        );
    }
}

/// A v0 conversation over one connection (stdin and stdout, as over ssh) in which `between`
/// runs after the client has read the advertisement and before it sends its want of `id`:
/// the exit status, the advertisement's lines, what the server sent after it, and its
/// stderr.
fn want_after_advertisement(
    sb: &Sandbox,
    git: bool,
    dir: &Path,
    id: &str,
    between: impl FnOnce(),
) -> (bool, String, Vec<u8>, String) {
    use std::io::{Read, Write};
    use std::process::Stdio;
    use std::sync::{mpsc, Arc, Mutex};
    let stderr = sb.path().join("upload-pack.err");
    let (mut cmd, timeout) = upload_pack_command(sb, git);
    cmd.arg(dir)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(&stderr).unwrap());
    let mut child = cmd.spawn().expect("upload-pack starts");
    let (mut stdin, mut stdout) = (child.stdin.take().unwrap(), child.stdout.take().unwrap());
    // A server that waits for input it will not get is killed, failing the test, not CI.
    let child = Arc::new(Mutex::new(child));
    let (done, finished) = mpsc::channel::<()>();
    let watched = Arc::clone(&child);
    let watchdog = std::thread::spawn(move || {
        if finished.recv_timeout(timeout).is_err() {
            let _ = watched.lock().unwrap().kill();
        }
    });
    let mut shown = String::new();
    loop {
        let mut len = [0u8; 4];
        stdout.read_exact(&mut len).expect("an advertisement line");
        let n = usize::from_str_radix(std::str::from_utf8(&len).unwrap(), 16).unwrap();
        if n == 0 {
            break;
        }
        let mut line = vec![0u8; n - 4];
        stdout.read_exact(&mut line).unwrap();
        shown.push_str(&String::from_utf8_lossy(&line));
    }
    between();
    stdin.write_all(&want_request(id)).unwrap();
    drop(stdin);
    let mut rest = Vec::new();
    stdout.read_to_end(&mut rest).unwrap();
    // Waited for by polling, so that the watchdog still runs while the server, its output
    // closed, has yet to exit (the lock is never held across a blocking wait).
    let status = loop {
        if let Some(status) = child.lock().unwrap().try_wait().unwrap() {
            break status;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    };
    let _ = done.send(());
    watchdog.join().unwrap();
    let ok = status.success();
    (
        ok,
        shown,
        rest,
        std::fs::read_to_string(&stderr).unwrap_or_default(),
    )
}

/// Over one connection, wants are checked against what the advertisement showed, as git
/// checks them:
/// - a branch deleted by a push after the client read the advertisement (its commit now
///   reachable from no ref) is still served, by packd as by git, rather than refused as "not
///   our ref" because the refs were read again;
/// - a branch moved after it to a commit never shown is refused by both, with
///   `allowTipSHA1InWant` on (and refs hidden, so that packd lists the hidden ones): what
///   counts beside the refs shown is the hidden refs, not every ref as it is now.
#[test]
fn wants_over_one_connection_are_checked_against_its_advertisement() {
    let sb = Sandbox::new();
    let src = history(&sb);
    let side = src.git_str(&["rev-parse", "side"]);
    for git in [true, false] {
        let bare = sb.clone_bare(&src, &format!("served-{git}.git"));
        let (ok, _, out, err) = want_after_advertisement(&sb, git, &bare.path, &side, || {
            bare.git(&["update-ref", "-d", "refs/heads/side"]);
        });
        let text = String::from_utf8_lossy(&out);
        assert!(
            ok && !text.contains("not our ref") && out.windows(4).any(|w| w == b"PACK"),
            "git {git}: the want of the deleted branch's tip was not served: {text} {err}"
        );
        // The ref is gone: a new conversation may no longer want its commit.
        let refused_now = v0_want(&sb, git, bare.path.to_str().unwrap(), &side);
        assert!(refused(&refused_now), "git {git}: {}", refused_now.err());

        for (key, value) in [
            ("uploadpack.allowTipSHA1InWant", "true"),
            ("uploadpack.allowReachableSHA1InWant", "false"),
            ("uploadpack.hideRefs", "refs/hidden"),
        ] {
            bare.git(&["config", key, value]);
        }
        let new = bare.commit_on("main", "never shown");
        let (ok, _, out, err) = want_after_advertisement(&sb, git, &bare.path, &new, || {
            bare.git(&["update-ref", "refs/heads/main", &new]);
        });
        let text = String::from_utf8_lossy(&out);
        assert!(
            !ok && text.contains("not our ref"),
            "git {git}: a commit the advertisement did not show was not refused: {text} {err}"
        );

        // A hidden HEAD, detached at a commit no ref shown points at: with
        // `allowTipSHA1InWant`, its tip counts among the hidden ones.
        bare.git(&["config", "--add", "uploadpack.hideRefs", "HEAD"]);
        let detached = bare.commit_on("main", "detached");
        bare.git(&["update-ref", "--no-deref", "HEAD", &detached]);
        let (ok, shown, out, err) =
            want_after_advertisement(&sb, git, &bare.path, &detached, || {});
        assert!(
            !shown.contains(&detached),
            "git {git}: HEAD is hidden, its commit not shown: {shown}"
        );
        let text = String::from_utf8_lossy(&out);
        assert!(
            ok && out.windows(4).any(|w| w == b"PACK"),
            "git {git}: the hidden HEAD's tip was not served: {text} {err}"
        );
    }
}

/// An entry found damaged once the pack has started (a byte of a blob's compressed data
/// flipped, caught by the index's CRC-32 as the entry is copied) reaches the client as an
/// error on side-band 3, which git shows with the reason: the clone fails naming the pack file
/// (from the repository's directory, as git does) and the entry's offset, over protocol v0 and
/// v2, and nothing is left behind.
#[test]
fn an_entry_found_damaged_mid_pack_is_told_on_the_error_band() {
    let sb = Sandbox::new();
    // A clone of `main` alone leaves out branch `side`: a part of the pack, copied entry by
    // entry, not the pack file sent whole.
    let repo = history(&sb);
    commit_random_file(&repo, "random.bin", 11, 4096);
    repo.git(&["repack", "-adq", "--no-write-bitmap-index"]);
    let pack = repo.packs()[0].clone();
    let id = repo.git_str(&["rev-parse", "HEAD:random.bin"]);
    let entry = verify_pack_entries(&repo, &pack.with_extension("idx"))
        .into_iter()
        .find(|e| e.id == id)
        .expect("the random file's entry");
    damage_entry(&pack, &entry);
    let pack_name = pack.file_name().unwrap().to_str().unwrap().to_string();
    for version in [0u8, 2] {
        let name = format!("damaged-{version}.git");
        let run = clone_one_branch(&sb, &repo, version, &name, None);
        run.assert_no_crash();
        let packd_err = packd_stderr(&sb, &name);
        assert!(
            packd_err.starts_with("fatal: ") && !packd_err.contains("panicked"),
            "v{version}: packd fails with a reason, not a panic: {packd_err}"
        );
        let err = run.err();
        assert!(!run.success(), "v{version}: the clone should fail: {err}");
        // packd's own stderr went to a file: what names the pack came on the side-band, which
        // git shows after "remote: " (`-q`: no progress on band 2).
        assert!(
            err.lines().any(|line| line.starts_with("remote: ")
                && line.contains(&format!("./objects/pack/{pack_name}"))
                && mentions_offset(line, entry.offset)),
            "v{version}: the reason comes on the error band, naming the pack and offset {}: {err}",
            entry.offset
        );
        // As git names it, from the repository's directory: where the server keeps it is not
        // told (packd's own log keeps the full path).
        let dir = repo.path.canonicalize().unwrap();
        let dir = dir.to_str().unwrap();
        assert!(
            !err.contains(dir),
            "v{version}: the client is told {dir}: {err}"
        );
        assert!(
            packd_err.contains(dir),
            "v{version}: packd's log names the full path: {packd_err}"
        );
        assert!(!sb.path().join(&name).exists(), "v{version}: nothing left");
    }
}

/// The `remote: <stage>: ..., done.` lines of a `git clone --progress`'s stderr: what packd
/// sent on side-band 2 as each stage ended.
fn progress_done_lines(err: &str) -> Vec<String> {
    err.split(['\r', '\n'])
        .filter_map(|l| l.strip_prefix("remote: "))
        .map(|l| l.trim_end().to_string())
        .filter(|l| l.ends_with(", done."))
        .collect()
}

#[test]
fn clones_show_gits_progress_lines_on_the_side_band() {
    let sb = Sandbox::new();
    let repo = history(&sb);
    let url = format!("file://{}", repo.path.to_str().unwrap());
    let up = format!("--upload-pack={}", upload_pack_cmd());
    let clone = |version: u8, name: &str, extra: &[&str]| -> (Vec<String>, usize) {
        let mut args = vec!["clone", "--progress", "--bare"];
        args.extend(extra);
        args.extend([up.as_str(), url.as_str(), name]);
        let run = git_v(&sb, sb.path(), version, &args);
        run.assert_success();
        let objects = Repo {
            path: sb.path().join(name),
            git_dir: sb.path().join(name),
            home: repo.home.clone(),
        }
        .all_ids()
        .len();
        (progress_done_lines(&run.err()), objects)
    };
    for version in [0u8, 2] {
        // Loose objects: counted by a walk (no total), written one by one (a percentage).
        let (lines, n) = clone(version, &format!("loose-{version}.git"), &[]);
        assert_eq!(
            lines,
            [
                format!("Counting objects: {n}, done."),
                format!("Writing objects: 100% ({n}/{n}), done."),
            ],
            "v{version}, loose"
        );
    }
    repo.git(&["repack", "-adbq"]);
    for version in [0u8, 2] {
        // The whole pack, sent as it is before any update: counts alone.
        let (lines, n) = clone(version, &format!("whole-{version}.git"), &[]);
        assert_eq!(
            lines,
            [
                format!("Counting objects: {n}, done."),
                format!("Writing objects: {n}, done."),
            ],
            "v{version}, the whole pack"
        );
        // One branch, counted with the bitmap: percentages, and the delta search's count.
        let (lines, n) = clone(version, &format!("one-{version}.git"), &["--single-branch"]);
        assert_eq!(lines.len(), 3, "v{version}, one branch: {lines:?}");
        assert_eq!(lines[0], format!("Counting objects: 100% ({n}/{n}), done."));
        assert!(
            lines[1].starts_with("Compressing objects: ") && !lines[1].contains('%'),
            "v{version}: {lines:?}"
        );
        assert_eq!(lines[2], format!("Writing objects: 100% ({n}/{n}), done."));
    }
}
