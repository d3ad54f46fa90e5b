//! Finding the unreachable objects of a repository and when each was last written: the
//! candidates for a cruft pack.
//!
//! ```text
//! loose object objects/xx/yyyy     its file's mtime
//! object of a pack                 the .pack's mtime
//! object of a cruft pack           its entry in the pack's .mtimes
//! several copies                   the newest of their times
//! ```
//!
//! Only the repository's own objects directory counts (never an alternate's objects), and only
//! the packs the caller is replacing: a pack that appears meanwhile (a push's) is not theirs.

use super::mtimes::Mtimes;
use super::CruftError;
use packd_odb::pack::Pack;
use packd_odb::{ObjectId, Repository};
use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;
use std::time::UNIX_EPOCH;

/// The unreachable objects found, and every loose object seen (the prune deletes those once
/// they are packed or dropped; a loose object written after the listing is not among them).
#[derive(Debug, Default)]
pub struct Collected {
    /// Unreachable objects with their newest mtime (seconds since the epoch), sorted by id.
    pub unreachable: Vec<(ObjectId, u32)>,
    /// The loose objects listed, reachable or not.
    pub loose: Vec<ObjectId>,
}

/// The mtime, in seconds since the epoch, of the file `name` of the objects directory
/// `objects_dir`. (The storage layer has no modification times yet: this is the one place
/// that reads them from the local disk.)
pub(crate) fn file_mtime(objects_dir: &Path, name: &str) -> Result<u32, CruftError> {
    let path = objects_dir.join(name);
    let io = |source| CruftError::Io {
        path: path.display().to_string(),
        source,
    };
    let modified = std::fs::metadata(&path)
        .and_then(|m| m.modified())
        .map_err(io)?;
    let secs = modified
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    Ok(u32::try_from(secs).unwrap_or(u32::MAX))
}

/// The `.mtimes` of `pack`, if it is a cruft pack (has one), checked against the pack.
pub(crate) fn pack_mtimes(repo: &Repository, pack: &Pack) -> Result<Option<Mtimes>, CruftError> {
    let Some(storage) = repo.objects().own_storage() else {
        return Ok(None);
    };
    let Some(stem) = pack.name().strip_suffix(".pack") else {
        return Ok(None);
    };
    let name = format!("{stem}.mtimes");
    let blob = match storage.open(&name) {
        Ok(blob) => blob,
        Err(e) if e.is_not_found() => return Ok(None),
        Err(e) => return Err(CruftError::Storage(e)),
    };
    let bytes = blob.read_all()?;
    let described = storage.describe(&name);
    let mtimes = Mtimes::parse(&described, &bytes, pack.len())?;
    let checksum: [u8; 20] = pack.index().pack_checksum().try_into().map_err(|_| {
        CruftError::Mtimes(super::mtimes::MtimesError {
            file: described.clone(),
            offset: 0,
            what: "its pack's index has no SHA-1 checksum".into(),
        })
    })?;
    mtimes.check_pack(&described, &checksum)?;
    Ok(Some(mtimes))
}

/// The objects of `old_packs` and the loose objects of `repo` that `reachable` does not hold,
/// each with the newest mtime of its copies.
pub fn collect(
    repo: &Repository,
    reachable: &dyn Fn(&ObjectId) -> bool,
    old_packs: &[Arc<Pack>],
) -> Result<Collected, CruftError> {
    let objects_dir = repo.common_dir().join("objects");
    let mut times: HashMap<ObjectId, u32> = HashMap::new();
    let mut note = |id: ObjectId, mtime: u32| {
        let t = times.entry(id).or_insert(mtime);
        *t = (*t).max(mtime);
    };
    for pack in old_packs {
        let mtimes = pack_mtimes(repo, pack)?;
        let pack_time = match mtimes {
            Some(_) => 0,
            None => file_mtime(&objects_dir, pack.name())?,
        };
        let index = pack.index();
        for i in 0..index.len() {
            let id = index.id(i);
            if reachable(&id) {
                continue;
            }
            let mtime = match &mtimes {
                Some(m) => m.get(i).unwrap_or(pack_time),
                None => pack_time,
            };
            note(id, mtime);
        }
    }
    let mut loose = Vec::new();
    for (id, name) in list_loose(&objects_dir)? {
        loose.push(id);
        if !reachable(&id) {
            // A loose file gone since the listing (another gc, git's prune-packed) has no time
            // left to keep: its other copies, if any, count.
            match file_mtime(&objects_dir, &name) {
                Ok(mtime) => note(id, mtime),
                Err(CruftError::Io { source, .. })
                    if source.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(e),
            }
        }
    }
    let mut unreachable: Vec<(ObjectId, u32)> = times.into_iter().collect();
    unreachable.sort_unstable();
    loose.sort_unstable();
    Ok(Collected { unreachable, loose })
}

/// The loose objects of the objects directory `objects_dir` as (id, `xx/yyyy` name), from its
/// 256 fan-out directories; other files there (git's temporary `tmp_obj_*`) are skipped.
fn list_loose(objects_dir: &Path) -> Result<Vec<(ObjectId, String)>, CruftError> {
    let mut out = Vec::new();
    for first in 0..=255u8 {
        let fanout = format!("{first:02x}");
        let dir = objects_dir.join(&fanout);
        let entries = match std::fs::read_dir(&dir) {
            Ok(entries) => entries,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(source) => {
                return Err(CruftError::Io {
                    path: dir.display().to_string(),
                    source,
                })
            }
        };
        for entry in entries {
            let entry = entry.map_err(|source| CruftError::Io {
                path: dir.display().to_string(),
                source,
            })?;
            let name = entry.file_name();
            let Some(rest) = name.to_str() else { continue };
            if rest.len() != 38 {
                continue;
            }
            if let Some(id) = ObjectId::from_hex(&format!("{fanout}{rest}")) {
                out.push((id, format!("{fanout}/{rest}")));
            }
        }
    }
    Ok(out)
}
