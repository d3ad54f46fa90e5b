//! The objects a `.bitmap` numbers: those of one pack, or those of a multi-pack-index.
//!
//! A bitmap's bit `i` stands for the `i`th object in *pack order*:
//! - for a pack bitmap, the pack's entries by offset (the order a `.rev` file lists);
//! - for a multi-pack-index bitmap, the *pseudo-pack* order: the preferred pack's objects first,
//!   then every other pack's in pack-number order, each pack's by offset, counting only the copy
//!   the multi-pack-index chose for each object. The RIDX chunk, or with older git a
//!   `multi-pack-index-<checksum>.rev` file, lists it; git cannot use such a bitmap without one,
//!   and neither does packd.
//!
//! Commit positions in the bitmap, on the other hand, are positions in id order (in the `.idx`,
//! or in the multi-pack-index). This module converts between the two.

use crate::rev_index::RevIndex;
use packd_odb::pack::multi_index::MultiPackIndex;
use packd_odb::pack::order::PackOrder as _;
use packd_odb::pack::Pack;
use packd_odb::{Error, Location, ObjectId, Result};
use packd_storage::Storage;
use std::sync::Arc;

/// Position lookups answered by searching a pack's `.rev` before its position index is built,
/// when no walk started the build on its own thread (see [`Bitmapped::bit_of`]).
const REV_LOOKUPS: u32 = 256;

/// The objects of a bitmap, and the map between their id order and their pack order.
pub(crate) enum Bitmapped {
    /// One pack.
    Pack {
        /// The pack, given its `.rev` as its order when it has a valid one (see
        /// `Pack::set_pack_order`).
        pack: Arc<Pack>,
        /// Positions looked up by searching the `.rev` so far (see [`Bitmapped::bit_of`]).
        lookups: std::sync::atomic::AtomicU32,
        /// Whether [`Bitmapped::warm_positions`] started the pack's position index.
        warming: std::sync::atomic::AtomicBool,
        /// Set by the thread [`Bitmapped::warm_positions`] started once the index is built.
        warmed: Arc<std::sync::atomic::AtomicBool>,
    },
    /// A multi-pack-index over several packs.
    Midx {
        /// The multi-pack-index.
        midx: Arc<MultiPackIndex>,
        /// Its packs, by pack number.
        packs: Vec<Arc<Pack>>,
        /// The `.rev` file, when the multi-pack-index has no RIDX chunk.
        rev: Option<RevIndex>,
        /// The preferred pack's number: the pack of the object at pseudo-pack position 0.
        preferred: u32,
    },
}

/// Reads `<stem>.rev` for an object set of `count` objects with checksum `checksum`; `None`
/// when there is none, or (with a warning) when it is invalid.
fn read_rev(
    storage: &dyn Storage,
    name: &str,
    checksum: &[u8],
    count: u32,
) -> Result<Option<RevIndex>> {
    match storage.open(name) {
        Ok(blob) => match RevIndex::open(blob.as_ref(), checksum, count) {
            Ok(rev) => Ok(Some(rev)),
            Err(e) => {
                tracing::warn!("ignoring {}: {e}", blob.name());
                Ok(None)
            }
        },
        Err(e) if e.is_not_found() => Ok(None),
        Err(e) => Err(e.into()),
    }
}

impl Bitmapped {
    /// The objects of `pack`, with its `.rev` when it has a valid one. Without one, pack
    /// positions come from the pack's own rank and reverse indexes, built on first use: a query
    /// whose tips all have bitmaps needs neither.
    pub(crate) fn pack(storage: &dyn Storage, pack: &Arc<Pack>) -> Result<Bitmapped> {
        let rev = match pack.name().strip_suffix(".pack") {
            Some(stem) => read_rev(
                storage,
                &format!("{stem}.rev"),
                pack.index().pack_checksum(),
                pack.len(),
            )?,
            None => None,
        };
        if let Some(rev) = rev {
            tracing::debug!("{}: pack order taken from its .rev", pack.name());
            pack.set_pack_order(Arc::new(rev));
        }
        Ok(Bitmapped::Pack {
            pack: pack.clone(),
            lookups: Default::default(),
            warming: Default::default(),
            warmed: Default::default(),
        })
    }

    /// The objects of a multi-pack-index; `None` (with a warning) when it has neither a RIDX
    /// chunk nor a valid `.rev` file, as git then cannot use its bitmap either.
    pub(crate) fn midx(
        storage: &dyn Storage,
        midx: &Arc<MultiPackIndex>,
        packs: Vec<Arc<Pack>>,
    ) -> Result<Option<Bitmapped>> {
        let rev = if midx.has_reverse_index() {
            None
        } else {
            let name = format!(
                "pack/multi-pack-index-{}.rev",
                packd_odb::hex(midx.checksum())
            );
            match read_rev(storage, &name, midx.checksum(), midx.len())? {
                Some(rev) => Some(rev),
                None => {
                    tracing::warn!(
                        "ignoring the bitmap of {}: it has no reverse index (RIDX chunk or {name})",
                        midx.name()
                    );
                    return Ok(None);
                }
            }
        };
        let mut set = Bitmapped::Midx {
            midx: midx.clone(),
            packs,
            rev,
            preferred: 0,
        };
        if let Some(first) = set.position_at(0) {
            let (pack, _) = midx.location(first)?;
            if let Bitmapped::Midx { preferred, .. } = &mut set {
                *preferred = pack;
            }
        }
        Ok(Some(set))
    }

    /// The pack, when the objects are one pack's.
    pub(crate) fn single_pack(&self) -> Option<&Arc<Pack>> {
        match self {
            Bitmapped::Pack { pack, .. } => Some(pack),
            Bitmapped::Midx { .. } => None,
        }
    }

    /// The number of objects, which is the number of bits a bitmap of them may have.
    pub(crate) fn len(&self) -> u32 {
        match self {
            Bitmapped::Pack { pack, .. } => pack.len(),
            Bitmapped::Midx { midx, .. } => midx.len(),
        }
    }

    /// The checksum the `.bitmap` must record.
    pub(crate) fn checksum(&self) -> &[u8] {
        match self {
            Bitmapped::Pack { pack, .. } => pack.index().pack_checksum(),
            Bitmapped::Midx { midx, .. } => midx.checksum(),
        }
    }

    /// The position of `id` in id order.
    pub(crate) fn find(&self, id: &ObjectId) -> Option<u32> {
        match self {
            Bitmapped::Pack { pack, .. } => pack.index().find(id),
            Bitmapped::Midx { midx, .. } => midx.find(id),
        }
    }

    /// Asks the processor for what [`Bitmapped::find`] will read for `id` (see
    /// `PackIndex::prefetch_find`); nothing for a multi-pack-index.
    #[inline]
    pub(crate) fn prefetch_find(&self, id: &ObjectId) {
        if let Bitmapped::Pack { pack, .. } = self {
            pack.index().prefetch_find(id);
        }
    }

    /// Asks the processor for what [`Bitmapped::bit_of`] reads first for id-order position
    /// `pos`, and with `location` what [`Bitmapped::location`] reads (see
    /// `Pack::prefetch_pack_position`); nothing for a multi-pack-index.
    #[inline]
    pub(crate) fn prefetch_position(&self, pos: u32, location: bool) {
        if let Bitmapped::Pack { pack, .. } = self {
            pack.prefetch_pack_position(pos, location);
        }
    }

    /// Prepares for many lookups by id (see `PackIndex::warm_lookups`); nothing for a
    /// multi-pack-index. Whether this call did the work.
    pub(crate) fn warm_lookups(&self) -> bool {
        match self {
            Bitmapped::Pack { pack, .. } => pack.index().warm_lookups(),
            Bitmapped::Midx { .. } => false,
        }
    }

    /// The id at position `pos` of id order.
    pub(crate) fn id(&self, pos: u32) -> ObjectId {
        match self {
            Bitmapped::Pack { pack, .. } => pack.index().id(pos),
            Bitmapped::Midx { midx, .. } => midx.id(pos),
        }
    }

    /// Where the object at position `pos` of id order is stored.
    pub(crate) fn location(&self, pos: u32) -> Result<Location> {
        match self {
            Bitmapped::Pack { pack, .. } => Ok(Location::Packed {
                pack: pack.clone(),
                offset: pack.index().offset(pos)?,
            }),
            Bitmapped::Midx { midx, packs, .. } => {
                let (pack, offset) = midx.location(pos)?;
                let pack = packs.get(pack as usize).ok_or_else(|| {
                    Error::corrupt(midx.name(), 0, format!("object {pos} names a missing pack"))
                })?;
                Ok(Location::Packed {
                    pack: pack.clone(),
                    offset,
                })
            }
        }
    }

    /// The position in id order of the object at pack position (bit) `bit`.
    pub(crate) fn position_at(&self, bit: u32) -> Option<u32> {
        match self {
            Bitmapped::Pack { pack, .. } => pack.index_position_at(bit).ok()?,
            Bitmapped::Midx { rev: Some(rev), .. } => rev.index_position(bit),
            Bitmapped::Midx {
                midx, rev: None, ..
            } => midx.reverse_position(bit),
        }
    }

    /// Whether positions can be read from an order on disk without building one: a pack's
    /// `.rev` in use, not found damaged, or a multi-pack-index's reverse index.
    pub(crate) fn has_pack_order(&self) -> bool {
        match self {
            Bitmapped::Pack { pack, .. } => pack.has_pack_order(),
            Bitmapped::Midx { .. } => true,
        }
    }

    /// Starts building the pack's position index (the inverse of its `.rev`, one pass over it,
    /// or without one its rank index: one pass over the `.idx` offsets, a few milliseconds on
    /// git.git; see `Pack::pack_position`) on a thread of its own, once: a fill-in walk
    /// that is about to ask many positions then finds it ready, or waits for the build already
    /// under way, instead of building it on the walk's own thread in the middle of the walk.
    /// Nothing to do for a multi-pack-index, whose order is in its RIDX chunk or `.rev`.
    pub(crate) fn warm_positions(&self) {
        if let Bitmapped::Pack {
            pack,
            warming,
            warmed,
            ..
        } = self
        {
            if pack.has_reverse_index() || warming.swap(true, std::sync::atomic::Ordering::Relaxed)
            {
                return;
            }
            let pack = pack.clone();
            let warmed = warmed.clone();
            // Its reads count toward the request that started it.
            let reads = packd_storage::RequestReads::current();
            // A failure to spawn only loses the head start.
            let _ = std::thread::Builder::new()
                .name("pack-positions".into())
                .spawn(move || {
                    let _in = reads.as_ref().map(packd_storage::RequestReads::enter);
                    let started = std::time::Instant::now();
                    let _ = pack.pack_position(0);
                    warmed.store(true, std::sync::atomic::Ordering::Release);
                    tracing::debug!(
                        "{}: position index built in {:?}",
                        pack.data_name(),
                        started.elapsed()
                    );
                });
        }
    }

    /// Whether a walk should ask [`Bitmapped::bit_of`] now: the position index is there, or
    /// the pack has a `.rev`. A walk that started the rank index's build on another thread
    /// ([`Bitmapped::warm_positions`]) goes on without positions until this says they are
    /// there, instead of waiting for the build. With a `.rev`, a lookup waits at most for its
    /// inverse's one pass (or, if that finds the `.rev` damaged, for the rank index's, on the
    /// walk's own thread), which costs less than reading the commits that positions would
    /// have shown covered (ad-hoc on git/git 2 to 8 days behind, a process per request: 1.5-2
    /// ms of CPU more when walking on without them).
    pub(crate) fn is_ready(&self) -> bool {
        match self {
            Bitmapped::Pack { pack, warmed, .. } => {
                pack.has_pack_order()
                    || warmed.load(std::sync::atomic::Ordering::Acquire)
                    || pack.has_reverse_index()
            }
            Bitmapped::Midx { .. } => true,
        }
    }

    /// Whether the position index is being built on another thread and a walk should not wait
    /// for it (see [`Bitmapped::is_ready`]).
    pub(crate) fn positions_pending(&self) -> bool {
        let warming = matches!(self, Bitmapped::Pack { warming, .. }
            if warming.load(std::sync::atomic::Ordering::Relaxed));
        warming && !self.is_ready()
    }

    /// The sort key of id-order position `pos` in pack order.
    fn order_key(&self, pos: u32) -> Result<(u32, u64)> {
        match self {
            Bitmapped::Pack { pack, .. } => Ok((0, pack.index().offset(pos)?)),
            Bitmapped::Midx {
                midx, preferred, ..
            } => {
                let (pack, offset) = midx.location(pos)?;
                let rank = if pack == *preferred { 0 } else { pack + 1 };
                Ok((rank, offset))
            }
        }
    }

    /// The pack position (bit) of the object at id-order position `pos`; `None` when the order
    /// does not place it. For a multi-pack-index, a binary search over its reverse index, as
    /// git does.
    pub(crate) fn bit_of(&self, pos: u32) -> Result<Option<u64>> {
        // One pack: a search over the `.rev` reads two index entries per step; the position
        // index costs one pass (over the `.rev`, or the rank index's over every offset), then
        // a lookup each. A query whose tips have bitmaps asks a handful of positions, a fill-in
        // walk hundreds to thousands. A walk starts the position index's build on another thread
        // (`warm_positions`), and its lookups wait for it rather than search the `.rev`
        // (measured on git.git: searching the `.rev` for all of a walk's 1,400 lookups cost
        // more than the build; on git/git 1 day behind, a fresh process searched for most of
        // its 4,500 lookups while the build ran, 3.9 ms of CPU); without a walk, the first
        // [`REV_LOOKUPS`] search the `.rev`.
        if let Bitmapped::Pack {
            pack,
            lookups,
            warming,
            ..
        } = self
        {
            // The counter is kept only while the `.rev` may still be searched.
            let search = pack.has_pack_order()
                && !warming.load(std::sync::atomic::Ordering::Relaxed)
                && lookups.load(std::sync::atomic::Ordering::Relaxed) < REV_LOOKUPS;
            if search {
                lookups.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                return Ok(pack.pack_position_by_search(pos)?.map(u64::from));
            }
            return Ok(pack.pack_position(pos)?.map(u64::from));
        }
        let want = self.order_key(pos)?;
        let (mut lo, mut hi) = (0u32, self.len());
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            let Some(at) = self.position_at(mid) else {
                return Ok(None);
            };
            if self.order_key(at)? < want {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        Ok((self.position_at(lo) == Some(pos)).then_some(lo as u64))
    }
}
