//! The delta base cache: recently decoded objects, keyed by (pack, offset), shared by all packs and
//! all threads under one memory budget.
//!
//! Two access patterns must both do well (seed 002). Reading in pack-offset order, the bases of
//! neighbouring deltas were decoded moments ago; reading in random order, a delta chain's lower
//! links are shared by many objects. Either way what is worth keeping is an object that served as
//! a base (see `Pack::decode`), and the cache wants as many entries as the budget allows rather
//! than a fixed small table. Eviction is CLOCK (second chance), an LRU approximation that costs one
//! flag write on a hit.
//!
//! The entry limit follows from the packs: `budget / (4 x average compressed entry size)`, since a
//! typical inflated base is a few times its compressed size; the byte budget is the hard limit.
//! The table is split into shards so that many threads rarely wait on one lock; the byte budget is
//! global, so one large base may take up to half of it wherever it lands.

use crate::id_set::OffsetMap;
use crate::ObjectKind;
use bytes::Bytes;
use parking_lot::Mutex;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

const SHARDS: usize = 16;

/// Where an object was decoded from: a global pack number and the entry's offset.
pub type CacheKey = (u32, u64);

/// Counters of cache use, for `--stats`.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct CacheStats {
    /// Lookups that found the object.
    pub hits: u64,
    /// Lookups that did not.
    pub misses: u64,
    /// Objects dropped to stay within the budget.
    pub evictions: u64,
    /// Objects stored.
    pub inserts: u64,
}

#[derive(Debug)]
struct Entry {
    kind: ObjectKind,
    data: Bytes,
    referenced: bool,
}

#[derive(Debug, Default)]
struct Shard {
    map: OffsetMap<CacheKey, Entry>,
    clock: VecDeque<CacheKey>,
    bytes: usize,
}

/// A budgeted, shared cache of decoded objects.
#[derive(Debug)]
pub struct DeltaBaseCache {
    shards: Vec<Mutex<Shard>>,
    /// The byte budget over all shards.
    budget: usize,
    /// Bytes held over all shards.
    bytes: AtomicUsize,
    shard_entries: usize,
    hits: AtomicU64,
    misses: AtomicU64,
    evictions: AtomicU64,
    inserts: AtomicU64,
}

/// Per-entry overhead counted against the budget (map slot, clock slot, allocation header).
const ENTRY_OVERHEAD: usize = 96;

impl Shard {
    /// Drops the first entry the clock hand finds unreferenced; returns the bytes freed.
    fn evict_one(&mut self) -> Option<usize> {
        while let Some(victim) = self.clock.pop_front() {
            match self.map.get_mut(&victim) {
                Some(e) if e.referenced => {
                    e.referenced = false;
                    self.clock.push_back(victim);
                }
                Some(_) => {
                    let e = self.map.remove(&victim).expect("just found");
                    let freed = e.data.len() + ENTRY_OVERHEAD;
                    self.bytes -= freed;
                    return Some(freed);
                }
                None => {}
            }
        }
        None
    }
}

impl DeltaBaseCache {
    /// A cache holding at most `budget` bytes in at most `max_entries` objects. A budget of 0
    /// disables it.
    pub fn new(budget: u64, max_entries: usize) -> DeltaBaseCache {
        DeltaBaseCache {
            shards: (0..SHARDS).map(|_| Mutex::new(Shard::default())).collect(),
            budget: usize::try_from(budget).unwrap_or(usize::MAX),
            bytes: AtomicUsize::new(0),
            shard_entries: max_entries.div_ceil(SHARDS).max(1),
            hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
            evictions: AtomicU64::new(0),
            inserts: AtomicU64::new(0),
        }
    }

    /// The entry limit for packs holding `objects` entries in `pack_bytes` bytes, under `budget`.
    pub fn entries_for(budget: u64, objects: u64, pack_bytes: u64) -> usize {
        let average = pack_bytes.checked_div(objects).unwrap_or(1024).max(64);
        let estimated_base = average.saturating_mul(4);
        (budget / estimated_base).clamp(256, 1 << 22) as usize
    }

    /// True when the cache can hold nothing.
    pub fn is_disabled(&self) -> bool {
        self.budget == 0
    }

    fn shard_index(&self, key: &CacheKey) -> usize {
        // Offsets of neighbouring entries differ in low bits; mix them so neighbours spread out.
        let h = (key.1 ^ ((key.0 as u64) << 40)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        (h >> 60) as usize % SHARDS
    }

    fn shard(&self, key: &CacheKey) -> &Mutex<Shard> {
        &self.shards[self.shard_index(key)]
    }

    /// The cached object at `key`, if any.
    pub fn get(&self, key: &CacheKey) -> Option<(ObjectKind, Bytes)> {
        if self.is_disabled() {
            return None;
        }
        let mut shard = self.shard(key).lock();
        match shard.map.get_mut(key) {
            Some(e) => {
                e.referenced = true;
                self.hits.fetch_add(1, Ordering::Relaxed);
                Some((e.kind, e.data.clone()))
            }
            None => {
                drop(shard);
                self.misses.fetch_add(1, Ordering::Relaxed);
                None
            }
        }
    }

    /// Whether the cache has never had to evict and holds under half its budget: keeping more
    /// costs nothing yet.
    pub fn has_room(&self) -> bool {
        !self.is_disabled()
            && self.evictions.load(Ordering::Relaxed) == 0
            && self.bytes.load(Ordering::Relaxed) < self.budget / 2
    }

    /// Stores a decoded object. An object larger than half the budget is not kept.
    pub fn insert(&self, key: CacheKey, kind: ObjectKind, data: &Bytes) {
        let cost = data.len() + ENTRY_OVERHEAD;
        if self.is_disabled() || cost > self.budget / 2 {
            return;
        }
        let home = self.shard_index(&key);
        let mut evicted = 0;
        {
            let mut shard = self.shards[home].lock();
            if shard.map.contains_key(&key) {
                return;
            }
            while shard.map.len() >= self.shard_entries
                || self.bytes.load(Ordering::Relaxed) + cost > self.budget
            {
                match shard.evict_one() {
                    Some(freed) => {
                        self.bytes.fetch_sub(freed, Ordering::Relaxed);
                        evicted += 1;
                    }
                    None => break,
                }
            }
            shard.bytes += cost;
            self.bytes.fetch_add(cost, Ordering::Relaxed);
            shard.map.insert(
                key,
                Entry {
                    kind,
                    data: data.clone(),
                    referenced: false,
                },
            );
            shard.clock.push_back(key);
        }
        // The home shard had too little to give back: take the rest from the others.
        let mut other = home;
        for _ in 1..SHARDS {
            if self.bytes.load(Ordering::Relaxed) <= self.budget {
                break;
            }
            other = (other + 1) % SHARDS;
            let mut shard = self.shards[other].lock();
            while self.bytes.load(Ordering::Relaxed) > self.budget {
                match shard.evict_one() {
                    Some(freed) => {
                        self.bytes.fetch_sub(freed, Ordering::Relaxed);
                        evicted += 1;
                    }
                    None => break,
                }
            }
        }
        self.inserts.fetch_add(1, Ordering::Relaxed);
        if evicted > 0 {
            self.evictions.fetch_add(evicted, Ordering::Relaxed);
        }
    }

    /// Drops every entry (the counters stay). A server calls it after a long walk (a clone
    /// counted over thousands of tips): the walk filled the cache with its own trees, which
    /// later requests rarely share, and a full cache whose entries are then replaced by
    /// another thread's allocations leaves the freed ones scattered over the first thread's
    /// heap, where they stay resident.
    pub fn clear(&self) {
        for shard in &self.shards {
            let mut shard = shard.lock();
            let freed = shard.bytes;
            *shard = Shard::default();
            drop(shard);
            self.bytes.fetch_sub(freed, Ordering::Relaxed);
        }
    }

    /// The counters so far.
    pub fn stats(&self) -> CacheStats {
        CacheStats {
            hits: self.hits.load(Ordering::Relaxed),
            misses: self.misses.load(Ordering::Relaxed),
            evictions: self.evictions.load(Ordering::Relaxed),
            inserts: self.inserts.load(Ordering::Relaxed),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clear_empties_every_shard() {
        let cache = DeltaBaseCache::new(1 << 20, 1000);
        let data = Bytes::from(vec![1u8; 100]);
        for off in 0..200u64 {
            cache.insert((0, off), ObjectKind::Blob, &data);
        }
        assert!(cache.get(&(0, 5)).is_some());
        cache.clear();
        assert!((0..200u64).all(|off| cache.get(&(0, off)).is_none()));
        assert_eq!(cache.bytes.load(Ordering::Relaxed), 0);
        cache.insert((0, 7), ObjectKind::Blob, &data);
        assert!(cache.get(&(0, 7)).is_some());
    }

    #[test]
    fn stays_within_budget_and_counts() {
        let cache = DeltaBaseCache::new(16 * 4096, 1000);
        let data = Bytes::from(vec![7u8; 1000]);
        for off in 0..1000u64 {
            cache.insert((0, off), ObjectKind::Blob, &data);
        }
        let held: usize = cache.shards.iter().map(|s| s.lock().bytes).sum();
        assert!(held <= 16 * 4096, "{held}");
        assert_eq!(held, cache.bytes.load(Ordering::Relaxed));
        assert!(cache.get(&(0, 999)).is_some(), "the newest entry survives");
        // One object of 40% of the budget fits, wherever its shard.
        let big = Bytes::from(vec![1u8; 16 * 4096 * 4 / 10]);
        cache.insert((9, 9), ObjectKind::Blob, &big);
        assert!(cache.get(&(9, 9)).is_some());
        let held: usize = cache.shards.iter().map(|s| s.lock().bytes).sum();
        assert!(held <= 16 * 4096, "{held}");
        let s = cache.stats();
        assert_eq!(s.inserts, 1001);
        assert!(s.evictions > 900);
        assert!(cache.get(&(1, 999)).is_none());
        let s = cache.stats();
        assert_eq!((s.hits, s.misses), (2, 1));
    }

    #[test]
    fn zero_budget_disables() {
        let cache = DeltaBaseCache::new(0, 256);
        cache.insert((0, 1), ObjectKind::Blob, &Bytes::from_static(b"x"));
        assert!(cache.get(&(0, 1)).is_none());
    }
}
