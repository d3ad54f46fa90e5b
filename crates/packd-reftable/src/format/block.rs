//! One block of a table: prefix-compressed records and the restart table that lets a reader
//! binary-search them.
//!
//! ```text
//! block_type ('r' ref, 'i' index, 'g' log, 'o' obj)
//! uint24(block_len)            bytes of the block up to the padding; a log block's
//!                              inflated length (header included)
//! record+                      a log block's records and restarts are zlib-deflated
//! uint24(restart_offset)+      offsets (from the block's start) of records whose key is
//!                              not prefix-compressed; sorted
//! uint16(restart_count)
//! padding?                     NULs up to block_size (aligned ref blocks only)
//! ```
//!
//! The first block of a file shares its bytes with the 24-byte file header: its `block_len`
//! and its restart offsets count from the start of the file, so its first record is at 28.

use super::record::{LogRecord, RefValue};
use super::{corrupt, put_varint, Cursor, BLOCK_INDEX, BLOCK_LOG, BLOCK_REF, MAX_BLOCK};
use crate::ReftableError;
use bytes::Bytes;

/// Builds one block: records added in key order, restarts every `restart_interval` records.
pub(crate) struct BlockWriter {
    typ: u8,
    /// The block's bytes from its start (for the first block, from the file's start).
    buf: Vec<u8>,
    /// Where the block header is in `buf` (24 in the first block, else 0).
    header_at: usize,
    restarts: Vec<u32>,
    last_key: Vec<u8>,
    entries: usize,
    limit: usize,
    restart_interval: usize,
}

impl BlockWriter {
    /// A block of `typ` of at most `limit` bytes, after `prefix` (the file header of the
    /// first block, else nothing).
    pub fn new(typ: u8, prefix: &[u8], limit: usize, restart_interval: usize) -> BlockWriter {
        let mut buf = prefix.to_vec();
        let header_at = buf.len();
        buf.extend_from_slice(&[typ, 0, 0, 0]);
        BlockWriter {
            typ,
            buf,
            header_at,
            restarts: Vec::new(),
            last_key: Vec::new(),
            entries: 0,
            limit,
            restart_interval: restart_interval.max(1),
        }
    }

    /// Whether no record was added.
    pub fn is_empty(&self) -> bool {
        self.entries == 0
    }

    /// The key of the last record added.
    pub fn last_key(&self) -> &[u8] {
        &self.last_key
    }

    /// Adds a record of `key` (greater than the last one) with `value_type` and the bytes of
    /// its value; `false`, changing nothing, when it does not fit within the limit.
    pub fn add(&mut self, key: &[u8], value_type: u8, value: &[u8]) -> bool {
        let restart = self.entries.is_multiple_of(self.restart_interval);
        let prefix = if restart {
            0
        } else {
            key.iter()
                .zip(&self.last_key)
                .take_while(|(a, b)| a == b)
                .count()
        };
        let mut rec = Vec::with_capacity(key.len() - prefix + value.len() + 8);
        put_varint(&mut rec, prefix as u64);
        put_varint(
            &mut rec,
            (((key.len() - prefix) as u64) << 3) | u64::from(value_type),
        );
        rec.extend_from_slice(&key[prefix..]);
        rec.extend_from_slice(value);
        let restarts = self.restarts.len() + usize::from(restart);
        let len = self.buf.len() + rec.len() + 3 * restarts + 2;
        if len > self.limit || len > MAX_BLOCK || restarts > usize::from(u16::MAX) {
            return false;
        }
        if restart {
            self.restarts.push(self.buf.len() as u32);
        }
        self.buf.extend_from_slice(&rec);
        self.last_key.clear();
        self.last_key.extend_from_slice(key);
        self.entries += 1;
        true
    }

    /// The block's bytes (no padding): records, restart table, and the header's length.
    pub fn finish(mut self) -> Vec<u8> {
        for r in &self.restarts {
            self.buf.extend_from_slice(&r.to_be_bytes()[1..]);
        }
        self.buf
            .extend_from_slice(&(self.restarts.len() as u16).to_be_bytes());
        let len = self.buf.len() as u32;
        let h = self.header_at;
        self.buf[h + 1..h + 4].copy_from_slice(&len.to_be_bytes()[1..]);
        debug_assert!(self.typ == self.buf[h]);
        self.buf
    }
}

/// What follows the key of a record, by block type.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Payload {
    /// A ref record: update index delta and value.
    Ref { delta: u64, value: RefValue },
    /// An index record: the position of the block it describes.
    Index(u64),
    /// A log record.
    Log(LogRecord),
}

/// A block read from a table, checked enough to walk its records without reading outside it.
#[derive(Debug, Clone)]
pub(crate) struct Block {
    /// The table's name, for errors.
    pub table: std::sync::Arc<str>,
    /// The block type.
    pub typ: u8,
    /// The block's bytes from its start (for the first block, from the file's start); a log
    /// block's are its header and the inflated rest.
    pub bytes: Bytes,
    /// The file offset of `bytes[0]`.
    pub base: u64,
    /// Offset in `bytes` of the first record.
    pub records_at: usize,
    /// Offset in `bytes` of the restart table (the end of the records).
    pub restarts_at: usize,
    /// Number of restart points.
    pub restart_count: usize,
    /// Where the next block of the section starts in the file.
    pub next: u64,
}

/// A position in a block: the offset of the next record and the key of the one before it.
#[derive(Debug, Clone, Default)]
pub(crate) struct BlockPos {
    pub at: usize,
    pub key: Vec<u8>,
}

impl Block {
    /// Checks the block's restart table: `bytes` hold the whole block (`block_len` bytes)
    /// with its header at `header_at`.
    pub fn parse(
        table: std::sync::Arc<str>,
        bytes: Bytes,
        base: u64,
        header_at: usize,
        next: u64,
    ) -> Result<Block, ReftableError> {
        let len = bytes.len();
        let records_at = header_at + 4;
        if len < records_at + 2 {
            return Err(corrupt(&table, base, "block is too short for its header"));
        }
        let restart_count = usize::from(u16::from_be_bytes([bytes[len - 2], bytes[len - 1]]));
        let table_len = 3 * restart_count + 2;
        if restart_count == 0 || len - records_at < table_len {
            return Err(corrupt(
                &table,
                base + header_at as u64,
                format!("block of {len} bytes cannot hold {restart_count} restart points"),
            ));
        }
        Ok(Block {
            typ: bytes[header_at],
            table,
            records_at,
            restarts_at: len - table_len,
            restart_count,
            bytes,
            base,
            next,
        })
    }

    /// The offset of restart point `i`, checked to be inside the records.
    fn restart(&self, i: usize) -> Result<usize, ReftableError> {
        let p = self.restarts_at + 3 * i;
        let b = &self.bytes[p..p + 3];
        let off = (usize::from(b[0]) << 16) | (usize::from(b[1]) << 8) | usize::from(b[2]);
        if off < self.records_at || off >= self.restarts_at {
            return Err(corrupt(
                &self.table,
                self.base + p as u64,
                format!("restart offset {off} is outside the block's records"),
            ));
        }
        Ok(off)
    }

    /// The position of the first record.
    pub fn start(&self) -> BlockPos {
        BlockPos {
            at: self.records_at,
            key: Vec::new(),
        }
    }

    /// Decodes the record at `pos` (if any is left), moving `pos` past it: its key and
    /// payload. `min_update_index` is unused outside ref blocks.
    pub fn next(&self, pos: &mut BlockPos) -> Result<Option<(Vec<u8>, Payload)>, ReftableError> {
        if pos.at >= self.restarts_at {
            return Ok(None);
        }
        let mut c = Cursor {
            buf: &self.bytes[..self.restarts_at],
            pos: pos.at,
            table: &self.table,
            base: self.base,
        };
        let prefix = c.varint("key prefix length")?;
        if prefix > pos.key.len() as u64 {
            return Err(c.error(format!(
                "key prefix length {prefix} is longer than the previous key ({} bytes)",
                pos.key.len()
            )));
        }
        let suffix_and_type = c.varint("key suffix length")?;
        let suffix = (suffix_and_type >> 3) as usize;
        let value_type = (suffix_and_type & 7) as u8;
        if suffix as u64 != suffix_and_type >> 3 {
            return Err(c.error("key suffix length overflows"));
        }
        let suffix = c.take(suffix, "key suffix")?;
        let mut key = Vec::with_capacity(prefix as usize + suffix.len());
        key.extend_from_slice(&pos.key[..prefix as usize]);
        key.extend_from_slice(suffix);
        if key <= pos.key && pos.at != self.records_at {
            return Err(c.error("keys are not in ascending order"));
        }
        let payload = match self.typ {
            BLOCK_REF => {
                let delta = c.varint("update index delta")?;
                Payload::Ref {
                    delta,
                    value: RefValue::decode(&mut c, value_type)?,
                }
            }
            BLOCK_INDEX => Payload::Index(c.varint("block position")?),
            BLOCK_LOG => Payload::Log(LogRecord::decode(&mut c, &key, value_type)?),
            t => {
                return Err(corrupt(
                    &self.table,
                    self.base,
                    format!("records of block type {:?} are not read", t as char),
                ))
            }
        };
        pos.at = c.pos;
        pos.key.clone_from(&key);
        Ok(Some((key, payload)))
    }

    /// The position of the first record whose key is not less than `key` (past the last
    /// record if there is none), found by binary search over the restart points.
    pub fn seek(&self, key: &[u8]) -> Result<BlockPos, ReftableError> {
        // The first restart whose key is greater than `key`; the scan starts at the one
        // before it.
        let (mut lo, mut hi) = (0, self.restart_count);
        while lo < hi {
            let mid = (lo + hi) / 2;
            let mut p = BlockPos {
                at: self.restart(mid)?,
                key: Vec::new(),
            };
            let Some((k, _)) = self.next(&mut p)? else {
                return Err(corrupt(
                    &self.table,
                    self.base,
                    "restart point has no record",
                ));
            };
            if k.as_slice() > key {
                hi = mid;
            } else {
                lo = mid + 1;
            }
        }
        let mut pos = if lo == 0 {
            self.start()
        } else {
            BlockPos {
                at: self.restart(lo - 1)?,
                key: Vec::new(),
            }
        };
        loop {
            let before = pos.clone();
            match self.next(&mut pos)? {
                None => return Ok(pos),
                Some((k, _)) if k.as_slice() >= key => return Ok(before),
                Some(_) => {}
            }
        }
    }
}
