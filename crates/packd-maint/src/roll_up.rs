//! Rolling packs and loose objects up into one new pack, every entry reused as it is stored:
//! a whole object stays whole, a delta stays the same delta (an offset delta gets its base
//! distance rewritten for its new place), a loose object is compressed once. Nothing is
//! inflated but loose objects and the rare delta whose base is outside its pack.
//!
//! ```text
//! pack/<tmp>                 "PACK" 2 count, entries pack by pack in offset order (each
//!                            object once: its first pack's entry), loose objects, SHA-1
//!   renamed and published    pack/pack-<sha1>.pack
//! pack/pack-<sha1>.rev       index positions in pack order (packd_reach::rev_index::encode)
//! pack/pack-<sha1>.idx       version 2 (packd_odb::pack::index::write::encode_v2), last:
//!                            a reader that sees it sees a complete pack
//! ```
//!
//! Object ids come from the source indexes (as git's pack-objects reuses them); the bytes of
//! each reused entry are checked against its index's CRC-32 before they are copied, so a
//! damaged entry fails the roll-up instead of spreading. Chains stay acyclic: an object's
//! entry comes from the first pack that holds it, and a reused delta's base is in that same
//! pack (an offset delta's always is; a reference delta whose base is not is written whole),
//! so every base's own chain lies in packs written no later.
//!
//! This is the geometric repack's writer until `pack_file` (the full repack's) takes its place.

use bytes::Bytes;
use packd_odb::pack::data::{encode_ofs_distance, encode_type_and_size, EntryKind, OFS_DELTA};
use packd_odb::pack::index::write::{encode_v2, IndexEntry};
use packd_odb::pack::Pack;
use packd_odb::{ObjectDb, ObjectId};
use packd_storage::{NewBlob, Storage, StorageError};
use sha1::Digest;
use std::collections::{HashMap, HashSet};
use std::io::Write;
use std::sync::Arc;

/// Why no pack was written (nothing is left behind).
#[derive(Debug, thiserror::Error)]
pub enum RollUpError {
    /// Reading a pack or object failed.
    #[error(transparent)]
    Odb(#[from] packd_odb::Error),
    /// Writing failed.
    #[error(transparent)]
    Storage(#[from] StorageError),
    /// Writing the pack's bytes failed.
    #[error("{name}: {source}")]
    Write {
        /// The blob being written.
        name: String,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// A reused entry's bytes do not match its index's CRC-32.
    #[error("{pack}: the entry at offset {offset} does not match the CRC-32 its index records")]
    BadCrc {
        /// The pack.
        pack: String,
        /// The entry's offset.
        offset: u64,
    },
    /// A loose object listed could not be read.
    #[error("loose object {0} vanished or cannot be read")]
    MissingObject(ObjectId),
    /// The reverse index could not be encoded.
    #[error(transparent)]
    RevIndex(#[from] packd_reach::rev_index::RevIndexError),
    /// More objects than a pack can count.
    #[error("more than 2^32 objects to roll up")]
    TooMany,
}

/// The pack a roll-up wrote.
#[derive(Debug, Clone)]
pub struct RolledUp {
    /// Its `.idx` file name, `pack-<hex>.idx`.
    pub idx_name: String,
    /// Objects in it.
    pub objects: u32,
    /// Whether a pack of that name existed already (the same objects rolled up before).
    pub existed: bool,
}

/// A pack being written: its bytes, their SHA-1 and length so far.
struct Out {
    blob: Box<dyn NewBlob>,
    hash: sha1::Sha1,
    len: u64,
}

impl Out {
    fn put(&mut self, bytes: &[u8]) -> Result<(), RollUpError> {
        self.blob
            .write_all(bytes)
            .map_err(|source| RollUpError::Write {
                name: self.blob.name().to_string(),
                source,
            })?;
        self.hash.update(bytes);
        self.len += bytes.len() as u64;
        Ok(())
    }
}

/// Writes one pack holding every object of `packs` and `loose` (each once) into `storage`'s
/// `pack/` directory, reusing stored entries; its `.pack`, `.rev` and `.idx` are durable when
/// this returns. `odb` reads the loose objects and the whole objects a delta is turned into.
/// `None` when there is nothing to write.
pub fn roll_up(
    storage: &dyn Storage,
    odb: &ObjectDb,
    packs: &[Arc<Pack>],
    loose: &[ObjectId],
) -> Result<Option<RolledUp>, RollUpError> {
    let mut members: HashSet<ObjectId> = HashSet::new();
    for pack in packs {
        let index = pack.index();
        members.extend((0..index.len()).map(|i| index.id(i)));
    }
    members.extend(loose.iter().copied());
    if members.is_empty() {
        return Ok(None);
    }
    let count = u32::try_from(members.len()).map_err(|_| RollUpError::TooMany)?;
    let mut out = Out {
        blob: storage.create("pack/tmp_roll_up.pack")?,
        hash: sha1::Sha1::new(),
        len: 0,
    };
    let mut header = b"PACK".to_vec();
    header.extend_from_slice(&2u32.to_be_bytes());
    header.extend_from_slice(&count.to_be_bytes());
    out.put(&header)?;

    let mut written: HashMap<ObjectId, u64> = HashMap::with_capacity(members.len());
    let mut entries: Vec<IndexEntry> = Vec::with_capacity(members.len());
    let mut compressor = libdeflater::Compressor::new(libdeflater::CompressionLvl::default());
    for pack in packs {
        copy_pack(
            pack,
            odb,
            &mut out,
            &mut written,
            &mut entries,
            &mut compressor,
        )?;
    }
    for id in loose {
        if written.contains_key(id) {
            continue;
        }
        let offset = out.len;
        let crc32 = write_whole(odb, id, &mut out, &mut compressor)?;
        written.insert(*id, offset);
        entries.push(IndexEntry {
            id: *id,
            offset,
            crc32,
        });
    }
    debug_assert_eq!(entries.len(), members.len());
    let checksum: [u8; 20] = out.hash.finalize_reset().into();
    let Out { mut blob, .. } = out;
    blob.write_all(&checksum)
        .map_err(|source| RollUpError::Write {
            name: blob.name().to_string(),
            source,
        })?;
    let stem = format!("pack/pack-{}", packd_odb::hex(&checksum));
    let idx_name = format!("{stem}.idx");
    let existed = storage.exists(&idx_name);
    if !existed {
        blob.rename(&format!("{stem}.pack"))?;
        publish(blob)?;
        let idx = encode_v2(&mut entries, &checksum);
        let mut by_offset: Vec<(u64, u32)> = entries
            .iter()
            .enumerate()
            .map(|(i, e)| (e.offset, i as u32))
            .collect();
        by_offset.sort_unstable();
        let order: Vec<u32> = by_offset.into_iter().map(|(_, i)| i).collect();
        let rev = packd_reach::rev_index::encode(&order, &checksum)?;
        put_blob(storage, &format!("{stem}.rev"), &rev)?;
        put_blob(storage, &idx_name, &idx)?;
    }
    Ok(Some(RolledUp {
        idx_name: idx_name.trim_start_matches("pack/").to_string(),
        objects: count,
        existed,
    }))
}

/// Publishes `blob`; one that exists already (the same bytes, named by their checksum) is fine.
fn publish(blob: Box<dyn NewBlob>) -> Result<(), RollUpError> {
    match blob.publish() {
        Ok(()) | Err(StorageError::AlreadyExists { .. }) => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// Writes and publishes the immutable blob `name` holding `bytes`.
fn put_blob(storage: &dyn Storage, name: &str, bytes: &[u8]) -> Result<(), RollUpError> {
    let mut blob = storage.create(name)?;
    blob.write_all(bytes).map_err(|source| RollUpError::Write {
        name: name.to_string(),
        source,
    })?;
    publish(blob)
}

/// Copies the entries of `pack` whose objects are not `written` yet, in offset order.
fn copy_pack(
    pack: &Pack,
    odb: &ObjectDb,
    out: &mut Out,
    written: &mut HashMap<ObjectId, u64>,
    entries: &mut Vec<IndexEntry>,
    compressor: &mut libdeflater::Compressor,
) -> Result<(), RollUpError> {
    let index = pack.index();
    let mut at = Vec::new();
    index.entries_in(0..u64::MAX, &mut at)?;
    at.sort_unstable_by_key(|e| e.offset);
    let id_at = |offset: u64| -> Option<ObjectId> {
        at.binary_search_by_key(&offset, |e| e.offset)
            .ok()
            .map(|i| index.id(at[i].position))
    };
    let own: HashSet<ObjectId> = (0..index.len()).map(|i| index.id(i)).collect();
    for entry in &at {
        let id = index.id(entry.position);
        if written.contains_key(&id) {
            continue;
        }
        let raw = pack.raw_entry(entry.offset)?;
        let crc = crc32fast::hash(&raw.bytes);
        if entry.crc.is_some_and(|c| c != crc) {
            return Err(RollUpError::BadCrc {
                pack: pack.data_name().to_string(),
                offset: entry.offset,
            });
        }
        let offset = out.len;
        let crc32 = match raw.header.kind {
            EntryKind::Base(_) => reuse(out, &raw.bytes, crc)?,
            EntryKind::RefDelta { base } if own.contains(&base) => reuse(out, &raw.bytes, crc)?,
            EntryKind::RefDelta { .. } => write_whole(odb, &id, out, compressor)?,
            EntryKind::OfsDelta { base_offset } => {
                match id_at(base_offset).and_then(|b| written.get(&b)) {
                    Some(&base_at) => {
                        let mut head = Vec::with_capacity(24);
                        encode_type_and_size(&mut head, OFS_DELTA, raw.header.size);
                        encode_ofs_distance(&mut head, offset - base_at);
                        let mut hasher = crc32fast::Hasher::new();
                        hasher.update(&head);
                        hasher.update(raw.compressed());
                        out.put(&head)?;
                        out.put(raw.compressed())?;
                        hasher.finalize()
                    }
                    None => write_whole(odb, &id, out, compressor)?,
                }
            }
        };
        written.insert(id, offset);
        entries.push(IndexEntry { id, offset, crc32 });
    }
    Ok(())
}

/// Copies an entry as it is; returns its CRC-32.
fn reuse(out: &mut Out, bytes: &Bytes, crc: u32) -> Result<u32, RollUpError> {
    out.put(bytes)?;
    Ok(crc)
}

/// Writes object `id`, read from `odb`, as a whole entry; returns its CRC-32.
fn write_whole(
    odb: &ObjectDb,
    id: &ObjectId,
    out: &mut Out,
    compressor: &mut libdeflater::Compressor,
) -> Result<u32, RollUpError> {
    let object = odb.read(id)?.ok_or(RollUpError::MissingObject(*id))?;
    let mut bytes = Vec::with_capacity(16 + compressor.zlib_compress_bound(object.data.len()));
    encode_type_and_size(
        &mut bytes,
        object.kind.pack_type(),
        object.data.len() as u64,
    );
    let head = bytes.len();
    bytes.resize(head + compressor.zlib_compress_bound(object.data.len()), 0);
    let n = compressor
        .zlib_compress(&object.data, &mut bytes[head..])
        .map_err(|e| RollUpError::Write {
            name: format!("object {id}"),
            source: std::io::Error::other(format!("{e:?}")),
        })?;
    bytes.truncate(head + n);
    out.put(&bytes)?;
    Ok(crc32fast::hash(&bytes))
}
