//! A measurement against git, run by hand (ignored): the search's pack bytes and the encoder's
//! delta sizes next to `git pack-objects`' for the same objects.
//!
//! ```text
//! git -C REPO rev-list --objects v2.35.0..v2.39.0 > list.txt
//! git -C REPO pack-objects --window=10 --depth=50 --no-reuse-delta --no-reuse-object \
//!     --delta-base-offset /tmp/dq/git < list.txt
//! git verify-pack -v /tmp/dq/git-*.idx > vp.txt
//! PACKD_DQ_REPO=REPO PACKD_DQ_LIST=list.txt PACKD_DQ_VERIFY=vp.txt \
//!     cargo test --release -p packd-pack --lib delta_quality -- --ignored --nocapture
//! ```
//!
//! Figures (2 shared cores): v2.35.0..v2.39.0, 17,152 objects: the encoder on git's 12,404
//! pairs 0.970x git's bytes raw, 0.981x compressed; the search's pack 0.9956x git's, 1.4-2.2 s
//! on one thread (git --threads=1: 5.5 s of CPU). v2.25.0..v2.39.0, 56,582 objects: 0.9375x
//! raw, 0.958x compressed; pack 0.9851x (26,930,105 against 27,337,908 bytes; its deltas
//! 0.986x, its whole objects 0.985x, libdeflater against zlib), 5.4 s on one thread (git: 17.8 s
//! of CPU on two).

use super::*;
use crate::delta_encode::DeltaIndex;
use packd_odb::{Repository, RepositoryOptions};
use std::collections::HashMap;

/// Bytes of an entry's type-and-size header.
fn header_len(size: u64) -> u64 {
    let mut n = 1;
    let mut rest = size >> 4;
    while rest > 0 {
        n += 1;
        rest >>= 7;
    }
    n
}

fn deflated_len(compressor: &mut libdeflater::Compressor, data: &[u8]) -> u64 {
    let mut out = vec![0u8; compressor.zlib_compress_bound(data.len())];
    compressor.zlib_compress(data, &mut out).unwrap() as u64
}

#[test]
#[ignore = "a measurement: needs PACKD_DQ_REPO, PACKD_DQ_LIST and PACKD_DQ_VERIFY"]
fn delta_quality() {
    let var = |name: &str| std::env::var(name).unwrap_or_else(|_| panic!("{name}"));
    let repo = Repository::open(
        std::path::Path::new(&var("PACKD_DQ_REPO")),
        &RepositoryOptions::default(),
    )
    .unwrap();
    let list = std::fs::read_to_string(var("PACKD_DQ_LIST")).unwrap();
    let mut candidates = Vec::new();
    let mut data = Vec::new();
    let mut position = HashMap::new();
    for line in list.lines() {
        let (hex, path) = line.split_once(' ').unwrap_or((line, ""));
        let id = ObjectId::from_hex(hex).unwrap();
        let object = repo.objects().read(&id).unwrap().unwrap();
        position.insert(id, candidates.len());
        candidates.push(Candidate {
            id,
            kind: object.kind,
            size: object.data.len() as u64,
            name_hash: if path.is_empty() {
                0
            } else {
                packd_reach::bitmap::name_hash(path.as_bytes())
            },
            base_only: false,
            base_depth: 0,
            above: 0,
        });
        data.push(object.data);
    }
    // git's choices: (size in pack, delta (size, base) if a delta) by object.
    let verify = std::fs::read_to_string(var("PACKD_DQ_VERIFY")).unwrap();
    let mut git_pack = 0u64;
    let mut git_delta_bytes = 0u64;
    let mut git_pairs = Vec::new();
    let mut git_payload = 0u64; // deltas' zlib bytes, headers left out
    let offset_of: HashMap<&str, u64> = verify
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.len() >= 5 && f[0].len() == 40).then(|| (f[0], f[4].parse().unwrap()))
        })
        .collect();
    let ofs_len = |mut d: u64| {
        let mut n = 1;
        d >>= 7;
        while d > 0 {
            d -= 1;
            n += 1;
            d >>= 7;
        }
        n
    };
    for line in verify.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() < 5 || f[0].len() != 40 {
            continue;
        }
        git_pack += f[3].parse::<u64>().unwrap();
        if f.len() == 7 {
            git_delta_bytes += f[3].parse::<u64>().unwrap();
            let distance = offset_of[f[0]] - offset_of[f[6]];
            git_payload += f[3].parse::<u64>().unwrap()
                - header_len(f[2].parse().unwrap())
                - ofs_len(distance);
            let target = position[&ObjectId::from_hex(f[0]).unwrap()];
            let base = position[&ObjectId::from_hex(f[6]).unwrap()];
            git_pairs.push((target, base, f[2].parse::<u64>().unwrap()));
        }
    }

    // The encoder alone, on git's pairs.
    let started = Instant::now();
    let (mut ours, mut theirs, mut worse) = (0u64, 0u64, 0u32);
    let mut payload = 0u64;
    let mut compressor = libdeflater::Compressor::new(libdeflater::CompressionLvl::default());
    let mut diffs = Vec::new();
    for &(target, base, size) in &git_pairs {
        let index = DeltaIndex::new(&data[base]).unwrap();
        let delta = index
            .encode(&data[base], &data[target], usize::MAX)
            .unwrap();
        ours += delta.len() as u64;
        payload += deflated_len(&mut compressor, &delta);
        theirs += size;
        worse += u32::from(delta.len() as u64 > size);
        diffs.push((delta.len() as i64 - size as i64, target, base, size));
    }
    diffs.sort();
    let gain: i64 = diffs.iter().filter(|d| d.0 < 0).map(|d| d.0).sum();
    let loss: i64 = diffs.iter().filter(|d| d.0 > 0).map(|d| d.0).sum();
    println!(
        "  compressed: {payload} vs git's {git_payload} ({:.4}x)",
        payload as f64 / git_payload as f64
    );
    println!("pairs smaller: {gain} bytes, larger: {loss} bytes");
    for d in diffs.iter().rev().take(8) {
        println!(
            "  +{} target {} ({} bytes, {:?}) base {} git {}",
            d.0,
            candidates[d.1].id,
            data[d.1].len(),
            candidates[d.1].kind,
            candidates[d.2].id,
            d.3
        );
    }
    println!(
        "encoder on git's {} pairs: {ours} bytes vs git's {theirs} ({:.4}x), {worse} larger, {:?}",
        git_pairs.len(),
        ours as f64 / theirs as f64,
        started.elapsed()
    );

    // The whole search.
    let threads = std::env::var("PACKD_DQ_THREADS").map_or(0, |t| t.parse().unwrap());
    let started = Instant::now();
    let load = |i: u32| Ok::<_, ()>(data[i as usize].clone());
    let options = SearchOptions {
        threads,
        ..SearchOptions::default()
    };
    let choices = search(&candidates, &options, &load, &|_| {}).unwrap();
    let elapsed = started.elapsed();
    let mut compressor = libdeflater::Compressor::new(libdeflater::CompressionLvl::default());
    let (mut pack, mut deltas, mut delta_bytes) = (12u64 + 20, 0u32, 0u64);
    for (i, choice) in choices.iter().enumerate() {
        pack += match choice {
            Choice::Whole => {
                header_len(data[i].len() as u64) + deflated_len(&mut compressor, &data[i])
            }
            Choice::Delta {
                delta_size,
                compressed,
                ..
            } => {
                deltas += 1;
                // An offset of 3 bytes, about what the deltas of a pack this size take.
                delta_bytes += header_len(*delta_size) + 3 + compressed.len() as u64;
                header_len(*delta_size) + 3 + compressed.len() as u64
            }
        };
    }
    println!(
        "search: {} objects, {deltas} deltas (git {}), pack about {pack} bytes vs git's {git_pack} ({:.4}x), {elapsed:?}",
        candidates.len(),
        git_pairs.len(),
        pack as f64 / git_pack as f64,
    );
    println!(
        "  deltas {delta_bytes} bytes vs git's {git_delta_bytes}; whole {} vs git's {}",
        pack - delta_bytes,
        git_pack - git_delta_bytes
    );
}
