//! The commit-graph file's bytes (the layout is in the module root), and putting them in
//! place through the storage layer: `info/commit-graph` replaced by compare-and-swap against
//! the version read before the commits were (on a local disk git's lock-file protocol, the
//! file left read-only as git leaves it), after which a split chain, now stale, is removed as
//! git removes it.

use super::generation::MAX_GDA2_OFFSET;
use super::{CommitGraphError, Commits, Generations, WrittenGraph};
use packd_odb::ObjectId;
use packd_storage::{Storage, Version};
use std::path::PathBuf;

/// "No parent" in CDAT.
const NO_PARENT: u32 = 0x7000_0000;
/// In CDAT's second parent: "the rest are in EDGE, from this index"; in EDGE: "the last one";
/// in GDA2: "the offset is in GDO2, at this index".
const HIGH_BIT: u32 = 0x8000_0000;
const HASH: usize = 20;
const CDAT_RECORD: usize = HASH + 16;

/// An encoded graph, not yet on disk.
#[derive(Debug)]
pub struct Encoded {
    bytes: Vec<u8>,
    commits: u32,
    extra_edges: u32,
    overflows: u32,
    checksum: ObjectId,
}

/// Encodes the graph of `commits` with `generations`, chunks in git's order.
pub fn encode(commits: &Commits, generations: &Generations) -> Result<Encoded, CommitGraphError> {
    let n = commits.len();
    let extra_edges: usize = (0..n)
        .map(|p| commits.parents(p).len())
        .filter(|&k| k > 2)
        .map(|k| k - 1)
        .sum();
    let offset = |p: usize| {
        generations
            .corrected_date(p)
            .map(|c| c.wrapping_sub(commits.date(p)))
    };
    let overflows = (0..n)
        .filter(|&p| offset(p).is_some_and(|o| o > MAX_GDA2_OFFSET))
        .count();
    if extra_edges >= HIGH_BIT as usize {
        return Err(CommitGraphError::TooMany(n));
    }

    let mut chunks: Vec<([u8; 4], usize)> = vec![
        (*b"OIDF", 256 * 4),
        (*b"OIDL", n * HASH),
        (*b"CDAT", n * CDAT_RECORD),
    ];
    if generations.has_corrected_dates() {
        chunks.push((*b"GDA2", n * 4));
        if overflows > 0 {
            chunks.push((*b"GDO2", overflows * 8));
        }
    }
    if extra_edges > 0 {
        chunks.push((*b"EDGE", extra_edges * 4));
    }
    let table = (chunks.len() + 1) * 12;
    let total = 8 + table + chunks.iter().map(|c| c.1).sum::<usize>() + HASH;
    let mut out = Vec::with_capacity(total);

    out.extend_from_slice(b"CGPH");
    out.extend_from_slice(&[1, 1, chunks.len() as u8, 0]);
    let mut at = (8 + table) as u64;
    for (id, len) in &chunks {
        out.extend_from_slice(id);
        out.extend_from_slice(&at.to_be_bytes());
        at += *len as u64;
    }
    out.extend_from_slice(&[0; 4]);
    out.extend_from_slice(&at.to_be_bytes());

    // OIDF and OIDL.
    let ids = commits.ids();
    let mut count = 0usize;
    for byte in 0..256usize {
        while count < n && ids[count].as_bytes()[0] as usize == byte {
            count += 1;
        }
        out.extend_from_slice(&(count as u32).to_be_bytes());
    }
    for id in ids {
        out.extend_from_slice(id.as_bytes());
    }

    // CDAT.
    let mut edge_index = 0u32;
    for p in 0..n {
        out.extend_from_slice(commits.tree(p).as_bytes());
        let parents = commits.parents(p);
        let first = parents.first().copied().unwrap_or(NO_PARENT);
        let second = match parents.len() {
            0 | 1 => NO_PARENT,
            2 => parents[1],
            k => {
                let link = HIGH_BIT | edge_index;
                edge_index += k as u32 - 1;
                link
            }
        };
        let date = commits.date(p);
        let high = ((date >> 32) & 0x3) as u32 | generations.level(p) << 2;
        for word in [first, second, high, date as u32] {
            out.extend_from_slice(&word.to_be_bytes());
        }
    }

    // GDA2 and GDO2.
    if generations.has_corrected_dates() {
        let mut overflow_index = 0u32;
        let mut large = Vec::with_capacity(overflows);
        for p in 0..n {
            let o = offset(p).expect("corrected dates were computed");
            let word = if o > MAX_GDA2_OFFSET {
                large.push(o);
                overflow_index += 1;
                HIGH_BIT | (overflow_index - 1)
            } else {
                o as u32
            };
            out.extend_from_slice(&word.to_be_bytes());
        }
        for o in large {
            out.extend_from_slice(&o.to_be_bytes());
        }
    }

    // EDGE.
    for p in 0..n {
        let parents = commits.parents(p);
        if parents.len() > 2 {
            let last = parents.len() - 1;
            for (k, &parent) in parents.iter().enumerate().skip(1) {
                let word = if k == last { parent | HIGH_BIT } else { parent };
                out.extend_from_slice(&word.to_be_bytes());
            }
        }
    }

    let digest = sha1dc::digest(&out).map_err(|_| {
        packd_odb::Error::Unsupported("the commit-graph's content carries a SHA-1 collision".into())
    })?;
    let checksum = ObjectId::from_bytes(digest.as_ref()).expect("a SHA-1 is 20 bytes");
    out.extend_from_slice(digest.as_ref());
    debug_assert_eq!(out.len(), total);
    Ok(Encoded {
        bytes: out,
        commits: n as u32,
        extra_edges: extra_edges as u32,
        overflows: overflows as u32,
        checksum,
    })
}

/// The commit-graph's name in the objects storage.
pub(super) const GRAPH: &str = "info/commit-graph";

/// A split chain's directory, which a single file makes stale.
const CHAIN_DIR: &str = "info/commit-graphs";

impl Encoded {
    /// The number of commits in it.
    pub fn commits(&self) -> u32 {
        self.commits
    }
}

/// Puts `encoded` in `storage` as `info/commit-graph` if that is still at `replaces` (the
/// version read before the commits were, `None`: absent), read-only as git leaves it; then
/// removes a split chain as git does when it writes a single file
/// (`commit-graphs/commit-graph-chain` and the `graph-*.graph` layers). Another writer's graph
/// put there since is a [`packd_storage::StorageError::Conflict`] (git's own writer holding
/// its lock, `Locked`), and stays.
pub fn install(
    storage: &dyn Storage,
    encoded: Encoded,
    replaces: Option<&Version>,
) -> Result<WrittenGraph, CommitGraphError> {
    let bytes = encoded.bytes.len() as u64;
    storage.replace_read_only(GRAPH, replaces, &encoded.bytes)?;
    let removed_chain = remove_chain(storage)?;
    Ok(WrittenGraph {
        path: PathBuf::from(storage.describe(GRAPH)),
        commits: encoded.commits,
        extra_edges: encoded.extra_edges,
        overflows: encoded.overflows,
        bytes,
        checksum: encoded.checksum,
        removed_chain,
    })
}

/// Removes the chain file and every `*.graph` beside it (git's `expire_commit_graphs` after a
/// non-split write, which keeps no layer); true if there was a chain file.
fn remove_chain(storage: &dyn Storage) -> Result<bool, CommitGraphError> {
    let removed = storage.delete(&format!("{CHAIN_DIR}/commit-graph-chain"))?;
    for name in storage.list(CHAIN_DIR)? {
        if name.ends_with(".graph") {
            storage.delete(&format!("{CHAIN_DIR}/{name}"))?;
        }
    }
    Ok(removed)
}
