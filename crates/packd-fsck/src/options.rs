//! What the checks refuse, warn of or ignore: git's receive-pack configuration.
//!
//! ```text
//! receive.fsckObjects      on/off; unset: transfer.fsckObjects; both unset: ON (packd's default,
//!                          git's is off)
//! receive.fsck.<msg-id>    error | warn | ignore (an unknown id is skipped, as git warns and does)
//! receive.fsck.skipList    a file of object ids (one a line, '#' comments), relative paths from
//!                          the git directory, as git's receive-pack (running there) opens them
//! receive.unpackLimit      which of git's unpackers a push is answered as (transfer.unpackLimit
//!                          wins over it, as in git); default 100 objects
//! ```
//! `fsck.<msg-id>` and `fsck.skipList` are not read: git 2.39's receive-pack does not honour
//! them (its index-pack and unpack-objects get only what `receive.fsck.*` says).
//!
//! Strict mode, the one receive uses: a warning is an error unless configured otherwise; an
//! info stays a warning.

use crate::msg_id::{MsgId, Severity};
use packd_odb::config::{parse_bool, Config};
use packd_odb::{ObjectId, Repository};
use std::collections::HashSet;
use std::path::{Path, PathBuf};

/// Why the configuration cannot be used; git dies on each of these.
#[derive(Debug, thiserror::Error)]
pub enum FsckError {
    /// `receive.fsck.<id>` has a value other than error, warn or ignore.
    #[error("Unknown fsck message type: '{0}'")]
    UnknownSeverity(String),
    /// A fatal id was configured as something other than error.
    #[error("Cannot demote {id} to {to}")]
    CannotDemote {
        /// The id, as configured.
        id: String,
        /// The severity asked for.
        to: String,
    },
    /// The skip list cannot be read.
    #[error("could not open skip list: {path}: {source}")]
    SkipList {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A skip list line is not an object id.
    #[error("invalid object name: {0}")]
    SkipListLine(String),
}

/// Which of git's programs receive-pack would have unpacked a push with: it decides git's
/// unpack status (`unpack-objects abnormal exit` or `index-pack abnormal exit`) and a few
/// behaviours that differ between the two.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unpacker {
    /// Fewer objects than the unpack limit.
    UnpackObjects,
    /// The rest.
    IndexPack,
}

impl Unpacker {
    /// The unpack status git reports when this program refused the objects.
    pub fn abnormal_exit(self) -> &'static str {
        match self {
            Unpacker::UnpackObjects => "unpack-objects abnormal exit",
            Unpacker::IndexPack => "index-pack abnormal exit",
        }
    }
}

/// The checks' configuration.
#[derive(Debug, Clone)]
pub struct FsckOptions {
    /// Whether the fsck checks run at all. Off, the checks still parse what links need and
    /// resolve every link, as git does without fsckObjects.
    pub enabled: bool,
    /// The severity of each id, strict mode applied ([`MsgId::index`]).
    severities: Vec<Severity>,
    /// Objects never reported on.
    skiplist: HashSet<ObjectId>,
    /// Pushes of fewer objects than this are answered as git's unpack-objects would.
    pub unpack_limit: u64,
}

impl Default for FsckOptions {
    fn default() -> Self {
        FsckOptions::strict()
    }
}

impl FsckOptions {
    /// Every check on, with git's default severities in strict mode.
    pub fn strict() -> FsckOptions {
        let severities = MsgId::ALL
            .iter()
            .map(|id| match id.default_severity() {
                Severity::Warn => Severity::Error,
                s => s,
            })
            .collect();
        FsckOptions {
            enabled: true,
            severities,
            skiplist: HashSet::new(),
            unpack_limit: 100,
        }
    }

    /// fsck checks off (links are still resolved).
    pub fn disabled() -> FsckOptions {
        FsckOptions {
            enabled: false,
            ..FsckOptions::strict()
        }
    }

    /// The options git's receive-pack would use for a push into `repo`.
    pub fn for_receive(repo: &Repository) -> Result<FsckOptions, FsckError> {
        FsckOptions::from_config(repo.config(), repo.git_dir())
    }

    /// [`FsckOptions::for_receive`] from a configuration; relative skip-list paths are taken
    /// from `git_dir`.
    pub fn from_config(config: &Config, git_dir: &Path) -> Result<FsckOptions, FsckError> {
        let mut options = FsckOptions::strict();
        options.enabled = config
            .get("receive.fsckobjects")
            .or_else(|| config.get("transfer.fsckobjects"))
            .map(|v| parse_bool(v).unwrap_or(true))
            .unwrap_or(true);
        for id in MsgId::ALL {
            let key = format!("receive.fsck.{}", id.camel());
            if let Some(value) = config.get(&key) {
                options.set_from_config(id.camel(), value)?;
            }
        }
        if let Some(path) = config.get("receive.fsck.skiplist") {
            options.read_skiplist(&git_dir.join(expand_home(path)))?;
        }
        let limit = |key: &str| {
            config
                .get(key)
                .and_then(|v| v.trim().parse::<i64>().ok())
                .filter(|n| *n >= 0)
        };
        if let Some(n) = limit("transfer.unpacklimit").or_else(|| limit("receive.unpacklimit")) {
            options.unpack_limit = n as u64;
        }
        Ok(options)
    }

    /// Sets `id` (a configuration name) to `value` as git's `fsck_set_msg_type` does.
    pub fn set_from_config(&mut self, id: &str, value: &str) -> Result<(), FsckError> {
        let Some(msg) = MsgId::from_config_name(id) else {
            tracing::warn!("skipping unknown msg id '{id}'");
            return Ok(());
        };
        let severity =
            Severity::from_config(value).ok_or_else(|| FsckError::UnknownSeverity(value.into()))?;
        if severity != Severity::Error && msg.default_severity() == Severity::Fatal {
            return Err(FsckError::CannotDemote {
                id: id.to_ascii_lowercase(),
                to: value.into(),
            });
        }
        self.severities[msg.index()] = severity;
        Ok(())
    }

    /// Adds the ids listed in `path` to the skip list (git's `oidset_parse_file`: one id a
    /// line, `#` starts a comment, blank lines skipped).
    pub fn read_skiplist(&mut self, path: &Path) -> Result<(), FsckError> {
        let text = std::fs::read(path).map_err(|source| FsckError::SkipList {
            path: path.to_path_buf(),
            source,
        })?;
        for line in text.split(|&b| b == b'\n') {
            let line = match line.iter().position(|&b| b == b'#') {
                Some(hash) => &line[..hash],
                None => line,
            };
            let line = line.trim_ascii();
            if line.is_empty() {
                continue;
            }
            let id = ObjectId::from_hex_bytes(line).ok_or_else(|| {
                FsckError::SkipListLine(String::from_utf8_lossy(line).into_owned())
            })?;
            self.skiplist.insert(id);
        }
        Ok(())
    }

    /// The severity of `id` under these options.
    pub fn severity(&self, id: MsgId) -> Severity {
        self.severities[id.index()]
    }

    /// Whether `id` is on the skip list.
    pub fn skips(&self, id: &ObjectId) -> bool {
        self.skiplist.contains(id)
    }

    /// Which unpacker git would use for a pack of `objects` objects (as its header counts
    /// them: appended thin bases not included).
    pub fn unpacker(&self, objects: u64) -> Unpacker {
        if objects < self.unpack_limit {
            Unpacker::UnpackObjects
        } else {
            Unpacker::IndexPack
        }
    }
}

/// git's `~/` expansion of a configured path.
fn expand_home(path: &str) -> PathBuf {
    match (path.strip_prefix("~/"), std::env::var_os("HOME")) {
        (Some(rest), Some(home)) => Path::new(&home).join(rest),
        _ => PathBuf::from(path),
    }
}

/// The messages of one object's checks, as git prints them, and whether any refuses it.
#[derive(Debug)]
pub(crate) struct Report<'o> {
    options: &'o FsckOptions,
    /// `error: object <id>: <msgId>: <text>` and `warning: ...` lines, in order.
    pub lines: Vec<String>,
    /// Whether an error was reported.
    pub failed: bool,
}

impl<'o> Report<'o> {
    pub(crate) fn new(options: &'o FsckOptions) -> Report<'o> {
        Report {
            options,
            lines: Vec::new(),
            failed: false,
        }
    }

    /// Adds a line git prints whatever the severities (a parser's complaint).
    pub(crate) fn raw(&mut self, line: String) {
        self.lines.push(line);
    }

    /// Reports `msg` on object `id`; true when it is an error (git's `report` returning
    /// non-zero), which makes most checks stop.
    pub(crate) fn report(&mut self, id: &ObjectId, msg: MsgId, text: &str) -> bool {
        let severity = self.options.severity(msg);
        if severity == Severity::Ignore || self.options.skips(id) {
            return false;
        }
        let error = matches!(severity, Severity::Fatal | Severity::Error);
        let level = if error { "error" } else { "warning" };
        self.lines
            .push(format!("{level}: object {id}: {}: {text}", msg.camel()));
        self.failed |= error;
        error
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn severities_follow_receive_configuration() {
        let mut config = Config::default();
        config
            .parse(
                "[receive]\nfsckObjects = false\n[receive \"fsck\"]\nhasDotgit = warn\nbadTagName = error\nnoSuchId = ignore\n[transfer]\nfsckObjects = true\n",
                "test",
            )
            .unwrap();
        let dir = tempfile::tempdir().unwrap();
        let options = FsckOptions::from_config(&config, dir.path()).unwrap();
        assert!(!options.enabled);
        assert_eq!(options.severity(MsgId::HasDotgit), Severity::Warn);
        assert_eq!(options.severity(MsgId::BadTagName), Severity::Error);
        assert_eq!(options.severity(MsgId::HasDot), Severity::Error);
        assert_eq!(options.severity(MsgId::BadFilemode), Severity::Info);
        assert!(
            FsckOptions::from_config(&Config::default(), dir.path())
                .unwrap()
                .enabled
        );
        let mut fatal = Config::default();
        fatal
            .parse("[receive \"fsck\"]\nnulInHeader = warn\n", "test")
            .unwrap();
        assert!(matches!(
            FsckOptions::from_config(&fatal, dir.path()),
            Err(FsckError::CannotDemote { .. })
        ));
        std::fs::write(
            dir.path().join("skip"),
            "# comment\n4b825dc642cb6eb9a060e54bf8d69288fbee4904 # empty tree\n\n",
        )
        .unwrap();
        let mut skip = Config::default();
        skip.parse("[receive \"fsck\"]\nskipList = skip\n", "test")
            .unwrap();
        let options = FsckOptions::from_config(&skip, dir.path()).unwrap();
        assert!(
            options.skips(&ObjectId::from_hex("4b825dc642cb6eb9a060e54bf8d69288fbee4904").unwrap())
        );
    }
}
