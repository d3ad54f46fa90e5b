//! `packd index-pack` against `git index-pack`: the same .idx bytes for the same pack, thin
//! packs completed from the repository and accepted by git, and bad packs refused with the file
//! and offset named, nothing left behind.

mod common;

use common::*;
use std::path::Path;

/// The files in `dir`, sorted.
fn files(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .map(|rd| {
            rd.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

/// A pack of the whole of `repo` made by git.
fn git_pack(repo: &Repo, args: &[&str]) -> Vec<u8> {
    let mut a = vec!["pack-objects", "--revs", "--all", "--stdout", "-q"];
    a.extend_from_slice(args);
    repo.git_stdin(&a, b"")
}

#[test]
fn index_of_a_pack_file_is_byte_identical_to_gits() {
    let sb = Sandbox::new();
    let repo = deep_chain_repo(&sb, "src.git");
    for (name, extra) in [("ofs", &["--delta-base-offset"][..]), ("ref", &[][..])] {
        let pack = git_pack(&repo, extra);
        let a = sb.path().join(format!("a-{name}.pack"));
        let b = sb.path().join(format!("b-{name}.pack"));
        std::fs::write(&a, &pack).unwrap();
        std::fs::write(&b, &pack).unwrap();
        let git_out = sb.git_in(sb.path(), &["index-pack", a.to_str().unwrap()]);
        let run = sb.packd_in(sb.path(), &["index-pack", b.to_str().unwrap()], None);
        run.assert_success();
        assert_eq!(run.out().trim(), String::from_utf8_lossy(&git_out).trim());
        let git_idx = std::fs::read(a.with_extension("idx")).unwrap();
        let packd_idx = std::fs::read(b.with_extension("idx")).unwrap();
        assert_same_bytes(&format!("{name} idx"), &git_idx, &packd_idx);
        // No scratch files left next to the pack.
        assert!(
            files(sb.path()).iter().all(|f| !f.starts_with(".packd")),
            "{:?}",
            files(sb.path())
        );
    }
}

#[test]
fn stdin_pack_lands_in_the_repository_and_git_reads_it() {
    let sb = Sandbox::new();
    let src = deep_chain_repo(&sb, "src.git");
    let pack = git_pack(&src, &["--delta-base-offset"]);
    let dst = sb.init_bare("dst.git");
    let run = dst.packd(&["index-pack", "--stdin", "--rev-index"], Some(&pack));
    run.assert_success();
    let line = run.out();
    let hex = line.trim().strip_prefix("pack\t").expect("pack\\t<hex>");
    let names = files(&dst.pack_dir());
    for ext in ["idx", "pack", "rev"] {
        assert!(
            names.contains(&format!("pack-{hex}.{ext}")),
            "{ext} missing: {names:?}"
        );
    }
    assert_eq!(names.len(), 3, "no temporary files left: {names:?}");
    // git reads it: every object of the source is there, fsck is clean, the .rev is valid.
    let mut want = src.all_ids();
    let mut got = dst.all_ids();
    want.sort();
    got.sort();
    assert_eq!(want, got);
    let idx = dst.pack_dir().join(format!("pack-{hex}.idx"));
    dst.git(&["verify-pack", idx.to_str().unwrap()]);
    for (r, id) in [("main", "refs/heads/main"), ("side", "refs/heads/side")] {
        let tip = src.git_str(&["rev-parse", id]);
        dst.git(&["update-ref", &format!("refs/heads/{r}"), &tip]);
    }
    dst.git(&["fsck", "--strict"]);
    let rev = dst.git_run(&["cat-file", "--batch-all-objects", "--batch-check"], None);
    rev.assert_success();
}

#[test]
fn thin_pack_is_completed_and_accepted_by_git() {
    let sb = Sandbox::new();
    let src = deep_chain_repo(&sb, "src.git");
    let old = src.git_str(&["rev-parse", "main~40"]);
    // The client: the history up to `old` only.
    let dst = sb.init_bare("dst.git");
    let base_pack = src.git_stdin(
        &["pack-objects", "--revs", "--stdout", "-q"],
        format!("{old}\n").as_bytes(),
    );
    dst.git_stdin(&["index-pack", "--stdin"], &base_pack);
    dst.git(&["update-ref", "refs/heads/main", &old]);
    let thin = src.git_stdin(
        &[
            "pack-objects",
            "--revs",
            "--stdout",
            "-q",
            "--thin",
            "--delta-base-offset",
        ],
        format!("main\n^{old}\n").as_bytes(),
    );
    // Without --fix-thin a thin pack is refused, naming the problem, and nothing stays.
    let before = files(&dst.pack_dir());
    let run = dst.packd(&["index-pack", "--stdin"], Some(&thin));
    assert!(!run.success());
    run.assert_no_crash();
    assert!(run.err().contains("thin"), "{}", run.err());
    assert_eq!(files(&dst.pack_dir()), before);

    let run = dst.packd(&["index-pack", "--stdin", "--fix-thin"], Some(&thin));
    run.assert_success();
    let hex = run.out().trim().trim_start_matches("pack\t").to_string();
    let idx = dst.pack_dir().join(format!("pack-{hex}.idx"));
    // git accepts the completed pack on its own: no base is missing from it.
    dst.git(&["verify-pack", idx.to_str().unwrap()]);
    let tip = src.git_str(&["rev-parse", "main"]);
    dst.git(&["update-ref", "refs/heads/main", &tip]);
    dst.git(&["fsck", "--strict"]);
    let count = |r: &Repo| r.git_str(&["rev-list", "--objects", "--count", "main"]);
    assert_eq!(count(&dst), count(&src));
}

/// Runs `packd index-pack --stdin` on `pack` in a fresh repository; returns the failed run after
/// checking that nothing was left in objects/pack.
fn refused(sb: &Sandbox, name: &str, pack: &[u8]) -> Run {
    let repo = sb.init_bare(name);
    let run = repo.packd(&["index-pack", "--stdin"], Some(pack));
    assert!(!run.success(), "{name}: accepted");
    run.assert_no_crash();
    assert_eq!(run.code(), Some(128), "{name}: {}", run.err());
    assert!(
        files(&repo.pack_dir()).is_empty(),
        "{name}: left {:?}",
        files(&repo.pack_dir())
    );
    run
}

#[test]
fn bad_packs_are_refused_with_file_and_offset() {
    let sb = Sandbox::new();
    let mut w = PackWriter::new();
    let (base, base_off) = w.object(3, b"hello hello hello hello hello\n");
    let delta = [
        delta_header(30, 35),
        delta_copy(0, 30),
        delta_insert(b"world"),
    ]
    .concat();
    let target = {
        let mut d = b"hello hello hello hello hello\n".to_vec();
        d.extend_from_slice(b"world");
        object_id("blob", &d)
    };
    let delta_off = w.ofs_delta(target, base_off, &delta);
    let (good, _, _) = w.finish();
    let _ = base;

    // The good pack is accepted (the crafting is right).
    let ok = sb.init_bare("ok.git");
    ok.packd(&["index-pack", "--stdin"], Some(&good))
        .assert_success();

    // Truncated in the middle of the delta's data.
    let run = refused(&sb, "truncated.git", &good[..delta_off as usize + 5]);
    assert!(run.err().contains("ends inside"), "{}", run.err());

    // Wrong trailer.
    let mut bad = good.clone();
    let n = bad.len();
    bad[n - 1] ^= 0xff;
    let run = refused(&sb, "checksum.git", &bad);
    assert!(run.err().contains("checksum"), "{}", run.err());
    assert!(
        mentions_offset(&run.err(), (n - 20) as u64),
        "{}",
        run.err()
    );

    // Corrupt zlib data in the first entry (checksum fixed so only the zlib is wrong).
    let mut bad = good[..good.len() - 20].to_vec();
    bad[base_off as usize + 4] ^= 0x55;
    let sum = sha1(&bad);
    bad.extend_from_slice(&sum);
    let run = refused(&sb, "zlib.git", &bad);
    assert!(mentions_offset(&run.err(), base_off), "{}", run.err());

    // A declared size far larger than the data (no allocation from it, a clear error).
    let mut w = PackWriter::new();
    w.raw_entry([1; 20], &entry_header(3, 1 << 40), &[], &zlib(b"tiny"));
    let (huge, _, _) = w.finish();
    let run = refused(&sb, "huge.git", &huge);
    assert!(run.err().contains("declares"), "{}", run.err());

    // A declared object count larger than the pack holds.
    let mut w = PackWriter::new();
    w.object(3, b"one\n");
    w.count_override = Some(1_000_000_000);
    let (count, _, _) = w.finish();
    // The trailer is then read as a second entry.
    let run = refused(&sb, "count.git", &count);
    assert!(run.err().contains("offset 25"), "{}", run.err());

    // Two ref-deltas that are each other's base: a cycle, refused, not a loop.
    let a = object_id("blob", b"aaaaaaaaaaaaaaaaaaaa");
    let b = object_id("blob", b"bbbbbbbbbbbbbbbbbbbb");
    let mut w = PackWriter::new();
    let d = [delta_header(20, 20), delta_insert(&[b'a'; 20])].concat();
    let first = w.ref_delta(a, b, &d);
    let d = [delta_header(20, 20), delta_insert(&[b'b'; 20])].concat();
    w.ref_delta(b, a, &d);
    let (cycle, _, _) = w.finish();
    let run = refused(&sb, "cycle.git", &cycle);
    assert!(run.err().contains("cannot be resolved"), "{}", run.err());
    assert!(mentions_offset(&run.err(), first), "{}", run.err());

    // A delta whose ofs base is not the start of an entry.
    let mut w = PackWriter::new();
    let (_, off) = w.object(3, b"hello hello hello hello hello\n");
    w.ofs_delta(target, off + 1, &delta);
    let (misplaced, _, _) = w.finish();
    let run = refused(&sb, "misplaced.git", &misplaced);
    assert!(run.err().contains("cannot be resolved"), "{}", run.err());

    // A delta that reads outside its base.
    let mut w = PackWriter::new();
    let (_, off) = w.object(3, b"hello hello hello hello hello\n");
    let outside = [delta_header(30, 100), delta_copy(0, 100)].concat();
    w.ofs_delta([7; 20], off, &outside);
    let (outside, _, _) = w.finish();
    let run = refused(&sb, "outside.git", &outside);
    assert!(run.err().contains("does not apply"), "{}", run.err());

    // Not a pack at all.
    let run = refused(&sb, "garbage.git", b"GARBAGE, not a pack at all");
    assert!(run.err().contains("not a pack"), "{}", run.err());
}

/// A repository whose pack holds large objects (several MiB: streamed to a hashing thread in
/// chunks) and thousands of small ones (many batches), with deltas against the large ones.
fn large_and_many_repo(sb: &Sandbox) -> Repo {
    let repo = sb.init_bare("large.git");
    let mut rng = Rng::new(0x1a49e);
    let noise = rng.bytes(3 << 20);
    let mut text = String::new();
    while text.len() < (5 << 20) / 2 {
        text.push_str(&random_line(&mut rng));
        text.push('\n');
    }
    let mut fi = FastImport::new();
    let mut changes = vec![
        inline("noise.bin", noise.clone()),
        inline("big.txt", text.clone()),
    ];
    for i in 0..3000 {
        let body = format!("file {i}\n{}\n", random_line(&mut rng)).repeat(12);
        changes.push(inline(&format!("d{}/f{i}.txt", i % 40), body));
    }
    let first = fi.commit("refs/heads/main", None, "large and many\n", &changes);
    // Second versions of the large ones, stored as deltas against them.
    let mut noise2 = noise;
    noise2.extend_from_slice(b"appended");
    let text2 = text.replacen("a", "A", 1);
    fi.commit(
        "refs/heads/main",
        Some(&format!(":{first}")),
        "edit\n",
        &[inline("noise.bin", noise2), inline("big.txt", text2)],
    );
    repo.fast_import(&fi.finish());
    repo.git(&["repack", "-adf"]);
    repo
}

#[test]
fn large_and_many_objects_index_like_git_and_a_bad_large_one_is_refused() {
    let sb = Sandbox::new();
    let repo = large_and_many_repo(&sb);
    let pack = git_pack(&repo, &["--delta-base-offset"]);
    let a = sb.path().join("a.pack");
    let b = sb.path().join("b.pack");
    std::fs::write(&a, &pack).unwrap();
    std::fs::write(&b, &pack).unwrap();
    sb.git_in(sb.path(), &["index-pack", a.to_str().unwrap()]);
    sb.packd_in(sb.path(), &["index-pack", b.to_str().unwrap()], None)
        .assert_success();
    let git_idx = std::fs::read(a.with_extension("idx")).unwrap();
    let packd_idx = std::fs::read(b.with_extension("idx")).unwrap();
    assert_same_bytes("large and many idx", &git_idx, &packd_idx);

    // From stdin too, into a repository: the same index.
    let dst = sb.init_bare("dst.git");
    let run = dst.packd(&["index-pack", "--stdin"], Some(&pack));
    run.assert_success();
    let hex = run.out().trim().trim_start_matches("pack\t").to_string();
    let idx = std::fs::read(dst.pack_dir().join(format!("pack-{hex}.idx"))).unwrap();
    assert_same_bytes("large and many idx (stdin)", &git_idx, &idx);

    // Corrupt the middle of the largest whole object's zlib data (trailer fixed): refused, with
    // that object's offset, nothing left.
    let entries = verify_pack_entries(&repo, &a.with_extension("idx"));
    let big = entries
        .iter()
        .filter(|e| e.base.is_none())
        .max_by_key(|e| e.size)
        .expect("a whole object");
    assert!(big.size > 2 << 20, "{big:?}");
    let mut bad = pack[..pack.len() - 20].to_vec();
    let at = (big.offset + big.size_in_pack / 2) as usize;
    for byte in &mut bad[at..at + 64] {
        *byte ^= 0x5a;
    }
    let sum = sha1(&bad);
    bad.extend_from_slice(&sum);
    let run = refused(&sb, "bad-large.git", &bad);
    assert!(mentions_offset(&run.err(), big.offset), "{}", run.err());

    // The same pack as a file indexed in place: refused with the offset, nothing written.
    let dir = sb.path().join("in-place");
    std::fs::create_dir(&dir).unwrap();
    std::fs::write(dir.join("bad.pack"), &bad).unwrap();
    let run = sb.packd_in(&dir, &["index-pack", "bad.pack"], None);
    assert!(!run.success());
    run.assert_no_crash();
    assert!(mentions_offset(&run.err(), big.offset), "{}", run.err());
    assert_eq!(files(&dir), vec!["bad.pack".to_string()]);
}
