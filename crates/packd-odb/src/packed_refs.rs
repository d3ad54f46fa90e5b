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
//! cost a parse of every ref.

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

/// A `packed-refs` file.
#[derive(Debug)]
pub struct PackedRefs {
    text: Text,
    sorted: bool,
    /// Where the first ref line starts (after the header).
    first: usize,
}

impl PackedRefs {
    /// Reads `common_dir/packed-refs`; `None` when there is none.
    pub fn read(common_dir: &Path) -> Result<Option<PackedRefs>> {
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
        let len = file.metadata().map_err(io)?.len();
        let text = if len < 64 * 1024 {
            let mut v = Vec::with_capacity(len as usize);
            std::io::Read::read_to_end(&mut &file, &mut v).map_err(io)?;
            Text::Owned(v)
        } else {
            // SAFETY: git replaces packed-refs by renaming a new file over it, never by writing
            // in place, so the mapped file does not change under us.
            Text::Mapped(unsafe { memmap2::Mmap::map(&file) }.map_err(io)?)
        };
        Ok(Some(PackedRefs::new(text)))
    }

    /// A `packed-refs` file's text, parsed lazily.
    pub fn from_text(text: String) -> PackedRefs {
        PackedRefs::new(Text::Owned(text.into_bytes()))
    }

    fn new(text: Text) -> PackedRefs {
        let mut first = 0;
        let mut sorted = false;
        while text[first..].starts_with(b"#") {
            let end = line_end(&text, first);
            if let Some(traits) = text[first..end].strip_prefix(b"# pack-refs with:") {
                sorted = traits
                    .split(|&b| b == b' ' || b == b'\t' || b == b'\r')
                    .any(|t| t == b"sorted");
            }
            first = next_line(&text, first);
        }
        PackedRefs {
            text,
            sorted,
            first,
        }
    }

    /// The ref line starting at `s`: (id, name), `None` for a malformed line.
    fn entry_at(&self, s: usize) -> Option<(ObjectId, &str)> {
        let line = std::str::from_utf8(&self.text[s..line_end(&self.text, s)]).ok()?;
        let (hex, name) = line.split_once(' ')?;
        Some((ObjectId::from_hex(hex)?, name.trim_end_matches('\r')))
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
            .find(|(n, _)| n == name)
            .map(|(_, id)| id)
    }

    /// The refs under `prefix`, in file order, leaving out every ref under each of `skip`
    /// (ref prefixes, matched at a `/`); in a sorted file the skipped ranges are not parsed.
    pub fn entries(&self, prefix: &str, skip: &[&str]) -> Vec<(String, ObjectId)> {
        let hidden = |name: &str| {
            skip.iter().any(|p| {
                name == *p || (name.starts_with(p) && name.as_bytes().get(p.len()) == Some(&b'/'))
            })
        };
        let mut out = Vec::new();
        if !self.sorted {
            let mut s = self.first;
            while s < self.text.len() {
                if !self.text[s..].starts_with(b"^") && !self.text[s..].starts_with(b"#") {
                    if let Some((id, name)) = self.entry_at(s) {
                        if name.starts_with(prefix) && !hidden(name) {
                            out.push((name.to_string(), id));
                        }
                    }
                }
                s = next_line(&self.text, s);
            }
            out.sort_by(|a, b| a.0.cmp(&b.0));
            return out;
        }
        // Ranges to skip: [start of `p/`, start of `p0`) ('0' follows '/').
        let mut ranges: Vec<(usize, usize)> = skip
            .iter()
            .map(|p| {
                (
                    self.lower_bound(&format!("{p}/")),
                    self.lower_bound(&format!("{p}0")),
                )
            })
            .collect();
        ranges.sort_unstable();
        let mut s = if prefix.is_empty() {
            self.first
        } else {
            self.lower_bound(prefix)
        };
        while s < self.text.len() {
            if let Some(&(_, end)) = ranges.iter().find(|(a, b)| *a <= s && s < *b) {
                s = end;
                continue;
            }
            if let Some((id, name)) = self.entry_at(s) {
                if !name.starts_with(prefix) {
                    break;
                }
                if !hidden(name) {
                    out.push((name.to_string(), id));
                }
            }
            s = self.next_ref_line(s);
        }
        out
    }

    /// The refs under `prefix` with their peeled values, sorted by name: `Some(target)` for a
    /// ref whose line is followed by a `^<target>` line (an annotated tag, and the object it
    /// peels to through every level of tags), `None` otherwise. Callers use the peeled value to
    /// skip reading the tag; git writes these lines for that purpose (`fully-peeled`) and reads
    /// them for ref advertisements.
    pub fn peeled_entries(&self, prefix: &str) -> Vec<(String, ObjectId, Option<ObjectId>)> {
        let mut out: Vec<(String, ObjectId, Option<ObjectId>)> = Vec::new();
        let mut s = if self.sorted && !prefix.is_empty() {
            self.lower_bound(prefix)
        } else {
            self.first
        };
        // Whether the last ref line read is the last entry of `out` (a `^` line belongs to it).
        let mut last_kept = false;
        while s < self.text.len() {
            let line = &self.text[s..line_end(&self.text, s)];
            if let Some(hex) = line.strip_prefix(b"^") {
                let hex = hex.strip_suffix(b"\r").unwrap_or(hex);
                if last_kept {
                    let peeled = std::str::from_utf8(hex).ok().and_then(ObjectId::from_hex);
                    if let Some(last) = out.last_mut() {
                        last.2 = peeled;
                    }
                }
            } else if !line.starts_with(b"#") {
                last_kept = false;
                if let Some((id, name)) = self.entry_at(s) {
                    if name.starts_with(prefix) {
                        out.push((name.to_string(), id, None));
                        last_kept = true;
                    } else if self.sorted {
                        // Sorted, and started at the prefix: past its range.
                        break;
                    }
                }
            }
            s = next_line(&self.text, s);
        }
        if !self.sorted {
            out.sort_by(|a, b| a.0.cmp(&b.0));
        }
        out
    }
}

fn line_end(text: &[u8], s: usize) -> usize {
    text[s..]
        .iter()
        .position(|&b| b == b'\n')
        .map_or(text.len(), |i| s + i)
}

fn next_line(text: &[u8], s: usize) -> usize {
    text[s..]
        .iter()
        .position(|&b| b == b'\n')
        .map_or(text.len(), |i| s + i + 1)
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
            .map(|(n, _)| n)
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

        // Peeled values: only the refs followed by a `^` line, sorted or not.
        for file in [&packed, &unsorted] {
            let peeled: Vec<(String, Option<String>)> = file
                .peeled_entries("refs/")
                .into_iter()
                .filter(|(_, _, p)| p.is_some())
                .map(|(n, _, p)| (n, p.map(|p| p.to_hex())))
                .collect();
            assert_eq!(
                peeled,
                vec![
                    ("refs/pull/7/head".to_string(), Some(id(9999))),
                    ("refs/tags/v1".to_string(), Some(id(9999)))
                ]
            );
            assert_eq!(file.peeled_entries("refs/").len(), names.len());
            let tags = file.peeled_entries("refs/tags/");
            assert_eq!(tags.len(), 1);
            assert_eq!(tags[0].2.map(|p| p.to_hex()), Some(id(9999)));
            assert!(file.peeled_entries("refs/nothing/").is_empty());
        }
    }
}
