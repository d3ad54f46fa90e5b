//! Many threads reading one object database at once, through one small shared delta base cache:
//! every object must come back intact (its content hashes to its id) whatever the interleaving.

use packd_odb::{IdOrder, ObjectId, Repository, RepositoryOptions};
use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};

fn git(dir: &Path, args: &[&str]) {
    let status = Command::new("git")
        .args(args)
        .current_dir(dir)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("HOME", dir)
        .status()
        .expect("git runs");
    assert!(status.success(), "git {args:?} failed");
}

/// A repository with long delta chains: 200 revisions of 5 files, repacked at depth 50.
fn deep_repo(dir: &Path) {
    git(dir, &["init", "-q", "--bare", "repo.git"]);
    let repo = dir.join("repo.git");
    let mut stream = Vec::new();
    let mut files: Vec<Vec<String>> = (0..4)
        .map(|f| (0..200).map(|l| format!("file {f} line {l}\n")).collect())
        .collect();
    let mut seed = 42u64;
    let mut noisy: Vec<u8> = Vec::new();
    for rev in 0..200u32 {
        for (f, lines) in files.iter_mut().enumerate() {
            let at = (rev as usize * 7 + f * 13) % lines.len();
            lines[at] = format!("file {f} line {at} revision {rev}\n");
        }
        writeln!(stream, "commit refs/heads/main").unwrap();
        writeln!(
            stream,
            "committer T <t@example.com> {} +0000",
            1_600_000_000 + rev
        )
        .unwrap();
        let msg = format!("revision {rev}");
        writeln!(stream, "data {}\n{msg}", msg.len()).unwrap();
        for (f, lines) in files.iter().enumerate() {
            let body: String = lines.concat();
            writeln!(stream, "M 100644 inline dir/file{f}.txt").unwrap();
            writeln!(stream, "data {}", body.len()).unwrap();
            stream.extend_from_slice(body.as_bytes());
            writeln!(stream).unwrap();
        }
        // A binary file whose revisions each overwrite 4 KiB with compressible bytes of every
        // value (the AND of two random bytes): deltas either way carry kilobytes of literal
        // inserts, so their zlib streams open with a dynamic Huffman table of over a hundred
        // bytes, before the delta's size header.
        if noisy.is_empty() {
            noisy = vec![0u8; 16 << 10];
        }
        let at = (rev as usize % 4) << 12;
        for byte in &mut noisy[at..at + 4096] {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            *byte = ((seed >> 56) & (seed >> 48)) as u8;
        }
        writeln!(stream, "M 100644 inline noisy.bin").unwrap();
        writeln!(stream, "data {}", noisy.len()).unwrap();
        stream.extend_from_slice(&noisy);
        writeln!(stream).unwrap();
    }
    let mut child = Command::new("git")
        .args(["fast-import", "--quiet"])
        .current_dir(&repo)
        .stdin(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(&stream).unwrap();
    assert!(child.wait().unwrap().success());
    git(&repo, &["repack", "-adfq", "--depth=50", "--window=50"]);
}

#[test]
fn many_threads_read_every_object_intact() {
    let dir = tempfile::tempdir().unwrap();
    deep_repo(dir.path());
    let repo = Repository::open(
        &dir.path().join("repo.git"),
        &RepositoryOptions {
            cache_budget: Some(64 << 10),
            ..RepositoryOptions::default()
        },
    )
    .unwrap();
    let ids = repo.objects().all_ids(IdOrder::Sorted).unwrap();
    assert!(ids.len() > 1000, "only {} objects", ids.len());
    std::thread::scope(|s| {
        for t in 0..8usize {
            let repo = &repo;
            let ids = &ids;
            s.spawn(move || {
                // Each thread walks the ids from a different start and stride.
                let n = ids.len();
                for i in 0..n {
                    let id = ids[(i * (2 * t + 1) + t * 97) % n];
                    let object = repo.objects().read(&id).unwrap().expect("present");
                    assert_eq!(ObjectId::compute(object.kind, &object.data).unwrap(), id);
                    let header = repo.objects().header(&id).unwrap().unwrap();
                    assert_eq!(
                        (header.kind, header.size),
                        (object.kind, object.data.len() as u64)
                    );
                }
            });
        }
    });
    let stats = repo.objects().cache_stats();
    assert!(stats.hits > 0 && stats.evictions > 0, "{stats:?}");
}
