//! Benchmark of coalesced reads (seed 004): the ranges a fetch reads from a real pack and its
//! index, read from a real S3 server (versitygw on 127.0.0.1) through a proxy that adds a
//! round-trip delay, with coalescing off (a GET per range), with sorting only, and merged;
//! then once more through a block cache, warm. Prints GETs, bytes fetched and used, and wall
//! time per mode, and each mode's wall time against a GET per range. Run by `bench/readv.sh`.
//!
//! Usage: readv REPO [COMMITS [DELAYS_MS]]
//!   REPO       a bare repository with one main pack (its largest is used)
//!   COMMITS    the fetch's depth: the objects of `HEAD~COMMITS..HEAD` (default 200)
//!   DELAYS_MS  round-trip delays to add, comma-separated (default 0,2,20)
//!
//! The pattern, in the order a server reads: for each object of the fetch (in `git rev-list
//! --objects` order) its index lookup (the two fanout entries around its first byte, the
//! fanout bucket of names, its offset entry), then for each object its bytes in the pack (from
//! its offset to the next object's). Two `read_many` calls: the index's ranges, the pack's.

use packd_storage::{
    Blob, BlockCache, BlockCacheConfig, CachedStorage, Coalescing, ReadOptions, S3Config,
    S3Storage, Storage,
};
use packd_test_s3::{DelayProxy, S3Server};
use std::collections::HashMap;
use std::io::Write;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

fn git(repo: &Path, args: &[&str], stdin: Option<&[u8]>) -> String {
    let mut child = Command::new("git")
        .arg("-C")
        .arg(repo)
        .args(args)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("git runs");
    if let Some(input) = stdin {
        child.stdin.take().unwrap().write_all(input).unwrap();
    }
    drop(child.stdin.take());
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "git {args:?} failed");
    String::from_utf8(out.stdout).unwrap()
}

/// The repository's largest pack and its index.
fn main_pack(repo: &Path) -> (PathBuf, PathBuf) {
    let dir = repo.join("objects/pack");
    let pack = std::fs::read_dir(&dir)
        .expect("objects/pack")
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "pack"))
        .max_by_key(|p| std::fs::metadata(p).unwrap().len())
        .expect("a pack");
    let idx = pack.with_extension("idx");
    (pack, idx)
}

/// The ranges of the index and of the pack that a fetch of `commits` commits reads.
fn pattern(
    repo: &Path,
    idx: &Path,
    pack_len: u64,
    commits: u32,
) -> (Vec<Range<u64>>, Vec<Range<u64>>) {
    let idx_bytes = std::fs::read(idx).unwrap();
    let listed = git(repo, &["show-index"], Some(&idx_bytes));
    // show-index lists in name order: position, offset.
    let mut by_name: HashMap<String, (usize, u64)> = HashMap::new();
    let mut offsets = Vec::new();
    for (pos, line) in listed.lines().enumerate() {
        let mut parts = line.split_whitespace();
        let offset: u64 = parts.next().unwrap().parse().unwrap();
        let oid = parts.next().unwrap().to_string();
        by_name.insert(oid, (pos, offset));
        offsets.push(offset);
    }
    let n = offsets.len() as u64;
    offsets.sort_unstable();
    let end_of = |offset: u64| {
        let i = offsets.partition_point(|&o| o <= offset);
        offsets.get(i).copied().unwrap_or(pack_len - 20)
    };
    let mut fanout = [0u64; 256];
    for oid in by_name.keys() {
        fanout[usize::from_str_radix(&oid[..2], 16).unwrap()] += 1;
    }
    let mut below = [0u64; 257];
    for b in 0..256 {
        below[b + 1] = below[b] + fanout[b];
    }
    let spec = format!("HEAD~{commits}..HEAD");
    let objects = git(repo, &["rev-list", "--objects", &spec], None);
    let (mut idx_ranges, mut pack_ranges) = (Vec::new(), Vec::new());
    for line in objects.lines() {
        let oid = line.split_whitespace().next().unwrap();
        let Some(&(pos, offset)) = by_name.get(oid) else {
            continue;
        };
        let b = usize::from_str_radix(&oid[..2], 16).unwrap();
        let fan = 8 + 4 * (b as u64).saturating_sub(1);
        idx_ranges.push(fan..8 + 4 * (b as u64 + 1));
        idx_ranges.push(1032 + below[b] * 20..1032 + below[b + 1] * 20);
        let at = 1032 + n * 24 + pos as u64 * 4;
        idx_ranges.push(at..at + 4);
        pack_ranges.push(offset..end_of(offset));
    }
    (idx_ranges, pack_ranges)
}

fn storage(server: &S3Server, endpoint: String, coalescing: Coalescing) -> S3Storage {
    S3Storage::new(&S3Config {
        bucket: "packd".into(),
        prefix: "repos/bench.git/objects".into(),
        endpoint: Some(endpoint),
        region: Some(packd_test_s3::REGION.into()),
        access_key_id: Some(server.access_key_id().into()),
        secret_access_key: Some(server.secret_access_key().into()),
        allow_http: false,
        reads: ReadOptions {
            coalescing,
            ..ReadOptions::default()
        },
    })
    .unwrap()
}

/// Reads both patterns through `s`; checks the bytes; the wall time.
fn run(
    s: &dyn Storage,
    idx_ranges: &[Range<u64>],
    pack_ranges: &[Range<u64>],
    idx: &[u8],
    pack: &[u8],
) -> Duration {
    let started = Instant::now();
    for (name, ranges, data) in [
        ("pack/bench.idx", idx_ranges, idx),
        ("pack/bench.pack", pack_ranges, pack),
    ] {
        let blob: Arc<dyn Blob> = s.open(name).unwrap();
        for (r, got) in ranges.iter().zip(blob.read_many(ranges)) {
            assert!(
                got.unwrap()[..] == data[r.start as usize..r.end as usize],
                "{name} {r:?}: wrong bytes"
            );
        }
    }
    started.elapsed()
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let repo = PathBuf::from(
        args.get(1)
            .expect("usage: readv REPO [COMMITS [DELAYS_MS]]"),
    );
    let commits: u32 = args.get(2).map_or(200, |c| c.parse().unwrap());
    let delays: Vec<u64> = args
        .get(3)
        .map_or("0,2,20", |d| d.as_str())
        .split(',')
        .map(|d| d.parse().unwrap())
        .collect();
    let (pack_path, idx_path) = main_pack(&repo);
    let (pack, idx) = (
        std::fs::read(&pack_path).unwrap(),
        std::fs::read(&idx_path).unwrap(),
    );
    let (idx_ranges, pack_ranges) = pattern(&repo, &idx_path, pack.len() as u64, commits);
    println!(
        "# {}: pack {} bytes, idx {} bytes; fetch of HEAD~{commits}..HEAD: {} index ranges, {} pack ranges",
        pack_path.display(),
        pack.len(),
        idx.len(),
        idx_ranges.len(),
        pack_ranges.len()
    );
    let server = S3Server::start();
    server.create_bucket("packd");
    let direct = storage(&server, server.endpoint(), Coalescing::Merge);
    for (name, bytes) in [("pack/bench.idx", &idx), ("pack/bench.pack", &pack)] {
        let mut blob = direct.create(name).unwrap();
        blob.write_all(bytes).unwrap();
        blob.publish().unwrap();
    }
    println!(
        "{:>5}  {:<14} {:>6} {:>12} {:>12} {:>9} {:>8}  {:>22}",
        "rtt", "mode", "GETs", "fetched", "used", "wall ms", "vs off", "latency/bw/gap (est.)"
    );
    for delay in delays {
        let proxy = DelayProxy::start(server.port(), Duration::from_millis(delay), None);
        let mut off_wall = None;
        for (label, coalescing) in [
            ("off", Coalescing::Off),
            ("sort-only", Coalescing::SortOnly),
            ("merge", Coalescing::Merge),
            ("merge+cache", Coalescing::Merge),
        ] {
            // Cold: a new client (no connections, no estimate) for each mode.
            let s = storage(&server, proxy.endpoint(), coalescing);
            let wall = if label == "merge+cache" {
                // The second of two runs through a cache: what a warm server pays.
                let cache = Arc::new(BlockCache::new(&BlockCacheConfig::default()).unwrap());
                let cached = CachedStorage::new(Arc::new(s.clone()), cache);
                run(&cached, &idx_ranges, &pack_ranges, &idx, &pack);
                let before = s.read_stats();
                let wall = run(&cached, &idx_ranges, &pack_ranges, &idx, &pack);
                let after = s.read_stats();
                print_row(delay, label, &after, &before, wall, off_wall, &s);
                continue;
            } else {
                run(&s, &idx_ranges, &pack_ranges, &idx, &pack)
            };
            let stats = s.read_stats();
            off_wall.get_or_insert(wall);
            print_row(
                delay,
                label,
                &stats,
                &Default::default(),
                wall,
                off_wall,
                &s,
            );
        }
    }
}

fn print_row(
    delay: u64,
    label: &str,
    after: &packd_storage::ReadStats,
    before: &packd_storage::ReadStats,
    wall: Duration,
    off: Option<Duration>,
    s: &S3Storage,
) {
    let (latency, bandwidth, gap) = s.link_estimate();
    let ratio = off.map_or(1.0, |o| o.as_secs_f64() / wall.as_secs_f64().max(1e-9));
    println!(
        "{:>3}ms  {:<14} {:>6} {:>12} {:>12} {:>9.1} {:>7.1}x  {:>6.1}ms/{:>5.0}MB/s/{:>6}K",
        delay,
        label,
        after.gets - before.gets,
        after.bytes_fetched - before.bytes_fetched,
        after.bytes_used - before.bytes_used,
        wall.as_secs_f64() * 1e3,
        ratio,
        latency.as_secs_f64() * 1e3,
        bandwidth / 1e6,
        gap >> 10
    );
}
