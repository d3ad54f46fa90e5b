//! The S3 backend against a real S3 server (versitygw on 127.0.0.1, started by
//! `packd-test-s3`; installed at its pinned version by `scripts/install-s3-server.sh`):
//! put-if-absent, compare-and-swap (also raced by 8 threads), ranged reads, listing, delete,
//! and a pack git made, written through the storage and read back byte for byte, then copied
//! out of the bucket into a repository that `git verify-pack` and `git fsck --strict` pass.

use packd_storage::{S3Config, S3Storage, Storage, StorageError};
use packd_test_s3::{FaultProxy, S3Server};
use std::io::Write;
use std::path::Path;
use std::process::Command;
use std::sync::{Arc, Barrier};

/// A server with bucket `packd`, and a storage rooted at `repos/r.git/objects` in it.
fn setup() -> (S3Server, S3Storage) {
    let server = S3Server::start();
    server.create_bucket("packd");
    let storage = storage_for(&server, server.secret_access_key());
    (server, storage.at("repos/r.git/objects"))
}

/// A storage at the top of bucket `packd` of `server`, signing with `secret`.
fn storage_for(server: &S3Server, secret: &str) -> S3Storage {
    S3Storage::new(&S3Config {
        bucket: "packd".into(),
        prefix: String::new(),
        endpoint: Some(server.endpoint()),
        region: Some(packd_test_s3::REGION.into()),
        access_key_id: Some(server.access_key_id().into()),
        secret_access_key: Some(secret.into()),
        allow_http: false,
        ..S3Config::default()
    })
    .expect("an S3 storage")
}

/// Deterministic bytes (xorshift), so a wrong offset shows as wrong bytes.
fn bytes(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// Publishes blob `name` with `content`.
fn put(s: &S3Storage, name: &str, content: &[u8]) -> Result<(), StorageError> {
    let mut blob = s.create(name)?;
    blob.write_all(content).unwrap();
    blob.publish()
}

#[test]
fn an_immutable_blob_is_put_only_if_absent() {
    let (server, s) = setup();
    let mut b = s.create("pack/pack-1.pack").unwrap();
    b.write_all(b"first").unwrap();
    assert!(
        !s.exists("pack/pack-1.pack"),
        "visible before it was published"
    );
    b.publish().unwrap();
    assert_eq!(
        &s.open("pack/pack-1.pack").unwrap().read_all().unwrap()[..],
        b"first"
    );
    // The key is git's layout under the storage's prefix.
    assert_eq!(
        std::fs::read(
            server
                .bucket_dir("packd")
                .join("repos/r.git/objects/pack/pack-1.pack")
        )
        .unwrap(),
        b"first"
    );

    let err = put(&s, "pack/pack-1.pack", b"second").unwrap_err();
    assert!(matches!(err, StorageError::AlreadyExists { .. }), "{err}");
    assert!(
        err.to_string()
            .contains("s3://packd/repos/r.git/objects/pack/pack-1.pack"),
        "{err}"
    );
    assert_eq!(
        &s.open("pack/pack-1.pack").unwrap().read_all().unwrap()[..],
        b"first"
    );

    // Dropped unpublished: nothing. Renamed: published under the new name only.
    drop(s.create("pack/pack-2.pack").unwrap());
    let mut named = s.create("pack/tmp.pack").unwrap();
    named.write_all(b"third").unwrap();
    named.rename("pack/pack-3.pack").unwrap();
    assert!(named.rename("other/pack-3.pack").is_err());
    named.publish().unwrap();
    assert_eq!(s.list("pack").unwrap(), vec!["pack-1.pack", "pack-3.pack"]);
    assert!(s.create("../escape").is_err());
}

#[test]
fn racing_creates_of_one_blob_have_one_winner() {
    let (_server, s) = setup();
    let writers = 8;
    for round in 0..20 {
        let name = format!("pack/pack-{round}.idx");
        let barrier = Arc::new(Barrier::new(writers));
        let results: Vec<Result<(), StorageError>> = std::thread::scope(|scope| {
            let handles: Vec<_> = (0..writers)
                .map(|w| {
                    let (s, name, barrier) = (s.clone(), name.clone(), barrier.clone());
                    scope.spawn(move || {
                        let mut blob = s.create(&name).unwrap();
                        blob.write_all(&bytes(1024, (round * 100 + w) as u64))
                            .unwrap();
                        barrier.wait();
                        blob.publish()
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        let winners: Vec<usize> = (0..writers).filter(|&w| results[w].is_ok()).collect();
        assert_eq!(winners.len(), 1, "round {round}: {results:?}");
        for r in results.iter().filter(|r| r.is_err()) {
            assert!(
                matches!(r, Err(StorageError::AlreadyExists { .. })),
                "{r:?}"
            );
        }
        let stored = s.open(&name).unwrap().read_all().unwrap();
        assert_eq!(
            &stored[..],
            &bytes(1024, (round * 100 + winners[0]) as u64)[..]
        );
    }
}

#[test]
fn a_replace_with_a_stale_version_is_refused() {
    let (_server, s) = setup();
    assert!(s.read_versioned("stack/tables.list").unwrap().is_none());
    let v1 = s.replace("stack/tables.list", None, b"one").unwrap();
    let again = s.replace("stack/tables.list", None, b"again");
    assert!(
        matches!(again, Err(StorageError::Conflict { .. })),
        "{again:?}"
    );
    let (read, read_v) = s.read_versioned("stack/tables.list").unwrap().unwrap();
    assert_eq!((&read[..], &read_v), (&b"one"[..], &v1));

    let v2 = s.replace("stack/tables.list", Some(&v1), b"two").unwrap();
    assert_ne!(v1, v2);
    let stale = s.replace("stack/tables.list", Some(&v1), b"three");
    assert!(
        matches!(stale, Err(StorageError::Conflict { .. })),
        "{stale:?}"
    );
    let (read, read_v) = s.read_versioned("stack/tables.list").unwrap().unwrap();
    assert_eq!((&read[..], &read_v), (&b"two"[..], &v2));

    // Gone since it was read: a conflict too, and it stays gone.
    assert!(s.delete("stack/tables.list").unwrap());
    let gone = s.replace("stack/tables.list", Some(&v2), b"four");
    assert!(
        matches!(gone, Err(StorageError::Conflict { .. })),
        "{gone:?}"
    );
    assert!(!s.exists("stack/tables.list"));
}

#[test]
fn racing_replaces_have_one_winner_per_round() {
    let (_server, s) = setup();
    let writers = 8;
    let name = "stack/tables.list";
    s.replace(name, None, b"round 0").unwrap();
    for round in 1..=20 {
        let (_, version) = s.read_versioned(name).unwrap().unwrap();
        let barrier = Arc::new(Barrier::new(writers));
        let results: Vec<_> = std::thread::scope(|scope| {
            let handles: Vec<_> = (0..writers)
                .map(|w| {
                    let (s, version, barrier) = (s.clone(), version.clone(), barrier.clone());
                    scope.spawn(move || {
                        // Each writer reads for itself, as a pusher would, then all swap at once.
                        let (_, mine) = s.read_versioned(name).unwrap().unwrap();
                        assert_eq!(mine, version);
                        barrier.wait();
                        s.replace(
                            name,
                            Some(&mine),
                            format!("round {round} writer {w}").as_bytes(),
                        )
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        let winners: Vec<usize> = (0..writers).filter(|&w| results[w].is_ok()).collect();
        assert_eq!(winners.len(), 1, "round {round}: {results:?}");
        for r in results.iter().filter(|r| r.is_err()) {
            assert!(matches!(r, Err(StorageError::Conflict { .. })), "{r:?}");
        }
        let (now, now_version) = s.read_versioned(name).unwrap().unwrap();
        assert_eq!(
            String::from_utf8_lossy(&now),
            format!("round {round} writer {}", winners[0])
        );
        assert_eq!(&now_version, results[winners[0]].as_ref().unwrap());
    }
}

#[test]
fn ranged_reads_are_the_bytes() {
    let (_server, s) = setup();
    // Past the 8 MiB a new blob keeps in memory, written in pieces: what was in memory moves
    // to the spool file, which is published.
    let data = bytes(9 << 20, 7);
    let mut new = s.create("pack/pack-big.pack").unwrap();
    for piece in data.chunks(1_000_000) {
        new.write_all(piece).unwrap();
    }
    new.publish().unwrap();
    let blob = s.open("pack/pack-big.pack").unwrap();
    assert_eq!(blob.len(), data.len() as u64);
    let len = data.len() as u64;
    for r in [0..1, 0..12, 4095..70_000, len - 20..len, len..len, 3..3] {
        assert_eq!(
            &blob.read(r.clone()).unwrap()[..],
            &data[r.start as usize..r.end as usize],
            "{r:?}"
        );
    }
    let past = blob.read(len - 20..len + 1).unwrap_err();
    assert!(matches!(past, StorageError::OutOfBounds { .. }), "{past}");

    // Out of order, overlapping, neighbours, empty, far apart, and more than one batch (the
    // two whole-blob ranges pass the 16 MiB a batch asks for at once).
    let ranges = vec![
        5_000_000..5_000_100,
        10..20,
        15..40,
        40..41,
        7..7,
        len - 1..len,
        1 << 20..(1 << 20) + 65_536,
        0..len,
        1_000..2_000,
        0..len,
        33..34,
    ];
    let got: Vec<_> = blob.read_many(&ranges).collect();
    assert_eq!(got.len(), ranges.len());
    for (r, got) in ranges.iter().zip(got) {
        assert_eq!(
            &got.unwrap()[..],
            &data[r.start as usize..r.end as usize],
            "{r:?}"
        );
    }
    let with_bad: Vec<_> = blob.read_many(&[0..4, len..len + 1, 8..9]).collect();
    assert_eq!(&with_bad[0].as_ref().unwrap()[..], &data[0..4]);
    assert!(matches!(with_bad[1], Err(StorageError::OutOfBounds { .. })));
    assert_eq!(&with_bad[2].as_ref().unwrap()[..], &data[8..9]);
    assert_eq!(&blob.read_all().unwrap()[..], &data[..]);
}

#[test]
fn listing_existence_and_delete() {
    let (server, s) = setup();
    for name in ["pack/pack-a.pack", "pack/pack-a.idx", "info/packs", "x/y/z"] {
        put(&s, name, name.as_bytes()).unwrap();
    }
    put(&s.at("../refs-side"), "unused", b"").unwrap_err();
    assert_eq!(s.list("").unwrap(), vec!["info", "pack", "x"]);
    assert_eq!(s.list("pack").unwrap(), vec!["pack-a.idx", "pack-a.pack"]);
    assert_eq!(s.list("x").unwrap(), vec!["y"]);
    assert_eq!(s.list("x/").unwrap(), vec!["y"]);
    assert!(s.list("missing").unwrap().is_empty());
    // A sibling prefix that starts with the same letters is not listed.
    put(&s, "packs-other/one", b"1").unwrap();
    assert_eq!(s.list("pack").unwrap(), vec!["pack-a.idx", "pack-a.pack"]);

    assert!(s.exists("pack/pack-a.idx"));
    assert!(!s.exists("pack/pack-b.idx"));
    let missing = s.open("pack/pack-b.idx").unwrap_err();
    assert!(missing.is_not_found(), "{missing}");
    assert!(missing
        .to_string()
        .contains("s3://packd/repos/r.git/objects/pack/pack-b.idx"));

    assert!(s.delete("pack/pack-a.idx").unwrap());
    assert!(!s.delete("pack/pack-a.idx").unwrap());
    assert!(!s.exists("pack/pack-a.idx"));
    assert_eq!(s.list("pack").unwrap(), vec!["pack-a.pack"]);

    // A storage with a wrong key is refused with an error naming the blob, not a panic.
    let wrong = storage_for(&server, "not-the-secret").at("repos/r.git/objects");
    let refused = wrong.open("pack/pack-a.pack").unwrap_err();
    assert!(
        matches!(refused, StorageError::Io { .. })
            && refused
                .to_string()
                .contains("s3://packd/repos/r.git/objects/pack/pack-a.pack"),
        "{refused}"
    );
}

/// Two clients of one bucket (two servers): what one publishes or deletes in `pack/` the
/// other sees at its next listing of `pack/` (it answers from its last listing until then, as
/// the repository's stamp does), and a reftable named after a listing is always asked for.
#[test]
fn opens_after_a_listing_follow_what_other_writers_did() {
    let (server, a) = setup();
    let top_a = storage_for(&server, server.secret_access_key());
    let top_b = storage_for(&server, server.secret_access_key());
    let b = top_b.at("repos/r.git/objects");
    put(&a, "pack/pack-a.pack", b"aaaa").unwrap();
    assert_eq!(b.list("pack").unwrap(), vec!["pack-a.pack"]);
    assert_eq!(b.open("pack/pack-a.pack").unwrap().len(), 4);
    put(&a, "pack/pack-b.pack", b"bbbbbb").unwrap();
    assert!(a.delete("pack/pack-a.pack").unwrap());
    // Until b lists again it answers from its listing.
    assert!(!b.exists("pack/pack-b.pack"));
    assert_eq!(b.list("pack").unwrap(), vec!["pack-b.pack"]);
    assert!(b.exists("pack/pack-b.pack"));
    assert_eq!(
        b.open("pack/pack-b.pack").unwrap().read_all().unwrap(),
        &b"bbbbbb"[..]
    );
    assert!(!b.exists("pack/pack-a.pack"));
    assert!(b.open("pack/pack-a.pack").unwrap_err().is_not_found());
    // What a client publishes itself it sees at once.
    put(&b, "pack/pack-c.pack", b"c").unwrap();
    assert!(b.exists("pack/pack-c.pack"));
    // Reftables are not answered from listings when absent.
    let (ta, tb) = (
        top_a.at("repos/r.git/reftable"),
        top_b.at("repos/r.git/reftable"),
    );
    put(&ta, "0x000000000001-0x000000000001-00000000.ref", b"t1").unwrap();
    assert_eq!(tb.list("").unwrap().len(), 1);
    put(&ta, "0x000000000002-0x000000000002-00000000.ref", b"t2").unwrap();
    assert!(tb.exists("0x000000000002-0x000000000002-00000000.ref"));
}

/// `git ARGS` in `dir`, panicking with its stderr if it fails; its stdout.
fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(args)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .output()
        .expect("git runs");
    assert!(
        out.status.success(),
        "git {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A bare repository made by `git fast-import`: 300 commits editing a few files, packed whole.
fn make_repo(dir: &Path) {
    git(dir, &["init", "--bare", "-q", "."]);
    let mut stream = String::new();
    for i in 0..300 {
        stream.push_str(&format!(
            "commit refs/heads/main\nmark :{}\ncommitter T <t@example.com> {} +0000\ndata <<EOF\nchange {i}\nEOF\n",
            i + 1,
            1_700_000_000 + i
        ));
        if i > 0 {
            stream.push_str(&format!("from :{i}\n"));
        }
        for f in 0..3 {
            let body: String = (0..40)
                .map(|l| format!("file {f} line {l} rev {}\n", (i + l) / 7))
                .collect();
            stream.push_str(&format!(
                "M 100644 inline f{f}.txt\ndata {}\n{body}\n",
                body.len()
            ));
        }
    }
    let mut child = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(["fast-import", "--quiet"])
        .stdin(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(stream.as_bytes())
        .unwrap();
    assert!(child.wait().unwrap().success());
    git(dir, &["repack", "-a", "-d", "-q", "--write-bitmap-index"]);
}

#[test]
fn a_pack_written_through_the_storage_reads_back_byte_for_byte() {
    let (_server, s) = setup();
    let tmp = tempfile::tempdir().unwrap();
    let repo = tmp.path().join("r.git");
    std::fs::create_dir(&repo).unwrap();
    make_repo(&repo);
    let pack_dir = repo.join("objects/pack");
    let mut files: Vec<_> = std::fs::read_dir(&pack_dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.starts_with("pack-"))
        .collect();
    files.sort();
    assert!(
        files.iter().any(|n| n.ends_with(".pack")) && files.iter().any(|n| n.ends_with(".idx"))
    );

    // Written as packd writes a pack: under a temporary name, renamed once its checksum is
    // known, published if absent.
    for name in &files {
        let content = std::fs::read(pack_dir.join(name)).unwrap();
        let mut blob = s.create("pack/tmp_pack_incoming").unwrap();
        for piece in content.chunks(10_000) {
            blob.write_all(piece).unwrap();
        }
        blob.rename(&format!("pack/{name}")).unwrap();
        blob.publish().unwrap();
    }
    assert_eq!(s.list("pack").unwrap(), files);

    for name in &files {
        let content = std::fs::read(pack_dir.join(name)).unwrap();
        let blob = s.open(&format!("pack/{name}")).unwrap();
        assert_eq!(&blob.read_all().unwrap()[..], &content[..], "{name}");
        // In 64 KiB pieces, as a block cache reads them.
        let len = blob.len();
        let pieces: Vec<_> = (0..len.div_ceil(65_536))
            .map(|i| i * 65_536..((i + 1) * 65_536).min(len))
            .collect();
        let mut joined = Vec::new();
        for piece in blob.read_many(&pieces) {
            joined.extend_from_slice(&piece.unwrap());
        }
        assert_eq!(joined, content, "{name} read in pieces");
    }

    // Copied out of the bucket into a repository of its own, git finds it whole.
    let copy = tmp.path().join("copy.git");
    std::fs::create_dir(&copy).unwrap();
    git(&copy, &["init", "--bare", "-q", "."]);
    for name in s.list("pack").unwrap() {
        let bytes = s.open(&format!("pack/{name}")).unwrap().read_all().unwrap();
        std::fs::write(copy.join("objects/pack").join(&name), &bytes).unwrap();
    }
    let tip = git(&repo, &["rev-parse", "main"]);
    git(&copy, &["update-ref", "refs/heads/main", tip.trim()]);
    let idx = files.iter().find(|n| n.ends_with(".idx")).unwrap();
    let verify = git(
        &copy,
        &["verify-pack", "-v", &format!("objects/pack/{idx}")],
    );
    assert!(verify.contains(": ok"), "{verify}");
    git(&copy, &["fsck", "--strict", "--no-dangling"]);
    git(&copy, &["rev-list", "--test-bitmap", "main"]);
    assert_eq!(
        git(&copy, &["rev-list", "--objects", "main"]),
        git(&repo, &["rev-list", "--objects", "main"])
    );
}

/// A server with bucket `packd`, a proxy in front of it that loses requests and answers on
/// demand, and a storage that reaches the server through the proxy.
fn setup_with_faults() -> (S3Server, FaultProxy, S3Storage) {
    let server = S3Server::start();
    server.create_bucket("packd");
    let proxy = FaultProxy::start(server.port());
    let storage = storage_through(&server, &proxy.endpoint(), "repos/r.git");
    (server, proxy, storage)
}

/// A storage at `prefix` of bucket `packd` of `server`, reached through the proxy at
/// `endpoint`.
fn storage_through(server: &S3Server, endpoint: &str, prefix: &str) -> S3Storage {
    S3Storage::new(&S3Config {
        bucket: "packd".into(),
        prefix: prefix.into(),
        endpoint: Some(endpoint.into()),
        region: Some(packd_test_s3::REGION.into()),
        access_key_id: Some(server.access_key_id().into()),
        secret_access_key: Some(server.secret_access_key().into()),
        allow_http: false,
        ..S3Config::default()
    })
    .unwrap()
}

#[test]
fn a_conditional_write_whose_answer_is_lost_is_settled_by_reading_again() {
    let (_server, proxy, s) = setup_with_faults();
    // The server applied the write; its answer never came. Sent again, it would be refused
    // (its own first try made the condition false): the storage reads the key instead.
    proxy.lose_next_answers(1);
    let v1 = s.replace("stack/list", None, b"one").unwrap();
    assert_eq!(
        s.read_versioned("stack/list").unwrap().unwrap(),
        (b"one"[..].into(), v1.clone())
    );
    proxy.lose_next_answers(1);
    let v2 = s.replace("stack/list", Some(&v1), b"two").unwrap();
    assert_eq!(
        s.read_versioned("stack/list").unwrap().unwrap(),
        (b"two"[..].into(), v2.clone())
    );
    proxy.lose_next_answers(1);
    put(&s, "objects/pack/pack-1.pack", b"pack bytes").unwrap();
    assert_eq!(
        &s.open("objects/pack/pack-1.pack")
            .unwrap()
            .read_all()
            .unwrap()[..],
        b"pack bytes"
    );

    // A stale version is still refused, and so is a name that exists, with or without faults.
    proxy.lose_next_answers(1);
    let stale = s.replace("stack/list", Some(&v1), b"three");
    assert!(
        matches!(stale, Err(StorageError::Conflict { .. })),
        "{stale:?}"
    );
    proxy.lose_next_answers(1);
    let taken = put(&s, "objects/pack/pack-1.pack", b"other bytes");
    assert!(
        matches!(taken, Err(StorageError::AlreadyExists { .. })),
        "{taken:?}"
    );
    assert_eq!(
        s.read_versioned("stack/list").unwrap().unwrap().0,
        &b"two"[..]
    );
}

#[test]
fn a_conditional_write_cut_before_the_server_saw_it_is_sent_again() {
    let (_server, proxy, s) = setup_with_faults();
    proxy.cut_next_requests(1);
    let v1 = s.replace("stack/list", None, b"one").unwrap();
    proxy.cut_next_requests(2);
    let v2 = s.replace("stack/list", Some(&v1), b"two").unwrap();
    assert_eq!(
        s.read_versioned("stack/list").unwrap().unwrap(),
        (b"two"[..].into(), v2)
    );
    proxy.cut_next_requests(1);
    put(&s, "objects/pack/pack-1.pack", b"pack bytes").unwrap();
    assert_eq!(
        &s.open("objects/pack/pack-1.pack")
            .unwrap()
            .read_all()
            .unwrap()[..],
        b"pack bytes"
    );
}

#[test]
fn a_prefetch_fetches_ahead_once_and_its_readers_wait_for_it() {
    use packd_storage::{BlockCache, BlockCacheConfig, CachedStorage};
    let server = S3Server::start();
    server.create_bucket("packd");
    // Slow enough that the reads below start while the prefetch is in flight.
    let proxy = packd_test_s3::DelayProxy::start(
        server.port(),
        std::time::Duration::from_millis(200),
        None,
    );
    let s = storage_through(&server, &proxy.endpoint(), "repos/r.git/objects");
    let content = bytes(1 << 20, 7);
    put(&s, "pack/pack-p.pack", &content).unwrap();
    let cache = Arc::new(BlockCache::new(&BlockCacheConfig::default()).unwrap());
    let cached = CachedStorage::new(Arc::new(s.clone()), cache.clone());
    let blob = cached.open("pack/pack-p.pack").unwrap();
    let before = s.read_stats().gets;
    // Blocks 0-1 and 9-10 (64 KiB blocks).
    let ranges = [0..100_000u64, 600_000..700_000];
    blob.prefetch(&ranges);
    for r in &ranges {
        let got = blob.read(r.clone()).unwrap();
        assert_eq!(&got[..], &content[r.start as usize..r.end as usize]);
    }
    let stats = cache.stats();
    assert_eq!(stats.prefetched, 4, "the four blocks were fetched ahead");
    assert!(
        stats.waited >= 1,
        "the reads waited for the prefetch: {stats:?}"
    );
    assert_eq!(stats.misses, 0, "no read fetched a block itself: {stats:?}");
    let gets = s.read_stats().gets - before;
    assert!(
        (1..=2).contains(&gets),
        "{gets} GETs: a block was fetched twice"
    );
    // A hint of what is cached asks for nothing.
    blob.prefetch(&ranges);
    assert_eq!(cache.stats().prefetched, 4);
    assert_eq!(s.read_stats().gets - before, gets);
}

#[test]
fn a_request_scope_counts_exactly_its_own_requests() {
    use packd_storage::{
        BlockCache, BlockCacheConfig, CachedStorage, RequestReadStats, RequestReads,
    };
    let (_server, s) = setup();
    let reads = RequestReads::new();
    // Outside any scope: counted nowhere.
    let big = bytes(200_000, 7);
    put(&s, "big", &big).unwrap();
    put(&s, "config", b"hello").unwrap();
    assert_eq!(reads.stats(), RequestReadStats::default());
    let cache = Arc::new(BlockCache::new(&BlockCacheConfig::default()).unwrap());
    let cached = CachedStorage::new(Arc::new(s.clone()), cache);
    {
        let _in = reads.enter();
        assert!(cached.exists("config")); // HEAD
        let blob = cached.open("big").unwrap(); // HEAD
                                                // Block 0 fetched: one GET of 64 KiB.
        assert_eq!(&blob.read(0..10).unwrap()[..], &big[..10]);
        // From the cache: no request.
        assert_eq!(&blob.read(100..200).unwrap()[..], &big[100..200]);
        // Blocks 1 and 2, touching: one GET of 128 KiB. The empty range uses nothing.
        let ranges = [70_000..70_010, 140_000..140_010, 5..5];
        let got: Vec<_> = blob.read_many(&ranges).map(Result::unwrap).collect();
        assert_eq!(&got[1][..], &big[140_000..140_010]);
        assert_eq!(
            &cached.read_versioned("config").unwrap().unwrap().0[..],
            b"hello"
        ); // GET, whole
        cached.replace("ref", None, b"abc").unwrap(); // PUT
        assert!(cached.delete("ref").unwrap()); // HEAD, DELETE
        assert!(!cached.delete("nothing").unwrap()); // HEAD
        assert_eq!(cached.list("").unwrap(), ["big", "config"]); // LIST

        // Another thread in a scope of its own, while this one's is current here.
        let other = RequestReads::new();
        let theirs = {
            let other = other.clone();
            let s = s.clone();
            std::thread::spawn(move || {
                assert!(RequestReads::current().is_none(), "not inherited");
                let _in = other.enter();
                s.open("big").unwrap().read(0..1000).unwrap().len()
            })
        };
        assert_eq!(theirs.join().unwrap(), 1000);
        assert_eq!(
            other.stats(),
            RequestReadStats {
                gets: 1,
                heads: 1,
                bytes_fetched: 1000,
                ..RequestReadStats::default()
            },
            "uncached reads use nothing of a cached blob's"
        );
        // A thread outside any scope.
        let s2 = s.clone();
        std::thread::spawn(move || s2.open("big").unwrap().read(0..10).unwrap())
            .join()
            .unwrap();
    }
    let want = RequestReadStats {
        gets: 3,
        heads: 4,
        lists: 1,
        puts: 1,
        deletes: 1,
        bytes_fetched: (64 << 10) + (128 << 10) + 5,
        bytes_put: 3,
        bytes_used: 10 + 100 + 20,
    };
    assert_eq!(reads.stats(), want);
    // Out of the scope again: counted nowhere.
    cached.open("big").unwrap().read(199_000..199_100).unwrap();
    cached.list("").unwrap();
    assert_eq!(reads.stats(), want);
    assert!(RequestReads::current().is_none());
    assert_eq!(
        want.to_string(),
        "store_gets=3 store_heads=4 store_lists=1 store_puts=1 store_deletes=1 \
         store_fetched=196613 store_put_bytes=3 store_used=130"
    );
}
