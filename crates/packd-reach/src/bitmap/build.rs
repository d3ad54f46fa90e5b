//! Computing reachability bitmaps over one pack or a multi-pack-index: the objects in both orders
//! with their kinds, their commit graph, and each selected commit's bitmap.
//!
//! A *bit position* is a position in pack order for one pack, in the pseudo-pack order for a
//! multi-pack-index (the preferred pack's objects first, then the other packs' by pack number,
//! each by offset, chosen copies only). An *index position* is one in the `.idx` or the
//! multi-pack-index (id order).
//!
//! ```text
//! PackObjects   bit position <-> index position, pack, kind and offset of every object
//! CommitGraph   every commit of the pack: pack position, root tree, parents, date, topo rank
//! Builder       selected commits in topological order (ancestors first), each one:
//!                 commits  newest rank first from the commit; a bitmapped ancestor is ORed in
//!                          and not walked; a commit whose bit is set is skipped
//!                 trees    each new root tree, depth first, skipping objects whose bit is set
//!               bitmaps kept EWAH-encoded; name hashes recorded as objects are first reached
//! ```
//!
//! Walking commits in decreasing topological rank means every descendant is handled before its
//! ancestors: by the time a commit is popped, every bitmapped commit above it on any path from the
//! tip has been ORed in, so history an ancestor's bitmap already covers is never walked again.
//! Trees are walked after all commits, with every ORed bit in place.
//!
//! An object the walk needs and the pack lacks makes that commit unbitmappable (its bitmap would
//! not be closed under reachability); so are all commits above it that reach it.

use crate::ewah::Bitmap;
use crate::ewah_encode::Encoded;
use packd_odb::cache::DeltaBaseCache;
use packd_odb::pack::data::EntryKind;
use packd_odb::pack::multi_index::write::MidxPlan;
use packd_odb::pack::Pack;
use packd_odb::parse::{parse_commit, tag_target, tree_entries};
use packd_odb::{IdMap, ObjectId, ObjectKind};
use std::collections::{BinaryHeap, HashMap};

/// "No such position": a missing parent or tree, a non-commit.
pub(crate) const NONE: u32 = u32::MAX;

/// The objects a bitmap numbers: one pack's, or a multi-pack-index's pseudo-pack.
#[derive(Clone, Copy)]
pub(crate) enum Numbering<'a> {
    /// One pack: bits in pack order, commit positions in the `.idx`.
    Pack(&'a Pack),
    /// A multi-pack-index to be: bits in its pseudo-pack order, commit positions in its id order.
    Midx {
        /// Its packs, by pack number.
        packs: &'a [&'a Pack],
        /// Its content.
        plan: &'a MidxPlan,
    },
}

/// The objects of a bitmap: both orders, and each entry's pack, offset and kind.
pub(crate) struct PackObjects<'a> {
    numbering: Numbering<'a>,
    cache: &'a DeltaBaseCache,
    /// Id-order position of the object at each bit position (for one pack, the `.rev` content).
    pub(crate) index_of: Vec<u32>,
    /// Pack number of the object at each bit position (empty for one pack).
    pack_of: Vec<u32>,
    /// Offset of the entry at each bit position.
    offsets: Vec<u64>,
    /// Kind of the object at each bit position (a delta's is its chain's base's).
    pub(crate) kinds: Vec<ObjectKind>,
    /// Bit position by id: tree walks look up every entry of every tree they read (63 million
    /// lookups on git.git), and a hash lookup costs a fraction of a search in the index.
    by_id: IdMap<u32>,
}

/// Every entry of one pack in pack order: index positions, offsets, kinds.
struct PackScan {
    index_of: Vec<u32>,
    offsets: Vec<u64>,
    kinds: Vec<ObjectKind>,
}

/// Reads every entry header of `pack` (no object is inflated) and orders the entries.
fn scan_pack(pack: &Pack, progress: &dyn Fn(u64)) -> Result<PackScan, packd_odb::Error> {
    let n = pack.len() as usize;
    let index_of = pack.positions_in_pack_order()?.to_vec();
    if index_of.len() != n {
        return Err(packd_odb::Error::corrupt(
            pack.index().name(),
            0,
            format!(
                "{} of its {n} entries share an offset or lie outside {}",
                n - index_of.len(),
                pack.data_name()
            ),
        ));
    }
    let mut pack_of = vec![0u32; n];
    for (p, &i) in index_of.iter().enumerate() {
        pack_of[i as usize] = p as u32;
    }
    let offsets = index_of
        .iter()
        .map(|&i| pack.index().offset(i))
        .collect::<Result<Vec<u64>, _>>()?;
    // Deltas take their base's kind. Ofs-delta bases come earlier in the pack, so one pass
    // in pack order settles nearly all; the rest (ref-deltas to later entries) follow their
    // chains afterwards.
    let mut kinds: Vec<Option<ObjectKind>> = vec![None; n];
    let mut bases: Vec<(u32, u32)> = Vec::new();
    for p in 0..n {
        if p % 65536 == 0 {
            progress(p as u64);
        }
        let offset = offsets[p];
        let header = pack.entry_header(offset)?;
        let base = match header.kind {
            EntryKind::Base(kind) => {
                kinds[p] = Some(kind);
                continue;
            }
            EntryKind::OfsDelta { base_offset } => {
                offsets.binary_search(&base_offset).map_err(|_| {
                    packd_odb::Error::corrupt(
                        pack.data_name(),
                        offset,
                        format!("the delta's base offset {base_offset} starts no entry"),
                    )
                })?
            }
            EntryKind::RefDelta { base } => match pack.index().find(&base) {
                Some(i) => pack_of[i as usize] as usize,
                None => {
                    return Err(packd_odb::Error::corrupt(
                        pack.data_name(),
                        offset,
                        format!("the delta's base {base} is not in this pack"),
                    ))
                }
            },
        };
        match kinds[base] {
            Some(kind) => kinds[p] = Some(kind),
            None => bases.push((p as u32, base as u32)),
        }
    }
    let base_of: HashMap<u32, u32> = bases.iter().copied().collect();
    for &(p, _) in &bases {
        let mut cur = p;
        let mut steps = 0usize;
        let kind = loop {
            if let Some(k) = kinds[cur as usize] {
                break k;
            }
            steps += 1;
            match base_of.get(&cur) {
                Some(&b) if steps <= bases.len() + 1 => cur = b,
                _ => {
                    return Err(packd_odb::Error::corrupt(
                        pack.data_name(),
                        offsets[p as usize],
                        "the delta chain is a cycle",
                    ))
                }
            }
        };
        kinds[p as usize] = Some(kind);
    }
    let kinds = kinds
        .into_iter()
        .map(|k| k.expect("every entry's kind was settled"))
        .collect();
    progress(n as u64);
    Ok(PackScan {
        index_of,
        offsets,
        kinds,
    })
}

impl<'a> PackObjects<'a> {
    /// Reads every entry header of `pack` (no object is inflated) and orders the entries.
    pub(crate) fn scan(
        pack: &'a Pack,
        cache: &'a DeltaBaseCache,
        progress: &dyn Fn(u64),
    ) -> Result<PackObjects<'a>, packd_odb::Error> {
        let PackScan {
            index_of,
            offsets,
            kinds,
        } = scan_pack(pack, progress)?;
        let mut by_id = IdMap::with_capacity_and_hasher(index_of.len(), Default::default());
        for (p, &i) in index_of.iter().enumerate() {
            by_id.insert(pack.index().id(i), p as u32);
        }
        Ok(PackObjects {
            numbering: Numbering::Pack(pack),
            cache,
            index_of,
            pack_of: Vec::new(),
            offsets,
            kinds,
            by_id,
        })
    }

    /// Reads every entry header of the packs of a multi-pack-index to be and numbers the
    /// copies `plan` chose in its pseudo-pack order.
    pub(crate) fn scan_midx(
        packs: &'a [&'a Pack],
        plan: &'a MidxPlan,
        cache: &'a DeltaBaseCache,
        progress: &dyn Fn(u64),
    ) -> Result<PackObjects<'a>, packd_odb::Error> {
        if packs.len() != plan.pack_names().len() {
            return Err(packd_odb::Error::BadName(format!(
                "{} packs given for a multi-pack-index over {}",
                packs.len(),
                plan.pack_names().len()
            )));
        }
        // Kinds by pack, by offset (a chosen copy's delta base may be a copy left out).
        let mut done = 0u64;
        let mut scans = Vec::with_capacity(packs.len());
        for pack in packs {
            let scan = scan_pack(pack, &|d| progress(done + d))?;
            done += pack.len() as u64;
            scans.push((scan.offsets, scan.kinds));
        }
        let n = plan.len() as usize;
        let mut index_of = Vec::with_capacity(n);
        let mut pack_of = Vec::with_capacity(n);
        let mut offsets = Vec::with_capacity(n);
        let mut kinds = Vec::with_capacity(n);
        let mut by_id = IdMap::with_capacity_and_hasher(n, Default::default());
        for (bit, &i) in plan.pseudo_order().iter().enumerate() {
            let (k, offset) = plan.location(i);
            let (pack_offsets, pack_kinds) = &scans[k as usize];
            let at = pack_offsets.binary_search(&offset).map_err(|_| {
                packd_odb::Error::corrupt(
                    packs[k as usize].data_name(),
                    offset,
                    format!("object {} is said to start here; no entry does", plan.id(i)),
                )
            })?;
            index_of.push(i);
            pack_of.push(k);
            offsets.push(offset);
            kinds.push(pack_kinds[at]);
            by_id.insert(plan.id(i), bit as u32);
        }
        Ok(PackObjects {
            numbering: Numbering::Midx { packs, plan },
            cache,
            index_of,
            pack_of,
            offsets,
            kinds,
            by_id,
        })
    }

    /// The number of objects.
    pub(crate) fn len(&self) -> usize {
        self.index_of.len()
    }

    /// The pack position of `id`, if the pack has it.
    pub(crate) fn find(&self, id: &ObjectId) -> Option<u32> {
        self.by_id.get(id).copied()
    }

    /// The id of the object at bit position `p`.
    pub(crate) fn id(&self, p: u32) -> ObjectId {
        let i = self.index_of[p as usize];
        match self.numbering {
            Numbering::Pack(pack) => pack.index().id(i),
            Numbering::Midx { plan, .. } => plan.id(i),
        }
    }

    /// The pack holding the object at bit position `p`.
    fn pack_at(&self, p: u32) -> &'a Pack {
        match self.numbering {
            Numbering::Pack(pack) => pack,
            Numbering::Midx { packs, .. } => packs[self.pack_of[p as usize] as usize],
        }
    }

    /// The content of the object at bit position `p`.
    fn read(&self, p: u32) -> Result<bytes::Bytes, packd_odb::Error> {
        Ok(self
            .pack_at(p)
            .decode(self.offsets[p as usize], self.cache)?
            .1)
    }

    /// The type bitmaps (commit, tree, blob, tag), bits in pack order.
    pub(crate) fn type_bitmaps(&self) -> [Bitmap; 4] {
        let mut out: [Bitmap; 4] = Default::default();
        for (p, kind) in self.kinds.iter().enumerate() {
            let t = match kind {
                ObjectKind::Commit => 0,
                ObjectKind::Tree => 1,
                ObjectKind::Blob => 2,
                ObjectKind::Tag => 3,
            };
            out[t].set(p as u64);
        }
        out
    }

    /// Follows tags from the object at pack position `p` to the first non-tag: its position, or
    /// `None` when a tag points outside the pack (or tags nest absurdly deep).
    pub(crate) fn peel(&self, mut p: u32) -> Result<Option<u32>, packd_odb::Error> {
        for _ in 0..64 {
            if self.kinds[p as usize] != ObjectKind::Tag {
                return Ok(Some(p));
            }
            let id = self.id(p);
            let target = tag_target(&id, &self.read(p)?)?;
            match self.find(&target) {
                Some(t) => p = t,
                None => return Ok(None),
            }
        }
        Ok(None)
    }
}

/// Every commit of a pack, numbered densely: links, dates and a topological rank.
pub(crate) struct CommitGraph {
    /// Pack position of each commit.
    pos: Vec<u32>,
    /// Commit number of each pack position ([`NONE`] for other objects).
    number: Vec<u32>,
    /// Pack position of each commit's root tree ([`NONE`] when the pack lacks it).
    tree: Vec<u32>,
    /// Each commit's parents are `parents[parent_start[c]..parent_start[c + 1]]`, as commit
    /// numbers ([`NONE`] for a parent the pack lacks).
    parent_start: Vec<u32>,
    parents: Vec<u32>,
    /// Committer time.
    date: Vec<i64>,
    /// Topological rank: every parent ranks below its children.
    rank: Vec<u32>,
    /// The first object each commit names that the pack lacks (parent or tree).
    missing: HashMap<u32, ObjectId>,
}

impl CommitGraph {
    /// Reads and parses every commit of the pack.
    pub(crate) fn load(
        objects: &PackObjects<'_>,
        progress: &dyn Fn(u64),
    ) -> Result<CommitGraph, packd_odb::Error> {
        let n = objects.len();
        let mut pos = Vec::new();
        let mut number = vec![NONE; n];
        for (p, kind) in objects.kinds.iter().enumerate() {
            if *kind == ObjectKind::Commit {
                number[p] = pos.len() as u32;
                pos.push(p as u32);
            }
        }
        let count = pos.len();
        let mut g = CommitGraph {
            tree: Vec::with_capacity(count),
            parent_start: Vec::with_capacity(count + 1),
            parents: Vec::with_capacity(count + count / 8),
            date: Vec::with_capacity(count),
            rank: Vec::new(),
            missing: HashMap::new(),
            pos,
            number,
        };
        g.parent_start.push(0);
        for c in 0..count {
            if c % 4096 == 0 {
                progress(c as u64);
            }
            let p = g.pos[c];
            let id = objects.id(p);
            let info = parse_commit(&id, &objects.read(p)?)?;
            let tree = match objects.find(&info.tree) {
                Some(t) if objects.kinds[t as usize] == ObjectKind::Tree => t,
                Some(_) => {
                    return Err(packd_odb::Error::BadName(format!(
                        "object {id}: its tree {} is not a tree",
                        info.tree
                    )))
                }
                None => {
                    g.missing.entry(c as u32).or_insert(info.tree);
                    NONE
                }
            };
            g.tree.push(tree);
            for parent in &info.parents {
                let number = match objects.find(parent) {
                    Some(pp) if g.number[pp as usize] != NONE => g.number[pp as usize],
                    Some(_) => {
                        return Err(packd_odb::Error::BadName(format!(
                            "object {id}: its parent {parent} is not a commit"
                        )))
                    }
                    None => {
                        g.missing.entry(c as u32).or_insert(*parent);
                        NONE
                    }
                };
                g.parents.push(number);
            }
            g.parent_start.push(g.parents.len() as u32);
            g.date.push(info.time);
        }
        g.rank = g.topological_ranks();
        progress(count as u64);
        Ok(g)
    }

    /// Ranks by a depth-first post-order over parents: each commit after all its parents.
    fn topological_ranks(&self) -> Vec<u32> {
        let count = self.pos.len();
        let mut rank = vec![NONE; count];
        let mut next = 0u32;
        let mut stack: Vec<(u32, u32)> = Vec::new();
        // Roots of the search in pack order: git writes the newest commits first.
        for start in 0..count as u32 {
            if rank[start as usize] != NONE {
                continue;
            }
            // NONE - 1 marks "on the stack".
            rank[start as usize] = NONE - 1;
            stack.push((start, 0));
            while let Some(&mut (c, ref mut i)) = stack.last_mut() {
                let parents = self.parents(c);
                if let Some(&p) = parents.get(*i as usize) {
                    *i += 1;
                    // A parent already on the stack would be a cycle (impossible with real
                    // hashes); skipping it keeps the loop finite.
                    if p != NONE && rank[p as usize] == NONE {
                        rank[p as usize] = NONE - 1;
                        stack.push((p, 0));
                    }
                } else {
                    rank[c as usize] = next;
                    next += 1;
                    stack.pop();
                }
            }
        }
        rank
    }

    /// The number of commits.
    pub(crate) fn len(&self) -> usize {
        self.pos.len()
    }

    /// The commit number of the commit at pack position `p`, if it is one.
    pub(crate) fn number_at(&self, p: u32) -> Option<u32> {
        self.number.get(p as usize).copied().filter(|&c| c != NONE)
    }

    /// The pack position of commit `c`.
    pub(crate) fn pack_pos(&self, c: u32) -> u32 {
        self.pos[c as usize]
    }

    /// The parents of commit `c` ([`NONE`] for those the pack lacks).
    pub(crate) fn parents(&self, c: u32) -> &[u32] {
        let (a, b) = (
            self.parent_start[c as usize] as usize,
            self.parent_start[c as usize + 1] as usize,
        );
        &self.parents[a..b]
    }

    /// The committer time of commit `c`.
    pub(crate) fn date(&self, c: u32) -> i64 {
        self.date[c as usize]
    }

    /// The topological rank of commit `c` (parents rank lower).
    pub(crate) fn rank(&self, c: u32) -> u32 {
        self.rank[c as usize]
    }
}

/// `pack_name_hash` as git computes it (pack-objects.h): each byte of the path except ASCII
/// whitespace (tab, newline, carriage return, space) shifts the hash right by two and adds
/// itself in the top byte, so the last sixteen characters count and the last count most.
pub fn name_hash(path: &[u8]) -> u32 {
    hash_more(0, path)
}

fn hash_more(mut hash: u32, bytes: &[u8]) -> u32 {
    for &c in bytes {
        if matches!(c, b'\t' | b'\n' | b'\r' | b' ') {
            continue;
        }
        hash = (hash >> 2).wrapping_add((c as u32) << 24);
    }
    hash
}

/// The name a tag records: its `tag <name>` header line, if it has one.
fn tag_name(data: &[u8]) -> Option<&[u8]> {
    data.split(|&b| b == b'\n')
        .take_while(|line| !line.is_empty())
        .find_map(|line| line.strip_prefix(b"tag "))
}

/// Why a commit gets no bitmap.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unbitmappable {
    /// An object it reaches that the pack lacks.
    pub missing: ObjectId,
}

/// Builds the bitmaps of selected commits, ancestors first.
pub(crate) struct Builder<'a, 'p> {
    objects: &'a PackObjects<'p>,
    graph: &'a CommitGraph,
    /// The outcome for each commit built so far.
    built: HashMap<u32, Result<Encoded, Unbitmappable>>,
    /// Name hash of each object, by index position.
    pub(crate) name_hashes: Vec<u32>,
    /// Objects (pack positions) whose name hash is recorded.
    named: Bitmap,
    /// Per commit: the build that last queued it.
    queued: Vec<u32>,
    generation: u32,
    /// Bytes of encoded bitmaps held.
    held: usize,
    /// Trees read and tree entries looked at, for the debug log.
    pub(crate) trees_read: u64,
    pub(crate) entries_seen: u64,
}

impl<'a, 'p> Builder<'a, 'p> {
    pub(crate) fn new(objects: &'a PackObjects<'p>, graph: &'a CommitGraph) -> Self {
        Builder {
            objects,
            graph,
            built: HashMap::new(),
            name_hashes: vec![0; objects.len()],
            named: Bitmap::from_words(vec![0; objects.len().div_ceil(64)]),
            queued: vec![0; graph.len()],
            generation: 0,
            held: 0,
            trees_read: 0,
            entries_seen: 0,
        }
    }

    /// Takes `bitmaps` (by the bit position of their commit; from an earlier file, see
    /// `super::reuse`) as built, so that walks stop at those commits and OR them in, and
    /// `hashes` (by bit position, 0 for none) as the name hashes of objects no walk names.
    /// Returns the commits (numbers) whose bitmap was taken.
    pub(crate) fn seed(
        &mut self,
        bitmaps: HashMap<u32, Encoded>,
        hashes: &[u32],
    ) -> std::collections::HashSet<u32> {
        for (p, &h) in hashes.iter().enumerate() {
            if h != 0 {
                self.name_hashes[self.objects.index_of[p] as usize] = h;
            }
        }
        let mut taken = std::collections::HashSet::new();
        for (p, bits) in bitmaps {
            if let Some(c) = self.graph.number_at(p) {
                self.held += bits.heap_bytes();
                self.built.insert(c, Ok(bits));
                taken.insert(c);
            }
        }
        taken
    }

    /// Bytes of encoded bitmaps held so far.
    pub(crate) fn held_bytes(&self) -> usize {
        self.held
    }

    /// The bitmap built for commit `c`, if it could be.
    pub(crate) fn take(&mut self, c: u32) -> Option<Result<Encoded, Unbitmappable>> {
        self.built.remove(&c)
    }

    /// Builds the bitmap of commit `c`, using the bitmaps of ancestors built before. Callers go
    /// in topological order (ancestors first) for the reuse to happen; any order is correct.
    pub(crate) fn build(&mut self, c: u32) -> Result<(), packd_odb::Error> {
        let outcome = self.walk(c, None)?.map(|b| Encoded::encode(&b));
        if let Ok(e) = &outcome {
            self.held += e.heap_bytes();
        }
        self.built.insert(c, outcome);
        Ok(())
    }

    /// Records name hashes for what `tips` reach beyond `covered` (the union of the bitmaps
    /// built), so that objects only unbitmapped refs reach get one too. Objects the pack lacks
    /// are passed over.
    pub(crate) fn name_rest(
        &mut self,
        tips: &[u32],
        covered: Bitmap,
        progress: &dyn Fn(u64),
    ) -> Result<(), packd_odb::Error> {
        let mut seen = covered;
        for (k, &t) in tips.iter().enumerate() {
            if k % 64 == 0 {
                progress(k as u64);
            }
            // Missing objects only end this tip's naming walk early.
            let _ = self.walk(t, Some(&mut seen))?;
        }
        Ok(())
    }

    /// Names every tag object by the name it records (its `tag` header), as git's traversal
    /// names a tag it peels.
    pub(crate) fn name_tags(&mut self) -> Result<(), packd_odb::Error> {
        let objects = self.objects;
        for (p, kind) in objects.kinds.iter().enumerate() {
            if *kind == ObjectKind::Tag {
                let data = objects.read(p as u32)?;
                if let Some(name) = tag_name(&data) {
                    self.name_hashes[objects.index_of[p] as usize] = name_hash(name);
                }
            }
        }
        Ok(())
    }

    /// Walks from commit `tip`: into a fresh bitmap (ORing built ancestors), or, with `into`,
    /// into that one without using built bitmaps (for naming).
    fn walk(
        &mut self,
        tip: u32,
        into: Option<&mut Bitmap>,
    ) -> Result<Result<Bitmap, Unbitmappable>, packd_odb::Error> {
        let g = self.graph;
        let naming = into.is_some();
        let mut fresh = Bitmap::new();
        let result: &mut Bitmap = match into {
            Some(b) => b,
            None => {
                fresh = Bitmap::from_words(vec![0; self.objects.len().div_ceil(64)]);
                &mut fresh
            }
        };
        self.generation += 1;
        let generation = self.generation;
        let mut heap = BinaryHeap::new();
        heap.push((g.rank(tip), tip));
        self.queued[tip as usize] = generation;
        let mut trees = Vec::new();
        while let Some((_, c)) = heap.pop() {
            let p = g.pack_pos(c);
            if result.get(p as u64) {
                continue;
            }
            if c != tip && !naming {
                if let Some(done) = self.built.get(&c) {
                    match done {
                        Ok(bits) => bits.or_into(result),
                        Err(why) => return Ok(Err(why.clone())),
                    }
                    continue;
                }
            }
            result.set(p as u64);
            if let Some(missing) = g.missing.get(&c) {
                return Ok(Err(Unbitmappable { missing: *missing }));
            }
            trees.push(g.tree[c as usize]);
            for &parent in g.parents(c) {
                if !result.get(g.pack_pos(parent) as u64)
                    && self.queued[parent as usize] != generation
                {
                    self.queued[parent as usize] = generation;
                    heap.push((g.rank(parent), parent));
                }
            }
        }
        for tree in trees {
            if let Err(why) = self.walk_tree(tree, result)? {
                return Ok(Err(why));
            }
        }
        Ok(Ok(fresh))
    }

    /// Sets the bits of `root` and everything below it not yet set in `result`, naming objects
    /// reached for the first time.
    fn walk_tree(
        &mut self,
        root: u32,
        result: &mut Bitmap,
    ) -> Result<Result<(), Unbitmappable>, packd_odb::Error> {
        let objects = self.objects;
        if result.get(root as u64) {
            return Ok(Ok(()));
        }
        result.set(root as u64);
        // The root tree's path is empty: its name hash is 0, and its entries' paths have no
        // leading slash. Below, (tree, hash of its path) where None stands for the root.
        self.name(root, 0);
        let mut stack: Vec<(u32, Option<u32>)> = vec![(root, None)];
        while let Some((tree, path_hash)) = stack.pop() {
            let id = objects.id(tree);
            let data = objects.read(tree)?;
            self.trees_read += 1;
            for entry in tree_entries(&id, &data) {
                self.entries_seen += 1;
                let (mode, name, entry) = entry?;
                if mode & 0o170000 == 0o160000 {
                    continue; // a submodule's commit lives in another repository
                }
                let Some(p) = objects.find(&entry) else {
                    return Ok(Err(Unbitmappable { missing: entry }));
                };
                if result.get(p as u64) {
                    continue;
                }
                result.set(p as u64);
                let hash = match path_hash {
                    None => hash_more(0, name),
                    Some(h) => hash_more(hash_more(h, b"/"), name),
                };
                self.name(p, hash);
                let is_dir = mode & 0o170000 == 0o040000;
                let kind = objects.kinds[p as usize];
                match (is_dir, kind) {
                    (true, ObjectKind::Tree) => stack.push((p, Some(hash))),
                    (false, ObjectKind::Blob) => {}
                    _ => {
                        return Err(packd_odb::Error::BadName(format!(
                            "object {id}: the tree lists {entry} ({}) with mode {mode:o}, but it is a {}",
                            String::from_utf8_lossy(name),
                            kind.name()
                        )))
                    }
                }
            }
        }
        Ok(Ok(()))
    }

    fn name(&mut self, p: u32, hash: u32) {
        if !self.named.get(p as u64) {
            self.named.set(p as u64);
            self.name_hashes[self.objects.index_of[p as usize] as usize] = hash;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn name_hash_is_gits() {
        assert_eq!(name_hash(b""), 0);
        // (0 >> 2) + ('a' << 24)
        assert_eq!(name_hash(b"a"), 0x6100_0000);
        // ((0x61000000 >> 2) + ('b' << 24))
        assert_eq!(name_hash(b"ab"), 0x1840_0000 + 0x6200_0000);
        assert_eq!(name_hash(b"a b\t\n\r"), name_hash(b"ab"));
        // Vertical tab and form feed are not whitespace to git's ctype.
        assert_ne!(name_hash(b"a\x0bb"), name_hash(b"ab"));
        // High bytes wrap as git's unsigned arithmetic does.
        let h = name_hash(b"\xff\xff\xff\xff\xff");
        let mut want: u32 = 0;
        for _ in 0..5 {
            want = (want >> 2).wrapping_add(0xff << 24);
        }
        assert_eq!(h, want);
        // Hashing a path in pieces equals hashing it whole.
        assert_eq!(
            hash_more(hash_more(name_hash(b"src"), b"/"), b"main.c"),
            name_hash(b"src/main.c")
        );
    }

    #[test]
    fn tag_names() {
        let tag = b"object 4b825dc642cb6eb9a060e54bf8d69288fbee4904\ntype tree\ntag v1.0\ntagger T <t@t> 1 +0000\n\ntag not this\n";
        assert_eq!(tag_name(tag), Some(&b"v1.0"[..]));
        assert_eq!(tag_name(b"object x\ntype blob\n\ntag body\n"), None);
    }
}
