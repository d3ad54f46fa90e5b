//! An object's pack position (the rank of its offset among all entry offsets) without sorting
//! every offset first.
//!
//! Bitmaps number objects by pack position. A `.rev` file gives it directly; without one, git
//! sorts every offset of the pack before its first bitmap query (849k offsets for git/git). A
//! query whose fill-in walk touches a few hundred objects needs only their ranks, so this index
//! does one counting pass and one scatter pass into buckets of a few hundred offsets each, by offset
//! range; an object's rank is then the number of entries in earlier buckets plus a scan of its
//! own bucket.
//!
//! ```text
//! starts[b]   first slot of bucket b in `keys` (buckets in offset order), starts[B] = len
//! keys[i]     entry offsets within their bucket (the low `shift` bits), unordered
//! bucket(o)   o >> shift, with shift <= 16 so that a key fits in 16 bits
//! rank(o)     starts[bucket(o)] + |{ k in bucket(o) : k < low(o) }|
//! ```
//!
//! Keys of 16 bits halve the memory the build writes (and faults in) and the bytes a lookup
//! scans.
//!
//! Only for packs under 4 GiB whose index places every entry inside the pack's entries; others
//! use the exact reverse index.

use super::index::PackIndex;
use crate::Result;

/// Offsets per bucket, on average.
const PER_BUCKET: u64 = 256;

/// See the module documentation.
#[derive(Debug)]
pub(crate) struct RankIndex {
    shift: u32,
    starts: Vec<u32>,
    keys: Vec<u16>,
}

impl RankIndex {
    /// Builds the index for a pack whose entries end at `trailer`, or `None` when this pack needs
    /// the exact reverse index (too large, or an entry placed outside the entries).
    pub(crate) fn build(index: &PackIndex, trailer: u64) -> Result<Option<RankIndex>> {
        let n = index.len() as u64;
        if trailer > u32::MAX as u64 || n == 0 {
            return Ok(None);
        }
        let Some(table) = index.offset_table() else {
            return Ok(None);
        };
        let buckets_wanted = (n / PER_BUCKET).max(1);
        // Smallest shift giving at most `buckets_wanted` buckets over [0, trailer).
        let mut shift = 0;
        while (trailer >> shift) + 1 > buckets_wanted && shift < 16 {
            shift += 1;
        }
        let low = (1u32 << shift) - 1;
        let buckets = ((trailer >> shift) + 1) as usize;
        // Two passes over the index's offset table: count per bucket, then place.
        let mut starts = vec![0u32; buckets + 1];
        for raw in table.chunks_exact(4) {
            let o = u32::from_be_bytes(raw.try_into().expect("4 bytes"));
            if o & 0x8000_0000 != 0 || !(12..trailer).contains(&(o as u64)) {
                return Ok(None);
            }
            starts[(o >> shift) as usize + 1] += 1;
        }
        for b in 0..buckets {
            starts[b + 1] += starts[b];
        }
        let mut fill = starts.clone();
        let mut keys = vec![0u16; n as usize];
        for raw in table.chunks_exact(4) {
            let o = u32::from_be_bytes(raw.try_into().expect("4 bytes"));
            let b = (o >> shift) as usize;
            keys[fill[b] as usize] = (o & low) as u16;
            fill[b] += 1;
        }
        Ok(Some(RankIndex {
            shift,
            starts,
            keys,
        }))
    }

    /// The pack position of the entry at `offset`, or `None` when no entry starts there.
    ///
    /// Two index entries at one offset (a corrupt index, which `verify` reports) would share a
    /// rank here, where the exact reverse index sets one aside; bitmaps of such a pack are not
    /// to be trusted either way.
    pub(crate) fn rank(&self, offset: u64) -> Option<u32> {
        let offset = u32::try_from(offset).ok()?;
        let b = (offset >> self.shift) as usize;
        let (start, end) = (*self.starts.get(b)?, *self.starts.get(b + 1)?);
        let bucket = &self.keys[start as usize..end as usize];
        let low = (offset & ((1u32 << self.shift) - 1)) as u16;
        let (mut below, mut equal) = (0u32, 0u32);
        for &k in bucket {
            below += (k < low) as u32;
            equal += (k == low) as u32;
        }
        (equal > 0).then_some(start + below)
    }
}

#[cfg(test)]
mod tests {
    use super::RankIndex;
    use crate::pack::index::write::{encode_v2, IndexEntry};
    use crate::pack::index::PackIndex;
    use crate::ObjectId;

    /// Ranks match a full sort, for packs whose buckets span less and more than 64 KiB
    /// (small shifts and the 16-bit cap), with offsets packed tightly and spread out.
    #[test]
    fn ranks_match_a_sort() {
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        for (n, spread) in [
            (1u64, 40u64),
            (700, 3),
            (5000, 40),
            (3000, 90_000),
            (70_000, 300),
        ] {
            let mut offsets = Vec::new();
            let mut at = 12u64;
            for _ in 0..n {
                offsets.push(at);
                at += 1 + next() % spread;
            }
            let trailer = at;
            let mut entries: Vec<IndexEntry> = offsets
                .iter()
                .map(|&offset| {
                    let mut id = [0u8; 20];
                    for chunk in id.chunks_mut(8) {
                        let r = next().to_le_bytes();
                        chunk.copy_from_slice(&r[..chunk.len()]);
                    }
                    IndexEntry {
                        id: ObjectId::from_bytes(&id).unwrap(),
                        offset,
                        crc32: 0,
                    }
                })
                .collect();
            let bytes = encode_v2(&mut entries, &[0; 20]);
            let index = PackIndex::from_bytes("test.idx", bytes.into()).unwrap();
            let rank = RankIndex::build(&index, trailer).unwrap().unwrap();
            for (i, &o) in offsets.iter().enumerate() {
                assert_eq!(
                    rank.rank(o),
                    Some(i as u32),
                    "n={n} spread={spread} offset={o}"
                );
                if offsets.get(i + 1) != Some(&(o + 1)) && o + 1 < trailer {
                    assert_eq!(rank.rank(o + 1), None);
                }
            }
        }
    }
}
