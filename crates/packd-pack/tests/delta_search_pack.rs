//! A pack written from the delta search's choices is one stock git accepts: `git index-pack
//! --strict` resolves every delta and `git verify-pack -v` finds the chains the search chose.

use bytes::Bytes;
use packd_odb::{ObjectId, ObjectKind};
use packd_pack::delta_search::{search, write_order, Candidate, Choice, SearchOptions};
use sha1::{Digest, Sha1};
use std::process::Command;

fn git(dir: &std::path::Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .current_dir(dir)
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// A pack entry's type-and-size header.
fn entry_header(out: &mut Vec<u8>, kind: u8, mut size: u64) {
    let mut byte = (kind << 4) | (size & 0x0f) as u8;
    size >>= 4;
    while size > 0 {
        out.push(byte | 0x80);
        byte = (size & 0x7f) as u8;
        size >>= 7;
    }
    out.push(byte);
}

/// An offset delta's distance back to its base.
fn ofs_distance(out: &mut Vec<u8>, mut distance: u64) {
    let mut bytes = vec![(distance & 0x7f) as u8];
    distance >>= 7;
    while distance > 0 {
        distance -= 1;
        bytes.push(0x80 | (distance & 0x7f) as u8);
        distance >>= 7;
    }
    bytes.reverse();
    out.extend_from_slice(&bytes);
}

#[test]
fn git_accepts_a_pack_of_the_searchs_choices() {
    // Versions of a few files, each a few lines changed, and trees of them: kinds are kept
    // apart.
    let mut objects: Vec<(ObjectKind, Vec<u8>, u32)> = Vec::new();
    for file in 0..8u32 {
        let mut text: Vec<String> = (0..80)
            .map(|l| format!("file {file} line {l} some text here\n"))
            .collect();
        for v in 0..15u32 {
            text[((v * 31 + file * 7) % 80) as usize] = format!("changed in {v}\n");
            if v % 4 == 0 {
                text.push(format!("added in {v}\n"));
            }
            objects.push((ObjectKind::Blob, text.concat().into_bytes(), file + 1));
        }
    }
    let id_of = |kind: ObjectKind, data: &[u8]| {
        let name = match kind {
            ObjectKind::Blob => "blob",
            _ => "tree",
        };
        let mut h = Sha1::new();
        h.update(format!("{name} {}\0", data.len()));
        h.update(data);
        ObjectId::from_bytes(&h.finalize()).unwrap()
    };
    let mut ids: Vec<ObjectId> = objects.iter().map(|(k, d, _)| id_of(*k, d)).collect();
    // Trees: version v of a directory of the 8 files, so that index-pack --strict finds every
    // entry's blob.
    for v in 0..15usize {
        let mut tree = Vec::new();
        for file in 0..8usize {
            tree.extend_from_slice(format!("100644 file{file:02}\0").as_bytes());
            tree.extend_from_slice(ids[file * 15 + v].as_bytes());
        }
        ids.push(id_of(ObjectKind::Tree, &tree));
        objects.push((ObjectKind::Tree, tree, 0));
    }
    let candidates: Vec<Candidate> = objects
        .iter()
        .zip(&ids)
        .map(|((kind, data, hash), id)| Candidate {
            id: *id,
            kind: *kind,
            size: data.len() as u64,
            name_hash: *hash,
            base_only: false,
            base_depth: 0,
            above: 0,
        })
        .collect();
    let load = |i: u32| Ok::<_, ()>(Bytes::from(objects[i as usize].1.clone()));
    let choices = search(&candidates, &SearchOptions::default(), &load, &|_| {}).unwrap();
    let deltas = choices
        .iter()
        .filter(|c| matches!(c, Choice::Delta { .. }))
        .count();
    assert!(deltas >= 8 * 14, "{deltas} deltas");

    let order = write_order(&candidates, &choices);
    let mut pack = b"PACK".to_vec();
    pack.extend_from_slice(&2u32.to_be_bytes());
    pack.extend_from_slice(&(order.len() as u32).to_be_bytes());
    let mut offsets = vec![None; candidates.len()];
    let mut compressor = libdeflater::Compressor::new(libdeflater::CompressionLvl::default());
    for &i in &order {
        let at = pack.len() as u64;
        offsets[i as usize] = Some(at);
        match &choices[i as usize] {
            Choice::Whole => {
                let data = &objects[i as usize].1;
                entry_header(
                    &mut pack,
                    candidates[i as usize].kind as u8,
                    data.len() as u64,
                );
                let mut z = vec![0; compressor.zlib_compress_bound(data.len())];
                let n = compressor.zlib_compress(data, &mut z).unwrap();
                pack.extend_from_slice(&z[..n]);
            }
            Choice::Delta {
                base,
                delta_size,
                compressed,
                ..
            } => {
                let base_at = offsets[*base as usize].expect("the base is written first");
                entry_header(&mut pack, 6, *delta_size);
                ofs_distance(&mut pack, at - base_at);
                pack.extend_from_slice(compressed);
            }
        }
    }
    let trailer = Sha1::digest(&pack);
    pack.extend_from_slice(&trailer);

    let dir = tempfile::tempdir().unwrap();
    git(dir.path(), &["init", "-q", "--bare", "repo.git"]);
    let repo = dir.path().join("repo.git");
    std::fs::write(repo.join("search.pack"), &pack).unwrap();
    git(
        &repo,
        &["index-pack", "--strict", "-o", "search.idx", "search.pack"],
    );
    let verified = git(&repo, &["verify-pack", "-v", "search.idx"]);
    // Each object as the search chose: a delta's line gives its size, depth and base.
    for (i, choice) in choices.iter().enumerate() {
        let line = verified
            .lines()
            .find(|l| l.starts_with(&ids[i].to_string()))
            .unwrap_or_else(|| panic!("{} missing", ids[i]));
        let fields: Vec<&str> = line.split_whitespace().collect();
        match choice {
            Choice::Whole => assert_eq!(fields.len(), 5, "{line}"),
            Choice::Delta {
                base,
                depth,
                delta_size,
                ..
            } => {
                assert_eq!(fields[2], delta_size.to_string(), "{line}");
                assert_eq!(fields[5], depth.to_string(), "{line}");
                assert_eq!(fields[6], ids[*base as usize].to_string(), "{line}");
            }
        }
    }
}
