//! Creating a repository for the first push to a path that has none (`--create-on-push`).
//!
//! The rules:
//! - only a push creates: over HTTP the POST to `git-receive-pack` that carries commands, over
//!   git:// a `git-receive-pack` request once its commands arrived. The advertisement of a path
//!   with no repository (the GET git push starts with) is the one of an empty repository and
//!   makes nothing ([`Root::push_destination`]);
//! - the new path must not exist, and no directory above it, up to the root itself and after
//!   symlinks are resolved, may be a repository: neither a git directory nor a work tree (a
//!   directory holding `.git`). Otherwise a push to `victim.git/refs/heads/x.git` would make a
//!   repository among victim's refs, which victim then advertises as broken refs;
//! - the directory it lands in must be inside the root after resolving symlinks;
//! - a push that leaves its new repository without a single ref (unpack failure, every command
//!   refused, the client gone mid-pack, over a limit) removes what it made: the repository and
//!   the parent directories it made, never one that was there before.
//!
//! Two pushes to one path at once: every push takes the path's lock while it finds its
//! repository ([`Creations::push_target`]). One that finds a repository lets the lock go at
//! once; one that creates the repository keeps it until its push is done and the repository
//! kept or removed (dropping [`CreatedRepository`]). A second push to that path therefore waits
//! for the first, then finds either the kept repository (and is checked against its refs like
//! any push) or nothing (and creates it itself): it can never fill a repository the first then
//! removes. This was chosen over creating under a temporary name renamed into place after the
//! push succeeded: the rename would have to come after receive-pack wrote the refs and before
//! it reported to the client (so inside receive-pack), and the loser of two such renames would
//! have told its client "ok" for a push that was then thrown away. The lock's key is the real
//! parent directory and the name without `.git` (`x` and `x.git` name one repository).
//!
//! Directories are made and removed under one lock for the whole root, so that a push removing
//! an empty parent it made cannot race another push making its repository inside that parent.

use crate::paths::{check_relative, PathError, Root};
use packd_odb::repository::is_git_dir;
use parking_lot::{Condvar, Mutex};
use std::collections::HashSet;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Where a new repository would go: checked against the rules, not made yet.
#[derive(Debug)]
pub struct NewRepository {
    /// The path as the client named it (relative to the root), for messages.
    shown: String,
    /// The deepest directory above it that exists, canonical (inside the root).
    base: PathBuf,
    /// The components below `base` still to make, the repository's own last.
    missing: Vec<OsString>,
}

/// Why a push cannot create a repository at `decoded` in `store`: `packd import` does.
fn store_push_refused(store: &crate::store::StoreRoot, decoded: &str) -> PathError {
    PathError::Forbidden(format!(
        "{decoded}: a push cannot create a repository in object storage ({}); \
         `packd import` puts one there",
        store.describe()
    ))
}

impl Root {
    /// The canonical deepest existing directory of `ROOT/rel` (itself or an ancestor) and the
    /// components below it that do not exist. It must resolve inside the root.
    fn deepest_existing(
        &self,
        rel: &Path,
        shown: &str,
    ) -> Result<(PathBuf, Vec<OsString>), PathError> {
        let mut base = self.path().join(rel);
        let mut missing = Vec::new();
        while base.as_path() != self.path() && base.symlink_metadata().is_err() {
            match base.file_name() {
                Some(name) => missing.push(name.to_os_string()),
                None => break,
            }
            base.pop();
        }
        missing.reverse();
        let canonical = base
            .canonicalize()
            .map_err(|e| PathError::Forbidden(format!("{shown}: cannot resolve the path: {e}")))?;
        if !canonical.starts_with(self.path()) {
            return Err(PathError::Forbidden(format!(
                "{shown}: resolves outside the served root"
            )));
        }
        if !missing.is_empty() && !canonical.is_dir() {
            return Err(PathError::Forbidden(format!(
                "{shown}: a part of the path is not a directory"
            )));
        }
        Ok((canonical, missing))
    }

    /// Checks that a push may create a repository at the decoded path `decoded` (see the
    /// module's rules) and says where it would go. Nothing is made.
    pub fn plan_repository(&self, decoded: &str) -> Result<NewRepository, PathError> {
        if let Some(store) = self.store() {
            return Err(store_push_refused(store, decoded));
        }
        let rel = check_relative(decoded)?;
        let shown = rel.display().to_string();
        if self.path().join(&rel).symlink_metadata().is_ok() {
            return Err(PathError::Forbidden(format!(
                "{shown}: exists and is not a repository"
            )));
        }
        let (base, missing) = self.deepest_existing(&rel, &shown)?;
        for dir in base.ancestors().take_while(|d| d.starts_with(self.path())) {
            if is_git_dir(dir) || dir.join(".git").symlink_metadata().is_ok() {
                let inside = match dir.strip_prefix(self.path()) {
                    Ok(r) if !r.as_os_str().is_empty() => r.display().to_string(),
                    _ => "the served root".to_string(),
                };
                return Err(PathError::Forbidden(format!(
                    "{shown}: inside the repository {inside}: a push cannot create a \
                     repository inside another"
                )));
            }
        }
        Ok(NewRepository {
            shown,
            base,
            missing,
        })
    }

    /// The repository a push to the decoded path `decoded` goes to, for its advertisement:
    /// `Some` git directory when there is one, `None` when there is none and a push may create
    /// it (`create`, and the path passes [`Root::plan_repository`]). Nothing is made: the
    /// advertisement of a repository to be is the one of an empty repository.
    pub fn push_destination(
        &self,
        decoded: &str,
        create: bool,
    ) -> Result<Option<PathBuf>, PathError> {
        if self.store().is_some() {
            return self.resolve(decoded).map(Some);
        }
        match self.resolve(decoded) {
            Ok(git_dir) => Ok(Some(git_dir)),
            Err(PathError::NotFound(_)) if create => self.plan_repository(decoded).map(|_| None),
            Err(e) => Err(e),
        }
    }

    /// The key of the creation lock of the repository at `decoded`: the canonical parent
    /// directory (as far as it exists) and the name without `.git`.
    fn creation_key(&self, decoded: &str) -> Result<PathBuf, PathError> {
        let rel = check_relative(decoded)?;
        let shown = rel.display().to_string();
        let parent = rel.parent().unwrap_or(Path::new(""));
        let (mut key, missing) = self.deepest_existing(parent, &shown)?;
        key.extend(missing);
        let name = rel.file_name().unwrap_or_default().to_string_lossy();
        key.push(name.strip_suffix(".git").unwrap_or(&name));
        Ok(key)
    }
}

impl NewRepository {
    /// Makes the directories and the files of an empty bare repository; on failure removes
    /// what it made. Returns the canonical git directory and the directories made, outermost
    /// first (the git directory last).
    fn create(&self) -> Result<(PathBuf, Vec<PathBuf>), PathError> {
        let shown = &self.shown;
        let mut made: Vec<PathBuf> = Vec::new();
        let undo = |made: &[PathBuf], e: std::io::Error| {
            remove_made(made);
            PathError::Forbidden(format!("{shown}: cannot create the repository: {e}"))
        };
        let mut dir = self.base.clone();
        for (i, name) in self.missing.iter().enumerate() {
            dir.push(name);
            match std::fs::create_dir(&dir) {
                Ok(()) => made.push(dir.clone()),
                // A parent made meanwhile by someone else (not by a push: those make
                // directories one at a time) is theirs, and fine if a real directory.
                Err(e)
                    if e.kind() == std::io::ErrorKind::AlreadyExists
                        && i + 1 < self.missing.len()
                        && dir.symlink_metadata().is_ok_and(|m| m.is_dir()) => {}
                Err(e) => return Err(undo(&made, e)),
            }
        }
        let git_dir = dir;
        for sub in ["objects/pack", "objects/info", "refs/heads", "refs/tags"] {
            std::fs::create_dir_all(git_dir.join(sub)).map_err(|e| undo(&made, e))?;
        }
        std::fs::write(
            git_dir.join("config"),
            "[core]\n\trepositoryformatversion = 0\n\tfilemode = true\n\tbare = true\n",
        )
        .map_err(|e| undo(&made, e))?;
        // HEAD last: a directory with HEAD, objects/ and refs/ is a repository.
        std::fs::write(git_dir.join("HEAD"), "ref: refs/heads/main\n")
            .map_err(|e| undo(&made, e))?;
        Ok((git_dir, made))
    }
}

/// Removes the directories a creation made (outermost first in `made`): the innermost, the
/// repository, with what it holds; each parent only if empty (another repository may have
/// been made inside it since).
fn remove_made(made: &[PathBuf]) {
    let Some((repository, parents)) = made.split_last() else {
        return;
    };
    if let Err(e) = std::fs::remove_dir_all(repository) {
        if e.kind() != std::io::ErrorKind::NotFound {
            tracing::warn!("cannot remove {}: {e}", repository.display());
        }
    }
    for dir in parents.iter().rev() {
        let _ = std::fs::remove_dir(dir);
    }
}

/// Whether the repository at `git_dir` has a ref under `refs/`; yes when that cannot be told
/// (a repository is never removed on a doubt).
fn holds_refs(git_dir: &Path) -> bool {
    packd_odb::refs::RefReader::new(git_dir, git_dir)
        .list("refs/")
        .map_or(true, |refs| !refs.is_empty())
}

/// The paths whose repositories pushes are creating, and the lock of the root's layout.
#[derive(Debug, Default)]
pub struct Creations {
    /// Creation lock keys held (see [`Root::creation_key`]).
    busy: Mutex<HashSet<PathBuf>>,
    /// Signalled when a key is let go.
    freed: Condvar,
    /// Held while directories are made or removed.
    layout: Mutex<()>,
}

/// A held creation lock; let go when dropped.
#[derive(Debug)]
struct PathLock {
    creations: Arc<Creations>,
    key: PathBuf,
}

impl Drop for PathLock {
    fn drop(&mut self) {
        self.creations.busy.lock().remove(&self.key);
        self.creations.freed.notify_all();
    }
}

/// A repository a push created, with its path's lock held. Dropped when the push is done: the
/// repository is kept if it holds a ref, else removed with the parents made for it, and the
/// lock is let go (in that order).
#[derive(Debug)]
pub struct CreatedRepository {
    git_dir: PathBuf,
    shown: String,
    made: Vec<PathBuf>,
    creations: Arc<Creations>,
    _lock: PathLock,
}

impl Drop for CreatedRepository {
    fn drop(&mut self) {
        if holds_refs(&self.git_dir) {
            tracing::info!("created the repository {} for a push", self.shown);
            return;
        }
        let _layout = self.creations.layout.lock();
        remove_made(&self.made);
        tracing::info!(
            "{}: the push that created the repository updated no ref; removed it",
            self.shown
        );
    }
}

/// The repository a push goes to.
#[derive(Debug)]
pub enum PushTarget {
    /// One that was there.
    Existing(PathBuf),
    /// One this push created (see [`CreatedRepository`]): drop it when the push is done.
    Created(CreatedRepository),
}

impl PushTarget {
    /// The canonical git directory.
    pub fn git_dir(&self) -> &Path {
        match self {
            PushTarget::Existing(git_dir) => git_dir,
            PushTarget::Created(created) => &created.git_dir,
        }
    }

    /// Whether this push created the repository.
    pub fn is_created(&self) -> bool {
        matches!(self, PushTarget::Created(_))
    }
}

impl Creations {
    /// Takes the creation lock of `key`, waiting while another push holds it.
    fn lock(self: &Arc<Self>, key: PathBuf) -> PathLock {
        let mut busy = self.busy.lock();
        while busy.contains(&key) {
            self.freed.wait(&mut busy);
        }
        busy.insert(key.clone());
        PathLock {
            creations: self.clone(),
            key,
        }
    }

    /// The repository a push (with its commands read) to the decoded path `decoded` goes to:
    /// the one there, or, when there is none and `create`, one made now under the rules of
    /// this module. Blocking: waits while another push creates a repository at that path.
    pub fn push_target(
        self: &Arc<Self>,
        root: &Root,
        decoded: &str,
        create: bool,
    ) -> Result<PushTarget, PathError> {
        let lock = self.lock(root.creation_key(decoded)?);
        match root.resolve(decoded) {
            Ok(git_dir) => Ok(PushTarget::Existing(git_dir)),
            Err(PathError::NotFound(_)) if create => {
                let plan = root.plan_repository(decoded)?;
                let (git_dir, made) = {
                    let _layout = self.layout.lock();
                    plan.create()?
                };
                Ok(PushTarget::Created(CreatedRepository {
                    git_dir,
                    shown: plan.shown,
                    made,
                    creations: self.clone(),
                    _lock: lock,
                }))
            }
            Err(e) => Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::paths::tests::bare;

    /// Every path under `dir`, sorted.
    fn tree(dir: &Path) -> Vec<PathBuf> {
        let mut out = Vec::new();
        let mut todo = vec![dir.to_path_buf()];
        while let Some(d) = todo.pop() {
            for e in std::fs::read_dir(&d).unwrap() {
                let p = e.unwrap().path();
                if p.symlink_metadata().unwrap().is_dir() {
                    todo.push(p.clone());
                }
                out.push(p);
            }
        }
        out.sort();
        out
    }

    fn forbidden(r: Result<NewRepository, PathError>) -> String {
        match r {
            Err(PathError::Forbidden(why)) => why,
            other => panic!("not refused: {other:?}"),
        }
    }

    #[test]
    fn never_inside_a_repository_nor_over_anything() {
        let tmp = tempfile::tempdir().unwrap();
        let root_dir = tmp.path().join("root");
        bare(&root_dir.join("victim.git"));
        bare(&root_dir.join("work/.git"));
        std::fs::create_dir_all(root_dir.join("sub")).unwrap();
        std::fs::write(root_dir.join("sub/file"), "").unwrap();
        std::fs::create_dir_all(tmp.path().join("outside")).unwrap();
        std::os::unix::fs::symlink(tmp.path().join("outside"), root_dir.join("out")).unwrap();
        std::os::unix::fs::symlink(root_dir.join("victim.git"), root_dir.join("alias")).unwrap();
        let root = Root::new(&root_dir).unwrap();
        let before = tree(tmp.path());
        for path in [
            "victim.git/refs/heads/x.git",
            "victim.git/objects/new",
            "victim.git/new.git",
            "alias/refs/x.git",
            "work/new.git",
            "work/deeper/new.git",
        ] {
            let why = forbidden(root.plan_repository(path));
            assert!(why.contains("inside the repository"), "{path}: {why}");
        }
        assert!(forbidden(root.plan_repository("out/x.git")).contains("outside"));
        assert!(forbidden(root.plan_repository("sub/file")).contains("exists"));
        assert!(forbidden(root.plan_repository("sub/file/x.git")).contains("not a directory"));
        assert!(forbidden(root.plan_repository("sub")).contains("exists"));
        assert!(root.plan_repository("sub/new.git").is_ok());
        assert!(root.plan_repository("a/b/c.git").is_ok());
        assert_eq!(tree(tmp.path()), before, "planning made something");
    }

    #[test]
    fn a_push_that_takes_no_ref_removes_only_what_it_made() {
        let tmp = tempfile::tempdir().unwrap();
        let root_dir = tmp.path().join("root");
        std::fs::create_dir_all(root_dir.join("team")).unwrap();
        let root = Root::new(&root_dir).unwrap();
        let creations = Arc::new(Creations::default());
        let before = tree(tmp.path());
        for path in ["team/new.git", "a/b/new.git", "top"] {
            let target = creations.push_target(&root, path, true).unwrap();
            assert!(target.is_created());
            assert!(is_git_dir(target.git_dir()), "{path}");
            drop(target);
            assert_eq!(tree(tmp.path()), before, "{path} left something");
        }
        // A ref keeps it, and the next push finds it.
        let target = creations.push_target(&root, "a/b/new.git", true).unwrap();
        let git_dir = target.git_dir().to_path_buf();
        std::fs::write(git_dir.join("refs/heads/main"), "0".repeat(39) + "1\n").unwrap();
        drop(target);
        assert!(is_git_dir(&git_dir));
        let again = creations.push_target(&root, "a/b/new", true).unwrap();
        assert!(!again.is_created());
        assert_eq!(again.git_dir(), git_dir);
        // Without `create` a missing path is not found, and nothing is made.
        assert!(matches!(
            creations.push_target(&root, "none.git", false),
            Err(PathError::NotFound(_))
        ));
        assert!(!root_dir.join("none.git").exists());
    }

    #[test]
    fn a_second_push_waits_for_the_one_creating() {
        let tmp = tempfile::tempdir().unwrap();
        let root = Root::new(tmp.path()).unwrap();
        let creations = Arc::new(Creations::default());
        let first = creations.push_target(&root, "new.git", true).unwrap();
        let git_dir = first.git_dir().to_path_buf();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::scope(|scope| {
            scope.spawn(|| {
                // `new` and `new.git` share the lock.
                let second = creations.push_target(&root, "new", true).unwrap();
                tx.send(second.is_created()).unwrap();
            });
            std::thread::sleep(std::time::Duration::from_millis(100));
            assert!(rx.try_recv().is_err(), "the second push did not wait");
            // The first push takes a ref: the second finds the repository it kept.
            std::fs::write(git_dir.join("refs/heads/main"), "0".repeat(39) + "1\n").unwrap();
            drop(first);
            assert!(!rx.recv().unwrap(), "the second push created it again");
        });
    }
}
