//! Ranged reads of the bytes packd keeps: packs, indexes, bitmaps, reverse indexes and loose objects.
//!
//! Everything above this crate reads through [`Storage`] and [`Blob`], never through a file or a
//! memory map of its own. That is what lets the same object database run on a local disk today and on
//! S3-compatible object storage later: a local read is nearly free, a remote one costs a round trip,
//! so callers ask for what they need in as few calls as they can ([`Blob::read_many`]) and never
//! assume that a read is cheap or that bytes stay mapped.

mod cache;
mod local;
mod memory;
mod prefetch;
pub mod scope;
pub use scope::{RequestReadStats, RequestReads};
mod per_request;
pub use per_request::PerRequest;

pub use cache::{BlockCache, BlockCacheConfig, BlockCacheStats, CachedStorage};

pub use local::LocalStorage;
pub mod write;
pub use write::{NewBlob, Version};
mod local_write;
pub use memory::MemoryBlob;
#[cfg(feature = "s3")]
mod readv;
#[cfg(feature = "s3")]
pub use readv::{Coalescing, ReadOptions, ReadStats};
#[cfg(feature = "s3")]
mod s3;
#[cfg(feature = "s3")]
mod s3_write;
#[cfg(feature = "s3")]
pub use s3::{S3Config, S3Storage};

use bytes::Bytes;
use std::fmt;
use std::ops::Range;
use std::sync::Arc;

/// Why a read failed. Every variant names the blob, so the message reads as a sentence on its own.
#[derive(Debug, thiserror::Error)]
pub enum StorageError {
    /// The named blob does not exist.
    #[error("{name}: not found")]
    NotFound { name: String },
    /// A range reached past the end of the blob: the file is shorter than its metadata claims.
    #[error("{name}: read of bytes {start}..{end} is past the end of the file ({len} bytes)")]
    OutOfBounds {
        name: String,
        start: u64,
        end: u64,
        len: u64,
    },
    /// A blob created with [`Storage::create`] was published under a name that exists.
    #[error("{name}: already exists")]
    AlreadyExists { name: String },
    /// A [`Storage::replace`] found the blob changed since it was read (or present when it
    /// was to be created, or gone when it was to be replaced): the caller reads it again.
    #[error("{name}: changed since it was read")]
    Conflict { name: String },
    /// Another writer holds the blob's lock (`NAME.lock` on a local disk).
    #[error("{name}: locked by another writer ({lock} exists)")]
    Locked { name: String, lock: String },
    /// This storage takes no writes.
    #[error("{name}: this storage is read-only")]
    ReadOnly { name: String },
    /// The operating system (or, later, the object store) refused the read.
    #[error("{name}: {source}")]
    Io {
        name: String,
        #[source]
        source: std::io::Error,
    },
}

impl StorageError {
    /// True when the blob simply is not there, as opposed to being unreadable.
    pub fn is_not_found(&self) -> bool {
        matches!(self, StorageError::NotFound { .. })
    }
}

/// A range of a local file, for a transport that can send it without the bytes passing through
/// the process (`sendfile`): a whole pack file going out as it is. Blobs in object storage have
/// no file ranges; their bytes are read.
#[derive(Clone, Debug)]
pub struct FileRange {
    /// The open file (kept open while the range is queued, even if the blob is dropped).
    pub file: Arc<std::fs::File>,
    /// Where the range starts in the file.
    pub offset: u64,
    /// Its length in bytes.
    pub len: u64,
}

impl FileRange {
    /// Whether [`FileRange::send_to`] has the kernel copy the pages (`sendfile`, on Linux);
    /// elsewhere it reads and writes them.
    pub const SENT_BY_KERNEL: bool = cfg!(target_os = "linux");

    /// Writes the range's bytes to `out` (a socket, a pipe), blocking: by `sendfile`, so that
    /// they do not pass through the process, or, where it cannot be used, by reading and
    /// writing. `out`'s own buffer, if any, must be empty (flushed).
    #[cfg(unix)]
    pub fn send_to<W: std::io::Write + std::os::fd::AsRawFd>(
        &self,
        out: &mut W,
    ) -> std::io::Result<()> {
        #[cfg(target_os = "linux")]
        {
            let mut sent = 0;
            while sent < self.len {
                match self.send_once(out.as_raw_fd(), sent) {
                    Ok(n) => sent += n as u64,
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                    // Not a descriptor sendfile writes to (nothing was sent of this call).
                    Err(e) if matches!(e.raw_os_error(), Some(libc::EINVAL | libc::ENOSYS)) => {
                        return self.sub(sent, self.len - sent).copy_to(out)
                    }
                    Err(e) => return Err(e),
                }
            }
            Ok(())
        }
        #[cfg(not(target_os = "linux"))]
        self.copy_to(out)
    }

    /// One `sendfile` of the range from `sent` bytes into it to the descriptor `out`: the bytes
    /// the kernel sent (never 0: a file shorter than the range is an error naming its offset).
    #[cfg(target_os = "linux")]
    pub fn send_once(&self, out: std::os::fd::RawFd, sent: u64) -> std::io::Result<usize> {
        use std::os::fd::AsRawFd;
        let at = self.offset + sent;
        let mut offset = libc::off_t::try_from(at).map_err(|_| {
            std::io::Error::other(format!("file offset {at} is past what sendfile takes"))
        })?;
        let count = (self.len - sent).min(1 << 30) as usize;
        // SAFETY: both descriptors are open for the call (the file is held by the range); the
        // kernel writes only to `offset`.
        let n = unsafe { libc::sendfile(out, self.file.as_raw_fd(), &mut offset, count) };
        if n < 0 {
            return Err(std::io::Error::last_os_error());
        }
        if n == 0 {
            return Err(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                format!("the file ends before offset {at}, inside the range being sent"),
            ));
        }
        Ok(n as usize)
    }

    /// Writes the range's bytes to `out` by reading them.
    #[cfg(unix)]
    fn copy_to(&self, out: &mut impl std::io::Write) -> std::io::Result<()> {
        let mut buf = vec![0u8; self.len.min(1 << 20) as usize];
        let mut at = 0;
        while at < self.len {
            let n = (self.len - at).min(buf.len() as u64) as usize;
            std::os::unix::fs::FileExt::read_exact_at(
                &*self.file,
                &mut buf[..n],
                self.offset + at,
            )?;
            out.write_all(&buf[..n])?;
            at += n as u64;
        }
        Ok(())
    }

    /// The range from `from` (relative to this range's start) for at most `len` bytes.
    pub fn sub(&self, from: u64, len: u64) -> FileRange {
        let from = from.min(self.len);
        FileRange {
            file: self.file.clone(),
            offset: self.offset + from,
            len: len.min(self.len - from),
        }
    }
}

/// One immutable object of storage (a `.pack`, `.idx`, `.bitmap`, ...), read by byte ranges.
///
/// Blobs are immutable once written (git never rewrites a pack in place), which is what makes it
/// safe to cache their bytes anywhere above.
pub trait Blob: Send + Sync + fmt::Debug {
    /// The name used in error messages: a path for local files, a key for object storage.
    fn name(&self) -> &str;

    /// The blob's size in bytes.
    fn len(&self) -> u64;

    /// What tells this blob's bytes from other bytes once stored under the same name (an
    /// object store's ETag), for caches keyed by name; `None` when the storage has none.
    fn tag(&self) -> Option<&str> {
        None
    }

    /// True when the blob has no bytes.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The bytes of one range. Fails if the range reaches past the end.
    fn read(&self, range: Range<u64>) -> Result<Bytes, StorageError>;

    /// The bytes of many ranges, yielded in request order as soon as each is available.
    ///
    /// Remote implementations coalesce neighbouring ranges into one request; the local one just
    /// reads each. Callers that know several ranges up front should use this rather than a loop of
    /// [`Blob::read`].
    fn read_many<'a>(
        &'a self,
        ranges: &'a [Range<u64>],
    ) -> Box<dyn Iterator<Item = Result<Bytes, StorageError>> + 'a> {
        Box::new(ranges.iter().map(move |r| self.read(r.clone())))
    }

    /// A hint that `ranges` will be read soon. A remote blob read through a
    /// [`CachedStorage`] starts fetching the blocks it lacks in the background, coalesced
    /// ([`Blob::read_many`]), so that the reads that follow, one at a time, find them cached
    /// (or wait for the fetch in flight) instead of each costing a round trip; everywhere
    /// else reads are cheap and this does nothing. Bounded: a hint past a share of the
    /// cache, or while the cache already runs its most prefetches, is cut or dropped.
    fn prefetch(&self, ranges: &[Range<u64>]) {
        let _ = ranges;
    }

    /// Whether [`Blob::prefetch`] does anything here: a caller whose hints cost work to
    /// gather (a tree walk's next trees) gathers them only then.
    fn prefetches(&self) -> bool {
        false
    }

    /// The bytes of one range, copied into a buffer of their own, for data read once while
    /// streaming (a pack sent to a client). Unlike [`Blob::read`], the bytes do not stay mapped
    /// in the process: a mapped read of a whole pack would count every page of it toward the
    /// server's resident memory. Fails if the range reaches past the end.
    fn read_copy(&self, range: Range<u64>) -> Result<Bytes, StorageError> {
        self.read(range)
    }

    /// [`Blob::read_copy`] into `buf` (emptied first), so that a stream of reads (a pack sent
    /// whole) reuses one buffer rather than allocating one per read. Fails if the range reaches
    /// past the end.
    fn read_copy_into(&self, range: Range<u64>, buf: &mut Vec<u8>) -> Result<(), StorageError> {
        let bytes = self.read_copy(range)?;
        buf.clear();
        buf.extend_from_slice(&bytes);
        Ok(())
    }

    /// The range as a [`FileRange`] of a local file, which a transport can send without reading
    /// it, or `None` when the blob has no file behind it (small files read whole, object
    /// storage). Fails if the range reaches past the end.
    fn file_range(&self, range: Range<u64>) -> Result<Option<FileRange>, StorageError> {
        check_range(self.name(), &range, self.len())?;
        Ok(None)
    }

    /// Drops this process's mapped pages of the blob, if it is mapped (they stay in the page
    /// cache, and a later read maps them again): a server calls it once a large request no
    /// longer needs them, so that pages a walk touched do not stay resident until the next
    /// request. Bytes handed out earlier stay valid. Does nothing for blobs read into memory.
    fn release_pages(&self) {}

    /// The whole blob. Convenient for small files (indexes); a pack should be read by ranges.
    fn read_all(&self) -> Result<Bytes, StorageError> {
        self.read(0..self.len())
    }
}

/// Returns the heap's free memory to the system where the allocator keeps it (glibc keeps
/// freed memory in each thread's arena; a server whose requests run on a pool of threads
/// otherwise keeps the peak of each thread's last large request resident). A no-op elsewhere.
/// Costs a walk over the free chunks: call it after a large request, not after every one.
pub fn trim_heap() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only returns free memory of the allocator's arenas to the system;
    // it touches no live allocation.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// A place blobs live: a directory tree on disk, or a bucket prefix in object storage.
///
/// Names are relative paths with `/` separators (`pack/pack-1234.idx`), resolved under the root the
/// storage was created for.
pub trait Storage: Send + Sync + fmt::Debug {
    /// Opens a blob for reading. A missing blob is [`StorageError::NotFound`].
    fn open(&self, name: &str) -> Result<Arc<dyn Blob>, StorageError>;

    /// The names of the entries directly inside `dir` (files and directories), sorted. A missing
    /// directory lists as empty.
    fn list(&self, dir: &str) -> Result<Vec<String>, StorageError>;

    /// Whether a blob exists, without opening it.
    fn exists(&self, name: &str) -> bool;

    /// A human-readable description of where blob `name` lives (a full path), for messages.
    fn describe(&self, name: &str) -> String;

    /// A hint that the first `head` and last `tail` bytes of blob `name` will be read soon
    /// (opening a pack reads its index's fan-out, the pack's header and trailer, its
    /// bitmap's header): storage read through a [`CachedStorage`] fetches them in the
    /// background ([`Blob::prefetch`]), so that the files of a repository are opened in one
    /// round trip rather than one each. Elsewhere, and for a missing blob, it does nothing.
    fn prefetch_ends(&self, name: &str, head: u64, tail: u64) {
        let _ = (name, head, tail);
    }

    /// Starts writing an immutable blob `name` (see [`write`]): nothing appears until it is
    /// published, and publishing fails if the name exists.
    fn create(&self, name: &str) -> Result<Box<dyn NewBlob>, StorageError> {
        Err(StorageError::ReadOnly {
            name: self.describe(name),
        })
    }

    /// A small mutable blob's bytes and their [`Version`], for a later [`Storage::replace`];
    /// `None` when it does not exist.
    fn read_versioned(&self, name: &str) -> Result<Option<(Bytes, Version)>, StorageError> {
        match self.open(name) {
            Ok(blob) => {
                let bytes = blob.read_all()?;
                let version = write::local_version(&bytes);
                Ok(Some((bytes, version)))
            }
            Err(e) if e.is_not_found() => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Replaces the small mutable blob `name` with `bytes` if it is still at `expected`
    /// (`None`: only if it does not exist), durably; [`StorageError::Conflict`] otherwise.
    /// Returns the new version.
    fn replace(
        &self,
        name: &str,
        expected: Option<&Version>,
        bytes: &[u8],
    ) -> Result<Version, StorageError> {
        let _ = (expected, bytes);
        Err(StorageError::ReadOnly {
            name: self.describe(name),
        })
    }

    /// [`Storage::replace`] for a blob git keeps read-only (the commit-graph, a `.bitmap`
    /// written again for its pack): on a local disk the new file is made 0444 (less the
    /// umask), as git's writers of these files leave it (`hold_lock_file_for_update_mode`
    /// with 0444); elsewhere it is [`Storage::replace`].
    fn replace_read_only(
        &self,
        name: &str,
        expected: Option<&Version>,
        bytes: &[u8],
    ) -> Result<Version, StorageError> {
        self.replace(name, expected, bytes)
    }

    /// Deletes blob `name`; `false` when it did not exist.
    fn delete(&self, name: &str) -> Result<bool, StorageError> {
        Err(StorageError::ReadOnly {
            name: self.describe(name),
        })
    }
}

/// Checks that `range` lies inside a blob of `len` bytes, naming the blob if not.
pub fn check_range(name: &str, range: &Range<u64>, len: u64) -> Result<(), StorageError> {
    if range.start > range.end || range.end > len {
        return Err(StorageError::OutOfBounds {
            name: name.to_string(),
            start: range.start,
            end: range.end,
            len,
        });
    }
    Ok(())
}
