//! The objects a repository's index names, for `--indexed-objects` (git's repack packs what
//! the index reaches): each entry's blob (not gitlinks) and the cache-tree's trees.
//!
//! ```text
//! "DIRC"  version (u32 BE: 2, 3 or 4)  entry count (u32 BE)
//! entry*  ctime, mtime (2 x u32 each), dev, ino, mode, uid, gid, size (u32 each: 40 bytes)
//!         object id (20 bytes)  flags (u16; 0x4000: extended, v3+)  [extra flags (u16)]
//!         v2/v3: path, NUL-padded to a multiple of 8 bytes from the entry's start (1-8 NULs)
//!         v4:    varint (bytes to drop from the previous path's end), then the rest, NUL
//! extension*  signature (4 bytes)  size (u32 BE)  data
//!         "TREE": (path NUL  entry count (ASCII, -1: invalid) SP  subtrees (ASCII) LF
//!                  [tree id (20 bytes), when the count is not -1])*
//! trailer  SHA-1 of everything before it
//! ```
//!
//! A split index's shared part (`link` extension) is not read: only the entries of the file
//! itself count (a missing object there would be one git packs and packd leaves loose).

use packd_odb::ObjectId;
use std::path::Path;

/// A gitlink's mode (a commit of another repository).
const GITLINK: u32 = 0o160000;

/// The fixed part of an entry, up to and including its flags.
const FIXED: usize = 62;

/// The ids `index` names (its entries' blobs, with their paths, and its cache-tree's trees);
/// none when there is no index (a bare repository).
pub(super) fn objects(index: &Path) -> Result<Vec<(ObjectId, Vec<u8>)>, packd_odb::Error> {
    let bytes = match std::fs::read(index) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => {
            return Err(corrupt(index, 0, format!("cannot be read: {e}")));
        }
    };
    parse(index, &bytes)
}

fn corrupt(file: &Path, offset: usize, what: String) -> packd_odb::Error {
    packd_odb::Error::Corrupt {
        file: file.display().to_string(),
        offset: offset as u64,
        what,
    }
}

fn u32_at(bytes: &[u8], at: usize) -> Option<u32> {
    let b = bytes.get(at..at + 4)?;
    Some(u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
}

/// Parses the index `bytes` (read from `file`, named in errors with the offset).
fn parse(file: &Path, bytes: &[u8]) -> Result<Vec<(ObjectId, Vec<u8>)>, packd_odb::Error> {
    let bad = |offset: usize, what: &str| corrupt(file, offset, what.to_string());
    if bytes.len() < 12 + 20 || &bytes[..4] != b"DIRC" {
        return Err(bad(0, "not an index (no DIRC header)"));
    }
    let end = bytes.len() - 20;
    let version = u32_at(bytes, 4).unwrap_or(0);
    if !(2..=4).contains(&version) {
        return Err(bad(4, &format!("index version {version} is not 2, 3 or 4")));
    }
    let count = u32_at(bytes, 8).unwrap_or(0);
    let mut out = Vec::new();
    let mut at = 12;
    let mut path: Vec<u8> = Vec::new();
    for _ in 0..count {
        let start = at;
        if start + FIXED > end {
            return Err(bad(start, "an entry runs past the end of the index"));
        }
        let mode = u32_at(bytes, start + 24).unwrap_or(0);
        let id = ObjectId::from_bytes(&bytes[start + 40..start + 60])
            .ok_or_else(|| bad(start + 40, "a malformed object id"))?;
        let flags = u16::from_be_bytes([bytes[start + 60], bytes[start + 61]]);
        at = start + FIXED;
        if version >= 3 && flags & 0x4000 != 0 {
            at += 2;
        }
        if version == 4 {
            let (drop, used) = varint(&bytes[at.min(end)..end])
                .ok_or_else(|| bad(at, "a malformed path prefix length"))?;
            at += used;
            if drop > path.len() as u64 {
                return Err(bad(at, "a path prefix longer than the previous path"));
            }
            path.truncate(path.len() - drop as usize);
            let nul = bytes[at.min(end)..end]
                .iter()
                .position(|&b| b == 0)
                .ok_or_else(|| bad(at, "an entry's path has no end"))?;
            path.extend_from_slice(&bytes[at..at + nul]);
            at += nul + 1;
        } else {
            let nul = bytes[at.min(end)..end]
                .iter()
                .position(|&b| b == 0)
                .ok_or_else(|| bad(at, "an entry's path has no end"))?;
            path.clear();
            path.extend_from_slice(&bytes[at..at + nul]);
            // NUL-padded to a multiple of 8 from the entry's start, at least one NUL.
            at = start + ((at - start + nul + 8) & !7);
        }
        if mode != GITLINK {
            out.push((id, path.clone()));
        }
    }
    // Extensions, up to the trailer.
    while at + 8 <= end {
        let size = u32_at(bytes, at + 4).unwrap_or(0) as usize;
        let data_at = at + 8;
        if size > end - data_at {
            return Err(bad(at, "an extension runs past the end of the index"));
        }
        if &bytes[at..at + 4] == b"TREE" {
            cache_tree(file, &bytes[data_at..data_at + size], data_at, &mut out)?;
        } else if &bytes[at..at + 4] == b"link" {
            tracing::warn!(
                "{}: a split index: its shared part's objects are not counted",
                file.display()
            );
        }
        at = data_at + size;
    }
    Ok(out)
}

/// The trees of a cache-tree extension (`data`, at `base` in the file) whose counts are valid.
fn cache_tree(
    file: &Path,
    data: &[u8],
    base: usize,
    out: &mut Vec<(ObjectId, Vec<u8>)>,
) -> Result<(), packd_odb::Error> {
    let mut at = 0;
    while at < data.len() {
        let bad = |what: &str| corrupt(file, base + at, what.to_string());
        let nul = data[at..]
            .iter()
            .position(|&b| b == 0)
            .ok_or_else(|| bad("a cache-tree path has no end"))?;
        let line_at = at + nul + 1;
        let lf = data[line_at.min(data.len())..]
            .iter()
            .position(|&b| b == b'\n')
            .ok_or_else(|| bad("a cache-tree entry has no counts"))?;
        let counts = std::str::from_utf8(&data[line_at..line_at + lf])
            .map_err(|_| bad("cache-tree counts are not ASCII"))?;
        let entries: i64 = counts
            .split(' ')
            .next()
            .and_then(|c| c.parse().ok())
            .ok_or_else(|| bad("a malformed cache-tree entry count"))?;
        at = line_at + lf + 1;
        if entries >= 0 {
            let id = data
                .get(at..at + 20)
                .and_then(ObjectId::from_bytes)
                .ok_or_else(|| corrupt(file, base + at, "a cache-tree id is cut short".into()))?;
            out.push((id, Vec::new()));
            at += 20;
        }
    }
    Ok(())
}

/// git's offset varint (pack and index v4 style: 7 bits a byte, each continuation adding
/// one); the value and the bytes it took.
fn varint(bytes: &[u8]) -> Option<(u64, usize)> {
    let mut value = u64::from(*bytes.first()? & 0x7f);
    let mut used = 1;
    let mut byte = bytes[0];
    while byte & 0x80 != 0 {
        byte = *bytes.get(used)?;
        used += 1;
        value = value.checked_add(1)?.checked_mul(128)? | u64::from(byte & 0x7f);
    }
    Some((value, used))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An index git writes (version `v`, two entries, a cache-tree), read back; then every
    /// cut and a flipped byte of it: an error or a reading, never a panic.
    #[test]
    fn gits_index_reads_and_damage_is_an_error_not_a_panic() {
        for v in ["2", "3", "4"] {
            let dir = tempfile::tempdir().unwrap();
            let git = |args: &[&str]| {
                let out = std::process::Command::new("git")
                    .arg("-C")
                    .arg(dir.path())
                    .args(args)
                    .env("GIT_CONFIG_NOSYSTEM", "1")
                    .env("HOME", dir.path())
                    .output()
                    .unwrap();
                assert!(out.status.success(), "{args:?}");
                String::from_utf8(out.stdout).unwrap().trim().to_string()
            };
            git(&["init", "-q", "--bare", "."]);
            let blob = git(&["hash-object", "-w", "/dev/null"]);
            for path in ["a/one", "a/two"] {
                git(&[
                    "update-index",
                    "--add",
                    "--cacheinfo",
                    &format!("100644,{blob},{path}"),
                ]);
            }
            git(&["update-index", "--index-version", v]);
            let tree = git(&["write-tree"]);
            let index = dir.path().join("index");
            let found = objects(&index).unwrap();
            let paths: Vec<&[u8]> = found.iter().map(|(_, p)| &p[..]).collect();
            assert_eq!(paths, [&b"a/one"[..], b"a/two", b"", b""], "v{v}");
            assert_eq!(found[2].0.to_hex(), tree);
            let bytes = std::fs::read(&index).unwrap();
            for cut in 0..bytes.len() {
                let _ = parse(&index, &bytes[..cut]);
                let mut flipped = bytes.clone();
                flipped[cut] ^= 0xff;
                let _ = parse(&index, &flipped);
            }
            assert!(parse(&index, &bytes[..40]).is_err());
        }
    }
}
