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
}
