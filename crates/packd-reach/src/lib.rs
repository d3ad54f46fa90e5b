//! Reachability: which objects a set of tips reaches, minus what another set reaches.
//!
//! ```text
//! walk.rs      commits and trees parsed and walked (no bitmaps needed)
//! ewah.rs      git's EWAH compressed bitmaps, decoded into plain bitmaps
//! ewah_encode.rs  plain bitmaps encoded as EWAH (for writing bitmaps)
//! bitmap/      a pack's (or multi-pack-index's) .bitmap: type and commit bitmaps
//! rev_index.rs a pack's .rev: index positions in pack order
//! bitmapped.rs the objects a bitmap numbers (a pack's or a multi-pack-index's), in both orders
//! bitmap_walk.rs  the same questions answered from bitmaps, with a fill-in walk
//! tree_diff.rs the entries of a tree its delta base lacks (what a fill-in walk must look up)
//! last_at_path.rs  the last tree a fill-in walk read at each path (compared with the next)
//! kept_walk.rs a large fill-in walk's answer kept on disk for a server started again
//! commit_graph/  writing git's commit-graph (objects/info/commit-graph)
//! progress.rs  the one progress trait every long writer reports to (bars, side-band 2)
//! publish.rs   the files written here put through the storage layer's write operations
//! ```
//! Queries with `exact` use the bitmaps when a pack has them; the walk answers the rest.

pub mod bitmap;
pub mod bitmap_walk;
mod bitmapped;
pub mod commit_graph;
pub mod ewah;
pub mod ewah_encode;
mod kept_walk;
mod last_at_path;
pub mod progress;
mod publish;
pub mod rev_index;
mod tree_diff;
pub mod walk;
