//! The bitmap, multi-pack-index and commit-graph writers on a bucket (a real S3 server,
//! versitygw on 127.0.0.1, started by `packd-test-s3`): a repository git made has its packs
//! put into a bucket prefix; packd opens it with its objects there (refs and config stay in the
//! git directory) and writes its `.bitmap`, `.rev`, multi-pack-index and commit-graph; nothing
//! lands on the local disk; copied out of the bucket into the repository, stock git accepts
//! them (`git rev-list --test-bitmap`, `git multi-pack-index verify`, `git commit-graph
//! verify`), and they are byte for byte the files the same writers put on a local disk. Two
//! writers of the commit-graph racing on the bucket: the second to install gets a conflict.

mod common;

use common::*;
use packd_odb::graph::CommitGraph;
use packd_odb::{ObjectId, Repository, RepositoryOptions};
use packd_reach::bitmap::write::{write_bitmap, WriteOptions};
use packd_reach::commit_graph::{
    prepare_commit_graph, reachable_tips, write_for_refs, CommitGraphError, GraphOptions,
};
use packd_reach::progress::NoProgress;
use packd_storage::{S3Config, S3Storage, Storage, StorageError};
use packd_test_s3::S3Server;
use std::fmt::Write as _;
use std::io::Write as _;
use std::path::Path;
use std::sync::Arc;

/// A server with bucket `packd`, and a storage rooted at `repos/r.git/objects` in it.
fn bucket() -> (S3Server, S3Storage) {
    let server = S3Server::start();
    server.create_bucket("packd");
    let storage = S3Storage::new(&S3Config {
        bucket: "packd".into(),
        prefix: String::new(),
        endpoint: Some(server.endpoint()),
        region: Some(packd_test_s3::REGION.into()),
        access_key_id: Some(server.access_key_id().into()),
        secret_access_key: Some(server.secret_access_key().into()),
        allow_http: false,
        ..S3Config::default()
    })
    .expect("an S3 storage");
    (server, storage.at("repos/r.git/objects"))
}

/// A history for fast-import: `count` commits on main (a few files changing), every fifth one
/// starting a commit on a branch of its own, and an annotated tag on main's tenth commit.
fn history(from: u32, count: u32) -> Vec<u8> {
    let mut text = String::new();
    for k in from..from + count {
        let date = 1_700_000_000 + u64::from(k) * 60;
        let _ = write!(
            text,
            "commit refs/heads/main\nmark :{m}\ncommitter C <c@example.com> {date} +0000\n\
             data 4\nc{k:02}\n",
            m = k + 1
        );
        if k > from {
            let _ = writeln!(text, "from :{k}");
        } else if from > 0 {
            let _ = writeln!(text, "from refs/heads/main^0");
        }
        let content = format!("line {k}\n").repeat(k as usize % 7 + 1);
        let _ = write!(
            text,
            "M 100644 inline dir{}/f{}\ndata {}\n{content}\n",
            k % 3,
            k % 4,
            content.len()
        );
        if k % 5 == 4 {
            let _ = write!(
                text,
                "commit refs/heads/b{k}\ncommitter C <c@example.com> {date} +0000\n\
                 data 3\nb{}\nfrom :{}\nM 100644 inline side\ndata 2\n{}\n\n",
                k % 10,
                k + 1,
                k % 10
            );
        }
        if k == 9 {
            let _ = write!(
                text,
                "tag v1\nfrom :{}\ntagger T <t@example.com> {date} +0000\ndata 2\nt\n",
                k + 1
            );
        }
    }
    text.push_str("done\n");
    text.into_bytes()
}

/// Puts every file of `repo`'s `objects/pack` into `storage` (through its write operations).
fn upload_packs(repo: &Repo, storage: &dyn Storage) {
    for name in files_in(&repo.pack_dir()) {
        let bytes = std::fs::read(repo.pack_dir().join(&name)).unwrap();
        let mut blob = storage.create(&format!("pack/{name}")).unwrap();
        blob.write_all(&bytes).unwrap();
        blob.publish().unwrap();
    }
}

/// A copy of `repo` named `name` with nothing in `objects/` but its empty directories: its
/// objects are in the bucket.
fn without_objects(sb: &Sandbox, repo: &Repo, name: &str) -> Repo {
    let copy = repo.copy_as(sb, name);
    for dir in ["pack", "info"] {
        let dir = copy.objects_dir().join(dir);
        for name in files_in(&dir) {
            std::fs::remove_file(dir.join(name)).unwrap();
        }
    }
    copy
}

/// Copies every blob of `storage`'s `pack/` and `info/` into `objects` (made read-only where
/// git's are), and returns their names.
fn download(storage: &dyn Storage, objects: &Path) -> Vec<String> {
    let mut names = Vec::new();
    for dir in ["pack", "info"] {
        for name in storage.list(dir).unwrap() {
            let name = format!("{dir}/{name}");
            let bytes = storage.open(&name).unwrap().read_all().unwrap();
            let path = objects.join(&name);
            if !path.exists() {
                std::fs::write(&path, &bytes).unwrap();
            }
            names.push(name);
        }
    }
    names
}

/// Opens `repo` with its objects in `storage`.
fn open_on(repo: &Repo, storage: &S3Storage) -> Repository {
    let objects: Arc<dyn Storage> = Arc::new(storage.clone());
    Repository::open_with_objects(&repo.git_dir, &RepositoryOptions::default(), vec![objects])
        .unwrap()
}

/// Runs a git check in `repo`, which must pass with nothing on stderr but what `ok` allows.
fn git_accepts(repo: &Repo, args: &[&str]) -> String {
    let run = repo.git_run(args, None);
    assert!(run.success(), "git {args:?}: {}", run.err());
    run.out() + &run.err()
}

/// The blob `name`'s bytes in `storage`.
fn blob(storage: &dyn Storage, name: &str) -> Vec<u8> {
    storage.open(name).unwrap().read_all().unwrap().to_vec()
}

#[test]
fn a_bitmap_and_commit_graph_written_into_a_bucket_are_what_git_reads() {
    let sb = Sandbox::new();
    let src = sb.init_bare("src.git");
    src.fast_import(&history(0, 40));
    src.git(&["repack", "-adq"]);
    let (_server, storage) = bucket();
    upload_packs(&src, &storage);
    let repo = without_objects(&sb, &src, "r.git");
    let opened = open_on(&repo, &storage);

    let report = write_bitmap(&opened, &storage, &WriteOptions::default(), &NoProgress).unwrap();
    assert!(
        report
            .bitmap_path
            .to_string_lossy()
            .starts_with("s3://packd/repos/r.git/objects/pack/"),
        "{}",
        report.bitmap_path.display()
    );
    assert!(report.bitmaps > 0 && report.midx_path.is_none());
    let graph = write_for_refs(&opened, &storage).unwrap();
    let commits: u32 = src
        .git_str(&["rev-list", "--all", "--count"])
        .parse()
        .unwrap();
    assert_eq!(graph.commits, commits);
    drop(opened);
    // Nothing was written to the local disk.
    assert_eq!(files_in(&repo.pack_dir()), Vec::<String>::new());
    assert_eq!(
        files_in(&repo.objects_dir().join("info")),
        Vec::<String>::new()
    );

    let names = download(&storage, &repo.objects_dir());
    let stem = files_in(&src.pack_dir())
        .into_iter()
        .find_map(|n| n.strip_suffix(".pack").map(str::to_string))
        .unwrap();
    let expected: Vec<String> = ["bitmap", "idx", "pack", "rev"]
        .iter()
        .map(|ext| format!("pack/{stem}.{ext}"))
        .chain(["info/commit-graph".to_string()])
        .collect();
    let mut sorted = names.clone();
    sorted.sort();
    let mut want = expected.clone();
    want.sort();
    assert_eq!(sorted, want);
    let out = git_accepts(&repo, &["rev-list", "--test-bitmap", "main"]);
    assert!(out.contains("OK!"), "{out}");
    git_accepts(&repo, &["commit-graph", "verify", "--no-progress"]);
    git_accepts(&repo, &["fsck", "--no-dangling", "--no-progress"]);

    // The same writers on a local disk write the same bytes, read-only as git's.
    let local = src.copy_as(&sb, "local.git");
    let opened = Repository::open(&local.git_dir, &RepositoryOptions::default()).unwrap();
    let own = opened.objects().own_storage().unwrap().clone();
    write_bitmap(&opened, &*own, &WriteOptions::default(), &NoProgress).unwrap();
    write_for_refs(&opened, &*own).unwrap();
    for name in ["bitmap", "rev"]
        .iter()
        .map(|ext| format!("pack/{stem}.{ext}"))
        .chain(["info/commit-graph".to_string()])
    {
        let path = local.objects_dir().join(&name);
        assert_same_bytes(
            &name,
            &std::fs::read(&path).unwrap(),
            &blob(&storage, &name),
        );
        assert!(
            std::fs::metadata(&path).unwrap().permissions().readonly(),
            "{name}"
        );
    }
}

#[test]
fn a_multi_pack_index_and_its_bitmap_written_into_a_bucket_are_what_git_reads() {
    let sb = Sandbox::new();
    let src = sb.init_bare("src.git");
    src.fast_import(&history(0, 25));
    src.git(&["repack", "-adq"]);
    src.fast_import(&history(25, 15));
    src.git(&["repack", "-dq"]);
    assert_eq!(src.packs().len(), 2);
    let (_server, storage) = bucket();
    upload_packs(&src, &storage);
    let repo = without_objects(&sb, &src, "r.git");
    let opened = open_on(&repo, &storage);

    let report = write_bitmap(&opened, &storage, &WriteOptions::default(), &NoProgress).unwrap();
    assert_eq!(report.packs, 2);
    assert!(report.midx_path.is_some());
    write_for_refs(&opened, &storage).unwrap();
    drop(opened);
    assert_eq!(files_in(&repo.pack_dir()), Vec::<String>::new());
    let names = download(&storage, &repo.objects_dir());
    assert!(
        names.contains(&"pack/multi-pack-index".to_string()),
        "{names:?}"
    );
    assert!(
        names
            .iter()
            .any(|n| n.starts_with("pack/multi-pack-index-") && n.ends_with(".bitmap")),
        "{names:?}"
    );
    git_accepts(&repo, &["multi-pack-index", "verify", "--no-progress"]);
    let out = git_accepts(&repo, &["rev-list", "--test-bitmap", "main"]);
    assert!(out.contains("OK!"), "{out}");
    git_accepts(&repo, &["commit-graph", "verify", "--no-progress"]);

    // A second multi-pack-index over the same packs replaces the first (the version it read).
    let opened = open_on(&repo, &storage);
    let again = write_bitmap(&opened, &storage, &WriteOptions::default(), &NoProgress).unwrap();
    assert_eq!(again.bitmap_path, report.bitmap_path);
}

#[test]
fn racing_commit_graph_writers_on_a_bucket_cannot_both_win() {
    let sb = Sandbox::new();
    let src = sb.init_bare("src.git");
    src.fast_import(&history(0, 30));
    src.git(&["repack", "-adq"]);
    let (_server, storage) = bucket();
    upload_packs(&src, &storage);
    let repo = without_objects(&sb, &src, "r.git");
    let opened = open_on(&repo, &storage);
    let options = GraphOptions::for_repository(&opened);
    let all = reachable_tips(&opened).unwrap();
    let some = vec![ObjectId::from_hex(&src.git_str(&["rev-parse", "main~10"])).unwrap()];
    let in_bucket = || {
        CommitGraph::open(&storage, opened.objects().hash_kind())
            .unwrap()
            .expect("a commit-graph in the bucket")
            .len()
    };

    let first = prepare_commit_graph(&opened, &storage, &some, &options).unwrap();
    let second = prepare_commit_graph(&opened, &storage, &all, &options).unwrap();
    let won = first.install().unwrap();
    let lost = second.install();
    assert!(
        matches!(
            lost,
            Err(CommitGraphError::Storage(StorageError::Conflict { .. }))
        ),
        "{lost:?}"
    );
    assert_eq!(in_bucket(), won.commits, "the first writer's graph, whole");
    let kept = blob(&storage, "info/commit-graph");
    // The same again once the first graph is there: the second writer read its version.
    let third = prepare_commit_graph(&opened, &storage, &all, &options).unwrap();
    let fourth = prepare_commit_graph(&opened, &storage, &some, &options).unwrap();
    let total = third.install().unwrap().commits;
    assert!(total > won.commits);
    assert!(fourth.install().is_err());
    assert_ne!(blob(&storage, "info/commit-graph"), kept);
    assert_eq!(in_bucket(), total);

    drop(opened);
    download(&storage, &repo.objects_dir());
    git_accepts(&repo, &["commit-graph", "verify", "--no-progress"]);
}
