//! Reachability with a pack's bitmaps: the exact set difference, as git computes it with
//! `--use-bitmap-index`.
//!
//! From each tip, walk as the plain walk does, but stop at every commit that has a bitmap and
//! take its bits instead (the fill-in walk covers only the commits newer than the nearest
//! bitmapped ones). The included side minus the excluded side is the answer. Bits are pack
//! positions of the bitmapped pack or multi-pack-index (`crate::bitmapped`). Objects outside
//! them (pushed since the last repack) are walked first, by reading them, until that walk enters
//! the bitmapped objects ([`BitmapIndex::difference_with_outside`]); if the bitmap walk itself
//! meets an object outside them (a bitmapped object that reaches outside), the caller falls
//! back to the plain walk.

use crate::bitmap::PackBitmap;
use crate::bitmapped::Bitmapped;
use crate::ewah::Bitmap;
use crate::last_at_path::{child_path, LastAtPath, ROOT};
use crate::tree_diff::{scan_tree_against, Against};
use crate::walk::Walker;
use packd_odb::parse::parse_commit;
use packd_odb::parse::CommitInfo;
use packd_odb::{
    IdMap, IdSet, Location, Object, ObjectId, ObjectKind, OffsetMap, OffsetSet, Repository, Result,
};
use std::collections::BinaryHeap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// Trees (or tips) to walk from which the walk first prepares the index for many lookups by
/// id (`PackIndex::warm_lookups`: 3 ms on git/git's 841,000 objects, against hundreds of
/// nanoseconds saved per lookup, a few lookups per tree).
const WARM_LOOKUPS_FROM: usize = 2048;

/// Objects per tree to walk from which the preparation pays in a larger index (see
/// `BitmapIndex::warm_lookups`).
const WARM_LOOKUPS_PER: usize = 400;

/// Tips with bitmaps from which their union is taken in one pass over the bitmap file (see
/// `PackBitmap::union_of`) rather than tip by tip, skipping tips already covered.
const MANY_BITMAPS: usize = 256;

/// Tips without bitmaps a fill-in walk starts from before its answer is kept for the next
/// request (see [`WalkMemo`]): a host's pull-request refs, not a fetch's few new commits.
const MEMO_MIN_TIPS: usize = 64;

/// Answers kept per bitmap index: one for mirror clones (whose walk has no haves to start
/// from), one for the side a client has, when it says it has thousands of refs. A wanted side
/// that starts from what the client has reaches only part of its tips' objects and is not kept.
const MEMO_SLOTS: usize = 2;

/// What one large fill-in walk found beyond the bitmaps it took, kept while the bitmap index
/// is, so that a later request whose tips without bitmaps include the same ones starts from it
/// and walks only from its other tips.
///
/// On a host with thousands of pull-request refs that git's bitmaps do not cover (git/git:
/// 4,133 of its 4,227 tips, by its debug log), that walk is most of a mirror clone's CPU,
/// and after a push to a branch the next mirror clone would do it all again for one new
/// commit.
///
/// Why the answer stays right: the objects reachable from `tips` are all in the bitmaps taken
/// (`reached` and `tip_bitmaps`) or in `walked`. A request whose tips without bitmaps include
/// `tips` wants all of `walked` and the `reached` bitmaps (all reachable from `tips`), so it
/// takes them; its walk from its other tips then stops where it meets `walked`. What the
/// objects of `walked` reach is covered only if the `tip_bitmaps` objects are too, and those
/// came from the other tips of the request that kept the answer. So once the request has taken
/// its own bitmaps, every `tip_bitmaps` commit must be among their objects, or the request
/// walks again from scratch (a branch that was deleted, or moved to a commit that does not
/// have the old one). Tags are left out of `walked` (a deleted tag is not sent), and so are the
/// objects of tips that are not commits.
///
/// The last one kept also goes to a file (see [`crate::kept_walk`]) when the server said where
/// ([`BitmapIndex::keep_walks_in`]), and the first request that could use one reads it back.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct WalkMemo {
    /// The commit tips without bitmaps walked from, sorted.
    pub(crate) tips: Vec<ObjectId>,
    /// Index positions of the commits whose bitmaps were taken for the tips with bitmaps.
    pub(crate) tip_bitmaps: Vec<u32>,
    /// Index positions of the commits with bitmaps the walk from `tips` reached.
    pub(crate) reached: Vec<u32>,
    /// Objects reachable from `tips` in none of the bitmaps taken (no tags).
    pub(crate) walked: Bitmap,
}

impl WalkMemo {
    /// Whether every tip of this answer is among `tips` (sorted).
    fn tips_within(&self, tips: &[ObjectId]) -> bool {
        self.tips.iter().all(|t| tips.binary_search(t).is_ok())
    }
}

/// What one attempt of [`BitmapIndex::reach`] came to.
enum Attempt {
    /// The answer (`None`: an object outside the bitmapped objects, or cancelled).
    Done(Option<Bitmap>),
    /// The kept answer it started from does not hold: walk again without one.
    MemoStale,
}

/// The bitmaps a walk took: their union, and which commits' they were; kept only when the
/// walk may keep its answer (`track`), since the union costs a second OR of each bitmap.
#[derive(Debug, Default)]
struct Taken {
    bits: Bitmap,
    positions: Vec<u32>,
    track: bool,
}

/// The walks look at their cancel flag every this many objects.
const CANCEL_EVERY: usize = 1024;

/// Whether the walk's caller has given up on it (a client that hung up), checked at the
/// first of every [`CANCEL_EVERY`] steps (`step` counts them).
fn cancelled_at(step: &mut usize, cancel: &AtomicBool) -> bool {
    let check = step.is_multiple_of(CANCEL_EVERY);
    *step += 1;
    check && cancel.load(Ordering::Relaxed)
}

/// Bytes of tree content (and four per entry start) a fill-in tree walk keeps to compare the
/// next version of each directory with (per walk; see [`LastAtPath`]).
const LAST_AT_PATH_BUDGET: usize = 8 << 20;

/// The most slots of a tree walk's filter in front of its set of ids met ([`RecentIds`]): 32,768
/// ids, 640 KiB, which fits the second-level cache of this project's machine (2 MiB) with room
/// for the walk's trees. On git/git's first mirror clone it caught 333,000 of the 460,000
/// entries handed out; the set caught 16,000 more.
const RECENT_SLOTS: usize = 1 << 15;

/// Slots of that filter for a walk from few roots (20 KiB): 64 per root, at least this many.
const MIN_RECENT_SLOTS: usize = 1 << 10;

/// The filter a tree walk keeps in front of its set of ids met: the last id met in each slot
/// of a small table. Most entries a scan hands out were met in a tree read shortly before
/// (another version of the same directory), and a slot costs less to check than the set. A
/// slot only ever holds an id the set has, or the zeros it starts with (which no entry is
/// taken to match): an id found in a slot is not looked at again, so one the set lacked would
/// never be stacked, and its object would be left out of the answer. [`RecentIds::first_met`]
/// puts an id in a slot and in the set together.
struct RecentIds {
    slots: Vec<[u8; 20]>,
}

impl RecentIds {
    /// A filter of `slots` slots (a power of two), all empty.
    fn new(slots: usize) -> RecentIds {
        debug_assert!(slots.is_power_of_two());
        RecentIds {
            slots: vec![[0u8; 20]; slots],
        }
    }

    /// The slot `id` goes to: four of its bytes (ids are uniformly distributed).
    fn slot(&self, id: &ObjectId) -> usize {
        let b = id.as_bytes();
        u32::from_le_bytes([b[8], b[9], b[10], b[11]]) as usize & (self.slots.len() - 1)
    }

    /// Asks for the cache line where `id`'s slot starts: the table is larger than the
    /// first-level cache, and a check made before its slot arrives waits for memory.
    fn prefetch(&self, id: &ObjectId) {
        packd_odb::prefetch::line(self.slots[self.slot(id)].as_ptr());
    }

    /// Whether this is the first time the walk meets `id`: neither its slot nor `seen` has it.
    /// Either way it is in both afterwards.
    fn first_met(&mut self, id: &ObjectId, seen: &mut IdSet) -> bool {
        let slot = self.slot(id);
        if self.slots[slot] == *id.as_bytes() && *id != ObjectId::NULL {
            return false;
        }
        self.slots[slot] = *id.as_bytes();
        seen.insert(*id)
    }
}

/// An entry a tree scan handed out: its id, kind and the hash of its path (see
/// [`child_path`]; 0 for a blob).
type HandedOut = (ObjectId, ObjectKind, u64);

/// Collects into `handed` what a tree scan hands out, as entries of the directory whose path
/// hashes to `dir`, asking for each one's slot in `recent` (checked once the tree is scanned).
fn hand_out<'a>(
    recent: &'a RecentIds,
    handed: &'a mut Vec<HandedOut>,
    dir: u64,
) -> impl FnMut(ObjectId, ObjectKind, &[u8]) + 'a {
    move |entry, kind, name| {
        recent.prefetch(&entry);
        let path = match kind {
            ObjectKind::Tree => child_path(dir, name),
            _ => 0,
        };
        handed.push((entry, kind, path));
    }
}

/// Where an object is stored in a pack: the pack (by address: the walk holds every pack open)
/// and the entry's offset.
type StoredAt = (usize, u64);

/// An object on a tree walk's stack: its id, kind and bit, where it is stored (a tree's), and
/// the hash of its path.
type Stacked = (ObjectId, ObjectKind, u64, Option<Location>, u64);

/// Bytes of a stacked tree's entry hinted ([`hint_trees`]): most trees' entries (a delta
/// of a few hundred bytes, a small tree whole) fit; a longer one's rest is read in turn.
const TREE_HINT: u64 = 4096;

/// Hints the entries of the trees `stack[from..]` holds ([`packd_storage::Blob::prefetch`]),
/// one hint per pack.
fn hint_trees(stack: &[Stacked], from: usize) {
    let mut by_pack: Vec<(&Arc<packd_odb::pack::Pack>, Vec<std::ops::Range<u64>>)> = Vec::new();
    for (_, kind, _, location, _) in &stack[from..] {
        let (ObjectKind::Tree, Some(Location::Packed { pack, offset })) = (kind, location) else {
            continue;
        };
        let range = *offset..(*offset + TREE_HINT).min(pack.entries_end()).max(*offset);
        match by_pack.iter_mut().find(|(p, _)| Arc::ptr_eq(p, pack)) {
            Some((_, ranges)) => ranges.push(range),
            None => by_pack.push((pack, vec![range])),
        }
    }
    for (pack, ranges) in by_pack {
        pack.data().prefetch(&ranges);
    }
}

/// `loc` as a [`StoredAt`]; `None` for a loose object.
fn stored_at(loc: &Location) -> Option<StoredAt> {
    match loc {
        Location::Packed { pack, offset } => Some((Arc::as_ptr(pack) as usize, *offset)),
        Location::Loose(_) => None,
    }
}

/// What a fill-in tree walk did, for the debug log.
#[derive(Debug, Default, Clone, Copy)]
struct TreeWalk {
    /// Trees read.
    trees: u32,
    /// Of those, delta bases read ahead of their turn (from a delta's decoding).
    early: u32,
    /// Trees compared with their delta base.
    against: u32,
    /// Entries of the trees read.
    entries: usize,
    /// Of those, entries found in the delta base or the last tree at the same path, not
    /// looked up.
    shared: usize,
    /// Trees compared with the last tree read at the same path.
    by_path: u32,
    /// Bytes of tree content kept for comparing by path, at the end.
    held: usize,
}

impl std::ops::Add for TreeWalk {
    type Output = TreeWalk;
    fn add(self, o: TreeWalk) -> TreeWalk {
        TreeWalk {
            trees: self.trees + o.trees,
            early: self.early + o.early,
            against: self.against + o.against,
            entries: self.entries + o.entries,
            shared: self.shared + o.shared,
            by_path: self.by_path + o.by_path,
            held: self.held + o.held,
        }
    }
}

/// A bitmap and the objects it numbers (a pack's, or a multi-pack-index's), ready for queries.
pub struct BitmapIndex {
    objects: Bitmapped,
    bitmap: PackBitmap,
    /// The objects directory the bitmap was found in (the repository's own, or an
    /// alternate's): whose `pack/` lists the bitmaps whose kept walks are live.
    storage: Arc<dyn packd_storage::Storage>,
    /// Commit bitmaps taken, for the debug log.
    taken: std::sync::atomic::AtomicU32,
    /// Answers of large fill-in walks, most recently used first.
    memos: std::sync::Mutex<Vec<Arc<WalkMemo>>>,
    /// The file that keeps the last answer (see [`BitmapIndex::keep_walks_in`]).
    walk_file: std::sync::OnceLock<KeptWalkFile>,
    /// Held while a walk that may keep its answer runs (see [`BitmapIndex::walk_alone`]).
    large_walk: std::sync::Mutex<()>,
}

/// The file a [`BitmapIndex`] keeps its last fill-in walk's answer in (see
/// [`crate::kept_walk`]), and what this process knows of it.
#[derive(Debug)]
struct KeptWalkFile {
    path: std::path::PathBuf,
    /// The bitmap's own checksum, which the file is kept under.
    key: [u8; 20],
    /// Set once the file was read (requests that could use it wait for the read).
    read: std::sync::OnceLock<()>,
    /// Whether writing it failed (then it is not tried again).
    failed: std::sync::atomic::AtomicBool,
    /// The answer the file holds, as far as this process wrote or read it: the same answer is
    /// not written again, and only that one's going stale removes the file.
    holds: std::sync::Mutex<Option<Arc<WalkMemo>>>,
}

/// What [`BitmapIndex::difference_with_outside`] answers.
#[derive(Debug)]
pub struct WithOutside {
    /// Bitmapped objects reachable from the wants and not from the haves.
    pub wanted: Bitmap,
    /// Bitmapped objects reachable from the haves: all the client has of them.
    pub had: Bitmap,
    /// Objects outside the bitmapped objects reachable from the wants and not from the haves.
    pub outside: Vec<(ObjectId, ObjectKind)>,
}

/// Objects that share one name-hash (see [`BitmapIndex::objects_with_name_hash`]), each as a
/// key that orders them as the pack does and its index position.
#[derive(Debug, Clone)]
pub struct SameName {
    /// What the keys are.
    pub keys: NameKeys,
    /// (key, index position) of each object.
    pub objects: Vec<(u64, u32)>,
}

/// What orders the objects of a [`SameName`] as the pack does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NameKeys {
    /// Pack positions, which are the objects' bits: the pack had them at hand.
    PackPositions,
    /// Entry offsets, read from the index without building the pack positions.
    Offsets,
}

/// The `n` objects nearest to a target key on each side (keys as in [`SameName`]), offered
/// one by one: each heap keeps its farthest on top (the lowest key below, the highest above).
struct Nearest {
    target: u64,
    n: usize,
    below: BinaryHeap<std::cmp::Reverse<(u64, u32)>>,
    above: BinaryHeap<(u64, u32)>,
}

impl Nearest {
    fn new(target: u64, n: usize) -> Nearest {
        Nearest {
            target,
            n,
            below: BinaryHeap::with_capacity(n + 1),
            above: BinaryHeap::with_capacity(n + 1),
        }
    }

    /// Keeps (key, index position) if it is among the nearest so far; the target's own key
    /// is left out.
    fn offer(&mut self, key: u64, index_pos: u32) {
        let n = self.n;
        if key < self.target {
            if self.below.len() < n || self.below.peek().is_some_and(|far| key > far.0 .0) {
                self.below.push(std::cmp::Reverse((key, index_pos)));
                if self.below.len() > n {
                    self.below.pop();
                }
            }
        } else if key > self.target
            && (self.above.len() < n || self.above.peek().is_some_and(|&(far, _)| key < far))
        {
            self.above.push((key, index_pos));
            if self.above.len() > n {
                self.above.pop();
            }
        }
    }

    /// The bits of the objects kept, by `bit_of` (those it cannot place left out), ascending.
    fn bits(self, bit_of: impl Fn(u64, u32) -> Result<Option<u64>>) -> Result<Vec<u64>> {
        let mut bits = Vec::with_capacity(self.below.len() + self.above.len());
        for (key, index_pos) in self.below.into_iter().map(|r| r.0).chain(self.above) {
            bits.extend(bit_of(key, index_pos)?);
        }
        bits.sort_unstable();
        Ok(bits)
    }
}

/// Objects outside the bitmapped objects that some tips reach, and the bitmapped objects
/// where that walk entered them.
#[derive(Default)]
struct Outside {
    /// Bitmapped objects among the tips and named by outside objects, once each.
    boundary: Vec<ObjectId>,
    /// The outside objects, with their kinds.
    objects: Vec<(ObjectId, ObjectKind)>,
}

impl BitmapIndex {
    /// The bitmap git would use for `repo`: the multi-pack-index's if it has one, else the first
    /// pack's with a `.bitmap`. A bitmap that does not belong to its objects, or cannot be read,
    /// is skipped with one warning: the plain walk gives the answer.
    pub fn open(repo: &Repository) -> Result<Option<BitmapIndex>> {
        Self::open_with(repo, false)
    }

    /// [`BitmapIndex::open`] for a caller that expects a fill-in walk (a one-shot query from
    /// tips that are mostly not bitmapped): the pack's position index, which such a walk
    /// waits for when the pack has no `.rev`, starts building on its own thread as soon as the
    /// `.bitmap` is found, before the bitmap file is read.
    pub fn open_warming(repo: &Repository) -> Result<Option<BitmapIndex>> {
        Self::open_with(repo, true)
    }

    /// The bitmap of one given pack (`pack` read from `storage`), whatever multi-pack-index
    /// is beside it: for a writer that keeps that pack's objects where they are and needs its
    /// own bitmap's answers (`packd_maint::append`). `None` when the pack has no `.bitmap`.
    pub fn for_pack(
        storage: &Arc<dyn packd_storage::Storage>,
        pack: &Arc<packd_odb::pack::Pack>,
    ) -> Result<Option<BitmapIndex>> {
        let started = std::time::Instant::now();
        let bitmap = PackBitmap::open_for_pack(storage.as_ref(), pack)
            .map_err(|e| packd_odb::Error::Unsupported(format!("{}: {e}", pack.data_name())))?;
        let Some(bitmap) = bitmap else {
            return Ok(None);
        };
        let objects = Bitmapped::pack(storage.as_ref(), pack)?;
        Ok(Some(BitmapIndex::opened(
            objects,
            bitmap,
            storage.clone(),
            started,
        )))
    }

    /// The bitmap file itself (its header, type bitmaps and commit entries).
    pub fn pack_bitmap(&self) -> &PackBitmap {
        &self.bitmap
    }

    fn open_with(repo: &Repository, warm: bool) -> Result<Option<BitmapIndex>> {
        let started = std::time::Instant::now();
        if let Some((storage, midx, packs)) = repo.objects().multi_pack_index() {
            let name = format!(
                "pack/multi-pack-index-{}.bitmap",
                packd_odb::hex(midx.checksum())
            );
            match storage.open(&name) {
                Ok(blob) => match PackBitmap::open(blob, midx.checksum(), midx.len()) {
                    Ok(bitmap) => {
                        if let Some(objects) = Bitmapped::midx(storage.as_ref(), midx, packs)? {
                            return Ok(Some(BitmapIndex::opened(
                                objects,
                                bitmap,
                                storage.clone(),
                                started,
                            )));
                        }
                    }
                    Err(e) => tracing::warn!("ignoring {name}: {e}"),
                },
                Err(e) if e.is_not_found() => {}
                Err(e) => return Err(e.into()),
            }
        }
        for (storage, pack) in repo.objects().packs_with_storage() {
            let mut early = None;
            if warm
                && crate::bitmap::bitmap_name(pack.name()).is_some_and(|name| storage.exists(&name))
            {
                let objects = Bitmapped::pack(storage.as_ref(), pack)?;
                // With a `.rev`, positions are searched in it until a walk needs its inverse:
                // building that for a query that turns out to need no walk only costs.
                if !objects.has_pack_order() {
                    objects.warm_positions();
                }
                early = Some(objects);
            }
            match PackBitmap::open_for_pack(storage.as_ref(), pack) {
                Ok(Some(bitmap)) => {
                    let objects = match early {
                        Some(objects) => objects,
                        None => Bitmapped::pack(storage.as_ref(), pack)?,
                    };
                    return Ok(Some(BitmapIndex::opened(
                        objects,
                        bitmap,
                        storage.clone(),
                        started,
                    )));
                }
                Ok(None) => {}
                Err(e) => tracing::warn!("ignoring the bitmap of {}: {e}", pack.data_name()),
            }
        }
        Ok(None)
    }

    fn opened(
        objects: Bitmapped,
        bitmap: PackBitmap,
        storage: Arc<dyn packd_storage::Storage>,
        started: std::time::Instant,
    ) -> Self {
        tracing::debug!(
            "opened {} ({} objects, {} bitmaps, lookup table {}) in {:?}",
            bitmap.name(),
            objects.len(),
            bitmap.entry_count(),
            if bitmap.used_lookup_table() {
                "used"
            } else {
                "absent or unused"
            },
            started.elapsed()
        );
        debug_assert_eq!(objects.checksum().len(), 20);
        BitmapIndex {
            objects,
            bitmap,
            storage,
            taken: Default::default(),
            memos: Default::default(),
            walk_file: Default::default(),
            large_walk: Default::default(),
        }
    }

    /// The pack position of the object at `index_pos`; `None` when the order cannot place it.
    fn bit_of(&self, index_pos: u32) -> Result<Option<u64>> {
        self.objects.bit_of(index_pos)
    }

    /// The object at `index_pos`, read without searching an index again.
    fn read_at(&self, repo: &Repository, id: &ObjectId, index_pos: u32) -> Result<Object> {
        repo.objects()
            .read_at(id, &self.objects.location(index_pos)?)
    }

    /// The commit at `index_pos`: its links and date.
    fn commit_at(&self, repo: &Repository, id: &ObjectId, index_pos: u32) -> Result<CommitInfo> {
        if let Some(graph) = repo.commit_graph() {
            if let Some(pos) = graph.lookup(id) {
                return graph.commit(pos);
            }
        }
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
    /// Returns whether the commit is now covered. A bitmap taken is also added to `taken` (when
    /// it tracks them).
    fn take_bitmap(
        &self,
        bits: &mut Bitmap,
        taken: &mut Taken,
        index_pos: u32,
        check: bool,
    ) -> Result<bool> {
        if !self.bitmap.contains(index_pos) {
            return Ok(false);
        }
        if (check || self.objects.is_ready())
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
                if taken.track {
                    taken.bits.or_assign(&reached);
                    taken.positions.push(index_pos);
                }
                self.taken
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                Ok(true)
            }
            None => Ok(false),
        }
    }

    /// Sets the bits of the objects at the index positions in `unplaced` and empties it;
    /// false when the pack order cannot place one of them.
    fn set_bits(&self, bits: &mut Bitmap, unplaced: &mut Vec<u32>) -> Result<bool> {
        for index_pos in unplaced.drain(..) {
            match self.bit_of(index_pos)? {
                Some(bit) => bits.set(bit),
                None => return Ok(false),
            }
        }
        Ok(true)
    }

    /// Sets the bits of `roots` and of everything reachable from them that `bits` does not
    /// already have, reading each tree not yet set; objects in `seen` are not stacked again.
    /// Returns what it did, or `None` when an object is outside the bitmapped objects.
    ///
    /// A tree stored as a delta comes with its base's content (see
    /// `ObjectDb::read_at_with_base`). When this walk has already read the entry the base is
    /// stored in as a tree (`walked`: all its entries are handled), only the tree's entries
    /// that are not byte for byte the base's are handled ([`scan_tree_against`]). When the
    /// base is a tree still on the stack (`pending`), it is read now from the content at hand,
    /// then the tree against it. Bases are recognized by where they are stored, never through
    /// bit numbers or ids, so the content compared is the content read. A base set in `bits`
    /// by a commit bitmap, or by this walk as a blob, is not enough: only trees this walk read
    /// vouch for their entries, so a tree whose mode says blob, or a bitmap built from such a
    /// tree, cannot hide another tree's entries.
    ///
    /// The last tree this walk read at the same path ([`LastAtPath`]), most often the same
    /// directory in a neighbouring commit, vouches for its entries just as well, and is kept
    /// with where its entries start, so runs of bytes equal in both trees are skipped without
    /// parsing: a tree is compared with it when there is one (unless its delta base was just
    /// read early, which comes with its starts too), else with its delta base. Preferring the
    /// delta base when the walk had read it looked up 28,000 more entries on git/git with
    /// pull-request refs and parsed 12,000 trees' shared runs (0.15 billion instructions more).
    fn walk_trees(
        &self,
        repo: &Repository,
        bits: &mut Bitmap,
        seen: &mut IdSet,
        roots: Vec<(ObjectId, ObjectKind)>,
        cancel: &AtomicBool,
    ) -> Result<Option<TreeWalk>> {
        let mut done = TreeWalk::default();
        // Trees read by this walk, and trees on its stack (with their bits), by where they are
        // stored: a delta names its base by place, and a place read is the content compared.
        let mut walked: OffsetSet<StoredAt> = OffsetSet::default();
        let mut pending: OffsetMap<StoredAt, u64> = OffsetMap::default();
        let mut last = LastAtPath::new(LAST_AT_PATH_BUDGET);
        // Where the entries of the tree scanned, and of a delta base read early, start.
        let (mut starts, mut base_starts) = (Vec::new(), Vec::new());
        let mut stack: Vec<Stacked> = Vec::with_capacity(roots.len());
        // The entries the scans of a tree (and of a delta base read early for it) handed out
        // that `seen` did not have, with the hash of their path, looked up together once the
        // tree is scanned (see `stack_fresh`); `positions` is that step's scratch space. The
        // roots go first, the same way.
        let mut fresh: Vec<HandedOut> = roots
            .into_iter()
            .map(|(id, kind)| (id, kind, ROOT))
            .collect();
        let mut positions: Vec<u32> = Vec::new();
        if !self.stack_fresh(&mut fresh, &mut positions, &mut stack, &mut pending)? {
            return Ok(None);
        }
        // In object storage, the trees each step stacks are fetched ahead together, not a
        // round trip each when their turn comes.
        let hint = repo.objects().packs().any(|p| p.data().prefetches());
        if hint {
            hint_trees(&stack, 0);
        }
        // In front of `seen`, a filter of recently met ids. Sized by the walk's roots, so that
        // a fetch's walk from a few commits does not clear the 640 KiB a mirror clone's uses
        // (it is made anew on every call).
        let mut recent = RecentIds::new(
            (stack.len() * 64)
                .next_power_of_two()
                .clamp(MIN_RECENT_SLOTS, RECENT_SLOTS),
        );
        // The entries a scan hands out, with the hash of their path, in order: each one's slot
        // in `recent` is asked for as it is handed out, and checked once the tree is scanned.
        // Checked at once, each check waited for memory in turn: about 30% of the samples in
        // this function's own code, in a profile of git/git's first mirror clone, and that
        // clone cost 1.8%, 3.4% and 4.8% less CPU with the checks put off (three alternating
        // A/B runs, medians of 7, 11 and 11 clones).
        let mut handed: Vec<HandedOut> = Vec::new();
        let mut steps = 0;
        while let Some((id, kind, bit, location, path)) = stack.pop() {
            if bits.get(bit) {
                continue;
            }
            bits.set(bit);
            if cancelled_at(&mut steps, cancel) {
                return Ok(None);
            }
            // Only trees are read (and only they carry where they are stored).
            let (ObjectKind::Tree, Some(location)) = (kind, location) else {
                continue;
            };
            done.trees += 1;
            if let Some(at) = stored_at(&location) {
                pending.remove(&at);
                walked.insert(at);
            }
            let (object, base) = repo.objects().read_at_with_base(&id, &location)?;
            // The walked tree to compare with: the delta base when it was just read early
            // (its starts are at hand), else the last tree at this path, else the delta base
            // when this walk read it.
            let mut base_data = None;
            let mut base_scanned = false;
            if let Some((base_location, data)) = base.filter(|_| object.kind == ObjectKind::Tree) {
                if let Some(base_at) = stored_at(&base_location) {
                    if walked.contains(&base_at) {
                        base_data = Some(data);
                    } else if let Some(base_bit) = pending.remove(&base_at) {
                        if !bits.get(base_bit) {
                            // The base is a tree this walk will read: read it now, from here
                            // (most likely another version of the same directory).
                            bits.set(base_bit);
                            walked.insert(base_at);
                            done.trees += 1;
                            done.early += 1;
                            let previous = last.get(path);
                            if previous.is_some() {
                                done.by_path += 1;
                            }
                            let scanned = scan_tree_against(
                                &id,
                                &data,
                                previous,
                                &mut base_starts,
                                hand_out(&recent, &mut handed, path),
                            )?;
                            done.entries += scanned.entries;
                            done.shared += scanned.shared;
                            base_data = Some(data);
                            base_scanned = true;
                        }
                    }
                }
            }
            let previous = if base_scanned { None } else { last.get(path) };
            let against = match (&base_data, previous) {
                (_, Some(previous)) => {
                    done.by_path += 1;
                    Some(previous)
                }
                (Some(data), None) => {
                    done.against += 1;
                    Some(Against {
                        data,
                        starts: base_scanned.then_some(&base_starts[..]),
                    })
                }
                (None, None) => None,
            };
            let scanned = scan_tree_against(
                &id,
                &object.data,
                against,
                &mut starts,
                hand_out(&recent, &mut handed, path),
            )?;
            done.entries += scanned.entries;
            done.shared += scanned.shared;
            // The entries handed out that are new to this walk, to be looked up.
            for (entry, entry_kind, entry_path) in handed.drain(..) {
                if recent.first_met(&entry, seen) {
                    fresh.push((entry, entry_kind, entry_path));
                }
            }
            let stacked = stack.len();
            if !self.stack_fresh(&mut fresh, &mut positions, &mut stack, &mut pending)? {
                return Ok(None);
            }
            if hint && stack.len() > stacked {
                hint_trees(&stack, stacked);
            }
            if object.kind == ObjectKind::Tree {
                starts = last.put(path, object.data, std::mem::take(&mut starts));
            }
        }
        done.held = last.held();
        Ok(Some(done))
    }

    /// Prepares the index for many lookups by id, once (see `PackIndex::warm_lookups`), when
    /// a walk will make `lookups` of them or so: its one pass over the ids is worth it from
    /// [`WARM_LOOKUPS_FROM`] lookups, and from one per [`WARM_LOOKUPS_PER`] objects in a
    /// larger index (the pass grows with the index, the saving with the lookups).
    fn warm_lookups(&self, lookups: usize) {
        let objects = self.objects.len() as usize;
        if lookups < WARM_LOOKUPS_FROM.max(objects / WARM_LOOKUPS_PER) {
            return;
        }
        let started = std::time::Instant::now();
        if self.objects.warm_lookups() {
            tracing::debug!("lookups by id prepared in {:?}", started.elapsed());
        }
    }

    /// Stacks the entries of `fresh` (id, kind, path hash) for a tree walk, in order, as one
    /// by one: `false` at the first that is not in the index or has no bit (the walk cannot
    /// answer), an error at the first whose position cannot be read. They are looked up
    /// together, each step first asking the processor for what the next reads for every
    /// entry (the ids to search, then the pack position and, for a tree, the offset found): a
    /// lookup is a few cache misses in tables of megabytes, which then overlap instead of
    /// coming one after the other. `fresh` is emptied (unless an error ends the walk), and
    /// `positions` is its scratch space.
    fn stack_fresh(
        &self,
        fresh: &mut Vec<HandedOut>,
        positions: &mut Vec<u32>,
        stack: &mut Vec<Stacked>,
        pending: &mut OffsetMap<StoredAt, u64>,
    ) -> Result<bool> {
        let index = &self.objects;
        for (id, _, _) in fresh.iter() {
            index.prefetch_find(id);
        }
        positions.clear();
        let mut all_found = true;
        for (id, kind, _) in fresh.iter() {
            let Some(pos) = index.find(id) else {
                all_found = false;
                break;
            };
            index.prefetch_position(pos, *kind == ObjectKind::Tree);
            positions.push(pos);
        }
        let found = positions.len();
        for (&(id, kind, path), &pos) in fresh[..found].iter().zip(positions.iter()) {
            let Some((bit, location)) = self.stack_entry(pos, kind)? else {
                fresh.clear();
                return Ok(false);
            };
            // Stacked even past a miss (the walk then ends, its stack dropped): the entries
            // before it are read, so that an error reading one still wins, as one by one.
            if let Some(at) = location.as_ref().and_then(stored_at) {
                pending.insert(at, bit);
            }
            stack.push((id, kind, bit, location, path));
        }
        fresh.clear();
        Ok(all_found)
    }

    /// What a tree walk stacks for the object at `index_pos`: its bit and, for a tree, where it
    /// is stored (what a delta names its base by, and where the tree is read from when
    /// popped). `None` when the object has no bit.
    fn stack_entry(
        &self,
        index_pos: u32,
        kind: ObjectKind,
    ) -> Result<Option<(u64, Option<Location>)>> {
        let Some(bit) = self.bit_of(index_pos)? else {
            return Ok(None);
        };
        let location = match kind {
            ObjectKind::Tree => Some(self.objects.location(index_pos)?),
            _ => None,
        };
        Ok(Some((bit, location)))
    }

    /// Whether `peeled` (annotated tags among `tips` and what they peel to) covers every tag
    /// object the bitmaps number: each of its tags is a tip, is in the bitmapped objects and
    /// is a tag there (its entry header says so), and their number is the tag type bitmap's.
    /// A tag pointing at another tag then has both as tips, so peeling without reading loses
    /// nothing. Costs an index lookup and an entry header per tag; reading each tag would
    /// also inflate it, and finding its bit would cost a pack-position lookup.
    fn every_tag_is_a_tip(
        &self,
        repo: &Repository,
        tips: &[ObjectId],
        peeled: &IdMap<ObjectId>,
    ) -> Result<bool> {
        if peeled.is_empty() {
            return Ok(false);
        }
        let total = self.bitmap.type_bitmap(ObjectKind::Tag).count_ones();
        // Fewer peeled tips than tags: some tag is not a tip, whatever the tips are.
        if (peeled.len() as u64) < total {
            return Ok(false);
        }
        let mut distinct = IdSet::default();
        for tip in tips {
            if !peeled.contains_key(tip) || !distinct.insert(*tip) {
                continue;
            }
            let Some(pos) = self.objects.find(tip) else {
                return Ok(false);
            };
            let header = repo
                .objects()
                .header_at(tip, &self.objects.location(pos)?)?;
            if header.kind != ObjectKind::Tag {
                return Ok(false);
            }
        }
        Ok(distinct.len() as u64 == total)
    }

    /// Every object reachable from `tips`, as bits; `None` when some object is outside the pack.
    ///
    /// Commits are walked first, newest first (by committer time, as git's walk does), so that
    /// a bitmapped commit on the main line is reached, and its bits taken, before the walk goes
    /// down the side branches it already covers. A tip with a bitmap is taken without reading
    /// the commit. Trees of the commits that needed walking come after, skipping every subtree
    /// already set, all on the caller's thread: when the trees were split over two threads,
    /// git/git's first mirror clone was answered about 0.06 s sooner but took 9% more CPU
    /// (0.531 s against 0.485 s, `CLONE=all bench/ab.py`), and CPU is what a server runs
    /// out of. With many tips without bitmaps, the walk starts from what an earlier walk kept
    /// (unless told not to), and keeps its own answer (see [`WalkMemo`]).
    ///
    /// With `seed` (objects known to be reached, a set closed under reachability: what a
    /// client has), the walk starts from it and stops wherever it enters it, so the answer is
    /// everything reachable from `tips` plus `seed`. Such a walk is not kept. A walk whose
    /// answer may be kept waits for any other such walk on this index to end first
    /// ([`BitmapIndex::walk_alone`]), and may then start from that one's answer.
    #[allow(clippy::too_many_arguments)]
    fn reach(
        &self,
        repo: &Repository,
        walker: &Walker,
        tips: &[ObjectId],
        peeled: &IdMap<ObjectId>,
        seed: Option<&Bitmap>,
        cancel: &AtomicBool,
    ) -> Result<Option<Bitmap>> {
        match self.reach_once(repo, walker, tips, peeled, seed, true, cancel)? {
            Attempt::Done(bits) => Ok(bits),
            // The first attempt's sets are dropped by now.
            Attempt::MemoStale => {
                match self.reach_once(repo, walker, tips, peeled, seed, false, cancel)? {
                    Attempt::Done(bits) => Ok(bits),
                    Attempt::MemoStale => unreachable!("no kept answer was used"),
                }
            }
        }
    }

    /// Waits until no other walk that will keep its answer runs on this index (a walk from
    /// [`MEMO_MIN_TIPS`] or more tips without bitmaps, and no seed: see [`WalkMemo`]), and holds
    /// that until the guard is dropped; `None` when `cancel` is set meanwhile. Waiters are not
    /// served in order.
    ///
    /// Such a walk (a mirror clone's, from thousands of tips without bitmaps) costs most of the
    /// clone, and clones of the same refs tend to come together (a fleet of mirrors or CI jobs
    /// after a push or a repack). Made side by side, each makes the whole walk; made one after
    /// the other, each next one starts from the answer the first kept. Four first mirror clones
    /// of git/git at once cost a fresh server 3.83 s of CPU and a 204 MB peak before, 1.37 s
    /// and 91 MB with this and the repository opened once for all four (see `packd_serve`'s
    /// repository cache; `CLONE=all CONCURRENT=4 RUNS=3 bench/ab.py`, git's pack-objects 3.6 s
    /// per clone in that run).
    fn walk_alone(&self, cancel: &AtomicBool) -> Option<std::sync::MutexGuard<'_, ()>> {
        loop {
            match self.large_walk.try_lock() {
                Ok(guard) => return Some(guard),
                Err(std::sync::TryLockError::Poisoned(poisoned)) => {
                    return Some(poisoned.into_inner())
                }
                Err(std::sync::TryLockError::WouldBlock) => {
                    if cancel.load(Ordering::Relaxed) {
                        return None;
                    }
                    std::thread::sleep(std::time::Duration::from_millis(2));
                }
            }
        }
    }

    /// [`BitmapIndex::reach`] once, starting from a kept answer when `use_memo` and one
    /// applies.
    #[allow(clippy::too_many_arguments)]
    fn reach_once(
        &self,
        repo: &Repository,
        walker: &Walker,
        tips: &[ObjectId],
        peeled: &IdMap<ObjectId>,
        seed: Option<&Bitmap>,
        use_memo: bool,
        cancel: &AtomicBool,
    ) -> Result<Attempt> {
        if cancel.load(Ordering::Relaxed) {
            return Ok(Attempt::Done(None));
        }
        let index = &self.objects;
        let started = std::time::Instant::now();
        let cache_before = repo.objects().cache_stats();
        let mut bits = seed.cloned().unwrap_or_default();
        let mut taken = Taken::default();
        // Peeled values are used only when every tag object of the bitmapped objects is itself
        // a tip: then the tags reached are exactly all of them (the tag type bitmap), and no
        // tag between a tip and its peeled value can be missed by not reading the tips.
        let use_peeled = self.every_tag_is_a_tip(repo, tips, peeled)?;
        if use_peeled {
            tracing::debug!("every tag is a tip: tags peeled from packed-refs, not read");
            bits.or_assign(self.bitmap.type_bitmap(ObjectKind::Tag));
        }
        // Objects met before: most tree entries of a fill-in walk were seen in another tree, and
        // this check is cheaper than finding their pack position again.
        let mut seen = IdSet::default();
        // (date, id, index position) of commits to walk, and what reading them gave.
        let mut queue: BinaryHeap<(i64, ObjectId, u32)> = BinaryHeap::new();
        let mut read: IdMap<CommitInfo> = IdMap::default();
        // The trees of the commits walked, and the tips that are not commits (and the tags
        // peeled on the way), walked after them.
        let mut objects: Vec<(ObjectId, ObjectKind)> = Vec::new();
        let mut tip_objects: Vec<(ObjectId, ObjectKind)> = Vec::new();
        let mut commits = 0u32;
        // With many tips, most are covered by the first bitmaps taken: knowing pack positions
        // (one bucketing pass) is cheaper than decoding every tip's bitmap.
        // So with a seed: a tip it covers needs nothing more.
        let check_covered = tips.len() > 16 || seed.is_some();
        // A tip without a bitmap likely means a fill-in walk, which needs pack positions: the
        // sooner their index starts building on its own thread, the more of it overlaps with
        // reading the tips and walking commits (the sure decision comes once they are read,
        // below). A tag is judged by what it peels to, when packed-refs says.
        if check_covered
            || tips.iter().any(|tip| {
                let commit = peeled.get(tip).unwrap_or(tip);
                !matches!(index.find(commit), Some(pos) if self.bitmap.contains(pos))
            })
        {
            self.objects.warm_positions();
        }
        let mut commit_tips: Vec<(ObjectId, u32)> = Vec::new();
        for tip in tips {
            if let Some(target) = peeled.get(tip).filter(|_| use_peeled) {
                // A peeled value is no tag; a commit with a bitmap needs no header read.
                let Some(pos) = index.find(target) else {
                    return Ok(Attempt::Done(None));
                };
                let kind = if self.bitmap.contains(pos) {
                    ObjectKind::Commit
                } else {
                    repo.objects()
                        .header_at(target, &index.location(pos)?)?
                        .kind
                };
                match kind {
                    ObjectKind::Commit => {
                        if seen.insert(*target) {
                            commit_tips.push((*target, pos));
                        }
                        continue;
                    }
                    ObjectKind::Tree | ObjectKind::Blob => {
                        tip_objects.push((*target, kind));
                        continue;
                    }
                    // Not fully peeled after all: peel it by reading.
                    ObjectKind::Tag => {}
                }
            }
            let tip = peeled.get(tip).filter(|_| use_peeled).unwrap_or(tip);
            let mut tags = Vec::new();
            let (id, kind) = walker.peel(*tip, &mut tags)?;
            tip_objects.extend(tags.into_iter().map(|t| (t, ObjectKind::Tag)));
            if kind != ObjectKind::Commit {
                tip_objects.push((id, kind));
                continue;
            }
            if !seen.insert(id) {
                continue;
            }
            let Some(index_pos) = index.find(&id) else {
                return Ok(Attempt::Done(None));
            };
            commit_tips.push((id, index_pos));
        }
        // Tips with bitmaps first, taken without reading the commit.
        let (mut bitmapped, plain): (Vec<_>, Vec<_>) = commit_tips
            .into_iter()
            .partition(|&(_, index_pos)| self.bitmap.contains(index_pos));
        // Enough tips without bitmaps for a kept answer to serve, and for this one to be kept
        // (see `WalkMemo`), unless it starts from a seed, which it then does not reach.
        taken.track = plain.len() >= MEMO_MIN_TIPS;
        let keep = taken.track && seed.is_none();
        // A walk whose answer will be kept runs alone (see `BitmapIndex::walk_alone`).
        let _alone = if keep {
            match self.walk_alone(cancel) {
                Some(guard) => Some(guard),
                None => return Ok(Attempt::Done(None)),
            }
        } else {
            None
        };
        // Many tips with bitmaps (a repository whose bitmaps cover every ref): their union in
        // one pass over the bitmap file's entries, rather than each tip's XOR chain.
        let union = if bitmapped.len() >= MANY_BITMAPS {
            let positions: Vec<u32> = bitmapped.iter().map(|&(_, pos)| pos).collect();
            self.bitmap
                .union_of(&positions, cancel)
                .map_err(packd_odb::Error::from)?
        } else {
            None
        };
        if cancel.load(Ordering::Relaxed) {
            return Ok(Attempt::Done(None));
        }
        let mut later = Vec::new();
        if let Some(union) = union {
            // Counted as taken: each tip's bitmap is in the union.
            tracing::debug!("{} tips' bitmaps taken in one pass", bitmapped.len());
            bits.or_assign(&union);
            if taken.track {
                taken.bits.or_assign(&union);
                taken
                    .positions
                    .extend(bitmapped.iter().map(|&(_, pos)| pos));
            }
            self.taken
                .fetch_add(bitmapped.len() as u32, Ordering::Relaxed);
        } else {
            // Tip by tip; with many tips, in pack order, which git writes newest first, so that
            // the newest bitmaps are taken first and cover the older tips without decoding
            // theirs.
            if check_covered {
                let mut keyed = Vec::with_capacity(bitmapped.len());
                for (id, index_pos) in bitmapped {
                    keyed.push((self.bit_of(index_pos)?.unwrap_or(u64::MAX), id, index_pos));
                }
                keyed.sort_unstable();
                bitmapped = keyed.into_iter().map(|(_, id, pos)| (id, pos)).collect();
            }
            for (id, index_pos) in bitmapped {
                if !self.take_bitmap(&mut bits, &mut taken, index_pos, check_covered)? {
                    later.push((id, index_pos));
                }
            }
        }
        if !plain.is_empty() || !later.is_empty() {
            // A fill-in walk: it will need pack positions.
            self.objects.warm_positions();
        }
        // Thousands of tips to walk from: thousands of commits and trees, and as many lookups
        // by id, and more.
        self.warm_lookups(plain.len() + later.len());
        // A kept answer for some of these tips: start from what it found (see `WalkMemo`). The
        // tips are listed only when an answer may be used or kept.
        let plain_tips: Vec<ObjectId> = if taken.track {
            let mut tips: Vec<ObjectId> = plain.iter().chain(&later).map(|&(id, _)| id).collect();
            tips.sort_unstable();
            tips.dedup();
            tips
        } else {
            Vec::new()
        };
        let memo = if taken.track && use_memo {
            self.memo_for(&plain_tips)
        } else {
            None
        };
        if let Some(memo) = &memo {
            bits.or_assign(&memo.walked);
        }
        for (id, index_pos) in plain.into_iter().chain(later) {
            if check_covered && matches!(self.bit_of(index_pos)?, Some(bit) if bits.get(bit)) {
                continue;
            }
            let info = self.commit_at(repo, &id, index_pos)?;
            queue.push((info.time, id, index_pos));
            read.insert(id, info);
        }
        let tips_done = started.elapsed();
        // Commits walked while the position index was still being built on another thread:
        // their bits are set once it is there. Meanwhile a commit is walked without checking
        // whether a bitmap taken covers it (at worst a few commits more are read; their trees
        // are found covered in the tree walk).
        // With a seed, the walk waits for them instead: it stops where it enters the seed, and
        // without positions it would go on into it (on git/git, a mirror's fetch after a push
        // walked 76 commits the client has, and a fresh `packd upload-pack` cost 21-26 ms of CPU
        // instead of 17).
        let mut unplaced: Vec<u32> = Vec::new();
        let positions_pending = || seed.is_none() && self.objects.positions_pending();
        // Bitmaps taken from here on are reached from the tips without bitmaps (see
        // `WalkMemo`), as are those the kept answer's walk reached.
        let from_tips = taken.positions.len();
        if let Some(memo) = &memo {
            for &pos in &memo.reached {
                self.take_bitmap(&mut bits, &mut taken, pos, check_covered)?;
            }
        }
        let mut steps = 0;
        while let Some((_, id, index_pos)) = queue.pop() {
            if cancelled_at(&mut steps, cancel) {
                return Ok(Attempt::Done(None));
            }
            if self.take_bitmap(&mut bits, &mut taken, index_pos, check_covered)? {
                continue;
            }
            if positions_pending() {
                unplaced.push(index_pos);
            } else {
                if !self.set_bits(&mut bits, &mut unplaced)? {
                    return Ok(Attempt::Done(None));
                }
                match self.mark(&mut bits, index_pos)? {
                    None => return Ok(Attempt::Done(None)),
                    Some(false) => continue,
                    Some(true) => {}
                }
            }
            commits += 1;
            let commit = match read.remove(&id) {
                Some(info) => info,
                None => self.commit_at(repo, &id, index_pos)?,
            };
            objects.push((commit.tree, ObjectKind::Tree));
            for parent in commit.parents {
                if seen.insert(parent) {
                    let Some(parent_pos) = index.find(&parent) else {
                        return Ok(Attempt::Done(None));
                    };
                    // A parent already covered is not read: on a host with many pull-request
                    // refs, most spikes sit on commits the main line's bitmap holds.
                    if !positions_pending()
                        && matches!(self.bit_of(parent_pos)?, Some(bit) if bits.get(bit))
                    {
                        continue;
                    }
                    let info = self.commit_at(repo, &parent, parent_pos)?;
                    queue.push((info.time, parent, parent_pos));
                    read.insert(parent, info);
                }
            }
        }
        if !self.set_bits(&mut bits, &mut unplaced)? {
            return Ok(Attempt::Done(None));
        }
        if let Some(memo) = &memo {
            // The kept answer holds only if this request's bitmaps (all taken by now), or the
            // seed, cover the commits whose bitmaps it took for its tips with bitmaps.
            let covered = |bit: u64| taken.bits.get(bit) || seed.is_some_and(|s| s.get(bit));
            for &pos in &memo.tip_bitmaps {
                if !matches!(self.bit_of(pos)?, Some(bit) if covered(bit)) {
                    tracing::debug!(
                        "the kept walk from {} tips took a bitmap this request does not cover: walking again",
                        memo.tips.len()
                    );
                    self.forget_memo(memo);
                    return Ok(Attempt::MemoStale);
                }
            }
        }
        let commits_done = started.elapsed();
        // Each object is checked against `seen` when first met (once the tree it is met in is
        // scanned), before it is stacked: most entries of a walked tree are objects met in
        // another tree (the same file in the parent commit's version of the tree) and never
        // reach the stack.
        // Thousands of trees to read: about as many lookups by id as there are trees, and more.
        self.warm_lookups(objects.len());
        let mut roots: Vec<(ObjectId, ObjectKind)> = Vec::with_capacity(objects.len());
        for (id, kind) in objects {
            if seen.insert(id) {
                roots.push((id, kind));
            }
        }
        let walked = self.walk_trees(repo, &mut bits, &mut seen, roots, cancel)?;
        let Some(mut walked) = walked else {
            return Ok(Attempt::Done(None));
        };
        if keep {
            let mut found = bits.clone();
            found.and_not_assign(&taken.bits);
            found.and_not_assign(self.bitmap.type_bitmap(ObjectKind::Tag));
            let reached = taken.positions.split_off(from_tips);
            self.keep_memo(WalkMemo {
                tips: plain_tips,
                tip_bitmaps: taken.positions,
                reached,
                walked: found,
            });
        }
        // Then the tips that are not commits, and tags, after the answer was kept.
        let mut tip_roots = Vec::with_capacity(tip_objects.len());
        for (id, kind) in tip_objects {
            if kind == ObjectKind::Tag || seen.insert(id) {
                tip_roots.push((id, kind));
            }
        }
        if !tip_roots.is_empty() {
            match self.walk_trees(repo, &mut bits, &mut seen, tip_roots, cancel)? {
                Some(more) => walked = walked + more,
                None => return Ok(Attempt::Done(None)),
            }
        }
        let cache_after = repo.objects().cache_stats();
        tracing::debug!(
            "{} tips{}: {} bitmaps taken so far, {commits} commits and {} trees ({} entries) walked ({} trees against their delta base, {} against the last tree at their path ({} bytes kept), {} bases read early, {} entries shared), {} objects met; the repository's delta base cache (shared with other requests) {} hits, {} misses meanwhile; tips {:?}, commits {:?}, trees {:?}",
            tips.len(),
            memo.as_ref().map_or(String::new(), |m| format!(
                " (a kept walk from {} of them started this one)",
                m.tips.len()
            )),
            self.taken.load(std::sync::atomic::Ordering::Relaxed),
            walked.trees,
            walked.entries,
            walked.against,
            walked.by_path,
            walked.held,
            walked.early,
            walked.shared,
            seen.len(),
            cache_after.hits.saturating_sub(cache_before.hits),
            cache_after.misses.saturating_sub(cache_before.misses),
            tips_done,
            commits_done - tips_done,
            started.elapsed() - commits_done,
        );
        Ok(Attempt::Done(Some(bits)))
    }

    /// The kept answer with the most tips among `tips` (sorted), made the most recently used.
    fn memo_for(&self, tips: &[ObjectId]) -> Option<Arc<WalkMemo>> {
        self.read_kept_walk();
        let mut memos = self.memos.lock().unwrap_or_else(|p| p.into_inner());
        let best = (0..memos.len())
            .filter(|&i| memos[i].tips_within(tips))
            .max_by_key(|&i| memos[i].tips.len())?;
        let memo = memos.remove(best);
        memos.insert(0, memo.clone());
        Some(memo)
    }

    /// Keeps `memo` first, replacing one for the same tips and the least recently used beyond
    /// [`MEMO_SLOTS`].
    fn keep_memo(&self, memo: WalkMemo) {
        let memo = Arc::new(memo);
        {
            let mut memos = self.memos.lock().unwrap_or_else(|p| p.into_inner());
            memos.retain(|m| m.tips != memo.tips);
            memos.insert(0, memo.clone());
            memos.truncate(MEMO_SLOTS);
        }
        let Some(file) = self.walk_file.get() else {
            return;
        };
        {
            // The same answer as the one the file holds (a walk that started from it and
            // found nothing more) is not written again; the file now holds this one.
            let mut holds = file.holds.lock().unwrap_or_else(|p| p.into_inner());
            if holds.as_deref() == Some(&*memo) {
                *holds = Some(memo);
                return;
            }
        }
        // Written once the memo lock is let go: other requests' walks need it meanwhile.
        self.write_kept_walk(file, &memo);
    }

    /// Keeps the answer of each large fill-in walk in a file under `dir` too, and reads it
    /// back for the first request that could start from it: a server started again then does
    /// not walk again (a mirror clone of git/git: 0.23 s of CPU instead of 1.11 s,
    /// `fetch-20261126-0427.txt`). The file is named after this bitmap's own checksum (which
    /// covers the checksum of the pack or multi-pack-index it records), so another pack or
    /// bitmap never reads it.
    /// Only the first call counts. The file holds the last answer kept: a mirror clone's, or
    /// the side a mirror fetch has, whichever came last.
    /// Files kept for bitmaps no longer in the `pack/` this bitmap was found in are removed.
    pub fn keep_walks_in(&self, dir: &std::path::Path) {
        let Ok(key) = self.bitmap.file_checksum() else {
            return;
        };
        let _ = self.walk_file.set(KeptWalkFile {
            path: crate::kept_walk::path(dir, &key),
            key,
            read: Default::default(),
            failed: Default::default(),
            holds: Default::default(),
        });
    }

    /// Reads the kept answer (see [`BitmapIndex::keep_walks_in`]) once, if there is one that
    /// checks out, behind the answers already in memory.
    /// Tags are left out of an answer read back (see [`WalkMemo`]), whatever the file says.
    fn read_kept_walk(&self) {
        let Some(file) = self.walk_file.get() else {
            return;
        };
        file.read.get_or_init(|| {
            let Some(bytes) = crate::kept_walk::read(&file.path) else {
                return;
            };
            let objects = self.objects.len();
            let decoded = crate::kept_walk::decode(&bytes, &file.key, objects, |pos| {
                self.bitmap.contains(pos)
            });
            let mut memo = match decoded {
                Ok(memo) => memo,
                Err(e) => {
                    tracing::debug!("{} is not used: {e}", file.path.display());
                    return;
                }
            };
            memo.walked
                .and_not_assign(self.bitmap.type_bitmap(ObjectKind::Tag));
            tracing::debug!(
                "the walk from {} tips read back from {}",
                memo.tips.len(),
                file.path.display()
            );
            let memo = Arc::new(memo);
            let mut memos = self.memos.lock().unwrap_or_else(|p| p.into_inner());
            if memos.len() < MEMO_SLOTS && memos.iter().all(|m| m.tips != memo.tips) {
                *file.holds.lock().unwrap_or_else(|p| p.into_inner()) = Some(memo.clone());
                memos.push(memo);
            }
        });
    }

    fn forget_memo(&self, memo: &Arc<WalkMemo>) {
        let mut memos = self.memos.lock().unwrap_or_else(|p| p.into_inner());
        memos.retain(|m| !Arc::ptr_eq(m, memo));
        drop(memos);
        // When the file holds it, a process started later would find it stale too; another
        // answer there (the other side of a fetch, or a newer one) is left.
        if let Some(file) = self.walk_file.get() {
            let mut holds = file.holds.lock().unwrap_or_else(|p| p.into_inner());
            if holds.as_ref().is_some_and(|held| Arc::ptr_eq(held, memo)) {
                let _ = std::fs::remove_file(&file.path);
                *holds = None;
            }
        }
    }

    /// Writes `memo` to the kept-walk file (see [`BitmapIndex::keep_walks_in`]); after a
    /// failure (a read-only repository), warns once and stops trying.
    fn write_kept_walk(&self, file: &KeptWalkFile, memo: &Arc<WalkMemo>) {
        if file.failed.load(Ordering::Relaxed) {
            return;
        }
        let path = &file.path;
        // The holder is set while the file is written, so that a write and a removal for a
        // stale answer do not cross.
        let mut holds = file.holds.lock().unwrap_or_else(|p| p.into_inner());
        let started = std::time::Instant::now();
        let bytes = crate::kept_walk::encode(memo, &file.key);
        match crate::kept_walk::write(path, bytes, self.storage.as_ref()) {
            Ok(()) => {
                *holds = Some(memo.clone());
                tracing::debug!(
                    "the walk from {} tips kept in {} in {:?}",
                    memo.tips.len(),
                    path.display(),
                    started.elapsed()
                )
            }
            Err(e) => {
                if !file.failed.swap(true, Ordering::Relaxed) {
                    tracing::warn!(
                        "the answer of a fill-in walk cannot be kept in {} (a server started \
                         again will walk again): {e}",
                        path.display()
                    );
                }
            }
        }
    }

    /// Sets the bit of the object at `index_pos`: `Some(true)` when it was not set yet,
    /// `Some(false)` when it was, `None` when the object has no place in the bitmap's order.
    fn mark(&self, bits: &mut Bitmap, index_pos: u32) -> Result<Option<bool>> {
        let Some(bit) = self.bit_of(index_pos)? else {
            return Ok(None);
        };
        if bits.get(bit) {
            return Ok(Some(false));
        }
        bits.set(bit);
        Ok(Some(true))
    }

    /// Two sets of objects, as bits in pack order: those reachable from `include` and not from
    /// `exclude`, and all those reachable from `exclude` (a fetch sends the first and may make
    /// deltas against anything in the second: the client has all of it, not just the commits it
    /// named); and the objects outside the bitmapped objects reachable from `include` and not
    /// from `exclude`. Outside objects (loose objects and packs written since the bitmap: every
    /// push until the next repack) are walked by reading them, as git's extended index does,
    /// until the walk enters the bitmapped objects; the bitmaps answer from there. `None` when
    /// the bitmap cannot answer (an object missing, or a bitmapped object that reaches
    /// outside: a pack that is not closed under reachability).
    ///
    /// Why the outside objects the walk from `exclude` meets are all the outside objects the
    /// client has: a commit's bitmap covers everything the commit reaches, and every other edge
    /// the bitmap walk follows is looked up, and gives `None` (the plain walk answers) when it
    /// leaves the bitmapped objects. So whenever this answers, the bitmapped objects it counts
    /// reach no outside object. The walk from `include` stops at the outside objects the haves
    /// reach (the client has them and all they reach), as git's does.
    ///
    /// `peeled` maps annotated tags among the tips to the objects they peel to
    /// (`packed-refs`' `^` lines, see `packd_odb::refs::RefReader::list_peeled`). When every
    /// tag the bitmaps number is such a tip (`rev-list --all`), the tags are not read;
    /// otherwise the map is ignored.
    ///
    /// The walks check `cancel` as they go (a client that hung up) and answer `None` once it
    /// is set; the caller, which set it, does not take that for the bitmap's answer.
    pub fn difference_with_outside(
        &self,
        repo: &Repository,
        include: &[ObjectId],
        exclude: &[ObjectId],
        peeled: &IdMap<ObjectId>,
        cancel: &AtomicBool,
    ) -> Result<Option<WithOutside>> {
        let Some(had) = self.walk_outside(repo, exclude, None, cancel)? else {
            return Ok(None);
        };
        let Some(wanted) = self.walk_outside(repo, include, Some(&had), cancel)? else {
            return Ok(None);
        };
        if !wanted.objects.is_empty() || !had.objects.is_empty() {
            tracing::debug!(
                "{} wanted and {} had objects outside the bitmapped objects, entering them at {} \
                 and {} objects",
                wanted.objects.len(),
                had.objects.len(),
                wanted.boundary.len(),
                had.boundary.len()
            );
        }
        let Some((bits, had_bits)) =
            self.difference_peeled(repo, &wanted.boundary, &had.boundary, peeled, cancel)?
        else {
            return Ok(None);
        };
        let outside = wanted.objects;
        Ok(Some(WithOutside {
            wanted: bits,
            had: had_bits,
            outside,
        }))
    }

    /// Walks the objects outside the bitmapped objects that `tips` reach. Tips inside them
    /// are boundary as they are (no read); `None` when an object is missing. Blobs are never
    /// read (a tree entry's mode says what it names), so a large pushed file costs nothing.
    ///
    /// With `had` (the walk from the haves), the outside objects it met are not entered.
    fn walk_outside(
        &self,
        repo: &Repository,
        tips: &[ObjectId],
        had: Option<&Outside>,
        cancel: &AtomicBool,
    ) -> Result<Option<Outside>> {
        let had: IdSet = had
            .map(|h| h.objects.iter().map(|(id, _)| *id).collect())
            .unwrap_or_default();
        let is_had = |id: &ObjectId| had.contains(id);
        let mut out = Outside::default();
        // Objects met, outside or boundary.
        let mut met = IdSet::default();
        // (id, its kind when the object naming it says)
        let mut stack: Vec<(ObjectId, Option<ObjectKind>)> = Vec::new();
        for tip in tips {
            if !met.insert(*tip) {
                continue;
            }
            if self.objects.find(tip).is_some() {
                out.boundary.push(*tip);
            } else if !is_had(tip) {
                stack.push((*tip, None));
            }
        }
        let objects = repo.objects();
        let mut steps = 0;
        while let Some((id, kind)) = stack.pop() {
            if cancelled_at(&mut steps, cancel) {
                return Ok(None);
            }
            let kind = match kind {
                Some(kind) => kind,
                None => match objects.header(&id)? {
                    Some(header) => header.kind,
                    None => return Ok(None),
                },
            };
            out.objects.push((id, kind));
            if kind == ObjectKind::Blob {
                continue;
            }
            let Some(object) = objects.read(&id)? else {
                return Ok(None);
            };
            let mut next = |child: ObjectId, kind: Option<ObjectKind>| {
                if !met.insert(child) {
                    return;
                }
                if self.objects.find(&child).is_some() {
                    out.boundary.push(child);
                } else if !is_had(&child) {
                    stack.push((child, kind));
                }
            };
            match object.kind {
                ObjectKind::Commit => {
                    let info = parse_commit(&id, &object.data)?;
                    next(info.tree, Some(ObjectKind::Tree));
                    for parent in info.parents {
                        next(parent, Some(ObjectKind::Commit));
                    }
                }
                ObjectKind::Tree => {
                    for entry in packd_odb::parse::tree_entries(&id, &object.data) {
                        let (mode, _, child) = entry?;
                        match mode & 0o170000 {
                            // A gitlink names a commit of another repository.
                            0o160000 => {}
                            0o040000 => next(child, Some(ObjectKind::Tree)),
                            _ => next(child, Some(ObjectKind::Blob)),
                        }
                    }
                }
                ObjectKind::Tag => next(packd_odb::parse::tag_target(&id, &object.data)?, None),
                ObjectKind::Blob => {}
            }
        }
        Ok(Some(out))
    }

    fn difference_peeled(
        &self,
        repo: &Repository,
        include: &[ObjectId],
        exclude: &[ObjectId],
        peeled: &IdMap<ObjectId>,
        cancel: &AtomicBool,
    ) -> Result<Option<(Bitmap, Bitmap)>> {
        // The side the client has goes first, and the wanted side's walk starts from what it
        // reached: it stops where it enters what the client has, as git's does. A mirror's
        // fetch after a push wants a commit whose parent has no bitmap, and the walk would
        // otherwise go down hundreds of commits the client has (426-452 on git/git, for a real
        // `git fetch` whose 16 haves all had bitmaps). The two walks once ran side by side, on
        // two threads, which cost more CPU for a shorter wait.
        let walker = Walker::new(repo);
        let Some(had) = self.reach(repo, &walker, exclude, peeled, None, cancel)? else {
            return Ok(None);
        };
        let seed = (!exclude.is_empty()).then_some(&had);
        let Some(mut wanted) = self.reach(repo, &walker, include, peeled, seed, cancel)? else {
            return Ok(None);
        };
        wanted.and_not_assign(&had);
        Ok(Some((wanted, had)))
    }

    /// The number of objects the bitmaps number (bits run from 0 to this, exclusive).
    pub fn object_count(&self) -> u32 {
        self.objects.len()
    }

    /// The bits of every object of `kind`.
    pub fn type_bitmap(&self, kind: ObjectKind) -> &Bitmap {
        self.bitmap.type_bitmap(kind)
    }

    /// The object at bit `bit`: its id and where it is stored (for a multi-pack-index, the copy
    /// the bitmap numbers). `None` for a bit past the objects.
    pub fn object_at(&self, bit: u64) -> Result<Option<(ObjectId, Location)>> {
        let Some(pos) = u32::try_from(bit)
            .ok()
            .and_then(|b| self.objects.position_at(b))
        else {
            return Ok(None);
        };
        Ok(Some((self.objects.id(pos), self.objects.location(pos)?)))
    }

    /// The name-hash of the object at bit `bit` (git's hash of the path it was packed under,
    /// which groups versions of one file), when the bitmap has a name-hash cache.
    pub fn name_hash(&self, bit: u64) -> Result<Option<u32>> {
        let Some(pos) = u32::try_from(bit)
            .ok()
            .and_then(|b| self.objects.position_at(b))
        else {
            return Ok(None);
        };
        self.bitmap
            .name_hash(pos)
            .map_err(|e| packd_odb::Error::BadName(format!("{}: {e}", self.bitmap.name())))
    }

    /// The objects whose name-hash is `hash`, in index order; `None` without a name-hash cache,
    /// or when the bits number a multi-pack-index's objects.
    ///
    /// Two passes over the name-hash cache, which is in index order: one counts the matches,
    /// one collects them (a single pass into a growing list measured no better: `bench/ab.py`
    /// with `.rev`, 1, 8 and 32 days behind on git/git, 1.01-1.09x git's CPU against
    /// 1.02-1.06x). Each match is keyed by its
    /// pack position when the pack's `.rev` gave them all (see `Pack::built_pack_positions`),
    /// else by its offset from the index, so that no pack position is needed until
    /// [`BitmapIndex::bits_near`] picks a few. A table of every object by name-hash needs every
    /// object's bit, which a fresh process must sort the pack's offsets for: on git/git, that
    /// table took 61% of the CPU of a `packd upload-pack` 1 day behind, for two new deltas (a
    /// root tree, whose name-hash about 393,000 of the 841,300 objects of git/git with its
    /// pull-request refs share, and a file's, 27,726).
    pub fn objects_with_name_hash(&self, hash: u32) -> Result<Option<SameName>> {
        let Some(pack) = self.objects.single_pack() else {
            return Ok(None);
        };
        let Some(hashes) = self
            .bitmap
            .name_hashes()
            .map_err(|e| packd_odb::Error::BadName(format!("{}: {e}", self.bitmap.name())))?
        else {
            return Ok(None);
        };
        // Compared as they are stored (big-endian), four bytes at a time.
        let want = u32::from_ne_bytes(hash.to_be_bytes());
        let matches = |h: &[u8]| u32::from_ne_bytes([h[0], h[1], h[2], h[3]]) == want;
        // Counted first, so that the list is allocated once: a growing vector copies and faults
        // in its memory again at each doubling, and the empty path's name-hash is shared by
        // 170,145 of the 489,184 objects of git/git's branches and tags, 393,356 of the 841,300
        // with its pull-request refs (commits, root trees, and objects git packed without a
        // path).
        let count = hashes.chunks_exact(4).filter(|h| matches(h)).count();
        let index = pack.index();
        let positions = pack.built_pack_positions();
        let mut objects = Vec::with_capacity(count);
        for (i, h) in hashes.chunks_exact(4).enumerate() {
            if matches(h) {
                let key = match positions {
                    Some(positions) => match positions.get(i) {
                        Some(&p) => p as u64,
                        None => continue,
                    },
                    None => index.offset(i as u32)?,
                };
                objects.push((key, i as u32));
            }
        }
        Ok(Some(SameName {
            keys: match positions {
                Some(_) => NameKeys::PackPositions,
                None => NameKeys::Offsets,
            },
            objects,
        }))
    }

    /// The key of bit `bit` in the order of [`SameName`]'s keys: the bit itself when keys are
    /// pack positions, else its entry's offset; `None` when the bit names no entry.
    fn order_key(&self, keys: NameKeys, bit: u64) -> Result<Option<u64>> {
        if keys == NameKeys::PackPositions {
            return Ok(Some(bit));
        }
        let Some(pack) = self.objects.single_pack() else {
            return Ok(None);
        };
        Ok(u32::try_from(bit)
            .ok()
            .map(|b| pack.entry_at_position(b))
            .transpose()?
            .flatten()
            .map(|(offset, _)| offset))
    }

    /// The bit of an object picked by its key: the key itself when keys are pack positions.
    fn chosen_bit(&self, keys: NameKeys, key: u64, index_pos: u32) -> Result<Option<u64>> {
        if keys == NameKeys::PackPositions {
            Ok(Some(key))
        } else {
            self.bit_of(index_pos)
        }
    }

    /// Of `same` (from [`BitmapIndex::objects_with_name_hash`]), the `n` nearest to bit `bit`
    /// in pack order on each side, the object at `bit` left out: their bits, ascending.
    ///
    /// With `sorted` (the objects sorted by key), two slices around the object's key.
    /// Otherwise one pass keeping the nearest, rather than a sort: most name-hashes are looked
    /// up for one or two objects (sorting the empty path's, about 393,000 of the 841,300
    /// objects of git/git with its pull-request refs, cost a sixth of a small fetch); the
    /// caller sorts a list it asks again.
    pub fn bits_near(&self, same: &SameName, sorted: bool, bit: u64, n: usize) -> Result<Vec<u64>> {
        let Some(target) = self.order_key(same.keys, bit)? else {
            return Ok(Vec::new());
        };
        let chosen = |key, index_pos| self.chosen_bit(same.keys, key, index_pos);
        let objects = &same.objects[..];
        if sorted {
            let at = objects.partition_point(|&(key, _)| key < target);
            let after = objects[at..]
                .iter()
                .filter(|&&(key, _)| key != target)
                .take(n);
            let mut bits = Vec::with_capacity(2 * n);
            for &(key, index_pos) in objects[at.saturating_sub(n)..at].iter().chain(after) {
                bits.extend(chosen(key, index_pos)?);
            }
            bits.sort_unstable();
            return Ok(bits);
        }
        let mut nearest = Nearest::new(target, n);
        for &(key, index_pos) in objects {
            nearest.offer(key, index_pos);
        }
        nearest.bits(chosen)
    }

    /// The pack whose objects the bits number, when they are one pack's (not a
    /// multi-pack-index's): bit `i` is then the pack's `i`th entry by offset.
    pub fn single_pack(&self) -> Option<&std::sync::Arc<packd_odb::pack::Pack>> {
        self.objects.single_pack()
    }

    /// Whether the bitmapped objects include `id` (an index lookup; no pack position needed).
    pub fn contains(&self, id: &ObjectId) -> bool {
        self.objects.find(id).is_some()
    }

    /// The bit that stands for `id`; `None` when the bitmapped objects do not include it.
    pub fn bit_of_id(&self, id: &ObjectId) -> Result<Option<u64>> {
        match self.objects.find(id) {
            Some(pos) => self.bit_of(pos),
            None => Ok(None),
        }
    }

    /// The ids of the objects whose bits are set, in pack order.
    pub fn ids(&self, bits: &Bitmap) -> Vec<ObjectId> {
        bits.iter_ones()
            .filter_map(|b| self.objects.position_at(b as u32))
            .map(|i| self.objects.id(i))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(first: u8, slot: u32) -> ObjectId {
        let mut bytes = [first; 20];
        bytes[8..12].copy_from_slice(&slot.to_le_bytes());
        ObjectId::from_bytes(&bytes).expect("20 bytes")
    }

    #[test]
    fn recent_ids_remember_the_last_id_of_each_slot() {
        let mut recent = RecentIds::new(1024);
        // What the slots alone say: met again when its slot holds the id (a set that has
        // nothing cannot vouch for it).
        let met =
            |recent: &mut RecentIds, id: &ObjectId| !recent.first_met(id, &mut IdSet::default());
        let (a, b) = (id(1, 7), id(2, 7));
        assert_eq!(recent.slot(&a), recent.slot(&b));
        assert!(!met(&mut recent, &a), "an empty slot holds no id");
        assert!(met(&mut recent, &a), "the id just put in its slot");
        // Another id of the same slot takes its place.
        assert!(!met(&mut recent, &b));
        assert!(!met(&mut recent, &a));
        // An id of another slot leaves it be.
        let c = id(4, 8);
        assert!(!met(&mut recent, &c));
        assert!(met(&mut recent, &a));
        assert!(met(&mut recent, &c));
        // Slots are taken modulo the table's size.
        assert!(!met(&mut recent, &id(3, 7 + 1024)));
        assert!(!met(&mut recent, &a));
        // The zeros an empty slot holds match no id, the zero id included.
        assert!(!met(&mut recent, &ObjectId::NULL));
        assert!(!met(&mut recent, &ObjectId::NULL));
    }

    #[test]
    fn an_id_is_met_first_once_whether_its_slot_or_the_set_has_it() {
        let mut recent = RecentIds::new(1024);
        let mut seen = IdSet::default();
        let (a, b) = (id(1, 7), id(2, 7));
        assert!(recent.first_met(&a, &mut seen));
        assert!(seen.contains(&a), "put in the set with its slot");
        assert!(!recent.first_met(&a, &mut seen), "its slot has it");
        assert!(recent.first_met(&b, &mut seen));
        assert!(
            !recent.first_met(&a, &mut seen),
            "out of its slot, the set has it"
        );
        assert!(!recent.first_met(&b, &mut seen));
        assert_eq!(seen.len(), 2);
    }
}
