//! Opening a pack: reading its index and checking that data file and index belong together.

use super::index::PackIndex;
use super::{Pack, ReverseIndex};
use crate::hash::HashKind;
use crate::{Error, Result};
use packd_storage::Storage;
use std::sync::OnceLock;

impl Pack {
    /// Opens the pack whose index is `idx_name` (e.g. `pack/pack-1234.idx`) in `storage`.
    ///
    /// Reads the whole index and the data file's 12-byte header and 20-byte trailer: the object
    /// counts and the pack checksum must agree, or this is not the index of this pack.
    pub fn open(storage: &dyn Storage, idx_name: &str, id: u32, hash: HashKind) -> Result<Pack> {
        let stem = idx_name.strip_suffix(".idx").ok_or_else(|| {
            Error::BadName(format!("{idx_name}: a pack index name must end in .idx"))
        })?;
        let pack_name = format!("{stem}.pack");
        let idx_blob = storage.open(idx_name)?;
        let mut index = PackIndex::from_bytes(idx_blob.name(), idx_blob.read_all()?)?;
        index.keep_blob(idx_blob);
        let data = storage.open(&pack_name)?;
        let file = data.name().to_string();
        if data.len() < 12 + 20 {
            return Err(Error::corrupt(
                &file,
                0,
                format!("pack is truncated ({} bytes)", data.len()),
            ));
        }
        let header = data.read(0..12)?;
        if &header[..4] != b"PACK" {
            return Err(Error::corrupt(&file, 0, "not a pack file (bad signature)"));
        }
        let version = u32::from_be_bytes(header[4..8].try_into().unwrap());
        if version != 2 && version != 3 {
            return Err(Error::corrupt(
                &file,
                4,
                format!("unsupported pack version {version}"),
            ));
        }
        let count = u32::from_be_bytes(header[8..12].try_into().unwrap());
        if count != index.len() {
            return Err(Error::corrupt(
                &file,
                8,
                format!(
                    "pack holds {count} objects but its index {} lists {}",
                    index.name(),
                    index.len()
                ),
            ));
        }
        let trailer = data.read(data.len() - 20..data.len())?;
        if trailer[..] != *index.pack_checksum() {
            return Err(Error::corrupt(
                &file,
                data.len() - 20,
                format!(
                    "pack checksum does not match the one recorded in {}",
                    index.name()
                ),
            ));
        }
        Ok(Pack {
            id,
            name: pack_name,
            data,
            index,
            hash,
            reverse: OnceLock::new(),
            rank: OnceLock::new(),
            order: OnceLock::new(),
            one_by_one: std::sync::atomic::AtomicU32::new(0),
            crcs: OnceLock::new(),
        })
    }
}

impl Pack {
    /// The pack's entries in offset order: every entry offset ascending, then the trailer's
    /// offset, and beside each offset the entry's position in the index.
    ///
    /// Index entries placed outside the pack's entries, or at an offset another entry already
    /// has, are set aside in `misplaced`: reading them fails, `verify` reports them, and the rest
    /// of the pack stays readable, as with git.
    pub(crate) fn reverse_index(&self) -> Result<&ReverseIndex> {
        if let Some(v) = self.reverse.get() {
            return Ok(v);
        }
        if let Some(reverse) = self.reverse_index_from_order()? {
            return Ok(self.reverse.get_or_init(|| reverse));
        }
        let n = self.index.len();
        let trailer = self.entries_end();
        let mut misplaced = Vec::new();
        // (offset << 32 | position) keys when offsets fit in 32 bits (packs under 4 GiB): sorting
        // the keys sorts by offset, then position, in half the memory of pairs.
        let (offsets, positions) = if trailer <= u32::MAX as u64 {
            let mut keys = Vec::with_capacity(n as usize);
            let push = |offset: u64, i: u32| {
                if (12..trailer).contains(&offset) {
                    keys.push((offset << 32) | i as u64);
                } else {
                    misplaced.push((offset, i));
                }
            };
            self.index.for_each_offset(push)?;
            radix_sort_high_half(&mut keys);
            let positions: Vec<u32> = keys.iter().map(|&k| k as u32).collect();
            let offsets: Vec<u64> = keys.into_iter().map(|k| k >> 32).collect();
            (offsets, positions)
        } else {
            let mut pairs = Vec::with_capacity(n as usize);
            for i in 0..n {
                let offset = self.index.offset(i)?;
                if (12..trailer).contains(&offset) {
                    pairs.push((offset, i));
                } else {
                    misplaced.push((offset, i));
                }
            }
            pairs.sort_unstable();
            pairs.into_iter().unzip()
        };
        // Two index entries at one offset: the first (by position) keeps it, as in git.
        let mut offsets_out = Vec::with_capacity(offsets.len() + 1);
        let mut positions_out = Vec::with_capacity(positions.len());
        for (offset, i) in offsets.into_iter().zip(positions) {
            if offsets_out.last() == Some(&offset) {
                misplaced.push((offset, i));
            } else {
                offsets_out.push(offset);
                positions_out.push(i);
            }
        }
        offsets_out.push(trailer);
        let (offsets, positions) = (offsets_out, positions_out);
        Ok(self.reverse.get_or_init(|| ReverseIndex {
            offsets,
            positions,
            misplaced,
        }))
    }

    /// The reverse index read off the pack's order, without a sort: one pass that reads each
    /// entry's offset in pack order. `None` when the pack has no order, or when the offsets it
    /// gives are not strictly ascending within the entries (a damaged `.rev`, or an index with
    /// misplaced entries): the sort then builds it and sets those entries aside.
    ///
    /// On git/git 32 days behind, a process per request sorted the offsets of a pack with a
    /// `.rev` to count the objects to send: git, which reads the `.rev`, cost 0.045 s of CPU and
    /// packd 0.053 s.
    fn reverse_index_from_order(&self) -> Result<Option<ReverseIndex>> {
        let Some(order) = self.order() else {
            return Ok(None);
        };
        let n = self.index.len();
        let trailer = self.entries_end();
        let mut offsets = Vec::with_capacity(n as usize + 1);
        let mut positions = Vec::with_capacity(n as usize);
        let mut last = None;
        for p in 0..n {
            let Some(index_pos) = order.index_position(p) else {
                self.drop_disordered();
                return Ok(None);
            };
            let offset = self.index.offset(index_pos)?;
            if offset < 12 || offset >= trailer || last.is_some_and(|last| offset <= last) {
                tracing::warn!(
                    "{}: its .rev and .idx do not give its entries in offset order (pack \
                     position {p}); sorting the offsets instead",
                    self.data_name()
                );
                self.drop_disordered();
                return Ok(None);
            }
            last = Some(offset);
            offsets.push(offset);
            positions.push(index_pos);
        }
        offsets.push(trailer);
        Ok(Some(ReverseIndex {
            offsets,
            positions,
            misplaced: Vec::new(),
        }))
    }

    /// Every entry offset ascending, then the trailer's offset (entry `i` in pack order ends
    /// where entry `i + 1` starts). The first call builds the reverse index.
    pub fn sorted_offsets(&self) -> Result<&[u64]> {
        Ok(&self.reverse_index()?.offsets)
    }

    /// The pack's rank index, built on first use (see `rank.rs`), unless it has a reverse
    /// index already or cannot have a rank index (over 4 GiB, or an entry placed outside the
    /// entries): then `None`, and the reverse index answers.
    fn rank_index(&self) -> Option<&super::rank::RankIndex> {
        if self.has_reverse_index() {
            return None;
        }
        // Threads asking at once wait for one build. A failure to build (an offset that cannot
        // be read) leaves the exact reverse index to report it.
        self.rank
            .get_or_init(|| {
                let built = super::rank::RankIndex::build(&self.index, self.entries_end())
                    .ok()
                    .flatten();
                if built.is_some() {
                    tracing::debug!("{}: rank index built", self.data_name());
                }
                built
            })
            .as_ref()
    }

    /// The way to find one more entry one by one: the pack's order when it has one, else the
    /// rank index; `None` once as many lookups as a [`ONE_BY_ONE_SHARE`]th of the pack's entries
    /// were made that way (the caller then builds the reverse index, which costs less than many
    /// more: on git/git's 841,300 entries, sorting took 33-43 ms of CPU, the rank index 11 ms,
    /// then 0.9 µs a lookup). Callers that go through most of the pack thus pay at most that
    /// many lookups before the sort.
    fn take_one_by_one(&self) -> Option<OneByOne<'_>> {
        if self.has_reverse_index() {
            return None;
        }
        let way = match self.live_order() {
            Some(order) => OneByOne::Order(order),
            None => OneByOne::Rank(self.rank_index()?),
        };
        let limit = self.index.len() / ONE_BY_ONE_SHARE;
        // Counted up to the limit only, so that it never wraps.
        self.one_by_one
            .fetch_update(
                std::sync::atomic::Ordering::Relaxed,
                std::sync::atomic::Ordering::Relaxed,
                |used| (used < limit).then_some(used + 1),
            )
            .ok()
            .map(|_| way)
    }

    /// The index position of the entry at `offset` and where it ends, found one by one; `None`
    /// when this way does not find it (the exact reverse index then says why).
    fn span_one_by_one(&self, way: OneByOne<'_>, offset: u64) -> Result<Option<(u32, u64)>> {
        Ok(match way {
            OneByOne::Order(order) => match self.search_order(order, offset)? {
                Some(p) => self.order_entry(order, p, offset)?,
                None => None,
            },
            OneByOne::Rank(rank) => rank.index_position(&self.index, offset).map(|index_pos| {
                let trailer = self.entries_end();
                (index_pos, rank.next_offset(offset).unwrap_or(trailer))
            }),
        })
    }

    /// Why no entry was found at `offset` (the index placed an object there, or a delta named
    /// a base there): outside the pack's entries, or between entries.
    fn no_entry_at(&self, offset: u64) -> Error {
        if offset < 12 || offset >= self.entries_end() {
            return Error::corrupt(
                self.data.name(),
                offset,
                format!(
                    "no entry starts here: outside the entries (12..{})",
                    self.entries_end()
                ),
            );
        }
        Error::corrupt(
            self.data.name(),
            offset,
            "no object of the index starts at this offset",
        )
    }

    /// The index position of the entry at `offset`. Neither way one by one needs the entry's
    /// end for it: the rank index is exact, and a search of the order stops only at a pack
    /// position whose entry starts at `offset` (so no neighbour is read to check the order).
    pub fn position_at(&self, offset: u64) -> Result<u32> {
        let found = match self.take_one_by_one() {
            Some(OneByOne::Rank(rank)) => {
                return rank
                    .index_position(&self.index, offset)
                    .ok_or_else(|| self.no_entry_at(offset))
            }
            Some(OneByOne::Order(order)) => self
                .search_order(order, offset)?
                .and_then(|p| order.index_position(p)),
            None => None,
        };
        match found {
            Some(index_pos) => Ok(index_pos),
            None => self.exact_span(offset).map(|(index_pos, _)| index_pos),
        }
    }

    /// The index position of the entry at `offset` and where it ends: [`Pack::position_at`] and
    /// [`Pack::entry_end`] in one lookup (one of the one-by-one lookups when the reverse index
    /// is not built).
    pub fn entry_span(&self, offset: u64) -> Result<(u32, u64)> {
        match self.take_one_by_one() {
            Some(way) => match self.span_one_by_one(way, offset)? {
                Some(span) => Ok(span),
                // The rank index is exact: no entry starts there.
                None if matches!(way, OneByOne::Rank(_)) => Err(self.no_entry_at(offset)),
                None => self.exact_span(offset),
            },
            None => self.exact_span(offset),
        }
    }

    /// [`Pack::entry_span`] from the reverse index (sorting every offset the first time).
    fn exact_span(&self, offset: u64) -> Result<(u32, u64)> {
        let rev = self.reverse_index()?;
        match rev.offsets[..rev.positions.len()].binary_search(&offset) {
            Ok(i) => Ok((rev.positions[i], rev.offsets[i + 1])),
            Err(_) => Err(self.no_entry_at(offset)),
        }
    }

    /// The offset and index position of the entry at pack position `pos` (the bit that stands
    /// for it in a bitmap); `None` past the last entry (or, through the rank index, at an offset
    /// two index entries share). Without a reverse index, the pack's order answers in one
    /// lookup, or the rank index (a few hundred steps) for as long as that costs less than
    /// sorting every offset (see `Pack::take_one_by_one`); callers that know they go through
    /// most of the pack take [`Pack::sorted_offsets`] at once.
    pub fn entry_at_position(&self, pos: u32) -> Result<Option<(u64, u32)>> {
        // The pack's order answers in one lookup, with no budget to count.
        if let Some(order) = self.live_order() {
            match order.index_position(pos) {
                Some(index_pos) => return Ok(Some((self.index.offset(index_pos)?, index_pos))),
                None if pos >= self.len() => return Ok(None),
                // A position past the objects in a damaged `.rev`: the sorted offsets answer.
                None => {}
            }
        }
        if let Some(OneByOne::Rank(rank)) = self.take_one_by_one() {
            return Ok(rank.select(&self.index, pos));
        }
        let rev = self.reverse_index()?;
        Ok(rev
            .positions
            .get(pos as usize)
            .map(|&index_pos| (rev.offsets[pos as usize], index_pos)))
    }

    /// Whether `entries` of this pack are few enough to find one by one (see
    /// [`Pack::entry_at_position`]) rather than by sorting every offset: within the budget of
    /// one-by-one lookups at `LOOKUPS_PER_ENTRY` each, while nothing has sorted the offsets
    /// yet. Measured on git/git (841,300 entries) in a fresh process: sorting took 33-43 ms of
    /// CPU; the rank index 11 ms, then about 0.9 µs a lookup, so that 13,000 lookups cost 20 ms
    /// and 30,000 cost 38 ms.
    pub fn few_enough_one_by_one(&self, entries: u64) -> bool {
        !self.has_reverse_index()
            && entries <= u64::from(self.index.len() / ONE_BY_ONE_SHARE) / LOOKUPS_PER_ENTRY
    }

    /// Whether the reverse index has been built (so that [`Pack::pack_position`] and
    /// [`Pack::positions_in_pack_order`] cost no more than a lookup).
    pub fn has_reverse_index(&self) -> bool {
        self.reverse.get().is_some()
    }

    /// Index positions of all entries in pack (offset) order.
    pub fn positions_in_pack_order(&self) -> Result<&[u32]> {
        Ok(&self.reverse_index()?.positions)
    }

    /// The CRC-32 of every entry in pack (offset) order, or `None` for a v1 index, which has
    /// none. Reading entries front to back (a clone) then checks each against a table read in
    /// order instead of jumping around the index's CRC table.
    pub fn crcs_in_pack_order(&self) -> Result<Option<&[u32]>> {
        if let Some(crcs) = self.crcs.get() {
            return Ok(crcs.as_deref());
        }
        let positions = self.positions_in_pack_order()?;
        let crcs: Option<Vec<u32>> = positions.iter().map(|&p| self.index.crc32(p)).collect();
        Ok(self.crcs.get_or_init(|| crcs).as_deref())
    }

    /// Asks the processor for what [`Pack::pack_position`] reads first for `index_pos` (its
    /// entry in a built inverse of the pack's order, else its offset in the index), and with
    /// `offset` for the object's offset too (for a caller that will read the object). For a
    /// caller with several positions to find (see `PackIndex::prefetch_find`).
    #[inline]
    pub fn prefetch_pack_position(&self, index_pos: u32, offset: bool) {
        let inverse = self.built_pack_positions();
        if let Some(p) = inverse.and_then(|inverse| inverse.get(index_pos as usize)) {
            crate::prefetch::line(p as *const u32 as *const u8);
        }
        if offset || inverse.is_none() {
            self.index.prefetch_offset(index_pos);
        }
    }

    /// The pack position (rank by offset) of the object at index position `index_pos`: the bit
    /// that stands for it in a bitmap. A binary search over the reverse index when it exists,
    /// else a lookup in the inverse of the pack's order when it has one (one pass over its
    /// `.rev` to build), else in a rank index that costs one bucketing pass instead of a sort
    /// (see `rank.rs`).
    pub fn pack_position(&self, index_pos: u32) -> Result<Option<u32>> {
        if index_pos >= self.index.len() {
            return Ok(None);
        }
        // The order's inverse answers in one lookup, also once the reverse index is built.
        if let Some(inverse) = self.built_pack_positions() {
            return Ok(inverse.get(index_pos as usize).copied());
        }
        if let Some(order) = self.live_order() {
            if let Some(inverse) = self.order_inverse(order) {
                return Ok(inverse.get(index_pos as usize).copied());
            }
        }
        let offset = self.index.offset(index_pos)?;
        if let Some(rank) = self.rank_index() {
            return Ok(rank.rank(offset));
        }
        let rev = self.reverse_index()?;
        Ok(
            match rev.offsets[..rev.positions.len()].binary_search(&offset) {
                Ok(p) if rev.positions[p] == index_pos => Some(p as u32),
                _ => None,
            },
        )
    }

    /// Where the entry starting at `offset` ends (the next entry's offset, or the trailer).
    /// Without a reverse index, the pack's order or the rank index answers, one by one (see
    /// `Pack::take_one_by_one`).
    pub fn entry_end(&self, offset: u64) -> Result<u64> {
        match self.take_one_by_one() {
            // The rank index finds an end without the entry's index position, and it is exact:
            // no entry starts where it finds none (said without sorting every offset). It is
            // built only over an index that places every entry inside the pack's entries, so
            // an offset it does not find came from elsewhere (a delta's base distance).
            Some(OneByOne::Rank(rank)) => {
                return match rank.rank(offset) {
                    Some(_) => Ok(rank.next_offset(offset).unwrap_or(self.entries_end())),
                    None => Err(self.no_entry_at(offset)),
                };
            }
            Some(way @ OneByOne::Order(_)) => {
                if let Some((_, end)) = self.span_one_by_one(way, offset)? {
                    return Ok(end);
                }
            }
            None => {}
        }
        let offsets = self.sorted_offsets()?;
        match offsets.binary_search(&offset) {
            Ok(i) if i + 1 < offsets.len() => Ok(offsets[i + 1]),
            _ => Err(self.no_entry_at(offset)),
        }
    }
}

/// A way to find an entry one by one (see [`Pack::take_one_by_one`]).
#[derive(Clone, Copy)]
enum OneByOne<'a> {
    Order(&'a super::order::Order),
    Rank(&'a super::rank::RankIndex),
}

/// The share of a pack's entries (one in this many) that may be looked up one by one, through
/// the pack's order or the rank index, before the reverse index is built instead.
const ONE_BY_ONE_SHARE: u32 = 64;

/// One-by-one lookups a pack entry sent costs, as a writer plans: counting it, its span, its
/// end when read along with the entry before it, and some more for delta bases.
const LOOKUPS_PER_ENTRY: u64 = 4;

/// Sorts keys by their high 32 bits, stably: equal high halves keep their order (callers push
/// positions ascending and rely on it).
///
/// Public for other per-pack tables built the same way (a 32-bit sort key over a 32-bit
/// position). Without a `.rev` file this sort runs every time a pack's reverse index is first
/// needed (489k to 849k entries for git/git), so it is a radix sort over the significant bits
/// of the high half: a few linear passes of 11-bit digits, whose 2048 buckets stay in cache
/// while scattering, instead of a comparison sort.
pub fn radix_sort_high_half(keys: &mut Vec<u64>) {
    const BITS: u32 = 11;
    const MASK: u64 = (1 << BITS) - 1;
    if keys.len() < 4096 {
        keys.sort_by_key(|k| k >> 32);
        return;
    }
    let max = keys.iter().map(|k| k >> 32).max().unwrap_or(0);
    let top = 32 + (64 - max.leading_zeros());
    let mut scratch = vec![0u64; keys.len()];
    let mut counts = vec![0u32; 1 << BITS];
    let mut shift = 32;
    while shift < top {
        counts.fill(0);
        for &k in keys.iter() {
            counts[((k >> shift) & MASK) as usize] += 1;
        }
        let mut sum = 0;
        for c in counts.iter_mut() {
            let n = *c;
            *c = sum;
            sum += n;
        }
        for &k in keys.iter() {
            let d = ((k >> shift) & MASK) as usize;
            scratch[counts[d] as usize] = k;
            counts[d] += 1;
        }
        std::mem::swap(keys, &mut scratch);
        shift += BITS;
    }
}

#[cfg(test)]
mod tests {
    use super::radix_sort_high_half;

    #[test]
    fn radix_sort_matches_a_comparison_sort() {
        let mut state = 0x2545_f491_4f6c_dd1du64;
        let mut next = || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        for (n, range) in [
            (50_000u64, 1u64 << 31),
            (30_000, 700),
            (20_000, u32::MAX as u64),
            // Below the radix sort's threshold, with many equal high halves: still stable.
            (3_000, 50),
        ] {
            let mut keys: Vec<u64> = (0..n).map(|i| ((next() % range) << 32) | i).collect();
            let mut expected = keys.clone();
            expected.sort_unstable();
            radix_sort_high_half(&mut keys);
            assert_eq!(keys, expected, "n={n} range={range}");
        }
    }
}
