//! Checking a whole pack and its index: what `git verify-pack` checks, on all cores.
//!
//! 1. The index: its own checksum, ids strictly ascending and consistent with the fanout,
//!    offsets distinct and inside the pack.
//! 2. The pack's trailer: the SHA-1 of everything before it.
//! 3. Every entry: its header decodes, its CRC32 matches the index, its delta base exists.
//! 4. Every object: inflated, delta chains applied, re-hashed, and the id matches the index.
//!
//! Step 4 walks the delta forest the way index-pack does: each whole object is inflated once and
//! each delta applied once to its already-decoded base, so the work is linear in the pack rather
//! than in the sum of chain lengths; subtrees are spread over threads by rayon.

use super::data::{decode_entry_header, EntryKind};
use super::Pack;
use crate::hash::ObjectId;
use crate::{delta, zlib, Error, ObjectKind, Result};
use bytes::Bytes;
use parking_lot::Mutex;
use rayon::prelude::*;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// What a successful verification found.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct VerifyReport {
    /// Objects checked.
    pub objects: u64,
    /// How many of them were stored as deltas.
    pub deltas: u64,
    /// The longest delta chain.
    pub max_chain: u32,
}

const NO_BASE: u32 = u32::MAX;

/// One entry, in offset order.
#[derive(Debug, Clone, Copy)]
struct Node {
    header_len: u8,
    /// 1-4 for whole objects; 0 for deltas.
    kind: u8,
    size: u64,
}

/// The first failure seen (lowest offset), shared by the worker threads.
struct FirstError {
    error: Mutex<Option<(u64, Error)>>,
    stop: AtomicBool,
}

impl FirstError {
    fn record(&self, offset: u64, error: Error) {
        let mut slot = self.error.lock();
        if slot.as_ref().is_none_or(|(o, _)| offset < *o) {
            *slot = Some((offset, error));
        }
        self.stop.store(true, Ordering::Relaxed);
    }
}

impl Pack {
    fn check_index(&self) -> Result<()> {
        let index = self.index();
        let raw = index.raw();
        let body = &raw[..raw.len() - 20];
        let digest = sha1dc::digest(body).map_err(|_| {
            Error::corrupt(
                index.name(),
                0,
                "the index carries a SHA-1 collision attack",
            )
        })?;
        if digest.as_ref() != index.index_checksum() {
            return Err(Error::corrupt(
                index.name(),
                raw.len() as u64 - 20,
                "the index checksum does not match its content",
            ));
        }
        let mut prev: Option<ObjectId> = None;
        for i in 0..index.len() {
            let id = index.id(i);
            if prev.is_some_and(|p| p >= id) {
                return Err(Error::corrupt(
                    index.name(),
                    0,
                    format!("ids are not strictly ascending at entry {i} ({id})"),
                ));
            }
            prev = Some(id);
            // A lookup goes through the fanout: it finds every id exactly where it is only when
            // the fanout counts the ids correctly.
            if index.find(&id) != Some(i) {
                return Err(Error::corrupt(
                    index.name(),
                    0,
                    format!("the fanout does not match the ids at entry {i} ({id})"),
                ));
            }
        }
        Ok(())
    }

    fn check_trailer(&self) -> Result<()> {
        let len = self.data_len();
        let mut hasher = sha1dc::Hasher::new();
        let chunk = 8 << 20;
        let mut at = 0;
        let body = len - 20;
        let ranges: Vec<_> = std::iter::from_fn(|| {
            (at < body).then(|| {
                let r = at..(at + chunk).min(body);
                at = r.end;
                r
            })
        })
        .collect();
        for bytes in self.data().read_many(&ranges) {
            hasher.update(&bytes?);
        }
        let digest = hasher.finalize().map_err(|_| {
            Error::corrupt(
                self.data_name(),
                0,
                "the pack carries a SHA-1 collision attack",
            )
        })?;
        let trailer = self.data().read(body..len)?;
        if digest.as_ref() != &trailer[..] {
            return Err(Error::corrupt(
                self.data_name(),
                body,
                "the pack checksum does not match its content (the file is damaged)",
            ));
        }
        Ok(())
    }

    /// Checks the whole pack and index. `progress` counts objects checked so far.
    pub fn verify(&self, progress: &AtomicU64) -> Result<VerifyReport> {
        self.check_index()?;
        let (trailer, entries) =
            rayon::join(|| self.check_trailer(), || self.verify_objects(progress));
        // The trailer names the damage less precisely; an object error is more useful first.
        let report = entries?;
        trailer?;
        Ok(report)
    }

    fn entry_bytes(&self, offsets: &[u64], k: usize) -> Result<Bytes> {
        Ok(self.data().read(offsets[k]..offsets[k + 1])?)
    }

    fn verify_objects(&self, progress: &AtomicU64) -> Result<VerifyReport> {
        let rev = self.reverse_index()?;
        if let Some(&(offset, pos)) = rev.misplaced.first() {
            return Err(Error::corrupt(
                self.index().name(),
                0,
                format!(
                    "object {} is placed at offset {offset}, outside the pack's entries or on top of another object",
                    self.index().id(pos)
                ),
            ));
        }
        let offsets = &rev.offsets;
        let positions = &rev.positions;
        let n = positions.len();
        // Pass 1: headers, CRCs and delta bases, in parallel over entries.
        let headers: Vec<Result<(Node, u32)>> = (0..n)
            .into_par_iter()
            .map(|k| {
                let offset = offsets[k];
                let bytes = self.entry_bytes(offsets, k)?;
                if let Some(want) = self.index().crc32(positions[k]) {
                    let got = crc32fast::hash(&bytes);
                    if got != want {
                        return Err(Error::corrupt(
                            self.data_name(),
                            offset,
                            format!(
                                "object {}: CRC32 {got:08x} does not match the index's {want:08x}",
                                self.index().id(positions[k])
                            ),
                        ));
                    }
                }
                let header = decode_entry_header(&bytes, offset, self.hash)
                    .map_err(|what| Error::corrupt(self.data_name(), offset, what))?;
                let (kind, base) = match header.kind {
                    EntryKind::Base(kind) => (kind as u8, NO_BASE),
                    _ => {
                        let base_offset = self
                            .delta_base_offset(offset, &header)?
                            .expect("deltas have bases");
                        let base = offsets[..n].binary_search(&base_offset).map_err(|_| {
                            Error::corrupt(
                                self.data_name(),
                                offset,
                                format!("the delta's base offset {base_offset} is not the start of an entry"),
                            )
                        })?;
                        (0, base as u32)
                    }
                };
                if header.header_len > u8::MAX as usize {
                    return Err(Error::corrupt(self.data_name(), offset, "the entry header is too long"));
                }
                Ok((
                    Node {
                        header_len: header.header_len as u8,
                        kind,
                        size: header.size,
                    },
                    base,
                ))
            })
            .collect();
        let mut nodes = Vec::with_capacity(n);
        let mut bases = Vec::with_capacity(n);
        for h in headers {
            let (node, base) = h?;
            nodes.push(node);
            bases.push(base);
        }
        // Children lists in one array (counting sort by base).
        let mut child_start = vec![0u32; n + 1];
        for &b in &bases {
            if b != NO_BASE {
                child_start[b as usize + 1] += 1;
            }
        }
        for i in 0..n {
            child_start[i + 1] += child_start[i];
        }
        let mut fill = child_start.clone();
        let mut children = vec![0u32; child_start[n] as usize];
        for (k, &b) in bases.iter().enumerate() {
            if b != NO_BASE {
                children[fill[b as usize] as usize] = k as u32;
                fill[b as usize] += 1;
            }
        }
        drop(fill);
        // Every delta must hang below a whole object; anything else is a cycle.
        let mut reached = vec![false; n];
        let mut stack: Vec<u32> = (0..n as u32)
            .filter(|&k| bases[k as usize] == NO_BASE)
            .collect();
        let roots = stack.clone();
        let mut max_chain = 0u32;
        let mut depth = vec![0u32; n];
        while let Some(k) = stack.pop() {
            reached[k as usize] = true;
            for &c in
                &children[child_start[k as usize] as usize..child_start[k as usize + 1] as usize]
            {
                depth[c as usize] = depth[k as usize] + 1;
                max_chain = max_chain.max(depth[c as usize]);
                stack.push(c);
            }
        }
        if let Some(k) = reached.iter().position(|r| !r) {
            return Err(Error::corrupt(
                self.data_name(),
                offsets[k],
                format!(
                    "object {}: its delta chain is a cycle",
                    self.index().id(positions[k])
                ),
            ));
        }
        drop((reached, depth));
        // Pass 2: inflate, apply, hash, down every tree.
        let first_error = FirstError {
            error: Mutex::new(None),
            stop: AtomicBool::new(false),
        };
        let ctx = Walk {
            pack: self,
            offsets,
            positions,
            nodes: &nodes,
            children: &children,
            child_start: &child_start,
            progress,
            first_error: &first_error,
        };
        roots.par_iter().for_each(|&k| {
            let kind = ObjectKind::from_pack_type(nodes[k as usize].kind)
                .expect("roots are whole objects");
            ctx.visit(k as usize, kind, None);
        });
        if let Some((_, error)) = first_error.error.into_inner() {
            return Err(error);
        }
        Ok(VerifyReport {
            objects: n as u64,
            deltas: (n - roots.len()) as u64,
            max_chain,
        })
    }
}

/// The shared state of the delta-forest walk.
struct Walk<'a> {
    pack: &'a Pack,
    offsets: &'a [u64],
    positions: &'a [u32],
    nodes: &'a [Node],
    children: &'a [u32],
    child_start: &'a [u32],
    progress: &'a AtomicU64,
    first_error: &'a FirstError,
}

impl Walk<'_> {
    /// Decodes entry `k` (against `base` if it is a delta), checks its id, then its subtree.
    fn visit(&self, k: usize, kind: ObjectKind, base: Option<&[u8]>) {
        if self.first_error.stop.load(Ordering::Relaxed) {
            return;
        }
        match self.decode(k, kind, base) {
            Ok(data) => self.descend(k, kind, data),
            Err(e) => self.first_error.record(self.offsets[k], e),
        }
    }

    /// Checks the subtree below entry `k`, whose object is `data`. A chain of single children
    /// stays in this frame, holding one base at a time; branches fan out over threads.
    fn descend(&self, mut k: usize, kind: ObjectKind, mut data: Vec<u8>) {
        loop {
            self.progress.fetch_add(1, Ordering::Relaxed);
            let kids =
                &self.children[self.child_start[k] as usize..self.child_start[k + 1] as usize];
            match kids {
                [] => return,
                [only] => {
                    if self.first_error.stop.load(Ordering::Relaxed) {
                        return;
                    }
                    k = *only as usize;
                    match self.decode(k, kind, Some(&data)) {
                        Ok(next) => data = next,
                        Err(e) => return self.first_error.record(self.offsets[k], e),
                    }
                }
                many => {
                    many.par_iter()
                        .for_each(|&c| self.visit(c as usize, kind, Some(&data)));
                    return;
                }
            }
        }
    }

    fn decode(&self, k: usize, kind: ObjectKind, base: Option<&[u8]>) -> Result<Vec<u8>> {
        let pack = self.pack;
        let offset = self.offsets[k];
        let node = self.nodes[k];
        let bytes = pack.entry_bytes(self.offsets, k)?;
        let inflated = zlib::inflate_exact(&bytes[node.header_len as usize..], node.size)
            .map_err(|e| Error::corrupt(pack.data_name(), offset, format!("entry data: {e}")))?;
        let data = match base {
            None => inflated,
            Some(base) => delta::apply(base, &inflated)
                .map_err(|e| Error::corrupt(pack.data_name(), offset, format!("delta: {e}")))?,
        };
        let want = pack.index().id(self.positions[k]);
        let got = ObjectId::compute(kind, &data)
            .map_err(|e| Error::corrupt(pack.data_name(), offset, format!("object {want}: {e}")))?;
        if got != want {
            return Err(Error::corrupt(
                pack.data_name(),
                offset,
                format!("object {want}: its content hashes to {got}"),
            ));
        }
        Ok(data)
    }
}
