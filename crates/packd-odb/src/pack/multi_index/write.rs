//! Writing a multi-pack-index (version 1, SHA-1) over a set of packs.
//!
//! ```text
//! header     "MIDX" | version 1 | hash 1 (SHA-1) | chunk count C | base files 0 | packs u32 BE
//! chunk table (C + 1) x { id[4], offset u64 BE }; the last row is id 0 and the end of the chunks
//! PNAM       the packs' .idx names, sorted, each NUL-terminated; zero-padded to 4 bytes
//! OIDF       fanout: 256 x u32 BE, the number of ids whose first byte is <= i
//! OIDL       N ids, sorted
//! OOFF       N x { pack number u32 BE, offset u32 BE }; an offset >= 2^31 is stored in LOFF and
//!            its field is 0x80000000 | its row there
//! LOFF       u64 BE offsets (only when some offset needs it)
//! RIDX       N x u32 BE: the multi-pack-index position at each position of the pseudo-pack order
//!            (only when asked: bitmaps number objects in that order)
//! checksum   SHA-1 of all the above
//! ```
//!
//! **Which copy.** An object in several packs is listed once. As git chooses: the copy in the
//! preferred pack; else the copy in the pack with the newest modification time (in seconds);
//! else the one with the lowest pack number (pack numbers follow the sorted names).
//!
//! **Pseudo-pack order.** The preferred pack's objects first, then every other pack's in pack
//! number order, each pack's by offset, counting only the chosen copies. The preferred pack is
//! the one the caller names, else the one with the most objects (the lowest pack number among
//! equals). All of its objects are chosen, so a bitmap's first bits are exactly its objects, in
//! its own order: what lets a server send that pack's entries verbatim.
//!
//! This module only computes and serializes; writing the file in place is the caller's job.

use crate::hash::ObjectId;
use crate::pack::index::PackIndex;
use crate::{Error, Result};
use sha1::Digest;

/// A pack to cover: its index's file name, its modification time, and its objects.
#[derive(Debug, Clone)]
pub struct MidxPack {
    /// The `.idx` file name, e.g. `pack-<hex>.idx` (no directory).
    pub name: String,
    /// Modification time of the `.pack` file in seconds: among copies of one object outside the
    /// preferred pack, the newest pack's wins.
    pub mtime: i64,
    /// Every object of the pack with its offset, in any order.
    pub objects: Vec<(ObjectId, u64)>,
}

impl MidxPack {
    /// The objects of an opened pack index.
    pub fn from_index(name: &str, mtime: i64, index: &PackIndex) -> Result<MidxPack> {
        let mut objects = Vec::with_capacity(index.len() as usize);
        for i in 0..index.len() {
            objects.push((index.id(i), index.offset(i)?));
        }
        Ok(MidxPack {
            name: name.to_string(),
            mtime,
            objects,
        })
    }
}

/// The content of a multi-pack-index: packs, chosen copies, and the pseudo-pack order.
#[derive(Debug, Clone)]
pub struct MidxPlan {
    /// `.idx` names, sorted: pack number `k` is `pack_names[k]`.
    pack_names: Vec<String>,
    /// Ids, sorted.
    ids: Vec<ObjectId>,
    /// Pack number and offset of the chosen copy, by multi-pack-index position.
    locations: Vec<(u32, u64)>,
    /// The preferred pack's number.
    preferred: u32,
    /// Multi-pack-index positions in pseudo-pack order.
    pseudo_order: Vec<u32>,
}

/// Chunk ids.
const PNAM: &[u8; 4] = b"PNAM";
const OIDF: &[u8; 4] = b"OIDF";
const OIDL: &[u8; 4] = b"OIDL";
const OOFF: &[u8; 4] = b"OOFF";
const LOFF: &[u8; 4] = b"LOFF";
const RIDX: &[u8; 4] = b"RIDX";
/// The OOFF flag: the offset is a row of LOFF.
const LARGE_OFFSET: u32 = 0x8000_0000;

impl MidxPlan {
    /// Chooses a copy of every object and the pseudo-pack order. `preferred` names the preferred
    /// pack by its `.idx` or `.pack` name (with or without `pack/`); `None` picks the pack with
    /// the most objects.
    pub fn new(packs: Vec<MidxPack>, preferred: Option<&str>) -> Result<MidxPlan> {
        if packs.is_empty() {
            return Err(Error::BadName(
                "a multi-pack-index needs at least one pack".into(),
            ));
        }
        if packs.len() > u32::MAX as usize / 2 {
            return Err(Error::Unsupported("too many packs".into()));
        }
        let mut packs = packs;
        for p in &packs {
            if !p.name.ends_with(".idx") || p.name.contains('/') || p.name.contains('\0') {
                return Err(Error::BadName(format!(
                    "{:?} is not the file name of a pack index",
                    p.name
                )));
            }
        }
        packs.sort_by(|a, b| a.name.cmp(&b.name));
        if let Some(w) = packs.windows(2).find(|w| w[0].name == w[1].name) {
            return Err(Error::BadName(format!("pack {} given twice", w[0].name)));
        }
        let preferred = match preferred {
            Some(want) => {
                let want = want.trim_start_matches("pack/");
                let stem = want
                    .strip_suffix(".idx")
                    .or_else(|| want.strip_suffix(".pack"))
                    .unwrap_or(want);
                let k = packs
                    .iter()
                    .position(|p| p.name.strip_suffix(".idx") == Some(stem))
                    .ok_or_else(|| {
                        Error::BadName(format!("preferred pack {want}: no such pack"))
                    })?;
                if packs[k].objects.is_empty() {
                    return Err(Error::BadName(format!(
                        "preferred pack {want} has no objects"
                    )));
                }
                k
            }
            // The most objects; the lowest number among equals.
            None => (0..packs.len())
                .max_by_key(|&k| (packs[k].objects.len(), std::cmp::Reverse(k)))
                .unwrap_or(0),
        };

        // Every copy, best first within each id: preferred, newest, lowest number.
        let total: usize = packs.iter().map(|p| p.objects.len()).sum();
        let mut copies: Vec<(ObjectId, bool, std::cmp::Reverse<i64>, u32, u64)> =
            Vec::with_capacity(total);
        for (k, p) in packs.iter_mut().enumerate() {
            for (id, offset) in std::mem::take(&mut p.objects) {
                copies.push((
                    id,
                    k != preferred,
                    std::cmp::Reverse(p.mtime),
                    k as u32,
                    offset,
                ));
            }
        }
        copies.sort_unstable();
        copies.dedup_by(|later, first| later.0 == first.0);
        if copies.len() > u32::MAX as usize {
            return Err(Error::Unsupported(format!(
                "{} objects: more than a multi-pack-index can number",
                copies.len()
            )));
        }
        let ids: Vec<ObjectId> = copies.iter().map(|c| c.0).collect();
        let locations: Vec<(u32, u64)> = copies.iter().map(|c| (c.3, c.4)).collect();
        drop(copies);

        let preferred = preferred as u32;
        let mut pseudo_order: Vec<u32> = (0..ids.len() as u32).collect();
        pseudo_order.sort_unstable_by_key(|&i| {
            let (pack, offset) = locations[i as usize];
            (pack != preferred, pack, offset)
        });
        Ok(MidxPlan {
            pack_names: packs.into_iter().map(|p| p.name).collect(),
            ids,
            locations,
            preferred,
            pseudo_order,
        })
    }

    /// The `.idx` names in pack-number order.
    pub fn pack_names(&self) -> &[String] {
        &self.pack_names
    }

    /// The number of objects.
    pub fn len(&self) -> u32 {
        self.ids.len() as u32
    }

    /// True when the packs hold no object.
    pub fn is_empty(&self) -> bool {
        self.ids.is_empty()
    }

    /// The id at multi-pack-index position `i`.
    pub fn id(&self, i: u32) -> ObjectId {
        self.ids[i as usize]
    }

    /// The ids, sorted.
    pub fn ids(&self) -> &[ObjectId] {
        &self.ids
    }

    /// Pack number and offset of the copy chosen for the object at position `i`.
    pub fn location(&self, i: u32) -> (u32, u64) {
        self.locations[i as usize]
    }

    /// The preferred pack's number.
    pub fn preferred(&self) -> u32 {
        self.preferred
    }

    /// Multi-pack-index positions in pseudo-pack order (what the RIDX chunk holds).
    pub fn pseudo_order(&self) -> &[u32] {
        &self.pseudo_order
    }

    /// The file's bytes, with a RIDX chunk when `ridx` (git 2.36+ reads the pseudo-pack order
    /// from it; a bitmap over the multi-pack-index needs it).
    pub fn to_bytes(&self, ridx: bool) -> Vec<u8> {
        let n = self.ids.len();
        let mut chunks: Vec<(&[u8; 4], Vec<u8>)> = Vec::with_capacity(6);

        let mut pnam = Vec::new();
        for name in &self.pack_names {
            pnam.extend_from_slice(name.as_bytes());
            pnam.push(0);
        }
        pnam.resize(pnam.len().next_multiple_of(4), 0);
        chunks.push((PNAM, pnam));

        let mut counts = [0u32; 256];
        for id in &self.ids {
            counts[id.as_bytes()[0] as usize] += 1;
        }
        let mut oidf = Vec::with_capacity(1024);
        let mut running = 0u32;
        for c in counts {
            running += c;
            oidf.extend_from_slice(&running.to_be_bytes());
        }
        chunks.push((OIDF, oidf));

        let mut oidl = Vec::with_capacity(20 * n);
        for id in &self.ids {
            oidl.extend_from_slice(id.as_bytes());
        }
        chunks.push((OIDL, oidl));

        let mut ooff = Vec::with_capacity(8 * n);
        let mut loff = Vec::new();
        for &(pack, offset) in &self.locations {
            ooff.extend_from_slice(&pack.to_be_bytes());
            let field = if offset >= LARGE_OFFSET as u64 {
                let row = (loff.len() / 8) as u32;
                loff.extend_from_slice(&offset.to_be_bytes());
                LARGE_OFFSET | row
            } else {
                offset as u32
            };
            ooff.extend_from_slice(&field.to_be_bytes());
        }
        chunks.push((OOFF, ooff));
        if !loff.is_empty() {
            chunks.push((LOFF, loff));
        }
        if ridx {
            let mut r = Vec::with_capacity(4 * n);
            for &i in &self.pseudo_order {
                r.extend_from_slice(&i.to_be_bytes());
            }
            chunks.push((RIDX, r));
        }

        let table_len = (chunks.len() + 1) * 12;
        let body: usize = chunks.iter().map(|c| c.1.len()).sum();
        let mut out = Vec::with_capacity(12 + table_len + body + 20);
        out.extend_from_slice(b"MIDX");
        out.push(1); // version
        out.push(1); // SHA-1
        out.push(chunks.len() as u8);
        out.push(0); // no base files
        out.extend_from_slice(&(self.pack_names.len() as u32).to_be_bytes());
        let mut at = (12 + table_len) as u64;
        for (id, data) in &chunks {
            out.extend_from_slice(*id);
            out.extend_from_slice(&at.to_be_bytes());
            at += data.len() as u64;
        }
        out.extend_from_slice(&[0; 4]);
        out.extend_from_slice(&at.to_be_bytes());
        for (_, data) in &chunks {
            out.extend_from_slice(data);
        }
        let digest = sha1::Sha1::digest(&out);
        out.extend_from_slice(&digest);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pack::multi_index::MultiPackIndex;
    use bytes::Bytes;

    fn id(first: u8, rest: u8) -> ObjectId {
        let mut b = [rest; 20];
        b[0] = first;
        ObjectId::from_bytes(&b).unwrap()
    }

    fn pack(name: &str, mtime: i64, objects: &[(ObjectId, u64)]) -> MidxPack {
        MidxPack {
            name: name.into(),
            mtime,
            objects: objects.to_vec(),
        }
    }

    /// Three packs given out of name order; `dup` is in all three, `twice` in b and c.
    fn three() -> (Vec<MidxPack>, ObjectId, ObjectId) {
        let dup = id(0x10, 1);
        let twice = id(0xf0, 2);
        let c = pack(
            "pack-c.idx",
            300,
            &[
                (id(0x00, 3), 12),
                (dup, 400),
                (twice, 99),
                (id(0x80, 4), 40),
            ],
        );
        let a = pack(
            "pack-a.idx",
            100,
            &[
                (id(0x20, 5), 12),
                (dup, 50),
                (id(0x21, 6), 3_000_000_000),
                (id(0x22, 7), 90),
                (id(0x23, 8), 5_000_000_000),
            ],
        );
        let b = pack("pack-b.idx", 300, &[(twice, 12), (dup, 70)]);
        (vec![c, a, b], dup, twice)
    }

    #[test]
    fn copies_and_pseudo_pack_order_follow_gits_rules() {
        let (packs, dup, twice) = three();
        // Preferred by default: a, the largest.
        let plan = MidxPlan::new(packs, None).unwrap();
        assert_eq!(
            plan.pack_names(),
            ["pack-a.idx", "pack-b.idx", "pack-c.idx"]
        );
        assert_eq!(plan.preferred(), 0);
        assert_eq!(plan.len(), 8);
        assert!(plan.ids().windows(2).all(|w| w[0] < w[1]));
        let at = |x: &ObjectId| plan.ids().binary_search(x).unwrap() as u32;
        // dup: the preferred pack's copy.
        assert_eq!(plan.location(at(&dup)), (0, 50));
        // twice: b and c have the same mtime; b has the lower number.
        assert_eq!(plan.location(at(&twice)), (1, 12));
        // Pseudo order: a's five by offset, then b's one, then c's two.
        let order: Vec<(u32, u64)> = plan
            .pseudo_order()
            .iter()
            .map(|&i| plan.location(i))
            .collect();
        assert_eq!(
            order,
            [
                (0, 12),
                (0, 50),
                (0, 90),
                (0, 3_000_000_000),
                (0, 5_000_000_000),
                (1, 12),
                (2, 12),
                (2, 40)
            ]
        );

        // Preferred c: it keeps all its copies and comes first.
        let (packs, dup, twice) = three();
        let plan = MidxPlan::new(packs, Some("pack/pack-c.pack")).unwrap();
        assert_eq!(plan.preferred(), 2);
        let at = |x: &ObjectId| plan.ids().binary_search(x).unwrap() as u32;
        assert_eq!(plan.location(at(&dup)), (2, 400));
        assert_eq!(plan.location(at(&twice)), (2, 99));
        let first: Vec<u32> = plan.pseudo_order()[..4]
            .iter()
            .map(|&i| plan.location(i).0)
            .collect();
        assert_eq!(first, [2, 2, 2, 2]);

        // Newest mtime wins outside the preferred pack.
        let (mut packs, _, twice) = three();
        packs[0].mtime = 200; // c older than b
        packs[2].mtime = 400; // b newest
        let plan = MidxPlan::new(packs, Some("pack-a.idx")).unwrap();
        let at = plan.ids().binary_search(&twice).unwrap() as u32;
        assert_eq!(plan.location(at), (1, 12));
        let (mut packs, _, twice) = three();
        packs[2].mtime = 10; // b oldest
        let plan = MidxPlan::new(packs, None).unwrap();
        let at = plan.ids().binary_search(&twice).unwrap() as u32;
        assert_eq!(plan.location(at), (2, 99));
    }

    #[test]
    fn written_files_read_back() {
        for ridx in [false, true] {
            let (packs, _, _) = three();
            let plan = MidxPlan::new(packs, Some("pack-b.idx")).unwrap();
            let bytes = plan.to_bytes(ridx);
            // The PNAM chunk is padded: chunks after it start 4-aligned.
            let midx = MultiPackIndex::from_bytes("mem", Bytes::from(bytes.clone())).unwrap();
            assert_eq!(midx.pack_names(), plan.pack_names());
            assert_eq!(midx.len(), plan.len());
            assert_eq!(midx.has_reverse_index(), ridx);
            for i in 0..plan.len() {
                assert_eq!(midx.id(i), plan.id(i));
                assert_eq!(midx.find(&plan.id(i)), Some(i));
                assert_eq!(midx.location(i).unwrap(), plan.location(i));
            }
            for (k, &i) in plan.pseudo_order().iter().enumerate() {
                let want = ridx.then_some(i);
                assert_eq!(midx.reverse_position(k as u32), want);
            }
            // Large offsets went to LOFF: its chunk is there, 2 rows.
            assert!(bytes.windows(4).any(|w| w == b"LOFF"));
            let digest = sha1::Sha1::digest(&bytes[..bytes.len() - 20]);
            assert_eq!(midx.checksum(), &digest[..]);
            // Chunk offsets are 4-aligned.
            let chunks = bytes[6] as usize;
            for c in 0..=chunks {
                let at = 12 + c * 12 + 4;
                let off = u64::from_be_bytes(bytes[at..at + 8].try_into().unwrap());
                assert_eq!(off % 4, 0);
            }
        }
        // Without large offsets, no LOFF.
        let plan = MidxPlan::new(vec![pack("pack-x.idx", 1, &[(id(1, 1), 12)])], None).unwrap();
        let bytes = plan.to_bytes(true);
        assert_eq!(bytes[6], 5);
        assert!(!bytes.windows(4).any(|w| w == b"LOFF"));
        MultiPackIndex::from_bytes("mem", Bytes::from(bytes)).unwrap();
    }

    #[test]
    fn bad_input_is_refused() {
        assert!(MidxPlan::new(Vec::new(), None).is_err());
        let (packs, _, _) = three();
        assert!(MidxPlan::new(packs, Some("pack-zzz.idx")).is_err());
        let (mut packs, _, _) = three();
        packs[1].name = "pack-b.idx".into();
        assert!(MidxPlan::new(packs, None).is_err(), "a name twice");
        let (mut packs, _, _) = three();
        packs[1].name = "../pack-q.idx".into();
        assert!(MidxPlan::new(packs, None).is_err());
        let empty = pack("pack-e.idx", 1, &[]);
        let (mut packs, _, _) = three();
        packs.push(empty);
        assert!(MidxPlan::new(packs, Some("pack-e.idx")).is_err());
    }
}
