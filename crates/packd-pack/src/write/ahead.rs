//! Hints of the pack bytes a stream reads next ([`packd_storage::Blob::prefetch`]), so that a
//! pack in object storage is fetched ahead, many ranges per request and several requests at
//! once, rather than a round trip per window the writer moves to. On a local disk a hint does
//! nothing.
//!
//! ```text
//! plan items (rank, offset), sorted   [0:12] [0:900] [0:70k] ... [1:12] ...
//! hinted                              |<--- AHEAD bytes --->|
//! hinted again once the writer is     ----------|<--- AHEAD bytes --->|
//! half way through
//! ```
//!
//! An entry's end is not known without a lookup, so a hint takes it to be the next item's
//! start when that is near, else [`GUESS`] bytes on: a larger entry's tail is read when the
//! writer gets there. Hints are block-granular in the cache, so the guess costs little.

use crate::count::{Planned, LOOSE};
use std::ops::Range;

/// Bytes of entries one hint covers.
pub(super) const AHEAD: u64 = 16 << 20;

/// The length taken for an entry whose end the hint does not know.
const GUESS: u64 = 4096;

/// The farthest the next item may start for its start to be taken as this one's end.
const NEAR: u64 = 64 << 10;

/// Where the writer's hints have reached in a plan's items.
#[derive(Default)]
pub(crate) struct ReadAhead {
    /// The first item not hinted yet.
    hinted_to: usize,
    /// The item whose turn triggers the next hint.
    next_hint_at: usize,
}

impl ReadAhead {
    /// Called before item `i` of `plan` is written: hints the next [`AHEAD`] bytes of
    /// entries once the writer is half way through those hinted last.
    pub(crate) fn before(&mut self, plan: &Planned, i: usize) {
        let items = &plan.items;
        if i < self.next_hint_at || self.hinted_to >= items.len() {
            return;
        }
        if i == 0 && !plan.packs.iter().any(|p| p.data().prefetches()) {
            // Nothing to fetch ahead (a local disk): no hint is gathered at all.
            self.hinted_to = items.len();
            return;
        }
        let mut j = self.hinted_to.max(i);
        let mut bytes = 0;
        let mut half = None;
        let mut rank = None;
        let mut ranges: Vec<Range<u64>> = Vec::new();
        while j < items.len() && bytes < AHEAD {
            let item = &items[j];
            j += 1;
            if item.rank == LOOSE {
                continue;
            }
            if rank != Some(item.rank) {
                if let Some(r) = rank {
                    plan.packs[r as usize].data().prefetch(&ranges);
                }
                ranges.clear();
                rank = Some(item.rank);
            }
            let pack = &plan.packs[item.rank as usize];
            let next = items
                .get(j)
                .filter(|n| n.rank == item.rank)
                .map(|n| n.offset);
            let end = match next {
                Some(n) if n > item.offset && n - item.offset <= NEAR => n,
                _ => item.offset + GUESS,
            }
            .min(pack.entries_end())
            .max(item.offset);
            match ranges.last_mut() {
                Some(last) if last.end >= item.offset => last.end = last.end.max(end),
                _ => ranges.push(item.offset..end),
            }
            bytes += end - item.offset;
            if half.is_none() && bytes >= AHEAD / 2 {
                half = Some(j);
            }
        }
        if let Some(r) = rank {
            plan.packs[r as usize].data().prefetch(&ranges);
        }
        self.hinted_to = j;
        self.next_hint_at = half.unwrap_or(j);
    }
}

/// The range of a pack sent whole to hint after the window ending at `window_end`, when the
/// stream has gone half way through what was hinted (`hinted_to`, updated); `None` otherwise.
pub(super) fn whole_pack_hint(
    window_end: u64,
    trailer_at: u64,
    hinted_to: &mut u64,
) -> Option<Range<u64>> {
    if window_end + AHEAD / 2 < *hinted_to || *hinted_to >= trailer_at {
        return None;
    }
    let from = (*hinted_to).max(window_end);
    let to = (window_end + AHEAD).min(trailer_at);
    *hinted_to = to;
    (from < to).then_some(from..to)
}
