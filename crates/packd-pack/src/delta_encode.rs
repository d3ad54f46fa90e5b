//! Making a delta of one object against another, in git's delta format (see
//! `packd_odb::delta` for the layout).
//!
//! The base is indexed by a hash of each 16-byte block at 16-byte steps; the target is scanned
//! byte by byte, and where its next 16 bytes hash to a base block the match is checked and
//! extended both ways. Matched runs become copies, everything else inserts. This is enough to
//! find the shared runs of two versions of one file or tree, which is all a fetch needs when an
//! object's delta on disk cannot be sent (a full delta search comes with repacking).

use std::collections::HashMap;

/// The block size of the base index, and the shortest copy worth making.
const BLOCK: usize = 16;

/// Candidates kept per block hash (the most recent ones).
const MAX_PER_HASH: usize = 8;

/// The largest copy one instruction can express.
const MAX_COPY: usize = 0xff_ffff;

fn block_hash(block: &[u8]) -> u64 {
    // FNV-1a over the block: cheap, and collisions are checked anyway.
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in block {
        h ^= b as u64;
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
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

/// A delta turning `base` into `target`, or `None` when it would not be smaller than `limit`
/// bytes (the caller's alternative) or the base is too large to address (4 GiB).
pub(crate) fn encode(base: &[u8], target: &[u8], limit: usize) -> Option<Vec<u8>> {
    if base.len() > u32::MAX as usize || base.len() < BLOCK {
        return None;
    }
    let mut index: HashMap<u64, Vec<u32>> = HashMap::with_capacity(base.len() / BLOCK + 1);
    for start in (0..=base.len() - BLOCK).step_by(BLOCK) {
        let slot = index
            .entry(block_hash(&base[start..start + BLOCK]))
            .or_default();
        if slot.len() == MAX_PER_HASH {
            slot.remove(0);
        }
        slot.push(start as u32);
    }
    let mut out = Vec::with_capacity(target.len() / 4 + 16);
    push_varint(&mut out, base.len() as u64);
    push_varint(&mut out, target.len() as u64);
    let mut pending = 0; // start of bytes not yet emitted
    let mut i = 0;
    while i + BLOCK <= target.len() {
        let mut best: Option<(usize, usize, usize)> = None; // (base start, target start, len)
        if let Some(starts) = index.get(&block_hash(&target[i..i + BLOCK])) {
            for &s in starts.iter().rev() {
                let s = s as usize;
                if base[s..s + BLOCK] != target[i..i + BLOCK] {
                    continue;
                }
                let mut len = BLOCK;
                while s + len < base.len()
                    && i + len < target.len()
                    && base[s + len] == target[i + len]
                {
                    len += 1;
                }
                // Grow backwards over bytes that would otherwise be inserted.
                let mut back = 0;
                while back < i - pending && back < s && base[s - back - 1] == target[i - back - 1] {
                    back += 1;
                }
                let total = len + back;
                if best.is_none_or(|(_, _, l)| total > l) {
                    best = Some((s - back, i - back, total));
                }
            }
        }
        match best {
            Some((s, t, len)) => {
                push_inserts(&mut out, &target[pending..t]);
                push_copy(&mut out, s, len);
                i = t + len;
                pending = i;
                if out.len() >= limit {
                    return None;
                }
            }
            None => i += 1,
        }
    }
    push_inserts(&mut out, &target[pending..]);
    (out.len() < limit).then_some(out)
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
