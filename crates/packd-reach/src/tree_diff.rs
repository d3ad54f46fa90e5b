//! The entries of a tree that another tree does not have, for a fill-in walk.
//!
//! The other tree is one the walk has already read and handled all the entries of: the last
//! tree it read at the same path, or the tree's delta base (most trees of a pack are stored as
//! deltas against another version of the same directory). Every entry of the tree that is byte
//! for byte an entry of that one (the same mode, name and id) is handled too: only the others
//! need looking up. On a host with thousands of pull-request tips, that is most of the 12.8
//! million entries a mirror clone of git/git meets in 30,000 trees.
//!
//! An entry is skipped only when its bytes equal a whole entry of the other tree. Where that
//! tree's entries start is either found by parsing it from its start with the same rules, or
//! taken from the scan that parsed that same content earlier (`Against::starts`, checked to
//! start at 0, end at its length and increase); what a delta's instructions say is never
//! trusted. The two lists are merged in git's tree order (names compared as if a directory's
//! ended in `/`); an unsorted or malformed tree only makes fewer entries match.

use packd_odb::{ObjectId, ObjectKind, Result};
use std::cmp::Ordering;

/// One entry of a tree, as offsets into the bytes it was parsed from.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Entry {
    /// The entry's length: mode, space, name, NUL and the 20-byte id.
    pub(crate) len: usize,
    /// Where the name starts.
    pub(crate) name_at: usize,
    /// Where the NUL after the name is.
    pub(crate) nul: usize,
    /// The mode, as read in octal.
    pub(crate) mode: u32,
}

impl Entry {
    /// The kind of object the entry names: `None` for a gitlink (a commit of another
    /// repository, never walked).
    pub(crate) fn kind(&self) -> Option<ObjectKind> {
        match self.mode & 0o170000 {
            0o160000 => None,
            0o040000 => Some(ObjectKind::Tree),
            _ => Some(ObjectKind::Blob),
        }
    }

    fn is_dir(&self) -> bool {
        self.mode & 0o170000 == 0o040000
    }
}

/// The entry at the start of `rest`: an octal mode of 1 to 7 digits, a space, a name ended by
/// NUL, 20 id bytes (the checks of `packd_odb::parse::tree_entries`). `None` when malformed.
#[inline]
pub(crate) fn parse_entry(rest: &[u8]) -> Option<Entry> {
    let (mode, name_at) = match common_mode(rest) {
        Some(found) => found,
        None => parse_mode(rest)?,
    };
    let nul = name_at + find_nul(rest.get(name_at..)?)?;
    let len = nul + 21;
    if rest.len() < len {
        return None;
    }
    Some(Entry {
        len,
        name_at,
        nul,
        mode,
    })
}

/// The modes git writes, as the first bytes of an entry (little-endian, with the space), how
/// many bytes that is, and the mode: one comparison instead of a loop over the digits.
const COMMON_MODES: [(u64, u32, u32); 5] = [
    (u64::from_le_bytes(*b"100644 \0"), 7, 0o100644),
    (u64::from_le_bytes(*b"40000 \0\0"), 6, 0o040000),
    (u64::from_le_bytes(*b"100755 \0"), 7, 0o100755),
    (u64::from_le_bytes(*b"120000 \0"), 7, 0o120000),
    (u64::from_le_bytes(*b"160000 \0"), 7, 0o160000),
];

/// The mode and where the name starts, when the entry at the start of `rest` has one of the
/// [`COMMON_MODES`] (and at least eight bytes, which every entry has).
#[inline]
fn common_mode(rest: &[u8]) -> Option<(u32, usize)> {
    let word = u64::from_le_bytes(rest.get(..8)?.try_into().ok()?);
    COMMON_MODES.iter().find_map(|&(bytes, n, mode)| {
        let mask = u64::MAX >> (64 - 8 * n);
        (word & mask == bytes).then_some((mode, n as usize))
    })
}

/// The mode of the entry at the start of `rest` and where its name starts: 1 to 7 octal
/// digits, then a space.
fn parse_mode(rest: &[u8]) -> Option<(u32, usize)> {
    let mut mode = 0u32;
    let mut i = 0;
    loop {
        match rest.get(i) {
            Some(b' ') if i > 0 => break,
            Some(&d @ b'0'..=b'7') if i < 7 => mode = mode << 3 | (d - b'0') as u32,
            _ => return None,
        }
        i += 1;
    }
    Some((mode, i + 1))
}

/// The index of the first NUL byte of `bytes`, eight bytes at a time (a word has a zero byte
/// when `(w - 0x01..01) & !w & 0x80..80` is not zero; the lowest such byte is the first).
#[inline]
pub(crate) fn find_nul(bytes: &[u8]) -> Option<usize> {
    const LO: u64 = 0x0101_0101_0101_0101;
    const HI: u64 = 0x8080_8080_8080_8080;
    let mut at = 0;
    let mut chunks = bytes.chunks_exact(8);
    for chunk in &mut chunks {
        let w = u64::from_le_bytes(chunk.try_into().expect("8 bytes"));
        let zero = w.wrapping_sub(LO) & !w & HI;
        if zero != 0 {
            return Some(at + (zero.trailing_zeros() / 8) as usize);
        }
        at += 8;
    }
    chunks
        .remainder()
        .iter()
        .position(|&b| b == 0)
        .map(|i| at + i)
}

/// git's order of two entries: by name, a directory's name compared as if it ended in `/`.
fn tree_order(a: &[u8], a_entry: &Entry, b: &[u8], b_entry: &Entry) -> Ordering {
    let an = &a[a_entry.name_at..a_entry.nul];
    let bn = &b[b_entry.name_at..b_entry.nul];
    let common = an.len().min(bn.len());
    match an[..common].cmp(&bn[..common]) {
        Ordering::Equal => {}
        other => return other,
    }
    let next = |name: &[u8], e: &Entry| match name.get(common) {
        Some(&c) => c,
        None if e.is_dir() => b'/',
        None => 0,
    };
    next(an, a_entry).cmp(&next(bn, b_entry))
}

/// What [`scan_tree_against`] found.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Scanned {
    /// Entries of the tree.
    pub(crate) entries: usize,
    /// Of those, entries equal to one of the base's, not handed to the callback.
    pub(crate) shared: usize,
}

/// A tree to compare another with: its content and, when known, where its entries start.
#[derive(Clone, Copy)]
pub(crate) struct Against<'a> {
    /// The tree's content.
    pub(crate) data: &'a [u8],
    /// Where each entry of `data` starts, then `data.len()`: what [`scan_tree_against`] wrote
    /// for `data` itself (so that `data` parsed whole, by the same rules). Runs of bytes
    /// equal in both trees are then skipped without parsing either.
    pub(crate) starts: Option<&'a [u32]>,
}

/// Calls `f(id, kind, name)` for every entry of the tree `id` whose content is `data`, except
/// gitlinks and except entries that are byte for byte an entry of the tree `base` (when
/// `base` is `None`, for every entry but gitlinks). Writes to `starts` where each entry of
/// `data` starts, then `data.len()` (see [`Against::starts`]). An error when `data` is
/// malformed; a malformed `base` only ends the matching where it goes wrong.
///
/// Where the two trees have a run of equal bytes starting at an entry of each, every entry of
/// `data` inside the run is an entry of `base`: the same bytes at an entry start parse the
/// same way. With the base's entry starts known, such entries are not even parsed.
pub(crate) fn scan_tree_against(
    id: &ObjectId,
    data: &[u8],
    base: Option<Against<'_>>,
    starts: &mut Vec<u32>,
    mut f: impl FnMut(ObjectId, ObjectKind, &[u8]),
) -> Result<Scanned> {
    let bad = || packd_odb::Error::BadName(format!("object {id}: the tree is malformed"));
    let base_data = base.map_or(&[][..], |b| b.data);
    // Entry starts that cannot describe the base are not used (they always describe it when
    // they come from scanning it).
    let mut base_starts = base.and_then(|b| b.starts).filter(|s| {
        s.first() == Some(&0) && s.last().map(|&end| end as usize) == Some(base_data.len())
    });
    let base = base_data;
    // Offsets are recorded as u32: a tree of 4 GiB or more records none.
    let record = data.len() < u32::MAX as usize;
    starts.clear();
    let mut scanned = Scanned::default();
    let mut at = 0;
    // `p` is always where an entry of `base` starts (or `base.len()` once matching stopped);
    // `cur` is that entry, once parsed; `k` is the index of `p` in `base_starts`.
    let mut p = 0;
    let mut cur: Option<Entry> = None;
    let mut k = 0usize;
    while at < data.len() {
        if p < base.len() {
            let run = packd_odb::delta::common_prefix_len(&data[at..], &base[p..]);
            let (at0, p0) = (at, p);
            let before = starts.len();
            if base_starts.is_some_and(|bs| bs.get(k) != Some(&(p as u32))) {
                base_starts = None;
            }
            if let Some(bs) = base_starts {
                // Whole entries of the base inside the run (`bs[k] == p`).
                while let Some(&next) = bs.get(k + 1) {
                    if next as usize <= p {
                        // Not increasing: not the starts of this base.
                        base_starts = None;
                        break;
                    }
                    if next as usize > p0 + run {
                        break;
                    }
                    starts.push((at0 + p - p0) as u32);
                    p = next as usize;
                    k += 1;
                }
            } else {
                while let Some(e) = data.get(at0 + p - p0..).and_then(parse_entry) {
                    if p - p0 + e.len > run {
                        break;
                    }
                    starts.push((at0 + p - p0) as u32);
                    p += e.len;
                }
            }
            let skipped = p - p0;
            if skipped > 0 {
                let entries = starts.len() - before;
                scanned.entries += entries;
                scanned.shared += entries;
                at += skipped;
                cur = None;
                if at >= data.len() {
                    break;
                }
            }
        }
        let rest = &data[at..];
        let entry = parse_entry(rest).ok_or_else(bad)?;
        let bytes = &rest[..entry.len];
        starts.push(at as u32);
        at += entry.len;
        scanned.entries += 1;
        let mut shared = false;
        while p < base.len() {
            if base[p..].starts_with(bytes) {
                // The base's entry at `p` parses exactly as this one: the same entry.
                shared = true;
                p += entry.len;
                k += 1;
                cur = None;
                break;
            }
            let theirs = match cur {
                Some(e) => e,
                None => match parse_entry(&base[p..]) {
                    Some(e) => {
                        cur = Some(e);
                        e
                    }
                    None => {
                        p = base.len();
                        break;
                    }
                },
            };
            match tree_order(&base[p..], &theirs, rest, &entry) {
                // An entry the tree does not have: look at the base's next one.
                Ordering::Less => {
                    p += theirs.len;
                    k += 1;
                    cur = None;
                }
                // The same name with another mode or id: the base's entry is used up.
                Ordering::Equal => {
                    p += theirs.len;
                    k += 1;
                    cur = None;
                    break;
                }
                // An entry the base does not have.
                Ordering::Greater => break,
            }
        }
        if shared {
            scanned.shared += 1;
            continue;
        }
        if let Some(kind) = entry.kind() {
            let oid = ObjectId::from_bytes(&bytes[entry.nul + 1..]).ok_or_else(bad)?;
            f(oid, kind, &bytes[entry.name_at..entry.nul]);
        }
    }
    starts.push(data.len() as u32);
    if !record {
        starts.clear();
    }
    Ok(scanned)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(n: u8) -> ObjectId {
        ObjectId::from_bytes(&[n; 20]).unwrap()
    }

    fn tree(entries: &[(&str, &str, u8)]) -> Vec<u8> {
        let mut t = Vec::new();
        for (mode, name, n) in entries {
            t.extend_from_slice(format!("{mode} {name}\0").as_bytes());
            t.extend_from_slice(&[*n; 20]);
        }
        t
    }

    /// Where the entries of a well-formed `tree` start, then its length.
    fn entry_starts(tree: &[u8]) -> Vec<u32> {
        let mut starts = vec![0u32];
        let mut at = 0;
        while let Some(e) = parse_entry(&tree[at..]) {
            at += e.len;
            starts.push(at as u32);
        }
        starts
    }

    /// The entries `scan_tree_against` reports for `data` against `base`; asserts that the
    /// base's entry starts, when it parses whole, change nothing, and that the scan writes the
    /// entry starts of `data`.
    fn new_entries(data: &[u8], base: Option<&[u8]>) -> (Vec<(ObjectId, ObjectKind)>, Scanned) {
        let scan = |base: Option<Against<'_>>| {
            let mut got = Vec::new();
            let mut starts = Vec::new();
            let s = scan_tree_against(&id(99), data, base, &mut starts, |e, k, _| got.push((e, k)))
                .unwrap();
            assert_eq!(starts, entry_starts(data));
            (got, s)
        };
        let plain = scan(base.map(|data| Against { data, starts: None }));
        if let Some(base) = base {
            let mut base_starts = Vec::new();
            if scan_tree_against(&id(98), base, None, &mut base_starts, |_, _, _| {}).is_ok() {
                let with_starts = scan(Some(Against {
                    data: base,
                    starts: Some(&base_starts),
                }));
                assert_eq!(with_starts, plain, "with the base's entry starts");
            }
        }
        plain
    }

    #[test]
    fn random_edits_report_exactly_the_entries_the_base_lacks() {
        let mut state = 0x2545_f491_4f6c_dd1du64;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        let modes = ["100644", "100755", "40000", "120000", "160000"];
        for round in 0..300 {
            // A sorted base of up to 60 entries, with names that share prefixes.
            let n = (next() % 60) as usize;
            let mut names: Vec<String> = (0..n)
                .map(|_| {
                    let len = 1 + next() % 12;
                    (0..len)
                        .map(|_| (b'a' + (next() % 3) as u8) as char)
                        .collect()
                })
                .collect();
            names.sort();
            names.dedup();
            let base: Vec<(&str, String, u8)> = names
                .iter()
                .map(|name| {
                    (
                        modes[(next() % 5) as usize],
                        name.clone(),
                        (next() % 200) as u8,
                    )
                })
                .collect();
            // The tree: some entries kept, some with another id or mode, some dropped, some
            // added (kept sorted as git would, by name; names are unique).
            let mut tree: Vec<(&str, String, u8)> = Vec::new();
            for (mode, name, n) in &base {
                match next() % 8 {
                    0 => {}
                    1 => tree.push((mode, name.clone(), n.wrapping_add(1))),
                    2 => tree.push((modes[(next() % 5) as usize], name.clone(), *n)),
                    _ => tree.push((mode, name.clone(), *n)),
                }
                if next() % 10 == 0 {
                    let extra = format!("{name}{}", (b'a' + (next() % 3) as u8) as char);
                    if !names.contains(&extra) {
                        tree.push(("100644", extra, 201));
                    }
                }
            }
            let order = |e: &(&str, String, u8)| {
                let mut key = e.1.clone().into_bytes();
                if e.0 == "40000" {
                    key.push(b'/');
                }
                key
            };
            tree.sort_by_key(order);
            tree.dedup_by(|a, b| a.1 == b.1);
            let mut base = base;
            base.sort_by_key(order);
            let as_bytes = |t: &[(&str, String, u8)]| {
                let mut v = Vec::new();
                for (mode, name, n) in t {
                    v.extend_from_slice(format!("{mode} {name}\0").as_bytes());
                    v.extend_from_slice(&[*n; 20]);
                }
                v
            };
            let (data, base) = (as_bytes(&tree), as_bytes(&base));
            let (got, s) = new_entries(&data, Some(&base));
            assert_eq!(got, reference(&data, &base), "round {round}");
            assert_eq!(s.entries, tree.len());
        }
    }

    /// Every entry of `data` that is not, byte for byte, an entry of `base` (gitlinks aside):
    /// what the merge must report at least.
    fn reference(data: &[u8], base: &[u8]) -> Vec<(ObjectId, ObjectKind)> {
        let entries = |t: &[u8]| {
            let mut v = Vec::new();
            let mut at = 0;
            while let Some(e) = parse_entry(&t[at..]) {
                v.push((t[at..at + e.len].to_vec(), e));
                at += e.len;
            }
            v
        };
        let theirs: Vec<Vec<u8>> = entries(base).into_iter().map(|(b, _)| b).collect();
        entries(data)
            .into_iter()
            .filter(|(b, _)| !theirs.contains(b))
            .filter_map(|(b, e)| Some((ObjectId::from_bytes(&b[e.nul + 1..])?, e.kind()?)))
            .collect()
    }

    #[test]
    fn reports_only_what_the_base_lacks() {
        let base = tree(&[
            ("100644", "a", 1),
            ("100644", "b.txt", 2),
            ("40000", "b", 3),
            ("100755", "run", 4),
            ("160000", "sub", 5),
            ("100644", "z", 6),
        ]);
        // The same tree: nothing new.
        let (got, s) = new_entries(&base, Some(&base));
        assert!(got.is_empty());
        assert_eq!(
            s,
            Scanned {
                entries: 6,
                shared: 6
            }
        );
        // One id changed, one mode changed, one entry added, one removed.
        let data = tree(&[
            ("100644", "a", 1),
            ("100644", "aa", 7),
            ("100644", "b.txt", 8),
            ("40000", "b", 3),
            ("100644", "run", 4),
            ("100644", "z", 6),
        ]);
        let (got, s) = new_entries(&data, Some(&base));
        assert_eq!(
            got,
            vec![
                (id(7), ObjectKind::Blob),
                (id(8), ObjectKind::Blob),
                (id(4), ObjectKind::Blob)
            ]
        );
        assert_eq!(s.shared, 3);
        assert_eq!(got, reference(&data, &base));
        // No base: every entry but the gitlink.
        let (got, s) = new_entries(&base, None);
        assert_eq!(got.len(), 5);
        assert_eq!(s.shared, 0);
    }

    #[test]
    fn an_entry_differing_only_in_its_id_or_kind_is_new() {
        let base = tree(&[("40000", "d", 2), ("100644", "f", 1)]);
        for (data, want) in [
            (
                tree(&[("40000", "d", 2), ("100644", "f", 9)]),
                (id(9), ObjectKind::Blob),
            ),
            (
                tree(&[("40000", "d", 9), ("100644", "f", 1)]),
                (id(9), ObjectKind::Tree),
            ),
            (
                tree(&[("100644", "d", 2), ("100644", "f", 1)]),
                (id(2), ObjectKind::Blob),
            ),
            (
                tree(&[("40000", "d", 2), ("40000", "f", 1)]),
                (id(1), ObjectKind::Tree),
            ),
        ] {
            let (got, _) = new_entries(&data, Some(&base));
            assert_eq!(got, vec![want]);
        }
        // The last id byte alone.
        let mut data = base.clone();
        let last = data.len() - 1;
        data[last] ^= 1;
        let (got, _) = new_entries(&data, Some(&base));
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].1, ObjectKind::Blob);
        // An unsorted base only makes fewer entries match.
        let unsorted = tree(&[("100644", "f", 1), ("40000", "d", 2)]);
        let (got, _) = new_entries(&base, Some(&unsorted));
        assert!(got.contains(&(id(2), ObjectKind::Tree)));
    }

    #[test]
    fn crafted_bases_never_hide_an_entry() {
        let data = tree(&[
            ("100644", "a", 1),
            ("100644", "ab", 2),
            ("40000", "b", 3),
            ("100644", "c", 4),
        ]);
        // An entry's bytes inside a longer name of the base; entries out of order; a base cut
        // short, or with garbage between entries; a base that is the tree shifted by a byte.
        let mut shifted = vec![b'1'];
        shifted.extend_from_slice(&data);
        let mut garbage = tree(&[("100644", "a", 1)]);
        garbage.extend_from_slice(b"xx");
        garbage.extend_from_slice(&tree(&[("100644", "ab", 2), ("40000", "b", 3)]));
        let bases = [
            tree(&[("100644", "a\0", 1)]),
            tree(&[("100644", "c", 4), ("40000", "b", 3), ("100644", "a", 1)]),
            data[..data.len() - 5].to_vec(),
            garbage,
            shifted,
            b"100644 a".to_vec(),
            Vec::new(),
        ];
        for base in &bases {
            let (got, s) = new_entries(&data, Some(base));
            let must = reference(&data, base);
            for e in &must {
                assert!(got.contains(e), "{e:?} hidden by base {base:?}");
            }
            assert_eq!(got.len() + s.shared, 4);
        }
        // Every cut and every flipped byte of a real base.
        let base = tree(&[
            ("100644", "a", 1),
            ("100644", "aa", 5),
            ("40000", "b", 3),
            ("100644", "c", 4),
        ]);
        for cut in 0..=base.len() {
            let (got, _) = new_entries(&data, Some(&base[..cut]));
            for e in reference(&data, &base[..cut]) {
                assert!(got.contains(&e), "cut {cut}");
            }
        }
        for at in 0..base.len() {
            let mut b = base.clone();
            b[at] ^= 0x41;
            let (got, _) = new_entries(&data, Some(&b));
            for e in reference(&data, &b) {
                assert!(got.contains(&e), "byte {at}");
            }
        }
    }

    #[test]
    fn common_modes_parse_as_the_digits_do() {
        for mode in [
            "100644", "40000", "100755", "120000", "160000", "644", "040000", "1234567",
        ] {
            for name in ["a", "a-longer-name.txt"] {
                let mut entry = format!("{mode} {name}\0").into_bytes();
                entry.extend_from_slice(&[7; 20]);
                let e = parse_entry(&entry).unwrap();
                let (digits, at) = parse_mode(&entry).unwrap();
                assert_eq!((e.mode, e.name_at), (digits, at), "{mode}");
                assert_eq!(e.len, entry.len());
                assert_eq!(&entry[e.name_at..e.nul], name.as_bytes());
            }
        }
        // A common mode's bytes followed by no name, or cut short.
        for bad in [&b"100644 "[..], b"40000 \0", b"100644 a\0short"] {
            assert!(parse_entry(bad).is_none(), "{bad:?}");
        }
    }

    #[test]
    fn a_malformed_tree_is_an_error_whatever_its_base() {
        let good = tree(&[("100644", "a", 1)]);
        for bad in [&good[..good.len() - 1], b"100648 x\0", b" x\0"] {
            let good = Against {
                data: &good,
                starts: None,
            };
            let mut starts = Vec::new();
            assert!(scan_tree_against(&id(9), bad, Some(good), &mut starts, |_, _, _| {}).is_err());
            assert!(scan_tree_against(&id(9), bad, None, &mut starts, |_, _, _| {}).is_err());
        }
    }

    /// `scan_tree_against` without a base: the number of entries.
    fn scan_tree(
        id: &ObjectId,
        data: &[u8],
        mut f: impl FnMut(ObjectId, ObjectKind),
    ) -> Result<usize> {
        Ok(scan_tree_against(id, data, None, &mut Vec::new(), |e, k, _| f(e, k))?.entries)
    }

    #[test]
    fn finds_the_first_nul_at_every_position() {
        for len in 0..40 {
            for at in 0..len {
                let mut bytes = vec![b'a'; len];
                bytes[at] = 0;
                if at + 3 < len {
                    bytes[at + 3] = 0;
                }
                // Bytes that trip a careless zero-byte test (0x80, 0x01 after a zero).
                if at > 0 {
                    bytes[at - 1] = 0x80;
                }
                assert_eq!(find_nul(&bytes), Some(at), "len {len} at {at}");
            }
            assert_eq!(find_nul(&vec![0x81; len]), None);
        }
    }

    #[test]
    fn scans_trees_as_the_parser_does() {
        let id = |n: u8| ObjectId::from_bytes(&[n; 20]).unwrap();
        let mut tree = Vec::new();
        for (mode, name, n) in [
            ("100644", "a-rather-long-file-name.txt", 1u8),
            ("40000", "dir", 2),
            ("160000", "submodule", 3),
            ("120000", "l", 4),
        ] {
            tree.extend_from_slice(format!("{mode} {name}\0").as_bytes());
            tree.extend_from_slice(&[n; 20]);
        }
        let mut got = Vec::new();
        let n = scan_tree(&id(9), &tree, |e, k| got.push((e, k))).unwrap();
        assert_eq!(n, 4);
        assert_eq!(
            got,
            vec![
                (id(1), ObjectKind::Blob),
                (id(2), ObjectKind::Tree),
                (id(4), ObjectKind::Blob)
            ]
        );
        let parsed: Vec<_> = packd_odb::parse::tree_entries(&id(9), &tree)
            .map(|e| e.unwrap().2)
            .collect();
        assert_eq!(parsed, vec![id(1), id(2), id(3), id(4)]);
        // Malformed: every truncation, a bad digit, an empty or long mode.
        for cut in 0..=tree.len() {
            let part = &tree[..cut];
            assert_eq!(
                scan_tree(&id(9), part, |_, _| {}).is_err(),
                packd_odb::parse::tree_entries(&id(9), part).any(|e| e.is_err()),
                "cut {cut}"
            );
        }
        for bad in [&b"100648 x\0"[..], b" x\0", b"10064400 x\0"] {
            let mut t = bad.to_vec();
            t.extend_from_slice(&[1; 20]);
            assert!(scan_tree(&id(9), &t, |_, _| {}).is_err());
        }
    }
}
