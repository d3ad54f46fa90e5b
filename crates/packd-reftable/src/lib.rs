//! Git's reftable format and a stack of reftables kept in packd's storage layer.
//!
//! A repository's refs live in `reftable/` as immutable tables and a small list of them,
//! `tables.list` (oldest first). Readers take a [`Snapshot`]: the list and the tables it
//! names, merged (the newest table saying something about a ref wins; a tombstone hides the
//! ref). Writers ([`Stack::apply`]) add a table of their updates and swap the list by
//! compare-and-swap ([`packd_storage::Storage::replace`]), so that several packd servers can
//! update one bucket: a writer that loses the race reads the list again and retries as long as
//! the refs it updates still have the values it expected. Tables are merged geometrically
//! ([`Stack::compact`]) and tables no longer listed are deleted after a grace period
//! ([`Stack::sweep`]).
//!
//! [`format`] reads and writes single tables (version 1, SHA-1), by ranges of a
//! [`packd_storage::Blob`].

mod compact;
pub mod format;
mod merge;
mod stack;
mod sweep;

pub use compact::suggest_compaction;
pub use format::reader::{LogIter, RefIter, Table};
pub use format::record::{LogRecord, LogUpdate, ObjectId, RefRecord, RefValue, ZERO_ID};
pub use format::writer::{write_table, WriteOptions};
pub use stack::{
    hex, Applied, Expected, RefUpdate, Reflog, Snapshot, Stack, StackOptions, TABLES_LIST,
};
pub use sweep::Swept;

use packd_storage::StorageError;

/// Why reading or writing refs failed.
#[derive(Debug, thiserror::Error)]
pub enum ReftableError {
    /// A table (or `tables.list`) holds bytes that are not what the format allows.
    #[error("{table}: offset {offset}: {what}")]
    Corrupt {
        /// The table's name (its blob's).
        table: String,
        /// The offset of the bad bytes in it.
        offset: u64,
        /// What is wrong.
        what: String,
    },
    /// The storage failed.
    #[error(transparent)]
    Storage(#[from] StorageError),
    /// Records that cannot be written (out of order, too large, outside the update index range).
    #[error("{0}")]
    Invalid(String),
    /// An update's expected old value is not the ref's value: someone else changed the ref.
    #[error("{refname}: expected {expected}, but it is {actual}")]
    OldValueMismatch {
        /// The ref.
        refname: String,
        /// What the caller expected.
        expected: String,
        /// What the stack holds.
        actual: String,
    },
    /// Other writers kept winning the race for `tables.list`.
    #[error("{list}: gave up after {attempts} attempts lost to other writers")]
    TooManyConflicts {
        /// The list's description.
        list: String,
        /// Attempts made.
        attempts: u32,
    },
}
