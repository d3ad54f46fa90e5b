//! packd verify: succeeds on good packs (named by .pack or .idx, idx v1, v2, 64-bit offsets,
//! deep chains) and fails, naming what is wrong, on damaged ones.

mod common;
use common::*;
use std::path::{Path, PathBuf};

fn verify(sb: &Sandbox, path: &Path) -> Run {
    let run = sb.packd_in(sb.path(), &["verify", path.to_str().unwrap()], None);
    run.assert_no_crash();
    run
}

fn assert_verifies(sb: &Sandbox, path: &Path, objects: usize) {
    let run = verify(sb, path);
    run.assert_success();
    let out = run.out();
    assert!(
        out.contains("ok"),
        "verify {}: expected 'ok', got {out}",
        path.display()
    );
    assert!(
        out.contains(&format!("{objects} objects")),
        "verify {}: expected '{objects} objects' in: {out}",
        path.display()
    );
}

/// Requires failure, with a message (stderr or stdout) naming `offset` or `id`.
fn assert_fails_naming(
    sb: &Sandbox,
    path: &Path,
    offset: Option<u64>,
    id: Option<&str>,
    what: &str,
) {
    let run = verify(sb, path);
    assert!(
        !run.success(),
        "{what}: packd verify {} should fail; stdout: {}",
        path.display(),
        run.out()
    );
    let text = format!("{}\n{}", run.err(), run.out());
    if std::env::var_os("PACKD_TEST_SHOW").is_some() {
        eprintln!("[{what}] exit {:?}: {}", run.code(), text.trim_end());
    }
    assert!(!run.stderr.is_empty(), "{what}: no error message on stderr");
    if offset.is_some() || id.is_some() {
        // Don't count digits of the sandbox path.
        let cleaned = text.replace(&sb.path().display().to_string(), "<sandbox>");
        let by_offset = offset.is_some_and(|o| mentions_offset(&cleaned, o));
        let by_id = id.is_some_and(|i| text.contains(i));
        assert!(
            by_offset || by_id,
            "{what}: the error should name offset {offset:?} or object {id:?}; got:\n{text}"
        );
    }
}

/// A copy of the deep-chain pack in a scratch directory (pack, idx); the sandbox's repo stays
/// intact.
fn scratch_copy(sb: &Sandbox, repo: &Repo, name: &str) -> (PathBuf, PathBuf) {
    let pack = repo.packs()[0].clone();
    let dir = sb.path().join(name);
    std::fs::create_dir_all(&dir).unwrap();
    let p = dir.join(file_name(&pack));
    let i = p.with_extension("idx");
    std::fs::copy(&pack, &p).unwrap();
    std::fs::copy(pack.with_extension("idx"), &i).unwrap();
    (p, i)
}

fn git_verify_fails(repo: &Repo, idx: &Path) -> bool {
    !repo
        .git_run(&["verify-pack", idx.to_str().unwrap()], None)
        .success()
}

#[test]
fn good_packs_verify() {
    let sb = Sandbox::new();
    let repo = deep_chain_repo(&sb, "deep.git");
    let n = repo.all_ids().len();
    let pack = repo.packs()[0].clone();
    assert!(max_chain_length(&repo, &pack.with_extension("idx")) >= 10);
    assert_verifies(&sb, &pack, n);
    assert_verifies(&sb, &pack.with_extension("idx"), n);
    // Relative path, resolved against -C.
    let run = sb.packd_in(
        sb.path(),
        &["-C", "deep.git/objects/pack", "verify", &file_name(&pack)],
        None,
    );
    run.assert_no_crash().assert_success();
}

#[test]
fn idx_v1_and_64bit_offsets_verify() {
    let sb = Sandbox::new();
    let repo = deep_chain_repo(&sb, "deep.git");
    let n = repo.all_ids().len();
    let pack = repo.packs()[0].clone();
    for (dir, version) in [
        ("v1", "--index-version=1"),
        ("off64", "--index-version=2,0x40"),
    ] {
        let d = sb.path().join(dir);
        std::fs::create_dir_all(&d).unwrap();
        let copy = d.join(file_name(&pack));
        std::fs::copy(&pack, &copy).unwrap();
        repo.git(&["index-pack", version, copy.to_str().unwrap()]);
        assert_verifies(&sb, &copy.with_extension("idx"), n);
        assert_verifies(&sb, &copy, n);
    }
}

/// An entry deep inside the pack that no other entry uses as a base, with room to damage.
fn victim(repo: &Repo, idx: &Path) -> PackEntry {
    let entries = verify_pack_entries(repo, idx);
    let bases: std::collections::HashSet<String> =
        entries.iter().filter_map(|e| e.base.clone()).collect();
    let mut candidates: Vec<&PackEntry> = entries
        .iter()
        .filter(|e| !bases.contains(&e.id) && e.size_in_pack >= 60)
        .collect();
    candidates.sort_by_key(|e| e.offset);
    assert!(!candidates.is_empty());
    candidates[candidates.len() / 2].clone()
}

#[test]
fn flipped_byte_in_compressed_entry_with_fixed_checksums() {
    // Only the entry's CRC32 and its inflated content can reveal this damage.
    let sb = Sandbox::new();
    let repo = deep_chain_repo(&sb, "deep.git");
    let (p, i) = scratch_copy(&sb, &repo, "flip");
    let v = victim(&repo, &i);
    let mut pack = std::fs::read(&p).unwrap();
    let mut idx = std::fs::read(&i).unwrap();
    let at = (v.offset + v.size_in_pack / 2) as usize;
    pack[at] ^= 0x55;
    fix_pack_and_idx_checksums(&mut pack, &mut idx);
    std::fs::write(&p, &pack).unwrap();
    std::fs::write(&i, &idx).unwrap();
    assert!(
        git_verify_fails(&repo, &i),
        "git should reject the damaged pack too"
    );
    assert_fails_naming(&sb, &p, Some(v.offset), Some(&v.id), "flipped byte");
    assert_fails_naming(
        &sb,
        &i,
        Some(v.offset),
        Some(&v.id),
        "flipped byte (via .idx)",
    );
}

#[test]
fn flipped_byte_in_compressed_entry() {
    // The plain case: the pack trailer no longer matches either.
    let sb = Sandbox::new();
    let repo = deep_chain_repo(&sb, "deep.git");
    let (p, i) = scratch_copy(&sb, &repo, "flip");
    let v = victim(&repo, &i);
    let mut pack = std::fs::read(&p).unwrap();
    pack[(v.offset + v.size_in_pack / 2) as usize] ^= 0x01;
    std::fs::write(&p, &pack).unwrap();
    assert_fails_naming(&sb, &p, None, None, "flipped byte, stale trailer");
}

#[test]
fn flipped_byte_in_entry_header_with_fixed_checksums() {
    let sb = Sandbox::new();
    let repo = deep_chain_repo(&sb, "deep.git");
    let (p, i) = scratch_copy(&sb, &repo, "hdr");
    let v = victim(&repo, &i);
    let mut pack = std::fs::read(&p).unwrap();
    let mut idx = std::fs::read(&i).unwrap();
    // Change the size bits of the first header byte.
    pack[v.offset as usize] ^= 0x03;
    fix_pack_and_idx_checksums(&mut pack, &mut idx);
    std::fs::write(&p, &pack).unwrap();
    std::fs::write(&i, &idx).unwrap();
    assert_fails_naming(&sb, &p, Some(v.offset), Some(&v.id), "damaged entry header");
}

#[test]
fn truncated_pack() {
    let sb = Sandbox::new();
    let repo = deep_chain_repo(&sb, "deep.git");
    for (name, cut) in [("t1", 1usize), ("t30", 30), ("thalf", 0)] {
        let (p, _i) = scratch_copy(&sb, &repo, name);
        let pack = std::fs::read(&p).unwrap();
        let len = if cut == 0 {
            pack.len() / 2
        } else {
            pack.len() - cut
        };
        std::fs::write(&p, &pack[..len]).unwrap();
        assert_fails_naming(
            &sb,
            &p,
            None,
            None,
            &format!("pack truncated to {len} bytes"),
        );
    }
    // Down to nothing but a header, and empty.
    for (name, len) in [("t12", 12usize), ("t0", 0)] {
        let (p, _i) = scratch_copy(&sb, &repo, name);
        let pack = std::fs::read(&p).unwrap();
        std::fs::write(&p, &pack[..len]).unwrap();
        assert_fails_naming(
            &sb,
            &p,
            None,
            None,
            &format!("pack truncated to {len} bytes"),
        );
    }
}

#[test]
fn idx_with_flipped_crc() {
    let sb = Sandbox::new();
    let repo = deep_chain_repo(&sb, "deep.git");
    let (p, i) = scratch_copy(&sb, &repo, "crc");
    let entries = verify_pack_entries(&repo, &i);
    let n = entries.len();
    let mut idx = std::fs::read(&i).unwrap();
    // The k-th id in sorted order.
    let k = n / 3;
    let id_at = |idx: &[u8], k: usize| hex(&idx[8 + 1024 + k * 20..8 + 1024 + (k + 1) * 20]);
    let id = id_at(&idx, k);
    let offset = entries.iter().find(|e| e.id == id).unwrap().offset;
    idx[8 + 1024 + n * 20 + k * 4 + 2] ^= 0x10;
    fix_idx_checksum(&mut idx);
    std::fs::write(&i, &idx).unwrap();
    assert!(
        git_verify_fails(&repo, &i),
        "git should reject the bad CRC too"
    );
    assert_fails_naming(
        &sb,
        &i,
        Some(offset),
        Some(&id),
        "flipped CRC (idx checksum fixed)",
    );
    assert_fails_naming(&sb, &p, Some(offset), Some(&id), "flipped CRC, via .pack");

    // Without fixing the idx checksum.
    let (_p2, i2) = scratch_copy(&sb, &repo, "crc2");
    let mut idx = std::fs::read(&i2).unwrap();
    idx[8 + 1024 + n * 20 + k * 4] ^= 0x80;
    std::fs::write(&i2, &idx).unwrap();
    assert_fails_naming(&sb, &i2, None, None, "flipped CRC, stale idx checksum");
}

#[test]
fn idx_with_wrong_trailer() {
    let sb = Sandbox::new();
    let repo = deep_chain_repo(&sb, "deep.git");
    // The idx's own checksum.
    let (_p, i) = scratch_copy(&sb, &repo, "trailer");
    let mut idx = std::fs::read(&i).unwrap();
    let len = idx.len();
    idx[len - 1] ^= 0xff;
    std::fs::write(&i, &idx).unwrap();
    assert_fails_naming(&sb, &i, None, None, "wrong idx checksum");
    // The pack checksum recorded in the idx (idx checksum fixed).
    let (p, i) = scratch_copy(&sb, &repo, "packsum");
    let mut idx = std::fs::read(&i).unwrap();
    idx[len - 30] ^= 0xff;
    fix_idx_checksum(&mut idx);
    std::fs::write(&i, &idx).unwrap();
    assert_fails_naming(&sb, &i, None, None, "idx records a different pack checksum");
    assert_fails_naming(
        &sb,
        &p,
        None,
        None,
        "idx records a different pack checksum (via .pack)",
    );
    // A pack whose trailer is wrong.
    let (p, _i) = scratch_copy(&sb, &repo, "packtrailer");
    let mut pack = std::fs::read(&p).unwrap();
    let plen = pack.len();
    pack[plen - 5] ^= 0x01;
    std::fs::write(&p, &pack).unwrap();
    assert_fails_naming(&sb, &p, None, None, "wrong pack trailer");
}

#[test]
fn idx_with_swapped_offsets() {
    // Consistent checksums and CRCs, but two ids point at each other's entries.
    let sb = Sandbox::new();
    let repo = deep_chain_repo(&sb, "deep.git");
    let (p, i) = scratch_copy(&sb, &repo, "swap");
    let mut idx = std::fs::read(&i).unwrap();
    let n = u32::from_be_bytes(idx[8 + 255 * 4..8 + 1024].try_into().unwrap()) as usize;
    let (a, b) = (n / 4, n / 2);
    let crc = 8 + 1024 + n * 20;
    let off = crc + n * 4;
    for table in [crc, off] {
        let x: [u8; 4] = idx[table + a * 4..table + a * 4 + 4].try_into().unwrap();
        let y: [u8; 4] = idx[table + b * 4..table + b * 4 + 4].try_into().unwrap();
        idx[table + a * 4..table + a * 4 + 4].copy_from_slice(&y);
        idx[table + b * 4..table + b * 4 + 4].copy_from_slice(&x);
    }
    fix_idx_checksum(&mut idx);
    std::fs::write(&i, &idx).unwrap();
    assert!(git_verify_fails(&repo, &i));
    assert_fails_naming(&sb, &p, None, None, "ids swapped in the idx");
}

#[test]
fn truncated_idx() {
    let sb = Sandbox::new();
    let repo = deep_chain_repo(&sb, "deep.git");
    for (name, len) in [
        ("i-half", None),
        ("i-1000", Some(1000usize)),
        ("i-4", Some(4)),
        ("i-0", Some(0)),
    ] {
        let (p, i) = scratch_copy(&sb, &repo, name);
        let idx = std::fs::read(&i).unwrap();
        let len = len.unwrap_or(idx.len() / 2);
        std::fs::write(&i, &idx[..len]).unwrap();
        assert_fails_naming(&sb, &i, None, None, &format!("idx truncated to {len}"));
        assert_fails_naming(
            &sb,
            &p,
            None,
            None,
            &format!("idx truncated to {len} (via .pack)"),
        );
    }
}

#[test]
fn missing_idx_or_pack() {
    let sb = Sandbox::new();
    let repo = deep_chain_repo(&sb, "deep.git");
    let (p, i) = scratch_copy(&sb, &repo, "noidx");
    std::fs::remove_file(&i).unwrap();
    assert_fails_naming(&sb, &p, None, None, "no idx");
    let (p, i) = scratch_copy(&sb, &repo, "nopack");
    std::fs::remove_file(&p).unwrap();
    assert_fails_naming(&sb, &i, None, None, "no pack");
}

/// Crafted packs whose checksums and CRCs are all consistent, so only the deeper checks can
/// fail.
mod crafted {
    use super::*;

    fn install(
        sb: &Sandbox,
        name: &str,
        w: PackWriter,
        extra_idx: &[IdxEntry],
    ) -> (PathBuf, PathBuf) {
        let (pack, mut entries, sum) = w.finish();
        entries.extend_from_slice(extra_idx);
        let idx = write_idx_v2(&entries, &sum);
        let dir = sb.path().join(name);
        install_pack(&dir, &pack, &idx)
    }

    #[test]
    fn good_crafted_pack_verifies() {
        let sb = Sandbox::new();
        let repo = sb.init_bare("r.git");
        let mut w = PackWriter::new();
        let (base, base_off) = w.object(OBJ_BLOB, b"hello world, this is the base\n");
        let mut d = delta_header(30, 36);
        d.extend(delta_copy(0, 30));
        d.extend(delta_insert(b"extra\n"));
        let result = object_id("blob", b"hello world, this is the base\nextra\n");
        w.ofs_delta(result, base_off, &d);
        let mut d2 = delta_header(30, 5);
        d2.extend(delta_copy(0, 5));
        w.ref_delta(object_id("blob", b"hello"), base, &d2);
        let (p, i) = install(&sb, "good", w, &[]);
        let out = repo.git_run(&["verify-pack", i.to_str().unwrap()], None);
        assert!(
            out.success(),
            "the crafted pack should satisfy git: {}",
            out.err()
        );
        assert_verifies(&sb, &p, 3);
    }

    #[test]
    fn wrong_object_id_in_idx() {
        let sb = Sandbox::new();
        let mut w = PackWriter::new();
        w.object(OBJ_BLOB, b"first\n");
        let wrong = object_id("blob", b"not the content\n");
        let off = w.raw_entry(wrong, &entry_header(OBJ_BLOB, 7), &[], &zlib(b"second\n"));
        w.object(OBJ_BLOB, b"third\n");
        let (p, _i) = install(&sb, "wrongid", w, &[]);
        assert_fails_naming(
            &sb,
            &p,
            Some(off),
            Some(&hex(&wrong)),
            "object id does not match content",
        );
    }

    #[test]
    fn idx_count_differs_from_pack_header() {
        let sb = Sandbox::new();
        let mut w = PackWriter::new();
        w.object(OBJ_BLOB, b"one\n");
        w.object(OBJ_BLOB, b"two\n");
        w.count_override = Some(3);
        let (p, _i) = install(&sb, "count", w, &[]);
        assert_fails_naming(&sb, &p, None, None, "pack header says 3 objects, idx 2");
    }

    #[test]
    fn entry_missing_from_idx() {
        // The pack holds three objects, the idx (and header) lists two: an entry nobody indexes
        // sits between them.
        let sb = Sandbox::new();
        let mut w = PackWriter::new();
        w.object(OBJ_BLOB, b"one\n");
        w.object(OBJ_BLOB, b"two\n");
        w.object(OBJ_BLOB, b"three\n");
        w.entries.remove(1);
        let (p, _i) = install(&sb, "unindexed", w, &[]);
        assert_fails_naming(&sb, &p, None, None, "an entry not in the idx");
    }

    #[test]
    fn unsorted_idx() {
        let sb = Sandbox::new();
        let mut w = PackWriter::new();
        for i in 0..20 {
            w.object(OBJ_BLOB, format!("object {i}\n").as_bytes());
        }
        let (pack, entries, sum) = w.finish();
        let mut idx = write_idx_v2(&entries, &sum);
        // Swap two adjacent ids with the same first byte... or any two: the fanout and order
        // break either way.
        let (a, b) = (3usize, 12usize);
        let ida: Vec<u8> = idx[1032 + a * 20..1032 + a * 20 + 20].to_vec();
        let idb: Vec<u8> = idx[1032 + b * 20..1032 + b * 20 + 20].to_vec();
        idx[1032 + a * 20..1032 + a * 20 + 20].copy_from_slice(&idb);
        idx[1032 + b * 20..1032 + b * 20 + 20].copy_from_slice(&ida);
        fix_idx_checksum(&mut idx);
        let (p, _i) = install_pack(&sb.path().join("unsorted"), &pack, &idx);
        assert_fails_naming(&sb, &p, None, None, "ids out of order in the idx");
    }

    #[test]
    fn delta_result_does_not_match_header() {
        let sb = Sandbox::new();
        let mut w = PackWriter::new();
        let (_, base_off) = w.object(OBJ_BLOB, b"0123456789");
        // Says 20 bytes result, produces 10.
        let mut d = delta_header(10, 20);
        d.extend(delta_copy(0, 10));
        let id = object_id("blob", b"01234567890123456789");
        let off = w.ofs_delta(id, base_off, &d);
        let (p, _i) = install(&sb, "shortdelta", w, &[]);
        assert_fails_naming(
            &sb,
            &p,
            Some(off),
            Some(&hex(&id)),
            "delta result shorter than declared",
        );
    }
}
