//! Hash sets and maps keyed by object id, hashed by the id's own first bytes.
//!
//! Object ids are already uniformly distributed (they are SHA-1 digests), so hashing them again
//! with SipHash only costs time in the inner loop of every walk. A hostile peer can choose objects
//! whose ids collide in the first eight bytes only by brute-forcing SHA-1 prefixes, which is no
//! cheaper than the work it would make the server do.

use crate::hash::ObjectId;
use std::collections::{HashMap, HashSet};
use std::hash::{BuildHasherDefault, Hasher};

/// A set of object ids.
pub type IdSet = HashSet<ObjectId, BuildHasherDefault<IdHasher>>;
/// A map keyed by object id.
pub type IdMap<V> = HashMap<ObjectId, V, BuildHasherDefault<IdHasher>>;

/// Hashes an object id as its first eight bytes; meant only for [`ObjectId`] keys.
#[derive(Default, Clone, Copy)]
pub struct IdHasher(u64);

impl Hasher for IdHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        // The id's bytes arrive in one call; anything else (a length prefix) is mixed in cheaply.
        match bytes.get(..8) {
            Some(first) => self.0 ^= u64::from_le_bytes(first.try_into().expect("8 bytes")),
            None => {
                for &b in bytes {
                    self.0 = self.0.rotate_left(8) ^ b as u64;
                }
            }
        }
    }

    fn write_usize(&mut self, n: usize) {
        self.0 ^= n as u64;
    }
}

/// Hashes keys made of integers (a pack number and an offset: where an object is stored) by
/// mixing them with a multiply and shifts, for the tables a walk probes for every tree it
/// reads; std's SipHash costs more than the probe. A pusher chooses the offsets of the pack
/// it pushes (kept as it came until the next repack), so the mixing starts from a secret
/// chosen per process: offsets cannot be padded to meet in one bucket. Not for keys a client
/// names directly.
#[derive(Clone, Copy)]
pub struct OffsetHasher(u64);

impl Default for OffsetHasher {
    fn default() -> OffsetHasher {
        static SEED: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
        OffsetHasher(*SEED.get_or_init(|| {
            use std::hash::BuildHasher;
            std::collections::hash_map::RandomState::new().hash_one(0x5eed_u64)
        }))
    }
}

impl Hasher for OffsetHasher {
    fn finish(&self) -> u64 {
        // The finalizer of splitmix64.
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(b as u64);
        }
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = (self.0.rotate_left(29) ^ n).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }

    fn write_u32(&mut self, n: u32) {
        self.write_u64(n as u64);
    }

    fn write_usize(&mut self, n: usize) {
        self.write_u64(n as u64);
    }
}

/// A map keyed by integers (see [`OffsetHasher`]).
pub type OffsetMap<K, V> = HashMap<K, V, BuildHasherDefault<OffsetHasher>>;
/// A set of integer keys (see [`OffsetHasher`]).
pub type OffsetSet<K> = HashSet<K, BuildHasherDefault<OffsetHasher>>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_hash_to_distinct_values() {
        let a = ObjectId::from_hex("ce013625030ba8dba906f756967f9e9ca394464a").unwrap();
        let b = ObjectId::from_hex("ce013625030ba8dca906f756967f9e9ca394464a").unwrap();
        let mut set = IdSet::default();
        assert!(set.insert(a));
        assert!(set.insert(b));
        assert!(!set.insert(a));
        assert_eq!(set.len(), 2);
    }

    #[test]
    fn neighbouring_offsets_spread() {
        use std::hash::BuildHasher;
        let build = BuildHasherDefault::<OffsetHasher>::default();
        // Consecutive offsets of one pack land in distinct low bits (a table's bucket).
        let buckets: HashSet<u64> = (0..1024u64)
            .map(|o| build.hash_one((0usize, 4096 + o)) & 1023)
            .collect();
        assert!(buckets.len() > 600, "{} buckets of 1024", buckets.len());
        let mut map = OffsetMap::default();
        map.insert((1u32, 12u64), "a");
        map.insert((2u32, 12u64), "b");
        assert_eq!(map[&(1, 12)], "a");
        assert_eq!(map[&(2, 12)], "b");
    }
}
