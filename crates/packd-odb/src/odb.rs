//! The object database: every place a repository keeps objects, behind one lookup.
//!
//! A repository's objects live in its `objects` directory (packs, a multi-pack-index, loose files)
//! and in the directories its `objects/info/alternates` names, recursively. Lookups try each
//! directory in turn: its multi-pack-index, then packs the multi-pack-index does not cover, then
//! its loose objects. All bytes are read through [`packd_storage::Storage`].

use crate::cache::{CacheStats, DeltaBaseCache};
use crate::hash::{HashKind, ObjectId, Prefix};
use crate::loose::LooseStore;
use crate::pack::data::EntryKind;
use crate::pack::multi_index::MultiPackIndex;
use crate::pack::Pack;
use crate::{Error, Object, ObjectHeader, Result};
use bytes::Bytes;
use packd_storage::{LocalStorage, Storage};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// git stops following alternates this deep; so does packd.
const MAX_ALTERNATE_DEPTH: usize = 5;

/// The default delta base cache budget, as git's `core.deltaBaseCacheLimit`.
pub const DEFAULT_CACHE_BUDGET: u64 = 96 << 20;

/// The delta base cache budget of each repository a server opens, unless its
/// `core.deltaBaseCacheLimit` or `--cache-size` says otherwise. A mirror clone of git/git (a
/// fill-in walk over 30,000 trees, which keeps every link of its delta chains: see
/// `Pack::decode_with_base`) cost a fresh server 0.804-0.807 s of CPU with 8 MiB against
/// 0.811-0.835 s with 16 MiB, and the server peaked at 80 MB against 92-93 MB (two and three
/// runs after a cold one, on the project's 2-core machine).
pub const SERVING_CACHE_BUDGET: u64 = 8 << 20;

/// The resident pages each mapped pack file may keep in a server (see
/// `LocalStorage::with_map_budget`): a mirror clone of git/git kept 208 MB of its pack mapped.
pub const SERVING_MAP_BUDGET: u64 = 16 << 20;

/// How to open an object database.
#[derive(Debug, Clone)]
pub struct OpenOptions {
    /// The delta base cache budget in bytes; 0 disables the cache.
    pub cache_budget: u64,
    /// The repository's hash function.
    pub hash: HashKind,
    /// Resident pages each mapped file may keep, in bytes; `None`: no bound.
    pub map_budget: Option<u64>,
}

impl Default for OpenOptions {
    fn default() -> Self {
        OpenOptions {
            cache_budget: DEFAULT_CACHE_BUDGET,
            hash: HashKind::Sha1,
            map_budget: None,
        }
    }
}

/// One objects directory.
#[derive(Debug)]
struct Source {
    /// Where this directory's files are read from.
    storage: Arc<dyn Storage>,
    packs: Vec<Arc<Pack>>,
    /// The multi-pack-index and, for each of its pack numbers, the position in `packs`.
    midx: Option<(Arc<MultiPackIndex>, Vec<usize>)>,
    /// Positions in `packs` of the packs the multi-pack-index does not cover.
    outside_midx: Vec<usize>,
    loose: LooseStore,
}

/// Where an object is stored.
#[derive(Debug, Clone)]
pub enum Location {
    /// An entry of a pack.
    Packed {
        /// The pack.
        pack: Arc<Pack>,
        /// The entry's offset in it.
        offset: u64,
    },
    /// A loose file in the `n`th objects directory.
    Loose(usize),
}

/// What an abbreviated id names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PrefixMatch {
    /// Exactly one object.
    Unique(ObjectId),
    /// More than one object.
    Ambiguous,
    /// No object.
    None,
}

/// The order of [`ObjectDb::all_ids`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IdOrder {
    /// Sorted by id, each once.
    Sorted,
    /// Pack by pack in storage order, then loose objects, each once: the cheapest order to read.
    Storage,
}

/// All objects of a repository.
#[derive(Debug)]
pub struct ObjectDb {
    sources: Vec<Source>,
    cache: DeltaBaseCache,
    hash: HashKind,
}

impl ObjectDb {
    /// Opens the objects directory `objects_dir` on the local disk and its alternates.
    pub fn open(objects_dir: &Path, options: &OpenOptions) -> Result<ObjectDb> {
        let mut dirs = Vec::new();
        collect_alternates(objects_dir, 0, &mut dirs)?;
        let storages: Vec<Arc<dyn Storage>> = dirs
            .into_iter()
            .map(|d| {
                let storage = match options.map_budget {
                    Some(bytes) => LocalStorage::new(d).with_map_budget(bytes),
                    None => LocalStorage::new(d),
                };
                Arc::new(storage) as Arc<dyn Storage>
            })
            .collect();
        ObjectDb::from_storages(storages, options)
    }

    /// Opens objects directories given as storages, first one first.
    pub fn from_storages(
        storages: Vec<Arc<dyn Storage>>,
        options: &OpenOptions,
    ) -> Result<ObjectDb> {
        let mut next_pack_id = 0u32;
        let mut sources = Vec::new();
        for storage in storages {
            sources.push(open_source(storage, &mut next_pack_id, options.hash)?);
        }
        let (objects, bytes) = sources
            .iter()
            .flat_map(|s| s.packs.iter())
            .fold((0u64, 0u64), |(o, b), p| {
                (o + p.len() as u64, b + p.data_len())
            });
        let entries = DeltaBaseCache::entries_for(options.cache_budget, objects, bytes);
        Ok(ObjectDb {
            sources,
            cache: DeltaBaseCache::new(options.cache_budget, entries),
            hash: options.hash,
        })
    }

    /// The repository's hash function.
    pub fn hash_kind(&self) -> HashKind {
        self.hash
    }

    /// Every pack of every objects directory.
    pub fn packs(&self) -> impl Iterator<Item = &Arc<Pack>> {
        self.sources.iter().flat_map(|s| s.packs.iter())
    }

    /// The multi-pack-index of the repository's own objects directory, if it has one, with the
    /// storage its files are read from and its packs in its pack-number order.
    #[allow(clippy::type_complexity)]
    pub fn multi_pack_index(
        &self,
    ) -> Option<(&Arc<dyn Storage>, &Arc<MultiPackIndex>, Vec<Arc<Pack>>)> {
        let source = self.sources.first()?;
        let (midx, map) = source.midx.as_ref()?;
        let packs = map.iter().map(|&p| source.packs[p].clone()).collect();
        Some((&source.storage, midx, packs))
    }

    /// The storage of the repository's own objects directory (not its alternates'), where its
    /// `info/` files (the commit-graph) live.
    pub fn own_storage(&self) -> Option<&Arc<dyn Storage>> {
        self.sources.first().map(|s| &s.storage)
    }

    /// Every pack with the storage it is read from (where its `.bitmap` or `.rev` live too).
    pub fn packs_with_storage(&self) -> impl Iterator<Item = (&Arc<dyn Storage>, &Arc<Pack>)> {
        self.sources
            .iter()
            .flat_map(|s| s.packs.iter().map(move |p| (&s.storage, p)))
    }

    /// The delta base cache's counters.
    pub fn cache_stats(&self) -> CacheStats {
        self.cache.stats()
    }

    /// The delta base cache shared by all packs.
    pub fn cache(&self) -> &DeltaBaseCache {
        &self.cache
    }

    /// Where `id` is stored, if anywhere.
    pub fn locate(&self, id: &ObjectId) -> Result<Option<Location>> {
        if let Some(found) = self.locate_packed(id)? {
            return Ok(Some(found));
        }
        for (n, source) in self.sources.iter().enumerate() {
            if source.loose.contains(id) {
                return Ok(Some(Location::Loose(n)));
            }
        }
        Ok(None)
    }

    /// Where `id` is stored in a pack, if it is: lookups in indexes already in memory, no file
    /// system access (loose objects cost a `stat` each; see [`crate::existence`]).
    pub fn locate_packed(&self, id: &ObjectId) -> Result<Option<Location>> {
        for source in &self.sources {
            if let Some((midx, map)) = &source.midx {
                if let Some(i) = midx.find(id) {
                    let (pack, offset) = midx.location(i)?;
                    return Ok(Some(Location::Packed {
                        pack: source.packs[map[pack as usize]].clone(),
                        offset,
                    }));
                }
            }
            for &p in &source.outside_midx {
                let pack = &source.packs[p];
                if let Some(i) = pack.index().find(id) {
                    return Ok(Some(Location::Packed {
                        pack: pack.clone(),
                        offset: pack.index().offset(i)?,
                    }));
                }
            }
        }
        Ok(None)
    }

    /// Whether `id` is in a pack, for a process making few lookups: as
    /// [`ObjectDb::locate_packed`], but the ids of large pack indexes are read with a `pread`
    /// each ([`crate::pack::index::PackIndex::find_by_read`]) rather than faulted in, and no
    /// offset is looked up.
    pub fn contains_packed_by_read(&self, id: &ObjectId) -> bool {
        self.sources.iter().any(|source| {
            source
                .midx
                .as_ref()
                .is_some_and(|(midx, _)| midx.find(id).is_some())
                || source
                    .outside_midx
                    .iter()
                    .any(|&p| source.packs[p].index().find_by_read(id).is_some())
        })
    }

    /// For each objects directory, which of its fan-out directories exist (see
    /// [`LooseStore::fanout_dirs`]), for [`ObjectDb::contains_loose_in`].
    pub fn loose_fanouts(&self) -> Result<Vec<[bool; 256]>> {
        self.sources.iter().map(|s| s.loose.fanout_dirs()).collect()
    }

    /// Whether `id` is stored loose in one of the objects directories, with a `stat` only in
    /// those where the id's fan-out directory exists according to `fanouts` (from [`ObjectDb::loose_fanouts`]).
    pub fn contains_loose_in(&self, id: &ObjectId, fanouts: &[[bool; 256]]) -> bool {
        let first = id.as_bytes()[0] as usize;
        self.sources
            .iter()
            .enumerate()
            .any(|(n, s)| fanouts.get(n).is_none_or(|f| f[first]) && s.loose.contains(id))
    }

    /// The ids of the loose objects whose first byte is `first` (one fan-out directory of each
    /// objects directory).
    pub fn loose_ids_with_first_byte(&self, first: u8) -> Result<Vec<ObjectId>> {
        let mut ids = Vec::new();
        for source in &self.sources {
            source.loose.ids_with_first_byte(first, &mut ids)?;
        }
        Ok(ids)
    }

    /// The ids of every loose object, listing each objects directory's 256 fan-out directories.
    pub fn loose_ids(&self) -> Result<Vec<ObjectId>> {
        let mut ids = Vec::new();
        for source in &self.sources {
            source.loose.all_ids(&mut ids)?;
        }
        Ok(ids)
    }

    /// Whether the object exists.
    pub fn contains(&self, id: &ObjectId) -> Result<bool> {
        Ok(self.locate(id)?.is_some())
    }

    /// The object's kind and size without inflating its content.
    pub fn header(&self, id: &ObjectId) -> Result<Option<ObjectHeader>> {
        match self.locate(id)? {
            None => Ok(None),
            Some(loc) => self.header_at(id, &loc).map(Some),
        }
    }

    /// The kind and size of the object `id` stored at `loc`.
    pub fn header_at(&self, id: &ObjectId, loc: &Location) -> Result<ObjectHeader> {
        match loc {
            Location::Packed { pack, offset } => pack.object_header(*offset),
            Location::Loose(n) => self.sources[*n]
                .loose
                .header(id)?
                .ok_or_else(|| vanished(id)),
        }
    }

    /// The whole object.
    pub fn read(&self, id: &ObjectId) -> Result<Option<Object>> {
        match self.locate(id)? {
            None => Ok(None),
            Some(loc) => self.read_at(id, &loc).map(Some),
        }
    }

    /// The object `id` stored at `loc`.
    pub fn read_at(&self, id: &ObjectId, loc: &Location) -> Result<Object> {
        match loc {
            Location::Packed { pack, offset } => {
                let (kind, data) = pack.decode(*offset, &self.cache)?;
                Ok(Object { kind, data })
            }
            Location::Loose(n) => self.sources[*n].loose.read(id)?.ok_or_else(|| vanished(id)),
        }
    }

    /// [`ObjectDb::read_at`], also handing back the object's delta base when it was resolved
    /// from a delta: where the base is stored and its content (see
    /// [`Pack::decode_with_base`]). `None` for a loose object, an object stored whole, or one
    /// found whole in the delta base cache while its base is not. Meant for a tree walk: every
    /// link of the object's delta chain is kept in the cache, however far apart the reads are
    /// (see [`Pack::decode_with_base`]), which a reader of unrelated objects should not do.
    pub fn read_at_with_base(
        &self,
        id: &ObjectId,
        loc: &Location,
    ) -> Result<(Object, Option<(Location, Bytes)>)> {
        match loc {
            Location::Packed { pack, offset } => {
                let decoded = pack.decode_with_base(*offset, &self.cache)?;
                let base = decoded.base.map(|(offset, data)| {
                    (
                        Location::Packed {
                            pack: pack.clone(),
                            offset,
                        },
                        data,
                    )
                });
                Ok((
                    Object {
                        kind: decoded.kind,
                        data: decoded.data,
                    },
                    base,
                ))
            }
            Location::Loose(_) => Ok((self.read_at(id, loc)?, None)),
        }
    }

    /// The bytes the object takes on disk: its pack entry or its loose file.
    pub fn disk_size(&self, id: &ObjectId, loc: &Location) -> Result<u64> {
        match loc {
            Location::Packed { pack, offset } => {
                let end = pack.entry_end(*offset)?;
                end.checked_sub(*offset).ok_or_else(|| {
                    Error::corrupt(pack.data_name(), *offset, "the entry ends before it starts")
                })
            }
            Location::Loose(n) => self.sources[*n]
                .loose
                .disk_size(id)?
                .ok_or_else(|| vanished(id)),
        }
    }

    /// The id of the object this one is stored as a delta against, if it is a delta.
    pub fn delta_base(&self, loc: &Location) -> Result<Option<ObjectId>> {
        let Location::Packed { pack, offset } = loc else {
            return Ok(None);
        };
        let header = pack.entry_header(*offset)?;
        match header.kind {
            EntryKind::Base(_) => Ok(None),
            EntryKind::RefDelta { base } => Ok(Some(base)),
            EntryKind::OfsDelta { base_offset } => {
                let pos = pack.position_at(base_offset)?;
                Ok(Some(pack.index().id(pos)))
            }
        }
    }

    /// What an abbreviated id names, over all objects directories.
    pub fn resolve_prefix(&self, prefix: &Prefix) -> Result<PrefixMatch> {
        let mut found: Vec<ObjectId> = Vec::new();
        let add = |candidates: Vec<ObjectId>, found: &mut Vec<ObjectId>| {
            for id in candidates {
                if !found.contains(&id) {
                    found.push(id);
                }
            }
        };
        for source in &self.sources {
            let mut c = Vec::new();
            if let Some((midx, _)) = &source.midx {
                midx.find_prefix(prefix, 2, &mut c);
            }
            add(std::mem::take(&mut c), &mut found);
            for &p in &source.outside_midx {
                source.packs[p].index().find_prefix(prefix, 2, &mut c);
                add(std::mem::take(&mut c), &mut found);
            }
            source.loose.find_prefix(prefix, 2, &mut c)?;
            add(c, &mut found);
            if found.len() > 1 {
                return Ok(PrefixMatch::Ambiguous);
            }
        }
        Ok(match found.as_slice() {
            [] => PrefixMatch::None,
            [one] => PrefixMatch::Unique(*one),
            _ => PrefixMatch::Ambiguous,
        })
    }

    /// Every object id, each once, in the order asked for.
    pub fn all_ids(&self, order: IdOrder) -> Result<Vec<ObjectId>> {
        let mut ids = Vec::new();
        for source in &self.sources {
            let packs: Vec<usize> = match &source.midx {
                Some((_, map)) => map
                    .iter()
                    .copied()
                    .chain(source.outside_midx.iter().copied())
                    .collect(),
                None => (0..source.packs.len()).collect(),
            };
            for p in packs {
                let pack = &source.packs[p];
                match order {
                    IdOrder::Sorted => ids.extend((0..pack.len()).map(|i| pack.index().id(i))),
                    IdOrder::Storage => ids.extend(
                        pack.positions_in_pack_order()?
                            .iter()
                            .map(|&i| pack.index().id(i)),
                    ),
                }
            }
        }
        for source in &self.sources {
            source.loose.all_ids(&mut ids)?;
        }
        match order {
            IdOrder::Sorted => {
                ids.sort_unstable();
                ids.dedup();
            }
            IdOrder::Storage => {
                let mut seen = std::collections::HashSet::with_capacity(ids.len());
                ids.retain(|id| seen.insert(*id));
            }
        }
        Ok(ids)
    }
}

fn vanished(id: &ObjectId) -> Error {
    Error::BadName(format!("object {id} disappeared while it was being read"))
}

/// Opens one objects directory: its multi-pack-index, its packs, its loose objects.
/// How many times an objects directory is read again when a repack changed it while it was
/// being read.
const MAX_REREADS: usize = 20;

/// Opens one objects directory: its packs, multi-pack-index and loose objects. A repack may
/// change the directory meanwhile (a pack listed and deleted before it is opened; a new
/// multi-pack-index naming a pack that was not there yet when the directory was listed): then
/// it is read again, as git looks at its packs again, up to [`MAX_REREADS`] times.
/// Bytes at the start and end of a pack's files that opening it reads ([`open_source_once`]
/// hints them, [`Storage::prefetch_ends`]).
const OPEN_HEAD: u64 = 64 << 10;
const OPEN_TAIL: u64 = 64 << 10;

fn open_source(
    storage: Arc<dyn Storage>,
    next_pack_id: &mut u32,
    hash: HashKind,
) -> Result<Source> {
    let first_id = *next_pack_id;
    let mut rereads = 0;
    loop {
        *next_pack_id = first_id;
        match open_source_once(&storage, next_pack_id, hash) {
            Ok(Some(source)) => return Ok(source),
            Ok(None) if rereads < MAX_REREADS => {}
            Err(Error::Storage(e)) if e.is_not_found() && rereads < MAX_REREADS => {}
            Ok(None) => {
                // Changing all the time: the last try's error.
                return open_source_once(&storage, next_pack_id, hash)?.ok_or_else(|| {
                    Error::corrupt(
                        storage.describe("pack/multi-pack-index"),
                        0,
                        "names a pack which does not exist",
                    )
                });
            }
            Err(e) => return Err(e),
        }
        rereads += 1;
        std::thread::sleep(std::time::Duration::from_millis(1 << rereads.min(5)));
    }
}

/// One try of [`open_source`]: `None` when the multi-pack-index names a pack the listing
/// did not show but the directory holds now (it changed meanwhile).
fn open_source_once(
    storage: &Arc<dyn Storage>,
    next_pack_id: &mut u32,
    hash: HashKind,
) -> Result<Option<Source>> {
    let mut idx_names: Vec<String> = storage
        .list("pack")?
        .into_iter()
        .filter(|n| n.starts_with("pack-") && n.ends_with(".idx"))
        .collect();
    idx_names.sort();
    // Each pack's first reads (its index's header and fan-out, the pack's header and
    // trailer, its bitmap's and reverse index's headers) asked for at once: in object
    // storage each would otherwise be a round trip of its own.
    for name in &idx_names {
        let stem = name.trim_end_matches(".idx");
        for ext in ["idx", "pack", "bitmap", "rev"] {
            storage.prefetch_ends(&format!("pack/{stem}.{ext}"), OPEN_HEAD, OPEN_TAIL);
        }
    }
    let mut packs = Vec::new();
    for name in &idx_names {
        let full = format!("pack/{name}");
        if !storage.exists(&format!("pack/{}.pack", name.trim_end_matches(".idx"))) {
            if !storage.exists(&full) {
                // Deleted since the listing (a repack rolled it up): read again.
                return Ok(None);
            }
            tracing::warn!(
                "{}: no pack beside this index; skipped",
                storage.describe(&full)
            );
            continue;
        }
        packs.push(Arc::new(Pack::open(
            storage.as_ref(),
            &full,
            *next_pack_id,
            hash,
        )?));
        *next_pack_id += 1;
    }
    let midx = match storage.open("pack/multi-pack-index") {
        Ok(blob) => {
            let midx = MultiPackIndex::from_bytes(blob.name(), blob.read_all()?)?;
            let mut map = Vec::with_capacity(midx.pack_names().len());
            for name in midx.pack_names() {
                let Some(pos) = packs
                    .iter()
                    .position(|p: &Arc<Pack>| p.index().name().ends_with(&format!("/{name}")))
                else {
                    if storage.exists(&format!("pack/{name}")) {
                        return Ok(None);
                    }
                    return Err(Error::corrupt(
                        blob.name(),
                        0,
                        format!("names pack {name}, which does not exist"),
                    ));
                };
                map.push(pos);
            }
            Some((Arc::new(midx), map))
        }
        Err(e) if e.is_not_found() => None,
        Err(e) => return Err(e.into()),
    };
    let outside_midx = (0..packs.len())
        .filter(|i| midx.as_ref().is_none_or(|(_, map)| !map.contains(i)))
        .collect();
    Ok(Some(Source {
        storage: storage.clone(),
        packs,
        midx,
        outside_midx,
        loose: LooseStore::new(storage.clone()),
    }))
}

/// Lists `objects_dir` and, recursively, the objects directories its alternates name.
fn collect_alternates(objects_dir: &Path, depth: usize, out: &mut Vec<PathBuf>) -> Result<()> {
    let canonical = objects_dir.canonicalize().map_err(|source| Error::Io {
        path: objects_dir.display().to_string(),
        source,
    })?;
    if out.contains(&canonical) {
        return Ok(());
    }
    out.push(canonical.clone());
    let file = canonical.join("info").join("alternates");
    let text = match std::fs::read_to_string(&file) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(source) => {
            return Err(Error::Io {
                path: file.display().to_string(),
                source,
            })
        }
    };
    if depth >= MAX_ALTERNATE_DEPTH {
        tracing::warn!("{}: alternates nested too deep; ignored", file.display());
        return Ok(());
    }
    for line in text.lines() {
        let line = line.trim_end();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let path = canonical.join(line);
        if !path.is_dir() {
            tracing::warn!(
                "{}: alternate {} does not exist; ignored",
                file.display(),
                path.display()
            );
            continue;
        }
        collect_alternates(&path, depth + 1, out)?;
    }
    Ok(())
}
