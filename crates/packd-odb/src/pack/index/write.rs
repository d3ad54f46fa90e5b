//! Writing a version 2 pack index (layout in [`super`]): the ids sorted, their entries' CRC-32s
//! and offsets, offsets of 2 GiB and more in the large-offset table, then the pack's checksum and
//! the index's own. The bytes are a function of the entries alone, so an index written here is
//! byte-identical to the one `git index-pack` writes for the same pack.

use crate::ObjectId;

/// One object of a pack, as its index records it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IndexEntry {
    /// The object's id.
    pub id: ObjectId,
    /// Where its entry starts in the pack.
    pub offset: u64,
    /// The CRC-32 of the entry's bytes (header and compressed data) as stored.
    pub crc32: u32,
}

/// Offsets above this go to the large-offset table (the high bit marks them).
const LARGE_OFFSET: u64 = 0x7fff_ffff;

/// The `.idx` bytes for `entries` (any order; sorted here) of the pack whose trailer is
/// `pack_checksum`.
pub fn encode_v2(entries: &mut [IndexEntry], pack_checksum: &[u8; 20]) -> Vec<u8> {
    entries.sort_unstable_by_key(|e| e.id);
    let n = entries.len();
    let mut out = Vec::with_capacity(8 + 1024 + n * 28 + 40);
    out.extend_from_slice(b"\xfftOc");
    out.extend_from_slice(&2u32.to_be_bytes());
    let mut fanout = [0u32; 256];
    for e in entries.iter() {
        fanout[e.id.as_bytes()[0] as usize] += 1;
    }
    let mut total = 0u32;
    for count in fanout {
        total += count;
        out.extend_from_slice(&total.to_be_bytes());
    }
    for e in entries.iter() {
        out.extend_from_slice(e.id.as_bytes());
    }
    for e in entries.iter() {
        out.extend_from_slice(&e.crc32.to_be_bytes());
    }
    let mut large = Vec::new();
    for e in entries.iter() {
        if e.offset > LARGE_OFFSET {
            out.extend_from_slice(&(0x8000_0000u32 | large.len() as u32).to_be_bytes());
            large.push(e.offset);
        } else {
            out.extend_from_slice(&(e.offset as u32).to_be_bytes());
        }
    }
    for offset in large {
        out.extend_from_slice(&offset.to_be_bytes());
    }
    out.extend_from_slice(pack_checksum);
    // A checksum of packd's own bytes: no attacker chose them, so plain SHA-1 is enough.
    let digest = <sha1::Sha1 as sha1::Digest>::digest(&out);
    out.extend_from_slice(&digest);
    out
}
