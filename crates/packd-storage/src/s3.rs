//! Blobs in a bucket of S3-compatible object storage (AWS S3, Ceph RGW, SeaweedFS, MinIO,
//! the Versity gateway the tests run), through the `object_store` crate's S3 client.
//!
//! # On the bucket
//!
//! A bucket holds many repositories under one prefix, each in git's own layout, so that a
//! repository copied out of the bucket key for key is one stock git reads:
//!
//! ```text
//! s3://BUCKET/PREFIX/REPO/objects/pack/pack-<checksum>.pack   immutable, put if absent
//! s3://BUCKET/PREFIX/REPO/objects/pack/pack-<checksum>.idx    immutable, put if absent
//! s3://BUCKET/PREFIX/REPO/objects/pack/pack-<checksum>.rev    (and .bitmap) likewise
//! s3://BUCKET/PREFIX/REPO/...                                 small mutable blobs (ref lists,
//!                                                             leases), replaced by If-Match
//! ```
//!
//! An [`S3Storage`] is rooted at one key prefix (for a repository's objects,
//! `PREFIX/REPO/objects`), as a [`crate::LocalStorage`] is rooted at a directory; blob names
//! are the same relative names (`pack/pack-X.idx`) on both. [`S3Storage::at`] roots another
//! storage deeper in the same bucket, sharing the client and its connections. Keys never end
//! in `/`, and a key is never also the "directory" of other keys (`x` beside `x/y`): some
//! servers (the Versity gateway over a filesystem) refuse that, and git's layout never needs it.
//!
//! # Sync over async
//!
//! packd-storage's interface is synchronous (its callers are the object database's readers,
//! run on plain threads or tokio's blocking pool) and `object_store` is async. Each storage
//! owns a small tokio runtime of its own (two worker threads), shared by the storages
//! [`S3Storage::at`] derives. A call spawns its request onto that runtime and waits for the
//! answer on a channel, so it behaves the same on any thread: a plain one, a
//! `spawn_blocking` thread of the server's runtime, even a task of another runtime (where
//! `Runtime::block_on` would panic; a task that waits blocks its worker for one request, as a
//! disk read does). The thread hop costs microseconds against a round trip of milliseconds.
//! [`Blob::read_many`] puts several requests in flight at once on that runtime.
//!
//! # Writes
//!
//! [`crate::write`]'s operations map onto conditional requests: [`Storage::create`] buffers
//! the blob (in memory, then in an unnamed temporary file past [`SPOOL_IN_MEMORY`]) and
//! publishes it by one `PUT` with `If-None-Match: *`; [`Storage::read_versioned`] returns the
//! object's ETag as its [`Version`]; [`Storage::replace`] is a `PUT` with `If-Match: ETAG`
//! (or `If-None-Match: *` to create). Conditional writes go through a second client that
//! retries nothing by itself; see `s3_write.rs` for what happens when the answer to one is
//! lost. A blob is published by one `PUT`, which S3 bounds at 5 GiB; larger packs would need
//! a multipart upload completed with `If-None-Match`, which is not written yet.

use crate::readv::{
    length_error, Answer, InOrder, LinkEstimate, ReadCounters, ReadOptions, ReadStats,
};
use crate::{check_range, Blob, NewBlob, Storage, StorageError, Version};
use bytes::{Bytes, BytesMut};
use object_store::aws::{AmazonS3, AmazonS3Builder};
use object_store::path::Path;
use object_store::{GetOptions, GetRange, ObjectStore, ObjectStoreExt, RetryConfig};
use std::future::Future;
use std::ops::Range;
use std::sync::Arc;

/// How reads (and unconditional requests) are retried: a failed connection, a 5xx or a
/// throttling answer (503 SlowDown) is tried again after a backoff doubling from 100 ms to at
/// most 2 s, at most 5 times and never past 15 s from the first attempt, so that a store
/// that went away fails a fetch within that budget (object_store's default would keep it
/// waiting up to 3 minutes) and one that throttles is eased off.
fn read_retries() -> RetryConfig {
    RetryConfig {
        backoff: object_store::BackoffConfig {
            init_backoff: std::time::Duration::from_millis(100),
            max_backoff: std::time::Duration::from_secs(2),
            base: 2.0,
        },
        max_retries: 5,
        retry_timeout: std::time::Duration::from_secs(15),
    }
}

/// Bytes a blob being created keeps in memory before it spills to a temporary file.
pub const SPOOL_IN_MEMORY: usize = 8 << 20;

/// Where a bucket is and how to sign requests to it.
#[derive(Clone, Debug, Default)]
pub struct S3Config {
    /// The bucket's name.
    pub bucket: String,
    /// The key prefix the storage is rooted at (no leading or trailing `/`; empty: the
    /// bucket's top).
    pub prefix: String,
    /// The server's URL (`http://127.0.0.1:9000`); `None`: AWS's own, from the region.
    pub endpoint: Option<String>,
    /// The region requests are signed for (`us-east-1` when `None` and the environment names
    /// none).
    pub region: Option<String>,
    /// The access key; `None`: from the environment (`AWS_ACCESS_KEY_ID`, a profile's
    /// instance credentials, ...).
    pub access_key_id: Option<String>,
    /// The secret key that goes with [`S3Config::access_key_id`].
    pub secret_access_key: Option<String>,
    /// Whether plain `http://` endpoints are allowed. Always allowed for a loopback endpoint
    /// (`127.0.0.1`, `localhost`, `[::1]`); elsewhere only if this or `AWS_ALLOW_HTTP` says so.
    pub allow_http: bool,
    /// How [`Blob::read_many`] coalesces ranges into requests (see `readv.rs`).
    pub reads: ReadOptions,
}

impl S3Config {
    /// A bucket and prefix, with everything else from the usual AWS environment variables
    /// (`AWS_ENDPOINT_URL`, `AWS_REGION` or `AWS_DEFAULT_REGION`, `AWS_ACCESS_KEY_ID`,
    /// `AWS_SECRET_ACCESS_KEY`, `AWS_SESSION_TOKEN`, `AWS_ALLOW_HTTP`).
    pub fn from_env(bucket: impl Into<String>, prefix: impl Into<String>) -> S3Config {
        let endpoint = ["AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL", "AWS_ENDPOINT"]
            .iter()
            .find_map(|var| std::env::var(var).ok());
        S3Config {
            bucket: bucket.into(),
            prefix: prefix.into(),
            endpoint,
            ..S3Config::default()
        }
    }

    /// Whether the endpoint is a plain-HTTP URL to this machine.
    fn is_loopback_http(&self) -> bool {
        let Some(rest) = self
            .endpoint
            .as_deref()
            .and_then(|e| e.strip_prefix("http://"))
        else {
            return false;
        };
        let host = rest.split('/').next().unwrap_or("");
        let host = match host.strip_prefix('[') {
            Some(v6) => v6.split(']').next().unwrap_or(""),
            None => host.split(':').next().unwrap_or(""),
        };
        host == "localhost"
            || host
                .parse::<std::net::IpAddr>()
                .is_ok_and(|ip| ip.is_loopback())
    }
}

/// The runtime requests run on; shut down in the background when the last storage using it
/// goes, so that dropping a storage inside an async context does not panic.
#[derive(Debug)]
struct Runtime(Option<tokio::runtime::Runtime>);

impl Drop for Runtime {
    fn drop(&mut self) {
        if let Some(rt) = self.0.take() {
            rt.shutdown_background();
        }
    }
}

/// What the storages rooted in one bucket share.
#[derive(Debug)]
pub(crate) struct Shared {
    runtime: Runtime,
    /// The client for reads (and unconditional requests): `object_store` retries what fails
    /// with backoff.
    pub(crate) store: Arc<AmazonS3>,
    /// The client for conditional writes, which retries nothing itself: a conditional `PUT`
    /// whose answer was lost must not be sent again blindly (its second try would be refused
    /// by the first one's success); `s3_write.rs` reads the key and decides.
    pub(crate) writes: Arc<AmazonS3>,
    pub(crate) bucket: String,
    /// How ranges are coalesced.
    reads: ReadOptions,
    /// This store's latency and bandwidth, measured on its answers.
    link: LinkEstimate,
    /// What the reads of all blobs of this store cost.
    counters: ReadCounters,
    /// The size and ETag of content-named blobs as the last listing of their directory gave
    /// them (see [`is_content_named`]), so that opening a pack after listing its directory
    /// costs no `HEAD`: a repository's open lists `pack/` and opens every file in it.
    listed: std::sync::Mutex<Listed>,
    /// The listing a request made, by directory key and the writes this process had made
    /// then: the same request listing the same directory again (a repository's stamp, then
    /// its open) takes it, once, rather than another `LIST` round trip.
    request_lists: crate::PerRequest<(String, u64), Vec<String>>,
    /// Writes (publish, replace, delete) this process made through the store: a listing
    /// made before one is not reused.
    written: std::sync::atomic::AtomicU64,
}

/// What the listings of a store said of its content-named blobs (see [`Shared::listed`]).
#[derive(Debug, Default)]
struct Listed {
    /// Each blob's size and ETag, by key.
    blobs: std::collections::HashMap<String, (u64, Option<String>)>,
    /// The directories (keys ending in `/`) listed since, whose content-named blobs are all in
    /// `blobs`: [`Storage::exists`] and [`Storage::open`] answer for the pack files of those
    /// from it, as the repository's stamp (the same listing) says what it shows, until the
    /// next listing.
    dirs: std::collections::HashSet<String>,
}

impl Listed {
    /// What the listings say of the blob at `key`: `None` when they cannot tell (not a
    /// content-named blob, or its directory not listed), else its size and ETag if it is there.
    fn lookup(&self, key: &str) -> Option<Option<(u64, Option<String>)>> {
        if let Some(found) = self.blobs.get(key) {
            return Some(Some(found.clone()));
        }
        // Absent only for the files of `pack/`, which readers open right after listing it (a
        // repository's open, its stamp): a reftable named by a `tables.list` read later may
        // be newer than any listing, so its absence is always asked.
        let (dir, file) = key.split_at(key.rfind('/').map_or(0, |i| i + 1));
        let pack_file = file.starts_with("pack-") || file.starts_with("multi-pack-index-");
        (pack_file && self.dirs.contains(dir)).then_some(None)
    }
}

/// The most listed blobs [`Shared::listed`] remembers (it is emptied when full).
const MAX_LISTED: usize = 1 << 16;

/// Whether the blob at `key` is named by its contents, so that its size and ETag, once
/// listed, stay true as long as it exists: git's pack files (`pack-<checksum>.*`), a
/// multi-pack-index's bitmap and reverse index, split commit-graphs, reftables. Mutable blobs
/// (`multi-pack-index`, `commit-graph`, `tables.list`, `config`) are always asked for.
fn is_content_named(key: &str) -> bool {
    let file = key.rsplit('/').next().unwrap_or(key);
    file.starts_with("pack-")
        || file.starts_with("multi-pack-index-")
        || (file.starts_with("graph-") && file.ends_with(".graph"))
        || (file.starts_with("0x") && file.ends_with(".ref"))
}

impl Shared {
    /// Runs `request` on the storage's runtime and waits for its answer (see the module's
    /// doc: this works on any thread).
    pub(crate) fn block<F>(&self, request: F) -> F::Output
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        let rt = self
            .runtime
            .0
            .as_ref()
            .expect("the runtime lives as long as the storage");
        rt.spawn(async move {
            let _ = tx.send(request.await);
        });
        rx.recv()
            .expect("a request on the S3 runtime ended without an answer")
    }
}

/// A [`Storage`] rooted at a key prefix of a bucket.
#[derive(Debug, Clone)]
pub struct S3Storage {
    pub(crate) shared: Arc<Shared>,
    /// The prefix, without leading or trailing `/` (empty: the bucket's top).
    pub(crate) prefix: String,
}

impl S3Storage {
    /// Storage for the blobs under `config.prefix` of `config.bucket`. Fails if the
    /// configuration is incomplete (no bucket, no region the signer can use, an `http://`
    /// endpoint that is not allowed); makes no request.
    pub fn new(config: &S3Config) -> Result<S3Storage, StorageError> {
        let describe = format!("s3://{}/{}", config.bucket, config.prefix);
        let fail = |e: &dyn std::fmt::Display| StorageError::Io {
            name: describe.clone(),
            source: std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!("cannot configure the S3 client: {e}"),
            ),
        };
        install_tls_provider();
        let mut builder = AmazonS3Builder::from_env()
            .with_bucket_name(&config.bucket)
            // Path-style requests (`ENDPOINT/BUCKET/KEY`): what servers other than AWS's
            // all answer, and AWS too.
            .with_virtual_hosted_style_request(false);
        if let Some(endpoint) = &config.endpoint {
            builder = builder.with_endpoint(endpoint);
        }
        let env_region =
            std::env::var_os("AWS_REGION").or_else(|| std::env::var_os("AWS_DEFAULT_REGION"));
        match (&config.region, env_region) {
            (Some(region), _) => builder = builder.with_region(region),
            (None, None) => builder = builder.with_region("us-east-1"),
            (None, Some(_)) => {}
        }
        if let Some(key) = &config.access_key_id {
            builder = builder.with_access_key_id(key);
        }
        if let Some(secret) = &config.secret_access_key {
            builder = builder.with_secret_access_key(secret);
        }
        if config.allow_http || config.is_loopback_http() {
            builder = builder.with_allow_http(true);
        }
        let writes = builder
            .clone()
            .with_retry(RetryConfig {
                max_retries: 0,
                ..RetryConfig::default()
            })
            .build()
            .map_err(|e| fail(&e))?;
        let store = builder
            .with_retry(read_retries())
            .build()
            .map_err(|e| fail(&e))?;
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("packd-s3")
            .enable_all()
            .build()
            .map_err(|e| fail(&e))?;
        Ok(S3Storage {
            shared: Arc::new(Shared {
                runtime: Runtime(Some(runtime)),
                store: Arc::new(store),
                writes: Arc::new(writes),
                bucket: config.bucket.clone(),
                reads: config.reads,
                link: LinkEstimate::default(),
                counters: ReadCounters::default(),
                listed: Default::default(),
                request_lists: Default::default(),
                written: Default::default(),
            }),
            prefix: config.prefix.trim_matches('/').to_string(),
        })
    }

    /// Storage rooted at `sub` below this one's prefix (`REPO/objects` below a server's
    /// prefix), sharing the client, its connections and its runtime.
    pub fn at(&self, sub: &str) -> S3Storage {
        S3Storage {
            shared: self.shared.clone(),
            prefix: self.key(sub.trim_matches('/')),
        }
    }

    /// Notes that the content-named blob `name` was just published with `len` bytes, so that
    /// an `exists` or `open` of it answered from a listing (see [`Shared::listed`]) finds it.
    pub(crate) fn remember_published(&self, name: &str, len: u64, e_tag: Option<String>) {
        self.wrote();
        let Ok(path) = self.path(name) else { return };
        if is_content_named(path.as_ref()) {
            if let Ok(mut known) = self.shared.listed.lock() {
                known.blobs.insert(path.to_string(), (len, e_tag));
            }
        }
    }

    /// What the reads of this store (this storage and all those rooted in the same client)
    /// have cost so far.
    pub fn read_stats(&self) -> ReadStats {
        self.shared.counters.get()
    }

    /// The store's latency and bandwidth (bytes per second) as measured so far, and the gap
    /// [`crate::Coalescing::Merge`] merges across.
    pub fn link_estimate(&self) -> (std::time::Duration, f64, u64) {
        let (latency, bandwidth) = self.shared.link.get();
        (latency, bandwidth, self.shared.link.break_even_gap())
    }

    /// The key prefix this storage is rooted at.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// The bucket key of blob `name`.
    pub(crate) fn key(&self, name: &str) -> String {
        match (self.prefix.is_empty(), name.is_empty()) {
            (true, _) => name.to_string(),
            (false, true) => self.prefix.clone(),
            (false, false) => format!("{}/{name}", self.prefix),
        }
    }

    /// Notes a write of this process (a listing made before it is not reused).
    pub(crate) fn wrote(&self) {
        self.shared
            .written
            .fetch_add(1, std::sync::atomic::Ordering::AcqRel);
    }

    /// The `object_store` path of blob `name`, refusing names that are not plain relative
    /// paths (empty parts, `.`, `..`, a leading or trailing `/`).
    pub(crate) fn path(&self, name: &str) -> Result<Path, StorageError> {
        let bad = name.is_empty()
            || name
                .split('/')
                .any(|part| part.is_empty() || part == "." || part == "..");
        let parsed = if bad {
            None
        } else {
            Path::parse(self.key(name)).ok()
        };
        parsed.ok_or_else(|| StorageError::Io {
            name: self.describe(name),
            source: std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "not a valid blob name (a relative path of plain parts)",
            ),
        })
    }
}

/// Makes rustls' ring provider the process's default for TLS (reqwest is built without one of
/// its own, which keeps a second C crypto library out of the build); does nothing if a default
/// is already installed.
fn install_tls_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// [`StorageError`] for an `object_store` error about blob `name` (described as `described`).
pub(crate) fn storage_error(described: String, e: object_store::Error) -> StorageError {
    match e {
        object_store::Error::NotFound { .. } => StorageError::NotFound { name: described },
        object_store::Error::AlreadyExists { .. } => {
            StorageError::AlreadyExists { name: described }
        }
        object_store::Error::Precondition { .. } => StorageError::Conflict { name: described },
        e => StorageError::Io {
            name: described,
            source: std::io::Error::other(e),
        },
    }
}

impl Storage for S3Storage {
    fn open(&self, name: &str) -> Result<Arc<dyn Blob>, StorageError> {
        let path = self.path(name)?;
        let listed = match self.shared.listed.lock() {
            Ok(known) => known.lookup(path.as_ref()),
            Err(_) => None,
        };
        if let Some(None) = listed {
            return Err(StorageError::NotFound {
                name: self.describe(name),
            });
        }
        if let Some(Some((len, e_tag))) = listed {
            return Ok(Arc::new(S3Blob {
                name: self.describe(name),
                shared: self.shared.clone(),
                path,
                len,
                e_tag,
            }));
        }
        let store = self.shared.store.clone();
        let started = std::time::Instant::now();
        let head = {
            let path = path.clone();
            self.shared.block(async move { store.head(&path).await })
        };
        crate::scope::count_head();
        let meta = head.map_err(|e| storage_error(self.describe(name), e))?;
        // A HEAD is one round trip: the first latency figure before any GET.
        self.shared.link.observe_latency(started.elapsed());
        tracing::debug!(blob = %self.describe(name), "S3 HEAD (open)");
        Ok(Arc::new(S3Blob {
            name: self.describe(name),
            shared: self.shared.clone(),
            path,
            len: meta.size,
            e_tag: meta.e_tag,
        }))
    }

    fn list(&self, dir: &str) -> Result<Vec<String>, StorageError> {
        // `refs/` names the same directory as `refs`, as on a disk.
        let dir = dir.trim_end_matches('/');
        let prefix = if dir.is_empty() && self.prefix.is_empty() {
            None
        } else if dir.is_empty() {
            Some(
                Path::parse(&self.prefix)
                    .map_err(|e| storage_error(self.describe(dir), e.into()))?,
            )
        } else {
            Some(self.path(dir)?)
        };
        let memo_key = (
            self.key(dir),
            self.shared
                .written
                .load(std::sync::atomic::Ordering::Acquire),
        );
        // Taken once: a caller that lists again (it found the listing out of date: a pack
        // gone since) asks the store.
        if let Some(names) = self.shared.request_lists.take(&memo_key) {
            return Ok(names);
        }
        crate::scope::count_list();
        let store = self.shared.store.clone();
        let listed = self
            .shared
            .block(async move { store.list_with_delimiter(prefix.as_ref()).await })
            .map_err(|e| storage_error(self.describe(dir), e))?;
        tracing::debug!(dir = %self.describe(dir), "S3 LIST");
        if let Ok(mut known) = self.shared.listed.lock() {
            if known.blobs.len() > MAX_LISTED || known.dirs.len() > MAX_LISTED {
                *known = Listed::default();
            }
            // What this directory no longer holds is forgotten (a pack a repack removed).
            let here = format!("{}/", self.key(dir));
            let now: std::collections::HashSet<&str> =
                listed.objects.iter().map(|o| o.location.as_ref()).collect();
            known.blobs.retain(|key, _| {
                let in_dir = key.starts_with(&here) && !key[here.len()..].contains('/');
                !in_dir || now.contains(key.as_str())
            });
            for o in listed.objects.iter() {
                if is_content_named(o.location.as_ref()) {
                    known
                        .blobs
                        .insert(o.location.to_string(), (o.size, o.e_tag.clone()));
                }
            }
            known.dirs.insert(here);
        }
        let mut names: Vec<String> = listed
            .objects
            .iter()
            .map(|o| &o.location)
            .chain(&listed.common_prefixes)
            .filter_map(|p| p.filename().map(str::to_string))
            .collect();
        names.sort();
        names.dedup();
        self.shared.request_lists.put(memo_key, names.clone());
        Ok(names)
    }

    fn exists(&self, name: &str) -> bool {
        let Ok(path) = self.path(name) else {
            return false;
        };
        if let Some(found) = self
            .shared
            .listed
            .lock()
            .ok()
            .and_then(|known| known.lookup(path.as_ref()))
        {
            return found.is_some();
        }
        crate::scope::count_head();
        let store = self.shared.store.clone();
        tracing::debug!(blob = %self.describe(name), "S3 HEAD (exists)");
        match self.shared.block(async move { store.head(&path).await }) {
            Ok(_) => true,
            Err(object_store::Error::NotFound { .. }) => false,
            // The trait answers yes or no; a store that cannot be asked is logged, so that a
            // "missing" object caused by an outage can be told from a missing one.
            Err(e) => {
                tracing::warn!(blob = %self.describe(name), error = %e, "S3 HEAD failed");
                false
            }
        }
    }

    fn describe(&self, name: &str) -> String {
        format!("s3://{}/{}", self.shared.bucket, self.key(name))
    }

    fn create(&self, name: &str) -> Result<Box<dyn NewBlob>, StorageError> {
        self.path(name)?;
        Ok(Box::new(crate::s3_write::S3NewBlob::start(
            self.clone(),
            name,
        )))
    }

    fn read_versioned(&self, name: &str) -> Result<Option<(Bytes, Version)>, StorageError> {
        crate::s3_write::read_versioned(self, name)
    }

    fn replace(
        &self,
        name: &str,
        expected: Option<&Version>,
        bytes: &[u8],
    ) -> Result<Version, StorageError> {
        crate::s3_write::replace(self, name, expected, bytes)
    }

    fn delete(&self, name: &str) -> Result<bool, StorageError> {
        self.wrote();
        if let (Ok(path), Ok(mut known)) = (self.path(name), self.shared.listed.lock()) {
            known.blobs.remove(path.as_ref());
        }
        crate::s3_write::delete(self, name)
    }
}

/// One object of the bucket, read by ranged `GET`s. Its length and ETag are those `open`'s
/// `HEAD` saw; each read asks for that ETag (`If-Match`), so a key replaced since (which
/// git's layout never does to an immutable blob) fails the read rather than mixing bytes of
/// two objects.
#[derive(Debug)]
struct S3Blob {
    name: String,
    shared: Arc<Shared>,
    path: Path,
    len: u64,
    e_tag: Option<String>,
}

impl S3Blob {
    /// Starts the `GET` of `range` on the runtime; its answer goes to `done`, tagged `id`.
    fn start_get(
        &self,
        id: usize,
        range: Range<u64>,
        done: std::sync::mpsc::Sender<Answer>,
    ) -> tokio::task::AbortHandle {
        let rt = self
            .shared
            .runtime
            .0
            .as_ref()
            .expect("the runtime lives as long as the storage");
        let get = get_range(
            self.shared.clone(),
            self.path.clone(),
            self.e_tag.clone(),
            self.name.clone(),
            range,
        );
        // The GET completes on the runtime's threads: it counts in the caller's scope.
        let reads = crate::scope::RequestReads::current();
        rt.spawn(async move {
            let got = get.await;
            if let Some(reads) = &reads {
                reads.add_get(got.as_ref().map_or(0, |b| b.len() as u64));
            }
            let _ = done.send((id, got));
        })
        .abort_handle()
    }
}

/// One ranged `GET` of `path` (at ETag `e_tag`; named `name` in errors): exactly the bytes of
/// `range`, or an error. Feeds the store's latency and bandwidth estimate.
async fn get_range(
    shared: Arc<Shared>,
    path: Path,
    e_tag: Option<String>,
    name: String,
    range: Range<u64>,
) -> Result<Bytes, StorageError> {
    use futures_util::StreamExt;
    let want = range.end - range.start;
    let options = GetOptions {
        range: Some(GetRange::Bounded(range.clone())),
        if_match: e_tag,
        ..GetOptions::default()
    };
    let started = std::time::Instant::now();
    let answer = shared
        .store
        .get_opts(&path, options)
        .await
        .map_err(|e| storage_error(name.clone(), e))?;
    let head = started.elapsed();
    if answer.range != range {
        return Err(StorageError::Io {
            name,
            source: std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!(
                    "the store answered bytes {}..{} for bytes {}..{}",
                    answer.range.start, answer.range.end, range.start, range.end
                ),
            ),
        });
    }
    // The request's own size (bounded by the request cap), never a size the store sent.
    let mut body = BytesMut::with_capacity(want as usize);
    let mut stream = answer.into_stream();
    while let Some(piece) = stream.next().await {
        let piece = piece.map_err(|e| storage_error(name.clone(), e))?;
        if body.len() as u64 + piece.len() as u64 > want {
            return Err(length_error(&name, &range, body.len() + piece.len()));
        }
        body.extend_from_slice(&piece);
    }
    if body.len() as u64 != want {
        return Err(length_error(&name, &range, body.len()));
    }
    shared.link.observe_latency(head);
    shared.link.observe_body(want, started.elapsed() - head);
    tracing::debug!(
        blob = %name,
        start = range.start,
        end = range.end,
        ms = started.elapsed().as_secs_f64() * 1000.0,
        "S3 GET"
    );
    Ok(body.freeze())
}

impl Blob for S3Blob {
    fn name(&self) -> &str {
        &self.name
    }

    fn len(&self) -> u64 {
        self.len
    }

    fn tag(&self) -> Option<&str> {
        self.e_tag.as_deref()
    }

    fn read(&self, range: Range<u64>) -> Result<Bytes, StorageError> {
        check_range(&self.name, &range, self.len)?;
        if range.is_empty() {
            return Ok(Bytes::new());
        }
        let want = range.end - range.start;
        if want > self.shared.reads.max_request_bytes {
            // Cut into requests that run side by side.
            let one = [range];
            return self.read_many(&one).next().expect("one answer per range");
        }
        let got = self.shared.block(get_range(
            self.shared.clone(),
            self.path.clone(),
            self.e_tag.clone(),
            self.name.clone(),
            range,
        ));
        self.shared.counters.add(&ReadStats {
            read_many_calls: 0,
            gets: 1,
            bytes_fetched: if got.is_ok() { want } else { 0 },
            bytes_used: if got.is_ok() { want } else { 0 },
        });
        crate::scope::count_get(got.as_ref().map_or(0, |b| b.len() as u64));
        got
    }

    fn read_many<'a>(
        &'a self,
        ranges: &'a [Range<u64>],
    ) -> Box<dyn Iterator<Item = Result<Bytes, StorageError>> + 'a> {
        Box::new(InOrder::new(
            &self.name,
            self.len,
            ranges,
            self.shared.reads,
            // A read keeps several requests in flight, so one more request costs a share of
            // a round trip, not a whole one: the gap worth fetching shrinks with it (a
            // prefetch of a walk's scattered trees fetched 3.3 times the bytes it used when
            // gaps up to latency x bandwidth were merged, 2 MB at 20 ms and 100 MB/s).
            self.shared.link.break_even_gap() / self.shared.reads.max_in_flight.max(1) as u64,
            Box::new(move |id, range, done| self.start_get(id, range, done)),
            &self.shared.counters,
        ))
    }
}
