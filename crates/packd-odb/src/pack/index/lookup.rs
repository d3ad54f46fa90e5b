//! Reading entries of a pack index: by position, by id, by abbreviated id.

use super::{IndexVersion, PackIndex};
use crate::hash::{ObjectId, Prefix};
use crate::pack::sorted_ids::SortedIds;
use crate::{Error, Result};

const HASH: usize = 20;

/// Ids of a two-byte bucket from which [`PackIndex::find`] does not ask for its cache lines
/// ahead. A bucket holds about one 65,536th of the ids: a dozen on git/git's 841,000 objects;
/// past about four million objects most buckets hold more, and are searched without.
const PREFETCH_IDS: u32 = 64;

/// Indexes this large keep their file for [`PackIndex::find_by_read`].
pub const READ_LOOKUPS_FROM: usize = 1 << 20;

/// Ids read by one [`PackIndex::find_by_read`]: interpolation places an id within a few dozen
/// positions of where it is (the spread grows as the square root of the bucket: about 17 in a
/// bucket of 1,200), so a window of 128 nearly always holds it.
pub const READ_WINDOW: u32 = 128;

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

    /// The position of `id` in id order, if the pack has it: through the fanout by two bytes
    /// once [`PackIndex::warm_lookups`] built it, else through the file's own.
    pub fn find(&self, id: &ObjectId) -> Option<u32> {
        let Some((lo, end)) = self.fine_bucket(id) else {
            return self.find_id(id);
        };
        let want = id.as_bytes();
        self.prefetch_ids(lo, end);
        let at = self.lower_bound_after(lo..end, want, 2);
        (at < end && self.id_bytes(at) == want).then_some(at)
    }

    /// Asks the processor for the ids [`PackIndex::find`] will search for `id` (once
    /// [`PackIndex::warm_lookups`] built its fanout; else nothing): a caller with several ids to
    /// look up asks for all of them first, so that their cache misses overlap instead of
    /// coming one after the other.
    #[inline]
    pub fn prefetch_find(&self, id: &ObjectId) {
        if let Some((lo, end)) = self.fine_bucket(id) {
            self.prefetch_ids(lo, end);
        }
    }

    /// The positions of the ids sharing `id`'s first two bytes, once
    /// [`PackIndex::warm_lookups`] built its fanout by them.
    #[inline]
    fn fine_bucket(&self, id: &ObjectId) -> Option<(u32, u32)> {
        let Some(Some(fine)) = self.fine_fanout.get() else {
            return None;
        };
        let want = id.as_bytes();
        let prefix = u16::from_be_bytes([want[0], want[1]]) as usize;
        Some((fine[prefix], fine[prefix + 1]))
    }

    /// Asks for the ids at positions `lo..end`, a bucket of the two-byte fanout: its dozen
    /// ids span a few cache lines, which a search would miss one after the other, and asking
    /// for them all at once costs about one miss. (Not for a bucket much larger than the
    /// dozen: ids crafted to share two bytes.)
    #[inline]
    fn prefetch_ids(&self, lo: u32, end: u32) {
        if lo < end && end - lo <= PREFETCH_IDS {
            let first = self.id_bytes(lo).as_ptr() as usize;
            let last = self.id_bytes(end - 1).as_ptr() as usize + HASH - 1;
            let mut line = first & !63;
            while line <= last {
                crate::prefetch::line(line as *const u8);
                line += 64;
            }
        }
    }

    /// Asks the processor for the offset [`PackIndex::offset`] reads for the `i`th object (see
    /// [`PackIndex::prefetch_find`]). Nothing for a version 1 index, whose offsets sit beside
    /// the ids a search has just read.
    #[inline]
    pub fn prefetch_offset(&self, i: u32) {
        if self.version == IndexVersion::V2 && i < self.count {
            crate::prefetch::line(self.bytes[self.offsets_at + 4 * i as usize..].as_ptr());
        }
    }

    /// Prepares this index for many lookups by id: a fanout by the ids' first two bytes
    /// (65,536 counts, 256 KiB), built in one pass over the ids, leaves a lookup a binary
    /// search over a dozen neighbouring ids (for 841,000 objects) instead of probes spread
    /// over a bucket of 3,300. A fill-in walk over thousands of trees looks up about one id
    /// in each tree's changed entries: on git/git, 111,000 lookups took 775 ns each, every
    /// probe a cache and TLB miss in the 17 MB id table while the walk's inflating evicts it.
    /// Costs a few milliseconds once (the pass touches every page of the id table), so only a
    /// caller about to make tens of thousands of lookups calls it; a long-running server then
    /// keeps it for every later request.
    /// An index whose ids are out of order by their first two bytes, or disagree with its own
    /// fanout, gets no table: its lookups stay the fanout's, as they were.
    /// Returns whether this call built a table (not when it found the ids out of order).
    pub fn warm_lookups(&self) -> bool {
        let mut built = false;
        self.fine_fanout.get_or_init(|| {
            let mut fine = vec![0u32; (1 << 16) + 1];
            let mut previous = 0usize;
            for i in 0..self.count {
                let id = self.id_bytes(i);
                let prefix = u16::from_be_bytes([id[0], id[1]]) as usize;
                if prefix < previous {
                    return None;
                }
                previous = prefix;
                fine[prefix + 1] += 1;
            }
            for p in 0..1 << 16 {
                fine[p + 1] += fine[p];
            }
            // The file's own fanout must say the same of every first byte.
            let agrees = (0..256).all(|byte| fine[(byte + 1) << 8] == self.fanout(byte));
            built = agrees;
            agrees.then(|| fine.into_boxed_slice())
        });
        built
    }

    /// Keeps the index's file for [`PackIndex::find_by_read`] when the index is at least
    /// [`READ_LOOKUPS_FROM`] bytes (an open file each: only where the saving is worth it).
    pub(crate) fn keep_blob(&mut self, blob: std::sync::Arc<dyn packd_storage::Blob>) {
        if self.bytes.len() >= READ_LOOKUPS_FROM && self.version == IndexVersion::V2 {
            self.blob = Some(blob);
        }
    }

    /// [`PackIndex::find`] for a process that makes few lookups in a large index: the ids
    /// where interpolation places `id` are read with one `pread` of `READ_WINDOW` ids rather
    /// than through the map. A first touch of a mapped page costs a fault that maps 16 pages
    /// around it (about 8 µs on a small push into a repository whose alternate has 300,000
    /// objects, a twentieth of the push), the read about 1 µs. Falls back to the map when
    /// the id lies outside the window, the read fails, or the index was not kept.
    pub fn find_by_read(&self, id: &ObjectId) -> Option<u32> {
        let Some(blob) = &self.blob else {
            return self.find(id);
        };
        let want = id.as_bytes();
        let range = self.bucket(want[0]);
        let n = range.end - range.start;
        if n == 0 {
            return None;
        }
        let (lo, hi) = if n <= READ_WINDOW {
            (range.start, range.end)
        } else {
            let mut key = [0u8; 8];
            key.copy_from_slice(&want[1..9]);
            let key = u64::from_be_bytes(key) as u128;
            let guess = range.start + ((key * n as u128) >> 64) as u32;
            // A window of READ_WINDOW ids around the guess, inside the bucket (n > READ_WINDOW).
            let lo = guess
                .saturating_sub(READ_WINDOW / 2)
                .clamp(range.start, range.end - READ_WINDOW);
            (lo, lo + READ_WINDOW)
        };
        let at = (self.ids_at + lo as usize * HASH) as u64;
        let Ok(ids) = blob.read_copy(at..at + (hi - lo) as u64 * HASH as u64) else {
            return self.find(id);
        };
        let (mut a, mut b) = (0usize, (hi - lo) as usize);
        while a < b {
            let mid = a + (b - a) / 2;
            match ids[mid * HASH..(mid + 1) * HASH].cmp(want) {
                std::cmp::Ordering::Less => a = mid + 1,
                std::cmp::Ordering::Equal => return Some(lo + mid as u32),
                std::cmp::Ordering::Greater => b = mid,
            }
        }
        let before_window = a == 0 && lo > range.start;
        let after_window = a == (hi - lo) as usize && hi < range.end;
        if before_window || after_window {
            return self.find(id);
        }
        None
    }

    /// Ids that start with `prefix`, appended to `out` until it holds `limit`.
    pub fn find_prefix(&self, prefix: &Prefix, limit: usize, out: &mut Vec<ObjectId>) {
        self.find_ids_with_prefix(prefix, limit, out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pack::index::write::{encode_v2, IndexEntry};
    use packd_storage::{LocalStorage, Storage};

    #[test]
    fn find_by_read_agrees_with_find() {
        // Enough ids for an index over READ_LOOKUPS_FROM bytes (buckets of about 300).
        let mut entries: Vec<IndexEntry> = (0..80_000u32)
            .map(|i| IndexEntry {
                id: ObjectId::compute(crate::ObjectKind::Blob, &i.to_be_bytes()).unwrap(),
                offset: 12 + i as u64,
                crc32: i,
            })
            .collect();
        let bytes = encode_v2(&mut entries, &[0; 20]);
        assert!(bytes.len() >= READ_LOOKUPS_FROM);
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("big.idx"), &bytes).unwrap();
        let storage = LocalStorage::new(dir.path());
        let blob = storage.open("big.idx").unwrap();
        let mut index = PackIndex::from_bytes(blob.name(), blob.read_all().unwrap()).unwrap();
        index.keep_blob(blob);
        assert!(index.blob.is_some());
        for e in entries.iter().step_by(97) {
            assert_eq!(index.find_by_read(&e.id), index.find(&e.id));
            assert!(index.find_by_read(&e.id).is_some());
        }
        for i in 0..2000u32 {
            let absent = ObjectId::compute(crate::ObjectKind::Tree, &i.to_be_bytes()).unwrap();
            assert_eq!(index.find_by_read(&absent), None);
        }
        // Ids at the edges of buckets (interpolation's worst case) and outside any window.
        let mut edge = *entries[0].id.as_bytes();
        edge[1..].fill(0xff);
        let edge = ObjectId::from_bytes(&edge).unwrap();
        assert_eq!(index.find_by_read(&edge), index.find(&edge));
        let last = entries.last().unwrap().id;
        assert_eq!(index.find_by_read(&last), index.find(&last));
    }

    #[test]
    fn warmed_lookups_agree_with_the_fanout_search() {
        // Ids sharing their first two bytes in long runs (a bucket of the fine fanout with
        // hundreds of ids), the first and last possible prefixes, and random ids.
        let mut ids: Vec<ObjectId> = (0..20_000u32)
            .map(|i| ObjectId::compute(crate::ObjectKind::Blob, &i.to_be_bytes()).unwrap())
            .collect();
        for (first, second) in [(0u8, 0u8), (0xab, 0xcd), (0xff, 0xff)] {
            for i in 0..300u32 {
                let mut id = [0u8; 20];
                id[0] = first;
                id[1] = second;
                id[16..].copy_from_slice(&(i * 3).to_be_bytes());
                ids.push(ObjectId::from_bytes(&id).unwrap());
            }
        }
        let mut entries: Vec<IndexEntry> = ids
            .iter()
            .enumerate()
            .map(|(i, &id)| IndexEntry {
                id,
                offset: 12 + i as u64,
                crc32: 0,
            })
            .collect();
        let bytes = encode_v2(&mut entries, &[0; 20]);
        let cold = PackIndex::from_bytes("cold.idx", bytes::Bytes::from(bytes.clone())).unwrap();
        let warm = PackIndex::from_bytes("warm.idx", bytes::Bytes::from(bytes.clone())).unwrap();
        assert!(warm.warm_lookups() && !warm.warm_lookups(), "built once");
        assert!(matches!(warm.fine_fanout.get(), Some(Some(_))));
        assert!(cold.fine_fanout.get().is_none());
        // Two ids swapped (a damaged file): no table, lookups as before.
        let mut swapped = bytes.clone();
        let ids_at = 8 + 1024;
        let (a, b) = (ids_at + 20 * 100, ids_at + 20 * 15_000);
        let first: Vec<u8> = swapped[a..a + 20].to_vec();
        swapped.copy_within(b..b + 20, a);
        swapped[b..b + 20].copy_from_slice(&first);
        let damaged = PackIndex::from_bytes("damaged.idx", bytes::Bytes::from(swapped)).unwrap();
        assert!(!damaged.warm_lookups(), "no table built");
        assert!(matches!(damaged.fine_fanout.get(), Some(None)));
        let mut probes = ids.clone();
        probes.extend(
            (0..2000u32)
                .map(|i| ObjectId::compute(crate::ObjectKind::Tree, &i.to_be_bytes()).unwrap()),
        );
        for (first, second) in [(0u8, 0u8), (0xab, 0xcd), (0xff, 0xff)] {
            for i in 0..900u32 {
                let mut id = [0u8; 20];
                id[0] = first;
                id[1] = second;
                id[16..].copy_from_slice(&i.to_be_bytes());
                probes.push(ObjectId::from_bytes(&id).unwrap());
            }
        }
        let mut found = 0;
        for id in &probes {
            let expected = cold.find(id);
            assert_eq!(warm.find(id), expected, "{id}");
            if let Some(pos) = expected {
                assert_eq!(warm.id(pos), *id);
                found += 1;
            }
        }
        // Every id of the index, and a third of the 900 ids probed per long run.
        assert_eq!(found, ids.len() + 3 * 300);
    }
}
