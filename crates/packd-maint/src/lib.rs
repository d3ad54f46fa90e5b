//! Keeping repositories fast by themselves: writing new packs with a real delta search
//! (`packd repack`), keeping unreachable objects in cruft packs until they expire, and the
//! maintenance `packd serve` runs after pushes (geometric repacks with a multi-pack-index and
//! its bitmap), all written through the storage layer's write operations.
//!
//! ```text
//! refs ──> count (reachable objects, names, recency) ──> reuse on-disk deltas | delta_search
//!      ──> pack_file (pack, .idx, .rev written and published) ──> bitmap, commit-graph
//!      ──> old packs deleted once the new set is durable
//! ```

pub mod append;
pub mod auto_policy;
pub mod cruft;
pub mod geometric;
pub mod lock;
pub mod maintenance;
pub mod pack_file;
pub mod repack;
pub mod roll_up;
