//! Decodes arbitrary bytes as one pack entry: header, inflate to the declared size, and for a
//! delta, application against a fixed base. Must never panic, hang or allocate by a lie.
#![no_main]

use libfuzzer_sys::fuzz_target;
use packd_odb::pack::data::{decode_entry_header, EntryKind};
use packd_odb::{delta, zlib, HashKind};

const BASE: &[u8] = b"the quick brown fox jumps over the lazy dog\n0123456789abcdef\n";

fuzz_target!(|data: &[u8]| {
    // Pretend the entry sits at offset 1 MiB so that ofs-deltas have room to point back.
    let Ok(header) = decode_entry_header(data, 1 << 20, HashKind::Sha1) else {
        return;
    };
    let compressed = &data[header.header_len..];
    let Ok(inflated) = zlib::inflate_exact(compressed, header.size) else {
        return;
    };
    assert_eq!(inflated.len() as u64, header.size);
    if !matches!(header.kind, EntryKind::Base(_)) {
        if let Ok(out) = delta::apply(BASE, &inflated) {
            let (_, dst, _) = delta::sizes(&inflated).expect("applied deltas have sizes");
            assert_eq!(out.len() as u64, dst);
        }
    }
});
