//! Appending to the bitmapped pack: a new pack made of the repository's bitmapped pack B as
//! it is, byte for byte, followed by every reachable object outside it, so that B's bitmaps
//! stay valid and a mirror clone stays one range of one pack, without re-planning, re-deltaing
//! or re-bitmapping B's objects.
//!
//! ```text
//! pack/pack-<P>.pack    "PACK", version 2, count N_B + N_new
//!                       B's entries, byte for byte (same offsets, same CRCs, from B's .idx)
//!                       the new objects' entries: commits, tags, trees, blobs in walk
//!                       order; an on-disk delta whose base is in B or already written is
//!                       copied (as an offset delta, into B's part too) when its chain
//!                       stays within `pack.depth` (50), anything else whole
//!                       SHA-1 trailer
//! pack/pack-<P>.rev     as any pack's (crate::pack_file)
//! pack/pack-<P>.bitmap  B's bitmap extended (packd_reach::bitmap::extend): B's entries as
//!                       they are, bitmaps for new commits (ref tips, the newest 100, one in
//!                       100 older) after them
//! pack/pack-<P>.idx     last: until it is published, readers see the repository as before
//! ```
//!
//! Steps: survey (B's bitmap counts the refs' objects, walking only the objects outside B,
//! as a fetch does: `BitmapIndex::difference_with_outside`), write P through
//! [`PackFileWriter`] (`copy_pack_body`, then the new objects), the new commits' bitmaps,
//! publish; then the objects of the other packs and the loose ones that nothing reaches go to
//! a cruft pack ([`crate::cruft`]) and, under the prune lock, B, the other packs (`.idx`
//! first) and the loose objects are removed, and a multi-pack-index (which names removed
//! packs) with it. Objects already in B that a pushed pack holds again (`index-pack
//! --fix-thin` copies thin bases) are written once: the walk never leaves B for them.
//!
//! With nothing outside B, B is kept unchanged (it already is the answer): only the other
//! packs and loose objects, all duplicates or unreachable, go as above.

use crate::lock;
use crate::pack_file::{compression_level, PackFileError, PackFileWriter};
use packd_odb::pack::Pack;
use packd_odb::{IdMap, IdSet, Location, ObjectId, ObjectKind, Repository};
use packd_reach::bitmap_walk::{BitmapIndex, WithOutside};
use packd_reach::ewah::Bitmap;
use packd_storage::Storage;
use std::collections::HashMap;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::SystemTime;

/// New commits that each get a bitmap, newest first by committer date (the must-region of
/// `packd_reach::bitmap::select`).
const NEWEST: usize = 100;
/// Past those, one new commit in this many gets one (the selection's narrowest window).
const SPACING: usize = 100;

/// What [`append_to_bitmapped`] did.
#[derive(Debug, Clone, Default)]
pub struct AppendOutcome {
    /// Objects appended after B's (0: B kept unchanged).
    pub appended: u64,
    /// Of them, entries copied from other packs (deltas or whole).
    pub reused: u64,
    /// Of them, deltas.
    pub deltas: u64,
    /// Packs removed (B itself when a new pack replaced it, the other packs).
    pub packs_removed: u64,
    /// Loose objects removed.
    pub loose_removed: u64,
    /// Bitmaps added for new commits.
    pub bitmaps_added: u32,
    /// Whether B was kept unchanged (nothing outside it is reachable).
    pub unchanged: bool,
    /// The pack holding the reachable objects now (`pack/pack-<checksum>.pack`).
    pub pack: String,
    /// The cruft pack written for unreachable objects of the removed packs, if any.
    pub cruft_pack: Option<String>,
    /// Unreachable objects kept in the cruft pack.
    pub unreachable_kept: u64,
    /// Unreachable objects dropped as expired.
    pub unreachable_dropped: u64,
}

/// Why appending failed.
#[derive(Debug, thiserror::Error)]
pub enum AppendError {
    /// The repository has no pack of its own with a `.bitmap` (not `.keep`, not cruft).
    #[error("no bitmapped pack to append to")]
    NoBitmappedPack,
    /// B's bitmap cannot count the refs' objects (an object missing, or B not closed).
    #[error("{0}: its bitmap cannot count the reachable objects")]
    CannotCount(String),
    /// Reading objects or refs failed.
    #[error(transparent)]
    Odb(#[from] packd_odb::Error),
    /// The storage layer failed.
    #[error(transparent)]
    Storage(#[from] packd_storage::StorageError),
    /// Writing the pack (or publishing its files) failed.
    #[error(transparent)]
    Pack(#[from] PackFileError),
    /// Writing the cruft pack or removing the old packs failed.
    #[error(transparent)]
    Cruft(#[from] crate::cruft::CruftError),
    /// Extending the bitmap failed.
    #[error("extending the bitmap: {0}")]
    Bitmap(String),
    /// The repository has no objects storage of its own.
    #[error("no objects directory of its own")]
    NoStorage,
}

/// What the refs reach, counted with B's bitmap: [`survey`]'s answer, which
/// [`append_surveyed`] writes from.
pub struct Survey {
    storage: Arc<dyn Storage>,
    base: Arc<Pack>,
    index: BitmapIndex,
    found: WithOutside,
    tips: Vec<ObjectId>,
}

impl std::fmt::Debug for Survey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Survey")
            .field("base", &self.base.name())
            .field("outside", &self.found.outside.len())
            .finish()
    }
}

impl Survey {
    /// The bitmapped pack B.
    pub fn base(&self) -> &Arc<Pack> {
        &self.base
    }

    /// Whether the refs reach every object of B (then B is what a full repack would keep).
    pub fn base_all_reachable(&self) -> bool {
        self.found.wanted.count_ones() == self.base.len() as u64
    }

    /// Every commit the refs reach: B's (when [`Survey::base_all_reachable`]) and those
    /// outside it.
    pub fn reachable_commits(&self) -> Vec<ObjectId> {
        let mut bits = self.index.type_bitmap(ObjectKind::Commit).clone();
        bits.and_assign(&self.found.wanted);
        let mut out = self.index.ids(&bits);
        out.extend(
            self.found
                .outside
                .iter()
                .filter(|(_, k)| *k == ObjectKind::Commit)
                .map(|(id, _)| *id),
        );
        out
    }

    /// Reachable objects outside B (what appending writes).
    pub fn outside(&self) -> usize {
        self.found.outside.len()
    }
}

/// The repository's own packs that a full repack may replace: not `.keep`.
pub(crate) fn own_packs(repo: &Repository) -> Vec<Arc<Pack>> {
    let own = repo.objects().own_storage();
    repo.objects()
        .packs_with_storage()
        .filter(|(s, _)| own.is_some_and(|o| Arc::ptr_eq(o, s)))
        .filter(|(s, p)| !s.exists(&p.name().replace(".pack", ".keep")))
        .map(|(_, p)| p.clone())
        .collect()
}

/// Every ref tip (`HEAD` and `refs/*`), sorted, without repeats.
fn ref_tips(repo: &Repository) -> Result<Vec<ObjectId>, AppendError> {
    let refs = repo.refs();
    let mut tips = Vec::new();
    if let Some(head) = refs.resolve_full("HEAD")? {
        tips.push(head);
    }
    tips.extend(refs.list("refs/")?.into_iter().map(|(_, id)| id));
    tips.sort_unstable();
    tips.dedup();
    Ok(tips)
}

/// Picks B (the first own pack with a `.bitmap`, neither `.keep` nor cruft) and counts what
/// the refs reach with its bitmap.
pub fn survey(repo: &Repository) -> Result<Survey, AppendError> {
    let storage = repo
        .objects()
        .own_storage()
        .cloned()
        .ok_or(AppendError::NoStorage)?;
    let base = own_packs(repo)
        .into_iter()
        .find(|p| {
            let stem = p.name().trim_end_matches(".pack");
            storage.exists(&format!("{stem}.bitmap")) && !storage.exists(&format!("{stem}.mtimes"))
        })
        .ok_or(AppendError::NoBitmappedPack)?;
    let index = BitmapIndex::for_pack(&storage, &base)?
        .ok_or_else(|| AppendError::CannotCount(base.name().to_string()))?;
    let tips = ref_tips(repo)?;
    let never = AtomicBool::new(false);
    let found = index
        .difference_with_outside(repo, &tips, &[], &IdMap::default(), &never)?
        .ok_or_else(|| AppendError::CannotCount(base.name().to_string()))?;
    tracing::debug!(
        "append: {} reaches {} of its {} objects, {} outside it",
        base.name(),
        found.wanted.count_ones(),
        base.len(),
        found.outside.len()
    );
    Ok(Survey {
        storage,
        base,
        index,
        found,
        tips,
    })
}

/// Appends every reachable object outside the bitmapped pack B to a copy of B, then removes
/// what the result makes redundant (see the module documentation). `held` is the repository's
/// maintenance lock ([`lock::try_maintenance`]), which the caller holds throughout.
pub fn append_to_bitmapped(
    repo: &Repository,
    held: &lock::Held,
) -> Result<AppendOutcome, AppendError> {
    let surveyed = survey(repo)?;
    append_surveyed(repo, held, surveyed, &|| Ok(()))
}

/// [`append_to_bitmapped`] from a [`survey`] already made; `before_index` runs just before the
/// new pack's `.idx` is published (tests inject a failure there: an error leaves the
/// repository as it was, for readers).
pub fn append_surveyed(
    repo: &Repository,
    _held: &lock::Held,
    surveyed: Survey,
    before_index: &dyn Fn() -> Result<(), PackFileError>,
) -> Result<AppendOutcome, AppendError> {
    let Survey {
        storage,
        base,
        index,
        found,
        tips,
    } = surveyed;
    let mut outcome = AppendOutcome::default();
    let old = own_packs(repo);
    let (pack_name, new_ids) = if found.outside.is_empty() {
        outcome.unchanged = true;
        (base.name().to_string(), IdSet::default())
    } else {
        let written = write_appended(repo, &storage, &base, &index, &found, &tips, before_index)?;
        outcome.appended = written.appended;
        outcome.reused = written.reused;
        outcome.deltas = written.deltas;
        outcome.bitmaps_added = written.bitmaps;
        (written.name, written.ids)
    };
    outcome.pack = pack_name.clone();
    drop(found);
    drop(index);

    // What the result holds: B's objects and the new ones.
    let reachable = |id: &ObjectId| base.index().find(id).is_some() || new_ids.contains(id);
    let cruft_options = crate::cruft::CruftOptions::from_config(repo, SystemTime::now())?;
    // B's objects are all in the result (its bytes are the result's first entries): only
    // the other packs can hold objects nothing reaches, so only they are looked through
    // (on git/git, 841k lookups fewer: 0.8 s of an append's 3 s).
    let others: Vec<Arc<Pack>> = old
        .iter()
        .filter(|p| p.name() != base.name())
        .cloned()
        .collect();
    let cruft = crate::cruft::write_cruft_pack(repo, &reachable, &others, &cruft_options)?;
    outcome.unreachable_kept = cruft.kept.len() as u64;
    outcome.unreachable_dropped = cruft.dropped.len() as u64;
    outcome.cruft_pack = cruft.pack.as_ref().map(|p| p.name.clone());
    let mut keep: Vec<&str> = vec![pack_name.as_str()];
    if let Some(c) = &cruft.pack {
        keep.push(c.name.as_str());
    }
    let pruned = crate::cruft::prune(repo, &reachable, &cruft, &old, &keep)?;
    outcome.packs_removed = old.iter().filter(|p| !keep.contains(&p.name())).count() as u64;
    outcome.loose_removed = pruned.loose as u64;
    if outcome.packs_removed > 0 {
        remove_midx(&*storage)?;
    }
    tracing::debug!("append: {outcome:?}");
    Ok(outcome)
}

/// Removes the multi-pack-index and its bitmap and `.rev` (they name packs just removed).
fn remove_midx(storage: &dyn Storage) -> Result<(), AppendError> {
    storage.delete("pack/multi-pack-index")?;
    for name in storage.list("pack")? {
        if name.starts_with("multi-pack-index-") {
            storage.delete(&format!("pack/{name}"))?;
        }
    }
    Ok(())
}

/// The pack [`write_appended`] published.
struct Appended {
    name: String,
    ids: IdSet,
    appended: u64,
    reused: u64,
    deltas: u64,
    bitmaps: u32,
}

/// Not written yet.
const UNWRITTEN: u32 = u32::MAX;

fn kind_rank(kind: ObjectKind) -> u8 {
    match kind {
        ObjectKind::Commit => 0,
        ObjectKind::Tag => 1,
        ObjectKind::Tree => 2,
        ObjectKind::Blob => 3,
    }
}

/// Writes and publishes P: B's body, then the objects outside B, its `.rev`, its extended
/// bitmap, its `.idx`.
fn write_appended(
    repo: &Repository,
    storage: &Arc<dyn Storage>,
    base: &Arc<Pack>,
    index: &BitmapIndex,
    found: &WithOutside,
    tips: &[ObjectId],
    before_index: &dyn Fn() -> Result<(), PackFileError>,
) -> Result<Appended, AppendError> {
    let n_base = base.len();
    let mut order: Vec<usize> = (0..found.outside.len()).collect();
    order.sort_by_key(|&i| kind_rank(found.outside[i].1));
    let mut slot: IdMap<u32> = IdMap::default();
    slot.reserve(order.len());
    for (i, (id, _)) in found.outside.iter().enumerate() {
        slot.insert(*id, i as u32);
    }
    let total = u32::try_from(n_base as u64 + found.outside.len() as u64)
        .map_err(|_| PackFileError::Misuse("more than 2^32 objects".into()))?;
    let level = ["pack.compression", "core.compression"]
        .iter()
        .find_map(|k| repo.config().get(k).and_then(packd_odb::config::parse_int))
        .unwrap_or(-1);
    let mut writer = PackFileWriter::new(
        storage.clone(),
        repo.objects().hash_kind(),
        total,
        compression_level(level as i64),
    )?;
    let started = std::time::Instant::now();
    writer.copy_pack_body(base)?;
    tracing::debug!(
        "append: {} copied in {:.2?}",
        base.name(),
        started.elapsed()
    );
    let mut w = Writing {
        repo,
        index,
        found,
        slot: &slot,
        entry_of: vec![UNWRITTEN; found.outside.len()],
        kinds: Vec::with_capacity(found.outside.len()),
        reused: 0,
        deltas: 0,
        max_depth: max_depth(repo),
        depth_of: vec![0; found.outside.len()],
        depth_in_b: HashMap::new(),
    };
    for &i in &order {
        w.write_family(i as u32, &mut writer)?;
    }
    tracing::debug!("append: new objects written at {:.2?}", started.elapsed());
    // The new commits' bitmaps, in P's pack order.
    let entries = new_commit_bitmaps(repo, index, found, tips, &slot, &w.entry_of)?;
    tracing::debug!("append: new bitmaps built at {:.2?}", started.elapsed());
    let kinds = std::mem::take(&mut w.kinds);
    let (reused, deltas) = (w.reused, w.deltas);
    let bitmaps = entries.len() as u32;
    let old_bitmap = index.pack_bitmap();
    let published = std::cell::RefCell::new(None::<String>);
    let finished = writer.finish_with(|f| {
        *published.borrow_mut() = Some(f.base_name.to_string());
        let new_ids: Vec<ObjectId> = f.by_id.iter().map(|e| e.id).collect();
        let bytes = packd_reach::bitmap::extend::extend(&packd_reach::bitmap::extend::Extension {
            old: old_bitmap,
            old_index: base.index(),
            new_ids: &new_ids,
            pack_checksum: f.checksum,
            appended: &kinds,
            new_entries: &entries,
        })
        .map_err(|e| PackFileError::Misuse(format!("extending the bitmap: {e}")))?;
        drop(new_ids);
        crate::pack_file::publish_bytes(&**storage, &format!("{}.bitmap", f.base_name), &bytes)?;
        before_index()
    });
    let written = match finished {
        Ok(w) => w,
        Err(e) => {
            // Readers never saw P (no `.idx`): its other files go too, rather than waiting
            // for the stale-file cleanup.
            if let Some(base) = published.borrow().as_deref() {
                remove_unindexed(&**storage, base);
            }
            return Err(e.into());
        }
    };
    tracing::debug!(
        "append: {} written at {:.2?}: {} objects of {} and {} more ({reused} reused, \
         {deltas} deltas), {bitmaps} bitmaps added",
        written.name,
        started.elapsed(),
        n_base,
        base.name(),
        found.outside.len()
    );
    Ok(Appended {
        name: written.name,
        ids: found.outside.iter().map(|(id, _)| *id).collect(),
        appended: found.outside.len() as u64,
        reused,
        deltas,
        bitmaps,
    })
}

/// Removes the files of pack `base` (`pack/pack-<checksum>`) published before a failure,
/// unless its `.idx` exists (then it is a pack readers use). Errors are logged: a file left
/// is an orphan the stale-file cleanup removes.
fn remove_unindexed(storage: &dyn Storage, base: &str) {
    if storage.exists(&format!("{base}.idx")) {
        return;
    }
    for ext in ["bitmap", "rev", "pack"] {
        if let Err(e) = storage.delete(&format!("{base}.{ext}")) {
            tracing::warn!("{base}.{ext}: {e}");
        }
    }
}

/// git's `pack.depth` (50 when unset), the longest delta chain an append may make: a copied
/// delta is one deeper than its base, which may itself end a chain of B.
fn max_depth(repo: &Repository) -> u32 {
    repo.config()
        .get("pack.depth")
        .and_then(packd_odb::config::parse_int)
        .map_or(50, |d| d.clamp(0, 4095) as u32)
}

/// A chain of B followed this far is taken as too deep (a loop of reference deltas).
const LONGEST_WALK: usize = 1 << 16;

/// The state of writing the new objects.
struct Writing<'a> {
    repo: &'a Repository,
    index: &'a BitmapIndex,
    found: &'a WithOutside,
    /// Outside object id -> its slot in `found.outside`.
    slot: &'a IdMap<u32>,
    /// By slot: its entry in the new pack.
    entry_of: Vec<u32>,
    /// The kinds of the new entries, in pack order.
    kinds: Vec<ObjectKind>,
    reused: u64,
    deltas: u64,
    /// The longest chain a copied delta may end ([`max_depth`]).
    max_depth: u32,
    /// By slot: the depth of its new entry's chain (0: whole).
    depth_of: Vec<u32>,
    /// By bit: the depth of B's entries looked at, as B stores them.
    depth_in_b: HashMap<u64, u32>,
}

impl Writing<'_> {
    /// The depth of the chain B's entry `bit` ends (0: whole), following its bases in B.
    /// `u32::MAX` for a chain that does not end (a loop) within [`LONGEST_WALK`] links.
    fn depth_in_b(&mut self, bit: u64) -> Result<u32, AppendError> {
        let mut chain = Vec::new();
        let mut at = bit;
        let mut depth = loop {
            if let Some(&d) = self.depth_in_b.get(&at) {
                break d;
            }
            if chain.len() >= LONGEST_WALK {
                return Ok(u32::MAX);
            }
            let Some((_, loc)) = self.index.object_at(at)? else {
                break 0;
            };
            let base = match self.repo.objects().delta_base(&loc)? {
                Some(base_id) => self.index.bit_of_id(&base_id)?,
                None => None,
            };
            match base {
                Some(b) => {
                    chain.push(at);
                    at = b;
                }
                None => {
                    self.depth_in_b.insert(at, 0);
                    break 0;
                }
            }
        };
        for &link in chain.iter().rev() {
            depth = depth.saturating_add(1);
            self.depth_in_b.insert(link, depth);
        }
        Ok(depth)
    }

    /// Writes slot `i`, after the bases its stored delta needs that are not written yet.
    fn write_family(&mut self, i: u32, writer: &mut PackFileWriter) -> Result<(), AppendError> {
        let mut stack = vec![i];
        while let Some(&top) = stack.last() {
            if self.entry_of[top as usize] != UNWRITTEN {
                stack.pop();
                continue;
            }
            let (id, kind) = self.found.outside[top as usize];
            let loc = self.repo.objects().locate(&id)?;
            let mut reuse = None;
            let mut depth = 0;
            if let Some(loc @ Location::Packed { .. }) = &loc {
                match self.repo.objects().delta_base(loc)? {
                    None => reuse = Some(None),
                    Some(base_id) => {
                        // A delta deeper than `max_depth` once copied is written whole.
                        if let Some(bit) = self.index.bit_of_id(&base_id)? {
                            let base_depth = self.depth_in_b(bit)?;
                            if base_depth < self.max_depth {
                                reuse = Some(Some(bit as u32));
                                depth = base_depth + 1;
                            }
                        } else if let Some(&s) = self.slot.get(&base_id) {
                            let e = self.entry_of[s as usize];
                            if e != UNWRITTEN {
                                if self.depth_of[s as usize] < self.max_depth {
                                    reuse = Some(Some(e));
                                    depth = self.depth_of[s as usize] + 1;
                                }
                            } else if !stack.contains(&s) {
                                stack.push(s);
                                continue;
                            }
                            // A loop of stored deltas: this one is written whole.
                        }
                    }
                }
            }
            let entry = match (reuse, &loc) {
                (Some(base), Some(Location::Packed { pack, offset })) => {
                    self.reused += 1;
                    if base.is_some() {
                        self.deltas += 1;
                    }
                    writer.reuse_entry(id, pack, *offset, base)?
                }
                _ => {
                    let object = self.repo.objects().read(&id)?.ok_or_else(|| {
                        packd_odb::Error::BadName(format!("object {id} is missing"))
                    })?;
                    writer.whole(id, object.kind, &object.data)?
                }
            };
            self.entry_of[top as usize] = entry;
            self.depth_of[top as usize] = depth;
            self.kinds.push(kind);
            stack.pop();
        }
        Ok(())
    }
}

/// Bitmaps for commits among the new objects: ref tips, the [`NEWEST`] newest by committer
/// date, one in [`SPACING`] older. Built as git builds them, parents first: a new commit's
/// bitmap is its parents' ORed (a parent in B: B's bitmaps and a fill-in walk, once per such
/// parent), its own bit, and a walk of its tree that skips every object whose bit is set
/// already (a set bit's objects are all set: bitmaps are closed), so that each commit costs
/// only the trees it changed. Bits are P's pack order: B's objects keep their positions, new
/// ones are at `entry_of`. A commit's bitmap is dropped once its children have theirs, unless
/// it is one of those chosen.
fn new_commit_bitmaps(
    repo: &Repository,
    index: &BitmapIndex,
    found: &WithOutside,
    tips: &[ObjectId],
    slot: &IdMap<u32>,
    entry_of: &[u32],
) -> Result<Vec<(ObjectId, Bitmap)>, AppendError> {
    // The new commits: (id, tree, parents, time).
    let mut commits: Vec<(ObjectId, ObjectId, Vec<ObjectId>, i64)> = Vec::new();
    let mut number: IdMap<u32> = IdMap::default();
    for (id, kind) in &found.outside {
        if *kind != ObjectKind::Commit {
            continue;
        }
        let object = repo
            .objects()
            .read(id)?
            .ok_or_else(|| packd_odb::Error::BadName(format!("object {id} is missing")))?;
        let info = packd_odb::parse::parse_commit(id, &object.data)?;
        number.insert(*id, commits.len() as u32);
        commits.push((*id, info.tree, info.parents, info.time));
    }
    let mut by_date: Vec<u32> = (0..commits.len() as u32).collect();
    by_date.sort_by(|&a, &b| {
        let (a, b) = (&commits[a as usize], &commits[b as usize]);
        b.3.cmp(&a.3).then(a.0.cmp(&b.0))
    });
    let mut chosen = vec![false; commits.len()];
    for (i, &c) in by_date.iter().enumerate() {
        let id = &commits[c as usize].0;
        chosen[c as usize] =
            i < NEWEST || (i - NEWEST).is_multiple_of(SPACING) || tips.binary_search(id).is_ok();
    }
    drop(by_date);

    // Parents first (Kahn's order over the new commits).
    let mut children: Vec<Vec<u32>> = vec![Vec::new(); commits.len()];
    let mut waiting = vec![0u32; commits.len()];
    for (c, (_, _, parents, _)) in commits.iter().enumerate() {
        for p in parents {
            if let Some(&pn) = number.get(p) {
                children[pn as usize].push(c as u32);
                waiting[c] += 1;
            }
        }
    }
    let mut ready: Vec<u32> = (0..commits.len() as u32)
        .filter(|&c| waiting[c as usize] == 0)
        .collect();
    // Each commit's tree walk asks again for the entries its tree shares with its parents'
    // (every one of a root tree's): the answers are kept, a hash lookup instead of two binary
    // searches of B's index (on git/git with 100 days appended: 0.5 s of CPU fewer).
    let mut known: IdMap<u64> = IdMap::default();
    let mut position = |id: &ObjectId| -> Result<u64, AppendError> {
        if let Some(&bit) = known.get(id) {
            return Ok(bit);
        }
        let bit = match index.bit_of_id(id)? {
            Some(bit) => bit,
            None => match slot.get(id).map(|&s| entry_of[s as usize]) {
                Some(e) if e != UNWRITTEN => e as u64,
                _ => {
                    return Err(AppendError::Bitmap(format!(
                        "{id} is reachable but not in the new pack"
                    )))
                }
            },
        };
        known.insert(*id, bit);
        Ok(bit)
    };
    let never = AtomicBool::new(false);
    let mut base_parents: IdMap<Arc<Bitmap>> = IdMap::default();
    let mut built: Vec<Option<Arc<Bitmap>>> = vec![None; commits.len()];
    let mut pending_children: Vec<usize> = children.iter().map(Vec::len).collect();
    let mut out = Vec::new();
    let mut done = 0;
    while let Some(c) = ready.pop() {
        done += 1;
        let (id, tree, parents, _) = &commits[c as usize];
        let mut bits = Bitmap::new();
        for p in parents {
            if let Some(&pn) = number.get(p) {
                let parent = built[pn as usize].clone().ok_or_else(|| {
                    AppendError::Bitmap(format!("{id}: its parent {p} has no bitmap yet"))
                })?;
                bits.or_assign(&parent);
                pending_children[pn as usize] -= 1;
                if pending_children[pn as usize] == 0 && !chosen[pn as usize] {
                    built[pn as usize] = None;
                }
            } else {
                let parent = match base_parents.get(p) {
                    Some(b) => b.clone(),
                    None => {
                        let reached = index
                            .difference_with_outside(repo, &[*p], &[], &IdMap::default(), &never)?
                            .ok_or_else(|| {
                                AppendError::CannotCount(format!("the parent {p} of {id}"))
                            })?;
                        if !reached.outside.is_empty() {
                            return Err(AppendError::Bitmap(format!(
                                "{p} is in the bitmapped pack but reaches objects outside it"
                            )));
                        }
                        let b = Arc::new(reached.wanted);
                        base_parents.insert(*p, b.clone());
                        b
                    }
                };
                bits.or_assign(&parent);
            }
        }
        bits.set(position(id)?);
        // The tree, skipping what is set already.
        let mut stack = vec![*tree];
        while let Some(t) = stack.pop() {
            let at = position(&t)?;
            if bits.get(at) {
                continue;
            }
            bits.set(at);
            let object = repo
                .objects()
                .read(&t)?
                .ok_or_else(|| packd_odb::Error::BadName(format!("tree {t} is missing")))?;
            for entry in packd_odb::parse::tree_entries(&t, &object.data) {
                let (mode, _, child) = entry?;
                match mode & 0o170000 {
                    0o160000 => {}
                    0o040000 => stack.push(child),
                    _ => {
                        let at = position(&child)?;
                        bits.set(at);
                    }
                }
            }
        }
        let bits = Arc::new(bits);
        if chosen[c as usize] {
            out.push((*id, bits.clone()));
        }
        if pending_children[c as usize] > 0 {
            built[c as usize] = Some(bits);
        }
        for &child in &children[c as usize] {
            waiting[child as usize] -= 1;
            if waiting[child as usize] == 0 {
                ready.push(child);
            }
        }
    }
    if done != commits.len() {
        return Err(AppendError::Bitmap("the new commits' parents loop".into()));
    }
    drop(built);
    // Parents before children (the order built): a later entry XORs with an earlier one.
    Ok(out
        .into_iter()
        .map(|(id, b)| (id, Arc::try_unwrap(b).unwrap_or_else(|b| (*b).clone())))
        .collect())
}
