//! Searching a sorted table of object ids through its fanout: the lookup shared by pack indexes
//! and the multi-pack-index, which store ids the same way (sorted, with a 256-entry fanout of
//! cumulative counts by first byte).

use crate::hash::{ObjectId, Prefix};

/// A sorted id table: how to read its fanout and its ids.
pub(crate) trait SortedIds {
    /// The number of ids whose first byte is at most `byte`.
    fn fanout(&self, byte: usize) -> u32;
    /// The raw bytes of the `i`th id.
    fn id_bytes(&self, i: u32) -> &[u8];

    /// The positions of the ids starting with `first`.
    fn bucket(&self, first: u8) -> std::ops::Range<u32> {
        let first = first as usize;
        let lo = if first == 0 {
            0
        } else {
            self.fanout(first - 1)
        };
        lo..self.fanout(first).max(lo)
    }

    /// The first position in `range` whose id is not less than `want`.
    ///
    /// Ids are compared by their first eight bytes as one integer, and whole only when those are
    /// equal: this search is the inner loop of every walk, and a call to `memcmp` per step costs
    /// more than the rest of it.
    fn lower_bound(&self, range: std::ops::Range<u32>, want: &[u8]) -> u32 {
        let head = |b: &[u8]| -> u64 {
            let mut first = [0u8; 8];
            let n = b.len().min(8);
            first[..n].copy_from_slice(&b[..n]);
            u64::from_be_bytes(first)
        };
        let want_head = head(want);
        let (mut lo, mut hi) = (range.start, range.end);
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            let id = self.id_bytes(mid);
            let id_head = head(id);
            let less = id_head < want_head || (id_head == want_head && id < want);
            if less {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        lo
    }

    /// The position of `id`, if present.
    fn find_id(&self, id: &ObjectId) -> Option<u32> {
        let range = self.bucket(id.as_bytes()[0]);
        let end = range.end;
        let at = self.lower_bound(range, id.as_bytes());
        (at < end && self.id_bytes(at) == id.as_bytes()).then_some(at)
    }

    /// Ids starting with `prefix`, appended to `out` until it holds `limit`.
    fn find_ids_with_prefix(&self, prefix: &Prefix, limit: usize, out: &mut Vec<ObjectId>) {
        let range = self.bucket(prefix.first_byte());
        let end = range.end;
        let start = self.lower_bound(range, prefix.lowest().as_bytes());
        for i in start..end {
            let id = ObjectId::from_bytes(self.id_bytes(i)).expect("ids are hash-sized");
            if !prefix.matches(&id) || out.len() >= limit {
                break;
            }
            out.push(id);
        }
    }
}
