//! The repository's rules for ref updates in a push, as git's receive-pack applies them:
//!
//! ```text
//! receive.denyDeletes         true: "deletion prohibited"                    (default false)
//! receive.denyNonFastForwards true: "non-fast-forward" unless old is an ancestor of new
//!                             (default false)
//! receive.denyCurrentBranch   non-bare repositories only: refuse (default) / warn / ignore /
//!                             updateInstead (not supported: refused) the checked-out branch:
//!                             "branch is currently checked out"
//! receive.denyDeleteCurrent   refuse (default): "deletion of the current branch prohibited"
//! ref names                   git's check-ref-format: "funny refname"
//! ```

use packd_odb::config::parse_bool;
use packd_odb::parse::parse_commit;
use packd_odb::refs_update::{check_ref_name, RefUpdate};
use packd_odb::{ObjectDb, ObjectId, ObjectKind, Repository};
use std::collections::{HashSet, VecDeque};

/// The rules in force for one repository, read from its configuration.
#[derive(Debug, Clone)]
pub(crate) struct Rules {
    deny_deletes: bool,
    deny_non_ff: bool,
    /// The checked-out branch of a non-bare repository whose updates are refused.
    protected_branch: Option<String>,
    /// The branch HEAD names, whose deletion is refused (denyDeleteCurrent).
    current_branch: Option<String>,
}

impl Rules {
    /// Reads the rules of `repo`.
    pub(crate) fn read(repo: &Repository) -> Rules {
        let config = repo.config();
        let bare = config
            .get_bool("core.bare")
            .unwrap_or_else(|| repo.git_dir().file_name().is_none_or(|n| n != ".git"));
        let head = repo.refs().symref_target("HEAD").ok().flatten();
        // git's deny actions: a boolean, or `ignore`/`warn` (allowed), or `refuse` (the
        // default) and anything else.
        let denies = |key: &str| match config.get(key) {
            None => true,
            Some(v) if v.eq_ignore_ascii_case("ignore") || v.eq_ignore_ascii_case("warn") => false,
            Some(v) => parse_bool(v) != Some(false),
        };
        let deny_current = denies("receive.denyCurrentBranch");
        let deny_delete_current = denies("receive.denyDeleteCurrent");
        Rules {
            deny_deletes: config.get_bool("receive.denyDeletes").unwrap_or(false),
            deny_non_ff: config
                .get_bool("receive.denyNonFastForwards")
                .unwrap_or(false),
            protected_branch: if !bare && deny_current {
                head.clone()
            } else {
                None
            },
            current_branch: if deny_delete_current { head } else { None },
        }
    }

    /// Why `update` is refused, if it is. `incoming` and `repo` give the commits of a
    /// fast-forward check.
    pub(crate) fn check(
        &self,
        update: &RefUpdate,
        incoming: Option<&ObjectDb>,
        repo: &ObjectDb,
    ) -> Result<(), String> {
        if check_ref_name(&update.name).is_err() {
            return Err("funny refname".to_string());
        }
        if self.protected_branch.as_deref() == Some(update.name.as_str()) {
            return Err("branch is currently checked out".to_string());
        }
        match (update.old, update.new) {
            (_, None) => {
                if self.deny_deletes {
                    return Err("deletion prohibited".to_string());
                }
                if self.current_branch.as_deref() == Some(update.name.as_str()) {
                    return Err("deletion of the current branch prohibited".to_string());
                }
            }
            (Some(old), Some(new)) if self.deny_non_ff => {
                let ff = is_ancestor(&old, &new, incoming, repo).map_err(|e| e.to_string())?;
                if !ff {
                    return Err("non-fast-forward".to_string());
                }
            }
            _ => {}
        }
        Ok(())
    }
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

/// Whether commit `old` is reachable from `new` (both commits; anything else is not a
/// fast-forward). Walks from `new` newest first and stops below `old`'s date (with a day of
/// slack for skewed clocks), so a fast-forward costs the commits between the two.
fn is_ancestor(
    old: &ObjectId,
    new: &ObjectId,
    incoming: Option<&ObjectDb>,
    repo: &ObjectDb,
) -> packd_odb::Result<bool> {
    let commit = |id: &ObjectId| -> packd_odb::Result<Option<packd_odb::parse::CommitInfo>> {
        match read(id, incoming, repo)? {
            Some(o) if o.kind == ObjectKind::Commit => parse_commit(id, &o.data).map(Some),
            _ => Ok(None),
        }
    };
    let Some(old_info) = commit(old)? else {
        return Ok(false);
    };
    let cutoff = old_info.time.saturating_sub(86_400);
    let mut seen = HashSet::new();
    let mut queue = VecDeque::from([*new]);
    while let Some(id) = queue.pop_front() {
        if id == *old {
            return Ok(true);
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
    Ok(false)
}
