//! Cruft packs: unreachable objects kept in one pack with their mtimes (an `.mtimes` file
//! beside it), as `git gc --cruft` keeps them, until they are older than `gc.pruneExpire`
//! (two weeks by default); then they are dropped, except those a push in progress may still
//! reference (see [`mod@prune`] for how that race is closed).
//!
//! ```text
//! old packs, loose objects ──> collect (what `reachable` lacks, with its newest mtime)
//!      ──> expire (older than the expiry and reached by no recent one: dropped)
//!      ──> cruft pack (pack, .idx, .mtimes) ──> prune under the prune lock: refs re-read,
//!          what they newly reach rescued, then the old packs and loose objects deleted
//! ```
//!
//! How a repack uses it, holding the maintenance lock ([`crate::lock::try_maintenance`]):
//!
//! ```text
//! options = CruftOptions::from_config(repo, now)          gc.pruneExpire; or
//!           CruftOptions { expire: expire::parse("--cruft-expiration", value, now)? }
//! write the reachable pack(s); reachable(id) = "they hold id"
//! outcome = write_cruft_pack(repo, reachable, old_packs, options)
//! (multi-pack-index, bitmap of the new packs)
//! prune(repo, reachable, outcome, old_packs, new pack names)   the only deleting step
//! ```

pub mod collect;
pub mod expire;
pub mod mtimes;
pub mod prune;
mod write;

pub use prune::{prune, Pruned};
pub use write::{write_cruft_pack, CruftOutcome};

use std::time::SystemTime;

/// Why a cruft pack could not be written or the old objects not pruned.
#[derive(Debug, thiserror::Error)]
pub enum CruftError {
    /// Reading an object, a pack or the refs failed.
    #[error(transparent)]
    Odb(#[from] packd_odb::Error),
    /// The storage layer failed (creating, publishing or deleting a file).
    #[error(transparent)]
    Storage(#[from] packd_storage::StorageError),
    /// An old cruft pack's `.mtimes` is damaged.
    #[error(transparent)]
    Mtimes(#[from] mtimes::MtimesError),
    /// The expiry setting is not a date.
    #[error(transparent)]
    Expiry(#[from] expire::ExpiryError),
    /// Writing the cruft pack failed.
    #[error(transparent)]
    PackFile(#[from] crate::pack_file::PackFileError),
    /// The prune lock could not be taken.
    #[error(transparent)]
    Lock(#[from] crate::lock::LockError),
    /// A file's time could not be read, or a local file operation failed.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// Something packd does not do here (a repository whose objects live elsewhere).
    #[error("{0}")]
    Unsupported(String),
}

/// How a cruft pack is written.
#[derive(Debug, Clone, Copy, Default)]
pub struct CruftOptions {
    /// Unreachable objects last written at or before this time are dropped (unless a recent
    /// one reaches them); `None` keeps them all (`gc.pruneExpire=never`).
    pub expire: Option<SystemTime>,
}

impl CruftOptions {
    /// The options `gc.pruneExpire` of `repo` sets (two weeks before `now` when unset).
    pub fn from_config(
        repo: &packd_odb::Repository,
        now: SystemTime,
    ) -> Result<CruftOptions, CruftError> {
        Ok(CruftOptions {
            expire: expire::from_config(repo.config(), now)?,
        })
    }
}
