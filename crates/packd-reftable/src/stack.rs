//! A stack of tables in storage: `tables.list` names them, oldest first, one a line; each is
//! an immutable blob named `0x{min:012x}-0x{max:012x}-{random:08x}.ref` as git names them.
//!
//! ```text
//! reftable/tables.list                       0x000000000001-0x000000000004-1a2b3c4d.ref\n
//!                                            0x000000000005-0x000000000005-99aa00ff.ref\n
//! reftable/0x...-0x...-XXXXXXXX.ref          the tables (see crate::format)
//! reftable/tables.retired                    tables seen unlisted, for the sweep (crate::sweep)
//! ```
//!
//! An update writes a table of its refs (update index: the newest table's max + 1), publishes
//! it (put-if-absent), then replaces `tables.list` by compare-and-swap against the version it
//! read. Losing that race (another server pushed) means reading the list again: the update
//! is retried if each of its refs still has the value the caller expected, so that pushes to
//! different refs never fail each other, and fails naming the ref otherwise.

use crate::format::reader::Table;
use crate::format::record::{LogRecord, LogUpdate, RefRecord, RefValue, ZERO_ID};
use crate::format::writer::{write_table, WriteOptions};
use crate::merge::Merge;
use crate::ReftableError;
use packd_storage::{PerRequest, Storage, StorageError, Version};
use std::collections::HashMap;
use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The name of the list of tables, under the stack's root.
pub const TABLES_LIST: &str = "tables.list";

/// The most tables a list may name (git compacts long before).
const MAX_TABLES: usize = 100_000;

/// How often a snapshot is retried when a listed table vanished under it.
const OPEN_ATTEMPTS: u32 = 8;

/// How a stack writes.
#[derive(Debug, Clone)]
pub struct StackOptions {
    /// How its tables are laid out.
    pub write: WriteOptions,
    /// Attempts of one update before [`ReftableError::TooManyConflicts`].
    pub max_attempts: u32,
    /// Whether each update is followed by a geometric compaction.
    pub auto_compact: bool,
    /// The geometric factor of compaction (git's is 2).
    pub factor: u64,
    /// How long a table stays after it is no longer listed, for readers that still use it
    /// ([`Stack::sweep`]); a writer abandons a table it published longer ago than half of it.
    pub grace: Duration,
}

impl Default for StackOptions {
    fn default() -> Self {
        StackOptions {
            write: WriteOptions::default(),
            max_attempts: 64,
            auto_compact: true,
            factor: 2,
            grace: Duration::from_secs(600),
        }
    }
}

/// What an update expects a ref to hold before it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Expected {
    /// Anything (a forced update).
    Any,
    /// That the ref does not exist.
    Absent,
    /// That the ref has this value (for objects, the peeled name is not compared).
    Value(RefValue),
}

/// A reflog entry to write with an update; its old and new ids are the ref's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reflog {
    /// The committer's name.
    pub name: String,
    /// The committer's email.
    pub email: String,
    /// Seconds since the epoch.
    pub time: u64,
    /// Minutes east of UTC.
    pub tz_offset: i16,
    /// The message.
    pub message: String,
}

/// One ref's change in an update.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RefUpdate {
    /// The ref.
    pub name: String,
    /// What it must hold before.
    pub expected: Expected,
    /// What it holds after ([`RefValue::Deletion`] deletes it).
    pub new: RefValue,
    /// A reflog entry to record, if any.
    pub reflog: Option<Reflog>,
}

/// An update that was applied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Applied {
    /// Its update index.
    pub update_index: u64,
    /// The table it added.
    pub table: String,
    /// Attempts it took (1: no race lost).
    pub attempts: u32,
}

/// A stack of tables under a root of a storage (a repository's `reftable/`).
#[derive(Debug)]
pub struct Stack {
    pub(crate) storage: Arc<dyn Storage>,
    pub(crate) opts: StackOptions,
    /// Tables already opened, by name (they never change); pruned to the last list read.
    cache: Mutex<HashMap<String, Arc<Table>>>,
    /// The last snapshot, by the [`LIST_WRITES`] count when it was taken: the request that
    /// took it answers its later questions from it ([`Stack::snapshot`]).
    last: PerRequest<u64, Snapshot>,
}

/// Lists this process has written, by list (`Storage::describe` of `tables.list`; any
/// stack instance on it): a snapshot taken before one is not reused, so a request that
/// pushed and then reads its refs sees its own update. One counter per repository written
/// by this process, a few bytes each.
static LIST_WRITES: std::sync::LazyLock<Mutex<HashMap<String, u64>>> =
    std::sync::LazyLock::new(Default::default);

/// How many times this process wrote the list `list`.
fn list_writes(list: &str) -> u64 {
    let writes = LIST_WRITES.lock().unwrap_or_else(|e| e.into_inner());
    writes.get(list).copied().unwrap_or(0)
}

/// Notes a write of the list `list` by this process.
fn wrote_list(list: String) {
    let mut writes = LIST_WRITES.lock().unwrap_or_else(|e| e.into_inner());
    *writes.entry(list).or_default() += 1;
}

/// A consistent view of the refs: one `tables.list` and the tables it named when read.
///
/// Meant to be short-lived (a request): tables leave storage only a grace period after they
/// left the list (see [`Stack::sweep`]), so a snapshot older than that may find one gone.
#[derive(Debug, Clone)]
pub struct Snapshot {
    version: Option<Version>,
    names: Vec<String>,
    tables: Vec<Arc<Table>>,
}

impl Stack {
    /// The stack under `storage`'s root, with default options.
    pub fn new(storage: Arc<dyn Storage>) -> Stack {
        Stack::with_options(storage, StackOptions::default())
    }

    /// The stack under `storage`'s root.
    pub fn with_options(storage: Arc<dyn Storage>, opts: StackOptions) -> Stack {
        Stack {
            storage,
            opts,
            cache: Mutex::new(HashMap::new()),
            last: PerRequest::new(),
        }
    }

    /// The options it was made with.
    pub fn options(&self) -> &StackOptions {
        &self.opts
    }

    /// Reads `tables.list` and opens the tables it names. A listed table that is missing
    /// means the list changed in between (a compaction): the list is read again.
    ///
    /// Within one request (a `packd_storage::RequestReads` scope: a fetch asks for HEAD, the refs it
    /// lists and the wants it checks, each a question of its own) the snapshot is read once
    /// and reused, unless this process wrote its list since: each read of the list is a round
    /// trip in a bucket, and one request then sees one consistent set of refs. Outside a
    /// request scope the list is read every time.
    pub fn snapshot(&self) -> Result<Snapshot, ReftableError> {
        let writes = list_writes(&self.storage.describe(TABLES_LIST));
        if let Some(snap) = self.last.get(&writes) {
            return Ok(snap);
        }
        let snap = self.read_snapshot()?;
        self.last.put(writes, snap.clone());
        Ok(snap)
    }

    /// [`Stack::snapshot`] read from the store.
    pub(crate) fn read_snapshot(&self) -> Result<Snapshot, ReftableError> {
        let mut last = None;
        for _ in 0..OPEN_ATTEMPTS {
            let (names, version) = read_list(&*self.storage)?;
            match self.open_tables(&names) {
                Ok(tables) => {
                    return Ok(Snapshot {
                        version,
                        names,
                        tables,
                    })
                }
                Err(ReftableError::Storage(e)) if e.is_not_found() => last = Some(e),
                Err(e) => return Err(e),
            }
        }
        Err(last.expect("a failed attempt").into())
    }

    /// The tables named `names`, from the cache or opened.
    fn open_tables(&self, names: &[String]) -> Result<Vec<Arc<Table>>, ReftableError> {
        let mut cache = self.cache.lock().unwrap_or_else(|e| e.into_inner());
        let mut tables = Vec::with_capacity(names.len());
        for name in names {
            let table = match cache.get(name) {
                Some(t) => t.clone(),
                None => Arc::new(Table::open(self.storage.open(name)?)?),
            };
            tables.push(table);
        }
        cache.clear();
        cache.extend(names.iter().cloned().zip(tables.iter().cloned()));
        Ok(tables)
    }

    /// Applies `updates` atomically: all of them, or (when a ref's value is not what was
    /// expected) none, failing with [`ReftableError::OldValueMismatch`] naming the ref.
    /// Races lost to other writers are retried up to [`StackOptions::max_attempts`] times.
    pub fn apply(&self, updates: &[RefUpdate]) -> Result<Applied, ReftableError> {
        check_updates(updates)?;
        let list = self.storage.describe(TABLES_LIST);
        for attempt in 1..=self.opts.max_attempts {
            // Read afresh on every attempt: a request's reused snapshot is what lost the race.
            let snap = self.read_snapshot()?;
            let update_index = snap.max_update_index() + 1;
            let mut refs = Vec::with_capacity(updates.len());
            let mut logs = Vec::new();
            for u in updates {
                let current = snap.read_ref(&u.name)?.map(|r| r.value);
                check_expected(u, current.as_ref())?;
                refs.push(RefRecord {
                    name: u.name.clone(),
                    update_index,
                    value: u.new.clone(),
                });
                if let Some(l) = &u.reflog {
                    logs.push(LogRecord {
                        ref_name: u.name.clone(),
                        update_index,
                        update: Some(LogUpdate {
                            old_id: *current
                                .as_ref()
                                .and_then(RefValue::object)
                                .unwrap_or(&ZERO_ID),
                            new_id: *u.new.object().unwrap_or(&ZERO_ID),
                            name: l.name.clone(),
                            email: l.email.clone(),
                            time: l.time,
                            tz_offset: l.tz_offset,
                            message: l.message.clone(),
                        }),
                    });
                }
            }
            let bytes = write_table(&self.opts.write, update_index, update_index, &refs, &logs)?;
            let published = Instant::now();
            let table = self.publish(update_index, update_index, &bytes)?;
            let mut names = snap.names.clone();
            names.push(table.clone());
            if self.swap_list(snap.version(), &names, &table, published)? {
                tracing::debug!(table, update_index, attempt, "refs updated");
                if self.opts.auto_compact {
                    if let Err(e) = self.compact() {
                        tracing::warn!("{list}: compaction after an update failed: {e}");
                    }
                }
                return Ok(Applied {
                    update_index,
                    table,
                    attempts: attempt,
                });
            }
            self.storage.delete(&table)?;
            backoff(attempt);
        }
        Err(ReftableError::TooManyConflicts {
            list,
            attempts: self.opts.max_attempts,
        })
    }

    /// Replaces the list at version `expected` by `names`, which name `table` (published
    /// at `published`); `false` when another writer changed the list first. The caller then
    /// deletes the table if it gives up on it: no list ever named it, so no reader can be
    /// using it. On another error the table is left (whether the list names it is unknown);
    /// the sweep deletes it if it is not.
    pub(crate) fn swap_list(
        &self,
        expected: Option<&Version>,
        names: &[String],
        table: &str,
        published: Instant,
    ) -> Result<bool, ReftableError> {
        let mut bytes = Vec::new();
        for n in names {
            bytes.extend_from_slice(n.as_bytes());
            bytes.push(b'\n');
        }
        if published.elapsed() > self.opts.grace / 2 {
            // Too late: a sweep may already count the table as garbage.
            tracing::warn!(
                table,
                "published too long ago to be listed; writing it again"
            );
            return Ok(false);
        }
        match self.storage.replace(TABLES_LIST, expected, &bytes) {
            Ok(_) => {
                wrote_list(self.storage.describe(TABLES_LIST));
                Ok(true)
            }
            Err(e) => {
                // A conflict can also be the answer to a retried request whose first try
                // succeeded: only a list that does not name the table proves it lost.
                let (now, _) = read_list(&*self.storage)?;
                if now.iter().any(|n| n == table) {
                    wrote_list(self.storage.describe(TABLES_LIST));
                    return Ok(true);
                }
                match e {
                    StorageError::Conflict { .. } | StorageError::Locked { .. } => {
                        tracing::debug!(table, "tables.list changed; retrying");
                        Ok(false)
                    }
                    e => Err(e.into()),
                }
            }
        }
    }

    /// Publishes a table of `bytes` covering `min..=max` under a fresh name; the name.
    pub(crate) fn publish(
        &self,
        min: u64,
        max: u64,
        bytes: &[u8],
    ) -> Result<String, ReftableError> {
        loop {
            let name = table_name(min, max);
            let mut blob = self.storage.create(&name)?;
            blob.write_all(bytes).map_err(|source| StorageError::Io {
                name: self.storage.describe(&name),
                source,
            })?;
            match blob.publish() {
                Ok(()) => return Ok(name),
                // Two writers drew the same random part: draw again.
                Err(StorageError::AlreadyExists { .. }) => continue,
                Err(e) => return Err(e.into()),
            }
        }
    }
}

impl Snapshot {
    /// The version of `tables.list` read (`None`: there was none, the stack is empty).
    pub fn version(&self) -> Option<&Version> {
        self.version.as_ref()
    }

    /// The tables' names, oldest first.
    pub fn names(&self) -> &[String] {
        &self.names
    }

    /// The tables, oldest first.
    pub fn tables(&self) -> &[Arc<Table>] {
        &self.tables
    }

    /// The newest table's max update index (0 for an empty stack).
    pub fn max_update_index(&self) -> u64 {
        self.tables.last().map_or(0, |t| t.max_update_index())
    }

    /// The ref `name`: the newest table's record of it, `None` if that is a tombstone or no
    /// table has one.
    pub fn read_ref(&self, name: &str) -> Result<Option<RefRecord>, ReftableError> {
        for t in self.tables.iter().rev() {
            if let Some(r) = t.read_ref(name)? {
                return Ok(Some(r).filter(|r| r.value != RefValue::Deletion));
            }
        }
        Ok(None)
    }

    /// All refs in name order, merged over the tables (tombstones hidden).
    pub fn refs(&self) -> impl Iterator<Item = Result<RefRecord, ReftableError>> + '_ {
        Merge::new(
            self.tables.iter().map(|t| t.refs()).collect(),
            |r: &RefRecord| r.name.as_bytes().to_vec(),
        )
        .filter(|r| {
            !matches!(
                r,
                Ok(RefRecord {
                    value: RefValue::Deletion,
                    ..
                })
            )
        })
    }

    /// The reflog of `name`, newest first, merged over the tables (deleted entries hidden).
    pub fn logs_of(&self, name: &str) -> Result<Vec<LogRecord>, ReftableError> {
        let iters = self
            .tables
            .iter()
            .map(|t| t.logs_of(name))
            .collect::<Result<Vec<_>, _>>()?;
        Merge::new(iters, LogRecord::key)
            .filter(|l| !matches!(l, Ok(LogRecord { update: None, .. })))
            .collect()
    }
}

/// Reads and checks `tables.list`: the names and the version (`None`: absent).
pub(crate) fn read_list(
    storage: &dyn Storage,
) -> Result<(Vec<String>, Option<Version>), ReftableError> {
    let Some((bytes, version)) = storage.read_versioned(TABLES_LIST)? else {
        return Ok((Vec::new(), None));
    };
    let mut names = Vec::new();
    let mut at = 0;
    for line in bytes.split_inclusive(|&b| b == b'\n') {
        let name = line.strip_suffix(b"\n").unwrap_or(line);
        if name.is_empty() && at + line.len() == bytes.len() {
            break;
        }
        match std::str::from_utf8(name) {
            Ok(n) if is_table_name(n) && names.len() < MAX_TABLES => names.push(n.to_string()),
            _ => {
                return Err(ReftableError::Corrupt {
                    table: storage.describe(TABLES_LIST),
                    offset: at as u64,
                    what: format!(
                        "line {:?} is not a table's name",
                        String::from_utf8_lossy(name)
                    ),
                })
            }
        }
        at += line.len();
    }
    Ok((names, Some(version)))
}

/// Whether `name` is a table's name (one component, `.ref` or `.log`).
pub(crate) fn is_table_name(name: &str) -> bool {
    (name.ends_with(".ref") || name.ends_with(".log"))
        && name.len() <= 255
        && !name.starts_with('.')
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'.')
}

/// A fresh table name covering `min..=max`, as git makes them.
pub(crate) fn table_name(min: u64, max: u64) -> String {
    format!("0x{min:012x}-0x{max:012x}-{:08x}.ref", random() as u32)
}

/// 64 random bits (from the standard library's per-process random hash keys and a counter).
fn random() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(COUNTER.fetch_add(1, Ordering::Relaxed));
    if let Ok(t) = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH) {
        h.write_u128(t.as_nanos());
    }
    h.finish()
}

/// Waits a random while growing with the attempts (up to about 64 ms), so that writers who
/// collided do not collide again.
pub(crate) fn backoff(attempt: u32) {
    let cap = 1u64 << attempt.min(6);
    std::thread::sleep(Duration::from_micros(random() % (cap * 1000) + 100));
}

/// Rejects an update that names a ref twice or a ref name that cannot be written.
fn check_updates(updates: &[RefUpdate]) -> Result<(), ReftableError> {
    if updates.is_empty() {
        return Err(ReftableError::Invalid("an update of no refs".into()));
    }
    let mut seen = std::collections::HashSet::new();
    for u in updates {
        if u.name.is_empty() || u.name.as_bytes().contains(&0) {
            return Err(ReftableError::Invalid(format!("bad ref name {:?}", u.name)));
        }
        if !seen.insert(&u.name) {
            return Err(ReftableError::Invalid(format!(
                "{} is updated twice",
                u.name
            )));
        }
    }
    Ok(())
}

/// Checks that the ref of `u` holds what `u` expects (`current`: its value, `None` absent).
fn check_expected(u: &RefUpdate, current: Option<&RefValue>) -> Result<(), ReftableError> {
    let ok = match (&u.expected, current) {
        (Expected::Any, _) => true,
        (Expected::Absent, c) => c.is_none(),
        (Expected::Value(RefValue::Deletion), c) => c.is_none(),
        (Expected::Value(_), None) => false,
        (Expected::Value(RefValue::Symref(a)), Some(RefValue::Symref(b))) => a == b,
        (Expected::Value(e), Some(c)) => e.object().is_some() && e.object() == c.object(),
    };
    if ok {
        return Ok(());
    }
    Err(ReftableError::OldValueMismatch {
        refname: u.name.clone(),
        expected: match &u.expected {
            Expected::Any => "anything".into(),
            Expected::Absent => "no ref".into(),
            Expected::Value(v) => describe(Some(v)),
        },
        actual: describe(current),
    })
}

/// A value for messages.
fn describe(v: Option<&RefValue>) -> String {
    match v {
        None | Some(RefValue::Deletion) => "no ref".into(),
        Some(RefValue::Symref(t)) => format!("ref: {t}"),
        Some(v) => v.object().map(hex).unwrap_or_default(),
    }
}

/// Lower-case hex of `bytes`.
pub fn hex(bytes: &[u8; 20]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
