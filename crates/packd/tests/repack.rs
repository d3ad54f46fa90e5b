//! `packd repack` checked by stock git: after `-adb` and `-adf` of a fast-import-made
//! repository (branches, annotated and lightweight tags, a pull-request ref, a deleted branch's
//! unreachable objects, loose objects, kept in a cruft pack), `git fsck --strict`, `git verify-pack`, `git rev-list
//! --test-bitmap` and `git commit-graph verify` pass; clones (file:// and through `packd
//! upload-pack`) get what clones of git's own repack get; a default clone's objects are the
//! first entries of the pack; an incremental repack packs the reachable loose objects; a repack killed
//! at random points leaves a repository git finds whole; a second repack at once is refused;
//! a repack reusing deltas (`-ad`, `-adb` without `-f`) keeps every chain within `--depth`.

mod common;

use common::*;
use std::collections::BTreeSet;
use std::time::Duration;

/// The fast-import stream of the test history.
fn stream() -> Vec<u8> {
    let mut s = String::new();
    for c in 1..=25u32 {
        s += &format!(
            "commit refs/heads/main\nmark :{c}\ncommitter A <a@e.com> {} +0000\ndata 4\nc{c:02}\n",
            1_700_000_000 + c
        );
        for f in 1..=3u32 {
            let body: String = (1..=120u32)
                .map(|l| {
                    format!(
                        "line {l} of file {f}{}\n",
                        if l == c { " changed" } else { "" }
                    )
                })
                .collect();
            s += &format!("M 644 inline dir{f}/f{f}\ndata {}\n{body}\n", body.len());
        }
    }
    for (name, from, file) in [
        ("refs/heads/side", "refs/heads/main", "side"),
        ("refs/pull/1/head", "refs/heads/side", "pr"),
        ("refs/heads/gone", "refs/heads/main", "gone"),
    ] {
        s += &format!(
            "commit {name}\ncommitter A <a@e.com> 1700001000 +0000\ndata {}\n{file}\nfrom {from}\nM 644 inline {file}\ndata {}\n{file} file\n\n",
            file.len() + 1,
            file.len() + 6
        );
    }
    s += "tag v1\nfrom :20\ntagger T <t@e.com> 1700002000 +0000\ndata 4\nv1!\n";
    s.into_bytes()
}

/// The test repository: packed by git, then a branch deleted (its objects unreachable in the
/// pack) and loose objects added (a dangling blob and commit).
fn history(sb: &Sandbox, name: &str) -> Repo {
    let repo = sb.init_bare(name);
    repo.fast_import(&stream());
    repo.git(&["symbolic-ref", "HEAD", "refs/heads/main"]);
    repo.git(&["tag", "light", "refs/heads/side"]);
    repo.git(&["repack", "-adq"]);
    repo.git(&["update-ref", "-d", "refs/heads/gone"]);
    repo.git_stdin(&["hash-object", "-w", "--stdin"], b"a loose blob\n");
    repo
}

fn id_of(repo: &Repo, rev: &str) -> String {
    repo.git_str(&["rev-parse", rev]).trim().to_string()
}

/// Every check git has for what `packd repack -a...` wrote.
fn git_checks(repo: &Repo, bitmap: bool) {
    repo.git(&["fsck", "--strict", "--no-dangling"]);
    // A pack without an index is one a writer killed between its two publishes left: no
    // reader sees it (git counts it as garbage), and the cleanup removes it once an hour old
    // (younger, it may be a push's between its pack and its index).
    for pack in repo.packs() {
        if !pack.with_extension("idx").exists() {
            continue;
        }
        repo.git(&["verify-pack", pack.to_str().unwrap()]);
    }
    if bitmap {
        let out = repo.git_run(&["rev-list", "--test-bitmap", "HEAD"], None);
        out.assert_success();
        assert!(out.err().contains("OK!"), "{}", out.err());
    }
    repo.git(&["commit-graph", "verify"]);
}

/// Refs and objects of a clone of `repo` (what `git clone --bare` fetches: branches and tags,
/// no local shortcuts), through `upload_pack` if given.
fn clone_of(
    sb: &Sandbox,
    repo: &Repo,
    name: &str,
    upload_pack: Option<&str>,
) -> (String, Vec<String>) {
    let clone = sb.init_bare(name);
    let url = format!("file://{}", repo.path.display());
    let up = upload_pack.map(|u| format!("--upload-pack={u}"));
    let mut args = vec!["fetch", "-q", "--no-write-fetch-head"];
    if let Some(up) = &up {
        args.push(up);
    }
    args.extend([
        url.as_str(),
        "+refs/heads/*:refs/heads/*",
        "+refs/tags/*:refs/tags/*",
    ]);
    clone.git(&args);
    clone.git(&["fsck", "--strict", "--no-dangling"]);
    let refs = clone.git_str(&["for-each-ref", "--format=%(refname) %(objectname)"]);
    (refs, clone.all_ids())
}

#[test]
fn full_repack_passes_git_checks_and_clones_like_git() {
    for flags in ["-adb", "-adf", "-adbF"] {
        let sb = Sandbox::new();
        let ours = history(&sb, "ours.git");
        let theirs = ours.copy_as(&sb, "theirs.git");
        let gone = id_of(&ours, "refs/pull/1/head"); // reachable, outside a default clone
        let before = ours.all_ids();
        ours.packd(&["repack", flags], None).assert_success();
        theirs.git(&["repack", "-adb"]);
        git_checks(&ours, flags.contains('b'));
        assert!(ours.packs().len() <= 2, "{:?}", ours.packs());
        // Nothing recent is lost: unreachable packed and loose objects go to a cruft pack.
        assert_eq!(ours.all_ids(), before, "{flags}: the objects");
        assert_eq!(
            ours.loose_count(),
            0,
            "{flags}: the loose blob is in the cruft pack"
        );
        let mtimes = std::fs::read_dir(ours.pack_dir())
            .unwrap()
            .filter(|e| {
                e.as_ref()
                    .unwrap()
                    .path()
                    .extension()
                    .is_some_and(|x| x == "mtimes")
            })
            .count();
        assert_eq!(mtimes, 1, "{flags}: one cruft pack");
        ours.git(&["cat-file", "-e", &gone]);
        for (how, up) in [
            ("file", None),
            ("packd", Some(format!("{PACKD} upload-pack"))),
        ] {
            let a = clone_of(&sb, &ours, &format!("a-{how}.git"), up.as_deref());
            let b = clone_of(&sb, &theirs, &format!("b-{how}.git"), up.as_deref());
            assert_eq!(
                a, b,
                "{flags}: a clone over {how} from ours and from git's repack"
            );
        }
    }
}

#[test]
fn a_default_clone_is_the_first_entries_of_the_pack() {
    let sb = Sandbox::new();
    let repo = history(&sb, "r.git");
    repo.packd(&["repack", "-ad"], None).assert_success();
    let clone: BTreeSet<String> = repo
        .git_str(&["rev-list", "--objects", "HEAD", "--branches", "--tags"])
        .lines()
        .map(|l| l[..40].to_string())
        .collect();
    // The pack of reachable objects is the one holding HEAD.
    let head = id_of(&repo, "HEAD");
    let pack = repo
        .packs()
        .into_iter()
        .find(|p| {
            repo.git_str(&["verify-pack", "-v", p.to_str().unwrap()])
                .contains(&head)
        })
        .unwrap();
    let verify = repo.git_str(&["verify-pack", "-v", pack.to_str().unwrap()]);
    let mut entries: Vec<(u64, String, Option<String>)> = verify
        .lines()
        .filter(|l| l.len() > 40 && l.as_bytes()[40] == b' ')
        .map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (
                f[4].parse().unwrap(),
                f[0].to_string(),
                f.get(6).map(|s| s.to_string()),
            )
        })
        .collect();
    entries.sort();
    let first: BTreeSet<String> = entries[..clone.len()].iter().map(|e| e.1.clone()).collect();
    assert_eq!(first, clone, "the first entries are the default clone's");
    for (_, id, base) in &entries[..clone.len()] {
        if let Some(base) = base {
            assert!(
                clone.contains(base),
                "{id}'s base {base} is in the clone's part"
            );
        }
    }
    assert!(
        entries.len() > clone.len(),
        "refs/pull/* objects come after"
    );
}

#[test]
fn an_incremental_repack_packs_the_reachable_loose_objects() {
    let sb = Sandbox::new();
    let repo = history(&sb, "r.git");
    let tree = id_of(&repo, "HEAD^{tree}");
    let head = id_of(&repo, "HEAD");
    let commit = repo
        .git_str(&["commit-tree", "-m", "loose", "-p", &head, &tree])
        .trim()
        .to_string();
    repo.git(&["update-ref", "refs/heads/main", &commit]);
    let loose = repo.loose_count();
    assert_eq!(loose, 2);
    let packs = repo.packs().len();
    repo.packd(&["repack", "-d"], None).assert_success();
    // The dangling blob stays loose, as git leaves it (repack_parity compares with git).
    assert_eq!(repo.loose_count(), 1);
    assert_eq!(repo.packs().len(), packs + 1);
    repo.git(&["fsck", "--strict", "--no-dangling"]);
    repo.git(&["cat-file", "-e", &commit]);
    // Nothing loose: nothing to do.
    let out = repo.packd(&["repack"], None);
    out.assert_success();
    assert_eq!(repo.packs().len(), packs + 1);
}

#[test]
fn a_second_repack_at_once_is_refused() {
    let sb = Sandbox::new();
    let repo = history(&sb, "r.git");
    let held = packd_maint::lock::try_maintenance(&repo.objects_dir()).unwrap();
    let out = repo.packd(&["repack", "-ad"], None);
    assert!(!out.success());
    assert!(
        out.err().contains("another repack is running"),
        "{}",
        out.err()
    );
    drop(held);
    repo.packd(&["repack", "-ad"], None).assert_success();
}

#[test]
fn a_repack_killed_anywhere_leaves_a_whole_repository() {
    let sb = Sandbox::new();
    let base = history(&sb, "base.git");
    let objects = base.all_ids();
    // How long a whole run takes, to spread the kills over it.
    let started = std::time::Instant::now();
    let probe = base.copy_as(&sb, "probe.git");
    probe.packd(&["repack", "-adb"], None).assert_success();
    let span = started.elapsed().as_micros().max(1000) as u64;
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    for round in 0..20 {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        let repo = base.copy_as(&sb, &format!("k{round}.git"));
        let mut child = std::process::Command::new(PACKD);
        apply_env(&mut child, sb.path());
        let mut child = child
            .arg("-C")
            .arg(&repo.path)
            .args(["repack", "-adb"])
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        std::thread::sleep(Duration::from_micros(seed % span));
        let _ = child.kill();
        let _ = child.wait();
        repo.git(&["fsck", "--strict", "--no-dangling"]);
        assert_eq!(repo.all_ids(), objects, "round {round}: no object lost");
        // packd serves it, and the next repack finishes the job.
        let _ = clone_of(
            &sb,
            &repo,
            &format!("c{round}.git"),
            Some(&format!("{PACKD} upload-pack")),
        );
        repo.packd(&["repack", "-adb"], None).assert_success();
        git_checks(&repo, true);
    }
}

#[test]
fn a_default_clone_after_a_full_repack_is_sent_as_a_range_of_the_pack() {
    let sb = Sandbox::new();
    let repo = history(&sb, "r.git");
    repo.packd(&["repack", "-adb"], None).assert_success();
    let theirs = repo.copy_as(&sb, "theirs.git");
    theirs.git(&["repack", "-adb"]);
    let mut ids = Vec::new();
    for (name, source) in [("a.git", &repo), ("b.git", &theirs)] {
        let clone = sb.init_bare(name);
        let url = format!("file://{}", source.path.display());
        let up = format!("--upload-pack=env PACKD_LOG=packd_pack=debug {PACKD} upload-pack");
        let run = clone.git_run(
            &[
                "fetch",
                "--no-write-fetch-head",
                &up,
                &url,
                "+refs/heads/*:refs/heads/*",
                "+refs/tags/*:refs/tags/*",
            ],
            None,
        );
        run.assert_success();
        let by_range = run.err().contains("entries (") && run.err().contains("as they are");
        // packd's layout makes the clone one range of the pack; git's does not.
        assert_eq!(by_range, name == "a.git", "{name}: {}", run.err());
        clone.git(&["fsck", "--strict", "--no-dangling"]);
        ids.push(clone.all_ids());
    }
    assert_eq!(ids[0], ids[1], "the same objects");
}

#[test]
fn geometric_repack_rolls_small_packs_up_with_a_midx() {
    let sb = Sandbox::new();
    let repo = history(&sb, "r.git");
    // Small packs on top of the big one, one a "push".
    for n in 0..4 {
        let parent = id_of(&repo, "refs/heads/main");
        let blob = repo.git_stdin(
            &["hash-object", "-w", "--stdin"],
            format!("push {n}\n").as_bytes(),
        );
        let blob = String::from_utf8(blob).unwrap();
        let tree = repo.git_stdin(
            &["mktree"],
            format!("100644 blob {}\tp{n}\n", blob.trim()).as_bytes(),
        );
        let tree = String::from_utf8(tree).unwrap();
        let commit = repo.git_str(&["commit-tree", "-m", "push", "-p", &parent, tree.trim()]);
        repo.git(&["update-ref", "refs/heads/main", commit.trim()]);
        repo.git(&["repack", "-q"]);
    }
    let before = repo.packs().len();
    assert!(before >= 5, "{before} packs");
    repo.packd(
        &["repack", "--geometric=2", "-d", "--write-midx", "-b"],
        None,
    )
    .assert_success();
    assert!(repo.packs().len() < before, "{:?}", repo.packs());
    repo.git(&["multi-pack-index", "verify"]);
    repo.git(&["fsck", "--strict", "--no-dangling"]);
    let out = repo.git_run(&["rev-list", "--test-bitmap", "HEAD"], None);
    out.assert_success();
}

#[test]
fn a_damaged_entry_in_the_clone_range_fails_the_fetch() {
    let sb = Sandbox::new();
    let repo = history(&sb, "r.git");
    repo.packd(&["repack", "-adb"], None).assert_success();
    let head = id_of(&repo, "HEAD");
    let pack = repo
        .packs()
        .into_iter()
        .find(|p| {
            repo.git_str(&["verify-pack", "-v", p.to_str().unwrap()])
                .contains(&head)
        })
        .unwrap();
    // The last blob entry of the pack's first half: inside what a default clone sends.
    let verify = repo.git_str(&["verify-pack", "-v", pack.to_str().unwrap()]);
    let mut blobs: Vec<(u64, u64)> = verify
        .lines()
        .filter(|l| l.len() > 40 && l.contains(" blob "))
        .map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f[4].parse().unwrap(), f[3].parse().unwrap())
        })
        .collect();
    blobs.sort();
    let (offset, size) = blobs[blobs.len() / 2];
    let mut bytes = std::fs::read(&pack).unwrap();
    bytes[(offset + size - 2) as usize] ^= 0x40;
    let mut perms = std::fs::metadata(&pack).unwrap().permissions();
    #[allow(clippy::permissions_set_readonly_false)]
    perms.set_readonly(false);
    std::fs::set_permissions(&pack, perms).unwrap();
    std::fs::write(&pack, &bytes).unwrap();

    let clone = sb.init_bare("c.git");
    let url = format!("file://{}", repo.path.display());
    let up = format!("--upload-pack={PACKD} upload-pack");
    let run = clone.git_run(
        &[
            "fetch",
            "--no-write-fetch-head",
            &up,
            &url,
            "+refs/heads/*:refs/heads/*",
            "+refs/tags/*:refs/tags/*",
        ],
        None,
    );
    assert!(!run.success(), "the fetch failed");
    assert!(run.err().contains("CRC-32"), "{}", run.err());
    assert!(
        clone.git_str(&["for-each-ref"]).is_empty(),
        "no ref updated"
    );
}

#[test]
fn a_repack_of_a_bitmapped_repository_counts_with_the_bitmap() {
    let sb = Sandbox::new();
    let repo = history(&sb, "r.git");
    repo.packd(&["repack", "-adb"], None).assert_success();
    let before = repo.all_ids();
    // A push since: a loose commit outside the bitmap, on main.
    let tree = id_of(&repo, "HEAD^{tree}");
    let head = id_of(&repo, "HEAD");
    let commit = repo.git_str(&["commit-tree", "-m", "pushed", "-p", &head, &tree]);
    repo.git(&["update-ref", "refs/heads/main", commit.trim()]);
    let mut cmd = std::process::Command::new(PACKD);
    apply_env(&mut cmd, sb.path());
    // -f: a rewrite (without it, the commit is appended to the pack, see tests/append.rs).
    cmd.env("PACKD_LOG", "packd_maint=debug")
        .arg("-C")
        .arg(&repo.path)
        .args(["repack", "-adbf"]);
    let run = run_cmd(cmd, None, PACKD_TIMEOUT);
    run.assert_success();
    assert!(
        run.err().contains("counted with the bitmap"),
        "{}",
        run.err()
    );
    git_checks(&repo, true);
    let mut expected = before;
    expected.push(commit.trim().to_string());
    expected.sort();
    assert_eq!(repo.all_ids(), expected);
    assert_eq!(repo.loose_count(), 0);
    // The layout holds: a default clone is still a range of the pack.
    let clone = sb.init_bare("c.git");
    let url = format!("file://{}", repo.path.display());
    let up = format!("--upload-pack=env PACKD_LOG=packd_pack=debug {PACKD} upload-pack");
    let run = clone.git_run(
        &[
            "fetch",
            "--no-write-fetch-head",
            &up,
            &url,
            "+refs/heads/*:refs/heads/*",
            "+refs/tags/*:refs/tags/*",
        ],
        None,
    );
    run.assert_success();
    assert!(run.err().contains("as they are"), "{}", run.err());
    clone.git(&["fsck", "--strict", "--no-dangling"]);
}

#[test]
fn a_full_repack_reuses_the_old_bitmaps_and_writes_what_building_from_nothing_writes() {
    let sb = Sandbox::new();
    let repo = history(&sb, "r.git");
    // git's bitmap over git's pack, then a push since: a commit outside it, on main.
    // Nothing unreachable either (a cruft pack would make it a multi-pack-index bitmap).
    repo.git(&["repack", "-adbq"]);
    repo.git(&["prune", "--expire=now"]);
    let tree = id_of(&repo, "HEAD^{tree}");
    let head = id_of(&repo, "HEAD");
    let commit = repo.git_str(&["commit-tree", "-m", "pushed", "-p", &head, &tree]);
    repo.git(&["update-ref", "refs/heads/main", commit.trim()]);
    let mut cmd = std::process::Command::new(PACKD);
    apply_env(&mut cmd, sb.path());
    // -f: a rewrite (without it, the commit is appended to git's pack, see tests/append.rs).
    cmd.env("PACKD_LOG", "packd_reach::bitmap=debug,packd_maint=debug")
        .arg("-C")
        .arg(&repo.path)
        .args(["repack", "-adbf"]);
    let run = run_cmd(cmd, None, PACKD_TIMEOUT);
    run.assert_success();
    let built = run
        .err()
        .lines()
        .find(|l| l.contains(" reused of "))
        .unwrap_or_else(|| panic!("no bitmap log line: {}", run.err()))
        .to_string();
    assert!(!built.contains("(0 reused"), "{}", run.err());
    git_checks(&repo, true);
    let bitmap_file = |repo: &Repo| {
        let pack = repo.packs().into_iter().next().expect("one pack");
        std::fs::read(pack.with_extension("bitmap")).expect("a bitmap")
    };
    let reused = bitmap_file(&repo);
    // The same pack's bitmap built from nothing: the same bytes.
    repo.packd(&["write-bitmap", "-q"], None).assert_success();
    let from_nothing = bitmap_file(&repo);
    assert_eq!(reused, from_nothing, "{built}");
}

/// The fast-import stream of one file growing over `commits` commits (a line added by each,
/// an older line changed by every seventh): versions that git chains into long deltas.
fn growing_file(commits: u32) -> Vec<u8> {
    let mut s = String::new();
    let mut lines: Vec<String> = Vec::new();
    for c in 1..=commits {
        lines.push(format!(
            "line {c} of the growing file, added by commit {c}\n"
        ));
        if c % 7 == 0 {
            lines[(c / 2) as usize] = format!("line {} changed by commit {c}\n", c / 2);
        }
        let body: String = lines.concat();
        s += &format!(
            "commit refs/heads/main\ncommitter A <a@e.com> {} +0000\ndata 5\nc{c:03}\nM 644 inline grow.txt\ndata {}\n{body}\n",
            1_700_000_000 + c,
            body.len()
        );
    }
    s.into_bytes()
}

#[test]
fn reusing_deltas_a_repack_keeps_chains_within_depth() {
    // git's own pack with chains far past 5; a repack that reuses its deltas (no -f) must
    // still cut every chain to --depth, also where a cut object gets a new delta with reused
    // deltas resting on it (git's check_delta_limit), and with -b, where a pack with a bitmap
    // could otherwise be kept or appended to as it is.
    let sb = Sandbox::new();
    let source = sb.init_bare("source.git");
    source.fast_import(&growing_file(200));
    source.git(&["symbolic-ref", "HEAD", "refs/heads/main"]);
    source.git(&["repack", "-adfq", "--depth=50", "--window=250"]);
    let idx = source.packs()[0].with_extension("idx");
    let deepest = max_chain_length(&source, &idx);
    assert!(deepest > 20, "git's chains: {deepest}");
    for flags in ["-ad", "-adb"] {
        let repo = source.copy_as(&sb, &format!("r{flags}.git"));
        repo.packd(&["repack", flags, "--depth=5"], None)
            .assert_success();
        repo.git(&["fsck", "--strict", "--no-dangling"]);
        for pack in repo.packs() {
            let idx = pack.with_extension("idx");
            let deepest = max_chain_length(&repo, &idx);
            assert!(
                deepest <= 5,
                "{flags}: a chain of {deepest} in {}",
                idx.display()
            );
        }
        // The deltas were reused, not all searched again: most objects are still deltas.
        let verify = repo.git_str(&["verify-pack", "-v", repo.packs()[0].to_str().unwrap()]);
        let deltas = verify
            .lines()
            .filter(|l| l.len() > 40 && l.split_whitespace().count() >= 7)
            .count();
        assert!(deltas > 150, "{flags}: {deltas} deltas\n{verify}");
    }
}
