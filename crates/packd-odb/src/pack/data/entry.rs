//! Decoding the header of one pack entry.

use crate::hash::{HashKind, ObjectId};
use crate::ObjectKind;

/// What an entry holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EntryKind {
    /// A whole object of this kind.
    Base(ObjectKind),
    /// A delta against the entry at this (absolute) offset in the same pack.
    OfsDelta {
        /// The base entry's offset.
        base_offset: u64,
    },
    /// A delta against the object with this id.
    RefDelta {
        /// The base object's id.
        base: ObjectId,
    },
}

/// A decoded entry header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EntryHeader {
    /// What the entry holds.
    pub kind: EntryKind,
    /// The inflated size of the entry's data (for a delta, of the delta itself).
    pub size: u64,
    /// The header's length: the zlib stream starts this many bytes after the entry's offset.
    pub header_len: usize,
}

/// Pack entry type numbers of the two delta kinds.
pub const OFS_DELTA: u8 = 6;
/// See [`OFS_DELTA`].
pub const REF_DELTA: u8 = 7;

/// The 12 bytes a version 2 pack of `count` objects starts with: `PACK`, the version, the
/// count, all big-endian.
pub fn encode_pack_header(count: u32) -> [u8; 12] {
    let mut head = [0u8; 12];
    head[..4].copy_from_slice(b"PACK");
    head[4..8].copy_from_slice(&2u32.to_be_bytes());
    head[8..].copy_from_slice(&count.to_be_bytes());
    head
}

/// Appends an entry header's first part to `out`: the type number and the inflated size (what
/// follows for deltas, a distance or a base id, is the caller's).
pub fn encode_type_and_size(out: &mut Vec<u8>, type_num: u8, mut size: u64) {
    let mut c = (type_num << 4) | (size & 0x0f) as u8;
    size >>= 4;
    while size != 0 {
        out.push(c | 0x80);
        c = (size & 0x7f) as u8;
        size >>= 7;
    }
    out.push(c);
}

/// Appends an ofs-delta's backwards distance to its base to `out` (big-endian base-128, each
/// continuation adding one, as git writes it).
pub fn encode_ofs_distance(out: &mut Vec<u8>, mut distance: u64) {
    let mut tmp = [0u8; 10];
    let mut pos = tmp.len() - 1;
    tmp[pos] = (distance & 0x7f) as u8;
    distance >>= 7;
    while distance != 0 {
        distance -= 1;
        pos -= 1;
        tmp[pos] = 0x80 | (distance & 0x7f) as u8;
        distance >>= 7;
    }
    out.extend_from_slice(&tmp[pos..]);
}

/// Decodes the header of the entry at pack offset `offset`, whose bytes start at `bytes[0]`.
/// Errors are short descriptions; the caller adds the file and offset.
pub fn decode_entry_header(
    bytes: &[u8],
    offset: u64,
    hash: HashKind,
) -> Result<EntryHeader, &'static str> {
    let mut pos = 0;
    let mut next = || {
        let b = *bytes.get(pos).ok_or("the entry header is truncated")?;
        pos += 1;
        Ok::<u8, &'static str>(b)
    };
    let first = next()?;
    let type_num = (first >> 4) & 7;
    let mut size = (first & 0x0f) as u64;
    let mut shift = 4u32;
    let mut c = first;
    while c & 0x80 != 0 {
        c = next()?;
        if shift > 60 {
            return Err("the entry's size field overflows 64 bits");
        }
        size |= ((c & 0x7f) as u64) << shift;
        shift += 7;
    }
    let kind = match type_num {
        1..=4 => EntryKind::Base(ObjectKind::from_pack_type(type_num).expect("1..=4 are kinds")),
        6 => {
            let mut c = next()?;
            let mut back = (c & 0x7f) as u64;
            while c & 0x80 != 0 {
                c = next()?;
                back = back
                    .checked_add(1)
                    .and_then(|b| b.checked_mul(128))
                    .map(|b| b | (c & 0x7f) as u64)
                    .ok_or("the delta base offset overflows 64 bits")?;
            }
            if back == 0 || back > offset {
                return Err("the delta base offset points outside the pack");
            }
            EntryKind::OfsDelta {
                base_offset: offset - back,
            }
        }
        7 => {
            let len = hash.id_len();
            let id = bytes
                .get(pos..pos + len)
                .ok_or("the entry header is truncated")?;
            pos += len;
            EntryKind::RefDelta {
                base: ObjectId::from_bytes(id).expect("hash-sized slice"),
            }
        }
        0 | 5 => return Err("the entry has an invalid type (0 or 5)"),
        _ => unreachable!("three bits"),
    };
    Ok(EntryHeader {
        kind,
        size,
        header_len: pos,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_sizes_and_offsets() {
        // blob, size 0x1234 = 0b1_0010_0011_0100: low nibble 4, then 0x123 in 7-bit groups.
        let h = decode_entry_header(&[0xb4, 0xa3, 0x02], 100, HashKind::Sha1).unwrap();
        assert_eq!(h.kind, EntryKind::Base(ObjectKind::Blob));
        assert_eq!(h.size, 0x1234);
        assert_eq!(h.header_len, 3);
        // ofs-delta, size 5, back 128+1 = [0x81, 0x01] encodes ((1+1)<<7)|1 = 257? Check the rule:
        // bytes 0x80|0, 0x01 -> back = ((0 + 1) << 7) | 1 = 129.
        let h = decode_entry_header(&[0x65, 0x80, 0x01], 1000, HashKind::Sha1).unwrap();
        assert_eq!(
            h.kind,
            EntryKind::OfsDelta {
                base_offset: 1000 - 129
            }
        );
        assert!(decode_entry_header(&[0x65, 0x80, 0x01], 100, HashKind::Sha1).is_err());
        assert!(decode_entry_header(&[0x05], 100, HashKind::Sha1).is_err());
        assert!(decode_entry_header(&[0xb4], 100, HashKind::Sha1).is_err());
        assert!(decode_entry_header(&[0xff; 20], 100, HashKind::Sha1).is_err());
    }
}
