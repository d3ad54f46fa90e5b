//! The `packed-refs` file, read once and searched in place.
//!
//! ```text
//! # pack-refs with: peeled fully-peeled sorted
//! <hex id> <ref name>
//! ^<hex id of the peeled tag target>        (after an annotated tag's line)
//! ```
//!
//! A host keeps its refs packed: 100,000 `refs/pull/*` lines are 7 MB. When the file says
//! `sorted` (git always writes it so), one ref is found by binary search over the lines and a
//! range of names (a prefix) is skipped without parsing it, so a push or a ref lookup does not
//! cost a parse of every ref. A server, which reads the refs for every request, keeps the file
//! parsed instead ([`PackedRefsCache`]).

use crate::hash::ObjectId;
use crate::{Error, Result};
use std::path::Path;

/// The bytes of a `packed-refs` file: mapped (a large file is searched, not read whole), or
/// given.
enum Text {
    Mapped(memmap2::Mmap),
    Owned(Vec<u8>),
}

impl std::ops::Deref for Text {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match self {
            Text::Mapped(m) => m,
            Text::Owned(v) => v,
        }
    }
}

impl std::fmt::Debug for Text {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} bytes", self.len())
    }
}

/// Whether ref `name` is under one of the ref prefixes `skip` (the prefix itself, or below it
/// at a `/`): hidden refs such as `refs/pull`.
pub(crate) fn is_hidden(name: &str, skip: &[&str]) -> bool {
    skip.iter()
        .any(|p| name == *p || (name.starts_with(p) && name.as_bytes().get(p.len()) == Some(&b'/')))
}

/// What `packed-refs` says a ref peels to. git writes a `^` line after each annotated tag it
/// packs, and its header's traits say for which refs a missing `^` line means "not a tag":
/// `peeled` for those under `refs/tags/`, `fully-peeled` for all. An advertisement with
/// thousands of refs then reads no object to peel them, as git's does not.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Peeled {
    /// The file does not say: the object must be read to know.
    Unknown,
    /// Not an annotated tag.
    NotTag,
    /// An annotated tag that peels, through every level of tags, to this object.
    Tag(ObjectId),
}

impl Peeled {
    /// The object an annotated tag peels to; `None` for anything else or when unknown.
    pub fn tag_target(self) -> Option<ObjectId> {
        match self {
            Peeled::Tag(target) => Some(target),
            Peeled::NotTag | Peeled::Unknown => None,
        }
    }
}

/// A `packed-refs` file.
#[derive(Debug)]
pub struct PackedRefs {
    text: Text,
    sorted: bool,
    /// The `peeled` trait: refs under `refs/tags/` without a `^` line are not tags.
    peeled_tags: bool,
    /// The `fully-peeled` trait: no ref without a `^` line is a tag.
    fully_peeled: bool,
    /// Where the first ref line starts (after the header).
    first: usize,
}

impl PackedRefs {
    /// Reads `common_dir/packed-refs`; `None` when there is none.
    pub fn read(common_dir: &Path) -> Result<Option<PackedRefs>> {
        Ok(Self::read_keyed(common_dir)?.map(|(_, refs)| refs))
    }

    /// Like [`PackedRefs::read`], with what identifies the file read (taken from the open
    /// file, so it is the content's own).
    fn read_keyed(common_dir: &Path) -> Result<Option<(FileKey, PackedRefs)>> {
        let path = common_dir.join("packed-refs");
        let io = |source| Error::Io {
            path: path.display().to_string(),
            source,
        };
        let file = match std::fs::File::open(&path) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(io(e)),
        };
        let metadata = file.metadata().map_err(io)?;
        let key = FileKey::of(&metadata);
        let len = metadata.len();
        let text = if len < 64 * 1024 {
            let mut v = Vec::with_capacity(len as usize);
            std::io::Read::read_to_end(&mut &file, &mut v).map_err(io)?;
            Text::Owned(v)
        } else {
            // SAFETY: git replaces packed-refs by renaming a new file over it, never by writing
            // in place, so the mapped file does not change under us.
            Text::Mapped(unsafe { memmap2::Mmap::map(&file) }.map_err(io)?)
        };
        Ok(Some((key, PackedRefs::new(text))))
    }

    /// A `packed-refs` file's text, parsed lazily.
    pub fn from_text(text: String) -> PackedRefs {
        PackedRefs::new(Text::Owned(text.into_bytes()))
    }

    fn new(text: Text) -> PackedRefs {
        let mut first = 0;
        let (mut sorted, mut peeled_tags, mut fully_peeled) = (false, false, false);
        while text[first..].starts_with(b"#") {
            let end = line_end(&text, first);
            if let Some(traits) = text[first..end].strip_prefix(b"# pack-refs with:") {
                for t in traits.split(|&b| b == b' ' || b == b'\t' || b == b'\r') {
                    match t {
                        b"sorted" => sorted = true,
                        b"peeled" => peeled_tags = true,
                        b"fully-peeled" => fully_peeled = true,
                        _ => {}
                    }
                }
            }
            first = next_line(&text, first);
        }
        PackedRefs {
            text,
            sorted,
            peeled_tags,
            fully_peeled,
            first,
        }
    }

    /// What the file says ref `name`, whose line starts at `s`, peels to: the `^` line after
    /// it, else what the header's traits promise.
    fn peel_after(&self, s: usize, name: &str) -> Peeled {
        let next = next_line(&self.text, s);
        if let Some(rest) = self.text[next..].strip_prefix(b"^") {
            // The id, then the end of the line (or of the file).
            let whole = matches!(rest.get(40), None | Some(b'\n' | b'\r'));
            return match rest
                .get(..40)
                .filter(|_| whole)
                .and_then(ObjectId::from_hex_bytes)
            {
                Some(target) => Peeled::Tag(target),
                None => Peeled::Unknown,
            };
        }
        if self.fully_peeled || (self.peeled_tags && name.starts_with("refs/tags/")) {
            Peeled::NotTag
        } else {
            Peeled::Unknown
        }
    }

    /// The ref line starting at `s`: (id, name), `None` for a malformed line.
    fn entry_at(&self, s: usize) -> Option<(ObjectId, &str)> {
        let line = &self.text[s..line_end(&self.text, s)];
        // The id, a space, the name.
        if line.get(40) != Some(&b' ') {
            return None;
        }
        let id = ObjectId::from_hex_bytes(&line[..40])?;
        let name = std::str::from_utf8(&line[41..]).ok()?;
        Some((id, name.trim_end_matches('\r')))
    }

    fn name_at(&self, s: usize) -> &[u8] {
        let line = &self.text[s..line_end(&self.text, s)];
        match line.iter().position(|&b| b == b' ') {
            Some(sp) => {
                let name = &line[sp + 1..];
                name.strip_suffix(b"\r").unwrap_or(name)
            }
            None => b"",
        }
    }

    /// The start of the ref line whose block (the line and its `^` lines) holds `pos`.
    fn ref_line_start(&self, pos: usize) -> usize {
        let t = &self.text;
        let mut s = t[..pos]
            .iter()
            .rposition(|&b| b == b'\n')
            .map_or(0, |i| i + 1);
        while s > self.first && t[s..].starts_with(b"^") {
            s = t[..s - 1]
                .iter()
                .rposition(|&b| b == b'\n')
                .map_or(0, |i| i + 1);
        }
        s.max(self.first)
    }

    /// The start of the ref line after the one at `s` (skipping its `^` lines).
    fn next_ref_line(&self, s: usize) -> usize {
        let mut e = next_line(&self.text, s);
        while self.text[e..].starts_with(b"^") {
            e = next_line(&self.text, e);
        }
        e
    }

    /// The start of the first ref line whose name is not less than `key` (sorted files only).
    fn lower_bound(&self, key: &str) -> usize {
        let (mut lo, mut hi) = (self.first, self.text.len());
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            // At or before `mid`, so below `hi`: each step narrows the range.
            let s = self.ref_line_start(mid).max(lo);
            if self.name_at(s) < key.as_bytes() {
                lo = self.next_ref_line(s);
            } else {
                hi = s;
            }
        }
        lo
    }

    /// The id `name` is packed with.
    pub fn find(&self, name: &str) -> Option<ObjectId> {
        if self.sorted {
            let s = self.lower_bound(name);
            return match self.entry_at(s) {
                Some((id, n)) if s < self.text.len() && n == name => Some(id),
                _ => None,
            };
        }
        self.entries("", &[])
            .into_iter()
            .find(|(n, _, _)| n == name)
            .map(|(_, id, _)| id)
    }

    /// The refs under `prefix` with what the file says each peels to, leaving out every ref under
    /// each of `skip` (ref prefixes, matched at a `/`): in file order when the file says it is
    /// `sorted` (and the skipped ranges are not parsed), else sorted by name.
    pub fn entries(&self, prefix: &str, skip: &[&str]) -> Vec<(String, ObjectId, Peeled)> {
        let hidden = |name: &str| is_hidden(name, skip);
        let mut out = Vec::new();
        if !self.sorted {
            let mut s = self.first;
            while s < self.text.len() {
                if !self.text[s..].starts_with(b"^") && !self.text[s..].starts_with(b"#") {
                    if let Some((id, name)) = self.entry_at(s) {
                        if name.starts_with(prefix) && !hidden(name) {
                            out.push((name.to_string(), id, self.peel_after(s, name)));
                        }
                    }
                }
                s = next_line(&self.text, s);
            }
            out.sort_by(|a, b| a.0.cmp(&b.0));
            return out;
        }
        let ranges = SkippedRanges::new(skip, |key| self.lower_bound(key));
        let mut s = if prefix.is_empty() {
            self.first
        } else {
            self.lower_bound(prefix)
        };
        while s < self.text.len() {
            if let Some(end) = ranges.end_of(s) {
                s = end;
                continue;
            }
            if let Some((id, name)) = self.entry_at(s) {
                if !name.starts_with(prefix) {
                    break;
                }
                if !hidden(name) {
                    out.push((name.to_string(), id, self.peel_after(s, name)));
                }
            }
            s = self.next_ref_line(s);
        }
        out
    }
}

/// Where the refs under each skipped prefix lie in a list sorted by name (a sorted file, or
/// the parsed refs): `[start of p/, start of p0)`, '0' following '/'. A walk over the list
/// jumps over them instead of filtering ref by ref.
struct SkippedRanges(Vec<(usize, usize)>);

impl SkippedRanges {
    /// The ranges of `skip`, given where the first name not below a key starts.
    fn new(skip: &[&str], lower_bound: impl Fn(&str) -> usize) -> SkippedRanges {
        let mut ranges: Vec<(usize, usize)> = skip
            .iter()
            .map(|p| (lower_bound(&format!("{p}/")), lower_bound(&format!("{p}0"))))
            .collect();
        ranges.sort_unstable();
        SkippedRanges(ranges)
    }

    /// Where the skipped range holding `at` ends, if one does.
    fn end_of(&self, at: usize) -> Option<usize> {
        self.0
            .iter()
            .find(|&&(a, b)| a <= at && at < b)
            .map(|&(_, end)| end)
    }
}

fn line_end(text: &[u8], s: usize) -> usize {
    memchr::memchr(b'\n', &text[s..]).map_or(text.len(), |i| s + i)
}

fn next_line(text: &[u8], s: usize) -> usize {
    memchr::memchr(b'\n', &text[s..]).map_or(text.len(), |i| s + i + 1)
}

/// What tells one `packed-refs` file from another: git replaces the file by renaming a new
/// one over it, which changes its inode and times (an inode number freed and taken again
/// comes with new times, unless within one tick of the file system's clock: see
/// [`FileKey::is_recent`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct FileKey {
    dev: u64,
    ino: u64,
    len: u64,
    modified: Option<std::time::SystemTime>,
    #[cfg(unix)]
    changed: (i64, i64),
}

/// A file changed less than this long ago is not kept parsed: another file of the same size
/// could still take its inode number with the same times (as git treats a racily clean index).
const RECENT: std::time::Duration = std::time::Duration::from_secs(2);

impl FileKey {
    /// Whether the file was changed (renamed into place, on unix) less than `recent` ago.
    fn is_recent(&self, recent: std::time::Duration) -> bool {
        #[cfg(unix)]
        let changed = std::time::UNIX_EPOCH
            .checked_add(std::time::Duration::new(
                self.changed.0.max(0) as u64,
                self.changed.1.clamp(0, 999_999_999) as u32,
            ))
            .or(self.modified);
        #[cfg(not(unix))]
        let changed = self.modified;
        match changed {
            Some(changed) => match std::time::SystemTime::now().duration_since(changed) {
                Ok(age) => age < recent,
                Err(_) => true,
            },
            None => true,
        }
    }

    fn of(metadata: &std::fs::Metadata) -> FileKey {
        #[cfg(unix)]
        use std::os::unix::fs::MetadataExt;
        FileKey {
            #[cfg(unix)]
            dev: metadata.dev(),
            #[cfg(not(unix))]
            dev: 0,
            #[cfg(unix)]
            ino: metadata.ino(),
            #[cfg(not(unix))]
            ino: 0,
            len: metadata.len(),
            modified: metadata.modified().ok(),
            #[cfg(unix)]
            changed: (metadata.ctime(), metadata.ctime_nsec()),
        }
    }
}

/// Every packed ref of one `packed-refs` file, sorted by name.
type Parsed = std::sync::Arc<[(Box<str>, ObjectId, Peeled)]>;

/// A repository's `packed-refs`, parsed once and parsed again only when the file is replaced.
///
/// A server answers every request from a snapshot of the refs: on git/git with its 4,282
/// pull-request and other refs, parsing the file took a fifth of the CPU of a fetch 8 days
/// behind. A `stat` of the file now tells whether the last parse still holds (a file replaced
/// in the last two seconds is parsed each time).
#[derive(Debug)]
pub struct PackedRefsCache {
    held: std::sync::Mutex<Option<(FileKey, Parsed)>>,
    /// Files changed more recently than this are not kept ([`RECENT`]; tests set 0).
    recent: std::time::Duration,
}

impl Default for PackedRefsCache {
    fn default() -> Self {
        PackedRefsCache {
            held: Default::default(),
            recent: RECENT,
        }
    }
}

impl PackedRefsCache {
    /// The refs of `common_dir/packed-refs` under `prefix`, leaving out every ref under each
    /// of `skip` (as [`PackedRefs::entries`]), sorted by name, with what each peels to; empty
    /// when there is no file.
    pub fn entries(
        &self,
        common_dir: &Path,
        prefix: &str,
        skip: &[&str],
    ) -> Result<Vec<(String, ObjectId, Peeled)>> {
        let Some(all) = self.all(common_dir)? else {
            return Ok(Vec::new());
        };
        let below = |key: &str| all.partition_point(|(name, _, _)| &**name < key);
        let (from, to) = (below(prefix), below(&format!("{prefix}\u{10ffff}")));
        // As `PackedRefs::entries` does; `p` itself is left out below.
        let ranges = SkippedRanges::new(skip, below);
        let mut out = Vec::new();
        let mut at = from;
        while at < to {
            if let Some(end) = ranges.end_of(at) {
                at = end;
                continue;
            }
            let (name, id, peeled) = &all[at];
            if !skip.contains(&&**name) {
                out.push((name.to_string(), *id, *peeled));
            }
            at += 1;
        }
        Ok(out)
    }

    /// The id `name` is packed with.
    pub fn find(&self, common_dir: &Path, name: &str) -> Result<Option<ObjectId>> {
        let Some(all) = self.all(common_dir)? else {
            return Ok(None);
        };
        Ok(all
            .binary_search_by(|(n, _, _)| (**n).cmp(name))
            .ok()
            .map(|i| all[i].1))
    }

    /// Every packed ref, from the last parse when the file is still the one parsed.
    fn all(&self, common_dir: &Path) -> Result<Option<Parsed>> {
        let path = common_dir.join("packed-refs");
        let current = match std::fs::metadata(&path) {
            Ok(metadata) => FileKey::of(&metadata),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                *self.lock() = None;
                return Ok(None);
            }
            Err(source) => {
                return Err(Error::Io {
                    path: path.display().to_string(),
                    source,
                })
            }
        };
        if let Some((key, parsed)) = self.lock().as_ref() {
            if *key == current {
                return Ok(Some(parsed.clone()));
            }
        }
        let Some((key, refs)) = PackedRefs::read_keyed(common_dir)? else {
            *self.lock() = None;
            return Ok(None);
        };
        let mut all = refs.entries("", &[]);
        // A file that says `sorted` and is not would break the binary search.
        if !all.is_sorted_by(|a, b| a.0 < b.0) {
            all.sort_by(|a, b| a.0.cmp(&b.0));
            all.dedup_by(|b, a| a.0 == b.0);
        }
        let parsed: Parsed = all
            .into_iter()
            .map(|(name, id, peeled)| (name.into_boxed_str(), id, peeled))
            .collect();
        *self.lock() = (!key.is_recent(self.recent)).then(|| (key, parsed.clone()));
        Ok(Some(parsed))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<(FileKey, Parsed)>> {
        self.held
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(n: u32) -> String {
        format!("{n:040x}")
    }

    #[test]
    fn finds_and_skips_in_a_sorted_file() {
        let mut text = "# pack-refs with: peeled fully-peeled sorted \n".to_string();
        let mut names = vec![
            "refs/heads/main".to_string(),
            "refs/heads/zz".to_string(),
            "refs/pull".to_string(),
            "refs/pullx/1".to_string(),
            "refs/tags/v1".to_string(),
        ];
        for n in 0..500 {
            names.push(format!("refs/pull/{n}/head"));
        }
        names.sort();
        for (i, n) in names.iter().enumerate() {
            text.push_str(&format!("{} {n}\n", id(i as u32 + 1)));
            if n == "refs/tags/v1" || n == "refs/pull/7/head" {
                text.push_str(&format!("^{}\n", id(9999)));
            }
        }
        let packed = PackedRefs::from_text(text.clone());
        for (i, n) in names.iter().enumerate() {
            assert_eq!(
                packed.find(n).map(|x| x.to_hex()),
                Some(id(i as u32 + 1)),
                "{n}"
            );
        }
        assert_eq!(packed.find("refs/heads/mai"), None);
        assert_eq!(packed.find("refs/zzz"), None);
        assert_eq!(packed.find("a"), None);
        let all = packed.entries("refs/", &[]);
        assert_eq!(all.len(), names.len());
        let visible: Vec<String> = packed
            .entries("refs/", &["refs/pull"])
            .into_iter()
            .map(|(n, _, _)| n)
            .collect();
        assert_eq!(
            visible,
            vec![
                "refs/heads/main",
                "refs/heads/zz",
                "refs/pullx/1",
                "refs/tags/v1"
            ]
        );
        let heads = packed.entries("refs/heads/", &[]);
        assert_eq!(heads.len(), 2);
        // The same answers from an unsorted file.
        let unsorted = PackedRefs::from_text(text.replace(" sorted", ""));
        assert_eq!(
            unsorted.find("refs/pull/7/head"),
            packed.find("refs/pull/7/head")
        );
        assert_eq!(unsorted.entries("refs/", &["refs/pull"]).len(), 4);

        // Peeled values: the refs followed by a `^` line are tags; the header's
        // `fully-peeled` says no other ref is, sorted or not.
        for file in [&packed, &unsorted] {
            let peeled: Vec<(String, Peeled)> = file
                .entries("refs/", &[])
                .into_iter()
                .filter(|(_, _, p)| *p != Peeled::NotTag)
                .map(|(n, _, p)| (n, p))
                .collect();
            let tag = Peeled::Tag(ObjectId::from_hex(&id(9999)).unwrap());
            assert_eq!(
                peeled,
                vec![
                    ("refs/pull/7/head".to_string(), tag),
                    ("refs/tags/v1".to_string(), tag)
                ]
            );
            assert_eq!(file.entries("refs/tags/", &[]).len(), 1);
            assert!(file.entries("refs/nothing/", &[]).is_empty());
        }
        // `peeled` alone promises only tags' lines; without a trait nothing is promised.
        let tags_only = PackedRefs::from_text(text.replace("fully-peeled ", ""));
        let no_traits = PackedRefs::from_text(text.replace("peeled fully-peeled ", ""));
        for (n, promised) in [
            ("refs/heads/main", Peeled::NotTag),
            (
                "refs/tags/v1",
                Peeled::Tag(ObjectId::from_hex(&id(9999)).unwrap()),
            ),
        ] {
            let of = |file: &PackedRefs| {
                file.entries(n, &[])
                    .into_iter()
                    .find(|(name, _, _)| name == n)
                    .map(|(_, _, p)| p)
            };
            assert_eq!(of(&packed), Some(promised), "{n}");
            let tagged = matches!(promised, Peeled::Tag(_));
            assert_eq!(
                of(&tags_only),
                Some(if tagged { promised } else { Peeled::Unknown }),
                "{n}"
            );
            assert_eq!(
                of(&no_traits),
                Some(if tagged { promised } else { Peeled::Unknown }),
                "{n}"
            );
        }
        let untagged_tag = format!(
            "# pack-refs with: peeled sorted \n{} refs/heads/a\n{} refs/tags/t\n",
            id(1),
            id(2)
        );
        let tags_only = PackedRefs::from_text(untagged_tag);
        let peels: Vec<Peeled> = tags_only
            .entries("", &[])
            .into_iter()
            .map(|(_, _, p)| p)
            .collect();
        assert_eq!(peels, [Peeled::Unknown, Peeled::NotTag]);
    }

    #[test]
    fn the_cache_sees_a_replaced_file() {
        let dir = tempfile::tempdir().unwrap();
        // Kept however recent the file (each write below is).
        let cache = PackedRefsCache {
            recent: std::time::Duration::ZERO,
            ..PackedRefsCache::default()
        };
        assert!(cache.entries(dir.path(), "", &[]).unwrap().is_empty());
        let write = |text: &str| {
            // As git does: a new file renamed over the old one.
            std::fs::write(dir.path().join("packed-refs.new"), text).unwrap();
            std::fs::rename(
                dir.path().join("packed-refs.new"),
                dir.path().join("packed-refs"),
            )
            .unwrap();
        };
        write(&format!(
            "# pack-refs with: peeled fully-peeled sorted \n{} refs/heads/a\n{} refs/pull/1/head\n{} refs/tags/v1\n^{}\n",
            id(1),
            id(2),
            id(3),
            id(4)
        ));
        let names = |v: Vec<(String, ObjectId, Peeled)>| {
            v.into_iter().map(|(n, _, _)| n).collect::<Vec<_>>()
        };
        assert_eq!(
            names(cache.entries(dir.path(), "refs/", &["refs/pull"]).unwrap()),
            ["refs/heads/a", "refs/tags/v1"]
        );
        assert_eq!(
            names(cache.entries(dir.path(), "refs/pull/", &[]).unwrap()),
            ["refs/pull/1/head"]
        );
        let v1 = cache.find(dir.path(), "refs/tags/v1").unwrap().unwrap();
        assert_eq!(v1.to_string(), id(3));
        // The same size and names, another id: seen at once.
        write(&format!(
            "# pack-refs with: peeled fully-peeled sorted \n{} refs/heads/a\n{} refs/pull/1/head\n{} refs/tags/v1\n^{}\n",
            id(1),
            id(2),
            id(5),
            id(4)
        ));
        let v1 = cache.find(dir.path(), "refs/tags/v1").unwrap().unwrap();
        assert_eq!(v1.to_string(), id(5));
        // Unsorted files are sorted; a removed file has no refs.
        write(&format!("{} refs/tags/z\n{} refs/heads/b\n", id(6), id(7)));
        assert_eq!(
            names(cache.entries(dir.path(), "", &[]).unwrap()),
            ["refs/heads/b", "refs/tags/z"]
        );
        assert!(cache.find(dir.path(), "refs/heads/a").unwrap().is_none());
        std::fs::remove_file(dir.path().join("packed-refs")).unwrap();
        assert!(cache.entries(dir.path(), "", &[]).unwrap().is_empty());
        assert!(cache.find(dir.path(), "refs/heads/b").unwrap().is_none());
    }

    #[test]
    fn a_file_just_replaced_is_not_kept() {
        let dir = tempfile::tempdir().unwrap();
        let cache = PackedRefsCache::default();
        std::fs::write(
            dir.path().join("packed-refs"),
            format!("{} refs/heads/a\n", id(1)),
        )
        .unwrap();
        assert_eq!(cache.entries(dir.path(), "", &[]).unwrap().len(), 1);
        assert!(
            cache.lock().is_none(),
            "a file written just now is parsed each time"
        );
    }
}
