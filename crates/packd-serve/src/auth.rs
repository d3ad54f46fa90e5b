//! Access control for `packd serve --auth-file FILE`: who may read and who may push.
//!
//! The file has one user per line, `#` starts a comment line, blank lines are skipped:
//!
//! ```text
//! # user:PHC-hash:rights
//! alice:$argon2id$v=19$m=19456,t=2,p=1$c2FsdHNhbHQ$...:write:*
//! bob:$argon2id$v=19$m=19456,t=2,p=1$b3RoZXJzYWx0$...:read:team/,write:team/bob.git
//! ```
//!
//! - the user name is everything before the first `:` (so it has none itself, as HTTP basic
//!   auth requires), the hash runs to the next `:` (a PHC string has none), the rights are
//!   the rest;
//! - the hash is a PHC string made by Argon2 (`packd serve --hash-token` reads a token on stdin
//!   and prints one); verification is Argon2's, with a constant-time comparison;
//! - the rights are a comma-separated list of `read:<prefix>` and `write:<prefix>`: the prefix
//!   is a path relative to the served root, matched whole component by component against the
//!   repository's directory (`team` covers `team/a.git`, not `teamwork.git`; a last component
//!   `repo` also covers `repo.git`), `*` is every repository; `write` implies `read`.
//!
//! Rights are checked against the canonical git directory a request resolves to, so a symlink
//! inside the root is judged by the repository it points to.

use argon2::{Argon2, PasswordHash, PasswordHasher, PasswordVerifier};
use password_hash::rand_core::OsRng;
use password_hash::SaltString;
use std::fmt;
use std::path::{Component, Path};

/// Longest auth file accepted, in bytes.
const MAX_FILE_BYTES: u64 = 16 * 1024 * 1024;
/// Longest user name or token accepted from a request, in bytes.
const MAX_CREDENTIAL_BYTES: usize = 4096;

/// Why an auth file could not be loaded or a token hashed.
#[derive(Debug, thiserror::Error)]
pub enum AuthError {
    /// The file could not be read.
    #[error("auth file {path}: {source}")]
    Io {
        /// The file as given.
        path: String,
        /// What failed.
        source: std::io::Error,
    },
    /// The file is larger than anyone's user list should be.
    #[error("auth file {path}: larger than {MAX_FILE_BYTES} bytes")]
    TooLarge {
        /// The file as given.
        path: String,
    },
    /// A line does not follow the format.
    #[error("auth file {path}, line {line}: {message}")]
    Line {
        /// The file as given.
        path: String,
        /// 1-based line number.
        line: usize,
        /// What is wrong with it.
        message: String,
    },
    /// Hashing a token failed.
    #[error("cannot hash the token: {0}")]
    Hash(String),
}

/// What a request needs on a repository.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Right {
    /// Fetch and clone (upload-pack).
    Read,
    /// Push (receive-pack); implies read.
    Write,
}

/// One `read:`/`write:` entry of a user.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Grant {
    write: bool,
    /// The prefix's components; `None` for `*`.
    prefix: Option<Vec<String>>,
}

impl Grant {
    fn parse(entry: &str) -> Result<Grant, String> {
        let (kind, prefix) = entry
            .split_once(':')
            .ok_or_else(|| format!("right '{entry}' is not read:<prefix> or write:<prefix>"))?;
        let write = match kind {
            "read" => false,
            "write" => true,
            other => return Err(format!("unknown right '{other}' (read or write)")),
        };
        if prefix == "*" {
            return Ok(Grant {
                write,
                prefix: None,
            });
        }
        let mut parts = Vec::new();
        for part in prefix.split('/').filter(|p| !p.is_empty()) {
            if part == "." || part == ".." || part.contains('*') {
                return Err(format!("bad path prefix '{prefix}'"));
            }
            parts.push(part.to_string());
        }
        if parts.is_empty() {
            return Err(format!(
                "empty path prefix in '{entry}' (use * for every repository)"
            ));
        }
        Ok(Grant {
            write,
            prefix: Some(parts),
        })
    }

    /// Whether this grant covers the repository at `repo` (components relative to the root).
    fn covers(&self, repo: &[String], right: Right) -> bool {
        if right == Right::Write && !self.write {
            return false;
        }
        let Some(prefix) = &self.prefix else {
            return true;
        };
        if prefix.len() > repo.len() {
            return false;
        }
        let last = prefix.len() - 1;
        prefix
            .iter()
            .zip(repo)
            .enumerate()
            .all(|(i, (p, r))| p == r || (i == last && r.strip_suffix(".git") == Some(p.as_str())))
    }
}

/// One user of the auth file.
#[derive(Clone)]
pub struct User {
    name: String,
    hash: String,
    grants: Vec<Grant>,
}

impl fmt::Debug for User {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The hash stays out of logs and debug output.
        f.debug_struct("User")
            .field("name", &self.name)
            .field("grants", &self.grants)
            .finish_non_exhaustive()
    }
}

impl User {
    /// The user's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Whether the user has `right` on the repository at `repo`, a path relative to the root
    /// (a work tree's trailing `.git` is ignored).
    pub fn allows(&self, repo: &Path, right: Right) -> bool {
        let mut parts: Vec<String> = repo
            .components()
            .filter_map(|c| match c {
                Component::Normal(s) => Some(s.to_string_lossy().into_owned()),
                _ => None,
            })
            .collect();
        if parts.len() > 1 && parts.last().map(String::as_str) == Some(".git") {
            parts.pop();
        }
        !parts.is_empty() && self.grants.iter().any(|g| g.covers(&parts, right))
    }
}

/// The users of an auth file, loaded once at start.
#[derive(Debug, Clone, Default)]
pub struct AuthFile {
    users: Vec<User>,
}

impl AuthFile {
    /// Reads and parses the auth file at `path`.
    pub fn load(path: &Path) -> Result<AuthFile, AuthError> {
        use std::io::Read;
        let shown = path.display().to_string();
        let io = |source| AuthError::Io {
            path: shown.clone(),
            source,
        };
        let file = std::fs::File::open(path).map_err(io)?;
        let mut text = String::new();
        file.take(MAX_FILE_BYTES + 1)
            .read_to_string(&mut text)
            .map_err(io)?;
        if text.len() as u64 > MAX_FILE_BYTES {
            return Err(AuthError::TooLarge { path: shown });
        }
        AuthFile::parse(&text, &shown)
    }

    /// Parses the text of an auth file; `origin` names it in errors.
    pub fn parse(text: &str, origin: &str) -> Result<AuthFile, AuthError> {
        let mut users: Vec<User> = Vec::new();
        for (i, line) in text.lines().enumerate() {
            let err = |message: String| AuthError::Line {
                path: origin.to_string(),
                line: i + 1,
                message,
            };
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let (name, rest) = line
                .split_once(':')
                .ok_or_else(|| err("expected user:hash:rights".into()))?;
            // A PHC string holds no `:`; the rights (read:x) do.
            let (hash, rights) = rest
                .split_once(':')
                .ok_or_else(|| err("expected user:hash:rights".into()))?;
            if name.is_empty() || name.chars().any(|c| c.is_control() || c == ' ') {
                return Err(err(format!("bad user name '{}'", name.escape_debug())));
            }
            if users.iter().any(|u| u.name == name) {
                return Err(err(format!("user '{name}' appears twice")));
            }
            PasswordHash::new(hash)
                .map_err(|e| err(format!("user '{name}': not a PHC hash string: {e}")))?;
            let grants = rights
                .split(',')
                .map(|e| Grant::parse(e.trim()))
                .collect::<Result<Vec<_>, _>>()
                .map_err(|m| err(format!("user '{name}': {m}")))?;
            users.push(User {
                name: name.to_string(),
                hash: hash.to_string(),
                grants,
            });
        }
        Ok(AuthFile { users })
    }

    /// Number of users.
    pub fn len(&self) -> usize {
        self.users.len()
    }

    /// Whether the file names no user (then nobody gets in).
    pub fn is_empty(&self) -> bool {
        self.users.is_empty()
    }

    /// The user named `name`, if there is one (whose credential was verified already).
    pub fn user(&self, name: &str) -> Option<&User> {
        self.users.iter().find(|u| u.name == name)
    }

    /// The user named `name` if `token` is theirs. An unknown user costs one verification too,
    /// so that timing does not tell which names exist. Slow by design (Argon2): call it off the
    /// async threads.
    pub fn authenticate(&self, name: &str, token: &str) -> Option<&User> {
        if name.len() > MAX_CREDENTIAL_BYTES || token.len() > MAX_CREDENTIAL_BYTES {
            return None;
        }
        let found = self.users.iter().find(|u| u.name == name);
        let hash_of = found.or(self.users.first())?;
        let ok = PasswordHash::new(&hash_of.hash)
            .map(|h| {
                Argon2::default()
                    .verify_password(token.as_bytes(), &h)
                    .is_ok()
            })
            .unwrap_or(false);
        found.filter(|_| ok)
    }
}

/// The PHC string of `token` (Argon2id, default parameters, random salt): the middle field of
/// an auth file line.
pub fn hash_token(token: &str) -> Result<String, AuthError> {
    let salt = SaltString::generate(&mut OsRng);
    Argon2::default()
        .hash_password(token.as_bytes(), &salt)
        .map(|h| h.to_string())
        .map_err(|e| AuthError::Hash(e.to_string()))
}

/// The user and token of an `Authorization: Basic base64(user:token)` header value, or `None`
/// when it is missing, of another scheme, or malformed.
pub fn parse_basic(header: &str) -> Option<(String, String)> {
    let (scheme, encoded) = header.trim().split_once(' ')?;
    if !scheme.eq_ignore_ascii_case("basic") {
        return None;
    }
    let encoded = encoded.trim();
    if encoded.len() > 2 * MAX_CREDENTIAL_BYTES {
        return None;
    }
    let decoded = <base64ct::Base64 as base64ct::Encoding>::decode_vec(encoded).ok()?;
    let text = String::from_utf8(decoded).ok()?;
    let (user, token) = text.split_once(':')?;
    Some((user.to_string(), token.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(lines: &[(&str, &str, &str)]) -> AuthFile {
        let text: String = lines
            .iter()
            .map(|(u, t, r)| format!("{u}:{}:{r}\n", hash_token(t).unwrap()))
            .collect();
        AuthFile::parse(&format!("# comment\n\n{text}"), "test").unwrap()
    }

    #[test]
    fn verifies_tokens() {
        let auth = file(&[("alice", "s3cret", "write:*"), ("bob", "pw", "read:a.git")]);
        assert_eq!(auth.len(), 2);
        assert_eq!(
            auth.authenticate("alice", "s3cret").unwrap().name(),
            "alice"
        );
        assert!(auth.authenticate("alice", "pw").is_none());
        assert!(auth.authenticate("bob", "s3cret").is_none());
        assert!(auth.authenticate("carol", "pw").is_none());
        assert!(auth.authenticate("bob", "pw").is_some());
        assert!(AuthFile::default().authenticate("bob", "pw").is_none());
    }

    #[test]
    fn rights() {
        let auth = file(&[
            ("w", "t", "write:*"),
            ("r", "t", "read:team/, write:team/mine.git"),
            ("o", "t", "read:other"),
        ]);
        let w = auth.authenticate("w", "t").unwrap();
        let r = auth.authenticate("r", "t").unwrap();
        let o = auth.authenticate("o", "t").unwrap();
        let p = Path::new;
        assert!(w.allows(p("x.git"), Right::Write));
        assert!(w.allows(p("a/b/.git"), Right::Read));
        assert!(r.allows(p("team/a.git"), Right::Read));
        assert!(!r.allows(p("team/a.git"), Right::Write));
        assert!(r.allows(p("team/mine.git"), Right::Write));
        assert!(!r.allows(p("teamwork.git"), Right::Read));
        assert!(o.allows(p("other.git"), Right::Read));
        assert!(o.allows(p("other/.git"), Right::Read));
        assert!(!o.allows(p("repo.git"), Right::Read));
        assert!(!o.allows(p("otherwise.git"), Right::Read));
        assert!(!o.allows(p(""), Right::Read));
    }

    #[test]
    fn bad_lines() {
        let h = hash_token("x").unwrap();
        for bad in [
            "nocolon".to_string(),
            format!("u:{h}"),
            format!("u:{h}:admin:*"),
            format!("u:{h}:read:"),
            format!("u:{h}:read:../x"),
            "u:notahash:read:*".to_string(),
            format!(":{h}:read:*"),
            format!("u:{h}:read:*\nu:{h}:read:*"),
        ] {
            let e = AuthFile::parse(&bad, "f").unwrap_err();
            assert!(matches!(e, AuthError::Line { .. }), "{bad}: {e}");
            assert!(!e.to_string().contains("$argon2"), "{e}");
        }
        assert!(!format!("{:?}", file(&[("u", "t", "read:*")])).contains("argon2"));
    }

    #[test]
    fn basic_header() {
        assert_eq!(
            parse_basic("Basic YWxpY2U6czNjcjp0"),
            Some(("alice".into(), "s3cr:t".into()))
        );
        assert_eq!(parse_basic("basic  dTp0 "), Some(("u".into(), "t".into())));
        assert_eq!(parse_basic("Bearer dTp0"), None);
        assert_eq!(parse_basic("Basic !!!"), None);
        assert_eq!(parse_basic("Basic dQ=="), None);
        assert_eq!(parse_basic(""), None);
    }
}
