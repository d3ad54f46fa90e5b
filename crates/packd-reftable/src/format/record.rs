//! The records of ref, index and log blocks, and their values.
//!
//! ```text
//! every record      varint(prefix_length) varint(suffix_length << 3 | value_type) suffix
//!                   (key = previous key[..prefix_length] + suffix)
//! ref record        ... varint(update_index - min_update_index) value
//!                   value_type 0: deletion (no value)   1: object name (20 bytes)
//!                              2: object name, peeled object name (40 bytes)
//!                              3: symbolic ref: varint(target_len) target
//! index record      ... (value_type 0) varint(block_position)
//! log record        key = ref_name '\0' uint64(0xffffffffffffffff - update_index)
//!                   log_type 0: deletion (no data)
//!                   log_type 1: old_id new_id varint(name_len) name varint(email_len) email
//!                               varint(time_seconds) sint16(tz_offset_minutes)
//!                               varint(message_len) message
//! ```

use super::{be64, put_varint, Cursor, HASH_LEN};
use crate::ReftableError;

/// A SHA-1 object name.
pub type ObjectId = [u8; HASH_LEN];

/// The all-zero object name: "none" in a log record's old or new id.
pub const ZERO_ID: ObjectId = [0; HASH_LEN];

/// What a ref record says about a ref.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RefValue {
    /// A tombstone: the ref is deleted, hiding it in older tables of a stack (type 0).
    Deletion,
    /// The ref points at an object (type 1).
    Object(ObjectId),
    /// The ref points at an annotated tag, peeling to `peeled` (type 2).
    Peeled {
        /// The tag object.
        target: ObjectId,
        /// The object the tag (chain) finally points at.
        peeled: ObjectId,
    },
    /// A symbolic ref (`HEAD` -> `refs/heads/main`; type 3).
    Symref(String),
}

impl RefValue {
    /// The value type written in the record.
    pub fn value_type(&self) -> u8 {
        match self {
            RefValue::Deletion => 0,
            RefValue::Object(_) => 1,
            RefValue::Peeled { .. } => 2,
            RefValue::Symref(_) => 3,
        }
    }

    /// The object the ref points at directly, if it is not symbolic or deleted.
    pub fn object(&self) -> Option<&ObjectId> {
        match self {
            RefValue::Object(id) | RefValue::Peeled { target: id, .. } => Some(id),
            RefValue::Deletion | RefValue::Symref(_) => None,
        }
    }

    /// The bytes of the value after the record's update index.
    pub(crate) fn encode(&self, out: &mut Vec<u8>) {
        match self {
            RefValue::Deletion => {}
            RefValue::Object(id) => out.extend_from_slice(id),
            RefValue::Peeled { target, peeled } => {
                out.extend_from_slice(target);
                out.extend_from_slice(peeled);
            }
            RefValue::Symref(target) => {
                put_varint(out, target.len() as u64);
                out.extend_from_slice(target.as_bytes());
            }
        }
    }

    /// Parses a value of `value_type` at the cursor.
    pub(crate) fn decode(c: &mut Cursor, value_type: u8) -> Result<RefValue, ReftableError> {
        Ok(match value_type {
            0 => RefValue::Deletion,
            1 => RefValue::Object(id(c, "object name")?),
            2 => RefValue::Peeled {
                target: id(c, "object name")?,
                peeled: id(c, "peeled object name")?,
            },
            3 => {
                let n = c.len("symbolic ref target length")?;
                RefValue::Symref(text(c, n, "symbolic ref target")?)
            }
            t => return Err(c.error(format!("ref record of reserved value type {t}"))),
        })
    }
}

/// One ref record: a ref's name, the update index that last set it, and its value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RefRecord {
    /// The full name (`refs/heads/main`, `HEAD`).
    pub name: String,
    /// The update index (transaction) that wrote this value.
    pub update_index: u64,
    /// The value, or a tombstone.
    pub value: RefValue,
}

/// The data of a log record that is not a deletion: one line of a reflog.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogUpdate {
    /// The ref's value before the update (zeros: it did not exist).
    pub old_id: ObjectId,
    /// The ref's value after the update (zeros: it was deleted).
    pub new_id: ObjectId,
    /// The committer's name.
    pub name: String,
    /// The committer's email, without `<>`.
    pub email: String,
    /// Seconds since the epoch.
    pub time: u64,
    /// Minutes east of UTC (`-0800` is -480).
    pub tz_offset: i16,
    /// The reflog message (may be empty).
    pub message: String,
}

/// One log record: a reflog entry of a ref at an update index, or its deletion.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogRecord {
    /// The ref the entry belongs to.
    pub ref_name: String,
    /// The update index (transaction) of the entry.
    pub update_index: u64,
    /// The entry, or `None` for a deletion of the entry (log type 0).
    pub update: Option<LogUpdate>,
}

impl LogRecord {
    /// The record's key: `ref_name '\0' reverse_int64(update_index)`, so that newer
    /// entries of a ref sort first.
    pub fn key(&self) -> Vec<u8> {
        log_key(&self.ref_name, self.update_index)
    }

    /// The log type and the bytes after the key.
    pub(crate) fn encode(&self, out: &mut Vec<u8>) -> u8 {
        let Some(u) = &self.update else { return 0 };
        out.extend_from_slice(&u.old_id);
        out.extend_from_slice(&u.new_id);
        for s in [&u.name, &u.email] {
            put_varint(out, s.len() as u64);
            out.extend_from_slice(s.as_bytes());
        }
        put_varint(out, u.time);
        out.extend_from_slice(&u.tz_offset.to_be_bytes());
        put_varint(out, u.message.len() as u64);
        out.extend_from_slice(u.message.as_bytes());
        1
    }

    /// Parses the record of `key` and `log_type` whose data starts at the cursor.
    pub(crate) fn decode(
        c: &mut Cursor,
        key: &[u8],
        log_type: u8,
    ) -> Result<LogRecord, ReftableError> {
        let Some((ref_name, update_index)) = split_log_key(key) else {
            return Err(c.error("log record key is not ref_name '\\0' update_index"));
        };
        let ref_name = std::str::from_utf8(ref_name)
            .map_err(|_| c.error("log record's ref name is not UTF-8"))?
            .to_string();
        let update = match log_type {
            0 => None,
            1 => {
                let old_id = id(c, "old object name")?;
                let new_id = id(c, "new object name")?;
                let n = c.len("committer name length")?;
                let name = text(c, n, "committer name")?;
                let n = c.len("committer email length")?;
                let email = text(c, n, "committer email")?;
                let time = c.varint("time")?;
                let tz = c.take(2, "time zone offset")?;
                let tz_offset = i16::from_be_bytes([tz[0], tz[1]]);
                let n = c.len("message length")?;
                let message = text(c, n, "message")?;
                Some(LogUpdate {
                    old_id,
                    new_id,
                    name,
                    email,
                    time,
                    tz_offset,
                    message,
                })
            }
            t => return Err(c.error(format!("log record of unknown log type {t}"))),
        };
        Ok(LogRecord {
            ref_name,
            update_index,
            update,
        })
    }
}

/// The log key of `ref_name` at `update_index`.
pub fn log_key(ref_name: &str, update_index: u64) -> Vec<u8> {
    let mut k = Vec::with_capacity(ref_name.len() + 9);
    k.extend_from_slice(ref_name.as_bytes());
    k.push(0);
    k.extend_from_slice(&(u64::MAX - update_index).to_be_bytes());
    k
}

/// The ref name and update index of a log key, if it is one.
pub(crate) fn split_log_key(key: &[u8]) -> Option<(&[u8], u64)> {
    if key.len() < 9 || key[key.len() - 9] != 0 {
        return None;
    }
    let (name, rest) = key.split_at(key.len() - 9);
    Some((name, u64::MAX - be64(&rest[1..])))
}

/// An object name at the cursor.
fn id(c: &mut Cursor, what: &str) -> Result<ObjectId, ReftableError> {
    let mut id = ZERO_ID;
    id.copy_from_slice(c.take(HASH_LEN, what)?);
    Ok(id)
}

/// `n` bytes of UTF-8 text at the cursor.
fn text(c: &mut Cursor, n: usize, what: &str) -> Result<String, ReftableError> {
    let at = c.pos;
    let bytes = c.take(n, what)?;
    match std::str::from_utf8(bytes) {
        Ok(s) => Ok(s.to_string()),
        Err(_) => {
            c.pos = at;
            Err(c.error(format!("{what} is not UTF-8")))
        }
    }
}
