//! Cruft packs: unreachable objects kept in one pack with their mtimes (an `.mtimes` file
//! beside it), as `git gc --cruft` keeps them, until they are older than `gc.pruneExpire`
//! (two weeks by default); then they are dropped, except those a push in progress may still
//! reference (see [`prune`] for how that race is closed).
//!
//! ```text
//! old packs, loose objects ──> collect (what `reachable` lacks, with its newest mtime)
//!      ──> expire (older than the expiry and reached by no recent one: dropped)
//!      ──> cruft pack (pack, .idx, .mtimes) ──> prune under the prune lock: refs re-read,
//!          what they newly reach rescued, then the old packs and loose objects deleted
//! ```

pub mod expire;
pub mod mtimes;
