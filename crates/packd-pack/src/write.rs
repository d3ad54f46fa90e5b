//! Writing the pack stream of a fetch, reusing on-disk entries.
//!
//! ```text
//! "PACK"  version (4 bytes, 2)  object count (4 bytes)
//! entry*  type+size varint, then for ofs-delta a backwards distance, for ref-delta a base id,
//!         then zlib data
//! trailer SHA-1 of everything before it
//! ```
//!
//! Each object is sent the cheapest way that is valid for this client:
//! - a new delta, when the fetch's delta search (`delta_search::fetch`, run before the first
//!   entry over the objects stored whole or as deltas that cannot be sent) found one, against
//!   an object written before it or one the client has;
//! - a whole object on disk: its entry as it is (header and compressed bytes);
//! - a delta on disk whose base was already written to this stream: the delta as it is, with
//!   its base distance rewritten (or as a ref-delta if the client lacks ofs-delta);
//! - a delta whose base the client has (a thin pack): the delta as it is, as a ref-delta;
//! - anything else: the whole object, inflated from its chain and compressed again.
//!
//! Only bases already written count, so chains stay acyclic whatever the packs hold. Reused
//! bytes are checked against the index's CRC-32 first, so a damaged entry is never passed on
//! as it is. Pack bytes are read with [`packd_storage::Blob::read_copy`] (which does not leave
//! them mapped) in windows of [`WINDOW`] bytes, and large entries in pieces of that size, so
//! memory stays bounded whatever the pack and entry sizes. When the output takes file ranges (a
//! socket, by `sendfile`), runs of reused entries of [`MIN_FILE_RANGE`] bytes or more are
//! hashed from the window and sent from the file, not copied to the output: the CRC-32 and the
//! hash are then computed on the window's bytes, and the kernel sends the file's pages, which
//! are the same bytes as long as the pack is not changed in place (packs never are); a
//! difference would fail the client's check of the trailer.

use crate::count::{Had, Planned, LOOSE};
use crate::recipe::{Recipe, RecipeWriter, Step};
use crate::{FileRange, PackError, PackServer, PackSink, PackStats};
use bytes::Bytes;
use packd_odb::pack::data::{
    decode_entry_header, encode_ofs_distance, encode_pack_header, encode_type_and_size,
    EntryHeader, EntryKind, OFS_DELTA, REF_DELTA,
};
use packd_odb::pack::Pack;
use packd_odb::{HashKind, ObjectId};
use packd_reach::progress::Progress;
use sha1::{Digest, Sha1};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

mod ahead;
mod prefix;
pub(crate) use ahead::ReadAhead;

/// Bytes read from a pack at once when entries are close together; also the piece size for
/// copying large entries.
pub(crate) const WINDOW: u64 = 1 << 20;

/// Unsent bytes between two entries to send that one read may still cover (cheaper to copy
/// than a second read).
const MAX_GAP: u64 = 8 * 1024;

/// Output buffered before it is handed to the transport.
const OUT_BUFFER: usize = 256 * 1024;

/// Name-hashes a process serving one request (`PackServer::for_one_request`) looks up by
/// scanning the bitmap's name-hash cache rather than by building the table by name-hash (see
/// [`PackServer::same_name`] and `BitmapIndex::objects_with_name_hash`): each scan costs two
/// passes over 4 bytes an object, the table a pack position for every object. A running server
/// builds the table at its first search and keeps it: when it scanned instead, it paid for the
/// scans in every fetch (0.42-0.59x git's CPU 1 to 128 days behind on git/git, against
/// 0.13-0.41x with the table).
const SCANS_BEFORE_TABLE: usize = 16;

/// The scans of one request, by name-hash: how many searches asked for it, and the objects
/// with that name-hash, in index order until [`SORT_AFTER`] searches asked, then sorted in pack
/// order; `None`: no name-hash cache to scan.
pub(crate) type NameScans = HashMap<u32, Option<(u32, packd_reach::bitmap_walk::SameName)>>;

/// Searches for one scanned name-hash after which its objects are sorted in pack order: a
/// search in the unsorted list is a pass over it (27,726 objects for a common file name of
/// git/git, about 393,000 for the empty path's, which commits and root trees share, in the
/// 841,300 objects of git/git with its pull-request refs), a sort costs a few such passes.
/// Sorting at the second search made an 8-day fetch of git/git by a fresh process cost
/// 0.065-0.067 s of CPU instead of 0.059-0.061 s (ad-hoc, two runs each).
const SORT_AFTER: u32 = 16;

/// Objects of one name-hash a scan keeps on each side of the object to send, the nearest in
/// pack order: enough for the few of its kind that the client has that a fetch's delta search
/// offers as bases (see `delta_search::fetch`). A process per request and a running server
/// (which looks in the whole table) may choose other bases for the same request (both valid).
const SCAN_NEAREST: usize = 256;

/// The objects of name-hash `hash` nearest to bit `bit` (see [`SCAN_NEAREST`]), as
/// `hash << 32 | bit` keys like the table's, found by a scan kept in `scans`; `None` without a
/// name-hash cache to scan.
fn scan_near(
    index: &packd_reach::bitmap_walk::BitmapIndex,
    scans: &mut NameScans,
    hash: u32,
    bit: u64,
) -> Result<Option<Vec<u64>>, PackError> {
    let scanned = match scans.entry(hash) {
        std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
        std::collections::hash_map::Entry::Vacant(e) => {
            e.insert(index.objects_with_name_hash(hash)?.map(|o| (0, o)))
        }
    };
    let Some((searches, objects)) = scanned else {
        return Ok(None);
    };
    // Asked often: sorted once, then each search is two slices.
    *searches += 1;
    if *searches == SORT_AFTER {
        objects.objects.sort_unstable();
    }
    let bits = index.bits_near(objects, *searches >= SORT_AFTER, bit, SCAN_NEAREST)?;
    Ok(Some(
        bits.into_iter()
            .map(|b| ((hash as u64) << 32) | b)
            .collect(),
    ))
}

/// Objects larger than this are not searched for a delta.
const MAX_SEARCH_SIZE: usize = 16 << 20;

/// Enough bytes for any entry header.
const MAX_HEADER: u64 = 64;

/// The client's stream: buffers, counts and hashes what is written.
///
/// Reused entries that follow one another in a read window are not copied one by one: they
/// are held as one pending range of the window ([`Output::write_shared`]) and written, and
/// hashed, in one piece when something else comes (a clone is mostly such runs).
struct Output<'a> {
    out: &'a mut dyn PackSink,
    buf: Vec<u8>,
    /// The running checksum; `None` when the stream's trailer is already known: a pack file
    /// copied whole, or a replayed recipe, whose last step is the trailer.
    hash: Option<Sha1>,
    /// Bytes counted as written, the pending range included.
    written: u64,
    /// A range of a window's buffer not yet written: (buffer, from, to), and when the output
    /// takes file ranges, the pack file the buffer was read from and where in it the buffer
    /// starts.
    pending: Option<Pending>,
    /// Runs sent as file ranges, and their bytes (for the debug log).
    ranges_sent: (u64, u64),
    /// The recipe of the stream being kept for the clone cache, if it is (see [`crate::recipe`]):
    /// what [`Output::write`] hands out and the trailer are recorded here, the pack's ranges by
    /// [`WholePackStream::send_window`].
    recipe: Option<&'a mut RecipeWriter>,
}

/// See [`Output::pending`].
type Pending = (Bytes, usize, usize, Option<(FileRange, u64)>);

/// Runs of reused entries at least this long go out as file ranges when the output takes them
/// (their bytes are hashed here, and sent by the kernel from the page cache); shorter ones are
/// copied, which costs less than a range's hand-over.
const MIN_FILE_RANGE: usize = 64 << 10;

impl<'a> Output<'a> {
    /// An output to `out`, hashing what it writes when `hash` (a stream whose trailer is
    /// not known yet), recording its recipe into `recipe` if given.
    fn new(
        out: &'a mut dyn PackSink,
        hash: bool,
        recipe: Option<&'a mut RecipeWriter>,
    ) -> Output<'a> {
        Output {
            out,
            buf: Vec::with_capacity(OUT_BUFFER),
            hash: hash.then(Sha1::new),
            written: 0,
            pending: None,
            ranges_sent: (0, 0),
            recipe,
        }
    }

    /// Writes `bytes`, made for this stream (not copied from a pack).
    fn write(&mut self, bytes: &[u8]) -> Result<(), PackError> {
        self.write_pending()?;
        self.written += bytes.len() as u64;
        if let Some(recipe) = &mut self.recipe {
            recipe.literal(bytes);
        }
        self.put(bytes)
    }

    /// Hashes and writes `bytes`, buffering small pieces.
    fn put(&mut self, bytes: &[u8]) -> Result<(), PackError> {
        if let Some(hash) = &mut self.hash {
            packd_odb::prefetch::for_each_piece(bytes, |piece| hash.update(piece));
        }
        let direct = bytes.len() >= OUT_BUFFER / 4;
        if direct || self.buf.len() + bytes.len() > OUT_BUFFER {
            self.flush_buffer()?;
        }
        if direct {
            self.out.write_all(bytes)?;
        } else {
            self.buf.extend_from_slice(bytes);
        }
        Ok(())
    }

    /// Writes `buffer[from..to]`, joined to the pending range when it continues it in the
    /// same buffer. `file`: the pack file `buffer` was read from and where in it the buffer
    /// starts, when the output takes file ranges. (Not recorded in a recipe: only streams that
    /// [`replays_cheaply`] finds are.)
    fn write_shared(
        &mut self,
        buffer: &Bytes,
        from: usize,
        to: usize,
        file: Option<(&FileRange, u64)>,
    ) -> Result<(), PackError> {
        debug_assert!(self.recipe.is_none(), "runs of entries are not recorded");
        self.written += (to - from) as u64;
        if let Some((held, _, end, _)) = &mut self.pending {
            // The same buffer (held alive by `held`, so no other buffer can have its address).
            if held.as_ptr() == buffer.as_ptr() && held.len() == buffer.len() && *end == from {
                *end = to;
                return Ok(());
            }
        }
        self.write_pending()?;
        let file = file.map(|(range, start)| (range.clone(), start));
        self.pending = Some((buffer.clone(), from, to, file));
        Ok(())
    }

    /// Writes the pending range: hashed here and sent as a file range when it is long enough
    /// and the output takes ranges, else copied.
    fn write_pending(&mut self) -> Result<(), PackError> {
        let Some((held, from, to, file)) = self.pending.take() else {
            return Ok(());
        };
        match file {
            Some((file, start)) if to - from >= MIN_FILE_RANGE => {
                self.send_from_file(&held[from..to], &file, start + from as u64)
            }
            _ => self.put(&held[from..to]),
        }
    }

    /// Writes `bytes`, copied from a pack at `offset`: hashed here, and sent as that range of
    /// the pack's `file` (for an output that takes ranges) when they are long enough, else
    /// copied. (The caller records them in a recipe: see [`WholePackStream::send_window`].)
    fn write_from_file(
        &mut self,
        bytes: &[u8],
        offset: u64,
        file: Option<&FileRange>,
    ) -> Result<(), PackError> {
        self.write_pending()?;
        self.written += bytes.len() as u64;
        match file {
            Some(file) if bytes.len() >= MIN_FILE_RANGE => self.send_from_file(bytes, file, offset),
            _ => self.put(bytes),
        }
    }

    /// Hashes `bytes` and sends them as the range of `file` at `offset` they were read from
    /// (counted as written by the caller).
    fn send_from_file(
        &mut self,
        bytes: &[u8],
        file: &FileRange,
        offset: u64,
    ) -> Result<(), PackError> {
        // The bytes lie within the file, so `sub` never shortens the range.
        debug_assert!(offset + bytes.len() as u64 <= file.len);
        if let Some(hash) = &mut self.hash {
            packd_odb::prefetch::for_each_piece(bytes, |piece| hash.update(piece));
        }
        self.flush_buffer()?;
        self.out
            .send_file_range(&file.sub(offset, bytes.len() as u64))?;
        self.ranges_sent.0 += 1;
        self.ranges_sent.1 += bytes.len() as u64;
        Ok(())
    }

    /// Sends `len` bytes of `file` at `offset` without reading them: a replayed recipe,
    /// whose stream is not hashed.
    fn send_unread(&mut self, file: &FileRange, offset: u64, len: u64) -> Result<(), PackError> {
        debug_assert!(self.hash.is_none(), "bytes not read cannot be hashed");
        debug_assert!(self.recipe.is_none(), "a replay is not recorded");
        self.write_pending()?;
        self.written += len;
        self.flush_buffer()?;
        self.out.send_file_range(&file.sub(offset, len))?;
        self.ranges_sent.0 += 1;
        self.ranges_sent.1 += len;
        Ok(())
    }

    /// Ends a stream whose last bytes (its trailer) were written as they are: what
    /// [`Output::finish`] does for a stream that computes or knows its trailer.
    fn end(mut self) -> Result<u64, PackError> {
        self.write_pending()?;
        self.flush_buffer()?;
        self.out.flush()?;
        Ok(self.written)
    }

    fn flush_buffer(&mut self) -> Result<(), PackError> {
        if !self.buf.is_empty() {
            self.out.write_all(&self.buf)?;
            self.buf.clear();
        }
        Ok(())
    }

    /// Writes the trailer: `known` when the stream is a copied pack file, else the checksum.
    fn finish(mut self, known: Option<&[u8]>) -> Result<u64, PackError> {
        self.write_pending()?;
        let digest = match (self.hash.take(), known) {
            (Some(hash), _) => hash.finalize().to_vec(),
            (None, Some(known)) => known.to_vec(),
            (None, None) => {
                return Err(PackError::Io(std::io::Error::other(
                    "a pack stream without a checksum",
                )))
            }
        };
        self.written += digest.len() as u64;
        if let Some(recipe) = &mut self.recipe {
            recipe.literal(&digest);
        }
        self.buf.extend_from_slice(&digest);
        self.flush_buffer()?;
        self.out.flush()?;
        Ok(self.written)
    }
}

/// The bytes of one pack read through a moving window.
struct Window {
    rank: u32,
    start: u64,
    bytes: Bytes,
}

impl Window {
    /// The bytes `range` of `pack` (rank `rank`). When they are not in the window, it is
    /// refilled from `range.start` to `ahead()` (at least `range.end`): the end of the entries
    /// to send that follow closely, so that one read serves them all and nothing is read that
    /// is not sent or between sent entries.
    fn get(
        &mut self,
        rank: u32,
        pack: &Pack,
        range: std::ops::Range<u64>,
        ahead: impl FnOnce() -> u64,
    ) -> Result<Bytes, PackError> {
        let (from, to) = self.locate(rank, pack, range, ahead)?;
        Ok(self.bytes.slice(from..to))
    }

    /// Like [`Window::get`], but answers where the range lies in the window's buffer
    /// (`self.bytes`), without making a slice.
    fn locate(
        &mut self,
        rank: u32,
        pack: &Pack,
        range: std::ops::Range<u64>,
        ahead: impl FnOnce() -> u64,
    ) -> Result<(usize, usize), PackError> {
        let end_of_window = self.start + self.bytes.len() as u64;
        if rank == self.rank && range.start >= self.start && range.end <= end_of_window {
            let from = (range.start - self.start) as usize;
            let to = (range.end - self.start) as usize;
            return Ok((from, to));
        }
        let trailer = pack.entries_end();
        let end = ahead().max(range.end).min(trailer.max(range.end));
        let bytes = pack
            .data()
            .read_copy(range.start..end)
            .map_err(packd_odb::Error::from)?;
        self.rank = rank;
        self.start = range.start;
        self.bytes = bytes;
        Ok((0, (range.end - range.start) as usize))
    }
}

/// An entry made for this pack: its header and compressed data.
type NewEntry = (Vec<u8>, Vec<u8>);

/// How a delta made for this pack names its base.
enum DeltaBase {
    /// An entry written earlier in this pack, this many bytes back.
    Ofs(u64),
    /// By id: the client has it (thin pack), or does not take offset deltas.
    Ref(ObjectId),
}

/// `data` deflated for a pack entry; an error names `id`.
fn deflate(
    compressor: &mut libdeflater::Compressor,
    id: &ObjectId,
    data: &[u8],
) -> Result<Vec<u8>, PackError> {
    let mut compressed = vec![0u8; compressor.zlib_compress_bound(data.len())];
    let n = compressor
        .zlib_compress(data, &mut compressed)
        .map_err(|e| PackError::Io(std::io::Error::other(format!("compressing {id}: {e}"))))?;
    compressed.truncate(n);
    Ok(compressed)
}

/// The entry of `delta` (for object `id`) against `base`.
fn delta_entry(
    compressor: &mut libdeflater::Compressor,
    id: &ObjectId,
    delta: &[u8],
    base: DeltaBase,
) -> Result<NewEntry, PackError> {
    let (header, _) = delta_entry_header(&base, delta.len() as u64);
    Ok((header, deflate(compressor, id, delta)?))
}

/// The header of a delta entry of `delta_size` bytes (inflated) against `base`, and the base.
fn delta_entry_header(base: &DeltaBase, delta_size: u64) -> (Vec<u8>, &DeltaBase) {
    let mut header = Vec::with_capacity(32);
    match base {
        DeltaBase::Ofs(distance) => {
            encode_type_and_size(&mut header, OFS_DELTA, delta_size);
            encode_ofs_distance(&mut header, *distance);
        }
        DeltaBase::Ref(base_id) => {
            encode_type_and_size(&mut header, REF_DELTA, delta_size);
            header.extend_from_slice(base_id.as_bytes());
        }
    }
    (header, base)
}

/// How one entry is sent.
pub(crate) enum Send {
    /// Reused: the entry's compressed bytes after a new header.
    Reuse { header: Vec<u8>, delta: bool },
    /// Inflated and compressed again as a whole object.
    Whole,
}

/// One entry of a pack as the writer needs it.
struct Found {
    /// Where it ends: the next entry's offset, or the trailer's.
    end: u64,
    /// Its position in the pack's index.
    index_pos: u32,
    /// Its CRC-32 (`None`: the index has none).
    crc: Option<u32>,
}

/// A pack's reverse index as the writer reads it: its offsets (the trailer's last), index
/// positions and CRC-32s (`None`: the index has none), all in offset order.
struct PackOrder<'a> {
    offsets: &'a [u64],
    positions: &'a [u32],
    crcs: Option<&'a [u32]>,
}

/// Finds entries of one pack, for items that come in offset order: in the pack's reverse
/// index, or entry by entry when the items are few and nothing has sorted the pack's offsets
/// (see [`Pack::few_enough_one_by_one`]).
struct Cursor<'a> {
    rank: u32,
    /// The pack's reverse index; `None` to ask the pack entry by entry.
    order: Option<PackOrder<'a>>,
    at: usize,
}

impl<'a> Cursor<'a> {
    fn new(rank: u32, pack: &'a Pack, items: u64) -> Result<Cursor<'a>, PackError> {
        let order = if pack.few_enough_one_by_one(items) {
            None
        } else {
            Some(PackOrder {
                offsets: pack.sorted_offsets()?,
                positions: pack.positions_in_pack_order()?,
                crcs: pack.crcs_in_pack_order()?,
            })
        };
        Ok(Cursor { rank, order, at: 0 })
    }

    /// The entry at `offset`, at or after the last one found.
    fn seek(&mut self, pack: &Pack, offset: u64) -> Result<Found, PackError> {
        let Some(PackOrder {
            offsets,
            positions,
            crcs,
        }) = self.order
        else {
            let (index_pos, end) = pack.entry_span(offset)?;
            return Ok(Found {
                end,
                index_pos,
                crc: pack.index().crc32(index_pos),
            });
        };
        let n = positions.len();
        let found = |i: usize| Found {
            end: offsets[i + 1],
            index_pos: positions[i],
            crc: crcs.and_then(|crcs| crcs.get(i).copied()),
        };
        // Dense runs (a clone) ask for the entry after the last one.
        for i in [self.at, self.at + 1] {
            if i < n && offsets[i] == offset {
                self.at = i;
                return Ok(found(i));
            }
        }
        let from = self.at.min(n);
        let i = from + offsets[from..n].partition_point(|&o| o < offset);
        if i < n && offsets[i] == offset {
            self.at = i;
            Ok(found(i))
        } else {
            Err(packd_odb::Error::corrupt(
                pack.data_name(),
                offset,
                "no object of the index starts at this offset",
            )
            .into())
        }
    }

    /// Where the entry at `offset` (an entry of the pack) ends.
    fn end_of(&self, pack: &Pack, offset: u64) -> Result<u64, PackError> {
        match self.order {
            Some(PackOrder { offsets, .. }) => {
                let k = offsets.partition_point(|&o| o <= offset);
                Ok(offsets.get(k).copied().unwrap_or(offset))
            }
            None => Ok(pack.entry_end(offset)?),
        }
    }
}

/// Index entries held at once while a whole pack is sent: the entries of a range of the pack
/// that holds about this many, sorted by offset (16 bytes each).
const WHOLE_PACK_ENTRIES: u32 = 1 << 17;

/// Bytes read at once when a whole pack is sent: a page short of [`WINDOW`]. With whole
/// mebibytes, the clone cache's 1 MiB buffered writes fell at 1 MiB-aligned offsets of its file,
/// where the kernel's copy into the page cache took six times as long (ext4, Linux 6.18: 0.4 s
/// of CPU for a 489 MB mirror clone, against 0.07 s at the offsets a page-short window gives).
const WHOLE_PACK_WINDOW: u64 = WINDOW - 4096;

/// Sends `pack` as it is: its file, byte for byte (the caller checked that the header is the
/// stream's), then its own trailer, the checksum its index records (`Pack::open` checked the
/// file ends with it).
///
/// When `out` takes file ranges, the file goes out as ranges ([`send_whole_file`]), unread.
/// Otherwise every entry's bytes are checked against the index's CRC-32 as
/// they go out ([`write_whole_pack_in`]), without a
/// table per object: the index is read range by range of the pack (a histogram of where entries
/// start chooses ranges of about [`WHOLE_PACK_ENTRIES`] entries), each range's entries are
/// sorted by offset, and each entry ends where the next starts. A damaged entry stops the
/// stream before its last byte, so the client never gets it whole, nor a trailer.
fn write_whole_pack(
    pack: &Pack,
    out: &mut dyn PackSink,
    progress: &dyn Progress,
    cancel: &AtomicBool,
) -> Result<PackStats, PackError> {
    if out.takes_file_ranges() {
        let data = pack.data();
        if let Some(file) = data
            .file_range(0..data.len())
            .map_err(packd_odb::Error::from)?
        {
            return send_whole_file(pack, &file, out, progress, cancel);
        }
    }
    write_whole_pack_in(pack, out, progress, cancel, WHOLE_PACK_ENTRIES, None, None)
}

/// Objects sent after a pack's entries ([`write_whole_pack_in`]): how many, and what writes
/// them to the stream.
type Then<'t> = (u32, &'t mut dyn FnMut(&mut Output) -> Result<(), PackError>);

/// A pack file sent as file ranges goes in pieces of this size, so that progress moves and a
/// cancel is seen.
const FILE_PIECE: u64 = 8 << 20;

/// Sends `pack`, whose whole file is `file`, through `out`'s file ranges: its bytes never pass
/// through packd, so its entries are not checked against the index's CRC-32 as
/// [`write_whole_pack_in`] checks them. The client's check of the pack's trailer, which covers
/// every byte, rejects a file damaged since it was written; the trailer itself is the
/// checksum the index records (`Pack::open` checked it, and the caller the header).
fn send_whole_file(
    pack: &Pack,
    file: &FileRange,
    out: &mut dyn PackSink,
    progress: &dyn Progress,
    cancel: &AtomicBool,
) -> Result<PackStats, PackError> {
    let count = pack.index().len();
    send_file_in_pieces(file, count as u64, out, progress, cancel)?;
    tracing::debug!("{}: sent as file ranges", pack.data_name());
    Ok(PackStats {
        objects: count,
        reused: count,
        bytes: file.len,
        ..PackStats::default()
    })
}

/// Sends `file`, a whole pack stream of `objects` objects, through `out`'s file ranges in
/// pieces of [`FILE_PIECE`], so that progress moves and a cancel is seen; then flushes.
pub(crate) fn send_file_in_pieces(
    file: &FileRange,
    objects: u64,
    out: &mut dyn PackSink,
    progress: &dyn Progress,
    cancel: &AtomicBool,
) -> Result<(), PackError> {
    progress.start("Writing objects", objects);
    let mut sent = 0;
    while sent < file.len {
        if cancel.load(Ordering::Relaxed) {
            return Err(PackError::Cancelled);
        }
        let piece = file.sub(sent, FILE_PIECE);
        out.send_file_range(&piece)?;
        sent += piece.len;
        let done = (objects as u128 * sent as u128 / file.len as u128) as u64;
        progress.update(done);
    }
    out.flush()?;
    progress.finish(objects);
    Ok(())
}

/// [`write_whole_pack`] holding about `range_entries` index entries at once. With `then`, the
/// stream is not the file: its header counts the objects `then` writes after the pack's
/// entries, and its trailer is computed.
fn write_whole_pack_in(
    pack: &Pack,
    out: &mut dyn PackSink,
    progress: &dyn Progress,
    cancel: &AtomicBool,
    range_entries: u32,
    mut then: Option<Then<'_>>,
    recipe: Option<&mut RecipeWriter>,
) -> Result<PackStats, PackError> {
    let index = pack.index();
    let count = index.len();
    let name = pack.data_name();
    let corrupt = |offset: u64, why: String| -> PackError {
        packd_odb::Error::corrupt(name, offset, why).into()
    };
    // `Pack::open` took only a file that holds a header and a trailer.
    let trailer_at = pack.entries_end();
    let trailer = pack.index().pack_checksum();
    // Ranges of the pack of at most `range_entries` entries each (a bucket more crowded
    // than that is a range of its own), from about 4096 buckets.
    let mut shift = 12;
    while (trailer_at >> shift) > 4096 {
        shift += 1;
    }
    let mut buckets = Vec::new();
    index.offset_histogram(shift, trailer_at, &mut buckets)?;
    let counted: u64 = buckets.iter().map(|&b| b as u64).sum();
    if counted != count as u64 {
        return Err(corrupt(
            trailer_at,
            format!(
                "{} of the index's {count} entries start at or past the trailer",
                count as u64 - counted
            ),
        ));
    }

    let extra = then.as_ref().map_or(0, |(n, _)| *n);
    let total = count
        .checked_add(extra)
        .ok_or_else(|| PackError::BadRequest("more than 2^32 objects to send".into()))?;
    progress.start("Writing objects", u64::from(total));
    let mut stats = PackStats {
        objects: total,
        reused: count,
        ..PackStats::default()
    };
    let out_takes_ranges = out.takes_file_ranges();
    let mut output = Output::new(out, then.is_some(), recipe);
    let pack_number = output
        .recipe
        .as_mut()
        .map_or(0, |recipe| recipe.pack_number(pack.index().pack_checksum()));
    let mut stream = WholePackStream {
        pack,
        pack_number,
        output,
        count: then.is_some().then_some(total),
        file: if out_takes_ranges {
            pack.data()
                .file_range(0..pack.data_len())
                .map_err(packd_odb::Error::from)?
        } else {
            None
        },
        cancel,
        trailer_at,
        window: Vec::new(),
        window_start: 0,
        hinted_to: 0,
        at: 0,
        crc: crc32fast::Hasher::new(),
        current: None,
    };
    let mut entries = Vec::new();
    let mut done = 0u32;
    let mut b = 0usize;
    while b < buckets.len() {
        let (first, mut n) = (b, buckets[b]);
        b += 1;
        while b < buckets.len() && n + buckets[b] <= range_entries {
            n += buckets[b];
            b += 1;
        }
        if n == 0 {
            continue;
        }
        let range = ((first as u64) << shift)..((b as u64) << shift).min(trailer_at);
        entries.clear();
        index.entries_in(range, &mut entries)?;
        entries.sort_unstable_by_key(|e: &packd_odb::pack::index::pass::EntryAt| e.offset);
        for e in &entries {
            if stream.current.is_none() && e.offset != 12 {
                return Err(corrupt(
                    12,
                    format!(
                        "the first entry starts at {}, not after the header",
                        e.offset
                    ),
                ));
            }
            if stream.current.is_some() && e.offset <= stream.at {
                return Err(corrupt(
                    e.offset,
                    "two entries of the index start at this offset".into(),
                ));
            }
            stream.end_entry_at(e.offset)?;
            // The entry's type, for the statistics (its first byte is in the window).
            if let Some(&byte) = stream
                .window
                .get((stream.at - stream.window_start) as usize)
            {
                if matches!((byte >> 4) & 7, OFS_DELTA | REF_DELTA) {
                    stats.reused_deltas += 1;
                }
            }
            stream.current = Some((e.offset, e.crc, e.position));
            done += 1;
            if done.is_multiple_of(65536) {
                progress.update(done as u64);
            }
        }
    }
    stream.end_entry_at(trailer_at)?;
    stream.send_window()?;
    let WholePackStream { mut output, .. } = stream;
    if output.ranges_sent.0 > 0 {
        tracing::debug!(
            "{name}: {} bytes of its entries went out by sendfile",
            output.ranges_sent.1
        );
    }
    // The passes read the index's offset and CRC tables (8 bytes an entry) through its map.
    index.release_pages();
    stats.bytes = match then.as_mut() {
        Some((_, write_then)) => {
            write_then(&mut output)?;
            progress.finish(total as u64);
            output.finish(None)?
        }
        None => {
            progress.finish(count as u64);
            output.finish(Some(trailer))?
        }
    };
    Ok(stats)
}

/// A pack going out whole ([`write_whole_pack`]): the window of its file being read, checked
/// and sent.
struct WholePackStream<'a> {
    pack: &'a Pack,
    /// The pack's number in the output's recipe, if it records one.
    pack_number: u32,
    output: Output<'a>,
    /// The object count the stream's header says, when it is not the file's (objects follow
    /// the pack's entries).
    count: Option<u32>,
    /// The whole pack file, when the output takes file ranges: each window, once checked and
    /// hashed, is sent from the file by the kernel rather than copied to the output (after a
    /// push, a mirror clone of git/git sends its 489 MB pack this way).
    file: Option<FileRange>,
    cancel: &'a AtomicBool,
    /// Where the pack's trailer starts: the end of its entries.
    trailer_at: u64,
    /// Bytes `[window_start, window_start + window.len())` of the file, of which those before
    /// `at` are checked (all but the current entry's tail) and sent when the window moves.
    window: Vec<u8>,
    window_start: u64,
    /// Where the hints of what the stream reads next have reached ([`ahead`]).
    hinted_to: u64,
    at: u64,
    /// The CRC-32 of the current entry's bytes so far.
    crc: crc32fast::Hasher,
    /// The entry being read: its start, expected CRC (`None`: a v1 index) and index position;
    /// `None` while in the header.
    current: Option<(u64, Option<u32>, u32)>,
}

impl WholePackStream<'_> {
    /// Sends the window's bytes (all checked): as a range of the file when the output takes
    /// ranges, but for a header patched with the stream's count, which goes as bytes.
    fn send_window(&mut self) -> Result<(), PackError> {
        let patched = if self.window_start == 0 && self.count.is_some() {
            12.min(self.window.len())
        } else {
            0
        };
        self.output.write(&self.window[..patched])?;
        let (bytes, offset) = (&self.window[patched..], self.window_start + patched as u64);
        if let Some(recipe) = &mut self.output.recipe {
            recipe.range(self.pack_number, offset, bytes.len() as u64);
        }
        self.output
            .write_from_file(bytes, offset, self.file.as_ref())
    }

    /// Reads and checks up to `to` (the next entry's start, or the trailer), which ends the
    /// current entry, and checks that entry's CRC-32 (the header is the file's own, which the
    /// plan checked, or with [`WholePackStream::count`] the stream's, patched in). The window
    /// then holds the byte at `to`, if there is one before the trailer.
    fn end_entry_at(&mut self, to: u64) -> Result<(), PackError> {
        loop {
            let window_end = self.window_start + self.window.len() as u64;
            if self.at == window_end && self.at < self.trailer_at {
                if self.cancel.load(Ordering::Relaxed) {
                    return Err(PackError::Cancelled);
                }
                self.send_window()?;
                self.window_start = window_end;
                let end = self.trailer_at.min(window_end + WHOLE_PACK_WINDOW);
                if let Some(next) =
                    ahead::whole_pack_hint(window_end, self.trailer_at, &mut self.hinted_to)
                {
                    self.pack.data().prefetch(&[next]);
                }
                self.pack
                    .data()
                    .read_copy_into(window_end..end, &mut self.window)
                    .map_err(packd_odb::Error::from)?;
                if let (0, Some(count)) = (window_end, self.count) {
                    // The stream's own header (the file's was checked for the pack's count;
                    // a pack of entries is longer than a window's first 12 bytes).
                    let field = self.window.get_mut(8..12).ok_or_else(|| {
                        PackError::from(packd_odb::Error::corrupt(
                            self.pack.data_name(),
                            0,
                            "shorter than a pack's header",
                        ))
                    })?;
                    field.copy_from_slice(&count.to_be_bytes());
                }
                continue;
            }
            if self.at >= to {
                break;
            }
            let upto = to.min(window_end);
            let from = (self.at - self.window_start) as usize;
            self.crc
                .update(&self.window[from..(upto - self.window_start) as usize]);
            self.at = upto;
        }
        match self.current.take() {
            Some(entry) => check_entry_crc(self.pack, entry, &mut self.crc),
            None => {
                self.crc = crc32fast::Hasher::new();
                Ok(())
            }
        }
    }
}

/// Checks the CRC-32 of the entry `(offset, expected, position)` of `pack`, whose bytes
/// `crc` has seen; starts `crc` over for the next entry.
fn check_entry_crc(
    pack: &Pack,
    (offset, expected, position): (u64, Option<u32>, u32),
    crc: &mut crc32fast::Hasher,
) -> Result<(), PackError> {
    let got = std::mem::take(crc).finalize();
    if expected.is_some_and(|expected| expected != got) {
        return Err(crc_mismatch(pack, offset, pack.index().id(position)));
    }
    Ok(())
}

/// The pack whose file is the whole answer to `plan`, if one is: a plan counted as a whole
/// pack with bitmaps and nothing after its entries (see `Planned::after_whole`), or every entry
/// of one pack (as a count without bitmaps can give) for a client taking offset deltas, when
/// the file starts with the stream's header. (A plan is
/// counted whole only for a client taking offset deltas, by `whole_pack` or through a clone
/// cache record, whose key holds the client's options.)
pub(crate) fn sent_whole(plan: &Planned, ofs_delta: bool) -> Result<Option<&Arc<Pack>>, PackError> {
    if let Some(pack) = &plan.whole {
        return Ok(plan.after_whole.is_empty().then_some(pack));
    }
    let Ok(count) = u32::try_from(plan.items.len()) else {
        return Ok(None);
    };
    // Items are sorted and distinct, so these are all of the pack's entries.
    if ofs_delta
        && plan.packs.len() == 1
        && plan.items.last().is_some_and(|i| i.rank == 0)
        && plan.packs[0].len() == count
        && sends_as_is(&plan.packs[0])?
        && !(client_has_objects(plan) && stores_nearly_all_whole(&plan.packs[0])?)
    {
        return Ok(Some(&plan.packs[0]));
    }
    Ok(None)
}

/// Packs of at most this many entries are looked at by [`stores_nearly_all_whole`] before a
/// fetch is sent one as it is (reading their entry headers costs well under a millisecond for
/// a thousand entries; a larger pack is sent as it is unlooked at).
const WHOLE_CHECK_MAX_ENTRIES: u32 = 100_000;

/// Whether the client has some objects already (a fetch, not a clone).
fn client_has_objects(plan: &Planned) -> bool {
    match &plan.had {
        Had::Ids(ids) => !ids.is_empty(),
        Had::Bits(bits) => !bits.is_empty(),
    }
}

/// Whether fewer than one in eight of `pack`'s entries are deltas (checked for packs of at
/// most [`WHOLE_CHECK_MAX_ENTRIES`]): such a pack sent as it is to a fetch sends nearly every
/// object whole, where the delta search makes most of them deltas against what the client
/// has. A branch rewritten and packed with `pack.window=0` (git/git, 20 commits, 5,109
/// objects) went out as its 15.3 MB pack, 7.7x the bytes of git's upload-pack without
/// bitmaps (git with bitmaps sends it as it is too).
fn stores_nearly_all_whole(pack: &Pack) -> Result<bool, PackError> {
    if pack.len() > WHOLE_CHECK_MAX_ENTRIES || pack.len() < 8 {
        return Ok(false);
    }
    let offsets = pack.sorted_offsets()?;
    let mut deltas = 0u32;
    for &offset in offsets.iter().take(pack.len() as usize) {
        let end = (offset + 32).min(pack.entries_end());
        let head = pack
            .data()
            .read(offset..end)
            .map_err(packd_odb::Error::from)?;
        let header = decode_entry_header(&head, offset, HashKind::Sha1).map_err(|e| {
            PackError::Io(std::io::Error::other(format!(
                "{}: entry at offset {offset}: {e}",
                pack.data_name()
            )))
        })?;
        if !matches!(header.kind, EntryKind::Base(_)) {
            deltas += 1;
        }
    }
    Ok(deltas * 8 < pack.len())
}

/// Whether `pack`'s file starts with the header a stream of all its entries starts with
/// (version 2, its object count): then the file, sent as it is, is that stream.
pub(crate) fn sends_as_is(pack: &Pack) -> Result<bool, PackError> {
    let head = pack.data().read(0..12).map_err(packd_odb::Error::from)?;
    Ok(head[..] == encode_pack_header(pack.len()))
}

/// The pack whose entries the stream for `plan` copies in one run before the objects that
/// follow them (a mirror clone after a push), if it does: such a stream's recipe replays by
/// `sendfile` (see `clone_cache`). A stream of chosen entries leaves some out, and every entry
/// left out, or header rewritten, moves the entries after it and so rewrites the headers of
/// the deltas whose bases lie before it: its runs are short.
pub(crate) fn replays_cheaply(plan: &Planned) -> Option<&Arc<Pack>> {
    plan.whole.as_ref().filter(|_| !plan.after_whole.is_empty())
}

/// Each pack's whole file as a range, by rank, when the output takes file ranges (`None` for
/// a pack without a file, or when it does not).
fn pack_files(packs: &[Arc<Pack>], takes_ranges: bool) -> Vec<Option<FileRange>> {
    packs
        .iter()
        .map(|pack| {
            let data = pack.data();
            takes_ranges
                .then(|| data.file_range(0..data.len()).ok().flatten())
                .flatten()
        })
        .collect()
}

/// Sends the pack stream `recipe` describes (see [`crate::recipe`]), whose packs, by number,
/// are `packs`, and whose figures are `stats`, as `CloneCacheConfig::load` found and checked
/// them. Nothing is hashed: the trailer is one of the recipe's steps. Ranges go out as file
/// ranges when the output takes them, else are read and copied, in pieces, so that progress
/// moves and a cancel is seen.
pub(crate) fn replay(
    recipe: &Recipe,
    packs: &[Arc<Pack>],
    stats: &PackStats,
    out: &mut dyn PackSink,
    progress: &dyn Progress,
    cancel: &AtomicBool,
) -> Result<PackStats, PackError> {
    let files = pack_files(packs, out.takes_file_ranges());
    let objects = stats.objects as u64;
    let total = stats.bytes.max(1);
    progress.start("Writing objects", objects);
    let mut output = Output::new(out, false, None);
    let piece_sent = |output: &Output| -> Result<(), PackError> {
        if cancel.load(Ordering::Relaxed) {
            return Err(PackError::Cancelled);
        }
        let done = (objects as u128 * output.written as u128 / total as u128) as u64;
        progress.update(done);
        Ok(())
    };
    for step in &recipe.steps {
        match *step {
            Step::Literal { at, len } => output.write(recipe.literal(at, len))?,
            Step::Range { pack, offset, len } => {
                let (p, file) = (&packs[pack as usize], files[pack as usize].as_ref());
                let end = offset.saturating_add(len);
                let mut at = offset;
                while at < end {
                    match file {
                        Some(file) => {
                            let piece = (end - at).min(FILE_PIECE);
                            output.send_unread(file, at, piece)?;
                            at += piece;
                        }
                        None => {
                            let piece_end = end.min(at + WINDOW);
                            let bytes = p
                                .data()
                                .read_copy(at..piece_end)
                                .map_err(packd_odb::Error::from)?;
                            output.write(&bytes)?;
                            at = piece_end;
                        }
                    }
                    piece_sent(&output)?;
                }
            }
        }
    }
    let (runs, run_bytes) = output.ranges_sent;
    let written = output.end()?;
    progress.finish(objects);
    tracing::debug!(
        "sent from a clone recipe of {} steps ({run_bytes} of {written} bytes in {runs} file ranges)",
        recipe.steps.len()
    );
    Ok(*stats)
}

/// The error for the entry of object `id` at `offset` of `pack` whose bytes do not match the
/// CRC-32 its index records.
fn crc_mismatch(pack: &Pack, offset: u64, id: ObjectId) -> PackError {
    packd_odb::Error::corrupt(
        pack.data_name(),
        offset,
        format!("object {id}: the entry does not match the CRC-32 in its index"),
    )
    .into()
}

impl PackServer {
    /// Writes the objects `pack_plan` counted to `out` (see the module documentation), in the
    /// forms its request takes (offset deltas, thin).
    pub(crate) fn write_planned(
        &self,
        pack_plan: &crate::PackPlan,
        out: &mut dyn PackSink,
        progress: &dyn Progress,
        cancel: &AtomicBool,
    ) -> Result<PackStats, PackError> {
        let (plan, ofs_delta, thin) = (&pack_plan.planned, pack_plan.ofs_delta, pack_plan.thin);
        if let Some(pack) = replays_cheaply(plan) {
            return self.write_whole_pack_then(
                pack,
                &plan.after_whole,
                out,
                progress,
                cancel,
                None,
            );
        }
        if let Some(pack) = sent_whole(plan, ofs_delta)? {
            return write_whole_pack(pack, out, progress, cancel);
        }
        if let Some((pack, count)) = prefix::sent_prefix(plan, ofs_delta)? {
            return prefix::write_prefix(pack, count, out, progress, cancel);
        }
        let count = u32::try_from(plan.items.len())
            .map_err(|_| PackError::BadRequest("more than 2^32 objects to send".into()))?;
        let mut output = Output::new(out, true, None);
        output.write(&encode_pack_header(count))?;

        let mut stats = PackStats {
            objects: count,
            ..PackStats::default()
        };
        let mut new_offsets: Vec<u64> = Vec::with_capacity(plan.items.len());
        let mut window = Window {
            rank: u32::MAX,
            start: 0,
            bytes: Bytes::new(),
        };
        let mut cursor: Option<Cursor> = None;
        let files = pack_files(&plan.packs, output.out.takes_file_ranges());
        let mut compressor = libdeflater::Compressor::new(libdeflater::CompressionLvl::default());
        let mut header = Vec::with_capacity(32);
        // New deltas for the objects whose stored form is whole or cannot be sent (see
        // `crate::delta_search::fetch`), by their place in the plan.
        let mut new_deltas = self.new_deltas(plan, ofs_delta, thin, progress, cancel)?;
        progress.start("Writing objects", u64::from(count));
        let mut read_ahead = ahead::ReadAhead::default();
        for (i, item) in plan.items.iter().enumerate() {
            read_ahead.before(plan, i);
            if i % 1024 == 0 {
                if cancel.load(Ordering::Relaxed) {
                    return Err(PackError::Cancelled);
                }
                progress.update(i as u64);
            }
            let here = output.written;
            new_offsets.push(here);
            if let Some(new) = new_deltas.remove(&(i as u32)) {
                let base = match new.base_item {
                    Some(j) if ofs_delta && (j as usize) < i => {
                        DeltaBase::Ofs(here - new_offsets[j as usize])
                    }
                    _ => DeltaBase::Ref(new.base_id),
                };
                let (header, _) = delta_entry_header(&base, new.delta_size);
                output.write(&header)?;
                output.write(&new.compressed)?;
                stats.new_deltas += 1;
                continue;
            }
            if item.rank == LOOSE {
                let id = plan.id(item)?;
                self.write_whole(&id, None, &mut compressor, &mut output)?;
                continue;
            }
            let pack = &plan.packs[item.rank as usize];
            if cursor.as_ref().is_none_or(|c| c.rank != item.rank) {
                let items = plan.items[i..].partition_point(|n| n.rank == item.rank);
                cursor = Some(Cursor::new(item.rank, pack, items as u64)?);
            }
            let cursor = cursor.as_mut().expect("set above");
            let Found {
                end,
                index_pos,
                crc: expected_crc,
            } = cursor.seek(pack, item.offset)?;
            // Where the entries to send that follow this one closely end: one read serves
            // them, skipping gaps shorter than a read costs, within a window's reach.
            // (An entry whose end cannot be found ends the span: it is read on its own.)
            let ahead = || {
                let mut span_end = end;
                for n in &plan.items[i + 1..] {
                    if n.rank != item.rank
                        || n.offset >= item.offset + WINDOW
                        || n.offset > span_end + MAX_GAP
                    {
                        break;
                    }
                    match cursor.end_of(pack, n.offset) {
                        Ok(n_end) => span_end = n_end.max(span_end),
                        Err(_) => break,
                    }
                }
                span_end
            };
            // A small entry is read whole; a large one in pieces, twice (the CRC is checked
            // before anything is sent).
            let small = end - item.offset <= WINDOW;
            // Where a small entry lies in the window's buffer.
            let mut in_window = (0, 0);
            let head_bytes = if small {
                in_window = window.locate(item.rank, pack, item.offset..end, ahead)?;
                window.bytes.slice(in_window.0..in_window.1)
            } else {
                window.get(item.rank, pack, item.offset..item.offset + MAX_HEADER, || 0)?
            };
            let entry = decode_entry_header(&head_bytes, item.offset, HashKind::Sha1)
                .map_err(|what| packd_odb::Error::corrupt(pack.data_name(), item.offset, what))?;
            let send = self.choose(
                plan,
                i,
                item.rank,
                pack,
                &entry,
                ofs_delta,
                thin,
                &new_offsets,
                here,
                &mut header,
            )?;
            let id = || pack.index().id(index_pos);
            // Counted by walking (no bitmap): an object the client has an older version of
            // goes as a thin delta against it rather than whole.
            if !plan.path_bases.is_empty() && !matches!(send, Send::Reuse { delta: true, .. }) {
                if let Some((header, data)) =
                    self.delta_against_path_base(plan, &id(), &mut compressor)?
                {
                    output.write(&header)?;
                    output.write(&data)?;
                    stats.new_deltas += 1;
                    continue;
                }
            }
            let Send::Reuse { header, delta } = send else {
                tracing::debug!("sending {} whole: no usable delta base", id());
                self.write_whole(
                    &id(),
                    Some((pack, item.offset)),
                    &mut compressor,
                    &mut output,
                )?;
                continue;
            };
            let data_start = item.offset + entry.header_len as u64;
            let crc = if small {
                crc32fast::hash(&head_bytes)
            } else {
                let mut crc = crc32fast::Hasher::new();
                let mut at = item.offset;
                while at < end {
                    let piece_end = end.min(at + WINDOW);
                    crc.update(&window.get(item.rank, pack, at..piece_end, || 0)?);
                    at = piece_end;
                }
                crc.finalize()
            };
            if expected_crc.is_some_and(|expected| expected != crc) {
                return Err(crc_mismatch(pack, item.offset, id()));
            }
            let file = files[item.rank as usize].as_ref();
            if small {
                let (from, to) = in_window;
                let file = file.map(|file| (file, window.start));
                if header[..] == head_bytes[..entry.header_len] {
                    output.write_shared(&window.bytes, from, to, file)?;
                } else {
                    output.write(&header)?;
                    output.write_shared(&window.bytes, from + entry.header_len, to, file)?;
                }
            } else {
                output.write(&header)?;
                let mut at = data_start;
                while at < end {
                    let piece_end = end.min(at + WINDOW);
                    let piece = window.get(item.rank, pack, at..piece_end, || 0)?;
                    output.write_from_file(&piece, at, file)?;
                    at = piece_end;
                }
            }
            stats.reused += 1;
            if delta {
                stats.reused_deltas += 1;
            }
        }
        progress.finish(u64::from(count));
        // The last run goes out before the runs are counted.
        output.write_pending()?;
        let (runs, run_bytes) = output.ranges_sent;
        stats.bytes = output.finish(None)?;
        if runs > 0 {
            tracing::debug!(
                "{runs} runs of reused entries ({run_bytes} of {} bytes) went out by sendfile",
                stats.bytes
            );
        }
        Ok(stats)
    }

    /// Decides how the `i`th object, an entry of `pack` with header `entry`, is sent; for
    /// reuse, builds its new header in `header`.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn choose(
        &self,
        plan: &Planned,
        i: usize,
        rank: u32,
        pack: &Arc<Pack>,
        entry: &EntryHeader,
        ofs_delta: bool,
        thin: bool,
        new_offsets: &[u64],
        here: u64,
        header: &mut Vec<u8>,
    ) -> Result<Send, PackError> {
        header.clear();
        let (base_written, base_id) = match entry.kind {
            EntryKind::Base(kind) => {
                encode_type_and_size(header, kind.pack_type(), entry.size);
                return Ok(Send::Reuse {
                    header: header.clone(),
                    delta: false,
                });
            }
            EntryKind::OfsDelta { base_offset } => match plan.find_before(rank, base_offset, i) {
                Some(j) => (Some(j), None),
                None => (None, Some(pack.index().id(pack.position_at(base_offset)?))),
            },
            EntryKind::RefDelta { base } => (None, Some(base)),
        };
        let base_written = match (base_written, base_id) {
            (Some(j), _) => Some(j),
            (None, Some(id)) => self.written_before(plan, i, &id)?,
            (None, None) => None,
        };
        if let Some(j) = base_written {
            let base_id = match base_id {
                Some(id) => id,
                None if ofs_delta => ObjectId::NULL,
                None => plan.id(&plan.items[j])?,
            };
            if ofs_delta {
                encode_type_and_size(header, OFS_DELTA, entry.size);
                encode_ofs_distance(header, here - new_offsets[j]);
            } else {
                encode_type_and_size(header, REF_DELTA, entry.size);
                header.extend_from_slice(base_id.as_bytes());
            }
            return Ok(Send::Reuse {
                header: header.clone(),
                delta: true,
            });
        }
        let base_id = base_id.expect("a delta not written against an earlier entry has an id");
        if thin && self.client_has(plan, &base_id)? {
            encode_type_and_size(header, REF_DELTA, entry.size);
            header.extend_from_slice(base_id.as_bytes());
            return Ok(Send::Reuse {
                header: header.clone(),
                delta: true,
            });
        }
        Ok(Send::Whole)
    }

    /// The position of `id` in the plan if it is sent before position `i`.
    fn written_before(
        &self,
        plan: &Planned,
        i: usize,
        id: &ObjectId,
    ) -> Result<Option<usize>, PackError> {
        let Some(packd_odb::Location::Packed { pack, offset }) = self.repo.objects().locate(id)?
        else {
            return Ok(None);
        };
        let Some(rank) = plan.packs.iter().position(|p| Arc::ptr_eq(p, &pack)) else {
            return Ok(None);
        };
        Ok(plan.find_before(rank as u32, offset, i))
    }

    /// Whether the client has `id`.
    fn client_has(&self, plan: &Planned, id: &ObjectId) -> Result<bool, PackError> {
        Ok(match &plan.had {
            Had::Ids(ids) => ids.contains(id),
            Had::Bits(bits) => match self.loaded_bitmap() {
                Some(index) => index.bit_of_id(id)?.is_some_and(|b| bits.get(b)),
                None => false,
            },
        })
    }

    /// A thin delta for `id` against the client's version of its path, when the walk found
    /// one (see `walk::path_bases`) and the delta is less than half the object.
    fn delta_against_path_base(
        &self,
        plan: &Planned,
        id: &ObjectId,
        compressor: &mut libdeflater::Compressor,
    ) -> Result<Option<NewEntry>, PackError> {
        let Some(base_id) = plan.path_bases.get(id) else {
            return Ok(None);
        };
        let objects = self.repo.objects();
        let Some(target) = objects.read(id)? else {
            return Ok(None);
        };
        if target.data.len() > MAX_SEARCH_SIZE || target.data.len() < 64 {
            return Ok(None);
        }
        let Some(base) = objects.read(base_id)? else {
            return Ok(None);
        };
        if base.kind != target.kind {
            return Ok(None);
        }
        let Some(delta) =
            crate::delta_encode::encode(&base.data, &target.data, target.data.len() / 2)
        else {
            return Ok(None);
        };
        delta_entry(compressor, id, &delta, DeltaBase::Ref(*base_id)).map(Some)
    }

    /// The objects with name-hash `hash` (as `hash << 32 | bit` keys, bits ascending), or
    /// those nearest to `bit` when found by a scan of the name-hash cache: the first few
    /// name-hashes a request looks up, while no table by name-hash is built, are found by
    /// scanning (a fetch that needs a few new deltas: building the table took 61% of the CPU
    /// of a fresh `packd upload-pack` 1 day behind on git/git, mostly to find every object's
    /// pack position).
    pub(crate) fn same_name(
        &self,
        index: &packd_reach::bitmap_walk::BitmapIndex,
        scans: &mut NameScans,
        hash: u32,
        bit: u64,
    ) -> Result<Vec<u64>, PackError> {
        let scan = self.by_name_hash.get().is_none()
            && (scans.contains_key(&hash)
                || (self.one_request && scans.len() < SCANS_BEFORE_TABLE));
        if scan {
            if let Some(keys) = scan_near(index, scans, hash, bit)? {
                return Ok(keys);
            }
        }
        let by_hash = self.by_name_hash.get_or_init(|| {
            // One 8-byte key an object, radix-sorted: a map of vectors cost 0.17 s of a
            // fresh server's clone of git/git (841,300 objects) for its 28 new deltas. Every
            // object's pack position is needed: the pack's offsets are sorted first, unless
            // its `.rev` gives them.
            if let Some(pack) = index.single_pack().filter(|p| !p.has_pack_order()) {
                let _ = pack.sorted_offsets();
            }
            let mut keys = Vec::with_capacity(index.object_count() as usize);
            for b in 0..index.object_count() as u64 {
                if let Ok(Some(h)) = index.name_hash(b) {
                    keys.push(((h as u64) << 32) | b);
                }
            }
            packd_odb::pack::init::radix_sort_high_half(&mut keys);
            keys
        });
        let from = by_hash.partition_point(|&k| (k >> 32) < hash as u64);
        let to = from + by_hash[from..].partition_point(|&k| (k >> 32) == hash as u64);
        Ok(by_hash[from..to].to_vec())
    }

    /// Every entry of `pack` as it is, then the objects `after` (stored elsewhere: pushed since
    /// the pack was written), each whole: a mirror clone after a push. Entries are checked
    /// against the index's CRC-32 as [`write_whole_pack_in`] checks them; the header and the
    /// trailer are the stream's own (the plan checked that the file's header is a stream's,
    /// see `count::whole_pack`). With `recipe`, the stream's recipe is recorded into it (see
    /// [`crate::recipe`]).
    pub(crate) fn write_whole_pack_then(
        &self,
        pack: &Pack,
        after: &[ObjectId],
        out: &mut dyn PackSink,
        progress: &dyn Progress,
        cancel: &AtomicBool,
        recipe: Option<&mut RecipeWriter>,
    ) -> Result<PackStats, PackError> {
        let n = u32::try_from(after.len())
            .map_err(|_| PackError::BadRequest("more than 2^32 objects to send".into()))?;
        let mut compressor = libdeflater::Compressor::new(libdeflater::CompressionLvl::default());
        let mut write_after = |output: &mut Output| -> Result<(), PackError> {
            for id in after {
                if cancel.load(Ordering::Relaxed) {
                    return Err(PackError::Cancelled);
                }
                self.write_whole(id, None, &mut compressor, output)?;
            }
            Ok(())
        };
        let stats = write_whole_pack_in(
            pack,
            out,
            progress,
            cancel,
            WHOLE_PACK_ENTRIES,
            Some((n, &mut write_after)),
            recipe,
        )?;
        tracing::debug!(
            "{}: sent as it is, then {n} objects stored elsewhere",
            pack.data_name()
        );
        Ok(stats)
    }

    /// Writes `id` as a whole object, compressed anew.
    fn write_whole(
        &self,
        id: &ObjectId,
        at: Option<(&Arc<Pack>, u64)>,
        compressor: &mut libdeflater::Compressor,
        output: &mut Output,
    ) -> Result<(), PackError> {
        let objects = self.repo.objects();
        let object = match at {
            Some((pack, offset)) => objects.read_at(
                id,
                &packd_odb::Location::Packed {
                    pack: pack.clone(),
                    offset,
                },
            )?,
            None => objects
                .read(id)?
                .ok_or_else(|| PackError::BadRequest(format!("object {id} is missing")))?,
        };
        let mut header = Vec::with_capacity(16);
        encode_type_and_size(
            &mut header,
            object.kind.pack_type(),
            object.data.len() as u64,
        );
        output.write(&header)?;
        output.write(&deflate(compressor, id, &object.data)?)?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn git(dir: &std::path::Path, args: &[&str], stdin: Option<&[u8]>) {
        use std::io::Write as _;
        let mut child = std::process::Command::new("git")
            .arg("-C")
            .arg(dir)
            .args(args)
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("HOME", dir)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::null())
            .spawn()
            .expect("git runs");
        if let Some(input) = stdin {
            child.stdin.take().unwrap().write_all(input).unwrap();
        }
        drop(child.stdin.take());
        assert!(child.wait().unwrap().success(), "git {args:?}");
    }

    /// A bare repository with one pack of a few hundred objects (deltas among them).
    fn packed_repo(dir: &std::path::Path) -> std::path::PathBuf {
        let mut stream = Vec::new();
        for c in 0..40u32 {
            stream.extend_from_slice(
                format!(
                    "commit refs/heads/main\ncommitter A <a@example.com> {} +0000\ndata 2\nc\n",
                    1_700_000_000 + c
                )
                .as_bytes(),
            );
            for f in 0..4u32 {
                let body: String = (0..200)
                    .map(|l| format!("file {f} line {l} {}\n", if l == c { c } else { 0 }))
                    .collect();
                stream.extend_from_slice(
                    format!("M 644 inline f{f}\ndata {}\n{body}\n", body.len()).as_bytes(),
                );
            }
        }
        git(dir, &["init", "-q", "--bare", "r.git"], None);
        let repo = dir.join("r.git");
        git(&repo, &["fast-import", "--quiet"], Some(&stream));
        git(&repo, &["repack", "-adfq"], None);
        repo
    }

    fn only_pack(repo: &std::path::Path) -> std::path::PathBuf {
        std::fs::read_dir(repo.join("objects/pack"))
            .unwrap()
            .map(|e| e.unwrap().path())
            .find(|p| p.extension().is_some_and(|e| e == "pack"))
            .expect("a pack")
    }

    /// The stream [`write_whole_pack_in`] makes of `pack` (with what `then` writes after
    /// it, recording into `recipe`), and its figures.
    fn stream(
        pack: &Pack,
        range_entries: u32,
        then: Option<Then<'_>>,
        recipe: Option<&mut RecipeWriter>,
    ) -> Result<(Vec<u8>, PackStats), PackError> {
        let mut out = Vec::new();
        let never = AtomicBool::new(false);
        let stats = write_whole_pack_in(
            pack,
            &mut out,
            &packd_reach::progress::NoProgress,
            &never,
            range_entries,
            then,
            recipe,
        )?;
        Ok((out, stats))
    }

    fn whole(repo: &std::path::Path, range_entries: u32) -> Result<Vec<u8>, PackError> {
        let opened = packd_odb::Repository::open(repo, &Default::default()).unwrap();
        let pack = opened.objects().packs().next().expect("a pack").clone();
        let (out, stats) = stream(&pack, range_entries, None, None)?;
        assert_eq!(stats.bytes, out.len() as u64);
        assert_eq!(stats.objects, pack.len());
        assert!(
            stats.reused_deltas > 0 && stats.reused_deltas < stats.objects,
            "{stats:?}"
        );
        Ok(out)
    }

    #[test]
    fn whole_pack_is_the_file_whatever_the_range_size() {
        let dir = tempfile::tempdir().unwrap();
        let repo = packed_repo(dir.path());
        let file = std::fs::read(only_pack(&repo)).unwrap();
        for range_entries in [1, 7, 64, WHOLE_PACK_ENTRIES] {
            let out = whole(&repo, range_entries).unwrap();
            assert!(out == file, "{range_entries} entries a range: not the file");
        }
    }

    /// With objects after the pack's entries, the stream is the file but for its header's
    /// count, what follows the entries and its trailer, which is the checksum of what went
    /// before it; `git index-pack` takes it.
    #[test]
    fn whole_pack_then_more_objects_is_a_pack_of_them_all() {
        let dir = tempfile::tempdir().unwrap();
        let repo = packed_repo(dir.path());
        let file = std::fs::read(only_pack(&repo)).unwrap();
        let opened = packd_odb::Repository::open(&repo, &Default::default()).unwrap();
        let pack = opened.objects().packs().next().expect("a pack").clone();
        // Two whole blob entries: "hi\n" and "there\n", compressed.
        let mut compressor = libdeflater::Compressor::new(libdeflater::CompressionLvl::default());
        let mut extra = Vec::new();
        for content in [&b"hi\n"[..], b"there\n"] {
            encode_type_and_size(&mut extra, 3, content.len() as u64);
            let id = ObjectId::from_bytes(&[0; 20]).unwrap();
            extra.extend_from_slice(&deflate(&mut compressor, &id, content).unwrap());
        }
        for range_entries in [7, 64, WHOLE_PACK_ENTRIES] {
            let mut then = |o: &mut Output| o.write(&extra);
            // Its recipe is recorded as it goes: replayed, it makes the same stream.
            let mut recipe = RecipeWriter::new();
            let (out, stats) = stream(
                &pack,
                range_entries,
                Some((2, &mut then)),
                Some(&mut recipe),
            )
            .unwrap();
            assert_eq!(stats.objects, pack.len() + 2);
            assert_eq!(stats.bytes, out.len() as u64);
            let entries_end = file.len() - 20;
            assert_eq!(&out[..8], &file[..8]);
            assert_eq!(out[8..12], (pack.len() + 2).to_be_bytes());
            assert!(out[12..entries_end] == file[12..entries_end]);
            assert!(out[entries_end..out.len() - 20] == extra[..]);
            let sum = Sha1::digest(&out[..out.len() - 20]);
            assert_eq!(&out[out.len() - 20..], &sum[..]);

            assert_eq!(recipe.described(), stats.bytes);
            let recipe = Recipe::parse(recipe.finish().unwrap()).unwrap();
            let ranges: Vec<&Step> = recipe
                .steps
                .iter()
                .filter(|s| matches!(s, Step::Range { .. }))
                .collect();
            assert_eq!(
                ranges,
                [&Step::Range {
                    pack: 0,
                    offset: 12,
                    len: entries_end as u64 - 12
                }],
                "the entries are one range"
            );
            let mut replayed = Vec::new();
            let never = AtomicBool::new(false);
            let again = replay(
                &recipe,
                std::slice::from_ref(&pack),
                &stats,
                &mut replayed,
                &packd_reach::progress::NoProgress,
                &never,
            )
            .unwrap();
            assert_eq!(again.bytes, stats.bytes);
            assert!(replayed == out, "the replay differs from the stream");
            if range_entries == 64 {
                git(&repo, &["index-pack", "--stdin"], Some(&out));
                git(
                    &repo,
                    &["cat-file", "-e", "45b983be36b73c0788dc9cbcb76cbb80fc7bb057"],
                    None,
                );
            }
        }
    }

    #[test]
    fn whole_pack_with_a_damaged_entry_fails_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        let repo = packed_repo(dir.path());
        let path = only_pack(&repo);
        let mut bytes = std::fs::read(&path).unwrap();
        let at = bytes.len() / 2;
        bytes[at] ^= 0x40;
        let mut perms = std::fs::metadata(&path).unwrap().permissions();
        #[allow(clippy::permissions_set_readonly_false)]
        perms.set_readonly(false);
        std::fs::set_permissions(&path, perms).unwrap();
        std::fs::write(&path, &bytes).unwrap();
        for range_entries in [5, WHOLE_PACK_ENTRIES] {
            let err = whole(&repo, range_entries).unwrap_err().to_string();
            assert!(err.contains("CRC-32"), "{err}");
            assert!(
                err.contains(&path.file_name().unwrap().to_string_lossy().to_string()),
                "{err}"
            );
        }
    }

    #[test]
    fn headers_round_trip_through_the_decoder() {
        for (t, size) in [(1u8, 0u64), (3, 15), (3, 16), (2, 1 << 40), (4, 123_456)] {
            let mut h = Vec::new();
            encode_type_and_size(&mut h, t, size);
            let d = decode_entry_header(&h, 100, HashKind::Sha1).unwrap();
            assert_eq!(d.size, size);
            assert_eq!(d.header_len, h.len());
        }
        for distance in [1u64, 127, 128, 129, 16_511, 16_512, 1 << 35] {
            let mut h = Vec::new();
            encode_type_and_size(&mut h, OFS_DELTA, 10);
            encode_ofs_distance(&mut h, distance);
            let offset = distance + 5;
            let d = decode_entry_header(&h, offset, HashKind::Sha1).unwrap();
            assert_eq!(d.kind, EntryKind::OfsDelta { base_offset: 5 });
            assert_eq!(d.header_len, h.len());
        }
    }
}
