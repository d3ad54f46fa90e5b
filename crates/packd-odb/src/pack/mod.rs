//! One pack: its data file, its index, and decoding objects out of it.
//!
//! Folders are the format's nouns (`data/`, `index/`, `multi_index/`); the files here are verbs on a
//! whole pack: `init` opens one, `decode` reads objects out of it, `verify` checks all of it.

pub mod data;
pub mod decode;
pub mod index;
pub mod ingest;
pub mod init;
pub mod multi_index;
pub mod order;
mod rank;
mod sorted_ids;
pub mod verify;

use crate::hash::HashKind;
use index::PackIndex;
use packd_storage::Blob;
use std::sync::{Arc, OnceLock};

/// An opened pack: data file and index, plus the offsets sorted for finding entry extents.
#[derive(Debug)]
pub struct Pack {
    /// A number unique among the packs of one object database, for cache keys.
    pub(crate) id: u32,
    /// The `.pack` name, e.g. `pack/pack-1234.pack`.
    name: String,
    data: Arc<dyn Blob>,
    index: PackIndex,
    hash: HashKind,
    /// The entries in offset order, built on first use.
    reverse: OnceLock<ReverseIndex>,
    /// Pack positions without a full sort, built on first use when `reverse` is not there yet.
    rank: OnceLock<Option<rank::RankIndex>>,
    /// The entries in pack order from the pack's `.rev`, when a caller gave it (see
    /// [`Pack::set_pack_order`]): while it serves, `rank` is not built.
    order: OnceLock<order::Order>,
    /// Lookups of entries one by one through `order` or `rank` (see `Pack::take_one_by_one`):
    /// past a share of the pack's entries (`init::ONE_BY_ONE_SHARE`), sorting every offset costs
    /// less than going on.
    one_by_one: std::sync::atomic::AtomicU32,
    /// The index's CRC-32s in pack order (`None`: a v1 index has none), built on first use.
    crcs: OnceLock<Option<Vec<u32>>>,
}

/// A pack's entries in offset order: what a `.rev` file holds, built in memory.
#[derive(Debug)]
pub(crate) struct ReverseIndex {
    /// Entry offsets ascending, then the trailer's offset: entry `i` ends at `offsets[i + 1]`.
    pub(crate) offsets: Vec<u64>,
    /// Index position of the entry at `offsets[i]`.
    pub(crate) positions: Vec<u32>,
    /// Index entries whose offset is outside the entries or taken by another: (offset, position).
    pub(crate) misplaced: Vec<(u64, u32)>,
}

impl Pack {
    /// The pack's data file name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The data file's full name (path), for messages.
    pub fn data_name(&self) -> &str {
        self.data.name()
    }

    /// The pack's index.
    pub fn index(&self) -> &PackIndex {
        &self.index
    }

    /// The number of objects.
    pub fn len(&self) -> u32 {
        self.index.len()
    }

    /// True for a pack without objects.
    pub fn is_empty(&self) -> bool {
        self.index.is_empty()
    }

    /// The data file's size in bytes.
    pub fn data_len(&self) -> u64 {
        self.data.len()
    }

    /// Where the entries end and the trailer (the pack's checksum) starts. (A pack is opened
    /// only when its file holds at least a header and a trailer.)
    pub fn entries_end(&self) -> u64 {
        self.data.len() - 20
    }

    /// The data file, for reading.
    pub fn data(&self) -> &Arc<dyn Blob> {
        &self.data
    }
}
