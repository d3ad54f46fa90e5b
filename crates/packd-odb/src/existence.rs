//! Existence checks for many objects at once (a push's collision and connectivity checks),
//! cheap both on a fast local disk and with many loose objects or a slow file system.
//!
//! Packed objects are looked up in indexes already in memory. A loose object costs a `stat`:
//! about a microsecond on a local disk, far more over NFS; none where its fan-out directory
//! (`objects/xx`) does not exist, which one listing of each objects directory tells (a
//! repository packed by gc, an alternate shared by many, has few or none of them). Listing every loose directory once
//! (git's loose-object cache) turns later lookups into hash-set probes, but costs a full
//! listing up front: seed 003 measured that listing at up to +9000% for a small push into a
//! repository with 256x1000 loose objects on a fast disk, and a large win on NFS.
//!
//! So the choice is made while checking, from measured costs, as in the ski-rental problem:
//! lookups `stat` until the time spent on loose misses exceeds what listing would cost, and from
//! then on use the listing, which bounds the total at twice the better of the two. The listing's
//! cost is estimated by timing the listing of one fan-out directory, once misses have taken
//! [`SAMPLE_AFTER_NANOS`], times 256. A small push on a fast disk never lists; a large push, or a
//! slow file system, lists early. A checker lives for one operation (its listing is not
//! refreshed), as git's cache does.

use crate::{IdSet, ObjectDb, ObjectId, Result};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::Instant;

/// Misses may take this long (nanoseconds) before the listing's cost is sampled.
pub const SAMPLE_AFTER_NANOS: u64 = 100_000;

/// Answers "does this object exist?" for one operation over `odb`.
pub struct ExistenceCheck<'a> {
    odb: &'a ObjectDb,
    /// Time spent on loose lookups that found nothing, in nanoseconds.
    missed_nanos: AtomicU64,
    /// The listing, once taken.
    listing: OnceLock<IdSet>,
    /// The estimated cost of listing, in nanoseconds, once sampled.
    estimate: OnceLock<u64>,
    /// Which fan-out directories each objects directory has (listed at the first loose
    /// lookup): no `stat` where the id's directory does not exist.
    fanouts: OnceLock<Vec<[bool; 256]>>,
    /// How many loose `stat`s and listing probes were made (for logs and tests).
    stats: AtomicU64,
    probes: AtomicU64,
    /// Packed lookups still to make with a `pread` rather than through the map: none for
    /// [`ExistenceCheck::new`], [`READ_LOOKUPS`] for [`ExistenceCheck::for_few`].
    reads_left: std::sync::atomic::AtomicU32,
    /// Ids found so far, kept for few lookups ([`ExistenceCheck::for_few`]): a small push's
    /// successive trees link to the same unchanged entries, each then looked up once.
    found: Option<parking_lot::Mutex<IdSet>>,
}

/// Most packed lookups made with a `pread` ([`ExistenceCheck::for_few`]); later ones go through
/// the map. A fault maps 64 KiB of an index, so many lookups share each fault; a read costs the
/// same every time. On a 300,000-object index the ids span about 90 such windows: past 128
/// reads, faulting them in costs less than reading on.
pub const READ_LOOKUPS: u32 = 128;

impl<'a> ExistenceCheck<'a> {
    /// A checker over `odb`.
    pub fn new(odb: &'a ObjectDb) -> ExistenceCheck<'a> {
        ExistenceCheck {
            odb,
            missed_nanos: AtomicU64::new(0),
            listing: OnceLock::new(),
            estimate: OnceLock::new(),
            fanouts: OnceLock::new(),
            stats: AtomicU64::new(0),
            probes: AtomicU64::new(0),
            reads_left: std::sync::atomic::AtomicU32::new(0),
            found: None,
        }
    }

    /// A checker for few lookups (a small push): the first [`READ_LOOKUPS`] packed lookups
    /// are made with [`ObjectDb::contains_packed_by_read`], which reads a few ids of a large
    /// index with one `pread` rather than fault its mapped pages in, and an id found is not
    /// looked up again.
    pub fn for_few(odb: &'a ObjectDb) -> ExistenceCheck<'a> {
        ExistenceCheck {
            reads_left: std::sync::atomic::AtomicU32::new(READ_LOOKUPS),
            found: Some(parking_lot::Mutex::new(IdSet::default())),
            ..ExistenceCheck::new(odb)
        }
    }

    /// Whether `id` exists, packed or loose.
    pub fn contains(&self, id: &ObjectId) -> Result<bool> {
        let Some(found) = &self.found else {
            return self.look_up(id);
        };
        if found.lock().contains(id) {
            return Ok(true);
        }
        let exists = self.look_up(id)?;
        if exists {
            found.lock().insert(*id);
        }
        Ok(exists)
    }

    /// [`ExistenceCheck::contains`], without the ids found before.
    fn look_up(&self, id: &ObjectId) -> Result<bool> {
        let by_read = self
            .reads_left
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1))
            .is_ok();
        let packed = if by_read {
            self.odb.contains_packed_by_read(id)
        } else {
            self.odb.locate_packed(id)?.is_some()
        };
        if packed {
            return Ok(true);
        }
        if let Some(listing) = self.listing.get() {
            self.probes.fetch_add(1, Ordering::Relaxed);
            return Ok(listing.contains(id));
        }
        let fanouts = self.fanouts.get_or_init(|| {
            // Unlistable: every directory is looked in.
            self.odb.loose_fanouts().unwrap_or_default()
        });
        // Timed after the one listing of fan-out directories above: that is paid once, not
        // per miss, and counting it would have a small push sample a fan-out directory's
        // listing (two more directory reads) at its first misses.
        let started = Instant::now();
        self.stats.fetch_add(1, Ordering::Relaxed);
        if self.odb.contains_loose_in(id, fanouts) {
            return Ok(true);
        }
        let spent = self
            .missed_nanos
            .fetch_add(started.elapsed().as_nanos() as u64, Ordering::Relaxed);
        if spent < SAMPLE_AFTER_NANOS {
            return Ok(false);
        }
        let estimate = match self.estimate.get() {
            Some(e) => *e,
            None => {
                let sampling = Instant::now();
                self.odb.loose_ids_with_first_byte(id.as_bytes()[0])?;
                let e = sampling.elapsed().as_nanos() as u64 * 256;
                *self.estimate.get_or_init(|| e)
            }
        };
        if spent > estimate {
            let listing = self.odb.loose_ids()?.into_iter().collect();
            let _ = self.listing.set(listing);
            tracing::debug!(
                "loose lookups took {} µs (listing estimated at {} µs): listing them",
                spent / 1000,
                estimate / 1000
            );
        }
        Ok(false)
    }

    /// Whether the loose objects were listed (the adaptive choice was made).
    pub fn listed(&self) -> bool {
        self.listing.get().is_some()
    }

    /// Loose `stat`s made, and lookups answered from the listing.
    pub fn counts(&self) -> (u64, u64) {
        (
            self.stats.load(Ordering::Relaxed),
            self.probes.load(Ordering::Relaxed),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{ObjectKind, OpenOptions};
    use std::io::Write;

    fn write_loose(objects: &std::path::Path, data: &[u8]) -> ObjectId {
        let id = ObjectId::compute(ObjectKind::Blob, data).unwrap();
        let hex = id.to_hex();
        let dir = objects.join(&hex[..2]);
        std::fs::create_dir_all(&dir).unwrap();
        let mut raw = format!("blob {}\0", data.len()).into_bytes();
        raw.extend_from_slice(data);
        let mut z = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::default());
        z.write_all(&raw).unwrap();
        std::fs::write(dir.join(&hex[2..]), z.finish().unwrap()).unwrap();
        id
    }

    #[test]
    fn answers_the_same_before_and_after_listing() {
        let dir = tempfile::tempdir().unwrap();
        let objects = dir.path().join("objects");
        std::fs::create_dir_all(objects.join("pack")).unwrap();
        let present: Vec<ObjectId> = (0..300)
            .map(|i| write_loose(&objects, format!("object {i}\n").as_bytes()))
            .collect();
        let absent: Vec<ObjectId> = (0..20_000)
            .map(|i| ObjectId::compute(ObjectKind::Blob, format!("absent {i}\n").as_bytes()))
            .collect::<std::result::Result<_, _>>()
            .unwrap();
        let odb = ObjectDb::open(&objects, &OpenOptions::default()).unwrap();
        let check = ExistenceCheck::new(&odb);
        // The listing's cost as if sampled at a nanosecond: the choice to list then depends on
        // misses alone, not on how fast this machine happens to list a directory right now
        // (sampled, a slow moment had the test see no listing).
        check.estimate.set(1).unwrap();
        for id in &present {
            assert!(check.contains(id).unwrap());
        }
        // Enough misses make listing worth it (more than SAMPLE_AFTER_NANOS spent on them).
        for id in &absent {
            assert!(!check.contains(id).unwrap());
        }
        assert!(check.listed(), "20,000 misses did not lead to a listing");
        for id in &present {
            assert!(check.contains(id).unwrap());
        }
        for id in &absent {
            assert!(!check.contains(id).unwrap());
        }
        let (stats, probes) = check.counts();
        assert!(
            probes >= 20_300 && stats < 20_300,
            "{stats} stats, {probes} probes"
        );
    }
}
