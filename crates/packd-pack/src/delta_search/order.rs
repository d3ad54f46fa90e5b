//! The orders of a delta search: the window's (git's `type_size_sort`), its chunks, and one to
//! write the answer in.

use super::{Candidate, Choice};

/// `searched` (indexes into `candidates`) in the window's order, git's `type_size_sort`: kind
/// (tags, blobs, trees, commits), name hash (descending), base-only objects first (when
/// `base_only_first`), size
/// (largest first), then position in `candidates` (the caller's order; git's is newest first).
/// Larger objects come first so that deltas are made from them to smaller ones (removing
/// bytes is a smaller delta than adding them), and one path's versions meet in the window.
pub(super) fn window_order(
    candidates: &[Candidate],
    mut searched: Vec<u32>,
    base_only_first: bool,
) -> Vec<u32> {
    searched.sort_unstable_by(|&a, &b| {
        let (x, y) = (&candidates[a as usize], &candidates[b as usize]);
        (y.kind as u8)
            .cmp(&(x.kind as u8))
            .then(y.name_hash.cmp(&x.name_hash))
            .then(if base_only_first {
                y.base_only.cmp(&x.base_only)
            } else {
                std::cmp::Ordering::Equal
            })
            .then(y.size.cmp(&x.size))
            .then(a.cmp(&b))
    });
    searched
}

/// `ordered` cut into runs of about `target` objects, each searched on its own: a cut is put
/// at the first change of kind or name hash at or after `target` objects (git's
/// `ll_find_deltas` moves its cuts the same way, so that one path's versions stay together),
/// but never more than `4 * target` objects in (a name hash shared by thousands of objects).
/// The cuts depend on the list alone, so the answer does not depend on the thread count.
pub(super) fn chunks<'a>(
    candidates: &[Candidate],
    ordered: &'a [u32],
    target: usize,
) -> Vec<&'a [u32]> {
    let key = |i: u32| {
        let c = &candidates[i as usize];
        (c.kind as u8, c.name_hash)
    };
    let mut out = Vec::with_capacity(ordered.len() / target.max(1) + 1);
    let mut rest = ordered;
    while !rest.is_empty() {
        let mut cut = target.max(1).min(rest.len());
        while cut < rest.len() && cut < 4 * target && key(rest[cut]) == key(rest[cut - 1]) {
            cut += 1;
        }
        let (chunk, after) = rest.split_at(cut);
        out.push(chunk);
        rest = after;
    }
    out
}

/// The candidates to write (base-only ones left out) in an order where each delta's base, when
/// it is written too, comes before it: by chain depth (whole objects first), then position.
pub fn write_order(candidates: &[Candidate], choices: &[Choice]) -> Vec<u32> {
    let depth = |i: u32| match &choices[i as usize] {
        Choice::Whole => 0,
        Choice::Delta { depth, .. } => *depth,
    };
    let mut order: Vec<u32> = (0..candidates.len() as u32)
        .filter(|&i| !candidates[i as usize].base_only)
        .collect();
    order.sort_by_key(|&i| (depth(i), i));
    order
}
