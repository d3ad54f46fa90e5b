//! Reusing the commit bitmaps of an earlier `.bitmap` when a new one is written over objects
//! that moved (a full repack of a bitmapped pack): each old bitmap is mapped bit by bit to the
//! new positions (old bit -> id -> new bit) and stands for its commit, so that building walks
//! only the history above the commits the old file covered (git's `rebuild_existing_bitmaps`).
//!
//! ```text
//! old .bitmap   commit bitmaps, bits in the old pack's order; name-hash cache, old id order
//! ids           id of each old index position; index position of each old bit
//! mapped        per old commit still in the new objects: its bitmap in new bit positions,
//!               kept only when every one of its bits maps (its objects all came along)
//! ```
//!
//! A reused bitmap is exactly what building would compute: a commit's bitmap is the set of
//! objects it reaches, which does not depend on where they sit. The name hashes of the old
//! cache seed the new cache for objects the new walks do not reach.

use super::build::PackObjects;
use super::PackBitmap;
use crate::ewah_encode::Encoded;
use packd_odb::pack::Pack;
use packd_odb::ObjectId;
use std::collections::HashMap;

/// An earlier bitmap and the ids of the objects it numbers, kept while its pack is removed.
pub struct PriorBitmaps {
    bitmap: PackBitmap,
    /// Id of each old index position.
    ids: Vec<ObjectId>,
    /// Old index position of each old bit (pack order).
    index_of_bit: Vec<u32>,
}

impl std::fmt::Debug for PriorBitmaps {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PriorBitmaps")
            .field("bitmap", &self.bitmap.name())
            .field("objects", &self.ids.len())
            .finish()
    }
}

impl PriorBitmaps {
    /// The bitmap of `pack` (opened from `bitmap`), with the ids it needs copied out of the
    /// pack's index so that the pack itself may go.
    pub fn of_pack(bitmap: PackBitmap, pack: &Pack) -> Result<PriorBitmaps, packd_odb::Error> {
        let index = pack.index();
        let ids = (0..pack.len()).map(|i| index.id(i)).collect();
        let index_of_bit = pack.positions_in_pack_order()?.to_vec();
        Ok(PriorBitmaps {
            bitmap,
            ids,
            index_of_bit,
        })
    }

    /// The old bitmaps mapped onto `objects`, by new bit position of their commit; bitmaps
    /// that reach an object `objects` lacks are left out. Also returns the old name hashes by
    /// new bit position (0 where none).
    pub(crate) fn map_onto(
        &self,
        objects: &PackObjects<'_>,
    ) -> Result<(HashMap<u32, Encoded>, Vec<u32>), packd_odb::Error> {
        const NONE: u32 = u32::MAX;
        let new_bit: Vec<u32> = self
            .index_of_bit
            .iter()
            .map(|&i| {
                self.ids
                    .get(i as usize)
                    .and_then(|id| objects.find(id))
                    .unwrap_or(NONE)
            })
            .collect();
        let mut hashes = vec![0u32; objects.len()];
        if self.bitmap.has_name_hash_cache() {
            for (bit, &i) in self.index_of_bit.iter().enumerate() {
                let p = new_bit[bit];
                if p != NONE {
                    hashes[p as usize] = self.bitmap.name_hash(i).map_err(to_odb)?.unwrap_or(0);
                }
            }
        }
        let words = objects.len().div_ceil(64);
        let mut mapped = HashMap::new();
        for commit_pos in self.bitmap.commit_positions() {
            let Some(commit) = self.ids.get(commit_pos as usize) else {
                continue;
            };
            let Some(at) = objects.find(commit) else {
                continue;
            };
            let Some(old) = self.bitmap.commit_bitmap(commit_pos).map_err(to_odb)? else {
                continue;
            };
            let mut bits = crate::ewah::Bitmap::from_words(vec![0; words]);
            let mut whole = true;
            for b in old.iter_ones() {
                match new_bit.get(b as usize) {
                    Some(&p) if p != NONE => bits.set(p as u64),
                    _ => {
                        whole = false;
                        break;
                    }
                }
            }
            if whole {
                mapped.insert(at, Encoded::encode(&bits));
            }
        }
        Ok((mapped, hashes))
    }
}

fn to_odb(e: super::BitmapError) -> packd_odb::Error {
    packd_odb::Error::Unsupported(format!("the earlier bitmap: {e}"))
}
