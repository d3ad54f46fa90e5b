//! Links to objects of the wrong kind (a commit's `tree` that is a blob, a tree entry of blob
//! mode naming a tree, a tag whose object is not of its `type`), and the words git's unpackers
//! refuse them with under `receive.fsckObjects`.
//!
//! ```text
//! target            unpacker        lines (E: the link's kind, A: the target's)
//! repository        index-pack      fatal: object T: expected type E, found A
//! repository        unpack-objects  fatal: object of unexpected type
//! pack, after L     either          error: object T is a E, not a A
//!   (L commit/tag)                  fatal: invalid blob object [T] | invalid tree | invalid commit | invalid tag
//! pack, before L    either          error: object T is a A, not a E
//!   (L commit/tag)                  error: bad tree pointer T in commit L | bad parent T in commit L |
//!                                   bad tag pointer to T in L;  fatal: invalid commit | invalid tag
//! pack, L a tree    index-pack      after: as above; before: fatal: Not all child objects of L are reachable
//! pack, L a tree    unpack-objects  error: object T is a A, not a E
//!                                   fatal: Error on reachable objects of L
//! ```
//! git words these after its table of objects in memory: the first object to name an id
//! fixes its kind, and a later one naming it with another kind is the one refused. A commit
//! or tag names its links as it is read (index-pack and unpack-objects alike); a tree names
//! its entries as it is read by index-pack, only in the walk after the pack by
//! unpack-objects. The words above are those of a pack of whole objects in which no other
//! object names the target with another kind; the `[T]` of `invalid blob object` is
//! index-pack's.

use crate::options::Unpacker;
use packd_odb::{ObjectId, ObjectKind};

/// Where a link's target was found, as git's order of reading decides its words.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TargetPlace {
    /// In the received pack, after the object linking to it.
    PackAfter,
    /// In the received pack, before the object linking to it.
    PackBefore,
    /// In the repository (not received).
    Repository,
}

/// A link whose target has another kind than the link says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KindMismatch {
    /// The linked object.
    pub target: ObjectId,
    /// The kind the link says (a commit's `tree`: tree; `parent`: commit; a tree entry's
    /// mode; a tag's `type`).
    pub expected: ObjectKind,
    /// The kind the target has.
    pub found: ObjectKind,
    /// The linking object.
    pub from: ObjectId,
    /// Its kind.
    pub from_kind: ObjectKind,
    /// Where the target is.
    pub place: TargetPlace,
}

impl std::fmt::Display for KindMismatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "object {} is a {}, not a {} (linked from {} {})",
            self.target,
            self.found.name(),
            self.expected.name(),
            self.from_kind.name(),
            self.from
        )
    }
}

impl KindMismatch {
    /// The lines git's `unpacker` dies with, relayed on side-band 2.
    pub fn remote_lines(&self, unpacker: Unpacker) -> Vec<String> {
        let (t, l) = (self.target, self.from);
        let (e, a) = (self.expected.name(), self.found.name());
        if self.place == TargetPlace::Repository {
            return vec![match unpacker {
                Unpacker::IndexPack => format!("fatal: object {t}: expected type {e}, found {a}"),
                Unpacker::UnpackObjects => "fatal: object of unexpected type".to_string(),
            }];
        }
        let tree_walked_late = self.from_kind == ObjectKind::Tree
            && (unpacker == Unpacker::UnpackObjects || self.place == TargetPlace::PackBefore);
        if tree_walked_late {
            // The tree's entries are named after the target was read: the entry is refused.
            let fatal = match unpacker {
                Unpacker::IndexPack => format!("fatal: Not all child objects of {l} are reachable"),
                Unpacker::UnpackObjects => format!("fatal: Error on reachable objects of {l}"),
            };
            return vec![format!("error: object {t} is a {a}, not a {e}"), fatal];
        }
        if self.place == TargetPlace::PackAfter {
            // The link named the target first: the target is refused when read.
            let fatal = match (self.found, unpacker) {
                (ObjectKind::Blob, Unpacker::IndexPack) => format!("invalid blob object {t}"),
                (ObjectKind::Blob, Unpacker::UnpackObjects) => "invalid blob object".to_string(),
                (kind, _) => format!("invalid {}", kind.name()),
            };
            return vec![
                format!("error: object {t} is a {e}, not a {a}"),
                format!("fatal: {fatal}"),
            ];
        }
        // The target was read first: the linking commit or tag is refused.
        let pointer = match (self.from_kind, self.expected) {
            (ObjectKind::Commit, ObjectKind::Tree) => format!("bad tree pointer {t} in commit {l}"),
            (ObjectKind::Commit, _) => format!("bad parent {t} in commit {l}"),
            _ => format!("bad tag pointer to {t} in {l}"),
        };
        vec![
            format!("error: object {t} is a {a}, not a {e}"),
            format!("error: {pointer}"),
            format!("fatal: invalid {}", self.from_kind.name()),
        ]
    }
}

/// The kind a tag's `type` line names (`None` when it names none: the fsck checks, when on,
/// refuse such a tag before its links are looked at).
pub(crate) fn tag_type(data: &[u8]) -> Option<ObjectKind> {
    let mut lines = data.split(|&b| b == b'\n');
    lines.next()?.strip_prefix(b"object ")?;
    ObjectKind::from_name(lines.next()?.strip_prefix(b"type ")?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tag_types() {
        assert_eq!(
            tag_type(b"object 4b825dc642cb6eb9a060e54bf8d69288fbee4904\ntype tree\ntag t\n"),
            Some(ObjectKind::Tree)
        );
        assert_eq!(tag_type(b"object x\ntype bush\n"), None);
        assert_eq!(tag_type(b"type blob\n"), None);
    }
}
