//! The objects of an incremental repack (no `-a`), as git 2.39's `git repack` chooses them:
//! it runs `pack-objects --all --reflog --indexed-objects --unpacked --incremental`, so the
//! new pack holds the loose objects that HEAD, refs/*, the reflogs' entries and the index
//! reach, not the unreachable ones (they stay loose for `git prune`/gc).
//!
//! ```text
//! tips      HEAD, every ref, each reflog entry's old and new id (logs/HEAD, logs/refs/**;
//!           those that name a missing object ignored, as git does), the index's blobs and
//!           cache-tree trees (crate::repack::index_file)
//! commits   walked from the tips through parents; a packed commit is not shown and its tree
//!           not entered (rev-list's --unpacked), its parents still walked
//! trees     of each loose commit, and trees and blobs at tips: entered whole, packed
//!           subtrees too; gitlinks skipped
//! kept      what the walk shows that is loose and in no pack (--incremental)
//! ```
//!
//! A loose object that only a packed commit's tree reaches is therefore not packed, as in
//! git.

use super::RepackError;
use packd_odb::{parse, IdSet, ObjectId, ObjectKind, Repository};
use packd_reach::bitmap::name_hash;
use std::path::Path;

/// A tree entry's mode for a gitlink (a commit of another repository).
const GITLINK: u32 = 0o160000;

/// The loose objects git's incremental repack packs, in walk order, each with its kind and
/// the name hash of its path (0 for commits and tags).
pub(super) fn loose_reachable(
    repo: &Repository,
) -> Result<Vec<(ObjectId, ObjectKind, u32)>, RepackError> {
    let odb = repo.objects();
    let mut tips: Vec<(ObjectId, Vec<u8>)> = Vec::new();
    if let Some(head) = repo.refs().resolve_full("HEAD")? {
        tips.push((head, Vec::new()));
    }
    for (_, id) in repo.refs().list("refs/")? {
        tips.push((id, Vec::new()));
    }
    tips.extend(reflog_and_index_tips(repo)?);

    let mut out = Vec::new();
    let mut seen = IdSet::default();
    let is_loose =
        |id: &ObjectId| -> Result<bool, RepackError> { Ok(odb.locate_packed(id)?.is_none()) };
    let missing =
        |id: &ObjectId| packd_odb::Error::BadName(format!("object {id} is missing (reachable)"));
    // Commits, and the trees and blobs to enter after them (with their paths).
    let mut commits: Vec<ObjectId> = Vec::new();
    let mut others: Vec<(ObjectId, Vec<u8>)> = Vec::new();
    for (id, path) in tips {
        let mut at = id;
        // Peel tags, showing each.
        loop {
            let header = odb.header(&at)?.ok_or_else(|| missing(&at))?;
            match header.kind {
                ObjectKind::Tag => {
                    if !seen.insert(at) {
                        break;
                    }
                    if is_loose(&at)? {
                        out.push((at, ObjectKind::Tag, 0));
                    }
                    let object = odb.read(&at)?.ok_or_else(|| missing(&at))?;
                    at = parse::tag_target(&at, &object.data)?;
                }
                ObjectKind::Commit => {
                    commits.push(at);
                    break;
                }
                _ => {
                    others.push((at, path.clone()));
                    break;
                }
            }
        }
    }
    let mut trees: Vec<(ObjectId, Vec<u8>)> = Vec::new();
    while let Some(id) = commits.pop() {
        if !seen.insert(id) {
            continue;
        }
        let object = odb.read(&id)?.ok_or_else(|| missing(&id))?;
        let info = parse::parse_commit(&id, &object.data)?;
        commits.extend(info.parents.iter().rev());
        if is_loose(&id)? {
            out.push((id, ObjectKind::Commit, 0));
            trees.push((info.tree, Vec::new()));
        }
    }
    trees.extend(others);
    while let Some((id, path)) = trees.pop() {
        if !seen.insert(id) {
            continue;
        }
        let header = odb.header(&id)?.ok_or_else(|| missing(&id))?;
        if is_loose(&id)? {
            out.push((id, header.kind, name_hash(&path)));
        }
        if header.kind != ObjectKind::Tree {
            continue;
        }
        let object = odb.read(&id)?.ok_or_else(|| missing(&id))?;
        for entry in parse::tree_entries(&id, &object.data) {
            let (mode, name, link) = entry?;
            if mode == GITLINK || seen.contains(&link) {
                continue;
            }
            let mut full = path.clone();
            if !full.is_empty() {
                full.push(b'/');
            }
            full.extend_from_slice(name);
            trees.push((link, full));
        }
    }
    Ok(out)
}

/// What git's `--reflog --indexed-objects` add to the refs as tips: each reflog entry's ids
/// that name an object here (a reflog naming a pruned object is ignored, as git does), and
/// the index's blobs (with their paths) and cache-tree trees. A full repack (`-a`) walks from
/// them too.
pub(super) fn reflog_and_index_tips(
    repo: &Repository,
) -> Result<Vec<(ObjectId, Vec<u8>)>, RepackError> {
    let mut tips = Vec::new();
    let mut logs = reflog_ids(&repo.common_dir().join("logs"));
    if repo.git_dir() != repo.common_dir() {
        logs.extend(reflog_ids(&repo.git_dir().join("logs")));
    }
    for id in logs {
        if repo.objects().header(&id)?.is_some() {
            tips.push((id, Vec::new()));
        }
    }
    tips.extend(super::index_file::objects(&repo.git_dir().join("index"))?);
    Ok(tips)
}

/// Every id the reflogs under `logs` name (each entry's old and new, the null id left out).
/// Unreadable files and malformed lines are skipped: a reflog only adds tips.
fn reflog_ids(logs: &Path) -> Vec<ObjectId> {
    let mut out = Vec::new();
    let mut dirs = vec![logs.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_dir() {
                dirs.push(path);
                continue;
            }
            let Ok(text) = std::fs::read(&path) else {
                continue;
            };
            for line in text.split(|&b| b == b'\n') {
                // "<old hex> <new hex> <who> <time> <tz>\t<message>"
                let mut fields = line.splitn(3, |&b| b == b' ');
                for field in [fields.next(), fields.next()].into_iter().flatten() {
                    if let Some(id) = ObjectId::from_hex_bytes(field) {
                        if id.as_bytes().iter().any(|&b| b != 0) {
                            out.push(id);
                        }
                    }
                }
            }
        }
    }
    out.sort_unstable();
    out.dedup();
    out
}
