//! Counting a fetch: which objects to send, where each is stored, and what the client already
//! has (so that on-disk deltas against those objects can be sent as they are).
//!
//! With a bitmap index and a full-history client, both sets come from bitmaps: wants minus
//! haves to send, everything the haves reach as delta bases (seed 000: knowing all the client
//! has, not only the commits it named, is what lets most on-disk deltas be reused). Shallow
//! requests, filters bitmaps cannot express, and repositories without bitmaps are counted by
//! walking ([`crate::walk`]); so is a fetch past the bitmap whose haves are too (pushes since
//! the last repack), as git walks it (see `PackServer::walk_is_cheaper`).
//!
//! The objects are then sorted into write order: pack by pack (the bitmap's preferred pack
//! first), by offset within each pack, so that a pack's entries are read sequentially and a
//! delta's base, when sent, is written before it.

use crate::walk;
use crate::{FetchRequest, Filter, PackError, PackServer};
use packd_odb::pack::Pack;
use packd_odb::packed_refs::Peeled;
use packd_odb::refs::ListedRef;
use packd_odb::{IdMap, IdSet, Location, ObjectId, ObjectKind};
use packd_reach::ewah::Bitmap;
use packd_reach::progress::Progress;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// The rank of objects stored loose (after every pack).
pub(crate) const LOOSE: u32 = u32::MAX;

/// One object to send.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Item {
    /// Its pack's rank in [`Planned::packs`], or [`LOOSE`].
    pub rank: u32,
    /// Its entry's offset in that pack (for loose objects, its place in [`Planned::loose`]).
    pub offset: u64,
}

/// What the client has, for choosing delta bases.
pub(crate) enum Had {
    /// Bits of the server's bitmap index.
    Bits(Bitmap),
    /// Object ids.
    Ids(IdSet),
}

/// The counted objects, in write order.
pub(crate) struct Planned {
    /// Packs the objects come from, by rank.
    pub packs: Vec<Arc<Pack>>,
    /// The objects, sorted by (rank, offset).
    pub items: Vec<Item>,
    /// Ids of the loose objects to send.
    pub loose: Vec<ObjectId>,
    /// What the client has.
    pub had: Had,
    /// For objects counted by walking, the client's version of the same path: a thin delta's
    /// base when there is no bitmap to give name hashes.
    pub path_bases: IdMap<ObjectId>,
    /// Every object of this pack is sent (`items` is empty): with nothing `after_whole`, the
    /// answer is the pack file as it is (see `write::write_whole_pack`), planned without a
    /// table per object.
    pub whole: Option<Arc<Pack>>,
    /// With `whole`: objects stored elsewhere (pushed since the pack was written: loose, or in
    /// other packs), sent whole after the pack's entries.
    pub after_whole: Vec<ObjectId>,
}

impl Default for Planned {
    /// Nothing to send (a plan answered from the clone cache).
    fn default() -> Planned {
        Planned {
            packs: Vec::new(),
            items: Vec::new(),
            loose: Vec::new(),
            had: Had::Ids(IdSet::default()),
            path_bases: IdMap::default(),
            whole: None,
            after_whole: Vec::new(),
        }
    }
}

impl Planned {
    /// The number of objects to send.
    pub fn len(&self) -> usize {
        match &self.whole {
            Some(pack) => pack.len() as usize + self.after_whole.len(),
            None => self.items.len(),
        }
    }

    /// The position in `items`, before `before`, of the entry at `offset` of the pack of rank
    /// `rank`: where a delta's base was written, if it was.
    ///
    /// A base is usually stored a little before its delta, so the search gallops back from
    /// `before` (probes at distances 1, 2, 4...) and then halves the last gap: a few probes
    /// near an entry already in cache, where a search of the whole plan (400k items for a
    /// clone of git.git) cost 4% of a clone.
    pub fn find_before(&self, rank: u32, offset: u64, before: usize) -> Option<usize> {
        let key = (rank, offset);
        let items = &self.items[..before.min(self.items.len())];
        // Invariant: the key, if present, is in items[..hi].
        let mut hi = items.len();
        let mut step = 1;
        let lo = loop {
            let lo = hi.saturating_sub(step);
            if lo == 0 || (items[lo].rank, items[lo].offset) <= key {
                break lo;
            }
            hi = lo;
            step *= 2;
        };
        items[lo..hi]
            .binary_search_by(|i| (i.rank, i.offset).cmp(&key))
            .ok()
            .map(|k| lo + k)
    }

    /// The id of `item`.
    pub fn id(&self, item: &Item) -> Result<ObjectId, PackError> {
        if item.rank == LOOSE {
            return Ok(self.loose[item.offset as usize]);
        }
        let pack = &self.packs[item.rank as usize];
        Ok(pack.index().id(pack.position_at(item.offset)?))
    }
}

/// Orders objects given as (id, location) into a plan.
struct Sorter {
    packs: Vec<Arc<Pack>>,
    ranks: HashMap<*const Pack, u32>,
    items: Vec<Item>,
    loose: Vec<ObjectId>,
}

impl Sorter {
    fn new() -> Sorter {
        Sorter {
            packs: Vec::new(),
            ranks: HashMap::new(),
            items: Vec::new(),
            loose: Vec::new(),
        }
    }

    /// Adds the entry at `offset` of `pack`.
    fn push_packed(&mut self, pack: &Arc<Pack>, offset: u64) {
        let key = Arc::as_ptr(pack);
        if let (Some(last), Some(item)) = (self.packs.last(), self.items.last()) {
            if Arc::as_ptr(last) == key && item.rank as usize == self.packs.len() - 1 {
                self.items.push(Item {
                    rank: item.rank,
                    offset,
                });
                return;
            }
        }
        let rank = match self.ranks.get(&key) {
            Some(r) => *r,
            None => {
                let r = self.packs.len() as u32;
                self.ranks.insert(key, r);
                self.packs.push(pack.clone());
                r
            }
        };
        self.items.push(Item { rank, offset });
    }

    fn push(&mut self, id: ObjectId, location: Location) {
        match location {
            Location::Packed { pack, offset } => self.push_packed(&pack, offset),
            Location::Loose(_) => {
                self.items.push(Item {
                    rank: LOOSE,
                    offset: self.loose.len() as u64,
                });
                self.loose.push(id);
            }
        }
    }

    fn finish(mut self, had: Had) -> Planned {
        self.items.sort_unstable_by_key(|i| (i.rank, i.offset));
        // The same object twice (a tag also reached another way) is located twice alike.
        self.items.dedup_by_key(|i| (i.rank, i.offset));
        Planned {
            packs: self.packs,
            items: self.items,
            loose: self.loose,
            had,
            path_bases: IdMap::default(),
            whole: None,
            after_whole: Vec::new(),
        }
    }
}

/// Objects outside the bitmapped pack sent after its entries, at most (each is read and
/// compressed again); past this many, the plan is made object by object, which can reuse
/// their deltas.
const MAX_AFTER_WHOLE: usize = 4096;

/// A fetch whose wants lie outside the bitmap and whose commits to read, from both sides
/// down to where they meet, are at most this many is counted by the plain walk (see
/// `PackServer::walk_is_cheaper`).
const CLOSE_FETCH_COMMITS: usize = 1000;

/// A fetch sending more objects than this from outside the bitmap gets no path bases for
/// them (`PackServer::outside_path_bases`: reading the trees costs about what the delta search
/// does; past this, a repack is due anyway).
const MAX_OUTSIDE_PATH_BASES: usize = 100_000;

/// Bytes of the objects sent after a pack's entries, at most, together (each is held whole
/// while it is compressed again).
const MAX_AFTER_WHOLE_BYTES: u64 = 32 << 20;

/// Wants from which a request's wanted tags are peeled from `packed-refs` (see
/// `wanted_tags_peeled`).
const PEEL_WANTS_FROM: usize = 64;

impl PackServer {
    /// The refs under `refs/tags/` that counting `request` needs, listed once per request:
    /// for include-tag, and for what the wanted tags peel to (from [`PEEL_WANTS_FROM`] wants);
    /// none otherwise.
    pub(crate) fn tag_refs_for(&self, request: &FetchRequest) -> Result<Vec<ListedRef>, PackError> {
        if request.include_tag || request.wants.len() >= PEEL_WANTS_FROM {
            Ok(self.repo.refs().list_refs("refs/tags/", &[])?)
        } else {
            Ok(Vec::new())
        }
    }
}

/// What the wanted annotated tags among `tag_refs` (the refs under refs/tags/) peel to, as
/// `packed-refs` records it, for a request wanting at least [`PEEL_WANTS_FROM`] objects (a
/// clone wants every tag): when every tag of the bitmapped pack is wanted, the walk then takes
/// them all from the bitmap of tags instead of reading each one (1,006 tags on git/git).
/// Fewer wants are not worth listing the refs for.
fn wanted_tags_peeled(wants: &[ObjectId], tag_refs: &[ListedRef]) -> IdMap<ObjectId> {
    let mut peeled = IdMap::default();
    if wants.len() < PEEL_WANTS_FROM {
        return peeled;
    }
    let wanted: IdSet = wants.iter().copied().collect();
    for r in tag_refs {
        if let Peeled::Tag(target) = r.peeled {
            if wanted.contains(&r.id) {
                peeled.insert(r.id, target);
            }
        }
    }
    peeled
}

fn missing(id: &ObjectId) -> PackError {
    PackError::BadRequest(format!("object {id} is missing from the repository"))
}

impl PackServer {
    /// Counts `request` (see the module documentation); `deepened` is what a deepen request
    /// keeps.
    pub(crate) fn count(
        &self,
        request: &FetchRequest,
        deepened: Option<&walk::Deepened>,
        tag_refs: &[ListedRef],
        progress: &dyn Progress,
        cancel: &AtomicBool,
    ) -> Result<Planned, PackError> {
        let repo = &self.repo;
        let objects = repo.objects();
        // Only haves the server has count; negotiation should have dropped the others.
        let mut haves = Vec::with_capacity(request.haves.len());
        for h in &request.haves {
            if objects.contains(h)? {
                haves.push(*h);
            }
        }
        for w in &request.wants {
            if !objects.contains(w)? {
                return Err(PackError::BadRequest(format!("not our ref {w}")));
            }
        }
        let bitmap_ok = deepened.is_none()
            && request.client_shallow.is_empty()
            && !matches!(request.filter, Some(Filter::TreeDepth(n)) if n > 0);
        // Counted as git's plain walk counts it, where git itself walks (see
        // `walk_is_cheaper`).
        let mut as_git = false;
        if bitmap_ok {
            let bitmap = self.bitmap();
            if let Some(index) = bitmap {
                as_git = self.walk_is_cheaper(index, request, &haves);
            }
            if let Some(index) = bitmap.filter(|_| !as_git) {
                let peeled = wanted_tags_peeled(&request.wants, tag_refs);
                if let Some(answer) =
                    index.difference_with_outside(repo, &request.wants, &haves, &peeled, cancel)?
                {
                    let (mut wanted, had) = (answer.wanted, answer.had);
                    if cancel.load(Ordering::Relaxed) {
                        return Err(PackError::Cancelled);
                    }
                    let mut outside = answer.outside;
                    self.apply_filter(index, request, &mut wanted, &mut outside)?;
                    let total = wanted.count_ones();
                    progress.start("Counting objects", total);
                    // The walk is done: what it held goes back before the object list is
                    // built, so that the two do not make one peak (a mirror clone of git/git
                    // after a push: the walk's delta base cache and the list of 841,300
                    // objects).
                    if total + outside.len() as u64 >= u64::from(crate::LARGE_PLAN) {
                        self.release_walk_memory();
                    }
                    let outside_ids: IdSet = outside.iter().map(|(id, _)| *id).collect();
                    let tags = if request.include_tag {
                        self.tags_to_add(tag_refs, index, &wanted, &had, &outside_ids)?
                    } else {
                        Vec::new()
                    };
                    // Every object of the pack, and a few pushed since: the pack's entries go
                    // out as they are, then those few (a mirror clone after a push).
                    if outside.len() <= MAX_AFTER_WHOLE {
                        if let Some(pack) = self.whole_pack(index, request, &wanted, total)? {
                            let after_whole: Vec<ObjectId> = outside
                                .iter()
                                .map(|(id, _)| *id)
                                .chain(tags.iter().copied())
                                .collect();
                            if self.small_enough_after_whole(&after_whole)? {
                                let count = total + after_whole.len() as u64;
                                progress.finish(count);
                                return Ok(Planned {
                                    had: Had::Bits(had),
                                    whole: Some(pack.clone()),
                                    after_whole,
                                    ..Planned::default()
                                });
                            }
                        }
                    }
                    let mut sorter = Sorter::new();
                    sorter.items.reserve(total as usize + outside.len());
                    // One pack's bits are its entries in offset order: no lookups needed once
                    // its offsets are sorted. A few objects (a fetch) are found entry by entry
                    // instead, when nothing has sorted them yet (a process per request).
                    let single = match index.single_pack() {
                        Some(pack) if pack.few_enough_one_by_one(total) => {
                            tracing::debug!(
                                "{total} objects of {} found entry by entry (its offsets are not sorted)",
                                pack.data_name()
                            );
                            Some((pack, None))
                        }
                        Some(pack) => Some((pack, Some(pack.sorted_offsets()?))),
                        None => None,
                    };
                    let no_object = |bit: u64| {
                        PackError::Odb(packd_odb::Error::BadName(format!(
                            "bit {bit} of the bitmap names no object"
                        )))
                    };
                    for (n, bit) in wanted.iter_ones().enumerate() {
                        if n % 65536 == 0 {
                            if cancel.load(Ordering::Relaxed) {
                                return Err(PackError::Cancelled);
                            }
                            progress.update(n as u64);
                        }
                        match single {
                            Some((pack, Some(offsets))) if bit + 1 < offsets.len() as u64 => {
                                sorter.push_packed(pack, offsets[bit as usize])
                            }
                            Some((pack, None)) => {
                                let position = u32::try_from(bit).map_err(|_| no_object(bit))?;
                                let (offset, _) = pack
                                    .entry_at_position(position)?
                                    .ok_or_else(|| no_object(bit))?;
                                sorter.push_packed(pack, offset)
                            }
                            Some(_) => return Err(no_object(bit)),
                            None => {
                                let (id, location) =
                                    index.object_at(bit)?.ok_or_else(|| no_object(bit))?;
                                sorter.push(id, location);
                            }
                        }
                    }
                    // Outside objects (loose, or in packs written since the bitmap), then the
                    // tags followed.
                    for id in outside.iter().map(|(id, _)| *id).chain(tags) {
                        let location = objects.locate(&id)?.ok_or_else(|| missing(&id))?;
                        sorter.push(id, location);
                    }
                    progress.finish(sorter.items.len() as u64);
                    let path_bases =
                        self.outside_path_bases(index, request, &haves, &had, &outside, cancel)?;
                    let mut planned = sorter.finish(Had::Bits(had));
                    planned.path_bases = path_bases;
                    return Ok(planned);
                }
                // A walk given up on answers nothing either.
                if cancel.load(Ordering::Relaxed) {
                    return Err(PackError::Cancelled);
                }
                tracing::debug!("the bitmap cannot answer this fetch; walking");
            }
        }
        let request_haves = FetchRequest {
            haves,
            ..request.clone()
        };
        let counted = if as_git {
            walk::count_plain(repo, &request_haves, cancel)?
        } else {
            walk::count(repo, &request_haves, deepened, cancel)?
        };
        progress.start("Counting objects", 0);
        let mut sorter = Sorter::new();
        let mut sent = IdSet::default();
        for (n, id) in counted.objects.iter().enumerate() {
            if n % 65536 == 0 {
                if cancel.load(Ordering::Relaxed) {
                    return Err(PackError::Cancelled);
                }
                progress.update(n as u64);
            }
            let location = objects.locate(id)?.ok_or_else(|| missing(id))?;
            sorter.push(*id, location);
            if request.include_tag {
                sent.insert(*id);
            }
        }
        if request.include_tag {
            for tag in self.tags_to_include(tag_refs, &|id| Ok(sent.contains(id)))? {
                // `insert`: a tag reached through several refs is added once.
                if counted.had.contains(&tag) || !sent.insert(tag) {
                    continue;
                }
                let location = objects.locate(&tag)?.ok_or_else(|| missing(&tag))?;
                sorter.push(tag, location);
            }
        }
        progress.finish(sorter.items.len() as u64);
        let mut planned = sorter.finish(Had::Ids(counted.had));
        planned.path_bases = counted.path_bases;
        Ok(planned)
    }

    /// For a thin fetch, the client's version of the same path of each object sent from
    /// outside the bitmap ([`walk::path_bases`] from the have commits' trees): the bitmap's
    /// name-hash cache names no such object, so without these the delta search finds no base
    /// the client has for them (a branch rewritten with filter-branch, stored whole: 13.2 MB
    /// sent for git's 2.0 MB). Only for at most [`MAX_OUTSIDE_PATH_BASES`] outside objects.
    fn outside_path_bases(
        &self,
        index: &packd_reach::bitmap_walk::BitmapIndex,
        request: &FetchRequest,
        haves: &[ObjectId],
        had: &Bitmap,
        outside: &[(ObjectId, ObjectKind)],
        cancel: &AtomicBool,
    ) -> Result<IdMap<ObjectId>, PackError> {
        if !request.thin || haves.is_empty() || outside.len() > MAX_OUTSIDE_PATH_BASES {
            return Ok(IdMap::default());
        }
        let repo = &self.repo;
        let walker = packd_reach::walk::Walker::new(repo);
        let mut sent_roots = Vec::new();
        for (id, kind) in outside {
            if *kind == ObjectKind::Commit {
                sent_roots.push(walker.commit(id)?.tree);
            }
        }
        if sent_roots.is_empty() {
            return Ok(IdMap::default());
        }
        let peeled = walk::peel(&walker, haves)?;
        let mut had_roots = Vec::new();
        for id in &peeled.commits {
            had_roots.push(walker.commit(id)?.tree);
        }
        let client_has =
            |id: &ObjectId| matches!(index.bit_of_id(id), Ok(Some(bit)) if had.get(bit));
        walk::path_bases(repo, &had_roots, &sent_roots, &client_has, cancel)
    }

    /// Whether `request` (with the `haves` the server has) is counted as git's plain walk
    /// counts it ([`walk::count_plain`]) rather than from the bitmap: some want lies outside
    /// the bitmap (pushed since it was written, which maintenance leaves so until enough
    /// accumulate), the wants peel to commits within [`CLOSE_FETCH_COMMITS`] commits of the
    /// haves, and no have (nor a tag it peels through) is among the bitmapped objects. The
    /// bitmap would then read everything the haves reach outside it (git/git, a fetch of one
    /// day 100 days of pushes past the bitmap: 11,624 objects read for 62 sent).
    ///
    /// The walk is not the set difference the bitmap gives: it leaves out what the edge
    /// commits' and the haves' root trees hold, not what only older commits of the haves do
    /// (a file brought back to an old version). That is at most git's own answer: git 2.39
    /// takes its bitmap only when a have is in the bitmapped pack (`prepare_bitmap_walk`) and
    /// otherwise walks, leaving out the edge commits' trees only. With a bitmapped have git's
    /// answer is the set difference, and so is packd's (the bitmap). Wants of trees and blobs
    /// (through tags) go to the bitmap too: with no commit to send there is no edge, and the
    /// named tree may hold what only the haves' history does (git sends all of it).
    fn walk_is_cheaper(
        &self,
        index: &packd_reach::bitmap_walk::BitmapIndex,
        request: &FetchRequest,
        haves: &[ObjectId],
    ) -> bool {
        if haves.is_empty()
            || request.filter.is_some()
            || request.wants.iter().all(|w| index.contains(w))
            || haves.iter().any(|h| index.contains(h))
        {
            return false;
        }
        let walker = packd_reach::walk::Walker::new(&self.repo);
        let (Ok(wants), Ok(had)) = (
            walk::peel(&walker, &request.wants),
            walk::peel(&walker, haves),
        ) else {
            return false;
        };
        if wants
            .others
            .iter()
            .any(|(_, kind)| *kind != ObjectKind::Tag)
            || had.commits.iter().any(|h| index.contains(h))
            || had.others.iter().any(|(h, _)| index.contains(h))
        {
            return false;
        }
        walker
            .commits_close(&wants.commits, &had.commits, CLOSE_FETCH_COMMITS)
            .unwrap_or(false)
    }

    /// Whether `after` (objects sent whole after a pack's entries) is few and small enough to
    /// be read whole and compressed anew: at most [`MAX_AFTER_WHOLE`] objects of at most
    /// [`MAX_AFTER_WHOLE_BYTES`] together. Larger pushes (a large file) go object by object,
    /// whose entries are copied in windows. Every one must be in the repository: a missing
    /// object is an error now, before anything is sent.
    fn small_enough_after_whole(&self, after: &[ObjectId]) -> Result<bool, PackError> {
        if after.len() > MAX_AFTER_WHOLE {
            return Ok(false);
        }
        let mut bytes = 0u64;
        for id in after {
            let header = self.repo.objects().header(id)?.ok_or_else(|| missing(id))?;
            bytes = bytes.saturating_add(header.size);
            if bytes > MAX_AFTER_WHOLE_BYTES {
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// The bitmap's pack when `wanted` (`total` bits) is every object of it, the client takes
    /// offset deltas and the file starts with the header the stream must start with: then the
    /// pack file is the answer, byte for byte, and no per-object plan is needed (a mirror clone
    /// of a repository packed with `repack -adb`), but for objects stored elsewhere, which go
    /// after the pack's entries.
    fn whole_pack<'a>(
        &self,
        index: &'a packd_reach::bitmap_walk::BitmapIndex,
        request: &FetchRequest,
        wanted: &Bitmap,
        total: u64,
    ) -> Result<Option<&'a Arc<Pack>>, PackError> {
        let Some(pack) = index.single_pack() else {
            return Ok(None);
        };
        if !request.ofs_delta
            || total == 0
            || total != pack.len() as u64
            || wanted.last_set_bit() != Some(total - 1)
            || !crate::write::sends_as_is(pack)?
        {
            return Ok(None);
        }
        Ok(Some(pack))
    }

    /// The annotated tags include-tag adds: those pointing at what is sent (`wanted`, or among
    /// `outside`, the objects outside the bitmapped ones that are sent) which are neither sent
    /// already nor `had`. A tag reached through several refs (a tag of a tag and the tag itself)
    /// is added once: loose tags have no offset to deduplicate by.
    fn tags_to_add(
        &self,
        tag_refs: &[ListedRef],
        index: &packd_reach::bitmap_walk::BitmapIndex,
        wanted: &Bitmap,
        had: &Bitmap,
        outside: &IdSet,
    ) -> Result<Vec<ObjectId>, PackError> {
        let mut added = IdSet::default();
        let mut tags = Vec::new();
        for tag in self.tags_to_include(tag_refs, &|id| {
            Ok(match index.bit_of_id(id)? {
                Some(bit) => wanted.get(bit),
                None => outside.contains(id),
            })
        })? {
            let bit = index.bit_of_id(&tag)?;
            if bit.is_some_and(|b| had.get(b) || wanted.get(b))
                || outside.contains(&tag)
                || !added.insert(tag)
            {
                continue;
            }
            tags.push(tag);
        }
        Ok(tags)
    }

    /// Removes what the request's filter leaves out from `wanted` and from `outside` (objects
    /// outside the bitmapped objects). Objects the client named in its wants (and what wanted
    /// tags point at) stay.
    fn apply_filter(
        &self,
        index: &packd_reach::bitmap_walk::BitmapIndex,
        request: &FetchRequest,
        wanted: &mut Bitmap,
        outside: &mut Vec<(ObjectId, ObjectKind)>,
    ) -> Result<(), PackError> {
        let Some(filter) = &request.filter else {
            return Ok(());
        };
        // What the wants name, through tags too: a wanted tag of a blob sends the blob whatever
        // the filter (as git's rev-list treats objects it is given). Commits are never filtered.
        let walker = packd_reach::walk::Walker::new(&self.repo);
        let named: IdSet = walk::peel(&walker, &request.wants)?
            .others
            .into_iter()
            .map(|(id, _)| id)
            .collect();
        let mut named_bits = Vec::new();
        for id in &named {
            if let Some(bit) = index.bit_of_id(id)? {
                if wanted.get(bit) {
                    named_bits.push(bit);
                }
            }
        }
        let objects = self.repo.objects();
        match filter {
            Filter::BlobNone => wanted.and_not_assign(index.type_bitmap(ObjectKind::Blob)),
            Filter::TreeDepth(_) => {
                wanted.and_not_assign(index.type_bitmap(ObjectKind::Blob));
                wanted.and_not_assign(index.type_bitmap(ObjectKind::Tree));
            }
            Filter::BlobLimit(limit) => {
                let mut blobs = wanted.clone();
                blobs.and_assign(index.type_bitmap(ObjectKind::Blob));
                for bit in blobs.iter_ones() {
                    let Some((id, location)) = index.object_at(bit)? else {
                        continue;
                    };
                    if objects.header_at(&id, &location)?.size >= *limit {
                        wanted.clear(bit);
                    }
                }
            }
        }
        for bit in named_bits {
            wanted.set(bit);
        }
        // The same rules for the objects outside, one by one.
        let mut kept = Vec::with_capacity(outside.len());
        for (id, kind) in outside.drain(..) {
            let keep = named.contains(&id)
                || match (filter, kind) {
                    (_, ObjectKind::Commit | ObjectKind::Tag) => true,
                    (Filter::BlobNone, ObjectKind::Blob) => false,
                    (Filter::BlobNone, ObjectKind::Tree) => true,
                    (Filter::TreeDepth(_), _) => false,
                    (Filter::BlobLimit(_), ObjectKind::Tree) => true,
                    (Filter::BlobLimit(limit), ObjectKind::Blob) => {
                        let header = objects.header(&id)?.ok_or_else(|| missing(&id))?;
                        header.size < *limit
                    }
                };
            if keep {
                kept.push((id, kind));
            }
        }
        *outside = kept;
        Ok(())
    }

    /// Annotated tags (and tags of tags) among `tag_refs` (the refs under refs/tags/) whose
    /// target `sent` says is sent: include-tag sends them along.
    fn tags_to_include(
        &self,
        tag_refs: &[ListedRef],
        sent: &dyn Fn(&ObjectId) -> Result<bool, PackError>,
    ) -> Result<Vec<ObjectId>, PackError> {
        let walker = packd_reach::walk::Walker::new(&self.repo);
        let mut out = Vec::new();
        for r in tag_refs {
            // What `packed-refs` says spares reading the tag, unless its target is sent: then
            // the tags between the ref and its target (a tag of a tag) are read to send them.
            match r.peeled {
                Peeled::NotTag => continue,
                Peeled::Tag(target) if !sent(&target)? => continue,
                Peeled::Tag(_) => {}
                Peeled::Unknown => {
                    let header = self.repo.objects().header(&r.id)?;
                    if header.map(|h| h.kind) != Some(ObjectKind::Tag) {
                        continue;
                    }
                }
            }
            let mut chain = Vec::new();
            let (target, _) = walker.peel(r.id, &mut chain)?;
            if sent(&target)? {
                out.extend(chain);
            }
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `find_before` finds exactly what a search of the items before the position finds.
    #[test]
    fn find_before_agrees_with_a_plain_search() {
        let mut items = Vec::new();
        for rank in 0..3u32 {
            for k in 0..300u64 {
                items.push(Item {
                    rank,
                    offset: 12 + k * 7 + (k % 5),
                });
            }
        }
        let plan = Planned {
            items,
            ..Planned::default()
        };
        let n = plan.items.len();
        let mut probes: Vec<(u32, u64)> = plan.items.iter().map(|i| (i.rank, i.offset)).collect();
        probes.extend([(0, 0), (0, 13), (1, 5000), (3, 12), (2, 11)]);
        for before in [0, 1, 2, 3, 299, 300, 301, 512, n - 1, n, n + 5] {
            for &(rank, offset) in &probes {
                let plain = plan.items[..before.min(n)]
                    .iter()
                    .position(|i| (i.rank, i.offset) == (rank, offset));
                assert_eq!(
                    plan.find_before(rank, offset, before),
                    plain,
                    "({rank}, {offset}) before {before}"
                );
            }
        }
    }
}
