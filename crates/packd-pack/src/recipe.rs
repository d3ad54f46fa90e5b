//! A clone's pack stream kept as a recipe: the bytes packd made for it, and the ranges of the
//! repository's pack files it copied as they are.
//!
//! ```text
//! "packd clone recipe 1\n"
//! step*   b'L' len (u32 BE), then len bytes         bytes made for the stream: the header,
//!                                                   pushed objects, the trailer
//!         b'R' pack (u32 BE) offset (u64 BE) len (u64 BE)
//!                                                   bytes copied from that pack file
//! b'P' count (u32 BE), then each pack's checksum (20 bytes), numbered from 0 in this order
//! SHA-1 of everything above (20 bytes)
//! ```
//!
//! Why: a clone whose stream is a pack's entries as they are, then a few objects (a mirror
//! clone after a push), need not be kept as a copy. For git/git that copy is 489 MB, which
//! the clone would write again; its recipe and `.meta` take 368 bytes. Replaying it sends
//! the same bytes, the trailer included, without hashing the stream: the pack's entries go out
//! by `sendfile` (only the recipe itself is hashed, to check it, a few hundred bytes here).
//!
//! What is checked, and where: the recipe's own checksum when it is read, so a damaged recipe
//! is refused; that each pack it names is there, its file ending with the checksum its index
//! records (a pack file's checksum covers every byte of it, so a pack with the recorded
//! checksum holds the recorded bytes); that each range lies within its pack's entries. The
//! pack's bytes themselves are sent by the kernel, unread, as a pack file sent whole is: a
//! pack damaged on disk since it was written gives the client a stream whose trailer does not
//! match, which the client rejects.

/// The first line of a recipe file.
const MAGIC: &[u8] = b"packd clone recipe 1\n";

/// Bytes made for the stream that one literal step holds at most.
const LITERAL_STEP: usize = 1 << 20;

/// Bytes made for the stream a recipe holds at most: a stream with more is not a pack's
/// entries then a few pushed objects, and is not kept (the recipe is built in memory).
const MAX_LITERAL_BYTES: u64 = 64 << 20;

/// Records a recipe, in memory, while its stream is sent.
pub(crate) struct RecipeWriter {
    /// The recipe so far: the first line and the steps written.
    out: Vec<u8>,
    /// Checksums of the packs named so far, by number.
    packs: Vec<[u8; 20]>,
    /// Where the length field of the literal step still open sits in `out` (the step's bytes
    /// follow it, to the end of `out`): the next bytes made for the stream join it.
    literal_at: Option<usize>,
    /// A range not yet a step (joined by the next one when it continues it).
    range: Option<(u32, u64, u64)>,
    /// Bytes of the stream the recipe describes so far, and of them, bytes made for it.
    described: u64,
    literal_bytes: u64,
    /// Set when the stream went out some way the recipe does not describe: it is not kept.
    failed: bool,
}

impl RecipeWriter {
    /// An empty recipe.
    pub(crate) fn new() -> RecipeWriter {
        RecipeWriter {
            out: MAGIC.to_vec(),
            packs: Vec::new(),
            literal_at: None,
            range: None,
            described: 0,
            literal_bytes: 0,
            failed: false,
        }
    }

    /// The number by which steps name the pack with `checksum` (20 bytes).
    pub(crate) fn pack_number(&mut self, checksum: &[u8]) -> u32 {
        let Ok(checksum) = <[u8; 20]>::try_from(checksum) else {
            // Not a SHA-1 pack: not described.
            self.failed = true;
            return 0;
        };
        if let Some(n) = self.packs.iter().position(|c| *c == checksum) {
            return n as u32;
        }
        self.packs.push(checksum);
        (self.packs.len() - 1) as u32
    }

    /// Records `bytes`, made for the stream.
    pub(crate) fn literal(&mut self, bytes: &[u8]) {
        self.described += bytes.len() as u64;
        self.literal_bytes += bytes.len() as u64;
        if self.literal_bytes > MAX_LITERAL_BYTES {
            self.failed = true;
        }
        if self.failed || bytes.is_empty() {
            return;
        }
        self.flush_range();
        let mut rest = bytes;
        while !rest.is_empty() {
            let at = match self.literal_at {
                Some(at) if self.out.len() - (at + 4) < LITERAL_STEP => at,
                _ => {
                    self.out.push(b'L');
                    self.out.extend_from_slice(&[0; 4]);
                    self.out.len() - 4
                }
            };
            let take = rest.len().min(LITERAL_STEP - (self.out.len() - (at + 4)));
            self.out.extend_from_slice(&rest[..take]);
            rest = &rest[take..];
            let len = (self.out.len() - (at + 4)) as u32;
            self.out[at..at + 4].copy_from_slice(&len.to_be_bytes());
            self.literal_at = Some(at);
        }
    }

    /// Records `len` bytes copied from pack `pack` at `offset`.
    pub(crate) fn range(&mut self, pack: u32, offset: u64, len: u64) {
        self.described += len;
        if self.failed || len == 0 {
            return;
        }
        if let Some((p, o, l)) = &mut self.range {
            if *p == pack && *o + *l == offset {
                *l += len;
                return;
            }
        }
        self.flush_range();
        self.literal_at = None;
        self.range = Some((pack, offset, len));
    }

    /// Bytes of the stream described so far.
    pub(crate) fn described(&self) -> u64 {
        self.described
    }

    fn flush_range(&mut self) {
        let Some((pack, offset, len)) = self.range.take() else {
            return;
        };
        self.out.push(b'R');
        self.out.extend_from_slice(&pack.to_be_bytes());
        self.out.extend_from_slice(&offset.to_be_bytes());
        self.out.extend_from_slice(&len.to_be_bytes());
    }

    /// The recipe file's bytes, or `None` when it does not describe the stream.
    pub(crate) fn finish(mut self) -> Option<Vec<u8>> {
        self.flush_range();
        if self.failed {
            return None;
        }
        self.out.push(b'P');
        self.out
            .extend_from_slice(&(self.packs.len() as u32).to_be_bytes());
        for c in &self.packs {
            self.out.extend_from_slice(c);
        }
        let sum = sha1_of(&self.out);
        self.out.extend_from_slice(&sum);
        Some(self.out)
    }
}

fn sha1_of(bytes: &[u8]) -> [u8; 20] {
    use sha1::Digest;
    sha1::Sha1::digest(bytes).into()
}

/// One step of a [`Recipe`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Step {
    /// Bytes of the recipe file itself, `at..at + len`.
    Literal { at: usize, len: usize },
    /// `len` bytes of pack `pack` (a number into [`Recipe::packs`]) at `offset`.
    Range { pack: u32, offset: u64, len: u64 },
}

/// A recipe read back.
#[derive(Debug)]
pub(crate) struct Recipe {
    /// The recipe file's bytes (literal steps point into them).
    bytes: Vec<u8>,
    pub(crate) steps: Vec<Step>,
    /// Checksums of the packs the steps name.
    pub(crate) packs: Vec<[u8; 20]>,
    /// Bytes of the stream the steps make.
    pub(crate) stream_len: u64,
}

impl Recipe {
    /// Reads a recipe from its file's bytes; the error says what is wrong and where.
    pub(crate) fn parse(bytes: Vec<u8>) -> Result<Recipe, String> {
        if !bytes.starts_with(MAGIC) {
            return Err("not a packd clone recipe".into());
        }
        let Some(body_end) = bytes.len().checked_sub(20).filter(|&e| e > MAGIC.len()) else {
            return Err("cut short".into());
        };
        if sha1_of(&bytes[..body_end]) != bytes[body_end..] {
            return Err("its checksum does not match its contents".into());
        }
        let body = &bytes[..body_end];
        let field = |at: usize, n: usize| -> Result<&[u8], String> {
            at.checked_add(n)
                .and_then(|end| body.get(at..end))
                .ok_or_else(|| format!("cut short at byte {at}"))
        };
        let u32_at = |at: usize| -> Result<u32, String> {
            Ok(u32::from_be_bytes(
                field(at, 4)?.try_into().expect("4 bytes"),
            ))
        };
        let u64_at = |at: usize| -> Result<u64, String> {
            Ok(u64::from_be_bytes(
                field(at, 8)?.try_into().expect("8 bytes"),
            ))
        };
        let mut at = MAGIC.len();
        let mut steps = Vec::new();
        let mut stream_len = 0u64;
        loop {
            match field(at, 1)?[0] {
                b'L' => {
                    let len = u32_at(at + 1)? as usize;
                    field(at + 5, len)?;
                    steps.push(Step::Literal { at: at + 5, len });
                    stream_len = stream_len.checked_add(len as u64).ok_or("too long")?;
                    at += 5 + len;
                }
                b'R' => {
                    let (pack, offset, len) = (u32_at(at + 1)?, u64_at(at + 5)?, u64_at(at + 13)?);
                    steps.push(Step::Range { pack, offset, len });
                    stream_len = stream_len.checked_add(len).ok_or("too long")?;
                    at += 21;
                }
                b'P' => {
                    let count = u32_at(at + 1)? as usize;
                    let table = field(at + 5, count.checked_mul(20).ok_or("too many packs")?)?;
                    let packs: Vec<[u8; 20]> = table
                        .chunks_exact(20)
                        .map(|c| c.try_into().expect("20 bytes"))
                        .collect();
                    let end = at + 5 + table.len();
                    if end != body.len() {
                        return Err(format!("bytes after its pack table, at {end}"));
                    }
                    if let Some(bad) = steps.iter().find(
                        |s| matches!(s, Step::Range { pack, .. } if *pack as usize >= packs.len()),
                    ) {
                        return Err(format!("a step names a pack it does not list: {bad:?}"));
                    }
                    return Ok(Recipe {
                        bytes,
                        steps,
                        packs,
                        stream_len,
                    });
                }
                other => return Err(format!("unknown step {other:#04x} at byte {at}")),
            }
        }
    }

    /// Checks that every range lies within its pack's entries, which end at `entries_end`
    /// (by pack number); the error names the first that does not.
    pub(crate) fn check_ranges(&self, entries_end: &[u64]) -> Result<(), String> {
        for step in &self.steps {
            if let Step::Range { pack, offset, len } = *step {
                let end = entries_end.get(pack as usize).copied().unwrap_or(0);
                if offset.checked_add(len).is_none_or(|e| e > end) {
                    return Err(format!(
                        "it copies {len} bytes at offset {offset} of pack {}, whose entries end at {end}",
                        self.packs
                            .get(pack as usize)
                            .map_or_else(String::new, |c| packd_odb::hex(c))
                    ));
                }
            }
        }
        Ok(())
    }

    /// The bytes of a literal step of this recipe (which [`Recipe::parse`] found within it).
    pub(crate) fn literal(&self, at: usize, len: usize) -> &[u8] {
        &self.bytes[at..at + len]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_joins_steps_and_rejects_damage() {
        let mut w = RecipeWriter::new();
        let a = w.pack_number(&[1u8; 20]);
        let b = w.pack_number(&[2u8; 20]);
        assert_eq!((a, b, w.pack_number(&[1u8; 20])), (0, 1, 0));
        w.literal(b"PACK");
        w.literal(b"head");
        w.range(a, 12, 100);
        w.range(a, 112, 50); // continues: one step
        w.range(b, 162, 7); // another pack: a step of its own
        w.literal(b"trailer");
        assert_eq!(w.described(), 8 + 150 + 7 + 7);
        let bytes = w.finish().unwrap();
        let r = Recipe::parse(bytes.clone()).unwrap();
        assert_eq!(r.packs, vec![[1u8; 20], [2u8; 20]]);
        assert_eq!(r.steps.len(), 4, "{:?}", r.steps);
        assert!(matches!(r.steps[0], Step::Literal { len: 8, .. }));
        assert_eq!(
            r.steps[1],
            Step::Range {
                pack: 0,
                offset: 12,
                len: 150
            }
        );
        let Step::Literal { at, len } = r.steps[3] else {
            panic!("{:?}", r.steps[3])
        };
        assert_eq!(r.literal(at, len), b"trailer");
        assert_eq!(r.stream_len, 172);
        assert!(r.check_ranges(&[162, 169]).is_ok());
        assert!(r
            .check_ranges(&[161, 169])
            .unwrap_err()
            .contains("offset 12 of pack 0101"));
        assert!(r.check_ranges(&[162]).is_err(), "a pack without an end");
        // Damage of each kind is refused, with a reason: cut short, a byte changed (the
        // checksum), something after the end.
        for cut in [bytes.len() - 1, MAGIC.len() + 3, 5] {
            assert!(
                Recipe::parse(bytes[..cut].to_vec()).is_err(),
                "cut at {cut}"
            );
        }
        let mut flipped = bytes.clone();
        flipped[MAGIC.len() + 2] ^= 1;
        assert!(Recipe::parse(flipped).unwrap_err().contains("checksum"));
        let mut extra = bytes.clone();
        extra.push(0);
        assert!(Recipe::parse(extra).is_err());
    }

    /// A recipe whose checksum matches but whose steps are wrong (as a writer with a bug
    /// would make): refused with the reason.
    #[test]
    fn bad_steps_behind_a_good_checksum_are_refused() {
        let sealed = |body: &[u8]| {
            let mut b = MAGIC.to_vec();
            b.extend_from_slice(body);
            let sum = sha1_of(&b);
            b.extend_from_slice(&sum);
            b
        };
        let cases: [(&[u8], &str); 4] = [
            (b"X", "unknown step"),
            (
                b"R\0\0\0\x03\0\0\0\0\0\0\0\x0c\0\0\0\0\0\0\0\x01P\0\0\0\0",
                "does not list",
            ),
            (b"L\xff\xff\xff\xffab", "cut short"),
            (b"P\0\0\0\0junk", "after its pack table"),
        ];
        for (body, why) in cases {
            let err = Recipe::parse(sealed(body)).unwrap_err();
            assert!(err.contains(why), "{body:?}: {err}");
        }
        // Two ranges whose lengths overflow the stream's length.
        let mut body = Vec::new();
        for _ in 0..2 {
            body.extend_from_slice(b"R\0\0\0\0\0\0\0\0\0\0\0\x0c");
            body.extend_from_slice(&u64::MAX.to_be_bytes());
        }
        body.extend_from_slice(b"P\0\0\0\x01");
        body.extend_from_slice(&[7u8; 20]);
        assert!(Recipe::parse(sealed(&body))
            .unwrap_err()
            .contains("too long"));
    }

    /// Bytes made for the stream go in steps of at most `LITERAL_STEP`, whatever the pieces
    /// they came in, and read back as they were written.
    #[test]
    fn long_literals_are_split_into_steps() {
        let made: Vec<u8> = (0..LITERAL_STEP + 10).map(|i| (i % 251) as u8).collect();
        let mut w = RecipeWriter::new();
        w.literal(&made[..7]);
        w.literal(&made[7..]);
        let r = Recipe::parse(w.finish().unwrap()).unwrap();
        let mut back = Vec::new();
        for step in &r.steps {
            let Step::Literal { at, len } = *step else {
                panic!("{step:?}")
            };
            assert!(len <= LITERAL_STEP);
            back.extend_from_slice(r.literal(at, len));
        }
        assert_eq!(r.steps.len(), 2);
        assert!(back == made);
    }

    #[test]
    fn an_oversized_recipe_is_not_kept() {
        let mut w = RecipeWriter::new();
        let big = vec![0u8; LITERAL_STEP];
        for _ in 0..=(MAX_LITERAL_BYTES as usize / LITERAL_STEP) {
            w.literal(&big);
        }
        assert!(w.finish().is_none(), "more made bytes than a recipe holds");
        let mut w = RecipeWriter::new();
        w.pack_number(&[1u8; 32]);
        assert!(w.finish().is_none(), "a checksum that is not SHA-1's");
    }
}
