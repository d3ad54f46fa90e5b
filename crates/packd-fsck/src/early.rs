//! The per-object checks of a received pack run while index-pack resolves its deltas, on the
//! content it has in memory then, instead of reading every commit, tree and tag again after it
//! (inflating each and applying its delta chain a second time: a fifth of the receiver's CPU
//! on a full clone of git/git).
//!
//! ```text
//! index-pack's hashing and resolving threads ── EarlyChecks::observe(id, kind, content)
//!    (whole objects as they are read and hashed, deltas as they are resolved)
//!    commit, tree, tag   object_links: git's parse + fsck checks, links, marked blobs
//!                        kept: the id (seen), each link once (id, kinds wanted),
//!                        warnings and marked blobs by object (few)
//!    blob                kept: the id (seen)
//! check_incoming_with ── an object seen and new is not read again; the links are looked up
//!                        once each, after the pass over the pack
//! ```
//! What is kept is bounded ([`HELD_MAX`] ids in all, a few tens of MB). Anything unusual gives
//! the early results up, and the checks then read the pack as they do without them, so that
//! every refusal is found, worded and ordered exactly as there: an object failing its checks,
//! a link not found, more ids than the bound.

use crate::dotgit::Special;
use crate::incoming::object_links;
use crate::options::{FsckOptions, Unpacker};
use packd_odb::pack::index::resolve::ObjectObserver;
use packd_odb::{IdMap, IdSet, ObjectId, ObjectKind};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Mutex;

/// At most this many ids (objects seen, distinct links, objects with warnings or marked
/// blobs and those blobs) are kept, about 40 bytes each; past it the early results are given
/// up. A full clone of git/git holds about 800,000.
pub const HELD_MAX: usize = 3_000_000;

/// What one object's checks found beyond its links, kept only when there is something.
#[derive(Debug, Default, Clone)]
pub(crate) struct Extra {
    /// Its `warning:` lines.
    pub warnings: Vec<String>,
    /// Blobs it names `.gitmodules` / `.gitattributes`.
    pub marked: Vec<(ObjectId, Special)>,
}

/// What one resolving thread kept (one per thread: no lock is contended).
#[derive(Default)]
struct Shard {
    seen: IdSet,
    /// Each link once, with a bit per kind it was wanted as (see [`kind_bit`]).
    links: IdMap<u8>,
    extras: IdMap<Extra>,
}

/// A link's bit for the kind it names (none for a link that names no kind: a tag of an
/// unknown type; such a link is kept with no bit).
fn kind_bit(kind: Option<ObjectKind>) -> u8 {
    match kind {
        None => 0,
        Some(ObjectKind::Commit) => 1,
        Some(ObjectKind::Tree) => 2,
        Some(ObjectKind::Blob) => 4,
        Some(ObjectKind::Tag) => 8,
    }
}

const KINDS: [ObjectKind; 4] = [
    ObjectKind::Commit,
    ObjectKind::Tree,
    ObjectKind::Blob,
    ObjectKind::Tag,
];

/// The observer given to index-pack ([`packd_odb::pack::ingest::IngestOptions::observer`]):
/// checks each object it is shown and keeps what [`crate::check_incoming_with`] needs of it.
pub struct EarlyChecks<'o> {
    options: &'o FsckOptions,
    shards: Box<[Mutex<Shard>]>,
    given_up: AtomicBool,
    held: AtomicUsize,
}

impl<'o> EarlyChecks<'o> {
    /// Early checks with the `options` the checks after index-pack will use.
    pub fn new(options: &'o FsckOptions) -> EarlyChecks<'o> {
        // Observers run on rayon's threads (resolving) and on read_pack's own (reading and
        // hashing: slot 0, shared with the caller's).
        let shards = (0..rayon::current_num_threads() + 1)
            .map(|_| Mutex::new(Shard::default()))
            .collect();
        EarlyChecks {
            options,
            shards,
            given_up: AtomicBool::new(false),
            held: AtomicUsize::new(0),
        }
    }

    /// What was found, or `None` when the early results were given up.
    pub fn finish(self) -> Option<EarlyFound> {
        if self.given_up.into_inner() {
            return None;
        }
        let mut found = EarlyFound::default();
        for shard in self.shards.into_vec() {
            let shard = shard.into_inner().ok()?;
            if found.seen.is_empty() {
                found.seen = shard.seen;
                found.links = shard.links;
                found.extras = shard.extras;
                continue;
            }
            found.seen.extend(shard.seen);
            for (id, bits) in shard.links {
                *found.links.entry(id).or_default() |= bits;
            }
            found.extras.extend(shard.extras);
        }
        Some(found)
    }

    fn give_up(&self) {
        self.given_up.store(true, Ordering::Relaxed);
    }
}

impl ObjectObserver for EarlyChecks<'_> {
    fn observe(&self, id: &ObjectId, kind: ObjectKind, data: &[u8]) {
        if self.given_up.load(Ordering::Relaxed) {
            return;
        }
        // The unpacker only words refusals, and a refusal gives the early results up.
        let links = if kind == ObjectKind::Blob {
            None
        } else {
            match object_links(id, kind, data, self.options, Unpacker::IndexPack) {
                Ok(links) => Some(links),
                Err(_) => return self.give_up(),
            }
        };
        let slot = rayon::current_thread_index().map_or(0, |i| i + 1);
        let Some(shard) = self.shards.get(slot) else {
            return self.give_up();
        };
        let Ok(mut shard) = shard.lock() else {
            return self.give_up();
        };
        let mut added = usize::from(shard.seen.insert(*id));
        if let Some(links) = links {
            for (link, kind) in links.links {
                let bits = shard.links.entry(link).or_insert_with(|| {
                    added += 1;
                    0
                });
                *bits |= kind_bit(kind);
            }
            if !links.warnings.is_empty() || !links.marked.is_empty() {
                added += 1 + links.marked.len();
                shard.extras.insert(
                    *id,
                    Extra {
                        warnings: links.warnings,
                        marked: links.marked,
                    },
                );
            }
        }
        if self.held.fetch_add(added, Ordering::Relaxed) + added > HELD_MAX {
            *shard = Shard::default();
            self.give_up();
        }
    }
}

/// What [`EarlyChecks`] found, for [`crate::check_incoming_with`].
#[derive(Default)]
pub struct EarlyFound {
    seen: IdSet,
    links: IdMap<u8>,
    extras: IdMap<Extra>,
}

impl EarlyFound {
    /// Whether the object `id` was checked (a blob: seen) while the pack was indexed.
    pub(crate) fn checked(&self, id: &ObjectId) -> bool {
        self.seen.contains(id)
    }

    /// The warnings and marked blobs of a checked object, if it has any.
    pub(crate) fn extra(&self, id: &ObjectId) -> Option<&Extra> {
        self.extras.get(id)
    }

    /// Every link of the checked objects, once per (id, kind wanted); `None` for one whose
    /// links name no kind.
    pub(crate) fn links(&self) -> impl Iterator<Item = (ObjectId, Option<ObjectKind>)> + '_ {
        self.links.iter().flat_map(|(id, bits)| {
            let named = KINDS
                .iter()
                .filter(move |k| bits & kind_bit(Some(**k)) != 0)
                .map(move |k| (*id, Some(*k)));
            let unnamed = (*bits == 0).then_some((*id, None));
            named.chain(unnamed)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::incoming::{check_incoming, check_incoming_with, CheckError, Checked};
    use packd_odb::pack::ingest::IngestOptions;
    use packd_odb::quarantine::Quarantine;
    use packd_odb::ObjectDb;
    use std::io::Write;

    /// A pack entry: a whole object, or a ref-delta that makes `data` from the base `base`
    /// (the delta inserts every byte: any base will do).
    enum Entry<'a> {
        Whole(u8, &'a [u8]),
        Delta(ObjectId, &'a [u8]),
    }

    fn zlib(data: &[u8]) -> Vec<u8> {
        let mut z = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::default());
        z.write_all(data).unwrap();
        z.finish().unwrap()
    }

    fn varint(out: &mut Vec<u8>, mut n: usize) {
        while n >= 0x80 {
            out.push((n as u8 & 0x7f) | 0x80);
            n >>= 7;
        }
        out.push(n as u8);
    }

    fn pack_of(entries: &[Entry], base_size: impl Fn(&ObjectId) -> usize) -> Vec<u8> {
        use sha1::Digest;
        let mut pack = b"PACK\0\0\0\x02".to_vec();
        pack.extend_from_slice(&(entries.len() as u32).to_be_bytes());
        for entry in entries {
            match entry {
                Entry::Whole(kind, data) => {
                    packd_odb::pack::data::encode_type_and_size(
                        &mut pack,
                        *kind,
                        data.len() as u64,
                    );
                    pack.extend_from_slice(&zlib(data));
                }
                Entry::Delta(base, data) => {
                    let mut delta = Vec::new();
                    varint(&mut delta, base_size(base));
                    varint(&mut delta, data.len());
                    for chunk in data.chunks(127) {
                        delta.push(chunk.len() as u8);
                        delta.extend_from_slice(chunk);
                    }
                    packd_odb::pack::data::encode_type_and_size(&mut pack, 7, delta.len() as u64);
                    pack.extend_from_slice(base.as_bytes());
                    pack.extend_from_slice(&zlib(&delta));
                }
            }
        }
        let sum = sha1::Sha1::digest(&pack);
        pack.extend_from_slice(&sum);
        pack
    }

    /// The checks of `pack` pushed into an empty repository, with the early checks and without.
    fn both(
        pack: &[u8],
        tips: &[ObjectId],
        options: &FsckOptions,
    ) -> (Option<bool>, [Result<Checked, CheckError>; 2]) {
        let dir = tempfile::tempdir().unwrap();
        let objects = dir.path().join("objects");
        std::fs::create_dir_all(objects.join("pack")).unwrap();
        let repo = ObjectDb::open(&objects, &packd_odb::OpenOptions::default()).unwrap();
        let mut q = Quarantine::create(&objects).unwrap();
        let early = EarlyChecks::new(options);
        let ingest = IngestOptions {
            observer: Some(&early),
            ..IngestOptions::default()
        };
        q.ingest(&mut &pack[..], None, &ingest, &mut |_, _, _| {})
            .unwrap();
        let incoming = q.objects().unwrap();
        let found = early.finish();
        let used = found.as_ref().map(|f| !f.seen.is_empty());
        let with = check_incoming_with(&incoming, &repo, tips, options, 1, found);
        let without = check_incoming(&incoming, &repo, tips, options, 1);
        (used, [with, without])
    }

    fn outcome(r: &Result<Checked, CheckError>) -> Result<Vec<String>, (String, Vec<String>)> {
        match r {
            Ok(c) => Ok(c.messages.clone()),
            Err(e) => Err((e.to_string(), e.remote_lines())),
        }
    }

    fn tree(entries: &[(&str, &str, ObjectId)]) -> Vec<u8> {
        let mut t = Vec::new();
        for (mode, name, id) in entries {
            t.extend_from_slice(format!("{mode} {name}\0").as_bytes());
            t.extend_from_slice(id.as_bytes());
        }
        t
    }

    fn commit(tree: &ObjectId, parent: Option<&ObjectId>, author: &str) -> Vec<u8> {
        let parent = parent.map(|p| format!("parent {p}\n")).unwrap_or_default();
        format!("tree {tree}\n{parent}author {author}\ncommitter A <a@b> 1 +0000\n\nm\n")
            .into_bytes()
    }

    fn id(kind: ObjectKind, data: &[u8]) -> ObjectId {
        ObjectId::compute(kind, data).unwrap()
    }

    #[test]
    fn early_results_equal_the_checks_without_them() {
        let mut options = FsckOptions::strict();
        options.set_from_config("badfilemode", "warn").unwrap();
        let file = b"file\n".as_slice();
        let file_id = id(ObjectKind::Blob, file);
        let t0 = tree(&[("100644", "a", file_id)]);
        let t0_id = id(ObjectKind::Tree, &t0);
        let c0 = commit(&t0_id, None, "A <a@b> 1 +0000");
        let c0_id = id(ObjectKind::Commit, &c0);
        let sizes = |b: &ObjectId| if *b == t0_id { t0.len() } else { c0.len() };
        for (modules, refused) in [
            (b"[submodule \"x\"]\n\turl = ./x\n".as_slice(), false),
            (b"[submodule \"../x\"]\n\turl = ./x\n".as_slice(), true),
        ] {
            let modules_id = id(ObjectKind::Blob, modules);
            // A delta tree with a warning and a marked blob; a delta commit; a delta blob.
            let t1 = tree(&[
                ("100644", ".gitmodules", modules_id),
                ("100664", "b", file_id),
            ]);
            let t1_id = id(ObjectKind::Tree, &t1);
            let c1 = commit(&t1_id, Some(&c0_id), "A <a@b> 2 +0000");
            let c1_id = id(ObjectKind::Commit, &c1);
            let pack = pack_of(
                &[
                    Entry::Whole(3, file),
                    Entry::Whole(2, &t0),
                    Entry::Whole(1, &c0),
                    Entry::Delta(t0_id, &t1),
                    Entry::Delta(c0_id, &c1),
                    Entry::Whole(3, modules),
                ],
                sizes,
            );
            let (used, [with, without]) = both(&pack, &[c1_id], &options);
            assert_eq!(used, Some(true), "the early checks saw the deltas");
            assert_eq!(outcome(&with), outcome(&without));
            let lines = match outcome(&with) {
                Ok(lines) => lines,
                Err((_, lines)) => lines,
            };
            assert!(
                lines[0].contains(&format!("{t1_id}: badFilemode")),
                "{lines:?}"
            );
            assert_eq!(with.is_err(), refused, "{lines:?}");
        }
    }

    #[test]
    fn a_missing_link_or_a_refused_object_is_found_as_without_them() {
        let options = FsckOptions::strict();
        let absent = id(ObjectKind::Blob, b"absent\n");
        let t0 = tree(&[("100644", "a", absent)]);
        let t0_id = id(ObjectKind::Tree, &t0);
        let sizes = |_: &ObjectId| t0.len();
        // The delta tree's blob is missing: found by the pass without the early results.
        let t1 = tree(&[("100644", "b", absent)]);
        let t1_id = id(ObjectKind::Tree, &t1);
        let pack = pack_of(
            &[
                Entry::Whole(3, b"absent but not quite\n"),
                Entry::Whole(2, &t0),
                Entry::Delta(t0_id, &t1),
            ],
            sizes,
        );
        let (used, [with, without]) = both(&pack, &[t1_id], &options);
        assert_eq!(used, Some(true));
        assert!(matches!(&with, Err(CheckError::Missing { missing, .. }) if *missing == absent));
        assert_eq!(outcome(&with), outcome(&without));
        // A delta commit git refuses: the early results are given up, the refusal is git's.
        let file = b"file\n".as_slice();
        let t2 = tree(&[("100644", "a", id(ObjectKind::Blob, file))]);
        let t2_id = id(ObjectKind::Tree, &t2);
        let c0 = commit(&t2_id, None, "A <a@b> 1 +0000");
        let c0_id = id(ObjectKind::Commit, &c0);
        let bad = commit(&t2_id, Some(&c0_id), "A <a@b 1 +0000");
        let pack = pack_of(
            &[
                Entry::Whole(3, file),
                Entry::Whole(2, &t2),
                Entry::Whole(1, &c0),
                Entry::Delta(c0_id, &bad),
            ],
            |_| c0.len(),
        );
        let bad_id = id(ObjectKind::Commit, &bad);
        let (used, [with, without]) = both(&pack, &[bad_id], &options);
        assert_eq!(used, None, "given up");
        assert!(matches!(&with, Err(CheckError::Fsck { .. })));
        assert_eq!(outcome(&with), outcome(&without));
    }
}
