//! A byte-bounded cache of fixed-size blocks of immutable blobs, shared by all the storages of
//! a server ([`BlockCache`]), and the storage that reads through it ([`CachedStorage`]).
//!
//! # Blocks
//!
//! ```text
//! blob (a .pack in a bucket)  |  block 0  |  block 1  |  block 2  | ... | last (short) |
//!                             0        64 KiB     128 KiB
//! key                         (blob identity, block number)
//! blob identity               "NAME\nLEN\nTAG": the blob's full name (s3://BUCKET/KEY or a
//!                             path), its length and its ETag, so that a key replaced by other
//!                             bytes never meets the old key's blocks
//! ```
//!
//! A read is served from the blocks it covers; the missing ones are fetched together through
//! the inner blob's [`Blob::read_many`] (block-aligned ranges, which an object store coalesces
//! into few requests), in batches of at most [`BATCH_BYTES`], so that a read of a whole pack
//! through the cache is never held in memory whole. A blob read sequentially (a read that
//! starts where the previous one ended: a pack sent whole) reads ahead, the window doubling on
//! each sequential miss up to [`READ_AHEAD_MAX`].
//!
//! # Tiers
//!
//! Memory: a `quick_cache` cache weighted by the blocks' bytes. Optionally a local disk
//! directory, bounded in bytes too: each block a file `b-HASH` holding its key and bytes
//! (checked when read back), written when the block is fetched, removed when the disk tier's
//! index evicts it. The directory is emptied of such files when the cache is made (its index
//! lives in memory only).
//!
//! `quick_cache` is the crate: it bounds by weight (bytes, here), is scan-resistant (S3-FIFO:
//! a pack streamed once does not push out the index blocks every fetch reads), has a hook on
//! eviction (which the disk tier uses to delete files), is synchronous like this crate's
//! interface, and brings no dependency the workspace does not already build (moka brings a
//! dozen, foyer's disk tier an async runtime of its own and many more).

use crate::prefetch::{InFlight, Pending};
use crate::{check_range, Blob, FileRange, NewBlob, Storage, StorageError, Version};
use bytes::{Bytes, BytesMut};
use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::io::{Read, Write};
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// The block size unless configured otherwise.
pub const DEFAULT_BLOCK_BYTES: u64 = 64 << 10;

/// The most bytes of missing blocks one batch of a cached `read_many` fetches at once.
pub const BATCH_BYTES: u64 = 16 << 20;

/// The most a sequential reader reads ahead of what it asked for.
pub const READ_AHEAD_MAX: u64 = 8 << 20;

/// The share of the memory tier kept for blocks read more than once (quick_cache's "hot"
/// part); the rest holds blocks read once, and those fetched ahead of their reader.
const HOT_SHARE: f64 = 0.75;

/// The first read-ahead of a blob found read sequentially.
const READ_AHEAD_FIRST: u64 = 256 << 10;

/// What a [`BlockCache`] holds and where.
#[derive(Clone, Debug)]
pub struct BlockCacheConfig {
    /// The most bytes of blocks kept in memory.
    pub memory_bytes: u64,
    /// The block size (64 KiB by default).
    pub block_bytes: u64,
    /// A directory on local disk for a second tier, and the most bytes it holds.
    pub disk: Option<(PathBuf, u64)>,
}

impl Default for BlockCacheConfig {
    fn default() -> Self {
        BlockCacheConfig {
            memory_bytes: 256 << 20,
            block_bytes: DEFAULT_BLOCK_BYTES,
            disk: None,
        }
    }
}

/// Counts of a [`BlockCache`]'s work and what it holds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BlockCacheStats {
    /// Blocks found in memory.
    pub hits: u64,
    /// Blocks found on disk (not in memory).
    pub disk_hits: u64,
    /// Blocks found in neither, fetched from the inner storage.
    pub misses: u64,
    /// Blocks fetched ahead of a sequential reader.
    pub read_ahead: u64,
    /// Blocks fetched ahead on a caller's hint ([`Blob::prefetch`]).
    pub prefetched: u64,
    /// Misses that waited for a block fetched ahead rather than fetching it again.
    pub waited: u64,
    /// Bytes of blocks in memory now.
    pub memory_bytes: u64,
    /// Bytes of blocks on disk now.
    pub disk_bytes: u64,
}

/// A block's key: its blob's identity and its number.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) struct BlockKey {
    blob: Arc<str>,
    block: u64,
}

/// Weighs a block by its bytes.
#[derive(Clone, Copy, Debug)]
struct ByBytes;

impl quick_cache::Weighter<BlockKey, Bytes> for ByBytes {
    fn weight(&self, _: &BlockKey, block: &Bytes) -> u64 {
        block.len() as u64
    }
}

impl quick_cache::Weighter<BlockKey, u64> for ByBytes {
    fn weight(&self, _: &BlockKey, file_bytes: &u64) -> u64 {
        *file_bytes
    }
}

/// Deletes a disk block's file when the disk tier's index evicts it (after the index's lock
/// is released: the files go when the request's state is dropped).
#[derive(Clone, Debug)]
struct DeleteFile(Arc<PathBuf>);

/// The files a request of the disk index evicted, deleted when it ends.
#[derive(Default)]
struct Evicted(Vec<PathBuf>);

impl Drop for Evicted {
    fn drop(&mut self) {
        for path in self.0.drain(..) {
            let _ = std::fs::remove_file(path);
        }
    }
}

impl quick_cache::Lifecycle<BlockKey, u64> for DeleteFile {
    type RequestState = Evicted;

    fn on_evict(&self, state: &mut Evicted, key: BlockKey, _: u64) {
        state.0.push(block_file(&self.0, &key));
    }
}

/// The file of block `key` in directory `dir`.
fn block_file(dir: &Path, key: &BlockKey) -> PathBuf {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    key.hash(&mut h);
    dir.join(format!("b-{:016x}", h.finish()))
}

/// The header of a disk block's file: the key, so that a file is never taken for another
/// block's.
fn file_header(key: &BlockKey) -> Vec<u8> {
    let mut header = Vec::with_capacity(key.blob.len() + 20);
    header.extend_from_slice(b"PKDB");
    header.extend_from_slice(&(key.blob.len() as u32).to_le_bytes());
    header.extend_from_slice(key.blob.as_bytes());
    header.extend_from_slice(&key.block.to_le_bytes());
    header
}

type MemoryTier = quick_cache::sync::Cache<BlockKey, Bytes, ByBytes>;
type DiskIndex = quick_cache::sync::Cache<
    BlockKey,
    u64,
    ByBytes,
    std::collections::hash_map::RandomState,
    DeleteFile,
>;

/// The disk tier: block files in a directory, and their index.
struct DiskTier {
    dir: Arc<PathBuf>,
    index: DiskIndex,
    next_tmp: AtomicU64,
}

/// A byte-bounded cache of blocks of immutable blobs, one per server, shared by the
/// [`CachedStorage`]s of all its repositories. Blocks stay until evicted (blobs never change:
/// a name whose bytes change is another blob, by its identity).
pub struct BlockCache {
    block: u64,
    memory: MemoryTier,
    memory_limit: u64,
    disk: Option<DiskTier>,
    hits: AtomicU64,
    disk_hits: AtomicU64,
    misses: AtomicU64,
    read_ahead: AtomicU64,
    prefetched: AtomicU64,
    waited: AtomicU64,
    /// Blocks being fetched ahead ([`crate::prefetch`]).
    in_flight: Arc<InFlight>,
}

impl std::fmt::Debug for BlockCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BlockCache")
            .field("block", &self.block)
            .field("memory_limit", &self.memory_limit)
            .field("stats", &self.stats())
            .finish()
    }
}

impl BlockCache {
    /// A cache as `config` says. Fails if the disk tier's directory cannot be made or
    /// emptied of block files.
    pub fn new(config: &BlockCacheConfig) -> Result<BlockCache, StorageError> {
        let block = config.block_bytes.max(1);
        let items = |bytes: u64| (bytes / block).clamp(1, 1 << 24) as usize;
        // A quarter of the memory tier for blocks read once so far (quick_cache's default is
        // 3%): a prefetch's blocks wait there until their reader comes, and must not be
        // pushed out before it does; blocks read twice (index blocks) still go to the rest.
        let options = quick_cache::OptionsBuilder::new()
            .estimated_items_capacity(items(config.memory_bytes))
            .weight_capacity(config.memory_bytes)
            .hot_allocation(HOT_SHARE)
            .build()
            .map_err(|e| StorageError::Io {
                name: "block cache".into(),
                source: std::io::Error::other(e.to_string()),
            })?;
        let memory =
            MemoryTier::with_options(options, ByBytes, Default::default(), Default::default());
        let disk = match &config.disk {
            None => None,
            Some((dir, bytes)) => {
                let io = |source| StorageError::Io {
                    name: dir.display().to_string(),
                    source,
                };
                std::fs::create_dir_all(dir).map_err(io)?;
                for entry in std::fs::read_dir(dir).map_err(io)? {
                    let entry = entry.map_err(io)?;
                    let name = entry.file_name();
                    let name = name.to_string_lossy();
                    if name.starts_with("b-") || name.starts_with("tmp-") {
                        std::fs::remove_file(entry.path()).map_err(io)?;
                    }
                }
                let dir = Arc::new(dir.clone());
                let index = DiskIndex::with(
                    items(*bytes),
                    *bytes,
                    ByBytes,
                    Default::default(),
                    DeleteFile(dir.clone()),
                );
                Some(DiskTier {
                    dir,
                    index,
                    next_tmp: AtomicU64::new(0),
                })
            }
        };
        Ok(BlockCache {
            block,
            memory,
            memory_limit: config.memory_bytes,
            disk,
            hits: AtomicU64::new(0),
            disk_hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
            read_ahead: AtomicU64::new(0),
            prefetched: AtomicU64::new(0),
            waited: AtomicU64::new(0),
            in_flight: Arc::default(),
        })
    }

    /// The block size.
    pub fn block_bytes(&self) -> u64 {
        self.block
    }

    /// The most bytes held in memory.
    pub fn memory_limit(&self) -> u64 {
        self.memory_limit
    }

    /// What the cache has done and holds.
    pub fn stats(&self) -> BlockCacheStats {
        BlockCacheStats {
            hits: self.hits.load(Ordering::Relaxed),
            disk_hits: self.disk_hits.load(Ordering::Relaxed),
            misses: self.misses.load(Ordering::Relaxed),
            read_ahead: self.read_ahead.load(Ordering::Relaxed),
            prefetched: self.prefetched.load(Ordering::Relaxed),
            waited: self.waited.load(Ordering::Relaxed),
            memory_bytes: self.memory.weight(),
            disk_bytes: self.disk.as_ref().map_or(0, |d| d.index.weight()),
        }
    }

    /// Whether block `key` is held, in memory or on disk (without counting a hit).
    fn holds(&self, key: &BlockKey) -> bool {
        self.memory.contains_key(key)
            || self
                .disk
                .as_ref()
                .is_some_and(|d| d.index.contains_key(key))
    }

    /// Block `key` from memory, or from disk (then kept in memory too).
    fn get(&self, key: &BlockKey, len: u64) -> Option<Bytes> {
        if let Some(block) = self.memory.get(key) {
            self.hits.fetch_add(1, Ordering::Relaxed);
            return Some(block);
        }
        let disk = self.disk.as_ref()?;
        disk.index.get(key)?;
        let path = block_file(&disk.dir, key);
        match read_block_file(&path, key, len) {
            Some(block) => {
                self.disk_hits.fetch_add(1, Ordering::Relaxed);
                self.memory.insert(key.clone(), block.clone());
                Some(block)
            }
            None => {
                // Gone or not this block's: forgotten, fetched again.
                disk.index.remove(key);
                None
            }
        }
    }

    /// Keeps a fetched block (a copy of exactly its bytes, so that what the cache counts is
    /// what it holds), in memory and on disk.
    fn put(&self, key: BlockKey, bytes: &[u8]) -> Bytes {
        let block = Bytes::copy_from_slice(bytes);
        if let Some(disk) = &self.disk {
            let tmp = disk.dir.join(format!(
                "tmp-{}",
                disk.next_tmp.fetch_add(1, Ordering::Relaxed)
            ));
            let header = file_header(&key);
            let written = std::fs::File::create(&tmp).and_then(|mut f| {
                f.write_all(&header)?;
                f.write_all(bytes)
            });
            let path = block_file(&disk.dir, &key);
            match written.and_then(|()| std::fs::rename(&tmp, &path)) {
                Ok(()) => disk
                    .index
                    .insert(key.clone(), (header.len() + bytes.len()) as u64),
                Err(e) => {
                    let _ = std::fs::remove_file(&tmp);
                    tracing::warn!(dir = %disk.dir.display(), error = %e, "cannot write a cached block");
                }
            }
        }
        self.memory.insert(key, block.clone());
        block
    }
}

/// The bytes of a disk block's file if it is block `key`'s and holds `len` bytes.
fn read_block_file(path: &Path, key: &BlockKey, len: u64) -> Option<Bytes> {
    let header = file_header(key);
    let mut file = std::fs::File::open(path).ok()?;
    if file.metadata().ok()?.len() != header.len() as u64 + len {
        return None;
    }
    let mut got = vec![0u8; header.len()];
    file.read_exact(&mut got).ok()?;
    if got != header {
        return None;
    }
    let mut block = BytesMut::zeroed(len as usize);
    file.read_exact(&mut block).ok()?;
    Some(block.freeze())
}

/// A [`Storage`] whose blobs are read through a shared [`BlockCache`]; everything else goes
/// to the inner storage. The inner storage's blobs must be immutable, or tagged
/// ([`Blob::tag`]) so that changed bytes have another identity.
#[derive(Debug, Clone)]
pub struct CachedStorage {
    inner: Arc<dyn Storage>,
    cache: Arc<BlockCache>,
}

impl CachedStorage {
    /// `inner` read through `cache` (which other storages may share).
    pub fn new(inner: Arc<dyn Storage>, cache: Arc<BlockCache>) -> CachedStorage {
        CachedStorage { inner, cache }
    }

    /// The cache it reads through.
    pub fn cache(&self) -> &Arc<BlockCache> {
        &self.cache
    }
}

impl Storage for CachedStorage {
    fn open(&self, name: &str) -> Result<Arc<dyn Blob>, StorageError> {
        let inner = self.inner.open(name)?;
        let id: Arc<str> = format!(
            "{}\n{}\n{}",
            inner.name(),
            inner.len(),
            inner.tag().unwrap_or("")
        )
        .into();
        Ok(Arc::new(CachedBlob {
            inner,
            cache: self.cache.clone(),
            id,
            sequential_end: AtomicU64::new(u64::MAX),
            read_ahead: AtomicU64::new(0),
        }))
    }

    fn list(&self, dir: &str) -> Result<Vec<String>, StorageError> {
        self.inner.list(dir)
    }

    fn prefetch_ends(&self, name: &str, head: u64, tail: u64) {
        if let Ok(blob) = self.open(name) {
            let len = blob.len();
            blob.prefetch(&[0..head.min(len), len.saturating_sub(tail)..len]);
        }
    }

    fn exists(&self, name: &str) -> bool {
        self.inner.exists(name)
    }

    fn describe(&self, name: &str) -> String {
        self.inner.describe(name)
    }

    fn create(&self, name: &str) -> Result<Box<dyn NewBlob>, StorageError> {
        self.inner.create(name)
    }

    fn read_versioned(&self, name: &str) -> Result<Option<(Bytes, Version)>, StorageError> {
        self.inner.read_versioned(name)
    }

    fn replace(
        &self,
        name: &str,
        expected: Option<&Version>,
        bytes: &[u8],
    ) -> Result<Version, StorageError> {
        self.inner.replace(name, expected, bytes)
    }

    fn replace_read_only(
        &self,
        name: &str,
        expected: Option<&Version>,
        bytes: &[u8],
    ) -> Result<Version, StorageError> {
        self.inner.replace_read_only(name, expected, bytes)
    }

    fn delete(&self, name: &str) -> Result<bool, StorageError> {
        self.inner.delete(name)
    }
}

/// A blob read through the cache.
#[derive(Debug)]
struct CachedBlob {
    inner: Arc<dyn Blob>,
    cache: Arc<BlockCache>,
    id: Arc<str>,
    /// Where the last read ended, to tell a sequential reader.
    sequential_end: AtomicU64,
    /// The read-ahead window now (0: not sequential).
    read_ahead: AtomicU64,
}

impl CachedBlob {
    fn key(&self, block: u64) -> BlockKey {
        BlockKey {
            blob: self.id.clone(),
            block,
        }
    }

    /// The bytes of block `b`.
    fn block_range(&self, b: u64) -> Range<u64> {
        let size = self.cache.block;
        b * size..((b + 1) * size).min(self.inner.len())
    }

    /// The blocks range `r` (non-empty) covers.
    fn blocks_of(&self, r: &Range<u64>) -> Range<u64> {
        r.start / self.cache.block..(r.end - 1) / self.cache.block + 1
    }
}

impl Blob for CachedBlob {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn len(&self) -> u64 {
        self.inner.len()
    }

    fn tag(&self) -> Option<&str> {
        self.inner.tag()
    }

    fn read(&self, range: Range<u64>) -> Result<Bytes, StorageError> {
        let one = [range];
        let mut read = self.read_many(&one);
        read.next().expect("one answer per range")
    }

    fn read_many<'a>(
        &'a self,
        ranges: &'a [Range<u64>],
    ) -> Box<dyn Iterator<Item = Result<Bytes, StorageError>> + 'a> {
        crate::scope::count_used(ranges, self.inner.len());
        Box::new(CachedRead {
            blob: self,
            ranges,
            next: 0,
            batch_end: 0,
            held: HashMap::new(),
            failed: false,
        })
    }

    fn file_range(&self, range: Range<u64>) -> Result<Option<FileRange>, StorageError> {
        self.inner.file_range(range)
    }

    fn release_pages(&self) {
        self.inner.release_pages()
    }

    fn prefetches(&self) -> bool {
        true
    }

    fn prefetch(&self, ranges: &[Range<u64>]) {
        let cache = &self.cache;
        let Some(mut slot) = cache.in_flight.start() else {
            return;
        };
        let len = self.inner.len();
        // Within the part of the memory tier that holds blocks not read yet.
        let budget = (cache.memory_limit as f64 * (1.0 - HOT_SHARE) / 2.0) as u64;
        let mut bytes = 0;
        let mut seen = std::collections::HashSet::new();
        let mut blocks = Vec::new();
        'ranges: for r in ranges {
            if r.is_empty() || r.end > len {
                continue;
            }
            for b in self.blocks_of(r) {
                if bytes >= budget {
                    break 'ranges;
                }
                let key = self.key(b);
                if !seen.insert(b) || cache.holds(&key) || !slot.register(key) {
                    continue;
                }
                bytes += self.block_range(b).end - self.block_range(b).start;
                blocks.push(self.block_range(b));
            }
        }
        if blocks.is_empty() {
            return;
        }
        cache
            .prefetched
            .fetch_add(blocks.len() as u64, Ordering::Relaxed);
        tracing::debug!(blob = self.name(), blocks = blocks.len(), "prefetch");
        let inner = self.inner.clone();
        let cache = self.cache.clone();
        // The request that hinted is charged for what its prefetch fetches.
        let reads = crate::RequestReads::current();
        // Dropped unfinished (the thread could not start, or failed) the slot finishes its
        // blocks as failed, so that their readers fetch them themselves.
        let _ = std::thread::Builder::new()
            .name("packd-prefetch".into())
            .spawn(move || {
                let _charged = reads.as_ref().map(|r| r.enter());
                let keys = slot.keys().to_vec();
                for (key, got) in keys.into_iter().zip(inner.read_many(&blocks)) {
                    match got {
                        Ok(bytes) => {
                            let block = cache.put(key, &bytes);
                            slot.finish_next(Some(block));
                        }
                        Err(e) => {
                            tracing::debug!(blob = inner.name(), error = %e, "prefetch failed");
                            break;
                        }
                    }
                }
            });
    }
}

/// A cached `read_many`: batches of ranges whose missing blocks are fetched together.
struct CachedRead<'a> {
    blob: &'a CachedBlob,
    ranges: &'a [Range<u64>],
    next: usize,
    /// The first range past the batch loaded.
    batch_end: usize,
    /// The batch's blocks, by number.
    held: HashMap<u64, Bytes>,
    failed: bool,
}

impl CachedRead<'_> {
    /// Loads the blocks of the ranges from `self.next` on, up to [`BATCH_BYTES`] of them.
    fn load_batch(&mut self) -> Result<(), StorageError> {
        let blob = self.blob;
        let cache = &blob.cache;
        let len = blob.inner.len();
        self.held.clear();
        let mut held_bytes = 0;
        let mut missing: Vec<u64> = Vec::new();
        // Missing blocks a prefetch is fetching: waited for, not fetched again.
        let mut awaited: Vec<(u64, Arc<Pending>)> = Vec::new();
        let mut seen = std::collections::HashSet::new();
        let mut j = self.next;
        while j < self.ranges.len() && (j == self.next || held_bytes < BATCH_BYTES) {
            let r = &self.ranges[j];
            j += 1;
            if r.is_empty() || check_range(blob.name(), r, len).is_err() {
                continue;
            }
            for b in blob.blocks_of(r) {
                if !seen.insert(b) {
                    continue;
                }
                let block = blob.block_range(b);
                held_bytes += block.end - block.start;
                let key = blob.key(b);
                match cache.get(&key, block.end - block.start) {
                    Some(bytes) => {
                        self.held.insert(b, bytes);
                    }
                    None => match cache.in_flight.get(&key) {
                        Some(pending) => awaited.push((b, pending)),
                        None => missing.push(b),
                    },
                }
            }
        }
        self.batch_end = j;
        let first = self.ranges[self.next].start;
        let last = self.ranges[self.next..j]
            .iter()
            .filter(|r| !r.is_empty() && r.end <= len)
            .map(|r| r.end)
            .max();
        // A reader that starts where it ended last reads ahead, if it is missing blocks.
        let sequential = blob.sequential_end.load(Ordering::Relaxed) == first;
        let window = if sequential && !missing.is_empty() {
            let w = blob.read_ahead.load(Ordering::Relaxed);
            (if w == 0 { READ_AHEAD_FIRST } else { w * 2 }).min(READ_AHEAD_MAX)
        } else if sequential {
            blob.read_ahead.load(Ordering::Relaxed)
        } else {
            0
        };
        blob.read_ahead.store(window, Ordering::Relaxed);
        let mut ahead = Vec::new();
        if let (Some(last), true) = (last, window > 0 && !missing.is_empty()) {
            blob.sequential_end.store(last, Ordering::Relaxed);
            let from = last.div_ceil(cache.block);
            let to = (last + window).min(len).div_ceil(cache.block);
            for b in from..to {
                let block = blob.block_range(b);
                let key = blob.key(b);
                if cache.get(&key, block.end - block.start).is_none()
                    && cache.in_flight.get(&key).is_none()
                {
                    ahead.push(b);
                }
            }
        } else if let Some(last) = last {
            blob.sequential_end.store(last, Ordering::Relaxed);
        }
        if missing.is_empty() && ahead.is_empty() {
            return self.wait_for(awaited);
        }
        cache
            .misses
            .fetch_add(missing.len() as u64, Ordering::Relaxed);
        cache
            .read_ahead
            .fetch_add(ahead.len() as u64, Ordering::Relaxed);
        let asked = missing.len();
        missing.extend(ahead);
        let block_ranges: Vec<Range<u64>> = missing.iter().map(|&b| blob.block_range(b)).collect();
        tracing::debug!(
            blob = blob.name(),
            ranges = j - self.next,
            hits = self.held.len(),
            missing = asked,
            read_ahead = missing.len() - asked,
            "cached read_many batch"
        );
        for (i, got) in blob.inner.read_many(&block_ranges).enumerate() {
            let bytes = got?;
            let b = missing[i];
            let block = cache.put(blob.key(b), &bytes);
            if i < asked {
                self.held.insert(b, block);
            }
        }
        self.wait_for(awaited)
    }

    /// Holds the `awaited` blocks once their prefetch has them; those it failed to fetch are
    /// fetched here.
    fn wait_for(&mut self, awaited: Vec<(u64, Arc<Pending>)>) -> Result<(), StorageError> {
        if awaited.is_empty() {
            return Ok(());
        }
        let blob = self.blob;
        let cache = &blob.cache;
        cache
            .waited
            .fetch_add(awaited.len() as u64, Ordering::Relaxed);
        let mut failed = Vec::new();
        for (b, pending) in awaited {
            match pending.wait() {
                Some(bytes) => {
                    self.held.insert(b, bytes);
                }
                None => failed.push(b),
            }
        }
        if failed.is_empty() {
            return Ok(());
        }
        let ranges: Vec<Range<u64>> = failed.iter().map(|&b| blob.block_range(b)).collect();
        for (i, got) in blob.inner.read_many(&ranges).enumerate() {
            let b = failed[i];
            let block = cache.put(blob.key(b), &got?);
            self.held.insert(b, block);
        }
        Ok(())
    }

    /// Range `r` (non-empty, inside the blob) from the held blocks.
    fn assemble(&self, r: &Range<u64>) -> Bytes {
        let blob = self.blob;
        let blocks = blob.blocks_of(r);
        if blocks.end - blocks.start == 1 {
            let b = blocks.start;
            let bytes = &self.held[&b];
            let from = (r.start - blob.block_range(b).start) as usize;
            let to = (r.end - blob.block_range(b).start) as usize;
            // A small piece is copied, so that it does not keep its block alive.
            return if (to - from) * 4 >= bytes.len() {
                bytes.slice(from..to)
            } else {
                Bytes::copy_from_slice(&bytes[from..to])
            };
        }
        let mut out = BytesMut::with_capacity((r.end - r.start) as usize);
        for b in blocks {
            let block = blob.block_range(b);
            let from = r.start.max(block.start) - block.start;
            let to = r.end.min(block.end) - block.start;
            out.extend_from_slice(&self.held[&b][from as usize..to as usize]);
        }
        out.freeze()
    }
}

impl Iterator for CachedRead<'_> {
    type Item = Result<Bytes, StorageError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed || self.next >= self.ranges.len() {
            return None;
        }
        if self.next >= self.batch_end {
            if let Err(e) = self.load_batch() {
                self.failed = true;
                return Some(Err(e));
            }
        }
        let r = &self.ranges[self.next];
        self.next += 1;
        if let Err(e) = check_range(self.blob.name(), r, self.blob.inner.len()) {
            return Some(Err(e));
        }
        if r.is_empty() {
            return Some(Ok(Bytes::new()));
        }
        Some(Ok(self.assemble(r)))
    }
}

#[cfg(all(test, unix))]
mod forwarding_tests {
    use super::*;
    use crate::LocalStorage;

    #[test]
    fn a_read_only_replace_through_the_cache_stays_read_only() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let cache = Arc::new(BlockCache::new(&BlockCacheConfig::default()).unwrap());
        let s = CachedStorage::new(Arc::new(LocalStorage::new(dir.path())), cache);
        s.replace_read_only("info/commit-graph", None, b"one")
            .unwrap();
        let meta = std::fs::metadata(dir.path().join("info/commit-graph")).unwrap();
        assert_eq!(meta.permissions().mode() & 0o222, 0, "no write bit");
    }
}
