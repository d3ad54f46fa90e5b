//! Parsing the parts of commits, trees and tags that walks, revision syntax and pretty-printing
//! need. One parser, so that every caller agrees on what a malformed object is.
//!
//! ```text
//! commit  "tree <hex>\n" ("parent <hex>\n")* "author ...\n" "committer <who> <secs> <tz>\n" ...
//! tree    (<octal mode> SP <name> NUL <20-byte id>)*
//! tag     "object <hex>\ntype <kind>\n..."
//! ```

use crate::{Error, ObjectId, Result};

fn bad(id: &ObjectId, what: &str) -> Error {
    Error::BadName(format!("object {id}: {what}"))
}

/// A commit's links and date: what walks and revision parsing need of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommitInfo {
    /// The commit's root tree.
    pub tree: ObjectId,
    /// Its parents, in order.
    pub parents: Vec<ObjectId>,
    /// The committer time, seconds since the epoch.
    pub time: i64,
}

/// Parses a commit's header (tree, parents, committer time); `id` names it in errors.
pub fn parse_commit(id: &ObjectId, data: &[u8]) -> Result<CommitInfo> {
    let mut tree = None;
    let mut parents = Vec::new();
    let mut time = 0;
    for line in data.split(|&b| b == b'\n') {
        if line.is_empty() {
            break;
        }
        if let Some(rest) = line.strip_prefix(b"tree ") {
            tree = Some(
                ObjectId::from_hex_bytes(rest)
                    .ok_or_else(|| bad(id, "the commit's tree line is malformed"))?,
            );
        } else if let Some(rest) = line.strip_prefix(b"parent ") {
            parents.push(
                ObjectId::from_hex_bytes(rest)
                    .ok_or_else(|| bad(id, "a parent line is malformed"))?,
            );
        } else if let Some(rest) = line.strip_prefix(b"committer ") {
            // "... <email> <seconds> <tz>": the seconds are the second-to-last field.
            let mut fields = rest.rsplit(|&b| b == b' ');
            fields.next();
            time = fields
                .next()
                .and_then(|t| std::str::from_utf8(t).ok())
                .and_then(|t| t.parse().ok())
                .unwrap_or(0);
        }
    }
    Ok(CommitInfo {
        tree: tree.ok_or_else(|| bad(id, "the commit has no tree"))?,
        parents,
        time,
    })
}

/// The entries of a tree as (mode, name, id), in stored order; a malformed tree yields one error
/// and ends.
pub fn tree_entries<'a>(
    id: &'a ObjectId,
    data: &'a [u8],
) -> impl Iterator<Item = Result<(u32, &'a [u8], ObjectId)>> + 'a {
    let mut rest = data;
    std::iter::from_fn(move || {
        if rest.is_empty() {
            return None;
        }
        let parsed = (|| {
            let space = rest.iter().position(|&b| b == b' ')?;
            let mode = octal(&rest[..space])?;
            let nul = space + rest[space..].iter().position(|&b| b == 0)?;
            let entry = ObjectId::from_bytes(rest.get(nul + 1..nul + 21)?)?;
            let name = &rest[space + 1..nul];
            rest = &rest[nul + 21..];
            Some((mode, name, entry))
        })();
        match parsed {
            Some(e) => Some(Ok(e)),
            None => {
                rest = &[];
                Some(Err(bad(id, "the tree is malformed")))
            }
        }
    })
}

/// An octal tree-entry mode (1 to 7 digits); the inner loop of every tree walk, so parsed here
/// rather than through `str`.
fn octal(digits: &[u8]) -> Option<u32> {
    if digits.is_empty() || digits.len() > 7 {
        return None;
    }
    digits.iter().try_fold(0u32, |mode, &d| match d {
        b'0'..=b'7' => Some(mode << 3 | (d - b'0') as u32),
        _ => None,
    })
}

/// The object a tag points at.
pub fn tag_target(id: &ObjectId, data: &[u8]) -> Result<ObjectId> {
    let first = data.split(|&b| b == b'\n').next().unwrap_or(b"");
    first
        .strip_prefix(b"object ")
        .and_then(ObjectId::from_hex_bytes)
        .ok_or_else(|| bad(id, "the tag names no object"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_commits_and_trees() {
        let id = ObjectId::NULL;
        let commit = parse_commit(
            &id,
            b"tree 4b825dc642cb6eb9a060e54bf8d69288fbee4904\nparent ce013625030ba8dba906f756967f9e9ca394464a\nauthor A <a@b> 1 +0000\ncommitter C <c@d> 1700000000 +0100\n\nmsg\n",
        )
        .unwrap();
        assert_eq!(commit.parents.len(), 1);
        assert_eq!(commit.time, 1_700_000_000);
        assert!(parse_commit(&id, b"parent x\n").is_err());
        let mut tree = b"100644 a\0".to_vec();
        tree.extend_from_slice(&[1u8; 20]);
        tree.extend_from_slice(b"40000 d\0");
        tree.extend_from_slice(&[2u8; 20]);
        let entries: Vec<_> = tree_entries(&id, &tree).map(|e| e.unwrap()).collect();
        assert_eq!(entries.len(), 2);
        assert_eq!((entries[1].0, entries[1].1), (0o40000, &b"d"[..]));
        assert!(tree_entries(&id, &tree[..30]).any(|e| e.is_err()));
    }

    #[test]
    fn reads_tag_targets() {
        let id = ObjectId::NULL;
        let target = tag_target(
            &id,
            b"object ce013625030ba8dba906f756967f9e9ca394464a\ntype blob\n",
        )
        .unwrap();
        assert_eq!(target.to_hex(), "ce013625030ba8dba906f756967f9e9ca394464a");
        assert!(tag_target(&id, b"type blob\n").is_err());
    }
}
