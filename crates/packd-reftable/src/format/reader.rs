//! Reads one table by ranges of its blob: the header and footer when opened, the ref and log
//! indexes once, then only the blocks a lookup or a scan needs.
//!
//! ```text
//! 0 .. 24                         header
//! 0 .. ref_end                    ref blocks (ref_end: the first of ref_index_position,
//!                                 obj_position, log_position that is set, else the footer)
//! ref_index_position ..           root ref index block (lower levels, if any, before it)
//! log_position .. log_end         log blocks (log_end: log_index_position, else the footer)
//! log_index_position ..           root log index block
//! len - 68 .. len                 footer
//! ```
//!
//! Every position and length read from the file is checked against the section it must lie
//! in before anything is read or allocated for it (a block is at most 16 MiB), and every
//! error names the table and the offset of the bad bytes. Obj blocks are never read.

use super::block::{Block, BlockPos, Payload};
use super::record::{log_key, split_log_key, LogRecord, RefRecord};
use super::{corrupt, Footer, Header, BLOCK_INDEX, BLOCK_LOG, BLOCK_REF, FOOTER_LEN, HEADER_LEN};
use crate::ReftableError;
use bytes::Bytes;
use flate2::{Decompress, FlushDecompress, Status};
use packd_storage::Blob;
use std::sync::Arc;

/// The most levels of index a lookup walks through (git writes 1 or 2).
const MAX_INDEX_LEVELS: usize = 8;

/// One table, opened: its header, footer and indexes, and the blob its blocks are read from.
#[derive(Debug)]
pub struct Table {
    name: Arc<str>,
    blob: Arc<dyn Blob>,
    header: Header,
    footer: Footer,
    ref_end: u64,
    /// Where the ref index section ends (the next section, or the footer).
    ref_index_end: u64,
    log_end: u64,
    data_end: u64,
    ref_index: Option<Block>,
    log_index: Option<Block>,
}

/// Which section a seek is in.
#[derive(Clone, Copy)]
enum Section {
    Refs,
    Logs,
}

impl Table {
    /// Opens the table in `blob`: reads and checks its header and footer, and its indexes.
    pub fn open(blob: Arc<dyn Blob>) -> Result<Table, ReftableError> {
        let name: Arc<str> = blob.name().into();
        let len = blob.len();
        if len < (HEADER_LEN + FOOTER_LEN) as u64 {
            return Err(corrupt(
                &name,
                0,
                format!("{len} bytes are too short for a header and a footer"),
            ));
        }
        let header = Header::decode(&name, 0, &blob.read(0..HEADER_LEN as u64)?)?;
        let data_end = len - FOOTER_LEN as u64;
        let (footer_header, footer) = Footer::decode(&name, data_end, &blob.read(data_end..len)?)?;
        if footer_header != header {
            return Err(corrupt(
                &name,
                data_end,
                "footer's header differs from the file's",
            ));
        }
        // The sections, in file order; each set position inside the data and after the one
        // before it.
        let positions = [
            (footer.ref_index_position, 24, "ref index position"),
            (footer.obj_position, 32, "obj position"),
            (footer.obj_index_position, 40, "obj index position"),
            (footer.log_position, 48, "log position"),
            (footer.log_index_position, 56, "log index position"),
        ];
        let mut last = 0;
        for (pos, field, what) in positions {
            if pos == 0 {
                continue;
            }
            if pos < HEADER_LEN as u64 || pos >= data_end || pos < last {
                return Err(corrupt(
                    &name,
                    data_end + field,
                    format!("{what} {pos} is outside the table's blocks or out of order"),
                ));
            }
            last = pos;
        }
        if footer.log_index_position != 0 && footer.log_position == 0 {
            return Err(corrupt(
                &name,
                data_end + 56,
                "log index without log blocks",
            ));
        }
        let first_set = |ps: &[u64]| ps.iter().copied().find(|&p| p != 0).unwrap_or(data_end);
        let ref_end = first_set(&[
            footer.ref_index_position,
            footer.obj_position,
            footer.log_position,
        ]);
        let ref_index_end = first_set(&[footer.obj_position, footer.log_position]);
        let log_end = first_set(&[footer.log_index_position]);
        let mut table = Table {
            name,
            blob,
            header,
            footer,
            ref_end,
            ref_index_end,
            log_end,
            data_end,
            ref_index: None,
            log_index: None,
        };
        if footer.ref_index_position != 0 {
            let b = table.read_block(footer.ref_index_position, ref_index_end)?;
            table.ref_index = Some(table.expect_type(b, BLOCK_INDEX)?);
        }
        if footer.log_index_position != 0 {
            let b = table.read_block(footer.log_index_position, data_end)?;
            table.log_index = Some(table.expect_type(b, BLOCK_INDEX)?);
        }
        Ok(table)
    }

    /// The table's name (its blob's), as errors give it.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The table's size in bytes.
    pub fn len(&self) -> u64 {
        self.blob.len()
    }

    /// Whether the table has no records (a header and a footer only).
    pub fn is_empty(&self) -> bool {
        self.ref_end <= HEADER_LEN as u64 && self.footer.log_position == 0
    }

    /// The smallest update index of the table's records (from its header).
    pub fn min_update_index(&self) -> u64 {
        self.header.min_update_index
    }

    /// The largest update index of the table's records (from its header).
    pub fn max_update_index(&self) -> u64 {
        self.header.max_update_index
    }

    /// The header's block size (0: unaligned).
    pub fn block_size(&self) -> u32 {
        self.header.block_size
    }

    /// The ref record of `name` in this table, tombstones included (`None`: the table says
    /// nothing about it).
    pub fn read_ref(&self, name: &str) -> Result<Option<RefRecord>, ReftableError> {
        let mut it = self.refs_from(name)?;
        match it.next() {
            Some(Ok(r)) if r.name == name => Ok(Some(r)),
            Some(Err(e)) => Err(e),
            _ => Ok(None),
        }
    }

    /// All ref records, tombstones included, in name order.
    pub fn refs(&self) -> RefIter<'_> {
        RefIter {
            records: Records::at(self, Section::Refs, None),
        }
    }

    /// The ref records from the first whose name is not less than `start`, in name order.
    pub fn refs_from(&self, start: &str) -> Result<RefIter<'_>, ReftableError> {
        let found = self.seek(Section::Refs, start.as_bytes())?;
        Ok(RefIter {
            records: Records::at(self, Section::Refs, found),
        })
    }

    /// All log records, in key order (by ref name, newest first within a ref).
    pub fn logs(&self) -> LogIter<'_> {
        LogIter {
            records: Records::at(self, Section::Logs, None),
            only: None,
        }
    }

    /// The log records of ref `name`, newest first.
    pub fn logs_of(&self, name: &str) -> Result<LogIter<'_>, ReftableError> {
        let found = self.seek(Section::Logs, &log_key(name, u64::MAX))?;
        Ok(LogIter {
            records: Records::at(self, Section::Logs, found),
            only: Some(name.as_bytes().to_vec()),
        })
    }

    /// The block at `pos`, with `end` the end of the section it must lie in.
    fn read_block(&self, pos: u64, end: u64) -> Result<Block, ReftableError> {
        let header_at = if pos == 0 { HEADER_LEN as u64 } else { 0 };
        if pos + header_at + 4 > end {
            return Err(corrupt(
                &self.name,
                pos,
                "block header runs past the end of its section",
            ));
        }
        let h = self.blob.read(pos + header_at..pos + header_at + 4)?;
        let block_len = u64::from(h[1]) << 16 | u64::from(h[2]) << 8 | u64::from(h[3]);
        if h[0] == BLOCK_LOG && pos != 0 {
            return self.read_log_block(pos, end, block_len as usize, &h);
        }
        if block_len > end - pos {
            return Err(corrupt(
                &self.name,
                pos + header_at + 1,
                format!("block length {block_len} runs past the end of its section at {end}"),
            ));
        }
        let block_size = u64::from(self.header.block_size);
        let next = if h[0] == BLOCK_REF && block_size > 0 {
            if block_len > block_size {
                return Err(corrupt(
                    &self.name,
                    pos + header_at + 1,
                    format!(
                        "ref block of {block_len} bytes in a table of {block_size}-byte blocks"
                    ),
                ));
            }
            pos + block_size
        } else {
            pos + block_len
        };
        let bytes = self.blob.read(pos..pos + block_len)?;
        Block::parse(self.name.clone(), bytes, pos, header_at as usize, next)
    }

    /// The log block at `pos` whose header `h` gives its inflated length: inflates what
    /// follows the header, reading the deflated bytes in ranges until the zlib stream ends.
    fn read_log_block(
        &self,
        pos: u64,
        end: u64,
        block_len: usize,
        h: &[u8],
    ) -> Result<Block, ReftableError> {
        let avail = end - pos - 4;
        // Deflate expands by at most 1032:1: a longer claim is a lie, not a reason to
        // allocate.
        if block_len < 6 || block_len as u64 > avail.saturating_mul(1032) + 64 {
            return Err(corrupt(
                &self.name,
                pos + 1,
                format!("log block length {block_len} cannot come from {avail} deflated bytes"),
            ));
        }
        let mut out = vec![0u8; block_len];
        out[..4].copy_from_slice(h);
        let mut produced = 4;
        let mut at = pos + 4;
        let mut z = Decompress::new(true);
        let chunk = (block_len + block_len / 512 + 64) as u64;
        loop {
            if at >= end {
                return Err(corrupt(
                    &self.name,
                    at,
                    "deflated log block runs past its section",
                ));
            }
            let input = self.blob.read(at..(at + chunk).min(end))?;
            let (in0, out0) = (z.total_in(), z.total_out());
            let status = z
                .decompress(&input, &mut out[produced..], FlushDecompress::None)
                .map_err(|e| corrupt(&self.name, at, format!("bad deflated log block: {e}")))?;
            let used = z.total_in() - in0;
            let made = (z.total_out() - out0) as usize;
            at += used;
            produced += made;
            if status == Status::StreamEnd {
                break;
            }
            if used == 0 && made == 0 {
                return Err(corrupt(
                    &self.name,
                    at,
                    format!("log block inflates to more than its length {block_len}"),
                ));
            }
        }
        if produced != block_len {
            return Err(corrupt(
                &self.name,
                pos + 1,
                format!("log block inflates to {produced} bytes, its header says {block_len}"),
            ));
        }
        Block::parse(self.name.clone(), Bytes::from(out), pos, 0, at)
    }

    /// `block`, if it is of type `typ`.
    fn expect_type(&self, block: Block, typ: u8) -> Result<Block, ReftableError> {
        if block.typ != typ {
            return Err(corrupt(
                &self.name,
                block.base,
                format!(
                    "block of type {:?} where a {:?} block belongs",
                    block.typ as char, typ as char
                ),
            ));
        }
        Ok(block)
    }

    /// Where a section starts and ends, the type of its blocks, and its index.
    fn section(&self, s: Section) -> (u64, u64, u8, Option<&Block>) {
        match s {
            Section::Refs if self.ref_end > HEADER_LEN as u64 => {
                (0, self.ref_end, BLOCK_REF, self.ref_index.as_ref())
            }
            Section::Refs => (0, 0, BLOCK_REF, None),
            Section::Logs if self.footer.log_position != 0 => (
                self.footer.log_position,
                self.log_end,
                BLOCK_LOG,
                self.log_index.as_ref(),
            ),
            Section::Logs => (0, 0, BLOCK_LOG, None),
        }
    }

    /// The block of section `s` holding the first key not less than `key`, and the position
    /// of that key in it; `None` when every key of the section is less.
    fn seek(&self, s: Section, key: &[u8]) -> Result<Option<(Block, BlockPos)>, ReftableError> {
        let (start, end, typ, index) = self.section(s);
        if start >= end {
            return Ok(None);
        }
        // Index-pointed blocks lie before the root index (lower levels) or in the section.
        let bound = match s {
            Section::Refs => self.ref_index_end,
            Section::Logs => self.data_end,
        };
        if let Some(index) = index {
            let mut block = index.clone();
            for _ in 0..MAX_INDEX_LEVELS {
                let mut pos = block.seek(key)?;
                let at = match block.next(&mut pos)? {
                    None => return Ok(None),
                    Some((_, Payload::Index(at))) => at,
                    Some(_) => {
                        return Err(corrupt(
                            &self.name,
                            block.base,
                            "index holds a non-index record",
                        ))
                    }
                };
                let next = self.read_block(at, bound)?;
                if next.typ == BLOCK_INDEX {
                    block = next;
                    continue;
                }
                let next = self.expect_type(next, typ)?;
                let pos = next.seek(key)?;
                return Ok(Some((next, pos)));
            }
            return Err(corrupt(
                &self.name,
                block.base,
                format!("index has more than {MAX_INDEX_LEVELS} levels"),
            ));
        }
        // No index: a few blocks, scanned.
        let mut at = start;
        while at < end {
            let block = self.read_block(at, end)?;
            if block.typ != typ {
                return Ok(None);
            }
            let pos = block.seek(key)?;
            if pos.at < block.restarts_at {
                return Ok(Some((block, pos)));
            }
            at = block.next;
        }
        Ok(None)
    }
}

/// Records of a section, block after block, from a position.
struct Records<'a> {
    table: &'a Table,
    block: Option<Block>,
    pos: BlockPos,
    end: u64,
    typ: u8,
    /// Whether iteration must start at the first block (nothing was sought).
    from_start: Option<u64>,
}

impl<'a> Records<'a> {
    /// Records of section `s` from `found` (a seek's result), or from its start.
    fn at(table: &'a Table, s: Section, found: Option<(Block, BlockPos)>) -> Records<'a> {
        let (start, end, typ, _) = table.section(s);
        let (block, pos, from_start) = match found {
            Some((b, p)) => (Some(b), p, None),
            None => (None, BlockPos::default(), Some(start).filter(|&s| s < end)),
        };
        Records {
            table,
            block,
            pos,
            end,
            typ,
            from_start,
        }
    }

    /// Reads the block at `at`, or ends the iteration at the end of the section or at a
    /// block of another type (lower levels of an index after the ref blocks).
    fn load(&mut self, at: u64) -> Result<(), ReftableError> {
        self.block = None;
        if at < self.end {
            let b = self.table.read_block(at, self.end)?;
            if b.typ == self.typ {
                self.pos = b.start();
                self.block = Some(b);
            }
        }
        Ok(())
    }

    fn next_record(&mut self) -> Result<Option<(Vec<u8>, Payload)>, ReftableError> {
        if let Some(start) = self.from_start.take() {
            self.load(start)?;
        }
        while let Some(block) = &self.block {
            if let Some(r) = block.next(&mut self.pos)? {
                return Ok(Some(r));
            }
            let next = block.next;
            self.load(next)?;
        }
        Ok(None)
    }
}

/// The ref records of a table, in name order (see [`Table::refs`]).
pub struct RefIter<'a> {
    records: Records<'a>,
}

impl Iterator for RefIter<'_> {
    type Item = Result<RefRecord, ReftableError>;

    fn next(&mut self) -> Option<Self::Item> {
        let r = (|| {
            let Some((key, payload)) = self.records.next_record()? else {
                return Ok(None);
            };
            let t = self.records.table;
            let at = self.records.block.as_ref().map_or(0, |b| b.base);
            let Payload::Ref { delta, value } = payload else {
                return Err(corrupt(
                    &t.name,
                    at,
                    "ref block holds a record of another kind",
                ));
            };
            let name = String::from_utf8(key)
                .map_err(|_| corrupt(&t.name, at, "ref name is not UTF-8"))?;
            let update_index = t
                .header
                .min_update_index
                .checked_add(delta)
                .ok_or_else(|| {
                    corrupt(&t.name, at, format!("update index delta {delta} overflows"))
                })?;
            Ok(Some(RefRecord {
                name,
                update_index,
                value,
            }))
        })();
        end_on_error(r, &mut self.records.block)
    }
}

/// The log records of a table, in key order (see [`Table::logs`], [`Table::logs_of`]).
pub struct LogIter<'a> {
    records: Records<'a>,
    only: Option<Vec<u8>>,
}

impl Iterator for LogIter<'_> {
    type Item = Result<LogRecord, ReftableError>;

    fn next(&mut self) -> Option<Self::Item> {
        let r = (|| {
            let Some((key, payload)) = self.records.next_record()? else {
                return Ok(None);
            };
            if let Some(only) = &self.only {
                if split_log_key(&key).map(|(n, _)| n) != Some(only.as_slice()) {
                    return Ok(None);
                }
            }
            let Payload::Log(log) = payload else {
                let t = self.records.table;
                return Err(corrupt(
                    &t.name,
                    0,
                    "log block holds a record of another kind",
                ));
            };
            Ok(Some(log))
        })();
        end_on_error(r, &mut self.records.block)
    }
}

/// An iterator's item: after an error or the end, the iteration stops.
fn end_on_error<T>(
    r: Result<Option<T>, ReftableError>,
    block: &mut Option<Block>,
) -> Option<Result<T, ReftableError>> {
    match r {
        Ok(Some(t)) => Some(Ok(t)),
        Ok(None) => {
            *block = None;
            None
        }
        Err(e) => {
            *block = None;
            Some(Err(e))
        }
    }
}
