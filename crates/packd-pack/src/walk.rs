//! Counting by walking commits and trees: shallow fetches (where the client's history is cut
//! and bitmaps, which describe whole histories, do not apply), filtered fetches that bitmaps
//! cannot answer, and repositories without bitmaps.
//!
//! ```text
//! had      commits the client has: from its haves down, stopping at its shallow commits
//! cut      for deepen requests: the commits within the requested depth / date / exclusion,
//!          and the boundary (commits kept whose parents are cut off)
//! send     commits from the wants down, stopping at had commits, at the cut, and at the
//!          commits the client will have as shallow (past which it sees no parents)
//! objects  send's commits, then their trees and blobs (filtered), minus what the root trees
//!          of the client's haves hold
//! bases    for a thin pack, the client's version of each changed path (its haves' trees by
//!          path): the delta base of an object with no usable delta on disk
//! ```

use crate::{Deepen, FetchRequest, Filter, PackError, ShallowUpdate};
use packd_odb::parse::tree_entries;
use packd_odb::{IdMap, IdSet, ObjectId, ObjectKind, Repository};
use packd_reach::walk::{Query, Walker};
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};

/// Checks for cancellation every this many steps of a walk.
const CANCEL_EVERY: usize = 4096;

fn cancelled(cancel: &AtomicBool) -> Result<(), PackError> {
    if cancel.load(Ordering::Relaxed) {
        Err(PackError::Cancelled)
    } else {
        Ok(())
    }
}

/// The wants peeled to commits, and the tags and non-commit objects met on the way (sent as
/// they are: a want of a tag sends the tag, a want of a tree or blob sends it).
pub(crate) struct Peeled {
    /// Commits wanted.
    pub commits: Vec<ObjectId>,
    /// Tags, trees and blobs wanted directly (or through tags), with their kinds.
    pub others: Vec<(ObjectId, ObjectKind)>,
}

/// Peels `ids` through tags.
pub(crate) fn peel(walker: &Walker, ids: &[ObjectId]) -> Result<Peeled, PackError> {
    let mut out = Peeled {
        commits: Vec::new(),
        others: Vec::new(),
    };
    for id in ids {
        let mut tags = Vec::new();
        let (target, kind) = walker.peel(*id, &mut tags)?;
        out.others
            .extend(tags.into_iter().map(|t| (t, ObjectKind::Tag)));
        if kind == ObjectKind::Commit {
            out.commits.push(target);
        } else {
            out.others.push((target, kind));
        }
    }
    Ok(out)
}

/// The commits the client has: reachable from `haves` (commits) without going below the
/// client's shallow commits, and (to bound the walk) without leaving `within` once past the
/// haves themselves, when `within` is given.
fn had_commits(
    walker: &Walker,
    haves: &[ObjectId],
    client_shallow: &IdSet,
    within: Option<&IdSet>,
    cancel: &AtomicBool,
) -> Result<IdSet, PackError> {
    let mut had = IdSet::default();
    let mut stack: Vec<ObjectId> = haves.to_vec();
    let mut steps = 0usize;
    while let Some(id) = stack.pop() {
        if !had.insert(id) {
            continue;
        }
        steps += 1;
        if steps.is_multiple_of(CANCEL_EVERY) {
            cancelled(cancel)?;
        }
        if client_shallow.contains(&id) {
            continue;
        }
        let commit = walker.commit(&id)?;
        for p in commit.parents {
            if within.is_none_or(|w| w.contains(&p)) && !had.contains(&p) {
                stack.push(p);
            }
        }
    }
    Ok(had)
}

/// The commits a deepen request keeps, and the boundary among them.
struct Cut {
    /// Commits kept.
    keep: IdSet,
    /// Commits kept whose parents are not all kept: the client's new shallow commits.
    boundary: Vec<ObjectId>,
}

/// Commits within `depth` of `starts` (a start is at depth 1), breadth first so that each
/// commit gets its least depth.
fn cut_depth(
    walker: &Walker,
    starts: &[ObjectId],
    depth: u32,
    cancel: &AtomicBool,
) -> Result<Cut, PackError> {
    let mut depth_of: IdMap<u32> = IdMap::default();
    let mut queue: VecDeque<ObjectId> = VecDeque::new();
    for s in starts {
        if depth_of.insert(*s, 1).is_none() {
            queue.push_back(*s);
        }
    }
    let mut boundary = Vec::new();
    let mut steps = 0usize;
    while let Some(id) = queue.pop_front() {
        steps += 1;
        if steps.is_multiple_of(CANCEL_EVERY) {
            cancelled(cancel)?;
        }
        let d = depth_of[&id];
        let commit = walker.commit(&id)?;
        if d >= depth {
            if !commit.parents.is_empty() {
                boundary.push(id);
            }
            continue;
        }
        for p in commit.parents {
            if let std::collections::hash_map::Entry::Vacant(e) = depth_of.entry(p) {
                e.insert(d + 1);
                queue.push_back(p);
            }
        }
    }
    // A commit first reached at the limit may later be reached closer through another path;
    // breadth first order rules that out, so the boundary is final.
    Ok(Cut {
        keep: depth_of.into_keys().collect(),
        boundary,
    })
}

/// The commits a date or excluded refs keep, each with its parents: read once, for the cut
/// and then for its boundary.
type KeptCommits = IdMap<Vec<ObjectId>>;

/// `ids` with their parents (each commit read once).
fn with_parents(
    walker: &Walker,
    ids: IdSet,
    cancel: &AtomicBool,
) -> Result<KeptCommits, PackError> {
    let mut kept = KeptCommits::default();
    for (n, id) in ids.into_iter().enumerate() {
        if n.is_multiple_of(CANCEL_EVERY) {
            cancelled(cancel)?;
        }
        kept.insert(id, walker.commit(&id)?.parents);
    }
    Ok(kept)
}

/// The boundary of a kept set: kept commits with a parent outside it.
fn boundary_of(keep: &KeptCommits) -> Vec<ObjectId> {
    let mut boundary: Vec<ObjectId> = keep
        .iter()
        .filter(|(_, parents)| parents.iter().any(|p| !keep.contains_key(p)))
        .map(|(id, _)| *id)
        .collect();
    boundary.sort();
    boundary
}

/// The commits `wants` reach through commits no older than `since` (all when `None`), as
/// git's rev-list `--max-age` walks when nothing limits it: an older commit is left out, and
/// so is what only it leads to, but a newer commit it leads to that a newer path also reaches
/// is kept (dates can go back in history).
fn commits_since(
    walker: &Walker,
    wants: &[ObjectId],
    since: Option<i64>,
    cancel: &AtomicBool,
) -> Result<KeptCommits, PackError> {
    let mut keep = KeptCommits::default();
    let mut stack: Vec<ObjectId> = wants.to_vec();
    while let Some(id) = stack.pop() {
        if keep.contains_key(&id) {
            continue;
        }
        let commit = walker.commit(&id)?;
        if since.is_some_and(|since| commit.time < since) {
            continue;
        }
        stack.extend_from_slice(&commit.parents);
        keep.insert(id, commit.parents);
        if keep.len().is_multiple_of(CANCEL_EVERY) {
            cancelled(cancel)?;
        }
    }
    Ok(keep)
}

/// The commits of `allowed` (what the wants reach and none of the excluded refs does) that no
/// commit of `allowed` older than `since` reaches. git's rev-list `--max-age` with `--not`
/// limits its walk first, and there an older commit makes everything it reaches uninteresting,
/// a newer commit too: with dates going back in history, such a commit is left out even where
/// a newer path reaches it, unlike [`commits_since`]. (git's limited walk may stop before an
/// uninteresting mark has gone all the way down, in histories whose dates go back more than
/// once; this takes the mark all the way.)
fn commits_since_limited(
    walker: &Walker,
    allowed: IdSet,
    since: i64,
    cancel: &AtomicBool,
) -> Result<KeptCommits, PackError> {
    let mut keep = KeptCommits::default();
    let mut stack = Vec::new();
    for (n, id) in allowed.into_iter().enumerate() {
        if n.is_multiple_of(CANCEL_EVERY) {
            cancelled(cancel)?;
        }
        let commit = walker.commit(&id)?;
        if commit.time < since {
            stack.push(id);
        }
        keep.insert(id, commit.parents);
    }
    let mut steps = 0usize;
    while let Some(id) = stack.pop() {
        // A commit outside what is kept is outside `allowed` (and so is all it reaches), or
        // was already taken out with what it reaches.
        let Some(parents) = keep.remove(&id) else {
            continue;
        };
        steps += 1;
        if steps.is_multiple_of(CANCEL_EVERY) {
            cancelled(cancel)?;
        }
        stack.extend(parents);
    }
    Ok(keep)
}

/// Applies a deepen request.
fn cut(
    walker: &Walker,
    wants: &[ObjectId],
    deepen: &Deepen,
    client_shallow: &[ObjectId],
    cancel: &AtomicBool,
) -> Result<Cut, PackError> {
    match deepen {
        Deepen::Depth {
            depth,
            relative: false,
        } => cut_depth(walker, wants, (*depth).max(1), cancel),
        Deepen::Depth {
            depth,
            relative: true,
        } => {
            // N more than the client has: N + 1 from each of its shallow commits, and the wants
            // down to them (or down to depth N + 1 when they do not meet).
            let mut cut = cut_depth(walker, client_shallow, depth.saturating_add(1), cancel)?;
            let from_wants = cut_depth(walker, wants, depth.saturating_add(1), cancel)?;
            let old: IdSet = client_shallow.iter().copied().collect();
            for b in from_wants.boundary {
                if !cut.keep.contains(&b) && !old.contains(&b) {
                    cut.boundary.push(b);
                }
            }
            cut.keep.extend(from_wants.keep);
            Ok(cut)
        }
        Deepen::SinceNot { since, not } => {
            // Commits none of `not` reaches, as git's rev-list `--not` finds them: the cut,
            // without a date.
            let allowed: Option<IdSet> = if not.is_empty() {
                None
            } else {
                let reached = walker.reachable(&Query {
                    include: wants.to_vec(),
                    exclude: not.clone(),
                    objects: false,
                    exact: false,
                })?;
                Some(reached.into_iter().map(|r| r.id).collect())
            };
            let keep = match (allowed, *since) {
                (Some(allowed), None) => with_parents(walker, allowed, cancel)?,
                (Some(allowed), Some(since)) => {
                    commits_since_limited(walker, allowed, since, cancel)?
                }
                (None, since) => commits_since(walker, wants, since, cancel)?,
            };
            if keep.is_empty() {
                return Err(PackError::BadRequest(
                    "no commits selected for shallow requests".into(),
                ));
            }
            let boundary = boundary_of(&keep);
            Ok(Cut {
                keep: keep.into_keys().collect(),
                boundary,
            })
        }
    }
}

/// The commits within a deepen request's cut, and which of them the client will have without
/// their parents.
pub(crate) struct Deepened {
    /// The commits within the cut, the new boundary among them.
    pub(crate) keep: IdSet,
    /// The new shallow commits: the client will have them without their parents, so the pack
    /// holds nothing that only their parents lead to.
    pub(crate) boundary: IdSet,
}

/// The shallow boundary changes of `request` (empty unless it deepens), and what a deepen
/// request keeps.
pub(crate) fn shallow_updates(
    repo: &Repository,
    request: &FetchRequest,
    cancel: &AtomicBool,
) -> Result<(Vec<ShallowUpdate>, Option<Deepened>), PackError> {
    let Some(deepen) = &request.deepen else {
        return Ok((Vec::new(), None));
    };
    let walker = Walker::new(repo);
    let wants = peel(&walker, &request.wants)?.commits;
    let cut = cut(&walker, &wants, deepen, &request.client_shallow, cancel)?;
    let boundary: IdSet = cut.boundary.iter().copied().collect();
    let old: IdSet = request.client_shallow.iter().copied().collect();
    let mut updates: Vec<ShallowUpdate> = cut
        .boundary
        .iter()
        .filter(|b| !old.contains(b))
        .map(|b| ShallowUpdate::Shallow(*b))
        .collect();
    for s in &request.client_shallow {
        if cut.keep.contains(s) && !boundary.contains(s) {
            updates.push(ShallowUpdate::Unshallow(*s));
        }
    }
    Ok((
        updates,
        Some(Deepened {
            keep: cut.keep,
            boundary,
        }),
    ))
}

/// What a walk counted.
pub(crate) struct Counted {
    /// Every object to send.
    pub objects: Vec<ObjectId>,
    /// Objects the client is known to have (deltas may be made against them): the have
    /// commits and what their root trees hold.
    pub had: IdSet,
    /// For objects to send, the client's version of the same path (see [`path_bases`]).
    pub path_bases: IdMap<ObjectId>,
}

/// Counts the objects of `request` by walking, honouring shallow requests and filters.
/// `deepened` is what a deepen request keeps (from [`shallow_updates`]).
pub(crate) fn count(
    repo: &Repository,
    request: &FetchRequest,
    deepened: Option<&Deepened>,
    cancel: &AtomicBool,
) -> Result<Counted, PackError> {
    let keep = deepened.map(|d| &d.keep);
    let walker = Walker::new(repo);
    let wants = peel(&walker, &request.wants)?;
    let haves = peel(&walker, &request.haves)?;
    let client_shallow: IdSet = request.client_shallow.iter().copied().collect();
    let shallow_mode = keep.is_some() || !client_shallow.is_empty();

    // Commits to send.
    let commits: Vec<ObjectId> = if shallow_mode {
        let had = had_commits(&walker, &haves.commits, &client_shallow, keep, cancel)?;
        let mut out = Vec::new();
        let mut seen = IdSet::default();
        let mut stack = wants.commits.clone();
        // The client's shallow commits that the request deepens: the client has them but not
        // their parents, which the walk from the wants, stopping at had commits, would never
        // reach (git's upload-pack adds these parents to the wants).
        if let Some(Deepened { keep, boundary }) = deepened {
            for s in &client_shallow {
                if keep.contains(s) && !boundary.contains(s) {
                    let parents = walker.commit(s)?.parents;
                    stack.extend(parents.into_iter().filter(|p| keep.contains(p)));
                }
            }
        }
        // Shallow for the client once it has the pack (the new boundary, or without a deepen
        // its shallow commits; those outside the cut are never reached): the client will not
        // see their parents, so neither is anything sent that only their parents lead to
        // (git's pack-objects walks with them as grafts). A deepen-since or deepen-not
        // boundary can have a parent within the cut that nothing else leads to: sent, the
        // client has it as a dangling commit.
        let shallow_after = |id: &ObjectId| match deepened {
            Some(d) => d.boundary.contains(id),
            None => client_shallow.contains(id),
        };
        while let Some(id) = stack.pop() {
            if had.contains(&id) || !seen.insert(id) {
                continue;
            }
            if keep.is_some_and(|k| !k.contains(&id)) {
                continue;
            }
            if seen.len() % CANCEL_EVERY == 0 {
                cancelled(cancel)?;
            }
            out.push(id);
            if shallow_after(&id) {
                continue;
            }
            stack.extend(walker.commit(&id)?.parents);
        }
        out
    } else {
        walker
            .reachable(&Query {
                include: wants.commits.clone(),
                exclude: haves.commits.clone(),
                objects: false,
                exact: false,
            })?
            .into_iter()
            .map(|r| r.id)
            .collect()
    };
    cancelled(cancel)?;

    // What the client's have commits hold at their roots: excluded, and delta bases.
    let mut depth_seen: IdMap<u64> = IdMap::default();
    let (had, had_trees) = had_at_roots(repo, &walker, &haves, &mut depth_seen, cancel)?;

    let mut objects = Vec::new();
    let mut sent = IdSet::default();
    for (id, _) in &wants.others {
        // Named directly: sent whatever the filter says (a partial clone's lazy fetch).
        if !had.contains(id) && sent.insert(*id) {
            objects.push(*id);
        }
    }
    for (id, kind) in &wants.others {
        if *kind != ObjectKind::Tree {
            continue;
        }
        // A named tree's contents are filtered as git's rev-list filters them: blob filters
        // as anywhere, and `tree:N` counting the named tree's entries as depth 0 (one level
        // more than under a commit's root tree). Seen depths are kept apart from the commits'
        // trees, whose depths count differently.
        let filter = match &request.filter {
            Some(Filter::TreeDepth(n)) => Some(Filter::TreeDepth(n.saturating_add(1))),
            other => other.clone(),
        };
        let mut named_seen: IdMap<u64> = IdMap::default();
        walk_tree(
            repo,
            *id,
            0,
            filter.as_ref(),
            &mut named_seen,
            &mut objects,
            cancel,
        )?;
    }
    let mut trees = Vec::with_capacity(commits.len());
    for id in &commits {
        if sent.insert(*id) {
            objects.push(*id);
        }
        trees.push(walker.commit(id)?.tree);
    }
    let path_bases = if request.thin && !had_trees.is_empty() {
        path_bases(repo, &had_trees, &trees, &|id| had.contains(id), cancel)?
    } else {
        IdMap::default()
    };
    for tree in trees {
        walk_tree(
            repo,
            tree,
            0,
            request.filter.as_ref(),
            &mut depth_seen,
            &mut objects,
            cancel,
        )?;
    }
    objects.retain(|id| !had.contains(id) || sent.contains(id));
    let mut unique = IdSet::default();
    objects.retain(|id| unique.insert(*id));
    Ok(Counted {
        objects,
        had,
        path_bases,
    })
}

/// The have commits and tags, their trees and blobs (named directly), and everything their
/// commits' root trees hold (marked seen at its depth in `depth_seen`): objects the client
/// has, for delta bases. Also the root trees.
fn had_at_roots(
    repo: &Repository,
    walker: &Walker,
    haves: &Peeled,
    depth_seen: &mut IdMap<u64>,
    cancel: &AtomicBool,
) -> Result<(IdSet, Vec<ObjectId>), PackError> {
    let mut had = IdSet::default();
    let mut had_trees = Vec::new();
    for id in &haves.commits {
        had.insert(*id);
        had_trees.push(walker.commit(id)?.tree);
    }
    for (id, _) in &haves.others {
        had.insert(*id);
    }
    let mut unfiltered = Vec::new();
    for &tree in &had_trees {
        walk_tree(repo, tree, 0, None, depth_seen, &mut unfiltered, cancel)?;
    }
    had.extend(unfiltered);
    Ok((had, had_trees))
}

/// Counts `request` (no filter, no shallow) as git's plain walk does, `git rev-list
/// --objects WANTS --not HAVES`: the commits the wants reach and the haves do not, and what
/// their trees hold but the trees of the edge commits (excluded parents of those commits);
/// less what the haves' root trees hold, which git's walk sends when a have is not an edge.
/// Not the set difference: what only older commits of the haves hold (a file brought back to
/// an old version) is sent, as git sends it. git answers a fetch by this walk when none of its
/// haves is in the bitmapped pack (see `PackServer::walk_is_cheaper`).
pub(crate) fn count_plain(
    repo: &Repository,
    request: &FetchRequest,
    cancel: &AtomicBool,
) -> Result<Counted, PackError> {
    let walker = Walker::new(repo);
    let reached = walker.reachable(&Query {
        include: request.wants.clone(),
        exclude: request.haves.clone(),
        objects: true,
        exact: false,
    })?;
    cancelled(cancel)?;
    let haves = peel(&walker, &request.haves)?;
    let mut depth_seen: IdMap<u64> = IdMap::default();
    let (had, had_trees) = had_at_roots(repo, &walker, &haves, &mut depth_seen, cancel)?;
    let mut trees = Vec::new();
    for r in &reached {
        if r.kind == ObjectKind::Commit {
            trees.push(walker.commit(&r.id)?.tree);
        }
    }
    let path_bases = if request.thin && !had_trees.is_empty() {
        path_bases(repo, &had_trees, &trees, &|id| had.contains(id), cancel)?
    } else {
        IdMap::default()
    };
    Ok(Counted {
        objects: reached
            .into_iter()
            .map(|r| r.id)
            .filter(|id| !had.contains(id))
            .collect(),
        had,
        path_bases,
    })
}

/// Have commits whose trees are read for [`path_bases`].
const MAX_PATH_HAVES: usize = 16;

/// Paths read from those trees, at most.
const MAX_HAD_PATHS: usize = 1 << 20;

/// For the objects under `sent_roots` that the client lacks, the object the client has at the
/// same path under one of `had_roots` (its first [`MAX_PATH_HAVES`]), when it differs: the
/// natural delta base of a thin pack. Bitmaps give this through their name-hash cache for the
/// objects they hold; for the others (none without a bitmap, those pushed since it was written
/// with one) it is what keeps a fetch from sending every changed file whole. `had`: whether the
/// client has an object (its trees are not walked).
pub(crate) fn path_bases(
    repo: &Repository,
    had_roots: &[ObjectId],
    sent_roots: &[ObjectId],
    had: &dyn Fn(&ObjectId) -> bool,
    cancel: &AtomicBool,
) -> Result<IdMap<ObjectId>, PackError> {
    let mut had_paths: std::collections::HashMap<Vec<u8>, ObjectId> = Default::default();
    let had_roots = &had_roots[..had_roots.len().min(MAX_PATH_HAVES)];
    walk_paths(repo, had_roots, &|_| false, cancel, &mut |path, id| {
        had_paths.entry(path.to_vec()).or_insert(id);
        had_paths.len() < MAX_HAD_PATHS
    })?;
    let mut bases = IdMap::default();
    walk_paths(repo, sent_roots, had, cancel, &mut |path, id| {
        if let Some(base) = had_paths.get(path) {
            if *base != id {
                bases.entry(id).or_insert(*base);
            }
        }
        true
    })?;
    Ok(bases)
}

/// Calls `visit(path, id)` for every entry under the trees `roots` but those `skip` names (and
/// what lies under them), each tree read once; gitlinks are left out. Paths are "dir/name", with
/// a trailing '/' for trees, so that a tree and a blob never share one. Stops when `visit`
/// answers false.
fn walk_paths(
    repo: &Repository,
    roots: &[ObjectId],
    skip: &dyn Fn(&ObjectId) -> bool,
    cancel: &AtomicBool,
    visit: &mut dyn FnMut(&[u8], ObjectId) -> bool,
) -> Result<(), PackError> {
    let mut walked = IdSet::default();
    let mut stack: Vec<(ObjectId, Vec<u8>)> = roots.iter().map(|t| (*t, Vec::new())).collect();
    while let Some((tree, prefix)) = stack.pop() {
        if skip(&tree) || !walked.insert(tree) {
            continue;
        }
        if walked.len() % CANCEL_EVERY == 0 {
            cancelled(cancel)?;
        }
        let data = match repo.objects().read(&tree)? {
            Some(object) if object.kind == ObjectKind::Tree => object.data,
            _ => continue,
        };
        for entry in tree_entries(&tree, &data) {
            let (mode, name, id) = entry?;
            if skip(&id) || mode & 0o170000 == 0o160000 {
                continue;
            }
            let mut path = prefix.clone();
            path.extend_from_slice(name);
            let is_tree = mode & 0o170000 == 0o040000;
            if is_tree {
                path.push(b'/');
            }
            if !visit(&path, id) {
                return Ok(());
            }
            if is_tree {
                stack.push((id, path));
            }
        }
    }
    Ok(())
}

/// Walks the tree `root` (at depth `depth`), appending to `out` each object not seen before at
/// this depth or less and that `filter` keeps.
fn walk_tree(
    repo: &Repository,
    root: ObjectId,
    depth: u64,
    filter: Option<&Filter>,
    seen: &mut IdMap<u64>,
    out: &mut Vec<ObjectId>,
    cancel: &AtomicBool,
) -> Result<(), PackError> {
    let tree_limit = match filter {
        Some(Filter::TreeDepth(n)) => Some(*n),
        _ => None,
    };
    // A tree first met deep and later shallower must be walked again: what it holds may now be
    // within the depth limit.
    let visit = |id: ObjectId, d: u64, seen: &mut IdMap<u64>| match seen.get(&id) {
        Some(&old) if old <= d => false,
        _ => {
            seen.insert(id, d);
            true
        }
    };
    if tree_limit.is_some_and(|n| depth >= n) || !visit(root, depth, seen) {
        return Ok(());
    }
    out.push(root);
    let mut stack = vec![(root, depth)];
    let mut steps = 0usize;
    while let Some((id, d)) = stack.pop() {
        steps += 1;
        if steps.is_multiple_of(CANCEL_EVERY) {
            cancelled(cancel)?;
        }
        let object = repo
            .objects()
            .read(&id)?
            .ok_or_else(|| PackError::BadRequest(format!("tree {id} is missing")))?;
        if object.kind != ObjectKind::Tree {
            return Err(packd_odb::Error::BadName(format!(
                "object {id}: is a {}, not a tree",
                object.kind.name()
            ))
            .into());
        }
        for entry in tree_entries(&id, &object.data) {
            let (mode, _, entry) = entry?;
            let child_depth = d + 1;
            match mode & 0o170000 {
                0o160000 => {}
                0o040000 => {
                    if tree_limit.is_some_and(|n| child_depth >= n) {
                        continue;
                    }
                    if visit(entry, child_depth, seen) {
                        out.push(entry);
                        stack.push((entry, child_depth));
                    }
                }
                _ => {
                    let keep = match filter {
                        None => true,
                        Some(Filter::BlobNone) => false,
                        Some(Filter::TreeDepth(n)) => child_depth < *n,
                        Some(Filter::BlobLimit(limit)) => match repo.objects().header(&entry)? {
                            Some(h) => h.size < *limit,
                            None => false,
                        },
                    };
                    if keep && visit(entry, child_depth, seen) {
                        out.push(entry);
                    }
                }
            }
        }
    }
    Ok(())
}
