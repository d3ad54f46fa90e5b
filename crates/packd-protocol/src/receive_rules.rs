//! The repository's rules for ref updates in a push, as git's receive-pack applies them:
//!
//! ```text
//! receive.denyDeletes         true: "deletion prohibited" (refs/heads/ only)  (default false)
//! receive.denyNonFastForwards true: "non-fast-forward" (refs/heads/ only) unless old is an
//!                             ancestor of new
//!                             (default false)
//! receive.denyCurrentBranch   non-bare repositories only: refuse (default) / warn / ignore /
//!                             updateInstead (not supported: refused) the checked-out branch:
//!                             "branch is currently checked out"
//! receive.denyDeleteCurrent   refuse (default): "deletion of the current branch prohibited"
//! ref names                   refs/ and check-ref-format: "funny refname"
//! deletions                   without an old value, or one the repository lacks: allowed, with
//!                             "warning: deleting a non-existent ref" (or "allowing deletion of
//!                             corrupt ref" when the ref exists)
//! ```
//! Each refusal comes with the `error:` line git's receive-pack sends on side-band 2
//! (`refusing to create funny ref 'x' remotely`). receive-pack applies them in git's order:
//! with `atomic`, the first refused command stops the checks and every other gets "atomic push
//! failure"; then the ref transaction ([`packd_refs::apply`]) and its words.

use packd_odb::config::parse_bool;
use packd_odb::parse::parse_commit;
use packd_odb::{ObjectDb, ObjectId, ObjectKind, Repository};
use packd_refs::{check_ref_name, RefUpdate};
use std::collections::{HashSet, VecDeque};

/// git's text after "refusing to update checked out branch" when receive.denyCurrentBranch
/// is not set.
const UNCONFIGURED_DENY_CURRENT: &str =
    "By default, updating the current branch in a non-bare repository\n\
is denied, because it will make the index and work tree inconsistent\n\
with what you pushed, and will require 'git reset --hard' to match\n\
the work tree to HEAD.\n\
\n\
You can set the 'receive.denyCurrentBranch' configuration variable\n\
to 'ignore' or 'warn' in the remote repository to allow pushing into\n\
its current branch; however, this is not recommended unless you\n\
arranged to update its work tree to match what you pushed in some\n\
other way.\n\
\n\
To squelch this message and still keep the default behaviour, set\n\
'receive.denyCurrentBranch' configuration variable to 'refuse'.";

/// git's text before "refusing to delete the current branch" when receive.denyDeleteCurrent
/// is not set.
const UNCONFIGURED_DENY_DELETE_CURRENT: &str =
    "By default, deleting the current branch is denied, because the next\n\
'git clone' won't result in any file checked out, causing confusion.\n\
\n\
You can set 'receive.denyDeleteCurrent' configuration variable to\n\
'warn' or 'ignore' in the remote repository to allow deleting the\n\
current branch, with or without a warning message.\n\
\n\
To squelch this message, you can set it to 'refuse'.";

/// One of git's deny settings: `refuse` (also any true boolean and anything unknown),
/// `warn`, `ignore` (or false), or not set (refuse, with git's long explanation).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Deny {
    Unset,
    Refuse,
    Warn,
    Ignore,
}

impl Deny {
    fn read(value: Option<&str>) -> Deny {
        match value {
            None => Deny::Unset,
            Some(v) if v.eq_ignore_ascii_case("ignore") => Deny::Ignore,
            Some(v) if v.eq_ignore_ascii_case("warn") => Deny::Warn,
            Some(v) if parse_bool(v) == Some(false) => Deny::Ignore,
            Some(_) => Deny::Refuse,
        }
    }
}

/// The rules in force for one repository, read from its configuration.
#[derive(Debug, Clone)]
pub(crate) struct Rules {
    deny_deletes: bool,
    deny_non_ff: bool,
    /// The checked-out branch of a non-bare repository, with receive.denyCurrentBranch.
    checked_out: Option<(String, Deny)>,
    /// The branch HEAD names, with receive.denyDeleteCurrent.
    current_branch: Option<(String, Deny)>,
}

/// What the rules say about one command: git's `error:`/`warning:` lines, in order, and the
/// update to make (a deletion's old value dropped when the repository lacks it, as git does)
/// or the report's reason.
#[derive(Debug)]
pub(crate) struct Checked {
    pub(crate) messages: Vec<String>,
    pub(crate) outcome: Result<RefUpdate, String>,
}

impl Rules {
    /// Reads the rules of `repo`.
    pub(crate) fn read(repo: &Repository) -> Rules {
        let config = repo.config();
        let bare = config
            .get_bool("core.bare")
            .unwrap_or_else(|| repo.git_dir().file_name().is_none_or(|n| n != ".git"));
        let head = repo.refs().symref_target("HEAD").ok().flatten();
        Rules {
            deny_deletes: config.get_bool("receive.denyDeletes").unwrap_or(false),
            deny_non_ff: config
                .get_bool("receive.denyNonFastForwards")
                .unwrap_or(false),
            checked_out: head
                .clone()
                .filter(|_| !bare)
                .map(|h| (h, Deny::read(config.get("receive.denyCurrentBranch")))),
            current_branch: head.map(|h| (h, Deny::read(config.get("receive.denyDeleteCurrent")))),
        }
    }

    /// What git's receive-pack says of `update` before its transaction. `incoming` and `repo`
    /// give the objects (fast-forward checks, whether a deletion's old value exists).
    pub(crate) fn check(
        &self,
        update: &RefUpdate,
        incoming: Option<&ObjectDb>,
        repo: &Repository,
    ) -> Checked {
        let mut messages = Vec::new();
        let outcome = self.verdict(update, incoming, repo, &mut messages);
        Checked { messages, outcome }
    }

    fn verdict(
        &self,
        update: &RefUpdate,
        incoming: Option<&ObjectDb>,
        repo: &Repository,
        messages: &mut Vec<String>,
    ) -> Result<RefUpdate, String> {
        let name = update.name.as_str();
        let mut error = |text: String| messages.push(format!("error: {text}"));
        if check_ref_name(name).is_err() {
            error(format!("refusing to create funny ref '{name}' remotely"));
            return Err("funny refname".to_string());
        }
        if let Some((branch, deny)) = &self.checked_out {
            if branch == name {
                match deny {
                    Deny::Ignore => {}
                    Deny::Warn => messages.push("warning: updating the current branch".into()),
                    Deny::Refuse | Deny::Unset => {
                        error(format!("refusing to update checked out branch: {name}"));
                        if *deny == Deny::Unset {
                            error(UNCONFIGURED_DENY_CURRENT.to_string());
                        }
                        return Err("branch is currently checked out".to_string());
                    }
                }
            }
        }
        let mut error = |text: String| messages.push(format!("error: {text}"));
        if let (Some(_), None) = (update.old, update.new) {
            if self.deny_deletes && name.starts_with("refs/heads/") {
                error(format!("denying ref deletion for {name}"));
                return Err("deletion prohibited".to_string());
            }
            let current = self
                .current_branch
                .as_ref()
                .filter(|(b, _)| b == name)
                .map(|(_, d)| *d);
            match current {
                None | Some(Deny::Ignore) => {}
                Some(Deny::Warn) => messages.push("warning: deleting the current branch".into()),
                Some(deny) => {
                    if deny == Deny::Unset {
                        messages.push(format!("error: {UNCONFIGURED_DENY_DELETE_CURRENT}"));
                    }
                    messages.push(format!(
                        "error: refusing to delete the current branch: {name}"
                    ));
                    return Err("deletion of the current branch prohibited".to_string());
                }
            }
        }
        if let (Some(old), Some(new), true) = (
            update.old,
            update.new,
            self.deny_non_ff && name.starts_with("refs/heads/"),
        ) {
            match is_ancestor(&old, &new, incoming, repo.objects()) {
                Ok(Some(true)) => {}
                Ok(Some(false)) => {
                    messages.push(format!(
                        "error: denying non-fast-forward {name} (you should pull first)"
                    ));
                    return Err("non-fast-forward".to_string());
                }
                Ok(None) => return Err("bad ref".to_string()),
                Err(e) => return Err(e.to_string()),
            }
        }
        let mut update = update.clone();
        if update.new.is_none() {
            let old_exists = match update.old {
                Some(old) => contains(&old, incoming, repo.objects()).map_err(|e| e.to_string())?,
                None => false,
            };
            if !old_exists {
                update.old = None;
                let exists = repo.refs().resolve_full(name).ok().flatten().is_some();
                messages.push(if exists {
                    "warning: allowing deletion of corrupt ref".to_string()
                } else {
                    "warning: deleting a non-existent ref".to_string()
                });
            }
        }
        Ok(update)
    }
}

/// Which of `ids` are commits, read from the quarantine or the repository.
pub(crate) fn commits_among(
    ids: &[ObjectId],
    incoming: Option<&ObjectDb>,
    repo: &ObjectDb,
) -> HashSet<ObjectId> {
    ids.iter()
        .filter(|id| {
            let header = |db: &ObjectDb| db.header(id).ok().flatten();
            incoming
                .and_then(header)
                .or_else(|| header(repo))
                .is_some_and(|h| h.kind == ObjectKind::Commit)
        })
        .copied()
        .collect()
}

/// Whether `id` is in the quarantine or the repository.
fn contains(
    id: &ObjectId,
    incoming: Option<&ObjectDb>,
    repo: &ObjectDb,
) -> packd_odb::Result<bool> {
    if let Some(inc) = incoming {
        if inc.contains(id)? {
            return Ok(true);
        }
    }
    repo.contains(id)
}

/// Reads an object from the quarantine or the repository.
fn read(
    id: &ObjectId,
    incoming: Option<&ObjectDb>,
    repo: &ObjectDb,
) -> packd_odb::Result<Option<packd_odb::Object>> {
    if let Some(inc) = incoming {
        if let Some(o) = inc.read(id)? {
            return Ok(Some(o));
        }
    }
    repo.read(id)
}

/// Whether commit `old` is reachable from `new`; `None` when either is not a commit (git:
/// "bad ref"). Walks from `new` newest first and stops below `old`'s date (with a day of
/// slack for skewed clocks), so a fast-forward costs the commits between the two.
fn is_ancestor(
    old: &ObjectId,
    new: &ObjectId,
    incoming: Option<&ObjectDb>,
    repo: &ObjectDb,
) -> packd_odb::Result<Option<bool>> {
    let commit = |id: &ObjectId| -> packd_odb::Result<Option<packd_odb::parse::CommitInfo>> {
        match read(id, incoming, repo)? {
            Some(o) if o.kind == ObjectKind::Commit => parse_commit(id, &o.data).map(Some),
            _ => Ok(None),
        }
    };
    let (Some(old_info), Some(_)) = (commit(old)?, commit(new)?) else {
        return Ok(None);
    };
    let cutoff = old_info.time.saturating_sub(86_400);
    let mut seen = HashSet::new();
    let mut queue = VecDeque::from([*new]);
    while let Some(id) = queue.pop_front() {
        if id == *old {
            return Ok(Some(true));
        }
        if !seen.insert(id) {
            continue;
        }
        let Some(info) = commit(&id)? else { continue };
        if info.time < cutoff {
            continue;
        }
        queue.extend(info.parents);
    }
    Ok(Some(false))
}
