//! One chunk's sliding window (git's `find_deltas` and `try_delta`): each object in turn is
//! tried against the objects before it in the window, newest first, and keeps the smallest
//! delta found; then it joins the window and the oldest leaves.

use super::{Candidate, Choice, SearchOptions};
use crate::delta_encode::DeltaIndex;
use bytes::Bytes;
use std::collections::VecDeque;
use std::time::Instant;

/// Decided objects reported to the progress callback at a time.
const PROGRESS_EVERY: u64 = 64;

/// One object in the window: its bytes and index once something needed them.
struct Slot {
    /// The candidate.
    idx: u32,
    data: Option<Bytes>,
    /// `Some(None)`: built, but the object cannot be indexed (too short or too large).
    index: Option<Option<DeltaIndex>>,
    /// Its chain's depth (0: whole).
    depth: u32,
    /// Bytes held: data and index.
    memory: u64,
}

impl Slot {
    fn new(idx: u32, depth: u32) -> Slot {
        Slot {
            idx,
            data: None,
            index: None,
            depth,
            memory: 0,
        }
    }

    /// Loads the bytes if they are not here yet, adding them to `memory`.
    fn load<E>(
        &mut self,
        load: &(dyn Fn(u32) -> Result<Bytes, E> + Sync),
        memory: &mut u64,
    ) -> Result<(), E> {
        if self.data.is_none() {
            let data = load(self.idx)?;
            self.memory += data.len() as u64;
            *memory += data.len() as u64;
            self.data = Some(data);
        }
        Ok(())
    }
}

/// The best delta found so far for the object being decided.
struct Best {
    /// Its base's position in the window.
    position: usize,
    delta: Vec<u8>,
    depth: u32,
}

/// What one try gave.
enum Tried {
    /// The base is of another kind: so are all older ones in the window (the order is by kind).
    Stop,
    /// No better delta.
    No,
    /// A better delta than the best so far, in the scratch buffer.
    Better,
}

/// Searches one chunk of the window order, giving the choice for each object that gets a delta
/// (the others stay whole).
pub(super) fn search_chunk<E>(
    candidates: &[Candidate],
    chunk: &[u32],
    options: &SearchOptions,
    load: &(dyn Fn(u32) -> Result<Bytes, E> + Sync),
    may_base: &(dyn Fn(u32, u32) -> bool + Sync),
    progress: &dyn Fn(u64),
) -> Result<Vec<(u32, Choice)>, E> {
    let level = if options.compression_level < 0 {
        6
    } else {
        options.compression_level.min(12)
    };
    let mut compressor =
        libdeflater::Compressor::new(libdeflater::CompressionLvl::new(level).unwrap_or_default());
    let others = options.window.saturating_sub(1).max(1);
    let mut window: VecDeque<Slot> = VecDeque::with_capacity(others + 1);
    let mut memory = 0u64;
    // The deltas found: (target, base, depth, inflated size, end of its compressed bytes in
    // `kept`). All of a chunk's compressed deltas go into one buffer, handed out as slices of
    // it: a search keeps them until the pack is written, and 631,000 allocations of their own
    // on git/git's `repack -adf`, interleaved with the window's short-lived objects and
    // indexes, left the allocator's arenas with hundreds of megabytes free and unreturned.
    let mut found: Vec<(u32, u32, u32, u64, usize)> = Vec::new();
    let mut kept: Vec<u8> = Vec::new();
    let mut unreported = 0u64;
    // Where each try encodes: swapped with the best delta's when it is better.
    let mut scratch = Vec::new();
    for (n, &target) in chunk.iter().enumerate() {
        if options.deadline.is_some_and(|d| Instant::now() >= d) {
            unreported += (chunk.len() - n) as u64;
            break;
        }
        while window.len() > others
            || (options.window_memory > 0 && memory > options.window_memory && window.len() > 1)
        {
            let oldest = window.pop_front().expect("a slot");
            memory -= oldest.memory;
        }
        let c = &candidates[target as usize];
        // Deltas already resting on the target deepen with it (git's check_delta_limit).
        let max_depth = options.depth.saturating_sub(c.above);
        let mut slot = Slot::new(target, if c.base_only { c.base_depth } else { 0 });
        let mut best: Option<Best> = None;
        if !c.base_only && max_depth > 0 {
            for position in (0..window.len()).rev() {
                if !may_base(target, window[position].idx) {
                    continue;
                }
                let tried = try_delta(
                    candidates,
                    &mut slot,
                    &mut window[position],
                    best.as_ref(),
                    max_depth,
                    load,
                    &mut memory,
                    &mut scratch,
                )?;
                match tried {
                    Tried::Stop => break,
                    Tried::No => {}
                    Tried::Better => {
                        let depth = window[position].depth + 1;
                        match &mut best {
                            Some(best) => {
                                std::mem::swap(&mut best.delta, &mut scratch);
                                (best.position, best.depth) = (position, depth);
                            }
                            None => {
                                best = Some(Best {
                                    position,
                                    delta: std::mem::take(&mut scratch),
                                    depth,
                                })
                            }
                        }
                    }
                }
            }
        }
        unreported += 1;
        if unreported >= PROGRESS_EVERY {
            progress(unreported);
            unreported = 0;
        }
        let Some(best) = best else {
            window.push_back(slot);
            continue;
        };
        slot.depth = best.depth;
        let base = window[best.position].idx;
        deflate_into(&mut compressor, &best.delta, &mut kept);
        found.push((
            target,
            base,
            best.depth,
            best.delta.len() as u64,
            kept.len(),
        ));
        if best.delta.capacity() > scratch.capacity() {
            scratch = best.delta;
        }
        if best.depth >= options.depth {
            // Nothing can be made against it: it leaves at once.
            memory -= slot.memory;
            continue;
        }
        // The base moves up to the newest place, after its delta, to stay in the window
        // longest: the next versions of the path are likely to want it too.
        window.push_back(slot);
        let base_slot = window.remove(best.position).expect("the base's slot");
        window.push_back(base_slot);
    }
    if unreported > 0 {
        progress(unreported);
    }
    kept.shrink_to_fit();
    let kept = Bytes::from(kept);
    let mut start = 0;
    let chosen = found
        .into_iter()
        .map(|(target, base, depth, delta_size, end)| {
            let compressed = kept.slice(start..end);
            start = end;
            let choice = Choice::Delta {
                base,
                depth,
                delta_size,
                compressed,
            };
            (target, choice)
        })
        .collect();
    Ok(chosen)
}

/// Tries `src` as a base for `trg`, with git's early rejections (`try_delta`): the delta must
/// be smaller than half the target (less the size of an id) at first, then smaller than the
/// best so far, both scaled down for a deep base; a base much larger or smaller than the
/// target is not tried at all.
#[allow(clippy::too_many_arguments)]
fn try_delta<E>(
    candidates: &[Candidate],
    trg: &mut Slot,
    src: &mut Slot,
    best: Option<&Best>,
    max_depth: u32,
    load: &(dyn Fn(u32) -> Result<Bytes, E> + Sync),
    memory: &mut u64,
    scratch: &mut Vec<u8>,
) -> Result<Tried, E> {
    let (t, s) = (&candidates[trg.idx as usize], &candidates[src.idx as usize]);
    if t.kind != s.kind {
        return Ok(Tried::Stop);
    }
    if src.depth >= max_depth {
        return Ok(Tried::No);
    }
    let (max_size, ref_depth) = match best {
        None => ((t.size / 2).saturating_sub(20), 1),
        Some(best) => (best.delta.len() as u64, best.depth),
    };
    let max_size =
        max_size * u64::from(max_depth - src.depth) / u64::from(max_depth - ref_depth + 1);
    if max_size == 0 {
        return Ok(Tried::No);
    }
    if t.size.saturating_sub(s.size) >= max_size || t.size < s.size / 32 {
        return Ok(Tried::No);
    }
    trg.load(load, memory)?;
    src.load(load, memory)?;
    let base = src.data.as_ref().expect("loaded");
    if src.index.is_none() {
        let index = DeltaIndex::new(base);
        let size = index.as_ref().map_or(0, |i| i.memory() as u64);
        src.memory += size;
        *memory += size;
        src.index = Some(index);
    }
    let Some(Some(index)) = &src.index else {
        return Ok(Tried::No);
    };
    let target = trg.data.as_ref().expect("loaded");
    let limit = usize::try_from(max_size)
        .unwrap_or(usize::MAX)
        .saturating_add(1);
    if !index.encode_into(base, target, limit, scratch) {
        return Ok(Tried::No);
    }
    if let Some(best) = best {
        // As small as the best: only a shallower chain is better.
        if scratch.len() == best.delta.len() && src.depth + 1 >= best.depth {
            return Ok(Tried::No);
        }
    }
    Ok(Tried::Better)
}

/// Appends `data` zlib-compressed to `out`.
fn deflate_into(compressor: &mut libdeflater::Compressor, data: &[u8], out: &mut Vec<u8>) {
    let at = out.len();
    out.resize(at + compressor.zlib_compress_bound(data.len()), 0);
    let n = compressor
        .zlib_compress(data, &mut out[at..])
        .expect("the bound is enough room");
    out.truncate(at + n);
}
