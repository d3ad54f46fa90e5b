//! The repository cache: one [`UploadPack`] per served repository, kept between requests so
//! that pack indexes, bitmaps and the delta base cache stay loaded.
//!
//! Each lookup stats a few files (`objects/pack/`, `objects/info/`, `objects/info/alternates`,
//! `objects/info/commit-graphs/`, and the configuration files git reads); when any of them
//! changed since the repository was opened (a repack, a new pack from a push, a new bitmap or
//! commit-graph, new alternates, a new `uploadpack.hideRefs`) the repository is opened again.
//! Refs are read by the protocol layer on every request, so they need no stamp. The cache
//! holds at most `capacity` repositories and evicts the one used least recently.

use packd_odb::{Repository, RepositoryOptions};
use packd_pack::clone_cache::CloneCacheConfig;
use packd_pack::PackServer;
use packd_protocol::{UploadPack, UploadPackOptions};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::SystemTime;

/// Why a repository could not be opened for serving.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    /// Reading the repository failed.
    #[error(transparent)]
    Odb(#[from] packd_odb::Error),
}

/// What the files that decide whether a repository must be reopened looked like.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Stamp(Vec<Option<(SystemTime, u64)>>);

fn stat(path: &Path) -> Option<(SystemTime, u64)> {
    let meta = std::fs::metadata(path).ok()?;
    Some((meta.modified().ok()?, meta.len()))
}

/// The objects directory of a git directory (following a linked worktree's `commondir`).
fn objects_dir(git_dir: &Path) -> PathBuf {
    match std::fs::read_to_string(git_dir.join("commondir")) {
        Ok(text) => git_dir.join(text.trim_end()).join("objects"),
        Err(_) => git_dir.join("objects"),
    }
}

impl Stamp {
    fn of(git_dir: &Path) -> Stamp {
        let objects = objects_dir(git_dir);
        let mut files = vec![
            objects.join("pack"),
            objects.join("info"),
            objects.join("info/alternates"),
            objects.join("info/commit-graphs"),
            objects.join("info/commit-graph"),
        ];
        // The configuration files `Repository::open` reads: those of the common directory
        // (the objects directory's parent, also for a linked worktree).
        let common = objects.parent().unwrap_or(git_dir);
        files.extend(packd_odb::config::Config::standard_files(common));
        Stamp(files.iter().map(|p| stat(p)).collect())
    }
}

struct Entry {
    upload: Arc<UploadPack>,
    stamp: Stamp,
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
        let stamp = Stamp::of(git_dir);
        if let Some(upload) = self.cached(git_dir, &stamp) {
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
        let opener = opening.lock();
        // Stamped again: the files may have changed while this request waited.
        let stamp = Stamp::of(git_dir);
        let upload = match self.cached(git_dir, &stamp) {
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
    /// says.
    fn cached(&self, git_dir: &Path, stamp: &Stamp) -> Option<Arc<UploadPack>> {
        let mut inner = self.inner.lock();
        inner.tick += 1;
        let tick = inner.tick;
        let entry = inner.entries.get_mut(git_dir)?;
        if entry.stamp == *stamp {
            entry.last_used = tick;
            return Some(entry.upload.clone());
        }
        tracing::debug!("{}: packs changed, reopening", git_dir.display());
        None
    }

    /// Opens `git_dir`, whose files look as `stamp` says, and caches it.
    fn open(&self, git_dir: &Path, stamp: Stamp) -> Result<Arc<UploadPack>, OpenError> {
        let repo = Arc::new(Repository::open(git_dir, &self.repository)?);
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
                last_used: tick,
            },
        );
        Ok(upload)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
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
        // A new file in objects/pack changes the directory's mtime (sleep past coarse clocks).
        std::thread::sleep(std::time::Duration::from_millis(20));
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
