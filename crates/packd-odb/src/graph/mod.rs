//! git's commit-graph: every commit's tree, parents and date in fixed-size records, so that
//! walks need not inflate and parse commit objects.
//!
//! ```text
//! objects/info/commit-graph, or a chain: objects/info/commit-graphs/commit-graph-chain lists
//! graph-<hash>.graph files, base first; a layer's positions follow its bases' (global positions)
//!
//! "CGPH"  version u8 = 1  hash version u8 (1 = SHA-1)  chunks u8  base graphs u8
//! chunk table: (chunks + 1) x { id[4], offset u64 BE }   (last row: terminating offset)
//! OIDF  fanout[256] u32 BE (cumulative counts by first id byte, this layer only)
//! OIDL  ids[N][20], sorted
//! CDAT  N x { tree[20], parent1 u32, parent2 u32, generation << 2 | time >> 32 (u32), time u32 }
//!       parent: 0x70000000 none; else a global position; parent2 with the high bit set: the
//!       start of this commit's 2nd.. parents in EDGE
//! EDGE  u32 global positions; the last parent of a commit has the high bit set (octopus merges)
//! BASE  base graphs' hashes, base first (chain layers only)
//! GDA2, GDO2, BIDX, BDAT ...   (not needed here)
//! checksum[20]
//! ```
//!
//! Only the repository's own objects directory is read (alternates' graphs are not: their
//! commits are then read as objects, which gives the same answers). Every read is
//! bounds-checked; the trailing checksum is not verified at open (git does not either): a damaged
//! record yields an error or, at worst, a wrong parent, never a panic or a loop. A file that does
//! not hold together is refused whole by [`CommitGraph::open`], and the repository then walks
//! without it (with one warning).

use crate::hash::{HashKind, ObjectId};
use crate::parse::CommitInfo;
use crate::{Error, Result};
use bytes::Bytes;
use packd_storage::Storage;

/// No parent, in a CDAT record.
const NO_PARENT: u32 = 0x7000_0000;
/// High bit: an EDGE index (in parent2), or the last parent (in EDGE).
const HIGH_BIT: u32 = 0x8000_0000;
const CDAT_RECORD: usize = 20 + 16;

/// One graph file.
#[derive(Debug)]
struct Layer {
    name: String,
    bytes: Bytes,
    /// Global position of this layer's first commit.
    first: u32,
    count: u32,
    fanout_at: usize,
    ids_at: usize,
    cdat_at: usize,
    /// (start, end) of the EDGE chunk.
    edges: Option<(usize, usize)>,
}

/// An opened commit-graph (one file, or a chain of layers).
#[derive(Debug)]
pub struct CommitGraph {
    layers: Vec<Layer>,
    total: u32,
}

fn be32(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}

impl Layer {
    /// Parses a graph file whose first commit has global position `first`, checking that its
    /// chunks are present and in bounds; `bases` are the hashes its BASE chunk must list.
    fn parse(name: &str, bytes: Bytes, first: u32, bases: &[String]) -> Result<Layer> {
        let corrupt = |at: usize, what: String| Error::corrupt(name, at as u64, what);
        if bytes.len() < 8 + 12 + 20 || &bytes[..4] != b"CGPH" {
            return Err(corrupt(0, "not a commit-graph (bad signature)".into()));
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
        if bytes[7] as usize != bases.len() {
            return Err(corrupt(
                7,
                format!(
                    "names {} base graphs, the chain gives it {}",
                    bytes[7],
                    bases.len()
                ),
            ));
        }
        let table_end = 8 + (chunks + 1) * 12;
        let data_end = bytes.len() - 20;
        if table_end > data_end {
            return Err(corrupt(8, "the chunk table is truncated".into()));
        }
        let mut found = Vec::with_capacity(chunks);
        for i in 0..chunks {
            let at = 8 + i * 12;
            let id: [u8; 4] = bytes[at..at + 4].try_into().expect("4 bytes");
            let start = u64::from_be_bytes(bytes[at + 4..at + 12].try_into().expect("8"));
            let end = u64::from_be_bytes(bytes[at + 16..at + 24].try_into().expect("8"));
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
                    8,
                    format!("required chunk {} is missing", String::from_utf8_lossy(id)),
                )
            })
        };
        let (oidf, oidf_end) = need(b"OIDF")?;
        let (oidl, oidl_end) = need(b"OIDL")?;
        let (cdat, cdat_end) = need(b"CDAT")?;
        if oidf_end - oidf != 1024 {
            return Err(corrupt(oidf, "the fanout chunk is not 1024 bytes".into()));
        }
        let count = be32(&bytes, oidf + 1020);
        let mut prev = 0;
        for i in 0..256 {
            let f = be32(&bytes, oidf + 4 * i);
            if f < prev {
                return Err(corrupt(oidf + 4 * i, "the fanout is not monotonic".into()));
            }
            prev = f;
        }
        if oidl_end - oidl != count as usize * 20 || cdat_end - cdat != count as usize * CDAT_RECORD
        {
            return Err(corrupt(
                oidl,
                format!("the id or commit data chunk does not hold {count} commits"),
            ));
        }
        if first.checked_add(count).is_none_or(|t| t >= NO_PARENT) {
            return Err(corrupt(oidf + 1020, format!("{count} commits is too many")));
        }
        if !bases.is_empty() {
            let (base, base_end) = need(b"BASE")?;
            if base_end - base != bases.len() * 20 {
                return Err(corrupt(
                    base,
                    "the BASE chunk does not match the chain".into(),
                ));
            }
            for (i, hash) in bases.iter().enumerate() {
                let have = crate::hex(&bytes[base + 20 * i..base + 20 * i + 20]);
                if &have != hash {
                    return Err(corrupt(
                        base + 20 * i,
                        format!("names base graph {have}, the chain has {hash} there"),
                    ));
                }
            }
        }
        Ok(Layer {
            name: name.to_string(),
            bytes,
            first,
            count,
            fanout_at: oidf,
            ids_at: oidl,
            cdat_at: cdat,
            edges: chunk(b"EDGE"),
        })
    }

    fn fanout(&self, byte: usize) -> u32 {
        be32(&self.bytes, self.fanout_at + 4 * byte)
    }

    fn id_bytes(&self, i: u32) -> &[u8] {
        let at = self.ids_at + 20 * i as usize;
        &self.bytes[at..at + 20]
    }

    /// The local position of `id` in this layer.
    fn find(&self, id: &ObjectId) -> Option<u32> {
        let first = id.as_bytes()[0] as usize;
        let mut lo = if first == 0 {
            0
        } else {
            self.fanout(first - 1)
        };
        let mut hi = self.fanout(first).min(self.count);
        let want = &id.as_bytes()[..];
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            match self.id_bytes(mid).cmp(want) {
                std::cmp::Ordering::Less => lo = mid + 1,
                std::cmp::Ordering::Greater => hi = mid,
                std::cmp::Ordering::Equal => return Some(mid),
            }
        }
        None
    }
}

impl CommitGraph {
    /// Opens the commit-graph of the objects directory `storage` (its `info/commit-graph`, else
    /// its `info/commit-graphs/commit-graph-chain`), or `None` when it has neither.
    pub fn open(storage: &dyn Storage, hash: HashKind) -> Result<Option<CommitGraph>> {
        if hash != HashKind::Sha1 {
            return Ok(None);
        }
        let read = |name: &str| -> Result<Option<(String, Bytes)>> {
            match storage.open(name) {
                Ok(blob) => Ok(Some((blob.name().to_string(), blob.read_all()?))),
                Err(e) if e.is_not_found() => Ok(None),
                Err(e) => Err(e.into()),
            }
        };
        if let Some((name, bytes)) = read("info/commit-graph")? {
            let layer = Layer::parse(&name, bytes, 0, &[])?;
            let total = layer.count;
            return Ok(Some(CommitGraph {
                layers: vec![layer],
                total,
            }));
        }
        let Some((chain_name, chain)) = read("info/commit-graphs/commit-graph-chain")? else {
            return Ok(None);
        };
        let hashes: Vec<String> = String::from_utf8_lossy(&chain)
            .lines()
            .map(|l| l.trim().to_string())
            .filter(|l| !l.is_empty())
            .collect();
        if hashes.is_empty() || hashes.len() > 255 {
            return Err(Error::corrupt(
                &chain_name,
                0,
                format!("lists {} graph files", hashes.len()),
            ));
        }
        let mut layers: Vec<Layer> = Vec::with_capacity(hashes.len());
        let mut total = 0u32;
        for (i, hash) in hashes.iter().enumerate() {
            if hash.len() != 40 || !hash.bytes().all(|b| b.is_ascii_hexdigit()) {
                return Err(Error::corrupt(
                    &chain_name,
                    0,
                    format!("line {} is not a graph hash", i + 1),
                ));
            }
            let file = format!("info/commit-graphs/graph-{hash}.graph");
            let (name, bytes) = read(&file)?.ok_or_else(|| {
                Error::corrupt(
                    &chain_name,
                    0,
                    format!("names {file}, which does not exist"),
                )
            })?;
            let layer = Layer::parse(&name, bytes, total, &hashes[..i])?;
            total += layer.count;
            layers.push(layer);
        }
        Ok(Some(CommitGraph { layers, total }))
    }

    /// The number of commits.
    pub fn len(&self) -> u32 {
        self.total
    }

    /// True for a graph of no commits.
    pub fn is_empty(&self) -> bool {
        self.total == 0
    }

    /// The global position of `id`, if the graph has it.
    pub fn lookup(&self, id: &ObjectId) -> Option<u32> {
        self.layers
            .iter()
            .find_map(|l| l.find(id).map(|p| l.first + p))
    }

    fn layer(&self, pos: u32) -> Result<(&Layer, u32)> {
        self.layers
            .iter()
            .find(|l| pos >= l.first && pos - l.first < l.count)
            .map(|l| (l, pos - l.first))
            .ok_or_else(|| {
                Error::corrupt(
                    &self.layers[0].name,
                    0,
                    format!("position {pos} is past the graph's {} commits", self.total),
                )
            })
    }

    /// The id of the commit at global position `pos`.
    pub fn id(&self, pos: u32) -> Result<ObjectId> {
        let (layer, local) = self.layer(pos)?;
        Ok(ObjectId::from_bytes(layer.id_bytes(local)).expect("20 bytes"))
    }

    /// The commit at global position `pos`: tree, parents (as ids, in order) and committer time.
    pub fn commit(&self, pos: u32) -> Result<CommitInfo> {
        let (layer, local) = self.layer(pos)?;
        let b = &layer.bytes;
        let at = layer.cdat_at + CDAT_RECORD * local as usize;
        let tree = ObjectId::from_bytes(&b[at..at + 20]).expect("20 bytes");
        let p1 = be32(b, at + 20);
        let p2 = be32(b, at + 24);
        let time = (((be32(b, at + 28) & 0x3) as i64) << 32) | be32(b, at + 32) as i64;
        let bad = |what: String| Error::corrupt(&layer.name, at as u64, what);
        let mut parents = Vec::with_capacity(2);
        if p1 != NO_PARENT {
            parents.push(
                self.id(p1)
                    .map_err(|_| bad(format!("parent {p1} is out of range")))?,
            );
        }
        if p2 != NO_PARENT {
            if p2 & HIGH_BIT == 0 {
                parents.push(
                    self.id(p2)
                        .map_err(|_| bad(format!("parent {p2} is out of range")))?,
                );
            } else {
                let (start, end) = layer
                    .edges
                    .ok_or_else(|| bad("an octopus merge, but there is no EDGE chunk".into()))?;
                let mut i = start + 4 * (p2 & !HIGH_BIT) as usize;
                // Each step moves forward through a chunk of finite length: no loop.
                loop {
                    if i + 4 > end {
                        return Err(bad("the EDGE list runs past its chunk".into()));
                    }
                    let e = be32(b, i);
                    parents.push(
                        self.id(e & !HIGH_BIT).map_err(|_| {
                            bad(format!("parent {} is out of range", e & !HIGH_BIT))
                        })?,
                    );
                    if e & HIGH_BIT != 0 {
                        break;
                    }
                    i += 4;
                }
            }
        }
        Ok(CommitInfo {
            tree,
            parents,
            time,
        })
    }
}
