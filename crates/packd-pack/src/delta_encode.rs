//! Making a delta of one object against another, in git's delta format (see
//! `packd_odb::delta` for the layout).
//!
//! The base is indexed by a hash of each 16-byte block at 16-byte steps ([`DeltaIndex`], built
//! once per base); the target is scanned byte by byte, and where its next 16 bytes are a base
//! block the match is extended both ways (the first 16 base blocks with those bytes among the
//! first 64 of their table slot are tried, the longest match taken). Matched runs become
//! copies, everything else inserts. After a copy the scan restarts 15 bytes before its end, as
//! git's diff-delta does (its rolling window ends at the next byte): a copy can then go on
//! from another place of the base whose bytes before it are the same (a `.po` file's
//! `#: file.c:123` lines, where only digits change), if it is long enough to be worth it.
//!
//! Against git's own deltas for the same pairs (git/git v2.35.0..v2.39.0, the 12,404 pairs git
//! pack-objects chose with window 10, depth 50), these are 0.970x git's bytes raw and 0.981x
//! compressed (the `delta_quality` measurement in `delta_search`).
//!
//! The index is a flat table of chains (no map of vectors, no per-block allocation) and a
//! block's hash is two 8-byte loads and a multiply: on a fetch of git/git 8 days behind, where
//! a third of the CPU went to encoding deltas, a map with SipHash and an FNV-1a over each
//! block's bytes (at every target position) cost several times this. The deltas differ from
//! that map's only where a slot's chain is longer than 64 (a block repeated that often hides
//! older blocks sharing its slot): git/git's fetches 1 to 128 days behind were byte for byte
//! the same.

/// The block size of the base index, and the shortest copy worth making.
const BLOCK: usize = 16;

/// Base blocks with the target's bytes tried at one target position (the first ones).
const MAX_PER_HASH: usize = 16;

/// The largest copy one instruction can express.
const MAX_COPY: usize = 0xff_ffff;

/// A match this long is taken without trying the other candidates.
const GOOD_ENOUGH: usize = 4096;

/// Bytes beyond its instruction's that a copy found by a window overlapping the last copy must
/// give. Measured on git/git (v2.35.0..v2.39.0, git's 12,404 delta pairs): 0 gave deltas
/// 1.3% larger than git's once compressed (short copies in place of text that compresses);
/// 4, 12, 20, 32 and 64 gave 0.9996, 0.9841, 0.9810, 0.9809 and 1.0038 times git's bytes.
const CONTINUATION: usize = 24;

/// Most chain links followed for one target position (blocks with other bytes that share
/// a table slot are skipped without counting as candidates).
const MAX_CHAIN: usize = 64;

/// The hash of the 16 bytes at the start of `block` (at least 16 long).
#[inline]
fn block_hash(block: &[u8]) -> u64 {
    let a = u64::from_le_bytes(block[..8].try_into().expect("8 bytes"));
    let b = u64::from_le_bytes(block[8..16].try_into().expect("8 bytes"));
    (a.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ b.rotate_left(29)).wrapping_mul(0xff51_afd7_ed55_8ccd)
}

fn push_varint(out: &mut Vec<u8>, mut n: u64) {
    while n >= 0x80 {
        out.push((n as u8 & 0x7f) | 0x80);
        n >>= 7;
    }
    out.push(n as u8);
}

fn push_inserts(out: &mut Vec<u8>, mut bytes: &[u8]) {
    while !bytes.is_empty() {
        let n = bytes.len().min(127);
        out.push(n as u8);
        out.extend_from_slice(&bytes[..n]);
        bytes = &bytes[n..];
    }
}

/// Bytes of the instruction copying `len` bytes (at most [`MAX_COPY`]) from `offset`.
fn copy_cost(offset: usize, len: usize) -> usize {
    let nonzero = |mut n: usize, bytes: usize| {
        let mut count = 0;
        for _ in 0..bytes {
            count += usize::from(n & 0xff != 0);
            n >>= 8;
        }
        count
    };
    1 + nonzero(offset, 4) + nonzero(len.min(MAX_COPY), 3)
}

fn push_copy(out: &mut Vec<u8>, mut offset: usize, mut len: usize) {
    while len > 0 {
        let n = len.min(MAX_COPY);
        let mut op = 0x80u8;
        let at = out.len();
        out.push(0);
        for i in 0..4 {
            let b = ((offset >> (8 * i)) & 0xff) as u8;
            if b != 0 {
                op |= 1 << i;
                out.push(b);
            }
        }
        for i in 0..3 {
            let b = ((n >> (8 * i)) & 0xff) as u8;
            if b != 0 {
                op |= 1 << (4 + i);
                out.push(b);
            }
        }
        out[at] = op;
        offset += n;
        len -= n;
    }
}

/// The blocks of one base, by hash: built once per base and used for every target tried
/// against it (a delta search tries each base against up to a window of targets).
///
/// `heads[slot]` is the first block's number + 1 (0: none) and `older[block]` the next block
/// in the same slot, the same way (blocks are added from the end, so a chain runs from the
/// start of the base, git's order). A block equal to the one before it is left out (a run
/// of one byte, or of zeroes, would otherwise fill its slot's chain with copies of itself; a
/// match found at the run's first block extends over the run anyway).
pub(crate) struct DeltaIndex {
    heads: Vec<u32>,
    older: Vec<u32>,
    bits: u32,
    base_len: usize,
}

impl DeltaIndex {
    /// The index of `base`, or `None` when it is too short to have a block or too large to
    /// address (4 GiB).
    pub(crate) fn new(base: &[u8]) -> Option<DeltaIndex> {
        if base.len() > u32::MAX as usize || base.len() < BLOCK {
            return None;
        }
        let blocks = base.len() / BLOCK;
        let bits = (blocks * 2).next_power_of_two().max(16).trailing_zeros();
        let mut index = DeltaIndex {
            heads: vec![0u32; 1 << bits],
            older: vec![0u32; blocks],
            bits,
            base_len: base.len(),
        };
        for block in (0..blocks).rev() {
            let at = block * BLOCK;
            if block > 0 && base[at - BLOCK..at] == base[at..at + BLOCK] {
                continue;
            }
            let slot = index.slot_of(block_hash(&base[at..]));
            index.older[block] = index.heads[slot];
            index.heads[slot] = block as u32 + 1;
        }
        Some(index)
    }

    #[inline]
    fn slot_of(&self, hash: u64) -> usize {
        (hash >> (64 - self.bits)) as usize
    }

    /// Bytes of memory the index holds (for a search's window-memory limit).
    pub(crate) fn memory(&self) -> usize {
        (self.heads.len() + self.older.len()) * std::mem::size_of::<u32>()
    }

    /// A delta turning `base` (the bytes this index was built from) into `target`, or `None`
    /// when it would not be smaller than `limit` bytes (the caller's alternative). Gives up as
    /// soon as the delta so far, inserts pending included, reaches `limit`.
    pub(crate) fn encode(&self, base: &[u8], target: &[u8], limit: usize) -> Option<Vec<u8>> {
        let mut out = Vec::with_capacity((target.len() / 4 + 16).min(limit));
        self.encode_into(base, target, limit, &mut out)
            .then_some(out)
    }

    /// [`DeltaIndex::encode`] into `out` (cleared first), which a caller trying many pairs
    /// reuses; false when there is no delta smaller than `limit` (`out` then holds a part).
    pub(crate) fn encode_into(
        &self,
        base: &[u8],
        target: &[u8],
        limit: usize,
        out: &mut Vec<u8>,
    ) -> bool {
        out.clear();
        debug_assert_eq!(base.len(), self.base_len, "the index's own base");
        if base.len() != self.base_len {
            return false;
        }
        push_varint(out, base.len() as u64);
        push_varint(out, target.len() as u64);
        let mut pending = 0; // start of bytes not yet emitted
                             // The start of the target's window looked up: from 15 bytes before `pending` after a
                             // copy, so that a copy can go on from another place in the base that has the same
                             // bytes before it (git's scan does the same: its window ends at the next byte).
        let mut i = 0;
        while i + BLOCK <= target.len() {
            // (base start, target start, length) of the best copy of bytes from `pending` on.
            let mut best: Option<(usize, usize, usize)> = None;
            let here = &target[i..i + BLOCK];
            let mut link = self.heads[self.slot_of(block_hash(here))];
            let (mut tried, mut followed) = (0, 0);
            while link != 0 && tried < MAX_PER_HASH && followed < MAX_CHAIN {
                let s = (link as usize - 1) * BLOCK;
                link = self.older[link as usize - 1];
                followed += 1;
                if base[s..s + BLOCK] != *here {
                    continue;
                }
                tried += 1;
                let end = i
                    + BLOCK
                    + packd_odb::delta::common_prefix_len(&base[s + BLOCK..], &target[i + BLOCK..]);
                let (from, to) = if i >= pending {
                    // Grow backwards over bytes that would otherwise be inserted.
                    let mut back = 0;
                    while back < i - pending
                        && back < s
                        && base[s - back - 1] == target[i - back - 1]
                    {
                        back += 1;
                    }
                    (s - back, i - back)
                } else {
                    (s + (pending - i), pending)
                };
                let len = end - to;
                if best.is_none_or(|(_, _, l)| len > l) {
                    best = Some((from, to, len));
                    if len >= GOOD_ENOUGH {
                        break;
                    }
                }
            }
            match best {
                // A copy going on from another place must be worth its instruction, and
                // more: a short one stops the window just after it from finding a longer
                // match that would have taken its bytes too.
                Some((s, t, len)) if i >= pending || len >= copy_cost(s, len) + CONTINUATION => {
                    push_inserts(out, &target[pending..t]);
                    push_copy(out, s, len);
                    pending = t + len;
                    i = pending.saturating_sub(BLOCK - 1);
                    if out.len() >= limit {
                        return false;
                    }
                }
                _ => {
                    i += 1;
                    // Inserts cost at least their bytes.
                    if out.len() + i.saturating_sub(pending) >= limit {
                        return false;
                    }
                }
            }
        }
        push_inserts(out, &target[pending..]);
        out.len() < limit
    }
}

/// A delta turning `base` into `target`, or `None` when it would not be smaller than `limit`
/// bytes (the caller's alternative) or the base is too short or too large to index.
pub(crate) fn encode(base: &[u8], target: &[u8], limit: usize) -> Option<Vec<u8>> {
    DeltaIndex::new(base)?.encode(base, target, limit)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(base: &[u8], target: &[u8]) -> usize {
        let delta = encode(base, target, usize::MAX).expect("a delta");
        assert_eq!(packd_odb::delta::apply(base, &delta).unwrap(), target);
        delta.len()
    }

    #[test]
    fn deltas_apply_back_to_the_target() {
        let base: Vec<u8> = (0..20_000u32)
            .flat_map(|i| (i * 7919).to_le_bytes())
            .collect();
        let mut target = base.clone();
        target.splice(1000..1010, b"something new here".iter().copied());
        target.extend_from_slice(b"tail");
        let mut moved = base[40_000..].to_vec();
        moved.extend_from_slice(&base[..40_000]);
        assert!(check(&base, &target) < 200);
        assert!(check(&base, &moved) < 200);
        check(&base, b"");
        check(&base, b"short");
        check(&base, &base);
        let random: Vec<u8> = (0..5000u32)
            .map(|i| (i.wrapping_mul(2654435761) >> 13) as u8)
            .collect();
        check(&base, &random);
        // Many blocks with the same bytes, and blocks sharing table slots.
        let repeated: Vec<u8> = b"0123456789abcdef".repeat(500);
        let mut edited = repeated.clone();
        edited[4_000] = b'!';
        assert!(check(&repeated, &edited) < repeated.len() / 4);
        let mixed: Vec<u8> = (0..3_000u32)
            .flat_map(|i| {
                if i % 3 == 0 {
                    [0u8; 4]
                } else {
                    i.to_be_bytes()
                }
            })
            .collect();
        let mut shifted = mixed[5..].to_vec();
        shifted.extend_from_slice(&mixed[..5]);
        assert!(check(&mixed, &shifted) < 64);
        // Copies longer than one instruction can hold are split.
        let big = vec![7u8; MAX_COPY + 100];
        check(&big, &big);
    }

    #[test]
    fn no_delta_when_it_is_not_smaller() {
        let base = vec![1u8; 100];
        let target: Vec<u8> = (0..100u8).collect();
        assert!(encode(&base, &target, 50).is_none());
        assert!(encode(b"tiny", &target, 1000).is_none());
    }
}

#[cfg(test)]
mod continuation_tests {
    use super::*;

    /// A `.po`-like file whose references' line numbers all moved: each copy ends at a digit,
    /// and goes on from another place of the base with the same bytes before it.
    #[test]
    fn copies_go_on_from_another_place() {
        let po = |shift: u32| -> Vec<u8> {
            (0..400u32)
                .flat_map(|k| {
                    format!(
                        "#: builtin/commit.c:{} builtin/commit.c:{}\nmsgid \"message number {k} of the file\"\nmsgstr \"\"\n\n",
                        100 + k * 3 + shift,
                        2000 + k * 7 + shift
                    )
                    .into_bytes()
                })
                .collect()
        };
        let (base, target) = (po(0), po(1));
        let delta = encode(&base, &target, usize::MAX).expect("a delta");
        assert_eq!(packd_odb::delta::apply(&base, &delta).unwrap(), target);
        // 6,185 bytes; 7,790 when no copy goes on from another place.
        assert!(delta.len() < 7_000, "{} bytes", delta.len());
    }
}
