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
use packd_odb::parse::CommitInfo;
use packd_odb::parse::{parse_commit, tree_entries};
use packd_odb::{IdMap, IdSet, Location, Object, ObjectId, ObjectKind, Repository, Result};
use packd_storage::Storage;
use std::collections::BinaryHeap;
use std::sync::Arc;

/// A bitmapped pack, ready for queries.
pub struct BitmapIndex {
    pack: Arc<Pack>,
    bitmap: PackBitmap,
    order: PackOrder,
}

/// How pack positions (bits) and index positions map to each other.
enum PackOrder {
    /// The pack's `.rev` file: pack position to index position directly; the other way by a
    /// binary search over it, comparing offsets from the `.idx`.
    File(RevIndex),
    /// The pack's in-memory reverse index (a sort of the `.idx` offsets, done once per pack).
    Memory,
}

impl PackOrder {
    /// The pack's `.rev` when it has a valid one (a read), else the in-memory reverse index
    /// (sorted from the index on first use).
    fn open(storage: &dyn Storage, pack: &Pack) -> Result<PackOrder> {
        if let Some(stem) = pack.name().strip_suffix(".pack") {
            match storage.open(&format!("{stem}.rev")) {
                Ok(blob) => {
                    match RevIndex::open(blob.as_ref(), pack.index().pack_checksum(), pack.len()) {
                        Ok(rev) => return Ok(PackOrder::File(rev)),
                        Err(e) => tracing::warn!("ignoring {}: {e}", blob.name()),
                    }
                }
                Err(e) if e.is_not_found() => {}
                Err(e) => return Err(e.into()),
            }
        }
        // Built on first use: a query whose tips all have bitmaps never needs it.
        Ok(PackOrder::Memory)
    }

    fn index_position(&self, pack: &Pack, pack_pos: u32) -> Option<u32> {
        match self {
            PackOrder::File(rev) => rev.index_position(pack_pos),
            PackOrder::Memory => pack
                .positions_in_pack_order()
                .ok()?
                .get(pack_pos as usize)
                .copied(),
        }
    }

    /// Whether [`PackOrder::pack_position`] is cheap now (no reverse index left to build).
    fn is_ready(&self, pack: &Pack) -> bool {
        match self {
            PackOrder::File(_) => true,
            PackOrder::Memory => pack.has_reverse_index(),
        }
    }

    fn pack_position(&self, pack: &Pack, index_pos: u32) -> Result<Option<u32>> {
        match self {
            PackOrder::Memory => pack.pack_position(index_pos),
            PackOrder::File(rev) => {
                let index = pack.index();
                let want = index.offset(index_pos)?;
                let (mut lo, mut hi) = (0u32, rev.len());
                while lo < hi {
                    let mid = lo + (hi - lo) / 2;
                    let Some(at) = rev.index_position(mid) else {
                        return Ok(None);
                    };
                    if index.offset(at)? < want {
                        lo = mid + 1;
                    } else {
                        hi = mid;
                    }
                }
                Ok((rev.index_position(lo) == Some(index_pos)).then_some(lo))
            }
        }
    }
}

impl BitmapIndex {
    /// The first pack of `repo` with a usable `.bitmap`. A bitmap that does not belong to its
    /// pack, or cannot be read, is skipped with one warning: the plain walk gives the answer.
    pub fn open(repo: &Repository) -> Result<Option<BitmapIndex>> {
        for (storage, pack) in repo.objects().packs_with_storage() {
            match PackBitmap::open_for_pack(storage.as_ref(), pack) {
                Ok(Some(bitmap)) => {
                    let started = std::time::Instant::now();
                    let order = PackOrder::open(storage.as_ref(), pack)?;
                    tracing::debug!(
                        "pack order of {} objects ready in {:?}",
                        pack.len(),
                        started.elapsed()
                    );
                    return Ok(Some(BitmapIndex {
                        pack: pack.clone(),
                        bitmap,
                        order,
                    }));
                }
                Ok(None) => {}
                Err(e) => tracing::warn!("ignoring the bitmap of {}: {e}", pack.data_name()),
            }
        }
        Ok(None)
    }

    /// The pack position of the object at `index_pos`; `None` when the pack cannot place it.
    fn bit_of(&self, index_pos: u32) -> Result<Option<u64>> {
        Ok(self
            .order
            .pack_position(&self.pack, index_pos)?
            .map(u64::from))
    }

    /// The object at `index_pos` of the bitmapped pack, read without searching the index again.
    fn read_at(&self, repo: &Repository, id: &ObjectId, index_pos: u32) -> Result<Object> {
        let location = Location::Packed {
            pack: self.pack.clone(),
            offset: self.pack.index().offset(index_pos)?,
        };
        repo.objects().read_at(id, &location)
    }

    /// The commit at `index_pos`: its links and date.
    fn commit_at(&self, repo: &Repository, id: &ObjectId, index_pos: u32) -> Result<CommitInfo> {
        let object = self.read_at(repo, id, index_pos)?;
        if object.kind != ObjectKind::Commit {
            return Err(packd_odb::Error::BadName(format!(
                "object {id}: is a {}, not a commit",
                object.kind.name()
            )));
        }
        parse_commit(id, &object.data)
    }

    /// Takes the bitmap of the commit at `index_pos` into `bits` if it has one, unless `bits`
    /// already covers the commit (checked only when `check` or pack positions are at hand).
    /// Returns whether the commit is now covered.
    fn take_bitmap(&self, bits: &mut Bitmap, index_pos: u32, check: bool) -> Result<bool> {
        if !self.bitmap.contains(index_pos) {
            return Ok(false);
        }
        if (check || self.order.is_ready(&self.pack))
            && matches!(self.bit_of(index_pos)?, Some(bit) if bits.get(bit))
        {
            return Ok(true);
        }
        match self
            .bitmap
            .commit_bitmap(index_pos)
            .map_err(packd_odb::Error::from)?
        {
            Some(reached) => {
                bits.or_assign(&reached);
                Ok(true)
            }
            None => Ok(false),
        }
    }

    /// Every object reachable from `tips`, as bits; `None` when some object is outside the pack.
    ///
    /// Commits are walked first, newest first (by committer time, as git's walk does), so that
    /// a bitmapped commit on the main line is reached, and its bits taken, before the walk goes
    /// down the side branches it already covers. A tip with a bitmap is taken without reading
    /// the commit. Trees of the commits that needed walking come after, skipping every subtree
    /// already set.
    fn reach(
        &self,
        repo: &Repository,
        walker: &Walker,
        tips: &[ObjectId],
    ) -> Result<Option<Bitmap>> {
        let index = self.pack.index();
        let mut bits = Bitmap::new();
        // Objects met before: most tree entries of a fill-in walk were seen in another tree, and
        // this check is cheaper than finding their pack position again.
        let mut seen = IdSet::default();
        // (date, id, index position) of commits to walk, and what reading them gave.
        let mut queue: BinaryHeap<(i64, ObjectId, u32)> = BinaryHeap::new();
        let mut read: IdMap<CommitInfo> = IdMap::default();
        let mut objects: Vec<(ObjectId, ObjectKind)> = Vec::new();
        let (mut commits, mut trees) = (0u32, 0u32);
        // With many tips, most are covered by the first bitmaps taken: knowing pack positions
        // (one bucketing pass) is cheaper than decoding every tip's bitmap.
        let check_covered = tips.len() > 16;
        let mut commit_tips: Vec<(ObjectId, u32)> = Vec::new();
        for tip in tips {
            let mut tags = Vec::new();
            let (id, kind) = walker.peel(*tip, &mut tags)?;
            objects.extend(tags.into_iter().map(|t| (t, ObjectKind::Tag)));
            if kind != ObjectKind::Commit {
                objects.push((id, kind));
                continue;
            }
            if !seen.insert(id) {
                continue;
            }
            let Some(index_pos) = index.find(&id) else {
                return Ok(None);
            };
            commit_tips.push((id, index_pos));
        }
        // Tips with bitmaps first, taken without reading the commit; with many tips, in pack
        // order, which git writes newest first, so that the newest bitmaps are taken first and
        // cover the older tips without decoding theirs.
        let (mut bitmapped, plain): (Vec<_>, Vec<_>) = commit_tips
            .into_iter()
            .partition(|&(_, index_pos)| self.bitmap.contains(index_pos));
        if check_covered {
            let mut keyed = Vec::with_capacity(bitmapped.len());
            for (id, index_pos) in bitmapped {
                keyed.push((self.bit_of(index_pos)?.unwrap_or(u64::MAX), id, index_pos));
            }
            keyed.sort_unstable();
            bitmapped = keyed.into_iter().map(|(_, id, pos)| (id, pos)).collect();
        }
        let mut later = Vec::new();
        for (id, index_pos) in bitmapped {
            if !self.take_bitmap(&mut bits, index_pos, check_covered)? {
                later.push((id, index_pos));
            }
        }
        for (id, index_pos) in plain.into_iter().chain(later) {
            if check_covered && matches!(self.bit_of(index_pos)?, Some(bit) if bits.get(bit)) {
                continue;
            }
            let info = self.commit_at(repo, &id, index_pos)?;
            queue.push((info.time, id, index_pos));
            read.insert(id, info);
        }
        while let Some((_, id, index_pos)) = queue.pop() {
            if self.take_bitmap(&mut bits, index_pos, check_covered)? {
                continue;
            }
            let Some(bit) = self.bit_of(index_pos)? else {
                return Ok(None);
            };
            if bits.get(bit) {
                continue;
            }
            bits.set(bit);
            commits += 1;
            let commit = match read.remove(&id) {
                Some(info) => info,
                None => self.commit_at(repo, &id, index_pos)?,
            };
            objects.push((commit.tree, ObjectKind::Tree));
            for parent in commit.parents {
                if seen.insert(parent) {
                    let Some(parent_pos) = index.find(&parent) else {
                        return Ok(None);
                    };
                    let info = self.commit_at(repo, &parent, parent_pos)?;
                    queue.push((info.time, parent, parent_pos));
                    read.insert(parent, info);
                }
            }
        }
        let mut stack = objects;
        while let Some((id, kind)) = stack.pop() {
            if kind != ObjectKind::Tag && !seen.insert(id) {
                continue;
            }
            let Some(index_pos) = index.find(&id) else {
                return Ok(None);
            };
            let Some(bit) = self.bit_of(index_pos)? else {
                return Ok(None);
            };
            if bits.get(bit) {
                continue;
            }
            bits.set(bit);
            if kind == ObjectKind::Tree {
                trees += 1;
                let object = self.read_at(repo, &id, index_pos)?;
                for entry in tree_entries(&id, &object.data) {
                    let (mode, _, entry) = entry?;
                    match mode & 0o170000 {
                        0o160000 => {}
                        0o040000 => stack.push((entry, ObjectKind::Tree)),
                        _ => stack.push((entry, ObjectKind::Blob)),
                    }
                }
            }
        }
        tracing::debug!(
            "{} tips: {commits} commits and {trees} trees walked, {} objects met",
            tips.len(),
            seen.len()
        );
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
        let Some(mut wanted) = self.reach(repo, &walker, include)? else {
            return Ok(None);
        };
        let Some(had) = self.reach(repo, &walker, exclude)? else {
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
            .filter_map(|b| self.order.index_position(&self.pack, b as u32))
            .map(|i| self.pack.index().id(i))
            .collect()
    }
}
