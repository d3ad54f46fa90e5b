//! packd cat-file against git cat-file on repositories with various storage layouts: deep delta
//! chains, several packs with a multi-pack-index, loose plus packed objects, alternates, idx v1
//! and 64-bit offsets. Every comparison is byte for byte.

mod common;
use common::*;

const FULL_FORMAT: &str =
    "--batch-check=%(objectname) %(objecttype) %(objectsize) %(objectsize:disk) %(deltabase)";

/// All ids of `repo` in a shuffled (deterministic) order, as stdin for --batch.
fn shuffled_ids(repo: &Repo, seed: u64) -> Vec<u8> {
    let mut ids = repo.all_ids();
    assert!(!ids.is_empty());
    Rng::new(seed).shuffle(&mut ids);
    lines_input(&ids)
}

/// The comparisons every layout gets (objectname/type/size/content only: valid even when an
/// object is stored more than once).
fn compare_basic(repo: &Repo, global: &[&str]) {
    repo.compare_cat_file(global, &["--batch-all-objects", "--batch-check"], None);
    repo.compare_cat_file(global, &["--batch-all-objects", "--batch"], None);
    let input = shuffled_ids(repo, 7);
    repo.compare_cat_file(global, &["--batch"], Some(&input));
    repo.compare_cat_file(global, &["--batch-check"], Some(&input));
    repo.compare_cat_file(global, &["--batch", "--buffer"], Some(&input));
    // Unordered: same set of lines (order may legitimately depend on pack order).
    let git = repo.git(&[
        "cat-file",
        "--batch-all-objects",
        "--unordered",
        "--batch-check",
    ]);
    let packd = repo.packd_with(
        global,
        &[
            "cat-file",
            "--batch-all-objects",
            "--unordered",
            "--batch-check",
        ],
        None,
    );
    packd.assert_no_crash().assert_success();
    assert_eq!(
        sorted_lines(&git),
        sorted_lines(&packd.stdout),
        "--batch-all-objects --unordered --batch-check: different set of lines than git"
    );
}

/// Also the storage-dependent atoms; only where every object is stored once.
fn compare_disk(repo: &Repo, global: &[&str]) {
    repo.compare_cat_file(global, &["--batch-all-objects", FULL_FORMAT], None);
    let input = shuffled_ids(repo, 11);
    repo.compare_cat_file(global, &[FULL_FORMAT], Some(&input));
}

fn assert_meaningful_chains(repo: &Repo) {
    let packs = repo.packs();
    let idx = packs[0].with_extension("idx");
    let depth = max_chain_length(repo, &idx);
    assert!(
        depth >= 10,
        "test repository should have delta chains of length >= 10, has {depth}"
    );
}

#[test]
fn deep_chains_batch_all_objects() {
    let sb = Sandbox::new();
    let repo = deep_chain_repo(&sb, "deep.git");
    assert_meaningful_chains(&repo);
    repo.compare_cat_file(&[], &["--batch-all-objects", "--batch"], None);
    repo.compare_cat_file(&[], &["--batch-all-objects", "--batch-check"], None);
}

#[test]
fn deep_chains_unordered_is_pack_order() {
    let sb = Sandbox::new();
    let repo = deep_chain_repo(&sb, "deep.git");
    // One pack, no loose objects: git lists objects in pack order; so should packd.
    repo.compare_cat_file(
        &[],
        &["--batch-all-objects", "--unordered", "--batch-check"],
        None,
    );
    repo.compare_cat_file(
        &[],
        &["--batch-all-objects", "--unordered", "--batch"],
        None,
    );
}

#[test]
fn deep_chains_shuffled_batch() {
    let sb = Sandbox::new();
    let repo = deep_chain_repo(&sb, "deep.git");
    let input = shuffled_ids(&repo, 1);
    repo.compare_cat_file(&[], &["--batch"], Some(&input));
    let input = shuffled_ids(&repo, 2);
    repo.compare_cat_file(&[], &["--batch-check"], Some(&input));
    // Every id three times over (several parallel batches, repeats within a batch).
    let mut ids = repo.all_ids();
    let n = ids.len();
    ids.extend_from_within(..n);
    ids.extend_from_within(..n);
    Rng::new(9).shuffle(&mut ids);
    repo.compare_cat_file(&[], &["--batch"], Some(&lines_input(&ids)));
}

#[test]
fn deep_chains_disk_size_and_delta_base() {
    let sb = Sandbox::new();
    let repo = deep_chain_repo(&sb, "deep.git");
    let out = repo.compare_cat_file(&[], &["--batch-all-objects", FULL_FORMAT], None);
    // The comparison is only meaningful if some objects are deltas.
    let zero = "0".repeat(40);
    let deltas = String::from_utf8(out)
        .unwrap()
        .lines()
        .filter(|l| !l.ends_with(&zero))
        .count();
    assert!(deltas > 100, "expected many deltas, got {deltas}");
    let input = shuffled_ids(&repo, 3);
    repo.compare_cat_file(&[], &[FULL_FORMAT], Some(&input));
}

#[test]
fn deep_chains_cache_size_does_not_change_answers() {
    let sb = Sandbox::new();
    let repo = deep_chain_repo(&sb, "deep.git");
    let input = shuffled_ids(&repo, 4);
    for cache in ["0", "4k", "1", "64k", "1m", "2K", "1M", "96m"] {
        let global = ["--cache-size", cache];
        repo.compare_cat_file(&global, &["--batch-all-objects", "--batch"], None);
        repo.compare_cat_file(&global, &["--batch"], Some(&input));
        repo.compare_cat_file(&global, &[FULL_FORMAT], Some(&input));
    }
}

#[test]
fn deep_chains_stats_reported_on_stderr() {
    let sb = Sandbox::new();
    let repo = deep_chain_repo(&sb, "deep.git");
    let git = repo.git(&["cat-file", "--batch-all-objects", "--batch"]);
    let run = repo.packd_with(
        &["--stats", "--cache-size", "4k"],
        &["cat-file", "--batch-all-objects", "--batch"],
        None,
    );
    run.assert_no_crash().assert_success();
    assert_same_bytes("packd --stats ... --batch", &git, &run.stdout);
    let err = run.err().to_lowercase();
    for word in ["hit", "miss", "evict"] {
        assert!(
            err.contains(word),
            "--stats should report {word}s on stderr, got: {err}"
        );
    }
}

#[test]
fn deep_chains_core_delta_base_cache_limit_config() {
    // The default budget comes from core.deltaBaseCacheLimit; any value must give the same answers.
    let sb = Sandbox::new();
    let repo = deep_chain_repo(&sb, "deep.git");
    repo.git(&["config", "core.deltaBaseCacheLimit", "2k"]);
    let input = shuffled_ids(&repo, 5);
    repo.compare_cat_file(&[], &["--batch"], Some(&input));
}

/// Several packs (some objects in more than one), a multi-pack-index, and a pack written after
/// the multi-pack-index.
#[test]
fn several_packs_with_multi_pack_index() {
    let sb = Sandbox::new();
    let repo = sb.init_bare("multi.git");
    let mut gen = HistoryGen::new(0x3a1, 3, 60);
    for round in 0..4 {
        let mut fi = FastImport::with_time(1_700_000_000 + round * 100_000);
        gen.commits(&mut fi, "refs/heads/main", 40, round > 0);
        repo.fast_import(&fi.finish());
        // A few reachable loose objects per round, packed by `repack -d` (without -a).
        let mut tree = String::new();
        for i in 0..5 {
            let blob = repo.git_str_stdin(
                &["hash-object", "-w", "--stdin"],
                format!("loose blob {round} {i}\n").as_bytes(),
            );
            tree.push_str(&format!("100644 blob {blob}\tf{i}\n"));
        }
        let tree = repo.git_str_stdin(&["mktree"], tree.as_bytes());
        let commit = repo.git_str(&["commit-tree", &tree, "-m", &format!("round {round}")]);
        repo.git(&["update-ref", &format!("refs/heads/round{round}"), &commit]);
        assert!(repo.loose_count() >= 7);
        repo.git(&["repack", "-d"]);
        assert_eq!(repo.loose_count(), 0);
    }
    // A pack duplicating every third object.
    let ids = repo.all_ids();
    let subset: Vec<&String> = ids.iter().step_by(3).collect();
    let base = repo.pack_dir().join("pack");
    repo.git_stdin(
        &["pack-objects", "-q", base.to_str().unwrap()],
        &lines_input(&subset),
    );
    repo.git(&["multi-pack-index", "write"]);
    assert!(
        repo.pack_dir().join("multi-pack-index").exists(),
        "git multi-pack-index write made no multi-pack-index"
    );
    let packs_in_midx = repo.packs().len();
    assert!(
        packs_in_midx >= 8,
        "expected several packs, got {packs_in_midx}"
    );
    compare_basic(&repo, &[]);

    // A pack the multi-pack-index does not cover.
    let mut fi = FastImport::with_time(1_800_000_000);
    // (40 commits: more than fastimport.unpackLimit objects, so fast-import writes a pack.)
    gen.commits(&mut fi, "refs/heads/main", 40, true);
    repo.fast_import(&fi.finish());
    assert_eq!(
        repo.packs().len(),
        packs_in_midx + 1,
        "{:?}",
        std::fs::read_dir(repo.pack_dir())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect::<Vec<_>>()
    );
    compare_basic(&repo, &[]);
    compare_basic(&repo, &["--cache-size", "0"]);
}

/// A multi-pack-index over packs that each store an object once: the storage atoms too.
#[test]
fn multi_pack_index_disk_sizes() {
    let sb = Sandbox::new();
    let repo = sb.init_bare("midx.git");
    let mut gen = HistoryGen::new(0x3a2, 3, 60);
    for round in 0..3 {
        let mut fi = FastImport::with_time(1_700_000_000 + round * 100_000);
        gen.commits(&mut fi, "refs/heads/main", 30, round > 0);
        repo.fast_import(&fi.finish());
    }
    repo.git(&["multi-pack-index", "write"]);
    assert!(repo.pack_dir().join("multi-pack-index").exists());
    assert_eq!(repo.packs().len(), 3);
    // fast-import writes each object once across these imports.
    let git = repo.git(&[
        "cat-file",
        "--batch-all-objects",
        "--batch-check=%(objectname)",
    ]);
    let unordered = repo.git(&[
        "cat-file",
        "--batch-all-objects",
        "--unordered",
        "--batch-check=%(objectname)",
    ]);
    assert_eq!(sorted_lines(&git).len(), sorted_lines(&unordered).len());
    compare_basic(&repo, &[]);
    compare_disk(&repo, &[]);
}

/// Packed history, then loose objects: blobs from hash-object, trees and commits from
/// mktree/commit-tree, an annotated tag.
#[test]
fn loose_plus_packed() {
    let sb = Sandbox::new();
    let repo = simple_repo(&sb, "loose.git", 0x1005e, 60);
    repo.git(&["repack", "-adf", "--depth=20"]);
    assert_eq!(repo.loose_count(), 0);
    let mut parent = repo.git_str(&["rev-parse", "main"]);
    let mut rng = Rng::new(99);
    for i in 0..25 {
        let mut content = format!("loose file {i}\n");
        for _ in 0..rng.below(50) {
            content.push_str(&random_line(&mut rng));
            content.push('\n');
        }
        let blob = repo.git_str_stdin(&["hash-object", "-w", "--stdin"], content.as_bytes());
        let big = repo.git_str_stdin(
            &["hash-object", "-w", "--stdin"],
            &rng.bytes(3000 + i * 100),
        );
        let tree_input = format!("100644 blob {blob}\tnew.txt\n100755 blob {big}\tbin.dat\n");
        let tree = repo.git_str_stdin(&["mktree"], tree_input.as_bytes());
        parent = repo.git_str(&[
            "commit-tree",
            &tree,
            "-p",
            &parent,
            "-m",
            &format!("loose {i}"),
        ]);
    }
    repo.git(&["update-ref", "refs/heads/main", &parent]);
    repo.git(&["tag", "-a", "-m", "a loose tag", "loose-tag", &parent]);
    assert!(
        repo.loose_count() >= 100,
        "loose objects: {}",
        repo.loose_count()
    );
    assert_eq!(repo.packs().len(), 1);
    compare_basic(&repo, &[]);
    compare_disk(&repo, &[]);
    // Names that are refs resolve the same way.
    let input = lines_input(&["HEAD", "main", "refs/heads/main", "loose-tag", "v1"]);
    repo.compare_cat_file(&[], &["--batch"], Some(&input));

    // Now some objects both loose and packed.
    let packed = repo.all_ids();
    let mut n = 0;
    for id in packed.iter().step_by(5) {
        let obj = sb.git_in(&repo.path, &["cat-file", "-t", id]);
        let kind = String::from_utf8(obj).unwrap().trim().to_string();
        let data = repo.git(&["cat-file", &kind, id]);
        let path = repo.objects_dir().join(&id[..2]).join(&id[2..]);
        if !path.exists() {
            write_loose_file(&repo.objects_dir(), id, &loose_bytes(&kind, &data));
            n += 1;
        }
    }
    assert!(n > 10);
    compare_basic(&repo, &[]);
}

trait GitStrStdin {
    fn git_str_stdin(&self, args: &[&str], stdin: &[u8]) -> String;
}

impl GitStrStdin for Repo {
    fn git_str_stdin(&self, args: &[&str], stdin: &[u8]) -> String {
        String::from_utf8(self.git_stdin(args, stdin))
            .unwrap()
            .trim()
            .to_string()
    }
}

/// Adds a few objects of B's own on top of A's history (reached through alternates).
fn add_own_objects(repo: &Repo, parent: &str, tag: &str) -> Vec<String> {
    let mut own = Vec::new();
    let mut parent = parent.to_string();
    for i in 0..10 {
        let blob = repo.git_str_stdin(
            &["hash-object", "-w", "--stdin"],
            format!("{tag} own blob {i}\n").as_bytes(),
        );
        let tree = repo.git_str_stdin(
            &["mktree"],
            format!("100644 blob {blob}\tf{i}\n").as_bytes(),
        );
        parent = repo.git_str(&[
            "commit-tree",
            &tree,
            "-p",
            &parent,
            "-m",
            &format!("{tag} {i}"),
        ]);
        own.extend([blob, tree, parent.clone()]);
    }
    repo.git(&["update-ref", "refs/heads/main", &parent]);
    own
}

#[test]
fn alternates() {
    let sb = Sandbox::new();
    let a = simple_repo(&sb, "a.git", 0xa1, 50);
    a.git(&["repack", "-adf"]);
    let a_ids = a.all_ids();
    let a_head = a.git_str(&["rev-parse", "main"]);

    // B: absolute path to A's objects; own objects loose, then part of them packed locally.
    let b = sb.init_bare("b.git");
    std::fs::write(
        b.objects_dir().join("info/alternates"),
        format!("{}\n", a.objects_dir().display()),
    )
    .unwrap();
    let mut b_own = add_own_objects(&b, &a_head, "b");
    b.git(&["repack", "-dl"]);
    b_own.extend(add_own_objects(
        &b,
        &b.git_str(&["rev-parse", "main"]),
        "b2",
    ));
    assert!(b.loose_count() > 0);
    assert!(!b.packs().is_empty());

    let mut all: Vec<String> = a_ids.iter().chain(b_own.iter()).cloned().collect();
    Rng::new(5).shuffle(&mut all);
    let input = lines_input(&all);
    b.compare_cat_file(&[], &["--batch"], Some(&input));
    b.compare_cat_file(&[], &["--batch-check"], Some(&input));
    b.compare_cat_file(&[], &["--batch-all-objects", "--batch"], None);
    b.compare_cat_file(&[], &["-p", &a_ids[0]], None);
    b.compare_cat_file(&[], &["-t", &a_head], None);
    // A cannot see B's objects.
    let a_git = a.git_run(&["cat-file", "--batch-check"], Some(&lines_input(&b_own)));
    let a_packd = a.packd(&["cat-file", "--batch-check"], Some(&lines_input(&b_own)));
    a_packd.assert_success();
    assert_same_bytes("A's view of B's objects", &a_git.stdout, &a_packd.stdout);

    // C: relative alternates path to B (resolved against C's objects dir), so A is reached
    // through B's alternates (recursively).
    let c = sb.init_bare("c.git");
    std::fs::write(
        c.objects_dir().join("info/alternates"),
        "../../b.git/objects\n",
    )
    .unwrap();
    let c_own = add_own_objects(&c, &b.git_str(&["rev-parse", "main"]), "c");
    let mut all_c = all.clone();
    all_c.extend(c_own);
    Rng::new(6).shuffle(&mut all_c);
    let input = lines_input(&all_c);
    c.compare_cat_file(&[], &["--batch"], Some(&input));
    c.compare_cat_file(&[], &["--batch-all-objects", "--batch-check"], None);
}

/// Packs all objects of `src` into `dst` with `git pack-objects EXTRA...`; returns the .idx path.
fn pack_into(src: &Repo, dst: &Repo, extra: &[&str]) -> std::path::PathBuf {
    let ids = src.all_ids();
    let base = dst.pack_dir().join("pack");
    let mut args = vec!["pack-objects", "-q", "--window=20", "--depth=30"];
    args.extend_from_slice(extra);
    let base_s = base.to_str().unwrap().to_string();
    args.push(&base_s);
    let hash = src.git_str_stdin(&args, &lines_input(&ids));
    let idx = dst.pack_dir().join(format!("pack-{hash}.idx"));
    assert!(idx.exists(), "pack-objects wrote no {}", idx.display());
    idx
}

#[test]
fn idx_version_1() {
    let sb = Sandbox::new();
    let src = deep_chain_repo(&sb, "src.git");
    let dst = sb.init_bare("v1.git");
    let idx = pack_into(&src, &dst, &["--index-version=1"]);
    let bytes = std::fs::read(&idx).unwrap();
    assert_ne!(&bytes[..4], b"\xfftOc", "expected an idx v1 (no magic)");
    assert_eq!(dst.all_ids().len(), src.all_ids().len());
    compare_basic(&dst, &[]);
    compare_disk(&dst, &[]);
    compare_disk(&dst, &["--cache-size", "0"]);
    let input = lines_input(&["0123", "deadbeef", &src.all_ids()[3][..12]]);
    dst.compare_cat_file(&[], &["--batch-check"], Some(&input));
}

#[test]
fn idx_64bit_offsets() {
    let sb = Sandbox::new();
    let src = deep_chain_repo(&sb, "src.git");
    let dst = sb.init_bare("off64.git");
    let idx = pack_into(&src, &dst, &["--index-version=2,0x40"]);
    let bytes = std::fs::read(&idx).unwrap();
    assert_eq!(&bytes[..8], b"\xfftOc\0\0\0\x02");
    let n = u32::from_be_bytes(bytes[8 + 255 * 4..8 + 256 * 4].try_into().unwrap()) as usize;
    let small = 8 + 256 * 4 + n * (20 + 4 + 4) + 40;
    let large = (bytes.len() - small) / 8;
    assert!(
        large + 2 >= n,
        "expected (almost) every offset in the 64-bit table: {large} of {n}"
    );
    compare_basic(&dst, &[]);
    compare_disk(&dst, &[]);
    compare_disk(&dst, &["--cache-size", "4k"]);

    // The same pack indexed again by index-pack with 64-bit offsets, in a third repository.
    let dst2 = sb.init_bare("reindexed.git");
    let pack = idx.with_extension("pack");
    let copy = dst2.pack_dir().join(file_name(&pack));
    std::fs::copy(&pack, &copy).unwrap();
    dst2.git(&[
        "index-pack",
        "--index-version=2,0x100",
        copy.to_str().unwrap(),
    ]);
    compare_disk(&dst2, &[]);
}

/// Blobs of several megabytes, deltified against each other, bigger than a small cache.
#[test]
fn large_blobs() {
    let sb = Sandbox::new();
    let repo = sb.init_bare("large.git");
    let mut rng = Rng::new(0xb16);
    let mut lines: Vec<String> = (0..60_000).map(|_| random_line(&mut rng)).collect();
    let mut fi = FastImport::new();
    for rev in 0..4 {
        for _ in 0..50 {
            let at = rng.below(lines.len());
            lines[at] = random_line(&mut rng);
        }
        let mut content = lines.join("\n").into_bytes();
        content.push(b'\n');
        let binary = rng.bytes(300_000 + rev * 1000);
        fi.commit(
            "refs/heads/main",
            None,
            &format!("rev {rev}\n"),
            &[inline("big.txt", content), inline("big.bin", binary)],
        );
    }
    repo.fast_import(&fi.finish());
    repo.git(&["repack", "-adf", "--window=10", "--depth=10"]);
    let sizes = repo.git(&[
        "cat-file",
        "--batch-all-objects",
        "--batch-check=%(objectsize)",
    ]);
    let max: u64 = String::from_utf8(sizes)
        .unwrap()
        .lines()
        .map(|l| l.parse::<u64>().unwrap())
        .max()
        .unwrap();
    assert!(max > 3_000_000, "largest object {max} bytes");
    compare_basic(&repo, &[]);
    compare_disk(&repo, &["--cache-size", "64k"]);
    repo.compare_cat_file(
        &["--cache-size", "0"],
        &["--batch-all-objects", "--batch"],
        None,
    );
}

/// Files git ignores in objects/pack: a .pack without .idx, an .idx without .pack, temporary
/// files of a repack in progress, .keep files.
#[test]
fn stray_files_in_pack_directory() {
    let sb = Sandbox::new();
    let repo = simple_repo(&sb, "stray.git", 0x57, 30);
    repo.git(&["repack", "-adf"]);
    let pack = repo.packs()[0].clone();
    let dir = repo.pack_dir();
    let fake = "pack-1111111111111111111111111111111111111111";
    std::fs::copy(&pack, dir.join(format!("{fake}.pack"))).unwrap();
    let fake2 = "pack-2222222222222222222222222222222222222222";
    std::fs::copy(pack.with_extension("idx"), dir.join(format!("{fake2}.idx"))).unwrap();
    std::fs::write(dir.join("tmp_pack_XyZ123"), b"PACK\0\0\0\x02partial").unwrap();
    std::fs::write(dir.join("tmp_idx_XyZ123"), b"\xfftOc partial").unwrap();
    std::fs::write(pack.with_extension("keep"), b"keep\n").unwrap();
    std::fs::write(dir.join("README"), b"not a pack\n").unwrap();
    compare_basic(&repo, &[]);
    compare_disk(&repo, &[]);
}

/// An empty repository: nothing to list, HEAD unborn.
#[test]
fn empty_repository() {
    let sb = Sandbox::new();
    let repo = sb.init_bare("empty.git");
    repo.compare_cat_file(&[], &["--batch-all-objects", "--batch-check"], None);
    repo.compare_cat_file(&[], &["--batch-all-objects", "--batch"], None);
    repo.compare_cat_file(&[], &["--batch-check"], Some(b"HEAD\nmain\n"));
    let run = repo.packd(&["cat-file", "-t", "HEAD"], None);
    run.assert_no_crash();
    assert!(!run.success(), "HEAD is unborn");
    assert!(run.stdout.is_empty());
}

/// Alternates files with comments, blank lines and a directory that does not exist (git warns
/// and goes on), and an object stored both locally and in the alternate.
#[test]
fn alternates_file_details() {
    let sb = Sandbox::new();
    let a = simple_repo(&sb, "a.git", 0xa2, 30);
    a.git(&["repack", "-adf"]);
    let b = sb.init_bare("b.git");
    std::fs::write(
        b.objects_dir().join("info/alternates"),
        format!(
            "# a comment\n\n{}/no-such-dir/objects\n{}\n",
            sb.path().display(),
            a.objects_dir().display()
        ),
    )
    .unwrap();
    let a_head = a.git_str(&["rev-parse", "main"]);
    let own = add_own_objects(&b, &a_head, "b");
    // One of A's objects also loose in B.
    let dup = a.all_ids()[0].clone();
    let kind = a.git_str(&["cat-file", "-t", &dup]);
    let data = a.git(&["cat-file", &kind, &dup]);
    write_loose_file(&b.objects_dir(), &dup, &loose_bytes(&kind, &data));
    let mut all = a.all_ids();
    all.extend(own);
    let input = lines_input(&all);
    b.compare_cat_file(&[], &["--batch"], Some(&input));
    b.compare_cat_file(&[], &["--batch-all-objects", "--batch-check"], None);
}

/// The delta base cache keeps every link of a delta chain read for a tree walk
/// (`ObjectDb::read_at_with_base`) even once it is full and the reads jump about, where other
/// reads then keep one link in 8: a walk reads versions of the same directories, whose chains
/// share their links. The repository is opened twice, each time with a fresh cache that is
/// filled alike; then the deepest entry is read, from a thread of its own (which counts as a
/// jump).
#[test]
fn a_tree_walks_reads_keep_every_link_of_a_full_caches_chains() {
    use packd_odb::{Repository, RepositoryOptions};
    let sb = Sandbox::new();
    let repo = deep_chain_repo(&sb, "chains.git");
    let pack = repo.packs()[0].clone();
    let entries = verify_pack_entries(&repo, &pack.with_extension("idx"));
    let deepest = entries
        .iter()
        .max_by_key(|e| e.depth.unwrap_or(0))
        .expect("entries")
        .clone();
    let depth = deepest.depth.unwrap_or(0) as u64;
    assert!(depth >= 16, "a deep chain: {depth}");
    // The deepest entry's chain, and every entry whose chain meets it: filling the cache with
    // those would cache links of the chain read after.
    let base_of: std::collections::HashMap<&str, &str> = entries
        .iter()
        .filter_map(|e| Some((e.id.as_str(), e.base.as_deref()?)))
        .collect();
    let chain_of = |id: &str| -> Vec<String> {
        let mut chain = vec![id.to_string()];
        while let Some(base) = base_of.get(chain.last().unwrap().as_str()) {
            chain.push(base.to_string());
        }
        chain
    };
    let ours: std::collections::HashSet<String> = chain_of(&deepest.id).into_iter().collect();
    let others: Vec<&PackEntry> = entries
        .iter()
        .filter(|e| chain_of(&e.id).iter().all(|link| !ours.contains(link)))
        .collect();
    let id = packd_odb::ObjectId::from_hex(&deepest.id).unwrap();
    let size: usize = repo
        .git_str(&["cat-file", "-s", &deepest.id])
        .parse()
        .unwrap();
    let options = RepositoryOptions {
        cache_budget: Some(256 << 10),
        ..RepositoryOptions::default()
    };
    let inserts = |with_base: bool| -> u64 {
        let opened = Repository::open(&repo.git_dir, &options).unwrap();
        let db = opened.objects();
        // Fill the cache past its budget with the objects of other chains.
        std::thread::scope(|scope| {
            scope.spawn(|| {
                for e in &others {
                    let other = packd_odb::ObjectId::from_hex(&e.id).unwrap();
                    db.read(&other).unwrap().unwrap();
                }
            });
        });
        let stats = db.cache_stats();
        assert!(stats.evictions > 0, "the cache is full: {stats:?}");
        let before = stats.inserts;
        std::thread::scope(|scope| {
            scope.spawn(|| {
                let at = db.locate(&id).unwrap().unwrap();
                let data = if with_base {
                    db.read_at_with_base(&id, &at).unwrap().0.data
                } else {
                    db.read_at(&id, &at).unwrap().data
                };
                assert_eq!(data.len(), size);
            });
        });
        db.cache_stats().inserts - before
    };
    let (every_eighth, every_link) = (inserts(false), inserts(true));
    // A chain of `depth` deltas has `depth` links below the entry read (which is not kept).
    assert!(
        every_link >= depth
            && every_link >= 4 * every_eighth.max(1)
            && every_eighth <= depth / 8 + 2,
        "a walk's read kept {every_link} links, another read {every_eighth} (depth {depth})"
    );
}
