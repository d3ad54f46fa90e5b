//! Why a `.bitmap` (or `.rev`) file was rejected or one of its bitmaps could not be read.

use crate::ewah::EwahError;
use packd_storage::StorageError;

/// Why a `.bitmap` file (or one bitmap in it), or a `.rev` file, could not be read.
///
/// Callers treat every variant the same way: use no bitmap for this pack, warn once, and answer
/// with the plain walk. [`BitmapError::ChecksumMismatch`] is singled out because it is the
/// common, harmless case (a bitmap left over from an older pack of the same name).
#[derive(Debug, thiserror::Error)]
pub enum BitmapError {
    /// Reading the file failed.
    #[error(transparent)]
    Storage(#[from] StorageError),
    /// The file contradicts its format.
    #[error("{file}: offset {offset}: {what}")]
    Corrupt {
        /// The file.
        file: String,
        /// Where the damage was found.
        offset: u64,
        /// What is wrong.
        what: String,
    },
    /// One EWAH bitmap in the file is damaged.
    #[error("{file}: offset {offset}: {what}: {source}")]
    Ewah {
        /// The file.
        file: String,
        /// Where the EWAH stream starts.
        offset: u64,
        /// Which bitmap it is.
        what: String,
        /// What is wrong with it.
        #[source]
        source: EwahError,
    },
    /// The bitmap was written for another pack (its recorded pack checksum differs).
    #[error("{file}: written for pack {found}, not for {expected}")]
    ChecksumMismatch {
        /// The file.
        file: String,
        /// The checksum of the pack it was opened for (hex).
        expected: String,
        /// The checksum the bitmap records (hex).
        found: String,
    },
    /// A well-formed file in a version or with options this reader does not support.
    #[error("{file}: {what}")]
    Unsupported {
        /// The file.
        file: String,
        /// What is not supported.
        what: String,
    },
}

impl BitmapError {
    /// True when the bitmap belongs to another pack: skip it with a warning, nothing is damaged.
    pub fn is_checksum_mismatch(&self) -> bool {
        matches!(self, BitmapError::ChecksumMismatch { .. })
    }

    pub(crate) fn corrupt(file: &str, offset: u64, what: impl Into<String>) -> BitmapError {
        BitmapError::Corrupt {
            file: file.to_string(),
            offset,
            what: what.into(),
        }
    }
}

impl From<BitmapError> for packd_odb::Error {
    fn from(e: BitmapError) -> packd_odb::Error {
        match e {
            BitmapError::Storage(s) => packd_odb::Error::Storage(s),
            BitmapError::Corrupt { file, offset, what } => {
                packd_odb::Error::corrupt(file, offset, what)
            }
            BitmapError::Ewah {
                file,
                offset,
                what,
                source,
            } => packd_odb::Error::corrupt(file, offset, format!("{what}: {source}")),
            BitmapError::ChecksumMismatch {
                file,
                expected,
                found,
            } => packd_odb::Error::corrupt(
                file,
                12,
                format!("written for pack {found}, not for {expected}"),
            ),
            BitmapError::Unsupported { file, what } => {
                packd_odb::Error::Unsupported(format!("{file}: {what}"))
            }
        }
    }
}
