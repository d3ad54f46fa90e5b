//! Reading git's own `.bitmap` and `.rev` files: every bitmapped commit's bitmap must name exactly
//! the objects `git rev-list --objects` lists for it, type bitmaps must match `git cat-file`, name
//! hashes must match git's hash of the paths, `.rev` must match `git show-index` sorted by offset;
//! and damaged files must give errors, never panics. Also: a bitmap walk gives up when cancelled.

use bytes::Bytes;
use packd_odb::pack::multi_index::MultiPackIndex;
use packd_odb::pack::order::PackOrder as _;
use packd_odb::pack::Pack;
use packd_odb::{HashKind, ObjectId, ObjectKind};
use packd_reach::bitmap::{BitmapError, PackBitmap};
use packd_reach::ewah::Bitmap;
use packd_reach::rev_index::{RevIndex, RevIndexError};
use packd_storage::{Blob, LocalStorage, Storage, StorageError};
use std::collections::{HashMap, HashSet};
use std::io::Write as _;
use std::ops::Range;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

// ---------------------------------------------------------------------------------------------
// git in a sandbox
// ---------------------------------------------------------------------------------------------

struct Repo {
    _tmp: tempfile::TempDir,
    home: PathBuf,
    dir: PathBuf,
}

impl Repo {
    fn git_cmd(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new("git");
        cmd.args(args)
            .current_dir(&self.dir)
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("HOME", &self.home)
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_CONFIG_GLOBAL", self.home.join(".gitconfig"))
            .env("GIT_AUTHOR_NAME", "A U Thor")
            .env("GIT_AUTHOR_EMAIL", "author@example.com")
            .env("GIT_AUTHOR_DATE", "1700000000 +0000")
            .env("GIT_COMMITTER_NAME", "C O Mitter")
            .env("GIT_COMMITTER_EMAIL", "committer@example.com")
            .env("GIT_COMMITTER_DATE", "1700000000 +0000");
        cmd
    }

    fn git_stdin(&self, args: &[&str], stdin: &[u8]) -> String {
        let mut child = self
            .git_cmd(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("git runs");
        let mut input = child.stdin.take().unwrap();
        let data = stdin.to_vec();
        let writer = std::thread::spawn(move || {
            input.write_all(&data).unwrap();
        });
        let out = child.wait_with_output().unwrap();
        writer.join().unwrap();
        assert!(
            out.status.success(),
            "git {args:?} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    }

    fn git(&self, args: &[&str]) -> String {
        let out = self.git_cmd(args).output().expect("git runs");
        assert!(
            out.status.success(),
            "git {args:?} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    }

    fn objects(&self) -> PathBuf {
        self.dir.join("objects")
    }

    fn storage(&self) -> LocalStorage {
        LocalStorage::new(self.objects())
    }

    /// The names (`pack/pack-*.idx`) of the repository's pack indexes.
    fn idx_names(&self) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(self.objects().join("pack"))
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .filter(|n| n.ends_with(".idx"))
            .map(|n| format!("pack/{n}"))
            .collect();
        v.sort();
        v
    }

    fn only_pack(&self) -> Pack {
        let names = self.idx_names();
        assert_eq!(names.len(), 1, "expected one pack, found {names:?}");
        Pack::open(&self.storage(), &names[0], 0, HashKind::Sha1).unwrap()
    }
}

/// A bare repository holding a few hundred commits on three branches, with merges, annotated
/// and lightweight tags, nested directories and paths with spaces; every object in one pack.
fn build_repo(commits: usize) -> Repo {
    let tmp = tempfile::tempdir().unwrap();
    let home = tmp.path().join("home");
    std::fs::create_dir_all(&home).unwrap();
    std::fs::write(home.join(".gitconfig"), "").unwrap();
    let dir = tmp.path().join("repo.git");
    let repo = Repo {
        _tmp: tmp,
        home,
        dir: dir.clone(),
    };
    std::fs::create_dir_all(&dir).unwrap();
    repo.git(&["init", "-q", "--bare", "."]);
    repo.git_stdin(&["fast-import", "--quiet"], &history(commits, 0));
    repo
}

fn data(out: &mut Vec<u8>, content: &str) {
    write!(out, "data {}\n{content}\n", content.len()).unwrap();
}

/// A fast-import stream of `commits` commits; `seed` varies content so that a second stream adds
/// new objects on branches of its own.
fn history(commits: usize, seed: usize) -> Vec<u8> {
    let branches = ["main", "feature", "topic"];
    let mut out = Vec::new();
    let mut tips: HashMap<&str, usize> = HashMap::new();
    let mut mark = 0;
    for i in 0..commits {
        let branch = if i < 20 { "main" } else { branches[i % 3] };
        let prefix = if seed == 0 {
            String::new()
        } else {
            format!("s{seed}/")
        };
        mark += 1;
        let time = 1_700_000_000 + i * 60 + seed * 1_000_000;
        writeln!(
            out,
            "commit refs/heads/{prefix}{branch}\nmark :{mark}\nauthor A U Thor <a@example.com> {time} +0000\ncommitter C O Mitter <c@example.com> {time} +0000"
        )
        .unwrap();
        data(&mut out, &format!("commit {i} on {branch} (seed {seed})"));
        match tips.get(branch) {
            Some(&m) => writeln!(out, "from :{m}").unwrap(),
            None if i > 0 => writeln!(out, "from :{}", tips["main"]).unwrap(),
            None => {}
        }
        if branch == "main" && i % 45 == 44 {
            if let Some(&m) = tips.get("feature") {
                writeln!(out, "merge :{m}").unwrap();
            }
        }
        let files = [
            format!("src/dir{}/file{}.txt", i % 7, i % 11),
            format!("docs/notes {}.md", i % 3),
            "README".to_string(),
            format!("deep/a/b/c{}/d/leaf.rs", i % 4),
        ];
        for (k, path) in files.iter().enumerate() {
            if (i + k) % (k + 1) == 0 {
                writeln!(out, "M 100644 inline {path}").unwrap();
                data(
                    &mut out,
                    &format!("{path}\nversion {i} seed {seed}\n{}", "x".repeat(i % 50)),
                );
            }
        }
        if i % 17 == 16 {
            writeln!(out, "D src/dir{}/file{}.txt", (i + 3) % 7, (i + 5) % 11).unwrap();
        }
        out.push(b'\n');
        tips.insert(branch, mark);
        if i % 40 == 39 {
            writeln!(
                out,
                "tag {prefix}v{i}\nfrom :{mark}\ntagger T <t@example.com> {time} +0000"
            )
            .unwrap();
            data(&mut out, &format!("release {i}"));
        }
        if i % 33 == 32 {
            writeln!(out, "reset refs/tags/{prefix}light{i}\nfrom :{mark}\n").unwrap();
        }
    }
    out
}

// ---------------------------------------------------------------------------------------------
// Expectations from git
// ---------------------------------------------------------------------------------------------

fn oid(hex: &str) -> ObjectId {
    ObjectId::from_hex(hex).unwrap_or_else(|| panic!("bad id {hex:?}"))
}

fn rev_list_objects(repo: &Repo, tip: &ObjectId) -> HashSet<ObjectId> {
    repo.git(&["rev-list", "--objects", &tip.to_hex()])
        .lines()
        .map(|l| oid(&l[..40]))
        .collect()
}

fn object_types(repo: &Repo) -> HashMap<ObjectId, ObjectKind> {
    repo.git(&[
        "cat-file",
        "--batch-all-objects",
        "--batch-check=%(objectname) %(objecttype)",
    ])
    .lines()
    .map(|l| {
        let (id, t) = l.split_once(' ').unwrap();
        (oid(id), ObjectKind::from_name(t.as_bytes()).unwrap())
    })
    .collect()
}

/// git's `pack_name_hash`: whitespace skipped, each byte shifted in from the top.
fn pack_name_hash(name: &[u8]) -> u32 {
    let mut hash: u32 = 0;
    for &c in name {
        if matches!(c, b' ' | b'\t' | b'\n' | b'\r') {
            continue;
        }
        hash = (hash >> 2).wrapping_add((c as u32) << 24);
    }
    hash
}

fn ids_of(bitmap: &Bitmap, pack: &Pack) -> HashSet<ObjectId> {
    PackBitmap::object_ids(bitmap, pack)
        .unwrap()
        .into_iter()
        .collect()
}

fn open_bitmap(repo: &Repo, pack: &Pack, use_table: bool) -> PackBitmap {
    let name = packd_reach::bitmap::bitmap_name(pack.name()).unwrap();
    let blob = repo.storage().open(&name).unwrap();
    PackBitmap::open_with(blob, pack.index().pack_checksum(), pack.len(), use_table).unwrap()
}

/// Checks every commit bitmap, the type bitmaps and (if present) the name hashes of `bm` against
/// git. Returns the number of commit bitmaps checked.
fn check_against_git(repo: &Repo, pack: &Pack, bm: &PackBitmap) -> usize {
    let types = object_types(repo);
    assert_eq!(types.len(), pack.len() as usize);
    for kind in [
        ObjectKind::Commit,
        ObjectKind::Tree,
        ObjectKind::Blob,
        ObjectKind::Tag,
    ] {
        let got = ids_of(bm.type_bitmap(kind), pack);
        let want: HashSet<ObjectId> = types
            .iter()
            .filter(|(_, &k)| k == kind)
            .map(|(id, _)| *id)
            .collect();
        assert_eq!(got, want, "{kind:?} type bitmap");
    }

    let mut checked = 0;
    let positions: Vec<u32> = bm.commit_positions().collect();
    assert_eq!(positions.len(), bm.entry_count() as usize);
    for pos in positions {
        let id = pack.index().id(pos);
        assert_eq!(types[&id], ObjectKind::Commit, "bitmapped {id} is a commit");
        let bitmap = bm
            .commit_bitmap(pos)
            .unwrap()
            .expect("listed commit has a bitmap");
        let by_id = bm.commit_bitmap_for(pack, &id).unwrap().unwrap();
        assert_eq!(bitmap, by_id);
        let got = ids_of(&bitmap, pack);
        let want = rev_list_objects(repo, &id);
        assert_eq!(got.len(), want.len(), "object count for {id}");
        assert_eq!(got, want, "objects reachable from {id}");
        checked += 1;
    }
    // A commit without a bitmap answers None.
    let unbitmapped = (0..pack.len())
        .find(|&p| types[&pack.index().id(p)] == ObjectKind::Commit && !bm.contains(p));
    if let Some(p) = unbitmapped {
        assert!(bm.commit_bitmap(p).unwrap().is_none());
    }

    if bm.has_name_hash_cache() {
        // What git names each object while packing (`git rev-list --objects --all`, the walk
        // pack-objects does); objects reached by several paths take the first.
        let mut path_of: HashMap<ObjectId, String> = HashMap::new();
        for line in repo.git(&["rev-list", "--objects", "--all"]).lines() {
            let (id, path) = line.split_at(40);
            path_of
                .entry(oid(id))
                .or_insert_with(|| path.strip_prefix(' ').unwrap_or("").to_string());
        }
        let (mut exact, mut named) = (0, 0);
        // The cache is in index order.
        for index_pos in 0..pack.len() {
            let id = pack.index().id(index_pos);
            let hash = bm.name_hash(index_pos).unwrap().unwrap();
            match types[&id] {
                ObjectKind::Commit => assert_eq!(hash, 0, "commit {id} has no name"),
                ObjectKind::Blob => {
                    let path = &path_of[&id];
                    assert!(!path.is_empty());
                    assert_ne!(hash, 0, "blob {id} at {path} has a name hash");
                    named += 1;
                    if hash == pack_name_hash(path.as_bytes()) {
                        exact += 1;
                    }
                }
                ObjectKind::Tree => {
                    let path = &path_of[&id];
                    named += 1;
                    if hash == pack_name_hash(path.as_bytes()) {
                        exact += 1;
                    }
                }
                ObjectKind::Tag => {}
            }
        }
        assert_eq!(exact, named, "name hashes equal git's hash of each path");
        assert_eq!(bm.name_hash(pack.len()).unwrap(), None);
    } else {
        assert_eq!(bm.name_hash(0).unwrap(), None);
    }
    checked
}

// ---------------------------------------------------------------------------------------------
// The bitmaps git writes
// ---------------------------------------------------------------------------------------------

fn repack(repo: &Repo, table: bool, hash_cache: bool) {
    let table = format!("pack.writeBitmapLookupTable={table}");
    let hash = format!("pack.writeBitmapHashCache={hash_cache}");
    repo.git(&[
        "-c",
        &table,
        "-c",
        &hash,
        "-c",
        "pack.writeReverseIndex=true",
        "repack",
        "-adbq",
    ]);
}

#[test]
fn lookup_table_and_hash_cache() {
    let repo = build_repo(300);
    repack(&repo, true, true);
    let pack = repo.only_pack();
    let bm = open_bitmap(&repo, &pack, true);
    assert!(bm.has_lookup_table() && bm.used_lookup_table());
    assert!(bm.has_name_hash_cache());
    assert!(bm.entry_count() > 10, "{} bitmaps", bm.entry_count());
    bm.verify_checksum().unwrap();
    let n = check_against_git(&repo, &pack, &bm);
    assert_eq!(n, bm.entry_count() as usize);

    // Ignoring the table (scanning the entries) gives the same bitmaps.
    let scanned = open_bitmap(&repo, &pack, false);
    assert!(scanned.has_lookup_table() && !scanned.used_lookup_table());
    for pos in bm.commit_positions() {
        assert_eq!(
            bm.commit_bitmap(pos).unwrap(),
            scanned.commit_bitmap(pos).unwrap()
        );
    }
}

/// `union_of` (one pass over the entries on the XOR chains, in file order) is the union of the
/// commits' bitmaps resolved one by one, for all of them and for scattered subsets, with the
/// lookup table and by scanning; a commit without a bitmap makes it `None`.
#[test]
fn union_of_many_bitmaps_is_their_union() {
    let repo = build_repo(400);
    repack(&repo, true, true);
    let pack = repo.only_pack();
    let never = std::sync::atomic::AtomicBool::new(false);
    for use_table in [true, false] {
        let bm = open_bitmap(&repo, &pack, use_table);
        let all: Vec<u32> = bm.commit_positions().collect();
        assert!(all.len() > 10);
        for step in [1, 2, 3, 7] {
            let some: Vec<u32> = all.iter().copied().step_by(step).collect();
            let mut expected = Bitmap::new();
            for &pos in &some {
                expected.or_assign(&bm.commit_bitmap(pos).unwrap().unwrap());
            }
            assert_eq!(
                bm.union_of(&some, &never).unwrap().unwrap(),
                expected,
                "every {step}th bitmap, table {use_table}"
            );
        }
        let unbitmapped = (0..pack.len()).find(|p| !bm.contains(*p)).unwrap();
        assert!(bm
            .union_of(&[all[0], unbitmapped], &never)
            .unwrap()
            .is_none());
        let cancelled = std::sync::atomic::AtomicBool::new(true);
        assert!(bm.union_of(&all, &cancelled).unwrap().is_none());
    }
}

#[test]
fn hash_cache_without_lookup_table() {
    let repo = build_repo(250);
    repack(&repo, false, true);
    let pack = repo.only_pack();
    let bm = open_bitmap(&repo, &pack, true);
    assert!(!bm.has_lookup_table() && !bm.used_lookup_table());
    assert!(bm.has_name_hash_cache());
    check_against_git(&repo, &pack, &bm);
}

#[test]
fn neither_lookup_table_nor_hash_cache() {
    let repo = build_repo(200);
    repack(&repo, false, false);
    let pack = repo.only_pack();
    let bm = open_bitmap(&repo, &pack, true);
    assert!(!bm.has_lookup_table() && !bm.has_name_hash_cache());
    check_against_git(&repo, &pack, &bm);
}

#[test]
fn lookup_table_without_hash_cache() {
    let repo = build_repo(120);
    repack(&repo, true, false);
    let pack = repo.only_pack();
    let bm = open_bitmap(&repo, &pack, true);
    assert!(bm.used_lookup_table() && !bm.has_name_hash_cache());
    check_against_git(&repo, &pack, &bm);
}

#[test]
fn open_for_pack_finds_the_bitmap() {
    let repo = build_repo(60);
    let pack = repo.only_pack();
    // fast-import writes no bitmap.
    assert!(PackBitmap::open_for_pack(&repo.storage(), &pack)
        .unwrap()
        .is_none());
    repack(&repo, true, true);
    let pack = repo.only_pack();
    let bm = PackBitmap::open_for_pack(&repo.storage(), &pack)
        .unwrap()
        .unwrap();
    assert!(bm.entry_count() > 0);
}

/// A blob that counts the bytes read through it.
#[derive(Debug)]
struct Counting {
    inner: Arc<dyn Blob>,
    bytes: AtomicU64,
}

impl Blob for Counting {
    fn name(&self) -> &str {
        self.inner.name()
    }
    fn len(&self) -> u64 {
        self.inner.len()
    }
    fn read(&self, range: Range<u64>) -> Result<Bytes, StorageError> {
        self.bytes
            .fetch_add(range.end - range.start, Ordering::Relaxed);
        self.inner.read(range)
    }
}

#[test]
fn lookup_table_open_reads_no_entries() {
    let repo = build_repo(300);
    repack(&repo, true, true);
    let pack = repo.only_pack();
    let name = packd_reach::bitmap::bitmap_name(pack.name()).unwrap();
    let blob = repo.storage().open(&name).unwrap();
    let len = blob.len();
    let counting = Arc::new(Counting {
        inner: blob,
        bytes: AtomicU64::new(0),
    });
    let bm = PackBitmap::open(counting.clone(), pack.index().pack_checksum(), pack.len()).unwrap();
    let type_bytes: u64 = [
        ObjectKind::Commit,
        ObjectKind::Tree,
        ObjectKind::Blob,
        ObjectKind::Tag,
    ]
    .iter()
    .map(|&k| 12 + 8 * bm.type_bitmap(k).words().len() as u64 + 8)
    .sum();
    let at_open = counting.bytes.load(Ordering::Relaxed);
    let table = 16 * bm.entry_count() as u64;
    let hash_cache = 4 * pack.len() as u64;
    assert!(
        at_open <= 32 + type_bytes + table,
        "open read {at_open} bytes of {len}; header, types and table are at most {}",
        32 + type_bytes + table
    );
    assert!(at_open < len - hash_cache - 20);
    // One commit bitmap reads only its chain.
    let pos = bm.commit_positions().last().unwrap();
    bm.commit_bitmap(pos).unwrap().unwrap();
    assert!(counting.bytes.load(Ordering::Relaxed) < len);
}

// ---------------------------------------------------------------------------------------------
// .rev
// ---------------------------------------------------------------------------------------------

#[test]
fn rev_index_matches_show_index() {
    let repo = build_repo(150);
    repack(&repo, true, true);
    let pack = repo.only_pack();
    let idx_name = &repo.idx_names()[0];
    let idx = std::fs::read(repo.objects().join(idx_name)).unwrap();
    let mut by_offset: Vec<(u64, ObjectId)> = repo
        .git_stdin(&["show-index"], &idx)
        .lines()
        .map(|l| {
            let mut f = l.split(' ');
            let off = f.next().unwrap().parse().unwrap();
            (off, oid(f.next().unwrap()))
        })
        .collect();
    by_offset.sort();
    let rev_name = idx_name.replace(".idx", ".rev");
    let blob = repo.storage().open(&rev_name).unwrap();
    let rev = RevIndex::open(&*blob, pack.index().pack_checksum(), pack.len()).unwrap();
    assert_eq!(rev.len(), pack.len());
    let from_rev: Vec<ObjectId> = rev
        .to_vec()
        .into_iter()
        .map(|p| pack.index().id(p))
        .collect();
    let want: Vec<ObjectId> = by_offset.into_iter().map(|(_, id)| id).collect();
    assert_eq!(from_rev, want);
    assert_eq!(rev.to_vec(), pack.positions_in_pack_order().unwrap());
    assert_eq!(rev.index_position(pack.len()), None);

    // Damage: wrong pack, truncation, a flipped byte anywhere.
    let bytes = blob.read_all().unwrap();
    let mut other = pack.index().pack_checksum().to_vec();
    other[0] ^= 1;
    assert!(matches!(
        RevIndex::from_bytes("x.rev", bytes.clone(), &other, pack.len()),
        Err(RevIndexError::ChecksumMismatch { .. })
    ));
    for cut in [0, 3, 12, bytes.len() / 2, bytes.len() - 1] {
        assert!(RevIndex::from_bytes(
            "x.rev",
            bytes.slice(..cut),
            pack.index().pack_checksum(),
            pack.len()
        )
        .is_err());
    }
    for at in (0..bytes.len()).step_by(7) {
        let mut v = bytes.to_vec();
        v[at] ^= 0x40;
        assert!(
            RevIndex::from_bytes("x.rev", v.into(), pack.index().pack_checksum(), pack.len())
                .is_err(),
            "flipped byte {at} accepted"
        );
    }
}

// ---------------------------------------------------------------------------------------------
// Multi-pack-index bitmaps
// ---------------------------------------------------------------------------------------------

/// The RIDX chunk of a multi-pack-index: its positions in pseudo-pack (bitmap) order.
fn ridx_chunk(midx: &[u8]) -> Option<Vec<u32>> {
    let chunks = midx[6] as usize;
    let row = |i: usize| {
        let at = 12 + 12 * i;
        (
            &midx[at..at + 4],
            u64::from_be_bytes(midx[at + 4..at + 12].try_into().unwrap()) as usize,
        )
    };
    let i = (0..chunks).find(|&i| row(i).0 == b"RIDX")?;
    let (start, end) = (row(i).1, row(i + 1).1);
    Some(
        midx[start..end]
            .chunks(4)
            .map(|c| u32::from_be_bytes(c.try_into().unwrap()))
            .collect(),
    )
}

#[test]
fn multi_pack_index_bitmap() {
    let repo = build_repo(120);
    repack(&repo, false, true);
    repo.git_stdin(&["fast-import", "--quiet"], &history(80, 1));
    assert_eq!(repo.idx_names().len(), 2);
    repo.git(&[
        "-c",
        "pack.writeBitmapLookupTable=true",
        "multi-pack-index",
        "write",
        "--bitmap",
    ]);
    let midx_bytes = std::fs::read(repo.objects().join("pack/multi-pack-index")).unwrap();
    let checksum = midx_bytes[midx_bytes.len() - 20..].to_vec();
    let midx_raw = midx_bytes.clone();
    let midx = MultiPackIndex::from_bytes("multi-pack-index", midx_bytes.into()).unwrap();
    let hex = packd_odb::hex(&checksum);
    let storage = repo.storage();
    let blob = storage
        .open(&format!("pack/multi-pack-index-{hex}.bitmap"))
        .unwrap();
    let bm = PackBitmap::open(blob, &checksum, midx.len()).unwrap();
    // MIDX order: a separate `.rev` (older git) or the multi-pack-index's RIDX chunk.
    let order: Vec<u32> = match storage.open(&format!("pack/multi-pack-index-{hex}.rev")) {
        Ok(b) => RevIndex::open(&*b, &checksum, midx.len()).unwrap().to_vec(),
        Err(e) if e.is_not_found() => ridx_chunk(&midx_raw).expect("a RIDX chunk"),
        Err(e) => panic!("{e}"),
    };
    assert_eq!(order.len(), midx.len() as usize);
    let ids = |b: &Bitmap| -> HashSet<ObjectId> {
        b.iter_ones()
            .map(|bit| midx.id(order[bit as usize]))
            .collect()
    };
    let types = object_types(&repo);
    let commits: HashSet<ObjectId> = types
        .iter()
        .filter(|(_, &k)| k == ObjectKind::Commit)
        .map(|(id, _)| *id)
        .collect();
    assert_eq!(ids(bm.type_bitmap(ObjectKind::Commit)), commits);
    assert!(bm.entry_count() > 0);
    for pos in bm.commit_positions().collect::<Vec<_>>() {
        let id = midx.id(pos);
        let b = bm.commit_bitmap(pos).unwrap().unwrap();
        assert_eq!(ids(&b), rev_list_objects(&repo, &id), "objects from {id}");
    }
}

// ---------------------------------------------------------------------------------------------
// Damaged files
// ---------------------------------------------------------------------------------------------

/// Opens `bytes` as the bitmap of `pack` and reads every commit bitmap; the first error, if any.
/// Also checks that whatever is returned stays within the pack.
fn read_everything(bytes: Vec<u8>, pack: &Pack, use_table: bool) -> Result<(), BitmapError> {
    // The bitmap file held in memory, to damage at will.
    let blob = Arc::new(packd_storage::MemoryBlob::new(
        "damaged.bitmap",
        bytes.into(),
    ));
    let bm = PackBitmap::open_with(blob, pack.index().pack_checksum(), pack.len(), use_table)?;
    // The union of all in one pass first (it keeps nothing for the one-by-one reads below).
    let all: Vec<u32> = bm.commit_positions().collect();
    let never = std::sync::atomic::AtomicBool::new(false);
    if let Some(b) = bm.union_of(&all, &never)? {
        assert!(b.last_set_bit().is_none_or(|l| l < pack.len() as u64));
    }
    for pos in bm.commit_positions().collect::<Vec<_>>() {
        if let Some(b) = bm.commit_bitmap(pos)? {
            assert!(b.last_set_bit().is_none_or(|l| l < pack.len() as u64));
        }
    }
    for p in 0..pack.len() {
        bm.name_hash(p)?;
    }
    bm.verify_checksum()
}

/// Where each section of a bitmap file starts: (entries start, [type bitmap offsets]).
fn entries_start(bytes: &[u8]) -> u64 {
    let mut at = 32usize;
    for _ in 0..4 {
        let words = u32::from_be_bytes(bytes[at + 4..at + 8].try_into().unwrap()) as usize;
        at += 12 + 8 * words;
    }
    at as u64
}

fn bitmap_bytes(repo: &Repo, pack: &Pack) -> Vec<u8> {
    let name = packd_reach::bitmap::bitmap_name(pack.name()).unwrap();
    std::fs::read(repo.objects().join(name)).unwrap()
}

#[test]
fn damaged_bitmaps_are_errors() {
    let repo = build_repo(120);
    for (table, hash) in [(true, true), (false, false)] {
        repack(&repo, table, hash);
        let pack = repo.only_pack();
        let good = bitmap_bytes(&repo, &pack);
        read_everything(good.clone(), &pack, true).unwrap();

        // Truncated anywhere: an error (at the latest from the trailer checksum), never a panic.
        let mut caught_before_checksum = 0;
        let cuts: Vec<usize> = (0..good.len()).step_by(good.len() / 400 + 1).collect();
        for &cut in &cuts {
            let r = read_everything(good[..cut].to_vec(), &pack, true);
            assert!(r.is_err(), "truncated to {cut} bytes accepted");
            if !matches!(&r, Err(BitmapError::Corrupt { what, .. }) if what.contains("file checksum"))
            {
                caught_before_checksum += 1;
            }
        }
        assert!(
            caught_before_checksum * 10 >= cuts.len() * 8,
            "only {caught_before_checksum} of {} truncations caught by the structure",
            cuts.len()
        );

        // Flipped bytes anywhere: never a panic.
        for at in (0..good.len()).step_by(good.len() / 500 + 1) {
            for mask in [0x01, 0x80, 0xff] {
                let mut bad = good.clone();
                bad[at] ^= mask;
                let _ = read_everything(bad.clone(), &pack, true);
                let _ = read_everything(bad, &pack, false);
            }
        }

        // A flipped byte of the recorded pack checksum: a mismatch, specifically.
        let mut bad = good.clone();
        bad[20] ^= 0x10;
        let err = read_everything(bad, &pack, true).unwrap_err();
        assert!(err.is_checksum_mismatch(), "{err}");
        let odb_err: packd_odb::Error = err.into();
        assert!(odb_err.to_string().contains("written for pack"));

        // A huge word count in a type bitmap.
        let mut bad = good.clone();
        bad[36..40].copy_from_slice(&0x7fff_ffffu32.to_be_bytes());
        let err = read_everything(bad, &pack, true).unwrap_err();
        assert!(matches!(err, BitmapError::Ewah { .. }), "{err}");

        // A huge bit count in a type bitmap.
        let mut bad = good.clone();
        bad[32..36].copy_from_slice(&u32::MAX.to_be_bytes());
        let err = read_everything(bad, &pack, true).unwrap_err();
        assert!(matches!(err, BitmapError::Ewah { .. }), "{err}");

        // The first entry in the file: a huge word count, then a huge run.
        let first = entries_start(&good) as usize;
        let ewah = first + 6;
        let mut bad = good.clone();
        bad[ewah + 4..ewah + 8].copy_from_slice(&0xffff_fff0u32.to_be_bytes());
        for use_table in [true, false] {
            let err = read_everything(bad.clone(), &pack, use_table).unwrap_err();
            assert!(matches!(err, BitmapError::Ewah { .. }), "{err}");
        }
        let mut bad = good.clone();
        let rlw = u64::from_be_bytes(bad[ewah + 8..ewah + 16].try_into().unwrap());
        let huge_run = (rlw & !(0xffff_ffffu64 << 1)) | (0xffff_fff0u64 << 1);
        bad[ewah + 8..ewah + 16].copy_from_slice(&huge_run.to_be_bytes());
        for use_table in [true, false] {
            let err = read_everything(bad.clone(), &pack, use_table).unwrap_err();
            assert!(matches!(err, BitmapError::Ewah { .. }), "{err}");
        }

        // An XOR offset reaching before the first entry.
        let mut bad = good.clone();
        bad[first + 4] = 3;
        let err = read_everything(bad, &pack, false).unwrap_err();
        assert!(matches!(err, BitmapError::Corrupt { .. }), "{err}");

        if table {
            // Lookup table rows pointing at themselves, out of the file, and out of order.
            let n = u32::from_be_bytes(good[8..12].try_into().unwrap()) as usize;
            let table_at = good.len() - 20 - 4 * pack.len() as usize - 16 * n;
            let mut bad = good.clone();
            bad[table_at + 12..table_at + 16].copy_from_slice(&0u32.to_be_bytes());
            assert!(read_everything(bad, &pack, true).is_err());
            let mut bad = good.clone();
            bad[table_at + 4..table_at + 12].copy_from_slice(&u64::MAX.to_be_bytes());
            assert!(read_everything(bad, &pack, true).is_err());
            let mut bad = good.clone();
            bad[table_at..table_at + 4].copy_from_slice(&u32::MAX.to_be_bytes());
            assert!(read_everything(bad, &pack, true).is_err());
            // A cycle: row 1 XORs with row 2 and row 2 with row 1.
            let mut bad = good.clone();
            bad[table_at + 16 + 12..table_at + 16 + 16].copy_from_slice(&2u32.to_be_bytes());
            bad[table_at + 32 + 12..table_at + 32 + 16].copy_from_slice(&1u32.to_be_bytes());
            assert!(read_everything(bad, &pack, true).is_err());
        }

        // Wrong magic and version.
        let mut bad = good.clone();
        bad[0] = b'X';
        assert!(matches!(
            read_everything(bad, &pack, true),
            Err(BitmapError::Corrupt { .. })
        ));
        let mut bad = good.clone();
        bad[5] = 2;
        assert!(matches!(
            read_everything(bad, &pack, true),
            Err(BitmapError::Unsupported { .. })
        ));
    }
}

// ---------------------------------------------------------------------------------------------
// Walking with the bitmaps
// ---------------------------------------------------------------------------------------------

/// `BitmapIndex::difference_with_outside` gives up once its cancel flag is set (a client that
/// hung up): it answers `None` rather than finishing, for tips in the bitmapped pack and for
/// tips outside it. Unset, it answers as many objects as git's `rev-list --objects`.
#[test]
fn a_cancelled_bitmap_walk_answers_nothing() {
    use packd_odb::{IdMap, Repository, RepositoryOptions};
    use packd_reach::bitmap_walk::BitmapIndex;
    use std::sync::atomic::AtomicBool;

    let repo = build_repo(300);
    repack(&repo, true, true);
    // A second pack of new branches, outside the bitmapped pack.
    repo.git_stdin(&["fast-import", "--quiet"], &history(60, 1));
    let refs = |pattern: &str| -> Vec<ObjectId> {
        repo.git(&["for-each-ref", "--format=%(objectname)", pattern])
            .lines()
            .map(oid)
            .collect()
    };
    let packed = refs("refs/heads/[a-z]*");
    let all = refs("refs/");
    assert!(all.len() > packed.len() + 2);
    let odb = Repository::open(&repo.dir, &RepositoryOptions::default()).unwrap();
    let index = BitmapIndex::open(&odb).unwrap().expect("a bitmap");
    let peeled = IdMap::default();
    for tips in [&packed, &all] {
        let cancel = AtomicBool::new(true);
        let answer = index
            .difference_with_outside(&odb, tips, &[], &peeled, &cancel)
            .unwrap();
        assert!(answer.is_none(), "a cancelled walk answered");
        cancel.store(false, Ordering::Relaxed);
        let answer = index
            .difference_with_outside(&odb, tips, &[], &peeled, &cancel)
            .unwrap()
            .expect("the bitmaps answer");
        let hex: Vec<String> = tips.iter().map(ObjectId::to_hex).collect();
        let mut args = vec!["rev-list", "--objects"];
        args.extend(hex.iter().map(String::as_str));
        let git = repo.git(&args).lines().count() as u64;
        assert_eq!(
            answer.wanted.count_ones() + answer.outside.len() as u64,
            git
        );
    }
}

/// Objects of one name-hash near an object in pack order, found by scanning the name-hash cache
/// without sorting the pack's offsets (`objects_with_name_hash`, `bits_near`), are the ones a
/// table of every object's bit by name-hash gives: for every object, the `n` nearest on each
/// side, the object itself left out, from the list as scanned and sorted. The repository has no
/// `.rev`, so the first answers come one by one from the rank index, and the reverse index takes
/// over past a sixty-fourth of the pack.
#[test]
fn objects_near_by_name_hash_match_a_table_of_every_bit() {
    use packd_odb::{Repository, RepositoryOptions};
    use packd_reach::bitmap_walk::{BitmapIndex, NameKeys, SameName};

    let repo = build_repo(300);
    repack(&repo, true, true);
    for rev in repo.dir.join("objects/pack").read_dir().unwrap() {
        let path = rev.unwrap().path();
        if path.extension().is_some_and(|e| e == "rev") {
            std::fs::remove_file(path).unwrap();
        }
    }
    // The table, from each bit's name-hash, by a repository opened for it alone (it sorts its
    // pack's offsets on the way).
    let table_odb = Repository::open(&repo.dir, &RepositoryOptions::default()).unwrap();
    let table_index = BitmapIndex::open(&table_odb).unwrap().expect("a bitmap");
    let count = table_index.object_count() as u64;
    let mut by_hash: HashMap<u32, Vec<u64>> = HashMap::new();
    let mut hash_of = Vec::new();
    for bit in 0..count {
        let hash = table_index
            .name_hash(bit)
            .unwrap()
            .expect("a name-hash cache");
        by_hash.entry(hash).or_default().push(bit);
        hash_of.push(hash);
    }
    assert!(
        by_hash.values().any(|v| v.len() > 40),
        "a name-hash many share"
    );
    // The scans, by a fresh one: its first answers come one by one from the rank index, the
    // later ones from the reverse index it then builds. Lists sorted and not.
    let odb = Repository::open(&repo.dir, &RepositoryOptions::default()).unwrap();
    let index = BitmapIndex::open(&odb).unwrap().expect("a bitmap");
    let pack = index.single_pack().expect("one pack").clone();
    let mut scanned: HashMap<u32, SameName> = HashMap::new();
    let (mut checked, mut one_by_one) = (0, 0);
    for bit in 0..count {
        let hash = hash_of[bit as usize];
        let objects = scanned
            .entry(hash)
            .or_insert_with(|| index.objects_with_name_hash(hash).unwrap().unwrap());
        let same = &by_hash[&hash];
        assert_eq!(objects.objects.len(), same.len(), "name-hash {hash:08x}");
        assert_eq!(objects.keys, NameKeys::Offsets, "no .rev: keyed by offset");
        let mut sorted_objects = objects.clone();
        sorted_objects.objects.sort_unstable();
        for n in [1, 3, 16] {
            if !pack.has_reverse_index() {
                one_by_one += 1;
            }
            let at = same.partition_point(|&b| b < bit);
            let mut expected: Vec<u64> = same[at.saturating_sub(n)..at].to_vec();
            expected.extend(same[at..].iter().filter(|&&b| b != bit).take(n));
            assert_eq!(
                index.bits_near(objects, false, bit, n).unwrap(),
                expected,
                "bit {bit}, n {n}"
            );
            assert_eq!(
                index.bits_near(&sorted_objects, true, bit, n).unwrap(),
                expected,
                "bit {bit}, n {n}, sorted"
            );
            checked += 1;
        }
    }
    assert!(checked > 1000, "{checked}");
    assert!(one_by_one > 10, "{one_by_one} answers one by one");
    assert!(pack.has_reverse_index(), "the reverse index took over");

    // With a `.rev`, once the pack has built its positions from it, the scans key the objects
    // by pack position (no offsets read) and pick the same ones.
    let table_pack = table_index.single_pack().expect("one pack");
    let rev = packd_reach::rev_index::encode(
        table_pack.positions_in_pack_order().unwrap(),
        table_pack.index().pack_checksum(),
    )
    .unwrap();
    let stem = table_pack.name().strip_suffix(".pack").unwrap();
    std::fs::write(repo.dir.join("objects").join(format!("{stem}.rev")), rev).unwrap();
    let odb = Repository::open(&repo.dir, &RepositoryOptions::default()).unwrap();
    let index = BitmapIndex::open(&odb).unwrap().expect("a bitmap");
    let pack = index.single_pack().expect("one pack").clone();
    assert!(pack.has_pack_order(), "the .rev was read");
    assert!(pack.built_pack_positions().is_none());
    assert_eq!(
        pack.pack_position(0).unwrap(),
        table_pack.pack_position(0).unwrap()
    );
    assert!(pack.built_pack_positions().is_some());
    let mut checked = 0;
    for bit in (0..count).step_by(7) {
        let hash = hash_of[bit as usize];
        let objects: SameName = index.objects_with_name_hash(hash).unwrap().unwrap();
        assert_eq!(objects.keys, NameKeys::PackPositions);
        let same = &by_hash[&hash];
        let at = same.partition_point(|&b| b < bit);
        let mut expected: Vec<u64> = same[at.saturating_sub(3)..at].to_vec();
        expected.extend(same[at..].iter().filter(|&&b| b != bit).take(3));
        assert_eq!(index.bits_near(&objects, false, bit, 3).unwrap(), expected);
        let mut sorted_objects = objects.clone();
        sorted_objects.objects.sort_unstable();
        assert_eq!(
            index.bits_near(&sorted_objects, true, bit, 3).unwrap(),
            expected
        );
        checked += 1;
    }
    assert!(checked > 100, "{checked}");
    assert!(!pack.has_reverse_index(), "no offsets were sorted");
}

/// A pack given its order from a `.rev` answers positions, entries and their ends as its
/// sorted offsets do, without sorting them; from a damaged order (a position named twice) it
/// builds no inverse, and finds positions as without one.
#[test]
fn a_pack_order_from_its_rev_answers_as_its_sorted_offsets() {
    use packd_odb::pack::order::PackOrder;

    let repo = build_repo(60);
    repack(&repo, true, true);
    let storage = LocalStorage::new(repo.dir.join("objects"));
    let idx = storage
        .list("pack")
        .unwrap()
        .into_iter()
        .find(|n| n.ends_with(".idx"))
        .expect("a pack");
    let open = || Pack::open(&storage, &format!("pack/{idx}"), 0, HashKind::Sha1).unwrap();
    let sorted = open();
    let order = sorted.positions_in_pack_order().unwrap().to_vec();
    let offsets = sorted.sorted_offsets().unwrap().to_vec();
    // A `.rev` of `order`, read as packd reads one (its permutation is not checked).
    let rev_of = |order: &[u32]| {
        let bytes = packd_reach::rev_index::encode(order, sorted.index().pack_checksum()).unwrap();
        let blob = packd_storage::MemoryBlob::new("t.rev", bytes.into());
        RevIndex::open(&blob, sorted.index().pack_checksum(), sorted.len()).unwrap()
    };
    let rev = rev_of(&order);
    assert_eq!(rev.positions_be().len(), 4 * order.len());

    // Entries one by one, within the budget before the pack sorts its offsets.
    let pack = open();
    pack.set_pack_order(Arc::new(rev.clone()));
    assert!(pack.has_pack_order());
    let budget = order.len() / 64;
    assert!(budget >= 4, "{budget}");
    for p in [0, order.len() / 2, order.len() - 1] {
        let (offset, index_pos) = (offsets[p], order[p]);
        assert_eq!(
            pack.entry_span(offset).unwrap(),
            (index_pos, offsets[p + 1])
        );
    }
    assert_eq!(pack.entry_end(offsets[3]).unwrap(), offsets[4]);
    assert!(!pack.has_reverse_index(), "answered by the order");
    // Not an entry's offset: refused (by the sorted offsets, which then take over, read off
    // the order).
    assert!(pack.entry_span(offsets[1] - 1).is_err());
    assert!(pack.has_reverse_index());
    assert_eq!(pack.sorted_offsets().unwrap(), &offsets[..]);
    assert_eq!(pack.positions_in_pack_order().unwrap(), &order[..]);
    // Without an order, the rank index finds ends one by one, and refuses an offset no entry
    // starts at, or the trailer's, without sorting every offset.
    let pack = open();
    assert_eq!(pack.entry_end(offsets[3]).unwrap(), offsets[4]);
    let inside = pack.entry_end(offsets[1] - 1).unwrap_err().to_string();
    assert!(inside.contains("no object of the index starts"), "{inside}");
    let trailer = pack
        .entry_end(offsets[offsets.len() - 1])
        .unwrap_err()
        .to_string();
    assert!(trailer.contains("outside the entries"), "{trailer}");
    assert!(!pack.has_reverse_index(), "no offsets were sorted");
    // Positions both ways, for every entry, without a sort.
    let pack = open();
    pack.set_pack_order(Arc::new(rev.clone()));
    for (p, &index_pos) in order.iter().enumerate() {
        assert_eq!(
            pack.entry_at_position(p as u32).unwrap(),
            Some((offsets[p], index_pos))
        );
        assert_eq!(
            pack.pack_position_by_search(index_pos).unwrap(),
            Some(p as u32)
        );
        assert_eq!(pack.pack_position(index_pos).unwrap(), Some(p as u32));
    }
    assert_eq!(pack.entry_at_position(order.len() as u32).unwrap(), None);
    assert!(!pack.has_reverse_index());

    // An order naming one position twice is no permutation: positions come as without one.
    let mut damaged = order.clone();
    damaged[1] = damaged[0];
    let pack = open();
    pack.set_pack_order(Arc::new(rev_of(&damaged)));
    for (p, &index_pos) in order.iter().enumerate().skip(2) {
        assert_eq!(pack.pack_position(index_pos).unwrap(), Some(p as u32));
    }
    assert!(
        pack.built_pack_positions().is_none(),
        "no inverse of a damaged order"
    );
    assert!(!pack.has_pack_order(), "the damaged order is dropped");
    for p in [0, 1, 2] {
        assert_eq!(
            pack.entry_at_position(p as u32).unwrap(),
            Some((offsets[p], order[p]))
        );
    }

    // Two entries swapped: a permutation, but not in offset order. Entries whose neighbours
    // in the order are out of place are found by the sorted offsets instead.
    let mut swapped = order.clone();
    swapped.swap(10, 11);
    for p in [8, 9, 10, 11, 12, 13] {
        let pack = open();
        pack.set_pack_order(Arc::new(rev_of(&swapped)));
        assert_eq!(
            pack.entry_span(offsets[p]).unwrap(),
            (order[p], offsets[p + 1]),
            "entry {p}"
        );
        // Entries 9, 10 and 11 see a swapped one out of place among their neighbours: the
        // sorted offsets answered. The others (12 sees entry 10 before it, in order), the order.
        assert_eq!(pack.has_reverse_index(), (9..=11).contains(&p), "entry {p}");
    }
    // Its offsets out of order: sorted, not read off it, and the order is no longer used.
    let pack = open();
    pack.set_pack_order(Arc::new(rev_of(&swapped)));
    assert_eq!(pack.sorted_offsets().unwrap(), &offsets[..]);
    assert_eq!(pack.positions_in_pack_order().unwrap(), &order[..]);
    assert!(!pack.has_pack_order());
    // The same for an order naming a position twice, found when the offsets are read off it.
    let pack = open();
    pack.set_pack_order(Arc::new(rev_of(&damaged)));
    assert_eq!(pack.sorted_offsets().unwrap(), &offsets[..]);
    assert!(!pack.has_pack_order());
    for p in [0, 1] {
        assert_eq!(
            pack.entry_at_position(p as u32).unwrap(),
            Some((offsets[p], order[p]))
        );
    }

    // Without an order, an offset where no entry starts is refused by the rank index alone.
    let pack = open();
    assert!(pack.entry_span(offsets[5] + 1).is_err());
    assert!(!pack.has_reverse_index());
}
