//! Coalesced reads and the block cache against a real S3 server (versitygw on 127.0.0.1,
//! started by `packd-test-s3`), through its proxies: one that delays every round trip (as a
//! distant store does) and one that cuts answers short. Tests count requests and compare
//! bytes; they never time anything.

use packd_storage::{
    BlockCache, BlockCacheConfig, CachedStorage, Coalescing, ReadOptions, S3Config, S3Storage,
    Storage, StorageError,
};
use packd_test_s3::{DelayProxy, FaultProxy, S3Server};
use std::io::Write;
use std::ops::Range;
use std::sync::Arc;
use std::time::Duration;

/// A storage rooted at `repos/r.git/objects` of bucket `packd`, reached at `endpoint`.
fn storage(server: &S3Server, endpoint: String, reads: ReadOptions) -> S3Storage {
    storage_at(server, endpoint, reads, "repos/r.git/objects")
}

/// A storage rooted at `prefix` of bucket `packd`, reached at `endpoint`.
fn storage_at(server: &S3Server, endpoint: String, reads: ReadOptions, prefix: &str) -> S3Storage {
    S3Storage::new(&S3Config {
        bucket: "packd".into(),
        prefix: prefix.into(),
        endpoint: Some(endpoint),
        region: Some(packd_test_s3::REGION.into()),
        access_key_id: Some(server.access_key_id().into()),
        secret_access_key: Some(server.secret_access_key().into()),
        allow_http: false,
        reads,
    })
    .expect("an S3 storage")
}

/// A server with bucket `packd`.
fn server() -> S3Server {
    let server = S3Server::start();
    server.create_bucket("packd");
    server
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
fn put(s: &S3Storage, name: &str, content: &[u8]) {
    let mut blob = s.create(name).unwrap();
    blob.write_all(content).unwrap();
    blob.publish().unwrap();
}

/// Checks that `got` are the bytes of `ranges` of `data`, in order.
fn check(
    data: &[u8],
    ranges: &[Range<u64>],
    got: impl Iterator<Item = Result<bytes::Bytes, StorageError>>,
) {
    let got: Vec<_> = got.collect();
    assert_eq!(got.len(), ranges.len());
    for (r, got) in ranges.iter().zip(got) {
        assert_eq!(
            &got.unwrap()[..],
            &data[r.start as usize..r.end as usize],
            "{r:?}"
        );
    }
}

/// Pseudo-random ranges of a blob of `len` bytes: unsorted, some overlapping, some empty,
/// some long.
fn scattered(len: u64, n: usize, seed: u64) -> Vec<Range<u64>> {
    let mut x = seed | 1;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    (0..n)
        .map(|i| {
            let start = next() % len;
            let size = match i % 7 {
                0 => next() % 300_000,
                1 => 0,
                _ => next() % 3_000,
            };
            start..(start + size).min(len)
        })
        .collect()
}

#[test]
fn unsorted_overlapping_ranges_come_back_whole_in_request_order() {
    let server = server();
    let data = bytes(3 << 20, 11);
    let len = data.len() as u64;
    for coalescing in [Coalescing::Off, Coalescing::SortOnly, Coalescing::Merge] {
        // Small bounds, so that requests are cut, merged and held back by them.
        let s = storage(
            &server,
            server.endpoint(),
            ReadOptions {
                coalescing,
                max_in_flight: 3,
                max_request_bytes: 100_000,
                max_buffered_bytes: 250_000,
            },
        );
        if coalescing == Coalescing::Off {
            put(&s, "pack/pack-a.pack", &data);
        }
        let blob = s.open("pack/pack-a.pack").unwrap();
        let mut ranges = scattered(len, 200, 5);
        ranges.extend([
            0..len,
            10..20,
            15..40,
            len - 1..len,
            2_000_000..2_000_100,
            7..7,
        ]);
        ranges.extend(scattered(len, 50, 9));
        let before = s.read_stats();
        check(&data, &ranges, blob.read_many(&ranges));
        let after = s.read_stats();
        let used: u64 = ranges.iter().map(|r| r.end - r.start).sum();
        assert_eq!(after.bytes_used - before.bytes_used, used, "{coalescing:?}");
        assert_eq!(after.read_many_calls - before.read_many_calls, 1);
        // Each request is cut at the cap: the whole blob alone takes 31 of them.
        assert!(
            after.gets - before.gets >= len.div_ceil(100_000),
            "{after:?}"
        );

        // A bad range is answered in its place; the others still are.
        let with_bad: Vec<_> = blob.read_many(&[0..4, len..len + 1, 8..9]).collect();
        assert_eq!(&with_bad[0].as_ref().unwrap()[..], &data[0..4]);
        assert!(matches!(with_bad[1], Err(StorageError::OutOfBounds { .. })));
        assert_eq!(&with_bad[2].as_ref().unwrap()[..], &data[8..9]);
        // Stopping early cancels what is still in flight, and reads go on afterwards.
        let mut partial = blob.read_many(&ranges);
        partial.next().unwrap().unwrap();
        drop(partial);
        assert_eq!(&blob.read(5..9).unwrap()[..], &data[5..9]);
        // A read longer than a request is cut into several.
        assert_eq!(
            &blob.read(1..len - 1).unwrap()[..],
            &data[1..len as usize - 1]
        );
    }
}

/// Ranges of three clusters of small reads (1 KiB apart within a cluster, the clusters
/// 1.5 MiB apart), in a shuffled order: an index's lookups and the objects they find.
fn clustered() -> Vec<Range<u64>> {
    let mut ranges = Vec::new();
    for cluster in 0..3u64 {
        for i in 0..100u64 {
            let start = cluster * (3 << 19) + i * 1_024;
            ranges.push(start..start + 200 + (i % 5) * 100);
        }
    }
    // Deterministically shuffled.
    let n = ranges.len();
    for i in 0..n {
        ranges.swap(i, (i * 7919 + 13) % n);
    }
    ranges
}

#[test]
fn clustered_ranges_through_a_slow_link_take_few_gets() {
    let server = server();
    let proxy = DelayProxy::start(server.port(), Duration::from_millis(20), None);
    let data = bytes(5 << 20, 3);
    let ranges = clustered();
    let mut gets = Vec::new();
    for coalescing in [Coalescing::Off, Coalescing::SortOnly, Coalescing::Merge] {
        let s = storage(
            &server,
            proxy.endpoint(),
            ReadOptions {
                coalescing,
                ..ReadOptions::default()
            },
        );
        if coalescing == Coalescing::Off {
            put(&s, "pack/pack-c.pack", &data);
        }
        let blob = s.open("pack/pack-c.pack").unwrap();
        let before = s.read_stats();
        check(&data, &ranges, blob.read_many(&ranges));
        let stats = s.read_stats();
        gets.push(stats.gets - before.gets);
        let used: u64 = ranges.iter().map(|r| r.end - r.start).sum();
        assert_eq!(stats.bytes_used - before.bytes_used, used);
        if coalescing == Coalescing::Merge {
            // Fetched more than used (the gaps), less than the blob.
            assert!(stats.bytes_fetched - before.bytes_fetched > used);
            assert!(stats.bytes_fetched - before.bytes_fetched < data.len() as u64);
        }
    }
    // A GET per range; per range still (none touch); one per cluster at most.
    assert_eq!(gets[0], 300, "{gets:?}");
    assert_eq!(gets[1], 300, "{gets:?}");
    assert!(gets[2] <= 3, "{gets:?}");
    assert!(proxy.connections() >= 1);
}

#[test]
fn sorting_alone_joins_ranges_that_touch() {
    let server = server();
    let data = bytes(1 << 20, 4);
    let s = storage(
        &server,
        server.endpoint(),
        ReadOptions {
            coalescing: Coalescing::SortOnly,
            ..ReadOptions::default()
        },
    );
    put(&s, "pack/pack-t.pack", &data);
    let blob = s.open("pack/pack-t.pack").unwrap();
    // Pieces of two runs, backwards: two GETs when sorted.
    let mut ranges: Vec<_> = (0..50u64).map(|i| i * 100..(i + 1) * 100).collect();
    ranges.extend((0..50u64).map(|i| 500_000 + i * 100..500_000 + (i + 1) * 100));
    ranges.reverse();
    let before = s.read_stats().gets;
    check(&data, &ranges, blob.read_many(&ranges));
    assert_eq!(s.read_stats().gets - before, 2);
}

#[test]
fn a_second_read_through_the_cache_makes_no_get() {
    let server = server();
    let proxy = DelayProxy::start(server.port(), Duration::from_millis(2), None);
    let s = storage(&server, proxy.endpoint(), ReadOptions::default());
    let data = bytes(2 << 20, 8);
    let other = bytes(2 << 20, 9);
    let s2 = storage_at(
        &server,
        proxy.endpoint(),
        ReadOptions::default(),
        "repos/s.git/objects",
    );
    put(&s, "pack/pack-x.pack", &data);
    put(&s2, "pack/pack-x.pack", &other);
    let cache = Arc::new(BlockCache::new(&BlockCacheConfig::default()).unwrap());
    // Two repositories of one server, one cache.
    let r = CachedStorage::new(Arc::new(s.clone()), cache.clone());
    let t = CachedStorage::new(Arc::new(s2.clone()), cache.clone());
    let ranges = scattered(data.len() as u64, 100, 21);

    let blob = r.open("pack/pack-x.pack").unwrap();
    check(&data, &ranges, blob.read_many(&ranges));
    let first = s.read_stats().gets;
    assert!(first > 0);
    check(&data, &ranges, blob.read_many(&ranges));
    // Opened again (a HEAD, no GET), read again in another order: all from the cache.
    let again = r.open("pack/pack-x.pack").unwrap();
    let mut reversed = ranges.clone();
    reversed.reverse();
    check(&data, &reversed, again.read_many(&reversed));
    for r in &ranges {
        assert_eq!(
            &again.read(r.clone()).unwrap()[..],
            &data[r.start as usize..r.end as usize]
        );
    }
    assert_eq!(s.read_stats().gets, first);
    let hits = cache.stats().hits;
    assert!(hits > 0, "{:?}", cache.stats());

    // The other repository's blob of the same name is its own.
    let theirs = t.open("pack/pack-x.pack").unwrap();
    check(&other, &ranges, theirs.read_many(&ranges));
    assert!(s2.read_stats().gets > 0);
    assert_eq!(s.read_stats().gets, first);
}

#[test]
fn the_disk_tier_serves_what_memory_evicted() {
    let server = server();
    let s = storage(&server, server.endpoint(), ReadOptions::default());
    let data = bytes(1 << 20, 12);
    put(&s, "pack/pack-d.pack", &data);
    let dir = tempfile::tempdir().unwrap();
    // Two blocks in memory, the whole blob (and the files' headers) on disk.
    let cache = Arc::new(
        BlockCache::new(&BlockCacheConfig {
            memory_bytes: 128 << 10,
            block_bytes: 64 << 10,
            disk: Some((dir.path().join("blocks"), 2 << 20)),
        })
        .unwrap(),
    );
    let c = CachedStorage::new(Arc::new(s.clone()), cache.clone());
    let blob = c.open("pack/pack-d.pack").unwrap();
    let pieces: Vec<_> = (0..16u64).map(|i| i * 65_536..(i + 1) * 65_536).collect();
    check(&data, &pieces, blob.read_many(&pieces));
    let gets = s.read_stats().gets;
    check(&data, &pieces, blob.read_many(&pieces));
    assert_eq!(s.read_stats().gets, gets);
    assert!(cache.stats().disk_hits >= 14, "{:?}", cache.stats());

    // Block files that are not what they should be (cut short) are fetched again, not
    // served.
    for entry in std::fs::read_dir(dir.path().join("blocks")).unwrap() {
        let path = entry.unwrap().path();
        let keep = std::fs::metadata(&path).unwrap().len() - 10;
        std::fs::OpenOptions::new()
            .write(true)
            .open(&path)
            .unwrap()
            .set_len(keep)
            .unwrap();
    }
    check(&data, &pieces, blob.read_many(&pieces));
    assert!(s.read_stats().gets > gets);

    // A new cache over the same directory starts empty (its index is in memory only).
    let _fresh = BlockCache::new(&BlockCacheConfig {
        memory_bytes: 128 << 10,
        block_bytes: 64 << 10,
        disk: Some((dir.path().join("blocks"), 2 << 20)),
    })
    .unwrap();
    assert_eq!(
        std::fs::read_dir(dir.path().join("blocks"))
            .unwrap()
            .count(),
        0
    );
}

#[test]
fn the_cache_never_holds_more_than_its_bounds() {
    let server = server();
    let s = storage(&server, server.endpoint(), ReadOptions::default());
    let data = bytes(3 << 20, 13);
    put(&s, "pack/pack-b.pack", &data);
    let dir = tempfile::tempdir().unwrap();
    let (memory, disk) = (256u64 << 10, 640u64 << 10);
    let cache = Arc::new(
        BlockCache::new(&BlockCacheConfig {
            memory_bytes: memory,
            block_bytes: 64 << 10,
            disk: Some((dir.path().to_path_buf(), disk)),
        })
        .unwrap(),
    );
    let c = CachedStorage::new(Arc::new(s.clone()), cache.clone());
    let blob = c.open("pack/pack-b.pack").unwrap();
    let on_disk = || -> u64 {
        std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().metadata().unwrap().len())
            .sum()
    };
    let mut most = 0;
    for seed in 0..6 {
        let ranges = scattered(data.len() as u64, 60, 100 + seed);
        check(&data, &ranges, blob.read_many(&ranges));
        let stats = cache.stats();
        most = most.max(stats.memory_bytes);
        assert!(stats.memory_bytes <= memory, "{stats:?}");
        assert!(stats.disk_bytes <= disk, "{stats:?}");
        assert!(on_disk() <= disk, "{} bytes on disk", on_disk());
    }
    // The whole blob, sequentially, through the cache: still bounded.
    let pieces: Vec<_> = (0..data.len() as u64 / 10_000)
        .map(|i| i * 10_000..(i + 1) * 10_000)
        .collect();
    check(&data, &pieces, blob.read_many(&pieces));
    assert!(cache.stats().memory_bytes <= memory);
    assert!(on_disk() <= disk);
    // It did fill up.
    assert!(most > memory / 2, "{most}");
}

#[test]
fn a_sequential_reader_reads_ahead() {
    let server = server();
    let s = storage(&server, server.endpoint(), ReadOptions::default());
    let data = bytes(4 << 20, 14);
    put(&s, "pack/pack-s.pack", &data);
    let cache = Arc::new(BlockCache::new(&BlockCacheConfig::default()).unwrap());
    let c = CachedStorage::new(Arc::new(s.clone()), cache.clone());
    let blob = c.open("pack/pack-s.pack").unwrap();
    let before = s.read_stats().gets;
    let mut at = 0;
    let mut pieces = 0;
    while at < data.len() as u64 {
        let end = (at + 16_384).min(data.len() as u64);
        assert_eq!(
            &blob.read_copy(at..end).unwrap()[..],
            &data[at as usize..end as usize]
        );
        at = end;
        pieces += 1;
    }
    let gets = s.read_stats().gets - before;
    // 256 pieces; the window doubles from 256 KiB up to 8 MiB: a handful of GETs.
    assert_eq!(pieces, 256);
    assert!(gets <= 8, "{gets} GETs");
    assert!(cache.stats().read_ahead > 0);
}

#[test]
fn answers_cut_short_or_shorter_than_asked_are_never_wrong_bytes() {
    let server = server();
    let proxy = FaultProxy::start(server.port());
    let s = storage(&server, proxy.endpoint(), ReadOptions::default());
    let data = bytes(1 << 20, 15);
    put(&s, "pack/pack-f.pack", &data);
    let blob = s.open("pack/pack-f.pack").unwrap();
    let ranges = vec![900_000..1_000_000, 0..300_000, 400_000..400_010];
    // An answer cut inside its body: object_store asks for the rest (same ETag), and the
    // bytes are right; or the read fails. Never other bytes.
    proxy.cut_next_answers_after(1, 50_000);
    for (r, got) in ranges.iter().zip(blob.read_many(&ranges)) {
        if let Ok(got) = got {
            assert_eq!(&got[..], &data[r.start as usize..r.end as usize]);
        }
    }

    // The object shrinks behind the server's back (same ETag on this gateway): the store
    // now answers fewer bytes than asked. That is an error naming the blob.
    let file = server
        .bucket_dir("packd")
        .join("repos/r.git/objects/pack/pack-f.pack");
    std::fs::OpenOptions::new()
        .write(true)
        .open(&file)
        .unwrap()
        .set_len(950_000)
        .unwrap();
    let got: Vec<_> = blob.read_many(&ranges).collect();
    let err = got[0].as_ref().unwrap_err();
    assert!(
        err.to_string()
            .contains("s3://packd/repos/r.git/objects/pack/pack-f.pack"),
        "{err}"
    );
    assert_eq!(got.len(), 1, "the iterator stops at the error");
    let err = blob.read(940_000..960_000).unwrap_err();
    assert!(matches!(err, StorageError::Io { .. }), "{err}");
}
