//! Loose objects: one zlib-compressed file per object, `objects/xx/yyyy...`.
//!
//! ```text
//! zlib( "<kind> <decimal size>\0" <content> )
//! ```

use crate::hash::{hex_value, ObjectId, Prefix};
use crate::{zlib, Error, Object, ObjectHeader, ObjectKind, Result};
use bytes::Bytes;
use packd_storage::{Blob, Storage};
use std::sync::Arc;

/// The longest header git writes is `commit 18446744073709551615\0`; more is garbage.
const MAX_HEADER: usize = 32;

/// The loose objects of one objects directory.
#[derive(Debug, Clone)]
pub struct LooseStore {
    storage: Arc<dyn Storage>,
}

fn object_name(id: &ObjectId) -> String {
    let hex = id.to_hex();
    format!("{}/{}", &hex[..2], &hex[2..])
}

/// Parses `"<kind> <size>\0"` at the start of `bytes`: kind, size and header length.
fn parse_header(name: &str, bytes: &[u8]) -> Result<(ObjectKind, u64, usize)> {
    let bad = |what: &str| Error::corrupt(name, 0, format!("loose object header: {what}"));
    let nul = bytes
        .iter()
        .take(MAX_HEADER)
        .position(|&b| b == 0)
        .ok_or_else(|| bad("no NUL-terminated header"))?;
    let header = &bytes[..nul];
    let space = header
        .iter()
        .position(|&b| b == b' ')
        .ok_or_else(|| bad("no space after the kind"))?;
    let kind = ObjectKind::from_name(&header[..space]).ok_or_else(|| bad("unknown kind"))?;
    let digits = &header[space + 1..];
    if digits.is_empty() || (digits.len() > 1 && digits[0] == b'0') {
        return Err(bad("bad size"));
    }
    let mut size = 0u64;
    for &d in digits {
        if !d.is_ascii_digit() {
            return Err(bad("bad size"));
        }
        size = size
            .checked_mul(10)
            .and_then(|s| s.checked_add((d - b'0') as u64))
            .ok_or_else(|| bad("size overflows"))?;
    }
    Ok((kind, size, nul + 1))
}

impl LooseStore {
    /// The loose objects under `storage` (an objects directory).
    pub fn new(storage: Arc<dyn Storage>) -> LooseStore {
        LooseStore { storage }
    }

    fn open(&self, id: &ObjectId) -> Result<Option<Arc<dyn Blob>>> {
        match self.storage.open(&object_name(id)) {
            Ok(blob) => Ok(Some(blob)),
            Err(e) if e.is_not_found() => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    /// Whether the object is stored loose.
    pub fn contains(&self, id: &ObjectId) -> bool {
        self.storage.exists(&object_name(id))
    }

    /// The object's kind and size, inflating only its header.
    pub fn header(&self, id: &ObjectId) -> Result<Option<ObjectHeader>> {
        let Some(blob) = self.open(id)? else {
            return Ok(None);
        };
        let bytes = blob.read_all()?;
        let prefix = zlib::inflate_prefix(&bytes, MAX_HEADER)
            .map_err(|e| Error::corrupt(blob.name(), 0, format!("loose object: {e}")))?;
        let (kind, size, _) = parse_header(blob.name(), &prefix)?;
        Ok(Some(ObjectHeader { kind, size }))
    }

    /// The object's size on disk (its compressed file).
    pub fn disk_size(&self, id: &ObjectId) -> Result<Option<u64>> {
        Ok(self.open(id)?.map(|b| b.len()))
    }

    /// The whole object.
    pub fn read(&self, id: &ObjectId) -> Result<Option<Object>> {
        let Some(blob) = self.open(id)? else {
            return Ok(None);
        };
        let bytes = blob.read_all()?;
        let prefix = zlib::inflate_prefix(&bytes, MAX_HEADER)
            .map_err(|e| Error::corrupt(blob.name(), 0, format!("loose object: {e}")))?;
        let (kind, size, header_len) = parse_header(blob.name(), &prefix)?;
        let whole = zlib::inflate_exact(&bytes, header_len as u64 + size)
            .map_err(|e| Error::corrupt(blob.name(), 0, format!("loose object: {e}")))?;
        Ok(Some(Object {
            kind,
            data: Bytes::from(whole).slice(header_len..),
        }))
    }

    fn ids_in(
        &self,
        dir: &str,
        out: &mut Vec<ObjectId>,
        filter: impl Fn(&ObjectId) -> bool,
    ) -> Result<()> {
        for name in self.storage.list(dir)? {
            if name.len() == 38 {
                if let Some(id) = ObjectId::from_hex(&format!("{dir}{name}")) {
                    if filter(&id) {
                        out.push(id);
                    }
                }
            }
        }
        Ok(())
    }

    /// Loose ids starting with `prefix`, appended to `out` until it holds `limit`.
    pub fn find_prefix(
        &self,
        prefix: &Prefix,
        limit: usize,
        out: &mut Vec<ObjectId>,
    ) -> Result<()> {
        let dir = format!("{:02x}", prefix.first_byte());
        let mut found = Vec::new();
        self.ids_in(&dir, &mut found, |id| prefix.matches(id))?;
        found.sort();
        for id in found {
            if out.len() >= limit {
                break;
            }
            out.push(id);
        }
        Ok(())
    }

    /// Appends the ids of the loose objects whose first byte is `first` (one fan-out directory).
    pub fn ids_with_first_byte(&self, first: u8, out: &mut Vec<ObjectId>) -> Result<()> {
        self.ids_in(&format!("{first:02x}"), out, |_| true)
    }

    /// Which of the 256 fan-out directories (`objects/xx`) exist, from one listing of the
    /// objects directory: a loose object can only be in one that does. A repository packed by
    /// gc has few or none, so most lookups need no `stat` at all.
    pub fn fanout_dirs(&self) -> Result<[bool; 256]> {
        let mut present = [false; 256];
        for dir in self.storage.list("")? {
            if let Some(byte) = fanout_byte(&dir) {
                present[byte as usize] = true;
            }
        }
        Ok(present)
    }

    /// Appends the ids of every loose object.
    pub fn all_ids(&self, out: &mut Vec<ObjectId>) -> Result<()> {
        for dir in self.storage.list("")? {
            if fanout_byte(&dir).is_some() {
                self.ids_in(&dir, out, |_| true)?;
            }
        }
        Ok(())
    }
}

/// The first byte of the ids a fan-out directory named `name` holds (`"3f"`: 0x3f), or `None`
/// when the name is not two hex digits.
fn fanout_byte(name: &str) -> Option<u8> {
    match name.as_bytes() {
        [hi, lo] => Some(hex_value(*hi)? * 16 + hex_value(*lo)?),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_headers_strictly() {
        assert_eq!(
            parse_header("x", b"blob 12\0hello").unwrap(),
            (ObjectKind::Blob, 12, 8)
        );
        for bad in [
            &b"blob 012\0"[..],
            b"blob \0",
            b"blb 1\0",
            b"blob 1",
            b"blob 99999999999999999999\0",
            b"blob 1a\0",
        ] {
            assert!(
                parse_header("x", bad).is_err(),
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
    }
}
