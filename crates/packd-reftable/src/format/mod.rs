//! Git's reftable file format, version 1 (SHA-1): the pieces every section shares.
//!
//! ```text
//! header (24 bytes)   'REFT' uint8(version = 1) uint24(block_size)
//!                     uint64(min_update_index) uint64(max_update_index)
//! ref_block*          the first one shares the file's first block with the header
//! ref_index*          'i' blocks: the last name of every ref block and the block's position
//! obj_block* obj_index*   (never written here; skipped when read)
//! log_block*          'g' blocks, zlib-deflated, unaligned
//! log_index*          'i' blocks over the log blocks
//! footer (68 bytes)   the header again, then uint64(ref_index_position)
//!                     uint64(obj_position << 5 | obj_id_len) uint64(obj_index_position)
//!                     uint64(log_position) uint64(log_index_position) uint32(CRC-32 of the above)
//! ```
//!
//! Multi-byte fixed-width fields are big-endian. Varints are the pack format's offset
//! encoding (see [`put_varint`]). A missing section has position 0 in the footer. The block
//! layout (records, restart points) is in [`block`]; the records in [`record`].

pub mod block;
pub mod reader;
pub mod record;
pub mod writer;

use crate::ReftableError;

/// `'REFT'`, at the start of the header and of the footer.
pub const MAGIC: &[u8; 4] = b"REFT";
/// The only version read and written: SHA-1 object names, 24-byte header.
pub const VERSION: u8 = 1;
/// The length of a version 1 header.
pub const HEADER_LEN: usize = 24;
/// The length of a version 1 footer.
pub const FOOTER_LEN: usize = 68;
/// The length of an object name (SHA-1).
pub const HASH_LEN: usize = 20;
/// The largest block (and the largest `block_len`) the format can describe: 2^24 - 1 bytes.
pub const MAX_BLOCK: usize = (1 << 24) - 1;

/// Block type of a ref block.
pub const BLOCK_REF: u8 = b'r';
/// Block type of an index block (over ref, obj or log blocks).
pub const BLOCK_INDEX: u8 = b'i';
/// Block type of a log block.
pub const BLOCK_LOG: u8 = b'g';
/// Block type of an obj block.
pub const BLOCK_OBJ: u8 = b'o';

/// The fixed fields of a header (the footer starts with the same 24 bytes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    /// Block alignment of ref blocks; 0 for an unaligned file.
    pub block_size: u32,
    /// The smallest update index of the table's records.
    pub min_update_index: u64,
    /// The largest update index of the table's records.
    pub max_update_index: u64,
}

impl Header {
    /// The 24 bytes of the header.
    pub fn encode(&self) -> [u8; HEADER_LEN] {
        let mut h = [0u8; HEADER_LEN];
        h[..4].copy_from_slice(MAGIC);
        h[4] = VERSION;
        h[5..8].copy_from_slice(&self.block_size.to_be_bytes()[1..]);
        h[8..16].copy_from_slice(&self.min_update_index.to_be_bytes());
        h[16..24].copy_from_slice(&self.max_update_index.to_be_bytes());
        h
    }

    /// Parses the 24 bytes at `offset` of `table`.
    pub fn decode(table: &str, offset: u64, h: &[u8]) -> Result<Header, ReftableError> {
        if h.len() < HEADER_LEN || &h[..4] != MAGIC {
            return Err(corrupt(table, offset, "no 'REFT' magic"));
        }
        if h[4] != VERSION {
            return Err(corrupt(
                table,
                offset + 4,
                format!("version {} (only version 1, SHA-1, is read)", h[4]),
            ));
        }
        Ok(Header {
            block_size: u32::from_be_bytes([0, h[5], h[6], h[7]]),
            min_update_index: be64(&h[8..16]),
            max_update_index: be64(&h[16..24]),
        })
    }
}

/// The footer's positions of the sections (0: the section is absent).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Footer {
    /// Position of the root ref index block.
    pub ref_index_position: u64,
    /// Position of the first obj block.
    pub obj_position: u64,
    /// Bytes of the abbreviated object names in obj blocks.
    pub obj_id_len: u8,
    /// Position of the root obj index block.
    pub obj_index_position: u64,
    /// Position of the first log block.
    pub log_position: u64,
    /// Position of the root log index block.
    pub log_index_position: u64,
}

impl Footer {
    /// The 68 bytes of the footer of a table with `header`.
    pub fn encode(&self, header: &Header) -> [u8; FOOTER_LEN] {
        let mut f = [0u8; FOOTER_LEN];
        f[..HEADER_LEN].copy_from_slice(&header.encode());
        f[24..32].copy_from_slice(&self.ref_index_position.to_be_bytes());
        let obj = (self.obj_position << 5) | u64::from(self.obj_id_len & 0x1f);
        f[32..40].copy_from_slice(&obj.to_be_bytes());
        f[40..48].copy_from_slice(&self.obj_index_position.to_be_bytes());
        f[48..56].copy_from_slice(&self.log_position.to_be_bytes());
        f[56..64].copy_from_slice(&self.log_index_position.to_be_bytes());
        let crc = crc32fast::hash(&f[..64]);
        f[64..].copy_from_slice(&crc.to_be_bytes());
        f
    }

    /// Parses and checks (magic, version, CRC-32) the footer `f` found at `offset` of `table`.
    pub fn decode(table: &str, offset: u64, f: &[u8]) -> Result<(Header, Footer), ReftableError> {
        if f.len() != FOOTER_LEN {
            return Err(corrupt(table, offset, "footer is cut short"));
        }
        let header = Header::decode(table, offset, &f[..HEADER_LEN])?;
        let crc = u32::from_be_bytes([f[64], f[65], f[66], f[67]]);
        if crc32fast::hash(&f[..64]) != crc {
            return Err(corrupt(table, offset + 64, "footer CRC-32 does not match"));
        }
        let obj = be64(&f[32..40]);
        Ok((
            header,
            Footer {
                ref_index_position: be64(&f[24..32]),
                obj_position: obj >> 5,
                obj_id_len: (obj & 0x1f) as u8,
                obj_index_position: be64(&f[40..48]),
                log_position: be64(&f[48..56]),
                log_index_position: be64(&f[56..64]),
            },
        ))
    }
}

/// The error for bad bytes at `offset` of `table`.
pub(crate) fn corrupt(table: &str, offset: u64, what: impl Into<String>) -> ReftableError {
    ReftableError::Corrupt {
        table: table.to_string(),
        offset,
        what: what.into(),
    }
}

/// A big-endian u64 of 8 bytes.
pub(crate) fn be64(b: &[u8]) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[..8]);
    u64::from_be_bytes(a)
}

/// Appends `v` as a varint: 7 bits a byte, most significant first, every byte but the last
/// with its top bit set, and each continuation adding one (so that every value has one
/// encoding), as pack files encode delta offsets.
pub fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    let mut buf = [0u8; 10];
    let mut i = buf.len() - 1;
    buf[i] = (v & 0x7f) as u8;
    loop {
        v >>= 7;
        if v == 0 {
            break;
        }
        v -= 1;
        i -= 1;
        buf[i] = 0x80 | (v & 0x7f) as u8;
    }
    out.extend_from_slice(&buf[i..]);
}

/// A reader of the bytes of one block, whose errors name the table and the file offset.
pub(crate) struct Cursor<'a> {
    /// The bytes read from.
    pub buf: &'a [u8],
    /// The next byte to read, as an index into `buf`.
    pub pos: usize,
    /// The table, for errors.
    pub table: &'a str,
    /// The file offset of `buf[0]` (for a log block: of its header; offsets inside its
    /// inflated bytes are reported as the block's offset plus the inflated offset).
    pub base: u64,
}

impl<'a> Cursor<'a> {
    /// The error for bad bytes at the cursor.
    pub fn error(&self, what: impl Into<String>) -> ReftableError {
        corrupt(self.table, self.base + self.pos as u64, what)
    }

    /// The next `n` bytes.
    pub fn take(&mut self, n: usize, what: &str) -> Result<&'a [u8], ReftableError> {
        if n > self.buf.len() - self.pos {
            return Err(self.error(format!(
                "{what} of {n} bytes runs past the end of its block"
            )));
        }
        let s = &self.buf[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }

    /// The next varint.
    pub fn varint(&mut self, what: &str) -> Result<u64, ReftableError> {
        let start = self.pos;
        let mut byte = *self.take(1, what)?.first().unwrap_or(&0);
        let mut val = u64::from(byte & 0x7f);
        while byte & 0x80 != 0 {
            byte = self.take(1, what)?[0];
            val = val.checked_add(1).filter(|v| v >> 57 == 0).ok_or_else(|| {
                corrupt(
                    self.table,
                    self.base + start as u64,
                    format!("{what}: varint overflows 64 bits"),
                )
            })?;
            val = (val << 7) | u64::from(byte & 0x7f);
        }
        Ok(val)
    }

    /// The next varint, as a length of at most what is left of the block.
    pub fn len(&mut self, what: &str) -> Result<usize, ReftableError> {
        let at = self.pos;
        let v = self.varint(what)?;
        if v > (self.buf.len() - self.pos) as u64 {
            return Err(corrupt(
                self.table,
                self.base + at as u64,
                format!("{what} {v} is longer than the rest of its block"),
            ));
        }
        Ok(v as usize)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varints_round_trip_and_match_the_pack_encoding() {
        for v in [0u64, 1, 127, 128, 255, 16511, 16512, 1 << 40, u64::MAX] {
            let mut out = Vec::new();
            put_varint(&mut out, v);
            let mut c = Cursor {
                buf: &out,
                pos: 0,
                table: "t",
                base: 0,
            };
            assert_eq!(c.varint("v").unwrap(), v);
            assert_eq!(c.pos, out.len());
        }
        // 128 is 0x80 0x00 in the offset encoding (not 0x81 0x00 as in LEB128).
        let mut out = Vec::new();
        put_varint(&mut out, 128);
        assert_eq!(out, [0x80, 0x00]);
        let bad = [0xffu8; 11];
        let mut c = Cursor {
            buf: &bad,
            pos: 0,
            table: "t",
            base: 7,
        };
        let err = c.varint("x").unwrap_err().to_string();
        assert!(err.contains("t: offset 7"), "{err}");
    }
}
