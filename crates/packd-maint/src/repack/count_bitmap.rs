//! Counting a full repack's objects with the repository's reachability bitmap, when it has
//! one: the objects HEAD, branches and tags reach (part 0) and those only the other refs reach
//! (part 1) come out as bits in pack order, with the name hashes of the bitmap's cache,
//! without reading a commit or a tree; objects outside the bitmapped ones (pushed since) are
//! walked, as a fetch does (`BitmapIndex::difference_with_outside`).

use super::plan::{CLONE, REST};
use packd_odb::{IdMap, IdSet, ObjectId, ObjectKind, Repository};
use packd_reach::bitmap_walk::BitmapIndex;
use std::sync::atomic::AtomicBool;

/// One listed object: id, kind, name hash, part.
pub(super) type Listed = (ObjectId, ObjectKind, u32, u8);

/// The objects `clone_tips` reach, then those `other_tips` reach and they do not, counted by
/// the bitmap; `None` when there is no bitmap or it cannot answer (the caller walks).
pub(super) fn enumerate(
    repo: &Repository,
    clone_tips: &[ObjectId],
    other_tips: &[ObjectId],
) -> Result<Option<Vec<Listed>>, packd_odb::Error> {
    let Some(index) = BitmapIndex::open(repo)? else {
        return Ok(None);
    };
    let never = AtomicBool::new(false);
    let peeled = IdMap::default();
    let Some(clone) = index.difference_with_outside(repo, clone_tips, &[], &peeled, &never)? else {
        return Ok(None);
    };
    let rest = if other_tips.is_empty() {
        None
    } else {
        match index.difference_with_outside(repo, other_tips, clone_tips, &peeled, &never)? {
            Some(rest) => Some(rest),
            None => return Ok(None),
        }
    };
    let kinds = [
        ObjectKind::Commit,
        ObjectKind::Tag,
        ObjectKind::Tree,
        ObjectKind::Blob,
    ];
    let mut out = Vec::with_capacity(clone.wanted.count_ones() as usize);
    let mut seen = IdSet::default();
    for (part, found) in [(CLONE, Some(clone)), (REST, rest)] {
        let Some(found) = found else {
            continue;
        };
        for bit in found.wanted.iter_ones() {
            let Some((id, _)) = index.object_at(bit)? else {
                return Ok(None);
            };
            let Some(&kind) = kinds.iter().find(|k| index.type_bitmap(**k).get(bit)) else {
                return Ok(None);
            };
            let hash = index.name_hash(bit)?.unwrap_or(0);
            if seen.insert(id) {
                out.push((id, kind, hash, part));
            }
        }
        for (id, kind) in found.outside {
            if seen.insert(id) {
                out.push((id, kind, 0, part));
            }
        }
    }
    Ok(Some(out))
}
