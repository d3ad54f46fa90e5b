//! Writing a pack's `.bitmap` (version 1, the layout in [`crate::bitmap`]) and `.rev`, or a
//! multi-pack-index and its `.bitmap`.
//!
//! ```text
//! "BITM" | version 1 | flags FULL_DAG [| HASH_CACHE] [| LOOKUP_TABLE] | entry count | pack checksum
//! type bitmaps     commit, tree, blob, tag (bits in pack order)
//! entries          newest commit first: index position, xor offset (0..=10), flags 0, EWAH
//! lookup table     by commit index position: position, entry offset, xor row (or 0xffffffff)
//! name-hash cache  one u32 per object, index order: git's pack_name_hash of the path a tree
//!                  or blob was first reached by (0 for root trees), of a tag's own name (its
//!                  `tag` header, as git's traversal names tags), 0 for commits
//! SHA-1 of all the above
//! ```
//!
//! Steps: find the repository's one pack; read its entry headers (kinds, order) and its commits;
//! peel the refs to commits in the pack; select commits ([`super::select`]); build their bitmaps
//! ancestors first (`super::build`); XOR each against the best of the ten entries written just
//! before it (git's search, git's order: newest commit first, so that the newest bitmaps, where
//! most queries start, sit at the short ends of the XOR chains); serialize; and publish the files
//! through the storage layer (`crate::publish`), into the objects storage the caller gives: the
//! `.rev`, then the `.bitmap`, each created, or replaced by compare-and-swap when one of other
//! bytes is there. On a local disk they are 0444 less the umask, as git makes them (the
//! multi-pack-index itself stays writable, as git's). A write that fails leaves the files
//! already there as they were.
//!
//! Over several packs ([`write_midx_bitmap`]): the multi-pack-index is planned first
//! (`packd_odb::pack::multi_index::write`: one copy per object, the pseudo-pack order), the
//! bitmap numbers its chosen copies in that order and records its checksum; commit positions
//! and the name-hash cache are in its id order. `objects/pack/multi-pack-index` (with a RIDX
//! chunk, so no `.rev`) replaces the one read before planning (compare-and-swap: a
//! multi-pack-index another writer put there meanwhile fails this write rather than being
//! overwritten), then `multi-pack-index-<checksum>.bitmap` is published; other
//! `multi-pack-index-*.bitmap`/`.rev` files are removed afterwards. Unlike one pack's, a
//! selected commit reaching an object no pack has is an error, not a skipped bitmap.
//!
//! The packs are read through the repository's object database and the files written through
//! the storage given (the repository's own objects storage): a local directory or a bucket.

use super::build::{Builder, CommitGraph, PackObjects, Unbitmappable};
use super::reuse::PriorBitmaps;
use super::select::{self, Reason, Tip, TipClass};
use super::{BITMAP_OPT_FULL_DAG, BITMAP_OPT_HASH_CACHE, BITMAP_OPT_LOOKUP_TABLE};
use crate::ewah::Bitmap;
use crate::ewah_encode::Encoded;
use crate::progress::Progress;
use crate::publish::{delete_stale, put_read_only};
use crate::rev_index;
use packd_odb::pack::multi_index::write::{MidxPack, MidxPlan};
use packd_odb::pack::Pack;
use packd_odb::{ObjectId, Repository};
use packd_storage::{Storage, StorageError};
use std::collections::VecDeque;
use std::path::PathBuf;
use std::sync::Arc;

/// How far back (in entries written) an entry may look for its XOR base, as git does.
pub const MAX_XOR_SEARCH: usize = 10;

/// What to write.
#[derive(Debug, Clone)]
pub struct WriteOptions {
    /// Write the commit lookup table (git 2.38+ reads it to open a bitmap without scanning).
    pub lookup_table: bool,
    /// Write the name-hash cache.
    pub hash_cache: bool,
    /// Write the `.rev` file too (one pack; a multi-pack-index carries its order itself).
    pub rev: bool,
    /// Write a multi-pack-index and its bitmap even over a single pack ([`write_bitmap`] does
    /// whenever there are several).
    pub midx: bool,
    /// The multi-pack-index's preferred pack (its `.pack` or `.idx` name); `None`: the pack
    /// with the most objects.
    pub preferred_pack: Option<String>,
    /// Give every ref tip a bitmap, up to [`crate::bitmap::select::MAX_EVERY_TIP`] distinct
    /// tips (see `select::select`): a mirror clone, or any fetch of many refs, then takes
    /// bitmaps and walks nothing.
    pub every_tip: bool,
}

impl Default for WriteOptions {
    fn default() -> Self {
        WriteOptions {
            lookup_table: true,
            hash_cache: true,
            rev: true,
            midx: false,
            preferred_pack: None,
            every_tip: false,
        }
    }
}

/// Why nothing was written.
#[derive(Debug, thiserror::Error)]
pub enum WriteError {
    /// The repository has no pack.
    #[error("{dir}: no pack to write a bitmap for")]
    NoPack {
        /// The pack directory.
        dir: String,
    },
    /// More than one pack: a pack bitmap describes one pack closed under reachability.
    #[error(
        "{count} packs ({names}): a pack bitmap needs all objects in one pack; run `git repack -ad` first, or write a multi-pack-index bitmap (`packd write-bitmap --midx`)"
    )]
    SeveralPacks {
        /// How many.
        count: usize,
        /// Their names.
        names: String,
    },
    /// No ref points at a commit in the pack.
    #[error("{pack}: no ref points at a commit in this pack; nothing to bitmap")]
    NoTips {
        /// The pack.
        pack: String,
    },
    /// Every selected commit reaches an object the pack lacks.
    #[error(
        "{pack}: the pack is not closed under reachability: commit {commit} reaches {missing}, which is not in it (and no other selected commit could be bitmapped)"
    )]
    NotClosed {
        /// The pack.
        pack: String,
        /// A commit that could not be bitmapped.
        commit: ObjectId,
        /// The object it reaches that the pack lacks.
        missing: ObjectId,
    },
    /// Writing a multi-pack-index bitmap: the packs together lack something a selected
    /// commit reaches.
    #[error(
        "{what}: the packs together are not closed under reachability: commit {commit} reaches {missing}, which no pack has; no bitmap written (repack, or fetch the missing objects, first)"
    )]
    PacksNotClosed {
        /// The multi-pack-index.
        what: String,
        /// A commit that could not be bitmapped.
        commit: ObjectId,
        /// The object it reaches that no pack has.
        missing: ObjectId,
    },
    /// Reading the repository failed.
    #[error(transparent)]
    Odb(#[from] packd_odb::Error),
    /// Writing a file through the storage layer failed; [`StorageError::Conflict`] (or
    /// `Locked`) when another writer changed it meanwhile.
    #[error(transparent)]
    Storage(#[from] StorageError),
}

/// A commit that got no bitmap because the pack lacks something it reaches.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Skipped {
    /// The commit.
    pub commit: ObjectId,
    /// A ref pointing at it, if any.
    pub refname: Option<String>,
    /// The object it reaches that the pack lacks.
    pub missing: ObjectId,
}

/// What was written. Paths are where the storage says the files are (a path on a local disk,
/// an `s3://` URL in a bucket).
#[derive(Debug, Clone)]
pub struct WriteReport {
    /// The `.bitmap` file.
    pub bitmap_path: PathBuf,
    /// Its size in bytes.
    pub bitmap_bytes: u64,
    /// The `.rev` file, if one was written.
    pub rev_path: Option<PathBuf>,
    /// The multi-pack-index, if one was written.
    pub midx_path: Option<PathBuf>,
    /// The number of packs the bitmap covers.
    pub packs: usize,
    /// The multi-pack-index's preferred pack (`.idx` name), if one was written.
    pub preferred_pack: Option<String>,
    /// The number of objects in the pack (or the multi-pack-index).
    pub objects: u32,
    /// The number of commits in the pack.
    pub commits: usize,
    /// The number of bitmapped commits.
    pub bitmaps: usize,
    /// How many of them were chosen for each reason: tips, newest, spacing, fork points.
    pub by_reason: [usize; 4],
    /// How many entries are stored XORed against an earlier one.
    pub xored: usize,
    /// Selected commits left out.
    pub skipped: Vec<Skipped>,
}

/// The storage of a repository's own objects and its packs.
type OwnPacks<'a> = (&'a Arc<dyn Storage>, Vec<&'a Arc<Pack>>);

/// The packs of the repository's own objects directory (not its alternates'), in name order,
/// and the storage they are read from.
fn own_packs(repo: &Repository) -> Result<OwnPacks<'_>, WriteError> {
    let own = repo.objects().own_storage();
    let packs: Vec<&Arc<Pack>> = repo
        .objects()
        .packs_with_storage()
        .filter(|(s, _)| own.is_some_and(|o| Arc::ptr_eq(o, s)))
        .map(|(_, p)| p)
        .collect();
    match own {
        Some(own) if !packs.is_empty() => Ok((own, packs)),
        _ => Err(WriteError::NoPack {
            dir: repo.git_dir().join("objects/pack").display().to_string(),
        }),
    }
}

/// Writes bitmaps for the repository's packs into `storage` (the repository's own objects
/// storage): a pack bitmap (and `.rev`) when it has one pack (beside cruft packs only) and
/// `options.midx` is off, else a multi-pack-index and its bitmap.
pub fn write_bitmap(
    repo: &Repository,
    storage: &dyn Storage,
    options: &WriteOptions,
    progress: &dyn Progress,
) -> Result<WriteReport, WriteError> {
    write_bitmap_reusing(repo, storage, options, progress, None)
}

/// [`write_bitmap`], a pack bitmap reusing the bitmaps of `prior` (see
/// [`write_pack_bitmap_reusing`]); a multi-pack-index bitmap is built from nothing.
pub fn write_bitmap_reusing(
    repo: &Repository,
    storage: &dyn Storage,
    options: &WriteOptions,
    progress: &dyn Progress,
    prior: Option<&PriorBitmaps>,
) -> Result<WriteReport, WriteError> {
    let (own, packs) = own_packs(repo)?;
    if options.midx || bitmapped_pack(&**own, &packs).is_none() {
        write_midx_bitmap(repo, storage, options, progress)
    } else {
        write_pack_bitmap_reusing(repo, storage, options, progress, prior)
    }
}

/// Whether `pack`, read from `storage`, is a cruft pack (it has an `.mtimes`): unreachable
/// objects only, which no bitmap needs to number.
fn is_cruft(storage: &dyn Storage, pack: &Pack) -> bool {
    let name = pack.name();
    storage.exists(&format!(
        "{}.mtimes",
        name.strip_suffix(".pack").unwrap_or(name)
    ))
}

/// The one pack a pack bitmap is written for: the only pack, or the only one beside cruft
/// packs (as `git repack -adb --cruft` bitmaps its reachable pack: nothing reachable is in a
/// cruft pack, so the pack is closed); `None` otherwise.
fn bitmapped_pack<'a>(storage: &dyn Storage, packs: &[&'a Arc<Pack>]) -> Option<&'a Arc<Pack>> {
    match packs {
        [one] => Some(*one),
        many => {
            let mut live = many.iter().filter(|p| !is_cruft(storage, p));
            match (live.next(), live.next()) {
                (Some(one), None) => Some(*one),
                _ => None,
            }
        }
    }
}

/// Writes the bitmap (and `.rev`) of the repository's single pack (or its one pack beside
/// cruft packs) into `storage`.
pub fn write_pack_bitmap(
    repo: &Repository,
    storage: &dyn Storage,
    options: &WriteOptions,
    progress: &dyn Progress,
) -> Result<WriteReport, WriteError> {
    write_pack_bitmap_reusing(repo, storage, options, progress, None)
}

/// [`write_pack_bitmap`], taking the bitmaps of `prior` (an earlier pack's file, see
/// [`super::reuse`]) for the commits it covers instead of building them: a full repack of a
/// bitmapped pack then walks only the history above them. The file is the same as one built
/// from nothing but for the name hashes of objects only reused bitmaps reach (the old
/// file's).
pub fn write_pack_bitmap_reusing(
    repo: &Repository,
    storage: &dyn Storage,
    options: &WriteOptions,
    progress: &dyn Progress,
    prior: Option<&PriorBitmaps>,
) -> Result<WriteReport, WriteError> {
    let (own, packs) = own_packs(repo)?;
    let pack = match bitmapped_pack(&**own, &packs) {
        Some(one) => one,
        None => {
            let many = packs.as_slice();
            return Err(WriteError::SeveralPacks {
                count: many.len(),
                names: many
                    .iter()
                    .map(|p| p.name().trim_start_matches("pack/"))
                    .collect::<Vec<_>>()
                    .join(", "),
            });
        }
    };
    let cache = repo.objects().cache();
    let started = std::time::Instant::now();

    progress.start("Scanning objects", pack.len() as u64);
    let objects = PackObjects::scan(pack, cache, &|d| progress.update(d))?;
    let built = build_bitmaps(
        repo,
        &objects,
        pack.index().pack_checksum(),
        pack.data_name(),
        options,
        progress,
        false,
        prior,
    )?;

    // Files: the `.rev` first, so that a reader finding the bitmap finds the order it needs.
    let stem = pack.name().strip_suffix(".pack").unwrap_or(pack.name());
    let bitmap_name = format!("{stem}.bitmap");
    let rev_name = format!("{stem}.rev");
    if options.rev {
        let rev = rev_index::encode(&objects.index_of, pack.index().pack_checksum())
            .map_err(packd_odb::Error::from)?;
        put_read_only(storage, &rev_name, &rev)?;
    }
    let bitmap_bytes = built.bytes.len() as u64;
    put_read_only(storage, &bitmap_name, &built.bytes)?;
    let bitmap_path = PathBuf::from(storage.describe(&bitmap_name));
    tracing::debug!("wrote {} in {:?}", bitmap_path.display(), started.elapsed());
    Ok(WriteReport {
        bitmap_path,
        bitmap_bytes,
        rev_path: options
            .rev
            .then(|| PathBuf::from(storage.describe(&rev_name))),
        midx_path: None,
        packs: 1,
        preferred_pack: None,
        objects: pack.len(),
        commits: built.commits,
        bitmaps: built.bitmaps,
        by_reason: built.by_reason,
        xored: built.xored,
        skipped: built.skipped,
    })
}

/// The `.idx` file name of a pack (`pack-<hex>.idx`), as a multi-pack-index lists it.
fn idx_file_name(pack: &Pack) -> String {
    let name = pack.name().rsplit('/').next().unwrap_or(pack.name());
    format!("{}.idx", name.strip_suffix(".pack").unwrap_or(name))
}

/// The modification time of `pack`'s data in whole seconds since the epoch (as git compares
/// packs): of its file on a local disk; 0 in object storage, whose listing the storage layer
/// does not date (the multi-pack-index then orders equal copies by pack name alone).
fn mtime_seconds(pack: &Pack) -> i64 {
    let Ok(modified) = std::fs::metadata(pack.data_name()).and_then(|m| m.modified()) else {
        return 0;
    };
    match modified.duration_since(std::time::UNIX_EPOCH) {
        Ok(d) => d.as_secs() as i64,
        Err(e) => -(e.duration().as_secs() as i64),
    }
}

/// The multi-pack-index's name in the objects storage.
const MIDX: &str = "pack/multi-pack-index";

/// Writes a multi-pack-index over all the repository's packs (`objects/pack/multi-pack-index`,
/// with a RIDX chunk) and its bitmap (`multi-pack-index-<checksum>.bitmap`), bits in the
/// pseudo-pack order, into `storage`. Every selected commit must be bitmappable: the packs
/// together must hold everything their refs reach. The multi-pack-index replaces the one read
/// before anything else (a [`StorageError::Conflict`] if another writer replaced it since) and
/// is in place before its bitmap; bitmaps and `.rev` files of earlier multi-pack-indexes are
/// removed afterwards.
pub fn write_midx_bitmap(
    repo: &Repository,
    storage: &dyn Storage,
    options: &WriteOptions,
    progress: &dyn Progress,
) -> Result<WriteReport, WriteError> {
    write_midx_bitmap_leaving_out(repo, storage, options, progress, &[])
}

/// [`write_midx_bitmap`] over the repository's packs but those whose `.idx` file name
/// (`pack-<hex>.idx`) is in `leave_out`: packs a repack rolled up into a new one, which it
/// deletes once the multi-pack-index that no longer names them is in place.
pub fn write_midx_bitmap_leaving_out(
    repo: &Repository,
    storage: &dyn Storage,
    options: &WriteOptions,
    progress: &dyn Progress,
    leave_out: &[String],
) -> Result<WriteReport, WriteError> {
    // The version this write replaces, read before the packs are: a multi-pack-index written
    // by another writer from here on makes the replace below a conflict.
    let before = storage.read_versioned(MIDX)?.map(|(_, version)| version);
    let (_, mut packs) = own_packs(repo)?;
    packs.retain(|p| !leave_out.contains(&idx_file_name(p)));
    if packs.is_empty() {
        return Err(WriteError::NoPack {
            dir: repo.git_dir().join("objects/pack").display().to_string(),
        });
    }
    let started = std::time::Instant::now();
    let mut inputs = Vec::with_capacity(packs.len());
    for p in &packs {
        inputs.push(MidxPack::from_index(
            &idx_file_name(p),
            mtime_seconds(p),
            p.index(),
        )?);
    }
    let plan = MidxPlan::new(inputs, options.preferred_pack.as_deref())?;
    let mut by_number: Vec<&Pack> = Vec::with_capacity(packs.len());
    for name in plan.pack_names() {
        let pack = packs
            .iter()
            .find(|p| idx_file_name(p) == *name)
            .expect("the plan names the packs it was given");
        by_number.push(pack.as_ref());
    }
    let midx_bytes = plan.to_bytes(true);
    let checksum = midx_bytes[midx_bytes.len() - 20..].to_vec();
    let cache = repo.objects().cache();

    let total: u64 = packs.iter().map(|p| p.len() as u64).sum();
    progress.start("Scanning objects", total);
    let objects = PackObjects::scan_midx(&by_number, &plan, cache, &|d| progress.update(d))?;
    let midx_path = PathBuf::from(storage.describe(MIDX));
    let built = build_bitmaps(
        repo,
        &objects,
        &checksum,
        &midx_path.display().to_string(),
        options,
        progress,
        true,
        None,
    )?;

    let bitmap_name = format!("multi-pack-index-{}.bitmap", packd_odb::hex(&checksum));
    let bitmap_path = PathBuf::from(storage.describe(&format!("pack/{bitmap_name}")));
    let bitmap_bytes = built.bytes.len() as u64;
    storage.replace(MIDX, before.as_ref(), &midx_bytes)?;
    put_read_only(storage, &format!("pack/{bitmap_name}"), &built.bytes)?;
    // Earlier multi-pack-indexes' bitmaps and reverse indexes.
    delete_stale(storage, "pack", |name| {
        name.starts_with("multi-pack-index-")
            && (name.ends_with(".bitmap") || name.ends_with(".rev"))
            && name != bitmap_name
    });
    tracing::debug!("wrote {} in {:?}", bitmap_path.display(), started.elapsed());
    Ok(WriteReport {
        bitmap_path,
        bitmap_bytes,
        rev_path: None,
        midx_path: Some(midx_path),
        packs: packs.len(),
        preferred_pack: Some(plan.pack_names()[plan.preferred() as usize].clone()),
        objects: plan.len(),
        commits: built.commits,
        bitmaps: built.bitmaps,
        by_reason: built.by_reason,
        xored: built.xored,
        skipped: built.skipped,
    })
}

/// A serialized `.bitmap` and what went into it.
struct Built {
    bytes: Vec<u8>,
    commits: usize,
    bitmaps: usize,
    by_reason: [usize; 4],
    xored: usize,
    skipped: Vec<Skipped>,
}

/// Selects, builds and serializes the bitmaps over `objects` (`checksum`: what the file
/// records; `what`: the pack or multi-pack-index, for messages). With `strict`, a selected
/// commit that reaches an object outside `objects` is an error rather than skipped.
#[allow(clippy::too_many_arguments)]
fn build_bitmaps(
    repo: &Repository,
    objects: &PackObjects<'_>,
    checksum: &[u8],
    what: &str,
    options: &WriteOptions,
    progress: &dyn Progress,
    strict: bool,
    prior: Option<&PriorBitmaps>,
) -> Result<Built, WriteError> {
    let started = std::time::Instant::now();
    let graph = {
        let commits = objects
            .kinds
            .iter()
            .filter(|k| **k == packd_odb::ObjectKind::Commit)
            .count();
        progress.start("Reading commits", commits as u64);
        CommitGraph::load(objects, &|d| progress.update(d))?
    };
    tracing::debug!(
        "{what}: {} objects, {} commits read in {:?}",
        objects.len(),
        graph.len(),
        started.elapsed()
    );

    // Ref tips, peeled to commits in the pack.
    let mut refs = repo.refs().list("refs/")?;
    if let Some(head) = repo.refs().resolve_full("HEAD")? {
        refs.push(("HEAD".to_string(), head));
    }
    let mut tips = Vec::new();
    let mut tip_names: std::collections::HashMap<u32, String> = Default::default();
    for (name, id) in &refs {
        let Some(p) = objects.find(id) else { continue };
        let Some(p) = objects.peel(p)? else { continue };
        let Some(c) = graph.number_at(p) else {
            continue;
        };
        tips.push(Tip {
            commit: c,
            class: TipClass::of(name),
            head: name == "HEAD",
        });
        tip_names.entry(c).or_insert_with(|| name.clone());
    }
    if tips.is_empty() {
        return Err(WriteError::NoTips {
            pack: what.to_string(),
        });
    }

    let (prior_bitmaps, prior_hashes) = match prior {
        Some(prior) => {
            let (mapped, hashes) = prior.map_onto(objects)?;
            (mapped, hashes)
        }
        None => Default::default(),
    };
    let mut preferred = vec![
        false;
        if prior_bitmaps.is_empty() {
            0
        } else {
            graph.len()
        }
    ];
    for &p in prior_bitmaps.keys() {
        if let Some(c) = graph.number_at(p) {
            preferred[c as usize] = true;
        }
    }
    let selected = select::select_preferring(&graph, &tips, options.every_tip, &preferred);
    tracing::debug!(
        "selected {} commits of {} ({} tips) in {:?}",
        selected.len(),
        graph.len(),
        tips.len(),
        started.elapsed()
    );

    // Build, ancestors first.
    let mut order: Vec<(u32, Reason)> = selected.clone();
    order.sort_by_key(|&(c, _)| graph.rank(c));
    let mut builder = Builder::new(objects, &graph);
    let reused = builder.seed(prior_bitmaps, &prior_hashes);
    drop(prior_hashes);
    progress.start("Building bitmaps", order.len() as u64);
    for (k, &(c, _)) in order.iter().enumerate() {
        if !reused.contains(&c) {
            builder.build(c)?;
        }
        progress.update(k as u64 + 1);
    }
    tracing::debug!(
        "built {} bitmaps ({} reused of {} earlier ones; {} KiB encoded; {} trees read, {} entries) in {:?}",
        order.len(),
        order.iter().filter(|(c, _)| reused.contains(c)).count(),
        reused.len(),
        builder.held_bytes() >> 10,
        builder.trees_read,
        builder.entries_seen,
        started.elapsed()
    );

    // Collect; written below newest first (an entry is XORed against newer ones).
    let mut entries: Vec<(u32, Reason, Encoded)> = Vec::new();
    let mut skipped = Vec::new();
    let mut covered = Bitmap::from_words(vec![0; objects.len().div_ceil(64)]);
    for &(c, why) in &order {
        match builder.take(c).expect("every selected commit was built") {
            Ok(bits) => {
                bits.or_into(&mut covered);
                entries.push((c, why, bits));
            }
            Err(Unbitmappable { missing }) => {
                let commit = objects.id(graph.pack_pos(c));
                tracing::debug!("no bitmap for {commit}: it reaches {missing}, not in the pack");
                skipped.push(Skipped {
                    commit,
                    refname: tip_names.get(&c).cloned(),
                    missing,
                });
            }
        }
    }
    if let Some(first) = skipped.first().filter(|_| strict) {
        return Err(WriteError::PacksNotClosed {
            what: what.to_string(),
            commit: first.commit,
            missing: first.missing,
        });
    }
    if entries.is_empty() {
        let first = skipped.first().expect("something was selected");
        return Err(WriteError::NotClosed {
            pack: what.to_string(),
            commit: first.commit,
            missing: first.missing,
        });
    }
    if options.hash_cache {
        let mut rest: Vec<u32> = tips.iter().map(|t| t.commit).collect();
        rest.sort_unstable();
        rest.dedup();
        progress.start("Naming objects", rest.len() as u64);
        builder.name_rest(&rest, covered, &|d| progress.update(d))?;
        builder.name_tags()?;
    }
    // Newest first, as git writes them: each entry is XORed against entries written before it,
    // so chains grow towards the end of the file; the newest commits, where queries start,
    // then resolve through a few links rather than through every older bitmap (oldest first,
    // git.git's tip took a 200-link chain).
    entries.sort_by_key(|(c, _, _)| {
        (
            std::cmp::Reverse(graph.date(*c)),
            std::cmp::Reverse(graph.rank(*c)),
        )
    });

    progress.start("Writing bitmaps", entries.len() as u64);
    let mut by_reason = [0usize; 4];
    for (_, why, _) in &entries {
        by_reason[match why {
            Reason::Tip => 0,
            Reason::Recent => 1,
            Reason::Spacing => 2,
            Reason::ForkPoint => 3,
        }] += 1;
    }
    let commit_positions: Vec<u32> = entries
        .iter()
        .map(|(c, _, _)| objects.index_of[graph.pack_pos(*c) as usize])
        .collect();
    let encoded: Vec<Encoded> = entries.into_iter().map(|(_, _, e)| e).collect();
    let stored = xor_compress(&encoded, &|d| progress.update(d));
    let xored = stored.iter().filter(|(off, _)| *off != 0).count();
    let types = objects.type_bitmaps();
    let bytes = serialize(
        checksum,
        &types,
        &commit_positions,
        &stored,
        options.lookup_table,
        options.hash_cache.then_some(builder.name_hashes.as_slice()),
    )?;
    Ok(Built {
        bytes,
        commits: graph.len(),
        bitmaps: stored.len(),
        by_reason,
        xored,
        skipped,
    })
}

/// For each bitmap (in write order), the XOR offset (0 for none) and what to store: the bitmap
/// XORed with the entry that many before it, if that encodes smaller than the bitmap alone and
/// than with any other of the [`MAX_XOR_SEARCH`] entries before it.
pub(crate) fn xor_compress(bitmaps: &[Encoded], progress: &dyn Fn(u64)) -> Vec<(u8, Encoded)> {
    let mut recent: VecDeque<Bitmap> = VecDeque::with_capacity(MAX_XOR_SEARCH + 1);
    let mut out = Vec::with_capacity(bitmaps.len());
    for (k, enc) in bitmaps.iter().enumerate() {
        let plain = enc.decode();
        let mut best: Option<(usize, Encoded)> = None;
        // `recent` holds the previous entries, newest first.
        for (i, prev) in recent.iter().enumerate() {
            let x = Encoded::encode_xor(prev, &plain);
            let smallest = best
                .as_ref()
                .map_or(enc.word_count(), |(_, b)| b.word_count());
            if x.word_count() < smallest {
                best = Some((i + 1, x));
            }
        }
        out.push(match best {
            Some((off, x)) => (off as u8, x),
            None => (0, enc.clone()),
        });
        recent.push_front(plain);
        recent.truncate(MAX_XOR_SEARCH);
        if k % 16 == 0 {
            progress(k as u64);
        }
    }
    progress(bitmaps.len() as u64);
    out
}

/// The bytes of a `.bitmap`: entries in the given (write) order, `commit_positions[i]` being
/// entry `i`'s commit's index position.
pub(crate) fn serialize(
    pack_checksum: &[u8],
    types: &[Bitmap; 4],
    commit_positions: &[u32],
    stored: &[(u8, Encoded)],
    lookup_table: bool,
    name_hashes: Option<&[u32]>,
) -> Result<Vec<u8>, packd_odb::Error> {
    let mut flags = BITMAP_OPT_FULL_DAG;
    if name_hashes.is_some() {
        flags |= BITMAP_OPT_HASH_CACHE;
    }
    if lookup_table {
        flags |= BITMAP_OPT_LOOKUP_TABLE;
    }
    let mut out = Vec::new();
    out.extend_from_slice(b"BITM");
    out.extend_from_slice(&1u16.to_be_bytes());
    out.extend_from_slice(&flags.to_be_bytes());
    out.extend_from_slice(&(stored.len() as u32).to_be_bytes());
    out.extend_from_slice(pack_checksum);
    for t in types {
        Encoded::encode(t).write_to(&mut out);
    }
    let mut offsets = Vec::with_capacity(stored.len());
    for (pos, (xor, bits)) in commit_positions.iter().zip(stored) {
        offsets.push(out.len() as u64);
        out.extend_from_slice(&pos.to_be_bytes());
        out.push(*xor);
        out.push(0);
        bits.write_to(&mut out);
    }
    if lookup_table {
        // Rows by commit position; `row_of[entry]` inverts the sort, so that an entry's XOR base
        // (an entry index) becomes a row.
        let mut rows: Vec<usize> = (0..stored.len()).collect();
        rows.sort_by_key(|&e| commit_positions[e]);
        let mut row_of = vec![0u32; stored.len()];
        for (r, &e) in rows.iter().enumerate() {
            row_of[e] = r as u32;
        }
        for &e in &rows {
            let xor_row = match stored[e].0 {
                0 => u32::MAX,
                off => row_of[e - off as usize],
            };
            out.extend_from_slice(&commit_positions[e].to_be_bytes());
            out.extend_from_slice(&offsets[e].to_be_bytes());
            out.extend_from_slice(&xor_row.to_be_bytes());
        }
    }
    if let Some(hashes) = name_hashes {
        for h in hashes {
            out.extend_from_slice(&h.to_be_bytes());
        }
    }
    let digest = sha1dc::digest(&out).map_err(|_| {
        packd_odb::Error::Unsupported("the bitmap's content carries a SHA-1 collision".into())
    })?;
    out.extend_from_slice(digest.as_ref());
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bitmap::PackBitmap;
    use bytes::Bytes;

    fn bits(ones: &[u64]) -> Bitmap {
        let mut b = Bitmap::new();
        for &i in ones {
            b.set(i);
        }
        b
    }

    #[test]
    fn serialized_bitmaps_read_back_with_and_without_the_table() {
        let n = 3000u32;
        let types = [
            bits(&(0..500).collect::<Vec<_>>()),
            bits(&(500..1500).collect::<Vec<_>>()),
            bits(&(1500..2990).collect::<Vec<_>>()),
            bits(&(2990..3000).collect::<Vec<_>>()),
        ];
        // Growing histories: each commit reaches the previous one's objects and a few more,
        // over a dense irregular base (literal words), so that XORing pays.
        let base: Vec<u64> = (0..2000u64).filter(|i| (i * 2654435761) % 7 < 3).collect();
        let plain: Vec<Bitmap> = (0..25u64)
            .map(|k| {
                bits(
                    &base
                        .iter()
                        .copied()
                        .chain(2000..2010 + 30 * k)
                        .collect::<Vec<_>>(),
                )
            })
            .collect();
        let positions: Vec<u32> = (0..25u32).map(|k| (k * 7919) % 500).collect();
        let encoded: Vec<Encoded> = plain.iter().map(Encoded::encode).collect();
        let stored = xor_compress(&encoded, &|_| {});
        assert!(
            stored.iter().skip(1).all(|(off, _)| *off != 0),
            "growing bitmaps XOR well"
        );
        let hashes: Vec<u32> = (0..n).map(|i| i.wrapping_mul(2654435761)).collect();
        let checksum = [9u8; 20];
        for (table, cache) in [(true, true), (false, true), (true, false), (false, false)] {
            let bytes = serialize(
                &checksum,
                &types,
                &positions,
                &stored,
                table,
                cache.then_some(hashes.as_slice()),
            )
            .unwrap();
            let bm = PackBitmap::open(
                Arc::new(packd_storage::MemoryBlob::new(
                    "mem.bitmap",
                    Bytes::from(bytes),
                )),
                &checksum,
                n,
            )
            .unwrap();
            bm.verify_checksum().unwrap();
            assert_eq!(bm.has_lookup_table(), table);
            assert_eq!(bm.used_lookup_table(), table);
            assert_eq!(bm.has_name_hash_cache(), cache);
            assert_eq!(bm.entry_count(), 25);
            for (k, p) in positions.iter().enumerate() {
                assert_eq!(
                    bm.commit_bitmap(*p).unwrap().unwrap(),
                    plain[k],
                    "entry {k}"
                );
            }
            assert_eq!(bm.type_bitmap(packd_odb::ObjectKind::Tree), &types[1]);
            for i in [0u32, 1, 150, 299] {
                let want = cache.then_some(hashes[i as usize]);
                assert_eq!(bm.name_hash(i).unwrap(), want);
            }
        }
    }
}
