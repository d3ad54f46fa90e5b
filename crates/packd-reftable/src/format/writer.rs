//! Writes one table (version 1, SHA-1) from its ref and log records.
//!
//! ```text
//! header | ref blocks, each padded with NULs to block_size but the last
//!        | ref index (one 'i' block, when there is more than one ref block)
//!        | log blocks (deflated, unaligned) | log index (when more than one log block)
//!        | footer
//! ```
//!
//! No obj blocks are written (the footer's obj fields are 0): readers looking refs up by
//! object name scan the refs, which the format allows. A table without refs has its first log
//! block right after the header (a log-only table); one without either is a header and a
//! footer. The index is one level, allowed to be larger than `block_size` (never than the
//! format's 16 MiB), so that a lookup reads the index and one block.

use super::block::BlockWriter;
use super::record::{LogRecord, RefRecord};
use super::{put_varint, Footer, Header, BLOCK_INDEX, BLOCK_LOG, BLOCK_REF, HEADER_LEN, MAX_BLOCK};
use crate::ReftableError;
use flate2::write::ZlibEncoder;
use std::io::Write;

/// How a table is laid out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WriteOptions {
    /// The size ref blocks are padded to (git's default is 4096); at most 2^24 - 1.
    pub block_size: u32,
    /// Records between restart points (git writes 16).
    pub restart_interval: usize,
}

impl Default for WriteOptions {
    fn default() -> Self {
        WriteOptions {
            block_size: 4096,
            restart_interval: 16,
        }
    }
}

/// The bytes of a table of `refs` and `logs` (in any order; names, and log keys, must be
/// unique) whose update indexes all lie in `min_update_index..=max_update_index`.
pub fn write_table(
    opts: &WriteOptions,
    min_update_index: u64,
    max_update_index: u64,
    refs: &[RefRecord],
    logs: &[LogRecord],
) -> Result<Vec<u8>, ReftableError> {
    let block_size = opts.block_size as usize;
    if !(256..=MAX_BLOCK).contains(&block_size) {
        return Err(invalid(format!(
            "block size {block_size} is outside 256..={MAX_BLOCK}"
        )));
    }
    if min_update_index > max_update_index {
        return Err(invalid(format!(
            "update index range {min_update_index}..={max_update_index} is empty"
        )));
    }
    let in_range = |i: u64| (min_update_index..=max_update_index).contains(&i);
    let mut refs: Vec<&RefRecord> = refs.iter().collect();
    refs.sort_by(|a, b| a.name.cmp(&b.name));
    for w in refs.windows(2) {
        if w[0].name == w[1].name {
            return Err(invalid(format!("ref {} is written twice", w[0].name)));
        }
    }
    if let Some(r) = refs.iter().find(|r| !in_range(r.update_index)) {
        return Err(invalid(format!(
            "ref {} has update index {} outside {min_update_index}..={max_update_index}",
            r.name, r.update_index
        )));
    }
    let mut logs: Vec<(Vec<u8>, &LogRecord)> = logs.iter().map(|l| (l.key(), l)).collect();
    logs.sort_by(|a, b| a.0.cmp(&b.0));
    for w in logs.windows(2) {
        if w[0].0 == w[1].0 {
            return Err(invalid(format!(
                "log of {} at update index {} is written twice",
                w[0].1.ref_name, w[0].1.update_index
            )));
        }
    }
    if let Some((_, l)) = logs.iter().find(|(_, l)| !in_range(l.update_index)) {
        return Err(invalid(format!(
            "log of {} has update index {} outside {min_update_index}..={max_update_index}",
            l.ref_name, l.update_index
        )));
    }
    if let Some((_, l)) = logs
        .iter()
        .find(|(_, l)| l.ref_name.as_bytes().contains(&0))
    {
        return Err(invalid(format!("ref name {:?} holds a NUL", l.ref_name)));
    }

    let header = Header {
        block_size: opts.block_size,
        min_update_index,
        max_update_index,
    };
    let mut out = Vec::new();
    let mut footer = Footer::default();

    // Ref blocks, padded to the block size, and their index.
    let mut index = Vec::new();
    let mut block: Option<BlockWriter> = None;
    let mut value = Vec::new();
    for r in &refs {
        value.clear();
        put_varint(&mut value, r.update_index - min_update_index);
        r.value.encode(&mut value);
        let key = r.name.as_bytes();
        loop {
            let b = block.get_or_insert_with(|| {
                let h = header.encode();
                let prefix: &[u8] = if out.is_empty() { &h } else { &[] };
                BlockWriter::new(BLOCK_REF, prefix, block_size, opts.restart_interval)
            });
            if b.add(key, r.value.value_type(), &value) {
                break;
            }
            if b.is_empty() {
                return Err(invalid(format!(
                    "ref {} does not fit in a block of {block_size} bytes",
                    r.name
                )));
            }
            flush_ref_block(&mut out, block.take(), block_size, &mut index);
        }
    }
    flush_ref_block(&mut out, block.take(), block_size, &mut index);
    // The last ref block is not padded (as git writes it): the index, the logs or the
    // footer follow it directly.
    if index.len() > 1 {
        footer.ref_index_position = out.len() as u64;
        write_index(&mut out, &index, opts.restart_interval)?;
    }
    if out.is_empty() {
        out.extend_from_slice(&header.encode());
    }

    // Log blocks, deflated, and their index.
    if !logs.is_empty() {
        footer.log_position = out.len() as u64;
        let mut index = Vec::new();
        let mut block: Option<BlockWriter> = None;
        for (key, l) in &logs {
            value.clear();
            let log_type = l.encode(&mut value);
            loop {
                let b = block.get_or_insert_with(|| {
                    BlockWriter::new(BLOCK_LOG, &[], block_size, opts.restart_interval)
                });
                if b.add(key, log_type, &value) {
                    break;
                }
                if b.is_empty() {
                    // A record longer than a block gets a block of its own.
                    let mut big = BlockWriter::new(BLOCK_LOG, &[], MAX_BLOCK, 1);
                    if !big.add(key, log_type, &value) {
                        return Err(invalid(format!(
                            "log of {} does not fit in a block of {MAX_BLOCK} bytes",
                            l.ref_name
                        )));
                    }
                    block = Some(big);
                    break;
                }
                flush_log_block(&mut out, block.take(), &mut index)?;
            }
        }
        flush_log_block(&mut out, block.take(), &mut index)?;
        if index.len() > 1 {
            footer.log_index_position = out.len() as u64;
            write_index(&mut out, &index, opts.restart_interval)?;
        }
    }
    out.extend_from_slice(&footer.encode(&header));
    Ok(out)
}

/// Appends a finished ref block, first padding the one before it to the block size, and
/// notes its last key and position for the index.
fn flush_ref_block(
    out: &mut Vec<u8>,
    block: Option<BlockWriter>,
    block_size: usize,
    index: &mut Vec<(Vec<u8>, u64)>,
) {
    let Some(block) = block else { return };
    if block.is_empty() {
        return;
    }
    if !index.is_empty() {
        out.resize(index.len() * block_size, 0);
    }
    let key = block.last_key().to_vec();
    index.push((key, out.len() as u64));
    out.extend_from_slice(&block.finish());
}

/// Deflates and appends a finished log block, noting its last key and position.
fn flush_log_block(
    out: &mut Vec<u8>,
    block: Option<BlockWriter>,
    index: &mut Vec<(Vec<u8>, u64)>,
) -> Result<(), ReftableError> {
    let Some(block) = block else { return Ok(()) };
    if block.is_empty() {
        return Ok(());
    }
    let key = block.last_key().to_vec();
    let bytes = block.finish();
    index.push((key, out.len() as u64));
    out.extend_from_slice(&bytes[..4]);
    let mut z = ZlibEncoder::new(Vec::new(), flate2::Compression::default());
    z.write_all(&bytes[4..])
        .and_then(|_| z.finish())
        .map(|deflated| out.extend_from_slice(&deflated))
        .map_err(|e| invalid(format!("deflating a log block: {e}")))
}

/// Appends one index block of `(last key, block position)` records.
fn write_index(
    out: &mut Vec<u8>,
    index: &[(Vec<u8>, u64)],
    restart_interval: usize,
) -> Result<(), ReftableError> {
    let mut b = BlockWriter::new(BLOCK_INDEX, &[], MAX_BLOCK, restart_interval);
    let mut value = Vec::new();
    for (key, pos) in index {
        value.clear();
        put_varint(&mut value, *pos);
        if !b.add(key, 0, &value) {
            return Err(invalid(format!(
                "the index of {} blocks does not fit in one block of {MAX_BLOCK} bytes",
                index.len()
            )));
        }
    }
    out.extend_from_slice(&b.finish());
    Ok(())
}

/// The error for records that cannot be written.
fn invalid(what: String) -> ReftableError {
    ReftableError::Invalid(what)
}

/// The length of an empty table: a header and a footer.
pub const EMPTY_TABLE_LEN: usize = HEADER_LEN + super::FOOTER_LEN;
