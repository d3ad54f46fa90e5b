//! One revision argument of a command line, as git's revision walk reads it (`git rev-list`,
//! and `git pack-objects --revs` on its stdin): a name, or a range that stands for several
//! tips, some included and some excluded.
//!
//! ```text
//! <rev>          include <rev>                       (a name as revision.rs resolves it)
//! ^<rev>         exclude <rev>
//! <a>..<b>       exclude <a>, include <b>            (an empty side is HEAD)
//! <a>...<b>      include <a> and <b>, exclude every commit both reach (their merge bases)
//! <rev>^@        include the parents of <rev>, not <rev>
//! <rev>^!        include <rev>, exclude its parents
//! <rev>^-[<n>]   include <rev>, exclude its nth parent (the first by default)
//! ```
//!
//! As in git, a range whose sides do not resolve is tried as one name before it is refused
//! (`main:a..b` names a path); `--not` (the caller's) flips every tip of what follows.

use crate::hash::ObjectId;
use crate::repository::{NameMatch, Repository};
use crate::{IdSet, ObjectKind, Result};

/// One tip a revision argument stands for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RevisionTip {
    /// The object.
    pub id: ObjectId,
    /// The name it was given by (a side of a range, or the argument), for `--objects` output.
    pub name: String,
    /// Whether its history is excluded (`^rev`, the left of `a..b`, merge bases).
    pub exclude: bool,
}

/// Why a revision argument stands for nothing, in git's terms (the caller words the message:
/// `git rev-list` and `git pack-objects` word them differently).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RevisionArgError {
    /// A name (or a side of a range) that does not resolve.
    Unknown,
    /// An abbreviated id several objects share.
    Ambiguous,
    /// `a...b` where a side is not a commit: git's "Invalid symmetric difference expression";
    /// each such side as it peels (its id and kind), for git's "object X is a blob, not a
    /// commit" about each.
    NotCommits(Vec<(ObjectId, ObjectKind)>),
}

/// What [`Repository::revision_arg`] found.
pub type RevisionArg = std::result::Result<Vec<RevisionTip>, RevisionArgError>;

impl Repository {
    /// The tips the command-line revision `arg` stands for (see the module's table): `Ok(Err)`
    /// when it names nothing, `Err` when the repository cannot be read.
    pub fn revision_arg(&self, arg: &str) -> Result<RevisionArg> {
        if let Some(range) = self.range(arg)? {
            return Ok(range);
        }
        if let Some(rev) = arg.strip_prefix('^') {
            return Ok(self.name(rev).map(|id| {
                vec![RevisionTip {
                    id,
                    name: rev.to_string(),
                    exclude: true,
                }]
            }));
        }
        if let Some(tips) = self.parent_shorthand(arg)? {
            return Ok(tips);
        }
        Ok(self.name(arg).map(|id| {
            vec![RevisionTip {
                id,
                name: arg.to_string(),
                exclude: false,
            }]
        }))
    }

    /// `name` resolved, or why not.
    fn name(&self, name: &str) -> std::result::Result<ObjectId, RevisionArgError> {
        match self.resolve_revision(name) {
            Ok(NameMatch::Found(id)) => Ok(id),
            Ok(NameMatch::Ambiguous) => Err(RevisionArgError::Ambiguous),
            Ok(NameMatch::Missing) | Err(_) => Err(RevisionArgError::Unknown),
        }
    }

    /// `a..b` or `a...b`; `None` when `arg` is not a range or a side does not resolve (the
    /// argument is then tried as one name, as git does). `a...b` of non-commits is refused.
    fn range(&self, arg: &str) -> Result<Option<RevisionArg>> {
        let Some(dots) = arg.find("..") else {
            return Ok(None);
        };
        let left = &arg[..dots];
        let (symmetric, right) = match arg[dots + 2..].strip_prefix('.') {
            Some(rest) => (true, rest),
            None => (false, &arg[dots + 2..]),
        };
        // `..` alone is not a range (git takes it as a path); `...` is HEAD...HEAD.
        if left.is_empty() && right.is_empty() && !symmetric {
            return Ok(None);
        }
        fn side(s: &str) -> &str {
            if s.is_empty() {
                "HEAD"
            } else {
                s
            }
        }
        let (left, right) = (side(left), side(right));
        let (Ok(a), Ok(b)) = (self.name(left), self.name(right)) else {
            return Ok(None);
        };
        let tip = |id, name: &str, exclude| RevisionTip {
            id,
            name: name.to_string(),
            exclude,
        };
        if !symmetric {
            return Ok(Some(Ok(vec![tip(a, left, true), tip(b, right, false)])));
        }
        let (Some(ca), Some(cb)) = (
            self.peel_to(a, Some(ObjectKind::Commit))?,
            self.peel_to(b, Some(ObjectKind::Commit))?,
        ) else {
            let mut sides = Vec::new();
            for id in [a, b] {
                let peeled = self.peel_to(id, None)?.unwrap_or(id);
                let kind = self.kind_of(&peeled)?;
                if kind != ObjectKind::Commit {
                    sides.push((peeled, kind));
                }
            }
            return Ok(Some(Err(RevisionArgError::NotCommits(sides))));
        };
        let mut tips = vec![tip(a, left, false), tip(b, right, false)];
        for base in self.common_frontier(ca, cb)? {
            tips.push(tip(base, &base.to_string(), true));
        }
        Ok(Some(Ok(tips)))
    }

    /// The commits both `a` and `b` reach that no other such commit on the way from `b`
    /// reaches first: excluding them excludes exactly what excluding the merge bases does
    /// (every common ancestor is reached from a merge base), without ranking them.
    fn common_frontier(&self, a: ObjectId, b: ObjectId) -> Result<Vec<ObjectId>> {
        let from_a = self.ancestors(a)?;
        let mut seen = IdSet::default();
        let mut stack = vec![b];
        let mut frontier = Vec::new();
        while let Some(id) = stack.pop() {
            if !seen.insert(id) {
                continue;
            }
            if from_a.contains(&id) {
                frontier.push(id);
                continue;
            }
            stack.extend(self.parents_of(id)?);
        }
        Ok(frontier)
    }

    /// Every commit `tip` reaches, itself included.
    fn ancestors(&self, tip: ObjectId) -> Result<IdSet> {
        let mut seen = IdSet::default();
        let mut stack = vec![tip];
        while let Some(id) = stack.pop() {
            if seen.insert(id) {
                stack.extend(self.parents_of(id)?);
            }
        }
        Ok(seen)
    }

    /// `rev^@`, `rev^!` and `rev^-[n]`; `None` when `arg` ends in none of them.
    fn parent_shorthand(&self, arg: &str) -> Result<Option<RevisionArg>> {
        enum Shorthand {
            Parents,
            NotParents,
            NotParent(usize),
        }
        let (base, shorthand) = if let Some(base) = arg.strip_suffix("^@") {
            (base, Shorthand::Parents)
        } else if let Some(base) = arg.strip_suffix("^!") {
            (base, Shorthand::NotParents)
        } else if let Some((base, n)) = arg.rsplit_once("^-") {
            match n {
                "" => (base, Shorthand::NotParent(1)),
                n if n.bytes().all(|b| b.is_ascii_digit()) => match n.parse() {
                    Ok(n) if n > 0 => (base, Shorthand::NotParent(n)),
                    _ => return Ok(None),
                },
                _ => return Ok(None),
            }
        } else {
            return Ok(None);
        };
        if base.is_empty() {
            return Ok(None);
        }
        let id = match self.name(base) {
            Ok(id) => id,
            Err(e) => return Ok(Some(Err(e))),
        };
        let Some(commit) = self.peel_to(id, Some(ObjectKind::Commit))? else {
            return Ok(Some(Err(RevisionArgError::Unknown)));
        };
        let parents = self.parents_of(commit)?;
        let tip = |id: ObjectId, name: String, exclude| RevisionTip { id, name, exclude };
        let tips = match shorthand {
            Shorthand::Parents => parents
                .iter()
                .map(|p| tip(*p, p.to_string(), false))
                .collect(),
            Shorthand::NotParents => std::iter::once(tip(commit, base.to_string(), false))
                .chain(parents.iter().map(|p| tip(*p, p.to_string(), true)))
                .collect(),
            Shorthand::NotParent(n) => match parents.get(n - 1) {
                Some(p) => vec![
                    tip(*p, p.to_string(), true),
                    tip(commit, base.to_string(), false),
                ],
                None => return Ok(Some(Err(RevisionArgError::Unknown))),
            },
        };
        Ok(Some(Ok(tips)))
    }
}
