//! Blobs in a directory on the local disk.
//!
//! Large files are memory-mapped and handed out as [`Bytes`] that keep the map alive, so a read is a
//! bounds check and a reference count; small files (loose objects, tiny indexes) are read into memory
//! at open, which is cheaper than a map for a few hundred bytes. Neither choice is visible above:
//! callers only see [`Bytes`].

use crate::{check_range, Blob, FileRange, Storage, StorageError};
use bytes::Bytes;
use std::fs::File;
use std::io::{ErrorKind, Read};
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// Files at or below this size are read at open instead of mapped.
const READ_WHOLE_BELOW: u64 = 64 * 1024;

/// Bytes a fault on a file map maps at once (Linux's default `fault_around_bytes`).
const FAULT_BLOCK: u64 = 64 * 1024;

/// A [`Storage`] rooted at a local directory.
#[derive(Debug, Clone)]
pub struct LocalStorage {
    root: PathBuf,
    /// Pages of a mapped file kept before its map is released; `u64::MAX`: never.
    release_after_pages: u64,
    /// The root directory, opened at the first existence check (`None` inside: it cannot be):
    /// a check then `stat`s relative to it, walking only the name's own components rather than
    /// the whole path from `/` (on a small push, 56 loose-object checks, that walk was most of
    /// their cost).
    dir: Arc<std::sync::OnceLock<Option<File>>>,
}

impl LocalStorage {
    /// Storage for the blobs under `root` (for a repository, its `objects` directory). Mapped
    /// files stay mapped whole: the fastest for a process that reads a pack at random.
    pub fn new(root: impl Into<PathBuf>) -> Self {
        LocalStorage {
            root: root.into(),
            release_after_pages: u64::MAX,
            dir: Arc::default(),
        }
    }

    /// Bounds the pages of each mapped file this process keeps resident to about `bytes`:
    /// once reads have touched that many, the map's pages are dropped from the process (they stay
    /// in the page cache). A server walking trees scattered over a 500 MB pack would
    /// otherwise keep hundreds of megabytes resident, as git does up to its
    /// `core.packedGitLimit`. Random reads pay for it: every page is mapped again after each
    /// release (`cat-file --batch` of shuffled ids took half again as much CPU with 16 MiB).
    pub fn with_map_budget(mut self, bytes: u64) -> Self {
        self.release_after_pages = (bytes / 4096).max(1);
        self
    }

    /// Whether `name` exists, by a `stat` relative to the opened root directory; `None` when
    /// that cannot answer (the root cannot be opened, an empty or unrepresentable name).
    #[cfg(unix)]
    fn exists_in_root(&self, name: &str) -> Option<bool> {
        use std::os::fd::AsRawFd;
        if name.is_empty() {
            return None;
        }
        let dir = self
            .dir
            .get_or_init(|| File::open(&self.root).ok())
            .as_ref()?;
        let name = std::ffi::CString::new(name).ok()?;
        // SAFETY: `stat` is plain old data that fstatat fills in (zeroes are a valid value);
        // the descriptor is open for as long as `dir` lives, the name is NUL-terminated.
        let found = unsafe {
            let mut stat: libc::stat = std::mem::zeroed();
            libc::fstatat(dir.as_raw_fd(), name.as_ptr(), &mut stat, 0) == 0
        };
        Some(found)
    }

    #[cfg(not(unix))]
    fn exists_in_root(&self, _name: &str) -> Option<bool> {
        None
    }

    /// The directory this storage reads from.
    pub fn root(&self) -> &Path {
        &self.root
    }

    fn path(&self, name: &str) -> PathBuf {
        if name.is_empty() {
            self.root.clone()
        } else {
            self.root.join(name)
        }
    }
}

impl Storage for LocalStorage {
    fn open(&self, name: &str) -> Result<Arc<dyn Blob>, StorageError> {
        let path = self.path(name);
        let display = path.display().to_string();
        let io = |source: std::io::Error| {
            if source.kind() == ErrorKind::NotFound {
                StorageError::NotFound {
                    name: display.clone(),
                }
            } else {
                StorageError::Io {
                    name: display.clone(),
                    source,
                }
            }
        };
        let mut file = File::open(&path).map_err(io)?;
        let len = file.metadata().map_err(io)?.len();
        let (bytes, file) = if len <= READ_WHOLE_BELOW {
            let mut buf = Vec::with_capacity(len as usize);
            file.read_to_end(&mut buf).map_err(io)?;
            (Bytes::from(buf), None)
        } else {
            // SAFETY: packd only maps files that git and packd treat as immutable once written
            // (packs, indexes, bitmaps are replaced by rename, never rewritten in place).
            let map = unsafe { memmap2::Mmap::map(&file) }.map_err(io)?;
            #[cfg(unix)]
            let _ = map.advise(memmap2::Advice::Random);
            (Bytes::from_owner(map), Some(Arc::new(file)))
        };
        let mapped = file.is_some();
        Ok(Arc::new(LocalBlob {
            name: display,
            bytes,
            file,
            touched_pages: AtomicU64::new(0),
            touched_blocks: if mapped && self.release_after_pages != u64::MAX {
                (0..len.div_ceil(FAULT_BLOCK).div_ceil(64))
                    .map(|_| AtomicU64::new(0))
                    .collect()
            } else {
                Box::default()
            },
            release_after_pages: self.release_after_pages,
        }))
    }

    fn list(&self, dir: &str) -> Result<Vec<String>, StorageError> {
        let path = self.path(dir);
        let entries = match std::fs::read_dir(&path) {
            Ok(entries) => entries,
            Err(e) if e.kind() == ErrorKind::NotFound => return Ok(Vec::new()),
            Err(source) => {
                return Err(StorageError::Io {
                    name: path.display().to_string(),
                    source,
                })
            }
        };
        let mut names = Vec::new();
        for entry in entries {
            let entry = entry.map_err(|source| StorageError::Io {
                name: path.display().to_string(),
                source,
            })?;
            if let Some(name) = entry.file_name().to_str() {
                names.push(name.to_string());
            }
        }
        names.sort();
        Ok(names)
    }

    fn exists(&self, name: &str) -> bool {
        match self.exists_in_root(name) {
            Some(found) => found,
            None => self.path(name).exists(),
        }
    }

    fn describe(&self, name: &str) -> String {
        self.path(name).display().to_string()
    }

    fn create(&self, name: &str) -> Result<Box<dyn crate::NewBlob>, StorageError> {
        Ok(Box::new(crate::local_write::LocalNewBlob::start(
            name,
            self.path(name),
        )?))
    }

    fn replace(
        &self,
        name: &str,
        expected: Option<&crate::Version>,
        bytes: &[u8],
    ) -> Result<crate::Version, StorageError> {
        crate::local_write::replace(&self.path(name), expected, bytes, None)
    }

    fn replace_read_only(
        &self,
        name: &str,
        expected: Option<&crate::Version>,
        bytes: &[u8],
    ) -> Result<crate::Version, StorageError> {
        crate::local_write::replace(&self.path(name), expected, bytes, Some(0o444))
    }

    fn delete(&self, name: &str) -> Result<bool, StorageError> {
        crate::local_write::delete(&self.path(name))
    }
}

/// A local file's bytes, mapped or read whole.
#[derive(Debug)]
struct LocalBlob {
    name: String,
    bytes: Bytes,
    /// The file behind a map, for [`Blob::read_copy`] and [`Blob::file_range`].
    file: Option<Arc<File>>,
    /// Pages mapped by [`Blob::read`] since the map was last released (an estimate: see
    /// [`LocalBlob::note_touched`]).
    touched_pages: AtomicU64,
    /// One bit per [`FAULT_BLOCK`] of a map with a budget: set when a read touched it since
    /// the map was last released (empty when there is no budget).
    touched_blocks: Box<[AtomicU64]>,
    /// See [`LocalStorage::with_map_budget`].
    release_after_pages: u64,
}

impl LocalBlob {
    /// Counts the pages `range` maps and releases the map's pages once enough were.
    ///
    /// A fault on a file map maps the whole 64 KiB block around the page (the kernel's
    /// fault-around, which `MADV_RANDOM` does not turn off), so a read is counted as the blocks
    /// it spans that no read touched since the last release. Counting pages read instead let
    /// twice the budget stay resident during a fill-in walk's scattered tree reads; counting
    /// every block a read spans (not only new ones) released the map of git/git's pack every
    /// few hundred reads of a mirror clone's walk, which then faulted its pages in again (the
    /// clone took 0.92 s of CPU instead of 0.83 s with no budget at all).
    fn note_touched(&self, range: &Range<u64>) {
        if self.touched_blocks.is_empty() || range.start >= range.end {
            return;
        }
        let first = range.start / FAULT_BLOCK;
        let last = (range.end - 1) / FAULT_BLOCK;
        let mut blocks = 0;
        for block in first..=last {
            let bit = 1u64 << (block % 64);
            let word = &self.touched_blocks[(block / 64) as usize];
            if word.load(Ordering::Relaxed) & bit == 0
                && word.fetch_or(bit, Ordering::Relaxed) & bit == 0
            {
                blocks += 1;
            }
        }
        if blocks == 0 {
            return;
        }
        let pages = blocks * (FAULT_BLOCK / 4096);
        let total = self.touched_pages.fetch_add(pages, Ordering::Relaxed) + pages;
        if total >= self.release_after_pages
            && self
                .touched_pages
                .compare_exchange(total, 0, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
        {
            self.release();
        }
    }

    /// Forgets what was touched and drops the map's pages.
    fn release(&self) {
        self.touched_pages.store(0, Ordering::Relaxed);
        for word in self.touched_blocks.iter() {
            word.store(0, Ordering::Relaxed);
        }
        self.drop_pages();
    }

    /// Drops this process's mappings of the file's pages. They stay in the page cache; a
    /// later read maps them again.
    #[cfg(unix)]
    fn drop_pages(&self) {
        // SAFETY: the range is exactly the read-only, shared file map this blob owns; dropping
        // its pages changes no content (a later access maps the same file pages again), so the
        // slices other readers hold stay valid and unchanged.
        unsafe {
            libc::madvise(
                self.bytes.as_ptr() as *mut libc::c_void,
                self.bytes.len(),
                libc::MADV_DONTNEED,
            );
        }
    }

    #[cfg(not(unix))]
    fn drop_pages(&self) {}
}

impl Blob for LocalBlob {
    fn name(&self) -> &str {
        &self.name
    }

    fn len(&self) -> u64 {
        self.bytes.len() as u64
    }

    fn read(&self, range: Range<u64>) -> Result<Bytes, StorageError> {
        check_range(&self.name, &range, self.len())?;
        self.note_touched(&range);
        Ok(self.bytes.slice(range.start as usize..range.end as usize))
    }

    fn read_copy(&self, range: Range<u64>) -> Result<Bytes, StorageError> {
        if self.file.is_none() {
            return self.read(range);
        }
        let mut buf = Vec::new();
        self.read_copy_into(range, &mut buf)?;
        Ok(Bytes::from(buf))
    }

    fn file_range(&self, range: Range<u64>) -> Result<Option<FileRange>, StorageError> {
        check_range(&self.name, &range, self.len())?;
        Ok(self.file.as_ref().map(|file| FileRange {
            file: file.clone(),
            offset: range.start,
            len: range.end - range.start,
        }))
    }

    fn release_pages(&self) {
        if self.file.is_some() {
            self.release();
        }
    }

    fn read_copy_into(&self, range: Range<u64>, buf: &mut Vec<u8>) -> Result<(), StorageError> {
        check_range(&self.name, &range, self.len())?;
        let Some(file) = &self.file else {
            buf.clear();
            buf.extend_from_slice(&self.bytes[range.start as usize..range.end as usize]);
            return Ok(());
        };
        read_exact_at_into(file, buf, range.start, (range.end - range.start) as usize).map_err(
            |source| StorageError::Io {
                name: self.name.clone(),
                source,
            },
        )
    }
}

/// Reads `len` bytes at `offset` into `buf` (emptied first) without zeroing the buffer
/// first: a served pack passes every byte through here once, and clearing a megabyte window
/// before each read cost as much as a tenth of the copy itself.
#[cfg(unix)]
fn read_exact_at_into(
    file: &File,
    buf: &mut Vec<u8>,
    offset: u64,
    len: usize,
) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    buf.clear();
    buf.reserve_exact(len);
    while buf.len() < len {
        let at = buf.len();
        let want = len - at;
        // SAFETY: the pointer is `want` bytes of the vector's reserved, unused capacity, and
        // pread writes at most `want` bytes there; the length grows only by what it wrote.
        let n = unsafe {
            libc::pread(
                file.as_raw_fd(),
                buf.as_mut_ptr().add(at).cast(),
                want,
                (offset + at as u64) as libc::off_t,
            )
        };
        match n {
            n if n > 0 => unsafe { buf.set_len(at + n as usize) },
            0 => return Err(ErrorKind::UnexpectedEof.into()),
            _ => {
                let err = std::io::Error::last_os_error();
                if err.kind() != ErrorKind::Interrupted {
                    return Err(err);
                }
            }
        }
    }
    Ok(())
}

#[cfg(windows)]
fn read_exact_at_into(
    file: &File,
    buf: &mut Vec<u8>,
    offset: u64,
    len: usize,
) -> std::io::Result<()> {
    buf.clear();
    buf.resize(len, 0);
    read_exact_at(file, buf, offset)
}

#[cfg(windows)]
fn read_exact_at(file: &File, mut buf: &mut [u8], mut offset: u64) -> std::io::Result<()> {
    while !buf.is_empty() {
        match std::os::windows::fs::FileExt::seek_read(file, buf, offset)? {
            0 => return Err(ErrorKind::UnexpectedEof.into()),
            n => {
                buf = &mut buf[n..];
                offset += n as u64;
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_ranges_in_order_and_refuses_past_the_end() {
        let dir = tempfile::tempdir().unwrap();
        let big: Vec<u8> = (0..200_000u32).map(|i| (i % 251) as u8).collect();
        std::fs::write(dir.path().join("big"), &big).unwrap();
        std::fs::write(dir.path().join("small"), b"hello world").unwrap();
        let storage = LocalStorage::new(dir.path());

        let small = storage.open("small").unwrap();
        assert_eq!(&small.read(6..11).unwrap()[..], b"world");
        assert_eq!(&small.read_copy(6..11).unwrap()[..], b"world");
        let err = small.read(6..12).unwrap_err().to_string();
        assert!(
            err.contains("small") && err.contains("past the end"),
            "{err}"
        );

        let blob = storage.open("big").unwrap();
        let ranges = [150_000..150_010, 10..20, 199_990..200_000];
        let got: Vec<Bytes> = blob.read_many(&ranges).map(|r| r.unwrap()).collect();
        for (range, bytes) in ranges.iter().zip(&got) {
            assert_eq!(&bytes[..], &big[range.start as usize..range.end as usize]);
        }
        assert_eq!(
            &blob.read_copy(150_000..150_010).unwrap()[..],
            &big[150_000..150_010]
        );
        assert!(blob.read_copy(199_990..200_001).is_err());
        let mut buf = vec![7u8; 3];
        blob.read_copy_into(150_000..150_010, &mut buf).unwrap();
        assert_eq!(&buf[..], &big[150_000..150_010]);
        small.read_copy_into(0..5, &mut buf).unwrap();
        assert_eq!(&buf[..], b"hello");
        assert!(blob.read_copy_into(199_990..200_001, &mut buf).is_err());
        assert!(storage.open("missing").unwrap_err().is_not_found());
        assert_eq!(storage.list("").unwrap(), vec!["big", "small"]);
        assert!(storage.list("nope").unwrap().is_empty());
    }

    #[test]
    fn empty_reads_of_a_budgeted_map_touch_nothing() {
        let dir = tempfile::tempdir().unwrap();
        // A whole number of bitset words of blocks: an empty read at the end names the block
        // after the last.
        let len = 64 * FAULT_BLOCK as usize;
        std::fs::write(dir.path().join("big"), vec![5u8; len]).unwrap();
        let blob = LocalStorage::new(dir.path())
            .with_map_budget(16 * 4096)
            .open("big")
            .unwrap();
        assert!(blob.read(len as u64..len as u64).unwrap().is_empty());
        assert!(blob.read(0..0).unwrap().is_empty());
        assert_eq!(
            &blob.read(len as u64 - 3..len as u64).unwrap()[..],
            &[5, 5, 5]
        );
    }

    #[test]
    fn released_maps_read_the_same_bytes() {
        let dir = tempfile::tempdir().unwrap();
        let big: Vec<u8> = (0..4_000_000u32).map(|i| (i % 253) as u8).collect();
        std::fs::write(dir.path().join("big"), &big).unwrap();
        let budget = 64;
        let blob = LocalStorage::new(dir.path())
            .with_map_budget(budget * 4096)
            .open("big")
            .unwrap();
        let held = blob.read(1_000..2_000).unwrap();
        // Far more pages than the budget, so the map is released many times while `held` and
        // the later slices are in use.
        let mut slices = Vec::new();
        for i in 0..100 * budget {
            let at = (i * 7919 * 4096) % (big.len() as u64 - 5_000);
            let bytes = blob.read(at..at + 5_000).unwrap();
            assert_eq!(&bytes[..], &big[at as usize..at as usize + 5_000]);
            if i % 100 == 0 {
                slices.push((at, bytes));
            }
        }
        assert_eq!(&held[..], &big[1_000..2_000]);
        for (at, bytes) in slices {
            assert_eq!(&bytes[..], &big[at as usize..at as usize + 5_000]);
        }
    }
}
