//! [`crate::write`]'s operations on a bucket: conditional `PUT`s.
//!
//! ```text
//! create + publish   PUT KEY  If-None-Match: *       412 (or 409): AlreadyExists
//! read_versioned     GET KEY                          the ETag is the Version
//! replace(None)      PUT KEY  If-None-Match: *       412 (or 409): Conflict
//! replace(Some(v))   PUT KEY  If-Match: v            412 or 404: Conflict
//! delete             HEAD KEY, then DELETE KEY        (S3 answers a DELETE of nothing with 204)
//! ```
//!
//! The store decides a race atomically: of writers racing on one key, exactly one gets 200.
//! What no protocol settles is a conditional write whose answer is lost (a dropped
//! connection, a 5xx): it may or may not have been applied, and repeating it blindly would be
//! refused by the write itself if it had landed. So these `PUT`s go through a client that
//! retries nothing on its own (`object_store` would resend a request whose connection closed
//! before the answer, and report our own success as a conflict), and when one fails without
//! a definite answer the key is read again: if it holds exactly the bytes written (and, for a
//! replace, a version other than the one expected), the write counts as done; another
//! writer's identical bytes are indistinguishable from ours and leave the same state, which is
//! what a caller of a compare-and-swap relies on. If the key is as it was, the write is sent
//! again, after a backoff (100 ms, doubling; [`RETRIES_AFTER_LOST_ANSWER`] times at most);
//! anything else is the definite answer (AlreadyExists, Conflict). A refusal after a retry is
//! checked the same way, since the first try may have landed late. Blobs being created are
//! spooled locally until publication, so the bytes to compare are at hand.

use crate::s3::{storage_error, S3Storage, SPOOL_IN_MEMORY};
use crate::write::{NewBlob, Version};
use crate::{Storage, StorageError};
use bytes::Bytes;
use object_store::{ObjectStore, ObjectStoreExt, PutMode, PutOptions, UpdateVersion};
use std::io::Write;

/// How many times a conditional write that failed without an answer (or with a 5xx) is sent
/// again, once a read showed it did not land.
const RETRIES_AFTER_LOST_ANSWER: u32 = 4;

/// An immutable blob being written: its bytes in memory, then (past [`SPOOL_IN_MEMORY`]) in
/// an unnamed temporary file, until one conditional `PUT` publishes them.
#[derive(Debug)]
pub(crate) struct S3NewBlob {
    storage: S3Storage,
    name: String,
    memory: Vec<u8>,
    file: Option<std::fs::File>,
}

impl S3NewBlob {
    /// Starts blob `name` of `storage` (whose name was checked).
    pub(crate) fn start(storage: S3Storage, name: &str) -> S3NewBlob {
        S3NewBlob {
            storage,
            name: name.to_string(),
            memory: Vec::new(),
            file: None,
        }
    }

    /// The bytes written, as one buffer: the memory, or the spool file mapped (its pages are
    /// the file's, read by the upload, not a copy on the heap).
    fn bytes(&mut self) -> Result<Bytes, StorageError> {
        let Some(file) = self.file.take() else {
            return Ok(Bytes::from(std::mem::take(&mut self.memory)));
        };
        let io = |source| StorageError::Io {
            name: format!("{} (its temporary file)", self.storage.describe(&self.name)),
            source,
        };
        let mut file = file;
        file.flush().map_err(io)?;
        if file.metadata().map_err(io)?.len() == 0 {
            return Ok(Bytes::new());
        }
        // SAFETY: the file is unnamed and this blob's own: nothing else can write to it while
        // it is mapped.
        let map = unsafe { memmap2::Mmap::map(&file) }.map_err(io)?;
        Ok(Bytes::from_owner(map))
    }
}

impl Write for S3NewBlob {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if self.file.is_none() && self.memory.len() + buf.len() > SPOOL_IN_MEMORY {
            let mut file = tempfile::tempfile()?;
            file.write_all(&self.memory)?;
            self.memory = Vec::new();
            self.file = Some(file);
        }
        match &mut self.file {
            Some(file) => file.write(buf),
            None => {
                self.memory.extend_from_slice(buf);
                Ok(buf.len())
            }
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl NewBlob for S3NewBlob {
    fn name(&self) -> &str {
        &self.name
    }

    fn rename(&mut self, name: &str) -> Result<(), StorageError> {
        let dir = |n: &str| n.rsplit_once('/').map(|(d, _)| d.to_string());
        if dir(name) != dir(&self.name) {
            return Err(StorageError::Io {
                name: self.storage.describe(&self.name),
                source: std::io::Error::other(format!(
                    "cannot be renamed to {name}: another directory"
                )),
            });
        }
        self.storage.path(name)?;
        self.name = name.to_string();
        Ok(())
    }

    fn publish(mut self: Box<Self>) -> Result<(), StorageError> {
        let bytes = self.bytes()?;
        let storage = &self.storage;
        let name = &self.name;
        let exists = || StorageError::AlreadyExists {
            name: storage.describe(name),
        };
        let mut tries = 0;
        loop {
            let error = match put(storage, name, PutMode::Create, bytes.clone()) {
                Ok(put) => {
                    storage.remember_published(name, bytes.len() as u64, put.e_tag);
                    return Ok(());
                }
                // Refused: another blob has the name, unless it is an earlier try of ours that
                // landed after all (then our bytes are there: read below).
                Err(e) if refused(&e) && tries == 0 => return Err(exists()),
                Err(e) => e,
            };
            match get(storage, name)? {
                Some((now, e_tag)) if now == bytes => {
                    storage.remember_published(name, bytes.len() as u64, e_tag);
                    return Ok(());
                }
                Some(_) => return Err(exists()),
                None if !refused(&error) && tries < RETRIES_AFTER_LOST_ANSWER => {
                    tries += 1;
                    tracing::warn!(blob = %storage.describe(name), %error, "retrying a create");
                    std::thread::sleep(backoff(tries));
                }
                None => return Err(storage_error(storage.describe(name), error)),
            }
        }
    }
}

/// Whether a conditional write was refused by its condition (412, or 409 for a conditional
/// write in flight at the same time, or 404 for `If-Match` on nothing on AWS): a definite
/// answer, unlike an error.
fn refused(e: &object_store::Error) -> bool {
    matches!(
        e,
        object_store::Error::Precondition { .. }
            | object_store::Error::AlreadyExists { .. }
            | object_store::Error::NotFound { .. }
    )
}

/// How long to wait before the `try`th retry of a conditional write: 100 ms, doubling (a
/// throttling store's 503 asks for time).
fn backoff(tries: u32) -> std::time::Duration {
    std::time::Duration::from_millis(100 << tries.saturating_sub(1).min(6))
}

/// One `PUT` of `bytes` to blob `name` in `mode`.
fn put(
    storage: &S3Storage,
    name: &str,
    mode: PutMode,
    bytes: Bytes,
) -> Result<object_store::PutResult, object_store::Error> {
    let path = storage
        .path(name)
        .map_err(|e| object_store::Error::Generic {
            store: "S3",
            source: Box::new(e),
        })?;
    let store = storage.shared.writes.clone();
    tracing::debug!(blob = %storage.describe(name), bytes = bytes.len(), ?mode, "S3 PUT");
    let options = PutOptions {
        mode,
        ..PutOptions::default()
    };
    let len = bytes.len() as u64;
    let put = storage
        .shared
        .block(async move { store.put_opts(&path, bytes.into(), options).await });
    crate::scope::count_put(len, put.is_ok());
    put
}

/// The bytes and ETag of blob `name`, `None` if it does not exist.
fn get(storage: &S3Storage, name: &str) -> Result<Option<(Bytes, Option<String>)>, StorageError> {
    let path = storage.path(name)?;
    let store = storage.shared.store.clone();
    tracing::debug!(blob = %storage.describe(name), "S3 GET (whole, versioned)");
    let got = storage.shared.block(async move {
        let got = store.get(&path).await?;
        let e_tag = got.meta.e_tag.clone();
        Ok::<_, object_store::Error>((got.bytes().await?, e_tag))
    });
    crate::scope::count_get(got.as_ref().map_or(0, |(b, _)| b.len() as u64));
    match got {
        Ok(found) => Ok(Some(found)),
        Err(object_store::Error::NotFound { .. }) => Ok(None),
        Err(e) => Err(storage_error(storage.describe(name), e)),
    }
}

/// The [`Version`] of an ETag; a store that sends none cannot take a compare-and-swap.
fn version(
    storage: &S3Storage,
    name: &str,
    e_tag: Option<String>,
) -> Result<Version, StorageError> {
    e_tag.map(Version).ok_or_else(|| StorageError::Io {
        name: storage.describe(name),
        source: std::io::Error::other("the store sent no ETag, which a compare-and-swap needs"),
    })
}

/// [`crate::Storage::read_versioned`] on a bucket: one `GET`, its ETag the version.
pub(crate) fn read_versioned(
    storage: &S3Storage,
    name: &str,
) -> Result<Option<(Bytes, Version)>, StorageError> {
    match get(storage, name)? {
        Some((bytes, e_tag)) => Ok(Some((bytes, version(storage, name, e_tag)?))),
        None => Ok(None),
    }
}

/// [`crate::Storage::replace`] on a bucket: a `PUT` with `If-Match` (or `If-None-Match: *`).
pub(crate) fn replace(
    storage: &S3Storage,
    name: &str,
    expected: Option<&Version>,
    bytes: &[u8],
) -> Result<Version, StorageError> {
    let bytes = Bytes::copy_from_slice(bytes);
    storage.wrote();
    let conflict = || StorageError::Conflict {
        name: storage.describe(name),
    };
    let mut tries = 0;
    loop {
        let mode = match expected {
            None => PutMode::Create,
            Some(v) => PutMode::Update(UpdateVersion {
                e_tag: Some(v.0.clone()),
                version: None,
            }),
        };
        let error = match put(storage, name, mode, bytes.clone()) {
            Ok(done) => {
                return match done.e_tag {
                    Some(e_tag) => Ok(Version(e_tag)),
                    // Not every store answers a PUT with its ETag: ask for it.
                    None => match read_versioned(storage, name)? {
                        Some((_, v)) => Ok(v),
                        None => Err(conflict()),
                    },
                };
            }
            // Refused by its condition: the blob changed, unless it is an earlier try of ours
            // that landed after all (read below).
            Err(e) if refused(&e) && tries == 0 => return Err(conflict()),
            Err(e) => e,
        };
        let now = read_versioned(storage, name)?;
        let now_version = now.as_ref().map(|(_, v)| v);
        match &now {
            Some((now_bytes, v)) if *now_bytes == bytes && Some(v) != expected => {
                return Ok(v.clone())
            }
            _ if refused(&error) || now_version != expected => return Err(conflict()),
            _ if tries < RETRIES_AFTER_LOST_ANSWER => {
                tries += 1;
                tracing::warn!(blob = %storage.describe(name), %error, "retrying a replace");
                std::thread::sleep(backoff(tries));
            }
            _ => return Err(storage_error(storage.describe(name), error)),
        }
    }
}

/// [`crate::Storage::delete`] on a bucket. S3 answers a `DELETE` of a missing key as one of
/// an existing key, so a `HEAD` first tells which; between the two another writer may have
/// deleted it, which makes the answer a hint (the key is gone either way).
pub(crate) fn delete(storage: &S3Storage, name: &str) -> Result<bool, StorageError> {
    let path = storage.path(name)?;
    let store = storage.shared.store.clone();
    // Counted in the caller's scope as the requests complete (on the runtime's threads).
    let reads = crate::scope::RequestReads::current();
    let result = storage.shared.block(async move {
        let head = store.head(&path).await;
        reads.iter().for_each(|r| r.add_head());
        match head {
            Ok(_) => {
                reads.iter().for_each(|r| r.add_delete());
                store.delete(&path).await.map(|()| true)
            }
            Err(object_store::Error::NotFound { .. }) => Ok(false),
            Err(e) => Err(e),
        }
    });
    result.map_err(|e| storage_error(storage.describe(name), e))
}
