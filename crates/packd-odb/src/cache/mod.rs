//! The delta base cache: recently decoded objects, keyed by (pack, offset), shared by all packs and
//! all threads under one memory budget.
//!
//! Two access patterns must both do well (seed 002). Reading in pack-offset order, the base of the
//! next delta is almost always an object decoded moments ago, so every decoded object is kept for a
//! while. Reading in random order, a delta chain's lower links are shared by many objects, so the
//! intermediate bases of every chain are kept too, and the cache wants as many entries as the
//! budget allows rather than a fixed small table. Eviction is CLOCK (second chance), an LRU
//! approximation that costs one flag write on a hit.
//!
//! The entry limit follows from the packs: `budget / (4 x average compressed entry size)`, since a
//! typical inflated base is a few times its compressed size; the byte budget is the hard limit.
//! The table is split into shards so that many threads rarely wait on one lock.

use crate::ObjectKind;
use bytes::Bytes;
use parking_lot::Mutex;
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};

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
    map: HashMap<CacheKey, Entry>,
    clock: VecDeque<CacheKey>,
    bytes: usize,
}

/// A budgeted, shared cache of decoded objects.
#[derive(Debug)]
pub struct DeltaBaseCache {
    shards: Vec<Mutex<Shard>>,
    shard_budget: usize,
    shard_entries: usize,
    hits: AtomicU64,
    misses: AtomicU64,
    evictions: AtomicU64,
    inserts: AtomicU64,
}

/// Per-entry overhead counted against the budget (map slot, clock slot, allocation header).
const ENTRY_OVERHEAD: usize = 96;

impl DeltaBaseCache {
    /// A cache holding at most `budget` bytes in at most `max_entries` objects. A budget of 0
    /// disables it.
    pub fn new(budget: u64, max_entries: usize) -> DeltaBaseCache {
        DeltaBaseCache {
            shards: (0..SHARDS).map(|_| Mutex::new(Shard::default())).collect(),
            shard_budget: (budget / SHARDS as u64) as usize,
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
        self.shard_budget == 0
    }

    fn shard(&self, key: &CacheKey) -> &Mutex<Shard> {
        // Offsets of neighbouring entries differ in low bits; mix them so neighbours spread out.
        let h = (key.1 ^ ((key.0 as u64) << 40)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        &self.shards[(h >> 60) as usize % SHARDS]
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

    /// Stores a decoded object. Objects larger than a shard's share of the budget are not kept.
    pub fn insert(&self, key: CacheKey, kind: ObjectKind, data: &Bytes) {
        let cost = data.len() + ENTRY_OVERHEAD;
        if self.is_disabled() || cost > self.shard_budget / 2 {
            return;
        }
        let mut shard = self.shard(&key).lock();
        if shard.map.contains_key(&key) {
            return;
        }
        let mut evicted = 0;
        while shard.bytes + cost > self.shard_budget || shard.map.len() >= self.shard_entries {
            let Some(victim) = shard.clock.pop_front() else {
                break;
            };
            let second_chance = match shard.map.get_mut(&victim) {
                Some(e) if e.referenced => {
                    e.referenced = false;
                    true
                }
                Some(_) => false,
                None => continue,
            };
            if second_chance {
                shard.clock.push_back(victim);
            } else if let Some(e) = shard.map.remove(&victim) {
                shard.bytes -= e.data.len() + ENTRY_OVERHEAD;
                evicted += 1;
            }
        }
        shard.bytes += cost;
        shard.map.insert(
            key,
            Entry {
                kind,
                data: data.clone(),
                referenced: false,
            },
        );
        shard.clock.push_back(key);
        drop(shard);
        self.inserts.fetch_add(1, Ordering::Relaxed);
        if evicted > 0 {
            self.evictions.fetch_add(evicted, Ordering::Relaxed);
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
    fn stays_within_budget_and_counts() {
        let cache = DeltaBaseCache::new(16 * 4096, 1000);
        let data = Bytes::from(vec![7u8; 1000]);
        for off in 0..1000u64 {
            cache.insert((0, off), ObjectKind::Blob, &data);
        }
        let held: usize = cache.shards.iter().map(|s| s.lock().bytes).sum();
        assert!(held <= 16 * 4096, "{held}");
        let s = cache.stats();
        assert_eq!(s.inserts, 1000);
        assert!(s.evictions > 900);
        assert!(cache.get(&(0, 999)).is_some());
        assert!(cache.get(&(1, 999)).is_none());
        let s = cache.stats();
        assert_eq!((s.hits, s.misses), (1, 1));
    }

    #[test]
    fn zero_budget_disables() {
        let cache = DeltaBaseCache::new(0, 256);
        cache.insert((0, 1), ObjectKind::Blob, &Bytes::from_static(b"x"));
        assert!(cache.get(&(0, 1)).is_none());
    }
}
