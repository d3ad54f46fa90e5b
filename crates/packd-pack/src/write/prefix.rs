//! Sending the first entries of a pack as they are: a default clone of a repository that
//! `packd repack -a` wrote, which lays out what such a clone wants first (HEAD, branches,
//! tags), every delta of it based within it.
//!
//! ```text
//! "PACK" 2 <count>        made here (the file's header counts every entry)
//! file[12 .. end]         the first <count> entries, byte for byte (file ranges when the
//!                         output takes them), each checked against the index's CRC-32
//! SHA-1                   computed over the header and the range as they go out
//! ```
//!
//! Offset deltas point backwards, so the bases of the prefix's offset deltas are in it; a
//! reference delta could name a base past it, so a prefix holding one is not sent this way
//! (the type byte of every entry is checked before anything is sent).

use super::{crc_mismatch, Output, WINDOW};
use crate::count::Planned;
use crate::{PackError, PackSink, PackStats};
use packd_odb::pack::data::REF_DELTA;
use packd_odb::pack::Pack;
use packd_reach::progress::Progress;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// The pack whose first entries are exactly what `plan` sends, and how many, if they are
/// (fewer than all: a whole pack is `sent_whole`'s), for a client taking offset deltas, with
/// no offset delta whose base is outside them and no reference delta among them.
pub(super) fn sent_prefix(
    plan: &Planned,
    ofs_delta: bool,
) -> Result<Option<(&Arc<Pack>, u32)>, PackError> {
    let n = plan.items.len();
    if !ofs_delta
        || plan.whole.is_some()
        || plan.packs.len() != 1
        || !plan.loose.is_empty()
        || !plan.path_bases.is_empty()
        || n == 0
        || plan.items[0].rank != 0
        || plan.items[n - 1].rank != 0
    {
        return Ok(None);
    }
    let pack = &plan.packs[0];
    let Ok(count) = u32::try_from(n) else {
        return Ok(None);
    };
    if count >= pack.len() {
        return Ok(None);
    }
    // Items are sorted and distinct: they are the first `n` entries if the last is the `n`th.
    let offsets = pack.sorted_offsets()?;
    if plan.items[n - 1].offset != offsets[n - 1] {
        return Ok(None);
    }
    // No reference delta among them (their first bytes, from the pack's pages).
    let data = pack.data();
    for &offset in &offsets[..n] {
        let first = data
            .read(offset..offset + 1)
            .map_err(packd_odb::Error::from)?;
        if (first[0] >> 4) & 7 == REF_DELTA {
            return Ok(None);
        }
    }
    Ok(Some((pack, count)))
}

/// Sends the first `count` entries of `pack` as a pack stream (see the module documentation).
pub(super) fn write_prefix(
    pack: &Pack,
    count: u32,
    out: &mut dyn PackSink,
    progress: &dyn Progress,
    cancel: &AtomicBool,
) -> Result<PackStats, PackError> {
    progress.start("Writing objects", count as u64);
    let offsets = pack.sorted_offsets()?;
    let positions = pack.positions_in_pack_order()?;
    let crcs = pack.crcs_in_pack_order()?;
    let end = offsets[count as usize];
    let file = if out.takes_file_ranges() {
        pack.data()
            .file_range(0..pack.data_len())
            .map_err(packd_odb::Error::from)?
    } else {
        None
    };
    let mut output = Output::new(out, true, None);
    output.write(&packd_odb::pack::data::encode_pack_header(count))?;
    let mut stats = PackStats {
        objects: count,
        reused: count,
        ..PackStats::default()
    };
    // Entry `entry` runs from offsets[entry] to offsets[entry + 1]; its CRC-32 is summed over
    // the pieces that cover it.
    let mut entry = 0usize;
    let mut crc = crc32fast::Hasher::new();
    let mut at = 12u64;
    while at < end {
        if cancel.load(Ordering::Relaxed) {
            return Err(PackError::Cancelled);
        }
        let piece_end = end.min(at + WINDOW);
        let piece = pack
            .data()
            .read_copy(at..piece_end)
            .map_err(packd_odb::Error::from)?;
        let mut from = at;
        while from < piece_end {
            let entry_end = offsets[entry + 1];
            if from == offsets[entry] {
                let first = piece[(from - at) as usize];
                if matches!((first >> 4) & 7, 6 | 7) {
                    stats.reused_deltas += 1;
                }
            }
            let to = entry_end.min(piece_end);
            crc.update(&piece[(from - at) as usize..(to - at) as usize]);
            from = to;
            if to == entry_end {
                let done = std::mem::replace(&mut crc, crc32fast::Hasher::new()).finalize();
                if let Some(expected) = crcs.map(|c| c[entry]) {
                    if expected != done {
                        let id = pack.index().id(positions[entry]);
                        return Err(crc_mismatch(pack, offsets[entry], id));
                    }
                }
                entry += 1;
            }
        }
        // The piece's entries that end in it are checked; one that runs on is checked
        // before the piece that ends it goes out, so a damaged entry never goes out whole.
        output.write_from_file(&piece, at, file.as_ref())?;
        at = piece_end;
        progress.update(entry as u64);
    }
    progress.finish(count as u64);
    stats.bytes = output.finish(None)?;
    tracing::debug!(
        "{}: sent its first {count} entries ({} bytes) as they are",
        pack.data_name(),
        end - 12
    );
    Ok(stats)
}
