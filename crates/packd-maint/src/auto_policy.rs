//! When maintenance after a push rewrites the repository-wide files, and when it only tidies
//! the push's own packs (git's `gc --auto` thresholds in spirit): a multi-pack-index bitmap
//! and a commit-graph cost the whole repository to write (seconds on git/git), a push brings
//! a few hundred objects, and serving counts past a bitmap by itself (a fill-in walk from the
//! nearest bitmapped commits), so the bitmap is written again only once enough objects lie
//! outside it.
//!
//! ```text
//! covered   the packs a bitmap describes: the multi-pack-index's when it has a bitmap
//!           (multi-pack-index-<checksum>.bitmap), else the packs with their own .bitmap
//! outside   the other packs (not .keep, not cruft) and the loose objects
//! full      no bitmap at all, or outside objects > covered objects / OUTSIDE_FRACTION:
//!           geometric repack of every pack, multi-pack-index, its bitmap, commit-graph
//! roll-up   otherwise: a geometric repack of the outside packs and loose objects only
//!           (no covered pack is touched, so the multi-pack-index and bitmaps stay valid);
//!           no multi-pack-index, bitmap or commit-graph written
//! ```

use packd_odb::loose::LooseStore;
use packd_odb::Repository;
use std::collections::HashSet;

/// The full maintenance runs once the objects outside the bitmap pass this fraction of those
/// in it (1/20: on git/git's 841k objects about 42k, some 350 days of pushes; on a small
/// repository nearly every push).
pub const OUTSIDE_FRACTION: u64 = 20;

/// Which maintenance a repository needs now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Everything: geometric repack over all packs, multi-pack-index, bitmap, commit-graph.
    Full,
    /// Only the packs outside the bitmap (named `pack-<hex>.idx`) and the loose objects.
    RollUpOutside {
        /// The covered packs, which stay as they are.
        covered: HashSet<String>,
    },
}

/// What the repository's packs look like to the policy.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Coverage {
    /// The packs a bitmap describes (`pack-<hex>.idx`).
    pub covered: HashSet<String>,
    /// Objects in them.
    pub covered_objects: u64,
    /// Objects in the other packs that maintenance may roll up, and loose objects.
    pub outside_objects: u64,
    /// Whether a multi-pack-index exists without a bitmap of its own (the full maintenance
    /// then runs, to give it one).
    pub midx_without_bitmap: bool,
}

impl Coverage {
    /// Reads the coverage of `repo`'s own objects directory.
    pub fn of(repo: &Repository) -> Result<Coverage, packd_odb::Error> {
        let Some(storage) = repo.objects().own_storage().cloned() else {
            return Ok(Coverage::default());
        };
        let mut coverage = Coverage::default();
        let mut midx_packs: Option<HashSet<String>> = None;
        if let Some((_, midx, _)) = repo.objects().multi_pack_index() {
            let hex: String = midx.checksum().iter().map(|b| format!("{b:02x}")).collect();
            if storage.exists(&format!("pack/multi-pack-index-{hex}.bitmap")) {
                midx_packs = Some(midx.pack_names().iter().cloned().collect());
            } else {
                coverage.midx_without_bitmap = true;
            }
        }
        for (s, pack) in repo.objects().packs_with_storage() {
            if !std::sync::Arc::ptr_eq(s, &storage) {
                continue;
            }
            let name = pack.name().rsplit('/').next().unwrap_or(pack.name());
            let stem = name.strip_suffix(".pack").unwrap_or(name);
            let idx = format!("{stem}.idx");
            let covered = match &midx_packs {
                Some(names) => names.contains(&idx),
                None => storage.exists(&format!("pack/{stem}.bitmap")),
            };
            if covered {
                coverage.covered_objects += u64::from(pack.len());
                coverage.covered.insert(idx);
            } else if !storage.exists(&format!("pack/{stem}.keep"))
                && !storage.exists(&format!("pack/{stem}.mtimes"))
            {
                coverage.outside_objects += u64::from(pack.len());
            }
        }
        let mut loose = Vec::new();
        LooseStore::new(storage).all_ids(&mut loose)?;
        coverage.outside_objects += loose.len() as u64;
        Ok(coverage)
    }

    /// What maintenance to run for this coverage.
    pub fn decide(self) -> Decision {
        let outgrown = self.outside_objects.saturating_mul(OUTSIDE_FRACTION) > self.covered_objects;
        if self.covered.is_empty() || self.midx_without_bitmap || outgrown {
            Decision::Full
        } else {
            Decision::RollUpOutside {
                covered: self.covered,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{Coverage, Decision};

    fn coverage(covered: u64, outside: u64) -> Coverage {
        Coverage {
            covered: ["pack-a.idx".to_string()].into_iter().collect(),
            covered_objects: covered,
            outside_objects: outside,
            midx_without_bitmap: false,
        }
    }

    #[test]
    fn a_few_objects_outside_a_large_bitmap_only_roll_up() {
        assert!(matches!(
            coverage(841_300, 11_689).decide(),
            Decision::RollUpOutside { .. }
        ));
        assert!(matches!(
            coverage(1_000, 50).decide(),
            Decision::RollUpOutside { .. }
        ));
    }

    #[test]
    fn many_objects_outside_or_no_bitmap_run_everything() {
        assert_eq!(coverage(1_000, 51).decide(), Decision::Full);
        assert_eq!(coverage(841_300, 50_000).decide(), Decision::Full);
        assert_eq!(Coverage::default().decide(), Decision::Full);
        let mut without = coverage(1_000, 1);
        without.midx_without_bitmap = true;
        assert_eq!(without.decide(), Decision::Full);
    }
}
