//! Reading entries of a pack index: by position, by id, by abbreviated id.

use super::{IndexVersion, PackIndex};
use crate::hash::{ObjectId, Prefix};
use crate::pack::sorted_ids::SortedIds;
use crate::{Error, Result};

const HASH: usize = 20;

impl SortedIds for PackIndex {
    fn fanout(&self, byte: usize) -> u32 {
        let at = match self.version {
            IndexVersion::V1 => 0,
            IndexVersion::V2 => 8,
        } + 4 * byte;
        u32::from_be_bytes(self.bytes[at..at + 4].try_into().unwrap()).min(self.count)
    }

    fn id_bytes(&self, i: u32) -> &[u8] {
        let i = i as usize;
        let at = match self.version {
            IndexVersion::V1 => self.ids_at + i * (4 + HASH) + 4,
            IndexVersion::V2 => self.ids_at + i * HASH,
        };
        &self.bytes[at..at + HASH]
    }
}

impl PackIndex {
    /// The id of the `i`th object in id order.
    pub fn id(&self, i: u32) -> ObjectId {
        ObjectId::from_bytes(self.id_bytes(i)).expect("index entries are hash-sized")
    }

    /// The CRC32 of the `i`th object's raw bytes in the pack (v2 only).
    pub fn crc32(&self, i: u32) -> Option<u32> {
        match self.version {
            IndexVersion::V1 => None,
            IndexVersion::V2 => {
                let at = self.crcs_at + 4 * i as usize;
                Some(u32::from_be_bytes(
                    self.bytes[at..at + 4].try_into().unwrap(),
                ))
            }
        }
    }

    /// Where the `i`th object's entry starts in the pack.
    pub fn offset(&self, i: u32) -> Result<u64> {
        let i = i as usize;
        match self.version {
            IndexVersion::V1 => {
                let at = self.ids_at + i * (4 + HASH);
                Ok(u32::from_be_bytes(self.bytes[at..at + 4].try_into().unwrap()) as u64)
            }
            IndexVersion::V2 => {
                let at = self.offsets_at + 4 * i;
                let raw = u32::from_be_bytes(self.bytes[at..at + 4].try_into().unwrap());
                if raw & 0x8000_0000 == 0 {
                    return Ok(raw as u64);
                }
                let large = (raw & 0x7fff_ffff) as usize;
                if large >= self.large_offsets_count {
                    return Err(Error::corrupt(
                        &self.name,
                        at as u64,
                        format!(
                            "offset entry {i} points at large offset {large}, but there are only {}",
                            self.large_offsets_count
                        ),
                    ));
                }
                let at = self.large_offsets_at + 8 * large;
                Ok(u64::from_be_bytes(
                    self.bytes[at..at + 8].try_into().unwrap(),
                ))
            }
        }
    }

    /// The v2 table of 4-byte offsets (big-endian, one per object, id order), for passes over
    /// every object; `None` for a v1 index.
    pub(crate) fn offset_table(&self) -> Option<&[u8]> {
        match self.version {
            IndexVersion::V1 => None,
            IndexVersion::V2 => {
                Some(&self.bytes[self.offsets_at..self.offsets_at + 4 * self.count as usize])
            }
        }
    }

    /// The position of `id` in id order, if the pack has it.
    pub fn find(&self, id: &ObjectId) -> Option<u32> {
        self.find_id(id)
    }

    /// Ids that start with `prefix`, appended to `out` until it holds `limit`.
    pub fn find_prefix(&self, prefix: &Prefix, limit: usize, out: &mut Vec<ObjectId>) {
        self.find_ids_with_prefix(prefix, limit, out)
    }
}
