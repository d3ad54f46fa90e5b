//! Writing one pack's files through the storage layer: the `.pack` streamed entry by entry,
//! then its `.rev` and `.idx`, each published under the pack's checksum.
//!
//! ```text
//! pack/pack-<checksum>.pack   "PACK", version 2, object count (u32 BE each)
//!                             entry*: type+size varint, ofs-delta distance, zlib data
//!                             SHA-1 of everything before it (the checksum naming the files)
//! pack/pack-<checksum>.rev    index positions in pack order (packd_reach::rev_index)
//! pack/pack-<checksum>.idx    version 2 index (packd_odb::pack::index::write::encode_v2)
//! ```
//!
//! Entries are appended in pack order ([`PackFileWriter::reuse_entry`], [`PackFileWriter::whole`],
//! [`PackFileWriter::delta`]); each one's offset and CRC-32 are recorded as its bytes go out,
//! and the trailer is hashed as they go, so the pack is never held in memory: what is kept is
//! one [`IndexEntry`] (36 bytes) an object, which the index needs anyway.
//!
//! Publish order: the pack first, then the `.rev` (and any file of the pack's own the caller
//! gives [`PackFileWriter::finish_with`], a cruft pack's `.mtimes`), then the `.idx` last. A reader (git or
//! packd) finds packs by listing `pack-*.idx`: a pack without an index is invisible, and git's
//! own `git repack` and `git index-pack` publish in this order for that reason. An index
//! published before its pack would name a pack that is not there (git reports the pack
//! missing); a `.rev` published after the index could be read half-absent by a process that
//! opened the index first (it then builds the order itself, but a bitmap reader expects both).
//! A writer killed between two publishes leaves a pack without an index, which nothing reads
//! and `git gc`/`packd repack` remove; killed before the first, only a `tmp_packd_*` file.
//! Every file is named by the checksum of the pack, so publishing a pack that already exists
//! (the same objects in the same order) finds its files present and keeps them.
//!
//! Deltas are written as offset deltas against an entry already written to this pack, so a
//! pack written here is self-contained and its chains acyclic by construction.

use packd_odb::pack::data::{decode_entry_header, encode_ofs_distance, encode_type_and_size};
use packd_odb::pack::data::{EntryKind, OFS_DELTA};
use packd_odb::pack::index::write::{encode_v2, IndexEntry};
use packd_odb::pack::Pack;
use packd_odb::{HashKind, ObjectId, ObjectKind};
use packd_storage::{NewBlob, Storage, StorageError};
use sha1::{Digest, Sha1};
use std::io::Write;
use std::sync::Arc;

/// Bytes buffered before they are handed to the storage layer.
const BUFFER: usize = 256 * 1024;

/// Pieces in which an entry larger than this is copied from its pack (memory stays bounded
/// whatever the entry's size).
const PIECE: u64 = 1 << 20;

/// Enough bytes for any entry header.
const MAX_HEADER: u64 = 64;

/// Why a pack could not be written.
#[derive(Debug, thiserror::Error)]
pub enum PackFileError {
    /// The storage layer failed (creating, writing, publishing a file).
    #[error(transparent)]
    Storage(#[from] StorageError),
    /// Reading an entry to reuse failed, or the entry is damaged.
    #[error(transparent)]
    Odb(#[from] packd_odb::Error),
    /// Writing to the new file failed.
    #[error("{name}: {source}")]
    Io {
        /// The file being written.
        name: String,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// The caller broke the writer's contract (a base not yet written, a count that does not
    /// match): a bug, reported rather than written into a pack git would reject.
    #[error("pack being written: {0}")]
    Misuse(String),
}

/// A pack published by [`PackFileWriter::finish`].
#[derive(Debug, Clone)]
pub struct WrittenPack {
    /// The pack's name in the objects storage, `pack/pack-<checksum>.pack`.
    pub name: String,
    /// The pack's checksum (its trailer), in hex it is the name's `<checksum>`.
    pub checksum: [u8; 20],
    /// Every object, in pack order, with its offset and CRC-32.
    pub entries: Vec<IndexEntry>,
    /// The pack file's size in bytes.
    pub size: u64,
    /// Whether the pack file existed already (the same objects in the same order): it was
    /// kept as it was, and its `.rev` and `.idx` written only where missing.
    pub existed: bool,
}

impl WrittenPack {
    /// The name of the pack's index, `pack/pack-<checksum>.idx`.
    pub fn idx_name(&self) -> String {
        self.name.replace(".pack", ".idx")
    }

    /// The pack's name without directory and extension, `pack-<checksum>`.
    pub fn base_name(&self) -> String {
        format!("pack-{}", packd_odb::hex(&self.checksum))
    }
}

/// What [`PackFileWriter::finish_with`] tells its callback: the pack is published, its
/// `.idx` not yet.
#[derive(Debug)]
pub struct Finished<'a> {
    /// The storage the pack is written to (where files of its own go).
    pub storage: &'a dyn Storage,
    /// `pack/pack-<checksum>`: the pack's files' names without their extension.
    pub base_name: &'a str,
    /// The pack's checksum.
    pub checksum: &'a [u8; 20],
    /// Every entry, sorted by id (index order).
    pub by_id: &'a [IndexEntry],
}

/// The pack file being written: buffered, hashed and counted as it goes.
struct Stream {
    blob: Box<dyn NewBlob>,
    buf: Vec<u8>,
    hash: Sha1,
    written: u64,
}

impl Stream {
    fn io(&self, source: std::io::Error) -> PackFileError {
        PackFileError::Io {
            name: self.blob.name().to_string(),
            source,
        }
    }

    fn put(&mut self, bytes: &[u8]) -> Result<(), PackFileError> {
        self.hash.update(bytes);
        self.written += bytes.len() as u64;
        if self.buf.len() + bytes.len() > BUFFER {
            self.flush()?;
        }
        if bytes.len() >= BUFFER {
            let r = self.blob.write_all(bytes);
            r.map_err(|e| self.io(e))
        } else {
            self.buf.extend_from_slice(bytes);
            Ok(())
        }
    }

    fn flush(&mut self) -> Result<(), PackFileError> {
        if !self.buf.is_empty() {
            let r = self.blob.write_all(&self.buf);
            r.map_err(|e| self.io(e))?;
            self.buf.clear();
        }
        Ok(())
    }
}

/// Writes one pack (see the module documentation): `object_count` entries appended in pack
/// order, then [`PackFileWriter::finish`] publishes the pack, its `.rev` and its `.idx`.
/// Dropped before `finish`, it leaves nothing but possibly a removed temporary file.
pub struct PackFileWriter {
    storage: Arc<dyn Storage>,
    hash_kind: HashKind,
    expected: u32,
    stream: Stream,
    entries: Vec<IndexEntry>,
    compressor: libdeflater::Compressor,
    /// The entry's header being built.
    header: Vec<u8>,
    /// An entry's bytes read from its pack, for large entries piece by piece.
    piece: Vec<u8>,
}

impl std::fmt::Debug for PackFileWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PackFileWriter")
            .field("expected", &self.expected)
            .field("written", &self.entries.len())
            .finish()
    }
}

/// The libdeflate level for git's `pack.compression` / `core.compression` value (-1 is zlib's
/// default, 6; 0..=9 as zlib's).
pub fn compression_level(git_level: i64) -> libdeflater::CompressionLvl {
    let level = if git_level < 0 { 6 } else { git_level.min(9) };
    libdeflater::CompressionLvl::new(level as i32).unwrap_or_default()
}

impl PackFileWriter {
    /// Starts a pack of `object_count` objects in `storage` (a repository's objects storage),
    /// compressing new objects at `level`.
    pub fn new(
        storage: Arc<dyn Storage>,
        hash_kind: HashKind,
        object_count: u32,
        level: libdeflater::CompressionLvl,
    ) -> Result<PackFileWriter, PackFileError> {
        // The name is replaced by the checksum's at the end; the bytes go to a temporary file.
        let blob = storage.create("pack/pack-packd-new.pack")?;
        let mut writer = PackFileWriter {
            storage,
            hash_kind,
            expected: object_count,
            stream: Stream {
                blob,
                buf: Vec::with_capacity(BUFFER),
                hash: Sha1::new(),
                written: 0,
            },
            entries: Vec::with_capacity(object_count.min(1 << 24) as usize),
            compressor: libdeflater::Compressor::new(level),
            header: Vec::with_capacity(32),
            piece: Vec::new(),
        };
        writer
            .stream
            .put(&packd_odb::pack::data::encode_pack_header(object_count))?;
        Ok(writer)
    }

    /// How many entries are written so far (the index the next one gets).
    pub fn len(&self) -> u32 {
        self.entries.len() as u32
    }

    /// True before the first entry.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Bytes of the pack written so far.
    pub fn bytes_written(&self) -> u64 {
        self.stream.written
    }

    /// Starts an entry: checks the count, returns its offset.
    fn begin(&self, id: &ObjectId) -> Result<u64, PackFileError> {
        if self.entries.len() as u64 >= self.expected as u64 {
            return Err(PackFileError::Misuse(format!(
                "object {id} is one more than the {} announced",
                self.expected
            )));
        }
        Ok(self.stream.written)
    }

    /// The offset of entry `base` of this pack, which must come before the entry at `here`.
    fn base_distance(&self, id: &ObjectId, base: u32, here: u64) -> Result<u64, PackFileError> {
        match self.entries.get(base as usize) {
            Some(e) if e.offset < here => Ok(here - e.offset),
            _ => Err(PackFileError::Misuse(format!(
                "object {id}: its delta base {base} is not written yet"
            ))),
        }
    }

    /// Writes the header and data of an entry, records it, returns its index.
    fn append(&mut self, id: ObjectId, offset: u64, data: &[u8]) -> Result<u32, PackFileError> {
        let mut crc = crc32fast::Hasher::new();
        crc.update(&self.header);
        crc.update(data);
        let header = std::mem::take(&mut self.header);
        let r = self
            .stream
            .put(&header)
            .and_then(|()| self.stream.put(data));
        self.header = header;
        r?;
        self.entries.push(IndexEntry {
            id,
            offset,
            crc32: crc.finalize(),
        });
        Ok(self.entries.len() as u32 - 1)
    }

    /// Appends object `id` as a whole object of `kind` with content `data`, compressed here.
    pub fn whole(
        &mut self,
        id: ObjectId,
        kind: ObjectKind,
        data: &[u8],
    ) -> Result<u32, PackFileError> {
        let offset = self.begin(&id)?;
        self.header.clear();
        encode_type_and_size(&mut self.header, kind.pack_type(), data.len() as u64);
        let mut compressed = vec![0u8; self.compressor.zlib_compress_bound(data.len())];
        let n = self
            .compressor
            .zlib_compress(data, &mut compressed)
            .map_err(|e| PackFileError::Misuse(format!("compressing {id}: {e}")))?;
        compressed.truncate(n);
        self.append(id, offset, &compressed)
    }

    /// Appends object `id` as an offset delta against entry `base` of this pack (written
    /// earlier): `compressed` is the zlib stream of a delta of `delta_size` bytes.
    pub fn delta(
        &mut self,
        id: ObjectId,
        base: u32,
        compressed: &[u8],
        delta_size: u64,
    ) -> Result<u32, PackFileError> {
        let offset = self.begin(&id)?;
        let distance = self.base_distance(&id, base, offset)?;
        self.header.clear();
        encode_type_and_size(&mut self.header, OFS_DELTA, delta_size);
        encode_ofs_distance(&mut self.header, distance);
        self.append(id, offset, compressed)
    }

    /// Appends the entry of object `id` at `offset` of `pack` as it is on disk: a whole object
    /// byte for byte; a delta (offset or ref) with its header rewritten as an offset delta
    /// against entry `base` of this pack, which must hold the delta's base object (the caller
    /// knows it: it placed that base). The entry's bytes are checked against the CRC-32 of
    /// `pack`'s index before the pack is published (a damaged entry fails the write, naming
    /// the pack and offset, and nothing is published).
    pub fn reuse_entry(
        &mut self,
        id: ObjectId,
        pack: &Pack,
        offset: u64,
        base: Option<u32>,
    ) -> Result<u32, PackFileError> {
        let here = self.begin(&id)?;
        let (index_pos, end) = pack.entry_span(offset)?;
        let data = pack.data();
        let corrupt = |what: &str| packd_odb::Error::corrupt(pack.data_name(), offset, what);
        let small = end - offset <= PIECE;
        let first = if small {
            data.read(offset..end)?
        } else {
            data.read(offset..(offset + MAX_HEADER).min(end))?
        };
        let entry = decode_entry_header(&first, offset, self.hash_kind).map_err(corrupt)?;
        let is_delta = !matches!(entry.kind, EntryKind::Base(_));
        self.header.clear();
        match (is_delta, base) {
            (false, None) => self.header.extend_from_slice(&first[..entry.header_len]),
            (true, Some(base)) => {
                let distance = self.base_distance(&id, base, here)?;
                encode_type_and_size(&mut self.header, OFS_DELTA, entry.size);
                encode_ofs_distance(&mut self.header, distance);
            }
            (false, Some(_)) => {
                return Err(PackFileError::Misuse(format!(
                    "object {id}: a base was given for a whole entry"
                )))
            }
            (true, None) => {
                return Err(PackFileError::Misuse(format!(
                    "object {id}: a delta entry reused without its base"
                )))
            }
        }
        let expected = pack.index().crc32(index_pos);
        let mut old_crc = crc32fast::Hasher::new();
        let mut new_crc = crc32fast::Hasher::new();
        new_crc.update(&self.header);
        let header = std::mem::take(&mut self.header);
        let put = self.stream.put(&header);
        self.header = header;
        put?;
        if small {
            old_crc.update(&first);
            let body = &first[entry.header_len..];
            new_crc.update(body);
            self.stream.put(body)?;
        } else {
            old_crc.update(&first[..entry.header_len]);
            let mut at = offset + entry.header_len as u64;
            let mut piece = std::mem::take(&mut self.piece);
            while at < end {
                let to = end.min(at + PIECE);
                data.read_copy_into(at..to, &mut piece)?;
                old_crc.update(&piece);
                new_crc.update(&piece);
                if let Err(e) = self.stream.put(&piece) {
                    self.piece = piece;
                    return Err(e);
                }
                at = to;
            }
            self.piece = piece;
        }
        if expected.is_some_and(|e| e != old_crc.finalize()) {
            return Err(corrupt(&format!(
                "object {id}: the entry does not match the CRC-32 in its index"
            ))
            .into());
        }
        self.entries.push(IndexEntry {
            id,
            offset: here,
            crc32: new_crc.finalize(),
        });
        Ok(self.entries.len() as u32 - 1)
    }

    /// Copies every entry of `pack` as it is, byte for byte and in its order, as the first
    /// entries of this pack (nothing written yet): each keeps its offset (both packs start
    /// with a 12-byte header) and the CRC-32 its `.idx` records, so nothing is decompressed
    /// and `pack`'s offset deltas stay valid. The bytes are read in pieces with plain reads,
    /// not mapped (memory stays bounded whatever the pack's size). Entry `i` of this pack is
    /// then `pack`'s `i`th entry by offset. `pack` needs a version 2 index (it has CRCs).
    pub fn copy_pack_body(&mut self, pack: &Pack) -> Result<(), PackFileError> {
        if !self.entries.is_empty() || self.stream.written != 12 {
            return Err(PackFileError::Misuse(
                "a pack body is copied before any entry".into(),
            ));
        }
        if self.entries.len() as u64 + pack.len() as u64 > self.expected as u64 {
            return Err(PackFileError::Misuse(format!(
                "{}: {} objects, more than the {} announced",
                pack.data_name(),
                pack.len(),
                self.expected
            )));
        }
        let data = pack.data();
        let head = data.read_copy(0..12)?;
        if &head[..4] != b"PACK" || head[4..8] != 2u32.to_be_bytes() {
            let e = packd_odb::Error::corrupt(pack.data_name(), 0, "not a version 2 pack");
            return Err(e.into());
        }
        let positions = pack.positions_in_pack_order()?;
        let offsets = pack.sorted_offsets()?;
        let index = pack.index();
        self.entries.reserve(positions.len());
        for (&pos, &offset) in positions.iter().zip(offsets) {
            let crc32 = index.crc32(pos).ok_or_else(|| {
                PackFileError::Misuse(format!("{}: a version 1 index has no CRCs", pack.name()))
            })?;
            self.entries.push(IndexEntry {
                id: index.id(pos),
                offset,
                crc32,
            });
        }
        let end = pack.entries_end();
        let mut at = 12;
        let mut piece = std::mem::take(&mut self.piece);
        while at < end {
            let to = end.min(at + 4 * PIECE);
            if let Err(e) = data.read_copy_into(at..to, &mut piece) {
                self.piece = piece;
                return Err(e.into());
            }
            if let Err(e) = self.stream.put(&piece) {
                self.piece = piece;
                return Err(e);
            }
            at = to;
        }
        self.piece = piece;
        Ok(())
    }

    /// Ends the pack with its checksum and publishes it, its `.rev` and its `.idx`, in that
    /// order (see the module documentation).
    pub fn finish(self) -> Result<WrittenPack, PackFileError> {
        self.finish_with(|_| Ok(()))
    }

    /// [`PackFileWriter::finish`], calling `before_index` once the pack and its `.rev` are
    /// published and before the `.idx` is: a file that belongs to the pack and must be there
    /// when readers find it (its `.bitmap`) is published there. An error from it leaves the
    /// pack unpublished for readers (no `.idx`), and is returned.
    pub fn finish_with(
        mut self,
        before_index: impl FnOnce(&Finished<'_>) -> Result<(), PackFileError>,
    ) -> Result<WrittenPack, PackFileError> {
        if self.entries.len() as u64 != self.expected as u64 {
            return Err(PackFileError::Misuse(format!(
                "{} objects written, {} announced",
                self.entries.len(),
                self.expected
            )));
        }
        self.stream.flush()?;
        let checksum: [u8; 20] = self.stream.hash.finalize_reset().into();
        let r = self.stream.blob.write_all(&checksum);
        r.map_err(|e| self.stream.io(e))?;
        let size = self.stream.written + 20;
        let base = format!("pack/pack-{}", packd_odb::hex(&checksum));
        let name = format!("{base}.pack");
        self.stream.blob.rename(&name)?;
        let existed = publish_blob(self.stream.blob)?;

        // Index positions in pack order: the entries sorted by id give each one's position.
        let mut by_id: Vec<u32> = (0..self.entries.len() as u32).collect();
        by_id.sort_unstable_by_key(|&i| self.entries[i as usize].id);
        let mut positions = vec![0u32; by_id.len()];
        for (index_pos, &pack_pos) in by_id.iter().enumerate() {
            positions[pack_pos as usize] = index_pos as u32;
        }
        drop(by_id);
        let rev = packd_reach::rev_index::encode(&positions, &checksum)
            .map_err(|e| PackFileError::Misuse(e.to_string()))?;
        drop(positions);
        publish_bytes(&*self.storage, &format!("{base}.rev"), &rev)?;
        drop(rev);

        let mut sorted = self.entries.clone();
        sorted.sort_unstable_by_key(|e| e.id);
        before_index(&Finished {
            storage: &*self.storage,
            base_name: &base,
            checksum: &checksum,
            by_id: &sorted,
        })?;
        let idx = encode_v2(&mut sorted, &checksum);
        drop(sorted);
        publish_bytes(&*self.storage, &format!("{base}.idx"), &idx)?;
        tracing::debug!(
            "{name}: {} objects, {size} bytes{}",
            self.entries.len(),
            if existed { " (existed)" } else { "" }
        );
        Ok(WrittenPack {
            name,
            checksum,
            entries: self.entries,
            size,
            existed,
        })
    }
}

/// Publishes `blob`; true if a blob of that name existed (content-named: the same bytes).
fn publish_blob(blob: Box<dyn NewBlob>) -> Result<bool, PackFileError> {
    match blob.publish() {
        Ok(()) => Ok(false),
        Err(StorageError::AlreadyExists { .. }) => Ok(true),
        Err(e) => Err(e.into()),
    }
}

/// Writes and publishes blob `name` holding `bytes`; true if it existed already.
pub(crate) fn publish_bytes(
    storage: &dyn Storage,
    name: &str,
    bytes: &[u8],
) -> Result<bool, PackFileError> {
    let mut blob = storage.create(name)?;
    blob.write_all(bytes).map_err(|source| PackFileError::Io {
        name: name.to_string(),
        source,
    })?;
    publish_blob(blob)
}

#[cfg(test)]
mod tests;
