//! Reading refs: loose ref files and `packed-refs`, following symbolic refs.
//!
//! ```text
//! refs/heads/main        <hex id>\n            or   ref: refs/heads/other\n
//! packed-refs            # pack-refs with: peeled fully-peeled sorted
//!                        <hex id> refs/tags/v1
//!                        ^<hex id of the peeled tag target>
//! ```

use crate::hash::ObjectId;
use crate::hide_refs::HiddenRefs;
use crate::packed_refs::{PackedRefs, PackedRefsCache, Peeled};
use crate::{Error, Result};
use std::path::Path;

/// git follows symbolic refs at most this deep.
const MAX_SYMREF_DEPTH: usize = 5;

/// The prefixes git tries, in order, for a short ref name (`main` -> `refs/heads/main`).
const SHORT_NAME_RULES: &[(&str, &str)] = &[
    ("", ""),
    ("refs/", ""),
    ("refs/tags/", ""),
    ("refs/heads/", ""),
    ("refs/remotes/", ""),
    ("refs/remotes/", "/HEAD"),
];

/// git's `isspace`: space, tab, newline and carriage return only.
fn is_git_space(b: &u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | b'\r')
}

/// The bytes a loose ref file's content points at when it is a symbolic ref (`ref: <name>`),
/// trimmed as git trims them (also what makes a `HEAD` git accepts, when it is in `refs/`).
pub(crate) fn symref_in(bytes: &[u8]) -> Option<&[u8]> {
    let rest = bytes.strip_prefix(b"ref:")?;
    let start = rest
        .iter()
        .position(|b| !is_git_space(b))
        .unwrap_or(rest.len());
    let end = rest
        .iter()
        .rposition(|b| !is_git_space(b))
        .map_or(start, |e| e + 1);
    Some(&rest[start..end])
}

/// The name a symbolic link at `path` points at when it points into `refs/` (a symbolic ref
/// as git's `core.preferSymlinkRefs` writes one, and a HEAD git accepts); `None` when `path`
/// is no such link (`read_link` fails on anything but a link).
pub(crate) fn symlink_into_refs(path: &Path) -> Option<Vec<u8>> {
    let to = std::fs::read_link(path).ok()?;
    let text = to.as_os_str().as_encoded_bytes();
    text.starts_with(b"refs/").then(|| text.to_vec())
}

/// A symbolic ref to `target` as read, or [`Loose::Unfollowable`] when it is no UTF-8 name.
fn symbolic(target: &[u8]) -> Loose {
    match std::str::from_utf8(target) {
        Ok(name) => Loose::Symbolic(name.to_string()),
        Err(_) => Loose::Unfollowable,
    }
}

/// The most of a loose ref file read: a symbolic ref's longest name packd accepts
/// ([`check_ref_format`]) and its `ref: ` prefix fit, with room to spare. A longer file is
/// no ref packd can follow, and costs no more than this to refuse.
const MAX_LOOSE_REF: u64 = 8192;

/// The first `limit` bytes of the file at `path` (a loose ref reads [`MAX_LOOSE_REF`] + 1, one
/// more than a ref may hold, so that a longer file shows as one; git reads 255 of a HEAD it
/// validates).
pub(crate) fn read_start(path: &Path, limit: u64) -> std::io::Result<Vec<u8>> {
    let mut bytes = Vec::new();
    std::io::Read::read_to_end(
        &mut std::io::Read::take(std::fs::File::open(path)?, limit),
        &mut bytes,
    )?;
    Ok(bytes)
}

/// What a loose ref file holds, read as git's files backend reads it.
enum Loose {
    /// A symbolic ref to this name (`ref: <name>`, or a symbolic link into `refs/`).
    Symbolic(String),
    /// An object id.
    Id(ObjectId),
    /// A symbolic ref packd cannot follow: its target is not UTF-8 or is too long. git would
    /// follow it to a name no listing of packd's can give, so it is a broken ref here.
    Unfollowable,
}

/// Reads the loose ref at `path`. `Ok(None)` when there is none (no file, or a directory, or a
/// path through a file), an error when the file is neither an id nor a symbolic ref.
fn read_loose(path: &Path) -> Result<Option<Loose>> {
    // A symbolic link into `refs/` is a symbolic ref; any other link is read through.
    if let Some(target) = symlink_into_refs(path) {
        return Ok(Some(symbolic(&target)));
    }
    let bytes = match read_start(path, MAX_LOOSE_REF + 1) {
        Ok(bytes) => bytes,
        Err(e)
            if matches!(
                e.kind(),
                std::io::ErrorKind::NotFound
                    | std::io::ErrorKind::IsADirectory
                    | std::io::ErrorKind::NotADirectory
            ) =>
        {
            return Ok(None)
        }
        Err(source) => {
            return Err(Error::Io {
                path: path.display().to_string(),
                source,
            })
        }
    };
    if let Some(target) = symref_in(&bytes) {
        if bytes.len() as u64 > MAX_LOOSE_REF {
            return Ok(Some(Loose::Unfollowable));
        }
        return Ok(Some(symbolic(target)));
    }
    // An id, then the end or whitespace (as git parses a loose ref).
    let id = (bytes.get(40).is_none_or(is_git_space))
        .then(|| ObjectId::from_hex_bytes(bytes.get(..40)?))
        .flatten();
    match id {
        Some(id) => Ok(Some(Loose::Id(id))),
        None => Err(Error::corrupt(
            path.display().to_string(),
            0,
            "not a ref: neither an id nor 'ref: <name>'",
        )),
    }
}

/// What a ref resolves to (see [`RefReader::resolve_symbolic`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Resolution {
    /// The id at the end of its chain of symbolic refs; `None` when no ref of that name
    /// exists (an unborn branch).
    pub id: Option<ObjectId>,
    /// The name the chain ends at, when the ref is a symbolic ref.
    pub target: Option<String>,
}

/// One ref as listed: what an advertisement needs to say of it without reading more.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListedRef {
    /// The full name (`refs/heads/main`).
    pub name: String,
    /// The id it points at (symbolic refs followed).
    pub id: ObjectId,
    /// What `packed-refs` says it peels to ([`Peeled::Unknown`] for a loose ref).
    pub peeled: Peeled,
    /// What it points at when it is a symbolic ref (only a loose file can be one), read with
    /// its id.
    pub symref_target: Option<String>,
}

/// Refs kept elsewhere than in git's files (loose refs and `packed-refs`): a reftable stack
/// in a bucket (`packd_refs::ReftableRefs`). A [`RefReader`] built with one
/// ([`RefReader::with_store`]) asks it the two questions every other read is made of, so that
/// everything that reads refs (advertisements, wants, revisions) works on either.
pub trait RefStore: Send + Sync + std::fmt::Debug {
    /// What `name` resolves to, as [`RefReader::resolve_symbolic`] says it.
    fn resolve_symbolic(&self, name: &str) -> Result<Option<Resolution>>;
    /// The refs under `prefix`, but those under each of `skip`, sorted by name, as
    /// [`RefReader::list_refs`] lists them.
    fn list_refs(&self, prefix: &str, skip: &[&str]) -> Result<Vec<ListedRef>>;
}

/// Reads refs from a repository's directories: `git_dir` for HEAD and per-worktree refs,
/// `common_dir` for everything else (they are the same outside linked worktrees), or from a
/// [`RefStore`].
#[derive(Debug, Clone)]
pub struct RefReader<'a> {
    git_dir: &'a Path,
    common_dir: &'a Path,
    /// The repository's parsed `packed-refs`, when it keeps one.
    packed_cache: Option<&'a PackedRefsCache>,
    /// Where the refs are when they are not files.
    store: Option<&'a dyn RefStore>,
}

/// Why `name` is not a ref name git accepts (its `check-ref-format` rules, one-level names
/// such as `HEAD` allowed), or `Ok`. packd adds one rule of its own: at most 4,096 bytes, a
/// bound on what a client can make it store or follow. Names are also paths under the
/// repository: a name that passes cannot leave `refs/` or the git directory (no `..`, no
/// component starting with `.`).
pub fn check_ref_format(name: &str) -> Result<(), String> {
    let bad = |why: &str| Err(format!("invalid ref name '{name}': {why}"));
    if name.is_empty() {
        return bad("it is empty");
    }
    if name.len() > 4096 {
        return bad("it is too long");
    }
    if name.ends_with('/') || name.ends_with('.') {
        return bad("it ends with '/' or '.'");
    }
    if name.contains("..") || name.contains("@{") || name == "@" {
        return bad("it contains '..' or '@{'");
    }
    if name
        .bytes()
        .any(|b| b < 0x20 || b == 0x7f || b" ~^:?*[\\".contains(&b))
    {
        return bad("it contains a control character, a space or one of ~^:?*[\\");
    }
    for component in name.split('/') {
        if component.is_empty() {
            return bad("it has an empty component ('//')");
        }
        if component.starts_with('.') {
            return bad("a component starts with '.'");
        }
        if component.ends_with(".lock") {
            return bad("a component ends with '.lock'");
        }
    }
    Ok(())
}

impl<'a> RefReader<'a> {
    /// A reader for the repository at `git_dir` whose shared directory is `common_dir`.
    pub fn new(git_dir: &'a Path, common_dir: &'a Path) -> Self {
        RefReader {
            git_dir,
            common_dir,
            packed_cache: None,
            store: None,
        }
    }

    /// The same reader, reading the refs from `store` rather than from files.
    pub fn with_store(mut self, store: &'a dyn RefStore) -> Self {
        self.store = Some(store);
        self
    }

    /// The same reader, taking packed refs from `cache` (kept by a repository across requests).
    pub fn with_packed_cache(mut self, cache: &'a PackedRefsCache) -> Self {
        self.packed_cache = Some(cache);
        self
    }

    /// Where the loose file of ref `name` lives: the worktree's own git directory for
    /// per-worktree refs (`HEAD`, `refs/bisect/*`, ...), the common directory for the rest.
    fn loose_path(&self, name: &str) -> std::path::PathBuf {
        let per_worktree = !name.starts_with("refs/") || name.starts_with("refs/bisect/");
        let dir = if per_worktree {
            self.git_dir
        } else {
            self.common_dir
        };
        dir.join(name)
    }

    /// The id a full ref name points at, following symbolic refs: `None` when it does not
    /// exist or its chain passes a name git refuses, an error when a file on the chain is
    /// neither an id nor a symbolic ref or the chain nests too deep.
    pub fn resolve_full(&self, name: &str) -> Result<Option<ObjectId>> {
        Ok(self.resolve_symbolic(name)?.and_then(|r| r.id))
    }

    /// The name at the end of `name`'s chain of symbolic refs (`HEAD` -> `refs/heads/main`),
    /// whether or not that ref exists, as git's `resolve_ref_unsafe` names it; `None` when
    /// `name` is not a symbolic ref, does not exist, or its chain passes a name git refuses.
    pub fn symref_target(&self, name: &str) -> Result<Option<String>> {
        Ok(self.resolve_symbolic(name)?.and_then(|r| r.target))
    }

    /// What `name` resolves to, following its chain of symbolic refs as git's
    /// `resolve_ref_unsafe` does (without requiring the ref to exist): both the id and, for a
    /// symbolic ref, the name the chain ends at, from one read of each loose file. `None` when
    /// a name on the chain is not a valid ref name: git calls such a ref broken and lists
    /// nothing for it, not even an unborn HEAD. An error when a file on the chain is neither an
    /// id nor a symbolic ref, or the chain nests deeper than git follows.
    ///
    /// One walk serves every caller so that what HEAD is listed as (its id) and what it is
    /// said to point at (its target) cannot disagree.
    pub fn resolve_symbolic(&self, name: &str) -> Result<Option<Resolution>> {
        if let Some(store) = self.store {
            return store.resolve_symbolic(name);
        }
        let mut name = name.to_string();
        for depth in 0..MAX_SYMREF_DEPTH {
            if check_ref_format(&name).is_err() {
                return Ok(None);
            }
            // Reached through a symbolic ref: the name its chain ends at.
            let target = (depth > 0).then(|| name.clone());
            match read_loose(&self.loose_path(&name))? {
                Some(Loose::Symbolic(next)) => name = next,
                Some(Loose::Unfollowable) => return Ok(None),
                Some(Loose::Id(id)) => {
                    return Ok(Some(Resolution {
                        id: Some(id),
                        target,
                    }))
                }
                None => {
                    return Ok(Some(Resolution {
                        id: self.packed(&name)?,
                        target,
                    }))
                }
            }
        }
        Err(Error::BadName(format!(
            "symbolic ref {name} nests too deep"
        )))
    }

    fn packed(&self, name: &str) -> Result<Option<ObjectId>> {
        if let Some(cache) = self.packed_cache {
            return cache.find(self.common_dir, name);
        }
        Ok(PackedRefs::read(self.common_dir)?.and_then(|p| p.find(name)))
    }

    /// Every ref under `prefix` (e.g. `refs/heads/`, or `refs/` for all) with the id it points
    /// at, loose refs winning over packed ones, sorted by name. Symbolic refs are followed. A
    /// loose ref that is broken (see [`RefReader::resolve_symbolic`], or the null id) or
    /// dangling is left out, a broken one with a warning, as `git for-each-ref` leaves them
    /// out; it still hides a packed ref of its name.
    ///
    /// A host's refs are mostly packed (100,000 `refs/pull/*` in one `packed-refs`): that file
    /// is read once, in its own sorted order, and merged with the few loose refs, rather than
    /// each name being looked up again.
    pub fn list(&self, prefix: &str) -> Result<Vec<(String, ObjectId)>> {
        self.list_skipping(prefix, &[])
    }

    /// Like [`RefReader::list`], leaving out every ref under each of `skip` (ref prefixes, such
    /// as hidden `refs/pull`): the packed ones are not even parsed, unless the repository keeps
    /// the file parsed (a server).
    pub fn list_skipping(&self, prefix: &str, skip: &[&str]) -> Result<Vec<(String, ObjectId)>> {
        Ok(self
            .list_refs(prefix, skip)?
            .into_iter()
            .map(|r| (r.name, r.id))
            .collect())
    }

    /// [`RefReader::list_refs`] of the refs `hidden` does not hide: the prefixes it hides
    /// whole are not even listed (a host's 100,000 hidden `refs/pull/*`).
    pub fn list_shown(&self, prefix: &str, hidden: &HiddenRefs) -> Result<Vec<ListedRef>> {
        let mut refs = self.list_refs(prefix, &hidden.hidden_prefixes())?;
        if !hidden.is_empty() {
            refs.retain(|r| !hidden.is_hidden(&r.name));
        }
        Ok(refs)
    }

    /// Like [`RefReader::list_skipping`], with what `packed-refs` says each ref peels to and
    /// which refs are loose files: an advertisement of thousands of packed refs then reads no
    /// tag and opens no ref file to peel them or to look for symbolic refs.
    pub fn list_refs(&self, prefix: &str, skip: &[&str]) -> Result<Vec<ListedRef>> {
        if let Some(store) = self.store {
            return store.list_refs(prefix, skip);
        }
        let hidden = |name: &str| crate::packed_refs::is_hidden(name, skip);
        let packed = match self.packed_cache {
            Some(cache) => cache.entries(self.common_dir, prefix, skip)?,
            None => match PackedRefs::read(self.common_dir)? {
                Some(p) => p.entries(prefix, skip),
                None => Vec::new(),
            },
        };
        let mut loose_names = Vec::new();
        let mut stack = vec!["refs".to_string()];
        while let Some(dir) = stack.pop() {
            let Ok(entries) = std::fs::read_dir(self.common_dir.join(&dir)) else {
                continue;
            };
            for entry in entries.flatten() {
                let Some(name) = entry.file_name().to_str().map(|n| format!("{dir}/{n}")) else {
                    continue;
                };
                if entry.file_type().map(|t| t.is_dir()).unwrap_or(false) {
                    stack.push(name);
                } else if name.starts_with(prefix) && !name.ends_with(".lock") && !hidden(&name) {
                    loose_names.push(name);
                }
            }
        }
        loose_names.sort();
        // A loose ref that resolves to nothing (a dangling symbolic ref) or is broken is not
        // listed, as git lists neither; it still hides a packed ref of its name, as in git.
        let mut loose = Vec::with_capacity(loose_names.len());
        for name in loose_names {
            let resolved = match self.resolve_symbolic(&name) {
                Ok(resolved) => resolved,
                Err(e) => {
                    tracing::warn!("ignoring broken ref {name}: {e}");
                    None
                }
            };
            let listed = resolved.and_then(|r| {
                // The null id is a broken ref to git too.
                let id = r.id.filter(|id| *id != ObjectId::NULL);
                if r.id.is_some() && id.is_none() {
                    tracing::warn!("ignoring broken ref {name}: it holds the null id");
                }
                Some(ListedRef {
                    name: name.clone(),
                    id: id?,
                    peeled: Peeled::Unknown,
                    symref_target: r.target,
                })
            });
            loose.push((name, listed));
        }
        // Merge the two sorted lists; a loose ref replaces a packed one of the same name.
        let listed = |(name, id, peeled)| ListedRef {
            name,
            id,
            peeled,
            symref_target: None,
        };
        let mut out = Vec::with_capacity(packed.len() + loose.len());
        let mut packed = packed.into_iter().peekable();
        for (name, r) in loose {
            while let Some(p) = packed.next_if(|p| p.0 < name) {
                out.push(listed(p));
            }
            packed.next_if(|p| p.0 == name);
            out.extend(r);
        }
        out.extend(packed.map(listed));
        Ok(out)
    }

    /// Like [`RefReader::list`], with each ref's peeled value when `packed-refs` records one
    /// for it (`Some(target)`: the ref is an annotated tag that peels to `target`); `None` for
    /// loose refs and refs without a `^` line, whose kind the caller must find out itself.
    /// `rev-list --all` uses it to take a tag's target without reading the tag.
    pub fn list_peeled(&self, prefix: &str) -> Result<Vec<(String, ObjectId, Option<ObjectId>)>> {
        Ok(self
            .list_refs(prefix, &[])?
            .into_iter()
            .map(|r| (r.name, r.id, r.peeled.tag_target()))
            .collect())
    }

    /// The id a name as a user types it points at (`HEAD`, `main`, `v1.0`, `refs/heads/x`),
    /// trying git's prefixes in git's order.
    pub fn resolve(&self, short: &str) -> Result<Option<ObjectId>> {
        for (before, after) in SHORT_NAME_RULES {
            let full = format!("{before}{short}{after}");
            if before.is_empty()
                && !full.starts_with("refs/")
                && !full.chars().all(|c| c.is_ascii_uppercase() || c == '_')
            {
                // Outside refs/, git only looks up all-caps names such as HEAD or FETCH_HEAD.
                continue;
            }
            if let Some(id) = self.resolve_full(&full)? {
                return Ok(Some(id));
            }
        }
        Ok(None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ID: &str = "1136f0a632ba7842f042f70934f2aa311e558d03";

    /// A git directory holding `files` (path, content).
    fn git_dir(files: &[(&str, &[u8])]) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        for (path, content) in files {
            let path = dir.path().join(path);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, content).unwrap();
        }
        dir
    }

    fn resolve(dir: &tempfile::TempDir, name: &str) -> Result<Option<Resolution>> {
        RefReader::new(dir.path(), dir.path()).resolve_symbolic(name)
    }

    /// The names `list_refs` gives for `refs/` in `dir`.
    fn listed_names(dir: &tempfile::TempDir) -> Vec<String> {
        RefReader::new(dir.path(), dir.path())
            .list_refs("refs/", &[])
            .unwrap()
            .into_iter()
            .map(|r| r.name)
            .collect()
    }

    fn found(id: Option<&str>, target: Option<&str>) -> Option<Resolution> {
        Some(Resolution {
            id: id.map(|h| ObjectId::from_hex(h).unwrap()),
            target: target.map(str::to_string),
        })
    }

    #[test]
    fn a_chain_of_symbolic_refs_ends_at_an_id_or_an_unborn_branch() {
        let with_link = format!("{ID}\n");
        let dir = git_dir(&[
            ("HEAD", b"ref: refs/heads/link\n"),
            ("refs/heads/link", b"ref: refs/heads/main\n"),
            ("refs/heads/main", with_link.as_bytes()),
            ("refs/heads/unborn-link", b"ref: refs/heads/nothing\n"),
        ]);
        assert_eq!(
            resolve(&dir, "HEAD").unwrap(),
            found(Some(ID), Some("refs/heads/main"))
        );
        assert_eq!(
            resolve(&dir, "refs/heads/main").unwrap(),
            found(Some(ID), None)
        );
        assert_eq!(
            resolve(&dir, "refs/heads/unborn-link").unwrap(),
            found(None, Some("refs/heads/nothing"))
        );
        assert_eq!(
            resolve(&dir, "refs/heads/absent").unwrap(),
            found(None, None)
        );
    }

    #[test]
    fn a_chain_through_a_name_git_refuses_resolves_to_nothing() {
        for bad in [
            "refs/heads/a..b",
            "refs/heads/.hidden",
            "refs/heads/x.lock",
            "refs//x",
        ] {
            let link = format!("ref: {bad}\n");
            let dir = git_dir(&[
                ("HEAD", b"ref: refs/heads/link\n"),
                ("refs/heads/link", link.as_bytes()),
            ]);
            assert_eq!(resolve(&dir, "HEAD").unwrap(), None, "{bad}");
            let reader = RefReader::new(dir.path(), dir.path());
            assert_eq!(reader.symref_target("HEAD").unwrap(), None, "{bad}");
            assert_eq!(reader.resolve_full("HEAD").unwrap(), None, "{bad}");
        }
    }

    #[test]
    fn a_loose_ref_is_an_id_then_the_end_or_whitespace() {
        let spaced = format!("{ID} anything after a space\n");
        let glued = format!("{ID}x\n");
        let dir = git_dir(&[
            ("refs/heads/spaced", spaced.as_bytes()),
            ("refs/heads/glued", glued.as_bytes()),
            ("refs/heads/short", &ID.as_bytes()[..39]),
        ]);
        assert_eq!(
            resolve(&dir, "refs/heads/spaced").unwrap(),
            found(Some(ID), None)
        );
        for broken in ["refs/heads/glued", "refs/heads/short"] {
            let err = resolve(&dir, broken).unwrap_err().to_string();
            assert!(err.contains(broken) && err.contains("not a ref"), "{err}");
        }
    }

    #[test]
    fn a_huge_ref_file_is_refused_without_reading_it_all() {
        // A name past git's limit after `ref: `, and an id followed by megabytes.
        let long_name = format!("ref: refs/heads/{}\n", "n".repeat(1 << 20));
        let long_id = format!("{ID}{}", "x".repeat(1 << 20));
        let dir = git_dir(&[
            ("refs/heads/long-name", long_name.as_bytes()),
            ("refs/heads/long-id", long_id.as_bytes()),
        ]);
        assert_eq!(resolve(&dir, "refs/heads/long-name").unwrap(), None);
        assert!(resolve(&dir, "refs/heads/long-id").is_err());
        assert_eq!(
            read_start(&dir.path().join("refs/heads/long-id"), MAX_LOOSE_REF + 1)
                .unwrap()
                .len() as u64,
            MAX_LOOSE_REF + 1
        );
    }

    #[test]
    fn what_git_reads_differently_from_plain_text() {
        let main = format!("{ID}\n");
        // A symbolic ref longer than packd reads: the spaces after a valid name would be cut.
        let long = format!("ref: refs/heads/main{}junk\n", " ".repeat(9000));
        let dir = git_dir(&[
            ("refs/heads/main", main.as_bytes()),
            ("refs/heads/latin1", b"ref: refs/heads/caf\xe9\n"),
            ("refs/heads/formfeed", b"ref: refs/heads/main\x0c\n"),
            ("refs/heads/long", long.as_bytes()),
            ("refs/heads/file", main.as_bytes()),
            (
                "refs/heads/null",
                b"0000000000000000000000000000000000000000\n",
            ),
        ]);
        assert_eq!(resolve(&dir, "refs/heads/latin1").unwrap(), None);
        // \x0c is not whitespace to git: the name keeps it, and git refuses it.
        assert_eq!(resolve(&dir, "refs/heads/formfeed").unwrap(), None);
        assert_eq!(resolve(&dir, "refs/heads/long").unwrap(), None);
        // A path through a file is a ref that does not exist, not an error.
        assert_eq!(
            resolve(&dir, "refs/heads/file/x").unwrap(),
            found(None, None)
        );
        #[cfg(unix)]
        {
            std::os::unix::fs::symlink("refs/heads/main", dir.path().join("HEAD")).unwrap();
            assert_eq!(
                resolve(&dir, "HEAD").unwrap(),
                found(Some(ID), Some("refs/heads/main"))
            );
            std::fs::remove_file(dir.path().join("HEAD")).unwrap();
            std::os::unix::fs::symlink("refs/heads/unborn", dir.path().join("HEAD")).unwrap();
            assert_eq!(
                resolve(&dir, "HEAD").unwrap(),
                found(None, Some("refs/heads/unborn"))
            );
        }
        let names = listed_names(&dir);
        assert_eq!(
            names,
            ["refs/heads/file", "refs/heads/main"],
            "the null id is broken"
        );
    }

    #[test]
    fn listing_leaves_a_broken_ref_out_and_it_still_hides_its_packed_one() {
        let packed = format!("# pack-refs with: peeled fully-peeled sorted\n{ID} refs/heads/broken\n{ID} refs/heads/packed\n");
        let dir = git_dir(&[
            ("packed-refs", packed.as_bytes()),
            ("refs/heads/broken", b"not an id\n"),
            ("refs/heads/dangling", b"ref: refs/heads/nothing\n"),
        ]);
        let names = listed_names(&dir);
        assert_eq!(names, ["refs/heads/packed"]);
    }
}
