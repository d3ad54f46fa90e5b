//! Writing the cruft pack: the kept unreachable objects in one pack (through
//! [`crate::pack_file`]) and its `.mtimes`.
//!
//! ```text
//! pack/pack-<checksum>.pack    the kept objects: entries copied as they are on disk (a
//!                              delta after its base, when the base is kept too), the rest
//!                              (loose objects, deltas on a base not kept) written whole
//! pack/pack-<checksum>.rev     written by pack_file
//! pack/pack-<checksum>.idx     written by pack_file
//! pack/pack-<checksum>.mtimes  one mtime per object in index order (super::mtimes)
//! ```
//!
//! The `.mtimes` is published before the `.idx` (through [`PackFileWriter::finish_with`]), as
//! git's pack-objects renames a pack's `.idx` after its `.pack`, `.rev` and `.mtimes`: readers
//! find packs by their index, and an index without its `.mtimes` reads as an ordinary pack
//! (git's `repack --geometric` would then roll its unreachable objects up into an ordinary
//! pack, where they stay for good). A writer killed before the `.idx` leaves files no reader
//! opens.

use super::collect::{collect, Collected};
use super::expire::select;
use super::{mtimes, CruftError, CruftOptions};
use crate::pack_file::{compression_level, PackFileWriter, WrittenPack};
use packd_odb::pack::Pack;
use packd_odb::{IdMap, IdSet, Location, ObjectDb, ObjectId, Repository};
use std::sync::Arc;

/// What [`write_cruft_pack`] did, and what [`super::prune::prune`] needs next.
#[derive(Debug, Default)]
pub struct CruftOutcome {
    /// The cruft pack written (`None` when nothing unreachable is kept).
    pub pack: Option<WrittenPack>,
    /// The kept objects, sorted by id, with their mtimes (as in the `.mtimes`).
    pub kept: Vec<(ObjectId, u32)>,
    /// The objects dropped: expired and reached by no recent one, sorted by id.
    pub dropped: Vec<ObjectId>,
    /// The loose objects listed (the prune deletes them: each is in the new packs or dropped).
    pub loose: Vec<ObjectId>,
}

impl CruftOutcome {
    /// Whether the cruft pack holds `id`.
    pub fn keeps(&self, id: &ObjectId) -> bool {
        self.kept.binary_search_by(|(k, _)| k.cmp(id)).is_ok()
    }
}

/// Writes a cruft pack of the objects in `old_packs` and the loose objects that `reachable`
/// does not hold (`reachable` must hold exactly what the new packs written beside it hold),
/// each with its newest mtime, leaving out those `options.expire` drops. Nothing is deleted
/// here: [`super::prune::prune`] does that, under the prune lock, once the new packs are
/// durable.
pub fn write_cruft_pack(
    repo: &Repository,
    reachable: &dyn Fn(&ObjectId) -> bool,
    old_packs: &[Arc<Pack>],
    options: &CruftOptions,
) -> Result<CruftOutcome, CruftError> {
    let Collected { unreachable, loose } = collect(repo, reachable, old_packs)?;
    let selection = select(repo.objects(), unreachable, options.expire)?;
    let mut outcome = CruftOutcome {
        pack: None,
        kept: selection.kept,
        dropped: selection.dropped,
        loose,
    };
    if outcome.kept.is_empty() {
        return Ok(outcome);
    }
    let storage =
        repo.objects().own_storage().cloned().ok_or_else(|| {
            CruftError::Unsupported("a repository without its own objects".into())
        })?;
    let level = ["pack.compression", "core.compression"]
        .iter()
        .find_map(|k| repo.config().get(k).and_then(packd_odb::config::parse_int))
        .unwrap_or(-1);
    let count = u32::try_from(outcome.kept.len())
        .map_err(|_| CruftError::Unsupported("more than 2^32 unreachable objects".into()))?;
    let mut writer = PackFileWriter::new(
        storage.clone(),
        repo.objects().hash_kind(),
        count,
        compression_level(i64::from(level)),
    )?;
    write_entries(repo.objects(), &outcome.kept, &mut writer)?;
    let times: Vec<u32> = outcome.kept.iter().map(|(_, t)| *t).collect();
    let written = writer.finish_with(|finished| {
        let (storage, checksum) = (finished.storage, finished.checksum);
        let bytes = mtimes::encode(&times, checksum);
        let name = format!("pack/pack-{}.mtimes", packd_odb::hex(checksum));
        // The same objects in the same order: the pack existed (a cruft pack of the same
        // objects), its .mtimes perhaps with other times, replaced by these.
        match storage.read_versioned(&name)? {
            None => {
                crate::pack_file::publish_bytes(storage, &name, &bytes)?;
            }
            Some((old, version)) if old[..] != bytes[..] => {
                storage.replace(&name, Some(&version), &bytes)?;
            }
            Some(_) => {}
        }
        Ok(())
    })?;
    tracing::debug!(
        pack = %written.name,
        kept = outcome.kept.len(),
        dropped = outcome.dropped.len(),
        "cruft pack written"
    );
    outcome.pack = Some(written);
    Ok(outcome)
}

/// Appends every object of `kept` to `writer`: a delta on disk whose base is kept too as it
/// is, after its base; a whole entry as it is; anything else (a loose object, a delta whose
/// base stays outside the cruft pack) inflated and written whole. Chains are followed with
/// an explicit stack; a base already on the stack (two packs' copies deltified against each
/// other) ends the chain with a whole object, so the pack's chains stay acyclic.
fn write_entries(
    objects: &ObjectDb,
    kept: &[(ObjectId, u32)],
    writer: &mut PackFileWriter,
) -> Result<(), CruftError> {
    let is_kept = |id: &ObjectId| kept.binary_search_by(|(k, _)| k.cmp(id)).is_ok();
    let mut written: IdMap<u32> = IdMap::default();
    let mut on_stack: IdSet = IdSet::default();
    for (first, _) in kept {
        let mut stack = vec![*first];
        while let Some(&id) = stack.last() {
            if written.contains_key(&id) {
                stack.pop();
                continue;
            }
            let location = objects.locate(&id)?.ok_or_else(|| missing(&id))?;
            let base = match objects.delta_base(&location)? {
                Some(base) if is_kept(&base) && !on_stack.contains(&base) => Some(base),
                _ => None,
            };
            if let Some(base) = base {
                match written.get(&base) {
                    None => {
                        on_stack.insert(id);
                        stack.push(base);
                        continue;
                    }
                    Some(&at) => {
                        let Location::Packed { pack, offset } = &location else {
                            unreachable!("only packed objects have a delta base")
                        };
                        let n = writer.reuse_entry(id, pack, *offset, Some(at))?;
                        written.insert(id, n);
                    }
                }
            } else {
                let n = match &location {
                    Location::Packed { pack, offset }
                        if objects.delta_base(&location)?.is_none() =>
                    {
                        writer.reuse_entry(id, pack, *offset, None)?
                    }
                    _ => {
                        let object = objects.read_at(&id, &location)?;
                        writer.whole(id, object.kind, &object.data)?
                    }
                };
                written.insert(id, n);
            }
            on_stack.remove(&id);
            stack.pop();
        }
    }
    Ok(())
}

fn missing(id: &ObjectId) -> CruftError {
    CruftError::Odb(packd_odb::Error::Corrupt {
        file: "(objects)".into(),
        offset: 0,
        what: format!("object {id} was listed but can no longer be read"),
    })
}
