//! Passes over every entry of an index by offset range, for reading a pack front to back in
//! bounded memory: a histogram of where entries start, then the entries of one range at a
//! time (their offsets, CRC-32s and index positions), which the caller sorts. A whole pack
//! sent as it is needs each entry's extent and CRC in pack order; a table of all of them at
//! once costs 16 bytes an entry (13 MB for git/git), a range of them a small fraction of that.

use super::PackIndex;
use crate::Result;
use std::ops::Range;

/// One index entry, for a pass in pack order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EntryAt {
    /// Where the entry starts in the pack.
    pub offset: u64,
    /// The CRC-32 of the entry's bytes (`None` for a v1 index, which has none).
    pub crc: Option<u32>,
    /// The entry's position in the index (id order).
    pub position: u32,
}

impl PackIndex {
    /// Calls `f(offset, position)` for every entry in index order. A v2 index is read from its
    /// offset table directly (the large-offset table only for offsets that need it).
    pub(crate) fn for_each_offset(&self, mut f: impl FnMut(u64, u32)) -> Result<()> {
        match self.offset_table() {
            Some(table) => {
                for (i, raw) in table.chunks_exact(4).enumerate() {
                    let raw = u32::from_be_bytes([raw[0], raw[1], raw[2], raw[3]]);
                    let offset = if raw & 0x8000_0000 == 0 {
                        raw as u64
                    } else {
                        self.offset(i as u32)?
                    };
                    f(offset, i as u32);
                }
            }
            None => {
                for i in 0..self.count {
                    f(self.offset(i)?, i);
                }
            }
        }
        Ok(())
    }

    /// Counts entries by `offset >> shift` into `buckets` (cleared and sized to hold the
    /// bucket of `end - 1`); entries at or past `end` are not counted.
    pub fn offset_histogram(&self, shift: u32, end: u64, buckets: &mut Vec<u32>) -> Result<()> {
        buckets.clear();
        let shift = shift.min(63);
        buckets.resize((end.saturating_sub(1) >> shift) as usize + 1, 0);
        self.for_each_offset(|offset, _| {
            if offset < end {
                buckets[(offset >> shift) as usize] += 1;
            }
        })
    }

    /// Appends to `out` the entries whose offset lies in `range`, in index order (unsorted).
    pub fn entries_in(&self, range: Range<u64>, out: &mut Vec<EntryAt>) -> Result<()> {
        self.for_each_offset(|offset, position| {
            if range.contains(&offset) {
                out.push(EntryAt {
                    offset,
                    crc: self.crc32(position),
                    position,
                });
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pack::index::write::{encode_v2, IndexEntry};
    use crate::ObjectId;

    #[test]
    fn ranges_and_histogram_cover_every_entry_once() {
        let mut entries: Vec<IndexEntry> = (0..5_000u32)
            .map(|i| IndexEntry {
                id: ObjectId::compute(crate::ObjectKind::Blob, &i.to_be_bytes()).unwrap(),
                offset: 12 + 37 * i as u64 + if i == 4_999 { 1 << 33 } else { 0 },
                crc32: i.wrapping_mul(2_654_435_761),
            })
            .collect();
        let bytes = encode_v2(&mut entries, &[0; 20]);
        let index = PackIndex::from_bytes("t.idx", bytes::Bytes::from(bytes)).unwrap();
        assert!(index.crc32(0).is_some(), "a v2 index records CRCs");
        let end = (1u64 << 33) + 200_000;
        let mut buckets = Vec::new();
        index.offset_histogram(12, end, &mut buckets).unwrap();
        assert_eq!(buckets.iter().map(|&b| b as u64).sum::<u64>(), 5_000);
        assert_eq!(buckets[0], (4096u32 - 12).div_ceil(37));
        let mut seen = Vec::new();
        for range in [0..4096, 4096..100_000, 100_000..end] {
            let from = seen.len();
            index.entries_in(range.clone(), &mut seen).unwrap();
            assert!(seen[from..].iter().all(|e| range.contains(&e.offset)));
        }
        seen.sort_by_key(|e| e.offset);
        assert_eq!(seen.len(), 5_000);
        for e in &seen {
            assert_eq!(index.offset(e.position).unwrap(), e.offset);
            assert_eq!(index.crc32(e.position), e.crc);
        }
    }
}
