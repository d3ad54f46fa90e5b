//! A pack's entries in pack (offset) order as its `.rev` file lists them, given to the pack by
//! the caller that read the file (`packd_reach::rev_index` reads and checks it).
//!
//! Without it, a pack finds pack positions through a rank index (one bucketing pass over every
//! offset) or a full sort of its offsets. With it:
//! - the entry at a pack position is one lookup in the file;
//! - an entry's pack position, from its offset, is a short search of the file;
//! - many positions (a fill-in walk's) come from the file's inverse, built in one pass that
//!   reads no offset;
//! - every offset in order (a larger fetch's count) is read off it in one pass, with no sort
//!   (see `Pack::reverse_index`).
//!
//! git 2.41 and later write a `.rev` beside every pack. A `packd upload-pack` of a fetch of 165
//! objects from such a pack (git/git, 1 day behind) built the rank index over all 489,184
//! entries: a seventh of its CPU.

use super::Pack;
use crate::Result;
use std::sync::{Arc, OnceLock};

/// Index positions of a pack's entries in pack order: what a `.rev` file holds.
pub trait PackOrder: Send + Sync + std::fmt::Debug {
    /// The index position of each pack position, as a `.rev` stores them: four bytes each,
    /// big-endian, one per entry of the pack.
    fn positions_be(&self) -> &[u8];

    /// The index position of the entry at pack position `pack_pos`; `None` past the last entry,
    /// or when the order names a position past the entries (a damaged file).
    fn index_position(&self, pack_pos: u32) -> Option<u32> {
        let positions = self.positions_be();
        let at = 4 * pack_pos as usize;
        let pos = u32::from_be_bytes(positions.get(at..at + 4)?.try_into().ok()?);
        ((pos as usize) < positions.len() / 4).then_some(pos)
    }
}

/// A pack's order and its inverse, built on first use.
#[derive(Debug)]
pub(crate) struct Order {
    list: Arc<dyn PackOrder>,
    /// Pack position by index position; `None` inside when the list is no permutation.
    inverse: OnceLock<Option<Vec<u32>>>,
    /// Set when the list proved not to be in offset order (see `Pack::reverse_index`).
    disordered: std::sync::atomic::AtomicBool,
}

impl Order {
    /// The index position of the entry at pack position `pack_pos` (see
    /// [`PackOrder::index_position`]).
    pub(crate) fn index_position(&self, pack_pos: u32) -> Option<u32> {
        self.list.index_position(pack_pos)
    }
}

/// Steps of interpolation a search by offset takes before it bisects what is left.
const INTERPOLATION_STEPS: u32 = 8;

impl Pack {
    /// Gives the pack its order as read from its `.rev` (which must be this pack's: the caller
    /// checked the pack checksum it records). Ignored when an order was given already.
    pub fn set_pack_order(&self, list: Arc<dyn PackOrder>) {
        if list.positions_be().len() != 4 * self.len() as usize {
            tracing::warn!(
                "{}: a pack order of {} bytes is not one of its {} entries; ignoring it",
                self.data_name(),
                list.positions_be().len(),
                self.len()
            );
            return;
        }
        let _ = self.order.set(Order {
            list,
            inverse: OnceLock::new(),
            disordered: Default::default(),
        });
    }

    /// Whether the pack finds entries by its order (see [`Pack::set_pack_order`]): it was given
    /// one, and it did not prove damaged.
    pub fn has_pack_order(&self) -> bool {
        self.order().is_some()
    }

    /// The pack's order, unless it has none or it proved damaged: no permutation when its
    /// inverse was built, or not in offset order when the sorted offsets were read off it
    /// (then the pack answers as without one).
    pub(crate) fn order(&self) -> Option<&Order> {
        self.order.get().filter(|order| {
            !matches!(order.inverse.get(), Some(None))
                && !order.disordered.load(std::sync::atomic::Ordering::Relaxed)
        })
    }

    /// The pack's order while it is the cheapest way to find entries: until the reverse index
    /// is built (which then answers, with no search).
    pub(crate) fn live_order(&self) -> Option<&Order> {
        self.order().filter(|_| !self.has_reverse_index())
    }

    /// The index position of the entry at pack position `pos` (the bit that stands for it in a
    /// bitmap): one lookup in the pack's order while it is live, else
    /// [`Pack::entry_at_position`] (which a built reverse index answers exactly). `None` past
    /// the last entry.
    pub fn index_position_at(&self, pos: u32) -> Result<Option<u32>> {
        if let Some(index_pos) = self
            .live_order()
            .and_then(|order| order.index_position(pos))
        {
            return Ok(Some(index_pos));
        }
        Ok(self.entry_at_position(pos)?.map(|(_, index_pos)| index_pos))
    }

    /// Stops using the order: it proved not to be in offset order.
    pub(crate) fn drop_disordered(&self) {
        if let Some(order) = self.order.get() {
            order
                .disordered
                .store(true, std::sync::atomic::Ordering::Relaxed);
        }
    }

    /// The pack position of every index position, by index position, when the pack's order
    /// gave them and they were built already (by [`Pack::pack_position`]): nothing is built
    /// here. For a caller that would otherwise read many entries' offsets to order them.
    pub fn built_pack_positions(&self) -> Option<&[u32]> {
        self.order()?.inverse.get()?.as_deref()
    }

    /// The pack position of the object at `index_pos` by a search of the pack's order, which
    /// builds nothing: for a query that asks a few positions. `None` when the order does not
    /// place the object. Without an order, [`Pack::pack_position`].
    pub fn pack_position_by_search(&self, index_pos: u32) -> Result<Option<u32>> {
        // A table already built answers without a search.
        let Some(order) = self
            .live_order()
            .filter(|_| self.built_pack_positions().is_none())
        else {
            return self.pack_position(index_pos);
        };
        if index_pos >= self.len() {
            return Ok(None);
        }
        let offset = self.index.offset(index_pos)?;
        Ok(self
            .search_order(order, offset)?
            .filter(|&p| order.index_position(p) == Some(index_pos)))
    }

    /// The pack position whose entry starts at `offset`, by a search of `order`: interpolation on
    /// the offsets first (they grow roughly evenly with pack position, so a few steps land next
    /// to it, each reading two entries where bisection reads about twenty), then bisection of
    /// what is left.
    pub(crate) fn search_order(&self, order: &Order, want: u64) -> Result<Option<u32>> {
        let n = self.len();
        if n == 0 {
            return Ok(None);
        }
        let offset_at = |p: u32| -> Result<Option<u64>> {
            match order.index_position(p) {
                Some(i) => Ok(Some(self.index.offset(i)?)),
                None => Ok(None),
            }
        };
        let (mut lo, mut hi) = (0u32, n - 1);
        let (Some(mut lo_off), Some(mut hi_off)) = (offset_at(lo)?, offset_at(hi)?) else {
            return Ok(None);
        };
        for _ in 0..INTERPOLATION_STEPS {
            if want < lo_off || want > hi_off {
                return Ok(None);
            }
            if want == lo_off {
                return Ok(Some(lo));
            }
            if want == hi_off {
                return Ok(Some(hi));
            }
            if hi - lo < 2 {
                return Ok(None);
            }
            // lo_off < want < hi_off here: the guess, clamped, lies strictly inside (lo, hi).
            let guess = lo
                + ((want - lo_off) as u128 * (hi - lo) as u128 / (hi_off - lo_off) as u128) as u32;
            let guess = guess.clamp(lo + 1, hi - 1);
            let Some(at) = offset_at(guess)? else {
                return Ok(None);
            };
            match at.cmp(&want) {
                std::cmp::Ordering::Equal => return Ok(Some(guess)),
                std::cmp::Ordering::Less => (lo, lo_off) = (guess, at),
                std::cmp::Ordering::Greater => (hi, hi_off) = (guess, at),
            }
        }
        // Bisection over [lo, hi]: the first position whose offset is not below `want`.
        let (mut a, mut b) = (lo, hi + 1);
        while a < b {
            let mid = a + (b - a) / 2;
            let Some(at) = offset_at(mid)? else {
                return Ok(None);
            };
            if at < want {
                a = mid + 1;
            } else {
                b = mid;
            }
        }
        Ok((a < n && offset_at(a)? == Some(want)).then_some(a))
    }

    /// The index position of the entry at `offset`, which is at pack position `pack_pos`, and
    /// where that entry ends (the next entry's offset, or the trailer's); `None` when the order
    /// does not place its neighbours (one before, two after) in offset order around it, or the
    /// entry before the entries' start (a damaged `.rev` or `.idx`: the caller then asks the
    /// exact reverse index). The check is local: it finds any two entries swapped, not every
    /// damage (an entry moved several places can give a span over two entries, which a reuse
    /// of the bytes then refuses by the index's CRC-32, as git trusts a `.rev` entirely).
    pub(crate) fn order_entry(
        &self,
        order: &Order,
        pack_pos: u32,
        offset: u64,
    ) -> Result<Option<(u32, u64)>> {
        let Some(index_pos) = order.index_position(pack_pos) else {
            return Ok(None);
        };
        let trailer = self.entries_end();
        if offset < 12 {
            return Ok(None);
        }
        if pack_pos > 0 {
            match order.index_position(pack_pos - 1) {
                Some(previous) if self.index.offset(previous)? < offset => {}
                _ => return Ok(None),
            }
        }
        // The next entry, and the one after it: a swap of two entries puts one of them out of
        // place among its neighbours.
        let mut ends = [trailer; 2];
        for (k, end) in ends.iter_mut().enumerate() {
            let p = pack_pos + 1 + k as u32;
            if p < self.len() {
                match order.index_position(p) {
                    Some(next) => *end = self.index.offset(next)?,
                    None => return Ok(None),
                }
            }
        }
        let [end, after] = ends;
        let in_place = offset < end && end <= trailer && (end < after || after == trailer);
        Ok(in_place.then_some((index_pos, end)))
    }

    /// The pack position of every index position: the order's inverse, built on first use in
    /// one pass; `None` when the order is no permutation of the index positions (a damaged
    /// `.rev`): the pack then stops using the order (see [`Pack::order`]).
    pub(crate) fn order_inverse<'a>(&self, order: &'a Order) -> Option<&'a [u32]> {
        order
            .inverse
            .get_or_init(|| {
                let mut inverse = vec![u32::MAX; self.len() as usize];
                for (p, bytes) in order.list.positions_be().chunks_exact(4).enumerate() {
                    let index_pos = u32::from_be_bytes(bytes.try_into().expect("4 bytes"));
                    let slot = inverse.get_mut(index_pos as usize);
                    if slot.as_ref().is_none_or(|slot| **slot != u32::MAX) {
                        tracing::warn!(
                            "{}: its .rev names object {index_pos} at pack position {p}, which \
                             is past its objects or named before; ignoring the .rev",
                            self.data_name()
                        );
                        return None;
                    }
                    let slot = slot.expect("checked above");
                    *slot = p as u32;
                }
                Some(inverse)
            })
            .as_deref()
    }
}
