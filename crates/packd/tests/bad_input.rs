//! Damaged and hostile input: hand-crafted packs (delta cycles, base offsets outside the pack,
//! absurd sizes, bad delta instructions, truncation, idx offsets past the end), broken idx
//! files and corrupt loose objects. packd must fail with an error naming the file (and, for
//! pack entries, the offset), never panic or crash, and finish within the timeout (enforced by
//! `run_cmd`).

mod common;
use common::*;
use std::path::{Path, PathBuf};

/// A bare repository with a crafted pack in it.
struct Crafted {
    sb: Sandbox,
    repo: Repo,
    pack: PathBuf,
    idx: PathBuf,
}

impl Crafted {
    fn new(w: PackWriter, extra_idx: &[IdxEntry]) -> Crafted {
        let sb = Sandbox::new();
        let repo = sb.init_bare("r.git");
        let (pack, mut entries, sum) = w.finish();
        entries.extend_from_slice(extra_idx);
        let idx = write_idx_v2(&entries, &sum);
        let (pack, idx) = install_pack(&repo.objects_dir(), &pack, &idx);
        Crafted {
            sb,
            repo,
            pack,
            idx,
        }
    }

    /// "pack-<hex>": matches an error naming either the .pack or the .idx.
    fn stem(&self) -> String {
        file_name(&self.pack).trim_end_matches(".pack").to_string()
    }
}

/// Checks a failed run: the right kind of failure, no crash, a message naming `hint` and (if
/// any are given) one of `offsets`.
fn assert_clean_error(
    run: &Run,
    sb: &Sandbox,
    hint: &str,
    offsets: &[u64],
    what: &str,
    batch: bool,
) {
    run.assert_no_crash();
    let err = run.err();
    if std::env::var_os("PACKD_TEST_SHOW").is_some() {
        eprintln!("[{what}] exit {:?}: {}", run.code(), err.trim_end());
    }
    if batch {
        assert!(
            !run.success() || !err.trim().is_empty(),
            "{what}: expected a non-zero exit or an error on stderr; stdout: {}",
            truncate(&run.out(), 500)
        );
    } else {
        assert!(
            !run.success(),
            "{what}: expected failure; stdout: {}",
            truncate(&run.out(), 500)
        );
    }
    assert!(
        err.contains(hint),
        "{what}: the error should name {hint}; stderr:\n{err}"
    );
    if !offsets.is_empty() {
        // Don't count digits of the sandbox path or the file name.
        let cleaned = err
            .replace(&sb.path().display().to_string(), "<sandbox>")
            .replace(hint, "<file>");
        assert!(
            offsets.iter().any(|&o| mentions_offset(&cleaned, o)),
            "{what}: the error should name the offset (one of {offsets:?}); stderr:\n{err}"
        );
    }
}

/// Runs the usual commands on object `id` of a crafted repository and checks each fails
/// cleanly. `type_fails`: whether -t must fail too (it needs only the header, which may be
/// fine).
fn check_object(c: &Crafted, id: &str, offsets: &[u64], type_fails: bool) {
    let hint = c.stem();
    let mut cmds: Vec<Vec<&str>> = vec![vec!["cat-file", "-p", id]];
    if type_fails {
        cmds.push(vec!["cat-file", "-t", id]);
    }
    for args in &cmds {
        let run = c.repo.packd(args, None);
        assert_clean_error(
            &run,
            &c.sb,
            &hint,
            offsets,
            &format!("packd {}", args.join(" ")),
            false,
        );
    }
    let input = lines_input(&[id]);
    let run = c.repo.packd(&["cat-file", "--batch"], Some(&input));
    assert_clean_error(&run, &c.sb, &hint, offsets, "packd cat-file --batch", true);
    if type_fails {
        let run = c.repo.packd(&["cat-file", "--batch-check"], Some(&input));
        assert_clean_error(
            &run,
            &c.sb,
            &hint,
            offsets,
            "packd cat-file --batch-check",
            true,
        );
    }
    let run = c
        .repo
        .packd(&["cat-file", "--batch-all-objects", "--batch"], None);
    assert_clean_error(
        &run,
        &c.sb,
        &hint,
        &[],
        "packd cat-file --batch-all-objects --batch",
        true,
    );
    // verify must reject the pack too.
    let run =
        c.sb.packd_in(c.sb.path(), &["verify", c.pack.to_str().unwrap()], None);
    run.assert_no_crash();
    assert!(
        !run.success(),
        "packd verify should reject the pack; stdout: {}",
        run.out()
    );
}

/// If git can read `id` from the damaged repository, packd must read it identically.
fn good_object_like_git(c: &Crafted, id: &str) {
    let git = c.repo.git_run(&["cat-file", "-p", id], None);
    if !git.success() {
        return;
    }
    let run = c.repo.packd(&["cat-file", "-p", id], None);
    run.assert_no_crash().assert_success();
    assert_same_bytes(
        "intact object next to a damaged one",
        &git.stdout,
        &run.stdout,
    );
}

fn copy_delta(size: u64) -> Vec<u8> {
    let mut d = delta_header(size, size);
    d.extend(delta_copy(0, size as u32));
    d
}

const BASE: &[u8] = b"hello world";

/// A pack starting with a good blob (BASE) at offset 12; returns the writer and the blob's id.
fn with_base() -> (PackWriter, String, u64) {
    let mut w = PackWriter::new();
    let (id, off) = w.object(OBJ_BLOB, BASE);
    assert_eq!(off, 12);
    (w, hex(&id), off)
}

fn fake_id(tag: &str) -> [u8; 20] {
    object_id("blob", tag.as_bytes())
}

// --- delta chains that never end --------------------------------------------------------------

#[test]
fn ref_delta_cycle() {
    let (mut w, good, _) = with_base();
    let (a, b) = (fake_id("cycle a"), fake_id("cycle b"));
    let off_a = w.ref_delta(a, b, &copy_delta(7));
    let off_b = w.ref_delta(b, a, &copy_delta(7));
    let c = Crafted::new(w, &[]);
    check_object(&c, &hex(&a), &[off_a, off_b], true);
    check_object(&c, &hex(&b), &[off_a, off_b], true);
    good_object_like_git(&c, &good);
}

#[test]
fn ref_delta_cycle_of_three() {
    let (mut w, _, _) = with_base();
    let (a, b, d) = (fake_id("c3 a"), fake_id("c3 b"), fake_id("c3 c"));
    let oa = w.ref_delta(a, b, &copy_delta(5));
    let ob = w.ref_delta(b, d, &copy_delta(5));
    let od = w.ref_delta(d, a, &copy_delta(5));
    let c = Crafted::new(w, &[]);
    check_object(&c, &hex(&b), &[oa, ob, od], true);
}

#[test]
fn ofs_delta_pointing_at_itself() {
    let (mut w, good, _) = with_base();
    let id = fake_id("self");
    let off = w.ofs_delta_distance(id, 0, &copy_delta(11));
    let c = Crafted::new(w, &[]);
    check_object(&c, &hex(&id), &[off], true);
    good_object_like_git(&c, &good);
}

// --- base offsets outside the pack ----------------------------------------------------------

#[test]
fn ofs_delta_base_before_pack_start() {
    let (mut w, good, _) = with_base();
    let id = fake_id("before start");
    let distance = w.offset() + 100;
    let off = w.ofs_delta_distance(id, distance, &copy_delta(11));
    let c = Crafted::new(w, &[]);
    check_object(&c, &hex(&id), &[off], true);
    good_object_like_git(&c, &good);
}

#[test]
fn ofs_delta_base_far_before_pack_start() {
    // A distance near 2^63: offset arithmetic must not overflow.
    let (mut w, _, _) = with_base();
    let id = fake_id("far before start");
    let off = w.ofs_delta_distance(id, (1u64 << 62) + 12345, &copy_delta(11));
    let c = Crafted::new(w, &[]);
    check_object(&c, &hex(&id), &[off], true);
}

#[test]
fn ofs_delta_base_inside_pack_header() {
    let (mut w, _, _) = with_base();
    let id = fake_id("into header");
    let distance = w.offset() - 4;
    let off = w.ofs_delta_distance(id, distance, &copy_delta(11));
    let c = Crafted::new(w, &[]);
    check_object(&c, &hex(&id), &[off, 4], true);
}

#[test]
fn ofs_delta_base_in_the_middle_of_an_entry() {
    let (mut w, _, base_off) = with_base();
    let id = fake_id("mid entry");
    let off = w.ofs_delta(id, base_off + 2, &copy_delta(11));
    let c = Crafted::new(w, &[]);
    check_object(&c, &hex(&id), &[off, base_off + 2], false);
}

#[test]
fn ref_delta_base_missing() {
    let (mut w, good, _) = with_base();
    let id = fake_id("orphan");
    let off = w.ref_delta(id, fake_id("nowhere"), &copy_delta(11));
    let c = Crafted::new(w, &[]);
    check_object(&c, &hex(&id), &[off], true);
    good_object_like_git(&c, &good);
}

// --- absurd sizes -----------------------------------------------------------------------------

#[test]
fn entry_declares_size_2_pow_60() {
    let (mut w, good, _) = with_base();
    let id = fake_id("huge");
    let off = w.raw_entry(id, &entry_header(OBJ_BLOB, 1 << 60), &[], &zlib(b"hi"));
    let c = Crafted::new(w, &[]);
    check_object(&c, &hex(&id), &[off], false);
    good_object_like_git(&c, &good);
}

#[test]
fn entry_size_varint_overflows() {
    let (mut w, _, _) = with_base();
    let id = fake_id("overflow");
    let mut header = vec![0x80 | (OBJ_BLOB << 4) | 0x0f];
    header.extend([0xff; 12]);
    header.push(0x01);
    let off = w.raw_entry(id, &header, &[], &zlib(b"hi"));
    let c = Crafted::new(w, &[]);
    check_object(&c, &hex(&id), &[off], false);
}

#[test]
fn delta_declares_result_size_2_pow_60() {
    let (mut w, _, base_off) = with_base();
    let id = fake_id("huge delta");
    let mut d = delta_header(11, 1 << 60);
    d.extend(delta_insert(b"x"));
    let off = w.ofs_delta(id, base_off, &d);
    let c = Crafted::new(w, &[]);
    check_object(&c, &hex(&id), &[off], false);
}

#[test]
fn delta_size_varint_overflows() {
    let (mut w, _, base_off) = with_base();
    let id = fake_id("delta varint");
    let mut d = delta_varint(11);
    d.extend([0xff; 12]);
    d.push(0x01);
    d.extend(delta_insert(b"x"));
    let off = w.ofs_delta(id, base_off, &d);
    let c = Crafted::new(w, &[]);
    check_object(&c, &hex(&id), &[off], false);
}

#[test]
fn entry_declared_size_larger_than_data() {
    let (mut w, good, _) = with_base();
    let id = fake_id("short");
    let off = w.raw_entry(id, &entry_header(OBJ_BLOB, 100), &[], &zlib(b"short"));
    let c = Crafted::new(w, &[]);
    check_object(&c, &hex(&id), &[off], false);
    good_object_like_git(&c, &good);
}

#[test]
fn entry_declared_size_smaller_than_data() {
    let (mut w, _, _) = with_base();
    let id = fake_id("long");
    let off = w.raw_entry(
        id,
        &entry_header(OBJ_BLOB, 3),
        &[],
        &zlib(b"much longer content than declared"),
    );
    let c = Crafted::new(w, &[]);
    check_object(&c, &hex(&id), &[off], false);
}

// --- bad delta instructions ------------------------------------------------------------------

fn delta_case(delta: Vec<u8>, tag: &str) {
    let (mut w, good, base_off) = with_base();
    let id = fake_id(tag);
    let off = w.ofs_delta(id, base_off, &delta);
    let c = Crafted::new(w, &[]);
    check_object(&c, &hex(&id), &[off], false);
    good_object_like_git(&c, &good);
}

#[test]
fn delta_copies_beyond_base() {
    let mut d = delta_header(11, 50);
    d.extend(delta_copy(0, 50));
    delta_case(d, "copy beyond");
}

#[test]
fn delta_copy_offset_wraps() {
    let mut d = delta_header(11, 10);
    d.extend(delta_copy(0xffff_fff8, 10));
    delta_case(d, "copy wraps");
}

#[test]
fn delta_base_size_mismatch() {
    let mut d = delta_header(999, 11);
    d.extend(delta_copy(0, 11));
    delta_case(d, "base size");
}

#[test]
fn delta_inserts_beyond_result() {
    let mut d = delta_header(11, 3);
    d.extend(delta_insert(b"0123456789"));
    delta_case(d, "insert beyond");
}

#[test]
fn delta_result_shorter_than_declared() {
    let mut d = delta_header(11, 20);
    d.extend(delta_copy(0, 11));
    delta_case(d, "result short");
}

#[test]
fn delta_reserved_opcode_zero() {
    let mut d = delta_header(11, 5);
    d.push(0);
    delta_case(d, "opcode zero");
}

#[test]
fn delta_truncated_copy_instruction() {
    let mut d = delta_header(11, 5);
    d.push(0x80 | 0x01 | 0x10); // needs an offset byte and a size byte; neither follows
    delta_case(d, "truncated copy");
}

// --- damaged entries ------------------------------------------------------------------------

#[test]
fn corrupt_zlib_stream() {
    let (mut w, good, _) = with_base();
    let id = fake_id("garbage");
    let off = w.raw_entry(
        id,
        &entry_header(OBJ_BLOB, 20),
        &[],
        &[
            0x12, 0x34, 0x56, 0x78, 0x9a, 0xbc, 0xde, 0xf0, 1, 2, 3, 4, 5, 6, 7, 8,
        ],
    );
    let c = Crafted::new(w, &[]);
    check_object(&c, &hex(&id), &[off], false);
    good_object_like_git(&c, &good);
}

#[test]
fn zlib_stream_cut_short() {
    let (mut w, _, _) = with_base();
    let id = fake_id("cut zlib");
    let data = Rng::new(3).bytes(500);
    let z = zlib(&data);
    let off = w.raw_entry(id, &entry_header(OBJ_BLOB, 500), &[], &z[..z.len() / 2]);
    w.object(OBJ_BLOB, b"an entry after the cut one\n");
    let c = Crafted::new(w, &[]);
    check_object(&c, &hex(&id), &[off], false);
}

#[test]
fn invalid_object_types() {
    for (t, tag) in [(5u8, "type five"), (0u8, "type zero")] {
        let (mut w, _, _) = with_base();
        let id = fake_id(tag);
        let off = w.raw_entry(id, &entry_header(t, 3), &[], &zlib(b"abc"));
        let c = Crafted::new(w, &[]);
        check_object(&c, &hex(&id), &[off], true);
    }
}

// --- idx offsets that lead nowhere, truncated packs --------------------------------------------

fn idx_offset_crafted(offset_of: impl Fn(u64) -> u64, tag: &str) -> (Crafted, String, String, u64) {
    let (mut w, good, _) = with_base();
    // The header counts the phantom entry too, so the pack and idx agree on the count and only
    // the offset is wrong.
    w.count_override = Some(2);
    let pack_len = w.offset() + 20;
    let id = fake_id(tag);
    let off = offset_of(pack_len);
    let c = Crafted::new(
        w,
        &[IdxEntry {
            id,
            offset: off,
            crc: 0,
        }],
    );
    (c, hex(&id), good, off)
}

fn idx_offset_case(offset_of: impl Fn(u64) -> u64, tag: &str) {
    let (c, id, _, off) = idx_offset_crafted(offset_of, tag);
    check_object(&c, &id, &[off], true);
}

#[test]
fn intact_object_readable_despite_bad_idx_offset_elsewhere() {
    // git reads the good object of such a pack; packd should too (it may still reject the
    // phantom one).
    let (c, _, good, _) = idx_offset_crafted(|len| len + 1000, "past end, good object");
    assert!(c.repo.git_run(&["cat-file", "-p", &good], None).success());
    good_object_like_git(&c, &good);
}

#[test]
fn idx_offset_past_end_of_pack() {
    idx_offset_case(|len| len + 1000, "past end");
}

#[test]
fn idx_offset_exactly_at_end_of_pack() {
    idx_offset_case(|len| len, "at end");
}

#[test]
fn idx_offset_inside_trailer() {
    idx_offset_case(|len| len - 10, "in trailer");
}

#[test]
fn idx_offset_in_pack_header() {
    idx_offset_case(|_| 0, "at zero");
}

#[test]
fn idx_64bit_offset_far_past_end() {
    idx_offset_case(|_| 1 << 40, "64-bit");
}

#[test]
fn truncated_pack_file() {
    let mut w = PackWriter::new();
    let mut rng = Rng::new(77);
    let mut ids = Vec::new();
    for _ in 0..3 {
        let data = rng.bytes(2000); // incompressible: the entries are ~2 KB each
        ids.push(hex(&w.object(OBJ_BLOB, &data).0));
    }
    let last_off = w.entries[2].offset;
    let c = Crafted::new(w, &[]);
    let full = std::fs::read(&c.pack).unwrap();
    std::fs::write(&c.pack, &full[..full.len() - 1500]).unwrap();
    let hint = c.stem();
    for args in [
        vec!["cat-file", "-p", &ids[2]],
        vec!["cat-file", "-s", &ids[2]],
    ] {
        let run = c.repo.packd(&args, None);
        assert_clean_error(
            &run,
            &c.sb,
            &hint,
            &[],
            &format!("packd {}", args.join(" ")),
            false,
        );
    }
    let run = c
        .repo
        .packd(&["cat-file", "--batch"], Some(&lines_input(&ids)));
    assert_clean_error(&run, &c.sb, &hint, &[], "packd cat-file --batch", true);
    let run = c
        .repo
        .packd(&["cat-file", "--batch-all-objects", "--batch"], None);
    assert_clean_error(&run, &c.sb, &hint, &[], "--batch-all-objects --batch", true);
    let run =
        c.sb.packd_in(c.sb.path(), &["verify", c.pack.to_str().unwrap()], None);
    run.assert_no_crash();
    assert!(!run.success());
    let _ = last_off;

    // Truncated to just the header, and to nothing.
    for len in [12usize, 5, 0] {
        std::fs::write(&c.pack, &full[..len]).unwrap();
        let run = c.repo.packd(&["cat-file", "-p", &ids[0]], None);
        assert_clean_error(
            &run,
            &c.sb,
            &hint,
            &[],
            &format!("pack cut to {len} bytes"),
            false,
        );
    }
}

// --- broken idx files ----------------------------------------------------------------------

fn broken_idx_case(damage: impl Fn(&mut Vec<u8>)) {
    let (w, good, _) = with_base();
    let c = Crafted::new(w, &[]);
    let mut idx = std::fs::read(&c.idx).unwrap();
    damage(&mut idx);
    std::fs::write(&c.idx, &idx).unwrap();
    let hint = c.stem();
    let run = c.repo.packd(&["cat-file", "-p", &good], None);
    assert_clean_error(
        &run,
        &c.sb,
        &hint,
        &[],
        "packd cat-file -p with a broken idx",
        false,
    );
    let run = c
        .repo
        .packd(&["cat-file", "--batch-all-objects", "--batch-check"], None);
    run.assert_no_crash();
    let run = c
        .repo
        .packd(&["cat-file", "--batch-check"], Some(&lines_input(&[&good])));
    run.assert_no_crash();
    let run =
        c.sb.packd_in(c.sb.path(), &["verify", c.idx.to_str().unwrap()], None);
    run.assert_no_crash();
    assert!(!run.success(), "verify should reject a broken idx");
}

#[test]
fn idx_claims_huge_object_count() {
    broken_idx_case(|idx| {
        for i in 0..256 {
            let at = 8 + i * 4;
            let v = u32::from_be_bytes(idx[at..at + 4].try_into().unwrap());
            if v > 0 {
                idx[at..at + 4].copy_from_slice(&0xffff_fff0u32.to_be_bytes());
            }
        }
        fix_idx_checksum(idx);
    });
}

#[test]
fn idx_fanout_not_monotonic() {
    broken_idx_case(|idx| {
        // Raise one early bucket above the total count.
        idx[8 + 4 * 3..8 + 4 * 4].copy_from_slice(&1000u32.to_be_bytes());
        fix_idx_checksum(idx);
    });
}

#[test]
fn idx_truncated() {
    broken_idx_case(|idx| idx.truncate(500));
}

#[test]
fn idx_bad_version() {
    broken_idx_case(|idx| {
        idx[7] = 3;
        fix_idx_checksum(idx);
    });
}

// --- a very long (valid) delta chain ---------------------------------------------------------

/// A delta from `base` to `new` (same length): copies of unchanged runs, inserts of the rest.
fn delta_between(base: &[u8], new: &[u8]) -> Vec<u8> {
    assert_eq!(base.len(), new.len());
    let mut d = delta_header(base.len() as u64, new.len() as u64);
    let mut i = 0;
    while i < new.len() {
        let same = base[i] == new[i];
        let mut j = i;
        while j < new.len() && (base[j] == new[j]) == same {
            j += 1;
        }
        if same {
            d.extend(delta_copy(i as u32, (j - i) as u32));
        } else {
            d.extend(delta_insert(&new[i..j]));
        }
        i = j;
    }
    d
}

#[test]
fn very_long_delta_chain_is_read_like_git() {
    // Valid input: no recursion limit or stack overflow may stop packd where git reads it.
    let sb = Sandbox::new();
    let repo = sb.init_bare("long.git");
    let mut w = PackWriter::new();
    let mut content: Vec<u8> = (0..200u32).map(|i| b'a' + (i % 26) as u8).collect();
    let (_, mut prev_off) = w.object(OBJ_BLOB, &content);
    let mut ids = Vec::new();
    for i in 0..10_000u32 {
        let base = content.clone();
        // A counter at the start keeps every version distinct; one more byte changes.
        content[..6].copy_from_slice(format!("{i:06}").as_bytes());
        let at = 6 + (i as usize * 7) % (content.len() - 6);
        content[at] = b'A' + (i % 26) as u8;
        let d = delta_between(&base, &content);
        let id = object_id("blob", &content);
        prev_off = w.ofs_delta(id, prev_off, &d);
        ids.push(hex(&id));
    }
    let (p, _i, _) = install_written_pack(&repo.objects_dir(), w);
    let last = ids.last().unwrap().clone();
    assert_eq!(repo.git_str(&["cat-file", "-t", &last]), "blob");
    let git = repo.git(&["cat-file", "-p", &last]);
    assert_eq!(git, content);
    repo.compare_cat_file(&[], &["-p", &last], None);
    repo.compare_cat_file(&["--cache-size", "0"], &["-p", &last], None);
    let mut sample: Vec<String> = ids.iter().rev().step_by(97).cloned().collect();
    Rng::new(1).shuffle(&mut sample);
    repo.compare_cat_file(&[], &["--batch"], Some(&lines_input(&sample)));
    let run = sb.packd_in(sb.path(), &["verify", p.to_str().unwrap()], None);
    run.assert_no_crash().assert_success();
}

#[test]
fn crafted_good_pack_is_read_like_git() {
    // Checks the test pack writer itself: git must accept what it writes.
    let sb = Sandbox::new();
    let repo = sb.init_bare("good.git");
    let mut w = PackWriter::new();
    let text = b"line one\nline two\nline three\n".repeat(10);
    let (base, base_off) = w.object(OBJ_BLOB, &text);
    let mut changed = text.clone();
    changed.extend_from_slice(b"appended\n");
    let mut d = delta_header(text.len() as u64, changed.len() as u64);
    d.extend(delta_copy(0, text.len() as u32));
    d.extend(delta_insert(b"appended\n"));
    let changed_id = object_id("blob", &changed);
    w.ofs_delta(changed_id, base_off, &d);
    let mut d2 = delta_header(text.len() as u64, 8);
    d2.extend(delta_copy(9, 8));
    w.ref_delta(object_id("blob", b"line two"), base, &d2);
    let mut tree = b"100644 a.txt\0".to_vec();
    tree.extend_from_slice(&base);
    tree.extend_from_slice(b"100644 b.txt\0");
    tree.extend_from_slice(&changed_id);
    let (tree_id, _) = w.object(OBJ_TREE, &tree);
    let commit = format!(
        "tree {}\nauthor A <a@b> 1700000000 +0000\ncommitter A <a@b> 1700000000 +0000\n\nmsg\n",
        hex(&tree_id)
    );
    w.object(OBJ_COMMIT, commit.as_bytes());
    let (_p, i, _) = install_written_pack(&repo.objects_dir(), w);
    repo.git(&["verify-pack", i.to_str().unwrap()]);
    assert_eq!(repo.all_ids().len(), 5);
    repo.compare_cat_file(&[], &["--batch-all-objects", "--batch"], None);
    repo.compare_cat_file(
        &[],
        &[
            "--batch-all-objects",
            "--batch-check=%(objectname) %(objecttype) %(objectsize) %(objectsize:disk) %(deltabase)",
        ],
        None,
    );
}

// --- corrupt loose objects ----------------------------------------------------------------------

fn loose_case(bytes: Vec<u8>, tag: &str, type_fails: bool) {
    let sb = Sandbox::new();
    let repo = simple_repo(&sb, "r.git", 5, 3);
    let id = hex(&fake_id(tag));
    let path = write_loose_file(&repo.objects_dir(), &id, &bytes);
    assert!(path.exists());
    let hint = format!("{}/{}", &id[..2], &id[2..]);
    let mut cmds: Vec<Vec<&str>> = vec![vec!["cat-file", "-p", &id]];
    if type_fails {
        cmds.push(vec!["cat-file", "-t", &id]);
        cmds.push(vec!["cat-file", "-s", &id]);
    }
    for args in &cmds {
        let run = repo.packd(args, None);
        assert_clean_error(
            &run,
            &sb,
            &hint,
            &[],
            &format!("{tag}: packd {}", args.join(" ")),
            false,
        );
    }
    let run = repo.packd(&["cat-file", "--batch"], Some(&lines_input(&[&id])));
    assert_clean_error(&run, &sb, &hint, &[], &format!("{tag}: --batch"), true);
    let run = repo.packd(&["cat-file", "--batch-all-objects", "--batch"], None);
    assert_clean_error(
        &run,
        &sb,
        &hint,
        &[],
        &format!("{tag}: --batch-all-objects --batch"),
        true,
    );
    // Other objects are unaffected.
    repo.compare_cat_file(&[], &["-p", "HEAD"], None);
}

fn zlib_raw(raw: &[u8]) -> Vec<u8> {
    zlib(raw)
}

#[test]
fn loose_garbage() {
    loose_case(
        b"this is not a zlib stream at all".to_vec(),
        "loose garbage",
        true,
    );
}

#[test]
fn loose_empty_file() {
    loose_case(Vec::new(), "loose empty", true);
}

#[test]
fn loose_bad_type() {
    loose_case(zlib_raw(b"bogus 3\0abc"), "loose bogus type", true);
}

#[test]
fn loose_header_without_space() {
    loose_case(zlib_raw(b"blob3\0abc"), "loose no space", true);
}

#[test]
fn loose_header_without_nul() {
    loose_case(zlib_raw(b"blob 3abc"), "loose no nul", true);
}

#[test]
fn loose_size_overflows() {
    loose_case(
        zlib_raw(b"blob 99999999999999999999999999\0hi"),
        "loose size overflow",
        true,
    );
}

#[test]
fn loose_size_2_pow_60() {
    loose_case(
        zlib_raw(b"blob 1152921504606846976\0hi"),
        "loose huge size",
        false,
    );
}

#[test]
fn loose_size_larger_than_data() {
    loose_case(zlib_raw(b"blob 10\0short"), "loose short data", false);
}

#[test]
fn loose_size_smaller_than_data() {
    loose_case(
        zlib_raw(b"blob 2\0longer content"),
        "loose long data",
        false,
    );
}

#[test]
fn loose_truncated_zlib() {
    let mut raw = b"blob 4000\0".to_vec();
    raw.extend(Rng::new(8).bytes(4000));
    let z = zlib(&raw);
    loose_case(z[..z.len() / 2].to_vec(), "loose truncated", false);
}

#[test]
fn loose_is_a_directory() {
    let sb = Sandbox::new();
    let repo = simple_repo(&sb, "r.git", 5, 3);
    let id = hex(&fake_id("loose dir"));
    std::fs::create_dir_all(repo.objects_dir().join(&id[..2]).join(&id[2..])).unwrap();
    let run = repo.packd(&["cat-file", "-p", &id], None);
    run.assert_no_crash();
    assert!(!run.success());
}

#[allow(dead_code)]
fn unused(_: &Path) {}
