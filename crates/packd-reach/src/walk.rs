//! The plain reachability walk: no bitmaps, just commits, trees and tags read from the object
//! database.
//!
//! It answers "what do these tips reach that those do not" the way `git rev-list` does:
//! - commits: exactly those reachable from the included tips and not from the excluded ones;
//! - trees and blobs (with `objects`): those reachable from the listed commits' trees, minus
//!   those reachable from the trees of the *edge* commits (excluded commits that are parents of
//!   listed ones) and from excluded trees or blobs named directly.
//!
//! The second rule is git's plain walk, and it is not a set difference: an object that only an
//! excluded commit deep in history reaches (a file reverted to an old version, say) is still
//! listed. With bitmaps git answers with the exact set difference instead; [`Query::exact`] asks
//! for that, so that packd's answer equals git's in both modes.

use packd_odb::parse::{parse_commit, tag_target, tree_entries, CommitInfo};
use packd_odb::{Error, IdMap, IdSet, ObjectId, ObjectKind, Repository, Result};
use std::collections::{BinaryHeap, HashSet};

/// What to walk.
#[derive(Debug, Clone, Default)]
pub struct Query {
    /// Tips whose reachable objects are wanted (commits, or tags and trees and blobs).
    pub include: Vec<ObjectId>,
    /// Tips whose reachable objects are not.
    pub exclude: Vec<ObjectId>,
    /// Whether trees, blobs and tags are wanted too, not only commits.
    pub objects: bool,
    /// Whether to leave out every object any excluded commit reaches (the exact set difference,
    /// git's answer when it uses bitmaps) rather than only what the edge commits' trees hold
    /// (git's answer from its plain walk).
    pub exact: bool,
}

/// One object of the answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reached {
    /// The object.
    pub id: ObjectId,
    /// Its kind.
    pub kind: ObjectKind,
    /// For trees and blobs, the path it was first reached by (the root tree's is empty); for a
    /// tag or a tip given by name, `None`.
    pub path: Option<Vec<u8>>,
}

fn bad(id: &ObjectId, what: &str) -> Error {
    Error::BadName(format!("object {id}: {what}"))
}

/// The state of [`Walker::limited_commits`].
#[derive(Default)]
struct LimitedWalk {
    /// Commits reached from an excluded tip (so far).
    uninteresting: IdSet,
    /// Commits read, with their links.
    read: IdMap<CommitInfo>,
    /// Commits ever queued.
    queued: IdSet,
    /// Commits in the queue now.
    in_heap: IdSet,
    heap: BinaryHeap<(i64, ObjectId)>,
    /// Commits in the queue now that are not excluded.
    interesting_queued: usize,
}

impl LimitedWalk {
    /// Queues `id` (reading it for its date) unless it was queued before.
    fn enqueue(&mut self, walker: &Walker, id: ObjectId) -> Result<()> {
        if !self.queued.insert(id) {
            return Ok(());
        }
        let commit = walker.commit(&id)?;
        self.heap.push((commit.time, id));
        self.read.insert(id, commit);
        self.in_heap.insert(id);
        if !self.uninteresting.contains(&id) {
            self.interesting_queued += 1;
        }
        Ok(())
    }

    /// Marks `parents` excluded, and everything below them that has been read.
    fn exclude_parents(&mut self, parents: &[ObjectId]) {
        let mut stack = parents.to_vec();
        while let Some(p) = stack.pop() {
            if !self.uninteresting.insert(p) {
                continue;
            }
            if self.in_heap.contains(&p) {
                self.interesting_queued -= 1;
            }
            if let Some(c) = self.read.get(&p) {
                stack.extend(c.parents.iter().copied());
            }
        }
    }
}

/// Walks the object database of one repository.
pub struct Walker<'a> {
    repo: &'a Repository,
}

impl<'a> Walker<'a> {
    /// A walker over `repo`.
    pub fn new(repo: &'a Repository) -> Self {
        Walker { repo }
    }

    /// The object `id`, which must exist.
    pub(crate) fn read(&self, id: &ObjectId) -> Result<packd_odb::Object> {
        self.repo
            .objects()
            .read(id)?
            .ok_or_else(|| bad(id, "is missing (the repository is not connected)"))
    }

    /// The commit `id`'s links and date (from the commit-graph when it has the commit).
    pub fn commit(&self, id: &ObjectId) -> Result<CommitInfo> {
        if let Some(graph) = self.repo.commit_graph() {
            if let Some(pos) = graph.lookup(id) {
                return graph.commit(pos);
            }
        }
        let object = self.read(id)?;
        if object.kind != ObjectKind::Commit {
            return Err(bad(
                id,
                &format!("is a {}, not a commit", object.kind.name()),
            ));
        }
        parse_commit(id, &object.data)
    }

    /// Follows tags from `id`, recording each tag object in `tags`; returns the first non-tag and
    /// its kind.
    pub fn peel(
        &self,
        mut id: ObjectId,
        tags: &mut Vec<ObjectId>,
    ) -> Result<(ObjectId, ObjectKind)> {
        for _ in 0..64 {
            // The type alone (an entry header) tells a tag from the rest; only tags are read.
            let objects = self.repo.objects();
            let location = objects
                .locate(&id)?
                .ok_or_else(|| bad(&id, "is missing (the repository is not connected)"))?;
            let kind = objects.header_at(&id, &location)?.kind;
            if kind != ObjectKind::Tag {
                return Ok((id, kind));
            }
            let object = objects.read_at(&id, &location)?;
            tags.push(id);
            id = tag_target(&id, &object.data)?;
        }
        Err(bad(&id, "tags nest too deep"))
    }

    /// Marks `tree` and everything below it in `seen`, appending newly seen objects to `out`
    /// when given.
    fn walk_tree(
        &self,
        tree: ObjectId,
        path: Vec<u8>,
        seen: &mut IdSet,
        mut out: Option<&mut Vec<Reached>>,
    ) -> Result<()> {
        if !seen.insert(tree) {
            return Ok(());
        }
        if let Some(out) = out.as_deref_mut() {
            out.push(Reached {
                id: tree,
                kind: ObjectKind::Tree,
                path: Some(path.clone()),
            });
        }
        let mut stack = vec![(tree, path)];
        while let Some((id, path)) = stack.pop() {
            let object = self.read(&id)?;
            if object.kind != ObjectKind::Tree {
                return Err(bad(
                    &id,
                    &format!("is a {}, not a tree", object.kind.name()),
                ));
            }
            let mut subtrees = Vec::new();
            for entry in tree_entries(&id, &object.data) {
                let (mode, name, entry) = entry?;
                if mode & 0o170000 == 0o160000 || !seen.insert(entry) {
                    continue; // a submodule's commit lives in another repository
                }
                let mut child = path.clone();
                if !child.is_empty() {
                    child.push(b'/');
                }
                child.extend_from_slice(name);
                let kind = if mode & 0o170000 == 0o040000 {
                    ObjectKind::Tree
                } else {
                    ObjectKind::Blob
                };
                if let Some(out) = out.as_deref_mut() {
                    out.push(Reached {
                        id: entry,
                        kind,
                        path: Some(child.clone()),
                    });
                }
                if kind == ObjectKind::Tree {
                    subtrees.push((entry, child));
                }
            }
            // Depth-first in tree order, as git lists them.
            stack.extend(subtrees.into_iter().rev());
        }
        Ok(())
    }

    /// The commits reachable from `include` and not from `exclude`, newest first, and the
    /// excluded commits met on the way (the edges are among them).
    ///
    /// This is git's limited walk: one queue of both sides by commit date; an excluded commit
    /// passes its exclusion to its parents (and theirs, where already read); the walk stops
    /// once every queued commit is excluded and a few more steps (git's "slop", against clock
    /// skew) found nothing newer. It reads the commits down to where the two sides meet, not
    /// the excluded side's whole history.
    fn limited_commits(
        &self,
        include: &[ObjectId],
        exclude: &[ObjectId],
    ) -> Result<(Vec<ObjectId>, IdSet, IdMap<CommitInfo>)> {
        Ok(self
            .limited_commits_within(include, exclude, usize::MAX)?
            .expect("no limit"))
    }

    /// Whether the limited walk of [`Walker::reachable`]'s commits (`include` not reachable
    /// from `exclude`, commits only) reads at most `limit` commits: a cheap test that a fetch's
    /// wants lie close to its haves, stopped as soon as the walk reads more.
    pub fn commits_close(
        &self,
        include: &[ObjectId],
        exclude: &[ObjectId],
        limit: usize,
    ) -> Result<bool> {
        Ok(self
            .limited_commits_within(include, exclude, limit)?
            .is_some())
    }

    /// [`Walker::limited_commits`], given up (`None`) once it has read more than `limit`
    /// commits.
    #[allow(clippy::type_complexity)]
    fn limited_commits_within(
        &self,
        include: &[ObjectId],
        exclude: &[ObjectId],
        limit: usize,
    ) -> Result<Option<(Vec<ObjectId>, IdSet, IdMap<CommitInfo>)>> {
        /// Steps past the point where only excluded commits remain, as git takes.
        const SLOP: u32 = 5;
        let mut walk = LimitedWalk::default();
        for id in exclude {
            walk.uninteresting.insert(*id);
        }
        for id in exclude.iter().chain(include) {
            walk.enqueue(self, *id)?;
        }
        let mut result = Vec::new();
        let mut slop = SLOP;
        while let Some((time, id)) = walk.heap.pop() {
            if walk.read.len() > limit {
                return Ok(None);
            }
            walk.in_heap.remove(&id);
            let parents = walk.read[&id].parents.clone();
            if !walk.uninteresting.contains(&id) {
                walk.interesting_queued -= 1;
                result.push(id);
                for p in parents {
                    walk.enqueue(self, p)?;
                }
                continue;
            }
            walk.exclude_parents(&parents);
            for p in parents {
                walk.enqueue(self, p)?;
            }
            // git's still_interesting: go on while an interesting commit is queued or the queue
            // holds commits at least as new as this one; else spend the slop.
            match walk.heap.peek() {
                None => break,
                Some(&(newest, _)) if walk.interesting_queued > 0 || newest >= time => slop = SLOP,
                Some(_) => {
                    slop -= 1;
                    if slop == 0 {
                        break;
                    }
                }
            }
        }
        // A commit listed before its exclusion reached it is not in the answer.
        result.retain(|id| !walk.uninteresting.contains(id));
        Ok(Some((result, walk.uninteresting, walk.read)))
    }

    /// The objects reachable from `query.include` and not from `query.exclude`: commits newest
    /// first, then (with `objects`) tags, trees and blobs in walk order.
    pub fn reachable(&self, query: &Query) -> Result<Vec<Reached>> {
        if query.exact {
            return self.reachable_exact(query);
        }
        let mut seen_objects = IdSet::default();
        let mut exclude_commits = Vec::new();
        for tip in &query.exclude {
            let mut tags = Vec::new();
            let (id, kind) = self.peel(*tip, &mut tags)?;
            seen_objects.extend(tags);
            match kind {
                ObjectKind::Commit => exclude_commits.push(id),
                ObjectKind::Tree if query.objects => {
                    self.walk_tree(id, Vec::new(), &mut seen_objects, None)?
                }
                _ => {
                    seen_objects.insert(id);
                }
            }
        }
        let mut others = Vec::new();
        let mut include_commits = Vec::new();
        for tip in &query.include {
            let mut tags = Vec::new();
            let (id, kind) = self.peel(*tip, &mut tags)?;
            if query.objects {
                for tag in tags {
                    if seen_objects.insert(tag) {
                        others.push(Reached {
                            id: tag,
                            kind: ObjectKind::Tag,
                            path: None,
                        });
                    }
                }
            }
            match kind {
                ObjectKind::Commit => include_commits.push(id),
                ObjectKind::Tree if query.objects => {
                    self.walk_tree(id, Vec::new(), &mut seen_objects, Some(&mut others))?
                }
                kind if query.objects && seen_objects.insert(id) => others.push(Reached {
                    id,
                    kind,
                    path: None,
                }),
                _ => {}
            }
        }
        let (listed, excluded, read) = self.limited_commits(&include_commits, &exclude_commits)?;
        let mut commits = Vec::with_capacity(listed.len());
        let mut trees = Vec::with_capacity(listed.len());
        let mut edges = Vec::new();
        for id in listed {
            let commit = &read[&id];
            commits.push(Reached {
                id,
                kind: ObjectKind::Commit,
                path: None,
            });
            trees.push(commit.tree);
            edges.extend(
                commit
                    .parents
                    .iter()
                    .filter(|p| excluded.contains(p))
                    .copied(),
            );
        }
        if query.objects {
            // What the edge commits' trees hold is not listed.
            edges.sort_unstable();
            edges.dedup();
            for edge in edges {
                let tree = match read.get(&edge) {
                    Some(c) => c.tree,
                    None => self.commit(&edge)?.tree,
                };
                self.walk_tree(tree, Vec::new(), &mut seen_objects, None)?;
            }
            for tree in trees {
                self.walk_tree(tree, Vec::new(), &mut seen_objects, Some(&mut others))?;
            }
        }
        commits.extend(others);
        Ok(commits)
    }

    /// [`Walker::reachable`] for an exact query: everything the excluded side reaches is left
    /// out, so its whole history is walked.
    fn reachable_exact(&self, query: &Query) -> Result<Vec<Reached>> {
        // 1. The commits the excluded tips reach; excluded trees and blobs named directly.
        let mut seen_commits: HashSet<ObjectId> = HashSet::new();
        let mut seen_objects = IdSet::default();
        let mut stack = Vec::new();
        for tip in &query.exclude {
            let mut tags = Vec::new();
            let (id, kind) = self.peel(*tip, &mut tags)?;
            seen_objects.extend(tags);
            match kind {
                ObjectKind::Commit => stack.push(id),
                ObjectKind::Tree if query.objects => {
                    self.walk_tree(id, Vec::new(), &mut seen_objects, None)?
                }
                _ => {
                    seen_objects.insert(id);
                }
            }
        }
        while let Some(id) = stack.pop() {
            if !seen_commits.insert(id) {
                continue;
            }
            let commit = self.commit(&id)?;
            if query.objects && query.exact {
                self.walk_tree(commit.tree, Vec::new(), &mut seen_objects, None)?;
            }
            stack.extend(commit.parents.iter().filter(|p| !seen_commits.contains(p)));
        }
        // 2. The included tips, newest commit first.
        let mut commits = Vec::new();
        let mut others = Vec::new();
        let mut heap = BinaryHeap::new();
        let mut queued: HashSet<ObjectId> = HashSet::new();
        for tip in &query.include {
            let mut tags = Vec::new();
            let (id, kind) = self.peel(*tip, &mut tags)?;
            if query.objects {
                for tag in tags {
                    if seen_objects.insert(tag) {
                        others.push(Reached {
                            id: tag,
                            kind: ObjectKind::Tag,
                            path: None,
                        });
                    }
                }
            }
            match kind {
                ObjectKind::Commit if !seen_commits.contains(&id) && queued.insert(id) => {
                    let time = self.commit(&id)?.time;
                    heap.push((time, id));
                }
                ObjectKind::Commit => {}
                ObjectKind::Tree if query.objects => {
                    self.walk_tree(id, Vec::new(), &mut seen_objects, Some(&mut others))?
                }
                kind if query.objects && seen_objects.insert(id) => others.push(Reached {
                    id,
                    kind,
                    path: None,
                }),
                _ => {}
            }
        }
        let mut trees = Vec::new();
        let mut edges = Vec::new();
        while let Some((_, id)) = heap.pop() {
            let commit = self.commit(&id)?;
            commits.push(Reached {
                id,
                kind: ObjectKind::Commit,
                path: None,
            });
            trees.push(commit.tree);
            for parent in commit.parents {
                if seen_commits.contains(&parent) {
                    edges.push(parent);
                } else if queued.insert(parent) {
                    let time = self.commit(&parent)?.time;
                    heap.push((time, parent));
                }
            }
        }
        if query.objects {
            // 3. What the edge commits' trees hold is not listed.
            edges.sort_unstable();
            edges.dedup();
            for edge in edges {
                let tree = self.commit(&edge)?.tree;
                self.walk_tree(tree, Vec::new(), &mut seen_objects, None)?;
            }
            for tree in trees {
                self.walk_tree(tree, Vec::new(), &mut seen_objects, Some(&mut others))?;
            }
        }
        commits.extend(others);
        Ok(commits)
    }
}
