//! The four kinds of git object and what a read of one returns.

use bytes::Bytes;

/// The kind of a git object, numbered as in a pack entry header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ObjectKind {
    /// A commit: tree, parents, author, committer, message.
    Commit = 1,
    /// A tree: a directory listing.
    Tree = 2,
    /// A blob: file content.
    Blob = 3,
    /// An annotated tag.
    Tag = 4,
}

impl ObjectKind {
    /// The kind for a pack entry type number, if it is one of the four object kinds.
    pub fn from_pack_type(t: u8) -> Option<ObjectKind> {
        match t {
            1 => Some(ObjectKind::Commit),
            2 => Some(ObjectKind::Tree),
            3 => Some(ObjectKind::Blob),
            4 => Some(ObjectKind::Tag),
            _ => None,
        }
    }

    /// The pack entry type number of a whole object of this kind (its discriminant).
    pub fn pack_type(self) -> u8 {
        self as u8
    }

    /// The name git prints and hashes (`commit`, `tree`, `blob`, `tag`).
    pub fn name(self) -> &'static str {
        match self {
            ObjectKind::Commit => "commit",
            ObjectKind::Tree => "tree",
            ObjectKind::Blob => "blob",
            ObjectKind::Tag => "tag",
        }
    }

    /// The kind for a name as git spells it.
    pub fn from_name(name: &[u8]) -> Option<ObjectKind> {
        match name {
            b"commit" => Some(ObjectKind::Commit),
            b"tree" => Some(ObjectKind::Tree),
            b"blob" => Some(ObjectKind::Blob),
            b"tag" => Some(ObjectKind::Tag),
            _ => None,
        }
    }
}

/// An object's kind and size, known without inflating its content.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ObjectHeader {
    /// The object's kind.
    pub kind: ObjectKind,
    /// The size of its content in bytes.
    pub size: u64,
}

/// A whole object: its kind and its content.
#[derive(Debug, Clone)]
pub struct Object {
    /// The object's kind.
    pub kind: ObjectKind,
    /// The content (without git's `"<kind> <size>\0"` header).
    pub data: Bytes,
}
