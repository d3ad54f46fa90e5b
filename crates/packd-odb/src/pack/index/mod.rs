//! Pack index files (`.idx`): the sorted object ids of one pack and where each entry starts.
//!
//! ```text
//! version 1                              version 2
//! fanout[256]   u32 BE                   magic "\377tOc", version u32 = 2
//! N x { offset u32 BE, id[20] }          fanout[256] u32 BE  (fanout[b] = ids with first byte <= b)
//! pack checksum[20]                      ids[N][20]           sorted
//! index checksum[20]                     crc32[N] u32 BE      of each entry's raw bytes in the pack
//!                                        offsets[N] u32 BE    high bit set: index into large offsets
//!                                        large offsets[M] u64 BE
//!                                        pack checksum[20], index checksum[20]
//! ```
//! The whole index is read once through the storage layer and kept; lookups are a fanout step and
//! a binary search over the ids in place, without copying them out.

mod init;
mod lookup;
pub mod pass;
pub mod resolve;
pub mod write;

pub use init::IndexVersion;

use bytes::Bytes;

/// A parsed pack index: the file's bytes and where each table starts in them.
#[derive(Debug)]
pub struct PackIndex {
    name: String,
    bytes: Bytes,
    version: IndexVersion,
    count: u32,
    /// Byte offset of the id table (v2) or of the `(offset, id)` records (v1).
    ids_at: usize,
    /// v2 only: byte offsets of the CRC, offset and large-offset tables.
    crcs_at: usize,
    offsets_at: usize,
    large_offsets_at: usize,
    large_offsets_count: usize,
    /// The file, kept for [`PackIndex::find_by_read`] when the index is large (see there).
    blob: Option<std::sync::Arc<dyn packd_storage::Blob>>,
    /// The fanout by the ids' first two bytes, built by [`PackIndex::warm_lookups`] for a
    /// process about to make many lookups (see there); `None` inside when the ids do not
    /// allow one.
    fine_fanout: std::sync::OnceLock<Option<Box<[u32]>>>,
}

impl PackIndex {
    /// The file's name, for messages.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The index format version.
    pub fn version(&self) -> IndexVersion {
        self.version
    }

    /// The number of objects in the pack.
    pub fn len(&self) -> u32 {
        self.count
    }

    /// True for an index of an empty pack.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// The checksum of the pack this index describes (the pack's own trailer).
    pub fn pack_checksum(&self) -> &[u8] {
        let end = self.bytes.len() - 20;
        &self.bytes[end - 20..end]
    }

    /// The checksum over the index itself.
    pub fn index_checksum(&self) -> &[u8] {
        &self.bytes[self.bytes.len() - 20..]
    }

    /// Drops this process's mapped pages of a large index (one kept for
    /// [`PackIndex::find_by_read`]; see [`packd_storage::Blob::release_pages`]): lookups in a
    /// long walk touch all of its id table (19 MB for 841,000 objects), which a server need not
    /// keep resident once the walk is done. Later lookups map the pages they touch again.
    pub fn release_pages(&self) {
        if let Some(blob) = &self.blob {
            blob.release_pages();
        }
    }

    /// All of the index's bytes (for verification).
    pub fn raw(&self) -> &Bytes {
        &self.bytes
    }
}
