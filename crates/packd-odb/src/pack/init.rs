//! Opening a pack: reading its index and checking that data file and index belong together.

use super::index::PackIndex;
use super::{Pack, ReverseIndex};
use crate::hash::HashKind;
use crate::{Error, Result};
use packd_storage::Storage;
use std::sync::OnceLock;

impl Pack {
    /// Opens the pack whose index is `idx_name` (e.g. `pack/pack-1234.idx`) in `storage`.
    ///
    /// Reads the whole index and the data file's 12-byte header and 20-byte trailer: the object
    /// counts and the pack checksum must agree, or this is not the index of this pack.
    pub fn open(storage: &dyn Storage, idx_name: &str, id: u32, hash: HashKind) -> Result<Pack> {
        let stem = idx_name.strip_suffix(".idx").ok_or_else(|| {
            Error::BadName(format!("{idx_name}: a pack index name must end in .idx"))
        })?;
        let pack_name = format!("{stem}.pack");
        let idx_blob = storage.open(idx_name)?;
        let index = PackIndex::from_bytes(idx_blob.name(), idx_blob.read_all()?)?;
        let data = storage.open(&pack_name)?;
        let file = data.name().to_string();
        if data.len() < 12 + 20 {
            return Err(Error::corrupt(
                &file,
                0,
                format!("pack is truncated ({} bytes)", data.len()),
            ));
        }
        let header = data.read(0..12)?;
        if &header[..4] != b"PACK" {
            return Err(Error::corrupt(&file, 0, "not a pack file (bad signature)"));
        }
        let version = u32::from_be_bytes(header[4..8].try_into().unwrap());
        if version != 2 && version != 3 {
            return Err(Error::corrupt(
                &file,
                4,
                format!("unsupported pack version {version}"),
            ));
        }
        let count = u32::from_be_bytes(header[8..12].try_into().unwrap());
        if count != index.len() {
            return Err(Error::corrupt(
                &file,
                8,
                format!(
                    "pack holds {count} objects but its index {} lists {}",
                    index.name(),
                    index.len()
                ),
            ));
        }
        let trailer = data.read(data.len() - 20..data.len())?;
        if trailer[..] != *index.pack_checksum() {
            return Err(Error::corrupt(
                &file,
                data.len() - 20,
                format!(
                    "pack checksum does not match the one recorded in {}",
                    index.name()
                ),
            ));
        }
        Ok(Pack {
            id,
            name: pack_name,
            data,
            index,
            hash,
            reverse: OnceLock::new(),
        })
    }
}

impl Pack {
    /// The pack's entries in offset order: every entry offset ascending, then the trailer's
    /// offset, and beside each offset the entry's position in the index.
    ///
    /// Index entries placed outside the pack's entries, or at an offset another entry already
    /// has, are set aside in `misplaced`: reading them fails, `verify` reports them, and the rest
    /// of the pack stays readable, as with git.
    pub(crate) fn reverse_index(&self) -> Result<&ReverseIndex> {
        if let Some(v) = self.reverse.get() {
            return Ok(v);
        }
        let n = self.index.len();
        let trailer = self.data.len() - 20;
        let mut pairs = Vec::with_capacity(n as usize);
        let mut misplaced = Vec::new();
        for i in 0..n {
            let offset = self.index.offset(i)?;
            if (12..trailer).contains(&offset) {
                pairs.push((offset, i));
            } else {
                misplaced.push((offset, i));
            }
        }
        pairs.sort_unstable();
        let mut offsets = Vec::with_capacity(pairs.len() + 1);
        let mut positions = Vec::with_capacity(pairs.len());
        for (offset, i) in pairs {
            if offsets.last() == Some(&offset) {
                misplaced.push((offset, i));
            } else {
                offsets.push(offset);
                positions.push(i);
            }
        }
        offsets.push(trailer);
        Ok(self.reverse.get_or_init(|| ReverseIndex {
            offsets,
            positions,
            misplaced,
        }))
    }

    /// Every entry offset ascending, then the trailer's offset.
    pub(crate) fn sorted_offsets(&self) -> Result<&[u64]> {
        Ok(&self.reverse_index()?.offsets)
    }

    /// The index position of the entry at `offset`.
    pub fn position_at(&self, offset: u64) -> Result<u32> {
        let rev = self.reverse_index()?;
        match rev.offsets[..rev.positions.len()].binary_search(&offset) {
            Ok(i) => Ok(rev.positions[i]),
            Err(_) => Err(Error::corrupt(
                self.data.name(),
                offset,
                "no object of the index starts at this offset",
            )),
        }
    }

    /// Index positions of all entries in pack (offset) order.
    pub fn positions_in_pack_order(&self) -> Result<&[u32]> {
        Ok(&self.reverse_index()?.positions)
    }

    /// Where the entry starting at `offset` ends (the next entry's offset, or the trailer).
    pub(crate) fn entry_end(&self, offset: u64) -> Result<u64> {
        let offsets = self.sorted_offsets()?;
        match offsets.binary_search(&offset) {
            Ok(i) if i + 1 < offsets.len() => Ok(offsets[i + 1]),
            _ if offset < 12 || offset >= self.data.len() - 20 => Err(Error::corrupt(
                self.index.name(),
                0,
                format!(
                    "places an object at offset {offset}, outside the entries of {} (12..{})",
                    self.data.name(),
                    self.data.len() - 20
                ),
            )),
            _ => Err(Error::corrupt(
                self.data.name(),
                offset,
                "no object of the index starts at this offset",
            )),
        }
    }
}
