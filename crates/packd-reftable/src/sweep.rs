//! The sweep: deletes tables that `tables.list` no longer names (merged by a compaction, or
//! written by an update that lost its race and crashed before deleting it), once they have
//! been unlisted for a grace period.
//!
//! ```text
//! reftable/tables.retired      one line per unlisted table, when a sweep first saw it so:
//!                              0x000000000001-0x000000000004-1a2b3c4d.ref 1764700000\n
//! ```
//!
//! Storage keeps no times packd can read, so a sweep notes in `tables.retired` (swapped by
//! compare-and-swap like the list) when it first found each table unlisted, and deletes a
//! table only at a later sweep, when that time is at least `grace` ago and the list, read
//! again, still does not name it.
//!
//! Why a reader never loses a table it still uses: a reader reads the list, then opens and
//! reads the tables it names. A table leaves the list only by a compaction; it is noted
//! here no earlier than that, and deleted no earlier than `grace` after the note. So every
//! snapshot taken while the table was listed is younger than `grace` plus its own age when
//! the table goes: a snapshot used for less than `grace` (a request; the default is ten
//! minutes) never finds a table missing. One that opens its tables after the list changed
//! and finds one gone reads the list again (as git's readers do). A table written but not
//! yet listed is protected the same way: its writer gives it up (and writes another) when
//! more than half the grace period passed since it was published, so that a table noted as
//! unlisted can never be listed after the note ages past `grace`.

use crate::stack::{is_table_name, read_list, Stack};
use crate::ReftableError;
use packd_storage::StorageError;
use std::collections::{BTreeMap, HashSet};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The journal of unlisted tables, under the stack's root.
pub const TABLES_RETIRED: &str = "tables.retired";

/// What a sweep did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Swept {
    /// Tables it deleted.
    pub deleted: Vec<String>,
    /// Unlisted tables it left for a later sweep (within their grace period).
    pub waiting: Vec<String>,
}

impl Stack {
    /// Deletes the tables that have been unlisted for at least `grace` (see the module's
    /// documentation for why readers never miss them), and notes the newly unlisted ones.
    pub fn sweep(&self, grace: Duration) -> Result<Swept, ReftableError> {
        self.sweep_at(grace, SystemTime::now())
    }

    /// [`Stack::sweep`] as if the time were `now` (for tests of the grace period).
    pub fn sweep_at(&self, grace: Duration, now: SystemTime) -> Result<Swept, ReftableError> {
        let now = now.duration_since(UNIX_EPOCH).unwrap_or_default().as_secs();
        let (journal_bytes, journal_version) = match self.storage.read_versioned(TABLES_RETIRED)? {
            Some((b, v)) => (b.to_vec(), Some(v)),
            None => (Vec::new(), None),
        };
        let journal = self.parse_journal(&journal_bytes)?;
        let files: Vec<String> = self
            .storage
            .list("")?
            .into_iter()
            .filter(|n| is_table_name(n))
            .collect();
        // Read after the listing: a table listed since is kept.
        let (listed, _) = read_list(&*self.storage)?;
        let listed: HashSet<&String> = listed.iter().collect();
        let mut swept = Swept::default();
        let mut kept = BTreeMap::new();
        for f in files.iter().filter(|f| !listed.contains(f)) {
            match journal.get(f) {
                Some(&seen) if now.saturating_sub(seen) >= grace.as_secs() => {
                    self.storage.delete(f)?;
                    tracing::debug!(table = f, "swept");
                    swept.deleted.push(f.clone());
                }
                Some(&seen) => {
                    kept.insert(f.clone(), seen);
                    swept.waiting.push(f.clone());
                }
                None => {
                    kept.insert(f.clone(), now);
                    swept.waiting.push(f.clone());
                }
            }
        }
        let mut bytes = Vec::new();
        for (name, seen) in &kept {
            bytes.extend_from_slice(format!("{name} {seen}\n").as_bytes());
        }
        if bytes != journal_bytes {
            match self
                .storage
                .replace(TABLES_RETIRED, journal_version.as_ref(), &bytes)
            {
                // Another sweep wrote it first: its notes are as good; this one's deletions
                // were due either way.
                Ok(_) | Err(StorageError::Conflict { .. } | StorageError::Locked { .. }) => {}
                Err(e) => return Err(e.into()),
            }
        }
        Ok(swept)
    }

    /// The journal's notes: table name to the time (seconds) it was first seen unlisted.
    fn parse_journal(&self, bytes: &[u8]) -> Result<BTreeMap<String, u64>, ReftableError> {
        let mut notes = BTreeMap::new();
        let mut at = 0;
        for line in bytes.split_inclusive(|&b| b == b'\n') {
            let text = std::str::from_utf8(line)
                .ok()
                .and_then(|l| l.strip_suffix('\n'));
            let note = text
                .and_then(|l| l.split_once(' '))
                .and_then(|(n, t)| Some((n, t.parse::<u64>().ok()?)))
                .filter(|(n, _)| is_table_name(n));
            let Some((name, seen)) = note else {
                return Err(ReftableError::Corrupt {
                    table: self.storage.describe(TABLES_RETIRED),
                    offset: at as u64,
                    what: "line is not a table's name and a time".into(),
                });
            };
            notes.insert(name.to_string(), seen);
            at += line.len();
        }
        Ok(notes)
    }
}
