//! Checks on received objects before they enter a repository: each object well formed (git's
//! fsck rules for commits, trees and tags), each link resolvable, each already-known object
//! byte-identical, each new ref tip present.
//!
//! ```text
//! commit  "tree <hex>\n" ("parent <hex>\n")* "author <ident>\n" "committer <ident>\n" ...
//!         ident = "<name> <<email>> <seconds> <+|-hhmm>"
//! tree    (<mode> SP <name> NUL <20-byte id>)*   modes 100644 100755 120000 40000 160000
//!         names: not empty, no '/', not "." ".." ".git", sorted as git sorts (a directory
//!         compares as "<name>/"), no duplicates
//! tag     "object <hex>\n" "type <kind>\n" "tag <name>\n" ["tagger <ident>\n"] ...
//! links   commit -> tree + parents; tree -> entries except gitlinks (160000); tag -> object
//! ```
//!
//! # The invariant
//! The cost is proportional to the push, not to the repository: only the links *out of* the
//! new objects are followed, and a link to an object the repository already has stops there.
//! That is sound because of this invariant: **every object the repository has is connected**
//! (everything reachable from it is present). It holds for a repository git or packd built,
//! and packd keeps it: a received pack enters (is migrated out of quarantine) only whole and
//! only after every link of every object in it was found in the pack or in the repository, so
//! the union stays closed. Nothing else in packd writes objects into a repository.

use crate::existence::ExistenceCheck;
use crate::parse::{parse_commit, tag_target, tree_entries};
use crate::{ObjectDb, ObjectId, ObjectKind};
use rayon::prelude::*;

/// Why a received object or ref tip is refused.
#[derive(Debug, thiserror::Error)]
pub enum CheckError {
    /// An object is malformed (git's fsck rules).
    #[error("object {id}: {why}")]
    Malformed {
        /// The object.
        id: ObjectId,
        /// What is wrong.
        why: String,
    },
    /// An object links to one that is neither received nor in the repository.
    #[error("missing object {missing} (linked from {from})")]
    Missing {
        /// The absent object.
        missing: ObjectId,
        /// The object linking to it.
        from: ObjectId,
    },
    /// A new ref tip is neither received nor in the repository.
    #[error("missing object {0} for the new ref tip")]
    MissingTip(ObjectId),
    /// A received object has the id of a different object the repository has.
    #[error("object {0}: SHA-1 collision: it differs from the repository's object of that id")]
    Collision(ObjectId),
    /// Reading objects failed.
    #[error(transparent)]
    Odb(#[from] crate::Error),
}

fn malformed(id: &ObjectId, why: impl Into<String>) -> CheckError {
    CheckError::Malformed {
        id: *id,
        why: why.into(),
    }
}

/// Checks `<name> <<email>> <seconds> <tz>`.
fn check_ident(id: &ObjectId, what: &str, ident: &[u8]) -> Result<(), CheckError> {
    let bad = || malformed(id, format!("bad {what} line"));
    let lt = ident.iter().position(|&b| b == b'<').ok_or_else(bad)?;
    let gt = lt
        + ident[lt..]
            .iter()
            .position(|&b| b == b'>')
            .ok_or_else(bad)?;
    if ident[..lt].contains(&b'>') || ident[lt + 1..gt].contains(&b'<') {
        return Err(bad());
    }
    let rest = ident[gt + 1..].strip_prefix(b" ").ok_or_else(bad)?;
    let (secs, tz) = match rest.iter().position(|&b| b == b' ') {
        Some(sp) => (&rest[..sp], &rest[sp + 1..]),
        None => return Err(bad()),
    };
    let tz_ok =
        tz.len() == 5 && (tz[0] == b'+' || tz[0] == b'-') && tz[1..].iter().all(u8::is_ascii_digit);
    if secs.is_empty() || !secs.iter().all(u8::is_ascii_digit) || !tz_ok {
        return Err(bad());
    }
    Ok(())
}

/// The header lines of a commit or tag (up to the blank line).
fn header_lines(data: &[u8]) -> impl Iterator<Item = &[u8]> {
    data.split(|&b| b == b'\n').take_while(|l| !l.is_empty())
}

fn check_commit(id: &ObjectId, data: &[u8], links: &mut Vec<ObjectId>) -> Result<(), CheckError> {
    let info = parse_commit(id, data).map_err(|e| malformed(id, e.to_string()))?;
    let mut lines = header_lines(data);
    if !lines.next().is_some_and(|l| l.starts_with(b"tree ")) {
        return Err(malformed(id, "the commit does not start with its tree"));
    }
    let mut line = lines.next();
    while line.is_some_and(|l| l.starts_with(b"parent ")) {
        line = lines.next();
    }
    let author = line
        .and_then(|l| l.strip_prefix(b"author "))
        .ok_or_else(|| malformed(id, "missing author line"))?;
    check_ident(id, "author", author)?;
    let committer = lines
        .next()
        .and_then(|l| l.strip_prefix(b"committer "))
        .ok_or_else(|| malformed(id, "missing committer line"))?;
    check_ident(id, "committer", committer)?;
    links.push(info.tree);
    links.extend(info.parents);
    Ok(())
}

fn check_tag(id: &ObjectId, data: &[u8], links: &mut Vec<ObjectId>) -> Result<(), CheckError> {
    let target = tag_target(id, data).map_err(|e| malformed(id, e.to_string()))?;
    let mut lines = header_lines(data).skip(1);
    let kind = lines
        .next()
        .and_then(|l| l.strip_prefix(b"type "))
        .and_then(ObjectKind::from_name)
        .ok_or_else(|| malformed(id, "missing or bad type line"))?;
    let _ = kind;
    if !lines.next().is_some_and(|l| l.starts_with(b"tag ")) {
        return Err(malformed(id, "missing tag line"));
    }
    if let Some(tagger) = lines.next().and_then(|l| l.strip_prefix(b"tagger ")) {
        check_ident(id, "tagger", tagger)?;
    }
    links.push(target);
    Ok(())
}

/// git's tree order: names compared bytewise, a directory as if it ended in '/'.
fn tree_order(a: &[u8], a_dir: bool, b: &[u8], b_dir: bool) -> std::cmp::Ordering {
    let n = a.len().min(b.len());
    match a[..n].cmp(&b[..n]) {
        std::cmp::Ordering::Equal => {}
        o => return o,
    }
    let next = |name: &[u8], dir: bool| match name.get(n) {
        Some(&c) => c,
        None if dir => b'/',
        None => 0,
    };
    next(a, a_dir).cmp(&next(b, b_dir))
}

fn check_tree(id: &ObjectId, data: &[u8], links: &mut Vec<ObjectId>) -> Result<(), CheckError> {
    let mut previous: Option<(&[u8], bool)> = None;
    for entry in tree_entries(id, data) {
        let (mode, name, target) = entry.map_err(|e| malformed(id, e.to_string()))?;
        let is_dir = mode == 0o40000;
        if !matches!(
            mode,
            0o100644 | 0o100755 | 0o100664 | 0o120000 | 0o40000 | 0o160000
        ) {
            return Err(malformed(id, format!("bad file mode {mode:o}")));
        }
        if name.is_empty() || name.contains(&b'/') || name == b"." || name == b".." {
            return Err(malformed(
                id,
                format!("bad entry name '{}'", String::from_utf8_lossy(name)),
            ));
        }
        if name.eq_ignore_ascii_case(b".git") {
            return Err(malformed(id, "an entry is named .git"));
        }
        if let Some((prev, prev_dir)) = previous {
            match tree_order(prev, prev_dir, name, is_dir) {
                std::cmp::Ordering::Less => {}
                std::cmp::Ordering::Equal => {
                    return Err(malformed(
                        id,
                        format!("duplicate entry '{}'", String::from_utf8_lossy(name)),
                    ))
                }
                std::cmp::Ordering::Greater => return Err(malformed(id, "the tree is not sorted")),
            }
            if prev == name {
                return Err(malformed(
                    id,
                    format!("duplicate entry '{}'", String::from_utf8_lossy(name)),
                ));
            }
        }
        previous = Some((name, is_dir));
        if mode != 0o160000 {
            links.push(target);
        }
    }
    Ok(())
}

/// Checks one object's format and returns the objects it links to.
pub fn check_object(
    id: &ObjectId,
    kind: ObjectKind,
    data: &[u8],
) -> Result<Vec<ObjectId>, CheckError> {
    let mut links = Vec::new();
    match kind {
        ObjectKind::Commit => check_commit(id, data, &mut links)?,
        ObjectKind::Tree => check_tree(id, data, &mut links)?,
        ObjectKind::Tag => check_tag(id, data, &mut links)?,
        ObjectKind::Blob => {}
    }
    Ok(links)
}

/// Checks every object of `incoming` (the quarantine) against `repo`: well formed, each link in
/// `incoming` or `repo`, and byte-identical to the repository's copy when `repo` has it too.
/// Then checks that each of `tips` is in one or the other. Runs on all cores; the first problem
/// found is returned.
pub fn check_incoming(
    incoming: &ObjectDb,
    repo: &ObjectDb,
    tips: &[ObjectId],
) -> Result<u64, CheckError> {
    let ids = incoming.all_ids(crate::IdOrder::Storage)?;
    // The quarantine holds one pack and no loose objects: its lookups never touch the disk.
    // The repository's loose objects are looked up adaptively (see `crate::existence`).
    let small = ids.len() < crate::PARALLEL_FROM;
    let in_repo = if small {
        ExistenceCheck::for_few(repo)
    } else {
        ExistenceCheck::new(repo)
    };
    let present = |id: &ObjectId| -> Result<bool, CheckError> {
        if incoming.locate_packed(id)?.is_some() {
            return Ok(true);
        }
        Ok(in_repo.contains(id)?)
    };
    let check = |id: &ObjectId| -> Result<(), CheckError> {
        let at = incoming
            .locate_packed(id)?
            .ok_or_else(|| malformed(id, "listed in the pack index but unreadable"))?;
        let existing = if in_repo.contains(id)? {
            repo.read(id)?
        } else {
            None
        };
        // A new blob stored whole has no format to check and no links: not inflated again
        // (index-pack inflated and hashed it already). Its entry's header tells, where a
        // delta's kind would take its chain.
        if existing.is_none() {
            if let crate::Location::Packed { pack, offset } = &at {
                let header = pack.entry_header(*offset)?;
                if matches!(
                    header.kind,
                    crate::pack::data::EntryKind::Base(ObjectKind::Blob)
                ) {
                    return Ok(());
                }
            }
        }
        let object = incoming.read_at(id, &at)?;
        if let Some(existing) = existing {
            if existing.kind != object.kind || existing.data != object.data {
                return Err(CheckError::Collision(*id));
            }
            // Already in the repository: connected by the invariant.
            return Ok(());
        }
        for link in check_object(id, object.kind, &object.data)? {
            if !present(&link)? {
                return Err(CheckError::Missing {
                    missing: link,
                    from: *id,
                });
            }
        }
        Ok(())
    };
    // A small push is checked on this thread: starting a thread pool would cost more than
    // the checks.
    if small {
        ids.iter().try_for_each(check)?;
    } else {
        ids.par_iter().try_for_each(check)?;
    }
    for tip in tips {
        if !present(tip)? {
            return Err(CheckError::MissingTip(*tip));
        }
    }
    let (stats, probes) = in_repo.counts();
    tracing::debug!(
        "checked {} incoming objects: {stats} loose lookups on disk, {probes} from a listing",
        ids.len()
    );
    Ok(ids.len() as u64)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    fn tree(entries: &[(&str, &str)]) -> Vec<u8> {
        let mut t = Vec::new();
        for (mode, name) in entries {
            t.extend_from_slice(format!("{mode} {name}\0").as_bytes());
            t.extend_from_slice(&[7u8; 20]);
        }
        t
    }

    /// A pack of `blobs`, for tests here and in the quarantine.
    pub(crate) fn blob_pack(blobs: &[&[u8]]) -> Vec<u8> {
        use sha1::Digest;
        use std::io::Write;
        let mut pack = b"PACK\0\0\0\x02".to_vec();
        pack.extend_from_slice(&(blobs.len() as u32).to_be_bytes());
        for data in blobs {
            crate::pack::data::encode_type_and_size(&mut pack, 3, data.len() as u64);
            let mut z = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::default());
            z.write_all(data).unwrap();
            pack.extend_from_slice(&z.finish().unwrap());
        }
        let sum = sha1::Sha1::digest(&pack);
        pack.extend_from_slice(&sum);
        pack
    }

    #[test]
    fn new_blobs_pass_and_a_differing_copy_is_a_collision() {
        use crate::pack::ingest::IngestOptions;
        use crate::quarantine::Quarantine;
        use std::io::Write;
        let dir = tempfile::tempdir().unwrap();
        let objects = dir.path().join("objects");
        std::fs::create_dir_all(objects.join("pack")).unwrap();
        let id = ObjectId::compute(ObjectKind::Blob, b"hello\n").unwrap();
        let check = |pack: &[u8]| {
            let repo = ObjectDb::open(&objects, &crate::OpenOptions::default()).unwrap();
            let mut q = Quarantine::create(&objects).unwrap();
            q.ingest(
                &mut &pack[..],
                None,
                &IngestOptions::default(),
                &mut |_, _, _| {},
            )
            .unwrap();
            let incoming = q.objects().unwrap();
            check_incoming(&incoming, &repo, &[id])
        };
        assert_eq!(check(&blob_pack(&[b"hello\n", b"other\n"])).unwrap(), 2);
        // The repository has a loose object of that id with other content.
        let hex = id.to_hex();
        std::fs::create_dir_all(objects.join(&hex[..2])).unwrap();
        let mut z = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::default());
        z.write_all(b"blob 6\0bye!!\n").unwrap();
        std::fs::write(objects.join(&hex[..2]).join(&hex[2..]), z.finish().unwrap()).unwrap();
        assert!(matches!(
            check(&blob_pack(&[b"hello\n"])),
            Err(CheckError::Collision(c)) if c == id
        ));
        // Its own content: no collision.
        let mut z = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::default());
        z.write_all(b"blob 6\0hello\n").unwrap();
        std::fs::write(objects.join(&hex[..2]).join(&hex[2..]), z.finish().unwrap()).unwrap();
        assert_eq!(check(&blob_pack(&[b"hello\n"])).unwrap(), 1);
    }

    #[test]
    fn fsck_rules() {
        let id = ObjectId::NULL;
        let good = b"tree 4b825dc642cb6eb9a060e54bf8d69288fbee4904\nauthor A <a@b> 1 +0000\ncommitter C <c@d> 2 -0130\n\nm\n";
        assert_eq!(
            check_object(&id, ObjectKind::Commit, good).unwrap().len(),
            1
        );
        let bad = b"tree 4b825dc642cb6eb9a060e54bf8d69288fbee4904\nauthor A a@b 1 +0000\ncommitter C <c@d> 2 -0130\n\nm\n";
        assert!(check_object(&id, ObjectKind::Commit, bad).is_err());
        assert!(check_object(&id, ObjectKind::Commit, b"author A <a@b> 1 +0000\n").is_err());
        let t = tree(&[
            ("100644", "a"),
            ("40000", "a-b"),
            ("40000", "a.d"),
            ("100644", "b"),
        ]);
        assert!(check_object(&id, ObjectKind::Tree, &t).is_ok());
        // "a" as a directory sorts as "a/", after "a-b" and "a.d".
        let t = tree(&[("100644", "a-b"), ("40000", "a")]);
        assert!(check_object(&id, ObjectKind::Tree, &t).is_ok());
        for bad in [
            tree(&[("100644", "b"), ("100644", "a")]),
            tree(&[("100644", "a"), ("100644", "a")]),
            tree(&[("100600", "a")]),
            tree(&[("100644", ".git")]),
            tree(&[("100644", "..")]),
        ] {
            assert!(check_object(&id, ObjectKind::Tree, &bad).is_err());
        }
        let links = check_object(&id, ObjectKind::Tree, &tree(&[("160000", "sub")])).unwrap();
        assert!(links.is_empty());
        let tag = b"object 4b825dc642cb6eb9a060e54bf8d69288fbee4904\ntype tree\ntag v1\ntagger T <t@t> 3 +0100\n\nmsg\n";
        assert_eq!(check_object(&id, ObjectKind::Tag, tag).unwrap().len(), 1);
        assert!(check_object(
            &id,
            ObjectKind::Tag,
            b"object 4b825dc642cb6eb9a060e54bf8d69288fbee4904\ntype tree\n"
        )
        .is_err());
    }
}
