//! Writing git's commit-graph (`packd commit-graph write`, `packd_reach::commit_graph`): what
//! packd writes passes `git commit-graph verify`, is the file git writes for the same commits
//! byte for byte (merges, octopus merges, several roots, dates that overflow GDA2 into GDO2,
//! generation v1 and v2, --stdin-commits), is read back by packd's reader, replaces a split
//! chain, is not written at all for a bad commit, and never overwrites a graph another writer
//! (packd, or stock git) put there after it began, nor one git holds the lock of.

mod common;

use common::*;
use packd_odb::graph::CommitGraph;
use packd_odb::{ObjectId, Repository, RepositoryOptions};
use packd_reach::commit_graph::{
    prepare_commit_graph, reachable_tips, write_commit_graph, CommitGraphError, GraphOptions,
};
use packd_storage::StorageError;
use std::fmt::Write as _;

/// A fast-import stream with commits of chosen dates and parents.
struct Stream {
    text: String,
    marks: u32,
}

impl Stream {
    fn new() -> Stream {
        Stream {
            text: String::new(),
            marks: 0,
        }
    }

    /// A commit on `branch` dated `date`, with `parents` (marks); returns its mark.
    fn commit(&mut self, branch: &str, date: u64, parents: &[u32]) -> u32 {
        self.marks += 1;
        let m = self.marks;
        let _ = write!(
            self.text,
            "commit {branch}\nmark :{m}\nauthor A <a@example.com> {date} +0000\n\
             committer C <c@example.com> {date} +0000\ndata 3\nc{}\n",
            m % 10
        );
        for (k, p) in parents.iter().enumerate() {
            let verb = if k == 0 { "from" } else { "merge" };
            let _ = writeln!(self.text, "{verb} :{p}");
        }
        let content = format!("{m}\n");
        let _ = write!(
            self.text,
            "M 100644 inline f{}\ndata {}\n{content}\n",
            m % 3,
            content.len()
        );
        m
    }

    fn tag(&mut self, name: &str, mark: u32) {
        let _ = write!(
            self.text,
            "tag {name}\nfrom :{mark}\ntagger T <t@example.com> 1700000000 +0000\ndata 2\nt\n"
        );
    }

    fn finish(mut self) -> Vec<u8> {
        self.text.push_str("done\n");
        self.text.into_bytes()
    }
}

/// main with a merge and an octopus merge of four parents, a topic branch, a second and a
/// third root, a commit dated past 2^32 seconds (its high date bits used) whose children are
/// dated 5 and 0 (corrected-date offsets past GDA2's 31 bits: GDO2), and an annotated tag.
fn awkward_history(sb: &Sandbox) -> Repo {
    let repo = sb.init_bare("awkward.git");
    let mut s = Stream::new();
    let mut t = 1_700_000_000;
    let mut main = vec![s.commit("refs/heads/main", t, &[])];
    for _ in 0..12 {
        t += 60;
        main.push(s.commit("refs/heads/main", t, &[*main.last().unwrap()]));
    }
    let mut topic = vec![s.commit("refs/heads/topic", t + 7, &[main[3]])];
    for k in 0..6 {
        topic.push(s.commit("refs/heads/topic", t + 100 + k, &[*topic.last().unwrap()]));
    }
    let root2 = s.commit("refs/heads/root2", 1_600_000_000, &[]);
    let root3 = s.commit("refs/heads/root3", 1_800_000_000, &[]);
    let future = s.commit("refs/heads/future", 8_204_889_600, &[main[5]]);
    let past = s.commit("refs/heads/future", 5, &[future]);
    let epoch = s.commit("refs/heads/future", 0, &[past]);
    let merge = s.commit(
        "refs/heads/main",
        t + 500,
        &[*main.last().unwrap(), *topic.last().unwrap()],
    );
    let octopus = s.commit("refs/heads/main", t + 600, &[merge, topic[2], root2, epoch]);
    s.commit("refs/heads/side", t + 700, &[octopus, root3, main[1]]);
    s.tag("v1", octopus);
    repo.fast_import(&s.finish());
    repo
}

fn graph_path(repo: &Repo) -> std::path::PathBuf {
    repo.objects_dir().join("info/commit-graph")
}

/// git's own commit-graph for `args` (then removed, so packd writes into a clean directory).
fn gits_graph(repo: &Repo, config: &[&str], args: &[&str], stdin: Option<&[u8]>) -> Vec<u8> {
    let mut all: Vec<&str> = config.iter().flat_map(|c| ["-c", c]).collect();
    all.extend(["commit-graph", "write", "--no-progress"]);
    all.extend(args);
    repo.git_run(&all, stdin).assert_success();
    let bytes = std::fs::read(graph_path(repo)).unwrap();
    std::fs::remove_file(graph_path(repo)).unwrap();
    bytes
}

fn verify(repo: &Repo) {
    let run = repo.git_run(&["commit-graph", "verify", "--no-progress"], None);
    assert!(
        run.success() && run.err().is_empty(),
        "git commit-graph verify: {}",
        run.err()
    );
}

/// Every commit git lists reads back from packd's reader with git's tree, parents and date.
fn read_back(repo: &Repo, expected_commits: usize) {
    let opened = Repository::open(&repo.git_dir, &RepositoryOptions::default()).unwrap();
    let graph = CommitGraph::open(
        opened.objects().own_storage().unwrap().as_ref(),
        opened.objects().hash_kind(),
    )
    .unwrap()
    .expect("a commit-graph");
    assert_eq!(graph.len() as usize, expected_commits);
    let log = repo.git_str(&["log", "--all", "--format=%H %T %ct %P"]);
    for line in log.lines() {
        let f: Vec<&str> = line.split(' ').filter(|f| !f.is_empty()).collect();
        let id = ObjectId::from_hex(f[0]).unwrap();
        let c = graph
            .commit(graph.lookup(&id).expect("in the graph"))
            .unwrap();
        assert_eq!(c.tree.to_hex(), f[1], "tree of {id}");
        assert_eq!(c.time.to_string(), f[2], "date of {id}");
        let parents: Vec<String> = c.parents.iter().map(|p| p.to_hex()).collect();
        assert_eq!(parents, f[3..], "parents of {id}");
    }
}

fn chunk_ids(graph: &[u8]) -> Vec<String> {
    (0..graph[6] as usize)
        .map(|i| String::from_utf8_lossy(&graph[8 + 12 * i..12 + 12 * i]).into_owned())
        .collect()
}

#[test]
fn the_file_is_gits_byte_for_byte_and_verifies() {
    let sb = Sandbox::new();
    let repo = awkward_history(&sb);
    let commits = repo.git_str(&["rev-list", "--all", "--count"]);
    let git = gits_graph(
        &repo,
        &["commitGraph.generationVersion=2"],
        &["--reachable"],
        None,
    );
    assert_eq!(
        chunk_ids(&git),
        ["OIDF", "OIDL", "CDAT", "GDA2", "GDO2", "EDGE"],
        "the history exercises every chunk"
    );

    repo.packd(&["commit-graph", "write"], None)
        .assert_success();
    verify(&repo);
    let packd = std::fs::read(graph_path(&repo)).unwrap();
    assert_same_bytes("commit-graph", &git, &packd);
    read_back(&repo, commits.parse().unwrap());
    // Read-only, as git leaves it.
    let mode = std::fs::metadata(graph_path(&repo)).unwrap().permissions();
    assert!(mode.readonly());
    assert!(files_in(&repo.objects_dir().join("info"))
        .iter()
        .all(|f| !f.starts_with("tmp")));
}

#[test]
fn the_library_reports_what_it_wrote() {
    let sb = Sandbox::new();
    let repo = awkward_history(&sb);
    let opened = Repository::open(&repo.git_dir, &RepositoryOptions::default()).unwrap();
    let tips = reachable_tips(&opened).unwrap();
    let storage = opened.objects().own_storage().unwrap().clone();
    let written = write_commit_graph(
        &opened,
        &*storage,
        &tips,
        &GraphOptions {
            generation_v2: true,
            progress: None,
        },
    )
    .unwrap();
    verify(&repo);
    assert_eq!(written.commits, 28);
    // The octopus (3 in EDGE) and side (2).
    assert_eq!(written.extra_edges, 5);
    // Dated 5 and 0 below a commit dated 8,204,889,600, and the octopus and side above them.
    assert_eq!(written.overflows, 4);
    assert_eq!(
        written.bytes,
        std::fs::metadata(graph_path(&repo)).unwrap().len()
    );
    let bytes = std::fs::read(graph_path(&repo)).unwrap();
    assert_eq!(written.checksum.as_bytes()[..], bytes[bytes.len() - 20..]);
    assert!(!written.removed_chain);
}

#[test]
fn generation_v1_is_gits_too() {
    let sb = Sandbox::new();
    let repo = awkward_history(&sb);
    let git = gits_graph(
        &repo,
        &["commitGraph.generationVersion=1"],
        &["--reachable"],
        None,
    );
    assert_eq!(chunk_ids(&git), ["OIDF", "OIDL", "CDAT", "EDGE"]);
    repo.git(&["config", "commitGraph.generationVersion", "1"]);
    repo.packd(&["commit-graph", "write", "--no-progress"], None)
        .assert_success();
    verify(&repo);
    assert_same_bytes(
        "commit-graph",
        &git,
        &std::fs::read(graph_path(&repo)).unwrap(),
    );
}

#[test]
fn stdin_commits_start_where_git_starts() {
    let sb = Sandbox::new();
    let repo = awkward_history(&sb);
    // A tag (peeled), a commit, and a tree (skipped, as git skips it).
    let input = format!(
        "{}\n{}\n{}\n",
        repo.git_str(&["rev-parse", "v1"]),
        repo.git_str(&["rev-parse", "topic~2"]),
        repo.git_str(&["rev-parse", "root3^{tree}"]),
    );
    let git = gits_graph(&repo, &[], &["--stdin-commits"], Some(input.as_bytes()));
    repo.packd(
        &["commit-graph", "write", "--stdin-commits"],
        Some(input.as_bytes()),
    )
    .assert_success();
    verify(&repo);
    assert_same_bytes(
        "commit-graph",
        &git,
        &std::fs::read(graph_path(&repo)).unwrap(),
    );

    let bad = repo.packd(
        &["commit-graph", "write", "--stdin-commits"],
        Some(b"nothex\n"),
    );
    assert!(!bad.success());
    assert!(bad.err().contains("nothex"), "{}", bad.err());
}

#[test]
fn a_split_chain_is_replaced_by_one_file() {
    let sb = Sandbox::new();
    let repo = awkward_history(&sb);
    repo.git(&[
        "commit-graph",
        "write",
        "--reachable",
        "--split",
        "--no-progress",
    ]);
    let chain_dir = repo.objects_dir().join("info/commit-graphs");
    assert!(chain_dir.join("commit-graph-chain").exists());
    assert!(!graph_path(&repo).exists());

    let opened = Repository::open(&repo.git_dir, &RepositoryOptions::default()).unwrap();
    let tips = reachable_tips(&opened).unwrap();
    let storage = opened.objects().own_storage().unwrap().clone();
    let options = GraphOptions::for_repository(&opened);
    let written = write_commit_graph(&opened, &*storage, &tips, &options).unwrap();
    assert!(written.removed_chain);
    assert!(graph_path(&repo).exists());
    assert_eq!(files_in(&chain_dir), Vec::<String>::new());
    verify(&repo);
}

#[test]
fn a_bad_commit_is_named_and_nothing_is_written() {
    let sb = Sandbox::new();
    let repo = awkward_history(&sb);
    repo.packd(&["commit-graph", "write"], None)
        .assert_success();
    let before = std::fs::read(graph_path(&repo)).unwrap();

    // A commit whose parent does not exist, on a branch.
    let tree = repo.git_str(&["rev-parse", "main^{tree}"]);
    let missing = "1234567890123456789012345678901234567890";
    let body = format!(
        "tree {tree}\nparent {missing}\nauthor A <a> 1 +0000\ncommitter C <c> 1 +0000\n\nx\n"
    );
    let orphan = String::from_utf8(repo.git_stdin(
        &[
            "hash-object",
            "-t",
            "commit",
            "-w",
            "--literally",
            "--stdin",
        ],
        body.as_bytes(),
    ))
    .unwrap()
    .trim()
    .to_string();
    repo.git(&["update-ref", "refs/heads/broken", &orphan]);
    let run = repo.packd(&["commit-graph", "write"], None);
    assert!(!run.success());
    assert!(
        run.err().contains(missing) && run.err().contains(&orphan),
        "names the missing commit and its child: {}",
        run.err()
    );
    assert_eq!(std::fs::read(graph_path(&repo)).unwrap(), before);

    // A commit without a tree line.
    let bogus = String::from_utf8(repo.git_stdin(
        &[
            "hash-object",
            "-t",
            "commit",
            "-w",
            "--literally",
            "--stdin",
        ],
        b"author A <a> 1 +0000\ncommitter C <c> 1 +0000\n\nx\n",
    ))
    .unwrap()
    .trim()
    .to_string();
    // (git's update-ref refuses to point a ref at it.)
    std::fs::write(repo.git_dir.join("refs/heads/broken"), format!("{bogus}\n")).unwrap();
    let run = repo.packd(&["commit-graph", "write"], None);
    assert!(!run.success());
    assert!(run.err().contains(&bogus), "{}", run.err());
    assert_eq!(std::fs::read(graph_path(&repo)).unwrap(), before);
}

#[test]
fn a_shallow_or_graphless_repository_gets_no_graph_as_in_git() {
    let sb = Sandbox::new();
    let repo = awkward_history(&sb);
    let main = repo.git_str(&["rev-parse", "main"]);
    std::fs::write(repo.git_dir.join("shallow"), format!("{main}\n")).unwrap();
    let run = repo.packd(&["commit-graph", "write"], None);
    assert!(run.success());
    assert!(run.err().contains("shallow"), "{}", run.err());
    assert!(!graph_path(&repo).exists());

    std::fs::remove_file(repo.git_dir.join("shallow")).unwrap();
    repo.git(&["config", "core.commitGraph", "false"]);
    let run = repo.packd(&["commit-graph", "write"], None);
    assert!(run.success());
    assert!(run.err().contains("core.commitGraph"), "{}", run.err());
    assert!(!graph_path(&repo).exists());
}

#[test]
fn a_deep_history_is_walked_without_recursion() {
    let sb = Sandbox::new();
    let repo = sb.init_bare("deep.git");
    let mut s = Stream::new();
    let mut last = s.commit("refs/heads/main", 1_000_000_000, &[]);
    for k in 1..20_000u64 {
        last = s.commit("refs/heads/main", 1_000_000_000 + k, &[last]);
    }
    repo.fast_import(&s.finish());
    let git = gits_graph(&repo, &[], &["--reachable"], None);
    repo.packd(&["commit-graph", "write"], None)
        .assert_success();
    assert_same_bytes(
        "commit-graph",
        &git,
        &std::fs::read(graph_path(&repo)).unwrap(),
    );
}

/// The commits in the repository's commit-graph, by packd's reader.
fn graph_commits(repo: &Repo) -> u32 {
    let opened = Repository::open(&repo.git_dir, &RepositoryOptions::default()).unwrap();
    let storage = opened.objects().own_storage().unwrap();
    let graph = CommitGraph::open(storage.as_ref(), opened.objects().hash_kind()).unwrap();
    graph.expect("a commit-graph").len()
}

#[test]
fn racing_writers_cannot_both_win() {
    let sb = Sandbox::new();
    let repo = awkward_history(&sb);
    let opened = Repository::open(&repo.git_dir, &RepositoryOptions::default()).unwrap();
    let storage = opened.objects().own_storage().unwrap().clone();
    let options = GraphOptions::for_repository(&opened);
    let all = reachable_tips(&opened).unwrap();
    let total: u32 = repo
        .git_str(&["rev-list", "--all", "--count"])
        .parse()
        .unwrap();
    let some = vec![ObjectId::from_hex(&repo.git_str(&["rev-parse", "main~3"])).unwrap()];
    let is_conflict = |r: &Result<_, CommitGraphError>| {
        matches!(
            r,
            Err(CommitGraphError::Storage(StorageError::Conflict { .. }))
        )
    };

    // Two packd writers: both read the (absent) file first; the second to install loses.
    let first = prepare_commit_graph(&opened, &*storage, &some, &options).unwrap();
    let second = prepare_commit_graph(&opened, &*storage, &all, &options).unwrap();
    assert_eq!(second.commits(), total);
    let won = first.install().unwrap();
    assert!(won.commits < total);
    let lost = second.install();
    assert!(is_conflict(&lost), "{lost:?}");
    verify(&repo);
    assert_eq!(
        graph_commits(&repo),
        won.commits,
        "the first writer's graph, whole"
    );
    // Read again, the loser writes.
    write_commit_graph(&opened, &*storage, &all, &options).unwrap();
    assert_eq!(graph_commits(&repo), total);

    // Stock git writes the graph after packd read its version: packd's install is refused and
    // git's graph stays.
    let prepared = prepare_commit_graph(&opened, &*storage, &all, &options).unwrap();
    let topic = repo.git_str(&["rev-parse", "topic"]);
    repo.git_stdin(
        &["commit-graph", "write", "--no-progress", "--stdin-commits"],
        format!("{topic}\n").as_bytes(),
    );
    let gits = std::fs::read(graph_path(&repo)).unwrap();
    let lost = prepared.install();
    assert!(is_conflict(&lost), "{lost:?}");
    assert_eq!(std::fs::read(graph_path(&repo)).unwrap(), gits);
    verify(&repo);

    // While git holds the lock, packd is refused and the file is untouched.
    let lock = repo.objects_dir().join("info/commit-graph.lock");
    std::fs::write(&lock, b"").unwrap();
    let locked = write_commit_graph(&opened, &*storage, &all, &options);
    assert!(
        matches!(
            locked,
            Err(CommitGraphError::Storage(StorageError::Locked { .. }))
        ),
        "{locked:?}"
    );
    assert_eq!(std::fs::read(graph_path(&repo)).unwrap(), gits);
    std::fs::remove_file(&lock).unwrap();
    write_commit_graph(&opened, &*storage, &all, &options).unwrap();
    verify(&repo);
    read_back(&repo, total as usize);
    assert!(std::fs::metadata(graph_path(&repo))
        .unwrap()
        .permissions()
        .readonly());
}
