//! Pack generation for fetches: what to send (counting with bitmaps) and the pack stream, reusing
//! on-disk entries.
//!
//! The protocol layer (`packd-protocol`) negotiates with the client and then hands a
//! [`FetchRequest`] to a [`PackServer`], a long-lived per-repository object that keeps indexes and
//! bitmaps loaded between requests. [`PackServer::plan`] counts the objects to send (and computes
//! the shallow boundary for shallow requests); [`PackServer::write`] streams the pack.
//!
//! ```text
//! FetchRequest ──> shallow (walk::shallow_updates) ──> count (bitmaps, or walk::count)
//!              ──> PackPlan (objects in write order, what the client has)
//!              ──> write (reuse on-disk entries; whole objects where no delta is valid)
//! ```
//!
//! A clone (no haves, no shallow) may instead be answered from the [`clone_cache`], where the
//! packs of earlier identical clones are kept.

pub mod clone_cache;
mod count;
mod delta_encode;
pub mod delta_search;
mod recipe;
use recipe::RecipeWriter;
mod walk;
mod write;

use packd_odb::pack::Pack;
use packd_odb::{ObjectId, Repository};
use packd_reach::bitmap_walk::BitmapIndex;
use packd_reach::progress::Progress;
pub use packd_storage::FileRange;
use std::io::Write;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

/// Objects from which a plan counts as large: after counting one, the walk's memory is handed
/// back before writing (see [`PackServer::release_walk_memory`]). Small fetches keep the
/// index pages they share with the next fetch.
const LARGE_PLAN: u32 = 100_000;

/// Why a pack could not be planned or written.
#[derive(Debug, thiserror::Error)]
pub enum PackError {
    /// Reading the repository failed.
    #[error(transparent)]
    Odb(#[from] packd_odb::Error),
    /// The client asked for something the server does not have or will not give.
    #[error("{0}")]
    BadRequest(String),
    /// The client went away or the server is shutting down.
    #[error("the fetch was cancelled")]
    Cancelled,
    /// Writing to the client failed.
    #[error("writing the pack failed: {0}")]
    Io(#[from] std::io::Error),
}

/// How deep a shallow fetch goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Deepen {
    /// `deepen N`: N commits from each want (with `deepen-relative`, N more than the client has).
    Depth {
        /// The depth.
        depth: u32,
        /// `deepen-relative`.
        relative: bool,
    },
    /// `deepen-since T` and `deepen-not REF` lines, either or both: the commits no older than
    /// T (seconds since the epoch, when given) that none of `not` reaches, reached from the
    /// wants through such commits; with both, also none that a commit older than T reaches
    /// (git's rev-list `--max-age` then limits its walk).
    SinceNot {
        /// `deepen-since`.
        since: Option<i64>,
        /// `deepen-not`: the ids the named refs point at.
        not: Vec<ObjectId>,
    },
}

/// A partial-clone filter (`filter` in the protocol).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Filter {
    /// `blob:none`.
    BlobNone,
    /// `blob:limit=N`: blobs of at least N bytes are left out.
    BlobLimit(u64),
    /// `tree:N`: trees and blobs deeper than N are left out (`tree:0`: commits and tags only).
    TreeDepth(u64),
}

/// What the client asked for, after negotiation.
#[derive(Debug, Clone, Default)]
pub struct FetchRequest {
    /// Objects the client wants (usually ref tips; any object with allow-*-in-want).
    pub wants: Vec<ObjectId>,
    /// Objects the client has that the server also has (the common ones found in negotiation).
    pub haves: Vec<ObjectId>,
    /// The client's current shallow boundary (`shallow` lines).
    pub client_shallow: Vec<ObjectId>,
    /// A shallow request, if any.
    pub deepen: Option<Deepen>,
    /// A partial-clone filter, if any.
    pub filter: Option<Filter>,
    /// The client accepts deltas against objects it has but that are not in the pack.
    pub thin: bool,
    /// The client accepts offset deltas.
    pub ofs_delta: bool,
    /// Send annotated tags that point at objects being sent.
    pub include_tag: bool,
}

/// A change to the client's shallow boundary, sent before the pack.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ShallowUpdate {
    /// The commit is now a shallow boundary on the client.
    Shallow(ObjectId),
    /// The commit is no longer shallow on the client.
    Unshallow(ObjectId),
}

/// Where a pack stream goes: a writer that may also send ranges of a pack file as they are,
/// without their bytes passing through packd (a socket, by `sendfile`): a pack that is the whole
/// answer (a mirror clone after `repack -adb`) then costs the server almost nothing to send.
pub trait PackSink: Write {
    /// Whether [`PackSink::send_file_range`] can be used; otherwise the bytes are read and
    /// written.
    fn takes_file_ranges(&self) -> bool {
        false
    }

    /// Sends the bytes of `range` as the next bytes of the stream. Called only when
    /// [`PackSink::takes_file_ranges`] says so.
    fn send_file_range(&mut self, range: &FileRange) -> std::io::Result<()> {
        let _ = range;
        Err(std::io::Error::new(
            std::io::ErrorKind::Unsupported,
            "this output takes no file ranges",
        ))
    }
}

impl PackSink for Vec<u8> {}
impl PackSink for std::fs::File {}
impl PackSink for std::io::Sink {}
impl PackSink for std::io::Stdout {}
impl PackSink for std::io::StdoutLock<'_> {}
impl<W: Write> PackSink for std::io::BufWriter<W> {}

/// The objects a fetch will send, counted; pass it to [`PackServer::write`].
pub struct PackPlan {
    /// Shallow boundary changes to tell the client before the pack.
    pub shallow: Vec<ShallowUpdate>,
    /// Number of objects the pack will hold.
    pub object_count: u32,
    planned: count::Planned,
    ofs_delta: bool,
    thin: bool,
    /// Whether the pack comes from, or goes into, the clone cache.
    cache: Option<clone_cache::CacheUse>,
}

impl PackPlan {
    /// A plan of nothing yet, with `request`'s pack options: what a cached answer fills in.
    fn empty(request: &FetchRequest) -> PackPlan {
        PackPlan {
            shallow: Vec::new(),
            object_count: 0,
            planned: count::Planned::default(),
            ofs_delta: request.ofs_delta,
            thin: request.thin,
            cache: None,
        }
    }
}

impl std::fmt::Debug for PackPlan {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PackPlan")
            .field("shallow", &self.shallow)
            .field("object_count", &self.object_count)
            .finish_non_exhaustive()
    }
}

/// What a written pack held, for access logs.
#[derive(Debug, Clone, Copy, Default)]
pub struct PackStats {
    /// Objects in the pack.
    pub objects: u32,
    /// Bytes of the pack, header and trailer included.
    pub bytes: u64,
    /// Entries copied from disk as they were.
    pub reused: u32,
    /// Of those, deltas.
    pub reused_deltas: u32,
    /// Deltas made for this pack (objects whose delta on disk could not be sent).
    pub new_deltas: u32,
}

/// Pack generation for one repository, kept loaded between requests.
pub struct PackServer {
    repo: Arc<Repository>,
    /// The repository's bitmap index, if it has a usable one: loaded by the first request that
    /// needs it, to count objects or to check a want's reachability (see
    /// [`PackServer::bitmap`]), so that a process that only lists refs (`git ls-remote` over
    /// ssh) does not read it.
    bitmap: std::sync::OnceLock<Option<BitmapIndex>>,
    /// Every bit of the bitmap index with a name-hash, as `hash << 32 | bit`, sorted (bits
    /// ascending within a hash), built on first use: versions of one path, the candidates for
    /// a delta when an object's own delta base cannot be sent.
    by_name_hash: std::sync::OnceLock<Vec<u64>>,
    /// Whether this serves one request and exits (see [`PackServer::for_one_request`]).
    one_request: bool,
    /// Where clone packs are kept, if they are.
    clone_cache: Option<clone_cache::CloneCacheConfig>,
}

impl PackServer {
    /// Pack generation over `repo`. Its bitmap index, if it has one, is loaded by the first
    /// request that needs it (see [`PackServer::bitmap`]).
    pub fn open(repo: Arc<Repository>) -> PackServer {
        PackServer {
            repo,
            bitmap: std::sync::OnceLock::new(),
            by_name_hash: std::sync::OnceLock::new(),
            one_request: false,
            clone_cache: None,
        }
    }

    /// Tunes this for a process that serves one request and exits (`packd upload-pack`, as
    /// over ssh): what a long-lived server builds once and keeps for every request is then
    /// avoided where a few lookups do. For now, the table of every object by name-hash (for
    /// new deltas): the first name-hashes are found by scanning the bitmap's name-hash cache
    /// (see `write::SCANS_BEFORE_TABLE`).
    pub fn for_one_request(mut self) -> PackServer {
        self.one_request = true;
        self
    }

    /// Keeps the packs of clones in `cache`, so that an identical clone later is a file copy
    /// (see [`clone_cache`]). A budget of 0 bytes keeps none.
    pub fn with_clone_cache(mut self, cache: clone_cache::CloneCacheConfig) -> PackServer {
        self.clone_cache = (cache.max_bytes > 0).then_some(cache);
        self
    }

    /// The repository served.
    pub fn repository(&self) -> &Arc<Repository> {
        &self.repo
    }

    /// The repository's bitmap index, loaded on first use (by counting, or by upload-pack's
    /// reachability checks): one copy for every request. A bitmap that cannot be read is
    /// skipped with one warning, as a damaged one is (see [`BitmapIndex::open`]): every request
    /// then walks, rather than some failing and others walking.
    pub fn bitmap(&self) -> Option<&BitmapIndex> {
        self.bitmap
            .get_or_init(|| match BitmapIndex::open(&self.repo) {
                Ok(loaded) => {
                    // A large fill-in walk's answer survives the server (see
                    // `BitmapIndex::keep_walks_in`).
                    if let Some(index) = &loaded {
                        index.keep_walks_in(&self.repo.git_dir().join("packd-cache").join("walk"));
                    }
                    loaded
                }
                Err(e) => {
                    tracing::warn!(
                        "{}: the bitmap cannot be read, so requests walk: {e}",
                        self.repo.git_dir().display()
                    );
                    None
                }
            })
            .as_ref()
    }

    /// The bitmap index if counting loaded it. Writing uses this: a plan whose haves are bits
    /// ([`count::Had::Bits`]) was counted with the bitmap, so it is there, and a walked plan
    /// (a shallow fetch) must not load it in the middle of the pack.
    fn loaded_bitmap(&self) -> Option<&BitmapIndex> {
        self.bitmap.get().and_then(Option::as_ref)
    }

    /// The shallow boundary changes a shallow request makes (`deepen*` lines and the client's
    /// `shallow` lines; haves play no part). Protocol v0/v1 sends these before negotiation, so
    /// they are computed on their own; [`PackServer::plan`] computes the same again.
    pub fn shallow(&self, request: &FetchRequest) -> Result<Vec<ShallowUpdate>, PackError> {
        let never = AtomicBool::new(false);
        Ok(walk::shallow_updates(&self.repo, request, &never)?.0)
    }

    /// Counts the objects to send for `request`. Checks `cancel` regularly.
    pub fn plan(
        &self,
        request: &FetchRequest,
        progress: &dyn Progress,
        cancel: &AtomicBool,
    ) -> Result<PackPlan, PackError> {
        // The tags are listed once: the cache key names them, and counting takes the tags to
        // include and the wanted tags' peeled values from the same list, so that a kept pack
        // holds the tags its key names.
        let tag_refs = self.tag_refs_for(request)?;
        let mut cache = None;
        if let Some(config) = &self.clone_cache {
            if let Some(key) = clone_cache::key(request, &tag_refs) {
                if let Some(plan) = self.cached_plan(config, &key, request, progress)? {
                    return Ok(plan);
                }
                cache = Some(clone_cache::CacheUse::Fill(key));
            }
        }
        let (shallow, deepened) = walk::shallow_updates(&self.repo, request, cancel)?;
        let planned = self.count(request, deepened.as_ref(), &tag_refs, progress, cancel)?;
        let object_count = u32::try_from(planned.len())
            .map_err(|_| PackError::BadRequest("more than 2^32 objects to send".into()))?;
        if object_count >= LARGE_PLAN {
            self.release_walk_memory();
        }
        if let (Some(config), Some(clone_cache::CacheUse::Fill(_))) = (&self.clone_cache, &cache) {
            if object_count < config.min_objects {
                cache = None;
            }
        }
        Ok(PackPlan {
            shallow,
            object_count,
            planned,
            ofs_delta: request.ofs_delta,
            thin: request.thin,
            cache,
        })
    }

    /// The plan of a clone the cache answers (under `key`): a copy, a recipe whose packs are
    /// all there, or a record of a pack that is there. `None` when there is no usable answer;
    /// one that can no longer be used is dropped.
    fn cached_plan(
        &self,
        config: &clone_cache::CloneCacheConfig,
        key: &str,
        request: &FetchRequest,
        progress: &dyn Progress,
    ) -> Result<Option<PackPlan>, PackError> {
        let (objects, cache) = match config.lookup(key) {
            None => return Ok(None),
            Some(clone_cache::Cached::Copy(cached)) => {
                (cached.stats.objects, clone_cache::CacheUse::Copy(cached))
            }
            Some(clone_cache::Cached::Recipe(cached)) => {
                let packs: Vec<Arc<Pack>> = self.repo.objects().packs().cloned().collect();
                let loaded = match config.load(&cached, &packs) {
                    Ok(loaded) => loaded,
                    Err(clone_cache::Unusable::Stale) => {
                        config.forget_recipe(key);
                        return Ok(None);
                    }
                    Err(clone_cache::Unusable::Unreadable) => return Ok(None),
                };
                (loaded.stats.objects, clone_cache::CacheUse::Replay(loaded))
            }
            // A record: the repository's pack of that checksum, sent whole, is the answer
            // while it is there.
            Some(clone_cache::Cached::Record(name)) => match self.repository_pack(&name)? {
                Some(pack) => {
                    progress.start("Enumerating objects", 0);
                    progress.finish(pack.len() as u64);
                    return Ok(Some(PackPlan {
                        object_count: pack.len(),
                        planned: count::Planned {
                            whole: Some(pack),
                            ..count::Planned::default()
                        },
                        ..PackPlan::empty(request)
                    }));
                }
                None => {
                    tracing::debug!("clone record {key}: pack {name} is gone");
                    config.forget(key, &name);
                    return Ok(None);
                }
            },
        };
        progress.start("Enumerating objects", 0);
        progress.finish(objects as u64);
        Ok(Some(PackPlan {
            object_count: objects,
            cache: Some(cache),
            ..PackPlan::empty(request)
        }))
    }

    /// The repository's pack whose checksum is `name` (hex), if it is there and its file is
    /// a stream of all its entries as it is.
    fn repository_pack(&self, name: &str) -> Result<Option<Arc<Pack>>, PackError> {
        for pack in self.repo.objects().packs() {
            if clone_cache::pack_key(pack) == name && write::sends_as_is(pack)? {
                return Ok(Some(pack.clone()));
            }
        }
        Ok(None)
    }

    /// Hands back what a long counting walk left resident and the writing does not need: the
    /// pages of the packs' and indexes' maps it touched (the index of a 841,000-object pack is
    /// 23 MB, all of it touched by the lookups of a walk over thousands of tips; the writer reads
    /// a pack with `read_copy`, and what it looks up maps again), the delta base cache the walk
    /// filled with its trees, and the heap the walk freed, which glibc would otherwise keep in
    /// the walking threads' arenas. Without this a running server starts its next large
    /// request with the last one's pages still resident, and its walk's cache replacements
    /// land in another thread's arena while the old entries' pages stay (a second mirror
    /// clone of git/git peaked 25 MB above the first).
    fn release_walk_memory(&self) {
        let objects = self.repo.objects();
        for pack in objects.packs() {
            pack.index().release_pages();
            pack.data().release_pages();
        }
        objects.cache().clear();
        packd_storage::trim_heap();
    }

    /// Streams the pack for `plan` to `out`, in bounded memory. Checks `cancel` regularly.
    pub fn write(
        &self,
        plan: PackPlan,
        out: &mut dyn PackSink,
        progress: &dyn Progress,
        cancel: &AtomicBool,
    ) -> Result<PackStats, PackError> {
        // An answer that is a pack file of the repository is kept as a record of it (its
        // cache entry and the pack's checksum); one that copies a pack's entries in one run as
        // its recipe; any other as a copy (see `clone_cache`).
        let mut fill = match (&self.clone_cache, &plan.cache) {
            (_, Some(clone_cache::CacheUse::Copy(cached))) => {
                return clone_cache::send(cached, out, progress, cancel);
            }
            (_, Some(clone_cache::CacheUse::Replay(loaded))) => {
                return write::replay(
                    &loaded.recipe,
                    &loaded.packs,
                    &loaded.stats,
                    out,
                    progress,
                    cancel,
                );
            }
            (Some(config), Some(clone_cache::CacheUse::Fill(key))) => {
                let keep = match write::sent_whole(&plan.planned, plan.ofs_delta)? {
                    Some(pack) => Some(Keep::Record(clone_cache::pack_key(pack))),
                    None => match write::replays_cheaply(&plan.planned) {
                        Some(pack) => Some(Keep::Recipe(RecipeWriter::new(), pack.clone())),
                        None => config.start_copy(key).map(Keep::Copy),
                    },
                };
                keep.map(|keep| (config, key, keep))
            }
            _ => None,
        };
        let stats = match &mut fill {
            Some((_, _, Keep::Copy(copying))) => {
                let mut tee = clone_cache::Tee { out, copying };
                self.write_planned(&plan, &mut tee, progress, cancel)?
            }
            Some((_, _, Keep::Recipe(recipe, pack))) => self.write_whole_pack_then(
                pack,
                &plan.planned.after_whole,
                out,
                progress,
                cancel,
                Some(recipe),
            )?,
            _ => self.write_planned(&plan, out, progress, cancel)?,
        };
        match fill {
            Some((config, key, Keep::Record(name))) => config.keep_record(key, &name, &stats),
            Some((config, key, Keep::Recipe(recipe, _))) => config.finish(key, recipe, &stats),
            Some((config, _, Keep::Copy(copying))) => config.finish_copy(copying, &stats),
            None => {}
        }
        Ok(stats)
    }
}

/// How a clone being written is kept in the clone cache.
enum Keep {
    /// As a record naming the repository's pack it is, by checksum (hex).
    Record(String),
    /// As a recipe, recorded while it is written: the stream is this pack's entries, then
    /// the objects stored elsewhere (see `write::replays_cheaply`).
    Recipe(RecipeWriter, Arc<Pack>),
    /// As a copy, written while it is sent.
    Copy(clone_cache::Copying),
}

#[cfg(test)]
mod tests {
    #[test]
    fn pack_server_is_shareable_across_threads() {
        fn assert_send_sync<T: Send + Sync>() {}
        assert_send_sync::<super::PackServer>();
    }
}
