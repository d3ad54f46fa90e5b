//! The errors of the object database. Each reads as a sentence that names the file and, for damage
//! inside a file, the byte offset where it was found.

use packd_storage::StorageError;

/// Why an object database operation failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Reading bytes failed (missing file, I/O error, a read past the end).
    #[error(transparent)]
    Storage(#[from] StorageError),
    /// A file's content contradicts its format: the file and the offset of the damage.
    #[error("{file}: offset {offset}: {what}")]
    Corrupt {
        /// The file (path or key).
        file: String,
        /// The byte offset in that file where the damage was found.
        offset: u64,
        /// What is wrong.
        what: String,
    },
    /// The repository uses something packd cannot read yet.
    #[error("{0}")]
    Unsupported(String),
    /// No repository where one was expected.
    #[error("not a git repository: {0}")]
    NotARepository(String),
    /// A request that names nothing (a malformed name, an ambiguous prefix).
    #[error("{0}")]
    BadName(String),
    /// A local file operation outside the storage layer (config, refs) failed.
    #[error("{path}: {source}")]
    Io {
        /// The path.
        path: String,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
}

impl Error {
    /// Damage in `file` at `offset`.
    pub fn corrupt(file: impl Into<String>, offset: u64, what: impl Into<String>) -> Error {
        Error::Corrupt {
            file: file.into(),
            offset,
            what: what.into(),
        }
    }
}

/// The result type of this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;
