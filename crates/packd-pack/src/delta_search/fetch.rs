//! New deltas for a fetch: the objects to send whose stored form is whole, or a delta the
//! client cannot take, go through [`search`](super::search) before the pack is written, with
//! the client's versions of their paths as base-only candidates (git's preferred bases), within
//! a time budget.
//!
//! ```text
//! plan items ──> stored form (write.rs `choose`): a usable delta ──> reused, not searched
//!                                                  whole / unusable / loose ──> candidate
//! candidates + what the client has of their name-hashes (thin packs) ──> search (deadline)
//!            ──> by plan position: base (an item, or one the client has), compressed delta
//! ```
//!
//! In a clone (the client has nothing) whole objects are not searched: they are the bases of
//! the pack's chains. The bitmap gives the name-hashes; without one (a walked plan) nothing is
//! searched here and the walk's path bases serve (`write.rs`, `delta_against_path_base`).

use super::{search_where, Candidate, Choice, SearchOptions};
use crate::count::{Had, Planned, LOOSE};
use crate::write::{NameScans, Send};
use crate::{PackError, PackServer};
use packd_odb::pack::data::decode_entry_header;
use packd_odb::{HashKind, ObjectId};
use packd_reach::progress::Progress;
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// Enough bytes for any entry header.
const HEADER_BYTES: u64 = 64;

/// Bytes of a pack read at once for the entry headers.
const HEADER_WINDOW: u64 = 64 << 10;

/// The search's time for any fetch that has objects to search.
const BUDGET_BASE: Duration = Duration::from_millis(100);

/// And for each object searched: git's own search took 0.3 ms an object on git/git
/// (v2.35.0..v2.39.0, 17,152 objects in 5.2 s of CPU), so most searches end well before it.
const BUDGET_PER_OBJECT: Duration = Duration::from_millis(1);

/// The longest any fetch's search takes, however many objects.
const BUDGET_MAX: Duration = Duration::from_secs(20);

/// Objects searched in one fetch at most (the first ones in write order): bounds the memory
/// of the compressed deltas held until they are written.
const MAX_SEARCHED: usize = 100_000;

/// Objects the client has offered as bases for each object searched: the nearest of its
/// name-hash in pack order (git's preferred bases are the client's version of each path).
const PREFERRED_PER_OBJECT: usize = 2;

/// Same-name objects looked at on each side of an object for those.
const PREFERRED_LOOKED_AT: usize = 64;

/// The search's deadline for `objects` candidates, from now.
pub(crate) fn budget(objects: usize) -> Duration {
    (BUDGET_BASE + BUDGET_PER_OBJECT * objects.min(u32::MAX as usize) as u32).min(BUDGET_MAX)
}

/// A delta made for this fetch.
pub(crate) struct NewDelta {
    /// The base's place in the plan when it is sent too (`None`: the client has it).
    pub base_item: Option<u32>,
    /// The base.
    pub base_id: ObjectId,
    /// Bytes of the delta, inflated.
    pub delta_size: u64,
    /// The delta, zlib-compressed.
    pub compressed: bytes::Bytes,
}

impl PackServer {
    /// The new deltas of `plan`'s objects, by place in the plan (see the module documentation).
    /// Empty, at the cost of nothing but a look at each entry's header, when nothing needs a
    /// search; at no cost without a bitmap.
    pub(crate) fn new_deltas(
        &self,
        plan: &Planned,
        ofs_delta: bool,
        thin: bool,
        progress: &dyn Progress,
        cancel: &AtomicBool,
    ) -> Result<HashMap<u32, NewDelta>, PackError> {
        let (Some(index), Had::Bits(had)) = (self.loaded_bitmap(), &plan.had) else {
            return Ok(HashMap::new());
        };
        // A clone's whole objects are its chains' bases: only its deltas whose bases are not
        // sent (a shallow or filtered clone's) are searched.
        let fetch = !had.is_empty();
        // The objects to search, by stored form. Headers are read by copy, a window at a time,
        // as the writer reads (mapping them would leave every touched page of the pack
        // resident: 160 MB more for a clone of git/git's v2.39.0 when this read them mapped).
        let mut searched: Vec<u32> = Vec::new();
        let offsets = vec![0u64; plan.items.len()];
        let mut header = Vec::new();
        let mut window: (u32, u64, Vec<u8>) = (LOOSE, 0, Vec::new());
        // The entries are fetched ahead from object storage, not a window per round trip.
        let mut read_ahead = crate::write::ReadAhead::default();
        for (i, item) in plan.items.iter().enumerate() {
            read_ahead.before(plan, i);
            if i % 4096 == 0 && cancel.load(Ordering::Relaxed) {
                return Err(PackError::Cancelled);
            }
            if searched.len() >= MAX_SEARCHED {
                break;
            }
            if item.rank == LOOSE {
                searched.push(i as u32);
                continue;
            }
            let pack = &plan.packs[item.rank as usize];
            let head_end = (item.offset + HEADER_BYTES).min(pack.entries_end());
            let (rank, start, bytes) = &mut window;
            if *rank != item.rank || item.offset < *start || head_end > *start + bytes.len() as u64
            {
                // From object storage only the header: the window's far end would be a
                // block of its own, which the hints above did not fetch.
                let window = if pack.data().prefetches() {
                    HEADER_BYTES
                } else {
                    HEADER_WINDOW
                };
                let end = (item.offset + window).min(pack.entries_end());
                pack.data()
                    .read_copy_into(item.offset..end, bytes)
                    .map_err(packd_odb::Error::from)?;
                (*rank, *start) = (item.rank, item.offset);
            }
            let at = (item.offset - *start) as usize;
            let head = &bytes[at..at + (head_end - item.offset) as usize];
            let entry = decode_entry_header(head, item.offset, HashKind::Sha1)
                .map_err(|what| packd_odb::Error::corrupt(pack.data_name(), item.offset, what))?;
            let send = self.choose(
                plan,
                i,
                item.rank,
                pack,
                &entry,
                ofs_delta,
                thin,
                &offsets,
                0,
                &mut header,
            )?;
            match send {
                Send::Reuse { delta: true, .. } => {}
                Send::Reuse { delta: false, .. } if !fetch => {}
                _ => searched.push(i as u32),
            }
        }
        if searched.is_empty() {
            return Ok(HashMap::new());
        }
        let objects = self.repo.objects();
        let mut candidates = Vec::with_capacity(searched.len());
        let mut bits = Vec::with_capacity(searched.len());
        let mut path_base_bits = Vec::with_capacity(searched.len());
        for &i in &searched {
            let id = plan.id(&plan.items[i as usize])?;
            let Some(found) = objects.header(&id)? else {
                return Err(PackError::BadRequest(format!(
                    "object {id} is missing from the repository"
                )));
            };
            let bit = index.bit_of_id(&id)?;
            // An object from outside the bitmap has no name-hash there: its path's comes
            // from the client's version of that path, when the count found one
            // (`Planned::path_bases`), which is then offered as its base below.
            let path_base = match bit {
                Some(_) => None,
                None => match plan.path_bases.get(&id) {
                    Some(base) => index.bit_of_id(base)?,
                    None => None,
                },
            };
            let name_hash = match bit.or(path_base) {
                Some(bit) => index.name_hash(bit)?.unwrap_or(0),
                None => 0,
            };
            bits.push(bit);
            path_base_bits.push(path_base);
            candidates.push(Candidate {
                id,
                kind: found.kind,
                size: found.size,
                name_hash,
                base_only: false,
                base_depth: 0,
                above: 0,
            });
        }
        let targets = candidates.len();
        if thin && fetch {
            let mut scans = NameScans::new();
            let mut offered = HashSet::new();
            let mut preferred = Vec::new();
            for (c, bit) in bits.iter().enumerate() {
                if let (None, Some(b)) = (bit, path_base_bits[c]) {
                    let kind_bits = index.type_bitmap(candidates[c].kind);
                    if had.get(b) && kind_bits.get(b) && offered.insert(b) {
                        preferred.push((b, candidates[c].name_hash));
                    }
                    continue;
                }
                let (Some(bit), hash) = (*bit, candidates[c].name_hash) else {
                    continue;
                };
                if hash == 0 {
                    continue;
                }
                let kind_bits = index.type_bitmap(candidates[c].kind);
                let same = self.same_name(index, &mut scans, hash, bit)?;
                let at = same.partition_point(|&k| (k as u32 as u64) < bit);
                let mut found = 0;
                let (mut lo, mut hi, mut looked) = (at, at, 0);
                while found < PREFERRED_PER_OBJECT
                    && looked < 2 * PREFERRED_LOOKED_AT
                    && (lo > 0 || hi < same.len())
                {
                    let mut near = Vec::with_capacity(2);
                    if hi < same.len() {
                        near.push(same[hi] as u32 as u64);
                        hi += 1;
                    }
                    if lo > 0 {
                        lo -= 1;
                        near.push(same[lo] as u32 as u64);
                    }
                    for b in near {
                        looked += 1;
                        if b != bit
                            && had.get(b)
                            && kind_bits.get(b)
                            && found < PREFERRED_PER_OBJECT
                        {
                            found += 1;
                            if offered.insert(b) {
                                preferred.push((b, hash));
                            }
                        }
                    }
                }
            }
            for (b, hash) in preferred {
                let Some((id, location)) = index.object_at(b)? else {
                    continue;
                };
                let found = objects.header_at(&id, &location)?;
                candidates.push(Candidate {
                    id,
                    kind: found.kind,
                    size: found.size,
                    name_hash: hash,
                    base_only: true,
                    base_depth: 0,
                    above: 0,
                });
            }
        }
        progress.start("Compressing objects", targets as u64);
        let started = Instant::now();
        let options = SearchOptions {
            deadline: Some(started + budget(targets)),
            ..SearchOptions::default()
        };
        let load = |c: u32| -> Result<bytes::Bytes, PackError> {
            if cancel.load(Ordering::Relaxed) {
                return Err(PackError::Cancelled);
            }
            let id = &candidates[c as usize].id;
            match objects.read(id)? {
                Some(object) => Ok(object.data),
                None => Err(PackError::BadRequest(format!(
                    "object {id} is missing from the repository"
                ))),
            }
        };
        // A base is sent before its delta, or the client has it: git's index-pack takes a
        // reference to an object later in the pack, but not when the client also has that
        // object (it resolves the delta twice and gives up).
        let targets32 = targets as u32;
        let may_base =
            |t: u32, b: u32| b >= targets32 || searched[b as usize] < searched[t as usize];
        let choices = search_where(&candidates, &options, &load, &|_| {}, &may_base)?;
        let mut found = HashMap::new();
        for (c, choice) in choices.into_iter().enumerate().take(targets) {
            let Choice::Delta {
                base,
                delta_size,
                compressed,
                ..
            } = choice
            else {
                continue;
            };
            let base = base as usize;
            found.insert(
                searched[c],
                NewDelta {
                    base_item: (base < targets).then(|| searched[base]),
                    base_id: candidates[base].id,
                    delta_size,
                    compressed,
                },
            );
        }
        tracing::debug!(
            "delta search: {targets} objects, {} bases the client has, {} deltas, {:?}",
            candidates.len() - targets,
            found.len(),
            started.elapsed()
        );
        progress.finish(targets as u64);
        Ok(found)
    }
}
