//! Writing the planned objects: the reachable ones into one pack, part by part, each delta's
//! base pulled just ahead of it when not written yet (git's `add_family_to_write_order`).

use super::plan::CLONE as CLONE_PART;
use super::plan::{How, Obj, Planned, Settings};
use super::{RepackError, RepackReport};
use crate::pack_file::{compression_level, PackFileWriter, WrittenPack};
use packd_odb::{HashKind, Location, Repository};
use packd_reach::progress::Progress;
use packd_storage::Storage;
use std::sync::Arc;

/// Not written yet, in the map of objects to their entry in the new pack.
const UNWRITTEN: u32 = u32::MAX;

/// Writes the planned packs; returns them (none when there was nothing to pack).
pub(super) fn write_packs(
    repo: &Repository,
    storage: &Arc<dyn Storage>,
    planned: &Planned,
    settings: &Settings,
    progress: &dyn Progress,
    report: &mut RepackReport,
) -> Result<Vec<WrittenPack>, RepackError> {
    let total = planned.objs.len() as u64;
    progress.start("Writing objects", total);
    let mut written = Vec::new();
    if total == 0 {
        progress.finish(0);
        return Ok(written);
    }
    let mut entry_of = vec![UNWRITTEN; planned.objs.len()];
    let mut writer = PackFileWriter::new(
        storage.clone(),
        HashKind::Sha1,
        planned.objs.len() as u32,
        compression_level(settings.compression),
    )?;
    let mut clone_end = None;
    for (done, &i) in planned.order.iter().enumerate() {
        if planned.objs[i as usize].part != CLONE_PART && clone_end.is_none() {
            clone_end = Some((writer.len(), writer.bytes_written()));
        }
        write_family(repo, planned, i, &mut entry_of, &mut writer, report)?;
        if done.is_multiple_of(1024) {
            progress.update(done as u64);
        }
    }
    let (objects, bytes) = clone_end.unwrap_or((writer.len(), writer.bytes_written()));
    report.clone_objects = objects as u64;
    report.clone_bytes = bytes;
    report.objects = total;
    written.push(writer.finish()?);
    progress.finish(total);
    Ok(written)
}

/// Writes object `i`, after the chain of bases its entry needs that is not written yet.
fn write_family(
    repo: &Repository,
    planned: &Planned,
    i: u32,
    entry_of: &mut [u32],
    writer: &mut PackFileWriter,
    report: &mut RepackReport,
) -> Result<(), RepackError> {
    let mut stack = vec![i];
    while let Some(&top) = stack.last() {
        if entry_of[top as usize] != UNWRITTEN {
            stack.pop();
            continue;
        }
        if let Some(base) = planned.how[top as usize].base() {
            if entry_of[base as usize] == UNWRITTEN {
                // Plans are acyclic (reuse cuts cycles, the search's bases precede their
                // targets in its order); a guard all the same.
                if stack.contains(&base) {
                    return Err(crate::pack_file::PackFileError::Misuse(format!(
                        "object {}: its delta chain loops",
                        planned.objs[top as usize].id
                    ))
                    .into());
                }
                stack.push(base);
                continue;
            }
        }
        entry_of[top as usize] = write_one(repo, planned, top, entry_of, writer, report)?;
        stack.pop();
    }
    Ok(())
}

/// Writes object `i`, whose base (if any) is written.
fn write_one(
    repo: &Repository,
    planned: &Planned,
    i: u32,
    entry_of: &[u32],
    writer: &mut PackFileWriter,
    report: &mut RepackReport,
) -> Result<u32, RepackError> {
    let o: &Obj = &planned.objs[i as usize];
    let packed = match &o.loc {
        Some(Location::Packed { pack, offset }) => Some((pack, *offset)),
        _ => None,
    };
    let n = match (&planned.how[i as usize], packed) {
        (How::ReuseWhole, Some((pack, offset))) => {
            report.reused += 1;
            writer.reuse_entry(o.id, pack, offset, None)?
        }
        (How::ReuseDelta { base }, Some((pack, offset))) => {
            report.reused += 1;
            report.reused_deltas += 1;
            report.deltas += 1;
            writer.reuse_entry(o.id, pack, offset, Some(entry_of[*base as usize]))?
        }
        (
            How::NewDelta {
                base,
                delta_size,
                compressed,
            },
            _,
        ) => {
            report.deltas += 1;
            writer.delta(o.id, entry_of[*base as usize], compressed, *delta_size)?
        }
        _ => {
            let object = match &o.loc {
                Some(loc) => repo.objects().read_at(&o.id, loc)?,
                None => repo.objects().read(&o.id)?.ok_or_else(|| {
                    packd_odb::Error::BadName(format!("object {} is missing", o.id))
                })?,
            };
            writer.whole(o.id, object.kind, &object.data)?
        }
    };
    Ok(n)
}
