//! Reading git's reachability bitmaps (`pack-*.bitmap`, version 1).
//!
//! ```text
//! "BITM"
//! version      u16 BE = 1
//! flags        u16 BE   0x1 FULL_DAG (required), 0x4 HASH_CACHE, 0x10 LOOKUP_TABLE
//! entry count  u32 BE   number of bitmapped commits
//! checksum[20]          the pack's checksum (its trailer)
//! 4 EWAH bitmaps        objects of type commit, tree, blob, tag
//! entry count x {
//!     commit position u32 BE   the commit's position in the pack's .idx (id order)
//!     xor offset      u8       0, or: XOR this bitmap with the one `xor offset` entries earlier
//!     flags           u8       0x1: reusable when rebuilding (ignored here)
//!     EWAH bitmap              objects the commit reaches (XOR-compressed as above)
//! }
//! lookup table (LOOKUP_TABLE)  entry count x {
//!     commit position u32 BE   ascending
//!     offset          u64 BE   where the entry (its commit position field) starts in this file
//!     xor row         u32 BE   row of this table whose bitmap to XOR with, or 0xffffffff
//! }
//! name-hash cache (HASH_CACHE) object count x u32 BE, in index (id) order
//! checksum[20]                 SHA-1 of everything above
//! ```
//!
//! **Bits are in pack order**: bit `i` of every bitmap here stands for the `i`th object of the pack
//! sorted by offset, *not* the `i`th object of the `.idx` (which is in id order). A `.rev` file
//! ([`crate::rev_index`]) or `Pack::positions_in_pack_order` maps pack order to index positions;
//! [`PackBitmap::object_ids`] does that for a whole bitmap. Commit positions in the entries and
//! lookup table, on the other hand, *are* index positions.
//!
//! The same layout serves a multi-pack-index bitmap (`multi-pack-index-<checksum>.bitmap`): open it
//! with the multi-pack-index's checksum and object count. Its bits are then in the
//! multi-pack-index's pseudo-pack order (given by its `.rev`), and commit positions are positions
//! in the multi-pack-index.
//!
//! Loading is lazy where the file allows it. With a lookup table, [`PackBitmap::open`] reads only
//! the header, the four type bitmaps and the table; [`PackBitmap::commit_bitmap`] then reads and
//! decodes just the entries on one XOR chain. Without one, `open` reads the entries once to find
//! where each starts, but decodes none of them until asked.

mod build;
mod error;
pub mod extend;
mod open;
pub mod reuse;
pub mod select;
pub mod write;

pub use build::{name_hash, Unbitmappable};

pub use error::BitmapError;

use crate::ewah::{self, Bitmap};
use bytes::Bytes;
use packd_odb::pack::Pack;
use packd_odb::{ObjectId, ObjectKind};
use packd_storage::{Blob, Storage, StorageError};
use std::sync::{Arc, OnceLock};

/// Header flag: every object's reachable objects are in the same pack. git requires it.
pub const BITMAP_OPT_FULL_DAG: u16 = 0x1;
/// Header flag: a name-hash cache (one u32 per object, index order) precedes the trailer.
pub const BITMAP_OPT_HASH_CACHE: u16 = 0x4;
/// Header flag: a commit lookup table precedes the name-hash cache.
pub const BITMAP_OPT_LOOKUP_TABLE: u16 = 0x10;

/// The `xor row` of a lookup-table row whose bitmap is stored whole.
const NO_XOR: u32 = u32::MAX;

/// Where one bitmapped commit's entry is and what it is XORed with.
#[derive(Debug, Clone, Copy)]
struct Entry {
    /// The commit's index position.
    commit_pos: u32,
    /// Offset of the entry (its commit position field) in the file.
    offset: u64,
    /// An upper bound for the entry's end: the next entry's offset, or the end of the entries.
    end: u64,
    /// Row (in `PackBitmap::entries`) of the bitmap this one is XORed with, or [`NO_XOR`]. Always
    /// an entry at a smaller offset, so chains end.
    xor_row: u32,
}

/// An opened `.bitmap`: type bitmaps in memory, commit bitmaps decoded on request.
#[derive(Debug)]
pub struct PackBitmap {
    blob: Arc<dyn Blob>,
    flags: u16,
    object_count: u32,
    /// Commit, tree, blob, tag.
    types: [Bitmap; 4],
    /// One row per bitmapped commit: lookup-table order when there is a table, file order if not.
    entries: Vec<Entry>,
    /// `(commit position, row)` sorted by commit position, for lookups.
    by_commit: Vec<(u32, u32)>,
    /// Without a lookup table: the entries' bytes, read once while scanning, and where they start.
    scanned: Option<(u64, Bytes)>,
    /// Whether the lookup table was used to find the entries.
    used_table: bool,
    /// Offset of the name-hash cache, if the file has one.
    hash_cache_at: Option<u64>,
    /// The name-hash cache, read on first use.
    hash_cache: OnceLock<Bytes>,
    /// Shared bases already resolved through their XOR chains, by row: chains share their
    /// bases, and git's writer makes them long, so a query taking many bitmaps would otherwise
    /// decode the same bases again and again. Bounded by [`RESOLVED_BUDGET`] bytes.
    resolved: parking_lot::Mutex<Resolved>,
    /// By row: whether two or more bitmaps are XORed with this one (only those are kept
    /// resolved; keeping every link of a long chain costs more than it saves).
    shared: Vec<bool>,
}

/// Bytes of resolved bitmaps kept per bitmap file (see [`PackBitmap`]): beyond it, bitmaps are
/// still resolved, just not kept.
pub const RESOLVED_BUDGET: usize = 64 << 20;

/// Resolved bitmaps by row, and their size.
#[derive(Debug, Default)]
struct Resolved {
    rows: std::collections::HashMap<u32, Arc<Bitmap>>,
    bytes: usize,
    /// By row: whether a chain passed through it already (sized on first use).
    passed: Vec<bool>,
}

/// The last 20 bytes of the bitmap file `blob`: its checksum, which names this version of the
/// file (see [`PackBitmap::file_checksum`]). `None` when the file is shorter.
pub(crate) fn trailing_checksum(blob: &dyn Blob) -> Result<Option<[u8; 20]>, StorageError> {
    let len = blob.len();
    let Some(start) = len.checked_sub(open::TRAILER) else {
        return Ok(None);
    };
    let bytes = blob.read_copy(start..len)?;
    Ok(bytes[..].try_into().ok())
}

impl PackBitmap {
    /// Opens the bitmap in `blob` for a pack (or multi-pack-index) of `object_count` objects whose
    /// checksum is `pack_checksum`, using the lookup table if the file has one.
    ///
    /// A bitmap recording another checksum is [`BitmapError::ChecksumMismatch`].
    pub fn open(
        blob: Arc<dyn Blob>,
        pack_checksum: &[u8],
        object_count: u32,
    ) -> Result<PackBitmap, BitmapError> {
        open::open(blob, pack_checksum, object_count, true)
    }

    /// Like [`PackBitmap::open`], but with `use_lookup_table` false a lookup table is ignored and
    /// the entries are scanned, as for a file without one (for comparisons and measurements).
    pub fn open_with(
        blob: Arc<dyn Blob>,
        pack_checksum: &[u8],
        object_count: u32,
        use_lookup_table: bool,
    ) -> Result<PackBitmap, BitmapError> {
        open::open(blob, pack_checksum, object_count, use_lookup_table)
    }

    /// Opens the `.bitmap` beside `pack` in `storage` (the storage the pack was opened from), or
    /// `None` when there is none.
    pub fn open_for_pack(
        storage: &dyn Storage,
        pack: &Pack,
    ) -> Result<Option<PackBitmap>, BitmapError> {
        let Some(name) = bitmap_name(pack.name()) else {
            return Ok(None);
        };
        let blob = match storage.open(&name) {
            Ok(b) => b,
            Err(e) if e.is_not_found() => return Ok(None),
            Err(e) => return Err(e.into()),
        };
        PackBitmap::open(blob, pack.index().pack_checksum(), pack.len()).map(Some)
    }

    /// The file's name, for messages.
    pub fn name(&self) -> &str {
        self.blob.name()
    }

    /// The header flags (`BITMAP_OPT_*`).
    pub fn flags(&self) -> u16 {
        self.flags
    }

    /// The number of objects the bitmaps describe (the pack's object count).
    pub fn object_count(&self) -> u32 {
        self.object_count
    }

    /// The number of bitmapped commits.
    pub fn entry_count(&self) -> u32 {
        self.entries.len() as u32
    }

    /// Whether the file carries a commit lookup table (which makes opening cheap).
    pub fn has_lookup_table(&self) -> bool {
        self.flags & BITMAP_OPT_LOOKUP_TABLE != 0
    }

    /// Whether this reader located the entries through the lookup table (rather than a scan).
    pub fn used_lookup_table(&self) -> bool {
        self.used_table
    }

    /// Whether the file carries a name-hash cache.
    pub fn has_name_hash_cache(&self) -> bool {
        self.hash_cache_at.is_some()
    }

    /// The objects of one kind, as bits in pack order.
    pub fn type_bitmap(&self, kind: ObjectKind) -> &Bitmap {
        &self.types[match kind {
            ObjectKind::Commit => 0,
            ObjectKind::Tree => 1,
            ObjectKind::Blob => 2,
            ObjectKind::Tag => 3,
        }]
    }

    /// Index positions of the bitmapped commits, ascending.
    pub fn commit_positions(&self) -> impl Iterator<Item = u32> + '_ {
        self.by_commit.iter().map(|&(pos, _)| pos)
    }

    /// Whether the commit at index position `commit_pos` has a bitmap.
    pub fn contains(&self, commit_pos: u32) -> bool {
        self.row_of(commit_pos).is_some()
    }

    fn row_of(&self, commit_pos: u32) -> Option<u32> {
        let i = self
            .by_commit
            .binary_search_by_key(&commit_pos, |&(p, _)| p)
            .ok()?;
        Some(self.by_commit[i].1)
    }

    /// Everything the commit at index position `commit_pos` reaches, as bits in pack order, or
    /// `None` when that commit has no bitmap. The bitmap is fully resolved (XORed down its
    /// chain); only the entries on the chain are read and decoded.
    pub fn commit_bitmap(&self, commit_pos: u32) -> Result<Option<Bitmap>, BitmapError> {
        match self.row_of(commit_pos) {
            None => Ok(None),
            Some(row) => open::resolve(self, row).map(Some),
        }
    }

    /// Everything the commits at index positions `commit_pos` reach, together, as bits in pack
    /// order. For many commits (a mirror clone whose refs all have bitmaps): every entry on
    /// their XOR chains is decoded once, and only a few resolved bitmaps are held at once (see
    /// `open::union_of`). `None` when one of the commits has no bitmap, when the file's XOR
    /// chains would need more than [`RESOLVED_BUDGET`] of bases held at once (then take the
    /// bitmaps one by one), or when `cancel` is set.
    pub fn union_of(
        &self,
        commit_pos: &[u32],
        cancel: &std::sync::atomic::AtomicBool,
    ) -> Result<Option<Bitmap>, BitmapError> {
        let mut rows = Vec::with_capacity(commit_pos.len());
        for &pos in commit_pos {
            match self.row_of(pos) {
                Some(row) => rows.push(row),
                None => return Ok(None),
            }
        }
        open::union_of(self, &rows, cancel)
    }

    /// [`PackBitmap::commit_bitmap`] for a commit named by id, looked up in `pack`'s index.
    pub fn commit_bitmap_for(
        &self,
        pack: &Pack,
        commit: &ObjectId,
    ) -> Result<Option<Bitmap>, BitmapError> {
        match pack.index().find(commit) {
            None => Ok(None),
            Some(pos) => self.commit_bitmap(pos),
        }
    }

    /// The name hash of the object at **index position** `index_pos` (git's `pack_name_hash` of
    /// the path it was packed under; 0 for none), or `None` without a name-hash cache or for a
    /// position past the objects. The cache is read whole on first use.
    ///
    /// Unlike the bits, the cache is in `.idx` (id) order: git writes it from the list of objects
    /// it has just sorted for the index, and reads it by index position.
    pub fn name_hash(&self, index_pos: u32) -> Result<Option<u32>, BitmapError> {
        if index_pos >= self.object_count {
            return Ok(None);
        }
        let Some(cache) = self.name_hashes()? else {
            return Ok(None);
        };
        let i = 4 * index_pos as usize;
        Ok(Some(u32::from_be_bytes(
            cache[i..i + 4].try_into().expect("4 bytes"),
        )))
    }

    /// The name-hash cache: a big-endian `u32` for each object, in index (id) order, read whole
    /// on first use; `None` without one.
    pub fn name_hashes(&self) -> Result<Option<&[u8]>, BitmapError> {
        let Some(at) = self.hash_cache_at else {
            return Ok(None);
        };
        if let Some(c) = self.hash_cache.get() {
            return Ok(Some(c));
        }
        let bytes = self.blob.read(at..at + 4 * self.object_count as u64)?;
        let _ = self.hash_cache.set(bytes);
        Ok(Some(self.hash_cache.get().expect("just set")))
    }

    /// The file's trailing SHA-1, which names this version of the bitmap: another bitmap of
    /// the same pack (other commits chosen) has another.
    pub fn file_checksum(&self) -> Result<[u8; 20], BitmapError> {
        trailing_checksum(self.blob.as_ref())?
            .ok_or_else(|| BitmapError::corrupt(self.blob.name(), 0, "shorter than its checksum"))
    }

    /// Checks the file's trailing SHA-1 against its content (reads the whole file).
    pub fn verify_checksum(&self) -> Result<(), BitmapError> {
        let len = self.blob.len();
        let all = self.blob.read_all()?;
        let digest = sha1dc::digest(&all[..len as usize - 20]).map_err(|_| {
            BitmapError::corrupt(self.name(), 0, "carries a SHA-1 collision attack")
        })?;
        if digest.as_ref() != &all[len as usize - 20..] {
            return Err(BitmapError::corrupt(
                self.name(),
                len - 20,
                "the file checksum does not match its content",
            ));
        }
        Ok(())
    }

    /// The ids of the objects whose bits are set, in pack order, for a pack bitmap.
    ///
    /// Maps bit `i` to the `i`th object of `pack` by offset, then to its id through the index.
    pub fn object_ids(bitmap: &Bitmap, pack: &Pack) -> packd_odb::Result<Vec<ObjectId>> {
        let order = pack.positions_in_pack_order()?;
        let mut out = Vec::with_capacity(bitmap.count_ones() as usize);
        for bit in bitmap.iter_ones() {
            let pos = usize::try_from(bit)
                .ok()
                .and_then(|b| order.get(b))
                .ok_or_else(|| {
                    packd_odb::Error::corrupt(
                        pack.name(),
                        0,
                        format!("a bitmap sets bit {bit}, past the {} objects", order.len()),
                    )
                })?;
            out.push(pack.index().id(*pos));
        }
        Ok(out)
    }
}

/// The `.bitmap` name for a pack's `.pack` name (`pack/pack-1234.pack` -> `pack/pack-1234.bitmap`).
pub fn bitmap_name(pack_name: &str) -> Option<String> {
    pack_name
        .strip_suffix(".pack")
        .map(|stem| format!("{stem}.bitmap"))
}

/// Decodes one EWAH stream found at `offset` in `file`, naming it `what` in errors.
fn decode_at(
    file: &str,
    offset: u64,
    bytes: &[u8],
    max_bits: u32,
    what: &dyn Fn() -> String,
) -> Result<(Bitmap, usize), BitmapError> {
    ewah::decode(bytes, max_bits as u64).map_err(|source| BitmapError::Ewah {
        file: file.to_string(),
        offset,
        what: what(),
        source,
    })
}
