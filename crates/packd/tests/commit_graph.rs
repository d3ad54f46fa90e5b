//! Reading git's commit-graph: every commit's tree, parents (octopus merges included) and date
//! as git wrote them, from one file and from a split chain; walks that use it give git's
//! answers; a damaged or disabled graph is not used, with one warning, and walks still answer.

mod common;

use common::*;
use packd_odb::graph::CommitGraph;
use packd_odb::{ObjectId, Repository, RepositoryOptions};

/// main (30 commits), topic (12, forked from main's 10th), a merge of topic into main and an
/// octopus merge of three branches.
fn history(sb: &Sandbox) -> Repo {
    let repo = sb.init_bare("graph.git");
    let mut fi = FastImport::new();
    let mut gen = HistoryGen::new(3, 10, 30);
    let main = gen.commits(&mut fi, "refs/heads/main", 30, false);
    fi.commit(
        "refs/heads/topic",
        Some(&format!(":{}", main[9])),
        "fork\n",
        &[inline("topic.txt", "topic\n")],
    );
    gen.commits(&mut fi, "refs/heads/topic", 12, false);
    repo.fast_import(&fi.finish());
    let tree = repo.git_str(&["rev-parse", "main^{tree}"]);
    let merge = repo.git_str(&[
        "commit-tree",
        &tree,
        "-p",
        "main",
        "-p",
        "topic",
        "-m",
        "merge",
    ]);
    let octo = repo.git_str(&[
        "commit-tree",
        &tree,
        "-p",
        &merge,
        "-p",
        "topic~2",
        "-p",
        "main~7",
        "-p",
        "main~20",
        "-m",
        "octopus",
    ]);
    repo.git(&["update-ref", "refs/heads/main", &octo]);
    repo
}

fn open(repo: &Repo) -> Repository {
    Repository::open(&repo.git_dir, &RepositoryOptions::default()).unwrap()
}

/// Every commit's tree, parents and time from the graph equal git's.
fn check_every_commit(repo: &Repo, graph: &CommitGraph) -> usize {
    let log = repo.git_str(&["log", "--all", "--format=%H %T %ct %P"]);
    let mut n = 0;
    for line in log.lines() {
        let f: Vec<&str> = line.split(' ').collect();
        let id = ObjectId::from_hex(f[0]).unwrap();
        let pos = graph
            .lookup(&id)
            .unwrap_or_else(|| panic!("{id} not in the graph"));
        assert_eq!(graph.id(pos).unwrap(), id);
        let c = graph.commit(pos).unwrap();
        assert_eq!(c.tree.to_hex(), f[1], "tree of {id}");
        assert_eq!(c.time.to_string(), f[2], "time of {id}");
        let parents: Vec<String> = c.parents.iter().map(|p| p.to_hex()).collect();
        let expected: Vec<&str> = f[3..].iter().copied().filter(|p| !p.is_empty()).collect();
        assert_eq!(parents, expected, "parents of {id}");
        n += 1;
    }
    n
}

fn same_walks(repo: &Repo) {
    for q in [
        &["--objects", "main", "--not", "topic"][..],
        &["main^3", "main^4", "--not", "main~1~5"],
        &["--count", "--all"],
        &["--objects", "main^2", "^main~4"],
    ] {
        let mut args = vec!["rev-list"];
        args.extend_from_slice(q);
        let sorted = |b: Vec<u8>| {
            let mut v: Vec<String> = String::from_utf8(b)
                .unwrap()
                .lines()
                .map(str::to_string)
                .collect();
            v.sort();
            v
        };
        assert_eq!(
            sorted(repo.git(&args)),
            sorted(repo.packd(&args, None).assert_success().stdout.clone()),
            "rev-list {q:?}"
        );
    }
}

#[test]
fn one_file_and_a_split_chain_read_as_git_wrote_them() {
    let sb = Sandbox::new();
    let repo = history(&sb);
    for version in ["1", "2"] {
        repo.git(&[
            "-c",
            &format!("commitGraph.generationVersion={version}"),
            "commit-graph",
            "write",
            "--reachable",
        ]);
        let r = open(&repo);
        let graph = r.commit_graph().expect("a commit-graph");
        assert_eq!(check_every_commit(&repo, graph), graph.len() as usize);
        assert!(graph
            .lookup(&ObjectId::from_hex(&"ab".repeat(20)).unwrap())
            .is_none());
        same_walks(&repo);
    }
    // A chain of layers: the single file goes, then each write adds a layer on top.
    std::fs::remove_file(repo.objects_dir().join("info/commit-graph")).unwrap();
    repo.git(&["commit-graph", "write", "--reachable", "--split=no-merge"]);
    for i in 0..2 {
        let mut fi = FastImport::with_time(1_900_000_000 + i * 1000);
        let branch = format!("refs/heads/more{i}");
        fi.reset(&branch, &repo.git_str(&["rev-parse", "main"]));
        let mut gen = HistoryGen::new(20 + i, 10, 30);
        gen.commits(&mut fi, &branch, 5, false);
        repo.fast_import(&fi.finish());
        repo.git(&["commit-graph", "write", "--reachable", "--split=no-merge"]);
    }
    let chain = std::fs::read_to_string(
        repo.objects_dir()
            .join("info/commit-graphs/commit-graph-chain"),
    )
    .unwrap();
    assert!(chain.lines().count() >= 3, "{chain}");
    let r = open(&repo);
    let graph = r.commit_graph().expect("a chain");
    assert_eq!(check_every_commit(&repo, graph), graph.len() as usize);
    same_walks(&repo);
}

#[test]
fn a_damaged_or_disabled_graph_is_not_used() {
    let sb = Sandbox::new();
    let repo = history(&sb);
    repo.git(&["commit-graph", "write", "--reachable"]);
    let file = repo.objects_dir().join("info/commit-graph");
    let good = std::fs::read(&file).unwrap();
    let storage = packd_storage::LocalStorage::new(repo.objects_dir());

    // Truncations and a bad signature are errors naming the file.
    for cut in [0, 7, 40, good.len() / 2, good.len() - 21] {
        std::fs::write(&file, &good[..cut]).unwrap();
        let err = CommitGraph::open(&storage, packd_odb::HashKind::Sha1).unwrap_err();
        assert!(err.to_string().contains("commit-graph"), "{err}");
    }
    // Flipped bytes anywhere: open and every read return, never panic.
    for at in (0..good.len()).step_by(7) {
        let mut bad = good.clone();
        bad[at] ^= 0xa5;
        std::fs::write(&file, &bad).unwrap();
        if let Ok(Some(graph)) = CommitGraph::open(&storage, packd_odb::HashKind::Sha1) {
            for pos in 0..graph.len() + 2 {
                let _ = graph.commit(pos);
                let _ = graph.id(pos);
            }
        }
    }
    // A parent position past the commits: an error for that commit.
    let mut bad = good.clone();
    let cdat = find_chunk(&good, b"CDAT");
    bad[cdat + 20..cdat + 24].copy_from_slice(&0x0fff_ffffu32.to_be_bytes());
    std::fs::write(&file, &bad).unwrap();
    let graph = CommitGraph::open(&storage, packd_odb::HashKind::Sha1)
        .unwrap()
        .unwrap();
    assert!(graph
        .commit(0)
        .unwrap_err()
        .to_string()
        .contains("out of range"));

    // Through the repository: one warning, no graph, and walks still give git's answers.
    std::fs::write(&file, &good[..good.len() / 2]).unwrap();
    assert!(open(&repo).commit_graph().is_none());
    let run = repo.packd(&["rev-list", "--count", "main"], None);
    run.assert_success();
    assert_eq!(
        run.out().trim(),
        repo.git_str(&["rev-list", "--count", "main"])
    );
    assert_eq!(
        run.err().lines().filter(|l| l.contains("WARN")).count(),
        1,
        "{}",
        run.err()
    );
    assert!(run.err().contains("commit-graph"), "{}", run.err());

    std::fs::write(&file, &good).unwrap();
    assert!(open(&repo).commit_graph().is_some());
    repo.git(&["config", "core.commitGraph", "false"]);
    assert!(open(&repo).commit_graph().is_none());
}

/// Where chunk `id` starts in a commit-graph file.
fn find_chunk(bytes: &[u8], id: &[u8; 4]) -> usize {
    let chunks = bytes[6] as usize;
    (0..chunks)
        .map(|i| 8 + 12 * i)
        .find(|&at| &bytes[at..at + 4] == id)
        .map(|at| u64::from_be_bytes(bytes[at + 4..at + 12].try_into().unwrap()) as usize)
        .expect("chunk present")
}
