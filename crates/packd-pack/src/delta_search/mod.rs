//! Choosing deltas for a pack: git's `pack-objects` delta search (its `find_deltas`), on all
//! cores with the same answer whatever their number.
//!
//! ```text
//! candidates ──> order (kind, name hash, size largest first, position) ──> chunks
//!   (a rule on the ordered list alone: about CHUNK objects, cut where the name hash changes)
//!   ──> each chunk on one thread: a sliding window of `window` objects; each object is tried
//!       against the others in it (newest first), the smallest delta kept
//!   ──> a Choice per candidate: Whole, or Delta against an earlier one in the order
//! ```
//!
//! A base always comes before its target in the order, so no choice makes a cycle, and an
//! object's depth is fixed when it is decided, so no chain grows past `depth` afterwards.
//! The caller writes the pack: whole objects and deltas in an order where each base precedes
//! its deltas (the search's order does; see [`write_order`]).

pub(crate) mod fetch;
mod order;
mod window;

pub use order::write_order;

use packd_odb::{ObjectId, ObjectKind};
use rayon::prelude::*;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

/// How the search runs: git's `pack.*` settings of the same names.
#[derive(Debug, Clone)]
pub struct SearchOptions {
    /// `pack.window`: objects each is tried against (git tries `window - 1` others).
    pub window: usize,
    /// `pack.depth`: the longest delta chain.
    pub depth: u32,
    /// `pack.windowMemory`: bytes the window may hold (objects and their indexes) before its
    /// oldest objects leave it early; 0 is no limit.
    pub window_memory: u64,
    /// Threads to search on; 0 is one per core.
    pub threads: usize,
    /// A time past which no more deltas are made: the objects not decided yet stay whole.
    pub deadline: Option<Instant>,
    /// The zlib level of the compressed deltas (`pack.compression`; git's -1 is 6).
    pub compression_level: i32,
    /// Base-only candidates sort before the others of their name hash (git's order for the
    /// preferred bases of a thin pack); when false they sort by size among them, as objects
    /// of one search would (a repack's second part, offered the first part's objects).
    pub base_only_first: bool,
}

impl Default for SearchOptions {
    /// git's defaults: window 10, depth 50, no window memory limit, every core, no deadline,
    /// zlib level 6.
    fn default() -> SearchOptions {
        SearchOptions {
            window: 10,
            depth: 50,
            window_memory: 0,
            threads: 0,
            deadline: None,
            compression_level: 6,
            base_only_first: true,
        }
    }
}

/// An object the search decides for (or one that may only be a base).
#[derive(Debug, Clone)]
pub struct Candidate {
    /// The object.
    pub id: ObjectId,
    /// Its kind: deltas are made only against objects of the same kind.
    pub kind: ObjectKind,
    /// Its size, inflated (what `load` returns is this long).
    pub size: u64,
    /// git's name hash of the path it was reached by (`packd_reach::bitmap::build::name_hash`),
    /// 0 for none: objects of one path meet in the window.
    pub name_hash: u32,
    /// A base only: may serve as a base (a thin fetch's object the client has, git's
    /// "preferred base"), is never itself given a delta or written.
    pub base_only: bool,
    /// For a base-only candidate, the depth of the delta chain it already ends (0: stored
    /// whole): a delta against it is one deeper, and none is made past `depth`.
    pub base_depth: u32,
    /// The longest chain of deltas decided elsewhere (reused from disk) that already rests on
    /// this candidate: a delta given to it deepens those chains too, so its own chain may be
    /// only `depth - above` long (git's `check_delta_limit`).
    pub above: u32,
}

/// What the search chose for one candidate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Choice {
    /// Written whole (also every base-only candidate).
    Whole,
    /// Written as a delta against candidate `base`.
    Delta {
        /// The base: an index into the candidates.
        base: u32,
        /// The chain's depth from this object down to a whole one (1: the base is whole).
        depth: u32,
        /// Bytes of the delta, inflated.
        delta_size: u64,
        /// The delta, zlib-compressed, ready to write (a slice of a buffer shared by the
        /// deltas of its chunk of the search).
        compressed: bytes::Bytes,
    },
}

/// Objects smaller than this are not worth a delta (git's limit, in `prepare_pack`).
const SMALLEST: u64 = 50;

/// Objects larger than this are not searched (git's `core.bigFileThreshold` default).
const LARGEST: u64 = 512 << 20;

/// About this many ordered objects make one chunk (one thread's run of the window).
const CHUNK: usize = 2048;

/// Chooses, for each of `candidates`, whether it is written whole or as a delta against
/// another, as git's `pack-objects` does. `load(i)` gives candidate `i`'s inflated bytes (it
/// is called from several threads, and again for an object that left a window and came back
/// into another chunk's); `progress(n)` is told the number of candidates decided so far, from
/// any thread. The answer is the same for the same candidates whatever `options.threads`,
/// unless a deadline cut the search short. The first error of `load` ends the search.
pub fn search<E: Send>(
    candidates: &[Candidate],
    options: &SearchOptions,
    load: &(dyn Fn(u32) -> Result<bytes::Bytes, E> + Sync),
    progress: &(dyn Fn(u64) + Sync),
) -> Result<Vec<Choice>, E> {
    search_where(candidates, options, load, progress, &|_, _| true)
}

/// [`search`], trying candidate `base` for candidate `target` only where
/// `may_base(target, base)`: for a writer whose order is fixed (a fetch streams objects in
/// the plan's order, and a delta's base must come before it or be one the client has).
pub fn search_where<E: Send>(
    candidates: &[Candidate],
    options: &SearchOptions,
    load: &(dyn Fn(u32) -> Result<bytes::Bytes, E> + Sync),
    progress: &(dyn Fn(u64) + Sync),
    may_base: &(dyn Fn(u32, u32) -> bool + Sync),
) -> Result<Vec<Choice>, E> {
    let mut choices = vec![Choice::Whole; candidates.len()];
    if options.window < 2 || options.depth == 0 || candidates.len() < 2 {
        progress(candidates.len() as u64);
        return Ok(choices);
    }
    let searched: Vec<u32> = (0..candidates.len() as u32)
        .filter(|&i| {
            let size = candidates[i as usize].size;
            (SMALLEST..=LARGEST).contains(&size)
        })
        .collect();
    let ordered = order::window_order(candidates, searched, options.base_only_first);
    let chunks = order::chunks(candidates, &ordered, CHUNK);
    let done = AtomicU64::new((candidates.len() - ordered.len()) as u64);
    // The objects are read for the request this thread serves: rayon's threads count in its
    // store scope.
    let reads = packd_storage::RequestReads::current();
    let run = || {
        chunks
            .par_iter()
            .map(|chunk| {
                let _in = reads.as_ref().map(packd_storage::RequestReads::enter);
                window::search_chunk(candidates, chunk, options, load, may_base, &|n| {
                    progress(done.fetch_add(n, Ordering::Relaxed) + n)
                })
            })
            .collect::<Result<Vec<_>, E>>()
    };
    let found = if options.threads == 0 {
        run()?
    } else {
        match rayon::ThreadPoolBuilder::new()
            .num_threads(options.threads)
            .build()
        {
            Ok(pool) => pool.install(run)?,
            Err(e) => {
                tracing::warn!(
                    "a pool of {} threads: {e}; searching on the global one",
                    options.threads
                );
                run()?
            }
        }
    };
    for (target, choice) in found.into_iter().flatten() {
        choices[target as usize] = choice;
    }
    Ok(choices)
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod quality;
