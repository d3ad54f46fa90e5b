//! Pack data files (`.pack`): a header, entries, and a trailing checksum.
//!
//! ```text
//! "PACK"  version u32 BE (2 or 3)  count u32 BE
//! entry*  header: 1 byte  [MSB more][3 bits type][4 bits size low]
//!                 then    [MSB more][7 bits size]...          (little-endian base-128)
//!         type 1-4: commit/tree/blob/tag, zlib data follows
//!         type 6 (ofs-delta): base offset = entry offset - N, where N is big-endian base-128
//!                 with +1 per continuation byte; zlib delta follows
//!         type 7 (ref-delta): base id[20]; zlib delta follows
//! trailer SHA-1 of everything before it
//! ```
//! An entry's compressed bytes end where the next entry (in offset order) starts, so an entry is
//! read in one ranged read and inflated in one call.

mod entry;
pub mod input;

pub use entry::{
    decode_entry_header, encode_ofs_distance, encode_pack_header, encode_type_and_size,
    EntryHeader, EntryKind, OFS_DELTA, REF_DELTA,
};
