//! A cruft pack's `.mtimes` file: when each of its objects was last written, so that unreachable
//! objects keep their age when they move from loose files or old packs into one cruft pack
//! (git's `pack-mtimes.c`, Documentation/technical/cruft-packs.txt).
//!
//! ```text
//! "MTME"                 signature
//! version   u32 BE       = 1
//! hash id   u32 BE       = 1 (SHA-1), 2 (SHA-256)
//! N x u32 BE             mtime (seconds since the epoch) of the object at index position
//!                        0, 1, .. N-1 (the .idx's order: sorted by id)
//! checksum[20]           the pack's checksum (its trailer; the same as in its .idx)
//! checksum[20]           SHA-1 of everything above
//! ```
//!
//! git reads it for a pack that has one (`pack-<checksum>.mtimes` beside the `.pack`) and
//! treats that pack as a cruft pack: its objects are unreachable, each as old as its entry.

use sha1::{Digest, Sha1};

const SIGNATURE: &[u8; 4] = b"MTME";
const HEADER: usize = 12;
const HASH: usize = 20;
/// git's hash id of SHA-1 (`GIT_HASH_SHA1`).
const SHA1_ID: u32 = 1;

/// Why an `.mtimes` file was rejected: which file, at which offset, and what was wrong.
#[derive(Debug, thiserror::Error)]
#[error("{file}: offset {offset}: {what}")]
pub struct MtimesError {
    /// The file's name.
    pub file: String,
    /// Where in it the fault is.
    pub offset: u64,
    /// What is wrong.
    pub what: String,
}

/// The bytes of the `.mtimes` file of a pack whose checksum is `pack_checksum` and whose object
/// at index position `i` was last written at `mtimes[i]` (seconds since the epoch).
pub fn encode(mtimes: &[u32], pack_checksum: &[u8; 20]) -> Vec<u8> {
    let mut out = Vec::with_capacity(HEADER + 4 * mtimes.len() + 2 * HASH);
    out.extend_from_slice(SIGNATURE);
    out.extend_from_slice(&1u32.to_be_bytes());
    out.extend_from_slice(&SHA1_ID.to_be_bytes());
    for t in mtimes {
        out.extend_from_slice(&t.to_be_bytes());
    }
    out.extend_from_slice(pack_checksum);
    let digest = Sha1::digest(&out);
    out.extend_from_slice(&digest);
    out
}

/// A parsed, checked `.mtimes` file.
#[derive(Debug, Clone)]
pub struct Mtimes {
    times: Vec<u32>,
    pack_checksum: [u8; 20],
}

impl Mtimes {
    /// Parses the `.mtimes` file `file` (named in errors) of a pack of `objects` objects:
    /// signature, version, hash, size for that many objects, and its own checksum. The pack's
    /// checksum is kept for [`Mtimes::check_pack`].
    pub fn parse(file: &str, bytes: &[u8], objects: u32) -> Result<Mtimes, MtimesError> {
        let fail = |offset: usize, what: String| MtimesError {
            file: file.to_string(),
            offset: offset as u64,
            what,
        };
        if bytes.len() < HEADER + 2 * HASH {
            return Err(fail(
                0,
                format!("{} bytes: too small for an .mtimes file", bytes.len()),
            ));
        }
        if &bytes[..4] != SIGNATURE {
            return Err(fail(0, "not an .mtimes file (no MTME signature)".into()));
        }
        let word = |at: usize| u32::from_be_bytes(bytes[at..at + 4].try_into().unwrap());
        if word(4) != 1 {
            return Err(fail(4, format!("unsupported version {}", word(4))));
        }
        if word(8) != SHA1_ID {
            return Err(fail(
                8,
                format!("hash id {} where this repository uses SHA-1 (1)", word(8)),
            ));
        }
        let expected = HEADER as u64 + 4 * u64::from(objects) + 2 * HASH as u64;
        if bytes.len() as u64 != expected {
            return Err(fail(
                bytes.len().min(expected as usize),
                format!(
                    "{} bytes where a pack of {objects} objects needs {expected}",
                    bytes.len()
                ),
            ));
        }
        let body = bytes.len() - HASH;
        if Sha1::digest(&bytes[..body])[..] != bytes[body..] {
            return Err(fail(body, "checksum does not match the content".into()));
        }
        let times = bytes[HEADER..body - HASH]
            .chunks_exact(4)
            .map(|c| u32::from_be_bytes(c.try_into().unwrap()))
            .collect();
        let pack_checksum = bytes[body - HASH..body].try_into().unwrap();
        Ok(Mtimes {
            times,
            pack_checksum,
        })
    }

    /// Fails unless the file was written for the pack whose checksum is `pack_checksum`.
    pub fn check_pack(&self, file: &str, pack_checksum: &[u8; 20]) -> Result<(), MtimesError> {
        if &self.pack_checksum != pack_checksum {
            return Err(MtimesError {
                file: file.to_string(),
                offset: (HEADER + 4 * self.times.len()) as u64,
                what: "written for another pack (its pack checksum differs)".into(),
            });
        }
        Ok(())
    }

    /// The mtime of the object at index position `position`, if there is one.
    pub fn get(&self, position: u32) -> Option<u32> {
        self.times.get(position as usize).copied()
    }

    /// The number of entries.
    pub fn len(&self) -> usize {
        self.times.len()
    }

    /// True when the file has no entries.
    pub fn is_empty(&self) -> bool {
        self.times.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encoded_files_parse_back_and_damage_is_named() {
        let checksum = [7u8; 20];
        let bytes = encode(&[1, 2, 0xffff_fff0], &checksum);
        assert_eq!(bytes.len(), 12 + 12 + 40);
        let m = Mtimes::parse("x.mtimes", &bytes, 3).unwrap();
        assert_eq!(
            (m.get(0), m.get(2), m.get(3)),
            (Some(1), Some(0xffff_fff0), None)
        );
        m.check_pack("x.mtimes", &checksum).unwrap();
        assert!(m.check_pack("x.mtimes", &[8u8; 20]).is_err());

        let e = Mtimes::parse("x.mtimes", &bytes, 4).unwrap_err();
        assert!(e.to_string().starts_with("x.mtimes: offset 64:"), "{e}");
        let mut flipped = bytes.clone();
        flipped[13] ^= 1;
        let e = Mtimes::parse("x.mtimes", &flipped, 3).unwrap_err();
        assert!(e.to_string().contains("checksum"), "{e}");
        let mut version = bytes.clone();
        version[7] = 2;
        assert!(Mtimes::parse("x.mtimes", &version, 3).is_err());
        assert!(Mtimes::parse("x.mtimes", &bytes[..30], 3).is_err());
    }
}
