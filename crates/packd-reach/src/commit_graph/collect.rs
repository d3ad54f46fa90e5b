//! The commits some tips reach, read from the object database, each parsed as git's
//! `parse_commit_buffer` parses it (a graph must say what git reads: `git commit-graph verify`
//! compares every tree, parent and date with git's own parse), numbered in id order.
//!
//! ```text
//! commit  "tree <40 hex>\n" ("parent <40 hex>\n")* "author ...\n" "committer ... <email> <date> <tz>\n" ...
//! date    the digits after the committer line's first '>', read as strtoumax reads them
//!         (blanks skipped, a sign taken, u64::MAX on overflow); 0 without "author"/"committer"
//! ```
//!
//! The walk is a queue, not recursion: git/git's history is 75,000 commits deep in places.

use super::CommitGraphError;
use crate::progress::Progress;
use packd_odb::{IdMap, ObjectDb, ObjectId, ObjectKind};

/// Tag chains longer than this are refused (git's own limit is the object count; a real
/// chain is a few tags long).
const MAX_TAG_DEPTH: usize = 1000;

/// The commits of a graph, by position (their index in id order), with their trees, dates and
/// parents (as positions).
#[derive(Debug, Default)]
pub struct Commits {
    ids: Vec<ObjectId>,
    trees: Vec<ObjectId>,
    dates: Vec<u64>,
    /// `parents[parent_start[p]..parent_start[p + 1]]` are commit `p`'s parents, in order.
    parent_start: Vec<u32>,
    parents: Vec<u32>,
}

/// A commit as read, before the commits are sorted.
struct Read {
    tree: ObjectId,
    date: u64,
}

impl Commits {
    /// Reads every commit `tips` reach. Tags among the tips are peeled; a tip that is not a
    /// commit (a tagged tree or blob) is skipped, as git skips it. A tip or parent that is
    /// missing, is not a commit or does not parse is an error naming it.
    pub fn collect(
        objects: &ObjectDb,
        tips: &[ObjectId],
        progress: Option<&dyn Progress>,
    ) -> Result<Commits, CommitGraphError> {
        if let Some(p) = progress {
            p.start("Reading commits", 0);
        }
        // Discovery order: `found[i]` was first named by `child[i]` (u32::MAX for a tip).
        let mut index: IdMap<u32> = IdMap::default();
        let mut found: Vec<ObjectId> = Vec::new();
        let mut child: Vec<u32> = Vec::new();
        for tip in tips {
            let Some(commit) = peel_to_commit(objects, tip)? else {
                continue;
            };
            if let std::collections::hash_map::Entry::Vacant(e) = index.entry(commit) {
                e.insert(found.len() as u32);
                found.push(commit);
                child.push(u32::MAX);
            }
        }
        let mut read: Vec<Read> = Vec::with_capacity(found.len());
        // Parents by discovery index, flat.
        let mut parent_start: Vec<u32> = vec![0];
        let mut parents: Vec<u32> = Vec::new();
        let mut i = 0;
        while i < found.len() {
            let id = found[i];
            let named_by = (child[i] != u32::MAX).then(|| found[child[i] as usize]);
            let bad = |what: String| CommitGraphError::BadCommit {
                id,
                child: named_by,
                what,
            };
            let object = objects
                .read(&id)
                .map_err(|e| bad(e.to_string()))?
                .ok_or_else(|| bad("missing from the object database".into()))?;
            if object.kind != ObjectKind::Commit {
                return Err(bad(format!("is a {}, not a commit", object.kind.name())));
            }
            let parsed = parse(&object.data).map_err(|what| bad(what.into()))?;
            for p in parsed.parents {
                let next = found.len() as u32;
                let at = *index.entry(p).or_insert_with(|| {
                    found.push(p);
                    child.push(i as u32);
                    next
                });
                parents.push(at);
            }
            if parents.len() >= u32::MAX as usize {
                return Err(CommitGraphError::TooMany(found.len()));
            }
            parent_start.push(parents.len() as u32);
            read.push(Read {
                tree: parsed.tree,
                date: parsed.date,
            });
            i += 1;
            if let Some(p) = progress.filter(|_| i % 1024 == 0) {
                p.update(i as u64);
            }
        }
        if let Some(p) = progress {
            p.update(found.len() as u64);
        }
        // git numbers commits 0..0x7fffffff (the high bit marks EDGE links) and 0x70000000 means
        // "no parent"; packd's reader refuses that many too.
        if found.len() >= 0x7000_0000 {
            return Err(CommitGraphError::TooMany(found.len()));
        }
        drop(index);

        // Number by id: `order[pos]` is a discovery index, `pos_of[discovery]` its position.
        let mut order: Vec<u32> = (0..found.len() as u32).collect();
        order.sort_unstable_by_key(|&d| found[d as usize]);
        let mut pos_of = vec![0u32; found.len()];
        for (pos, &d) in order.iter().enumerate() {
            pos_of[d as usize] = pos as u32;
        }
        let mut commits = Commits {
            ids: Vec::with_capacity(found.len()),
            trees: Vec::with_capacity(found.len()),
            dates: Vec::with_capacity(found.len()),
            parent_start: Vec::with_capacity(found.len() + 1),
            parents: Vec::with_capacity(parents.len()),
        };
        commits.parent_start.push(0);
        for &d in &order {
            let d = d as usize;
            commits.ids.push(found[d]);
            commits.trees.push(read[d].tree);
            commits.dates.push(read[d].date);
            let range = parent_start[d] as usize..parent_start[d + 1] as usize;
            commits
                .parents
                .extend(parents[range].iter().map(|&p| pos_of[p as usize]));
            commits.parent_start.push(commits.parents.len() as u32);
        }
        Ok(commits)
    }

    /// The number of commits.
    pub fn len(&self) -> usize {
        self.ids.len()
    }

    /// True when there are none.
    pub fn is_empty(&self) -> bool {
        self.ids.is_empty()
    }

    /// The ids, sorted (position order).
    pub fn ids(&self) -> &[ObjectId] {
        &self.ids
    }

    /// The root tree of the commit at `pos`.
    pub fn tree(&self, pos: usize) -> &ObjectId {
        &self.trees[pos]
    }

    /// The commit date of the commit at `pos`, as git reads it.
    pub fn date(&self, pos: usize) -> u64 {
        self.dates[pos]
    }

    /// The parents of the commit at `pos`, as positions, in order.
    pub fn parents(&self, pos: usize) -> &[u32] {
        &self.parents[self.parent_start[pos] as usize..self.parent_start[pos + 1] as usize]
    }
}

/// The commit `id` names, through any tags; `None` when that is not a commit (or a tag points at
/// nothing the database has, which git's `--reachable` skips too).
fn peel_to_commit(objects: &ObjectDb, id: &ObjectId) -> Result<Option<ObjectId>, CommitGraphError> {
    let mut at = *id;
    for _ in 0..MAX_TAG_DEPTH {
        let Some(header) = objects.header(&at)? else {
            return if at == *id {
                Err(CommitGraphError::BadCommit {
                    id: at,
                    child: None,
                    what: "a tip missing from the object database".into(),
                })
            } else {
                Ok(None)
            };
        };
        match header.kind {
            ObjectKind::Commit => return Ok(Some(at)),
            ObjectKind::Tag => {
                let tag = objects
                    .read(&at)?
                    .ok_or_else(|| CommitGraphError::BadCommit {
                        id: at,
                        child: None,
                        what: "a tag that cannot be read".into(),
                    })?;
                at = packd_odb::parse::tag_target(&at, &tag.data)?;
            }
            _ => return Ok(None),
        }
    }
    Err(CommitGraphError::BadCommit {
        id: *id,
        child: None,
        what: format!("a chain of more than {MAX_TAG_DEPTH} tags"),
    })
}

/// What a graph records of a commit.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct Parsed {
    pub tree: ObjectId,
    pub parents: Vec<ObjectId>,
    pub date: u64,
}

/// Parses a commit as git's `parse_commit_buffer` does: the tree line first, then the parent
/// lines, then the date from the author and committer lines that follow.
pub(super) fn parse(data: &[u8]) -> Result<Parsed, &'static str> {
    const TREE_LINE: usize = 5 + 40;
    const PARENT_LINE: usize = 7 + 40;
    if data.len() <= TREE_LINE + 1 || !data.starts_with(b"tree ") || data[TREE_LINE] != b'\n' {
        return Err("bogus commit object (no tree line)");
    }
    let tree = ObjectId::from_hex_bytes(&data[5..TREE_LINE]).ok_or("bad tree pointer")?;
    let mut at = TREE_LINE + 1;
    let mut parents = Vec::new();
    while at + PARENT_LINE < data.len() && data[at..].starts_with(b"parent ") {
        if data.len() <= at + PARENT_LINE + 1 || data[at + PARENT_LINE] != b'\n' {
            return Err("bad parents");
        }
        parents
            .push(ObjectId::from_hex_bytes(&data[at + 7..at + PARENT_LINE]).ok_or("bad parents")?);
        at += PARENT_LINE + 1;
    }
    Ok(Parsed {
        tree,
        parents,
        date: commit_date(&data[at..]),
    })
}

/// git's `parse_commit_date` on what follows the parent lines.
fn commit_date(buf: &[u8]) -> u64 {
    let end = buf.len();
    if 6 >= end || !buf.starts_with(b"author") {
        return 0;
    }
    let mut at = buf.iter().position(|&b| b == b'\n').map_or(end, |n| n + 1);
    if at + 9 >= end || !buf[at..].starts_with(b"committer") {
        return 0;
    }
    at = buf[at..]
        .iter()
        .position(|&b| b == b'>')
        .map_or(end, |n| at + n + 1);
    if at >= end {
        return 0;
    }
    let date_at = at;
    let line_end = buf[at..]
        .iter()
        .position(|&b| b == b'\n')
        .map_or(end, |n| at + n + 1);
    if line_end >= end {
        return 0;
    }
    strtoumax(&buf[date_at..])
}

/// C's `strtoumax(s, NULL, 10)` on a buffer that ends where `s` does: leading blanks skipped,
/// an optional sign ('-' negates, modulo 2^64), digits until anything else, u64::MAX when the
/// digits overflow.
fn strtoumax(s: &[u8]) -> u64 {
    let mut i = 0;
    while i < s.len() && matches!(s[i], b' ' | b'\t' | b'\n' | b'\x0b' | b'\x0c' | b'\r') {
        i += 1;
    }
    let negative = match s.get(i) {
        Some(b'-') => {
            i += 1;
            true
        }
        Some(b'+') => {
            i += 1;
            false
        }
        _ => false,
    };
    let mut value: u64 = 0;
    let mut overflow = false;
    while let Some(d @ b'0'..=b'9') = s.get(i) {
        match value
            .checked_mul(10)
            .and_then(|v| v.checked_add((d - b'0') as u64))
        {
            Some(v) => value = v,
            None => overflow = true,
        }
        i += 1;
    }
    if overflow {
        u64::MAX
    } else if negative {
        value.wrapping_neg()
    } else {
        value
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TREE: &str = "4b825dc642cb6eb9a060e54bf8d69288fbee4904";
    const PARENT: &str = "ce013625030ba8dba906f756967f9e9ca394464a";

    #[test]
    fn parses_like_git() {
        let text = format!(
            "tree {TREE}\nparent {PARENT}\nparent {PARENT}\nauthor A <a@b> 5 +0000\ncommitter C <c@d> 1700000000 +0100\n\nmsg\n"
        );
        let p = parse(text.as_bytes()).unwrap();
        assert_eq!(p.tree, ObjectId::from_hex(TREE).unwrap());
        assert_eq!(p.parents.len(), 2);
        assert_eq!(p.date, 1_700_000_000);
        // The number after the first '>' (an email with '>' in a name is git's business).
        let odd = format!("tree {TREE}\nauthor A <a@b> 5 +0000\ncommitter C> <c@d> 7 +0000\n\n");
        assert_eq!(parse(odd.as_bytes()).unwrap().date, 0);
        // No author line: date 0; a negative date wraps as strtoumax's does.
        let no_author = format!("tree {TREE}\ncommitter C <c@d> 9 +0000\n\n");
        assert_eq!(parse(no_author.as_bytes()).unwrap().date, 0);
        let negative = format!("tree {TREE}\nauthor A <a> 1 +0000\ncommitter C <c> -2 +0000\n\n");
        assert_eq!(
            parse(negative.as_bytes()).unwrap().date,
            2u64.wrapping_neg()
        );
        let huge = format!(
            "tree {TREE}\nauthor A <a> 1 +0000\ncommitter C <c> 99999999999999999999999 +0000\n\n"
        );
        assert_eq!(parse(huge.as_bytes()).unwrap().date, u64::MAX);
        // The committer line must not end the buffer.
        let last = format!("tree {TREE}\nauthor A <a> 1 +0000\ncommitter C <c> 3 +0000\n");
        assert_eq!(parse(last.as_bytes()).unwrap().date, 0);
        assert!(parse(b"tree 1234\n").is_err());
        let bad_parent = format!(
            "tree {TREE}\nparent {}\nauthor A <a> 1 +0000\n",
            &PARENT[..39]
        );
        assert!(parse(bad_parent.as_bytes()).is_err());
    }
}
