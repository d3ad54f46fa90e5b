//! A large fill-in walk's answer kept on disk, so that a server started again does not walk
//! again (see `WalkMemo` in `bitmap_walk`): on git/git with its pull-request refs, a mirror
//! clone's walk is most of the 1.11 s of CPU of a fresh server's first clone
//! (`fetch-20261126-0427.txt`), which a running server spends once.
//!
//! ```text
//! "packd walk 1\n"                      magic, 13 bytes
//! key[20]                               the .bitmap file's own checksum (its trailer, which
//!                                       covers the pack's or multi-pack-index's it records)
//! n_tips: u32, tips: n_tips x 20 bytes  sorted, distinct
//! n_tip_bitmaps: u32, n x u32           index positions of commits with bitmaps
//! n_reached: u32, n x u32               index positions of commits with bitmaps
//! n_words: u32, n x u64                 the walked objects' bits (little-endian words)
//! checksum[20]                          SHA-1 of everything above
//! ```
//! All integers but the words are big-endian. The file is `<dir>/<key in hex>.walk`, one per
//! bitmap: a new pack or a new bitmap has a new key, and writing its file removes the files of
//! bitmaps no longer in the `pack/` the bitmap was found in (a repack replaced them; a listing
//! with no bitmap in it removes nothing: see `write`). A file is written whole
//! (`replace_file`: a temporary file, synced, made read-only, renamed); one that does not
//! check out (damaged, another key, a position without a bitmap, a bit past the last object)
//! is ignored.

use crate::bitmap_walk::WalkMemo;
use crate::ewah::Bitmap;
use packd_odb::ObjectId;
use packd_storage::Storage;
use std::path::{Path, PathBuf};

const MAGIC: &[u8] = b"packd walk 1\n";

/// The largest file read: the walk from git/git's 4,133 pull-request tips without bitmaps,
/// over 841,300 objects, took 188,249 bytes (`bench/data/full-repo.git` after one mirror
/// clone, 2026-11-26, with `PACKD_LOG=packd_reach=debug` naming the tips).
const MAX_FILE: u64 = 256 << 20;

/// How long a temporary file is left before it is taken for a dead writer's (see [`write`]).
const TEMP_KEPT_FOR: std::time::Duration = std::time::Duration::from_secs(600);

/// The file for the bitmap named by `key` (see the module documentation) in `dir`.
pub(crate) fn path(dir: &Path, key: &[u8; 20]) -> PathBuf {
    dir.join(format!("{}.walk", packd_odb::hex(key)))
}

/// `memo` as the file's bytes.
pub(crate) fn encode(memo: &WalkMemo, key: &[u8; 20]) -> Vec<u8> {
    let mut out = Vec::with_capacity(
        MAGIC.len()
            + 20
            + 16
            + memo.tips.len() * 20
            + (memo.tip_bitmaps.len() + memo.reached.len()) * 4
            + memo.walked.words().len() * 8
            + 20,
    );
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(key);
    out.extend_from_slice(&(memo.tips.len() as u32).to_be_bytes());
    for tip in &memo.tips {
        out.extend_from_slice(tip.as_bytes());
    }
    for list in [&memo.tip_bitmaps, &memo.reached] {
        out.extend_from_slice(&(list.len() as u32).to_be_bytes());
        for pos in list.iter() {
            out.extend_from_slice(&pos.to_be_bytes());
        }
    }
    let words = memo.walked.words();
    out.extend_from_slice(&(words.len() as u32).to_be_bytes());
    for w in words {
        out.extend_from_slice(&w.to_le_bytes());
    }
    // Bytes packd made: they carry no collision attack, and an all-zero trailer would only
    // make the file unusable.
    let digest = sha1_of(&out).unwrap_or([0; 20]);
    out.extend_from_slice(&digest);
    out
}

/// The SHA-1 of `bytes`; `None` for bytes that carry a collision attack (never written, and
/// refused when read).
fn sha1_of(bytes: &[u8]) -> Option<[u8; 20]> {
    sha1dc::digest(bytes)
        .ok()
        .map(|d| d.as_ref().try_into().expect("20 bytes"))
}

/// Why a kept file was not used.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub(crate) struct Unusable(String);

/// The answer in `bytes`, for the bitmap named by `key`, over `objects` objects; `has_bitmap`
/// says whether an index position has a commit bitmap (every kept position must).
pub(crate) fn decode(
    bytes: &[u8],
    key: &[u8; 20],
    objects: u32,
    has_bitmap: impl Fn(u32) -> bool,
) -> Result<WalkMemo, Unusable> {
    let bad = |what: &str| Unusable(what.to_string());
    if bytes.len() < MAGIC.len() + 20 + 20 || !bytes.starts_with(MAGIC) {
        return Err(bad("not a kept walk"));
    }
    let (body, trailer) = bytes.split_at(bytes.len() - 20);
    if sha1_of(body).as_ref().map(|d| &d[..]) != Some(trailer) {
        return Err(bad("its checksum does not match its content"));
    }
    let mut at = MAGIC.len();
    if &body[at..at + 20] != key {
        return Err(bad("kept for another pack or bitmap"));
    }
    at += 20;
    let mut input = Cursor { body, at };
    let n_tips = input.count(objects, 20)?;
    let mut tips = Vec::with_capacity(n_tips);
    for _ in 0..n_tips {
        tips.push(ObjectId::from_bytes(input.take(20)?).expect("20 bytes"));
    }
    if tips.windows(2).any(|w| w[0] >= w[1]) {
        return Err(bad("tips not sorted"));
    }
    let mut lists = [Vec::new(), Vec::new()];
    for list in &mut lists {
        let n = input.count(objects, 4)?;
        list.reserve(n);
        for _ in 0..n {
            let pos = input.u32()?;
            if pos >= objects || !has_bitmap(pos) {
                return Err(bad("a position without a commit bitmap"));
            }
            list.push(pos);
        }
    }
    let n_words = input.count(objects, 8)?;
    if n_words as u64 * 64 > objects as u64 + 63 {
        return Err(bad("more bits than objects"));
    }
    let mut words = Vec::with_capacity(n_words);
    for _ in 0..n_words {
        words.push(u64::from_le_bytes(
            input.take(8)?.try_into().expect("8 bytes"),
        ));
    }
    if input.at != body.len() {
        return Err(bad("bytes after the bits"));
    }
    let walked = Bitmap::from_words(words);
    if walked
        .last_set_bit()
        .is_some_and(|bit| bit >= objects as u64)
    {
        return Err(bad("a bit past the last object"));
    }
    let [tip_bitmaps, reached] = lists;
    Ok(WalkMemo {
        tips,
        tip_bitmaps,
        reached,
        walked,
    })
}

/// Reads a kept file's fields in order.
struct Cursor<'a> {
    body: &'a [u8],
    at: usize,
}

impl<'a> Cursor<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], Unusable> {
        let piece = self
            .body
            .get(self.at..self.at + n)
            .ok_or_else(|| Unusable("truncated".into()))?;
        self.at += n;
        Ok(piece)
    }

    fn u32(&mut self) -> Result<u32, Unusable> {
        Ok(u32::from_be_bytes(
            self.take(4)?.try_into().expect("4 bytes"),
        ))
    }

    /// A count of items of `size` bytes each: at most `objects`, and no more than the bytes
    /// left hold (checked before anything is allocated for them).
    fn count(&mut self, objects: u32, size: usize) -> Result<usize, Unusable> {
        let n = self.u32()?;
        if n > objects {
            return Err(Unusable("a count larger than the objects".into()));
        }
        if n as usize > (self.body.len() - self.at) / size {
            return Err(Unusable("truncated".into()));
        }
        Ok(n as usize)
    }
}

/// Reads the file at `path`, if there is one small enough.
pub(crate) fn read(path: &Path) -> Option<Vec<u8>> {
    let len = std::fs::metadata(path).ok()?.len();
    if len > MAX_FILE {
        return None;
    }
    std::fs::read(path).ok()
}

/// Writes `bytes` to `path` whole (see the module documentation), then removes the files of
/// bitmaps that are no longer among the `pack/*.bitmap` files of `objects`, the objects
/// directory the bitmap was found in (a repack replaced them; a server still serving an old
/// pack may keep its file meanwhile, and writes it again if it is removed under it), and
/// temporary files older than [`TEMP_KEPT_FOR`].
pub(crate) fn write(path: &Path, bytes: Vec<u8>, objects: &dyn Storage) -> std::io::Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir)?;
    replace_file(path, &bytes)?;
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Ok(());
    };
    // The bitmaps' keys, read only when another walk file turns up (most often none does).
    let mut live: Option<Option<std::collections::HashSet<String>>> = None;
    for entry in entries.flatten() {
        let other = entry.path();
        if other == path {
            continue;
        }
        let name = entry.file_name().to_string_lossy().into_owned();
        let stale = match name.strip_suffix(".walk") {
            // Only once the bitmaps could be listed (see `bitmap_keys`).
            Some(hex) => live
                .get_or_insert_with(|| bitmap_keys(objects))
                .as_ref()
                .is_some_and(|live| !live.contains(hex)),
            None => {
                name.starts_with("tmp_")
                    && entry
                        .metadata()
                        .and_then(|m| m.modified())
                        .ok()
                        .and_then(|t| t.elapsed().ok())
                        .is_some_and(|age| age >= TEMP_KEPT_FOR)
            }
        };
        if stale {
            let _ = std::fs::remove_file(other);
        }
    }
    Ok(())
}

/// Replaces the file at `path` whole with `bytes`: written to a new temporary file beside it
/// (`tmp_<name>_<pid>_<n>`, created exclusively so that two writers never share one), synced,
/// made read-only and renamed over it, then the directory synced. A local cache of this
/// server's, not a file of the repository: it does not go through the storage layer.
fn replace_file(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    let dir = path.parent().unwrap_or(Path::new("."));
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let mut made = None;
    for n in 0..1000u32 {
        let tmp = dir.join(format!("tmp_{name}_{}_{n}", std::process::id()));
        match std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&tmp)
        {
            Ok(file) => {
                made = Some((tmp, file));
                break;
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e),
        }
    }
    let Some((tmp, mut file)) = made else {
        return Err(std::io::Error::other(format!(
            "{}: cannot create a temporary file",
            dir.display()
        )));
    };
    let written = file
        .write_all(bytes)
        .and_then(|()| file.sync_all())
        .and_then(|()| {
            drop(file);
            packd_odb::file_mode::make_read_only(&tmp)
        })
        .and_then(|()| std::fs::rename(&tmp, path));
    if let Err(e) = written {
        let _ = std::fs::remove_file(&tmp);
        return Err(e);
    }
    #[cfg(unix)]
    std::fs::File::open(dir)?.sync_all()?;
    Ok(())
}

/// The keys (in hex) of the `pack/*.bitmap` files of `objects`: each file's trailing
/// checksum, its last 20 bytes. `None` when `pack/` cannot be listed, or lists no bitmap whose
/// trailer could be read: the bitmap a walk is kept for was found there, so such a listing
/// (of a directory gone, say) tells nothing about which files are stale.
fn bitmap_keys(objects: &dyn Storage) -> Option<std::collections::HashSet<String>> {
    let mut keys = std::collections::HashSet::new();
    for name in objects.list("pack").ok()? {
        if !name.ends_with(".bitmap") {
            continue;
        }
        let Ok(blob) = objects.open(&format!("pack/{name}")) else {
            continue;
        };
        if let Ok(Some(key)) = crate::bitmap::trailing_checksum(blob.as_ref()) {
            keys.insert(packd_odb::hex(&key));
        }
    }
    (!keys.is_empty()).then_some(keys)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn memo() -> WalkMemo {
        let mut walked = Bitmap::new();
        for bit in [3u64, 64, 65, 999] {
            walked.set(bit);
        }
        let mut tips: Vec<ObjectId> = (0..5u32)
            .map(|i| ObjectId::compute(packd_odb::ObjectKind::Blob, &i.to_be_bytes()).unwrap())
            .collect();
        tips.sort();
        WalkMemo {
            tips,
            tip_bitmaps: vec![7, 9],
            reached: vec![11],
            walked,
        }
    }

    #[test]
    fn a_kept_walk_reads_back_only_for_its_bitmap() {
        let key = [0xab; 20];
        let bytes = encode(&memo(), &key);
        let back = decode(&bytes, &key, 1000, |_| true).unwrap();
        assert_eq!(back.tips, memo().tips);
        assert_eq!(back.tip_bitmaps, vec![7, 9]);
        assert_eq!(back.reached, vec![11]);
        assert_eq!(back.walked.words(), memo().walked.words());

        let all: fn(u32) -> bool = |_| true;
        type Case = (&'static str, [u8; 20], u32, fn(u32) -> bool);
        let refused: [Case; 4] = [
            ("another bitmap", [0xcd; 20], 1000, all),
            ("bits past the objects", key, 500, all),
            ("bit 999 past 999 objects", key, 999, all),
            ("a position without a bitmap", key, 1000, |p| p != 9),
        ];
        for (what, key, objects, has_bitmap) in refused {
            assert!(decode(&bytes, &key, objects, has_bitmap).is_err(), "{what}");
        }
        assert!(
            decode(&bytes, &key, 1000, all).is_ok(),
            "bit 999 of 1000 objects"
        );
        for cut in [0, 13, 60, bytes.len() - 21, bytes.len() - 1] {
            assert!(
                decode(&bytes[..cut], &key, 1000, |_| true).is_err(),
                "cut at {cut}"
            );
        }
        let mut damaged = bytes.clone();
        damaged[70] ^= 1;
        assert!(decode(&damaged, &key, 1000, |_| true).is_err(), "damaged");
    }

    #[test]
    fn a_file_is_replaced_whole_and_files_of_bitmaps_gone_are_removed() {
        let dir = tempfile::tempdir().unwrap();
        let objects_dir = dir.path().join("objects");
        let pack_dir = objects_dir.join("pack");
        std::fs::create_dir_all(&pack_dir).unwrap();
        let objects = &packd_storage::LocalStorage::new(&objects_dir);
        // Two bitmaps, named by their trailing checksums.
        let bitmap = |name: &str, key: u8| {
            let mut bytes = b"a bitmap file".to_vec();
            bytes.extend_from_slice(&[key; 20]);
            std::fs::write(pack_dir.join(name), bytes).unwrap();
        };
        bitmap("pack-a.bitmap", 1);
        bitmap("pack-b.bitmap", 2);
        let walk_dir = dir.path().join("walk");
        let file = path(&walk_dir, &[1; 20]);
        write(&file, b"first".to_vec(), objects).unwrap();
        write(&file, b"second".to_vec(), objects).unwrap();
        assert_eq!(read(&file).unwrap(), b"second");
        assert!(std::fs::metadata(&file).unwrap().permissions().readonly());
        let names: Vec<_> = std::fs::read_dir(&walk_dir)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names.len(), 1, "no temporary file left: {names:?}");
        // Another bitmap's file leaves this one while its bitmap is there, however old.
        let long_ago = std::time::SystemTime::now() - TEMP_KEPT_FOR * 100;
        std::fs::File::open(&file)
            .unwrap()
            .set_modified(long_ago)
            .unwrap();
        let other = path(&walk_dir, &[2; 20]);
        write(&other, b"third".to_vec(), objects).unwrap();
        assert_eq!(read(&file).unwrap(), b"second", "its bitmap is there: kept");
        // Once a repack removed the bitmap, its file goes with the next write.
        std::fs::remove_file(pack_dir.join("pack-a.bitmap")).unwrap();
        write(&other, b"fourth".to_vec(), objects).unwrap();
        assert!(
            read(&file).is_none(),
            "the removed bitmap's file is removed"
        );
        assert_eq!(read(&other).unwrap(), b"fourth");
        // Objects whose `pack/` cannot be listed (here: their root is a file), is not there, or
        // holds no bitmap remove nothing.
        let not_a_dir = dir.path().join("file");
        std::fs::write(&not_a_dir, b"").unwrap();
        let unlistable = &packd_storage::LocalStorage::new(&not_a_dir);
        write(&file, b"fifth".to_vec(), unlistable).unwrap();
        write(&other, b"sixth".to_vec(), unlistable).unwrap();
        assert_eq!(read(&file).unwrap(), b"fifth");
        let no_pack = &packd_storage::LocalStorage::new(dir.path().join("empty"));
        write(&file, b"seventh".to_vec(), no_pack).unwrap();
        assert_eq!(read(&other).unwrap(), b"sixth");
        std::fs::remove_file(pack_dir.join("pack-b.bitmap")).unwrap();
        write(&other, b"eighth".to_vec(), objects).unwrap();
        assert_eq!(read(&file).unwrap(), b"seventh", "no bitmap listed: kept");
    }
}
