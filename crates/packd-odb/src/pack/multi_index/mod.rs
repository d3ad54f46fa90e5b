//! The multi-pack-index (`objects/pack/multi-pack-index`): one sorted id table over many packs.
//!
//! ```text
//! "MIDX"  version u8 = 1  hash u8 (1 = SHA-1)  chunks u8  base files u8 = 0  packs u32 BE
//! chunk table: (chunks + 1) x { id[4], offset u64 BE }   (last row: terminating offset)
//! PNAM    pack index names, NUL-terminated, sorted
//! OIDF    fanout[256] u32 BE
//! OIDL    ids[N][20], sorted
//! OOFF    N x { pack number u32 BE, offset u32 BE (high bit set: index into LOFF) }
//! LOFF    large offsets u64 BE (optional)
//! RIDX, BTMP ... (optional, read by the bitmap code)
//! checksum[20]
//! ```
//! packd uses it for lookups (one binary search instead of one per pack); each pack's own `.idx`
//! is still opened, for entry extents and same-pack delta bases.

pub mod write;

use crate::hash::{ObjectId, Prefix};
use crate::pack::sorted_ids::SortedIds;
use crate::{Error, Result};
use bytes::Bytes;

/// A parsed multi-pack-index.
#[derive(Debug)]
pub struct MultiPackIndex {
    name: String,
    bytes: Bytes,
    pack_names: Vec<String>,
    count: u32,
    fanout_at: usize,
    ids_at: usize,
    offsets_at: usize,
    large_offsets: Option<(usize, usize)>,
    /// The RIDX chunk: multi-pack-index positions in pseudo-pack order (newer git writes it
    /// here; older git writes `multi-pack-index-<checksum>.rev` instead).
    reverse_at: Option<usize>,
}

impl MultiPackIndex {
    /// Parses a multi-pack-index, checking that every chunk it needs is present and fits the file.
    pub fn from_bytes(name: &str, bytes: Bytes) -> Result<MultiPackIndex> {
        let corrupt = |offset: usize, what: String| Error::corrupt(name, offset as u64, what);
        if bytes.len() < 12 + 20 || &bytes[..4] != b"MIDX" {
            return Err(corrupt(0, "not a multi-pack-index (bad signature)".into()));
        }
        if bytes[4] != 1 {
            return Err(corrupt(4, format!("unsupported version {}", bytes[4])));
        }
        if bytes[5] != 1 {
            return Err(Error::Unsupported(format!(
                "{name}: hash version {} (only SHA-1 is supported)",
                bytes[5]
            )));
        }
        let chunks = bytes[6] as usize;
        if bytes[7] != 0 {
            return Err(corrupt(
                7,
                "incremental multi-pack-index chains are not supported".into(),
            ));
        }
        let packs = u32::from_be_bytes(bytes[8..12].try_into().unwrap()) as usize;
        let table_end = 12 + (chunks + 1) * 12;
        if bytes.len() < table_end + 20 {
            return Err(corrupt(12, "the chunk table is truncated".into()));
        }
        let data_end = bytes.len() - 20;
        let mut found: Vec<([u8; 4], usize, usize)> = Vec::with_capacity(chunks);
        for i in 0..chunks {
            let at = 12 + i * 12;
            let id: [u8; 4] = bytes[at..at + 4].try_into().unwrap();
            let start = u64::from_be_bytes(bytes[at + 4..at + 12].try_into().unwrap());
            let end = u64::from_be_bytes(bytes[at + 16..at + 24].try_into().unwrap());
            if start > end || end > data_end as u64 || start < table_end as u64 {
                return Err(corrupt(
                    at,
                    format!(
                        "chunk {} has a bad extent {start}..{end}",
                        String::from_utf8_lossy(&id)
                    ),
                ));
            }
            found.push((id, start as usize, end as usize));
        }
        let chunk = |id: &[u8; 4]| found.iter().find(|c| &c.0 == id).map(|c| (c.1, c.2));
        let need = |id: &[u8; 4]| {
            chunk(id).ok_or_else(|| {
                corrupt(
                    12,
                    format!("required chunk {} is missing", String::from_utf8_lossy(id)),
                )
            })
        };
        let (pnam, pnam_end) = need(b"PNAM")?;
        let (oidf, oidf_end) = need(b"OIDF")?;
        let (oidl, oidl_end) = need(b"OIDL")?;
        let (ooff, ooff_end) = need(b"OOFF")?;
        if oidf_end - oidf != 1024 {
            return Err(corrupt(oidf, "the fanout chunk is not 1024 bytes".into()));
        }
        let count = u32::from_be_bytes(bytes[oidf + 1020..oidf + 1024].try_into().unwrap());
        if oidl_end - oidl != count as usize * 20 || ooff_end - ooff != count as usize * 8 {
            return Err(corrupt(
                oidl,
                format!("the id or offset chunk does not hold {count} objects"),
            ));
        }
        let mut prev = 0;
        for i in 0..256 {
            let f = u32::from_be_bytes(bytes[oidf + 4 * i..oidf + 4 * i + 4].try_into().unwrap());
            if f < prev || f > count {
                return Err(corrupt(oidf + 4 * i, "the fanout is not monotonic".into()));
            }
            prev = f;
        }
        let mut pack_names = Vec::with_capacity(packs);
        for raw in bytes[pnam..pnam_end]
            .split(|&b| b == 0)
            .filter(|s| !s.is_empty())
        {
            pack_names.push(
                String::from_utf8(raw.to_vec())
                    .map_err(|_| corrupt(pnam, "a pack name is not UTF-8".into()))?,
            );
        }
        if pack_names.len() != packs {
            return Err(corrupt(
                pnam,
                format!("names {} packs, the header says {packs}", pack_names.len()),
            ));
        }
        let large_offsets = chunk(b"LOFF");
        let reverse_at = match chunk(b"RIDX") {
            None => None,
            Some((start, end)) if end - start == count as usize * 4 => Some(start),
            Some((start, _)) => {
                return Err(corrupt(
                    start,
                    format!("the RIDX chunk does not hold {count} positions"),
                ))
            }
        };
        Ok(MultiPackIndex {
            name: name.to_string(),
            bytes,
            pack_names,
            count,
            fanout_at: oidf,
            ids_at: oidl,
            offsets_at: ooff,
            large_offsets,
            reverse_at,
        })
    }

    /// The file's name, for messages.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The file's trailing checksum, which its `.bitmap` and `.rev` files record.
    pub fn checksum(&self) -> &[u8] {
        &self.bytes[self.bytes.len() - 20..]
    }

    /// Whether the file has a RIDX chunk (see [`MultiPackIndex::reverse_position`]).
    pub fn has_reverse_index(&self) -> bool {
        self.reverse_at.is_some()
    }

    /// From the RIDX chunk: the position (in id order) of the object at `pseudo_pos` of the
    /// pseudo-pack order, in which bitmaps number objects (the preferred pack's objects first,
    /// then the other packs' in pack-number order, each pack's by offset). `None` without the
    /// chunk, or for a position out of range, or one the chunk maps out of range.
    pub fn reverse_position(&self, pseudo_pos: u32) -> Option<u32> {
        let start = self.reverse_at?;
        if pseudo_pos >= self.count {
            return None;
        }
        let at = start + 4 * pseudo_pos as usize;
        let pos = u32::from_be_bytes(self.bytes[at..at + 4].try_into().unwrap());
        (pos < self.count).then_some(pos)
    }

    /// The `.idx` names of the packs it covers, in pack-number order.
    pub fn pack_names(&self) -> &[String] {
        &self.pack_names
    }

    /// The number of objects.
    pub fn len(&self) -> u32 {
        self.count
    }

    /// True when it covers no object.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// The `i`th id in sorted order.
    pub fn id(&self, i: u32) -> ObjectId {
        ObjectId::from_bytes(self.id_bytes(i)).expect("20 bytes")
    }

    /// The pack number and offset of the `i`th object.
    pub fn location(&self, i: u32) -> Result<(u32, u64)> {
        let at = self.offsets_at + 8 * i as usize;
        let pack = u32::from_be_bytes(self.bytes[at..at + 4].try_into().unwrap());
        let raw = u32::from_be_bytes(self.bytes[at + 4..at + 8].try_into().unwrap());
        if pack as usize >= self.pack_names.len() {
            return Err(Error::corrupt(
                &self.name,
                at as u64,
                format!("object {i} names pack {pack}, which does not exist"),
            ));
        }
        if raw & 0x8000_0000 == 0 {
            return Ok((pack, raw as u64));
        }
        let large = (raw & 0x7fff_ffff) as usize;
        match self.large_offsets {
            Some((start, end)) if start + 8 * large + 8 <= end => {
                let p = start + 8 * large;
                Ok((
                    pack,
                    u64::from_be_bytes(self.bytes[p..p + 8].try_into().unwrap()),
                ))
            }
            _ => Err(Error::corrupt(
                &self.name,
                at as u64 + 4,
                format!("object {i} points at a large offset that does not exist"),
            )),
        }
    }

    /// The position of `id`, if present.
    pub fn find(&self, id: &ObjectId) -> Option<u32> {
        self.find_id(id)
    }

    /// Up to `limit` ids starting with `prefix`, appended to `out`.
    pub fn find_prefix(&self, prefix: &Prefix, limit: usize, out: &mut Vec<ObjectId>) {
        self.find_ids_with_prefix(prefix, limit, out)
    }
}

impl SortedIds for MultiPackIndex {
    fn fanout(&self, b: usize) -> u32 {
        let at = self.fanout_at + 4 * b;
        u32::from_be_bytes(self.bytes[at..at + 4].try_into().unwrap())
    }

    fn id_bytes(&self, i: u32) -> &[u8] {
        let at = self.ids_at + 20 * i as usize;
        &self.bytes[at..at + 20]
    }
}
