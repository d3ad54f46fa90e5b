//! `packd serve`'s maintenance after pushes, driven by real git: pushes over HTTP leave the
//! packs in a geometric progression with a multi-pack-index and its bitmap that git checks
//! and accepts; clones and fetches afterwards get what git's own copy holds; the maintenance
//! lock keeps a maintenance by hand and the server's apart; pushes racing maintenance lose
//! nothing. Also `packd maintenance run` against `git repack --geometric=2`.

mod common;
mod serve_support;

use common::{Repo, Sandbox};
use serve_support::Server;
use std::path::Path;
use std::time::{Duration, Instant};

/// Object counts of the repository's packs, ascending.
fn pack_sizes(repo: &Repo) -> Vec<usize> {
    let mut sizes: Vec<usize> = std::fs::read_dir(repo.pack_dir())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "idx"))
        .map(|idx| {
            let out = repo.git_stdin(&["show-index"], &std::fs::read(idx).unwrap());
            out.split(|&b| b == b'\n').filter(|l| !l.is_empty()).count()
        })
        .collect();
    sizes.sort_unstable();
    sizes
}

/// How many maintenances the server logged as done.
fn runs_done(server: &Server) -> usize {
    server.log_text().matches("maintenance done").count()
}

/// Waits until the server logged `n` maintenances done.
fn wait_runs(server: &Server, n: usize) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while runs_done(server) < n {
        assert!(
            Instant::now() < deadline,
            "{} maintenances done, {n} expected; log:\n{}",
            runs_done(server),
            server.log_text()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Waits until no maintenance ran for a second (none queued or running is then very likely;
/// the checks that follow would fail on a half-done one only if it deleted before it wrote,
/// which is what they test).
fn wait_quiet(server: &Server) {
    let mut last = (runs_done(server), Instant::now());
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        std::thread::sleep(Duration::from_millis(50));
        let now = runs_done(server);
        if now != last.0 {
            last = (now, Instant::now());
        } else if last.1.elapsed() > Duration::from_millis(1500) {
            return;
        }
        assert!(Instant::now() < deadline, "maintenance never settled");
    }
}

/// Commits `files` new files (named by `round`) in `client`.
fn commit_round(client: &Repo, round: usize, files: usize) {
    for f in 0..files {
        std::fs::write(
            client.path.join(format!("r{round}-f{f}")),
            format!("round {round} file {f}\n{}\n", "x".repeat(f * 7 + round)),
        )
        .unwrap();
    }
    client.git(&["add", "-A"]);
    client.git(&["commit", "-q", "-m", &format!("round {round}")]);
}

/// git's checks of everything maintenance writes.
fn assert_git_accepts(repo: &Repo, tip: &str) {
    assert!(repo.pack_dir().join("multi-pack-index").is_file());
    repo.git(&["multi-pack-index", "verify"]);
    let bitmap = repo.git_run(&["rev-list", "--test-bitmap", tip], None);
    assert!(bitmap.success(), "test-bitmap: {}", bitmap.err());
    assert!(bitmap.err().contains("OK!"), "{}", bitmap.err());
    assert!(
        bitmap.err().contains("Bitmap v1 test"),
        "the bitmap used is the multi-pack-index's: {}",
        bitmap.err()
    );
    let fsck = repo.git_run(&["fsck", "--strict", "--no-dangling"], None);
    assert!(fsck.success(), "fsck: {}{}", fsck.out(), fsck.err());
    assert!(
        repo.objects_dir().join("info/commit-graph").is_file(),
        "the commit-graph was written"
    );
    repo.git(&["commit-graph", "verify"]);
}

/// Every object id reachable from all refs, sorted.
fn reachable(repo: &Repo) -> String {
    let out = repo.git_str(&["rev-list", "--objects", "--all"]);
    let mut ids: Vec<&str> = out.lines().map(|l| l.split(' ').next().unwrap()).collect();
    ids.sort_unstable();
    ids.join("\n")
}

/// An empty bare repository `root/r.git` to serve, and the root.
fn served_repo(sb: &Sandbox) -> (std::path::PathBuf, Repo) {
    let root = sb.path().join("root");
    std::fs::create_dir_all(&root).unwrap();
    sb.git_in(&root, &["init", "-q", "--bare", "r.git"]);
    let served = Repo {
        path: root.join("r.git"),
        git_dir: root.join("r.git"),
        home: sb.home.clone(),
    };
    (root, served)
}

#[test]
fn ten_pushes_leave_a_geometric_progression_with_a_multi_pack_index_and_its_bitmap() {
    let sb = Sandbox::new();
    let (root, served) = served_repo(&sb);
    let server = Server::start(&sb, &root, &["--allow-push"]);
    let url = server.http_url("r.git");
    let client = sb.init("client");
    let mut early_clone = None;
    for round in 1..=10 {
        commit_round(&client, round, [3, 1, 8, 2, 20, 1, 1, 5, 40, 2][round - 1]);
        client.git(&["push", "-q", &url, "HEAD:refs/heads/main"]);
        // One run per push: each push waits for the one before it to be maintained.
        wait_runs(&server, round);
        if round == 5 {
            sb.git_in(sb.path(), &["clone", "-q", "--bare", &url, "early.git"]);
            early_clone = Some(sb.path().join("early.git"));
        }
    }
    let sizes = pack_sizes(&served);
    assert!(
        sizes.windows(2).all(|w| w[1] >= 2 * w[0]),
        "not a geometric progression: {sizes:?}"
    );
    assert!(sizes.len() < 10, "pushes' packs were rolled up: {sizes:?}");
    assert_git_accepts(&served, "main");
    let log = server.log_text();
    // The first push's run has no bitmap to leave alone: it writes everything.
    assert!(log.contains("kind=\"geometric\""), "{log}");
    let line = log
        .lines()
        .rfind(|l| l.contains("maintenance done"))
        .unwrap();
    for field in [
        "repo=",
        "kind=",
        "cpu_ms=",
        "wall_ms=",
        "packs_before=",
        "packs_after=",
    ] {
        assert!(line.contains(field), "{field} missing from {line}");
    }

    // A clone and a fetch now get what git's own copy holds.
    sb.git_in(sb.path(), &["clone", "-q", "--bare", &url, "late.git"]);
    let late = Repo {
        path: sb.path().join("late.git"),
        git_dir: sb.path().join("late.git"),
        home: sb.home.clone(),
    };
    late.git(&["fsck", "--strict"]);
    assert_eq!(reachable(&late), reachable(&served));
    let early = early_clone.unwrap();
    let early = Repo {
        path: early.clone(),
        git_dir: early,
        home: sb.home.clone(),
    };
    early.git(&["fetch", "-q", &url, "+refs/heads/*:refs/heads/*"]);
    early.git(&["fsck", "--strict"]);
    assert_eq!(reachable(&early), reachable(&served));
    assert_eq!(
        early.git_str(&["rev-parse", "main"]),
        served.git_str(&["rev-parse", "main"])
    );
}

#[test]
fn pushes_racing_maintenance_lose_nothing() {
    let sb = Sandbox::new();
    let (root, served) = served_repo(&sb);
    let server = Server::start(&sb, &root, &["--allow-push"]);
    let url = server.http_url("r.git");
    let client = sb.init("client");
    let mut pushed = Vec::new();
    for round in 1..=16 {
        // Each round on a branch of its own, pushed while the maintenance of the pushes
        // before it runs; every other round fetches right after its push.
        client.git(&["checkout", "-q", "-B", &format!("b{round}")]);
        commit_round(&client, round, 1 + round % 5);
        let tip = client.git_str(&["rev-parse", "HEAD"]).trim().to_string();
        client.git(&["push", "-q", &url, &format!("HEAD:refs/heads/b{round}")]);
        if round % 2 == 0 {
            let probe = sb.path().join(format!("probe{round}.git"));
            sb.git_in(
                sb.path(),
                &["clone", "-q", "--bare", &url, probe.to_str().unwrap()],
            );
        }
        pushed.push((format!("b{round}"), tip));
    }
    wait_quiet(&server);
    for (branch, tip) in &pushed {
        assert_eq!(
            served
                .git_str(&["rev-parse", &format!("refs/heads/{branch}")])
                .trim(),
            tip
        );
        served.git(&["cat-file", "-e", &format!("{tip}^{{tree}}")]);
    }
    let fsck = served.git_run(&["fsck", "--strict", "--no-dangling"], None);
    assert!(fsck.success(), "fsck: {}{}", fsck.out(), fsck.err());
    served.git(&["multi-pack-index", "verify"]);
    assert!(runs_done(&server) >= 1);
    assert!(
        runs_done(&server) <= 16,
        "at most one run a push (coalesced runs fewer)"
    );
    assert!(
        !server.log_text().contains("maintenance failed"),
        "{}",
        server.log_text()
    );
}

#[test]
fn maintenance_by_hand_and_the_servers_exclude_each_other() {
    let sb = Sandbox::new();
    let root = sb.path().join("root");
    std::fs::create_dir_all(&root).unwrap();
    sb.git_in(&root, &["init", "-q", "--bare", "r.git"]);
    let git_dir = root.join("r.git");
    let served = Repo {
        path: git_dir.clone(),
        git_dir: git_dir.clone(),
        home: sb.home.clone(),
    };
    let server = Server::start(&sb, &root, &["--allow-push"]);
    let url = server.http_url("r.git");
    let client = sb.init("client");
    commit_round(&client, 1, 2);
    client.git(&["push", "-q", &url, "HEAD:refs/heads/main"]);
    wait_runs(&server, 1);

    // A maintenance holds the lock (as a `packd repack` or the server's would).
    let held = packd_maint::lock::try_maintenance(&git_dir.join("objects")).unwrap();
    let by_hand = served.packd(&["maintenance", "run"], None);
    assert!(!by_hand.success(), "ran beside another maintenance");
    assert!(
        by_hand
            .err()
            .contains("another maintenance of this repository is running"),
        "{}",
        by_hand.err()
    );
    let packs_before = pack_sizes(&served);
    commit_round(&client, 2, 2);
    client.git(&["push", "-q", &url, "HEAD:refs/heads/main"]);
    let deadline = Instant::now() + Duration::from_secs(30);
    while !server.log_text().contains("maintenance skipped") {
        assert!(Instant::now() < deadline, "{}", server.log_text());
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(
        pack_sizes(&served).len(),
        packs_before.len() + 1,
        "the server's maintenance left the repository alone while the lock was held"
    );
    drop(held);

    // Free again: by hand it runs, and the server's next one too.
    let by_hand = served.packd(&["maintenance", "run"], None);
    assert!(by_hand.success(), "{}", by_hand.err());
    assert!(
        by_hand.err().contains("geometric maintenance:"),
        "{}",
        by_hand.err()
    );
    assert_git_accepts(&served, "main");
    commit_round(&client, 3, 2);
    client.git(&["push", "-q", &url, "HEAD:refs/heads/main"]);
    wait_runs(&server, 2);
    assert_git_accepts(&served, "main");
}

#[test]
fn no_maintenance_leaves_the_pushes_packs_alone() {
    let sb = Sandbox::new();
    let (root, served) = served_repo(&sb);
    let server = Server::start(&sb, &root, &["--allow-push", "--no-maintenance"]);
    let url = server.http_url("r.git");
    let client = sb.init("client");
    for round in 1..=3 {
        commit_round(&client, round, 2);
        client.git(&["push", "-q", &url, "HEAD:refs/heads/main"]);
    }
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(pack_sizes(&served).len(), 3);
    assert!(!served.pack_dir().join("multi-pack-index").exists());
    assert_eq!(runs_done(&server), 0);
}

/// Makes `sizes.len()` packs in `repo`, pack `i` holding about `sizes[i]` new objects, by
/// fast-import (one pack each), and `loose` loose objects.
fn make_packs(repo: &Repo, sizes: &[usize], loose: usize) {
    // fast-import makes loose objects of packs smaller than this (100 by default).
    repo.git(&["config", "fastimport.unpackLimit", "0"]);
    let mut mark = 0;
    for (i, &n) in sizes.iter().enumerate() {
        let mut stream = String::new();
        // n - 2 blobs, a tree, a commit.
        let blobs = n.saturating_sub(2).max(1);
        for b in 0..blobs {
            mark += 1;
            let data = format!("pack {i} blob {b}\n");
            stream += &format!("blob\nmark :{mark}\ndata {}\n{data}\n", data.len());
        }
        stream += &format!(
            "commit refs/heads/p{i}\ncommitter T <t@t> {} +0000\ndata 2\np{i}\n",
            1_700_000_000 + i
        );
        for b in 0..blobs {
            stream += &format!("M 100644 :{} f{b}\n", mark - blobs + 1 + b);
        }
        stream += "\n";
        repo.fast_import(stream.as_bytes());
    }
    for l in 0..loose {
        repo.git_stdin(
            &["hash-object", "-w", "--stdin"],
            format!("loose {l}\n").as_bytes(),
        );
    }
}

#[test]
fn maintenance_run_rolls_up_what_git_repack_geometric_rolls_up() {
    for (sizes, loose) in [
        // Intact: nothing rolled up (but the loose objects, into a pack of their own).
        (&[4usize, 10, 30][..], 0usize),
        (&[4, 10, 30], 3),
        // Two small ones roll up.
        (&[4, 4, 20, 50], 0),
        // The progression breaks at 3, 3; the rolled-up 6 would outgrow 7, which joins.
        (&[3, 3, 7, 40, 100], 0),
        (&[3, 3, 5, 40, 100], 2),
        // Equal large packs: everything.
        (&[3, 3, 12, 24, 24], 0),
    ] {
        let sb = Sandbox::new();
        let base = sb.init_bare("base.git");
        make_packs(&base, sizes, loose);
        let by_git = base.copy_as(&sb, "git.git");
        let by_packd = base.copy_as(&sb, "packd.git");
        by_git.git(&["repack", "-q", "--geometric=2", "-d", "--write-midx"]);
        let run = by_packd.packd(&["maintenance", "run", "--quiet"], None);
        assert!(run.success(), "{}", run.err());
        assert_eq!(
            pack_sizes(&by_packd),
            pack_sizes(&by_git),
            "packs {sizes:?} with {loose} loose objects (before: {:?})",
            pack_sizes(&base)
        );
        assert_eq!(reachable(&by_packd), reachable(&by_git));
        let loose_left = by_packd.git_str(&["count-objects"]);
        assert!(loose_left.starts_with("0 objects"), "{loose_left}");
        assert_git_accepts(&by_packd, "p0");
        by_packd.git(&["verify-pack", &pack_idx_any(&by_packd)]);
    }
}

/// Adds one pack of `n` new objects to `repo` (`n - 2` blobs, a tree, a root commit on
/// `refs/heads/<branch>`) by fast-import, as a push leaves one.
fn add_pack(repo: &Repo, branch: &str, n: usize) {
    repo.git(&["config", "fastimport.unpackLimit", "0"]);
    let blobs = n.saturating_sub(2).max(1);
    let mut stream = String::new();
    for b in 0..blobs {
        let data = format!("{branch} blob {b}\n");
        stream += &format!("blob\nmark :{}\ndata {}\n{data}\n", b + 1, data.len());
    }
    stream += &format!(
        "commit refs/heads/{branch}\ncommitter T <t@t> 1700000000 +0000\ndata 2\n{branch}\n"
    );
    for b in 0..blobs {
        stream += &format!("M 100644 :{} f{b}\n", b + 1);
    }
    stream += "\n";
    repo.fast_import(stream.as_bytes());
}

/// The names in the repository's pack directory, sorted.
fn pack_dir_names(repo: &Repo) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(repo.pack_dir())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

#[test]
fn a_small_push_outside_a_large_bitmap_only_rolls_up_the_new_packs() {
    let sb = Sandbox::new();
    let repo = sb.init_bare("r.git");
    make_packs(&repo, &[400], 0);
    repo.git(&["repack", "-adbq"]);
    let bitmapped: Vec<String> = pack_dir_names(&repo);
    assert!(
        bitmapped.iter().any(|n| n.ends_with(".bitmap")),
        "{bitmapped:?}"
    );
    let graph = repo.git_dir.join("objects/info/commit-graph");
    assert!(!graph.exists());

    // Two pushes' packs and two loose objects: 15 objects outside the bitmap's 400, under
    // the 1/20 that makes maintenance write the repository-wide files again.
    add_pack(&repo, "s1", 6);
    add_pack(&repo, "s2", 7);
    for l in 0..2 {
        repo.git_stdin(
            &["hash-object", "-w", "--stdin"],
            format!("loose {l}\n").as_bytes(),
        );
    }
    let run = repo.packd(&["maintenance", "run"], None);
    assert!(run.success(), "{}", run.err());
    assert!(run.err().contains("roll-up maintenance"), "{}", run.err());
    // The small packs and the loose objects rolled up into one pack; the bitmapped pack and
    // its files untouched; no multi-pack-index, no commit-graph.
    assert_eq!(pack_sizes(&repo), vec![15, 400]);
    let names = pack_dir_names(&repo);
    for name in &bitmapped {
        assert!(names.contains(name), "{name} gone: {names:?}");
    }
    assert_eq!(names.len(), bitmapped.len() + 3, "{names:?}");
    assert!(
        !names.iter().any(|n| n.starts_with("multi-pack-index")),
        "{names:?}"
    );
    assert!(!graph.exists());
    assert!(repo.git_str(&["count-objects"]).starts_with("0 objects"));
    let fsck = repo.git_run(&["fsck", "--strict", "--no-dangling"], None);
    assert!(fsck.success(), "fsck: {}{}", fsck.out(), fsck.err());
    let test = repo.git_run(&["rev-list", "--test-bitmap", "p0"], None);
    assert!(test.err().contains("OK!"), "{}", test.err());

    // Past the threshold (15 + 30 > 400 / 20): everything outside appended to the bitmapped
    // pack, which becomes the only one, with bitmaps that git checks.
    add_pack(&repo, "s3", 30);
    let run = repo.packd(&["maintenance", "run"], None);
    assert!(run.success(), "{}", run.err());
    assert!(run.err().contains("append maintenance"), "{}", run.err());
    // The two loose blobs nothing reaches went to a cruft pack.
    assert_eq!(pack_sizes(&repo), vec![2, 443]);
    assert_one_bitmapped_pack(&repo, &["p0", "s1", "s2", "s3"]);
}

/// git's checks of a repository that maintenance left as one pack with its bitmap (and
/// perhaps a cruft pack), and `--test-bitmap` on each of `tips`.
fn assert_one_bitmapped_pack(repo: &Repo, tips: &[&str]) {
    let names = pack_dir_names(repo);
    let cruft = |pack: &String| names.contains(&pack.replace(".pack", ".mtimes"));
    assert_eq!(
        names
            .iter()
            .filter(|n| n.ends_with(".pack") && !cruft(n))
            .count(),
        1,
        "{names:?}"
    );
    assert_eq!(
        names.iter().filter(|n| n.ends_with(".bitmap")).count(),
        1,
        "{names:?}"
    );
    assert!(
        !names.iter().any(|n| n.starts_with("multi-pack-index")),
        "{names:?}"
    );
    for idx in idx_files(repo) {
        repo.git(&["verify-pack", idx.to_str().unwrap()]);
    }
    let fsck = repo.git_run(&["fsck", "--strict", "--no-dangling"], None);
    assert!(fsck.success(), "fsck: {}{}", fsck.out(), fsck.err());
    for tip in tips {
        let test = repo.git_run(&["rev-list", "--test-bitmap", tip], None);
        assert!(test.err().contains("OK!"), "{tip}: {}", test.err());
    }
    assert!(repo.git_str(&["count-objects"]).starts_with("0 objects"));
}

#[test]
fn pushes_settle_into_the_bitmapped_pack() {
    let sb = Sandbox::new();
    let (root, served) = served_repo(&sb);
    make_packs(&served, &[400], 0);
    served.git(&["repack", "-adbq"]);
    let server = Server::start(&sb, &root, &["--allow-push", "--maintenance-settle", "1"]);
    let url = server.http_url("r.git");
    let client = sb.path().join("client");
    sb.git_in(sb.path(), &["clone", "-q", &url, "client"]);
    let client = Repo {
        path: client.clone(),
        git_dir: client.join(".git"),
        home: sb.home.clone(),
    };
    client.git(&["checkout", "-q", "-b", "main"]);
    for round in 1..=3 {
        commit_round(&client, round, 4);
        client.git(&["push", "-q", &url, "HEAD:refs/heads/main"]);
    }
    // Each push's maintenance only rolls up (12 commits' worth of objects are far under
    // 400 / 20); a second later the settled run appends them to the bitmapped pack.
    let deadline = Instant::now() + Duration::from_secs(60);
    while !server.log_text().contains("kind=\"append\"") {
        assert!(
            Instant::now() < deadline,
            "no settled append; log:\n{}",
            server.log_text()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    wait_quiet(&server);
    assert_one_bitmapped_pack(&served, &["main", "p0"]);
    let log = server.log_text();
    assert!(log.contains("kind=\"roll-up\""), "{log}");
    assert_eq!(
        log.matches("kind=\"append\"").count(),
        1,
        "one settled run: {log}"
    );
    // A mirror clone is now the pack as it is, and gets every object.
    sb.git_in(sb.path(), &["clone", "-q", "--mirror", &url, "mirror.git"]);
    let mirror = Repo {
        path: sb.path().join("mirror.git"),
        git_dir: sb.path().join("mirror.git"),
        home: sb.home.clone(),
    };
    mirror.git(&["fsck", "--strict"]);
    assert_eq!(reachable(&mirror), reachable(&served));
    let sent = pack_dir_names(&mirror);
    let kept = pack_dir_names(&served);
    let pack = |names: &[String]| names.iter().find(|n| n.ends_with(".pack")).cloned();
    assert_eq!(
        pack(&sent),
        pack(&kept),
        "the mirror clone got the pack file itself"
    );
}

/// One `.idx` of the repository, as a path.
fn pack_idx_any(repo: &Repo) -> String {
    std::fs::read_dir(repo.pack_dir())
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|e| e == "idx"))
        .map(|p: std::path::PathBuf| p.display().to_string())
        .unwrap()
}

#[test]
fn maintenance_run_full_repacks_everything_into_one_pack() {
    let sb = Sandbox::new();
    let repo = sb.init_bare("r.git");
    make_packs(&repo, &[4, 4, 20, 50], 2);
    let before = reachable(&repo);
    let run = repo.packd(&["maintenance", "run", "--full"], None);
    assert!(run.success(), "{}", run.err());
    assert!(
        run.err().contains("full maintenance: 4 packs"),
        "{}",
        run.err()
    );
    assert_eq!(reachable(&repo), before);
    let fsck = repo.git_run(&["fsck", "--strict", "--no-dangling"], None);
    assert!(fsck.success(), "fsck: {}{}", fsck.out(), fsck.err());
    // The reachable objects in one pack with its bitmap (the loose ones, unreachable, in a
    // cruft pack or kept loose until they expire).
    let bitmaps: Vec<_> = std::fs::read_dir(repo.pack_dir())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".bitmap"))
        .collect();
    assert_eq!(bitmaps.len(), 1, "{bitmaps:?}");
    let test = repo.git_run(&["rev-list", "--test-bitmap", "p0"], None);
    assert!(test.err().contains("OK!"), "{}", test.err());
}

/// The number of delta entries in the pack of `idx` (`git verify-pack -v`).
fn deltas_in(repo: &Repo, idx: &Path) -> usize {
    let out = repo.git_str(&["verify-pack", "-v", idx.to_str().unwrap()]);
    out.lines()
        .filter(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            f.len() == 7 && f[0].len() == 40
        })
        .count()
}

/// The `.idx` files of the repository.
fn idx_files(repo: &Repo) -> Vec<std::path::PathBuf> {
    std::fs::read_dir(repo.pack_dir())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "idx"))
        .collect()
}

#[test]
fn a_rolled_up_packs_deltas_stay_deltas() {
    let sb = Sandbox::new();
    let (root, served) = served_repo(&sb);
    let server = Server::start(&sb, &root, &["--allow-push", "--no-maintenance"]);
    let url = server.http_url("r.git");
    let client = sb.init("client");
    // One large file changed a little each push: thin packs of deltas against the last push's
    // blob, completed by the server with that base appended whole.
    let mut text: String = (0..2000)
        .map(|i| format!("line {i} of the file\n"))
        .collect();
    for round in 0..6 {
        text.push_str(&format!("round {round}\n"));
        std::fs::write(client.path.join("big"), &text).unwrap();
        client.git(&["add", "big"]);
        client.git(&["commit", "-q", "-m", &format!("round {round}")]);
        client.git(&["push", "-q", &url, "HEAD:refs/heads/main"]);
    }
    let before: usize = idx_files(&served)
        .iter()
        .map(|i| deltas_in(&served, i))
        .sum();
    let objects_before: usize = pack_sizes(&served).iter().sum();
    assert!(before >= 4, "the pushes sent deltas: {before}");
    let run = served.packd(&["maintenance", "run", "--quiet"], None);
    assert!(run.success(), "{}", run.err());
    let after: usize = idx_files(&served)
        .iter()
        .map(|i| deltas_in(&served, i))
        .sum();
    let objects_after: usize = pack_sizes(&served).iter().sum();
    // The appended bases, duplicates of the older packs' objects, are dropped; every delta
    // is kept (reused against its base's copy from the older pack).
    assert!(
        objects_after < objects_before,
        "the duplicates were dropped"
    );
    assert_eq!(pack_sizes(&served).len(), 1, "all rolled up");
    assert!(
        after >= before,
        "{before} deltas before, {after} after ({objects_before} -> {objects_after} objects)"
    );
    assert_git_accepts(&served, "main");
}

#[test]
fn a_stop_during_maintenance_leaves_a_sound_repository() {
    for grace in ["0", "30"] {
        let sb = Sandbox::new();
        let root = sb.path().join("root");
        std::fs::create_dir_all(&root).unwrap();
        sb.git_in(&root, &["init", "-q", "--bare", "r.git"]);
        let served = Repo {
            path: root.join("r.git"),
            git_dir: root.join("r.git"),
            home: sb.home.clone(),
        };
        let mut server = Server::start(&sb, &root, &["--allow-push", "--shutdown-grace", grace]);
        let url = server.http_url("r.git");
        let client = sb.init_bare("client.git");
        // Pushes large enough that the maintenance of the last runs when the signal comes.
        make_packs(&client, &[3000, 3000, 20], 0);
        for branch in ["p0", "p1", "p2"] {
            client.git(&["push", "-q", &url, &format!("{branch}:refs/heads/{branch}")]);
        }
        server.signal(libc::SIGTERM);
        let status = server
            .wait_exit(Duration::from_secs(60))
            .expect("the server exits");
        assert!(status.success(), "grace {grace}: {status}");
        let fsck = served.git_run(&["fsck", "--strict", "--no-dangling"], None);
        assert!(
            fsck.success(),
            "grace {grace}: {}{}",
            fsck.out(),
            fsck.err()
        );
        assert_eq!(reachable(&served), reachable(&client), "grace {grace}");
        if served.pack_dir().join("multi-pack-index").exists() {
            served.git(&["multi-pack-index", "verify"]);
        }
        // The lock went with the server: a maintenance by hand runs.
        let run = served.packd(&["maintenance", "run", "--quiet"], None);
        assert!(run.success(), "grace {grace}: {}", run.err());
        assert_git_accepts(&served, "p0");
    }
}
