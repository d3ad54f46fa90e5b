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
//! starts[b]     first slot of bucket b in `keys` (buckets in offset order), starts[B] = len
//! keys[i]       entry offsets within their bucket (the low `shift` bits), unordered
//! positions[i]  the index position of the entry whose key is keys[i] (built on first use)
//! bucket(o)     o >> shift, with shift <= 16 so that a key fits in 16 bits
//! rank(o)       starts[bucket(o)] + |{ k in bucket(o) : k < low(o) }|
//! ```
//!
//! Keys of 16 bits halve the memory the build writes (and faults in) and the bytes a lookup
//! scans. The same buckets answer the other questions of a reverse index, entry by entry: the
//! entry at a pack position, where an entry ends, and which index entry starts at an offset.
//! A fetch that sends a few hundred objects then needs no sort of every offset either (30 ms of
//! a 57 ms `packd upload-pack` of a mirror's fetch on git/git).
//!
//! Only for packs under 4 GiB (no 64-bit offsets in the index) whose index places every entry
//! inside the pack's entries; others use the exact reverse index. An index that places two
//! entries at one offset (corrupt: `verify` reports it) has them share a rank here, where the
//! reverse index sets one aside: positions past it then differ, and `select` refuses the shared
//! one rather than answer it twice.

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
    /// Built by the first question that needs it: a fill-in walk asks only for ranks.
    positions: std::sync::OnceLock<Vec<u32>>,
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
        let mut keys = vec![0u16; n as usize];
        scatter(table, shift, &starts, |slot, _, o| {
            keys[slot] = (o & low) as u16
        });
        Ok(Some(RankIndex {
            shift,
            starts,
            keys,
            positions: std::sync::OnceLock::new(),
        }))
    }

    /// The index positions beside `keys`: the build's scatter again, in the same order, so
    /// that each lands in its key's slot.
    fn positions(&self, index: &PackIndex) -> &[u32] {
        self.positions.get_or_init(|| {
            let mut positions = vec![0u32; self.keys.len()];
            if let Some(table) = index.offset_table() {
                scatter(table, self.shift, &self.starts, |slot, i, _| {
                    positions[slot] = i
                });
            }
            positions
        })
    }

    /// The slots of bucket `b`.
    fn bucket(&self, b: usize) -> Option<std::ops::Range<usize>> {
        Some(*self.starts.get(b)? as usize..*self.starts.get(b + 1)? as usize)
    }

    /// Where `offset` falls: its bucket's number and slots, and its key within the bucket.
    fn locate(&self, offset: u64) -> Option<(usize, std::ops::Range<usize>, u16)> {
        let offset = u32::try_from(offset).ok()?;
        let b = (offset >> self.shift) as usize;
        let low = (offset & ((1u32 << self.shift) - 1)) as u16;
        Some((b, self.bucket(b)?, low))
    }

    /// The offset bucket `b`'s key `k` stands for.
    fn offset_of(&self, b: usize, k: u16) -> u64 {
        ((b as u64) << self.shift) | k as u64
    }

    /// The index position of the entry at `offset`, or `None` when no entry starts there.
    /// `index` is the index this was built from.
    pub(crate) fn index_position(&self, index: &PackIndex, offset: u64) -> Option<u32> {
        let (_, slots, low) = self.locate(offset)?;
        let at = self.keys[slots.clone()].iter().position(|&k| k == low)?;
        Some(self.positions(index)[slots.start + at])
    }

    /// The offset and index position of the entry at pack position `pos` (the entry with `pos`
    /// entries before it), or `None` past the last entry, or when two index entries share its
    /// offset (a damaged index). `index` is the index this was built from.
    pub(crate) fn select(&self, index: &PackIndex, pos: u32) -> Option<(u64, u32)> {
        // The bucket holding slot `pos`: the last whose start is at or before it.
        let b = self.starts.partition_point(|&s| s <= pos).checked_sub(1)?;
        let slots = self.bucket(b)?;
        if pos as usize >= slots.end {
            return None;
        }
        let mut pairs: Vec<(u16, u32)> = self.keys[slots.clone()]
            .iter()
            .copied()
            .zip(self.positions(index)[slots.clone()].iter().copied())
            .collect();
        let (_, &mut (k, index_pos), _) =
            pairs.select_nth_unstable_by_key(pos as usize - slots.start, |&(k, _)| k);
        if self.keys[slots].iter().filter(|&&other| other == k).count() > 1 {
            return None;
        }
        Some((self.offset_of(b, k), index_pos))
    }

    /// The offset of the first entry after `offset`, or `None` when none follows (the entry at
    /// `offset` ends at the trailer).
    pub(crate) fn next_offset(&self, offset: u64) -> Option<u64> {
        let (mut b, slots, low) = self.locate(offset)?;
        if let Some(k) = self.keys[slots].iter().copied().filter(|&k| k > low).min() {
            return Some(self.offset_of(b, k));
        }
        // The first entry of the next bucket that has one (a large entry spans empty ones).
        loop {
            b += 1;
            let slots = self.bucket(b)?;
            if let Some(k) = self.keys[slots].iter().copied().min() {
                return Some(self.offset_of(b, k));
            }
        }
    }

    /// The pack position of the entry at `offset`, or `None` when no entry starts there.
    ///
    /// Two index entries at one offset (a corrupt index, which `verify` reports) would share a
    /// rank here, where the exact reverse index sets one aside; bitmaps of such a pack are not
    /// to be trusted either way.
    pub(crate) fn rank(&self, offset: u64) -> Option<u32> {
        let (_, slots, low) = self.locate(offset)?;
        let (mut below, mut equal) = (0u32, 0u32);
        for &k in &self.keys[slots.clone()] {
            below += (k < low) as u32;
            equal += (k == low) as u32;
        }
        (equal > 0).then_some(slots.start as u32 + below)
    }
}

/// Visits the offsets of the index's offset `table` in index order, with the slot each takes in
/// its bucket (`starts`, buckets of `1 << shift` bytes): the one order in which both the keys
/// and their index positions are placed, so that they stay side by side.
fn scatter(table: &[u8], shift: u32, starts: &[u32], mut place: impl FnMut(usize, u32, u32)) {
    let mut fill = starts.to_vec();
    for (i, raw) in table.chunks_exact(4).enumerate() {
        let o = u32::from_be_bytes(raw.try_into().expect("4 bytes"));
        let b = (o >> shift) as usize;
        place(fill[b] as usize, i as u32, o);
        fill[b] += 1;
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
            // Index positions: ids are random, so sort them as encode_v2 did.
            let mut by_id: Vec<(ObjectId, u64)> =
                entries.iter().map(|e| (e.id, e.offset)).collect();
            by_id.sort();
            let pos_of: std::collections::HashMap<u64, u32> = by_id
                .iter()
                .enumerate()
                .map(|(i, &(_, o))| (o, i as u32))
                .collect();
            let index_pos_of = |o: u64| pos_of[&o];
            for (i, &o) in offsets.iter().enumerate() {
                assert_eq!(
                    rank.rank(o),
                    Some(i as u32),
                    "n={n} spread={spread} offset={o}"
                );
                if n <= 5000 || i % 5 == 0 || i + 1 == offsets.len() {
                    assert_eq!(
                        rank.select(&index, i as u32),
                        Some((o, index_pos_of(o))),
                        "select {i}"
                    );
                    assert_eq!(rank.index_position(&index, o), Some(index_pos_of(o)));
                    assert_eq!(
                        rank.next_offset(o),
                        offsets.get(i + 1).copied(),
                        "after {o}"
                    );
                }
                if offsets.get(i + 1) != Some(&(o + 1)) && o + 1 < trailer {
                    assert_eq!(rank.rank(o + 1), None);
                    assert_eq!(rank.index_position(&index, o + 1), None);
                    assert_eq!(rank.next_offset(o + 1), offsets.get(i + 1).copied());
                }
            }
            assert_eq!(rank.select(&index, offsets.len() as u32), None);
        }
    }
}
