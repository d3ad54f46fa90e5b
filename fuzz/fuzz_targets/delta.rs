//! Applies arbitrary deltas to arbitrary bases: the first byte says where the base ends.
#![no_main]

use libfuzzer_sys::fuzz_target;
use packd_odb::delta;

fuzz_target!(|data: &[u8]| {
    let Some((&split, rest)) = data.split_first() else {
        return;
    };
    let split = (split as usize).min(rest.len());
    let (base, instructions) = rest.split_at(split);
    if let Ok(out) = delta::apply(base, instructions) {
        let (src, dst, _) = delta::sizes(instructions).expect("applied deltas have sizes");
        assert_eq!(src, base.len() as u64);
        assert_eq!(out.len() as u64, dst);
    }
});
