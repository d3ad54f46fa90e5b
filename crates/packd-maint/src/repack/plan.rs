//! What a repack writes and how: the objects counted (with their parts and name hashes), each
//! one's on-disk entry, and the choice between reusing it and the delta search's answer.

use super::{RepackError, RepackOptions};
use packd_odb::{IdMap, Location, ObjectId, ObjectKind, Repository};
use packd_pack::delta_search::{self, Candidate, Choice, SearchOptions};
use packd_reach::bitmap::name_hash;
use packd_reach::progress::Progress;
use packd_reach::walk::{Query, Walker};
use rayon::prelude::*;
use std::sync::atomic::{AtomicU64, Ordering};

/// The part of the objects of a default clone (HEAD, refs/heads/*, refs/tags/*).
pub(super) const CLONE: u8 = 0;
/// The part of what only other refs reach.
pub(super) const REST: u8 = 1;

/// git's `pack.*` settings as the repository's config and the options give them.
#[derive(Debug, Clone)]
pub(super) struct Settings {
    pub(super) window: usize,
    pub(super) depth: u32,
    pub(super) window_memory: u64,
    pub(super) threads: usize,
    /// `pack.compression`, else `core.compression`, else -1 (zlib's default).
    pub(super) compression: i64,
}

impl Settings {
    pub(super) fn from_config(repo: &Repository, options: &RepackOptions) -> Settings {
        let config = repo.config();
        let int = |key: &str| config.get(key).and_then(|v| v.trim().parse::<i64>().ok());
        Settings {
            window: options
                .window
                .or_else(|| int("pack.window").map(|w| w.max(0) as usize))
                .unwrap_or(10),
            depth: options
                .depth
                .or_else(|| int("pack.depth").map(|d| d.clamp(0, 4095) as u32))
                .unwrap_or(50)
                .min(4095),
            window_memory: config
                .get("pack.windowMemory")
                .and_then(packd_odb::config::parse_size)
                .unwrap_or(0),
            threads: int("pack.threads").map_or(0, |t| t.max(0) as usize),
            compression: int("pack.compression")
                .or_else(|| int("core.compression"))
                .unwrap_or(-1)
                .clamp(-1, 9),
        }
    }
}

/// How one object is written.
#[derive(Debug)]
pub(super) enum How {
    /// Its on-disk entry, a whole object, as it is.
    ReuseWhole,
    /// Its on-disk entry, a delta against object `base`, with a new header.
    ReuseDelta { base: u32 },
    /// A new delta against object `base` (from the search).
    NewDelta {
        base: u32,
        delta_size: u64,
        compressed: bytes::Bytes,
    },
    /// Read, and compressed whole.
    Compress,
}

impl How {
    /// The object this one's entry needs written before it.
    pub(super) fn base(&self) -> Option<u32> {
        match self {
            How::ReuseDelta { base } | How::NewDelta { base, .. } => Some(*base),
            _ => None,
        }
    }
}

/// One object to write.
#[derive(Debug)]
pub(super) struct Obj {
    pub(super) id: ObjectId,
    pub(super) kind: ObjectKind,
    pub(super) name_hash: u32,
    pub(super) part: u8,
    /// Its pack entry, `None` when loose.
    pub(super) loc: Option<Location>,
    /// The object its on-disk entry is a delta against, when it is one.
    pub(super) disk_base: Option<ObjectId>,
}

/// Everything a repack writes.
pub(super) struct Planned {
    pub(super) objs: Vec<Obj>,
    pub(super) how: Vec<How>,
    /// The objects in write order (bases still to be pulled ahead of their deltas).
    pub(super) order: Vec<u32>,
    /// The packs the new one replaces (with -a; kept packs left out).
    pub(super) replaced_packs: Vec<std::sync::Arc<packd_odb::pack::Pack>>,
    /// Reachable objects not written because a kept pack holds them (git's
    /// `--honor-pack-keep`); empty when kept objects are packed.
    pub(super) left_in_kept: Vec<ObjectId>,
}

/// Whether the pack `name` (`pack/pack-<hex>.pack`) of `storage` is kept: it has a `.keep`
/// file, or `--keep-pack` names it (as `pack-<hex>.pack`).
fn is_kept(storage: &dyn packd_storage::Storage, name: &str, options: &RepackOptions) -> bool {
    let base = name.rsplit('/').next().unwrap_or(name);
    options.keep_packs.iter().any(|k| k == base) || storage.exists(&name.replace(".pack", ".keep"))
}

/// Whether objects of kept packs go into the new pack: `--[no-]pack-kept-objects`, else
/// `repack.packKeptObjects`, else only when `-b` writes a pack bitmap, that is without
/// `--write-midx` (git's default).
fn packs_kept_objects(repo: &Repository, options: &RepackOptions) -> bool {
    options
        .pack_kept_objects
        .or_else(|| repo.config().get_bool("repack.packKeptObjects"))
        .unwrap_or(options.bitmap && !options.write_midx)
}

/// The order of kinds within a part: commits, tags, trees, blobs (git's compute_write_order).
fn kind_rank(kind: ObjectKind) -> u8 {
    match kind {
        ObjectKind::Commit => 0,
        ObjectKind::Tag => 1,
        ObjectKind::Tree => 2,
        ObjectKind::Blob => 3,
    }
}

/// Lists the objects to pack, in walk order, with their parts and name hashes.
fn enumerate(
    repo: &Repository,
    options: &RepackOptions,
) -> Result<Vec<(ObjectId, ObjectKind, u32, u8)>, RepackError> {
    let mut out = Vec::new();
    if !options.all {
        // git's incremental repack: the loose objects refs, reflogs and the index reach.
        return Ok(super::incremental::loose_reachable(repo)?
            .into_iter()
            .map(|(id, kind, hash)| (id, kind, hash, CLONE))
            .collect());
    }
    let refs = repo.refs();
    let mut clone_tips = Vec::new();
    let mut other_tips = Vec::new();
    if let Some(head) = refs.resolve_full("HEAD")? {
        clone_tips.push(head);
    }
    for (name, id) in refs.list("refs/")? {
        if name.starts_with("refs/heads/") || name.starts_with("refs/tags/") {
            clone_tips.push(id);
        } else {
            other_tips.push(id);
        }
    }
    // git's -a: --all --reflog --indexed-objects; what only reflogs and the index reach goes
    // with the other refs' part.
    let extra = super::incremental::reflog_and_index_tips(repo)?;
    other_tips.extend(extra.into_iter().map(|(id, _)| id));
    clone_tips.sort_unstable();
    clone_tips.dedup();
    other_tips.sort_unstable();
    other_tips.dedup();
    if let Some(listed) = super::count_bitmap::enumerate(repo, &clone_tips, &other_tips)? {
        tracing::debug!("repack: counted with the bitmap");
        return Ok(listed);
    }
    let walker = Walker::new(repo);
    let mut seen = packd_odb::IdSet::default();
    let mut take = |reached: Vec<packd_reach::walk::Reached>, part: u8, out: &mut Vec<_>| {
        for r in reached {
            if seen.insert(r.id) {
                let hash = r.path.as_deref().map_or(0, name_hash);
                out.push((r.id, r.kind, hash, part));
            }
        }
    };
    let clone = walker.reachable(&Query {
        include: clone_tips.clone(),
        objects: true,
        ..Query::default()
    })?;
    take(clone, CLONE, &mut out);
    if !other_tips.is_empty() {
        let rest = walker.reachable(&Query {
            include: other_tips,
            exclude: clone_tips,
            objects: true,
            exact: false,
        })?;
        take(rest, REST, &mut out);
    }
    Ok(out)
}

/// `-k` with `-a -d` (git's `--keep-unreachable --pack-loose-unreachable`): every other object
/// of the packs replaced and every loose object no kept pack holds joins `listed` (in the
/// last part), so that nothing is left for a cruft pack and nothing is lost.
fn add_unreachable(
    repo: &Repository,
    replaced: &[std::sync::Arc<packd_odb::pack::Pack>],
    kept: &[(bool, std::sync::Arc<packd_odb::pack::Pack>)],
    left_in_kept: &[ObjectId],
    listed: &mut Vec<(ObjectId, ObjectKind, u32, u8)>,
) -> Result<(), RepackError> {
    let odb = repo.objects();
    let mut have: packd_odb::IdSet = listed.iter().map(|(id, ..)| *id).collect();
    have.extend(left_in_kept.iter().copied());
    let mut more: Vec<ObjectId> = Vec::new();
    for pack in replaced {
        for i in 0..pack.len() {
            more.push(pack.index().id(i));
        }
    }
    more.extend(
        odb.loose_ids()?
            .into_iter()
            .filter(|id| !kept.iter().any(|(_, p)| p.index().find(id).is_some())),
    );
    for id in more {
        if !have.insert(id) {
            continue;
        }
        if let Some(header) = odb.header(&id)? {
            listed.push((id, header.kind, 0, REST));
        }
    }
    Ok(())
}

/// Counts the objects to write and decides how each is written (see the module
/// documentation of `repack`).
pub(super) fn plan(
    repo: &Repository,
    options: &RepackOptions,
    settings: &Settings,
    progress: &dyn Progress,
) -> Result<Planned, RepackError> {
    let odb = repo.objects();
    let storage = odb.own_storage();
    let (kept, replaced): (Vec<_>, Vec<_>) = if options.all {
        odb.packs_with_storage()
            .filter(|(s, _)| storage.is_some_and(|own| std::sync::Arc::ptr_eq(own, s)))
            .map(|(s, p)| (is_kept(&**s, p.name(), options), p.clone()))
            .partition(|(k, _)| *k)
    } else {
        (Vec::new(), Vec::new())
    };
    let replaced: Vec<_> = replaced.into_iter().map(|(_, p)| p).collect();
    progress.start("Enumerating objects", 0);
    let started = std::time::Instant::now();
    let mut listed = enumerate(repo, options)?;
    // git's --honor-pack-keep: an object any kept pack holds is not written again.
    let mut left_in_kept = Vec::new();
    if !kept.is_empty() && !packs_kept_objects(repo, options) {
        listed.retain(|(id, ..)| {
            let in_kept = kept.iter().any(|(_, p)| p.index().find(id).is_some());
            if in_kept {
                left_in_kept.push(*id);
            }
            !in_kept
        });
    }
    if options.all && options.delete_redundant && options.keep_unreachable && !replaced.is_empty() {
        add_unreachable(repo, &replaced, &kept, &left_in_kept, &mut listed)?;
    }
    tracing::debug!(
        "repack: {} objects listed in {:.2?}",
        listed.len(),
        started.elapsed()
    );
    progress.finish(listed.len() as u64);

    // Where each object is, and what its entry is a delta against.
    progress.start("Counting objects", listed.len() as u64);
    let counted = AtomicU64::new(0);
    let objs: Vec<Obj> = listed
        .into_par_iter()
        .map(|(id, kind, name_hash, part)| {
            let n = counted.fetch_add(1, Ordering::Relaxed);
            if n.is_multiple_of(4096) {
                progress.update(n);
            }
            let loc = odb.locate(&id)?;
            let (loc, disk_base) = match loc {
                Some(loc @ Location::Packed { .. }) => {
                    let base = odb.delta_base(&loc)?;
                    (Some(loc), base)
                }
                Some(Location::Loose(_)) => (None, None),
                None => {
                    return Err(RepackError::Odb(packd_odb::Error::BadName(format!(
                        "object {id} is missing"
                    ))))
                }
            };
            Ok(Obj {
                id,
                kind,
                name_hash,
                part,
                loc,
                disk_base,
            })
        })
        .collect::<Result<_, RepackError>>()?;
    progress.finish(objs.len() as u64);
    let mut index: IdMap<u32> = IdMap::default();
    index.reserve(objs.len());
    for (i, o) in objs.iter().enumerate() {
        index.insert(o.id, i as u32);
    }

    tracing::debug!("repack: objects located at {:.2?}", started.elapsed());
    let how = decide(repo, options, settings, &objs, &index, progress)?;
    tracing::debug!(
        "repack: reuse and delta search decided at {:.2?}",
        started.elapsed()
    );

    let mut order: Vec<u32> = (0..objs.len() as u32).collect();
    order.sort_by_key(|&i| {
        let o = &objs[i as usize];
        (o.part, kind_rank(o.kind))
    });
    Ok(Planned {
        objs,
        how,
        order,
        replaced_packs: replaced,
        left_in_kept,
    })
}

/// Whether an on-disk delta of `target` against `base` may be reused, part-wise: its base is
/// in no later a part (so that a part's deltas have their bases in it or before it).
fn base_allowed(target: &Obj, base: &Obj) -> bool {
    base.part <= target.part
}

/// Decides each object's [`How`].
fn decide(
    repo: &Repository,
    options: &RepackOptions,
    settings: &Settings,
    objs: &[Obj],
    index: &IdMap<u32>,
    progress: &dyn Progress,
) -> Result<Vec<How>, RepackError> {
    let odb = repo.objects();
    let reuse_objects = !options.no_reuse_object;
    let reuse_deltas = reuse_objects && !options.no_reuse_delta;
    // Reused delta chains: the base each object's reuse would need, then each chain's depth
    // (a chain over `depth` is cut: its deepest links go to the search).
    let mut reused_base: Vec<Option<u32>> = objs
        .iter()
        .map(|o| {
            let base = *index.get(o.disk_base.as_ref()?)?;
            (reuse_deltas && base_allowed(o, &objs[base as usize])).then_some(base)
        })
        .collect();
    let mut depth: Vec<u32> = vec![u32::MAX; objs.len()];
    // Each object's chain root (the object the search decides at its bottom), and for each
    // root the longest reused chain resting on it: a new delta for the root deepens that
    // chain too (git's check_delta_limit), so its own chain is kept to `depth - above`.
    let mut root: Vec<u32> = (0..objs.len() as u32).collect();
    let mut above = vec![0u32; objs.len()];
    for start in 0..objs.len() {
        let mut chain = Vec::new();
        let mut at = start as u32;
        // Down to an object whose depth is known or that is not a reused delta.
        let base_depth = loop {
            if depth[at as usize] != u32::MAX {
                break depth[at as usize];
            }
            match reused_base[at as usize] {
                Some(b) if !chain.contains(&at) && chain.len() < 1 << 16 => {
                    chain.push(at);
                    at = b;
                }
                Some(_) => {
                    // A cycle (ref deltas across packs) or an absurd chain: cut here.
                    reused_base[at as usize] = None;
                    depth[at as usize] = 0;
                    break 0;
                }
                None => {
                    depth[at as usize] = 0;
                    break 0;
                }
            }
        };
        let mut d = base_depth;
        let mut r = root[at as usize];
        for &link in chain.iter().rev() {
            if d >= settings.depth {
                reused_base[link as usize] = None;
                d = 0;
                r = link;
            } else {
                d += 1;
            }
            depth[link as usize] = d;
            root[link as usize] = r;
            above[r as usize] = above[r as usize].max(d);
        }
    }

    let candidates_of: Vec<u32> = (0..objs.len() as u32)
        .filter(|&i| reused_base[i as usize].is_none())
        .collect();
    tracing::debug!(
        "repack: {} on-disk deltas reused, {} objects to the delta search",
        objs.len() - candidates_of.len(),
        candidates_of.len()
    );
    progress.start("Compressing objects", candidates_of.len() as u64);
    let mut how: Vec<How> = (0..objs.len())
        .map(|i| {
            let o = &objs[i];
            match reused_base[i] {
                Some(base) => How::ReuseDelta { base },
                None if reuse_objects && o.loc.is_some() && o.disk_base.is_none() => {
                    How::ReuseWhole
                }
                None => How::Compress,
            }
        })
        .collect();
    let search_options = SearchOptions {
        window: settings.window,
        depth: settings.depth,
        window_memory: settings.window_memory,
        threads: settings.threads,
        deadline: None,
        compression_level: if settings.compression < 0 {
            6
        } else {
            settings.compression as i32
        },
        // Only the second part has base-only candidates (the first part's whole objects):
        // first among their name hash, as git orders preferred bases.
        base_only_first: true,
    };
    // A search for each part, the clone part's first. The second (what only other refs
    // reach: refs/pull/* and the like, mostly other versions of the clone part's files) also
    // offers, as bases only, the clone part's searched objects that the first search left
    // whole and that share a name hash with one of its own. The clone part cannot take bases
    // from the second: a default clone is that part alone. On git/git's -adf (841k objects,
    // `bench/repack.sh`): each part alone, 1.094x git's pack bytes; one search over both
    // parts, the clone part's windows crowded with objects it may not use, 1.125x; the second
    // part offered the first's whole objects, 1.045x; offered all of the first's searched
    // objects at the depth it gave them, 1.064x (sorted by size among its own; 1.076x sorted
    // first, 1.050x those at most 25 deep): they crowd its windows too. The clone part alone
    // (the 489k-object copy without refs/pull/*) is 1.004x git's.
    let decided = AtomicU64::new(0);
    let mut searched_depth = vec![0u32; objs.len()];
    let mut searched_clone = vec![false; objs.len()];
    for part in [CLONE, REST] {
        let mut members: Vec<u32> = candidates_of
            .iter()
            .copied()
            .filter(|&i| objs[i as usize].part == part)
            .collect();
        if members.is_empty() {
            continue;
        }
        let searched = members.len();
        if part == REST {
            let hashes: std::collections::HashSet<(u32, u8)> = members
                .iter()
                .map(|&i| {
                    let o = &objs[i as usize];
                    (o.name_hash, kind_rank(o.kind))
                })
                .collect();
            members.extend((0..objs.len() as u32).filter(|&i| {
                let o = &objs[i as usize];
                searched_clone[i as usize]
                    && searched_depth[i as usize] == 0
                    && o.name_hash != 0
                    && hashes.contains(&(o.name_hash, kind_rank(o.kind)))
            }));
        }
        let candidates = members
            .par_iter()
            .enumerate()
            .map(|(c, &i)| {
                let o = &objs[i as usize];
                let size = match &o.loc {
                    Some(loc) => odb.header_at(&o.id, loc)?.size,
                    None => odb.header(&o.id)?.map_or(0, |h| h.size),
                };
                Ok(Candidate {
                    id: o.id,
                    kind: o.kind,
                    size,
                    name_hash: o.name_hash,
                    base_only: c >= searched,
                    base_depth: searched_depth[i as usize],
                    above: above[i as usize],
                })
            })
            .collect::<Result<Vec<_>, RepackError>>()?;
        let before = decided.load(Ordering::Relaxed);
        let load = |c: u32| -> Result<bytes::Bytes, RepackError> {
            let o = &objs[members[c as usize] as usize];
            let object = match &o.loc {
                Some(loc) => odb.read_at(&o.id, loc)?,
                None => odb.read(&o.id)?.ok_or_else(|| {
                    packd_odb::Error::BadName(format!("object {} is missing", o.id))
                })?,
            };
            Ok(object.data)
        };
        let choices = delta_search::search(&candidates, &search_options, &load, &|n| {
            progress.update(before + n.min(searched as u64))
        })?;
        decided.fetch_add(searched as u64, Ordering::Relaxed);
        for (c, choice) in choices.into_iter().enumerate().take(searched) {
            let i = members[c] as usize;
            searched_clone[i] = part == CLONE;
            if let Choice::Delta {
                base,
                depth,
                delta_size,
                compressed,
            } = choice
            {
                searched_depth[i] = depth;
                how[members[c] as usize] = How::NewDelta {
                    base: members[base as usize],
                    delta_size,
                    compressed,
                };
            }
        }
    }
    progress.finish(candidates_of.len() as u64);
    Ok(how)
}
