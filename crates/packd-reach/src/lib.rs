//! Reachability: which objects a set of tips reaches, minus what another set reaches.
//!
//! ```text
//! walk.rs      commits and trees parsed and walked (no bitmaps needed)
//! ewah.rs      git's EWAH compressed bitmaps, decoded into plain bitmaps
//! bitmap/      a pack's (or multi-pack-index's) .bitmap: type and commit bitmaps
//! rev_index.rs a pack's .rev: index positions in pack order
//! ```
//! The bitmap readers are checked against git's files; queries do not use them yet (the walk
//! answers everything), which is the next step.

pub mod bitmap;
pub mod ewah;
pub mod rev_index;
pub mod walk;
