//! Blobs in a directory on the local disk.
//!
//! Large files are memory-mapped and handed out as [`Bytes`] that keep the map alive, so a read is a
//! bounds check and a reference count; small files (loose objects, tiny indexes) are read into memory
//! at open, which is cheaper than a map for a few hundred bytes. Neither choice is visible above:
//! callers only see [`Bytes`].

use crate::{check_range, Blob, Storage, StorageError};
use bytes::Bytes;
use std::fs::File;
use std::io::{ErrorKind, Read};
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Files at or below this size are read at open instead of mapped.
const READ_WHOLE_BELOW: u64 = 64 * 1024;

/// A [`Storage`] rooted at a local directory.
#[derive(Debug, Clone)]
pub struct LocalStorage {
    root: PathBuf,
}

impl LocalStorage {
    /// Storage for the blobs under `root` (for a repository, its `objects` directory).
    pub fn new(root: impl Into<PathBuf>) -> Self {
        LocalStorage { root: root.into() }
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
            (Bytes::from_owner(map), Some(file))
        };
        Ok(Arc::new(LocalBlob {
            name: display,
            bytes,
            file,
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
        self.path(name).exists()
    }

    fn describe(&self, name: &str) -> String {
        self.path(name).display().to_string()
    }
}

/// A local file's bytes, mapped or read whole.
#[derive(Debug)]
struct LocalBlob {
    name: String,
    bytes: Bytes,
    /// The file behind a map, for [`Blob::read_copy`].
    file: Option<File>,
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
        Ok(self.bytes.slice(range.start as usize..range.end as usize))
    }

    fn read_copy(&self, range: Range<u64>) -> Result<Bytes, StorageError> {
        check_range(&self.name, &range, self.len())?;
        let Some(file) = &self.file else {
            return self.read(range);
        };
        let mut buf = Vec::new();
        read_exact_at_into(
            file,
            &mut buf,
            range.start,
            (range.end - range.start) as usize,
        )
        .map_err(|source| StorageError::Io {
            name: self.name.clone(),
            source,
        })?;
        Ok(Bytes::from(buf))
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
        assert!(storage.open("missing").unwrap_err().is_not_found());
        assert_eq!(storage.list("").unwrap(), vec!["big", "small"]);
        assert!(storage.list("nope").unwrap().is_empty());
    }
}
