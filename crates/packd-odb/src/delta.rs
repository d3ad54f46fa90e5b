//! Git's delta format and its application.
//!
//! ```text
//! delta   = src-size dst-size instruction*
//! size    = little-endian base-128 varint (7 bits a byte, high bit = more)
//! copy    = 1xxxxxxx [off0] [off1] [off2] [off3] [len0] [len1] [len2]
//!           bits 0-3 say which offset bytes follow, bits 4-6 which length bytes;
//!           a length of 0 means 0x10000
//! insert  = 0nnnnnnn followed by n (1..=127) literal bytes
//! 0x00    = reserved: an error
//! ```
//! A delta is hostile input like any other: every copy is checked against the base and the output
//! can never grow past the declared destination size.

/// Why a delta could not be applied.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DeltaError {
    /// The delta ends inside its header or an instruction.
    #[error("the delta is truncated")]
    Truncated,
    /// The delta was made against a base of another size.
    #[error("the delta expects a base of {expected} bytes but the base has {actual}")]
    BaseSizeMismatch {
        /// The size the delta declares.
        expected: u64,
        /// The base's real size.
        actual: u64,
    },
    /// A copy reads outside the base.
    #[error("a copy instruction reads bytes {start}..{end} of a {base_len}-byte base")]
    CopyOutOfBounds {
        /// First byte copied.
        start: u64,
        /// One past the last byte copied.
        end: u64,
        /// The base's size.
        base_len: u64,
    },
    /// The reserved instruction 0.
    #[error("the delta uses the reserved instruction 0")]
    ReservedInstruction,
    /// The instructions produce more or fewer bytes than declared.
    #[error("the delta produces {actual} bytes, not the {declared} it declares")]
    WrongResultSize {
        /// The declared destination size.
        declared: u64,
        /// What the instructions produce (a lower bound when too many).
        actual: u64,
    },
    /// A size varint longer than 64 bits.
    #[error("a size in the delta header overflows 64 bits")]
    SizeOverflow,
    /// The declared result is larger than any instructions of this delta could make.
    #[error("the delta declares a {declared}-byte result, more than its {delta_len} bytes of instructions can produce")]
    ImpossibleSize {
        /// The declared destination size.
        declared: u64,
        /// The delta's length.
        delta_len: u64,
    },
}

/// Reads one size varint, returning it and the bytes consumed.
fn read_size(delta: &[u8]) -> Result<(u64, usize), DeltaError> {
    let mut value = 0u64;
    let mut shift = 0u32;
    for (i, &b) in delta.iter().enumerate() {
        if shift > 63 {
            return Err(DeltaError::SizeOverflow);
        }
        value |= ((b & 0x7f) as u64)
            .checked_shl(shift)
            .ok_or(DeltaError::SizeOverflow)?;
        if b & 0x80 == 0 {
            return Ok((value, i + 1));
        }
        shift += 7;
    }
    Err(DeltaError::Truncated)
}

/// How many bytes `a` and `b` share from their starts, compared 8 at a time: what extending a
/// delta's copy, or comparing a tree with another version of it, spends its time on.
#[inline]
pub fn common_prefix_len(a: &[u8], b: &[u8]) -> usize {
    let n = a.len().min(b.len());
    let mut i = 0;
    while i + 8 <= n {
        let x = u64::from_le_bytes(a[i..i + 8].try_into().expect("8 bytes"));
        let y = u64::from_le_bytes(b[i..i + 8].try_into().expect("8 bytes"));
        if x != y {
            return i + ((x ^ y).trailing_zeros() / 8) as usize;
        }
        i += 8;
    }
    while i < n && a[i] == b[i] {
        i += 1;
    }
    i
}

/// The base and result sizes a delta declares, and where its instructions start.
pub fn sizes(delta: &[u8]) -> Result<(u64, u64, usize), DeltaError> {
    let (src, a) = read_size(delta)?;
    let (dst, b) = read_size(&delta[a..])?;
    Ok((src, dst, a + b))
}

/// Applies `delta` to `base`, returning the result.
pub fn apply(base: &[u8], delta: &[u8]) -> Result<Vec<u8>, DeltaError> {
    let (src_size, dst_size, mut pos) = sizes(delta)?;
    if src_size != base.len() as u64 {
        return Err(DeltaError::BaseSizeMismatch {
            expected: src_size,
            actual: base.len() as u64,
        });
    }
    // The most one instruction byte can yield is a copy of 0xffffff bytes from an 8-byte
    // instruction: anything larger is a lie, refused before allocating.
    let instructions = (delta.len() - pos) as u64;
    if dst_size > instructions.saturating_mul(0xff_ffff / 8 + 1) {
        return Err(DeltaError::ImpossibleSize {
            declared: dst_size,
            delta_len: delta.len() as u64,
        });
    }
    let mut out = Vec::with_capacity(dst_size as usize);
    while pos < delta.len() {
        let op = delta[pos];
        pos += 1;
        if op & 0x80 != 0 {
            let mut offset = 0u64;
            let mut len = 0u64;
            for i in 0..4 {
                if op & (1 << i) != 0 {
                    let b = *delta.get(pos).ok_or(DeltaError::Truncated)?;
                    offset |= (b as u64) << (8 * i);
                    pos += 1;
                }
            }
            for i in 0..3 {
                if op & (0x10 << i) != 0 {
                    let b = *delta.get(pos).ok_or(DeltaError::Truncated)?;
                    len |= (b as u64) << (8 * i);
                    pos += 1;
                }
            }
            if len == 0 {
                len = 0x10000;
            }
            let end = offset + len;
            if end > base.len() as u64 {
                return Err(DeltaError::CopyOutOfBounds {
                    start: offset,
                    end,
                    base_len: base.len() as u64,
                });
            }
            if out.len() as u64 + len > dst_size {
                return Err(DeltaError::WrongResultSize {
                    declared: dst_size,
                    actual: out.len() as u64 + len,
                });
            }
            out.extend_from_slice(&base[offset as usize..end as usize]);
        } else if op != 0 {
            let n = op as usize;
            let literal = delta.get(pos..pos + n).ok_or(DeltaError::Truncated)?;
            if (out.len() + n) as u64 > dst_size {
                return Err(DeltaError::WrongResultSize {
                    declared: dst_size,
                    actual: (out.len() + n) as u64,
                });
            }
            out.extend_from_slice(literal);
            pos += n;
        } else {
            return Err(DeltaError::ReservedInstruction);
        }
    }
    if out.len() as u64 != dst_size {
        return Err(DeltaError::WrongResultSize {
            declared: dst_size,
            actual: out.len() as u64,
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn common_prefix_len_finds_the_first_difference() {
        let a: Vec<u8> = (0..200u32).map(|i| (i * 7 % 251) as u8).collect();
        for len in [0usize, 1, 7, 8, 31, 32, 33, 64, 100, 200] {
            let a = &a[..len];
            assert_eq!(common_prefix_len(a, a), len);
            for at in 0..len {
                let mut b = a.to_vec();
                b[at] ^= 0x40;
                assert_eq!(
                    common_prefix_len(a, &b),
                    at,
                    "len {len}, difference at {at}"
                );
                assert_eq!(common_prefix_len(&b, a), at);
                // A shorter second slice stops the count at its end.
                assert_eq!(common_prefix_len(a, &a[..at]), at);
            }
        }
    }

    #[test]
    fn applies_copies_and_inserts() {
        let base = b"hello, world";
        // src 12, dst 11: copy 0..5 ("hello"), insert " you!!"
        let delta = [12, 11, 0x90, 5, 6, b' ', b'y', b'o', b'u', b'!', b'!'];
        assert_eq!(apply(base, &delta).unwrap(), b"hello you!!");
    }

    #[test]
    fn refuses_hostile_deltas() {
        let base = b"hello";
        assert_eq!(
            apply(base, &[4, 1, 1, b'x']),
            Err(DeltaError::BaseSizeMismatch {
                expected: 4,
                actual: 5
            })
        );
        assert!(matches!(
            apply(base, &[5, 5, 0x91, 3, 5]),
            Err(DeltaError::CopyOutOfBounds { .. })
        ));
        assert_eq!(
            apply(base, &[5, 1, 0]),
            Err(DeltaError::ReservedInstruction)
        );
        assert_eq!(apply(base, &[5, 3, 5, b'a']), Err(DeltaError::Truncated));
        assert!(matches!(
            apply(base, &[5, 0xff, 0xff, 0xff, 0xff, 0x0f, 1, b'a']),
            Err(DeltaError::ImpossibleSize { .. })
        ));
        assert!(matches!(
            apply(base, &[5, 2, 1, b'a']),
            Err(DeltaError::WrongResultSize { .. })
        ));
        assert_eq!(sizes(&[0xff; 12]).unwrap_err(), DeltaError::SizeOverflow);
    }
}
