//! Resolving the deltas of a received pack: the id and kind of every entry, on all cores.
//!
//! Every delta has exactly one base, so the entries form a forest: whole objects are roots, and
//! each delta hangs under its base (by offset for ofs-deltas, by id for ref-deltas). Roots are
//! resolved in parallel, each tree depth first so that only one chain of bases is in memory per
//! thread. Ref-deltas whose base is not in the pack (a thin pack) hang under bases read from the
//! repository, resolved the same way and in parallel too (git resolves those on one thread).
//! A delta left unresolved has a missing base or sits on a cycle of ref-deltas; either is an
//! error naming its offset, never a loop.

use crate::pack::data::input::{InputEntry, BATCH};
use crate::pack::data::EntryKind;
use crate::{delta, zlib, Error, ObjectId, ObjectKind, Result};
use packd_storage::Blob;
use rayon::prelude::*;

/// The resolved object of each entry, in entry order, and the bases read from outside the pack.
#[derive(Debug)]
pub struct Resolved {
    /// Per entry: its object's id and kind.
    pub objects: Vec<(ObjectId, ObjectKind)>,
    /// Ids of the bases that came from the repository (for completing a thin pack), sorted.
    pub external_bases: Vec<ObjectId>,
}

/// Looks up an object outside the pack: its kind and content.
pub type ExternalBase<'a> = dyn Fn(&ObjectId) -> Result<Option<(ObjectKind, Vec<u8>)>> + Sync + 'a;

/// Sees each object whose content index-pack has in memory anyway, from the threads that
/// have it, so that checks on the content need not read those objects again: `(id, kind,
/// content)`. Shown once each: every delta's result as it is resolved; every whole object that
/// is not a blob, of up to 1 MiB, as it is read and hashed
/// ([`crate::pack::data::input::read_pack_observed`]); a larger whole object when it is a
/// delta's base. A larger whole object that is no delta's base, and a whole blob, are not
/// shown.
pub trait ObjectObserver: Sync {
    /// Called once for each such object, from any thread.
    fn observe(&self, id: &ObjectId, kind: ObjectKind, data: &[u8]);
}

/// An entry resolved: its position, id and kind.
type Done = (u32, ObjectId, ObjectKind);

struct Children {
    /// (base offset, child entry), sorted.
    by_offset: Vec<(u64, u32)>,
    /// (base id, child entry), sorted.
    by_id: Vec<(ObjectId, u32)>,
}

impl Children {
    fn of_offset(&self, offset: u64) -> impl Iterator<Item = u32> + '_ {
        let start = self.by_offset.partition_point(|&(o, _)| o < offset);
        self.by_offset[start..]
            .iter()
            .take_while(move |&&(o, _)| o == offset)
            .map(|&(_, c)| c)
    }

    fn of_id(&self, id: &ObjectId) -> impl Iterator<Item = u32> + '_ {
        let id = *id;
        let start = self.by_id.partition_point(|(b, _)| *b < id);
        self.by_id[start..]
            .iter()
            .take_while(move |(b, _)| *b == id)
            .map(|&(_, c)| c)
    }
}

/// Inflates the data of `entry` from the pack. Its bytes are read with `read_copy`, which does
/// not leave them mapped: a mapped read would leave every page of the pack counted in the
/// process's resident memory (hundreds of MB for a large pack), when each entry is read once or
/// twice.
fn inflate(pack: &dyn Blob, entry: &InputEntry) -> Result<Vec<u8>> {
    let start = entry.offset + entry.header_len as u64;
    let bytes = pack.read_copy(start..entry.end)?;
    zlib::inflate_exact(&bytes, entry.size)
        .map_err(|e| Error::corrupt(pack.name(), entry.offset, format!("entry data: {e}")))
}

/// Resolves every delta under the object (`kind`, `data`) whose id is `id` and, when it is an
/// entry of the pack, whose offset is `offset`. Returns (entry, id, kind) for each.
fn resolve_tree(
    pack: &dyn Blob,
    entries: &[InputEntry],
    children: &Children,
    root: (Option<u64>, ObjectId, ObjectKind, Vec<u8>),
    observer: Option<&dyn ObjectObserver>,
) -> Result<Vec<Done>> {
    let mut out = Vec::new();
    // Frames of the depth-first walk: a resolved object and the children still to do.
    let (offset, id, kind, data) = root;
    let kids = |offset: Option<u64>, id: &ObjectId| -> Vec<u32> {
        let mut v: Vec<u32> = offset
            .map(|o| children.of_offset(o).collect())
            .unwrap_or_default();
        v.extend(children.of_id(id));
        v
    };
    let mut stack: Vec<(ObjectKind, Vec<u8>, Vec<u32>)> = vec![(kind, data, kids(offset, &id))];
    while let Some((kind, data, mut todo)) = stack.pop() {
        let Some(child) = todo.pop() else {
            continue;
        };
        let entry = &entries[child as usize];
        let delta_data = inflate(pack, entry)?;
        let result = delta::apply(&data, &delta_data).map_err(|e| {
            Error::corrupt(
                pack.name(),
                entry.offset,
                format!("the delta does not apply: {e}"),
            )
        })?;
        let result_id = ObjectId::compute(kind, &result)
            .map_err(|e| Error::corrupt(pack.name(), entry.offset, e.to_string()))?;
        if let Some(observer) = observer {
            observer.observe(&result_id, kind, &result);
        }
        out.push((child, result_id, kind));
        let grandchildren = kids(Some(entry.offset), &result_id);
        stack.push((kind, data, todo));
        if !grandchildren.is_empty() {
            stack.push((kind, result, grandchildren));
        }
    }
    Ok(out)
}

/// Resolves the `entries` of `pack` (see the module documentation). `external` finds bases
/// outside the pack; without it, a thin pack is an error. `observer` sees the deltas'
/// results and the whole bases over 1 MiB (see [`ObjectObserver`]; a base read from outside
/// the pack is not shown, the deltas under it are).
pub fn resolve(
    pack: &dyn Blob,
    entries: &[InputEntry],
    external: Option<&ExternalBase>,
    observer: Option<&dyn ObjectObserver>,
) -> Result<Resolved> {
    let mut by_offset = Vec::new();
    let mut by_id = Vec::new();
    for (i, e) in entries.iter().enumerate() {
        match e.kind {
            EntryKind::OfsDelta { base_offset } => by_offset.push((base_offset, i as u32)),
            EntryKind::RefDelta { base } => by_id.push((base, i as u32)),
            EntryKind::Base(_) => {}
        }
    }
    by_offset.sort_unstable();
    by_id.sort_unstable();
    let children = Children { by_offset, by_id };

    let roots: Vec<u32> = (0..entries.len() as u32)
        .filter(|&i| matches!(entries[i as usize].kind, EntryKind::Base(_)))
        .collect();
    let mut objects: Vec<Option<(ObjectId, ObjectKind)>> = vec![None; entries.len()];
    let small = entries.len() < crate::PARALLEL_FROM;
    let resolve_root = |&r: &u32| {
        let entry = &entries[r as usize];
        let EntryKind::Base(kind) = entry.kind else {
            return Ok(Vec::new());
        };
        let id = entry.id.ok_or_else(|| {
            Error::corrupt(pack.name(), entry.offset, "a whole object without an id")
        })?;
        let has_children = children.of_offset(entry.offset).next().is_some()
            || children.of_id(&id).next().is_some();
        let mut out = vec![(r, id, kind)];
        if has_children {
            let data = inflate(pack, entry)?;
            // One of at most BATCH bytes was shown as it was read.
            if let (Some(observer), true) = (observer, entry.size > BATCH as u64) {
                observer.observe(&id, kind, &data);
            }
            out.extend(resolve_tree(
                pack,
                entries,
                &children,
                (Some(entry.offset), id, kind, data),
                observer,
            )?);
        }
        Ok(out)
    };
    let resolved: Vec<Vec<Done>> = if small {
        roots.iter().map(resolve_root).collect::<Result<_>>()?
    } else {
        roots.par_iter().map(resolve_root).collect::<Result<_>>()?
    };
    for (i, id, kind) in resolved.into_iter().flatten() {
        objects[i as usize] = Some((id, kind));
    }

    // Ref-deltas still unresolved: their bases are outside the pack, or missing.
    let mut outside: Vec<ObjectId> = children
        .by_id
        .iter()
        .filter(|&&(_, c)| objects[c as usize].is_none())
        .map(|&(b, _)| b)
        .collect();
    outside.dedup();
    let mut external_bases = Vec::new();
    if let (Some(external), false) = (external, outside.is_empty()) {
        let resolve_outside = |base: &ObjectId| -> Result<Option<(ObjectId, Vec<Done>)>> {
            // A base that is itself a delta of this pack would have been resolved above.
            let Some((kind, data)) = external(base)? else {
                return Ok(None);
            };
            let tree = resolve_tree(
                pack,
                entries,
                &children,
                (None, *base, kind, data),
                observer,
            )?;
            Ok(Some((*base, tree)))
        };
        let found: Vec<Option<(ObjectId, Vec<Done>)>> = if small {
            outside.iter().map(resolve_outside).collect::<Result<_>>()?
        } else {
            outside
                .par_iter()
                .map(resolve_outside)
                .collect::<Result<_>>()?
        };
        for (base, tree) in found.into_iter().flatten() {
            external_bases.push(base);
            for (i, id, kind) in tree {
                objects[i as usize] = Some((id, kind));
            }
        }
    }
    let unresolved: Vec<&InputEntry> = entries
        .iter()
        .zip(&objects)
        .filter(|(_, o)| o.is_none())
        .map(|(e, _)| e)
        .collect();
    if let Some(first) = unresolved.first() {
        let why = match first.kind {
            EntryKind::RefDelta { base } => format!(
                "its base {base} is neither in the pack nor in the repository, or the deltas form a cycle"
            ),
            EntryKind::OfsDelta { base_offset } => {
                format!("its base offset {base_offset} is not the start of an entry")
            }
            EntryKind::Base(_) => "unreachable".into(),
        };
        return Err(Error::corrupt(
            pack.name(),
            first.offset,
            format!(
                "{} delta(s) cannot be resolved; the first, here: {why}",
                unresolved.len()
            ),
        ));
    }
    external_bases.sort_unstable();
    Ok(Resolved {
        objects: objects.into_iter().map(|o| o.expect("checked")).collect(),
        external_bases,
    })
}
