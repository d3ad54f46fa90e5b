//! git's EWAH compressed bitmaps (the JavaEWAH serialization), decoded into a plain [`Bitmap`].
//!
//! ```text
//! bit count    u32 BE   bits in the uncompressed bitmap
//! word count   u32 BE   64-bit words that follow
//! words        word count x u64 BE
//! RLW position u32 BE   index (in words) of the last run-length word
//!
//! the words are chunks:  RLW  L_1 .. L_M
//!   RLW bit 0       running bit B
//!   RLW bits 1..33  run length K (words)
//!   RLW bits 33..64 literal count M
//!   meaning: K words all of bit B, then the M literal words as they are
//!   (within a word, bit 0 comes first)
//! ```
//!
//! Every count in the stream is checked against the bytes actually present and against the
//! number of bits the caller says the bitmap may hold, before anything is allocated: a hostile
//! file yields an [`EwahError`], never a panic or a huge allocation.

/// Why an EWAH stream could not be decoded. Offsets are relative to the start of the stream.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EwahError {
    /// Fewer bytes remain than the header or the word count requires.
    #[error("EWAH bitmap is truncated: it needs {need} bytes but only {have} remain")]
    Truncated {
        /// Bytes the stream claims to occupy.
        need: u64,
        /// Bytes actually available.
        have: u64,
    },
    /// The bit count is larger than the bitmap may be (more bits than objects).
    #[error("EWAH bitmap claims {bits} bits but at most {max} are possible here")]
    TooManyBits {
        /// The bit count in the header.
        bits: u32,
        /// The limit given by the caller (rounded up to whole words).
        max: u64,
    },
    /// The stored position of the last run-length word is not inside the words.
    #[error("EWAH bitmap's run-length word position {position} is outside its {words} words")]
    RlwOutOfRange {
        /// The stored position.
        position: u32,
        /// The word count.
        words: u32,
    },
    /// A run-length word announces more literal words than the stream holds.
    #[error("EWAH run-length word {at} announces {literals} literal words but only {left} follow")]
    LiteralsPastEnd {
        /// Word index of the run-length word.
        at: u32,
        /// Literal count it announces.
        literals: u64,
        /// Words remaining after it.
        left: u64,
    },
    /// The words expand to more bits than the header's bit count allows.
    #[error("EWAH words expand past the bitmap's {bits} bits (run-length word {at})")]
    PastBitCount {
        /// The bit count in the header.
        bits: u32,
        /// Word index of the run-length word whose chunk overflows.
        at: u32,
    },
    /// A bit is set at or past the limit the caller gave (an object that does not exist).
    #[error("EWAH bitmap sets bit {bit}, but only {max} bits are possible here")]
    BitPastLimit {
        /// The offending bit.
        bit: u64,
        /// The limit given by the caller.
        max: u64,
    },
}

/// Bytes of the fixed part of an EWAH stream: bit count and word count before the words, RLW
/// position after them.
const FIXED: u64 = 4 + 4 + 4;

fn be32(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

/// The number of bytes the EWAH stream at the start of `bytes` occupies, checking only that
/// they are all there. Used to skip over bitmaps without decoding them.
pub fn encoded_len(bytes: &[u8]) -> Result<usize, EwahError> {
    let have = bytes.len() as u64;
    if have < 8 {
        return Err(EwahError::Truncated { need: FIXED, have });
    }
    let words = be32(bytes, 4) as u64;
    let need = FIXED + words * 8;
    if need > have {
        return Err(EwahError::Truncated { need, have });
    }
    Ok(need as usize)
}

/// Decodes the EWAH stream at the start of `bytes`, returning the bitmap and the number of bytes
/// the stream occupied.
///
/// `max_bits` is how many bits the bitmap may address (the object count of the pack): the header's
/// bit count may not exceed it rounded up to a whole word, and no bit at or past it may be set.
/// This bound is what keeps allocation proportional to the pack, not to a number in the file.
pub fn decode(bytes: &[u8], max_bits: u64) -> Result<(Bitmap, usize), EwahError> {
    let mut out = Decoded(Vec::new());
    let len = visit(bytes, max_bits, &mut out)?;
    Ok((Bitmap::from_words(out.0), len))
}

/// XORs the EWAH stream at the start of `bytes` into `out`, as [`decode`] followed by
/// [`Bitmap::xor_assign`] would, with the same checks, but touching only the words the stream
/// stores: runs of zeros are skipped and nothing is allocated beyond growing `out`. Resolving
/// a bitmap down a long XOR chain then costs the compressed sizes of its links, not one whole
/// bitmap per link. Returns the bytes the stream occupied. On an error `out` is left partly
/// changed.
pub fn xor_into(bytes: &[u8], max_bits: u64, out: &mut Bitmap) -> Result<usize, EwahError> {
    visit(bytes, max_bits, &mut XorInto(&mut out.words))
}

/// What [`visit`] feeds the chunks of a stream to.
trait Sink {
    /// Called once, before any chunk, with the decoded length in words (every chunk is checked
    /// to lie within it).
    fn start(&mut self, words: usize);
    /// `run` words equal to `fill`, from word `at`.
    fn run(&mut self, at: usize, run: usize, fill: u64);
    /// Literal words from word `at`.
    fn literals(&mut self, at: usize, words: impl Iterator<Item = u64>);
}

/// A plain decode: the words in order.
struct Decoded(Vec<u64>);

impl Sink for Decoded {
    fn start(&mut self, words: usize) {
        self.0.reserve_exact(words);
    }
    fn run(&mut self, _: usize, run: usize, fill: u64) {
        self.0.resize(self.0.len() + run, fill);
    }
    fn literals(&mut self, _: usize, words: impl Iterator<Item = u64>) {
        self.0.extend(words);
    }
}

/// XOR into existing words, grown to the decoded length.
struct XorInto<'a>(&'a mut Vec<u64>);

impl Sink for XorInto<'_> {
    fn start(&mut self, words: usize) {
        if self.0.len() < words {
            self.0.resize(words, 0);
        }
    }
    fn run(&mut self, at: usize, run: usize, fill: u64) {
        if fill != 0 {
            for w in &mut self.0[at..at + run] {
                *w ^= fill;
            }
        }
    }
    fn literals(&mut self, at: usize, words: impl Iterator<Item = u64>) {
        for (w, l) in self.0[at..].iter_mut().zip(words) {
            *w ^= l;
        }
    }
}

/// Checks the EWAH stream at the start of `bytes` and feeds its chunks, in order, to `sink`.
/// Returns the bytes the stream occupied.
fn visit(bytes: &[u8], max_bits: u64, sink: &mut impl Sink) -> Result<usize, EwahError> {
    let len = encoded_len(bytes)?;
    let bits = be32(bytes, 0);
    let word_count = be32(bytes, 4);
    let max_words = max_bits.div_ceil(64);
    if (bits as u64).div_ceil(64) > max_words {
        return Err(EwahError::TooManyBits {
            bits,
            max: max_words * 64,
        });
    }
    let rlw = be32(bytes, len - 4);
    if rlw >= word_count.max(1) {
        return Err(EwahError::RlwOutOfRange {
            position: rlw,
            words: word_count,
        });
    }
    // Bounded by `max_bits`, checked above.
    let out_words = (bits as u64).div_ceil(64) as usize;
    sink.start(out_words);
    let word = |i: u32| {
        let at = 8 + i as usize * 8;
        u64::from_be_bytes(bytes[at..at + 8].try_into().expect("8 bytes"))
    };
    // The highest set bit, checked against `max_bits` at the end.
    let mut last_set: Option<u64> = None;
    let mut pos: usize = 0;
    let mut i: u32 = 0;
    while i < word_count {
        let header = word(i);
        let running = header & 1 != 0;
        let run = (header >> 1) & 0xFFFF_FFFF;
        let literals = header >> 33;
        let left = (word_count - i - 1) as u64;
        if literals > left {
            return Err(EwahError::LiteralsPastEnd {
                at: i,
                literals,
                left,
            });
        }
        if pos as u64 + run + literals > out_words as u64 {
            return Err(EwahError::PastBitCount { bits, at: i });
        }
        // Both fit in `out_words` (checked just above).
        let (run, literals) = (run as usize, literals as u32);
        if run > 0 {
            let fill = if running { u64::MAX } else { 0 };
            if running {
                last_set = Some((pos + run) as u64 * 64 - 1);
            }
            sink.run(pos, run, fill);
            pos += run;
        }
        if literals > 0 {
            let first = i + 1;
            for k in (0..literals).rev() {
                let w = word(first + k);
                if w != 0 {
                    last_set = Some((pos + k as usize) as u64 * 64 + 63 - w.leading_zeros() as u64);
                    break;
                }
            }
            sink.literals(pos, (first..first + literals).map(word));
            pos += literals as usize;
        }
        i += 1 + literals;
    }
    if let Some(last) = last_set {
        if last >= max_bits {
            return Err(EwahError::BitPastLimit {
                bit: last,
                max: max_bits,
            });
        }
    }
    Ok(len)
}

/// A plain (uncompressed) bitmap: bit `i` is bit `i % 64` of word `i / 64`.
///
/// Bits past the stored words are zero, so two bitmaps that differ only in trailing zero words
/// are equal. What a bit means is up to the owner; for a pack's reachability bitmaps bit `i` is
/// the `i`th object in pack order (see [`crate::bitmap`]).
#[derive(Debug, Clone, Default)]
pub struct Bitmap {
    words: Vec<u64>,
}

impl PartialEq for Bitmap {
    fn eq(&self, other: &Bitmap) -> bool {
        let n = self.words.len().max(other.words.len());
        (0..n).all(|i| self.word(i) == other.word(i))
    }
}

impl Eq for Bitmap {}

impl Bitmap {
    /// An empty bitmap.
    pub fn new() -> Bitmap {
        Bitmap::default()
    }

    /// A bitmap over the given words, bit 0 being the lowest bit of the first word.
    pub fn from_words(words: Vec<u64>) -> Bitmap {
        Bitmap { words }
    }

    /// The words, lowest bits first (possibly with trailing zero words).
    pub fn words(&self) -> &[u64] {
        &self.words
    }

    fn word(&self, i: usize) -> u64 {
        self.words.get(i).copied().unwrap_or(0)
    }

    /// Whether bit `i` is set.
    pub fn get(&self, i: u64) -> bool {
        usize::try_from(i / 64).is_ok_and(|w| self.word(w) >> (i % 64) & 1 != 0)
    }

    /// Sets bit `i`, growing the bitmap as needed.
    pub fn set(&mut self, i: u64) {
        let w = (i / 64) as usize;
        if w >= self.words.len() {
            self.words.resize(w + 1, 0);
        }
        self.words[w] |= 1 << (i % 64);
    }

    /// Clears bit `i`.
    pub fn clear(&mut self, i: u64) {
        if let Some(w) = self.words.get_mut((i / 64) as usize) {
            *w &= !(1 << (i % 64));
        }
    }

    /// Adds every bit of `other` (union).
    pub fn or_assign(&mut self, other: &Bitmap) {
        if other.words.len() > self.words.len() {
            self.words.resize(other.words.len(), 0);
        }
        for (a, b) in self.words.iter_mut().zip(&other.words) {
            *a |= b;
        }
    }

    /// Removes every bit of `other` (difference).
    pub fn and_not_assign(&mut self, other: &Bitmap) {
        for (a, b) in self.words.iter_mut().zip(&other.words) {
            *a &= !b;
        }
    }

    /// Keeps only the bits also in `other` (intersection).
    pub fn and_assign(&mut self, other: &Bitmap) {
        self.words.truncate(other.words.len());
        for (a, b) in self.words.iter_mut().zip(&other.words) {
            *a &= b;
        }
    }

    /// Flips every bit set in `other` (symmetric difference): how git's bitmaps are
    /// XOR-compressed against each other.
    pub fn xor_assign(&mut self, other: &Bitmap) {
        if other.words.len() > self.words.len() {
            self.words.resize(other.words.len(), 0);
        }
        for (a, b) in self.words.iter_mut().zip(&other.words) {
            *a ^= b;
        }
    }

    /// The number of set bits.
    pub fn count_ones(&self) -> u64 {
        self.words.iter().map(|w| w.count_ones() as u64).sum()
    }

    /// True when no bit is set.
    pub fn is_empty(&self) -> bool {
        self.words.iter().all(|&w| w == 0)
    }

    /// The highest set bit, if any.
    pub fn last_set_bit(&self) -> Option<u64> {
        let (i, w) = self.words.iter().enumerate().rev().find(|(_, &w)| w != 0)?;
        Some(i as u64 * 64 + 63 - w.leading_zeros() as u64)
    }

    /// The set bits, ascending.
    pub fn iter_ones(&self) -> impl Iterator<Item = u64> + '_ {
        self.words.iter().enumerate().flat_map(|(i, &w)| {
            let base = i as u64 * 64;
            let mut rest = w;
            std::iter::from_fn(move || {
                if rest == 0 {
                    return None;
                }
                let bit = rest.trailing_zeros() as u64;
                rest &= rest - 1;
                Some(base + bit)
            })
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Serializes `chunks` of (running bit, run length, literals) as an EWAH stream.
    fn encode(bits: u32, chunks: &[(bool, u64, &[u64])], rlw: Option<u32>) -> Vec<u8> {
        let mut words = Vec::new();
        let mut last = 0;
        for (running, run, lits) in chunks {
            last = words.len() as u32;
            words.push(*running as u64 | run << 1 | (lits.len() as u64) << 33);
            words.extend_from_slice(lits);
        }
        let mut out = Vec::new();
        out.extend_from_slice(&bits.to_be_bytes());
        out.extend_from_slice(&(words.len() as u32).to_be_bytes());
        for w in words {
            out.extend_from_slice(&w.to_be_bytes());
        }
        out.extend_from_slice(&rlw.unwrap_or(last).to_be_bytes());
        out
    }

    #[test]
    fn decodes_runs_and_literals() {
        let data = encode(
            64 * 5,
            &[(false, 1, &[0b1011]), (true, 2, &[1 << 63])],
            None,
        );
        let (b, used) = decode(&data, 64 * 5).unwrap();
        assert_eq!(used, data.len());
        assert_eq!(b.words(), &[0, 0b1011, u64::MAX, u64::MAX, 1 << 63]);
        assert_eq!(b.count_ones(), 3 + 128 + 1);
        assert!(b.get(64) && !b.get(66) && b.get(319) && !b.get(320));
        let ones: Vec<u64> = b.iter_ones().take(4).collect();
        assert_eq!(ones, vec![64, 65, 67, 128]);
    }

    #[test]
    fn empty_stream() {
        let data = encode(0, &[(false, 0, &[])], None);
        let (b, _) = decode(&data, 0).unwrap();
        assert!(b.is_empty());
        let mut zero_words = Vec::new();
        zero_words.extend_from_slice(&0u32.to_be_bytes());
        zero_words.extend_from_slice(&0u32.to_be_bytes());
        zero_words.extend_from_slice(&0u32.to_be_bytes());
        assert!(decode(&zero_words, 10).unwrap().0.is_empty());
    }

    #[test]
    fn hostile_streams_are_errors() {
        let good = encode(128, &[(false, 0, &[1, 2])], None);
        for cut in 0..good.len() {
            assert!(matches!(
                decode(&good[..cut], 128),
                Err(EwahError::Truncated { .. })
            ));
        }
        // Huge word count, few bytes.
        let mut huge = good.clone();
        huge[4..8].copy_from_slice(&u32::MAX.to_be_bytes());
        assert!(matches!(
            decode(&huge, 128),
            Err(EwahError::Truncated { .. })
        ));
        // Bit count past the limit.
        let big = encode(u32::MAX, &[(true, 1, &[])], None);
        assert!(matches!(
            decode(&big, 128),
            Err(EwahError::TooManyBits { .. })
        ));
        // RLW position past the words.
        let rlw = encode(128, &[(false, 0, &[1, 2])], Some(7));
        assert!(matches!(
            decode(&rlw, 128),
            Err(EwahError::RlwOutOfRange { .. })
        ));
        // Literal count past the words.
        let mut lits = good.clone();
        lits[8..16].copy_from_slice(&(5u64 << 33).to_be_bytes());
        assert!(matches!(
            decode(&lits, 128),
            Err(EwahError::LiteralsPastEnd { .. })
        ));
        // A run of 2^32 - 1 words of ones in a 128-bit bitmap.
        let run = encode(128, &[(true, 0xFFFF_FFFF, &[])], None);
        assert!(matches!(
            decode(&run, 128),
            Err(EwahError::PastBitCount { .. })
        ));
        // A set bit past the object count.
        let past = encode(128, &[(false, 1, &[1 << 10])], None);
        assert!(matches!(
            decode(&past, 70),
            Err(EwahError::BitPastLimit { bit: 74, max: 70 })
        ));
    }

    #[test]
    fn xor_into_matches_decode_then_xor() {
        let a = encode(
            64 * 6,
            &[
                (false, 1, &[0b1011]),
                (true, 2, &[1 << 63]),
                (false, 1, &[]),
            ],
            None,
        );
        let b = encode(64 * 4, &[(true, 1, &[7, 0]), (false, 1, &[])], None);
        let mut acc = Bitmap::new();
        assert_eq!(xor_into(&a, 64 * 6, &mut acc).unwrap(), a.len());
        assert_eq!(acc, decode(&a, 64 * 6).unwrap().0);
        xor_into(&b, 64 * 6, &mut acc).unwrap();
        let mut want = decode(&a, 64 * 6).unwrap().0;
        want.xor_assign(&decode(&b, 64 * 6).unwrap().0);
        assert_eq!(acc, want);
        // The same checks as decode.
        let past = encode(128, &[(false, 1, &[1 << 10])], None);
        assert!(matches!(
            xor_into(&past, 70, &mut Bitmap::new()),
            Err(EwahError::BitPastLimit { bit: 74, max: 70 })
        ));
        let run = encode(128, &[(true, 0xFFFF_FFFF, &[])], None);
        assert!(matches!(
            xor_into(&run, 128, &mut Bitmap::new()),
            Err(EwahError::PastBitCount { .. })
        ));
    }

    #[test]
    fn set_operations() {
        let mut a = Bitmap::new();
        let mut b = Bitmap::new();
        for i in [1, 5, 70, 200] {
            a.set(i);
        }
        for i in [5, 70, 300] {
            b.set(i);
        }
        let mut x = a.clone();
        x.xor_assign(&b);
        assert_eq!(x.iter_ones().collect::<Vec<_>>(), vec![1, 200, 300]);
        let mut o = a.clone();
        o.or_assign(&b);
        assert_eq!(o.count_ones(), 5);
        let mut d = a.clone();
        d.and_not_assign(&b);
        assert_eq!(d.iter_ones().collect::<Vec<_>>(), vec![1, 200]);
        let mut n = a.clone();
        n.and_assign(&b);
        assert_eq!(n.iter_ones().collect::<Vec<_>>(), vec![5, 70]);
        x.xor_assign(&b);
        assert_eq!(x, a);
        assert_eq!(a.last_set_bit(), Some(200));
        a.clear(200);
        assert_eq!(a.last_set_bit(), Some(70));
    }
}
