//! Rolling packs and loose objects up into one new pack, every entry reused as it is stored:
//! a whole object stays whole, a delta stays the same delta (rewritten as an offset delta
//! against its base's new place), a loose object is compressed once. Nothing is inflated but
//! loose objects and the rare delta whose base is in no pack rolled up with it. The files are
//! written by [`crate::pack_file::PackFileWriter`].
//!
//! ```text
//! pack by pack, in offset order: each object once (its first pack's entry); a delta whose
//!   base (in the same pack) is not written yet gets its base written first
//! then the loose objects, whole
//! -> pack/pack-<sha1>.pack, .rev, .idx (the index last: a reader that sees it sees a
//!    complete pack)
//! ```
//!
//! Object ids come from the source indexes (as git's pack-objects reuses them); the bytes of
//! each reused entry are checked against its index's CRC-32, so a damaged entry fails the
//! roll-up instead of spreading. Chains stay acyclic: an object's entry comes from the first
//! pack that holds it, and a reused delta's base is in that same pack, so every base's own
//! chain lies in packs written no later.

use crate::pack_file::{compression_level, PackFileError, PackFileWriter};
use packd_odb::pack::data::EntryKind;
use packd_odb::pack::Pack;
use packd_odb::{ObjectDb, ObjectId};
use packd_storage::Storage;
use std::collections::{HashMap, HashSet};
use std::sync::Arc;

/// A delta chain this long inside one pack is taken for a damaged pack (a cycle): its object
/// is written whole instead.
const MAX_CHAIN: usize = 10_000;

/// Why no pack was written (nothing is left behind).
#[derive(Debug, thiserror::Error)]
pub enum RollUpError {
    /// Reading a pack or object failed.
    #[error(transparent)]
    Odb(#[from] packd_odb::Error),
    /// Writing the pack failed (a damaged entry to reuse included).
    #[error(transparent)]
    Write(#[from] PackFileError),
    /// An object listed could not be read.
    #[error("object {0} vanished or cannot be read")]
    MissingObject(ObjectId),
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

/// Writes one pack holding every object of `packs` and `loose` (each once) into `storage`
/// (the repository's objects storage), reusing stored entries; its `.pack`, `.rev` and
/// `.idx` are durable when this returns. `odb` reads the loose objects and the whole objects
/// a delta is turned into. `None` when there is nothing to write.
pub fn roll_up(
    storage: &Arc<dyn Storage>,
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
    drop(members);
    let mut writer = PackFileWriter::new(
        storage.clone(),
        odb.hash_kind(),
        count,
        compression_level(-1),
    )?;
    let mut written: HashMap<ObjectId, u32> = HashMap::with_capacity(count as usize);
    for pack in packs {
        copy_pack(pack, odb, &mut writer, &mut written)?;
    }
    for id in loose {
        if !written.contains_key(id) {
            let at = write_whole(odb, id, &mut writer)?;
            written.insert(*id, at);
        }
    }
    let pack = writer.finish()?;
    Ok(Some(RolledUp {
        idx_name: format!("{}.idx", pack.base_name()),
        objects: count,
        existed: pack.existed,
    }))
}

/// Copies the entries of `pack` whose objects are not `written` yet, in offset order (a
/// delta's base of the same pack first when it comes later, as a thin pack's appended bases
/// do).
fn copy_pack(
    pack: &Pack,
    odb: &ObjectDb,
    writer: &mut PackFileWriter,
    written: &mut HashMap<ObjectId, u32>,
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
    let offset_of = |id: &ObjectId| -> Result<Option<u64>, RollUpError> {
        match index.find(id) {
            Some(pos) => Ok(Some(index.offset(pos)?)),
            None => Ok(None),
        }
    };
    let mut chain: Vec<(ObjectId, u64)> = Vec::new();
    for entry in &at {
        chain.push((index.id(entry.position), entry.offset));
        while let Some(&(id, offset)) = chain.last() {
            if written.contains_key(&id) {
                chain.pop();
                continue;
            }
            let base = match pack.entry_header(offset)?.kind {
                EntryKind::Base(_) => None,
                EntryKind::OfsDelta { base_offset } => id_at(base_offset),
                EntryKind::RefDelta { base } => Some(base),
            };
            let placed = match base {
                None => writer.reuse_entry(id, pack, offset, None)?,
                Some(base) => match written.get(&base) {
                    Some(&base_at) => writer.reuse_entry(id, pack, offset, Some(base_at))?,
                    None => match offset_of(&base)? {
                        Some(base_offset) if chain.len() < MAX_CHAIN => {
                            chain.push((base, base_offset));
                            continue;
                        }
                        _ => write_whole(odb, &id, writer)?,
                    },
                },
            };
            written.insert(id, placed);
            chain.pop();
        }
    }
    Ok(())
}

/// Writes object `id`, read from `odb`, as a whole entry; returns its place.
fn write_whole(
    odb: &ObjectDb,
    id: &ObjectId,
    writer: &mut PackFileWriter,
) -> Result<u32, RollUpError> {
    let object = odb.read(id)?.ok_or(RollUpError::MissingObject(*id))?;
    Ok(writer.whole(*id, object.kind, &object.data)?)
}
