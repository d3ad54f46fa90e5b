//! A pack's reverse index (`.rev`): the index positions of its objects in pack (offset) order.
//!
//! ```text
//! "RIDX"           magic
//! version  u32 BE  = 1
//! hash id  u32 BE  = 1 (SHA-1)
//! N x u32 BE       index position of the object at pack position 0, 1, .. N-1
//! checksum[20]     the pack's checksum (its trailer; the same as in its .idx)
//! checksum[20]     SHA-1 of everything above
//! ```
//!
//! The same layout serves a multi-pack-index (`multi-pack-index-<checksum>.rev`), with the
//! multi-pack-index's checksum in place of the pack's and positions in the multi-pack-index.
//!
//! A `.rev` saves sorting the index by offset, which a [`crate::bitmap::PackBitmap`] needs to
//! turn bits into objects. Callers that find no `.rev`, or one this module rejects, build the order
//! themselves (`Pack::positions_in_pack_order`). [`encode`] writes one.

use bytes::Bytes;
use packd_odb::pack::order::PackOrder as _;
use packd_storage::Blob;

/// Why a `.rev` file was rejected: the same kinds of failure as a `.bitmap`'s (unreadable,
/// damaged at an offset, written for another pack), so the same type.
pub type RevIndexError = crate::bitmap::BitmapError;

const HEADER: usize = 12;
const HASH: usize = 20;

/// A parsed, validated reverse index.
#[derive(Debug, Clone)]
pub struct RevIndex {
    bytes: Bytes,
    count: u32,
}

/// The bytes of the reverse index whose pack position `i` holds index position
/// `positions[i]`, for a pack whose checksum is `pack_checksum`: header, positions, pack checksum
/// and the SHA-1 of all that.
///
/// `positions` must be a permutation of `0..positions.len()` (as `Pack::positions_in_pack_order`
/// gives); [`RevIndex::from_bytes`] accepts the result.
pub fn encode(positions: &[u32], pack_checksum: &[u8]) -> Result<Vec<u8>, RevIndexError> {
    let mut out = Vec::with_capacity(HEADER + 4 * positions.len() + 2 * HASH);
    out.extend_from_slice(b"RIDX");
    out.extend_from_slice(&1u32.to_be_bytes());
    out.extend_from_slice(&1u32.to_be_bytes());
    for p in positions {
        out.extend_from_slice(&p.to_be_bytes());
    }
    out.extend_from_slice(pack_checksum);
    let digest = sha1dc::digest(&out).map_err(|_| RevIndexError::Corrupt {
        file: "(reverse index being written)".into(),
        offset: 0,
        what: "its content carries a SHA-1 collision attack".into(),
    })?;
    out.extend_from_slice(digest.as_ref());
    Ok(out)
}

impl RevIndex {
    /// Reads the `.rev` blob for a pack of `object_count` objects whose checksum is
    /// `pack_checksum`, checking what costs nothing: size, signature, version, hash and the
    /// recorded pack checksum.
    ///
    /// The file checksum and the permutation are not verified here: that is a pass over the
    /// whole file (1.3 ms for 305k objects, more than the rest of a bitmap query's start-up), and
    /// git does not do it either. A damaged permutation cannot make a lookup go out of bounds
    /// ([`RevIndex::index_position`] checks), only give a wrong answer; [`RevIndex::verify`]
    /// (run by `packd verify`-style checks) finds it.
    pub fn open(
        blob: &dyn Blob,
        pack_checksum: &[u8],
        object_count: u32,
    ) -> Result<RevIndex, RevIndexError> {
        let expected = HEADER as u64 + 4 * object_count as u64 + 2 * HASH as u64;
        if blob.len() != expected {
            return Err(RevIndexError::Corrupt {
                file: blob.name().to_string(),
                offset: 0,
                what: format!(
                    "is {} bytes, but a reverse index of {object_count} objects has {expected}",
                    blob.len()
                ),
            });
        }
        let bytes = blob.read_all()?;
        check_header(blob.name(), &bytes, pack_checksum, object_count)?;
        Ok(RevIndex {
            bytes,
            count: object_count,
        })
    }

    /// Checks the whole file: the file checksum and that the positions are a permutation.
    pub fn verify(&self, name: &str, pack_checksum: &[u8]) -> Result<(), RevIndexError> {
        RevIndex::from_bytes(name, self.bytes.clone(), pack_checksum, self.count).map(|_| ())
    }

    /// Reads and validates the whole `.rev` blob for a pack of `object_count` objects whose
    /// checksum is `pack_checksum`, like [`RevIndex::open`] followed by [`RevIndex::verify`].
    pub fn open_verified(
        blob: &dyn Blob,
        pack_checksum: &[u8],
        object_count: u32,
    ) -> Result<RevIndex, RevIndexError> {
        let expected = HEADER as u64 + 4 * object_count as u64 + 2 * HASH as u64;
        if blob.len() != expected {
            return Err(RevIndexError::Corrupt {
                file: blob.name().to_string(),
                offset: 0,
                what: format!(
                    "is {} bytes, but a reverse index of {object_count} objects has {expected}",
                    blob.len()
                ),
            });
        }
        RevIndex::from_bytes(blob.name(), blob.read_all()?, pack_checksum, object_count)
    }

    /// Validates `bytes` as the reverse index of a pack of `object_count` objects whose checksum
    /// is `pack_checksum`: size, magic, version, hash, pack checksum, file checksum, and that the
    /// positions are a permutation of `0..object_count`.
    pub fn from_bytes(
        name: &str,
        bytes: Bytes,
        pack_checksum: &[u8],
        object_count: u32,
    ) -> Result<RevIndex, RevIndexError> {
        let corrupt = |offset: usize, what: String| RevIndexError::Corrupt {
            file: name.to_string(),
            offset: offset as u64,
            what,
        };
        let n = object_count as usize;
        let expected = HEADER as u64 + 4 * object_count as u64 + 2 * HASH as u64;
        if bytes.len() as u64 != expected {
            return Err(corrupt(
                0,
                format!(
                    "is {} bytes, but a reverse index of {object_count} objects has {expected}",
                    bytes.len()
                ),
            ));
        }
        check_header(name, &bytes, pack_checksum, object_count)?;
        let be32 = |at: usize| u32::from_be_bytes(bytes[at..at + 4].try_into().expect("4 bytes"));
        let trailer = HEADER + 4 * n;
        let digest = sha1dc::digest(&bytes[..trailer + HASH])
            .map_err(|_| corrupt(0, "carries a SHA-1 collision attack".into()))?;
        if digest.as_ref() != &bytes[trailer + HASH..] {
            return Err(corrupt(
                trailer + HASH,
                "the file checksum does not match its content".into(),
            ));
        }
        let mut seen = vec![0u64; n.div_ceil(64)];
        for i in 0..n {
            let p = be32(HEADER + 4 * i) as usize;
            if p >= n {
                return Err(corrupt(
                    HEADER + 4 * i,
                    format!("pack position {i} names index position {p}, past the {n} objects"),
                ));
            }
            if seen[p / 64] >> (p % 64) & 1 != 0 {
                return Err(corrupt(
                    HEADER + 4 * i,
                    format!("index position {p} appears twice"),
                ));
            }
            seen[p / 64] |= 1 << (p % 64);
        }
        Ok(RevIndex {
            bytes,
            count: object_count,
        })
    }

    /// The number of objects.
    pub fn len(&self) -> u32 {
        self.count
    }

    /// True for the reverse index of an empty pack.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// All index positions in pack order.
    pub fn to_vec(&self) -> Vec<u32> {
        (0..self.count)
            .map(|i| self.index_position(i).expect("in range"))
            .collect()
    }
}

/// A pack's order for the pack itself to find entries by (see [`Pack::set_pack_order`]).
///
/// [`Pack::set_pack_order`]: packd_odb::pack::Pack::set_pack_order
impl packd_odb::pack::order::PackOrder for RevIndex {
    fn positions_be(&self) -> &[u8] {
        &self.bytes[HEADER..HEADER + 4 * self.count as usize]
    }
}

/// Checks the signature, version, hash id and recorded pack checksum of a `.rev` of the right
/// size for `object_count` objects.
fn check_header(
    name: &str,
    bytes: &[u8],
    pack_checksum: &[u8],
    object_count: u32,
) -> Result<(), RevIndexError> {
    let corrupt = |offset: usize, what: String| RevIndexError::Corrupt {
        file: name.to_string(),
        offset: offset as u64,
        what,
    };
    if &bytes[..4] != b"RIDX" {
        return Err(corrupt(0, "not a reverse index (bad signature)".into()));
    }
    let be32 = |at: usize| u32::from_be_bytes(bytes[at..at + 4].try_into().expect("4 bytes"));
    let version = be32(4);
    if version != 1 {
        return Err(corrupt(4, format!("unsupported version {version}")));
    }
    let hash = be32(8);
    if hash != 1 {
        return Err(corrupt(
            8,
            format!("hash id {hash} (only SHA-1, id 1, is supported)"),
        ));
    }
    let trailer = HEADER + 4 * object_count as usize;
    let recorded = &bytes[trailer..trailer + HASH];
    if recorded != pack_checksum {
        return Err(RevIndexError::ChecksumMismatch {
            file: name.to_string(),
            expected: packd_odb::hex(pack_checksum),
            found: packd_odb::hex(recorded),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn written_reverse_indexes_read_back() {
        let positions = [3u32, 0, 2, 1];
        let checksum = [7u8; 20];
        let bytes = encode(&positions, &checksum).unwrap();
        assert_eq!(bytes.len(), HEADER + 16 + 40);
        let rev = RevIndex::from_bytes("t.rev", Bytes::from(bytes.clone()), &checksum, 4).unwrap();
        assert_eq!(rev.to_vec(), positions);
        assert!(
            RevIndex::from_bytes("t.rev", Bytes::from(bytes), &[8u8; 20], 4)
                .unwrap_err()
                .is_checksum_mismatch()
        );
        let empty = encode(&[], &checksum).unwrap();
        assert!(
            RevIndex::from_bytes("e.rev", Bytes::from(empty), &checksum, 0)
                .unwrap()
                .is_empty()
        );
    }
}
