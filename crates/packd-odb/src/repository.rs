//! Finding and opening a repository the way git does.
//!
//! `GIT_DIR` wins when set. Otherwise, from the start directory upwards: a `.git` directory, a
//! `.git` file (`gitdir: <path>`, as in linked worktrees and submodules), or the directory itself
//! when it is a bare repository (it has `HEAD`, `objects/` and `refs/`). A linked worktree's
//! `commondir` file points at the shared directory that holds objects and most refs.

use crate::config::Config;
use crate::graph::CommitGraph;
use crate::hash::{HashKind, ObjectId, Prefix};
use crate::odb::{ObjectDb, OpenOptions, PrefixMatch, DEFAULT_CACHE_BUDGET};
use crate::refs::RefReader;
use crate::{Error, Result};
use std::path::{Path, PathBuf};

/// An opened repository: its directories, its configuration and its objects.
#[derive(Debug)]
pub struct Repository {
    git_dir: PathBuf,
    common_dir: PathBuf,
    config: Config,
    objects: ObjectDb,
    /// The commit-graph, opened on first use (`None` inside: none, disabled, or unreadable).
    commit_graph: std::sync::OnceLock<Option<CommitGraph>>,
    /// `packed-refs` as last parsed, when the repository keeps it (see
    /// [`RepositoryOptions::keep_packed_refs`]).
    packed_refs: Option<crate::packed_refs::PackedRefsCache>,
    /// Where the refs are when they are not files (a repository in a bucket).
    ref_store: Option<std::sync::Arc<dyn crate::refs::RefStore>>,
}

/// What a name given on a command line resolved to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NameMatch {
    /// One object.
    Found(ObjectId),
    /// An abbreviation of several objects.
    Ambiguous,
    /// Nothing by that name.
    Missing,
}

/// Settings a caller may impose over the configuration.
#[derive(Debug, Clone, Default)]
pub struct RepositoryOptions {
    /// The delta base cache budget; `None` takes `core.deltaBaseCacheLimit`, else
    /// `default_cache_budget`.
    pub cache_budget: Option<u64>,
    /// The budget when neither of the above gives one; `None` is git's 96 MiB. Servers pass
    /// less ([`crate::SERVING_CACHE_BUDGET`]): they keep many repositories open, and a
    /// clone's fill-in walk would otherwise keep most of the 96 MiB filled per repository.
    pub default_cache_budget: Option<u64>,
    /// Resident pages each mapped pack file may keep (`None`: no bound); servers pass
    /// [`crate::SERVING_MAP_BUDGET`].
    pub map_budget: Option<u64>,
    /// Whether to keep `packed-refs` parsed between reads of the refs (see
    /// [`crate::packed_refs::PackedRefsCache`]): for a long-running server. A process that
    /// reads the refs once is better served by the file searched in place, which skips the
    /// ranges of hidden refs without parsing them.
    pub keep_packed_refs: bool,
}

/// Whether `dir` is a git directory: a `HEAD` that is a ref, plus `objects/` and `refs/`
/// either in it or, for a linked worktree, in the directory its `commondir` file names.
/// Servers use it to tell repositories from other directories without opening them, and
/// refuse the directories git refuses.
pub fn is_git_dir(dir: &Path) -> bool {
    if !head_is_a_ref(&dir.join("HEAD")) {
        return false;
    }
    let common = match std::fs::read_to_string(dir.join("commondir")) {
        Ok(text) => dir.join(text.trim_end()),
        Err(_) => dir.to_path_buf(),
    };
    common.join("objects").is_dir() && common.join("refs").is_dir()
}

/// Whether the file `head` holds what git requires of a repository's `HEAD` before it calls
/// the directory a repository: a symbolic ref into `refs/` (`ref: refs/...`, or a symbolic
/// link to `refs/...`), or an object id (a detached HEAD).
fn head_is_a_ref(head: &Path) -> bool {
    if crate::refs::symlink_into_refs(head).is_some() {
        return true;
    }
    // What git reads of it: the first 255 bytes (a directory fails to read).
    let Ok(start) = crate::refs::read_start(head, 255) else {
        return false;
    };
    if crate::refs::symref_in(&start).is_some_and(|target| target.starts_with(b"refs/")) {
        return true;
    }
    start.get(..40).and_then(ObjectId::from_hex_bytes).is_some()
}

fn read_gitfile(file: &Path) -> Result<PathBuf> {
    let text = std::fs::read_to_string(file).map_err(|source| Error::Io {
        path: file.display().to_string(),
        source,
    })?;
    let target = text
        .trim_end()
        .strip_prefix("gitdir:")
        .ok_or_else(|| {
            Error::NotARepository(format!("{}: not a 'gitdir: <path>' file", file.display()))
        })?
        .trim();
    let base = file.parent().unwrap_or(Path::new("."));
    Ok(base.join(target))
}

impl Repository {
    /// Finds the repository containing `start`, as git does from a working directory.
    pub fn discover(start: &Path, options: &RepositoryOptions) -> Result<Repository> {
        if let Some(dir) = std::env::var_os("GIT_DIR") {
            return Repository::open(&start.join(dir), options);
        }
        let start = start.canonicalize().map_err(|source| Error::Io {
            path: start.display().to_string(),
            source,
        })?;
        let mut dir = Some(start.as_path());
        while let Some(d) = dir {
            let dot_git = d.join(".git");
            if dot_git.is_dir() && is_git_dir(&dot_git) {
                return Repository::open(&dot_git, options);
            }
            if dot_git.is_file() {
                return Repository::open(&read_gitfile(&dot_git)?, options);
            }
            if is_git_dir(d) {
                return Repository::open(d, options);
            }
            dir = d.parent();
        }
        Err(Error::NotARepository(format!(
            "{} (or any of the parent directories)",
            start.display()
        )))
    }

    /// Opens the repository whose git directory is `git_dir`.
    pub fn open(git_dir: &Path, options: &RepositoryOptions) -> Result<Repository> {
        Repository::open_with(git_dir, options, None)
    }

    /// Opens the repository whose git directory is `git_dir` (its configuration and refs), its
    /// objects read from `objects` (its own objects storage first, then any alternates')
    /// rather than from its `objects` directory: a repository whose objects are in a bucket.
    pub fn open_with_objects(
        git_dir: &Path,
        options: &RepositoryOptions,
        objects: Vec<std::sync::Arc<dyn packd_storage::Storage>>,
    ) -> Result<Repository> {
        Repository::open_with(git_dir, options, Some(objects))
    }

    fn open_with(
        git_dir: &Path,
        options: &RepositoryOptions,
        storages: Option<Vec<std::sync::Arc<dyn packd_storage::Storage>>>,
    ) -> Result<Repository> {
        if !is_git_dir(git_dir) {
            return Err(Error::NotARepository(git_dir.display().to_string()));
        }
        let git_dir = git_dir.canonicalize().map_err(|source| Error::Io {
            path: git_dir.display().to_string(),
            source,
        })?;
        let common_dir = match std::fs::read_to_string(git_dir.join("commondir")) {
            Ok(text) => git_dir.join(text.trim_end()),
            Err(_) => git_dir.clone(),
        };
        let config = Config::read(&Config::standard_files(&common_dir))?;
        Repository::assemble(git_dir, common_dir, config, options, storages, None)
    }

    /// Opens a repository kept in storage rather than in a git directory (a repository in a
    /// bucket): its objects are read from `objects`, its refs from `refs`, and its
    /// configuration is `config` (the bytes of its `config` file, named `config_name` in
    /// messages) after the system's and the user's files, as for any repository.
    /// `local_dir`, a directory of this machine, stands for its git directory: what packd
    /// derives from the repository (its `packd-cache/`) is kept there, and nothing else.
    pub fn open_stored(
        local_dir: &Path,
        config: &[u8],
        config_name: &str,
        objects: Vec<std::sync::Arc<dyn packd_storage::Storage>>,
        refs: std::sync::Arc<dyn crate::refs::RefStore>,
        options: &RepositoryOptions,
    ) -> Result<Repository> {
        let mut files = Config::standard_files(local_dir);
        files.pop();
        let mut parsed = Config::read(&files)?;
        parsed.parse(&String::from_utf8_lossy(config), config_name)?;
        let dir = local_dir.to_path_buf();
        Repository::assemble(dir.clone(), dir, parsed, options, Some(objects), Some(refs))
    }

    /// The repository of `git_dir` and `common_dir` whose configuration is `config`, its
    /// objects from `storages` (`None`: from its objects directory).
    fn assemble(
        git_dir: PathBuf,
        common_dir: PathBuf,
        config: Config,
        options: &RepositoryOptions,
        storages: Option<Vec<std::sync::Arc<dyn packd_storage::Storage>>>,
        ref_store: Option<std::sync::Arc<dyn crate::refs::RefStore>>,
    ) -> Result<Repository> {
        let hash = match config.get("extensions.objectFormat").map(|s| s.to_ascii_lowercase()) {
            None => HashKind::Sha1,
            Some(f) if f == "sha1" => HashKind::Sha1,
            Some(f) => {
                return Err(Error::Unsupported(format!(
                    "{}: this repository uses extensions.objectFormat={f}; packd reads SHA-1 repositories only (SHA-256 support is planned)",
                    git_dir.display()
                )))
            }
        };
        let cache_budget = match options.cache_budget {
            Some(b) => b,
            None => config
                .get_size("core.deltaBaseCacheLimit")?
                .unwrap_or(options.default_cache_budget.unwrap_or(DEFAULT_CACHE_BUDGET)),
        };
        let objects_dir = match std::env::var_os("GIT_OBJECT_DIRECTORY") {
            Some(d) => PathBuf::from(d),
            None => common_dir.join("objects"),
        };
        let open_options = OpenOptions {
            cache_budget,
            hash,
            map_budget: options.map_budget,
        };
        let objects = match storages {
            Some(storages) => ObjectDb::from_storages(storages, &open_options)?,
            None => ObjectDb::open(&objects_dir, &open_options)?,
        };
        Ok(Repository {
            git_dir,
            common_dir,
            config,
            objects,
            commit_graph: std::sync::OnceLock::new(),
            packed_refs: options.keep_packed_refs.then(Default::default),
            ref_store,
        })
    }

    /// The git directory (`.git`, or the bare repository itself).
    pub fn git_dir(&self) -> &Path {
        &self.git_dir
    }

    /// Whether the refs are in a [`crate::refs::RefStore`] rather than in files: a repository
    /// opened with [`Repository::open_stored`], which nothing may write to as files.
    pub fn refs_are_stored(&self) -> bool {
        self.ref_store.is_some()
    }

    /// The directory shared by all worktrees: objects, most refs, packed-refs (the git
    /// directory itself outside linked worktrees).
    pub fn common_dir(&self) -> &Path {
        &self.common_dir
    }

    /// The merged configuration.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// The object database.
    pub fn objects(&self) -> &ObjectDb {
        &self.objects
    }

    /// The repository's commit-graph, for walks that want commits' links without reading them:
    /// `None` when there is none, when `core.commitGraph` is false, in a shallow repository (as
    /// git), or when it cannot be read (with one warning; walks then read commit objects).
    pub fn commit_graph(&self) -> Option<&CommitGraph> {
        self.commit_graph
            .get_or_init(|| {
                let disabled = self.config.get("core.commitGraph").is_some_and(|v| {
                    matches!(
                        v.to_ascii_lowercase().as_str(),
                        "false" | "no" | "off" | "0"
                    )
                });
                if disabled || self.common_dir.join("shallow").exists() {
                    return None;
                }
                let storage = self.objects.own_storage()?;
                match CommitGraph::open(storage.as_ref(), self.objects.hash_kind()) {
                    Ok(graph) => graph,
                    Err(e) => {
                        tracing::warn!("ignoring the commit-graph: {e}");
                        None
                    }
                }
            })
            .as_ref()
    }

    /// A reader for the repository's refs.
    pub fn refs(&self) -> RefReader<'_> {
        let reader = RefReader::new(&self.git_dir, &self.common_dir);
        if let Some(store) = &self.ref_store {
            return reader.with_store(store.as_ref());
        }
        match &self.packed_refs {
            Some(cache) => reader.with_packed_cache(cache),
            None => reader,
        }
    }

    /// Resolves a name as git does: a full id, else a ref, else a unique abbreviated id. (A full
    /// 40-digit id beats a ref of the same name; a shorter one loses to it.)
    pub fn resolve_name(&self, name: &str) -> Result<NameMatch> {
        if name.len() == 40 {
            if let Some(id) = ObjectId::from_hex(name) {
                return Ok(NameMatch::Found(id));
            }
        }
        if let Some(id) = self.refs().resolve(name)? {
            return Ok(NameMatch::Found(id));
        }
        if let Some(prefix) = Prefix::from_hex(name) {
            return Ok(match self.objects.resolve_prefix(&prefix)? {
                PrefixMatch::Unique(id) => NameMatch::Found(id),
                PrefixMatch::Ambiguous => NameMatch::Ambiguous,
                PrefixMatch::None => NameMatch::Missing,
            });
        }
        Ok(NameMatch::Missing)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn head_is_a_ref_as_git_validates_it() {
        let dir = tempfile::tempdir().unwrap();
        let head = dir.path().join("HEAD");
        let id = "1136f0a632ba7842f042f70934f2aa311e558d03";
        for (content, want) in [
            ("ref: refs/heads/main\n", true),
            ("ref:refs/heads/main", true),
            ("ref: \t refs/heads/main\n", true),
            ("ref: heads/main\n", false),
            ("ref: \x0crefs/heads/main\n", false),
            (&format!("{id}\n")[..], true),
            (&id.to_uppercase()[..], true),
            (&id[..39], false),
            ("", false),
            ("no ref at all\n", false),
        ] {
            std::fs::write(&head, content).unwrap();
            assert_eq!(head_is_a_ref(&head), want, "{content:?}");
        }
        std::fs::remove_file(&head).unwrap();
        std::fs::create_dir(&head).unwrap();
        assert!(!head_is_a_ref(&head), "a directory");
        std::fs::remove_dir(&head).unwrap();
        #[cfg(unix)]
        {
            std::os::unix::fs::symlink("refs/heads/unborn", &head).unwrap();
            assert!(head_is_a_ref(&head), "a link into refs/, even dangling");
            std::fs::remove_file(&head).unwrap();
            std::os::unix::fs::symlink("refs", &head).unwrap();
            assert!(!head_is_a_ref(&head), "a link to refs itself");
        }
    }
}
