//! Opening a `.bitmap`: header, type bitmaps, and locating the entries (through the lookup table,
//! or by scanning); and resolving one commit's XOR chain.
//!
//! Sections are located from both ends, as git does:
//!
//! ```text
//! [0, 32)                       header
//! [32, entries_start)           the four type bitmaps
//! [entries_start, entries_end)  the entries
//! [entries_end, +16 x entries)  lookup table, if flagged
//! [.., +4 x objects)            name-hash cache, if flagged
//! [len - 20, len)               trailer checksum
//! ```

use super::{
    decode_at, BitmapError, Entry, PackBitmap, BITMAP_OPT_FULL_DAG, BITMAP_OPT_HASH_CACHE,
    BITMAP_OPT_LOOKUP_TABLE, NO_XOR,
};
use crate::ewah::{self, Bitmap};
use bytes::Bytes;
use packd_storage::Blob;
use std::sync::{Arc, OnceLock};

const HEADER: u64 = 32;
/// Bytes of the trailing checksum that ends a bitmap file (and names its version).
pub(super) const TRAILER: u64 = 20;
const TABLE_ROW: u64 = 16;
/// Commit position, xor offset, flags.
const ENTRY_HEADER: u64 = 6;
/// The smallest EWAH stream: bit count, word count, RLW position.
const MIN_EWAH: u64 = 12;
/// The most bitmaps one XOR chain may combine. Chains are finite anyway (each step goes to an
/// earlier entry); this keeps a hostile file from making one lookup decode thousands.
pub(super) const MAX_XOR_CHAIN: usize = 4096;

const TYPE_NAMES: [&str; 4] = ["commit", "tree", "blob", "tag"];

fn be32(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}

pub(super) fn open(
    blob: Arc<dyn Blob>,
    pack_checksum: &[u8],
    object_count: u32,
    use_table: bool,
) -> Result<PackBitmap, BitmapError> {
    let file = blob.name().to_string();
    let len = blob.len();
    if len < HEADER + TRAILER {
        return Err(BitmapError::corrupt(
            &file,
            0,
            format!("too short for a bitmap ({len} bytes)"),
        ));
    }
    let header = blob.read(0..HEADER)?;
    if &header[..4] != b"BITM" {
        return Err(BitmapError::corrupt(
            &file,
            0,
            "not a bitmap file (bad signature)",
        ));
    }
    let version = u16::from_be_bytes([header[4], header[5]]);
    if version != 1 {
        return Err(BitmapError::Unsupported {
            file,
            what: format!("bitmap version {version} (only version 1 is supported)"),
        });
    }
    let flags = u16::from_be_bytes([header[6], header[7]]);
    if flags & BITMAP_OPT_FULL_DAG == 0 {
        return Err(BitmapError::Unsupported {
            file,
            what: "bitmap without the FULL_DAG option".into(),
        });
    }
    let entry_count = be32(&header, 8);
    let recorded = &header[12..32];
    if recorded != pack_checksum {
        return Err(BitmapError::ChecksumMismatch {
            file,
            expected: packd_odb::hex(pack_checksum),
            found: packd_odb::hex(recorded),
        });
    }

    // Sections at the end, from the trailer backwards.
    let mut end = len - TRAILER;
    let mut hash_cache_at = None;
    if flags & BITMAP_OPT_HASH_CACHE != 0 {
        let size = 4 * object_count as u64;
        if size > end - HEADER {
            return Err(BitmapError::corrupt(
                &file,
                0,
                format!("too short ({len} bytes) for a name-hash cache of {object_count} objects"),
            ));
        }
        end -= size;
        hash_cache_at = Some(end);
    }
    let mut table_at = None;
    if flags & BITMAP_OPT_LOOKUP_TABLE != 0 {
        let size = TABLE_ROW * entry_count as u64;
        if size > end - HEADER {
            return Err(BitmapError::corrupt(
                &file,
                0,
                format!("too short ({len} bytes) for a lookup table of {entry_count} entries"),
            ));
        }
        end -= size;
        table_at = Some(end);
    }
    let entries_end = end;

    // The type bitmaps.
    let mut at = HEADER;
    let mut types: [Bitmap; 4] = Default::default();
    for (t, name) in types.iter_mut().zip(TYPE_NAMES) {
        let (bitmap, used) = read_ewah(&*blob, at, entries_end, object_count, &|| {
            format!("{name} type bitmap")
        })?;
        *t = bitmap;
        at += used as u64;
    }
    let entries_start = at;

    let mut scanned = None;
    let (entries, used_table) = match table_at {
        Some(table_at) if use_table => (
            read_table(
                &*blob,
                table_at,
                entry_count,
                object_count,
                entries_start,
                entries_end,
            )?,
            true,
        ),
        _ => {
            let bytes = blob.read(entries_start..entries_end)?;
            let entries = scan(&file, &bytes, entries_start, entry_count, object_count)?;
            scanned = Some((entries_start, bytes));
            (entries, false)
        }
    };

    let mut by_commit: Vec<(u32, u32)> = entries
        .iter()
        .enumerate()
        .map(|(row, e)| (e.commit_pos, row as u32))
        .collect();
    by_commit.sort_unstable();
    if let Some(w) = by_commit.windows(2).find(|w| w[0].0 == w[1].0) {
        return Err(BitmapError::corrupt(
            &file,
            entries[w[1].1 as usize].offset,
            format!("commit position {} has two bitmaps", w[0].0),
        ));
    }

    let shared = shared_bases(&entries);
    Ok(PackBitmap {
        blob,
        flags,
        object_count,
        types,
        entries,
        by_commit,
        scanned,
        used_table,
        hash_cache_at,
        hash_cache: OnceLock::new(),
        resolved: Default::default(),
        shared,
    })
}

/// Rows that at least two other bitmaps are XORed with: the bases worth keeping resolved.
fn shared_bases(entries: &[Entry]) -> Vec<bool> {
    let mut uses = vec![0u8; entries.len()];
    for e in entries {
        if let Some(u) = uses.get_mut(e.xor_row as usize) {
            *u = u.saturating_add(1);
        }
    }
    uses.into_iter().map(|u| u >= 2).collect()
}

/// Reads and decodes the EWAH stream at `at`, which must end by `limit`.
fn read_ewah(
    blob: &dyn Blob,
    at: u64,
    limit: u64,
    object_count: u32,
    what: &dyn Fn() -> String,
) -> Result<(Bitmap, usize), BitmapError> {
    let file = blob.name();
    let truncated = |need: u64| BitmapError::Ewah {
        file: file.to_string(),
        offset: at,
        what: what(),
        source: ewah::EwahError::Truncated {
            need,
            have: limit.saturating_sub(at),
        },
    };
    if at + 8 > limit {
        return Err(truncated(MIN_EWAH));
    }
    let head = blob.read(at..at + 8)?;
    let size = MIN_EWAH + 8 * be32(&head, 4) as u64;
    if at + size > limit {
        return Err(truncated(size));
    }
    let bytes = blob.read(at..at + size)?;
    decode_at(file, at, &bytes, object_count, what)
}

/// Parses the lookup table into rows, checking each against the entries' extent.
fn read_table(
    blob: &dyn Blob,
    table_at: u64,
    entry_count: u32,
    object_count: u32,
    entries_start: u64,
    entries_end: u64,
) -> Result<Vec<Entry>, BitmapError> {
    let file = blob.name();
    let n = entry_count as usize;
    // The size was checked against the file's length before.
    let table = blob.read(table_at..table_at + TABLE_ROW * entry_count as u64)?;
    let mut entries = Vec::with_capacity(n);
    for row in 0..n {
        let r = row * TABLE_ROW as usize;
        let row_at = table_at + r as u64;
        let commit_pos = be32(&table, r);
        let offset = u64::from_be_bytes(table[r + 4..r + 12].try_into().expect("8 bytes"));
        let xor_row = be32(&table, r + 12);
        if commit_pos >= object_count {
            return Err(BitmapError::corrupt(
                file,
                row_at,
                format!("lookup table row {row} names commit position {commit_pos}, past the {object_count} objects"),
            ));
        }
        if row > 0
            && entries
                .last()
                .is_some_and(|e: &Entry| e.commit_pos >= commit_pos)
        {
            return Err(BitmapError::corrupt(
                file,
                row_at,
                format!("lookup table row {row} is out of order"),
            ));
        }
        if offset < entries_start || offset > entries_end.saturating_sub(ENTRY_HEADER + MIN_EWAH) {
            return Err(BitmapError::corrupt(
                file,
                row_at,
                format!(
                    "lookup table row {row} places its bitmap at offset {offset}, outside the entries ({entries_start}..{entries_end})"
                ),
            ));
        }
        if xor_row != NO_XOR && (xor_row >= entry_count || xor_row as usize == row) {
            return Err(BitmapError::corrupt(
                file,
                row_at,
                format!("lookup table row {row} XORs with row {xor_row}, which does not exist"),
            ));
        }
        entries.push(Entry {
            commit_pos,
            offset,
            end: entries_end,
            xor_row,
        });
    }
    // Each XOR base must lie earlier in the file (so that chains end), and each entry ends at the
    // next one.
    for row in 0..n {
        let e = entries[row];
        if e.xor_row != NO_XOR && entries[e.xor_row as usize].offset >= e.offset {
            return Err(BitmapError::corrupt(
                file,
                table_at + (row as u64) * TABLE_ROW,
                format!(
                    "lookup table row {row} XORs with row {}, which is not an earlier entry",
                    e.xor_row
                ),
            ));
        }
    }
    let mut by_offset: Vec<(u64, usize)> = entries
        .iter()
        .enumerate()
        .map(|(i, e)| (e.offset, i))
        .collect();
    by_offset.sort_unstable();
    for w in by_offset.windows(2) {
        if w[0].0 + ENTRY_HEADER + MIN_EWAH > w[1].0 {
            return Err(BitmapError::corrupt(
                file,
                w[1].0,
                format!(
                    "lookup table rows {} and {} place their bitmaps at overlapping offsets",
                    w[0].1, w[1].1
                ),
            ));
        }
        entries[w[0].1].end = w[1].0;
    }
    Ok(entries)
}

/// Walks the entries in `bytes` (which start at file offset `base`), recording where each is.
fn scan(
    file: &str,
    bytes: &[u8],
    base: u64,
    entry_count: u32,
    object_count: u32,
) -> Result<Vec<Entry>, BitmapError> {
    let n = entry_count as usize;
    if (n as u64) * (ENTRY_HEADER + MIN_EWAH) > bytes.len() as u64 {
        return Err(BitmapError::corrupt(
            file,
            base,
            format!(
                "{} bytes of entries cannot hold {entry_count} bitmaps",
                bytes.len()
            ),
        ));
    }
    let mut entries: Vec<Entry> = Vec::with_capacity(n);
    let mut at = 0usize;
    for i in 0..n {
        let offset = base + at as u64;
        if bytes.len() - at < (ENTRY_HEADER + MIN_EWAH) as usize {
            return Err(BitmapError::corrupt(
                file,
                offset,
                format!("entry {i} of {entry_count} is truncated"),
            ));
        }
        let commit_pos = be32(bytes, at);
        let xor_offset = bytes[at + 4] as u32;
        if commit_pos >= object_count {
            return Err(BitmapError::corrupt(
                file,
                offset,
                format!(
                    "entry {i} names commit position {commit_pos}, past the {object_count} objects"
                ),
            ));
        }
        if xor_offset as usize > i {
            return Err(BitmapError::corrupt(
                file,
                offset,
                format!(
                    "entry {i} XORs with the entry {xor_offset} before it, which does not exist"
                ),
            ));
        }
        let body = at + ENTRY_HEADER as usize;
        let used = ewah::encoded_len(&bytes[body..]).map_err(|source| BitmapError::Ewah {
            file: file.to_string(),
            offset: offset + ENTRY_HEADER,
            what: format!("bitmap of entry {i}"),
            source,
        })?;
        at = body + used;
        entries.push(Entry {
            commit_pos,
            offset,
            end: base + at as u64,
            xor_row: if xor_offset == 0 {
                NO_XOR
            } else {
                (i as u32) - xor_offset
            },
        });
    }
    Ok(entries)
}

/// The bytes of the entries `rows` (from the scan, or read in one batch).
fn entry_bytes(bm: &PackBitmap, rows: &[u32]) -> Result<Vec<Bytes>, BitmapError> {
    let ranges: Vec<_> = rows
        .iter()
        .map(|&r| {
            let e = bm.entries[r as usize];
            e.offset..e.end
        })
        .collect();
    Ok(match &bm.scanned {
        Some((base, bytes)) => ranges
            .iter()
            .map(|r| bytes.slice((r.start - base) as usize..(r.end - base) as usize))
            .collect(),
        None => bm.blob.read_many(&ranges).collect::<Result<_, _>>()?,
    })
}

/// XORs the bitmap stored in entry `row` (whose bytes are `bytes`) into `out`, which holds the
/// resolved bitmap of the row it is XORed with (or nothing), after checking that the entry is
/// the one the lookup table says.
fn xor_entry(bm: &PackBitmap, row: u32, bytes: &[u8], out: &mut Bitmap) -> Result<(), BitmapError> {
    let file = bm.blob.name();
    let e = bm.entries[row as usize];
    // The extent was checked to hold at least a header and the smallest EWAH.
    let commit_pos = be32(bytes, 0);
    if commit_pos != e.commit_pos {
        return Err(BitmapError::corrupt(
            file,
            e.offset,
            format!(
                "the lookup table places commit position {} here, but the entry is for {commit_pos}",
                e.commit_pos
            ),
        ));
    }
    if (bytes[4] == 0) != (e.xor_row == NO_XOR) {
        return Err(BitmapError::corrupt(
            file,
            e.offset,
            "the entry's XOR offset disagrees with the lookup table",
        ));
    }
    ewah::xor_into(&bytes[ENTRY_HEADER as usize..], bm.object_count as u64, out).map_err(
        |source| BitmapError::Ewah {
            file: file.to_string(),
            offset: e.offset + ENTRY_HEADER,
            what: format!("bitmap of commit position {}", e.commit_pos),
            source,
        },
    )?;
    Ok(())
}

/// The union of the resolved bitmaps of entries `rows`, resolving every entry on their XOR
/// chains once, in file order (a base is always stored before what is XORed with it), and
/// holding a resolved bitmap only until the last entry XORed with it. Files git and packd
/// write XOR each entry with one of the few before it, so only a few are held at once, where
/// resolving each chain on its own would keep its shared bases (see
/// [`super::RESOLVED_BUDGET`]) or decode them again.
///
/// `None` when holding the bases would take more than [`super::RESOLVED_BUDGET`] (a file
/// that XORs many entries with bases far before them), or when `cancel` is set (checked
/// every 1,024 entries). A chain longer than [`MAX_XOR_CHAIN`] is an error, as for
/// [`resolve`].
pub(super) fn union_of(
    bm: &PackBitmap,
    rows: &[u32],
    cancel: &std::sync::atomic::AtomicBool,
) -> Result<Option<Bitmap>, BitmapError> {
    let n = bm.entries.len();
    // Which entries are needed (the rows and everything on their chains), and how many needed
    // entries are XORed with each.
    let mut wanted = vec![false; n];
    let mut needed = vec![false; n];
    let mut users = vec![0u32; n];
    for &row in rows {
        wanted[row as usize] = true;
        let mut r = row;
        while !needed[r as usize] {
            needed[r as usize] = true;
            let base = bm.entries[r as usize].xor_row;
            if base == NO_XOR {
                break;
            }
            users[base as usize] += 1;
            r = base;
        }
    }
    // In file order: an entry's base is always at a smaller offset.
    let mut order: Vec<u32> = (0..n as u32).filter(|&r| needed[r as usize]).collect();
    order.sort_unstable_by_key(|&r| bm.entries[r as usize].offset);
    let fetched = entry_bytes(bm, &order)?;
    // Resolved bases still to be used, their bytes, and each entry's chain length.
    let mut held: std::collections::HashMap<u32, Bitmap> = Default::default();
    let mut held_bytes = 0usize;
    let mut depth = vec![0u32; n];
    let limit = MAX_XOR_CHAIN.min(n);
    let mut union = Bitmap::new();
    for (k, (&r, bytes)) in order.iter().zip(&fetched).enumerate() {
        if k % 1024 == 0 && cancel.load(std::sync::atomic::Ordering::Relaxed) {
            return Ok(None);
        }
        let e = bm.entries[r as usize];
        let mut out = if e.xor_row == NO_XOR {
            Bitmap::new()
        } else {
            let base = e.xor_row;
            depth[r as usize] = depth[base as usize] + 1;
            if depth[r as usize] as usize >= limit {
                return Err(BitmapError::corrupt(
                    bm.blob.name(),
                    e.offset,
                    format!(
                        "the bitmap of commit position {} is XORed through more than {} others",
                        e.commit_pos,
                        limit - 1
                    ),
                ));
            }
            // The last entry XORed with the base takes it; the others copy it.
            users[base as usize] -= 1;
            let held_base = if users[base as usize] == 0 {
                held.remove(&base)
                    .inspect(|b| held_bytes -= b.words().len() * 8)
            } else {
                held.get(&base).cloned()
            };
            held_base.ok_or_else(|| {
                BitmapError::corrupt(
                    bm.blob.name(),
                    e.offset,
                    "an entry is XORed with one stored after it",
                )
            })?
        };
        xor_entry(bm, r, bytes, &mut out)?;
        if wanted[r as usize] {
            union.or_assign(&out);
        }
        if users[r as usize] > 0 {
            held_bytes += out.words().len() * 8;
            if held_bytes > super::RESOLVED_BUDGET {
                return Ok(None);
            }
            held.insert(r, out);
        }
    }
    Ok(Some(union))
}

/// The fully XOR-resolved bitmap of entry `row`.
pub(super) fn resolve(bm: &PackBitmap, row: u32) -> Result<Bitmap, BitmapError> {
    let file = bm.blob.name();
    let mut chain = vec![row];
    let mut r = row;
    // The chain down to its root, or to the first bitmap already resolved.
    let mut base: Option<Arc<Bitmap>> = bm.resolved.lock().rows.get(&row).cloned();
    if let Some(done) = base {
        return Ok((*done).clone());
    }
    while bm.entries[r as usize].xor_row != NO_XOR {
        r = bm.entries[r as usize].xor_row;
        if let Some(done) = bm.resolved.lock().rows.get(&r).cloned() {
            base = Some(done);
            break;
        }
        chain.push(r);
        if chain.len() > MAX_XOR_CHAIN.min(bm.entries.len()) {
            return Err(BitmapError::corrupt(
                file,
                bm.entries[row as usize].offset,
                format!(
                    "the bitmap of commit position {} is XORed through more than {} others",
                    bm.entries[row as usize].commit_pos,
                    MAX_XOR_CHAIN.min(bm.entries.len()) - 1
                ),
            ));
        }
    }
    let fetched = entry_bytes(bm, &chain)?;
    // Applied from the root (or the resolved base) up, so that each link's result is the
    // resolved bitmap of that link, worth keeping for other chains through it. A shared link is
    // kept the second time a chain passes through it: a query taking one bitmap (one chain)
    // copies nothing, one taking many pays one extra pass down each shared base.
    let mut out = base.map(|b| (*b).clone()).unwrap_or_default();
    for (&r, bytes) in chain.iter().zip(&fetched).rev() {
        xor_entry(bm, r, bytes, &mut out)?;
        if !bm.shared[r as usize] {
            continue;
        }
        let mut resolved = bm.resolved.lock();
        if resolved.passed.is_empty() {
            resolved.passed = vec![false; bm.entries.len()];
        }
        if !std::mem::replace(&mut resolved.passed[r as usize], true) {
            continue;
        }
        let cost = out.words().len() * 8 + 64;
        if resolved.bytes + cost <= super::RESOLVED_BUDGET && !resolved.rows.contains_key(&r) {
            resolved.bytes += cost;
            resolved.rows.insert(r, Arc::new(out.clone()));
        }
    }
    Ok(out)
}
