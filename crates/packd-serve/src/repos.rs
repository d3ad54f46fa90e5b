//! The repository cache: one [`UploadPack`] per served repository, kept between requests so
//! that pack indexes, bitmaps and the delta base cache stay loaded.
//!
//! Each lookup takes the repository's [`Stamp`] (the names in `objects/pack`, the
//! multi-pack-index's checksum, a few files' identity: alternates, commit-graphs, the
//! configuration files git reads); when it changed since the repository was opened (a repack,
//! a new pack from a push, a new bitmap or commit-graph, new alternates, a new
//! `uploadpack.hideRefs`) the repository is opened again. Refs are read by the protocol layer
//! on every request, so they need no stamp. A request that wants an object the repository it
//! got does not have asks again ([`RepoCache::reopen_after_miss`]), as git looks at its packs
//! again before it calls an object missing: that covers what no stamp shows (the packs of an
//! alternate). The cache holds at most `capacity` repositories and evicts the one used least
//! recently.

use crate::stamp::Stamp;
use packd_odb::{Repository, RepositoryOptions};
use packd_pack::clone_cache::CloneCacheConfig;
use packd_pack::PackServer;
use packd_protocol::{UploadPack, UploadPackOptions};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

/// Why a repository could not be opened for serving.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    /// Reading the repository failed.
    #[error(transparent)]
    Odb(#[from] packd_odb::Error),
}

struct Entry {
    upload: Arc<UploadPack>,
    stamp: Stamp,
    /// When its open began (it shows every object stored before).
    opened: Instant,
    last_used: u64,
}

struct Inner {
    entries: HashMap<PathBuf, Entry>,
    /// Repositories being opened, each with the lock its opener holds meanwhile.
    opening: HashMap<PathBuf, Arc<Mutex<()>>>,
    tick: u64,
}

/// Opened repositories by canonical git directory, bounded, reopened when their packs change.
pub struct RepoCache {
    inner: Mutex<Inner>,
    capacity: usize,
    options: UploadPackOptions,
    /// Budget of each repository's clone cache (0: none).
    clone_cache_bytes: u64,
    /// How repositories are opened.
    repository: RepositoryOptions,
    /// The store the repositories are in, when they are not under a directory.
    store: Option<Arc<crate::store::StoreRoot>>,
}

impl RepoCache {
    /// A cache of at most `capacity` repositories (at least 1), serving with `options`, each
    /// keeping up to `clone_cache_bytes` of clone packs (see `packd_pack::clone_cache`) and
    /// opened with `repository`.
    pub fn new(
        capacity: usize,
        options: UploadPackOptions,
        clone_cache_bytes: u64,
        repository: RepositoryOptions,
    ) -> RepoCache {
        RepoCache {
            inner: Mutex::new(Inner {
                entries: HashMap::new(),
                opening: HashMap::new(),
                tick: 0,
            }),
            capacity: capacity.max(1),
            options,
            clone_cache_bytes,
            repository,
            store: None,
        }
    }

    /// The same cache, opening the repositories of `store` (the git directories it is given
    /// are the store's directories of derived data: see [`crate::store`]).
    pub fn with_store(mut self, store: Arc<crate::store::StoreRoot>) -> RepoCache {
        self.store = Some(store);
        self
    }

    /// The stamp of the repository at `git_dir` (see [`Stamp`]).
    fn stamp(&self, git_dir: &Path) -> Stamp {
        match &self.store {
            Some(store) => store.stamp(git_dir),
            None => Stamp::of(git_dir),
        }
    }

    /// How many repositories are open.
    pub fn len(&self) -> usize {
        self.inner.lock().entries.len()
    }

    /// Whether no repository is open.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// upload-pack for the repository whose canonical git directory is `git_dir`, opened now
    /// or taken from the cache. Blocking (it stats files and may open the repository): call it
    /// off the async runtime.
    pub fn get(&self, git_dir: &Path) -> Result<Arc<UploadPack>, OpenError> {
        self.lookup(git_dir, None)
    }

    /// [`RepoCache::get`] for a request, begun at `asked`, that wants an object the
    /// repository it got lacks: the repository opened again, unless an open begun since
    /// `asked` is cached (another request that missed too reopened it; an object stored
    /// before the request began is in that one, so a client asking for a missing object
    /// cannot make every request reopen).
    pub fn reopen_after_miss(
        &self,
        git_dir: &Path,
        asked: Instant,
    ) -> Result<Arc<UploadPack>, OpenError> {
        self.lookup(git_dir, Some(asked))
    }

    /// The cached upload-pack of `git_dir` if still current (and opened since `opened_since`,
    /// when given), else opened now.
    fn lookup(
        &self,
        git_dir: &Path,
        opened_since: Option<Instant>,
    ) -> Result<Arc<UploadPack>, OpenError> {
        let stamp = self.stamp(git_dir);
        if let Some(upload) = self.cached(git_dir, &stamp, opened_since) {
            return Ok(upload);
        }
        // Opened outside the cache's lock: other repositories keep being served meanwhile. One
        // request opens a repository and the others that want it wait for that one: each open
        // has its own indexes, delta base cache and kept walks, so requests that came together
        // (a fleet of mirror clones after a repack) would each make the same fill-in walk on
        // their own (see `BitmapIndex::walk_alone`).
        let opening = {
            let mut inner = self.inner.lock();
            inner
                .opening
                .entry(git_dir.to_path_buf())
                .or_default()
                .clone()
        };
        // Stamped again when this request waited for another's open: the files may have
        // changed meanwhile. One that did not wait keeps the stamp it just took (in a bucket
        // a stamp is a round trip).
        let (opener, stamp) = match opening.try_lock() {
            Some(opener) => (opener, stamp),
            None => {
                let opener = opening.lock();
                (opener, self.stamp(git_dir))
            }
        };
        let upload = match self.cached(git_dir, &stamp, opened_since) {
            Some(upload) => Ok(upload),
            None => self.open(git_dir, stamp),
        };
        drop(opener);
        // Another request may have put a newer lock there meanwhile: only this one goes.
        let mut inner = self.inner.lock();
        if inner
            .opening
            .get(git_dir)
            .is_some_and(|o| Arc::ptr_eq(o, &opening))
        {
            inner.opening.remove(git_dir);
        }
        upload
    }

    /// The cached upload-pack of `git_dir` if it was opened when its files looked as `stamp`
    /// says (and its open began at `opened_since` or later, when given).
    fn cached(
        &self,
        git_dir: &Path,
        stamp: &Stamp,
        opened_since: Option<Instant>,
    ) -> Option<Arc<UploadPack>> {
        let mut inner = self.inner.lock();
        inner.tick += 1;
        let tick = inner.tick;
        let entry = inner.entries.get_mut(git_dir)?;
        if entry.stamp != *stamp {
            tracing::debug!("{}: packs changed, reopening", git_dir.display());
            return None;
        }
        if opened_since.is_some_and(|since| entry.opened < since) {
            tracing::debug!("{}: an object was missing, reopening", git_dir.display());
            return None;
        }
        entry.last_used = tick;
        Some(entry.upload.clone())
    }

    /// Opens `git_dir`, whose files look as `stamp` says, and caches it.
    fn open(&self, git_dir: &Path, stamp: Stamp) -> Result<Arc<UploadPack>, OpenError> {
        let opened = Instant::now();
        let repo = Arc::new(match &self.store {
            Some(store) => store.open(git_dir, &self.repository)?,
            None => Repository::open(git_dir, &self.repository)?,
        });
        let cache = CloneCacheConfig::in_repository(&repo, self.clone_cache_bytes);
        let packs = Arc::new(PackServer::open(repo).with_clone_cache(cache));
        let upload = Arc::new(UploadPack::new(packs, self.options.clone()));
        let mut inner = self.inner.lock();
        inner.tick += 1;
        let tick = inner.tick;
        if !inner.entries.contains_key(git_dir) && inner.entries.len() >= self.capacity {
            let oldest = inner
                .entries
                .iter()
                .min_by_key(|(_, e)| e.last_used)
                .map(|(k, _)| k.clone());
            if let Some(oldest) = oldest {
                inner.entries.remove(&oldest);
            }
        }
        inner.entries.insert(
            git_dir.to_path_buf(),
            Entry {
                upload: upload.clone(),
                stamp,
                opened,
                last_used: tick,
            },
        );
        Ok(upload)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use packd_odb::ObjectId;
    use std::process::Command;

    fn git(dir: &Path, args: &[&str]) {
        let out = Command::new("git")
            .args(args)
            .current_dir(dir)
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("HOME", dir)
            .env("GIT_AUTHOR_NAME", "t")
            .env("GIT_AUTHOR_EMAIL", "t@t")
            .env("GIT_COMMITTER_NAME", "t")
            .env("GIT_COMMITTER_EMAIL", "t@t")
            .output()
            .expect("run git");
        assert!(out.status.success(), "git {args:?}: {out:?}");
    }

    fn repo(dir: &Path) -> PathBuf {
        std::fs::create_dir_all(dir).unwrap();
        git(dir, &["init", "-q", "--bare", "r.git"]);
        dir.join("r.git").canonicalize().unwrap()
    }

    /// A cache of `capacity` repositories with the default options and no clone cache.
    fn cache(capacity: usize) -> RepoCache {
        RepoCache::new(
            capacity,
            UploadPackOptions::default(),
            0,
            RepositoryOptions::default(),
        )
    }

    #[test]
    fn cached_until_packs_change() {
        let tmp = tempfile::tempdir().unwrap();
        let git_dir = repo(tmp.path());
        let cache = cache(4);
        let a = cache.get(&git_dir).unwrap();
        let b = cache.get(&git_dir).unwrap();
        assert!(Arc::ptr_eq(&a, &b), "second lookup reopened");
        // A new file in objects/pack changes the listing.
        let pack_dir = git_dir.join("objects/pack");
        std::fs::write(pack_dir.join("x.keep"), "").unwrap();
        let c = cache.get(&git_dir).unwrap();
        assert!(
            !Arc::ptr_eq(&a, &c),
            "not reopened after the pack dir changed"
        );
        let d = cache.get(&git_dir).unwrap();
        assert!(Arc::ptr_eq(&c, &d));
    }

    /// The pack files of `src` (a repository with one pack) copied into `dst`'s
    /// `objects/pack` under quarantine names; the id of `src`'s `main`.
    fn quarantined_pack_of(src: &Path, dst: &Path) -> (Vec<(PathBuf, PathBuf)>, ObjectId) {
        let mut renames = Vec::new();
        for entry in std::fs::read_dir(src.join("objects/pack")).unwrap() {
            let path = entry.unwrap().path();
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            let quarantined = dst
                .join("objects/pack")
                .join(format!("tmp_incoming_{name}"));
            std::fs::copy(&path, &quarantined).unwrap();
            renames.push((quarantined, dst.join("objects/pack").join(name)));
        }
        // The .pack first, then the .idx, as a push migrates them.
        renames.sort_by_key(|(_, to)| to.extension().is_some_and(|e| e == "idx"));
        let head = std::fs::read_to_string(src.join("refs/heads/main")).unwrap();
        (renames, ObjectId::from_hex(head.trim()).unwrap())
    }

    #[test]
    fn a_pack_added_within_the_clock_tick_of_the_last_change_is_seen() {
        let tmp = tempfile::tempdir().unwrap();
        let git_dir = repo(tmp.path());
        let src = tmp.path().join("src");
        std::fs::create_dir_all(&src).unwrap();
        git(&src, &["init", "-q", "--bare", "-b", "main", "."]);
        let tree = "4b825dc642cb6eb9a060e54bf8d69288fbee4904";
        git(&src, &["commit-tree", "-m", "x", tree]);
        let work = tmp.path().join("w");
        git(tmp.path(), &["clone", "-q", src.to_str().unwrap(), "w"]);
        git(&work, &["commit", "-q", "--allow-empty", "-m", "pushed"]);
        git(&work, &["push", "-q", "origin", "HEAD:refs/heads/main"]);
        git(&src, &["repack", "-q", "-a", "-d"]);
        let (renames, tip) = quarantined_pack_of(&src, &git_dir);
        let cache = cache(4);
        let pack_dir = git_dir.join("objects/pack");
        let before = cache.get(&git_dir).unwrap();
        let mtime = std::fs::metadata(&pack_dir).unwrap().modified().unwrap();
        for (from, to) in &renames {
            std::fs::rename(from, to).unwrap();
        }
        // As if within the same tick of a coarse clock: the directory's time unchanged (and
        // its size: names were renamed, not added).
        std::fs::File::open(&pack_dir)
            .unwrap()
            .set_modified(mtime)
            .unwrap();
        let objects = |u: &UploadPack| u.pack_server().repository().objects().contains(&tip);
        assert!(!objects(&before).unwrap());
        let after = cache.get(&git_dir).unwrap();
        assert!(
            objects(&after).unwrap(),
            "the cached repository lacks the new pack"
        );
    }

    #[test]
    fn a_miss_reopens_once_for_the_requests_begun_before() {
        let tmp = tempfile::tempdir().unwrap();
        let git_dir = repo(tmp.path());
        let cache = cache(4);
        let early = Instant::now();
        let a = cache.get(&git_dir).unwrap();
        // Opened after `early` began: kept.
        assert!(Arc::ptr_eq(
            &a,
            &cache.reopen_after_miss(&git_dir, early).unwrap()
        ));
        let late = Instant::now();
        let b = cache.reopen_after_miss(&git_dir, late).unwrap();
        assert!(!Arc::ptr_eq(&a, &b), "not reopened");
        assert!(Arc::ptr_eq(
            &b,
            &cache.reopen_after_miss(&git_dir, late).unwrap()
        ));
        assert!(Arc::ptr_eq(&b, &cache.get(&git_dir).unwrap()));
    }

    #[test]
    fn requests_that_come_together_share_one_open() {
        let tmp = tempfile::tempdir().unwrap();
        let git_dir = repo(tmp.path());
        let cache = cache(4);
        let start = std::sync::Barrier::new(8);
        let opened: Vec<Arc<UploadPack>> = std::thread::scope(|scope| {
            let threads: Vec<_> = (0..8)
                .map(|_| {
                    scope.spawn(|| {
                        start.wait();
                        cache.get(&git_dir).unwrap()
                    })
                })
                .collect();
            threads.into_iter().map(|t| t.join().unwrap()).collect()
        });
        for upload in &opened[1..] {
            assert!(Arc::ptr_eq(&opened[0], upload), "opened more than once");
        }
        assert!(cache.inner.lock().opening.is_empty());
    }

    #[test]
    fn bounded() {
        let tmp = tempfile::tempdir().unwrap();
        let cache = cache(2);
        let dirs: Vec<PathBuf> = (0..3)
            .map(|i| repo(&tmp.path().join(i.to_string())))
            .collect();
        let first = cache.get(&dirs[0]).unwrap();
        cache.get(&dirs[1]).unwrap();
        cache.get(&dirs[0]).unwrap();
        cache.get(&dirs[2]).unwrap();
        assert_eq!(cache.len(), 2);
        // dirs[1] was the least recently used: dirs[0] is still cached.
        assert!(Arc::ptr_eq(&first, &cache.get(&dirs[0]).unwrap()));
        assert_eq!(cache.len(), 2);
    }
}
