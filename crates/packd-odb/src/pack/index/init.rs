//! Opening a pack index: version detection and the size checks that make every later read of a
//! table entry stay inside the file.

use super::PackIndex;
use crate::{Error, Result};
use bytes::Bytes;

/// The `.idx` format version.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IndexVersion {
    /// Offsets beside ids, 32-bit offsets only, no CRCs.
    V1,
    /// Separate tables, CRC32 per entry, 64-bit offsets.
    V2,
}

const V2_MAGIC: &[u8; 4] = b"\xfftOc";
const FANOUT_BYTES: usize = 256 * 4;
const HASH: usize = 20;

impl PackIndex {
    /// Parses an index from its bytes, checking that its tables fit the file.
    pub fn from_bytes(name: &str, bytes: Bytes) -> Result<PackIndex> {
        let corrupt = |offset: u64, what: String| Error::corrupt(name, offset, what);
        let is_v2 = bytes.len() >= 8 && &bytes[..4] == V2_MAGIC;
        let (version, fanout_at) = if is_v2 {
            let v = u32::from_be_bytes(bytes[4..8].try_into().unwrap());
            if v != 2 {
                return Err(corrupt(4, format!("unsupported index version {v}")));
            }
            (IndexVersion::V2, 8)
        } else {
            (IndexVersion::V1, 0)
        };
        if bytes.len() < fanout_at + FANOUT_BYTES + 2 * HASH {
            return Err(corrupt(
                0,
                format!("index is truncated ({} bytes)", bytes.len()),
            ));
        }
        let fanout = |i: usize| {
            let at = fanout_at + 4 * i;
            u32::from_be_bytes(bytes[at..at + 4].try_into().unwrap())
        };
        let mut prev = 0;
        for i in 0..256 {
            let f = fanout(i);
            if f < prev {
                return Err(corrupt(
                    (fanout_at + 4 * i) as u64,
                    format!("fanout entry {i} ({f}) is smaller than the one before ({prev})"),
                ));
            }
            prev = f;
        }
        let count = prev as usize;
        let ids_at = fanout_at + FANOUT_BYTES;
        let mut index = PackIndex {
            name: name.to_string(),
            bytes: Bytes::new(),
            version,
            count: prev,
            ids_at,
            crcs_at: 0,
            offsets_at: 0,
            large_offsets_at: 0,
            large_offsets_count: 0,
            blob: None,
            fine_fanout: std::sync::OnceLock::new(),
        };
        match version {
            IndexVersion::V1 => {
                let want = ids_at + count * (4 + HASH) + 2 * HASH;
                if bytes.len() != want {
                    return Err(corrupt(
                        0,
                        format!(
                            "index of {count} objects should be {want} bytes but is {}",
                            bytes.len()
                        ),
                    ));
                }
            }
            IndexVersion::V2 => {
                index.crcs_at = ids_at + count * HASH;
                index.offsets_at = index.crcs_at + count * 4;
                index.large_offsets_at = index.offsets_at + count * 4;
                let min = index.large_offsets_at + 2 * HASH;
                if bytes.len() < min || !(bytes.len() - min).is_multiple_of(8) {
                    return Err(corrupt(
                        0,
                        format!(
                            "index of {count} objects cannot be {} bytes long",
                            bytes.len()
                        ),
                    ));
                }
                index.large_offsets_count = (bytes.len() - min) / 8;
            }
        }
        index.bytes = bytes;
        Ok(index)
    }
}
