//! The storage layer's write operations: the small set every file packd writes goes through, so
//! that a local directory and a bucket of object storage can be written by the same code.
//!
//! ```text
//! create(name) -> NewBlob; write bytes...; publish()   an immutable blob, put only if absent:
//!                                                        packs, indexes, bitmaps, tables
//! read_versioned(name) -> (bytes, Version)              a small mutable blob and its version
//! replace(name, expected Version | absent, bytes)       compare-and-swap of a small mutable blob:
//!                                                        lists, leases, packed-refs
//! replace_read_only(name, expected, bytes)              the same, for a file git keeps 0444:
//!                                                        the commit-graph, a rewritten .bitmap
//! delete(name)                                          either kind
//! list(dir)                                             (on the read side, Storage::list)
//! ```
//!
//! On a local disk an immutable blob is written to a temporary file beside its name, synced,
//! made read-only (0444, as git makes packs and loose objects) and linked into place, which
//! fails if the name exists; the directory is synced after. A replace is git's lock-file
//! protocol: `NAME.lock` created exclusively, the current bytes compared, the new ones written
//! to the lock, synced and renamed over NAME. Git's own writers of the same files take the same
//! lock, so they and packd never overwrite each other. On object storage the same operations
//! are a PUT with `If-None-Match: *`, a GET's ETag, and a PUT with `If-Match`.

use crate::StorageError;

/// A blob being written: its bytes are appended with [`std::io::Write`] and nothing is
/// visible under its name until [`NewBlob::publish`]. Dropped unpublished, it leaves nothing.
pub trait NewBlob: std::io::Write + Send {
    /// The name the blob will have.
    fn name(&self) -> &str;

    /// Gives the blob another name before it is published: for files named by a checksum of
    /// their own bytes (`pack-<checksum>.pack`), known only once they are written. The new
    /// name must be in the same directory.
    fn rename(&mut self, name: &str) -> Result<(), StorageError>;

    /// Makes the bytes durable and visible under the name, if no blob has that name yet;
    /// otherwise [`StorageError::AlreadyExists`] and the bytes are dropped. Blobs named by
    /// their content (packs, indexes) then simply exist already.
    fn publish(self: Box<Self>) -> Result<(), StorageError>;
}

/// What a small mutable blob held when it was read, for [`crate::Storage::replace`]: a
/// digest of its bytes on a local disk, the ETag in object storage. Two versions are equal
/// only if the blob did not change in between.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Version(pub String);

/// The version of `bytes` on a local disk: their length and a 64-bit FNV-1a digest (a lock is
/// held while it is compared, so it only has to tell the bytes read from the bytes now there).
pub(crate) fn local_version(bytes: &[u8]) -> Version {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    Version(format!("{}-{h:016x}", bytes.len()))
}
