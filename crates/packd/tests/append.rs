//! `packd repack -adb` on a repository whose reachable objects are one bitmapped pack plus
//! what pushes left beside it (a fast-import pack, a thin pack fixed by `git index-pack
//! --fix-thin` that repeats objects of the bitmapped pack, loose commits, a merge and a tag, an
//! unreachable blob): the bitmapped pack's bytes are kept as they are at the start of the new
//! pack, each other reachable object is written once after them, and stock git accepts the
//! result (`fsck --strict`, `verify-pack -v`, `rev-list --test-bitmap` on old and new tips,
//! `rev-list --use-bitmap-index` answering as without, `commit-graph verify`); a mirror clone
//! from `packd serve` is the new pack file as it is. With nothing outside the bitmapped pack,
//! the pack, its bitmap and the commit-graph are kept as they are.

mod common;
mod serve_support;

use common::*;
use serve_support::{only_pack_of, pack_object_count, Fixture};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// The packs that are not cruft packs.
fn main_packs(repo: &Repo) -> Vec<PathBuf> {
    repo.packs()
        .into_iter()
        .filter(|p| !p.with_extension("mtimes").exists())
        .collect()
}

/// The ids a pack's index lists, in index order (repeats kept).
fn index_ids(repo: &Repo, pack: &Path) -> Vec<String> {
    let idx = std::fs::read(pack.with_extension("idx")).unwrap();
    let out = repo.git_stdin(&["show-index"], &idx);
    String::from_utf8(out)
        .unwrap()
        .lines()
        .map(|l| l.split(' ').nth(1).unwrap().to_string())
        .collect()
}

/// `git rev-list --test-bitmap REV` passes.
fn test_bitmap(repo: &Repo, rev: &str) {
    let out = repo.git_run(&["rev-list", "--test-bitmap", rev], None);
    out.assert_success();
    assert!(out.err().contains("OK!"), "{rev}: {}", out.err());
}

/// The ids `rev-list --objects --all` lists, with or without the bitmap.
fn listed(repo: &Repo, bitmap: bool) -> BTreeSet<String> {
    let mut args = vec!["rev-list", "--objects", "--all"];
    if bitmap {
        args.push("--use-bitmap-index");
    }
    repo.git_str(&args)
        .lines()
        .map(|l| l[..40].to_string())
        .collect()
}

/// `packd repack -adb` with the maintenance debug log: its stderr.
fn packd_repack(repo: &Repo, sb: &Sandbox) -> String {
    let mut cmd = std::process::Command::new(PACKD);
    apply_env(&mut cmd, sb.path());
    cmd.env("PACKD_LOG", "packd_maint=debug")
        .arg("-C")
        .arg(&repo.path)
        .args(["repack", "-adb"]);
    let run = run_cmd(cmd, None, PACKD_TIMEOUT);
    run.assert_success();
    run.err()
}

/// Pushes after the bitmapped pack: a fast-import pack (a big file), a thin pack of one more
/// commit fixed by index-pack (it copies its delta bases, objects of the bitmapped pack, into
/// itself), a loose commit on a new branch, a loose annotated tag, an unreachable blob.
fn push_things(f: &Fixture) {
    let repo = &f.repo;
    f.commit_big_file("second.bin", 12, 1_800_000_100);
    // One text file grown by a line: the thin pack's blob is a delta against the old one.
    let path = repo
        .git_str(&["ls-tree", "-r", "--name-only", "main"])
        .lines()
        .find(|p| p.ends_with(".txt"))
        .unwrap()
        .to_string();
    let mut body = repo.git(&["cat-file", "blob", &format!("main:{path}")]);
    body.extend_from_slice(b"one more line\n");
    let tip = repo.git_str(&["rev-parse", "main"]);
    let mut fi = FastImport::with_time(1_800_000_200);
    fi.commit(
        "refs/heads/main",
        Some(&tip),
        "grown\n",
        &[common::inline(&path, body)],
    );
    // Imported into a scratch repository sharing the objects, sent thin from there.
    let scratch = f.sandbox.init_bare("scratch.git");
    std::fs::write(
        scratch.objects_dir().join("info/alternates"),
        format!("{}\n", repo.objects_dir().display()),
    )
    .unwrap();
    scratch.git(&["update-ref", "refs/heads/main", &tip]);
    scratch.fast_import(&fi.finish());
    let new_tip = scratch.git_str(&["rev-parse", "main"]);
    let thin = scratch.git_stdin(
        &["pack-objects", "--thin", "--stdout", "--revs", "-q"],
        format!("{new_tip}\n^{tip}\n").as_bytes(),
    );
    let before: BTreeSet<PathBuf> = repo.packs().into_iter().collect();
    repo.git_stdin(&["index-pack", "--stdin", "--fix-thin"], &thin);
    repo.git(&["update-ref", "refs/heads/main", &new_tip]);
    let fixed = repo
        .packs()
        .into_iter()
        .find(|p| !before.contains(p))
        .expect("index-pack wrote a pack");
    assert!(
        index_ids(repo, &fixed).len() > 3,
        "the thin pack's bases were added to it"
    );
    let side = repo.commit_on("main~2", "a topic\n");
    repo.git(&["update-ref", "refs/heads/topic", &side]);
    // A merge of two new commits.
    let tree = repo.git_str(&["rev-parse", "main^{tree}"]);
    let merge = repo.git_stdin(
        &["commit-tree", &tree, "-p", "main", "-p", "topic"],
        b"merged\n",
    );
    let merge = String::from_utf8(merge).unwrap().trim().to_string();
    repo.git(&["update-ref", "refs/heads/merged", &merge]);
    repo.git(&["tag", "-a", "-m", "since\n", "since", "main~1"]);
    repo.git_stdin(&["hash-object", "-w", "--stdin"], b"nothing reaches this\n");
}

#[test]
fn repack_appends_pushed_objects_after_the_bitmapped_pack() {
    let f = Fixture::new();
    let old = f.repack_whole();
    let old_tip = f.repo.git_str(&["rev-parse", "main"]);
    let base_ids: BTreeSet<String> = index_ids(&f.repo, &main_packs(&f.repo)[0])
        .into_iter()
        .collect();
    push_things(&f);
    let repo = &f.repo;
    // The index-pack'ed pack repeats objects of the bitmapped pack.
    let repeated = repo
        .packs()
        .iter()
        .flat_map(|p| index_ids(repo, p))
        .filter(|id| base_ids.contains(id))
        .count();
    assert!(repeated > base_ids.len(), "some objects are in two packs");
    let ids_before = repo.all_ids();

    let log = packd_repack(repo, &f.sandbox);
    assert!(log.contains("append: pack/pack-"), "{log}");

    let packs = main_packs(repo);
    assert_eq!(packs.len(), 1, "{packs:?}");
    let new = std::fs::read(&packs[0]).unwrap();
    // The bitmapped pack's entries as they were, then each other reachable object once.
    assert_same_bytes(
        "the old pack's entries",
        &old[12..old.len() - 20],
        &new[12..old.len() - 20],
    );
    let reachable: usize = repo
        .git_str(&["rev-list", "--objects", "--all", "--count"])
        .parse()
        .unwrap();
    assert_eq!(pack_object_count(&new) as usize, reachable);
    let in_new = index_ids(repo, &packs[0]);
    assert_eq!(
        in_new.iter().collect::<BTreeSet<_>>().len(),
        in_new.len(),
        "no object twice"
    );
    assert_eq!(repo.all_ids(), ids_before, "no object lost");
    assert_eq!(repo.loose_count(), 0);

    repo.git(&["fsck", "--strict", "--no-dangling"]);
    for pack in repo.packs() {
        repo.git(&["verify-pack", "-v", pack.to_str().unwrap()]);
    }
    for rev in [
        old_tip.as_str(),
        "main",
        "main~1",
        "topic",
        "since^{commit}",
    ] {
        test_bitmap(repo, rev);
    }
    assert_eq!(listed(repo, true), listed(repo, false));
    repo.git(&["commit-graph", "verify"]);

    // A mirror clone from packd serve: the new pack file as it is.
    let server = f.pack_logging_server(&["--clone-cache-bytes", "0"]);
    let dst = f.mirror_clone("2", &server.http_url("repo.git"), "mirror.git");
    assert_same_bytes("the mirror clone's pack", &new, &only_pack_of(&dst));
    let log = server.log_text();
    assert!(log.contains("sent as file ranges"), "{log}");
}

#[test]
fn with_nothing_outside_the_bitmapped_pack_repack_keeps_it_as_it_is() {
    let f = Fixture::new();
    f.repack_whole();
    let repo = &f.repo;
    repo.git(&["commit-graph", "write", "--reachable"]);
    repo.git_stdin(&["hash-object", "-w", "--stdin"], b"nothing reaches this\n");
    let pack = main_packs(repo).remove(0);
    let files = |ext: &str| std::fs::read(pack.with_extension(ext)).unwrap();
    let (pack_bytes, idx, bitmap) = (files("pack"), files("idx"), files("bitmap"));
    let graph = repo.objects_dir().join("info/commit-graph");
    let graph_bytes = std::fs::read(&graph).unwrap();
    let graph_time = std::fs::metadata(&graph).unwrap().modified().unwrap();

    let log = packd_repack(repo, &f.sandbox);
    assert!(log.contains("unchanged: true"), "{log}");
    assert_eq!(main_packs(repo), std::slice::from_ref(&pack));
    assert_eq!(files("pack"), pack_bytes);
    assert_eq!(files("idx"), idx);
    assert_eq!(files("bitmap"), bitmap);
    assert_eq!(std::fs::read(&graph).unwrap(), graph_bytes);
    assert_eq!(
        std::fs::metadata(&graph).unwrap().modified().unwrap(),
        graph_time,
        "the commit-graph is not written again"
    );
    // The unreachable blob went to a cruft pack.
    assert_eq!(repo.loose_count(), 0);
    assert_eq!(repo.packs().len(), 2);
    repo.git(&["fsck", "--strict", "--no-dangling"]);
    test_bitmap(repo, "main");
    assert_eq!(listed(repo, true), listed(repo, false));
}

/// `packd repack -adb` taking the append path, killed at random points: git finds the
/// repository whole with every object, and the next repack finishes the job.
#[test]
fn an_append_killed_anywhere_leaves_a_whole_repository() {
    let f = Fixture::new();
    f.repack_whole();
    push_things(&f);
    let objects = f.repo.all_ids();
    let started = std::time::Instant::now();
    let probe = f.repo.copy_as(&f.sandbox, "probe.git");
    packd_repack(&probe, &f.sandbox);
    let span = started.elapsed().as_micros().max(1000) as u64;
    let mut rng = Rng::new(0x5eed);
    for round in 0..12 {
        let repo = f.repo.copy_as(&f.sandbox, &format!("k{round}.git"));
        let mut child = std::process::Command::new(PACKD);
        apply_env(&mut child, f.sandbox.path());
        let mut child = child
            .arg("-C")
            .arg(&repo.path)
            .args(["repack", "-adb"])
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        std::thread::sleep(std::time::Duration::from_micros(rng.next_u64() % span));
        let _ = child.kill();
        let _ = child.wait();
        repo.git(&["fsck", "--strict", "--no-dangling"]);
        assert_eq!(repo.all_ids(), objects, "round {round}: no object lost");
        packd_repack(&repo, &f.sandbox);
        repo.git(&["fsck", "--strict", "--no-dangling"]);
        assert_eq!(main_packs(&repo).len(), 1, "round {round}");
        test_bitmap(&repo, "main");
        assert_eq!(listed(&repo, true), listed(&repo, false), "round {round}");
    }
}

/// After packd's own `repack -adb` with unreachable objects (a cruft pack beside the
/// reachable one), the reachable pack has a bitmap of its own, as git's `repack -adb --cruft`
/// gives it, not a multi-pack-index's; so the next `repack -adb` after a push appends to it.
#[test]
fn packd_s_own_repack_with_a_cruft_pack_is_appended_to_next() {
    let f = Fixture::new();
    let repo = &f.repo;
    repo.git_stdin(&["hash-object", "-w", "--stdin"], b"nothing reaches this\n");
    packd_repack(repo, &f.sandbox);
    let packs = main_packs(repo);
    assert_eq!(packs.len(), 1);
    assert!(packs[0].with_extension("bitmap").exists(), "a pack bitmap");
    assert!(!repo.objects_dir().join("pack/multi-pack-index").exists());
    assert_eq!(repo.packs().len(), 2, "and a cruft pack");
    test_bitmap(repo, "main");
    let old = std::fs::read(&packs[0]).unwrap();
    repo.commit_on_main("pushed\n");
    let log = packd_repack(repo, &f.sandbox);
    assert!(log.contains("append: pack/pack-"), "{log}");
    let new = std::fs::read(&main_packs(repo)[0]).unwrap();
    assert_same_bytes(
        "the old pack's entries",
        &old[12..old.len() - 20],
        &new[12..old.len() - 20],
    );
    repo.git(&["fsck", "--strict", "--no-dangling"]);
    test_bitmap(repo, "main");
    assert_eq!(listed(repo, true), listed(repo, false));
}
