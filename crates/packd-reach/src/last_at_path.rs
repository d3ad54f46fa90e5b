//! The last tree a fill-in walk read at each path, to compare the next version of that
//! directory with.
//!
//! A fill-in walk reads the root tree of every commit it walks, and the subtrees that changed:
//! on git/git with pull-request refs, 30,000 trees of about 400 entries each, most of them
//! entries the walk met in the previous version of the same directory. Any tree the walk has
//! read hands out all of its entries, so an entry that is byte for byte one of its entries is
//! handled already ([`crate::tree_diff::scan_tree_against`]); a tree's delta base is one such
//! tree when the walk read it, the previous version at the same path is another, and that one is
//! nearly always at hand.
//!
//! Paths are known by a 64-bit hash of their names, never compared: a collision only pairs a
//! tree with an unrelated one, whose entries then match less, so the answer stays exact.

use crate::tree_diff::Against;
use bytes::Bytes;
use std::collections::HashMap;

/// The hash of the path of a walk's root trees (a commit's tree, or a tree named by a ref).
pub(crate) const ROOT: u64 = 0x9e37_79b9_7f4a_7c15;

/// The hash of the path `name` inside the directory whose path hashes to `parent` (FNV-1a over
/// the name, seeded with the parent's hash, then mixed).
pub(crate) fn child_path(parent: u64, name: &[u8]) -> u64 {
    let mut h = parent ^ 0xcbf2_9ce4_8422_2325;
    for &b in name {
        h = (h ^ b as u64).wrapping_mul(0x0100_0000_01b3);
    }
    // A final mix so that parents differing in a few bits give unrelated children.
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^ (h >> 33)
}

/// The content of the last tree read at each path, and where its entries start, within a
/// budget of bytes (content, plus four per entry start).
pub(crate) struct LastAtPath {
    /// Each path's tree: its content and where its entries start (see
    /// [`crate::tree_diff::Against::starts`]).
    trees: HashMap<u64, (Bytes, Vec<u32>)>,
    /// Bytes held: contents, and four per entry start.
    held: usize,
    /// Most bytes held at once: a tree that would go past it is not kept (its
    /// path keeps the older version, if any).
    budget: usize,
}

impl LastAtPath {
    /// An empty map that holds at most `budget` bytes (content, plus four per entry start).
    pub(crate) fn new(budget: usize) -> Self {
        LastAtPath {
            trees: HashMap::new(),
            held: 0,
            budget,
        }
    }

    /// The last tree kept for `path`: its content and where its entries start.
    pub(crate) fn get(&self, path: u64) -> Option<Against<'_>> {
        self.trees.get(&path).map(|(data, starts)| Against {
            data,
            starts: Some(starts),
        })
    }

    /// Keeps `data` (the content of a tree the walk read, all of whose entries it handled) and
    /// `starts` (where its entries start, as the scan of `data` wrote them) as the last tree at
    /// `path`, unless that would hold more than the budget. Returns a vector no longer needed
    /// (the one replaced, or `starts` itself), to be reused.
    pub(crate) fn put(&mut self, path: u64, data: Bytes, starts: Vec<u32>) -> Vec<u32> {
        let size = |data: &Bytes, starts: &Vec<u32>| data.len() + 4 * starts.len();
        let old = self.trees.get(&path).map_or(0, |(d, s)| size(d, s));
        let new = size(&data, &starts);
        if self.held - old + new > self.budget {
            return starts;
        }
        self.held = self.held - old + new;
        match self.trees.insert(path, (data, starts)) {
            Some((_, old_starts)) => old_starts,
            None => Vec::new(),
        }
    }

    /// Bytes held.
    pub(crate) fn held(&self) -> usize {
        self.held
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_the_last_tree_per_path_within_the_budget() {
        let a = child_path(ROOT, b"a");
        let b = child_path(ROOT, b"b");
        assert_ne!(a, b);
        assert_ne!(child_path(a, b"x"), child_path(b, b"x"));
        let mut last = LastAtPath::new(26);
        let put = |last: &mut LastAtPath, path, data: &'static [u8]| {
            last.put(path, Bytes::from_static(data), vec![0, data.len() as u32])
        };
        put(&mut last, a, b"1234");
        put(&mut last, a, b"123456");
        assert_eq!(last.get(a).unwrap().data, b"123456");
        assert_eq!(last.get(a).unwrap().starts, Some(&[0, 6][..]));
        assert_eq!(last.held(), 14);
        // Past the budget (a tree holds its length plus four bytes per start): not kept,
        // the older version stays.
        assert_eq!(put(&mut last, b, b"12345"), vec![0, 5]);
        assert!(last.get(b).is_none());
        put(&mut last, a, b"12345678901234567890");
        assert_eq!(last.get(a).unwrap().data, b"123456");
        put(&mut last, b, b"1234");
        assert_eq!(last.held(), 26);
    }
}
