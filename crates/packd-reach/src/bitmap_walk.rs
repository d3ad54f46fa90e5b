//! Reachability with a pack's bitmaps: the exact set difference, as git computes it with
//! `--use-bitmap-index`.
//!
//! From each tip, walk as the plain walk does, but stop at every commit that has a bitmap and
//! take its bits instead (the fill-in walk covers only the commits newer than the nearest
//! bitmapped ones). The included side minus the excluded side is the answer. Bits are pack
//! positions of the one bitmapped pack; if the walk meets an object outside that pack, the
//! bitmap cannot describe it and the caller falls back to the plain walk.

use crate::bitmap::PackBitmap;
use crate::ewah::Bitmap;
use crate::rev_index::RevIndex;
use crate::walk::Walker;
use packd_odb::pack::Pack;
use packd_odb::parse::{parse_commit, tree_entries};
use packd_odb::{ObjectId, ObjectKind, Repository, Result};
use packd_storage::Storage;
use std::sync::Arc;

/// A bitmapped pack, ready for queries.
pub struct BitmapIndex {
    pack: Arc<Pack>,
    bitmap: PackBitmap,
    /// Pack position of each index position.
    pack_pos: Vec<u32>,
    /// Index position of each pack position.
    order: Vec<u32>,
}

/// Index positions in pack order: from the pack's `.rev` when it has a valid one (a read), else
/// sorted from the index (a sort of every offset, the cost a `.rev` saves on each start).
fn pack_order(storage: &dyn Storage, pack: &Pack) -> Result<Vec<u32>> {
    if let Some(stem) = pack.name().strip_suffix(".pack") {
        match storage.open(&format!("{stem}.rev")) {
            Ok(blob) => {
                match RevIndex::open(blob.as_ref(), pack.index().pack_checksum(), pack.len()) {
                    Ok(rev) => return Ok(rev.to_vec()),
                    Err(e) => tracing::warn!("ignoring {}: {e}", blob.name()),
                }
            }
            Err(e) if e.is_not_found() => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(pack.positions_in_pack_order()?.to_vec())
}

impl BitmapIndex {
    /// The first pack of `repo` with a usable `.bitmap`. A bitmap that does not belong to its
    /// pack, or cannot be read, is skipped with one warning: the plain walk gives the answer.
    pub fn open(repo: &Repository) -> Result<Option<BitmapIndex>> {
        for (storage, pack) in repo.objects().packs_with_storage() {
            match PackBitmap::open_for_pack(storage.as_ref(), pack) {
                Ok(Some(bitmap)) => {
                    let order = pack_order(storage.as_ref(), pack)?;
                    let mut pack_pos = vec![0u32; order.len()];
                    for (p, &i) in order.iter().enumerate() {
                        pack_pos[i as usize] = p as u32;
                    }
                    return Ok(Some(BitmapIndex {
                        pack: pack.clone(),
                        bitmap,
                        pack_pos,
                        order,
                    }));
                }
                Ok(None) => {}
                Err(e) => tracing::warn!("ignoring the bitmap of {}: {e}", pack.data_name()),
            }
        }
        Ok(None)
    }

    fn position(&self, id: &ObjectId) -> Option<(u32, u32)> {
        let index_pos = self.pack.index().find(id)?;
        Some((index_pos, self.pack_pos[index_pos as usize]))
    }

    /// Every object reachable from `tips`, as bits; `None` when some object is outside the pack.
    fn reach(&self, walker: &Walker, tips: &[ObjectId]) -> Result<Option<Bitmap>> {
        let mut bits = Bitmap::new();
        let mut stack: Vec<(ObjectId, ObjectKind)> = Vec::new();
        for tip in tips {
            let mut tags = Vec::new();
            let (id, kind) = walker.peel(*tip, &mut tags)?;
            stack.extend(tags.into_iter().map(|t| (t, ObjectKind::Tag)));
            stack.push((id, kind));
        }
        while let Some((id, kind)) = stack.pop() {
            let Some((index_pos, pos)) = self.position(&id) else {
                return Ok(None);
            };
            if bits.get(pos as u64) {
                continue;
            }
            match kind {
                ObjectKind::Commit => {
                    if let Some(reached) = self
                        .bitmap
                        .commit_bitmap(index_pos)
                        .map_err(packd_odb::Error::from)?
                    {
                        bits.or_assign(&reached);
                        continue;
                    }
                    bits.set(pos as u64);
                    let object = walker.read(&id)?;
                    let commit = parse_commit(&id, &object.data)?;
                    stack.push((commit.tree, ObjectKind::Tree));
                    stack.extend(commit.parents.into_iter().map(|p| (p, ObjectKind::Commit)));
                }
                ObjectKind::Tree => {
                    bits.set(pos as u64);
                    let object = walker.read(&id)?;
                    for entry in tree_entries(&id, &object.data) {
                        let (mode, _, entry) = entry?;
                        match mode & 0o170000 {
                            0o160000 => {}
                            0o040000 => stack.push((entry, ObjectKind::Tree)),
                            _ => stack.push((entry, ObjectKind::Blob)),
                        }
                    }
                }
                ObjectKind::Blob => bits.set(pos as u64),
                ObjectKind::Tag => {
                    bits.set(pos as u64);
                }
            }
        }
        Ok(Some(bits))
    }

    /// The objects reachable from `include` and not from `exclude` (only commits unless
    /// `objects`), as bits in pack order; `None` when the bitmap cannot answer.
    pub fn query(
        &self,
        repo: &Repository,
        include: &[ObjectId],
        exclude: &[ObjectId],
        objects: bool,
    ) -> Result<Option<Bitmap>> {
        let walker = Walker::new(repo);
        let Some(mut wanted) = self.reach(&walker, include)? else {
            return Ok(None);
        };
        let Some(had) = self.reach(&walker, exclude)? else {
            return Ok(None);
        };
        wanted.and_not_assign(&had);
        if !objects {
            wanted.and_assign(self.bitmap.type_bitmap(ObjectKind::Commit));
        }
        Ok(Some(wanted))
    }

    /// The ids of the objects whose bits are set, in pack order.
    pub fn ids(&self, bits: &Bitmap) -> Vec<ObjectId> {
        bits.iter_ones()
            .filter_map(|b| self.order.get(b as usize))
            .map(|&i| self.pack.index().id(i))
            .collect()
    }
}
