//! Object ids and the hash function that makes them.
//!
//! packd reads SHA-1 repositories. The hash kind is still explicit ([`HashKind`]) wherever a format
//! depends on it (index entry widths, ref-delta base ids, trailers), so that SHA-256 repositories
//! (`extensions.objectFormat=sha256`) can follow by widening [`ObjectId`]; until then they are
//! refused with a clear error when the repository is opened.

use std::fmt;

/// The hash function a repository names its objects with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HashKind {
    /// SHA-1, 20-byte ids: every repository git creates by default.
    Sha1,
}

impl HashKind {
    /// The length of an id in bytes.
    pub const fn id_len(self) -> usize {
        match self {
            HashKind::Sha1 => 20,
        }
    }

    /// The length of an id in hexadecimal characters.
    pub const fn hex_len(self) -> usize {
        self.id_len() * 2
    }

    /// The name git uses in `extensions.objectFormat`.
    pub const fn name(self) -> &'static str {
        match self {
            HashKind::Sha1 => "sha1",
        }
    }
}

/// A binary object id.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ObjectId([u8; 20]);

/// The lowercase hexadecimal digits, by value.
const HEX_DIGITS: &[u8; 16] = b"0123456789abcdef";

/// Bytes spelled in lowercase hexadecimal: how git names a pack or bitmap by its checksum, and
/// how errors show a checksum that does not match.
pub fn hex(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len() * 2);
    for &b in bytes {
        out.push(HEX_DIGITS[(b >> 4) as usize] as char);
        out.push(HEX_DIGITS[(b & 15) as usize] as char);
    }
    out
}

impl ObjectId {
    /// The id of no object: all zeros, as git prints for a missing side of a ref update.
    pub const NULL: ObjectId = ObjectId([0; 20]);

    /// An id from its raw bytes. Returns `None` when `bytes` has the wrong length.
    pub fn from_bytes(bytes: &[u8]) -> Option<ObjectId> {
        Some(ObjectId(bytes.try_into().ok()?))
    }

    /// An id from its full hexadecimal spelling.
    pub fn from_hex(hex: &str) -> Option<ObjectId> {
        ObjectId::from_hex_bytes(hex.as_bytes())
    }

    /// [`ObjectId::from_hex`] of bytes not known to be text (a line of a file being parsed).
    pub fn from_hex_bytes(hex: &[u8]) -> Option<ObjectId> {
        if hex.len() != 40 {
            return None;
        }
        let mut out = [0u8; 20];
        // Any digit that is not one leaves its high bit set in `bad`: one test at the end
        // instead of one per digit.
        let mut bad = 0u8;
        for (o, pair) in out.iter_mut().zip(hex.chunks_exact(2)) {
            let (hi, lo) = (HEX_VALUES[pair[0] as usize], HEX_VALUES[pair[1] as usize]);
            bad |= hi | lo;
            *o = (hi << 4) | (lo & 0x0f);
        }
        (bad & 0x80 == 0).then_some(ObjectId(out))
    }

    /// The raw bytes.
    pub fn as_bytes(&self) -> &[u8; 20] {
        &self.0
    }

    /// The hash kind of this id.
    pub fn kind(&self) -> HashKind {
        HashKind::Sha1
    }

    /// Writes the hexadecimal spelling into `out` (40 bytes) without allocating.
    pub fn write_hex(&self, out: &mut [u8; 40]) {
        for (i, b) in self.0.iter().enumerate() {
            out[2 * i] = HEX_DIGITS[(b >> 4) as usize];
            out[2 * i + 1] = HEX_DIGITS[(b & 15) as usize];
        }
    }

    /// Appends the hexadecimal spelling to `out` (a protocol line being put together).
    pub fn extend_hex(&self, out: &mut Vec<u8>) {
        let mut hex = [0u8; 40];
        self.write_hex(&mut hex);
        out.extend_from_slice(&hex);
    }

    /// The hexadecimal spelling.
    pub fn to_hex(&self) -> String {
        let mut buf = [0u8; 40];
        self.write_hex(&mut buf);
        String::from_utf8(buf.to_vec()).expect("hex digits are ASCII")
    }

    /// The id of an object with this kind and content, as git computes it: the hash of
    /// `"<kind> <len>\0"` followed by the content. Fails when the content carries a SHA-1
    /// collision attack (detected as git does, with sha1dc).
    pub fn compute(kind: crate::ObjectKind, data: &[u8]) -> Result<ObjectId, CollisionDetected> {
        let mut hasher = sha1dc::Hasher::new();
        let mut header = [0u8; 32];
        let header_len = {
            use std::io::Write;
            let mut cursor = std::io::Cursor::new(&mut header[..]);
            write!(cursor, "{} {}\0", kind.name(), data.len()).expect("fits in 32 bytes");
            cursor.position() as usize
        };
        hasher.update(&header[..header_len]);
        hasher.update(data);
        let digest = hasher.finalize().map_err(|_| CollisionDetected)?;
        Ok(ObjectId::from_bytes(digest.as_ref()).expect("sha1 digests are 20 bytes"))
    }
}

/// The content hashed to a SHA-1 collision attack: git refuses such objects and so does packd.
#[derive(Debug, Clone, Copy, thiserror::Error)]
#[error("the content carries a SHA-1 collision attack")]
pub struct CollisionDetected;

/// The value of each byte as a hexadecimal digit (upper or lower case), or 0x80 for a byte
/// that is not one.
const HEX_VALUES: [u8; 256] = {
    let mut table = [0x80u8; 256];
    let mut i = 0;
    while i < 256 {
        if let Some(v) = hex_value(i as u8) {
            table[i] = v;
        }
        i += 1;
    }
    table
};

/// The value of one hexadecimal digit, upper or lower case.
pub(crate) const fn hex_value(c: u8) -> Option<u8> {
    match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        b'A'..=b'F' => Some(c - b'A' + 10),
        _ => None,
    }
}

impl fmt::Display for ObjectId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut buf = [0u8; 40];
        self.write_hex(&mut buf);
        f.write_str(std::str::from_utf8(&buf).expect("hex digits are ASCII"))
    }
}

impl fmt::Debug for ObjectId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

/// An abbreviated id: the first `len` hex digits of an object id, as a user types it.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Prefix {
    bytes: [u8; 20],
    hex_len: usize,
}

impl Prefix {
    /// The shortest abbreviation git accepts.
    pub const MIN_HEX_LEN: usize = 4;

    /// Parses 4 to 40 hexadecimal digits.
    pub fn from_hex(hex: &str) -> Option<Prefix> {
        let h = hex.as_bytes();
        if h.len() < Self::MIN_HEX_LEN || h.len() > 40 {
            return None;
        }
        let mut bytes = [0u8; 20];
        for (i, &c) in h.iter().enumerate() {
            let v = hex_value(c)?;
            bytes[i / 2] |= if i % 2 == 0 { v << 4 } else { v };
        }
        Some(Prefix {
            bytes,
            hex_len: h.len(),
        })
    }

    /// The lowest id that starts with this prefix.
    pub fn lowest(&self) -> ObjectId {
        ObjectId(self.bytes)
    }

    /// The first byte of every id with this prefix.
    pub fn first_byte(&self) -> u8 {
        self.bytes[0]
    }

    /// Whether `id` starts with this prefix.
    pub fn matches(&self, id: &ObjectId) -> bool {
        let full = self.hex_len / 2;
        if id.0[..full] != self.bytes[..full] {
            return false;
        }
        self.hex_len.is_multiple_of(2) || (id.0[full] & 0xf0) == self.bytes[full]
    }

    /// Whether this prefix is in fact a whole id.
    pub fn is_full(&self) -> bool {
        self.hex_len == 40
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ObjectKind;

    #[test]
    fn hex_spells_bytes_as_git_names_packs() {
        assert_eq!(hex(&[0x00, 0xab, 0x7f, 0x10]), "00ab7f10");
        assert_eq!(hex(&[]), "");
        let id = ObjectId::from_hex("e69de29bb2d1d6434b8b29ae775ad8c2e48c5391").unwrap();
        assert_eq!(hex(id.as_bytes()), id.to_hex());
    }

    #[test]
    fn hashes_like_git() {
        // `printf 'hello\n' | git hash-object --stdin`
        let id = ObjectId::compute(ObjectKind::Blob, b"hello\n").unwrap();
        assert_eq!(id.to_hex(), "ce013625030ba8dba906f756967f9e9ca394464a");
        assert_eq!(ObjectId::from_hex(&id.to_hex()), Some(id));
    }

    #[test]
    fn reads_hex_like_the_digit_by_digit_rule() {
        let id = ObjectId::from_hex("ce013625030ba8dba906f756967f9e9ca394464a").unwrap();
        assert_eq!(
            ObjectId::from_hex("CE013625030BA8DBA906F756967F9E9CA394464A"),
            Some(id),
            "upper case"
        );
        assert_eq!(id.to_hex(), "ce013625030ba8dba906f756967f9e9ca394464a");
        // Every byte in every place: accepted exactly when it is a hex digit.
        let good = *b"ce013625030ba8dba906f756967f9e9ca394464a";
        for at in [0, 1, 20, 39] {
            for b in 0..=255u8 {
                let mut hex = good;
                hex[at] = b;
                let expected = hex_value(b).is_some();
                assert_eq!(
                    ObjectId::from_hex_bytes(&hex).is_some(),
                    expected,
                    "{b:#x} at {at}"
                );
            }
        }
        assert_eq!(ObjectId::from_hex_bytes(&good[..39]), None, "too short");
        assert_eq!(
            ObjectId::from_hex("ce013625030ba8dba906f756967f9e9ca394464a0"),
            None
        );
    }

    #[test]
    fn prefixes_match_odd_and_even_lengths() {
        let id = ObjectId::from_hex("ce013625030ba8dba906f756967f9e9ca394464a").unwrap();
        assert!(Prefix::from_hex("ce01").unwrap().matches(&id));
        assert!(Prefix::from_hex("ce013").unwrap().matches(&id));
        assert!(!Prefix::from_hex("ce014").unwrap().matches(&id));
        assert!(Prefix::from_hex("ce0").is_none());
        assert!(Prefix::from_hex("ce0g").is_none());
    }
}
