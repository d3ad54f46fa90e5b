//! packd's object database: reads any git repository's objects exactly as git does.
//!
//! ```text
//! Repository ── config, refs
//!     └─ ObjectDb ── objects dir + alternates
//!          ├─ multi-pack-index ─┐
//!          ├─ Pack = .pack + .idx ── decode (delta chains) ── DeltaBaseCache (shared budget)
//!          └─ LooseStore
//! every byte read through packd_storage::{Storage, Blob}
//! ```
//! Everything here is safe to share between threads: many readers decode objects at once.

pub mod cache;
pub mod config;
pub mod delta;
mod error;
pub mod existence;
pub mod file_mode;
pub mod graph;
pub mod hash;
pub mod hide_refs;
pub mod id_set;
pub mod loose;
mod object;
pub mod odb;
pub mod pack;
pub mod packed_refs;
pub mod parse;
pub mod prefetch;
pub mod quarantine;
pub mod refs;
pub mod repository;
pub mod revision;
pub mod revision_arg;
pub mod zlib;

pub use error::{Error, Result};

/// Work on fewer objects than this (a small push's deltas and checks) runs on the calling
/// thread: starting the thread pool would cost more than the work.
pub(crate) const PARALLEL_FROM: usize = 512;
pub use hash::{hex, HashKind, ObjectId, Prefix};
pub use id_set::{IdMap, IdSet, OffsetMap, OffsetSet};
pub use object::{Object, ObjectHeader, ObjectKind};
pub use odb::{
    IdOrder, Location, ObjectDb, OpenOptions, PrefixMatch, SERVING_CACHE_BUDGET, SERVING_MAP_BUDGET,
};
pub use repository::{NameMatch, Repository, RepositoryOptions};
