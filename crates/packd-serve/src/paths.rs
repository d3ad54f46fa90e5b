//! Mapping a requested repository path onto a git directory under the served root, without
//! ever leaving it.
//!
//! The path a client names (the part of an HTTP URL before `/info/refs` or `/git-upload-pack`,
//! or the path of a git:// request) is percent-decoded first, then checked component by
//! component (no `..`, no `.`, no empty or absolute path, no control characters, no `~user`),
//! then looked up as `ROOT/<path>` and, when that is not a repository, `ROOT/<path>.git`. The
//! git directory found is canonicalized (symlinks resolved) and must still lie inside the
//! canonical root: a symlink pointing out of the root is refused like a `..`.

use packd_odb::repository::is_git_dir;
use std::path::{Component, Path, PathBuf};

/// Why a requested path was not mapped to a repository.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PathError {
    /// The path is malformed or tries to leave the root (HTTP 403).
    #[error("forbidden path: {0}")]
    Forbidden(String),
    /// No repository by that name under the root (HTTP 404).
    #[error("repository not found: {0}")]
    NotFound(String),
}

/// Longest repository path accepted, in bytes (after decoding).
pub const MAX_PATH_LEN: usize = 4096;

/// Decodes `%XX` escapes. Invalid escapes (not two hex digits) are refused rather than passed
/// through, so that nothing half-decoded reaches the checks.
pub fn percent_decode(raw: &str) -> Result<String, PathError> {
    let bytes = raw.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = bytes
                .get(i + 1..i + 3)
                .and_then(|h| std::str::from_utf8(h).ok())
                .and_then(|h| u8::from_str_radix(h, 16).ok());
            match hex {
                Some(b) => out.push(b),
                None => {
                    return Err(PathError::Forbidden(format!(
                        "{raw}: invalid percent-encoding"
                    )))
                }
            }
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out)
        .map_err(|_| PathError::Forbidden(format!("{raw}: the path is not valid UTF-8")))
}

/// Checks a decoded repository path (leading `/` allowed, and only one) and returns it as a
/// relative path of normal components.
pub fn check_relative(decoded: &str) -> Result<PathBuf, PathError> {
    let shown = decoded.escape_debug().to_string();
    if decoded.len() > MAX_PATH_LEN {
        return Err(PathError::Forbidden(format!(
            "path longer than {MAX_PATH_LEN} bytes"
        )));
    }
    if decoded.chars().any(|c| c.is_control()) {
        return Err(PathError::Forbidden(format!(
            "{shown}: control characters are not allowed"
        )));
    }
    let rel = decoded.strip_prefix('/').unwrap_or(decoded);
    if rel.starts_with('/') || Path::new(rel).is_absolute() {
        return Err(PathError::Forbidden(format!(
            "{shown}: absolute paths are not allowed"
        )));
    }
    if rel.starts_with('~') {
        return Err(PathError::Forbidden(format!(
            "{shown}: ~user paths are not served"
        )));
    }
    let mut out = PathBuf::new();
    for part in rel.split('/') {
        match part {
            "" => {
                // A trailing slash is harmless; `a//b` is not a path anyone means.
                continue;
            }
            "." | ".." => {
                return Err(PathError::Forbidden(format!(
                    "{shown}: '.' and '..' components are not allowed"
                )))
            }
            _ => {}
        }
        // On Unix the only separator is '/', so every part is one normal component.
        match Path::new(part).components().next() {
            Some(Component::Normal(_)) => out.push(part),
            _ => {
                return Err(PathError::Forbidden(format!(
                    "{shown}: '{part}' is not a plain path component"
                )))
            }
        }
    }
    if out.as_os_str().is_empty() {
        return Err(PathError::NotFound(
            "no repository path given (try /<name>.git)".into(),
        ));
    }
    Ok(out)
}

/// The git directory of the repository at `dir`: `dir` itself when bare, `dir/.git` for a work
/// tree whose `.git` is a directory.
fn git_dir_of(dir: &Path) -> Option<PathBuf> {
    if is_git_dir(dir) {
        return Some(dir.to_path_buf());
    }
    let dot_git = dir.join(".git");
    if dot_git.is_dir() && is_git_dir(&dot_git) {
        return Some(dot_git);
    }
    None
}

/// The served root, canonicalized once: a directory, or a prefix of object storage (then
/// [`Root::path`] is this server's directory of what it derives from those repositories).
#[derive(Debug, Clone)]
pub struct Root {
    canonical: PathBuf,
    store: Option<std::sync::Arc<crate::store::StoreRoot>>,
}

impl Root {
    /// Canonicalizes `dir` (it must exist and be a directory).
    pub fn new(dir: &Path) -> std::io::Result<Root> {
        let canonical = dir.canonicalize()?;
        if !canonical.is_dir() {
            return Err(std::io::Error::new(
                std::io::ErrorKind::NotADirectory,
                format!("{} is not a directory", dir.display()),
            ));
        }
        Ok(Root {
            canonical,
            store: None,
        })
    }

    /// The repositories of `store`.
    pub fn in_store(store: std::sync::Arc<crate::store::StoreRoot>) -> Root {
        Root {
            canonical: store.cache().to_path_buf(),
            store: Some(store),
        }
    }

    /// The store served, when the repositories are in one.
    pub fn store(&self) -> Option<&std::sync::Arc<crate::store::StoreRoot>> {
        self.store.as_ref()
    }

    /// How a push writes the repository at `git_dir` (one [`Root::resolve`] gave) when the
    /// root is a store; `None` for a directory, whose repositories are files.
    pub fn push_store(
        &self,
        git_dir: &Path,
    ) -> Option<std::sync::Arc<dyn packd_protocol::receive_store::PushStore>> {
        self.store.as_ref().map(|store| store.push_store(git_dir))
    }

    /// The canonical root directory.
    pub fn path(&self) -> &Path {
        &self.canonical
    }

    /// Maps a raw (still percent-encoded) repository path from a request to the canonical git
    /// directory it names under the root.
    pub fn resolve_raw(&self, raw: &str) -> Result<PathBuf, PathError> {
        let decoded = percent_decode(raw)?;
        self.resolve(&decoded)
    }

    /// Maps a decoded repository path to the canonical git directory it names under the root:
    /// `ROOT/<path>`, else `ROOT/<path>.git`, each bare or a work tree with `.git`.
    pub fn resolve(&self, decoded: &str) -> Result<PathBuf, PathError> {
        if let Some(store) = &self.store {
            return store.resolve(decoded);
        }
        let rel = check_relative(decoded)?;
        let shown = rel.display().to_string();
        let plain = self.canonical.join(&rel);
        let mut with_git = plain.clone().into_os_string();
        with_git.push(".git");
        for candidate in [plain, PathBuf::from(with_git)] {
            let Some(git_dir) = git_dir_of(&candidate) else {
                continue;
            };
            let canonical = git_dir
                .canonicalize()
                .map_err(|_| PathError::NotFound(shown.clone()))?;
            if !canonical.starts_with(&self.canonical) {
                return Err(PathError::Forbidden(format!(
                    "{shown}: resolves outside the served root"
                )));
            }
            return Ok(canonical);
        }
        Err(PathError::NotFound(shown))
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A bare repository's bones at `dir` (what makes a git directory).
    pub(crate) fn bare(dir: &Path) {
        std::fs::create_dir_all(dir.join("objects/pack")).unwrap();
        std::fs::create_dir_all(dir.join("refs/heads")).unwrap();
        std::fs::write(dir.join("HEAD"), "ref: refs/heads/main\n").unwrap();
    }

    #[test]
    fn decode() {
        assert_eq!(percent_decode("a%2Fb%2e").unwrap(), "a/b.");
        assert!(percent_decode("a%2").is_err());
        assert!(percent_decode("a%zz").is_err());
        assert!(percent_decode("%ff").is_err());
    }

    #[test]
    fn components() {
        assert_eq!(
            check_relative("/a/b.git").unwrap(),
            PathBuf::from("a/b.git")
        );
        assert_eq!(check_relative("a/b/").unwrap(), PathBuf::from("a/b"));
        for bad in [
            "/../x",
            "a/../../x",
            "//etc/passwd",
            "/./a",
            "~root/x",
            "/a\0b",
            "a\nb",
        ] {
            assert!(
                matches!(check_relative(bad), Err(PathError::Forbidden(_))),
                "{bad:?} accepted"
            );
        }
        assert!(matches!(check_relative("/"), Err(PathError::NotFound(_))));
    }

    #[test]
    fn resolve_confined() {
        let tmp = tempfile::tempdir().unwrap();
        let root_dir = tmp.path().join("root");
        bare(&root_dir.join("a.git"));
        bare(&root_dir.join("plain"));
        bare(&root_dir.join("work/.git"));
        bare(&tmp.path().join("outside.git"));
        std::fs::create_dir_all(root_dir.join("sub")).unwrap();
        std::os::unix::fs::symlink(tmp.path().join("outside.git"), root_dir.join("link.git"))
            .unwrap();
        std::os::unix::fs::symlink(root_dir.join("a.git"), root_dir.join("inside.git")).unwrap();
        let root = Root::new(&root_dir).unwrap();
        let canon = root.path().to_path_buf();
        assert_eq!(root.resolve("/a.git").unwrap(), canon.join("a.git"));
        assert_eq!(root.resolve("/a").unwrap(), canon.join("a.git"));
        assert_eq!(root.resolve("/plain").unwrap(), canon.join("plain"));
        assert_eq!(root.resolve("/work").unwrap(), canon.join("work/.git"));
        assert_eq!(root.resolve("/inside").unwrap(), canon.join("a.git"));
        assert_eq!(root.resolve_raw("/%61.git").unwrap(), canon.join("a.git"));
        assert!(matches!(
            root.resolve("/link.git"),
            Err(PathError::Forbidden(_))
        ));
        assert!(matches!(
            root.resolve("/link"),
            Err(PathError::Forbidden(_))
        ));
        assert!(matches!(
            root.resolve_raw("/%2e%2e/outside.git"),
            Err(PathError::Forbidden(_))
        ));
        assert!(matches!(
            root.resolve_raw("/sub%2f..%2f..%2foutside.git"),
            Err(PathError::Forbidden(_))
        ));
        assert!(matches!(root.resolve("/sub"), Err(PathError::NotFound(_))));
        assert!(matches!(root.resolve("/nope"), Err(PathError::NotFound(_))));
        let abs = format!("/{}", tmp.path().join("outside.git").display());
        assert!(matches!(root.resolve(&abs), Err(PathError::Forbidden(_))));
    }
}
