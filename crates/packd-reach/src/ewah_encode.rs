//! Encoding plain [`Bitmap`]s as git's EWAH streams (the JavaEWAH serialization that
//! [`crate::ewah::decode`] reads).
//!
//! ```text
//! bit count    u32 BE   64 x (index of the last non-zero word + 1); trailing zero words dropped
//! word count   u32 BE   64-bit words that follow
//! words        word count x u64 BE, chunks of  RLW  L_1 .. L_M
//!   RLW bit 0       running bit B
//!   RLW bits 1..33  run length K   (at most 2^32 - 1 words)
//!   RLW bits 33..64 literal count M (at most 2^31 - 1 words)
//! RLW position u32 BE   index (in words) of the last run-length word
//! ```
//!
//! Words are appended the way git's `ewah_add` does: an all-zero or all-one word extends the
//! current run when the run-length word has no literals yet and runs the same bit, else starts a
//! new chunk; any other word is a literal of the current chunk. The stream always holds at least
//! one run-length word (an empty bitmap is one zero word), as git writes it. Encoding the same
//! words gives the same size as git's, so choosing XOR bases by size chooses as git would.

use crate::ewah::Bitmap;

/// Longest run one run-length word can count.
const MAX_RUN: u64 = (1 << 32) - 1;
/// Most literal words one run-length word can announce.
const MAX_LITERALS: u64 = (1 << 31) - 1;

fn run_bit(rlw: u64) -> bool {
    rlw & 1 != 0
}

fn run_len(rlw: u64) -> u64 {
    (rlw >> 1) & 0xFFFF_FFFF
}

fn literal_count(rlw: u64) -> u64 {
    rlw >> 33
}

fn make_rlw(bit: bool, run: u64, literals: u64) -> u64 {
    bit as u64 | run << 1 | literals << 33
}

/// An EWAH-compressed bitmap, ready to be written or ORed into a plain one.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Encoded {
    /// The uncompressed length in bits (a multiple of 64, trailing zero words left out).
    bits: u64,
    /// The compressed words.
    words: Vec<u64>,
    /// Index of the last run-length word in `words`.
    rlw: usize,
}

/// Builds an [`Encoded`] bitmap word by word.
#[derive(Debug, Default)]
struct Encoder {
    out: Encoded,
    /// Zero words seen but not yet added: dropped if no non-zero word follows.
    pending_zeros: u64,
}

impl Encoder {
    fn new() -> Encoder {
        Encoder {
            out: Encoded {
                bits: 0,
                words: vec![0],
                rlw: 0,
            },
            pending_zeros: 0,
        }
    }

    fn push(&mut self, word: u64) {
        if word == 0 {
            self.pending_zeros += 1;
            return;
        }
        while self.pending_zeros > 0 {
            let n = self.pending_zeros.min(MAX_RUN);
            self.add_run(false, n);
            self.pending_zeros -= n;
        }
        if word == u64::MAX {
            self.add_run(true, 1);
        } else {
            self.add_literal(word);
        }
        self.out.bits += 64;
    }

    /// Adds `n` (at most [`MAX_RUN`]) clean words of `bit`. Zero runs are counted in `bits` here;
    /// a one word is counted by `push`.
    fn add_run(&mut self, bit: bool, mut n: u64) {
        if !bit {
            self.out.bits += 64 * n;
        }
        let rlw = self.out.words[self.out.rlw];
        if literal_count(rlw) == 0 && (run_len(rlw) == 0 || run_bit(rlw) == bit) {
            let room = MAX_RUN - run_len(rlw);
            let take = room.min(n);
            self.out.words[self.out.rlw] = make_rlw(bit, run_len(rlw) + take, 0);
            n -= take;
        }
        while n > 0 {
            let take = n.min(MAX_RUN);
            self.out.rlw = self.out.words.len();
            self.out.words.push(make_rlw(bit, take, 0));
            n -= take;
        }
    }

    fn add_literal(&mut self, word: u64) {
        let rlw = self.out.words[self.out.rlw];
        if literal_count(rlw) >= MAX_LITERALS {
            self.out.rlw = self.out.words.len();
            self.out.words.push(make_rlw(false, 0, 0));
        }
        let rlw = self.out.words[self.out.rlw];
        self.out.words[self.out.rlw] = make_rlw(run_bit(rlw), run_len(rlw), literal_count(rlw) + 1);
        self.out.words.push(word);
    }

    fn finish(self) -> Encoded {
        self.out
    }
}

impl Encoded {
    /// Encodes a sequence of plain words (bit 0 of the first word first).
    pub fn from_words(words: impl IntoIterator<Item = u64>) -> Encoded {
        let mut e = Encoder::new();
        for w in words {
            e.push(w);
        }
        e.finish()
    }

    /// Encodes `bitmap`.
    pub fn encode(bitmap: &Bitmap) -> Encoded {
        Encoded::from_words(bitmap.words().iter().copied())
    }

    /// Encodes `a XOR b`: how an entry is stored against an earlier one.
    pub fn encode_xor(a: &Bitmap, b: &Bitmap) -> Encoded {
        let (a, b) = (a.words(), b.words());
        let n = a.len().max(b.len());
        Encoded::from_words(
            (0..n).map(|i| a.get(i).copied().unwrap_or(0) ^ b.get(i).copied().unwrap_or(0)),
        )
    }

    /// The number of compressed words (what git compares when choosing an XOR base).
    pub fn word_count(&self) -> usize {
        self.words.len()
    }

    /// The uncompressed length in bits recorded in the stream.
    pub fn bit_count(&self) -> u64 {
        self.bits
    }

    /// The serialized size in bytes.
    pub fn serialized_len(&self) -> usize {
        4 + 4 + 8 * self.words.len() + 4
    }

    /// Appends the serialized stream to `out`.
    ///
    /// Bitmaps of packs with more than 2^32 objects cannot be written; callers check the object
    /// count (a pack's is a u32) before building any.
    pub fn write_to(&self, out: &mut Vec<u8>) {
        out.reserve(self.serialized_len());
        out.extend_from_slice(&(self.bits as u32).to_be_bytes());
        out.extend_from_slice(&(self.words.len() as u32).to_be_bytes());
        for w in &self.words {
            out.extend_from_slice(&w.to_be_bytes());
        }
        out.extend_from_slice(&(self.rlw as u32).to_be_bytes());
    }

    /// The serialized stream.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::new();
        self.write_to(&mut out);
        out
    }

    /// Sets every bit of this bitmap in `into` (which grows as needed).
    pub fn or_into(&self, into: &mut Bitmap) {
        if into.words().is_empty() {
            *into = self.decode();
        } else {
            into.or_assign(&self.decode());
        }
    }

    /// The plain bitmap.
    pub fn decode(&self) -> Bitmap {
        let mut words = vec![0u64; (self.bits / 64) as usize];
        let mut at = 0usize;
        let mut i = 0usize;
        while i < self.words.len() {
            let rlw = self.words[i];
            let run = run_len(rlw) as usize;
            if run_bit(rlw) {
                words[at..at + run].fill(u64::MAX);
            }
            at += run;
            let lits = literal_count(rlw) as usize;
            words[at..at + lits].copy_from_slice(&self.words[i + 1..i + 1 + lits]);
            at += lits;
            i += 1 + lits;
        }
        Bitmap::from_words(words)
    }

    /// Bytes held in memory (for budgets and logs).
    pub fn heap_bytes(&self) -> usize {
        self.words.capacity() * 8
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ewah;

    /// xorshift64*: a small deterministic generator for the property tests.
    struct Rng(u64);

    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
        }
        fn below(&mut self, n: u64) -> u64 {
            self.next() % n
        }
    }

    /// A random bitmap made of runs of zero words, one words, sparse and dense literals.
    fn random_bitmap(rng: &mut Rng) -> Bitmap {
        let mut words = Vec::new();
        let chunks = rng.below(12);
        for _ in 0..chunks {
            let len = match rng.below(4) {
                0 => rng.below(3),
                1 => rng.below(70),
                _ => rng.below(300),
            } as usize;
            let kind = rng.below(5);
            for _ in 0..len {
                words.push(match kind {
                    0 => 0,
                    1 => u64::MAX,
                    2 => 1 << rng.below(64),
                    3 => !(1 << rng.below(64)),
                    _ => rng.next(),
                });
            }
        }
        Bitmap::from_words(words)
    }

    fn round_trip(b: &Bitmap) {
        let enc = Encoded::encode(b);
        let bytes = enc.to_bytes();
        assert_eq!(bytes.len(), enc.serialized_len());
        let limit = b.words().len() as u64 * 64;
        let (decoded, used) = ewah::decode(&bytes, limit).expect("decodes");
        assert_eq!(used, bytes.len());
        assert_eq!(&decoded, b);
        assert_eq!(enc.decode(), *b);
        // Trailing zero words are dropped, as git drops them.
        let last = b.words().iter().rposition(|&w| w != 0).map_or(0, |i| i + 1);
        assert_eq!(enc.bit_count(), 64 * last as u64);
        assert_eq!(decoded.words().len(), last);
    }

    #[test]
    fn round_trips_random_bitmaps_through_the_decoder() {
        let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
        for _ in 0..3000 {
            round_trip(&random_bitmap(&mut rng));
        }
    }

    #[test]
    fn xor_encoding_is_the_xor() {
        let mut rng = Rng(42);
        for _ in 0..500 {
            let a = random_bitmap(&mut rng);
            let b = random_bitmap(&mut rng);
            let mut x = a.clone();
            x.xor_assign(&b);
            let enc = Encoded::encode_xor(&a, &b);
            assert_eq!(enc, Encoded::encode(&x));
            let mut back = enc.decode();
            back.xor_assign(&a);
            assert_eq!(back, b);
        }
    }

    #[test]
    fn or_into_is_the_union() {
        let mut rng = Rng(7);
        for _ in 0..500 {
            let a = random_bitmap(&mut rng);
            let b = random_bitmap(&mut rng);
            let mut want = a.clone();
            want.or_assign(&b);
            let mut got = a.clone();
            Encoded::encode(&b).or_into(&mut got);
            assert_eq!(got, want);
        }
    }

    #[test]
    fn runs_and_literals_pack_as_git_packs_them() {
        // Empty: one zero run-length word.
        let e = Encoded::encode(&Bitmap::new());
        assert_eq!((e.words.clone(), e.rlw, e.bits), (vec![0], 0, 0));
        assert_eq!(
            e.to_bytes(),
            [0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]
        );
        // 0, 0, literal, ones, ones, literal, 0 (dropped).
        let b = Bitmap::from_words(vec![0, 0, 5, u64::MAX, u64::MAX, 9, 0]);
        let e = Encoded::encode(&b);
        assert_eq!(
            e.words,
            vec![make_rlw(false, 2, 1), 5, make_rlw(true, 2, 1), 9]
        );
        assert_eq!((e.rlw, e.bits), (2, 6 * 64));
        // Ones right after a run of zeros start a new chunk.
        let e = Encoded::encode(&Bitmap::from_words(vec![0, u64::MAX]));
        assert_eq!(e.words, vec![make_rlw(false, 1, 0), make_rlw(true, 1, 0)]);
        round_trip(&Bitmap::from_words(vec![0, u64::MAX, 0, 0, 3]));
    }

    #[test]
    fn long_runs_split_at_the_run_length_limit() {
        let mut enc = Encoder::new();
        enc.add_run(true, MAX_RUN);
        enc.add_run(true, 3);
        let e = enc.finish();
        assert_eq!(
            e.words,
            vec![make_rlw(true, MAX_RUN, 0), make_rlw(true, 3, 0)]
        );
    }
}
