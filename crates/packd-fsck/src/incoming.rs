//! Checks on received objects before they enter a repository: git's fsck checks (when on),
//! each link resolvable, each already-known object byte-identical, each new ref tip present.
//!
//! ```text
//! pass 1, all cores   every object of the pack: collision check against the repository;
//!                     new commits, trees, tags: fsck checks, links found and resolved;
//!                     tree entries named .gitmodules/.gitattributes (any alias) marked
//! pass 2              every marked object, from the pack or the repository: checked as such
//!                     a blob (gitmodules*, gitattributes*)
//! tips                each new ref tip in the pack or the repository
//! links               commit -> tree + parents; tree -> trees and blobs (no gitlinks); tag -> object,
//!                     each of the kind the link says (see `link_kinds`)
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
//!
//! A new blob stored whole is not inflated: only blobs marked in pass 1 are read. An object
//! the repository already has is compared with its copy and not checked again (git does not
//! check the bases it appends to a thin pack either).

use crate::commit::check_commit;
use crate::dotgit::Special;
use crate::early::EarlyFound;
use crate::gitattributes::{check_gitattributes, GITATTRIBUTES_MAX};
use crate::gitmodules::{check_gitmodules, GITMODULES_MAX};
use crate::link_kinds::{tag_type, KindMismatch, TargetPlace};
use crate::msg_id::{MsgId, Severity};
use crate::options::{FsckOptions, Report, Unpacker};
use crate::parsed::git_parse;
use crate::tag::check_tag;
use crate::tree::{check_tree, tree_links, TreeLinks};
use packd_odb::existence::ExistenceCheck;
use packd_odb::parse::{parse_commit, tag_target};
use packd_odb::{IdMap, ObjectDb, ObjectId, ObjectKind};
use rayon::prelude::*;
use std::collections::HashMap;

/// Work on fewer objects than this runs on the calling thread: starting the thread pool would
/// cost more than the checks.
const PARALLEL_FROM: usize = 512;

/// What git prints when its unpacker dies checking one object.
const FATAL_PACKED: &str = "fsck error in packed object";
/// What git prints when the checks after the pack (`.gitmodules` blobs and the like) fail.
const FATAL_PACK: &str = "fsck error in pack objects";

/// Why a received object or ref tip is refused.
#[derive(Debug, thiserror::Error)]
pub enum CheckError {
    /// git's unpacker refused an object: its fsck checks, or its object parser before them.
    #[error("{}", first_error(lines))]
    Fsck {
        /// `error: object <id>: <msgId>: <text>` and `warning: ...` lines, as git prints them.
        lines: Vec<String>,
        /// git's last word (`fsck error in packed object`), when it has one.
        fatal: Option<&'static str>,
        /// Which of git's unpackers the push was answered as.
        unpacker: Unpacker,
    },
    /// An object cannot be parsed far enough to find its links.
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
        /// With the fsck checks on, the git unpacker whose words answer it.
        answered_as: Option<Unpacker>,
    },
    /// An object links to one of another kind than the link says.
    #[error("{mismatch}")]
    WrongKind {
        /// The link and what it found.
        mismatch: KindMismatch,
        /// With the fsck checks on, the git unpacker whose words answer it.
        answered_as: Option<Unpacker>,
    },
    /// A new ref tip is neither received nor in the repository.
    #[error("missing object {0} for the new ref tip")]
    MissingTip(ObjectId),
    /// A received object has the id of a different object the repository has.
    #[error("object {0}: SHA-1 collision: it differs from the repository's object of that id")]
    Collision(ObjectId),
    /// Reading objects failed.
    #[error(transparent)]
    Odb(#[from] packd_odb::Error),
}

fn first_error(lines: &[String]) -> &str {
    lines
        .iter()
        .find_map(|l| l.strip_prefix("error: "))
        .unwrap_or("fsck error")
}

impl CheckError {
    /// The lines git's receive-pack relays to the client on side-band 2 for this refusal
    /// (`error: object ...`, then `fatal: ...`); none for refusals git words otherwise.
    pub fn remote_lines(&self) -> Vec<String> {
        match self {
            CheckError::Fsck { lines, fatal, .. } => {
                let mut all = lines.clone();
                all.extend(fatal.map(|f| format!("fatal: {f}")));
                all
            }
            // git's unpacker, walking the links: index-pack misses the object, unpack-objects
            // finds no object of the kind it wants.
            CheckError::Missing {
                missing,
                answered_as: Some(unpacker),
                ..
            } => vec![match unpacker {
                Unpacker::IndexPack => format!("fatal: did not receive expected object {missing}"),
                Unpacker::UnpackObjects => "fatal: object of unexpected type".to_string(),
            }],
            CheckError::WrongKind {
                mismatch,
                answered_as: Some(unpacker),
            } => mismatch.remote_lines(*unpacker),
            _ => Vec::new(),
        }
    }

    /// The `unpack` status of the report: git's for fsck refusals, packd's sentence otherwise.
    pub fn unpack_status(&self) -> String {
        match self {
            CheckError::Fsck { unpacker, .. }
            | CheckError::Missing {
                answered_as: Some(unpacker),
                ..
            }
            | CheckError::WrongKind {
                answered_as: Some(unpacker),
                ..
            } => unpacker.abnormal_exit().to_string(),
            other => other.to_string(),
        }
    }
}

/// What the checks of an accepted push found.
#[derive(Debug, Default)]
pub struct Checked {
    /// Objects checked (the pack's, appended bases included).
    pub objects: u64,
    /// `warning: object <id>: <msgId>: <text>` lines, for the client as git relays them.
    pub messages: Vec<String>,
}

fn malformed(id: &ObjectId, why: impl Into<String>) -> CheckError {
    CheckError::Malformed {
        id: *id,
        why: why.into(),
    }
}

/// What pass 1 gathered from some objects.
#[derive(Default)]
struct Gathered {
    warnings: Vec<String>,
    marked: Vec<(ObjectId, Special)>,
    /// The kinds of the repository's objects linked so far (the trees of a push name the
    /// same objects over and over): a cache, dropped when results merge.
    repo_kinds: IdMap<ObjectKind>,
}

impl Gathered {
    fn merge(mut self, mut other: Gathered) -> Gathered {
        self.warnings.append(&mut other.warnings);
        self.marked.append(&mut other.marked);
        self
    }
}

/// Checks every object of `incoming` (the quarantine) against `repo`, then each of `tips`.
/// `sent` is the number of objects the client sent (the pack header's count: it decides
/// which of git's unpackers the answer imitates). Runs on all cores; the first refusal
/// found is returned.
pub fn check_incoming(
    incoming: &ObjectDb,
    repo: &ObjectDb,
    tips: &[ObjectId],
    options: &FsckOptions,
    sent: u64,
) -> Result<Checked, CheckError> {
    check_incoming_with(incoming, repo, tips, options, sent, None)
}

/// [`check_incoming`], given what [`crate::early::EarlyChecks`] found while the pack was
/// indexed (with the same `options`): an object it checked is not read again, and its links
/// are looked up once each after the pass. Should a link be missing, the checks run again
/// without `early`, so that the refusal is the one [`check_incoming`] gives.
pub fn check_incoming_with(
    incoming: &ObjectDb,
    repo: &ObjectDb,
    tips: &[ObjectId],
    options: &FsckOptions,
    sent: u64,
    early: Option<EarlyFound>,
) -> Result<Checked, CheckError> {
    let unpacker = options.unpacker(sent);
    let ids = incoming.all_ids(packd_odb::IdOrder::Storage)?;
    // The quarantine holds one pack and no loose objects: its lookups never touch the disk.
    // The repository's loose objects are looked up adaptively (see `packd_odb::existence`).
    let small = ids.len() < PARALLEL_FROM;
    let in_repo = if small {
        ExistenceCheck::for_few(repo)
    } else {
        ExistenceCheck::new(repo)
    };
    // Links are looked up in a map of the pack's ids: a lookup through the pack index clones
    // (and drops) the pack's `Arc`, whose count every thread then fights over; a full clone's
    // trees have millions of links (git/git: that was a fifth of the receiver's CPU).
    let in_pack = pack_kinds(incoming)?;
    let present = |id: &ObjectId| -> Result<bool, CheckError> {
        Ok(in_pack.contains_key(id) || in_repo.contains(id)?)
    };
    // A link's target: its kind and where it is (`None`: absent).
    let target = |id: &ObjectId,
                  from_offset: u64,
                  repo_kinds: &mut IdMap<ObjectKind>|
     -> Result<_, CheckError> {
        if let Some(packed) = in_pack.get(id) {
            let place = if packed.offset > from_offset {
                TargetPlace::PackAfter
            } else {
                TargetPlace::PackBefore
            };
            return Ok(Some((packed.kind, place)));
        }
        if let Some(kind) = repo_kinds.get(id) {
            return Ok(Some((*kind, TargetPlace::Repository)));
        }
        if !in_repo.contains(id)? {
            return Ok(None);
        }
        let kind = repo_kind(repo, id)?;
        if let Some(kind) = kind {
            repo_kinds.insert(*id, kind);
        }
        Ok(kind.map(|kind| (kind, TargetPlace::Repository)))
    };
    let check = |mut gathered: Gathered, id: &ObjectId| -> Result<Gathered, CheckError> {
        let existing = if in_repo.contains(id)? {
            repo.read(id)?
        } else {
            None
        };
        // Checked while the pack was indexed: its links are looked up below.
        if let (None, Some(early)) = (&existing, &early) {
            if early.checked(id) {
                if let Some(extra) = early.extra(id) {
                    gathered.warnings.extend(extra.warnings.iter().cloned());
                    gathered.marked.extend(extra.marked.iter().cloned());
                }
                return Ok(gathered);
            }
        }
        let at = incoming
            .locate_packed(id)?
            .ok_or_else(|| malformed(id, "listed in the pack index but unreadable"))?;
        // A new blob stored whole has no format to check and no links: not inflated again
        // (index-pack inflated and hashed it already). Its entry's header tells, where a
        // delta's kind would take its chain.
        if existing.is_none() {
            if let packd_odb::Location::Packed { pack, offset } = &at {
                let header = pack.entry_header(*offset)?;
                if matches!(
                    header.kind,
                    packd_odb::pack::data::EntryKind::Base(ObjectKind::Blob)
                ) {
                    return Ok(gathered);
                }
            }
        }
        let object = incoming.read_at(id, &at)?;
        if let Some(existing) = existing {
            if existing.kind != object.kind || existing.data != object.data {
                return Err(CheckError::Collision(*id));
            }
            // Already in the repository: connected by the invariant.
            return Ok(gathered);
        }
        let links = object_links(id, object.kind, &object.data, options, unpacker)?;
        let offset = in_pack.get(id).map_or(0, |p| p.offset);
        let answered_as = options.enabled.then_some(unpacker);
        for (link, expected) in &links.links {
            let Some((found, place)) = target(link, offset, &mut gathered.repo_kinds)? else {
                return Err(CheckError::Missing {
                    missing: *link,
                    from: *id,
                    answered_as,
                });
            };
            if let Some(expected) = expected.filter(|e| *e != found) {
                let mismatch = KindMismatch {
                    target: *link,
                    expected,
                    found,
                    from: *id,
                    from_kind: object.kind,
                    place,
                };
                return Err(CheckError::WrongKind {
                    mismatch,
                    answered_as,
                });
            }
        }
        gathered.warnings.extend(links.warnings);
        gathered.marked.extend(links.marked);
        Ok(gathered)
    };
    let gathered = if small {
        ids.iter().try_fold(Gathered::default(), check)?
    } else {
        ids.par_iter()
            .try_fold(Gathered::default, check)
            .try_reduce(Gathered::default, |a, b| Ok(a.merge(b)))?
    };
    if let Some(early) = &early {
        // Each distinct link once, with each kind it was named as: absent, or of another
        // kind than one of its names says, and the checks run again without `early`, for the
        // object that names it and git's words for that (as without `early`).
        let mut repo_kinds = IdMap::default();
        for (link, expected) in early.links() {
            let found = target(&link, 0, &mut repo_kinds)?.map(|(kind, _)| kind);
            let fine = match (found, expected) {
                (None, _) => false,
                (Some(_), None) => true,
                (Some(found), Some(expected)) => found == expected,
            };
            if !fine {
                drop(gathered);
                return check_incoming_with(incoming, repo, tips, options, sent, None);
            }
        }
    }
    let mut messages = gathered.warnings;
    if options.enabled {
        check_marked(
            incoming,
            repo,
            &gathered.marked,
            options,
            unpacker,
            &mut messages,
        )?;
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
    Ok(Checked {
        objects: ids.len() as u64,
        messages,
    })
}

/// The kind of each object of the received pack and its offset there (git's unpackers read
/// a pack in the order of its entries, which decides how they word a link's wrong kind).
#[derive(Clone, Copy)]
struct Packed {
    kind: ObjectKind,
    offset: u64,
}

/// The kinds of the pack's objects, from their entries' headers: read in the pack's order,
/// a delta takes the kind of its base, which an offset delta has before it (a reference delta's
/// base may follow: its chain's headers are read). Nothing is inflated; one header per entry.
fn pack_kinds(incoming: &ObjectDb) -> Result<IdMap<Packed>, CheckError> {
    use packd_odb::pack::data::EntryKind;
    let mut kinds = IdMap::default();
    for pack in incoming.packs() {
        let order = pack.positions_in_pack_order()?;
        // (offset, kind) of the entries read so far, by rising offset.
        let mut read: Vec<(u64, ObjectKind)> = Vec::with_capacity(order.len());
        kinds.reserve(order.len());
        for &i in order {
            let offset = pack.index().offset(i)?;
            let header = pack.entry_header(offset)?;
            let kind = match header.kind {
                EntryKind::Base(kind) => kind,
                _ => {
                    let base = pack
                        .delta_base_offset(offset, &header)?
                        .ok_or_else(|| malformed(&pack.index().id(i), "a delta without a base"))?;
                    match read.binary_search_by_key(&base, |(o, _)| *o) {
                        Ok(at) => read[at].1,
                        Err(_) => pack.object_kind(base)?,
                    }
                }
            };
            read.push((offset, kind));
            kinds.insert(pack.index().id(i), Packed { kind, offset });
        }
    }
    Ok(kinds)
}

/// The kind of the repository's object `id`: for a packed one from its entries' headers only
/// (its header would inflate a delta's first bytes for its size, which tripled the checks of
/// an ordinary push, whose trees name many of the repository's objects).
fn repo_kind(repo: &ObjectDb, id: &ObjectId) -> Result<Option<ObjectKind>, CheckError> {
    Ok(match repo.locate(id)? {
        None => None,
        Some(packd_odb::Location::Packed { pack, offset }) => Some(pack.object_kind(offset)?),
        Some(loose) => Some(repo.header_at(id, &loose)?.kind),
    })
}

/// What one new object links to (with the kind each link says, when it says one), with its
/// warnings and marked blobs.
#[derive(Default)]
pub(crate) struct ObjectLinks {
    pub links: Vec<(ObjectId, Option<ObjectKind>)>,
    pub marked: Vec<(ObjectId, Special)>,
    pub warnings: Vec<String>,
}

/// Checks one new object (when the checks are on) and finds its links.
pub(crate) fn object_links(
    id: &ObjectId,
    kind: ObjectKind,
    data: &[u8],
    options: &FsckOptions,
    unpacker: Unpacker,
) -> Result<ObjectLinks, CheckError> {
    let mut found = ObjectLinks::default();
    let mut tree = TreeLinks::default();
    if options.enabled {
        if let Err(refused) = git_parse(id, kind, data) {
            return Err(CheckError::Fsck {
                lines: refused.lines,
                fatal: Some(refused.fatal),
                unpacker,
            });
        }
        let mut report = Report::new(options);
        match kind {
            ObjectKind::Commit => {
                check_commit(id, data, &mut report);
            }
            ObjectKind::Tag => {
                check_tag(id, data, &mut report);
            }
            ObjectKind::Tree => {
                check_tree(id, data, &mut report, &mut tree);
            }
            ObjectKind::Blob => {}
        }
        if report.failed {
            return Err(CheckError::Fsck {
                lines: report.lines,
                fatal: Some(FATAL_PACKED),
                unpacker,
            });
        }
        found.warnings = report.lines;
    }
    match kind {
        ObjectKind::Commit => {
            let info = parse_commit(id, data).map_err(|e| malformed(id, e.to_string()))?;
            found.links.push((info.tree, Some(ObjectKind::Tree)));
            found.links.extend(
                info.parents
                    .into_iter()
                    .map(|p| (p, Some(ObjectKind::Commit))),
            );
        }
        ObjectKind::Tag => {
            let target = tag_target(id, data).map_err(|e| malformed(id, e.to_string()))?;
            found.links.push((target, tag_type(data)));
        }
        ObjectKind::Tree => {
            if !options.enabled {
                tree_links(data, &mut tree);
            }
            if !tree.complete {
                return Err(malformed(id, "the tree cannot be parsed"));
            }
            found.links = tree.links.into_iter().map(|(l, k)| (l, Some(k))).collect();
            found.marked = tree.marked;
        }
        ObjectKind::Blob => {}
    }
    Ok(found)
}

/// Pass 2: every object a tree named `.gitmodules` or `.gitattributes`, checked as such.
fn check_marked(
    incoming: &ObjectDb,
    repo: &ObjectDb,
    marked: &[(ObjectId, Special)],
    options: &FsckOptions,
    unpacker: Unpacker,
    messages: &mut Vec<String>,
) -> Result<(), CheckError> {
    let mut wanted: HashMap<ObjectId, (bool, bool)> = HashMap::new();
    for (id, which) in marked {
        let entry = wanted.entry(*id).or_default();
        match which {
            Special::Gitmodules => entry.0 = true,
            _ => entry.1 = true,
        }
    }
    let mut report = Report::new(options);
    let mut in_pack_failed = false;
    // git's index-pack prints the id of a missing .gitmodules on its output, which its
    // receive-pack closed after reading the pack's name: it dies of SIGPIPE, saying nothing.
    let mut died_silently = false;
    for (id, (gitmodules, gitattributes)) in wanted {
        if options.skips(&id) {
            continue;
        }
        let before = report.failed;
        let (db, in_pack) = match incoming.locate_packed(&id)? {
            Some(_) => (incoming, true),
            None => (repo, false),
        };
        let Some(header) = db.header(&id)? else {
            if gitmodules && unpacker == Unpacker::UnpackObjects {
                report.report(
                    &id,
                    MsgId::GitmodulesMissing,
                    "unable to read .gitmodules blob",
                );
            } else if gitmodules && options.severity(MsgId::GitmodulesMissing) != Severity::Ignore {
                died_silently = true;
            }
            if gitattributes {
                report.report(
                    &id,
                    MsgId::GitattributesMissing,
                    "unable to read .gitattributes blob",
                );
            }
            continue;
        };
        if header.kind != ObjectKind::Blob {
            if gitmodules {
                report.report(&id, MsgId::GitmodulesBlob, "non-blob found at .gitmodules");
            }
            if gitattributes {
                report.report(
                    &id,
                    MsgId::GitattributesBlob,
                    "non-blob found at .gitattributes",
                );
            }
            continue;
        }
        let fits = |max: u64| header.size <= max;
        let data =
            if (gitmodules && fits(GITMODULES_MAX)) || (gitattributes && fits(GITATTRIBUTES_MAX)) {
                db.read(&id)?.map(|o| o.data)
            } else {
                None
            };
        let data = data.as_deref();
        if gitmodules {
            match data.filter(|_| fits(GITMODULES_MAX)) {
                Some(data) => {
                    check_gitmodules(&id, data, &mut report);
                }
                None => {
                    report.report(
                        &id,
                        MsgId::GitmodulesLarge,
                        ".gitmodules too large to parse",
                    );
                }
            }
        }
        if gitattributes {
            match data.filter(|_| fits(GITATTRIBUTES_MAX)) {
                Some(data) => {
                    check_gitattributes(&id, data, &mut report);
                }
                None => {
                    report.report(
                        &id,
                        MsgId::GitattributesLarge,
                        ".gitattributes too large to parse",
                    );
                }
            }
        }
        // index-pack checks a marked blob of the pack as it reads it, after the tree.
        in_pack_failed |= in_pack && report.failed && !before;
    }
    if report.failed || died_silently {
        let fatal = if !report.failed {
            None
        } else if unpacker == Unpacker::IndexPack && in_pack_failed {
            Some(FATAL_PACKED)
        } else {
            Some(FATAL_PACK)
        };
        let mut lines = std::mem::take(messages);
        lines.append(&mut report.lines);
        return Err(CheckError::Fsck {
            lines,
            fatal,
            unpacker,
        });
    }
    messages.append(&mut report.lines);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use packd_odb::pack::ingest::IngestOptions;
    use packd_odb::quarantine::Quarantine;
    use std::io::Write;

    /// A pack of whole objects.
    fn pack_of(objects: &[(u8, &[u8])]) -> Vec<u8> {
        use sha1::Digest;
        let mut pack = b"PACK\0\0\0\x02".to_vec();
        pack.extend_from_slice(&(objects.len() as u32).to_be_bytes());
        for (kind, data) in objects {
            packd_odb::pack::data::encode_type_and_size(&mut pack, *kind, data.len() as u64);
            let mut z = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::default());
            z.write_all(data).unwrap();
            pack.extend_from_slice(&z.finish().unwrap());
        }
        let sum = sha1::Sha1::digest(&pack);
        pack.extend_from_slice(&sum);
        pack
    }

    fn check(
        objects: &std::path::Path,
        pack: &[u8],
        tips: &[ObjectId],
        options: &FsckOptions,
    ) -> Result<Checked, CheckError> {
        let repo = ObjectDb::open(objects, &packd_odb::OpenOptions::default()).unwrap();
        let mut q = Quarantine::create(objects).unwrap();
        q.ingest(
            &mut &pack[..],
            None,
            &IngestOptions::default(),
            &mut |_, _, _| {},
        )
        .unwrap();
        let incoming = q.objects().unwrap();
        check_incoming(&incoming, &repo, tips, options, 1)
    }

    fn write_loose(objects: &std::path::Path, id: &ObjectId, raw: &[u8]) {
        let hex = id.to_hex();
        std::fs::create_dir_all(objects.join(&hex[..2])).unwrap();
        let mut z = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::default());
        z.write_all(raw).unwrap();
        std::fs::write(objects.join(&hex[..2]).join(&hex[2..]), z.finish().unwrap()).unwrap();
    }

    #[test]
    fn new_blobs_pass_and_a_differing_copy_is_a_collision() {
        let dir = tempfile::tempdir().unwrap();
        let objects = dir.path().join("objects");
        std::fs::create_dir_all(objects.join("pack")).unwrap();
        let id = ObjectId::compute(ObjectKind::Blob, b"hello\n").unwrap();
        let options = FsckOptions::strict();
        let pack = pack_of(&[(3, b"hello\n"), (3, b"other\n")]);
        assert_eq!(check(&objects, &pack, &[id], &options).unwrap().objects, 2);
        // The repository has a loose object of that id with other content.
        write_loose(&objects, &id, b"blob 6\0bye!!\n");
        let pack = pack_of(&[(3, b"hello\n")]);
        assert!(matches!(
            check(&objects, &pack, &[id], &options),
            Err(CheckError::Collision(c)) if c == id
        ));
        // Its own content: no collision.
        write_loose(&objects, &id, b"blob 6\0hello\n");
        assert_eq!(check(&objects, &pack, &[id], &options).unwrap().objects, 1);
    }

    #[test]
    fn links_to_objects_of_the_wrong_kind() {
        let dir = tempfile::tempdir().unwrap();
        let objects = dir.path().join("objects");
        std::fs::create_dir_all(objects.join("pack")).unwrap();
        let blob = ObjectId::compute(ObjectKind::Blob, b"f\n").unwrap();
        let mut sub = b"100644 f\0".to_vec();
        sub.extend_from_slice(blob.as_bytes());
        let sub_id = ObjectId::compute(ObjectKind::Tree, &sub).unwrap();
        // A blob-mode entry naming the tree, which follows it in the pack.
        let mut root = b"100644 a\0".to_vec();
        root.extend_from_slice(sub_id.as_bytes());
        let root_id = ObjectId::compute(ObjectKind::Tree, &root).unwrap();
        let pack = pack_of(&[(2, &root), (2, &sub), (3, b"f\n")]);
        for (options, unpacker, lines) in [
            (
                FsckOptions::strict(),
                Unpacker::UnpackObjects,
                vec![
                    format!("error: object {sub_id} is a tree, not a blob"),
                    format!("fatal: Error on reachable objects of {root_id}"),
                ],
            ),
            (FsckOptions::disabled(), Unpacker::UnpackObjects, vec![]),
        ] {
            let err = check(&objects, &pack, &[root_id], &options).unwrap_err();
            let CheckError::WrongKind { mismatch, .. } = &err else {
                panic!("{err:?}");
            };
            assert_eq!(mismatch.place, TargetPlace::PackAfter);
            assert_eq!(err.remote_lines(), lines);
            assert_eq!(
                mismatch.remote_lines(Unpacker::IndexPack)[1],
                "fatal: invalid tree"
            );
            if options.enabled {
                assert_eq!(err.unpack_status(), unpacker.abnormal_exit());
            } else {
                assert_eq!(
                    err.unpack_status(),
                    format!("object {sub_id} is a tree, not a blob (linked from tree {root_id})")
                );
            }
        }
        // The same tree with the entry of tree mode: accepted.
        let mut root = b"40000 a\0".to_vec();
        root.extend_from_slice(sub_id.as_bytes());
        let root_id = ObjectId::compute(ObjectKind::Tree, &root).unwrap();
        let pack = pack_of(&[(2, &root), (2, &sub), (3, b"f\n")]);
        assert!(check(&objects, &pack, &[root_id], &FsckOptions::strict()).is_ok());
    }

    #[test]
    fn links_tips_and_marked_blobs() {
        let dir = tempfile::tempdir().unwrap();
        let objects = dir.path().join("objects");
        std::fs::create_dir_all(objects.join("pack")).unwrap();
        let modules = b"[submodule \"../x\"]\n\turl = ./x\n";
        let blob = ObjectId::compute(ObjectKind::Blob, modules).unwrap();
        let mut tree = b"100644 .gitmodules\0".to_vec();
        tree.extend_from_slice(blob.as_bytes());
        let tree_id = ObjectId::compute(ObjectKind::Tree, &tree).unwrap();
        let strict = FsckOptions::strict();
        // The tree without its blob: a missing link.
        let err = check(&objects, &pack_of(&[(2, &tree)]), &[tree_id], &strict).unwrap_err();
        assert!(matches!(err, CheckError::Missing { missing, .. } if missing == blob));
        // With it: the marked blob is read and refused, as git words it.
        let pack = pack_of(&[(2, &tree), (3, modules)]);
        let err = check(&objects, &pack, &[tree_id], &strict).unwrap_err();
        assert_eq!(
            err.remote_lines(),
            [
                format!("error: object {blob}: gitmodulesName: disallowed submodule name: ../x"),
                "fatal: fsck error in pack objects".to_string(),
            ]
        );
        assert_eq!(err.unpack_status(), "unpack-objects abnormal exit");
        // Checks off: only links and tips.
        let off = FsckOptions::disabled();
        assert!(check(&objects, &pack, &[tree_id], &off).is_ok());
        let absent = ObjectId::compute(ObjectKind::Blob, b"absent").unwrap();
        assert!(matches!(
            check(&objects, &pack, &[absent], &off),
            Err(CheckError::MissingTip(t)) if t == absent
        ));
    }
}
