//! Keeping a long-running server's resident memory to what its requests use.
//!
//! A clone of a large repository allocates tens of megabytes (its object list, the walk's
//! sets, buffers) on several threads. Two habits of glibc's allocator keep that memory
//! resident after the request:
//! - its mmap threshold adapts: once a large block is freed, blocks up to that size (up to
//!   32 MiB) come from the arenas instead of their own maps, and freed they stay in the arena;
//! - what other freed blocks leave in the per-thread arenas is not handed back either.
//!
//! So the next large clone allocated on top of the last one's leftovers: on git/git after a
//! push (every entry rewritten), a running server's second mirror clone peaked at 106-113 MB
//! against the first's 89-91 MB, and 50-60 MB stayed resident between clones.
//!
//! Fixing the mmap threshold also fixes the threshold above which free memory at the top of
//! an arena is handed back at once, at 128 KiB: arenas then shrank and grew again by about a
//! window (1 MiB) hundreds of times a clone, which cost a branch-and-tag clone of git/git 16%
//! more CPU. It is set above that. (It must stay low: the trim after a request does not
//! shrink the tops of the per-thread arenas, only what lies free within them.)

/// Blocks of at least this size get their own map, returned to the system when freed. Above
/// the 1 MiB windows the pack writer reads entries through: at 1 MiB each window was a new map,
/// faulted in a page at a time as it was read into, then unmapped (5% of the CPU of a clone
/// of git/git's branches and tags in page faults; a mean of 0.52 s against 0.56 s over three
/// rounds of 4 clones alternating the two builds).
const MMAP_THRESHOLD: i32 = 2 << 20;

/// Free memory at the top of an arena beyond this is handed back when a block is freed.
const TRIM_THRESHOLD: i32 = 4 << 20;

/// Requests that sent or received fewer objects than this allocated too little to trim for.
const TRIM_AFTER_OBJECTS: u64 = 65_536;

/// Fixes the allocator's mmap threshold (which also stops it adapting), so that large
/// buffers are returned to the system when freed, and its trim threshold; called once when
/// the server starts.
pub fn tune_for_serving() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only sets parameters of the allocator; it is called before the
    // server's threads start.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, MMAP_THRESHOLD);
        libc::mallopt(libc::M_TRIM_THRESHOLD, TRIM_THRESHOLD);
    }
}

/// Returns freed heap memory to the system when a request moved `objects` objects, enough
/// for its allocations to matter; small requests skip it (a trim walks every arena).
pub fn release_after(objects: u64) {
    if objects < TRIM_AFTER_OBJECTS {
        return;
    }
    packd_storage::trim_heap();
}
