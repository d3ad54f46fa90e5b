//! Reading a pack as it streams in (a push, `index-pack --stdin`): each entry's header, its zlib
//! stream inflated to find where it ends and to check its declared size, the CRC-32 of its bytes,
//! and the id of every whole object; the bytes are copied to `out` as they are read, and the
//! trailer is checked against the SHA-1 of everything before it. Deltas are resolved later
//! ([`crate::pack::index::resolve`]), from the copy.
//!
//! Layout in [`super`]. Nothing is allocated from a declared size or count: sizes are counted as
//! the data inflates, and an entry that inflates to more or less than it declares is refused with
//! its offset.

use super::EntryKind;
use crate::hash::ObjectId;
use crate::{Error, ObjectKind, Result};
use sha1::Digest;
use std::io::{Read, Write};

/// One entry of a streamed pack.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InputEntry {
    /// Where the entry starts in the pack.
    pub offset: u64,
    /// What it holds.
    pub kind: EntryKind,
    /// Its data's inflated size (for a delta, the delta's).
    pub size: u64,
    /// The length of its header (the zlib stream starts this far after `offset`).
    pub header_len: u32,
    /// Where the next entry starts.
    pub end: u64,
    /// The CRC-32 of its bytes, header included.
    pub crc32: u32,
    /// The object's id, for whole objects.
    pub id: Option<ObjectId>,
}

/// A pack read from a stream.
#[derive(Debug)]
pub struct InputPack {
    /// The pack format version (2 or 3).
    pub version: u32,
    /// The entries, in stream order.
    pub entries: Vec<InputEntry>,
    /// The trailer: the SHA-1 of the pack's bytes before it.
    pub checksum: [u8; 20],
    /// The pack's length, trailer included.
    pub len: u64,
}

/// Bounds on what a stream may declare.
#[derive(Debug, Clone, Copy)]
pub struct InputLimits {
    /// Most objects a pack may hold.
    pub max_objects: u32,
    /// Most bytes a pack may have.
    pub max_bytes: u64,
}

impl Default for InputLimits {
    fn default() -> Self {
        InputLimits {
            max_objects: u32::MAX,
            max_bytes: u64::MAX,
        }
    }
}

const BUFFER: usize = 1 << 20;

/// The input, buffered; every byte consumed is hashed and copied to the output.
struct Stream<'a> {
    name: &'a str,
    input: &'a mut dyn Read,
    out: &'a mut dyn Write,
    buf: Vec<u8>,
    pos: usize,
    filled: usize,
    offset: u64,
    hash: sha1::Sha1,
    crc: crc32fast::Hasher,
    limit: u64,
}

impl Stream<'_> {
    fn corrupt(&self, offset: u64, what: impl Into<String>) -> Error {
        Error::corrupt(self.name, offset, what)
    }

    /// Makes at least one unread byte available; false at the end of the input.
    fn fill(&mut self) -> Result<bool> {
        if self.pos < self.filled {
            return Ok(true);
        }
        self.pos = 0;
        self.filled = 0;
        loop {
            match self.input.read(&mut self.buf) {
                Ok(0) => return Ok(false),
                Ok(n) => {
                    self.filled = n;
                    return Ok(true);
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(source) => {
                    return Err(Error::Io {
                        path: self.name.to_string(),
                        source,
                    })
                }
            }
        }
    }

    /// Takes `n` unread bytes (hashing, checksumming and copying them).
    fn consume(&mut self, n: usize) -> Result<()> {
        let bytes = &self.buf[self.pos..self.pos + n];
        self.hash.update(bytes);
        self.crc.update(bytes);
        self.out.write_all(bytes).map_err(|source| Error::Io {
            path: self.name.to_string(),
            source,
        })?;
        self.pos += n;
        self.offset += n as u64;
        if self.offset > self.limit {
            return Err(self.corrupt(
                self.offset,
                format!("the pack is larger than the {} bytes allowed", self.limit),
            ));
        }
        Ok(())
    }

    fn byte(&mut self, what: &str) -> Result<u8> {
        if !self.fill()? {
            return Err(self.corrupt(self.offset, format!("the pack ends inside {what}")));
        }
        let b = self.buf[self.pos];
        self.consume(1)?;
        Ok(b)
    }

    fn bytes<const N: usize>(&mut self, what: &str) -> Result<[u8; N]> {
        let mut out = [0u8; N];
        for b in out.iter_mut() {
            *b = self.byte(what)?;
        }
        Ok(out)
    }
}

fn kind_name(kind: ObjectKind) -> &'static str {
    kind.name()
}

/// Reads a whole pack from `input`, copying its bytes to `out`; `name` names it in errors.
/// `progress` is told (entries read, count) as it goes.
pub fn read_pack(
    input: &mut dyn Read,
    out: &mut dyn Write,
    name: &str,
    limits: &InputLimits,
    progress: &mut dyn FnMut(u32, u32),
) -> Result<InputPack> {
    let mut s = Stream {
        name,
        input,
        out,
        buf: vec![0u8; BUFFER],
        pos: 0,
        filled: 0,
        offset: 0,
        hash: sha1::Sha1::new(),
        crc: crc32fast::Hasher::new(),
        limit: limits.max_bytes,
    };
    let magic: [u8; 4] = s.bytes("the header")?;
    if &magic != b"PACK" {
        return Err(s.corrupt(0, "not a pack: it does not start with PACK"));
    }
    let version = u32::from_be_bytes(s.bytes("the header")?);
    if version != 2 && version != 3 {
        return Err(s.corrupt(4, format!("pack version {version} is not supported")));
    }
    let count = u32::from_be_bytes(s.bytes("the header")?);
    if count > limits.max_objects {
        return Err(s.corrupt(
            8,
            format!(
                "the pack declares {count} objects, more than the {} allowed",
                limits.max_objects
            ),
        ));
    }
    let mut entries = Vec::with_capacity(count.min(1 << 20) as usize);
    let mut inflater = flate2::Decompress::new(true);
    let mut scratch = vec![0u8; 64 * 1024];
    for n in 0..count {
        if n % 1024 == 0 {
            progress(n, count);
        }
        let offset = s.offset;
        s.crc = crc32fast::Hasher::new();
        let first = s.byte("an entry header")?;
        let type_num = (first >> 4) & 7;
        let mut size = (first & 0x0f) as u64;
        let mut shift = 4u32;
        let mut c = first;
        while c & 0x80 != 0 {
            c = s.byte("an entry header")?;
            if shift > 60 {
                return Err(s.corrupt(offset, "the entry's size field overflows 64 bits"));
            }
            size |= ((c & 0x7f) as u64) << shift;
            shift += 7;
        }
        let kind = match type_num {
            1..=4 => EntryKind::Base(ObjectKind::from_pack_type(type_num).expect("1..=4")),
            6 => {
                let mut c = s.byte("a delta base offset")?;
                let mut back = (c & 0x7f) as u64;
                while c & 0x80 != 0 {
                    c = s.byte("a delta base offset")?;
                    back = back
                        .checked_add(1)
                        .and_then(|b| b.checked_mul(128))
                        .map(|b| b | (c & 0x7f) as u64)
                        .ok_or_else(|| s.corrupt(offset, "the delta base offset overflows"))?;
                }
                if back == 0 || back > offset || offset - back < 12 {
                    return Err(s.corrupt(offset, "the delta base offset points outside the pack"));
                }
                EntryKind::OfsDelta {
                    base_offset: offset - back,
                }
            }
            7 => {
                let id: [u8; 20] = s.bytes("a delta base id")?;
                EntryKind::RefDelta {
                    base: ObjectId::from_bytes(&id).expect("20 bytes"),
                }
            }
            t => {
                return Err(s.corrupt(offset, format!("the entry has an invalid type ({t})")));
            }
        };
        let header_len = (s.offset - offset) as u32;
        let mut hasher = match kind {
            EntryKind::Base(k) => {
                let mut h = sha1dc::Hasher::new();
                h.update(format!("{} {size}\0", kind_name(k)).as_bytes());
                Some(h)
            }
            _ => None,
        };
        // Inflate to find the stream's end; whole objects are hashed as they come.
        inflater.reset(true);
        let mut produced = 0u64;
        loop {
            if !s.fill()? {
                return Err(s.corrupt(offset, "the pack ends inside an entry's data"));
            }
            let before_in = inflater.total_in();
            let before_out = inflater.total_out();
            let status = inflater
                .decompress(
                    &s.buf[s.pos..s.filled],
                    &mut scratch,
                    flate2::FlushDecompress::None,
                )
                .map_err(|e| {
                    s.corrupt(offset, format!("the entry's data is not valid zlib: {e}"))
                })?;
            let used = (inflater.total_in() - before_in) as usize;
            let made = (inflater.total_out() - before_out) as usize;
            s.consume(used)?;
            produced += made as u64;
            if produced > size {
                return Err(s.corrupt(
                    offset,
                    format!("the entry inflates to more than the {size} bytes it declares"),
                ));
            }
            if let Some(h) = &mut hasher {
                h.update(&scratch[..made]);
            }
            match status {
                flate2::Status::StreamEnd => break,
                _ if used == 0 && made == 0 && s.pos < s.filled => {
                    return Err(s.corrupt(offset, "the entry's zlib stream makes no progress"));
                }
                _ => {}
            }
        }
        if produced != size {
            return Err(s.corrupt(
                offset,
                format!("the entry inflates to {produced} bytes, not the {size} it declares"),
            ));
        }
        let id = match hasher {
            Some(h) => Some(
                h.finalize()
                    .map(|d| ObjectId::from_bytes(d.as_ref()).expect("20 bytes"))
                    .map_err(|_| {
                        s.corrupt(offset, "the object carries a SHA-1 collision attack")
                    })?,
            ),
            None => None,
        };
        let crc32 = std::mem::replace(&mut s.crc, crc32fast::Hasher::new()).finalize();
        entries.push(InputEntry {
            offset,
            kind,
            size,
            header_len,
            end: s.offset,
            crc32,
            id,
        });
    }
    progress(count, count);
    let computed: [u8; 20] = std::mem::take(&mut s.hash).finalize().into();
    let trailer_at = s.offset;
    let mut trailer = [0u8; 20];
    for b in trailer.iter_mut() {
        if !s.fill()? {
            return Err(s.corrupt(trailer_at, "the pack ends inside its trailing checksum"));
        }
        *b = s.buf[s.pos];
        s.consume(1)?;
    }
    if trailer != computed {
        return Err(s.corrupt(
            trailer_at,
            "the pack's trailing checksum does not match its contents",
        ));
    }
    s.out.flush().map_err(|source| Error::Io {
        path: name.to_string(),
        source,
    })?;
    Ok(InputPack {
        version,
        entries,
        checksum: trailer,
        len: s.offset,
    })
}
