//! Revision names as git spells them: `<base>` followed by `^`, `^N`, `~N`, `^{type}`, `^{}`,
//! and `<rev>:<path>` for a path inside a tree.
//!
//! `<base>` is a full id, a unique abbreviated id, a ref name (see [`crate::refs`]), or `@`
//! for `HEAD`.

use crate::hash::ObjectId;
use crate::parse::{parse_commit, tag_target, tree_entries};
use crate::repository::{NameMatch, Repository};
use crate::{Error, ObjectKind, Result};

/// One step after the base name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Step {
    /// `^N`: the Nth parent (`^` is `^1`, `^0` the commit itself).
    Parent(usize),
    /// `~N`: the Nth first-parent ancestor.
    Ancestor(usize),
    /// `^{type}`: peel tags (and commits, to `tree`) until an object of that kind.
    Peel(ObjectKind),
    /// `^{}`: peel tags until a non-tag.
    PeelTags,
}

fn parse_steps(mut s: &str) -> Option<Vec<Step>> {
    let mut steps = Vec::new();
    let number = |s: &str| -> (Option<usize>, usize) {
        let digits = s.bytes().take_while(|b| b.is_ascii_digit()).count();
        (s[..digits].parse().ok(), digits)
    };
    while !s.is_empty() {
        if let Some(rest) = s.strip_prefix("^{") {
            let end = rest.find('}')?;
            let step = match &rest[..end] {
                "" => Step::PeelTags,
                kind => Step::Peel(ObjectKind::from_name(kind.as_bytes())?),
            };
            steps.push(step);
            s = &rest[end + 1..];
        } else if let Some(rest) = s.strip_prefix('^') {
            let (n, len) = number(rest);
            steps.push(Step::Parent(n.unwrap_or(1)));
            s = &rest[len..];
        } else if let Some(rest) = s.strip_prefix('~') {
            let (n, len) = number(rest);
            steps.push(Step::Ancestor(n.unwrap_or(1)));
            s = &rest[len..];
        } else {
            return None;
        }
    }
    Some(steps)
}

/// Splits `name` into its base and the suffix of steps (the first `^` or `~` not inside the
/// base name proper).
fn split_base(name: &str) -> (&str, &str) {
    match name.find(['^', '~']) {
        Some(i) if i > 0 => (&name[..i], &name[i..]),
        _ => (name, ""),
    }
}

impl Repository {
    /// The parents of a commit.
    pub(crate) fn parents_of(&self, id: ObjectId) -> Result<Vec<ObjectId>> {
        Ok(self.commit_links(&id)?.1)
    }

    /// The parents and tree of a commit.
    fn commit_links(&self, id: &ObjectId) -> Result<(ObjectId, Vec<ObjectId>)> {
        if let Some(graph) = self.commit_graph() {
            if let Some(pos) = graph.lookup(id) {
                let commit = graph.commit(pos)?;
                return Ok((commit.tree, commit.parents));
            }
        }
        let object = self
            .objects()
            .read(id)?
            .ok_or_else(|| Error::BadName(format!("commit {id} is missing")))?;
        if object.kind != ObjectKind::Commit {
            return Err(Error::BadName(format!(
                "{id} is a {}, not a commit",
                object.kind.name()
            )));
        }
        let commit = parse_commit(id, &object.data)?;
        Ok((commit.tree, commit.parents))
    }

    /// One level of peeling: a tag's target, or a commit's tree.
    fn peel_once(&self, id: &ObjectId) -> Result<Option<(ObjectKind, ObjectId)>> {
        let Some(object) = self.objects().read(id)? else {
            return Err(Error::BadName(format!("object {id} is missing")));
        };
        match object.kind {
            ObjectKind::Tag => {
                let target = tag_target(id, &object.data)?;
                let kind = self
                    .objects()
                    .header(&target)?
                    .ok_or_else(|| Error::BadName(format!("object {target} is missing")))?
                    .kind;
                Ok(Some((kind, target)))
            }
            ObjectKind::Commit => Ok(Some((ObjectKind::Tree, self.commit_links(id)?.0))),
            _ => Ok(None),
        }
    }

    pub(crate) fn kind_of(&self, id: &ObjectId) -> Result<ObjectKind> {
        Ok(self
            .objects()
            .header(id)?
            .ok_or_else(|| Error::BadName(format!("object {id} is missing")))?
            .kind)
    }

    /// Peels `id` as `<id>^{kind}` does (tags to their targets, a commit to its tree when a
    /// tree is wanted); `None` for `kind` peels tags only. `None` when it cannot be peeled so.
    pub fn peel_to(&self, mut id: ObjectId, want: Option<ObjectKind>) -> Result<Option<ObjectId>> {
        let mut kind = self.kind_of(&id)?;
        loop {
            match want {
                Some(w) if w == kind => return Ok(Some(id)),
                None if kind != ObjectKind::Tag => return Ok(Some(id)),
                _ => {}
            }
            if kind == ObjectKind::Commit && want != Some(ObjectKind::Tree) {
                return Ok(None);
            }
            match self.peel_once(&id)? {
                Some((k, next)) => {
                    kind = k;
                    id = next;
                }
                None => return Ok(None),
            }
        }
    }

    fn step(&self, id: ObjectId, step: Step) -> Result<Option<ObjectId>> {
        match step {
            Step::Peel(kind) => self.peel_to(id, Some(kind)),
            Step::PeelTags => self.peel_to(id, None),
            Step::Parent(n) => {
                let Some(commit) = self.peel_to(id, Some(ObjectKind::Commit))? else {
                    return Ok(None);
                };
                if n == 0 {
                    return Ok(Some(commit));
                }
                Ok(self.commit_links(&commit)?.1.get(n - 1).copied())
            }
            Step::Ancestor(n) => {
                let Some(mut commit) = self.peel_to(id, Some(ObjectKind::Commit))? else {
                    return Ok(None);
                };
                for _ in 0..n {
                    match self.commit_links(&commit)?.1.first() {
                        Some(p) => commit = *p,
                        None => return Ok(None),
                    }
                }
                Ok(Some(commit))
            }
        }
    }

    /// The entry `path` (slash-separated) inside the tree-ish `id`.
    fn tree_path(&self, id: ObjectId, path: &str) -> Result<Option<ObjectId>> {
        let Some(mut cur) = self.peel_to(id, Some(ObjectKind::Tree))? else {
            return Ok(None);
        };
        for component in path.split('/').filter(|c| !c.is_empty()) {
            let Some(tree) = self.objects().read(&cur)? else {
                return Ok(None);
            };
            if tree.kind != ObjectKind::Tree {
                return Ok(None);
            }
            let mut found = None;
            for entry in tree_entries(&cur, &tree.data) {
                let (_, name, entry) = entry?;
                if name == component.as_bytes() {
                    found = Some(entry);
                    break;
                }
            }
            match found {
                Some(f) => cur = f,
                None => return Ok(None),
            }
        }
        Ok(Some(cur))
    }

    /// Resolves a revision as `git rev-parse` (and so `git cat-file`) reads it.
    pub fn resolve_revision(&self, rev: &str) -> Result<NameMatch> {
        if let Some((left, path)) = rev.split_once(':') {
            if left.is_empty() {
                return Ok(NameMatch::Missing); // `:path` names the index, which packd has no use for
            }
            return Ok(match self.resolve_revision(left)? {
                NameMatch::Found(id) => match self.tree_path(id, path)? {
                    Some(id) => NameMatch::Found(id),
                    None => NameMatch::Missing,
                },
                other => other,
            });
        }
        let (base, suffix) = split_base(rev);
        // `@` alone is git's shorthand for HEAD (`@~1`, `@^2`); no ref may be named `@`.
        let base = if base == "@" { "HEAD" } else { base };
        let Some(steps) = parse_steps(suffix) else {
            return Ok(NameMatch::Missing);
        };
        let mut id = match self.resolve_name(base)? {
            NameMatch::Found(id) => id,
            other => return Ok(other),
        };
        for step in steps {
            match self.step(id, step)? {
                Some(next) => id = next,
                None => return Ok(NameMatch::Missing),
            }
        }
        Ok(NameMatch::Found(id))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_suffixes() {
        assert_eq!(split_base("main~3^2"), ("main", "~3^2"));
        assert_eq!(
            parse_steps("~3^2^{tree}^{}^").unwrap(),
            vec![
                Step::Ancestor(3),
                Step::Parent(2),
                Step::Peel(ObjectKind::Tree),
                Step::PeelTags,
                Step::Parent(1)
            ]
        );
        assert!(parse_steps("^{nope}").is_none());
        assert!(parse_steps("x").is_none());
    }
}
