//! Extending a pack's `.bitmap` to a pack that begins with that pack's entries byte for byte
//! (same offsets) and has more objects after them (`packd_maint::append`).
//!
//! ```text
//! old pack B:  header(N_B) | B's entries                      | trailer
//! new pack P:  header(N_P) | B's entries (same offsets)       | new entries | trailer
//!              pack positions 0..N_B are B's, in B's order      N_B..N_P
//! ```
//!
//! Bits are pack positions, and B's objects keep theirs, so every bitmap of B means the same
//! in P: B's objects reach only B's objects (B's bitmaps are closed, `FULL_DAG`), so no old
//! commit gains a bit among the new objects. What the new file changes, in the layout of
//! [`super`] (the module documentation of `bitmap`):
//!
//! ```text
//! header          flags FULL_DAG | HASH_CACHE | LOOKUP_TABLE, entry count old + new,
//!                 P's checksum
//! type bitmaps    B's, with a bit set for each new object of that type (decoded, re-encoded)
//! old entries     copied byte for byte but the commit position: an *index* (id order)
//!                 position, which moves as the new ids are sorted in (old position -> id ->
//!                 position in P's index); their XOR offsets count entries in file order and
//!                 the old entries keep their order, so they stay right
//! new entries     after the old ones: commits among the new objects, each XORed with an
//!                 earlier new entry when that encodes smaller, else stored whole
//! lookup table    rebuilt: one row per entry sorted by (new) commit position, each with its
//!                 entry's offset in the new file and the row of its XOR base
//! name-hash cache rebuilt in P's index order: B's objects keep their hash, new ones get 0
//!                 (no name known: the delta search then only groups them by size)
//! trailer         SHA-1 of everything before it
//! ```
//!
//! git's `Documentation/technical/bitmap-format.txt` has the lookup table before the
//! name-hash cache, as here; the cache is indexed by index position, the table sorted by it.

use super::{BitmapError, PackBitmap, BITMAP_OPT_FULL_DAG, BITMAP_OPT_HASH_CACHE};
use super::{BITMAP_OPT_LOOKUP_TABLE, NO_XOR};
use crate::ewah::{self, Bitmap};
use crate::ewah_encode::Encoded;
use packd_odb::pack::index::PackIndex;
use packd_odb::{ObjectId, ObjectKind};

/// Header: "BITM", version, flags, entry count, pack checksum.
const HEADER: usize = 4 + 2 + 2 + 4 + 20;

/// What the new file is built from.
pub struct Extension<'a> {
    /// B's bitmap.
    pub old: &'a PackBitmap,
    /// B's index (old index positions to ids).
    pub old_index: &'a PackIndex,
    /// P's ids in index (id) order.
    pub new_ids: &'a [ObjectId],
    /// P's checksum.
    pub pack_checksum: &'a [u8; 20],
    /// The kinds of P's objects after B's, in pack order (P's positions `N_B..`).
    pub appended: &'a [ObjectKind],
    /// New entries: a commit among the appended objects and everything it reaches, as bits
    /// in P's pack order.
    pub new_entries: &'a [(ObjectId, Bitmap)],
}

/// An old entry as found in the file: its commit's old index position, XOR offset, and the
/// bytes after the commit position (XOR offset, flags, EWAH stream).
struct OldEntry<'b> {
    commit_pos: u32,
    xor: u8,
    rest: &'b [u8],
}

/// The bytes of P's `.bitmap` (see the module documentation). Errors name B's bitmap file and
/// the offset of what is wrong in it.
pub fn extend(x: &Extension<'_>) -> Result<Vec<u8>, BitmapError> {
    let name = x.old.name().to_string();
    let old_count = x.old.object_count();
    let bytes = x.old.blob.read_all()?;
    let bytes = &bytes[..];
    let corrupt = |at: usize, what: &str| BitmapError::corrupt(&name, at as u64, what);
    if bytes.len() < HEADER || &bytes[..4] != b"BITM" {
        return Err(corrupt(0, "not a bitmap file"));
    }
    let count = u32::from_be_bytes(bytes[8..12].try_into().expect("4 bytes")) as usize;
    let mut at = HEADER;
    for _ in 0..4 {
        let len = ewah::encoded_len(&bytes[at..]).map_err(|source| BitmapError::Ewah {
            file: name.clone(),
            offset: at as u64,
            what: "a type bitmap".into(),
            source,
        })?;
        at += len;
    }
    let mut old = Vec::with_capacity(count.min(bytes.len() / 18));
    for i in 0..count {
        if bytes.len() < at + 6 {
            return Err(corrupt(at, &format!("entry {i} is cut short")));
        }
        let commit_pos = u32::from_be_bytes(bytes[at..at + 4].try_into().expect("4 bytes"));
        let xor = bytes[at + 4];
        if xor as usize > i {
            return Err(corrupt(
                at,
                &format!("entry {i} XORs with one before the first"),
            ));
        }
        let len = ewah::encoded_len(&bytes[at + 6..]).map_err(|source| BitmapError::Ewah {
            file: name.clone(),
            offset: at as u64 + 6,
            what: format!("the bitmap of entry {i}"),
            source,
        })?;
        old.push(OldEntry {
            commit_pos,
            xor,
            rest: &bytes[at + 4..at + 6 + len],
        });
        at += 6 + len;
    }

    let new_pos = |id: &ObjectId| x.new_ids.binary_search(id).ok().map(|p| p as u32);
    let mut positions = Vec::with_capacity(old.len() + x.new_entries.len());
    for (i, e) in old.iter().enumerate() {
        if e.commit_pos >= x.old_index.len() {
            return Err(corrupt(
                HEADER,
                &format!("entry {i} names position {}", e.commit_pos),
            ));
        }
        let id = x.old_index.id(e.commit_pos);
        let pos = new_pos(&id).ok_or_else(|| {
            corrupt(
                HEADER,
                &format!("entry {i}: commit {id} is not in the new pack"),
            )
        })?;
        positions.push(pos);
    }
    for (id, _) in x.new_entries {
        let pos = new_pos(id).ok_or_else(|| {
            BitmapError::corrupt(&name, 0, format!("new entry {id} is not in the new pack"))
        })?;
        positions.push(pos);
    }

    let mut types: [Bitmap; 4] = [
        x.old.types[0].clone(),
        x.old.types[1].clone(),
        x.old.types[2].clone(),
        x.old.types[3].clone(),
    ];
    for (k, kind) in x.appended.iter().enumerate() {
        let t = match kind {
            ObjectKind::Commit => 0,
            ObjectKind::Tree => 1,
            ObjectKind::Blob => 2,
            ObjectKind::Tag => 3,
        };
        types[t].set(old_count as u64 + k as u64);
    }
    let encoded: Vec<Encoded> = x
        .new_entries
        .iter()
        .map(|(_, b)| Encoded::encode(b))
        .collect();
    let stored = super::write::xor_compress(&encoded, &|_| {});
    drop(encoded);

    let mut out = Vec::with_capacity(bytes.len() + 4 * x.appended.len() + 4096);
    out.extend_from_slice(b"BITM");
    out.extend_from_slice(&1u16.to_be_bytes());
    let flags = BITMAP_OPT_FULL_DAG | BITMAP_OPT_HASH_CACHE | BITMAP_OPT_LOOKUP_TABLE;
    out.extend_from_slice(&flags.to_be_bytes());
    out.extend_from_slice(&(positions.len() as u32).to_be_bytes());
    out.extend_from_slice(x.pack_checksum);
    for t in &types {
        Encoded::encode(t).write_to(&mut out);
    }
    // (offset in the new file, XOR offset) of every entry, in file order.
    let mut written = Vec::with_capacity(positions.len());
    for (e, pos) in old.iter().zip(&positions) {
        written.push((out.len() as u64, e.xor));
        out.extend_from_slice(&pos.to_be_bytes());
        out.extend_from_slice(e.rest);
    }
    for ((xor, bits), pos) in stored.iter().zip(&positions[old.len()..]) {
        written.push((out.len() as u64, *xor));
        out.extend_from_slice(&pos.to_be_bytes());
        out.push(*xor);
        out.push(0);
        bits.write_to(&mut out);
    }
    // Lookup table: rows by commit position; an entry's XOR base (an entry index) as a row.
    let mut rows: Vec<usize> = (0..positions.len()).collect();
    rows.sort_by_key(|&e| positions[e]);
    let mut row_of = vec![0u32; rows.len()];
    for (r, &e) in rows.iter().enumerate() {
        row_of[e] = r as u32;
    }
    for &e in &rows {
        let (offset, xor) = written[e];
        let xor_row = match xor {
            0 => NO_XOR,
            off => row_of[e - off as usize],
        };
        out.extend_from_slice(&positions[e].to_be_bytes());
        out.extend_from_slice(&offset.to_be_bytes());
        out.extend_from_slice(&xor_row.to_be_bytes());
    }
    // Name-hash cache in P's index order: B's ids are a sorted subsequence of P's.
    let old_hashes = x.old.name_hashes()?;
    let mut j = 0u32;
    for id in x.new_ids {
        let mut hash = 0u32;
        if j < x.old_index.len() && x.old_index.id(j) == *id {
            if let Some(cache) = old_hashes {
                let i = 4 * j as usize;
                hash = u32::from_be_bytes(cache[i..i + 4].try_into().expect("4 bytes"));
            }
            j += 1;
        }
        out.extend_from_slice(&hash.to_be_bytes());
    }
    if j != x.old_index.len() {
        return Err(BitmapError::corrupt(
            &name,
            0,
            format!(
                "{} of the pack's objects are not in the new pack",
                x.old_index.len() - j
            ),
        ));
    }
    let digest = sha1dc::digest(&out)
        .map_err(|_| BitmapError::corrupt(&name, 0, "the new bitmap carries a SHA-1 collision"))?;
    out.extend_from_slice(digest.as_ref());
    Ok(out)
}
