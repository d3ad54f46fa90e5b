//! Geometric compaction: neighbouring tables merged into one so that, oldest first, each
//! table is at least `factor` times the size of all the tables above it put together, as git
//! keeps its stacks (`reftable/stack.c`), so that a stack of n updates has O(log n) tables.
//!
//! ```text
//! before   tables.list: A(64) B(8) C(4) D(3) E(1)      (sizes, oldest first)
//! merge    C(4) < 2 x D(3): C D; then B(8) < 2 x (4 + 3): B C D -> F(15)
//!          (E stays: D(3) >= 2 x E(1); A stays: 64 >= 2 x 15)
//! after    tables.list: A(64) F(15) E(1)              B, C, D stay in storage for the sweep
//! ```
//!
//! A merged table keeps tombstones, which hide the ref in the tables below it, unless the
//! merge includes the oldest table (nothing is below). Its update index range is the union
//! of the inputs'. The list is swapped by compare-and-swap as for an update; when another
//! writer changed the list first, the merge is put in again if its tables are still listed
//! side by side (updates only add tables at the top), and abandoned otherwise.

use crate::format::record::{LogRecord, RefRecord, RefValue};
use crate::format::writer::write_table;
use crate::format::HEADER_LEN;
use crate::merge::Merge;
use crate::stack::{backoff, read_list, Snapshot, Stack};
use crate::{ReftableError, Table};
use std::ops::Range;
use std::sync::Arc;
use std::time::Instant;

/// The tables (a range of indexes, oldest first) to merge to make `sizes` a geometric
/// sequence of `factor`, or `None` when they are one already. A table's size counts its
/// bytes less the header (git's measure).
pub fn suggest_compaction(sizes: &[u64], factor: u64) -> Option<Range<usize>> {
    let factor = factor.max(2);
    let n = sizes.len();
    if n < 2 {
        return None;
    }
    // The newest table that is not at most 1/factor of the one below it ends the segment.
    let mut i = n - 1;
    let mut end = None;
    let mut bytes = 0u64;
    while i > 0 {
        if sizes[i - 1] < sizes[i].saturating_mul(factor) {
            end = Some(i + 1);
            bytes = sizes[i];
            break;
        }
        i -= 1;
    }
    let end = end?;
    // Going down, every table smaller than factor times all above it (down to the end)
    // joins; keep looking past the first, since an older one may break the sequence too.
    let mut start = None;
    while i > 0 {
        let above = bytes;
        bytes = bytes.saturating_add(sizes[i - 1]);
        if sizes[i - 1] < above.saturating_mul(factor) {
            start = Some(i - 1);
        }
        i -= 1;
    }
    start.map(|s| s..end)
}

impl Stack {
    /// Merges tables where the stack's sizes are not geometric ([`suggest_compaction`]);
    /// the name of the merged table, or `None` when nothing needed it (or another writer's
    /// compaction got there first).
    pub fn compact(&self) -> Result<Option<String>, ReftableError> {
        let snap = self.read_snapshot()?;
        let sizes: Vec<u64> = snap
            .tables()
            .iter()
            .map(|t| t.len().saturating_sub(HEADER_LEN as u64 - 1))
            .collect();
        match suggest_compaction(&sizes, self.opts.factor) {
            Some(range) => self.compact_range(&snap, range),
            None => Ok(None),
        }
    }

    /// Merges all the tables into one (tombstones dropped); `None` if there were fewer than
    /// two.
    pub fn compact_all(&self) -> Result<Option<String>, ReftableError> {
        let snap = self.read_snapshot()?;
        if snap.tables().len() < 2 {
            return Ok(None);
        }
        let n = snap.tables().len();
        self.compact_range(&snap, 0..n)
    }

    /// Merges the tables `range` of `snap` and lists the result in their place.
    fn compact_range(
        &self,
        snap: &Snapshot,
        range: Range<usize>,
    ) -> Result<Option<String>, ReftableError> {
        let from_oldest = range.start == 0;
        let tables = &snap.tables()[range.clone()];
        let inputs = &snap.names()[range];
        let min = tables
            .iter()
            .map(|t| t.min_update_index())
            .min()
            .unwrap_or(0);
        let max = tables
            .iter()
            .map(|t| t.max_update_index())
            .max()
            .unwrap_or(0);
        let (refs, logs) = merge_tables(tables, from_oldest)?;
        let bytes = write_table(&self.opts.write, min, max, &refs, &logs)?;
        let published = Instant::now();
        let table = self.publish(min, max, &bytes)?;
        let (mut names, mut version) = (snap.names().to_vec(), snap.version().cloned());
        for attempt in 1..=self.opts.max_attempts {
            // Where the inputs are in the list now; still side by side, and still at the
            // bottom if tombstones were dropped.
            let at = (0..=names.len().saturating_sub(inputs.len()))
                .find(|&p| names.get(p..p + inputs.len()) == Some(inputs))
                .filter(|&p| p == 0 || !from_oldest);
            let Some(at) = at else {
                tracing::debug!(table, "compacted tables left the list; dropping the merge");
                self.storage.delete(&table)?;
                return Ok(None);
            };
            let mut new = names[..at].to_vec();
            new.push(table.clone());
            new.extend_from_slice(&names[at + inputs.len()..]);
            if self.swap_list(version.as_ref(), &new, &table, published)? {
                tracing::debug!(table, tables = inputs.len(), "tables compacted");
                return Ok(Some(table));
            }
            if published.elapsed() > self.opts.grace / 2 {
                break;
            }
            backoff(attempt);
            (names, version) = read_list(&*self.storage)?;
        }
        self.storage.delete(&table)?;
        Ok(None)
    }
}

/// The records of `tables` (oldest first) merged: for each ref or log key the newest
/// table's record; tombstones and deleted log entries dropped when `drop_deletions`.
fn merge_tables(
    tables: &[Arc<Table>],
    drop_deletions: bool,
) -> Result<(Vec<RefRecord>, Vec<LogRecord>), ReftableError> {
    let refs = Merge::new(
        tables.iter().map(|t| t.refs()).collect(),
        |r: &RefRecord| r.name.as_bytes().to_vec(),
    )
    .filter(|r| !(drop_deletions && matches!(r, Ok(r) if r.value == RefValue::Deletion)))
    .collect::<Result<Vec<_>, _>>()?;
    let logs = Merge::new(tables.iter().map(|t| t.logs()).collect(), LogRecord::key)
        .filter(|l| !(drop_deletions && matches!(l, Ok(l) if l.update.is_none())))
        .collect::<Result<Vec<_>, _>>()?;
    Ok((refs, logs))
}

#[cfg(test)]
mod tests {
    use super::suggest_compaction;

    #[test]
    fn segments_restore_the_geometric_sequence_as_git_chooses_them() {
        // git's own examples (reftable/stack.c).
        assert_eq!(suggest_compaction(&[64, 32, 16, 8, 4, 2, 1], 2), None);
        assert_eq!(suggest_compaction(&[64, 32, 16, 8, 4, 3, 1], 2), Some(0..6));
        assert_eq!(suggest_compaction(&[64, 8, 4, 3, 1], 2), Some(1..4));
        assert_eq!(
            suggest_compaction(&[128, 32, 16, 8, 4, 3, 1], 2),
            Some(1..6)
        );
        assert_eq!(suggest_compaction(&[1, 1], 2), Some(0..2));
        assert_eq!(suggest_compaction(&[5], 2), None);
        assert_eq!(suggest_compaction(&[], 2), None);
    }
}
