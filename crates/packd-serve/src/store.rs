//! Serving repositories kept in object storage (`packd serve --store s3://BUCKET/PREFIX`)
//! rather than under a directory: each is a prefix of the store in the layout `packd import`
//! writes (git's object files, `config`, refs as a reftable stack: see the packd binary's
//! `bucket.rs`), read through the storage layer.
//!
//! ```text
//! request /NAME         PREFIX/NAME, else PREFIX/NAME.git: a repository when its
//!                       reftable/tables.list exists (the last file an import writes)
//! CACHE/NAME[.git]/     this server's directory for it: what packd derives from the
//!                       repository (packd-cache/: clone packs, kept walks), never its data
//! ```
//!
//! The name is checked as a local one is ([`crate::paths::check_relative`]: no `..`, no empty
//! or absolute path), so it maps onto one prefix and one cache directory below the roots.
//! Whether the repository changed since it was opened (its [`Stamp`]) is the listing of its
//! `objects/pack/` and the version of its `config`: packs are named by their contents, so an
//! unchanged listing means unchanged packs. Refs are read on every request, from a snapshot of
//! the stack.
//!
//! A push ([`StoredRepository`], `packd_protocol::receive_store`) is indexed and checked in a
//! quarantine in this server's directory for the repository, its pack and index then put into
//! the store (put if absent, the index last), and its refs moved by a new table of the stack
//! and a compare-and-swap of `tables.list`: a push that loses the race to another server's
//! re-reads the list and goes on when its refs still hold what it expected. Then, off the
//! push's path, the stack's sweep deletes the tables compactions left unlisted for longer
//! than the grace period. A push cannot create a repository in the store (an import does).

use crate::paths::{check_relative, PathError};
use crate::stamp::Stamp;
use bytes::Bytes;
use packd_odb::ObjectId;
use packd_odb::{Repository, RepositoryOptions};
use packd_protocol::receive_store::PushStore;
use packd_reftable::{Stack, StackOptions, TABLES_LIST};
use packd_storage::{PerRequest, Storage};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Storage rooted at a path below the served prefix (`a/b.git` -> `PREFIX/a/b.git`).
pub type StorageAt = dyn Fn(&str) -> Arc<dyn Storage> + Send + Sync;

/// The repositories under one prefix of a store, and this server's directory of what it
/// derives from them.
pub struct StoreRoot {
    at: Box<StorageAt>,
    describe: String,
    cache: PathBuf,
    /// The `config` the last stamp read, for the request that took it and the repository:
    /// that request's open then takes it rather than reading it again (a round trip).
    stamped_config: PerRequest<String, Bytes>,
    /// The last path [`StoreRoot::resolve`] found, for the request that asked: a request
    /// resolves its path more than once (a push: its gate, then its target), and each is a
    /// round trip.
    resolved: PerRequest<String, PathBuf>,
}

impl std::fmt::Debug for StoreRoot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StoreRoot")
            .field("store", &self.describe)
            .field("cache", &self.cache)
            .finish()
    }
}

impl StoreRoot {
    /// The repositories of the store `describe` (`s3://BUCKET/PREFIX`, for messages), `at`
    /// giving the storage of a path below it, with derived data under `cache` (made if
    /// missing, then canonicalized).
    pub fn new(at: Box<StorageAt>, describe: String, cache: &Path) -> std::io::Result<StoreRoot> {
        std::fs::create_dir_all(cache)?;
        Ok(StoreRoot {
            at,
            describe,
            cache: cache.canonicalize()?,
            stamped_config: PerRequest::new(),
            resolved: PerRequest::new(),
        })
    }

    /// The directory under which each repository's derived data lives.
    pub fn cache(&self) -> &Path {
        &self.cache
    }

    /// The store, as given.
    pub fn describe(&self) -> &str {
        &self.describe
    }

    /// Maps a decoded repository path onto the repository it names in the store (`PATH`, else
    /// `PATH.git`), as this server's directory for it (see [`StoreRoot::open`]).
    pub fn resolve(&self, decoded: &str) -> Result<PathBuf, PathError> {
        if let Some(found) = self.resolved.get(&decoded.to_string()) {
            return Ok(found);
        }
        let rel = check_relative(decoded)?;
        let shown = rel.display().to_string();
        let with_git = format!("{shown}.git");
        for candidate in [shown.as_str(), with_git.as_str()] {
            let reftable = (self.at)(&format!("{candidate}/reftable"));
            if reftable.exists(TABLES_LIST) {
                let found = self.cache.join(candidate);
                self.resolved.put(decoded.to_string(), found.clone());
                return Ok(found);
            }
        }
        Err(PathError::NotFound(shown))
    }

    /// The path in the store of the repository whose directory here is `local`.
    fn key_of<'a>(&self, local: &'a Path) -> Result<&'a str, packd_odb::Error> {
        local
            .strip_prefix(&self.cache)
            .ok()
            .and_then(|rel| rel.to_str())
            .filter(|rel| !rel.is_empty())
            .ok_or_else(|| {
                packd_odb::Error::NotARepository(format!(
                    "{}: not a repository of {}",
                    local.display(),
                    self.describe
                ))
            })
    }

    /// Opens the repository whose directory here is `local` (made if missing: it holds only
    /// what this server derives): its config, objects and refs read from the store.
    pub fn open(
        &self,
        local: &Path,
        options: &RepositoryOptions,
    ) -> Result<Repository, packd_odb::Error> {
        let key = self.key_of(local)?;
        std::fs::create_dir_all(local).map_err(|source| packd_odb::Error::Io {
            path: local.display().to_string(),
            source,
        })?;
        let repo = (self.at)(key);
        let config = match self.stamped_config.take(&key.to_string()) {
            Some(bytes) => bytes,
            None => repo
                .read_versioned("config")?
                .map(|(bytes, _)| bytes)
                .unwrap_or_default(),
        };
        let objects = (self.at)(&format!("{key}/objects"));
        let refs = packd_refs::ReftableRefs::new(Stack::new((self.at)(&format!("{key}/reftable"))));
        Repository::open_stored(
            local,
            &config,
            &repo.describe("config"),
            vec![objects],
            Arc::new(refs),
            options,
        )
    }

    /// The repository whose directory here is `local`, as a push writes it.
    pub fn push_store(self: &Arc<Self>, local: &Path) -> Arc<dyn PushStore> {
        Arc::new(StoredRepository {
            root: self.clone(),
            local: local.to_path_buf(),
        })
    }

    /// What the repository whose directory here is `local` looks like now, to tell whether an
    /// open of it is still current.
    pub fn stamp(&self, local: &Path) -> Stamp {
        match self.key_of(local) {
            Ok(key) => {
                let objects = (self.at)(&format!("{key}/objects"));
                let repo = (self.at)(key);
                Stamp::of_storage(objects.as_ref(), || {
                    let (bytes, version) = repo.read_versioned("config").ok().flatten()?;
                    self.stamped_config.put(key.to_string(), bytes);
                    Some(version.0)
                })
            }
            Err(_) => Stamp::of_storage(&packd_storage::LocalStorage::new(local), || None),
        }
    }
}

/// One repository of a store, as receive-pack opens and writes it.
#[derive(Debug)]
pub struct StoredRepository {
    root: Arc<StoreRoot>,
    local: PathBuf,
}

impl StoredRepository {
    /// The storage at `sub` of this repository (`objects`, `reftable`).
    fn at(&self, sub: &str) -> Result<Arc<dyn Storage>, packd_odb::Error> {
        let key = self.root.key_of(&self.local)?;
        Ok((self.root.at)(&format!("{key}/{sub}")))
    }
}

impl PushStore for StoredRepository {
    fn open(&self) -> Result<Repository, packd_odb::Error> {
        self.root.open(&self.local, &RepositoryOptions::default())
    }

    fn objects(&self) -> Arc<dyn Storage> {
        match self.at("objects") {
            Ok(objects) => objects,
            // Not a repository of the store: the push was checked against one, so this is
            // not reached; a storage that takes nothing refuses the objects.
            Err(_) => Arc::new(packd_storage::LocalStorage::new(self.local.join("objects"))),
        }
    }

    fn apply(
        &self,
        updates: &[packd_refs::RefUpdate],
        atomic: bool,
        options: &packd_refs::TransactionOptions<'_>,
        peeled: &HashMap<ObjectId, ObjectId>,
    ) -> Vec<packd_refs::RefResult> {
        match self.at("reftable") {
            Ok(reftable) => {
                // Compacted after the push is acknowledged, not before: in a bucket a
                // compaction is four round trips (the list, the new table, the merged table,
                // the list again) the pusher need not wait for.
                let stack = Stack::with_options(
                    reftable,
                    StackOptions {
                        auto_compact: false,
                        ..StackOptions::default()
                    },
                );
                let results = packd_refs::apply_to_stack(&stack, updates, atomic, options, peeled);
                // Off the push's path: the geometric compaction, then the sweep, which deletes
                // the tables compactions left unlisted once the grace period is over (never
                // under a reader).
                std::thread::spawn(move || {
                    if let Err(e) = stack.compact() {
                        tracing::warn!("compacting the reftables: {e}");
                    }
                    if let Err(e) = stack.sweep(stack.options().grace) {
                        tracing::warn!("sweeping the reftables: {e}");
                    }
                });
                results
            }
            Err(e) => updates
                .iter()
                .map(|_| {
                    Err(packd_refs::Refusal::with_error(
                        packd_refs::UPDATE_FAILED,
                        e.to_string(),
                    ))
                })
                .collect(),
        }
    }
}
